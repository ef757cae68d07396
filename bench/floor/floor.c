/* The machine's floor for the cases of `mix cascade.bench`, measured in the same run: what no
 * library can go below on this machine, so that a ratio near 1 to NumPy or PyTorch can be told
 * apart from a slow kernel.
 *
 *   floor SECONDS        (mix cascade.bench compiles and runs it: Cascade.Bench.Floor)
 *
 * Memory passes: 1M elements of 2, 4 or 8 bytes, the traffic of the suite's cases without their
 * arithmetic -- two arrays read and one written (add), one read (sum), one read and one written
 * (a function of one value; softmax and layer_norm of 1000 x 1000 move as much) -- split across
 * every online core the way Cascade and PyTorch split them, the same buffers every time as a loop
 * of calls has them, threads spinning between passes (no wake-up to pay). Each pass runs in every
 * vector width the CPU has (below) for SECONDS / 20 and reports the fastest width's median.
 *
 * Multiply-adds: every core runs 12 independent chains of 16-lane fused multiply-adds (AVX-512
 * where the CPU has it, else AVX2 and FMA, else whatever the compiler makes of the vectors), the
 * peak rate of the vector units; a product of m n k multiply-adds takes at least 2 m n k / that.
 * (On the Intel Xeon where this was written, OpenBLAS's 1024 x 1024 f32 product ran at 75-79% of
 * it: 229-236 GFLOP/s of 302 on two cores.)
 *
 * Prints one line per figure, `<name> <value>`: the threads, each pass's seconds
 * (`pass_<reads>r<writes>w_<bits>`), and the rate in flop/s (`fma_flops`). No Cascade code: plain
 * C and pthreads. */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* The memory passes in every vector width the CPU has, each timed, the fastest kept: on the Intel
 * Xeon where this was written (Cascade Lake) 256-bit loads and stores stream data from L3 faster
 * than 512-bit ones (add 1M f32: 256-260 us against 264-276), and Cascade's own kernels take
 * the faster width there. GCC and clang on x86-64; elsewhere the compiler's default. */
#if defined(__x86_64__) && defined(__GNUC__)
#define X86_VERSIONS 1
#define W512         __attribute__((target("avx512f")))
#define W256         __attribute__((target("avx2")))
#else
#define X86_VERSIONS 0
#endif
enum { PORTABLE, WIDTH_256, WIDTH_512, WIDTHS };

#define N       (1 << 20)
#define THREADS 64
#define CHAINS  12

typedef float v16 __attribute__((vector_size(64)));

typedef struct {
    int reads, writes, bytes; /* a pass; reads == 0: the multiply-add chains */
    int width;                /* a pass's vectors: PORTABLE, WIDTH_256, WIDTH_512 */
    long fma_iterations;
} task;

static task current;
static void *src_a, *src_b, *dst;
static int n_threads;
static atomic_uint generation;
static atomic_int finished;
static volatile uint64_t sink[THREADS]; /* one per thread: the results no pass may drop */

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* The passes work on the bits: no arithmetic that could cost more than the traffic. */
#define PASSES(T, SUFFIX, ATTR)                                                                    \
    ATTR static void pass_2r1w_##SUFFIX(const T *restrict a, const T *restrict b, T *restrict c,   \
                                        size_t lo, size_t hi) {                                    \
        for (size_t i = lo; i < hi; i++) c[i] = a[i] ^ b[i];                                       \
    }                                                                                              \
    ATTR static T pass_1r_##SUFFIX(const T *restrict a, size_t lo, size_t hi) {                    \
        T r = 0;                                                                                   \
        for (size_t i = lo; i < hi; i++) r |= a[i];                                                \
        return r;                                                                                  \
    }                                                                                              \
    ATTR static void pass_1r1w_##SUFFIX(const T *restrict a, T *restrict c, size_t lo,             \
                                        size_t hi) {                                               \
        for (size_t i = lo; i < hi; i++) c[i] = (T)~a[i];                                          \
    }
#define ALL_SIZES(W, ATTR)                                                                         \
    PASSES(uint16_t, 16##W, ATTR)                                                                  \
    PASSES(uint32_t, 32##W, ATTR)                                                                  \
    PASSES(uint64_t, 64##W, ATTR)
ALL_SIZES(_portable, )
#if X86_VERSIONS
ALL_SIZES(_256, W256)
ALL_SIZES(_512, W512)
#endif

#define RUN_PASS(SUFFIX)                                                                           \
    do {                                                                                           \
        if (t->reads == 2)                                                                         \
            pass_2r1w_##SUFFIX(src_a, src_b, dst, lo, hi);                                         \
        else if (t->writes == 0)                                                                   \
            sink[part] += pass_1r_##SUFFIX(src_a, lo, hi);                                         \
        else                                                                                       \
            pass_1r1w_##SUFFIX(src_a, dst, lo, hi);                                                \
    } while (0)
#define RUN_SIZE(W)                                                                                \
    do {                                                                                           \
        if (t->bytes == 2)                                                                         \
            RUN_PASS(16##W);                                                                       \
        else if (t->bytes == 4)                                                                    \
            RUN_PASS(32##W);                                                                       \
        else                                                                                       \
            RUN_PASS(64##W);                                                                       \
    } while (0)

/* whether the CPU runs a width's instructions */
static int has_width(int width) {
#if X86_VERSIONS
    if (width == WIDTH_512) return __builtin_cpu_supports("avx512f");
    if (width == WIDTH_256) return __builtin_cpu_supports("avx2");
#endif
    return width == PORTABLE;
}

/* CHAINS independent chains c = c * m + a, started apart so that none can be merged */
#define FMA_CHAINS(NAME, ATTR)                                                                     \
    ATTR static float NAME(long iterations) {                                                      \
        v16 c[CHAINS], m, a;                                                                       \
        for (int k = 0; k < 16; k++) m[k] = 0.9999999f, a[k] = 1e-7f;                              \
        for (int j = 0; j < CHAINS; j++)                                                           \
            for (int k = 0; k < 16; k++) c[j][k] = 1e-3f * (float)(16 * j + k + 1);                \
        for (long i = 0; i < iterations; i++)                                                      \
            for (int j = 0; j < CHAINS; j++) c[j] = c[j] * m + a;                                  \
        float s = 0;                                                                               \
        for (int j = 0; j < CHAINS; j++)                                                           \
            for (int k = 0; k < 16; k++) s += c[j][k];                                             \
        return s;                                                                                  \
    }
FMA_CHAINS(fma_chains_portable, )
#if X86_VERSIONS
FMA_CHAINS(fma_chains_avx512, __attribute__((target("avx512f,fma"))))
FMA_CHAINS(fma_chains_avx2, __attribute__((target("avx2,fma"))))
#endif

static float fma_chains(long iterations) {
#if X86_VERSIONS
    if (__builtin_cpu_supports("avx512f")) return fma_chains_avx512(iterations);
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
        return fma_chains_avx2(iterations);
#endif
    return fma_chains_portable(iterations);
}

static void work(const task *t, int part) {
    if (t->reads == 0) {
        sink[part] += (uint64_t)fma_chains(t->fma_iterations);
        return;
    }
    size_t lo = (size_t)N * (size_t)part / (size_t)n_threads;
    size_t hi = (size_t)N * (size_t)(part + 1) / (size_t)n_threads;
#if X86_VERSIONS
    if (t->width == WIDTH_512) {
        RUN_SIZE(_512);
        return;
    }
    if (t->width == WIDTH_256) {
        RUN_SIZE(_256);
        return;
    }
#endif
    RUN_SIZE(_portable);
}

static void *worker(void *arg) {
    int part = (int)(intptr_t)arg;
    unsigned seen = 0;
    for (;;) {
        unsigned g;
        while ((g = atomic_load(&generation)) == seen) {
        }
        if (g == UINT32_MAX) return NULL;
        seen = g;
        work(&current, part);
        atomic_fetch_add(&finished, 1);
    }
}

/* One run of the task on every thread, in seconds. */
static double once(task t) {
    current = t;
    atomic_store(&finished, 0);
    double t0 = now();
    atomic_fetch_add(&generation, 1);
    work(&t, 0);
    while (atomic_load(&finished) < n_threads - 1) {
    }
    return now() - t0;
}

static int by_value(const void *x, const void *y) {
    double a = *(const double *)x, b = *(const double *)y;
    return a < b ? -1 : a > b;
}

/* The median of the task's runs over `seconds` (at least 5 runs, after 3 not counted). */
static double median(task t, double seconds) {
    size_t cap = 1 << 16, n = 0;
    double *times = malloc(sizeof(double) * cap);
    if (!times) return 0;
    for (int k = 0; k < 3; k++) once(t);
    double until = now() + seconds;
    while (n < cap && (n < 5 || now() < until)) times[n++] = once(t);
    qsort(times, n, sizeof(double), by_value);
    double m = times[n / 2];
    free(times);
    return m;
}

int main(int argc, char **argv) {
    double seconds = argc > 1 ? atof(argv[1]) : 1.0;
    if (!(seconds > 0)) seconds = 1.0;
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    n_threads = cores < 1 ? 1 : cores > THREADS ? THREADS : (int)cores;
    src_a = aligned_alloc(64, (size_t)N * 8);
    src_b = aligned_alloc(64, (size_t)N * 8);
    dst = aligned_alloc(64, (size_t)N * 8);
    if (!src_a || !src_b || !dst) {
        fprintf(stderr, "floor: out of memory\n");
        return 1;
    }
    /* every page touched before timing */
    for (size_t i = 0; i < (size_t)N * 8; i++) {
        ((unsigned char *)src_a)[i] = (unsigned char)(i * 7);
        ((unsigned char *)src_b)[i] = (unsigned char)(i * 13);
    }
    memset(dst, 0, (size_t)N * 8);
    pthread_t threads[THREADS];
    int started = 1;
    for (; started < n_threads; started++)
        if (pthread_create(&threads[started], NULL, worker, (void *)(intptr_t)started) != 0) break;
    n_threads = started;

    printf("threads %d\n", n_threads);
    static const struct { int reads, writes; } shapes[] = {{2, 1}, {1, 0}, {1, 1}};
    for (int s = 0; s < 3; s++)
        for (int bytes = 2; bytes <= 8; bytes *= 2) {
            /* the fastest width's median (portable C included: it is what the compiler makes of
             * the loop for any CPU) */
            double best = 0;
            for (int w = 0; w < WIDTHS; w++) {
                if (!has_width(w)) continue;
                task t = {shapes[s].reads, shapes[s].writes, bytes, w, 0};
                double m = median(t, seconds / 20);
                if (best == 0 || m < best) best = m;
            }
            printf("pass_%dr%dw_%d %.9g\n", shapes[s].reads, shapes[s].writes, bytes * 8, best);
            fflush(stdout);
        }
    /* iterations for about a tenth of the time at 100 GFLOP/s a core */
    long iterations = (long)(seconds / 10 * 1e11 / (CHAINS * 16 * 2)) + 1;
    task fma = {0, 0, 0, PORTABLE, iterations};
    double t = median(fma, seconds / 10);
    printf("fma_flops %.9g\n", (double)n_threads * (double)iterations * CHAINS * 16 * 2 / t);

    atomic_store(&generation, UINT32_MAX);
    for (int k = 1; k < n_threads; k++) pthread_join(threads[k], NULL);
    return 0;
}
