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

int cx_op_tensor_arity(cx_op_id op) {
    return count_tensor_args(cx_op_table[op].args);
}

bool cx_op_takes_complex(cx_op_id op) {
    switch (op) {
    case CX_OP_NEGATE:
    case CX_OP_ABS:
    case CX_OP_SIGN:
    case CX_OP_EXP:
    case CX_OP_EXPM1:
    case CX_OP_LOG:
    case CX_OP_LOG1P:
    case CX_OP_SQRT:
    case CX_OP_RSQRT:
    case CX_OP_SIN:
    case CX_OP_COS:
    case CX_OP_TAN:
    case CX_OP_TANH:
    case CX_OP_SINH:
    case CX_OP_COSH:
    case CX_OP_ASIN:
    case CX_OP_ACOS:
    case CX_OP_ATAN:
    case CX_OP_ASINH:
    case CX_OP_ACOSH:
    case CX_OP_ATANH:
    case CX_OP_SIGMOID:
    case CX_OP_RECIPROCAL:
    case CX_OP_IS_NAN:
    case CX_OP_IS_INFINITY:
    case CX_OP_REAL:
    case CX_OP_IMAG:
    case CX_OP_CONJUGATE:
    case CX_OP_ADD:
    case CX_OP_SUBTRACT:
    case CX_OP_MULTIPLY:
    case CX_OP_DIVIDE:
    case CX_OP_POW:
    case CX_OP_EQUAL:
    case CX_OP_NOT_EQUAL:
    case CX_OP_SELECT:
    case CX_OP_AS_TYPE:
    case CX_OP_SUM:
    case CX_OP_PRODUCT:
    case CX_OP_DOT:
    case CX_OP_FFT:
    case CX_OP_IFFT:
    case CX_OP_FULL:
    case CX_OP_IOTA:
    case CX_OP_EYE: return true;
    default: return cx_op_table[op].kind == CX_KIND_LAYOUT;
    }
}

cx_code cx_infer_op(cx_op_id op, const cx_desc *in, int n_in, cx_params *ps, cx_desc *out,
                    cx_dtype *compute, cx_status *st) {
    if (cx_op_table[op].infer(op, in, n_in, ps, out, compute, st) != CX_OK) return st->code;
    if (cx_op_takes_complex(op)) return CX_OK;
    for (int k = 0; k <= n_in; k++) {
        cx_dtype t = k < n_in ? in[k].dtype : out->dtype;
        if (k < n_in && cx_dtype_is_complex(compute[k])) t = compute[k];
        if (cx_dtype_is_complex(t))
            return cx_fail(st, CX_EINVAL, "%s: not defined for complex numbers, got type %s",
                           cx_op_table[op].name, cx_dtype_name(t));
    }
    return CX_OK;
}

bool cx_op_integer_only(cx_op_id op) {
    return cx_op_table[op].infer == cx_infer_unary_int ||
           cx_op_table[op].infer == cx_infer_binary_int;
}
