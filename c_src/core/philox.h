/* Counter-based random numbers: Philox-4x32-10 (Salmon et al., SC'11). Element i of a tensor
 * depends only on the key and i, so every device and every chunking gives the same numbers.
 * The element mapping below is the definition other drivers must follow, together with the
 * scaling in c_src/drivers/cpu/create.c (one fused multiply-add in double, rounded once).
 *
 * Uniform numbers are exact functions of the Philox words, so every device can give them bit
 * for bit. Normal numbers go through log, sqrt and sin/cos, which libm and device math
 * libraries do not all round alike: across devices they agree to a few ulp, not bit for bit,
 * and the differential tests of other drivers must compare them with a tolerance. */
#ifndef CX_PHILOX_H
#define CX_PHILOX_H

#include <math.h>
#include <stdint.h>

typedef struct {
    uint32_t v[4];
} cx_philox_block;

static inline cx_philox_block cx_philox(uint64_t key, uint64_t counter) {
    uint32_t c0 = (uint32_t)counter, c1 = (uint32_t)(counter >> 32), c2 = 0, c3 = 0;
    uint32_t k0 = (uint32_t)key, k1 = (uint32_t)(key >> 32);
    for (int r = 0; r < 10; r++) {
        uint64_t p0 = (uint64_t)0xD2511F53u * c0, p1 = (uint64_t)0xCD9E8D57u * c2;
        uint32_t n0 = (uint32_t)(p1 >> 32) ^ c1 ^ k0, n2 = (uint32_t)(p0 >> 32) ^ c3 ^ k1;
        c1 = (uint32_t)p1;
        c3 = (uint32_t)p0;
        c0 = n0;
        c2 = n2;
        k0 += 0x9E3779B9u;
        k1 += 0xBB67AE85u;
    }
    return (cx_philox_block){{c0, c1, c2, c3}};
}

/* Uniform in [0, 1): 24 random bits for element i of an f32/f16/bf16 tensor (word i % 4 of
 * block i / 4), 53 bits for an f64 tensor (words 2(i % 2), 2(i % 2) + 1 of block i / 2). */
static inline float cx_uniform01_f32(uint64_t key, uint64_t i) {
    uint32_t w = cx_philox(key, i / 4).v[i % 4];
    return (float)(w >> 8) * 0x1.0p-24f;
}

static inline double cx_uniform01_f64(uint64_t key, uint64_t i) {
    cx_philox_block b = cx_philox(key, i / 2);
    uint32_t hi = b.v[2 * (i % 2)], lo = b.v[2 * (i % 2) + 1];
    return (double)(((uint64_t)hi << 21) | (lo >> 11)) * 0x1.0p-53;
}

/* Standard normal by Box-Muller. f32/f16/bf16: block i / 4, words (2p, 2p + 1) with
 * p = (i % 4) / 2 give u1 in (0, 1] and u2 in [0, 1); even i takes r cos(2 pi u2), odd r sin. */
static inline float cx_normal_f32(uint64_t key, uint64_t i) {
    cx_philox_block b = cx_philox(key, i / 4);
    unsigned p = (unsigned)(i % 4) / 2;
    float u1 = (float)((b.v[2 * p] >> 8) + 1) * 0x1.0p-24f;
    float u2 = (float)(b.v[2 * p + 1] >> 8) * 0x1.0p-24f;
    float r = sqrtf(-2.0f * logf(u1));
    float a = 6.283185307179586f * u2;
    return (i % 2) ? r * sinf(a) : r * cosf(a);
}

/* f64: block i / 2; u1 from words 0, 1 and u2 from words 2, 3 (53 bits each). */
static inline double cx_normal_f64(uint64_t key, uint64_t i) {
    cx_philox_block b = cx_philox(key, i / 2);
    double u1 = (double)((((uint64_t)b.v[0] << 21) | (b.v[1] >> 11)) + 1) * 0x1.0p-53;
    double u2 = (double)(((uint64_t)b.v[2] << 21) | (b.v[3] >> 11)) * 0x1.0p-53;
    double r = sqrt(-2.0 * log(u1));
    double a = 6.283185307179586 * u2;
    return (i % 2) ? r * sin(a) : r * cos(a);
}

#endif
