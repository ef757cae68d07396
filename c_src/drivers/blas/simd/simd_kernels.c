/* The vector kernels of blas_simd.h for one instruction set, chosen by the flags this file is
 * compiled with (driver.mk builds it twice: -mavx2 -mfma -mf16c as simd_avx2, and with the
 * AVX-512 foundation, DQ, BW and VL sets as simd_avx512). SIMD_TABLE names the table it defines.
 *
 * Plain loops (add, multiply, max ...) are written for the compiler to vectorise at the width of
 * the flags; transcendental functions call SLEEF's vector functions of that width, or our own
 * where SLEEF's were slower, on full vectors, and on a zero-padded copy of the last
 * partial one. Error bounds, in ulp of the result type (f32 and f64; f16/bf16 compute in f32 and
 * round once more; f16 exp on AVX-512 is its own, at 1.1e-6 relative before that rounding:
 * exp_f16_vf below, and so is f16/bf16 tanh, 2.8e-8: tanh_half_vf): f64 exp, expm1, log, log1p,
 * sin, cos, pow, atan2, erf 1.0 (SLEEF's u10 functions), and the same f32 functions but exp,
 * erf and tanh; f32 exp 0.91 (ours: exp_vf); f32 erf 1.07 (ours: erf_vf); f32 tanh 2.5 (ours:
 * tanh_vf); f64 tanh 3.5 (u35: faster than u10 here, and inside the 4 ulp the
 * differential suite allows any library); sigmoid from one exp and one division, 2.4 (every f32);
 * sqrt, rsqrt (1 / sqrt), reciprocal, add, subtract, multiply, divide correctly rounded; gelu and
 * silu as their decompositions' tolerance allows (below). */
#include <immintrin.h>
#include <math.h>
#include <sleef.h>
#include <string.h>

#include "../blas_simd.h"

#ifndef SIMD_TABLE
#error "compile with -DSIMD_TABLE=<table name> and the instruction set's flags (driver.mk)"
#endif

#if defined(__AVX512F__) && defined(__AVX512DQ__)
#define VW 16 /* floats per vector */
#define DW 8  /* doubles per vector */
typedef __m512 vf;
typedef __m512d vd;
#define SLF(fn)     Sleef_##fn##f16_u10avx512f
#define SLD(fn)     Sleef_##fn##d8_u10avx512f
#define SLF35(fn)   Sleef_##fn##f16_u35avx512f
#define SLD35(fn)   Sleef_##fn##d8_u35avx512f
#define vf_load     _mm512_loadu_ps
#define vf_store    _mm512_storeu_ps
#define vf_set      _mm512_set1_ps
#define vf_add      _mm512_add_ps
#define vf_sub      _mm512_sub_ps
#define vf_mul      _mm512_mul_ps
#define vf_div      _mm512_div_ps
#define vf_sqrt     _mm512_sqrt_ps
#define vd_load     _mm512_loadu_pd
#define vd_store    _mm512_storeu_pd
#define vd_set      _mm512_set1_pd
#define vd_add      _mm512_add_pd
#define vd_sub      _mm512_sub_pd
#define vd_mul      _mm512_mul_pd
#define vd_div      _mm512_div_pd
#define vd_sqrt     _mm512_sqrt_pd
#define vd_from_f32 _mm512_cvtps_pd /* DW floats, as a half-width float vector, to doubles */
typedef __m256 vf_half;
#define vf_half_load _mm256_loadu_ps
/* x >= 0 ? p : q, per lane */
static inline vf vf_pick_nonneg(vf x, vf p, vf q) {
    return _mm512_mask_blend_ps(_mm512_cmp_ps_mask(x, _mm512_setzero_ps(), _CMP_GE_OQ), q, p);
}
static inline vd vd_pick_nonneg(vd x, vd p, vd q) {
    return _mm512_mask_blend_pd(_mm512_cmp_pd_mask(x, _mm512_setzero_pd(), _CMP_GE_OQ), q, p);
}
static inline vf vf_abs(vf x) {
    return _mm512_abs_ps(x);
}
static inline vd vd_abs(vd x) {
    return _mm512_abs_pd(x);
}
static inline vf vf_neg(vf x) {
    return _mm512_castsi512_ps(
        _mm512_xor_si512(_mm512_castps_si512(x), _mm512_set1_epi32((int)0x80000000u)));
}
static inline vd vd_neg(vd x) {
    return _mm512_castsi512_pd(_mm512_xor_si512(
        _mm512_castpd_si512(x), _mm512_set1_epi64((long long)0x8000000000000000ull)));
}
static inline vf vf_neg_abs(vf x) { /* -|x| */
    return _mm512_castsi512_ps(
        _mm512_or_si512(_mm512_castps_si512(x), _mm512_set1_epi32((int)0x80000000u)));
}
/* t = n + 1.5 * 2^23 + 127 (n integral, -126 <= n <= 127) as bits, shifted: 2^n */
static inline vf vf_pow2_of_magic(vf t) {
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_castps_si512(t), 23));
}
static inline double vd_reduce_add(vd x) {
    return _mm512_reduce_add_pd(x);
}
static inline double vf_reduce_add_d(vf x) { /* in double */
    return _mm512_reduce_add_pd(_mm512_cvtps_pd(_mm512_castps512_ps256(x))) +
           _mm512_reduce_add_pd(_mm512_cvtps_pd(_mm512_extractf32x8_ps(x, 1)));
}
#define vf_max  _mm512_max_ps
#define vf_min  _mm512_min_ps
#define vf_fma  _mm512_fmadd_ps  /* a * b + c, rounded once */
#define vf_fnma _mm512_fnmadd_ps /* c - a * b, rounded once */
/* p * 2^n rounded once (to a subnormal, 0 or infinity as it falls), n integral in [-252, 254] */
static inline vf vf_scale2_any(vf p, vf n) {
    return _mm512_scalef_ps(p, n);
}
/* x > c ? p : q, per lane (false for NaN) */
static inline vf vf_pick_gt(vf x, vf c, vf p, vf q) {
    return _mm512_mask_blend_ps(_mm512_cmp_ps_mask(x, c, _CMP_GT_OQ), q, p);
}
/* |r| with the sign of x */
static inline vf vf_copysign(vf r, vf x) {
    __m512i m = _mm512_set1_epi32((int)0x80000000u);
    return _mm512_castsi512_ps(
        _mm512_ternarylogic_epi32(m, _mm512_castps_si512(r), _mm512_castps_si512(x), 0xAC));
}
static inline int vf_nan_mask(vf x) {
    return _mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q) != 0;
}
static inline float vf_reduce_max(vf x) {
    return _mm512_reduce_max_ps(x);
}
/* x rounded to an integer in mode m (_MM_FROUND_TO_NEG_INF, _POS_INF, _ZERO), exactly */
#define vf_round_mode(x, m) _mm512_roundscale_ps(x, (m) | _MM_FROUND_NO_EXC)
#define vd_round_mode(x, m) _mm512_roundscale_pd(x, (m) | _MM_FROUND_NO_EXC)
/* x > c ? p : q, per lane (false for NaN) */
static inline vd vd_pick_gt(vd x, vd c, vd p, vd q) {
    return _mm512_mask_blend_pd(_mm512_cmp_pd_mask(x, c, _CMP_GT_OQ), q, p);
}
static inline vd vd_copysign(vd r, vd x) {
    __m512i m = _mm512_set1_epi64((long long)0x8000000000000000ull);
    return _mm512_castsi512_pd(
        _mm512_ternarylogic_epi64(m, _mm512_castpd_si512(r), _mm512_castpd_si512(x), 0xAC));
}
/* DW doubles rounded once to f32, stored at p */
static inline void vd_store_f32(float *p, vd x) {
    _mm256_storeu_ps(p, _mm512_cvtpd_ps(x));
}
#define SLD15(fn) Sleef_##fn##d8_u15avx512f
#define SLF15(fn) Sleef_##fn##f16_u15avx512f
/* isnan(x) ? x : m, per lane */
static inline vf vf_keep_nan(vf m, vf x) {
    return _mm512_mask_blend_ps(_mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q), m, x);
}
static inline vd vd_keep_nan(vd m, vd x) {
    return _mm512_mask_blend_pd(_mm512_cmp_pd_mask(x, x, _CMP_UNORD_Q), m, x);
}
#define vd_max   _mm512_max_pd
#define vd_min   _mm512_min_pd
#define SLDX(fn) Sleef_##fn##d8_avx512f /* exact: fmod */
#elif defined(__AVX2__) && defined(__FMA__)
#define VW                  8
#define DW                  4
typedef __m256 vf;
typedef __m256d vd;
#define SLF(fn)             Sleef_##fn##f8_u10avx2
#define SLD(fn)             Sleef_##fn##d4_u10avx2
#define SLF35(fn)           Sleef_##fn##f8_u35avx2
#define SLD35(fn)           Sleef_##fn##d4_u35avx2
#define vf_load             _mm256_loadu_ps
#define vf_store            _mm256_storeu_ps
#define vf_set              _mm256_set1_ps
#define vf_add              _mm256_add_ps
#define vf_sub              _mm256_sub_ps
#define vf_mul              _mm256_mul_ps
#define vf_div              _mm256_div_ps
#define vf_sqrt             _mm256_sqrt_ps
#define vd_load             _mm256_loadu_pd
#define vd_store            _mm256_storeu_pd
#define vd_set              _mm256_set1_pd
#define vd_add              _mm256_add_pd
#define vd_sub              _mm256_sub_pd
#define vd_mul              _mm256_mul_pd
#define vd_div              _mm256_div_pd
#define vd_sqrt             _mm256_sqrt_pd
#define vd_from_f32         _mm256_cvtps_pd
typedef __m128 vf_half;
#define vf_half_load        _mm_loadu_ps
static inline vf vf_pick_nonneg(vf x, vf p, vf q) {
    return _mm256_blendv_ps(q, p, _mm256_cmp_ps(x, _mm256_setzero_ps(), _CMP_GE_OQ));
}
static inline vd vd_pick_nonneg(vd x, vd p, vd q) {
    return _mm256_blendv_pd(q, p, _mm256_cmp_pd(x, _mm256_setzero_pd(), _CMP_GE_OQ));
}
static inline vf vf_abs(vf x) {
    return _mm256_andnot_ps(_mm256_set1_ps(-0.0f), x);
}
static inline vd vd_abs(vd x) {
    return _mm256_andnot_pd(_mm256_set1_pd(-0.0), x);
}
static inline vf vf_neg(vf x) {
    return _mm256_xor_ps(x, _mm256_set1_ps(-0.0f));
}
static inline vd vd_neg(vd x) {
    return _mm256_xor_pd(x, _mm256_set1_pd(-0.0));
}
static inline vf vf_neg_abs(vf x) {
    return _mm256_or_ps(x, _mm256_set1_ps(-0.0f));
}
static inline vf vf_pow2_of_magic(vf t) {
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_castps_si256(t), 23));
}
static inline double vd_reduce_add(vd x) {
    __m128d s = _mm_add_pd(_mm256_castpd256_pd128(x), _mm256_extractf128_pd(x, 1));
    return _mm_cvtsd_f64(_mm_add_sd(s, _mm_unpackhi_pd(s, s)));
}
static inline double vf_reduce_add_d(vf x) { /* in double */
    return vd_reduce_add(_mm256_cvtps_pd(_mm256_castps256_ps128(x))) +
           vd_reduce_add(_mm256_cvtps_pd(_mm256_extractf128_ps(x, 1)));
}
#define vf_max              _mm256_max_ps
#define vf_min              _mm256_min_ps
#define vf_fma              _mm256_fmadd_ps
#define vf_fnma             _mm256_fnmadd_ps
/* in two steps, each 2^(n/2) normal: p * 2^h exact, the second product rounded once */
static inline vf vf_scale2_any(vf p, vf n) {
    __m256i k = _mm256_cvtps_epi32(n), h = _mm256_srai_epi32(k, 1), bias = _mm256_set1_epi32(127);
    __m256i s1 = _mm256_slli_epi32(_mm256_add_epi32(h, bias), 23),
            s2 = _mm256_slli_epi32(_mm256_add_epi32(_mm256_sub_epi32(k, h), bias), 23);
    return vf_mul(vf_mul(p, _mm256_castsi256_ps(s1)), _mm256_castsi256_ps(s2));
}
static inline vf vf_pick_gt(vf x, vf c, vf p, vf q) {
    return _mm256_blendv_ps(q, p, _mm256_cmp_ps(x, c, _CMP_GT_OQ));
}
static inline vf vf_copysign(vf r, vf x) {
    __m256 m = _mm256_set1_ps(-0.0f);
    return _mm256_or_ps(_mm256_andnot_ps(m, r), _mm256_and_ps(m, x));
}
static inline int vf_nan_mask(vf x) {
    return _mm256_movemask_ps(_mm256_cmp_ps(x, x, _CMP_UNORD_Q)) != 0;
}
static inline float vf_reduce_max(vf x) {
    __m128 m = _mm_max_ps(_mm256_castps256_ps128(x), _mm256_extractf128_ps(x, 1));
    m = _mm_max_ps(m, _mm_movehl_ps(m, m));
    m = _mm_max_ss(m, _mm_shuffle_ps(m, m, 1));
    return _mm_cvtss_f32(m);
}
#define vf_round_mode(x, m) _mm256_round_ps(x, (m) | _MM_FROUND_NO_EXC)
#define vd_round_mode(x, m) _mm256_round_pd(x, (m) | _MM_FROUND_NO_EXC)
static inline vd vd_pick_gt(vd x, vd c, vd p, vd q) {
    return _mm256_blendv_pd(q, p, _mm256_cmp_pd(x, c, _CMP_GT_OQ));
}
static inline vd vd_copysign(vd r, vd x) {
    __m256d m = _mm256_set1_pd(-0.0);
    return _mm256_or_pd(_mm256_andnot_pd(m, r), _mm256_and_pd(m, x));
}
static inline void vd_store_f32(float *p, vd x) {
    _mm_storeu_ps(p, _mm256_cvtpd_ps(x));
}
#define SLD15(fn)           Sleef_##fn##d4_u15avx2
#define SLF15(fn)           Sleef_##fn##f8_u15avx2
#define SLDX(fn)            Sleef_##fn##d4_avx2
static inline vf vf_keep_nan(vf m, vf x) {
    return _mm256_blendv_ps(m, x, _mm256_cmp_ps(x, x, _CMP_UNORD_Q));
}
static inline vd vd_keep_nan(vd m, vd x) {
    return _mm256_blendv_pd(m, x, _mm256_cmp_pd(x, x, _CMP_UNORD_Q));
}
#define vd_max              _mm256_max_pd
#define vd_min              _mm256_min_pd
#else
#error "simd_kernels.c needs AVX2 + FMA or AVX-512 (F, DQ) flags"
#endif

/* ==== unary: out[i] = f(a[i]) ==================================================================
 * F is an expression of the vector x. The last partial vector is computed on a zero-padded copy,
 * so every element goes through the same vector function. */
/* VEC_MAP's function takes the parameters after n in its trailing arguments (", T alpha"), which
 * F may use */
#define VEC_MAP(name, T, V, W, LOAD, STORE, F, ...)                                                \
    static void name(T *o, const T *a, int64_t n __VA_ARGS__) {                                    \
        int64_t i = 0;                                                                             \
        for (; i + W <= n; i += W) {                                                               \
            V x = LOAD(a + i);                                                                     \
            STORE(o + i, F);                                                                       \
        }                                                                                          \
        if (i < n) {                                                                               \
            T t[W];                                                                                \
            memset(t, 0, sizeof t);                                                                \
            memcpy(t, a + i, sizeof(T) * (size_t)(n - i));                                         \
            V x = LOAD(t);                                                                         \
            STORE(t, F);                                                                           \
            memcpy(o + i, t, sizeof(T) * (size_t)(n - i));                                         \
        }                                                                                          \
    }
#define VEC_UNARY(name, T, V, W, LOAD, STORE, F) VEC_MAP(name, T, V, W, LOAD, STORE, F)
#define F32_UNARY(name, F)                       VEC_UNARY(name##_f32, float, vf, VW, vf_load, vf_store, F)
#define F64_UNARY(name, F)                       VEC_UNARY(name##_f64, double, vd, DW, vd_load, vd_store, F)

/* exp in f32, our own: SLEEF's u10 expf was slower than this on one core of the Xeon (Cascade Lake,
 * AVX-512). x = n ln 2 + r, |r| <= ln 2 / 2 (n rounded by adding 1.5 * 2^23; Cody and Waite's
 * two-part ln 2), e^r = 1 + r (1 + r P(r)), P of degree 4, a minimax fit in relative error
 * (3.1e-9), the last step one fused multiply-add so that 1 + ... is rounded once, then scaled by
 * 2^n in one rounding (subnormal results included). x is clamped to [-104, 89] first (exp rounds to
 * 0 below -103.97 and overflows above 88.73). Measured against double exp on every f32: at most
 * 0.909 ulp (at 5.1998); NaN stays NaN, exp(-inf) = 0, exp(inf) = inf. */
static inline vf exp_vf(vf x) {
    x = vf_min(vf_set(89.0f), vf_max(vf_set(-104.0f), x)); /* x when x is NaN */
    const vf magic = vf_set(12582912.0f);
    vf n = vf_sub(vf_fma(x, vf_set(1.44269504f), magic), magic);
    vf r = vf_fnma(n, vf_set(0.693145751953125f), x);
    r = vf_fnma(n, vf_set(1.428606765330187e-06f), r);
    vf p = vf_set(1.381454058e-03f);
    p = vf_fma(p, r, vf_set(8.368698880e-03f));
    p = vf_fma(p, r, vf_set(4.166838899e-02f));
    p = vf_fma(p, r, vf_set(1.666652113e-01f));
    p = vf_fma(p, r, vf_set(4.999999404e-01f));
    p = vf_fma(p, r, vf_set(1.0f));
    return vf_scale2_any(vf_fma(p, r, vf_set(1.0f)), n);
}

/* 1 / (1 + exp(-x)) for x >= 0, e / (1 + e) with e = exp(x) below: the same value as the cpu's
 * two branches, as one exp of -|x| */
static inline vf sigmoid_from(vf x, vf e) { /* e = exp(-|x|) */
    vf d = vf_add(vf_set(1.0f), e);
    return vf_pick_nonneg(x, vf_div(vf_set(1.0f), d), vf_div(e, d));
}
static inline vf sigmoid_vf(vf x) {
    return sigmoid_from(x, exp_vf(vf_neg(vf_abs(x))));
}
static inline vd sigmoid_vd(vd x) {
    vd e = SLD(exp)(vd_neg(vd_abs(x)));
    vd d = vd_add(vd_set(1.0), e);
    return vd_pick_nonneg(x, vd_div(vd_set(1.0), d), vd_div(e, d));
}

#define BOTH_UNARY(name, FF, FD)                                                                   \
    F32_UNARY(name, FF)                                                                            \
    F64_UNARY(name, FD)
F32_UNARY(exp, exp_vf(x))
F64_UNARY(exp, SLD(exp)(x))
BOTH_UNARY(expm1, SLF(expm1)(x), SLD(expm1)(x))
BOTH_UNARY(log, SLF(log)(x), SLD(log)(x))
BOTH_UNARY(log1p, SLF(log1p)(x), SLD(log1p)(x))
BOTH_UNARY(sin, SLF(sin)(x), SLD(sin)(x))
BOTH_UNARY(cos, SLF(cos)(x), SLD(cos)(x))
/* tanh in f32, our own: SLEEF's u35 tanhf was slower than this on one core of the Xeon (Cascade
 * Lake, AVX-512), and at AVX2 width too.
 * tanh(x) = -m / (2 + m) with m = expm1(-2|x|), the sign of x put back: no cancellation
 * anywhere, so one form serves every x. expm1(y), y in [-18.2, 0] (from |x| = 9.01 on tanh
 * rounds to 1): y = n ln 2 + r, |r| <= ln 2 / 2 (one f32 ln 2 is enough here: its error times
 * n <= 27 is below 1e-9 of the 2^n it scales), expm1(r) = r + r^2 P(r), P of degree 4, a
 * minimax fit in relative error (1.3e-8), and expm1(y) = 2^n expm1(r) + (2^n - 1), 2^n - 1
 * exact. Measured against double tanh on every non-negative f32 up to 11 (and by symmetry the
 * negatives, which give the same bits negated): at most 2.498 ulp (SLEEF u35: 2.86). NaN stays
 * NaN (the max keeps it), tanh(+-0) = +-0, tanh(+-inf) = +-1. */
static inline vf tanh_vf(vf x) {
    vf y = vf_max(vf_set(-18.2f), vf_neg_abs(vf_add(x, x))); /* NaN: the second operand */
    const vf magic = vf_set(12582912.0f + 127.0f); /* 1.5 * 2^23: t's low bits hold n + 127 */
    vf t = vf_fma(y, vf_set(1.44269504f), magic);
    vf n = vf_sub(t, magic);
    vf r = vf_fnma(n, vf_set(0.693147182f), y);
    vf p = vf_set(1.388247241e-03f);
    p = vf_fma(p, r, vf_set(8.366500027e-03f));
    p = vf_fma(p, r, vf_set(4.166720062e-02f));
    p = vf_fma(p, r, vf_set(1.666654348e-01f));
    p = vf_fma(p, r, vf_set(4.999999702e-01f));
    p = vf_fma(vf_mul(r, r), p, r); /* expm1(r) */
    vf s = vf_pow2_of_magic(t);
    vf m = vf_fma(s, p, vf_sub(s, vf_set(1.0f)));
    return vf_copysign(vf_div(m, vf_sub(vf_set(-2.0f), m)), x);
}
F32_UNARY(tanh, tanh_vf(x))
F64_UNARY(tanh, SLD35(tanh)(x))
/* erf in f32, our own: SLEEF's erff (u10) costs 8 exps here, and was slower than this on one core.
 * Two approximations, both lanes computed and one picked:
 *   |x| <= 1:  erf(x) = x + x P(x^2), P of degree 7 (P(0) = 2 / sqrt(pi) - 1);
 *   |x| > 1:   erf(x) = sign(x) (1 - exp(Q(min(|x|, 4)))), Q of degree 8 approximating
 *              log(erfc(t)); erf rounds to 1 from |x| = 3.92 on, so 4 is far enough.
 * The coefficients are weighted least-squares fits to erf (relative error) and log erfc
 * (weighted by erfc, the error it makes in erf) in double, iterated towards minimax and rounded
 * to f32. Measured against double erf over every f32 in [4.7e-10, 4.5] (exhaustively; beyond,
 * erf is x * 2 / sqrt(pi) rounded, or 1): at most 1.07 ulp. erf(-x) = -erf(x) exactly, NaN stays
 * NaN (the first branch), erf(+-inf) = +-1. */
static inline vf erf_vf(vf x) {
    static const float p[8] = {-9.641498763812706e-06f, 0.00011256939615122974f,
                               -0.0008482827106490731f, 0.005220945458859205f,
                               -0.0268654003739357f,    0.11283782124519348f,
                               -0.37612637877464294f,   0.12837916612625122f};
    static const float q[9] = {
        2.5115230073424755e-07f, -2.531220525270328e-05f, 0.0004637713427655399f,
        -0.004282322712242603f,  0.025373423472046852f,   -0.10863881558179855f,
        -0.6330397725105286f,    -1.1296610832214355f,    0.00020434492034837604f};
    vf t = vf_abs(x), s = vf_mul(x, x);
    vf a = vf_set(p[0]);
    for (int k = 1; k < 8; k++) a = vf_fma(a, s, vf_set(p[k]));
    vf small = vf_fma(a, x, x);
    vf u = vf_min(t, vf_set(4.0f)), b = vf_set(q[0]);
    for (int k = 1; k < 9; k++) b = vf_fma(b, u, vf_set(q[k]));
    vf large = vf_copysign(vf_sub(vf_set(1.0f), exp_vf(b)), x);
    return vf_pick_gt(t, vf_set(1.0f), large, small);
}
BOTH_UNARY(erf, erf_vf(x), SLD(erf)(x))
BOTH_UNARY(sigmoid, sigmoid_vf(x), sigmoid_vd(x))
/* correctly rounded, like the cpu's sqrt and 1 / sqrt */
BOTH_UNARY(sqrt, vf_sqrt(x), vd_sqrt(x))
BOTH_UNARY(rsqrt, vf_div(vf_set(1.0f), vf_sqrt(x)), vd_div(vd_set(1.0), vd_sqrt(x)))
BOTH_UNARY(reciprocal, vf_div(vf_set(1.0f), x), vd_div(vd_set(1.0), x))
BOTH_UNARY(negate, vf_neg(x), vd_neg(x))
BOTH_UNARY(abs, vf_abs(x), vd_abs(x))
/* floor, ceil, round and sign: exact, the cpu's bits (libm's floor, ceil and round, which
 * rounds halves away from zero; sign keeps +-0 and NaN). round is trunc(x + h), h the largest
 * value below a half with x's sign: the sum rounds (to nearest even) past the next integer
 * exactly when the part beyond x's integer is at least a half (x + h for x = 0.5 is 1 - 2^-25,
 * which rounds to 1), and where x's spacing is 1 or more it rounds back to x; -0.3 gives -0.
 * Three operations where trunc, subtract, compare, add and pick took six: checked on every one of
 * the 2^32 f32 values against roundf (2026-11-28). */
#define FLOOR_M _MM_FROUND_TO_NEG_INF
#define CEIL_M  _MM_FROUND_TO_POS_INF
#define TRUNC_M _MM_FROUND_TO_ZERO
static inline vf round_vf(vf x) {
    return vf_round_mode(vf_add(x, vf_copysign(vf_set(0.49999997f), x)), TRUNC_M);
}
static inline vd round_vd(vd x) {
    return vd_round_mode(vd_add(x, vd_copysign(vd_set(0.49999999999999994), x)), TRUNC_M);
}
BOTH_UNARY(floor, vf_round_mode(x, FLOOR_M), vd_round_mode(x, FLOOR_M))
BOTH_UNARY(ceil, vf_round_mode(x, CEIL_M), vd_round_mode(x, CEIL_M))
BOTH_UNARY(round, round_vf(x), round_vd(x))
BOTH_UNARY(sign, vf_pick_gt(vf_abs(x), vf_set(0.0f), vf_copysign(vf_set(1.0f), x), x),
           vd_pick_gt(vd_abs(x), vd_set(0.0), vd_copysign(vd_set(1.0), x), x))

/* tan, asin, acos, atan, atanh, cbrt and erfc: SLEEF's f32 functions (u10; erfc u15), faster here
 * than widening to double (1M f32 on one core of the Xeon, AVX-512: atan, cbrt), within 1 ulp of
 * the correctly rounded result (2^22 values of every exponent and the special ones: at most 1 ulp
 * from libm's double function rounded to f32, which the cpu returns; test_simd_kernels). f64 runs
 * SLEEF's double functions (1.0 ulp; erfc 1.5). */
BOTH_UNARY(tan, SLF(tan)(x), SLD(tan)(x))
BOTH_UNARY(asin, SLF(asin)(x), SLD(asin)(x))
BOTH_UNARY(acos, SLF(acos)(x), SLD(acos)(x))
BOTH_UNARY(atan, SLF(atan)(x), SLD(atan)(x))
BOTH_UNARY(atanh, SLF(atanh)(x), SLD(atanh)(x))
BOTH_UNARY(cbrt, SLF(cbrt)(x), SLD(cbrt)(x))
BOTH_UNARY(erfc, SLF15(erfc)(x), SLD15(erfc)(x))
/* sinh, cosh, asinh and acosh in f32: each f32 widened, SLEEF's double function (1.0 ulp of a
 * double), rounded once: the cpu's bits but where the double value lies within an ulp of a
 * double from halfway between two floats. SLEEF's f32 functions overflow early there: sinhf and
 * coshf to inf from |x| = 88.7 (the result is finite up to 89.4), asinhf and acoshf from
 * |x| = 2^64 (where the result is about 45). f64 runs the same double functions, but sinh and
 * cosh: SLEEF's overflow from |x| = 709.8 on, where the double result is finite up to 710.5
 * (test_simd_kernels). */
/* DW floats widened to doubles */
#define vd_load_f32(p)          vd_from_f32(vf_half_load(p))
#define VIA_F64_UNARY(name, FD) VEC_UNARY(name##_f32, float, vd, DW, vd_load_f32, vd_store_f32, FD)
VIA_F64_UNARY(sinh, SLD(sinh)(x))
VIA_F64_UNARY(cosh, SLD(cosh)(x))
VIA_F64_UNARY(asinh, SLD(asinh)(x))
F64_UNARY(asinh, SLD(asinh)(x))
VIA_F64_UNARY(acosh, SLD(acosh)(x))
F64_UNARY(acosh, SLD(acosh)(x))

/* ==== binary: out[i] = f(a[i or 0], b[i or 0]) ================================================
 * Plain loops, one per broadcast case, for the compiler to vectorise; max and min let NaN
 * through from either side, like the cpu. */
#define PLAIN_BINARY(name, T, EXPR)                                                                \
    static void name(T *restrict o, const T *restrict a, const T *restrict b, int sa, int sb,      \
                     int64_t n) {                                                                  \
        if (sa && sb) {                                                                            \
            for (int64_t i = 0; i < n; i++) {                                                      \
                T x = a[i], y = b[i];                                                              \
                o[i] = (EXPR);                                                                     \
            }                                                                                      \
        } else if (sa) {                                                                           \
            T y = b[0];                                                                            \
            for (int64_t i = 0; i < n; i++) {                                                      \
                T x = a[i];                                                                        \
                o[i] = (EXPR);                                                                     \
            }                                                                                      \
        } else if (sb) {                                                                           \
            T x = a[0];                                                                            \
            for (int64_t i = 0; i < n; i++) {                                                      \
                T y = b[i];                                                                        \
                o[i] = (EXPR);                                                                     \
            }                                                                                      \
        } else {                                                                                   \
            T x = a[0], y = b[0], r = (EXPR);                                                      \
            for (int64_t i = 0; i < n; i++) o[i] = r;                                              \
        }                                                                                          \
    }
#define BOTH_PLAIN(name, EXPR)                                                                     \
    PLAIN_BINARY(name##_f32, float, EXPR)                                                          \
    PLAIN_BINARY(name##_f64, double, EXPR)
BOTH_PLAIN(add, x + y)
BOTH_PLAIN(subtract, x - y)
BOTH_PLAIN(multiply, x *y)
BOTH_PLAIN(divide, x / y)
BOTH_PLAIN(max, x > y || x != x ? x : y)
BOTH_PLAIN(min, x < y || x != x ? x : y)

/* clip(x, lo, hi) = min(max(x, lo), hi) with one value each for lo and hi, the max and min
 * above (NaN through from either side, as the cpu's run_clip gives); leaky_relu and elu as the
 * decomposition computes them (select(x > 0, x, x * alpha), ... alpha * expm1(x)), in one pass.
 * Plain loops for the compiler to vectorise but elu's, whose expm1 is SLEEF's as the blas
 * decomposition's expm1 step. */
#define CLIP_LEAKY(T, sfx)                                                                         \
    static void clip_##sfx(T *restrict o, const T *restrict a, T lo, T hi, int64_t n) {            \
        for (int64_t i = 0; i < n; i++) {                                                          \
            T x = a[i], t = x > lo || x != x ? x : lo;                                             \
            o[i] = t < hi || t != t ? t : hi;                                                      \
        }                                                                                          \
    }                                                                                              \
    static void leaky_relu_##sfx(T *restrict o, const T *restrict a, T alpha, int64_t n) {         \
        for (int64_t i = 0; i < n; i++) {                                                          \
            T x = a[i];                                                                            \
            o[i] = x > 0 ? x : x * alpha;                                                          \
        }                                                                                          \
    }
CLIP_LEAKY(float, f32)
CLIP_LEAKY(double, f64)
VEC_MAP(elu_f32, float, vf, VW, vf_load, vf_store,
        vf_pick_gt(x, vf_set(0), x, SLF(expm1)(x) * vf_set(alpha)), , float alpha)
VEC_MAP(elu_f64, double, vd, DW, vd_load, vd_store,
        vd_pick_gt(x, vd_set(0), x, SLD(expm1)(x) * vd_set(alpha)), , double alpha)
/* softplus as the decomposition computes it, max(x, 0) + log1p(exp(-|x|)), with the functions
 * of its exp and log1p steps: the same bits in one pass instead of six */
F32_UNARY(softplus, vf_add(vf_max(x, vf_set(0.0f)), SLF(log1p)(exp_vf(vf_neg(vf_abs(x))))))
F64_UNARY(softplus, vd_add(vd_max(x, vd_set(0.0)), SLD(log1p)(SLD(exp)(vd_neg(vd_abs(x))))))

/* Comparisons: a u8 per element, 1 where it holds (NaN compares false, but not-equal true), as
 * the cpu's; plain loops for the compiler to vectorise */
#define PLAIN_COMPARE(name, T, EXPR)                                                               \
    static void name(uint8_t *restrict o, const T *restrict a, const T *restrict b, int sa,        \
                     int sb, int64_t n) {                                                          \
        if (sa && sb) {                                                                            \
            for (int64_t i = 0; i < n; i++) {                                                      \
                T x = a[i], y = b[i];                                                              \
                o[i] = (uint8_t)(EXPR);                                                            \
            }                                                                                      \
        } else if (sa) {                                                                           \
            T y = b[0];                                                                            \
            for (int64_t i = 0; i < n; i++) {                                                      \
                T x = a[i];                                                                        \
                o[i] = (uint8_t)(EXPR);                                                            \
            }                                                                                      \
        } else if (sb) {                                                                           \
            T x = a[0];                                                                            \
            for (int64_t i = 0; i < n; i++) {                                                      \
                T y = b[i];                                                                        \
                o[i] = (uint8_t)(EXPR);                                                            \
            }                                                                                      \
        } else {                                                                                   \
            T x = a[0], y = b[0];                                                                  \
            memset(o, (uint8_t)(EXPR), (size_t)n);                                                 \
        }                                                                                          \
    }
#define BOTH_COMPARE(name, EXPR)                                                                   \
    PLAIN_COMPARE(name##_f32, float, EXPR)                                                         \
    PLAIN_COMPARE(name##_f64, double, EXPR)
BOTH_COMPARE(equal, x == y)
BOTH_COMPARE(not_equal, x != y)
BOTH_COMPARE(less, x < y)
BOTH_COMPARE(less_equal, x <= y)
BOTH_COMPARE(greater, x > y)
BOTH_COMPARE(greater_equal, x >= y)

/* select(pred, a, b) with a u8 predicate (non-zero: a), each operand an array or one value, of
 * 16-, 32- and 64-bit values as their bits (f16, bf16, s16, u16; f32, s32, u32; f64, s64, u64,
 * c64); loops the compiler turns into blends, not a branch per element */
#define SELECT_BITS(name, T)                                                                       \
    static void name(T *restrict o, const uint8_t *restrict m, const T *restrict a,                \
                     const T *restrict b, int sm, int sa, int sb, int64_t n) {                     \
        if (sm && sa && !sb) {                                                                     \
            T y = b[0];                                                                            \
            for (int64_t i = 0; i < n; i++) o[i] = m[i] ? a[i] : y;                                \
        } else if (sm && sa && sb) {                                                               \
            for (int64_t i = 0; i < n; i++) o[i] = m[i] ? a[i] : b[i];                             \
        } else if (sm && !sa && sb) { /* select(pred, 0, g): a gradient through max or relu */     \
            T x = a[0];                                                                            \
            for (int64_t i = 0; i < n; i++) o[i] = m[i] ? x : b[i];                                \
        } else if (sm) {                                                                           \
            T x = a[0], y = b[0];                                                                  \
            for (int64_t i = 0; i < n; i++) o[i] = m[i] ? x : y;                                   \
        } else {                                                                                   \
            for (int64_t i = 0; i < n; i++) o[i] = m[0] ? a[sa ? i : 0] : b[sb ? i : 0];           \
        }                                                                                          \
    }
SELECT_BITS(select_16, uint16_t)
SELECT_BITS(select_32, uint32_t)
SELECT_BITS(select_64, uint64_t)

/* SLEEF's two-argument functions, operands broadcast into vectors where they are one value */
#define VEC_BINARY(name, T, V, W, LOAD, SET, STORE, F)                                             \
    static void name(T *o, const T *a, const T *b, int sa, int sb, int64_t n) {                    \
        V xs = SET(a[0]), ys = SET(b[0]);                                                          \
        int64_t i = 0;                                                                             \
        for (; i + W <= n; i += W) {                                                               \
            V x = sa ? LOAD(a + i) : xs, y = sb ? LOAD(b + i) : ys;                                \
            STORE(o + i, F);                                                                       \
        }                                                                                          \
        if (i < n) {                                                                               \
            T ta[W], tb[W];                                                                        \
            for (int k = 0; k < W; k++) {                                                          \
                ta[k] = i + k < n ? a[sa ? i + k : 0] : 1;                                         \
                tb[k] = i + k < n ? b[sb ? i + k : 0] : 1;                                         \
            }                                                                                      \
            V x = LOAD(ta), y = LOAD(tb);                                                          \
            STORE(ta, F);                                                                          \
            memcpy(o + i, ta, sizeof(T) * (size_t)(n - i));                                        \
        }                                                                                          \
    }
VEC_BINARY(pow_f32, float, vf, VW, vf_load, vf_set, vf_store, SLF(pow)(x, y))
VEC_BINARY(pow_f64, double, vd, DW, vd_load, vd_set, vd_store, SLD(pow)(x, y))
VEC_BINARY(atan2_f32, float, vf, VW, vf_load, vf_set, vf_store, SLF(atan2)(x, y))
VEC_BINARY(atan2_f64, double, vd, DW, vd_load, vd_set, vd_store, SLD(atan2)(x, y))
/* ==== extremes: reduce_max, reduce_min, and argmax/argmin's first pass ========================
 * The largest (is_min: smallest) of n values, NaN when one is NaN, -inf (inf) for none; and a row
 * of them, acc[i] = the extreme of acc[i] and a[i]. max_ps(x, m) keeps m where either is NaN, so
 * a NaN in m stays, and keep_nan puts a NaN of x in; each lane then holds the extreme of its
 * values or a NaN, and the lanes are folded the cpu's way (reduce.c's F_MAX). */
#define EXTREME_KERNELS(sfx, T, V, W, LOAD, STORE, SET, MAX, MIN, KEEP)                            \
    static double extreme_##sfx(const T *a, int64_t n, int is_min) {                               \
        V m0 = SET(is_min ? INFINITY : -INFINITY), m1 = m0;                                        \
        int64_t i = 0;                                                                             \
        if (is_min)                                                                                \
            for (; i + 2 * W <= n; i += 2 * W) {                                                   \
                V x = LOAD(a + i), y = LOAD(a + i + W);                                            \
                m0 = KEEP(MIN(x, m0), x);                                                          \
                m1 = KEEP(MIN(y, m1), y);                                                          \
            }                                                                                      \
        else                                                                                       \
            for (; i + 2 * W <= n; i += 2 * W) {                                                   \
                V x = LOAD(a + i), y = LOAD(a + i + W);                                            \
                m0 = KEEP(MAX(x, m0), x);                                                          \
                m1 = KEEP(MAX(y, m1), y);                                                          \
            }                                                                                      \
        for (; i < n; i += W) { /* the rest a vector at a time, the last one padded */             \
            T t[W];                                                                                \
            for (int k = 0; k < W; k++)                                                            \
                t[k] = i + k < n ? a[i + k] : (is_min ? (T)INFINITY : (T)-INFINITY);               \
            V x = LOAD(t);                                                                         \
            m0 = KEEP(is_min ? MIN(x, m0) : MAX(x, m0), x);                                        \
        }                                                                                          \
        m0 = KEEP(is_min ? MIN(m1, m0) : MAX(m1, m0), m1);                                         \
        T lanes[W];                                                                                \
        STORE(lanes, m0);                                                                          \
        double r = is_min ? INFINITY : -INFINITY;                                                  \
        for (int k = 0; k < W; k++) {                                                              \
            double x = lanes[k];                                                                   \
            if (x != x || (is_min ? x < r : x > r)) r = r != r ? r : x;                            \
        }                                                                                          \
        return r;                                                                                  \
    }                                                                                              \
    static void extreme_row_##sfx(T *acc, const T *a, int64_t n, int is_min) {                     \
        int64_t i = 0;                                                                             \
        for (; i + W <= n; i += W) {                                                               \
            V x = LOAD(a + i), m = LOAD(acc + i);                                                  \
            STORE(acc + i, KEEP(is_min ? MIN(x, m) : MAX(x, m), x));                               \
        }                                                                                          \
        for (; i < n; i++) {                                                                       \
            T x = a[i], m = acc[i];                                                                \
            if (m == m && (x != x || (is_min ? x < m : x > m))) acc[i] = x;                        \
        }                                                                                          \
    }
EXTREME_KERNELS(f32, float, vf, VW, vf_load, vf_store, vf_set, vf_max, vf_min, vf_keep_nan)
EXTREME_KERNELS(f64, double, vd, DW, vd_load, vd_store, vd_set, vd_max, vd_min, vd_keep_nan)

/* remainder: fmod, exact (SLEEF's), so f32 through double gives the exact f32 result. Not f64:
 * SLEEF's fmod gave NaN for a result below the smallest normal double (1.1e-310, the
 * differential suite), which f32 operands never reach. */
static void remainder_f32(float *o, const float *a, const float *b, int sa, int sb, int64_t n) {
    vd xs = vd_set(a[0]), ys = vd_set(b[0]);
    int64_t i = 0;
    for (; i + DW <= n; i += DW) {
        vd x = sa ? vd_load_f32(a + i) : xs, y = sb ? vd_load_f32(b + i) : ys;
        vd_store_f32(o + i, SLDX(fmod)(x, y));
    }
    for (; i < n; i++) o[i] = (float)fmod((double)a[sa ? i : 0], (double)b[sb ? i : 0]);
}

/* ==== bf16 =====================================================================================
 * The bits of an f32 are the bf16's followed by 16 zero bits; narrowing rounds to nearest even
 * and makes a NaN quiet, exactly as half.h's cx_bf16_from_f32. */
typedef uint32_t __attribute__((may_alias)) u32_alias;

static void bf16_to_f32_tail(const uint16_t *restrict h, float *restrict f, int64_t n) {
    u32_alias *u = (u32_alias *)f;
    for (int64_t i = 0; i < n; i++) u[i] = (uint32_t)h[i] << 16;
}

static void f32_to_bf16_tail(const float *restrict f, uint16_t *restrict h, int64_t n) {
    const u32_alias *u = (const u32_alias *)f;
    for (int64_t i = 0; i < n; i++) {
        uint32_t x = u[i];
        uint32_t nan = (uint32_t)((x & 0x7fffffffu) > 0x7f800000u);
        uint32_t r = (x + 0x7fffu + ((x >> 16) & 1)) >> 16;
        h[i] = (uint16_t)(nan ? (x >> 16) | 0x40 : r);
    }
}

/* VW values at a time, written out: the compiler left the narrowing loop's select scalar, which
 * ran 1M values far slower than this on one AVX2 thread. ld_bf16 widens VW halves into a
 * vector, st_bf16 rounds a vector back; the in-register half kernels below use them too. */
#if VW == 16
static inline vf ld_bf16(const uint16_t *h) {
    __m512i w = _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)h));
    return _mm512_castsi512_ps(_mm512_slli_epi32(w, 16));
}
/* the vector of VW f32 bit patterns x rounded to bf16 in each lane's high half (its low half is
 * left over): to nearest even, NaN made quiet */
typedef __m512i vi;
static inline vi bf16_round_hi(vi x) {
    vi r = _mm512_add_epi32(_mm512_add_epi32(x, _mm512_set1_epi32(0x7fff)),
                            _mm512_and_si512(_mm512_srli_epi32(x, 16), _mm512_set1_epi32(1)));
    __mmask16 nan =
        _mm512_cmp_ps_mask(_mm512_castsi512_ps(x), _mm512_castsi512_ps(x), _CMP_UNORD_Q);
    return _mm512_mask_or_epi32(r, nan, x, _mm512_set1_epi32(0x400000));
}
static inline void st_bf16(uint16_t *o, vf v) {
    vi r = _mm512_srli_epi32(bf16_round_hi(_mm512_castps_si512(v)), 16);
    _mm256_storeu_si256((__m256i *)o, _mm512_cvtepi32_epi16(r));
}
#define vi_loadu(p)     _mm512_loadu_si512(p)
#define vi_storeu(p, x) _mm512_storeu_si512(p, x)
#define vi_as_vf        _mm512_castsi512_ps
#define vf_as_vi        _mm512_castps_si512
static inline vi bf16_even(vi x) {
    return _mm512_slli_epi32(x, 16);
}
static inline vi bf16_odd(vi x) {
    return _mm512_and_si512(x, _mm512_set1_epi32((int)0xffff0000u));
}
static inline vi bf16_join(vi even, vi odd) { /* (even >> 16) | (odd & 0xffff0000) */
    return _mm512_ternarylogic_epi32(_mm512_srli_epi32(even, 16), odd,
                                     _mm512_set1_epi32((int)0xffff0000u), 0xf8);
}
#else
static inline vf ld_bf16(const uint16_t *h) {
    __m256i w = _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)h));
    return _mm256_castsi256_ps(_mm256_slli_epi32(w, 16));
}
typedef __m256i vi;
static inline vi bf16_round_hi(vi x) {
    const __m256i abs = _mm256_set1_epi32(0x7fffffff), inf = _mm256_set1_epi32(0x7f800000);
    vi r = _mm256_add_epi32(_mm256_add_epi32(x, _mm256_set1_epi32(0x7fff)),
                            _mm256_and_si256(_mm256_srli_epi32(x, 16), _mm256_set1_epi32(1)));
    /* signed compare: |x| and the infinity's bits are both below 2^31 */
    __m256i nan = _mm256_cmpgt_epi32(_mm256_and_si256(x, abs), inf);
    return _mm256_blendv_epi8(r, _mm256_or_si256(x, _mm256_set1_epi32(0x400000)), nan);
}
static inline void st_bf16(uint16_t *o, vf v) {
    vi r = _mm256_srli_epi32(bf16_round_hi(_mm256_castps_si256(v)), 16);
    /* lanes hold 0..0xffff: the signed-to-unsigned pack keeps them */
    _mm_storeu_si128((__m128i *)o,
                     _mm_packus_epi32(_mm256_castsi256_si128(r), _mm256_extracti128_si256(r, 1)));
}
#define vi_loadu(p)     _mm256_loadu_si256((const __m256i *)(p))
#define vi_storeu(p, x) _mm256_storeu_si256((__m256i *)(p), x)
#define vi_as_vf        _mm256_castsi256_ps
#define vf_as_vi        _mm256_castps_si256
static inline vi bf16_even(vi x) {
    return _mm256_slli_epi32(x, 16);
}
static inline vi bf16_odd(vi x) {
    return _mm256_and_si256(x, _mm256_set1_epi32((int)0xffff0000u));
}
static inline vi bf16_join(vi even, vi odd) { /* (even >> 16) | (odd & 0xffff0000) */
    return _mm256_or_si256(_mm256_srli_epi32(even, 16),
                           _mm256_and_si256(odd, _mm256_set1_epi32((int)0xffff0000u)));
}
#endif

static void bf16_to_f32(const uint16_t *restrict h, float *restrict f, int64_t n) {
    int64_t i = 0;
    for (; i + VW <= n; i += VW) vf_store(f + i, ld_bf16(h + i));
    bf16_to_f32_tail(h + i, f + i, n - i);
}

static void f32_to_bf16(const float *restrict f, uint16_t *restrict h, int64_t n) {
    int64_t i = 0;
    for (; i + VW <= n; i += VW) st_bf16(h + i, vf_load(f + i));
    f32_to_bf16_tail(f + i, h + i, n - i);
}

/* ==== transpose ================================================================================
 * y (cols x rows) = t (rows x cols) transposed, both row-major: 8 x 8 blocks through 256-bit
 * registers (unpack, shuffle, swap of 128-bit lanes), inside 32 x 32 tiles that stay in L1;
 * the edges element by element. The channels-first result of a oneDNN convolution spent a fair
 * part of its time in the scalar tiled loop this replaces. */
static inline void transpose8(const float *src, int64_t ss, float *dst, int64_t ds) {
    __m256 r0 = _mm256_loadu_ps(src), r1 = _mm256_loadu_ps(src + ss);
    __m256 r2 = _mm256_loadu_ps(src + 2 * ss), r3 = _mm256_loadu_ps(src + 3 * ss);
    __m256 r4 = _mm256_loadu_ps(src + 4 * ss), r5 = _mm256_loadu_ps(src + 5 * ss);
    __m256 r6 = _mm256_loadu_ps(src + 6 * ss), r7 = _mm256_loadu_ps(src + 7 * ss);
    __m256 t0 = _mm256_unpacklo_ps(r0, r1), t1 = _mm256_unpackhi_ps(r0, r1);
    __m256 t2 = _mm256_unpacklo_ps(r2, r3), t3 = _mm256_unpackhi_ps(r2, r3);
    __m256 t4 = _mm256_unpacklo_ps(r4, r5), t5 = _mm256_unpackhi_ps(r4, r5);
    __m256 t6 = _mm256_unpacklo_ps(r6, r7), t7 = _mm256_unpackhi_ps(r6, r7);
    __m256 u0 = _mm256_shuffle_ps(t0, t2, 0x44), u1 = _mm256_shuffle_ps(t0, t2, 0xee);
    __m256 u2 = _mm256_shuffle_ps(t1, t3, 0x44), u3 = _mm256_shuffle_ps(t1, t3, 0xee);
    __m256 u4 = _mm256_shuffle_ps(t4, t6, 0x44), u5 = _mm256_shuffle_ps(t4, t6, 0xee);
    __m256 u6 = _mm256_shuffle_ps(t5, t7, 0x44), u7 = _mm256_shuffle_ps(t5, t7, 0xee);
    _mm256_storeu_ps(dst, _mm256_permute2f128_ps(u0, u4, 0x20));
    _mm256_storeu_ps(dst + ds, _mm256_permute2f128_ps(u1, u5, 0x20));
    _mm256_storeu_ps(dst + 2 * ds, _mm256_permute2f128_ps(u2, u6, 0x20));
    _mm256_storeu_ps(dst + 3 * ds, _mm256_permute2f128_ps(u3, u7, 0x20));
    _mm256_storeu_ps(dst + 4 * ds, _mm256_permute2f128_ps(u0, u4, 0x31));
    _mm256_storeu_ps(dst + 5 * ds, _mm256_permute2f128_ps(u1, u5, 0x31));
    _mm256_storeu_ps(dst + 6 * ds, _mm256_permute2f128_ps(u2, u6, 0x31));
    _mm256_storeu_ps(dst + 7 * ds, _mm256_permute2f128_ps(u3, u7, 0x31));
}

static void transpose_f32(float *restrict y, const float *restrict t, int64_t rows, int64_t cols) {
    enum { TILE = 32 };
    for (int64_t p0 = 0; p0 < rows; p0 += TILE)
        for (int64_t c0 = 0; c0 < cols; c0 += TILE) {
            int64_t p1 = p0 + TILE < rows ? p0 + TILE : rows;
            int64_t c1 = c0 + TILE < cols ? c0 + TILE : cols;
            int64_t p8 = p0 + (p1 - p0) / 8 * 8, c8 = c0 + (c1 - c0) / 8 * 8;
            for (int64_t p = p0; p < p8; p += 8)
                for (int64_t c = c0; c < c8; c += 8)
                    transpose8(t + p * cols + c, cols, y + c * rows + p, rows);
            for (int64_t c = c0; c < c1; c++)
                for (int64_t p = c < c8 ? p8 : p0; p < p1; p++) y[c * rows + p] = t[p * cols + c];
        }
}

/* ==== f16 and bf16 binary ops in registers ======================================================
 * Each vector of halves is widened, computed in f32 and rounded back without leaving the
 * registers: the same one rounding per result as widening a chunk, running the f32 kernel and
 * narrowing it (blas_simd.c), in one pass over memory instead of four through L1 (a bf16 add of
 * 1M values on one AVX2 thread ran slower through the chunks). f16 NaN results are made the
 * canonical quiet NaN of half.h, as the chunked path's narrowing does. */
#include "../../../core/half.h"
#include "../../../core/half_array.h"

#if VW == 16
static inline vf ld_f16(const uint16_t *h) {
    return _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)h));
}
static inline void st_f16(uint16_t *o, vf v) {
    _mm256_storeu_si256((__m256i *)o, _mm512_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT));
    __mmask16 nan = _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q);
    if (nan) {
        float f[16];
        _mm512_storeu_ps(f, v);
        for (int k = 0; k < 16; k++)
            if (nan & (1u << k)) o[k] = cx_f16_from_f32(f[k]);
    }
}
#else
static inline vf ld_f16(const uint16_t *h) {
    return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)h));
}
static inline void st_f16(uint16_t *o, vf v) {
    _mm_storeu_si128((__m128i *)o, _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT));
    int nan = _mm256_movemask_ps(_mm256_cmp_ps(v, v, _CMP_UNORD_Q));
    if (nan) {
        float f[8];
        _mm256_storeu_ps(f, v);
        for (int k = 0; k < 8; k++)
            if (nan & (1 << k)) o[k] = cx_f16_from_f32(f[k]);
    }
}
#endif

/* Whole arrays of f16 to f32 and back, VW values an instruction (the core's F16C loops,
 * half_array.c, take 8; AVX-512 takes 16), bit for bit as half.h: the hardware's rounding to
 * nearest even, a NaN made the canonical quiet one by st_f16. The last VW - 1 values or fewer go
 * through the core's loops. */
static void f16_to_f32(const uint16_t *restrict h, float *restrict f, int64_t n) {
    int64_t i = 0;
    for (; i + VW <= n; i += VW) vf_store(f + i, ld_f16(h + i));
    if (i < n) cx_f16_to_f32_array(h + i, f + i, n - i);
}

static void f32_to_f16(const float *restrict f, uint16_t *restrict h, int64_t n) {
    int64_t i = 0;
    for (; i + VW <= n; i += VW) st_f16(h + i, vf_load(f + i));
    if (i < n) cx_f32_to_f16_array(f + i, h + i, n - i);
}

static inline vf vf_nan_or(vf x, vf y, vf pick_x) { /* x where pick_x or x is NaN, else y */
#if VW == 16
    __mmask16 m = _mm512_cmp_ps_mask(pick_x, _mm512_setzero_ps(), _CMP_NEQ_UQ) |
                  _mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q);
    return _mm512_mask_blend_ps(m, y, x);
#else
    __m256 m = _mm256_or_ps(pick_x, _mm256_cmp_ps(x, x, _CMP_UNORD_Q));
    return _mm256_blendv_ps(y, x, m);
#endif
}
#if VW == 16
#define vf_gt(x, y) _mm512_castsi512_ps(_mm512_movm_epi32(_mm512_cmp_ps_mask(x, y, _CMP_GT_OQ)))
#define vf_lt(x, y) _mm512_castsi512_ps(_mm512_movm_epi32(_mm512_cmp_ps_mask(x, y, _CMP_LT_OQ)))
#else
#define vf_gt(x, y) _mm256_cmp_ps(x, y, _CMP_GT_OQ)
#define vf_lt(x, y) _mm256_cmp_ps(x, y, _CMP_LT_OQ)
#endif

/* name_f16 and name_bf16: out = F(x, y) with x, y the widened operands (sa, sb as the f32
 * kernels: 1 for an array, 0 for one value); the last partial vector goes through a copy */
#define HALF_BINARY(name, LD, ST, F)                                                               \
    static void name(uint16_t *restrict o, const uint16_t *restrict a, const uint16_t *restrict b, \
                     int sa, int sb, int64_t n) {                                                  \
        uint16_t one_a[VW], one_b[VW];                                                             \
        for (int k = 0; k < VW; k++) one_a[k] = a[0], one_b[k] = b[0];                             \
        vf xs = LD(one_a), ys = LD(one_b);                                                         \
        int64_t i = 0;                                                                             \
        for (; i + VW <= n; i += VW) {                                                             \
            vf x = sa ? LD(a + i) : xs, y = sb ? LD(b + i) : ys;                                   \
            ST(o + i, F);                                                                          \
        }                                                                                          \
        if (i < n) {                                                                               \
            uint16_t ta[VW], tb[VW], to[VW];                                                       \
            for (int k = 0; k < VW; k++) {                                                         \
                ta[k] = i + k < n ? a[sa ? i + k : 0] : a[0];                                      \
                tb[k] = i + k < n ? b[sb ? i + k : 0] : b[0];                                      \
            }                                                                                      \
            vf x = LD(ta), y = LD(tb);                                                             \
            ST(to, F);                                                                             \
            memcpy(o + i, to, sizeof(uint16_t) * (size_t)(n - i));                                 \
        }                                                                                          \
    }
/* bf16 two vectors at a time without moving a value across lanes: 2 VW halves read as VW 32-bit
 * lanes hold an even element in each lane's low half and an odd one in its high half; shifting
 * the evens up and masking the odds widens both, F computes evens with evens and odds with odds,
 * and the rounded results are joined lane by lane (1M adds on one AVX-512 thread: faster than
 * widening and narrowing with vpmovzxwd and vpmovdw, which cross lanes).
 * The last partial pair goes through HALF_BINARY's loop. */
#define PAIRS_BF16(name, F)                                                                        \
    HALF_BINARY(name##_bf16_rest, ld_bf16, st_bf16, F)                                             \
    static void name##_bf16(uint16_t *restrict o, const uint16_t *restrict a,                      \
                            const uint16_t *restrict b, int sa, int sb, int64_t n) {               \
        vf xs = vf_set(cx_bf16_to_f32(a[0])), ys = vf_set(cx_bf16_to_f32(b[0]));                   \
        int64_t i = 0;                                                                             \
        for (; i + 2 * VW <= n; i += 2 * VW) {                                                     \
            vi pa = sa ? vi_loadu(a + i) : vf_as_vi(xs), pb = sb ? vi_loadu(b + i) : vf_as_vi(ys); \
            vf x = sa ? vi_as_vf(bf16_even(pa)) : xs, y = sb ? vi_as_vf(bf16_even(pb)) : ys;       \
            vi even = bf16_round_hi(vf_as_vi(F));                                                  \
            x = sa ? vi_as_vf(bf16_odd(pa)) : xs, y = sb ? vi_as_vf(bf16_odd(pb)) : ys;            \
            vi_storeu(o + i, bf16_join(even, bf16_round_hi(vf_as_vi(F))));                         \
        }                                                                                          \
        if (i < n) name##_bf16_rest(o + i, sa ? a + i : a, sb ? b + i : b, sa, sb, n - i);         \
    }
#define BOTH_HALF(name, F)                                                                         \
    HALF_BINARY(name##_f16, ld_f16, st_f16, F)                                                     \
    PAIRS_BF16(name, F)
BOTH_HALF(add, vf_add(x, y))
BOTH_HALF(subtract, vf_sub(x, y))
BOTH_HALF(multiply, vf_mul(x, y))
BOTH_HALF(divide, vf_div(x, y))
BOTH_HALF(max, vf_nan_or(x, y, vf_gt(x, y)))
BOTH_HALF(min, vf_nan_or(x, y, vf_lt(x, y)))

/* name##_f16 and name##_bf16 over n halves: VEC_UNARY's loop, the last partial vector on a
 * zero-padded copy, so that every element goes through the same vector code */
#define HALF_UNARY_ONE(fname, LD, ST, F) VEC_UNARY(fname, uint16_t, vf, VW, LD, ST, F)

/* f16 and bf16 negate, abs, sqrt and reciprocal in registers, on both tables: each vector widened,
 * the f32 kernel's operation, rounded once: the bits of the chunked path (a chunk widened into a
 * buffer, the f32 kernel over it, narrowed into the result), without its two trips through
 * buffers. */
#define HALF_UNARY_SIMPLE(name, F)                                                                 \
    HALF_UNARY_ONE(name##_f16, ld_f16, st_f16, F)                                                  \
    HALF_UNARY_ONE(name##_bf16, ld_bf16, st_bf16, F)
HALF_UNARY_SIMPLE(negate, vf_neg(x))
HALF_UNARY_SIMPLE(abs, vf_abs(x))
HALF_UNARY_SIMPLE(sqrt, vf_sqrt(x))
HALF_UNARY_SIMPLE(reciprocal, vf_div(vf_set(1.0f), x))

/* ==== f16/bf16 functions of one value in registers (AVX-512 only) ============================
 * Each vector of halves is widened, the function computed in f32 and the result rounded once to
 * the half type, without leaving the registers: on AVX-512 this beats the table of results
 * (blas_simd.c, half_table: one load a value), which the AVX2 table keeps (exp_f16 at 8 lanes was
 * slower than the table). Each is checked on every one of the 65,536 inputs
 * against the function in double rounded once (test_simd_kernels): at most 1 ulp off, and only
 * for the few results that lie within the f32 error of a rounding boundary.
 *
 * bf16 exp is exp_vf, the f32 exp, rounded once (bf16 has f32's exponent range, and exp_vf's
 * 0.91 ulp of f32 leave every bf16 result correctly rounded); f16 exp has a kernel of its own. */
#if VW == 16
/* f16 exp: x clamped to [-18, 12] (beyond, the f16 result is 0 or infinite), NaN staying NaN;
 * x = (k / 16) ln 2 + r with k = round(16 x / ln 2) (|k| <= 416: one f32 ln 2 / 16 leaves r within
 * 6e-7 of exact, a thousandth of an f16 half ulp), e^r = 1 + r (c1 + c2 r) on |r| <= ln 2 / 32
 * (minimax in relative error, 4.3e-7), times 2^(k / 16): 2^((k mod 16) / 16) from a table of 16
 * lanes (vpermps reads the index from the low bits of k, which the rounding constant 1.5 * 2^23
 * leaves in the sum's low bits) and 2^floor(k / 16) added to its exponent as an integer (k << 19
 * carries floor(k / 16) into the exponent field; each entry has j << 19 taken off for the part of j
 * it carries into the fraction). All results here are normal floats, so no scaling instruction is
 * needed. 11 operations a vector where a degree-5 polynomial takes 12 and a two-part reduction:
 * faster, the function alone, from C, on one thread (1M values in [-1, 1]) and on both threads (1M
 * split in two, pinned, median of 400), on the machine of the session that wrote it; on the Intel
 * Xeon of 2026-11-28 (Cascade Lake), whose 16-lane instructions share two ports, it runs slower,
 * as fast in L1 as in memory. */
static const uint32_t exp16_table[16] __attribute__((aligned(64))) = {
    0x3f800000, 0x3f7daac3, 0x3f7b95c2, 0x3f79c3d3, 0x3f7837f0, 0x3f76f532, 0x3f75fed7, 0x3f75583f,
    0x3f7504f3, 0x3f7508a4, 0x3f75672a, 0x3f76248c, 0x3f7744fd, 0x3f78ccdf, 0x3f7ac0c7, 0x3f7d257d};
static inline vf exp_f16_vf(vf x) {
    x = vf_min(vf_set(12.0f), vf_max(vf_set(-18.0f), x)); /* x when x is NaN */
    vf z = vf_fma(x, vf_set(23.08312f), vf_set(12582912.0f));
    vf k = vf_sub(z, vf_set(12582912.0f));
    vf r = vf_fnma(k, vf_set(0.0433217f), x);
    __m512i zi = _mm512_castps_si512(z);
    vf t = _mm512_permutexvar_ps(zi, _mm512_load_ps((const float *)exp16_table));
    vf s = _mm512_castsi512_ps(_mm512_add_epi32(_mm512_castps_si512(t), _mm512_slli_epi32(zi, 19)));
    vf q = vf_mul(r, vf_fma(r, vf_set(0.5000001f), vf_set(1.0000584f)));
    return vf_fma(s, q, s); /* NaN from r when x is NaN */
}
/* f16 and bf16 tanh: x P(x^2) / Q(x^2), P and Q of degree 3 (fit_rational.py: minimax in relative
 * error on [0, 4.6], 2.8e-8 in double; degree 3 over 2 left 36 f16 results 1 ulp off), x clamped
 * to [-4.6, 4.6] first: from 4.51 on, tanh rounds to 1 in f16 (from 3.47 in bf16). Correctly
 * rounded on every f16 and every bf16 (test_simd_kernels); NaN from x, -0 from -0, and x itself
 * for a tiny x, whose square is 0. One thread, 1M values in [-1, 1], from C, on AMD Zen 5, whose
 * 16-lane division is fast: f16 ran faster this way than from the table of results, with vrcp14ps
 * and one correction in place of the division, from exp and a division, or by binades (as bf16
 * tanh was computed); bf16 (rounded by AVX512-BF16) faster than by binades, a polynomial of
 * degree 5 per binade of |x| picked by its exponent. */
/* c0 + c1 s + c2 s^2 + c3 s^3 by Horner's rule, one rounding a step (the coefficients in the order
 * fit_rational.py prints them) */
static inline vf poly3_vf(vf s, float c0, float c1, float c2, float c3) {
    return vf_fma(vf_fma(vf_fma(vf_set(c3), s, vf_set(c2)), s, vf_set(c1)), s, vf_set(c0));
}
static inline vf tanh_half_vf(vf x) {
    x = vf_min(vf_set(4.6f), vf_max(vf_set(-4.6f), x)); /* x when x is NaN */
    vf s = vf_mul(x, x);
    vf p = poly3_vf(s, 1.0f, 0.125870794f, 0.00254827109f, 5.43468195e-06f);
    vf q = poly3_vf(s, 1.0f, 0.459203809f, 0.0222834125f, 0.000173898719f);
    return vf_div(vf_mul(x, p), q);
}

#include "binade_fits.h"
/* bf16 gelu: gelu(x) = x Phi(x), Phi the normal distribution function. For x in (-2, 3),
 * Phi(x) = 1/2 + x P(x^2) / Q(x^2), P and Q of degree 3 (fit_rational.py: minimax in the relative
 * error of Phi(-|x|) up to 2, where 1/2 - |x| P / Q cancels, of Phi(|x|) beyond; 2.3e-7), one
 * division: gelu_phi_vf. From 3 on, x: gelu(x) rounds to x in bf16 there. From -2 down, Phi(x) =
 * exp(-x^2 / 2) M(-x), M of degree 6 on binades 1 .. 3 (from -16 on down, 0): gelu_tail_phi,
 * computed only for the vectors that hold such an x. Correctly rounded on every bf16
 * (test_simd_kernels; -inf gives NaN, as x Phi(x) does in double) but for 128 of the tiny (|x| <
 * 2^-125, as before this form): x Phi(x) is x / 2 in f32 there, 256 of them ties, and rounding
 * to even takes the wrong side of half of them, where the x^2 / sqrt(2 pi) beside x / 2 would
 * round up (1 ulp off; the test's double reference gives x / 2 too). The f32 kernel's erf
 * (absolute error 1.5e-7) is 4% off at x = -5 and gives 0 from -6 on. One thread, values in
 * [-1, 1]: faster than by half binades (before 2026-11-27, a polynomial of degree 4 per half
 * binade of x) and than the table; in [-4, 4], a third of them in the tail, slower than the
 * table: on large arrays the mixed kernel below runs it beside the table, and takes a vector with
 * a tail lane from the table. */
static inline vf gelu_tail_phi(vf a) { /* Phi(-a) for a >= 2: 0 from 16 on */
    a = vf_min(a, vf_set(16.0f));
    __m512i e = _mm512_srli_epi32(_mm512_castps_si512(a), 23);
    vf m = _mm512_castsi512_ps(_mm512_ternarylogic_epi32(_mm512_castps_si512(a),
                                                         _mm512_set1_epi32(0x007fffff),
                                                         _mm512_set1_epi32(0x3f800000), 0xEA));
    vf t = vf_sub(m, vf_set(1.5f));
    vf p = _mm512_permutexvar_ps(e, _mm512_load_ps(gelu_bf16_tail_fit[GELU_BF16_TAIL_FIT_DEG]));
    for (int k = GELU_BF16_TAIL_FIT_DEG - 1; k >= 0; k--)
        p = vf_fma(p, t, _mm512_permutexvar_ps(e, _mm512_load_ps(gelu_bf16_tail_fit[k])));
    /* exp(-a^2 / 2) with a^2 = h + l exactly */
    vf h = vf_mul(a, a), l = vf_fma(a, a, vf_neg(h));
    vf ex = exp_vf(vf_mul(h, vf_set(-0.5f)));
    return vf_mul(p, vf_fnma(vf_mul(l, vf_set(0.5f)), ex, ex));
}
/* the lanes whose x is in gelu's tail (x <= -2) */
static inline __mmask16 gelu_tail(vf x) {
    return _mm512_cmp_ps_mask(x, vf_set(-2.0f), _CMP_LE_OQ);
}
/* Phi(x) = 1/2 + x P(x^2) / Q(x^2), for x in (-2, 3): gelu_half_vf takes the others elsewhere */
static inline vf gelu_phi_vf(vf x) {
    vf s = vf_mul(x, x);
    vf p = poly3_vf(s, 0.3989425f, 0.0257921498f, 0.00347367767f, 2.26556494e-05f);
    vf q = poly3_vf(s, 1.0f, 0.231322363f, 0.0222523492f, 0.000966370339f);
    return vf_fma(x, vf_div(p, q), vf_set(0.5f));
}
static inline vf gelu_of_phi(vf x, vf phi) {
    return _mm512_mask_blend_ps(_mm512_cmp_ps_mask(x, vf_set(3.0f), _CMP_GE_OQ), vf_mul(x, phi), x);
}
static inline vf gelu_half_vf(vf x) {
    vf phi = gelu_phi_vf(x);
    __mmask16 tail = gelu_tail(x);
    if (tail) phi = _mm512_mask_blend_ps(tail, phi, gelu_tail_phi(vf_abs(x)));
    return gelu_of_phi(x, phi);
}

/* An f16 function whose result is NaN exactly where its argument is (exp, tanh): 2 vectors at a
 * time, their NaNs found among the 32 arguments with one integer compare, instead of each result's
 * st_f16 testing its 16 lanes (one thread, 1M exps: faster, and nearly as fast as testing none),
 * and made the canonical quiet NaN with the argument's sign, as st_f16 makes them.
 * The last 0 - 31 values go through HALF_UNARY_ONE's loop. */
#define HALF_UNARY_F16_NAN_IN(name, F)                                                             \
    HALF_UNARY_ONE(name##_rest, ld_f16, st_f16, F)                                                 \
    static void name(uint16_t *restrict o, const uint16_t *restrict a, int64_t n) {                \
        int64_t i = 0;                                                                             \
        for (; i + 2 * VW <= n; i += 2 * VW) {                                                     \
            __m512i h = _mm512_loadu_si512(a + i);                                                 \
            __mmask32 nan = _mm512_cmpgt_epu16_mask(                                               \
                _mm512_and_si512(h, _mm512_set1_epi16(0x7fff)), _mm512_set1_epi16(0x7c00));        \
            vf x = _mm512_cvtph_ps(_mm512_castsi512_si256(h));                                     \
            _mm256_storeu_si256((__m256i *)(o + i),                                                \
                                _mm512_cvtps_ph(F, _MM_FROUND_TO_NEAREST_INT));                    \
            x = _mm512_cvtph_ps(_mm512_extracti64x4_epi64(h, 1));                                  \
            _mm256_storeu_si256((__m256i *)(o + i + VW),                                           \
                                _mm512_cvtps_ph(F, _MM_FROUND_TO_NEAREST_INT));                    \
            if (nan)                                                                               \
                for (int k = 0; k < 2 * VW; k++)                                                   \
                    if (nan & (1u << k)) o[i + k] = (uint16_t)((a[i + k] & 0x8000) | 0x7e00);      \
        }                                                                                          \
        if (i < n) name##_rest(o + i, a + i, n - i);                                               \
    }
HALF_UNARY_F16_NAN_IN(exp_f16, exp_f16_vf(x))
HALF_UNARY_F16_NAN_IN(tanh_f16, tanh_half_vf(x))
/* A bf16 function of one value, 2 vectors at a time as PAIRS_BF16 takes them: 32 halves read as 16
 * lanes, the evens and the odds widened in place, each computed and rounded, and the two joined
 * lane by lane, where ld_bf16 and st_bf16 cross lanes (vpmovzxwd, vpmovdw) for each vector. On an
 * Intel Xeon (Cascade Lake, 2.5 GHz, no AVX512-BF16) this made tanh, exp and gelu faster, from C
 * on one thread (1M values in [-1, 1], gelu in registers) and through Cascade on both threads
 * (1M, gelu mixed, below). The last 0 - 31 values go through HALF_UNARY_ONE's loop. */
#define LD2_BF16_PAIRS(h, x0, x1)                                                                  \
    do {                                                                                           \
        vi p_ = vi_loadu(h);                                                                       \
        x0 = vi_as_vf(bf16_even(p_)), x1 = vi_as_vf(bf16_odd(p_));                                 \
    } while (0)
static inline void st2_bf16_pairs(uint16_t *o, vf even, vf odd) {
    vi_storeu(o, bf16_join(bf16_round_hi(vf_as_vi(even)), bf16_round_hi(vf_as_vi(odd))));
}
/* fname over n bf16, 2 VW at a time: LD2 reads them into x0 and x1, ST2 writes the results back
 * in the same order (LD2_BF16_PAIRS and st2_bf16_pairs here, two vectors rounded by one
 * instruction with AVX512-BF16 below); REST takes the last 0 - 31 */
#define BF16_UNARY_2(fname, ATTR, LD2, ST2, REST, F)                                               \
    ATTR static void fname(uint16_t *restrict o, const uint16_t *restrict a, int64_t n) {          \
        int64_t i = 0;                                                                             \
        for (; i + 2 * VW <= n; i += 2 * VW) {                                                     \
            vf x0, x1;                                                                             \
            LD2(a + i, x0, x1);                                                                    \
            vf x = x0;                                                                             \
            vf y0 = (F);                                                                           \
            x = x1;                                                                                \
            ST2(o + i, y0, (F));                                                                   \
        }                                                                                          \
        if (i < n) REST(o + i, a + i, n - i);                                                      \
    }
#define HALF_UNARY_BF16_PAIRS(name, F)                                                             \
    HALF_UNARY_ONE(name##_rest, ld_bf16, st_bf16, F)                                               \
    BF16_UNARY_2(name, , LD2_BF16_PAIRS, st2_bf16_pairs, name##_rest, F)
HALF_UNARY_BF16_PAIRS(exp_bf16, exp_vf(x))
HALF_UNARY_BF16_PAIRS(tanh_bf16, tanh_half_vf(x))
HALF_UNARY_BF16_PAIRS(gelu_bf16, gelu_half_vf(x))

/* ==== the register kernels beside the table ===================================================
 * On a large array, a function of one value that has both a register kernel and a table of its
 * results (blas_simd.c builds the table with the register kernel, so both give the same bits)
 * can run them interleaved: two vectors through the registers, then 16 values through the table,
 * and so on, the vectors keeping the floating-point pipes busy and the table the load ports. On
 * one thread that paid (1M bf16 in [-1, 1]: tanh by binades ran faster mixed than in registers
 * or from the table; 2 vectors to 8, 32 or 64 table values, or 4 to 32, were slower), but with
 * both threads of the pool at work the two cores here share more than their caches, and less is
 * left (1M values split in two, median of 300 runs: tanh ran fastest in registers, then mixed,
 * then from the table; gelu by half binades a little faster mixed). So only gelu runs mixed,
 * where a vector with a lane in its tail is also taken from the table instead of its slow exp;
 * tanh's rational form is faster than either now. With gelu's rational form, mixed and in
 * registers alone take the same time on values in [-1, 1] (one thread), and mixed keeps its tail
 * vectors cheap. */
#define MIX_TABLE 16
/* LD2 reads 2 VW halves into x0 and x1, ST2 writes them back from the results in the same order:
 * as PAIRS_BF16 takes them (evens and odds) on AVX-512, as two vectors with AVX512-BF16 */
#define GELU_MIX(fname, ATTR, LD2, ST2)                                                            \
    ATTR static void fname(uint16_t *restrict o, const uint16_t *restrict a, int64_t n,            \
                           const uint16_t *restrict tab) {                                         \
        int64_t i = 0;                                                                             \
        for (; i + 2 * VW + MIX_TABLE <= n; i += 2 * VW + MIX_TABLE) {                             \
            vf x0, x1;                                                                             \
            LD2(a + i, x0, x1);                                                                    \
            if (gelu_tail(x0) | gelu_tail(x1)) {                                                   \
                simd_table_lookup(o + i, a + i, tab, 2 * VW);                                      \
            } else {                                                                               \
                ST2(o + i, gelu_of_phi(x0, gelu_phi_vf(x0)), gelu_of_phi(x1, gelu_phi_vf(x1)));    \
            }                                                                                      \
            simd_table_lookup(o + i + 2 * VW, a + i + 2 * VW, tab, MIX_TABLE);                     \
        }                                                                                          \
        simd_table_lookup(o + i, a + i, tab, n - i);                                               \
    }
GELU_MIX(gelu_bf16_mix, , LD2_BF16_PAIRS, st2_bf16_pairs)
#endif

/* ==== sums ======================================================================================
 * f32: blocks of SUM_BLOCK values summed in four f32 vector accumulators (each lane adds
 * SUM_BLOCK / (4 VW) values: 16 with AVX-512, 32 with AVX2), each block's total added in double.
 * The error is that of a 32-term f32 sum per lane, far inside the bound of an f32 accumulator
 * the property tests allow (n 2^-24 sum |x|), at the speed of f32 adds: converting every value
 * to double halved the throughput. f64 sums in four f64 vector accumulators. The order of the
 * additions differs from the cpu's. */
#define SUM_BLOCK 2048

/* f32 sum of at most SUM_BLOCK values, in four vector accumulators (and one for the rest) */
static inline vf block_sum(const float *a, int64_t n) {
    vf s0 = vf_set(0), s1 = vf_set(0), s2 = vf_set(0), s3 = vf_set(0);
    int64_t k = 0;
    for (; k + 4 * VW <= n; k += 4 * VW) {
        s0 = vf_add(s0, vf_load(a + k));
        s1 = vf_add(s1, vf_load(a + k + VW));
        s2 = vf_add(s2, vf_load(a + k + 2 * VW));
        s3 = vf_add(s3, vf_load(a + k + 3 * VW));
    }
    for (; k + VW <= n; k += VW) s0 = vf_add(s0, vf_load(a + k));
    return vf_add(vf_add(s0, s1), vf_add(s2, s3));
}

static double sum_f32(const float *a, int64_t n) {
    double s = -0.0;
    int64_t i = 0;
    for (; i < n; i += SUM_BLOCK) {
        int64_t m = n - i < SUM_BLOCK ? n - i : SUM_BLOCK;
        s += vf_reduce_add_d(block_sum(a + i, m));
        for (int64_t k = m - m % VW; k < m; k++) s += a[i + k];
    }
    return s;
}

static double sum_f64(const double *a, int64_t n) {
    vd s0 = vd_set(0), s1 = vd_set(0), s2 = vd_set(0), s3 = vd_set(0);
    int64_t i = 0;
    for (; i + 4 * DW <= n; i += 4 * DW) {
        s0 = vd_add(s0, vd_load(a + i));
        s1 = vd_add(s1, vd_load(a + i + DW));
        s2 = vd_add(s2, vd_load(a + i + 2 * DW));
        s3 = vd_add(s3, vd_load(a + i + 3 * DW));
    }
    double s = vd_reduce_add(vd_add(vd_add(s0, s1), vd_add(s2, s3)));
    for (; i < n; i++) s += a[i];
    return s;
}

/* f16 and bf16 sums read in place: blocks of 1024 values (blas_simd.c's CHUNK), each summed as
 * sum_f32 sums a block, so the result is the one widening each block and calling sum_f32 gives,
 * without the copy */
#define HALF_SUM(name, LD, SCALAR)                                                                 \
    static double name(const uint16_t *a, int64_t n) {                                             \
        double s = -0.0;                                                                           \
        for (int64_t i = 0; i < n; i += 1024) {                                                    \
            int64_t m = n - i < 1024 ? n - i : 1024;                                               \
            const uint16_t *p = a + i;                                                             \
            vf s0 = vf_set(0), s1 = vf_set(0), s2 = vf_set(0), s3 = vf_set(0);                     \
            int64_t k = 0;                                                                         \
            for (; k + 4 * VW <= m; k += 4 * VW) {                                                 \
                s0 = vf_add(s0, LD(p + k));                                                        \
                s1 = vf_add(s1, LD(p + k + VW));                                                   \
                s2 = vf_add(s2, LD(p + k + 2 * VW));                                               \
                s3 = vf_add(s3, LD(p + k + 3 * VW));                                               \
            }                                                                                      \
            for (; k + VW <= m; k += VW) s0 = vf_add(s0, LD(p + k));                               \
            s += vf_reduce_add_d(vf_add(vf_add(s0, s1), vf_add(s2, s3)));                          \
            for (k = m - m % VW; k < m; k++) s += SCALAR(p[k]);                                    \
        }                                                                                          \
        return s;                                                                                  \
    }
HALF_SUM(sum_f16, ld_f16, cx_f16_to_f32)

/* Lanes 0 .. VW/2 - 1 of a and b interleaved (a0, b0, a1, b1 ...), and lanes VW/2 .. VW - 1. */
#if VW == 16
static inline vf vf_zip_lo(vf a, vf b) {
    return _mm512_permutex2var_ps(
        a, _mm512_setr_epi32(0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23), b);
}
static inline vf vf_zip_hi(vf a, vf b) {
    return _mm512_permutex2var_ps(
        a, _mm512_setr_epi32(8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31), b);
}
#else
static inline vf vf_zip_lo(vf a, vf b) {
    return _mm256_permute2f128_ps(_mm256_unpacklo_ps(a, b), _mm256_unpackhi_ps(a, b), 0x20);
}
static inline vf vf_zip_hi(vf a, vf b) {
    return _mm256_permute2f128_ps(_mm256_unpacklo_ps(a, b), _mm256_unpackhi_ps(a, b), 0x31);
}
#endif

/* The bf16 sum: the additions of HALF_SUM with ld_bf16, in the same order, so the same bits. In a
 * block's main loop, lane j of sum_f32's accumulator q adds the elements at offsets 4 VW m + VW q
 * + j, m = 0, 1 ...; here each 2 VW halves are read as VW 32-bit lanes whose even halves (offset
 * 2i of the 2 VW) and odd halves (2i + 1) become f32 in place, one instruction each (a shift, a
 * mask), and are added apart: e0 and o0 for the first 2 VW offsets of every 4 VW, e1 and o1 for
 * the next. Each offset keeps a lane of its own, so interleaving e0 and o0 gives sum_f32's first
 * two accumulators back (and e1, o1 the last two) for the same reduction. 2 VW values cost 4
 * operations on the vector ports where widening each VW took 2 (vpmovzxwd, vpslld) and its add 1
 * (test_half_sum checks the bits against widening and sum_f32). */
static double sum_bf16(const uint16_t *a, int64_t n) {
    double s = -0.0;
    for (int64_t i = 0; i < n; i += 1024) {
        int64_t m = n - i < 1024 ? n - i : 1024;
        const uint16_t *p = a + i;
        vf e0 = vf_set(0), o0 = vf_set(0), e1 = vf_set(0), o1 = vf_set(0);
        int64_t k = 0;
        for (; k + 4 * VW <= m; k += 4 * VW) {
            vi x = vi_loadu(p + k), y = vi_loadu(p + k + 2 * VW);
            e0 = vf_add(e0, vi_as_vf(bf16_even(x)));
            o0 = vf_add(o0, vi_as_vf(bf16_odd(x)));
            e1 = vf_add(e1, vi_as_vf(bf16_even(y)));
            o1 = vf_add(o1, vi_as_vf(bf16_odd(y)));
        }
        vf s0 = vf_zip_lo(e0, o0), s1 = vf_zip_hi(e0, o0);
        vf s2 = vf_zip_lo(e1, o1), s3 = vf_zip_hi(e1, o1);
        for (; k + VW <= m; k += VW) s0 = vf_add(s0, ld_bf16(p + k));
        s += vf_reduce_add_d(vf_add(vf_add(s0, s1), vf_add(s2, s3)));
        for (k = m - m % VW; k < m; k++) s += cx_bf16_to_f32(p[k]);
    }
    return s;
}

/* acc[i] += row 0's a[i], then row 1's ... (rows `stride` elements apart), each sum in order:
 * four rows a pass, so that the accumulators are loaded and stored once for four rows instead
 * of every row (a 1000 x 1000 f32 sum over axis 0 went through them 1000 times) */
#define SUM_ROWS(name, T)                                                                          \
    static void name(double *restrict acc, const T *restrict a, int64_t stride, int64_t rows,      \
                     int64_t n) {                                                                  \
        int64_t r = 0;                                                                             \
        for (; r + 4 <= rows; r += 4) {                                                            \
            const T *restrict a0 = a + r * stride, *restrict a1 = a0 + stride;                     \
            const T *restrict a2 = a1 + stride, *restrict a3 = a2 + stride;                        \
            for (int64_t i = 0; i < n; i++) acc[i] = (((acc[i] + a0[i]) + a1[i]) + a2[i]) + a3[i]; \
        }                                                                                          \
        for (; r < rows; r++) {                                                                    \
            const T *restrict a0 = a + r * stride;                                                 \
            for (int64_t i = 0; i < n; i++) acc[i] += a0[i];                                       \
        }                                                                                          \
    }
SUM_ROWS(sum_row_f32, float)
SUM_ROWS(sum_row_f64, double)

/* ==== fused rows ===============================================================================
 * softmax as the decomposition computes it -- m = max (NaN wins), e = exp(x - m), s = sum(e) in
 * double rounded to f32, e / s -- in three passes over one row instead of five ops over the
 * tensor; log_softmax: (x - m) - log(s). */
static float row_max_f32(const float *a, int64_t n) {
    vf m0 = vf_set(-INFINITY), m1 = vf_set(-INFINITY);
    int nan = 0;
    int64_t i = 0;
    for (; i + 2 * VW <= n; i += 2 * VW) {
        vf x0 = vf_load(a + i), x1 = vf_load(a + i + VW);
        nan |= vf_nan_mask(x0) | vf_nan_mask(x1);
        m0 = vf_max(m0, x0);
        m1 = vf_max(m1, x1);
    }
    float m = vf_reduce_max(vf_max(m0, m1));
    for (; i < n; i++) {
        nan |= a[i] != a[i];
        m = a[i] > m ? a[i] : m;
    }
    return nan ? NAN : m;
}

/* sum(exp(a - m)) in double, SUM_BLOCK values at a time in f32 lanes, as the cpu's sum of the
 * exp op's f32 results; each exp(a - m) also stored at o unless o is NULL */
static double sum_exp_f32(float *o, const float *a, int64_t n, float m) {
    vf vm = vf_set(m), acc = vf_set(0);
    double s = 0;
    int64_t i = 0, block = 0;
    for (; i + VW <= n; i += VW) {
        vf e = exp_vf(vf_sub(vf_load(a + i), vm));
        if (o) vf_store(o + i, e);
        acc = vf_add(acc, e);
        if (++block == SUM_BLOCK / VW) { /* each lane adds at most SUM_BLOCK / VW terms in f32 */
            s += vf_reduce_add_d(acc);
            acc = vf_set(0);
            block = 0;
        }
    }
    s += vf_reduce_add_d(acc);
    if (i < n) {
        float t[VW];
        for (int k = 0; k < VW; k++) t[k] = i + k < n ? a[i + k] - m : -INFINITY;
        vf_store(t, exp_vf(vf_load(t)));
        for (int64_t k = 0; k < n - i; k++) {
            if (o) o[i + k] = t[k];
            s += t[k];
        }
    }
    return s;
}

/* o[k] / s for every k, each correctly rounded, as the division rounds it, without a division a
 * vector: a 16-lane vdivps takes about 10 cycles of the Intel Xeon (Cascade Lake) where a multiply
 * and two fused multiply-adds take 1.5, and softmax's last step spent much of its time there
 * (perf, 1000 x 1000 f32). With r = 1 / s rounded once, q = o r is within an ulp of o / s, and
 * q + r (o - q s) is o / s correctly rounded (Markstein's theorem) where the remainder o - q s is
 * exact in the fused multiply-add: it is a multiple of ulp(q) ulp(s), which f32 holds while
 * ulp(q) ulp(s) >= 2^-149, so for s >= 1 (ulp(s) >= 2^-23) while |q| >= 2^-102. Lanes below
 * that (zeros too, whose sign the correction loses), NaN and infinities take the division itself,
 * and so does a row whose s is below 1 or above 2^100 (r must be a normal float); softmax divides
 * by a sum of at least 1. test_div_f32 checks the bits against the division. */
static void div_f32(float *o, int64_t n, float s) {
    int64_t i = 0;
    if (s >= 1.0f && s <= 0x1p100f) {
        const float r = 1.0f / s;
        const vf vs = vf_set(s), vr = vf_set(r), least = vf_set(0x1p-102f);
        for (; i + VW <= n; i += VW) {
            vf a = vf_load(o + i), q = vf_mul(a, vr);
            q = vf_fma(vf_fnma(q, vs, a), vr, q);
            vf m = vf_abs(q);
#if VW == 16
            __mmask16 ok = _mm512_cmp_ps_mask(m, least, _CMP_GE_OQ) &
                           _mm512_cmp_ps_mask(m, vf_set(INFINITY), _CMP_LT_OQ);
            if (ok != 0xffff) q = _mm512_mask_div_ps(q, (__mmask16)~ok, a, vs);
#else
            __m256 ok = _mm256_and_ps(_mm256_cmp_ps(m, least, _CMP_GE_OQ),
                                      _mm256_cmp_ps(m, vf_set(INFINITY), _CMP_LT_OQ));
            if (_mm256_movemask_ps(ok) != 0xff) q = _mm256_blendv_ps(_mm256_div_ps(a, vs), q, ok);
#endif
            vf_store(o + i, q);
        }
    }
    for (; i < n; i++) o[i] = o[i] / s;
}

static void softmax_f32(float *o, const float *a, int64_t n, int log_form) {
    if (n == 0) return;
    float m = row_max_f32(a, n);
    float sf = (float)sum_exp_f32(log_form ? NULL : o, a, n, m);
    if (log_form) {
        float ls = logf(sf);
        for (int64_t k = 0; k < n; k++) o[k] = (a[k] - m) - ls;
    } else {
        div_f32(o, n, sf);
    }
}

/* categorical cross-entropy of one row as the decomposition computes it: -sum(y * log_softmax(p))
 * with from_logits, else -sum(y * log(clip(p, 1e-7, 1 - 1e-7))), each product rounded to f32 and
 * summed in double, the sum rounded to f32 and negated. XENT_CHUNK products at a time. */
#define XENT_CHUNK 512
static float xent_f32(const float *restrict y, const float *restrict p, int64_t n,
                      int from_logits) {
    float t[XENT_CHUNK], m = 0, ls = 0;
    const float lo = (float)1e-7, hi = (float)(1 - 1e-7);
    if (from_logits && n > 0) {
        m = row_max_f32(p, n);
        ls = logf((float)sum_exp_f32(NULL, p, n, m));
    }
    double s = 0;
    for (int64_t i = 0; i < n; i += XENT_CHUNK) {
        int64_t len = n - i < XENT_CHUNK ? n - i : XENT_CHUNK;
        if (from_logits) {
            for (int64_t k = 0; k < len; k++) t[k] = y[i + k] * ((p[i + k] - m) - ls);
        } else {
            for (int64_t k = 0; k < len; k++) {
                float q = p[i + k];
                t[k] = q < lo ? lo : q > hi ? hi : q; /* NaN stays NaN, as clip keeps it */
            }
            log_f32(t, t, len);
            for (int64_t k = 0; k < len; k++) t[k] = y[i + k] * t[k];
        }
        s += sum_f32(t, len);
    }
    return -(float)s;
}

/* gelu: 0.5 x (1 + erf(x / sqrt 2)), or with the tanh approximation x sigmoid(2u), u = sqrt(2/pi)
 * (x + 0.044715 x^3), the decomposition's formulas in f32. Inside gelu, erf is Abramowitz and
 * Stegun's 7.1.26, 1 - t (a1 + t (a2 + ... a5 t)) exp(-z^2) with t = 1 / (1 + p z), z = |x| /
 * sqrt 2: absolute error below 1.5e-7, so gelu's error stays below 1e-7 |x| -- within the
 * composites' tolerance (differential suite: 8 eps (|gelu| + |x|)) -- and faster on one core here
 * than with erf_vf (which the erf op keeps for its 1.07 ulp), with a 2-ulp exp of its own (slower
 * with SLEEF's exp; exp_vf now, as fast and within 0.91 ulp). gelu's tanh form and silu take
 * sigmoid_vf. */
static inline vf erf_as_vf(vf x) {
    vf z = vf_abs(x);
    vf t = vf_div(vf_set(1.0f), vf_add(vf_set(1.0f), vf_mul(z, vf_set(0.3275911f))));
    vf p = vf_set(1.061405429f);
    p = vf_add(vf_mul(p, t), vf_set(-1.453152027f));
    p = vf_add(vf_mul(p, t), vf_set(1.421413741f));
    p = vf_add(vf_mul(p, t), vf_set(-0.284496736f));
    p = vf_add(vf_mul(p, t), vf_set(0.254829592f));
    p = vf_mul(p, t);
    vf r = vf_fnma(p, exp_vf(vf_neg(vf_mul(z, z))), vf_set(1.0f));
    return vf_pick_nonneg(x, r, vf_neg(r));
}
static inline vf gelu_vf(vf x) {
    vf e = erf_as_vf(vf_mul(x, vf_set((float)M_SQRT1_2)));
    return vf_mul(vf_mul(x, vf_set(0.5f)), vf_add(e, vf_set(1.0f)));
}
static inline vf gelu_tanh_vf(vf x) {
    vf x3 = vf_mul(vf_mul(x, x), x);
    vf u = vf_add(x, vf_mul(x3, vf_set(0.044715f)));
    return vf_mul(x, sigmoid_vf(vf_mul(u, vf_set((float)(2 * sqrt(2 / M_PI))))));
}
F32_UNARY(gelu, gelu_vf(x))
F32_UNARY(gelu_tanh, gelu_tanh_vf(x))
F32_UNARY(silu, vf_mul(x, sigmoid_vf(x)))

/* layer_norm of one row of n: the mean and the variance summed as sum_f32 sums, then
 * (x - mean) * (1 / sqrt(variance + eps)) * gamma + beta in f32 as the decomposition does; gamma
 * and beta are rows of n (gs, bs = 1) or one value each */
static void layer_norm_f32(float *restrict o, const float *restrict x, const float *restrict g,
                           const float *restrict b, int gs, int bs, int64_t n, float eps) {
    if (n == 0) return;
    float m = (float)(sum_f32(x, n) / (double)n);
    /* the variance as the decomposition computes it: (x - m)^2 rounded to f32, summed */
    vf vm = vf_set(m);
    double v = 0;
    int64_t i = 0;
    for (; i < n - n % VW; i += SUM_BLOCK) {
        int64_t end = i + SUM_BLOCK < n - n % VW ? i + SUM_BLOCK : n - n % VW, k = i;
        vf a0 = vf_set(0), a1 = vf_set(0);
        for (; k + 2 * VW <= end; k += 2 * VW) {
            vf d0 = vf_sub(vf_load(x + k), vm), d1 = vf_sub(vf_load(x + k + VW), vm);
            a0 = vf_add(a0, vf_mul(d0, d0));
            a1 = vf_add(a1, vf_mul(d1, d1));
        }
        for (; k < end; k += VW) {
            vf d = vf_sub(vf_load(x + k), vm);
            a0 = vf_add(a0, vf_mul(d, d));
        }
        v += vf_reduce_add_d(vf_add(a0, a1));
    }
    for (i = n - n % VW; i < n; i++) v += (x[i] - m) * (x[i] - m);
    float inv = 1.0f / sqrtf((float)(v / (double)n) + eps);
    if (gs && bs) {
        for (int64_t k = 0; k < n; k++) o[k] = (x[k] - m) * inv * g[k] + b[k];
    } else {
        for (int64_t k = 0; k < n; k++) o[k] = (x[k] - m) * inv * g[gs ? k : 0] + b[bs ? k : 0];
    }
}

static void gelu_any_f32(float *o, const float *a, int64_t n, int tanh_approx) {
    if (tanh_approx)
        gelu_tanh_f32(o, a, n);
    else
        gelu_f32(o, a, n);
}

/* ==== max_pool2d 2 x 2 of f16/bf16 rows (blas_pool2d.c) =========================================
 * A window's two halves in a row are one 32-bit lane (the left in its low half); each value's key,
 * -magnitude for a negative sign, +magnitude otherwise, orders as the values do, so the maximum
 * of four keys, turned back into sign and magnitude, is the window's largest element. A last
 * partial vector is read and written under a mask (AVX2 writes it through a copy). */
/* v: one half per lane, to its key; *odd marks a lane that holds a NaN or -0, *nan one with a
 * NaN (either may be NULL) */
static inline vi pool_key(vi v, vi *odd, vi *nan, vi inf) {
#if VW == 16
    vi mag = _mm512_and_si512(v, _mm512_set1_epi32(0x7fff));
    vi neg = _mm512_srli_epi32(v, 15); /* 0 or 1 */
    __mmask16 is_nan = _mm512_cmpgt_epi32_mask(mag, inf);
    if (nan) *nan = _mm512_or_si512(*nan, _mm512_movm_epi32(is_nan));
    if (odd)
        *odd = _mm512_or_si512(*odd, _mm512_movm_epi32(is_nan | _mm512_cmpeq_epi32_mask(
                                                                    v, _mm512_set1_epi32(0x8000))));
    return _mm512_add_epi32(_mm512_xor_si512(mag, _mm512_sub_epi32(_mm512_setzero_si512(), neg)),
                            neg);
#else
    vi mag = _mm256_and_si256(v, _mm256_set1_epi32(0x7fff));
    vi neg = _mm256_srli_epi32(v, 15);
    vi is_nan = _mm256_cmpgt_epi32(mag, inf);
    if (nan) *nan = _mm256_or_si256(*nan, is_nan);
    if (odd)
        *odd = _mm256_or_si256(
            *odd, _mm256_or_si256(is_nan, _mm256_cmpeq_epi32(v, _mm256_set1_epi32(0x8000))));
    return _mm256_add_epi32(_mm256_xor_si256(mag, _mm256_sub_epi32(_mm256_setzero_si256(), neg)),
                            neg);
#endif
}

static inline vi pool_max4(vi a, vi b, vi *odd, vi inf) { /* a, b: two halves per lane */
#if VW == 16
    const vi lo = _mm512_set1_epi32(0xffff);
    vi m = _mm512_max_epi32(pool_key(_mm512_and_si512(a, lo), odd, NULL, inf),
                            pool_key(_mm512_srli_epi32(a, 16), odd, NULL, inf));
    m = _mm512_max_epi32(m, pool_key(_mm512_and_si512(b, lo), odd, NULL, inf));
    m = _mm512_max_epi32(m, pool_key(_mm512_srli_epi32(b, 16), odd, NULL, inf));
    vi s = _mm512_srai_epi32(m, 31);
    return _mm512_or_si512(_mm512_sub_epi32(_mm512_xor_si512(m, s), s),
                           _mm512_and_si512(s, _mm512_set1_epi32(0x8000)));
#else
    const vi lo = _mm256_set1_epi32(0xffff);
    vi m = _mm256_max_epi32(pool_key(_mm256_and_si256(a, lo), odd, NULL, inf),
                            pool_key(_mm256_srli_epi32(a, 16), odd, NULL, inf));
    m = _mm256_max_epi32(m, pool_key(_mm256_and_si256(b, lo), odd, NULL, inf));
    m = _mm256_max_epi32(m, pool_key(_mm256_srli_epi32(b, 16), odd, NULL, inf));
    vi s = _mm256_srai_epi32(m, 31);
    return _mm256_or_si256(_mm256_sub_epi32(_mm256_xor_si256(m, s), s),
                           _mm256_and_si256(s, _mm256_set1_epi32(0x8000)));
#endif
}

static int pool2x2_half(uint16_t *o, const uint16_t *a, const uint16_t *b, int64_t ow,
                        uint16_t inf) {
#if VW == 16
    vi odd = _mm512_setzero_si512(), vinf = _mm512_set1_epi32(inf);
    for (int64_t x = 0; x < ow; x += VW) {
        __mmask16 m = ow - x >= VW ? (__mmask16)0xffff : (__mmask16)((1u << (ow - x)) - 1);
        vi r = pool_max4(_mm512_maskz_loadu_epi32(m, a + 2 * x),
                         _mm512_maskz_loadu_epi32(m, b + 2 * x), &odd, vinf);
        _mm256_mask_storeu_epi16(o + x, m, _mm512_cvtepi32_epi16(r));
    }
    return _mm512_test_epi32_mask(odd, odd) != 0;
#else
    vi odd = _mm256_setzero_si256(), vinf = _mm256_set1_epi32(inf);
    for (int64_t x = 0; x < ow; x += VW) {
        int64_t n = ow - x < VW ? ow - x : VW;
        vi m = _mm256_cmpgt_epi32(_mm256_set1_epi32((int)n),
                                  _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
        vi r = pool_max4(_mm256_maskload_epi32((const int *)(a + 2 * x), m),
                         _mm256_maskload_epi32((const int *)(b + 2 * x), m), &odd, vinf);
        r = _mm256_permute4x64_epi64(_mm256_packus_epi32(r, r), 0x08); /* lanes 0-3, 4-7 */
        if (n == VW) {
            _mm_storeu_si128((__m128i *)(o + x), _mm256_castsi256_si128(r));
        } else {
            uint16_t t[VW];
            _mm_storeu_si128((__m128i *)t, _mm256_castsi256_si128(r));
            memcpy(o + x, t, sizeof(uint16_t) * (size_t)n);
        }
    }
    return !_mm256_testz_si256(odd, odd);
#endif
}

/* ==== max_pool2d_grad 2 x 2 of rows (blas_pool2d.c) ==============================================
 * Each window's gradient goes to its first maximum in row-major order (a[2x], a[2x+1], b[2x],
 * b[2x+1]), none when it holds a NaN; the rest of the pair of rows is zero. Branch-free: the
 * scalar loop this replaces mispredicted on most windows of random data (the gradient of a
 * 64x32x28x28 f32 pooling). f32 splits VW windows' left and right elements with in-lane
 * shuffles, which put the windows in an order the gradient is permuted to match, and the
 * unpacks put them back; a last partial vector is read and written under masks. */
#if VW == 16
static inline vf pool_load_n(const float *p, int64_t n) {
    return _mm512_maskz_loadu_ps(n >= VW ? (__mmask16)0xffff : (__mmask16)((1u << n) - 1), p);
}
static inline void pool_store_n(float *p, vf v, int64_t n) {
    _mm512_mask_storeu_ps(p, n >= VW ? (__mmask16)0xffff : (__mmask16)((1u << n) - 1), v);
}
#else
static inline __m256i pool_mask(int64_t n) {
    return _mm256_cmpgt_epi32(_mm256_set1_epi32((int)(n < VW ? n : VW)),
                              _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}
static inline vf pool_load_n(const float *p, int64_t n) {
    return _mm256_maskload_ps(p, pool_mask(n));
}
static inline void pool_store_n(float *p, vf v, int64_t n) {
    _mm256_maskstore_ps(p, pool_mask(n), v);
}
#endif

/* values of consecutive windows in the order of pool_windows' shuffles, and back */
static inline vf pool_order(vf v) {
#if VW == 16
    return _mm512_castpd_ps(
        _mm512_permutexvar_pd(_mm512_setr_epi64(0, 4, 1, 5, 2, 6, 3, 7), _mm512_castps_pd(v)));
#else
    return _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(v), 0xd8));
#endif
}
static inline vf pool_unorder(vf v) {
#if VW == 16
    return _mm512_castpd_ps(
        _mm512_permutexvar_pd(_mm512_setr_epi64(0, 2, 4, 6, 1, 3, 5, 7), _mm512_castps_pd(v)));
#else
    return pool_order(v); /* 0xd8 swaps the middle pair: its own inverse */
#endif
}

/* VW windows of a row pair a, b from window x on (n <= VW of them): their elements e[0..3]
 * (a[2x], a[2x+1], b[2x], b[2x+1]) in the shuffles' window order (pool_order) */
static inline void pool_windows(const float *a, const float *b, int64_t x, int64_t n, vf e[4]) {
    int64_t lo = 2 * n < VW ? 2 * n : VW, hi = 2 * n - lo;
    vf a0 = pool_load_n(a + 2 * x, lo), a1 = pool_load_n(a + 2 * x + VW, hi);
    vf b0 = pool_load_n(b + 2 * x, lo), b1 = pool_load_n(b + 2 * x + VW, hi);
#if VW == 16
    e[0] = _mm512_shuffle_ps(a0, a1, 0x88), e[1] = _mm512_shuffle_ps(a0, a1, 0xdd);
    e[2] = _mm512_shuffle_ps(b0, b1, 0x88), e[3] = _mm512_shuffle_ps(b0, b1, 0xdd);
#else
    e[0] = _mm256_shuffle_ps(a0, a1, 0x88), e[1] = _mm256_shuffle_ps(a0, a1, 0xdd);
    e[2] = _mm256_shuffle_ps(b0, b1, 0x88), e[3] = _mm256_shuffle_ps(b0, b1, 0xdd);
#endif
}

/* the windows' results r[0..3] (as pool_windows orders them) back in place in oa and ob */
static inline void pool_put(float *oa, float *ob, int64_t x, int64_t n, const vf r[4]) {
    int64_t lo = 2 * n < VW ? 2 * n : VW, hi = 2 * n - lo;
#if VW == 16
    pool_store_n(oa + 2 * x, _mm512_unpacklo_ps(r[0], r[1]), lo);
    pool_store_n(oa + 2 * x + VW, _mm512_unpackhi_ps(r[0], r[1]), hi);
    pool_store_n(ob + 2 * x, _mm512_unpacklo_ps(r[2], r[3]), lo);
    pool_store_n(ob + 2 * x + VW, _mm512_unpackhi_ps(r[2], r[3]), hi);
#else
    pool_store_n(oa + 2 * x, _mm256_unpacklo_ps(r[0], r[1]), lo);
    pool_store_n(oa + 2 * x + VW, _mm256_unpackhi_ps(r[0], r[1]), hi);
    pool_store_n(ob + 2 * x, _mm256_unpacklo_ps(r[2], r[3]), lo);
    pool_store_n(ob + 2 * x + VW, _mm256_unpackhi_ps(r[2], r[3]), hi);
#endif
}

static void pool2x2_grad_f32(float *oa, float *ob, const float *a, const float *b, const float *g,
                             int64_t ow) {
    for (int64_t x = 0; x < ow; x += VW) {
        int64_t n = ow - x < VW ? ow - x : VW;
        vf e[4], r[4], gv = pool_order(pool_load_n(g + x, n));
        pool_windows(a, b, x, n, e);
#if VW == 16
        __mmask16 top = _mm512_cmp_ps_mask(e[1], e[0], _CMP_GT_OQ);
        __mmask16 bot = _mm512_cmp_ps_mask(e[3], e[2], _CMP_GT_OQ);
        vf mt = _mm512_mask_blend_ps(top, e[0], e[1]), mb = _mm512_mask_blend_ps(bot, e[2], e[3]);
        __mmask16 down = _mm512_cmp_ps_mask(mb, mt, _CMP_GT_OQ);
        __mmask16 ok =
            _mm512_cmp_ps_mask(e[0], e[1], _CMP_ORD_Q) & _mm512_cmp_ps_mask(e[2], e[3], _CMP_ORD_Q);
        r[0] = _mm512_maskz_mov_ps(ok & ~top & ~down, gv);
        r[1] = _mm512_maskz_mov_ps(ok & top & ~down, gv);
        r[2] = _mm512_maskz_mov_ps(ok & ~bot & down, gv);
        r[3] = _mm512_maskz_mov_ps(ok & bot & down, gv);
#else
        vf top = _mm256_cmp_ps(e[1], e[0], _CMP_GT_OQ), bot = _mm256_cmp_ps(e[3], e[2], _CMP_GT_OQ);
        vf mt = _mm256_blendv_ps(e[0], e[1], top), mb = _mm256_blendv_ps(e[2], e[3], bot);
        vf down = _mm256_cmp_ps(mb, mt, _CMP_GT_OQ);
        vf ok = _mm256_and_ps(_mm256_cmp_ps(e[0], e[1], _CMP_ORD_Q),
                              _mm256_cmp_ps(e[2], e[3], _CMP_ORD_Q));
        vf up = _mm256_andnot_ps(down, ok);
        down = _mm256_and_ps(down, ok);
        r[0] = _mm256_and_ps(_mm256_andnot_ps(top, up), gv);
        r[1] = _mm256_and_ps(_mm256_and_ps(top, up), gv);
        r[2] = _mm256_and_ps(_mm256_andnot_ps(bot, down), gv);
        r[3] = _mm256_and_ps(_mm256_and_ps(bot, down), gv);
#endif
        pool_put(oa, ob, x, n, r);
    }
}

/* window_max/min of 2 x 2 windows at stride 2, one row pair, as the cpu folds them: from -inf
 * (max; +inf for min) each element in row-major order replaces the extreme when greater (less)
 * or NaN (so the last NaN wins) */
static void fold2x2_f32(float *o, const float *a, const float *b, int64_t ow, int is_min) {
    for (int64_t x = 0; x < ow; x += VW) {
        int64_t n = ow - x < VW ? ow - x : VW;
        vf e[4], m = vf_set(is_min ? INFINITY : -INFINITY);
        pool_windows(a, b, x, n, e);
        for (int k = 0; k < 4; k++) {
#if VW == 16
            __mmask16 take = (is_min ? _mm512_cmp_ps_mask(e[k], m, _CMP_LT_OQ)
                                     : _mm512_cmp_ps_mask(e[k], m, _CMP_GT_OQ)) |
                             _mm512_cmp_ps_mask(e[k], e[k], _CMP_UNORD_Q);
            m = _mm512_mask_blend_ps(take, m, e[k]);
#else
            vf take = _mm256_or_ps(is_min ? _mm256_cmp_ps(e[k], m, _CMP_LT_OQ)
                                          : _mm256_cmp_ps(e[k], m, _CMP_GT_OQ),
                                   _mm256_cmp_ps(e[k], e[k], _CMP_UNORD_Q));
            m = _mm256_blendv_ps(m, e[k], take);
#endif
        }
        pool_store_n(o + x, pool_unorder(m), n);
    }
}

/* window_sum (scale 1) and avg_pool2d (scale 1 / 4) of 2 x 2 windows at stride 1 or 2, one row
 * pair: as the cpu sums a window, in double from +0 in row-major order (so that four -0 give +0),
 * times the scale, rounded once; plain loops for the compiler (widening, the double adds and
 * the stride-2 loads' shuffles). */
static void sum2x2_f32(float *restrict o, const float *restrict a, const float *restrict b,
                       int64_t ow, int stride, double scale) {
    if (stride == 2)
        for (int64_t x = 0; x < ow; x++)
            o[x] = (float)(((((0.0 + a[2 * x]) + a[2 * x + 1]) + b[2 * x]) + b[2 * x + 1]) * scale);
    else
        for (int64_t x = 0; x < ow; x++)
            o[x] = (float)(((((0.0 + a[x]) + a[x + 1]) + b[x]) + b[x + 1]) * scale);
}

/* window_scatter_max/min (Nx's gradient of window_max/min) of 2 x 2 windows at stride 2, one row
 * pair: each window selects as Nx.BinaryBackend does, in row-major order the last element >= (max;
 * <= for min) the one selected so far, starting from the first (so a NaN first holds, and a later
 * NaN is never taken); that position gets value + g (the float sum: the cpu's double sum rounded
 * once), the other three the value. */
static void scatter2x2_f32(float *oa, float *ob, const float *a, const float *b, const float *g,
                           int64_t ow, float value, int is_min) {
    vf pf = vf_set(value);
    for (int64_t x = 0; x < ow; x += VW) {
        int64_t n = ow - x < VW ? ow - x : VW;
        vf e[4], r[4], gv = pool_order(pool_load_n(g + x, n));
        pool_windows(a, b, x, n, e);
        vf v = vf_add(pf, gv), bf = e[0];
#if VW == 16
        /* e >= bf, or for min bf >= e: false where either is NaN */
#define SCATTER_TAKES(e)                                                                           \
    (is_min ? _mm512_cmp_ps_mask(bf, e, _CMP_GE_OQ) : _mm512_cmp_ps_mask(e, bf, _CMP_GE_OQ))
        __mmask16 t1 = SCATTER_TAKES(e[1]);
        bf = _mm512_mask_blend_ps(t1, bf, e[1]);
        __mmask16 t2 = SCATTER_TAKES(e[2]);
        bf = _mm512_mask_blend_ps(t2, bf, e[2]);
        __mmask16 t3 = SCATTER_TAKES(e[3]);
        r[0] = _mm512_mask_blend_ps(~(t1 | t2 | t3), pf, v);
        r[1] = _mm512_mask_blend_ps(t1 & ~t2 & ~t3, pf, v);
        r[2] = _mm512_mask_blend_ps(t2 & ~t3, pf, v);
        r[3] = _mm512_mask_blend_ps(t3, pf, v);
#else
#define SCATTER_TAKES(e)                                                                           \
    (is_min ? _mm256_cmp_ps(bf, e, _CMP_GE_OQ) : _mm256_cmp_ps(e, bf, _CMP_GE_OQ))
        vf t1 = SCATTER_TAKES(e[1]);
        bf = _mm256_blendv_ps(bf, e[1], t1);
        vf t2 = SCATTER_TAKES(e[2]);
        bf = _mm256_blendv_ps(bf, e[2], t2);
        vf t3 = SCATTER_TAKES(e[3]);
        r[0] = _mm256_blendv_ps(v, pf, _mm256_or_ps(t1, _mm256_or_ps(t2, t3)));
        r[1] = _mm256_blendv_ps(pf, v, _mm256_andnot_ps(t3, _mm256_andnot_ps(t2, t1)));
        r[2] = _mm256_blendv_ps(pf, v, _mm256_andnot_ps(t3, t2));
        r[3] = _mm256_blendv_ps(pf, v, t3);
#endif
#undef SCATTER_TAKES
        pool_put(oa, ob, x, n, r);
    }
}

/* f16/bf16: a window's pair in a row is one 32-bit lane (pool_key's order), and so is its pair
 * of results: (left's gradient) | (right's) << 16 */
static void pool2x2_grad_half(uint16_t *oa, uint16_t *ob, const uint16_t *a, const uint16_t *b,
                              const uint16_t *g, int64_t ow, uint16_t inf) {
    for (int64_t x = 0; x < ow; x += VW) {
        int64_t n = ow - x < VW ? ow - x : VW;
#if VW == 16
        __mmask16 m = n == VW ? (__mmask16)0xffff : (__mmask16)((1u << n) - 1);
        const vi lo = _mm512_set1_epi32(0xffff), vinf = _mm512_set1_epi32(inf);
        vi pa = _mm512_maskz_loadu_epi32(m, a + 2 * x), pb = _mm512_maskz_loadu_epi32(m, b + 2 * x);
        vi gv = _mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(m, g + x));
        vi nan = _mm512_setzero_si512();
        vi k0 = pool_key(_mm512_and_si512(pa, lo), NULL, &nan, vinf);
        vi k1 = pool_key(_mm512_srli_epi32(pa, 16), NULL, &nan, vinf);
        vi k2 = pool_key(_mm512_and_si512(pb, lo), NULL, &nan, vinf);
        vi k3 = pool_key(_mm512_srli_epi32(pb, 16), NULL, &nan, vinf);
        __mmask16 top = _mm512_cmpgt_epi32_mask(k1, k0), bot = _mm512_cmpgt_epi32_mask(k3, k2);
        vi mt = _mm512_mask_blend_epi32(top, k0, k1), mb = _mm512_mask_blend_epi32(bot, k2, k3);
        __mmask16 down = _mm512_cmpgt_epi32_mask(mb, mt), ok = _mm512_testn_epi32_mask(nan, nan);
        vi ra =
            _mm512_or_si512(_mm512_maskz_mov_epi32(ok & ~top & ~down, gv),
                            _mm512_slli_epi32(_mm512_maskz_mov_epi32(ok & top & ~down, gv), 16));
        vi rb = _mm512_or_si512(_mm512_maskz_mov_epi32(ok & ~bot & down, gv),
                                _mm512_slli_epi32(_mm512_maskz_mov_epi32(ok & bot & down, gv), 16));
        _mm512_mask_storeu_epi32(oa + 2 * x, m, ra);
        _mm512_mask_storeu_epi32(ob + 2 * x, m, rb);
#else
        __m256i m = pool_mask(n);
        const vi lo = _mm256_set1_epi32(0xffff), vinf = _mm256_set1_epi32(inf);
        vi pa = _mm256_maskload_epi32((const int *)(a + 2 * x), m);
        vi pb = _mm256_maskload_epi32((const int *)(b + 2 * x), m);
        uint16_t gt[VW] = {0};
        memcpy(gt, g + x, sizeof(uint16_t) * (size_t)n);
        vi gv = _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)gt));
        vi nan = _mm256_setzero_si256();
        vi k0 = pool_key(_mm256_and_si256(pa, lo), NULL, &nan, vinf);
        vi k1 = pool_key(_mm256_srli_epi32(pa, 16), NULL, &nan, vinf);
        vi k2 = pool_key(_mm256_and_si256(pb, lo), NULL, &nan, vinf);
        vi k3 = pool_key(_mm256_srli_epi32(pb, 16), NULL, &nan, vinf);
        vi top = _mm256_cmpgt_epi32(k1, k0), bot = _mm256_cmpgt_epi32(k3, k2);
        vi mt = _mm256_blendv_epi8(k0, k1, top), mb = _mm256_blendv_epi8(k2, k3, bot);
        vi down = _mm256_cmpgt_epi32(mb, mt);
        vi up = _mm256_andnot_si256(_mm256_or_si256(down, nan), gv); /* gv where the top row wins */
        vi dn = _mm256_andnot_si256(nan, _mm256_and_si256(down, gv));
        vi ra = _mm256_or_si256(_mm256_andnot_si256(top, up),
                                _mm256_slli_epi32(_mm256_and_si256(top, up), 16));
        vi rb = _mm256_or_si256(_mm256_andnot_si256(bot, dn),
                                _mm256_slli_epi32(_mm256_and_si256(bot, dn), 16));
        _mm256_maskstore_epi32((int *)(oa + 2 * x), m, ra);
        _mm256_maskstore_epi32((int *)(ob + 2 * x), m, rb);
#endif
    }
}

/* ==== AVX512-BF16: rounding to bf16 in one instruction ==========================================
 * vcvtne2ps2bf16 rounds two vectors to nearest even and makes NaN quiet as bf16_round_hi does, but
 * flushes denormal values to zero: a pair with one goes the integer way. Only in the AVX-512
 * object, and only called on a processor that has the extension (blas_simd.c): 1M bf16 adds on
 * one thread ran faster than through PAIRS_BF16. */
#if VW == 16
#define BF16_HW __attribute__((target("avx512bf16")))
BF16_HW static inline void st2_bf16_hw(uint16_t *o, vf lo, vf hi) {
    if (_mm512_fpclass_ps_mask(lo, 0x20) | _mm512_fpclass_ps_mask(hi, 0x20)) { /* denormal */
        st_bf16(o, lo);
        st_bf16(o + VW, hi);
        return;
    }
    _mm512_storeu_si512(o, (__m512i)_mm512_cvtne2ps_pbh(hi, lo));
}

#define HW_BF16(name, F)                                                                           \
    BF16_HW static void name##_bf16_hw(uint16_t *restrict o, const uint16_t *restrict a,           \
                                       const uint16_t *restrict b, int sa, int sb, int64_t n) {    \
        vf xs = vf_set(cx_bf16_to_f32(a[0])), ys = vf_set(cx_bf16_to_f32(b[0]));                   \
        int64_t i = 0;                                                                             \
        for (; i + 2 * VW <= n; i += 2 * VW) {                                                     \
            vf x = sa ? ld_bf16(a + i) : xs, y = sb ? ld_bf16(b + i) : ys;                         \
            vf lo = (F);                                                                           \
            x = sa ? ld_bf16(a + i + VW) : xs, y = sb ? ld_bf16(b + i + VW) : ys;                  \
            st2_bf16_hw(o + i, lo, (F));                                                           \
        }                                                                                          \
        if (i < n) name##_bf16_rest(o + i, sa ? a + i : a, sb ? b + i : b, sa, sb, n - i);         \
    }
HW_BF16(add, vf_add(x, y))
HW_BF16(subtract, vf_sub(x, y))
HW_BF16(multiply, vf_mul(x, y))
HW_BF16(divide, vf_div(x, y))
HW_BF16(max, vf_nan_or(x, y, vf_gt(x, y)))
HW_BF16(min, vf_nan_or(x, y, vf_lt(x, y)))

/* the bf16 functions of one value (HALF_UNARY), two vectors rounded by one instruction */
#define LD2_BF16(h, x0, x1) (x0 = ld_bf16(h), x1 = ld_bf16((h) + VW))
#define HW_BF16_UNARY(name, F)                                                                     \
    BF16_UNARY_2(name##_bf16_hw, BF16_HW, LD2_BF16, st2_bf16_hw, name##_bf16, F)
HW_BF16_UNARY(exp, exp_vf(x))
HW_BF16_UNARY(tanh, tanh_half_vf(x))
HW_BF16_UNARY(gelu, gelu_half_vf(x))
GELU_MIX(gelu_bf16_hw_mix, BF16_HW, LD2_BF16, st2_bf16_hw)

BF16_HW static void f32_to_bf16_hw(const float *restrict f, uint16_t *restrict h, int64_t n) {
    int64_t i = 0;
    for (; i + 2 * VW <= n; i += 2 * VW) st2_bf16_hw(h + i, vf_load(f + i), vf_load(f + i + VW));
    f32_to_bf16(f + i, h + i, n - i);
}
#endif

/* ---- depthwise convolution: the taps of one output plane (blas_conv.c) -------------------- */

/* y[q] = the sum over taps t = 0 .. taps-1, in that order from +0, of w[t] * src[t][q], each
 * product added with one rounding, for q < n (a multiple of 4 * VW: the caller's buffers have
 * room). Four vectors of outputs stay in registers across the taps: one store per output where
 * adding a tap at a time to the output row stored it once a tap. */
static void dw_taps_f32(float *restrict y, const float *const *src, const float *w, int taps,
                        int64_t n) {
    for (int64_t q = 0; q < n; q += 4 * VW) {
        vf a0 = vf_set(0.0f), a1 = a0, a2 = a0, a3 = a0;
        for (int t = 0; t < taps; t++) {
            vf wt = vf_set(w[t]);
            const float *s = src[t] + q;
            a0 = vf_fma(vf_load(s), wt, a0);
            a1 = vf_fma(vf_load(s + VW), wt, a1);
            a2 = vf_fma(vf_load(s + 2 * VW), wt, a2);
            a3 = vf_fma(vf_load(s + 3 * VW), wt, a3);
        }
        vf_store(y + q, a0);
        vf_store(y + q + VW, a1);
        vf_store(y + q + 2 * VW, a2);
        vf_store(y + q + 3 * VW, a3);
    }
}

/* ---- products with a right operand read many times (blas_rnn.c) -------------------------- */

/* Rows of A a block holds: its products stay in 2 * GEMM_MR vector registers while the k rows
 * of B's two vectors of columns stream past (AVX-512 has 32 registers, AVX2 16). */
#if VW == 16
#define GEMM_MR 8
#else
#define GEMM_MR 4
#endif

/* rows 0 .. rows of C's columns b .. b + 2 VW (rows <= GEMM_MR, known at each call site so that
 * the loops over r unroll) */
static inline __attribute__((always_inline)) void gemm_block(float *c, int64_t ldc, const float *a,
                                                             int64_t lda, const float *b,
                                                             int64_t ldb, int64_t k, int rows) {
    vf acc0[GEMM_MR], acc1[GEMM_MR];
    for (int r = 0; r < rows; r++) acc0[r] = acc1[r] = vf_set(0.0f);
    for (int64_t kk = 0; kk < k; kk++) {
        vf b0 = vf_load(b + kk * ldb), b1 = vf_load(b + kk * ldb + VW);
        for (int r = 0; r < rows; r++) {
            vf av = vf_set(a[r * lda + kk]);
            acc0[r] = vf_fma(av, b0, acc0[r]);
            acc1[r] = vf_fma(av, b1, acc1[r]);
        }
    }
    for (int r = 0; r < rows; r++) {
        float *cr = c + r * ldc;
        vf_store(cr, vf_add(vf_load(cr), acc0[r]));
        vf_store(cr + VW, vf_add(vf_load(cr + VW), acc1[r]));
    }
}

static void gemm_rows_f32(float *c, int64_t ldc, const float *a, int64_t lda, const float *b,
                          int64_t ldb, int64_t m, int64_t n, int64_t k) {
    for (int64_t q = 0; q < n; q += 2 * VW) {
        int64_t i = 0;
        for (; i + GEMM_MR <= m; i += GEMM_MR)
            gemm_block(c + i * ldc + q, ldc, a + i * lda, lda, b + q, ldb, k, GEMM_MR);
        for (; i < m; i++) gemm_block(c + i * ldc + q, ldc, a + i * lda, lda, b + q, ldb, k, 1);
    }
}

const simd_table SIMD_TABLE = {
#if VW == 16
    .name = "avx512",
#else
    .name = "avx2",
#endif
#define U(OP, fn) .unary_f32[CX_OP_##OP] = fn##_f32, .unary_f64[CX_OP_##OP] = fn##_f64
#define B(OP, fn) .binary_f32[CX_OP_##OP] = fn##_f32, .binary_f64[CX_OP_##OP] = fn##_f64
    U(EXP, exp),
    U(EXPM1, expm1),
    U(LOG, log),
    U(LOG1P, log1p),
    U(SIN, sin),
    U(COS, cos),
    U(TANH, tanh),
    U(ERF, erf),
    U(SIGMOID, sigmoid),
    U(SQRT, sqrt),
    U(RSQRT, rsqrt),
    U(RECIPROCAL, reciprocal),
    U(NEGATE, negate),
    U(ABS, abs),
    U(FLOOR, floor),
    U(CEIL, ceil),
    U(ROUND, round),
    U(SIGN, sign),
    U(TAN, tan),
    U(ASIN, asin),
    U(ACOS, acos),
    U(ATAN, atan),
    .unary_f32[CX_OP_SINH] = sinh_f32,
    .unary_f32[CX_OP_COSH] = cosh_f32,
    U(ASINH, asinh),
    U(ACOSH, acosh),
    U(ATANH, atanh),
    U(CBRT, cbrt),
    U(ERFC, erfc),
    B(ADD, add),
    B(SUBTRACT, subtract),
    B(MULTIPLY, multiply),
    B(DIVIDE, divide),
    B(MAX, max),
    B(MIN, min),
    B(POW, pow),
    B(ATAN2, atan2),
    .binary_f32[CX_OP_REMAINDER] = remainder_f32,
#define C(OP, fn) .compare_f32[CX_OP_##OP] = fn##_f32, .compare_f64[CX_OP_##OP] = fn##_f64
    C(EQUAL, equal),
    C(NOT_EQUAL, not_equal),
    C(LESS, less),
    C(LESS_EQUAL, less_equal),
    C(GREATER, greater),
    C(GREATER_EQUAL, greater_equal),
#define H(OP, fn) .binary_f16[CX_OP_##OP] = fn##_f16, .binary_bf16[CX_OP_##OP] = fn##_bf16
    H(ADD, add),
    H(SUBTRACT, subtract),
    H(MULTIPLY, multiply),
    H(DIVIDE, divide),
    H(MAX, max),
    H(MIN, min),
#define HU(OP, fn) .unary_f16[CX_OP_##OP] = fn##_f16, .unary_bf16[CX_OP_##OP] = fn##_bf16
    HU(NEGATE, negate),
    HU(ABS, abs),
    HU(SQRT, sqrt),
    HU(RECIPROCAL, reciprocal),
#if VW == 16
    .unary_f16[CX_OP_EXP] = exp_f16,
    .unary_f16[CX_OP_TANH] = tanh_f16,
    .unary_bf16[CX_OP_EXP] = exp_bf16,
    .unary_bf16[CX_OP_TANH] = tanh_bf16,
    .unary_bf16[CX_OP_GELU] = gelu_bf16,
    .gelu_bf16_mixed = gelu_bf16_mix,
#endif
    .select_16 = select_16,
    .select_32 = select_32,
    .select_64 = select_64,
    .transpose_f32 = transpose_f32,
    .bf16_to_f32 = bf16_to_f32,
    .f32_to_bf16 = f32_to_bf16,
    .f16_to_f32 = f16_to_f32,
    .f32_to_f16 = f32_to_f16,
    .sum_f32 = sum_f32,
    .sum_f64 = sum_f64,
    .sum_f16 = sum_f16,
    .sum_bf16 = sum_bf16,
    .sum_row_f32 = sum_row_f32,
    .sum_row_f64 = sum_row_f64,
    .softmax_f32 = softmax_f32,
    .row_max_f32 = row_max_f32,
    .extreme_f32 = extreme_f32,
    .extreme_f64 = extreme_f64,
    .extreme_row_f32 = extreme_row_f32,
    .extreme_row_f64 = extreme_row_f64,
    .clip_f32 = clip_f32,
    .dw_taps_f32 = dw_taps_f32,
    .gemm_rows_f32 = gemm_rows_f32,
    .gemm_nr = 2 * VW,
    .clip_f64 = clip_f64,
    .leaky_relu_f32 = leaky_relu_f32,
    .leaky_relu_f64 = leaky_relu_f64,
    .elu_f32 = elu_f32,
    .elu_f64 = elu_f64,
    .softplus_f32 = softplus_f32,
    .softplus_f64 = softplus_f64,
    .sum_exp_f32 = sum_exp_f32,
    .div_f32 = div_f32,
    .xent_f32 = xent_f32,
    .layer_norm_f32 = layer_norm_f32,
    .gelu_f32 = gelu_any_f32,
    .silu_f32 = silu_f32,
    .pool2x2_half = pool2x2_half,
    .pool2x2_grad_f32 = pool2x2_grad_f32,
    .scatter2x2_f32 = scatter2x2_f32,
    .fold2x2_f32 = fold2x2_f32,
    .sum2x2_f32 = sum2x2_f32,
    .pool2x2_grad_half = pool2x2_grad_half,
};

#if VW == 16
void simd_avx512_bf16(simd_table *t) {
    *t = SIMD_TABLE;
#define HW(OP, fn) t->binary_bf16[CX_OP_##OP] = fn##_bf16_hw
    HW(ADD, add);
    HW(SUBTRACT, subtract);
    HW(MULTIPLY, multiply);
    HW(DIVIDE, divide);
    HW(MAX, max);
    HW(MIN, min);
    t->unary_bf16[CX_OP_EXP] = exp_bf16_hw;
    t->unary_bf16[CX_OP_TANH] = tanh_bf16_hw;
    t->unary_bf16[CX_OP_GELU] = gelu_bf16_hw;
    t->gelu_bf16_mixed = gelu_bf16_hw_mix;
    t->f32_to_bf16 = f32_to_bf16_hw;
}
#endif
