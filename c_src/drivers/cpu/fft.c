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
 * log2(m) roundings rather than with m.
 *
 * Plans (twiddles, chirp and the chirp's transform) are made once per length and kept, up to
 * PLAN_CACHE lengths, shared read-only between calls and threads; each call has its own work
 * buffer. Making the plan costs about as much as transforming a few rows. */
#include <complex.h>
#include <math.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>

#include "fft.h"

#ifndef CMPLX /* glibc defines it for GCC only: clang gets the builtin it would expand to */
#define CMPLX(x, y) __builtin_complex((double)(x), (double)(y))
#endif

typedef double complex cplx;

typedef struct {
    int64_t n, m; /* the length, and the radix-2 length that computes it (m == n: no chirp) */
    cplx *tw; /* per stage of half-length h (1, 2, 4 ... m / 2), at tw + h - 1: exp(-pi i j / h) */
    cplx *chirp; /* Bluestein: c_j, j < n */
    cplx *bfft;  /* Bluestein: the transform of conj(c) laid out circularly, over m, divided by m */
    int users;   /* calls using it, under cache_lock */
    bool cached;
} fft_plan;

/* Plain arithmetic: C's `*` on complex also checks for NaN results and calls __muldc3 (Annex G
 * infinities), which the butterflies don't need and which costs a branch each. */
static inline cplx mul(cplx a, cplx b) {
    return CMPLX(creal(a) * creal(b) - cimag(a) * cimag(b),
                 creal(a) * cimag(b) + cimag(a) * creal(b));
}

/* In place, forward, over m = 2^k points with tw as above: the bit-reversal permutation, two
 * stages whose twiddles are 1 and -i (no multiplication), then the others, each reading its
 * twiddles contiguously. */
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
    if (m >= 2)
        for (int64_t i = 0; i < m; i += 2) {
            cplx u = a[i], v = a[i + 1];
            a[i] = u + v;
            a[i + 1] = u - v;
        }
    if (m >= 4)
        for (int64_t i = 0; i < m; i += 4) {
            cplx u0 = a[i], u1 = a[i + 1], v0 = a[i + 2], v1 = a[i + 3];
            /* v1 * -i */
            cplx w1 = CMPLX(cimag(v1), -creal(v1));
            a[i] = u0 + v0;
            a[i + 2] = u0 - v0;
            a[i + 1] = u1 + w1;
            a[i + 3] = u1 - w1;
        }
    for (int64_t half = 4; half < m; half <<= 1) {
        const cplx *t = tw + half - 1;
        for (int64_t i = 0; i < m; i += 2 * half) {
            cplx *x = a + i, *y = a + i + half;
            for (int64_t j = 0; j < half; j++) {
                cplx u = x[j], v = mul(y[j], t[j]);
                x[j] = u + v;
                y[j] = u - v;
            }
        }
    }
}

static void plan_free(fft_plan *p) {
    free(p->tw);
    free(p->chirp);
    free(p->bfft);
    free(p);
}

/* A plan for n points, or NULL when memory runs out. */
static fft_plan *plan_make(int64_t n) {
    int64_t m = 1;
    if ((n & (n - 1)) == 0)
        m = n;
    else {
        if (n > (INT64_C(1) << 60)) return NULL;
        while (m < 2 * n - 1) m <<= 1;
    }
    fft_plan *p = calloc(1, sizeof *p);
    if (!p) return NULL;
    p->n = n;
    p->m = m;
    p->tw = malloc(sizeof(cplx) * (size_t)(m > 1 ? m - 1 : 1));
    if (!p->tw) return plan_free(p), NULL;
    for (int64_t h = 1; h < m; h <<= 1)
        for (int64_t j = 0; j < h; j++) {
            double angle = M_PI * (double)j / (double)h;
            p->tw[h - 1 + j] = CMPLX(cos(angle), -sin(angle));
        }
    if (m == n) return p;
    p->chirp = malloc(sizeof(cplx) * (size_t)n);
    p->bfft = malloc(sizeof(cplx) * (size_t)m);
    if (!p->chirp || !p->bfft) return plan_free(p), NULL;
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
    return p;
}

/* The cache: the most recently used plans first. A plan evicted while in use is freed by its
 * last user. */
#define PLAN_CACHE 16
static fft_plan *cache[PLAN_CACHE];
static pthread_mutex_t cache_lock = PTHREAD_MUTEX_INITIALIZER;

static fft_plan *plan_get(int64_t n) {
    pthread_mutex_lock(&cache_lock);
    for (int k = 0; k < PLAN_CACHE; k++) {
        fft_plan *p = cache[k];
        if (!p || p->n != n) continue;
        for (int j = k; j > 0; j--) cache[j] = cache[j - 1];
        cache[0] = p;
        p->users++;
        pthread_mutex_unlock(&cache_lock);
        return p;
    }
    pthread_mutex_unlock(&cache_lock);
    /* made outside the lock: another thread may make the same plan, and one of them is kept */
    fft_plan *p = plan_make(n);
    if (!p) return NULL;
    p->users = 1;
    pthread_mutex_lock(&cache_lock);
    fft_plan *old = cache[PLAN_CACHE - 1];
    for (int j = PLAN_CACHE - 1; j > 0; j--) cache[j] = cache[j - 1];
    cache[0] = p;
    p->cached = true;
    if (old) {
        old->cached = false;
        if (old->users == 0) plan_free(old);
    }
    pthread_mutex_unlock(&cache_lock);
    return p;
}

static void plan_put(fft_plan *p) {
    pthread_mutex_lock(&cache_lock);
    if (--p->users == 0 && !p->cached) plan_free(p);
    pthread_mutex_unlock(&cache_lock);
}

/* The forward transform of a's first n points (a holds m), in place. */
static void plan_run(const fft_plan *p, cplx *a) {
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
        if (rows < 1 || n < 1) return 0;                                                           \
        fft_plan *p = plan_get(n);                                                                 \
        if (!p) return -1;                                                                         \
        cplx *work = malloc(sizeof(cplx) * (size_t)p->m);                                          \
        if (!work) return plan_put(p), -1;                                                         \
        double sign = inverse ? -1.0 : 1.0, scale = inverse ? 1.0 / (double)n : 1.0;               \
        for (int64_t r = 0; r < rows; r++) {                                                       \
            const T *x = in + 2 * r * n;                                                           \
            T *y = out + 2 * r * n;                                                                \
            for (int64_t j = 0; j < n; j++)                                                        \
                work[j] = CMPLX((double)x[2 * j], sign * (double)x[2 * j + 1]);                    \
            plan_run(p, work);                                                                     \
            for (int64_t k = 0; k < n; k++) {                                                      \
                y[2 * k] = (T)(creal(work[k]) * scale);                                            \
                y[2 * k + 1] = (T)(sign * cimag(work[k]) * scale);                                 \
            }                                                                                      \
        }                                                                                          \
        free(work);                                                                                \
        plan_put(p);                                                                               \
        return 0;                                                                                  \
    }

FFT_ROWS(cpu_fft_c128, double)
FFT_ROWS(cpu_fft_c64, float)
