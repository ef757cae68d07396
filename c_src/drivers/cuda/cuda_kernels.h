/* The cuda driver's kernels (kernels.cu), callable from C. Every function enqueues its work on
 * `stream` and returns the launch's error: none of them waits for the GPU. They run on the
 * device's owner thread (cuda_device.c), which has made the device current.
 *
 * f16 and bf16 are stored, loaded and stored natively (cuda_fp16.h, cuda_bf16.h) and computed
 * in f32 registers with one rounding on the way out, as PyTorch's "opmath" does and as the cpu
 * driver does: the differential tests compare like with like. */
#ifndef CX_CUDA_KERNELS_H
#define CX_CUDA_KERNELS_H

#include <cuda_runtime_api.h>
#include <stdbool.h>
#include <stdint.h>

#include "../../core/ops.h"

#ifdef __cplusplus
extern "C" {
#endif

#define CK_MAX_RANK CX_MAX_RANK

/* How an elementwise input is read: one value for every output element, the output's own
 * (contiguous) order, or through strides over the merged output shape. */
typedef enum { CK_SCALAR = 0, CK_CONTIGUOUS = 1, CK_STRIDED = 2 } ck_mode;

typedef struct {
    int rank; /* of the merged output shape */
    int64_t shape[CK_MAX_RANK];
    int64_t stride[3][CK_MAX_RANK]; /* per input, in elements; 0 on broadcast axes */
    int mode[3];
} ck_layout;

/* Elementwise ops of the UNARY, UNARY_FLOAT, BINARY, BINARY_FLOAT, COMPARE, LOGICAL and SELECT
 * kinds: values of type `t` (f32, f16 or bf16; u8 for comparisons and logical ops); select's
 * predicate has type `pred` (u8, f16, bf16 or f32, read as "non-zero"); comparisons and logical
 * ops write u8. `n` output elements, contiguous. */
cudaError_t ck_elementwise(cx_op_id op, cx_dtype t, cx_dtype pred, const void *const *in, int n_in,
                           void *out, int64_t n, const ck_layout *l, cudaStream_t stream);

/* as_type between any two types (a plain copy when from == to), with the cpu driver's rules:
 * floats round to nearest even, floats into integers truncate and saturate (NaN: 0), integers
 * into integers wrap. */
cudaError_t ck_cast(cx_dtype from, cx_dtype to, const void *x, void *y, int64_t n,
                    cudaStream_t stream);

/* dst[dst_off + sum(i_k * dst_stride_k)] = src[src_off + sum(i_k * src_stride_k)] over `shape`,
 * for elements of `size` bytes (1, 2, 4 or 8); strides in elements, possibly 0 or negative. */
typedef struct {
    int rank;
    int64_t shape[CK_MAX_RANK];
    int64_t src_stride[CK_MAX_RANK];
    int64_t dst_stride[CK_MAX_RANK];
    int64_t src_off, dst_off;
} ck_copy;

cudaError_t ck_copy_strided(size_t size, const void *src, void *dst, const ck_copy *c,
                            cudaStream_t stream);

/* sum, product, reduce_max, reduce_min of f32/f16/bf16 (accumulated in f32), all and any of
 * f32/f16/bf16/u8 (u8 out). Output element o is the multi-index over `kept` (row-major); the
 * reduction walks `red`. */
typedef struct {
    int n_kept, n_red;
    int64_t kept_shape[CK_MAX_RANK], kept_stride[CK_MAX_RANK];
    int64_t red_shape[CK_MAX_RANK], red_stride[CK_MAX_RANK];
    int64_t n_out, n_reduced;
} ck_reduce_plan;

cudaError_t ck_reduce(cx_op_id op, cx_dtype t, const void *x, void *y, const ck_reduce_plan *p,
                      cudaStream_t stream);

/* fused (core/fused.h) on f32: every work-item runs the chain's instructions on its element,
 * one op after another as the elementwise kernels compute each (one rounding per op). Input k
 * is a number (read at [0]) when bit k of `wide` is clear. */
typedef struct {
    int n_in, n;
    unsigned wide;
    int op[8], a[8], b[8];
} ck_fused_plan;

cudaError_t ck_fused(const float *const *in, float *out, int64_t n, const ck_fused_plan *p,
                     cudaStream_t stream);
/* The same chain summed along rows of `cols` elements into out[rows] (a block per row; in
 * double, rounded once; cols = 0 gives zeros). */
cudaError_t ck_fused_sum(const float *const *in, float *out, int64_t rows, int64_t cols,
                         const ck_fused_plan *p, cudaStream_t stream);
/* Whether the fused kernel runs op (an elementwise f32 op of one or two arguments). */
bool ck_fused_supports(int op);

/* softmax (or log_softmax) along the middle axis of x seen as {outer, n, inner}. */
cudaError_t ck_softmax(bool log, cx_dtype t, const void *x, void *y, int64_t outer, int64_t n,
                       int64_t inner, cudaStream_t stream);

/* layer_norm over the trailing axes: `rows` rows of `n` elements. gamma and beta are indexed
 * through the normalised axes' shape with their own strides (0 where broadcast). */
typedef struct {
    int rank; /* normalised axes */
    int64_t shape[CK_MAX_RANK];
    int64_t gamma_stride[CK_MAX_RANK], beta_stride[CK_MAX_RANK];
} ck_norm_plan;

cudaError_t ck_layer_norm(cx_dtype t, const void *x, const void *gamma, const void *beta, void *y,
                          int64_t rows, int64_t n, const ck_norm_plan *p, float epsilon,
                          cudaStream_t stream);

/* argmax (max) or argmin of f32/f16/bf16 along the middle axis of x seen as {outer, n, inner}
 * (n >= 1): the s64 position, ties to the first (or the last when `high`), NaN the extreme. */
cudaError_t ck_argreduce(bool max, bool high, cx_dtype t, const void *x, int64_t *y, int64_t outer,
                         int64_t n, int64_t inner, cudaStream_t stream);

/* `n` elements of `size` bytes (1, 2, 4 or 8), each the low `size` bytes of `bits`. */
cudaError_t ck_fill(size_t size, void *y, int64_t n, uint64_t bits, cudaStream_t stream);

/* iota: element i is (i / inner) % len, an integer converted into type t as as_type converts. */
cudaError_t ck_iota(cx_dtype t, void *y, int64_t n, int64_t len, int64_t inner,
                    cudaStream_t stream);

/* eye: element i is `one` (raw bits of `size` bytes) where, in its matrix of `square` elements
 * and `cols` columns, the row equals the column; 0 elsewhere. */
cudaError_t ck_eye(size_t size, void *y, int64_t n, int64_t cols, int64_t square, uint64_t one,
                   cudaStream_t stream);

/* random_uniform (normal false): fma(scale, u, offset) with u uniform in [0, 1), kept in
 * [lo, hi] when clamp; random_normal: fma(scale, z, offset) with z standard normal. u and z are
 * core/philox.h's for element i under `key`; types f32, f16, bf16 and f64. */
typedef struct {
    uint64_t key;
    bool normal, clamp;
    double scale, offset, lo, hi;
} ck_random;

cudaError_t ck_random_fill(cx_dtype t, void *y, int64_t n, const ck_random *r, cudaStream_t stream);

/* Sets *bad (device memory) to non-zero when some index ix[i] lies outside [0, dim[i % k]). */
typedef struct {
    int k;
    int64_t dim[CK_MAX_RANK];
} ck_index_dims;

cudaError_t ck_index_check(const int64_t *ix, int64_t n, const ck_index_dims *c, int *bad,
                           cudaStream_t stream);

/* take: y {outer, count, inner} from x {outer, dim, inner} at ix[count] (checked), `n` output
 * elements of `size` bytes; `along` (take_along_axis): ix {outer, count, inner} too, an index
 * for each element of y. */
cudaError_t ck_take(size_t size, const void *x, const int64_t *ix, void *y, int64_t n, int64_t dim,
                    int64_t count, int64_t inner, bool along, cudaStream_t stream);

/* gather: output element i is in row i / block; the row's k indices step through the indexed
 * axes (index_stride), the position in the block through the other axes (shape, stride). */
typedef struct {
    int k, rank;
    int64_t block;
    int64_t index_stride[CK_MAX_RANK];
    int64_t shape[CK_MAX_RANK], stride[CK_MAX_RANK];
} ck_gather_plan;

cudaError_t ck_gather(size_t size, const void *x, const int64_t *ix, void *y, int64_t n,
                      const ck_gather_plan *g, cudaStream_t stream);

#ifdef __cplusplus
}
#endif

#endif
