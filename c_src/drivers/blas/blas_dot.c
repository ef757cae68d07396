/* DOT through OpenBLAS: Nx.dot/6 as a batch of GEMMs, one blas_gemm (blas_gemm.c) per batch
 * element.
 *
 * For one batch element the free axes of a index the rows (M), the contracted axes the inner
 * dimension (K) and the free axes of b the columns (N); the output, batch ++ free a ++ free b, is
 * one row-major M x N block per batch element (the cpu driver's dot.c reads them the same way).
 *
 * An operand is passed to OpenBLAS in place when it has the GEMM's type and its rows and columns
 * each walk memory with one stride, one of them 1: a plain matrix (NoTrans, ld = row stride) or
 * a transposed one (Trans, ld = column stride). That covers the contraction axes Nx users write
 * (last of a with first of b, either transposed, batch axes in front). Anything else, and every
 * f16/bf16 operand, is first packed into a contiguous f32 (or f64) matrix. f16/bf16 products are
 * computed in f32 and rounded once, as the cpu driver does. */
#include <cblas.h>
#include <limits.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "../../core/half_array.h"
#include "../cpu/cpu_kernels.h"
#include "blas_kernels.h"

bool blas_dims_fit(int64_t m, int64_t n, int64_t k) {
    return m <= INT_MAX && n <= INT_MAX && k <= INT_MAX;
}

/* One operand as a batch of rows x cols matrices. */
typedef struct {
    const cx_tensor *t;
    cpu_axes_view batch, rows, cols;
    int64_t nrows, ncols;
    bool direct;           /* read in place by OpenBLAS */
    bool widen;            /* a half whose matrix is one contiguous block: widened as a block */
    CBLAS_TRANSPOSE trans; /* when direct or widen */
    int64_t ld;            /* when direct or widen */
    int64_t *roff, *coff;  /* when packed: offsets of its rows and columns */
    void *packed;          /* when packed: nrows x ncols, row-major, in the GEMM's type */
} operand;

/* Whether the GEMM reads the operand in place (its type is the GEMM's, its rows and columns each
 * walk memory with one stride, one of them 1); sets direct, trans and ld. */
static bool in_place(operand *x, cx_dtype gemm_type) {
    int64_t rs, cs;
    x->nrows = cpu_view_count(&x->rows);
    x->ncols = cpu_view_count(&x->cols);
    x->direct = false;
    if (x->t->desc.dtype == gemm_type && cpu_view_stride(&x->rows, 0, &rs) &&
        cpu_view_stride(&x->cols, 0, &cs)) {
        int64_t need_n = x->ncols > 1 ? x->ncols : 1, need_t = x->nrows > 1 ? x->nrows : 1;
        if ((cs == 1 || cs == 0) && (rs == 0 || rs >= need_n) && rs <= INT_MAX) {
            x->direct = true;
            x->trans = CblasNoTrans;
            x->ld = rs ? rs : need_n;
            return true;
        }
        if (rs == 1 && cs >= need_t && cs <= INT_MAX) {
            x->direct = true;
            x->trans = CblasTrans;
            x->ld = cs;
            return true;
        }
    }
    return false;
}

/* Whether the operand is an f16/bf16 matrix stored as one block, row- or column-major, which
 * the vector conversions widen whole (the gather of pack_f32 goes element by element through
 * offset tables); sets widen, and trans and ld for the widened copy. */
static bool half_block(operand *x) {
    int64_t rs, cs;
    x->nrows = cpu_view_count(&x->rows);
    x->ncols = cpu_view_count(&x->cols);
    x->trans = CblasNoTrans;
    x->ld = x->ncols > 1 ? x->ncols : 1;
    x->widen = false;
    if ((x->t->desc.dtype == CX_F16 || x->t->desc.dtype == CX_BF16) &&
        cpu_view_stride(&x->rows, 0, &rs) && cpu_view_stride(&x->cols, 0, &cs) && x->nrows > 1 &&
        x->ncols > 1 && x->nrows <= INT_MAX && x->ncols <= INT_MAX) {
        if (cs == 1 && rs == x->ncols) {
            x->widen = true;
        } else if (rs == 1 && cs == x->nrows) {
            x->widen = true;
            x->trans = CblasTrans;
            x->ld = x->nrows;
        }
    }
    return x->widen;
}

/* Decides how OpenBLAS reads the operand: in place (BLAS needs ld >= the stored row length and
 * one unit stride), or packed, for which it builds the offset tables and the scratch. */
static bool operand_prepare(operand *x, cx_dtype gemm_type) {
    if (in_place(x, gemm_type)) return true;
    size_t es = gemm_type == CX_F64 ? sizeof(double) : sizeof(float);
    size_t elems = (size_t)(x->nrows * x->ncols);
    if (gemm_type != CX_F32 || !half_block(x)) {
        x->widen = false;
        x->trans = CblasNoTrans;
        x->ld = x->ncols > 1 ? x->ncols : 1;
    }
    x->packed = cpu_buffer_get(es * elems); /* cached: no page faults in a loop */
    if (x->widen) return x->packed != NULL; /* no offset tables: the block is read whole */
    x->roff = cpu_view_offsets(&x->rows);
    x->coff = cpu_view_offsets(&x->cols);
    return x->roff && x->coff && x->packed;
}

static void operand_release(operand *x) {
    free(x->roff);
    free(x->coff);
    cpu_buffer_put(x->packed);
    x->roff = x->coff = NULL;
    x->packed = NULL;
}

/* Packs the operand's matrix at element offset base into x->packed, converting to f32. */
static void pack_f32(const operand *x, int64_t base) {
    if (x->widen)
        blas_widen(x->t->desc.dtype, (const uint16_t *)x->t->data + base, x->packed,
                   x->nrows * x->ncols);
    else
        cpu_gather_f32(x->t, x->roff, x->coff, base, x->nrows, x->ncols, x->packed);
}

static void pack_f64(const operand *x, int64_t base) {
    cpu_gather_f64(x->t, x->roff, x->coff, base, x->nrows, x->ncols, x->packed);
}

typedef struct {
    operand a, b;
    int64_t m, n, k, batch;
} dot_job;

static void job_init(const cx_tensor *a, const cx_tensor *b, const cx_params *ps, dot_job *j) {
    const cx_param *ca = &ps->p[CX_P_CONTRACT_A], *ba = &ps->p[CX_P_BATCH_A];
    const cx_param *cb = &ps->p[CX_P_CONTRACT_B], *bb = &ps->p[CX_P_BATCH_B];
    memset(j, 0, sizeof *j);
    j->a.t = a;
    j->b.t = b;
    cpu_view_of(a, ba->i, ba->n, &j->a.batch);
    cpu_view_of(b, bb->i, bb->n, &j->b.batch);
    cpu_free_view(a, ca, ba, &j->a.rows);
    cpu_view_of(a, ca->i, ca->n, &j->a.cols);
    cpu_view_of(b, cb->i, cb->n, &j->b.rows);
    cpu_free_view(b, cb, bb, &j->b.cols);
    j->m = cpu_view_count(&j->a.rows);
    j->k = cpu_view_count(&j->a.cols);
    j->n = cpu_view_count(&j->b.cols);
    j->batch = cpu_view_count(&j->a.batch);
}

/* A half product's f32 block rounded into its place in the output, by the thread that computed
 * it, while it is in that core's cache. */
typedef struct {
    const float *c32;
    uint16_t *out;
    cx_dtype type;
} narrow_ctx;

static void narrow_block(void *ctx, int part, void *c, int rows, int cols, int ldc) {
    (void)part;
    const narrow_ctx *x = ctx;
    size_t at = (size_t)((const float *)c - x->c32);
    for (int r = 0; r < rows; r++)
        blas_narrow_serial(x->type, (const float *)c + (size_t)r * (size_t)ldc,
                           x->out + at + (size_t)r * (size_t)ldc, cols);
}

/* ---- f16/bf16 products on private copies ----------------------------------------------------
 * A half product runs in f32: its operands widened, the result rounded back. Widened once into
 * shared buffers, every call made the cores trade cache lines: the other thread's part of the
 * product read what this one had widened, and the next call's widening wrote over lines the
 * other core held (f16 256 x 256 ran slower than f32; widened by one thread, slower still). So
 * each thread of the product widens the operands itself, into a scratch only it
 * uses (kept from call to call, as the cores' caches are), multiplies its block of rows (or
 * columns) and rounds that block into the output. What a thread widens: the whole of the
 * operand it reads whole, and of the other only its rows (or columns) where those are one
 * block. A thread's scratch is at most PRIVATE_MAX floats (4 MiB); larger products, whose
 * arithmetic outweighs the widening, keep the shared buffers. */
#define PRIVATE_MAX ((size_t)1 << 20)

static _Thread_local float *private_buf;
static _Thread_local size_t private_cap;

/* this thread's scratch of at least `floats`, or NULL */
static float *private_scratch(size_t floats) {
    if (floats > private_cap) {
        free(private_buf);
        private_buf = aligned_alloc(64, (floats + 15) / 16 * 16 * sizeof(float));
        private_cap = private_buf ? floats : 0;
    }
    return private_buf;
}

typedef struct {
    const blas_half_gemm *g;
    bool by_cols;
    int span;
    atomic_bool failed; /* a part found no memory: nothing is done, the caller runs it otherwise */
} private_job;

/* Whether a part's share of the split operand (rows of op(A), or columns of op(B)) is one block
 * of the stored matrix: rows of a row-major one, columns of a column-major one. */
static bool share_is_block(const blas_half_gemm *g, bool by_cols) {
    return by_cols ? g->tb : !g->ta;
}

/* The floats of a part of `len` rows (or columns): the whole operand, its share of the other,
 * its block of C. */
static int64_t private_floats(const blas_half_gemm *g, bool by_cols, int64_t len) {
    int64_t a = g->m * g->k, b = g->k * g->n;
    int64_t ld = by_cols ? (g->tb ? g->k : g->n) : (g->ta ? g->m : g->k);
    return (by_cols ? a : b) +
           (share_is_block(g, by_cols) ? len * ld
            : by_cols                  ? b
                                       : a) +
           len * (by_cols ? g->m : g->n);
}

static void private_part(void *ctx, int index, int parts) {
    private_job *p = ctx;
    const blas_half_gemm *g = p->g;
    int64_t lo = (int64_t)p->span * index / parts, hi = (int64_t)p->span * (index + 1) / parts;
    if (lo == hi) return;
    bool by = p->by_cols, block = share_is_block(g, by);
    int64_t lda = g->ta ? g->m : g->k, ldb = g->tb ? g->k : g->n;
    int64_t wlen = by ? g->m * g->k : g->k * g->n, sld = by ? ldb : lda;
    int64_t len = block ? (hi - lo) * sld : by ? g->k * g->n : g->m * g->k;
    int64_t m = by ? g->m : hi - lo, n = by ? hi - lo : g->n;
    float *buf = private_scratch((size_t)private_floats(g, by, hi - lo));
    if (!buf) {
        atomic_store(&p->failed, true);
        return;
    }
    float *w = buf, *s = buf + wlen, *c = s + len;
    blas_widen_serial(g->type, by ? g->a : g->b, w, wlen);
    /* the block of the share, or the whole operand and the share lo rows (or columns) in: a
     * column lo of a row-major matrix, a row lo of a column-major one */
    blas_widen_serial(g->type, (by ? g->b : g->a) + (block ? lo * sld : 0), s, len);
    if (!block) s += lo;
    /* the bias in every row of the block first, the product added onto it, as dense's GEMM */
    if (g->bias) {
        for (int64_t i = 0; i < m; i++)
            for (int64_t jj = 0; jj < n; jj++)
                c[i * n + jj] = g->bias[g->bias_n > 1 ? (by ? lo : 0) + jj : 0];
    }
    cblas_sgemm(CblasRowMajor, g->ta ? CblasTrans : CblasNoTrans, g->tb ? CblasTrans : CblasNoTrans,
                (int)m, (int)n, (int)g->k, 1.0f, by ? w : s, (int)lda, by ? s : w, (int)ldb,
                g->bias ? 1.0f : 0.0f, c, (int)n);
    if (g->epilogue) g->epilogue(g->epilogue_ctx, index, c, (int)m, (int)n, (int)n);
    if (!by) {
        blas_narrow_serial(g->type, c, g->out + lo * g->n, m * n);
        return;
    }
    for (int64_t r = 0; r < m; r++)
        blas_narrow_serial(g->type, c + r * n, g->out + r * g->n + lo, n);
}

bool blas_half_gemm_private(const blas_half_gemm *g) {
    if (g->m <= 0 || g->n <= 0 || g->k <= 0 || !blas_dims_fit(g->m, g->n, g->k)) return false;
    bool by_cols;
    int parts = blas_gemm_parts((int)g->m, (int)g->n, (int)g->k, &by_cols);
    int64_t span = by_cols ? g->n : g->m;
    if ((size_t)private_floats(g, by_cols, (span + parts - 1) / parts) > PRIVATE_MAX) return false;
    private_job p = {g, by_cols, (int)span, false};
    blas_parallel(parts, true, private_part, &p);
    return !atomic_load(&p.failed);
}

/* The product on private copies when it fits (one batch element, both operands half blocks of
 * the output's type, small enough); false when it does not, having written nothing. */
static bool dot_private(dot_job *j, cx_tensor *out) {
    cx_dtype t = out->desc.dtype;
    if (j->batch != 1 || j->a.t->desc.dtype != t || j->b.t->desc.dtype != t || !half_block(&j->a) ||
        !half_block(&j->b))
        return false;
    blas_half_gemm g = {.type = t,
                        .a = j->a.t->data,
                        .b = j->b.t->data,
                        .ta = j->a.trans == CblasTrans,
                        .tb = j->b.trans == CblasTrans,
                        .m = j->m,
                        .n = j->n,
                        .k = j->k,
                        .out = out->data};
    return blas_half_gemm_private(&g);
}

/* f32, f16 and bf16: sgemm, into an f32 scratch that is rounded when the output is a half. */
static cx_code dot_f32(dot_job *j, cx_tensor *out, cx_status *st) {
    int64_t m = j->m, n = j->n, k = j->k;
    bool half = out->desc.dtype != CX_F32;
    if (half && dot_private(j, out)) return CX_OK;
    float *c32 = NULL;
    bool ok = operand_prepare(&j->a, CX_F32) && operand_prepare(&j->b, CX_F32);
    ok = ok && (!half || (c32 = cpu_buffer_get(sizeof(float) * (size_t)(m * n))));
    cpu_batch_walk w = {{0}, 0, 0};
    for (int64_t bi = 0; ok && bi < j->batch; bi++, cpu_batch_next(&j->a.batch, &j->b.batch, &w)) {
        const float *a = j->a.packed, *b = j->b.packed;
        if (j->a.direct)
            a = (const float *)j->a.t->data + w.a;
        else
            pack_f32(&j->a, w.a);
        if (j->b.direct)
            b = (const float *)j->b.t->data + w.b;
        else
            pack_f32(&j->b, w.b);
        float *c = half ? c32 : (float *)out->data + bi * m * n;
        narrow_ctx nc = {c32, (uint16_t *)out->data + bi * m * n, out->desc.dtype};
        blas_gemm(&(blas_gemm_args){false, j->a.trans, j->b.trans, (int)m, (int)n, (int)k, a,
                                    (int)j->a.ld, b, (int)j->b.ld, 0.0, c, (int)n,
                                    half ? narrow_block : NULL, half ? &nc : NULL});
    }
    cpu_buffer_put(c32);
    return ok ? CX_OK : cx_fail(st, CX_ENOMEM, "blas: no memory for the buffers of dot");
}

static cx_code dot_f64(dot_job *j, cx_tensor *out, cx_status *st) {
    int64_t m = j->m, n = j->n, k = j->k;
    bool ok = operand_prepare(&j->a, CX_F64) && operand_prepare(&j->b, CX_F64);
    cpu_batch_walk w = {{0}, 0, 0};
    for (int64_t bi = 0; ok && bi < j->batch; bi++, cpu_batch_next(&j->a.batch, &j->b.batch, &w)) {
        const double *a = j->a.packed, *b = j->b.packed;
        if (j->a.direct)
            a = (const double *)j->a.t->data + w.a;
        else
            pack_f64(&j->a, w.a);
        if (j->b.direct)
            b = (const double *)j->b.t->data + w.b;
        else
            pack_f64(&j->b, w.b);
        blas_gemm(&(blas_gemm_args){true, j->a.trans, j->b.trans, (int)m, (int)n, (int)k, a,
                                    (int)j->a.ld, b, (int)j->b.ld, 0.0,
                                    (double *)out->data + bi * m * n, (int)n, NULL, NULL});
    }
    return ok ? CX_OK : cx_fail(st, CX_ENOMEM, "blas: no memory for the buffers of dot");
}

/* A bf16 or f32 product of one batch element whose operands oneDNN reads in place: its shape. */
static bool dnnl_shape(dot_job *j, blas_mm_shape *s) {
    cx_dtype t = j->a.t->desc.dtype;
    if (j->batch != 1 || (t != CX_BF16 && t != CX_F32) || j->b.t->desc.dtype != t ||
        !in_place(&j->a, t) || !in_place(&j->b, t))
        return false;
    *s = (blas_mm_shape){j->m,
                         j->n,
                         j->k,
                         j->a.ld,
                         j->b.ld,
                         j->a.trans == CblasTrans,
                         j->b.trans == CblasTrans,
                         false,
                         t == CX_F32,
                         false};
    return true;
}

/* An f16/bf16 product of one batch element whose operands are half blocks: the shape of the
 * product of their widened f32 copies, for oneDNN's f32 matmul. */
static bool widened_shape(dot_job *j, blas_mm_shape *s) {
    cx_dtype t = j->a.t->desc.dtype;
    if (j->batch != 1 || (t != CX_F16 && t != CX_BF16) || j->b.t->desc.dtype != t ||
        !half_block(&j->a) || !half_block(&j->b))
        return false;
    *s = (blas_mm_shape){
        j->m,  j->n, j->k, j->a.ld, j->b.ld, j->a.trans == CblasTrans, j->b.trans == CblasTrans,
        false, true, true};
    return true;
}

/* blas_dnnl_matmul_path of the shape oneDNN would run the product as, natively or widened (in
 * *s), or 0 when neither fits. Widened only where oneDNN takes no native one (not while the
 * native one is being built, 3: that would build a second class for the same product). */
static int dnnl_path(dot_job *j, cx_dtype out, blas_mm_shape *s) {
    int path = (out == CX_BF16 || out == CX_F32) && dnnl_shape(j, s) ? blas_dnnl_matmul_path(s) : 0;
    if (path == 0 && (out == CX_F16 || out == CX_BF16) && widened_shape(j, s))
        path = blas_dnnl_matmul_path(s);
    return path;
}

/* The product of widened copies on oneDNN, rounded into out; false when it could not run (the
 * operands released, nothing written). */
static bool dot_widened_dnnl(dot_job *j, const blas_mm_shape *s, cx_tensor *out) {
    float *c32 = NULL;
    bool ok = operand_prepare(&j->a, CX_F32) && operand_prepare(&j->b, CX_F32) && j->a.widen &&
              j->b.widen && (c32 = cpu_buffer_get(sizeof(float) * (size_t)(j->m * j->n)));
    if (ok) {
        pack_f32(&j->a, 0);
        pack_f32(&j->b, 0);
        ok = blas_dnnl_matmul(s, j->a.packed, j->b.packed, c32);
    }
    if (ok) blas_narrow(out->desc.dtype, c32, out->data, j->m * j->n);
    cpu_buffer_put(c32);
    operand_release(&j->a);
    operand_release(&j->b);
    return ok;
}

const char *blas_dot_library(const cx_desc *a, const cx_desc *b, const cx_params *ps) {
    if ((a->dtype != CX_BF16 && a->dtype != CX_F32 && a->dtype != CX_F16) || b->dtype != a->dtype ||
        !ps)
        return "openblas";
    cx_tensor ta = {.desc = *a}, tb = {.desc = *b};
    dot_job j;
    blas_mm_shape s;
    job_init(&ta, &tb, ps, &j);
    return j.k > 0 && dnnl_path(&j, a->dtype, &s) == 1 ? "onednn" : "openblas";
}

cx_code blas_dot(const cx_tensor *a, const cx_tensor *b, const cx_params *ps, cx_tensor *out,
                 cx_status *st) {
    cx_dtype t = out->desc.dtype;
    if (t != CX_F32 && t != CX_F64 && t != CX_F16 && t != CX_BF16)
        return cpu_dot(a, b, ps, out, st);
    if (out->numel == 0) return CX_OK;
    dot_job j;
    job_init(a, b, ps, &j);
    if (j.k == 0) {
        memset(out->data, 0, out->nbytes); /* all-zero bits are zero in every float type */
        return CX_OK;
    }
    if (!blas_dims_fit(j.m, j.n, j.k)) return cpu_dot(a, b, ps, out, st);
    blas_mm_shape s;
    int path = dnnl_path(&j, t, &s);
    if (path == 1 && (s.widened ? dot_widened_dnnl(&j, &s, out)
                                : blas_dnnl_matmul(&s, a->data, b->data, out->data)))
        return CX_OK;
    double t0 = blas_seconds();
    cx_code rc = t == CX_F64 ? dot_f64(&j, out, st) : dot_f32(&j, out, st);
    if (path == 2 && rc == CX_OK) blas_dnnl_matmul_record(&s, blas_seconds() - t0);
    operand_release(&j.a);
    operand_release(&j.b);
    return rc;
}
