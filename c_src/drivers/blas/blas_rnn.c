/* recurrent (core/decompose_rnn.c) in f32: the whole sequence in one call. R is transposed once
 * per call into panels; each step is then one product h R^T onto rows of the bias (the vector
 * tables' gemm_rows_f32, a panel at a time, where OpenBLAS packed all of R again for every
 * step's product) and one pass per batch row over the gates with the vector kernels, in the
 * order and with the roundings of the decomposition's ops. The states are read from the result
 * where the step before wrote them. A short sequence (blas_kernels.h) is not packed: its few
 * products run on R itself, with OpenBLAS. */
#include <cblas.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "../cpu/cpu_kernels.h"
#include "blas_kernels.h"
#include "blas_simd.h"

typedef struct {
    const simd_table *t;
    int64_t cell;
    int64_t hidden;
} cell_ctx;

/* The gates of one batch row: p (width values) holds h R^T + Rb, x the step's input; the new
 * states go to y (h, then c for lstm); h_prev and c_prev are the states before. */
static void row_gates(const cell_ctx *k, float *p, const float *x, const float *h_prev,
                      const float *c_prev, float *y) {
    const simd_table *t = k->t;
    int64_t h = k->hidden;
    simd_binary_f32 add = t->binary_f32[CX_OP_ADD], mul = t->binary_f32[CX_OP_MULTIPLY];
    simd_unary_f32 sigmoid = t->unary_f32[CX_OP_SIGMOID], tanh_ = t->unary_f32[CX_OP_TANH];
    if (k->cell == CX_CELL_TANH) {
        add(p, x, p, 1, 1, h);
        tanh_(y, p, h);
    } else if (k->cell == CX_CELL_LSTM) {
        /* i, o, f, c: c' = f c + i tanh(g), h' = o tanh(c') */
        add(p, x, p, 1, 1, 4 * h);
        sigmoid(p, p, 3 * h);
        tanh_(p + 3 * h, p + 3 * h, h);
        mul(y + h, p + 2 * h, c_prev, 1, 1, h);
        mul(p + 3 * h, p, p + 3 * h, 1, 1, h);
        add(y + h, y + h, p + 3 * h, 1, 1, h);
        tanh_(p + 3 * h, y + h, h);
        mul(y, p + h, p + 3 * h, 1, 1, h);
    } else {
        /* z, r, n: n = tanh(x_n + r (h R_n^T + Rb_n)), h' = (1 - z) n + z h */
        static const float one = 1.0f;
        add(p, x, p, 1, 1, 2 * h);
        sigmoid(p, p, 2 * h);
        mul(p + 2 * h, p + h, p + 2 * h, 1, 1, h);
        add(p + 2 * h, x + 2 * h, p + 2 * h, 1, 1, h);
        tanh_(p + 2 * h, p + 2 * h, h);
        t->binary_f32[CX_OP_SUBTRACT](p + h, &one, p, 0, 1, h);
        mul(p + h, p + h, p + 2 * h, 1, 1, h);
        mul(p, p, h_prev, 1, 1, h);
        add(y, p + h, p, 1, 1, h);
    }
}

/* Rows of a batch are independent through the whole sequence (a row's next state reads that
 * row's states alone), so the batch is split between the threads once, for every step: no
 * thread waits for another between steps. */
#define ROWS_PER_PART 4

typedef struct {
    cell_ctx k;
    const float *x, *r, *rp, *rb, *h0, *c0; /* rp: R's panels (pack_panels) */
    float *y;
    int64_t steps, batch, width, wpad, sw;
    bool reverse;
    atomic_bool failed;
} seq_job;

/* The product of one step for `rows` rows: p (rows wpad apart) += h R^T, a panel at a time, or
 * without panels by OpenBLAS on R itself */
static void step_product(const seq_job *j, float *p, const float *h, int64_t ld, int64_t rows) {
    int nr = j->k.t->gemm_nr;
    int64_t hidden = j->k.hidden;
    if (hidden == 0) return;
    if (!j->rp && rows == 1)
        cblas_sgemv(CblasRowMajor, CblasNoTrans, (int)j->width, (int)hidden, 1.0f, j->r,
                    (int)hidden, h, 1, 1.0f, p, 1);
    else if (!j->rp)
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)rows, (int)j->width, (int)hidden,
                    1.0f, h, (int)ld, j->r, (int)hidden, 1.0f, p, (int)j->wpad);
    else
        for (int64_t q = 0; q < j->wpad; q += nr)
            j->k.t->gemm_rows_f32(p + q, j->wpad, h, ld, j->rp + q * hidden, nr, rows, nr, hidden);
}

static void seq_part(void *ctx, int index, int parts) {
    seq_job *j = ctx;
    int64_t lo = j->batch * index / parts, hi = j->batch * (index + 1) / parts, rows = hi - lo;
    int64_t hidden = j->k.hidden, width = j->width, sw = j->sw;
    if (rows == 0) return;
    float *p = cpu_buffer_get(sizeof(float) * (size_t)(rows * j->wpad));
    if (!p) {
        atomic_store(&j->failed, true);
        return;
    }
    /* the states before the step: h0 and c0 (rows hidden apart), then the rows of the step
     * written last (sw apart) */
    const float *h_prev = j->h0 + lo * hidden, *c_prev = j->c0 + lo * hidden;
    int64_t ld_h = hidden, ld_c = hidden;
    for (int64_t s = 0; s < j->steps; s++) {
        int64_t at = j->reverse ? j->steps - 1 - s : s;
        for (int64_t b = 0; b < rows; b++)
            memcpy(p + b * j->wpad, j->rb, sizeof(float) * (size_t)width);
        step_product(j, p, h_prev, ld_h, rows);
        float *ys = j->y + (at * j->batch + lo) * sw;
        const float *xs = j->x + (at * j->batch + lo) * width;
        for (int64_t b = 0; b < rows; b++)
            row_gates(&j->k, p + b * j->wpad, xs + b * width, h_prev + b * ld_h, c_prev + b * ld_c,
                      ys + b * sw);
        h_prev = ys;
        ld_h = sw;
        if (j->k.cell == CX_CELL_LSTM) {
            c_prev = ys + hidden;
            ld_c = sw;
        }
    }
    cpu_buffer_put(p);
}

/* R {width, hidden} as panels of nr columns of R^T: panel q holds R's rows q .. q + nr as hidden
 * rows of nr values, zeros past R's last row. A full panel is the transpose of nr contiguous
 * rows of R (the vector kernel); the product then reads each panel's k rows one after another,
 * where reading R^T's rows in place, a whole row apart from one k to the next, put them in few
 * of L1's sets. Panels and products are in the cpu's buffers, 64-byte aligned: from malloc's
 * 16-byte alignment a vector load of a panel straddled two cache lines every time. */
static float *pack_panels(const simd_table *t, const float *r, int64_t width, int64_t hidden,
                          int nr, int64_t wpad) {
    float *rp = cpu_buffer_get(sizeof(float) * (size_t)(wpad * hidden));
    if (!rp) return NULL;
    for (int64_t q = 0; q < wpad; q += nr) {
        float *panel = rp + q * hidden;
        if (q + nr <= width) {
            t->transpose_f32(panel, r + q * hidden, nr, hidden);
            continue;
        }
        memset(panel, 0, sizeof(float) * (size_t)(hidden * nr));
        for (int64_t c = 0; q + c < width; c++)
            for (int64_t kk = 0; kk < hidden; kk++) panel[kk * nr + c] = r[(q + c) * hidden + kk];
    }
    return rp;
}

bool blas_recurrent_packs(const cx_desc *x, const cx_desc *r) {
    int64_t steps = x->shape[0], batch = x->shape[1], width = r->shape[0], hidden = r->shape[1];
    /* OpenBLAS takes ints: a short sequence that exceeds them is packed all the same */
    return hidden > 0 &&
           (steps * batch >= BLAS_RNN_PACK_MIN || !blas_dims_fit(batch, width, hidden));
}

cx_code blas_recurrent(const cx_tensor *const *in, const cx_params *ps, cx_tensor *out,
                       cx_status *st) {
    seq_job j = {.k = {blas_simd(), ps->p[CX_P_CELL].i[0], in[1]->desc.shape[1]},
                 .x = in[0]->data,
                 .r = in[1]->data,
                 .rb = in[2]->data,
                 .h0 = in[3]->data,
                 .c0 = in[4]->data,
                 .y = out->data,
                 .steps = in[0]->desc.shape[0],
                 .batch = in[0]->desc.shape[1],
                 .width = in[1]->desc.shape[0],
                 .sw = out->desc.shape[2],
                 .reverse = ps->p[CX_P_REVERSE].i[0] != 0};
    if (out->numel == 0) return CX_OK;
    j.wpad = j.width;
    float *rp = NULL;
    if (blas_recurrent_packs(&in[0]->desc, &in[1]->desc)) {
        int nr = j.k.t->gemm_nr;
        j.wpad = (j.width + nr - 1) / nr * nr;
        if (!(rp = pack_panels(j.k.t, j.r, j.width, j.k.hidden, nr, j.wpad)))
            return cx_fail(st, CX_ENOMEM, "blas: no memory for the buffers of recurrent");
        j.rp = rp;
    }
    int parts = (int)(j.batch / ROWS_PER_PART);
    blas_parallel(parts > 1 ? parts : 1, true, seq_part, &j);
    cpu_buffer_put(rp);
    return atomic_load(&j.failed)
               ? cx_fail(st, CX_ENOMEM, "blas: no memory for the buffers of recurrent")
               : CX_OK;
}
