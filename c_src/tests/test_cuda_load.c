/* The cuda driver (c_src/drivers/cuda) as the core loads it: with dlopen, from the build
 * directory. Without the NVIDIA driver or a GPU it must be listed as unavailable with the
 * reason while the cpu computes as before; where a GPU is present, a smoke test of each kernel
 * family against the cpu driver, in f32, f16 and bf16, plus out-of-memory and transfer counts.
 * The full differential suite is test_differential.c; this one needs no BEAM either. */
#include <dlfcn.h>
#include <stdio.h>
#include <unistd.h>

#include "test_util.h"

/* CX_CUDA_SO=build/cudaemu/cascade_driver_cuda.so runs these tests against the cpu emulator
 * build of the driver (c_src/drivers/cuda/emu), GPU tests included. */
static const char *cuda_so(void) {
    const char *p = getenv("CX_CUDA_SO");
    return p && *p ? p : CX_BUILD_DIR "/cascade_driver_cuda.so";
}

#define CUDA_SO cuda_so()

static cx_device *cpu, *gpu;

static int setup(void **state) {
    (void)state;
    const cx_driver_spec specs[] = {{"cuda", CUDA_SO}};
    cx_status st = {0};
    if (cx_devices_init(specs, 1, &st) != CX_OK) return -1;
    cpu = cx_device_find("cpu");
    gpu = cx_device_find("cuda");
    return cpu && gpu ? 0 : -1;
}

/* Whether this machine could run CUDA at all: the NVIDIA driver library loads. */
static bool nvidia_driver_present(void) {
    void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (h) dlclose(h);
    return h != NULL;
}

static void listed_with_a_reason(void **state) {
    (void)state;
    assert_string_equal(gpu->driver_name, "cuda");
    if (gpu->available) {
        printf("# cuda available: %s (%s)\n", gpu->props.name, gpu->props.detail);
        assert_string_equal(gpu->props.kind, "gpu");
        assert_false(gpu->props.host_memory);
        return;
    }
    printf("# cuda unavailable: %s\n", gpu->reason);
    assert_true(strlen(gpu->reason) > 0);
    if (access(CUDA_SO, F_OK) != 0) {
        assert_non_null(strstr(gpu->reason, "not built"));
    } else if (!nvidia_driver_present()) {
        /* the reason names what is missing, not a CUDA error code */
        assert_non_null(strstr(gpu->reason, "libcuda.so.1"));
        assert_non_null(strstr(gpu->reason, "no NVIDIA driver"));
    }
}

static void cpu_still_computes(void **state) {
    (void)state;
    cx_tensor *a = tu_tensor(CX_F32, 1, TU_SHAPE(3), TU_VALUES(1, 2, 3));
    cx_tensor *in[] = {a, a};
    cx_tensor *r = tu_run_ok(CX_OP_ADD, in, 2, NULL);
    tu_expect(r, CX_F32, 1, TU_SHAPE(3), TU_VALUES(2, 4, 6), 0);
    tu_drop(r);
    tu_drop(a);
}

/* A cpu tensor of pseudo-random values in [lo, hi), the same on every run. */
static cx_tensor *random_tensor(cx_dtype t, int rank, const int64_t *shape, double lo, double hi,
                                uint64_t seed) {
    cx_desc d = tu_desc(t, rank, shape);
    int64_t n = cx_desc_numel(&d);
    /* calloc: gcc -O3 cannot tell that tu_tensor reads only the n values written below once the
     * sizes are inline, and warns (maybe-uninitialized) */
    double *v = calloc((size_t)(n ? n : 1), sizeof(double));
    uint64_t s = seed * 6364136223846793005u + 1442695040888963407u;
    for (int64_t i = 0; i < n; i++) {
        s = s * 6364136223846793005u + 1442695040888963407u;
        v[i] = lo + (hi - lo) * (double)(s >> 11) / 9007199254740992.0;
    }
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

static double tolerance(cx_dtype t) {
    return t == CX_F32 ? 2e-5 : t == CX_F16 ? 4e-3 : 2e-2;
}

/* Runs op on the cpu and on the gpu with the same inputs and compares; asserts that the gpu
 * ran it natively (no silent fallback). */
static void differ(cx_op_id op, cx_tensor **in, int n, cx_params *ps, double tol) {
    cx_params ps_cpu = ps ? *ps : (cx_params){0}, ps_gpu = ps_cpu;
    cx_status st = {0};
    cx_tensor *want = malloc(sizeof *want);
    if (cx_run(op, cpu, in, n, &ps_cpu, want, &st))
        fail_msg("cpu %s: %s", cx_op_table[op].name, st.message);
    cx_tensor *gin[8];
    const cx_tensor *gin_c[8];
    for (int k = 0; k < n; k++) gin_c[k] = gin[k] = moved(in[k], gpu);
    cx_plan plan;
    cx_params ps_plan = ps_gpu;
    if (cx_plan_op(op, gpu, gin_c, n, &ps_plan, &plan, &st))
        fail_msg("plan %s: %s", cx_op_table[op].name, st.message);
    if (plan.route != CX_ROUTE_NATIVE)
        fail_msg("%s on cuda: route %s (%s)", cx_op_table[op].name, cx_route_name(plan.route),
                 plan.reason);
    cx_tensor *got_gpu = malloc(sizeof *got_gpu);
    if (cx_run(op, gpu, gin, n, &ps_gpu, got_gpu, &st))
        fail_msg("cuda %s: %s", cx_op_table[op].name, st.message);
    cx_tensor *got = moved(got_gpu, cpu);
    double *w = malloc(sizeof(double) * (size_t)(want->numel ? want->numel : 1));
    for (int64_t i = 0; i < want->numel; i++) w[i] = tu_load(want->desc.dtype, want->data, i);
    tu_expect(got, want->desc.dtype, want->desc.rank, want->desc.shape, w, tol);
    free(w);
    tu_drop(got);
    tu_drop(got_gpu);
    tu_drop(want);
    for (int k = 0; k < n; k++) tu_drop(gin[k]);
}

static const cx_dtype floats[] = {CX_F32, CX_F16, CX_BF16};

#define REQUIRE_GPU()                                                                              \
    do {                                                                                           \
        if (!gpu->available) skip();                                                               \
    } while (0)

static void elementwise_against_cpu(void **state) {
    (void)state;
    REQUIRE_GPU();
    for (int t = 0; t < 3; t++) {
        cx_dtype ty = floats[t];
        cx_tensor *a = random_tensor(ty, 2, TU_SHAPE(37, 129), -2, 2, 1);
        cx_tensor *b = random_tensor(ty, 2, TU_SHAPE(37, 129), 0.5, 2, 2);
        cx_tensor *row = random_tensor(ty, 1, TU_SHAPE(129), -1, 1, 3);
        cx_tensor *col = random_tensor(ty, 2, TU_SHAPE(37, 1), -1, 1, 4);
        static const cx_op_id unary[] = {CX_OP_NEGATE,  CX_OP_EXP,   CX_OP_TANH,
                                         CX_OP_SIGMOID, CX_OP_ROUND, CX_OP_ERF};
        for (size_t k = 0; k < sizeof unary / sizeof unary[0]; k++)
            differ(unary[k], (cx_tensor *[]){a}, 1, NULL, tolerance(ty));
        differ(CX_OP_LOG, (cx_tensor *[]){b}, 1, NULL, tolerance(ty));
        static const cx_op_id binary[] = {CX_OP_ADD, CX_OP_MULTIPLY, CX_OP_DIVIDE,
                                          CX_OP_MAX, CX_OP_POW,      CX_OP_LESS};
        for (size_t k = 0; k < sizeof binary / sizeof binary[0]; k++) {
            differ(binary[k], (cx_tensor *[]){b, a}, 2, NULL, tolerance(ty));
            differ(binary[k], (cx_tensor *[]){b, row}, 2, NULL, tolerance(ty)); /* broadcast */
            differ(binary[k], (cx_tensor *[]){col, b}, 2, NULL, tolerance(ty));
        }
        differ(CX_OP_CLIP, (cx_tensor *[]){a, col, b}, 3, NULL, tolerance(ty));
        tu_drop(a);
        tu_drop(b);
        tu_drop(row);
        tu_drop(col);
    }
}

static void reductions_and_layout_against_cpu(void **state) {
    (void)state;
    REQUIRE_GPU();
    for (int t = 0; t < 3; t++) {
        cx_dtype ty = floats[t];
        cx_tensor *x = random_tensor(ty, 3, TU_SHAPE(5, 67, 33), -1, 1, 5);
        for (int axis = 0; axis < 3; axis++) {
            cx_params ps = {0};
            int64_t ax = axis;
            cx_param_put_ints(&ps, CX_P_AXES, &ax, 1);
            differ(CX_OP_SUM, &x, 1, &ps, tolerance(ty) * 10);
            differ(CX_OP_REDUCE_MAX, &x, 1, &ps, 0);
        }
        cx_params all = {0};
        differ(CX_OP_SUM, &x, 1, &all, tolerance(ty) * 10);
        cx_params tr = {0};
        cx_param_put_ints(&tr, CX_P_AXES, TU_SHAPE(2, 0, 1), 3);
        differ(CX_OP_TRANSPOSE, &x, 1, &tr, 0);
        cx_params sl = {0};
        cx_param_put_ints(&sl, CX_P_START, TU_SHAPE(1, 3, 0), 3);
        cx_param_put_ints(&sl, CX_P_LENGTHS, TU_SHAPE(3, 60, 33), 3);
        cx_param_put_ints(&sl, CX_P_STRIDES, TU_SHAPE(2, 7, 1), 3);
        differ(CX_OP_SLICE, &x, 1, &sl, 0);
        cx_params cat = {0};
        cx_param_put_int(&cat, CX_P_AXIS, 1);
        differ(CX_OP_CONCATENATE, (cx_tensor *[]){x, x}, 2, &cat, 0);
        cx_params cast = {0};
        cx_param_put_int(&cast, CX_P_TYPE, ty == CX_F32 ? CX_BF16 : CX_F32);
        differ(CX_OP_AS_TYPE, &x, 1, &cast, 0);
        tu_drop(x);
    }
}

static void dot_against_cpu(void **state) {
    (void)state;
    REQUIRE_GPU();
    for (int t = 0; t < 3; t++) {
        cx_dtype ty = floats[t];
        cx_tensor *a = random_tensor(ty, 3, TU_SHAPE(3, 65, 70), -1, 1, 6);
        cx_tensor *b = random_tensor(ty, 3, TU_SHAPE(3, 70, 31), -1, 1, 7);
        cx_params mm = {0};
        cx_param_put_ints(&mm, CX_P_CONTRACT_A, TU_SHAPE(2), 1);
        cx_param_put_ints(&mm, CX_P_CONTRACT_B, TU_SHAPE(1), 1);
        cx_param_put_ints(&mm, CX_P_BATCH_A, TU_SHAPE(0), 1);
        cx_param_put_ints(&mm, CX_P_BATCH_B, TU_SHAPE(0), 1);
        /* 70 products: the error grows with the contraction */
        double tol = ty == CX_F32 ? 1e-4 : ty == CX_F16 ? 1e-2 : 5e-2;
        differ(CX_OP_DOT, (cx_tensor *[]){a, b}, 2, &mm, tol);
        /* a contracted on its middle axis: stored {B, K, M}, a transposed GEMM */
        cx_tensor *at = random_tensor(ty, 3, TU_SHAPE(3, 70, 65), -1, 1, 8);
        cx_params tm = mm;
        cx_param_put_ints(&tm, CX_P_CONTRACT_A, TU_SHAPE(1), 1);
        differ(CX_OP_DOT, (cx_tensor *[]){at, b}, 2, &tm, tol);
        /* batch last on a: copied into GEMM order first */
        cx_tensor *ab = random_tensor(ty, 3, TU_SHAPE(65, 70, 3), -1, 1, 9);
        cx_params bm = mm;
        cx_param_put_ints(&bm, CX_P_CONTRACT_A, TU_SHAPE(1), 1);
        cx_param_put_ints(&bm, CX_P_BATCH_A, TU_SHAPE(2), 1);
        differ(CX_OP_DOT, (cx_tensor *[]){ab, b}, 2, &bm, tol);
        tu_drop(a);
        tu_drop(b);
        tu_drop(at);
        tu_drop(ab);
    }
}

static void fused_against_cpu(void **state) {
    (void)state;
    REQUIRE_GPU();
    for (int t = 0; t < 3; t++) {
        cx_dtype ty = floats[t];
        cx_tensor *x = random_tensor(ty, 3, TU_SHAPE(4, 33, 1500), -8, 8, 10);
        for (int axis = 0; axis < 3; axis++) {
            cx_params ps = {0};
            cx_param_put_int(&ps, CX_P_AXIS, axis);
            differ(CX_OP_SOFTMAX, &x, 1, &ps, tolerance(ty) * 4);
            differ(CX_OP_LOG_SOFTMAX, &x, 1, &ps, tolerance(ty) * 4);
        }
        cx_tensor *g = random_tensor(ty, 1, TU_SHAPE(1500), 0.5, 1.5, 11);
        cx_tensor *b = random_tensor(ty, 1, TU_SHAPE(1500), -1, 1, 12);
        cx_params ln = {0};
        cx_param_put_float(&ln, CX_P_EPSILON, 1e-5);
        differ(CX_OP_LAYER_NORM, (cx_tensor *[]){x, g, b}, 3, &ln, tolerance(ty) * 8);
        tu_drop(g);
        tu_drop(b);
        tu_drop(x);
    }
}

static cx_tensor *run_gpu(cx_op_id op, cx_tensor **in, int n, const cx_params *ps) {
    cx_params local = ps ? *ps : (cx_params){0};
    cx_status st = {0};
    cx_tensor *out = malloc(sizeof *out);
    if (cx_run(op, gpu, in, n, &local, out, &st))
        fail_msg("cuda %s: %s", cx_op_table[op].name, st.message);
    return out;
}

/* fused on f32: natively, within the cpu's tolerance, and bit for bit the ops one by one on the
 * GPU (the kernel interprets the chain with the elementwise kernels' formulas) */
static void fused_chain_against_its_ops(void **state) {
    (void)state;
    REQUIRE_GPU();
    cx_tensor *x = random_tensor(CX_F32, 2, TU_SHAPE(33, 1500), -3, 3, 20);
    cx_tensor *y = random_tensor(CX_F32, 2, TU_SHAPE(33, 1500), 0.5, 2, 21);
    cx_tensor *h = random_tensor(CX_F32, 0, TU_SHAPE(1), 0.5, 0.5, 22);
    /* r3 = x * h; r4 = erf(r3); r5 = r4 + y; r6 = max(r5, x); r7 = tanh(r6); r8 = r7 / y */
    const int64_t code[18] = {CX_OP_MULTIPLY, 0, 2, CX_OP_ERF,  3, -1, CX_OP_ADD,    4, 1,
                              CX_OP_MAX,      5, 0, CX_OP_TANH, 6, -1, CX_OP_DIVIDE, 7, 1};
    cx_params ps = {0};
    cx_param_put_ints(&ps, CX_P_CODE, code, 18);
    cx_tensor *in[3] = {x, y, h};
    differ(CX_OP_FUSED, in, 3, &ps, tolerance(CX_F32) * 8);
    cx_tensor *g[3] = {moved(x, gpu), moved(y, gpu), moved(h, gpu)};
    cx_tensor *fused = run_gpu(CX_OP_FUSED, g, 3, &ps);
    cx_tensor *regs[9] = {g[0], g[1], g[2]};
    for (int k = 0; k < 6; k++) {
        cx_tensor *args[2] = {regs[code[3 * k + 1]],
                              code[3 * k + 2] >= 0 ? regs[code[3 * k + 2]] : NULL};
        regs[3 + k] = run_gpu((cx_op_id)code[3 * k], args, code[3 * k + 2] >= 0 ? 2 : 1, NULL);
    }
    cx_tensor *a = moved(fused, cpu), *b = moved(regs[8], cpu);
    assert_int_equal(a->nbytes, b->nbytes);
    assert_memory_equal(a->data, b->data, a->nbytes);
    tu_drop(a);
    tu_drop(b);
    tu_drop(fused);
    for (int k = 0; k < 9; k++) tu_drop(regs[k]);
    tu_drop(x);
    tu_drop(y);
    tu_drop(h);
}

/* fused with a sum at the end: natively, over the last axis (33 rows of 1500), over the last
 * two with a number operand, over everything (one row of 49,500), and rows of nothing (zeros),
 * within the cpu's tolerance for a sum of that many terms (both sum in double) */
static void fused_chain_with_a_sum(void **state) {
    (void)state;
    REQUIRE_GPU();
    cx_tensor *x = random_tensor(CX_F32, 3, TU_SHAPE(3, 11, 1500), -3, 3, 30);
    cx_tensor *h = random_tensor(CX_F32, 0, TU_SHAPE(1), 0.25, 0.25, 31);
    /* r2 = x * h; r3 = exp(r2); r4 = r3 + x */
    const int64_t code[9] = {CX_OP_MULTIPLY, 0, 1, CX_OP_EXP, 2, -1, CX_OP_ADD, 3, 0};
    const int64_t axes[3][3] = {{2}, {1, 2}, {0, 1, 2}};
    for (int k = 0; k < 3; k++) {
        cx_params ps = {0};
        cx_param_put_ints(&ps, CX_P_CODE, code, 9);
        cx_param_put_ints(&ps, CX_P_REDUCE, (const int64_t[]){1}, 1);
        cx_param_put_ints(&ps, CX_P_AXES, axes[k], k + 1);
        cx_tensor *in[2] = {x, h};
        differ(CX_OP_FUSED, in, 2, &ps, tolerance(CX_F32) * 16);
    }
    cx_tensor *empty = random_tensor(CX_F32, 2, TU_SHAPE(4, 0), 0, 0, 32);
    cx_params ps = {0};
    cx_param_put_ints(&ps, CX_P_CODE, code, 9);
    cx_param_put_ints(&ps, CX_P_REDUCE, (const int64_t[]){1}, 1);
    cx_param_put_ints(&ps, CX_P_AXES, (const int64_t[]){1}, 1);
    cx_tensor *in[2] = {empty, h};
    differ(CX_OP_FUSED, in, 2, &ps, 0);
    tu_drop(x);
    tu_drop(h);
    tu_drop(empty);
}

/* The claims, read from the driver's table wherever it was built, GPU or not: every primitive
 * for f32, f16 and bf16; the moves, full and eye for every type, iota and as_type for every type
 * up to s64 (c128 has no 16-byte copy kernel); comparisons,
 * logical ops, all and any for u8 too. (Whether each claim holds is the differential suite's
 * business.) */
static void every_primitive_is_claimed(void **state) {
    (void)state;
    void *h = dlopen(CUDA_SO, RTLD_NOW | RTLD_LOCAL);
    if (!h) skip(); /* not built here */
    cx_driver_entry_fn entry = NULL;
    *(void **)&entry = dlsym(h, "cx_driver_entry");
    assert_non_null(entry);
    const cx_driver *drv = entry();
    for (int op = 0; op < CX_OP_COUNT; op++) {
        cx_op_kind kind = cx_op_table[op].kind;
        /* sorting, indexed updates, cumulative ops and windows have no cuda kernel yet: the
         * negotiation moves them */
        if (kind == CX_KIND_COMPOSITE || kind == CX_KIND_SORT || kind == CX_KIND_SCATTER ||
            kind == CX_KIND_SCAN || kind == CX_KIND_WINDOW || kind == CX_KIND_LINALG)
            continue;
        /* nor complex arithmetic (real, imag, conjugate, fft and ifft compute in c64/c128) */
        if (kind == CX_KIND_FFT || op == CX_OP_REAL || op == CX_OP_IMAG || op == CX_OP_CONJUGATE)
            continue;
        bool create = kind == CX_KIND_CREATE;
        bool random = op == CX_OP_RANDOM_UNIFORM || op == CX_OP_RANDOM_NORMAL;
        bool any_type = (kind == CX_KIND_LAYOUT || create || kind == CX_KIND_CAST) && !random;
        bool u8_too = kind == CX_KIND_COMPARE || kind == CX_KIND_LOGICAL || op == CX_OP_ALL ||
                      op == CX_OP_ANY;
        int n = create ? 0 : cx_op_tensor_arity((cx_op_id)op);
        if (n < 0) n = 2; /* concatenate */
        for (int t = 0; t < CX_DTYPE_COUNT; t++) {
            bool float3 = t == CX_F32 || t == CX_F16 || t == CX_BF16;
            /* the cast and iota kernels take the first seven types (up to s64) only */
            bool kernel_type =
                t <= CX_S64 || (kind == CX_KIND_LAYOUT || op == CX_OP_FULL || op == CX_OP_EYE);
            /* elements of 16 bytes (c128) have no copy kernel */
            if (t == CX_C128) kernel_type = false;
            bool want = float3 || (any_type && kernel_type) || (u8_too && t == CX_U8) ||
                        (random && t == CX_F64);
            if (!want) continue;
            cx_dtype types[8];
            for (int k = 0; k < 8; k++) types[k] = (cx_dtype)t;
            if (op == CX_OP_TAKE || op == CX_OP_GATHER || op == CX_OP_TAKE_ALONG_AXIS)
                types[1] = CX_S64;
            if (drv->capability(NULL, (cx_op_id)op, types, n) == CX_CAP_NO)
                fail_msg("cuda does not claim %s for %s", cx_op_table[op].name,
                         cx_dtype_name((cx_dtype)t));
        }
    }
    dlclose(h);
}

/* A cpu tensor of small integers (0..levels-1) in type t, so that rows have many ties, with
 * NaN at every `nan_every`-th element (0: none). */
static cx_tensor *ties_tensor(cx_dtype t, int rank, const int64_t *shape, int levels,
                              int64_t nan_every, uint64_t seed) {
    cx_desc d = tu_desc(t, rank, shape);
    int64_t n = cx_desc_numel(&d);
    /* calloc: gcc -O3 cannot tell that tu_tensor reads only the n values written below once the
     * sizes are inline, and warns (maybe-uninitialized) */
    double *v = calloc((size_t)(n ? n : 1), sizeof(double));
    uint64_t s = seed * 6364136223846793005u + 1442695040888963407u;
    for (int64_t i = 0; i < n; i++) {
        s = s * 6364136223846793005u + 1442695040888963407u;
        v[i] = (double)((s >> 33) % (uint64_t)levels);
        if (nan_every && i % nan_every == nan_every / 2) v[i] = NAN;
    }
    cx_tensor *x = tu_tensor(t, rank, shape, v);
    free(v);
    return x;
}

/* argmax and argmin over long rows (one block per row) and short ones (one thread per row),
 * with ties either way and NaN; all, any and the logical ops. */
static void arg_and_truth_against_cpu(void **state) {
    (void)state;
    REQUIRE_GPU();
    for (int t = 0; t < 3; t++) {
        cx_dtype ty = floats[t];
        cx_tensor *xs[] = {ties_tensor(ty, 2, TU_SHAPE(5, 1000), 9, 0, 20),
                           ties_tensor(ty, 2, TU_SHAPE(1000, 6), 9, 0, 21),
                           ties_tensor(ty, 2, TU_SHAPE(37, 300), 5, 1733, 22)};
        for (int k = 0; k < 3; k++)
            for (int op = 0; op < 2; op++)
                for (int high = 0; high < 2; high++)
                    for (int axis = -1; axis < 2; axis++) {
                        cx_params ps = {0};
                        if (axis >= 0) cx_param_put_int(&ps, CX_P_AXIS, axis);
                        cx_param_put_int(&ps, CX_P_TIE_BREAK, high);
                        differ(op ? CX_OP_ARGMAX : CX_OP_ARGMIN, &xs[k], 1, &ps, 0);
                    }
        cx_tensor *m = ties_tensor(ty, 2, TU_SHAPE(37, 300), 2, 577, 23);
        cx_tensor *row = ties_tensor(ty, 1, TU_SHAPE(300), 2, 0, 24);
        for (int axis = 0; axis < 2; axis++) {
            cx_params ps = {0};
            int64_t ax = axis;
            cx_param_put_ints(&ps, CX_P_AXES, &ax, 1);
            differ(CX_OP_ALL, &m, 1, &ps, 0);
            differ(CX_OP_ANY, &m, 1, &ps, 0);
        }
        differ(CX_OP_LOGICAL_NOT, &m, 1, NULL, 0);
        static const cx_op_id logical[] = {CX_OP_LOGICAL_AND, CX_OP_LOGICAL_OR, CX_OP_LOGICAL_XOR};
        for (int k = 0; k < 3; k++) differ(logical[k], (cx_tensor *[]){m, row}, 2, NULL, 0);
        for (int k = 0; k < 3; k++) tu_drop(xs[k]);
        tu_drop(m);
        tu_drop(row);
    }
}

/* pad, put_slice, take, gather and as_type to and from the other types; iota, eye, full and the
 * random numbers (uniform ones bit for bit). */
static void moves_casts_and_creation_against_cpu(void **state) {
    (void)state;
    REQUIRE_GPU();
    for (int t = 0; t < 3; t++) {
        cx_dtype ty = floats[t];
        cx_tensor *x = random_tensor(ty, 3, TU_SHAPE(5, 37, 33), -300, 300, 30);
        cx_params pad = {0};
        cx_param_put_ints(&pad, CX_P_PADS, TU_SHAPE(1, 2, 0, -3, 2, 2, 4, -7, 1), 9);
        cx_param_put_float(&pad, CX_P_VALUE, -0.25);
        differ(CX_OP_PAD, &x, 1, &pad, 0);
        cx_tensor *u = random_tensor(ty, 3, TU_SHAPE(2, 30, 3), -1, 1, 31);
        cx_params put = {0};
        cx_param_put_ints(&put, CX_P_START, TU_SHAPE(2, 5, 40), 3);
        differ(CX_OP_PUT_SLICE, (cx_tensor *[]){x, u}, 2, &put, 0);
        cx_tensor *ix = ties_tensor(CX_S64, 2, TU_SHAPE(20, 25), 33, 0, 32);
        cx_params take = {0};
        cx_param_put_int(&take, CX_P_AXIS, 2);
        differ(CX_OP_TAKE, (cx_tensor *[]){x, ix}, 2, &take, 0);
        cx_tensor *gi = ties_tensor(CX_S64, 3, TU_SHAPE(7, 11, 2), 5, 0, 33);
        differ(CX_OP_GATHER, (cx_tensor *[]){x, gi}, 2, NULL, 0);
        cx_tensor *ai = ties_tensor(CX_S64, 3, TU_SHAPE(5, 9, 33), 37, 0, 35);
        cx_params along = {0};
        cx_param_put_int(&along, CX_P_AXIS, 1);
        differ(CX_OP_TAKE_ALONG_AXIS, (cx_tensor *[]){x, ai}, 2, &along, 0);
        tu_drop(ai);
        static const cx_dtype others[] = {CX_U8, CX_S32, CX_S64, CX_F64};
        for (int k = 0; k < 4; k++) {
            cx_params to = {0}, back = {0};
            cx_param_put_int(&to, CX_P_TYPE, others[k]);
            differ(CX_OP_AS_TYPE, &x, 1, &to, 0);
            cx_tensor *o = random_tensor(others[k], 2, TU_SHAPE(33, 65), -1e9, 1e9, 34 + k);
            cx_param_put_int(&back, CX_P_TYPE, ty);
            differ(CX_OP_AS_TYPE, &o, 1, &back, 0);
            tu_drop(o);
        }
        cx_params iota = {0}, eye = {0}, full = {0}, uni = {0}, nor = {0};
        cx_param_put_ints(&iota, CX_P_SHAPE, TU_SHAPE(3, 70001), 2);
        cx_param_put_int(&iota, CX_P_TYPE, ty);
        differ(CX_OP_IOTA, NULL, 0, &iota, 0);
        cx_param_put_int(&iota, CX_P_AXIS, 0);
        differ(CX_OP_IOTA, NULL, 0, &iota, 0);
        cx_param_put_ints(&eye, CX_P_SHAPE, TU_SHAPE(3, 40, 70), 3);
        cx_param_put_int(&eye, CX_P_TYPE, ty);
        differ(CX_OP_EYE, NULL, 0, &eye, 0);
        cx_param_put_ints(&full, CX_P_SHAPE, TU_SHAPE(999), 1);
        cx_param_put_float(&full, CX_P_VALUE, 0.1);
        cx_param_put_int(&full, CX_P_TYPE, ty);
        differ(CX_OP_FULL, NULL, 0, &full, 0);
        cx_param_put_ints(&uni, CX_P_SHAPE, TU_SHAPE(100003), 1);
        cx_param_put_int(&uni, CX_P_TYPE, ty);
        cx_param_put_int(&uni, CX_P_KEY, 987654321);
        nor = uni;
        cx_param_put_float(&uni, CX_P_MIN, -2.0);
        cx_param_put_float(&uni, CX_P_MAX, 3.0);
        differ(CX_OP_RANDOM_UNIFORM, NULL, 0, &uni, 0);
        cx_param_put_float(&nor, CX_P_MEAN, 0.5);
        cx_param_put_float(&nor, CX_P_STD, 2.0);
        differ(CX_OP_RANDOM_NORMAL, NULL, 0, &nor, tolerance(ty));
        tu_drop(x);
        tu_drop(u);
        tu_drop(ix);
        tu_drop(gi);
    }
}

/* Runs op on both devices, expecting CX_EINVAL and the same message from each. */
static void same_failure(cx_op_id op, cx_tensor **in, int n, const cx_params *ps) {
    cx_params pc = *ps, pg = *ps;
    cx_status sc = {0}, sg = {0};
    cx_tensor *gin[4];
    for (int k = 0; k < n; k++) gin[k] = moved(in[k], gpu);
    cx_tensor out_c, out_g;
    assert_int_equal(cx_run(op, cpu, in, n, &pc, &out_c, &sc), CX_EINVAL);
    assert_int_equal(cx_run(op, gpu, gin, n, &pg, &out_g, &sg), CX_EINVAL);
    printf("# %s\n", sg.message);
    assert_string_equal(sg.message, sc.message);
    for (int k = 0; k < n; k++) tu_drop(gin[k]);
}

/* take and gather check their indices as the cpu does, and the device goes on. */
static void a_bad_index_is_named(void **state) {
    (void)state;
    REQUIRE_GPU();
    cx_tensor *x = random_tensor(CX_F32, 2, TU_SHAPE(3, 7), -1, 1, 40);
    cx_tensor *ix = tu_tensor(CX_S64, 1, TU_SHAPE(4), TU_VALUES(0, 6, 7, -1));
    cx_params take = {0};
    cx_param_put_int(&take, CX_P_AXIS, 1);
    same_failure(CX_OP_TAKE, (cx_tensor *[]){x, ix}, 2, &take);
    cx_tensor *gi = tu_tensor(CX_S64, 2, TU_SHAPE(3, 2), TU_VALUES(0, 1, 2, 6, 3, 0));
    cx_params gather = {0};
    same_failure(CX_OP_GATHER, (cx_tensor *[]){x, gi}, 2, &gather);
    cx_tensor *good = tu_tensor(CX_S64, 1, TU_SHAPE(3), TU_VALUES(6, 0, 6));
    differ(CX_OP_TAKE, (cx_tensor *[]){x, good}, 2, &take, 0);
    tu_drop(x);
    tu_drop(ix);
    tu_drop(gi);
    tu_drop(good);
}

/* conv2d on each of the driver's paths (cuda_conv.c: im2col + cuBLAS, cuDNN where it loads,
 * and the default), both layouts, in geometries cuDNN takes (symmetric padding) and ones it
 * leaves to im2col (asymmetric, negative padding), with groups, strides and dilations. */
static void conv2d_against_cpu(void **state) {
    (void)state;
    REQUIRE_GPU();
    void *h = dlopen(CUDA_SO, RTLD_NOW | RTLD_NOLOAD);
    int (*set_path)(const char *) = NULL;
    if (h) *(void **)&set_path = dlsym(h, "cx_cuda_set_conv_path");
    assert_non_null(set_path);
    static const char *const paths[] = {"im2col", "cudnn", "auto"};
    for (int p = 0; p < 3; p++) {
        int rc = set_path(paths[p]);
        assert_true(rc == 0 || (rc == 2 && p != 0));
        if (rc == 2) printf("# libcudnn.so.9 does not load: %s runs im2col\n", paths[p]);
        for (int t = 0; t < 3; t++) {
            cx_dtype ty = floats[t];
            /* up to 4 x 3 x 3 products per output */
            double tol = ty == CX_F32 ? 1e-4 : ty == CX_F16 ? 1e-2 : 5e-2;
            for (int nhwc = 0; nhwc < 2; nhwc++) {
                for (int g = 0; g < 4; g++) {
                    /* n, c, h, w, o, groups; kernel 3x3 */
                    static const int64_t geo[4][6] = {{5, 4, 9, 8, 6, 1},
                                                      {3, 8, 7, 7, 8, 8},
                                                      {2, 6, 10, 9, 4, 2},
                                                      {1, 3, 6, 6, 5, 1}};
                    const int64_t *q = geo[g];
                    int64_t n = q[0], c = q[1], hh = q[2], ww = q[3], o = q[4], grp = q[5];
                    cx_tensor *x =
                        random_tensor(ty, 4, nhwc ? TU_SHAPE(n, hh, ww, c) : TU_SHAPE(n, c, hh, ww),
                                      -1, 1, 20 + g);
                    cx_tensor *k = random_tensor(
                        ty, 4, nhwc ? TU_SHAPE(3, 3, c / grp, o) : TU_SHAPE(o, c / grp, 3, 3), -1,
                        1, 30 + g);
                    cx_params ps = {0};
                    cx_param_put_int(&ps, CX_P_LAYOUT, nhwc);
                    cx_param_put_int(&ps, CX_P_FEATURE_GROUP_SIZE, grp);
                    if (g == 0) cx_param_put_int(&ps, CX_P_PADDING, 1); /* :same */
                    if (g == 1) cx_param_put_ints(&ps, CX_P_PADDING, TU_SHAPE(1, 1, 1, 1), 4);
                    if (g == 2) {
                        cx_param_put_ints(&ps, CX_P_PADDING, TU_SHAPE(2, 0, -1, 1), 4);
                        cx_param_put_ints(&ps, CX_P_STRIDES, TU_SHAPE(2, 1), 2);
                    }
                    if (g == 3) cx_param_put_ints(&ps, CX_P_KERNEL_DILATION, TU_SHAPE(2, 2), 2);
                    differ(CX_OP_CONV2D, (cx_tensor *[]){x, k}, 2, &ps, tol);
                    tu_drop(x);
                    tu_drop(k);
                }
            }
        }
    }
    set_path("auto");
}

/* An allocation far beyond the device's memory fails with CX_ENOMEM and leaves the device
 * usable. */
static void out_of_memory_then_usable(void **state) {
    (void)state;
    REQUIRE_GPU();
    long long want = gpu->props.memory * 2;
    cx_desc d = tu_desc(CX_F32, 1, (int64_t[]){want / 4});
    cx_tensor big;
    cx_status st = {0};
    assert_int_equal(cx_tensor_init(&big, gpu, &d, &st), CX_ENOMEM);
    printf("# %s\n", st.message);
    cx_tensor *a = random_tensor(CX_F32, 1, TU_SHAPE(1000), -1, 1, 13);
    differ(CX_OP_EXP, &a, 1, NULL, tolerance(CX_F32));
    tu_drop(a);
}

static void transfers_are_counted(void **state) {
    (void)state;
    REQUIRE_GPU();
    void (*counts)(void *, long long *) = NULL;
    void *h = dlopen(CUDA_SO, RTLD_NOW | RTLD_NOLOAD);
    assert_non_null(h);
    *(void **)&counts = dlsym(h, "cx_cuda_transfer_counts");
    assert_non_null(counts);
    long long before[4], after[4];
    counts(gpu->ctx, before);
    cx_tensor *a = random_tensor(CX_F32, 1, TU_SHAPE(256), -1, 1, 14);
    cx_tensor *g = moved(a, gpu);
    cx_tensor *back = moved(g, cpu);
    counts(gpu->ctx, after);
    assert_int_equal(after[0] - before[0], 1);
    assert_int_equal(after[1] - before[1], 1024);
    assert_int_equal(after[2] - before[2], 1);
    assert_int_equal(after[3] - before[3], 1024);
    tu_drop(back);
    tu_drop(g);
    tu_drop(a);
    dlclose(h);
}

/* The shared object's table is of this ABI and downloads asynchronously; checked wherever the
 * driver was built, GPU or not. */
static void the_table_is_current(void **state) {
    (void)state;
    void *h = dlopen(CUDA_SO, RTLD_NOW | RTLD_LOCAL);
    if (!h) skip(); /* not built here */
    cx_driver_entry_fn entry = NULL;
    *(void **)&entry = dlsym(h, "cx_driver_entry");
    assert_non_null(entry);
    const cx_driver *drv = entry();
    assert_int_equal(drv->abi, CX_DRIVER_ABI);
    assert_non_null(drv->download_async);
    assert_non_null(drv->download);
    dlclose(h);
}

/* Asynchronous downloads (what to_binary uses) go through the pinned staging buffer in 8 MiB
 * chunks: sizes below, at and across chunk boundaries, a prefix only, many in flight at once,
 * each called back once from another thread with the right bytes. */
static void downloads_asynchronously(void **state) {
    (void)state;
    REQUIRE_GPU();
    const size_t mib = (size_t)1 << 20;
    const size_t sizes[] = {1, 4096, 8 * mib, 8 * mib + 1, 20 * mib + 3};
    enum { N = sizeof sizes / sizeof sizes[0] };
    cx_tensor *host[N], *dev[N];
    unsigned char *dst[N];
    tu_download w[N];
    cx_status st = {0};
    for (int k = 0; k < N; k++) {
        size_t n = sizes[k];
        host[k] = malloc(sizeof(cx_tensor));
        cx_desc d = tu_desc(CX_U8, 1, (int64_t[]){(int64_t)n});
        assert_int_equal(cx_tensor_init(host[k], cpu, &d, &st), CX_OK);
        for (size_t i = 0; i < n; i++)
            ((unsigned char *)host[k]->data)[i] = (unsigned char)(i * 7 + k);
        dev[k] = moved(host[k], gpu);
        dst[k] = malloc(n + 1);
        dst[k][n] = 0xEE;
        tu_download_init(&w[k]);
        assert_int_equal(cx_tensor_pin(dev[k], &st), CX_OK);
    }
    /* all enqueued before any is waited for: they share the staging buffer */
    for (int k = 0; k < N; k++)
        if (cx_tensor_download_async(dev[k], dst[k], sizes[k], tu_download_done, &w[k], &st))
            fail_msg("download_async: %s", st.message);
    for (int k = 0; k < N; k++) {
        assert_true(tu_download_wait(&w[k], 30000));
        if (w[k].rc != CX_OK) fail_msg("download %d: %s", k, w[k].message);
        assert_false(pthread_equal(w[k].thread, w[k].caller));
        assert_memory_equal(dst[k], host[k]->data, sizes[k]);
        assert_int_equal(dst[k][sizes[k]], 0xEE);
        assert_int_equal(w[k].calls, 1);
    }
    /* a prefix that ends inside the second chunk */
    tu_download p;
    tu_download_init(&p);
    unsigned char *part = calloc(1, 9 * mib);
    assert_int_equal(
        cx_tensor_download_async(dev[N - 1], part, 9 * mib - 5, tu_download_done, &p, &st), CX_OK);
    assert_true(tu_download_wait(&p, 30000));
    assert_int_equal(p.rc, CX_OK);
    assert_memory_equal(part, host[N - 1]->data, 9 * mib - 5);
    assert_int_equal(part[9 * mib - 5], 0);
    free(part);
    tu_download_destroy(&p);
    for (int k = 0; k < N; k++) {
        cx_tensor_unpin(dev[k]);
        tu_download_destroy(&w[k]);
        free(dst[k]);
        tu_drop(dev[k]);
        tu_drop(host[k]);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(listed_with_a_reason),
        cmocka_unit_test(cpu_still_computes),
        cmocka_unit_test(elementwise_against_cpu),
        cmocka_unit_test(reductions_and_layout_against_cpu),
        cmocka_unit_test(dot_against_cpu),
        cmocka_unit_test(fused_against_cpu),
        cmocka_unit_test(fused_chain_against_its_ops),
        cmocka_unit_test(fused_chain_with_a_sum),
        cmocka_unit_test(every_primitive_is_claimed),
        cmocka_unit_test(arg_and_truth_against_cpu),
        cmocka_unit_test(moves_casts_and_creation_against_cpu),
        cmocka_unit_test(a_bad_index_is_named),
        cmocka_unit_test(conv2d_against_cpu),
        cmocka_unit_test(out_of_memory_then_usable),
        cmocka_unit_test(transfers_are_counted),
        cmocka_unit_test(the_table_is_current),
        cmocka_unit_test(downloads_asynchronously),
    };
    return cmocka_run_group_tests(tests, setup, NULL);
}
