/* conv2d natively: per image and group, im2col into a scratch matrix and one GEMM (blas_gemm.c)
 * that writes the output in place, in either layout, any strides, dilations, padding and groups.
 *
 *   nchw: out[n] {O, OH*OW} row-major; group g's rows are W_g {og, K} . cols {K, OH*OW}, with
 *         K = cg*KH*KW in the kernel's own order (ci, ki, kj), so the kernel is read in place.
 *   nhwc: out[n] {OH*OW, O} row-major; group g's columns are cols {OH*OW, K} . W[:, g] {K, og},
 *         K in the order (ki, kj, ci) of the kernel {KH, KW, cg, O}, read in place (ldb = O).
 *
 * The decomposition (im2col as KH*KW strided slices stacked into a tensor, then one dot over
 * the batch) built the whole batch's im2col tensor and moved it through several ops; this keeps
 * one image's at a time in a cached scratch. f16/bf16 are computed in f32 (the kernel widened
 * once, the result rounded once), as the decomposition does. */
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "../../core/conv_geom.h"
#include "../../core/half.h"
#include "../../core/half_array.h"
#include "../cpu/cpu_kernels.h"
#include "blas_kernels.h"
#include "blas_simd.h"

/* Element i of t as the compute type (f32 for f16/bf16/f32, f64). */
static inline float load_f32(const cx_tensor *t, int64_t i) {
    switch (t->desc.dtype) {
    case CX_F16: return cx_f16_to_f32(((const uint16_t *)t->data)[i]);
    case CX_BF16: return cx_bf16_to_f32(((const uint16_t *)t->data)[i]);
    default: return ((const float *)t->data)[i];
    }
}

static inline double load_f64(const cx_tensor *t, int64_t i) {
    return ((const double *)t->data)[i];
}

/* im2col of image n, group g, into cols: nchw {K, P} (row (ci, ki, kj), column (oh, ow)); nhwc
 * {P, K} (row (oh, ow), column (ki, kj, ci)); zeros where the window reads padding. One body
 * for the two compute types, T loaded through LOAD. */
#define DEFINE_IM2COL(NAME, T, LOAD)                                                               \
    static void NAME(const cx_tensor *x, const cx_conv_dims *v, int64_t n, int64_t g, T *cols) {   \
        int64_t p = v->oh * v->ow;                                                                 \
        if (!v->nhwc) {                                                                            \
            for (int64_t ci = 0; ci < v->cg; ci++) {                                               \
                int64_t plane = (n * v->c + g * v->cg + ci) * v->h * v->w;                         \
                for (int64_t ki = 0; ki < v->kh; ki++)                                             \
                    for (int64_t kj = 0; kj < v->kw; kj++, cols += p) {                            \
                        T *d = cols;                                                               \
                        for (int64_t oh = 0; oh < v->oh; oh++) {                                   \
                            int64_t ih = oh * v->s0 - v->lo0 + ki * v->d0;                         \
                            if (ih < 0 || ih >= v->h) {                                            \
                                memset(d, 0, sizeof(T) * (size_t)v->ow);                           \
                                d += v->ow;                                                        \
                                continue;                                                          \
                            }                                                                      \
                            int64_t row = plane + ih * v->w, iw = kj * v->d1 - v->lo1;             \
                            for (int64_t ow = 0; ow < v->ow; ow++, iw += v->s1)                    \
                                *d++ = iw >= 0 && iw < v->w ? LOAD(x, row + iw) : (T)0;            \
                        }                                                                          \
                    }                                                                              \
            }                                                                                      \
            return;                                                                                \
        }                                                                                          \
        for (int64_t oh = 0; oh < v->oh; oh++)                                                     \
            for (int64_t ow = 0; ow < v->ow; ow++)                                                 \
                for (int64_t ki = 0; ki < v->kh; ki++) {                                           \
                    int64_t ih = oh * v->s0 - v->lo0 + ki * v->d0;                                 \
                    for (int64_t kj = 0; kj < v->kw; kj++) {                                       \
                        int64_t iw = ow * v->s1 - v->lo1 + kj * v->d1;                             \
                        if (ih < 0 || ih >= v->h || iw < 0 || iw >= v->w) {                        \
                            memset(cols, 0, sizeof(T) * (size_t)v->cg);                            \
                            cols += v->cg;                                                         \
                            continue;                                                              \
                        }                                                                          \
                        int64_t base = ((n * v->h + ih) * v->w + iw) * v->c + g * v->cg;           \
                        for (int64_t ci = 0; ci < v->cg; ci++) *cols++ = LOAD(x, base + ci);       \
                    }                                                                              \
                }                                                                                  \
    }

DEFINE_IM2COL(im2col_f32, float, load_f32)
DEFINE_IM2COL(im2col_f64, double, load_f64)

bool blas_conv2d_fits(const cx_desc *x, const cx_desc *kern, const cx_params *ps) {
    cx_conv_dims v;
    cx_conv_dims_of(x, kern, ps, &v);
    int64_t o = v.groups * v.og, p = v.oh * v.ow, k = v.cg * v.kh * v.kw;
    /* the scratch is p x k elements of at most 8 bytes */
    return blas_dims_fit(p, o, k) && (k == 0 || p <= INT64_MAX / 8 / k);
}

/* blas_gemm's epilogue: the chain over the block just written */
static void chain_block(void *ctx, int part, void *c, int rows, int cols, int ldc) {
    blas_epilogue_block(ctx, part, c, rows, cols, ldc);
}

/* One conv2d's im2col work: image n's groups into y (the output's image, or the f32 scratch of
 * an f16/bf16 one), each an im2col into cols (or the image itself: direct) and one GEMM. */
typedef struct {
    const cx_tensor *x;
    const cx_conv_dims *v;
    const void *w; /* the kernel in the compute type */
    bool f64, direct;
    size_t es;
    int64_t p, k, o;
    void (*epilogue)(void *, int, void *, int, int, int);
    const blas_epilogue *epi;
    /* images split across the pool: each part's images with its own cols, its GEMMs on its own
     * thread */
    char *out;
    _Atomic bool failed;
} im2col_job;

static void im2col_image(const im2col_job *j, int64_t n, void *cols, char *y, bool serial,
                         int part) {
    const cx_conv_dims *v = j->v;
    size_t es = j->es;
    int64_t p = j->p, k = j->k;
    for (int64_t g = 0; g < v->groups; g++) {
        if (j->direct)
            cols = (char *)j->x->data + es * (size_t)((n * v->c + g * v->cg) * p);
        else if (j->f64)
            im2col_f64(j->x, v, n, g, cols);
        else
            im2col_f32(j->x, v, n, g, cols);
        blas_gemm_args a;
        if (!v->nhwc) /* W_g {og, K} (rows g*og..) . cols {K, P} -> out rows g*og.. */
            a = (blas_gemm_args){j->f64,
                                 CblasNoTrans,
                                 CblasNoTrans,
                                 (int)v->og,
                                 (int)p,
                                 (int)k,
                                 (const char *)j->w + es * (size_t)(g * v->og * k),
                                 (int)k,
                                 cols,
                                 (int)p,
                                 0.0,
                                 y + es * (size_t)(g * v->og * p),
                                 (int)p,
                                 j->epilogue,
                                 (void *)j->epi};
        else /* cols {P, K} . W[:, g*og..] {K, og} (ldb = O) -> out columns g*og.. */
            a = (blas_gemm_args){
                j->f64,    CblasNoTrans, CblasNoTrans,
                (int)p,    (int)v->og,   (int)k,
                cols,      (int)k,       (const char *)j->w + es * (size_t)(g * v->og),
                (int)j->o, 0.0,          y + es * (size_t)(g * v->og),
                (int)j->o, j->epilogue,  (void *)j->epi};
        if (serial)
            blas_gemm_serial(&a, part);
        else
            blas_gemm(&a);
    }
}

static void images_part(void *ctx, int index, int parts) {
    im2col_job *j = ctx;
    int64_t first = j->v->n * index / parts, last = j->v->n * (index + 1) / parts;
    void *cols = j->direct ? NULL : cpu_buffer_get(j->es * (size_t)(j->p * j->k));
    if (!j->direct && !cols) {
        atomic_store(&j->failed, true);
        return;
    }
    for (int64_t n = first; n < last; n++)
        im2col_image(j, n, cols, j->out + j->es * (size_t)(n * j->p * j->o), true, index);
    cpu_buffer_put(cols);
}

cx_code blas_conv2d_im2col(const cx_tensor *x, const cx_tensor *kern, const cx_params *ps,
                           cx_tensor *out, const blas_epilogue *epi, cx_status *st) {
    if (out->numel == 0) return CX_OK;
    cx_conv_dims v;
    cx_conv_dims_of(&x->desc, &kern->desc, ps, &v);
    int64_t p = v.oh * v.ow, k = v.cg * v.kh * v.kw, o = v.groups * v.og;
    cx_dtype t = out->desc.dtype;
    if (k == 0) { /* no input channels: empty sums */
        memset(out->data, 0, out->nbytes);
        if (epi) blas_epilogue_all(epi);
        return CX_OK;
    }
    bool f64 = t == CX_F64, half = t == CX_F16 || t == CX_BF16;
    im2col_job j = {.x = x,
                    .v = &v,
                    .w = kern->data,
                    .f64 = f64,
                    .es = f64 ? sizeof(double) : sizeof(float),
                    .p = p,
                    .k = k,
                    .o = o,
                    /* (an epilogue runs on f32 results only: blas_epilogue_fits) */
                    .epilogue = epi && t == CX_F32 ? chain_block : NULL,
                    .epi = epi,
                    .out = out->data};
    /* a 1 x 1 window at stride 1 without padding (nchw, the input already in the compute type):
     * the image's plane of the group's channels is the im2col matrix {cg, H*W} itself */
    j.direct = !v.nhwc && !half && x->desc.dtype == t && v.kh == 1 && v.kw == 1 && v.s0 == 1 &&
               v.s1 == 1 && v.d0 == 1 && v.d1 == 1 && v.lo0 == 0 && v.hi0 == 0 && v.lo1 == 0 &&
               v.hi1 == 0;
    /* A batch of at least two images a thread: each thread takes whole images, its GEMMs on its
     * own (one wake-up of the pool per convolution instead of one per image and group, and no
     * thread waits for the other between GEMMs); fewer images split each GEMM instead. */
    int threads = blas_pool_threads();
    if (!half && threads > 1 && v.n >= 2 * threads) {
        blas_parallel(threads, true, images_part, &j);
        return atomic_load(&j.failed)
                   ? cx_fail(st, CX_ENOMEM, "blas: no memory for the im2col scratch of conv2d")
                   : CX_OK;
    }
    void *cols = j.direct ? NULL : cpu_buffer_get(j.es * (size_t)(p * k));
    float *w32 = half ? cpu_buffer_get(sizeof(float) * (size_t)kern->numel) : NULL;
    float *y32 = half ? cpu_buffer_get(sizeof(float) * (size_t)(p * o)) : NULL;
    bool ok = (j.direct || cols) && (!half || (w32 && y32));
    if (ok && half) {
        if (t == CX_F16)
            cx_f16_to_f32_array(kern->data, w32, kern->numel);
        else
            cx_bf16_to_f32_array(kern->data, w32, kern->numel);
        j.w = w32;
    }
    for (int64_t n = 0; ok && n < v.n; n++) {
        char *y = half ? (char *)y32 : (char *)out->data + j.es * (size_t)(n * p * o);
        im2col_image(&j, n, cols, y, false, 0);
        if (half) blas_narrow(t, y32, (uint16_t *)out->data + n * p * o, p * o);
    }
    if (!j.direct) cpu_buffer_put(cols);
    cpu_buffer_put(w32);
    cpu_buffer_put(y32);
    return ok ? CX_OK : cx_fail(st, CX_ENOMEM, "blas: no memory for the im2col scratch of conv2d");
}

/* ---- depthwise convolution: nchw, one input channel per group ------------------------------ */

/* Each output plane is the sum of KH*KW shifted copies of its input plane, each times one weight:
 * computed directly instead of an im2col and a one-row GEMM per channel (the GEMM's call and
 * packing cost more than the 9 multiply-adds per value of a 3 x 3 depthwise layer).
 *
 * The input plane is first split into its stride's phases with the padding written out as
 * zeros: phase (rp, cp) holds padded row r * s0 + rp, column c * s1 + cp at (r, c), in rows of
 * `we`. Output (oh, ow) at q = oh * we + ow then reads tap (ki, kj) at q + qr * we + qc of phase
 * ((ki * d0) % s0, (kj * d1) % s1), with qr = (ki * d0) / s0 and qc = (kj * d1) / s1: every tap
 * is one contiguous run over the whole plane, at any stride and dilation, so the taps run as
 * long vectors accumulated in registers (dw_taps_f32), with no test for the borders; the
 * columns ow >= OW of that run are computed and dropped when the rows are copied out. Taps add
 * in (ki, kj) order from +0, each output element within one thread: the same bits however the
 * planes are split. Where the scratch cannot be had, each plane is computed a row at a time
 * from the input itself (dw_plane_rows). */
typedef struct {
    const cx_conv_dims *v;
    const float *x, *w;
    float *y;
    const simd_table *simd; /* NULL: dw_taps_plain */
    int64_t we, hh;         /* a phase: hh rows of we */
    int64_t n;              /* outputs computed per plane (oh * we, rounded up to 64) */
    int64_t stride;         /* floats between phases */
    int taps;
    int64_t *off;             /* per tap: its phase's start + qr * we + qc */
    const blas_epilogue *epi; /* or NULL: run on each plane once it is written */
} dw_job;

static void dw_taps_plain(float *restrict y, const float *const *src, const float *w, int taps,
                          int64_t n) {
    for (int64_t q = 0; q < n; q += 64) {
        float acc[64] = {0};
        for (int t = 0; t < taps; t++)
            for (int i = 0; i < 64; i++) acc[i] += w[t] * src[t][q + i];
        memcpy(y + q, acc, sizeof acc);
    }
}

/* The columns c in [*lo, *hi) whose input column c * s + off lies inside a row of w (0 <= c * s +
 * off < w), at most `limit` of them from 0 (*hi < *lo when none: loops over it do nothing). */
static inline void inside_row(int64_t off, int64_t s, int64_t w, int64_t limit, int64_t *lo,
                              int64_t *hi) {
    *lo = off >= 0 ? 0 : (-off + s - 1) / s;
    *hi = off >= w ? 0 : (w - 1 - off) / s + 1;
    if (*hi > limit) *hi = limit;
}

/* n floats from s to d: a loop where rows are short (a 7 x 7 plane's rows cost more in calls
 * to memcpy than in copying), memcpy for long ones */
static inline void copy_f32(float *restrict d, const float *restrict s, int64_t n) {
    if (n >= 32) {
        memcpy(d, s, sizeof(float) * (size_t)n);
        return;
    }
    for (int64_t i = 0; i < n; i++) d[i] = s[i];
}

/* The phases of the input plane xp into ph, which dw_part zeroed once: only the places that
 * come from the input are written, so the padding (and the room past each phase) stays zero
 * for every plane. Row by row, every phase of a row in one pass over it, the columns inside the
 * input without a test each (stride 2: a deinterleave). */
static void dw_phases(const dw_job *j, const float *xp, float *ph) {
    const cx_conv_dims *v = j->v;
    int64_t we = j->we, s1 = v->s1;
    for (int64_t r = 0; r < j->hh; r++)
        for (int64_t rp = 0; rp < v->s0; rp++) {
            int64_t ih = r * v->s0 + rp - v->lo0;
            if (ih < 0 || ih >= v->h) continue;
            const float *xr = xp + ih * v->w;
            for (int64_t cp = 0; cp < s1; cp++) {
                float *d = ph + (rp * s1 + cp) * j->stride + r * we;
                int64_t off = cp - v->lo1, lo, hi;
                inside_row(off, s1, v->w, we, &lo, &hi);
                if (s1 == 1)
                    copy_f32(d + lo, xr + lo + off, hi - lo);
                else if (s1 == 2)
                    for (int64_t c = lo; c < hi; c++) d[c] = xr[2 * c + off];
                else
                    for (int64_t c = lo; c < hi; c++) d[c] = xr[c * s1 + off];
            }
        }
}

/* One output plane a row at a time from the input itself, tap by tap into the row (no scratch). */
static void dw_plane_rows(const float *restrict xp, const float *restrict wk, float *restrict yp,
                          const cx_conv_dims *v) {
    for (int64_t oh = 0; oh < v->oh; oh++) {
        float *restrict yr = yp + oh * v->ow;
        for (int64_t ow = 0; ow < v->ow; ow++) yr[ow] = 0;
        for (int64_t ki = 0; ki < v->kh; ki++) {
            int64_t ih = oh * v->s0 - v->lo0 + ki * v->d0;
            if (ih < 0 || ih >= v->h) continue;
            const float *restrict xr = xp + ih * v->w;
            for (int64_t kj = 0; kj < v->kw; kj++) {
                float wv = wk[ki * v->kw + kj];
                int64_t off = kj * v->d1 - v->lo1, lo, hi;
                inside_row(off, v->s1, v->w, v->ow, &lo, &hi);
                for (int64_t ow = lo; ow < hi; ow++) yr[ow] += wv * xr[ow * v->s1 + off];
            }
        }
    }
}

/* planes [index * planes / parts, (index + 1) * planes / parts) of the output, {n, o} each */
static void dw_part(void *ctx, int index, int parts) {
    const dw_job *j = ctx;
    const cx_conv_dims *v = j->v;
    int64_t o = v->groups * v->og, planes = v->n * o;
    int64_t first = planes * index / parts, last = planes * (index + 1) / parts;
    int64_t n_phase = v->s0 * v->s1;
    float *scratch =
        j->off ? cpu_buffer_get(sizeof(float) * (size_t)(n_phase * j->stride + j->n)) : NULL;
    const float **src = scratch ? malloc(sizeof(float *) * (size_t)j->taps) : NULL;
    float *ypad = scratch ? scratch + n_phase * j->stride : NULL;
    if (scratch) memset(scratch, 0, sizeof(float) * (size_t)(n_phase * j->stride));
    int64_t last_g = -1;
    for (int64_t p = first; p < last; p++) {
        int64_t n = p / o, oc = p % o, g = oc / v->og;
        const float *xp = j->x + (n * v->c + g) * v->h * v->w;
        const float *wk = j->w + oc * v->kh * v->kw;
        float *yp = j->y + p * v->oh * v->ow;
        if (!src) {
            dw_plane_rows(xp, wk, yp, v);
            if (j->epi)
                blas_epilogue_run(j->epi, index, p * v->oh * v->ow, (p + 1) * v->oh * v->ow);
            continue;
        }
        /* with a channel multiplier the planes of one input channel come one after another */
        if (n * v->c + g != last_g) dw_phases(j, xp, scratch);
        last_g = n * v->c + g;
        for (int t = 0; t < j->taps; t++) src[t] = scratch + j->off[t];
        if (j->simd)
            j->simd->dw_taps_f32(ypad, src, wk, j->taps, j->n);
        else
            dw_taps_plain(ypad, src, wk, j->taps, j->n);
        for (int64_t oh = 0; oh < v->oh; oh++) copy_f32(yp + oh * v->ow, ypad + oh * j->we, v->ow);
        if (j->epi) blas_epilogue_run(j->epi, index, p * v->oh * v->ow, (p + 1) * v->oh * v->ow);
    }
    free(src);
    cpu_buffer_put(scratch);
}

bool blas_conv2d_depthwise_fits(const cx_desc *x, const cx_desc *kern, const cx_params *ps) {
    if (x->dtype != CX_F32 || kern->dtype != CX_F32) return false;
    cx_conv_dims v;
    cx_conv_dims_of(x, kern, ps, &v);
    return !v.nhwc && v.groups > 1 && v.cg == 1;
}

cx_code blas_conv2d_depthwise(const cx_tensor *x, const cx_tensor *kern, const cx_params *ps,
                              cx_tensor *out, const blas_epilogue *epi) {
    if (out->numel == 0) return CX_OK;
    cx_conv_dims v;
    cx_conv_dims_of(&x->desc, &kern->desc, ps, &v);
    int64_t qr = (v.kh - 1) * v.d0 / v.s0, qc = (v.kw - 1) * v.d1 / v.s1;
    dw_job j = {&v, x->data, kern->data, out->data, blas_simd(), 0, 0, 0, 0, 0, NULL, epi};
    j.we = v.ow + qc;
    j.hh = v.oh + qr;
    j.n = (v.oh * j.we + 63) / 64 * 64;
    j.stride = (j.n + qr * j.we + qc + 15) / 16 * 16;
    j.taps = (int)(v.kh * v.kw);
    /* the scratch of a part: the phases and the computed plane, in floats; past 256 MB (a plane
     * of tens of millions of values) the planes are computed without it */
    double scratch = (double)v.s0 * (double)v.s1 * (double)j.stride + (double)j.n;
    if (scratch < (double)(1 << 26) && j.hh * j.we <= j.stride &&
        (j.off = malloc(sizeof(int64_t) * (size_t)j.taps)))
        for (int64_t ki = 0; ki < v.kh; ki++)
            for (int64_t kj = 0; kj < v.kw; kj++) {
                int64_t a = ki * v.d0, b = kj * v.d1;
                int64_t phase = (a % v.s0) * v.s1 + b % v.s1;
                j.off[ki * v.kw + kj] = phase * j.stride + a / v.s0 * j.we + b / v.s1;
            }
    int64_t planes = v.n * v.groups * v.og, work = out->numel * v.kh * v.kw;
    int64_t parts = work / (1 << 15), threads = blas_pool_threads();
    if (parts > threads) parts = threads;
    if (parts > planes) parts = planes;
    blas_parallel(parts < 1 ? 1 : (int)parts, false, dw_part, &j);
    free(j.off);
    return CX_OK;
}
