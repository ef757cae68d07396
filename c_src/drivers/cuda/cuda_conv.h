/* conv2d on the cuda driver, for f32, f16 and bf16 and every geometry the composite accepts.
 * Two paths, on the device's owner thread:
 *   - im2col + cuBLAS (cuda_conv.c): the scratch matrices of a chunk of images in one kernel
 *     (kernels_conv.cu), then strided batched GEMMs with f32 accumulation;
 *   - cuDNN (cuda_cudnn.c), loaded with dlopen at first use, for the geometries it can express.
 * Which one runs: CASCADE_CUDA_CONV=auto|im2col|cudnn (cuda_conv.c). */
#ifndef CX_CUDA_CONV_H
#define CX_CUDA_CONV_H

#include "../../core/conv_geom.h"
#include "cuda_device.h"

/* Whether conv2d of these inputs runs natively on device `dev`: the casts to the compute type
 * that the dispatcher adds are ones this driver runs, and the geometry fits cuBLAS's 32-bit
 * sizes; if not, why in `reason` (the refine answer: the decomposition runs instead). */
bool cuda_conv2d_fits(void *dev, const cx_desc *x, const cx_desc *kern, const cx_params *ps,
                      char *reason, size_t len);
/* On the owner thread: out = conv2d(x, kern), both of out's type, ps normalised. */
cx_code cuda_conv2d(cuda_device *d, const cx_tensor *x, const cx_tensor *kern, const cx_params *ps,
                    cx_tensor *out, cx_status *st);

/* cuda_cudnn.c. Whether libcudnn.so.9 could be loaded (tried once, on the first call). */
bool cuda_cudnn_loaded(void);
/* On the owner thread: runs the convolution through cuDNN and sets *ran, or leaves *ran false
 * without enqueuing anything when cuDNN is not loaded, cannot express the geometry (asymmetric
 * or negative padding, sizes beyond its 32-bit ones) or has no algorithm for it: then the caller
 * runs im2col. An error is returned only for a failure after the work was committed. */
cx_code cuda_cudnn_conv2d(cuda_device *d, const cx_tensor *x, const cx_tensor *kern,
                          const cx_conv_dims *v, cx_tensor *out, bool *ran, cx_status *st);

#endif
