/* GEMM across the cores with the driver's own threads, OpenBLAS single-threaded inside.
 *
 * Why not OpenBLAS's own threads: inside the BEAM they lose a quarter of a 256 x 256 product.
 * Its worker threads wait for each other with sched_yield at every panel, and in the BEAM there
 * is always another thread ready to run (a scheduler waking, a dirty scheduler), so each yield is
 * a context switch; measured on this 2-core machine, cblas_sgemm 256 from a dirty scheduler took
 * 225-260 us against 177 us from C. Splitting the product here costs two wake-ups per call
 * instead: the calling thread multiplies one block of rows, each claimed worker another, each
 * with a single-threaded cblas_?gemm, and the caller waits for them at the end. The same split
 * from C runs 256 / 512 / 1024 at 196 / 204 / 202 GFLOP/s against OpenBLAS's threads' 185 / 204 /
 * 204 (bench/blas/run.sh measures both sides).
 *
 * Workers: the configured thread count (CASCADE_BLAS_THREADS, else openblas_get_num_threads() at
 * probe, so OPENBLAS_NUM_THREADS still sizes it) minus the caller. A caller claims the idle workers
 * it can with one atomic operation; when every worker is busy with another caller's product, it
 * sleeps until some come back (claim_waiting). So two BEAM processes multiplying at once share the
 * cores, and the machine runs as many GEMM threads as it has cores, not more. Products too small
 * to split never wait. After its part a worker waits 200 us with sched_yield (a loop of products
 * keeps it awake without a wake-up, and the core stays free for any thread that wants it), then
 * sleeps on a condition variable. */
#include <cblas.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <time.h>

#include "blas_kernels.h"

#define MAX_WORKERS 63
#define SPIN_NS     200000 /* how long a worker waits for its next part before it sleeps */
/* A product of at most this much work (m * n * k) runs on the caller alone, as OpenBLAS runs it
 * on one thread: a wake-up would cost as much as the product (64 x 64 x 64 split ran at 33
 * GFLOP/s, unsplit at 57). */
#define SPLIT_MIN_WORK (64.0 * 64 * 64)
#define SPLIT_MIN_ROWS 16 /* rows (or columns) per thread at least */

typedef struct {
    blas_gemm_args g;
    int lo, hi; /* this part's rows (or columns, when split_cols) */
    bool split_cols;
} part;

typedef struct {
    pthread_t thread;
    pthread_mutex_t lock;
    pthread_cond_t wake;
    atomic_uint gen;  /* bumped by the caller that hands the worker a part */
    atomic_uint done; /* set to gen by the worker when the part is finished */
    atomic_bool sleeping;
    part job;
} worker;

static worker workers[MAX_WORKERS];
static int n_workers;
static atomic_ullong idle_mask; /* bit w set: worker w is free to claim */
/* callers waiting for a worker (claim_waiting) */
static pthread_mutex_t pool_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t pool_idle = PTHREAD_COND_INITIALIZER;
static atomic_int n_waiting;

static double now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

static inline void cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ __volatile__("yield");
#endif
}

static void run_part(const part *p) {
    const blas_gemm_args *g = &p->g;
    int m = g->m, n = g->n;
    size_t es = g->f64 ? sizeof(double) : sizeof(float);
    const char *a = g->a, *b = g->b;
    char *c = g->c;
    if (p->split_cols) {
        /* columns lo..hi of op(B) and of C */
        n = p->hi - p->lo;
        b += es * (size_t)p->lo * (g->tb == CblasNoTrans ? 1 : (size_t)g->ldb);
        c += es * (size_t)p->lo;
    } else {
        /* rows lo..hi of op(A) and of C */
        m = p->hi - p->lo;
        a += es * (size_t)p->lo * (g->ta == CblasNoTrans ? (size_t)g->lda : 1);
        c += es * (size_t)p->lo * (size_t)g->ldc;
    }
    if (m == 0 || n == 0) return;
    if (g->f64)
        cblas_dgemm(CblasRowMajor, g->ta, g->tb, m, n, g->k, 1.0, (const double *)a, g->lda,
                    (const double *)b, g->ldb, g->beta, (double *)c, g->ldc);
    else
        cblas_sgemm(CblasRowMajor, g->ta, g->tb, m, n, g->k, 1.0f, (const float *)a, g->lda,
                    (const float *)b, g->ldb, (float)g->beta, (float *)c, g->ldc);
}

static void *worker_main(void *arg) {
    worker *w = arg;
    unsigned seen = 0;
    for (;;) {
        /* wait for the next part yielding, not spinning on the core: in the BEAM the thread
         * that must run next (the scheduler taking the result back, then the dirty scheduler
         * with the next product) is often waiting for this core. Spinning with pause there
         * made a loop of 256 x 256 products 50% slower than not waiting at all. */
        double until = now_ns() + SPIN_NS;
        unsigned g;
        while ((g = atomic_load(&w->gen)) == seen && now_ns() < until) sched_yield();
        if (g == seen) {
            pthread_mutex_lock(&w->lock);
            atomic_store(&w->sleeping, true);
            while ((g = atomic_load(&w->gen)) == seen) pthread_cond_wait(&w->wake, &w->lock);
            atomic_store(&w->sleeping, false);
            pthread_mutex_unlock(&w->lock);
        }
        seen = g;
        run_part(&w->job);
        atomic_store(&w->done, g);
    }
    return NULL;
}

int blas_pool_start(int threads) {
    static pthread_mutex_t once = PTHREAD_MUTEX_INITIALIZER;
    static bool started;
    pthread_mutex_lock(&once);
    if (started) {
        pthread_mutex_unlock(&once);
        return n_workers + 1;
    }
    started = true;
    if (threads > MAX_WORKERS + 1) threads = MAX_WORKERS + 1;
    for (int k = 0; k + 1 < threads; k++) {
        worker *w = &workers[n_workers];
        pthread_mutex_init(&w->lock, NULL);
        pthread_cond_init(&w->wake, NULL);
        pthread_attr_t attr;
        pthread_attr_init(&attr);
        pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
        int rc = pthread_create(&w->thread, &attr, worker_main, w);
        pthread_attr_destroy(&attr);
        if (rc != 0) break; /* fewer workers: the products still run, on fewer threads */
        atomic_fetch_or(&idle_mask, 1ull << n_workers);
        n_workers++;
    }
    pthread_mutex_unlock(&once);
    return n_workers + 1;
}

/* Claims up to `want` idle workers; returns how many, their indices in ids. */
static int claim(int want, int *ids) {
    unsigned long long mask = atomic_load(&idle_mask), take;
    do {
        take = 0;
        int got = 0;
        for (int w = 0; w < n_workers && got < want; w++)
            if (mask & (1ull << w)) take |= 1ull << w, got++;
        if (!take) return 0;
    } while (!atomic_compare_exchange_weak(&idle_mask, &mask, mask & ~take));
    int n = 0;
    for (int w = 0; w < n_workers; w++)
        if (take & (1ull << w)) ids[n++] = w;
    return n;
}

/* Every worker is busy with another caller's product: running this one on the caller's thread
 * too would put one more GEMM thread on the cores than there are cores, and time-sliced GEMMs
 * evict each other's blocks from the caches (two processes multiplying 1024 x 1024 at once got
 * 159 GFLOP/s in all that way, against 180 for one). So the caller sleeps until workers come
 * back, then takes them. */
static int claim_waiting(int want, int *ids) {
    int got;
    atomic_fetch_add(&n_waiting, 1);
    pthread_mutex_lock(&pool_lock);
    while ((got = claim(want, ids)) == 0) pthread_cond_wait(&pool_idle, &pool_lock);
    pthread_mutex_unlock(&pool_lock);
    atomic_fetch_sub(&n_waiting, 1);
    return got;
}

void blas_gemm(const blas_gemm_args *g) {
    if (g->m == 0 || g->n == 0) return;
    bool split_cols = g->n > g->m;
    int span = split_cols ? g->n : g->m;
    int want = span / SPLIT_MIN_ROWS - 1;
    if (want > n_workers) want = n_workers;
    if ((double)g->m * g->n * g->k <= SPLIT_MIN_WORK) want = 0;
    int ids[MAX_WORKERS];
    int got = want > 0 ? claim(want, ids) : 0;
    if (want > 0 && got == 0) got = claim_waiting(want, ids);
    int parts = got + 1;
    /* the caller takes part 0; part i covers span * i / parts .. span * (i + 1) / parts */
    for (int i = 1; i < parts; i++) {
        worker *w = &workers[ids[i - 1]];
        w->job = (part){*g, (int)((long long)span * i / parts),
                        (int)((long long)span * (i + 1) / parts), split_cols};
        unsigned gen = atomic_load(&w->gen) + 1;
        atomic_store(&w->gen, gen);
        if (atomic_load(&w->sleeping)) {
            pthread_mutex_lock(&w->lock);
            pthread_cond_signal(&w->wake);
            pthread_mutex_unlock(&w->lock);
        }
    }
    run_part(&(part){*g, 0, (int)(span / parts), split_cols});
    unsigned long long back = 0;
    for (int i = 1; i < parts; i++) {
        worker *w = &workers[ids[i - 1]];
        unsigned gen = atomic_load(&w->gen);
        for (int spins = 0; atomic_load(&w->done) != gen; spins++)
            if (spins < 256)
                cpu_relax();
            else
                sched_yield(); /* the worker is late: it may share this core */
        back |= 1ull << ids[i - 1];
    }
    if (back) {
        atomic_fetch_or(&idle_mask, back);
        if (atomic_load(&n_waiting) > 0) {
            pthread_mutex_lock(&pool_lock);
            pthread_cond_broadcast(&pool_idle);
            pthread_mutex_unlock(&pool_lock);
        }
    }
}
