/* STUB: to be replaced by the real kernels. */
#include "cpu_kernels.h"

cx_code cpu_elementwise(cx_op_id op, const cx_tensor *const *in, int n_in, cx_tensor *out, cx_status *st) {
    return cx_fail(st, CX_EUNSUPPORTED, "cpu: elementwise kernels are not written yet");
}
