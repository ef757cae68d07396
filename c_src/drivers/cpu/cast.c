/* STUB: to be replaced by the real kernels. */
#include "cpu_kernels.h"

cx_code cpu_cast(const cx_tensor *in, cx_tensor *out, cx_status *st) {
    return cx_fail(st, CX_EUNSUPPORTED, "cpu: cast kernels are not written yet");
}
