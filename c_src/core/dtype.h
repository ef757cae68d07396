/* Element types: names, sizes, and Nx's promotion rules. */
#ifndef CX_DTYPE_H
#define CX_DTYPE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* The order is part of the NIF contract: lib/cascade/type.ex reads the names from here. Types
 * added later go at the end, so that the ids of the first ones never change. */
#define CX_DTYPES(X)                                                                               \
    X(F16, "f16", 'f', 16, uint16_t)                                                               \
    X(BF16, "bf16", 'b', 16, uint16_t)                                                             \
    X(F32, "f32", 'f', 32, float)                                                                  \
    X(F64, "f64", 'f', 64, double)                                                                 \
    X(U8, "u8", 'u', 8, uint8_t)                                                                   \
    X(S32, "s32", 's', 32, int32_t)                                                                \
    X(S64, "s64", 's', 64, int64_t)                                                                \
    X(S8, "s8", 's', 8, int8_t)                                                                    \
    X(S16, "s16", 's', 16, int16_t)                                                                \
    X(U16, "u16", 'u', 16, uint16_t)                                                               \
    X(U32, "u32", 'u', 32, uint32_t)                                                               \
    X(U64, "u64", 'u', 64, uint64_t)                                                               \
    X(C64, "c64", 'c', 64, float _Complex)                                                         \
    X(C128, "c128", 'c', 128, double _Complex)

typedef enum {
#define CX_DTYPE_ENUM(id, name, kind, bits, ctype) CX_##id,
    CX_DTYPES(CX_DTYPE_ENUM)
#undef CX_DTYPE_ENUM
        CX_DTYPE_COUNT,
    CX_DTYPE_INVALID = -1
} cx_dtype;

/* Bytes an element takes (0 for an invalid type); inline: a one-element op asks several times */
static inline size_t cx_dtype_size(cx_dtype t) {
    switch (t) {
#define CX_DTYPE_SIZE(id, name, kind, bits, ctype)                                                 \
    case CX_##id: return (bits) / 8;
        CX_DTYPES(CX_DTYPE_SIZE)
#undef CX_DTYPE_SIZE
    default: return 0;
    }
}
const char *cx_dtype_name(cx_dtype t);
/* Parses "f32", "bf16"...; CX_DTYPE_INVALID when unknown. */
cx_dtype cx_dtype_from_name(const char *name);
bool cx_dtype_valid(int t);
bool cx_dtype_is_float(cx_dtype t);
bool cx_dtype_is_signed(cx_dtype t);
/* c64 (two f32: real, imaginary) and c128 (two f64). Not floats: cx_dtype_is_float is false. */
bool cx_dtype_is_complex(cx_dtype t);
/* Nx.Type.to_real: c64 -> f32, c128 -> f64; floats stay; integers become f32. */
cx_dtype cx_dtype_to_real(cx_dtype t);
/* Nx.Type.to_complex: f64 -> c128, complex types stay, every other type -> c64. */
cx_dtype cx_dtype_to_complex(cx_dtype t);
/* Bits per element. */
int cx_dtype_bits(cx_dtype t);
/* Nx.Type.merge: the type both operands are computed in. A complex type wins over every other
 * and keeps its width (c64 with f64 is c64, as in Nx). */
cx_dtype cx_dtype_merge(cx_dtype a, cx_dtype b);
/* Nx.Type.to_floating: integers become f32, floats and complex types stay. */
cx_dtype cx_dtype_to_float(cx_dtype t);
/* Nx.Type.to_aggregate: sums of signed integers widen to s64, of unsigned ones to u64; floats
 * and complex types stay. */
cx_dtype cx_dtype_to_aggregate(cx_dtype t);

#endif
