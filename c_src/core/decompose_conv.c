/* Conv2d, pooling and their gradients (the conv composites of ops.def): inference and
 * decompositions into primitives.
 *
 * Geometry. Every op works on 4-D tensors in one of two layouts: nchw, input {N, C, H, W} and
 * kernel {O, C/groups, KH, KW}, or nhwc, input {N, H, W, C} and kernel {KH, KW, C/groups, O}
 * (TensorFlow's and Axon's). Along each spatial axis, for an input of size H with padding lo and
 * hi, a kernel (or window) of size k, dilation d (1 for pools) and stride s: the padded input has
 * Hp = H + lo + hi elements, the dilated kernel spans e = (k - 1) d + 1 of them, the output has
 * (Hp - e) / s + 1, and output row r reads padded row r s + i d for kernel row i.
 *
 * Decompositions (every step is negotiated again on the device):
 *   conv2d              im2col: the KH*KW strided slices of the padded input stacked on a new
 *                       axis, then one dot with the kernel (groups are a batch axis of the dot).
 *   conv2d_grad_input   the transposed convolution: grad_output spread by the strides (interior
 *                       padding s - 1) and padded by e - 1 - lo below and as much as gives back
 *                       the input's size above, convolved at stride 1 and the same dilation with
 *                       the kernel flipped in space, its channels swapped within each group.
 *   conv2d_grad_kernel  the forward pass's im2col contracted with grad_output over the batch and
 *                       the output positions.
 *   pools               when the strides equal the window (the default), the padded input cut to
 *                       whole windows and reshaped so that each window has two axes of its own:
 *                       one reduction; otherwise the KH*KW strided slices on a last axis.
 *   pool gradients      every window position's values put back where they were read, with pad
 *                       (low i - lo, interior s - 1), and summed; max_pool2d_grad sends the
 *                       gradient to the first maximum of each window among its real elements
 *                       (argmax over the candidates, ties to the lowest position), like
 *                       Nx.window_scatter_max. */
#include <math.h>
#include <stdlib.h>

#include "conv_geom.h"
#include "decompose.h"

#define OPNAME     cx_op_table[op].name
#define MAX_SIZE   (INT64_C(1) << 48)
#define MAX_WINDOW 65536 /* kernel or window positions of the sliced decompositions */

enum { NCHW = 0, NHWC = 1 };

typedef struct {
    int layout;
    int64_t n, c, h, w;  /* the input */
    int64_t o, cg, k[2]; /* output channels, input channels per group, kernel or window size */
    int64_t groups;
    int64_t s[2], d[2], lo[2], hi[2];
    int64_t out[2]; /* output height and width */
} geom;

static const char *input_axes(int layout) {
    return layout == NHWC ? "N, H, W, C" : "N, C, H, W";
}

static const char *kernel_axes(int layout) {
    return layout == NHWC ? "KH, KW, C/groups, O" : "O, C/groups, KH, KW";
}

/* The axis of the height; the width follows it. */
static int h_axis(int layout) {
    return layout == NHWC ? 1 : 2;
}

/* ---- inference ------------------------------------------------------------------------------ */

static cx_code get_layout(cx_op_id op, cx_params *ps, int *layout, cx_status *st) {
    int64_t l = cx_param_has(ps, CX_P_LAYOUT) ? ps->p[CX_P_LAYOUT].i[0] : NCHW;
    if (l != NCHW && l != NHWC)
        return cx_fail(st, CX_EINVAL, "%s: expected layout to be 0 (:nchw) or 1 (:nhwc), got: %lld",
                       OPNAME, (long long)l);
    cx_param_put_int(ps, CX_P_LAYOUT, l);
    *layout = (int)l;
    return CX_OK;
}

/* A parameter of 2 integers in 1..2^48 (height, width); `dflt` when not given. */
static cx_code get_pair(cx_op_id op, cx_params *ps, cx_param_id id, const int64_t *dflt, int64_t *v,
                        cx_status *st) {
    if (cx_param_has(ps, id)) {
        const cx_param *p = &ps->p[id];
        bool ok = p->n == 2;
        for (int a = 0; ok && a < 2; a++) ok = p->i[a] >= 1 && p->i[a] <= MAX_SIZE;
        if (!ok)
            return cx_fail(st, CX_EINVAL,
                           "%s: expected %s to be 2 integers in 1..2^48 (height, width), got: %s",
                           OPNAME, cx_param_table[id].name,
                           cx_fmt_ints(p->i, p->n, (char[200]){0}, 200));
        dflt = p->i;
    }
    v[0] = dflt[0];
    v[1] = dflt[1];
    cx_param_put_ints(ps, id, v, 2);
    return CX_OK;
}

/* A shape argument (input_shape, kernel_shape) of 4 dimensions. */
static cx_code shape_arg(cx_op_id op, const cx_params *ps, cx_param_id id, const char *axes,
                         cx_desc *out, cx_status *st) {
    if (cx_require_param(op, ps, id, st)) return st->code;
    const cx_param *p = &ps->p[id];
    if (p->n != 4)
        return cx_fail(st, CX_EINVAL, "%s: expected %s to have 4 dimensions {%s}, got: %s", OPNAME,
                       cx_param_table[id].name, axes,
                       cx_fmt_shape(p->i, p->n, (char[200]){0}, 200));
    if (cx_check_shape(op, p->i, 4, st)) return st->code;
    out->rank = 4;
    for (int a = 0; a < 4; a++) out->shape[a] = p->i[a];
    return CX_OK;
}

static cx_code want_rank4(cx_op_id op, const cx_desc *d, const char *what, const char *axes,
                          cx_status *st) {
    if (d->rank != 4)
        return cx_fail(st, CX_EINVAL, "%s: expected %s of rank 4 {%s}, got shape %s", OPNAME, what,
                       axes, CX_SHAPE_STR(d));
    return CX_OK;
}

static void input_dims(const int64_t *x, geom *gm) {
    bool nhwc = gm->layout == NHWC;
    gm->n = x[0];
    gm->c = nhwc ? x[3] : x[1];
    gm->h = nhwc ? x[1] : x[2];
    gm->w = nhwc ? x[2] : x[3];
}

/* Padding, kernel span and output size from the sizes, strides and dilations in gm. `sliced`: the
 * decomposition takes one slice per window position, so their number is bounded. */
static cx_code finish_geom(cx_op_id op, cx_params *ps, geom *gm, const char *what, bool sliced,
                           cx_status *st) {
    int64_t in[2] = {gm->h, gm->w}, e[2];
    for (int a = 0; a < 2; a++) {
        if (gm->k[a] < 1)
            return cx_fail(st, CX_EINVAL,
                           "%s: expected a %s of non-zero height and width, got %lld x %lld",
                           OPNAME, what, (long long)gm->k[0], (long long)gm->k[1]);
        if (gm->k[a] > 1 && gm->d[a] > MAX_SIZE / (gm->k[a] - 1))
            return cx_fail(st, CX_EINVAL,
                           "%s: a %s of %lld x %lld with dilation %lld x %lld spans more than 2^48",
                           OPNAME, what, (long long)gm->k[0], (long long)gm->k[1],
                           (long long)gm->d[0], (long long)gm->d[1]);
        e[a] = (gm->k[a] - 1) * gm->d[a] + 1;
    }
    if (sliced &&
        (gm->k[0] > MAX_WINDOW || gm->k[1] > MAX_WINDOW || gm->k[0] * gm->k[1] > MAX_WINDOW))
        return cx_fail(st, CX_EINVAL,
                       "%s: a %s of %lld x %lld positions is more than the %d this decomposition "
                       "takes",
                       OPNAME, what, (long long)gm->k[0], (long long)gm->k[1], MAX_WINDOW);
    const cx_param *p = cx_param_get(ps, CX_P_PADDING);
    if (p && p->n == 4) {
        for (int k = 0; k < 4; k++)
            if (p->i[k] < -MAX_SIZE || p->i[k] > MAX_SIZE)
                return cx_fail(st, CX_EINVAL,
                               "%s: expected padding within -2^48..2^48, got: [{%lld, %lld}, "
                               "{%lld, %lld}]",
                               OPNAME, (long long)p->i[0], (long long)p->i[1], (long long)p->i[2],
                               (long long)p->i[3]);
        for (int a = 0; a < 2; a++) {
            gm->lo[a] = p->i[2 * a];
            gm->hi[a] = p->i[2 * a + 1];
        }
    } else if (!p || (p->n == 1 && (p->i[0] == 0 || p->i[0] == 1))) {
        bool same = p && p->i[0] == 1;
        for (int a = 0; a < 2; a++) {
            /* Nx's :same: the output has ceil(H / s) elements, the padding split low-first */
            int64_t outs = (in[a] + gm->s[a] - 1) / gm->s[a];
            int64_t total = same ? (outs - 1) * gm->s[a] + e[a] - in[a] : 0;
            if (total < 0) total = 0;
            gm->lo[a] = total / 2;
            gm->hi[a] = total - total / 2;
        }
    } else {
        return cx_fail(st, CX_EINVAL,
                       "%s: expected padding to be 0 (:valid), 1 (:same) or 4 integers (low and "
                       "high of the height, then of the width), got: %s",
                       OPNAME, cx_fmt_ints(p->i, p->n, (char[200]){0}, 200));
    }
    cx_param_put_ints(ps, CX_P_PADDING, (int64_t[]){gm->lo[0], gm->hi[0], gm->lo[1], gm->hi[1]}, 4);
    int64_t hp[2];
    for (int a = 0; a < 2; a++) hp[a] = in[a] + gm->lo[a] + gm->hi[a];
    if (hp[0] < e[0] || hp[1] < e[1])
        return cx_fail(st, CX_EINVAL,
                       "%s: a %s spanning %lld x %lld does not fit in the padded input of %lld x "
                       "%lld (%lld x %lld with padding [{%lld, %lld}, {%lld, %lld}])",
                       OPNAME, what, (long long)e[0], (long long)e[1], (long long)hp[0],
                       (long long)hp[1], (long long)in[0], (long long)in[1], (long long)gm->lo[0],
                       (long long)gm->hi[0], (long long)gm->lo[1], (long long)gm->hi[1]);
    for (int a = 0; a < 2; a++) gm->out[a] = (hp[a] - e[a]) / gm->s[a] + 1;
    return CX_OK;
}

/* The geometry of a convolution of an input of shape x with a kernel of shape kern (both in the
 * layout), from the options; normalises them in ps. */
static cx_code conv_geom(cx_op_id op, cx_params *ps, const cx_desc *x, const cx_desc *kern,
                         geom *gm, cx_status *st) {
    if (get_layout(op, ps, &gm->layout, st)) return st->code;
    bool nhwc = gm->layout == NHWC;
    input_dims(x->shape, gm);
    const int64_t *k = kern->shape;
    gm->o = nhwc ? k[3] : k[0];
    gm->cg = nhwc ? k[2] : k[1];
    gm->k[0] = nhwc ? k[0] : k[2];
    gm->k[1] = nhwc ? k[1] : k[3];
    static const int64_t ones[2] = {1, 1};
    if (get_pair(op, ps, CX_P_STRIDES, ones, gm->s, st) ||
        get_pair(op, ps, CX_P_KERNEL_DILATION, ones, gm->d, st))
        return st->code;
    int64_t groups =
        cx_param_has(ps, CX_P_FEATURE_GROUP_SIZE) ? ps->p[CX_P_FEATURE_GROUP_SIZE].i[0] : 1;
    if (groups < 1 || groups > (gm->c > 1 ? gm->c : 1) || gm->c % groups || gm->o % groups)
        return cx_fail(st, CX_EINVAL,
                       "%s: expected feature_group_size to be a positive divisor of the input's "
                       "channels (%lld) and of the kernel's output channels (%lld), got: %lld",
                       OPNAME, (long long)gm->c, (long long)gm->o, (long long)groups);
    cx_param_put_int(ps, CX_P_FEATURE_GROUP_SIZE, groups);
    gm->groups = groups;
    if (gm->cg * groups != gm->c)
        return cx_fail(st, CX_EINVAL,
                       "%s: expected the kernel's input channels (%lld) times feature_group_size "
                       "(%lld) to be the input's channels (%lld), got input %s and kernel %s (%s)",
                       OPNAME, (long long)gm->cg, (long long)groups, (long long)gm->c,
                       CX_SHAPE_STR(x), CX_SHAPE_STR(kern),
                       nhwc ? "layout :nhwc, kernel {KH, KW, C/groups, O}"
                            : "layout :nchw, kernel {O, C/groups, KH, KW}");
    return finish_geom(op, ps, gm, "kernel", true, st);
}

/* The geometry of a pool with the window parameter over an input of shape x. */
static cx_code pool_geom(cx_op_id op, cx_params *ps, const cx_desc *x, geom *gm, cx_status *st) {
    if (get_layout(op, ps, &gm->layout, st)) return st->code;
    input_dims(x->shape, gm);
    gm->o = gm->c;
    gm->cg = 1;
    gm->groups = 1;
    gm->d[0] = gm->d[1] = 1;
    if (cx_require_param(op, ps, CX_P_WINDOW, st)) return st->code;
    static const int64_t none[2] = {0, 0};
    if (get_pair(op, ps, CX_P_WINDOW, none, gm->k, st) ||
        get_pair(op, ps, CX_P_STRIDES, gm->k, gm->s, st))
        return st->code;
    bool tiled = gm->s[0] == gm->k[0] && gm->s[1] == gm->k[1];
    return finish_geom(op, ps, gm, "window", !tiled, st);
}

/* {N, ch, H, W} in the layout. */
static void layout_shape(const geom *gm, int64_t ch, int64_t h, int64_t w, cx_dtype t,
                         cx_desc *out) {
    out->dtype = t;
    out->rank = 4;
    int64_t *s = out->shape;
    s[0] = gm->n;
    if (gm->layout == NHWC) {
        s[1] = h;
        s[2] = w;
        s[3] = ch;
    } else {
        s[1] = ch;
        s[2] = h;
        s[3] = w;
    }
}

static void output_shape(const geom *gm, cx_dtype t, cx_desc *out) {
    layout_shape(gm, gm->o, gm->out[0], gm->out[1], t, out);
}

static cx_code check_grad_output(cx_op_id op, const cx_desc *gy, const geom *gm, const char *of,
                                 const cx_desc *shape_of, cx_status *st) {
    cx_desc want;
    output_shape(gm, gy->dtype, &want);
    if (!cx_desc_same_shape(gy, &want))
        return cx_fail(st, CX_EINVAL,
                       "%s: expected grad_output of shape %s (the output for %s %s with these "
                       "options), got: %s",
                       OPNAME, CX_SHAPE_STR(&want), of, CX_SHAPE_STR(shape_of), CX_SHAPE_STR(gy));
    return CX_OK;
}

static cx_code check_out(cx_op_id op, const cx_desc *out, cx_status *st) {
    return cx_check_shape(op, out->shape, out->rank, st);
}

/* conv2d(input, kernel) */
CX_INFER(cx_infer_conv2d) {
    if (cx_check_arity(op, n_in, 2, st)) return st->code;
    geom gm;
    if (get_layout(op, ps, &gm.layout, st)) return st->code;
    if (want_rank4(op, &in[0], "input", input_axes(gm.layout), st) ||
        want_rank4(op, &in[1], "kernel", kernel_axes(gm.layout), st) ||
        conv_geom(op, ps, &in[0], &in[1], &gm, st))
        return st->code;
    cx_dtype t = cx_dtype_to_float(cx_dtype_merge(in[0].dtype, in[1].dtype));
    output_shape(&gm, t, out);
    compute[0] = compute[1] = t;
    return check_out(op, out, st);
}

/* conv2d_grad_input(grad_output, kernel, input_shape) */
CX_INFER(cx_infer_conv2d_grad_input) {
    if (cx_check_arity(op, n_in, 2, st)) return st->code;
    geom gm;
    cx_desc x = {0};
    if (get_layout(op, ps, &gm.layout, st)) return st->code;
    if (want_rank4(op, &in[0], "grad_output", input_axes(gm.layout), st) ||
        want_rank4(op, &in[1], "kernel", kernel_axes(gm.layout), st) ||
        shape_arg(op, ps, CX_P_INPUT_SHAPE, input_axes(gm.layout), &x, st) ||
        conv_geom(op, ps, &x, &in[1], &gm, st) ||
        check_grad_output(op, &in[0], &gm, "input_shape", &x, st))
        return st->code;
    cx_dtype t = cx_dtype_to_float(cx_dtype_merge(in[0].dtype, in[1].dtype));
    layout_shape(&gm, gm.c, gm.h, gm.w, t, out);
    compute[0] = compute[1] = t;
    return check_out(op, out, st);
}

/* conv2d_grad_kernel(input, grad_output, kernel_shape) */
CX_INFER(cx_infer_conv2d_grad_kernel) {
    if (cx_check_arity(op, n_in, 2, st)) return st->code;
    geom gm;
    cx_desc k = {0};
    if (get_layout(op, ps, &gm.layout, st)) return st->code;
    if (want_rank4(op, &in[0], "input", input_axes(gm.layout), st) ||
        want_rank4(op, &in[1], "grad_output", input_axes(gm.layout), st) ||
        shape_arg(op, ps, CX_P_KERNEL_SHAPE, kernel_axes(gm.layout), &k, st) ||
        conv_geom(op, ps, &in[0], &k, &gm, st) ||
        check_grad_output(op, &in[1], &gm, "input", &in[0], st))
        return st->code;
    cx_dtype t = cx_dtype_to_float(cx_dtype_merge(in[0].dtype, in[1].dtype));
    *out = k;
    out->dtype = t;
    compute[0] = compute[1] = t;
    return check_out(op, out, st);
}

/* max_pool2d(input, window), avg_pool2d(input, window) */
CX_INFER(cx_infer_pool2d) {
    if (cx_check_arity(op, n_in, 1, st)) return st->code;
    geom gm;
    if (get_layout(op, ps, &gm.layout, st)) return st->code;
    if (want_rank4(op, &in[0], "input", input_axes(gm.layout), st) ||
        pool_geom(op, ps, &in[0], &gm, st))
        return st->code;
    cx_dtype t = op == CX_OP_MAX_POOL2D ? in[0].dtype : cx_dtype_to_float(in[0].dtype);
    output_shape(&gm, t, out);
    compute[0] = op == CX_OP_MAX_POOL2D ? in[0].dtype : t;
    return check_out(op, out, st);
}

/* max_pool2d_grad(input, grad_output, window) */
CX_INFER(cx_infer_max_pool2d_grad) {
    if (cx_check_arity(op, n_in, 2, st)) return st->code;
    geom gm;
    if (get_layout(op, ps, &gm.layout, st)) return st->code;
    if (want_rank4(op, &in[0], "input", input_axes(gm.layout), st) ||
        want_rank4(op, &in[1], "grad_output", input_axes(gm.layout), st) ||
        pool_geom(op, ps, &in[0], &gm, st) ||
        check_grad_output(op, &in[1], &gm, "input", &in[0], st))
        return st->code;
    cx_dtype t = cx_dtype_to_float(cx_dtype_merge(in[0].dtype, in[1].dtype));
    *out = in[0];
    out->dtype = t;
    compute[0] = in[0].dtype;
    compute[1] = t;
    return CX_OK;
}

/* avg_pool2d_grad(grad_output, input_shape, window) */
CX_INFER(cx_infer_avg_pool2d_grad) {
    if (cx_check_arity(op, n_in, 1, st)) return st->code;
    geom gm;
    cx_desc x = {0};
    if (get_layout(op, ps, &gm.layout, st)) return st->code;
    if (want_rank4(op, &in[0], "grad_output", input_axes(gm.layout), st) ||
        shape_arg(op, ps, CX_P_INPUT_SHAPE, input_axes(gm.layout), &x, st) ||
        pool_geom(op, ps, &x, &gm, st) || check_grad_output(op, &in[0], &gm, "input_shape", &x, st))
        return st->code;
    cx_dtype t = cx_dtype_to_float(in[0].dtype);
    *out = x;
    out->dtype = t;
    compute[0] = t;
    return CX_OK;
}

/* ---- decomposition helpers ------------------------------------------------------------------ */

/* The geometry again, from the parameters inference normalised (it cannot fail then). */
static bool conv_geom_of(cx_graph *g, const cx_params *ps, const cx_desc *x, const cx_desc *kern,
                         geom *gm) {
    cx_params p = *ps;
    cx_status st = {0};
    if (conv_geom(g->op, &p, x, kern, gm, &st) == CX_OK) return true;
    cx_g_fail(g, "%s", st.message);
    return false;
}

static bool pool_geom_of(cx_graph *g, const cx_params *ps, const cx_desc *x, geom *gm) {
    cx_params p = *ps;
    cx_status st = {0};
    if (pool_geom(g->op, &p, x, gm, &st) == CX_OK) return true;
    cx_g_fail(g, "%s", st.message);
    return false;
}

static cx_desc shape_desc(const cx_params *ps, cx_param_id id) {
    cx_desc d = {CX_F32, 4, {0}};
    for (int a = 0; a < 4; a++) d.shape[a] = ps->p[id].i[a];
    return d;
}

/* Drops v unless it is `keep` (an intermediate may be another value passed through). */
static void drop_unless(cx_graph *g, cx_val v, cx_val keep) {
    if (v != keep) cx_g_drop(g, v);
}

/* Pads the spatial axes (ha, ha + 1) of a 4-D value; x itself when there is nothing to do. */
static cx_val pad_hw(cx_graph *g, cx_val x, double value, int ha, const int64_t *lo,
                     const int64_t *hi, const int64_t *interior) {
    int64_t p[12] = {0};
    bool any = false;
    for (int a = 0; a < 2; a++) {
        p[3 * (ha + a)] = lo[a];
        p[3 * (ha + a) + 1] = hi[a];
        p[3 * (ha + a) + 2] = interior ? interior[a] : 0;
        any = any || lo[a] || hi[a] || p[3 * (ha + a) + 2];
    }
    return any ? cx_g_pad(g, x, value, p) : x;
}

/* Concatenates any number of values, CX_MAX_INPUTS at a time; v is overwritten. */
static cx_val concat_many(cx_graph *g, cx_val *v, int64_t n, int axis) {
    while (n > 1) {
        int64_t m = 0;
        for (int64_t k = 0; k < n; k += CX_MAX_INPUTS) {
            int count = n - k < CX_MAX_INPUTS ? (int)(n - k) : CX_MAX_INPUTS;
            cx_val r = v[k];
            if (count > 1) {
                r = cx_g_concatenate(g, v + k, count, axis);
                for (int j = 0; j < count; j++) cx_g_drop(g, v[k + j]);
            }
            v[m++] = r;
        }
        n = m;
    }
    return v[0];
}

/* The KH x KW strided slices of xp (4-D and padded, spatial axes ha and ha + 1) stacked on a new
 * axis inserted at `axis` (2 or 4): position i * KW + j holds xp[.., r s + i d, c s + j d] for
 * output row r and column c. */
static cx_val im2col(cx_graph *g, cx_val xp, int ha, int axis, const geom *gm) {
    cx_desc d = *cx_g_desc(g, xp);
    int64_t shape[5], start[5] = {0}, len[5], stride[5];
    for (int a = 0, b = 0; a < 5; a++) shape[a] = a == axis ? 1 : d.shape[b++];
    int h5 = ha + (axis <= ha);
    cx_val x5 = cx_g_reshape(g, xp, shape, 5);
    int64_t kk = gm->k[0] * gm->k[1];
    cx_val *parts = malloc(sizeof(cx_val) * (size_t)kk);
    if (!parts) return cx_g_fail(g, "out of host memory for %lld slices", (long long)kk);
    for (int a = 0; a < 5; a++) {
        len[a] = shape[a];
        stride[a] = 1;
    }
    for (int a = 0; a < 2; a++) {
        len[h5 + a] = (gm->out[a] - 1) * gm->s[a] + 1;
        stride[h5 + a] = gm->s[a];
    }
    for (int64_t i = 0; i < gm->k[0]; i++)
        for (int64_t j = 0; j < gm->k[1]; j++) {
            start[h5] = i * gm->d[0];
            start[h5 + 1] = j * gm->d[1];
            parts[i * gm->k[1] + j] = cx_g_slice(g, x5, start, len, stride);
        }
    cx_g_drop(g, x5);
    cx_val r = concat_many(g, parts, kk, axis);
    free(parts);
    return r;
}

/* The convolution of xp {N, C, Hp, Wp} (padded) with w {O, C/groups, KH, KW}, both of one float
 * type, at gm's strides and dilations: {N, OH, OW, O}. */
static cx_val conv_core(cx_graph *g, cx_val xp, cx_val w, const geom *gm) {
    int64_t n = cx_g_dim(g, xp, 0), c = cx_g_dim(g, xp, 1), o = cx_g_dim(g, w, 0);
    int64_t cg = cx_g_dim(g, w, 1), groups = gm->groups, kk = gm->k[0] * gm->k[1];
    int64_t oh = gm->out[0], ow = gm->out[1];
    cx_val cols = im2col(g, xp, 2, 2, gm); /* {N, C, KK, OH, OW} */
    cx_val y;
    if (groups == 1) {
        cx_val wr = cx_g_reshape(g, w, (int64_t[]){o, c, kk}, 3);
        y = cx_g_dot(g, cols, (int64_t[]){1, 2}, 2, NULL, 0, wr, (int64_t[]){1, 2}, 2, NULL, 0);
        cx_g_drop(g, wr);
    } else {
        cx_val c6 = cx_g_reshape(g, cols, (int64_t[]){n, groups, cg, kk, oh, ow}, 6);
        cx_g_drop(g, cols);
        cols = c6;
        cx_val wr = cx_g_reshape(g, w, (int64_t[]){groups, o / groups, cg, kk}, 4);
        /* {G, N, OH, OW, O/G} */
        cx_val yg = cx_g_dot(g, cols, (int64_t[]){2, 3}, 2, (int64_t[]){1}, 1, wr,
                             (int64_t[]){2, 3}, 2, (int64_t[]){0}, 1);
        cx_g_drop(g, wr);
        cx_val yt = cx_g_transpose(g, yg, (int64_t[]){1, 2, 3, 0, 4});
        cx_g_drop(g, yg);
        y = cx_g_reshape(g, yt, (int64_t[]){n, oh, ow, o}, 4);
        cx_g_drop(g, yt);
    }
    cx_g_drop(g, cols);
    return y;
}

static cx_val to_nchw(cx_graph *g, cx_val x, int layout) {
    return layout == NHWC ? cx_g_transpose(g, x, (int64_t[]){0, 3, 1, 2}) : x;
}

/* {N, H, W, C} to the layout. */
static cx_val from_nhwc(cx_graph *g, cx_val y, int layout) {
    if (layout == NHWC) return y;
    cx_val r = cx_g_transpose(g, y, (int64_t[]){0, 3, 1, 2});
    cx_g_drop(g, y);
    return r;
}

/* A kernel in the layout to {O, C/groups, KH, KW}. */
static cx_val kernel_to_oihw(cx_graph *g, cx_val k, int layout) {
    return layout == NHWC ? cx_g_transpose(g, k, (int64_t[]){3, 2, 0, 1}) : k;
}

static cx_val pad_input(cx_graph *g, cx_val x, double value, const geom *gm, int ha) {
    return pad_hw(g, x, value, ha, gm->lo, gm->hi, NULL);
}

/* ---- conv decompositions -------------------------------------------------------------------- */

cx_val cx_decompose_conv2d(cx_graph *g, const cx_val *in, int n_in, const cx_params *ps) {
    geom gm;
    cx_desc xd = *cx_g_desc(g, in[0]), kd = *cx_g_desc(g, in[1]);
    if (!conv_geom_of(g, ps, &xd, &kd, &gm)) return -1;
    cx_dtype t = cx_dtype_to_float(cx_dtype_merge(xd.dtype, kd.dtype));
    cx_val x = to_nchw(g, cx_g_cast(g, in[0], t), gm.layout);
    cx_val w = kernel_to_oihw(g, cx_g_cast(g, in[1], t), gm.layout);
    cx_val xp = pad_input(g, x, 0, &gm, 2);
    drop_unless(g, x, xp);
    cx_val y = conv_core(g, xp, w, &gm);
    cx_g_drop(g, xp);
    return from_nhwc(g, y, gm.layout);
}

cx_val cx_decompose_conv2d_grad_input(cx_graph *g, const cx_val *in, int n_in,
                                      const cx_params *ps) {
    geom gm;
    cx_desc gd = *cx_g_desc(g, in[0]), kd = *cx_g_desc(g, in[1]);
    cx_desc xd = shape_desc(ps, CX_P_INPUT_SHAPE);
    if (!conv_geom_of(g, ps, &xd, &kd, &gm)) return -1;
    cx_dtype t = cx_dtype_to_float(cx_dtype_merge(gd.dtype, kd.dtype));
    int64_t groups = gm.groups, og = gm.o / groups, cg = gm.cg, kh = gm.k[0], kw = gm.k[1];
    cx_val gy = to_nchw(g, cx_g_cast(g, in[0], t), gm.layout); /* {N, O, OH, OW} */
    cx_val w = kernel_to_oihw(g, cx_g_cast(g, in[1], t), gm.layout);
    /* the kernel of the transposed convolution: {C, O/G, KH, KW}, flipped in space */
    cx_val w5 = cx_g_reshape(g, w, (int64_t[]){groups, og, cg, kh, kw}, 5);
    cx_val w5t = cx_g_transpose(g, w5, (int64_t[]){0, 2, 1, 3, 4});
    cx_g_drop(g, w5);
    cx_val wt = cx_g_reshape(g, w5t, (int64_t[]){gm.c, og, kh, kw}, 4);
    cx_g_drop(g, w5t);
    if (kh > 1 || kw > 1) {
        cx_params rp = {0};
        cx_param_put_ints(&rp, CX_P_AXES, (int64_t[]){2, 3}, 2);
        cx_val r = cx_g_op(g, CX_OP_REVERSE, &wt, 1, &rp);
        cx_g_drop(g, wt);
        wt = r;
    }
    /* grad_output spread by the strides and padded so that a stride-1 convolution gives H x W */
    int64_t in_hw[2] = {gm.h, gm.w}, lo[2], hi[2], interior[2];
    for (int a = 0; a < 2; a++) {
        int64_t e = (gm.k[a] - 1) * gm.d[a] + 1;
        lo[a] = e - 1 - gm.lo[a];
        hi[a] = in_hw[a] + gm.lo[a] - 1 - (gm.out[a] - 1) * gm.s[a];
        interior[a] = gm.s[a] - 1;
    }
    cx_val z = pad_hw(g, gy, 0, 2, lo, hi, interior);
    drop_unless(g, gy, z);
    geom tg = gm;
    tg.s[0] = tg.s[1] = 1;
    tg.out[0] = gm.h;
    tg.out[1] = gm.w;
    cx_val y = conv_core(g, z, wt, &tg); /* {N, H, W, C} */
    cx_g_drop(g, z);
    cx_g_drop(g, wt);
    return from_nhwc(g, y, gm.layout);
}

cx_val cx_decompose_conv2d_grad_kernel(cx_graph *g, const cx_val *in, int n_in,
                                       const cx_params *ps) {
    geom gm;
    cx_desc xd = *cx_g_desc(g, in[0]), gd = *cx_g_desc(g, in[1]);
    cx_desc kd = shape_desc(ps, CX_P_KERNEL_SHAPE);
    if (!conv_geom_of(g, ps, &xd, &kd, &gm)) return -1;
    cx_dtype t = cx_dtype_to_float(cx_dtype_merge(xd.dtype, gd.dtype));
    int64_t groups = gm.groups, og = gm.o / groups, cg = gm.cg, kk = gm.k[0] * gm.k[1];
    int64_t n = gm.n, oh = gm.out[0], ow = gm.out[1];
    bool nhwc = gm.layout == NHWC;
    cx_val x = to_nchw(g, cx_g_cast(g, in[0], t), gm.layout);
    cx_val xp = pad_input(g, x, 0, &gm, 2);
    drop_unless(g, x, xp);
    cx_val cols = im2col(g, xp, 2, 2, &gm); /* {N, C, KK, OH, OW} */
    cx_g_drop(g, xp);
    cx_val gy = to_nchw(g, cx_g_cast(g, in[1], t), gm.layout); /* {N, O, OH, OW} */
    cx_val dk;
    if (groups == 1) {
        /* {C, KK, O} */
        cx_val d3 = cx_g_dot(g, cols, (int64_t[]){0, 3, 4}, 3, NULL, 0, gy, (int64_t[]){0, 2, 3}, 3,
                             NULL, 0);
        dk = cx_g_transpose(g, d3, nhwc ? (int64_t[]){1, 0, 2} : (int64_t[]){2, 0, 1});
        cx_g_drop(g, d3);
    } else {
        cx_val c6 = cx_g_reshape(g, cols, (int64_t[]){n, groups, cg, kk, oh, ow}, 6);
        cx_g_drop(g, cols);
        cols = c6;
        cx_val g5 = cx_g_reshape(g, gy, (int64_t[]){n, groups, og, oh, ow}, 5);
        drop_unless(g, gy, in[1]);
        gy = g5;
        /* {G, C/G, KK, O/G} */
        cx_val d4 = cx_g_dot(g, cols, (int64_t[]){0, 4, 5}, 3, (int64_t[]){1}, 1, gy,
                             (int64_t[]){0, 3, 4}, 3, (int64_t[]){1}, 1);
        /* nchw {G, O/G, C/G, KK}; nhwc {KK, C/G, G, O/G} */
        dk = cx_g_transpose(g, d4, nhwc ? (int64_t[]){2, 1, 0, 3} : (int64_t[]){0, 3, 1, 2});
        cx_g_drop(g, d4);
    }
    cx_g_drop(g, cols);
    drop_unless(g, gy, in[1]);
    return cx_g_reshape(g, dk, kd.shape, 4);
}

/* ---- pool decompositions -------------------------------------------------------------------- */

/* Whether some window reads the padding. */
static bool reads_padding(const geom *gm) {
    int64_t in_hw[2] = {gm->h, gm->w};
    for (int a = 0; a < 2; a++)
        if (gm->lo[a] > 0 || (gm->out[a] - 1) * gm->s[a] + gm->k[a] - gm->lo[a] > in_hw[a])
            return true;
    return false;
}

/* The lowest value of a type: the padding of maxima. */
static double lowest(cx_dtype t) {
    if (cx_dtype_is_float(t)) return -INFINITY;
    if (!cx_dtype_is_signed(t)) return 0;
    return -ldexp(1, cx_dtype_bits(t) - 1); /* exact in double for every width up to 64 */
}

static bool tiled(const geom *gm) {
    return gm->s[0] == gm->k[0] && gm->s[1] == gm->k[1];
}

/* Windows that tile the input: the shape with each window on two axes of its own, {N, C, OH, KH,
 * OW, KW} or {N, OH, KH, OW, KW, C}, and those two axes. */
static void split_shape(const geom *gm, int64_t *s6, int64_t *win) {
    int64_t oh = gm->out[0], ow = gm->out[1], kh = gm->k[0], kw = gm->k[1];
    if (gm->layout == NHWC) {
        int64_t s[6] = {gm->n, oh, kh, ow, kw, gm->c};
        memcpy(s6, s, sizeof s);
        win[0] = 2;
        win[1] = 4;
    } else {
        int64_t s[6] = {gm->n, gm->c, oh, kh, ow, kw};
        memcpy(s6, s, sizeof s);
        win[0] = 3;
        win[1] = 5;
    }
}

/* Tiled windows: x padded with `value` and cut to whole windows, in the split shape. */
static cx_val split_windows(cx_graph *g, cx_val x, double value, const geom *gm) {
    int64_t in_hw[2] = {gm->h, gm->w}, hi[2], s6[6], win[2];
    for (int a = 0; a < 2; a++) hi[a] = gm->out[a] * gm->k[a] - in_hw[a] - gm->lo[a];
    cx_val xp = pad_hw(g, x, value, h_axis(gm->layout), gm->lo, hi, NULL);
    split_shape(gm, s6, win);
    cx_val r = cx_g_reshape(g, xp, s6, 6);
    drop_unless(g, xp, x);
    return r;
}

/* The output shape followed by one more axis of size `last`. */
static void out_shape_plus(const geom *gm, int64_t last, int64_t *s5) {
    cx_desc o;
    output_shape(gm, CX_F32, &o);
    for (int a = 0; a < 4; a++) s5[a] = o.shape[a];
    s5[4] = last;
}

/* Every window as the last axis of the output's shape: {out..., KH*KW}, positions row-major. */
static cx_val window_cols(cx_graph *g, cx_val x, double value, const geom *gm) {
    if (!tiled(gm)) {
        cx_val xp = pad_input(g, x, value, gm, h_axis(gm->layout));
        cx_val cols = im2col(g, xp, h_axis(gm->layout), 4, gm);
        drop_unless(g, xp, x);
        return cols;
    }
    cx_val s = split_windows(g, x, value, gm);
    cx_val t = cx_g_transpose(
        g, s, gm->layout == NHWC ? (int64_t[]){0, 1, 3, 5, 2, 4} : (int64_t[]){0, 1, 2, 4, 3, 5});
    cx_g_drop(g, s);
    int64_t s5[5];
    out_shape_plus(gm, gm->k[0] * gm->k[1], s5);
    cx_val r = cx_g_reshape(g, t, s5, 5);
    cx_g_drop(g, t);
    return r;
}

/* A reduction over each window. */
static cx_val pool_reduce(cx_graph *g, cx_op_id red, cx_val x, double value, const geom *gm) {
    cx_val w;
    int64_t axes[2] = {4, 0};
    int n_axes = 1;
    if (tiled(gm)) {
        int64_t s6[6];
        w = split_windows(g, x, value, gm);
        split_shape(gm, s6, axes);
        n_axes = 2;
    } else {
        cx_val xp = pad_input(g, x, value, gm, h_axis(gm->layout));
        w = im2col(g, xp, h_axis(gm->layout), 4, gm);
        drop_unless(g, xp, x);
    }
    cx_val r = cx_g_reduce(g, red, w, axes, n_axes, false);
    cx_g_drop(g, w);
    return r;
}

/* The gradient for the input from per-position values: gcols {out..., KH*KW}, or when gcols < 0
 * the value q {out...} at every position. Each value goes back to the input element its window
 * position read (padding is dropped), and they are summed. */
static cx_val pool_scatter(cx_graph *g, cx_val gcols, cx_val q, const geom *gm) {
    int ha = h_axis(gm->layout);
    bool nhwc = gm->layout == NHWC;
    int64_t in_hw[2] = {gm->h, gm->w}, lo[2], hi[2];
    if (tiled(gm)) {
        int64_t s6[6], win[2];
        split_shape(gm, s6, win);
        cx_val s;
        if (gcols >= 0) {
            int64_t wl[6];
            out_shape_plus(gm, gm->k[0], wl);
            wl[5] = gm->k[1];
            cx_val r = cx_g_reshape(g, gcols, wl, 6);
            s = cx_g_transpose(
                g, r, nhwc ? (int64_t[]){0, 1, 4, 2, 5, 3} : (int64_t[]){0, 1, 2, 4, 3, 5});
            cx_g_drop(g, r);
        } else {
            s = cx_g_broadcast(g, q, s6, 6,
                               nhwc ? (int64_t[]){0, 1, 3, 5} : (int64_t[]){0, 1, 2, 4});
        }
        cx_desc pd;
        layout_shape(gm, gm->c, gm->out[0] * gm->k[0], gm->out[1] * gm->k[1], CX_F32, &pd);
        cx_val p = cx_g_reshape(g, s, pd.shape, 4);
        cx_g_drop(g, s);
        for (int a = 0; a < 2; a++) {
            lo[a] = -gm->lo[a];
            hi[a] = in_hw[a] + gm->lo[a] - gm->out[a] * gm->k[a];
        }
        cx_val r = pad_hw(g, p, 0, ha, lo, hi, NULL);
        drop_unless(g, p, r);
        return r;
    }
    int64_t o5[5], start[5] = {0}, interior[2] = {gm->s[0] - 1, gm->s[1] - 1};
    out_shape_plus(gm, 1, o5);
    cx_val acc = -1;
    for (int64_t i = 0; i < gm->k[0]; i++)
        for (int64_t j = 0; j < gm->k[1]; j++) {
            cx_val piece = q;
            if (gcols >= 0) {
                start[4] = i * gm->k[1] + j;
                cx_val sl = cx_g_slice(g, gcols, start, o5, NULL);
                piece = cx_g_reshape(g, sl, o5, 4);
                cx_g_drop(g, sl);
            }
            int64_t off[2] = {i, j};
            for (int a = 0; a < 2; a++) {
                lo[a] = off[a] - gm->lo[a];
                hi[a] = in_hw[a] - lo[a] - ((gm->out[a] - 1) * gm->s[a] + 1);
            }
            cx_val placed = pad_hw(g, piece, 0, ha, lo, hi, interior);
            if (piece != q) drop_unless(g, piece, placed);
            if (acc < 0) {
                acc = placed;
            } else {
                cx_val sum = cx_g_binary(g, CX_OP_ADD, acc, placed);
                drop_unless(g, acc, q);
                drop_unless(g, placed, q);
                acc = sum;
            }
        }
    return acc;
}

cx_val cx_decompose_max_pool2d(cx_graph *g, const cx_val *in, int n_in, const cx_params *ps) {
    geom gm;
    cx_desc xd = *cx_g_desc(g, in[0]);
    if (!pool_geom_of(g, ps, &xd, &gm)) return -1;
    return pool_reduce(g, CX_OP_REDUCE_MAX, in[0], lowest(xd.dtype), &gm);
}

cx_val cx_decompose_avg_pool2d(cx_graph *g, const cx_val *in, int n_in, const cx_params *ps) {
    geom gm;
    cx_desc xd = *cx_g_desc(g, in[0]);
    if (!pool_geom_of(g, ps, &xd, &gm)) return -1;
    cx_val x = cx_g_cast(g, in[0], cx_dtype_to_float(xd.dtype));
    cx_val s = pool_reduce(g, CX_OP_SUM, x, 0, &gm);
    drop_unless(g, x, in[0]);
    cx_val r = cx_g_binary_scalar(g, CX_OP_DIVIDE, s, (double)(gm.k[0] * gm.k[1]));
    cx_g_drop(g, s);
    return r;
}

cx_val cx_decompose_max_pool2d_grad(cx_graph *g, const cx_val *in, int n_in, const cx_params *ps) {
    geom gm;
    cx_desc xd = *cx_g_desc(g, in[0]), gd = *cx_g_desc(g, in[1]);
    if (!pool_geom_of(g, ps, &xd, &gm)) return -1;
    cx_dtype t = cx_dtype_to_float(cx_dtype_merge(xd.dtype, gd.dtype));
    int64_t kk = gm.k[0] * gm.k[1], s5[5];
    cx_val cols = window_cols(g, in[0], lowest(xd.dtype), &gm);
    /* the candidates: the elements equal to their window's maximum, padding excluded (it never
     * wins, not even a tie with an element of the lowest value) */
    int64_t axis = 4;
    cx_val m = cx_g_reduce(g, CX_OP_REDUCE_MAX, cols, &axis, 1, true);
    cx_val cand = cx_g_binary(g, CX_OP_EQUAL, cols, m);
    cx_g_drop(g, cols);
    cx_g_drop(g, m);
    if (reads_padding(&gm)) {
        /* which window positions are real elements: the same windows over ones */
        geom one = gm;
        one.n = one.c = one.o = 1;
        cx_desc od;
        layout_shape(&one, 1, gm.h, gm.w, CX_U8, &od);
        cx_val ones = cx_g_full(g, 1, CX_U8, od.shape, 4);
        cx_val valid = window_cols(g, ones, 0, &one);
        cx_g_drop(g, ones);
        cx_val c = cx_g_binary(g, CX_OP_LOGICAL_AND, cand, valid);
        cx_g_drop(g, cand);
        cx_g_drop(g, valid);
        cand = c;
    }
    /* the first candidate of each window (none when the maximum is NaN) */
    cx_params ap = {0};
    cx_param_put_int(&ap, CX_P_AXIS, 4);
    cx_param_put_int(&ap, CX_P_KEEP_AXIS, true);
    cx_param_put_int(&ap, CX_P_TIE_BREAK, 0);
    cx_val idx = cx_g_op(g, CX_OP_ARGMAX, &cand, 1, &ap);
    out_shape_plus(&gm, kk, s5);
    cx_val pos = cx_g_iota(g, s5, 5, 4, CX_S64);
    cx_val first = cx_g_binary(g, CX_OP_EQUAL, pos, idx);
    cx_g_drop(g, pos);
    cx_g_drop(g, idx);
    cx_val mask = cx_g_binary(g, CX_OP_LOGICAL_AND, first, cand);
    cx_g_drop(g, first);
    cx_g_drop(g, cand);
    out_shape_plus(&gm, 1, s5);
    cx_val gy = cx_g_cast(g, in[1], t);
    cx_val g5 = cx_g_reshape(g, gy, s5, 5);
    drop_unless(g, gy, in[1]);
    cx_val zero = cx_g_scalar(g, 0, t);
    cx_val gcols = cx_g_select(g, mask, g5, zero);
    cx_g_drop(g, mask);
    cx_g_drop(g, g5);
    cx_val r = pool_scatter(g, gcols, -1, &gm);
    cx_g_drop(g, gcols);
    return r;
}

cx_val cx_decompose_avg_pool2d_grad(cx_graph *g, const cx_val *in, int n_in, const cx_params *ps) {
    geom gm;
    cx_desc gd = *cx_g_desc(g, in[0]), xd = shape_desc(ps, CX_P_INPUT_SHAPE);
    if (!pool_geom_of(g, ps, &xd, &gm)) return -1;
    cx_val gy = cx_g_cast(g, in[0], cx_dtype_to_float(gd.dtype));
    cx_val q = cx_g_binary_scalar(g, CX_OP_DIVIDE, gy, (double)(gm.k[0] * gm.k[1]));
    drop_unless(g, gy, in[0]);
    cx_val r = pool_scatter(g, -1, q, &gm);
    drop_unless(g, q, r);
    return r;
}

/* ---- samples -------------------------------------------------------------------------------- */

/* Representative inputs: a {1, 2, 5, 5} input, a {3, 2, 3, 3} kernel, a 2 x 2 window. */
void cx_sample_conv(cx_op_id op, cx_dtype t, cx_desc *in, int *n_in, cx_params *ps) {
    cx_desc x = {t, 4, {1, 2, 5, 5}}, k = {t, 4, {3, 2, 3, 3}}, y = {t, 4, {1, 3, 3, 3}};
    cx_desc p = {t, 4, {1, 2, 2, 2}};
    static const int64_t window[2] = {2, 2};
    *n_in = 2;
    switch (op) {
    case CX_OP_CONV2D:
        in[0] = x;
        in[1] = k;
        break;
    case CX_OP_CONV2D_GRAD_INPUT:
        in[0] = y;
        in[1] = k;
        cx_param_put_ints(ps, CX_P_INPUT_SHAPE, x.shape, 4);
        break;
    case CX_OP_CONV2D_GRAD_KERNEL:
        in[0] = x;
        in[1] = y;
        cx_param_put_ints(ps, CX_P_KERNEL_SHAPE, k.shape, 4);
        break;
    case CX_OP_MAX_POOL2D_GRAD:
        in[0] = x;
        in[1] = p;
        cx_param_put_ints(ps, CX_P_WINDOW, window, 2);
        break;
    case CX_OP_AVG_POOL2D_GRAD:
        in[0] = p;
        *n_in = 1;
        cx_param_put_ints(ps, CX_P_INPUT_SHAPE, x.shape, 4);
        cx_param_put_ints(ps, CX_P_WINDOW, window, 2);
        break;
    default: /* max_pool2d, avg_pool2d */
        in[0] = x;
        *n_in = 1;
        cx_param_put_ints(ps, CX_P_WINDOW, window, 2);
        break;
    }
}

void cx_conv_dims_of(const cx_desc *x, const cx_desc *kern, const cx_params *ps, cx_conv_dims *v) {
    bool nhwc = cx_param_has(ps, CX_P_LAYOUT) && ps->p[CX_P_LAYOUT].i[0] == NHWC;
    const int64_t *xs = x->shape, *ks = kern->shape;
    const int64_t *s = ps->p[CX_P_STRIDES].i, *d = ps->p[CX_P_KERNEL_DILATION].i;
    const int64_t *pad = ps->p[CX_P_PADDING].i;
    v->nhwc = nhwc;
    v->n = xs[0];
    v->c = nhwc ? xs[3] : xs[1];
    v->h = nhwc ? xs[1] : xs[2];
    v->w = nhwc ? xs[2] : xs[3];
    v->groups = ps->p[CX_P_FEATURE_GROUP_SIZE].i[0];
    v->og = (nhwc ? ks[3] : ks[0]) / v->groups;
    v->cg = nhwc ? ks[2] : ks[1];
    v->kh = nhwc ? ks[0] : ks[2];
    v->kw = nhwc ? ks[1] : ks[3];
    v->s0 = s[0];
    v->s1 = s[1];
    v->d0 = d[0];
    v->d1 = d[1];
    v->lo0 = pad[0];
    v->hi0 = pad[1];
    v->lo1 = pad[2];
    v->hi1 = pad[3];
    v->oh = (v->h + pad[0] + pad[1] - (v->kh - 1) * v->d0 - 1) / v->s0 + 1;
    v->ow = (v->w + pad[2] + pad[3] - (v->kw - 1) * v->d1 - 1) / v->s1 + 1;
}
