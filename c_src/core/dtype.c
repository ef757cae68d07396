#include "dtype.h"

#include <string.h>

static const struct {
    const char *name;
    char kind;
    int bits;
} dtype_info[CX_DTYPE_COUNT] = {
#define CX_DTYPE_INFO(id, name, kind, bits, ctype) {name, kind, bits},
    CX_DTYPES(CX_DTYPE_INFO)
#undef CX_DTYPE_INFO
};

bool cx_dtype_valid(int t) {
    return t >= 0 && t < CX_DTYPE_COUNT;
}

size_t cx_dtype_size(cx_dtype t) {
    return cx_dtype_valid(t) ? (size_t)dtype_info[t].bits / 8 : 0;
}

const char *cx_dtype_name(cx_dtype t) {
    return cx_dtype_valid(t) ? dtype_info[t].name : "invalid";
}

cx_dtype cx_dtype_from_name(const char *name) {
    for (int t = 0; t < CX_DTYPE_COUNT; t++)
        if (strcmp(dtype_info[t].name, name) == 0) return (cx_dtype)t;
    return CX_DTYPE_INVALID;
}

bool cx_dtype_is_float(cx_dtype t) {
    return cx_dtype_valid(t) && (dtype_info[t].kind == 'f' || dtype_info[t].kind == 'b');
}

bool cx_dtype_is_signed(cx_dtype t) {
    return cx_dtype_valid(t) && dtype_info[t].kind == 's';
}

cx_dtype cx_dtype_merge(cx_dtype a, cx_dtype b) {
    if (a == b) return a;
    bool fa = cx_dtype_is_float(a), fb = cx_dtype_is_float(b);
    if (fa && fb) {
        /* f16 with bf16 has no common 16-bit type: Nx widens to f32. */
        int bits =
            dtype_info[a].bits > dtype_info[b].bits ? dtype_info[a].bits : dtype_info[b].bits;
        return bits <= 32 ? CX_F32 : CX_F64;
    }
    if (fa) return a;
    if (fb) return b;
    /* Integers: u8 fits in either signed type, so the wider signed type wins. */
    if (a == CX_S64 || b == CX_S64) return CX_S64;
    return CX_S32;
}

cx_dtype cx_dtype_to_float(cx_dtype t) {
    return cx_dtype_is_float(t) ? t : CX_F32;
}

cx_dtype cx_dtype_to_aggregate(cx_dtype t) {
    return cx_dtype_is_float(t) ? t : CX_S64;
}
