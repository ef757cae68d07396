/* The blas driver: the fast host device. OpenBLAS, oneDNN and vector kernels on host memory.
 *
 * - One device, "blas" (what `:host` stands for where it loads). Its buffers are host memory
 *   from the cpu driver's allocator, so moving a tensor between :blas and :cpu, or falling back,
 *   copies nothing.
 * - Native: every primitive the cpu driver runs, with the driver's own copy of the cpu kernels
 *   (linked in, hidden, as an out-of-tree driver would carry them) as the fallback for what the
 *   faster paths do not take:
 *     dot in f32, f64, f16 and bf16 on OpenBLAS GEMM (blas_dot.c); dense when its three inputs
 *     share a float type, its activation applied to each block of the product (blas_dense.c);
 *     conv2d on oneDNN or im2col + GEMM, whichever measured faster for the shape (blas_dnnl.c,
 *     blas_conv.c); conv2d's gradients on oneDNN's backward primitives for one group (otherwise
 *     they decompose here); max_pool2d, avg_pool2d and their gradients as direct loops
 *     (blas_pool2d.c); relu as one max(x, 0) pass; elementwise ops, sums, softmax,
 *     log_softmax, logsumexp, layer_norm, gelu, silu and categorical_cross_entropy on the
 *     AVX2 / AVX-512 vector kernels chosen by cpuid, with SLEEF (blas_simd.c). The library
 *     callback names what runs each call.
 * - Threads: one pool (blas_pool.c), as many threads as OpenBLAS would use (the cores, or
 *   OPENBLAS_NUM_THREADS up to the cores) or CASCADE_BLAS_THREADS, shared by GEMM (OpenBLAS
 *   single-threaded in each) and the vector kernels; a caller takes only the idle ones, and
 *   runs the parts no worker took itself (the split never depends on who is free). oneDNN
 *   runs on OpenMP with as many threads, passive between calls.
 * - Linked against libopenblas and libsleef: without them dlopen fails and the device is listed
 *   as unavailable with dlerror's reason. libdnnl is opened at the first convolution. */
#include <cblas.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../../core/tensor.h"
#include "blas_kernels.h"
#include "blas_simd.h"

static const char signature[] =
#include "../../core/ops_signature.inc"
    ;

static int blas_threads;

static cx_code blas_probe(void **drv, cx_status *st) {
    *drv = NULL;
    /* the driver's threads split each product; OpenBLAS runs single-threaded inside them */
    const char *env = getenv("CASCADE_BLAS_THREADS");
    int want = env ? atoi(env) : 0;
    blas_threads = blas_pool_start(want > 0 ? want : openblas_get_num_threads());
    openblas_set_num_threads(1);
    blas_simd();
    return CX_OK;
}

static int blas_device_count(void *drv) {
    return 1;
}

/* "0.3.21" out of "OpenBLAS 0.3.21 NO_LAPACKE DYNAMIC_ARCH ..." */
static void openblas_version(char *out, size_t len) {
    const char *config = openblas_get_config();
    const char *v = config ? strchr(config, ' ') : NULL;
    snprintf(out, len, "%.*s", v ? (int)strcspn(v + 1, " ") : 1, v ? v + 1 : "?");
}

static cx_code blas_open_device(void *drv, int index, void **dev, cx_device_props *props,
                                cx_status *st) {
    char version[32];
    openblas_version(version, sizeof version);
    *dev = NULL;
    snprintf(props->name, sizeof props->name, "OpenBLAS %s (%s kernels)", version,
             openblas_get_corename());
    snprintf(props->kind, sizeof props->kind, "cpu");
    long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
    props->memory = pages > 0 && page > 0 ? (long long)pages * page : 0;
    props->host_memory = true;
    const simd_table *simd = blas_simd();
    snprintf(props->detail, sizeof props->detail,
             "%d threads; OpenBLAS: dot, dense; %s: conv2d; %s: elementwise, as_type, "
             "reductions, softmax, layer_norm, activations, cross-entropy",
             blas_threads, blas_dnnl_built() ? "oneDNN|OpenBLAS" : "OpenBLAS",
             simd ? (simd == &simd_avx2 ? "avx2+SLEEF" : "avx512+SLEEF") : "C");
    return CX_OK;
}

/* Host buffers from the cpu driver's allocator (this driver's copy of it). */
static cx_code blas_alloc(void *dev, size_t bytes, void **out, cx_status *st) {
    return cx_cpu_driver()->alloc(NULL, bytes, out, st);
}

static void blas_release(void *dev, void *buffer) {
    cx_cpu_driver()->release(NULL, buffer);
}

static cx_code blas_copy(void *dev, void *dst, const void *src, size_t bytes, cx_status *st) {
    if (bytes) memcpy(dst, src, bytes);
    return CX_OK;
}

static bool is_float(cx_dtype t) {
    return t == CX_F16 || t == CX_BF16 || t == CX_F32 || t == CX_F64;
}

static bool is_float32ish(cx_dtype t) {
    return t == CX_F16 || t == CX_BF16 || t == CX_F32;
}

/* A rank-0 tensor of type t over the value at `data`, for a one-value operand. */
static cx_tensor one_value_tensor(cx_dtype t, const void *data) {
    cx_tensor v = {.numel = 1, .nbytes = cx_dtype_size(t), .data = (void *)data};
    v.desc.dtype = t;
    v.desc.rank = 0;
    return v;
}

/* relu as max(x, 0) in one elementwise pass: the vector kernels, or the cpu's max kernel for the
 * types they do not take, with 0 as a one-value operand (zero bits are 0 in every type) */
static cx_code blas_relu(const cx_tensor *x, cx_tensor *out, cx_status *st) {
    static const int64_t zero[1] = {0};
    cx_tensor z = one_value_tensor(x->desc.dtype, zero);
    const cx_tensor *in[2] = {x, &z};
    if (blas_simd_elementwise(CX_OP_MAX, in, 2, out)) return CX_OK;
    return cx_cpu_driver()->execute(NULL, CX_OP_MAX, in, 2, NULL, out, st);
}

/* mean of f32 or f64 as the decomposition computes it, without its steps' costs: this driver's
 * sum, then the division by the count (a value of the type) in place, by the vector kernels'
 * divide (the decomposition's divide step; the cpu's loop where they are off) */
static cx_code blas_mean(const cx_tensor *x, const cx_params *ps, cx_tensor *out, cx_status *st) {
    const cx_driver *cpu = cx_cpu_driver();
    if (!blas_simd_sum(x, ps, out) && cpu->execute(NULL, CX_OP_SUM, &x, 1, ps, out, st) != CX_OK)
        return st->code;
    const cx_param *axes = &ps->p[CX_P_AXES];
    double count = 1;
    for (int k = 0; k < axes->n; k++) count *= (double)x->desc.shape[axes->i[k]];
    float count_f32 = (float)count;
    cx_dtype t = out->desc.dtype;
    cx_tensor n =
        one_value_tensor(t, t == CX_F32 ? (const void *)&count_f32 : (const void *)&count);
    const cx_tensor *in[2] = {out, &n};
    if (blas_simd_elementwise(CX_OP_DIVIDE, in, 2, out)) return CX_OK;
    return cpu->execute(NULL, CX_OP_DIVIDE, in, 2, NULL, out, st);
}

static cx_cap blas_capability(void *dev, cx_op_id op, const cx_dtype *types, int n_in) {
    if (op == CX_OP_SOFTMAX || op == CX_OP_LOG_SOFTMAX || op == CX_OP_GELU || op == CX_OP_SILU)
        return blas_simd() && n_in == 1 && is_float32ish(types[0]) ? CX_CAP_SHAPE : CX_CAP_NO;
    if (op == CX_OP_FUSED) {
        /* f32 chains; f16/bf16 ones too, without a sum (refine) */
        bool one = blas_simd() && n_in >= 1 && is_float32ish(types[0]);
        for (int k = 0; k < n_in; k++) one = one && types[k] == types[0];
        return one ? CX_CAP_SHAPE : CX_CAP_NO;
    }
    if (op == CX_OP_LEAKY_RELU || op == CX_OP_ELU || op == CX_OP_SOFTPLUS)
        return blas_simd_param_types(op, types, n_in) ? CX_CAP_NATIVE : CX_CAP_NO;
    if (op == CX_OP_MEAN)
        return n_in == 1 && (types[0] == CX_F32 || types[0] == CX_F64) ? CX_CAP_NATIVE : CX_CAP_NO;
    if (op == CX_OP_MAX_POOL2D) return n_in == 1 && is_float(types[0]) ? CX_CAP_NATIVE : CX_CAP_NO;
    if (op == CX_OP_RELU) return n_in == 1 ? CX_CAP_NATIVE : CX_CAP_NO;
    if (op == CX_OP_AVG_POOL2D || op == CX_OP_AVG_POOL2D_GRAD)
        return n_in == 1 && is_float(types[0]) ? CX_CAP_NATIVE : CX_CAP_NO;
    if (op == CX_OP_LOGSUMEXP)
        return blas_simd() && n_in == 1 && is_float32ish(types[0]) ? CX_CAP_SHAPE : CX_CAP_NO;
    if (op == CX_OP_CATEGORICAL_CROSS_ENTROPY)
        return blas_simd() && n_in == 2 && is_float32ish(types[0]) && types[1] == types[0]
                   ? CX_CAP_SHAPE
                   : CX_CAP_NO;
    /* the gradients compute in f32 (f16/bf16 and integers widened) on oneDNN, not in f64;
     * refine decides by the geometry */
    if (op == CX_OP_CONV2D_GRAD_INPUT || op == CX_OP_CONV2D_GRAD_KERNEL)
        return n_in == 2 && types[0] != CX_F64 && types[1] != CX_F64 && blas_dnnl_available()
                   ? CX_CAP_SHAPE
                   : CX_CAP_NO;
    if (op == CX_OP_MAX_POOL2D_GRAD)
        return n_in == 2 && is_float(types[0]) && is_float(types[1]) ? CX_CAP_NATIVE : CX_CAP_NO;
    if (op == CX_OP_LAYER_NORM)
        return blas_simd() && n_in == 3 && is_float32ish(types[0]) && types[1] == types[0] &&
                       types[2] == types[0]
                   ? CX_CAP_SHAPE
                   : CX_CAP_NO;
    if (op == CX_OP_RECURRENT) {
        bool f32 = blas_simd() && n_in == 5;
        for (int k = 0; f32 && k < 5; k++) f32 = types[k] == CX_F32;
        return f32 ? CX_CAP_NATIVE : CX_CAP_NO;
    }
    if (op == CX_OP_CONV2D)
        return n_in == 2 && is_float(types[0]) && types[1] == types[0] ? CX_CAP_SHAPE : CX_CAP_NO;
    if (op == CX_OP_DENSE)
        return n_in == 3 && is_float(types[0]) && types[1] == types[0] && types[2] == types[0]
                   ? CX_CAP_SHAPE
                   : CX_CAP_NO;
    /* random numbers exist in float types only: claim no more than the op accepts */
    if (op == CX_OP_RANDOM_UNIFORM || op == CX_OP_RANDOM_NORMAL)
        return is_float(types[0]) ? CX_CAP_NATIVE : CX_CAP_NO;
    return cx_op_table[op].kind == CX_KIND_COMPOSITE ? CX_CAP_NO : CX_CAP_NATIVE;
}

static bool blas_refine(void *dev, cx_op_id op, const cx_desc *in, int n_in, const cx_params *ps,
                        char *reason, size_t len) {
    if (op == CX_OP_CONV2D) {
        if (blas_conv2d_fits(&in[0], &in[1], ps)) return true;
        snprintf(reason, len, "conv2d's im2col GEMM exceeds OpenBLAS's 32-bit dimensions");
        return false;
    }
    if (op == CX_OP_SOFTMAX || op == CX_OP_LOG_SOFTMAX || op == CX_OP_GELU || op == CX_OP_SILU) {
        if (blas_simd_fused_fits(op, &in[0], ps)) return true;
        snprintf(reason, len, "the fused %s runs along the last axis that is not 1 only",
                 cx_op_table[op].name);
        return false;
    }
    if (op == CX_OP_CONV2D_GRAD_INPUT || op == CX_OP_CONV2D_GRAD_KERNEL) {
        if (blas_conv2d_grad_fits(op, in, n_in, ps)) return true;
        snprintf(reason, len,
                 "oneDNN runs %s for one group and padding >= 0 only (or is not installed)",
                 cx_op_table[op].name);
        return false;
    }
    if (op == CX_OP_FUSED) {
        if (blas_simd_chain_fits(in, n_in, ps)) return true;
        snprintf(reason, len,
                 "the fused chain has an op without a vector kernel, or sums f16/bf16");
        return false;
    }
    if (op == CX_OP_LOGSUMEXP) {
        if (blas_simd_rowred_fits(op, in, n_in, ps)) return true;
        snprintf(reason, len, "the fused logsumexp reduces the last axes only");
        return false;
    }
    if (op == CX_OP_CATEGORICAL_CROSS_ENTROPY) {
        if (blas_simd_rowred_fits(op, in, n_in, ps)) return true;
        snprintf(reason, len,
                 "the fused categorical_cross_entropy takes y_true and y_pred of the "
                 "same shape and type");
        return false;
    }
    if (op == CX_OP_LAYER_NORM) {
        if (blas_simd_layer_norm_fits(in, n_in, ps)) return true;
        snprintf(reason, len,
                 "the fused layer_norm normalises the last axes, with gamma and beta of their "
                 "size or one value");
        return false;
    }
    if (op != CX_OP_DENSE) return true;
    if (!blas_dense_activation_fits(ps->p[CX_P_ACTIVATION].i[0], in[0].dtype)) {
        snprintf(reason, len, "the fused dense applies gelu and silu to f16, bf16 and f32 only");
        return false;
    }
    int64_t k = in[1].shape[0], n = in[1].shape[1], m = 1;
    for (int a = 0; a + 1 < in[0].rank; a++) m *= in[0].shape[a];
    if (blas_dims_fit(m, n, k)) return true;
    snprintf(reason, len, "dense of %lld x %lld x %lld exceeds OpenBLAS's 32-bit dimensions",
             (long long)m, (long long)k, (long long)n);
    return false;
}

/* conv2d, with the chain of its EPILOGUE parameter when it has inputs past its two
 * (blas_epilogue_can) */
static cx_code conv2d(const cx_tensor *const *in, int n_in, const cx_params *ps, cx_tensor *out,
                      cx_status *st) {
    blas_epilogue *epi = n_in > 2 ? blas_epilogue_new(out, in + 2, n_in - 2, ps) : NULL;
    if (n_in > 2 && !epi)
        return cx_fail(st, CX_EINVAL,
                       "blas: conv2d of %d inputs without an epilogue the vector kernels run",
                       n_in);
    cx_code rc = blas_conv2d(in[0], in[1], ps, out, epi, st);
    blas_epilogue_free(epi);
    return rc;
}

static cx_code blas_execute(void *dev, cx_op_id op, const cx_tensor *const *in, int n_in,
                            const cx_params *ps, cx_tensor *out, cx_status *st) {
    if (op == CX_OP_DOT) return blas_dot(in[0], in[1], ps, out, st);
    if (op == CX_OP_DENSE) return blas_dense(in[0], in[1], in[2], ps, out, st);
    if (op == CX_OP_CONV2D) return conv2d(in, n_in, ps, out, st);
    if (op == CX_OP_SOFTMAX || op == CX_OP_LOG_SOFTMAX || op == CX_OP_GELU || op == CX_OP_SILU)
        return blas_simd_fused(op, in[0], ps, out)
                   ? CX_OK
                   : cx_fail(st, CX_ENOMEM, "blas: no memory for the buffers of %s",
                             cx_op_table[op].name);
    if (op == CX_OP_FUSED)
        return blas_simd_chain(in, n_in, ps, out)
                   ? CX_OK
                   : cx_fail(st, CX_ENOMEM, "blas: no memory for the blocks of fused");
    if (op == CX_OP_RECURRENT) return blas_recurrent(in, ps, out, st);
    if (op == CX_OP_MAX_POOL2D) return blas_max_pool2d(in[0], ps, out, st);
    if (op == CX_OP_RELU) return blas_relu(in[0], out, st);
    if (op == CX_OP_AVG_POOL2D) return blas_avg_pool2d(in[0], ps, out, st);
    if (op == CX_OP_AVG_POOL2D_GRAD) return blas_avg_pool2d_grad(in[0], ps, out, st);
    if (op == CX_OP_CONV2D_GRAD_INPUT || op == CX_OP_CONV2D_GRAD_KERNEL)
        return blas_conv2d_grad(op, in[0], in[1], ps, out, st);
    if (op == CX_OP_MAX_POOL2D_GRAD) return blas_max_pool2d_grad(in[0], in[1], ps, out, st);
    if (cx_op_table[op].kind == CX_KIND_LINALG) return blas_linalg(op, in, n_in, ps, out, st);
    if (op == CX_OP_LAYER_NORM)
        return blas_simd_layer_norm(in, ps, out)
                   ? CX_OK
                   : cx_fail(st, CX_ENOMEM, "blas: no memory for the buffers of layer_norm");
    if (op == CX_OP_LOGSUMEXP || op == CX_OP_CATEGORICAL_CROSS_ENTROPY)
        return blas_simd_rowred(op, in, ps, out)
                   ? CX_OK
                   : cx_fail(st, CX_ENOMEM, "blas: no memory for the buffers of %s",
                             cx_op_table[op].name);
    if (op == CX_OP_SUM && n_in == 1 && blas_simd_sum(in[0], ps, out)) return CX_OK;
    if ((op == CX_OP_CLIP || op == CX_OP_LEAKY_RELU || op == CX_OP_ELU || op == CX_OP_SOFTPLUS) &&
        blas_simd_param_op(op, in, n_in, ps, out))
        return CX_OK;
    if (op == CX_OP_MEAN) return blas_mean(in[0], ps, out, st);
    if ((op == CX_OP_REDUCE_MAX || op == CX_OP_REDUCE_MIN || op == CX_OP_ARGMAX ||
         op == CX_OP_ARGMIN) &&
        n_in == 1 && blas_simd_extreme(op, in[0], ps, out))
        return CX_OK;
    if (op == CX_OP_AS_TYPE && n_in == 1 && blas_simd_cast(in[0], out)) return CX_OK;
    if (cx_op_table[op].kind == CX_KIND_WINDOW && blas_window(op, in, n_in, ps, out)) return CX_OK;
    if (blas_simd_elementwise(op, in, n_in, out)) return CX_OK;
    if (cx_op_table[op].kind == CX_KIND_LAYOUT && blas_layout(op, in, n_in, ps, out)) return CX_OK;
    if ((op == CX_OP_SORT || op == CX_OP_ARGSORT || op == CX_OP_REVERSE || op == CX_OP_PAD ||
         op == CX_OP_TAKE_ALONG_AXIS || cx_op_table[op].kind == CX_KIND_SCAN) &&
        blas_split_rows(op, in, n_in, ps, out))
        return CX_OK;
    return cx_cpu_driver()->execute(NULL, op, in, n_in, ps, out, st);
}

/* OpenBLAS for the products, the vector kernels where they take the op and its layout
 * (blas_simd.c), the cpu driver's portable kernels for the rest. */
static const char *blas_library(void *dev, cx_op_id op, const cx_desc *in, int n_in,
                                const cx_params *ps) {
    if (op == CX_OP_DENSE) return n_in == 3 ? blas_dense_library(&in[0], &in[1]) : "openblas";
    if (op == CX_OP_CONV2D_GRAD_INPUT || op == CX_OP_CONV2D_GRAD_KERNEL) return "onednn";
    if (op == CX_OP_CONV2D)
        return n_in == 2 && ps ? blas_conv2d_library(&in[0], &in[1], ps) : "openblas";
    if (op == CX_OP_DOT)
        return n_in == 2 && is_float(in[0].dtype) ? blas_dot_library(&in[0], &in[1], ps)
                                                  : "portable";
    if (op == CX_OP_RECURRENT)
        return n_in == 5 && in[0].rank == 3 && in[1].rank == 2 &&
                       !blas_recurrent_packs(&in[0], &in[1])
                   ? "openblas"
               : blas_simd() ? blas_simd()->name
                             : "portable";
    if (cx_op_table[op].kind == CX_KIND_LINALG)
        return blas_linalg_fits(op, in, n_in < 2 ? n_in : 2) ? "openblas" : "portable";
    if (op == CX_OP_RELU && n_in == 1) { /* max(x, 0) */
        cx_desc two[2] = {in[0], in[0]};
        two[1].rank = 0;
        const char *simd = blas_simd_library(CX_OP_MAX, two, 2, NULL);
        return simd ? simd : "portable";
    }
    const char *simd = blas_simd_library(op, in, n_in, ps);
    return simd ? simd : "portable";
}

/* A chain after a convolution runs on each block of its result as the block is written (f32,
 * whichever way the convolution runs: blas_conv2d). */
static bool blas_epilogue_can(void *dev, cx_op_id op, const cx_desc *in, int n_op, int n_in,
                              const cx_desc *out, const cx_params *ps) {
    (void)dev;
    return op == CX_OP_CONV2D && n_op == 2 && n_in > 2 &&
           blas_epilogue_fits(out, in + 2, n_in - 2, ps);
}

/* The choices between oneDNN and OpenBLAS are the only ones this driver times. */
static void blas_set_reproducible(void *dev, bool on) {
    blas_dnnl_set_fixed(on);
}

static const cx_driver blas_driver = {
    .abi = CX_DRIVER_ABI,
    .name = "blas",
    .ops_signature = signature,
    .probe = blas_probe,
    .device_count = blas_device_count,
    .open_device = blas_open_device,
    .alloc = blas_alloc,
    .release = blas_release,
    .upload = blas_copy,
    .download = blas_copy,
    .capability = blas_capability,
    .refine = blas_refine,
    .execute = blas_execute,
    .download_async = NULL, /* host memory: a download is a memcpy */
    .library = blas_library,
    .set_reproducible = blas_set_reproducible,
    .epilogue = blas_epilogue_can,
};

__attribute__((visibility("default"))) const cx_driver *cx_driver_entry(void) {
    return &blas_driver;
}
