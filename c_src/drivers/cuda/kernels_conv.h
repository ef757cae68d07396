/* conv2d's im2col kernel (kernels_conv.cu), callable from C; cuda_conv.c runs the GEMM on what
 * it writes. Like every kernel of the driver it enqueues on `stream` and returns the launch's
 * error, without waiting for the GPU. */
#ifndef CX_CUDA_KERNELS_CONV_H
#define CX_CUDA_KERNELS_CONV_H

#include <cuda_runtime_api.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The geometry of `nb` consecutive images of a conv2d (cx_conv_dims, cut to what the copy needs):
 * the input is {nb, C, H, W} (nchw) or {nb, H, W, C} (nhwc), read from the chunk's first image. */
typedef struct {
    bool nhwc;
    int64_t nb, c, h, w;    /* images in the chunk, input channels, height, width */
    int64_t groups, cg;     /* groups, input channels per group */
    int64_t kh, kw, oh, ow; /* kernel and output height and width */
    int64_t s0, s1, d0, d1; /* strides and dilations (height, width) */
    int64_t lo0, lo1;       /* low padding (negative: cropped) */
} ck_im2col_geom;

/* Writes the im2col matrices of the chunk into `cols`, elements of `size` bytes (2 or 4: the copy
 * moves bits, so f16, bf16 and f32 share it), zeros where a window reads padding:
 *   nchw: {nb, C*KH*KW, OH*OW}, rows (c, ki, kj): each image's groups one after the other, each
 *         {cg*KH*KW, OH*OW}, the order of the kernel {O, cg, KH, KW}'s columns;
 *   nhwc: {groups, nb*OH*OW, cg*KH*KW}, columns (ki, kj, ci): the order of the kernel
 *         {KH, KW, cg, O}'s rows, so that one GEMM per group covers the whole chunk. */
cudaError_t ck_im2col(size_t size, const void *x, void *cols, const ck_im2col_geom *g,
                      cudaStream_t stream);

#ifdef __cplusplus
}
#endif

#endif
