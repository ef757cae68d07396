/* The driver's threads: one pool for every op it splits across the cores -- GEMM (blas_gemm.c),
 * the elementwise kernels and the reductions (blas_simd.c).
 *
 * Why not OpenBLAS's own threads: inside the BEAM they slow a 256 x 256 product down. Its worker
 * threads wait for each other with sched_yield at every panel, and in the BEAM there is always
 * another thread ready to run (a scheduler waking, a dirty scheduler), so each yield is a context
 * switch; measured on a 2-core machine, cblas_sgemm 256 ran slower from a dirty scheduler than from
 * C. Splitting here costs two wake-ups per call instead: the calling thread runs part 0, each
 * claimed worker another part, and the caller waits for them at the end.
 *
 * Workers: the configured thread count (CASCADE_BLAS_THREADS, else openblas_get_num_threads() at
 * probe, so OPENBLAS_NUM_THREADS still sizes it) minus the caller. A caller claims the idle workers
 * it can with one atomic operation; so two BEAM processes running split ops at once share the
 * cores, and the machine runs as many of the driver's threads as it has cores, not more. A GEMM
 * that finds every worker busy sleeps until some come back (claim_waiting: time-sliced GEMMs evict
 * each other's blocks from the caches); any other op runs all its parts on the caller then (the
 * parts are the same however many workers run them: blas_parallel). After its part
 * a worker waits 200 us (a loop of ops keeps it awake without a wake-up), spinning the first few
 * when its last part came soon (at most PAUSE_NS, see worker_main) and then with sched_yield (the
 * core stays free for any thread that wants it), then sleeps on a condition variable.
 *
 * Waking a worker that sleeps takes longer on these virtual machines than a mid-size part takes to
 * run (a 32K-element f32 add on one core). So a caller that has finished its own part and
 * finds another not yet begun by its worker takes it back (PART_GIVEN -> PART_REVOKED, against the
 * worker's PART_GIVEN -> PART_TAKEN) and runs it itself; the worker, when it wakes, finds the part
 * gone and makes itself claimable again. A split then never costs the caller more than the signal,
 * and the elementwise ops split from 32K elements (GRAIN_CHEAP, blas_simd.c). Callers that `wait`
 * (the products, whose parts are sized for the cores and evict each other's blocks when run in
 * turn) always wait for their workers. */
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <time.h>

#include "blas_kernels.h"

#define MAX_WORKERS 63
#define SPIN_NS     200000 /* how long a worker waits for its next part before it sleeps */
#define PAUSE_NS    20000  /* ... spinning on the core at most this long first */

/* A runner's share of a split: parts first, first + step, ... below parts. */
typedef struct {
    blas_part_fn fn;
    void *ctx;
    int first, step, parts;
} share;

static void run_share(const share *s) {
    for (int i = s->first; i < s->parts; i += s->step) s->fn(s->ctx, i, s->parts);
}

typedef struct {
    pthread_t thread;
    pthread_mutex_t lock;
    pthread_cond_t wake;
    atomic_uint gen;  /* bumped by the caller that hands the worker a part */
    atomic_uint done; /* set to gen by the worker when the part is finished */
    atomic_bool sleeping;
    atomic_int state; /* the handed share: PART_GIVEN, then PART_TAKEN or PART_REVOKED */
    share job;
} worker;

enum { PART_GIVEN, PART_TAKEN, PART_REVOKED };

static worker workers[MAX_WORKERS];
static int n_workers;
static atomic_ullong idle_mask; /* bit w set: worker w is free to claim */
static atomic_uint hush;        /* bumped by blas_pool_hush: spinning workers stop spinning */

void blas_pool_hush(void) {
    atomic_fetch_add(&hush, 1);
}
/* callers waiting for a worker (claim_waiting) */
static pthread_mutex_t pool_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t pool_idle = PTHREAD_COND_INITIALIZER;
static atomic_int n_waiting;

/* Makes workers claimable again and wakes the callers waiting for one. */
static void give_back(unsigned long long mask) {
    atomic_fetch_or(&idle_mask, mask);
    if (atomic_load(&n_waiting) > 0) {
        pthread_mutex_lock(&pool_lock);
        pthread_cond_broadcast(&pool_idle);
        pthread_mutex_unlock(&pool_lock);
    }
}

static double now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

double blas_seconds(void) {
    return now_ns() * 1e-9;
}

static inline void cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ __volatile__("yield");
#endif
}

static void *worker_main(void *arg) {
    worker *w = arg;
    unsigned seen = 0;
    double gap = PAUSE_NS; /* how long it waited for its last part */
    for (;;) {
        /* wait for the next part yielding, not spinning on the core: in the BEAM the thread
         * that must run next (the scheduler taking the result back, then the dirty scheduler
         * with the next op) is often waiting for this core. Spinning with pause for the whole
         * SPIN_NS made a loop of 256 x 256 products slower than not waiting at all. But a
         * worker that yields runs its next part slower: on this project's virtual machines a
         * system call costs a lot (a paravirtualised kernel), and a 1M f32 sum in a loop ran
         * slower yielding from the first instant than spinning 20 us first (as fast as a plain C
         * loop whose threads spin). So a worker whose last part came soon (a loop of ops) spins
         * for twice that wait first, at most PAUSE_NS: that made the 1M sum in C faster, and the
         * benchmark's CNN epoch, which a fixed 20 us spin made slower, no slower than without a
         * spin. The master thread's convolutions hush the spin (blas_pool_hush): their OpenMP
         * team needs the cores. */
        double t0 = now_ns(), until = t0 + SPIN_NS;
        double spin = gap < PAUSE_NS ? 2 * gap + 2000 : 0;
        double spin_until = t0 + (spin < PAUSE_NS ? spin : PAUSE_NS);
        unsigned g;
        unsigned hushed = atomic_load(&hush);
        while ((g = atomic_load(&w->gen)) == seen && now_ns() < spin_until &&
               atomic_load(&hush) == hushed)
            for (int i = 0; i < 64; i++) cpu_relax();
        while ((g = atomic_load(&w->gen)) == seen && now_ns() < until) sched_yield();
        gap = g == seen ? PAUSE_NS : now_ns() - t0;
        if (g == seen) {
            pthread_mutex_lock(&w->lock);
            atomic_store(&w->sleeping, true);
            while ((g = atomic_load(&w->gen)) == seen) pthread_cond_wait(&w->wake, &w->lock);
            atomic_store(&w->sleeping, false);
            pthread_mutex_unlock(&w->lock);
        }
        seen = g;
        int given = PART_GIVEN;
        bool taken = atomic_compare_exchange_strong(&w->state, &given, PART_TAKEN);
        if (taken) run_share(&w->job);
        atomic_store(&w->done, g);
        /* a part the caller ran itself (revoked): this worker frees itself */
        if (!taken) give_back(1ull << (w - workers));
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
        if (rc != 0) break; /* fewer workers: the ops still run, on fewer threads */
        atomic_fetch_or(&idle_mask, 1ull << n_workers);
        n_workers++;
    }
    pthread_mutex_unlock(&once);
    return n_workers + 1;
}

int blas_pool_threads(void) {
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

/* Every worker is busy with another caller's op: the caller sleeps until workers come back,
 * then takes them. */
static int claim_waiting(int want, int *ids) {
    int got;
    atomic_fetch_add(&n_waiting, 1);
    pthread_mutex_lock(&pool_lock);
    while ((got = claim(want, ids)) == 0) pthread_cond_wait(&pool_idle, &pool_lock);
    pthread_mutex_unlock(&pool_lock);
    atomic_fetch_sub(&n_waiting, 1);
    return got;
}

int blas_parallel(int max_parts, bool wait, blas_part_fn fn, void *ctx) {
    /* The split is fixed by the request and the pool's size alone, never by how many workers
     * happen to be idle: a part's bits can depend on its bounds (OpenBLAS's Haswell sgemm rounds
     * a block's edge columns differently from its inner ones; a sum adds its parts' partial sums),
     * and Cascade.put_reproducible promises the same bits whichever threads are free. The idle
     * workers claimed share the parts with the caller, each running every runners-th one. */
    int parts = max_parts < 1 ? 1 : max_parts > n_workers + 1 ? n_workers + 1 : max_parts;
    int want = parts - 1;
    int ids[MAX_WORKERS];
    int got = want > 0 ? claim(want, ids) : 0;
    if (want > 0 && got == 0 && wait) got = claim_waiting(want, ids);
    int runners = got + 1;
    for (int i = 1; i < runners; i++) {
        worker *w = &workers[ids[i - 1]];
        w->job = (share){fn, ctx, i, runners, parts};
        atomic_store(&w->state, PART_GIVEN);
        unsigned gen = atomic_load(&w->gen) + 1;
        atomic_store(&w->gen, gen);
        if (atomic_load(&w->sleeping)) {
            pthread_mutex_lock(&w->lock);
            pthread_cond_signal(&w->wake);
            pthread_mutex_unlock(&w->lock);
        }
    }
    run_share(&(share){fn, ctx, 0, runners, parts});
    /* A share its worker has not begun when the caller is done with its own is taken back and
     * run here (not for `wait` callers, the products, whose parts are sized for the cores): a
     * worker asleep takes longer to wake than a mid-size part takes to run, so the split costs
     * the caller nothing then; the worker frees itself when it wakes. */
    unsigned long long back = 0;
    for (int i = 1; i < runners; i++) {
        worker *w = &workers[ids[i - 1]];
        int given = PART_GIVEN;
        if (!wait && atomic_compare_exchange_strong(&w->state, &given, PART_REVOKED)) {
            /* rebuilt, never read from w->job: once revoked, the worker may wake, free itself
             * and be handed another caller's share before this line runs */
            run_share(&(share){fn, ctx, i, runners, parts});
            continue;
        }
        unsigned gen = atomic_load(&w->gen);
        for (int spins = 0; atomic_load(&w->done) != gen; spins++)
            if (spins < 256)
                cpu_relax();
            else
                sched_yield(); /* the worker is late: it may share this core */
        back |= 1ull << ids[i - 1];
    }
    if (back) give_back(back);
    return parts;
}
