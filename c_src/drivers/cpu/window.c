/* The WINDOW kind: window_sum, window_product, window_max and window_min of any rank, as
 * Nx.BinaryBackend computes them: each output element folds the elements of its window (the
 * positions o * stride + j * dilation - low along each axis) into an accumulator that starts at
 * the fold's identity, which is also what padding contributes, so positions in the padding are
 * skipped. Floats fold in double and round once (max and min let NaN through, like max/2);
 * integers fold in int64, sums and products wrapping as uint64; u64 compares as unsigned. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cpu_kernels.h"

static double fold_f(cx_op_id op, double acc, double x) {
    switch (op) {
    case CX_OP_WINDOW_SUM: return acc + x;
    case CX_OP_WINDOW_PRODUCT: return acc * x;
    case CX_OP_WINDOW_MAX: return x > acc || x != x ? x : acc;
    default: return x < acc || x != x ? x : acc;
    }
}

/* max and min compare as signed, or as unsigned for unsigned types (their values are
 * zero-extended, so unsigned comparison orders every unsigned width). */
static uint64_t fold_i(cx_op_id op, bool is_signed, uint64_t acc, uint64_t x) {
    switch (op) {
    case CX_OP_WINDOW_SUM: return acc + x;
    case CX_OP_WINDOW_PRODUCT: return acc * x;
    case CX_OP_WINDOW_MAX: return (is_signed ? (int64_t)x > (int64_t)acc : x > acc) ? x : acc;
    default: return (is_signed ? (int64_t)x < (int64_t)acc : x < acc) ? x : acc;
    }
}

static double identity_f(cx_op_id op) {
    switch (op) {
    case CX_OP_WINDOW_SUM: return 0.0;
    case CX_OP_WINDOW_PRODUCT: return 1.0;
    case CX_OP_WINDOW_MAX: return -INFINITY;
    default: return INFINITY;
    }
}

static uint64_t identity_i(cx_op_id op, cx_dtype t) {
    int bits = cx_dtype_bits(t);
    bool sg = cx_dtype_is_signed(t);
    uint64_t umax = bits == 64 ? UINT64_MAX : (UINT64_C(1) << bits) - 1;
    switch (op) {
    case CX_OP_WINDOW_SUM: return 0;
    case CX_OP_WINDOW_PRODUCT: return 1;
    case CX_OP_WINDOW_MAX: return sg ? (uint64_t)(-(int64_t)(umax / 2) - 1) : 0;
    default: return sg ? umax / 2 : umax;
    }
}

/* ---- f32 windows over the last two axes ---------------------------------------------------
 * The pooling shape (every axis but the last two: window 1, stride 1, no padding, no dilation)
 * on f32, with the index arithmetic hoisted out of the loops: the same folds in the same order,
 * in double, rounded once, so the results are those of the general loops bit for bit. A CNN
 * step through Cascade.Backend spent a quarter of its time in the general loops' per-element
 * rank walk. */
bool cpu_window_inner_2d(const cx_desc *d, const cx_params *ps, bool dilations) {
    const int64_t *win = ps->p[CX_P_WINDOW].i, *str = ps->p[CX_P_STRIDES].i;
    const int64_t *pad = ps->p[CX_P_PADDING].i, *dil = ps->p[CX_P_WINDOW_DILATIONS].i;
    if (d->rank < 2) return false;
    for (int a = 0; a + 2 < d->rank; a++)
        if (win[a] != 1 || str[a] != 1 || pad[2 * a] != 0 || pad[2 * a + 1] != 0 ||
            (dilations && dil[a] != 1))
            return false;
    return true;
}

/* The window positions 0 <= j < w with o * s + j * dl - low inside [0, n): lo .. hi. */
static void window_span(int64_t o, int64_t s, int64_t dl, int64_t low, int64_t n, int64_t w,
                        int64_t *lo, int64_t *hi) {
    int64_t base = o * s - low;
    int64_t first = base >= 0 ? 0 : (-base + dl - 1) / dl;
    int64_t last = n - 1 - base < 0 ? -1 : (n - 1 - base) / dl;
    *lo = first;
    *hi = last + 1 < w ? last + 1 : w;
}

/* folds the window into acc through an accumulator m of type T (double for sums and products;
 * float for max and min, which compare the floats themselves: exact, as in double) */
#define WIN2D_FOLD(T, EXPR)                                                                        \
    {                                                                                              \
        T m = (T)acc;                                                                              \
        for (int64_t i = lh; i < hh; i++) {                                                        \
            const float *row = x + (bh + i * dh) * W + bw;                                         \
            for (int64_t j = lw; j < hw; j++) {                                                    \
                T v = row[j * dw];                                                                 \
                m = (EXPR);                                                                        \
            }                                                                                      \
        }                                                                                          \
        acc = m;                                                                                   \
    }

/* One plane's 2 x 2 windows, the fold of each in order (NaN through: the last NaN), with `|` for
 * `||` so that nothing branches on the data (as the scatter below: a branch per element
 * mispredicted on random data). */
#define FOLD_2X2(name, OP, INIT)                                                                   \
    static void name(const float *x, float *y, int64_t W, int64_t OH, int64_t OW, int64_t sh,      \
                     int64_t sw) {                                                                 \
        for (int64_t oh = 0; oh < OH; oh++) {                                                      \
            const float *r0 = x + oh * sh * W, *r1 = r0 + W;                                       \
            for (int64_t ow = 0; ow < OW; ow++) {                                                  \
                const float *a = r0 + ow * sw, *b = r1 + ow * sw;                                  \
                float v[4] = {a[0], a[1], b[0], b[1]}, m = INIT;                                   \
                for (int k = 0; k < 4; k++) m = ((v[k] OP m) | (v[k] != v[k])) ? v[k] : m;         \
                y[oh * OW + ow] = m;                                                               \
            }                                                                                      \
        }                                                                                          \
    }
FOLD_2X2(max_2x2, >, -INFINITY)
FOLD_2X2(min_2x2, <, INFINITY)

static bool window_f32_2d(cx_op_id op, const cx_tensor *in, const cx_params *ps, cx_tensor *out) {
    const cx_desc *d = &in->desc;
    if (d->dtype != CX_F32 || out->desc.dtype != CX_F32 || !cpu_window_inner_2d(d, ps, true))
        return false;
    int r = d->rank;
    const int64_t *win = ps->p[CX_P_WINDOW].i, *str = ps->p[CX_P_STRIDES].i;
    const int64_t *pad = ps->p[CX_P_PADDING].i, *dil = ps->p[CX_P_WINDOW_DILATIONS].i;
    int64_t H = d->shape[r - 2], W = d->shape[r - 1];
    int64_t OH = out->desc.shape[r - 2], OW = out->desc.shape[r - 1];
    int64_t planes = H > 0 && W > 0 ? in->numel / (H * W) : 0;
    int64_t kh = win[r - 2], kw = win[r - 1], sh = str[r - 2], sw = str[r - 1];
    int64_t dh = dil[r - 2], dw = dil[r - 1], ph = pad[2 * (r - 2)], pw = pad[2 * (r - 1)];
    if ((op == CX_OP_WINDOW_MAX || op == CX_OP_WINDOW_MIN) && kh == 2 && kw == 2 && dh == 1 &&
        dw == 1 && ph == 0 && pw == 0 && pad[2 * r - 3] == 0 && pad[2 * r - 1] == 0 &&
        (OH - 1) * sh + 2 <= H && (OW - 1) * sw + 2 <= W) {
        /* 2 x 2 windows inside the plane (max_pool 2): the four folds written out, in order */
        for (int64_t p = 0; p < planes; p++)
            (op == CX_OP_WINDOW_MAX ? max_2x2 : min_2x2)((const float *)in->data + p * H * W,
                                                         (float *)out->data + p * OH * OW, W, OH,
                                                         OW, sh, sw);
        return true;
    }
    /* each column's span of window positions, once (two divisions each) */
    int64_t *span = malloc(sizeof(int64_t) * 2 * (size_t)(OW > 0 ? OW : 1));
    if (!span) return false;
    for (int64_t ow = 0; ow < OW; ow++)
        window_span(ow, sw, dw, pw, W, kw, &span[2 * ow], &span[2 * ow + 1]);
    for (int64_t p = 0; p < planes; p++) {
        const float *x = (const float *)in->data + p * H * W;
        float *y = (float *)out->data + p * OH * OW;
        for (int64_t oh = 0; oh < OH; oh++) {
            int64_t lh, hh, bh = oh * sh - ph;
            window_span(oh, sh, dh, ph, H, kh, &lh, &hh);
            for (int64_t ow = 0; ow < OW; ow++) {
                int64_t lw = span[2 * ow], hw = span[2 * ow + 1], bw = ow * sw - pw;
                double acc = identity_f(op);
                switch (op) {
                case CX_OP_WINDOW_SUM: WIN2D_FOLD(double, m + v) break;
                case CX_OP_WINDOW_PRODUCT: WIN2D_FOLD(double, m *v) break;
                case CX_OP_WINDOW_MAX: WIN2D_FOLD(float, v > m || v != v ? v : m) break;
                default: WIN2D_FOLD(float, v < m || v != v ? v : m) break;
                }
                y[oh * OW + ow] = (float)acc;
            }
        }
    }
    free(span);
    return true;
}

/* 2 x 2 windows at stride 2 (max_pool 2's gradient, each position in one window at most): every
 * output position written once, the selected one with value + source (the float sum of two
 * floats is the double sum rounded once), the others with the value; the selection as below (the
 * last of equal extremes wins, a NaN first holds) without branches: data-dependent branches
 * took most of the time (a 32 x 8 x 26 x 26 tensor). */
#define SCATTER_2X2_S2(name, BETTER)                                                               \
    static void name(const float *x, const float *g, float *y, int64_t H, int64_t W, int64_t OH,   \
                     int64_t OW, float pf) {                                                       \
        for (int64_t oh = 0; oh < OH; oh++) {                                                      \
            const float *r0 = x + 2 * oh * W, *r1 = r0 + W, *gr = g + oh * OW;                     \
            float *y0 = y + 2 * oh * W, *y1 = y0 + W;                                              \
            for (int64_t ow = 0; ow < OW; ow++) {                                                  \
                float a = r0[2 * ow], b = r0[2 * ow + 1], c = r1[2 * ow], d = r1[2 * ow + 1];      \
                int k = 0;                                                                         \
                float bf = a;                                                                      \
                bool t = BETTER(b, bf);                                                            \
                k = t ? 1 : k;                                                                     \
                bf = t ? b : bf;                                                                   \
                t = BETTER(c, bf);                                                                 \
                k = t ? 2 : k;                                                                     \
                bf = t ? c : bf;                                                                   \
                k = BETTER(d, bf) ? 3 : k;                                                         \
                float v = pf + gr[ow];                                                             \
                y0[2 * ow] = k == 0 ? v : pf;                                                      \
                y0[2 * ow + 1] = k == 1 ? v : pf;                                                  \
                y1[2 * ow] = k == 2 ? v : pf;                                                      \
                y1[2 * ow + 1] = k == 3 ? v : pf;                                                  \
            }                                                                                      \
            for (int64_t w = 2 * OW; w < W; w++) y0[w] = y1[w] = pf;                               \
        }                                                                                          \
        for (int64_t i = 2 * OH * W; i < H * W; i++) y[i] = pf;                                    \
    }
#define AT_LEAST(e, bf) ((e) >= (bf))
#define AT_MOST(e, bf)  ((e) <= (bf))
SCATTER_2X2_S2(scatter_max_2x2_s2, AT_LEAST)
SCATTER_2X2_S2(scatter_min_2x2_s2, AT_MOST)

/* window_scatter_max/min of an f32 tensor and source into an f32 output, windows over the last
 * two axes: as window_scatter below, every window position in row-major order, padding taking
 * part with the value, the last of equal extremes winning. */
static bool window_scatter_f32_2d(cx_op_id op, const cx_tensor *t, const cx_tensor *src,
                                  const cx_params *ps, cx_tensor *out) {
    const cx_desc *d = &t->desc;
    if (d->dtype != CX_F32 || src->desc.dtype != CX_F32 || out->desc.dtype != CX_F32 ||
        !cpu_window_inner_2d(d, ps, false))
        return false;
    int r = d->rank;
    const int64_t *win = ps->p[CX_P_WINDOW].i, *str = ps->p[CX_P_STRIDES].i;
    const int64_t *pad = ps->p[CX_P_PADDING].i;
    const cx_param *v = &ps->p[CX_P_VALUE];
    bool max = op == CX_OP_WINDOW_SCATTER_MAX;
    double vf = cx_param_f64(v);
    float pf = (float)vf; /* the value rounded to f32: the padding, and where the result starts */
    int64_t H = d->shape[r - 2], W = d->shape[r - 1];
    int64_t OH = src->desc.shape[r - 2], OW = src->desc.shape[r - 1];
    int64_t planes = H > 0 && W > 0 ? t->numel / (H * W) : 0;
    int64_t kh = win[r - 2], kw = win[r - 1], sh = str[r - 2], sw = str[r - 1];
    int64_t ph = pad[2 * (r - 2)], pw = pad[2 * (r - 1)];
    if (kh == 2 && kw == 2 && sh == 2 && sw == 2 && ph == 0 && pw == 0 && 2 * OH <= H &&
        2 * OW <= W) {
        for (int64_t p = 0; p < planes; p++)
            (max ? scatter_max_2x2_s2 : scatter_min_2x2_s2)(
                (const float *)t->data + p * H * W, (const float *)src->data + p * OH * OW,
                (float *)out->data + p * H * W, H, W, OH, OW, pf);
        return true;
    }
    for (int64_t i = 0; i < out->numel; i++) ((float *)out->data)[i] = pf;
    if (kh == 2 && kw == 2 && ph == 0 && pw == 0 && (OH - 1) * sh + 2 <= H &&
        (OW - 1) * sw + 2 <= W) {
        /* 2 x 2 windows inside the plane (max_pool 2's gradient): the four candidates in order */
        for (int64_t p = 0; p < planes; p++) {
            const float *x = (const float *)t->data + p * H * W;
            const float *g = (const float *)src->data + p * OH * OW;
            float *y = (float *)out->data + p * H * W;
            for (int64_t oh = 0; oh < OH; oh++)
                for (int64_t ow = 0; ow < OW; ow++) {
                    int64_t at[4], base = oh * sh * W + ow * sw;
                    at[0] = base, at[1] = base + 1, at[2] = base + W, at[3] = base + W + 1;
                    int64_t best = at[0];
                    float bf = x[at[0]];
                    for (int k = 1; k < 4; k++) {
                        float e = x[at[k]];
                        if (max ? e >= bf : e <= bf) bf = e, best = at[k];
                    }
                    y[best] = (float)((double)y[best] + (double)g[oh * OW + ow]);
                }
        }
        return true;
    }
    for (int64_t p = 0; p < planes; p++) {
        const float *x = (const float *)t->data + p * H * W;
        const float *g = (const float *)src->data + p * OH * OW;
        float *y = (float *)out->data + p * H * W;
        for (int64_t oh = 0; oh < OH; oh++)
            for (int64_t ow = 0; ow < OW; ow++) {
                int64_t best = -1;
                float bf = 0;
                for (int64_t i = 0; i < kh; i++) {
                    int64_t hh = oh * sh + i - ph;
                    bool in_h = hh >= 0 && hh < H;
                    for (int64_t j = 0; j < kw; j++) {
                        int64_t ww = ow * sw + j - pw;
                        bool inside = in_h && ww >= 0 && ww < W;
                        float e = inside ? x[hh * W + ww] : pf;
                        if ((i == 0 && j == 0) || (max ? e >= bf : e <= bf)) {
                            bf = e;
                            best = inside ? hh * W + ww : -1;
                        }
                    }
                }
                if (best >= 0) y[best] = (float)((double)y[best] + (double)g[oh * OW + ow]);
            }
    }
    return true;
}

/* window_scatter_max/min, as Nx.BinaryBackend: each window (in order) selects the last position
 * whose value is >= (max) or <= (min) the selected one so far, starting from its first; padding
 * positions hold `value` and can be selected, but what is scattered there is dropped. The
 * result starts as `value` everywhere; each source element is added at its selected position
 * in window order, rounding to the result's type at every addition (Nx.add/2 step by step). */
static cx_code window_scatter(cx_op_id op, const cx_tensor *t, const cx_tensor *src,
                              const cx_params *ps, cx_tensor *out, cx_status *st) {
    (void)st;
    const cx_desc *d = &t->desc;
    int rank = d->rank;
    cx_dtype tt = d->dtype, ot = out->desc.dtype;
    const int64_t *win = ps->p[CX_P_WINDOW].i, *str = ps->p[CX_P_STRIDES].i;
    const int64_t *pad = ps->p[CX_P_PADDING].i;
    const cx_param *v = &ps->p[CX_P_VALUE];
    bool max = op == CX_OP_WINDOW_SCATTER_MAX, tf = cx_dtype_is_float(tt);
    bool of = cx_dtype_is_float(ot), tsg = cx_dtype_is_signed(tt);
    size_t oes = cx_dtype_size(ot);
    /* the value in the tensor's type (for the padding) and in the output's */
    double vf = cx_param_f64(v);
    bool vfits = vf > -0x1p63 && vf < 0x1p63;
    uint64_t vi = v->is_int ? (uint64_t)v->i[0] : vfits ? (uint64_t)(int64_t)vf : 0;
    double pf = vf; /* the padding: the value rounded to the tensor's type, as Nx.pad does */
    if (tf) {
        uint64_t cell = 0;
        cpu_store_f64(tt, &cell, 0, vf);
        pf = cpu_load_f64(tt, &cell, 0);
    }
    if (of) {
        for (int64_t i = 0; i < out->numel; i++) cpu_store_f64(ot, out->data, i, vf);
    } else {
        for (int64_t i = 0; i < out->numel; i++)
            memcpy((char *)out->data + (size_t)i * oes, &vi, oes);
    }
    int64_t istr[CX_MAX_RANK], wn = 1, s = 1;
    for (int a = rank - 1; a >= 0; a--) {
        istr[a] = s;
        s *= d->shape[a];
        wn *= win[a];
    }
    int64_t o_idx[CX_MAX_RANK] = {0};
    for (int64_t o = 0; o < src->numel; o++) {
        int64_t w_idx[CX_MAX_RANK] = {0}, best_at = -1;
        double bf = 0;
        uint64_t bi = 0;
        for (int64_t k = 0; k < wn; k++) {
            int64_t at = 0;
            bool inside = true;
            for (int a = 0; a < rank; a++) {
                int64_t p = o_idx[a] * str[a] + w_idx[a] - pad[2 * a];
                inside = inside && p >= 0 && p < d->shape[a];
                at += p * istr[a];
            }
            bool take;
            if (tf) {
                double x = inside ? cpu_load_f64(tt, t->data, at) : pf;
                take = k == 0 || (max ? x >= bf : x <= bf);
                if (take) bf = x;
            } else {
                uint64_t x = inside ? cpu_load_bits64(tt, t->data, at) : vi;
                take =
                    k == 0 || (tsg ? (max ? (int64_t)x >= (int64_t)bi : (int64_t)x <= (int64_t)bi)
                                   : (max ? x >= bi : x <= bi));
                if (take) bi = x;
            }
            if (take) best_at = inside ? at : -1;
            for (int a = rank - 1; a >= 0; a--) {
                if (++w_idx[a] < win[a]) break;
                w_idx[a] = 0;
            }
        }
        if (best_at >= 0) {
            if (of)
                cpu_store_f64(ot, out->data, best_at,
                              cpu_load_f64(ot, out->data, best_at) +
                                  cpu_load_f64(ot, src->data, o));
            else {
                uint64_t acc = 0, add = 0;
                memcpy(&acc, (char *)out->data + (size_t)best_at * oes, oes);
                memcpy(&add, (const char *)src->data + (size_t)o * oes, oes);
                acc += add;
                memcpy((char *)out->data + (size_t)best_at * oes, &acc, oes);
            }
        }
        for (int a = rank - 1; a >= 0; a--) {
            if (++o_idx[a] < src->desc.shape[a]) break;
            o_idx[a] = 0;
        }
    }
    return CX_OK;
}

cx_code cpu_window(cx_op_id op, const cx_tensor *const *ins, const cx_params *ps, cx_tensor *out,
                   cx_status *st) {
    if (op == CX_OP_WINDOW_SCATTER_MAX || op == CX_OP_WINDOW_SCATTER_MIN) {
        if (window_scatter_f32_2d(op, ins[0], ins[1], ps, out)) return CX_OK;
        return window_scatter(op, ins[0], ins[1], ps, out, st);
    }
    const cx_tensor *in = ins[0];
    const cx_desc *d = &in->desc;
    int rank = d->rank;
    cx_dtype t = d->dtype;
    if (out->numel == 0) return CX_OK;
    if (window_f32_2d(op, in, ps, out)) return CX_OK;
    const int64_t *win = ps->p[CX_P_WINDOW].i, *str = ps->p[CX_P_STRIDES].i;
    const int64_t *dil = ps->p[CX_P_WINDOW_DILATIONS].i, *pad = ps->p[CX_P_PADDING].i;
    int64_t istr[CX_MAX_RANK], s = 1;
    for (int a = rank - 1; a >= 0; a--) {
        istr[a] = s;
        s *= d->shape[a];
    }
    bool fl = cx_dtype_is_float(t), sg = cx_dtype_is_signed(t);
    size_t es = cx_dtype_size(t);
    int64_t o_idx[CX_MAX_RANK] = {0};
    for (int64_t o = 0; o < out->numel; o++) {
        double af = identity_f(op);
        uint64_t ai = identity_i(op, t);
        /* the window positions j with o * stride + j * dilation - low inside the axis, lo[a] to
         * hi[a] (exclusive): positions in the padding contribute the identity, so only these
         * are walked, however large the window or the padding */
        int64_t lo[CX_MAX_RANK], hi[CX_MAX_RANK], w_idx[CX_MAX_RANK];
        bool empty = false;
        for (int a = 0; a < rank; a++) {
            window_span(o_idx[a], str[a], dil[a], pad[2 * a], d->shape[a], win[a], &lo[a], &hi[a]);
            if (lo[a] >= hi[a]) empty = true;
            w_idx[a] = lo[a];
        }
        while (!empty) {
            int64_t at = 0;
            for (int a = 0; a < rank; a++)
                at += (o_idx[a] * str[a] + w_idx[a] * dil[a] - pad[2 * a]) * istr[a];
            if (fl)
                af = fold_f(op, af, cpu_load_f64(t, in->data, at));
            else
                ai = fold_i(op, sg, ai, cpu_load_bits64(t, in->data, at));
            int a = rank - 1;
            for (; a >= 0; a--) {
                if (++w_idx[a] < hi[a]) break;
                w_idx[a] = lo[a];
            }
            if (a < 0) break;
        }
        if (fl)
            cpu_store_f64(t, out->data, o, af);
        else
            memcpy((char *)out->data + (size_t)o * es, &ai, es); /* the low bytes: wraps */
        for (int a = rank - 1; a >= 0; a--) {
            if (++o_idx[a] < out->desc.shape[a]) break;
            o_idx[a] = 0;
        }
    }
    return CX_OK;
}
