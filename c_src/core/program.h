/* A program: a straight-line sequence of ops on one device, negotiated once and then run as a
 * whole in one call (Cascade.Compiler lowers an Nx.Defn expression into one).
 *
 * Values live in slots. The first `n_inputs` slots are the program's inputs, given on each run;
 * the next `n_consts` are constants, tensors the caller keeps alive and passes on each run; step
 * k writes slot n_inputs + n_consts + k. Every step is planned when it is added (its route, its
 * result's type and shape), so a run only checks its inputs against the descriptions the
 * program was built for, then runs the plans. A step's result is freed right after the last
 * step that reads it, unless the program returns it.
 *
 * Arena: on a device whose buffers are host memory, the results of the native steps that the
 * program does not return are placed at offsets of one block (cx_program_finish plans the
 * offsets from when each value is written to its last reader, so two values live at once never
 * share bytes), and the block is kept for the next run. A run that finds the block taken (the
 * same program running in another thread) makes its own. The kept blocks of all programs
 * together hold at most CX_ARENA_IDLE_CAP bytes: a run that would keep more frees the blocks
 * given back longest ago. */
#ifndef CX_PROGRAM_H
#define CX_PROGRAM_H

#include "dispatch.h"

typedef struct {
    int n_in;
    int *in; /* slots */
    cx_params ps;
    cx_plan plan;
    int n_drop;
    int *drop; /* step slots whose last reader this step is */
    bool dead; /* folded into a later step: not run */
    int alias; /* 1 + the donated input whose buffer this step writes its result into, or 0 */
} cx_prog_step;

/* A program's arena while its block is kept: on a list of the kept blocks, the one given back
 * last first; when they hold more than the cap, those kept longest ago are freed (a process that
 * loads many models keeps the blocks of those it runs now, not of the first it ran). */
struct cx_arena {
    cx_tensor *kept; /* the block between runs, or NULL (then on no list) */
    size_t bytes;
    struct cx_arena *prev, *next;
};

typedef struct {
    cx_device *dev;
    int n_inputs, n_consts, n_slots;
    cx_desc *desc; /* of every slot */
    int n_steps, cap;
    cx_prog_step *steps;
    int n_out;
    int *out;        /* step slots returned, distinct */
    double cost;     /* the sum of the steps' estimates (dispatch.h) */
    bool done;       /* cx_program_finish succeeded */
    bool *donated;   /* per input: the caller gives its buffer up (cx_program_donate), or NULL */
    int64_t *offset; /* per step: its result's place in the arena, or -1 (a buffer of its own) */
    struct cx_arena *arena; /* its size and the block kept between runs; NULL: no arena */
} cx_program;

/* Why a cap: a program's block is as large as the most its intermediates hold at once (a CNN
 * at batch 32: hundreds of MB) and a compiled function keeps its program while it is cached, so
 * without one every signature ever run would keep its peak. */
#define CX_ARENA_IDLE_CAP ((size_t)1 << 30)
/* Bytes held by the blocks programs keep between runs. */
size_t cx_program_idle_arena_bytes(void);
/* Sets the cap on those bytes (CX_ARENA_IDLE_CAP to begin with) for the blocks given back from
 * now on; returns the cap before. */
size_t cx_program_arena_cap(size_t cap);

/* An empty program on `dev` with inputs and constants of these descriptions. */
cx_code cx_program_init(cx_program *p, cx_device *dev, const cx_desc *inputs, int n_inputs,
                        const cx_desc *consts, int n_consts, cx_status *st);
/* Appends op on the slots `in` and plans it; its result's slot is the return value (-1 on
 * failure, with st set). `ps` is normalised into the step's own copy. */
int cx_program_add(cx_program *p, cx_op_id op, const int *in, int n_in, const cx_params *ps,
                   cx_status *st);
/* Marks inputs as donated, before cx_program_finish: the caller gives up their buffers on every
 * run, so that an elementwise step (unary, binary or fused, native, whose result has the
 * input's type and shape) that is the last to read one writes its result into that buffer
 * instead of a new one. A run takes the buffer only when the input tensor is unpinned and no
 * other input or constant of the run is the same tensor; the input is then freed (using it again
 * fails as after Cascade.free/1). */
cx_code cx_program_donate(cx_program *p, const int *inputs, int n, cx_status *st);
/* Names the step slots the program returns (distinct), folds steps into their readers where one
 * op does the work of two (a transpose of a dot's result becomes the dot with its operands
 * swapped), and computes when each result dies and which step writes into which donated
 * input. */
cx_code cx_program_finish(cx_program *p, const int *out, int n_out, cx_status *st);
/* Runs the program on `inputs` (matching the inputs' descriptions, on the program's device)
 * and the constants; the results go to out[0 .. n_out-1], which the caller provides. On
 * failure no result holds a buffer and every intermediate has been freed. */
cx_code cx_program_run(const cx_program *p, cx_tensor *const *inputs, cx_tensor *const *consts,
                       cx_tensor *out, cx_status *st);
/* A while loop of two programs over a state of n values: `cond` and `body` both take the state
 * as their inputs (in order); `cond`'s value picked by cond_pick is its predicate (a single
 * element, true when not zero: any bit but a sign bit set), `body`'s values picked by
 * body_pick[0 .. n-1] are the next state. A pick k >= 0 names the program's result k, -(j + 1)
 * its input j (a value passed through). Runs turns while the predicate holds, at most
 * max_turns of them; *done says whether the predicate was found false.
 *
 * state[k] is in and out: on entry the state, on return the state reached, each value either
 * one the caller gave (owned[k] false; the loop neither frees nor keeps it) or one the loop
 * made (owned[k] true: a cx_tensor from malloc, which the caller frees with cx_tensor_free and
 * free, or keeps; two positions may hold the same one). The loop frees the values it made once
 * no position holds them. On failure the state is the last one reached, as on success. */
cx_code cx_program_loop(const cx_program *cond, cx_tensor *const *cond_consts, int cond_pick,
                        const cx_program *body, cx_tensor *const *body_consts, const int *body_pick,
                        int n, cx_tensor **state, bool *owned, int64_t max_turns, bool *done,
                        cx_status *st);
void cx_program_free(cx_program *p);

#endif
