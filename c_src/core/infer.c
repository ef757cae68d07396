/* Shape and type inference for every op: checks the arguments, normalises the parameters and
 * says what the result is. Messages name the expected and the given; they reach Elixir users as
 * ArgumentError. */
#include <stdio.h>
#include <string.h>

#include "infer_util.h"

/* Writes "{2, 3}" into buf. */
const char *cx_fmt_shape(const int64_t *shape, int rank, char *buf, size_t n) {
    size_t used = (size_t)snprintf(buf, n, "{");
    for (int k = 0; k < rank && used < n; k++)
        used += (size_t)snprintf(buf + used, n - used, k ? ", %lld" : "%lld", (long long)shape[k]);
    if (used < n) snprintf(buf + used, n - used, "}");
    return buf;
}

const char *cx_fmt_ints(const int64_t *v, int count, char *buf, size_t n) {
    size_t used = (size_t)snprintf(buf, n, "[");
    for (int k = 0; k < count && used < n; k++)
        used += (size_t)snprintf(buf + used, n - used, k ? ", %lld" : "%lld", (long long)v[k]);
    if (used < n) snprintf(buf + used, n - used, "]");
    return buf;
}

#define SHAPE_STR(d) cx_fmt_shape((d)->shape, (d)->rank, (char[160]){0}, 160)
#define OPNAME       cx_op_table[op].name

/* Largest element count a tensor may have: keeps every byte size and index within int64. */
#define CX_MAX_NUMEL (INT64_C(1) << 48)

cx_code cx_check_arity(cx_op_id op, int n_in, int want, cx_status *st) {
    if (n_in != want)
        return cx_fail(st, CX_EINVAL, "%s expects %d tensor argument(s), got: %d", OPNAME, want,
                       n_in);
    return CX_OK;
}

/* Checks that a shape has sane sizes and a bounded element count. Zero dimensions are left out
 * of the count, so that every part of the shape (what a reduction or a slice keeps, in any
 * order) stays within the limit too: {0, 2^40, 2^40} is refused, its sum over axis 0 would
 * have 2^80 elements. */
cx_code cx_check_shape(cx_op_id op, const int64_t *shape, int rank, cx_status *st) {
    if (rank < 0 || rank > CX_MAX_RANK)
        return cx_fail(st, CX_EINVAL, "%s: expected a rank between 0 and %d, got: %d", OPNAME,
                       CX_MAX_RANK, rank);
    int64_t numel = 1;
    for (int k = 0; k < rank; k++) {
        if (shape[k] < 0)
            return cx_fail(st, CX_EINVAL, "%s: expected non-negative dimensions, got shape %s",
                           OPNAME, cx_fmt_shape(shape, rank, (char[160]){0}, 160));
        if (shape[k] == 0) continue;
        if (numel > CX_MAX_NUMEL / shape[k])
            return cx_fail(st, CX_EINVAL,
                           "%s: shape %s is too large: its non-zero dimensions multiply to more "
                           "than 2^48",
                           OPNAME, cx_fmt_shape(shape, rank, (char[160]){0}, 160));
        numel *= shape[k];
    }
    return CX_OK;
}

cx_code cx_normalize_axis(cx_op_id op, int64_t axis, int rank, int64_t *out, cx_status *st) {
    if (rank == 0)
        return cx_fail(st, CX_EINVAL, "%s: a tensor of rank 0 has no axes, got axis: %lld", OPNAME,
                       (long long)axis);
    if (axis < -rank || axis >= rank)
        return cx_fail(st, CX_EINVAL,
                       "%s: expected an axis in -%d..%d for a tensor of rank %d, got: %lld", OPNAME,
                       rank, rank - 1, rank, (long long)axis);
    *out = axis < 0 ? axis + rank : axis;
    return CX_OK;
}

/* Normalises a list of distinct axes in place; sorts them when `sorted`. */
cx_code cx_normalize_axes(cx_op_id op, cx_param *p, int rank, bool sorted, cx_status *st) {
    bool seen[CX_MAX_RANK] = {false};
    if (p->n > rank)
        return cx_fail(st, CX_EINVAL,
                       "%s: expected at most %d axes for a tensor of rank %d, got: %s", OPNAME,
                       rank, rank, cx_fmt_ints(p->i, p->n, (char[200]){0}, 200));
    for (int k = 0; k < p->n; k++) {
        if (cx_normalize_axis(op, p->i[k], rank, &p->i[k], st)) return st->code;
        if (seen[p->i[k]])
            return cx_fail(st, CX_EINVAL, "%s: axis %lld is given more than once in %s", OPNAME,
                           (long long)p->i[k], cx_fmt_ints(p->i, p->n, (char[200]){0}, 200));
        seen[p->i[k]] = true;
    }
    if (sorted) {
        int n = 0;
        for (int a = 0; a < rank; a++)
            if (seen[a]) p->i[n++] = a;
    }
    return CX_OK;
}

cx_param *cx_put_all_axes(cx_params *ps, cx_param_id id, int rank) {
    cx_param *p = cx_param_put(ps, id);
    p->n = rank;
    for (int k = 0; k < rank; k++) p->i[k] = k;
    return p;
}

bool cx_param_bool(const cx_params *ps, cx_param_id id, bool dflt) {
    const cx_param *p = cx_param_get(ps, id);
    return p ? p->i[0] != 0 : dflt;
}

/* NumPy broadcasting of two shapes, aligned on the right. */
cx_code cx_broadcast_shapes(cx_op_id op, const cx_desc *a, const cx_desc *b, cx_desc *out,
                            cx_status *st) {
    int rank = a->rank > b->rank ? a->rank : b->rank;
    for (int k = 0; k < rank; k++) {
        int ka = k - (rank - a->rank), kb = k - (rank - b->rank);
        int64_t da = ka >= 0 ? a->shape[ka] : 1, db = kb >= 0 ? b->shape[kb] : 1;
        if (da != db && da != 1 && db != 1)
            return cx_fail(st, CX_EINVAL,
                           "%s: cannot broadcast shapes %s and %s (axis %d: %lld vs %lld)", OPNAME,
                           SHAPE_STR(a), SHAPE_STR(b), k, (long long)da, (long long)db);
        out->shape[k] = da == 1 ? db : da;
    }
    out->rank = rank;
    /* small inputs can broadcast to more elements than any tensor may have */
    return cx_check_shape(op, out->shape, rank, st);
}

cx_code cx_require_integer(cx_op_id op, const cx_desc *d, const char *what, cx_status *st) {
    if (cx_dtype_is_float(d->dtype))
        return cx_fail(st, CX_EINVAL, "%s: expected %s to have an integer type, got: %s", OPNAME,
                       what, cx_dtype_name(d->dtype));
    return CX_OK;
}

cx_code cx_require_param(cx_op_id op, const cx_params *ps, cx_param_id id, cx_status *st) {
    if (!cx_param_has(ps, id))
        return cx_fail(st, CX_EINVAL, "%s: the %s parameter is required", OPNAME,
                       cx_param_table[id].name);
    return CX_OK;
}

cx_code cx_require_type_param(cx_op_id op, const cx_params *ps, cx_dtype *out, cx_status *st) {
    if (cx_require_param(op, ps, CX_P_TYPE, st)) return st->code;
    int64_t t = ps->p[CX_P_TYPE].i[0];
    if (!cx_dtype_valid((int)t) || t != (int)t)
        return cx_fail(st, CX_EINVAL, "%s: unknown type code %lld", OPNAME, (long long)t);
    *out = (cx_dtype)t;
    return CX_OK;
}

/* A shape given as the SHAPE parameter, checked. */
cx_code cx_shape_param(cx_op_id op, const cx_params *ps, cx_desc *out, cx_status *st) {
    if (cx_require_param(op, ps, CX_P_SHAPE, st)) return st->code;
    const cx_param *p = &ps->p[CX_P_SHAPE];
    if (cx_check_shape(op, p->i, p->n, st)) return st->code;
    out->rank = p->n;
    memcpy(out->shape, p->i, sizeof(int64_t) * (size_t)p->n);
    return CX_OK;
}

/* Nx.Type.merge_number: an integer keeps the tensor's type, a float makes integers f32. */
static cx_dtype merge_number(cx_dtype t, const cx_param *num) {
    return num->is_int ? t : cx_dtype_to_float(t);
}

CX_INFER(cx_infer_unary) {
    (void)ps;
    if (cx_check_arity(op, n_in, 1, st)) return st->code;
    *out = in[0];
    if (cx_op_table[op].kind == CX_KIND_UNARY_FLOAT) out->dtype = cx_dtype_to_float(in[0].dtype);
    compute[0] = out->dtype;
    /* the magnitude of a complex number is real */
    if (op == CX_OP_ABS && cx_dtype_is_complex(compute[0]))
        out->dtype = cx_dtype_to_real(compute[0]);
    return CX_OK;
}

/* real and imag: the input read as complex, the part in the matching real type. */
CX_INFER(cx_infer_complex_part) {
    (void)ps;
    if (cx_check_arity(op, n_in, 1, st)) return st->code;
    *out = in[0];
    compute[0] = cx_dtype_to_complex(in[0].dtype);
    out->dtype = cx_dtype_to_real(compute[0]);
    return CX_OK;
}

CX_INFER(cx_infer_conjugate) {
    (void)ps;
    if (cx_check_arity(op, n_in, 1, st)) return st->code;
    *out = in[0];
    out->dtype = compute[0] = cx_dtype_to_complex(in[0].dtype);
    return CX_OK;
}

/* fft and ifft: the last axis becomes `length` long (padded with zeros or cut). */
CX_INFER(cx_infer_fft) {
    if (cx_check_arity(op, n_in, 1, st)) return st->code;
    if (in[0].rank < 1)
        return cx_fail(st, CX_EINVAL, "%s: expected a tensor of rank 1 or more, got a scalar",
                       OPNAME);
    int last = in[0].rank - 1;
    int64_t n = cx_param_has(ps, CX_P_LENGTH) ? ps->p[CX_P_LENGTH].i[0] : in[0].shape[last];
    if (n < 1)
        return cx_fail(st, CX_EINVAL, "%s: expected a length of 1 or more, got: %lld", OPNAME,
                       (long long)n);
    cx_param_put_int(ps, CX_P_LENGTH, n);
    double eps = cx_param_has(ps, CX_P_EPS) ? ps->p[CX_P_EPS].f : 0.0;
    if (!(eps >= 0))
        return cx_fail(st, CX_EINVAL, "%s: expected eps to be 0 or more, got: %g", OPNAME, eps);
    *out = in[0];
    out->shape[last] = n;
    if (cx_check_shape(op, out->shape, out->rank, st)) return st->code;
    out->dtype = compute[0] = cx_dtype_to_complex(in[0].dtype);
    return CX_OK;
}

CX_INFER(cx_infer_logical) {
    (void)ps;
    int want = op == CX_OP_LOGICAL_NOT || op == CX_OP_IS_NAN || op == CX_OP_IS_INFINITY ? 1 : 2;
    if (cx_check_arity(op, n_in, want, st)) return st->code;
    if (want == 1) {
        *out = in[0];
        compute[0] = in[0].dtype;
    } else {
        if (cx_broadcast_shapes(op, &in[0], &in[1], out, st)) return st->code;
        compute[0] = compute[1] = cx_dtype_merge(in[0].dtype, in[1].dtype);
    }
    out->dtype = CX_U8;
    return CX_OK;
}

CX_INFER(cx_infer_binary) {
    (void)ps;
    if (cx_check_arity(op, n_in, 2, st)) return st->code;
    if (cx_broadcast_shapes(op, &in[0], &in[1], out, st)) return st->code;
    cx_dtype t = cx_dtype_merge(in[0].dtype, in[1].dtype);
    if (cx_op_table[op].kind == CX_KIND_BINARY_FLOAT) t = cx_dtype_to_float(t);
    compute[0] = compute[1] = t;
    out->dtype = cx_op_table[op].kind == CX_KIND_COMPARE ? CX_U8 : t;
    return CX_OK;
}

/* Ops on the bits of integers: Nx refuses floats, and so does Cascade. */
static cx_code check_integer(cx_op_id op, const cx_desc *in, int n_in, cx_status *st) {
    for (int k = 0; k < n_in; k++)
        if (cx_dtype_is_float(in[k].dtype))
            return cx_fail(st, CX_EINVAL, "%s: expected integer tensors, got type %s", OPNAME,
                           cx_dtype_name(in[k].dtype));
    return CX_OK;
}

CX_INFER(cx_infer_unary_int) {
    if (cx_check_arity(op, n_in, 1, st) || check_integer(op, in, n_in, st)) return st->code;
    return cx_infer_unary(op, in, n_in, ps, out, compute, st);
}

CX_INFER(cx_infer_binary_int) {
    if (cx_check_arity(op, n_in, 2, st) || check_integer(op, in, n_in, st)) return st->code;
    return cx_infer_binary(op, in, n_in, ps, out, compute, st);
}

CX_INFER(cx_infer_select) {
    (void)ps;
    if (cx_check_arity(op, n_in, 3, st)) return st->code;
    cx_desc tmp;
    if (cx_broadcast_shapes(op, &in[0], &in[1], &tmp, st)) return st->code;
    if (cx_broadcast_shapes(op, &tmp, &in[2], out, st)) return st->code;
    cx_dtype t = cx_dtype_merge(in[1].dtype, in[2].dtype);
    compute[0] = in[0].dtype; /* drivers read the predicate as "non-zero" in its own type */
    compute[1] = compute[2] = t;
    out->dtype = t;
    return CX_OK;
}

CX_INFER(cx_infer_clip) {
    (void)ps;
    if (cx_check_arity(op, n_in, 3, st)) return st->code;
    for (int k = 1; k < 3; k++) {
        cx_desc b;
        if (cx_broadcast_shapes(op, &in[0], &in[k], &b, st)) return st->code;
        if (b.rank != in[0].rank || memcmp(b.shape, in[0].shape, sizeof(int64_t) * (size_t)b.rank))
            return cx_fail(st, CX_EINVAL, "%s: expected %s to broadcast to the shape %s, got: %s",
                           OPNAME, k == 1 ? "min" : "max", SHAPE_STR(&in[0]), SHAPE_STR(&in[k]));
    }
    cx_dtype t = cx_dtype_merge(cx_dtype_merge(in[0].dtype, in[1].dtype), in[2].dtype);
    *out = in[0];
    out->dtype = t;
    compute[0] = compute[1] = compute[2] = t;
    return CX_OK;
}

CX_INFER(cx_infer_as_type) {
    if (cx_check_arity(op, n_in, 1, st)) return st->code;
    cx_dtype t = CX_F32;
    if (cx_require_type_param(op, ps, &t, st)) return st->code;
    *out = in[0];
    out->dtype = t;
    compute[0] = in[0].dtype;
    return CX_OK;
}

cx_code cx_reduce_shape(cx_op_id op, const cx_desc *in, cx_params *ps, cx_desc *out,
                        cx_status *st) {
    int rank = in->rank;
    cx_param *axes =
        cx_param_has(ps, CX_P_AXES) ? &ps->p[CX_P_AXES] : cx_put_all_axes(ps, CX_P_AXES, rank);
    if (cx_normalize_axes(op, axes, rank, true, st)) return st->code;
    bool keep = cx_param_bool(ps, CX_P_KEEP_AXES, false);
    cx_param_put_int(ps, CX_P_KEEP_AXES, keep);
    bool reduced[CX_MAX_RANK] = {false};
    for (int k = 0; k < axes->n; k++) reduced[axes->i[k]] = true;
    out->rank = 0;
    for (int a = 0; a < rank; a++) {
        if (!reduced[a])
            out->shape[out->rank++] = in->shape[a];
        else if (keep)
            out->shape[out->rank++] = 1;
    }
    return CX_OK;
}

CX_INFER(cx_infer_reduce) {
    if (cx_check_arity(op, n_in, 1, st)) return st->code;
    if (cx_reduce_shape(op, &in[0], ps, out, st)) return st->code;
    cx_dtype t = in[0].dtype;
    if (op == CX_OP_SUM || op == CX_OP_PRODUCT) t = cx_dtype_to_aggregate(t);
    if (op == CX_OP_ALL || op == CX_OP_ANY) t = CX_U8;
    out->dtype = t;
    compute[0] = in[0].dtype;
    return CX_OK;
}

CX_INFER(cx_infer_argreduce) {
    if (cx_check_arity(op, n_in, 1, st)) return st->code;
    int rank = in[0].rank;
    bool keep = cx_param_bool(ps, CX_P_KEEP_AXIS, false);
    cx_param_put_int(ps, CX_P_KEEP_AXIS, keep);
    int64_t tie = cx_param_has(ps, CX_P_TIE_BREAK) ? ps->p[CX_P_TIE_BREAK].i[0] : 0;
    if (tie != 0 && tie != 1)
        return cx_fail(st, CX_EINVAL,
                       "%s: expected tie_break to be 0 (:low) or 1 (:high), got: %lld", OPNAME,
                       (long long)tie);
    cx_param_put_int(ps, CX_P_TIE_BREAK, tie);
    out->rank = 0;
    if (cx_param_has(ps, CX_P_AXIS)) {
        int64_t axis = 0;
        if (cx_normalize_axis(op, ps->p[CX_P_AXIS].i[0], rank, &axis, st)) return st->code;
        ps->p[CX_P_AXIS].i[0] = axis;
        for (int a = 0; a < rank; a++) {
            if (a != axis)
                out->shape[out->rank++] = in[0].shape[a];
            else if (keep)
                out->shape[out->rank++] = 1;
        }
    } else if (keep) {
        for (int a = 0; a < rank; a++) out->shape[out->rank++] = 1;
    }
    /* An empty output needs no answer; an empty set of candidates has none to give. */
    if (cx_desc_numel(out) > 0 && cx_desc_numel(&in[0]) == 0)
        return cx_fail(st, CX_EINVAL, "%s: cannot take the %s over an empty axis of shape %s",
                       OPNAME, OPNAME, SHAPE_STR(&in[0]));
    out->dtype = CX_S64;
    compute[0] = in[0].dtype;
    return CX_OK;
}

/* sort keeps the tensor's type and shape; argsort gives integers of `type` (s64 by default) in
 * the same shape. A scalar sorts as itself (axis 0 of nothing). */
/* The axis of an op along one axis of one tensor (sort, the cumulative ops): 0 when not given,
 * normalised into the parameters; a scalar is one line along axis 0 (or -1). */
static cx_code line_axis(cx_op_id op, const cx_desc *in, int n_in, cx_params *ps, cx_status *st) {
    if (cx_check_arity(op, n_in, 1, st)) return st->code;
    int rank = in[0].rank;
    int64_t axis = cx_param_has(ps, CX_P_AXIS) ? ps->p[CX_P_AXIS].i[0] : 0;
    if (rank > 0) {
        if (cx_normalize_axis(op, axis, rank, &axis, st)) return st->code;
    } else if (axis != 0 && axis != -1) {
        return cx_fail(st, CX_EINVAL, "%s: expected axis 0 for a scalar, got: %lld", OPNAME,
                       (long long)axis);
    } else {
        axis = 0;
    }
    cx_param_put_int(ps, CX_P_AXIS, axis);
    return CX_OK;
}

CX_INFER(cx_infer_sort) {
    if (line_axis(op, in, n_in, ps, st)) return st->code;
    int64_t dir = cx_param_has(ps, CX_P_DIRECTION) ? ps->p[CX_P_DIRECTION].i[0] : 0;
    if (dir != 0 && dir != 1)
        return cx_fail(st, CX_EINVAL,
                       "%s: expected direction to be 0 (:asc) or 1 (:desc), got: %lld", OPNAME,
                       (long long)dir);
    cx_param_put_int(ps, CX_P_DIRECTION, dir);
    *out = in[0];
    if (op == CX_OP_ARGSORT) {
        int64_t t = cx_param_has(ps, CX_P_TYPE) ? ps->p[CX_P_TYPE].i[0] : CX_S64;
        if (!cx_dtype_valid((int)t) || cx_dtype_is_float((cx_dtype)t))
            return cx_fail(st, CX_EINVAL, "%s: expected an integer type for the positions, got: %s",
                           OPNAME, cx_dtype_name((cx_dtype)t));
        cx_param_put_int(ps, CX_P_TYPE, t);
        out->dtype = (cx_dtype)t;
        if (cx_param_has(ps, CX_P_K)) {
            int axis = in[0].rank ? (int)ps->p[CX_P_AXIS].i[0] : 0;
            int64_t n = in[0].rank ? in[0].shape[axis] : 1, k = ps->p[CX_P_K].i[0];
            if (k < 1 || k > n)
                return cx_fail(st, CX_EINVAL,
                               "%s: expected k between 1 and the axis' length %lld, got: %lld",
                               OPNAME, (long long)n, (long long)k);
            if (in[0].rank) out->shape[axis] = k;
        }
    }
    compute[0] = in[0].dtype;
    return CX_OK;
}

/* The leading (batch) axes of a {..., m, m} matrix argument: a's rank is at least 2 and its last
 * two axes are equal. */
static cx_code square_matrices(cx_op_id op, const cx_desc *a, const char *what, cx_status *st) {
    if (a->rank < 2 || a->shape[a->rank - 1] != a->shape[a->rank - 2])
        return cx_fail(st, CX_EINVAL,
                       "%s: expected %s to be a square matrix or a batch of square matrices, "
                       "got shape: %s",
                       OPNAME, what, SHAPE_STR(a));
    return CX_OK;
}

/* triangular_solve: a {..., m, m}; b {..., m, n} (left side), {..., n, m} (right side) or
 * {..., m} (one axis fewer than a: a vector per matrix), with a's leading axes. The result has
 * b's shape and the merged floating type, which both inputs are computed in. */
CX_INFER(cx_infer_triangular_solve) {
    if (cx_check_arity(op, n_in, 2, st)) return st->code;
    const cx_desc *a = &in[0], *b = &in[1];
    if (square_matrices(op, a, "a", st)) return st->code;
    bool lower = cx_param_bool(ps, CX_P_LOWER, true);
    bool left = cx_param_bool(ps, CX_P_LEFT_SIDE, true);
    int64_t tr = cx_param_has(ps, CX_P_TRANSFORM_A) ? ps->p[CX_P_TRANSFORM_A].i[0] : 0;
    if (tr != 0 && tr != 1)
        return cx_fail(st, CX_EINVAL,
                       "%s: expected transform_a to be 0 (:none) or 1 (:transpose), got: %lld",
                       OPNAME, (long long)tr);
    cx_param_put_int(ps, CX_P_LOWER, lower);
    cx_param_put_int(ps, CX_P_LEFT_SIDE, left);
    cx_param_put_int(ps, CX_P_TRANSFORM_A, tr);
    int64_t m = a->shape[a->rank - 1];
    int batch = a->rank - 2;
    bool vector = b->rank == a->rank - 1;
    bool same_batch = vector || b->rank == a->rank;
    for (int k = 0; same_batch && k < batch; k++) same_batch = b->shape[k] == a->shape[k];
    int64_t along = vector ? b->shape[b->rank - 1]
                    : left ? (same_batch ? b->shape[b->rank - 2] : -1)
                           : (same_batch ? b->shape[b->rank - 1] : -1);
    if (!same_batch || along != m)
        return cx_fail(st, CX_EINVAL,
                       "%s: expected b of shape {..., %lld, n}, {..., n, %lld} with left_side: "
                       "false, or {..., %lld}, with the leading axes of a %s; got: %s",
                       OPNAME, (long long)m, (long long)m, (long long)m, SHAPE_STR(a),
                       SHAPE_STR(b));
    *out = *b;
    out->dtype = compute[0] = compute[1] = cx_dtype_to_float(cx_dtype_merge(a->dtype, b->dtype));
    return CX_OK;
}

/* lu_factor: {..., n, n} gives {..., n + 1, n}: the packed factors and the permutation row, in
 * f64 for f64 and f32 otherwise, so that every row number up to 2^24 is exact. */
CX_INFER(cx_infer_lu_factor) {
    (void)ps;
    if (cx_check_arity(op, n_in, 1, st)) return st->code;
    if (square_matrices(op, &in[0], "the tensor", st)) return st->code;
    int64_t n = in[0].shape[in[0].rank - 1];
    if (n > (INT64_C(1) << 24))
        return cx_fail(st, CX_EINVAL, "%s: matrices of %lld rows exceed the limit of 2^24", OPNAME,
                       (long long)n);
    *out = in[0];
    out->shape[out->rank - 2] = n + 1;
    if (cx_check_shape(op, out->shape, out->rank, st)) return st->code;
    out->dtype = compute[0] = in[0].dtype == CX_F64 ? CX_F64 : CX_F32;
    return CX_OK;
}

/* eigh_packed: {..., n, n} gives {..., n + 1, n}, the eigenvalues' row then the eigenvectors,
 * in the tensor's floating type. */
CX_INFER(cx_infer_eigh_packed) {
    (void)ps;
    if (cx_check_arity(op, n_in, 1, st)) return st->code;
    if (square_matrices(op, &in[0], "the tensor", st)) return st->code;
    *out = in[0];
    out->shape[out->rank - 2] += 1;
    if (cx_check_shape(op, out->shape, out->rank, st)) return st->code;
    out->dtype = compute[0] = cx_dtype_to_float(in[0].dtype);
    return CX_OK;
}

/* svd_packed: {..., m, n} gives {..., m + 1 + r, w}: u (m x c), the k = min(m, n) singular
 * values, vt (r x n), with c = m and r = n for full matrices, else both k, and w = max(c, n);
 * in the tensor's floating type. */
CX_INFER(cx_infer_svd_packed) {
    if (cx_check_arity(op, n_in, 1, st)) return st->code;
    const cx_desc *a = &in[0];
    if (a->rank < 2)
        return cx_fail(st, CX_EINVAL, "%s: expected a matrix or a batch of matrices, got shape: %s",
                       OPNAME, SHAPE_STR(a));
    if (cx_dtype_is_complex(a->dtype))
        return cx_fail(st, CX_EINVAL, "%s: expected a real tensor, got: %s", OPNAME,
                       cx_dtype_name(a->dtype));
    int64_t m = a->shape[a->rank - 2], n = a->shape[a->rank - 1], k = m < n ? m : n;
    if (m > INT32_MAX || n > INT32_MAX)
        return cx_fail(st, CX_EINVAL, "%s: matrices of %lld x %lld exceed the limit of 2^31 - 1",
                       OPNAME, (long long)m, (long long)n);
    bool full = ps->p[CX_P_FULL_MATRICES].i[0] != 0;
    int64_t c = full ? m : k, r = full ? n : k;
    *out = *a;
    out->shape[out->rank - 2] = m + 1 + r;
    out->shape[out->rank - 1] = c > n ? c : n;
    if (cx_check_shape(op, out->shape, out->rank, st)) return st->code;
    out->dtype = compute[0] = cx_dtype_to_float(a->dtype);
    return CX_OK;
}

CX_INFER(cx_infer_reshape) {
    if (cx_check_arity(op, n_in, 1, st)) return st->code;
    if (cx_shape_param(op, ps, out, st)) return st->code;
    if (cx_desc_numel(out) != cx_desc_numel(&in[0]))
        return cx_fail(st, CX_EINVAL,
                       "%s: cannot reshape %s (%lld elements) into %s (%lld elements)", OPNAME,
                       SHAPE_STR(&in[0]), (long long)cx_desc_numel(&in[0]), SHAPE_STR(out),
                       (long long)cx_desc_numel(out));
    out->dtype = in[0].dtype;
    compute[0] = in[0].dtype;
    return CX_OK;
}

CX_INFER(cx_infer_transpose) {
    if (cx_check_arity(op, n_in, 1, st)) return st->code;
    int rank = in[0].rank;
    cx_param *axes = cx_param_get(ps, CX_P_AXES) ? &ps->p[CX_P_AXES] : NULL;
    if (!axes) {
        axes = cx_param_put(ps, CX_P_AXES);
        axes->n = rank;
        for (int k = 0; k < rank; k++) axes->i[k] = rank - 1 - k;
    }
    if (axes->n != rank)
        return cx_fail(st, CX_EINVAL, "%s: expected %d axes (a permutation) for shape %s, got: %s",
                       OPNAME, rank, SHAPE_STR(&in[0]),
                       cx_fmt_ints(axes->i, axes->n, (char[200]){0}, 200));
    if (cx_normalize_axes(op, axes, rank, false, st)) return st->code;
    out->rank = rank;
    for (int k = 0; k < rank; k++) out->shape[k] = in[0].shape[axes->i[k]];
    out->dtype = compute[0] = in[0].dtype;
    return CX_OK;
}

CX_INFER(cx_infer_broadcast) {
    if (cx_check_arity(op, n_in, 1, st)) return st->code;
    if (cx_shape_param(op, ps, out, st)) return st->code;
    int rin = in[0].rank, rout = out->rank;
    if (rin > rout)
        return cx_fail(st, CX_EINVAL, "%s: cannot broadcast shape %s to the smaller rank of %s",
                       OPNAME, SHAPE_STR(&in[0]), SHAPE_STR(out));
    cx_param *axes = cx_param_get(ps, CX_P_AXES) ? &ps->p[CX_P_AXES] : NULL;
    if (!axes) {
        axes = cx_param_put(ps, CX_P_AXES);
        axes->n = rin;
        for (int k = 0; k < rin; k++) axes->i[k] = rout - rin + k;
    }
    if (axes->n != rin)
        return cx_fail(st, CX_EINVAL, "%s: expected %d axes (one per input axis), got: %s", OPNAME,
                       rin, cx_fmt_ints(axes->i, axes->n, (char[200]){0}, 200));
    if (cx_normalize_axes(op, axes, rout, false, st)) return st->code;
    for (int k = 0; k < rin; k++) {
        if (k > 0 && axes->i[k] <= axes->i[k - 1])
            return cx_fail(st, CX_EINVAL, "%s: expected increasing axes, got: %s", OPNAME,
                           cx_fmt_ints(axes->i, axes->n, (char[200]){0}, 200));
        int64_t d = in[0].shape[k], t = out->shape[axes->i[k]];
        if (d != 1 && d != t)
            return cx_fail(st, CX_EINVAL,
                           "%s: cannot broadcast %s to %s: input axis %d has size %lld, output "
                           "axis %lld has size %lld",
                           OPNAME, SHAPE_STR(&in[0]), SHAPE_STR(out), k, (long long)d,
                           (long long)axes->i[k], (long long)t);
    }
    out->dtype = compute[0] = in[0].dtype;
    return CX_OK;
}

CX_INFER(cx_infer_squeeze) {
    if (cx_check_arity(op, n_in, 1, st)) return st->code;
    int rank = in[0].rank;
    cx_param *axes = cx_param_get(ps, CX_P_AXES) ? &ps->p[CX_P_AXES] : NULL;
    if (!axes) {
        axes = cx_param_put(ps, CX_P_AXES);
        axes->n = 0;
        for (int k = 0; k < rank; k++)
            if (in[0].shape[k] == 1) axes->i[axes->n++] = k;
    }
    if (cx_normalize_axes(op, axes, rank, true, st)) return st->code;
    bool drop[CX_MAX_RANK] = {false};
    for (int k = 0; k < axes->n; k++) {
        if (in[0].shape[axes->i[k]] != 1)
            return cx_fail(st, CX_EINVAL,
                           "%s: cannot squeeze axis %lld of shape %s: its size is %lld, not 1",
                           OPNAME, (long long)axes->i[k], SHAPE_STR(&in[0]),
                           (long long)in[0].shape[axes->i[k]]);
        drop[axes->i[k]] = true;
    }
    out->rank = 0;
    for (int k = 0; k < rank; k++)
        if (!drop[k]) out->shape[out->rank++] = in[0].shape[k];
    out->dtype = compute[0] = in[0].dtype;
    return CX_OK;
}

/* Checks that an INTS parameter has one entry per axis. */
static cx_code per_axis(cx_op_id op, const cx_params *ps, cx_param_id id, int rank, cx_status *st) {
    if (cx_require_param(op, ps, id, st)) return st->code;
    const cx_param *p = &ps->p[id];
    if (p->n != rank)
        return cx_fail(st, CX_EINVAL, "%s: expected %s to have %d entries (one per axis), got: %s",
                       OPNAME, cx_param_table[id].name, rank,
                       cx_fmt_ints(p->i, p->n, (char[200]){0}, 200));
    return CX_OK;
}

CX_INFER(cx_infer_slice) {
    if (cx_check_arity(op, n_in, 1, st)) return st->code;
    int rank = in[0].rank;
    if (per_axis(op, ps, CX_P_START, rank, st) || per_axis(op, ps, CX_P_LENGTHS, rank, st))
        return st->code;
    if (!cx_param_has(ps, CX_P_STRIDES)) {
        cx_param *s = cx_param_put(ps, CX_P_STRIDES);
        s->n = rank;
        for (int k = 0; k < rank; k++) s->i[k] = 1;
    }
    if (per_axis(op, ps, CX_P_STRIDES, rank, st)) return st->code;
    int64_t *start = ps->p[CX_P_START].i, *len = ps->p[CX_P_LENGTHS].i,
            *stride = ps->p[CX_P_STRIDES].i;
    out->rank = rank;
    for (int k = 0; k < rank; k++) {
        int64_t dim = in[0].shape[k];
        if (len[k] < 0 || len[k] > dim)
            return cx_fail(st, CX_EINVAL,
                           "%s: expected length %lld of axis %d to be in 0..%lld for shape %s",
                           OPNAME, (long long)len[k], k, (long long)dim, SHAPE_STR(&in[0]));
        if (stride[k] < 1)
            return cx_fail(st, CX_EINVAL, "%s: expected strides to be positive, got: %s", OPNAME,
                           cx_fmt_ints(stride, rank, (char[200]){0}, 200));
        /* Nx clips the start so that the slice has the asked length. */
        if (start[k] > dim - len[k]) start[k] = dim - len[k];
        if (start[k] < 0) start[k] = 0;
        out->shape[k] = len[k] == 0 ? 0 : (len[k] - 1) / stride[k] + 1;
    }
    out->dtype = compute[0] = in[0].dtype;
    return CX_OK;
}

CX_INFER(cx_infer_put_slice) {
    if (cx_check_arity(op, n_in, 2, st)) return st->code;
    int rank = in[0].rank;
    if (in[1].rank != rank)
        return cx_fail(st, CX_EINVAL, "%s: expected the slice to have the rank of %s, got: %s",
                       OPNAME, SHAPE_STR(&in[0]), SHAPE_STR(&in[1]));
    if (per_axis(op, ps, CX_P_START, rank, st)) return st->code;
    int64_t *start = ps->p[CX_P_START].i;
    for (int k = 0; k < rank; k++) {
        int64_t dim = in[0].shape[k], sdim = in[1].shape[k];
        if (sdim > dim)
            return cx_fail(st, CX_EINVAL, "%s: slice %s does not fit in %s", OPNAME,
                           SHAPE_STR(&in[1]), SHAPE_STR(&in[0]));
        if (start[k] > dim - sdim) start[k] = dim - sdim;
        if (start[k] < 0) start[k] = 0;
    }
    *out = in[0];
    out->dtype = compute[0] = compute[1] = cx_dtype_merge(in[0].dtype, in[1].dtype);
    return CX_OK;
}

CX_INFER(cx_infer_pad) {
    if (cx_check_arity(op, n_in, 1, st)) return st->code;
    int rank = in[0].rank;
    if (cx_require_param(op, ps, CX_P_VALUE, st) || cx_require_param(op, ps, CX_P_PADS, st))
        return st->code;
    const cx_param *pads = &ps->p[CX_P_PADS];
    if (pads->n != 3 * rank)
        return cx_fail(st, CX_EINVAL,
                       "%s: expected %d {low, high, interior} entries (%d integers) for shape %s, "
                       "got %d integers",
                       OPNAME, rank, 3 * rank, SHAPE_STR(&in[0]), pads->n);
    out->rank = rank;
    for (int k = 0; k < rank; k++) {
        int64_t lo = pads->i[3 * k], hi = pads->i[3 * k + 1], in_ = pads->i[3 * k + 2];
        int64_t d = in[0].shape[k];
        if (in_ < 0 || in_ > CX_MAX_NUMEL || lo < -CX_MAX_NUMEL || lo > CX_MAX_NUMEL ||
            hi < -CX_MAX_NUMEL || hi > CX_MAX_NUMEL)
            return cx_fail(st, CX_EINVAL,
                           "%s: expected interior padding in 0..2^48 and low/high within ±2^48 on "
                           "axis %d, got: {%lld, %lld, %lld}",
                           OPNAME, k, (long long)lo, (long long)hi, (long long)in_);
        /* d + (d - 1) * interior, checked before the product can overflow */
        if (d > 1 && in_ > (CX_MAX_NUMEL - d) / (d - 1))
            return cx_fail(st, CX_EINVAL,
                           "%s: interior padding %lld gives axis %d of shape %s more than 2^48 "
                           "elements",
                           OPNAME, (long long)in_, k, SHAPE_STR(&in[0]));
        int64_t grown = d == 0 ? 0 : d + (d - 1) * in_;
        int64_t size = lo + hi + grown;
        if (grown > CX_MAX_NUMEL || size < 0)
            return cx_fail(
                st, CX_EINVAL,
                "%s: padding {%lld, %lld, %lld} gives axis %d of shape %s a size of %lld", OPNAME,
                (long long)lo, (long long)hi, (long long)in_, k, SHAPE_STR(&in[0]),
                (long long)size);
        out->shape[k] = size;
    }
    if (cx_check_shape(op, out->shape, rank, st)) return st->code;
    out->dtype = compute[0] = merge_number(in[0].dtype, &ps->p[CX_P_VALUE]);
    return CX_OK;
}

CX_INFER(cx_infer_reverse) {
    if (cx_check_arity(op, n_in, 1, st)) return st->code;
    cx_param *axes = cx_param_has(ps, CX_P_AXES) ? &ps->p[CX_P_AXES]
                                                 : cx_put_all_axes(ps, CX_P_AXES, in[0].rank);
    if (cx_normalize_axes(op, axes, in[0].rank, true, st)) return st->code;
    *out = in[0];
    compute[0] = in[0].dtype;
    return CX_OK;
}

CX_INFER(cx_infer_concatenate) {
    if (n_in < 1) return cx_fail(st, CX_EINVAL, "%s: expected a non-empty list of tensors", OPNAME);
    int rank = in[0].rank;
    int64_t axis = 0;
    if (cx_normalize_axis(op, cx_param_has(ps, CX_P_AXIS) ? ps->p[CX_P_AXIS].i[0] : 0, rank, &axis,
                          st))
        return st->code;
    cx_param_put_int(ps, CX_P_AXIS, axis);
    *out = in[0];
    cx_dtype t = in[0].dtype;
    for (int k = 1; k < n_in; k++) {
        bool match = in[k].rank == rank;
        for (int a = 0; match && a < rank; a++)
            if (a != axis && in[k].shape[a] != in[0].shape[a]) match = false;
        if (!match)
            return cx_fail(st, CX_EINVAL,
                           "%s: expected all shapes to match %s except on axis %lld, got: %s",
                           OPNAME, SHAPE_STR(&in[0]), (long long)axis, SHAPE_STR(&in[k]));
        out->shape[axis] += in[k].shape[axis];
        t = cx_dtype_merge(t, in[k].dtype);
    }
    if (cx_check_shape(op, out->shape, rank, st)) return st->code;
    out->dtype = t;
    for (int k = 0; k < n_in; k++) compute[k] = t;
    return CX_OK;
}

/* take's and take_along_axis's arguments: a tensor and integer indices; `axis` (0 when not
 * given) normalised into *axis and the parameters */
static cx_code indices_along(cx_op_id op, const cx_desc *in, int n_in, cx_params *ps, int64_t *axis,
                             cx_status *st) {
    if (cx_check_arity(op, n_in, 2, st)) return st->code;
    if (cx_require_integer(op, &in[1], "indices", st)) return st->code;
    if (cx_normalize_axis(op, cx_param_has(ps, CX_P_AXIS) ? ps->p[CX_P_AXIS].i[0] : 0, in[0].rank,
                          axis, st))
        return st->code;
    cx_param_put_int(ps, CX_P_AXIS, *axis);
    return CX_OK;
}

/* take's and take_along_axis's result, of the shape in *out: nothing to take from an empty axis;
 * the tensor's type, s64 indices */
static cx_code taken(cx_op_id op, const cx_desc *in, int64_t axis, cx_desc *out, cx_dtype *compute,
                     cx_status *st) {
    if (in[0].shape[axis] == 0 && cx_desc_numel(out) > 0)
        return cx_fail(st, CX_EINVAL, "%s: cannot take from axis %lld of size 0 in shape %s",
                       OPNAME, (long long)axis, SHAPE_STR(&in[0]));
    out->dtype = compute[0] = in[0].dtype;
    compute[1] = CX_S64;
    return CX_OK;
}

CX_INFER(cx_infer_take) {
    int64_t axis = 0;
    if (indices_along(op, in, n_in, ps, &axis, st)) return st->code;
    int rank = in[0].rank - 1 + in[1].rank;
    if (rank > CX_MAX_RANK)
        return cx_fail(st, CX_EINVAL, "%s: the result would have rank %d, above the limit of %d",
                       OPNAME, rank, CX_MAX_RANK);
    out->rank = 0;
    for (int a = 0; a < in[0].rank; a++) {
        if (a == axis)
            for (int b = 0; b < in[1].rank; b++) out->shape[out->rank++] = in[1].shape[b];
        else
            out->shape[out->rank++] = in[0].shape[a];
    }
    if (cx_check_shape(op, out->shape, out->rank, st)) return st->code;
    return taken(op, in, axis, out, compute, st);
}

/* The cumulative ops keep the tensor's type and shape; `axis` normalised (0 for a scalar),
 * `reverse` false unless given. */
CX_INFER(cx_infer_scan) {
    if (line_axis(op, in, n_in, ps, st)) return st->code;
    if (!cx_param_has(ps, CX_P_REVERSE)) cx_param_put_int(ps, CX_P_REVERSE, 0);
    *out = in[0];
    compute[0] = in[0].dtype;
    return CX_OK;
}

/* take_along_axis: indices of the tensor's rank, of its sizes on every axis but `axis`; the
 * result has the indices' shape and the tensor's type. */
CX_INFER(cx_infer_take_along_axis) {
    int64_t axis = 0;
    if (indices_along(op, in, n_in, ps, &axis, st)) return st->code;
    bool fits = in[1].rank == in[0].rank;
    for (int a = 0; fits && a < in[0].rank; a++)
        fits = a == axis || in[1].shape[a] == in[0].shape[a];
    if (!fits)
        return cx_fail(st, CX_EINVAL,
                       "%s: expected indices of the tensor's shape %s but along axis %lld, got "
                       "shape %s",
                       OPNAME, SHAPE_STR(&in[0]), (long long)axis, SHAPE_STR(&in[1]));
    *out = in[1];
    return taken(op, in, axis, out, compute, st);
}

/* gather's and the indexed updates' `axes`: k of them (the first k when not given),
 * normalised, in increasing order; `used` marks them. NULL (with st set) when they are not. */
static cx_param *index_axes(cx_op_id op, cx_params *ps, int64_t k, int rank, bool used[CX_MAX_RANK],
                            cx_status *st) {
    cx_param *axes =
        cx_param_get(ps, CX_P_AXES) ? &ps->p[CX_P_AXES] : cx_put_all_axes(ps, CX_P_AXES, (int)k);
    if (axes->n != k) {
        cx_fail(st, CX_EINVAL, "%s: expected %lld axes (the last indices dimension), got: %s",
                OPNAME, (long long)k, cx_fmt_ints(axes->i, axes->n, (char[200]){0}, 200));
        return NULL;
    }
    for (int j = 0; j < axes->n; j++) {
        int64_t a = 0;
        if (cx_normalize_axis(op, axes->i[j], rank, &a, st)) return NULL;
        if (j > 0 && a <= axes->i[j - 1]) {
            cx_fail(st, CX_EINVAL, "%s: expected axes in increasing order, got: %s", OPNAME,
                    cx_fmt_ints(axes->i, axes->n, (char[200]){0}, 200));
            return NULL;
        }
        axes->i[j] = a;
    }
    for (int j = 0; j < axes->n; j++) used[axes->i[j]] = true;
    return axes;
}

CX_INFER(cx_infer_gather) {
    if (cx_check_arity(op, n_in, 2, st)) return st->code;
    if (cx_require_integer(op, &in[1], "indices", st)) return st->code;
    int rank = in[0].rank, irank = in[1].rank;
    if (irank < 1)
        return cx_fail(st, CX_EINVAL, "%s: expected indices of rank 1 or more, got shape %s",
                       OPNAME, SHAPE_STR(&in[1]));
    int64_t k = in[1].shape[irank - 1];
    if (k > rank)
        return cx_fail(
            st, CX_EINVAL,
            "%s: expected the last indices dimension (%lld) to be at most the tensor rank (%d)",
            OPNAME, (long long)k, rank);
    bool used[CX_MAX_RANK] = {false};
    cx_param *axes = index_axes(op, ps, k, rank, used, st);
    if (!axes) return st->code;
    out->rank = 0;
    for (int j = 0; j < irank - 1; j++) out->shape[out->rank++] = in[1].shape[j];
    for (int a = 0; a < rank; a++)
        if (!used[a]) {
            if (out->rank == CX_MAX_RANK)
                return cx_fail(st, CX_EINVAL, "%s: the result would have a rank above %d", OPNAME,
                               CX_MAX_RANK);
            out->shape[out->rank++] = in[0].shape[a];
        }
    if (cx_check_shape(op, out->shape, out->rank, st)) return st->code;
    for (int j = 0; j < axes->n; j++)
        if (in[0].shape[axes->i[j]] == 0 && cx_desc_numel(out) > 0)
            return cx_fail(st, CX_EINVAL, "%s: cannot gather from axis %lld of size 0", OPNAME,
                           (long long)axes->i[j]);
    out->dtype = compute[0] = in[0].dtype;
    compute[1] = CX_S64;
    return CX_OK;
}

/* Window reductions: window, strides and window_dilations have one entry per axis (strides and
 * dilations default to 1 and must be positive); padding arrives as [0] (:valid), [1] (:same) or
 * a {low, high} pair per axis and leaves as the pairs. An axis too short for its window after
 * padding gives no windows. The type is kept. */
CX_INFER(cx_infer_window) {
    if (cx_check_arity(op, n_in, 1, st)) return st->code;
    if (cx_require_param(op, ps, CX_P_WINDOW, st)) return st->code;
    int rank = in[0].rank;
    const int64_t *shape = in[0].shape;
    cx_param *w = &ps->p[CX_P_WINDOW];
    if (w->n != rank)
        return cx_fail(st, CX_EINVAL, "%s: expected a window of rank %d (the tensor's), got: %s",
                       OPNAME, rank, cx_fmt_ints(w->i, w->n, (char[200]){0}, 200));
    cx_param_id ids[2] = {CX_P_STRIDES, CX_P_WINDOW_DILATIONS};
    const char *names[2] = {"strides", "window_dilations"};
    for (int k = 0; k < 2; k++) {
        const cx_param *p = cx_param_get(ps, ids[k]);
        if (!p) {
            int64_t ones[CX_MAX_RANK];
            for (int a = 0; a < rank; a++) ones[a] = 1;
            cx_param_put_ints(ps, ids[k], ones, rank);
            continue;
        }
        if (p->n != rank)
            return cx_fail(st, CX_EINVAL, "%s: expected %d %s (one per axis), got: %s", OPNAME,
                           rank, names[k], cx_fmt_ints(p->i, p->n, (char[200]){0}, 200));
        for (int a = 0; a < rank; a++)
            if (p->i[a] < 1 || p->i[a] > CX_MAX_NUMEL)
                return cx_fail(st, CX_EINVAL, "%s: expected positive %s, got: %s", OPNAME, names[k],
                               cx_fmt_ints(p->i, p->n, (char[200]){0}, 200));
    }
    const int64_t *s = ps->p[CX_P_STRIDES].i, *d = ps->p[CX_P_WINDOW_DILATIONS].i;
    int64_t eff[CX_MAX_RANK], pads[2 * CX_MAX_RANK];
    for (int a = 0; a < rank; a++) {
        if (w->i[a] < 1 || w->i[a] > CX_MAX_NUMEL)
            return cx_fail(st, CX_EINVAL, "%s: expected a window of positive sizes, got: %s",
                           OPNAME, cx_fmt_ints(w->i, w->n, (char[200]){0}, 200));
        eff[a] = (w->i[a] - 1) * d[a] + 1;
        if (eff[a] > CX_MAX_NUMEL)
            return cx_fail(st, CX_EINVAL, "%s: the dilated window is too large", OPNAME);
    }
    /* the kernels walk every position of a window: their count must fit, as a tensor's does */
    if (cx_check_shape(op, w->i, w->n, st)) return st->code;
    const cx_param *p = cx_param_get(ps, CX_P_PADDING);
    if (p && p->n == 2 * rank && rank > 0) {
        for (int k = 0; k < 2 * rank; k++) {
            if (p->i[k] < -CX_MAX_NUMEL || p->i[k] > CX_MAX_NUMEL)
                return cx_fail(st, CX_EINVAL, "%s: expected padding within -2^48..2^48, got: %s",
                               OPNAME, cx_fmt_ints(p->i, p->n, (char[200]){0}, 200));
            pads[k] = p->i[k];
        }
    } else if (!p || (p->n == 1 && (p->i[0] == 0 || p->i[0] == 1))) {
        bool same = p && p->i[0] == 1;
        for (int a = 0; a < rank; a++) {
            int64_t outs = (shape[a] + s[a] - 1) / s[a];
            int64_t total = same ? (outs - 1) * s[a] + eff[a] - shape[a] : 0;
            if (total < 0) total = 0;
            pads[2 * a] = total / 2;
            pads[2 * a + 1] = total - total / 2;
        }
    } else {
        return cx_fail(st, CX_EINVAL,
                       "%s: expected padding to be 0 (:valid), 1 (:same) or a {low, high} pair per "
                       "axis (%d integers), got: %s",
                       OPNAME, 2 * rank, cx_fmt_ints(p->i, p->n, (char[200]){0}, 200));
    }
    cx_param_put_ints(ps, CX_P_PADDING, pads, 2 * rank);
    *out = in[0];
    for (int a = 0; a < rank; a++) {
        int64_t padded = shape[a] + pads[2 * a] + pads[2 * a + 1];
        out->shape[a] = padded >= eff[a] ? (padded - eff[a]) / s[a] + 1 : 0;
    }
    compute[0] = in[0].dtype;
    return CX_OK;
}

/* window_scatter_max/min: the windows of `tensor` as window_sum's (no dilations); `source` has
 * the windows' shape; the result has `tensor`'s shape and `source`'s type merged with the
 * value's. The tensor is compared in its own type. */
CX_INFER(cx_infer_window_scatter) {
    if (cx_check_arity(op, n_in, 2, st)) return st->code;
    /* window_sum's inference fills in dilations of 1, which a second inference (explain/3
     * plans, then runs) sees again: only dilations above 1 are refused */
    const cx_param *dil = cx_param_get(ps, CX_P_WINDOW_DILATIONS);
    for (int a = 0; dil && a < dil->n; a++)
        if (dil->i[a] != 1) return cx_fail(st, CX_EINVAL, "%s: takes no window_dilations", OPNAME);
    cx_desc windows;
    cx_dtype c0[1];
    if (cx_infer_window(op, &in[0], 1, ps, &windows, c0, st)) return st->code;
    bool same = windows.rank == in[1].rank;
    for (int a = 0; same && a < windows.rank; a++) same = windows.shape[a] == in[1].shape[a];
    if (!same)
        return cx_fail(st, CX_EINVAL,
                       "%s: expected a source of shape %s (one element per window), got: %s",
                       OPNAME, SHAPE_STR(&windows), SHAPE_STR(&in[1]));
    if (cx_require_param(op, ps, CX_P_VALUE, st)) return st->code;
    /* every position of every window is compared (padding holds the value and can win) */
    int64_t wn = 1;
    for (int a = 0; a < ps->p[CX_P_WINDOW].n; a++) wn *= ps->p[CX_P_WINDOW].i[a];
    if (wn > (INT64_C(1) << 24))
        return cx_fail(st, CX_EINVAL,
                       "%s: a window of %lld positions is more than the 2^24 it takes", OPNAME,
                       (long long)wn);
    *out = in[0];
    out->dtype = compute[1] = merge_number(in[1].dtype, &ps->p[CX_P_VALUE]);
    compute[0] = in[0].dtype;
    return CX_OK;
}

/* indexed_add and indexed_put: indices {..., k} with k positions along `axes` (the first k
 * axes when not given, increasing); updates of shape indices' leading dims ++ target's axes
 * not in `axes`. The result has target's shape and the merged type of target and updates. */
CX_INFER(cx_infer_indexed) {
    if (cx_check_arity(op, n_in, 3, st)) return st->code;
    if (cx_require_integer(op, &in[1], "indices", st)) return st->code;
    const cx_desc *t = &in[0], *ix = &in[1], *up = &in[2];
    int rank = t->rank, irank = ix->rank;
    if (irank < 1)
        return cx_fail(st, CX_EINVAL, "%s: expected indices of rank 1 or more, got shape %s",
                       OPNAME, SHAPE_STR(ix));
    int64_t k = ix->shape[irank - 1];
    if (k > rank)
        return cx_fail(
            st, CX_EINVAL,
            "%s: expected the last indices dimension (%lld) to be at most the target rank (%d)",
            OPNAME, (long long)k, rank);
    bool used[CX_MAX_RANK] = {false};
    cx_param *axes = index_axes(op, ps, k, rank, used, st);
    if (!axes) return st->code;
    cx_desc want = {.dtype = up->dtype, .rank = 0};
    for (int j = 0; j < irank - 1; j++) want.shape[want.rank++] = ix->shape[j];
    for (int a = 0; a < rank; a++)
        if (!used[a]) {
            if (want.rank == CX_MAX_RANK)
                return cx_fail(st, CX_EINVAL, "%s: the updates would have a rank above %d", OPNAME,
                               CX_MAX_RANK);
            want.shape[want.rank++] = t->shape[a];
        }
    bool same = want.rank == up->rank;
    for (int a = 0; same && a < want.rank; a++) same = want.shape[a] == up->shape[a];
    if (!same)
        return cx_fail(st, CX_EINVAL,
                       "%s: expected updates of shape %s (the leading indices dimensions, then "
                       "the target axes not indexed), got: %s",
                       OPNAME, SHAPE_STR(&want), SHAPE_STR(up));
    cx_dtype ty = cx_dtype_merge(t->dtype, up->dtype);
    *out = *t;
    out->dtype = compute[0] = compute[2] = ty;
    compute[1] = CX_S64;
    return CX_OK;
}

/* Fills contract/batch axes of one operand, checking range and distinctness across both lists. */
static cx_code dot_axes(cx_op_id op, cx_param *contract, cx_param *batch, const cx_desc *d,
                        const char *side, bool used[CX_MAX_RANK], cx_status *st) {
    cx_param *lists[2] = {contract, batch};
    for (int l = 0; l < 2; l++)
        for (int k = 0; k < lists[l]->n; k++) {
            if (cx_normalize_axis(op, lists[l]->i[k], d->rank, &lists[l]->i[k], st))
                return st->code;
            if (used[lists[l]->i[k]])
                return cx_fail(st, CX_EINVAL, "%s: axis %lld of the %s operand is used twice",
                               OPNAME, (long long)lists[l]->i[k], side);
            used[lists[l]->i[k]] = true;
        }
    return CX_OK;
}

CX_INFER(cx_infer_dot) {
    if (cx_check_arity(op, n_in, 2, st)) return st->code;
    const cx_desc *a = &in[0], *b = &in[1];
    cx_param_id ids[4] = {CX_P_CONTRACT_A, CX_P_BATCH_A, CX_P_CONTRACT_B, CX_P_BATCH_B};
    bool any = false;
    for (int k = 0; k < 4; k++) any = any || cx_param_has(ps, ids[k]);
    if (!any) {
        /* Nx.dot/2: last axis of left with the second to last (or only) axis of right. */
        bool scalar = a->rank == 0 || b->rank == 0;
        cx_param_put_ints(ps, CX_P_CONTRACT_A, (int64_t[]){a->rank - 1}, scalar ? 0 : 1);
        cx_param_put_ints(ps, CX_P_CONTRACT_B, (int64_t[]){b->rank >= 2 ? b->rank - 2 : 0},
                          scalar ? 0 : 1);
    }
    for (int k = 0; k < 4; k++)
        if (!cx_param_has(ps, ids[k])) cx_param_put(ps, ids[k])->n = 0;
    cx_param *ca = &ps->p[CX_P_CONTRACT_A], *ba = &ps->p[CX_P_BATCH_A];
    cx_param *cb = &ps->p[CX_P_CONTRACT_B], *bb = &ps->p[CX_P_BATCH_B];
    if (ca->n != cb->n || ba->n != bb->n)
        return cx_fail(
            st, CX_EINVAL,
            "%s: expected as many axes on both sides, got contracting %d vs %d and batch %d vs %d",
            OPNAME, ca->n, cb->n, ba->n, bb->n);
    bool used_a[CX_MAX_RANK] = {false}, used_b[CX_MAX_RANK] = {false};
    if (dot_axes(op, ca, ba, a, "left", used_a, st) || dot_axes(op, cb, bb, b, "right", used_b, st))
        return st->code;
    for (int k = 0; k < ca->n; k++)
        if (a->shape[ca->i[k]] != b->shape[cb->i[k]])
            return cx_fail(
                st, CX_EINVAL,
                "%s: cannot contract axis %lld of %s with axis %lld of %s (sizes %lld and %lld)",
                OPNAME, (long long)ca->i[k], SHAPE_STR(a), (long long)cb->i[k], SHAPE_STR(b),
                (long long)a->shape[ca->i[k]], (long long)b->shape[cb->i[k]]);
    for (int k = 0; k < ba->n; k++)
        if (a->shape[ba->i[k]] != b->shape[bb->i[k]])
            return cx_fail(
                st, CX_EINVAL,
                "%s: batch axis %lld of %s and axis %lld of %s differ (sizes %lld and %lld)",
                OPNAME, (long long)ba->i[k], SHAPE_STR(a), (long long)bb->i[k], SHAPE_STR(b),
                (long long)a->shape[ba->i[k]], (long long)b->shape[bb->i[k]]);
    int rank = a->rank + b->rank - 2 * ca->n - ba->n;
    if (rank > CX_MAX_RANK)
        return cx_fail(st, CX_EINVAL, "%s: the result would have rank %d, above the limit of %d",
                       OPNAME, rank, CX_MAX_RANK);
    out->rank = 0;
    for (int k = 0; k < ba->n; k++) out->shape[out->rank++] = a->shape[ba->i[k]];
    for (int k = 0; k < a->rank; k++)
        if (!used_a[k]) out->shape[out->rank++] = a->shape[k];
    for (int k = 0; k < b->rank; k++)
        if (!used_b[k]) out->shape[out->rank++] = b->shape[k];
    if (cx_check_shape(op, out->shape, out->rank, st)) return st->code;
    out->dtype = compute[0] = compute[1] = cx_dtype_merge(a->dtype, b->dtype);
    return CX_OK;
}

static cx_code creation_type(cx_op_id op, cx_params *ps, cx_dtype dflt, cx_dtype *t,
                             cx_status *st) {
    if (!cx_param_has(ps, CX_P_TYPE)) cx_param_put_int(ps, CX_P_TYPE, dflt);
    return cx_require_type_param(op, ps, t, st);
}

CX_INFER(cx_infer_full) {
    (void)in;
    (void)compute;
    if (cx_check_arity(op, n_in, 0, st)) return st->code;
    if (cx_require_param(op, ps, CX_P_VALUE, st)) return st->code;
    if (cx_shape_param(op, ps, out, st)) return st->code;
    return creation_type(op, ps, ps->p[CX_P_VALUE].is_int ? CX_S64 : CX_F32, &out->dtype, st);
}

CX_INFER(cx_infer_iota) {
    (void)in;
    (void)compute;
    if (cx_check_arity(op, n_in, 0, st)) return st->code;
    if (cx_shape_param(op, ps, out, st)) return st->code;
    if (cx_param_has(ps, CX_P_AXIS)) {
        int64_t axis = 0;
        if (cx_normalize_axis(op, ps->p[CX_P_AXIS].i[0], out->rank, &axis, st)) return st->code;
        ps->p[CX_P_AXIS].i[0] = axis;
    }
    return creation_type(op, ps, CX_S64, &out->dtype, st);
}

CX_INFER(cx_infer_eye) {
    (void)in;
    (void)compute;
    if (cx_check_arity(op, n_in, 0, st)) return st->code;
    if (cx_shape_param(op, ps, out, st)) return st->code;
    if (out->rank < 2)
        return cx_fail(st, CX_EINVAL, "%s: expected a shape of rank 2 or more, got: %s", OPNAME,
                       SHAPE_STR(out));
    return creation_type(op, ps, CX_S64, &out->dtype, st);
}

CX_INFER(cx_infer_random) {
    (void)in;
    (void)compute;
    if (cx_check_arity(op, n_in, 0, st)) return st->code;
    if (cx_shape_param(op, ps, out, st)) return st->code;
    if (!cx_param_has(ps, CX_P_KEY))
        return cx_fail(st, CX_EINVAL, "%s: the key: option is required (an integer in 0..2^64-1)",
                       OPNAME);
    if (creation_type(op, ps, CX_F32, &out->dtype, st)) return st->code;
    if (!cx_dtype_is_float(out->dtype))
        return cx_fail(st, CX_EINVAL, "%s: expected a float type, got: %s", OPNAME,
                       cx_dtype_name(out->dtype));
    cx_param_id lo = op == CX_OP_RANDOM_NORMAL ? CX_P_MEAN : CX_P_MIN;
    cx_param_id hi = op == CX_OP_RANDOM_NORMAL ? CX_P_STD : CX_P_MAX;
    if (!cx_param_has(ps, lo)) cx_param_put_float(ps, lo, 0.0);
    if (!cx_param_has(ps, hi)) cx_param_put_float(ps, hi, 1.0);
    return CX_OK;
}

cx_dtype cx_merged_float(const cx_desc *in, int n) {
    cx_dtype t = in[0].dtype;
    for (int k = 1; k < n; k++) t = cx_dtype_merge(t, in[k].dtype);
    return cx_dtype_to_float(t);
}

cx_dtype cx_work_type(cx_dtype t) {
    t = cx_dtype_to_float(t);
    return t == CX_F16 || t == CX_BF16 ? CX_F32 : t;
}
