/* The SCAN kind: cumulative_sum, cumulative_product, cumulative_max and cumulative_min along one
 * axis, forwards or (`reverse`) backwards, as Nx's cumulative functions: element i of a line is
 * the fold of the line's elements up to i (from i on when reversed). Floats fold in double and
 * each result is rounded once (as the cpu's reductions sum); max and min compare the values
 * themselves, a NaN holding once met (Nx.max lets NaN through), the newer of equal values kept
 * (-0.0 and 0.0); integers fold in 64 bits, sums and products wrapping as in their type, max
 * and min comparing as signed or unsigned.
 *
 * The tensor is seen as {outer, n, inner}: the lines are the n elements at one (outer, inner)
 * position, inner apart. Each outer block folds its inner positions side by side (a row of
 * accumulators), so a scan along any axis but the last reads memory in order. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cpu_kernels.h"

typedef enum { SCAN_SUM, SCAN_PRODUCT, SCAN_MAX, SCAN_MIN } scan_kind;

static scan_kind kind_of(cx_op_id op) {
    switch (op) {
    case CX_OP_CUMULATIVE_SUM: return SCAN_SUM;
    case CX_OP_CUMULATIVE_PRODUCT: return SCAN_PRODUCT;
    case CX_OP_CUMULATIVE_MAX: return SCAN_MAX;
    default: return SCAN_MIN;
    }
}

/* max/min of the fold so far a and the next value v: a NaN met holds (a != a), a NaN read takes
 * over (v != v), and of equal values the newer one (so -0.0 then 0.0 gives 0.0, as
 * Cascade.max(-0.0, 0.0) and Nx.max do); no branch on the data */
#define MAX_EXPR (((a != a) | (v != v)) ? (a != a ? a : v) : (v >= a ? v : a))
#define MIN_EXPR (((a != a) | (v != v)) ? (a != a ? a : v) : (v <= a ? v : a))

static inline double fold_f(scan_kind k, double a, double v) {
    switch (k) {
    case SCAN_SUM: return a + v;
    case SCAN_PRODUCT: return a * v;
    case SCAN_MAX: return MAX_EXPR;
    default: return MIN_EXPR;
    }
}

static inline uint64_t fold_i(scan_kind k, bool sg, uint64_t acc, uint64_t x) {
    switch (k) {
    case SCAN_SUM: return acc + x;
    case SCAN_PRODUCT: return acc * x;
    case SCAN_MAX: return (sg ? (int64_t)x > (int64_t)acc : x > acc) ? x : acc;
    default: return (sg ? (int64_t)x < (int64_t)acc : x < acc) ? x : acc;
    }
}

/* f32 and f64, the common cases, without a call per element: the lines of one outer block,
 * each line's fold in an accumulator of type A (double for sums and products; the element type
 * for max and min, which only compare) per inner position, from the line's first element (so
 * that a line starts with its own element, -0 too, as Nx's scan); a line at a time when inner is
 * 1 (the accumulator in a register). */
typedef void (*fold_lines)(const void *xv, void *yv, void *accv, int64_t n, int64_t inner,
                           bool rev);
#define FOLD_LINES(name, T, A, EXPR)                                                               \
    static void name(const void *xv, void *yv, void *accv, int64_t n, int64_t inner, bool rev) {   \
        const T *x = xv;                                                                           \
        T *y = yv;                                                                                 \
        A *acc = accv;                                                                             \
        if (inner == 1) {                                                                          \
            A a = x[rev ? n - 1 : 0], v;                                                           \
            for (int64_t s = 0; s < n; s++) {                                                      \
                int64_t j = rev ? n - 1 - s : s;                                                   \
                v = x[j];                                                                          \
                a = s == 0 ? v : (EXPR);                                                           \
                y[j] = (T)a;                                                                       \
            }                                                                                      \
            return;                                                                                \
        }                                                                                          \
        for (int64_t s = 0; s < n; s++) {                                                          \
            int64_t j = rev ? n - 1 - s : s;                                                       \
            const T *xr = x + j * inner;                                                           \
            T *yr = y + j * inner;                                                                 \
            if (s == 0) {                                                                          \
                for (int64_t i = 0; i < inner; i++) yr[i] = (T)(acc[i] = xr[i]);                   \
                continue;                                                                          \
            }                                                                                      \
            for (int64_t i = 0; i < inner; i++) {                                                  \
                A a = acc[i], v = xr[i];                                                           \
                acc[i] = a = (EXPR);                                                               \
                yr[i] = (T)a;                                                                      \
            }                                                                                      \
        }                                                                                          \
    }
FOLD_LINES(sum_f32, float, double, a + v)
FOLD_LINES(sum_f64, double, double, a + v)
FOLD_LINES(product_f32, float, double, a *v)
FOLD_LINES(product_f64, double, double, a *v)
FOLD_LINES(max_f32, float, float, MAX_EXPR)
FOLD_LINES(max_f64, double, double, MAX_EXPR)
FOLD_LINES(min_f32, float, float, MIN_EXPR)
FOLD_LINES(min_f64, double, double, MIN_EXPR)

/* the typed loops of f32 and f64, by kind */
static const fold_lines folds_f32[] = {
    [SCAN_SUM] = sum_f32, [SCAN_PRODUCT] = product_f32, [SCAN_MAX] = max_f32, [SCAN_MIN] = min_f32};
static const fold_lines folds_f64[] = {
    [SCAN_SUM] = sum_f64, [SCAN_PRODUCT] = product_f64, [SCAN_MAX] = max_f64, [SCAN_MIN] = min_f64};

cx_code cpu_scan(cx_op_id op, const cx_tensor *in, const cx_params *ps, cx_tensor *out,
                 cx_status *st) {
    const cx_desc *d = &in->desc;
    cx_dtype t = d->dtype;
    if (out->desc.dtype != t || out->numel != in->numel)
        return cx_fail(st, CX_EINVAL, "cpu: %s expected a result of the input's type and shape",
                       cx_op_table[op].name);
    if (in->numel == 0) return CX_OK;
    int axis = d->rank ? (int)ps->p[CX_P_AXIS].i[0] : 0;
    bool rev = cx_param_has(ps, CX_P_REVERSE) && ps->p[CX_P_REVERSE].i[0];
    int64_t n = d->rank ? d->shape[axis] : 1, outer, inner;
    cpu_around_axis(d, axis, &outer, &inner);
    scan_kind k = kind_of(op);
    fold_lines typed = t == CX_F32 ? folds_f32[k] : t == CX_F64 ? folds_f64[k] : NULL;
    bool is_float = cx_dtype_is_float(t), sg = cx_dtype_is_signed(t);
    size_t es = cx_dtype_size(t);
    /* one accumulator per inner position: doubles or 64-bit integers */
    void *accs = malloc(sizeof(double) * (size_t)inner);
    if (!accs)
        return cx_fail(st, CX_ENOMEM, "cpu: no memory for %s's accumulators", cx_op_table[op].name);
    double *af = accs;
    uint64_t *ai = accs;
    for (int64_t o = 0; o < outer; o++) {
        int64_t base = o * n * inner;
        if (typed) {
            typed((const char *)in->data + (size_t)base * es, (char *)out->data + (size_t)base * es,
                  accs, n, inner, rev);
            continue;
        }
        for (int64_t s = 0; s < n; s++) {
            int64_t row = base + (rev ? n - 1 - s : s) * inner;
            for (int64_t i = 0; i < inner; i++) {
                if (is_float) {
                    double x = cpu_load_f64(t, in->data, row + i);
                    af[i] = s == 0 ? x : fold_f(k, af[i], x);
                    cpu_store_f64(t, out->data, row + i, af[i]);
                } else {
                    uint64_t x = cpu_load_bits64(t, in->data, row + i);
                    ai[i] = s == 0 ? x : fold_i(k, sg, ai[i], x);
                    memcpy((char *)out->data + (size_t)(row + i) * es, &ai[i], es);
                }
            }
        }
    }
    free(accs);
    return CX_OK;
}
