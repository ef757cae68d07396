/* The negotiation, through the test driver (c_src/drivers/test), loaded with dlopen as any
 * optional driver: every route (native, decomposed, moved to the cpu, refused by the policy),
 * the shape refinement, explain, capabilities, stats, warnings, transfers, and drivers that do
 * not load. */
#include <stdio.h>

#include "test_util.h"

#include "../core/graph.h"

static cx_device *test_dev, *test_dev1, *cpu;

static int setup(void **state) {
    (void)state;
    static const cx_driver_spec specs[] = {
        {"test", CX_TEST_DRIVER},
        {"missing", "/nonexistent/cascade_driver_missing.so"},
        {"libc", "/lib/x86_64-linux-gnu/libc.so.6"},
        {"broken", "/dev/null"},
    };
    cx_status st = {0};
    if (cx_devices_init(specs, 4, &st) != CX_OK) return -1;
    cpu = cx_device_find("cpu");
    test_dev = cx_device_find("test");
    test_dev1 = cx_device_find("test:1");
    return cpu && test_dev && test_dev1 ? 0 : -1;
}

/* A tensor on `dev` holding `values`, made on the cpu and transferred. */
static cx_tensor *on(cx_device *dev, cx_dtype t, int rank, const int64_t *shape,
                     const double *values) {
    cx_tensor *x = tu_tensor(t, rank, shape, values);
    if (dev == cpu) return x;
    cx_tensor *y = malloc(sizeof *y);
    cx_status st = {0};
    assert_int_equal(cx_transfer(x, dev, y, &st), CX_OK);
    tu_drop(x);
    return y;
}

/* `x` copied back to the cpu (x is dropped). */
static cx_tensor *back(cx_tensor *x) {
    if (x->device == cpu) return x;
    cx_tensor *y = malloc(sizeof *y);
    cx_status st = {0};
    assert_int_equal(cx_transfer(x, cpu, y, &st), CX_OK);
    tu_drop(x);
    return y;
}

static cx_tensor *run_on(cx_device *dev, cx_op_id op, cx_tensor **in, int n, cx_params *ps,
                         cx_status *st) {
    cx_tensor *out = malloc(sizeof *out);
    cx_params empty = {0};
    if (cx_run(op, dev, in, n, ps ? ps : &empty, out, st) != CX_OK) {
        free(out);
        return NULL;
    }
    return out;
}

static long long calls(cx_device *dev, cx_op_id op, cx_route r) {
    return cx_stats_get(dev->id, op, r).calls;
}

static void drain_warnings(void) {
    char buf[512];
    while (cx_warning_take(buf, sizeof buf)) {
    }
}

static void test_devices(void **state) {
    (void)state;
    assert_int_equal(cpu->id, 0);
    assert_true(cpu->available && cpu->props.host_memory);
    assert_string_equal(cpu->props.kind, "cpu");
    assert_true(test_dev->available && test_dev1->available);
    assert_false(test_dev->props.host_memory);
    assert_string_equal(test_dev->props.kind, "test");
    assert_int_equal(test_dev1->index, 1);
    assert_string_equal(test_dev1->driver_name, "test");
    cx_device *missing = cx_device_find("missing");
    assert_non_null(missing);
    assert_false(missing->available);
    assert_non_null(strstr(missing->reason, "not built"));
    assert_non_null(strstr(missing->reason, "/nonexistent/cascade_driver_missing.so"));
    cx_device *libc = cx_device_find("libc");
    assert_non_null(libc);
    assert_false(libc->available);
    assert_non_null(strstr(libc->reason, "cx_driver_entry"));
    cx_device *broken = cx_device_find("broken");
    assert_false(broken->available);
    assert_non_null(strstr(broken->reason, "could not load the driver: /dev/null"));
    /* creating on an unavailable device fails cleanly */
    cx_tensor t;
    cx_desc d = tu_desc(CX_F32, 1, TU_SHAPE(2));
    cx_status st = {0};
    assert_int_equal(cx_tensor_init(&t, missing, &d, &st), CX_EDEVICE);
}

static void test_native(void **state) {
    (void)state;
    cx_tensor *in[2] = {on(test_dev, CX_F32, 1, TU_SHAPE(3), TU_VALUES(1, 2, 3)),
                        on(test_dev, CX_F32, 1, TU_SHAPE(3), TU_VALUES(10, 20, 30))};
    long long before = calls(test_dev, CX_OP_ADD, CX_ROUTE_NATIVE);
    long long fb = calls(test_dev, CX_OP_ADD, CX_ROUTE_FALLBACK);
    cx_status st = {0};
    cx_tensor *out = run_on(test_dev, CX_OP_ADD, in, 2, NULL, &st);
    assert_non_null(out);
    assert_ptr_equal(out->device, test_dev);
    out = back(out);
    tu_expect(out, CX_F32, 1, TU_SHAPE(3), TU_VALUES(11, 22, 33), 0);
    assert_int_equal(calls(test_dev, CX_OP_ADD, CX_ROUTE_NATIVE), before + 1);
    assert_int_equal(calls(test_dev, CX_OP_ADD, CX_ROUTE_FALLBACK), fb);
    tu_drop(out);
    tu_drop(in[0]);
    tu_drop(in[1]);
}

static void test_fallback_counts_and_warns_once(void **state) {
    (void)state;
    cx_set_policy(CX_POLICY_WARN);
    drain_warnings();
    cx_tensor *x = on(test_dev, CX_F32, 1, TU_SHAPE(3), TU_VALUES(0, 0.5, -1));
    cx_stat before = cx_stats_get(test_dev->id, CX_OP_ERF, CX_ROUTE_FALLBACK);
    cx_status st = {0};
    cx_tensor *out = run_on(test_dev, CX_OP_ERF, &x, 1, NULL, &st);
    assert_non_null(out);
    assert_ptr_equal(out->device, test_dev);
    out = back(out);
    tu_expect(out, CX_F32, 1, TU_SHAPE(3), TU_VALUES(0, erf(0.5), erf(-1.0)), 1e-6);
    cx_stat after = cx_stats_get(test_dev->id, CX_OP_ERF, CX_ROUTE_FALLBACK);
    assert_int_equal(after.calls, before.calls + 1);
    assert_int_equal(after.bytes - before.bytes, 12 + 12); /* in to the cpu, result back */
    assert_true(cx_warnings_pending() > 0);
    char msg[512];
    assert_true(cx_warning_take(msg, sizeof msg));
    assert_non_null(strstr(msg, "erf on test ran on the cpu"));
    assert_non_null(strstr(msg, "24 bytes"));
    tu_drop(out);
    /* the same (device, op, type, reason) again: counted, not reported again */
    out = run_on(test_dev, CX_OP_ERF, &x, 1, NULL, &st);
    assert_non_null(out);
    assert_int_equal(cx_warnings_pending(), 0);
    tu_drop(out);
    tu_drop(x);
}

static void test_policy_error_moves_nothing(void **state) {
    (void)state;
    cx_tensor *x = on(test_dev, CX_F32, 1, TU_SHAPE(2), TU_VALUES(1, 2));
    cx_set_policy(CX_POLICY_ERROR);
    cx_stat before = cx_stats_get(test_dev->id, CX_OP_ERF, CX_ROUTE_FALLBACK);
    long long cpu_before = calls(cpu, CX_OP_ERF, CX_ROUTE_NATIVE);
    cx_status st = {0};
    assert_null(run_on(test_dev, CX_OP_ERF, &x, 1, NULL, &st));
    assert_int_equal(st.code, CX_EUNSUPPORTED);
    assert_non_null(strstr(st.message, "fallback policy is :error"));
    assert_non_null(strstr(st.message, "no native erf for f32"));
    assert_int_equal(cx_stats_get(test_dev->id, CX_OP_ERF, CX_ROUTE_FALLBACK).calls, before.calls);
    assert_int_equal(calls(cpu, CX_OP_ERF, CX_ROUTE_NATIVE), cpu_before);
    /* native ops are not affected */
    cx_tensor *in[2] = {x, x};
    cx_tensor *out = run_on(test_dev, CX_OP_ADD, in, 2, NULL, &st);
    assert_non_null(out);
    tu_drop(out);
    cx_set_policy(CX_POLICY_WARN);
    tu_drop(x);
}

static void test_half_types_fall_back(void **state) {
    (void)state;
    cx_tensor *in[2] = {on(test_dev, CX_F16, 1, TU_SHAPE(2), TU_VALUES(1.5, 2)),
                        on(test_dev, CX_F16, 1, TU_SHAPE(2), TU_VALUES(0.25, 4))};
    cx_plan plan;
    cx_params ps = {0};
    cx_status st = {0};
    assert_int_equal(
        cx_plan_op(CX_OP_ADD, test_dev, (const cx_tensor *const *)in, 2, &ps, &plan, &st), CX_OK);
    assert_int_equal(plan.route, CX_ROUTE_FALLBACK);
    assert_non_null(strstr(plan.reason, "no native add for f16, f16"));
    cx_tensor *out = back(run_on(test_dev, CX_OP_ADD, in, 2, NULL, &st));
    tu_expect(out, CX_F16, 1, TU_SHAPE(2), TU_VALUES(1.75, 6), 0);
    tu_drop(out);
    tu_drop(in[0]);
    tu_drop(in[1]);
}

static cx_tensor *softmax_on(cx_device *dev, cx_dtype t) {
    cx_tensor *x = on(dev, t, 2, TU_SHAPE(2, 3), TU_VALUES(1, 2, 3, -1, 0, 1000));
    cx_params ps = {0};
    cx_status st = {0};
    cx_tensor *out = run_on(dev, CX_OP_SOFTMAX, &x, 1, &ps, &st);
    if (!out) fail_msg("softmax on %s: %s", dev->name, st.message);
    tu_drop(x);
    return back(out);
}

static void test_decomposed_on_the_device(void **state) {
    (void)state;
    long long exp_native = calls(test_dev, CX_OP_EXP, CX_ROUTE_NATIVE);
    long long dec = calls(test_dev, CX_OP_SOFTMAX, CX_ROUTE_DECOMPOSED);
    long long cpu_exp = calls(cpu, CX_OP_EXP, CX_ROUTE_NATIVE);
    cx_tensor *got = softmax_on(test_dev, CX_F32);
    assert_int_equal(calls(test_dev, CX_OP_SOFTMAX, CX_ROUTE_DECOMPOSED), dec + 1);
    assert_int_equal(calls(test_dev, CX_OP_EXP, CX_ROUTE_NATIVE), exp_native + 1);
    assert_int_equal(calls(cpu, CX_OP_EXP, CX_ROUTE_NATIVE), cpu_exp); /* nothing moved */
    cx_tensor *want = softmax_on(cpu, CX_F32);
    assert_memory_equal(got->data, want->data, got->nbytes);
    double e1 = exp(-2.0), e2 = exp(-1.0), s = e1 + e2 + 1;
    tu_expect(got, CX_F32, 2, TU_SHAPE(2, 3), TU_VALUES(e1 / s, e2 / s, 1 / s, 0, 0, 1), 1e-6);
    tu_drop(got);
    tu_drop(want);
    /* in f16 the device runs no step natively: the composite moves once, as a whole (12 bytes
     * there, 12 back), instead of every step moving */
    long long fb = calls(test_dev, CX_OP_EXP, CX_ROUTE_FALLBACK);
    cx_stat whole = cx_stats_get(test_dev->id, CX_OP_SOFTMAX, CX_ROUTE_FALLBACK);
    got = softmax_on(test_dev, CX_F16);
    want = softmax_on(cpu, CX_F16);
    assert_memory_equal(got->data, want->data, got->nbytes);
    assert_int_equal(calls(test_dev, CX_OP_EXP, CX_ROUTE_FALLBACK), fb);
    cx_stat after = cx_stats_get(test_dev->id, CX_OP_SOFTMAX, CX_ROUTE_FALLBACK);
    assert_int_equal(after.calls, whole.calls + 1);
    assert_int_equal(after.bytes - whole.bytes, 24);
    tu_drop(got);
    tu_drop(want);
    drain_warnings();
}

static void test_explain(void **state) {
    (void)state;
    cx_desc in = tu_desc(CX_F32, 2, TU_SHAPE(4, 5));
    cx_params ps = {0};
    cx_explain ex = {0};
    cx_status st = {0};
    long long before = calls(test_dev, CX_OP_SOFTMAX, CX_ROUTE_DECOMPOSED);
    assert_int_equal(cx_explain_op(CX_OP_SOFTMAX, test_dev, &in, 1, &ps, &ex, &st), CX_OK);
    assert_int_equal(calls(test_dev, CX_OP_SOFTMAX, CX_ROUTE_DECOMPOSED), before); /* not run */
    assert_true(ex.n >= 5);
    assert_int_equal(ex.steps[0].depth, 0);
    assert_int_equal(ex.steps[0].route, CX_ROUTE_DECOMPOSED);
    assert_non_null(strstr(ex.steps[0].reason, "no native softmax for f32"));
    bool saw_max = false, saw_exp = false, saw_div = false;
    for (int k = 1; k < ex.n; k++) {
        assert_int_equal(ex.steps[k].depth, 1);
        assert_int_equal(ex.steps[k].route, CX_ROUTE_NATIVE);
        assert_ptr_equal(ex.steps[k].device, test_dev);
        saw_max |= ex.steps[k].op == CX_OP_REDUCE_MAX;
        saw_exp |= ex.steps[k].op == CX_OP_EXP;
        saw_div |= ex.steps[k].op == CX_OP_DIVIDE;
    }
    assert_true(saw_max && saw_exp && saw_div);
    cx_explain_free(&ex);
    /* f16: no step would run on the device, so the whole op moves, once */
    in.dtype = CX_F16;
    assert_int_equal(cx_explain_op(CX_OP_SOFTMAX, test_dev, &in, 1, &ps, &ex, &st), CX_OK);
    assert_int_equal(ex.n, 1);
    assert_int_equal(ex.steps[0].route, CX_ROUTE_FALLBACK);
    assert_int_equal(ex.steps[0].bytes_moved, 40 + 40);
    assert_non_null(strstr(ex.steps[0].reason, "nor any step of its decomposition"));
    cx_explain_free(&ex);
    /* log_softmax on f64: some steps native there (exp...), so it is decomposed */
    int lsm = cx_op_find("log_softmax");
    if (lsm >= 0) {
        in.dtype = CX_F64;
        assert_int_equal(cx_explain_op((cx_op_id)lsm, test_dev, &in, 1, &ps, &ex, &st), CX_OK);
        assert_int_equal(ex.steps[0].route, CX_ROUTE_DECOMPOSED);
        cx_explain_free(&ex);
    }
    /* bad input: the message of inference, nothing recorded past it */
    in = tu_desc(CX_F32, 0, NULL);
    assert_int_equal(cx_explain_op(CX_OP_SOFTMAX, test_dev, &in, 1, &ps, &ex, &st), CX_EINVAL);
    assert_non_null(strstr(st.message, "softmax"));
    cx_explain_free(&ex);
}

static void dot_params(cx_params *ps) {
    ps->set = 0;
    cx_param_put_ints(ps, CX_P_CONTRACT_A, TU_SHAPE(1), 1);
    cx_param_put_ints(ps, CX_P_BATCH_A, NULL, 0);
    cx_param_put_ints(ps, CX_P_CONTRACT_B, TU_SHAPE(0), 1);
    cx_param_put_ints(ps, CX_P_BATCH_B, NULL, 0);
}

static void test_shape_refinement(void **state) {
    (void)state;
    cx_status st = {0};
    cx_params ps;
    for (int k = 0; k < 2; k++) {
        int64_t inner = k == 0 ? 4 : 100;
        double *va = calloc((size_t)(2 * inner), sizeof(double));
        double *vb = calloc((size_t)inner, sizeof(double));
        for (int64_t j = 0; j < inner; j++) {
            va[j] = 1;
            va[inner + j] = (double)j;
            vb[j] = 2;
        }
        cx_tensor *in[2] = {on(test_dev, CX_F32, 2, TU_SHAPE(2, inner), va),
                            on(test_dev, CX_F32, 2, TU_SHAPE(inner, 1), vb)};
        cx_plan plan;
        dot_params(&ps);
        assert_int_equal(
            cx_plan_op(CX_OP_DOT, test_dev, (const cx_tensor *const *)in, 2, &ps, &plan, &st),
            CX_OK);
        if (k == 0) {
            assert_int_equal(plan.route, CX_ROUTE_NATIVE);
        } else {
            assert_int_equal(plan.route, CX_ROUTE_FALLBACK);
            assert_non_null(strstr(plan.reason, "dot contracts 100 elements"));
        }
        dot_params(&ps);
        cx_tensor *out = back(run_on(test_dev, CX_OP_DOT, in, 2, &ps, &st));
        double s = (double)(inner * (inner - 1)); /* 2 * sum of 0..inner-1 */
        tu_expect(out, CX_F32, 2, TU_SHAPE(2, 1), TU_VALUES(2.0 * (double)inner, s), 0);
        tu_drop(out);
        tu_drop(in[0]);
        tu_drop(in[1]);
        free(va);
        free(vb);
    }
    drain_warnings();
}

static void test_native_composite(void **state) {
    (void)state;
    int relu = cx_op_find("relu");
    if (relu < 0) skip();
    cx_tensor *x = on(test_dev, CX_F32, 1, TU_SHAPE(4), TU_VALUES(-1, 0, 2, -0.5));
    long long native = calls(test_dev, (cx_op_id)relu, CX_ROUTE_NATIVE);
    cx_status st = {0};
    cx_tensor *out = back(run_on(test_dev, (cx_op_id)relu, &x, 1, NULL, &st));
    tu_expect(out, CX_F32, 1, TU_SHAPE(4), TU_VALUES(0, 0, 2, 0), 0);
    assert_int_equal(calls(test_dev, (cx_op_id)relu, CX_ROUTE_NATIVE), native + 1);
    tu_drop(out);
    tu_drop(x);
}

static void test_capabilities(void **state) {
    (void)state;
    cx_route r;
    cx_explain ex = {0};
    cx_status st = {0};
    assert_int_equal(cx_capability(test_dev, CX_OP_ERF, CX_F32, &r, &ex, &st), CX_OK);
    assert_int_equal(r, CX_ROUTE_FALLBACK);
    cx_explain_free(&ex);
    assert_int_equal(cx_capability(test_dev, CX_OP_ADD, CX_F32, &r, &ex, &st), CX_OK);
    assert_int_equal(r, CX_ROUTE_NATIVE);
    cx_explain_free(&ex);
    assert_int_equal(cx_capability(test_dev, CX_OP_ADD, CX_BF16, &r, &ex, &st), CX_OK);
    assert_int_equal(r, CX_ROUTE_FALLBACK);
    cx_explain_free(&ex);
    assert_int_equal(cx_capability(test_dev, CX_OP_DOT, CX_F32, &r, &ex, &st), CX_OK);
    assert_int_equal(r, CX_ROUTE_NATIVE);
    assert_non_null(strstr(ex.steps[0].reason, "some shapes"));
    cx_explain_free(&ex);
    for (int op = 0; op < CX_OP_COUNT; op++) {
        if (cx_op_table[op].kind != CX_KIND_COMPOSITE) continue;
        for (int t = 0; t < CX_DTYPE_COUNT; t++) {
            cx_code rc = cx_capability(cpu, (cx_op_id)op, (cx_dtype)t, &r, &ex, &st);
            if (rc == CX_OK) {
                /* on the cpu every composite is its decomposition into primitives, all native */
                assert_int_equal(r, CX_ROUTE_DECOMPOSED);
                for (int k = 1; k < ex.n; k++)
                    if (ex.steps[k].depth == 1 &&
                        cx_op_table[ex.steps[k].op].kind != CX_KIND_COMPOSITE)
                        assert_int_equal(ex.steps[k].route, CX_ROUTE_NATIVE);
            } else {
                assert_int_equal(rc, CX_EINVAL); /* a type the op does not take */
            }
            cx_explain_free(&ex);
        }
    }
}

/* The dispatcher keeps each driver's answers in a memo keyed by (device, op, types, ranks). Its
 * keys once shifted their fields in one after another, so that a creation op's key on one
 * device could equal a unary op's on another, and an answer was read for the wrong question,
 * depending on which was asked first. Every (device, op, type) the capability tables ask is
 * checked here against the driver's own answer, in two orders, the devices interleaved. */
static void check_against_driver(cx_device *dev, cx_op_id op, cx_dtype t) {
    cx_route r;
    cx_explain ex = {0};
    cx_status st = {0};
    cx_code rc = cx_capability(dev, op, t, &r, &ex, &st);
    cx_explain_free(&ex);
    if (rc != CX_OK) return; /* a type the op does not take */
    cx_dtype types[3] = {t, t, t};
    int n = cx_op_tensor_arity(op);
    if (n < 0) n = 2;
    if (n > 3) n = 3;
    if (strstr(cx_op_table[op].args, ":indices")) types[n - 1] = CX_S64;
    if (strstr(cx_op_table[op].args, ":pred")) types[0] = CX_U8;
    cx_cap direct = dev->driver->capability(dev->ctx, op, types, n);
    cx_route want = direct != CX_CAP_NO || dev == cpu ? CX_ROUTE_NATIVE : CX_ROUTE_FALLBACK;
    if (r != want)
        fail_msg("%s %s %s: the memo says %s, the driver %d", dev->name, cx_op_table[op].name,
                 cx_dtype_name(t), cx_route_name(r), (int)direct);
}

static void test_memo_answers_each_question(void **state) {
    (void)state;
    cx_device *devs[] = {test_dev, cpu, test_dev1};
    for (int pass = 0; pass < 2; pass++)
        for (int i = 0; i < CX_OP_COUNT; i++) {
            int op = pass ? CX_OP_COUNT - 1 - i : i;
            if (cx_op_table[op].kind == CX_KIND_COMPOSITE) continue;
            for (int t = 0; t < CX_DTYPE_COUNT; t++)
                for (int d = 0; d < 3; d++)
                    check_against_driver(devs[d], (cx_op_id)op, (cx_dtype)t);
        }
}

static void test_transfer(void **state) {
    (void)state;
    cx_tensor *x = tu_tensor(CX_S32, 2, TU_SHAPE(2, 2), TU_VALUES(1, -2, 3, 4));
    cx_tensor a, b, c, d;
    cx_status st = {0};
    long long before = cx_stats_get(test_dev1->id, CX_OP_COUNT, CX_ROUTE_NATIVE).bytes;
    assert_int_equal(cx_transfer(x, test_dev, &a, &st), CX_OK);
    assert_int_equal(cx_transfer(&a, test_dev1, &b, &st), CX_OK);
    assert_int_equal(cx_transfer(&b, cpu, &c, &st), CX_OK);
    assert_int_equal(cx_stats_get(test_dev1->id, CX_OP_COUNT, CX_ROUTE_NATIVE).bytes - before, 16);
    assert_ptr_equal(b.device, test_dev1);
    assert_memory_equal(c.data, x->data, 16);
    /* mixing devices in one op is refused, naming both */
    cx_tensor *in[2] = {x, &a};
    cx_plan plan;
    cx_params ps = {0};
    assert_int_equal(cx_plan_op(CX_OP_ADD, cpu, (const cx_tensor *const *)in, 2, &ps, &plan, &st),
                     CX_EINVAL);
    assert_non_null(strstr(st.message, "cpu and test"));
    /* a freed tensor cannot be transferred */
    cx_tensor_free(&a);
    assert_int_equal(cx_transfer(&a, cpu, &d, &st), CX_EFREED);
    cx_tensor_free(&b);
    cx_tensor_free(&c);
    tu_drop(x);
}

static void test_stats_reset(void **state) {
    (void)state;
    cx_tensor *in[2] = {on(test_dev, CX_F32, 1, TU_SHAPE(1), TU_VALUES(1)),
                        on(test_dev, CX_F32, 1, TU_SHAPE(1), TU_VALUES(2))};
    cx_status st = {0};
    tu_drop(run_on(test_dev, CX_OP_MULTIPLY, in, 2, NULL, &st));
    assert_true(calls(test_dev, CX_OP_MULTIPLY, CX_ROUTE_NATIVE) > 0);
    cx_stats_reset();
    assert_int_equal(calls(test_dev, CX_OP_MULTIPLY, CX_ROUTE_NATIVE), 0);
    tu_drop(in[0]);
    tu_drop(in[1]);
}

static void assert_same_plan(const cx_plan *a, const cx_plan *b, int n_in) {
    assert_int_equal(a->op, b->op);
    assert_ptr_equal(a->device, b->device);
    assert_int_equal(a->route, b->route);
    assert_int_equal(a->out.dtype, b->out.dtype);
    assert_int_equal(a->out.rank, b->out.rank);
    for (int k = 0; k < a->out.rank; k++) assert_int_equal(a->out.shape[k], b->out.shape[k]);
    for (int k = 0; k < n_in; k++) assert_int_equal(a->compute[k], b->compute[k]);
    assert_true(a->cost == b->cost);
    assert_string_equal(a->library ? a->library : "-", b->library ? b->library : "-");
    assert_string_equal(a->reason, b->reason);
}

/* The plan cache (dispatch.c) answers a repeated elementwise call as planning it the first
 * time did, and keeps apart calls that differ only in the device, the op, a type, a rank or a
 * dimension; more calls than it has slots take turns. */
static void test_plan_cache_answers_as_planning(void **state) {
    (void)state;
    enum { N = 12 };
    static const struct {
        int dev; /* 0 cpu, 1 test */
        cx_op_id op;
        int n_in;
        cx_desc in[3];
    } c[N] = {
        {0, CX_OP_ADD, 2, {{CX_F32, 1, {7}}, {CX_F32, 1, {7}}}},
        {1, CX_OP_ADD, 2, {{CX_F32, 1, {7}}, {CX_F32, 1, {7}}}},
        {0, CX_OP_SUBTRACT, 2, {{CX_F32, 1, {7}}, {CX_F32, 1, {7}}}},
        {0, CX_OP_ADD, 2, {{CX_F64, 1, {7}}, {CX_F32, 1, {7}}}},
        {0, CX_OP_ADD, 2, {{CX_F32, 2, {7, 1}}, {CX_F32, 1, {7}}}},
        {0, CX_OP_ADD, 2, {{CX_F32, 1, {1}}, {CX_F32, 1, {7}}}},
        {0, CX_OP_ADD, 2, {{CX_S32, 0, {0}}, {CX_F16, 2, {3, 7}}}},
        {0, CX_OP_EXP, 1, {{CX_S32, 1, {7}}}},
        {1, CX_OP_EXP, 1, {{CX_F16, 1, {7}}}},
        {0, CX_OP_LESS, 2, {{CX_U8, 1, {7}}, {CX_S64, 1, {7}}}},
        {0, CX_OP_SELECT, 3, {{CX_U8, 1, {7}}, {CX_F32, 0, {0}}, {CX_BF16, 1, {7}}}},
        {1, CX_OP_MULTIPLY, 2, {{CX_F32, 1, {7}}, {CX_F32, 1, {8}}}}, /* refused: no plan */
    };
    cx_plan first[N];
    cx_code first_rc[N];
    for (int round = 0; round < 3; round++)
        for (int i = 0; i < N; i++)
            for (int again = 0; again < 2; again++) {
                cx_params ps = {0};
                cx_status st = {0};
                cx_plan plan;
                cx_device *dev = c[i].dev ? test_dev : cpu;
                cx_code rc = cx_plan_descs(c[i].op, dev, c[i].in, c[i].n_in, &ps, &plan, &st);
                if (round == 0 && again == 0) {
                    first_rc[i] = rc;
                    first[i] = plan;
                    continue;
                }
                assert_int_equal(rc, first_rc[i]);
                if (rc == CX_OK) assert_same_plan(&plan, &first[i], c[i].n_in);
            }
    assert_int_equal(first_rc[N - 1], CX_EINVAL);
    assert_int_equal(first[4].out.rank, 2);
    assert_int_equal(first[3].out.dtype, CX_F64);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_devices),
        cmocka_unit_test(test_native),
        cmocka_unit_test(test_fallback_counts_and_warns_once),
        cmocka_unit_test(test_policy_error_moves_nothing),
        cmocka_unit_test(test_half_types_fall_back),
        cmocka_unit_test(test_decomposed_on_the_device),
        cmocka_unit_test(test_explain),
        cmocka_unit_test(test_shape_refinement),
        cmocka_unit_test(test_native_composite),
        cmocka_unit_test(test_capabilities),
        cmocka_unit_test(test_memo_answers_each_question),
        cmocka_unit_test(test_transfer),
        cmocka_unit_test(test_stats_reset),
        cmocka_unit_test(test_plan_cache_answers_as_planning),
    };
    return cmocka_run_group_tests(tests, setup, NULL);
}
