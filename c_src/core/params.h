/* Op parameters as one flat record, indexed by the ids of params.def. */
#ifndef CX_PARAMS_H
#define CX_PARAMS_H

#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "dtype.h"

#define CX_MAX_RANK       16
#define CX_MAX_PARAM_INTS (3 * CX_MAX_RANK) /* pads: {lo, hi, interior} per axis */

typedef enum { CX_PK_INTS, CX_PK_INT, CX_PK_BOOL, CX_PK_NUMBER, CX_PK_TYPE } cx_param_kind;

typedef enum {
#define CX_PARAM(id, name, kind) CX_P_##id,
#include "params.def"
#undef CX_PARAM
    CX_PARAM_COUNT
} cx_param_id;

/* One parameter. Only the fields of its kind are meaningful; INT, BOOL and TYPE use i[0]. */
typedef struct {
    int32_t n;   /* INTS: how many */
    bool is_int; /* NUMBER: given as an integer (exact in i[0]) */
    double f;    /* NUMBER: the value as a double */
    int64_t i[CX_MAX_PARAM_INTS];
} cx_param;

/* `set` has bit `id` on when the parameter was given; the slots of unset ones are garbage,
 * so a fresh record needs only `set = 0` (it is built on the stack on every call). */
typedef struct {
    uint64_t set;
    cx_param p[CX_PARAM_COUNT];
} cx_params;

/* The values of dense's `activation:` option, in the order ops.def lists them. */
typedef enum {
    CX_ACTIVATION_NONE,
    CX_ACTIVATION_RELU,
    CX_ACTIVATION_SIGMOID,
    CX_ACTIVATION_TANH,
    CX_ACTIVATION_SILU,
    CX_ACTIVATION_GELU,
    CX_ACTIVATION_GELU_TANH,
    CX_ACTIVATION_COUNT
} cx_activation;

/* The values of recurrent's `cell:` option, in the order ops.def lists them. */
typedef enum { CX_CELL_LSTM, CX_CELL_GRU, CX_CELL_TANH, CX_CELL_COUNT } cx_cell;

typedef struct {
    const char *name;
    cx_param_kind kind;
} cx_param_info;

extern const cx_param_info cx_param_table[CX_PARAM_COUNT];

static inline bool cx_param_has(const cx_params *ps, cx_param_id id) {
    return (ps->set >> id) & 1u;
}
static inline const cx_param *cx_param_get(const cx_params *ps, cx_param_id id) {
    return cx_param_has(ps, id) ? &ps->p[id] : 0;
}
/* Marks a parameter set and returns its slot to fill. */
static inline cx_param *cx_param_put(cx_params *ps, cx_param_id id) {
    ps->set |= UINT64_C(1) << id;
    return &ps->p[id];
}
/* How many of i[] an INTS parameter holds (its n, kept within the record's room). */
static inline int cx_param_ints(const cx_param *p) {
    return p->n < 0 ? 0 : p->n > CX_MAX_PARAM_INTS ? CX_MAX_PARAM_INTS : p->n;
}
/* A NUMBER parameter as a double (an integer one exact where a double holds it). */
static inline double cx_param_f64(const cx_param *p) {
    return p->is_int ? (double)p->i[0] : p->f;
}
/* An empty record. Only `set` is cleared: a record is some 9 KB, and zeroing or copying whole ones
 * took a fifth of a small decomposed op (a 10 x 10 mean, perf). Code reads a slot only when its bit
 * is set or after an infer function filled it (the NIF layer never cleared them either). Built
 * with CX_PARAMS_POISON (the sanitizer builds do), the slots are filled with a pattern, so that a
 * read of an unset parameter shows in the tests. */
static inline void cx_params_clear(cx_params *ps) {
#ifdef CX_PARAMS_POISON
    memset(ps, 0xA5, sizeof *ps);
#endif
    ps->set = 0;
}
/* Copies the parameters set in src (only those: see cx_params_clear). */
void cx_params_copy(cx_params *dst, const cx_params *src);
void cx_param_put_ints(cx_params *ps, cx_param_id id, const int64_t *v, int n);
void cx_param_put_int(cx_params *ps, cx_param_id id, int64_t v);
void cx_param_put_float(cx_params *ps, cx_param_id id, double v);
/* Returns the param id for a name, or -1. */
int cx_param_find(const char *name);

#endif
