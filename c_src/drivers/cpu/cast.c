/* as_type: every type into every other, without undefined behaviour. Floats into integers
 * truncate toward zero and saturate, NaN giving 0; integers into narrower integers wrap like Nx;
 * every conversion into f16 or bf16 rounds once, to nearest even. */
#include <string.h>

#include "../../core/half_array.h"
#include "cpu_kernels.h"

/* C leaves out-of-range float -> integer conversions undefined, so the range is checked first;
 * NaN fails every comparison and lands on 0. */
static inline uint8_t sat_u8(double d) {
    return d > 0 ? (d < 255 ? (uint8_t)d : UINT8_MAX) : 0;
}

static inline uint16_t sat_u16(double d) {
    return d > 0 ? (d < 65535 ? (uint16_t)d : UINT16_MAX) : 0;
}

static inline uint32_t sat_u32(double d) {
    return d > 0 ? (d < 4294967295.0 ? (uint32_t)d : UINT32_MAX) : 0;
}

static inline uint64_t sat_u64(double d) {
    return d > 0 ? (d < 18446744073709551616.0 ? (uint64_t)d : UINT64_MAX) : 0;
}

static inline int8_t sat_s8(double d) {
    if (d != d) return 0;
    return d <= -128 ? INT8_MIN : d >= 127 ? INT8_MAX : (int8_t)d;
}

static inline int16_t sat_s16(double d) {
    if (d != d) return 0;
    return d <= -32768 ? INT16_MIN : d >= 32767 ? INT16_MAX : (int16_t)d;
}

static inline int32_t sat_s32(double d) {
    if (d != d) return 0;
    if (d <= -2147483648.0) return INT32_MIN;
    if (d >= 2147483647.0) return INT32_MAX;
    return (int32_t)d;
}

static inline int64_t sat_s64(double d) {
    if (d != d) return 0;
    if (d <= -9223372036854775808.0) return INT64_MIN;
    if (d >= 9223372036854775808.0) return INT64_MAX;
    return (int64_t)d;
}

/* An s64 beyond 2^53 would round once into double and again into f16/bf16, which can land on
 * the wrong side of a tie. Rounding to odd at 53 bits keeps the information the second rounding
 * needs (a sticky bit), so the result is rounded once. Smaller integers are exact in double. */
static inline double int_to_f64_odd(int64_t x) {
    uint64_t u = x < 0 ? 0 - (uint64_t)x : (uint64_t)x;
    if (u < (UINT64_C(1) << 53)) return (double)x;
    int sh = 0;
    while ((u >> sh) >= (UINT64_C(1) << 53)) sh++;
    uint64_t kept = (u >> sh) | ((u & ((UINT64_C(1) << sh) - 1)) != 0);
    double mag = (double)kept * (double)(UINT64_C(1) << sh);
    return x < 0 ? -mag : mag;
}

static inline double uint_to_f64_odd(uint64_t u) {
    if (u < (UINT64_C(1) << 53)) return (double)u;
    int sh = 0;
    while ((u >> sh) >= (UINT64_C(1) << 53)) sh++;
    uint64_t kept = (u >> sh) | ((u & ((UINT64_C(1) << sh) - 1)) != 0);
    return (double)kept * (double)(UINT64_C(1) << sh);
}

/* Sources: name, storage type, and the kind of value one element is read as: F (a float;
 * f16/bf16 widen exactly), D (a double), I (an integer that fits int64_t) or U (a u64). */
#define CAST_SOURCES(X)                                                                            \
    X(F16, uint16_t, F)                                                                            \
    X(BF16, uint16_t, F)                                                                           \
    X(F32, float, F)                                                                               \
    X(F64, double, D)                                                                              \
    X(U8, uint8_t, I)                                                                              \
    X(S32, int32_t, I)                                                                             \
    X(S64, int64_t, I)                                                                             \
    X(S8, int8_t, I)                                                                               \
    X(S16, int16_t, I)                                                                             \
    X(U16, uint16_t, I)                                                                            \
    X(U32, uint32_t, I)                                                                            \
    X(U64, uint64_t, U)

#define CAST_DESTS(X, ...)                                                                         \
    X(F16, uint16_t, __VA_ARGS__)                                                                  \
    X(BF16, uint16_t, __VA_ARGS__)                                                                 \
    X(F32, float, __VA_ARGS__)                                                                     \
    X(F64, double, __VA_ARGS__)                                                                    \
    X(U8, uint8_t, __VA_ARGS__)                                                                    \
    X(S32, int32_t, __VA_ARGS__)                                                                   \
    X(S64, int64_t, __VA_ARGS__)                                                                   \
    X(S8, int8_t, __VA_ARGS__)                                                                     \
    X(S16, int16_t, __VA_ARGS__)                                                                   \
    X(U16, uint16_t, __VA_ARGS__)                                                                  \
    X(U32, uint32_t, __VA_ARGS__)                                                                  \
    X(U64, uint64_t, __VA_ARGS__)

#define LOAD_F16(x)  cx_f16_to_f32(x)
#define LOAD_BF16(x) cx_bf16_to_f32(x)
#define LOAD_F32(x)  (x)
#define LOAD_F64(x)  (x)
#define LOAD_U8(x)   (x)
#define LOAD_S32(x)  (x)
#define LOAD_S64(x)  (x)
#define LOAD_S8(x)   (x)
#define LOAD_S16(x)  (x)
#define LOAD_U16(x)  (x)
#define LOAD_U32(x)  (x)
#define LOAD_U64(x)  (x)

/* STORE_<destination>_<source kind>. Integer narrowing goes through the unsigned type, which C
 * defines modulo 2^n. */
#define STORE_F16_F(x)  cx_f16_from_f32(x)
#define STORE_F16_D(x)  cx_f16_from_f64(x)
#define STORE_F16_I(x)  cx_f16_from_f64(int_to_f64_odd(x))
#define STORE_BF16_F(x) cx_bf16_from_f32(x)
#define STORE_BF16_D(x) cx_bf16_from_f64(x)
#define STORE_BF16_I(x) cx_bf16_from_f64(int_to_f64_odd(x))
#define STORE_F32_F(x)  (x)
#define STORE_F32_D(x)  ((float)(x))
#define STORE_F32_I(x)  ((float)(x))
#define STORE_F64_F(x)  ((double)(x))
#define STORE_F64_D(x)  (x)
#define STORE_F64_I(x)  ((double)(x))
#define STORE_U8_F(x)   sat_u8(x)
#define STORE_U8_D(x)   sat_u8(x)
#define STORE_U8_I(x)   ((uint8_t)(x))
#define STORE_S32_F(x)  sat_s32(x)
#define STORE_S32_D(x)  sat_s32(x)
#define STORE_S32_I(x)  ((int32_t)(uint32_t)(x))
#define STORE_S64_F(x)  sat_s64(x)
#define STORE_S64_D(x)  sat_s64(x)
#define STORE_S64_I(x)  ((int64_t)(x))
#define STORE_S8_F(x)   sat_s8(x)
#define STORE_S8_D(x)   sat_s8(x)
#define STORE_S8_I(x)   ((int8_t)(uint8_t)(x))
#define STORE_S16_F(x)  sat_s16(x)
#define STORE_S16_D(x)  sat_s16(x)
#define STORE_S16_I(x)  ((int16_t)(uint16_t)(x))
#define STORE_U16_F(x)  sat_u16(x)
#define STORE_U16_D(x)  sat_u16(x)
#define STORE_U16_I(x)  ((uint16_t)(x))
#define STORE_U32_F(x)  sat_u32(x)
#define STORE_U32_D(x)  sat_u32(x)
#define STORE_U32_I(x)  ((uint32_t)(x))
#define STORE_U64_F(x)  sat_u64(x)
#define STORE_U64_D(x)  sat_u64(x)
#define STORE_U64_I(x)  ((uint64_t)(x))
/* From u64: the integer stores wrap as from any integer; floats from the unsigned value. */
#define STORE_F16_U(x)  cx_f16_from_f64(uint_to_f64_odd(x))
#define STORE_BF16_U(x) cx_bf16_from_f64(uint_to_f64_odd(x))
#define STORE_F32_U(x)  ((float)(x))
#define STORE_F64_U(x)  ((double)(x))
#define STORE_U8_U(x)   STORE_U8_I(x)
#define STORE_S32_U(x)  STORE_S32_I(x)
#define STORE_S64_U(x)  STORE_S64_I(x)
#define STORE_S8_U(x)   STORE_S8_I(x)
#define STORE_S16_U(x)  STORE_S16_I(x)
#define STORE_U16_U(x)  STORE_U16_I(x)
#define STORE_U32_U(x)  STORE_U32_I(x)
#define STORE_U64_U(x)  STORE_U64_I(x)

typedef void (*cast_fn)(const void *src, void *dst, int64_t n);

#define DEF_CAST(D, DT, S, ST, SK)                                                                 \
    static void cast_##S##_##D(const void *src, void *dst, int64_t n) {                            \
        const ST *a = src;                                                                         \
        DT *o = dst;                                                                               \
        for (int64_t i = 0; i < n; i++) o[i] = STORE_##D##_##SK(LOAD_##S(a[i]));                   \
    }
#define DEF_CASTS_FROM(S, ST, SK) CAST_DESTS(DEF_CAST, S, ST, SK)
CAST_SOURCES(DEF_CASTS_FROM)

#define CAST_ENTRY(D, DT, S, ST, SK) [CX_##S][CX_##D] = cast_##S##_##D,
#define CAST_ROW(S, ST, SK)          CAST_DESTS(CAST_ENTRY, S, ST, SK)
static const cast_fn casts[CX_DTYPE_COUNT][CX_DTYPE_COUNT] = {CAST_SOURCES(CAST_ROW)};

/* Casts into or out of a complex type, in chunks through doubles. Into complex: the value as
 * the real part (as f64 first, then rounded once for c64), the imaginary part 0. Out of
 * complex: the real part, converted as an f64 would be (Nx.BinaryBackend drops the imaginary
 * part). Between c64 and c128: each part. */
#define CCHUNK 512
static void complex_cast(cx_dtype from, cx_dtype to, const void *src, void *dst, int64_t n) {
    double re[CCHUNK], im[CCHUNK];
    size_t fs = cx_dtype_size(from), ts = cx_dtype_size(to);
    for (int64_t i = 0; i < n; i += CCHUNK) {
        int64_t m = n - i < CCHUNK ? n - i : CCHUNK;
        const char *a = (const char *)src + (size_t)i * fs;
        char *o = (char *)dst + (size_t)i * ts;
        if (from == CX_C64) {
            const float *c = (const float *)a;
            for (int64_t k = 0; k < m; k++) re[k] = c[2 * k], im[k] = c[2 * k + 1];
        } else if (from == CX_C128) {
            const double *c = (const double *)a;
            for (int64_t k = 0; k < m; k++) re[k] = c[2 * k], im[k] = c[2 * k + 1];
        } else {
            if (from == CX_F64)
                memcpy(re, a, (size_t)m * sizeof(double));
            else
                casts[from][CX_F64](a, re, m);
            memset(im, 0, (size_t)m * sizeof(double));
        }
        if (to == CX_C64) {
            float *c = (float *)o;
            for (int64_t k = 0; k < m; k++) c[2 * k] = (float)re[k], c[2 * k + 1] = (float)im[k];
        } else if (to == CX_C128) {
            double *c = (double *)o;
            for (int64_t k = 0; k < m; k++) c[2 * k] = re[k], c[2 * k + 1] = im[k];
        } else if (to == CX_F64) {
            memcpy(o, re, (size_t)m * sizeof(double));
        } else {
            casts[CX_F64][to](re, o, m);
        }
    }
}

cx_code cpu_cast(const cx_tensor *in, cx_tensor *out, cx_status *st) {
    cx_dtype from = in->desc.dtype, to = out->desc.dtype;
    if (!cx_dtype_valid(from) || !cx_dtype_valid(to))
        return cx_fail(st, CX_EINVAL, "cpu: as_type got type codes %d and %d", (int)from, (int)to);
    if (in->numel != out->numel)
        return cx_fail(st, CX_EINVAL, "cpu: as_type expected %lld elements out, got: %lld",
                       (long long)in->numel, (long long)out->numel);
    cpu_cast_array(from, to, in->data, out->data, out->numel);
    return CX_OK;
}

void cpu_cast_array(cx_dtype from, cx_dtype to, const void *src, void *dst, int64_t n) {
    if (n == 0) return;
    if (from == to)
        memcpy(dst, src, (size_t)n * cx_dtype_size(from));
    else if (cx_dtype_is_complex(from) || cx_dtype_is_complex(to))
        complex_cast(from, to, src, dst, n);
    else if (from == CX_F16 && to == CX_F32) /* the common pair, done 8 at a time where F16C is */
        cx_f16_to_f32_array(src, dst, n);
    else if (from == CX_F32 && to == CX_F16)
        cx_f32_to_f16_array(src, dst, n);
    else
        casts[from][to](src, dst, n);
}
