/* The cpu driver's kernels for the functions Nx has beyond the common ones: the inverse and
 * hyperbolic trigonometric family, cbrt, erfc and erf_inv (computed in double, rounded once),
 * is_nan and is_infinity, and the integer bit ops -- bitwise and/or/xor/not, shifts with
 * Elixir's bsl/bsr rules, population_count, count_leading_zeros and quotient -- with their
 * edge cases, through the full dispatcher. */
#include "test_util.h"

#include "../drivers/cpu/cpu_kernels.h"

static const cx_dtype float_types[] = {CX_F16, CX_BF16, CX_F32, CX_F64};
#define COUNT(a) ((int)(sizeof(a) / sizeof((a)[0])))

static void check1(cx_op_id op, cx_dtype t, int64_t n, const double *x, cx_dtype out_t,
                   const double *want) {
    cx_tensor *a = tu_vec(t, n, x), *r = tu_run_ok(op, (cx_tensor *[]){a}, 1, NULL);
    tu_expect(r, out_t, 1, (const int64_t[]){n}, want, 0);
    tu_drop(a);
    tu_drop(r);
}

static void check2(cx_op_id op, cx_dtype t, int64_t n, const double *x, const double *y,
                   const double *want) {
    cx_tensor *a = tu_vec(t, n, x), *b = tu_vec(t, n, y);
    cx_tensor *r = tu_run_ok(op, (cx_tensor *[]){a, b}, 2, NULL);
    tu_expect(r, t, 1, (const int64_t[]){n}, want, 0);
    tu_drop(a);
    tu_drop(b);
    tu_drop(r);
}

static void check2_s64(cx_op_id op, int64_t n, const int64_t *x, const int64_t *y,
                       const int64_t *want) {
    cx_tensor *a = tu_raw(CX_S64, n, x), *b = tu_raw(CX_S64, n, y);
    cx_tensor *r = tu_run_ok(op, (cx_tensor *[]){a, b}, 2, NULL);
    assert_int_equal(r->desc.dtype, CX_S64);
    const int64_t *got = r->data;
    for (int64_t i = 0; i < n; i++)
        if (got[i] != want[i])
            fail_msg("%s element %lld: expected %lld, got %lld", cx_op_table[op].name, (long long)i,
                     (long long)want[i], (long long)got[i]);
    tu_drop(a);
    tu_drop(b);
    tu_drop(r);
}

/* ---- float functions ---- */

static double ref(cx_op_id op, double x) {
    switch (op) {
    case CX_OP_ERFC: return erfc(x);
    case CX_OP_TAN: return tan(x);
    case CX_OP_ASIN: return asin(x);
    case CX_OP_ACOS: return acos(x);
    case CX_OP_ATAN: return atan(x);
    case CX_OP_SINH: return sinh(x);
    case CX_OP_COSH: return cosh(x);
    case CX_OP_ASINH: return asinh(x);
    case CX_OP_ACOSH: return acosh(x);
    case CX_OP_ATANH: return atanh(x);
    case CX_OP_CBRT: return cbrt(x);
    default: fail_msg("no reference for %s", cx_op_table[op].name);
    }
    return 0;
}

/* v rounded into type t, as the kernels store it */
static double repr(cx_dtype t, double v) {
    switch (t) {
    case CX_F16: return cx_f16_to_f32(cx_f16_from_f32((float)v));
    case CX_BF16: return cx_bf16_to_f32(cx_bf16_from_f32((float)v));
    case CX_F32: return (float)v;
    default: return v;
    }
}

/* Every type computes in double and rounds once into f32 (f16/bf16: then into their own type),
 * so the result is exactly libm's double result rounded. */
static void test_more_math_is_libm_in_double(void **state) {
    (void)state;
    const cx_op_id ops[] = {CX_OP_ERFC,  CX_OP_TAN,   CX_OP_ASIN, CX_OP_ACOS,
                            CX_OP_ATAN,  CX_OP_SINH,  CX_OP_COSH, CX_OP_ASINH,
                            CX_OP_ACOSH, CX_OP_ATANH, CX_OP_CBRT};
    const double xs[] = {-27, -0.9, -0.5, -0.0, 0.0, 0.3, 0.75, 1.0, 2.5, 100, INFINITY, NAN};
    const int n = COUNT(xs);
    for (int ti = 0; ti < COUNT(float_types); ti++) {
        cx_dtype t = float_types[ti];
        for (int oi = 0; oi < COUNT(ops); oi++) {
            double want[COUNT(xs)];
            for (int i = 0; i < n; i++) {
                double x = repr(t, xs[i]);
                want[i] = repr(t, t == CX_F64 ? ref(ops[oi], x) : (float)ref(ops[oi], x));
            }
            check1(ops[oi], t, n, xs, t, want);
        }
    }
}

/* Integers become f32 first, as for every UNARY_FLOAT op. */
static void test_more_math_on_integers(void **state) {
    (void)state;
    check1(CX_OP_CBRT, CX_S32, 3, TU_VALUES(-8, 0, 27), CX_F32, TU_VALUES(-2, 0, 3));
    check1(CX_OP_ATANH, CX_U8, 2, TU_VALUES(0, 1), CX_F32, TU_VALUES(0, INFINITY));
}

/* erf(erf_inv(y)) gives y back to within a few ulp of y, and near 1 erfc gives 1 - |y| back as
 * closely as one ulp of x allows. */
static void test_erf_inv(void **state) {
    (void)state;
    for (int k = -2000; k <= 2000; k++) {
        double y = k / 2000.0 * (1 - 0x1p-20);
        double x = cx_erf_inv(y);
        if (fabs(y) <= 0.5) {
            double err = fabs(erf(x) - y);
            if (err > 4 * 0x1p-52 * fmax(fabs(y), 0x1p-1022))
                fail_msg("erf(erf_inv(%.17g)) = %.17g", y, erf(x));
        } else {
            double a = fabs(y), err = fabs(erfc(fabs(x)) - (1 - a));
            /* one ulp of x moves erfc(x) by 2 x^2 2^-52 of itself */
            if (err > (2 * x * x + 8) * 0x1p-52 * (1 - a))
                fail_msg("erfc(|erf_inv(%.17g)|) = %.17g, want %.17g", y, erfc(fabs(x)), 1 - a);
            assert_true((x > 0) == (y > 0));
        }
    }
    /* nearest to 1 below: erf_inv stays finite and right */
    double top = 1 - 0x1p-53, x = cx_erf_inv(top);
    assert_true(isfinite(x) && x > 5.8 && x < 6);
    assert_true(fabs(erfc(x) - 0x1p-53) <= (2 * x * x + 8) * 0x1p-52 * 0x1p-53);
    /* erf_inv(0.5) = 0.476936276204469873381418353643... */
    assert_true(fabs(cx_erf_inv(0.5) - 0.47693627620446987) <= 0x1p-53);

    for (int ti = 0; ti < COUNT(float_types); ti++) {
        cx_dtype t = float_types[ti];
        check1(CX_OP_ERF_INV, t, 7, TU_VALUES(0, -0.0, 1, -1, 1.5, -2, NAN), t,
               TU_VALUES(0, -0.0, INFINITY, -INFINITY, NAN, NAN, NAN));
        double want = repr(t, t == CX_F64 ? cx_erf_inv(0.5) : (float)cx_erf_inv(0.5));
        check1(CX_OP_ERF_INV, t, 1, TU_VALUES(0.5), t, (const double[]){want});
    }
    /* -0 keeps its sign */
    cx_tensor *a = tu_vec(CX_F64, 1, TU_VALUES(-0.0)), *r = tu_run_ok(CX_OP_ERF_INV, &a, 1, NULL);
    assert_true(signbit(*(const double *)r->data));
    tu_drop(a);
    tu_drop(r);
}

static void test_is_nan_is_infinity(void **state) {
    (void)state;
    for (int ti = 0; ti < COUNT(float_types); ti++) {
        cx_dtype t = float_types[ti];
        const double *x = TU_VALUES(1, NAN, INFINITY, -INFINITY, -0.0, -NAN);
        check1(CX_OP_IS_NAN, t, 6, x, CX_U8, TU_VALUES(0, 1, 0, 0, 0, 1));
        check1(CX_OP_IS_INFINITY, t, 6, x, CX_U8, TU_VALUES(0, 0, 1, 1, 0, 0));
    }
    const cx_dtype ints[] = {CX_U8, CX_S32, CX_S64};
    for (int k = 0; k < 3; k++) {
        check1(CX_OP_IS_NAN, ints[k], 3, TU_VALUES(0, 1, 100), CX_U8, TU_VALUES(0, 0, 0));
        check1(CX_OP_IS_INFINITY, ints[k], 3, TU_VALUES(0, 1, 100), CX_U8, TU_VALUES(0, 0, 0));
    }
}

/* ---- integer bits ---- */

static void test_bitwise(void **state) {
    (void)state;
    check2(CX_OP_BITWISE_AND, CX_S32, 3, TU_VALUES(12, -1, INT32_MIN), TU_VALUES(10, 77, -1),
           TU_VALUES(8, 77, INT32_MIN));
    check2(CX_OP_BITWISE_OR, CX_S32, 3, TU_VALUES(12, 0, INT32_MIN), TU_VALUES(10, -5, 1),
           TU_VALUES(14, -5, INT32_MIN + 1));
    check2(CX_OP_BITWISE_XOR, CX_U8, 3, TU_VALUES(12, 255, 0), TU_VALUES(10, 15, 0),
           TU_VALUES(6, 240, 0));
    check1(CX_OP_BITWISE_NOT, CX_U8, 3, TU_VALUES(0, 255, 5), CX_U8, TU_VALUES(255, 0, 250));
    check1(CX_OP_BITWISE_NOT, CX_S32, 3, TU_VALUES(0, -1, INT32_MAX), CX_S32,
           TU_VALUES(-1, 0, INT32_MIN));
    check2_s64(CX_OP_BITWISE_XOR, 2, (const int64_t[]){INT64_MIN, 0x0123456789abcdef},
               (const int64_t[]){-1, 0x00ff00ff00ff00ff},
               (const int64_t[]){INT64_MAX, 0x01dc45988954cd10});
}

static void test_population_count_and_count_leading_zeros(void **state) {
    (void)state;
    check1(CX_OP_POPULATION_COUNT, CX_U8, 4, TU_VALUES(0, 1, 255, 0x5a), CX_U8,
           TU_VALUES(0, 1, 8, 4));
    check1(CX_OP_POPULATION_COUNT, CX_S32, 4, TU_VALUES(0, -1, INT32_MIN, 7), CX_S32,
           TU_VALUES(0, 32, 1, 3));
    check1(CX_OP_COUNT_LEADING_ZEROS, CX_U8, 4, TU_VALUES(0, 1, 128, 15), CX_U8,
           TU_VALUES(8, 7, 0, 4));
    check1(CX_OP_COUNT_LEADING_ZEROS, CX_S32, 4, TU_VALUES(0, -1, 1, 65536), CX_S32,
           TU_VALUES(32, 0, 31, 15));
    const int64_t x[] = {0, -1, 1, INT64_MAX};
    cx_tensor *a = tu_raw(CX_S64, 4, x);
    cx_tensor *pc = tu_run_ok(CX_OP_POPULATION_COUNT, &a, 1, NULL);
    cx_tensor *lz = tu_run_ok(CX_OP_COUNT_LEADING_ZEROS, &a, 1, NULL);
    const int64_t *p = pc->data, *l = lz->data;
    const int64_t wp[] = {0, 64, 1, 63}, wl[] = {64, 0, 63, 1};
    for (int i = 0; i < 4; i++) {
        assert_int_equal(p[i], wp[i]);
        assert_int_equal(l[i], wl[i]);
    }
    tu_drop(a);
    tu_drop(pc);
    tu_drop(lz);
}

/* Elixir's bsl/bsr on the value, wrapped into the type: what Nx.BinaryBackend gives. */
static void test_shifts(void **state) {
    (void)state;
    check2(CX_OP_LEFT_SHIFT, CX_S32, 8, TU_VALUES(1, 1, 1, -8, 5, -5, 3, -1),
           TU_VALUES(31, 32, 100, -2, -40, -40, 0, 4),
           TU_VALUES(INT32_MIN, 0, 0, -2, 0, -1, 3, -16));
    check2(CX_OP_RIGHT_SHIFT, CX_S32, 7, TU_VALUES(-16, -1, 16, 1, 1, INT32_MIN, 7),
           TU_VALUES(2, 40, 40, -3, -40, 31, 0), TU_VALUES(-4, -1, 0, 8, 0, -1, 7));
    check2(CX_OP_LEFT_SHIFT, CX_U8, 4, TU_VALUES(1, 3, 1, 255), TU_VALUES(7, 7, 8, 1),
           TU_VALUES(128, 128, 0, 254));
    check2(CX_OP_RIGHT_SHIFT, CX_U8, 3, TU_VALUES(255, 255, 128), TU_VALUES(3, 8, 7),
           TU_VALUES(31, 0, 1));
    check2_s64(CX_OP_LEFT_SHIFT, 4, (const int64_t[]){1, 1, -3, INT64_MAX},
               (const int64_t[]){63, 64, -1, INT64_MIN}, (const int64_t[]){INT64_MIN, 0, -2, 0});
    check2_s64(CX_OP_RIGHT_SHIFT, 4, (const int64_t[]){INT64_MIN, INT64_MIN, 1, -1},
               (const int64_t[]){63, INT64_MAX, -62, INT64_MIN},
               (const int64_t[]){-1, -1, INT64_C(1) << 62, 0});
}

static void test_quotient(void **state) {
    (void)state;
    check2(CX_OP_QUOTIENT, CX_S32, 6, TU_VALUES(7, -7, 7, 5, INT32_MIN, -9),
           TU_VALUES(2, 2, -2, 0, -1, 3), TU_VALUES(3, -3, -3, 0, INT32_MIN, -3));
    check2(CX_OP_QUOTIENT, CX_U8, 3, TU_VALUES(200, 5, 255), TU_VALUES(7, 0, 255),
           TU_VALUES(28, 0, 1));
    check2_s64(CX_OP_QUOTIENT, 3, (const int64_t[]){INT64_MIN, INT64_MAX, -1},
               (const int64_t[]){-1, 0, INT64_MIN}, (const int64_t[]){INT64_MIN, 0, 0});
}

/* Floats are refused by inference, naming the op and the type, and the capability query says
 * the op does not take them. */
static void test_integer_only_ops_refuse_floats(void **state) {
    (void)state;
    const cx_op_id ops[] = {CX_OP_BITWISE_NOT, CX_OP_POPULATION_COUNT, CX_OP_COUNT_LEADING_ZEROS,
                            CX_OP_BITWISE_AND, CX_OP_BITWISE_OR,       CX_OP_BITWISE_XOR,
                            CX_OP_LEFT_SHIFT,  CX_OP_RIGHT_SHIFT,      CX_OP_QUOTIENT};
    for (int k = 0; k < COUNT(ops); k++) {
        int n = cx_op_tensor_arity(ops[k]);
        assert_true(cx_op_integer_only(ops[k]));
        for (int ti = 0; ti < COUNT(float_types); ti++) {
            cx_tensor *a = tu_vec(float_types[ti], 2, TU_VALUES(1, 2));
            cx_tensor *b = tu_vec(CX_S32, 2, TU_VALUES(1, 2));
            cx_code code;
            cx_status st = {0};
            cx_tensor *r = tu_run(ops[k], (cx_tensor *[]){b, a}, n, NULL, &code, &st);
            if (n == 1) {
                assert_int_equal(code, CX_OK); /* b alone is s32 */
                tu_drop(r);
                r = tu_run(ops[k], (cx_tensor *[]){a}, 1, NULL, &code, &st);
            }
            assert_null(r);
            assert_int_equal(code, CX_EINVAL);
            assert_non_null(strstr(st.message, "expected integer tensors"));
            assert_non_null(strstr(st.message, cx_op_table[ops[k]].name));
            cx_route route;
            cx_explain ex = {0};
            memset(&st, 0, sizeof st);
            assert_int_equal(cx_capability(tu_cpu(), ops[k], float_types[ti], &route, &ex, &st),
                             CX_EINVAL);
            cx_explain_free(&ex);
            assert_non_null(strstr(st.message, "integer tensors only"));
            tu_drop(a);
            tu_drop(b);
        }
    }
    assert_false(cx_op_integer_only(CX_OP_ADD));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_more_math_is_libm_in_double),
        cmocka_unit_test(test_more_math_on_integers),
        cmocka_unit_test(test_erf_inv),
        cmocka_unit_test(test_is_nan_is_infinity),
        cmocka_unit_test(test_bitwise),
        cmocka_unit_test(test_population_count_and_count_leading_zeros),
        cmocka_unit_test(test_shifts),
        cmocka_unit_test(test_quotient),
        cmocka_unit_test(test_integer_only_ops_refuse_floats),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
