/* The REDUCE kind (sum, product, reduce_max, reduce_min, all, any) and the ARGREDUCE kind
 * (argmax, argmin).
 *
 * Floats reduce in double: it holds every f16/bf16/f32/f64 value exactly, so max and min are
 * exact and a sum of a narrow type rounds once, at the end. Integers reduce in int64, with sums
 * and products wrapping as uint64. Reductions walk the input once in row-major order: adjacent
 * axes of the same kind (reduced or kept) are merged, so the innermost merged axis is one
 * contiguous run, folded into one accumulator when it is reduced and elementwise into a row of
 * accumulators when it is kept. Both inner loops are branch-free and vectorise. */
#include <math.h>
#include <stdlib.h>

#include "cpu_kernels.h"

/* Elements converted at a time into a stack buffer: small enough for L1. */
#define CHUNK 512
/* Independent partial accumulators per run: hides add latency and lets the loop vectorise. */
#define LANES 8

static int64_t min64(int64_t a, int64_t b) {
    return a < b ? a : b;
}

/* n elements of t from offset off, as doubles: in place for f64, else converted into buf. */
static const double *load_f64(const cx_tensor *t, int64_t off, int64_t n, double *buf) {
    const void *p = (const char *)t->data + (size_t)off * cx_dtype_size(t->desc.dtype);
    switch (t->desc.dtype) {
    case CX_F64: return p;
    case CX_F32:
        for (int64_t i = 0; i < n; i++) buf[i] = ((const float *)p)[i];
        break;
    case CX_F16:
        for (int64_t i = 0; i < n; i++) buf[i] = cx_f16_to_f32(((const uint16_t *)p)[i]);
        break;
    default:
        for (int64_t i = 0; i < n; i++) buf[i] = cx_bf16_to_f32(((const uint16_t *)p)[i]);
        break;
    }
    return buf;
}

/* The integer counterpart of load_f64. */
static const int64_t *load_i64(const cx_tensor *t, int64_t off, int64_t n, int64_t *buf) {
    const void *p = (const char *)t->data + (size_t)off * cx_dtype_size(t->desc.dtype);
    switch (t->desc.dtype) {
    case CX_S64: return p;
    case CX_S32:
        for (int64_t i = 0; i < n; i++) buf[i] = ((const int32_t *)p)[i];
        break;
    default:
        for (int64_t i = 0; i < n; i++) buf[i] = ((const uint8_t *)p)[i];
        break;
    }
    return buf;
}

/* One step of each fold. NaN wins max and min: x != x catches it, and a NaN accumulator is
 * never replaced because every comparison with it is false. */
#define F_SUM(a, x)  ((a) + (x))
#define F_PROD(a, x) ((a) * (x))
#define F_MAX(a, x)  ((x) > (a) || (x) != (x) ? (x) : (a))
#define F_MIN(a, x)  ((x) < (a) || (x) != (x) ? (x) : (a))
#define F_ALL(a, x)  ((a) != 0 && (x) != 0 ? 1.0 : 0.0)
#define F_ANY(a, x)  ((a) != 0 || (x) != 0 ? 1.0 : 0.0)
#define I_SUM(a, x)  ((int64_t)((uint64_t)(a) + (uint64_t)(x)))
#define I_PROD(a, x) ((int64_t)((uint64_t)(a) * (uint64_t)(x)))
#define I_MAX(a, x)  ((x) > (a) ? (x) : (a))
#define I_MIN(a, x)  ((x) < (a) ? (x) : (a))
#define I_ALL(a, x)  ((int64_t)((a) != 0 && (x) != 0))
#define I_ANY(a, x)  ((int64_t)((a) != 0 || (x) != 0))

/* name_run folds a contiguous run into one accumulator; name_row folds a run elementwise into
 * a row of accumulators. `lane` is the fold's identity for the partial accumulators (-0.0 for
 * sums, so that a run of -0.0 sums to -0.0). */
#define FOLD_KERNELS(T, name, lane, STEP)                                                          \
    static T name##_run(T acc, const T *x, int64_t n) {                                            \
        T p[LANES];                                                                                \
        int64_t i = 0;                                                                             \
        for (int j = 0; j < LANES; j++) p[j] = (lane);                                             \
        for (; i + LANES <= n; i += LANES)                                                         \
            for (int j = 0; j < LANES; j++) p[j] = STEP(p[j], x[i + j]);                           \
        for (; i < n; i++) p[0] = STEP(p[0], x[i]);                                                \
        for (int j = 0; j < LANES; j++) acc = STEP(acc, p[j]);                                     \
        return acc;                                                                                \
    }                                                                                              \
    static void name##_row(T *acc, const T *x, int64_t n) {                                        \
        for (int64_t i = 0; i < n; i++) acc[i] = STEP(acc[i], x[i]);                               \
    }

FOLD_KERNELS(double, fsum, -0.0, F_SUM)
FOLD_KERNELS(double, fprod, 1.0, F_PROD)
FOLD_KERNELS(double, fmax, -INFINITY, F_MAX)
FOLD_KERNELS(double, fmin, INFINITY, F_MIN)
FOLD_KERNELS(double, fall, 1.0, F_ALL)
FOLD_KERNELS(double, fany, 0.0, F_ANY)
FOLD_KERNELS(int64_t, isum, 0, I_SUM)
FOLD_KERNELS(int64_t, iprod, 1, I_PROD)
FOLD_KERNELS(int64_t, imax, INT64_MIN, I_MAX)
FOLD_KERNELS(int64_t, imin, INT64_MAX, I_MIN)
FOLD_KERNELS(int64_t, iall, 1, I_ALL)
FOLD_KERNELS(int64_t, iany, 0, I_ANY)

typedef struct {
    double (*run)(double, const double *, int64_t);
    void (*row)(double *, const double *, int64_t);
} fold_f64;

typedef struct {
    int64_t (*run)(int64_t, const int64_t *, int64_t);
    void (*row)(int64_t *, const int64_t *, int64_t);
} fold_i64;

static fold_f64 pick_f64(cx_op_id op) {
    switch (op) {
    case CX_OP_SUM: return (fold_f64){fsum_run, fsum_row};
    case CX_OP_PRODUCT: return (fold_f64){fprod_run, fprod_row};
    case CX_OP_REDUCE_MAX: return (fold_f64){fmax_run, fmax_row};
    case CX_OP_REDUCE_MIN: return (fold_f64){fmin_run, fmin_row};
    case CX_OP_ALL: return (fold_f64){fall_run, fall_row};
    default: return (fold_f64){fany_run, fany_row};
    }
}

static fold_i64 pick_i64(cx_op_id op) {
    switch (op) {
    case CX_OP_SUM: return (fold_i64){isum_run, isum_row};
    case CX_OP_PRODUCT: return (fold_i64){iprod_run, iprod_row};
    case CX_OP_REDUCE_MAX: return (fold_i64){imax_run, imax_row};
    case CX_OP_REDUCE_MIN: return (fold_i64){imin_run, imin_row};
    case CX_OP_ALL: return (fold_i64){iall_run, iall_row};
    default: return (fold_i64){iany_run, iany_row};
    }
}

/* The value an output starts from, which is also the result of an empty reduction. A sum
 * starts from -0.0 when it has terms, so that reducing only -0.0 (or nothing, over no axes)
 * keeps the sign, and from +0.0 when it has none. */
static double start_f64(cx_op_id op, bool has_terms) {
    switch (op) {
    case CX_OP_SUM: return has_terms ? -0.0 : 0.0;
    case CX_OP_PRODUCT:
    case CX_OP_ALL: return 1.0;
    case CX_OP_REDUCE_MAX: return -INFINITY;
    case CX_OP_REDUCE_MIN: return INFINITY;
    default: return 0.0;
    }
}

static int64_t start_i64(cx_op_id op, cx_dtype t) {
    switch (op) {
    case CX_OP_PRODUCT:
    case CX_OP_ALL: return 1;
    case CX_OP_REDUCE_MAX: return t == CX_U8 ? 0 : t == CX_S32 ? INT32_MIN : INT64_MIN;
    case CX_OP_REDUCE_MIN: return t == CX_U8 ? UINT8_MAX : t == CX_S32 ? INT32_MAX : INT64_MAX;
    default: return 0;
    }
}

/* The input's axes after merging: sizes, whether reduced, and the output stride of each (0 for
 * reduced ones). Axes of size 1 are dropped; a scalar has no axes. */
typedef struct {
    int n;
    int64_t size[CX_MAX_RANK];
    int64_t ostride[CX_MAX_RANK];
    bool reduced[CX_MAX_RANK];
} merged_axes;

static void merge_axes(const cx_desc *d, const cx_param *axes, merged_axes *m) {
    bool reduced[CX_MAX_RANK] = {false};
    for (int k = 0; k < axes->n; k++) reduced[axes->i[k]] = true;
    m->n = 0;
    for (int a = 0; a < d->rank; a++) {
        if (d->shape[a] == 1) continue;
        if (m->n > 0 && m->reduced[m->n - 1] == reduced[a]) {
            m->size[m->n - 1] *= d->shape[a];
            continue;
        }
        m->size[m->n] = d->shape[a];
        m->reduced[m->n++] = reduced[a];
    }
    int64_t s = 1;
    for (int k = m->n - 1; k >= 0; k--) {
        m->ostride[k] = m->reduced[k] ? 0 : s;
        if (!m->reduced[k]) s *= m->size[k];
    }
}

/* What a walk feeds: folds the run of n input elements at `off` into the accumulators at
 * output offset o, as one accumulator when `reduced`, else elementwise. */
typedef struct {
    const cx_tensor *in;
    void *acc;
    fold_f64 ff;
    fold_i64 fi;
} reduce_job;

typedef void (*visit_fn)(const reduce_job *j, int64_t o, int64_t off, int64_t n, bool reduced);

static void visit_f64(const reduce_job *j, int64_t o, int64_t off, int64_t n, bool reduced) {
    double buf[CHUNK], *acc = j->acc;
    for (int64_t s = 0; s < n; s += CHUNK) {
        int64_t m = min64(CHUNK, n - s);
        const double *x = load_f64(j->in, off + s, m, buf);
        if (reduced)
            acc[o] = j->ff.run(acc[o], x, m);
        else
            j->ff.row(acc + o + s, x, m);
    }
}

static void visit_i64(const reduce_job *j, int64_t o, int64_t off, int64_t n, bool reduced) {
    int64_t buf[CHUNK], *acc = j->acc;
    for (int64_t s = 0; s < n; s += CHUNK) {
        int64_t m = min64(CHUNK, n - s);
        const int64_t *x = load_i64(j->in, off + s, m, buf);
        if (reduced)
            acc[o] = j->fi.run(acc[o], x, m);
        else
            j->fi.row(acc + o + s, x, m);
    }
}

/* Walks a non-empty input in row-major order: the innermost merged axis is contiguous, and the
 * outer ones advance the output offset like an odometer. */
static void walk(const merged_axes *m, int64_t numel, visit_fn visit, const reduce_job *j) {
    int64_t inner = m->n ? m->size[m->n - 1] : 1, idx[CX_MAX_RANK] = {0}, o = 0;
    bool reduced = m->n ? m->reduced[m->n - 1] : true;
    for (int64_t off = 0; off < numel; off += inner) {
        visit(j, o, off, inner, reduced);
        for (int k = m->n - 2; k >= 0; k--) {
            o += m->ostride[k];
            if (++idx[k] < m->size[k]) break;
            o -= m->ostride[k] * m->size[k];
            idx[k] = 0;
        }
    }
}

/* Rounds the double accumulators into the output type (u8 for all and any). */
static void finish_f64(const double *acc, cx_tensor *out) {
    int64_t n = out->numel;
    void *p = out->data;
    switch (out->desc.dtype) {
    case CX_F64:
        for (int64_t i = 0; i < n; i++) ((double *)p)[i] = acc[i];
        break;
    case CX_F32:
        for (int64_t i = 0; i < n; i++) ((float *)p)[i] = (float)acc[i];
        break;
    case CX_F16:
        for (int64_t i = 0; i < n; i++) ((uint16_t *)p)[i] = cx_f16_from_f64(acc[i]);
        break;
    case CX_BF16:
        for (int64_t i = 0; i < n; i++) ((uint16_t *)p)[i] = cx_bf16_from_f64(acc[i]);
        break;
    default:
        for (int64_t i = 0; i < n; i++) ((uint8_t *)p)[i] = acc[i] != 0;
        break;
    }
}

/* Every accumulator already fits the output type: sums are s64, max/min stay in the input's
 * range, all/any are 0 or 1. */
static void finish_i64(const int64_t *acc, cx_tensor *out) {
    int64_t n = out->numel;
    void *p = out->data;
    switch (out->desc.dtype) {
    case CX_S64:
        for (int64_t i = 0; i < n; i++) ((int64_t *)p)[i] = acc[i];
        break;
    case CX_S32:
        for (int64_t i = 0; i < n; i++) ((int32_t *)p)[i] = (int32_t)acc[i];
        break;
    default:
        for (int64_t i = 0; i < n; i++) ((uint8_t *)p)[i] = (uint8_t)acc[i];
        break;
    }
}

static cx_code reduce(cx_op_id op, const cx_tensor *in, const cx_params *ps, cx_tensor *out,
                      cx_status *st) {
    if (out->numel == 0) return CX_OK;
    bool is_float = cx_dtype_is_float(in->desc.dtype);
    reduce_job j = {.in = in, .acc = malloc((size_t)out->numel * 8)};
    if (!j.acc) return cx_fail(st, CX_ENOMEM, "cpu: no memory for %s", cx_op_table[op].name);
    double f0 = start_f64(op, in->numel > 0);
    int64_t i0 = start_i64(op, in->desc.dtype);
    for (int64_t i = 0; i < out->numel; i++) {
        if (is_float)
            ((double *)j.acc)[i] = f0;
        else
            ((int64_t *)j.acc)[i] = i0;
    }
    if (in->numel > 0) {
        merged_axes m;
        merge_axes(&in->desc, &ps->p[CX_P_AXES], &m);
        j.ff = pick_f64(op);
        j.fi = pick_i64(op);
        walk(&m, in->numel, is_float ? visit_f64 : visit_i64, &j);
    }
    if (is_float)
        finish_f64(j.acc, out);
    else
        finish_i64(j.acc, out);
    free(j.acc);
    return CX_OK;
}

/* Whether x replaces the best so far b. NaN counts as the extreme: the first NaN wins when ties
 * go low, the last when they go high. */
static inline bool take_f64(double x, double b, bool max, bool high) {
    if (x != x) return b == b || high;
    if (b != b) return false;
    if (x == b) return high;
    return max ? x > b : x < b;
}

static inline bool take_i64(int64_t x, int64_t b, bool max, bool high) {
    if (x == b) return high;
    return max ? x > b : x < b;
}

/* The input as {outer, n, inner}, reduced over n. name_run handles inner == 1: the index of
 * the best element of a contiguous run. name_cols handles a block of m <= CHUNK columns: the
 * rows of n are scanned in turn, each a contiguous load. */
#define ARG_KERNELS(T, sfx)                                                                        \
    static int64_t arg_run_##sfx(const cx_tensor *in, int64_t off, int64_t n, bool max,            \
                                 bool high) {                                                      \
        T buf[CHUNK], best = 0;                                                                    \
        int64_t at = 0;                                                                            \
        for (int64_t s = 0; s < n; s += CHUNK) {                                                   \
            int64_t m = min64(CHUNK, n - s);                                                       \
            const T *x = load_##sfx(in, off + s, m, buf);                                          \
            if (s == 0) best = x[0];                                                               \
            for (int64_t k = s == 0; k < m; k++)                                                   \
                if (take_##sfx(x[k], best, max, high)) {                                           \
                    best = x[k];                                                                   \
                    at = s + k;                                                                    \
                }                                                                                  \
        }                                                                                          \
        return at;                                                                                 \
    }                                                                                              \
    static void arg_cols_##sfx(const cx_tensor *in, int64_t off, int64_t n, int64_t inner,         \
                               int64_t m, bool max, bool high, int64_t *at) {                      \
        T buf[CHUNK], best[CHUNK];                                                                 \
        const T *x = load_##sfx(in, off, m, buf);                                                  \
        for (int64_t k = 0; k < m; k++) {                                                          \
            best[k] = x[k];                                                                        \
            at[k] = 0;                                                                             \
        }                                                                                          \
        for (int64_t r = 1; r < n; r++) {                                                          \
            x = load_##sfx(in, off + r * inner, m, buf);                                           \
            for (int64_t k = 0; k < m; k++)                                                        \
                if (take_##sfx(x[k], best[k], max, high)) {                                        \
                    best[k] = x[k];                                                                \
                    at[k] = r;                                                                     \
                }                                                                                  \
        }                                                                                          \
    }

ARG_KERNELS(double, f64)
ARG_KERNELS(int64_t, i64)

static cx_code argreduce(cx_op_id op, const cx_tensor *in, const cx_params *ps, cx_tensor *out) {
    const cx_desc *d = &in->desc;
    int64_t outer = 1, n = in->numel, inner = 1, *res = out->data;
    if (cx_param_has(ps, CX_P_AXIS)) {
        int axis = (int)ps->p[CX_P_AXIS].i[0];
        n = d->shape[axis];
        for (int k = 0; k < axis; k++) outer *= d->shape[k];
        for (int k = axis + 1; k < d->rank; k++) inner *= d->shape[k];
    }
    if (in->numel == 0) return CX_OK;
    bool max = op == CX_OP_ARGMAX, high = ps->p[CX_P_TIE_BREAK].i[0] == 1;
    bool is_float = cx_dtype_is_float(d->dtype);
    for (int64_t o = 0; o < outer; o++) {
        int64_t off = o * n * inner;
        if (inner == 1) {
            res[o] =
                is_float ? arg_run_f64(in, off, n, max, high) : arg_run_i64(in, off, n, max, high);
            continue;
        }
        for (int64_t c = 0; c < inner; c += CHUNK) {
            int64_t m = min64(CHUNK, inner - c);
            if (is_float)
                arg_cols_f64(in, off + c, n, inner, m, max, high, res + o * inner + c);
            else
                arg_cols_i64(in, off + c, n, inner, m, max, high, res + o * inner + c);
        }
    }
    return CX_OK;
}

cx_code cpu_reduce(cx_op_id op, const cx_tensor *in, const cx_params *ps, cx_tensor *out,
                   cx_status *st) {
    switch (cx_op_table[op].kind) {
    case CX_KIND_REDUCE: return reduce(op, in, ps, out, st);
    case CX_KIND_ARGREDUCE: return argreduce(op, in, ps, out);
    default: break;
    }
    return cx_fail(st, CX_EUNSUPPORTED, "cpu: %s is not a reduction", cx_op_table[op].name);
}
