/* Raw cblas_sgemm from C: the ceiling the blas driver is measured against.
 *
 *     sgemm_bench MIN_SECONDS N...            one caller: "sgemm<TAB>N<TAB>seconds<TAB>GFLOP/s"
 *     sgemm_bench MIN_SECONDS -c CALLERS N    CALLERS threads multiplying at once:
 *                                             "sgemm_concurrent<TAB>N<TAB>CALLERS<TAB>GFLOP/s total"
 *
 * Seconds are the median of repeated batches, as bench/blas/blas_bench.exs and numpy_matmul.py
 * measure. Built by bench/blas/run.sh against the system OpenBLAS. */
#include <cblas.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

typedef struct {
    int n;
    float *a, *b, *c;
} problem;

static void problem_init(problem *p, int n) {
    size_t e = (size_t)n * (size_t)n;
    p->n = n;
    p->a = malloc(sizeof(float) * e);
    p->b = malloc(sizeof(float) * e);
    p->c = malloc(sizeof(float) * e);
    if (!p->a || !p->b || !p->c) {
        fprintf(stderr, "out of memory\n");
        exit(1);
    }
    for (size_t i = 0; i < e; i++) {
        p->a[i] = (float)((i * 7919) % 1000) / 1000.0f - 0.5f;
        p->b[i] = (float)((i * 104729) % 1000) / 1000.0f - 0.5f;
    }
}

static void problem_free(problem *p) {
    free(p->a);
    free(p->b);
    free(p->c);
}

static void multiply(const problem *p) {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, p->n, p->n, p->n, 1.0f, p->a, p->n,
                p->b, p->n, 0.0f, p->c, p->n);
}

static int cmp_double(const void *x, const void *y) {
    double a = *(const double *)x, b = *(const double *)y;
    return a < b ? -1 : a > b;
}

/* Median seconds per call over batches grown until one lasts 50 ms, for min_seconds. */
static double timed(const problem *p, double min_seconds) {
    double samples[4096];
    int ns = 0;
    long n = 1;
    multiply(p);
    double start = now();
    for (;;) {
        double t0 = now();
        for (long i = 0; i < n; i++) multiply(p);
        double dt = (now() - t0) / (double)n;
        if (ns < 4096) samples[ns++] = dt;
        if (dt * (double)n < 0.05) n *= 4;
        if (now() - start > min_seconds && ns >= 5) break;
    }
    qsort(samples, (size_t)ns, sizeof(double), cmp_double);
    return samples[ns / 2];
}

typedef struct {
    problem p;
    double seconds;
    long calls;
    pthread_barrier_t *go;
} caller;

/* Multiplies for `seconds` after the barrier, counting calls. */
static void *caller_run(void *arg) {
    caller *c = arg;
    multiply(&c->p);
    pthread_barrier_wait(c->go);
    double end = now() + c->seconds;
    c->calls = 0;
    while (now() < end) {
        multiply(&c->p);
        c->calls++;
    }
    return NULL;
}

static double flops(int n) {
    return 2.0 * (double)n * (double)n * (double)n;
}

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: %s MIN_SECONDS N... | MIN_SECONDS -c CALLERS N\n", argv[0]);
        return 2;
    }
    double min_seconds = atof(argv[1]);
    if (strcmp(argv[2], "-c") == 0 && argc == 5) {
        int callers = atoi(argv[3]), n = atoi(argv[4]);
        caller cs[64];
        pthread_t th[64];
        pthread_barrier_t go;
        if (callers < 1 || callers > 64) return 2;
        pthread_barrier_init(&go, NULL, (unsigned)callers + 1);
        for (int k = 0; k < callers; k++) {
            problem_init(&cs[k].p, n);
            cs[k].seconds = min_seconds;
            cs[k].go = &go;
            pthread_create(&th[k], NULL, caller_run, &cs[k]);
        }
        pthread_barrier_wait(&go);
        double t0 = now();
        long calls = 0;
        for (int k = 0; k < callers; k++) {
            pthread_join(th[k], NULL);
            calls += cs[k].calls;
            problem_free(&cs[k].p);
        }
        double dt = now() - t0;
        printf("sgemm_concurrent\t%d\t%d\t%.2f\n", n, callers, flops(n) * (double)calls / dt / 1e9);
        return 0;
    }
    for (int k = 2; k < argc; k++) {
        problem p;
        int n = atoi(argv[k]);
        problem_init(&p, n);
        double s = timed(&p, min_seconds);
        printf("sgemm\t%d\t%.9f\t%.2f\n", n, s, flops(n) / s / 1e9);
        problem_free(&p);
    }
    return 0;
}
