/* Composites of neural-network layers, activations and losses: inference and decomposition.
 *
 * Every decomposition uses primitives only, so that a device's steps are the ones it can be
 * asked about. Floating composites of f16 or bf16 compute in f32 and round once at the end:
 * rounding every step to 8 or 11 bits would lose most of a mean or a variance. */
#include <math.h>

#include "decompose.h"

#define OPNAME cx_op_table[op].name

/* The value of a NUMBER parameter, or dflt (which is then recorded) when it is not given. */
static double number_param(cx_params *ps, cx_param_id id, double dflt) {
    if (!cx_param_has(ps, id)) cx_param_put_float(ps, id, dflt);
    return ps->p[id].f;
}

/* A choice parameter (the index of one of n atoms), defaulting to 0. */
static cx_code choice_param(cx_op_id op, cx_params *ps, cx_param_id id, int n, const char *atoms,
                            cx_status *st) {
    int64_t v = cx_param_has(ps, id) ? ps->p[id].i[0] : 0;
    if (v < 0 || v >= n)
        return cx_fail(st, CX_EINVAL, "%s: expected %s to be one of %s (0..%d), got: %lld", OPNAME,
                       cx_param_table[id].name, atoms, n - 1, (long long)v);
    cx_param_put_int(ps, id, v);
    return CX_OK;
}

/* A non-negative number that is not NaN (epsilon, ddof). */
static cx_code non_negative_param(cx_op_id op, cx_params *ps, cx_param_id id, double dflt,
                                  cx_status *st) {
    double v = number_param(ps, id, dflt);
    if (!(v >= 0))
        return cx_fail(st, CX_EINVAL, "%s: expected %s to be a non-negative number, got: %g",
                       OPNAME, cx_param_table[id].name, v);
    return CX_OK;
}

/* ---- inference ------------------------------------------------------------------------------ */

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

/* A reduction over axes (all by default) with keep_axes, in a floating type; variance and
 * standard_deviation take ddof too. */
CX_INFER(cx_infer_float_reduce) {
    if (cx_check_arity(op, n_in, 1, st)) return st->code;
    if (cx_reduce_shape(op, &in[0], ps, out, st)) return st->code;
    if (op == CX_OP_VARIANCE || op == CX_OP_STANDARD_DEVIATION) {
        if (non_negative_param(op, ps, CX_P_DDOF, 0, st)) return st->code;
        if (!isfinite(ps->p[CX_P_DDOF].f))
            return cx_fail(st, CX_EINVAL, "%s: expected ddof to be a finite number, got: %g",
                           OPNAME, ps->p[CX_P_DDOF].f);
    }
    out->dtype = cx_dtype_to_float(in[0].dtype);
    compute[0] = in[0].dtype;
    return CX_OK;
}

/* Elementwise, keeping the type (relu). */
CX_INFER(cx_infer_keep_type) {
    (void)ps;
    if (cx_check_arity(op, n_in, 1, st)) return st->code;
    *out = in[0];
    compute[0] = in[0].dtype;
    return CX_OK;
}

/* Elementwise activations in a floating type, with their options checked and filled in. */
CX_INFER(cx_infer_activation) {
    if (cx_check_arity(op, n_in, 1, st)) return st->code;
    if (op == CX_OP_LEAKY_RELU) number_param(ps, CX_P_ALPHA, 0.01);
    if (op == CX_OP_ELU) number_param(ps, CX_P_ALPHA, 1.0);
    if (op == CX_OP_GELU && choice_param(op, ps, CX_P_APPROXIMATE, 2, "[:none, :tanh]", st))
        return st->code;
    *out = in[0];
    out->dtype = cx_dtype_to_float(in[0].dtype);
    compute[0] = in[0].dtype;
    return CX_OK;
}

/* A per-feature argument `what` of batch_norm or layer_norm: a number (rank 0), or `want` axes
 * each of the size in `sizes` or 1. */
static cx_code check_param_tensor(cx_op_id op, const cx_desc *d, const char *what,
                                  const int64_t *sizes, int want, cx_status *st) {
    if (d->rank == 0) return CX_OK;
    bool ok = d->rank == want;
    for (int k = 0; ok && k < want; k++) ok = d->shape[k] == sizes[k] || d->shape[k] == 1;
    if (!ok)
        return cx_fail(st, CX_EINVAL, "%s: expected %s to have shape %s (or be a number), got: %s",
                       OPNAME, what, cx_fmt_shape(sizes, want, (char[160]){0}, 160),
                       CX_SHAPE_STR(d));
    return CX_OK;
}

/* tensor, gamma, beta; axes (default: the last) and epsilon. */
CX_INFER(cx_infer_layer_norm) {
    if (cx_check_arity(op, n_in, 3, st)) return st->code;
    int rank = in[0].rank;
    if (rank == 0)
        return cx_fail(st, CX_EINVAL, "%s: expected a tensor of rank 1 or more, got shape %s",
                       OPNAME, CX_SHAPE_STR(&in[0]));
    cx_param *axes = cx_param_get(ps, CX_P_AXES) ? &ps->p[CX_P_AXES] : NULL;
    if (!axes) {
        int64_t last = rank - 1;
        cx_param_put_ints(ps, CX_P_AXES, &last, 1);
        axes = &ps->p[CX_P_AXES];
    }
    if (cx_normalize_axes(op, axes, rank, true, st)) return st->code;
    if (axes->n == 0)
        return cx_fail(st, CX_EINVAL, "%s: expected at least one axis to normalise over, got: []",
                       OPNAME);
    if (non_negative_param(op, ps, CX_P_EPSILON, 1e-5, st)) return st->code;
    int64_t sizes[CX_MAX_RANK];
    for (int k = 0; k < axes->n; k++) sizes[k] = in[0].shape[axes->i[k]];
    if (check_param_tensor(op, &in[1], "gamma", sizes, axes->n, st)) return st->code;
    if (check_param_tensor(op, &in[2], "beta", sizes, axes->n, st)) return st->code;
    *out = in[0];
    out->dtype = cx_merged_float(in, 3);
    for (int k = 0; k < 3; k++) compute[k] = in[k].dtype;
    return CX_OK;
}

/* tensor, gamma, beta, mean, variance; the feature axis (default 1) and epsilon. */
CX_INFER(cx_infer_batch_norm) {
    static const char *const names[] = {"tensor", "gamma", "beta", "mean", "variance"};
    if (cx_check_arity(op, n_in, 5, st)) return st->code;
    int64_t axis = cx_param_has(ps, CX_P_AXIS) ? ps->p[CX_P_AXIS].i[0] : 1;
    if (cx_normalize_axis(op, axis, in[0].rank, &axis, st)) return st->code;
    cx_param_put_int(ps, CX_P_AXIS, axis);
    if (non_negative_param(op, ps, CX_P_EPSILON, 1e-5, st)) return st->code;
    for (int k = 1; k < 5; k++)
        if (check_param_tensor(op, &in[k], names[k], &in[0].shape[axis], 1, st)) return st->code;
    *out = in[0];
    out->dtype = cx_merged_float(in, 5);
    for (int k = 0; k < 5; k++) compute[k] = in[k].dtype;
    return CX_OK;
}

/* tensor {..., in}, kernel {in, out}, bias {out} or a number. */
CX_INFER(cx_infer_dense) {
    if (cx_check_arity(op, n_in, 3, st)) return st->code;
    if (choice_param(op, ps, CX_P_ACTIVATION, CX_ACTIVATION_COUNT,
                     "[:none, :relu, :sigmoid, :tanh, :silu, :gelu, :gelu_tanh]", st))
        return st->code;
    const cx_desc *x = &in[0], *w = &in[1], *b = &in[2];
    if (x->rank == 0)
        return cx_fail(st, CX_EINVAL, "%s: expected a tensor of rank 1 or more, got shape %s",
                       OPNAME, CX_SHAPE_STR(x));
    int64_t n_in_features = x->shape[x->rank - 1];
    if (w->rank != 2 || w->shape[0] != n_in_features)
        return cx_fail(st, CX_EINVAL,
                       "%s: expected kernel to have shape {%lld, out} for a tensor of shape %s, "
                       "got: %s",
                       OPNAME, (long long)n_in_features, CX_SHAPE_STR(x), CX_SHAPE_STR(w));
    int64_t units = w->shape[1];
    if (b->rank != 0 && (b->rank != 1 || b->shape[0] != units))
        return cx_fail(st, CX_EINVAL,
                       "%s: expected bias to have shape {%lld} (or be a number), "
                       "got: %s",
                       OPNAME, (long long)units, CX_SHAPE_STR(b));
    *out = *x;
    out->shape[x->rank - 1] = units;
    if (cx_check_shape(op, out->shape, out->rank, st)) return st->code;
    out->dtype = cx_dtype_merge(cx_dtype_merge(x->dtype, w->dtype), b->dtype);
    if (ps->p[CX_P_ACTIVATION].i[0] > CX_ACTIVATION_RELU)
        out->dtype = cx_dtype_to_float(out->dtype);
    for (int k = 0; k < 3; k++) compute[k] = in[k].dtype;
    return CX_OK;
}

/* integer indices; depth (required) and type (default f32). */
CX_INFER(cx_infer_one_hot) {
    if (cx_check_arity(op, n_in, 1, st)) return st->code;
    if (cx_require_integer(op, &in[0], "indices", st)) return st->code;
    if (cx_require_param(op, ps, CX_P_DEPTH, st)) return st->code;
    int64_t depth = ps->p[CX_P_DEPTH].i[0];
    if (depth < 0)
        return cx_fail(st, CX_EINVAL, "%s: expected depth to be a non-negative integer, got: %lld",
                       OPNAME, (long long)depth);
    if (in[0].rank >= CX_MAX_RANK)
        return cx_fail(st, CX_EINVAL, "%s: expected indices of rank at most %d, got shape %s",
                       OPNAME, CX_MAX_RANK - 1, CX_SHAPE_STR(&in[0]));
    cx_dtype t = CX_F32;
    if (!cx_param_has(ps, CX_P_TYPE)) cx_param_put_int(ps, CX_P_TYPE, CX_F32);
    if (cx_require_type_param(op, ps, &t, st)) return st->code;
    *out = in[0];
    out->shape[out->rank++] = depth;
    if (cx_check_shape(op, out->shape, out->rank, st)) return st->code;
    out->dtype = t;
    compute[0] = in[0].dtype;
    return CX_OK;
}

/* y_true and y_pred of one shape, rank 1 or more; from_logits (cross-entropies) and reduction.
 * The result is a number (mean, sum) or one loss per sample (none). */
CX_INFER(cx_infer_loss) {
    if (cx_check_arity(op, n_in, 2, st)) return st->code;
    if (!cx_desc_same_shape(&in[0], &in[1]))
        return cx_fail(st, CX_EINVAL,
                       "%s: expected y_true and y_pred to have the same shape, got: %s and %s",
                       OPNAME, CX_SHAPE_STR(&in[0]), CX_SHAPE_STR(&in[1]));
    if (in[0].rank == 0)
        return cx_fail(st, CX_EINVAL,
                       "%s: expected y_true and y_pred of rank 1 or more (classes or outputs "
                       "along the last axis), got shape %s",
                       OPNAME, CX_SHAPE_STR(&in[0]));
    if (op != CX_OP_MEAN_SQUARED_ERROR)
        cx_param_put_int(ps, CX_P_FROM_LOGITS, cx_param_bool(ps, CX_P_FROM_LOGITS, false));
    if (choice_param(op, ps, CX_P_REDUCTION, 3, "[:mean, :sum, :none]", st)) return st->code;
    out->dtype = cx_dtype_to_float(cx_dtype_merge(in[0].dtype, in[1].dtype));
    out->rank = 0;
    if (ps->p[CX_P_REDUCTION].i[0] == 2) {
        out->rank = in[0].rank - 1;
        memcpy(out->shape, in[0].shape, sizeof(int64_t) * (size_t)out->rank);
    }
    compute[0] = in[0].dtype;
    compute[1] = in[1].dtype;
    return CX_OK;
}

/* ---- samples for the capability tables ------------------------------------------------------ */

void cx_sample_layer_norm(cx_op_id op, cx_dtype t, cx_desc *in, int *n_in, cx_params *ps) {
    (void)op;
    (void)ps;
    in[0] = (cx_desc){t, 2, {2, 3}};
    in[1] = in[2] = (cx_desc){t, 1, {3}};
    *n_in = 3;
}

void cx_sample_batch_norm(cx_op_id op, cx_dtype t, cx_desc *in, int *n_in, cx_params *ps) {
    (void)op;
    (void)ps;
    in[0] = (cx_desc){t, 3, {2, 3, 4}};
    for (int k = 1; k < 5; k++) in[k] = (cx_desc){t, 1, {3}};
    *n_in = 5;
}

void cx_sample_dense(cx_op_id op, cx_dtype t, cx_desc *in, int *n_in, cx_params *ps) {
    (void)op;
    (void)ps;
    in[0] = (cx_desc){t, 2, {2, 3}};
    in[1] = (cx_desc){t, 2, {3, 4}};
    in[2] = (cx_desc){t, 1, {4}};
    *n_in = 3;
}

/* s64 indices (t itself when it is an integer type) into a one-hot tensor of type t. */
void cx_sample_one_hot(cx_op_id op, cx_dtype t, cx_desc *in, int *n_in, cx_params *ps) {
    (void)op;
    in[0] = (cx_desc){cx_dtype_is_float(t) ? CX_S64 : t, 2, {2, 3}};
    cx_param_put_int(ps, CX_P_DEPTH, 4);
    cx_param_put_int(ps, CX_P_TYPE, t);
    *n_in = 1;
}

/* ---- decompositions ------------------------------------------------------------------------- */

/* a converted to the type its floating result is computed in. */
static cx_val to_work(cx_graph *g, cx_val a) {
    return cx_g_cast(g, a, cx_work_type(cx_g_type(g, a)));
}

/* The number of elements over axes. */
static double count_over(cx_graph *g, cx_val a, const cx_param *axes) {
    double n = 1;
    for (int k = 0; k < axes->n; k++) n *= (double)cx_g_dim(g, a, (int)axes->i[k]);
    return n;
}

/* Shape of a without axes (sorted), or with them kept as 1. */
static int reduced_shape(cx_graph *g, cx_val a, const cx_param *axes, int64_t *shape) {
    const cx_desc *d = cx_g_desc(g, a);
    bool reduced[CX_MAX_RANK] = {false};
    for (int k = 0; k < axes->n; k++) reduced[axes->i[k]] = true;
    int r = 0;
    for (int k = 0; k < d->rank; k++)
        if (!reduced[k]) shape[r++] = d->shape[k];
    return r;
}

/* sum(x) / n over axes, with the axes kept or not. */
static cx_val mean_of(cx_graph *g, cx_val x, const cx_param *axes, bool keep) {
    cx_val s = cx_g_reduce(g, CX_OP_SUM, x, axes->i, axes->n, keep);
    return cx_g_binary_scalar(g, CX_OP_DIVIDE, s, count_over(g, x, axes));
}

/* sum((x - mean)^2) / (n - ddof) over axes, in x's type. */
static cx_val variance_of(cx_graph *g, cx_val x, const cx_param *axes, bool keep, double ddof) {
    cx_val d = cx_g_binary(g, CX_OP_SUBTRACT, x, mean_of(g, x, axes, true));
    cx_val sq = cx_g_binary(g, CX_OP_MULTIPLY, d, d);
    cx_g_drop(g, d);
    cx_val s = cx_g_reduce(g, CX_OP_SUM, sq, axes->i, axes->n, keep);
    cx_g_drop(g, sq);
    return cx_g_binary_scalar(g, CX_OP_DIVIDE, s, count_over(g, x, axes) - ddof);
}

/* x - max - log(sum(exp(x - max))) along axis. */
static cx_val log_softmax_of(cx_graph *g, cx_val x, int64_t axis) {
    cx_val m = cx_g_reduce(g, CX_OP_REDUCE_MAX, x, &axis, 1, true);
    cx_val d = cx_g_binary(g, CX_OP_SUBTRACT, x, m);
    cx_val e = cx_g_unary(g, CX_OP_EXP, d);
    cx_val s = cx_g_reduce(g, CX_OP_SUM, e, &axis, 1, true);
    cx_g_drop(g, e);
    return cx_g_binary(g, CX_OP_SUBTRACT, d, cx_g_unary(g, CX_OP_LOG, s));
}

/* log(1 + exp(-|x|)): the correction term of softplus and of the logistic losses. */
static cx_val log1p_exp_neg_abs(cx_graph *g, cx_val x) {
    cx_val e = cx_g_unary(g, CX_OP_EXP, cx_g_unary(g, CX_OP_NEGATE, cx_g_unary(g, CX_OP_ABS, x)));
    return cx_g_unary(g, CX_OP_LOG1P, e);
}

cx_val cx_decompose_softmax(cx_graph *g, const cx_val *in, int n_in, const cx_params *ps) {
    int64_t axis = ps->p[CX_P_AXIS].i[0];
    cx_val x = cx_g_cast(g, in[0], cx_dtype_to_float(cx_g_type(g, in[0])));
    cx_val m = cx_g_reduce(g, CX_OP_REDUCE_MAX, x, &axis, 1, true);
    cx_val e = cx_g_unary(g, CX_OP_EXP, cx_g_binary(g, CX_OP_SUBTRACT, x, m));
    cx_val s = cx_g_reduce(g, CX_OP_SUM, e, &axis, 1, true);
    return cx_g_binary(g, CX_OP_DIVIDE, e, s);
}

cx_val cx_decompose_log_softmax(cx_graph *g, const cx_val *in, int n_in, const cx_params *ps) {
    cx_dtype out = cx_dtype_to_float(cx_g_type(g, in[0]));
    return cx_g_cast(g, log_softmax_of(g, to_work(g, in[0]), ps->p[CX_P_AXIS].i[0]), out);
}

/* m + log(sum(exp(x - m))) with m the maximum, taken as 0 where it is infinite (an all -inf or
 * empty reduction gives log(0) = -inf, a +inf gives +inf) as Nx does. */
cx_val cx_decompose_logsumexp(cx_graph *g, const cx_val *in, int n_in, const cx_params *ps) {
    const cx_param *axes = &ps->p[CX_P_AXES];
    bool keep = ps->p[CX_P_KEEP_AXES].i[0];
    cx_dtype out = cx_dtype_to_float(cx_g_type(g, in[0]));
    cx_val x = to_work(g, in[0]);
    cx_dtype t = cx_g_type(g, x);
    cx_val m = cx_g_reduce(g, CX_OP_REDUCE_MAX, x, axes->i, axes->n, true);
    cx_val finite =
        cx_g_binary(g, CX_OP_LESS, cx_g_unary(g, CX_OP_ABS, m), cx_g_scalar(g, INFINITY, t));
    m = cx_g_select(g, finite, m, cx_g_scalar(g, 0, t));
    cx_val e = cx_g_unary(g, CX_OP_EXP, cx_g_binary(g, CX_OP_SUBTRACT, x, m));
    cx_val l = cx_g_unary(g, CX_OP_LOG, cx_g_reduce(g, CX_OP_SUM, e, axes->i, axes->n, keep));
    cx_g_drop(g, e);
    if (!keep) {
        int64_t shape[CX_MAX_RANK];
        m = cx_g_reshape(g, m, shape, reduced_shape(g, x, axes, shape));
    }
    return cx_g_cast(g, cx_g_binary(g, CX_OP_ADD, l, m), out);
}

cx_val cx_decompose_mean(cx_graph *g, const cx_val *in, int n_in, const cx_params *ps) {
    cx_dtype out = cx_dtype_to_float(cx_g_type(g, in[0]));
    cx_val r = mean_of(g, to_work(g, in[0]), &ps->p[CX_P_AXES], ps->p[CX_P_KEEP_AXES].i[0]);
    return cx_g_cast(g, r, out);
}

cx_val cx_decompose_variance(cx_graph *g, const cx_val *in, int n_in, const cx_params *ps) {
    cx_dtype out = cx_dtype_to_float(cx_g_type(g, in[0]));
    cx_val r = variance_of(g, to_work(g, in[0]), &ps->p[CX_P_AXES], ps->p[CX_P_KEEP_AXES].i[0],
                           ps->p[CX_P_DDOF].f);
    return cx_g_cast(g, r, out);
}

cx_val cx_decompose_standard_deviation(cx_graph *g, const cx_val *in, int n_in,
                                       const cx_params *ps) {
    cx_dtype out = cx_dtype_to_float(cx_g_type(g, in[0]));
    cx_val r = variance_of(g, to_work(g, in[0]), &ps->p[CX_P_AXES], ps->p[CX_P_KEEP_AXES].i[0],
                           ps->p[CX_P_DDOF].f);
    return cx_g_cast(g, cx_g_unary(g, CX_OP_SQRT, r), out);
}

cx_val cx_decompose_relu(cx_graph *g, const cx_val *in, int n_in, const cx_params *ps) {
    return cx_g_binary_scalar(g, CX_OP_MAX, in[0], 0);
}

/* select(x > 0, x, f(x)) in the work type, rounded to the result type. */
static cx_val where_positive(cx_graph *g, cx_val x, cx_val other, cx_dtype out) {
    cx_val pos = cx_g_binary_scalar(g, CX_OP_GREATER, x, 0);
    return cx_g_cast(g, cx_g_select(g, pos, x, other), out);
}

cx_val cx_decompose_leaky_relu(cx_graph *g, const cx_val *in, int n_in, const cx_params *ps) {
    cx_dtype out = cx_dtype_to_float(cx_g_type(g, in[0]));
    cx_val x = to_work(g, in[0]);
    cx_val neg = cx_g_binary_scalar(g, CX_OP_MULTIPLY, x, ps->p[CX_P_ALPHA].f);
    return where_positive(g, x, neg, out);
}

cx_val cx_decompose_elu(cx_graph *g, const cx_val *in, int n_in, const cx_params *ps) {
    cx_dtype out = cx_dtype_to_float(cx_g_type(g, in[0]));
    cx_val x = to_work(g, in[0]);
    cx_val neg =
        cx_g_binary_scalar(g, CX_OP_MULTIPLY, cx_g_unary(g, CX_OP_EXPM1, x), ps->p[CX_P_ALPHA].f);
    return where_positive(g, x, neg, out);
}

/* gelu of x in its (work) type: the erf form, or the tanh approximation */
static cx_val gelu_of(cx_graph *g, cx_val x, bool tanh_form) {
    if (tanh_form) {
        /* 0.5 * (1 + tanh(u)) = sigmoid(2u), u = sqrt(2/pi) * (x + 0.044715 x^3) */
        cx_val x3 = cx_g_binary(g, CX_OP_MULTIPLY, cx_g_binary(g, CX_OP_MULTIPLY, x, x), x);
        cx_val u =
            cx_g_binary(g, CX_OP_ADD, x, cx_g_binary_scalar(g, CX_OP_MULTIPLY, x3, 0.044715));
        cx_g_drop(g, x3);
        cx_val p = cx_g_unary(g, CX_OP_SIGMOID,
                              cx_g_binary_scalar(g, CX_OP_MULTIPLY, u, 2 * sqrt(2 / M_PI)));
        return cx_g_binary(g, CX_OP_MULTIPLY, x, p);
    }
    cx_val e = cx_g_unary(g, CX_OP_ERF, cx_g_binary_scalar(g, CX_OP_MULTIPLY, x, M_SQRT1_2));
    cx_val h = cx_g_binary_scalar(g, CX_OP_MULTIPLY, x, 0.5);
    return cx_g_binary(g, CX_OP_MULTIPLY, h, cx_g_binary_scalar(g, CX_OP_ADD, e, 1));
}

static cx_val silu_of(cx_graph *g, cx_val x) {
    return cx_g_binary(g, CX_OP_MULTIPLY, x, cx_g_unary(g, CX_OP_SIGMOID, x));
}

cx_val cx_decompose_gelu(cx_graph *g, const cx_val *in, int n_in, const cx_params *ps) {
    cx_dtype out = cx_dtype_to_float(cx_g_type(g, in[0]));
    cx_val x = to_work(g, in[0]);
    return cx_g_cast(g, gelu_of(g, x, ps->p[CX_P_APPROXIMATE].i[0] == 1), out);
}

cx_val cx_decompose_silu(cx_graph *g, const cx_val *in, int n_in, const cx_params *ps) {
    cx_dtype out = cx_dtype_to_float(cx_g_type(g, in[0]));
    return cx_g_cast(g, silu_of(g, to_work(g, in[0])), out);
}

cx_val cx_decompose_softplus(cx_graph *g, const cx_val *in, int n_in, const cx_params *ps) {
    cx_dtype out = cx_dtype_to_float(cx_g_type(g, in[0]));
    cx_val x = to_work(g, in[0]);
    cx_val r =
        cx_g_binary(g, CX_OP_ADD, cx_g_binary_scalar(g, CX_OP_MAX, x, 0), log1p_exp_neg_abs(g, x));
    return cx_g_cast(g, r, out);
}

cx_val cx_decompose_hard_sigmoid(cx_graph *g, const cx_val *in, int n_in, const cx_params *ps) {
    cx_dtype out = cx_dtype_to_float(cx_g_type(g, in[0]));
    cx_val x = to_work(g, in[0]);
    cx_val r = cx_g_binary_scalar(g, CX_OP_MAX, cx_g_binary_scalar(g, CX_OP_ADD, x, 3), 0);
    r = cx_g_binary_scalar(g, CX_OP_MIN, r, 6);
    return cx_g_cast(g, cx_g_binary_scalar(g, CX_OP_DIVIDE, r, 6), out);
}

/* A per-feature tensor p reshaped to broadcast against a tensor of `rank` along `axes` (the
 * positions of its axes), in type t. A number stays rank 0. */
static cx_val along_axes(cx_graph *g, cx_val p, int rank, const int64_t *axes, int n_axes,
                         cx_dtype t) {
    p = cx_g_cast(g, p, t);
    if (cx_g_rank(g, p) == 0) return p;
    int64_t shape[CX_MAX_RANK];
    for (int k = 0; k < rank; k++) shape[k] = 1;
    for (int k = 0; k < n_axes; k++) shape[axes[k]] = cx_g_dim(g, p, k);
    return cx_g_reshape(g, p, shape, rank);
}

cx_val cx_decompose_layer_norm(cx_graph *g, const cx_val *in, int n_in, const cx_params *ps) {
    const cx_param *axes = &ps->p[CX_P_AXES];
    cx_dtype out = cx_dtype_merge(cx_g_type(g, in[0]), cx_g_type(g, in[1]));
    out = cx_dtype_to_float(cx_dtype_merge(out, cx_g_type(g, in[2])));
    cx_dtype t = cx_work_type(out);
    int rank = cx_g_rank(g, in[0]);
    cx_val x = cx_g_cast(g, in[0], t);
    cx_val d = cx_g_binary(g, CX_OP_SUBTRACT, x, mean_of(g, x, axes, true));
    cx_g_drop(g, x);
    cx_val sq = cx_g_binary(g, CX_OP_MULTIPLY, d, d);
    cx_val v = mean_of(g, sq, axes, true);
    cx_g_drop(g, sq);
    cx_val inv =
        cx_g_unary(g, CX_OP_RSQRT, cx_g_binary_scalar(g, CX_OP_ADD, v, ps->p[CX_P_EPSILON].f));
    cx_val r = cx_g_binary(g, CX_OP_MULTIPLY, d, inv);
    cx_g_drop(g, d);
    cx_val gamma = along_axes(g, in[1], rank, axes->i, axes->n, t);
    cx_val beta = along_axes(g, in[2], rank, axes->i, axes->n, t);
    r = cx_g_binary(g, CX_OP_ADD, cx_g_binary(g, CX_OP_MULTIPLY, r, gamma), beta);
    return cx_g_cast(g, r, out);
}

/* (x - mean) * (gamma * rsqrt(variance + epsilon)) + beta: the scale is computed on the
 * per-feature tensors, so the full tensor sees three operations. */
cx_val cx_decompose_batch_norm(cx_graph *g, const cx_val *in, int n_in, const cx_params *ps) {
    cx_dtype out = cx_g_type(g, in[0]);
    for (int k = 1; k < 5; k++) out = cx_dtype_merge(out, cx_g_type(g, in[k]));
    out = cx_dtype_to_float(out);
    cx_dtype t = cx_work_type(out);
    int rank = cx_g_rank(g, in[0]);
    const int64_t *axis = ps->p[CX_P_AXIS].i;
    cx_val p[5];
    for (int k = 1; k < 5; k++) p[k] = along_axes(g, in[k], rank, axis, 1, t);
    cx_val inv =
        cx_g_unary(g, CX_OP_RSQRT, cx_g_binary_scalar(g, CX_OP_ADD, p[4], ps->p[CX_P_EPSILON].f));
    cx_val scale = cx_g_binary(g, CX_OP_MULTIPLY, p[1], inv);
    cx_val d = cx_g_binary(g, CX_OP_SUBTRACT, cx_g_cast(g, in[0], t), p[3]);
    cx_val r = cx_g_binary(g, CX_OP_ADD, cx_g_binary(g, CX_OP_MULTIPLY, d, scale), p[2]);
    return cx_g_cast(g, r, out);
}

/* The activation of dense (CX_ACTIVATION_*) on x: relu in x's type, the others in the work type
 * (f32 for integers). */
static cx_val activation_of(cx_graph *g, cx_val x, int64_t which) {
    if (which == CX_ACTIVATION_NONE) return x;
    if (which == CX_ACTIVATION_RELU) return cx_g_binary_scalar(g, CX_OP_MAX, x, 0);
    x = to_work(g, x);
    switch (which) {
    case CX_ACTIVATION_SIGMOID: return cx_g_unary(g, CX_OP_SIGMOID, x);
    case CX_ACTIVATION_TANH: return cx_g_unary(g, CX_OP_TANH, x);
    case CX_ACTIVATION_SILU: return silu_of(g, x);
    default: return gelu_of(g, x, which == CX_ACTIVATION_GELU_TANH);
    }
}

/* dot over the tensor's last axis and the kernel's first, then the bias, then the activation;
 * floats in the work type (one rounding for f16/bf16), integers in their merged type. */
cx_val cx_decompose_dense(cx_graph *g, const cx_val *in, int n_in, const cx_params *ps) {
    cx_dtype out = cx_dtype_merge(cx_g_type(g, in[0]), cx_g_type(g, in[1]));
    out = cx_dtype_merge(out, cx_g_type(g, in[2]));
    int64_t act = ps->p[CX_P_ACTIVATION].i[0];
    cx_dtype t = cx_dtype_is_float(out) ? cx_work_type(out) : out;
    if (act > CX_ACTIVATION_RELU) out = cx_dtype_to_float(out);
    int64_t last = cx_g_rank(g, in[0]) - 1, first = 0;
    cx_val y = cx_g_dot(g, cx_g_cast(g, in[0], t), &last, 1, NULL, 0, cx_g_cast(g, in[1], t),
                        &first, 1, NULL, 0);
    y = cx_g_binary(g, CX_OP_ADD, y, cx_g_cast(g, in[2], t));
    return cx_g_cast(g, activation_of(g, y, act), out);
}

/* equal(indices reshaped to {..., 1}, iota({depth})) as the type. */
cx_val cx_decompose_one_hot(cx_graph *g, const cx_val *in, int n_in, const cx_params *ps) {
    const cx_desc *d = cx_g_desc(g, in[0]);
    int64_t shape[CX_MAX_RANK], depth = ps->p[CX_P_DEPTH].i[0];
    int rank = d->rank;
    memcpy(shape, d->shape, sizeof(int64_t) * (size_t)rank);
    shape[rank] = 1;
    cx_val idx = cx_g_reshape(g, in[0], shape, rank + 1);
    cx_val eq = cx_g_binary(g, CX_OP_EQUAL, idx, cx_g_iota(g, &depth, 1, 0, CX_S64));
    return cx_g_cast(g, eq, (cx_dtype)ps->p[CX_P_TYPE].i[0]);
}

/* Per-sample losses (shape without the last axis) reduced as the reduction parameter says,
 * rounded to out. */
static cx_val reduce_loss(cx_graph *g, cx_val losses, const cx_params *ps, cx_dtype out) {
    int64_t how = ps->p[CX_P_REDUCTION].i[0];
    if (how == 0) {
        cx_val s = cx_g_reduce(g, CX_OP_SUM, losses, NULL, -1, false);
        double n = 1;
        for (int k = 0; k < cx_g_rank(g, losses); k++) n *= (double)cx_g_dim(g, losses, k);
        losses = cx_g_binary_scalar(g, CX_OP_DIVIDE, s, n);
    } else if (how == 1) {
        losses = cx_g_reduce(g, CX_OP_SUM, losses, NULL, -1, false);
    }
    return cx_g_cast(g, losses, out);
}

#define LOSS_EPSILON 1e-7

/* y_pred clipped to [eps, 1 - eps], so that log never sees 0. */
static cx_val clip_probability(cx_graph *g, cx_val p) {
    cx_dtype t = cx_g_type(g, p);
    cx_val in[3] = {p, cx_g_scalar(g, LOSS_EPSILON, t), cx_g_scalar(g, 1 - LOSS_EPSILON, t)};
    return cx_g_op(g, CX_OP_CLIP, in, 3, NULL);
}

static cx_dtype loss_type(cx_graph *g, const cx_val *in) {
    return cx_dtype_to_float(cx_dtype_merge(cx_g_type(g, in[0]), cx_g_type(g, in[1])));
}

cx_val cx_decompose_categorical_cross_entropy(cx_graph *g, const cx_val *in, int n_in,
                                              const cx_params *ps) {
    cx_dtype out = loss_type(g, in), t = cx_work_type(out);
    int64_t last = cx_g_rank(g, in[0]) - 1;
    cx_val y = cx_g_cast(g, in[0], t), p = cx_g_cast(g, in[1], t);
    cx_val logp = ps->p[CX_P_FROM_LOGITS].i[0] ? log_softmax_of(g, p, last)
                                               : cx_g_unary(g, CX_OP_LOG, clip_probability(g, p));
    cx_val prod = cx_g_binary(g, CX_OP_MULTIPLY, y, logp);
    cx_g_drop(g, logp);
    cx_val losses = cx_g_unary(g, CX_OP_NEGATE, cx_g_reduce(g, CX_OP_SUM, prod, &last, 1, false));
    return reduce_loss(g, losses, ps, out);
}

cx_val cx_decompose_binary_cross_entropy(cx_graph *g, const cx_val *in, int n_in,
                                         const cx_params *ps) {
    cx_dtype out = loss_type(g, in), t = cx_work_type(out);
    int64_t last = cx_g_rank(g, in[0]) - 1;
    cx_val y = cx_g_cast(g, in[0], t), p = cx_g_cast(g, in[1], t), l;
    if (ps->p[CX_P_FROM_LOGITS].i[0]) {
        /* max(x, 0) - x * y + log1p(exp(-|x|)) */
        cx_val a = cx_g_binary(g, CX_OP_SUBTRACT, cx_g_binary_scalar(g, CX_OP_MAX, p, 0),
                               cx_g_binary(g, CX_OP_MULTIPLY, p, y));
        l = cx_g_binary(g, CX_OP_ADD, a, log1p_exp_neg_abs(g, p));
    } else {
        /* -(y * log(p) + (1 - y) * log1p(-p)) */
        p = clip_probability(g, p);
        cx_val a = cx_g_binary(g, CX_OP_MULTIPLY, y, cx_g_unary(g, CX_OP_LOG, p));
        cx_val one_minus_y = cx_g_binary(g, CX_OP_SUBTRACT, cx_g_scalar(g, 1, t), y);
        cx_val b = cx_g_binary(g, CX_OP_MULTIPLY, one_minus_y,
                               cx_g_unary(g, CX_OP_LOG1P, cx_g_unary(g, CX_OP_NEGATE, p)));
        l = cx_g_unary(g, CX_OP_NEGATE, cx_g_binary(g, CX_OP_ADD, a, b));
    }
    cx_val losses = cx_g_binary_scalar(
        g, CX_OP_DIVIDE, cx_g_reduce(g, CX_OP_SUM, l, &last, 1, false), (double)cx_g_dim(g, l, -1));
    return reduce_loss(g, losses, ps, out);
}

cx_val cx_decompose_mean_squared_error(cx_graph *g, const cx_val *in, int n_in,
                                       const cx_params *ps) {
    cx_dtype out = loss_type(g, in), t = cx_work_type(out);
    int64_t last = cx_g_rank(g, in[0]) - 1;
    cx_val d = cx_g_binary(g, CX_OP_SUBTRACT, cx_g_cast(g, in[1], t), cx_g_cast(g, in[0], t));
    cx_val sq = cx_g_binary(g, CX_OP_MULTIPLY, d, d);
    cx_g_drop(g, d);
    cx_val losses =
        cx_g_binary_scalar(g, CX_OP_DIVIDE, cx_g_reduce(g, CX_OP_SUM, sq, &last, 1, false),
                           (double)cx_g_dim(g, sq, -1));
    return reduce_loss(g, losses, ps, out);
}
