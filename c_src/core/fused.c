/* fused: a chain of f32 elementwise ops as one op (fused.h). */
#include "fused.h"

#include "decompose.h"

#include <stdatomic.h>

static bool op_ok(cx_op_id op, int arity) {
    if (cx_op_integer_only(op)) return false;
    cx_op_kind kind = cx_op_table[op].kind;
    bool ok = arity == 1   ? kind == CX_KIND_UNARY || kind == CX_KIND_UNARY_FLOAT
              : arity == 2 ? kind == CX_KIND_BINARY || kind == CX_KIND_BINARY_FLOAT
                           : false;
    if (!ok) return false;
    /* and on f32 it gives f32 */
    cx_desc in[2] = {{CX_F32, 1, {2}}, {CX_F32, 1, {2}}}, out;
    cx_dtype compute[2];
    cx_params ps;
    cx_params_clear(&ps);
    cx_status st = {CX_OK, ""};
    return cx_infer_op(op, in, arity, &ps, &out, compute, &st) == CX_OK && out.dtype == CX_F32;
}

/* The answer of op_ok per (op, arity), found once: every fused call decodes its code, asking
 * for each instruction, and the inference behind it (with a zeroed parameter record of some
 * kilobytes) was a fifth of an LSTM's run of 300 small fused steps (perf). 0 unknown, 1 yes,
 * 2 no; threads that race store the same answer. */
static _Atomic unsigned char known[CX_OP_COUNT][2];

bool cx_fused_op_ok(cx_op_id op, int arity) {
    if ((int)op < 0 || (int)op >= CX_OP_COUNT || arity < 1 || arity > 2) return false;
    unsigned char k = atomic_load_explicit(&known[op][arity - 1], memory_order_relaxed);
    if (!k) {
        k = op_ok(op, arity) ? 1 : 2;
        atomic_store_explicit(&known[op][arity - 1], k, memory_order_relaxed);
    }
    return k == 1;
}

bool cx_fused_type_ok(cx_dtype t) {
    return t == CX_F32 || t == CX_F16 || t == CX_BF16;
}

/* Whether the chain's last value reads an input for which reads[k] holds; reads has room for
 * every value of the chain. */
static bool last_reads(const cx_fused_code *c, int n_in, bool *reads) {
    for (int k = 0; k < c->n; k++)
        reads[n_in + k] = reads[c->a[k]] || (c->b[k] >= 0 && reads[c->b[k]]);
    return reads[n_in + c->n - 1];
}

bool cx_fused_is_row(const cx_desc *d, const cx_desc *full) {
    if (d->rank > full->rank) return false;
    int lead = 0;
    while (lead < d->rank && d->shape[lead] == 1) lead++;
    int len = d->rank - lead;
    for (int k = 0; k < len; k++)
        if (d->shape[lead + k] != full->shape[full->rank - len + k]) return false;
    return true;
}

bool cx_fused_is_channel(const cx_desc *d, const cx_desc *full, int64_t *plane) {
    if (d->rank == 0 || d->rank > full->rank) return false;
    int lead = full->rank - d->rank, first = -1, last = -1;
    for (int a = 0; a < d->rank; a++)
        if (d->shape[a] != 1) {
            if (first < 0) first = a;
            last = a;
        }
    if (first < 0) return false; /* one element: a row */
    for (int a = first; a <= last; a++)
        if (d->shape[a] != full->shape[lead + a]) return false;
    int64_t p = 1;
    for (int a = last + 1; a < d->rank; a++) p *= full->shape[lead + a];
    if (p <= 1) return false; /* nothing after it: a row */
    if (plane) *plane = p;
    return true;
}

bool cx_fused_broadcasts(const cx_desc *d, const cx_desc *full) {
    return d->rank == 0 || cx_desc_same_shape(d, full) || cx_fused_is_row(d, full) ||
           cx_fused_is_channel(d, full, NULL);
}

const cx_desc *cx_fused_full_input(const cx_desc *in, int n_in) {
    for (int f = 0; f < n_in; f++) {
        if (in[f].rank == 0) continue;
        bool ok = true;
        for (int k = 0; k < n_in && ok; k++) ok = cx_fused_broadcasts(&in[k], &in[f]);
        if (ok) return &in[f];
    }
    return NULL;
}

bool cx_fused_has_rows(const cx_desc *in, int n_in) {
    const cx_desc *full = cx_fused_full_input(in, n_in);
    for (int k = 0; full && k < n_in; k++)
        if (in[k].rank > 0 && !cx_desc_same_shape(&in[k], full)) return true;
    return false;
}

const cx_desc *cx_fused_result_shape(const cx_fused_code *c, const cx_desc *in, int n_in) {
    /* a value has the full shape if it reads an input that has it */
    const cx_desc *full = cx_fused_full_input(in, n_in);
    bool w[CX_FUSED_MAX_INPUTS + CX_FUSED_MAX_CODE];
    for (int k = 0; k < n_in; k++) w[k] = full && cx_desc_same_shape(&in[k], full);
    return last_reads(c, n_in, w) ? full : NULL;
}

cx_code cx_fused_decode(const cx_params *ps, int n_in, cx_fused_code *c, cx_status *st) {
    return cx_fused_decode_param(ps, CX_P_CODE, n_in, c, st);
}

cx_code cx_fused_decode_param(const cx_params *ps, cx_param_id id, int n_in, cx_fused_code *c,
                              cx_status *st) {
    const cx_param *p = cx_param_get(ps, id);
    if (!p || p->n == 0 || p->n % 3 != 0)
        return cx_fail(st, CX_EINVAL,
                       "fused: expected code as instructions of three integers {op, a, b}");
    if (n_in < 1 || n_in > CX_FUSED_MAX_INPUTS)
        return cx_fail(st, CX_EINVAL, "fused: expected 1 to %d tensors, got: %d",
                       CX_FUSED_MAX_INPUTS, n_in);
    c->n = p->n / 3;
    for (int k = 0; k < c->n; k++) {
        int64_t op = p->i[3 * k], a = p->i[3 * k + 1], b = p->i[3 * k + 2];
        int regs = n_in + k, arity = b < 0 ? 1 : 2;
        if (op < 0 || op >= CX_OP_COUNT || !cx_fused_op_ok((cx_op_id)op, arity))
            return cx_fail(st, CX_EINVAL,
                           "fused: instruction %d: %lld is not an elementwise float op of %d "
                           "argument(s)",
                           k, (long long)op, arity);
        if (a < 0 || a >= regs || (arity == 2 && b >= regs))
            return cx_fail(st, CX_EINVAL,
                           "fused: instruction %d reads a value not yet computed (there are %d)", k,
                           regs);
        c->op[k] = (cx_op_id)op;
        c->a[k] = (int)a;
        c->b[k] = (int)b;
    }
    return CX_OK;
}

CX_INFER(cx_infer_fused) {
    cx_fused_code c;
    if (cx_fused_decode(ps, n_in, &c, st) != CX_OK) return st->code;
    /* one float type of 32 bits or less: each instruction rounds to it, as the op alone */
    bool tensors = false;
    cx_dtype type = in[0].dtype;
    for (int k = 0; k < n_in; k++) {
        if (!cx_fused_type_ok(in[k].dtype))
            return cx_fail(st, CX_EINVAL,
                           "fused: expected f32, f16 or bf16 tensors, got %s for tensor %d",
                           cx_dtype_name(in[k].dtype), k);
        if (in[k].dtype != type)
            return cx_fail(st, CX_EINVAL,
                           "fused: expected tensors of one type, got %s and %s for tensor %d",
                           cx_dtype_name(type), cx_dtype_name(in[k].dtype), k);
        tensors |= in[k].rank > 0;
    }
    const cx_desc *full = cx_fused_full_input(in, n_in);
    if (tensors && !full) {
        /* two shapes of which neither is the other or a row of it */
        const cx_desc *a = NULL, *b = NULL;
        for (int k = 0; k < n_in && !b; k++) {
            if (in[k].rank == 0) continue;
            if (!a)
                a = &in[k];
            else if (!cx_desc_same_shape(&in[k], a) && !cx_fused_is_row(&in[k], a) &&
                     !cx_fused_is_row(a, &in[k]) && !cx_fused_is_channel(&in[k], a, NULL) &&
                     !cx_fused_is_channel(a, &in[k], NULL))
                b = &in[k];
        }
        return cx_fail(st, CX_EINVAL,
                       "fused: expected tensors of one shape, rows or channel vectors that "
                       "broadcast to it (a bias) or numbers, got %s and %s",
                       CX_SHAPE_STR(a), CX_SHAPE_STR(b ? b : a));
    }
    for (int k = 0; k < n_in; k++) compute[k] = type;
    const cx_desc *shape = cx_fused_result_shape(&c, in, n_in);
    /* a result of rows only would have a row's shape, not the chain's */
    bool nonscalar[CX_FUSED_MAX_INPUTS + CX_FUSED_MAX_CODE];
    for (int k = 0; k < n_in; k++) nonscalar[k] = in[k].rank > 0;
    if (last_reads(&c, n_in, nonscalar) && !shape)
        return cx_fail(st, CX_EINVAL,
                       "fused: the result reads rows only; it must read a tensor of the full "
                       "shape %s",
                       CX_SHAPE_STR(full));
    cx_desc chain = shape ? *shape : (cx_desc){type, 0, {0}};
    int64_t reduce = cx_param_has(ps, CX_P_REDUCE) ? ps->p[CX_P_REDUCE].i[0] : 0;
    if (reduce != 0 && reduce != 1)
        return cx_fail(st, CX_EINVAL,
                       "fused: expected reduce to be 0 (:none) or 1 (:sum), got: %lld",
                       (long long)reduce);
    cx_param_put_int(ps, CX_P_REDUCE, reduce);
    if (!reduce) {
        if (cx_param_has(ps, CX_P_AXES))
            return cx_fail(st, CX_EINVAL, "fused: axes are given only with reduce: :sum");
        *out = chain;
        return CX_OK;
    }
    if (cx_reduce_shape(op, &chain, ps, out, st) != CX_OK) return st->code;
    out->dtype = type;
    return CX_OK;
}

cx_val cx_decompose_fused(cx_graph *g, const cx_val *in, int n_in, const cx_params *ps) {
    cx_fused_code c;
    cx_status st = {CX_OK, ""};
    if (cx_fused_decode(ps, n_in, &c, &st) != CX_OK) return cx_g_fail(g, "%s", st.message);
    cx_val regs[CX_FUSED_MAX_INPUTS + CX_FUSED_MAX_CODE];
    for (int k = 0; k < n_in; k++) regs[k] = in[k];
    for (int k = 0; k < c.n; k++)
        regs[n_in + k] = c.b[k] < 0 ? cx_g_unary(g, c.op[k], regs[c.a[k]])
                                    : cx_g_binary(g, c.op[k], regs[c.a[k]], regs[c.b[k]]);
    cx_val r = regs[n_in + c.n - 1];
    if (!ps->p[CX_P_REDUCE].i[0]) return r;
    const cx_param *axes = &ps->p[CX_P_AXES];
    return cx_g_reduce(g, CX_OP_SUM, r, axes->i, axes->n, ps->p[CX_P_KEEP_AXES].i[0] != 0);
}

/* exp(a + b) * a on two {2, 3} tensors */
void cx_sample_fused(cx_op_id op, cx_dtype t, cx_desc *in, int *n_in, cx_params *ps) {
    (void)op;
    *n_in = 2;
    in[0] = in[1] = (cx_desc){t, 2, {2, 3}};
    const int64_t code[9] = {CX_OP_ADD, 0, 1, CX_OP_EXP, 2, -1, CX_OP_MULTIPLY, 3, 0};
    cx_param_put_ints(ps, CX_P_CODE, code, 9);
}

bool cx_fused_rows(const cx_fused_code *c, const cx_desc *in, int n_in, const cx_params *ps,
                   int64_t *rows, int64_t *cols) {
    const cx_desc *shape = cx_fused_result_shape(c, in, n_in);
    const cx_param *axes = &ps->p[CX_P_AXES];
    int rank = shape ? shape->rank : 0;
    *rows = *cols = 1;
    for (int k = 0; k < axes->n; k++)
        if (axes->i[k] != rank - axes->n + k) return false;
    for (int a = 0; a < rank; a++) *(a < rank - axes->n ? rows : cols) *= shape->shape[a];
    return true;
}
