/* The cpu driver's elementwise and as_type kernels, run through the full dispatcher (inference,
 * input casts, kernel) on every type, with broadcasting, integer and float edge cases, and the
 * rounding of f16/bf16. */
#include "test_util.h"

#include "../drivers/cpu/cpu_kernels.h"

/* the types every test here runs over; s8, s16, u16, u32 and u64 have tests of their own below */
static const cx_dtype all_types[] = {CX_F16, CX_BF16, CX_F32, CX_F64, CX_U8, CX_S32, CX_S64};
static const cx_dtype float_types[] = {CX_F16, CX_BF16, CX_F32, CX_F64};
#define COUNT(a) ((int)(sizeof(a) / sizeof((a)[0])))

static cx_tensor *op1(cx_op_id op, cx_tensor *a) {
    return tu_run_ok(op, (cx_tensor *[]){a}, 1, NULL);
}

static cx_tensor *op2(cx_op_id op, cx_tensor *a, cx_tensor *b) {
    return tu_run_ok(op, (cx_tensor *[]){a, b}, 2, NULL);
}

static cx_tensor *op3(cx_op_id op, cx_tensor *a, cx_tensor *b, cx_tensor *c) {
    return tu_run_ok(op, (cx_tensor *[]){a, b, c}, 3, NULL);
}

static cx_tensor *as_type(cx_tensor *a, cx_dtype t) {
    cx_params ps = {0};
    cx_param_put_int(&ps, CX_P_TYPE, t);
    return tu_run_ok(CX_OP_AS_TYPE, (cx_tensor *[]){a}, 1, &ps);
}

static void drop_all(cx_tensor **xs, int n) {
    for (int k = 0; k < n; k++) tu_drop(xs[k]);
}

/* v as type t holds it: rounded into floats, wrapped into integers. */
static double repr(cx_dtype t, double v) {
    double m;
    switch (t) {
    case CX_F16: return cx_f16_to_f32(cx_f16_from_f64(v));
    case CX_BF16: return cx_bf16_to_f32(cx_bf16_from_f64(v));
    case CX_F32: return (float)v;
    case CX_U8: m = fmod(v, 256.0); return m < 0 ? m + 256.0 : m;
    case CX_S32:
        m = fmod(v, 4294967296.0);
        if (m < 0) m += 4294967296.0;
        return m >= 2147483648.0 ? m - 4294967296.0 : m;
    default: return v;
    }
}

static void expect_vec(const cx_tensor *x, cx_dtype t, int64_t n, const double *want, double tol) {
    tu_expect(x, t, 1, (const int64_t[]){n}, want, tol);
}

static void expect_s64(const cx_tensor *x, int64_t n, const int64_t *want) {
    assert_int_equal(x->desc.dtype, CX_S64);
    assert_int_equal(x->numel, n);
    const int64_t *got = x->data;
    for (int64_t i = 0; i < n; i++) assert_int_equal((uint64_t)got[i], (uint64_t)want[i]);
}

static void expect_bits16(const cx_tensor *x, cx_dtype t, int64_t n, const uint16_t *want) {
    assert_int_equal(x->desc.dtype, t);
    assert_int_equal(x->numel, n);
    const uint16_t *got = x->data;
    for (int64_t i = 0; i < n; i++)
        if (got[i] != want[i])
            fail_msg("element %lld: expected 0x%04x, got 0x%04x", (long long)i, want[i], got[i]);
}

/* Runs a unary op on a fresh vector and checks it. */
static void check1(cx_op_id op, cx_dtype t, int64_t n, const double *x, cx_dtype out_t,
                   const double *want, double tol) {
    cx_tensor *a = tu_vec(t, n, x), *r = op1(op, a);
    expect_vec(r, out_t, n, want, tol);
    drop_all((cx_tensor *[]){a, r}, 2);
}

static void check2(cx_op_id op, cx_dtype t, int64_t n, const double *x, const double *y,
                   cx_dtype out_t, const double *want, double tol) {
    cx_tensor *a = tu_vec(t, n, x), *b = tu_vec(t, n, y), *r = op2(op, a, b);
    expect_vec(r, out_t, n, want, tol);
    drop_all((cx_tensor *[]){a, b, r}, 3);
}

/* ---- unary ---- */

static const cx_op_id float_unary_ops[] = {
    CX_OP_EXP,  CX_OP_EXPM1, CX_OP_LOG,    CX_OP_LOG1P,      CX_OP_SQRT, CX_OP_RSQRT,
    CX_OP_SIN,  CX_OP_COS,   CX_OP_TANH,   CX_OP_SIGMOID,    CX_OP_ERF,  CX_OP_FLOOR,
    CX_OP_CEIL, CX_OP_ROUND, CX_OP_NEGATE, CX_OP_RECIPROCAL, CX_OP_ABS,  CX_OP_SIGN,
};

static float ref_unary_f32(cx_op_id op, float x) {
    switch (op) {
    case CX_OP_EXP: return expf(x);
    case CX_OP_EXPM1: return expm1f(x);
    case CX_OP_LOG: return logf(x);
    case CX_OP_LOG1P: return log1pf(x);
    case CX_OP_SQRT: return sqrtf(x);
    case CX_OP_RSQRT: return 1 / sqrtf(x);
    case CX_OP_SIN: return sinf(x);
    case CX_OP_COS: return cosf(x);
    case CX_OP_TANH: return tanhf(x);
    case CX_OP_SIGMOID: return x >= 0 ? 1 / (1 + expf(-x)) : expf(x) / (1 + expf(x));
    case CX_OP_ERF: return erff(x);
    case CX_OP_FLOOR: return floorf(x);
    case CX_OP_CEIL: return ceilf(x);
    case CX_OP_ROUND: return roundf(x);
    case CX_OP_NEGATE: return -x;
    case CX_OP_RECIPROCAL: return 1 / x;
    case CX_OP_ABS: return fabsf(x);
    case CX_OP_SIGN: return x > 0 ? 1.0f : x < 0 ? -1.0f : x;
    default: fail_msg("no reference for %s", cx_op_table[op].name);
    }
    return 0;
}

static double ref_unary_f64(cx_op_id op, double x) {
    switch (op) {
    case CX_OP_EXP: return exp(x);
    case CX_OP_EXPM1: return expm1(x);
    case CX_OP_LOG: return log(x);
    case CX_OP_LOG1P: return log1p(x);
    case CX_OP_SQRT: return sqrt(x);
    case CX_OP_RSQRT: return 1 / sqrt(x);
    case CX_OP_SIN: return sin(x);
    case CX_OP_COS: return cos(x);
    case CX_OP_TANH: return tanh(x);
    case CX_OP_SIGMOID: return 1 / (1 + exp(-x));
    case CX_OP_ERF: return erf(x);
    case CX_OP_FLOOR: return floor(x);
    case CX_OP_CEIL: return ceil(x);
    case CX_OP_ROUND: return round(x);
    case CX_OP_NEGATE: return -x;
    case CX_OP_RECIPROCAL: return 1 / x;
    case CX_OP_ABS: return fabs(x);
    case CX_OP_SIGN: return x > 0 ? 1.0 : x < 0 ? -1.0 : x;
    default: fail_msg("no reference for %s", cx_op_table[op].name);
    }
    return 0;
}

/* f32/f64 agree with libm; f16/bf16 are the f32 result rounded once. */
static void test_unary_float_ops(void **state) {
    (void)state;
    const double xs[] = {-2.5, -0.75, -0.0, 0.0, 0.3, 1.0, 2.5, 7.0};
    const int n = COUNT(xs);
    for (int ti = 0; ti < COUNT(float_types); ti++) {
        cx_dtype t = float_types[ti];
        for (int oi = 0; oi < COUNT(float_unary_ops); oi++) {
            cx_op_id op = float_unary_ops[oi];
            double want[8];
            for (int i = 0; i < n; i++) {
                double x = repr(t, xs[i]);
                if (t == CX_F64)
                    want[i] = ref_unary_f64(op, x);
                else
                    want[i] = repr(t, ref_unary_f32(op, (float)x));
            }
            check1(op, t, n, xs, t, want, t == CX_F32 ? 1e-6 : t == CX_F64 ? 1e-14 : 0);
        }
    }
}

static void test_unary_float_specials(void **state) {
    (void)state;
    for (int ti = 0; ti < COUNT(float_types); ti++) {
        cx_dtype t = float_types[ti];
        check1(CX_OP_SIGN, t, 5, TU_VALUES(-2, -0.0, 0, 3, NAN), t, TU_VALUES(-1, 0, 0, 1, NAN), 0);
        check1(CX_OP_ROUND, t, 5, TU_VALUES(0.5, 1.5, -2.5, 2.25, -0.25), t,
               TU_VALUES(1, 2, -3, 2, -0.0), 0);
        check1(CX_OP_FLOOR, t, 3, TU_VALUES(1.5, -1.5, INFINITY), t, TU_VALUES(1, -2, INFINITY), 0);
        check1(CX_OP_CEIL, t, 3, TU_VALUES(1.5, -1.5, NAN), t, TU_VALUES(2, -1, NAN), 0);
        check1(CX_OP_ABS, t, 3, TU_VALUES(-INFINITY, -0.0, NAN), t, TU_VALUES(INFINITY, 0, NAN), 0);
        check1(CX_OP_LOG, t, 3, TU_VALUES(0, -1, INFINITY), t, TU_VALUES(-INFINITY, NAN, INFINITY),
               0);
        check1(CX_OP_SQRT, t, 2, TU_VALUES(-1, 4), t, TU_VALUES(NAN, 2), 0);
        check1(CX_OP_RECIPROCAL, t, 3, TU_VALUES(0, -0.0, 4), t,
               TU_VALUES(INFINITY, -INFINITY, 0.25), 0);
        check1(CX_OP_SIGMOID, t, 4, TU_VALUES(-1000, 1000, NAN, 0), t, TU_VALUES(0, 1, NAN, 0.5),
               0);
        check1(CX_OP_EXP, t, 2, TU_VALUES(-INFINITY, 1000), t, TU_VALUES(0, INFINITY), 0);
        check1(CX_OP_NEGATE, t, 2, TU_VALUES(NAN, INFINITY), t, TU_VALUES(NAN, -INFINITY), 0);
    }
}

/* exp(-x) overflows long before sigmoid's result leaves the subnormal range. */
static void test_sigmoid_keeps_tiny_results(void **state) {
    (void)state;
    cx_tensor *f = tu_vec(CX_F32, 1, TU_VALUES(-100)), *d = tu_vec(CX_F64, 1, TU_VALUES(-720));
    cx_tensor *rf = op1(CX_OP_SIGMOID, f), *rd = op1(CX_OP_SIGMOID, d);
    float gf = *(const float *)rf->data;
    double gd = *(const double *)rd->data;
    assert_true(gf > 0 && fabsf(gf - expf(-100)) <= 0x1p-149f);
    assert_true(gd > 0 && fabs(gd - exp(-720)) <= 0x1p-1074);
    drop_all((cx_tensor *[]){f, d, rf, rd}, 4);
}

/* Inference turns integers into f32 for UNARY_FLOAT ops; the dispatcher casts. */
static void test_unary_float_on_integers(void **state) {
    (void)state;
    check1(CX_OP_SQRT, CX_S32, 2, TU_VALUES(4, 9), CX_F32, TU_VALUES(2, 3), 0);
    check1(CX_OP_EXP, CX_U8, 2, TU_VALUES(0, 1), CX_F32, TU_VALUES(1, expf(1)), 0);
    check1(CX_OP_RECIPROCAL, CX_S64, 2, TU_VALUES(4, 0), CX_F32, TU_VALUES(0.25, INFINITY), 0);
}

static void test_unary_integers(void **state) {
    (void)state;
    const double s32[] = {INT32_MIN, -5, 0, 7, INT32_MAX};
    check1(CX_OP_NEGATE, CX_S32, 5, s32, CX_S32, TU_VALUES(INT32_MIN, 5, 0, -7, -INT32_MAX), 0);
    check1(CX_OP_ABS, CX_S32, 5, s32, CX_S32, TU_VALUES(INT32_MIN, 5, 0, 7, INT32_MAX), 0);
    check1(CX_OP_SIGN, CX_S32, 5, s32, CX_S32, TU_VALUES(-1, -1, 0, 1, 1), 0);
    const double u8[] = {0, 1, 200, 255};
    check1(CX_OP_NEGATE, CX_U8, 4, u8, CX_U8, TU_VALUES(0, 255, 56, 1), 0);
    check1(CX_OP_ABS, CX_U8, 4, u8, CX_U8, u8, 0);
    check1(CX_OP_SIGN, CX_U8, 4, u8, CX_U8, TU_VALUES(0, 1, 1, 1), 0);
    const cx_op_id identity[] = {CX_OP_FLOOR, CX_OP_CEIL, CX_OP_ROUND};
    for (int k = 0; k < 3; k++) {
        check1(identity[k], CX_S32, 5, s32, CX_S32, s32, 0);
        check1(identity[k], CX_U8, 4, u8, CX_U8, u8, 0);
    }

    const int64_t s64[] = {INT64_MIN, -3, 0, INT64_MAX};
    cx_tensor *a = tu_raw(CX_S64, 4, s64);
    cx_tensor *neg = op1(CX_OP_NEGATE, a), *abs = op1(CX_OP_ABS, a), *sgn = op1(CX_OP_SIGN, a);
    cx_tensor *flo = op1(CX_OP_FLOOR, a);
    expect_s64(neg, 4, (const int64_t[]){INT64_MIN, 3, 0, -INT64_MAX});
    expect_s64(abs, 4, (const int64_t[]){INT64_MIN, 3, 0, INT64_MAX});
    expect_s64(sgn, 4, (const int64_t[]){-1, -1, 0, 1});
    expect_s64(flo, 4, s64);
    drop_all((cx_tensor *[]){a, neg, abs, sgn, flo}, 5);
}

/* ---- binary ---- */

static double ref_binary(cx_op_id op, double x, double y) {
    switch (op) {
    case CX_OP_ADD: return x + y;
    case CX_OP_SUBTRACT: return x - y;
    case CX_OP_MULTIPLY: return x * y;
    case CX_OP_DIVIDE: return x / y;
    case CX_OP_POW: return pow(x, y);
    case CX_OP_MAX: return isnan(x) || x > y ? x : y;
    case CX_OP_MIN: return isnan(x) || x < y ? x : y;
    case CX_OP_REMAINDER: return fmod(x, y);
    case CX_OP_LESS: return x < y;
    case CX_OP_EQUAL: return x == y;
    default: fail_msg("no reference for %s", cx_op_table[op].name);
    }
    return 0;
}

/* Small non-negative operands every type holds; results are wrapped or rounded into the type. */
static void test_binary_every_type(void **state) {
    (void)state;
    const cx_op_id ops[] = {CX_OP_ADD, CX_OP_SUBTRACT, CX_OP_MULTIPLY, CX_OP_POW,
                            CX_OP_MAX, CX_OP_MIN,      CX_OP_REMAINDER};
    const double a[] = {7, 2, 9, 0, 5, 200}, b[] = {3, 5, 2, 4, 1, 2};
    for (int ti = 0; ti < COUNT(all_types); ti++) {
        cx_dtype t = all_types[ti];
        for (int oi = 0; oi < COUNT(ops); oi++) {
            double want[6];
            for (int i = 0; i < 6; i++) want[i] = repr(t, ref_binary(ops[oi], a[i], b[i]));
            check2(ops[oi], t, 6, a, b, t, want, 0);
        }
    }
}

static void test_divide_and_atan2(void **state) {
    (void)state;
    for (int ti = 0; ti < COUNT(float_types); ti++) {
        cx_dtype t = float_types[ti];
        check2(CX_OP_DIVIDE, t, 5, TU_VALUES(1, -3, 0, 1, -1), TU_VALUES(2, 4, 0, 0, 0), t,
               TU_VALUES(0.5, -0.75, NAN, INFINITY, -INFINITY), 0);
        double tol = t == CX_F16 ? 1e-3 : t == CX_BF16 ? 1e-2 : 1e-6;
        check2(CX_OP_ATAN2, t, 4, TU_VALUES(0, 1, -1, 1), TU_VALUES(1, 0, 0, -1), t,
               TU_VALUES(0, M_PI / 2, -M_PI / 2, 3 * M_PI / 4), tol);
    }
    /* Integers divide as f32, like Nx. */
    check2(CX_OP_DIVIDE, CX_S32, 2, TU_VALUES(1, 3), TU_VALUES(2, 0), CX_F32,
           TU_VALUES(0.5, INFINITY), 0);
    check2(CX_OP_ATAN2, CX_U8, 1, TU_VALUES(0), TU_VALUES(1), CX_F32, TU_VALUES(0), 0);
}

static void test_float_binary_specials(void **state) {
    (void)state;
    for (int ti = 0; ti < COUNT(float_types); ti++) {
        cx_dtype t = float_types[ti];
        const double x[] = {NAN, 1, 2, -INFINITY, 0.0}, y[] = {1, NAN, 3, 0, -0.0};
        check2(CX_OP_MAX, t, 5, x, y, t, TU_VALUES(NAN, NAN, 3, 0, 0), 0);
        check2(CX_OP_MIN, t, 5, x, y, t, TU_VALUES(NAN, NAN, 2, -INFINITY, 0), 0);
        check2(CX_OP_REMAINDER, t, 4, TU_VALUES(5.5, -5.5, 1, INFINITY), TU_VALUES(2, 2, 0, 2), t,
               TU_VALUES(1.5, -1.5, NAN, NAN), 0);
        check2(CX_OP_POW, t, 4, TU_VALUES(2, -8, 0, 4), TU_VALUES(-1, 0.5, -1, 0.5), t,
               TU_VALUES(0.5, NAN, INFINITY, 2), 0);
        check2(CX_OP_ADD, t, 2, TU_VALUES(INFINITY, 1), TU_VALUES(-INFINITY, NAN), t,
               TU_VALUES(NAN, NAN), 0);
    }
}

static void test_integer_edge_cases(void **state) {
    (void)state;
    check2(CX_OP_REMAINDER, CX_S32, 6, TU_VALUES(7, -7, 5, INT32_MIN, 9, -9),
           TU_VALUES(3, 3, 0, -1, -4, 4), CX_S32, TU_VALUES(1, -1, 0, 0, 1, -1), 0);
    check2(CX_OP_REMAINDER, CX_U8, 3, TU_VALUES(7, 255, 0), TU_VALUES(0, 16, 0), CX_U8,
           TU_VALUES(0, 15, 0), 0);
    check2(CX_OP_ADD, CX_S32, 2, TU_VALUES(INT32_MAX, INT32_MIN), TU_VALUES(1, -1), CX_S32,
           TU_VALUES(INT32_MIN, INT32_MAX), 0);
    check2(CX_OP_MULTIPLY, CX_S32, 2, TU_VALUES(65536, -65536), TU_VALUES(65536, 32768), CX_S32,
           TU_VALUES(0, INT32_MIN), 0);
    check2(CX_OP_SUBTRACT, CX_S32, 1, TU_VALUES(INT32_MIN), TU_VALUES(1), CX_S32,
           TU_VALUES(INT32_MAX), 0);
    check2(CX_OP_ADD, CX_U8, 2, TU_VALUES(200, 255), TU_VALUES(100, 1), CX_U8, TU_VALUES(44, 0), 0);
    check2(CX_OP_MULTIPLY, CX_U8, 2, TU_VALUES(16, 255), TU_VALUES(17, 255), CX_U8,
           TU_VALUES(16, 1), 0);
    check2(CX_OP_SUBTRACT, CX_U8, 1, TU_VALUES(0), TU_VALUES(1), CX_U8, TU_VALUES(255), 0);

    /* pow: negative exponents truncate to 0 except for bases 1 and -1; large powers wrap. */
    uint32_t p40 = 1;
    for (int k = 0; k < 40; k++) p40 *= 3u;
    check2(CX_OP_POW, CX_S32, 8, TU_VALUES(2, 1, -1, -1, 2, 0, -2, 3),
           TU_VALUES(10, -5, -3, -4, -1, 0, 3, 40), CX_S32,
           TU_VALUES(1024, 1, -1, 1, 0, 1, -8, (double)(int32_t)p40), 0);
    check2(CX_OP_POW, CX_U8, 3, TU_VALUES(2, 3, 0), TU_VALUES(8, 5, 0), CX_U8, TU_VALUES(0, 243, 1),
           0);

    uint64_t q40 = 1;
    for (int k = 0; k < 40; k++) q40 *= 3u;
    const int64_t xa[] = {INT64_MAX, INT64_MIN, 3, -7, INT64_MIN, 5};
    const int64_t xb[] = {1, -1, 40, 2, -1, -2};
    cx_tensor *a = tu_raw(CX_S64, 6, xa), *b = tu_raw(CX_S64, 6, xb);
    cx_tensor *add = op2(CX_OP_ADD, a, b), *rem = op2(CX_OP_REMAINDER, a, b);
    cx_tensor *pw = op2(CX_OP_POW, a, b), *mul = op2(CX_OP_MULTIPLY, a, b);
    expect_s64(add, 6, (const int64_t[]){INT64_MIN, INT64_MAX, 43, -5, INT64_MAX, 3});
    expect_s64(rem, 6, (const int64_t[]){0, 0, 3, -1, 0, 1});
    expect_s64(pw, 6, (const int64_t[]){INT64_MAX, 0, (int64_t)q40, 49, 0, 0});
    expect_s64(mul, 6, (const int64_t[]){INT64_MAX, INT64_MIN, 120, -14, INT64_MIN, -10});
    drop_all((cx_tensor *[]){a, b, add, rem, pw, mul}, 6);
}

/* ---- comparisons and logic ---- */

static void test_compare_every_type(void **state) {
    (void)state;
    const double a[] = {1, 2, 3, 0}, b[] = {2, 2, 2, 0};
    const cx_op_id ops[] = {CX_OP_EQUAL,      CX_OP_NOT_EQUAL, CX_OP_LESS,
                            CX_OP_LESS_EQUAL, CX_OP_GREATER,   CX_OP_GREATER_EQUAL};
    const double want[6][4] = {{0, 1, 0, 1}, {1, 0, 1, 0}, {1, 0, 0, 0},
                               {1, 1, 0, 1}, {0, 0, 1, 0}, {0, 1, 1, 1}};
    for (int ti = 0; ti < COUNT(all_types); ti++)
        for (int oi = 0; oi < 6; oi++) check2(ops[oi], all_types[ti], 4, a, b, CX_U8, want[oi], 0);
}

static void test_compare_nan(void **state) {
    (void)state;
    const double x[] = {NAN, 1, NAN, -0.0, INFINITY}, y[] = {NAN, NAN, 1, 0, INFINITY};
    const cx_op_id ops[] = {CX_OP_EQUAL,      CX_OP_NOT_EQUAL, CX_OP_LESS,
                            CX_OP_LESS_EQUAL, CX_OP_GREATER,   CX_OP_GREATER_EQUAL};
    const double want[6][5] = {{0, 0, 0, 1, 1}, {1, 1, 1, 0, 0}, {0, 0, 0, 0, 0},
                               {0, 0, 0, 1, 1}, {0, 0, 0, 0, 0}, {0, 0, 0, 1, 1}};
    for (int ti = 0; ti < COUNT(float_types); ti++)
        for (int oi = 0; oi < 6; oi++)
            check2(ops[oi], float_types[ti], 5, x, y, CX_U8, want[oi], 0);
    /* Mixed types compare in the merged type. */
    cx_tensor *a = tu_vec(CX_S32, 2, TU_VALUES(1, 2)), *b = tu_vec(CX_F32, 2, TU_VALUES(1.5, 2));
    cx_tensor *r = op2(CX_OP_LESS, a, b);
    expect_vec(r, CX_U8, 2, TU_VALUES(1, 0), 0);
    drop_all((cx_tensor *[]){a, b, r}, 3);
}

static void test_logical_every_type(void **state) {
    (void)state;
    const double a[] = {0, 0, 1, 3}, b[] = {0, 2, 0, 1};
    for (int ti = 0; ti < COUNT(all_types); ti++) {
        cx_dtype t = all_types[ti];
        check1(CX_OP_LOGICAL_NOT, t, 4, a, CX_U8, TU_VALUES(1, 1, 0, 0), 0);
        check2(CX_OP_LOGICAL_AND, t, 4, a, b, CX_U8, TU_VALUES(0, 0, 0, 1), 0);
        check2(CX_OP_LOGICAL_OR, t, 4, a, b, CX_U8, TU_VALUES(0, 1, 1, 1), 0);
        check2(CX_OP_LOGICAL_XOR, t, 4, a, b, CX_U8, TU_VALUES(0, 1, 1, 0), 0);
    }
    /* NaN is true, -0.0 false. */
    for (int ti = 0; ti < COUNT(float_types); ti++) {
        cx_dtype t = float_types[ti];
        check1(CX_OP_LOGICAL_NOT, t, 3, TU_VALUES(NAN, -0.0, -2), CX_U8, TU_VALUES(0, 1, 0), 0);
        check2(CX_OP_LOGICAL_AND, t, 2, TU_VALUES(NAN, -0.0), TU_VALUES(1, 1), CX_U8,
               TU_VALUES(1, 0), 0);
    }
    check2(CX_OP_LOGICAL_XOR, CX_S32, 2, TU_VALUES(-1, INT32_MIN), TU_VALUES(0, 5), CX_U8,
           TU_VALUES(1, 0), 0);
}

/* ---- select and clip ---- */

static void test_select_pred_types(void **state) {
    (void)state;
    for (int pi = 0; pi < COUNT(all_types); pi++) {
        cx_dtype pt = all_types[pi];
        for (int vi = 0; vi < COUNT(all_types); vi++) {
            cx_dtype vt = all_types[vi];
            cx_tensor *p = tu_vec(pt, 4, TU_VALUES(0, 1, 2, 0));
            cx_tensor *t = tu_vec(vt, 4, TU_VALUES(10, 11, 12, 13));
            cx_tensor *f = tu_vec(vt, 4, TU_VALUES(20, 21, 22, 23));
            cx_tensor *r = op3(CX_OP_SELECT, p, t, f);
            expect_vec(r, vt, 4, TU_VALUES(20, 11, 12, 23), 0);
            drop_all((cx_tensor *[]){p, t, f, r}, 4);
        }
    }
    for (int ti = 0; ti < COUNT(float_types); ti++) {
        cx_tensor *p = tu_vec(float_types[ti], 4, TU_VALUES(NAN, -0.0, 0.5, 0));
        cx_tensor *t = tu_vec(CX_S32, 4, TU_VALUES(1, 2, 3, 4));
        cx_tensor *f = tu_vec(CX_S32, 1, TU_VALUES(-1));
        cx_tensor *r = op3(CX_OP_SELECT, p, t, f);
        expect_vec(r, CX_S32, 4, TU_VALUES(1, -1, 3, -1), 0);
        drop_all((cx_tensor *[]){p, t, f, r}, 4);
    }
}

static void test_select_broadcast_and_mixed(void **state) {
    (void)state;
    /* {2,1} pred, {3} on_true, scalar on_false. */
    cx_tensor *p = tu_tensor(CX_U8, 2, TU_SHAPE(2, 1), TU_VALUES(1, 0));
    cx_tensor *t = tu_vec(CX_F32, 3, TU_VALUES(1, 2, 3));
    cx_tensor *f = tu_tensor(CX_F32, 0, NULL, TU_VALUES(-1));
    cx_tensor *r = op3(CX_OP_SELECT, p, t, f);
    tu_expect(r, CX_F32, 2, TU_SHAPE(2, 3), TU_VALUES(1, 2, 3, -1, -1, -1), 0);
    /* A scalar predicate picks a whole branch; s32 and f16 branches merge to f16. */
    cx_tensor *ps = tu_tensor(CX_S64, 0, NULL, TU_VALUES(0));
    cx_tensor *ti = tu_vec(CX_S32, 3, TU_VALUES(1, 2, 3)),
              *fh = tu_vec(CX_F16, 3, TU_VALUES(0.5, 1.5, 2.5));
    cx_tensor *r2 = op3(CX_OP_SELECT, ps, ti, fh);
    expect_vec(r2, CX_F16, 3, TU_VALUES(0.5, 1.5, 2.5), 0);
    /* Extreme s64 values pass through unchanged. */
    const int64_t big[] = {INT64_MIN, INT64_MAX};
    cx_tensor *pb = tu_vec(CX_BF16, 2, TU_VALUES(1, 0)), *tb = tu_raw(CX_S64, 2, big);
    cx_tensor *fb = tu_raw(CX_S64, 2, (const int64_t[]){7, INT64_MAX - 1});
    cx_tensor *r3 = op3(CX_OP_SELECT, pb, tb, fb);
    expect_s64(r3, 2, (const int64_t[]){INT64_MIN, INT64_MAX - 1});
    drop_all((cx_tensor *[]){p, t, f, r, ps, ti, fh, r2, pb, tb, fb, r3}, 12);
}

static void test_clip(void **state) {
    (void)state;
    for (int ti = 0; ti < COUNT(all_types); ti++) {
        cx_dtype t = all_types[ti];
        cx_tensor *x = tu_vec(t, 5, TU_VALUES(0, 1, 5, 9, 200));
        cx_tensor *lo = tu_tensor(t, 0, NULL, TU_VALUES(2)),
                  *hi = tu_tensor(t, 0, NULL, TU_VALUES(8));
        cx_tensor *r = op3(CX_OP_CLIP, x, lo, hi);
        expect_vec(r, t, 5, TU_VALUES(2, 2, 5, 8, 8), 0);
        drop_all((cx_tensor *[]){x, lo, hi, r}, 4);
    }
    for (int ti = 0; ti < COUNT(float_types); ti++) {
        cx_dtype t = float_types[ti];
        cx_tensor *x = tu_tensor(t, 2, TU_SHAPE(2, 3), TU_VALUES(-2, 0.5, 5, NAN, -INFINITY, 1));
        cx_tensor *lo = tu_vec(t, 3, TU_VALUES(-1, 0, 1)),
                  *hi = tu_tensor(t, 2, TU_SHAPE(2, 1), TU_VALUES(3, 0.75));
        cx_tensor *r = op3(CX_OP_CLIP, x, lo, hi);
        tu_expect(r, t, 2, TU_SHAPE(2, 3), TU_VALUES(-1, 0.5, 3, NAN, 0, 0.75), 0);
        drop_all((cx_tensor *[]){x, lo, hi, r}, 4);
    }
    /* An s32 tensor clipped by f32 bounds is computed in f32. */
    cx_tensor *x = tu_vec(CX_S32, 3, TU_VALUES(-5, 0, 5));
    cx_tensor *lo = tu_tensor(CX_F32, 0, NULL, TU_VALUES(-1.5)),
              *hi = tu_tensor(CX_S32, 0, NULL, TU_VALUES(3));
    cx_tensor *r = op3(CX_OP_CLIP, x, lo, hi);
    expect_vec(r, CX_F32, 3, TU_VALUES(-1.5, 0, 3), 0);
    drop_all((cx_tensor *[]){x, lo, hi, r}, 4);
}

/* ---- broadcasting and type promotion ---- */

static void test_broadcast_shapes(void **state) {
    (void)state;
    cx_tensor *a = tu_tensor(CX_S32, 2, TU_SHAPE(2, 1), TU_VALUES(10, 20));
    cx_tensor *b = tu_vec(CX_S32, 3, TU_VALUES(1, 2, 3));
    cx_tensor *r = op2(CX_OP_ADD, a, b), *r2 = op2(CX_OP_SUBTRACT, b, a);
    tu_expect(r, CX_S32, 2, TU_SHAPE(2, 3), TU_VALUES(11, 12, 13, 21, 22, 23), 0);
    tu_expect(r2, CX_S32, 2, TU_SHAPE(2, 3), TU_VALUES(-9, -8, -7, -19, -18, -17), 0);

    cx_tensor *s = tu_tensor(CX_F64, 0, NULL, TU_VALUES(0.5));
    cx_tensor *m = tu_tensor(CX_F64, 2, TU_SHAPE(2, 2), TU_VALUES(1, 2, 3, 4));
    cx_tensor *r3 = op2(CX_OP_MULTIPLY, s, m), *r4 = op2(CX_OP_POW, m, s);
    tu_expect(r3, CX_F64, 2, TU_SHAPE(2, 2), TU_VALUES(0.5, 1, 1.5, 2), 0);
    tu_expect(r4, CX_F64, 2, TU_SHAPE(2, 2), TU_VALUES(1, sqrt(2), sqrt(3), 2), 1e-15);

    cx_tensor *z1 = tu_tensor(CX_F16, 0, NULL, TU_VALUES(1.5));
    cx_tensor *z2 = tu_tensor(CX_F16, 0, NULL, TU_VALUES(2.25));
    cx_tensor *r5 = op2(CX_OP_ADD, z1, z2), *r6 = op2(CX_OP_GREATER, z1, z2);
    tu_expect(r5, CX_F16, 0, NULL, TU_VALUES(3.75), 0);
    tu_expect(r6, CX_U8, 0, NULL, TU_VALUES(0), 0);

    /* Size-1 axes on both sides: {3,1,2} with {1,4,1}. */
    cx_tensor *c = tu_tensor(CX_U8, 3, TU_SHAPE(3, 1, 2), TU_VALUES(0, 1, 10, 11, 20, 21));
    cx_tensor *d = tu_tensor(CX_U8, 3, TU_SHAPE(1, 4, 1), TU_VALUES(0, 100, 200, 50));
    cx_tensor *r7 = op2(CX_OP_ADD, c, d);
    double want[24];
    for (int i = 0; i < 3; i++)
        for (int j = 0; j < 4; j++)
            for (int k = 0; k < 2; k++)
                want[(i * 4 + j) * 2 + k] =
                    repr(CX_U8, (i * 10 + k) + (double[]){0, 100, 200, 50}[j]);
    tu_expect(r7, CX_U8, 3, TU_SHAPE(3, 4, 2), want, 0);
    drop_all((cx_tensor *[]){a, b, r, r2, s, m, r3, r4, z1, z2, r5, r6, c, d, r7}, 15);
}

static void test_mixed_types(void **state) {
    (void)state;
    struct {
        cx_dtype a, b, out;
    } cases[] = {
        {CX_S32, CX_F32, CX_F32},  {CX_U8, CX_S32, CX_S32}, {CX_F16, CX_BF16, CX_F32},
        {CX_S64, CX_F16, CX_F16},  {CX_U8, CX_F64, CX_F64}, {CX_U8, CX_S64, CX_S64},
        {CX_BF16, CX_F64, CX_F64},
    };
    for (int k = 0; k < COUNT(cases); k++) {
        cx_tensor *a = tu_vec(cases[k].a, 3, TU_VALUES(1, 2, 3));
        cx_tensor *b = tu_tensor(cases[k].b, 2, TU_SHAPE(2, 1), TU_VALUES(10, 20));
        cx_tensor *r = op2(CX_OP_ADD, a, b);
        tu_expect(r, cases[k].out, 2, TU_SHAPE(2, 3), TU_VALUES(11, 12, 13, 21, 22, 23), 0);
        drop_all((cx_tensor *[]){a, b, r}, 3);
    }
}

/* The input element that flat output index i reads. */
static int64_t source_index(const int64_t *out, int rank, const int64_t *in, int in_rank,
                            int64_t i) {
    int64_t idx = 0, stride = 1;
    for (int k = rank - 1; k >= 0; k--) {
        int64_t c = i % out[k];
        i /= out[k];
        int kj = k - (rank - in_rank);
        if (kj < 0) continue;
        if (in[kj] != 1) idx += c * stride;
        stride *= in[kj];
    }
    return idx;
}

/* The odometer path against a naive loop, for every correctly rounded op (so that f16's f32
 * computation rounded once matches the exact result rounded once). */
static void check_general_path(cx_dtype t, int ra, const int64_t *sa, int rb, const int64_t *sb) {
    const cx_op_id ops[] = {CX_OP_ADD, CX_OP_SUBTRACT, CX_OP_MULTIPLY, CX_OP_DIVIDE,
                            CX_OP_MAX, CX_OP_MIN,      CX_OP_LESS,     CX_OP_EQUAL};
    int64_t na = 1, nb = 1;
    for (int k = 0; k < ra; k++) na *= sa[k];
    for (int k = 0; k < rb; k++) nb *= sb[k];
    /* Fractions for floats; integers never see a zero divisor either way. */
    double va[64], vb[64], scale = cx_dtype_is_float(t) ? 0.375 : 1;
    for (int64_t i = 0; i < na; i++) va[i] = (double)((i * 37) % 23 - 11) * scale;
    for (int64_t i = 0; i < nb; i++) vb[i] = (double)((i * 5) % 7) + scale - (i % 2) * 4;
    cx_tensor *a = tu_tensor(t, ra, sa, va), *b = tu_tensor(t, rb, sb, vb);
    for (int oi = 0; oi < COUNT(ops); oi++) {
        cx_tensor *r = op2(ops[oi], a, b);
        cx_dtype rt = ops[oi] == CX_OP_LESS || ops[oi] == CX_OP_EQUAL ? CX_U8
                      : ops[oi] == CX_OP_DIVIDE                       ? cx_dtype_to_float(t)
                                                                      : t;
        assert_int_equal(r->desc.dtype, rt);
        double want[256];
        assert_true(r->numel <= 256);
        for (int64_t i = 0; i < r->numel; i++) {
            double x = repr(t, va[source_index(r->desc.shape, r->desc.rank, sa, ra, i)]);
            double y = repr(t, vb[source_index(r->desc.shape, r->desc.rank, sb, rb, i)]);
            want[i] = repr(rt, ref_binary(ops[oi], x, y));
        }
        tu_expect(r, rt, r->desc.rank, r->desc.shape, want, 0);
        tu_drop(r);
    }
    drop_all((cx_tensor *[]){a, b}, 2);
}

static void test_general_path_matches_reference(void **state) {
    (void)state;
    const cx_dtype types[] = {CX_F32, CX_F16};
    for (int k = 0; k < 2; k++) {
        check_general_path(types[k], 3, TU_SHAPE(2, 3, 4), 2, TU_SHAPE(3, 1));
        check_general_path(types[k], 2, TU_SHAPE(3, 1), 3, TU_SHAPE(2, 3, 4));
        check_general_path(types[k], 3, TU_SHAPE(4, 1, 5), 3, TU_SHAPE(1, 3, 1));
        check_general_path(types[k], 3, TU_SHAPE(1, 3, 1), 3, TU_SHAPE(4, 1, 5));
    }
    check_general_path(CX_BF16, 3, TU_SHAPE(4, 1, 5), 3, TU_SHAPE(1, 3, 1));
    check_general_path(CX_F64, 3, TU_SHAPE(2, 3, 4), 1, TU_SHAPE(4));
    check_general_path(CX_S32, 3, TU_SHAPE(2, 1, 4), 2, TU_SHAPE(3, 1));
}

/* Three broadcast inputs through select, against a naive loop. */
static void test_select_general_path(void **state) {
    (void)state;
    const int64_t sp[] = {4, 1, 5}, st[] = {1, 3, 1}, sf[] = {5}, so[] = {4, 3, 5};
    double vp[20], vt[3] = {1.5, -2, 3}, vf[5] = {10, 20, 30, 40, 50};
    for (int i = 0; i < 20; i++) vp[i] = i % 3 == 0;
    cx_tensor *p = tu_tensor(CX_F32, 3, sp, vp), *t = tu_tensor(CX_F16, 3, st, vt);
    cx_tensor *f = tu_tensor(CX_F16, 1, sf, vf);
    cx_tensor *r = op3(CX_OP_SELECT, p, t, f);
    double want[60];
    for (int64_t i = 0; i < 60; i++)
        want[i] = vp[source_index(so, 3, sp, 3, i)] ? vt[source_index(so, 3, st, 3, i)]
                                                    : vf[source_index(so, 3, sf, 1, i)];
    tu_expect(r, CX_F16, 3, so, want, 0);
    drop_all((cx_tensor *[]){p, t, f, r}, 4);
}

/* Runs longer than a chunk, with and without broadcasting, in f16 and bf16. */
static void test_long_half_runs(void **state) {
    (void)state;
    enum { R = 3, C = 700 };
    static double va[R * C], vb[C], want[R * C];
    for (int i = 0; i < R * C; i++) va[i] = (double)(i % 97) * 0.125 - 6;
    for (int i = 0; i < C; i++) vb[i] = (double)(i % 13) - 6;
    const cx_dtype types[] = {CX_F16, CX_BF16};
    for (int k = 0; k < 2; k++) {
        cx_dtype t = types[k];
        cx_tensor *a = tu_tensor(t, 2, TU_SHAPE(R, C), va), *b = tu_vec(t, C, vb);
        cx_tensor *a2 = tu_vec(t, R * C, va);
        cx_tensor *r = op2(CX_OP_MULTIPLY, a, b), *r2 = op2(CX_OP_ADD, a2, a2);
        for (int i = 0; i < R * C; i++) want[i] = repr(t, repr(t, va[i]) * repr(t, vb[i % C]));
        tu_expect(r, t, 2, TU_SHAPE(R, C), want, 0);
        for (int i = 0; i < R * C; i++) want[i] = repr(t, 2 * repr(t, va[i]));
        expect_vec(r2, t, R * C, want, 0);
        cx_tensor *q = tu_tensor(t, 0, NULL, TU_VALUES(0.25)), *sel = op3(CX_OP_SELECT, b, a, q);
        for (int i = 0; i < R * C; i++) want[i] = vb[i % C] != 0 ? repr(t, va[i]) : 0.25;
        tu_expect(sel, t, 2, TU_SHAPE(R, C), want, 0);
        drop_all((cx_tensor *[]){a, b, a2, r, r2, q, sel}, 7);
    }
}

/* ---- as_type ---- */

/* Values every type holds exactly survive every conversion. */
static void test_cast_matrix(void **state) {
    (void)state;
    const double v[] = {0, 1, 2, 7, 100, 255};
    for (int si = 0; si < COUNT(all_types); si++)
        for (int di = 0; di < COUNT(all_types); di++) {
            cx_tensor *x = tu_vec(all_types[si], 6, v), *r = as_type(x, all_types[di]);
            expect_vec(r, all_types[di], 6, v, 0);
            drop_all((cx_tensor *[]){x, r}, 2);
        }
    /* Negative and fractional values between the signed and float types. */
    const cx_dtype signed_types[] = {CX_F16, CX_BF16, CX_F32, CX_F64, CX_S32, CX_S64};
    for (int si = 0; si < 6; si++)
        for (int di = 0; di < 6; di++) {
            cx_dtype s = signed_types[si], d = signed_types[di];
            bool fs = cx_dtype_is_float(s), fd = cx_dtype_is_float(d);
            const double in[] = {-3, -1.5, 2.75, -0.0};
            double want[4];
            for (int i = 0; i < 4; i++) {
                double x = fs ? in[i] : trunc(in[i]);
                want[i] = fd ? x : trunc(x);
            }
            cx_tensor *x = tu_vec(s, 4, in), *r = as_type(x, d);
            expect_vec(r, d, 4, want, 0);
            drop_all((cx_tensor *[]){x, r}, 2);
        }
}

static void cast_bits(cx_dtype from, int64_t n, const double *v, cx_dtype to,
                      const uint16_t *want) {
    cx_tensor *x = tu_vec(from, n, v), *r = as_type(x, to);
    expect_bits16(r, to, n, want);
    drop_all((cx_tensor *[]){x, r}, 2);
}

static void test_cast_half_rounding(void **state) {
    (void)state;
    const double tiny = 0x1p-20;
    /* f16 has 10 fraction bits: ties between 1 and 1+2^-10 go to even. */
    const double f16_in[] = {1 + 0x1p-11,
                             1 + 0x1p-11 + tiny,
                             1.0009765625 + tiny,
                             1 + 3 * 0x1p-11,
                             65519.0,
                             65520.0,
                             -65520.0,
                             0x1p-24,
                             0x1p-25,
                             0x1p-25 + 0x1p-35,
                             NAN,
                             -INFINITY};
    const uint16_t f16_want[] = {0x3c00, 0x3c01, 0x3c01, 0x3c02, 0x7bff, 0x7c00,
                                 0xfc00, 0x0001, 0x0000, 0x0001, 0x7e00, 0xfc00};
    cast_bits(CX_F32, 12, f16_in, CX_F16, f16_want);
    cast_bits(CX_F64, 12, f16_in, CX_F16, f16_want);
    /* bf16 has 7: 1 + 2^-8 is a tie that goes down, 1 + 3*2^-8 one that goes up. */
    const double bf16_in[] = {1.00390625, 1.00390625 + tiny, 1.01171875, 3.4e38, NAN, -0.0};
    const uint16_t bf16_want[] = {0x3f80, 0x3f81, 0x3f82, 0x7f80, 0x7fc0, 0x8000};
    cast_bits(CX_F32, 6, bf16_in, CX_BF16, bf16_want);
    cast_bits(CX_F64, 6, bf16_in, CX_BF16, bf16_want);
    /* f64 rounds once: via f32 these would land on the tie and round to even. */
    cast_bits(CX_F64, 1, TU_VALUES(1 + 0x1p-11 + 0x1p-40), CX_F16, (const uint16_t[]){0x3c01});
    cast_bits(CX_F64, 1, TU_VALUES(1 + 0x1p-8 + 0x1p-40), CX_BF16, (const uint16_t[]){0x3f81});
    /* Integers: 2049 and 257 are ties. */
    cast_bits(CX_S32, 4, TU_VALUES(2049, 2051, -2049, 70000), CX_F16,
              (const uint16_t[]){0x6800, 0x6802, 0xe800, 0x7c00});
    cast_bits(CX_S32, 3, TU_VALUES(257, 259, -257), CX_BF16,
              (const uint16_t[]){0x4380, 0x4382, 0xc380});
    cast_bits(CX_U8, 2, TU_VALUES(255, 0), CX_BF16, (const uint16_t[]){0x437f, 0x0000});
    /* Between the halves: f16 1+2^-10 is below half a bf16 step; 65504 rounds up to 2^16. */
    cast_bits(CX_F16, 3, TU_VALUES(1.0009765625, 65504, -2), CX_BF16,
              (const uint16_t[]){0x3f80, 0x4780, 0xc000});
    cast_bits(CX_BF16, 3, TU_VALUES(1.5, 1e6, 0x1p-30), CX_F16,
              (const uint16_t[]){0x3e00, 0x7c00, 0x0000});

    /* s64 beyond 2^53 still rounds once: 2^60 + 2^52 + 1 is just above a bf16 tie. */
    const int64_t big[] = {(INT64_C(1) << 60) + (INT64_C(1) << 52) + 1,
                           -((INT64_C(1) << 60) + (INT64_C(1) << 52) + 1),
                           (INT64_C(1) << 60) + (INT64_C(1) << 52), INT64_MAX, INT64_MIN};
    cx_tensor *x = tu_raw(CX_S64, 5, big);
    cx_tensor *rb = as_type(x, CX_BF16), *rh = as_type(x, CX_F16);
    expect_bits16(rb, CX_BF16, 5, (const uint16_t[]){0x5d81, 0xdd81, 0x5d80, 0x5f00, 0xdf00});
    expect_bits16(rh, CX_F16, 5, (const uint16_t[]){0x7c00, 0xfc00, 0x7c00, 0x7c00, 0xfc00});
    drop_all((cx_tensor *[]){x, rb, rh}, 3);
}

static void test_cast_saturation(void **state) {
    (void)state;
    /* Values every float type holds well enough to keep their integer part. */
    const double v[] = {NAN, INFINITY, -INFINITY, 2.9, -2.9, 0.9, -0.9, 300, -5};
    for (int ti = 0; ti < COUNT(float_types); ti++) {
        cx_tensor *x = tu_vec(float_types[ti], 9, v);
        cx_tensor *r32 = as_type(x, CX_S32), *r64 = as_type(x, CX_S64), *r8 = as_type(x, CX_U8);
        expect_vec(r32, CX_S32, 9, TU_VALUES(0, INT32_MAX, INT32_MIN, 2, -2, 0, 0, 300, -5), 0);
        expect_s64(r64, 9, (const int64_t[]){0, INT64_MAX, INT64_MIN, 2, -2, 0, 0, 300, -5});
        expect_vec(r8, CX_U8, 9, TU_VALUES(0, 255, 0, 2, 0, 0, 0, 255, 0), 0);
        drop_all((cx_tensor *[]){x, r32, r64, r8}, 4);
    }
    /* Finite values beyond the target range, and the largest ones inside it. */
    cx_tensor *f = tu_vec(CX_F32, 6, TU_VALUES(1e10, -1e10, 2147483520.0, 0x1p31, 0x1p63, -0x1p63));
    cx_tensor *f32 = as_type(f, CX_S32), *f64 = as_type(f, CX_S64);
    expect_vec(f32, CX_S32, 6,
               TU_VALUES(INT32_MAX, INT32_MIN, 2147483520.0, INT32_MAX, INT32_MAX, INT32_MIN), 0);
    expect_s64(f64, 6,
               (const int64_t[]){INT64_C(10000000000), INT64_C(-10000000000), 2147483520,
                                 INT64_C(1) << 31, INT64_MAX, INT64_MIN});
    cx_tensor *d =
        tu_vec(CX_F64, 7,
               TU_VALUES(2147483647.9, -2147483648.9, 1e19, -1e19, 0x1p63 - 1024, 255.9, 0x1p63));
    cx_tensor *d32 = as_type(d, CX_S32), *d64 = as_type(d, CX_S64), *d8 = as_type(d, CX_U8);
    expect_vec(d32, CX_S32, 7,
               TU_VALUES(INT32_MAX, INT32_MIN, INT32_MAX, INT32_MIN, INT32_MAX, 255, INT32_MAX), 0);
    expect_s64(d64, 7,
               (const int64_t[]){2147483647, -INT64_C(2147483648), INT64_MAX, INT64_MIN,
                                 INT64_MAX - 1023, 255, INT64_MAX});
    expect_vec(d8, CX_U8, 7, TU_VALUES(255, 0, 255, 0, 255, 255, 255), 0);
    cx_tensor *b = tu_vec(CX_BF16, 3, TU_VALUES(3e38, -3e38, 1e10)), *b64 = as_type(b, CX_S64);
    expect_s64(b64, 3, (const int64_t[]){INT64_MAX, INT64_MIN, (int64_t)repr(CX_BF16, 1e10)});
    cx_tensor *h = tu_vec(CX_F16, 2, TU_VALUES(65504, -65504)), *h32 = as_type(h, CX_S32);
    expect_vec(h32, CX_S32, 2, TU_VALUES(65504, -65504), 0);
    drop_all((cx_tensor *[]){f, f32, f64, d, d32, d64, d8, b, b64, h, h32}, 11);
}

static void test_cast_integer_wrap(void **state) {
    (void)state;
    const int64_t v[] = {(INT64_C(1) << 32) + 5, -1, INT64_C(1) << 31, INT64_MIN, 300};
    cx_tensor *x = tu_raw(CX_S64, 5, v);
    cx_tensor *r32 = as_type(x, CX_S32), *r8 = as_type(x, CX_U8);
    cx_tensor *rf = as_type(x, CX_F64), *rs = as_type(x, CX_F32);
    expect_vec(r32, CX_S32, 5, TU_VALUES(5, -1, INT32_MIN, 0, 300), 0);
    expect_vec(r8, CX_U8, 5, TU_VALUES(5, 255, 0, 0, 44), 0);
    expect_vec(rf, CX_F64, 5, TU_VALUES(0x1p32 + 5, -1, 0x1p31, -0x1p63, 300), 0);
    expect_vec(rs, CX_F32, 5, TU_VALUES(0x1p32, -1, 0x1p31, -0x1p63, 300), 0);
    cx_tensor *s = tu_vec(CX_S32, 4, TU_VALUES(-1, 256, 300, INT32_MIN));
    cx_tensor *s8 = as_type(s, CX_U8), *s64 = as_type(s, CX_S64);
    expect_vec(s8, CX_U8, 4, TU_VALUES(255, 0, 44, 0), 0);
    expect_s64(s64, 4, (const int64_t[]){-1, 256, 300, INT32_MIN});
    cx_tensor *u = tu_vec(CX_U8, 2, TU_VALUES(255, 128)), *u32 = as_type(u, CX_S32);
    expect_vec(u32, CX_S32, 2, TU_VALUES(255, 128), 0);
    const int64_t odd[] = {(INT64_C(1) << 53) + 1};
    cx_tensor *o = tu_raw(CX_S64, 1, odd), *of = as_type(o, CX_F64);
    expect_vec(of, CX_F64, 1, TU_VALUES(0x1p53), 0);
    drop_all((cx_tensor *[]){x, r32, r8, rf, rs, s, s8, s64, u, u32, o, of}, 12);
}

/* s8, s16, u16, u32 and u64: floats saturate, integers wrap, u64 above 2^63 converts as unsigned
 * (rounding once into f16 and bf16). */
static void test_cast_narrow_and_unsigned(void **state) {
    (void)state;
    const double v[] = {NAN, INFINITY, -INFINITY, 2.9, -2.9, 300, -5, 1e10};
    cx_tensor *f = tu_vec(CX_F64, 8, v);
    cx_tensor *r[] = {as_type(f, CX_S8), as_type(f, CX_S16), as_type(f, CX_U16), as_type(f, CX_U32),
                      as_type(f, CX_U64)};
    expect_vec(r[0], CX_S8, 8, TU_VALUES(0, 127, -128, 2, -2, 127, -5, 127), 0);
    expect_vec(r[1], CX_S16, 8, TU_VALUES(0, 32767, -32768, 2, -2, 300, -5, 32767), 0);
    expect_vec(r[2], CX_U16, 8, TU_VALUES(0, 65535, 0, 2, 0, 300, 0, 65535), 0);
    expect_vec(r[3], CX_U32, 8, TU_VALUES(0, UINT32_MAX, 0, 2, 0, 300, 0, UINT32_MAX), 0);
    const uint64_t *u = r[4]->data;
    assert_true(u[0] == 0 && u[1] == UINT64_MAX && u[2] == 0 && u[3] == 2 && u[7] == 10000000000u);
    drop_all((cx_tensor *[]){f, r[0], r[1], r[2], r[3], r[4]}, 6);

    const int64_t w[] = {(INT64_C(1) << 32) + 5, -1, 300, 70000};
    cx_tensor *x = tu_raw(CX_S64, 4, w);
    cx_tensor *q[] = {as_type(x, CX_S8), as_type(x, CX_S16), as_type(x, CX_U16), as_type(x, CX_U32),
                      as_type(x, CX_U64)};
    expect_vec(q[0], CX_S8, 4, TU_VALUES(5, -1, 44, 112), 0);
    expect_vec(q[1], CX_S16, 4, TU_VALUES(5, -1, 300, 4464), 0);
    expect_vec(q[2], CX_U16, 4, TU_VALUES(5, 65535, 300, 4464), 0);
    expect_vec(q[3], CX_U32, 4, TU_VALUES(5, UINT32_MAX, 300, 70000), 0);
    assert_true(((const uint64_t *)q[4]->data)[1] == UINT64_MAX);
    drop_all((cx_tensor *[]){x, q[0], q[1], q[2], q[3], q[4]}, 6);

    /* u64 from 2^63 up: 2^63 + 2^55 is a bf16 tie (to even), one more is above it */
    const uint64_t big[] = {UINT64_MAX, (UINT64_C(1) << 63) + (UINT64_C(1) << 55),
                            (UINT64_C(1) << 63) + (UINT64_C(1) << 55) + 1};
    cx_tensor *b = tu_raw(CX_U64, 3, (const int64_t *)big);
    cx_tensor *bb = as_type(b, CX_BF16), *bh = as_type(b, CX_F16), *bd = as_type(b, CX_F64);
    cx_tensor *bs = as_type(b, CX_S64), *b8 = as_type(b, CX_S8);
    expect_bits16(bb, CX_BF16, 3, (const uint16_t[]){0x5f80, 0x5f00, 0x5f01});
    expect_bits16(bh, CX_F16, 3, (const uint16_t[]){0x7c00, 0x7c00, 0x7c00});
    expect_vec(bd, CX_F64, 3, TU_VALUES(0x1p64, 0x1p63 + 0x1p55, 0x1p63 + 0x1p55), 0);
    expect_s64(
        bs, 3,
        (const int64_t[]){-1, INT64_MIN + (INT64_C(1) << 55), INT64_MIN + (INT64_C(1) << 55) + 1});
    expect_vec(b8, CX_S8, 3, TU_VALUES(-1, 0, 1), 0);
    drop_all((cx_tensor *[]){b, bb, bh, bd, bs, b8}, 6);
}

/* Shifts by counts of the width or more, and u64 counts above 2^63 (which must not turn into
 * negative counts); quotient and remainder at the signed minimum; u64 max and min. */
static void test_narrow_and_unsigned_integer_ops(void **state) {
    (void)state;
    const uint64_t xs[] = {1, UINT64_MAX, 6}, ys[] = {UINT64_MAX, 3, (UINT64_C(1) << 63) + 1};
    cx_tensor *x = tu_raw(CX_U64, 3, (const int64_t *)xs),
              *y = tu_raw(CX_U64, 3, (const int64_t *)ys);
    cx_tensor *l = op2(CX_OP_LEFT_SHIFT, x, y), *r = op2(CX_OP_RIGHT_SHIFT, x, y);
    cx_tensor *mx = op2(CX_OP_MAX, x, y), *lt = op2(CX_OP_LESS, x, y);
    const uint64_t *lv = l->data, *rv = r->data, *mv = mx->data;
    assert_true(lv[0] == 0 && lv[1] == UINT64_MAX << 3 && lv[2] == 0);
    assert_true(rv[0] == 0 && rv[1] == UINT64_MAX >> 3 && rv[2] == 0);
    assert_true(mv[0] == UINT64_MAX && mv[1] == UINT64_MAX && mv[2] == ys[2]);
    expect_vec(lt, CX_U8, 3, TU_VALUES(1, 0, 1), 0);
    drop_all((cx_tensor *[]){x, y, l, r, mx, lt}, 6);

    cx_tensor *a = tu_vec(CX_S8, 4, TU_VALUES(-128, -128, 7, -7));
    cx_tensor *b = tu_vec(CX_S8, 4, TU_VALUES(-1, 0, -2, 2));
    cx_tensor *qt = op2(CX_OP_QUOTIENT, a, b), *rm = op2(CX_OP_REMAINDER, a, b);
    cx_tensor *nine = tu_vec(CX_S8, 1, TU_VALUES(9)), *sh = op2(CX_OP_RIGHT_SHIFT, a, nine);
    cx_tensor *ng = op1(CX_OP_NEGATE, a), *ab = op1(CX_OP_ABS, a);
    cx_tensor *pc = op1(CX_OP_POPULATION_COUNT, a), *cz = op1(CX_OP_COUNT_LEADING_ZEROS, a);
    expect_vec(qt, CX_S8, 4, TU_VALUES(-128, 0, -3, -3), 0);
    expect_vec(rm, CX_S8, 4, TU_VALUES(0, 0, 1, -1), 0);
    expect_vec(sh, CX_S8, 4, TU_VALUES(-1, -1, 0, -1), 0);
    expect_vec(ng, CX_S8, 4, TU_VALUES(-128, -128, -7, 7), 0);
    expect_vec(ab, CX_S8, 4, TU_VALUES(-128, -128, 7, 7), 0);
    expect_vec(pc, CX_S8, 4, TU_VALUES(1, 1, 3, 6), 0);
    expect_vec(cz, CX_S8, 4, TU_VALUES(0, 0, 5, 0), 0);
    drop_all((cx_tensor *[]){a, b, qt, rm, nine, sh, ng, ab, pc, cz}, 10);

    cx_tensor *h = tu_vec(CX_U16, 3, TU_VALUES(65535, 300, 2));
    cx_tensor *k = tu_vec(CX_U16, 3, TU_VALUES(2, 300, 16));
    cx_tensor *mul = op2(CX_OP_MULTIPLY, h, k), *pw = op2(CX_OP_POW, h, k);
    cx_tensor *add = op2(CX_OP_ADD, h, k);
    expect_vec(mul, CX_U16, 3, TU_VALUES(65534, 24464, 32), 0);
    expect_vec(pw, CX_U16, 3, TU_VALUES(1, 0, 0), 0);
    expect_vec(add, CX_U16, 3, TU_VALUES(1, 600, 18), 0);
    drop_all((cx_tensor *[]){h, k, mul, pw, add}, 5);
}

/* ---- empty tensors and direct driver calls ---- */

static void test_empty_tensors(void **state) {
    (void)state;
    for (int ti = 0; ti < COUNT(all_types); ti++) {
        cx_dtype t = all_types[ti];
        cx_tensor *e = tu_vec(t, 0, NULL), *e23 = tu_tensor(t, 2, TU_SHAPE(0, 3), NULL);
        cx_tensor *row = tu_vec(t, 3, TU_VALUES(1, 2, 3)),
                  *one = tu_tensor(t, 2, TU_SHAPE(0, 1), NULL);
        cx_tensor *col = tu_tensor(t, 2, TU_SHAPE(1, 5), TU_VALUES(1, 2, 3, 4, 5));
        cx_tensor *rs[] = {
            op1(CX_OP_NEGATE, e),
            op1(CX_OP_EXP, e),
            op2(CX_OP_ADD, e, e),
            op2(CX_OP_MULTIPLY, e23, row),
            op2(CX_OP_LESS, row, e23),
            op2(CX_OP_SUBTRACT, one, col),
            op3(CX_OP_SELECT, e23, row, row),
            op3(CX_OP_CLIP, e23, row, row),
            as_type(e, CX_F16),
            as_type(e23, CX_S64),
            op1(CX_OP_LOGICAL_NOT, e),
        };
        for (int k = 0; k < COUNT(rs); k++) assert_int_equal(rs[k]->numel, 0);
        tu_expect(rs[3], t, 2, TU_SHAPE(0, 3), NULL, 0);
        tu_expect(rs[5], t, 2, TU_SHAPE(0, 5), NULL, 0);
        drop_all(rs, COUNT(rs));
        drop_all((cx_tensor *[]){e, e23, row, one, col}, 5);
    }
}

static void test_driver_rejects_bad_calls(void **state) {
    (void)state;
    cx_device *dev = tu_cpu();
    cx_tensor *a = tu_vec(CX_S32, 2, TU_VALUES(1, 2)), *f = tu_vec(CX_F32, 2, TU_VALUES(1, 2));
    cx_tensor *three = tu_vec(CX_S32, 3, TU_VALUES(1, 2, 3));
    cx_tensor out;
    cx_status st = {0};
    cx_params ps = {0};
    assert_int_equal(cx_tensor_init(&out, dev, &a->desc, &st), CX_OK);
    const cx_tensor *ints[] = {a, a}, *mixed[] = {a, f}, *wide[] = {a, three};
    assert_int_equal(dev->driver->execute(dev->ctx, CX_OP_DIVIDE, ints, 2, &ps, &out, &st),
                     CX_EUNSUPPORTED);
    assert_int_equal(dev->driver->execute(dev->ctx, CX_OP_EXP, ints, 1, &ps, &out, &st),
                     CX_EUNSUPPORTED);
    assert_int_equal(dev->driver->execute(dev->ctx, CX_OP_ADD, mixed, 2, &ps, &out, &st),
                     CX_EINVAL);
    assert_int_equal(dev->driver->execute(dev->ctx, CX_OP_ADD, ints, 1, &ps, &out, &st), CX_EINVAL);
    assert_int_equal(dev->driver->execute(dev->ctx, CX_OP_ADD, wide, 2, &ps, &out, &st), CX_EINVAL);
    assert_int_equal(dev->driver->execute(dev->ctx, CX_OP_LESS, ints, 2, &ps, &out, &st),
                     CX_EINVAL);
    cx_tensor_free(&out);
    drop_all((cx_tensor *[]){a, f, three}, 3);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_unary_float_ops),
        cmocka_unit_test(test_unary_float_specials),
        cmocka_unit_test(test_sigmoid_keeps_tiny_results),
        cmocka_unit_test(test_unary_float_on_integers),
        cmocka_unit_test(test_unary_integers),
        cmocka_unit_test(test_binary_every_type),
        cmocka_unit_test(test_divide_and_atan2),
        cmocka_unit_test(test_float_binary_specials),
        cmocka_unit_test(test_integer_edge_cases),
        cmocka_unit_test(test_compare_every_type),
        cmocka_unit_test(test_compare_nan),
        cmocka_unit_test(test_logical_every_type),
        cmocka_unit_test(test_select_pred_types),
        cmocka_unit_test(test_select_broadcast_and_mixed),
        cmocka_unit_test(test_clip),
        cmocka_unit_test(test_broadcast_shapes),
        cmocka_unit_test(test_mixed_types),
        cmocka_unit_test(test_general_path_matches_reference),
        cmocka_unit_test(test_select_general_path),
        cmocka_unit_test(test_long_half_runs),
        cmocka_unit_test(test_cast_matrix),
        cmocka_unit_test(test_cast_half_rounding),
        cmocka_unit_test(test_cast_saturation),
        cmocka_unit_test(test_cast_integer_wrap),
        cmocka_unit_test(test_cast_narrow_and_unsigned),
        cmocka_unit_test(test_narrow_and_unsigned_integer_ops),
        cmocka_unit_test(test_empty_tensors),
        cmocka_unit_test(test_driver_rejects_bad_calls),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
