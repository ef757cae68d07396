/* The nn composites (decompose_nn.c) on the cpu device: known values against double-precision
 * references, the errors of their inference, and their plans: decomposed on the cpu into steps
 * that are all primitives, with the result type and shape that inference promised. */
#include <stdio.h>

#include "test_util.h"

#define COUNT(a) ((int)(sizeof(a) / sizeof((a)[0])))

static const cx_op_id nn_ops[] = {
    CX_OP_SOFTMAX,
    CX_OP_LOG_SOFTMAX,
    CX_OP_LOGSUMEXP,
    CX_OP_MEAN,
    CX_OP_VARIANCE,
    CX_OP_STANDARD_DEVIATION,
    CX_OP_RELU,
    CX_OP_LEAKY_RELU,
    CX_OP_ELU,
    CX_OP_GELU,
    CX_OP_SILU,
    CX_OP_SOFTPLUS,
    CX_OP_HARD_SIGMOID,
    CX_OP_LAYER_NORM,
    CX_OP_BATCH_NORM,
    CX_OP_DENSE,
    CX_OP_ONE_HOT,
    CX_OP_CATEGORICAL_CROSS_ENTROPY,
    CX_OP_BINARY_CROSS_ENTROPY,
    CX_OP_MEAN_SQUARED_ERROR,
};

static const cx_dtype all_types[] = {CX_F16, CX_BF16, CX_F32, CX_F64, CX_U8, CX_S32, CX_S64};

/* f32 results computed in f32 from exact inputs: a few ulp, relative to 1 + |expected| */
#define TOL32 4e-7
#define TOL64 1e-14

static cx_tensor *mat(cx_dtype t, int64_t rows, int64_t cols, const double *v) {
    return tu_tensor(t, 2, TU_SHAPE(rows, cols), v);
}

static cx_tensor *vec(cx_dtype t, int64_t n, const double *v) {
    return tu_tensor(t, 1, TU_SHAPE(n), v);
}

static void drop_all(cx_tensor **xs, int n) {
    for (int k = 0; k < n; k++) tu_drop(xs[k]);
}

/* Runs op on inputs, checks the result against expected and frees it. */
static void expect_run(cx_op_id op, cx_tensor **in, int n, cx_params *ps, cx_dtype t, int rank,
                       const int64_t *shape, const double *expected, double tol) {
    cx_tensor *r = tu_run_ok(op, in, n, ps);
    tu_expect(r, t, rank, shape, expected, tol);
    tu_drop(r);
}

/* Asserts that op fails on the inputs with CX_EINVAL and a message holding the op's name and
 * each of the words. */
static void expect_fail_at(int line, cx_op_id op, cx_tensor **in, int n, cx_params *ps,
                           const char *const *words) {
    cx_status st = {0};
    cx_code rc;
    cx_tensor *r = tu_run(op, in, n, ps, &rc, &st);
    if (r) {
        tu_drop(r);
        fail_msg("line %d: %s succeeded", line, cx_op_table[op].name);
    }
    if (rc != CX_EINVAL)
        fail_msg("line %d: %s: expected invalid_argument, got %s: %s", line, cx_op_table[op].name,
                 cx_code_name(rc), st.message);
    if (!strstr(st.message, cx_op_table[op].name))
        fail_msg("line %d: the message does not name %s: %s", line, cx_op_table[op].name,
                 st.message);
    for (int k = 0; words[k]; k++)
        if (!strstr(st.message, words[k]))
            fail_msg("line %d: the message lacks \"%s\": %s", line, words[k], st.message);
}

#define WORDS(...)                      ((const char *const[]){__VA_ARGS__, NULL})
#define expect_fail(op, in, n, ps, ...) expect_fail_at(__LINE__, op, in, n, ps, WORDS(__VA_ARGS__))
#define IN(...)                         ((cx_tensor *[]){__VA_ARGS__})

static cx_params axes_param(int n, const int64_t *axes, bool keep) {
    cx_params ps = {0};
    cx_param_put_ints(&ps, CX_P_AXES, axes, n);
    cx_param_put_int(&ps, CX_P_KEEP_AXES, keep);
    return ps;
}

/* ---- plans ------------------------------------------------------------------------------- */

/* On the cpu every nn composite is decomposed, and its steps are primitives run natively. */
static void expect_primitive_plan(cx_op_id op, cx_dtype t) {
    cx_desc in[8];
    int n = 0;
    cx_params ps = {0};
    cx_op_table[op].sample(op, t, in, &n, &ps);
    cx_explain ex = {0};
    cx_status st = {0};
    cx_code rc = cx_explain_op(op, tu_cpu(), in, n, &ps, &ex, &st);
    if (rc != CX_OK) {
        cx_explain_free(&ex);
        /* floating composites on integers are fine; only one_hot and relu take them as they
         * are, and every op must take floats */
        fail_msg("%s on %s: %s", cx_op_table[op].name, cx_dtype_name(t), st.message);
    }
    assert_true(ex.n >= 2);
    assert_int_equal(ex.steps[0].op, op);
    assert_int_equal(ex.steps[0].depth, 0);
    assert_int_equal(ex.steps[0].route, CX_ROUTE_DECOMPOSED);
    for (int k = 1; k < ex.n; k++) {
        const cx_step *s = &ex.steps[k];
        if (cx_op_table[s->op].kind == CX_KIND_COMPOSITE || s->depth != 1 ||
            s->route != CX_ROUTE_NATIVE)
            fail_msg("%s on %s: step %d is %s at depth %d, route %s", cx_op_table[op].name,
                     cx_dtype_name(t), k, cx_op_table[s->op].name, s->depth,
                     cx_route_name(s->route));
    }
    cx_explain_free(&ex);
}

static void test_plans_are_primitive_steps(void **state) {
    (void)state;
    for (int k = 0; k < COUNT(nn_ops); k++)
        for (int j = 0; j < COUNT(all_types); j++) expect_primitive_plan(nn_ops[k], all_types[j]);
}

/* A sample input filled with small values the op accepts (valid indices for one_hot). */
static cx_tensor *sample_tensor(const cx_desc *d, int k) {
    double v[64];
    int64_t n = cx_desc_numel(d);
    assert_true(n <= 64);
    for (int64_t i = 0; i < n; i++) v[i] = (double)((i + k) % 3) * 0.25 + 0.25;
    if (!cx_dtype_is_float(d->dtype))
        for (int64_t i = 0; i < n; i++) v[i] = (double)((i + k) % 3);
    return tu_tensor(d->dtype, d->rank, d->shape, v);
}

/* Running the decomposition gives the type and shape inference promised, for every type. */
static void test_results_match_inference(void **state) {
    (void)state;
    for (int k = 0; k < COUNT(nn_ops); k++) {
        cx_op_id op = nn_ops[k];
        for (int j = 0; j < COUNT(all_types); j++) {
            cx_desc d[8];
            int n = 0;
            cx_params ps = {0};
            cx_op_table[op].sample(op, all_types[j], d, &n, &ps);
            cx_tensor *in[8];
            for (int i = 0; i < n; i++) in[i] = sample_tensor(&d[i], i);
            cx_plan pl;
            cx_status st = {0};
            cx_params pp = ps;
            assert_int_equal(
                cx_plan_op(op, tu_cpu(), (const cx_tensor *const *)in, n, &pp, &pl, &st), CX_OK);
            cx_tensor *r = tu_run_ok(op, in, n, &ps);
            if (r->desc.dtype != pl.out.dtype || r->desc.rank != pl.out.rank ||
                memcmp(r->desc.shape, pl.out.shape, sizeof(int64_t) * (size_t)pl.out.rank))
                fail_msg("%s on %s: the decomposition gave %s rank %d, inference %s rank %d",
                         cx_op_table[op].name, cx_dtype_name(all_types[j]),
                         cx_dtype_name(r->desc.dtype), r->desc.rank, cx_dtype_name(pl.out.dtype),
                         pl.out.rank);
            for (int64_t i = 0; i < r->numel && cx_dtype_is_float(r->desc.dtype); i++)
                if (isnan(tu_load(r->desc.dtype, r->data, i)))
                    fail_msg("%s on %s: NaN at %lld", cx_op_table[op].name,
                             cx_dtype_name(all_types[j]), (long long)i);
            tu_drop(r);
            drop_all(in, n);
        }
    }
}

/* ---- softmax, log_softmax, logsumexp ------------------------------------------------------ */

static void test_softmax_and_log_softmax(void **state) {
    (void)state;
    const double v[] = {1, 2, 3, -1000, 0, 1000};
    cx_tensor *x = mat(CX_F32, 2, 3, v);
    /* along the last axis, in double */
    double sm[6], lsm[6];
    for (int r = 0; r < 2; r++) {
        double m = fmax(fmax(v[3 * r], v[3 * r + 1]), v[3 * r + 2]), s = 0;
        for (int c = 0; c < 3; c++) s += exp(v[3 * r + c] - m);
        for (int c = 0; c < 3; c++) {
            lsm[3 * r + c] = v[3 * r + c] - m - log(s);
            sm[3 * r + c] = exp(lsm[3 * r + c]);
        }
    }
    expect_run(CX_OP_SOFTMAX, IN(x), 1, NULL, CX_F32, 2, TU_SHAPE(2, 3), sm, TOL32);
    expect_run(CX_OP_LOG_SOFTMAX, IN(x), 1, NULL, CX_F32, 2, TU_SHAPE(2, 3), lsm, TOL32);
    /* along axis 0: the columns */
    cx_params ps = {0};
    cx_param_put_int(&ps, CX_P_AXIS, 0);
    double col[6];
    for (int c = 0; c < 3; c++) {
        double a = v[c], b = v[3 + c], m = fmax(a, b), l = m + log(exp(a - m) + exp(b - m));
        col[c] = a - l;
        col[3 + c] = b - l;
    }
    expect_run(CX_OP_LOG_SOFTMAX, IN(x), 1, &ps, CX_F32, 2, TU_SHAPE(2, 3), col, TOL32);
    /* integers give f32 */
    cx_tensor *i = vec(CX_S32, 2, TU_VALUES(0, 0));
    expect_run(CX_OP_LOG_SOFTMAX, IN(i), 1, NULL, CX_F32, 1, TU_SHAPE(2), TU_VALUES(-M_LN2, -M_LN2),
               TOL32);
    /* errors */
    cx_param_put_int(&ps, CX_P_AXIS, 2);
    expect_fail(CX_OP_LOG_SOFTMAX, IN(x), 1, &ps, "expected an axis in -2..1", "got: 2");
    cx_tensor *s = tu_tensor(CX_F32, 0, NULL, TU_VALUES(1));
    expect_fail(CX_OP_LOG_SOFTMAX, IN(s), 1, NULL, "rank 0");
    expect_fail(CX_OP_LOG_SOFTMAX, IN(x, x), 2, NULL, "expects 1 tensor", "got: 2");
    drop_all(IN(x, i, s), 3);
}

static void test_logsumexp(void **state) {
    (void)state;
    const double v[] = {1000, 1000, -INFINITY, -INFINITY, INFINITY, 0, 0.5, -2};
    cx_tensor *x = mat(CX_F64, 4, 2, v);
    double want[4] = {1000 + M_LN2, -INFINITY, INFINITY, log(exp(0.5) + exp(-2))};
    cx_params ps = axes_param(1, TU_SHAPE(1), false);
    expect_run(CX_OP_LOGSUMEXP, IN(x), 1, &ps, CX_F64, 1, TU_SHAPE(4), want, TOL64);
    ps = axes_param(1, TU_SHAPE(-1), true);
    expect_run(CX_OP_LOGSUMEXP, IN(x), 1, &ps, CX_F64, 2, TU_SHAPE(4, 1), want, TOL64);
    /* all axes by default: +inf wins */
    expect_run(CX_OP_LOGSUMEXP, IN(x), 1, NULL, CX_F64, 0, NULL, TU_VALUES(INFINITY), 0);
    /* f32, and an empty reduction gives -inf */
    cx_tensor *y = mat(CX_F32, 2, 2, TU_VALUES(1, 2, 3, 4));
    ps = axes_param(1, TU_SHAPE(0), false);
    expect_run(CX_OP_LOGSUMEXP, IN(y), 1, &ps, CX_F32, 1, TU_SHAPE(2),
               TU_VALUES(3 + log1p(exp(-2)), 4 + log1p(exp(-2))), TOL32);
    cx_tensor *e = tu_tensor(CX_F32, 2, TU_SHAPE(2, 0), NULL);
    ps = axes_param(1, TU_SHAPE(1), false);
    expect_run(CX_OP_LOGSUMEXP, IN(e), 1, &ps, CX_F32, 1, TU_SHAPE(2),
               TU_VALUES(-INFINITY, -INFINITY), 0);
    /* NaN stays NaN */
    cx_tensor *n = vec(CX_F32, 2, TU_VALUES(NAN, 1));
    expect_run(CX_OP_LOGSUMEXP, IN(n), 1, NULL, CX_F32, 0, NULL, TU_VALUES(NAN), 0);
    /* errors */
    ps = axes_param(2, TU_SHAPE(1, -1), false);
    expect_fail(CX_OP_LOGSUMEXP, IN(x), 1, &ps, "axis 1 is given more than once");
    ps = axes_param(1, TU_SHAPE(3), false);
    expect_fail(CX_OP_LOGSUMEXP, IN(x), 1, &ps, "expected an axis in -2..1", "got: 3");
    drop_all(IN(x, y, e, n), 4);
}

/* ---- mean, variance, standard_deviation --------------------------------------------------- */

static void test_mean(void **state) {
    (void)state;
    cx_tensor *x = mat(CX_S32, 2, 3, TU_VALUES(1, 2, 3, 4, 5, 7));
    cx_params ps = axes_param(1, TU_SHAPE(0), false);
    expect_run(CX_OP_MEAN, IN(x), 1, &ps, CX_F32, 1, TU_SHAPE(3), TU_VALUES(2.5, 3.5, 5), 0);
    ps = axes_param(1, TU_SHAPE(1), true);
    expect_run(CX_OP_MEAN, IN(x), 1, &ps, CX_F32, 2, TU_SHAPE(2, 1), TU_VALUES(2, 16.0 / 3), TOL32);
    expect_run(CX_OP_MEAN, IN(x), 1, NULL, CX_F32, 0, NULL, TU_VALUES(22.0 / 6), TOL32);
    /* no axes: the tensor itself, as a float */
    ps = axes_param(0, NULL, false);
    expect_run(CX_OP_MEAN, IN(x), 1, &ps, CX_F32, 2, TU_SHAPE(2, 3), TU_VALUES(1, 2, 3, 4, 5, 7),
               0);
    /* f16 is summed in f32: 0.1 (as f16) x 4096 does not stall at 256 or lose the tail */
    double many[4096];
    for (int i = 0; i < 4096; i++) many[i] = 0.1;
    cx_tensor *h = vec(CX_F16, 4096, many);
    double h01 = cx_f16_to_f32(cx_f16_from_f64(0.1));
    expect_run(CX_OP_MEAN, IN(h), 1, NULL, CX_F16, 0, NULL, TU_VALUES(h01), 0);
    /* empty: NaN */
    cx_tensor *e = tu_tensor(CX_F64, 2, TU_SHAPE(0, 2), NULL);
    ps = axes_param(1, TU_SHAPE(0), false);
    expect_run(CX_OP_MEAN, IN(e), 1, &ps, CX_F64, 1, TU_SHAPE(2), TU_VALUES(NAN, NAN), 0);
    ps = axes_param(1, TU_SHAPE(2), false);
    expect_fail(CX_OP_MEAN, IN(x), 1, &ps, "expected an axis in -2..1", "got: 2");
    drop_all(IN(x, h, e), 3);
}

static void test_variance_and_standard_deviation(void **state) {
    (void)state;
    const double v[] = {2, 4, 4, 4, 5, 5, 7, 9};
    cx_tensor *x = vec(CX_F32, 8, v);
    expect_run(CX_OP_VARIANCE, IN(x), 1, NULL, CX_F32, 0, NULL, TU_VALUES(4), TOL32);
    expect_run(CX_OP_STANDARD_DEVIATION, IN(x), 1, NULL, CX_F32, 0, NULL, TU_VALUES(2), TOL32);
    cx_params ps = {0};
    cx_param_put_int(&ps, CX_P_DDOF, 1);
    expect_run(CX_OP_VARIANCE, IN(x), 1, &ps, CX_F32, 0, NULL, TU_VALUES(32.0 / 7), TOL32);
    expect_run(CX_OP_STANDARD_DEVIATION, IN(x), 1, &ps, CX_F32, 0, NULL, TU_VALUES(sqrt(32.0 / 7)),
               TOL32);
    /* two passes: a large common offset does not swamp the spread */
    cx_tensor *o = mat(CX_F32, 2, 4, TU_VALUES(1e4 + 1, 1e4 + 2, 1e4 + 3, 1e4 + 4, 1, 1, 1, 1));
    ps = axes_param(1, TU_SHAPE(1), true);
    expect_run(CX_OP_VARIANCE, IN(o), 1, &ps, CX_F32, 2, TU_SHAPE(2, 1), TU_VALUES(1.25, 0), TOL32);
    /* integers give f32; keep_axes with several axes */
    cx_tensor *i = tu_tensor(CX_U8, 3, TU_SHAPE(2, 1, 2), TU_VALUES(0, 2, 4, 10));
    ps = axes_param(2, TU_SHAPE(0, 2), true);
    cx_param_put_float(&ps, CX_P_DDOF, 1.0);
    /* mean 4, squares 16 + 4 + 0 + 36 = 56, over 3 */
    expect_run(CX_OP_VARIANCE, IN(i), 1, &ps, CX_F32, 3, TU_SHAPE(1, 1, 1), TU_VALUES(56.0 / 3),
               TOL32);
    /* errors */
    ps = (cx_params){0};
    cx_param_put_int(&ps, CX_P_DDOF, -1);
    expect_fail(CX_OP_VARIANCE, IN(x), 1, &ps, "expected ddof to be a non-negative number",
                "got: -1");
    cx_param_put_float(&ps, CX_P_DDOF, INFINITY);
    expect_fail(CX_OP_STANDARD_DEVIATION, IN(x), 1, &ps, "finite", "inf");
    ps = axes_param(2, TU_SHAPE(0, 0), false);
    expect_fail(CX_OP_STANDARD_DEVIATION, IN(x), 1, &ps, "at most 1 axes");
    drop_all(IN(x, o, i), 3);
}

/* ---- activations -------------------------------------------------------------------------- */

static const double act_x[] = {-8, -2.5, -1, -0.25, 0, 0.25, 1, 2.5, 8};
#define ACT_N 9

static double gelu_erf(double x) {
    return 0.5 * x * erfc(-x / sqrt(2));
}
static double gelu_tanh(double x) {
    return 0.5 * x * (1 + tanh(sqrt(2 / M_PI) * (x + 0.044715 * x * x * x)));
}
static double silu(double x) {
    return x / (1 + exp(-x));
}
static double softplus(double x) {
    return x > 30 ? x + log1p(exp(-x)) : log1p(exp(x));
}
static double hard_sigmoid(double x) {
    return fmin(fmax(x + 3, 0), 6) / 6;
}

/* Checks an activation on act_x in f64 and f32 against f(x). `tol32` is relative to 1 + |y|. */
static void expect_activation(cx_op_id op, cx_params *ps, double (*f)(double, double), double a,
                              double tol32) {
    double want[ACT_N];
    for (int i = 0; i < ACT_N; i++) want[i] = f(act_x[i], a);
    cx_tensor *x64 = vec(CX_F64, ACT_N, act_x), *x32 = vec(CX_F32, ACT_N, act_x);
    cx_params copy = ps ? *ps : (cx_params){0};
    expect_run(op, IN(x64), 1, &copy, CX_F64, 1, TU_SHAPE(ACT_N), want, TOL64);
    copy = ps ? *ps : (cx_params){0};
    expect_run(op, IN(x32), 1, &copy, CX_F32, 1, TU_SHAPE(ACT_N), want, tol32);
    drop_all(IN(x64, x32), 2);
}

static double f_leaky(double x, double a) {
    return x > 0 ? x : a * x;
}
static double f_elu(double x, double a) {
    return x > 0 ? x : a * expm1(x);
}
static double f_gelu(double x, double a) {
    return a ? gelu_tanh(x) : gelu_erf(x);
}
static double f_silu(double x, double a) {
    (void)a;
    return silu(x);
}
static double f_softplus(double x, double a) {
    (void)a;
    return softplus(x);
}
static double f_hard_sigmoid(double x, double a) {
    (void)a;
    return hard_sigmoid(x);
}

static void test_relu(void **state) {
    (void)state;
    cx_tensor *f = vec(CX_F32, 4, TU_VALUES(-1.5, 0, 2, NAN));
    expect_run(CX_OP_RELU, IN(f), 1, NULL, CX_F32, 1, TU_SHAPE(4), TU_VALUES(0, 0, 2, NAN), 0);
    /* integers stay integers */
    cx_tensor *i = vec(CX_S32, 3, TU_VALUES(-7, 0, 9));
    expect_run(CX_OP_RELU, IN(i), 1, NULL, CX_S32, 1, TU_SHAPE(3), TU_VALUES(0, 0, 9), 0);
    cx_tensor *u = vec(CX_U8, 2, TU_VALUES(0, 255));
    expect_run(CX_OP_RELU, IN(u), 1, NULL, CX_U8, 1, TU_SHAPE(2), TU_VALUES(0, 255), 0);
    expect_fail(CX_OP_RELU, IN(f, f), 2, NULL, "expects 1 tensor");
    drop_all(IN(f, i, u), 3);
}

static void test_leaky_relu_and_elu(void **state) {
    (void)state;
    expect_activation(CX_OP_LEAKY_RELU, NULL, f_leaky, 0.01, TOL32);
    expect_activation(CX_OP_ELU, NULL, f_elu, 1.0, TOL32);
    cx_params ps = {0};
    cx_param_put_float(&ps, CX_P_ALPHA, 0.5);
    expect_activation(CX_OP_LEAKY_RELU, &ps, f_leaky, 0.5, TOL32);
    cx_param_put_int(&ps, CX_P_ALPHA, 2);
    expect_activation(CX_OP_ELU, &ps, f_elu, 2.0, TOL32);
    /* integers give f32 */
    cx_tensor *i = vec(CX_S64, 2, TU_VALUES(-100, 3));
    expect_run(CX_OP_LEAKY_RELU, IN(i), 1, NULL, CX_F32, 1, TU_SHAPE(2), TU_VALUES(-1, 3), TOL32);
    cx_tensor *s = tu_tensor(CX_F32, 0, NULL, TU_VALUES(1));
    expect_fail(CX_OP_ELU, IN(s, s), 2, NULL, "expects 1 tensor", "got: 2");
    drop_all(IN(i, s), 2);
}

static void test_gelu(void **state) {
    (void)state;
    /* the exact form loses relative accuracy where 1 + erf cancels (x = -8: the result is
     * -5e-15): the tolerance is relative to 1 + |y| */
    expect_activation(CX_OP_GELU, NULL, f_gelu, 0, TOL32);
    cx_params ps = {0};
    cx_param_put_int(&ps, CX_P_APPROXIMATE, 1);
    expect_activation(CX_OP_GELU, &ps, f_gelu, 1, TOL32);
    /* the tanh form is computed without cancellation: relative accuracy even far out */
    cx_tensor *x = vec(CX_F64, 1, TU_VALUES(-10));
    cx_params copy = ps;
    cx_tensor *r = tu_run_ok(CX_OP_GELU, IN(x), 1, &copy);
    /* gelu_tanh(-10) itself cancels in double; 0.5 * (1 + tanh(u)) = 1 / (1 + exp(-2u)) */
    double u = sqrt(2 / M_PI) * (-10 + 0.044715 * -1000);
    double got = tu_load(CX_F64, r->data, 0), want = -10 / (1 + exp(-2 * u));
    assert_true(fabs(got - want) <= 1e-12 * fabs(want));
    tu_drop(r);
    cx_param_put_int(&ps, CX_P_APPROXIMATE, 2);
    expect_fail(CX_OP_GELU, IN(x), 1, &ps, "expected approximate to be one of [:none, :tanh]",
                "got: 2");
    tu_drop(x);
}

static void test_silu_softplus_hard_sigmoid(void **state) {
    (void)state;
    expect_activation(CX_OP_SILU, NULL, f_silu, 0, TOL32);
    expect_activation(CX_OP_SOFTPLUS, NULL, f_softplus, 0, TOL32);
    expect_activation(CX_OP_HARD_SIGMOID, NULL, f_hard_sigmoid, 0, TOL32);
    /* softplus neither overflows nor flushes small results to zero */
    cx_tensor *x = vec(CX_F32, 4, TU_VALUES(-100, 100, 1e30, -INFINITY));
    expect_run(CX_OP_SOFTPLUS, IN(x), 1, NULL, CX_F32, 1, TU_SHAPE(4),
               TU_VALUES(exp(-100), 100, 1e30, 0), TOL32);
    cx_tensor *r = tu_run_ok(CX_OP_SOFTPLUS, IN(x), 1, NULL);
    double tiny = tu_load(CX_F32, r->data, 0);
    assert_true(fabs(tiny - exp(-100)) <= 1e-6 * exp(-100) + 1e-45);
    tu_drop(r);
    /* hard_sigmoid: integers give f32; NaN stays NaN */
    cx_tensor *i = vec(CX_S32, 3, TU_VALUES(-3, 0, 3));
    expect_run(CX_OP_HARD_SIGMOID, IN(i), 1, NULL, CX_F32, 1, TU_SHAPE(3), TU_VALUES(0, 0.5, 1), 0);
    cx_tensor *n = vec(CX_F32, 1, TU_VALUES(NAN));
    expect_run(CX_OP_HARD_SIGMOID, IN(n), 1, NULL, CX_F32, 1, TU_SHAPE(1), TU_VALUES(NAN), 0);
    expect_fail(CX_OP_SILU, NULL, 0, NULL, "expects 1 tensor", "got: 0");
    drop_all(IN(x, i, n), 3);
}

/* ---- layer_norm, batch_norm --------------------------------------------------------------- */

static void test_layer_norm(void **state) {
    (void)state;
    const double v[] = {1, 2, 6, -1, 0, 4};
    cx_tensor *x = mat(CX_F32, 2, 3, v);
    cx_tensor *g = vec(CX_F32, 3, TU_VALUES(1, 2, 0.5)), *b = vec(CX_F32, 3, TU_VALUES(0, 1, -1));
    double want[6];
    for (int r = 0; r < 2; r++) {
        const double *row = v + 3 * r;
        double m = (row[0] + row[1] + row[2]) / 3, var = 0;
        for (int c = 0; c < 3; c++) var += (row[c] - m) * (row[c] - m) / 3;
        const double gg[] = {1, 2, 0.5}, bb[] = {0, 1, -1};
        for (int c = 0; c < 3; c++)
            want[3 * r + c] = (row[c] - m) / sqrt(var + 1e-5) * gg[c] + bb[c];
    }
    expect_run(CX_OP_LAYER_NORM, IN(x, g, b), 3, NULL, CX_F32, 2, TU_SHAPE(2, 3), want, 1e-6);
    /* over both axes, gamma and beta numbers, epsilon 0: the whole tensor normalised */
    cx_params ps = axes_param(2, TU_SHAPE(0, 1), false);
    cx_param_put_float(&ps, CX_P_EPSILON, 0);
    cx_tensor *one = tu_tensor(CX_F64, 0, NULL, TU_VALUES(1));
    cx_tensor *zero = tu_tensor(CX_F64, 0, NULL, TU_VALUES(0));
    double all[6], m = 2, var = 0;
    for (int k = 0; k < 6; k++) var += (v[k] - m) * (v[k] - m) / 6;
    for (int k = 0; k < 6; k++) all[k] = (v[k] - m) / sqrt(var);
    /* f32 with f64 gamma: f64 */
    expect_run(CX_OP_LAYER_NORM, IN(x, one, zero), 3, &ps, CX_F64, 2, TU_SHAPE(2, 3), all, 1e-7);
    /* gamma {1, 3} broadcasts over axis 0; f16 input computed in f32, rounded once */
    cx_tensor *h = mat(CX_F16, 2, 3, v);
    cx_tensor *g13 = mat(CX_F16, 1, 3, TU_VALUES(1, 1, 1)), *b0 = mat(CX_F16, 1, 1, TU_VALUES(0));
    ps = axes_param(2, TU_SHAPE(-2, -1), false);
    cx_param_put_float(&ps, CX_P_EPSILON, 0);
    expect_run(CX_OP_LAYER_NORM, IN(h, g13, b0), 3, &ps, CX_F16, 2, TU_SHAPE(2, 3), all, 1e-3);
    /* errors */
    cx_tensor *g4 = vec(CX_F32, 4, TU_VALUES(1, 1, 1, 1));
    expect_fail(CX_OP_LAYER_NORM, IN(x, g4, b), 3, NULL, "expected gamma to have shape {3}",
                "got: {4}");
    expect_fail(CX_OP_LAYER_NORM, IN(x, g, g4), 3, NULL, "expected beta to have shape {3}");
    ps = axes_param(1, TU_SHAPE(0), false);
    expect_fail(CX_OP_LAYER_NORM, IN(x, g, b), 3, &ps, "expected gamma to have shape {2}");
    ps = axes_param(0, NULL, false);
    expect_fail(CX_OP_LAYER_NORM, IN(x, g, b), 3, &ps, "at least one axis");
    ps = axes_param(1, TU_SHAPE(2), false);
    expect_fail(CX_OP_LAYER_NORM, IN(x, g, b), 3, &ps, "expected an axis in -2..1", "got: 2");
    ps = (cx_params){0};
    cx_param_put_float(&ps, CX_P_EPSILON, -1e-3);
    expect_fail(CX_OP_LAYER_NORM, IN(x, g, b), 3, &ps, "expected epsilon to be a non-negative");
    expect_fail(CX_OP_LAYER_NORM, IN(one, one, one), 3, NULL, "rank 1 or more");
    drop_all(IN(x, g, b, one, zero, h, g13, b0, g4), 9);
}

static void test_batch_norm(void **state) {
    (void)state;
    /* {batch 2, channels 3, 2} */
    double v[12];
    for (int k = 0; k < 12; k++) v[k] = k * 0.5 - 2;
    cx_tensor *x = tu_tensor(CX_F32, 3, TU_SHAPE(2, 3, 2), v);
    const double gg[] = {1, 2, 0.5}, bb[] = {0, 1, -1}, mm[] = {0.5, -1, 2}, vv[] = {1, 4, 0.25};
    cx_tensor *g = vec(CX_F32, 3, gg), *b = vec(CX_F32, 3, bb), *m = vec(CX_F32, 3, mm),
              *var = vec(CX_F32, 3, vv);
    double want[12];
    for (int k = 0; k < 12; k++) {
        int c = (k / 2) % 3;
        want[k] = (v[k] - mm[c]) / sqrt(vv[c] + 1e-5) * gg[c] + bb[c];
    }
    expect_run(CX_OP_BATCH_NORM, IN(x, g, b, m, var), 5, NULL, CX_F32, 3, TU_SHAPE(2, 3, 2), want,
               1e-6);
    /* the last axis as features, numbers for some parameters, epsilon 0 */
    cx_tensor *y = mat(CX_F64, 2, 2, TU_VALUES(1, 2, 3, 6));
    cx_tensor *one = tu_tensor(CX_F64, 0, NULL, TU_VALUES(1));
    cx_tensor *mean2 = vec(CX_F64, 2, TU_VALUES(2, 4)), *var2 = vec(CX_F64, 2, TU_VALUES(1, 4));
    cx_params ps = {0};
    cx_param_put_int(&ps, CX_P_AXIS, -1);
    cx_param_put_int(&ps, CX_P_EPSILON, 0);
    expect_run(CX_OP_BATCH_NORM, IN(y, one, one, mean2, var2), 5, &ps, CX_F64, 2, TU_SHAPE(2, 2),
               TU_VALUES(0, 0, 2, 2), TOL64);
    /* errors */
    cx_tensor *m4 = vec(CX_F32, 4, TU_VALUES(0, 0, 0, 0));
    expect_fail(CX_OP_BATCH_NORM, IN(x, g, b, m4, var), 5, NULL, "expected mean to have shape {3}",
                "got: {4}");
    expect_fail(CX_OP_BATCH_NORM, IN(x, g, b, m, y), 5, NULL, "expected variance to have shape {3}",
                "got: {2, 2}");
    ps = (cx_params){0};
    cx_param_put_int(&ps, CX_P_AXIS, 3);
    expect_fail(CX_OP_BATCH_NORM, IN(x, g, b, m, var), 5, &ps, "expected an axis in -3..2",
                "got: 3");
    cx_tensor *r1 = vec(CX_F32, 3, TU_VALUES(1, 2, 3));
    expect_fail(CX_OP_BATCH_NORM, IN(r1, g, b, m, var), 5, NULL, "expected an axis in -1..0",
                "got: 1");
    expect_fail(CX_OP_BATCH_NORM, IN(x, g, b, m), 4, NULL, "expects 5 tensor", "got: 4");
    drop_all(IN(x, g, b, m, var, y, one, mean2, var2, m4, r1), 11);
}

/* ---- dense, one_hot ----------------------------------------------------------------------- */

static void test_dense(void **state) {
    (void)state;
    /* {2, 2, 3} . {3, 2} + {2} */
    double xv[12], kv[6] = {1, -1, 0.5, 2, -2, 0.25}, bv[2] = {0.5, -3};
    for (int k = 0; k < 12; k++) xv[k] = k - 5;
    cx_tensor *x = tu_tensor(CX_F32, 3, TU_SHAPE(2, 2, 3), xv);
    cx_tensor *w = mat(CX_F32, 3, 2, kv), *b = vec(CX_F32, 2, bv);
    double want[8];
    for (int r = 0; r < 4; r++)
        for (int o = 0; o < 2; o++) {
            double s = bv[o];
            for (int i = 0; i < 3; i++) s += xv[3 * r + i] * kv[2 * i + o];
            want[2 * r + o] = s;
        }
    expect_run(CX_OP_DENSE, IN(x, w, b), 3, NULL, CX_F32, 3, TU_SHAPE(2, 2, 2), want, TOL32);
    /* integers stay integers; a number as the bias */
    cx_tensor *xi = mat(CX_S32, 1, 2, TU_VALUES(3, 4)), *wi = mat(CX_S32, 2, 1, TU_VALUES(5, 6));
    cx_tensor *bi = tu_tensor(CX_S32, 0, NULL, TU_VALUES(-1));
    expect_run(CX_OP_DENSE, IN(xi, wi, bi), 3, NULL, CX_S32, 2, TU_SHAPE(1, 1), TU_VALUES(38), 0);
    /* a rank-1 input; bf16 with f32 kernel merges to f32 */
    cx_tensor *x1 = vec(CX_BF16, 3, TU_VALUES(1, 2, 3));
    expect_run(CX_OP_DENSE, IN(x1, w, b), 3, NULL, CX_F32, 1, TU_SHAPE(2),
               TU_VALUES(0.5 + 1 + 1 - 6, -3 - 1 + 4 + 0.75), TOL32);
    /* each activation on the same product, against its formula in double */
    for (int act = CX_ACTIVATION_RELU; act < CX_ACTIVATION_COUNT; act++) {
        double got[8];
        for (int k = 0; k < 8; k++) {
            double v = want[k];
            switch (act) {
            case CX_ACTIVATION_RELU: got[k] = v > 0 ? v : 0; break;
            case CX_ACTIVATION_SIGMOID: got[k] = 1 / (1 + exp(-v)); break;
            case CX_ACTIVATION_TANH: got[k] = tanh(v); break;
            case CX_ACTIVATION_SILU: got[k] = v / (1 + exp(-v)); break;
            case CX_ACTIVATION_GELU: got[k] = 0.5 * v * (1 + erf(v / sqrt(2))); break;
            default: got[k] = 0.5 * v * (1 + tanh(sqrt(2 / M_PI) * (v + 0.044715 * v * v * v)));
            }
        }
        cx_params ps = {0};
        cx_param_put_int(&ps, CX_P_ACTIVATION, act);
        expect_run(CX_OP_DENSE, IN(x, w, b), 3, &ps, CX_F32, 3, TU_SHAPE(2, 2, 2), got, TOL32);
    }
    /* integers: relu keeps the type, a floating activation gives f32 */
    cx_params relu = {0}, sigmoid = {0}, bad = {0};
    cx_param_put_int(&relu, CX_P_ACTIVATION, CX_ACTIVATION_RELU);
    cx_param_put_int(&sigmoid, CX_P_ACTIVATION, CX_ACTIVATION_SIGMOID);
    cx_param_put_int(&bad, CX_P_ACTIVATION, CX_ACTIVATION_COUNT);
    cx_tensor *bneg = tu_tensor(CX_S32, 0, NULL, TU_VALUES(-40));
    expect_run(CX_OP_DENSE, IN(xi, wi, bneg), 3, &relu, CX_S32, 2, TU_SHAPE(1, 1), TU_VALUES(0), 0);
    expect_run(CX_OP_DENSE, IN(xi, wi, bi), 3, &sigmoid, CX_F32, 2, TU_SHAPE(1, 1),
               TU_VALUES(1 / (1 + exp(-38.0))), TOL32);
    expect_fail(CX_OP_DENSE, IN(x, w, b), 3, &bad, "expected activation to be one of",
                ":gelu_tanh");
    tu_drop(bneg);
    /* errors */
    cx_tensor *w42 = mat(CX_F32, 4, 2, TU_VALUES(0, 0, 0, 0, 0, 0, 0, 0));
    expect_fail(CX_OP_DENSE, IN(x, w42, b), 3, NULL, "expected kernel to have shape {3, out}",
                "got: {4, 2}");
    expect_fail(CX_OP_DENSE, IN(x, b, b), 3, NULL, "expected kernel to have shape {3, out}",
                "got: {2}");
    cx_tensor *b3 = vec(CX_F32, 3, TU_VALUES(0, 0, 0));
    expect_fail(CX_OP_DENSE, IN(x, w, b3), 3, NULL, "expected bias to have shape {2}", "got: {3}");
    expect_fail(CX_OP_DENSE, IN(bi, w, b), 3, NULL, "rank 1 or more");
    drop_all(IN(x, w, b, xi, wi, bi, x1, w42, b3), 9);
}

static void test_one_hot(void **state) {
    (void)state;
    cx_tensor *i = vec(CX_S64, 4, TU_VALUES(0, 2, -1, 5));
    cx_params ps = {0};
    cx_param_put_int(&ps, CX_P_DEPTH, 3);
    expect_run(CX_OP_ONE_HOT, IN(i), 1, &ps, CX_F32, 2, TU_SHAPE(4, 3),
               TU_VALUES(1, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0), 0);
    /* u8 indices past 255 positions; an integer type */
    cx_tensor *u = mat(CX_U8, 1, 2, TU_VALUES(255, 0));
    ps = (cx_params){0};
    cx_param_put_int(&ps, CX_P_DEPTH, 300);
    cx_param_put_int(&ps, CX_P_TYPE, CX_S32);
    cx_tensor *r = tu_run_ok(CX_OP_ONE_HOT, IN(u), 1, &ps);
    assert_int_equal(r->desc.dtype, CX_S32);
    assert_int_equal(r->desc.rank, 3);
    assert_int_equal(r->desc.shape[2], 300);
    const int32_t *d = r->data;
    for (int k = 0; k < 600; k++) assert_int_equal(d[k], k == 255 || k == 300);
    tu_drop(r);
    /* a scalar index gives a vector; depth 0 gives an empty result */
    cx_tensor *s = tu_tensor(CX_S32, 0, NULL, TU_VALUES(1));
    ps = (cx_params){0};
    cx_param_put_int(&ps, CX_P_DEPTH, 2);
    cx_param_put_int(&ps, CX_P_TYPE, CX_BF16);
    expect_run(CX_OP_ONE_HOT, IN(s), 1, &ps, CX_BF16, 1, TU_SHAPE(2), TU_VALUES(0, 1), 0);
    cx_param_put_int(&ps, CX_P_DEPTH, 0);
    expect_run(CX_OP_ONE_HOT, IN(s), 1, &ps, CX_BF16, 1, TU_SHAPE(0), NULL, 0);
    /* errors */
    ps = (cx_params){0};
    expect_fail(CX_OP_ONE_HOT, IN(i), 1, &ps, "the depth parameter is required");
    cx_param_put_int(&ps, CX_P_DEPTH, -2);
    expect_fail(CX_OP_ONE_HOT, IN(i), 1, &ps, "expected depth to be a non-negative integer",
                "got: -2");
    cx_param_put_int(&ps, CX_P_DEPTH, INT64_C(1) << 50);
    expect_fail(CX_OP_ONE_HOT, IN(i), 1, &ps, "2^48");
    cx_param_put_int(&ps, CX_P_DEPTH, 2);
    cx_tensor *f = vec(CX_F32, 1, TU_VALUES(1));
    expect_fail(CX_OP_ONE_HOT, IN(f), 1, &ps, "expected indices to have an integer type",
                "got: f32");
    cx_param_put_int(&ps, CX_P_TYPE, 99);
    expect_fail(CX_OP_ONE_HOT, IN(i), 1, &ps, "unknown type code 99");
    int64_t shape16[CX_MAX_RANK];
    for (int k = 0; k < CX_MAX_RANK; k++) shape16[k] = 1;
    cx_tensor *r8 = tu_tensor(CX_S64, CX_MAX_RANK, shape16, TU_VALUES(0));
    ps = (cx_params){0};
    cx_param_put_int(&ps, CX_P_DEPTH, 2);
    expect_fail(CX_OP_ONE_HOT, IN(r8), 1, &ps, "rank at most 15");
    drop_all(IN(i, u, s, f, r8), 5);
}

/* ---- losses ------------------------------------------------------------------------------- */

static cx_params loss_params(bool from_logits, int reduction) {
    cx_params ps = {0};
    cx_param_put_int(&ps, CX_P_FROM_LOGITS, from_logits);
    cx_param_put_int(&ps, CX_P_REDUCTION, reduction);
    return ps;
}

enum { MEAN, SUM, NONE };

static void test_categorical_cross_entropy(void **state) {
    (void)state;
    const double yt[] = {0, 1, 0, 0.25, 0.25, 0.5}, yp[] = {0.05, 0.95, 0, 0.1, 0.8, 0.1};
    cx_tensor *t = mat(CX_F32, 2, 3, yt), *p = mat(CX_F32, 2, 3, yp);
    double l[2] = {0, 0};
    for (int k = 0; k < 6; k++) l[k / 3] -= yt[k] * log(fmin(fmax(yp[k], 1e-7), 1 - 1e-7));
    cx_params ps = loss_params(false, NONE);
    expect_run(CX_OP_CATEGORICAL_CROSS_ENTROPY, IN(t, p), 2, &ps, CX_F32, 1, TU_SHAPE(2), l, 1e-6);
    ps = loss_params(false, MEAN);
    expect_run(CX_OP_CATEGORICAL_CROSS_ENTROPY, IN(t, p), 2, &ps, CX_F32, 0, NULL,
               TU_VALUES((l[0] + l[1]) / 2), 1e-6);
    ps = loss_params(false, SUM);
    expect_run(CX_OP_CATEGORICAL_CROSS_ENTROPY, IN(t, p), 2, &ps, CX_F32, 0, NULL,
               TU_VALUES(l[0] + l[1]), 1e-6);
    /* defaults: probabilities, mean */
    expect_run(CX_OP_CATEGORICAL_CROSS_ENTROPY, IN(t, p), 2, NULL, CX_F32, 0, NULL,
               TU_VALUES((l[0] + l[1]) / 2), 1e-6);
    /* from logits, large ones included: -sum(y * log_softmax(x)) */
    const double z[] = {1000, 0, -1000, 1, 2, 3};
    cx_tensor *zt = mat(CX_F64, 2, 3, z);
    double lz[2] = {0, 0};
    for (int r = 0; r < 2; r++) {
        const double *row = z + 3 * r;
        double m = fmax(fmax(row[0], row[1]), row[2]), s = 0;
        for (int c = 0; c < 3; c++) s += exp(row[c] - m);
        for (int c = 0; c < 3; c++) lz[r] -= yt[3 * r + c] * (row[c] - m - log(s));
    }
    ps = loss_params(true, NONE);
    expect_run(CX_OP_CATEGORICAL_CROSS_ENTROPY, IN(t, zt), 2, &ps, CX_F64, 1, TU_SHAPE(2), lz,
               TOL64);
    /* errors */
    cx_tensor *p2 = mat(CX_F32, 3, 2, yp);
    expect_fail(CX_OP_CATEGORICAL_CROSS_ENTROPY, IN(t, p2), 2, NULL,
                "expected y_true and y_pred to have the same shape", "{2, 3} and {3, 2}");
    cx_tensor *s = tu_tensor(CX_F32, 0, NULL, TU_VALUES(1));
    expect_fail(CX_OP_CATEGORICAL_CROSS_ENTROPY, IN(s, s), 2, NULL, "rank 1 or more");
    ps = loss_params(false, 3);
    expect_fail(CX_OP_CATEGORICAL_CROSS_ENTROPY, IN(t, p), 2, &ps,
                "expected reduction to be one of [:mean, :sum, :none]", "got: 3");
    drop_all(IN(t, p, zt, p2, s), 5);
}

static double bce(double y, double p) {
    p = fmin(fmax(p, 1e-7), 1 - 1e-7);
    return -(y * log(p) + (1 - y) * log1p(-p));
}
static double bce_logits(double y, double x) {
    return fmax(x, 0) - x * y + log1p(exp(-fabs(x)));
}

static void test_binary_cross_entropy(void **state) {
    (void)state;
    /* Axon's example */
    const double yt[] = {0, 1, 1, 0, 1, 0}, yp[] = {0.6811, 0.5565, 0.6551, 0.4551, 0.5422, 0.2648};
    cx_tensor *t = mat(CX_U8, 3, 2, yt), *p = mat(CX_F32, 3, 2, yp);
    double l[3];
    for (int r = 0; r < 3; r++)
        l[r] = (bce(yt[2 * r], yp[2 * r]) + bce(yt[2 * r + 1], yp[2 * r + 1])) / 2;
    cx_params ps = loss_params(false, NONE);
    expect_run(CX_OP_BINARY_CROSS_ENTROPY, IN(t, p), 2, &ps, CX_F32, 1, TU_SHAPE(3), l, 1e-6);
    /* against Axon's documented results */
    expect_run(CX_OP_BINARY_CROSS_ENTROPY, IN(t, p), 2, &ps, CX_F32, 1, TU_SHAPE(3),
               TU_VALUES(0.8644826412200928, 0.5150600075721741, 0.45986634492874146), 1e-6);
    ps = loss_params(false, SUM);
    expect_run(CX_OP_BINARY_CROSS_ENTROPY, IN(t, p), 2, &ps, CX_F32, 0, NULL,
               TU_VALUES(l[0] + l[1] + l[2]), 1e-6);
    /* probabilities of exactly 0 and 1 are clipped: finite losses */
    cx_tensor *edge = vec(CX_F64, 2, TU_VALUES(0, 1)), *ones = vec(CX_F64, 2, TU_VALUES(1, 0));
    ps = loss_params(false, NONE);
    expect_run(CX_OP_BINARY_CROSS_ENTROPY, IN(ones, edge), 2, &ps, CX_F64, 0, NULL,
               TU_VALUES((bce(1, 0) + bce(0, 1)) / 2), 1e-12);
    /* logits: stable for large ones */
    const double x[] = {-100, 100, 0, 3, -2, 40};
    cx_tensor *xt = mat(CX_F32, 3, 2, x);
    double lx = 0;
    for (int k = 0; k < 6; k++) lx += bce_logits(yt[k], x[k]) / 2;
    ps = loss_params(true, MEAN);
    expect_run(CX_OP_BINARY_CROSS_ENTROPY, IN(t, xt), 2, &ps, CX_F32, 0, NULL, TU_VALUES(lx / 3),
               1e-6);
    cx_tensor *big = vec(CX_F32, 2, TU_VALUES(100, -100)), *yb = vec(CX_F32, 2, TU_VALUES(1, 0));
    ps = loss_params(true, NONE);
    cx_tensor *r = tu_run_ok(CX_OP_BINARY_CROSS_ENTROPY, IN(yb, big), 2, &ps);
    double got = tu_load(CX_F32, r->data, 0);
    assert_true(fabs(got - exp(-100)) <= 1e-6 * exp(-100) + 1e-45);
    tu_drop(r);
    /* errors */
    cx_tensor *p1 = vec(CX_F32, 6, yp);
    expect_fail(CX_OP_BINARY_CROSS_ENTROPY, IN(t, p1), 2, NULL, "same shape", "{3, 2} and {6}");
    ps = loss_params(false, -1);
    expect_fail(CX_OP_BINARY_CROSS_ENTROPY, IN(t, p), 2, &ps, "got: -1");
    drop_all(IN(t, p, edge, ones, xt, big, yb, p1), 8);
}

static void test_mean_squared_error(void **state) {
    (void)state;
    /* Axon's example */
    cx_tensor *t = mat(CX_F32, 2, 2, TU_VALUES(0, 1, 0, 0)),
              *p = mat(CX_F32, 2, 2, TU_VALUES(1, 1, 1, 0));
    cx_params ps = loss_params(false, NONE);
    expect_run(CX_OP_MEAN_SQUARED_ERROR, IN(t, p), 2, &ps, CX_F32, 1, TU_SHAPE(2),
               TU_VALUES(0.5, 0.5), 0);
    expect_run(CX_OP_MEAN_SQUARED_ERROR, IN(t, p), 2, NULL, CX_F32, 0, NULL, TU_VALUES(0.5), 0);
    ps = loss_params(false, SUM);
    expect_run(CX_OP_MEAN_SQUARED_ERROR, IN(t, p), 2, &ps, CX_F32, 0, NULL, TU_VALUES(1), 0);
    /* integers give f32; rank 1 has one sample */
    cx_tensor *a = vec(CX_S32, 3, TU_VALUES(1, 2, 3)), *b = vec(CX_S32, 3, TU_VALUES(3, 2, 0));
    ps = loss_params(false, NONE);
    expect_run(CX_OP_MEAN_SQUARED_ERROR, IN(a, b), 2, &ps, CX_F32, 0, NULL, TU_VALUES(13.0 / 3),
               TOL32);
    /* an empty batch: the mean is NaN, the sum 0 */
    cx_tensor *e = tu_tensor(CX_F32, 2, TU_SHAPE(0, 2), NULL);
    expect_run(CX_OP_MEAN_SQUARED_ERROR, IN(e, e), 2, NULL, CX_F32, 0, NULL, TU_VALUES(NAN), 0);
    ps = loss_params(false, SUM);
    expect_run(CX_OP_MEAN_SQUARED_ERROR, IN(e, e), 2, &ps, CX_F32, 0, NULL, TU_VALUES(0), 0);
    expect_fail(CX_OP_MEAN_SQUARED_ERROR, IN(t, a), 2, NULL, "same shape", "{2, 2} and {3}");
    expect_fail(CX_OP_MEAN_SQUARED_ERROR, IN(t), 1, NULL, "expects 2 tensor", "got: 1");
    drop_all(IN(t, p, a, b, e), 5);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_plans_are_primitive_steps),
        cmocka_unit_test(test_results_match_inference),
        cmocka_unit_test(test_softmax_and_log_softmax),
        cmocka_unit_test(test_logsumexp),
        cmocka_unit_test(test_mean),
        cmocka_unit_test(test_variance_and_standard_deviation),
        cmocka_unit_test(test_relu),
        cmocka_unit_test(test_leaky_relu_and_elu),
        cmocka_unit_test(test_gelu),
        cmocka_unit_test(test_silu_softplus_hard_sigmoid),
        cmocka_unit_test(test_layer_norm),
        cmocka_unit_test(test_batch_norm),
        cmocka_unit_test(test_dense),
        cmocka_unit_test(test_one_hot),
        cmocka_unit_test(test_categorical_cross_entropy),
        cmocka_unit_test(test_binary_cross_entropy),
        cmocka_unit_test(test_mean_squared_error),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
