/* The graph a decomposition is written on. A composite's decomposition (decompose.c and its
 * siblings) is one C function that builds the op from other ops through the calls below; the
 * same function serves two modes:
 *
 *   run   each call negotiates its op on the graph's device and runs it at once (cx_run): the
 *         values are tensors on that device;
 *   plan  each call only infers the result's type and shape and records the step, with the
 *         route it would take, for Cascade.explain/3 and the capability tables.
 *
 * Values are small integers. The first values are the composite's inputs. An error sticks: every
 * later call returns -1 and does nothing, and the first error is what the caller reports. So a
 * decomposition needs no error handling of its own beyond returning what the last call gave. */
#ifndef CX_GRAPH_H
#define CX_GRAPH_H

#include "dispatch.h"

typedef int cx_val;

typedef struct cx_gval {
    cx_desc desc;
    cx_tensor *t; /* run mode: the tensor; NULL once dropped */
    bool owned;   /* made by the graph (inputs belong to the caller) */
} cx_gval;

typedef struct cx_graph {
    cx_device *dev;
    cx_op_id op; /* the composite being decomposed, for messages */
    bool planning;
    cx_explain *ex; /* plan mode */
    int depth;      /* plan mode: depth of the steps */
    cx_status *st;
    cx_code rc;
    cx_gval *v;
    int n, cap;
} cx_graph;

/* Runs the decomposition of composite `op` on `dev`, on tensors living there; the result goes to
 * `out` (on `dev`). */
cx_code cx_graph_run(cx_op_id op, cx_device *dev, cx_tensor *const *in, int n_in,
                     const cx_params *ps, cx_tensor *out, cx_status *st);
/* Records the steps of the decomposition of `op` on inputs described by `in`, at `depth`. */
cx_code cx_graph_plan(cx_op_id op, cx_device *dev, const cx_desc *in, int n_in, const cx_params *ps,
                      cx_explain *ex, int depth, cx_status *st);

/* ---- for decompositions --------------------------------------------------------------------- */

/* The type and shape of a value (a rank-0 f32 placeholder after an error). */
const cx_desc *cx_g_desc(cx_graph *g, cx_val v);
static inline cx_dtype cx_g_type(cx_graph *g, cx_val v) {
    return cx_g_desc(g, v)->dtype;
}
static inline int cx_g_rank(cx_graph *g, cx_val v) {
    return cx_g_desc(g, v)->rank;
}
/* Size of one axis; negative axes count from the end. */
int64_t cx_g_dim(cx_graph *g, cx_val v, int axis);
/* Fails the graph with CX_EINVAL and a message prefixed with the composite's name. */
cx_val cx_g_fail(cx_graph *g, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Any op of the table; `ps` may be NULL. */
cx_val cx_g_op(cx_graph *g, cx_op_id op, const cx_val *in, int n_in, const cx_params *ps);
cx_val cx_g_unary(cx_graph *g, cx_op_id op, cx_val a);
cx_val cx_g_binary(cx_graph *g, cx_op_id op, cx_val a, cx_val b);
cx_val cx_g_select(cx_graph *g, cx_val pred, cx_val on_true, cx_val on_false);
/* A rank-0 tensor of type t holding `value`. */
cx_val cx_g_scalar(cx_graph *g, double value, cx_dtype t);
/* `a` op a scalar of a's type (a op value). */
cx_val cx_g_binary_scalar(cx_graph *g, cx_op_id op, cx_val a, double value);
/* `a` converted to type t; `a` itself when it has that type. */
cx_val cx_g_cast(cx_graph *g, cx_val a, cx_dtype t);
/* a reduction (sum, reduce_max ...) over `axes` (all axes when n_axes < 0). */
cx_val cx_g_reduce(cx_graph *g, cx_op_id op, cx_val a, const int64_t *axes, int n_axes,
                   bool keep_axes);
cx_val cx_g_reshape(cx_graph *g, cx_val a, const int64_t *shape, int rank);
cx_val cx_g_transpose(cx_graph *g, cx_val a, const int64_t *perm);
/* Broadcasts to `shape`; `axes` maps a's axes to the result's (NULL: aligned to the right). */
cx_val cx_g_broadcast(cx_graph *g, cx_val a, const int64_t *shape, int rank, const int64_t *axes);
/* `strides` may be NULL (all 1). */
cx_val cx_g_slice(cx_graph *g, cx_val a, const int64_t *start, const int64_t *lengths,
                  const int64_t *strides);
/* pads holds {low, high, interior} per axis. */
cx_val cx_g_pad(cx_graph *g, cx_val a, double value, const int64_t *pads);
cx_val cx_g_concatenate(cx_graph *g, const cx_val *vals, int n, int axis);
/* dot with contracting and batch axes of each side (see Cascade.dot/6). */
cx_val cx_g_dot(cx_graph *g, cx_val a, const int64_t *contract_a, int n_ca, const int64_t *batch_a,
                int n_ba, cx_val b, const int64_t *contract_b, int n_cb, const int64_t *batch_b,
                int n_bb);
cx_val cx_g_full(cx_graph *g, double value, cx_dtype t, const int64_t *shape, int rank);
cx_val cx_g_iota(cx_graph *g, const int64_t *shape, int rank, int axis, cx_dtype t);
/* Releases an intermediate value's memory early (run mode); using it afterwards fails. */
void cx_g_drop(cx_graph *g, cx_val v);

/* ---- helpers for infer functions of composites ---------------------------------------------- */

/* A sample for composites whose every tensor argument may be {2, 3} of type t, with the
 * options' defaults. */
void cx_sample_default(cx_op_id op, cx_dtype t, cx_desc *in, int *n_in, cx_params *ps);

#endif
