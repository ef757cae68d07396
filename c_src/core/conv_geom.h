/* conv2d's geometry for drivers that run it natively (blas, opencl): the sizes and the
 * parameters inference normalised (decompose_conv.c: layout, strides, kernel_dilation,
 * feature_group_size and the padding as 4 integers). */
#ifndef CX_CONV_GEOM_H
#define CX_CONV_GEOM_H

#include <stdbool.h>
#include <stdint.h>

#include "params.h"
#include "tensor.h"

typedef struct {
    bool nhwc;                  /* layout: input {N, H, W, C}, kernel {KH, KW, C/groups, O} */
    int64_t n, c, h, w;         /* the input */
    int64_t groups, cg, og;     /* input and output channels per group */
    int64_t kh, kw, oh, ow;     /* kernel and output height and width */
    int64_t s0, s1, d0, d1;     /* strides and dilations (height, width) */
    int64_t lo0, hi0, lo1, hi1; /* padding */
} cx_conv_dims;

/* Fills v from the input and kernel descriptors and the normalised parameters of a planned
 * conv2d (so it cannot fail). */
void cx_conv_dims_of(const cx_desc *x, const cx_desc *kern, const cx_params *ps, cx_conv_dims *v);

#endif
