#include "graph.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const cx_desc placeholder = {CX_F32, 0, {0}};

static bool ok(cx_graph *g) {
    return g->rc == CX_OK;
}

static cx_val add_value(cx_graph *g, const cx_desc *d, cx_tensor *t, bool owned) {
    if (g->n == g->cap) {
        int cap = g->cap ? g->cap * 2 : 16;
        cx_gval *v = realloc(g->v, sizeof(*v) * (size_t)cap);
        if (!v) {
            g->rc = cx_fail(g->st, CX_ENOMEM, "%s: out of host memory", cx_op_table[g->op].name);
            return -1;
        }
        g->v = v;
        g->cap = cap;
    }
    g->v[g->n] = (cx_gval){*d, t, owned};
    return g->n++;
}

static bool valid(cx_graph *g, cx_val v) {
    if (!ok(g)) return false;
    if (v < 0 || v >= g->n || (!g->planning && !g->v[v].t)) {
        g->rc = cx_fail(g->st, CX_EINVAL, "%s: decomposition used value %d, which does not exist",
                        cx_op_table[g->op].name, v);
        return false;
    }
    return true;
}

const cx_desc *cx_g_desc(cx_graph *g, cx_val v) {
    return valid(g, v) ? &g->v[v].desc : &placeholder;
}

int64_t cx_g_dim(cx_graph *g, cx_val v, int axis) {
    const cx_desc *d = cx_g_desc(g, v);
    if (axis < 0) axis += d->rank;
    return axis >= 0 && axis < d->rank ? d->shape[axis] : 0;
}

cx_val cx_g_fail(cx_graph *g, const char *fmt, ...) {
    if (!ok(g)) return -1;
    char msg[400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    g->rc = cx_fail(g->st, CX_EINVAL, "%s: %s", cx_op_table[g->op].name, msg);
    return -1;
}

/* cx_g_op on parameters of the graph's own, which planning normalises in place. */
static cx_val step(cx_graph *g, cx_op_id op, const cx_val *in, int n_in, cx_params *local) {
    if (!ok(g)) return -1;
    if (n_in > CX_MAX_INPUTS) return cx_g_fail(g, "a step takes more than %d inputs", n_in);
    for (int k = 0; k < n_in; k++)
        if (!valid(g, in[k])) return -1;
    if (g->planning) {
        cx_desc descs[CX_MAX_INPUTS], out;
        descs[0] = placeholder; /* creation ops have none */
        for (int k = 0; k < n_in; k++) descs[k] = g->v[in[k]].desc;
        g->rc = cx_explain_at(op, g->dev, descs, n_in, local, g->ex, g->depth, &out, g->st);
        return ok(g) ? add_value(g, &out, NULL, true) : -1;
    }
    cx_tensor *args[CX_MAX_INPUTS];
    args[0] = NULL;
    for (int k = 0; k < n_in; k++) args[k] = g->v[in[k]].t;
    cx_tensor *t = malloc(sizeof *t);
    if (!t) {
        g->rc = cx_fail(g->st, CX_ENOMEM, "%s: out of host memory", cx_op_table[g->op].name);
        return -1;
    }
    g->rc = cx_run(op, g->dev, args, n_in, local, t, g->st);
    if (!ok(g)) {
        free(t);
        return -1;
    }
    cx_val v = add_value(g, &t->desc, t, true);
    if (v < 0) {
        cx_tensor_free(t);
        free(t);
    }
    return v;
}

cx_val cx_g_op(cx_graph *g, cx_op_id op, const cx_val *in, int n_in, const cx_params *ps) {
    if (!ok(g)) return -1;
    cx_params local;
    if (ps)
        cx_params_copy(&local, ps);
    else
        cx_params_clear(&local);
    return step(g, op, in, n_in, &local);
}

cx_val cx_g_unary(cx_graph *g, cx_op_id op, cx_val a) {
    return cx_g_op(g, op, &a, 1, NULL);
}

cx_val cx_g_binary(cx_graph *g, cx_op_id op, cx_val a, cx_val b) {
    cx_val in[2] = {a, b};
    return cx_g_op(g, op, in, 2, NULL);
}

cx_val cx_g_select(cx_graph *g, cx_val pred, cx_val on_true, cx_val on_false) {
    cx_val in[3] = {pred, on_true, on_false};
    return cx_g_op(g, CX_OP_SELECT, in, 3, NULL);
}

/* Whether v is an integer int64_t holds; the range is checked before converting, which C
 * leaves undefined outside it (-inf reached here once, from a max-pool's padding of s8). */
static bool int64_exact(double v) {
    return v >= -0x1p63 && v < 0x1p63 && v == (double)(int64_t)v;
}

/* A double as int64_t, saturated, NaN as 0 (as_type's rule). */
static int64_t to_int64(double v) {
    if (v != v) return 0;
    if (v <= -0x1p63) return INT64_MIN;
    if (v >= 0x1p63) return INT64_MAX;
    return (int64_t)v;
}

cx_val cx_g_full(cx_graph *g, double value, cx_dtype t, const int64_t *shape, int rank) {
    cx_params ps;
    cx_params_clear(&ps);
    if (cx_dtype_is_float(t) || !int64_exact(value))
        cx_param_put_float(&ps, CX_P_VALUE, value);
    else
        cx_param_put_int(&ps, CX_P_VALUE, (int64_t)value);
    cx_param_put_ints(&ps, CX_P_SHAPE, shape, rank);
    cx_param_put_int(&ps, CX_P_TYPE, t);
    return step(g, CX_OP_FULL, NULL, 0, &ps);
}

cx_val cx_g_scalar(cx_graph *g, double value, cx_dtype t) {
    return cx_g_full(g, value, t, NULL, 0);
}

cx_val cx_g_binary_scalar(cx_graph *g, cx_op_id op, cx_val a, double value) {
    cx_val s = cx_g_scalar(g, value, cx_g_type(g, a));
    return cx_g_binary(g, op, a, s);
}

cx_val cx_g_cast(cx_graph *g, cx_val a, cx_dtype t) {
    if (!valid(g, a)) return -1;
    if (g->v[a].desc.dtype == t) return a;
    cx_params ps;
    cx_params_clear(&ps);
    cx_param_put_int(&ps, CX_P_TYPE, t);
    return step(g, CX_OP_AS_TYPE, &a, 1, &ps);
}

cx_val cx_g_reduce(cx_graph *g, cx_op_id op, cx_val a, const int64_t *axes, int n_axes,
                   bool keep_axes) {
    cx_params ps;
    cx_params_clear(&ps);
    if (n_axes >= 0) cx_param_put_ints(&ps, CX_P_AXES, axes, n_axes);
    cx_param_put_int(&ps, CX_P_KEEP_AXES, keep_axes);
    return step(g, op, &a, 1, &ps);
}

cx_val cx_g_reshape(cx_graph *g, cx_val a, const int64_t *shape, int rank) {
    cx_params ps;
    cx_params_clear(&ps);
    cx_param_put_ints(&ps, CX_P_SHAPE, shape, rank);
    return step(g, CX_OP_RESHAPE, &a, 1, &ps);
}

cx_val cx_g_transpose(cx_graph *g, cx_val a, const int64_t *perm) {
    cx_params ps;
    cx_params_clear(&ps);
    cx_param_put_ints(&ps, CX_P_AXES, perm, cx_g_rank(g, a));
    return step(g, CX_OP_TRANSPOSE, &a, 1, &ps);
}

cx_val cx_g_broadcast(cx_graph *g, cx_val a, const int64_t *shape, int rank, const int64_t *axes) {
    cx_params ps;
    cx_params_clear(&ps);
    cx_param_put_ints(&ps, CX_P_SHAPE, shape, rank);
    if (axes) cx_param_put_ints(&ps, CX_P_AXES, axes, cx_g_rank(g, a));
    return step(g, CX_OP_BROADCAST, &a, 1, &ps);
}

cx_val cx_g_slice(cx_graph *g, cx_val a, const int64_t *start, const int64_t *lengths,
                  const int64_t *strides) {
    cx_params ps;
    cx_params_clear(&ps);
    int rank = cx_g_rank(g, a);
    cx_param_put_ints(&ps, CX_P_START, start, rank);
    cx_param_put_ints(&ps, CX_P_LENGTHS, lengths, rank);
    if (strides) cx_param_put_ints(&ps, CX_P_STRIDES, strides, rank);
    return step(g, CX_OP_SLICE, &a, 1, &ps);
}

cx_val cx_g_pad(cx_graph *g, cx_val a, double value, const int64_t *pads) {
    cx_params ps;
    cx_params_clear(&ps);
    if (cx_dtype_is_float(cx_g_type(g, a)))
        cx_param_put_float(&ps, CX_P_VALUE, value);
    else
        cx_param_put_int(&ps, CX_P_VALUE, to_int64(value));
    cx_param_put_ints(&ps, CX_P_PADS, pads, 3 * cx_g_rank(g, a));
    return step(g, CX_OP_PAD, &a, 1, &ps);
}

cx_val cx_g_concatenate(cx_graph *g, const cx_val *vals, int n, int axis) {
    cx_params ps;
    cx_params_clear(&ps);
    cx_param_put_int(&ps, CX_P_AXIS, axis);
    return step(g, CX_OP_CONCATENATE, vals, n, &ps);
}

cx_val cx_g_dot(cx_graph *g, cx_val a, const int64_t *contract_a, int n_ca, const int64_t *batch_a,
                int n_ba, cx_val b, const int64_t *contract_b, int n_cb, const int64_t *batch_b,
                int n_bb) {
    cx_params ps;
    cx_params_clear(&ps);
    cx_param_put_ints(&ps, CX_P_CONTRACT_A, contract_a, n_ca);
    cx_param_put_ints(&ps, CX_P_BATCH_A, batch_a, n_ba);
    cx_param_put_ints(&ps, CX_P_CONTRACT_B, contract_b, n_cb);
    cx_param_put_ints(&ps, CX_P_BATCH_B, batch_b, n_bb);
    cx_val in[2] = {a, b};
    return step(g, CX_OP_DOT, in, 2, &ps);
}

cx_val cx_g_iota(cx_graph *g, const int64_t *shape, int rank, int axis, cx_dtype t) {
    cx_params ps;
    cx_params_clear(&ps);
    cx_param_put_ints(&ps, CX_P_SHAPE, shape, rank);
    if (axis >= 0) cx_param_put_int(&ps, CX_P_AXIS, axis);
    cx_param_put_int(&ps, CX_P_TYPE, t);
    return step(g, CX_OP_IOTA, NULL, 0, &ps);
}

void cx_g_drop(cx_graph *g, cx_val v) {
    if (v < 0 || v >= g->n || !g->v[v].owned || !g->v[v].t) return;
    cx_tensor_free(g->v[v].t);
    free(g->v[v].t);
    g->v[v].t = NULL;
}

static void release(cx_graph *g) {
    for (int k = 0; k < g->n; k++) cx_g_drop(g, k);
    free(g->v);
}

cx_code cx_graph_run(cx_op_id op, cx_device *dev, cx_tensor *const *in, int n_in,
                     const cx_params *ps, cx_tensor *out, cx_status *st) {
    cx_graph g = {.dev = dev, .op = op, .st = st, .rc = CX_OK};
    cx_tensor_clear(out);
    cx_val ids[CX_MAX_INPUTS];
    for (int k = 0; k < n_in; k++) ids[k] = add_value(&g, &in[k]->desc, in[k], false);
    cx_val r = ok(&g) ? cx_op_table[op].decompose(&g, ids, n_in, ps) : -1;
    if (ok(&g) && valid(&g, r) && !g.v[r].owned) {
        /* the result is an input: the caller needs a tensor of its own */
        cx_params cp;
        cx_params_clear(&cp);
        cx_param_put_ints(&cp, CX_P_SHAPE, g.v[r].desc.shape, g.v[r].desc.rank);
        r = cx_g_op(&g, CX_OP_RESHAPE, &r, 1, &cp);
    }
    if (ok(&g) && valid(&g, r)) {
        /* move the result's buffer into `out` */
        cx_tensor *t = g.v[r].t;
        memcpy((void *)out, (const void *)t, sizeof *out);
        atomic_store(&out->state, atomic_load(&t->state));
        free(t);
        g.v[r].t = NULL;
    }
    release(&g);
    return g.rc;
}

cx_code cx_graph_plan(cx_op_id op, cx_device *dev, const cx_desc *in, int n_in, const cx_params *ps,
                      cx_explain *ex, int depth, cx_status *st) {
    cx_graph g = {
        .dev = dev, .op = op, .planning = true, .ex = ex, .depth = depth, .st = st, .rc = CX_OK};
    cx_val ids[CX_MAX_INPUTS];
    for (int k = 0; k < n_in; k++) ids[k] = add_value(&g, &in[k], NULL, false);
    if (ok(&g)) cx_op_table[op].decompose(&g, ids, n_in, ps);
    release(&g);
    return g.rc;
}

void cx_sample_default(cx_op_id op, cx_dtype t, cx_desc *in, int *n_in, cx_params *ps) {
    (void)ps;
    int n = cx_op_tensor_arity(op);
    if (n < 0) n = 2;
    for (int k = 0; k < n; k++) in[k] = (cx_desc){t, 2, {2, 3}};
    *n_in = n;
}
