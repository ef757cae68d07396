/* STUB: to be replaced by the real kernels. */
#include "cpu_kernels.h"

cx_code cpu_dot(const cx_tensor *a, const cx_tensor *b, const cx_params *ps, cx_tensor *out, cx_status *st) {
    return cx_fail(st, CX_EUNSUPPORTED, "cpu: dot kernels are not written yet");
}
