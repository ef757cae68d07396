/* Declarations of every composite's inference, decomposition and sample function, from the
 * CX_COMPOSITE entries of ops.def. */
#ifndef CX_DECOMPOSE_H
#define CX_DECOMPOSE_H

#include "graph.h"
#include "infer_util.h"

#define CX_OP(id, name, kind, args, opts, infer, doc, ex, res)
#define CX_COMPOSITE(id, name, args, opts, infer, decompose, sample, doc, ex, res)                 \
    CX_INFER(infer);                                                                               \
    cx_val decompose(cx_graph *g, const cx_val *in, int n_in, const cx_params *ps);                \
    void sample(cx_op_id op, cx_dtype t, cx_desc *in, int *n_in, cx_params *ps);
#include "ops.def"
#undef CX_OP
#undef CX_COMPOSITE

#endif
