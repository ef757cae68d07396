/* Complex FFTs, the portable reference: any length n, every row in double.
 *
 * Only the forward transform is written: the backward one is conj(forward(conj(x))), then
 * divided by n. A length whose prime factors are at most 13 runs a mixed-radix Stockham
 * transform (self-sorting, no bit reversal: each stage reads one buffer and writes the other),
 * radix 4 first, then 2, 3, 5, 7, 11 and 13. Any other length runs Bluestein's algorithm: with
 * the chirp c_j = exp(-i pi j^2 / n), 2jk = j^2 + k^2 - (k - j)^2 turns the DFT into
 * X_k = c_k sum_j (x_j c_j) conj(c_{k-j}), a convolution computed with transforms of a power of
 * two m >= 2n - 1.
 *
 * Accuracy: every twiddle is cos/sin of its own angle (2 pi (p u mod n) / n, or
 * pi (j^2 mod 2n) / n with j^2 mod 2n kept exact in integers), never a product of earlier ones,
 * so the error grows like the number of stages rather than with n.
 *
 * Plans (the stages' twiddles, the chirp and the chirp's transform) are made once per length
 * and kept, up to PLAN_CACHE lengths, shared read-only between calls and threads; each call has
 * its own work buffers. Making the plan costs about as much as transforming a few rows. */
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

#define MAX_RADIX 13

/* One stage of the mixed-radix transform: radix r over a current length n = r * m; tw holds
 * exp(-2 pi i p u / n) at [p * (r - 1) + u - 1] for p < m, 0 < u < r; wr the r-th roots. */
typedef struct {
    int r;
    int64_t n, m;
    cplx *tw;
    cplx wr[MAX_RADIX];
} stage;

typedef struct {
    int64_t n; /* the length asked for */
    int64_t m; /* the length the stages compute: n, or Bluestein's power of two >= 2n - 1 */
    int nstages;
    stage st[64];
    cplx *chirp; /* Bluestein: c_j = exp(-i pi j^2 / n), j < n */
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

/* exp(-2 pi i k / n), from the angle of k mod n itself. */
static cplx root(int64_t k, int64_t n) {
    double angle = 2.0 * M_PI * (double)(k % n) / (double)n;
    return CMPLX(cos(angle), -sin(angle));
}

/* One Stockham stage (decimation in frequency, self-sorting): for every p < m and q < s, the
 * r-point DFT of in[q + s (p + t m)], t < r, each output u times w^(p u), into
 * out[q + s (r p + u)]. */
static void run_stage(const stage *g, int64_t s, const cplx *in, cplx *out) {
    int r = g->r;
    int64_t m = g->m;
    for (int64_t p = 0; p < m; p++) {
        const cplx *w = g->tw + p * (r - 1);
        const cplx *x = in + s * p;
        cplx *y = out + s * r * p;
        switch (r) {
        case 2:
            for (int64_t q = 0; q < s; q++) {
                cplx a0 = x[q], a1 = x[q + s * m];
                y[q] = a0 + a1;
                y[q + s] = mul(a0 - a1, w[0]);
            }
            break;
        case 3: {
            const double c = -0.5, sn = 0.86602540378443864676;
            for (int64_t q = 0; q < s; q++) {
                cplx a0 = x[q], a1 = x[q + s * m], a2 = x[q + 2 * s * m];
                cplx t = a1 + a2, d = a1 - a2;
                cplx h = a0 + c * t;
                /* -i sin(60) (a1 - a2) */
                cplx e = CMPLX(sn * cimag(d), -sn * creal(d));
                y[q] = a0 + t;
                y[q + s] = mul(h + e, w[0]);
                y[q + 2 * s] = mul(h - e, w[1]);
            }
            break;
        }
        case 4:
            for (int64_t q = 0; q < s; q++) {
                cplx a0 = x[q], a1 = x[q + s * m], a2 = x[q + 2 * s * m], a3 = x[q + 3 * s * m];
                cplx t0 = a0 + a2, t1 = a0 - a2, t2 = a1 + a3, d = a1 - a3;
                cplx t3 = CMPLX(cimag(d), -creal(d)); /* -i (a1 - a3) */
                y[q] = t0 + t2;
                y[q + s] = mul(t1 + t3, w[0]);
                y[q + 2 * s] = mul(t0 - t2, w[1]);
                y[q + 3 * s] = mul(t1 - t3, w[2]);
            }
            break;
        case 5: {
            const double c1 = 0.30901699437494742410, c2 = -0.80901699437494742410,
                         s1 = 0.95105651629515357212, s2 = 0.58778525229247312917;
            for (int64_t q = 0; q < s; q++) {
                cplx a0 = x[q], a1 = x[q + s * m], a2 = x[q + 2 * s * m], a3 = x[q + 3 * s * m],
                     a4 = x[q + 4 * s * m];
                cplx t1 = a1 + a4, t2 = a2 + a3, t3 = a1 - a4, t4 = a2 - a3;
                cplx m1 = a0 + c1 * t1 + c2 * t2, m2 = a0 + c2 * t1 + c1 * t2;
                cplx n1 = s1 * t3 + s2 * t4, n2 = s2 * t3 - s1 * t4;
                /* -i n and +i n */
                cplx in1 = CMPLX(cimag(n1), -creal(n1)), in2 = CMPLX(cimag(n2), -creal(n2));
                y[q] = a0 + t1 + t2;
                y[q + s] = mul(m1 + in1, w[0]);
                y[q + 2 * s] = mul(m2 + in2, w[1]);
                y[q + 3 * s] = mul(m2 - in2, w[2]);
                y[q + 4 * s] = mul(m1 - in1, w[3]);
            }
            break;
        }
        default:
            for (int64_t q = 0; q < s; q++) {
                cplx a[MAX_RADIX];
                for (int t = 0; t < r; t++) a[t] = x[q + t * s * m];
                for (int u = 0; u < r; u++) {
                    cplx b = 0;
                    for (int t = 0; t < r; t++) b += mul(a[t], g->wr[(t * u) % r]);
                    y[q + u * s] = u ? mul(b, w[u - 1]) : b;
                }
            }
            break;
        }
    }
}

/* The forward transform of a's m points; b is scratch of m. Returns where the result is. */
static cplx *run_stages(const fft_plan *p, cplx *a, cplx *b) {
    int64_t s = 1;
    for (int k = 0; k < p->nstages; k++) {
        run_stage(&p->st[k], s, a, b);
        cplx *t = a;
        a = b;
        b = t;
        s *= p->st[k].r;
    }
    return a;
}

static void plan_free(fft_plan *p) {
    for (int k = 0; k < p->nstages; k++) free(p->st[k].tw);
    free(p->chirp);
    free(p->bfft);
    free(p);
}

/* The radices of n (4s first, then 2, 3, 5 ... 13) into p->st; false when a larger prime
 * divides it. */
static bool factor(fft_plan *p, int64_t n) {
    static const int radices[] = {4, 2, 3, 5, 7, 11, 13};
    int64_t rest = n, cur = n;
    p->nstages = 0;
    for (size_t i = 0; i < sizeof radices / sizeof radices[0]; i++)
        while (rest % radices[i] == 0 && p->nstages < 64) {
            stage *g = &p->st[p->nstages++];
            g->r = radices[i];
            g->n = cur;
            g->m = cur / g->r;
            cur = g->m;
            rest /= g->r;
        }
    return rest == 1;
}

static bool stages_make(fft_plan *p) {
    for (int k = 0; k < p->nstages; k++) {
        stage *g = &p->st[k];
        g->tw = malloc(sizeof(cplx) * (size_t)(g->m * (g->r - 1) > 0 ? g->m * (g->r - 1) : 1));
        if (!g->tw) return false;
        for (int64_t q = 0; q < g->m; q++)
            for (int u = 1; u < g->r; u++) g->tw[q * (g->r - 1) + u - 1] = root(q * u, g->n);
        for (int u = 0; u < g->r; u++) g->wr[u] = root(u, g->r);
    }
    return true;
}

/* A plan for n points, or NULL when memory runs out. */
static fft_plan *plan_make(int64_t n) {
    if (n > (INT64_C(1) << 60)) return NULL;
    fft_plan *p = calloc(1, sizeof *p);
    if (!p) return NULL;
    p->n = p->m = n;
    if (factor(p, n)) {
        if (!stages_make(p)) return plan_free(p), NULL;
        return p;
    }
    /* Bluestein: a convolution of length m, a power of two */
    int64_t m = 1;
    while (m < 2 * n - 1) m <<= 1;
    p->m = m;
    factor(p, m);
    p->chirp = malloc(sizeof(cplx) * (size_t)n);
    p->bfft = malloc(sizeof(cplx) * (size_t)m);
    cplx *scratch = malloc(sizeof(cplx) * (size_t)m);
    if (!stages_make(p) || !p->chirp || !p->bfft || !scratch)
        return free(scratch), plan_free(p), NULL;
    /* sq = j^2 mod 2n, stepped by (j + 1)^2 - j^2 = 2j + 1 */
    for (int64_t j = 0, sq = 0; j < n; sq = (sq + 2 * j + 1) % (2 * n), j++) {
        double angle = M_PI * (double)sq / (double)n;
        p->chirp[j] = CMPLX(cos(angle), -sin(angle));
    }
    for (int64_t j = 0; j < m; j++) p->bfft[j] = 0;
    p->bfft[0] = conj(p->chirp[0]);
    for (int64_t j = 1; j < n; j++) p->bfft[j] = p->bfft[m - j] = conj(p->chirp[j]);
    cplx *f = run_stages(p, p->bfft, scratch);
    for (int64_t j = 0; j < m; j++) p->bfft[j] = f[j] / (double)m; /* exact: m is 2^k */
    free(scratch);
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
    /* made outside the lock: when another thread cached the same length meanwhile, its plan
     * is used and this one freed */
    fft_plan *p = plan_make(n);
    if (!p) return NULL;
    p->users = 1;
    pthread_mutex_lock(&cache_lock);
    for (int k = 0; k < PLAN_CACHE; k++)
        if (cache[k] && cache[k]->n == n) {
            fft_plan *q = cache[k];
            q->users++;
            pthread_mutex_unlock(&cache_lock);
            plan_free(p);
            return q;
        }
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

/* The forward transform of a's first n points; a and b hold m each. Returns where the result
 * is (a or b). */
static cplx *plan_run(const fft_plan *p, cplx *a, cplx *b) {
    int64_t n = p->n, m = p->m;
    if (m == n) return run_stages(p, a, b);
    for (int64_t j = 0; j < n; j++) a[j] = mul(a[j], p->chirp[j]);
    for (int64_t j = n; j < m; j++) a[j] = 0;
    cplx *f = run_stages(p, a, b), *g = f == a ? b : a;
    /* the backward transform of f * bfft, as conj(forward(conj)) */
    for (int64_t j = 0; j < m; j++) f[j] = conj(mul(f[j], p->bfft[j]));
    f = run_stages(p, f, g);
    for (int64_t k = 0; k < n; k++) f[k] = mul(conj(f[k]), p->chirp[k]);
    return f;
}

/* T is the real type of the interleaved pairs (float or double). */
#define FFT_ROWS(name, T)                                                                          \
    int name(const T *in, T *out, int64_t rows, int64_t n, int inverse) {                          \
        if (rows < 1 || n < 1) return 0;                                                           \
        fft_plan *p = plan_get(n);                                                                 \
        if (!p) return -1;                                                                         \
        cplx *work = malloc(sizeof(cplx) * 2 * (size_t)p->m);                                      \
        if (!work) return plan_put(p), -1;                                                         \
        double sign = inverse ? -1.0 : 1.0, scale = inverse ? 1.0 / (double)n : 1.0;               \
        for (int64_t r = 0; r < rows; r++) {                                                       \
            const T *x = in + 2 * r * n;                                                           \
            T *y = out + 2 * r * n;                                                                \
            for (int64_t j = 0; j < n; j++)                                                        \
                work[j] = CMPLX((double)x[2 * j], sign * (double)x[2 * j + 1]);                    \
            const cplx *f = plan_run(p, work, work + p->m);                                        \
            for (int64_t k = 0; k < n; k++) {                                                      \
                y[2 * k] = (T)(creal(f[k]) * scale);                                               \
                y[2 * k + 1] = (T)(sign * cimag(f[k]) * scale);                                    \
            }                                                                                      \
        }                                                                                          \
        free(work);                                                                                \
        plan_put(p);                                                                               \
        return 0;                                                                                  \
    }

FFT_ROWS(cpu_fft_c128, double)
FFT_ROWS(cpu_fft_c64, float)
