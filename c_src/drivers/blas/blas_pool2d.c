/* max_pool2d, avg_pool2d and their gradients natively, as direct loops over the windows: the
 * decompositions (the window's strided slices stacked, reduced, and for the gradient compared and
 * scattered back) move every element through several tensors; this reads each window once. Any
 * window, strides, padding (padding never wins, negative padding crops) and either layout, in the
 * float types (f16/bf16 compared in f32, which is exact). Planes (nchw) or images (nhwc) are split
 * across the pool's threads.
 *
 * Semantics, as the decompositions and Nx: NaN wins a window's maximum; the gradient of a window
 * goes to the first maximum in row-major order, none when the maximum is NaN, and overlapping
 * windows add up (accumulated in f32, or f64 for f64, and rounded once). */
#include <math.h>
#include <string.h>

#include "../../core/half.h"
#include "../cpu/cpu_kernels.h"
#include "blas_kernels.h"
#include "blas_simd.h"

typedef struct {
    bool nhwc;
    int64_t n, c, h, w, kh, kw, s0, s1, lo0, lo1, oh, ow;
} pool_dims;

static void pool_dims_of(const cx_desc *x, const cx_params *ps, pool_dims *v) {
    v->nhwc = cx_param_has(ps, CX_P_LAYOUT) && ps->p[CX_P_LAYOUT].i[0] == 1;
    const int64_t *xs = x->shape;
    v->n = xs[0];
    v->c = v->nhwc ? xs[3] : xs[1];
    v->h = v->nhwc ? xs[1] : xs[2];
    v->w = v->nhwc ? xs[2] : xs[3];
    v->kh = ps->p[CX_P_WINDOW].i[0];
    v->kw = ps->p[CX_P_WINDOW].n > 1 ? ps->p[CX_P_WINDOW].i[1] : v->kh;
    bool strides = cx_param_has(ps, CX_P_STRIDES) && ps->p[CX_P_STRIDES].n == 2;
    v->s0 = strides ? ps->p[CX_P_STRIDES].i[0] : v->kh;
    v->s1 = strides ? ps->p[CX_P_STRIDES].i[1] : v->kw;
    const int64_t *pad = ps->p[CX_P_PADDING].i;
    v->lo0 = pad[0];
    v->lo1 = pad[2];
    v->oh = (v->h + pad[0] + pad[1] - v->kh) / v->s0 + 1;
    v->ow = (v->w + pad[2] + pad[3] - v->kw) / v->s1 + 1;
}

/* Element i of a float tensor, widened. */
static inline double load(const cx_tensor *t, int64_t i) {
    switch (t->desc.dtype) {
    case CX_F16: return cx_f16_to_f32(((const uint16_t *)t->data)[i]);
    case CX_BF16: return cx_bf16_to_f32(((const uint16_t *)t->data)[i]);
    case CX_F32: return ((const float *)t->data)[i];
    default: return ((const double *)t->data)[i];
    }
}

static inline void store(cx_tensor *t, int64_t i, double v) {
    switch (t->desc.dtype) {
    case CX_F16: ((uint16_t *)t->data)[i] = cx_f16_from_f64(v); break;
    case CX_BF16: ((uint16_t *)t->data)[i] = cx_bf16_from_f64(v); break;
    case CX_F32: ((float *)t->data)[i] = (float)v; break;
    default: ((double *)t->data)[i] = v;
    }
}

/* Offsets of the input element (n, ch, ih, iw) and the output element (n, ch, oh, ow). */
static inline int64_t in_at(const pool_dims *v, int64_t n, int64_t ch, int64_t ih, int64_t iw) {
    return v->nhwc ? ((n * v->h + ih) * v->w + iw) * v->c + ch
                   : ((n * v->c + ch) * v->h + ih) * v->w + iw;
}

static inline int64_t out_at(const pool_dims *v, int64_t n, int64_t ch, int64_t oh, int64_t ow) {
    return v->nhwc ? ((n * v->oh + oh) * v->ow + ow) * v->c + ch
                   : ((n * v->c + ch) * v->oh + oh) * v->ow + ow;
}

/* The window's result: its maximum (-inf when it reads only padding, NaN when it holds one)
 * and where the first maximum is (-1: none takes the gradient). */
static inline double window_max(const cx_tensor *x, const pool_dims *v, int64_t n, int64_t ch,
                                int64_t oh, int64_t ow, int64_t *arg) {
    double m = -INFINITY;
    *arg = -1;
    int64_t ih0 = oh * v->s0 - v->lo0, iw0 = ow * v->s1 - v->lo1;
    for (int64_t ki = 0; ki < v->kh; ki++) {
        int64_t ih = ih0 + ki;
        if (ih < 0 || ih >= v->h) continue;
        for (int64_t kj = 0; kj < v->kw; kj++) {
            int64_t iw = iw0 + kj;
            if (iw < 0 || iw >= v->w) continue;
            int64_t at = in_at(v, n, ch, ih, iw);
            double e = load(x, at);
            if (e != e) {
                *arg = -1;
                return e;
            }
            if (*arg < 0 || e > m) { /* the first in-bounds element, then a larger one */
                m = e;
                *arg = at;
            }
        }
    }
    return m;
}

typedef struct {
    const pool_dims *v;
    const cx_tensor *x, *gy;
    cx_tensor *out;
    double *acc; /* the gradient: one double per input element (NULL: written in place) */
} pool_job;

/* Where the window of output (oh, ow) starts in the input (row ih0, column iw0, either maybe
 * in the padding), and its rows k0..k1-1 and columns j0..j1-1 that lie inside the input */
typedef struct {
    int64_t ih0, iw0, k0, k1, j0, j1;
} window_span;

static inline window_span span_of(const pool_dims *v, int64_t oh, int64_t ow) {
    window_span sp = {oh * v->s0 - v->lo0, ow * v->s1 - v->lo1, 0, 0, 0, 0};
    sp.k0 = sp.ih0 < 0 ? -sp.ih0 : 0, sp.k1 = v->h - sp.ih0 < v->kh ? v->h - sp.ih0 : v->kh;
    sp.j0 = sp.iw0 < 0 ? -sp.iw0 : 0, sp.j1 = v->w - sp.iw0 < v->kw ? v->w - sp.iw0 : v->kw;
    return sp;
}

/* f32 nchw: the window's maximum and the offset of its first maximum (-1 for none: a NaN, or
 * only padding), reading the plane directly. */
static inline float window_max_f32(const float *plane, const pool_dims *v, int64_t oh, int64_t ow,
                                   int64_t *arg) {
    float m = -INFINITY;
    *arg = -1;
    window_span sp = span_of(v, oh, ow);
    int64_t ih0 = sp.ih0, iw0 = sp.iw0, k0 = sp.k0, k1 = sp.k1, j0 = sp.j0, j1 = sp.j1;
    for (int64_t ki = k0; ki < k1; ki++) {
        const float *row = plane + (ih0 + ki) * v->w + iw0;
        for (int64_t kj = j0; kj < j1; kj++) {
            float e = row[kj];
            if (e != e) {
                *arg = -1;
                return e;
            }
            if (*arg < 0 || e > m) {
                m = e;
                *arg = (ih0 + ki) * v->w + iw0 + kj;
            }
        }
    }
    return m;
}

/* The forward pass needs the maximum only: no position to track, NaN noted on the way. */
static void forward_part_f32(void *ctx, int index, int parts) {
    const pool_job *j = ctx;
    const pool_dims *v = j->v;
    int64_t planes = v->n * v->c;
    for (int64_t p = planes * index / parts; p < planes * (index + 1) / parts; p++) {
        const float *plane = (const float *)j->x->data + p * v->h * v->w;
        float *o = (float *)j->out->data + p * v->oh * v->ow;
        for (int64_t oh = 0; oh < v->oh; oh++) {
            int64_t ih0 = oh * v->s0 - v->lo0;
            int64_t k0 = ih0 < 0 ? -ih0 : 0, k1 = v->h - ih0 < v->kh ? v->h - ih0 : v->kh;
            for (int64_t ow = 0; ow < v->ow; ow++) {
                int64_t iw0 = ow * v->s1 - v->lo1;
                int64_t j0 = iw0 < 0 ? -iw0 : 0, j1 = v->w - iw0 < v->kw ? v->w - iw0 : v->kw;
                float m = -INFINITY;
                int nan = 0;
                for (int64_t ki = k0; ki < k1; ki++) {
                    const float *row = plane + (ih0 + ki) * v->w + iw0;
                    for (int64_t kj = j0; kj < j1; kj++) {
                        float e = row[kj];
                        nan |= e != e;
                        m = e > m ? e : m;
                    }
                }
                o[oh * v->ow + ow] = nan ? NAN : m;
            }
        }
    }
}

/* Windows that do not overlap (strides at least the window): each input element takes at
 * most one gradient, written in place into the zeroed f32 output. */
static void grad_part_f32(void *ctx, int index, int parts) {
    const pool_job *j = ctx;
    const pool_dims *v = j->v;
    int64_t planes = v->n * v->c, arg;
    for (int64_t p = planes * index / parts; p < planes * (index + 1) / parts; p++) {
        const float *plane = (const float *)j->x->data + p * v->h * v->w;
        const float *g = (const float *)j->gy->data + p * v->oh * v->ow;
        float *o = (float *)j->out->data + p * v->h * v->w;
        memset(o, 0, sizeof(float) * (size_t)(v->h * v->w));
        for (int64_t oh = 0; oh < v->oh; oh++)
            for (int64_t ow = 0; ow < v->ow; ow++) {
                window_max_f32(plane, v, oh, ow, &arg);
                if (arg >= 0) o[arg] = g[oh * v->ow + ow];
            }
    }
}

/* The common 2 x 2 window with stride 2 and no padding (the pooling of most CNNs), f32 nchw:
 * straight-line code per window, no bounds, no positions to track in the forward pass. An odd
 * last row or column belongs to no window: its gradient is 0. */
static inline float max2(float a, float b) {
    return b > a ? b : a;
}

static void forward_2x2_f32(void *ctx, int index, int parts) {
    const pool_job *j = ctx;
    const pool_dims *v = j->v;
    int64_t planes = v->n * v->c, w = v->w, ow = v->ow;
    for (int64_t p = planes * index / parts; p < planes * (index + 1) / parts; p++) {
        const float *plane = (const float *)j->x->data + p * v->h * w;
        float *o = (float *)j->out->data + p * v->oh * ow;
        for (int64_t y = 0; y < v->oh; y++) {
            const float *a = plane + 2 * y * w, *b = a + w;
            float *oy = o + y * ow;
            for (int64_t x = 0; x < ow; x++) {
                float e0 = a[2 * x], e1 = a[2 * x + 1], e2 = b[2 * x], e3 = b[2 * x + 1];
                float m = max2(max2(e0, e1), max2(e2, e3));
                oy[x] = e0 != e0 || e1 != e1 || e2 != e2 || e3 != e3 ? NAN : m; /* NaN wins */
            }
        }
    }
}

/* The gradient goes to the window's first maximum in row-major order (e0, e1, e2, e3), none when
 * the window holds a NaN; every input element is written, so nothing is zeroed first. */
static void grad_2x2_f32(void *ctx, int index, int parts) {
    const pool_job *j = ctx;
    const pool_dims *v = j->v;
    int64_t planes = v->n * v->c, h = v->h, w = v->w, ow = v->ow;
    const simd_table *simd = blas_simd();
    for (int64_t p = planes * index / parts; p < planes * (index + 1) / parts; p++) {
        const float *plane = (const float *)j->x->data + p * h * w;
        const float *g = (const float *)j->gy->data + p * v->oh * ow;
        float *o = (float *)j->out->data + p * h * w;
        for (int64_t y = 0; y < v->oh; y++) {
            const float *a = plane + 2 * y * w, *b = a + w;
            float *oa = o + 2 * y * w, *ob = oa + w;
            if (simd)
                simd->pool2x2_grad_f32(oa, ob, a, b, g + y * ow, ow);
            else
                for (int64_t x = 0; x < ow; x++) {
                    float e0 = a[2 * x], e1 = a[2 * x + 1], e2 = b[2 * x], e3 = b[2 * x + 1];
                    float gv = g[y * ow + x];
                    int top = e1 > e0, bottom = 2 + (e3 > e2);
                    float mt = top ? e1 : e0, mb = bottom == 3 ? e3 : e2;
                    int k = mb > mt ? bottom : top;
                    if (e0 != e0 || e1 != e1 || e2 != e2 || e3 != e3) k = -1;
                    oa[2 * x] = k == 0 ? gv : 0.0f;
                    oa[2 * x + 1] = k == 1 ? gv : 0.0f;
                    ob[2 * x] = k == 2 ? gv : 0.0f;
                    ob[2 * x + 1] = k == 3 ? gv : 0.0f;
                }
            if (w > 2 * ow) { /* an odd last column */
                oa[w - 1] = 0.0f;
                ob[w - 1] = 0.0f;
            }
        }
        if (h > 2 * v->oh) memset(o + (h - 1) * w, 0, sizeof(float) * (size_t)w);
    }
}

static bool is_2x2(const pool_dims *v) {
    return !v->nhwc && v->kh == 2 && v->kw == 2 && v->s0 == 2 && v->s1 == 2 && v->lo0 == 0 &&
           v->lo1 == 0 && v->oh == v->h / 2 && v->ow == v->w / 2;
}

static bool is_2x2_f32(const pool_dims *v, const cx_tensor *x, const cx_tensor *out) {
    return is_2x2(v) && x->desc.dtype == CX_F32 && out->desc.dtype == CX_F32;
}

/* ==== f16 and bf16, nchw: compared as integers ================================================
 * Both are sign and magnitude: the key -magnitude for a negative value, +magnitude otherwise,
 * orders as the values do, with -0 and +0 equal, so a window's maximum is one of its elements'
 * bits, found without widening. A magnitude above infinity's is a NaN: the first wins the window,
 * quieted as the general path's round trip through double quiets it (f16: its sign and the
 * canonical quiet NaN; bf16: its bits with the quiet bit set). A window that reads only padding
 * gives -inf. The results are the general path's bit for bit, which was slow for a bf16 2 x 2
 * of 64x32x28x28. */
static inline uint16_t half_inf(cx_dtype t) {
    return t == CX_F16 ? 0x7c00 : 0x7f80;
}

static inline uint16_t half_quiet(cx_dtype t, uint16_t nan) {
    return t == CX_F16 ? (uint16_t)((nan & 0x8000) | 0x7e00) : (uint16_t)(nan | 0x40);
}

static inline int16_t half_key(uint16_t e) {
    int16_t s = (int16_t)((int16_t)e >> 15); /* 0 or -1 */
    return (int16_t)(((int16_t)(e & 0x7fff) ^ s) - s);
}

static inline uint16_t half_unkey(int16_t k) { /* a key's bits, +0 for 0 */
    int16_t s = (int16_t)(k >> 15);
    return (uint16_t)((uint16_t)((k ^ s) - s) | (s & 0x8000));
}

static inline int16_t max16(int16_t a, int16_t b) {
    return b > a ? b : a;
}

/* The offset in the plane of the window's first largest element in row-major order (so -0 or
 * +0 as it comes), or of its first NaN (*nan set then); -1 for a window of padding only */
static inline int64_t window_first_max_half(const uint16_t *plane, const pool_dims *v, int64_t oh,
                                            int64_t ow, uint16_t inf, bool *nan) {
    int64_t arg = -1;
    int32_t best = INT32_MIN;
    window_span sp = span_of(v, oh, ow);
    int64_t ih0 = sp.ih0, iw0 = sp.iw0, k0 = sp.k0, k1 = sp.k1, j0 = sp.j0, j1 = sp.j1;
    *nan = false;
    for (int64_t ki = k0; ki < k1; ki++) {
        const uint16_t *row = plane + (ih0 + ki) * v->w + iw0;
        for (int64_t kj = j0; kj < j1; kj++) {
            uint16_t e = row[kj];
            int64_t at = (ih0 + ki) * v->w + iw0 + kj;
            if ((e & 0x7fff) > inf) return *nan = true, at;
            if (half_key(e) > best) best = half_key(e), arg = at;
        }
    }
    return arg;
}

/* The window's maximum, as bits */
static inline uint16_t window_max_half(const uint16_t *plane, const pool_dims *v, int64_t oh,
                                       int64_t ow, cx_dtype t) {
    bool nan;
    uint16_t inf = half_inf(t);
    int64_t at = window_first_max_half(plane, v, oh, ow, inf, &nan);
    return at < 0 ? (uint16_t)(0x8000 | inf) : nan ? half_quiet(t, plane[at]) : plane[at];
}

static void forward_part_half(void *ctx, int index, int parts) {
    const pool_job *j = ctx;
    const pool_dims *v = j->v;
    cx_dtype t = j->x->desc.dtype;
    int64_t planes = v->n * v->c;
    for (int64_t p = planes * index / parts; p < planes * (index + 1) / parts; p++) {
        const uint16_t *plane = (const uint16_t *)j->x->data + p * v->h * v->w;
        uint16_t *o = (uint16_t *)j->out->data + p * v->oh * v->ow;
        for (int64_t oh = 0; oh < v->oh; oh++)
            for (int64_t ow = 0; ow < v->ow; ow++)
                o[oh * v->ow + ow] = window_max_half(plane, v, oh, ow, t);
    }
}

/* simd_table's pool2x2_half in portable C, for a processor without the vector kernels */
static int pool2x2_half_row(uint16_t *restrict o, const uint16_t *a, const uint16_t *b, int64_t ow,
                            uint16_t inf) {
    int odd = 0;
    for (int64_t x = 0; x < ow; x++) {
        uint16_t e0 = a[2 * x], e1 = a[2 * x + 1], e2 = b[2 * x], e3 = b[2 * x + 1];
        int16_t m = max16(max16(half_key(e0), half_key(e1)), max16(half_key(e2), half_key(e3)));
        o[x] = half_unkey(m);
        odd |= ((e0 & 0x7fff) > inf) | ((e1 & 0x7fff) > inf) | ((e2 & 0x7fff) > inf) |
               ((e3 & 0x7fff) > inf) | (e0 == 0x8000) | (e1 == 0x8000) | (e2 == 0x8000) |
               (e3 == 0x8000);
    }
    return odd;
}

/* 2 x 2 at stride 2, no padding: a row of windows at a time by the vector kernel (or its portable
 * form); a row that holds a NaN or a -0 (where the first of equal keys decides the bits) is done
 * again window by window. */
static void forward_2x2_half(void *ctx, int index, int parts) {
    const pool_job *j = ctx;
    const pool_dims *v = j->v;
    cx_dtype t = j->x->desc.dtype;
    uint16_t inf = half_inf(t);
    int64_t planes = v->n * v->c, w = v->w, ow = v->ow;
    const simd_table *simd = blas_simd();
    for (int64_t p = planes * index / parts; p < planes * (index + 1) / parts; p++) {
        const uint16_t *plane = (const uint16_t *)j->x->data + p * v->h * w;
        uint16_t *o = (uint16_t *)j->out->data + p * v->oh * ow;
        for (int64_t y = 0; y < v->oh; y++) {
            const uint16_t *a = plane + 2 * y * w, *b = a + w;
            uint16_t *oy = o + y * ow;
            int odd =
                simd ? simd->pool2x2_half(oy, a, b, ow, inf) : pool2x2_half_row(oy, a, b, ow, inf);
            if (odd)
                for (int64_t x = 0; x < ow; x++) oy[x] = window_max_half(plane, v, y, x, t);
        }
    }
}

/* The gradient of windows that do not overlap, f16/bf16 nchw: the bits of each window's gradient
 * copied to its first maximum (none for a NaN), as the f32 loops write it; the rest zero. */
static void grad_part_half(void *ctx, int index, int parts) {
    const pool_job *j = ctx;
    const pool_dims *v = j->v;
    uint16_t inf = half_inf(j->x->desc.dtype);
    int64_t planes = v->n * v->c;
    for (int64_t p = planes * index / parts; p < planes * (index + 1) / parts; p++) {
        const uint16_t *plane = (const uint16_t *)j->x->data + p * v->h * v->w;
        const uint16_t *g = (const uint16_t *)j->gy->data + p * v->oh * v->ow;
        uint16_t *o = (uint16_t *)j->out->data + p * v->h * v->w;
        memset(o, 0, sizeof(uint16_t) * (size_t)(v->h * v->w));
        for (int64_t oh = 0; oh < v->oh; oh++)
            for (int64_t ow = 0; ow < v->ow; ow++) {
                bool nan;
                int64_t arg = window_first_max_half(plane, v, oh, ow, inf, &nan);
                if (arg >= 0 && !nan) o[arg] = g[oh * v->ow + ow];
            }
    }
}

/* grad_part_half's 2 x 2 windows at stride 2 by the vector kernel, a row pair at a time */
static void grad_2x2_half(void *ctx, int index, int parts) {
    const pool_job *j = ctx;
    const pool_dims *v = j->v;
    const simd_table *simd = blas_simd();
    uint16_t inf = half_inf(j->x->desc.dtype);
    int64_t planes = v->n * v->c, h = v->h, w = v->w, ow = v->ow;
    for (int64_t p = planes * index / parts; p < planes * (index + 1) / parts; p++) {
        const uint16_t *plane = (const uint16_t *)j->x->data + p * h * w;
        const uint16_t *g = (const uint16_t *)j->gy->data + p * v->oh * ow;
        uint16_t *o = (uint16_t *)j->out->data + p * h * w;
        for (int64_t y = 0; y < v->oh; y++) {
            uint16_t *oa = o + 2 * y * w, *ob = oa + w;
            simd->pool2x2_grad_half(oa, ob, plane + 2 * y * w, plane + (2 * y + 1) * w, g + y * ow,
                                    ow, inf);
            if (w > 2 * ow) oa[w - 1] = ob[w - 1] = 0; /* an odd last column */
        }
        if (h > 2 * v->oh) memset(o + (h - 1) * w, 0, sizeof(uint16_t) * (size_t)w);
    }
}

/* Part `index` of the (image, channel) planes. */
static void forward_part(void *ctx, int index, int parts) {
    const pool_job *j = ctx;
    const pool_dims *v = j->v;
    int64_t planes = v->n * v->c;
    for (int64_t p = planes * index / parts; p < planes * (index + 1) / parts; p++) {
        int64_t n = p / v->c, ch = p % v->c, arg;
        for (int64_t oh = 0; oh < v->oh; oh++)
            for (int64_t ow = 0; ow < v->ow; ow++)
                store(j->out, out_at(v, n, ch, oh, ow), window_max(j->x, v, n, ch, oh, ow, &arg));
    }
}

/* Planes of the gradient do not overlap, so each part adds into its own planes only. */
static void grad_part(void *ctx, int index, int parts) {
    const pool_job *j = ctx;
    const pool_dims *v = j->v;
    int64_t planes = v->n * v->c;
    for (int64_t p = planes * index / parts; p < planes * (index + 1) / parts; p++) {
        int64_t n = p / v->c, ch = p % v->c, arg;
        for (int64_t oh = 0; oh < v->oh; oh++)
            for (int64_t ow = 0; ow < v->ow; ow++) {
                window_max(j->x, v, n, ch, oh, ow, &arg);
                if (arg >= 0) j->acc[arg] += load(j->gy, out_at(v, n, ch, oh, ow));
            }
    }
}

static int parts_of(const pool_dims *v, int64_t work) {
    int64_t parts = work / (1 << 15), threads = blas_pool_threads(), planes = v->n * v->c;
    if (parts > threads) parts = threads;
    if (parts > planes) parts = planes;
    return parts < 1 ? 1 : (int)parts;
}

cx_code blas_max_pool2d(const cx_tensor *x, const cx_params *ps, cx_tensor *out, cx_status *st) {
    if (out->numel == 0) return CX_OK;
    pool_dims v;
    pool_dims_of(&x->desc, ps, &v);
    pool_job j = {&v, x, NULL, out, NULL};
    cx_dtype t = x->desc.dtype;
    bool f32 = !v.nhwc && t == CX_F32 && out->desc.dtype == CX_F32;
    bool half = !v.nhwc && (t == CX_F16 || t == CX_BF16) && out->desc.dtype == t;
    blas_part_fn fn = is_2x2_f32(&v, x, out) ? forward_2x2_f32
                      : f32                  ? forward_part_f32
                      : half && is_2x2(&v)   ? forward_2x2_half
                      : half                 ? forward_part_half
                                             : forward_part;
    blas_parallel(parts_of(&v, out->numel * v.kh * v.kw), false, fn, &j);
    return CX_OK;
}

cx_code blas_max_pool2d_grad(const cx_tensor *x, const cx_tensor *gy, const cx_params *ps,
                             cx_tensor *out, cx_status *st) {
    if (out->numel == 0) return CX_OK;
    pool_dims v;
    pool_dims_of(&x->desc, ps, &v);
    cx_dtype t = x->desc.dtype;
    bool apart =
        !v.nhwc && v.s0 >= v.kh && v.s1 >= v.kw && gy->desc.dtype == t && out->desc.dtype == t;
    if (apart && (t == CX_F32 || t == CX_F16 || t == CX_BF16)) {
        pool_job j = {&v, x, gy, out, NULL};
        blas_parallel(parts_of(&v, x->numel), false,
                      t == CX_F32                 ? (is_2x2(&v) ? grad_2x2_f32 : grad_part_f32)
                      : is_2x2(&v) && blas_simd() ? grad_2x2_half
                                                  : grad_part_half,
                      &j);
        return CX_OK;
    }
    double *acc = cpu_buffer_get(sizeof(double) * (size_t)out->numel);
    if (!acc) return cx_fail(st, CX_ENOMEM, "blas: no memory for max_pool2d_grad's sums");
    memset(acc, 0, sizeof(double) * (size_t)out->numel);
    pool_job j = {&v, x, gy, out, acc};
    blas_parallel(parts_of(&v, gy->numel * v.kh * v.kw), false, grad_part, &j);
    for (int64_t i = 0; i < out->numel; i++) store(out, i, acc[i]);
    cpu_buffer_put(acc);
    return CX_OK;
}

/* ==== avg_pool2d and its gradient ============================================================
 * The window's sum over the elements inside the input, divided by KH * KW whatever the padding
 * (padded elements count as zeros, as in the decomposition and Nx.window_mean); sums in double,
 * rounded once. The gradient spreads g / (KH * KW) over each window, adding where windows
 * overlap, plane by plane (planes never share an element, so the threads need no locks). */

static bool sum2x2_planes(const float *x, float *y, int64_t planes, int64_t h, int64_t w,
                          int64_t oh, int64_t ow, int64_t s, double scale);

static void avg_forward_part(void *ctx, int index, int parts) {
    const pool_job *j = ctx;
    const pool_dims *v = j->v;
    int64_t planes = v->n * v->c;
    double scale = 1.0 / (double)(v->kh * v->kw);
    for (int64_t p = planes * index / parts; p < planes * (index + 1) / parts; p++) {
        int64_t n = p / v->c, ch = p % v->c;
        for (int64_t oh = 0; oh < v->oh; oh++) {
            int64_t ih0 = oh * v->s0 - v->lo0;
            int64_t k0 = ih0 < 0 ? -ih0 : 0, k1 = v->h - ih0 < v->kh ? v->h - ih0 : v->kh;
            for (int64_t ow = 0; ow < v->ow; ow++) {
                int64_t iw0 = ow * v->s1 - v->lo1;
                int64_t j0 = iw0 < 0 ? -iw0 : 0, j1 = v->w - iw0 < v->kw ? v->w - iw0 : v->kw;
                double s = 0;
                for (int64_t ki = k0; ki < k1; ki++)
                    for (int64_t kj = j0; kj < j1; kj++)
                        s += load(j->x, in_at(v, n, ch, ih0 + ki, iw0 + kj));
                store(j->out, out_at(v, n, ch, oh, ow), s * scale);
            }
        }
    }
}

/* doubles between the parts' planes of sums: whole 64-byte lines, so that two threads never
 * write one line (cpu_buffer_get's buffers start on one) */
static int64_t plane_stride(const pool_dims *v) {
    return (v->h * v->w + 7) / 8 * 8;
}

/* acc holds one plane of doubles per part (nchw: contiguous; nhwc: strided by C) */
static void avg_grad_part(void *ctx, int index, int parts) {
    const pool_job *j = ctx;
    const pool_dims *v = j->v;
    int64_t planes = v->n * v->c, hw = v->h * v->w;
    double scale = 1.0 / (double)(v->kh * v->kw),
           *acc = j->acc + (size_t)index * (size_t)plane_stride(v);
    for (int64_t p = planes * index / parts; p < planes * (index + 1) / parts; p++) {
        int64_t n = p / v->c, ch = p % v->c;
        memset(acc, 0, sizeof(double) * (size_t)hw);
        for (int64_t oh = 0; oh < v->oh; oh++) {
            int64_t ih0 = oh * v->s0 - v->lo0;
            int64_t k0 = ih0 < 0 ? -ih0 : 0, k1 = v->h - ih0 < v->kh ? v->h - ih0 : v->kh;
            for (int64_t ow = 0; ow < v->ow; ow++) {
                int64_t iw0 = ow * v->s1 - v->lo1;
                int64_t j0 = iw0 < 0 ? -iw0 : 0, j1 = v->w - iw0 < v->kw ? v->w - iw0 : v->kw;
                double g = load(j->gy, out_at(v, n, ch, oh, ow)) * scale;
                for (int64_t ki = k0; ki < k1; ki++)
                    for (int64_t kj = j0; kj < j1; kj++) acc[(ih0 + ki) * v->w + iw0 + kj] += g;
            }
        }
        for (int64_t ih = 0; ih < v->h; ih++)
            for (int64_t iw = 0; iw < v->w; iw++)
                store(j->out, in_at(v, n, ch, ih, iw), acc[ih * v->w + iw]);
    }
}

cx_code blas_avg_pool2d(const cx_tensor *x, const cx_params *ps, cx_tensor *out, cx_status *st) {
    if (out->numel == 0) return CX_OK;
    pool_dims v;
    pool_dims_of(&x->desc, ps, &v);
    /* f32 planes of 2 x 2 windows at stride 1 or 2 inside them: the vector kernel's row pairs */
    if (!v.nhwc && x->desc.dtype == CX_F32 && out->desc.dtype == CX_F32 && v.kh == 2 && v.kw == 2 &&
        v.s0 == v.s1 && (v.s0 == 1 || v.s0 == 2) && v.lo0 == 0 && v.lo1 == 0 &&
        (v.oh - 1) * v.s0 + 2 <= v.h && (v.ow - 1) * v.s0 + 2 <= v.w &&
        sum2x2_planes(x->data, out->data, v.n * v.c, v.h, v.w, v.oh, v.ow, v.s0, 0.25))
        return CX_OK;
    pool_job j = {&v, x, NULL, out, NULL};
    blas_parallel(parts_of(&v, out->numel * v.kh * v.kw), false, avg_forward_part, &j);
    return CX_OK;
}

/* f32 2 x 2 windows at stride 2 (is_2x2): no two windows share an element, so each of a window's
 * four gets its g / 4 alone, g * 0.25f (the double product rounded once), an odd last row or
 * column 0: the cpu's decomposition's bits (its g / 4 put in place; -0 stays -0, where the
 * general loop above, adding into zeros, gives +0) */
static void avg_grad_2x2_f32(void *ctx, int index, int parts) {
    const pool_job *j = ctx;
    const pool_dims *v = j->v;
    int64_t planes = v->n * v->c, h = v->h, w = v->w, oh = v->oh, ow = v->ow;
    for (int64_t p = planes * index / parts; p < planes * (index + 1) / parts; p++) {
        const float *g = (const float *)j->gy->data + p * oh * ow;
        float *y = (float *)j->out->data + p * h * w;
        for (int64_t r = 0; r < oh; r++) {
            float *y0 = y + 2 * r * w, *y1 = y0 + w;
            for (int64_t c = 0; c < ow; c++) {
                float e = g[r * ow + c] * 0.25f;
                y0[2 * c] = y0[2 * c + 1] = y1[2 * c] = y1[2 * c + 1] = e;
            }
            if (w > 2 * ow) y0[w - 1] = y1[w - 1] = 0;
        }
        if (h > 2 * oh) memset(y + 2 * oh * w, 0, sizeof(float) * (size_t)w);
    }
}

cx_code blas_avg_pool2d_grad(const cx_tensor *gy, const cx_params *ps, cx_tensor *out,
                             cx_status *st) {
    if (out->numel == 0) return CX_OK;
    pool_dims v;
    pool_dims_of(&out->desc, ps, &v); /* the input's shape is the result's */
    if (is_2x2_f32(&v, gy, out)) {
        pool_job j = {&v, NULL, gy, out, NULL};
        blas_parallel(parts_of(&v, out->numel), false, avg_grad_2x2_f32, &j);
        return CX_OK;
    }
    int parts = parts_of(&v, gy->numel * v.kh * v.kw);
    double *acc = cpu_buffer_get(sizeof(double) * (size_t)plane_stride(&v) * (size_t)parts);
    if (!acc) return cx_fail(st, CX_ENOMEM, "blas: no memory for avg_pool2d_grad's sums");
    pool_job j = {&v, NULL, gy, out, acc};
    /* a plane of sums for each part: blas_parallel runs at most `parts` */
    blas_parallel(parts, false, avg_grad_part, &j);
    cpu_buffer_put(acc);
    return CX_OK;
}

/* ==== window ops of the pooling shape, split by planes ========================================
 * window_sum/product/max/min and window_scatter_max/min whose windows span the last two axes
 * only (cpu_window_inner_2d) see every leading axis as one axis of planes, each independent:
 * the planes are split across the pool's threads, each part running the cpu's kernel on its
 * planes (its loops for f32, the general ones for the rest), so the results are the cpu's. */
typedef struct {
    cx_op_id op;
    const cx_tensor *const *in;
    const cx_params *ps;
    cx_tensor *out;
    int64_t planes;
    bool scatter;
    bool ok;
} window_job;

/* t's planes lo .. hi as a rank-3 tensor {hi - lo, A, B} over the same buffer */
static cx_tensor planes_of(const cx_tensor *t, int64_t lo, int64_t hi) {
    cx_tensor v;
    memset(&v, 0, sizeof v);
    int r = t->desc.rank;
    int64_t a = t->desc.shape[r - 2], b = t->desc.shape[r - 1];
    v.desc = t->desc;
    v.desc.rank = 3;
    v.desc.shape[0] = hi - lo;
    v.desc.shape[1] = a;
    v.desc.shape[2] = b;
    v.numel = (hi - lo) * a * b;
    size_t es = cx_dtype_size(t->desc.dtype);
    v.nbytes = es * (size_t)v.numel;
    v.device = t->device;
    v.data = (char *)t->data + es * (size_t)(lo * a * b);
    return v;
}

static void window_part(void *ctx, int index, int parts) {
    window_job *j = ctx;
    int64_t lo = j->planes * index / parts, hi = j->planes * (index + 1) / parts;
    if (lo >= hi) return;
    int r = j->in[0]->desc.rank;
    /* the parameters of the last two axes, for a rank-3 view */
    cx_params ps = *j->ps;
    const cx_param_id ids[] = {CX_P_WINDOW, CX_P_STRIDES, CX_P_WINDOW_DILATIONS};
    for (int k = 0; k < 3; k++) {
        cx_param *p = &ps.p[ids[k]];
        if (p->n != r) continue;
        int64_t last2[2] = {p->i[r - 2], p->i[r - 1]};
        p->i[0] = 1;
        p->i[1] = last2[0];
        p->i[2] = last2[1];
        p->n = 3;
    }
    cx_param *pad = &ps.p[CX_P_PADDING];
    if (pad->n == 2 * r) {
        int64_t last4[4] = {pad->i[2 * r - 4], pad->i[2 * r - 3], pad->i[2 * r - 2],
                            pad->i[2 * r - 1]};
        pad->i[0] = pad->i[1] = 0;
        for (int k = 0; k < 4; k++) pad->i[2 + k] = last4[k];
        pad->n = 6;
    }
    cx_tensor x = planes_of(j->in[0], lo, hi), o = planes_of(j->out, lo, hi);
    cx_tensor src;
    const cx_tensor *ins[2] = {&x, NULL};
    if (j->scatter) {
        src = planes_of(j->in[1], lo, hi);
        ins[1] = &src;
    }
    cx_status st = {CX_OK, ""};
    if (cpu_window(j->op, ins, &ps, &o, &st) != CX_OK) j->ok = false;
}

/* window_max/min and window_scatter_max/min of f32 in 2 x 2 windows at stride 2 inside each plane
 * (Nx's max_pool 2 through window_max, and its gradient), window_sum at stride 2 or 1 (Nx's
 * avg_pool through window_mean, and its gradient: the gradient padded inside, summed at stride
 * 1) and avg_pool2d's 2 x 2 windows at stride 2 or 1 on the vector kernels, row pair by row pair,
 * as the cpu computes them. The scatter's odd last row or column belongs to no window and holds
 * the value. */
typedef struct {
    const simd_table *t;
    cx_op_id op;
    const float *x, *g; /* g: the scatter's source */
    float *y;
    int64_t planes, h, w, oh, ow, stride;
    float value;
    double scale; /* window_sum 1, avg_pool2d 1 / 4 */
} win2x2_job;

/* planes of 2 x 2 sums at once when this small: a wake-up costs more than the work */
#define WIN2X2_ONE_PART 16384

static void win2x2_part(void *ctx, int index, int parts) {
    const win2x2_job *j = ctx;
    int64_t h = j->h, w = j->w, oh = j->oh, ow = j->ow;
    bool scatter = j->g != NULL;
    int is_min = j->op == CX_OP_WINDOW_MIN || j->op == CX_OP_WINDOW_SCATTER_MIN;
    for (int64_t p = j->planes * index / parts; p < j->planes * (index + 1) / parts; p++) {
        const float *x = j->x + p * h * w;
        if (j->op == CX_OP_WINDOW_SUM) {
            for (int64_t r = 0; r < oh; r++)
                j->t->sum2x2_f32(j->y + (p * oh + r) * ow, x + j->stride * r * w,
                                 x + (j->stride * r + 1) * w, ow, (int)j->stride, j->scale);
            continue;
        }
        if (!scatter) {
            for (int64_t r = 0; r < oh; r++)
                j->t->fold2x2_f32(j->y + (p * oh + r) * ow, x + 2 * r * w, x + (2 * r + 1) * w, ow,
                                  is_min);
            continue;
        }
        const float *g = j->g + p * oh * ow;
        float *y = j->y + p * h * w;
        for (int64_t r = 0; r < oh; r++) {
            float *ya = y + 2 * r * w, *yb = ya + w;
            j->t->scatter2x2_f32(ya, yb, x + 2 * r * w, x + (2 * r + 1) * w, g + r * ow, ow,
                                 j->value, is_min);
            for (int64_t c = 2 * ow; c < w; c++) ya[c] = yb[c] = j->value;
        }
        for (int64_t i = 2 * oh * w; i < h * w; i++) y[i] = j->value;
    }
}

/* window_sum (scale 1) or avg_pool2d (1 / 4) of every plane's 2 x 2 windows at stride s (1 or
 * 2, inside the plane) on the vector kernel; false without one */
static bool sum2x2_planes(const float *x, float *y, int64_t planes, int64_t h, int64_t w,
                          int64_t oh, int64_t ow, int64_t s, double scale) {
    const simd_table *t = blas_simd();
    if (!t) return false;
    win2x2_job j = {.t = t,
                    .op = CX_OP_WINDOW_SUM,
                    .x = x,
                    .y = y,
                    .planes = planes,
                    .h = h,
                    .w = w,
                    .oh = oh,
                    .ow = ow,
                    .stride = s,
                    .scale = scale};
    int parts = (int)(planes < blas_pool_threads() ? planes : blas_pool_threads());
    if (planes * h * w < WIN2X2_ONE_PART) parts = 1;
    blas_parallel(parts, false, win2x2_part, &j);
    return true;
}

static bool window_2x2(cx_op_id op, const cx_tensor *const *in, const cx_params *ps, cx_tensor *out,
                       int64_t planes, bool scatter) {
    const simd_table *t = blas_simd();
    const cx_desc *d = &in[0]->desc, *o = scatter ? &in[1]->desc : &out->desc;
    int r = d->rank;
    const int64_t *win = ps->p[CX_P_WINDOW].i, *str = ps->p[CX_P_STRIDES].i;
    const int64_t *pad = ps->p[CX_P_PADDING].i, *dil = ps->p[CX_P_WINDOW_DILATIONS].i;
    int64_t h = d->shape[r - 2], w = d->shape[r - 1], oh = o->shape[r - 2], ow = o->shape[r - 1];
    int64_t s = str[r - 2];
    bool sum = op == CX_OP_WINDOW_SUM; /* at stride 1 too */
    if (!t || d->dtype != CX_F32 || o->dtype != CX_F32 || out->desc.dtype != CX_F32 ||
        (op != CX_OP_WINDOW_MAX && op != CX_OP_WINDOW_MIN && !scatter && !sum) || win[r - 2] != 2 ||
        win[r - 1] != 2 || str[r - 1] != s || !(s == 2 || (sum && s == 1)) || pad[2 * r - 4] != 0 ||
        pad[2 * r - 2] != 0 || (oh - 1) * s + 2 > h || (ow - 1) * s + 2 > w ||
        (!scatter && (dil[r - 2] != 1 || dil[r - 1] != 1)))
        return false;
    if (sum) return sum2x2_planes(in[0]->data, out->data, planes, h, w, oh, ow, s, 1.0);
    win2x2_job j = {.t = t,
                    .op = op,
                    .x = in[0]->data,
                    .g = scatter ? in[1]->data : NULL,
                    .y = out->data,
                    .planes = planes,
                    .h = h,
                    .w = w,
                    .oh = oh,
                    .ow = ow,
                    .stride = 2};
    if (scatter) {
        j.value = (float)cx_param_f64(&ps->p[CX_P_VALUE]);
    }
    int parts = (int)(planes < blas_pool_threads() ? planes : blas_pool_threads());
    if (planes * h * w < WIN2X2_ONE_PART) parts = 1;
    blas_parallel(parts, false, win2x2_part, &j);
    return true;
}

/* The same 2 x 2 windows at stride 2 on the two axes before the last, the last (channels) left
 * alone: channels-last max_pool 2 (Axon's default layout: Nx.window_max with {1, 2, 2, 1}) and
 * its gradient, which the planes' kernels above do not take (they pool the last two axes). A
 * window is four runs of channels, folded element by element with the rules of fold2x2_f32 and
 * scatter2x2_f32 (the cpu's): max takes a greater or NaN element, in window order from -inf;
 * the scatter gives the source to the last element that is >= the best so far (the first one
 * to begin with). Parts are runs of output rows. */
typedef struct {
    bool is_min;
    const float *x, *g; /* g: the scatter's source */
    float *y;
    int64_t planes, h, w, c, oh, ow;
    float value;
} nhwc2x2_job;

static inline bool fold_takes(float v, float m, bool is_min) {
    return (is_min ? v < m : v > m) || v != v;
}

static inline bool scatter_takes(float e, float best, bool is_min) {
    return is_min ? best >= e : e >= best;
}

static void nhwc2x2_part(void *ctx, int index, int parts) {
    const nhwc2x2_job *j = ctx;
    int64_t h = j->h, w = j->w, c = j->c, oh = j->oh, ow = j->ow, rows = j->planes * oh;
    bool is_min = j->is_min;
    for (int64_t q = rows * index / parts; q < rows * (index + 1) / parts; q++) {
        int64_t p = q / oh, r = q % oh;
        const float *xa = j->x + (p * h + 2 * r) * w * c, *xb = xa + w * c;
        if (!j->g) {
            float *y = j->y + q * ow * c;
            for (int64_t o = 0; o < ow; o++) {
                const float *e0 = xa + 2 * o * c, *e1 = e0 + c, *e2 = xb + 2 * o * c, *e3 = e2 + c;
                float *yo = y + o * c;
                /* selects, not branches: the loop vectorizes */
                for (int64_t k = 0; k < c; k++) {
                    float m = is_min ? INFINITY : -INFINITY;
                    m = fold_takes(e0[k], m, is_min) ? e0[k] : m;
                    m = fold_takes(e1[k], m, is_min) ? e1[k] : m;
                    m = fold_takes(e2[k], m, is_min) ? e2[k] : m;
                    yo[k] = fold_takes(e3[k], m, is_min) ? e3[k] : m;
                }
            }
            continue;
        }
        const float *g = j->g + q * ow * c;
        float *ya = j->y + (p * h + 2 * r) * w * c, *yb = ya + w * c, value = j->value;
        for (int64_t o = 0; o < ow; o++) {
            const float *e0 = xa + 2 * o * c, *e1 = e0 + c, *e2 = xb + 2 * o * c, *e3 = e2 + c;
            float *y0 = ya + 2 * o * c, *y1 = y0 + c, *y2 = yb + 2 * o * c, *y3 = y2 + c;
            for (int64_t k = 0; k < c; k++) {
                float best = e0[k];
                bool t1 = scatter_takes(e1[k], best, is_min);
                best = t1 ? e1[k] : best;
                bool t2 = scatter_takes(e2[k], best, is_min);
                best = t2 ? e2[k] : best;
                bool t3 = scatter_takes(e3[k], best, is_min);
                float v = value + g[o * c + k];
                y0[k] = !t1 && !t2 && !t3 ? v : value;
                y1[k] = t1 && !t2 && !t3 ? v : value;
                y2[k] = t2 && !t3 ? v : value;
                y3[k] = t3 ? v : value;
            }
        }
        /* an odd last column, and below the plane's last window row, belong to no window */
        for (int64_t i = 2 * ow * c; i < w * c; i++) ya[i] = yb[i] = value;
        if (r == oh - 1)
            for (int64_t i = 2 * oh * w * c; i < h * w * c; i++) j->y[p * h * w * c + i] = value;
    }
}

static bool window_2x2_nhwc(cx_op_id op, const cx_tensor *const *in, const cx_params *ps,
                            cx_tensor *out, bool scatter) {
    const cx_desc *d = &in[0]->desc, *o = scatter ? &in[1]->desc : &out->desc;
    int r = d->rank;
    if (r < 3 || d->dtype != CX_F32 || o->dtype != CX_F32 || out->desc.dtype != CX_F32 ||
        (!scatter && op != CX_OP_WINDOW_MAX && op != CX_OP_WINDOW_MIN))
        return false;
    const int64_t *win = ps->p[CX_P_WINDOW].i, *str = ps->p[CX_P_STRIDES].i;
    const int64_t *pad = ps->p[CX_P_PADDING].i, *dil = ps->p[CX_P_WINDOW_DILATIONS].i;
    for (int a = 0; a < r; a++) {
        bool pooled = a == r - 3 || a == r - 2;
        if (win[a] != (pooled ? 2 : 1) || str[a] != (pooled ? 2 : 1) || pad[2 * a] != 0 ||
            pad[2 * a + 1] != 0 || (!scatter && dil[a] != 1))
            return false;
    }
    int64_t h = d->shape[r - 3], w = d->shape[r - 2], c = d->shape[r - 1];
    int64_t oh = o->shape[r - 3], ow = o->shape[r - 2];
    if (oh < 1 || ow < 1 || c < 1 || 2 * oh > h || 2 * ow > w || o->shape[r - 1] != c) return false;
    int64_t planes = 1;
    for (int a = 0; a + 3 < r; a++) planes *= d->shape[a];
    nhwc2x2_job j = {.is_min = op == CX_OP_WINDOW_MIN || op == CX_OP_WINDOW_SCATTER_MIN,
                     .x = in[0]->data,
                     .g = scatter ? in[1]->data : NULL,
                     .y = out->data,
                     .planes = planes,
                     .h = h,
                     .w = w,
                     .c = c,
                     .oh = oh,
                     .ow = ow,
                     .value = scatter ? (float)cx_param_f64(&ps->p[CX_P_VALUE]) : 0.0f};
    int64_t rows = planes * oh;
    int parts = (int)(rows < blas_pool_threads() ? rows : blas_pool_threads());
    if (planes * h * w * c < WIN2X2_ONE_PART) parts = 1;
    blas_parallel(parts, false, nhwc2x2_part, &j);
    return true;
}

bool blas_window(cx_op_id op, const cx_tensor *const *in, int n_in, const cx_params *ps,
                 cx_tensor *out) {
    const cx_desc *d = &in[0]->desc;
    bool scatter = op == CX_OP_WINDOW_SCATTER_MAX || op == CX_OP_WINDOW_SCATTER_MIN;
    if (n_in != (scatter ? 2 : 1) || d->rank < 3 || out->desc.rank != d->rank) return false;
    if (window_2x2_nhwc(op, in, ps, out, scatter)) return true;
    if (!cpu_window_inner_2d(d, ps, !scatter)) return false;
    int r = d->rank;
    int64_t planes = 1;
    for (int a = 0; a + 2 < r; a++) planes *= d->shape[a];
    int64_t per_plane = d->shape[r - 2] * d->shape[r - 1];
    if (window_2x2(op, in, ps, out, planes, scatter)) return true;
    int parts = (int)(planes < blas_pool_threads() ? planes : blas_pool_threads());
    /* small tensors: one part (a wake-up costs more than the work) */
    if (planes * per_plane < 16384 || parts < 2) return false;
    window_job j = {op, in, ps, out, planes, scatter, true};
    blas_parallel(parts, false, window_part, &j);
    return j.ok;
}
