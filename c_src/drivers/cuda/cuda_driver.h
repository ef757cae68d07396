/* What the cuda driver's files share besides the device (cuda_device.h): dot through cuBLAS. */
#ifndef CX_CUDA_DRIVER_H
#define CX_CUDA_DRIVER_H

#include "cuda_device.h"

/* On the owner thread: out = dot(a, b) as one strided batched GEMM (cuda_blas.c). */
cx_code cuda_dot(cuda_device *d, const cx_tensor *a, const cx_tensor *b, const cx_params *ps,
                 cx_tensor *out, cx_status *st);
/* Whether the GEMM's sizes fit cuBLAS's 32-bit arguments; if not, why in `reason`. */
bool cuda_dot_fits(const cx_desc *in, const cx_params *ps, char *reason, size_t len);

#endif
