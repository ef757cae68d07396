/* fused: a chain of elementwise ops over tensors of one shape (rows that broadcast to it, such
 * as a bias, and numbers) of one type, f32, f16 or bf16 (each instruction rounded to it, as the
 * op alone rounds), as one op. A
 * device that claims it runs the chain in one pass over memory (the blas driver: blocks that stay
 * in cache); any other runs its decomposition, the ops one by one. Cascade.Compiler's programs
 * build fused steps from the ops they record (program.c).
 *
 * The code is a list of instructions {op, a, b}: op applied to values a and b (b < 0: a unary
 * op). Values 0 .. n_in-1 are the inputs, n_in + k the result of instruction k; the op's result
 * is the last instruction's; with REDUCE 1 (sum) it is summed over AXES (normalised by inference:
 * all axes when not given) and KEEP_AXES, as the sum op would. */
#ifndef CX_FUSED_H
#define CX_FUSED_H

#include "graph.h"

#define CX_FUSED_MAX_CODE   8 /* instructions: 24 integers, a parameter's most */
#define CX_FUSED_MAX_INPUTS 8

typedef struct cx_fused_code {
    int n;
    cx_op_id op[CX_FUSED_MAX_CODE];
    int a[CX_FUSED_MAX_CODE], b[CX_FUSED_MAX_CODE];
} cx_fused_code;

/* The types a chain runs in: f32, f16 and bf16. */
bool cx_fused_type_ok(cx_dtype t);
/* Whether op may be an instruction of `arity` arguments: an elementwise op of that arity that
 * takes floats and keeps f32 (integer-only ops, comparisons and casts may not). */
bool cx_fused_op_ok(cx_op_id op, int arity);
/* Whether d is a row of full: what remains of d's shape after its leading 1s is full's trailing
 * axes (so its elements repeat along full's leading axes; one element repeats everywhere). */
bool cx_fused_is_row(const cx_desc *d, const cx_desc *full);
/* Whether d is a channel vector of full: its axes that are not 1 are axes of full of the same
 * sizes, followed in full by axes where d is 1 and that hold more than one element together
 * (*plane of them, when plane is not NULL): each of d's elements then repeats over a run of
 * *plane consecutive elements, and d repeats along full's leading axes (the bias {1, C, 1, 1} or
 * {C, 1, 1} of an {N, C, H, W} result: value (i / (H * W)) % C at element i). */
bool cx_fused_is_channel(const cx_desc *d, const cx_desc *full, int64_t *plane);
/* Whether d can stand beside a value of shape `full` in a chain: a number (rank 0), full's
 * shape, a row or a channel vector of it (types aside). */
bool cx_fused_broadcasts(const cx_desc *d, const cx_desc *full);
/* The input of the chain's full shape: the first that is not a number and of which every other
 * input that is not a number is the same shape, a row or a channel vector; NULL when there is
 * none. */
const cx_desc *cx_fused_full_input(const cx_desc *in, int n_in);
/* Whether an input is a row or a channel vector (not a number, not the full shape): kernels
 * without their indexing refuse such chains. */
bool cx_fused_has_rows(const cx_desc *in, int n_in);
/* The shape of the chain's result: the full input's when its last value reads it, else NULL
 * (one value, or, refused by inference, rows only). */
const cx_desc *cx_fused_result_shape(const cx_fused_code *c, const cx_desc *in, int n_in);
/* A sum at the end of chain c (reduce) on inputs `in`: the rows of the chain's result and the
 * elements each sums (cols), when the summed axes are the trailing ones; false for others. */
bool cx_fused_rows(const cx_fused_code *c, const cx_desc *in, int n_in, const cx_params *ps,
                   int64_t *rows, int64_t *cols);
/* The CODE parameter, checked against n_in inputs. */
cx_code cx_fused_decode(const cx_params *ps, int n_in, cx_fused_code *c, cx_status *st);
/* A chain's code from parameter `id` (CODE, or EPILOGUE: driver.h), checked against n_in
 * inputs. */
cx_code cx_fused_decode_param(const cx_params *ps, cx_param_id id, int n_in, cx_fused_code *c,
                              cx_status *st);

#endif
