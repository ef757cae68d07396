/* Watching the normal schedulers (normal_watch.h). */
#define _GNU_SOURCE /* RUSAGE_THREAD */
#include "normal_watch.h"

#include <stdatomic.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

/* Above this estimated cost a call moves to a dirty CPU scheduler. The plan's cost
 * (dispatch.c) is about a nanosecond per unit for the portable loops, and the faster
 * libraries scale theirs down to stay near nanoseconds. A normal scheduler must return within
 * about a millisecond; a call that moves costs a dirty scheduler's wake-up and the way back (on
 * this project's 2-core machines a 1M-element add on the vector kernels ran slower through a dirty
 * scheduler than on the normal one), so calls estimated under half a millisecond stay where they
 * are, and tell the scheduler how much of its time slice they used (cascade_nif.c). */
#define DIRTY_COST  500000.0
#define DIRTY_BYTES (1u << 20)

static _Atomic double dirty_cost = DIRTY_COST;
static atomic_size_t dirty_bytes = DIRTY_BYTES;

double nw_dirty_cost(void) {
    return atomic_load_explicit(&dirty_cost, memory_order_relaxed);
}
size_t nw_dirty_bytes(void) {
    return atomic_load_explicit(&dirty_bytes, memory_order_relaxed);
}

#define NW_MAX_RECORDS 256

typedef struct {
    const char *nif;
    char detail[32];
    ErlNifPid pid;
    int64_t wall_ns, cpu_ns;
    long voluntary, involuntary;
} nw_record;

/* 0: off; else the wall time in ns from which a call is recorded */
static atomic_llong watch_ns;
static ErlNifMutex *records_lock;
static nw_record records[NW_MAX_RECORDS];
static int n_records;
static long n_dropped;

static int64_t ns_of(clockid_t clock) {
    struct timespec ts;
    clock_gettime(clock, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static void context_switches(long *voluntary, long *involuntary) {
    struct rusage ru;
    if (getrusage(RUSAGE_THREAD, &ru) != 0) memset(&ru, 0, sizeof ru);
    *voluntary = ru.ru_nvcsw;
    *involuntary = ru.ru_nivcsw;
}

ERL_NIF_TERM nw_run(const char *name, nw_nif nif,
                    const char *(*detail)(ErlNifEnv *, const ERL_NIF_TERM[]), ErlNifEnv *env,
                    int argc, const ERL_NIF_TERM argv[]) {
    long long limit = atomic_load_explicit(&watch_ns, memory_order_relaxed);
    if (__builtin_expect(limit == 0, 1)) return nif(env, argc, argv);

    long vol0, invol0, vol1, invol1;
    context_switches(&vol0, &invol0);
    int64_t cpu0 = ns_of(CLOCK_THREAD_CPUTIME_ID), wall0 = ns_of(CLOCK_MONOTONIC);
    ERL_NIF_TERM res = nif(env, argc, argv);
    int64_t wall = ns_of(CLOCK_MONOTONIC) - wall0, cpu = ns_of(CLOCK_THREAD_CPUTIME_ID) - cpu0;
    if (wall < limit) return res;
    context_switches(&vol1, &invol1);

    nw_record r = {.nif = name,
                   .wall_ns = wall,
                   .cpu_ns = cpu,
                   .voluntary = vol1 - vol0,
                   .involuntary = invol1 - invol0};
    const char *what = detail ? detail(env, argv) : NULL;
    if (what) strncpy(r.detail, what, sizeof r.detail - 1);
    enif_self(env, &r.pid);
    enif_mutex_lock(records_lock);
    if (n_records < NW_MAX_RECORDS)
        records[n_records++] = r;
    else
        n_dropped++;
    enif_mutex_unlock(records_lock);
    return res;
}

int nw_init(void) {
    if (!records_lock) records_lock = enif_mutex_create("cascade_normal_watch");
    return records_lock != NULL;
}

static void clear_records(void) {
    n_records = 0;
    n_dropped = 0;
}

ERL_NIF_TERM nw_watch_nif(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[]) {
    (void)argc;
    ErlNifSInt64 us;
    long long limit;
    if (enif_get_int64(env, argv[0], &us) && us > 0)
        limit = (long long)us * 1000;
    else if (enif_is_identical(argv[0], enif_make_atom(env, "false")))
        limit = 0;
    else
        return enif_make_badarg(env);
    enif_mutex_lock(records_lock);
    clear_records();
    atomic_store(&watch_ns, limit);
    enif_mutex_unlock(records_lock);
    return enif_make_atom(env, "ok");
}

static ERL_NIF_TERM record_term(ErlNifEnv *env, const nw_record *r) {
    ERL_NIF_TERM keys[7] = {enif_make_atom(env, "nif"),        enif_make_atom(env, "detail"),
                            enif_make_atom(env, "pid"),        enif_make_atom(env, "wall_us"),
                            enif_make_atom(env, "cpu_us"),     enif_make_atom(env, "voluntary"),
                            enif_make_atom(env, "involuntary")};
    ERL_NIF_TERM vals[7] = {enif_make_atom(env, r->nif),
                            r->detail[0] ? enif_make_atom(env, r->detail)
                                         : enif_make_atom(env, "nil"),
                            enif_make_pid(env, &r->pid),
                            enif_make_int64(env, r->wall_ns / 1000),
                            enif_make_int64(env, r->cpu_ns / 1000),
                            enif_make_long(env, r->voluntary),
                            enif_make_long(env, r->involuntary)};
    ERL_NIF_TERM map;
    if (!enif_make_map_from_arrays(env, keys, vals, 7, &map)) return enif_make_badarg(env);
    return map;
}

ERL_NIF_TERM nw_records_nif(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[]) {
    (void)argc;
    (void)argv;
    nw_record copy[NW_MAX_RECORDS];
    enif_mutex_lock(records_lock);
    int n = n_records;
    long dropped = n_dropped;
    memcpy(copy, records, sizeof(nw_record) * (size_t)n);
    clear_records();
    enif_mutex_unlock(records_lock);
    ERL_NIF_TERM list = enif_make_list(env, 0);
    for (int k = n - 1; k >= 0; k--)
        list = enif_make_list_cell(env, record_term(env, &copy[k]), list);
    return enif_make_tuple2(env, list, enif_make_long(env, dropped));
}

ERL_NIF_TERM nw_set_thresholds_nif(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[]) {
    (void)argc;
    double cost;
    ErlNifUInt64 bytes;
    if (!enif_get_double(env, argv[0], &cost) || !(cost >= 0) ||
        !enif_get_uint64(env, argv[1], &bytes))
        return enif_make_badarg(env);
    ERL_NIF_TERM old = enif_make_tuple2(env, enif_make_double(env, nw_dirty_cost()),
                                        enif_make_uint64(env, nw_dirty_bytes()));
    atomic_store(&dirty_cost, cost);
    atomic_store(&dirty_bytes, (size_t)bytes);
    return old;
}
