/* The REDUCE kind (sum, product, reduce_max, reduce_min, all, any) and the ARGREDUCE kind
 * (argmax, argmin).
 *
 * Floats reduce in double: it holds every f16/bf16/f32/f64 value exactly, so max and min are
 * exact and a sum of a narrow type rounds once, at the end. Integers reduce in int64, with sums
 * and products wrapping as uint64. Reductions walk the input once in row-major order: adjacent
 * axes of the same kind (reduced or kept) are merged, so the innermost merged axis is one
 * contiguous run, folded into one accumulator (through several partial ones) when it is
 * reduced and elementwise into a row of accumulators when it is kept; both loops vectorise. */
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
    case CX_S64:
    case CX_U64: return p; /* the same bits: sums and products wrap alike */
#define WIDEN(ID, T)                                                                               \
    case ID:                                                                                       \
        for (int64_t i = 0; i < n; i++) buf[i] = ((const T *)p)[i];                                \
        break;
        WIDEN(CX_S32, int32_t)
        WIDEN(CX_S16, int16_t)
        WIDEN(CX_S8, int8_t)
        WIDEN(CX_U32, uint32_t)
        WIDEN(CX_U16, uint16_t)
#undef WIDEN
    default:
        for (int64_t i = 0; i < n; i++) buf[i] = ((const uint8_t *)p)[i];
        break;
    }
    return buf;
}

/* u64 for comparisons: flipping the top bit maps unsigned order onto signed order, so max, min,
 * argmax and argmin run on the int64_t kernels; the result is flipped back. */
#define U64_BIAS ((uint64_t)1 << 63)
static const int64_t *load_u64b(const cx_tensor *t, int64_t off, int64_t n, int64_t *buf) {
    const uint64_t *p = (const uint64_t *)t->data + off;
    for (int64_t i = 0; i < n; i++) buf[i] = (int64_t)(p[i] ^ U64_BIAS);
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

/* Max and min of a run in the form that compiles to maxpd/minpd. That form drops NaN (the
 * exact fold above does not vectorise), so a second pass looks for one: x - x is NaN only for
 * NaN and infinities, and runs holding either are refolded exactly. */
#define EXTREME_RUN(name, CMP, exact)                                                              \
    static double name(double acc, const double *x, int64_t n) {                                   \
        double p[LANES], q[LANES], bad = 0;                                                        \
        int64_t i = 0;                                                                             \
        if (acc != acc) return acc;                                                                \
        for (int j = 0; j < LANES; j++) p[j] = acc, q[j] = 0;                                      \
        for (; i + LANES <= n; i += LANES)                                                         \
            for (int j = 0; j < LANES; j++) p[j] = p[j] CMP x[i + j] ? p[j] : x[i + j];            \
        for (int64_t k = 0; k < i; k += LANES)                                                     \
            for (int j = 0; j < LANES; j++) q[j] += x[k + j] - x[k + j];                           \
        for (; i < n; i++) p[0] = p[0] CMP x[i] ? p[0] : x[i], bad += x[i] - x[i];                 \
        for (int j = 0; j < LANES; j++) bad += q[j];                                               \
        if (bad != bad) return exact(acc, x, n);                                                   \
        for (int j = 0; j < LANES; j++) acc = acc CMP p[j] ? acc : p[j];                           \
        return acc;                                                                                \
    }

EXTREME_RUN(fmax_fast, >, fmax_run)
EXTREME_RUN(fmin_fast, <, fmin_run)

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
    case CX_OP_REDUCE_MAX: return (fold_f64){fmax_fast, fmax_row};
    case CX_OP_REDUCE_MIN: return (fold_f64){fmin_fast, fmin_row};
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
    case CX_OP_REDUCE_MAX:
        switch (t) {
        case CX_S8: return INT8_MIN;
        case CX_S16: return INT16_MIN;
        case CX_S32: return INT32_MIN;
        case CX_S64:
        case CX_U64: return INT64_MIN; /* u64 is biased */
        default: return 0;
        }
    case CX_OP_REDUCE_MIN:
        switch (t) {
        case CX_U8: return UINT8_MAX;
        case CX_U16: return UINT16_MAX;
        case CX_U32: return UINT32_MAX;
        case CX_S8: return INT8_MAX;
        case CX_S16: return INT16_MAX;
        case CX_S32: return INT32_MAX;
        default: return INT64_MAX; /* s64, and u64 biased */
        }
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

/* What a walk feeds: the input, the accumulators (double or int64 by the input's type), the
 * folds and their identity. */
typedef struct {
    const cx_tensor *in;
    void *acc;
    fold_f64 ff;
    fold_i64 fi;
    double f0;
    int64_t i0;
} reduce_job;

/* Rows shorter than this cost more in per-call overhead than in folding: the tile kernels then
 * fold many rows per call instead. */
#define SHORT 16

/* A tile is rows x cols contiguous input elements at `off`. tile_reduced folds each row into
 * its own accumulator acc[r]; short rows are gathered column by column into the row kernel.
 * tile_kept folds every row elementwise into acc[0..cols); short rows are folded `per` rows at
 * a time into as many copies of the accumulators, combined at the end. */
#define TILE_KERNELS(T, sfx, f, ident)                                                             \
    static void tile_reduced_##sfx(const reduce_job *j, T *acc, int64_t off, int64_t rows,         \
                                   int64_t cols) {                                                 \
        T buf[CHUNK], col[CHUNK];                                                                  \
        if (cols >= SHORT) {                                                                       \
            for (int64_t r = 0; r < rows; r++)                                                     \
                for (int64_t s = 0; s < cols; s += CHUNK) {                                        \
                    int64_t m = min64(CHUNK, cols - s);                                            \
                    acc[r] = j->f.run(acc[r], load_##sfx(j->in, off + r * cols + s, m, buf), m);   \
                }                                                                                  \
            return;                                                                                \
        }                                                                                          \
        for (int64_t r0 = 0, per = CHUNK / cols; r0 < rows; r0 += per) {                           \
            int64_t n = min64(per, rows - r0);                                                     \
            const T *x = load_##sfx(j->in, off + r0 * cols, n * cols, buf);                        \
            for (int64_t c = 0; c < cols; c++) {                                                   \
                for (int64_t r = 0; r < n; r++) col[r] = x[r * cols + c];                          \
                j->f.row(acc + r0, col, n);                                                        \
            }                                                                                      \
        }                                                                                          \
    }                                                                                              \
    static void tile_kept_##sfx(const reduce_job *j, T *acc, int64_t off, int64_t rows,            \
                                int64_t cols) {                                                    \
        T buf[CHUNK], wide[CHUNK];                                                                 \
        int64_t r = 0, per = CHUNK / cols, width = per * cols;                                     \
        if (cols < SHORT && rows >= 2 * per) {                                                     \
            for (int64_t k = 0; k < width; k++) wide[k] = j->ident;                                \
            for (; r + per <= rows; r += per)                                                      \
                j->f.row(wide, load_##sfx(j->in, off + r * cols, width, buf), width);              \
            for (int64_t c = 0; c < per; c++) j->f.row(acc, wide + c * cols, cols);                \
        }                                                                                          \
        for (; r < rows; r++)                                                                      \
            for (int64_t s = 0; s < cols; s += CHUNK) {                                            \
                int64_t m = min64(CHUNK, cols - s);                                                \
                j->f.row(acc + s, load_##sfx(j->in, off + r * cols + s, m, buf), m);               \
            }                                                                                      \
    }                                                                                              \
    static void tile_##sfx(const reduce_job *j, int64_t o, int64_t off, int64_t rows,              \
                           int64_t cols, bool reduced) {                                           \
        if (reduced)                                                                               \
            tile_reduced_##sfx(j, (T *)j->acc + o, off, rows, cols);                               \
        else                                                                                       \
            tile_kept_##sfx(j, (T *)j->acc + o, off, rows, cols);                                  \
    }

TILE_KERNELS(double, f64, ff, f0)
TILE_KERNELS(int64_t, i64, fi, i0)
TILE_KERNELS(int64_t, u64b, fi, i0)

typedef void (*tile_fn)(const reduce_job *j, int64_t o, int64_t off, int64_t rows, int64_t cols,
                        bool reduced);

/* Walks a non-empty input in row-major order, a tile at a time: the two innermost merged axes,
 * one reduced and one kept, are contiguous; the outer ones advance the output offset like an
 * odometer. */
static void walk(const merged_axes *m, int64_t numel, tile_fn tile, const reduce_job *j) {
    int nt = m->n < 2 ? m->n : 2;
    int64_t cols = nt ? m->size[m->n - 1] : 1, rows = nt == 2 ? m->size[m->n - 2] : 1;
    int64_t idx[CX_MAX_RANK] = {0}, o = 0;
    bool reduced = nt ? m->reduced[m->n - 1] : true;
    for (int64_t off = 0; off < numel; off += rows * cols) {
        tile(j, o, off, rows, cols, reduced);
        for (int k = m->n - 1 - nt; k >= 0; k--) {
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

/* Every accumulator already fits the output type: sums are s64 or u64, max/min stay in the
 * input's range (biased for u64), all/any are 0 or 1. */
static void finish_i64(const int64_t *acc, cx_tensor *out, bool biased) {
    int64_t n = out->numel;
    void *p = out->data;
    switch (out->desc.dtype) {
    case CX_S64:
        for (int64_t i = 0; i < n; i++) ((int64_t *)p)[i] = acc[i];
        break;
    case CX_U64:
        for (int64_t i = 0; i < n; i++)
            ((uint64_t *)p)[i] = (uint64_t)acc[i] ^ (biased ? U64_BIAS : 0);
        break;
#define NARROW(ID, T)                                                                              \
    case ID:                                                                                       \
        for (int64_t i = 0; i < n; i++) ((T *)p)[i] = (T)acc[i];                                   \
        break;
        NARROW(CX_S32, int32_t)
        NARROW(CX_S16, int16_t)
        NARROW(CX_S8, int8_t)
        NARROW(CX_U32, uint32_t)
        NARROW(CX_U16, uint16_t)
#undef NARROW
    default:
        for (int64_t i = 0; i < n; i++) ((uint8_t *)p)[i] = (uint8_t)acc[i];
        break;
    }
}

static bool u64_biased(cx_op_id op, cx_dtype t) {
    return t == CX_U64 && (op == CX_OP_REDUCE_MAX || op == CX_OP_REDUCE_MIN || op == CX_OP_ARGMAX ||
                           op == CX_OP_ARGMIN);
}

/* sum and product of c64 and c128: each element in row-major order into its output's
 * accumulator (double complex; c64 rounded once). */
static cx_code reduce_complex(cx_op_id op, const cx_tensor *in, const cx_params *ps, cx_tensor *out,
                              cx_status *st) {
    typedef double _Complex cd;
    cd *acc = malloc((size_t)out->numel * sizeof(cd));
    if (!acc) return cx_fail(st, CX_ENOMEM, "cpu: no memory for %s", cx_op_table[op].name);
    bool sum = op == CX_OP_SUM;
    for (int64_t i = 0; i < out->numel; i++) acc[i] = sum ? 0 : 1;
    merged_axes m;
    merge_axes(&in->desc, &ps->p[CX_P_AXES], &m);
    int64_t idx[CX_MAX_RANK] = {0}, o = 0;
    bool c64 = in->desc.dtype == CX_C64;
    for (int64_t i = 0; i < in->numel; i++) {
        cd x = c64 ? (cd)((const float _Complex *)in->data)[i] : ((const cd *)in->data)[i];
        acc[o] = sum ? acc[o] + x : acc[o] * x;
        for (int k = m.n - 1; k >= 0; k--) {
            o += m.ostride[k];
            if (++idx[k] < m.size[k]) break;
            o -= m.ostride[k] * m.size[k];
            idx[k] = 0;
        }
    }
    cpu_cast_array(CX_C128, out->desc.dtype, acc, out->data, out->numel);
    free(acc);
    return CX_OK;
}

static cx_code reduce(cx_op_id op, const cx_tensor *in, const cx_params *ps, cx_tensor *out,
                      cx_status *st) {
    if (out->numel == 0) return CX_OK;
    if (cx_dtype_is_complex(in->desc.dtype)) {
        if (op != CX_OP_SUM && op != CX_OP_PRODUCT)
            return cx_fail(st, CX_EUNSUPPORTED, "cpu: no %s kernel for %s", cx_op_table[op].name,
                           cx_dtype_name(in->desc.dtype));
        return reduce_complex(op, in, ps, out, st);
    }
    bool is_float = cx_dtype_is_float(in->desc.dtype), biased = u64_biased(op, in->desc.dtype);
    reduce_job j = {.in = in,
                    .acc = malloc((size_t)out->numel * 8),
                    .ff = pick_f64(op),
                    .fi = pick_i64(op),
                    .f0 = start_f64(op, in->numel > 0),
                    .i0 = start_i64(op, in->desc.dtype)};
    if (!j.acc) return cx_fail(st, CX_ENOMEM, "cpu: no memory for %s", cx_op_table[op].name);
    for (int64_t i = 0; i < out->numel; i++) {
        if (is_float)
            ((double *)j.acc)[i] = j.f0;
        else
            ((int64_t *)j.acc)[i] = j.i0;
    }
    if (in->numel > 0) {
        merged_axes m;
        merge_axes(&in->desc, &ps->p[CX_P_AXES], &m);
        walk(&m, in->numel, is_float ? tile_f64 : biased ? tile_u64b : tile_i64, &j);
    }
    if (is_float)
        finish_f64(j.acc, out);
    else
        finish_i64(j.acc, out, biased);
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

/* The position of v in a run: the first or the last element equal to it, NaN matching NaN. */
static int64_t find_f64(const double *x, int64_t n, double v, bool last) {
    bool nan = v != v;
    for (int64_t k = 0; k < n; k++) {
        int64_t at = last ? n - 1 - k : k;
        if (x[at] == v || (nan && x[at] != x[at])) return at;
    }
    return 0;
}

static int64_t find_i64(const int64_t *x, int64_t n, int64_t v, bool last) {
    for (int64_t k = 0; k < n; k++) {
        int64_t at = last ? n - 1 - k : k;
        if (x[at] == v) return at;
    }
    return 0;
}

static double extreme_f64(const double *x, int64_t n, bool max) {
    return max ? fmax_fast(-INFINITY, x, n) : fmin_fast(INFINITY, x, n);
}

static int64_t extreme_i64(const int64_t *x, int64_t n, bool max) {
    return max ? imax_run(INT64_MIN, x, n) : imin_run(INT64_MAX, x, n);
}

/* The input as {outer, n, inner}, reduced over n. name_run handles inner == 1, a contiguous
 * run, chunk by chunk: the chunk's extreme comes from the vectorised folds, and only a chunk
 * whose extreme replaces the best so far is searched for its position (the first for low ties,
 * the last for high). name_cols handles a block of m <= CHUNK columns: the rows of n are
 * scanned in turn, each a contiguous load. */
#define ARG_KERNELS(T, sfx)                                                                        \
    static int64_t arg_run_##sfx(const cx_tensor *in, int64_t off, int64_t n, bool max,            \
                                 bool high) {                                                      \
        T buf[CHUNK], best = 0;                                                                    \
        int64_t at = -1;                                                                           \
        for (int64_t s = 0; s < n; s += CHUNK) {                                                   \
            int64_t m = min64(CHUNK, n - s);                                                       \
            const T *x = load_##sfx(in, off + s, m, buf);                                          \
            T e = extreme_##sfx(x, m, max);                                                        \
            if (at >= 0 && !take_##sfx(e, best, max, high)) continue;                              \
            best = e;                                                                              \
            at = s + find_##sfx(x, m, e, high);                                                    \
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

#define take_u64b    take_i64
#define find_u64b    find_i64
#define extreme_u64b extreme_i64
ARG_KERNELS(double, f64)
ARG_KERNELS(int64_t, i64)
ARG_KERNELS(int64_t, u64b)

static cx_code argreduce(cx_op_id op, const cx_tensor *in, const cx_params *ps, cx_tensor *out) {
    const cx_desc *d = &in->desc;
    int64_t outer = 1, n = in->numel, inner = 1, *res = out->data;
    if (cx_param_has(ps, CX_P_AXIS)) {
        int axis = (int)ps->p[CX_P_AXIS].i[0];
        n = d->shape[axis];
        cpu_around_axis(d, axis, &outer, &inner);
    }
    if (in->numel == 0) return CX_OK;
    bool max = op == CX_OP_ARGMAX, high = ps->p[CX_P_TIE_BREAK].i[0] == 1;
    bool is_float = cx_dtype_is_float(d->dtype), biased = u64_biased(op, d->dtype);
    for (int64_t o = 0; o < outer; o++) {
        int64_t off = o * n * inner;
        if (inner == 1) {
            res[o] = is_float ? arg_run_f64(in, off, n, max, high)
                     : biased ? arg_run_u64b(in, off, n, max, high)
                              : arg_run_i64(in, off, n, max, high);
            continue;
        }
        for (int64_t c = 0; c < inner; c += CHUNK) {
            int64_t m = min64(CHUNK, inner - c);
            if (is_float)
                arg_cols_f64(in, off + c, n, inner, m, max, high, res + o * inner + c);
            else if (biased)
                arg_cols_u64b(in, off + c, n, inner, m, max, high, res + o * inner + c);
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
