/* Layout ops that copy rows, split across the pool's threads: reshape and squeeze (one copy of
 * the buffer), concatenate, slice with unit strides, and take along the first axis. Each is a
 * list of output rows, a row made of pieces copied from the inputs; the parts split the output's
 * bytes evenly, whatever the rows. The cpu driver's layout engine (one thread) runs every other
 * layout op, and these below BLAS_COPY_MIN bytes or with runs shorter than BLAS_COPY_RUN: the
 * same bits either way (test_blas's test_layout_copies compares them bit for bit on tensors large
 * enough to split; the differential suite's are smaller). Below them, sort, argsort, reverse and
 * pad run the cpu's own kernels on each thread's share of the first axis.
 *
 * Why: one thread copying 8 MB (two 1000 x 1000 f32 tensors concatenated) was far slower than
 * PyTorch's two, and so was a 1000 x 800 slice (bench/ops_survey.sh). */
#include <stddef.h>
#include <string.h>

#include "../../core/driver.h"
#include "../../core/tensor.h"
#include "../cpu/cpu_kernels.h"
#include "blas_kernels.h"

#define BLAS_COPY_MIN ((int64_t)1 << 19) /* bytes: 128K f32 elements, two parts of GRAIN_CHEAP */
#define BLAS_COPY_RUN 256                /* bytes: shorter runs are the cpu engine's */

typedef enum { ROWS_PLAIN, ROWS_PICKED, ROWS_SLICED } row_kind;

typedef struct {
    char *dst;
    int64_t rows, row_bytes;
    int n_pieces;
    int64_t len[CX_MAX_INPUTS]; /* each piece's bytes in a row */
    const char *base[CX_MAX_INPUTS];
    row_kind kind;
    const int64_t *pick; /* ROWS_PICKED: the source row of each output row */
    /* ROWS_SLICED: output row o is, over the axes `outer` (sizes shape), the input element at
     * byte offset sum of index * stride; one piece */
    int outer;
    int64_t shape[CX_MAX_RANK], stride[CX_MAX_RANK];
} rows_job;

/* where piece k of output row o starts in its input */
static const char *piece_src(const rows_job *j, int64_t o, int k) {
    switch (j->kind) {
    case ROWS_PICKED: return j->base[k] + j->pick[o] * j->len[k];
    case ROWS_SLICED: {
        int64_t off = 0;
        for (int a = j->outer - 1; a >= 0; a--) {
            off += o % j->shape[a] * j->stride[a];
            o /= j->shape[a];
        }
        return j->base[k] + off;
    }
    default: return j->base[k] + o * j->len[k];
    }
}

/* part `index` copies the output's bytes [total * index / parts, total * (index + 1) / parts) */
static void rows_part(void *ctx, int index, int parts) {
    const rows_job *j = ctx;
    int64_t total = j->rows * j->row_bytes;
    int64_t b = total * index / parts, end = total * (index + 1) / parts;
    while (b < end) {
        int64_t o = b / j->row_bytes, in_row = b % j->row_bytes;
        int k = 0;
        while (in_row >= j->len[k]) in_row -= j->len[k++];
        int64_t n = j->len[k] - in_row;
        if (n > end - b) n = end - b;
        memcpy(j->dst + b, piece_src(j, o, k) + in_row, (size_t)n);
        b += n;
    }
}

static bool run_rows(rows_job *j) {
    int64_t total = j->rows * j->row_bytes;
    if (total < BLAS_COPY_MIN) return false;
    for (int k = 0; k < j->n_pieces; k++)
        if (j->len[k] < BLAS_COPY_RUN && j->rows > 1) return false;
    int threads = blas_pool_threads();
    int64_t parts = total / (BLAS_COPY_MIN / 2);
    blas_parallel(parts > threads ? threads : (int)parts, false, rows_part, j);
    return true;
}

static bool copy_concatenate(const cx_tensor *const *in, int n_in, const cx_params *ps,
                             cx_tensor *out, rows_job *j) {
    int axis = (int)ps->p[CX_P_AXIS].i[0];
    if (n_in < 1 || n_in > CX_MAX_INPUTS || axis < 0 || axis >= out->desc.rank) return false;
    size_t es = cx_dtype_size(out->desc.dtype);
    j->rows = 1;
    for (int a = 0; a < axis; a++) j->rows *= out->desc.shape[a];
    j->n_pieces = 0;
    j->row_bytes = 0;
    for (int k = 0; k < n_in; k++) {
        int64_t len = (int64_t)es;
        for (int a = axis; a < in[k]->desc.rank; a++) len *= in[k]->desc.shape[a];
        if (len == 0) continue; /* an empty input adds nothing */
        j->len[j->n_pieces] = len;
        j->base[j->n_pieces++] = in[k]->data;
        j->row_bytes += len;
    }
    j->kind = ROWS_PLAIN;
    return j->n_pieces > 0 && run_rows(j);
}

/* unit strides: the output's rows are runs of the input. The run is the innermost axes the
 * slice keeps whole, with the first one it cuts; the axes before it index the rows. */
static bool copy_slice(const cx_tensor *in, const cx_params *ps, cx_tensor *out, rows_job *j) {
    const cx_desc *d = &in->desc;
    const int64_t *start = ps->p[CX_P_START].i;
    int rank = d->rank;
    if (rank < 1) return false;
    for (int a = 0; a < rank; a++)
        if (cx_param_has(ps, CX_P_STRIDES) && ps->p[CX_P_STRIDES].i[a] != 1 &&
            out->desc.shape[a] > 1)
            return false;
    size_t es = cx_dtype_size(d->dtype);
    int64_t stride[CX_MAX_RANK], off = 0; /* in bytes */
    cpu_strides(d, stride);
    for (int a = 0; a < rank; a++) {
        stride[a] *= (int64_t)es;
        off += start[a] * stride[a];
    }
    int cut = rank - 1; /* the outermost axis of the run */
    while (cut > 0 && out->desc.shape[cut] == d->shape[cut]) cut--;
    j->row_bytes = (int64_t)es;
    for (int a = cut; a < rank; a++) j->row_bytes *= out->desc.shape[a];
    j->rows = 1;
    for (int a = 0; a < cut; a++) {
        j->rows *= out->desc.shape[a];
        j->shape[a] = out->desc.shape[a];
        j->stride[a] = stride[a];
    }
    j->outer = cut;
    j->n_pieces = 1;
    j->len[0] = j->row_bytes;
    j->base[0] = (const char *)in->data + off;
    j->kind = ROWS_SLICED;
    return j->row_bytes > 0 && run_rows(j);
}

/* along the first axis: each index a row of the input; indices out of bounds are the cpu's to
 * report */
static bool copy_take(const cx_tensor *t, const cx_tensor *ix, const cx_params *ps, cx_tensor *out,
                      rows_job *j) {
    if (ps->p[CX_P_AXIS].i[0] != 0 || ix->desc.dtype != CX_S64 || t->desc.rank < 1) return false;
    cx_status st = {0};
    if (cx_check_indices(CX_OP_TAKE, &t->desc, ix->data, ix->numel, ps->p[CX_P_AXIS].i, 1, &st))
        return false;
    j->row_bytes = (int64_t)cx_dtype_size(t->desc.dtype);
    for (int a = 1; a < t->desc.rank; a++) j->row_bytes *= t->desc.shape[a];
    j->rows = ix->numel;
    j->n_pieces = 1;
    j->len[0] = j->row_bytes;
    j->base[0] = t->data;
    j->kind = ROWS_PICKED;
    j->pick = ix->data;
    return j->row_bytes > 0 && run_rows(j);
}

bool blas_layout(cx_op_id op, const cx_tensor *const *in, int n_in, const cx_params *ps,
                 cx_tensor *out) {
    static _Thread_local rows_job j; /* 6 KB: not on the stack of a dirty scheduler's NIF call */
    memset(&j, 0, offsetof(rows_job, len));
    j.dst = out->data;
    if (out->nbytes == 0 || n_in < 1) return false;
    switch (op) {
    case CX_OP_RESHAPE:
    case CX_OP_SQUEEZE:
        j.rows = 1;
        j.row_bytes = j.len[0] = (int64_t)out->nbytes;
        j.n_pieces = 1;
        j.base[0] = in[0]->data;
        j.kind = ROWS_PLAIN;
        return run_rows(&j);
    case CX_OP_CONCATENATE: return copy_concatenate(in, n_in, ps, out, &j);
    case CX_OP_SLICE: return n_in == 1 && copy_slice(in[0], ps, out, &j);
    case CX_OP_TAKE: return n_in == 2 && copy_take(in[0], in[1], ps, out, &j);
    default: return false;
    }
}

/* ==== ops on independent rows: the cpu's kernels on slices of the first axis ====================
 * sort and argsort along an axis other than the first, reverse of axes other than the first,
 * pad that does not crop the first axis nor pad inside it, and take_along_axis and the cumulative
 * ops along another axis than the first work on each index of the first axis apart: each part runs
 * the cpu driver's kernel on its rows (views of the input(s) and output, the same parameters; pad's
 * rows padded before and after the input's are filled by the first and the last part), so the
 * results are the cpu's bit for bit. */
typedef struct {
    cx_op_id op;
    const cx_tensor *in, *in2; /* in2: take_along_axis's indices, split as the tensor */
    cx_tensor *out;
    const cx_params *ps;
    _Atomic int failed;
} split_job;

static cx_tensor row_view(const cx_tensor *t, int64_t lo, int64_t hi) {
    cx_tensor v = {.desc = t->desc, .device = t->device};
    int64_t row = t->desc.shape[0] ? t->numel / t->desc.shape[0] : 0;
    size_t row_bytes = (size_t)row * cx_dtype_size(t->desc.dtype);
    v.desc.shape[0] = hi - lo;
    v.numel = row * (hi - lo);
    v.nbytes = row_bytes * (size_t)(hi - lo);
    v.data = (char *)t->data + row_bytes * (size_t)lo;
    return v;
}

/* runs the op on the cpu for input rows [lo, hi) into output rows [at, at + out_rows), pad's
 * first-axis pads set to {before, after} */
static void split_run(split_job *j, int64_t lo, int64_t hi, int64_t at, int64_t out_rows,
                      int64_t before, int64_t after) {
    cx_tensor a = row_view(j->in, lo, hi), o = row_view(j->out, at, at + out_rows);
    cx_params ps = *j->ps;
    if (j->op == CX_OP_PAD) {
        ps.p[CX_P_PADS].i[0] = before;
        ps.p[CX_P_PADS].i[1] = after;
    }
    cx_status st = {0};
    cx_tensor b = j->in2 ? row_view(j->in2, lo, hi) : a;
    const cx_tensor *in[2] = {&a, &b};
    if (cx_cpu_driver()->execute(NULL, j->op, in, j->in2 ? 2 : 1, &ps, &o, &st) != CX_OK)
        j->failed = 1;
}

/* its share of the input's rows; for pad, the first part also fills the rows padded before them
 * and the last those after (an empty input padded: all fill) */
static void split_part(void *ctx, int index, int parts) {
    split_job *j = ctx;
    int64_t rows = j->in->desc.shape[0];
    int64_t lo = rows * index / parts, hi = rows * (index + 1) / parts;
    int64_t before = j->op == CX_OP_PAD ? j->ps->p[CX_P_PADS].i[0] : 0;
    int64_t after = j->op == CX_OP_PAD ? j->ps->p[CX_P_PADS].i[1] : 0;
    if (index == 0 && before > 0) split_run(j, 0, 0, 0, before, before, 0);
    if (lo < hi) split_run(j, lo, hi, before + lo, hi - lo, 0, 0);
    if (index == parts - 1 && after > 0) split_run(j, rows, rows, before + rows, after, 0, after);
}

/* whether op's work is independent along the first axis (and worth splitting) */
static bool splits_rows(cx_op_id op, const cx_tensor *in, const cx_params *ps,
                        const cx_tensor *out) {
    if (in->desc.rank < 2 || in->desc.shape[0] < 2) return false;
    if (op != CX_OP_PAD && out->desc.shape[0] != in->desc.shape[0]) return false;
    switch (op) {
    case CX_OP_SORT:
    case CX_OP_ARGSORT: return ps->p[CX_P_AXIS].i[0] != 0 && in->numel >= (1 << 14);
    case CX_OP_REVERSE:
        for (int k = 0; k < ps->p[CX_P_AXES].n; k++)
            if (ps->p[CX_P_AXES].i[k] == 0) return false;
        return (int64_t)out->nbytes >= BLAS_COPY_MIN;
    case CX_OP_TAKE_ALONG_AXIS:
    case CX_OP_CUMULATIVE_SUM:
    case CX_OP_CUMULATIVE_PRODUCT:
    case CX_OP_CUMULATIVE_MAX:
    case CX_OP_CUMULATIVE_MIN: return ps->p[CX_P_AXIS].i[0] != 0 && in->numel >= (1 << 14);
    case CX_OP_PAD:
        /* the first axis padded (not cropped), without interior padding */
        return ps->p[CX_P_PADS].i[0] >= 0 && ps->p[CX_P_PADS].i[1] >= 0 &&
               ps->p[CX_P_PADS].i[2] == 0 && (int64_t)out->nbytes >= BLAS_COPY_MIN;
    default: return false;
    }
}

bool blas_split_rows(cx_op_id op, const cx_tensor *const *in, int n_in, const cx_params *ps,
                     cx_tensor *out) {
    if (n_in != (op == CX_OP_TAKE_ALONG_AXIS ? 2 : 1) || !splits_rows(op, in[0], ps, out))
        return false;
    int threads = blas_pool_threads();
    int64_t rows = in[0]->desc.shape[0];
    split_job j = {op, in[0], n_in == 2 ? in[1] : NULL, out, ps, 0};
    blas_parallel(rows < threads ? (int)rows : threads, false, split_part, &j);
    return !j.failed; /* else the caller runs the whole op on the cpu, which says why */
}
