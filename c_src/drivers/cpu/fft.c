/* Complex FFTs, the portable reference: any length n, every row in double.
 *
 * Only the forward transform is written: the backward one is conj(forward(conj(x))), then
 * divided by n. A power-of-two n runs an iterative radix-2 transform (bit-reversal, then
 * butterflies). Any other n runs Bluestein's algorithm: with the chirp c_j = exp(-i pi j^2 / n),
 * 2jk = j^2 + k^2 - (k - j)^2 turns the DFT into X_k = c_k sum_j (x_j c_j) conj(c_{k-j}), a
 * convolution computed with radix-2 transforms of a power of two m >= 2n - 1.
 *
 * Accuracy: every twiddle is cos/sin of its own angle (2 pi k / m, or pi (j^2 mod 2n) / n with
 * j^2 mod 2n kept exact in integers), never a product of earlier ones, so the error grows like
 * log2(m) roundings rather than with m. */
#include <complex.h>
#include <math.h>
#include <stdlib.h>

#include "fft.h"

#ifndef CMPLX /* glibc defines it for GCC only: clang gets the builtin it would expand to */
#define CMPLX(x, y) __builtin_complex((double)(x), (double)(y))
#endif

typedef double complex cplx;

typedef struct {
    int64_t n, m; /* the length, and the radix-2 length that computes it (m == n: no chirp) */
    cplx *tw;     /* exp(-2 pi i k / m), k < m / 2 */
    cplx *chirp;  /* Bluestein: c_j, j < n */
    cplx *bfft; /* Bluestein: the transform of conj(c) laid out circularly, over m, divided by m */
    cplx *work; /* m */
} fft_plan;

/* Plain arithmetic: C's `*` on complex also checks for NaN results and calls __muldc3 (Annex G
 * infinities), which the butterflies don't need and which costs a branch each. */
static inline cplx mul(cplx a, cplx b) {
    return CMPLX(creal(a) * creal(b) - cimag(a) * cimag(b),
                 creal(a) * cimag(b) + cimag(a) * creal(b));
}

/* In place, forward, over m = 2^k points with tw as above. */
static void radix2(cplx *a, int64_t m, const cplx *tw) {
    for (int64_t i = 1, j = 0; i < m; i++) {
        int64_t bit = m >> 1;
        for (; j & bit; bit >>= 1) j ^= bit;
        j |= bit;
        if (i < j) {
            cplx t = a[i];
            a[i] = a[j];
            a[j] = t;
        }
    }
    for (int64_t len = 2; len <= m; len <<= 1) {
        int64_t half = len >> 1, step = m / len;
        for (int64_t i = 0; i < m; i += len) {
            for (int64_t j = 0; j < half; j++) {
                cplx u = a[i + j], v = mul(a[i + j + half], tw[j * step]);
                a[i + j] = u + v;
                a[i + j + half] = u - v;
            }
        }
    }
}

static void plan_free(fft_plan *p) {
    free(p->tw);
    free(p->chirp);
    free(p->bfft);
    free(p->work);
}

static int plan_make(fft_plan *p, int64_t n) {
    int64_t m = 1;
    if ((n & (n - 1)) == 0)
        m = n;
    else {
        if (n > (INT64_C(1) << 60)) return -1;
        while (m < 2 * n - 1) m <<= 1;
    }
    *p = (fft_plan){.n = n, .m = m};
    p->tw = malloc(sizeof(cplx) * (size_t)(m / 2 > 0 ? m / 2 : 1));
    p->work = malloc(sizeof(cplx) * (size_t)m);
    if (!p->tw || !p->work) return plan_free(p), -1;
    for (int64_t k = 0; k < m / 2; k++) {
        double angle = 2.0 * M_PI * (double)k / (double)m;
        p->tw[k] = CMPLX(cos(angle), -sin(angle));
    }
    if (m == n) return 0;
    p->chirp = malloc(sizeof(cplx) * (size_t)n);
    p->bfft = malloc(sizeof(cplx) * (size_t)m);
    if (!p->chirp || !p->bfft) return plan_free(p), -1;
    /* sq = j^2 mod 2n, stepped by (j + 1)^2 - j^2 = 2j + 1 */
    for (int64_t j = 0, sq = 0; j < n; sq = (sq + 2 * j + 1) % (2 * n), j++) {
        double angle = M_PI * (double)sq / (double)n;
        p->chirp[j] = CMPLX(cos(angle), -sin(angle));
    }
    for (int64_t j = 0; j < m; j++) p->bfft[j] = 0;
    p->bfft[0] = conj(p->chirp[0]);
    for (int64_t j = 1; j < n; j++) p->bfft[j] = p->bfft[m - j] = conj(p->chirp[j]);
    radix2(p->bfft, m, p->tw);
    for (int64_t j = 0; j < m; j++) p->bfft[j] /= (double)m; /* exact: m is a power of two */
    return 0;
}

/* The forward transform of p->work's first n points, in place. */
static void plan_run(const fft_plan *p) {
    cplx *a = p->work;
    int64_t n = p->n, m = p->m;
    if (m == n) return radix2(a, m, p->tw);
    for (int64_t j = 0; j < n; j++) a[j] = mul(a[j], p->chirp[j]);
    for (int64_t j = n; j < m; j++) a[j] = 0;
    radix2(a, m, p->tw);
    /* the backward transform of a * bfft, as conj(forward(conj)) */
    for (int64_t j = 0; j < m; j++) a[j] = conj(mul(a[j], p->bfft[j]));
    radix2(a, m, p->tw);
    for (int64_t k = 0; k < n; k++) a[k] = mul(conj(a[k]), p->chirp[k]);
}

/* T is the real type of the interleaved pairs (float or double). */
#define FFT_ROWS(name, T)                                                                          \
    int name(const T *in, T *out, int64_t rows, int64_t n, int inverse) {                          \
        fft_plan p;                                                                                \
        if (rows < 1 || n < 1) return 0;                                                           \
        if (plan_make(&p, n) != 0) return -1;                                                      \
        double sign = inverse ? -1.0 : 1.0, scale = inverse ? 1.0 / (double)n : 1.0;               \
        for (int64_t r = 0; r < rows; r++) {                                                       \
            const T *x = in + 2 * r * n;                                                           \
            T *y = out + 2 * r * n;                                                                \
            for (int64_t j = 0; j < n; j++)                                                        \
                p.work[j] = CMPLX((double)x[2 * j], sign * (double)x[2 * j + 1]);                  \
            plan_run(&p);                                                                          \
            for (int64_t k = 0; k < n; k++) {                                                      \
                y[2 * k] = (T)(creal(p.work[k]) * scale);                                          \
                y[2 * k + 1] = (T)(sign * cimag(p.work[k]) * scale);                               \
            }                                                                                      \
        }                                                                                          \
        plan_free(&p);                                                                             \
        return 0;                                                                                  \
    }

FFT_ROWS(cpu_fft_c128, double)
FFT_ROWS(cpu_fft_c64, float)
