/* The reference complex FFTs (c_src/drivers/cpu/fft.c) against a direct O(n^2) DFT in long
 * double: powers of two (radix-2) and other lengths (Bluestein), several rows, forward and
 * inverse (divided by n), c128 and c64, and the round trip ifft(fft(x)) ~ x.
 *
 * Error bounds, as a fraction of the row's sum of |x| (which bounds every |X_k|): c128 is held
 * to 1e-14 (measured: 5e-16); c64 rounds a double result once to
 * float, at most 2^-24 |X_k| <= 6e-8 sum|x|, so it is held to 1e-7 (measured: 4e-8). */
#include <math.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include <cmocka.h>

#include "../drivers/cpu/fft.h"

#define TOL_C128 1e-14
#define TOL_C64  1e-7
#define ROWS     3

/* powers of two (radix 4 and 2), every radix up to 13 alone and mixed, primes above 13 and
 * lengths with such a factor (Bluestein) */
static const int64_t lengths[] = {1,   2,   3,   5,  7,  8,   11,   12,   13,   17,   64,
                                  100, 127, 6,   9,  15, 30,  45,   49,   60,   77,   143,
                                  169, 243, 360, 97, 34, 625, 1000, 1024, 1536, 2000, 4096};
#define NLEN ((int)(sizeof(lengths) / sizeof(lengths[0])))

static uint64_t rng = 0x9e3779b97f4a7c15u;
static double uniform(void) { /* in [-1, 1) */
    rng = rng * 6364136223846793005u + 1442695040888963407u;
    return (double)(rng >> 11) / 4503599627370496.0 - 1.0;
}

/* y = the DFT of the n complex values x[0], x[s], x[2 s], ... (forward, or backward not yet
 * divided by n), in long double, straight from the definition y_k = sum_j x_j w^(j k) but
 * factored: n's smallest prime factor p splits the sum into p sums over the j of each residue r
 * mod p, each the DFT of n / p values (taken the same way), times w^(r k). A prime length (or 1)
 * is summed directly. n (sum of n's prime factors) terms where the direct sum takes n^2: 4096
 * took most of this test's time, ten times over under valgrind. tw holds cos and sin of 2 pi t /
 * N for t < N, the row's length, of which n is a divisor: w^u is entry (u mod n) N / n, each from
 * cosl and sinl of its own angle, so that errors do not accumulate with n. */
static void dft_rec(const long double *x, int64_t s, long double *y, int64_t n, int inverse,
                    const long double *tw, int64_t big_n) {
    int64_t p = 2;
    while (p * p <= n && n % p) p++;
    if (p * p > n) p = n;
    int64_t m = n / p, step = big_n / n;
    long double *sub = NULL;
    if (m > 1) {
        sub = malloc(sizeof(long double) * 2 * (size_t)n);
        assert_non_null(sub);
        for (int64_t r = 0; r < p; r++)
            dft_rec(x + 2 * r * s, s * p, sub + 2 * r * m, m, inverse, tw, big_n);
    }
    for (int64_t k = 0; k < n; k++) {
        long double re = 0, im = 0;
        for (int64_t r = 0; r < p; r++) {
            const long double *v = m > 1 ? sub + 2 * (r * m + k % m) : x + 2 * r * s;
            const long double *w = tw + 2 * ((r * k) % n) * step;
            long double c = w[0], t = inverse ? w[1] : -w[1];
            re += v[0] * c - v[1] * t;
            im += v[0] * t + v[1] * c;
        }
        y[2 * k] = re;
        y[2 * k + 1] = im;
    }
    free(sub);
}

/* y = DFT(x) over one row of n, in long double; inverse: backward, divided by n */
static void dft(const double *x, long double *y, int64_t n, int inverse) {
    const long double pi = 3.141592653589793238462643383279502884L;
    long double *xl = malloc(sizeof(long double) * 2 * (size_t)n);
    long double *tw = malloc(sizeof(long double) * 2 * (size_t)n);
    assert_true(xl && tw);
    for (int64_t j = 0; j < 2 * n; j++) xl[j] = x[j];
    for (int64_t t = 0; t < n; t++) {
        long double a = 2 * pi * (long double)t / (long double)n;
        tw[2 * t] = cosl(a);
        tw[2 * t + 1] = sinl(a);
    }
    dft_rec(xl, 1, y, n, inverse, tw, n);
    if (inverse)
        for (int64_t j = 0; j < 2 * n; j++) y[j] /= n;
    free(xl);
    free(tw);
}

static double abs_sum(const double *x, int64_t n) {
    double s = 0;
    for (int64_t j = 0; j < n; j++) s += hypot(x[2 * j], x[2 * j + 1]);
    return s;
}

/* The largest |got - want| over a row, as a fraction of the row's sum |x| (divided by n for
 * the inverse, whose result is divided by n too). */
static double row_error(const double *x, const double *got, int64_t n, int inverse) {
    long double *want = malloc(sizeof(long double) * 2 * (size_t)n);
    assert_non_null(want);
    dft(x, want, n, inverse);
    double worst = 0;
    for (int64_t k = 0; k < n; k++) {
        double e = (double)hypotl(got[2 * k] - want[2 * k], got[2 * k + 1] - want[2 * k + 1]);
        if (e > worst) worst = e;
    }
    free(want);
    double scale = abs_sum(x, n) / (inverse ? (double)n : 1.0);
    return scale > 0 ? worst / scale : worst;
}

static void check_length(int64_t n, int c64, double tol, double *max_err) {
    size_t len = 2 * (size_t)(ROWS * n);
    double *x = malloc(sizeof(double) * len), *y = malloc(sizeof(double) * len),
           *z = malloc(sizeof(double) * len);
    float *xf = malloc(sizeof(float) * len), *yf = malloc(sizeof(float) * len),
          *zf = malloc(sizeof(float) * len);
    assert_true(x && y && z && xf && yf && zf);
    for (size_t i = 0; i < len; i++) {
        xf[i] = (float)uniform();
        x[i] = c64 ? (double)xf[i] : uniform();
    }
    for (int inverse = 0; inverse <= 1; inverse++) {
        if (c64) {
            assert_int_equal(cpu_fft_c64(xf, yf, ROWS, n, inverse), 0);
            for (size_t i = 0; i < len; i++) y[i] = yf[i];
        } else {
            assert_int_equal(cpu_fft_c128(x, y, ROWS, n, inverse), 0);
        }
        for (int64_t r = 0; r < ROWS; r++) {
            double e = row_error(x + 2 * r * n, y + 2 * r * n, n, inverse);
            if (e > *max_err) *max_err = e;
            if (!(e <= tol))
                fail_msg("n=%lld row %lld inverse=%d: error %.3g", (long long)n, (long long)r,
                         inverse, e);
        }
    }
    /* ifft(fft(x)) ~ x, element by element, against the row's sum |x| / n (the fft's error,
     * divided by n again on the way back, plus one more transform's) */
    if (c64) {
        assert_int_equal(cpu_fft_c64(xf, yf, ROWS, n, 0), 0);
        assert_int_equal(cpu_fft_c64(yf, zf, ROWS, n, 1), 0);
        for (size_t i = 0; i < len; i++) z[i] = zf[i];
    } else {
        assert_int_equal(cpu_fft_c128(x, y, ROWS, n, 0), 0);
        assert_int_equal(cpu_fft_c128(y, z, ROWS, n, 1), 0);
    }
    for (int64_t r = 0; r < ROWS; r++) {
        double bound = 2 * tol * abs_sum(x + 2 * r * n, n) / (double)n + (c64 ? 6e-8 : 0);
        for (int64_t j = 0; j < 2 * n; j++)
            if (!(fabs(z[2 * r * n + j] - x[2 * r * n + j]) <= bound))
                fail_msg("round trip n=%lld: %.17g vs %.17g", (long long)n, z[2 * r * n + j],
                         x[2 * r * n + j]);
    }
    free(x), free(y), free(z), free(xf), free(yf), free(zf);
}

static void test_c128_against_dft(void **state) {
    (void)state;
    double worst = 0;
    for (int i = 0; i < NLEN; i++) check_length(lengths[i], 0, TOL_C128, &worst);
    printf("c128: max error %.3g of sum|x|\n", worst);
}

static void test_c64_against_dft(void **state) {
    (void)state;
    double worst = 0;
    for (int i = 0; i < NLEN; i++) check_length(lengths[i], 1, TOL_C64, &worst);
    printf("c64: max error %.3g of sum|x|\n", worst);
}

/* Small exact cases: fft([1, 2, 3, 4]) = [10, -2+2i, -2, -2-2i]; a length-1 row is itself;
 * zero rows touch nothing. */
static void test_exact_values(void **state) {
    (void)state;
    const double x[] = {1, 0, 2, 0, 3, 0, 4, 0};
    double y[8], z[8];
    assert_int_equal(cpu_fft_c128(x, y, 1, 4, 0), 0);
    const double want[] = {10, 0, -2, 2, -2, 0, -2, -2};
    for (int i = 0; i < 8; i++) assert_true(fabs(y[i] - want[i]) < 1e-15);
    assert_int_equal(cpu_fft_c128(y, z, 1, 4, 1), 0);
    for (int i = 0; i < 8; i++) assert_true(fabs(z[i] - x[i]) < 1e-15);
    const float one[] = {1.5f, -2.5f, 3.0f, 0.25f};
    float o[4] = {0};
    assert_int_equal(cpu_fft_c64(one, o, 2, 1, 0), 0);
    for (int i = 0; i < 4; i++) assert_true(o[i] == one[i]);
    assert_int_equal(cpu_fft_c64(one, o, 2, 1, 1), 0);
    for (int i = 0; i < 4; i++) assert_true(o[i] == one[i]);
    double untouched[2] = {7, 7};
    assert_int_equal(cpu_fft_c128(x, untouched, 0, 5, 0), 0);
    assert_true(untouched[0] == 7 && untouched[1] == 7);
}

/* Plans are cached (16 lengths) and shared between threads: four threads transform 40 lengths
 * each, in different orders, so plans are made, shared and evicted while others use them; every
 * result must be the one a single thread computes. */
#define THREAD_LENGTHS 40
static void *transform_many(void *arg) {
    int id = (int)(intptr_t)arg, bad = 0;
    double in[2 * 64], got[2 * 64], want[2 * 64];
    for (int r = 0; r < 20; r++)
        for (int k = 0; k < THREAD_LENGTHS; k++) {
            int64_t n = 1 + (k * 7 + id * 13 + r) % THREAD_LENGTHS;
            for (int64_t j = 0; j < 2 * n; j++) in[j] = (double)((j * 31 + n) % 17) - 8;
            if (cpu_fft_c128(in, got, 1, n, r & 1) != 0) bad++;
            /* the direct DFT, as the reference of this thread (cos and sin of each multiple of
             * 2 pi / n computed once) */
            long double tc[64], ts[64];
            for (int64_t u = 0; u < n; u++) {
                long double a = (r & 1 ? 2 : -2) * 3.14159265358979323846264338327950288L *
                                (long double)u / (long double)n;
                tc[u] = cosl(a);
                ts[u] = sinl(a);
            }
            for (int64_t q = 0; q < n; q++) {
                long double re = 0, im = 0;
                for (int64_t j = 0; j < n; j++) {
                    int64_t u = (j * q) % n;
                    re += in[2 * j] * tc[u] - in[2 * j + 1] * ts[u];
                    im += in[2 * j] * ts[u] + in[2 * j + 1] * tc[u];
                }
                want[2 * q] = (double)(r & 1 ? re / n : re);
                want[2 * q + 1] = (double)(r & 1 ? im / n : im);
            }
            for (int64_t j = 0; j < 2 * n; j++)
                if (fabs(got[j] - want[j]) > 1e-12 * 8 * (double)n) bad++;
        }
    return (void *)(intptr_t)bad;
}

static void test_threads_share_plans(void **state) {
    (void)state;
    pthread_t t[4];
    for (int i = 0; i < 4; i++)
        assert_int_equal(pthread_create(&t[i], NULL, transform_many, (void *)(intptr_t)i), 0);
    for (int i = 0; i < 4; i++) {
        void *bad;
        pthread_join(t[i], &bad);
        assert_int_equal((intptr_t)bad, 0);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_c128_against_dft),
        cmocka_unit_test(test_c64_against_dft),
        cmocka_unit_test(test_exact_values),
        cmocka_unit_test(test_threads_share_plans),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
