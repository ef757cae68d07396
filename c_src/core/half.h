/* f16 and bf16 <-> f32/f64, rounding to nearest even. Inline: drivers convert per element. */
#ifndef CX_HALF_H
#define CX_HALF_H

#include <stdint.h>
#include <string.h>

/* nvcc compiles these for the cuda driver's kernels too, so that the GPU converts as the cpu */
#ifdef __CUDACC__
#define CX_HALF_FN static inline __host__ __device__
#else
#define CX_HALF_FN static inline
#endif

CX_HALF_FN uint32_t cx_f32_bits(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

CX_HALF_FN float cx_f32_from_bits(uint32_t u) {
    float f;
    memcpy(&f, &u, 4);
    return f;
}

CX_HALF_FN float cx_f16_to_f32(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000) << 16;
    uint32_t exp = (h >> 10) & 0x1f;
    uint32_t man = h & 0x3ff;
    if (exp == 0x1f) return cx_f32_from_bits(sign | 0x7f800000u | (man << 13));
    if (exp == 0) {
        /* zero or subnormal: man * 2^-24 is exact in f32 */
        float v = (float)man * 5.9604644775390625e-8f;
        return sign ? -v : v;
    }
    return cx_f32_from_bits(sign | ((exp + 112) << 23) | (man << 13));
}

/* Rounds a double to the nearest f16 (ties to even) in one step, so f64 -> f16 rounds once. */
CX_HALF_FN uint16_t cx_f16_from_f64(double d) {
    uint64_t u;
    memcpy(&u, &d, 8);
    uint16_t sign = (uint16_t)((u >> 48) & 0x8000);
    int64_t exp = (int64_t)((u >> 52) & 0x7ff);
    uint64_t man = u & 0xfffffffffffffull;
    if (exp == 0x7ff) return (uint16_t)(sign | 0x7c00 | (man ? 0x200 : 0));
    int64_t e = exp - 1023 + 15; /* biased f16 exponent */
    if (e >= 0x1f) return (uint16_t)(sign | 0x7c00);
    uint64_t full = man | (exp ? (1ull << 52) : 0); /* 53-bit significand */
    int shift;
    uint16_t base;
    if (e <= 0) {
        /* subnormal in f16: value = full * 2^(exp-1075); f16 subnormal unit is 2^-24 */
        shift = (int)(42 + 1 - e);
        if (exp == 0 || shift > 63) return sign; /* far below the smallest subnormal */
        base = 0;
    } else {
        shift = 42;
        base = (uint16_t)(e << 10);
        full &= (1ull << 52) - 1;
    }
    uint64_t kept = full >> shift;
    uint64_t rest = full & ((1ull << shift) - 1);
    uint64_t half = 1ull << (shift - 1);
    uint32_t r = (uint32_t)(base + kept);
    if (rest > half || (rest == half && (kept & 1))) r++; /* carries into the exponent correctly */
    return (uint16_t)(sign | r);
}

CX_HALF_FN uint16_t cx_f16_from_f32(float f) {
    return cx_f16_from_f64((double)f);
}

CX_HALF_FN float cx_bf16_to_f32(uint16_t b) {
    return cx_f32_from_bits((uint32_t)b << 16);
}

CX_HALF_FN uint16_t cx_bf16_from_f32(float f) {
    uint32_t u = cx_f32_bits(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40); /* quiet NaN */
    u += 0x7fffu + ((u >> 16) & 1);
    return (uint16_t)(u >> 16);
}

/* f64 -> bf16 must not round twice: round to odd into f32 first (exact for the second rounding,
 * since f32 carries more than bf16's 8 bits + 2), then round to nearest even into bf16. */
CX_HALF_FN uint16_t cx_bf16_from_f64(double d) {
    float f = (float)d;
    if (f == f && (double)f != d) {
        uint32_t u = cx_f32_bits(f);
        double back = (double)f;
        if ((back > d && d > 0) || (back < d && d < 0)) u -= 1; /* truncate toward zero */
        u |= 1;
        f = cx_f32_from_bits(u);
    }
    return cx_bf16_from_f32(f);
}

#endif
