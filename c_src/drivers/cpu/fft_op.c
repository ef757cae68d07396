/* fft and ifft as ops: each row of the last axis padded with zeros or cut to `length`, then
 * transformed (fft.c, or a driver's library through cpu_fft_with), then parts whose magnitude
 * is at most `eps` made 0. The input already has the result's complex type. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cpu_kernels.h"
#include "fft.h"

static int reference_rows(cx_dtype t, const void *in, void *out, int64_t rows, int64_t n,
                          int inverse) {
    if (t == CX_C64) return cpu_fft_c64(in, out, rows, n, inverse);
    return cpu_fft_c128(in, out, rows, n, inverse);
}

/* Zeroes every part of magnitude at most eps (Nx.fft/2's cleanup). */
static void clean(cx_tensor *out, double eps) {
    int64_t parts = out->numel * 2;
    if (out->desc.dtype == CX_C64) {
        float *p = out->data;
        for (int64_t i = 0; i < parts; i++)
            if (fabsf(p[i]) <= eps) p[i] = 0;
    } else {
        double *p = out->data;
        for (int64_t i = 0; i < parts; i++)
            if (fabs(p[i]) <= eps) p[i] = 0;
    }
}

cx_code cpu_fft_with(cx_op_id op, const cx_tensor *in, const cx_params *ps, cx_tensor *out,
                     cpu_fft_rows_fn fn, cx_status *st) {
    cx_dtype t = out->desc.dtype;
    if (!cx_dtype_is_complex(t) || in->desc.dtype != t || in->desc.rank < 1)
        return cx_fail(st, CX_EINVAL, "cpu: %s expected a complex tensor of the result's type",
                       cx_op_table[op].name);
    if (out->numel == 0) return CX_OK;
    int64_t n = out->desc.shape[out->desc.rank - 1], have = in->desc.shape[in->desc.rank - 1];
    int64_t rows = out->numel / n;
    size_t es = cx_dtype_size(t);
    const void *src = in->data;
    void *padded = NULL;
    if (have != n) {
        padded = malloc((size_t)(rows * n) * es);
        if (!padded) return cx_fail(st, CX_ENOMEM, "cpu: no memory for %s", cx_op_table[op].name);
        int64_t keep = have < n ? have : n;
        for (int64_t r = 0; r < rows; r++) {
            char *d = (char *)padded + (size_t)(r * n) * es;
            if (keep)
                memcpy(d, (const char *)in->data + (size_t)(r * have) * es, (size_t)keep * es);
            memset(d + (size_t)keep * es, 0, (size_t)(n - keep) * es);
        }
        src = padded;
    }
    int inverse = op == CX_OP_IFFT;
    int rc = fn(t, src, out->data, rows, n, inverse);
    if (rc != 0 && fn != reference_rows) rc = reference_rows(t, src, out->data, rows, n, inverse);
    free(padded);
    if (rc != 0) return cx_fail(st, CX_ENOMEM, "cpu: no memory for %s", cx_op_table[op].name);
    double eps = cx_param_has(ps, CX_P_EPS) ? ps->p[CX_P_EPS].f : 0.0;
    if (eps > 0) clean(out, eps);
    return CX_OK;
}

cx_code cpu_fft(cx_op_id op, const cx_tensor *in, const cx_params *ps, cx_tensor *out,
                cx_status *st) {
    return cpu_fft_with(op, in, ps, out, reference_rows, st);
}
