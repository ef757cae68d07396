/* conv2d through oneDNN (Debian libdnnl-dev 2.6, the library PyTorch runs convolutions with on
 * the CPU), where it is faster than im2col + OpenBLAS (blas_conv.c).
 *
 * - libdnnl is loaded with dlopen at the first convolution, not at start: it maps ~50 MB and
 *   starts OpenMP, which an application that never convolves should not pay for. Before the
 *   load, OMP_NUM_THREADS is set to the driver's thread count and OMP_WAIT_POLICY to PASSIVE
 *   (unless the environment sets them): OpenMP's threads then sleep between convolutions
 *   instead of spinning on the cores the pool and the BEAM's schedulers need.
 * - Which path runs is decided per shape class (sizes, strides, dilations, padding, layout) by
 *   measuring: the second call of a class runs oneDNN, the third im2col + OpenBLAS, and the
 *   faster of the two runs from then on (the first call is oneDNN's warm-up: its JIT kernels,
 *   its scratch). CASCADE_BLAS_CONV=onednn or im2col forces one. Both give the same values
 *   within f32 rounding; the differential suite checks both against the cpu driver.
 * - The plain layouts (nchw / oihw, nhwc / hwio) are reordered into the blocked ones oneDNN's
 *   kernels want and the result back, as PyTorch does; the weights are reordered per call.
 * - Taken: one group, float inputs (f16/bf16 widened to f32, the result rounded once, as
 *   im2col does), padding that is not negative. Anything else stays on im2col. */
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../../core/conv_geom.h"
#include "../../core/half_array.h"
#include "../cpu/cpu_kernels.h"
#include "blas_kernels.h"
#include "blas_simd.h"

#ifdef CX_HAVE_DNNL
#include <dnnl.h>

/* The functions of libdnnl this file calls, looked up at load. */
#define DNNL_FUNCTIONS(X)                                                                          \
    X(dnnl_engine_create)                                                                          \
    X(dnnl_stream_create)                                                                          \
    X(dnnl_stream_wait)                                                                            \
    X(dnnl_stream_destroy)                                                                         \
    X(dnnl_memory_desc_init_by_tag)                                                                \
    X(dnnl_memory_desc_equal)                                                                      \
    X(dnnl_memory_desc_get_size)                                                                   \
    X(dnnl_dilated_convolution_forward_desc_init)                                                  \
    X(dnnl_primitive_desc_create)                                                                  \
    X(dnnl_primitive_desc_query_md)                                                                \
    X(dnnl_primitive_desc_destroy)                                                                 \
    X(dnnl_reorder_primitive_desc_create)                                                          \
    X(dnnl_primitive_create)                                                                       \
    X(dnnl_primitive_execute)                                                                      \
    X(dnnl_primitive_destroy)                                                                      \
    X(dnnl_memory_create)                                                                          \
    X(dnnl_memory_destroy)

static struct {
#define FIELD(name) __typeof__(&name) name;
    DNNL_FUNCTIONS(FIELD)
#undef FIELD
} dn;

static pthread_mutex_t dn_lock = PTHREAD_MUTEX_INITIALIZER;
static int dn_state; /* 0 not tried, 1 loaded, -1 failed */
static dnnl_engine_t engine;
static char dn_error[160];

static bool dn_load(void) {
    pthread_mutex_lock(&dn_lock);
    if (dn_state == 0) {
        char threads[16];
        snprintf(threads, sizeof threads, "%d", blas_pool_threads());
        setenv("OMP_NUM_THREADS", threads, 0);
        setenv("OMP_WAIT_POLICY", "PASSIVE", 0);
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
        if (dn_state == 1 && dn.dnnl_engine_create(&engine, dnnl_cpu, 0) != dnnl_success) {
            dn_state = -1;
            snprintf(dn_error, sizeof dn_error, "oneDNN: no cpu engine");
        }
    }
    bool ok = dn_state == 1;
    pthread_mutex_unlock(&dn_lock);
    return ok;
}

/* ---- the shape classes: a primitive, its reorders and the measured choice ------------------ */

#define CLASSES 32

typedef struct {
    bool used;
    int64_t key[20];
    dnnl_memory_desc_t src_user, w_user, dst_user, src_md, w_md, dst_md;
    dnnl_primitive_t conv, src_in, w_in, dst_out; /* reorders NULL when the layouts agree */
    size_t src_bytes, w_bytes, dst_bytes;         /* the blocked buffers */
    /* the result comes out channels-last for a channels-first output: transposed by the pool
     * (oneDNN's own reorder of it took longer than the convolution) */
    bool dst_transpose;
    int64_t n, hw, ch;
    int calls;
    double dnnl_s, im2col_s;
    int choice; /* 0 undecided, 1 oneDNN, 2 im2col */
    int busy;   /* calls running it: not evicted while > 0 */
    unsigned long long last;
} conv_class;

static conv_class classes[CLASSES];
static unsigned long long clock_tick;

static int forced(void) {
    static int f = -1;
    if (f < 0) {
        const char *e = getenv("CASCADE_BLAS_CONV");
        f = e && strcmp(e, "onednn") == 0 ? 1 : e && strcmp(e, "im2col") == 0 ? 2 : 0;
    }
    return f;
}

static void key_of(const cx_conv_dims *v, int64_t *key) {
    int64_t k[20] = {v->nhwc, v->n,  v->c,   v->h,   v->w,   v->og,  v->kh,     v->kw, v->s0, v->s1,
                     v->d0,   v->d1, v->lo0, v->hi0, v->lo1, v->hi1, v->groups, 0,     0,     0};
    memcpy(key, k, sizeof k);
}

static void destroy_class(conv_class *c) {
    dnnl_primitive_t ps[4] = {c->conv, c->src_in, c->w_in, c->dst_out};
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

static bool build_class(const cx_conv_dims *v, conv_class *c) {
    dnnl_dims_t src = {v->n, v->c, v->h, v->w}, w = {v->og, v->c, v->kh, v->kw},
                dst = {v->n, v->og, v->oh, v->ow};
    dnnl_dims_t strides = {v->s0, v->s1}, dil = {v->d0 - 1, v->d1 - 1}, pl = {v->lo0, v->lo1},
                pr = {v->hi0, v->hi1};
    dnnl_memory_desc_t src_any, w_any, dst_any;
    dnnl_format_tag_t act = v->nhwc ? dnnl_nhwc : dnnl_nchw, wt = v->nhwc ? dnnl_hwio : dnnl_oihw;
    dn.dnnl_memory_desc_init_by_tag(&c->src_user, 4, src, dnnl_f32, act);
    dn.dnnl_memory_desc_init_by_tag(&c->w_user, 4, w, dnnl_f32, wt);
    dn.dnnl_memory_desc_init_by_tag(&c->dst_user, 4, dst, dnnl_f32, act);
    dn.dnnl_memory_desc_init_by_tag(&src_any, 4, src, dnnl_f32, dnnl_format_tag_any);
    dn.dnnl_memory_desc_init_by_tag(&w_any, 4, w, dnnl_f32, dnnl_format_tag_any);
    dn.dnnl_memory_desc_init_by_tag(&dst_any, 4, dst, dnnl_f32, dnnl_format_tag_any);
    dnnl_convolution_desc_t cd;
    if (dn.dnnl_dilated_convolution_forward_desc_init(
            &cd, dnnl_forward_inference, dnnl_convolution_direct, &src_any, &w_any, NULL, &dst_any,
            strides, dil, pl, pr) != dnnl_success)
        return false;
    dnnl_primitive_desc_t pd;
    if (dn.dnnl_primitive_desc_create(&pd, &cd, NULL, engine, NULL) != dnnl_success) return false;
    c->src_md = *dn.dnnl_primitive_desc_query_md(pd, dnnl_query_src_md, 0);
    c->w_md = *dn.dnnl_primitive_desc_query_md(pd, dnnl_query_weights_md, 0);
    c->dst_md = *dn.dnnl_primitive_desc_query_md(pd, dnnl_query_dst_md, 0);
    dnnl_memory_desc_t dst_nhwc;
    dn.dnnl_memory_desc_init_by_tag(&dst_nhwc, 4, dst, dnnl_f32, dnnl_nhwc);
    c->dst_transpose = !v->nhwc && dn.dnnl_memory_desc_equal(&c->dst_md, &dst_nhwc);
    c->n = v->n, c->hw = v->oh * v->ow, c->ch = v->og;
    bool ok = dn.dnnl_primitive_create(&c->conv, pd) == dnnl_success &&
              reorder(&c->src_user, &c->src_md, &c->src_in) &&
              reorder(&c->w_user, &c->w_md, &c->w_in) &&
              (c->dst_transpose || reorder(&c->dst_md, &c->dst_user, &c->dst_out));
    c->src_bytes = dn.dnnl_memory_desc_get_size(&c->src_md);
    c->w_bytes = dn.dnnl_memory_desc_get_size(&c->w_md);
    c->dst_bytes = dn.dnnl_memory_desc_get_size(&c->dst_md);
    dn.dnnl_primitive_desc_destroy(pd);
    if (!ok) destroy_class(c);
    return ok;
}

/* The class of these dimensions, built if new (evicting the least recently used idle one);
 * marked busy. NULL when oneDNN cannot run it. */
static conv_class *class_for(const cx_conv_dims *v) {
    int64_t key[20];
    key_of(v, key);
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
        for (int k = 0; k < CLASSES && !victim; k++)
            if (classes[k].busy == 0 && (!victim || classes[k].last < victim->last))
                victim = &classes[k];
        if (victim) {
            if (victim->used) destroy_class(victim);
            if (build_class(v, victim)) {
                victim->used = true;
                memcpy(victim->key, key, sizeof key);
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

/* Which path the next call of class c takes: 1 oneDNN, 2 im2col (see the top of the file). */
static int next_path(const conv_class *c) {
    if (forced()) return forced();
    if (c->choice) return c->choice;
    return c->calls < 2 ? 1 : 2;
}

static void record(conv_class *c, int path, double seconds) {
    pthread_mutex_lock(&dn_lock);
    int call = ++c->calls;
    if (path == 1 && call == 2) c->dnnl_s = seconds;
    if (path == 2 && call == 3) {
        c->im2col_s = seconds;
        c->choice = c->dnnl_s <= c->im2col_s ? 1 : 2;
    }
    pthread_mutex_unlock(&dn_lock);
}

static bool memory(dnnl_memory_t *m, const dnnl_memory_desc_t *md, void *p) {
    return dn.dnnl_memory_create(m, md, engine, p) == dnnl_success;
}

static bool exec2(dnnl_primitive_t p, dnnl_stream_t s, int a0, dnnl_memory_t m0, int a1,
                  dnnl_memory_t m1) {
    dnnl_exec_arg_t args[2] = {{a0, m0}, {a1, m1}};
    return dn.dnnl_primitive_execute(p, s, 2, args) == dnnl_success;
}

/* Image by image, y[n][ch][hw] = t[n][hw][ch], in tiles that stay in L1. */
typedef struct {
    const float *t;
    float *y;
    int64_t n, hw, ch;
} transpose_job;

static void transpose_part(void *ctx, int index, int parts) {
    const transpose_job *j = ctx;
    enum { TILE = 32 };
    for (int64_t n = j->n * index / parts; n < j->n * (index + 1) / parts; n++) {
        const float *t = j->t + n * j->hw * j->ch;
        float *y = j->y + n * j->hw * j->ch;
        for (int64_t p0 = 0; p0 < j->hw; p0 += TILE)
            for (int64_t c0 = 0; c0 < j->ch; c0 += TILE) {
                int64_t p1 = p0 + TILE < j->hw ? p0 + TILE : j->hw;
                int64_t c1 = c0 + TILE < j->ch ? c0 + TILE : j->ch;
                for (int64_t c = c0; c < c1; c++)
                    for (int64_t p = p0; p < p1; p++) y[c * j->hw + p] = t[p * j->ch + c];
            }
    }
}

/* The convolution of class c on f32 buffers in the user's layouts. */
static bool dn_run(conv_class *c, const float *x, const float *w, float *y) {
    dnnl_stream_t s;
    if (dn.dnnl_stream_create(&s, engine, dnnl_stream_default_flags) != dnnl_success) return false;
    void *xb = c->src_in ? cpu_buffer_get(c->src_bytes) : (void *)x;
    void *wb = c->w_in ? cpu_buffer_get(c->w_bytes) : (void *)w;
    bool own_y = c->dst_out || c->dst_transpose;
    void *yb = own_y ? cpu_buffer_get(c->dst_bytes) : (void *)y;
    dnnl_memory_t mxu = NULL, mx = NULL, mwu = NULL, mw = NULL, my = NULL, myu = NULL;
    bool ok = xb && wb && yb && memory(&mxu, &c->src_user, (void *)x) &&
              memory(&mx, &c->src_md, xb) && memory(&mwu, &c->w_user, (void *)w) &&
              memory(&mw, &c->w_md, wb) && memory(&my, &c->dst_md, yb) &&
              memory(&myu, &c->dst_user, y);
    if (ok && c->src_in) ok = exec2(c->src_in, s, DNNL_ARG_FROM, mxu, DNNL_ARG_TO, mx);
    if (ok && c->w_in) ok = exec2(c->w_in, s, DNNL_ARG_FROM, mwu, DNNL_ARG_TO, mw);
    if (ok) {
        dnnl_exec_arg_t args[3] = {{DNNL_ARG_SRC, mx}, {DNNL_ARG_WEIGHTS, mw}, {DNNL_ARG_DST, my}};
        ok = dn.dnnl_primitive_execute(c->conv, s, 3, args) == dnnl_success;
    }
    if (ok && c->dst_out) ok = exec2(c->dst_out, s, DNNL_ARG_FROM, my, DNNL_ARG_TO, myu);
    if (ok) ok = dn.dnnl_stream_wait(s) == dnnl_success;
    if (ok && c->dst_transpose) {
        transpose_job j = {yb, y, c->n, c->hw, c->ch};
        int parts = (int)(c->n < blas_pool_threads() ? c->n : blas_pool_threads());
        blas_parallel(parts > 0 ? parts : 1, false, transpose_part, &j);
    }
    dnnl_memory_t ms[6] = {mxu, mx, mwu, mw, my, myu};
    for (int k = 0; k < 6; k++)
        if (ms[k]) dn.dnnl_memory_destroy(ms[k]);
    dn.dnnl_stream_destroy(s);
    if (c->src_in) cpu_buffer_put(xb);
    if (c->w_in) cpu_buffer_put(wb);
    if (own_y) cpu_buffer_put(yb);
    return ok;
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static bool eligible(const cx_conv_dims *v, cx_dtype t) {
    return v->groups == 1 && (t == CX_F32 || t == CX_F16 || t == CX_BF16) && v->lo0 >= 0 &&
           v->hi0 >= 0 && v->lo1 >= 0 && v->hi1 >= 0 && v->c > 0 && forced() != 2;
}

static void widen_any(const cx_tensor *t, float *f) {
    if (t->desc.dtype == CX_F16)
        cx_f16_to_f32_array(t->data, f, t->numel);
    else
        cx_bf16_to_f32_array(t->data, f, t->numel);
}

/* Runs the conv on oneDNN when that is this shape class's path: true with *rc set when it ran
 * (or failed for lack of memory), false to run im2col (then *cls, when not NULL, is the class
 * the im2col time must be recorded for). */
static bool dn_conv(const cx_tensor *x, const cx_tensor *kern, const cx_conv_dims *v,
                    cx_tensor *out, cx_code *rc, conv_class **cls, cx_status *st) {
    *cls = NULL;
    cx_dtype t = out->desc.dtype;
    if (!eligible(v, t) || !dn_load()) return false;
    conv_class *c = class_for(v);
    if (!c) return false;
    if (next_path(c) == 2) {
        *cls = c; /* released by the caller after timing im2col */
        return false;
    }
    bool half = t != CX_F32;
    float *x32 = half ? cpu_buffer_get(sizeof(float) * (size_t)x->numel) : x->data;
    float *w32 = half ? cpu_buffer_get(sizeof(float) * (size_t)kern->numel) : kern->data;
    float *y32 = half ? cpu_buffer_get(sizeof(float) * (size_t)out->numel) : out->data;
    bool ok = x32 && w32 && y32;
    double t0 = now_s();
    if (ok && half) {
        widen_any(x, x32);
        widen_any(kern, w32);
    }
    if (ok) ok = dn_run(c, x32, w32, y32);
    if (ok && half) {
        if (t == CX_F16)
            cx_f32_to_f16_array(y32, out->data, out->numel);
        else
            cx_f32_to_bf16_array(y32, out->data, out->numel);
    }
    if (ok) record(c, 1, now_s() - t0);
    if (half) {
        cpu_buffer_put(x32);
        cpu_buffer_put(w32);
        cpu_buffer_put(y32);
    }
    release_class(c);
    *rc = ok ? CX_OK : cx_fail(st, CX_ENOMEM, "blas: oneDNN conv2d failed (out of memory?)");
    return true;
}

const char *blas_conv2d_library(const cx_desc *x, const cx_desc *kern, const cx_params *ps) {
    cx_conv_dims v;
    cx_conv_dims_of(x, kern, ps, &v);
    if (!eligible(&v, x->dtype) || dn_state == -1) return "openblas";
    int64_t key[20];
    key_of(&v, key);
    int path = forced() ? forced() : 1;
    pthread_mutex_lock(&dn_lock);
    for (int k = 0; k < CLASSES; k++)
        if (classes[k].used && memcmp(classes[k].key, key, sizeof key) == 0)
            path = next_path(&classes[k]);
    pthread_mutex_unlock(&dn_lock);
    return path == 1 ? "onednn" : "openblas";
}

cx_code blas_conv2d(const cx_tensor *x, const cx_tensor *kern, const cx_params *ps, cx_tensor *out,
                    cx_status *st) {
    if (out->numel == 0) return CX_OK;
    cx_conv_dims v;
    cx_conv_dims_of(&x->desc, &kern->desc, ps, &v);
    cx_code rc;
    conv_class *c;
    if (dn_conv(x, kern, &v, out, &rc, &c, st)) return rc;
    double t0 = now_s();
    rc = blas_conv2d_im2col(x, kern, ps, out, st);
    if (c) {
        if (rc == CX_OK) record(c, 2, now_s() - t0);
        release_class(c);
    }
    return rc;
}

#else /* built without oneDNN's headers: im2col + OpenBLAS only */

const char *blas_conv2d_library(const cx_desc *x, const cx_desc *kern, const cx_params *ps) {
    return "openblas";
}

cx_code blas_conv2d(const cx_tensor *x, const cx_tensor *kern, const cx_params *ps, cx_tensor *out,
                    cx_status *st) {
    return blas_conv2d_im2col(x, kern, ps, out, st);
}
#endif
