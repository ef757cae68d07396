/* The WINDOW kind: window_sum, window_product, window_max and window_min of any rank, as
 * Nx.BinaryBackend computes them: each output element folds the elements of its window (the
 * positions o * stride + j * dilation - low along each axis) into an accumulator that starts at
 * the fold's identity, which is also what padding contributes, so positions in the padding are
 * skipped. Floats fold in double and round once (max and min let NaN through, like max/2);
 * integers fold in int64, sums and products wrapping as uint64; u64 compares as unsigned. */
#include <math.h>
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
    double vf = v->is_int ? (double)v->i[0] : v->f;
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
    if (op == CX_OP_WINDOW_SCATTER_MAX || op == CX_OP_WINDOW_SCATTER_MIN)
        return window_scatter(op, ins[0], ins[1], ps, out, st);
    const cx_tensor *in = ins[0];
    const cx_desc *d = &in->desc;
    int rank = d->rank;
    cx_dtype t = d->dtype;
    if (out->numel == 0) return CX_OK;
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
            int64_t base = o_idx[a] * str[a] - pad[2 * a];
            int64_t first = base >= 0 ? 0 : (-base + dil[a] - 1) / dil[a];
            int64_t last = d->shape[a] - 1 - base < 0 ? -1 : (d->shape[a] - 1 - base) / dil[a];
            lo[a] = first;
            hi[a] = (last + 1 < win[a] ? last + 1 : win[a]);
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
