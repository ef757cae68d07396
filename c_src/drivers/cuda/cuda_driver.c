/* The cuda driver: NVIDIA GPUs through the CUDA runtime (linked statically), cuBLAS and the
 * kernels of kernels.cu, behind the driver table (driver.h). Built by driver.mk only where
 * nvcc is found; at run time a machine without the NVIDIA driver or without a GPU lists cuda as
 * unavailable with the reason (cuda_probe).
 *
 * Claims every primitive for f32, f16 and bf16 (f16/bf16 stored natively, computed in f32
 * registers), with the cpu driver's semantics (the differential suite compares them):
 *   - every elementwise op of the UNARY, UNARY_FLOAT, BINARY, BINARY_FLOAT, COMPARE and LOGICAL
 *     kinds, with broadcasting (comparisons and logical ops also on u8 inputs); select (any
 *     predicate of u8/f16/bf16/f32) and clip;
 *   - as_type between every two types (f16, bf16, f32, f64, u8, s32, s64), with the cpu's
 *     rounding and saturation;
 *   - sum, product, reduce_max, reduce_min over any axes; all and any (also of u8); argmax and
 *     argmin with the cpu's tie and NaN rules;
 *   - dot through cuBLAS, any contraction (32-bit GEMM sizes);
 *   - random_uniform and random_normal (and f64): core/philox.h's Philox-4x32-10 in device code,
 *     uniform numbers bit for bit the cpu's, normal ones within a few ulp (device sin/cos/log);
 *   - the composites softmax and log_softmax (any axis) and layer_norm (trailing axes, the three
 *     inputs of one type), each one fused kernel;
 *   - conv2d (two inputs of one type, any geometry within cuBLAS's 32-bit sizes): cuDNN when
 *     libcudnn.so.9 loads, else im2col + cuBLAS; CASCADE_CUDA_CONV chooses (cuda_conv.c).
 * For every type (elements moved or stored by size): reshape, squeeze, transpose, broadcast,
 * slice, put_slice, pad (negative and interior padding), reverse, concatenate, take, gather
 * (s64 indices), full, iota and eye (full's, eye's and pad's value converted by the cpu driver,
 * so it is the cpu's bit for bit).
 *
 * Nothing waits for the GPU but take and gather: they check their indices first, as the cpu
 * does, with a kernel that raises a flag the owner thread reads back (a stream synchronisation),
 * so that an out-of-range index fails with CX_EINVAL naming it.
 *
 * Not claimed: integer and f64 arithmetic, reductions and arg-reductions of integers and f64,
 * and the other composites' own kernels: composites are decomposed on the GPU, primitives fall
 * back to the cpu under the fallback policy. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../core/half.h"
#include "cuda_conv.h"
#include "cuda_driver.h"
#include "../../core/fused.h"
#include "cuda_kernels.h"

static const char signature[] =
#include "../../core/ops_signature.inc"
    ;

static int device_total;

/* ---- the table: start and memory ---------------------------------------------------------- */

static cx_code cuda_drv_probe(void **drv, cx_status *st) {
    *drv = NULL;
    return cuda_probe(&device_total, st);
}

static int cuda_drv_device_count(void *drv) {
    return device_total;
}

static cx_code cuda_drv_open(void *drv, int index, void **dev, cx_device_props *props,
                             cx_status *st) {
    return cuda_device_open(index, (cuda_device **)dev, props, st);
}

typedef struct {
    size_t bytes;
    void **out;
} alloc_job;

static cx_code run_alloc(cuda_device *d, void *arg, cx_status *st) {
    alloc_job *j = arg;
    return cuda_mem_alloc(d, j->bytes, j->out, st);
}

static cx_code cuda_drv_alloc(void *dev, size_t bytes, void **out, cx_status *st) {
    alloc_job j = {bytes, out};
    return cuda_submit(dev, run_alloc, &j, st);
}

static cx_code run_release(cuda_device *d, void *arg, cx_status *st) {
    cuda_mem_free(d, *(void **)arg);
    return CX_OK;
}

static void cuda_drv_release(void *dev, void *buffer) {
    void **arg = malloc(sizeof *arg);
    if (!arg) return;
    *arg = buffer;
    cuda_post(dev, run_release, arg);
}

typedef struct {
    void *dst;
    const void *src;
    size_t bytes;
    enum cudaMemcpyKind kind;
} copy_job;

static cx_code run_copy(cuda_device *d, void *arg, cx_status *st) {
    copy_job *j = arg;
    if (j->bytes == 0) return CX_OK;
    /* From pageable memory the call returns once the source is staged, so the caller may drop
     * it; to pageable memory it returns once the copy is done. The synchronisation after a
     * download also surfaces the errors of earlier kernels. */
    cx_code rc = cuda_check(d, cudaMemcpyAsync(j->dst, j->src, j->bytes, j->kind, d->stream),
                            "cudaMemcpyAsync", st);
    if (rc || j->kind == cudaMemcpyHostToDevice) return rc;
    return cuda_check(d, cudaStreamSynchronize(d->stream), "cudaStreamSynchronize", st);
}

static cx_code cuda_drv_upload(void *dev, void *dst, const void *src, size_t bytes, cx_status *st) {
    cuda_device *d = dev;
    copy_job j = {dst, src, bytes, cudaMemcpyHostToDevice};
    cx_code rc = cuda_submit(d, run_copy, &j, st);
    if (!rc) {
        atomic_fetch_add(&d->uploads, 1);
        atomic_fetch_add(&d->upload_bytes, (long long)bytes);
    }
    return rc;
}

static cx_code cuda_drv_download(void *dev, void *dst, const void *src, size_t bytes,
                                 cx_status *st) {
    cuda_device *d = dev;
    copy_job j = {dst, src, bytes, cudaMemcpyDeviceToHost};
    cx_code rc = cuda_submit(d, run_copy, &j, st);
    if (!rc) {
        atomic_fetch_add(&d->downloads, 1);
        atomic_fetch_add(&d->download_bytes, (long long)bytes);
    }
    return rc;
}

/* ---- asynchronous downloads ------------------------------------------------------------------
 *
 * The owner enqueues, per chunk of at most CUDA_STAGING_BYTES, a copy into the device's pinned
 * staging buffer and a stream callback that copies the chunk on into the caller's memory; the
 * callback that drops the last hold calls `done`. Every chunk of every download goes through
 * the one staging buffer: a callback blocks later work on the stream until it returns, so the
 * next copy into the buffer cannot start before the previous chunk was copied out.
 *
 * cudaStreamAddCallback rather than cudaLaunchHostFunc: a host function is not called at all
 * once the context has an error, and the caller would wait for a reply that never comes; a
 * stream callback runs exactly once, with the stream's status. Callbacks may make no CUDA
 * calls: they copy host memory and call `done`, which may release buffers, and cuda_drv_release
 * only posts to the owner (a mutex held for microseconds, never across GPU work). */

/* Large enough that a chunk's callback is noise beside its copy, small enough to pin once per
 * device without a second thought. */
#define CUDA_STAGING_BYTES ((size_t)8 << 20)

typedef struct async_download async_download;

typedef struct {
    async_download *a;
    size_t offset, len;
} download_chunk;

struct async_download {
    cuda_device *d;
    unsigned char *dst;
    const unsigned char *src;
    const unsigned char *staging;
    size_t bytes;
    cx_download_done done;
    void *ctx;
    /* one per enqueued callback, plus the owner's while it enqueues; the last one out finishes */
    _Atomic int holds;
    /* the first error status a callback was given (0: none) */
    _Atomic int stream_error;
    /* an enqueue that failed after the first callback was enqueued: written by the owner before
     * it drops its hold */
    cx_code enqueue_rc;
    char enqueue_msg[256];
    int n_chunks;
    download_chunk chunks[];
};

/* The last hold: the result goes to the caller and the download is freed. On a CUDA callback
 * thread or on the owner thread; no CUDA calls (cudaGetErrorName included). */
static void download_finish(async_download *a) {
    cuda_device *d = a->d;
    int e = atomic_load(&a->stream_error);
    char msg[320] = "";
    cx_code rc = CX_OK;
    if (a->enqueue_rc != CX_OK) {
        rc = a->enqueue_rc;
        snprintf(msg, sizeof msg, "%s", a->enqueue_msg);
    } else if (e != 0) {
        /* an earlier kernel failed; if the error is sticky, the next call on the device marks
         * it lost and names the error */
        rc = CX_EDEVICE;
        snprintf(msg, sizeof msg,
                 "cuda:%d: the download failed: the stream reported CUDA error %d (an earlier "
                 "operation on the device failed)",
                 d->ordinal, e);
    } else {
        atomic_fetch_add(&d->downloads, 1);
        atomic_fetch_add(&d->download_bytes, (long long)a->bytes);
    }
    cx_download_done done = a->done;
    void *ctx = a->ctx;
    free(a);
    done(ctx, rc, rc == CX_OK ? NULL : msg);
}

static void download_drop(async_download *a) {
    if (atomic_fetch_sub(&a->holds, 1) == 1) download_finish(a);
}

/* A stream callback, after a chunk's copy into the staging buffer: copies it on. */
static void CUDART_CB chunk_landed(cudaStream_t stream, cudaError_t status, void *arg) {
    download_chunk *c = arg;
    async_download *a = c->a;
    if (status != cudaSuccess) {
        int none = 0;
        atomic_compare_exchange_strong(&a->stream_error, &none, (int)status);
    } else if (c->len && atomic_load(&a->stream_error) == 0) {
        memcpy(a->dst + c->offset, a->staging, c->len);
    }
    download_drop(a);
}

/* On the owner thread. A failure before the first callback is enqueued is returned (nothing
 * will run, the caller frees the download); after it, it goes to `done` once the callbacks
 * already enqueued have run. */
static cx_code run_download_async(cuda_device *d, void *arg, cx_status *st) {
    async_download *a = arg;
    if (!d->staging) {
        cudaError_t e = cudaMallocHost(&d->staging, CUDA_STAGING_BYTES);
        if (e != cudaSuccess) {
            d->staging = NULL;
            cx_code rc = cuda_check(d, e, "cudaMallocHost", st);
            if (atomic_load(&d->lost)) return rc;
            /* no pinned memory to spare: this download, and the next until it can be had,
             * goes the synchronous way */
            return cx_fail(st, CX_EUNSUPPORTED,
                           "cuda:%d: no pinned staging buffer for an asynchronous download (%s)",
                           d->ordinal, st->message);
        }
    }
    a->staging = d->staging;
    atomic_store(&a->holds, 1);
    cx_code rc = CX_OK;
    int k = 0;
    for (; k < a->n_chunks; k++) {
        download_chunk *c = &a->chunks[k];
        if (c->len && (rc = cuda_check(d,
                                       cudaMemcpyAsync(d->staging, a->src + c->offset, c->len,
                                                       cudaMemcpyDeviceToHost, d->stream),
                                       "cudaMemcpyAsync", st)))
            break;
        atomic_fetch_add(&a->holds, 1); /* before: the callback may run at once */
        if ((rc = cuda_check(d, cudaStreamAddCallback(d->stream, chunk_landed, c, 0),
                             "cudaStreamAddCallback", st))) {
            atomic_fetch_sub(&a->holds, 1);
            break;
        }
    }
    if (rc != CX_OK && k == 0) return rc;
    if (rc != CX_OK) {
        a->enqueue_rc = rc;
        snprintf(a->enqueue_msg, sizeof a->enqueue_msg, "%.255s", st->message);
    }
    download_drop(a);
    return CX_OK;
}

static cx_code cuda_drv_download_async(void *dev, void *dst, const void *src, size_t bytes,
                                       cx_download_done done, void *ctx, cx_status *st) {
    size_t n = bytes ? (bytes + CUDA_STAGING_BYTES - 1) / CUDA_STAGING_BYTES : 1;
    async_download *a = calloc(1, sizeof *a + n * sizeof(download_chunk));
    if (!a) return cx_fail(st, CX_ENOMEM, "cuda: out of host memory");
    a->d = dev;
    a->dst = dst;
    a->src = src;
    a->bytes = bytes;
    a->done = done;
    a->ctx = ctx;
    a->enqueue_rc = CX_OK;
    a->n_chunks = (int)n;
    for (size_t k = 0; k < n; k++) {
        size_t off = k * CUDA_STAGING_BYTES;
        a->chunks[k] = (download_chunk){
            a, off, bytes - off < CUDA_STAGING_BYTES ? bytes - off : CUDA_STAGING_BYTES};
    }
    cx_code rc = cuda_submit(dev, run_download_async, a, st);
    /* on success `a` belongs to the callbacks and may already be freed */
    if (rc != CX_OK) free(a);
    return rc;
}

/* ---- capabilities -----------------------------------------------------------------------------
 */

/* The types the cast, iota and eye kernels are written for. */
static bool kernel_type(cx_dtype t) {
    switch (t) {
    case CX_F16:
    case CX_BF16:
    case CX_F32:
    case CX_F64:
    case CX_U8:
    case CX_S32:
    case CX_S64: return true;
    default: return false;
    }
}

static bool is_float3(cx_dtype t) {
    return t == CX_F32 || t == CX_F16 || t == CX_BF16;
}

/* Every input of one type among f32, f16 and bf16. */
static bool all_float3(const cx_dtype *types, int n_in) {
    for (int k = 0; k < n_in; k++)
        if (!is_float3(types[k]) || types[k] != types[0]) return false;
    return n_in > 0;
}

/* Every input u8 (comparison results and masks, for comparisons, logical ops, all and any). */
static bool all_u8(const cx_dtype *types, int n_in) {
    for (int k = 0; k < n_in; k++)
        if (types[k] != CX_U8) return false;
    return n_in > 0;
}

static cx_cap cuda_drv_capability(void *dev, cx_op_id op, const cx_dtype *types, int n_in) {
    /* the copy and fill kernels move elements of up to 8 bytes: c64 moves, c128 does not */
    for (int k = 0; k < (n_in ? n_in : 1); k++)
        if (types[k] == CX_C128) return CX_CAP_NO;
    switch (op) {
    /* complex parts: the kernels compute no complex type */
    case CX_OP_REAL:
    case CX_OP_IMAG:
    case CX_OP_CONJUGATE: return CX_CAP_NO;
    /* refine checks that the kernel runs every instruction */
    case CX_OP_FUSED: {
        bool f32 = n_in >= 1 && n_in <= 8;
        for (int k = 0; k < n_in; k++) f32 = f32 && types[k] == CX_F32;
        return f32 ? CX_CAP_SHAPE : CX_CAP_NO;
    }
    case CX_OP_SOFTMAX:
    case CX_OP_LOG_SOFTMAX: return all_float3(types, n_in) ? CX_CAP_NATIVE : CX_CAP_NO;
    case CX_OP_LAYER_NORM: return all_float3(types, n_in) ? CX_CAP_SHAPE : CX_CAP_NO;
    case CX_OP_CONV2D: return all_float3(types, n_in) ? CX_CAP_SHAPE : CX_CAP_NO; /* cuda_conv.c */
    case CX_OP_SELECT:
        return (types[0] == CX_U8 || is_float3(types[0])) && all_float3(types + 1, 2)
                   ? CX_CAP_NATIVE
                   : CX_CAP_NO;
    case CX_OP_SUM:
    case CX_OP_PRODUCT:
    case CX_OP_REDUCE_MAX:
    case CX_OP_REDUCE_MIN:
    case CX_OP_ARGMAX:
    case CX_OP_ARGMIN: return all_float3(types, n_in) ? CX_CAP_NATIVE : CX_CAP_NO;
    case CX_OP_ALL:
    case CX_OP_ANY:
        return all_float3(types, n_in) || all_u8(types, n_in) ? CX_CAP_NATIVE : CX_CAP_NO;
    /* moves and stores without arithmetic: any element size (for creation ops, types[0] is the
     * result's type; full, eye and pad take their value's bits from the cpu driver) */
    case CX_OP_RESHAPE:
    case CX_OP_SQUEEZE:
    case CX_OP_TRANSPOSE:
    case CX_OP_BROADCAST:
    case CX_OP_SLICE:
    case CX_OP_PUT_SLICE:
    case CX_OP_PAD:
    case CX_OP_REVERSE:
    case CX_OP_CONCATENATE:
    case CX_OP_FULL:
    case CX_OP_EYE: return CX_CAP_NATIVE;
    /* the iota and cast kernels take the first seven types (not s8, s16, u16, u32, u64): the
     * negotiation moves those to the cpu */
    case CX_OP_IOTA: return kernel_type(types[0]) ? CX_CAP_NATIVE : CX_CAP_NO;
    /* the dispatcher casts the indices to s64 first */
    case CX_OP_TAKE:
    case CX_OP_TAKE_ALONG_AXIS:
    case CX_OP_GATHER: return n_in == 2 && types[1] == CX_S64 ? CX_CAP_NATIVE : CX_CAP_NO;
    case CX_OP_RANDOM_UNIFORM:
    case CX_OP_RANDOM_NORMAL:
        return is_float3(types[0]) || types[0] == CX_F64 ? CX_CAP_NATIVE : CX_CAP_NO;
    /* every kernel type into every kernel type: refine checks the result type */
    case CX_OP_AS_TYPE: return kernel_type(types[0]) ? CX_CAP_SHAPE : CX_CAP_NO;
    default: break;
    }
    switch (cx_op_table[op].kind) {
    case CX_KIND_UNARY:
    case CX_KIND_UNARY_FLOAT:
    case CX_KIND_BINARY:
    case CX_KIND_BINARY_FLOAT:
    case CX_KIND_SELECT: /* clip */ return all_float3(types, n_in) ? CX_CAP_NATIVE : CX_CAP_NO;
    case CX_KIND_COMPARE:
    case CX_KIND_LOGICAL:
        return all_float3(types, n_in) || all_u8(types, n_in) ? CX_CAP_NATIVE : CX_CAP_NO;
    case CX_KIND_DOT: return all_float3(types, n_in) ? CX_CAP_SHAPE : CX_CAP_NO;
    default: return CX_CAP_NO;
    }
}

/* layer_norm's kernel normalises whole trailing rows. */
static bool trailing_axes(const cx_desc *x, const cx_param *axes) {
    for (int k = 0; k < axes->n; k++)
        if (axes->i[k] != x->rank - axes->n + k) return false;
    return true;
}

static bool cuda_drv_refine(void *dev, cx_op_id op, const cx_desc *in, int n_in,
                            const cx_params *ps, char *reason, size_t len) {
    if (op == CX_OP_DOT) return cuda_dot_fits(in, ps, reason, len);
    if (op == CX_OP_AS_TYPE) {
        const cx_param *to = cx_param_get(ps, CX_P_TYPE);
        if (to && kernel_type((cx_dtype)to->i[0])) return true;
        snprintf(reason, len, "cuda has no cast kernel into %s",
                 to ? cx_dtype_name((cx_dtype)to->i[0]) : "that type");
        return false;
    }
    if (op == CX_OP_FUSED) {
        cx_fused_code c;
        cx_status st = {CX_OK, ""};
        bool ok = cx_fused_decode(ps, n_in, &c, &st) == CX_OK && !cx_fused_has_rows(in, n_in);
        for (int k = 0; ok && k < c.n; k++) ok = ck_fused_supports(c.op[k]);
        int64_t rows, cols;
        if (ok && ps->p[CX_P_REDUCE].i[0]) ok = cx_fused_rows(&c, in, n_in, ps, &rows, &cols);
        if (ok) return true;
        snprintf(reason, len,
                 "the cuda kernel runs fused chains of ops it interprets, without broadcast "
                 "rows; with a sum at the end, over trailing axes");
        return false;
    }
    if (op == CX_OP_CONV2D) return cuda_conv2d_fits(dev, &in[0], &in[1], ps, reason, len);
    if (op == CX_OP_LAYER_NORM) {
        const cx_param *axes = cx_param_get(ps, CX_P_AXES);
        if (axes && trailing_axes(&in[0], axes)) return true;
        snprintf(reason, len, "the fused layer_norm normalises over the trailing axes only");
        return false;
    }
    return true;
}

/* ---- execute ----------------------------------------------------------------------------------
 */

static void strides_of(const cx_desc *d, int64_t *s) {
    int64_t acc = 1;
    for (int k = d->rank - 1; k >= 0; k--) {
        s[k] = acc;
        acc *= d->shape[k];
    }
}

/* The broadcast of each input over the output: scalar, contiguous, or strides over the output
 * shape with size-1 axes dropped and neighbouring axes merged where every input allows. */
static void layout_of(const cx_tensor *const *in, int n_in, const cx_desc *out, ck_layout *l) {
    int64_t full[3][CX_MAX_RANK];
    memset(l, 0, sizeof *l);
    for (int j = 0; j < n_in; j++) {
        const cx_desc *d = &in[j]->desc;
        l->mode[j] = in[j]->numel == 1            ? CK_SCALAR
                     : cx_desc_same_shape(d, out) ? CK_CONTIGUOUS
                                                  : CK_STRIDED;
        int64_t rs[CX_MAX_RANK];
        strides_of(d, rs);
        int lead = out->rank - d->rank;
        for (int k = 0; k < out->rank; k++) {
            int kj = k - lead;
            full[j][k] = kj >= 0 && d->shape[kj] != 1 ? rs[kj] : 0;
        }
    }
    for (int k = 0; k < out->rank; k++) {
        int64_t n = out->shape[k];
        if (n == 1) continue;
        int r = l->rank;
        bool merge = r > 0;
        for (int j = 0; j < n_in && merge; j++) merge = l->stride[j][r - 1] == full[j][k] * n;
        if (merge) {
            l->shape[r - 1] *= n;
            for (int j = 0; j < n_in; j++) l->stride[j][r - 1] = full[j][k];
        } else {
            l->shape[r] = n;
            for (int j = 0; j < n_in; j++) l->stride[j][r] = full[j][k];
            l->rank++;
        }
    }
}

static cx_code run_elementwise(cuda_device *d, cx_op_id op, const cx_tensor *const *in, int n_in,
                               cx_tensor *out, cx_status *st) {
    ck_layout l;
    layout_of(in, n_in, &out->desc, &l);
    const void *ptrs[3] = {NULL, NULL, NULL};
    for (int j = 0; j < n_in && j < 3; j++) ptrs[j] = in[j]->data;
    bool select = op == CX_OP_SELECT;
    cx_dtype t = in[select ? 1 : 0]->desc.dtype;
    cx_dtype pred = in[0]->desc.dtype;
    return cuda_check(d,
                      ck_elementwise(op, t, pred, ptrs, n_in, out->data, out->numel, &l, d->stream),
                      cx_op_table[op].name, st);
}

static cx_code run_reduce(cuda_device *d, cx_op_id op, const cx_tensor *x, const cx_params *ps,
                          cx_tensor *out, cx_status *st) {
    const cx_param *axes = cx_param_get(ps, CX_P_AXES);
    bool reduced[CX_MAX_RANK] = {false};
    for (int k = 0; axes && k < axes->n; k++) reduced[axes->i[k]] = true;
    int64_t s[CX_MAX_RANK];
    strides_of(&x->desc, s);
    ck_reduce_plan p;
    memset(&p, 0, sizeof p);
    p.n_out = out->numel;
    p.n_reduced = 1;
    for (int k = 0; k < x->desc.rank; k++) {
        int64_t n = x->desc.shape[k];
        if (!reduced[k]) {
            p.kept_shape[p.n_kept] = n;
            p.kept_stride[p.n_kept++] = s[k];
            continue;
        }
        p.n_reduced *= n;
        if (n == 1) continue;
        /* neighbouring reduced axes are one run */
        if (p.n_red > 0 && k > 0 && reduced[k - 1] && p.red_stride[p.n_red - 1] == s[k] * n) {
            p.red_shape[p.n_red - 1] *= n;
            p.red_stride[p.n_red - 1] = s[k];
        } else {
            p.red_shape[p.n_red] = n;
            p.red_stride[p.n_red++] = s[k];
        }
    }
    if (p.n_reduced == 0) p.n_red = 0; /* an empty axis: the identity everywhere */
    return cuda_check(d, ck_reduce(op, x->desc.dtype, x->data, out->data, &p, d->stream),
                      cx_op_table[op].name, st);
}

static cx_code copy_view(cuda_device *d, const cx_tensor *src, cx_tensor *dst, const ck_copy *c,
                         const char *what, cx_status *st) {
    return cuda_check(
        d, ck_copy_strided(cx_dtype_size(src->desc.dtype), src->data, dst->data, c, d->stream),
        what, st);
}

/* put_slice: the tensor copied, then the slice written over it at `start` (clipped by
 * inference so that it fits). */
static cx_code run_put_slice(cuda_device *d, const cx_tensor *x, const cx_tensor *slice,
                             const cx_params *ps, cx_tensor *out, cx_status *st) {
    const cx_param *start = cx_param_get(ps, CX_P_START);
    if (out->nbytes) {
        cx_code rc = cuda_check(
            d,
            cudaMemcpyAsync(out->data, x->data, out->nbytes, cudaMemcpyDeviceToDevice, d->stream),
            "put_slice", st);
        if (rc) return rc;
    }
    ck_copy c;
    memset(&c, 0, sizeof c);
    c.rank = slice->desc.rank;
    memcpy(c.shape, slice->desc.shape, sizeof(int64_t) * (size_t)c.rank);
    strides_of(&slice->desc, c.src_stride);
    strides_of(&out->desc, c.dst_stride);
    for (int k = 0; k < c.rank; k++) c.dst_off += start->i[k] * c.dst_stride[k];
    return copy_view(d, slice, out, &c, "put_slice", st);
}

/* One element of `type` made by the cpu driver running `op` with these parameters on `in` (NULL
 * for creation ops) into `shape`: the element at `at`, as raw bits. The value is then the cpu's
 * own conversion, bit for bit. */
static cx_code cpu_element(cx_op_id op, const cx_tensor *in, const cx_params *ps, cx_dtype type,
                           int rank, const int64_t *shape, int at, uint64_t *bits, cx_status *st) {
    uint64_t buf[2] = {0, 0};
    cx_tensor t;
    memset(&t, 0, sizeof t);
    t.desc.dtype = type;
    t.desc.rank = rank;
    if (rank) memcpy(t.desc.shape, shape, sizeof(int64_t) * (size_t)rank);
    t.numel = cx_desc_numel(&t.desc);
    t.nbytes = (size_t)t.numel * cx_dtype_size(type);
    t.data = buf;
    const cx_tensor *const ins[1] = {in};
    if (cx_cpu_driver()->execute(NULL, op, in ? ins : NULL, in ? 1 : 0, ps, &t, st) != CX_OK)
        return st->code;
    *bits = 0;
    memcpy(bits, (char *)buf + (size_t)at * cx_dtype_size(type), cx_dtype_size(type));
    return CX_OK;
}

/* pad, as the cpu driver pads (cpu/layout.c): the output filled with the value where some of it
 * is padding, then the input elements that survive cropping moved to their places, index j of an
 * axis landing at low + j * (interior + 1). */
static cx_code run_pad(cuda_device *d, const cx_tensor *x, const cx_params *ps, cx_tensor *out,
                       cx_status *st) {
    const int64_t *pads = cx_param_get(ps, CX_P_PADS)->i;
    const cx_desc *in = &x->desc;
    cx_dtype t = out->desc.dtype;
    if (out->numel == 0) return CX_OK;
    bool gaps = false;
    for (int k = 0; k < in->rank; k++)
        gaps = gaps || pads[3 * k] > 0 || pads[3 * k + 1] > 0 ||
               (pads[3 * k + 2] > 0 && in->shape[k] > 1);
    if (gaps || x->numel == 0) {
        /* the value: a one-element tensor padded by one in front by the cpu */
        uint64_t zero = 0, bits;
        cx_tensor one;
        memset(&one, 0, sizeof one);
        one.desc.dtype = t;
        one.desc.rank = 1;
        one.desc.shape[0] = 1;
        one.numel = 1;
        one.nbytes = cx_dtype_size(t);
        one.data = &zero;
        cx_params vp = {0};
        *cx_param_put(&vp, CX_P_VALUE) = *cx_param_get(ps, CX_P_VALUE);
        cx_param_put_ints(&vp, CX_P_PADS, (const int64_t[]){1, 0, 0}, 3);
        if (cpu_element(CX_OP_PAD, &one, &vp, t, 1, (const int64_t[]){2}, 0, &bits, st))
            return st->code;
        cx_code rc = cuda_check(
            d, ck_fill(cx_dtype_size(t), out->data, out->numel, bits, d->stream), "pad", st);
        if (rc) return rc;
    }
    if (x->numel == 0) return CX_OK;
    int64_t in_str[CX_MAX_RANK];
    strides_of(in, in_str);
    ck_copy c;
    memset(&c, 0, sizeof c);
    c.rank = in->rank;
    strides_of(&out->desc, c.dst_stride);
    for (int k = 0; k < in->rank; k++) {
        int64_t lo = pads[3 * k], step = pads[3 * k + 2] + 1, n_out = out->desc.shape[k];
        /* the first kept index and the end of the kept ones */
        int64_t j0 = lo >= 0 ? 0 : (step - 1 - lo) / step;
        int64_t j1 = n_out - lo <= 0 ? 0 : (n_out - lo + step - 1) / step;
        if (j1 > in->shape[k]) j1 = in->shape[k];
        if (j1 <= j0) return CX_OK; /* everything cropped */
        c.shape[k] = j1 - j0;
        c.src_stride[k] = in_str[k];
        c.src_off += j0 * in_str[k];
        c.dst_off += (lo + j0 * step) * c.dst_stride[k];
        c.dst_stride[k] = c.shape[k] > 1 ? c.dst_stride[k] * step : 0;
    }
    return copy_view(d, x, out, &c, "pad", st);
}

/* Whether every index lies inside its axis: entry i of ix against the size of axes[i % k]. A
 * kernel raises a flag that is read back here, so take and gather wait for the stream (every
 * other op only enqueues). On a bad index, the indices are read and the first bad one named as
 * the cpu driver names it. */
static cx_code check_indices(cuda_device *d, cx_op_id op, const cx_tensor *ix, const cx_tensor *t,
                             const int64_t *axes, int k, cx_status *st) {
    if (ix->numel == 0) return CX_OK;
    const char *name = cx_op_table[op].name;
    ck_index_dims c;
    memset(&c, 0, sizeof c);
    c.k = k;
    for (int j = 0; j < k; j++) c.dim[j] = t->desc.shape[axes[j]];
    int *flag = NULL, bad = 0;
    cx_code rc = cuda_mem_alloc(d, sizeof(int), (void **)&flag, st);
    if (rc) return rc;
    rc = cuda_check(d, cudaMemsetAsync(flag, 0, sizeof(int), d->stream), name, st);
    if (!rc) rc = cuda_check(d, ck_index_check(ix->data, ix->numel, &c, flag, d->stream), name, st);
    if (!rc)
        rc = cuda_check(d,
                        cudaMemcpyAsync(&bad, flag, sizeof bad, cudaMemcpyDeviceToHost, d->stream),
                        name, st);
    if (!rc) rc = cuda_check(d, cudaStreamSynchronize(d->stream), name, st);
    cuda_mem_free(d, flag);
    if (rc || !bad) return rc;
    int64_t *v = malloc(ix->nbytes);
    if (!v) return cx_fail(st, CX_ENOMEM, "cuda: out of host memory reading the indices");
    rc = cuda_check(d, cudaMemcpyAsync(v, ix->data, ix->nbytes, cudaMemcpyDeviceToHost, d->stream),
                    name, st);
    if (!rc) rc = cuda_check(d, cudaStreamSynchronize(d->stream), name, st);
    if (rc) {
        free(v);
        return rc;
    }
    rc = cx_check_indices(op, &t->desc, v, ix->numel, axes, k, st);
    if (rc == CX_OK) rc = cx_fail(st, CX_EINVAL, "%s: an index is out of bounds", name);
    free(v);
    return rc;
}

static cx_code run_take(cuda_device *d, const cx_tensor *t, const cx_tensor *ix,
                        const cx_params *ps, cx_tensor *out, cx_status *st) {
    int64_t axis = cx_param_get(ps, CX_P_AXIS)->i[0], inner = 1;
    if (check_indices(d, CX_OP_TAKE, ix, t, &axis, 1, st) != CX_OK) return st->code;
    if (out->numel == 0) return CX_OK;
    for (int k = (int)axis + 1; k < t->desc.rank; k++) inner *= t->desc.shape[k];
    return cuda_check(d,
                      ck_take(cx_dtype_size(t->desc.dtype), t->data, ix->data, out->data,
                              out->numel, t->desc.shape[axis], ix->numel, inner, false, d->stream),
                      "take", st);
}

static cx_code run_take_along(cuda_device *d, const cx_tensor *t, const cx_tensor *ix,
                              const cx_params *ps, cx_tensor *out, cx_status *st) {
    int64_t axis = cx_param_get(ps, CX_P_AXIS)->i[0], inner = 1;
    if (check_indices(d, CX_OP_TAKE_ALONG_AXIS, ix, t, &axis, 1, st) != CX_OK) return st->code;
    if (out->numel == 0) return CX_OK;
    for (int k = (int)axis + 1; k < t->desc.rank; k++) inner *= t->desc.shape[k];
    return cuda_check(d,
                      ck_take(cx_dtype_size(t->desc.dtype), t->data, ix->data, out->data,
                              out->numel, t->desc.shape[axis], ix->desc.shape[axis], inner, true,
                              d->stream),
                      "take_along_axis", st);
}

static cx_code run_gather(cuda_device *d, const cx_tensor *t, const cx_tensor *ix,
                          const cx_params *ps, cx_tensor *out, cx_status *st) {
    const cx_param *axes = cx_param_get(ps, CX_P_AXES);
    if (check_indices(d, CX_OP_GATHER, ix, t, axes->i, axes->n, st) != CX_OK) return st->code;
    if (out->numel == 0) return CX_OK;
    const cx_desc *x = &t->desc;
    int64_t is[CX_MAX_RANK], rows = 1;
    strides_of(x, is);
    for (int k = 0; k < ix->desc.rank - 1; k++) rows *= ix->desc.shape[k];
    ck_gather_plan g;
    memset(&g, 0, sizeof g);
    g.block = out->numel / rows;
    g.k = axes->n;
    bool used[CX_MAX_RANK] = {false};
    for (int j = 0; j < axes->n; j++) {
        used[axes->i[j]] = true;
        g.index_stride[j] = is[axes->i[j]];
    }
    for (int k = 0; k < x->rank; k++)
        if (!used[k]) {
            g.shape[g.rank] = x->shape[k];
            g.stride[g.rank++] = is[k];
        }
    return cuda_check(
        d,
        ck_gather(cx_dtype_size(x->dtype), t->data, ix->data, out->data, out->numel, &g, d->stream),
        "gather", st);
}

static cx_code run_layout(cuda_device *d, cx_op_id op, const cx_tensor *const *in, int n_in,
                          const cx_params *ps, cx_tensor *out, cx_status *st) {
    const char *name = cx_op_table[op].name;
    if (op == CX_OP_PUT_SLICE) return run_put_slice(d, in[0], in[1], ps, out, st);
    if (op == CX_OP_PAD) return run_pad(d, in[0], ps, out, st);
    if (op == CX_OP_TAKE) return run_take(d, in[0], in[1], ps, out, st);
    if (op == CX_OP_TAKE_ALONG_AXIS) return run_take_along(d, in[0], in[1], ps, out, st);
    if (op == CX_OP_GATHER) return run_gather(d, in[0], in[1], ps, out, st);
    const cx_tensor *x = in[0];
    int64_t s[CX_MAX_RANK];
    strides_of(&x->desc, s);
    ck_copy c;
    memset(&c, 0, sizeof c);
    c.rank = out->desc.rank;
    memcpy(c.shape, out->desc.shape, sizeof(int64_t) * (size_t)c.rank);
    strides_of(&out->desc, c.dst_stride);
    switch (op) {
    case CX_OP_RESHAPE:
    case CX_OP_SQUEEZE:
        if (!out->nbytes) return CX_OK;
        return cuda_check(
            d,
            cudaMemcpyAsync(out->data, x->data, out->nbytes, cudaMemcpyDeviceToDevice, d->stream),
            name, st);
    case CX_OP_TRANSPOSE: {
        const cx_param *axes = cx_param_get(ps, CX_P_AXES);
        for (int k = 0; k < c.rank; k++) c.src_stride[k] = s[axes->i[k]];
        return copy_view(d, x, out, &c, name, st);
    }
    case CX_OP_BROADCAST: {
        const cx_param *axes = cx_param_get(ps, CX_P_AXES);
        for (int k = 0; k < x->desc.rank; k++)
            c.src_stride[axes->i[k]] = x->desc.shape[k] == 1 ? 0 : s[k];
        return copy_view(d, x, out, &c, name, st);
    }
    case CX_OP_SLICE: {
        const cx_param *start = cx_param_get(ps, CX_P_START),
                       *step = cx_param_get(ps, CX_P_STRIDES);
        for (int k = 0; k < c.rank; k++) {
            c.src_off += start->i[k] * s[k];
            c.src_stride[k] = (step ? step->i[k] : 1) * s[k];
        }
        return copy_view(d, x, out, &c, name, st);
    }
    case CX_OP_REVERSE: {
        const cx_param *axes = cx_param_get(ps, CX_P_AXES);
        memcpy(c.src_stride, s, sizeof(int64_t) * (size_t)c.rank);
        for (int k = 0; axes && k < axes->n; k++) {
            int a = (int)axes->i[k];
            if (x->desc.shape[a] == 0) continue;
            c.src_off += (x->desc.shape[a] - 1) * s[a];
            c.src_stride[a] = -s[a];
        }
        return copy_view(d, x, out, &c, name, st);
    }
    case CX_OP_CONCATENATE: {
        int axis = (int)cx_param_get(ps, CX_P_AXIS)->i[0];
        int64_t at = 0;
        for (int j = 0; j < n_in; j++) {
            ck_copy part = c;
            memcpy(part.shape, in[j]->desc.shape, sizeof(int64_t) * (size_t)c.rank);
            strides_of(&in[j]->desc, part.src_stride);
            part.dst_off = at * c.dst_stride[axis];
            at += in[j]->desc.shape[axis];
            cx_code rc = copy_view(d, in[j], out, &part, name, st);
            if (rc) return rc;
        }
        return CX_OK;
    }
    default: return cx_fail(st, CX_EUNSUPPORTED, "cuda: no kernel for %s", name);
    }
}

static cx_code run_argreduce(cuda_device *d, cx_op_id op, const cx_tensor *x, const cx_params *ps,
                             cx_tensor *out, cx_status *st) {
    int64_t outer = 1, n = x->numel, inner = 1;
    const cx_param *axis = cx_param_get(ps, CX_P_AXIS);
    if (axis) {
        int a = (int)axis->i[0];
        n = x->desc.shape[a];
        for (int k = 0; k < a; k++) outer *= x->desc.shape[k];
        for (int k = a + 1; k < x->desc.rank; k++) inner *= x->desc.shape[k];
    }
    if (x->numel == 0) return CX_OK; /* as the cpu driver: nothing written */
    bool high = cx_param_get(ps, CX_P_TIE_BREAK)->i[0] == 1;
    return cuda_check(d,
                      ck_argreduce(op == CX_OP_ARGMAX, high, x->desc.dtype, x->data, out->data,
                                   outer, n, inner, d->stream),
                      cx_op_table[op].name, st);
}

/* ---- creation ---------------------------------------------------------------------------------
 */

/* The value of type t nearest to v (a double, exact). */
static double round_to(cx_dtype t, double v) {
    switch (t) {
    case CX_F16: return cx_f16_to_f32(cx_f16_from_f64(v));
    case CX_BF16: return cx_bf16_to_f32(cx_bf16_from_f64(v));
    case CX_F32: return (float)v;
    default: return v;
    }
}

/* The neighbour of v (a value of type t) toward +inf when up, else toward -inf. */
static double step_to(cx_dtype t, double v, bool up) {
    if (t == CX_F64) return nextafter(v, up ? INFINITY : -INFINITY);
    if (t == CX_F32) return nextafterf((float)v, up ? INFINITY : -INFINITY);
    uint16_t h = t == CX_F16 ? cx_f16_from_f64(v) : cx_bf16_from_f64(v);
    bool neg = (h & 0x8000) != 0;
    if ((h & 0x7fff) == 0)
        h = up ? 1 : 0x8001;
    else
        h = (uint16_t)(neg == up ? h - 1 : h + 1);
    return t == CX_F16 ? cx_f16_to_f32(h) : cx_bf16_to_f32(h);
}

/* random_uniform's mapping, as cpu/create.c's uniform_init makes it: fma(max - min, u, min)
 * rounded into t, kept inside [lo, hi] (the values of t closest to [min, max) from inside) when
 * that range is finite and holds a value of t. */
static void uniform_plan(cx_dtype t, double min, double max, ck_random *r) {
    r->scale = max - min;
    r->offset = min;
    r->clamp = min < max && isfinite(min) && isfinite(max);
    if (!r->clamp) return;
    r->lo = round_to(t, min);
    while (r->lo < min) r->lo = step_to(t, r->lo, true);
    r->hi = round_to(t, max);
    while (r->hi >= max) r->hi = step_to(t, r->hi, false);
    r->clamp = r->lo <= r->hi;
}

static cx_code run_create(cuda_device *d, cx_op_id op, const cx_params *ps, cx_tensor *out,
                          cx_status *st) {
    const cx_desc *o = &out->desc;
    const char *name = cx_op_table[op].name;
    size_t es = cx_dtype_size(o->dtype);
    if (out->numel == 0) return CX_OK;
    switch (op) {
    case CX_OP_FULL: {
        uint64_t bits;
        if (cpu_element(CX_OP_FULL, NULL, ps, o->dtype, 0, NULL, 0, &bits, st)) return st->code;
        return cuda_check(d, ck_fill(es, out->data, out->numel, bits, d->stream), name, st);
    }
    case CX_OP_EYE: {
        uint64_t one; /* the cpu's 1 x 1 eye */
        if (cpu_element(CX_OP_EYE, NULL, ps, o->dtype, 2, (const int64_t[]){1, 1}, 0, &one, st))
            return st->code;
        int64_t cols = o->shape[o->rank - 1];
        return cuda_check(
            d,
            ck_eye(es, out->data, out->numel, cols, cols * o->shape[o->rank - 2], one, d->stream),
            name, st);
    }
    case CX_OP_IOTA: {
        int64_t len = out->numel, inner = 1;
        const cx_param *axis = cx_param_get(ps, CX_P_AXIS);
        if (axis) {
            len = o->shape[axis->i[0]];
            for (int k = (int)axis->i[0] + 1; k < o->rank; k++) inner *= o->shape[k];
        }
        return cuda_check(d, ck_iota(o->dtype, out->data, out->numel, len, inner, d->stream), name,
                          st);
    }
    case CX_OP_RANDOM_UNIFORM:
    case CX_OP_RANDOM_NORMAL: {
        ck_random r;
        memset(&r, 0, sizeof r);
        r.key = (uint64_t)cx_param_get(ps, CX_P_KEY)->i[0];
        r.normal = op == CX_OP_RANDOM_NORMAL;
        if (r.normal) {
            r.scale = cx_param_get(ps, CX_P_STD)->f;
            r.offset = cx_param_get(ps, CX_P_MEAN)->f;
        } else {
            uniform_plan(o->dtype, cx_param_get(ps, CX_P_MIN)->f, cx_param_get(ps, CX_P_MAX)->f,
                         &r);
        }
        return cuda_check(d, ck_random_fill(o->dtype, out->data, out->numel, &r, d->stream), name,
                          st);
    }
    default: return cx_fail(st, CX_EUNSUPPORTED, "cuda: no kernel for %s", name);
    }
}

static cx_code run_softmax(cuda_device *d, cx_op_id op, const cx_tensor *x, const cx_params *ps,
                           cx_tensor *out, cx_status *st) {
    int axis = (int)cx_param_get(ps, CX_P_AXIS)->i[0];
    int64_t outer = 1, inner = 1, n = x->desc.shape[axis];
    for (int k = 0; k < axis; k++) outer *= x->desc.shape[k];
    for (int k = axis + 1; k < x->desc.rank; k++) inner *= x->desc.shape[k];
    return cuda_check(d,
                      ck_softmax(op == CX_OP_LOG_SOFTMAX, x->desc.dtype, x->data, out->data, outer,
                                 n, inner, d->stream),
                      cx_op_table[op].name, st);
}

/* The offsets of gamma or beta along the normalised axes: rank 0 (a number) or one axis per
 * normalised axis, of its size or 1. */
static void param_strides(const cx_desc *p, int rank, int64_t *out) {
    int64_t s[CX_MAX_RANK];
    strides_of(p, s);
    for (int k = 0; k < rank; k++) out[k] = p->rank == 0 || p->shape[k] == 1 ? 0 : s[k];
}

static cx_code run_layer_norm(cuda_device *d, const cx_tensor *const *in, const cx_params *ps,
                              cx_tensor *out, cx_status *st) {
    const cx_param *axes = cx_param_get(ps, CX_P_AXES);
    const cx_desc *x = &in[0]->desc;
    ck_norm_plan p;
    memset(&p, 0, sizeof p);
    p.rank = axes->n;
    int64_t n = 1;
    for (int k = 0; k < p.rank; k++) n *= p.shape[k] = x->shape[axes->i[k]];
    param_strides(&in[1]->desc, p.rank, p.gamma_stride);
    param_strides(&in[2]->desc, p.rank, p.beta_stride);
    int64_t rows = n ? in[0]->numel / n : 0;
    float eps = (float)cx_param_get(ps, CX_P_EPSILON)->f;
    return cuda_check(d,
                      ck_layer_norm(x->dtype, in[0]->data, in[1]->data, in[2]->data, out->data,
                                    rows, n, &p, eps, d->stream),
                      "layer_norm", st);
}

static cx_code run_fused(cuda_device *d, const cx_tensor *const *in, int n_in, const cx_params *ps,
                         cx_tensor *out, cx_status *st) {
    cx_fused_code c;
    if (cx_fused_decode(ps, n_in, &c, st) != CX_OK) return st->code;
    ck_fused_plan p = {.n_in = n_in, .n = c.n};
    const float *ins[CX_FUSED_MAX_INPUTS];
    for (int k = 0; k < n_in; k++) {
        ins[k] = in[k]->data;
        if (in[k]->desc.rank > 0) p.wide |= 1u << k;
    }
    for (int k = 0; k < c.n; k++) {
        p.op[k] = c.op[k];
        p.a[k] = c.a[k];
        p.b[k] = c.b[k];
    }
    if (ps->p[CX_P_REDUCE].i[0]) {
        cx_desc descs[CX_FUSED_MAX_INPUTS];
        for (int k = 0; k < n_in; k++) descs[k] = in[k]->desc;
        int64_t rows, cols;
        if (!cx_fused_rows(&c, descs, n_in, ps, &rows, &cols))
            return cx_fail(st, CX_EINVAL, "cuda: fused sum over axes that do not trail");
        return cuda_check(d, ck_fused_sum(ins, out->data, rows, cols, &p, d->stream), "fused", st);
    }
    return cuda_check(d, ck_fused(ins, out->data, out->numel, &p, d->stream), "fused", st);
}

typedef struct {
    cx_op_id op;
    const cx_tensor *const *in;
    int n_in;
    const cx_params *ps;
    cx_tensor *out;
} exec_job;

/* On the owner thread: enqueues the op's kernels; nothing here waits for the GPU. */
static cx_code run_execute(cuda_device *d, void *arg, cx_status *st) {
    exec_job *j = arg;
    cx_op_id op = j->op;
    if (op == CX_OP_SOFTMAX || op == CX_OP_LOG_SOFTMAX)
        return run_softmax(d, op, j->in[0], j->ps, j->out, st);
    if (op == CX_OP_LAYER_NORM) return run_layer_norm(d, j->in, j->ps, j->out, st);
    if (op == CX_OP_CONV2D) return cuda_conv2d(d, j->in[0], j->in[1], j->ps, j->out, st);
    if (op == CX_OP_FUSED) return run_fused(d, j->in, j->n_in, j->ps, j->out, st);
    switch (cx_op_table[op].kind) {
    case CX_KIND_UNARY:
    case CX_KIND_UNARY_FLOAT:
    case CX_KIND_BINARY:
    case CX_KIND_BINARY_FLOAT:
    case CX_KIND_COMPARE:
    case CX_KIND_LOGICAL:
    case CX_KIND_SELECT: return run_elementwise(d, op, j->in, j->n_in, j->out, st);
    case CX_KIND_CAST:
        return cuda_check(d,
                          ck_cast(j->in[0]->desc.dtype, j->out->desc.dtype, j->in[0]->data,
                                  j->out->data, j->out->numel, d->stream),
                          "as_type", st);
    case CX_KIND_REDUCE: return run_reduce(d, op, j->in[0], j->ps, j->out, st);
    case CX_KIND_ARGREDUCE: return run_argreduce(d, op, j->in[0], j->ps, j->out, st);
    case CX_KIND_CREATE: return run_create(d, op, j->ps, j->out, st);
    case CX_KIND_LAYOUT: return run_layout(d, op, j->in, j->n_in, j->ps, j->out, st);
    case CX_KIND_DOT: return cuda_dot(d, j->in[0], j->in[1], j->ps, j->out, st);
    default: return cx_fail(st, CX_EUNSUPPORTED, "cuda: no kernel for %s", cx_op_table[op].name);
    }
}

static cx_code cuda_drv_execute(void *dev, cx_op_id op, const cx_tensor *const *in, int n_in,
                                const cx_params *ps, cx_tensor *out, cx_status *st) {
    exec_job j = {op, in, n_in, ps, out};
    return cuda_submit(dev, run_execute, &j, st);
}

static const cx_driver cuda_driver = {
    .abi = CX_DRIVER_ABI,
    .name = "cuda",
    .ops_signature = signature,
    .probe = cuda_drv_probe,
    .device_count = cuda_drv_device_count,
    .open_device = cuda_drv_open,
    .alloc = cuda_drv_alloc,
    .release = cuda_drv_release,
    .upload = cuda_drv_upload,
    .download = cuda_drv_download,
    .capability = cuda_drv_capability,
    .refine = cuda_drv_refine,
    .execute = cuda_drv_execute,
    .download_async = cuda_drv_download_async,
};

__attribute__((visibility("default"))) const cx_driver *cx_driver_entry(void) {
    return &cuda_driver;
}

/* Explicit transfers of device `dev` (a device context from open_device): uploads, bytes
 * uploaded, downloads, bytes downloaded. For the benchmark and the tests. */
__attribute__((visibility("default"))) void cx_cuda_transfer_counts(void *dev, long long out[4]) {
    cuda_device *d = dev;
    out[0] = atomic_load(&d->uploads);
    out[1] = atomic_load(&d->upload_bytes);
    out[2] = atomic_load(&d->downloads);
    out[3] = atomic_load(&d->download_bytes);
}

static cx_code run_synchronize(cuda_device *d, void *arg, cx_status *st) {
    return cuda_check(d, cudaStreamSynchronize(d->stream), "cudaStreamSynchronize", st);
}

/* Waits until the device's stream has run everything enqueued so far (benchmarks time the GPU
 * with it; Cascade itself never needs it). */
__attribute__((visibility("default"))) cx_code cx_cuda_synchronize(void *dev, cx_status *st) {
    return cuda_submit(dev, run_synchronize, NULL, st);
}
