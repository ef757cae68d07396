/* The blas driver's kernels: the GEMM-shaped ops run by OpenBLAS. Everything else the driver
 * runs with its own copy of the cpu kernels (blas_driver.c). */
#ifndef CX_BLAS_KERNELS_H
#define CX_BLAS_KERNELS_H

#include <cblas.h>

#include "../../core/tensor.h"

/* blas_dot.c: DOT in f32, f64, f16 and bf16 (halves through f32); integers, and products whose
 * dimensions do not fit OpenBLAS's int, go to the cpu kernel. */
cx_code blas_dot(const cx_tensor *a, const cx_tensor *b, const cx_params *ps, cx_tensor *out,
                 cx_status *st);
/* blas_dense.c: the dense composite, tensor . kernel + bias as one GEMM onto the broadcast bias;
 * all three inputs have the output's float type. */
cx_code blas_dense(const cx_tensor *x, const cx_tensor *w, const cx_tensor *bias, cx_tensor *out,
                   cx_status *st);
/* blas_conv.c: conv2d as im2col + blas_gemm per image and group, any geometry; both inputs have
 * the output's float type. blas_conv2d_fits: whether the GEMM's dimensions fit OpenBLAS's int. */
cx_code blas_conv2d(const cx_tensor *x, const cx_tensor *kern, const cx_params *ps, cx_tensor *out,
                    cx_status *st);
bool blas_conv2d_fits(const cx_desc *x, const cx_desc *kern, const cx_params *ps);

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
} blas_gemm_args;
void blas_gemm(const blas_gemm_args *g);
/* Starts the workers for `threads` threads in all (the caller is one); returns how many there
 * are, fewer when a thread could not be created. Called once, at probe. */
int blas_pool_start(int threads);

/* Whether a GEMM of these sizes fits OpenBLAS's int dimensions. */
bool blas_dims_fit(int64_t m, int64_t n, int64_t k);

#endif
