/* STUB: to be replaced by the real kernels. */
#include "cpu_kernels.h"

cx_code cpu_reduce(cx_op_id op, const cx_tensor *in, const cx_params *ps, cx_tensor *out, cx_status *st) {
    return cx_fail(st, CX_EUNSUPPORTED, "cpu: reduce kernels are not written yet");
}
