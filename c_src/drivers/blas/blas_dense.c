/* The dense composite natively: y = act(x . w + bias) as one GEMM, the bias broadcast into the
 * output first and the product added onto it (beta = 1), so the bias costs no second pass and no
 * intermediate tensor, and the activation applied by the vector kernels to each block of the
 * product on the thread that computed it, while the block is in cache. x {..., in} is an M x K
 * row-major matrix and w {in, out} a K x N one, so OpenBLAS reads both in place; f16/bf16 are
 * widened to f32, multiplied and activated there and rounded once, like the decomposition (dot in
 * f32, add, activation, round). */
#include <cblas.h>
#include <stdlib.h>
#include <string.h>

#include "../../core/half.h"
#include "../../core/half_array.h"
#include "../cpu/cpu_kernels.h"
#include "blas_kernels.h"
#include "blas_simd.h"

/* The bias (shape {N} or a number) as element j of a row, in double. */
static double bias_at(const cx_tensor *b, int64_t j) {
    int64_t i = b->numel == 1 ? 0 : j;
    switch (b->desc.dtype) {
    case CX_F16: return cx_f16_to_f32(((const uint16_t *)b->data)[i]);
    case CX_BF16: return cx_bf16_to_f32(((const uint16_t *)b->data)[i]);
    case CX_F32: return ((const float *)b->data)[i];
    default: return ((const double *)b->data)[i];
    }
}

/* The bias as n (or 1) f32 values in a buffer of the cpu's cache (to put back), or NULL. */
static float *bias_f32(const cx_tensor *bias) {
    float *b = cpu_buffer_get(sizeof(float) * (size_t)bias->numel);
    if (b)
        for (int64_t j = 0; j < bias->numel; j++) b[j] = (float)bias_at(bias, j);
    return b;
}

float *blas_widen_f32(const cx_tensor *t) {
    float *f = cpu_buffer_get(sizeof(float) * (size_t)(t->numel ? t->numel : 1));
    if (!f) return NULL;
    blas_widen(t->desc.dtype, t->data, f, t->numel);
    return f;
}

/* ==== the activation ========================================================================= */

typedef struct {
    const simd_table *t;
    int64_t act; /* CX_ACTIVATION_* */
    bool f64;
} activation;

bool blas_dense_activation_fits(int64_t act, cx_dtype t) {
    const simd_table *s = blas_simd();
    if (act == CX_ACTIVATION_NONE) return true;
    if (!s || act < 0 || act >= CX_ACTIVATION_COUNT) return false;
    /* f64: relu, sigmoid and tanh on the f64 kernels; gelu and silu run in f32 only */
    return t != CX_F64 || act == CX_ACTIVATION_RELU || act == CX_ACTIVATION_SIGMOID ||
           act == CX_ACTIVATION_TANH;
}

static void activate_run(const activation *a, void *p, int64_t n) {
    const simd_table *t = a->t;
    static const float zero_f = 0;
    static const double zero_d = 0;
    if (a->f64) {
        double *o = p;
        switch (a->act) {
        case CX_ACTIVATION_RELU: t->binary_f64[CX_OP_MAX](o, o, &zero_d, 1, 0, n); break;
        case CX_ACTIVATION_SIGMOID: t->unary_f64[CX_OP_SIGMOID](o, o, n); break;
        default: t->unary_f64[CX_OP_TANH](o, o, n);
        }
        return;
    }
    float *o = p;
    switch (a->act) {
    case CX_ACTIVATION_RELU: t->binary_f32[CX_OP_MAX](o, o, &zero_f, 1, 0, n); break;
    case CX_ACTIVATION_SIGMOID: t->unary_f32[CX_OP_SIGMOID](o, o, n); break;
    case CX_ACTIVATION_TANH: t->unary_f32[CX_OP_TANH](o, o, n); break;
    case CX_ACTIVATION_SILU: t->silu_f32(o, o, n); break;
    default: t->gelu_f32(o, o, n, a->act == CX_ACTIVATION_GELU_TANH);
    }
}

/* the GEMM's epilogue: a block of rows x cols, ldc apart */
static void activate_block(void *ctx, int part, void *c, int rows, int cols, int ldc) {
    (void)part;
    const activation *a = ctx;
    size_t es = a->f64 ? sizeof(double) : sizeof(float);
    if (cols == ldc) {
        activate_run(a, c, (int64_t)rows * cols);
        return;
    }
    for (int r = 0; r < rows; r++) activate_run(a, (char *)c + es * (size_t)r * (size_t)ldc, cols);
}

/* ==== the product ============================================================================ */

/* y = bias in every row, then x . w added onto it (and the activation, if any, block by block;
 * over the bias alone when k = 0) */
static void dense_gemm(bool f64, const void *x, const void *w, const cx_tensor *bias, int64_t m,
                       int64_t n, int64_t k, void *y, activation *act) {
    for (int64_t j = 0; j < n; j++) {
        double v = bias_at(bias, j);
        if (f64)
            ((double *)y)[j] = v;
        else
            ((float *)y)[j] = (float)v;
    }
    size_t row = (f64 ? sizeof(double) : sizeof(float)) * (size_t)n;
    for (int64_t i = 1; i < m; i++) memcpy((char *)y + row * (size_t)i, y, row);
    if (k > 0) {
        blas_gemm(&(blas_gemm_args){f64, CblasNoTrans, CblasNoTrans, (int)m, (int)n, (int)k, x,
                                    (int)k, w, (int)n, 1.0, y, (int)n, act ? activate_block : NULL,
                                    act});
    } else if (act) {
        activate_block(act, 0, y, (int)m, (int)n, (int)n);
    }
}

/* ==== on oneDNN's matmul =======================================================================
 * A bf16 dense's product (where the processor has AVX512-BF16), a large f32 one and a large f16
 * one (on f32 copies, as oneDNN's f32 matmul) may run on oneDNN (measured against OpenBLAS per
 * shape, blas_dnnl.c) into an f32 scratch, or the f32 result itself; the bias, the activation
 * and (f16, bf16) the rounding follow in one pass over its rows, split across the pool. */

static blas_mm_shape dense_shape(cx_dtype t, int64_t m, int64_t n, int64_t k) {
    return (blas_mm_shape){
        m, n, k, k, n, false, false, t == CX_BF16, t == CX_F32 || t == CX_F16, t == CX_F16};
}

/* whether dense's operands and result all have one of the types oneDNN's path takes (bf16, f32,
 * f16 widened), and the vector kernels that add the bias and apply the activation are there
 * (CASCADE_SIMD=none or a processor without AVX2 has none) */
static bool dnnl_types(const cx_desc *x, const cx_desc *w, cx_dtype out) {
    return (out == CX_BF16 || out == CX_F32 || out == CX_F16) && x->dtype == out &&
           w->dtype == out && blas_simd();
}

const char *blas_dense_library(const cx_desc *x, const cx_desc *w) {
    if (!dnnl_types(x, w, x->dtype) || w->rank != 2 || x->rank < 1 || w->shape[0] == 0 ||
        w->shape[1] == 0)
        return "openblas";
    int64_t m = cx_desc_numel(x) / w->shape[0];
    blas_mm_shape s = dense_shape(x->dtype, m, w->shape[1], w->shape[0]);
    return blas_dnnl_matmul_path(&s) == 1 ? "onednn" : "openblas";
}

typedef struct {
    float *y;              /* m x n, the product */
    const float *bias;     /* n values, or 1 */
    int64_t bias_n, n;     /* bias_n: 1 or n */
    const activation *act; /* or NULL */
    uint16_t *out;         /* f16/bf16: the result, rounded from y; NULL: y is the f32 result */
    cx_dtype type;         /* of out */
    int64_t m;
} epilogue_job;

static void epilogue_part(void *ctx, int index, int parts) {
    const epilogue_job *j = ctx;
    const simd_table *t = blas_simd();
    for (int64_t r = j->m * index / parts; r < j->m * (index + 1) / parts; r++) {
        float *row = j->y + r * j->n;
        t->binary_f32[CX_OP_ADD](row, row, j->bias, 1, j->bias_n > 1, j->n);
        if (j->act) activate_run(j->act, row, j->n);
        if (j->out) blas_narrow_serial(j->type, row, j->out + r * j->n, j->n);
    }
}

/* The dense on oneDNN: false when it does not run there (nothing written to a bf16 result; an
 * f32 one may hold a partial product, which the OpenBLAS path then overwrites). */
static bool dense_onednn(const blas_mm_shape *s, const cx_tensor *x, const cx_tensor *w,
                         const cx_tensor *bias, const activation *act, cx_tensor *out) {
    bool f32 = out->desc.dtype == CX_F32;
    float *y = f32 ? out->data : cpu_buffer_get(sizeof(float) * (size_t)out->numel);
    float *b = bias_f32(bias);
    /* f16: widened copies of x and w */
    float *xw = s->widened ? blas_widen_f32(x) : NULL, *ww = s->widened ? blas_widen_f32(w) : NULL;
    bool ok = y && b && (!s->widened || (xw && ww)) &&
              blas_dnnl_matmul(s, s->widened ? xw : x->data, s->widened ? ww : w->data, y);
    cpu_buffer_put(xw);
    cpu_buffer_put(ww);
    if (ok) {
        epilogue_job j = {.y = y,
                          .bias = b,
                          .bias_n = bias->numel,
                          .n = s->n,
                          .act = act,
                          .out = f32 ? NULL : out->data,
                          .type = out->desc.dtype,
                          .m = s->m};
        int64_t parts = s->m * s->n / (1 << 14);
        blas_parallel(parts < 1      ? 1
                      : parts > s->m ? (int)s->m
                                     : (int)parts,
                      false, epilogue_part, &j);
    }
    if (!f32) cpu_buffer_put(y);
    cpu_buffer_put(b);
    return ok;
}

cx_code blas_dense(const cx_tensor *x, const cx_tensor *w, const cx_tensor *bias,
                   const cx_params *ps, cx_tensor *out, cx_status *st) {
    if (out->numel == 0) return CX_OK;
    int64_t k = w->desc.shape[0], n = w->desc.shape[1], m = out->numel / n;
    cx_dtype t = out->desc.dtype;
    int64_t which = ps ? ps->p[CX_P_ACTIVATION].i[0] : CX_ACTIVATION_NONE;
    if (!blas_dense_activation_fits(which, t))
        return cx_fail(st, CX_EINVAL, "blas: dense cannot apply activation %lld to %s",
                       (long long)which, cx_dtype_name(t));
    activation a = {blas_simd(), which, t == CX_F64}, *act = which ? &a : NULL;
    blas_mm_shape s = dense_shape(t, m, n, k);
    int path = dnnl_types(&x->desc, &w->desc, t) && k > 0 ? blas_dnnl_matmul_path(&s) : 0;
    if (path == 1 && dense_onednn(&s, x, w, bias, act, out)) return CX_OK;
    double t0 = blas_seconds();
    if (t == CX_F64 || t == CX_F32) {
        dense_gemm(t == CX_F64, x->data, w->data, bias, m, n, k, out->data, act);
        if (path == 2) blas_dnnl_matmul_record(&s, blas_seconds() - t0);
        return CX_OK;
    }
    /* each thread of the product on copies it widens itself, where it fits (blas_dot.c) */
    float *bf = k > 0 ? bias_f32(bias) : NULL;
    if (bf) {
        blas_half_gemm g = {.type = t,
                            .a = x->data,
                            .b = w->data,
                            .m = m,
                            .n = n,
                            .k = k,
                            .bias = bf,
                            .bias_n = bias->numel,
                            .epilogue = act ? activate_block : NULL,
                            .epilogue_ctx = act,
                            .out = out->data};
        bool done = blas_half_gemm_private(&g);
        cpu_buffer_put(bf);
        if (done) {
            if (path == 2) blas_dnnl_matmul_record(&s, blas_seconds() - t0);
            return CX_OK;
        }
    }
    float *xf = blas_widen_f32(x), *wf = blas_widen_f32(w),
          *yf = cpu_buffer_get(sizeof(float) * (size_t)out->numel);
    if (xf && wf && yf) {
        dense_gemm(false, xf, wf, bias, m, n, k, yf, act);
        blas_narrow(t, yf, out->data, out->numel);
    }
    bool ok = xf && wf && yf;
    cpu_buffer_put(xf);
    cpu_buffer_put(wf);
    cpu_buffer_put(yf);
    if (ok && path == 2) blas_dnnl_matmul_record(&s, blas_seconds() - t0);
    return ok ? CX_OK : cx_fail(st, CX_ENOMEM, "blas: no memory for the buffers of dense");
}
