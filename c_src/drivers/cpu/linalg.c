/* The LINALG kind: triangular_solve and lu_factor on the last two axes, one matrix of the batch
 * at a time, computed in double whatever the type (Nx.BinaryBackend computes these in Elixir
 * floats, doubles too) and rounded once into the result.
 *
 * triangular_solve reduces every case to `M x = rhs` with M triangular: the right side
 * (x op(a) = b) is op(a)^T x^T = b^T, and each transpose turns a lower triangle into an upper
 * one. Forward substitution sums the known terms from the first column, back substitution from
 * the last, as BinaryBackend does.
 *
 * lu_factor is the right-looking elimination of LAPACK's getf2: at column j, the first row of
 * largest magnitude at or below the diagonal is swapped up, the column below it divided by the
 * pivot and the rest of the rows updated. A zero pivot (a column of zeros) skips the division:
 * the matrix is singular and U gets a zero on its diagonal, as getrf leaves it.
 *
 * eigh_packed is the cyclic Jacobi method on the lower triangle mirrored: sweeps of plane
 * rotations, each zeroing one off-diagonal pair (Golub & Van Loan's sym.schur2), until the
 * off-diagonal part is below 2^-50 of the diagonal's (at most 64 sweeps). A matrix with NaN or
 * infinity gives NaN throughout.
 * The eigenpairs are then put in a canonical form, cpu_eigh_order, which the blas driver's
 * LAPACK path shares: ascending eigenvalues, and each eigenvector with its largest component
 * positive, so that two algorithms give the same result wherever the eigenvalues are
 * distinct. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cpu_kernels.h"

static int64_t batch_count(const cx_desc *d) {
    int64_t n = 1;
    for (int k = 0; k < d->rank - 2; k++) n *= d->shape[k];
    return n;
}

/* M x = rhs by substitution, M lower (forward) or upper triangular; x holds rhs (m rows of k) */
static void substitute(bool forward, int64_t m, int64_t k, const double *mat, double *x) {
    for (int64_t c = 0; c < k; c++) {
        if (forward)
            for (int64_t i = 0; i < m; i++) {
                double sum = 0;
                for (int64_t j = 0; j < i; j++) sum += mat[i * m + j] * x[j * k + c];
                x[i * k + c] = (x[i * k + c] - sum) / mat[i * m + i];
            }
        else
            for (int64_t i = m - 1; i >= 0; i--) {
                double sum = 0;
                for (int64_t j = m - 1; j > i; j--) sum += mat[i * m + j] * x[j * k + c];
                x[i * k + c] = (x[i * k + c] - sum) / mat[i * m + i];
            }
    }
}

static cx_code triangular_solve(const cpu_linalg_impl *impl, const cx_tensor *a, const cx_tensor *b,
                                const cx_params *ps, cx_tensor *out, cx_status *st) {
    const cx_desc *ad = &a->desc, *bd = &b->desc;
    int64_t m = ad->shape[ad->rank - 1];
    bool lower = ps->p[CX_P_LOWER].i[0] != 0, left = ps->p[CX_P_LEFT_SIDE].i[0] != 0;
    bool transpose_a = ps->p[CX_P_TRANSFORM_A].i[0] == 1;
    bool vector = bd->rank == ad->rank - 1;
    /* columns of the right-hand side, and whether b holds them transposed */
    int64_t k = vector ? 1 : left ? bd->shape[bd->rank - 1] : bd->shape[bd->rank - 2];
    bool b_transposed = !vector && !left;
    /* M is op(a) on the left side, op(a)^T on the right */
    bool m_transposed = transpose_a != !left;
    bool forward = lower != m_transposed;
    int64_t batches = batch_count(ad);
    if (m == 0 || k == 0 || batches == 0) return CX_OK;

    double *mat = malloc(sizeof(double) * (size_t)(m * m));
    double *x = malloc(sizeof(double) * (size_t)(m * k));
    if (!mat || !x) {
        free(mat);
        free(x);
        return cx_fail(st, CX_ENOMEM, "cpu: no memory for triangular_solve of %lld x %lld",
                       (long long)m, (long long)m);
    }
    cx_dtype at = ad->dtype, bt = bd->dtype, ot = out->desc.dtype;
    cx_code rc = CX_OK;
    for (int64_t n = 0; n < batches && rc == CX_OK; n++) {
        int64_t abase = n * m * m, bbase = n * m * k;
        for (int64_t i = 0; i < m; i++)
            for (int64_t j = 0; j < m; j++)
                mat[i * m + j] =
                    cpu_load_f64(at, a->data, abase + (m_transposed ? j * m + i : i * m + j));
        for (int64_t i = 0; i < m; i++)
            if (mat[i * m + i] == 0) {
                rc = cx_fail(st, CX_EINVAL,
                             "triangular_solve: can't solve for singular matrix (a zero on the "
                             "diagonal of a, row %lld of matrix %lld)",
                             (long long)i, (long long)n);
                break;
            }
        if (rc != CX_OK) break;
        /* x holds the right-hand side as m rows of k, then the solution */
        for (int64_t i = 0; i < m; i++)
            for (int64_t c = 0; c < k; c++)
                x[i * k + c] =
                    cpu_load_f64(bt, b->data, bbase + (b_transposed ? c * m + i : i * k + c));
        impl->trsm(forward, m, k, mat, x);
        for (int64_t i = 0; i < m; i++)
            for (int64_t c = 0; c < k; c++)
                cpu_store_f64(ot, out->data, bbase + (b_transposed ? c * m + i : i * k + c),
                              x[i * k + c]);
    }
    free(mat);
    free(x);
    return rc;
}

/* getf2: w (n x n, row-major) becomes L and U, perm the rows' order */
static void eliminate(int64_t n, double *w, int64_t *perm) {
    for (int64_t i = 0; i < n; i++) perm[i] = i;
    for (int64_t j = 0; j < n; j++) {
        int64_t p = j;
        double best = fabs(w[j * n + j]);
        for (int64_t i = j + 1; i < n; i++)
            if (fabs(w[i * n + j]) > best) best = fabs(w[(p = i) * n + j]);
        if (p != j) {
            for (int64_t c = 0; c < n; c++) {
                double t = w[j * n + c];
                w[j * n + c] = w[p * n + c];
                w[p * n + c] = t;
            }
            int64_t t = perm[j];
            perm[j] = perm[p];
            perm[p] = t;
        }
        double pivot = w[j * n + j];
        if (pivot == 0) continue;
        for (int64_t i = j + 1; i < n; i++) {
            double l = w[i * n + j] /= pivot;
            for (int64_t c = j + 1; c < n; c++) w[i * n + c] -= l * w[j * n + c];
        }
    }
}

static cx_code lu_factor(const cpu_linalg_impl *impl, const cx_tensor *in, cx_tensor *out,
                         cx_status *st) {
    const cx_desc *d = &in->desc;
    int64_t n = d->shape[d->rank - 1], batches = batch_count(d);
    if (n == 0 || batches == 0) return CX_OK;
    double *w = malloc(sizeof(double) * (size_t)(n * n));
    int64_t *perm = malloc(sizeof(int64_t) * (size_t)n);
    if (!w || !perm) {
        free(w);
        free(perm);
        return cx_fail(st, CX_ENOMEM, "cpu: no memory for lu_factor of %lld x %lld", (long long)n,
                       (long long)n);
    }
    cx_dtype it = d->dtype, ot = out->desc.dtype;
    for (int64_t b = 0; b < batches; b++) {
        for (int64_t i = 0; i < n * n; i++) w[i] = cpu_load_f64(it, in->data, b * n * n + i);
        impl->getrf(n, w, perm);
        int64_t base = b * (n + 1) * n;
        for (int64_t i = 0; i < n * n; i++) cpu_store_f64(ot, out->data, base + i, w[i]);
        for (int64_t i = 0; i < n; i++)
            cpu_store_f64(ot, out->data, base + n * n + i, (double)perm[i]);
    }
    free(w);
    free(perm);
    return CX_OK;
}

void cpu_eigh_order(int64_t n, double *vals, double *vecs, double *scratch, int64_t *idx) {
    for (int64_t i = 0; i < n; i++) {
        /* insertion: stable, NaN last */
        int64_t v = idx[i] = i, j = i;
        for (;
             j > 0 && (vals[v] < vals[idx[j - 1]] || (isnan(vals[idx[j - 1]]) && !isnan(vals[v])));
             j--)
            idx[j] = idx[j - 1];
        idx[j] = v;
    }
    memcpy(scratch, vecs, sizeof(double) * (size_t)(n * n));
    double *sorted = scratch + n * n;
    for (int64_t j = 0; j < n; j++) {
        int64_t from = idx[j], big = 0;
        for (int64_t i = 1; i < n; i++)
            if (fabs(scratch[i * n + from]) > fabs(scratch[big * n + from])) big = i;
        double sign = scratch[big * n + from] < 0 ? -1.0 : 1.0;
        for (int64_t i = 0; i < n; i++) vecs[i * n + j] = sign * scratch[i * n + from];
        sorted[j] = vals[from];
    }
    memcpy(vals, sorted, sizeof(double) * (size_t)n);
}

static void jacobi(int64_t n, double *a, double *vals, double *v) {
    for (int64_t i = 0; i < n * n; i++)
        if (!isfinite(a[i])) { /* no eigenpair of a matrix with NaN or infinity */
            for (int64_t k = 0; k < n * n; k++) v[k] = NAN;
            for (int64_t k = 0; k < n; k++) vals[k] = NAN;
            return;
        }
    for (int64_t i = 0; i < n * n; i++) v[i] = i % (n + 1) == 0;
    for (int sweep = 0; sweep < 64; sweep++) {
        double off = 0, diag = 0;
        for (int64_t p = 0; p < n; p++) {
            diag += a[p * n + p] * a[p * n + p];
            for (int64_t q = p + 1; q < n; q++) off += a[p * n + q] * a[p * n + q];
        }
        if (!(off > 0x1p-100 * diag)) break; /* converged, or NaN */
        for (int64_t p = 0; p < n - 1; p++)
            for (int64_t q = p + 1; q < n; q++) {
                double apq = a[p * n + q];
                if (apq == 0) continue;
                double theta = (a[q * n + q] - a[p * n + p]) / (2 * apq);
                double t = isinf(theta * theta) ? 0.5 / theta
                                                : (theta >= 0 ? 1.0 : -1.0) /
                                                      (fabs(theta) + sqrt(theta * theta + 1));
                double c = 1 / sqrt(t * t + 1), s = t * c;
                for (int64_t k = 0; k < n; k++) {
                    double kp = a[k * n + p], kq = a[k * n + q];
                    a[k * n + p] = c * kp - s * kq;
                    a[k * n + q] = s * kp + c * kq;
                }
                for (int64_t k = 0; k < n; k++) {
                    double pk = a[p * n + k], qk = a[q * n + k];
                    a[p * n + k] = c * pk - s * qk;
                    a[q * n + k] = s * pk + c * qk;
                }
                a[p * n + q] = a[q * n + p] = 0;
                for (int64_t k = 0; k < n; k++) {
                    double kp = v[k * n + p], kq = v[k * n + q];
                    v[k * n + p] = c * kp - s * kq;
                    v[k * n + q] = s * kp + c * kq;
                }
            }
    }
    for (int64_t i = 0; i < n; i++) vals[i] = a[i * n + i];
}

static cx_code eigh_packed(const cpu_linalg_impl *impl, const cx_tensor *in, cx_tensor *out,
                           cx_status *st) {
    const cx_desc *d = &in->desc;
    int64_t n = d->shape[d->rank - 1], batches = batch_count(d);
    if (n == 0 || batches == 0) return CX_OK;
    /* the matrix, the vectors, the ordering's scratch (n * n + n), the eigenvalues */
    double *w = malloc(sizeof(double) * (size_t)(3 * n * n + 2 * n));
    int64_t *idx = malloc(sizeof(int64_t) * (size_t)n);
    if (!w || !idx) {
        free(w);
        free(idx);
        return cx_fail(st, CX_ENOMEM, "cpu: no memory for eigh_packed of %lld x %lld", (long long)n,
                       (long long)n);
    }
    double *v = w + n * n, *scratch = v + n * n, *vals = scratch + n * n + n;
    cx_dtype it = d->dtype, ot = out->desc.dtype;
    for (int64_t b = 0; b < batches; b++) {
        for (int64_t i = 0; i < n; i++)
            for (int64_t j = 0; j <= i; j++)
                w[i * n + j] = w[j * n + i] = cpu_load_f64(it, in->data, b * n * n + i * n + j);
        impl->syev(n, w, vals, v);
        cpu_eigh_order(n, vals, v, scratch, idx);
        int64_t base = b * (n + 1) * n;
        for (int64_t i = 0; i < n; i++) cpu_store_f64(ot, out->data, base + i, vals[i]);
        for (int64_t i = 0; i < n * n; i++) cpu_store_f64(ot, out->data, base + n + i, v[i]);
    }
    free(w);
    free(idx);
    return CX_OK;
}

const cpu_linalg_impl cpu_linalg_portable = {substitute, eliminate, jacobi};

cx_code cpu_linalg_with(const cpu_linalg_impl *impl, cx_op_id op, const cx_tensor *const *in,
                        const cx_params *ps, cx_tensor *out, cx_status *st) {
    if (op == CX_OP_TRIANGULAR_SOLVE) return triangular_solve(impl, in[0], in[1], ps, out, st);
    if (op == CX_OP_LU_FACTOR) return lu_factor(impl, in[0], out, st);
    if (op == CX_OP_EIGH_PACKED) return eigh_packed(impl, in[0], out, st);
    return cx_fail(st, CX_EUNSUPPORTED, "cpu: no kernel for %s", cx_op_table[op].name);
}

cx_code cpu_linalg(cx_op_id op, const cx_tensor *const *in, const cx_params *ps, cx_tensor *out,
                   cx_status *st) {
    return cpu_linalg_with(&cpu_linalg_portable, op, in, ps, out, st);
}
