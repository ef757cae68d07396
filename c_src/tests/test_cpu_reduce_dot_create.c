/* The cpu driver's reductions, dot products and creation ops against naive references computed
 * here, element by element. */
#include "test_util.h"

#include "../core/philox.h"

static const cx_dtype all_types[] = {CX_F16, CX_BF16, CX_F32, CX_F64, CX_U8,  CX_S32,
                                     CX_S64, CX_S8,   CX_S16, CX_U16, CX_U32, CX_U64};
#define N_TYPES ((int)(sizeof all_types / sizeof all_types[0]))
static const cx_dtype float_types[] = {CX_F16, CX_BF16, CX_F32, CX_F64};

static bool is_float(cx_dtype t) {
    return cx_dtype_is_float(t);
}

/* v rounded into type t, as a double: what the kernels' output should read back as. */
static double in_type(cx_dtype t, double v) {
    uint64_t buf[2] = {0, 0}; /* a c128 element is 16 bytes */
    tu_store(t, buf, 0, v);
    return tu_load(t, buf, 0);
}

static cx_tensor *run1(cx_op_id op, cx_tensor *x, cx_params *ps) {
    cx_tensor *in[1] = {x};
    return tu_run_ok(op, in, 1, ps);
}

static cx_tensor *run2(cx_op_id op, cx_tensor *a, cx_tensor *b, cx_params *ps) {
    cx_tensor *in[2] = {a, b};
    return tu_run_ok(op, in, 2, ps);
}

/* A tensor from values; elements i get f(i). */
static cx_tensor *tensor_of(cx_dtype t, int rank, const int64_t *shape,
                            double (*f)(cx_dtype, int64_t)) {
    int64_t n = 1;
    for (int k = 0; k < rank; k++) n *= shape[k];
    double *v = malloc(sizeof(double) * (size_t)(n ? n : 1));
    for (int64_t i = 0; i < n; i++) v[i] = f(t, i);
    cx_tensor *x = tu_tensor(t, rank, shape, v);
    free(v);
    return x;
}

static int64_t numel_of(int rank, const int64_t *shape) {
    int64_t n = 1;
    for (int k = 0; k < rank; k++) n *= shape[k];
    return n;
}

/* Multi-index of flat index i in a row-major shape. */
static void unflatten(int64_t i, int rank, const int64_t *shape, int64_t *idx) {
    for (int k = rank - 1; k >= 0; k--) {
        idx[k] = shape[k] ? i % shape[k] : 0;
        i = shape[k] ? i / shape[k] : 0;
    }
}

/* ---- reductions ---- */

/* Non-zero except at i = 7 and 18 (i = 6 and 17 for u8), from -2.5 to 2.5 in halves. */
static double reduce_value(cx_dtype t, int64_t i) {
    int64_t r = (i * 5 + 3) % 11;
    if (tu_unsigned(t)) return (double)r;
    return is_float(t) ? (double)(r - 5) * 0.5 : (double)(r - 5);
}

static cx_dtype reduce_out_type(cx_op_id op, cx_dtype t) {
    if (op == CX_OP_ALL || op == CX_OP_ANY) return CX_U8;
    if (op == CX_OP_SUM || op == CX_OP_PRODUCT) return cx_dtype_to_aggregate(t);
    return t;
}

static double ref_step(cx_op_id op, double acc, double x) {
    switch (op) {
    case CX_OP_SUM: return acc + x;
    case CX_OP_PRODUCT: return acc * x;
    case CX_OP_REDUCE_MAX: return isnan(acc) || isnan(x) ? NAN : fmax(acc, x);
    case CX_OP_REDUCE_MIN: return isnan(acc) || isnan(x) ? NAN : fmin(acc, x);
    case CX_OP_ALL: return acc != 0 && x != 0;
    default: return acc != 0 || x != 0;
    }
}

static double ref_start(cx_op_id op) {
    switch (op) {
    case CX_OP_PRODUCT:
    case CX_OP_ALL: return 1;
    case CX_OP_REDUCE_MAX: return -INFINITY;
    case CX_OP_REDUCE_MIN: return INFINITY;
    default: return 0;
    }
}

/* The reduction of x over the axes flagged in red, into want (out_n entries, row-major over
 * the kept axes), rounded into the output type. */
static void ref_reduce(cx_op_id op, const cx_tensor *x, const bool *red, double *want,
                       int64_t out_n) {
    const cx_desc *d = &x->desc;
    for (int64_t o = 0; o < out_n; o++) want[o] = ref_start(op);
    for (int64_t i = 0; i < x->numel; i++) {
        int64_t idx[CX_MAX_RANK], o = 0;
        unflatten(i, d->rank, d->shape, idx);
        for (int k = 0; k < d->rank; k++)
            if (!red[k]) o = o * d->shape[k] + idx[k];
        want[o] = ref_step(op, want[o], tu_load(d->dtype, x->data, i));
    }
    for (int64_t o = 0; o < out_n; o++) want[o] = in_type(reduce_out_type(op, d->dtype), want[o]);
}

/* Runs op over axes (NULL: not given) and checks shape and values against ref_reduce. */
static void check_reduce(cx_op_id op, cx_tensor *x, const int64_t *axes, int n_axes, bool keep,
                         double tol) {
    const cx_desc *d = &x->desc;
    bool red[CX_MAX_RANK] = {false};
    cx_params ps = {0};
    if (axes) {
        cx_param_put_ints(&ps, CX_P_AXES, axes, n_axes);
        for (int k = 0; k < n_axes; k++) red[axes[k] < 0 ? axes[k] + d->rank : axes[k]] = true;
    } else {
        for (int k = 0; k < d->rank; k++) red[k] = true;
    }
    if (keep) cx_param_put_int(&ps, CX_P_KEEP_AXES, 1);
    int64_t shape[CX_MAX_RANK];
    int rank = 0;
    for (int k = 0; k < d->rank; k++)
        if (!red[k] || keep) shape[rank++] = red[k] ? 1 : d->shape[k];
    int64_t out_n = numel_of(rank, shape);
    double *want = malloc(sizeof(double) * (size_t)(out_n ? out_n : 1));
    ref_reduce(op, x, red, want, out_n);
    cx_tensor *y = run1(op, x, &ps);
    tu_expect(y, reduce_out_type(op, d->dtype), rank, shape, want, tol);
    tu_drop(y);
    free(want);
}

static const cx_op_id reduce_ops[] = {CX_OP_SUM,        CX_OP_PRODUCT, CX_OP_REDUCE_MAX,
                                      CX_OP_REDUCE_MIN, CX_OP_ALL,     CX_OP_ANY};

/* Every op, type and axes set on a {2, 3, 4}, keep_axes both ways. */
static void test_reduce_ops_types_axes(void **state) {
    (void)state;
    static const int64_t sets[][3] = {{0}, {0}, {1}, {0, 2}, {2}, {-1}, {0, 1, 2}, {1, 2}};
    static const int counts[] = {-1, 1, 1, 2, 1, 1, 3, 2}; /* -1: axes not given */
    for (int o = 0; o < 6; o++)
        for (int t = 0; t < N_TYPES; t++) {
            cx_tensor *x = tensor_of(all_types[t], 3, TU_SHAPE(2, 3, 4), reduce_value);
            for (int s = 0; s < 8; s++)
                for (int keep = 0; keep < 2; keep++)
                    check_reduce(reduce_ops[o], x, counts[s] < 0 ? NULL : sets[s],
                                 counts[s] < 0 ? 0 : counts[s], keep, 1e-12);
            tu_drop(x);
        }
}

/* Reducing over no axes copies (sum and product of integers widen to s64). */
static void test_reduce_no_axes(void **state) {
    (void)state;
    for (int o = 0; o < 6; o++)
        for (int t = 0; t < N_TYPES; t++) {
            cx_tensor *x = tensor_of(all_types[t], 3, TU_SHAPE(2, 3, 4), reduce_value);
            check_reduce(reduce_ops[o], x, (const int64_t[]){0}, 0, false, 0);
            tu_drop(x);
        }
}

static double wide_value(cx_dtype t, int64_t i) {
    double v = (double)((i * 37 + 11) % 101) - 50;
    return tu_unsigned(t) ? fabs(v) : v;
}

/* Runs longer than the kernels' chunks, and layouts for each walk: reduced innermost, kept
 * innermost, alternating, and axes of size 1. */
static void test_reduce_large_layouts(void **state) {
    (void)state;
    static const int64_t shapes[][4] = {{3, 1000}, {1000, 3}, {7, 600, 5}, {5, 1, 3, 700}};
    static const int ranks[] = {2, 2, 3, 4};
    static const int64_t sets[][2] = {{1}, {0}, {0, 1}, {0, 2}, {1, 3}, {2, 3}};
    static const int counts[] = {1, 1, 2, 2, 2, 2};
    static const cx_dtype types[] = {CX_F32, CX_F64, CX_S32, CX_U8, CX_BF16};
    static const cx_op_id ops[] = {CX_OP_SUM, CX_OP_REDUCE_MAX, CX_OP_REDUCE_MIN, CX_OP_ANY};
    for (int sh = 0; sh < 4; sh++)
        for (int t = 0; t < 5; t++) {
            cx_tensor *x = tensor_of(types[t], ranks[sh], shapes[sh], wide_value);
            for (int s = 0; s < 6; s++) {
                bool fits = true;
                for (int k = 0; k < counts[s]; k++) fits = fits && sets[s][k] < ranks[sh];
                if (!fits) continue;
                for (int o = 0; o < 4; o++)
                    check_reduce(ops[o], x, sets[s], counts[s], false, 1e-6);
            }
            check_reduce(CX_OP_SUM, x, NULL, 0, true, 1e-6);
            tu_drop(x);
        }
}

static void test_reduce_nan(void **state) {
    (void)state;
    for (int t = 0; t < 4; t++) {
        cx_dtype ty = float_types[t];
        cx_tensor *x = tu_tensor(ty, 1, TU_SHAPE(3), TU_VALUES(1, NAN, 3));
        static const cx_op_id nan_ops[] = {CX_OP_SUM, CX_OP_PRODUCT, CX_OP_REDUCE_MAX,
                                           CX_OP_REDUCE_MIN};
        for (int o = 0; o < 4; o++) {
            cx_tensor *y = run1(nan_ops[o], x, NULL);
            tu_expect(y, ty, 0, NULL, TU_VALUES(NAN), 0);
            tu_drop(y);
        }
        cx_tensor *y = run1(CX_OP_ALL, x, NULL); /* NaN is non-zero */
        tu_expect(y, CX_U8, 0, NULL, TU_VALUES(1), 0);
        tu_drop(y);
        tu_drop(x);
        /* kept innermost: the NaN column only */
        x = tu_tensor(ty, 2, TU_SHAPE(3, 2), TU_VALUES(1, 5, NAN, 2, 4, 3));
        cx_params ps = {0};
        cx_param_put_ints(&ps, CX_P_AXES, (const int64_t[]){0}, 1);
        y = run1(CX_OP_REDUCE_MAX, x, &ps);
        tu_expect(y, ty, 1, TU_SHAPE(2), TU_VALUES(NAN, 5), 0);
        tu_drop(y);
        y = run1(CX_OP_REDUCE_MIN, x, &ps);
        tu_expect(y, ty, 1, TU_SHAPE(2), TU_VALUES(NAN, 2), 0);
        tu_drop(y);
        tu_drop(x);
    }
    /* NaN past the partial accumulators' first pass, in a long run */
    double *v = calloc(1000, sizeof(double));
    for (int i = 0; i < 1000; i++) v[i] = i;
    v[997] = NAN;
    cx_tensor *x = tu_tensor(CX_F32, 1, TU_SHAPE(1000), v);
    cx_tensor *y = run1(CX_OP_REDUCE_MIN, x, NULL);
    tu_expect(y, CX_F32, 0, NULL, TU_VALUES(NAN), 0);
    tu_drop(y);
    tu_drop(x);
    free(v);
}

static void expect_empty_reduce(cx_op_id op, cx_dtype t, double want) {
    cx_tensor *x = tu_tensor(t, 2, TU_SHAPE(0, 3), TU_VALUES(0));
    cx_params ps = {0};
    cx_param_put_ints(&ps, CX_P_AXES, (const int64_t[]){0}, 1);
    cx_tensor *y = run1(op, x, &ps);
    tu_expect(y, reduce_out_type(op, t), 1, TU_SHAPE(3), (const double[]){want, want, want}, 0);
    tu_drop(y);
    tu_drop(x);
}

static void test_reduce_empty(void **state) {
    (void)state;
    for (int t = 0; t < 4; t++) {
        expect_empty_reduce(CX_OP_SUM, float_types[t], 0);
        expect_empty_reduce(CX_OP_PRODUCT, float_types[t], 1);
        expect_empty_reduce(CX_OP_REDUCE_MAX, float_types[t], -INFINITY);
        expect_empty_reduce(CX_OP_REDUCE_MIN, float_types[t], INFINITY);
    }
    expect_empty_reduce(CX_OP_REDUCE_MAX, CX_S32, INT32_MIN);
    expect_empty_reduce(CX_OP_REDUCE_MIN, CX_S32, INT32_MAX);
    expect_empty_reduce(CX_OP_REDUCE_MAX, CX_U8, 0);
    expect_empty_reduce(CX_OP_REDUCE_MIN, CX_U8, 255);
    expect_empty_reduce(CX_OP_SUM, CX_S32, 0);
    expect_empty_reduce(CX_OP_PRODUCT, CX_U8, 1);
    expect_empty_reduce(CX_OP_ALL, CX_F32, 1);
    expect_empty_reduce(CX_OP_ANY, CX_S64, 0);
    /* s64 extremes do not survive a trip through double: read them directly */
    cx_tensor *x = tu_tensor(CX_S64, 1, TU_SHAPE(0), TU_VALUES(0));
    cx_tensor *y = run1(CX_OP_REDUCE_MIN, x, NULL);
    assert_true(((int64_t *)y->data)[0] == INT64_MAX);
    tu_drop(y);
    y = run1(CX_OP_REDUCE_MAX, x, NULL);
    assert_true(((int64_t *)y->data)[0] == INT64_MIN);
    tu_drop(y);
    tu_drop(x);
    /* an empty output: nothing to do, nothing to crash */
    x = tu_tensor(CX_F32, 2, TU_SHAPE(0, 3), TU_VALUES(0));
    cx_params ps = {0};
    cx_param_put_ints(&ps, CX_P_AXES, (const int64_t[]){1}, 1);
    y = run1(CX_OP_SUM, x, &ps);
    tu_expect(y, CX_F32, 1, TU_SHAPE(0), TU_VALUES(0), 0);
    tu_drop(y);
    tu_drop(x);
}

static void test_reduce_exact_integers_and_zero_sign(void **state) {
    (void)state;
    cx_tensor *x = tu_tensor(CX_S64, 1, TU_SHAPE(2), TU_VALUES(0, 1));
    ((int64_t *)x->data)[0] = INT64_MAX; /* the sum wraps like uint64 */
    cx_tensor *y = run1(CX_OP_SUM, x, NULL);
    assert_true(((int64_t *)y->data)[0] == INT64_MIN);
    tu_drop(y);
    ((int64_t *)x->data)[0] = (INT64_C(1) << 62) + 1;
    ((int64_t *)x->data)[1] = (INT64_C(1) << 62) + 2;
    y = run1(CX_OP_REDUCE_MAX, x, NULL);
    assert_true(((int64_t *)y->data)[0] == (INT64_C(1) << 62) + 2);
    tu_drop(y);
    tu_drop(x);
    x = tu_tensor(CX_S32, 1, TU_SHAPE(2), TU_VALUES(INT32_MAX, INT32_MAX));
    y = run1(CX_OP_SUM, x, NULL);
    tu_expect(y, CX_S64, 0, NULL, TU_VALUES(2.0 * INT32_MAX), 0);
    tu_drop(y);
    tu_drop(x);
    x = tu_tensor(CX_U8, 1, TU_SHAPE(3), TU_VALUES(200, 200, 200));
    y = run1(CX_OP_PRODUCT, x, NULL);
    tu_expect(y, CX_U64, 0, NULL, TU_VALUES(8e6), 0);
    tu_drop(y);
    tu_drop(x);
    /* u64 above 2^63 compares as unsigned (max, min, argmax) and sums wrap modulo 2^64 */
    x = tu_tensor(CX_U64, 1, TU_SHAPE(3), TU_VALUES(5, 0, 7));
    ((uint64_t *)x->data)[1] = UINT64_MAX - 1;
    y = run1(CX_OP_REDUCE_MAX, x, NULL);
    assert_true(((uint64_t *)y->data)[0] == UINT64_MAX - 1);
    tu_drop(y);
    y = run1(CX_OP_REDUCE_MIN, x, NULL);
    assert_true(((uint64_t *)y->data)[0] == 5);
    tu_drop(y);
    y = run1(CX_OP_SUM, x, NULL);
    assert_int_equal(y->desc.dtype, CX_U64);
    assert_true(((uint64_t *)y->data)[0] == 10);
    tu_drop(y);
    cx_params aps = {0};
    cx_param_put_int(&aps, CX_P_AXIS, 0);
    y = run1(CX_OP_ARGMAX, x, &aps);
    assert_true(((int64_t *)y->data)[0] == 1);
    tu_drop(y);
    y = run1(CX_OP_ARGMIN, x, NULL);
    assert_true(((int64_t *)y->data)[0] == 0);
    tu_drop(y);
    tu_drop(x);
    x = tu_tensor(CX_S8, 1, TU_SHAPE(3), TU_VALUES(-128, 127, -1));
    y = run1(CX_OP_REDUCE_MIN, x, NULL);
    tu_expect(y, CX_S8, 0, NULL, TU_VALUES(-128), 0);
    tu_drop(y);
    y = run1(CX_OP_SUM, x, NULL);
    tu_expect(y, CX_S64, 0, NULL, TU_VALUES(-2), 0);
    tu_drop(y);
    tu_drop(x);
    x = tu_tensor(CX_F32, 1, TU_SHAPE(2), TU_VALUES(-0.0, -0.0));
    y = run1(CX_OP_SUM, x, NULL);
    assert_true(signbit(((float *)y->data)[0]));
    tu_drop(y);
    tu_drop(x);
}

/* ---- argmax / argmin ---- */

static void expect_arg(cx_op_id op, cx_tensor *x, int64_t axis, int tie, int rank,
                       const int64_t *shape, const double *want) {
    cx_params ps = {0};
    if (axis != INT64_MIN) cx_param_put_int(&ps, CX_P_AXIS, axis);
    cx_param_put_int(&ps, CX_P_TIE_BREAK, tie);
    cx_tensor *y = run1(op, x, &ps);
    tu_expect(y, CX_S64, rank, shape, want, 0);
    tu_drop(y);
}

#define FLAT INT64_MIN

static void test_arg_ties(void **state) {
    (void)state;
    for (int t = 0; t < N_TYPES; t++) {
        cx_dtype ty = all_types[t];
        cx_tensor *x = tu_tensor(ty, 2, TU_SHAPE(2, 3), TU_VALUES(1, 9, 9, 7, 2, 3));
        expect_arg(CX_OP_ARGMAX, x, 1, 1, 1, TU_SHAPE(2), TU_VALUES(2, 0));
        expect_arg(CX_OP_ARGMAX, x, 1, 0, 1, TU_SHAPE(2), TU_VALUES(1, 0));
        expect_arg(CX_OP_ARGMAX, x, FLAT, 0, 0, NULL, TU_VALUES(1));
        expect_arg(CX_OP_ARGMAX, x, FLAT, 1, 0, NULL, TU_VALUES(2));
        expect_arg(CX_OP_ARGMIN, x, 0, 0, 1, TU_SHAPE(3), TU_VALUES(0, 1, 1));
        tu_drop(x);
        x = tu_tensor(ty, 1, TU_SHAPE(3), TU_VALUES(4, 1, 1));
        expect_arg(CX_OP_ARGMIN, x, FLAT, 0, 0, NULL, TU_VALUES(1));
        expect_arg(CX_OP_ARGMIN, x, FLAT, 1, 0, NULL, TU_VALUES(2));
        expect_arg(CX_OP_ARGMIN, x, 0, 1, 0, NULL, TU_VALUES(2));
        tu_drop(x);
    }
    cx_tensor *x = tu_tensor(CX_F32, 2, TU_SHAPE(2, 3), TU_VALUES(1, 9, 9, 7, 2, 3));
    cx_params ps = {0};
    cx_param_put_int(&ps, CX_P_AXIS, 1);
    cx_param_put_int(&ps, CX_P_KEEP_AXIS, 1);
    cx_tensor *y = run1(CX_OP_ARGMAX, x, &ps);
    tu_expect(y, CX_S64, 2, TU_SHAPE(2, 1), TU_VALUES(1, 0), 0);
    tu_drop(y);
    tu_drop(x);
    /* an empty input is fine when the output is empty too */
    x = tu_tensor(CX_F32, 2, TU_SHAPE(0, 3), TU_VALUES(0));
    expect_arg(CX_OP_ARGMAX, x, 1, 0, 1, TU_SHAPE(0), TU_VALUES(0));
    tu_drop(x);
    x = tu_tensor(CX_F32, 2, TU_SHAPE(2, 3), TU_VALUES(1, 9, 9, 7, 2, 3));
    cx_params flat = {0};
    cx_param_put_int(&flat, CX_P_KEEP_AXIS, 1);
    y = run1(CX_OP_ARGMIN, x, &flat);
    tu_expect(y, CX_S64, 2, TU_SHAPE(1, 1), TU_VALUES(0), 0);
    tu_drop(y);
    tu_drop(x);
}

static void test_arg_nan(void **state) {
    (void)state;
    for (int t = 0; t < 4; t++) {
        cx_tensor *x = tu_tensor(float_types[t], 1, TU_SHAPE(4), TU_VALUES(1, NAN, 3, NAN));
        for (int op = 0; op < 2; op++) {
            cx_op_id id = op ? CX_OP_ARGMIN : CX_OP_ARGMAX;
            expect_arg(id, x, FLAT, 0, 0, NULL, TU_VALUES(1));
            expect_arg(id, x, FLAT, 1, 0, NULL, TU_VALUES(3));
        }
        tu_drop(x);
        /* columns: {1, NaN, NaN} and {5, 2, 5} */
        x = tu_tensor(float_types[t], 2, TU_SHAPE(3, 2), TU_VALUES(1, 5, NAN, 2, NAN, 5));
        expect_arg(CX_OP_ARGMAX, x, 0, 0, 1, TU_SHAPE(2), TU_VALUES(1, 0));
        expect_arg(CX_OP_ARGMAX, x, 0, 1, 1, TU_SHAPE(2), TU_VALUES(2, 2));
        expect_arg(CX_OP_ARGMIN, x, 0, 0, 1, TU_SHAPE(2), TU_VALUES(1, 1));
        expect_arg(CX_OP_ARGMIN, x, 0, 1, 1, TU_SHAPE(2), TU_VALUES(2, 1));
        tu_drop(x);
    }
}

static double arg_value(cx_dtype t, int64_t i) {
    return (double)((i * 7 + 3) % 13);
}

/* The index along axis (FLAT: of the whole tensor) of the extreme, ties per tie; NaN is the
 * extreme of both. */
static void ref_arg(const cx_tensor *x, bool max, int64_t axis, int tie, double *want) {
    const cx_desc *d = &x->desc;
    int64_t outer = 1, n = x->numel, inner = 1;
    if (axis != FLAT) {
        n = d->shape[axis];
        for (int k = 0; k < axis; k++) outer *= d->shape[k];
        for (int k = (int)axis + 1; k < d->rank; k++) inner *= d->shape[k];
    }
    for (int64_t o = 0; o < outer; o++)
        for (int64_t c = 0; c < inner; c++) {
            int64_t best = 0;
            for (int64_t j = 1; j < n; j++) {
                double v = tu_load(d->dtype, x->data, (o * n + j) * inner + c);
                double b = tu_load(d->dtype, x->data, (o * n + best) * inner + c);
                bool better = isnan(v) ? !isnan(b) : !isnan(b) && (max ? v > b : v < b);
                bool equal = v == b || (isnan(v) && isnan(b));
                if (better || (equal && tie)) best = j;
            }
            want[o * inner + c] = (double)best;
        }
}

static void test_arg_reference(void **state) {
    (void)state;
    static const int64_t shapes[][3] = {{3, 4, 5}, {2, 700, 3}, {1500, 1, 1}, {3, 2, 600}};
    static const cx_dtype types[] = {CX_F32, CX_S32, CX_U8, CX_F16, CX_S64};
    double *want = malloc(sizeof(double) * 4200);
    for (int s = 0; s < 4; s++)
        for (int t = 0; t < 5; t++) {
            cx_tensor *x = tensor_of(types[t], 3, shapes[s], arg_value);
            for (int64_t axis = -1; axis < 3; axis++)
                for (int m = 0; m < 2; m++)
                    for (int tie = 0; tie < 2; tie++) {
                        int64_t a = axis < 0 ? FLAT : axis, shape[2];
                        int rank = 0;
                        for (int k = 0; k < 3 && a != FLAT; k++)
                            if (k != a) shape[rank++] = shapes[s][k];
                        ref_arg(x, m == 0, a, tie, want);
                        expect_arg(m ? CX_OP_ARGMIN : CX_OP_ARGMAX, x, a, tie, rank, shape, want);
                    }
            tu_drop(x);
        }
    free(want);
    cx_tensor *x = tu_tensor(CX_S64, 1, TU_SHAPE(3), TU_VALUES(0, 0, 0));
    int64_t *v = x->data;
    v[0] = (INT64_C(1) << 62) + 1, v[1] = (INT64_C(1) << 62) + 2, v[2] = (INT64_C(1) << 62) + 1;
    expect_arg(CX_OP_ARGMAX, x, FLAT, 0, 0, NULL, TU_VALUES(1));
    expect_arg(CX_OP_ARGMIN, x, FLAT, 1, 0, NULL, TU_VALUES(2));
    tu_drop(x);
}

/* NaN and infinities at the start, inside, in the tail and at the end of runs longer than a
 * chunk: max/min and argmax/argmin must see them wherever they fall. */
static void test_extremes_in_long_runs(void **state) {
    (void)state;
    static const int64_t lens[] = {1000, 1003};
    static const double specials[][2] = {{NAN, 0}, {INFINITY, 0}, {-INFINITY, 0}, {INFINITY, NAN}};
    static const cx_dtype types[] = {CX_F32, CX_F64, CX_F16};
    double *v = malloc(sizeof(double) * 2 * 1003), *want = malloc(sizeof(double) * 2);
    for (int t = 0; t < 3; t++)
        for (int l = 0; l < 2; l++)
            for (int sp = 0; sp < 4; sp++)
                for (int w = 0; w < 4; w++) {
                    int64_t n = lens[l], at[] = {0, 5, 600, n - 1};
                    for (int64_t i = 0; i < 2 * n; i++) v[i] = wide_value(CX_F32, i);
                    v[at[w]] = specials[sp][0];
                    v[n + at[3 - w]] = specials[sp][0];
                    if (specials[sp][1] != 0) v[n + 7] = specials[sp][1];
                    cx_tensor *x = tu_tensor(types[t], 2, TU_SHAPE(2, n), v);
                    for (int o = 2; o < 4; o++)
                        check_reduce(reduce_ops[o], x, (const int64_t[]){1}, 1, false, 0);
                    for (int m = 0; m < 2; m++)
                        for (int tie = 0; tie < 2; tie++) {
                            ref_arg(x, m == 0, 1, tie, want);
                            expect_arg(m ? CX_OP_ARGMIN : CX_OP_ARGMAX, x, 1, tie, 1, TU_SHAPE(2),
                                       want);
                        }
                    tu_drop(x);
                }
    free(v);
    free(want);
}

/* ---- dot ---- */

typedef struct {
    int ra, rb;
    int64_t sa[4], sb[4];
    int nc, nb;
    int64_t ca[4], cb[4], ba[4], bb[4];
    bool defaults; /* run as dot/2 (no axes given); ca/cb hold what dot/2 means */
} dot_case;

static double dot_a_value(cx_dtype t, int64_t i) {
    double v = (double)((i * 3 + 1) % 7);
    return tu_unsigned(t) ? v * 20 : v - 3;
}

static double dot_b_value(cx_dtype t, int64_t i) {
    double v = (double)((i * 5 + 2) % 9);
    return tu_unsigned(t) ? v * 10 : v - 4;
}

static bool in_list(int64_t a, const int64_t *l, int n) {
    for (int k = 0; k < n; k++)
        if (l[k] == a) return true;
    return false;
}

/* The free axes of a shape: in neither list. */
static int free_axes(int rank, const int64_t *c, int nc, const int64_t *b, int nb, int64_t *out) {
    int n = 0;
    for (int a = 0; a < rank; a++)
        if (!in_list(a, c, nc) && !in_list(a, b, nb)) out[n++] = a;
    return n;
}

static int64_t offset_of(const int64_t *shape, int rank, const int64_t *idx) {
    int64_t o = 0;
    for (int k = 0; k < rank; k++) o = o * shape[k] + idx[k];
    return o;
}

/* Output shape of the case, and the reference, as a wrapped integer or exact double sum. */
static int ref_dot(const dot_case *c, const cx_tensor *a, const cx_tensor *b, int64_t *shape,
                   double *want) {
    int64_t fa[4], fb[4];
    int nfa = free_axes(c->ra, c->ca, c->nc, c->ba, c->nb, fa);
    int nfb = free_axes(c->rb, c->cb, c->nc, c->bb, c->nb, fb);
    int rank = 0;
    for (int k = 0; k < c->nb; k++) shape[rank++] = c->sa[c->ba[k]];
    for (int k = 0; k < nfa; k++) shape[rank++] = c->sa[fa[k]];
    for (int k = 0; k < nfb; k++) shape[rank++] = c->sb[fb[k]];
    int64_t csize[4], kn = 1;
    for (int k = 0; k < c->nc; k++) kn *= csize[k] = c->sa[c->ca[k]];
    cx_dtype t = a->desc.dtype;
    for (int64_t o = 0; o < numel_of(rank, shape); o++) {
        int64_t oi[8], ia[4] = {0}, ib[4] = {0}, ki[4];
        unflatten(o, rank, shape, oi);
        for (int k = 0; k < c->nb; k++) ia[c->ba[k]] = ib[c->bb[k]] = oi[k];
        for (int k = 0; k < nfa; k++) ia[fa[k]] = oi[c->nb + k];
        for (int k = 0; k < nfb; k++) ib[fb[k]] = oi[c->nb + nfa + k];
        double fsum = 0;
        uint64_t isum = 0;
        for (int64_t p = 0; p < kn; p++) {
            unflatten(p, c->nc, csize, ki);
            for (int k = 0; k < c->nc; k++) ia[c->ca[k]] = ib[c->cb[k]] = ki[k];
            double x = tu_load(t, a->data, offset_of(c->sa, c->ra, ia));
            double y = tu_load(t, b->data, offset_of(c->sb, c->rb, ib));
            fsum += x * y;
            isum += (uint64_t)(int64_t)x * (uint64_t)(int64_t)y;
        }
        if (is_float(t))
            want[o] = in_type(t, fsum);
        else
            want[o] = tu_wrap(t, isum);
    }
    return rank;
}

static void put_dot_axes(const dot_case *c, cx_params *ps) {
    cx_param_put_ints(ps, CX_P_CONTRACT_A, c->ca, c->nc);
    cx_param_put_ints(ps, CX_P_CONTRACT_B, c->cb, c->nc);
    cx_param_put_ints(ps, CX_P_BATCH_A, c->ba, c->nb);
    cx_param_put_ints(ps, CX_P_BATCH_B, c->bb, c->nb);
}

static void check_dot(const dot_case *c, cx_dtype t, double (*fa)(cx_dtype, int64_t),
                      double (*fb)(cx_dtype, int64_t), double tol) {
    cx_tensor *a = tensor_of(t, c->ra, c->sa, fa), *b = tensor_of(t, c->rb, c->sb, fb);
    int64_t shape[8];
    double *want = malloc(sizeof(double) * 200000);
    int rank = ref_dot(c, a, b, shape, want);
    cx_params ps = {0};
    if (!c->defaults) put_dot_axes(c, &ps);
    cx_tensor *y = run2(CX_OP_DOT, a, b, &ps);
    tu_expect(y, t, rank, shape, want, tol);
    tu_drop(y);
    tu_drop(a);
    tu_drop(b);
    free(want);
}

static const dot_case small_cases[] = {
    /* vector . vector, matrix . vector, matrix . matrix, rank 3 . rank 2, rank 2 . rank 3 */
    {.ra = 1, .rb = 1, .sa = {5}, .sb = {5}, .nc = 1, .ca = {0}, .cb = {0}, .defaults = true},
    {.ra = 2, .rb = 1, .sa = {3, 4}, .sb = {4}, .nc = 1, .ca = {1}, .cb = {0}, .defaults = true},
    {.ra = 2, .rb = 2, .sa = {3, 4}, .sb = {4, 5}, .nc = 1, .ca = {1}, .cb = {0}, .defaults = true},
    {.ra = 3,
     .rb = 2,
     .sa = {2, 3, 4},
     .sb = {4, 5},
     .nc = 1,
     .ca = {2},
     .cb = {0},
     .defaults = true},
    {.ra = 2,
     .rb = 3,
     .sa = {3, 4},
     .sb = {2, 4, 5},
     .nc = 1,
     .ca = {1},
     .cb = {1},
     .defaults = true},
    /* a scalar: no contraction */
    {.ra = 0, .rb = 1, .sb = {3}, .nc = 0, .defaults = true},
    /* batched, as Nx.dot/6 */
    {.ra = 3,
     .rb = 3,
     .sa = {2, 3, 4},
     .sb = {2, 4, 5},
     .nc = 1,
     .ca = {2},
     .cb = {1},
     .nb = 1,
     .ba = {0},
     .bb = {0}},
    /* transposed contraction axes */
    {.ra = 2, .rb = 2, .sa = {4, 3}, .sb = {5, 4}, .nc = 1, .ca = {0}, .cb = {1}},
    /* two contraction axes, paired out of order */
    {.ra = 3, .rb = 3, .sa = {2, 3, 4}, .sb = {4, 2, 5}, .nc = 2, .ca = {0, 2}, .cb = {1, 0}},
    /* batch axes that are not leading */
    {.ra = 3,
     .rb = 3,
     .sa = {3, 2, 4},
     .sb = {4, 5, 2},
     .nc = 1,
     .ca = {2},
     .cb = {0},
     .nb = 1,
     .ba = {1},
     .bb = {2}},
    /* outer product */
    {.ra = 1, .rb = 1, .sa = {2}, .sb = {3}, .nc = 0},
    /* free axes of a split around the contraction: a is gathered */
    {.ra = 4, .rb = 2, .sa = {2, 3, 4, 5}, .sb = {3, 5}, .nc = 2, .ca = {1, 3}, .cb = {0, 1}},
};

static void test_dot_small_cases(void **state) {
    (void)state;
    int n = (int)(sizeof small_cases / sizeof small_cases[0]);
    for (int c = 0; c < n; c++)
        for (int t = 0; t < N_TYPES; t++)
            check_dot(&small_cases[c], all_types[t], dot_a_value, dot_b_value, 1e-12);
}

static double unit_random(cx_dtype t, int64_t i) {
    uint64_t h = (uint64_t)i * 0x9E3779B97F4A7C15ull;
    h ^= h >> 29;
    h *= 0xBF58476D1CE4E5B9ull;
    h ^= h >> 32;
    return (double)(h >> 11) * 0x1.0p-52 - 1.0;
}

/* Sizes across the GEMM's blocks and tiles, in place, transposed and gathered, and the single
 * row and column products that skip the tiles: 300 x 14 by 2060 x 300 crosses KC (256) and NC
 * (2048) with two full MR tiles of rows and two rows over (14 rows, not 50 as before: the same
 * paths at a quarter of the reference's time, which valgrind multiplies). */
static void test_dot_large(void **state) {
    (void)state;
    static const dot_case cases[] = {
        {.ra = 2, .rb = 2, .sa = {67, 129}, .sb = {129, 35}, .nc = 1, .ca = {1}, .cb = {0}},
        {.ra = 2, .rb = 2, .sa = {300, 14}, .sb = {2060, 300}, .nc = 1, .ca = {0}, .cb = {1}},
        {.ra = 3,
         .rb = 3,
         .sa = {3, 40, 70},
         .sb = {70, 3, 50},
         .nc = 1,
         .ca = {2},
         .cb = {0},
         .nb = 1,
         .ba = {0},
         .bb = {1}},
        {.ra = 4,
         .rb = 3,
         .sa = {9, 30, 11, 20},
         .sb = {30, 20, 13},
         .nc = 2,
         .ca = {1, 3},
         .cb = {0, 1}},
        {.ra = 2, .rb = 2, .sa = {1, 300}, .sb = {300, 50}, .nc = 1, .ca = {1}, .cb = {0}},
        {.ra = 1, .rb = 2, .sa = {300}, .sb = {50, 300}, .nc = 1, .ca = {0}, .cb = {1}},
        {.ra = 2, .rb = 1, .sa = {300, 70}, .sb = {300}, .nc = 1, .ca = {0}, .cb = {0}},
    };
    for (int c = 0; c < 7; c++) {
        check_dot(&cases[c], CX_F32, unit_random, unit_random, 1e-4);
        check_dot(&cases[c], CX_F64, unit_random, unit_random, 1e-12);
    }
    check_dot(&cases[0], CX_F16, unit_random, unit_random, 4e-3);
    check_dot(&cases[2], CX_BF16, unit_random, unit_random, 3e-2);
    check_dot(&cases[3], CX_S32, dot_a_value, dot_b_value, 0);
}

static void test_dot_empty(void **state) {
    (void)state;
    static const dot_case cases[] = {
        {.ra = 2, .rb = 2, .sa = {3, 0}, .sb = {0, 4}, .nc = 1, .ca = {1}, .cb = {0}},
        {.ra = 2, .rb = 2, .sa = {0, 4}, .sb = {4, 5}, .nc = 1, .ca = {1}, .cb = {0}},
        {.ra = 3,
         .rb = 3,
         .sa = {0, 2, 3},
         .sb = {0, 3, 4},
         .nc = 1,
         .ca = {2},
         .cb = {1},
         .nb = 1,
         .ba = {0},
         .bb = {0}},
    };
    for (int c = 0; c < 3; c++)
        for (int t = 0; t < N_TYPES; t++)
            check_dot(&cases[c], all_types[t], dot_a_value, dot_b_value, 0);
}

/* ---- creation ---- */

static cx_tensor *create(cx_op_id op, cx_params *ps) {
    return tu_run_ok(op, NULL, 0, ps);
}

static void expect_full_float(double value, cx_dtype t, double want) {
    cx_params ps = {0};
    cx_param_put_float(&ps, CX_P_VALUE, value);
    cx_param_put_ints(&ps, CX_P_SHAPE, TU_SHAPE(2, 3), 2);
    cx_param_put_int(&ps, CX_P_TYPE, t);
    cx_tensor *y = create(CX_OP_FULL, &ps);
    tu_expect(y, t, 2, TU_SHAPE(2, 3), (const double[]){want, want, want, want, want, want}, 0);
    tu_drop(y);
}

static void expect_full_int(int64_t value, cx_dtype t, double want) {
    cx_params ps = {0};
    cx_param_put_int(&ps, CX_P_VALUE, value);
    cx_param_put_ints(&ps, CX_P_SHAPE, TU_SHAPE(3), 1);
    cx_param_put_int(&ps, CX_P_TYPE, t);
    cx_tensor *y = create(CX_OP_FULL, &ps);
    tu_expect(y, t, 1, TU_SHAPE(3), (const double[]){want, want, want}, 0);
    tu_drop(y);
}

static void test_full(void **state) {
    (void)state;
    static const double want_2_5[] = {2.5, 2.5, 2.5, 2.5, 2, 2, 2, 2, 2, 2, 2, 2};
    for (int t = 0; t < N_TYPES; t++) {
        expect_full_float(2.5, all_types[t], want_2_5[t]);
        expect_full_int(7, all_types[t], 7);
        expect_full_float(NAN, all_types[t], is_float(all_types[t]) ? NAN : 0);
    }
    expect_full_float(-1.7, CX_U8, 0);
    expect_full_float(-1.7, CX_S32, -1);
    expect_full_float(300.0, CX_U8, 255);
    expect_full_float(1e10, CX_S32, INT32_MAX);
    expect_full_float(-INFINITY, CX_S32, INT32_MIN);
    expect_full_float(INFINITY, CX_F16, INFINITY);
    expect_full_float(1e6, CX_F16, INFINITY);
    expect_full_float(0.1, CX_BF16, in_type(CX_BF16, 0.1));
    expect_full_int(300, CX_U8, 44);
    expect_full_int(-1, CX_U8, 255);
    expect_full_int(-1, CX_S32, -1);
    expect_full_int(INT64_C(1) << 32, CX_S32, 0);
    expect_full_int(2049, CX_F16, 2048);
    expect_full_float(-1.7, CX_U64, 0);
    expect_full_float(1e30, CX_U64, 18446744073709551615.0);
    expect_full_float(1e30, CX_U32, UINT32_MAX);
    expect_full_float(-1e30, CX_S8, INT8_MIN);
    expect_full_float(40000.7, CX_S16, INT16_MAX);
    expect_full_float(70000.0, CX_U16, UINT16_MAX);
    expect_full_int(-1, CX_U32, UINT32_MAX);
    expect_full_int(-1, CX_U64, 18446744073709551615.0);
    expect_full_int(200, CX_S8, -56);
    cx_params ps = {0};
    cx_param_put_int(&ps, CX_P_VALUE, (INT64_C(1) << 62) + 1);
    cx_param_put_ints(&ps, CX_P_SHAPE, TU_SHAPE(2), 1);
    cx_tensor *y = create(CX_OP_FULL, &ps); /* s64 by default, exact */
    assert_int_equal(y->desc.dtype, CX_S64);
    assert_true(((int64_t *)y->data)[1] == (INT64_C(1) << 62) + 1);
    tu_drop(y);
    ps = (cx_params){0};
    cx_param_put_float(&ps, CX_P_VALUE, -1e30);
    cx_param_put_ints(&ps, CX_P_SHAPE, TU_SHAPE(1), 1);
    cx_param_put_int(&ps, CX_P_TYPE, CX_S64);
    y = create(CX_OP_FULL, &ps);
    assert_true(((int64_t *)y->data)[0] == INT64_MIN);
    tu_drop(y);
    ps = (cx_params){0};
    cx_param_put_float(&ps, CX_P_VALUE, 1.0);
    cx_param_put_ints(&ps, CX_P_SHAPE, TU_SHAPE(0, 4), 2);
    y = create(CX_OP_FULL, &ps);
    tu_expect(y, CX_F32, 2, TU_SHAPE(0, 4), TU_VALUES(0), 0);
    tu_drop(y);
}

static cx_tensor *iota(int rank, const int64_t *shape, int64_t axis, cx_dtype t) {
    cx_params ps = {0};
    cx_param_put_ints(&ps, CX_P_SHAPE, shape, rank);
    if (axis != FLAT) cx_param_put_int(&ps, CX_P_AXIS, axis);
    cx_param_put_int(&ps, CX_P_TYPE, t);
    return create(CX_OP_IOTA, &ps);
}

static void test_iota(void **state) {
    (void)state;
    for (int t = 0; t < N_TYPES; t++) {
        cx_dtype ty = all_types[t];
        cx_tensor *y = iota(2, TU_SHAPE(2, 3), FLAT, ty);
        tu_expect(y, ty, 2, TU_SHAPE(2, 3), TU_VALUES(0, 1, 2, 3, 4, 5), 0);
        tu_drop(y);
        y = iota(2, TU_SHAPE(2, 3), 1, ty);
        tu_expect(y, ty, 2, TU_SHAPE(2, 3), TU_VALUES(0, 1, 2, 0, 1, 2), 0);
        tu_drop(y);
        y = iota(2, TU_SHAPE(2, 3), 0, ty);
        tu_expect(y, ty, 2, TU_SHAPE(2, 3), TU_VALUES(0, 0, 0, 1, 1, 1), 0);
        tu_drop(y);
        y = iota(3, TU_SHAPE(2, 3, 2), -2, ty);
        tu_expect(y, ty, 3, TU_SHAPE(2, 3, 2), TU_VALUES(0, 0, 1, 1, 2, 2, 0, 0, 1, 1, 2, 2), 0);
        tu_drop(y);
    }
    cx_tensor *y = iota(1, TU_SHAPE(2050), FLAT, CX_F16); /* 2049 is a tie: to even, 2048 */
    assert_true(tu_load(CX_F16, y->data, 2047) == 2047 && tu_load(CX_F16, y->data, 2049) == 2048);
    tu_drop(y);
    y = iota(1, TU_SHAPE(300), 0, CX_U8); /* wraps */
    assert_true(tu_load(CX_U8, y->data, 299) == 43);
    tu_drop(y);
    y = iota(0, NULL, FLAT, CX_S64);
    tu_expect(y, CX_S64, 0, NULL, TU_VALUES(0), 0);
    tu_drop(y);
    y = iota(2, TU_SHAPE(3, 0), 0, CX_F32);
    assert_int_equal(y->numel, 0);
    tu_drop(y);
}

static cx_tensor *eye(int rank, const int64_t *shape, cx_dtype t) {
    cx_params ps = {0};
    cx_param_put_ints(&ps, CX_P_SHAPE, shape, rank);
    cx_param_put_int(&ps, CX_P_TYPE, t);
    return create(CX_OP_EYE, &ps);
}

static void test_eye(void **state) {
    (void)state;
    for (int t = 0; t < N_TYPES; t++) {
        cx_dtype ty = all_types[t];
        cx_tensor *y = eye(2, TU_SHAPE(3, 3), ty);
        tu_expect(y, ty, 2, TU_SHAPE(3, 3), TU_VALUES(1, 0, 0, 0, 1, 0, 0, 0, 1), 0);
        tu_drop(y);
        y = eye(3, TU_SHAPE(2, 2, 3), ty);
        tu_expect(y, ty, 3, TU_SHAPE(2, 2, 3), TU_VALUES(1, 0, 0, 0, 1, 0, 1, 0, 0, 0, 1, 0), 0);
        tu_drop(y);
        y = eye(2, TU_SHAPE(3, 2), ty);
        tu_expect(y, ty, 2, TU_SHAPE(3, 2), TU_VALUES(1, 0, 0, 1, 0, 0), 0);
        tu_drop(y);
    }
    cx_tensor *y = eye(2, TU_SHAPE(0, 3), CX_F32);
    assert_int_equal(y->numel, 0);
    tu_drop(y);
}

static cx_tensor *random_t(cx_op_id op, int64_t n, int64_t key, double lo, double hi, cx_dtype t) {
    cx_params ps = {0};
    cx_param_put_ints(&ps, CX_P_SHAPE, (const int64_t[]){n}, 1);
    cx_param_put_int(&ps, CX_P_KEY, key);
    cx_param_put_float(&ps, op == CX_OP_RANDOM_NORMAL ? CX_P_MEAN : CX_P_MIN, lo);
    cx_param_put_float(&ps, op == CX_OP_RANDOM_NORMAL ? CX_P_STD : CX_P_MAX, hi);
    cx_param_put_int(&ps, CX_P_TYPE, t);
    return create(op, &ps);
}

/* The known answer of Random123 for Philox-4x32-10 with counter and key zero. */
static void test_philox_known_answer(void **state) {
    (void)state;
    cx_philox_block b = cx_philox(0, 0);
    assert_true(b.v[0] == 0x6627e8d5u && b.v[1] == 0xe169c58du);
    assert_true(b.v[2] == 0xbc57ac4cu && b.v[3] == 0x9b00dbd8u);
    cx_tensor *y = random_t(CX_OP_RANDOM_UNIFORM, 3, 0, 0, 1, CX_F32);
    assert_true(((float *)y->data)[0] == cx_uniform01_f32(0, 0));
    assert_true(((float *)y->data)[0] == (float)(0x6627e8d5u >> 8) * 0x1.0p-24f);
    tu_drop(y);
    y = random_t(CX_OP_RANDOM_UNIFORM, 3, 0, 0, 1, CX_F64);
    uint64_t bits53 = ((uint64_t)0x6627e8d5u << 21) | (0xe169c58du >> 11);
    assert_true(((double *)y->data)[0] == cx_uniform01_f64(0, 0));
    assert_true(((double *)y->data)[0] == (double)bits53 * 0x1.0p-53);
    tu_drop(y);
}

/* Every element follows philox.h's mapping, for lengths that end mid-block. */
static void test_random_mapping(void **state) {
    (void)state;
    const int64_t key = 123456789;
    cx_tensor *y = random_t(CX_OP_RANDOM_UNIFORM, 1001, key, 0, 1, CX_F32);
    for (int64_t i = 0; i < 1001; i++)
        assert_true(((float *)y->data)[i] == cx_uniform01_f32(key, (uint64_t)i));
    tu_drop(y);
    y = random_t(CX_OP_RANDOM_UNIFORM, 1001, key, 0, 1, CX_F64);
    for (int64_t i = 0; i < 1001; i++)
        assert_true(((double *)y->data)[i] == cx_uniform01_f64(key, (uint64_t)i));
    tu_drop(y);
    y = random_t(CX_OP_RANDOM_NORMAL, 1001, key, 0, 1, CX_F32);
    for (int64_t i = 0; i < 1001; i++)
        assert_true(((float *)y->data)[i] == cx_normal_f32(key, (uint64_t)i));
    tu_drop(y);
    y = random_t(CX_OP_RANDOM_NORMAL, 1001, key, 0, 1, CX_F64);
    for (int64_t i = 0; i < 1001; i++)
        assert_true(((double *)y->data)[i] == cx_normal_f64(key, (uint64_t)i));
    tu_drop(y);
    y = random_t(CX_OP_RANDOM_NORMAL, 7, key, 2, 3, CX_F16);
    for (int64_t i = 0; i < 7; i++)
        assert_true(((uint16_t *)y->data)[i] ==
                    cx_f16_from_f64(fma(3, cx_normal_f32(key, (uint64_t)i), 2)));
    tu_drop(y);
}

static void test_random_determinism(void **state) {
    (void)state;
    for (int op = 0; op < 2; op++)
        for (int t = 0; t < 4; t++) {
            cx_op_id id = op ? CX_OP_RANDOM_NORMAL : CX_OP_RANDOM_UNIFORM;
            size_t bytes = cx_dtype_size(float_types[t]) * 1000;
            cx_tensor *a = random_t(id, 1000, 42, 0, 1, float_types[t]);
            cx_tensor *b = random_t(id, 1000, 42, 0, 1, float_types[t]);
            cx_tensor *c = random_t(id, 1000, 43, 0, 1, float_types[t]);
            cx_tensor *d = random_t(id, 1000, -1, 0, 1, float_types[t]); /* key 2^64 - 1 */
            assert_memory_equal(a->data, b->data, bytes);
            int same = 0, same_d = 0;
            for (int64_t i = 0; i < 1000; i++) {
                same += tu_load(float_types[t], a->data, i) == tu_load(float_types[t], c->data, i);
                same_d +=
                    tu_load(float_types[t], a->data, i) == tu_load(float_types[t], d->data, i);
            }
            assert_true(same < 50 && same_d < 50); /* f16/bf16 collide now and then */
            tu_drop(a);
            tu_drop(b);
            tu_drop(c);
            tu_drop(d);
        }
}

static void test_random_uniform_range(void **state) {
    (void)state;
    static const double ranges[][2] = {{-2, 3}, {0, 1}, {1, 2}, {-1e-3, 1e-3}};
    for (int t = 0; t < 4; t++)
        for (int r = 0; r < 4; r++) {
            double lo = ranges[r][0], hi = ranges[r][1];
            cx_tensor *y = random_t(CX_OP_RANDOM_UNIFORM, 20000, r + 1, lo, hi, float_types[t]);
            double mean = 0;
            for (int64_t i = 0; i < 20000; i++) {
                double v = tu_load(float_types[t], y->data, i);
                if (!(v >= lo && v < hi))
                    fail_msg("element %lld = %.17g outside [%g, %g)", (long long)i, v, lo, hi);
                mean += v / 20000;
            }
            assert_true(fabs(mean - (lo + hi) / 2) < 0.02 * (hi - lo));
            tu_drop(y);
        }
}

static void test_random_normal_moments(void **state) {
    (void)state;
    static const cx_dtype types[] = {CX_F32, CX_F64, CX_BF16};
    for (int t = 0; t < 3; t++) {
        cx_tensor *y = random_t(CX_OP_RANDOM_NORMAL, 10000, 7, 1.5, 1.0, types[t]);
        double sum = 0, sq = 0;
        for (int64_t i = 0; i < 10000; i++) {
            double v = tu_load(types[t], y->data, i);
            assert_true(isfinite(v));
            sum += v;
            sq += v * v;
        }
        double mean = sum / 10000, std = sqrt(sq / 10000 - mean * mean);
        if (fabs(mean - 1.5) > 0.05 || fabs(std - 1.0) > 0.05)
            fail_msg("%s: mean %g, std %g", cx_dtype_name(types[t]), mean, std);
        tu_drop(y);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_reduce_ops_types_axes),
        cmocka_unit_test(test_reduce_no_axes),
        cmocka_unit_test(test_reduce_large_layouts),
        cmocka_unit_test(test_reduce_nan),
        cmocka_unit_test(test_reduce_empty),
        cmocka_unit_test(test_reduce_exact_integers_and_zero_sign),
        cmocka_unit_test(test_arg_ties),
        cmocka_unit_test(test_arg_nan),
        cmocka_unit_test(test_arg_reference),
        cmocka_unit_test(test_extremes_in_long_runs),
        cmocka_unit_test(test_dot_small_cases),
        cmocka_unit_test(test_dot_large),
        cmocka_unit_test(test_dot_empty),
        cmocka_unit_test(test_full),
        cmocka_unit_test(test_iota),
        cmocka_unit_test(test_eye),
        cmocka_unit_test(test_philox_known_answer),
        cmocka_unit_test(test_random_mapping),
        cmocka_unit_test(test_random_determinism),
        cmocka_unit_test(test_random_uniform_range),
        cmocka_unit_test(test_random_normal_moments),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
