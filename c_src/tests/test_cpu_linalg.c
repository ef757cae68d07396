/* triangular_solve, lu_factor and eigh_packed on the cpu driver, through the full dispatcher.
 * Solutions are checked by multiplying back in double, with only the triangle the options name (the
 * other one holds garbage that must be ignored), for every combination of lower, left_side and
 * transform_a, batched, with vectors and with integer inputs; factorisations by rebuilding
 * P L U, the pivots' bound |l| <= 1 and the permutation; eigenpairs by A v = lambda v,
 * orthonormality and the canonical order and signs. Then the known results of Nx's
 * examples, singular matrices, empty ones and the errors. */
#include "test_util.h"

static uint64_t rng = 88172645463325252ULL;
static double next_unit(void) {
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (double)(rng >> 11) / 9007199254740992.0 * 2 - 1;
}

static cx_tensor *solve(cx_tensor *a, cx_tensor *b, bool lower, bool left, bool transpose,
                        cx_code *code, cx_status *st) {
    cx_params ps = {0};
    cx_param_put_int(&ps, CX_P_LOWER, lower);
    cx_param_put_int(&ps, CX_P_LEFT_SIDE, left);
    cx_param_put_int(&ps, CX_P_TRANSFORM_A, transpose);
    return tu_run(CX_OP_TRIANGULAR_SOLVE, (cx_tensor *[]){a, b}, 2, &ps, code, st);
}

/* op(a)[i][j] of matrix n of a batch, reading only the named triangle of a */
static double op_a(const cx_tensor *a, int64_t n, int64_t m, bool lower, bool transpose, int64_t i,
                   int64_t j) {
    int64_t r = transpose ? j : i, c = transpose ? i : j;
    if (lower ? c > r : c < r) return 0;
    return tu_load(a->desc.dtype, a->data, n * m * m + r * m + c);
}

static void test_solutions_multiply_back(void **state) {
    (void)state;
    const int64_t m = 6, k = 4, batch = 3;
    for (int t = 0; t < 2; t++) {
        cx_dtype type = t ? CX_F64 : CX_F32;
        double tol = t ? 1e-12 : 1e-5;
        double av[3 * 6 * 6], bv[3 * 6 * 4];
        /* a dominant diagonal keeps the systems well conditioned; the whole matrix is filled */
        for (int i = 0; i < batch * m * m; i++)
            av[i] = (i % (m * m)) % (m + 1) == 0 ? 4 + next_unit() : next_unit();
        for (int i = 0; i < batch * m * k; i++) bv[i] = 3 * next_unit();
        cx_tensor *a = tu_tensor(type, 3, TU_SHAPE(3, 6, 6), av);
        cx_tensor *bl = tu_tensor(type, 3, TU_SHAPE(3, 6, 4), bv); /* left: m x k */
        cx_tensor *br = tu_tensor(type, 3, TU_SHAPE(3, 4, 6), bv); /* right: k x m */
        cx_tensor *bvec = tu_tensor(type, 2, TU_SHAPE(3, 6), bv);  /* a vector per matrix */
        for (int opt = 0; opt < 8; opt++) {
            bool lower = opt & 1, left = opt & 2, transpose = opt & 4;
            cx_code rc;
            cx_status st = {0};
            cx_tensor *b = left ? bl : br;
            cx_tensor *x = solve(a, b, lower, left, transpose, &rc, &st);
            if (!x) fail_msg("options %d: %s", opt, st.message);
            assert_int_equal(x->desc.dtype, type);
            for (int64_t n = 0; n < batch; n++)
                for (int64_t r = 0; r < (left ? m : k); r++)
                    for (int64_t c = 0; c < (left ? k : m); c++) {
                        double got = 0;
                        for (int64_t j = 0; j < m; j++)
                            got += left ? op_a(a, n, m, lower, transpose, r, j) *
                                              tu_load(type, x->data, n * m * k + j * k + c)
                                        : tu_load(type, x->data, n * m * k + r * m + j) *
                                              op_a(a, n, m, lower, transpose, j, c);
                        double want = tu_load(type, b->data, n * m * k + r * (left ? k : m) + c);
                        if (fabs(got - want) > tol * 10)
                            fail_msg("options %d, matrix %lld, [%lld][%lld]: %.17g vs %.17g", opt,
                                     (long long)n, (long long)r, (long long)c, got, want);
                    }
            tu_drop(x);
            /* vectors: op(a) x = b on the left, x op(a) = b on the right */
            x = solve(a, bvec, lower, left, transpose, &rc, &st);
            if (!x) fail_msg("options %d, vectors: %s", opt, st.message);
            for (int64_t n = 0; n < batch; n++)
                for (int64_t r = 0; r < m; r++) {
                    double got = 0;
                    for (int64_t j = 0; j < m; j++)
                        got += (left ? op_a(a, n, m, lower, transpose, r, j)
                                     : op_a(a, n, m, lower, transpose, j, r)) *
                               tu_load(type, x->data, n * m + j);
                    double want = tu_load(type, bvec->data, n * m + r);
                    if (fabs(got - want) > tol * 10)
                        fail_msg("options %d, vector %lld, [%lld]: %.17g vs %.17g", opt,
                                 (long long)n, (long long)r, got, want);
                }
            tu_drop(x);
        }
        cx_tensor *r[] = {a, bl, br, bvec};
        for (int i = 0; i < 4; i++) tu_drop(r[i]);
    }
}

static void test_known_solutions(void **state) {
    (void)state;
    cx_code rc;
    cx_status st = {0};
    /* Nx's examples: integers give f32; the right side; a batch of two with one b each */
    cx_tensor *a = tu_tensor(CX_S64, 2, TU_SHAPE(3, 3), TU_VALUES(1, 0, 0, 1, 1, 0, 1, 2, 1));
    cx_tensor *b = tu_tensor(CX_S64, 2, TU_SHAPE(2, 3), TU_VALUES(0, 1, 3, 2, 1, 3));
    cx_tensor *x = solve(a, b, true, false, false, &rc, &st);
    tu_expect(x, CX_F32, 2, TU_SHAPE(2, 3), TU_VALUES(2, -5, 3, 4, -5, 3), 0);
    cx_tensor *a2 = tu_tensor(CX_S64, 3, TU_SHAPE(2, 2, 2), TU_VALUES(1, 0, 2, 3, 4, 0, 5, 6));
    cx_tensor *b2 = tu_tensor(CX_S64, 2, TU_SHAPE(2, 2), TU_VALUES(2, -1, 3, 7));
    cx_tensor *x2 = solve(a2, b2, true, true, false, &rc, &st);
    tu_expect(x2, CX_F32, 2, TU_SHAPE(2, 2),
              TU_VALUES(2.0, -1.6666666269302368, 0.75, 0.5416666865348816), 0);
    /* mixed f16 and f64: the merged type; a NaN in b gives NaN where it reaches */
    cx_tensor *a3 = tu_tensor(CX_F16, 2, TU_SHAPE(2, 2), TU_VALUES(2, 0, 1, 4));
    cx_tensor *b3 = tu_tensor(CX_F64, 1, TU_SHAPE(2), TU_VALUES(NAN, 10));
    cx_tensor *x3 = solve(a3, b3, false, true, false, &rc, &st);
    tu_expect(x3, CX_F64, 1, TU_SHAPE(2), TU_VALUES(NAN, 2.5), 0);
    cx_tensor *r[] = {a, b, x, a2, b2, x2, a3, b3, x3};
    for (int i = 0; i < 9; i++) tu_drop(r[i]);
}

static void test_solve_errors_and_empty(void **state) {
    (void)state;
    cx_tensor *a = tu_tensor(CX_F32, 2, TU_SHAPE(2, 2), TU_VALUES(1, 0, 1, 0));
    cx_tensor *b = tu_tensor(CX_F32, 1, TU_SHAPE(2), TU_VALUES(1, 2));
    cx_tensor *b3 = tu_tensor(CX_F32, 1, TU_SHAPE(3), TU_VALUES(1, 2, 3));
    cx_tensor *ns = tu_tensor(CX_F32, 2, TU_SHAPE(2, 3), TU_VALUES(1, 0, 0, 1, 1, 0));
    cx_tensor *batch = tu_tensor(CX_F32, 3, TU_SHAPE(2, 2, 2), TU_VALUES(1, 0, 1, 1, 1, 0, 1, 1));
    cx_tensor *wrong_batch = tu_tensor(CX_F32, 2, TU_SHAPE(3, 2), TU_VALUES(1, 2, 3, 4, 5, 6));
    struct {
        cx_tensor *a, *b;
        bool lower;
        const char *msg;
    } bad[] = {
        {a, b, true, "can't solve for singular matrix (a zero on the diagonal of a, row 1"},
        /* the upper triangle of the same matrix has 1 and 0 on its diagonal too */
        {a, b, false, "singular"},
        {a, b3, true, "expected b of shape {..., 2, n}"},
        {ns, b, true, "expected a to be a square matrix"},
        {b, b, true, "expected a to be a square matrix"},
        {batch, wrong_batch, true, "leading axes of a {2, 2, 2}"},
    };
    for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++) {
        cx_code rc;
        cx_status st = {0};
        cx_tensor *x = solve(bad[k].a, bad[k].b, bad[k].lower, true, false, &rc, &st);
        assert_null(x);
        assert_int_equal(rc, CX_EINVAL);
        if (!strstr(st.message, bad[k].msg))
            fail_msg("case %zu: %s does not say \"%s\"", k, st.message, bad[k].msg);
    }
    /* no right-hand side: nothing to solve, and no singularity to report */
    cx_code rc;
    cx_status st = {0};
    cx_tensor *none = tu_tensor(CX_F32, 2, TU_SHAPE(2, 0), NULL);
    cx_tensor *x = solve(a, none, true, true, false, &rc, &st);
    assert_non_null(x);
    assert_int_equal(x->numel, 0);
    cx_tensor *r[] = {a, b, b3, ns, batch, wrong_batch, none, x};
    for (int i = 0; i < 8; i++) tu_drop(r[i]);
}

static cx_tensor *factor(cx_tensor *x) {
    return tu_run_ok(CX_OP_LU_FACTOR, (cx_tensor *[]){x}, 1, NULL);
}

static void test_lu_rebuilds_the_matrix(void **state) {
    (void)state;
    const int64_t sizes[] = {1, 2, 3, 7, 20};
    for (int s = 0; s < 5; s++) {
        int64_t n = sizes[s], batch = 3;
        double *v = malloc(sizeof(double) * (size_t)(batch * n * n));
        for (int64_t i = 0; i < batch * n * n; i++) v[i] = next_unit();
        cx_tensor *a = tu_tensor(CX_F64, 3, TU_SHAPE(batch, n, n), v);
        cx_tensor *f = factor(a);
        assert_int_equal(f->desc.dtype, CX_F64);
        assert_int_equal(f->desc.shape[1], n + 1);
        const double *p = f->data;
        for (int64_t b = 0; b < batch; b++) {
            const double *lu = p + b * (n + 1) * n, *perm = lu + n * n;
            bool seen[20] = {false};
            for (int64_t i = 0; i < n; i++) {
                int64_t r = (int64_t)perm[i];
                assert_true(perm[i] == (double)r && r >= 0 && r < n && !seen[r]);
                seen[r] = true;
                for (int64_t j = 0; j < i; j++) assert_true(fabs(lu[i * n + j]) <= 1);
            }
            /* (L U)[i][j] is row perm[i] of the input */
            for (int64_t i = 0; i < n; i++)
                for (int64_t j = 0; j < n; j++) {
                    double sum = 0;
                    for (int64_t q = 0; q <= (i < j ? i : j); q++)
                        sum += (q == i ? 1 : lu[i * n + q]) * lu[q * n + j];
                    double want = v[b * n * n + (int64_t)perm[i] * n + j];
                    if (fabs(sum - want) > 1e-12)
                        fail_msg("n %lld, matrix %lld, [%lld][%lld]: %.17g vs %.17g", (long long)n,
                                 (long long)b, (long long)i, (long long)j, sum, want);
                }
        }
        free(v);
        tu_drop(a);
        tu_drop(f);
    }
}

static void test_lu_known_singular_and_types(void **state) {
    (void)state;
    /* the first largest magnitude is the pivot: the rows of equal magnitude stay in order */
    cx_tensor *a = tu_tensor(CX_F64, 2, TU_SHAPE(2, 2), TU_VALUES(1, 2, 3, 4));
    cx_tensor *f = factor(a);
    tu_expect(f, CX_F64, 2, TU_SHAPE(3, 2),
              TU_VALUES(3, 4, 0.3333333333333333, 0.6666666666666667, 1, 0), 0);
    cx_tensor *s = tu_tensor(CX_S32, 2, TU_SHAPE(3, 3), TU_VALUES(-1, 0, -1, 1, 0, 1, 1, 1, 1));
    cx_tensor *fs = factor(s);
    /* a column of zeros below the diagonal: no division, a zero on U's diagonal, no NaN */
    tu_expect(fs, CX_F32, 2, TU_SHAPE(4, 3), TU_VALUES(-1, 0, -1, -1, 1, 0, -1, 0, 0, 0, 2, 1), 0);
    cx_tensor *z = tu_tensor(CX_F16, 2, TU_SHAPE(2, 2), TU_VALUES(0, 0, 0, 0));
    cx_tensor *fz = factor(z);
    tu_expect(fz, CX_F32, 2, TU_SHAPE(3, 2), TU_VALUES(0, 0, 0, 0, 0, 1), 0);
    cx_tensor *e = tu_tensor(CX_F32, 3, TU_SHAPE(2, 0, 0), NULL), *fe = factor(e);
    assert_int_equal(fe->desc.shape[1], 1);
    assert_int_equal(fe->numel, 0);
    cx_code rc;
    cx_status st = {0};
    cx_tensor *bad = tu_tensor(CX_F32, 1, TU_SHAPE(4), TU_VALUES(1, 2, 3, 4));
    assert_null(tu_run(CX_OP_LU_FACTOR, (cx_tensor *[]){bad}, 1, NULL, &rc, &st));
    assert_int_equal(rc, CX_EINVAL);
    assert_non_null(strstr(st.message, "square matrix"));
    cx_tensor *r[] = {a, f, s, fs, z, fz, e, fe, bad};
    for (int i = 0; i < 9; i++) tu_drop(r[i]);
}

static cx_tensor *eigen(cx_tensor *x) {
    return tu_run_ok(CX_OP_EIGH_PACKED, (cx_tensor *[]){x}, 1, NULL);
}

/* A v = lambda v for every pair, V^T V = I, ascending eigenvalues, each vector's largest
 * component positive; only the lower triangle is read (the upper one holds garbage) */
static void test_eigh_pairs(void **state) {
    (void)state;
    const int64_t sizes[] = {1, 2, 5, 12};
    for (int s = 0; s < 4; s++) {
        int64_t n = sizes[s], batch = 2;
        double *v = malloc(sizeof(double) * (size_t)(batch * n * n));
        for (int64_t i = 0; i < batch * n * n; i++) v[i] = 5 * next_unit();
        cx_tensor *a = tu_tensor(CX_F64, 3, TU_SHAPE(batch, n, n), v);
        cx_tensor *e = eigen(a);
        assert_int_equal(e->desc.dtype, CX_F64);
        assert_int_equal(e->desc.shape[1], n + 1);
        const double *p = e->data;
        for (int64_t b = 0; b < batch; b++) {
            const double *m = v + b * n * n, *vals = p + b * (n + 1) * n, *vecs = vals + n;
            /* the symmetric matrix read: the lower triangle mirrored */
#define SYM(i, j) ((i) >= (j) ? m[(i)*n + (j)] : m[(j)*n + (i)])
            for (int64_t j = 0; j < n; j++) {
                if (j > 0) assert_true(vals[j - 1] <= vals[j]);
                int64_t big = 0;
                for (int64_t i = 0; i < n; i++) {
                    double av = 0;
                    for (int64_t k = 0; k < n; k++) av += SYM(i, k) * vecs[k * n + j];
                    if (fabs(av - vals[j] * vecs[i * n + j]) > 1e-12)
                        fail_msg("n %lld, matrix %lld, pair %lld, row %lld: %.17g vs %.17g",
                                 (long long)n, (long long)b, (long long)j, (long long)i, av,
                                 vals[j] * vecs[i * n + j]);
                    if (fabs(vecs[i * n + j]) > fabs(vecs[big * n + j])) big = i;
                }
                assert_true(vecs[big * n + j] > 0);
                for (int64_t q = 0; q < n; q++) {
                    double dot = 0;
                    for (int64_t i = 0; i < n; i++) dot += vecs[i * n + j] * vecs[i * n + q];
                    assert_true(fabs(dot - (q == j)) < 1e-13);
                }
            }
#undef SYM
        }
        free(v);
        tu_drop(a);
        tu_drop(e);
    }
}

static void test_eigh_known_types_and_nan(void **state) {
    (void)state;
    /* a diagonal matrix comes back sorted; integers give f32 */
    cx_tensor *d = tu_tensor(CX_S32, 2, TU_SHAPE(2, 2), TU_VALUES(2, 0, 0, 1));
    cx_tensor *ed = eigen(d);
    tu_expect(ed, CX_F32, 2, TU_SHAPE(3, 2), TU_VALUES(1, 2, 0, 1, 1, 0), 0);
    /* [[2, 1], [1, 2]]: 1 and 3, with (1, -1) and (1, 1) over sqrt(2), largest component
     * positive (the first of equal magnitudes) */
    cx_tensor *a = tu_tensor(CX_F64, 2, TU_SHAPE(2, 2), TU_VALUES(2, 1, 1, 2));
    cx_tensor *ea = eigen(a);
    double r = sqrt(0.5);
    tu_expect(ea, CX_F64, 2, TU_SHAPE(3, 2), TU_VALUES(1, 3, r, r, -r, r), 1e-15);
    /* f16 keeps its type; a NaN gives NaN throughout (no hang) */
    cx_tensor *h = tu_tensor(CX_F16, 2, TU_SHAPE(2, 2), TU_VALUES(1, NAN, NAN, 1));
    cx_tensor *eh = eigen(h);
    assert_int_equal(eh->desc.dtype, CX_F16);
    for (int64_t i = 0; i < eh->numel; i++) assert_true(isnan(tu_load(CX_F16, eh->data, i)));
    cx_tensor *e = tu_tensor(CX_F32, 3, TU_SHAPE(3, 0, 0), NULL), *ee = eigen(e);
    assert_int_equal(ee->desc.shape[1], 1);
    assert_int_equal(ee->numel, 0);
    cx_code rc;
    cx_status st = {0};
    cx_tensor *bad = tu_tensor(CX_F32, 2, TU_SHAPE(2, 3), TU_VALUES(1, 2, 3, 4, 5, 6));
    assert_null(tu_run(CX_OP_EIGH_PACKED, (cx_tensor *[]){bad}, 1, NULL, &rc, &st));
    assert_int_equal(rc, CX_EINVAL);
    assert_non_null(strstr(st.message, "square matrix"));
    cx_tensor *all[] = {d, ed, a, ea, h, eh, e, ee, bad};
    for (int i = 0; i < 9; i++) tu_drop(all[i]);
}

/* `count` vectors of `len` elements in p, vector j's element i at at + j * step + i * el_step,
 * orthonormal within tol */
static void orthonormal(const cx_tensor *p, int64_t at, int64_t step, int64_t el_step,
                        int64_t count, int64_t len, double tol, const char *what) {
    for (int64_t j = 0; j < count; j++)
        for (int64_t q = 0; q < count; q++) {
            double dot = 0;
            for (int64_t i = 0; i < len; i++)
                dot += tu_load(p->desc.dtype, p->data, at + j * step + i * el_step) *
                       tu_load(p->desc.dtype, p->data, at + q * step + i * el_step);
            if (fabs(dot - (j == q)) > tol)
                fail_msg("%s %lld and %lld: %.17g", what, (long long)j, (long long)q, dot);
        }
}

/* svd_packed of x with full matrices or not: checks the canonical form and the decomposition
 * (u diag(s) vt = x within tol of x's largest magnitude, u and vt orthonormal within 1e-13, 1e-6
 * in f32);
 * returns the singular values of the first matrix (k of them, the caller frees them) */
static double *svd_checked(const cx_tensor *x, bool full, double tol) {
    const cx_desc *d = &x->desc;
    int64_t m = d->shape[d->rank - 2], n = d->shape[d->rank - 1], k = m < n ? m : n;
    int64_t c = full ? m : k, r = full ? n : k, w = c > n ? c : n;
    cx_params ps = {0};
    cx_param_put_int(&ps, CX_P_FULL_MATRICES, full);
    cx_tensor *p = tu_run_ok(CX_OP_SVD_PACKED, (cx_tensor *[]){(cx_tensor *)x}, 1, &ps);
    assert_int_equal(p->desc.shape[p->desc.rank - 2], m + 1 + r);
    assert_int_equal(p->desc.shape[p->desc.rank - 1], w);
    int64_t batches = x->numel / (m * n > 0 ? m * n : 1);
    double *first = malloc(sizeof(double) * (size_t)(k + 1));
    double orth = p->desc.dtype == CX_F64 ? 1e-13 : 1e-6;
    for (int64_t b = 0; b < (m * n > 0 ? batches : 0); b++) {
        int64_t base = b * (m + 1 + r) * w;
#define U(i, j)  tu_load(p->desc.dtype, p->data, base + (i)*w + (j))
#define S(j)     tu_load(p->desc.dtype, p->data, base + m * w + (j))
#define VT(i, j) tu_load(p->desc.dtype, p->data, base + (m + 1 + (i)) * w + (j))
        double big = 0;
        for (int64_t i = 0; i < m * n; i++)
            big = fmax(big, fabs(tu_load(d->dtype, x->data, b * m * n + i)));
        for (int64_t j = 0; j < k; j++) {
            if (b == 0) first[j] = S(j);
            assert_true(S(j) >= 0);
            if (j > 0) assert_true(S(j) <= S(j - 1));
            int64_t top = 0;
            for (int64_t i = 1; i < n; i++)
                if (fabs(VT(j, i)) > fabs(VT(j, top))) top = i;
            assert_true(VT(j, top) > 0);
        }
        for (int64_t i = 0; i < m; i++)
            for (int64_t l = 0; l < n; l++) {
                double sum = 0;
                for (int64_t j = 0; j < k; j++) sum += U(i, j) * S(j) * VT(j, l);
                double want = tu_load(d->dtype, x->data, b * m * n + i * n + l);
                if (fabs(sum - want) > tol * big)
                    fail_msg("%lld x %lld (full %d), matrix %lld, (%lld, %lld): %.17g vs %.17g",
                             (long long)m, (long long)n, full, (long long)b, (long long)i,
                             (long long)l, sum, want);
            }
        /* u's columns (one element a row of w apart), vt's rows (adjacent elements) */
        orthonormal(p, base, 1, w, c, m, orth, "u's columns");
        orthonormal(p, base + (m + 1) * w, w, 1, r, n, orth, "vt's rows");
#undef U
#undef S
#undef VT
    }
    tu_drop(p);
    return first;
}

/* Tall, wide, square and batched matrices of random values, full and thin */
static void test_svd_decomposes(void **state) {
    (void)state;
    const int64_t shapes[][2] = {{1, 1}, {3, 3}, {5, 3}, {3, 5}, {12, 7}, {7, 12}, {1, 6}, {9, 1}};
    for (int s = 0; s < 8; s++)
        for (int full = 0; full < 2; full++) {
            int64_t m = shapes[s][0], n = shapes[s][1], batch = 2;
            double *v = malloc(sizeof(double) * (size_t)(batch * m * n));
            for (int64_t i = 0; i < batch * m * n; i++) v[i] = 5 * next_unit();
            cx_tensor *a = tu_tensor(CX_F64, 3, TU_SHAPE(batch, m, n), v);
            free(svd_checked(a, full, 1e-14));
            free(v);
            tu_drop(a);
        }
}

/* A matrix of rank r gives its other singular values at the rounding of double, not of its
 * type (f32 here): the 3 x 4 of the issue (its second row twice its first: Nx's svd gave
 * 8e-8-2e-7, and its pinv entries of 1e6), a 12 x 7 of rank 2 and one of zeros; the vectors of
 * the zero singular values are completed into orthonormal ones */
static void test_svd_rank_deficient(void **state) {
    (void)state;
    cx_tensor *a =
        tu_tensor(CX_F32, 2, TU_SHAPE(3, 4), TU_VALUES(1, 2, 3, 4, 2, 4, 6, 8, 1, 0, 1, 0));
    for (int full = 0; full < 2; full++) {
        double *s = svd_checked(a, full, 1e-6);
        assert_true(fabs(s[0] - 12.269416474076383) < 1e-5);
        assert_true(fabs(s[1] - 1.2088918006435088) < 1e-6);
        assert_true(s[2] < 1e-14);
        free(s);
    }
    double l[12 * 2], rr[2 * 7], v[12 * 7];
    for (int i = 0; i < 24; i++) l[i] = next_unit();
    for (int i = 0; i < 14; i++) rr[i] = next_unit();
    for (int i = 0; i < 12; i++)
        for (int j = 0; j < 7; j++) v[i * 7 + j] = l[i * 2] * rr[j] + l[i * 2 + 1] * rr[7 + j];
    cx_tensor *low = tu_tensor(CX_F64, 2, TU_SHAPE(12, 7), v);
    for (int full = 0; full < 2; full++) {
        double *s = svd_checked(low, full, 1e-14);
        for (int j = 2; j < 7; j++) assert_true(s[j] < 1e-14 * s[0]);
        free(s);
    }
    cx_tensor *z =
        tu_tensor(CX_F64, 2, TU_SHAPE(4, 3), TU_VALUES(0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0));
    for (int full = 0; full < 2; full++) {
        double *s = svd_checked(z, full, 0);
        for (int j = 0; j < 3; j++) assert_true(s[j] == 0);
        free(s);
    }
    tu_drop(a);
    tu_drop(low);
    tu_drop(z);
}

static void test_svd_known_types_nan_and_errors(void **state) {
    (void)state;
    cx_params thin = {0}, full = {0};
    cx_param_put_int(&full, CX_P_FULL_MATRICES, 1);
    /* diag(3, 4): 4 and 3, both vectors swapped; integers give f32 */
    cx_tensor *d = tu_tensor(CX_S32, 2, TU_SHAPE(2, 2), TU_VALUES(3, 0, 0, 4));
    cx_tensor *pd = tu_run_ok(CX_OP_SVD_PACKED, (cx_tensor *[]){d}, 1, &full);
    tu_expect(pd, CX_F32, 2, TU_SHAPE(5, 2), TU_VALUES(0, 1, 1, 0, 4, 3, 0, 1, 1, 0), 0);
    /* f16 keeps its type; NaN or infinity gives NaN throughout */
    cx_tensor *h = tu_tensor(CX_F16, 2, TU_SHAPE(2, 3), TU_VALUES(1, 2, INFINITY, 4, 5, 6));
    cx_tensor *ph = tu_run_ok(CX_OP_SVD_PACKED, (cx_tensor *[]){h}, 1, &thin);
    assert_int_equal(ph->desc.dtype, CX_F16);
    assert_int_equal(ph->desc.shape[0], 2 + 1 + 2);
    assert_int_equal(ph->desc.shape[1], 3);
    for (int64_t i = 0; i < ph->numel; i++) assert_true(isnan(tu_load(CX_F16, ph->data, i)));
    /* empty matrices: {4, 0} gives u = I (4 x 4) with full matrices, nothing else */
    cx_tensor *e = tu_tensor(CX_F64, 2, TU_SHAPE(4, 0), NULL);
    cx_tensor *pe = tu_run_ok(CX_OP_SVD_PACKED, (cx_tensor *[]){e}, 1, &full);
    tu_expect(pe, CX_F64, 2, TU_SHAPE(5, 4),
              TU_VALUES(1, 0, 0, 0, 0, 1, 0, 0, 0, 0, 1, 0, 0, 0, 0, 1, 0, 0, 0, 0), 0);
    cx_tensor *eb = tu_tensor(CX_F32, 3, TU_SHAPE(0, 3, 2), NULL);
    cx_tensor *peb = tu_run_ok(CX_OP_SVD_PACKED, (cx_tensor *[]){eb}, 1, &thin);
    assert_int_equal(peb->numel, 0);
    assert_int_equal(peb->desc.shape[1], 3 + 1 + 2);
    cx_code rc;
    cx_status st = {0};
    cx_tensor *vec = tu_tensor(CX_F32, 1, TU_SHAPE(3), TU_VALUES(1, 2, 3));
    assert_null(tu_run(CX_OP_SVD_PACKED, (cx_tensor *[]){vec}, 1, &thin, &rc, &st));
    assert_int_equal(rc, CX_EINVAL);
    assert_non_null(strstr(st.message, "expected a matrix or a batch of matrices"));
    cx_tensor *cplx = tu_tensor(CX_C64, 2, TU_SHAPE(1, 1), TU_VALUES(1));
    assert_null(tu_run(CX_OP_SVD_PACKED, (cx_tensor *[]){cplx}, 1, &thin, &rc, &st));
    assert_int_equal(rc, CX_EINVAL);
    assert_non_null(strstr(st.message, "expected a real tensor"));
    cx_tensor *all[] = {d, pd, h, ph, e, pe, eb, peb, vec, cplx};
    for (int i = 0; i < 10; i++) tu_drop(all[i]);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_solutions_multiply_back),
        cmocka_unit_test(test_known_solutions),
        cmocka_unit_test(test_solve_errors_and_empty),
        cmocka_unit_test(test_lu_rebuilds_the_matrix),
        cmocka_unit_test(test_lu_known_singular_and_types),
        cmocka_unit_test(test_eigh_pairs),
        cmocka_unit_test(test_eigh_known_types_and_nan),
        cmocka_unit_test(test_svd_decomposes),
        cmocka_unit_test(test_svd_rank_deficient),
        cmocka_unit_test(test_svd_known_types_nan_and_errors),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
