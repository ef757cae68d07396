/* dot through cuBLAS: any contraction becomes one strided batched GEMM,
 * {B, M, K} x {B, K, N} -> {B, M, N}. An operand already stored in that order, or with its two
 * matrix axes swapped, is passed as it is (with a transpose flag); any other axis order is
 * copied into the GEMM order first. f16 and bf16 run on tensor cores with f32 accumulation
 * (CUBLAS_COMPUTE_32F); f32 stays IEEE f32 (no TF32), as PyTorch's default. */
#include <limits.h>
#include <stdio.h>
#include <string.h>

#include "cuda_driver.h"
#include "cuda_kernels.h"

typedef struct {
    int64_t batch, m, n, k;
    int perm_a[CX_MAX_RANK], perm_b[CX_MAX_RANK]; /* GEMM order of the axes */
} gemm_shape;

static void contiguous_strides(const cx_desc *d, int64_t *s) {
    int64_t acc = 1;
    for (int k = d->rank - 1; k >= 0; k--) {
        s[k] = acc;
        acc *= d->shape[k];
    }
}

/* Orders a's axes {batch, free, contract} and b's {batch, contract, free}. */
static void gemm_plan(const cx_desc *a, const cx_desc *b, const cx_params *ps, gemm_shape *g) {
    const cx_param *ca = cx_param_get(ps, CX_P_CONTRACT_A), *cb = cx_param_get(ps, CX_P_CONTRACT_B);
    const cx_param *ba = cx_param_get(ps, CX_P_BATCH_A), *bb = cx_param_get(ps, CX_P_BATCH_B);
    int nca = ca ? ca->n : 0, nba = ba ? ba->n : 0;
    bool used_a[CX_MAX_RANK] = {false}, used_b[CX_MAX_RANK] = {false};
    int pa = 0, pb = 0;
    g->batch = g->m = g->n = g->k = 1;
    for (int j = 0; j < nba; j++) {
        g->perm_a[pa++] = (int)ba->i[j];
        g->perm_b[pb++] = (int)bb->i[j];
        used_a[ba->i[j]] = used_b[bb->i[j]] = true;
        g->batch *= a->shape[ba->i[j]];
    }
    for (int j = 0; j < nca; j++) used_a[ca->i[j]] = used_b[cb->i[j]] = true;
    for (int k = 0; k < a->rank; k++)
        if (!used_a[k]) {
            g->perm_a[pa++] = k;
            g->m *= a->shape[k];
        }
    for (int j = 0; j < nca; j++) {
        g->perm_a[pa++] = (int)ca->i[j];
        g->perm_b[pb++] = (int)cb->i[j];
        g->k *= a->shape[ca->i[j]];
    }
    for (int k = 0; k < b->rank; k++)
        if (!used_b[k]) {
            g->perm_b[pb++] = k;
            g->n *= b->shape[k];
        }
}

bool cuda_dot_fits(const cx_desc *in, const cx_params *ps, char *reason, size_t len) {
    gemm_shape g;
    gemm_plan(&in[0], &in[1], ps, &g);
    if (g.m <= INT_MAX && g.n <= INT_MAX && g.k <= INT_MAX && g.batch <= INT_MAX) return true;
    snprintf(reason, len,
             "dot as a GEMM of {%lld, %lld, %lld} x {%lld, %lld}: cuBLAS takes 32-bit sizes",
             (long long)g.batch, (long long)g.m, (long long)g.k, (long long)g.k, (long long)g.n);
    return false;
}

/* Whether the operand is stored in GEMM order. */
static bool is_identity(const int *perm, int rank) {
    for (int k = 0; k < rank; k++)
        if (perm[k] != k) return false;
    return true;
}

/* Whether it is stored with its two matrix groups swapped: GEMM order {batch, first, second}
 * stored as {batch, second, first}. */
static bool is_swapped(const int *perm, int rank, int nb, int first, int second) {
    int stored[CX_MAX_RANK], s = 0;
    for (int k = 0; k < nb; k++) stored[s++] = perm[k];
    for (int k = 0; k < second; k++) stored[s++] = perm[nb + first + k];
    for (int k = 0; k < first; k++) stored[s++] = perm[nb + k];
    return is_identity(stored, rank);
}

/* Copies `t` into GEMM order (perm) in a new buffer. */
static cx_code permuted_copy(cuda_device *d, const cx_tensor *t, const int *perm, void **out,
                             cx_status *st) {
    cx_code rc = cuda_mem_alloc(d, t->nbytes, out, st);
    if (rc) return rc;
    int64_t s[CX_MAX_RANK];
    contiguous_strides(&t->desc, s);
    ck_copy c = {.rank = t->desc.rank};
    cx_desc od = {.rank = t->desc.rank};
    for (int k = 0; k < c.rank; k++) {
        c.shape[k] = od.shape[k] = t->desc.shape[perm[k]];
        c.src_stride[k] = s[perm[k]];
    }
    contiguous_strides(&od, c.dst_stride);
    rc = cuda_check(d, ck_copy_strided(cx_dtype_size(t->desc.dtype), t->data, *out, &c, d->stream),
                    "dot: transpose", st);
    if (rc) cuda_mem_free(d, *out);
    return rc;
}

cx_code cuda_dot(cuda_device *d, const cx_tensor *a, const cx_tensor *b, const cx_params *ps,
                 cx_tensor *out, cx_status *st) {
    gemm_shape g;
    gemm_plan(&a->desc, &b->desc, ps, &g);
    if (out->numel == 0) return CX_OK;
    if (g.k == 0)
        return cuda_check(d, cudaMemsetAsync(out->data, 0, out->nbytes, d->stream),
                          "dot: cudaMemsetAsync", st);
    const cx_param *ba = cx_param_get(ps, CX_P_BATCH_A), *ca = cx_param_get(ps, CX_P_CONTRACT_A);
    int nb = ba ? ba->n : 0, nc = ca ? ca->n : 0;
    int free_a = a->desc.rank - nb - nc, free_b = b->desc.rank - nb - nc;

    /* cuBLAS is column-major: the row-major C = A B is C^T = B^T A^T, so B comes first. */
    const void *pa = a->data, *pb = b->data;
    void *tmp_a = NULL, *tmp_b = NULL;
    cublasOperation_t op_a = CUBLAS_OP_N, op_b = CUBLAS_OP_N;
    int64_t lda = g.k, ldb = g.n;
    cx_code rc = CX_OK;
    if (is_identity(g.perm_a, a->desc.rank)) {
    } else if (is_swapped(g.perm_a, a->desc.rank, nb, free_a, nc)) {
        op_a = CUBLAS_OP_T; /* stored {B, K, M} */
        lda = g.m;
    } else {
        rc = permuted_copy(d, a, g.perm_a, &tmp_a, st);
        pa = tmp_a;
    }
    if (!rc && is_identity(g.perm_b, b->desc.rank)) {
    } else if (!rc && is_swapped(g.perm_b, b->desc.rank, nb, nc, free_b)) {
        op_b = CUBLAS_OP_T; /* stored {B, N, K} */
        ldb = g.k;
    } else if (!rc) {
        rc = permuted_copy(d, b, g.perm_b, &tmp_b, st);
        pb = tmp_b;
    }
    if (!rc) {
        cudaDataType_t type = a->desc.dtype == CX_F32   ? CUDA_R_32F
                              : a->desc.dtype == CX_F16 ? CUDA_R_16F
                                                        : CUDA_R_16BF;
        const float one = 1.0f, zero = 0.0f;
        cublasHandle_t h;
        rc = cuda_blas_handle(d, &h, st);
        if (!rc)
            rc = cuda_check_blas(d,
                                 cuda_cublas.gemm_strided_batched(
                                     h, op_b, op_a, (int)g.n, (int)g.m, (int)g.k, &one, pb, type,
                                     (int)ldb, g.k * g.n, pa, type, (int)lda, g.m * g.k, &zero,
                                     out->data, type, (int)g.n, g.m * g.n, (int)g.batch,
                                     CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
                                 "cublasGemmStridedBatchedEx", st);
    }
    /* stream-ordered: freed after the GEMM that reads them */
    cuda_mem_free(d, tmp_a);
    cuda_mem_free(d, tmp_b);
    return rc;
}
