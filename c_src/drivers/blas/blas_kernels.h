/* The blas driver's kernels: the GEMM-shaped ops run by OpenBLAS. Everything else the driver
 * runs with its own copy of the cpu kernels (blas_driver.c). */
#ifndef CX_BLAS_KERNELS_H
#define CX_BLAS_KERNELS_H

#include "../../core/tensor.h"

/* blas_dot.c: DOT in f32, f64, f16 and bf16 (halves through f32); integers, and products whose
 * dimensions do not fit OpenBLAS's int, go to the cpu kernel. */
cx_code blas_dot(const cx_tensor *a, const cx_tensor *b, const cx_params *ps, cx_tensor *out,
                 cx_status *st);
/* blas_dense.c: the dense composite, tensor . kernel + bias as one GEMM onto the broadcast bias;
 * all three inputs have the output's float type. */
cx_code blas_dense(const cx_tensor *x, const cx_tensor *w, const cx_tensor *bias, cx_tensor *out,
                   cx_status *st);
/* Whether a GEMM of these sizes fits OpenBLAS's int dimensions. */
bool blas_dims_fit(int64_t m, int64_t n, int64_t k);

#endif
