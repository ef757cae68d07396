/* window_sum, window_product, window_max and window_min on the cpu driver, through the full
 * dispatcher: strides, dilations, explicit and :same padding (what padding contributes is the
 * fold's identity), windows wholly in the padding, every integer width (u64 compared as
 * unsigned, products wrapping), f16 summed in double and rounded once, and the errors. */
#include "test_util.h"

static cx_tensor *window(cx_op_id op, cx_tensor *x, int rank, const int64_t *w, const int64_t *s,
                         const int64_t *d, const int64_t *pad, int n_pad) {
    cx_params ps = {0};
    cx_param_put_ints(&ps, CX_P_WINDOW, w, rank);
    if (s) cx_param_put_ints(&ps, CX_P_STRIDES, s, rank);
    if (d) cx_param_put_ints(&ps, CX_P_WINDOW_DILATIONS, d, rank);
    if (pad) cx_param_put_ints(&ps, CX_P_PADDING, pad, n_pad);
    return tu_run_ok(op, (cx_tensor *[]){x}, 1, &ps);
}

static void test_windows(void **state) {
    (void)state;
    cx_tensor *x = tu_tensor(CX_F32, 2, TU_SHAPE(2, 3), TU_VALUES(1, 2, 3, 4, 5, 6));
    cx_tensor *r = window(CX_OP_WINDOW_SUM, x, 2, TU_SHAPE(1, 2), NULL, NULL, NULL, 0);
    tu_expect(r, CX_F32, 2, TU_SHAPE(2, 2), TU_VALUES(3, 5, 9, 11), 0);
    tu_drop(x);
    tu_drop(r);

    x = tu_vec(CX_S32, 4, TU_VALUES(1, 5, 2, 4));
    r = window(CX_OP_WINDOW_MAX, x, 1, TU_SHAPE(2), NULL, NULL, TU_SHAPE(1, 0), 2);
    tu_expect(r, CX_S32, 1, TU_SHAPE(4), TU_VALUES(1, 5, 5, 4), 0);
    tu_drop(x);
    tu_drop(r);

    x = tu_vec(CX_S64, 5, TU_VALUES(3, 1, 2, 7, 0));
    r = window(CX_OP_WINDOW_MIN, x, 1, TU_SHAPE(2), NULL, TU_SHAPE(2), NULL, 0);
    tu_expect(r, CX_S64, 1, TU_SHAPE(3), TU_VALUES(2, 1, 0), 0);
    tu_drop(r);
    /* :same with stride 2: ceil(5 / 2) = 3 windows, one element of padding, high */
    r = window(CX_OP_WINDOW_SUM, x, 1, TU_SHAPE(2), TU_SHAPE(2), NULL, TU_SHAPE(1), 1);
    tu_expect(r, CX_S64, 1, TU_SHAPE(3), TU_VALUES(4, 9, 0), 0);
    tu_drop(x);
    tu_drop(r);

    /* windows wholly in the padding give the identity */
    x = tu_vec(CX_F32, 1, TU_VALUES(1));
    r = window(CX_OP_WINDOW_MAX, x, 1, TU_SHAPE(1), NULL, NULL, TU_SHAPE(2, 0), 2);
    tu_expect(r, CX_F32, 1, TU_SHAPE(3), TU_VALUES(-INFINITY, -INFINITY, 1), 0);
    tu_drop(x);
    tu_drop(r);
    x = tu_vec(CX_S8, 1, TU_VALUES(1));
    r = window(CX_OP_WINDOW_MAX, x, 1, TU_SHAPE(1), NULL, NULL, TU_SHAPE(1, 1), 2);
    cx_tensor *m = window(CX_OP_WINDOW_MIN, x, 1, TU_SHAPE(1), NULL, NULL, TU_SHAPE(1, 0), 2);
    cx_tensor *p = window(CX_OP_WINDOW_PRODUCT, x, 1, TU_SHAPE(1), NULL, NULL, TU_SHAPE(0, 1), 2);
    tu_expect(r, CX_S8, 1, TU_SHAPE(3), TU_VALUES(-128, 1, -128), 0);
    tu_expect(m, CX_S8, 1, TU_SHAPE(2), TU_VALUES(127, 1), 0);
    tu_expect(p, CX_S8, 1, TU_SHAPE(2), TU_VALUES(1, 1), 0);
    cx_tensor *rs[] = {x, r, m, p};
    for (int k = 0; k < 4; k++) tu_drop(rs[k]);

    /* u64 above 2^63 is the largest; u8 products wrap; f16 sums round once */
    const int64_t big[] = {5, -2, 7};
    x = tu_raw(CX_U64, 3, big);
    r = window(CX_OP_WINDOW_MAX, x, 1, TU_SHAPE(2), NULL, NULL, NULL, 0);
    assert_true(((uint64_t *)r->data)[0] == UINT64_MAX - 1 &&
                ((uint64_t *)r->data)[1] == UINT64_MAX - 1);
    tu_drop(x);
    tu_drop(r);
    x = tu_vec(CX_U8, 3, TU_VALUES(16, 16, 3));
    r = window(CX_OP_WINDOW_PRODUCT, x, 1, TU_SHAPE(3), NULL, NULL, NULL, 0);
    tu_expect(r, CX_U8, 1, TU_SHAPE(1), TU_VALUES(0), 0);
    tu_drop(x);
    tu_drop(r);
    x = tu_vec(CX_F16, 3, TU_VALUES(2048, 1, 1));
    r = window(CX_OP_WINDOW_SUM, x, 1, TU_SHAPE(3), NULL, NULL, NULL, 0);
    tu_expect(r, CX_F16, 1, TU_SHAPE(1), TU_VALUES(2050), 0);
    tu_drop(x);
    tu_drop(r);
    /* a window and padding far larger than the tensor: only the positions inside are walked */
    x = tu_vec(CX_F32, 2, TU_VALUES(1, 2));
    r = window(CX_OP_WINDOW_SUM, x, 1, (const int64_t[]){INT64_C(1) << 47}, NULL, NULL,
               (const int64_t[]){INT64_C(1) << 47, 0}, 2);
    tu_expect(r, CX_F32, 1, TU_SHAPE(3), TU_VALUES(0, 1, 3), 0);
    tu_drop(x);
    tu_drop(r);
    /* NaN wins max and min */
    x = tu_vec(CX_F64, 3, TU_VALUES(1, NAN, 3));
    r = window(CX_OP_WINDOW_MIN, x, 1, TU_SHAPE(2), NULL, NULL, NULL, 0);
    tu_expect(r, CX_F64, 1, TU_SHAPE(2), TU_VALUES(NAN, NAN), 0);
    tu_drop(x);
    tu_drop(r);
}

static cx_tensor *scatter(cx_op_id op, cx_tensor *x, cx_tensor *src, int rank, const int64_t *w,
                          const int64_t *str, const int64_t *pad, int n_pad, double value,
                          bool is_int) {
    cx_params ps = {0};
    cx_param_put_ints(&ps, CX_P_WINDOW, w, rank);
    if (str) cx_param_put_ints(&ps, CX_P_STRIDES, str, rank);
    if (pad) cx_param_put_ints(&ps, CX_P_PADDING, pad, n_pad);
    if (is_int)
        cx_param_put_int(&ps, CX_P_VALUE, (int64_t)value);
    else
        cx_param_put_float(&ps, CX_P_VALUE, value);
    return tu_run_ok(op, (cx_tensor *[]){x, src}, 2, &ps);
}

static void test_window_scatter(void **state) {
    (void)state;
    cx_tensor *x = tu_vec(CX_F32, 4, TU_VALUES(1, 7, 3, 3)),
              *src = tu_vec(CX_F32, 2, TU_VALUES(10, 20));
    cx_tensor *r =
        scatter(CX_OP_WINDOW_SCATTER_MAX, x, src, 1, TU_SHAPE(2), TU_SHAPE(2), NULL, 0, 0, true);
    tu_expect(r, CX_F32, 1, TU_SHAPE(4), TU_VALUES(0, 10, 0, 20), 0);
    tu_drop(r);
    cx_tensor *xi = tu_vec(CX_S64, 4, TU_VALUES(1, 7, 3, 3)),
              *si = tu_vec(CX_S64, 2, TU_VALUES(10, 20));
    /* min picks the last of equal elements; an integer source with 0.5 gives f32 */
    r = scatter(CX_OP_WINDOW_SCATTER_MIN, xi, si, 1, TU_SHAPE(2), TU_SHAPE(2), NULL, 0, 0.5, false);
    tu_expect(r, CX_F32, 1, TU_SHAPE(4), TU_VALUES(10.5, 0.5, 0.5, 20.5), 0);
    cx_tensor *rs[] = {x, src, xi, si, r};
    for (int k = 0; k < 5; k++) tu_drop(rs[k]);

    /* overlapping windows add up at a shared maximum */
    x = tu_vec(CX_S32, 3, TU_VALUES(1, 3, 2));
    src = tu_vec(CX_S32, 2, TU_VALUES(5, 6));
    r = scatter(CX_OP_WINDOW_SCATTER_MAX, x, src, 1, TU_SHAPE(2), NULL, NULL, 0, 0, true);
    tu_expect(r, CX_S32, 1, TU_SHAPE(3), TU_VALUES(0, 11, 0), 0);
    tu_drop(r);
    /* padding holds the value: selected there, the source element is dropped */
    cx_tensor *one = tu_vec(CX_S32, 1, TU_VALUES(5)), *s1 = tu_vec(CX_S32, 2, TU_VALUES(100, 200));
    r = scatter(CX_OP_WINDOW_SCATTER_MAX, one, s1, 1, TU_SHAPE(2), NULL, TU_SHAPE(1, 1), 2, 9,
                true);
    tu_expect(r, CX_S32, 1, TU_SHAPE(1), TU_VALUES(9), 0);
    cx_tensor *rs2[] = {x, src, one, s1, r};
    for (int k = 0; k < 5; k++) tu_drop(rs2[k]);

    /* a source of the wrong shape is refused */
    x = tu_vec(CX_F32, 4, TU_VALUES(1, 2, 3, 4));
    src = tu_vec(CX_F32, 3, TU_VALUES(1, 2, 3));
    cx_params ps = {0};
    cx_param_put_ints(&ps, CX_P_WINDOW, TU_SHAPE(2), 1);
    cx_param_put_ints(&ps, CX_P_STRIDES, TU_SHAPE(2), 1);
    cx_param_put_float(&ps, CX_P_VALUE, 0);
    cx_code rc;
    cx_status st = {0};
    assert_null(tu_run(CX_OP_WINDOW_SCATTER_MAX, (cx_tensor *[]){x, src}, 2, &ps, &rc, &st));
    assert_int_equal(rc, CX_EINVAL);
    assert_non_null(strstr(st.message, "expected a source of shape {2}"));
    tu_drop(x);
    tu_drop(src);
}

static void test_window_errors(void **state) {
    (void)state;
    cx_tensor *x = tu_tensor(CX_F32, 2, TU_SHAPE(2, 3), TU_VALUES(1, 2, 3, 4, 5, 6));
    struct {
        int64_t w[2];
        int n_w;
        int64_t s[2];
        int n_s;
        int64_t pad[4];
        int n_pad;
        const char *msg;
    } bad[] = {
        {{2}, 1, {0}, 0, {0}, 0, "window of rank 2"},
        {{1, 0}, 2, {0}, 0, {0}, 0, "positive sizes"},
        {{1, 1}, 2, {1, 0}, 2, {0}, 0, "positive strides"},
        {{1, 1}, 2, {1}, 1, {0}, 0, "2 strides"},
        {{1, 1}, 2, {0}, 0, {1, 1, 1}, 3, "a {low, high} pair per axis"},
    };
    for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++) {
        cx_params ps = {0};
        cx_param_put_ints(&ps, CX_P_WINDOW, bad[k].w, bad[k].n_w);
        if (bad[k].n_s) cx_param_put_ints(&ps, CX_P_STRIDES, bad[k].s, bad[k].n_s);
        if (bad[k].n_pad) cx_param_put_ints(&ps, CX_P_PADDING, bad[k].pad, bad[k].n_pad);
        cx_code rc;
        cx_status st = {0};
        cx_tensor *out = tu_run(CX_OP_WINDOW_SUM, (cx_tensor *[]){x}, 1, &ps, &rc, &st);
        assert_int_equal(rc, CX_EINVAL);
        if (!strstr(st.message, bad[k].msg))
            fail_msg("case %zu: %s does not say \"%s\"", k, st.message, bad[k].msg);
        assert_null(out);
    }
    tu_drop(x);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_windows),
        cmocka_unit_test(test_window_errors),
        cmocka_unit_test(test_window_scatter),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
