/* The conv composites (conv2d, pools and their gradients) on the cpu device, decomposed into
 * primitives, against naive direct-loop references in double precision: strides, the three kinds
 * of padding (negative too), dilation, groups, both layouts, odd sizes, ties, empty tensors,
 * kernels of more positions than one concatenation takes. The gradients are also checked against
 * finite differences of conv2d itself. Then malformed calls, and the plan. */
#include <stdio.h>

#include "test_util.h"

enum { NCHW = 0, NHWC = 1, VALID = 0, SAME = 1, EXPLICIT = 2 };

/* ---- random data ---- */

static uint64_t rng = 1;

static double uniform(void) {
    rng = rng * 6364136223846793005ULL + 1442695040888963407ULL;
    return (double)(rng >> 11) / 9007199254740992.0;
}

/* Values in [-1, 1), or small integers 0..2 (many ties) when `ties`. */
static double *random_values(int64_t n, bool ties) {
    double *v = malloc(sizeof(double) * (size_t)(n ? n : 1));
    for (int64_t i = 0; i < n; i++) v[i] = ties ? (double)(int)(uniform() * 3) : 2 * uniform() - 1;
    return v;
}

/* Rounds every value to type t, so that the reference sees what the tensor holds. */
static void round_to(cx_dtype t, double *v, int64_t n) {
    uint64_t buf[2]; /* a c128 element is 16 bytes */
    for (int64_t i = 0; i < n; i++) {
        tu_store(t, buf, 0, v[i]);
        v[i] = tu_load(t, buf, 0);
    }
}

/* ---- layouts ---- */

/* A logical {a, b, c, d} = {N, C, H, W} array in the layout's order ({N, H, W, C} for nhwc). */
static double *input_in_layout(const double *v, const int64_t *s, int layout, int64_t *shape) {
    int64_t n = s[0] * s[1] * s[2] * s[3];
    double *r = malloc(sizeof(double) * (size_t)(n ? n : 1));
    for (int64_t a = 0; a < s[0]; a++)
        for (int64_t b = 0; b < s[1]; b++)
            for (int64_t c = 0; c < s[2]; c++)
                for (int64_t d = 0; d < s[3]; d++) {
                    int64_t src = ((a * s[1] + b) * s[2] + c) * s[3] + d;
                    int64_t dst = layout == NHWC ? ((a * s[2] + c) * s[3] + d) * s[1] + b : src;
                    r[dst] = v[src];
                }
    if (layout == NHWC) {
        int64_t t[4] = {s[0], s[2], s[3], s[1]};
        memcpy(shape, t, sizeof t);
    } else {
        memcpy(shape, s, 4 * sizeof(int64_t));
    }
    return r;
}

/* A logical {O, Cg, KH, KW} kernel in the layout's order ({KH, KW, Cg, O} for nhwc). */
static double *kernel_in_layout(const double *v, const int64_t *s, int layout, int64_t *shape) {
    int64_t n = s[0] * s[1] * s[2] * s[3];
    double *r = malloc(sizeof(double) * (size_t)(n ? n : 1));
    for (int64_t o = 0; o < s[0]; o++)
        for (int64_t c = 0; c < s[1]; c++)
            for (int64_t i = 0; i < s[2]; i++)
                for (int64_t j = 0; j < s[3]; j++) {
                    int64_t src = ((o * s[1] + c) * s[2] + i) * s[3] + j;
                    int64_t dst = layout == NHWC ? ((i * s[3] + j) * s[1] + c) * s[0] + o : src;
                    r[dst] = v[src];
                }
    if (layout == NHWC) {
        int64_t t[4] = {s[2], s[3], s[1], s[0]};
        memcpy(shape, t, sizeof t);
    } else {
        memcpy(shape, s, 4 * sizeof(int64_t));
    }
    return r;
}

static cx_tensor *input_tensor(cx_dtype t, const double *v, const int64_t *s, int layout) {
    int64_t shape[4];
    double *r = input_in_layout(v, s, layout, shape);
    cx_tensor *x = tu_tensor(t, 4, shape, r);
    free(r);
    return x;
}

static cx_tensor *kernel_tensor(cx_dtype t, const double *v, const int64_t *s, int layout) {
    int64_t shape[4];
    double *r = kernel_in_layout(v, s, layout, shape);
    cx_tensor *x = tu_tensor(t, 4, shape, r);
    free(r);
    return x;
}

static void expect_input(const cx_tensor *y, cx_dtype t, const double *want, const int64_t *s,
                         int layout, double tol) {
    int64_t shape[4];
    double *r = input_in_layout(want, s, layout, shape);
    tu_expect(y, t, 4, shape, r, tol);
    free(r);
}

static void expect_kernel(const cx_tensor *y, cx_dtype t, const double *want, const int64_t *s,
                          int layout, double tol) {
    int64_t shape[4];
    double *r = kernel_in_layout(want, s, layout, shape);
    tu_expect(y, t, 4, shape, r, tol);
    free(r);
}

/* ---- geometry, written independently of the decomposition ---- */

typedef struct {
    int64_t n, c, h, w; /* input */
    int64_t o, kh, kw;  /* conv kernel (o unused by pools) */
    int64_t s[2], d[2]; /* 0: the default */
    int pad;            /* VALID, SAME, EXPLICIT */
    int64_t pads[4];    /* EXPLICIT: low and high of the height, then of the width */
    int64_t groups;     /* 0: not given */
    int layout;
    cx_dtype t;
    bool ties;
} conv_case;

typedef struct {
    int64_t s[2], d[2], lo[2], hi[2], out[2], k[2];
} geo;

static geo geometry(const conv_case *cc, bool pool) {
    geo g;
    int64_t in[2] = {cc->h, cc->w};
    g.k[0] = cc->kh;
    g.k[1] = cc->kw;
    for (int a = 0; a < 2; a++) {
        g.s[a] = cc->s[a] ? cc->s[a] : (pool ? g.k[a] : 1);
        g.d[a] = cc->d[a] && !pool ? cc->d[a] : 1;
        int64_t e = (g.k[a] - 1) * g.d[a] + 1;
        if (cc->pad == EXPLICIT) {
            g.lo[a] = cc->pads[2 * a];
            g.hi[a] = cc->pads[2 * a + 1];
        } else if (cc->pad == SAME) {
            int64_t out = (in[a] + g.s[a] - 1) / g.s[a];
            int64_t total = (out - 1) * g.s[a] + e - in[a];
            if (total < 0) total = 0;
            g.lo[a] = total / 2;
            g.hi[a] = total - g.lo[a];
        } else {
            g.lo[a] = g.hi[a] = 0;
        }
        g.out[a] = (in[a] + g.lo[a] + g.hi[a] - e) / g.s[a] + 1;
    }
    return g;
}

static void put_options(const conv_case *cc, cx_params *ps, bool pool) {
    if (cc->s[0]) cx_param_put_ints(ps, CX_P_STRIDES, cc->s, 2);
    if (cc->d[0] && !pool) cx_param_put_ints(ps, CX_P_KERNEL_DILATION, cc->d, 2);
    if (cc->pad == EXPLICIT)
        cx_param_put_ints(ps, CX_P_PADDING, cc->pads, 4);
    else
        cx_param_put_ints(ps, CX_P_PADDING, (int64_t[]){cc->pad}, 1);
    if (cc->groups && !pool) cx_param_put_int(ps, CX_P_FEATURE_GROUP_SIZE, cc->groups);
    cx_param_put_int(ps, CX_P_LAYOUT, cc->layout);
    if (pool) cx_param_put_ints(ps, CX_P_WINDOW, (int64_t[]){cc->kh, cc->kw}, 2);
}

static int64_t idx4(const int64_t *s, int64_t a, int64_t b, int64_t c, int64_t d) {
    return ((a * s[1] + b) * s[2] + c) * s[3] + d;
}

/* ---- naive conv references (logical NCHW / OIHW, double) ---- */

/* Calls f(x index, kernel index, y index) for every product of the convolution. */
#define FOR_EACH_PRODUCT(cc, g, BODY)                                                              \
    do {                                                                                           \
        int64_t groups_ = (cc)->groups ? (cc)->groups : 1, cg_ = (cc)->c / groups_,                \
                og_ = (cc)->o / groups_;                                                           \
        int64_t xs_[4] = {(cc)->n, (cc)->c, (cc)->h, (cc)->w};                                     \
        int64_t ks_[4] = {(cc)->o, cg_, (cc)->kh, (cc)->kw};                                       \
        int64_t ys_[4] = {(cc)->n, (cc)->o, (g).out[0], (g).out[1]};                               \
        for (int64_t n_ = 0; n_ < xs_[0]; n_++)                                                    \
            for (int64_t o_ = 0; o_ < ks_[0]; o_++)                                                \
                for (int64_t r_ = 0; r_ < ys_[2]; r_++)                                            \
                    for (int64_t q_ = 0; q_ < ys_[3]; q_++)                                        \
                        for (int64_t c_ = 0; c_ < cg_; c_++)                                       \
                            for (int64_t i_ = 0; i_ < ks_[2]; i_++)                                \
                                for (int64_t j_ = 0; j_ < ks_[3]; j_++) {                          \
                                    int64_t h_ = r_ * (g).s[0] + i_ * (g).d[0] - (g).lo[0];        \
                                    int64_t w_ = q_ * (g).s[1] + j_ * (g).d[1] - (g).lo[1];        \
                                    if (h_ < 0 || h_ >= xs_[2] || w_ < 0 || w_ >= xs_[3])          \
                                        continue;                                                  \
                                    int64_t xi = idx4(xs_, n_, (o_ / og_) * cg_ + c_, h_, w_);     \
                                    int64_t ki = idx4(ks_, o_, c_, i_, j_);                        \
                                    int64_t yi = idx4(ys_, n_, o_, r_, q_);                        \
                                    BODY;                                                          \
                                }                                                                  \
    } while (0)

/* Tolerance for sums of products of values in [-1, 1], relative to 1 + |expected|. */
static double sum_tol(cx_dtype t, int64_t terms) {
    double eps = t == CX_F64 ? 0x1p-52 : t == CX_F32 ? 0x1p-23 : t == CX_F16 ? 0x1p-10 : 0x1p-7;
    return eps * (double)(terms + 2);
}

static cx_tensor *run(cx_op_id op, cx_tensor *a, cx_tensor *b, cx_params *ps) {
    cx_tensor *in[2] = {a, b};
    return tu_run_ok(op, in, b ? 2 : 1, ps);
}

/* sum(conv2d(x) * gy) computed by Cascade, in f64: the loss whose gradients are checked. */
static double loss(const conv_case *cc, const double *x, const double *k, const double *gy,
                   int64_t ny) {
    int64_t groups = cc->groups ? cc->groups : 1;
    cx_tensor *xt = input_tensor(CX_F64, x, (int64_t[]){cc->n, cc->c, cc->h, cc->w}, cc->layout);
    cx_tensor *kt =
        kernel_tensor(CX_F64, k, (int64_t[]){cc->o, cc->c / groups, cc->kh, cc->kw}, cc->layout);
    cx_params ps = {0};
    put_options(cc, &ps, false);
    cx_tensor *y = run(CX_OP_CONV2D, xt, kt, &ps);
    geo g = geometry(cc, false);
    int64_t ys[4] = {cc->n, cc->o, g.out[0], g.out[1]}, shape[4];
    double *gl = input_in_layout(gy, ys, cc->layout, shape);
    double l = 0;
    for (int64_t i = 0; i < ny; i++) l += tu_load(CX_F64, y->data, i) * gl[i];
    free(gl);
    tu_drop(y);
    tu_drop(xt);
    tu_drop(kt);
    return l;
}

/* Finite differences of the loss against the gradients, on a few elements (f64: conv2d is
 * linear in each argument, so the central difference is exact but for rounding). */
static void check_finite_differences(const conv_case *cc, double *x, double *k, const double *gy,
                                     int64_t nx, int64_t nk, int64_t ny, const double *dx,
                                     const double *dk) {
    const double h = 0.5;
    for (int rep = 0; rep < 4; rep++) {
        int64_t e = (int64_t)(uniform() * (double)nx);
        if (nx) {
            double keep = x[e];
            x[e] = keep + h;
            double up = loss(cc, x, k, gy, ny);
            x[e] = keep - h;
            double down = loss(cc, x, k, gy, ny);
            x[e] = keep;
            double fd = (up - down) / (2 * h);
            if (fabs(fd - dx[e]) > 1e-9 * (1 + fabs(dx[e])))
                fail_msg("d loss / d input[%lld]: finite difference %.17g, gradient %.17g",
                         (long long)e, fd, dx[e]);
        }
        e = (int64_t)(uniform() * (double)nk);
        if (nk) {
            double keep = k[e];
            k[e] = keep + h;
            double up = loss(cc, x, k, gy, ny);
            k[e] = keep - h;
            double down = loss(cc, x, k, gy, ny);
            k[e] = keep;
            double fd = (up - down) / (2 * h);
            if (fabs(fd - dk[e]) > 1e-9 * (1 + fabs(dk[e])))
                fail_msg("d loss / d kernel[%lld]: finite difference %.17g, gradient %.17g",
                         (long long)e, fd, dk[e]);
        }
    }
}

/* conv2d and both gradients of one case against the references. */
static void check_conv(const conv_case *cc, bool finite_differences) {
    int64_t groups = cc->groups ? cc->groups : 1, cg = cc->c / groups;
    geo g = geometry(cc, false);
    int64_t xs[4] = {cc->n, cc->c, cc->h, cc->w}, ks[4] = {cc->o, cg, cc->kh, cc->kw};
    int64_t ys[4] = {cc->n, cc->o, g.out[0], g.out[1]};
    int64_t nx = xs[0] * xs[1] * xs[2] * xs[3], nk = ks[0] * ks[1] * ks[2] * ks[3];
    int64_t ny = ys[0] * ys[1] * ys[2] * ys[3];
    double *x = random_values(nx, cc->ties), *k = random_values(nk, cc->ties);
    double *gy = random_values(ny, cc->ties);
    round_to(cc->t, x, nx);
    round_to(cc->t, k, nk);
    round_to(cc->t, gy, ny);
    double *y = calloc((size_t)(ny ? ny : 1), sizeof(double));
    double *dx = calloc((size_t)(nx ? nx : 1), sizeof(double));
    double *dk = calloc((size_t)(nk ? nk : 1), sizeof(double));
    FOR_EACH_PRODUCT(cc, g, {
        y[yi] += x[xi] * k[ki];
        dx[xi] += gy[yi] * k[ki];
        dk[ki] += gy[yi] * x[xi];
    });
    cx_tensor *xt = input_tensor(cc->t, x, xs, cc->layout);
    cx_tensor *kt = kernel_tensor(cc->t, k, ks, cc->layout);
    cx_tensor *gt = input_tensor(cc->t, gy, ys, cc->layout);
    int64_t shape[4];

    cx_params ps = {0};
    put_options(cc, &ps, false);
    cx_tensor *r = run(CX_OP_CONV2D, xt, kt, &ps);
    expect_input(r, cc->t, y, ys, cc->layout, sum_tol(cc->t, cg * cc->kh * cc->kw));
    tu_drop(r);

    cx_params pi = {0};
    put_options(cc, &pi, false);
    free(input_in_layout(x, xs, cc->layout, shape));
    cx_param_put_ints(&pi, CX_P_INPUT_SHAPE, shape, 4);
    r = run(CX_OP_CONV2D_GRAD_INPUT, gt, kt, &pi);
    expect_input(r, cc->t, dx, xs, cc->layout,
                 sum_tol(cc->t, (cc->o / groups) * cc->kh * cc->kw * 4));
    tu_drop(r);

    cx_params pk = {0};
    put_options(cc, &pk, false);
    free(kernel_in_layout(k, ks, cc->layout, shape));
    cx_param_put_ints(&pk, CX_P_KERNEL_SHAPE, shape, 4);
    r = run(CX_OP_CONV2D_GRAD_KERNEL, xt, gt, &pk);
    expect_kernel(r, cc->t, dk, ks, cc->layout, sum_tol(cc->t, cc->n * g.out[0] * g.out[1]));
    tu_drop(r);

    if (finite_differences && cc->t == CX_F64)
        check_finite_differences(cc, x, k, gy, nx, nk, ny, dx, dk);
    tu_drop(xt);
    tu_drop(kt);
    tu_drop(gt);
    free(x);
    free(k);
    free(gy);
    free(y);
    free(dx);
    free(dk);
}

/* ---- conv tests ---- */

static void test_conv2d_known_values(void **state) {
    (void)state;
    /* iota {1, 1, 3, 3} with a 2 x 2 kernel of ones: the sums of the 2 x 2 windows */
    cx_tensor *x = tu_tensor(CX_F32, 4, TU_SHAPE(1, 1, 3, 3), TU_VALUES(0, 1, 2, 3, 4, 5, 6, 7, 8));
    cx_tensor *k = tu_tensor(CX_F32, 4, TU_SHAPE(1, 1, 2, 2), TU_VALUES(1, 1, 1, 1));
    cx_params ps = {0};
    cx_tensor *y = run(CX_OP_CONV2D, x, k, &ps);
    tu_expect(y, CX_F32, 4, TU_SHAPE(1, 1, 2, 2), TU_VALUES(8, 12, 20, 24), 0);
    tu_drop(y);
    /* same padding, stride 2: rows and columns -1..1 and 1..3 (zero outside) */
    cx_params p2 = {0};
    cx_param_put_ints(&p2, CX_P_PADDING, TU_SHAPE(1), 1);
    cx_param_put_ints(&p2, CX_P_STRIDES, TU_SHAPE(2, 2), 2);
    cx_tensor *k3 =
        tu_tensor(CX_F32, 4, TU_SHAPE(1, 1, 3, 3), TU_VALUES(1, 1, 1, 1, 1, 1, 1, 1, 1));
    y = run(CX_OP_CONV2D, x, k3, &p2);
    tu_expect(y, CX_F32, 4, TU_SHAPE(1, 1, 2, 2), TU_VALUES(8, 12, 20, 24), 0);
    tu_drop(y);
    /* integers in, f32 out; f64 kernel gives f64 */
    cx_tensor *xi =
        tu_tensor(CX_S64, 4, TU_SHAPE(1, 1, 3, 3), TU_VALUES(0, 1, 2, 3, 4, 5, 6, 7, 8));
    cx_tensor *ki = tu_tensor(CX_U8, 4, TU_SHAPE(1, 1, 2, 2), TU_VALUES(1, 1, 1, 1));
    cx_params p3 = {0};
    y = run(CX_OP_CONV2D, xi, ki, &p3);
    tu_expect(y, CX_F32, 4, TU_SHAPE(1, 1, 2, 2), TU_VALUES(8, 12, 20, 24), 0);
    tu_drop(y);
    cx_tensor *kd = tu_tensor(CX_F64, 4, TU_SHAPE(1, 1, 2, 2), TU_VALUES(1, 1, 1, 1));
    cx_params p4 = {0};
    y = run(CX_OP_CONV2D, x, kd, &p4);
    tu_expect(y, CX_F64, 4, TU_SHAPE(1, 1, 2, 2), TU_VALUES(8, 12, 20, 24), 0);
    tu_drop(y);
    tu_drop(kd);
    tu_drop(xi);
    tu_drop(ki);
    tu_drop(k3);
    tu_drop(x);
    tu_drop(k);
}

/* n, c, h, w, o, kh, kw, strides, dilation, padding, pads, groups, layout, type, ties */
static const conv_case conv_cases[] = {
    {1, 1, 5, 5, 1, 3, 3, {0, 0}, {0, 0}, VALID, {0}, 0, NCHW, CX_F32, false},
    {2, 3, 7, 6, 4, 3, 2, {2, 1}, {0, 0}, VALID, {0}, 0, NCHW, CX_F32, false},
    {2, 3, 7, 6, 4, 3, 2, {2, 1}, {0, 0}, VALID, {0}, 0, NHWC, CX_F32, false},
    {1, 2, 9, 8, 3, 3, 3, {2, 3}, {0, 0}, SAME, {0}, 0, NCHW, CX_F32, false},
    {1, 2, 9, 8, 3, 3, 3, {2, 3}, {0, 0}, SAME, {0}, 0, NHWC, CX_F64, false},
    {2, 2, 6, 7, 2, 2, 3, {1, 2}, {0, 0}, SAME, {0}, 0, NCHW, CX_F64, false},
    {1, 3, 8, 9, 2, 3, 2, {1, 1}, {2, 3}, VALID, {0}, 0, NCHW, CX_F32, false},
    {1, 3, 8, 9, 2, 3, 2, {2, 1}, {2, 3}, SAME, {0}, 0, NHWC, CX_F32, false},
    {2, 2, 5, 6, 3, 3, 3, {1, 2}, {0, 0}, EXPLICIT, {1, 2, 0, 3}, 0, NCHW, CX_F64, false},
    {1, 2, 6, 6, 2, 2, 2, {2, 2}, {1, 2}, EXPLICIT, {-1, 1, 2, -2}, 0, NHWC, CX_F64, false},
    {2, 4, 6, 5, 6, 3, 3, {1, 1}, {0, 0}, SAME, {0}, 2, NCHW, CX_F32, false},
    {2, 6, 7, 5, 3, 3, 2, {2, 1}, {1, 2}, EXPLICIT, {2, 0, 1, 1}, 3, NHWC, CX_F64, false},
    {1, 4, 5, 5, 4, 3, 3, {1, 1}, {0, 0}, SAME, {0}, 4, NCHW, CX_F32, false}, /* depthwise */
    {1, 4, 5, 5, 8, 2, 2, {1, 1}, {0, 0}, VALID, {0}, 4, NHWC, CX_F32, false},
    {3, 1, 1, 1, 2, 1, 1, {0, 0}, {0, 0}, VALID, {0}, 0, NCHW, CX_F32, false}, /* 1 x 1 */
    {1, 2, 4, 4, 1, 1, 1, {3, 3}, {0, 0}, VALID, {0}, 0, NCHW, CX_F64, false},
    {1, 2, 5, 4, 2, 4, 4, {0, 0}, {0, 0}, SAME, {0}, 0, NCHW, CX_F16, true},
    {1, 2, 5, 4, 2, 2, 3, {1, 1}, {0, 0}, VALID, {0}, 0, NHWC, CX_BF16, true},
};

static void test_conv2d_against_reference(void **state) {
    (void)state;
    for (size_t k = 0; k < sizeof conv_cases / sizeof conv_cases[0]; k++) {
        rng = 1000 + k;
        check_conv(&conv_cases[k], true);
    }
}

/* 17 x 17 = 289 kernel positions: the im2col concatenates in rounds of 256. */
static void test_conv2d_many_positions(void **state) {
    (void)state;
    rng = 7;
    conv_case big = {1, 2, 18, 17, 2, 17, 17, {0, 0}, {0, 0}, VALID, {0}, 0, NCHW, CX_F64, false};
    check_conv(&big, false);
    conv_case big2 = {1, 1, 17, 19, 1, 17, 17, {1, 1}, {0, 0}, SAME, {0}, 0, NHWC, CX_F32, false};
    check_conv(&big2, false);
}

static void test_conv2d_empty(void **state) {
    (void)state;
    /* no input channels: zeros */
    cx_tensor *x = tu_tensor(CX_F32, 4, TU_SHAPE(1, 0, 3, 3), NULL);
    cx_tensor *k = tu_tensor(CX_F32, 4, TU_SHAPE(2, 0, 2, 2), NULL);
    cx_params ps = {0};
    cx_tensor *y = run(CX_OP_CONV2D, x, k, &ps);
    tu_expect(y, CX_F32, 4, TU_SHAPE(1, 2, 2, 2), TU_VALUES(0, 0, 0, 0, 0, 0, 0, 0), 0);
    tu_drop(y);
    tu_drop(x);
    tu_drop(k);
    /* empty batch */
    x = tu_tensor(CX_F32, 4, TU_SHAPE(0, 1, 3, 3), NULL);
    k = tu_tensor(CX_F32, 4, TU_SHAPE(2, 1, 2, 2), TU_VALUES(1, 2, 3, 4, 5, 6, 7, 8));
    cx_params p2 = {0};
    y = run(CX_OP_CONV2D, x, k, &p2);
    tu_expect(y, CX_F32, 4, TU_SHAPE(0, 2, 2, 2), NULL, 0);
    tu_drop(y);
    /* the kernel's gradient from an empty batch: zeros */
    cx_tensor *gy = tu_tensor(CX_F32, 4, TU_SHAPE(0, 2, 2, 2), NULL);
    cx_params p3 = {0};
    cx_param_put_ints(&p3, CX_P_KERNEL_SHAPE, TU_SHAPE(2, 1, 2, 2), 4);
    y = run(CX_OP_CONV2D_GRAD_KERNEL, x, gy, &p3);
    tu_expect(y, CX_F32, 4, TU_SHAPE(2, 1, 2, 2), TU_VALUES(0, 0, 0, 0, 0, 0, 0, 0), 0);
    tu_drop(y);
    tu_drop(gy);
    tu_drop(x);
    tu_drop(k);
}

/* ---- pools ---- */

static double lowest(cx_dtype t) {
    return t == CX_U8 ? 0 : t == CX_S32 ? (double)INT32_MIN : t == CX_S64 ? -0x1p63 : -INFINITY;
}

static void check_pools(const conv_case *cc) {
    geo g = geometry(cc, true);
    int64_t xs[4] = {cc->n, cc->c, cc->h, cc->w}, ys[4] = {cc->n, cc->c, g.out[0], g.out[1]};
    int64_t nx = xs[0] * xs[1] * xs[2] * xs[3], ny = ys[0] * ys[1] * ys[2] * ys[3];
    double *x = random_values(nx, cc->ties), *gy = random_values(ny, false);
    bool is_int = cc->t == CX_U8 || cc->t == CX_S32 || cc->t == CX_S64;
    cx_dtype ft = is_int ? CX_F32 : cc->t;
    if (is_int)
        for (int64_t i = 0; i < nx; i++)
            x[i] = (double)(int)(x[i] * 50 + (cc->t == CX_U8 ? 50 : 0));
    round_to(cc->t, x, nx);
    round_to(ft, gy, ny);
    double *mx = calloc((size_t)(ny ? ny : 1), sizeof(double));
    double *av = calloc((size_t)(ny ? ny : 1), sizeof(double));
    double *dmx = calloc((size_t)(nx ? nx : 1), sizeof(double));
    double *dav = calloc((size_t)(nx ? nx : 1), sizeof(double));
    double area = (double)(cc->kh * cc->kw);
    for (int64_t n = 0; n < ys[0]; n++)
        for (int64_t c = 0; c < ys[1]; c++)
            for (int64_t r = 0; r < ys[2]; r++)
                for (int64_t q = 0; q < ys[3]; q++) {
                    /* the maximum over the padded window; the gradient's target, the first
                     * maximum among the real elements */
                    int64_t yi = idx4(ys, n, c, r, q), best_at = -1;
                    double best = lowest(cc->t), sum = 0;
                    for (int64_t i = 0; i < cc->kh; i++)
                        for (int64_t j = 0; j < cc->kw; j++) {
                            int64_t h = r * g.s[0] + i - g.lo[0], w = q * g.s[1] + j - g.lo[1];
                            bool real = h >= 0 && h < cc->h && w >= 0 && w < cc->w;
                            int64_t xi = real ? idx4(xs, n, c, h, w) : -2;
                            double v = real ? x[xi] : lowest(cc->t);
                            if (real) {
                                sum += v;
                                dav[xi] += gy[yi] / area;
                            }
                            if (real && (best_at == -1 || v > best)) {
                                best = v;
                                best_at = xi;
                            }
                        }
                    mx[yi] = best;
                    av[yi] = sum / area;
                    if (best_at >= 0) dmx[best_at] += gy[yi];
                }
    cx_tensor *xt = input_tensor(cc->t, x, xs, cc->layout);
    cx_tensor *gt = input_tensor(ft, gy, ys, cc->layout);
    double tol = sum_tol(ft, cc->kh * cc->kw + 2);
    int64_t shape[4];
    free(input_in_layout(x, xs, cc->layout, shape));

    cx_params p1 = {0};
    put_options(cc, &p1, true);
    cx_tensor *r = run(CX_OP_MAX_POOL2D, xt, NULL, &p1);
    expect_input(r, cc->t, mx, ys, cc->layout, 0);
    tu_drop(r);

    cx_params p2 = {0};
    put_options(cc, &p2, true);
    r = run(CX_OP_AVG_POOL2D, xt, NULL, &p2);
    expect_input(r, ft, av, ys, cc->layout, tol);
    tu_drop(r);

    cx_params p3 = {0};
    put_options(cc, &p3, true);
    r = run(CX_OP_MAX_POOL2D_GRAD, xt, gt, &p3);
    expect_input(r, ft, dmx, xs, cc->layout, tol);
    tu_drop(r);

    cx_params p4 = {0};
    put_options(cc, &p4, true);
    cx_param_put_ints(&p4, CX_P_INPUT_SHAPE, shape, 4);
    r = run(CX_OP_AVG_POOL2D_GRAD, gt, NULL, &p4);
    expect_input(r, ft, dav, xs, cc->layout, tol);
    tu_drop(r);

    tu_drop(xt);
    tu_drop(gt);
    free(x);
    free(gy);
    free(mx);
    free(av);
    free(dmx);
    free(dav);
}

/* n, c, h, w, -, kh, kw, strides (0: the window), -, padding, pads, -, layout, type, ties */
static const conv_case pool_cases[] = {
    {1, 1, 4, 4, 0, 2, 2, {0, 0}, {0, 0}, VALID, {0}, 0, NCHW, CX_F32, false},
    {2, 3, 5, 7, 0, 2, 3, {0, 0}, {0, 0}, VALID, {0}, 0, NHWC, CX_F32, false}, /* cut edges */
    {2, 3, 5, 7, 0, 2, 3, {0, 0}, {0, 0}, SAME, {0}, 0, NCHW, CX_F64, false},
    {1, 2, 6, 6, 0, 2, 2, {0, 0}, {0, 0}, EXPLICIT, {1, 1, 0, 2}, 0, NHWC, CX_F32, false},
    {1, 2, 7, 6, 0, 3, 3, {2, 2}, {0, 0}, VALID, {0}, 0, NCHW, CX_F32, false}, /* overlapping */
    {1, 2, 7, 6, 0, 3, 2, {1, 2}, {0, 0}, SAME, {0}, 0, NHWC, CX_F64, false},
    {2, 1, 6, 5, 0, 3, 3, {1, 1}, {0, 0}, EXPLICIT, {2, 1, 0, 2}, 0, NCHW, CX_F32, false},
    {1, 2, 6, 6, 0, 2, 2, {3, 3}, {0, 0}, VALID, {0}, 0, NCHW, CX_F32, false}, /* gaps */
    {1, 2, 6, 7, 0, 3, 3, {2, 2}, {0, 0}, EXPLICIT, {-1, 0, 1, -1}, 0, NHWC, CX_F64, false},
    {2, 2, 6, 6, 0, 2, 2, {0, 0}, {0, 0}, VALID, {0}, 0, NCHW, CX_F32, true}, /* ties, tiled */
    {2, 2, 6, 6, 0, 3, 3, {1, 1}, {0, 0}, SAME, {0}, 0, NHWC, CX_F32, true},  /* ties, sliced */
    {1, 2, 5, 5, 0, 2, 2, {1, 1}, {0, 0}, SAME, {0}, 0, NCHW, CX_S32, true},
    {1, 2, 6, 4, 0, 3, 2, {0, 0}, {0, 0}, SAME, {0}, 0, NHWC, CX_U8, false},
    {1, 1, 5, 5, 0, 3, 3, {1, 1}, {0, 0}, SAME, {0}, 0, NCHW, CX_S64, false},
    {1, 3, 5, 5, 0, 2, 2, {1, 1}, {0, 0}, VALID, {0}, 0, NCHW, CX_F16, false},
    {1, 1, 3, 3, 0, 1, 1, {0, 0}, {0, 0}, VALID, {0}, 0, NCHW, CX_BF16, false},
    {1, 1, 20, 20, 0, 17, 16, {1, 2}, {0, 0}, VALID, {0}, 0, NCHW, CX_F64, false}, /* 272 */
};

static void test_pools_against_reference(void **state) {
    (void)state;
    for (size_t k = 0; k < sizeof pool_cases / sizeof pool_cases[0]; k++) {
        rng = 2000 + k;
        check_pools(&pool_cases[k]);
    }
}

static void test_pools_known_values(void **state) {
    (void)state;
    double v[16];
    for (int i = 0; i < 16; i++) v[i] = i;
    cx_tensor *x = tu_tensor(CX_S64, 4, TU_SHAPE(1, 1, 4, 4), v);
    cx_params ps = {0};
    cx_param_put_ints(&ps, CX_P_WINDOW, TU_SHAPE(2, 2), 2);
    cx_tensor *y = run(CX_OP_MAX_POOL2D, x, NULL, &ps);
    tu_expect(y, CX_S64, 4, TU_SHAPE(1, 1, 2, 2), TU_VALUES(5, 7, 13, 15), 0);
    tu_drop(y);
    cx_params p2 = {0};
    cx_param_put_ints(&p2, CX_P_WINDOW, TU_SHAPE(2, 2), 2);
    y = run(CX_OP_AVG_POOL2D, x, NULL, &p2);
    tu_expect(y, CX_F32, 4, TU_SHAPE(1, 1, 2, 2), TU_VALUES(2.5, 4.5, 10.5, 12.5), 0);
    tu_drop(y);
    /* same padding counts the padding in the mean (as Axon): the corner window {0, 1, 4, 5} of
     * a 3 x 3 window with stride 2 has 5 zeros of padding */
    cx_params p3 = {0};
    cx_param_put_ints(&p3, CX_P_WINDOW, TU_SHAPE(3, 3), 2);
    cx_param_put_ints(&p3, CX_P_STRIDES, TU_SHAPE(2, 2), 2);
    cx_param_put_ints(&p3, CX_P_PADDING, TU_SHAPE(1), 1);
    y = run(CX_OP_AVG_POOL2D, x, NULL, &p3);
    /* 4 / 2 = 2 outputs per axis, padding total 1: low 0, high 1 */
    tu_expect(y, CX_F32, 4, TU_SHAPE(1, 1, 2, 2),
              TU_VALUES((0 + 1 + 2 + 4 + 5 + 6 + 8 + 9 + 10) / 9.0, (2 + 3 + 6 + 7 + 10 + 11) / 9.0,
                        (8 + 9 + 10 + 12 + 13 + 14) / 9.0, (10 + 11 + 14 + 15) / 9.0),
              1e-6);
    tu_drop(y);
    /* ties go to the first: all equal */
    cx_tensor *z = tu_tensor(CX_F32, 4, TU_SHAPE(1, 1, 2, 2), TU_VALUES(3, 3, 3, 3));
    cx_tensor *g = tu_tensor(CX_F32, 4, TU_SHAPE(1, 1, 1, 1), TU_VALUES(5));
    cx_params p4 = {0};
    cx_param_put_ints(&p4, CX_P_WINDOW, TU_SHAPE(2, 2), 2);
    y = run(CX_OP_MAX_POOL2D_GRAD, z, g, &p4);
    tu_expect(y, CX_F32, 4, TU_SHAPE(1, 1, 2, 2), TU_VALUES(5, 0, 0, 0), 0);
    tu_drop(y);
    tu_drop(z);
    tu_drop(g);
    /* padding never takes the gradient, not even in a tie with the lowest value: u8 zeros and
     * f32 -infinity below one row of padding */
    cx_tensor *u = tu_tensor(CX_U8, 4, TU_SHAPE(1, 1, 2, 1), TU_VALUES(0, 5));
    cx_tensor *f = tu_tensor(CX_F32, 4, TU_SHAPE(1, 1, 2, 1), TU_VALUES(-INFINITY, 5));
    g = tu_tensor(CX_F32, 4, TU_SHAPE(1, 1, 2, 1), TU_VALUES(7, 9));
    for (int k = 0; k < 2; k++) {
        cx_params p5 = {0};
        cx_param_put_ints(&p5, CX_P_WINDOW, TU_SHAPE(2, 1), 2);
        cx_param_put_ints(&p5, CX_P_STRIDES, TU_SHAPE(1, 1), 2);
        cx_param_put_ints(&p5, CX_P_PADDING, TU_SHAPE(1, 0, 0, 0), 4);
        y = run(CX_OP_MAX_POOL2D_GRAD, k ? f : u, g, &p5);
        tu_expect(y, CX_F32, 4, TU_SHAPE(1, 1, 2, 1), TU_VALUES(7, 9), 0);
        tu_drop(y);
    }
    /* a window wholly in the padding: the lowest value, and its gradient is dropped */
    cx_params p6 = {0};
    cx_param_put_ints(&p6, CX_P_WINDOW, TU_SHAPE(1, 1), 2);
    cx_param_put_ints(&p6, CX_P_PADDING, TU_SHAPE(1, 0, 0, 0), 4);
    y = run(CX_OP_MAX_POOL2D, f, NULL, &p6);
    tu_expect(y, CX_F32, 4, TU_SHAPE(1, 1, 3, 1), TU_VALUES(-INFINITY, -INFINITY, 5), 0);
    tu_drop(y);
    cx_params p7 = {0};
    cx_param_put_ints(&p7, CX_P_WINDOW, TU_SHAPE(1, 1), 2);
    cx_param_put_ints(&p7, CX_P_PADDING, TU_SHAPE(1, 0, 0, 0), 4);
    cx_tensor *g3 = tu_tensor(CX_F32, 4, TU_SHAPE(1, 1, 3, 1), TU_VALUES(1, 2, 3));
    y = run(CX_OP_MAX_POOL2D_GRAD, u, g3, &p7);
    tu_expect(y, CX_F32, 4, TU_SHAPE(1, 1, 2, 1), TU_VALUES(2, 3), 0);
    tu_drop(y);
    /* a window whose maximum is NaN passes no gradient */
    cx_tensor *nan = tu_tensor(CX_F32, 4, TU_SHAPE(1, 1, 2, 2), TU_VALUES(1, NAN, 2, 3));
    cx_tensor *g1 = tu_tensor(CX_F32, 4, TU_SHAPE(1, 1, 1, 1), TU_VALUES(4));
    cx_params p8 = {0};
    cx_param_put_ints(&p8, CX_P_WINDOW, TU_SHAPE(2, 2), 2);
    y = run(CX_OP_MAX_POOL2D, nan, NULL, &p8);
    tu_expect(y, CX_F32, 4, TU_SHAPE(1, 1, 1, 1), TU_VALUES(NAN), 0);
    tu_drop(y);
    cx_params p9 = {0};
    cx_param_put_ints(&p9, CX_P_WINDOW, TU_SHAPE(2, 2), 2);
    y = run(CX_OP_MAX_POOL2D_GRAD, nan, g1, &p9);
    tu_expect(y, CX_F32, 4, TU_SHAPE(1, 1, 2, 2), TU_VALUES(0, 0, 0, 0), 0);
    tu_drop(y);
    tu_drop(nan);
    tu_drop(g1);
    tu_drop(g3);
    tu_drop(u);
    tu_drop(f);
    tu_drop(g);
    tu_drop(x);
}

/* ---- errors ---- */

static void expect_error(cx_op_id op, cx_tensor *a, cx_tensor *b, cx_params *ps,
                         const char *needle) {
    cx_tensor *in[2] = {a, b};
    cx_status st = {0};
    cx_code rc;
    cx_tensor *y = tu_run(op, in, b ? 2 : 1, ps, &rc, &st);
    if (y) {
        tu_drop(y);
        fail_msg("%s: expected an error containing '%s', got a result", cx_op_table[op].name,
                 needle);
    }
    assert_int_equal(rc, CX_EINVAL);
    if (!strstr(st.message, needle))
        fail_msg("%s: expected a message containing '%s', got: %s", cx_op_table[op].name, needle,
                 st.message);
    if (strncmp(st.message, cx_op_table[op].name, strlen(cx_op_table[op].name)) != 0)
        fail_msg("the message does not start with the op's name: %s", st.message);
}

static void test_errors(void **state) {
    (void)state;
    double v[400] = {0};
    cx_tensor *x = tu_tensor(CX_F32, 4, TU_SHAPE(1, 3, 5, 5), v);
    cx_tensor *k = tu_tensor(CX_F32, 4, TU_SHAPE(2, 2, 3, 3), v);
    cx_tensor *k3 = tu_tensor(CX_F32, 4, TU_SHAPE(2, 3, 3, 3), v);
    cx_tensor *r3 = tu_tensor(CX_F32, 3, TU_SHAPE(3, 5, 5), v);
    cx_params ps = {0};
    expect_error(CX_OP_CONV2D, x, k, &ps, "kernel's input channels (2)");
    cx_params p1 = {0};
    expect_error(CX_OP_CONV2D, r3, k3, &p1,
                 "expected input of rank 4 {N, C, H, W}, got shape {3, 5, 5}");
    cx_params p2 = {0};
    cx_param_put_int(&p2, CX_P_LAYOUT, NHWC);
    expect_error(CX_OP_CONV2D, x, r3, &p2, "expected kernel of rank 4 {KH, KW, C/groups, O}");
    cx_params p3 = {0};
    cx_param_put_int(&p3, CX_P_FEATURE_GROUP_SIZE, 2);
    expect_error(CX_OP_CONV2D, x, k3, &p3, "feature_group_size");
    cx_params p4 = {0};
    cx_param_put_ints(&p4, CX_P_STRIDES, TU_SHAPE(0, 1), 2);
    expect_error(CX_OP_CONV2D, x, k3, &p4, "expected strides to be 2 integers in 1..2^48");
    cx_params p5 = {0};
    cx_param_put_ints(&p5, CX_P_PADDING, TU_SHAPE(1, 1, 1), 3);
    expect_error(CX_OP_CONV2D, x, k3, &p5, "expected padding to be 0 (:valid), 1 (:same)");
    cx_params p6 = {0};
    cx_param_put_ints(&p6, CX_P_KERNEL_DILATION, TU_SHAPE(3, 1), 2);
    expect_error(CX_OP_CONV2D, x, k3, &p6, "does not fit in the padded input of 5 x 5");
    cx_params p7 = {0};
    cx_param_put_ints(&p7, CX_P_PADDING, TU_SHAPE(-3, 0, 0, 0), 4);
    expect_error(CX_OP_CONV2D, x, k3, &p7, "does not fit");
    cx_params p8 = {0};
    cx_param_put_int(&p8, CX_P_LAYOUT, 2);
    expect_error(CX_OP_CONV2D, x, k3, &p8, "layout");
    /* gradients: shapes that do not belong together */
    cx_tensor *gy = tu_tensor(CX_F32, 4, TU_SHAPE(1, 2, 4, 4), v);
    cx_params p9 = {0};
    cx_param_put_ints(&p9, CX_P_INPUT_SHAPE, TU_SHAPE(1, 3, 5, 5), 4);
    expect_error(CX_OP_CONV2D_GRAD_INPUT, gy, k3, &p9,
                 "expected grad_output of shape {1, 2, 3, 3} (the output for input_shape "
                 "{1, 3, 5, 5}");
    cx_params p10 = {0};
    expect_error(CX_OP_CONV2D_GRAD_INPUT, gy, k3, &p10, "input_shape parameter is required");
    cx_params p11 = {0};
    cx_param_put_ints(&p11, CX_P_INPUT_SHAPE, TU_SHAPE(1, 3, 5), 3);
    expect_error(CX_OP_CONV2D_GRAD_INPUT, gy, k3, &p11,
                 "expected input_shape to have 4 dimensions");
    cx_params p12 = {0};
    cx_param_put_ints(&p12, CX_P_KERNEL_SHAPE, TU_SHAPE(2, 3, 3, 3), 4);
    expect_error(CX_OP_CONV2D_GRAD_KERNEL, x, gy, &p12,
                 "expected grad_output of shape {1, 2, 3, 3}"
                 " (the output for input {1, 3, 5, 5}");
    /* passes: the same shapes fit with a 2 x 2 kernel */
    cx_params ok = {0};
    cx_param_put_ints(&ok, CX_P_KERNEL_SHAPE, TU_SHAPE(2, 3, 2, 2), 4);
    cx_tensor *in[2] = {x, gy};
    cx_status st = {0};
    cx_code rc;
    cx_tensor *good = tu_run(CX_OP_CONV2D_GRAD_KERNEL, in, 2, &ok, &rc, &st);
    if (rc != CX_OK) fail_msg("%s", st.message);
    tu_drop(good);
    /* pools */
    cx_params q1 = {0};
    cx_param_put_ints(&q1, CX_P_WINDOW, TU_SHAPE(0, 2), 2);
    expect_error(CX_OP_MAX_POOL2D, x, NULL, &q1, "expected window to be 2 integers in 1..2^48");
    cx_params q2 = {0};
    cx_param_put_ints(&q2, CX_P_WINDOW, TU_SHAPE(6, 2), 2);
    expect_error(CX_OP_AVG_POOL2D, x, NULL, &q2, "a window spanning 6 x 2 does not fit");
    cx_params q3 = {0};
    expect_error(CX_OP_MAX_POOL2D, x, NULL, &q3, "window parameter is required");
    cx_params q4 = {0};
    cx_param_put_ints(&q4, CX_P_WINDOW, TU_SHAPE(2, 2), 2);
    expect_error(CX_OP_MAX_POOL2D_GRAD, x, gy, &q4, "expected grad_output of shape {1, 3, 2, 2}");
    cx_params q5 = {0};
    cx_param_put_ints(&q5, CX_P_WINDOW, TU_SHAPE(2, 2), 2);
    cx_param_put_ints(&q5, CX_P_STRIDES, TU_SHAPE(1), 1);
    expect_error(CX_OP_MAX_POOL2D, x, NULL, &q5, "expected strides to be 2 integers");
    tu_drop(x);
    tu_drop(k);
    tu_drop(k3);
    tu_drop(r3);
    tu_drop(gy);
}

/* Errors of huge sizes are found by inference, before anything is allocated. */
static void test_errors_of_size(void **state) {
    (void)state;
    cx_desc in[2] = {{CX_F32, 4, {1, 1, 400, 400}}, {CX_F32, 4, {1, 1, 300, 300}}};
    cx_params ps = {0};
    cx_explain ex = {0};
    cx_status st = {0};
    assert_int_equal(cx_explain_op(CX_OP_CONV2D, tu_cpu(), in, 2, &ps, &ex, &st), CX_EINVAL);
    assert_non_null(strstr(st.message, "300 x 300 positions is more than the 65536"));
    cx_explain_free(&ex);
    /* a huge window with the default strides (tiled) needs no slices */
    cx_desc big = {CX_F32, 4, {1, 1, 400, 400}};
    cx_params p2 = {0};
    cx_param_put_ints(&p2, CX_P_WINDOW, TU_SHAPE(400, 400), 2);
    assert_int_equal(cx_explain_op(CX_OP_MAX_POOL2D, tu_cpu(), &big, 1, &p2, &ex, &st), CX_OK);
    cx_explain_free(&ex);
    cx_params p3 = {0};
    cx_param_put_ints(&p3, CX_P_KERNEL_DILATION, TU_SHAPE(INT64_C(1) << 47, 1), 2);
    in[1] = (cx_desc){CX_F32, 4, {1, 1, 5, 1}};
    assert_int_equal(cx_explain_op(CX_OP_CONV2D, tu_cpu(), in, 2, &p3, &ex, &st), CX_EINVAL);
    assert_non_null(strstr(st.message, "spans more than 2^48"));
    cx_explain_free(&ex);
    cx_params p4 = {0};
    cx_param_put_ints(&p4, CX_P_PADDING, TU_SHAPE(INT64_C(1) << 50, 0, 0, 0), 4);
    assert_int_equal(cx_explain_op(CX_OP_CONV2D, tu_cpu(), in, 2, &p4, &ex, &st), CX_EINVAL);
    assert_non_null(strstr(st.message, "expected padding within -2^48..2^48"));
    cx_explain_free(&ex);
    cx_params p5 = {0};
    cx_param_put_ints(&p5, CX_P_PADDING, TU_SHAPE(INT64_C(1) << 47, 0, 0, 0), 4);
    in[0] = (cx_desc){CX_F32, 4, {1, 1, 5, 4}};
    in[1] = (cx_desc){CX_F32, 4, {1, 1, 1, 1}};
    assert_int_equal(cx_explain_op(CX_OP_CONV2D, tu_cpu(), in, 2, &p5, &ex, &st), CX_EINVAL);
    assert_non_null(strstr(st.message, "2^48"));
    cx_explain_free(&ex);
}

/* ---- plans ---- */

static void test_plan_is_decomposed(void **state) {
    (void)state;
    for (int op = CX_OP_CONV2D; op <= CX_OP_AVG_POOL2D_GRAD; op++) {
        /* every real type: convolutions and pools are not defined on complex numbers */
        for (int t = 0; t < CX_DTYPE_COUNT; t++) {
            if (cx_dtype_is_complex((cx_dtype)t)) {
                cx_route route;
                cx_explain ex = {0};
                cx_status st = {0};
                assert_int_equal(
                    cx_capability(tu_cpu(), (cx_op_id)op, (cx_dtype)t, &route, &ex, &st),
                    CX_EINVAL);
                cx_explain_free(&ex);
                continue;
            }
            cx_route route;
            cx_explain ex = {0};
            cx_status st = {0};
            if (cx_capability(tu_cpu(), (cx_op_id)op, (cx_dtype)t, &route, &ex, &st) != CX_OK)
                fail_msg("%s on %s: %s", cx_op_table[op].name, cx_dtype_name((cx_dtype)t),
                         st.message);
            assert_int_equal(route, CX_ROUTE_DECOMPOSED);
            assert_true(ex.n > 2);
            assert_int_equal(ex.steps[0].depth, 0);
            assert_int_equal(ex.steps[0].op, op);
            for (int k = 1; k < ex.n; k++) {
                /* primitives only, each native on the cpu */
                assert_int_equal(ex.steps[k].depth, 1);
                assert_int_not_equal(cx_op_table[ex.steps[k].op].kind, CX_KIND_COMPOSITE);
                assert_int_equal(ex.steps[k].route, CX_ROUTE_NATIVE);
            }
            cx_explain_free(&ex);
        }
    }
    /* conv2d: one dot over the slices of the input */
    cx_desc in[2] = {{CX_F32, 4, {1, 2, 5, 5}}, {CX_F32, 4, {3, 2, 3, 3}}};
    cx_params ps = {0};
    cx_explain ex = {0};
    cx_status st = {0};
    assert_int_equal(cx_explain_op(CX_OP_CONV2D, tu_cpu(), in, 2, &ps, &ex, &st), CX_OK);
    assert_int_equal(ex.steps[0].route, CX_ROUTE_DECOMPOSED);
    assert_int_equal(ex.steps[0].out.rank, 4);
    assert_int_equal(ex.steps[0].out.shape[1], 3);
    assert_int_equal(ex.steps[0].out.shape[2], 3);
    int dots = 0, slices = 0;
    for (int k = 1; k < ex.n; k++) {
        dots += ex.steps[k].op == CX_OP_DOT;
        slices += ex.steps[k].op == CX_OP_SLICE;
    }
    assert_int_equal(dots, 1);
    assert_int_equal(slices, 9);
    cx_explain_free(&ex);
    /* a 2 x 2 max pool with the default strides: pad-free reshape and one reduction */
    cx_params pp = {0};
    cx_param_put_ints(&pp, CX_P_WINDOW, TU_SHAPE(2, 2), 2);
    cx_desc x = {CX_F32, 4, {1, 2, 6, 6}};
    assert_int_equal(cx_explain_op(CX_OP_MAX_POOL2D, tu_cpu(), &x, 1, &pp, &ex, &st), CX_OK);
    assert_int_equal(ex.n, 3);
    assert_int_equal(ex.steps[1].op, CX_OP_RESHAPE);
    assert_int_equal(ex.steps[2].op, CX_OP_REDUCE_MAX);
    cx_explain_free(&ex);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_conv2d_known_values),
        cmocka_unit_test(test_conv2d_against_reference),
        cmocka_unit_test(test_conv2d_many_positions),
        cmocka_unit_test(test_conv2d_empty),
        cmocka_unit_test(test_pools_known_values),
        cmocka_unit_test(test_pools_against_reference),
        cmocka_unit_test(test_errors),
        cmocka_unit_test(test_errors_of_size),
        cmocka_unit_test(test_plan_is_decomposed),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
