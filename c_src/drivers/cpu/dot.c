/* The DOT kind: Nx.dot/6 as a batch of matrix products. For one batch element the free axes
 * of a index the rows (M), the contracted axes the inner dimension (K) and the free axes of b
 * the columns (N); the output, batch ++ free a ++ free b, is one row-major M x N block per
 * batch element.
 *
 * f32 and f64 run a cache-blocked GEMM (Goto/BLIS layout: panels of A and B packed into the
 * order a register-tiled micro-kernel reads them). When an operand's rows and columns each
 * collapse to a single stride, which covers plain and transposed matrices, the GEMM reads it in
 * place; otherwise it is first gathered into a contiguous matrix. f16/bf16 are gathered into
 * f32, multiplied in f32 and rounded once. Integers multiply in uint64, wrapping, and wrap once
 * more into the output type. */
#include <stdlib.h>
#include <string.h>

#include "../../core/half_array.h"
#include "cpu_kernels.h"

/* Register tile of the micro-kernel: MR x NR accumulators. With 128-bit vectors, the baseline
 * on x86-64, 6 x 8 floats (or 6 x 4 doubles) is 12 vector registers, leaving room for the two
 * rows of B and a broadcast of A. */
#define MR     6
#define NR_F32 8
#define NR_F64 4
/* Cache blocks: a KC x NR panel of B stays in L1, an MC x KC block of A in L2, a KC x NC block
 * of B in the last-level cache. */
#define KC 256
#define MC 96
#define NC 2048

static int64_t min64(int64_t a, int64_t b) {
    return a < b ? a : b;
}

/* Elements of GEMM scratch for these sizes: an A block and a B block, each in whole panels. */
static size_t work_elems(int64_t m, int64_t n, int64_t k, int64_t nr) {
    int64_t kc = min64(KC, k), mc = min64(MC, m), nc = min64(NC, n);
    return (size_t)(((mc + MR - 1) / MR * MR + (nc + nr - 1) / nr * nr) * kc);
}

/* The GEMM, C = A B with A m x k and B k x n given by row and column strides, C row-major with
 * leading dimension ldc. T is the element type, NR its tile width. */
#define GEMM(T, sfx, NR)                                                                           \
    /* rows x kc of A into MR-row panels, zero-padded to whole panels */                           \
    static void pack_a_##sfx(const T *a, int64_t rs, int64_t cs, int64_t rows, int64_t kc,         \
                             T *dst) {                                                             \
        for (int64_t i0 = 0; i0 < rows; i0 += MR, dst += MR * kc) {                                \
            int64_t mr = min64(MR, rows - i0);                                                     \
            for (int64_t p = 0; p < kc; p++)                                                       \
                for (int64_t i = 0; i < MR; i++)                                                   \
                    dst[p * MR + i] = i < mr ? a[(i0 + i) * rs + p * cs] : 0;                      \
        }                                                                                          \
    }                                                                                              \
    /* kc x cols of B into NR-column panels, zero-padded */                                        \
    static void pack_b_##sfx(const T *b, int64_t rs, int64_t cs, int64_t kc, int64_t cols,         \
                             T *dst) {                                                             \
        for (int64_t j0 = 0; j0 < cols; j0 += NR, dst += NR * kc) {                                \
            int64_t nr = min64(NR, cols - j0);                                                     \
            for (int64_t p = 0; p < kc; p++)                                                       \
                for (int64_t j = 0; j < NR; j++)                                                   \
                    dst[p * NR + j] = j < nr ? b[p * rs + (j0 + j) * cs] : 0;                      \
        }                                                                                          \
    }                                                                                              \
    /* One MR x NR tile: constant trip counts let the compiler keep acc in registers. */           \
    static void kernel_##sfx(int64_t kc, const T *restrict a, const T *restrict b, T *restrict c,  \
                             int64_t ldc, int64_t mr, int64_t nr) {                                \
        T acc[MR][NR] = {{0}};                                                                     \
        for (int64_t p = 0; p < kc; p++, a += MR, b += NR)                                         \
            for (int i = 0; i < MR; i++)                                                           \
                for (int j = 0; j < NR; j++) acc[i][j] += a[i] * b[j];                             \
        for (int64_t i = 0; i < mr; i++)                                                           \
            for (int64_t j = 0; j < nr; j++) c[i * ldc + j] += acc[i][j];                          \
    }                                                                                              \
    /* C += (packed A block) (packed B block) */                                                   \
    static void macro_##sfx(int64_t mc, int64_t nc, int64_t kc, const T *ap, const T *bp, T *c,    \
                            int64_t ldc) {                                                         \
        for (int64_t j = 0; j < nc; j += NR)                                                       \
            for (int64_t i = 0; i < mc; i += MR)                                                   \
                kernel_##sfx(kc, ap + i * kc, bp + j * kc, c + i * ldc + j, ldc,                   \
                             min64(MR, mc - i), min64(NR, nc - j));                                \
    }                                                                                              \
    /* Products with one row or one column waste most of a tile. One row of A with contiguous,     \
     * long rows of B scales and adds those rows; anything else is a dot product per output. */    \
    static void thin_##sfx(int64_t m, int64_t n, int64_t k, const T *a, int64_t rsa, int64_t csa,  \
                           const T *b, int64_t rsb, int64_t csb, T *c, int64_t ldc) {              \
        if (m == 1 && csb == 1 && n >= 8) {                                                        \
            for (int64_t j = 0; j < n; j++) c[j] = 0;                                              \
            for (int64_t p = 0; p < k; p++) {                                                      \
                T x = a[p * csa];                                                                  \
                const T *restrict row = b + p * rsb;                                               \
                for (int64_t j = 0; j < n; j++) c[j] += x * row[j];                                \
            }                                                                                      \
            return;                                                                                \
        }                                                                                          \
        for (int64_t i = 0; i < m; i++)                                                            \
            for (int64_t j = 0; j < n; j++) {                                                      \
                T s[4] = {0, 0, 0, 0};                                                             \
                const T *x = a + i * rsa, *y = b + j * csb;                                        \
                int64_t p = 0;                                                                     \
                for (; p + 4 <= k; p += 4)                                                         \
                    for (int q = 0; q < 4; q++) s[q] += x[(p + q) * csa] * y[(p + q) * rsb];       \
                for (; p < k; p++) s[0] += x[p * csa] * y[p * rsb];                                \
                c[i * ldc + j] = (s[0] + s[1]) + (s[2] + s[3]);                                    \
            }                                                                                      \
    }                                                                                              \
    /* work holds the packed blocks, A's first: work_elems elements. */                            \
    static void gemm_##sfx(int64_t m, int64_t n, int64_t k, const T *a, int64_t rsa, int64_t csa,  \
                           const T *b, int64_t rsb, int64_t csb, T *c, int64_t ldc, T *work) {     \
        if (m == 1 || n == 1) {                                                                    \
            thin_##sfx(m, n, k, a, rsa, csa, b, rsb, csb, c, ldc);                                 \
            return;                                                                                \
        }                                                                                          \
        T *ap = work, *bp = work + (min64(MC, m) + MR - 1) / MR * MR * min64(KC, k);               \
        for (int64_t i = 0; i < m; i++)                                                            \
            for (int64_t j = 0; j < n; j++) c[i * ldc + j] = 0;                                    \
        for (int64_t jc = 0; jc < n; jc += NC) {                                                   \
            int64_t nc = min64(NC, n - jc);                                                        \
            for (int64_t pc = 0; pc < k; pc += KC) {                                               \
                int64_t kc = min64(KC, k - pc);                                                    \
                pack_b_##sfx(b + pc * rsb + jc * csb, rsb, csb, kc, nc, bp);                       \
                for (int64_t ic = 0; ic < m; ic += MC) {                                           \
                    int64_t mc = min64(MC, m - ic);                                                \
                    pack_a_##sfx(a + ic * rsa + pc * csa, rsa, csa, mc, kc, ap);                   \
                    macro_##sfx(mc, nc, kc, ap, bp, c + ic * ldc + jc, ldc);                       \
                }                                                                                  \
            }                                                                                      \
        }                                                                                          \
    }

GEMM(float, f32, NR_F32)
GEMM(double, f64, NR_F64)

void cpu_view_of(const cx_tensor *t, const int64_t *axes, int n, cpu_axes_view *v) {
    int64_t strides[CX_MAX_RANK];
    cpu_strides(&t->desc, strides);
    v->n = n;
    for (int k = 0; k < n; k++) {
        v->size[k] = t->desc.shape[axes[k]];
        v->stride[k] = strides[axes[k]];
    }
}

void cpu_free_view(const cx_tensor *t, const cx_param *x, const cx_param *y, cpu_axes_view *v) {
    bool used[CX_MAX_RANK] = {false};
    int64_t axes[CX_MAX_RANK];
    int n = 0;
    for (int k = 0; k < x->n; k++) used[x->i[k]] = true;
    for (int k = 0; k < y->n; k++) used[y->i[k]] = true;
    for (int a = 0; a < t->desc.rank; a++)
        if (!used[a]) axes[n++] = a;
    cpu_view_of(t, axes, n, v);
}

int64_t cpu_view_count(const cpu_axes_view *v) {
    int64_t c = 1;
    for (int k = 0; k < v->n; k++) c *= v->size[k];
    return c;
}

bool cpu_view_stride(const cpu_axes_view *v, int64_t single, int64_t *stride) {
    int64_t s = single, last = -1;
    for (int k = v->n - 1; k >= 0; k--) {
        if (v->size[k] == 1) continue;
        if (last >= 0 && v->stride[k] != v->stride[last] * v->size[last]) return false;
        if (last < 0) s = v->stride[k];
        last = k;
    }
    *stride = s;
    return true;
}

int64_t *cpu_view_offsets(const cpu_axes_view *v) {
    int64_t count = cpu_view_count(v), idx[CX_MAX_RANK] = {0}, o = 0;
    int64_t *off = malloc(sizeof(int64_t) * (size_t)(count ? count : 1));
    if (!off) return NULL;
    for (int64_t i = 0; i < count; i++) {
        off[i] = o;
        for (int k = v->n - 1; k >= 0; k--) {
            o += v->stride[k];
            if (++idx[k] < v->size[k]) break;
            o -= v->stride[k] * v->size[k];
            idx[k] = 0;
        }
    }
    return off;
}

/* One operand as a batch of matrices. */
typedef struct {
    const cx_tensor *t;
    cpu_axes_view batch, rows, cols;
    int64_t *roff, *coff; /* offsets of rows and columns, when it must be gathered */
    int64_t rs, cs;       /* its strides, when it is read in place */
} operand;

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

/* Whether the GEMM can read the operand in place: it has the GEMM's type (never, for
 * CX_DTYPE_INVALID) and its rows and columns have single strides. Otherwise builds the offset
 * tables for gathering it. False when out of memory. */
static bool operand_prepare(operand *x, cx_dtype gemm_type, bool *direct) {
    *direct = x->t->desc.dtype == gemm_type && cpu_view_stride(&x->rows, 1, &x->rs) &&
              cpu_view_stride(&x->cols, 1, &x->cs);
    if (*direct) return true;
    x->roff = cpu_view_offsets(&x->rows);
    x->coff = cpu_view_offsets(&x->cols);
    return x->roff && x->coff;
}

static void operand_release(operand *x) {
    free(x->roff);
    free(x->coff);
}

void cpu_gather_f32(const cx_tensor *t, const int64_t *roff, const int64_t *coff, int64_t base,
                    int64_t rows, int64_t cols, float *dst) {
    const void *p = t->data;
    /* columns next to each other (the usual row-major operand): whole rows through the array
     * conversions, which use F16C where there is one (faster than element by element) */
    bool unit = cols > 0;
    for (int64_t q = 1; unit && q < cols; q++) unit = coff[q] == coff[0] + q;
    if (unit && t->desc.dtype != CX_F32) {
        for (int64_t i = 0; i < rows; i++, dst += cols) {
            const uint16_t *src = (const uint16_t *)p + base + roff[i] + coff[0];
            if (t->desc.dtype == CX_F16)
                cx_f16_to_f32_array(src, dst, cols);
            else
                cx_bf16_to_f32_array(src, dst, cols);
        }
        return;
    }
    for (int64_t i = 0; i < rows; i++, dst += cols) {
        int64_t r = base + roff[i];
        const int64_t *c = coff;
        switch (t->desc.dtype) {
        case CX_F16:
            for (int64_t q = 0; q < cols; q++)
                dst[q] = cx_f16_to_f32(((const uint16_t *)p)[r + c[q]]);
            break;
        case CX_BF16:
            for (int64_t q = 0; q < cols; q++)
                dst[q] = cx_bf16_to_f32(((const uint16_t *)p)[r + c[q]]);
            break;
        default:
            for (int64_t q = 0; q < cols; q++) dst[q] = ((const float *)p)[r + c[q]];
            break;
        }
    }
}

void cpu_gather_f64(const cx_tensor *t, const int64_t *roff, const int64_t *coff, int64_t base,
                    int64_t rows, int64_t cols, double *dst) {
    const double *p = t->data;
    for (int64_t i = 0; i < rows; i++, dst += cols)
        for (int64_t q = 0; q < cols; q++) dst[q] = p[base + roff[i] + coff[q]];
}

static void gather_u64(const operand *x, int64_t base, int64_t rows, int64_t cols, uint64_t *dst) {
    const void *p = x->t->data;
    for (int64_t i = 0; i < rows; i++, dst += cols) {
        int64_t r = base + x->roff[i];
        const int64_t *c = x->coff;
        switch (x->t->desc.dtype) {
#define GATHER(ID, T)                                                                              \
    case ID:                                                                                       \
        for (int64_t q = 0; q < cols; q++) dst[q] = (uint64_t)((const T *)p)[r + c[q]];            \
        break;
            GATHER(CX_U8, uint8_t)
            GATHER(CX_U16, uint16_t)
            GATHER(CX_U32, uint32_t)
            GATHER(CX_S8, int8_t)
            GATHER(CX_S16, int16_t)
            GATHER(CX_S32, int32_t)
#undef GATHER
        default:
            for (int64_t q = 0; q < cols; q++) dst[q] = (uint64_t)((const int64_t *)p)[r + c[q]];
            break;
        }
    }
}

void cpu_batch_next(const cpu_axes_view *va, const cpu_axes_view *vb, cpu_batch_walk *w) {
    for (int k = va->n - 1; k >= 0; k--) {
        w->a += va->stride[k];
        w->b += vb->stride[k];
        if (++w->idx[k] < va->size[k]) return;
        w->a -= va->stride[k] * va->size[k];
        w->b -= vb->stride[k] * vb->size[k];
        w->idx[k] = 0;
    }
}

/* Scratch for the float paths: gathered operands, an f32 result to round, GEMM panels. */
typedef struct {
    void *a, *b, *c, *work;
} float_bufs;

static void bufs_release(float_bufs *f) {
    cpu_buffer_put(f->a);
    cpu_buffer_put(f->b);
    cpu_buffer_put(f->c);
    cpu_buffer_put(f->work);
}

static cx_code no_memory(cx_status *st) {
    return cx_fail(st, CX_ENOMEM, "cpu: no memory for the buffers of dot");
}

static void round_f32(const float *c, cx_dtype t, int64_t n, uint16_t *out) {
    if (t == CX_F16)
        cx_f32_to_f16_array(c, out, n);
    else
        cx_f32_to_bf16_array(c, out, n);
}

/* f32, f16 and bf16. */
static cx_code dot_f32(dot_job *j, cx_tensor *out, cx_status *st) {
    bool da, db;
    int64_t m = j->m, n = j->n, k = j->k;
    float_bufs f = {0};
    bool ok = operand_prepare(&j->a, CX_F32, &da) && operand_prepare(&j->b, CX_F32, &db);
    ok = ok && (da || (f.a = cpu_buffer_get(sizeof(float) * (size_t)(m * k))));
    ok = ok && (db || (f.b = cpu_buffer_get(sizeof(float) * (size_t)(k * n))));
    ok = ok &&
         (out->desc.dtype == CX_F32 || (f.c = cpu_buffer_get(sizeof(float) * (size_t)(m * n))));
    ok = ok && (f.work = cpu_buffer_get(sizeof(float) * work_elems(m, n, k, NR_F32)));
    cpu_batch_walk w = {{0}, 0, 0};
    for (int64_t bi = 0; ok && bi < j->batch; bi++, cpu_batch_next(&j->a.batch, &j->b.batch, &w)) {
        const float *a = f.a, *b = f.b;
        int64_t rsa = k, csa = 1, rsb = n, csb = 1;
        if (da) {
            a = (const float *)j->a.t->data + w.a;
            rsa = j->a.rs, csa = j->a.cs;
        } else {
            cpu_gather_f32(j->a.t, j->a.roff, j->a.coff, w.a, m, k, f.a);
        }
        if (db) {
            b = (const float *)j->b.t->data + w.b;
            rsb = j->b.rs, csb = j->b.cs;
        } else {
            cpu_gather_f32(j->b.t, j->b.roff, j->b.coff, w.b, k, n, f.b);
        }
        float *c = f.c ? f.c : (float *)out->data + bi * m * n;
        gemm_f32(m, n, k, a, rsa, csa, b, rsb, csb, c, n, f.work);
        if (f.c) round_f32(f.c, out->desc.dtype, m * n, (uint16_t *)out->data + bi * m * n);
    }
    bufs_release(&f);
    return ok ? CX_OK : no_memory(st);
}

static cx_code dot_f64(dot_job *j, cx_tensor *out, cx_status *st) {
    bool da, db;
    int64_t m = j->m, n = j->n, k = j->k;
    float_bufs f = {0};
    bool ok = operand_prepare(&j->a, CX_F64, &da) && operand_prepare(&j->b, CX_F64, &db);
    ok = ok && (da || (f.a = cpu_buffer_get(sizeof(double) * (size_t)(m * k))));
    ok = ok && (db || (f.b = cpu_buffer_get(sizeof(double) * (size_t)(k * n))));
    ok = ok && (f.work = cpu_buffer_get(sizeof(double) * work_elems(m, n, k, NR_F64)));
    cpu_batch_walk w = {{0}, 0, 0};
    for (int64_t bi = 0; ok && bi < j->batch; bi++, cpu_batch_next(&j->a.batch, &j->b.batch, &w)) {
        const double *a = f.a, *b = f.b;
        int64_t rsa = k, csa = 1, rsb = n, csb = 1;
        if (da) {
            a = (const double *)j->a.t->data + w.a;
            rsa = j->a.rs, csa = j->a.cs;
        } else {
            cpu_gather_f64(j->a.t, j->a.roff, j->a.coff, w.a, m, k, f.a);
        }
        if (db) {
            b = (const double *)j->b.t->data + w.b;
            rsb = j->b.rs, csb = j->b.cs;
        } else {
            cpu_gather_f64(j->b.t, j->b.roff, j->b.coff, w.b, k, n, f.b);
        }
        gemm_f64(m, n, k, a, rsa, csa, b, rsb, csb, (double *)out->data + bi * m * n, n, f.work);
    }
    bufs_release(&f);
    return ok ? CX_OK : no_memory(st);
}

/* C = A B in uint64, i-k-j so the inner loop runs along rows of B and C. */
static void gemm_u64(int64_t m, int64_t n, int64_t k, const uint64_t *a, const uint64_t *b,
                     uint64_t *c) {
    for (int64_t i = 0; i < m * n; i++) c[i] = 0;
    for (int64_t i = 0; i < m; i++)
        for (int64_t p = 0; p < k; p++) {
            uint64_t x = a[i * k + p];
            for (int64_t q = 0; q < n; q++) c[i * n + q] += x * b[p * n + q];
        }
}

/* Wraps the uint64 results into the output's integer type. */
static void store_u64(const uint64_t *c, int64_t n, cx_dtype t, void *out) {
    size_t es = cx_dtype_size(t);
    for (int64_t i = 0; i < n; i++) memcpy((char *)out + (size_t)i * es, &c[i], es);
}

static cx_code dot_int(dot_job *j, cx_tensor *out, cx_status *st) {
    bool da, db;
    int64_t m = j->m, n = j->n, k = j->k;
    size_t es = cx_dtype_size(out->desc.dtype);
    float_bufs f = {0};
    /* integers are always gathered, widened to uint64 */
    bool ok = operand_prepare(&j->a, CX_DTYPE_INVALID, &da) &&
              operand_prepare(&j->b, CX_DTYPE_INVALID, &db);
    ok = ok && (f.a = cpu_buffer_get(sizeof(uint64_t) * (size_t)(m * k)));
    ok = ok && (f.b = cpu_buffer_get(sizeof(uint64_t) * (size_t)(k * n)));
    ok = ok && (f.c = cpu_buffer_get(sizeof(uint64_t) * (size_t)(m * n)));
    cpu_batch_walk w = {{0}, 0, 0};
    for (int64_t bi = 0; ok && bi < j->batch; bi++, cpu_batch_next(&j->a.batch, &j->b.batch, &w)) {
        gather_u64(&j->a, w.a, m, k, f.a);
        gather_u64(&j->b, w.b, k, n, f.b);
        gemm_u64(m, n, k, f.a, f.b, f.c);
        store_u64(f.c, m * n, out->desc.dtype, (char *)out->data + (size_t)(bi * m * n) * es);
    }
    bufs_release(&f);
    return ok ? CX_OK : no_memory(st);
}

/* c64 and c128, computed in double complex (c64 rounded once), i-k-j as gemm_u64. */
static void gather_cd(const operand *x, int64_t base, int64_t rows, int64_t cols,
                      double _Complex *dst) {
    for (int64_t i = 0; i < rows; i++, dst += cols) {
        int64_t r = base + x->roff[i];
        for (int64_t q = 0; q < cols; q++) {
            int64_t at = r + x->coff[q];
            if (x->t->desc.dtype == CX_C64)
                dst[q] = ((const float _Complex *)x->t->data)[at];
            else
                dst[q] = ((const double _Complex *)x->t->data)[at];
        }
    }
}

static cx_code dot_complex(dot_job *j, cx_tensor *out, cx_status *st) {
    bool da, db;
    int64_t m = j->m, n = j->n, k = j->k;
    float_bufs f = {0};
    size_t cs = sizeof(double _Complex);
    bool ok = operand_prepare(&j->a, CX_DTYPE_INVALID, &da) &&
              operand_prepare(&j->b, CX_DTYPE_INVALID, &db);
    ok = ok && (f.a = cpu_buffer_get(cs * (size_t)(m * k)));
    ok = ok && (f.b = cpu_buffer_get(cs * (size_t)(k * n)));
    ok = ok && (f.c = cpu_buffer_get(cs * (size_t)(m * n)));
    cpu_batch_walk w = {{0}, 0, 0};
    for (int64_t bi = 0; ok && bi < j->batch; bi++, cpu_batch_next(&j->a.batch, &j->b.batch, &w)) {
        double _Complex *a = f.a, *b = f.b, *c = f.c;
        gather_cd(&j->a, w.a, m, k, a);
        gather_cd(&j->b, w.b, k, n, b);
        for (int64_t i = 0; i < m * n; i++) c[i] = 0;
        for (int64_t i = 0; i < m; i++)
            for (int64_t p = 0; p < k; p++) {
                double _Complex x = a[i * k + p];
                for (int64_t q = 0; q < n; q++) c[i * n + q] += x * b[p * n + q];
            }
        cpu_cast_array(CX_C128, out->desc.dtype, c,
                       (char *)out->data + (size_t)(bi * m * n) * cx_dtype_size(out->desc.dtype),
                       m * n);
    }
    bufs_release(&f);
    return ok ? CX_OK : no_memory(st);
}

cx_code cpu_dot(const cx_tensor *a, const cx_tensor *b, const cx_params *ps, cx_tensor *out,
                cx_status *st) {
    dot_job j;
    if (out->numel == 0) return CX_OK;
    job_init(a, b, ps, &j);
    if (j.k == 0) {
        /* all-zero bits are zero in every type */
        memset(out->data, 0, out->nbytes);
        return CX_OK;
    }
    cx_code rc;
    switch (out->desc.dtype) {
    case CX_F32:
    case CX_F16:
    case CX_BF16: rc = dot_f32(&j, out, st); break;
    case CX_F64: rc = dot_f64(&j, out, st); break;
    case CX_C64:
    case CX_C128: rc = dot_complex(&j, out, st); break;
    default: rc = dot_int(&j, out, st); break;
    }
    operand_release(&j.a);
    operand_release(&j.b);
    return rc;
}
