/* GEMM across the cores: the product split into blocks of rows (or columns), each run by a
 * single-threaded cblas_?gemm on a thread of the driver's pool (blas_pool.c). The same split from
 * C runs 256 / 512 / 1024 as fast as OpenBLAS's own threads on a 2-core machine
 * (bench/blas/run.sh measures both sides). Products too small to split never
 * wait for a thread. An epilogue (dense's activation, a convolution's chain) runs on each block
 * right after its product, while the block is still in cache. */
#include <cblas.h>

#include "blas_kernels.h"

/* A product of at most this much work (m * n * k) runs on the caller alone, as OpenBLAS runs it
 * on one thread: a wake-up would cost as much as the product (64 x 64 x 64 ran slower split than
 * unsplit). */
#define SPLIT_MIN_WORK (64.0 * 64 * 64)
#define SPLIT_MIN_ROWS 16 /* rows (or columns) per thread at least */

typedef struct {
    const blas_gemm_args *g;
    int span;
    bool split_cols;
} split;

/* With an epilogue, a part's block is computed a sub-block at a time, each followed by the
 * epilogue while it is in the core's cache: sub-blocks of at most this many bytes of C (a
 * part's whole block, hundreds of KB for a convolution's early layers, was out of cache by the
 * time its epilogue read it). */
#define EPILOGUE_BLOCK_BYTES (64 * 1024)
/* ... but at least this many columns (rows) a sub-block: each sub-block's product packs the
 * other operand again (A for a sub-block of columns, B for one of rows), and a packed element
 * costs about what a vector of 16 multiply-adds does, so w columns add about 16 / w to the
 * product's work */
#define EPILOGUE_MIN_STEP 256

/* rows m x columns n of C at c, from A at a and B at b */
static void product(const blas_gemm_args *g, int index, const char *a, const char *b, char *c,
                    int m, int n) {
    if (m == 0 || n == 0) return;
    if (g->f64)
        cblas_dgemm(CblasRowMajor, g->ta, g->tb, m, n, g->k, 1.0, (const double *)a, g->lda,
                    (const double *)b, g->ldb, g->beta, (double *)c, g->ldc);
    else
        cblas_sgemm(CblasRowMajor, g->ta, g->tb, m, n, g->k, 1.0f, (const float *)a, g->lda,
                    (const float *)b, g->ldb, (float)g->beta, (float *)c, g->ldc);
    if (g->epilogue) g->epilogue(g->epilogue_ctx, index, c, m, n, g->ldc);
}

/* Columns (split_cols) or rows lo .. hi of C, on the calling thread as blas_parallel part
 * `index` */
static void run_range(const blas_gemm_args *g, bool split_cols, int index, int lo, int hi) {
    int m = g->m, n = g->n;
    size_t es = g->f64 ? sizeof(double) : sizeof(float);
    const char *a = g->a, *b = g->b;
    char *c = g->c;
    /* a step along the split axis: the sub-blocks of an epilogue, else the whole block */
    long long across = split_cols ? m : n, step = hi - lo;
    if (g->epilogue && across > 0) {
        step = (long long)(EPILOGUE_BLOCK_BYTES / es) / across;
        step =
            step < EPILOGUE_MIN_STEP ? EPILOGUE_MIN_STEP : step / SPLIT_MIN_ROWS * SPLIT_MIN_ROWS;
    }
    for (long long at = lo; at < hi; at += step) {
        int len = (int)(hi - at < step ? hi - at : step);
        if (split_cols) /* columns at .. at + len of op(B) and of C */
            product(g, index, a, b + es * (size_t)at * (g->tb == CblasNoTrans ? 1 : (size_t)g->ldb),
                    c + es * (size_t)at, m, len);
        else /* rows at .. at + len of op(A) and of C */
            product(g, index, a + es * (size_t)at * (g->ta == CblasNoTrans ? (size_t)g->lda : 1), b,
                    c + es * (size_t)at * (size_t)g->ldc, len, n);
    }
}

static void run_part(void *ctx, int index, int parts) {
    const split *p = ctx;
    run_range(p->g, p->split_cols, index, (int)((long long)p->span * index / parts),
              (int)((long long)p->span * (index + 1) / parts));
}

int blas_gemm_parts(int m, int n, int k, bool *by_cols) {
    *by_cols = n > m;
    if ((double)m * n * k <= SPLIT_MIN_WORK) return 1;
    int parts = (*by_cols ? n : m) / SPLIT_MIN_ROWS;
    return parts > 1 ? parts : 1;
}

void blas_gemm(const blas_gemm_args *g) {
    if (g->m == 0 || g->n == 0) return;
    split s = {g, 0, false};
    int parts = blas_gemm_parts(g->m, g->n, g->k, &s.split_cols);
    s.span = s.split_cols ? g->n : g->m;
    blas_parallel(parts, true, run_part, &s);
}

void blas_gemm_serial(const blas_gemm_args *g, int part) {
    if (g->m == 0 || g->n == 0) return;
    bool by_cols;
    blas_gemm_parts(g->m, g->n, g->k, &by_cols);
    run_range(g, by_cols, part, 0, by_cols ? g->n : g->m);
}
