/* The blas driver's kernels: the GEMM-shaped ops run by OpenBLAS. Everything else the driver
 * runs with its own copy of the cpu kernels (blas_driver.c). */
#ifndef CX_BLAS_KERNELS_H
#define CX_BLAS_KERNELS_H

#include <cblas.h>

#include "../../core/tensor.h"

/* a fused chain run as another op's epilogue (blas_simd.c, below) */
typedef struct blas_epilogue blas_epilogue;

/* blas_dot.c: DOT in f32, f64, f16 and bf16 (halves through f32); integers, and products whose
 * dimensions do not fit OpenBLAS's int, go to the cpu kernel. */
cx_code blas_dot(const cx_tensor *a, const cx_tensor *b, const cx_params *ps, cx_tensor *out,
                 cx_status *st);
/* which library runs the next DOT of these inputs: "onednn" for a bf16 product that oneDNN
 * runs (blas_dnnl_matmul_path below), else "openblas" */
const char *blas_dot_library(const cx_desc *a, const cx_desc *b, const cx_params *ps);
/* blas_linalg.c: the LINALG kind (triangular_solve, lu_factor, eigh_packed) with dtrsm, LAPACK's
 * dgetrf and dsyevd; blas_linalg_fits: whether the matrices' sizes fit LAPACK's int (else the
 * portable steps run). */
bool blas_linalg_fits(cx_op_id op, const cx_desc *in, int n_in);
cx_code blas_linalg(cx_op_id op, const cx_tensor *const *in, int n_in, const cx_params *ps,
                    cx_tensor *out, cx_status *st);
/* blas_dense.c: an f16 or bf16 tensor widened into a new f32 buffer of the cpu driver's
 * allocator (cpu_buffer_put it), or NULL without memory. */
float *blas_widen_f32(const cx_tensor *t);
/* blas_dense.c: the dense composite, activation(tensor . kernel + bias) as one GEMM onto the
 * broadcast bias, the activation applied block by block; all three inputs have the output's
 * float type. blas_dense_activation_fits: whether the activation (CX_ACTIVATION_*) runs here for
 * that type (the vector kernels are there; f64 takes relu, sigmoid and tanh). */
bool blas_dense_activation_fits(int64_t act, cx_dtype t);
cx_code blas_dense(const cx_tensor *x, const cx_tensor *w, const cx_tensor *bias,
                   const cx_params *ps, cx_tensor *out, cx_status *st);
/* which library runs the next dense of these inputs: "onednn" for a bf16 one whose product
 * oneDNN runs (blas_dnnl_matmul_path below), else "openblas" */
const char *blas_dense_library(const cx_desc *x, const cx_desc *w);
/* blas_dnnl.c: conv2d on oneDNN or im2col + OpenBLAS, whichever measured faster for the shape
 * class; both inputs have the output's float type. epi: NULL, or a chain run on the result
 * (blas_epilogue_new on `out`): on each block as the depthwise and im2col paths write it, over
 * the whole result after oneDNN. blas_conv2d_library: which one runs next.
 * blas_conv.c: conv2d as im2col + blas_gemm per image and group, any geometry.
 * blas_conv2d_fits: whether the GEMM's dimensions fit OpenBLAS's int. */
cx_code blas_conv2d(const cx_tensor *x, const cx_tensor *kern, const cx_params *ps, cx_tensor *out,
                    const blas_epilogue *epi, cx_status *st);
const char *blas_conv2d_library(const cx_desc *x, const cx_desc *kern, const cx_params *ps);
/* A depthwise conv2d (f32, nchw, one input channel per group, any multiplier, strides,
 * dilations, padding) computed directly, split by output planes across the pool. */
bool blas_conv2d_depthwise_fits(const cx_desc *x, const cx_desc *kern, const cx_params *ps);
cx_code blas_conv2d_depthwise(const cx_tensor *x, const cx_tensor *kern, const cx_params *ps,
                              cx_tensor *out, const blas_epilogue *epi);
cx_code blas_conv2d_im2col(const cx_tensor *x, const cx_tensor *kern, const cx_params *ps,
                           cx_tensor *out, const blas_epilogue *epi, cx_status *st);
/* conv2d_grad_input (grad_output, kernel) and conv2d_grad_kernel (input, grad_output) on
 * oneDNN's backward primitives: fits says whether oneDNN builds one for these shapes (one
 * group, float types, padding >= 0); otherwise they decompose. */
bool blas_conv2d_grad_fits(cx_op_id op, const cx_desc *in, int n_in, const cx_params *ps);
/* A product for oneDNN's matmul: C (m x n, row-major) = op(A) . op(B), A and B read in place
 * (ta: A is stored k x m, its element (i, l) at l * lda + i; else at i * lda + l; the same for B
 * with tb, ldb), all bf16 or all f32. blas_dnnl.c measures it against OpenBLAS per shape: the
 * first six calls of a shape once built run oneDNN (the first ones vary; the fifth and sixth
 * are timed), the next two OpenBLAS, and from then on the faster, where OpenBLAS
 * must be 1.25x faster to win an f32 shape and 1.5x a bf16 one (CASCADE_BLAS_DOT=onednn or
 * openblas forces one).
 * bf16 shapes take part where the processor has AVX512-BF16 (bf16 dot products in hardware,
 * twice the f32 FMA rate; OpenBLAS runs them widened to f32); f32 ones from BLAS_DNNL_F32_MIN
 * multiply-adds (about 100^3): oneDNN ran an f32 128^3 and 256^3 faster than OpenBLAS, while below
 * it a shape's kernels would cost more to build than they save. A new shape is built in the
 * background (its calls run on OpenBLAS until it is ready), then runs as strips on the pool's
 * threads, or whole (f32 of MM_WHOLE_MIN, 2^30 multiply-adds, or more) as one dnnl_sgemm on
 * oneDNN's master thread with OpenMP's team (blas_dnnl.c).
 * blas_dnnl_matmul_path: which runs the next call of the shape: 1 oneDNN, 2 OpenBLAS timed (its
 * time goes to blas_dnnl_matmul_record: for the choice, then for the probes that check it), 0
 * OpenBLAS with nothing to time (without oneDNN or the instructions, too small, forced, or
 * oneDNN could not build it), 3 OpenBLAS while oneDNN's kernels for it are being built (asking
 * about a new shape starts building them; a caller with another shape to try, blas_dot's f32
 * copies of f16/bf16 operands, waits for this one instead).
 * blas_dnnl_matmul: runs it on oneDNN; false if it cannot (nothing written). */
#define BLAS_DNNL_F32_MIN (INT64_C(1) << 20)
typedef struct {
    int64_t m, n, k, lda, ldb;
    bool ta, tb;
    bool c_f32; /* bf16: C in f32 instead (dense adds its bias and activation, then rounds) */
    bool f32;   /* A, B and C f32 */
    /* f32 copies of f16/bf16 operands, widened by the caller: a class of its own, measured
     * against OpenBLAS on the same halves (its time with the widening, oneDNN's without) */
    bool widened;
} blas_mm_shape;
int blas_dnnl_matmul_path(const blas_mm_shape *s);
bool blas_dnnl_matmul(const blas_mm_shape *s, const void *a, const void *b, void *c);
void blas_dnnl_matmul_record(const blas_mm_shape *s, double seconds);
/* Reproducible or not (the driver's set_reproducible): when on, a conv2d oneDNN may take runs on
 * it, with its direct algorithm (CASCADE_BLAS_WINOGRAD=1 aside), and every product on OpenBLAS
 * (CASCADE_BLAS_DOT=onednn aside); nothing is timed. */
void blas_dnnl_set_fixed(bool on);
/* Whether the driver was built with oneDNN's path (dnnl.h found, not a sanitised build), and
 * whether libdnnl loads (it is opened then, if it was not yet). */
bool blas_dnnl_built(void);
bool blas_dnnl_available(void);
cx_code blas_conv2d_grad(cx_op_id op, const cx_tensor *a, const cx_tensor *b, const cx_params *ps,
                         cx_tensor *out, cx_status *st);
bool blas_conv2d_fits(const cx_desc *x, const cx_desc *kern, const cx_params *ps);

/* blas_rnn.c: recurrent in f32 (all five inputs), with the vector kernels (blas_simd()). R is
 * packed for them when the sequence has BLAS_RNN_PACK_MIN rows of products (steps x batch) or
 * more; a shorter one runs its products with OpenBLAS on R itself: packing reads and writes all
 * of R once, which a few one-row products cost less than (silero VAD runs one step of one row a
 * call). */
#define BLAS_RNN_PACK_MIN 8
/* Whether recurrent on input x and weights r packs R for the vector kernels (else OpenBLAS) */
bool blas_recurrent_packs(const cx_desc *x, const cx_desc *r);
cx_code blas_recurrent(const cx_tensor *const *in, const cx_params *ps, cx_tensor *out,
                       cx_status *st);

/* blas_gemm.c: C = op(A) . op(B) + beta C, row-major, split across the driver's threads. */
typedef struct {
    bool f64; /* double, or float */
    CBLAS_TRANSPOSE ta, tb;
    int m, n, k;
    const void *a;
    int lda;
    const void *b;
    int ldb;
    double beta;
    void *c;
    int ldc;
    /* run on each block of C as soon as it is computed, on the thread that computed it (NULL:
     * nothing): rows x cols values at c, rows ldc apart; part: the blas_parallel part */
    void (*epilogue)(void *ctx, int part, void *c, int rows, int cols, int ldc);
    void *epilogue_ctx;
} blas_gemm_args;
void blas_gemm(const blas_gemm_args *g);
/* The same product on the calling thread alone, as blas_parallel part `part` (its epilogue's
 * part): for callers that split their work across the pool themselves. */
void blas_gemm_serial(const blas_gemm_args *g, int part);
/* An f16/bf16 product out = epilogue(op(A) . op(B) + bias), rounded to `type`, on copies each
 * thread of it widens for itself (blas_dot.c): A is m x k (stored k x m when ta), B k x n
 * (stored n x k when tb), each one contiguous block; bias: NULL, or bias_n (1 or n) f32 values
 * added to every row before the product; epilogue: NULL, or run on each f32 block before it is
 * rounded. False, having written nothing, when the product is larger than that path takes (or
 * a thread found no memory): the caller runs it otherwise. */
typedef struct {
    cx_dtype type;
    const uint16_t *a, *b;
    bool ta, tb;
    int64_t m, n, k;
    const float *bias;
    int64_t bias_n;
    void (*epilogue)(void *ctx, int part, void *c, int rows, int cols, int ldc);
    void *epilogue_ctx;
    uint16_t *out;
} blas_half_gemm;
bool blas_half_gemm_private(const blas_half_gemm *g);

/* how blas_gemm splits an m x n x k product: the parts to ask the pool for, by columns of C when
 * *by_cols, else by rows */
int blas_gemm_parts(int m, int n, int k, bool *by_cols);

/* blas_pool.c: the driver's threads, shared by every op it splits. blas_pool_start starts the
 * workers for `threads` threads in all (the caller is one) and returns how many there are, fewer
 * when a thread could not be created; called once, at probe. blas_parallel runs fn(ctx, i, parts)
 * for i = 0 .. parts - 1, parts = max_parts but at most the pool's threads (never fewer: a part's
 * bounds, and so its bits, do not depend on which workers are free), and returns parts. The
 * caller and the idle workers it claims share the parts; when every worker is busy with another
 * caller's op, the caller runs them all, or with `wait` sleeps until a worker is free. A part may
 * run on any of those threads, after another part on the same one. */
typedef void (*blas_part_fn)(void *ctx, int index, int parts);
int blas_pool_start(int threads);
int blas_pool_threads(void);
/* Tells the workers waiting for a part to stop spinning on their cores: other threads are about
 * to need them (oneDNN's OpenMP team, for a convolution). */
void blas_pool_hush(void);
/* monotonic seconds, for timing the paths a measured choice picks between */
double blas_seconds(void);
int blas_parallel(int max_parts, bool wait, blas_part_fn fn, void *ctx);

/* blas_simd.c: the vector kernels (blas_simd.h) on tensors. Each returns false, having done
 * nothing, when it does not take the op, its types or its layout; the cpu kernel runs then. */
bool blas_simd_elementwise(cx_op_id op, const cx_tensor *const *in, int n_in, cx_tensor *out);
/* blas_pool2d.c: a window op of the pooling shape split by planes across the pool (false: not
 * that shape, or too small to split; the caller runs the cpu's kernel) */
bool blas_window(cx_op_id op, const cx_tensor *const *in, int n_in, const cx_params *ps,
                 cx_tensor *out);
/* n f16 or bf16 values to f32 and back (rounding to nearest even, NaN made quiet as half.h
 * does), on the vector kernels across the pool's threads where they are, else the core's
 * conversions. */
void blas_widen(cx_dtype type, const void *src, float *dst, int64_t n);
void blas_narrow(cx_dtype type, const float *src, void *dst, int64_t n);
/* blas_widen and blas_narrow on the calling thread alone (inside a part of the pool's work) */
void blas_widen_serial(cx_dtype type, const void *src, float *dst, int64_t n);
void blas_narrow_serial(cx_dtype type, const float *src, void *dst, int64_t n);
bool blas_simd_sum(const cx_tensor *in, const cx_params *ps, cx_tensor *out);
/* blas_copy.c: reshape, squeeze, concatenate, unit-stride slice and take along axis 0 as row
 * copies across the threads; false (nothing done) for the others and for small tensors */
bool blas_layout(cx_op_id op, const cx_tensor *const *in, int n_in, const cx_params *ps,
                 cx_tensor *out);
/* sort/argsort along an axis but the first, reverse of axes but the first, pad that neither crops
 * nor pads inside the first axis, take_along_axis and the cumulative ops along an axis but the
 * first: the cpu's kernels
 * on the threads' shares of the first axis (blas_copy.c) */
bool blas_split_rows(cx_op_id op, const cx_tensor *const *in, int n_in, const cx_params *ps,
                     cx_tensor *out);
/* clip (one value for each bound), leaky_relu and elu of f32/f64 in one pass */
bool blas_simd_param_op(cx_op_id op, const cx_tensor *const *in, int n_in, const cx_params *ps,
                        cx_tensor *out);
bool blas_simd_param_types(cx_op_id op, const cx_dtype *types, int n_in);
/* reduce_max, reduce_min, argmax, argmin of f32/f64 (blas_simd.c's ext_takes says which) */
bool blas_simd_extreme(cx_op_id op, const cx_tensor *in, const cx_params *ps, cx_tensor *out);
/* as_type between f32 and f16, bf16 or f64, between f16 and bf16, from f16/bf16 into f64, u8 and
 * s32 to and from f32, u8 into f16, bf16 and f64, s32 into f64 (the cpu's bits); false for the
 * other pairs (f64 into a half, the other integers), which the cpu converts */
bool blas_simd_cast(const cx_tensor *in, cx_tensor *out);
/* softmax and log_softmax along the last axis that is not 1, gelu, silu: in f32, f16 or bf16
 * when the processor has a table; false also when a buffer could not be allocated */
bool blas_simd_fused_fits(cx_op_id op, const cx_desc *in, const cx_params *ps);
bool blas_simd_fused(cx_op_id op, const cx_tensor *in, const cx_params *ps, cx_tensor *out);
/* layer_norm over the last axes, x, gamma and beta of one type (f32, f16, bf16), gamma and beta
 * a row of the normalised size or one value */
/* fused (core/fused.h): the chain in blocks that stay in cache, every instruction on a vector
 * kernel; fits when each has one for f32. */
bool blas_simd_chain_fits(const cx_desc *in, int n_in, const cx_params *ps);
bool blas_simd_chain(const cx_tensor *const *in, int n_in, const cx_params *ps, cx_tensor *out);
/* A fused chain (fused.h) as the epilogue of an op whose f32 result `out` is the chain's value
 * 0 (driver.h: epilogue), its other values `extra` (numbers, rows or channel vectors of out, or
 * out's shape; f32), the code in ps's EPILOGUE. fits: whether the vector kernels run it; new:
 * NULL when they do not or memory is short. Then blas_epilogue_run runs the chain in place over
 * elements lo .. hi of out, on any thread of a blas_parallel call as its part `part` (one part
 * at a time each); blas_epilogue_block over a block of rows x cols of out, ldc apart, from c;
 * blas_epilogue_all over the whole result, across the pool. */
bool blas_epilogue_fits(const cx_desc *out, const cx_desc *extra, int n_extra, const cx_params *ps);
blas_epilogue *blas_epilogue_new(cx_tensor *out, const cx_tensor *const *extra, int n_extra,
                                 const cx_params *ps);
void blas_epilogue_run(const blas_epilogue *e, int part, int64_t lo, int64_t hi);
void blas_epilogue_block(const blas_epilogue *e, int part, const float *c, int rows, int cols,
                         int ldc);
void blas_epilogue_all(const blas_epilogue *e);
void blas_epilogue_free(blas_epilogue *e);
bool blas_simd_layer_norm_fits(const cx_desc *in, int n_in, const cx_params *ps);
bool blas_simd_layer_norm(const cx_tensor *const *in, const cx_params *ps, cx_tensor *out);
/* logsumexp over the last axes and categorical_cross_entropy (f32, f16, bf16; the same type
 * for both inputs): one number per row, fused */
bool blas_simd_rowred_fits(cx_op_id op, const cx_desc *in, int n_in, const cx_params *ps);
bool blas_simd_rowred(cx_op_id op, const cx_tensor *const *in, const cx_params *ps, cx_tensor *out);
/* The instruction set's name ("avx512", "avx2") when the vector kernels run op on inputs of these
 * descriptions and parameters (NULL ps: every axis), NULL when the cpu kernel does. */
const char *blas_simd_library(cx_op_id op, const cx_desc *in, int n_in, const cx_params *ps);

/* blas_pool2d.c: max_pool2d and its gradient as direct loops over the windows, float types. */
cx_code blas_max_pool2d(const cx_tensor *x, const cx_params *ps, cx_tensor *out, cx_status *st);
cx_code blas_avg_pool2d(const cx_tensor *x, const cx_params *ps, cx_tensor *out, cx_status *st);
cx_code blas_avg_pool2d_grad(const cx_tensor *gy, const cx_params *ps, cx_tensor *out,
                             cx_status *st);
cx_code blas_max_pool2d_grad(const cx_tensor *x, const cx_tensor *gy, const cx_params *ps,
                             cx_tensor *out, cx_status *st);

/* Whether a GEMM of these sizes fits OpenBLAS's int dimensions. */
bool blas_dims_fit(int64_t m, int64_t n, int64_t k);

#endif
