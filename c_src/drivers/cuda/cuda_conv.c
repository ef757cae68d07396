/* conv2d natively on the GPU (cuda_conv.h): the choice of path, and the im2col + cuBLAS one,
 * which follows the blas driver's (blas_conv.c) with the GEMMs batched:
 *
 *   nchw: out[n] {O, P} row-major (P = OH*OW); group g's rows are W_g {og, K} . cols {K, P},
 *         K = cg*KH*KW in the kernel's own order (ci, ki, kj), so the kernel is read in place.
 *         One strided batched GEMM per group over the chunk's images (W_g's stride 0), or, when
 *         there are more groups than images, one per image over the groups.
 *   nhwc: out {N*P, O} row-major; group g's columns are cols_g {nb*P, K} . W[:, g] {K, og}
 *         (ldb = O), K in the order (ki, kj, ci) of the kernel {KH, KW, cg, O}, read in place.
 *         The chunk's images are rows of one matrix, so one strided batched GEMM over the groups
 *         covers the chunk.
 *
 * f16 and bf16 stay 2 bytes in the scratch and go through cuBLAS with f32 accumulation
 * (CUBLAS_COMPUTE_32F, tensor cores), rounded once on the way out; f32 stays IEEE f32 (no TF32),
 * as dot does (cuda_blas.c). The batch is cut into chunks whose scratch is at most
 * SCRATCH_BYTES; one scratch buffer from the stream-ordered pool serves every chunk (stream
 * order keeps a chunk's im2col from overwriting the previous chunk's before its GEMM ran) and
 * is freed stream-ordered after the last GEMM: nothing here waits for the GPU. */
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_conv.h"
#include "kernels_conv.h"

/* Large enough that each GEMM has thousands of rows (ResNet's 56x56 layers: 9 images of
 * 256 channels a chunk), small enough not to crowd the tensors out of the pool. */
#define SCRATCH_BYTES ((size_t)256 << 20)

/* ---- which path ------------------------------------------------------------------------------
 *
 * CASCADE_CUDA_CONV, read once, at the first conv2d:
 *   auto    cuDNN when libcudnn.so.9 loads and it has an algorithm for the geometry, else im2col
 *           (the default; NOT YET MEASURED: bench/cuda/bench_cuda.c times both paths beside
 *           PyTorch, and the default should follow what it finds, per geometry if need be);
 *   im2col  always im2col + cuBLAS;
 *   cudnn   cuDNN where it can run the geometry (today the same as auto), else im2col.
 * Unset, or any other value: auto. Without cuDNN, every mode runs im2col: the driver works the
 * same, only slower or faster. */
typedef enum { CONV_AUTO, CONV_IM2COL, CONV_CUDNN } conv_path;

static const char *const path_names[] = {"auto", "im2col", "cudnn"};

static _Atomic int path_now = -1; /* -1: not read yet */

static int path_of(const char *name) {
    for (int k = 0; k < 3; k++)
        if (name && strcmp(name, path_names[k]) == 0) return k;
    return -1;
}

static conv_path path_chosen(void) {
    int p = atomic_load(&path_now);
    if (p >= 0) return (conv_path)p;
    p = path_of(getenv("CASCADE_CUDA_CONV"));
    if (p < 0) p = CONV_AUTO;
    int unset = -1; /* a concurrent cx_cuda_set_conv_path wins */
    atomic_compare_exchange_strong(&path_now, &unset, p);
    return (conv_path)atomic_load(&path_now);
}

/* Sets the conv2d path for the whole process, as CASCADE_CUDA_CONV would ("auto", "im2col" or
 * "cudnn"), for the benchmark and the tests. Returns 0 when set, 1 for an unknown name (nothing
 * changes), 2 when set to a cuDNN path but libcudnn.so.9 cannot be loaded (im2col runs). */
__attribute__((visibility("default"))) int cx_cuda_set_conv_path(const char *name) {
    int p = path_of(name);
    if (p < 0) return 1;
    atomic_store(&path_now, p);
    return p != CONV_IM2COL && !cuda_cudnn_loaded() ? 2 : 0;
}

/* ---- im2col + cuBLAS --------------------------------------------------------------------------
 */

static bool fits_int(int64_t x) {
    return x >= 0 && x <= INT_MAX;
}

/* This driver's table (cuda_driver.c), for the cast capability. */
const cx_driver *cx_driver_entry(void);

/* The capability was asked with the compute types (integer inputs: f32), so a native route
 * would hide the dispatcher's cast of an input whose type differs: it must be one this driver
 * runs too, or that cast would fall back to the cpu behind the native conv2d. */
static bool casts_here(void *dev, const cx_desc *x, const cx_desc *kern, char *reason, size_t len) {
    cx_dtype to = cx_dtype_to_float(cx_dtype_merge(x->dtype, kern->dtype));
    const cx_dtype from[2] = {x->dtype, kern->dtype};
    for (int k = 0; k < 2; k++)
        if (from[k] != to &&
            cx_driver_entry()->capability(dev, CX_OP_AS_TYPE, &from[k], 1) == CX_CAP_NO) {
            snprintf(reason, len,
                     "conv2d computes %s: this driver cannot cast its %s input to it, so the "
                     "decomposition runs instead",
                     cx_dtype_name(to), cx_dtype_name(from[k]));
            return false;
        }
    return true;
}

bool cuda_conv2d_fits(void *dev, const cx_desc *x, const cx_desc *kern, const cx_params *ps,
                      char *reason, size_t len) {
    if (!casts_here(dev, x, kern, reason, len)) return false;
    cx_conv_dims v;
    cx_conv_dims_of(x, kern, ps, &v);
    int64_t p, k, ck;
    bool ok = !__builtin_mul_overflow(v.oh, v.ow, &p) &&
              !__builtin_mul_overflow(v.cg * v.kh, v.kw, &k) &&
              !__builtin_mul_overflow(v.groups, k, &ck);
    /* GEMM sizes and leading dimensions are ints; one image's scratch must be addressable */
    ok = ok && fits_int(p) && fits_int(k) && fits_int(v.og) && fits_int(v.groups * v.og) &&
         fits_int(v.groups) && fits_int(v.n) && (ck == 0 || p <= INT64_MAX / 4 / ck);
    if (!ok)
        snprintf(reason, len,
                 "conv2d's im2col GEMM (%lld x %lld output positions, %lld x %lld x %lld kernel "
                 "taps, %lld outputs) exceeds cuBLAS's 32-bit sizes",
                 (long long)v.oh, (long long)v.ow, (long long)v.cg, (long long)v.kh,
                 (long long)v.kw, (long long)(v.groups * v.og));
    return ok;
}

/* Row-major C {m, n} = A {m, k} . B {k, n}, `batch` times with the given element strides. */
typedef struct {
    int64_t m, n, k, batch;
    const void *a;
    int64_t lda, sa;
    const void *b;
    int64_t ldb, sb;
    void *c;
    int64_t ldc, sc;
} rm_gemm;

static cx_code gemm(cuda_device *d, cudaDataType_t t, const rm_gemm *g, cx_status *st) {
    const float one = 1.0f, zero = 0.0f;
    cublasHandle_t h;
    cx_code rc = cuda_blas_handle(d, &h, st);
    if (rc) return rc;
    /* cuBLAS is column-major: C^T = B^T A^T, so B comes first */
    return cuda_check_blas(
        d,
        cuda_cublas.gemm_strided_batched(h, CUBLAS_OP_N, CUBLAS_OP_N, (int)g->n, (int)g->m,
                                         (int)g->k, &one, g->b, t, (int)g->ldb, g->sb, g->a, t,
                                         (int)g->lda, g->sa, &zero, g->c, t, (int)g->ldc, g->sc,
                                         (int)g->batch, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
        "conv2d: cublasGemmStridedBatchedEx", st);
}

/* The GEMMs of `nb` images from image n0, whose scratch is in cols (kernels_conv.h's order). */
static cx_code chunk_gemms(cuda_device *d, cudaDataType_t t, size_t es, const cx_conv_dims *v,
                           const void *w, const void *cols, char *y, int64_t n0, int64_t nb,
                           cx_status *st) {
    int64_t p = v->oh * v->ow, k = v->cg * v->kh * v->kw, og = v->og, o = v->groups * og;
    cx_code rc = CX_OK;
    if (v->nhwc) { /* cols_g {nb*P, K} . W[:, g*og..] {K, og} -> out columns g*og.. */
        rm_gemm g = {
            nb * p, og, k, v->groups, cols, k, nb * p * k, w, o, og, y + es * (size_t)(n0 * p * o),
            o,      og};
        return gemm(d, t, &g, st);
    }
    const char *c = cols;
    if (v->groups <= nb) { /* per group, over the images: W_g {og, K} . cols {K, P} */
        for (int64_t g = 0; !rc && g < v->groups; g++) {
            rm_gemm a = {og,
                         p,
                         k,
                         nb,
                         (const char *)w + es * (size_t)(g * og * k),
                         k,
                         0,
                         c + es * (size_t)(g * k * p),
                         p,
                         v->groups * k * p,
                         y + es * (size_t)((n0 * o + g * og) * p),
                         p,
                         o * p};
            rc = gemm(d, t, &a, st);
        }
        return rc;
    }
    for (int64_t n = 0; !rc && n < nb; n++) { /* per image, over the groups */
        rm_gemm a = {og,
                     p,
                     k,
                     v->groups,
                     w,
                     k,
                     og * k,
                     c + es * (size_t)(n * v->groups * k * p),
                     p,
                     k * p,
                     y + es * (size_t)((n0 + n) * o * p),
                     p,
                     og * p};
        rc = gemm(d, t, &a, st);
    }
    return rc;
}

static cx_code conv2d_im2col(cuda_device *d, const cx_tensor *x, const cx_tensor *kern,
                             const cx_conv_dims *v, cx_tensor *out, cx_status *st) {
    cx_dtype dt = out->desc.dtype;
    cudaDataType_t t = dt == CX_F32 ? CUDA_R_32F : dt == CX_F16 ? CUDA_R_16F : CUDA_R_16BF;
    size_t es = cx_dtype_size(dt);
    int64_t p = v->oh * v->ow, per_image = v->c * v->kh * v->kw * p; /* scratch elements */
    int64_t nb = (int64_t)(SCRATCH_BYTES / es) / per_image;
    if (nb > v->n) nb = v->n;
    if (v->nhwc && nb > INT_MAX / p) nb = INT_MAX / p; /* the GEMM's rows */
    if (nb < 1) nb = 1;
    void *cols = NULL;
    cx_code rc = cuda_mem_alloc(d, es * (size_t)(nb * per_image), &cols, st);
    if (rc) cols = NULL;
    ck_im2col_geom g = {v->nhwc, nb,    v->c,  v->h,  v->w,  v->groups, v->cg,  v->kh, v->kw,
                        v->oh,   v->ow, v->s0, v->s1, v->d0, v->d1,     v->lo0, v->lo1};
    for (int64_t n0 = 0; !rc && n0 < v->n; n0 += nb) {
        g.nb = v->n - n0 < nb ? v->n - n0 : nb;
        const char *xn = (const char *)x->data + es * (size_t)(n0 * v->c * v->h * v->w);
        rc = cuda_check(d, ck_im2col(es, xn, cols, &g, d->stream), "conv2d: im2col", st);
        if (!rc) rc = chunk_gemms(d, t, es, v, kern->data, cols, out->data, n0, g.nb, st);
    }
    cuda_mem_free(d, cols); /* stream-ordered: after the last GEMM that reads it */
    return rc;
}

cx_code cuda_conv2d(cuda_device *d, const cx_tensor *x, const cx_tensor *kern, const cx_params *ps,
                    cx_tensor *out, cx_status *st) {
    if (out->numel == 0) return CX_OK;
    cx_conv_dims v;
    cx_conv_dims_of(&x->desc, &kern->desc, ps, &v);
    if (v.cg * v.kh * v.kw == 0) /* no input channels: empty sums */
        return cuda_check(d, cudaMemsetAsync(out->data, 0, out->nbytes, d->stream),
                          "conv2d: cudaMemsetAsync", st);
    if (path_chosen() != CONV_IM2COL) {
        bool ran = false;
        cx_code rc = cuda_cudnn_conv2d(d, x, kern, &v, out, &ran, st);
        if (rc || ran) return rc;
    }
    return conv2d_im2col(d, x, kern, &v, out, st);
}
