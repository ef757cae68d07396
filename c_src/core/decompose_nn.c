/* Composites of neural-network layers, activations and losses: inference and decomposition. */
#include "decompose.h"

#define OPNAME cx_op_table[op].name

/* One tensor and an axis (default -1); the result has its shape, in a floating type. */
CX_INFER(cx_infer_softmax) {
    if (cx_check_arity(op, n_in, 1, st)) return st->code;
    int64_t axis = cx_param_has(ps, CX_P_AXIS) ? ps->p[CX_P_AXIS].i[0] : -1;
    if (cx_normalize_axis(op, axis, in[0].rank, &axis, st)) return st->code;
    cx_param_put_int(ps, CX_P_AXIS, axis);
    *out = in[0];
    out->dtype = cx_dtype_to_float(in[0].dtype);
    compute[0] = in[0].dtype;
    return CX_OK;
}

cx_val cx_decompose_softmax(cx_graph *g, const cx_val *in, int n_in, const cx_params *ps) {
    int64_t axis = ps->p[CX_P_AXIS].i[0];
    cx_val x = cx_g_cast(g, in[0], cx_dtype_to_float(cx_g_type(g, in[0])));
    cx_val m = cx_g_reduce(g, CX_OP_REDUCE_MAX, x, &axis, 1, true);
    cx_val e = cx_g_unary(g, CX_OP_EXP, cx_g_binary(g, CX_OP_SUBTRACT, x, m));
    cx_val s = cx_g_reduce(g, CX_OP_SUM, e, &axis, 1, true);
    return cx_g_binary(g, CX_OP_DIVIDE, e, s);
}
