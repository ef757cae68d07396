/* The OpenCL C source of the opencl driver's kernels, and the tables that say which kernels it
 * holds (the driver claims exactly those). */
#ifndef CX_OPENCL_SOURCE_H
#define CX_OPENCL_SOURCE_H

#include "opencl_driver.h"

/* The source of every kernel; fp64 adds the f64 kernels and double accumulators. A malloc'd
 * string, NULL when out of memory. */
char *ocl_source(bool fp64);

/* Whether kernels exist for elements of type t (f64 needs fp64). */
bool ocl_type_supported(cx_dtype t, bool fp64);
/* The kernel-name suffix of a type: "f16", "bf16", "f32" ... */
const char *ocl_type_tag(cx_dtype t);
/* The OpenCL C expression of an elementwise op on type t, NULL when there is no kernel. */
const char *ocl_elementwise_expr(cx_op_id op, cx_dtype t);
/* The source of one kernel `fused` running a chain (core/fused.h) on f32: out, then the n_in
 * inputs (wide[k] false: a number, read at [0]), then the element count; with `reduce` (a
 * device with fp64), the chain's elements summed along rows: one group of OCL_REDUCE_GROUP per
 * row, out[row], and the row length instead of the count. A malloc'd string, NULL when out of
 * memory or an op has no f32 expression. */
struct cx_fused_code;
char *ocl_fused_source(const struct cx_fused_code *c, int n_in, const bool *wide, bool reduce);
/* The result type of a reduction on t, as inference gives it. */
cx_dtype ocl_reduce_out(cx_op_id op, cx_dtype t);

#endif
