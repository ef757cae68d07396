/* sort and argsort on the cpu driver, through the full dispatcher: Nx's order (NaN last
 * ascending, first descending; -0.0 equal to 0.0), stability, every axis, every type, argsort
 * into narrower integer types, scalars and empty lines, and long random lines checked for order
 * and stability element by element; argsort's first k against the full argsort. Then indexed_add
 * and indexed_put: colliding updates (summed in double and rounded once, or the last one written),
 * blocks of the axes not indexed, wrapping integers, mixed types and out-of-range indices. */
#include "test_util.h"

static const cx_dtype all_types[] = {CX_F16, CX_BF16, CX_F32, CX_F64, CX_U8,  CX_S32,
                                     CX_S64, CX_S8,   CX_S16, CX_U16, CX_U32, CX_U64};
#define COUNT(a) ((int)(sizeof(a) / sizeof((a)[0])))

static cx_tensor *sort_op(cx_op_id op, cx_tensor *x, int64_t axis, int dir, int type) {
    cx_params ps = {0};
    cx_param_put_int(&ps, CX_P_AXIS, axis);
    cx_param_put_int(&ps, CX_P_DIRECTION, dir);
    if (type >= 0) cx_param_put_int(&ps, CX_P_TYPE, type);
    return tu_run_ok(op, (cx_tensor *[]){x}, 1, &ps);
}

static void test_nan_order_and_ties(void **state) {
    (void)state;
    const double v[] = {2, NAN, -1, 2, -INFINITY, 0.0, -0.0, INFINITY, NAN};
    for (int k = 0; k < 4; k++) {
        cx_dtype t = (cx_dtype[]){CX_F16, CX_BF16, CX_F32, CX_F64}[k];
        cx_tensor *x = tu_vec(t, 9, v);
        cx_tensor *a = sort_op(CX_OP_ARGSORT, x, 0, 0, -1),
                  *d = sort_op(CX_OP_ARGSORT, x, 0, 1, -1);
        cx_tensor *s = sort_op(CX_OP_SORT, x, 0, 1, -1);
        /* ascending: -inf, -1, 0.0 (position 5) and -0.0 (6) in order, 2 twice in order, inf,
         * then the NaNs in order; descending: the NaNs first, then inf, 2, 2, 0.0, -0.0 */
        tu_expect(a, CX_S64, 1, TU_SHAPE(9), TU_VALUES(4, 2, 5, 6, 0, 3, 7, 1, 8), 0);
        tu_expect(d, CX_S64, 1, TU_SHAPE(9), TU_VALUES(1, 8, 7, 0, 3, 5, 6, 2, 4), 0);
        tu_expect(s, t, 1, TU_SHAPE(9), TU_VALUES(NAN, NAN, INFINITY, 2, 2, 0, 0, -1, -INFINITY),
                  0);
        /* -0.0 keeps its sign and place: position 6 of the sorted values is -0.0 */
        assert_true(signbit(tu_load(t, s->data, 6)) && !signbit(tu_load(t, s->data, 5)));
        tu_drop(x);
        tu_drop(a);
        tu_drop(d);
        tu_drop(s);
    }
}

static void test_axes_and_types(void **state) {
    (void)state;
    for (int k = 0; k < COUNT(all_types); k++) {
        cx_dtype t = all_types[k];
        /* {2, 3} = [[3, 1, 2], [0, 9, 9]] */
        cx_tensor *x = tu_tensor(t, 2, TU_SHAPE(2, 3), TU_VALUES(3, 1, 2, 0, 9, 9));
        cx_tensor *s1 = sort_op(CX_OP_SORT, x, 1, 0, -1), *s0 = sort_op(CX_OP_SORT, x, 0, 1, -1);
        cx_tensor *a1 = sort_op(CX_OP_ARGSORT, x, -1, 1, CX_U8);
        cx_tensor *a0 = sort_op(CX_OP_ARGSORT, x, -2, 0, CX_S32);
        tu_expect(s1, t, 2, TU_SHAPE(2, 3), TU_VALUES(1, 2, 3, 0, 9, 9), 0);
        tu_expect(s0, t, 2, TU_SHAPE(2, 3), TU_VALUES(3, 9, 9, 0, 1, 2), 0);
        tu_expect(a1, CX_U8, 2, TU_SHAPE(2, 3), TU_VALUES(0, 2, 1, 1, 2, 0), 0);
        tu_expect(a0, CX_S32, 2, TU_SHAPE(2, 3), TU_VALUES(1, 0, 0, 0, 1, 1), 0);
        cx_tensor *r[] = {x, s1, s0, a1, a0};
        for (int i = 0; i < 5; i++) tu_drop(r[i]);
    }
    /* integers beyond double's precision and u64 above 2^63 order exactly */
    const int64_t big[] = {INT64_MAX, INT64_MAX - 1, INT64_MIN, -1};
    cx_tensor *b = tu_raw(CX_S64, 4, big), *ba = sort_op(CX_OP_ARGSORT, b, 0, 0, -1);
    tu_expect(ba, CX_S64, 1, TU_SHAPE(4), TU_VALUES(2, 3, 1, 0), 0);
    cx_tensor *u = tu_raw(CX_U64, 4, big), *ua = sort_op(CX_OP_ARGSORT, u, 0, 0, -1);
    tu_expect(ua, CX_S64, 1, TU_SHAPE(4), TU_VALUES(1, 0, 2, 3), 0);
    cx_tensor *r[] = {b, ba, u, ua};
    for (int i = 0; i < 4; i++) tu_drop(r[i]);
}

static void test_scalar_empty_and_errors(void **state) {
    (void)state;
    cx_tensor *x = tu_tensor(CX_F32, 0, NULL, TU_VALUES(5));
    cx_tensor *s = sort_op(CX_OP_SORT, x, 0, 0, -1), *a = sort_op(CX_OP_ARGSORT, x, 0, 1, -1);
    tu_expect(s, CX_F32, 0, NULL, TU_VALUES(5), 0);
    tu_expect(a, CX_S64, 0, NULL, TU_VALUES(0), 0);
    cx_tensor *e = tu_tensor(CX_S32, 2, TU_SHAPE(3, 0), NULL),
              *es = sort_op(CX_OP_SORT, e, 1, 0, -1);
    assert_int_equal(es->numel, 0);
    cx_tensor *r[] = {x, s, a, e, es};
    for (int i = 0; i < 5; i++) tu_drop(r[i]);

    cx_tensor *v = tu_vec(CX_F32, 3, TU_VALUES(1, 2, 3));
    struct {
        int64_t axis, dir, type;
        const char *msg;
    } bad[] = {{1, 0, -1, "axis"},
               {-2, 0, -1, "axis"},
               {0, 2, -1, "direction"},
               {0, 0, CX_F32, "integer type"}};
    for (int k = 0; k < 4; k++) {
        cx_params ps = {0};
        cx_param_put_int(&ps, CX_P_AXIS, bad[k].axis);
        cx_param_put_int(&ps, CX_P_DIRECTION, bad[k].dir);
        if (bad[k].type >= 0) cx_param_put_int(&ps, CX_P_TYPE, bad[k].type);
        cx_code rc;
        cx_status st = {0};
        cx_tensor *out = tu_run(CX_OP_ARGSORT, (cx_tensor *[]){v}, 1, &ps, &rc, &st);
        assert_int_equal(rc, CX_EINVAL);
        assert_non_null(strstr(st.message, bad[k].msg));
        assert_null(out);
    }
    tu_drop(v);
}

/* Long lines with many ties along a middle axis: each line's argsort must visit every position
 * once, in order of the values, equal values by position. */
static void test_long_lines_are_ordered_and_stable(void **state) {
    (void)state;
    enum { A = 3, N = 1500, C = 2 };
    static double v[A * N * C];
    uint64_t s = 12345;
    for (int i = 0; i < A * N * C; i++) {
        s = s * 6364136223846793005u + 1442695040888963407u;
        v[i] = (double)((s >> 33) % 50) - 25;
        if ((s >> 20) % 97 == 0) v[i] = NAN;
    }
    for (int dir = 0; dir < 2; dir++) {
        cx_tensor *x = tu_tensor(CX_F32, 3, TU_SHAPE(A, N, C), v);
        cx_tensor *a = sort_op(CX_OP_ARGSORT, x, 1, dir, -1),
                  *srt = sort_op(CX_OP_SORT, x, 1, dir, -1);
        const int64_t *ix = a->data;
        const float *xs = x->data, *ss = srt->data;
        for (int o = 0; o < A; o++)
            for (int c = 0; c < C; c++) {
                static bool seen[N];
                memset(seen, 0, sizeof seen);
                for (int j = 0; j < N; j++) {
                    int64_t at = ((int64_t)o * N + j) * C + c, p = ix[at];
                    assert_true(p >= 0 && p < N && !seen[p]);
                    seen[p] = true;
                    float got = xs[((int64_t)o * N + p) * C + c];
                    assert_true(memcmp(&got, &ss[at], 4) == 0);
                    if (j == 0) continue;
                    int64_t q = ix[at - C];
                    float prev = xs[((int64_t)o * N + q) * C + c];
                    bool pn = prev != prev, gn = got != got;
                    bool in_order = dir == 0 ? (pn ? gn : (gn || prev <= got))
                                             : (gn ? pn : (pn || prev >= got));
                    assert_true(in_order);
                    if ((pn && gn) || prev == got) assert_true(q < p); /* stable */
                }
            }
        tu_drop(x);
        tu_drop(a);
        tu_drop(srt);
    }
}

/* argsort with k: the first k positions of the full argsort along the axis, bit for bit (the
 * selection keeps the stable order), for k selected (up to 256: every k here but the axis'
 * length) and sorted, on lines with
 * many ties and NaNs, along every axis, in both directions, for floats, signed and u64 keys;
 * k of 0 or above the axis' length refused. */
static void test_argsort_first_k(void **state) {
    (void)state;
    enum { A = 3, N = 200, C = 2 };
    static double v[A * N * C], vi[A * N * C]; /* vi: the integer types', without NaN */
    uint64_t r = 99;
    for (int i = 0; i < A * N * C; i++) {
        r = r * 6364136223846793005u + 1442695040888963407u;
        v[i] = vi[i] = (double)((r >> 33) % 40);
        if ((r >> 20) % 31 == 0) v[i] = NAN;
    }
    const cx_dtype types[] = {CX_F32, CX_F16, CX_S32, CX_U64};
    const int64_t ks[] = {1, 2, 5, 32, 33, 150, 199};
    for (int t = 0; t < COUNT(types); t++) {
        cx_tensor *x =
            tu_tensor(types[t], 3, TU_SHAPE(A, N, C), cx_dtype_is_float(types[t]) ? v : vi);
        for (int axis = 0; axis < 3; axis++)
            for (int dir = 0; dir < 2; dir++) {
                cx_tensor *full = sort_op(CX_OP_ARGSORT, x, axis, dir, -1);
                int64_t n = x->desc.shape[axis];
                for (int q = 0; q < COUNT(ks); q++) {
                    int64_t k = ks[q] < n ? ks[q] : n;
                    cx_params ps = {0};
                    cx_param_put_int(&ps, CX_P_AXIS, axis);
                    cx_param_put_int(&ps, CX_P_DIRECTION, dir);
                    cx_param_put_int(&ps, CX_P_K, k);
                    cx_tensor *got = tu_run_ok(CX_OP_ARGSORT, (cx_tensor *[]){x}, 1, &ps);
                    assert_int_equal(got->desc.shape[axis], k);
                    int64_t outer = 1, inner = 1;
                    for (int d = 0; d < axis; d++) outer *= x->desc.shape[d];
                    for (int d = axis + 1; d < 3; d++) inner *= x->desc.shape[d];
                    const int64_t *g = got->data, *f = full->data;
                    for (int64_t o = 0; o < outer; o++)
                        for (int64_t j = 0; j < k; j++)
                            for (int64_t c = 0; c < inner; c++)
                                assert_int_equal(g[(o * k + j) * inner + c],
                                                 f[(o * n + j) * inner + c]);
                    tu_drop(got);
                }
                tu_drop(full);
            }
        tu_drop(x);
    }

    cx_tensor *w = tu_vec(CX_F32, 3, TU_VALUES(1, 2, 3));
    const int64_t bad[] = {0, 4, -1};
    for (int q = 0; q < 3; q++) {
        cx_params ps = {0};
        cx_param_put_int(&ps, CX_P_K, bad[q]);
        cx_code rc;
        cx_status st = {0};
        cx_tensor *out = tu_run(CX_OP_ARGSORT, (cx_tensor *[]){w}, 1, &ps, &rc, &st);
        assert_int_equal(rc, CX_EINVAL);
        assert_non_null(strstr(st.message, "expected k between 1 and"));
        assert_null(out);
    }
    tu_drop(w);
}

static cx_tensor *indexed(cx_op_id op, cx_tensor *t, cx_tensor *i, cx_tensor *u,
                          const int64_t *axes, int n_axes) {
    cx_params ps = {0};
    if (axes) cx_param_put_ints(&ps, CX_P_AXES, axes, n_axes);
    return tu_run_ok(op, (cx_tensor *[]){t, i, u}, 3, &ps);
}

static void test_indexed_add_and_put(void **state) {
    (void)state;
    cx_tensor *t = tu_vec(CX_F32, 3, TU_VALUES(1, 2, 3));
    cx_tensor *i = tu_tensor(CX_S64, 2, TU_SHAPE(3, 1), TU_VALUES(0, 2, 0));
    cx_tensor *u = tu_vec(CX_F32, 3, TU_VALUES(10, 20, 30));
    cx_tensor *a = indexed(CX_OP_INDEXED_ADD, t, i, u, NULL, 0);
    cx_tensor *p = indexed(CX_OP_INDEXED_PUT, t, i, u, NULL, 0);
    tu_expect(a, CX_F32, 1, TU_SHAPE(3), TU_VALUES(41, 2, 23), 0);
    tu_expect(p, CX_F32, 1, TU_SHAPE(3), TU_VALUES(30, 2, 20), 0);
    cx_tensor *r[] = {t, i, u, a, p};
    for (int k = 0; k < 5; k++) tu_drop(r[k]);

    /* f16: 2048 + (1 + 1) is 2050; adding the ones one at a time would round to 2048 twice */
    t = tu_vec(CX_F16, 2, TU_VALUES(2048, 0));
    i = tu_tensor(CX_S64, 2, TU_SHAPE(2, 1), TU_VALUES(0, 0));
    u = tu_vec(CX_F16, 2, TU_VALUES(1, 1));
    a = indexed(CX_OP_INDEXED_ADD, t, i, u, NULL, 0);
    tu_expect(a, CX_F16, 1, TU_SHAPE(2), TU_VALUES(2050, 0), 0);
    cx_tensor *r2[] = {t, i, u, a};
    for (int k = 0; k < 4; k++) tu_drop(r2[k]);

    /* axes [1] of a {2, 3} target: each index row updates a column (a block of 2) */
    t = tu_tensor(CX_S32, 2, TU_SHAPE(2, 3), TU_VALUES(0, 1, 2, 3, 4, 5));
    i = tu_tensor(CX_S64, 2, TU_SHAPE(2, 1), TU_VALUES(2, 0));
    u = tu_tensor(CX_S32, 2, TU_SHAPE(2, 2), TU_VALUES(10, 20, 30, 40));
    a = indexed(CX_OP_INDEXED_ADD, t, i, u, (const int64_t[]){1}, 1);
    p = indexed(CX_OP_INDEXED_PUT, t, i, u, (const int64_t[]){-1}, 1);
    tu_expect(a, CX_S32, 2, TU_SHAPE(2, 3), TU_VALUES(30, 1, 12, 43, 4, 25), 0);
    tu_expect(p, CX_S32, 2, TU_SHAPE(2, 3), TU_VALUES(30, 1, 10, 40, 4, 20), 0);
    cx_tensor *r3[] = {t, i, u, a, p};
    for (int k = 0; k < 5; k++) tu_drop(r3[k]);

    /* u8 wraps; s32 target with f32 updates computes in f32 */
    t = tu_vec(CX_U8, 2, TU_VALUES(250, 7));
    i = tu_tensor(CX_S64, 2, TU_SHAPE(1, 1), TU_VALUES(0));
    u = tu_vec(CX_U8, 1, TU_VALUES(10));
    a = indexed(CX_OP_INDEXED_ADD, t, i, u, NULL, 0);
    tu_expect(a, CX_U8, 1, TU_SHAPE(2), TU_VALUES(4, 7), 0);
    cx_tensor *t2 = tu_vec(CX_S32, 2, TU_VALUES(1, 2)), *u2 = tu_vec(CX_F32, 1, TU_VALUES(0.5));
    p = indexed(CX_OP_INDEXED_ADD, t2, i, u2, NULL, 0);
    tu_expect(p, CX_F32, 1, TU_SHAPE(2), TU_VALUES(1.5, 2), 0);
    cx_tensor *r4[] = {t, i, u, a, t2, u2, p};
    for (int k = 0; k < 7; k++) tu_drop(r4[k]);

    /* few updates into a large float target (fewer than an eighth of its elements): sorted by
     * position, summed in row order from 0, then added to the target and rounded once, as the
     * dense path does: 2048 + (1 + 1) in f16 again, out of row order, beside other positions */
    double tv[128], want[128];
    for (int k = 0; k < 128; k++) tv[k] = want[k] = k % 3 ? 0.25 * k : -0.0;
    tv[0] = 2048, want[0] = 2050;                /* (0, 0): rows 1 and 4 */
    want[5 * 8 + 3] += 0.5 + 0.5;                /* (5, 3): rows 0 and 3 */
    want[15 * 8 + 7] += -1.5;                    /* (15, 7): row 2 */
    tv[9 * 8 + 1] = -0.0, want[9 * 8 + 1] = 0.0; /* (9, 1): -0 + (0 + -0) is +0 */
    t = tu_tensor(CX_F16, 2, TU_SHAPE(16, 8), tv);
    i = tu_tensor(CX_S64, 2, TU_SHAPE(6, 2), TU_VALUES(5, 3, 0, 0, 15, 7, 5, 3, 0, 0, 9, 1));
    u = tu_vec(CX_F16, 6, TU_VALUES(0.5, 1, -1.5, 0.5, 1, -0.0));
    a = indexed(CX_OP_INDEXED_ADD, t, i, u, NULL, 0);
    tu_expect(a, CX_F16, 2, TU_SHAPE(16, 8), want, 0);
    cx_tensor *r5[] = {t, i, u, a};
    for (int k = 0; k < 4; k++) tu_drop(r5[k]);
}

static void test_indexed_errors(void **state) {
    (void)state;
    cx_tensor *t = tu_tensor(CX_F32, 2, TU_SHAPE(2, 3), TU_VALUES(0, 0, 0, 0, 0, 0));
    struct {
        cx_tensor *i, *u;
        const char *msg;
    } bad[] = {
        {tu_tensor(CX_S64, 2, TU_SHAPE(1, 2), TU_VALUES(1, 3)), tu_vec(CX_F32, 1, TU_VALUES(1)),
         "index 3 (entry 1 of index row 0) is out of bounds for axis 1 of size 3"},
        {tu_tensor(CX_S64, 2, TU_SHAPE(1, 2), TU_VALUES(-1, 0)), tu_vec(CX_F32, 1, TU_VALUES(1)),
         "out of bounds"},
        {tu_tensor(CX_S64, 2, TU_SHAPE(1, 2), TU_VALUES(0, 0)), tu_vec(CX_F32, 2, TU_VALUES(1, 2)),
         "expected updates of shape {1}"},
        {tu_tensor(CX_S64, 2, TU_SHAPE(1, 3), TU_VALUES(0, 0, 0)), tu_vec(CX_F32, 1, TU_VALUES(1)),
         "at most the target rank"},
        {tu_tensor(CX_F32, 2, TU_SHAPE(1, 2), TU_VALUES(0, 0)), tu_vec(CX_F32, 1, TU_VALUES(1)),
         "indices"},
    };
    for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++)
        for (int op = 0; op < 2; op++) {
            cx_code rc;
            cx_status st = {0};
            cx_op_id id = op ? CX_OP_INDEXED_PUT : CX_OP_INDEXED_ADD;
            cx_params ps = {0};
            cx_tensor *out = tu_run(id, (cx_tensor *[]){t, bad[k].i, bad[k].u}, 3, &ps, &rc, &st);
            assert_int_equal(rc, CX_EINVAL);
            if (!strstr(st.message, bad[k].msg))
                fail_msg("case %zu: %s does not say \"%s\"", k, st.message, bad[k].msg);
            assert_null(out);
        }
    for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++) {
        tu_drop(bad[k].i);
        tu_drop(bad[k].u);
    }
    tu_drop(t);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_nan_order_and_ties),
        cmocka_unit_test(test_axes_and_types),
        cmocka_unit_test(test_scalar_empty_and_errors),
        cmocka_unit_test(test_long_lines_are_ordered_and_stable),
        cmocka_unit_test(test_argsort_first_k),
        cmocka_unit_test(test_indexed_add_and_put),
        cmocka_unit_test(test_indexed_errors),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
