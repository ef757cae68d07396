/* Elementwise kernels: unary, binary, comparison, logical, select and clip, with NumPy
 * broadcasting. Every (op, type) pair is its own typed loop with the op fixed, so the op switch
 * happens once per call and the loops vectorise. f16 and bf16 run the f32 kernels on chunks
 * widened to f32 and round once on the way back. */
#include <string.h>
#include <complex.h>
#include <tgmath.h>

#include "../../core/half_array.h"
#include "cpu_kernels.h"

/* Elements per f16/bf16 chunk: the f32 copies of every operand stay in L1. */
#define CHUNK 512

/* n elements of one (op, type); s[j] is input j's stride, 1, or 0 when it is broadcast. */
typedef void (*ew_kernel)(void *out, const void *const *in, const int *s, int64_t n);

/* A broadcast input is loaded once outside the loop, so that every variant is a plain loop the
 * compiler vectorises. */
#define UNARY_BODY(T, OT, EXPR)                                                                    \
    const T *a = in[0];                                                                            \
    OT *o = out;                                                                                   \
    if (s[0]) {                                                                                    \
        for (int64_t i = 0; i < n; i++) {                                                          \
            T x = a[i];                                                                            \
            o[i] = (EXPR);                                                                         \
        }                                                                                          \
    } else {                                                                                       \
        T x = a[0];                                                                                \
        OT r = (EXPR);                                                                             \
        for (int64_t i = 0; i < n; i++) o[i] = r;                                                  \
    }

#define BINARY_BODY(T, OT, EXPR)                                                                   \
    const T *a = in[0], *b = in[1];                                                                \
    OT *o = out;                                                                                   \
    if (s[0] && s[1]) {                                                                            \
        for (int64_t i = 0; i < n; i++) {                                                          \
            T x = a[i], y = b[i];                                                                  \
            o[i] = (EXPR);                                                                         \
        }                                                                                          \
    } else if (s[0]) {                                                                             \
        T y = b[0];                                                                                \
        for (int64_t i = 0; i < n; i++) {                                                          \
            T x = a[i];                                                                            \
            o[i] = (EXPR);                                                                         \
        }                                                                                          \
    } else if (s[1]) {                                                                             \
        T x = a[0];                                                                                \
        for (int64_t i = 0; i < n; i++) {                                                          \
            T y = b[i];                                                                            \
            o[i] = (EXPR);                                                                         \
        }                                                                                          \
    } else {                                                                                       \
        T x = a[0], y = b[0];                                                                      \
        OT r = (EXPR);                                                                             \
        for (int64_t i = 0; i < n; i++) o[i] = r;                                                  \
    }

#define DEF_UNARY(name, T, OT, EXPR)                                                               \
    static void name(void *out, const void *const *in, const int *s, int64_t n) {                  \
        UNARY_BODY(T, OT, EXPR)                                                                    \
    }

#define DEF_BINARY(name, T, OT, EXPR)                                                              \
    static void name(void *out, const void *const *in, const int *s, int64_t n) {                  \
        BINARY_BODY(T, OT, EXPR)                                                                   \
    }

/* Wrapping exponentiation by squaring: the low bits of the product do not depend on the high
 * bits, so callers truncate to their width. */
static inline uint64_t ipow_wrap(uint64_t base, uint64_t e) {
    uint64_t r = 1;
    while (e) {
        if (e & 1) r *= base;
        base *= base;
        e >>= 1;
    }
    return r;
}

/* A negative exponent gives 1/base^|e| truncated toward zero: 0 except for bases 1 and -1. */
static inline int64_t ipow_signed(int64_t base, int64_t e) {
    if (e >= 0) return (int64_t)ipow_wrap((uint64_t)base, (uint64_t)e);
    if (base == 1) return 1;
    if (base == -1) return (e & 1) ? -1 : 1;
    return 0;
}

/* Below zero, exp(x) cannot overflow: 1 / (1 + exp(-x)) would flush results in the subnormal
 * range to 0 once exp(-x) overflows. */
#define DEF_SIGMOID(sfx, T)                                                                        \
    static inline T sigmoid_##sfx(T x) {                                                           \
        if (x >= 0) return 1 / (1 + exp(-x));                                                      \
        T e = exp(x);                                                                              \
        return e / (1 + e);                                                                        \
    }
DEF_SIGMOID(f64, double)

/* expm1 and sigmoid of f32 (and f16/bf16) compute in double and round once, as Nx.BinaryBackend
 * does: expm1f and a float sigmoid were 1 ulp away from it at times (Nx's doctests of expm1(1)
 * and sigmoid caught it). */
DEF_UNARY(k_expm1_f32, float, float, (float)expm1((double)x))
DEF_UNARY(k_expm1_f64, double, double, expm1(x))
DEF_UNARY(k_sigmoid_f32, float, float, (float)sigmoid_f64((double)x))
DEF_UNARY(k_sigmoid_f64, double, double, sigmoid_f64(x))

/* The inverse error function, in double: Giles' single-precision approximation ("Approximating
 * the erfinv function", GPU Computing Gems, 2011) as the start, then Halley steps on
 * erf(x) = a up to a = 0.5 and Newton steps on log(erfc(x)) = log(1 - a) above, where 1 - a
 * keeps its digits near 1. */
double cx_erf_inv(double y) {
    if (!(y >= -1 && y <= 1)) return NAN;
    if (y == 0) return y; /* keeps -0 */
    double a = fabs(y);
    if (a == 1) return copysign(INFINITY, y);
    double w = -log((1 - a) * (1 + a)), p;
    if (w < 5) {
        w -= 2.5;
        p = 2.81022636e-08;
        p = 3.43273939e-07 + p * w;
        p = -3.5233877e-06 + p * w;
        p = -4.39150654e-06 + p * w;
        p = 0.00021858087 + p * w;
        p = -0.00125372503 + p * w;
        p = -0.00417768164 + p * w;
        p = 0.246640727 + p * w;
        p = 1.50140941 + p * w;
    } else {
        w = sqrt(w) - 3;
        p = -0.000200214257;
        p = 0.000100950558 + p * w;
        p = 0.00134934322 + p * w;
        p = -0.00367342844 + p * w;
        p = 0.00573950773 + p * w;
        p = -0.0076224613 + p * w;
        p = 0.00943887047 + p * w;
        p = 1.00167406 + p * w;
        p = 2.83297682 + p * w;
    }
    double x = p * a, tail = log(1 - a);
    for (int k = 0; k < 8; k++) {
        double dx, d = 1.1283791670955126 * exp(-x * x); /* erf'(x) */
        if (a <= 0.5) {
            double f = erf(x) - a;
            dx = f / (d + x * f); /* Halley */
        } else {
            /* Newton on log(erfc(x)) = log(1 - a): nearly quadratic in x, so it converges from
             * far out in the tail, where erf(x) - a has no digits left */
            double e = erfc(x);
            dx = (log(e) - tail) / (-d / e);
        }
        x -= dx;
        if (!(fabs(dx) > 0x1p-54 * x)) break;
    }
    return copysign(x, y);
}

/* tgmath.h picks the float or double libm function from the operand type. max and min let NaN
 * through from either side, like Nx. */
#define FLOAT_KERNELS(sfx, T)                                                                      \
    DEF_UNARY(k_negate_##sfx, T, T, -x)                                                            \
    DEF_UNARY(k_abs_##sfx, T, T, fabs(x))                                                          \
    DEF_UNARY(k_sign_##sfx, T, T, x > 0 ? (T)1 : x < 0 ? (T)-1 : x)                                \
    DEF_UNARY(k_exp_##sfx, T, T, exp(x))                                                           \
    DEF_UNARY(k_log_##sfx, T, T, log(x))                                                           \
    DEF_UNARY(k_log1p_##sfx, T, T, log1p(x))                                                       \
    DEF_UNARY(k_sqrt_##sfx, T, T, sqrt(x))                                                         \
    DEF_UNARY(k_rsqrt_##sfx, T, T, 1 / sqrt(x))                                                    \
    DEF_UNARY(k_sin_##sfx, T, T, sin(x))                                                           \
    DEF_UNARY(k_cos_##sfx, T, T, cos(x))                                                           \
    DEF_UNARY(k_tanh_##sfx, T, T, tanh(x))                                                         \
    DEF_UNARY(k_erf_##sfx, T, T, erf(x))                                                           \
    DEF_UNARY(k_floor_##sfx, T, T, floor(x))                                                       \
    DEF_UNARY(k_ceil_##sfx, T, T, ceil(x))                                                         \
    DEF_UNARY(k_round_##sfx, T, T, round(x))                                                       \
    DEF_UNARY(k_reciprocal_##sfx, T, T, 1 / x)                                                     \
    DEF_BINARY(k_add_##sfx, T, T, x + y)                                                           \
    DEF_BINARY(k_subtract_##sfx, T, T, x - y)                                                      \
    DEF_BINARY(k_multiply_##sfx, T, T, (x) * (y))                                                  \
    DEF_BINARY(k_divide_##sfx, T, T, x / y)                                                        \
    DEF_BINARY(k_pow_##sfx, T, T, pow(x, y))                                                       \
    DEF_BINARY(k_max_##sfx, T, T, x > y || x != x ? x : y)                                         \
    DEF_BINARY(k_min_##sfx, T, T, x < y || x != x ? x : y)                                         \
    DEF_BINARY(k_remainder_##sfx, T, T, fmod(x, y))                                                \
    DEF_BINARY(k_atan2_##sfx, T, T, atan2(x, y))

/* The functions of Nx beyond the common ones compute in double and round once: f32 results are
 * then correctly rounded but for rare double-rounding ties, as Nx.BinaryBackend's (which
 * computes in double too). */
#define MORE_MATH_KERNELS(sfx, T)                                                                  \
    DEF_UNARY(k_erfc_##sfx, T, T, (T)erfc((double)x))                                              \
    DEF_UNARY(k_erf_inv_##sfx, T, T, (T)cx_erf_inv((double)x))                                     \
    DEF_UNARY(k_tan_##sfx, T, T, (T)tan((double)x))                                                \
    DEF_UNARY(k_asin_##sfx, T, T, (T)asin((double)x))                                              \
    DEF_UNARY(k_acos_##sfx, T, T, (T)acos((double)x))                                              \
    DEF_UNARY(k_atan_##sfx, T, T, (T)atan((double)x))                                              \
    DEF_UNARY(k_sinh_##sfx, T, T, (T)sinh((double)x))                                              \
    DEF_UNARY(k_cosh_##sfx, T, T, (T)cosh((double)x))                                              \
    DEF_UNARY(k_asinh_##sfx, T, T, (T)asinh((double)x))                                            \
    DEF_UNARY(k_acosh_##sfx, T, T, (T)acosh((double)x))                                            \
    DEF_UNARY(k_atanh_##sfx, T, T, (T)atanh((double)x))                                            \
    DEF_UNARY(k_cbrt_##sfx, T, T, (T)cbrt((double)x))                                              \
    DEF_UNARY(k_is_nan_##sfx, T, uint8_t, x != x)                                                  \
    DEF_UNARY(k_is_infinity_##sfx, T, uint8_t, isinf(x) != 0)

/* Integer arithmetic wraps: it runs in the unsigned type U, which C defines modulo 2^n. */
#define INT_KERNELS(sfx, T, U)                                                                     \
    DEF_UNARY(k_negate_##sfx, T, T, (T)((U)0 - (U)x))                                              \
    DEF_UNARY(k_floor_##sfx, T, T, x)                                                              \
    DEF_UNARY(k_ceil_##sfx, T, T, x)                                                               \
    DEF_UNARY(k_round_##sfx, T, T, x)                                                              \
    DEF_BINARY(k_add_##sfx, T, T, (T)((U)x + (U)y))                                                \
    DEF_BINARY(k_subtract_##sfx, T, T, (T)((U)x - (U)y))                                           \
    DEF_BINARY(k_multiply_##sfx, T, T, (T)((U)x * (U)y))                                           \
    DEF_BINARY(k_max_##sfx, T, T, x > y ? x : y)                                                   \
    DEF_BINARY(k_min_##sfx, T, T, x < y ? x : y)

/* x % -1 is 0 anyway, and skipping it avoids INT_MIN % -1. */
#define SIGNED_KERNELS(sfx, T, U)                                                                  \
    DEF_UNARY(k_abs_##sfx, T, T, x < 0 ? (T)((U)0 - (U)x) : x)                                     \
    DEF_UNARY(k_sign_##sfx, T, T, (T)((x > 0) - (x < 0)))                                          \
    DEF_BINARY(k_pow_##sfx, T, T, (T)ipow_signed(x, y))                                            \
    DEF_BINARY(k_remainder_##sfx, T, T, y == 0 || y == -1 ? 0 : x % y)

/* Comparisons and truth; & and | rather than && and || keep the loops branch-free. */
#define TRUTH_KERNELS(sfx, T)                                                                      \
    DEF_BINARY(k_equal_##sfx, T, uint8_t, x == y)                                                  \
    DEF_BINARY(k_not_equal_##sfx, T, uint8_t, x != y)                                              \
    DEF_BINARY(k_less_##sfx, T, uint8_t, x < y)                                                    \
    DEF_BINARY(k_less_equal_##sfx, T, uint8_t, x <= y)                                             \
    DEF_BINARY(k_greater_##sfx, T, uint8_t, x > y)                                                 \
    DEF_BINARY(k_greater_equal_##sfx, T, uint8_t, x >= y)                                          \
    DEF_UNARY(k_logical_not_##sfx, T, uint8_t, x == 0)                                             \
    DEF_BINARY(k_logical_and_##sfx, T, uint8_t, (x != 0) & (y != 0))                               \
    DEF_BINARY(k_logical_or_##sfx, T, uint8_t, (x != 0) | (y != 0))                                \
    DEF_BINARY(k_logical_xor_##sfx, T, uint8_t, (x != 0) ^ (y != 0))

/* The bits of integers of BITS bits, W their unsigned type. Shifts follow Elixir's bsl/bsr on
 * the value (Nx.BinaryBackend's rule): a shift of the width or more leaves 0 (or -1 for a
 * negative value shifted right), a negative count shifts the other way. */
#define BITS_KERNELS(sfx, T, W, BITS, NEG)                                                         \
    static inline T shl_##sfx(T x, int64_t y);                                                     \
    static inline T shr_##sfx(T x, int64_t y) {                                                    \
        if (y < 0) return y <= -(BITS) ? (T)0 : shl_##sfx(x, -y);                                  \
        if (y >= (BITS)) return NEG(x) ? (T)-1 : (T)0;                                             \
        return (T)(x >> y);                                                                        \
    }                                                                                              \
    static inline T shl_##sfx(T x, int64_t y) {                                                    \
        if (y < 0) return y <= -(BITS) ? (NEG(x) ? (T)-1 : (T)0) : shr_##sfx(x, -y);               \
        if (y >= (BITS)) return 0;                                                                 \
        return (T)((W)x << y);                                                                     \
    }                                                                                              \
    /* a count of u64 above INT64_MAX must not turn negative */                                    \
    static inline int64_t count_##sfx(T y) {                                                       \
        return y > 0 && (uint64_t)y > 127 ? 127 : (int64_t)y;                                      \
    }                                                                                              \
    static inline T clz_##sfx(T x) {                                                               \
        return x == 0 ? (T)(BITS) : (T)(__builtin_clzll((uint64_t)(W)x) - (64 - (BITS)));          \
    }                                                                                              \
    DEF_UNARY(k_bitwise_not_##sfx, T, T, (T) ~(W)x)                                                \
    DEF_UNARY(k_population_count_##sfx, T, T, (T)__builtin_popcountll((uint64_t)(W)x))             \
    DEF_UNARY(k_count_leading_zeros_##sfx, T, T, clz_##sfx(x))                                     \
    DEF_BINARY(k_bitwise_and_##sfx, T, T, (T)((W)x & (W)y))                                        \
    DEF_BINARY(k_bitwise_or_##sfx, T, T, (T)((W)x | (W)y))                                         \
    DEF_BINARY(k_bitwise_xor_##sfx, T, T, (T)((W)x ^ (W)y))                                        \
    DEF_BINARY(k_left_shift_##sfx, T, T, shl_##sfx(x, count_##sfx(y)))                             \
    DEF_BINARY(k_right_shift_##sfx, T, T, shr_##sfx(x, count_##sfx(y)))

FLOAT_KERNELS(f32, float)
FLOAT_KERNELS(f64, double)
MORE_MATH_KERNELS(f32, float)
MORE_MATH_KERNELS(f64, double)
#define NEVER(x)    0
#define NEGATIVE(x) ((x) < 0)
BITS_KERNELS(u8, uint8_t, uint8_t, 8, NEVER)
BITS_KERNELS(u16, uint16_t, uint16_t, 16, NEVER)
BITS_KERNELS(u32, uint32_t, uint32_t, 32, NEVER)
BITS_KERNELS(u64, uint64_t, uint64_t, 64, NEVER)
BITS_KERNELS(s8, int8_t, uint8_t, 8, NEGATIVE)
BITS_KERNELS(s16, int16_t, uint16_t, 16, NEGATIVE)
BITS_KERNELS(s32, int32_t, uint32_t, 32, NEGATIVE)
BITS_KERNELS(s64, int64_t, uint64_t, 64, NEGATIVE)

/* Truncating division; x / 0 is 0 and the smallest signed value / -1 wraps to itself. Integer
 * arithmetic runs in U, an unsigned type at least as wide as int, so that narrow types do not
 * promote to int and overflow. */
#define UNSIGNED_KERNELS(sfx, T, U)                                                                \
    INT_KERNELS(sfx, T, U)                                                                         \
    DEF_UNARY(k_abs_##sfx, T, T, x)                                                                \
    DEF_UNARY(k_sign_##sfx, T, T, x != 0)                                                          \
    DEF_BINARY(k_pow_##sfx, T, T, (T)ipow_wrap(x, y))                                              \
    DEF_BINARY(k_remainder_##sfx, T, T, y ? (T)(x % y) : 0)                                        \
    DEF_BINARY(k_quotient_##sfx, T, T, y ? (T)(x / y) : 0)                                         \
    DEF_UNARY(k_is_nan_##sfx, T, uint8_t, 0 * x)                                                   \
    DEF_UNARY(k_is_infinity_##sfx, T, uint8_t, 0 * x)
#define SIGNED_INT_KERNELS(sfx, T, U)                                                              \
    INT_KERNELS(sfx, T, U)                                                                         \
    SIGNED_KERNELS(sfx, T, U)                                                                      \
    DEF_BINARY(k_quotient_##sfx, T, T, y == 0 ? 0 : y == -1 ? (T)((U)0 - (U)x) : (T)(x / y))       \
    DEF_UNARY(k_is_nan_##sfx, T, uint8_t, 0 * x)                                                   \
    DEF_UNARY(k_is_infinity_##sfx, T, uint8_t, 0 * x)
UNSIGNED_KERNELS(u8, uint8_t, uint32_t)
UNSIGNED_KERNELS(u16, uint16_t, uint32_t)
UNSIGNED_KERNELS(u32, uint32_t, uint32_t)
UNSIGNED_KERNELS(u64, uint64_t, uint64_t)
SIGNED_INT_KERNELS(s8, int8_t, uint32_t)
SIGNED_INT_KERNELS(s16, int16_t, uint32_t)
SIGNED_INT_KERNELS(s32, int32_t, uint32_t)
SIGNED_INT_KERNELS(s64, int64_t, uint64_t)
TRUTH_KERNELS(f32, float)
TRUTH_KERNELS(f64, double)
TRUTH_KERNELS(u8, uint8_t)
TRUTH_KERNELS(u16, uint16_t)
TRUTH_KERNELS(u32, uint32_t)
TRUTH_KERNELS(u64, uint64_t)
TRUTH_KERNELS(s8, int8_t)
TRUTH_KERNELS(s16, int16_t)
TRUTH_KERNELS(s32, int32_t)
TRUTH_KERNELS(s64, int64_t)

/* Complex numbers (C99 complex, Annex G for infinities and NaN), c64 computed in double complex
 * and rounded once, as Nx.BinaryBackend computes (Elixir's Complex, in double). */
typedef float _Complex cfloat;
typedef double _Complex cdouble;

static inline cdouble csign_d(cdouble z) {
    double m = cabs(z);
    return m == 0 || m != m ? z : z / m;
}

static inline cdouble csigmoid_d(cdouble z) {
    return 1 / (1 + cexp(-z));
}

static inline cdouble cpow_d(cdouble x, cdouble y) {
    /* x^0 is 1 (Complex.pow and C agree on every x but 0, where cpow may give NaN) */
    if (y == 0) return 1;
    return cpow(x, y);
}

#define COMPLEX_KERNELS(sfx, T, R)                                                                 \
    DEF_UNARY(k_negate_##sfx, T, T, (T)(-(cdouble)x))                                              \
    DEF_UNARY(k_abs_##sfx, T, R, (R)cabs((cdouble)x))                                              \
    DEF_UNARY(k_sign_##sfx, T, T, (T)csign_d((cdouble)x))                                          \
    DEF_UNARY(k_exp_##sfx, T, T, (T)cexp((cdouble)x))                                              \
    DEF_UNARY(k_expm1_##sfx, T, T, (T)(cexp((cdouble)x) - 1))                                      \
    DEF_UNARY(k_log_##sfx, T, T, (T)clog((cdouble)x))                                              \
    DEF_UNARY(k_log1p_##sfx, T, T, (T)clog(1 + (cdouble)x))                                        \
    DEF_UNARY(k_sqrt_##sfx, T, T, (T)csqrt((cdouble)x))                                            \
    DEF_UNARY(k_rsqrt_##sfx, T, T, (T)(1 / csqrt((cdouble)x)))                                     \
    DEF_UNARY(k_sin_##sfx, T, T, (T)csin((cdouble)x))                                              \
    DEF_UNARY(k_cos_##sfx, T, T, (T)ccos((cdouble)x))                                              \
    DEF_UNARY(k_tan_##sfx, T, T, (T)ctan((cdouble)x))                                              \
    DEF_UNARY(k_tanh_##sfx, T, T, (T)ctanh((cdouble)x))                                            \
    DEF_UNARY(k_sinh_##sfx, T, T, (T)csinh((cdouble)x))                                            \
    DEF_UNARY(k_cosh_##sfx, T, T, (T)ccosh((cdouble)x))                                            \
    DEF_UNARY(k_asin_##sfx, T, T, (T)casin((cdouble)x))                                            \
    DEF_UNARY(k_acos_##sfx, T, T, (T)cacos((cdouble)x))                                            \
    DEF_UNARY(k_atan_##sfx, T, T, (T)catan((cdouble)x))                                            \
    DEF_UNARY(k_asinh_##sfx, T, T, (T)casinh((cdouble)x))                                          \
    DEF_UNARY(k_acosh_##sfx, T, T, (T)cacosh((cdouble)x))                                          \
    DEF_UNARY(k_atanh_##sfx, T, T, (T)catanh((cdouble)x))                                          \
    DEF_UNARY(k_sigmoid_##sfx, T, T, (T)csigmoid_d((cdouble)x))                                    \
    DEF_UNARY(k_reciprocal_##sfx, T, T, (T)(1 / (cdouble)x))                                       \
    DEF_UNARY(k_real_##sfx, T, R, (R)creal(x))                                                     \
    DEF_UNARY(k_imag_##sfx, T, R, (R)cimag(x))                                                     \
    DEF_UNARY(k_conjugate_##sfx, T, T, (T)conj(x))                                                 \
    DEF_UNARY(k_is_nan_##sfx, T, uint8_t, isnan(creal(x)) || isnan(cimag(x)))                      \
    DEF_UNARY(k_is_infinity_##sfx, T, uint8_t, isinf(creal(x)) || isinf(cimag(x)))                 \
    DEF_BINARY(k_add_##sfx, T, T, (T)((cdouble)x + (cdouble)y))                                    \
    DEF_BINARY(k_subtract_##sfx, T, T, (T)((cdouble)x - (cdouble)y))                               \
    DEF_BINARY(k_multiply_##sfx, T, T, (T)((cdouble)x * (cdouble)y))                               \
    DEF_BINARY(k_divide_##sfx, T, T, (T)((cdouble)x / (cdouble)y))                                 \
    DEF_BINARY(k_pow_##sfx, T, T, (T)cpow_d((cdouble)x, (cdouble)y))                               \
    DEF_BINARY(k_equal_##sfx, T, uint8_t, x == y)                                                  \
    DEF_BINARY(k_not_equal_##sfx, T, uint8_t, x != y)
COMPLEX_KERNELS(c64, cfloat, float)
COMPLEX_KERNELS(c128, cdouble, double)

/* Kernels by op and compute type; f16 and bf16 use the f32 column. Missing entries are
 * combinations inference never produces (divide on integers, exp on integers). */
#define FLOATS(k)                                                                                  \
    { [CX_F32] = k##_f32, [CX_F64] = k##_f64 }
#define COMPLEX(k) [CX_C64] = k##_c64, [CX_C128] = k##_c128
#define FLOATS_C(k)                                                                                \
    { [CX_F32] = k##_f32, [CX_F64] = k##_f64, COMPLEX(k) }
#define ALL_C(k)                                                                                   \
    {                                                                                              \
        [CX_F32] = k##_f32, [CX_F64] = k##_f64, [CX_U8] = k##_u8, [CX_S32] = k##_s32,              \
        [CX_S64] = k##_s64, [CX_S8] = k##_s8, [CX_S16] = k##_s16, [CX_U16] = k##_u16,              \
        [CX_U32] = k##_u32, [CX_U64] = k##_u64, COMPLEX(k)                                         \
    }
#define ALL(k)                                                                                     \
    {                                                                                              \
        [CX_F32] = k##_f32, [CX_F64] = k##_f64, [CX_U8] = k##_u8, [CX_S32] = k##_s32,              \
        [CX_S64] = k##_s64, [CX_S8] = k##_s8, [CX_S16] = k##_s16, [CX_U16] = k##_u16,              \
        [CX_U32] = k##_u32, [CX_U64] = k##_u64                                                     \
    }

#define INTS(k)                                                                                    \
    {                                                                                              \
        [CX_U8] = k##_u8, [CX_S32] = k##_s32, [CX_S64] = k##_s64, [CX_S8] = k##_s8,                \
        [CX_S16] = k##_s16, [CX_U16] = k##_u16, [CX_U32] = k##_u32, [CX_U64] = k##_u64             \
    }

static const ew_kernel kernels[CX_OP_COUNT][CX_DTYPE_COUNT] = {
    [CX_OP_NEGATE] = ALL_C(k_negate),
    [CX_OP_ABS] = ALL_C(k_abs),
    [CX_OP_SIGN] = ALL_C(k_sign),
    [CX_OP_EXP] = FLOATS_C(k_exp),
    [CX_OP_EXPM1] = FLOATS_C(k_expm1),
    [CX_OP_LOG] = FLOATS_C(k_log),
    [CX_OP_LOG1P] = FLOATS_C(k_log1p),
    [CX_OP_SQRT] = FLOATS_C(k_sqrt),
    [CX_OP_RSQRT] = FLOATS_C(k_rsqrt),
    [CX_OP_SIN] = FLOATS_C(k_sin),
    [CX_OP_COS] = FLOATS_C(k_cos),
    [CX_OP_TANH] = FLOATS_C(k_tanh),
    [CX_OP_SIGMOID] = FLOATS_C(k_sigmoid),
    [CX_OP_ERF] = FLOATS(k_erf),
    [CX_OP_ERFC] = FLOATS(k_erfc),
    [CX_OP_ERF_INV] = FLOATS(k_erf_inv),
    [CX_OP_TAN] = FLOATS_C(k_tan),
    [CX_OP_ASIN] = FLOATS_C(k_asin),
    [CX_OP_ACOS] = FLOATS_C(k_acos),
    [CX_OP_ATAN] = FLOATS_C(k_atan),
    [CX_OP_SINH] = FLOATS_C(k_sinh),
    [CX_OP_COSH] = FLOATS_C(k_cosh),
    [CX_OP_ASINH] = FLOATS_C(k_asinh),
    [CX_OP_ACOSH] = FLOATS_C(k_acosh),
    [CX_OP_ATANH] = FLOATS_C(k_atanh),
    [CX_OP_CBRT] = FLOATS(k_cbrt),
    [CX_OP_FLOOR] = ALL(k_floor),
    [CX_OP_CEIL] = ALL(k_ceil),
    [CX_OP_ROUND] = ALL(k_round),
    [CX_OP_RECIPROCAL] = FLOATS_C(k_reciprocal),
    [CX_OP_LOGICAL_NOT] = ALL(k_logical_not),
    [CX_OP_REAL] = {COMPLEX(k_real)},
    [CX_OP_IMAG] = {COMPLEX(k_imag)},
    [CX_OP_CONJUGATE] = {COMPLEX(k_conjugate)},
    [CX_OP_IS_NAN] = ALL_C(k_is_nan),
    [CX_OP_IS_INFINITY] = ALL_C(k_is_infinity),
    [CX_OP_BITWISE_NOT] = INTS(k_bitwise_not),
    [CX_OP_POPULATION_COUNT] = INTS(k_population_count),
    [CX_OP_COUNT_LEADING_ZEROS] = INTS(k_count_leading_zeros),
    [CX_OP_BITWISE_AND] = INTS(k_bitwise_and),
    [CX_OP_BITWISE_OR] = INTS(k_bitwise_or),
    [CX_OP_BITWISE_XOR] = INTS(k_bitwise_xor),
    [CX_OP_LEFT_SHIFT] = INTS(k_left_shift),
    [CX_OP_RIGHT_SHIFT] = INTS(k_right_shift),
    [CX_OP_QUOTIENT] = INTS(k_quotient),
    [CX_OP_ADD] = ALL_C(k_add),
    [CX_OP_SUBTRACT] = ALL_C(k_subtract),
    [CX_OP_MULTIPLY] = ALL_C(k_multiply),
    [CX_OP_DIVIDE] = FLOATS_C(k_divide),
    [CX_OP_POW] = ALL_C(k_pow),
    [CX_OP_MAX] = ALL(k_max),
    [CX_OP_MIN] = ALL(k_min),
    [CX_OP_REMAINDER] = ALL(k_remainder),
    [CX_OP_ATAN2] = FLOATS(k_atan2),
    [CX_OP_EQUAL] = ALL_C(k_equal),
    [CX_OP_NOT_EQUAL] = ALL_C(k_not_equal),
    [CX_OP_LESS] = ALL(k_less),
    [CX_OP_LESS_EQUAL] = ALL(k_less_equal),
    [CX_OP_GREATER] = ALL(k_greater),
    [CX_OP_GREATER_EQUAL] = ALL(k_greater_equal),
    [CX_OP_LOGICAL_AND] = ALL(k_logical_and),
    [CX_OP_LOGICAL_OR] = ALL(k_logical_or),
    [CX_OP_LOGICAL_XOR] = ALL(k_logical_xor),
};

static inline bool is_half(cx_dtype t) {
    return t == CX_F16 || t == CX_BF16;
}

static inline const void *at(const void *p, int64_t i, size_t size) {
    return (const char *)p + (size_t)i * size;
}

static inline void *at_mut(void *p, int64_t i, size_t size) {
    return (char *)p + (size_t)i * size;
}

/* One run of n output elements: each input has inner stride s[j] (0 or 1). */
typedef void (*run_fn)(const void *ctx, void *out, const void *const *in, const int *s, int64_t n);

/* The output shape with axes of size 1 dropped and neighbouring axes merged wherever every input
 * steps through them as one; strides are in elements, 0 on broadcast axes. */
typedef struct {
    int rank;
    int64_t shape[CX_MAX_RANK];
    int64_t stride[3][CX_MAX_RANK];
} bcast;

/* Input j's stride along every output axis. */
static void input_strides(const cx_desc *d, const cx_desc *out, int64_t *full) {
    int64_t rs[CX_MAX_RANK];
    cpu_strides(d, rs);
    int lead = out->rank - d->rank;
    for (int k = 0; k < out->rank; k++) {
        int kj = k - lead;
        full[k] = kj >= 0 && d->shape[kj] != 1 ? rs[kj] : 0;
    }
}

static void bcast_init(bcast *b, const cx_tensor *const *in, int n_in, const cx_desc *out) {
    int64_t full[3][CX_MAX_RANK];
    for (int j = 0; j < n_in; j++) input_strides(&in[j]->desc, out, full[j]);
    b->rank = 0;
    for (int k = 0; k < out->rank; k++) {
        int64_t n = out->shape[k];
        if (n == 1) continue;
        int r = b->rank;
        bool merge = r > 0;
        for (int j = 0; j < n_in && merge; j++) merge = b->stride[j][r - 1] == full[j][k] * n;
        if (merge) {
            b->shape[r - 1] *= n;
        } else {
            b->shape[r] = n;
            b->rank++;
        }
        for (int j = 0; j < n_in; j++) b->stride[j][b->rank - 1] = full[j][k];
    }
    if (b->rank == 0) {
        b->rank = 1;
        b->shape[0] = 1;
        for (int j = 0; j < n_in; j++) b->stride[j][0] = 0;
    }
}

/* Steps the odometer over every axis but the innermost. */
static void advance(const bcast *b, int n_in, int64_t *idx, int64_t *off) {
    for (int k = b->rank - 2; k >= 0; k--) {
        idx[k]++;
        for (int j = 0; j < n_in; j++) off[j] += b->stride[j][k];
        if (idx[k] < b->shape[k]) return;
        for (int j = 0; j < n_in; j++) off[j] -= b->stride[j][k] * b->shape[k];
        idx[k] = 0;
    }
}

/* Calls fn over the output in runs. Inputs that are full-size or single elements need no
 * index arithmetic: the whole output is one run. */
static void for_each_run(const cx_tensor *const *in, int n_in, cx_tensor *out, run_fn fn,
                         const void *ctx) {
    size_t os = cx_dtype_size(out->desc.dtype), es[3];
    const void *p[3];
    int s[3];
    bool flat = true;
    for (int j = 0; j < n_in; j++) {
        es[j] = cx_dtype_size(in[j]->desc.dtype);
        p[j] = in[j]->data;
        s[j] = in[j]->numel != 1;
        flat = flat && (in[j]->numel == out->numel || in[j]->numel == 1);
    }
    if (flat) {
        fn(ctx, out->data, p, s, out->numel);
        return;
    }
    bcast b;
    bcast_init(&b, in, n_in, &out->desc);
    int64_t inner = b.shape[b.rank - 1], idx[CX_MAX_RANK] = {0}, off[3] = {0};
    for (int j = 0; j < n_in; j++) s[j] = b.stride[j][b.rank - 1] != 0;
    for (int64_t done = 0; done < out->numel; done += inner) {
        const void *q[3];
        for (int j = 0; j < n_in; j++) q[j] = at(p[j], off[j], es[j]);
        fn(ctx, at_mut(out->data, done, os), q, s, inner);
        advance(&b, n_in, idx, off);
    }
}

static void widen(cx_dtype t, const uint16_t *h, int64_t n, float *f) {
    if (t == CX_F16)
        cx_f16_to_f32_array(h, f, n);
    else
        cx_bf16_to_f32_array(h, f, n);
}

static void narrow(cx_dtype t, const float *f, int64_t n, uint16_t *h) {
    if (t == CX_F16)
        cx_f32_to_f16_array(f, h, n);
    else
        cx_f32_to_bf16_array(f, h, n);
}

typedef struct {
    ew_kernel kernel;
    int n_in;
    cx_dtype in_type, out_type;
} ew_plan;

static void ew_run(const void *ctx, void *out, const void *const *in, const int *s, int64_t n) {
    const ew_plan *p = ctx;
    if (!is_half(p->in_type)) {
        p->kernel(out, in, s, n);
        return;
    }
    float buf[3][CHUNK], obuf[CHUNK];
    bool half_out = is_half(p->out_type);
    size_t os = cx_dtype_size(p->out_type);
    for (int64_t i = 0; i < n; i += CHUNK) {
        int64_t m = n - i < CHUNK ? n - i : CHUNK;
        const void *q[3];
        for (int j = 0; j < p->n_in; j++) {
            widen(p->in_type, at(in[j], s[j] ? i : 0, 2), s[j] ? m : 1, buf[j]);
            q[j] = buf[j];
        }
        p->kernel(half_out ? (void *)obuf : at_mut(out, i, os), q, s, m);
        if (half_out) narrow(p->out_type, obuf, m, at_mut(out, i, 2));
    }
}

/* Unary, binary, comparison and logical ops: inputs of one type, the output of that type or u8. */
static cx_code run_op(cx_op_id op, const cx_tensor *const *in, int n_in, cx_tensor *out,
                      cx_status *st) {
    cx_dtype t = in[0]->desc.dtype;
    cx_op_kind kind = cx_op_table[op].kind;
    cx_dtype want = kind == CX_KIND_COMPARE || kind == CX_KIND_LOGICAL ? CX_U8 : t;
    /* the magnitude and the parts of a complex number are real */
    if (cx_dtype_is_complex(t) && (op == CX_OP_ABS || op == CX_OP_REAL || op == CX_OP_IMAG))
        want = cx_dtype_to_real(t);
    for (int j = 1; j < n_in; j++)
        if (in[j]->desc.dtype != t)
            return cx_fail(st, CX_EINVAL, "cpu: %s expected inputs of one type, got %s and %s",
                           cx_op_table[op].name, cx_dtype_name(t),
                           cx_dtype_name(in[j]->desc.dtype));
    if (out->desc.dtype != want)
        return cx_fail(st, CX_EINVAL, "cpu: %s on %s expected a %s output, got: %s",
                       cx_op_table[op].name, cx_dtype_name(t), cx_dtype_name(want),
                       cx_dtype_name(out->desc.dtype));
    ew_kernel k = cx_dtype_valid(t) ? kernels[op][is_half(t) ? CX_F32 : t] : NULL;
    if (!k)
        return cx_fail(st, CX_EUNSUPPORTED, "cpu: no %s kernel for %s", cx_op_table[op].name,
                       cx_dtype_name(t));
    ew_plan plan = {k, n_in, t, want};
    for_each_run(in, n_in, out, ew_run, &plan);
    return CX_OK;
}

/* Whether each element is non-zero; NaN is. f16/bf16 are zero when all but the sign bit are. */
#define TRUTH_LOOP(T, TEST)                                                                        \
    {                                                                                              \
        const T *a = p;                                                                            \
        for (int64_t i = 0; i < n; i++) mask[i] = (TEST);                                          \
    }

static void truth(cx_dtype t, const void *p, int64_t n, uint8_t *mask) {
    switch (t) {
    case CX_F16:
    case CX_BF16: TRUTH_LOOP(uint16_t, (a[i] & 0x7fff) != 0) break;
    case CX_F32: TRUTH_LOOP(float, a[i] != 0) break;
    case CX_F64: TRUTH_LOOP(double, a[i] != 0) break;
    case CX_U8: TRUTH_LOOP(uint8_t, a[i] != 0) break;
    case CX_S32: TRUTH_LOOP(int32_t, a[i] != 0) break;
    case CX_S64:
    case CX_U64: TRUTH_LOOP(int64_t, a[i] != 0) break;
    case CX_S8: TRUTH_LOOP(uint8_t, a[i] != 0) break;
    case CX_S16:
    case CX_U16: TRUTH_LOOP(uint16_t, a[i] != 0) break;
    case CX_U32: TRUTH_LOOP(uint32_t, a[i] != 0) break;
    case CX_C64: TRUTH_LOOP(cfloat, a[i] != 0) break;
    case CX_C128: TRUTH_LOOP(cdouble, a[i] != 0) break;
    default: memset(mask, 0, (size_t)n);
    }
}

/* Values move without arithmetic, so every type is picked as the unsigned integer of its size
 * (f16 and bf16 copied as stored), by a mask rather than a branch: a branch on a random predicate
 * mispredicted half the time (1M f32 or s32 values). */
#define DEF_PICK(sfx, T)                                                                           \
    static void pick_##sfx(void *out, const uint8_t *m, const void *const *in, const int *s,       \
                           int64_t n) {                                                            \
        const T *a = in[1], *b = in[2];                                                            \
        T *o = out;                                                                                \
        if (s[1] && s[2]) {                                                                        \
            for (int64_t i = 0; i < n; i++) {                                                      \
                T k = (T) - (T)(m[i] != 0);                                                        \
                o[i] = (T)((a[i] & k) | (b[i] & (T)~k));                                           \
            }                                                                                      \
        } else {                                                                                   \
            for (int64_t i = 0; i < n; i++) {                                                      \
                T k = (T) - (T)(m[i] != 0);                                                        \
                o[i] = (T)((a[s[1] ? i : 0] & k) | (b[s[2] ? i : 0] & (T)~k));                     \
            }                                                                                      \
        }                                                                                          \
    }
DEF_PICK(u8, uint8_t)
DEF_PICK(u16, uint16_t)
DEF_PICK(u32, uint32_t)
DEF_PICK(u64, uint64_t)

/* complex128: two doubles, as stored */
static void pick_c128(void *out, const uint8_t *m, const void *const *in, const int *s, int64_t n) {
    const cdouble *a = in[1], *b = in[2];
    cdouble *o = out;
    for (int64_t i = 0; i < n; i++) o[i] = m[i] ? a[s[1] ? i : 0] : b[s[2] ? i : 0];
}

typedef void (*pick_fn)(void *out, const uint8_t *m, const void *const *in, const int *s,
                        int64_t n);

static const pick_fn picks[CX_DTYPE_COUNT] = {
    [CX_F16] = pick_u16, [CX_BF16] = pick_u16,  [CX_F32] = pick_u32, [CX_F64] = pick_u64,
    [CX_U8] = pick_u8,   [CX_S32] = pick_u32,   [CX_S64] = pick_u64, [CX_S8] = pick_u8,
    [CX_S16] = pick_u16, [CX_U16] = pick_u16,   [CX_U32] = pick_u32, [CX_U64] = pick_u64,
    [CX_C64] = pick_u64, [CX_C128] = pick_c128,
};

typedef struct {
    cx_dtype pred, value;
} select_plan;

static void select_run(const void *ctx, void *out, const void *const *in, const int *s, int64_t n) {
    const select_plan *p = ctx;
    size_t ps = cx_dtype_size(p->pred), vs = cx_dtype_size(p->value);
    uint8_t mask[CHUNK];
    for (int64_t i = 0; i < n; i += CHUNK) {
        int64_t m = n - i < CHUNK ? n - i : CHUNK;
        truth(p->pred, at(in[0], s[0] ? i : 0, ps), s[0] ? m : 1, mask);
        if (!s[0]) memset(mask, mask[0], (size_t)m);
        const void *q[3] = {NULL, at(in[1], s[1] ? i : 0, vs), at(in[2], s[2] ? i : 0, vs)};
        picks[p->value](at_mut(out, i, vs), mask, q, s, m);
    }
}

/* select(pred, on_true, on_false): pred keeps its own type. */
static cx_code run_select(const cx_tensor *const *in, cx_tensor *out, cx_status *st) {
    select_plan plan = {in[0]->desc.dtype, out->desc.dtype};
    if (!cx_dtype_valid(plan.pred) || !cx_dtype_valid(plan.value) ||
        in[1]->desc.dtype != plan.value || in[2]->desc.dtype != plan.value)
        return cx_fail(st, CX_EINVAL, "cpu: select expected both branches of the output type %s",
                       cx_dtype_name(plan.value));
    for_each_run(in, 3, out, select_run, &plan);
    return CX_OK;
}

/* clip is max then min, in place: both passes reuse the broadcasting binary kernels. */
static cx_code run_clip(const cx_tensor *const *in, cx_tensor *out, cx_status *st) {
    const cx_tensor *lower[2] = {in[0], in[1]};
    if (run_op(CX_OP_MAX, lower, 2, out, st) != CX_OK) return st->code;
    const cx_tensor *upper[2] = {out, in[2]};
    return run_op(CX_OP_MIN, upper, 2, out, st);
}

/* Inference guarantees this; the check keeps a direct driver call from reading out of bounds. */
static bool broadcasts_to(const cx_desc *in, const cx_desc *out) {
    if (in->rank > out->rank) return false;
    int lead = out->rank - in->rank;
    for (int k = 0; k < in->rank; k++)
        if (in->shape[k] != 1 && in->shape[k] != out->shape[k + lead]) return false;
    return true;
}

cx_code cpu_elementwise(cx_op_id op, const cx_tensor *const *in, int n_in, cx_tensor *out,
                        cx_status *st) {
    if ((int)op < 0 || op >= CX_OP_COUNT)
        return cx_fail(st, CX_EINVAL, "cpu: unknown op id %d", (int)op);
    int arity = cx_op_tensor_arity(op);
    if (arity < 1 || arity > 3 || n_in != arity)
        return cx_fail(st, CX_EINVAL, "cpu: %s expected %d tensor(s), got: %d",
                       cx_op_table[op].name, arity, n_in);
    for (int j = 0; j < n_in; j++)
        if (!broadcasts_to(&in[j]->desc, &out->desc))
            return cx_fail(st, CX_EINVAL, "cpu: %s input %d does not broadcast to the output",
                           cx_op_table[op].name, j);
    if (out->numel == 0) return CX_OK;
    if (op == CX_OP_SELECT) return run_select(in, out, st);
    if (op == CX_OP_CLIP) return run_clip(in, out, st);
    return run_op(op, in, n_in, out, st);
}
