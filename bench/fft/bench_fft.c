/* Complex FFTs on the host: the reference (c_src/drivers/cpu/fft.c) against the libraries that
 * run.sh finds (FFTW 3, pocketfft C++ and C, KISS FFT), in
 * microseconds per transform (per call for the batch), the median of several repeats, and each
 * one's largest error against the reference computed in double. Forward transforms only;
 * library plans are made once, outside the timing. */
#include <complex.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../../c_src/drivers/cpu/fft.h"
#ifdef HAVE_FFTW
#include <fftw3.h>
#endif
#ifdef HAVE_POCKETFFT_C
#include "pocketfft.h"
#endif
#ifdef HAVE_KISS
#include <kissfft/kiss_fft.h>
#endif
#ifdef HAVE_POCKETFFT
int pf_c2c_f64(const double *in, double *out, int64_t rows, int64_t n, int inverse, int nthreads);
int pf_c2c_f32(const float *in, float *out, int64_t rows, int64_t n, int inverse, int nthreads);
#endif

enum { C64, C128 };
#define NIMPL 7
static const char *names[NIMPL] = {"reference", "fftw-est",    "fftw-meas",
                                   "pocketfft", "pocketfft2t", "pocketfft-C",
                                   "kissfft"};

typedef struct {
    int type;
    int64_t n, rows;
    void *in, *out;
#ifdef HAVE_FFTW
    void *plan; /* fftw_plan or fftwf_plan */
#endif
#ifdef HAVE_POCKETFFT_C
    cfft_plan pc;
#endif
#ifdef HAVE_KISS
    kiss_fft_cfg kc;
#endif
} job;

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* Sets up implementation k for j (0: not available). */
static int setup(int k, job *j) {
    (void)j;
    switch (k) {
    case 0: return 1;
#ifdef HAVE_FFTW
    case 1:
    case 2: {
        int n = (int)j->n, flags = k == 1 ? FFTW_ESTIMATE : FFTW_MEASURE;
        size_t bytes = (size_t)(2 * j->n * j->rows) * (j->type == C64 ? 4 : 8);
        void *a = fftw_malloc(bytes), *b = fftw_malloc(bytes); /* MEASURE overwrites */
        if (j->type == C64)
            j->plan = fftwf_plan_many_dft(1, &n, (int)j->rows, a, NULL, 1, n, b, NULL, 1, n,
                                          FFTW_FORWARD, flags | FFTW_UNALIGNED);
        else
            j->plan = fftw_plan_many_dft(1, &n, (int)j->rows, a, NULL, 1, n, b, NULL, 1, n,
                                         FFTW_FORWARD, flags | FFTW_UNALIGNED);
        fftw_free(a), fftw_free(b);
        return j->plan != NULL;
    }
#endif
#ifdef HAVE_POCKETFFT
    case 3:
    case 4: return 1;
#endif
#ifdef HAVE_POCKETFFT_C
    case 5: return j->type == C128 && (j->pc = make_cfft_plan((size_t)j->n)) != NULL;
#endif
#ifdef HAVE_KISS
    case 6: return j->type == C64 && (j->kc = kiss_fft_alloc((int)j->n, 0, NULL, NULL)) != NULL;
#endif
    default: return 0;
    }
}

static void teardown(int k, job *j) {
#ifdef HAVE_FFTW
    if (k == 1 || k == 2) j->type == C64 ? fftwf_destroy_plan(j->plan) : fftw_destroy_plan(j->plan);
#endif
#ifdef HAVE_POCKETFFT_C
    if (k == 5) destroy_cfft_plan(j->pc);
#endif
#ifdef HAVE_KISS
    if (k == 6) kiss_fft_free(j->kc);
#endif
    (void)k, (void)j;
}

static void run(int k, job *j) {
    int64_t n = j->n, rows = j->rows;
    switch (k) {
    case 0:
        j->type == C64 ? cpu_fft_c64(j->in, j->out, rows, n, 0)
                       : cpu_fft_c128(j->in, j->out, rows, n, 0);
        break;
#ifdef HAVE_FFTW
    case 1:
    case 2:
        if (j->type == C64)
            fftwf_execute_dft(j->plan, j->in, j->out);
        else
            fftw_execute_dft(j->plan, j->in, j->out);
        break;
#endif
#ifdef HAVE_POCKETFFT
    case 3:
    case 4:
        j->type == C64 ? pf_c2c_f32(j->in, j->out, rows, n, 0, k == 3 ? 1 : 2)
                       : pf_c2c_f64(j->in, j->out, rows, n, 0, k == 3 ? 1 : 2);
        break;
#endif
#ifdef HAVE_POCKETFFT_C
    case 5: /* in place: copy the row first, as a caller keeping its input would */
        for (int64_t r = 0; r < rows; r++) {
            double *o = (double *)j->out + 2 * r * n;
            memcpy(o, (double *)j->in + 2 * r * n, sizeof(double) * 2 * (size_t)n);
            cfft_forward(j->pc, o, 1.0);
        }
        break;
#endif
#ifdef HAVE_KISS
    case 6:
        for (int64_t r = 0; r < rows; r++)
            kiss_fft(j->kc, (kiss_fft_cpx *)j->in + r * n, (kiss_fft_cpx *)j->out + r * n);
        break;
#endif
    }
}

static int cmp(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* The median over REPEATS samples of at least 20 ms each, in microseconds per call. */
#define REPEATS 7
static double time_us(int k, job *j) {
    run(k, j);
    int64_t iters = 1;
    for (double t0 = now(); now() - t0 < 0.02; iters *= 2)
        for (int64_t i = 0; i < iters; i++) run(k, j);
    double s[REPEATS];
    for (int r = 0; r < REPEATS; r++) {
        double t0 = now();
        for (int64_t i = 0; i < iters; i++) run(k, j);
        s[r] = (now() - t0) / (double)iters * 1e6;
    }
    qsort(s, REPEATS, sizeof(double), cmp);
    return s[REPEATS / 2];
}

/* The truth in double: the reference's c128 transform of the same values (inverse for k 8). */
static double max_error(job *j, int inverse) {
    size_t len = 2 * (size_t)(j->n * j->rows);
    double *x = malloc(len * sizeof(double)), *y = malloc(len * sizeof(double)), err = 0, big = 0;
    for (size_t i = 0; i < len; i++)
        x[i] = j->type == C64 ? ((float *)j->in)[i] : ((double *)j->in)[i];
    cpu_fft_c128(x, y, j->rows, j->n, inverse);
    for (size_t i = 0; i < len; i++) {
        double got = j->type == C64 ? ((float *)j->out)[i] : ((double *)j->out)[i];
        if (fabs(got - y[i]) > err) err = fabs(got - y[i]);
        if (fabs(y[i]) > big) big = fabs(y[i]);
    }
    free(x), free(y);
    return err / big;
}

int main(void) {
    static const int64_t cases[][2] = {{64, 1},   {1000, 1},  {1024, 1},
                                       {4096, 1}, {65536, 1}, {256, 1024}};
    double worst[2][NIMPL] = {{0}};
    for (int type = C64; type <= C128; type++) {
        printf("\n%s: microseconds per transform (per call of 1024 rows for 256x1024)\n%-10s",
               type == C64 ? "c64" : "c128", "n");
        for (int k = 0; k < NIMPL; k++) printf("%13s", names[k]);
        printf("\n");
        for (size_t c = 0; c < sizeof(cases) / sizeof(cases[0]); c++) {
            job j = {.type = type, .n = cases[c][0], .rows = cases[c][1]};
            size_t len = 2 * (size_t)(j.n * j.rows), es = type == C64 ? 4 : 8;
            j.in = malloc(len * es), j.out = malloc(len * es);
            srand(1);
            for (size_t i = 0; i < len; i++) {
                double v = 2.0 * rand() / RAND_MAX - 1.0;
                if (type == C64)
                    ((float *)j.in)[i] = (float)v;
                else
                    ((double *)j.in)[i] = v;
            }
            char label[32];
            snprintf(label, sizeof label, j.rows > 1 ? "%lldx%lld" : "%lld", (long long)j.n,
                     (long long)j.rows);
            printf("%-10s", label);
            for (int k = 0; k < NIMPL; k++) {
                if (!setup(k, &j)) {
                    printf("%13s", "-");
                    continue;
                }
                printf("%13.2f", time_us(k, &j));
                fflush(stdout);
                double e = max_error(&j, 0);
                if (e > worst[type][k]) worst[type][k] = e;
                teardown(k, &j);
            }
            printf("\n");
            free(j.in), free(j.out);
        }
    }
    printf("\nlargest |error| / max|X| against the reference in double, over these sizes:\n");
    for (int type = C64; type <= C128; type++) {
        printf("%-10s", type == C64 ? "c64" : "c128");
        for (int k = 0; k < NIMPL; k++) printf("%13.2g", worst[type][k]);
        printf("\n");
    }
    return 0;
}
