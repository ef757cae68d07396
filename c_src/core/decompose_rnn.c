/* recurrent: a recurrent layer over a sequence (ONNX's LSTM, GRU and RNN with their default
 * activations) from the inputs' products already made. Inference, the decomposition into each
 * step's dot and elementwise ops, and the sample for the capability tables.
 *
 * Why one op for the whole sequence: run step by step, a sequence of T steps is some ten ops a
 * step, each its own dispatch, its own result and, on a device with threads, its own wake-up,
 * where the work of a step at batch 1 is one small product; a device that runs the op natively
 * keeps the states in place and runs each step as one product and one pass over the gates. */
#include <stdlib.h>

#include "decompose.h"

#define OPNAME cx_op_table[op].name

static int gates_of(int64_t cell) {
    return cell == CX_CELL_LSTM ? 4 : cell == CX_CELL_GRU ? 3 : 1;
}

/* input {steps, batch, gates * hidden}, weights {gates * hidden, hidden}, bias {gates * hidden},
 * h0 and c0 {batch, hidden}; cell and reverse. */
CX_INFER(cx_infer_recurrent) {
    if (cx_check_arity(op, n_in, 5, st)) return st->code;
    int64_t cell = cx_param_has(ps, CX_P_CELL) ? ps->p[CX_P_CELL].i[0] : CX_CELL_LSTM;
    if (cell < 0 || cell >= CX_CELL_COUNT)
        return cx_fail(st, CX_EINVAL,
                       "%s: expected cell to be one of [:lstm, :gru, :tanh] (0..2), got: %lld",
                       OPNAME, (long long)cell);
    cx_param_put_int(ps, CX_P_CELL, cell);
    cx_param_put_int(ps, CX_P_REVERSE, cx_param_bool(ps, CX_P_REVERSE, false));
    const cx_desc *x = &in[0], *w = &in[1], *b = &in[2];
    if (w->rank != 2)
        return cx_fail(st, CX_EINVAL,
                       "%s: expected weights to have shape {gates * hidden, hidden}, got: %s",
                       OPNAME, CX_SHAPE_STR(w));
    int gates = gates_of(cell);
    int64_t hidden = w->shape[1], width = gates * hidden;
    if (w->shape[0] != width)
        return cx_fail(st, CX_EINVAL,
                       "%s: expected weights of a %s cell to have shape {%lld, %lld} (%d gates of "
                       "%lld), got: %s",
                       OPNAME,
                       cell == CX_CELL_LSTM  ? ":lstm"
                       : cell == CX_CELL_GRU ? ":gru"
                                             : ":tanh",
                       (long long)width, (long long)hidden, gates, (long long)hidden,
                       CX_SHAPE_STR(w));
    if (x->rank != 3 || x->shape[2] != width)
        return cx_fail(st, CX_EINVAL,
                       "%s: expected input to have shape {steps, batch, %lld}, got: %s", OPNAME,
                       (long long)width, CX_SHAPE_STR(x));
    if (b->rank != 1 || b->shape[0] != width)
        return cx_fail(st, CX_EINVAL, "%s: expected bias to have shape {%lld}, got: %s", OPNAME,
                       (long long)width, CX_SHAPE_STR(b));
    int64_t batch = x->shape[1];
    for (int k = 3; k < 5; k++)
        if (in[k].rank != 2 || in[k].shape[0] != batch || in[k].shape[1] != hidden)
            return cx_fail(st, CX_EINVAL, "%s: expected %s to have shape {%lld, %lld}, got: %s",
                           OPNAME, k == 3 ? "h0" : "c0", (long long)batch, (long long)hidden,
                           CX_SHAPE_STR(&in[k]));
    cx_dtype t = cx_merged_float(in, 5);
    if (cx_dtype_is_complex(t))
        return cx_fail(st, CX_EINVAL, "%s: expected real tensors, got the type %s", OPNAME,
                       cx_dtype_name(t));
    *out = (cx_desc){t, 3, {x->shape[0], batch, cell == CX_CELL_LSTM ? 2 * hidden : hidden}};
    if (cx_check_shape(op, out->shape, out->rank, st)) return st->code;
    for (int k = 0; k < 5; k++) compute[k] = in[k].dtype;
    return CX_OK;
}

void cx_sample_recurrent(cx_op_id op, cx_dtype t, cx_desc *in, int *n_in, cx_params *ps) {
    (void)op;
    (void)ps;
    in[0] = (cx_desc){t, 3, {2, 2, 12}};
    in[1] = (cx_desc){t, 2, {12, 3}};
    in[2] = (cx_desc){t, 1, {12}};
    in[3] = in[4] = (cx_desc){t, 2, {2, 3}};
    *n_in = 5;
}

/* columns k * hidden .. (k + 1) * hidden of a {batch, gates * hidden} value */
static cx_val gate(cx_graph *g, cx_val m, int k, int64_t hidden) {
    int64_t start[2] = {0, k * hidden}, len[2] = {cx_g_dim(g, m, 0), hidden};
    return cx_g_slice(g, m, start, len, NULL);
}

/* Each step: p = h R^T + Rb, then the cell's gates on input_t and p; the result's step values
 * in time order, concatenated. f16 and bf16 compute in f32 and round once at the end. */
cx_val cx_decompose_recurrent(cx_graph *g, const cx_val *in, int n_in, const cx_params *ps) {
    cx_dtype out = cx_g_type(g, in[0]);
    for (int k = 1; k < n_in; k++) out = cx_dtype_merge(out, cx_g_type(g, in[k]));
    out = cx_dtype_to_float(out);
    cx_dtype t = cx_work_type(out);
    int64_t cell = ps->p[CX_P_CELL].i[0];
    bool reverse = ps->p[CX_P_REVERSE].i[0] != 0;
    int64_t steps = cx_g_dim(g, in[0], 0), batch = cx_g_dim(g, in[0], 1),
            width = cx_g_dim(g, in[0], 2), hidden = cx_g_dim(g, in[1], 1);
    int64_t step_width = cell == CX_CELL_LSTM ? 2 * hidden : hidden;
    if (steps == 0) {
        int64_t shape[3] = {0, batch, step_width};
        return cx_g_full(g, 0, out, shape, 3);
    }
    cx_val x = cx_g_cast(g, in[0], t), r = cx_g_cast(g, in[1], t), rb = cx_g_cast(g, in[2], t);
    cx_val h = cx_g_cast(g, in[3], t), c = cx_g_cast(g, in[4], t);
    cx_val *ys = malloc(sizeof(cx_val) * (size_t)steps);
    if (!ys) return cx_g_fail(g, "out of host memory");
    const int64_t one[1] = {1};
    for (int64_t s = 0; s < steps; s++) {
        int64_t at = reverse ? steps - 1 - s : s;
        int64_t start[3] = {at, 0, 0}, len[3] = {1, batch, width}, flat[2] = {batch, width};
        cx_val xt = cx_g_reshape(g, cx_g_slice(g, x, start, len, NULL), flat, 2);
        cx_val p =
            cx_g_binary(g, CX_OP_ADD, cx_g_dot(g, h, one, 1, NULL, 0, r, one, 1, NULL, 0), rb);
        cx_val y;
        if (cell == CX_CELL_TANH) {
            h = cx_g_unary(g, CX_OP_TANH, cx_g_binary(g, CX_OP_ADD, xt, p));
            y = h;
        } else if (cell == CX_CELL_LSTM) {
            cx_val a = cx_g_binary(g, CX_OP_ADD, xt, p);
            cx_val i = cx_g_unary(g, CX_OP_SIGMOID, gate(g, a, 0, hidden));
            cx_val o = cx_g_unary(g, CX_OP_SIGMOID, gate(g, a, 1, hidden));
            cx_val f = cx_g_unary(g, CX_OP_SIGMOID, gate(g, a, 2, hidden));
            cx_val z = cx_g_unary(g, CX_OP_TANH, gate(g, a, 3, hidden));
            cx_g_drop(g, a);
            c = cx_g_binary(g, CX_OP_ADD, cx_g_binary(g, CX_OP_MULTIPLY, f, c),
                            cx_g_binary(g, CX_OP_MULTIPLY, i, z));
            h = cx_g_binary(g, CX_OP_MULTIPLY, o, cx_g_unary(g, CX_OP_TANH, c));
            cx_val both[2] = {h, c};
            y = cx_g_concatenate(g, both, 2, 1);
        } else {
            /* z, r, h: the reset gate times the recurrent product (linear_before_reset) */
            cx_val z = cx_g_unary(
                g, CX_OP_SIGMOID,
                cx_g_binary(g, CX_OP_ADD, gate(g, xt, 0, hidden), gate(g, p, 0, hidden)));
            cx_val rr = cx_g_unary(
                g, CX_OP_SIGMOID,
                cx_g_binary(g, CX_OP_ADD, gate(g, xt, 1, hidden), gate(g, p, 1, hidden)));
            cx_val n =
                cx_g_unary(g, CX_OP_TANH,
                           cx_g_binary(g, CX_OP_ADD, gate(g, xt, 2, hidden),
                                       cx_g_binary(g, CX_OP_MULTIPLY, rr, gate(g, p, 2, hidden))));
            cx_val keep = cx_g_binary(g, CX_OP_SUBTRACT, cx_g_scalar(g, 1, t), z);
            h = cx_g_binary(g, CX_OP_ADD, cx_g_binary(g, CX_OP_MULTIPLY, keep, n),
                            cx_g_binary(g, CX_OP_MULTIPLY, z, h));
            y = h;
        }
        cx_g_drop(g, xt);
        cx_g_drop(g, p);
        int64_t shape[3] = {1, batch, step_width};
        ys[at] = cx_g_reshape(g, y, shape, 3);
    }
    cx_val y = steps == 1 ? ys[0] : cx_g_concatenate(g, ys, (int)steps, 0);
    free(ys);
    return cx_g_cast(g, y, out);
}
