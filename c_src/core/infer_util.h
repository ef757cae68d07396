/* Checks shared by the inference functions (infer.c) and the composites' inference
 * (infer_*.c). Each failure writes a message naming the op, the expected and the given. */
#ifndef CX_INFER_UTIL_H
#define CX_INFER_UTIL_H

#include <stdio.h>
#include <string.h>

#include "ops.h"

/* Writes "{2, 3}" / "[1, 2]" into buf and returns it. */
const char *cx_fmt_shape(const int64_t *shape, int rank, char *buf, size_t n);
const char *cx_fmt_ints(const int64_t *v, int count, char *buf, size_t n);
#define CX_SHAPE_STR(d) cx_fmt_shape((d)->shape, (d)->rank, (char[160]){0}, 160)

cx_code cx_check_arity(cx_op_id op, int n_in, int want, cx_status *st);
/* Sane sizes and at most 2^48 elements. */
cx_code cx_check_shape(cx_op_id op, const int64_t *shape, int rank, cx_status *st);
/* An axis in -rank..rank-1, made positive. */
cx_code cx_normalize_axis(cx_op_id op, int64_t axis, int rank, int64_t *out, cx_status *st);
/* Distinct axes, made positive in place; sorted when `sorted`. */
cx_code cx_normalize_axes(cx_op_id op, cx_param *p, int rank, bool sorted, cx_status *st);
/* Sets parameter id to 0..rank-1. */
cx_param *cx_put_all_axes(cx_params *ps, cx_param_id id, int rank);
bool cx_param_bool(const cx_params *ps, cx_param_id id, bool dflt);
/* NumPy broadcasting of two shapes (out gets the shape and rank, not the type). */
cx_code cx_broadcast_shapes(cx_op_id op, const cx_desc *a, const cx_desc *b, cx_desc *out,
                            cx_status *st);
cx_code cx_require_integer(cx_op_id op, const cx_desc *d, const char *what, cx_status *st);
cx_code cx_require_param(cx_op_id op, const cx_params *ps, cx_param_id id, cx_status *st);
cx_code cx_require_type_param(cx_op_id op, const cx_params *ps, cx_dtype *out, cx_status *st);
/* A reduction's result shape: normalises the AXES (all when not given, sorted) and KEEP_AXES
 * parameters and fills out's shape and rank (not its type). */
cx_code cx_reduce_shape(cx_op_id op, const cx_desc *in, cx_params *ps, cx_desc *out, cx_status *st);
/* The SHAPE parameter, checked, into out's shape and rank. */
cx_code cx_shape_param(cx_op_id op, const cx_params *ps, cx_desc *out, cx_status *st);
/* The floating type of n inputs merged (integers give f32), as a floating composite's result. */
cx_dtype cx_merged_float(const cx_desc *in, int n);
/* The type a floating composite computes in: t's floating type, f16 and bf16 in f32. */
cx_dtype cx_work_type(cx_dtype t);

#endif
