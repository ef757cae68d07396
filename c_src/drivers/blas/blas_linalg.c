/* The LINALG kind on OpenBLAS: dtrsm (CBLAS) for triangular_solve, LAPACK's dgetrf for
 * lu_factor, dsyevd (divide and conquer) for eigh_packed and dgesdd (divide and conquer) for
 * svd_packed. OpenBLAS exports LAPACK's Fortran
 * symbols itself (no LAPACKE needed): column-major, arguments by reference, and a hidden length
 * after the arguments for each character argument. The cpu driver's LINALG code does the rest
 * around these steps (cpu_linalg_with): the conversions to and from double, the batches, the
 * singularity check, the packing and the eigenpairs' canonical order, so both drivers give the
 * same layout and differ only by rounding. Matrices whose dimensions exceed LAPACK's int run
 * the portable steps. */
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../cpu/cpu_kernels.h"
#include "blas_kernels.h"

extern void dgetrf_(const int *m, const int *n, double *a, const int *lda, int *ipiv, int *info);
extern void dsyevd_(const char *jobz, const char *uplo, const int *n, double *a, const int *lda,
                    double *w, double *work, const int *lwork, int *iwork, const int *liwork,
                    int *info, size_t jobz_len, size_t uplo_len);

extern void dgesdd_(const char *jobz, const int *m, const int *n, double *a, const int *lda,
                    double *s, double *u, const int *ldu, double *vt, const int *ldvt, double *work,
                    const int *lwork, int *iwork, int *info, size_t jobz_len);

static void blas_trsm(bool lower, int64_t m, int64_t k, const double *mat, double *x) {
    cblas_dtrsm(CblasRowMajor, CblasLeft, lower ? CblasLower : CblasUpper, CblasNoTrans,
                CblasNonUnit, (int)m, (int)k, 1.0, mat, (int)m, x, (int)k);
}

/* row-major w is column-major w^T: transpose in, factor, transpose out; ipiv's row swaps,
 * applied in order, give the permutation */
static void blas_getrf(int64_t n, double *w, int64_t *perm) {
    double *c = malloc(sizeof(double) * (size_t)(n * n));
    int *ipiv = malloc(sizeof(int) * (size_t)n);
    if (!c || !ipiv) { /* no memory for LAPACK's copy: the portable elimination in place */
        free(c);
        free(ipiv);
        cpu_linalg_portable.getrf(n, w, perm);
        return;
    }
    for (int64_t i = 0; i < n; i++)
        for (int64_t j = 0; j < n; j++) c[j * n + i] = w[i * n + j];
    int nn = (int)n, info = 0;
    dgetrf_(&nn, &nn, c, &nn, ipiv, &info); /* info > 0: singular, factored all the same */
    for (int64_t i = 0; i < n; i++)
        for (int64_t j = 0; j < n; j++) w[i * n + j] = c[j * n + i];
    for (int64_t i = 0; i < n; i++) perm[i] = i;
    for (int64_t i = 0; i < n; i++) {
        int64_t p = ipiv[i] - 1, t = perm[i];
        perm[i] = perm[p];
        perm[p] = t;
    }
    free(c);
    free(ipiv);
}

/* a is symmetric: its column-major reading is itself. The eigenvectors come back as a's
 * columns (column-major), which are vecs' columns once transposed. */
static void blas_syev(int64_t n, double *a, double *vals, double *vecs) {
    for (int64_t i = 0; i < n * n; i++)
        if (!isfinite(a[i])) { /* NaN throughout, as the portable steps give it */
            cpu_linalg_portable.syev(n, a, vals, vecs);
            return;
        }
    int nn = (int)n, info = 0, lwork = -1, liwork = -1, iwork_size = 0;
    double work_size = 0;
    dsyevd_("V", "L", &nn, a, &nn, vals, &work_size, &lwork, &iwork_size, &liwork, &info, 1, 1);
    lwork = (int)work_size;
    liwork = iwork_size;
    double *work = info == 0 ? malloc(sizeof(double) * (size_t)lwork) : NULL;
    int *iwork = info == 0 ? malloc(sizeof(int) * (size_t)liwork) : NULL;
    double *copy = malloc(sizeof(double) * (size_t)(n * n));
    if (work && iwork && copy) {
        memcpy(copy, a, sizeof(double) * (size_t)(n * n));
        dsyevd_("V", "L", &nn, a, &nn, vals, work, &lwork, iwork, &liwork, &info, 1, 1);
    } else {
        info = -1;
    }
    if (info == 0) {
        for (int64_t i = 0; i < n; i++)
            for (int64_t j = 0; j < n; j++) vecs[i * n + j] = a[j * n + i];
    } else if (copy) {
        /* no memory, or no convergence: the portable Jacobi method */
        cpu_linalg_portable.syev(n, copy, vals, vecs);
    } else {
        cpu_linalg_portable.syev(n, a, vals, vecs);
    }
    free(work);
    free(iwork);
    free(copy);
}

/* Row-major a (m x n) is column-major a^T (n x m), whose SVD a^T = U S VT gives a's as
 * a = VT^T S U^T: dgesdd's U (n x k, column-major) is vt (k x n, row-major) as it stands, and
 * its VT (k x m, column-major) transposed is ut (k x m, row-major). */
static bool blas_gesvd(int64_t m, int64_t n, double *a, double *s, double *ut, double *vt) {
    int mm = (int)n, nn = (int)m, k = (int)(m < n ? m : n), info = 0, lwork = -1;
    double work_size = 0;
    int *iwork = malloc(sizeof(int) * 8 * (size_t)k);
    double *vtc = malloc(sizeof(double) * (size_t)k * (size_t)m);
    if (iwork && vtc)
        dgesdd_("S", &mm, &nn, a, &mm, s, vt, &mm, vtc, &k, &work_size, &lwork, iwork, &info, 1);
    lwork = (int)work_size;
    double *work = iwork && vtc && info == 0 ? malloc(sizeof(double) * (size_t)lwork) : NULL;
    double *copy = work ? malloc(sizeof(double) * (size_t)(m * n)) : NULL;
    if (copy) {
        memcpy(copy, a, sizeof(double) * (size_t)(m * n));
        dgesdd_("S", &mm, &nn, a, &mm, s, vt, &mm, vtc, &k, work, &lwork, iwork, &info, 1);
    }
    bool ok = true;
    if (copy && info == 0) {
        for (int64_t j = 0; j < k; j++)
            for (int64_t i = 0; i < m; i++) ut[j * m + i] = vtc[j + i * k];
    } else {
        /* no memory, or no convergence: the portable Jacobi method */
        ok = cpu_linalg_portable.gesvd(m, n, copy ? copy : a, s, ut, vt);
    }
    free(iwork);
    free(vtc);
    free(work);
    free(copy);
    return ok;
}

static const cpu_linalg_impl lapack = {blas_trsm, blas_getrf, blas_syev, blas_gesvd};

bool blas_linalg_fits(cx_op_id op, const cx_desc *in, int n_in) {
    /* dsyevd's workspace holds 1 + 6n + 2n^2 doubles, dgesdd's about 4k^2 + 7k + max(m, n),
     * counted in an int */
    int64_t limit = op == CX_OP_EIGH_PACKED ? 30000 : op == CX_OP_SVD_PACKED ? 20000 : INT_MAX;
    for (int k = 0; k < n_in; k++)
        for (int j = in[k].rank - 2; j < in[k].rank; j++)
            if (j >= 0 && in[k].shape[j] > limit) return false;
    return true;
}

cx_code blas_linalg(cx_op_id op, const cx_tensor *const *in, int n_in, const cx_params *ps,
                    cx_tensor *out, cx_status *st) {
    cx_desc desc[2];
    for (int k = 0; k < n_in && k < 2; k++) desc[k] = in[k]->desc;
    const cpu_linalg_impl *impl =
        blas_linalg_fits(op, desc, n_in < 2 ? n_in : 2) ? &lapack : &cpu_linalg_portable;
    return cpu_linalg_with(impl, op, in, ps, out, st);
}
