/* The cpu driver's LAYOUT kernels through the dispatcher: Nx's documented examples, naive
 * references for permutations, several element sizes, f16 bit patterns, empty and rank-0
 * tensors, and out-of-range indices. */
#include <stdio.h>

#include "test_util.h"

/* One type per element size, plus f16 whose bits must survive untouched. */
static const cx_dtype types[] = {CX_F32, CX_F16, CX_S64, CX_U8};
#define N_TYPES ((int)(sizeof types / sizeof types[0]))

/* Values exact in every tested type. */
static double seq(int64_t i) {
    return (double)(i % 251);
}

static int64_t numel_of(int rank, const int64_t *shape) {
    int64_t n = 1;
    for (int k = 0; k < rank; k++) n *= shape[k];
    return n;
}

/* A tensor holding seq(0), seq(1), ... */
static cx_tensor *seq_tensor(cx_dtype t, int rank, const int64_t *shape) {
    int64_t n = numel_of(rank, shape);
    double *v = calloc((size_t)(n ? n : 1), sizeof(double));
    for (int64_t i = 0; i < n; i++) v[i] = seq(i);
    cx_tensor *x = tu_tensor(t, rank, shape, v);
    free(v);
    return x;
}

static void unravel(int64_t i, int rank, const int64_t *shape, int64_t *idx) {
    for (int k = rank - 1; k >= 0; k--) {
        idx[k] = i % shape[k];
        i /= shape[k];
    }
}

static int64_t ravel(int rank, const int64_t *shape, const int64_t *idx) {
    int64_t i = 0;
    for (int k = 0; k < rank; k++) i = i * shape[k] + idx[k];
    return i;
}

/* Asserts that out has `shape` and holds seq(src(i)) at every position i. */
typedef int64_t (*source_fn)(int64_t i, int rank, const int64_t *shape, const void *ctx);

static void expect_seq(const cx_tensor *out, cx_dtype t, int rank, const int64_t *shape,
                       source_fn src, const void *ctx) {
    int64_t n = numel_of(rank, shape);
    double *want = calloc((size_t)(n ? n : 1), sizeof(double));
    for (int64_t i = 0; i < n; i++) want[i] = seq(src(i, rank, shape, ctx));
    tu_expect(out, t, rank, shape, want, 0);
    free(want);
}

static cx_tensor *run1(cx_op_id op, cx_tensor *x, cx_params *ps) {
    return tu_run_ok(op, &x, 1, ps);
}

static cx_tensor *run2(cx_op_id op, cx_tensor *x, cx_tensor *y, cx_params *ps) {
    cx_tensor *in[2] = {x, y};
    return tu_run_ok(op, in, 2, ps);
}

static uint16_t bits16(const cx_tensor *x, int64_t i) {
    return ((const uint16_t *)x->data)[i];
}

/* Whether the cast kernels exist yet: ops on mixed types need them in the dispatcher. */
static bool cast_ready(void) {
    cx_tensor *x = tu_tensor(CX_U8, 1, TU_SHAPE(1), TU_VALUES(1));
    cx_params ps = {0};
    cx_param_put_int(&ps, CX_P_TYPE, CX_F32);
    cx_code rc;
    cx_tensor *y = tu_run(CX_OP_AS_TYPE, &x, 1, &ps, &rc, NULL);
    tu_drop(x);
    tu_drop(y);
    return rc == CX_OK;
}

/* ---- reshape and squeeze ---- */

static void test_reshape(void **state) {
    (void)state;
    for (int k = 0; k < N_TYPES; k++) {
        cx_tensor *x = seq_tensor(types[k], 2, TU_SHAPE(2, 3));
        cx_params ps = {0};
        cx_param_put_ints(&ps, CX_P_SHAPE, TU_SHAPE(3, 1, 2), 3);
        cx_tensor *y = run1(CX_OP_RESHAPE, x, &ps);
        tu_expect(y, types[k], 3, TU_SHAPE(3, 1, 2), TU_VALUES(0, 1, 2, 3, 4, 5), 0);
        cx_params sq = {0};
        cx_tensor *z = run1(CX_OP_SQUEEZE, y, &sq);
        tu_expect(z, types[k], 2, TU_SHAPE(3, 2), TU_VALUES(0, 1, 2, 3, 4, 5), 0);
        tu_drop(z);
        tu_drop(y);
        tu_drop(x);
    }
}

static void test_reshape_scalar_and_empty(void **state) {
    (void)state;
    cx_tensor *x = tu_tensor(CX_S64, 0, NULL, TU_VALUES(42));
    cx_params ps = {0};
    cx_param_put_ints(&ps, CX_P_SHAPE, TU_SHAPE(1, 1), 2);
    cx_tensor *y = run1(CX_OP_RESHAPE, x, &ps);
    tu_expect(y, CX_S64, 2, TU_SHAPE(1, 1), TU_VALUES(42), 0);
    cx_params sq = {0};
    cx_tensor *z = run1(CX_OP_SQUEEZE, y, &sq);
    tu_expect(z, CX_S64, 0, NULL, TU_VALUES(42), 0);
    tu_drop(z);
    tu_drop(y);
    tu_drop(x);
    x = seq_tensor(CX_F32, 2, TU_SHAPE(0, 2));
    cx_params ps2 = {0};
    cx_param_put_ints(&ps2, CX_P_SHAPE, TU_SHAPE(2, 0), 2);
    y = run1(CX_OP_RESHAPE, x, &ps2);
    tu_expect(y, CX_F32, 2, TU_SHAPE(2, 0), NULL, 0);
    tu_drop(y);
    tu_drop(x);
}

/* ---- transpose ---- */

typedef struct {
    int rank;
    const int64_t *in_shape;
    const int64_t *axes;
} perm_ctx;

static int64_t transpose_src(int64_t i, int rank, const int64_t *shape, const void *ctx) {
    const perm_ctx *p = ctx;
    int64_t o[CX_MAX_RANK], in[CX_MAX_RANK];
    unravel(i, rank, shape, o);
    for (int k = 0; k < rank; k++) in[p->axes[k]] = o[k];
    return ravel(rank, p->in_shape, in);
}

/* Transposes seq(in_shape) by axes and checks against the index arithmetic. */
static void check_transpose(cx_dtype t, int rank, const int64_t *in_shape, const int64_t *axes) {
    cx_tensor *x = seq_tensor(t, rank, in_shape);
    cx_params ps = {0};
    cx_param_put_ints(&ps, CX_P_AXES, axes, rank);
    cx_tensor *y = run1(CX_OP_TRANSPOSE, x, &ps);
    int64_t out_shape[CX_MAX_RANK];
    for (int k = 0; k < rank; k++) out_shape[k] = in_shape[axes[k]];
    perm_ctx ctx = {rank, in_shape, axes};
    expect_seq(y, t, rank, out_shape, transpose_src, &ctx);
    tu_drop(y);
    tu_drop(x);
}

static void test_transpose_nx(void **state) {
    (void)state;
    for (int k = 0; k < N_TYPES; k++)
        check_transpose(types[k], 3, TU_SHAPE(2, 3, 4), TU_SHAPE(2, 0, 1));
    /* Nx's doc example, with the default (reversed) axes */
    cx_tensor *x = tu_tensor(CX_S64, 2, TU_SHAPE(1, 3), TU_VALUES(1, 2, 3));
    cx_params ps = {0};
    cx_tensor *y = run1(CX_OP_TRANSPOSE, x, &ps);
    tu_expect(y, CX_S64, 2, TU_SHAPE(3, 1), TU_VALUES(1, 2, 3), 0);
    tu_drop(y);
    tu_drop(x);
}

static bool next_perm(int64_t *a, int n) {
    int i = n - 2;
    while (i >= 0 && a[i] >= a[i + 1]) i--;
    if (i < 0) return false;
    int j = n - 1;
    while (a[j] <= a[i]) j--;
    int64_t t = a[i];
    a[i] = a[j];
    a[j] = t;
    for (int l = i + 1, r = n - 1; l < r; l++, r--) {
        t = a[l];
        a[l] = a[r];
        a[r] = t;
    }
    return true;
}

static void test_transpose_all_perms(void **state) {
    (void)state;
    for (int k = 0; k < N_TYPES; k++) {
        int64_t axes[4] = {0, 1, 2, 3};
        do check_transpose(types[k], 4, TU_SHAPE(3, 4, 5, 6), axes);
        while (next_perm(axes, 4));
    }
}

static void test_transpose_large(void **state) {
    (void)state;
    check_transpose(CX_F32, 2, TU_SHAPE(300, 500), TU_SHAPE(1, 0));
    check_transpose(CX_S64, 3, TU_SHAPE(7, 67, 45), TU_SHAPE(2, 1, 0));
    check_transpose(CX_U8, 3, TU_SHAPE(33, 5, 70), TU_SHAPE(1, 2, 0));
    check_transpose(CX_F16, 3, TU_SHAPE(40, 3, 37), TU_SHAPE(2, 0, 1));
}

static void test_transpose_scalar_and_empty(void **state) {
    (void)state;
    cx_tensor *x = tu_tensor(CX_F32, 0, NULL, TU_VALUES(2.5));
    cx_params ps = {0};
    cx_tensor *y = run1(CX_OP_TRANSPOSE, x, &ps);
    tu_expect(y, CX_F32, 0, NULL, TU_VALUES(2.5), 0);
    tu_drop(y);
    tu_drop(x);
    check_transpose(CX_S64, 3, TU_SHAPE(0, 3, 2), TU_SHAPE(2, 0, 1));
    check_transpose(CX_S64, 3, TU_SHAPE(4, 3, 0), TU_SHAPE(2, 0, 1));
}

/* ---- broadcast ---- */

static cx_tensor *broadcast(cx_tensor *x, int rank, const int64_t *shape, const int64_t *axes,
                            int n_axes) {
    cx_params ps = {0};
    cx_param_put_ints(&ps, CX_P_SHAPE, shape, rank);
    if (axes) cx_param_put_ints(&ps, CX_P_AXES, axes, n_axes);
    return run1(CX_OP_BROADCAST, x, &ps);
}

static void test_broadcast(void **state) {
    (void)state;
    for (int k = 0; k < N_TYPES; k++) {
        cx_dtype t = types[k];
        cx_tensor *x = tu_tensor(t, 1, TU_SHAPE(3), TU_VALUES(1, 2, 3));
        cx_tensor *y = broadcast(x, 2, TU_SHAPE(2, 3), NULL, 0);
        tu_expect(y, t, 2, TU_SHAPE(2, 3), TU_VALUES(1, 2, 3, 1, 2, 3), 0);
        tu_drop(y);
        y = broadcast(x, 2, TU_SHAPE(3, 2), TU_SHAPE(0), 1);
        tu_expect(y, t, 2, TU_SHAPE(3, 2), TU_VALUES(1, 1, 2, 2, 3, 3), 0);
        tu_drop(y);
        tu_drop(x);
        x = tu_tensor(t, 2, TU_SHAPE(3, 1), TU_VALUES(1, 2, 3));
        y = broadcast(x, 2, TU_SHAPE(3, 4), NULL, 0);
        tu_expect(y, t, 2, TU_SHAPE(3, 4), TU_VALUES(1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3), 0);
        tu_drop(y);
        tu_drop(x);
    }
}

static void test_broadcast_axes_scalar_empty(void **state) {
    (void)state;
    cx_tensor *x = tu_tensor(CX_S64, 2, TU_SHAPE(2, 1), TU_VALUES(1, 2));
    cx_tensor *y = broadcast(x, 3, TU_SHAPE(2, 2, 3), TU_SHAPE(0, 2), 2);
    tu_expect(y, CX_S64, 3, TU_SHAPE(2, 2, 3), TU_VALUES(1, 1, 1, 1, 1, 1, 2, 2, 2, 2, 2, 2), 0);
    tu_drop(y);
    tu_drop(x);
    x = tu_tensor(CX_U8, 0, NULL, TU_VALUES(7));
    y = broadcast(x, 2, TU_SHAPE(2, 2), NULL, 0);
    tu_expect(y, CX_U8, 2, TU_SHAPE(2, 2), TU_VALUES(7, 7, 7, 7), 0);
    tu_drop(y);
    y = broadcast(x, 0, NULL, NULL, 0);
    tu_expect(y, CX_U8, 0, NULL, TU_VALUES(7), 0);
    tu_drop(y);
    y = broadcast(x, 2, TU_SHAPE(3, 0), NULL, 0);
    tu_expect(y, CX_U8, 2, TU_SHAPE(3, 0), NULL, 0);
    tu_drop(y);
    tu_drop(x);
}

/* ---- slice and put_slice ---- */

static cx_tensor *slice(cx_tensor *x, int rank, const int64_t *start, const int64_t *len,
                        const int64_t *strides) {
    cx_params ps = {0};
    cx_param_put_ints(&ps, CX_P_START, start, rank);
    cx_param_put_ints(&ps, CX_P_LENGTHS, len, rank);
    if (strides) cx_param_put_ints(&ps, CX_P_STRIDES, strides, rank);
    return run1(CX_OP_SLICE, x, &ps);
}

static void test_slice_nx(void **state) {
    (void)state;
    for (int k = 0; k < N_TYPES; k++) {
        cx_dtype t = types[k];
        cx_tensor *x = seq_tensor(t, 2, TU_SHAPE(3, 3));
        cx_tensor *y = slice(x, 2, TU_SHAPE(2, 2), TU_SHAPE(2, 2), NULL); /* start clipped */
        tu_expect(y, t, 2, TU_SHAPE(2, 2), TU_VALUES(4, 5, 7, 8), 0);
        tu_drop(y);
        tu_drop(x);
        x = seq_tensor(t, 1, TU_SHAPE(6));
        y = slice(x, 1, TU_SHAPE(1), TU_SHAPE(4), TU_SHAPE(2));
        tu_expect(y, t, 1, TU_SHAPE(2), TU_VALUES(1, 3), 0);
        tu_drop(y);
        tu_drop(x);
        x = tu_tensor(t, 2, TU_SHAPE(3, 2), TU_VALUES(1, 2, 3, 4, 5, 6));
        y = slice(x, 2, TU_SHAPE(0, 1), TU_SHAPE(3, 1), TU_SHAPE(2, 1));
        tu_expect(y, t, 2, TU_SHAPE(2, 1), TU_VALUES(2, 6), 0);
        tu_drop(y);
        tu_drop(x);
    }
}

static void test_slice_strides_and_edges(void **state) {
    (void)state;
    cx_tensor *x = seq_tensor(CX_S64, 3, TU_SHAPE(4, 5, 3));
    cx_tensor *y = slice(x, 3, TU_SHAPE(0, 1, 1), TU_SHAPE(4, 4, 2), TU_SHAPE(2, 3, 100));
    /* rows 0 and 2, columns 1 and 4, depth 1 */
    tu_expect(y, CX_S64, 3, TU_SHAPE(2, 2, 1), TU_VALUES(4, 13, 34, 43), 0);
    tu_drop(y);
    y = slice(x, 3, TU_SHAPE(1, 0, 0), TU_SHAPE(2, 0, 3), NULL);
    tu_expect(y, CX_S64, 3, TU_SHAPE(2, 0, 3), NULL, 0);
    tu_drop(y);
    tu_drop(x);
    x = tu_tensor(CX_F16, 0, NULL, TU_VALUES(1.5));
    y = slice(x, 0, NULL, NULL, NULL);
    tu_expect(y, CX_F16, 0, NULL, TU_VALUES(1.5), 0);
    tu_drop(y);
    tu_drop(x);
}

static cx_tensor *put_slice(cx_tensor *x, cx_tensor *s, int rank, const int64_t *start) {
    cx_params ps = {0};
    cx_param_put_ints(&ps, CX_P_START, start, rank);
    return run2(CX_OP_PUT_SLICE, x, s, &ps);
}

static void test_put_slice(void **state) {
    (void)state;
    for (int k = 0; k < N_TYPES; k++) {
        cx_dtype t = types[k];
        cx_tensor *x = tu_tensor(t, 1, TU_SHAPE(3), TU_VALUES(0, 0, 0));
        cx_tensor *s = tu_tensor(t, 1, TU_SHAPE(2), TU_VALUES(7, 8));
        cx_tensor *y = put_slice(x, s, 1, TU_SHAPE(1));
        tu_expect(y, t, 1, TU_SHAPE(3), TU_VALUES(0, 7, 8), 0);
        tu_drop(y);
        tu_drop(s);
        tu_drop(x);
        x = seq_tensor(t, 2, TU_SHAPE(3, 3));
        s = tu_tensor(t, 2, TU_SHAPE(2, 2), TU_VALUES(91, 92, 93, 94));
        y = put_slice(x, s, 2, TU_SHAPE(5, 2)); /* clipped to {1, 1} */
        tu_expect(y, t, 2, TU_SHAPE(3, 3), TU_VALUES(0, 1, 2, 3, 91, 92, 6, 93, 94), 0);
        tu_drop(y);
        tu_drop(s);
        tu_drop(x);
    }
}

static void test_put_slice_empty_and_scalar(void **state) {
    (void)state;
    cx_tensor *x = seq_tensor(CX_U8, 2, TU_SHAPE(2, 2));
    cx_tensor *s = seq_tensor(CX_U8, 2, TU_SHAPE(0, 2));
    cx_tensor *y = put_slice(x, s, 2, TU_SHAPE(1, 0));
    tu_expect(y, CX_U8, 2, TU_SHAPE(2, 2), TU_VALUES(0, 1, 2, 3), 0);
    tu_drop(y);
    tu_drop(s);
    tu_drop(x);
    x = tu_tensor(CX_F32, 0, NULL, TU_VALUES(1));
    s = tu_tensor(CX_F32, 0, NULL, TU_VALUES(9));
    y = put_slice(x, s, 0, NULL);
    tu_expect(y, CX_F32, 0, NULL, TU_VALUES(9), 0);
    tu_drop(y);
    tu_drop(s);
    tu_drop(x);
}

/* ---- pad ---- */

static cx_tensor *pad_int(cx_tensor *x, int64_t value, int rank, const int64_t *pads) {
    cx_params ps = {0};
    cx_param_put_int(&ps, CX_P_VALUE, value);
    cx_param_put_ints(&ps, CX_P_PADS, pads, 3 * rank);
    return run1(CX_OP_PAD, x, &ps);
}

static void test_pad_nx(void **state) {
    (void)state;
    for (int k = 0; k < N_TYPES; k++) {
        cx_dtype t = types[k];
        cx_tensor *x = tu_tensor(t, 1, TU_SHAPE(2), TU_VALUES(1, 2));
        cx_tensor *y = pad_int(x, 0, 1, TU_SHAPE(1, 2, 1));
        tu_expect(y, t, 1, TU_SHAPE(6), TU_VALUES(0, 1, 0, 2, 0, 0), 0);
        tu_drop(y);
        tu_drop(x);
        x = tu_tensor(t, 2, TU_SHAPE(2, 4), TU_VALUES(0, 1, 2, 3, 0, 4, 5, 6));
        y = pad_int(x, 0, 2, TU_SHAPE(0, 0, 0, -1, 1, 0));
        tu_expect(y, t, 2, TU_SHAPE(2, 4), TU_VALUES(1, 2, 3, 0, 4, 5, 6, 0), 0);
        tu_drop(y);
        y = pad_int(x, 9, 2, TU_SHAPE(0, 0, 1, 0, 0, 1));
        tu_expect(y, t, 2, TU_SHAPE(3, 7),
                  TU_VALUES(0, 9, 1, 9, 2, 9, 3, 9, 9, 9, 9, 9, 9, 9, 0, 9, 4, 9, 5, 9, 6), 0);
        tu_drop(y);
        tu_drop(x);
        x = tu_tensor(t, 2, TU_SHAPE(2, 3), TU_VALUES(0, 1, 2, 3, 4, 5));
        y = pad_int(x, 0, 2, TU_SHAPE(-1, 2, 0, 1, -1, 0));
        tu_expect(y, t, 2, TU_SHAPE(3, 3), TU_VALUES(0, 3, 4, 0, 0, 0, 0, 0, 0), 0);
        tu_drop(y);
        tu_drop(x);
    }
}

static void test_pad_crop_with_interior(void **state) {
    (void)state;
    cx_tensor *x = tu_tensor(CX_S64, 1, TU_SHAPE(3), TU_VALUES(1, 2, 3));
    /* {1, 0, 2, 0, 3} cropped by 2 then 1 */
    cx_tensor *y = pad_int(x, -4, 1, TU_SHAPE(-2, -1, 1));
    tu_expect(y, CX_S64, 1, TU_SHAPE(2), TU_VALUES(2, -4), 0);
    tu_drop(y);
    /* {1, v, v, 2, v, v, 3} cropped by 3 at the front: {2, v, v, 3, v} */
    y = pad_int(x, -4, 1, TU_SHAPE(-3, 1, 2));
    tu_expect(y, CX_S64, 1, TU_SHAPE(5), TU_VALUES(2, -4, -4, 3, -4), 0);
    tu_drop(y);
    /* every input element cropped away */
    y = pad_int(x, 5, 1, TU_SHAPE(-3, 1, 0));
    tu_expect(y, CX_S64, 1, TU_SHAPE(1), TU_VALUES(5), 0);
    tu_drop(y);
    y = pad_int(x, 5, 1, TU_SHAPE(-1, -2, 0));
    tu_expect(y, CX_S64, 1, TU_SHAPE(0), NULL, 0);
    tu_drop(y);
    tu_drop(x);
}

static void test_pad_values_by_type(void **state) {
    (void)state;
    cx_tensor *x = tu_tensor(CX_F16, 1, TU_SHAPE(1), TU_VALUES(1));
    cx_params ps = {0};
    cx_param_put_float(&ps, CX_P_VALUE, 0.1);
    cx_param_put_ints(&ps, CX_P_PADS, TU_SHAPE(1, 1, 0), 3);
    cx_tensor *y = run1(CX_OP_PAD, x, &ps);
    assert_int_equal(y->desc.dtype, CX_F16);
    assert_int_equal(bits16(y, 0), cx_f16_from_f64(0.1));
    assert_int_equal(bits16(y, 2), cx_f16_from_f64(0.1));
    tu_drop(y);
    tu_drop(x);
    x = tu_tensor(CX_BF16, 1, TU_SHAPE(1), TU_VALUES(1));
    y = run1(CX_OP_PAD, x, &ps);
    assert_int_equal(bits16(y, 0), cx_bf16_from_f64(0.1));
    tu_drop(y);
    tu_drop(x);
    /* 2^53 + 1 has no double: the integer must come from i[0], not f */
    x = tu_tensor(CX_S64, 1, TU_SHAPE(1), TU_VALUES(1));
    y = pad_int(x, INT64_C(9007199254740993), 1, TU_SHAPE(0, 1, 0));
    assert_int_equal(((const int64_t *)y->data)[1], INT64_C(9007199254740993));
    tu_drop(y);
    tu_drop(x);
    x = tu_tensor(CX_S32, 1, TU_SHAPE(1), TU_VALUES(1));
    y = pad_int(x, -7, 1, TU_SHAPE(2, 0, 0));
    tu_expect(y, CX_S32, 1, TU_SHAPE(3), TU_VALUES(-7, -7, 1), 0);
    tu_drop(y);
    tu_drop(x);
}

static void test_pad_scalar_and_empty(void **state) {
    (void)state;
    cx_tensor *x = tu_tensor(CX_F64, 0, NULL, TU_VALUES(3));
    cx_tensor *y = pad_int(x, 0, 0, NULL);
    tu_expect(y, CX_F64, 0, NULL, TU_VALUES(3), 0);
    tu_drop(y);
    tu_drop(x);
    x = tu_tensor(CX_U8, 1, TU_SHAPE(0), NULL);
    y = pad_int(x, 4, 1, TU_SHAPE(1, 2, 3));
    tu_expect(y, CX_U8, 1, TU_SHAPE(3), TU_VALUES(4, 4, 4), 0);
    tu_drop(y);
    tu_drop(x);
    x = seq_tensor(CX_U8, 2, TU_SHAPE(2, 0));
    y = pad_int(x, 4, 2, TU_SHAPE(0, 0, 0, 1, 0, 0));
    tu_expect(y, CX_U8, 2, TU_SHAPE(2, 1), TU_VALUES(4, 4), 0);
    tu_drop(y);
    tu_drop(x);
}

/* ---- reverse ---- */

static int64_t reverse_src(int64_t i, int rank, const int64_t *shape, const void *ctx) {
    const bool *rev = ctx;
    int64_t idx[CX_MAX_RANK];
    unravel(i, rank, shape, idx);
    for (int k = 0; k < rank; k++)
        if (rev[k]) idx[k] = shape[k] - 1 - idx[k];
    return ravel(rank, shape, idx);
}

static void check_reverse(cx_dtype t, int rank, const int64_t *shape, const int64_t *axes, int n) {
    cx_tensor *x = seq_tensor(t, rank, shape);
    cx_params ps = {0};
    if (axes) cx_param_put_ints(&ps, CX_P_AXES, axes, n);
    cx_tensor *y = run1(CX_OP_REVERSE, x, &ps);
    bool rev[CX_MAX_RANK] = {false};
    for (int k = 0; k < (axes ? n : rank); k++) rev[axes ? (axes[k] + rank) % rank : k] = true;
    expect_seq(y, t, rank, shape, reverse_src, rev);
    tu_drop(y);
    tu_drop(x);
}

static void test_reverse(void **state) {
    (void)state;
    for (int k = 0; k < N_TYPES; k++) {
        check_reverse(types[k], 3, TU_SHAPE(2, 3, 4), TU_SHAPE(0, 2), 2);
        check_reverse(types[k], 3, TU_SHAPE(2, 3, 4), TU_SHAPE(-1, 1), 2);
        check_reverse(types[k], 3, TU_SHAPE(2, 3, 4), NULL, 0);
        check_reverse(types[k], 1, TU_SHAPE(5), NULL, 0);
        /* rows long enough for the vectorised reversed copy, with a remainder */
        check_reverse(types[k], 2, TU_SHAPE(3, 37), TU_SHAPE(1), 1);
        check_reverse(types[k], 3, TU_SHAPE(2, 3, 67), TU_SHAPE(-1, 0), 2);
    }
    check_reverse(CX_F32, 2, TU_SHAPE(0, 3), NULL, 0);
    check_reverse(CX_F32, 0, NULL, NULL, 0);
    cx_tensor *x = tu_tensor(CX_S64, 2, TU_SHAPE(2, 2), TU_VALUES(1, 2, 3, 4));
    cx_params ps = {0};
    cx_param_put_ints(&ps, CX_P_AXES, TU_SHAPE(1), 1);
    cx_tensor *y = run1(CX_OP_REVERSE, x, &ps);
    tu_expect(y, CX_S64, 2, TU_SHAPE(2, 2), TU_VALUES(2, 1, 4, 3), 0);
    tu_drop(y);
    tu_drop(x);
}

/* ---- concatenate ---- */

static cx_tensor *concat(cx_tensor **in, int n, int64_t axis) {
    cx_params ps = {0};
    cx_param_put_int(&ps, CX_P_AXIS, axis);
    return tu_run_ok(CX_OP_CONCATENATE, in, n, &ps);
}

static void test_concatenate(void **state) {
    (void)state;
    for (int k = 0; k < N_TYPES; k++) {
        cx_dtype t = types[k];
        cx_tensor *in[3] = {tu_tensor(t, 2, TU_SHAPE(2, 1), TU_VALUES(1, 2)),
                            tu_tensor(t, 2, TU_SHAPE(2, 2), TU_VALUES(3, 4, 5, 6)),
                            tu_tensor(t, 2, TU_SHAPE(2, 3), TU_VALUES(7, 8, 9, 10, 11, 12))};
        cx_tensor *y = concat(in, 3, 1);
        tu_expect(y, t, 2, TU_SHAPE(2, 6), TU_VALUES(1, 3, 4, 7, 8, 9, 2, 5, 6, 10, 11, 12), 0);
        tu_drop(y);
        y = concat(in + 1, 1, -1);
        tu_expect(y, t, 2, TU_SHAPE(2, 2), TU_VALUES(3, 4, 5, 6), 0);
        tu_drop(y);
        for (int j = 0; j < 3; j++) tu_drop(in[j]);
    }
}

static void test_concatenate_axis0_and_empty(void **state) {
    (void)state;
    cx_tensor *in[3] = {tu_tensor(CX_F32, 2, TU_SHAPE(1, 2), TU_VALUES(1, 2)),
                        seq_tensor(CX_F32, 2, TU_SHAPE(0, 2)),
                        tu_tensor(CX_F32, 2, TU_SHAPE(2, 2), TU_VALUES(3, 4, 5, 6))};
    cx_tensor *y = concat(in, 3, 0);
    tu_expect(y, CX_F32, 2, TU_SHAPE(3, 2), TU_VALUES(1, 2, 3, 4, 5, 6), 0);
    tu_drop(y);
    for (int j = 0; j < 3; j++) tu_drop(in[j]);
    cx_tensor *e[2] = {seq_tensor(CX_S64, 2, TU_SHAPE(0, 2)),
                       seq_tensor(CX_S64, 2, TU_SHAPE(0, 3))};
    y = concat(e, 2, 1);
    tu_expect(y, CX_S64, 2, TU_SHAPE(0, 5), NULL, 0);
    tu_drop(y);
    for (int j = 0; j < 2; j++) tu_drop(e[j]);
}

static void test_concatenate_mixed_types(void **state) {
    (void)state;
    if (!cast_ready()) skip();
    cx_tensor *in[3] = {tu_tensor(CX_S64, 2, TU_SHAPE(2, 1), TU_VALUES(1, 2)),
                        tu_tensor(CX_F32, 2, TU_SHAPE(2, 2), TU_VALUES(3.5, 4, 5, 6.5)),
                        tu_tensor(CX_U8, 2, TU_SHAPE(2, 3), TU_VALUES(7, 8, 9, 10, 11, 12))};
    cx_tensor *y = concat(in, 3, 1);
    tu_expect(y, CX_F32, 2, TU_SHAPE(2, 6), TU_VALUES(1, 3.5, 4, 7, 8, 9, 2, 5, 6.5, 10, 11, 12),
              0);
    tu_drop(y);
    for (int j = 0; j < 3; j++) tu_drop(in[j]);
}

/* ---- take ---- */

static cx_tensor *take(cx_tensor *x, cx_tensor *idx, int64_t axis) {
    cx_params ps = {0};
    cx_param_put_int(&ps, CX_P_AXIS, axis);
    return run2(CX_OP_TAKE, x, idx, &ps);
}

static void test_take_nx(void **state) {
    (void)state;
    for (int k = 0; k < N_TYPES; k++) {
        cx_dtype t = types[k];
        cx_tensor *x = tu_tensor(t, 2, TU_SHAPE(2, 2), TU_VALUES(1, 2, 3, 4));
        cx_tensor *i = tu_tensor(CX_S64, 1, TU_SHAPE(3), TU_VALUES(1, 1, 0));
        cx_tensor *y = take(x, i, 0);
        tu_expect(y, t, 2, TU_SHAPE(3, 2), TU_VALUES(3, 4, 3, 4, 1, 2), 0);
        tu_drop(y);
        tu_drop(i);
        i = tu_tensor(CX_S64, 2, TU_SHAPE(3, 2), TU_VALUES(0, 0, 1, 1, 0, 0));
        y = take(x, i, 1);
        tu_expect(y, t, 3, TU_SHAPE(2, 3, 2), TU_VALUES(1, 1, 2, 2, 1, 1, 3, 3, 4, 4, 3, 3), 0);
        tu_drop(y);
        tu_drop(i);
        tu_drop(x);
    }
}

static void test_take_2x2_indices_axis1(void **state) {
    (void)state;
    cx_tensor *x = seq_tensor(CX_F16, 3, TU_SHAPE(2, 3, 2));
    cx_tensor *i = tu_tensor(CX_S64, 2, TU_SHAPE(2, 2), TU_VALUES(0, 2, 1, 1));
    cx_tensor *y = take(x, i, 1);
    /* out[a, b, c, d] = x[a, i[b, c], d] */
    tu_expect(y, CX_F16, 4, TU_SHAPE(2, 2, 2, 2),
              TU_VALUES(0, 1, 4, 5, 2, 3, 2, 3, 6, 7, 10, 11, 8, 9, 8, 9), 0);
    tu_drop(y);
    tu_drop(i);
    i = tu_tensor(CX_S64, 2, TU_SHAPE(2, 2), TU_VALUES(1, 1, 0, 0));
    y = take(x, i, -1);
    tu_expect(y, CX_F16, 4, TU_SHAPE(2, 3, 2, 2),
              TU_VALUES(1, 1, 0, 0, 3, 3, 2, 2, 5, 5, 4, 4, 7, 7, 6, 6, 9, 9, 8, 8, 11, 11, 10, 10),
              0);
    tu_drop(y);
    tu_drop(i);
    i = tu_tensor(CX_S64, 1, TU_SHAPE(0), NULL);
    y = take(x, i, 1);
    tu_expect(y, CX_F16, 3, TU_SHAPE(2, 0, 2), NULL, 0);
    tu_drop(y);
    tu_drop(i);
    i = tu_tensor(CX_S64, 0, NULL, TU_VALUES(2));
    y = take(x, i, 1);
    tu_expect(y, CX_F16, 2, TU_SHAPE(2, 2), TU_VALUES(4, 5, 10, 11), 0);
    tu_drop(y);
    tu_drop(i);
    tu_drop(x);
}

static void expect_einval(cx_op_id op, cx_tensor *x, cx_tensor *idx, cx_params *ps,
                          const char *msg) {
    cx_tensor *in[2] = {x, idx};
    cx_status st = {0};
    cx_code rc;
    cx_tensor *y = tu_run(op, in, 2, ps, &rc, &st);
    assert_null(y);
    assert_int_equal(rc, CX_EINVAL);
    if (!strstr(st.message, msg)) fail_msg("message \"%s\" lacks \"%s\"", st.message, msg);
}

static void test_take_out_of_range(void **state) {
    (void)state;
    cx_tensor *x = seq_tensor(CX_F32, 2, TU_SHAPE(2, 3));
    const int64_t bad[] = {3, -1, INT64_MAX, INT64_MIN};
    for (int k = 0; k < 4; k++) {
        cx_tensor *i = tu_tensor(CX_S64, 1, TU_SHAPE(3), TU_VALUES(0, 1, 2));
        ((int64_t *)i->data)[1] = bad[k];
        char msg[128];
        snprintf(msg, sizeof msg, "take: index %lld is out of bounds for axis 1 of size 3",
                 (long long)bad[k]);
        cx_params ps = {0};
        cx_param_put_int(&ps, CX_P_AXIS, 1);
        expect_einval(CX_OP_TAKE, x, i, &ps, msg);
        tu_drop(i);
    }
    tu_drop(x);
}

/* ---- gather ---- */

static cx_tensor *gather(cx_tensor *x, cx_tensor *idx, const int64_t *axes, int n) {
    cx_params ps = {0};
    if (axes) cx_param_put_ints(&ps, CX_P_AXES, axes, n);
    return run2(CX_OP_GATHER, x, idx, &ps);
}

static void test_gather_nx(void **state) {
    (void)state;
    for (int k = 0; k < N_TYPES; k++) {
        cx_dtype t = types[k];
        cx_tensor *x = tu_tensor(t, 2, TU_SHAPE(2, 2), TU_VALUES(1, 2, 3, 4));
        cx_tensor *i = tu_tensor(CX_S64, 2, TU_SHAPE(2, 2), TU_VALUES(1, 0, 0, 1));
        cx_tensor *y = gather(x, i, NULL, 0);
        tu_expect(y, t, 1, TU_SHAPE(2), TU_VALUES(3, 2), 0);
        tu_drop(y);
        tu_drop(i);
        i = tu_tensor(CX_S64, 3, TU_SHAPE(2, 2, 2), TU_VALUES(1, 1, 0, 0, 1, 0, 0, 1));
        y = gather(x, i, NULL, 0);
        tu_expect(y, t, 2, TU_SHAPE(2, 2), TU_VALUES(4, 1, 3, 2), 0);
        tu_drop(y);
        tu_drop(i);
        tu_drop(x);
    }
}

static void test_gather_subsets_and_axes(void **state) {
    (void)state;
    cx_tensor *x = tu_tensor(CX_S64, 2, TU_SHAPE(2, 3), TU_VALUES(1, 2, 3, 4, 5, 6));
    cx_tensor *i = tu_tensor(CX_S64, 2, TU_SHAPE(2, 1), TU_VALUES(1, 0));
    cx_tensor *y = gather(x, i, NULL, 0);
    tu_expect(y, CX_S64, 2, TU_SHAPE(2, 3), TU_VALUES(4, 5, 6, 1, 2, 3), 0);
    tu_drop(y);
    y = gather(x, i, TU_SHAPE(1), 1);
    tu_expect(y, CX_S64, 2, TU_SHAPE(2, 2), TU_VALUES(2, 5, 1, 4), 0);
    tu_drop(y);
    tu_drop(i);
    tu_drop(x);
    x = seq_tensor(CX_U8, 3, TU_SHAPE(2, 3, 4));
    i = tu_tensor(CX_S64, 2, TU_SHAPE(3, 2), TU_VALUES(1, 3, 0, 0, 1, 1));
    y = gather(x, i, TU_SHAPE(0, 2), 2); /* out[r, c] = x[i[r, 0], c, i[r, 1]] */
    tu_expect(y, CX_U8, 2, TU_SHAPE(3, 3), TU_VALUES(15, 19, 23, 0, 4, 8, 13, 17, 21), 0);
    tu_drop(y);
    tu_drop(i);
    tu_drop(x);
}

static void test_gather_edges(void **state) {
    (void)state;
    cx_tensor *x = seq_tensor(CX_F32, 2, TU_SHAPE(2, 3));
    cx_tensor *i = tu_tensor(CX_S64, 2, TU_SHAPE(0, 2), NULL);
    cx_tensor *y = gather(x, i, NULL, 0);
    tu_expect(y, CX_F32, 1, TU_SHAPE(0), NULL, 0);
    tu_drop(y);
    tu_drop(i);
    /* no indexed axes: every row copies the whole tensor */
    i = tu_tensor(CX_S64, 2, TU_SHAPE(2, 0), NULL);
    y = gather(x, i, NULL, 0);
    tu_expect(y, CX_F32, 3, TU_SHAPE(2, 2, 3), TU_VALUES(0, 1, 2, 3, 4, 5, 0, 1, 2, 3, 4, 5), 0);
    tu_drop(y);
    tu_drop(i);
    i = tu_tensor(CX_S64, 1, TU_SHAPE(2), TU_VALUES(1, 2));
    y = gather(x, i, NULL, 0);
    tu_expect(y, CX_F32, 0, NULL, TU_VALUES(5), 0);
    tu_drop(y);
    tu_drop(i);
    tu_drop(x);
}

static void test_gather_out_of_range(void **state) {
    (void)state;
    cx_tensor *x = seq_tensor(CX_S64, 2, TU_SHAPE(2, 3));
    cx_tensor *i = tu_tensor(CX_S64, 2, TU_SHAPE(2, 2), TU_VALUES(0, 0, 1, 3));
    cx_params ps = {0};
    expect_einval(CX_OP_GATHER, x, i, &ps,
                  "index 3 (entry 1 of index row 1) is out of bounds for axis 1 of size 3");
    ((int64_t *)i->data)[3] = 0;
    ((int64_t *)i->data)[0] = -1;
    cx_params ps2 = {0};
    expect_einval(CX_OP_GATHER, x, i, &ps2,
                  "index -1 (entry 0 of index row 0) is out of bounds for axis 0 of size 2");
    tu_drop(i);
    i = tu_tensor(CX_S64, 2, TU_SHAPE(1, 1), TU_VALUES(2));
    cx_params ps3 = {0};
    cx_param_put_ints(&ps3, CX_P_AXES, TU_SHAPE(0), 1);
    expect_einval(CX_OP_GATHER, x, i, &ps3, "out of bounds for axis 0 of size 2");
    tu_drop(i);
    tu_drop(x);
}

/* ---- f16 bit patterns ---- */

/* NaN with payload, smallest subnormal, -0, +inf, -inf, a plain number */
static const uint16_t odd_bits[6] = {0x7e01, 0x0001, 0x8000, 0x7c00, 0xfc00, 0x3555};

static cx_tensor *odd_f16(void) {
    cx_tensor *x = tu_tensor(CX_F16, 2, TU_SHAPE(2, 3), TU_VALUES(0, 0, 0, 0, 0, 0));
    memcpy(x->data, odd_bits, sizeof odd_bits);
    return x;
}

static void expect_bits(const cx_tensor *y, const int *from, int n) {
    for (int k = 0; k < n; k++)
        if (bits16(y, k) != (from[k] < 0 ? 0 : odd_bits[from[k]]))
            fail_msg("element %d: bits %#x", k, bits16(y, k));
}

static void test_f16_bits_survive(void **state) {
    (void)state;
    cx_tensor *x = odd_f16();
    cx_params ps = {0};
    cx_tensor *y = run1(CX_OP_TRANSPOSE, x, &ps);
    expect_bits(y, (const int[]){0, 3, 1, 4, 2, 5}, 6);
    tu_drop(y);
    y = run1(CX_OP_REVERSE, x, &ps);
    expect_bits(y, (const int[]){5, 4, 3, 2, 1, 0}, 6);
    tu_drop(y);
    y = pad_int(x, 0, 2, TU_SHAPE(0, 0, 0, 1, 0, 0));
    expect_bits(y, (const int[]){-1, 0, 1, 2, -1, 3, 4, 5}, 8);
    tu_drop(y);
    cx_tensor *i = tu_tensor(CX_S64, 1, TU_SHAPE(3), TU_VALUES(2, 0, 1));
    y = take(x, i, 1);
    expect_bits(y, (const int[]){2, 0, 1, 5, 3, 4}, 6);
    tu_drop(y);
    tu_drop(i);
    cx_tensor *in[2] = {x, x};
    y = concat(in, 2, 0);
    expect_bits(y, (const int[]){0, 1, 2, 3, 4, 5, 0, 1, 2, 3, 4, 5}, 12);
    tu_drop(y);
    tu_drop(x);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_reshape),
        cmocka_unit_test(test_reshape_scalar_and_empty),
        cmocka_unit_test(test_transpose_nx),
        cmocka_unit_test(test_transpose_all_perms),
        cmocka_unit_test(test_transpose_large),
        cmocka_unit_test(test_transpose_scalar_and_empty),
        cmocka_unit_test(test_broadcast),
        cmocka_unit_test(test_broadcast_axes_scalar_empty),
        cmocka_unit_test(test_slice_nx),
        cmocka_unit_test(test_slice_strides_and_edges),
        cmocka_unit_test(test_put_slice),
        cmocka_unit_test(test_put_slice_empty_and_scalar),
        cmocka_unit_test(test_pad_nx),
        cmocka_unit_test(test_pad_crop_with_interior),
        cmocka_unit_test(test_pad_values_by_type),
        cmocka_unit_test(test_pad_scalar_and_empty),
        cmocka_unit_test(test_reverse),
        cmocka_unit_test(test_concatenate),
        cmocka_unit_test(test_concatenate_axis0_and_empty),
        cmocka_unit_test(test_concatenate_mixed_types),
        cmocka_unit_test(test_take_nx),
        cmocka_unit_test(test_take_2x2_indices_axis1),
        cmocka_unit_test(test_take_out_of_range),
        cmocka_unit_test(test_gather_nx),
        cmocka_unit_test(test_gather_subsets_and_axes),
        cmocka_unit_test(test_gather_edges),
        cmocka_unit_test(test_gather_out_of_range),
        cmocka_unit_test(test_f16_bits_survive),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
