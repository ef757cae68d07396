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
 * distinct.
 *
 * svd_packed is the one-sided Jacobi method (Hestenes; Demmel & Veselic): plane rotations of
 * pairs of columns of the matrix (of its transpose when it is wide) until every pair is
 * orthogonal to 2^-52 of their norms; the columns' norms are then the singular values. It gives
 * each singular value to high relative accuracy: a matrix of exact rank r gives its other
 * singular values at about 2^-52 of the largest, where an SVD through an eigendecomposition of
 * the f32 product a^T a (Nx's default) leaves them at 2^-23 of it, which Nx's pinv then divides
 * by. The result is put in a canonical form the blas driver's LAPACK path (dgesdd) shares:
 * descending singular values, each right singular vector with its largest component positive,
 * and the vectors of zero singular values, and those that full matrices add, completed by
 * Gram-Schmidt on the standard basis vectors. */
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

/* One-sided Jacobi on the q columns of t (each p long, column j at t + j * p): column pairs
 * rotated until orthogonal to 2^-52 of their norms (at most 64 sweeps); v (q x q, column j at
 * v + j * q) accumulates the rotations. */
static void hestenes(int64_t p, int64_t q, double *t, double *v) {
    for (int64_t i = 0; i < q * q; i++) v[i] = i % (q + 1) == 0;
    for (int sweep = 0; sweep < 64; sweep++) {
        bool rotated = false;
        for (int64_t j = 0; j + 1 < q; j++)
            for (int64_t l = j + 1; l < q; l++) {
                double *x = t + j * p, *y = t + l * p;
                double alpha = 0, beta = 0, gamma = 0;
                for (int64_t i = 0; i < p; i++) {
                    alpha += x[i] * x[i];
                    beta += y[i] * y[i];
                    gamma += x[i] * y[i];
                }
                if (!(fabs(gamma) > 0x1p-52 * sqrt(alpha * beta))) continue;
                rotated = true;
                double zeta = (beta - alpha) / (2 * gamma);
                double tn = isinf(zeta * zeta)
                                ? 0.5 / zeta
                                : (zeta >= 0 ? 1.0 : -1.0) / (fabs(zeta) + sqrt(1 + zeta * zeta));
                double c = 1 / sqrt(1 + tn * tn), s = c * tn;
                for (int64_t i = 0; i < p; i++) {
                    double xi = x[i], yi = y[i];
                    x[i] = c * xi - s * yi;
                    y[i] = s * xi + c * yi;
                }
                double *vx = v + j * q, *vy = v + l * q;
                for (int64_t i = 0; i < q; i++) {
                    double xi = vx[i], yi = vy[i];
                    vx[i] = c * xi - s * yi;
                    vy[i] = s * xi + c * yi;
                }
            }
        if (!rotated) break;
    }
}

/* The length of a row of len values */
static double row_norm(const double *x, int64_t len) {
    double sum = 0;
    for (int64_t i = 0; i < len; i++) sum += x[i] * x[i];
    return sqrt(sum);
}

/* gesvd (cpu_linalg_impl) by hestenes on a's columns, or on its rows when it is wide (a^T's
 * columns: the same memory) */
static bool jacobi_svd(int64_t m, int64_t n, double *a, double *s, double *ut, double *vt) {
    bool tall = m >= n;
    int64_t p = tall ? m : n, q = tall ? n : m;
    double *t = tall ? malloc(sizeof(double) * (size_t)(p * q)) : a;
    double *v = malloc(sizeof(double) * (size_t)(q * q));
    if (!t || !v) {
        if (tall) free(t);
        free(v);
        return false;
    }
    if (tall)
        for (int64_t i = 0; i < m; i++)
            for (int64_t j = 0; j < n; j++) t[j * p + i] = a[i * n + j];
    hestenes(p, q, t, v);
    /* the columns' vectors (left ones of a when tall, right ones when wide) and v's */
    double *cols = tall ? ut : vt, *rows = tall ? vt : ut;
    for (int64_t j = 0; j < q; j++) {
        s[j] = row_norm(t + j * p, p);
        for (int64_t i = 0; i < p; i++) cols[j * p + i] = s[j] > 0 ? t[j * p + i] / s[j] : 0;
        memcpy(rows + j * q, v + j * q, sizeof(double) * (size_t)q);
    }
    if (tall) free(t);
    free(v);
    return true;
}

const cpu_linalg_impl cpu_linalg_portable = {substitute, eliminate, jacobi, jacobi_svd};

/* The `rows` rows of `basis` (each `len` long) made orthonormal where they are `missing` or from
 * `have` on, the others kept: each made one is the standard basis vector least covered by the
 * rows so far, with their parts taken out twice (Gram-Schmidt), normalised. resid (len) is
 * scratch. */
static void complete_rows(int64_t len, int64_t rows, int64_t have, const bool *missing,
                          double *basis, double *resid) {
    for (int64_t i = 0; i < len; i++) resid[i] = 1;
    for (int64_t r = 0; r < rows; r++)
        if (r < have && !missing[r])
            for (int64_t i = 0; i < len; i++) resid[i] -= basis[r * len + i] * basis[r * len + i];
    for (int64_t r = 0; r < rows; r++) {
        if (r < have && !missing[r]) continue;
        int64_t best = 0;
        for (int64_t i = 1; i < len; i++)
            if (resid[i] > resid[best]) best = i;
        double *x = basis + r * len;
        for (int64_t i = 0; i < len; i++) x[i] = i == best;
        for (int pass = 0; pass < 2; pass++)
            for (int64_t o = 0; o < rows; o++) {
                if (o == r || (o > r && (o >= have || missing[o]))) continue; /* not made yet */
                const double *y = basis + o * len;
                double dot = 0;
                for (int64_t i = 0; i < len; i++) dot += x[i] * y[i];
                for (int64_t i = 0; i < len; i++) x[i] -= dot * y[i];
            }
        double norm = row_norm(x, len);
        for (int64_t i = 0; i < len; i++) {
            x[i] /= norm;
            resid[i] -= x[i] * x[i];
        }
    }
}

/* The batch's matrices through impl->gesvd, scaled to a largest magnitude of 1 (no overflow in
 * the squares of the rotations), in canonical form (the top of the file) and packed. */
static cx_code svd_packed(const cpu_linalg_impl *impl, const cx_tensor *in, const cx_params *ps,
                          cx_tensor *out, cx_status *st) {
    const cx_desc *d = &in->desc;
    int64_t m = d->shape[d->rank - 2], n = d->shape[d->rank - 1], k = m < n ? m : n;
    int64_t batches = batch_count(d), w = out->desc.shape[out->desc.rank - 1];
    bool full = ps->p[CX_P_FULL_MATRICES].i[0] != 0;
    int64_t c = full ? m : k, r = full ? n : k, rows = m + 1 + r;
    if (batches == 0 || rows * w == 0) return CX_OK;
    /* a; s; ut (c x m) and vt (r x n), and gesvd's (in its order); complete_rows' scratch; s in
     * order */
    size_t doubles = (size_t)(m * n + k + 2 * (c * m + r * n) + (m > n ? m : n) + k);
    double *a = malloc(sizeof(double) * doubles);
    int64_t *idx = malloc(sizeof(int64_t) * (size_t)(k + 1));
    bool *missing = malloc((size_t)(m > n ? m : n) + 1);
    if (!a || !idx || !missing) {
        free(a);
        free(idx);
        free(missing);
        return cx_fail(st, CX_ENOMEM, "cpu: no memory for svd_packed of %lld x %lld", (long long)m,
                       (long long)n);
    }
    double *s = a + m * n, *ut = s + k, *vt = ut + c * m, *ut0 = vt + r * n, *vt0 = ut0 + c * m;
    double *resid = vt0 + r * n, *sorted = resid + (m > n ? m : n);
    cx_dtype it = d->dtype, ot = out->desc.dtype;
    cx_code rc = CX_OK;
    for (int64_t b = 0; b < batches && rc == CX_OK; b++) {
        double scale = 0;
        for (int64_t i = 0; i < m * n; i++) {
            a[i] = cpu_load_f64(it, in->data, b * m * n + i);
            scale = isnan(a[i]) || isnan(scale) ? NAN : fmax(scale, fabs(a[i]));
        }
        int64_t base = b * rows * w;
        for (int64_t i = 0; i < rows * w; i++) cpu_store_f64(ot, out->data, base + i, 0);
        if (!isfinite(scale)) { /* NaN or infinity: no decomposition */
            for (int64_t i = 0; i < rows * w; i++) cpu_store_f64(ot, out->data, base + i, NAN);
            continue;
        }
        if (scale > 0)
            for (int64_t i = 0; i < m * n; i++) a[i] /= scale;
        else
            scale = 1;
        if (k > 0 && !impl->gesvd(m, n, a, s, ut0, vt0)) {
            rc = cx_fail(st, CX_ENOMEM, "cpu: no memory for svd_packed of %lld x %lld",
                         (long long)m, (long long)n);
            break;
        }
        /* descending, stable */
        for (int64_t i = 0; i < k; i++) {
            int64_t v = idx[i] = i, j = i;
            for (; j > 0 && s[v] > s[idx[j - 1]]; j--) idx[j] = idx[j - 1];
            idx[j] = v;
        }
        for (int64_t j = 0; j < k; j++) {
            const double *u_row = ut0 + idx[j] * m, *v_row = vt0 + idx[j] * n;
            int64_t big = 0;
            for (int64_t i = 1; i < n; i++)
                if (fabs(v_row[i]) > fabs(v_row[big])) big = i;
            double sign = v_row[big] < 0 ? -1.0 : 1.0;
            for (int64_t i = 0; i < m; i++) ut[j * m + i] = sign * u_row[i];
            for (int64_t i = 0; i < n; i++) vt[j * n + i] = sign * v_row[i];
        }
        for (int64_t j = 0; j < k; j++) sorted[j] = s[idx[j]] * scale;
        /* vectors that are not unit vectors (a zero singular value's) and the ones full
         * matrices add: completed */
        for (int64_t j = 0; j < c; j++)
            missing[j] = j >= k || fabs(row_norm(ut + j * m, m) - 1) > 0.5;
        complete_rows(m, c, k, missing, ut, resid);
        for (int64_t j = 0; j < r; j++)
            missing[j] = j >= k || fabs(row_norm(vt + j * n, n) - 1) > 0.5;
        complete_rows(n, r, k, missing, vt, resid);
        for (int64_t i = 0; i < m; i++)
            for (int64_t j = 0; j < c; j++)
                cpu_store_f64(ot, out->data, base + i * w + j, ut[j * m + i]);
        for (int64_t j = 0; j < k; j++) cpu_store_f64(ot, out->data, base + m * w + j, sorted[j]);
        for (int64_t i = 0; i < r; i++)
            for (int64_t j = 0; j < n; j++)
                cpu_store_f64(ot, out->data, base + (m + 1 + i) * w + j, vt[i * n + j]);
    }
    free(a);
    free(idx);
    free(missing);
    return rc;
}

cx_code cpu_linalg_with(const cpu_linalg_impl *impl, cx_op_id op, const cx_tensor *const *in,
                        const cx_params *ps, cx_tensor *out, cx_status *st) {
    if (op == CX_OP_TRIANGULAR_SOLVE) return triangular_solve(impl, in[0], in[1], ps, out, st);
    if (op == CX_OP_LU_FACTOR) return lu_factor(impl, in[0], out, st);
    if (op == CX_OP_EIGH_PACKED) return eigh_packed(impl, in[0], out, st);
    if (op == CX_OP_SVD_PACKED) return svd_packed(impl, in[0], ps, out, st);
    return cx_fail(st, CX_EUNSUPPORTED, "cpu: no kernel for %s", cx_op_table[op].name);
}

cx_code cpu_linalg(cx_op_id op, const cx_tensor *const *in, const cx_params *ps, cx_tensor *out,
                   cx_status *st) {
    return cpu_linalg_with(&cpu_linalg_portable, op, in, ps, out, st);
}
