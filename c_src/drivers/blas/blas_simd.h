/* The blas driver's vector kernels: elementwise ops, f16/bf16 conversion, reductions and the
 * fused activations, for one instruction set each. simd/simd_kernels.c is compiled once per
 * instruction set (AVX2 + FMA, AVX-512), each object defining its own table; blas_simd.c picks
 * one at run time from cpuid, and runs the kernels across the pool's threads. Transcendental
 * functions come from SLEEF's vector functions (1.0 ulp: the _u10 variants).
 *
 * Every kernel works on contiguous arrays of n elements; a binary kernel's operand whose stride
 * is 0 is one value broadcast over the n. The cpu driver's portable kernels are the reference
 * they are checked against (c_src/tests/test_differential.c). */
#ifndef CX_BLAS_SIMD_H
#define CX_BLAS_SIMD_H

#include <stdint.h>
#include <string.h>

#include "../../core/ops.h"

typedef void (*simd_unary_f32)(float *o, const float *a, int64_t n);
typedef void (*simd_unary_f64)(double *o, const double *a, int64_t n);
/* sa, sb: 1 when the operand is an array of n, 0 when it is one value */
typedef void (*simd_binary_f32)(float *o, const float *a, const float *b, int sa, int sb,
                                int64_t n);
typedef void (*simd_binary_f64)(double *o, const double *a, const double *b, int sa, int sb,
                                int64_t n);
/* f16 or bf16 operands and result, computed in f32 registers */
typedef void (*simd_unary_h)(uint16_t *o, const uint16_t *a, int64_t n);
/* a function of one f16/bf16 value beside its table of results (tab: 65,536 of them, as its
 * unary kernel gives them), for large arrays */
typedef void (*simd_mixed_h)(uint16_t *o, const uint16_t *a, int64_t n, const uint16_t *tab);
typedef void (*simd_binary_h)(uint16_t *o, const uint16_t *a, const uint16_t *b, int sa, int sb,
                              int64_t n);
typedef void (*simd_compare_f32)(uint8_t *o, const float *a, const float *b, int sa, int sb,
                                 int64_t n);
typedef void (*simd_compare_f64)(uint8_t *o, const double *a, const double *b, int sa, int sb,
                                 int64_t n);

/* o[i] = tab[a[i]] for a table of 65,536 f16/bf16 results (blas_simd.c's tables; the mixed
 * kernel of simd_kernels.c). Four results to a 64-bit store: one cycle a value is the load and
 * store ports' limit, and this is faster than storing them one by one. */
static inline void simd_table_lookup(uint16_t *restrict o, const uint16_t *restrict a,
                                     const uint16_t *restrict tab, int64_t n) {
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        uint64_t r = (uint64_t)tab[a[i]] | (uint64_t)tab[a[i + 1]] << 16 |
                     (uint64_t)tab[a[i + 2]] << 32 | (uint64_t)tab[a[i + 3]] << 48;
        uint64_t q = (uint64_t)tab[a[i + 4]] | (uint64_t)tab[a[i + 5]] << 16 |
                     (uint64_t)tab[a[i + 6]] << 32 | (uint64_t)tab[a[i + 7]] << 48;
        /* the empty statements keep r and q in general registers: vectorised, as GCC's -O3
         * would have it, this loop extracts each index with pextrw and runs at half the speed */
        __asm__("" : "+r"(r), "+r"(q));
        memcpy(o + i, &r, sizeof r);
        memcpy(o + i + 4, &q, sizeof q);
    }
    for (; i < n; i++) o[i] = tab[a[i]];
}

typedef struct {
    const char *name; /* "avx2", "avx512" */
    simd_unary_f32 unary_f32[CX_OP_COUNT];
    simd_unary_f64 unary_f64[CX_OP_COUNT];
    simd_binary_f32 binary_f32[CX_OP_COUNT];
    simd_binary_f64 binary_f64[CX_OP_COUNT];
    /* f16 and bf16 without the f32 copies: one rounding per result, as widening, the f32 kernel
     * and narrowing give (NULL: that chunked path runs) */
    simd_binary_h binary_f16[CX_OP_COUNT];
    simd_binary_h binary_bf16[CX_OP_COUNT];
    /* f16 and bf16 functions of one value computed in registers, where that beats the table of
     * their results (blas_simd.c, half_table): then for every size (NULL: the table, or the
     * chunks) */
    simd_unary_h unary_f16[CX_OP_COUNT];
    simd_unary_h unary_bf16[CX_OP_COUNT]; /* [CX_OP_GELU]: gelu's erf form */
    /* bf16 gelu beside its table, for large arrays (NULL: unary_bf16[CX_OP_GELU] alone) */
    simd_mixed_h gelu_bf16_mixed;
    /* comparisons to u8 (1 where it holds) */
    simd_compare_f32 compare_f32[CX_OP_COUNT];
    simd_compare_f64 compare_f64[CX_OP_COUNT];
    /* select with a u8 predicate of 16-, 32- and 64-bit values (their bits); sm, sa, sb as for
     * the binary kernels */
    void (*select_16)(uint16_t *o, const uint8_t *m, const uint16_t *a, const uint16_t *b, int sm,
                      int sa, int sb, int64_t n);
    void (*select_32)(uint32_t *o, const uint8_t *m, const uint32_t *a, const uint32_t *b, int sm,
                      int sa, int sb, int64_t n);
    void (*select_64)(uint64_t *o, const uint8_t *m, const uint64_t *a, const uint64_t *b, int sm,
                      int sa, int sb, int64_t n);
    /* y (cols x rows) = t (rows x cols) transposed, both row-major */
    void (*transpose_f32)(float *y, const float *t, int64_t rows, int64_t cols);
    /* bf16 to and from f32; narrowing rounds to nearest even and makes NaN quiet, as half.h
     * does */
    void (*bf16_to_f32)(const uint16_t *h, float *f, int64_t n);
    void (*f32_to_bf16)(const float *f, uint16_t *h, int64_t n);
    /* f16 to and from f32, bit for bit as the core's arrays (half_array.c), VW values an
     * instruction where they take 8 */
    void (*f16_to_f32)(const uint16_t *h, float *f, int64_t n);
    void (*f32_to_f16)(const float *f, uint16_t *h, int64_t n);
    /* a run of n values summed in double, like the cpu driver's reductions; `row` adds `rows`
     * runs (`stride` elements apart) elementwise into a row of double accumulators, in order */
    double (*sum_f32)(const float *a, int64_t n);
    double (*sum_f64)(const double *a, int64_t n);
    /* f16, bf16 in place: the same as widening blocks of 1024 and summing each with sum_f32 */
    double (*sum_f16)(const uint16_t *a, int64_t n);
    double (*sum_bf16)(const uint16_t *a, int64_t n);
    void (*sum_row_f32)(double *acc, const float *a, int64_t stride, int64_t rows, int64_t n);
    void (*sum_row_f64)(double *acc, const double *a, int64_t stride, int64_t rows, int64_t n);
    /* fused rows of n: softmax (or log_softmax when `log`) of one row; o may be a */
    void (*softmax_f32)(float *o, const float *a, int64_t n, int log);
    /* the largest of n values (NaN if one is NaN; -inf for none); sum(exp(a - m)) in double,
     * each exp also stored at o unless o is NULL */
    float (*row_max_f32)(const float *a, int64_t n);
    /* the largest (is_min: smallest) of n values, NaN if one is NaN (reduce_max, reduce_min,
     * argmax, argmin); acc[i] = the extreme of acc[i] and a[i], NaN kept */
    double (*extreme_f32)(const float *a, int64_t n, int is_min);
    double (*extreme_f64)(const double *a, int64_t n, int is_min);
    void (*extreme_row_f32)(float *acc, const float *a, int64_t n, int is_min);
    void (*extreme_row_f64)(double *acc, const double *a, int64_t n, int is_min);
    /* clip with one value for each bound; leaky_relu and elu with their alpha; softplus */
    void (*clip_f32)(float *o, const float *a, float lo, float hi, int64_t n);
    void (*clip_f64)(double *o, const double *a, double lo, double hi, int64_t n);
    void (*leaky_relu_f32)(float *o, const float *a, float alpha, int64_t n);
    void (*leaky_relu_f64)(double *o, const double *a, double alpha, int64_t n);
    void (*elu_f32)(float *o, const float *a, int64_t n, float alpha);
    void (*elu_f64)(double *o, const double *a, int64_t n, double alpha);
    void (*softplus_f32)(float *o, const float *a, int64_t n);
    void (*softplus_f64)(double *o, const double *a, int64_t n);
    double (*sum_exp_f32)(float *o, const float *a, int64_t n, float m);
    /* o[k] / s in place, each quotient correctly rounded (softmax's last step) */
    void (*div_f32)(float *o, int64_t n, float s);
    /* categorical cross-entropy of one row of n: y_true y, y_pred p (logits when from_logits) */
    float (*xent_f32)(const float *y, const float *p, int64_t n, int from_logits);
    /* layer_norm of a row of n; gamma and beta rows of n (gs, bs = 1) or one value (0) */
    void (*layer_norm_f32)(float *o, const float *x, const float *g, const float *b, int gs, int bs,
                           int64_t n, float eps);
    /* gelu (the tanh approximation when tanh_approx) and silu of n values */
    void (*gelu_f32)(float *o, const float *a, int64_t n, int tanh_approx);
    void (*silu_f32)(float *o, const float *a, int64_t n);
    /* max_pool2d's 2 x 2 windows of one f16/bf16 row pair: o[x] = the bits of the largest of
     * a[2x], a[2x+1], b[2x], b[2x+1] for x < ow (blas_pool2d.c's order of sign and magnitude,
     * -0 and +0 equal); nonzero when one of them is a NaN (magnitude above inf's) or -0, whose
     * bits the caller then finds window by window */
    int (*pool2x2_half)(uint16_t *o, const uint16_t *a, const uint16_t *b, int64_t ow,
                        uint16_t inf);
    /* max_pool2d_grad's 2 x 2 windows of one row pair: g[x] written to the first maximum of
     * a[2x], a[2x+1], b[2x], b[2x+1] (row-major; none for a NaN) in oa[2x..2x+1], ob[2x..2x+1],
     * zero elsewhere */
    void (*pool2x2_grad_f32)(float *oa, float *ob, const float *a, const float *b, const float *g,
                             int64_t ow);
    /* window_scatter_max/min of 2 x 2 windows at stride 2, one row pair, as Nx selects (the last
     * element >= the selected one, <= for min, from the first): value + g[x] at the selected
     * position, value at the other three */
    void (*scatter2x2_f32)(float *oa, float *ob, const float *a, const float *b, const float *g,
                           int64_t ow, float value, int is_min);
    /* window_max/min of 2 x 2 windows at stride 2, one row pair, folded as the cpu folds them
     * (the extreme, or the last NaN) */
    void (*fold2x2_f32)(float *o, const float *a, const float *b, int64_t ow, int is_min);
    /* window_sum (scale 1) and avg_pool2d (1 / 4) of 2 x 2 windows at stride 1 or 2, one row pair
     * a, b: the cpu's double sum from +0 in row-major order, times scale, rounded once */
    void (*sum2x2_f32)(float *o, const float *a, const float *b, int64_t ow, int stride,
                       double scale);
    /* a depthwise convolution's output plane from its taps (blas_conv.c): y[q] = the sum over
     * t < taps, in order from +0, of w[t] * src[t][q] with one rounding each (fma), for q < n, a
     * multiple of 64 */
    void (*dw_taps_f32)(float *y, const float *const *src, const float *w, int taps, int64_t n);
    void (*pool2x2_grad_half)(uint16_t *oa, uint16_t *ob, const uint16_t *a, const uint16_t *b,
                              const uint16_t *g, int64_t ow, uint16_t inf);
    /* C += A . B for a right operand read many times (recurrent's R^T, blas_rnn.c): A is m x k
     * (rows lda apart), B k x n (rows ldb apart), C m x n (rows ldc apart), n a multiple of
     * gemm_nr. Each element of C is its products summed in k's order from +0 (fma), then added
     * to C's value with one rounding. */
    void (*gemm_rows_f32)(float *c, int64_t ldc, const float *a, int64_t lda, const float *b,
                          int64_t ldb, int64_t m, int64_t n, int64_t k);
    int gemm_nr;
} simd_table;

/* From this many elements, an f16/bf16 function of one value (exp, tanh, gelu ...) reads each
 * result from a table of the function's 65,536 results, computed by the f32 kernel the same way
 * (blas_simd.c); smaller tensors compute each element. */
#define BLAS_HALF_TABLE_MIN (1 << 14)

extern const simd_table simd_avx2, simd_avx512;
/* fills t with simd_avx512 whose bf16 rounding (the binary kernels', f32_to_bf16) is the
 * AVX512-BF16 instruction's; only for a processor that has it */
void simd_avx512_bf16(simd_table *t);

/* The table for this processor, or NULL where neither instruction set is there (then the cpu
 * kernels run). CASCADE_SIMD=avx2|avx512|none overrides the choice (none: the portable kernels,
 * to measure them; an instruction set the processor lacks is not taken). */
const simd_table *blas_simd(void);
/* whether the chosen table is the AVX512-BF16 one (the processor has the instructions, and
 * CASCADE_SIMD does not turn them off): bf16 products may then run on oneDNN (blas_dnnl.c) */
bool blas_simd_bf16_hw(void);

#endif
