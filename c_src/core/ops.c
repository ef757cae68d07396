#include "ops.h"

#include "decompose.h"

#include <pthread.h>

#include <string.h>

/* Counts the `:tensor`/`:indices`/`:pred` arguments of an "arguments" spec; -1 when one is a list.
 */
static int count_tensor_args(const char *args) {
    int n = 0;
    for (const char *p = args; (p = strchr(p, ':')) != NULL; p++) {
        if (strncmp(p, ":tensors", 8) == 0) return -1;
        if (strncmp(p, ":tensor", 7) == 0 || strncmp(p, ":indices", 8) == 0 ||
            strncmp(p, ":pred", 5) == 0)
            n++;
    }
    return n;
}

const cx_op_info cx_op_table[CX_OP_COUNT] = {
#define CX_OP(id, name, kind, args, opts, infer, doc, ex, res)                                     \
    {name, CX_KIND_##kind, args, opts, infer, NULL, NULL},
#define CX_COMPOSITE(id, name, args, opts, infer, decompose, sample, doc, ex, res)                 \
    {name, CX_KIND_COMPOSITE, args, opts, infer, decompose, sample},
#include "ops.def"
#undef CX_OP
#undef CX_COMPOSITE
};

const char cx_ops_signature[] =
#include "ops_signature.inc"
    ;

int cx_op_find(const char *name) {
    for (int k = 0; k < CX_OP_COUNT; k++)
        if (strcmp(cx_op_table[k].name, name) == 0) return k;
    return -1;
}

int64_t cx_desc_numel(const cx_desc *d) {
    int64_t n = 1;
    for (int k = 0; k < d->rank; k++) n *= d->shape[k];
    return n;
}

bool cx_desc_same_shape(const cx_desc *a, const cx_desc *b) {
    return a->rank == b->rank && !memcmp(a->shape, b->shape, sizeof(int64_t) * (size_t)a->rank);
}

int cx_op_tensor_arity(cx_op_id op) {
    return count_tensor_args(cx_op_table[op].args);
}

bool cx_op_integer_only(cx_op_id op) {
    return cx_op_table[op].infer == cx_infer_unary_int ||
           cx_op_table[op].infer == cx_infer_binary_int;
}
