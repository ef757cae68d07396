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
    X(U64, "u64", 'u', 64, uint64_t)

typedef enum {
#define CX_DTYPE_ENUM(id, name, kind, bits, ctype) CX_##id,
    CX_DTYPES(CX_DTYPE_ENUM)
#undef CX_DTYPE_ENUM
        CX_DTYPE_COUNT,
    CX_DTYPE_INVALID = -1
} cx_dtype;

size_t cx_dtype_size(cx_dtype t);
const char *cx_dtype_name(cx_dtype t);
/* Parses "f32", "bf16"...; CX_DTYPE_INVALID when unknown. */
cx_dtype cx_dtype_from_name(const char *name);
bool cx_dtype_valid(int t);
bool cx_dtype_is_float(cx_dtype t);
bool cx_dtype_is_signed(cx_dtype t);
/* Bits per element. */
int cx_dtype_bits(cx_dtype t);
/* Nx.Type.merge: the type both operands are computed in. */
cx_dtype cx_dtype_merge(cx_dtype a, cx_dtype b);
/* Nx.Type.to_floating: integers become f32, floats stay. */
cx_dtype cx_dtype_to_float(cx_dtype t);
/* Nx.Type.to_aggregate: sums of signed integers widen to s64, of unsigned ones to u64. */
cx_dtype cx_dtype_to_aggregate(cx_dtype t);

#endif
