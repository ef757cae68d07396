/* The opencl driver (c_src/drivers/opencl), loaded with dlopen from the build directory as the
 * application loads it from priv/: every op it claims is run on the OpenCL device and on the
 * cpu with the same inputs, must be planned native there, and must agree; 16 threads at once
 * must each get their own results. Without an OpenCL platform (or without the driver built)
 * every test is skipped with the reason printed.
 *
 * PoCL caches compiled kernels in POCL_CACHE_DIR; it is set to build/pocl-cache unless the
 * caller set it, so that only the first run pays for the kernel builds. */
#include <pthread.h>
#include <stdio.h>

#if __has_include(<valgrind/valgrind.h>)
#include <valgrind/valgrind.h>
#else
#define RUNNING_ON_VALGRIND 0
#endif

#include "test_util.h"

/* Under AddressSanitizer, LeakSanitizer's end-of-process scan crashes in its own tracer while
 * PoCL's device threads are still alive ("Tracer caught signal 11"), after every test passed.
 * Leak detection is off for this program only; address and UBSan checks stay on. */
__attribute__((visibility("default"), used)) const char *__asan_default_options(void) {
    return "detect_leaks=0";
}

static cx_device *cpu, *ocl;
static char skip_reason[320];

static int setup(void **state) {
    (void)state;
    /* under valgrind most of the code run would be PoCL's LLVM compiler, not the driver; the
     * driver's host code is checked with ASan/UBSan (make test-asan) instead */
    if (RUNNING_ON_VALGRIND) {
        printf("test_opencl: skipped under valgrind (PoCL's LLVM would be most of what runs); "
               "checked with ASan/UBSan instead\n");
        return 0;
    }
    setenv("POCL_CACHE_DIR", CX_BUILD_DIR "/pocl-cache", 0);
    static const cx_driver_spec specs[] = {{"opencl", CX_BUILD_DIR "/cascade_driver_opencl.so"}};
    cx_status st = {0};
    if (cx_devices_init(specs, 1, &st) != CX_OK) return -1;
    cpu = cx_device_find("cpu");
    ocl = cx_device_find("opencl");
    if (!ocl || !ocl->available) {
        for (int k = 0; k < cx_device_count(); k++) {
            cx_device *d = cx_device_get(k);
            if (strcmp(d->driver_name, "opencl") == 0 && !d->available)
                snprintf(skip_reason, sizeof skip_reason, "%s", d->reason);
        }
        if (!skip_reason[0]) snprintf(skip_reason, sizeof skip_reason, "no opencl device");
        printf("test_opencl: skipped, the opencl driver is unavailable: %s\n", skip_reason);
        ocl = NULL;
    }
    cx_set_policy(CX_POLICY_ALLOW);
    return 0;
}

#define NEED_DEVICE                                                                                \
    do {                                                                                           \
        if (!ocl) skip();                                                                          \
    } while (0)

/* Deterministic inputs: a mix of ordinary values and, for floats, the special ones. */
static uint64_t rng = 0x9E3779B97F4A7C15u;
static double next_value(cx_dtype t, bool specials) {
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    int r = (int)(rng % 1000);
    if (!cx_dtype_is_float(t)) return t == CX_U8 ? r % 7 : r % 13 - 6;
    if (specials && r < 20) return (double[]){0.0, -0.0, INFINITY, -INFINITY, NAN}[r % 5];
    return (r - 500) / 97.0;
}

static cx_tensor *random_tensor(cx_dtype t, int rank, const int64_t *shape, bool specials) {
    int64_t n = 1;
    for (int k = 0; k < rank; k++) n *= shape[k];
    double *v = malloc(sizeof(double) * (size_t)(n ? n : 1));
    for (int64_t i = 0; i < n; i++) v[i] = next_value(t, specials);
    cx_tensor *x = tu_tensor(t, rank, shape, v);
    free(v);
    return x;
}

static cx_tensor *moved(cx_tensor *x, cx_device *to) {
    cx_tensor *y = malloc(sizeof *y);
    cx_status st = {0};
    if (cx_transfer(x, to, y, &st) != CX_OK) fail_msg("transfer: %s", st.message);
    return y;
}

/* Relative tolerance of the opencl result for a type (its compute type's rounding, a few ulps). */
static double tolerance(cx_dtype t, double scale) {
    switch (t) {
    case CX_F16: return scale * 2e-3;
    case CX_BF16: return scale * 1.6e-2;
    case CX_F32: return scale * 4e-6;
    case CX_F64: return scale * 1e-13;
    default: return 0;
    }
}

/* Runs op on the cpu and on the opencl device, asserts the opencl plan is native and the
 * results agree within tol (relative; exact for integers). */
static void check(cx_op_id op, cx_tensor **in, int n, const cx_params *ps0, double scale) {
    cx_tensor *din[4] = {NULL};
    for (int j = 0; j < n; j++) din[j] = moved(in[j], ocl);
    cx_params ps = ps0 ? *ps0 : (cx_params){0};
    cx_params ps_cpu = ps;
    cx_plan plan;
    cx_status st = {0};
    if (cx_plan_op(op, ocl, (const cx_tensor *const *)din, n, &ps, &plan, &st) != CX_OK)
        fail_msg("%s: plan: %s", cx_op_table[op].name, st.message);
    if (plan.route != CX_ROUTE_NATIVE)
        fail_msg("%s on %s: planned %s, not native (%s)", cx_op_table[op].name,
                 cx_dtype_name(n ? in[0]->desc.dtype : plan.out.dtype), cx_route_name(plan.route),
                 plan.reason);
    cx_tensor got, want;
    if (cx_run_plan(&plan, din, n, &ps, &got, &st) != CX_OK)
        fail_msg("%s on opencl: %s", cx_op_table[op].name, st.message);
    if (cx_run(op, cpu, in, n, &ps_cpu, &want, &st) != CX_OK)
        fail_msg("%s on cpu: %s", cx_op_table[op].name, st.message);
    assert_ptr_equal(got.device, ocl);
    cx_tensor *back = moved(&got, cpu);
    cx_dtype t = want.desc.dtype;
    assert_int_equal(back->desc.dtype, t);
    assert_int_equal(back->desc.rank, want.desc.rank);
    for (int k = 0; k < want.desc.rank; k++)
        assert_int_equal(back->desc.shape[k], want.desc.shape[k]);
    double tol = tolerance(t, scale);
    for (int64_t i = 0; i < want.numel; i++) {
        double a = tu_load(t, back->data, i), b = tu_load(t, want.data, i);
        if (isnan(a) && isnan(b)) continue;
        if (a == b) continue;
        if (isinf(a) || isinf(b) || !(fabs(a - b) <= tol * (1 + fabs(b))))
            fail_msg("%s on %s, element %lld of %lld: opencl %.17g, cpu %.17g",
                     cx_op_table[op].name, cx_dtype_name(n ? in[0]->desc.dtype : t), (long long)i,
                     (long long)want.numel, a, b);
    }
    tu_drop(back);
    cx_tensor_free(&got);
    cx_tensor_free(&want);
    for (int j = 0; j < n; j++) tu_drop(din[j]);
}

static const cx_dtype all_types[] = {CX_F16, CX_BF16, CX_F32, CX_F64, CX_U8, CX_S32, CX_S64};
#define N_TYPES ((int)(sizeof all_types / sizeof all_types[0]))

static bool claimed(cx_op_id op, cx_dtype t) {
    cx_route route;
    cx_status st = {0};
    cx_explain steps = {0};
    cx_code rc = cx_capability(ocl, op, t, &route, &steps, &st);
    cx_explain_free(&steps);
    return rc == CX_OK && route == CX_ROUTE_NATIVE;
}

static void test_device_properties(void **state) {
    NEED_DEVICE;
    assert_false(ocl->props.host_memory);
    assert_true(ocl->props.memory > 0);
    assert_non_null(strstr(ocl->props.detail, "f16"));
    assert_true(strcmp(ocl->props.kind, "cpu") == 0 || strcmp(ocl->props.kind, "gpu") == 0 ||
                strcmp(ocl->props.kind, "accelerator") == 0);
    /* bf16 is computed in f32 like f16; its composites decompose into those kernels */
    assert_true(claimed(CX_OP_ADD, CX_BF16));
    assert_false(claimed(CX_OP_SOFTMAX, CX_BF16));
}

static void test_elementwise(void **state) {
    NEED_DEVICE;
    static const int64_t same[] = {3, 7}, row[] = {1, 7}, col[] = {3, 1}, wide[] = {2, 3, 5},
                         last[] = {5};
    int checked = 0;
    for (int op = 0; op < CX_OP_COUNT; op++) {
        cx_op_kind kind = cx_op_table[op].kind;
        if (kind != CX_KIND_UNARY && kind != CX_KIND_UNARY_FLOAT && kind != CX_KIND_BINARY &&
            kind != CX_KIND_BINARY_FLOAT && kind != CX_KIND_COMPARE && kind != CX_KIND_LOGICAL)
            continue;
        int arity = cx_op_tensor_arity((cx_op_id)op);
        for (int k = 0; k < N_TYPES; k++) {
            cx_dtype t = all_types[k];
            if (!claimed((cx_op_id)op, t)) continue;
            /* integer pow: small exponents */
            bool sp = cx_dtype_is_float(t);
            cx_tensor *a = random_tensor(t, 2, same, sp);
            cx_tensor *b = random_tensor(t, 2, same, sp);
            cx_tensor *in[2] = {a, b};
            check((cx_op_id)op, in, arity, NULL, op == CX_OP_POW ? 16 : 4);
            if (arity == 2) {
                cx_tensor *c = random_tensor(t, 2, col, sp), *r = random_tensor(t, 2, row, sp);
                cx_tensor *bc[2] = {c, r};
                check((cx_op_id)op, bc, 2, NULL, op == CX_OP_POW ? 16 : 4);
                cx_tensor *w = random_tensor(t, 3, wide, sp), *l = random_tensor(t, 1, last, sp);
                cx_tensor *wl[2] = {w, l};
                check((cx_op_id)op, wl, 2, NULL, op == CX_OP_POW ? 16 : 4);
                tu_drop(c);
                tu_drop(r);
                tu_drop(w);
                tu_drop(l);
            }
            tu_drop(a);
            tu_drop(b);
            checked++;
        }
    }
    printf("test_opencl: %d elementwise (op, type) claims checked\n", checked);
    assert_true(checked > 100);
}

static void test_select_clip_cast(void **state) {
    NEED_DEVICE;
    static const int64_t s[] = {4, 9}, r[] = {9};
    for (int k = 0; k < N_TYPES; k++) {
        cx_dtype t = all_types[k];
        cx_tensor *p = random_tensor(all_types[(k + 1) % N_TYPES], 2, s, true);
        cx_tensor *a = random_tensor(t, 2, s, true), *b = random_tensor(t, 1, r, true);
        cx_tensor *sel[3] = {p, a, b};
        check(CX_OP_SELECT, sel, 3, NULL, 0);
        cx_tensor *lo = random_tensor(t, 1, r, false), *hi = random_tensor(t, 1, r, false);
        cx_tensor *cl[3] = {a, lo, hi};
        check(CX_OP_CLIP, cl, 3, NULL, 0);
        for (int j = 0; j < N_TYPES; j++) {
            cx_params ps = {0};
            cx_param_put_int(&ps, CX_P_TYPE, all_types[j]);
            cx_tensor *one[1] = {a};
            check(CX_OP_AS_TYPE, one, 1, &ps, 0);
        }
        tu_drop(p);
        tu_drop(a);
        tu_drop(b);
        tu_drop(lo);
        tu_drop(hi);
    }
}

static void test_reductions(void **state) {
    NEED_DEVICE;
    static const cx_op_id ops[] = {CX_OP_SUM,        CX_OP_PRODUCT, CX_OP_REDUCE_MAX,
                                   CX_OP_REDUCE_MIN, CX_OP_ALL,     CX_OP_ANY};
    static const int64_t s[] = {3, 400, 5};
    static const int64_t axes[][3] = {{1}, {0, 2}, {0, 1, 2}, {2}};
    static const int n_axes[] = {1, 2, 3, 1};
    for (size_t o = 0; o < sizeof ops / sizeof ops[0]; o++)
        for (int k = 0; k < N_TYPES; k++) {
            cx_dtype t = all_types[k];
            /* sums and products of u8 are u64, which the opencl kernels do not store */
            if (t == CX_U8 && (ops[o] == CX_OP_SUM || ops[o] == CX_OP_PRODUCT)) {
                assert_false(claimed(ops[o], t));
                continue;
            }
            assert_true(claimed(ops[o], t));
            /* products of many floats overflow: keep them to one small axis */
            cx_tensor *x = random_tensor(t, 3, s, ops[o] != CX_OP_PRODUCT);
            for (int a = 0; a < 4; a++) {
                if (ops[o] == CX_OP_PRODUCT && a != 3) continue;
                cx_params ps = {0};
                cx_param_put_ints(&ps, CX_P_AXES, axes[a], n_axes[a]);
                cx_tensor *in[1] = {x};
                check(ops[o], in, 1, &ps, 64);
            }
            tu_drop(x);
        }
}

static void test_layout(void **state) {
    NEED_DEVICE;
    static const int64_t s[] = {2, 3, 5};
    for (int k = 0; k < N_TYPES; k++) {
        cx_tensor *x = random_tensor(all_types[k], 3, s, true);
        cx_tensor *in[1] = {x};
        cx_params ps = {0};
        cx_param_put_ints(&ps, CX_P_AXES, (const int64_t[]){2, 0, 1}, 3);
        check(CX_OP_TRANSPOSE, in, 1, &ps, 0);
        ps = (cx_params){0};
        cx_param_put_ints(&ps, CX_P_SHAPE, (const int64_t[]){6, 5}, 2);
        check(CX_OP_RESHAPE, in, 1, &ps, 0);
        ps = (cx_params){0};
        cx_param_put_ints(&ps, CX_P_SHAPE, (const int64_t[]){4, 2, 3, 5}, 4);
        check(CX_OP_BROADCAST, in, 1, &ps, 0);
        ps = (cx_params){0};
        cx_param_put_ints(&ps, CX_P_START, (const int64_t[]){1, 1, 0}, 3);
        cx_param_put_ints(&ps, CX_P_LENGTHS, (const int64_t[]){1, 2, 5}, 3);
        cx_param_put_ints(&ps, CX_P_STRIDES, (const int64_t[]){1, 1, 2}, 3);
        check(CX_OP_SLICE, in, 1, &ps, 0);
        ps = (cx_params){0};
        cx_param_put_ints(&ps, CX_P_AXES, (const int64_t[]){0, 2}, 2);
        check(CX_OP_REVERSE, in, 1, &ps, 0);
        /* pad: low, high and interior, crops, and a crop only (no fill) */
        ps = (cx_params){0};
        cx_param_put_ints(&ps, CX_P_PADS, (const int64_t[]){1, 0, 1, -1, 2, 0, 0, -2, 2}, 9);
        if (cx_dtype_is_float(all_types[k]))
            cx_param_put_float(&ps, CX_P_VALUE, -2.5);
        else
            cx_param_put_int(&ps, CX_P_VALUE, 7);
        check(CX_OP_PAD, in, 1, &ps, 0);
        ps = (cx_params){0};
        cx_param_put_ints(&ps, CX_P_PADS, (const int64_t[]){0, -1, 0, -1, 0, 0, -2, -1, 0}, 9);
        cx_param_put_int(&ps, CX_P_VALUE, 1);
        check(CX_OP_PAD, in, 1, &ps, 0);
        /* concatenate along each axis, with an empty piece */
        for (int axis = 0; axis < 3; axis++) {
            int64_t s1[3] = {2, 3, 5}, s0[3] = {2, 3, 5};
            s1[axis] = 4;
            s0[axis] = 0;
            cx_tensor *y = random_tensor(all_types[k], 3, s1, true);
            cx_tensor *e = random_tensor(all_types[k], 3, s0, true);
            cx_tensor *cin[3] = {x, e, y};
            ps = (cx_params){0};
            cx_param_put_int(&ps, CX_P_AXIS, axis);
            check(CX_OP_CONCATENATE, cin, 3, &ps, 0);
            tu_drop(y);
            tu_drop(e);
        }
        tu_drop(x);
    }
}

static void test_composites(void **state) {
    NEED_DEVICE;
    static const cx_dtype floats[] = {CX_F16, CX_F32, CX_F64};
    static const int64_t s[] = {4, 33, 6}, g[] = {33, 6}, b1[] = {1, 6};
    for (int k = 0; k < 3; k++) {
        cx_dtype t = floats[k];
        cx_tensor *x = random_tensor(t, 3, s, false);
        for (int axis = 0; axis < 3; axis++) {
            cx_params ps = {0};
            cx_param_put_int(&ps, CX_P_AXIS, axis);
            cx_tensor *in[1] = {x};
            check(CX_OP_SOFTMAX, in, 1, &ps, 16);
            check(CX_OP_LOG_SOFTMAX, in, 1, &ps, 16);
        }
        cx_tensor *gamma = random_tensor(t, 2, g, false), *beta = random_tensor(t, 2, b1, false);
        cx_tensor *in[3] = {x, gamma, beta};
        cx_params ps = {0};
        cx_param_put_ints(&ps, CX_P_AXES, (const int64_t[]){1, 2}, 2);
        cx_param_put_float(&ps, CX_P_EPSILON, 1e-3);
        check(CX_OP_LAYER_NORM, in, 3, &ps, 64);
        tu_drop(gamma);
        tu_drop(beta);
        tu_drop(x);
    }
}

static void test_dot(void **state) {
    NEED_DEVICE;
    static const cx_dtype floats[] = {CX_F32, CX_F64};
    for (int k = 0; k < 2; k++) {
        cx_dtype t = floats[k];
        cx_tensor *a = random_tensor(t, 2, (const int64_t[]){37, 65}, false);
        cx_tensor *b = random_tensor(t, 2, (const int64_t[]){65, 29}, false);
        cx_tensor *in[2] = {a, b};
        check(CX_OP_DOT, in, 2, NULL, 256);
        /* batched, and with B transposed (contracting its last axis) */
        cx_tensor *ba = random_tensor(t, 3, (const int64_t[]){3, 9, 17}, false);
        cx_tensor *bb = random_tensor(t, 3, (const int64_t[]){3, 11, 17}, false);
        cx_params ps = {0};
        cx_param_put_ints(&ps, CX_P_CONTRACT_A, (const int64_t[]){2}, 1);
        cx_param_put_ints(&ps, CX_P_BATCH_A, (const int64_t[]){0}, 1);
        cx_param_put_ints(&ps, CX_P_CONTRACT_B, (const int64_t[]){2}, 1);
        cx_param_put_ints(&ps, CX_P_BATCH_B, (const int64_t[]){0}, 1);
        cx_tensor *bin[2] = {ba, bb};
        check(CX_OP_DOT, bin, 2, &ps, 256);
        tu_drop(a);
        tu_drop(b);
        tu_drop(ba);
        tu_drop(bb);
    }
    /* integers are not claimed: the dispatcher moves them to the cpu */
    assert_false(claimed(CX_OP_DOT, CX_S32));
}

/* argmax/argmin: rows short (one work-item each) and long (split over a group), along every
 * axis and over the whole tensor, both tie breaks, with NaN, infinities and -0 among floats
 * and many ties among integers; then a row whose answers are known. */
static void test_argreduce(void **state) {
    NEED_DEVICE;
    static const cx_op_id ops[] = {CX_OP_ARGMAX, CX_OP_ARGMIN};
    static const int64_t s[] = {5, 300, 3};
    for (int o = 0; o < 2; o++)
        for (int k = 0; k < N_TYPES; k++) {
            cx_dtype t = all_types[k];
            assert_true(claimed(ops[o], t));
            cx_tensor *x = random_tensor(t, 3, s, true);
            cx_tensor *in[1] = {x};
            for (int axis = -1; axis < 3; axis++)
                for (int high = 0; high < 2; high++) {
                    cx_params ps = {0};
                    if (axis >= 0) cx_param_put_int(&ps, CX_P_AXIS, axis);
                    cx_param_put_int(&ps, CX_P_TIE_BREAK, high);
                    cx_param_put_int(&ps, CX_P_KEEP_AXIS, axis == 1);
                    check(ops[o], in, 1, &ps, 0);
                }
            tu_drop(x);
        }
    /* 600 elements (split over a group) holding 3, -0, NaN, 3, 0, NaN, 3 at 100..106 and 1
     * elsewhere, and the same 7 alone (one work-item) */
    static const double row[] = {3, -0.0, NAN, 3, 0, NAN, 3};
    double *v = malloc(sizeof(double) * 600);
    for (int i = 0; i < 600; i++) v[i] = i >= 100 && i < 107 ? row[i - 100] : 1;
    struct {
        int64_t n, base;
    } shapes[] = {{600, 100}, {7, 0}};
    for (int j = 0; j < 2; j++) {
        cx_tensor *x = tu_tensor(CX_F32, 1, &shapes[j].n, j ? row : v);
        cx_tensor *d = moved(x, ocl);
        /* NaN wins both: the first NaN (ties low) or the last (ties high) */
        for (int o = 0; o < 2; o++)
            for (int high = 0; high < 2; high++) {
                cx_params ps = {0};
                cx_param_put_int(&ps, CX_P_TIE_BREAK, high);
                cx_tensor got;
                cx_status st = {0};
                cx_tensor *din[1] = {d};
                if (cx_run(ops[o], ocl, din, 1, &ps, &got, &st) != CX_OK)
                    fail_msg("%s: %s", cx_op_table[ops[o]].name, st.message);
                int64_t at = -1;
                assert_int_equal(cx_tensor_download(&got, &at, sizeof at, &st), CX_OK);
                assert_int_equal(at, shapes[j].base + (high ? 5 : 2));
                cx_tensor_free(&got);
            }
        tu_drop(d);
        tu_drop(x);
    }
    free(v);
}

/* iota (flat and along each axis) and eye, in every type: 300 positions wrap in u8. */
static void test_creation(void **state) {
    NEED_DEVICE;
    static const int64_t s[] = {2, 300, 3}, sq[] = {3, 4, 5};
    for (int k = 0; k < N_TYPES; k++) {
        cx_dtype t = all_types[k];
        assert_true(claimed(CX_OP_IOTA, t));
        assert_true(claimed(CX_OP_EYE, t));
        for (int axis = -1; axis < 3; axis++) {
            cx_params ps = {0};
            cx_param_put_ints(&ps, CX_P_SHAPE, s, 3);
            cx_param_put_int(&ps, CX_P_TYPE, t);
            if (axis >= 0) cx_param_put_int(&ps, CX_P_AXIS, axis);
            check(CX_OP_IOTA, NULL, 0, &ps, 0);
        }
        for (int r = 2; r <= 3; r++) {
            cx_params ps = {0};
            cx_param_put_ints(&ps, CX_P_SHAPE, sq + 3 - r, r);
            cx_param_put_int(&ps, CX_P_TYPE, t);
            check(CX_OP_EYE, NULL, 0, &ps, 0);
        }
    }
}

/* Runs op on both devices, expecting the same failure: code and message. */
static void check_same_error(cx_op_id op, cx_tensor **in, int n, const cx_params *ps0) {
    cx_tensor *din[2] = {NULL, NULL};
    for (int j = 0; j < n; j++) din[j] = moved(in[j], ocl);
    cx_params ps = *ps0, ps_cpu = *ps0;
    cx_tensor got, want;
    cx_status st = {0}, st_cpu = {0};
    cx_code rc = cx_run(op, ocl, din, n, &ps, &got, &st);
    cx_code rc_cpu = cx_run(op, cpu, in, n, &ps_cpu, &want, &st_cpu);
    assert_int_equal(rc_cpu, CX_EINVAL);
    assert_int_equal(rc, rc_cpu);
    assert_string_equal(st.message, st_cpu.message);
    for (int j = 0; j < n; j++) tu_drop(din[j]);
}

/* take and gather move any element type; s32 indices are cast to s64 on the device first; an
 * index out of range fails with the cpu's own message, and nothing is read outside the input. */
static void test_take_gather(void **state) {
    NEED_DEVICE;
    static const int64_t s[] = {4, 9, 3}, ts[] = {2, 5}, gs[] = {6, 2}, bad_s[] = {3};
    static const double tv[] = {8, 0, 3, 3, 5, 1, 2, 7, 0, 4},
                        gv[] = {3, 8, 0, 0, 1, 4, 3, 1, 2, 2, 0, 7};
    static const cx_dtype all[] = {CX_F16, CX_BF16, CX_F32, CX_F64, CX_U8, CX_S32, CX_S64};
    for (size_t k = 0; k < sizeof all / sizeof all[0]; k++) {
        cx_dtype t = all[k];
        cx_tensor *x = random_tensor(t, 3, s, true);
        for (int it = 0; it < 2; it++) {
            cx_dtype ixt = it ? CX_S32 : CX_S64;
            cx_tensor *ti = tu_tensor(ixt, 2, ts, tv), *gi = tu_tensor(ixt, 2, gs, gv);
            /* take along axis 1 (indices up to 8) */
            cx_params ps = {0};
            cx_param_put_int(&ps, CX_P_AXIS, 1);
            cx_tensor *in[2] = {x, ti};
            check(CX_OP_TAKE, in, 2, &ps, 0);
            /* gather on axes 0, 1 (the default) and on 1, 2 (coordinates up to 8 and 2) */
            cx_tensor *gin[2] = {x, gi};
            check(CX_OP_GATHER, gin, 2, NULL, 0);
            static const double gv12[] = {3, 2, 8, 0, 0, 1, 4, 2, 1, 1, 2, 0};
            cx_tensor *gi12 = tu_tensor(ixt, 2, gs, gv12);
            gin[1] = gi12;
            ps = (cx_params){0};
            cx_param_put_ints(&ps, CX_P_AXES, (const int64_t[]){1, 2}, 2);
            check(CX_OP_GATHER, gin, 2, &ps, 0);
            tu_drop(ti);
            tu_drop(gi);
            tu_drop(gi12);
        }
        assert_true(claimed(CX_OP_TAKE, t));
        assert_true(claimed(CX_OP_GATHER, t));
        tu_drop(x);
    }
    /* out of range: 9 on an axis of 9, -1 in a gather row */
    cx_tensor *x = random_tensor(CX_F32, 3, s, false);
    cx_tensor *bad = tu_tensor(CX_S64, 1, bad_s, (const double[]){2, 9, 0});
    cx_params ps = {0};
    cx_param_put_int(&ps, CX_P_AXIS, 1);
    cx_tensor *in[2] = {x, bad};
    check_same_error(CX_OP_TAKE, in, 2, &ps);
    static const int64_t rs[] = {2, 2};
    cx_tensor *neg = tu_tensor(CX_S64, 2, rs, (const double[]){1, 1, 3, -1});
    in[1] = neg;
    ps = (cx_params){0};
    check_same_error(CX_OP_GATHER, in, 2, &ps);
    tu_drop(neg);
    tu_drop(bad);
    tu_drop(x);
}

/* Runs op on both devices and asserts the results are the same bits (NaN payloads included). */
static void check_bits(cx_op_id op, cx_tensor **in, int n, const cx_params *ps0) {
    cx_tensor *din[2] = {NULL};
    for (int j = 0; j < n; j++) din[j] = moved(in[j], ocl);
    cx_params ps = ps0 ? *ps0 : (cx_params){0}, ps_cpu = ps;
    cx_tensor got, want;
    cx_status st = {0};
    if (cx_run(op, ocl, din, n, &ps, &got, &st) != CX_OK) fail_msg("opencl: %s", st.message);
    if (cx_run(op, cpu, in, n, &ps_cpu, &want, &st) != CX_OK) fail_msg("cpu: %s", st.message);
    cx_tensor *back = moved(&got, cpu);
    assert_int_equal(back->nbytes, want.nbytes);
    const uint16_t *a = back->data, *b = want.data;
    for (size_t i = 0; i < want.nbytes / 2; i++)
        if (a[i] != b[i])
            fail_msg("%s from %s, element %zu: opencl 0x%04x, cpu 0x%04x", cx_op_table[op].name,
                     cx_dtype_name(in[0]->desc.dtype), i, a[i], b[i]);
    tu_drop(back);
    cx_tensor_free(&got);
    cx_tensor_free(&want);
    for (int j = 0; j < n; j++) tu_drop(din[j]);
}

/* A cpu tensor of n elements of type t holding these raw bits. */
static cx_tensor *bits_tensor(cx_dtype t, int64_t n, const void *bits) {
    cx_tensor *x = tu_tensor(t, 1, &n, (const double[16]){0});
    memcpy(x->data, bits, x->nbytes);
    return x;
}

/* bf16 rounding, bit for bit the cpu's: ties to even, NaN keeping its sign and top payload bits
 * with the quiet bit set, overflow to infinity, subnormals; a double just above a tie (rounded
 * twice through f32 it would land on the tie and go to even); integers beyond 2^24 rounded
 * once; and arithmetic on the stored values. */
static void test_bf16_bits(void **state) {
    NEED_DEVICE;
    static const uint32_t f32_bits[16] = {0x3f808000, /* 1 + 2^-8: a tie, to even (1) */
                                          0x3f818000, /* 1 + 3 * 2^-8: a tie, to even (up) */
                                          0x3f808001, /* just above a tie */
                                          0x7fa12345, /* signalling NaN with a payload */
                                          0xffc00001, /* negative quiet NaN */
                                          0x7f7fffff, /* the largest f32: rounds to infinity */
                                          0x00000001, /* the smallest subnormal */
                                          0x807fffff, /* the largest negative subnormal */
                                          0x80000000, 0x7f800000, 0xff800000, 0x3f800000,
                                          0xc2c80000, 0x0001ffff, 0x477fe000, 0x33800000};
    static const double f64_vals[6] = {
        1 + 0x1p-8 + 0x1p-40, -(1 + 0x1p-8 + 0x1p-40), 1e300, 1e-300, 3.0e38, -0.0};
    static const int64_t s64_vals[6] = {(INT64_C(1) << 40) + (INT64_C(1) << 32) + 1,
                                        -((INT64_C(1) << 40) + (INT64_C(1) << 32) + 1),
                                        (INT64_C(1) << 24) + 1,
                                        INT64_MAX,
                                        INT64_MIN,
                                        -3};
    cx_params to_bf16 = {0};
    cx_param_put_int(&to_bf16, CX_P_TYPE, CX_BF16);
    cx_tensor *f = bits_tensor(CX_F32, 16, f32_bits);
    cx_tensor *in[2] = {f};
    check_bits(CX_OP_AS_TYPE, in, 1, &to_bf16);
    cx_tensor *d = bits_tensor(CX_F64, 6, f64_vals);
    in[0] = d;
    if (claimed(CX_OP_AS_TYPE, CX_F64)) check_bits(CX_OP_AS_TYPE, in, 1, &to_bf16);
    cx_tensor *i = bits_tensor(CX_S64, 6, s64_vals);
    in[0] = i;
    check_bits(CX_OP_AS_TYPE, in, 1, &to_bf16);
    /* arithmetic in f32, one rounding: the bf16 values of the f32 bits above, paired with a
     * reversed copy (NaN payloads propagate as the cpu's do) */
    cx_tensor *b = NULL, *r = NULL;
    cx_tensor *one[1] = {f};
    cx_status st = {0};
    cx_tensor tb;
    assert_int_equal(cx_run(CX_OP_AS_TYPE, cpu, one, 1, &to_bf16, &tb, &st), CX_OK);
    b = bits_tensor(CX_BF16, 16, tb.data);
    cx_params rev = {0};
    cx_tensor tr;
    one[0] = b;
    assert_int_equal(cx_run(CX_OP_REVERSE, cpu, one, 1, &rev, &tr, &st), CX_OK);
    r = bits_tensor(CX_BF16, 16, tr.data);
    static const cx_op_id ops[] = {CX_OP_ADD, CX_OP_MULTIPLY, CX_OP_MAX, CX_OP_NEGATE, CX_OP_ABS};
    for (size_t k = 0; k < sizeof ops / sizeof ops[0]; k++) {
        cx_tensor *ab[2] = {b, r};
        check_bits(ops[k], ab, cx_op_tensor_arity(ops[k]), NULL);
    }
    cx_tensor_free(&tb);
    cx_tensor_free(&tr);
    tu_drop(b);
    tu_drop(r);
    tu_drop(f);
    tu_drop(d);
    tu_drop(i);
}

/* conv2d: im2col + GEMM on the device against the cpu's decomposition, over strides, padding
 * (valid, same, explicit with a crop), dilation, 1-3 feature groups, both layouts, a batch of 2
 * or 3, f16/f32/f64; the tolerance scales with the contraction length cg * kh * kw. */
typedef struct {
    int64_t n, c, h, w, o, kh, kw, groups;
    int64_t s[2], d[2];
    int padding;    /* 0 valid, 1 same, 2 explicit */
    int64_t pad[4]; /* explicit */
} conv_case;

static void test_conv2d(void **state) {
    NEED_DEVICE;
    static const conv_case cases[] = {
        {2, 3, 7, 6, 4, 3, 3, 1, {1, 1}, {1, 1}, 0, {0}},
        {2, 4, 9, 8, 6, 3, 2, 2, {2, 1}, {1, 1}, 1, {0}},
        {3, 6, 8, 9, 3, 2, 3, 3, {1, 2}, {2, 1}, 2, {1, 2, 0, 1}},
        {2, 6, 10, 7, 6, 3, 3, 3, {2, 2}, {2, 2}, 1, {0}},
        {2, 2, 6, 6, 5, 1, 1, 1, {1, 1}, {1, 1}, 2, {-1, 1, 2, -1}},
        {2, 5, 12, 11, 7, 5, 4, 1, {3, 2}, {1, 2}, 2, {2, 2, 3, 0}},
    };
    static const cx_dtype floats[] = {CX_F16, CX_F32, CX_F64};
    int ran = 0;
    for (int k = 0; k < 3; k++) {
        cx_dtype t = floats[k];
        if (!claimed(CX_OP_CONV2D, t)) {
            assert_int_equal(t, CX_F64); /* only without cl_khr_fp64 */
            continue;
        }
        for (size_t j = 0; j < sizeof cases / sizeof cases[0]; j++)
            for (int layout = 0; layout < 2; layout++) {
                const conv_case *c = &cases[j];
                int64_t cg = c->c / c->groups;
                int64_t xs[4] = {c->n, c->c, c->h, c->w}, ks[4] = {c->o, cg, c->kh, c->kw};
                if (layout == 1) {
                    memcpy(xs, (int64_t[]){c->n, c->h, c->w, c->c}, sizeof xs);
                    memcpy(ks, (int64_t[]){c->kh, c->kw, cg, c->o}, sizeof ks);
                }
                cx_tensor *x = random_tensor(t, 4, xs, false), *w = random_tensor(t, 4, ks, false);
                cx_params ps = {0};
                cx_param_put_ints(&ps, CX_P_STRIDES, c->s, 2);
                cx_param_put_ints(&ps, CX_P_KERNEL_DILATION, c->d, 2);
                cx_param_put_int(&ps, CX_P_FEATURE_GROUP_SIZE, c->groups);
                cx_param_put_int(&ps, CX_P_LAYOUT, layout);
                if (c->padding == 2)
                    cx_param_put_ints(&ps, CX_P_PADDING, c->pad, 4);
                else
                    cx_param_put_ints(&ps, CX_P_PADDING, (const int64_t[]){c->padding}, 1);
                cx_tensor *in[2] = {x, w};
                check(CX_OP_CONV2D, in, 2, &ps, (double)(cg * c->kh * c->kw));
                tu_drop(x);
                tu_drop(w);
                ran++;
            }
    }
    assert_true(ran >= 24);
    /* integers are computed in f32 (the merged float type): cast on the device, then claimed */
    assert_true(claimed(CX_OP_CONV2D, CX_S32));
}

/* ---- 16 threads at once: each runs its own ops on the shared device and checks its results */

#define THREADS 16
#define ROUNDS  20

typedef struct {
    int id;
    int bad;
    char message[600];
} worker;

/* Work in flight (opencl_driver.c): results read back asynchronously, in order, each by the
 * driver's waiter thread; a loop of 300 ops that outruns the device ends with every result
 * right; every call may block; 600 results dropped while queued are released by the waiter;
 * a fused chain is built on its first run. */
static cx_tensor *onto_device(cx_tensor *host) {
    cx_tensor *d = moved(host, ocl);
    tu_drop(host);
    return d;
}

static void test_in_flight(void **state) {
    NEED_DEVICE;
    (void)state;
    const cx_driver *drv = ocl->driver;
    assert_non_null(drv->download_async);
    assert_non_null(drv->may_block);
    cx_status st = {0};
    enum { N = 1 << 18, LOOP = 300 };
    double *v = malloc(sizeof(double) * N);
    for (int i = 0; i < N; i++) v[i] = i % 1000;
    cx_tensor *x = onto_device(tu_tensor(CX_F32, 1, (const int64_t[]){N}, v));
    free(v);

    /* a loop that outruns the device: x + x, then the result + x, ... (each ends k + 1 times x) */
    cx_tensor *acc = x;
    for (int k = 0; k < LOOP; k++) {
        cx_tensor *in[2] = {acc, x};
        cx_tensor *next = tu_run_ok(CX_OP_ADD, in, 2, NULL);
        if (acc != x) tu_drop(acc);
        acc = next;
    }
    float *got = malloc(sizeof(float) * N);
    tu_download w;
    tu_download_init(&w);
    assert_int_equal(
        cx_tensor_download_async(acc, got, sizeof(float) * N, tu_download_done, &w, &st), CX_OK);
    assert_true(tu_download_wait(&w, 60000));
    assert_int_equal(w.rc, CX_OK);
    assert_false(pthread_equal(w.thread, w.caller));
    for (int i = 0; i < N; i += 997) assert_float_equal(got[i], (i % 1000) * (LOOP + 1.0), 0);
    tu_download_destroy(&w);
    free(got);
    tu_drop(acc);

    /* every call may wait: the NIF makes them all from a dirty I/O scheduler */
    assert_true(drv->may_block(ocl->ctx, CX_OP_COUNT, NULL, 0, NULL));
    const cx_desc add_in[2] = {x->desc, x->desc};
    assert_true(drv->may_block(ocl->ctx, CX_OP_ADD, add_in, 2, NULL));

    /* a burst of 600 results of 1 MB each, dropped at once (released while queued: the waiter
     * releases them to OpenCL), then one read: right */
    for (int k = 0; k < 600; k++) {
        cx_tensor *in[2] = {x, x};
        tu_drop(tu_run_ok(CX_OP_ADD, in, 2, NULL));
    }
    cx_tensor *in2[2] = {x, x};
    cx_tensor *twice = tu_run_ok(CX_OP_ADD, in2, 2, NULL);
    float second;
    assert_int_equal(cx_tensor_download(twice, &second, sizeof second, &st), CX_OK);
    assert_float_equal(second, 0, 0);
    tu_drop(twice);

    /* a fused chain of its own, (exp(x) * 3 - x) / 3 on {N} and a number, built on first use */
    const int64_t code[] = {CX_OP_EXP,      0, -1, CX_OP_MULTIPLY, 2, 1,
                            CX_OP_SUBTRACT, 3, 0,  CX_OP_DIVIDE,   4, 1};
    cx_params ps = {0};
    cx_param_put_ints(&ps, CX_P_CODE, code, 12);
    cx_tensor *small = onto_device(tu_vec(CX_F32, 4, (const double[]){0, 1, -1, 0.5}));
    cx_tensor *three = onto_device(tu_tensor(CX_F32, 0, NULL, (const double[]){3}));
    cx_tensor *fin[2] = {small, three};
    cx_tensor *f = tu_run_ok(CX_OP_FUSED, fin, 2, &ps);
    float four[4];
    assert_int_equal(cx_tensor_download(f, four, sizeof four, &st), CX_OK);
    assert_float_equal(four[1], (expf(1) * 3 - 1) / 3, 1e-6);
    tu_drop(f);
    tu_drop(three);
    tu_drop(small);
    tu_drop(x);
}

static void *work(void *p) {
    worker *w = p;
    int64_t shape[] = {8, 64 + w->id};
    int64_t n = shape[0] * shape[1];
    double *v = malloc(sizeof(double) * (size_t)n);
    for (int64_t i = 0; i < n; i++) v[i] = (double)((i * 7 + w->id * 13) % 29) - 14;
    cx_tensor *x = tu_tensor(CX_F32, 2, shape, v);
    for (int round = 0; round < ROUNDS && !w->bad; round++) {
        cx_status st = {0};
        cx_tensor dx, sum, scaled;
        if (cx_transfer(x, ocl, &dx, &st) != CX_OK) goto failed;
        /* x * x then a row sum: each thread's shape and values are its own */
        cx_tensor *mul_in[2] = {&dx, &dx};
        cx_params ps = {0};
        if (cx_run(CX_OP_MULTIPLY, ocl, mul_in, 2, &ps, &scaled, &st) != CX_OK) goto failed;
        cx_params rs = {0};
        cx_param_put_ints(&rs, CX_P_AXES, (const int64_t[]){1}, 1);
        cx_tensor *sum_in[1] = {&scaled};
        if (cx_run(CX_OP_SUM, ocl, sum_in, 1, &rs, &sum, &st) != CX_OK) goto failed;
        float got[8];
        if (cx_tensor_download(&sum, got, sizeof got, &st) != CX_OK) goto failed;
        for (int r = 0; r < 8 && !w->bad; r++) {
            double want = 0;
            for (int64_t c = 0; c < shape[1]; c++)
                want += v[r * shape[1] + c] * v[r * shape[1] + c];
            if (got[r] != (float)want) {
                w->bad = 1;
                snprintf(w->message, sizeof w->message, "thread %d round %d row %d: %g, want %g",
                         w->id, round, r, got[r], want);
            }
        }
        cx_tensor_free(&sum);
        cx_tensor_free(&scaled);
        cx_tensor_free(&dx);
        continue;
    failed:
        w->bad = 1;
        snprintf(w->message, sizeof w->message, "thread %d: %s", w->id, st.message);
    }
    tu_drop(x);
    free(v);
    return NULL;
}

static void test_sixteen_threads(void **state) {
    NEED_DEVICE;
    pthread_t th[THREADS];
    worker w[THREADS];
    for (int k = 0; k < THREADS; k++) {
        w[k] = (worker){.id = k};
        assert_int_equal(pthread_create(&th[k], NULL, work, &w[k]), 0);
    }
    for (int k = 0; k < THREADS; k++) pthread_join(th[k], NULL);
    for (int k = 0; k < THREADS; k++)
        if (w[k].bad) fail_msg("%s", w[k].message);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_device_properties),
        cmocka_unit_test(test_elementwise),
        cmocka_unit_test(test_select_clip_cast),
        cmocka_unit_test(test_reductions),
        cmocka_unit_test(test_layout),
        cmocka_unit_test(test_composites),
        cmocka_unit_test(test_bf16_bits),
        cmocka_unit_test(test_argreduce),
        cmocka_unit_test(test_creation),
        cmocka_unit_test(test_take_gather),
        cmocka_unit_test(test_dot),
        cmocka_unit_test(test_conv2d),
        cmocka_unit_test(test_sixteen_threads),
        cmocka_unit_test(test_in_flight),
    };
    return cmocka_run_group_tests(tests, setup, NULL);
}
