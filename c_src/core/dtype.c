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

bool cx_dtype_is_complex(cx_dtype t) {
    return cx_dtype_valid(t) && dtype_info[t].kind == 'c';
}

cx_dtype cx_dtype_to_real(cx_dtype t) {
    if (t == CX_C64) return CX_F32;
    if (t == CX_C128) return CX_F64;
    return cx_dtype_to_float(t);
}

cx_dtype cx_dtype_to_complex(cx_dtype t) {
    if (cx_dtype_is_complex(t)) return t;
    return t == CX_F64 ? CX_C128 : CX_C64;
}

int cx_dtype_bits(cx_dtype t) {
    return cx_dtype_valid(t) ? dtype_info[t].bits : 0;
}

static cx_dtype int_type(bool is_signed, int bits) {
    switch (bits) {
    case 8: return is_signed ? CX_S8 : CX_U8;
    case 16: return is_signed ? CX_S16 : CX_U16;
    case 32: return is_signed ? CX_S32 : CX_U32;
    default: return is_signed ? CX_S64 : CX_U64;
    }
}

cx_dtype cx_dtype_merge(cx_dtype a, cx_dtype b) {
    if (a == b) return a;
    bool ca = cx_dtype_is_complex(a), cb = cx_dtype_is_complex(b);
    if (ca && cb) return a == CX_C128 || b == CX_C128 ? CX_C128 : CX_C64;
    if (ca) return a;
    if (cb) return b;
    bool fa = cx_dtype_is_float(a), fb = cx_dtype_is_float(b);
    if (fa && fb) {
        /* f16 with bf16 has no common 16-bit type: Nx widens to f32. */
        int bits =
            dtype_info[a].bits > dtype_info[b].bits ? dtype_info[a].bits : dtype_info[b].bits;
        return bits <= 32 ? CX_F32 : CX_F64;
    }
    if (fa) return a;
    if (fb) return b;
    /* Integers, as Nx.Type.merge: the wider of one signedness; unsigned with signed gives a
     * signed type twice as wide as the unsigned one (at most 64 bits), or the signed one's width
     * when that is wider. */
    bool sa = dtype_info[a].kind == 's', sb = dtype_info[b].kind == 's';
    int ba = dtype_info[a].bits, bb = dtype_info[b].bits;
    int bits;
    if (sa == sb)
        bits = ba > bb ? ba : bb;
    else {
        int ub = sa ? bb : ba, sbits = sa ? ba : bb;
        ub = ub * 2 > 64 ? 64 : ub * 2;
        bits = ub > sbits ? ub : sbits;
        sa = true;
    }
    return int_type(sa, bits);
}

cx_dtype cx_dtype_to_float(cx_dtype t) {
    return cx_dtype_is_float(t) || cx_dtype_is_complex(t) ? t : CX_F32;
}

cx_dtype cx_dtype_to_aggregate(cx_dtype t) {
    if (cx_dtype_is_float(t) || cx_dtype_is_complex(t)) return t;
    return cx_dtype_is_signed(t) ? CX_S64 : CX_U64;
}
