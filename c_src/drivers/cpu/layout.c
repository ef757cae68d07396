/* STUB: to be replaced by the real kernels. */
#include "cpu_kernels.h"

cx_code cpu_layout(cx_op_id op, const cx_tensor *const *in, int n_in, const cx_params *ps, cx_tensor *out, cx_status *st) {
    return cx_fail(st, CX_EUNSUPPORTED, "cpu: layout kernels are not written yet");
}
