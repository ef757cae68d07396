/* STUB: to be replaced by the real kernels. */
#include "cpu_kernels.h"

cx_code cpu_create(cx_op_id op, const cx_params *ps, cx_tensor *out, cx_status *st) {
    return cx_fail(st, CX_EUNSUPPORTED, "cpu: create kernels are not written yet");
}
