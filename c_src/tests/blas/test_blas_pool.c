/* The blas driver's thread pool (c_src/drivers/blas/blas_pool.c) on its own, without OpenBLAS
 * or a device: a split's parts are the same whichever workers are free. blas_parallel must run
 * each part 0 .. parts - 1 exactly once, with parts = min(request, pool threads), however many
 * workers other callers hold at the time, whether the caller waits for workers or takes parts
 * back; a part's bounds, and so the bits of a product or a sum, follow from parts alone. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../../drivers/blas/blas_kernels.h"

enum { THREADS = 4, MAX_PARTS = 64 };

/* ---- holding workers: a caller whose parts wait until released ------------------------------ */

typedef struct {
    pthread_t thread;
    int parts;           /* asked of blas_parallel */
    atomic_int started;  /* parts begun */
    atomic_bool release; /* the parts may return */
    int got;             /* what blas_parallel returned */
} holder;

static void hold_part(void *ctx, int index, int parts) {
    holder *h = ctx;
    (void)index, (void)parts;
    atomic_fetch_add(&h->started, 1);
    while (!atomic_load(&h->release)) usleep(100);
}

static void *holder_main(void *arg) {
    holder *h = arg;
    h->got = blas_parallel(h->parts, true, hold_part, h);
    return NULL;
}

/* Starts a caller that holds `workers` of the pool's workers (and its own thread) until
 * release(); returns once they all run its parts. */
static void hold(holder *h, int workers) {
    /* a worker whose part a caller took back frees itself when it wakes: time for that */
    usleep(10000);
    memset(h, 0, sizeof *h);
    h->parts = workers + 1;
    assert_int_equal(pthread_create(&h->thread, NULL, holder_main, h), 0);
    for (int waited = 0; atomic_load(&h->started) < workers + 1; waited++) {
        if (waited == 20000) { /* 2 s */
            atomic_store(&h->release, true);
            pthread_join(h->thread, NULL);
            fail_msg("a caller of %d parts got %d of them started", h->parts,
                     atomic_load(&h->started));
        }
        usleep(100);
    }
}

static void release(holder *h) {
    atomic_store(&h->release, true);
    pthread_join(h->thread, NULL);
    assert_int_equal(h->got, h->parts);
}

/* ---- what a split ran ------------------------------------------------------------------------ */

typedef struct {
    atomic_int runs[MAX_PARTS]; /* times each part ran */
    atomic_int parts_seen;      /* the parts argument, the same for every part */
    atomic_int bad;             /* a part that saw another parts argument */
} record;

static void record_part(void *ctx, int index, int parts) {
    record *r = ctx;
    int expected = 0;
    if (!atomic_compare_exchange_strong(&r->parts_seen, &expected, parts) && expected != parts)
        atomic_fetch_add(&r->bad, 1);
    if (index >= 0 && index < MAX_PARTS) atomic_fetch_add(&r->runs[index], 1);
}

/* a split of `max_parts` while `busy` workers are held: every part once, parts fixed */
static void check_split(int max_parts, bool wait, int busy) {
    int want = max_parts < 1 ? 1 : max_parts > THREADS ? THREADS : max_parts;
    record r;
    memset(&r, 0, sizeof r);
    int parts = blas_parallel(max_parts, wait, record_part, &r);
    if (parts != want)
        fail_msg("blas_parallel(%d, %s) with %d workers held: %d parts, want %d", max_parts,
                 wait ? "wait" : "no wait", busy, parts, want);
    assert_int_equal(atomic_load(&r.bad), 0);
    assert_int_equal(atomic_load(&r.parts_seen), want);
    for (int i = 0; i < MAX_PARTS; i++)
        if (atomic_load(&r.runs[i]) != (i < want))
            fail_msg("part %d ran %d times (%d parts, %d workers held)", i, atomic_load(&r.runs[i]),
                     want, busy);
}

static int setup(void **state) {
    (void)state;
    return blas_pool_start(THREADS) == THREADS ? 0 : -1;
}

/* With 0 .. all workers held by another caller (not `wait`: the caller runs the parts no worker
 * took; `wait` with a worker free: it shares them with that one) */
static void test_parts_fixed_by_request(void **state) {
    (void)state;
    assert_int_equal(blas_pool_threads(), THREADS);
    const int requests[] = {0, 1, 2, 3, 4, 5, 17, 64};
    for (int busy = 0; busy < THREADS; busy++) {
        holder h;
        if (busy) hold(&h, busy);
        for (size_t q = 0; q < sizeof requests / sizeof *requests; q++)
            for (int wait = 0; wait < 2; wait++)
                if (!(wait && busy == THREADS - 1)) /* no worker free: a waiter sleeps */
                    for (int rep = 0; rep < 20; rep++) check_split(requests[q], wait, busy);
        if (busy) release(&h);
    }
}

/* A caller that waits, with every worker held: it sleeps until they come back, then runs every
 * part once with them */
typedef struct {
    record r;
    int parts;
    atomic_bool done;
} waiter;

static void *waiter_main(void *arg) {
    waiter *w = arg;
    w->parts = blas_parallel(17, true, record_part, &w->r);
    atomic_store(&w->done, true);
    return NULL;
}

static void test_waiter_gets_every_part(void **state) {
    (void)state;
    holder h;
    hold(&h, THREADS - 1);
    waiter w;
    memset(&w, 0, sizeof w);
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, waiter_main, &w), 0);
    usleep(20000);
    assert_false(atomic_load(&w.done)); /* asleep: no worker is free */
    release(&h);
    pthread_join(t, NULL);
    assert_int_equal(w.parts, THREADS);
    for (int i = 0; i < MAX_PARTS; i++) assert_int_equal(atomic_load(&w.r.runs[i]), i < THREADS);
}

/* A sum split by the pool gives the same bits whatever is free: partial sums of fixed bounds,
 * added in order. Two other callers split at random sizes meanwhile. */
enum { SUM_N = 1 << 16 };
static float sum_data[SUM_N];

typedef struct {
    double partial[THREADS];
} sum_job;

static void sum_part(void *ctx, int index, int parts) {
    sum_job *j = ctx;
    float acc = 0; /* in f32: its bits depend on the part's bounds */
    for (int i = SUM_N * index / parts; i < SUM_N * (index + 1) / parts; i++) acc += sum_data[i];
    j->partial[index] = acc;
}

static float split_sum(void) {
    sum_job j;
    int parts = blas_parallel(THREADS, false, sum_part, &j);
    float s = 0;
    for (int p = 0; p < parts; p++) s += (float)j.partial[p];
    return s;
}

static atomic_bool noise_stop;
static atomic_uint noise_work; /* what the noise computes: kept, so that it is computed */

static void noise_part(void *ctx, int index, int parts) {
    (void)ctx, (void)parts;
    unsigned x = (unsigned)index;
    for (unsigned i = 0; i < 2000; i++) x = x * 31 + i;
    atomic_fetch_add(&noise_work, x);
}

static void *noise_main(void *arg) {
    unsigned seed = (unsigned)(size_t)arg;
    while (!atomic_load(&noise_stop))
        blas_parallel(1 + (int)(rand_r(&seed) % THREADS), rand_r(&seed) % 2, noise_part, NULL);
    return NULL;
}

static void test_sum_bits_under_noise(void **state) {
    (void)state;
    for (int i = 0; i < SUM_N; i++) sum_data[i] = (float)((i * 2654435761u) % 1000003) / 7.0f;
    float first = split_sum();
    atomic_store(&noise_stop, false);
    pthread_t noise[2];
    for (int k = 0; k < 2; k++)
        assert_int_equal(pthread_create(&noise[k], NULL, noise_main, (void *)(size_t)(k + 1)), 0);
    for (int rep = 0; rep < 2000; rep++) {
        float s = split_sum();
        if (memcmp(&s, &first, sizeof s) != 0)
            fail_msg("call %d: sum %.9g, the first call's %.9g", rep, s, first);
    }
    atomic_store(&noise_stop, true);
    for (int k = 0; k < 2; k++) pthread_join(noise[k], NULL);
}

/* Callers splitting at once, none waiting, each with its own record: every caller's parts run
 * once each and only with its own context. A share taken back from a worker must be run from the
 * caller's own arguments: the worker, once it wakes to find its share revoked, frees itself and
 * can be handed another caller's share at once. */
enum { CALLERS = 3, CALLS = 20000 };

typedef struct {
    pthread_t thread;
    int failures; /* calls whose record was wrong */
    int first_bad;
} caller;

static void *caller_main(void *arg) {
    caller *c = arg;
    c->first_bad = -1;
    for (int call = 0; call < CALLS; call++) {
        record r;
        memset(&r, 0, sizeof r);
        int parts = blas_parallel(THREADS, false, record_part, &r);
        bool ok = atomic_load(&r.bad) == 0;
        for (int i = 0; i < MAX_PARTS; i++) ok = ok && atomic_load(&r.runs[i]) == (i < parts);
        if (!ok && c->failures++ == 0) c->first_bad = call;
    }
    return NULL;
}

static void test_callers_run_their_own_parts(void **state) {
    (void)state;
    caller callers[CALLERS];
    for (int k = 0; k < CALLERS; k++) {
        memset(&callers[k], 0, sizeof callers[k]);
        assert_int_equal(pthread_create(&callers[k].thread, NULL, caller_main, &callers[k]), 0);
    }
    for (int k = 0; k < CALLERS; k++) pthread_join(callers[k].thread, NULL);
    for (int k = 0; k < CALLERS; k++)
        if (callers[k].failures)
            fail_msg("caller %d: %d of %d calls ran parts other than its own once each, the "
                     "first call %d",
                     k, callers[k].failures, CALLS, callers[k].first_bad);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_parts_fixed_by_request),
        cmocka_unit_test(test_waiter_gets_every_part),
        cmocka_unit_test(test_sum_bits_under_noise),
        cmocka_unit_test(test_callers_run_their_own_parts),
    };
    if (getenv("CX_TEST_FILTER")) cmocka_set_test_filter(getenv("CX_TEST_FILTER"));
    return cmocka_run_group_tests(tests, setup, NULL);
}
