/* conv2d through oneDNN (Debian libdnnl-dev 2.6, the library PyTorch runs convolutions with on
 * the CPU), where it is faster than im2col + OpenBLAS (blas_conv.c).
 *
 * - libdnnl is loaded with dlopen at the first convolution, not at start: it maps ~50 MB and
 *   starts OpenMP, which an application that never convolves should not pay for. Before the
 *   load, OMP_NUM_THREADS is set to the driver's thread count and OMP_WAIT_POLICY to PASSIVE
 *   (unless the environment sets them): OpenMP's threads then sleep between convolutions
 *   instead of spinning on the cores the pool and the BEAM's schedulers need. GOMP_SPINCOUNT
 *   3000 (unless set) lets them spin that long first, a few microseconds: a primitive's threads
 *   meet at barriers inside it, and a bf16 256 x 256 matmul ran much slower sleeping at each of
 *   them than spinning first (the default spin, 300000, gained little more).
 * - Which path runs is decided per shape class (sizes, strides, dilations, padding, layout) by
 *   measuring, once, in the class's first call (choose_path): oneDNN once untimed (its JIT
 *   kernels, its scratch), then oneDNN and im2col + OpenBLAS in turn, twice, timed, on the
 *   call's own inputs; the faster (each by its faster run) computes that call's result and every
 *   later call's, for as long as the process runs, even after the class is evicted and built
 *   again (`decided`). The two paths round differently (their last bits differ), so a choice that
 *   changed, or calls that alternated paths while timing them, would give one input two results
 *   (Axon's suite compares a convolution with its transposed twin bit for bit).
 *   CASCADE_BLAS_CONV=onednn or im2col forces one. Reproducible (blas_dnnl_set_fixed, from
 *   Cascade.put_reproducible/1): oneDNN's direct algorithm wherever it builds the class,
 *   nothing timed, the same on every run; products on OpenBLAS.
 * Both give the same values within f32 rounding; the differential suite checks both against the cpu
 * driver.
 * - The plain layouts (nchw / oihw, nhwc / hwio) are reordered into the blocked ones oneDNN's
 *   kernels want and the result back, as PyTorch does; the weights are reordered per call.
 * - Taken: one group, float inputs (f16/bf16 widened to f32, the result rounded once, as
 *   im2col does), padding that is not negative. Anything else stays on im2col. */
#include <dlfcn.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../core/conv_geom.h"
#include "../../core/half_array.h"
#include "../cpu/cpu_kernels.h"
#include "blas_kernels.h"
#include "blas_simd.h"

#ifdef CX_HAVE_DNNL
#include <dnnl.h>

/* The functions of libdnnl this file calls, looked up at load. */
#define DNNL_FUNCTIONS(X)                                                                          \
    X(dnnl_sgemm)                                                                                  \
    X(dnnl_engine_create)                                                                          \
    X(dnnl_stream_create)                                                                          \
    X(dnnl_stream_wait)                                                                            \
    X(dnnl_stream_destroy)                                                                         \
    X(dnnl_memory_desc_init_by_tag)                                                                \
    X(dnnl_memory_desc_init_by_strides)                                                            \
    X(dnnl_matmul_desc_init)                                                                       \
    X(dnnl_memory_desc_equal)                                                                      \
    X(dnnl_memory_desc_get_size)                                                                   \
    X(dnnl_dilated_convolution_forward_desc_init)                                                  \
    X(dnnl_dilated_convolution_backward_data_desc_init)                                            \
    X(dnnl_dilated_convolution_backward_weights_desc_init)                                         \
    X(dnnl_primitive_desc_create)                                                                  \
    X(dnnl_primitive_desc_query_md)                                                                \
    X(dnnl_primitive_desc_destroy)                                                                 \
    X(dnnl_reorder_primitive_desc_create)                                                          \
    X(dnnl_primitive_create)                                                                       \
    X(dnnl_primitive_execute)                                                                      \
    X(dnnl_primitive_destroy)                                                                      \
    X(dnnl_memory_create)                                                                          \
    X(dnnl_memory_destroy)                                                                         \
    X(dnnl_primitive_attr_create)                                                                  \
    X(dnnl_primitive_attr_set_scratchpad_mode)                                                     \
    X(dnnl_primitive_attr_destroy)

static struct {
#define FIELD(name) __typeof__(&name) name;
    DNNL_FUNCTIONS(FIELD)
#undef FIELD
} dn;

static pthread_mutex_t dn_lock = PTHREAD_MUTEX_INITIALIZER;
static int dn_state; /* 0 not tried, 1 loaded, -1 failed */
/* OpenMP's omp_set_num_threads (libdnnl's libgomp), looked up at load; NULL when oneDNN runs on
 * another runtime */
static void (*omp_threads)(int);
static dnnl_engine_t engine;
static char dn_error[160];

static bool dn_load(void) {
    pthread_mutex_lock(&dn_lock);
    if (dn_state == 0) {
        char threads[16];
        snprintf(threads, sizeof threads, "%d", blas_pool_threads());
        setenv("OMP_NUM_THREADS", threads, 0);
        setenv("OMP_WAIT_POLICY", "PASSIVE", 0);
        setenv("GOMP_SPINCOUNT", "3000", 0);
        void *lib = dlopen("libdnnl.so.2", RTLD_NOW | RTLD_LOCAL);
        dn_state = lib ? 1 : -1;
        if (!lib) snprintf(dn_error, sizeof dn_error, "%s", dlerror());
#define LOOKUP(name)                                                                               \
    if (dn_state == 1 && !(dn.name = (__typeof__(&name))dlsym(lib, #name))) {                      \
        dn_state = -1;                                                                             \
        snprintf(dn_error, sizeof dn_error, "libdnnl.so.2 has no %s", #name);                      \
    }
        DNNL_FUNCTIONS(LOOKUP)
#undef LOOKUP
        if (dn_state == 1) omp_threads = (void (*)(int))dlsym(lib, "omp_set_num_threads");
        if (dn_state == 1 && dn.dnnl_engine_create(&engine, dnnl_cpu, 0) != dnnl_success) {
            dn_state = -1;
            snprintf(dn_error, sizeof dn_error, "oneDNN: no cpu engine");
        }
    }
    bool ok = dn_state == 1;
    pthread_mutex_unlock(&dn_lock);
    return ok;
}

/* ---- one thread runs every convolution primitive --------------------------------------------- */

/* OpenMP keeps a team of threads per thread that starts parallel work, and oneDNN's primitives
 * ran from whichever BEAM scheduler called (a convolution from a dirty one, a small bf16 product
 * from a normal one): after a loop of convolutions, a loop of bf16 256 x 256 products ran much
 * slower than before it, and nearly as fast as before when both had run on the same thread. So
 * convolutions run on this one thread: the caller hands it the work and waits (one at a time; a
 * primitive uses every core anyway), sleeping on a condition variable (spinning there took cores
 * from oneDNN's threads and slowed the products again). After a job the thread waits for the
 * next with sched_yield for 100 us, then sleeps. Products no longer run here: they run as
 * strips, each with a team of one, on the pool's threads (see "products" below). */
typedef bool (*dn_fn)(void *arg);

static struct {
    pthread_mutex_t exec, lock; /* exec: one caller at a time */
    pthread_cond_t work, done;
    pthread_t thread;
    bool started;
    _Atomic unsigned posted, finished; /* job numbers */
    atomic_bool sleeping;
    dn_fn fn;
    void *arg;
    bool result;
} master = {.exec = PTHREAD_MUTEX_INITIALIZER,
            .lock = PTHREAD_MUTEX_INITIALIZER,
            .work = PTHREAD_COND_INITIALIZER,
            .done = PTHREAD_COND_INITIALIZER};

static void *master_main(void *unused) {
    (void)unused;
    unsigned seen = 0;
    for (;;) {
        double until = blas_seconds() + 100e-6;
        while (atomic_load(&master.posted) == seen && blas_seconds() < until) sched_yield();
        if (atomic_load(&master.posted) == seen) {
            pthread_mutex_lock(&master.lock);
            atomic_store(&master.sleeping, true);
            while (atomic_load(&master.posted) == seen)
                pthread_cond_wait(&master.work, &master.lock);
            atomic_store(&master.sleeping, false);
            pthread_mutex_unlock(&master.lock);
        }
        seen = atomic_load(&master.posted);
        master.result = master.fn(master.arg);
        pthread_mutex_lock(&master.lock);
        atomic_store(&master.finished, seen);
        pthread_cond_signal(&master.done);
        pthread_mutex_unlock(&master.lock);
    }
    return NULL;
}

/* fn(arg) on the master thread, master.exec held (and released here); on the caller's if the
 * thread cannot start. */
static bool master_run(dn_fn fn, void *arg) {
    if (!master.started) {
        pthread_attr_t attr;
        pthread_attr_init(&attr);
        pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
        master.started = pthread_create(&master.thread, &attr, master_main, NULL) == 0;
        pthread_attr_destroy(&attr);
        if (!master.started) {
            bool r = fn(arg);
            pthread_mutex_unlock(&master.exec);
            return r;
        }
    }
    blas_pool_hush();
    master.fn = fn;
    master.arg = arg;
    unsigned job = atomic_load(&master.posted) + 1;
    pthread_mutex_lock(&master.lock);
    atomic_store(&master.posted, job);
    if (atomic_load(&master.sleeping)) pthread_cond_signal(&master.work);
    while (atomic_load(&master.finished) != job) pthread_cond_wait(&master.done, &master.lock);
    pthread_mutex_unlock(&master.lock);
    bool r = master.result;
    pthread_mutex_unlock(&master.exec);
    return r;
}

/* fn(arg) on the master thread, after the callers before (convolutions: a dirty scheduler). */
static bool on_master(dn_fn fn, void *arg) {
    pthread_mutex_lock(&master.exec);
    return master_run(fn, arg);
}

/* dn_lock, or false when it is held and not `wait` (a class being built holds it for a while) */
static bool dn_lock_if_free(bool wait) {
    if (!wait) return pthread_mutex_trylock(&dn_lock) == 0;
    pthread_mutex_lock(&dn_lock);
    return true;
}

/* ---- the shape classes: a primitive, its reorders and the measured choice ------------------ */

#define CLASSES 48

/* What a class computes: conv2d, its input gradient (oneDNN's backward data) or its kernel
 * gradient (backward weights). Two inputs a and b, one output c, each in the user's plain layout
 * and in the layout the primitive chose. */
typedef enum { K_FWD, K_DATA, K_WEIGHTS } conv_kind;

typedef struct {
    dnnl_memory_desc_t user, md;
    dnnl_primitive_t reorder; /* to md for an input, from md for the output; NULL: same layout */
    size_t bytes;             /* of the md buffer */
    int arg;
} operand;

/* a shape class's probes of its choice (probe_step) */
typedef struct {
    int since, probe, interval; /* calls on the choice since the last probe; probe calls left */
} probe_state;

typedef struct {
    bool used;
    int64_t key[22];
    operand a, b, c;
    dnnl_primitive_t prim;
    /* the output comes out channels-last for a channels-first result: transposed by the pool
     * (oneDNN's own reorder of it took longer than the convolution) */
    bool c_transpose;
    int64_t n, hw, ch;
    int choice; /* conv2d: 0 undecided, 1 oneDNN, 2 im2col (choose_path); gradients: always 1 */
    int busy;   /* calls running it: not evicted while > 0 */
    unsigned long long last;
} conv_class;

static conv_class classes[CLASSES];
static unsigned long long clock_tick;

/* What this process chose for each shape class: its path (1 oneDNN, 2 im2col; 0 not yet) and
 * its algorithm (1 direct, 2 Winograd's; 0 not yet). Kept when the class is evicted, so that a
 * class built again computes as it did: the same bits for the same inputs. Once full, a new
 * class's choices are not kept (it is measured again if it is evicted). dn_lock held. */
#define DECIDED 1024
static struct {
    int64_t key[22];
    signed char path, wino;
} decided[DECIDED];
static int n_decided;

static int decided_find(const int64_t *key) {
    for (int k = 0; k < n_decided; k++)
        if (memcmp(decided[k].key, key, sizeof decided[k].key) == 0) return k;
    return -1;
}

/* the entry of `key`, added if new; -1 when the table is full */
static int decided_entry(const int64_t *key) {
    int k = decided_find(key);
    if (k >= 0 || n_decided == DECIDED) return k;
    memcpy(decided[n_decided].key, key, sizeof decided[n_decided].key);
    decided[n_decided].path = decided[n_decided].wino = 0;
    return n_decided++;
}

/* Which path an environment variable forces: 1 when it says `one`, 2 when `two`, else 0. */
static int env_path(const char *name, const char *one, const char *two) {
    const char *e = getenv(name);
    return e && strcmp(e, one) == 0 ? 1 : e && strcmp(e, two) == 0 ? 2 : 0;
}

/* Reproducible (blas_dnnl_set_fixed): every choice below by a fixed rule, nothing timed. */
static atomic_bool fixed_paths;

void blas_dnnl_set_fixed(bool on) {
    atomic_store(&fixed_paths, on);
}

static int forced(void) {
    static int f = -1;
    if (f < 0) f = env_path("CASCADE_BLAS_CONV", "onednn", "im2col");
    return f;
}

/* The probes of a product's shape class's choice (a convolution's is made once: choose_path): after
 * `interval` calls on the chosen path, the next two run on the other, if its fastest call so far is
 * within PROBE_RATIO of the choice's (2; CASCADE_BLAS_PROBE_RATIO sets it, for the tests), and the
 * class chooses again on the fastest call each path ever made. The interval starts at 32 and
 * doubles after each probe that leaves the choice as it was, up to 1024: a probe costs up to two
 * calls at twice the time, and a benchmark run's convolution, probed every 32 calls on a much
 * slower im2col path, ran markedly slower on average (one in 17 calls on the slow path). */
enum { PROBE_FIRST = 32, PROBE_LAST = 1024 };

/* the positive number in environment variable `name`, else `otherwise` (the tests' settings) */
static double env_number(const char *name, double otherwise) {
    const char *e = getenv(name);
    double v = e ? atof(e) : 0;
    return v > 0 ? v : otherwise;
}

static double probe_ratio(void) {
    static double r;
    if (r == 0) r = env_number("CASCADE_BLAS_PROBE_RATIO", 2.0);
    return r;
}

/* A call of `seconds` on `path` (1 or 2) of a class that has chosen `choice`, whose paths'
 * fastest calls are *s1 and *s2 (updated here); true when a probe has ended: the caller chooses
 * again and tells probe_settled. dn_lock held. */
static bool probe_step(probe_state *p, int choice, int path, double seconds, double *s1,
                       double *s2) {
    double *best = path == 1 ? s1 : s2;
    if (seconds < *best) *best = seconds;
    if (p->interval == 0) p->interval = PROBE_FIRST;
    if (path != choice) return p->probe > 0 && --p->probe == 0;
    double chosen = choice == 1 ? *s1 : *s2, other = choice == 1 ? *s2 : *s1;
    if (p->probe == 0 && ++p->since >= p->interval) {
        p->since = 0;
        if (other < chosen * probe_ratio()) p->probe = 2;
    }
    return false;
}

/* after a probe: the next one twice as far off if the choice stayed, back to the first if not */
static void probe_settled(probe_state *p, int was, int now) {
    p->interval = was != now                 ? PROBE_FIRST
                  : p->interval < PROBE_LAST ? 2 * p->interval
                                             : PROBE_LAST;
}

/* A class's key: its dimensions, what it computes, whether it reads bf16 (the inputs read as bf16,
 * a forward class on a processor with AVX512-BF16, not as f32 copies), and whether it was built
 * reproducible (its algorithm then chosen by a rule, not by timing: build_best) */
static void key_of(conv_kind kind, const cx_conv_dims *v, bool bf16, int64_t *key) {
    int64_t k[22] = {v->nhwc,   v->n,
                     v->c,      v->h,
                     v->w,      v->og,
                     v->kh,     v->kw,
                     v->s0,     v->s1,
                     v->d0,     v->d1,
                     v->lo0,    v->hi0,
                     v->lo1,    v->hi1,
                     v->groups, kind,
                     v->oh,     v->ow,
                     bf16,      atomic_load(&fixed_paths)};
    memcpy(key, k, sizeof k);
}

static void destroy_class(conv_class *c) {
    dnnl_primitive_t ps[4] = {c->prim, c->a.reorder, c->b.reorder, c->c.reorder};
    for (int k = 0; k < 4; k++)
        if (ps[k]) dn.dnnl_primitive_destroy(ps[k]);
    memset(c, 0, sizeof *c);
}

/* A reorder from `from` to `to`, or NULL (and true) when they are the same layout. */
static bool reorder(const dnnl_memory_desc_t *from, const dnnl_memory_desc_t *to,
                    dnnl_primitive_t *out) {
    *out = NULL;
    if (dn.dnnl_memory_desc_equal(from, to)) return true;
    dnnl_primitive_desc_t pd;
    if (dn.dnnl_reorder_primitive_desc_create(&pd, from, engine, to, engine, NULL) != dnnl_success)
        return false;
    bool ok = dn.dnnl_primitive_create(out, pd) == dnnl_success;
    dn.dnnl_primitive_desc_destroy(pd);
    return ok;
}

/* The operand's chosen layout from the primitive, and its reorder. */
static bool operand_of(operand *o, dnnl_primitive_desc_t pd, dnnl_query_t what, int arg,
                       bool output) {
    o->md = *dn.dnnl_primitive_desc_query_md(pd, what, 0);
    o->bytes = dn.dnnl_memory_desc_get_size(&o->md);
    o->arg = arg;
    return output ? reorder(&o->md, &o->user, &o->reorder) : reorder(&o->user, &o->md, &o->reorder);
}

/* Builds class c with oneDNN's direct algorithm, or its Winograd one (F(4x4, 3x3) for 3 x 3
 * kernels at stride 1: see build_best). */
static bool build_class(conv_kind kind, const cx_conv_dims *v, bool bf16, bool winograd,
                        conv_class *c) {
    dnnl_dims_t src = {v->n, v->c, v->h, v->w}, w = {v->og, v->c, v->kh, v->kw},
                dst = {v->n, v->og, v->oh, v->ow};
    dnnl_dims_t strides = {v->s0, v->s1}, dil = {v->d0 - 1, v->d1 - 1}, pl = {v->lo0, v->lo1},
                pr = {v->hi0, v->hi1};
    dnnl_format_tag_t act = v->nhwc ? dnnl_nhwc : dnnl_nchw, wt = v->nhwc ? dnnl_hwio : dnnl_oihw;
    dnnl_memory_desc_t src_user, w_user, dst_user, src_any, w_any, dst_any;
    dnnl_data_type_t in_type = bf16 ? dnnl_bf16 : dnnl_f32; /* the output is f32 either way */
    dn.dnnl_memory_desc_init_by_tag(&src_user, 4, src, in_type, act);
    dn.dnnl_memory_desc_init_by_tag(&w_user, 4, w, in_type, wt);
    dn.dnnl_memory_desc_init_by_tag(&dst_user, 4, dst, dnnl_f32, act);
    dn.dnnl_memory_desc_init_by_tag(&src_any, 4, src, in_type, dnnl_format_tag_any);
    dn.dnnl_memory_desc_init_by_tag(&w_any, 4, w, in_type, dnnl_format_tag_any);
    dn.dnnl_memory_desc_init_by_tag(&dst_any, 4, dst, dnnl_f32, dnnl_format_tag_any);
    dnnl_convolution_desc_t fd, bd;
    dnnl_prop_kind_t prop = kind == K_FWD ? dnnl_forward_inference : dnnl_forward_training;
    if (dn.dnnl_dilated_convolution_forward_desc_init(
            &fd, prop, winograd ? dnnl_convolution_winograd : dnnl_convolution_direct, &src_any,
            &w_any, NULL, &dst_any, strides, dil, pl, pr) != dnnl_success)
        return false;
    dnnl_primitive_desc_t fwd, pd = NULL;
    if (dn.dnnl_primitive_desc_create(&fwd, &fd, NULL, engine, NULL) != dnnl_success) return false;
    bool ok = true;
    if (kind == K_FWD) {
        pd = fwd;
    } else {
        ok = (kind == K_DATA ? dn.dnnl_dilated_convolution_backward_data_desc_init(
                                   &bd, dnnl_convolution_direct, &src_any, &w_any, &dst_any,
                                   strides, dil, pl, pr)
                             : dn.dnnl_dilated_convolution_backward_weights_desc_init(
                                   &bd, dnnl_convolution_direct, &src_any, &w_any, NULL, &dst_any,
                                   strides, dil, pl, pr)) == dnnl_success &&
             dn.dnnl_primitive_desc_create(&pd, &bd, NULL, engine, fwd) == dnnl_success;
    }
    if (ok) {
        switch (kind) {
        case K_FWD:
            c->a.user = src_user, c->b.user = w_user, c->c.user = dst_user;
            ok = operand_of(&c->a, pd, dnnl_query_src_md, DNNL_ARG_SRC, false) &&
                 operand_of(&c->b, pd, dnnl_query_weights_md, DNNL_ARG_WEIGHTS, false);
            c->c.md = *dn.dnnl_primitive_desc_query_md(pd, dnnl_query_dst_md, 0);
            c->c.arg = DNNL_ARG_DST;
            break;
        case K_DATA:
            c->a.user = dst_user, c->b.user = w_user, c->c.user = src_user;
            ok = operand_of(&c->a, pd, dnnl_query_diff_dst_md, DNNL_ARG_DIFF_DST, false) &&
                 operand_of(&c->b, pd, dnnl_query_weights_md, DNNL_ARG_WEIGHTS, false);
            c->c.md = *dn.dnnl_primitive_desc_query_md(pd, dnnl_query_diff_src_md, 0);
            c->c.arg = DNNL_ARG_DIFF_SRC;
            break;
        case K_WEIGHTS:
            c->a.user = src_user, c->b.user = dst_user, c->c.user = w_user;
            ok = operand_of(&c->a, pd, dnnl_query_src_md, DNNL_ARG_SRC, false) &&
                 operand_of(&c->b, pd, dnnl_query_diff_dst_md, DNNL_ARG_DIFF_DST, false);
            c->c.md = *dn.dnnl_primitive_desc_query_md(pd, dnnl_query_diff_weights_md, 0);
            c->c.arg = DNNL_ARG_DIFF_WEIGHTS;
            break;
        }
    }
    if (ok) {
        /* the output: transposed by the pool when it comes channels-last for channels-first */
        c->c.bytes = dn.dnnl_memory_desc_get_size(&c->c.md);
        dnnl_memory_desc_t nhwc;
        const dnnl_dim_t *dims = kind == K_FWD ? dst : src;
        dn.dnnl_memory_desc_init_by_tag(&nhwc, 4, dims, dnnl_f32, dnnl_nhwc);
        c->c_transpose =
            kind != K_WEIGHTS && !v->nhwc && dn.dnnl_memory_desc_equal(&c->c.md, &nhwc);
        c->n = dims[0], c->ch = dims[1], c->hw = dims[2] * dims[3];
        ok = (c->c_transpose || operand_of(&c->c, pd,
                                           kind == K_FWD    ? dnnl_query_dst_md
                                           : kind == K_DATA ? dnnl_query_diff_src_md
                                                            : dnnl_query_diff_weights_md,
                                           c->c.arg, true)) &&
             dn.dnnl_primitive_create(&c->prim, pd) == dnnl_success;
    }
    if (pd && pd != fwd) dn.dnnl_primitive_desc_destroy(pd);
    dn.dnnl_primitive_desc_destroy(fwd);
    c->choice = kind == K_FWD ? 0 : 1;
    if (!ok) destroy_class(c);
    return ok;
}

/* Building and destroying primitives on the master thread too: oneDNN's scratchpad is the
 * creating thread's (thread-local, sized by the primitives created there, released by their
 * destruction there), and a primitive created on one thread crashed running on another. */
typedef struct {
    conv_kind kind;
    const cx_conv_dims *v;
    bool bf16, fixed;
    conv_class *c;
    const int64_t *key;
} build_args;

static bool build_best(conv_kind kind, const cx_conv_dims *v, bool bf16, bool fixed,
                       const int64_t *key, conv_class *c);

static bool build_job(void *arg) {
    build_args *b = arg;
    return build_best(b->kind, b->v, b->bf16, b->fixed, b->key, b->c);
}

static bool destroy_job(void *arg) {
    destroy_class(arg);
    return true;
}

/* The class of these dimensions, built if new (evicting the least recently used idle one);
 * marked busy. NULL when oneDNN cannot run it. */
static conv_class *class_for(conv_kind kind, const cx_conv_dims *v, bool bf16) {
    int64_t key[22];
    key_of(kind, v, bf16, key);
    pthread_mutex_lock(&dn_lock);
    conv_class *hit = NULL, *victim = NULL;
    for (int k = 0; k < CLASSES; k++) {
        conv_class *c = &classes[k];
        if (c->used && memcmp(c->key, key, sizeof key) == 0) {
            hit = c;
            break;
        }
        if (!c->used && !victim) victim = c;
    }
    if (!hit) {
        conv_class *unused = victim; /* else the least recently used idle one */
        for (int k = 0; k < CLASSES && !unused; k++)
            if (classes[k].busy == 0 && (!victim || classes[k].last < victim->last))
                victim = &classes[k];
        if (victim) {
            if (victim->used) on_master(destroy_job, victim);
            build_args b = {kind, v, bf16, key[21] != 0, victim, key};
            if (on_master(build_job, &b)) {
                victim->used = true;
                memcpy(victim->key, key, sizeof key);
                int e = decided_find(key);
                if (e >= 0 && decided[e].path) victim->choice = decided[e].path;
                hit = victim;
            }
        }
    }
    if (hit) {
        hit->busy++;
        hit->last = ++clock_tick;
    }
    pthread_mutex_unlock(&dn_lock);
    return hit;
}

static void release_class(conv_class *c) {
    pthread_mutex_lock(&dn_lock);
    c->busy--;
    pthread_mutex_unlock(&dn_lock);
}

/* Which path the next conv2d of class c takes: 1 oneDNN, 2 im2col (see the top of the file); a
 * class not measured yet is measured on both by its first call (choose_path), oneDNN first. */
static int next_path(const conv_class *c) {
    if (forced()) return forced();
    if (atomic_load(&fixed_paths)) return 1;
    return c->choice ? c->choice : 1;
}

/* Image by image, y[n][ch][hw] = t[n][hw][ch], in tiles that stay in L1. With `half` set, each
 * image is transposed into a scratch instead and rounded from there into half (f16 or bf16):
 * one pass over the result less than transposing all of it, then rounding all of it. */
typedef struct {
    const float *t;
    float *y;
    int64_t n, hw, ch;
    void *half;
    cx_dtype half_type;
    _Atomic bool failed; /* a part had no memory for its scratch */
} transpose_job;

static void transpose_part(void *ctx, int index, int parts) {
    transpose_job *j = ctx;
    enum { TILE = 32 };
    const simd_table *vt = blas_simd();
    float *scratch = j->half ? cpu_buffer_get(sizeof(float) * (size_t)(j->hw * j->ch)) : NULL;
    if (j->half && !scratch) {
        j->failed = true;
        return;
    }
    for (int64_t n = j->n * index / parts; n < j->n * (index + 1) / parts; n++) {
        const float *t = j->t + n * j->hw * j->ch;
        float *y = scratch ? scratch : j->y + n * j->hw * j->ch;
        if (vt) /* the vector kernels' 8 x 8 blocks */
            vt->transpose_f32(y, t, j->hw, j->ch);
        else
            for (int64_t p0 = 0; p0 < j->hw; p0 += TILE)
                for (int64_t c0 = 0; c0 < j->ch; c0 += TILE) {
                    int64_t p1 = p0 + TILE < j->hw ? p0 + TILE : j->hw;
                    int64_t c1 = c0 + TILE < j->ch ? c0 + TILE : j->ch;
                    for (int64_t c = c0; c < c1; c++)
                        for (int64_t p = p0; p < p1; p++) y[c * j->hw + p] = t[p * j->ch + c];
                }
        if (scratch)
            blas_narrow_serial(j->half_type, y, (uint16_t *)j->half + n * j->hw * j->ch,
                               j->hw * j->ch);
    }
    cpu_buffer_put(scratch);
}

static bool memory(dnnl_memory_t *m, const dnnl_memory_desc_t *md, void *p) {
    return dn.dnnl_memory_create(m, md, engine, p) == dnnl_success;
}

static bool exec2(dnnl_primitive_t p, dnnl_stream_t s, dnnl_memory_t from, dnnl_memory_t to) {
    dnnl_exec_arg_t args[2] = {{DNNL_ARG_FROM, from}, {DNNL_ARG_TO, to}};
    return dn.dnnl_primitive_execute(p, s, 2, args) == dnnl_success;
}

/* The primitive of class c on buffers a, b (inputs: f32, or bf16 for a bf16 class) and y (the f32
 * output) in the user's layouts; or, given `half`, an output of that type (f16 or bf16) instead
 * of y when the result is transposed here (y is not written then). *narrowed: whether it was. */
static bool dn_run(conv_class *c, const void *a, const void *b, float *y, void *half,
                   cx_dtype half_type, bool *narrowed) {
    *narrowed = false;
    dnnl_stream_t s;
    if (dn.dnnl_stream_create(&s, engine, dnnl_stream_default_flags) != dnnl_success) return false;
    void *ab = c->a.reorder ? cpu_buffer_get(c->a.bytes) : (void *)a;
    void *bb = c->b.reorder ? cpu_buffer_get(c->b.bytes) : (void *)b;
    bool own_y = c->c.reorder || c->c_transpose;
    void *yb = own_y ? cpu_buffer_get(c->c.bytes) : (void *)y;
    dnnl_memory_t mau = NULL, ma = NULL, mbu = NULL, mb = NULL, my = NULL, myu = NULL;
    bool ok = ab && bb && yb && memory(&mau, &c->a.user, (void *)a) && memory(&ma, &c->a.md, ab) &&
              memory(&mbu, &c->b.user, (void *)b) && memory(&mb, &c->b.md, bb) &&
              memory(&my, &c->c.md, yb) && memory(&myu, &c->c.user, y);
    if (ok && c->a.reorder) ok = exec2(c->a.reorder, s, mau, ma);
    if (ok && c->b.reorder) ok = exec2(c->b.reorder, s, mbu, mb);
    if (ok) {
        dnnl_exec_arg_t args[3] = {{c->a.arg, ma}, {c->b.arg, mb}, {c->c.arg, my}};
        ok = dn.dnnl_primitive_execute(c->prim, s, 3, args) == dnnl_success;
    }
    if (ok && c->c.reorder) ok = exec2(c->c.reorder, s, my, myu);
    if (ok) ok = dn.dnnl_stream_wait(s) == dnnl_success;
    if (ok && c->c_transpose) {
        *narrowed = half != NULL;
        transpose_job j = {yb, y, c->n, c->hw, c->ch, half, half_type, false};
        int parts = (int)(c->n < blas_pool_threads() ? c->n : blas_pool_threads());
        blas_parallel(parts > 0 ? parts : 1, false, transpose_part, &j);
        ok = !j.failed;
    }
    dnnl_memory_t ms[6] = {mau, ma, mbu, mb, my, myu};
    for (int k = 0; k < 6; k++)
        if (ms[k]) dn.dnnl_memory_destroy(ms[k]);
    dn.dnnl_stream_destroy(s);
    if (c->a.reorder) cpu_buffer_put(ab);
    if (c->b.reorder) cpu_buffer_put(bb);
    if (own_y) cpu_buffer_put(yb);
    return ok;
}

/* CASCADE_BLAS_WINOGRAD: 0 never, 1 wherever oneDNN builds it (no timing: the tests check it
 * against the cpu on every shape it takes), else the faster. */
static int winograd_mode(void) {
    static int mode = -1;
    if (mode < 0) {
        int p = env_path("CASCADE_BLAS_WINOGRAD", "1", "0");
        mode = p == 2 ? 0 : p == 1 ? 1 : 2;
    }
    return mode;
}

/* The seconds of a run of class c on zeros in the user's layouts, or a huge number if it
 * failed. */
static double time_class(conv_class *c, void *a, void *b, float *y) {
    bool narrowed;
    double t0 = blas_seconds();
    if (!dn_run(c, a, b, y, NULL, CX_F32, &narrowed)) return 1e30;
    return blas_seconds() - t0;
}

/* Whether class w (Winograd's) ran faster than c (direct) on zeros of dimensions v: each run once
 * untimed (it wakes oneDNN's threads and faults its buffers in), then three times in turn, the
 * fastest of each compared. With one timed run each, a full benchmark run here kept the slower
 * direct algorithm for the suite's 64 x 32 x 28 x 28 by 64 3 x 3 in all three rounds: on this
 * project's machines one run in a few is slowed by a hiccup, and the choice lasts as long as the
 * process. */
static bool winograd_faster(conv_class *c, conv_class *w, const cx_conv_dims *v) {
    size_t an = (size_t)(v->n * v->c * v->h * v->w), bn = (size_t)(v->og * v->c * v->kh * v->kw),
           yn = (size_t)(v->n * v->og * v->oh * v->ow);
    float *a = cpu_buffer_get(sizeof(float) * an), *b = cpu_buffer_get(sizeof(float) * bn),
          *y = cpu_buffer_get(sizeof(float) * yn);
    bool faster = false;
    if (a && b && y) {
        memset(a, 0, sizeof(float) * an);
        memset(b, 0, sizeof(float) * bn);
        time_class(c, a, b, y);
        time_class(w, a, b, y);
        double direct = 1e30, wino = 1e30;
        for (int r = 0; r < 3; r++) {
            double d = time_class(c, a, b, y), t = time_class(w, a, b, y);
            if (d < direct) direct = d;
            if (t < wino) wino = t;
        }
        faster = wino < direct;
    }
    cpu_buffer_put(a);
    cpu_buffer_put(b);
    cpu_buffer_put(y);
    return faster;
}

/* Class c for an f32 convolution: with the direct algorithm, or with Winograd's where oneDNN has
 * it (3 x 3 kernels at stride 1 and no dilation, one group; AVX-512) and it ran faster on zeros
 * of these shapes when the class was built (the first call of a shape pays eight runs), as it does
 * for 64 x 32 x 28 x 28 by 64 3 x 3 from C. Its error is larger: at most 6e-6
 * x (1 + |y|) there against the direct result, 1.8e-5 with 256 channels in and out, well inside the
 * differential suite's bound for sums; CASCADE_BLAS_WINOGRAD=0 turns it off. Gradients and bf16
 * stay direct, and so does a class built reproducible (`fixed`) unless CASCADE_BLAS_WINOGRAD=1:
 * no rule by shape alone picks the faster well (the demo's CNN, 1 -> 32 channels on 28 x 28 and
 * 32 -> 64 on 14 x 14 at batch 64, trained faster direct than on Winograd). */
static bool build_best(conv_kind kind, const cx_conv_dims *v, bool bf16, bool fixed,
                       const int64_t *key, conv_class *c) {
    if (!build_class(kind, v, bf16, false, c)) return false;
    bool maybe = kind == K_FWD && !bf16 && winograd_mode() && (winograd_mode() == 1 || !fixed) &&
                 v->kh == 3 && v->kw == 3 && v->s0 == 1 && v->s1 == 1 && v->d0 == 1 && v->d1 == 1;
    /* a class built before in this process keeps the algorithm it had (`decided`) */
    int e = decided_find(key);
    if (maybe && winograd_mode() != 1 && e >= 0 && decided[e].wino == 1) return true;
    conv_class w;
    memset(&w, 0, sizeof w);
    if (!maybe || !build_class(kind, v, bf16, true, &w)) return true;
    bool wino =
        winograd_mode() == 1 || (e >= 0 && decided[e].wino == 2) || winograd_faster(c, &w, v);
    if (winograd_mode() != 1 && (e = decided_entry(key)) >= 0) decided[e].wino = wino ? 2 : 1;
    if (wino) {
        destroy_class(c);
        *c = w;
    } else {
        destroy_class(&w);
    }
    return true;
}

static bool float32ish(cx_dtype t) {
    return t == CX_F32 || t == CX_F16 || t == CX_BF16;
}

static bool eligible(const cx_conv_dims *v) {
    return v->groups == 1 && v->lo0 >= 0 && v->hi0 >= 0 && v->lo1 >= 0 && v->hi1 >= 0 && v->c > 0 &&
           v->n > 0 && v->og > 0 && v->oh > 0 && v->ow > 0;
}

/* A float tensor as f32: itself, or widened into a buffer (put back by the caller). */
static float *as_f32(const cx_tensor *t, bool *owned) {
    *owned = t->desc.dtype != CX_F32;
    return *owned ? blas_widen_f32(t) : t->data;
}

typedef struct {
    conv_class *c;
    const void *a, *b;
    float *y;
    void *half;
    cx_dtype half_type;
    bool narrowed;
} dn_run_args;

static bool dn_run_job(void *arg) {
    dn_run_args *r = arg;
    return dn_run(r->c, r->a, r->b, r->y, r->half, r->half_type, &r->narrowed);
}

/* Runs class c on tensors a, b into out, f16/bf16 through f32 (read as bf16 by a bf16 class);
 * times it. */
static cx_code run_class(conv_class *c, const cx_tensor *a, const cx_tensor *b, cx_tensor *out,
                         double *seconds, cx_status *st) {
    double t0 = blas_seconds();
    bool half = out->desc.dtype != CX_F32, bf16 = c->key[20];
    /* a half result transposed here is rounded as it is transposed: no f32 copy of it */
    bool own_a = false, own_b = false, own_y = half && !c->c_transpose, narrowed = false;
    void *a32 = bf16 ? a->data : as_f32(a, &own_a), *b32 = bf16 ? b->data : as_f32(b, &own_b);
    float *y32 = own_y  ? cpu_buffer_get(sizeof(float) * (size_t)out->numel)
                 : half ? NULL
                        : out->data;
    dn_run_args r = {c, a32, b32, y32, half ? out->data : NULL, out->desc.dtype, false};
    bool ok = a32 && b32 && (y32 || (half && !own_y)) && on_master(dn_run_job, &r);
    narrowed = r.narrowed;
    if (ok && half && !narrowed) blas_narrow(out->desc.dtype, y32, out->data, out->numel);
    if (own_a) cpu_buffer_put(a32);
    if (own_b) cpu_buffer_put(b32);
    if (own_y) cpu_buffer_put(y32);
    *seconds = blas_seconds() - t0;
    return ok ? CX_OK : cx_fail(st, CX_ENOMEM, "blas: oneDNN convolution failed (out of memory?)");
}

/* ---- conv2d: oneDNN or im2col, as measured -------------------------------------------------- */

/* A bf16 conv2d where the processor has AVX512-BF16: oneDNN reads the bf16 tensors themselves
 * (its bf16 kernels, into an f32 result that is rounded once) instead of f32 copies, which were
 * slower (64 x 32 x 28 x 28 by 64 3 x 3) */
static bool reads_bf16(const cx_desc *x, const cx_desc *kern) {
    return x->dtype == CX_BF16 && kern->dtype == CX_BF16 && blas_simd_bf16_hw();
}

/* The first conv2d of class c outside reproducible mode, nothing forced: chooses its path (see
 * the top of the file) and leaves the choice's result in `out`. Two timed runs of each: one was
 * not enough, a loop of 64 x 32 x 28 x 28 f32 convolutions once settled on im2col, much slower
 * than oneDNN. The runs alternate, so that a slow spell of the machine weighs on both.
 * Two callers measuring the same new class at once keep the first one's choice. Each run
 * includes the epilogue, if any, as that path runs it (im2col on each block as it is written,
 * oneDNN's after the whole result): a chain that im2col runs in cache may tip the choice. */
static cx_code choose_path(conv_class *c, const cx_tensor *x, const cx_tensor *kern,
                           const cx_params *ps, cx_tensor *out, const blas_epilogue *epi,
                           cx_status *st) {
    double s, dnnl_s = 1e30, im2col_s = 1e30;
    cx_code rc = run_class(c, x, kern, out, &s, st); /* warm-up */
    for (int r = 0; r < 2 && rc == CX_OK; r++) {
        double t0 = blas_seconds();
        if ((rc = run_class(c, x, kern, out, &s, st)) != CX_OK) break;
        if (epi) blas_epilogue_all(epi);
        if ((s = blas_seconds() - t0) < dnnl_s) dnnl_s = s;
        t0 = blas_seconds();
        if ((rc = blas_conv2d_im2col(x, kern, ps, out, epi, st)) != CX_OK) break;
        if ((s = blas_seconds() - t0) < im2col_s) im2col_s = s;
    }
    if (rc != CX_OK) return rc;
    pthread_mutex_lock(&dn_lock);
    if (!c->choice) {
        /* the faster by each one's faster run, oneDNN on a tie */
        c->choice = dnnl_s <= im2col_s ? 1 : 2;
        int e = decided_entry(c->key);
        if (e >= 0) decided[e].path = (signed char)c->choice;
    }
    int path = c->choice;
    pthread_mutex_unlock(&dn_lock);
    /* the last run was im2col's, with its epilogue */
    if (path == 2) return CX_OK;
    if ((rc = run_class(c, x, kern, out, &s, st)) == CX_OK && epi) blas_epilogue_all(epi);
    return rc;
}

const char *blas_conv2d_library(const cx_desc *x, const cx_desc *kern, const cx_params *ps) {
    if (blas_conv2d_depthwise_fits(x, kern, ps)) return "direct";
    cx_conv_dims v;
    cx_conv_dims_of(x, kern, ps, &v);
    if (!eligible(&v) || !float32ish(x->dtype) || forced() == 2 || dn_state == -1)
        return "openblas";
    int64_t key[22];
    key_of(K_FWD, &v, reads_bf16(x, kern), key);
    int path = forced() ? forced() : 1;
    pthread_mutex_lock(&dn_lock);
    for (int k = 0; k < CLASSES; k++)
        if (classes[k].used && memcmp(classes[k].key, key, sizeof key) == 0)
            path = next_path(&classes[k]);
    pthread_mutex_unlock(&dn_lock);
    return path == 1 ? "onednn" : "openblas";
}

cx_code blas_conv2d(const cx_tensor *x, const cx_tensor *kern, const cx_params *ps, cx_tensor *out,
                    const blas_epilogue *epi, cx_status *st) {
    if (out->numel == 0) return CX_OK;
    if (blas_conv2d_depthwise_fits(&x->desc, &kern->desc, ps))
        return blas_conv2d_depthwise(x, kern, ps, out, epi);
    cx_conv_dims v;
    cx_conv_dims_of(&x->desc, &kern->desc, ps, &v);
    conv_class *c = NULL;
    if (eligible(&v) && float32ish(out->desc.dtype) && forced() != 2 && dn_load())
        c = class_for(K_FWD, &v, reads_bf16(&x->desc, &kern->desc));
    if (c && !c->choice && !forced() && !atomic_load(&fixed_paths)) {
        cx_code rc = choose_path(c, x, kern, ps, out, epi, st);
        release_class(c);
        return rc;
    }
    double s;
    bool dnnl = c && next_path(c) == 1;
    cx_code rc =
        dnnl ? run_class(c, x, kern, out, &s, st) : blas_conv2d_im2col(x, kern, ps, out, epi, st);
    if (c) release_class(c);
    if (rc == CX_OK && dnnl && epi) blas_epilogue_all(epi);
    return rc;
}

/* ---- the gradients: oneDNN only, claimed for the shapes it builds a primitive for ------------ */

/* The dimensions of the forward conv2d behind a gradient: grad_input(gy, kernel, input_shape)
 * or grad_kernel(x, gy, kernel_shape). */
static void grad_dims(cx_op_id op, const cx_desc *in, const cx_params *ps, cx_conv_dims *v) {
    cx_desc shape = {CX_F32, 4, {0}};
    cx_param_id id = op == CX_OP_CONV2D_GRAD_INPUT ? CX_P_INPUT_SHAPE : CX_P_KERNEL_SHAPE;
    for (int a = 0; a < 4; a++) shape.shape[a] = ps->p[id].i[a];
    if (op == CX_OP_CONV2D_GRAD_INPUT)
        cx_conv_dims_of(&shape, &in[1], ps, v);
    else
        cx_conv_dims_of(&in[0], &shape, ps, v);
}

/* (capability has checked the compute types; `in` has the callers' types, cast before execute) */
bool blas_conv2d_grad_fits(cx_op_id op, const cx_desc *in, int n_in, const cx_params *ps) {
    if (n_in != 2) return false;
    cx_conv_dims v;
    grad_dims(op, in, ps, &v);
    if (!eligible(&v) || !dn_load()) return false;
    conv_class *c = class_for(op == CX_OP_CONV2D_GRAD_INPUT ? K_DATA : K_WEIGHTS, &v, false);
    if (c) release_class(c);
    return c != NULL;
}

cx_code blas_conv2d_grad(cx_op_id op, const cx_tensor *a, const cx_tensor *b, const cx_params *ps,
                         cx_tensor *out, cx_status *st) {
    if (out->numel == 0) return CX_OK;
    cx_desc d[2] = {a->desc, b->desc};
    cx_conv_dims v;
    grad_dims(op, d, ps, &v);
    conv_class *c = eligible(&v) && dn_load()
                        ? class_for(op == CX_OP_CONV2D_GRAD_INPUT ? K_DATA : K_WEIGHTS, &v, false)
                        : NULL;
    if (!c)
        return cx_fail(st, CX_EUNSUPPORTED, "blas: oneDNN has no primitive for this %s%s%s",
                       cx_op_table[op].name, dn_error[0] ? ": " : "", dn_error);
    double s;
    cx_code rc = run_class(c, a, b, out, &s, st);
    release_class(c);
    return rc;
}

/* ---- products: oneDNN's matmul or OpenBLAS, as measured (blas_kernels.h) -------------------- */

/* A product on oneDNN runs as strips: its rows (or, when it has more columns than rows, its
 * columns) cut into as many strips as blas_gemm would cut them for OpenBLAS, at most the pool's
 * threads, each a matmul primitive of its own that one thread of the pool runs with OpenMP's
 * team at one thread (the calling thread runs the first). Not on the master thread with OpenMP's
 * team of two: handing each product to that thread and back, and OpenMP's thread meeting it at
 * the barriers inside the primitive, cost more than the product on this project's 2-core
 * machines. An f32 256 x 256 x 256 in a loop (C, CASCADE_BLAS_DOT=onednn) ran much slower in some
 * processes than in others, by where the threads had landed; oneDNN alone from C ran half the rows
 * on one thread as fast as all of them on its two OpenMP threads. Strips also never wait for a
 * thread another caller holds, so a product on a normal scheduler takes oneDNN while a convolution
 * runs. The strips are fixed per shape class (one primitive per strip size, at most two), so the
 * same shape gives the same bits whichever threads run them. */

#define MM_CLASSES    32
#define MM_STRIP_ROWS 16 /* rows a strip has at least (blas_gemm's SPLIT_MIN_ROWS) */
/* An f32 product of MM_WHOLE_MIN multiply-adds or more runs whole instead, as one dnnl_sgemm on
 * the master thread with OpenMP's whole team: each strip packs all of B (or of A) for itself,
 * which the team packs once between them. From C on an Intel Xeon (Cascade Lake, 2 cores, 2.5
 * GHz), f32 1024 x 1024 x 1024 ran fastest as dnnl_sgemm on 2 OpenMP threads, ahead of OpenBLAS
 * on its 2 threads, OpenBLAS in two strips of rows and oneDNN's matmul on 2 OpenMP threads.
 * Through Cascade, three alternating pairs of builds in a slow spell of the machine: 1024^3 ran
 * faster whole than in strips in each pair; but 512^3 ran slower whole (the hand-off to the
 * master thread and its team's wake-up weigh on a product that small), so only from 2^30
 * (1024^3).
 * CASCADE_BLAS_WHOLE_MIN sets it, for the tests. */
#define MM_WHOLE_MIN (INT64_C(1) << 30)
static double mm_whole_min(void) {
    static double v;
    if (v == 0) v = env_number("CASCADE_BLAS_WHOLE_MIN", (double)MM_WHOLE_MIN);
    return v;
}

typedef struct {
    bool used;
    blas_mm_shape key;
    int strips; /* of rows, or of columns when by_cols */
    bool by_cols;
    bool whole;   /* f32 from mm_whole_min(): one dnnl_sgemm on the master thread, no primitive */
    int64_t span; /* rows (or columns) in all */
    dnnl_primitive_t
        prim[2]; /* strips of span / strips + 1 rows (or columns), and of span / strips */
    dnnl_memory_desc_t a[2], b[2], c[2], scratch[2];
    size_t scratch_bytes[2]; /* the caller's scratchpad of each: the strips run at once */
    int calls;
    double dnnl_s, openblas_s; /* the fastest timed call of each */
    int choice;                /* 0 undecided, 1 oneDNN, 2 OpenBLAS */
    probe_state ps;
    bool ready, failed; /* built (in the background: mm_start_build), or could not be */
    _Atomic int busy;   /* calls running it (or its builder): not evicted while > 0 */
    unsigned long long last;
} mm_class;

static mm_class mm_classes[MM_CLASSES];

/* OpenMP's team of one on this thread: a strip runs on the thread that takes it. Set once per
 * thread (an OpenMP setting of the thread's own); the master thread, which runs convolutions
 * with the whole team, never runs a strip. */
static void one_omp_thread(void) {
    static __thread bool set;
    if (!set && omp_threads) omp_threads(1);
    set = true;
}

static int mm_forced(void) {
    static int f = -1;
    if (f < 0) f = env_path("CASCADE_BLAS_DOT", "onednn", "openblas");
    return f;
}

static bool same_shape(const blas_mm_shape *x, const blas_mm_shape *y) {
    return x->m == y->m && x->n == y->n && x->k == y->k && x->lda == y->lda && x->ldb == y->ldb &&
           x->ta == y->ta && x->tb == y->tb && x->c_f32 == y->c_f32 && x->f32 == y->f32 &&
           x->widened == y->widened;
}

/* strip `i` of class c: its first row (or column) and how many */
static int64_t strip_start(const mm_class *c, int i) {
    int64_t q = c->span / c->strips, r = c->span % c->strips;
    return q * i + (i < r ? i : r);
}

static int64_t strip_size(const mm_class *c, int i) {
    return c->span / c->strips + (i < c->span % c->strips ? 1 : 0);
}

/* the primitive for strips of `size` rows (or columns) into c->prim[v] */
static bool mm_build_strip(const blas_mm_shape *s, mm_class *c, int v, int64_t size) {
    int64_t m = c->by_cols ? s->m : size, n = c->by_cols ? size : s->n;
    dnnl_dims_t ad = {m, s->k}, bd = {s->k, n}, cd = {m, n};
    dnnl_dims_t as = {s->ta ? 1 : s->lda, s->ta ? s->lda : 1};
    dnnl_dims_t bs = {s->tb ? 1 : s->ldb, s->tb ? s->ldb : 1};
    dnnl_dims_t cs = {s->n, 1}; /* a strip of C keeps C's rows */
    dnnl_matmul_desc_t md;
    dnnl_primitive_desc_t pd = NULL;
    dnnl_primitive_attr_t attr = NULL;
    dnnl_data_type_t in = s->f32 ? dnnl_f32 : dnnl_bf16;
    /* the scratchpad passed in by the caller: oneDNN's own is the creating thread's, which two
     * strips running at once would share */
    bool ok = dn.dnnl_memory_desc_init_by_strides(&c->a[v], 2, ad, in, as) == dnnl_success &&
              dn.dnnl_memory_desc_init_by_strides(&c->b[v], 2, bd, in, bs) == dnnl_success &&
              dn.dnnl_memory_desc_init_by_strides(
                  &c->c[v], 2, cd, s->c_f32 || s->f32 ? dnnl_f32 : in, cs) == dnnl_success &&
              dn.dnnl_matmul_desc_init(&md, &c->a[v], &c->b[v], NULL, &c->c[v]) == dnnl_success &&
              dn.dnnl_primitive_attr_create(&attr) == dnnl_success &&
              dn.dnnl_primitive_attr_set_scratchpad_mode(attr, dnnl_scratchpad_mode_user) ==
                  dnnl_success &&
              dn.dnnl_primitive_desc_create(&pd, &md, attr, engine, NULL) == dnnl_success;
    const dnnl_memory_desc_t *sm =
        ok ? dn.dnnl_primitive_desc_query_md(pd, dnnl_query_scratchpad_md, 0) : NULL;
    if (sm) {
        c->scratch[v] = *sm;
        c->scratch_bytes[v] = dn.dnnl_memory_desc_get_size(sm);
    }
    ok = ok && dn.dnnl_primitive_create(&c->prim[v], pd) == dnnl_success;
    if (pd) dn.dnnl_primitive_desc_destroy(pd);
    if (attr) dn.dnnl_primitive_attr_destroy(attr);
    return ok;
}

/* Cuts the product into strips and builds their primitives, on the calling thread (its OpenMP
 * team of one: the kernels are blocked for one thread). */
static bool mm_build(const blas_mm_shape *s, mm_class *c) {
    if (s->f32 && (double)s->m * (double)s->n * (double)s->k >= mm_whole_min()) {
        c->whole = true;
        return true;
    }
    int parts = blas_gemm_parts((int)s->m, (int)s->n, (int)s->k, &c->by_cols);
    /* by rows wherever there are rows for two strips, even where OpenBLAS would cut columns: a
     * strip of columns is a strided block of B and C, which oneDNN runs with its gemm:jit
     * kernels instead of brgemm (an f32 256 x 1024 x 1024 dense ran much faster in rows than in
     * columns or in one strip). Fewer rows than that (16 x 1024 x 1024 ran faster in columns than
     * in one strip), columns. */
    if (c->by_cols && parts > 1 && s->m >= 2 * MM_STRIP_ROWS) {
        c->by_cols = false;
        parts = (int)(s->m / MM_STRIP_ROWS);
    }
    int threads = blas_pool_threads();
    c->span = c->by_cols ? s->n : s->m;
    c->strips = parts < threads ? parts : threads;
    one_omp_thread();
    if (!mm_build_strip(s, c, 0, strip_size(c, 0))) return false;
    int64_t last = strip_size(c, c->strips - 1);
    return last == strip_size(c, 0) || mm_build_strip(s, c, 1, last);
}

/* destroys c's primitives, leaving it with none */
static void mm_destroy(mm_class *c) {
    for (int v = 0; v < 2; v++) {
        if (c->prim[v]) dn.dnnl_primitive_destroy(c->prim[v]);
        c->prim[v] = NULL;
    }
}

/* the class of shape s, or NULL; dn_lock held */
static mm_class *mm_find(const blas_mm_shape *s) {
    for (int k = 0; k < MM_CLASSES; k++)
        if (mm_classes[k].used && same_shape(&mm_classes[k].key, s)) return &mm_classes[k];
    return NULL;
}

/* A slot for a new class: a free one, else the least recently used idle one, its primitives
 * destroyed; NULL when every class is busy. dn_lock held. */
static mm_class *mm_slot(void) {
    mm_class *victim = NULL;
    for (int k = 0; k < MM_CLASSES && !victim; k++)
        if (!mm_classes[k].used) victim = &mm_classes[k];
    for (int k = 0; k < MM_CLASSES && !victim; k++)
        if (atomic_load(&mm_classes[k].busy) == 0 && (!victim || mm_classes[k].last < victim->last))
            victim = &mm_classes[k];
    if (victim) {
        if (victim->used) mm_destroy(victim);
        memset(victim, 0, sizeof *victim);
    }
    return victim;
}

/* Builds a class's primitives on a thread of its own, then marks it ready (or failed, for
 * good: its calls run on OpenBLAS). */
static void *mm_builder(void *arg) {
    mm_class *c = arg;
    /* at a lower priority: on a machine whose cores are busy (products in a loop, split across
     * the pool) the builder at full priority took time slices from the pool's threads, and the
     * products of other shapes ran far slower while it ran */
    setpriority(PRIO_PROCESS, (id_t)syscall(SYS_gettid), 10);
    bool ok = dn_load() && mm_build(&c->key, c);
    pthread_mutex_lock(&dn_lock);
    if (ok) {
        c->ready = true;
    } else {
        mm_destroy(c);
        c->failed = true;
    }
    atomic_fetch_sub(&c->busy, 1);
    pthread_mutex_unlock(&dn_lock);
    return NULL;
}

/* Starts building shape s's class in the background; dn_lock held. Building takes a while
 * (oneDNN compiles its kernels, longer for larger shapes, and the first build also loads
 * libdnnl), which a normal scheduler must not spend: the calls of the shape run on OpenBLAS
 * until it is ready. */
static void mm_start_build(const blas_mm_shape *s) {
    mm_class *c = mm_slot();
    if (!c) return;
    c->used = true;
    c->key = *s;
    c->last = ++clock_tick;
    atomic_store(&c->busy, 1); /* the builder's: not evicted while it runs */
    pthread_t t;
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    if (pthread_create(&t, &attr, mm_builder, c) != 0) {
        c->failed = true;
        atomic_store(&c->busy, 0);
    }
    pthread_attr_destroy(&attr);
}

/* The ready class of shape s, marked busy; NULL when there is none, or the lock is taken.
 * CASCADE_BLAS_DOT=onednn (`forced`): waits for the lock and builds a new class here. */
static mm_class *mm_class_for(const blas_mm_shape *s, bool forced) {
    if (!dn_lock_if_free(forced)) return NULL;
    mm_class *hit = mm_find(s);
    if (!hit && forced && (hit = mm_slot())) {
        if (mm_build(s, hit)) {
            hit->used = hit->ready = true;
            hit->key = *s;
        } else {
            mm_destroy(hit);
            memset(hit, 0, sizeof *hit);
            hit = NULL;
        }
    }
    if (hit && !hit->ready) hit = NULL;
    if (hit) {
        atomic_fetch_add(&hit->busy, 1);
        hit->last = ++clock_tick;
    }
    pthread_mutex_unlock(&dn_lock);
    return hit;
}

static bool mm_eligible(const blas_mm_shape *s) {
    if (s->m <= 0 || s->n <= 0 || s->k <= 0 || mm_forced() == 2) return false;
    /* blas_gemm_parts takes int sizes */
    if (s->m > INT32_MAX || s->n > INT32_MAX || s->k > INT32_MAX) return false;
    if (!s->f32) return blas_simd_bf16_hw();
    /* in double: m n k may pass int64 for shapes OpenBLAS takes */
    return mm_forced() == 1 || (double)s->m * (double)s->n * (double)s->k >= BLAS_DNNL_F32_MIN;
}

/* A product's shape class runs its first MM_ONEDNN_CALLS calls on oneDNN, the last two of them
 * timed, then two on OpenBLAS, timed, and chooses (blas_dnnl_matmul_record); then the probes
 * (probe_step): the two timings behind the first choice can both fall in one of this machine's
 * slow spells (an f32 256 x 1024 x 1024 dense stayed on OpenBLAS through a whole benchmark run,
 * though oneDNN had been faster in the run before). Two calls a probe, because the first oneDNN
 * call after a while costs more (its threads asleep). The first builds oneDNN's kernel; the next
 * ones vary: in a loop of f32 512 x 512 products (CASCADE_BLAS_DOT=onednn, three runs) the third
 * and fourth were slower than the second and every later one, so timing the third and fourth (as
 * this did until 2026-11-26) kept OpenBLAS, the slower. */
#define MM_ONEDNN_CALLS 6

/* OpenBLAS when it is faster by a margin: 1.25 for f32 (and f16 on widened copies), 1.5 for bf16
 * (see blas_dnnl_matmul_record); dn_lock held */
static void mm_decide(mm_class *c) {
    c->choice = c->openblas_s * (c->key.f32 ? 1.25 : 1.5) < c->dnnl_s ? 2 : 1;
}

/* A timed call after the choice, on `path` (1 oneDNN, 2 OpenBLAS); dn_lock held */
static void mm_after(mm_class *c, int path, double seconds) {
    if (probe_step(&c->ps, c->choice, path, seconds, &c->dnnl_s, &c->openblas_s)) {
        int was = c->choice;
        mm_decide(c);
        probe_settled(&c->ps, was, c->choice);
    }
}

int blas_dnnl_matmul_path(const blas_mm_shape *s) {
    if (!mm_eligible(s) || dn_state == -1) return 0;
    if (mm_forced()) return 1; /* CASCADE_BLAS_DOT=onednn (openblas made it ineligible) */
    /* Reproducible: OpenBLAS, whose products are the same bits whatever ran before. */
    if (atomic_load(&fixed_paths)) return 0;
    if (!dn_lock_if_free(false)) return 0; /* taken: OpenBLAS now, nothing timed */
    mm_class *c = mm_find(s);
    /* a new shape: built in the background, OpenBLAS meanwhile; then its first calls run
     * oneDNN; a chosen one its choice (OpenBLAS timed, 2), but for the calls of a probe */
    if (!c) mm_start_build(s);
    int path = !c || !c->ready                            ? 0
               : !c->choice && c->calls < MM_ONEDNN_CALLS ? 1
               : !c->choice                               ? 2
               : (c->choice == 1) == (c->ps.probe == 0)   ? 1
                                                          : 2;
    pthread_mutex_unlock(&dn_lock);
    return path;
}

typedef struct {
    const mm_class *c;
    const char *a, *b;
    char *y;
    size_t es, ces; /* element sizes of A and B, and of C */
    atomic_bool failed;
} mm_run;

/* strip i: its rows of A and C (or its columns of B and C) */
static bool mm_strip(const mm_run *r, int i, dnnl_stream_t st) {
    const mm_class *c = r->c;
    const blas_mm_shape *s = &c->key;
    int64_t lo = strip_start(c, i);
    int v = strip_size(c, i) == strip_size(c, 0) ? 0 : 1;
    const char *a = r->a, *b = r->b;
    char *y = r->y;
    if (c->by_cols) {
        b += r->es * (size_t)lo * (s->tb ? (size_t)s->ldb : 1);
        y += r->ces * (size_t)lo;
    } else {
        a += r->es * (size_t)lo * (s->ta ? 1 : (size_t)s->lda);
        y += r->ces * (size_t)lo * (size_t)s->n;
    }
    size_t sb = c->scratch_bytes[v];
    void *scratch = sb ? cpu_buffer_get(sb) : NULL;
    dnnl_memory_t ma = NULL, mb = NULL, my = NULL, ms = NULL;
    bool ok = (!sb || scratch) && memory(&ma, &c->a[v], (void *)a) &&
              memory(&mb, &c->b[v], (void *)b) && memory(&my, &c->c[v], y) &&
              (!sb || memory(&ms, &c->scratch[v], scratch));
    dnnl_exec_arg_t args[4] = {
        {DNNL_ARG_SRC, ma}, {DNNL_ARG_WEIGHTS, mb}, {DNNL_ARG_DST, my}, {DNNL_ARG_SCRATCHPAD, ms}};
    ok = ok && dn.dnnl_primitive_execute(c->prim[v], st, sb ? 4 : 3, args) == dnnl_success &&
         dn.dnnl_stream_wait(st) == dnnl_success;
    dnnl_memory_t mems[4] = {ma, mb, my, ms};
    for (int k = 0; k < 4; k++)
        if (mems[k]) dn.dnnl_memory_destroy(mems[k]);
    cpu_buffer_put(scratch);
    return ok;
}

static void mm_part(void *ctx, int index, int parts) {
    mm_run *r = ctx;
    one_omp_thread();
    dnnl_stream_t st = NULL;
    bool ok = dn.dnnl_stream_create(&st, engine, dnnl_stream_default_flags) == dnnl_success;
    for (int i = index; ok && i < r->c->strips; i += parts) ok = mm_strip(r, i, st);
    if (!ok) atomic_store(&r->failed, true);
    if (st) dn.dnnl_stream_destroy(st);
}

/* the whole product, f32, on the master thread (dnnl_sgemm reads row-major matrices, as Cascade
 * stores them) */
static bool mm_whole(void *arg) {
    const mm_run *r = arg;
    const blas_mm_shape *s = &r->c->key;
    return dn.dnnl_sgemm(s->ta ? 'T' : 'N', s->tb ? 'T' : 'N', s->m, s->n, s->k, 1.0f,
                         (const float *)r->a, s->lda, (const float *)r->b, s->ldb, 0.0f,
                         (float *)r->y, s->n) == dnnl_success;
}

bool blas_dnnl_matmul(const blas_mm_shape *s, const void *a, const void *b, void *y) {
    if (!mm_eligible(s) || !dn_load()) return false;
    mm_class *c = mm_class_for(s, mm_forced() == 1);
    if (!c) return false;
    double t0 = blas_seconds();
    mm_run r = {c, a, b, y, s->f32 ? 4 : 2, s->f32 || s->c_f32 ? 4 : 2, false};
    if (c->whole)
        atomic_store(&r.failed, !on_master(mm_whole, &r));
    else
        blas_parallel(c->strips, true, mm_part, &r);
    bool ok = !atomic_load(&r.failed);
    double seconds = blas_seconds() - t0;
    if (ok && dn_lock_if_free(false)) { /* taken: this call is not counted */
        /* the last two of its first calls are timed (MM_ONEDNN_CALLS), and every later one */
        int call = c->choice ? 0 : ++c->calls;
        if (call == MM_ONEDNN_CALLS - 1 || (call == MM_ONEDNN_CALLS && seconds < c->dnnl_s))
            c->dnnl_s = seconds;
        if (c->choice) mm_after(c, 1, seconds);
        pthread_mutex_unlock(&dn_lock);
    }
    atomic_fetch_sub(&c->busy, 1);
    return ok;
}

void blas_dnnl_matmul_record(const blas_mm_shape *s, double seconds) {
    if (!dn_lock_if_free(false)) return; /* taken: this call is not counted */
    mm_class *c = mm_find(s);
    if (c && c->choice) {
        mm_after(c, 2, seconds);
        pthread_mutex_unlock(&dn_lock);
        return;
    }
    int call = !c ? 0 : ++c->calls;
    if (call == MM_ONEDNN_CALLS + 1 || (call == MM_ONEDNN_CALLS + 2 && seconds < c->openblas_s))
        c->openblas_s = seconds;
    /* bf16: OpenBLAS only when clearly faster: it computes twice the f32 FMAs the bf16
     * instructions do, and a first oneDNN call whose OpenMP threads had gone to sleep (between
     * calls that are not back to back) costs much more than a later one: a bf16 256 x 256 dot
     * timed then lost to OpenBLAS, though much faster than OpenBLAS in a loop, and a margin of
     * 1.25x picked OpenBLAS. f32 (and f16 on widened copies): OpenBLAS when 1.25x faster. Their
     * products are 2^25 multiply-adds or more, where a late wake-up weighs little, but the
     * timed calls still vary: on an AMD family 26 processor (AVX-512, where OpenBLAS 0.3.21 runs
     * its AVX2 kernels) oneDNN's 1024 x 1024 f32 ran much faster than OpenBLAS's in a loop, yet
     * in one run of three its two timed calls were slow and OpenBLAS won from then on. */
    if (call == MM_ONEDNN_CALLS + 2) mm_decide(c);
    pthread_mutex_unlock(&dn_lock);
}

bool blas_dnnl_built(void) {
    return true;
}

bool blas_dnnl_available(void) {
    return dn_load();
}

#else /* built without oneDNN's headers: im2col + OpenBLAS only, the gradients decompose */

int blas_dnnl_matmul_path(const blas_mm_shape *s) {
    return 0;
}

bool blas_dnnl_matmul(const blas_mm_shape *s, const void *a, const void *b, void *c) {
    return false;
}

void blas_dnnl_matmul_record(const blas_mm_shape *s, double seconds) {}

void blas_dnnl_set_fixed(bool on) {}

bool blas_dnnl_built(void) {
    return false;
}

bool blas_dnnl_available(void) {
    return false;
}

bool blas_conv2d_grad_fits(cx_op_id op, const cx_desc *in, int n_in, const cx_params *ps) {
    return false;
}

cx_code blas_conv2d_grad(cx_op_id op, const cx_tensor *a, const cx_tensor *b, const cx_params *ps,
                         cx_tensor *out, cx_status *st) {
    return cx_fail(st, CX_EUNSUPPORTED, "blas: built without oneDNN");
}

const char *blas_conv2d_library(const cx_desc *x, const cx_desc *kern, const cx_params *ps) {
    return blas_conv2d_depthwise_fits(x, kern, ps) ? "direct" : "openblas";
}

cx_code blas_conv2d(const cx_tensor *x, const cx_tensor *kern, const cx_params *ps, cx_tensor *out,
                    const blas_epilogue *epi, cx_status *st) {
    if (blas_conv2d_depthwise_fits(&x->desc, &kern->desc, ps))
        return blas_conv2d_depthwise(x, kern, ps, out, epi);
    return blas_conv2d_im2col(x, kern, ps, out, epi, st);
}
#endif
