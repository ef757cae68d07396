/* The op registry: ids, kinds and the per-op record derived from ops.def. */
#ifndef CX_OPS_H
#define CX_OPS_H

#include "params.h"
#include "status.h"

/* Ops of one kind share type rules and, in drivers, kernels. */
typedef enum {
    CX_KIND_UNARY,        /* elementwise, keeps the type */
    CX_KIND_UNARY_FLOAT,  /* elementwise, integers computed as f32 */
    CX_KIND_BINARY,       /* elementwise, merged type */
    CX_KIND_BINARY_FLOAT, /* elementwise, merged then floating type */
    CX_KIND_COMPARE,      /* elementwise, merged inputs, u8 out */
    CX_KIND_LOGICAL,      /* elementwise truth of inputs, u8 out */
    CX_KIND_SELECT,       /* three-input elementwise */
    CX_KIND_CAST,
    CX_KIND_REDUCE,
    CX_KIND_ARGREDUCE,
    CX_KIND_SORT,    /* sort and argsort along one axis */
    CX_KIND_SCATTER, /* indexed_add and indexed_put */
    CX_KIND_SCAN,    /* cumulative_sum/product/max/min along one axis */
    CX_KIND_WINDOW,  /* window_sum/product/max/min, window_scatter_max/min */
    CX_KIND_LINALG,  /* last two axes, batched over the others: triangular_solve, lu, eigh, svd */
    CX_KIND_LAYOUT,  /* moves elements without arithmetic */
    CX_KIND_DOT,
    CX_KIND_FFT,       /* fft and ifft along the last axis */
    CX_KIND_CREATE,    /* no tensor inputs */
    CX_KIND_COMPOSITE, /* not a primitive: has a decomposition into other ops (decompose.c) */
} cx_op_kind;

typedef enum {
#define CX_OP(id, name, kind, args, opts, infer, doc, ex, res)                     CX_OP_##id,
#define CX_COMPOSITE(id, name, args, opts, infer, decompose, sample, doc, ex, res) CX_OP_##id,
#include "ops.def"
#undef CX_OP
#undef CX_COMPOSITE
    CX_OP_COUNT
} cx_op_id;

/* Every op name in table order, joined with commas (ops_signature.inc). A driver built from
 * another table is refused when it is loaded. */
extern const char cx_ops_signature[];

/* A tensor's type and shape, without its data: what inference works on. */
typedef struct {
    cx_dtype dtype;
    int32_t rank;
    int64_t shape[CX_MAX_RANK];
} cx_desc;

/* The most tensor inputs one op takes (concatenate takes a list). */
#define CX_MAX_INPUTS 256

/* Checks the inputs and parameters, normalises the parameters in place (negative axes made
 * positive, defaults filled in) and fills:
 *   out       the result's type and shape,
 *   compute   the type each input must have when the kernel runs (the dispatcher casts).
 * Returns CX_OK, or CX_EINVAL with a message naming the expected and the given. */
typedef cx_code (*cx_infer_fn)(cx_op_id op, const cx_desc *in, int n_in, cx_params *ps,
                               cx_desc *out, cx_dtype *compute, cx_status *st);

struct cx_graph;
/* A composite's decomposition: builds the op from others on a graph (graph.h) whose first
 * values are the op's inputs, and returns the value of the result. */
typedef int (*cx_decompose_fn)(struct cx_graph *g, const int *in, int n_in, const cx_params *ps);
/* Representative inputs of type `t` for a composite, used to list the steps of its
 * decomposition in capability tables. Fills in[], *n_in and ps. */
typedef void (*cx_sample_fn)(cx_op_id op, cx_dtype t, cx_desc *in, int *n_in, cx_params *ps);

typedef struct {
    const char *name;
    cx_op_kind kind;
    const char *args; /* see ops.def */
    const char *opts;
    cx_infer_fn infer;
    cx_decompose_fn decompose; /* composites only */
    cx_sample_fn sample;       /* composites only */
} cx_op_info;

extern const cx_op_info cx_op_table[CX_OP_COUNT];

/* Returns the op id for a name, or -1. */
int cx_op_find(const char *name);

/* How many tensors the op takes, or -1 when it takes a list (concatenate). */
int cx_op_tensor_arity(cx_op_id op);

/* Whether the op is defined on complex types (c64, c128): as inputs, compute types or result. */
bool cx_op_takes_complex(cx_op_id op);

/* The op's inference (cx_op_table[op].infer), then the refusal of complex types for an op not
 * defined on them. Every caller infers through this. */
cx_code cx_infer_op(cx_op_id op, const cx_desc *in, int n_in, cx_params *ps, cx_desc *out,
                    cx_dtype *compute, cx_status *st);

/* Whether the op takes integer tensors only (the bitwise ops, shifts, quotient). */
bool cx_op_integer_only(cx_op_id op);

/* Elements in a shape (1 for rank 0). */
static inline int64_t cx_desc_numel(const cx_desc *d) {
    int64_t n = 1;
    for (int k = 0; k < d->rank; k++) n *= d->shape[k];
    return n;
}
/* Whether two descriptions have the same rank and sizes (types aside). */
static inline bool cx_desc_same_shape(const cx_desc *a, const cx_desc *b) {
    if (a->rank != b->rank) return false;
    for (int k = 0; k < a->rank; k++)
        if (a->shape[k] != b->shape[k]) return false;
    return true;
}

#define CX_INFER(fn)                                                                               \
    cx_code fn(cx_op_id op, const cx_desc *in, int n_in, cx_params *ps, cx_desc *out,              \
               cx_dtype *compute, cx_status *st)
CX_INFER(cx_infer_unary);
CX_INFER(cx_infer_complex_part);
CX_INFER(cx_infer_conjugate);
CX_INFER(cx_infer_fft);
CX_INFER(cx_infer_logical);
CX_INFER(cx_infer_binary);
CX_INFER(cx_infer_unary_int);
CX_INFER(cx_infer_binary_int);
CX_INFER(cx_infer_select);
CX_INFER(cx_infer_clip);
CX_INFER(cx_infer_as_type);
CX_INFER(cx_infer_reduce);
CX_INFER(cx_infer_argreduce);
CX_INFER(cx_infer_sort);
CX_INFER(cx_infer_indexed);
CX_INFER(cx_infer_triangular_solve);
CX_INFER(cx_infer_lu_factor);
CX_INFER(cx_infer_eigh_packed);
CX_INFER(cx_infer_svd_packed);
CX_INFER(cx_infer_window);
CX_INFER(cx_infer_window_scatter);
CX_INFER(cx_infer_reshape);
CX_INFER(cx_infer_transpose);
CX_INFER(cx_infer_broadcast);
CX_INFER(cx_infer_squeeze);
CX_INFER(cx_infer_slice);
CX_INFER(cx_infer_put_slice);
CX_INFER(cx_infer_pad);
CX_INFER(cx_infer_reverse);
CX_INFER(cx_infer_concatenate);
CX_INFER(cx_infer_take);
CX_INFER(cx_infer_gather);
CX_INFER(cx_infer_take_along_axis);
CX_INFER(cx_infer_scan);
CX_INFER(cx_infer_dot);
CX_INFER(cx_infer_full);
CX_INFER(cx_infer_iota);
CX_INFER(cx_infer_eye);
CX_INFER(cx_infer_random);

#endif
