/* The dense composite natively: y = x . w + bias as one GEMM, the bias broadcast into the output
 * first and the product added onto it (beta = 1), so the bias costs no second pass and no
 * intermediate tensor. x {..., in} is an M x K row-major matrix and w {in, out} a K x N one, so
 * OpenBLAS reads both in place; f16/bf16 are widened to f32, multiplied there and rounded once,
 * like the decomposition (dot in f32, add, round). */
#include <cblas.h>
#include <stdlib.h>

#include "../../core/half.h"
#include "../../core/half_array.h"
#include "../cpu/cpu_kernels.h"
#include "blas_kernels.h"

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

float *blas_widen_f32(const cx_tensor *t) {
    float *f = cpu_buffer_get(sizeof(float) * (size_t)(t->numel ? t->numel : 1));
    if (!f) return NULL;
    if (t->desc.dtype == CX_F16)
        cx_f16_to_f32_array(t->data, f, t->numel);
    else
        cx_bf16_to_f32_array(t->data, f, t->numel);
    return f;
}

static void dense_f64(const cx_tensor *x, const cx_tensor *w, const cx_tensor *bias, int64_t m,
                      int64_t n, int64_t k, double *y) {
    for (int64_t j = 0; j < n; j++) y[j] = bias_at(bias, j);
    for (int64_t i = 1; i < m; i++)
        for (int64_t j = 0; j < n; j++) y[i * n + j] = y[j];
    if (k > 0)
        blas_gemm(&(blas_gemm_args){true, CblasNoTrans, CblasNoTrans, (int)m, (int)n, (int)k,
                                    x->data, (int)k, w->data, (int)n, 1.0, y, (int)n});
}

/* f32 from x and w as f32 arrays (the inputs themselves, or their widened copies). */
static void dense_f32(const float *x, const float *w, const cx_tensor *bias, int64_t m, int64_t n,
                      int64_t k, float *y) {
    for (int64_t j = 0; j < n; j++) y[j] = (float)bias_at(bias, j);
    for (int64_t i = 1; i < m; i++)
        for (int64_t j = 0; j < n; j++) y[i * n + j] = y[j];
    if (k > 0)
        blas_gemm(&(blas_gemm_args){false, CblasNoTrans, CblasNoTrans, (int)m, (int)n, (int)k, x,
                                    (int)k, w, (int)n, 1.0, y, (int)n});
}

cx_code blas_dense(const cx_tensor *x, const cx_tensor *w, const cx_tensor *bias, cx_tensor *out,
                   cx_status *st) {
    if (out->numel == 0) return CX_OK;
    int64_t k = w->desc.shape[0], n = w->desc.shape[1], m = out->numel / n;
    cx_dtype t = out->desc.dtype;
    if (t == CX_F64 || t == CX_F32) {
        if (t == CX_F64)
            dense_f64(x, w, bias, m, n, k, out->data);
        else
            dense_f32(x->data, w->data, bias, m, n, k, out->data);
        return CX_OK;
    }
    float *xf = blas_widen_f32(x), *wf = blas_widen_f32(w),
          *yf = cpu_buffer_get(sizeof(float) * (size_t)out->numel);
    if (xf && wf && yf) {
        dense_f32(xf, wf, bias, m, n, k, yf);
        if (t == CX_F16)
            cx_f32_to_f16_array(yf, out->data, out->numel);
        else
            cx_f32_to_bf16_array(yf, out->data, out->numel);
    }
    bool ok = xf && wf && yf;
    cpu_buffer_put(xf);
    cpu_buffer_put(wf);
    cpu_buffer_put(yf);
    return ok ? CX_OK : cx_fail(st, CX_ENOMEM, "blas: no memory for the buffers of dense");
}
