/* Tests of the core without kernels: dtypes, halves, inference (through cx_plan_op, which only
 * infers), tensors and their pins, devices and the gc trigger, the parameter and op tables. */
#include <pthread.h>
#include <stdio.h>
#include <time.h>

#include "test_util.h"
#include "../core/decompose.h"
#include "../core/half_array.h"

#define RANK_OF(...) ((int)(sizeof((int64_t[]){__VA_ARGS__}) / sizeof(int64_t)))
#define IN(...)      ((cx_tensor *[]){__VA_ARGS__})
#define NIN(...)     ((int)(sizeof((cx_tensor *[]){__VA_ARGS__}) / sizeof(cx_tensor *)))
#define WORDS(...)   ((const char *const[]){__VA_ARGS__, NULL})
#define PUT(ps, id, ...)                                                                           \
    cx_param_put_ints(&(ps), CX_P_##id, TU_SHAPE(__VA_ARGS__), RANK_OF(__VA_ARGS__))

#define MAX_NUMEL (INT64_C(1) << 48)

/* ---------------------------------------------------------------------------------------------
 * Tensors for the inference tests: real ones (tu_tensor, zero-filled) and descriptor-only ones
 * for shapes too big to allocate (cx_plan_op reads only desc, numel and device). Both pools are
 * emptied by the teardown of every test. */

#define POOL_MAX 512
static cx_tensor *pool[POOL_MAX];
static int npool;
static cx_tensor *fakes[POOL_MAX];
static int nfakes;

static cx_tensor *mk(cx_dtype t, int rank, const int64_t *shape) {
    int64_t n = 1;
    for (int k = 0; k < rank; k++) n *= shape[k];
    double *vals = calloc((size_t)(n ? n : 1), sizeof(double));
    assert_non_null(vals);
    cx_tensor *x = tu_tensor(t, rank, shape, vals);
    free(vals);
    assert_true(npool < POOL_MAX);
    pool[npool++] = x;
    return x;
}

static cx_tensor *fake(cx_dtype t, int rank, const int64_t *shape) {
    cx_tensor *x = calloc(1, sizeof *x);
    assert_non_null(x);
    x->desc = tu_desc(t, rank, shape);
    x->numel = cx_desc_numel(&x->desc);
    x->nbytes = (size_t)x->numel * cx_dtype_size(t);
    x->device = tu_cpu();
    atomic_store(&x->state, CX_TENSOR_FREED | CX_TENSOR_RELEASED); /* holds no buffer */
    assert_true(nfakes < POOL_MAX);
    fakes[nfakes++] = x;
    return x;
}

#define T(t, ...)    mk(t, RANK_OF(__VA_ARGS__), TU_SHAPE(__VA_ARGS__))
#define T0(t)        mk(t, 0, NULL)
#define FAKE(t, ...) fake(t, RANK_OF(__VA_ARGS__), TU_SHAPE(__VA_ARGS__))

static int teardown_pool(void **state) {
    (void)state;
    for (int k = 0; k < npool; k++) tu_drop(pool[k]);
    for (int k = 0; k < nfakes; k++) free(fakes[k]);
    npool = nfakes = 0;
    return 0;
}

static cx_code plan_n(cx_op_id op, cx_tensor **in, int n, cx_params *ps, cx_plan *pl,
                      cx_status *st) {
    memset(st, 0, sizeof *st);
    memset(pl, 0, sizeof *pl);
    return cx_plan_op(op, tu_cpu(), (const cx_tensor *const *)in, n, ps, pl, st);
}

/* The helpers take the caller's line: a failure names the test's line, not the helper's. */
static void plan_ok_at(int line, cx_plan *pl, cx_op_id op, cx_params *ps, cx_tensor **in, int n) {
    cx_status st;
    cx_code rc = plan_n(op, in, n, ps, pl, &st);
    if (rc != CX_OK)
        fail_msg("line %d: %s: expected success, got %s: %s", line, cx_op_table[op].name,
                 cx_code_name(rc), st.message);
    assert_ptr_equal(pl->device, tu_cpu());
    assert_int_equal(pl->op, op);
}

static void fail_at(int line, cx_op_id op, cx_params *ps, cx_tensor **in, int n,
                    const char *const *words) {
    cx_status st;
    cx_plan pl;
    cx_code rc = plan_n(op, in, n, ps, &pl, &st);
    if (rc != CX_EINVAL)
        fail_msg("line %d: %s: expected invalid_argument, got %s (%s)", line,
                 (int)op >= 0 && op < CX_OP_COUNT ? cx_op_table[op].name : "?", cx_code_name(rc),
                 st.message);
    assert_int_equal(st.code, CX_EINVAL);
    if ((int)op >= 0 && op < CX_OP_COUNT && !strstr(st.message, cx_op_table[op].name))
        fail_msg("line %d: message does not name the op %s: %s", line, cx_op_table[op].name,
                 st.message);
    for (int k = 0; words[k]; k++)
        if (!strstr(st.message, words[k]))
            fail_msg("line %d: message lacks \"%s\": %s", line, words[k], st.message);
}

#define plan_ok_n(...) plan_ok_at(__LINE__, __VA_ARGS__)
#define fail_n(...)    fail_at(__LINE__, __VA_ARGS__)

#define PLAN_OK(pl, op, ps, ...)                                                                   \
    plan_ok_n(&(pl), CX_OP_##op, &(ps), IN(__VA_ARGS__), NIN(__VA_ARGS__))
#define PLAN_OK0(pl, op, ps)   plan_ok_n(&(pl), CX_OP_##op, &(ps), NULL, 0)
#define FAILS(op, ps, in, ...) fail_n(CX_OP_##op, &(ps), IN in, NIN in, WORDS(__VA_ARGS__))
#define FAILS0(op, ps, ...)    fail_n(CX_OP_##op, &(ps), NULL, 0, WORDS(__VA_ARGS__))

static void expect_out(int line, const cx_plan *pl, cx_dtype t, int rank, const int64_t *shape) {
    if (pl->out.dtype != t)
        fail_msg("line %d: expected type %s, got %s", line, cx_dtype_name(t),
                 cx_dtype_name(pl->out.dtype));
    if (pl->out.rank != rank)
        fail_msg("line %d: expected rank %d, got %d", line, rank, pl->out.rank);
    for (int k = 0; k < rank; k++)
        if (pl->out.shape[k] != shape[k])
            fail_msg("line %d: axis %d: expected %lld, got %lld", line, k, (long long)shape[k],
                     (long long)pl->out.shape[k]);
}

#define OUT(pl, t, ...) expect_out(__LINE__, &(pl), t, RANK_OF(__VA_ARGS__), TU_SHAPE(__VA_ARGS__))
#define OUT0(pl, t)     expect_out(__LINE__, &(pl), t, 0, NULL)

static void expect_ints(const cx_params *ps, cx_param_id id, int n, const int64_t *v) {
    assert_true(cx_param_has(ps, id));
    assert_int_equal(ps->p[id].n, n);
    for (int k = 0; k < n; k++) assert_int_equal(ps->p[id].i[k], v[k]);
}

#define INTS(ps, id, ...) expect_ints(&(ps), CX_P_##id, RANK_OF(__VA_ARGS__), TU_SHAPE(__VA_ARGS__))
#define INTS0(ps, id)     expect_ints(&(ps), CX_P_##id, 0, NULL)

/* ---------------------------------------------------------------------------------------------
 * dtype.c */

static void test_dtype_sizes_names(void **state) {
    (void)state;
    static const struct {
        cx_dtype t;
        const char *name;
        size_t size;
        bool is_float, is_signed;
    } want[] = {
        {CX_F16, "f16", 2, true, false},  {CX_BF16, "bf16", 2, true, false},
        {CX_F32, "f32", 4, true, false},  {CX_F64, "f64", 8, true, false},
        {CX_U8, "u8", 1, false, false},   {CX_S32, "s32", 4, false, true},
        {CX_S64, "s64", 8, false, true},  {CX_S8, "s8", 1, false, true},
        {CX_S16, "s16", 2, false, true},  {CX_U16, "u16", 2, false, false},
        {CX_U32, "u32", 4, false, false}, {CX_U64, "u64", 8, false, false},
        {CX_C64, "c64", 8, false, false}, {CX_C128, "c128", 16, false, false},
    };
    assert_int_equal(sizeof want / sizeof want[0], CX_DTYPE_COUNT);
    for (size_t k = 0; k < sizeof want / sizeof want[0]; k++) {
        cx_dtype t = want[k].t;
        assert_int_equal(t, (cx_dtype)k);
        assert_true(cx_dtype_valid(t));
        assert_int_equal(cx_dtype_size(t), want[k].size);
        assert_string_equal(cx_dtype_name(t), want[k].name);
        assert_int_equal(cx_dtype_from_name(cx_dtype_name(t)), t);
        assert_int_equal(cx_dtype_is_float(t), want[k].is_float);
        assert_int_equal(cx_dtype_is_signed(t), want[k].is_signed);
        assert_int_equal(cx_dtype_is_complex(t), t == CX_C64 || t == CX_C128);
    }
    const char *bad[] = {"", "f8", "F32", "f32 ", "s128", "u1", "invalid", "bf", "c32"};
    for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++)
        assert_int_equal(cx_dtype_from_name(bad[k]), CX_DTYPE_INVALID);
    int invalid[] = {-1, CX_DTYPE_COUNT, 1000, -1000};
    for (size_t k = 0; k < sizeof invalid / sizeof invalid[0]; k++) {
        cx_dtype t = (cx_dtype)invalid[k];
        assert_false(cx_dtype_valid(invalid[k]));
        assert_int_equal(cx_dtype_size(t), 0);
        assert_string_equal(cx_dtype_name(t), "invalid");
        assert_false(cx_dtype_is_float(t));
        assert_false(cx_dtype_is_signed(t));
    }
}

static void test_dtype_merge(void **state) {
    (void)state;
    /* Nx.Type.merge: floats win over integers, f16 with bf16 widens to f32; unsigned with signed
     * gives a signed type twice the unsigned width (at most 64 bits) or the signed one's. */
    enum {
        F16 = CX_F16,
        BF16 = CX_BF16,
        F32 = CX_F32,
        F64 = CX_F64,
        U8 = CX_U8,
        S32 = CX_S32,
        S64 = CX_S64,
        S8 = CX_S8,
        S16 = CX_S16,
        U16 = CX_U16,
        U32 = CX_U32,
        U64 = CX_U64,
        C64 = CX_C64,
        C128 = CX_C128
    };
    /* a complex type wins and keeps its width (c64 with f64 is c64, as in Nx) */
    static const int want[CX_DTYPE_COUNT][CX_DTYPE_COUNT] = {
        /*         F16   BF16  F32  F64  U8    S32   S64   S8    S16   U16   U32   U64  C64  C128 */
        /* F16  */ {F16, F32, F32, F64, F16, F16, F16, F16, F16, F16, F16, F16, C64, C128},
        /* BF16 */ {F32, BF16, F32, F64, BF16, BF16, BF16, BF16, BF16, BF16, BF16, BF16, C64, C128},
        /* F32  */ {F32, F32, F32, F64, F32, F32, F32, F32, F32, F32, F32, F32, C64, C128},
        /* F64  */ {F64, F64, F64, F64, F64, F64, F64, F64, F64, F64, F64, F64, C64, C128},
        /* U8   */ {F16, BF16, F32, F64, U8, S32, S64, S16, S16, U16, U32, U64, C64, C128},
        /* S32  */ {F16, BF16, F32, F64, S32, S32, S64, S32, S32, S32, S64, S64, C64, C128},
        /* S64  */ {F16, BF16, F32, F64, S64, S64, S64, S64, S64, S64, S64, S64, C64, C128},
        /* S8   */ {F16, BF16, F32, F64, S16, S32, S64, S8, S16, S32, S64, S64, C64, C128},
        /* S16  */ {F16, BF16, F32, F64, S16, S32, S64, S16, S16, S32, S64, S64, C64, C128},
        /* U16  */ {F16, BF16, F32, F64, U16, S32, S64, S32, S32, U16, U32, U64, C64, C128},
        /* U32  */ {F16, BF16, F32, F64, U32, S64, S64, S64, S64, U32, U32, U64, C64, C128},
        /* U64  */ {F16, BF16, F32, F64, U64, S64, S64, S64, S64, U64, U64, U64, C64, C128},
        /* C64  */ {C64, C64, C64, C64, C64, C64, C64, C64, C64, C64, C64, C64, C64, C128},
        /* C128 */
        {C128, C128, C128, C128, C128, C128, C128, C128, C128, C128, C128, C128, C128, C128},
    };
    for (int a = 0; a < CX_DTYPE_COUNT; a++)
        for (int b = 0; b < CX_DTYPE_COUNT; b++) {
            cx_dtype got = cx_dtype_merge((cx_dtype)a, (cx_dtype)b);
            if ((int)got != want[a][b])
                fail_msg("merge(%s, %s): expected %s, got %s", cx_dtype_name((cx_dtype)a),
                         cx_dtype_name((cx_dtype)b), cx_dtype_name((cx_dtype)want[a][b]),
                         cx_dtype_name(got));
            assert_int_equal(got, cx_dtype_merge((cx_dtype)b, (cx_dtype)a));
        }
    /* the brief's named cases */
    assert_int_equal(cx_dtype_merge(CX_F16, CX_BF16), CX_F32);
    assert_int_equal(cx_dtype_merge(CX_S32, CX_F32), CX_F32);
    assert_int_equal(cx_dtype_merge(CX_U8, CX_S32), CX_S32);
    assert_int_equal(cx_dtype_merge(CX_U8, CX_U8), CX_U8);
    assert_int_equal(cx_dtype_merge(CX_S32, CX_S64), CX_S64);
    assert_int_equal(cx_dtype_merge(CX_F32, CX_F64), CX_F64);
}

static void test_dtype_to_float_aggregate(void **state) {
    (void)state;
    static const cx_dtype to_float[CX_DTYPE_COUNT] = {CX_F16, CX_BF16, CX_F32, CX_F64, CX_F32,
                                                      CX_F32, CX_F32,  CX_F32, CX_F32, CX_F32,
                                                      CX_F32, CX_F32,  CX_C64, CX_C128};
    static const cx_dtype to_agg[CX_DTYPE_COUNT] = {CX_F16, CX_BF16, CX_F32, CX_F64, CX_U64,
                                                    CX_S64, CX_S64,  CX_S64, CX_S64, CX_U64,
                                                    CX_U64, CX_U64,  CX_C64, CX_C128};
    for (int t = 0; t < CX_DTYPE_COUNT; t++) {
        assert_int_equal(cx_dtype_to_float((cx_dtype)t), to_float[t]);
        assert_int_equal(cx_dtype_to_aggregate((cx_dtype)t), to_agg[t]);
    }
    assert_int_equal(cx_dtype_to_real(CX_C64), CX_F32);
    assert_int_equal(cx_dtype_to_real(CX_C128), CX_F64);
    assert_int_equal(cx_dtype_to_real(CX_S8), CX_F32);
    assert_int_equal(cx_dtype_to_complex(CX_F64), CX_C128);
    assert_int_equal(cx_dtype_to_complex(CX_BF16), CX_C64);
    assert_int_equal(cx_dtype_to_complex(CX_C128), CX_C128);
}

/* ---------------------------------------------------------------------------------------------
 * half.h, against references computed here. */

/* The value of a non-negative f16 pattern up to 0x7c00, which stands for 2^16: rounding
 * as if the exponent were unbounded and calling 2^16 infinity gives IEEE's overflow rule. */
static double f16_value(unsigned h) {
    unsigned e = (h >> 10) & 0x1f, m = h & 0x3ff;
    return e == 0 ? ldexp(m, -24) : ldexp(1024 + m, (int)e - 25);
}

/* Same for bf16 up to 0x7f80 (2^128). */
static double bf16_value(unsigned h) {
    unsigned e = (h >> 7) & 0xff, m = h & 0x7f;
    return e == 0 ? ldexp(m, -133) : ldexp(128 + m, (int)e - 134);
}

/* Nearest of the candidates 0..top (values monotonic), ties to the even pattern: binary search
 * for the last candidate not above |d|, then compare with the exact midpoint. */
static unsigned nearest(double a, unsigned top, double (*value)(unsigned)) {
    if (a >= value(top)) return top;
    unsigned lo = 0, hi = top; /* value(lo) <= a < value(hi) */
    while (hi - lo > 1) {
        unsigned mid = (lo + hi) / 2;
        if (value(mid) <= a)
            lo = mid;
        else
            hi = mid;
    }
    if (value(lo) == a) return lo;
    double m = (value(lo) + value(hi)) / 2; /* exact: both have few significant bits */
    if (a < m) return lo;
    if (a > m) return hi;
    return (lo & 1) ? hi : lo;
}

static uint16_t ref_f16(double d) {
    if (isnan(d)) return 0x7e00;
    uint16_t sign = signbit(d) ? 0x8000 : 0;
    return (uint16_t)(sign | nearest(fabs(d), 0x7c00, f16_value));
}

static uint16_t ref_bf16(double d) {
    if (isnan(d)) return 0x7fc0;
    uint16_t sign = signbit(d) ? 0x8000 : 0;
    return (uint16_t)(sign | nearest(fabs(d), 0x7f80, bf16_value));
}

/* The same by exhaustive search over every candidate: the reference of the reference. */
static uint16_t ref_f16_linear(double d) {
    uint16_t sign = signbit(d) ? 0x8000 : 0;
    double a = fabs(d);
    if (a >= 65536.0) return (uint16_t)(sign | 0x7c00);
    double best = INFINITY;
    for (unsigned h = 0; h <= 0x7c00; h++) {
        double diff = fabs(f16_value(h) - a);
        if (diff < best) best = diff;
    }
    unsigned pick = 0x10000;
    for (unsigned h = 0; h <= 0x7c00; h++)
        if (fabs(f16_value(h) - a) == best && (pick == 0x10000 || !(h & 1))) pick = h;
    return (uint16_t)(sign | pick);
}

static bool f16_is_nan(uint16_t h) {
    return (h & 0x7c00) == 0x7c00 && (h & 0x3ff);
}
static bool bf16_is_nan(uint16_t h) {
    return (h & 0x7f80) == 0x7f80 && (h & 0x7f);
}

#define CHECK_F16(got, want, what, x)                                                              \
    do {                                                                                           \
        uint16_t g_ = (got), w_ = (want);                                                          \
        if (g_ != w_) fail_msg("%s(%a): expected 0x%04x, got 0x%04x", what, (double)(x), w_, g_);  \
    } while (0)

static void test_f16_all_patterns(void **state) {
    (void)state;
    for (unsigned h = 0; h < 0x10000; h++) {
        float f = cx_f16_to_f32((uint16_t)h);
        if (f16_is_nan((uint16_t)h)) {
            assert_true(isnan(f));
            uint16_t back = cx_f16_from_f32(f);
            assert_true(f16_is_nan(back));
            assert_true(back & 0x200); /* quiet */
            assert_true(f16_is_nan(cx_f16_from_f64((double)f)));
            continue;
        }
        /* the value, exactly */
        double want = (h & 0x7c00) == 0x7c00 ? INFINITY : f16_value(h & 0x7fff);
        if (h & 0x8000) want = -want;
        if ((double)f != want) fail_msg("f16 0x%04x: expected %a, got %a", h, want, (double)f);
        assert_int_equal(signbit(f) != 0, (h & 0x8000) != 0);
        CHECK_F16(cx_f16_from_f32(f), h, "f16_from_f32", f);
        CHECK_F16(cx_f16_from_f64((double)f), h, "f16_from_f64", f);
    }
}

static void test_bf16_all_patterns(void **state) {
    (void)state;
    for (unsigned h = 0; h < 0x10000; h++) {
        float f = cx_bf16_to_f32((uint16_t)h);
        assert_int_equal(cx_f32_bits(f), (uint32_t)h << 16);
        if (bf16_is_nan((uint16_t)h)) {
            assert_true(isnan(f));
            uint16_t back = cx_bf16_from_f32(f);
            assert_true(bf16_is_nan(back));
            assert_true(back & 0x40);
            assert_int_equal(back & 0x8000, h & 0x8000);
            assert_true(bf16_is_nan(cx_bf16_from_f64((double)f)));
            continue;
        }
        CHECK_F16(cx_bf16_from_f32(f), h, "bf16_from_f32", f);
        CHECK_F16(cx_bf16_from_f64((double)f), h, "bf16_from_f64", f);
    }
}

static void test_f16_rounding_cases(void **state) {
    (void)state;
    static const struct {
        double x;
        uint16_t want;
    } cases[] = {
        {1.0, 0x3c00},
        {1.0 + 0x1p-11, 0x3c00},           /* tie, even below */
        {1.0 + 3 * 0x1p-11, 0x3c02},       /* tie, even above: 1 + 2^-9 */
        {1.0 + 5 * 0x1p-11, 0x3c02},       /* tie, even below */
        {1.0 + 0x1p-11 + 0x1p-23, 0x3c01}, /* just above the tie (exact in f32) */
        {1.0 - 0x1p-12, 0x3c00},           /* tie between 0x3bff and 0x3c00 */
        {1.0 - 3 * 0x1p-12, 0x3bfe},       /* tie between 0x3bfe and 0x3bff */
        {65504.0, 0x7bff},
        {65519.0, 0x7bff},
        {65519.99609375, 0x7bff}, /* largest f32 below 65520 */
        {65520.0, 0x7c00},        /* the tie overflows to infinity */
        {65536.0, 0x7c00},
        {1e10, 0x7c00},
        {INFINITY, 0x7c00},
        {-INFINITY, 0xfc00},
        {-65520.0, 0xfc00},
        {-65519.0, 0xfbff},
        {0x1p-24, 0x0001}, /* smallest subnormal, exact */
        {0x1p-25, 0x0000}, /* tie to even: zero */
        {1.5 * 0x1p-25, 0x0001},
        {3 * 0x1p-25, 0x0002}, /* tie between 1 and 2 units */
        {5 * 0x1p-25, 0x0002}, /* tie between 2 and 3 units */
        {0x1p-26, 0x0000},
        {-0x1p-25, 0x8000},
        {0x1p-14, 0x0400},               /* smallest normal */
        {0x1p-14 - 0x1p-25, 0x0400},     /* tie between 0x3ff and 0x400 */
        {0x1p-14 - 3 * 0x1p-25, 0x03fe}, /* tie between 0x3fe and 0x3ff */
        {1023 * 0x1p-24, 0x03ff},
        {0.0, 0x0000},
        {-0.0, 0x8000},
        {0x1p-1074, 0x0000}, /* double subnormal */
        {-0x1p-1074, 0x8000},
        {2048.0 + 1.0, 0x6800}, /* tie, spacing 2 at 2048 */
        {2048.0 + 3.0, 0x6802},
        {0.1, 0x2e66},
        {-2.0, 0xc000},
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        double x = cases[k].x;
        CHECK_F16(cx_f16_from_f64(x), cases[k].want, "f16_from_f64", x);
        CHECK_F16(ref_f16(x), cases[k].want, "ref_f16", x);
        if ((double)(float)x == x)
            CHECK_F16(cx_f16_from_f32((float)x), cases[k].want, "f16_from_f32", x);
    }
    /* A double just above a tie whose f32 rounding lands exactly on the tie: rounding through
     * f32 would round twice (to the even, below); f64 -> f16 must round once (up). */
    double d = 1.0 + 0x1p-11 + 0x1p-40;
    assert_true((double)(float)d == 1.0 + 0x1p-11);
    CHECK_F16(cx_f16_from_f32((float)d), 0x3c00, "f16_from_f32", d);
    CHECK_F16(cx_f16_from_f64(d), 0x3c01, "f16_from_f64", d);
    d = 1.0 + 0x1p-11 - 0x1p-40; /* just below: down either way */
    CHECK_F16(cx_f16_from_f64(d), 0x3c00, "f16_from_f64", d);
    d = 65520.0 - 0x1p-30; /* f32 rounds to 65520 (overflow) but the double is below the tie */
    assert_true((float)d == 65520.0f);
    CHECK_F16(cx_f16_from_f64(d), 0x7bff, "f16_from_f64", d);
    d = 0x1p-25 + 0x1p-60; /* subnormal tie just exceeded */
    CHECK_F16(cx_f16_from_f64(d), 0x0001, "f16_from_f64", d);
    /* NaN: quiet NaN of the same sign; the payload need not survive */
    uint16_t n = cx_f16_from_f64(NAN);
    assert_true(f16_is_nan(n) && (n & 0x200));
    n = cx_f16_from_f64(-NAN);
    assert_true(f16_is_nan(n) && (n & 0x8000));
    n = cx_f16_from_f32(cx_f32_from_bits(0x7f800001u)); /* signalling f32 NaN */
    assert_true(f16_is_nan(n));
}

/* Every tie point between neighbouring halves, and the doubles and floats either side of it. */
static void test_f16_all_ties(void **state) {
    (void)state;
    for (unsigned h = 0; h < 0x7c00; h++) {
        double m = (f16_value(h) + f16_value(h + 1)) / 2;
        double near[] = {m, nextafter(m, 0), nextafter(m, INFINITY), m + m * 0x1p-30,
                         m - m * 0x1p-30};
        for (size_t k = 0; k < sizeof near / sizeof near[0]; k++)
            for (int s = 0; s < 2; s++) {
                double x = s ? -near[k] : near[k];
                uint16_t want = ref_f16(x);
                CHECK_F16(cx_f16_from_f64(x), want, "f16_from_f64", x);
            }
        assert_int_equal(ref_f16(m), (h & 1) ? h + 1 : h);
        float mf = (float)m;
        assert_true((double)mf == m);
        float nearf[] = {mf, nextafterf(mf, 0), nextafterf(mf, INFINITY)};
        for (size_t k = 0; k < 3; k++)
            for (int s = 0; s < 2; s++) {
                float x = s ? -nearf[k] : nearf[k];
                CHECK_F16(cx_f16_from_f32(x), ref_f16(x), "f16_from_f32", x);
            }
    }
}

/* A sweep over f32 patterns from below the smallest subnormal half to beyond the largest. */
static void test_f16_from_f32_sweep(void **state) {
    (void)state;
    for (uint32_t u = 0x32000000u; u < 0x48000000u; u += 0x3d1) {
        float f = cx_f32_from_bits(u);
        CHECK_F16(cx_f16_from_f32(f), ref_f16(f), "f16_from_f32", f);
        CHECK_F16(cx_f16_from_f32(-f), ref_f16(-f), "f16_from_f32", -f);
    }
}

static uint64_t lcg_state = 0x9e3779b97f4a7c15ull;
static uint64_t rnd(void) {
    /* xorshift64* */
    lcg_state ^= lcg_state >> 12;
    lcg_state ^= lcg_state << 25;
    lcg_state ^= lcg_state >> 27;
    return lcg_state * 0x2545f4914f6cdd1dull;
}

/* Random doubles in and around the f16 range, checked against both references. */
static void test_f16_random_doubles(void **state) {
    (void)state;
    for (int k = 0; k < 200000; k++) {
        /* exponent in [-28, 17], random 52-bit mantissa, random sign */
        uint64_t r = rnd();
        int e = (int)(r % 46) - 28;
        double x = ldexp(1.0 + (double)(rnd() >> 12) * 0x1p-52, e);
        if (r & (1ull << 40)) x = -x;
        uint16_t want = ref_f16(x);
        CHECK_F16(cx_f16_from_f64(x), want, "f16_from_f64", x);
        if (k < 300) CHECK_F16(ref_f16_linear(x), want, "ref_f16_linear", x);
    }
}

static void test_bf16_rounding_cases(void **state) {
    (void)state;
    static const struct {
        double x;
        uint16_t want;
    } cases[] = {
        {1.0, 0x3f80},
        {1.0 + 0x1p-8, 0x3f80},           /* tie, even below */
        {1.0 + 3 * 0x1p-8, 0x3f82},       /* tie, even above */
        {1.0 + 0x1p-8 + 0x1p-23, 0x3f81}, /* above the tie, exact in f32 */
        {-1.0 - 3 * 0x1p-8, 0xbf82},
        {0x1p127 * (2 - 0x1p-7), 0x7f7f}, /* largest finite bf16 */
        {0x1p127 * (2 - 0x1p-8), 0x7f80}, /* the tie above it overflows */
        {0x1p127 * (2 - 0x1p-8) - 0x1p100, 0x7f7f},
        {3.4028234663852886e38, 0x7f80}, /* FLT_MAX */
        {1e300, 0x7f80},
        {-1e300, 0xff80},
        {INFINITY, 0x7f80},
        {0x1p-133, 0x0001}, /* smallest bf16 subnormal */
        {0x1p-134, 0x0000}, /* tie to even */
        {3 * 0x1p-134, 0x0002},
        {0x1p-149, 0x0000}, /* smallest f32 subnormal */
        {0x1p-160, 0x0000},
        {-0x1p-160, 0x8000},
        {0x1p-126, 0x0080},
        {0.0, 0x0000},
        {-0.0, 0x8000},
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        double x = cases[k].x;
        CHECK_F16(cx_bf16_from_f64(x), cases[k].want, "bf16_from_f64", x);
        CHECK_F16(ref_bf16(x), cases[k].want, "ref_bf16", x);
        if ((double)(float)x == x)
            CHECK_F16(cx_bf16_from_f32((float)x), cases[k].want, "bf16_from_f32", x);
    }
    /* single rounding from f64: the double is above the tie, its f32 rounding is the tie */
    double d = 1.0 + 0x1p-8 + 0x1p-40;
    assert_true((double)(float)d == 1.0 + 0x1p-8);
    CHECK_F16(cx_bf16_from_f32((float)d), 0x3f80, "bf16_from_f32", d);
    CHECK_F16(cx_bf16_from_f64(d), 0x3f81, "bf16_from_f64", d);
    CHECK_F16(cx_bf16_from_f64(-d), 0xbf81, "bf16_from_f64", -d);
    d = 1.0 + 0x1p-8 - 0x1p-40; /* below the tie: f32 rounds up onto it, bf16 must go down */
    assert_true((double)(float)d == 1.0 + 0x1p-8);
    CHECK_F16(cx_bf16_from_f64(d), 0x3f80, "bf16_from_f64", d);
    d = 1.0 + 3 * 0x1p-8 - 0x1p-40; /* below a tie whose even neighbour is above */
    CHECK_F16(cx_bf16_from_f64(d), 0x3f81, "bf16_from_f64", d);
    d = 0x1p-134 + 0x1p-170; /* subnormal tie exceeded far below f32's resolution */
    assert_true((float)d == 0x1p-134f);
    CHECK_F16(cx_bf16_from_f64(d), 0x0001, "bf16_from_f64", d);
    /* NaN quieting: a signalling f32 NaN whose payload is only in the low bits would truncate
     * to infinity without it */
    uint16_t n = cx_bf16_from_f32(cx_f32_from_bits(0x7f800001u));
    assert_int_equal(n, 0x7fc0);
    n = cx_bf16_from_f32(cx_f32_from_bits(0xff800001u));
    assert_int_equal(n, 0xffc0);
    n = cx_bf16_from_f32(cx_f32_from_bits(0x7fa00000u)); /* signalling with a high payload */
    assert_int_equal(n, 0x7fe0);
    n = cx_bf16_from_f32(cx_f32_from_bits(0x7fffffffu)); /* must not carry into the sign */
    assert_int_equal(n, 0x7fff);
    assert_true(bf16_is_nan(cx_bf16_from_f64(NAN)));
    assert_true(bf16_is_nan(cx_bf16_from_f64(-NAN)) && (cx_bf16_from_f64(-NAN) & 0x8000));
}

static void test_bf16_all_ties(void **state) {
    (void)state;
    for (unsigned h = 0; h < 0x7f80; h++) {
        double m = (bf16_value(h) + bf16_value(h + 1)) / 2;
        assert_int_equal(ref_bf16(m), (h & 1) ? h + 1 : h);
        double near[] = {m, nextafter(m, 0), nextafter(m, INFINITY), m + m * 0x1p-30,
                         m - m * 0x1p-30};
        for (size_t k = 0; k < sizeof near / sizeof near[0]; k++)
            for (int s = 0; s < 2; s++) {
                double x = s ? -near[k] : near[k];
                CHECK_F16(cx_bf16_from_f64(x), ref_bf16(x), "bf16_from_f64", x);
            }
        float mf = (float)m;
        assert_true((double)mf == m);
        float nearf[] = {mf, nextafterf(mf, 0), nextafterf(mf, INFINITY)};
        for (size_t k = 0; k < 3; k++)
            for (int s = 0; s < 2; s++) {
                float x = s ? -nearf[k] : nearf[k];
                CHECK_F16(cx_bf16_from_f32(x), ref_bf16(x), "bf16_from_f32", x);
            }
    }
}

static void test_bf16_sweeps(void **state) {
    (void)state;
    /* f32 patterns over the whole finite range and infinities */
    for (uint64_t u = 0; u <= 0x7f800000u; u += 0x1f3d) {
        float f = cx_f32_from_bits((uint32_t)u);
        CHECK_F16(cx_bf16_from_f32(f), ref_bf16(f), "bf16_from_f32", f);
        CHECK_F16(cx_bf16_from_f32(-f), ref_bf16(-f), "bf16_from_f32", -f);
    }
    /* random doubles: exponents over and beyond the f32 range, including f32 subnormals */
    for (int k = 0; k < 200000; k++) {
        uint64_t r = rnd();
        int e = (int)(r % 300) - 160;
        double x = ldexp(1.0 + (double)(rnd() >> 12) * 0x1p-52, e);
        if (r & (1ull << 40)) x = -x;
        CHECK_F16(cx_bf16_from_f64(x), ref_bf16(x), "bf16_from_f64", x);
    }
}

/* ---------------------------------------------------------------------------------------------
 * Inference, through cx_plan_op. */

static void test_plan_bad_calls(void **state) {
    (void)state;
    cx_params ps = {0};
    cx_plan pl;
    cx_status st;
    cx_tensor *x = T(CX_F32, 2);
    assert_int_equal(plan_n((cx_op_id)CX_OP_COUNT, IN(x), 1, &ps, &pl, &st), CX_EINVAL);
    assert_non_null(strstr(st.message, "unknown op id"));
    assert_int_equal(plan_n((cx_op_id)-1, IN(x), 1, &ps, &pl, &st), CX_EINVAL);
    assert_non_null(strstr(st.message, "unknown op id -1"));
    assert_int_equal(plan_n((cx_op_id)1000000, IN(x), 1, &ps, &pl, &st), CX_EINVAL);
    /* too many inputs: refused before any of them is read */
    fail_n(CX_OP_CONCATENATE, &ps, NULL, CX_MAX_INPUTS + 1, WORDS("at most 256", "257"));
    fail_n(CX_OP_ADD, &ps, NULL, -1, WORDS("at most 256", "-1"));
    fail_n(CX_OP_ADD, &ps, NULL, 1 << 30, WORDS("at most 256"));
    /* creation with no device */
    memset(&st, 0, sizeof st);
    PUT(ps, SHAPE, 2);
    assert_int_equal(cx_plan_op(CX_OP_IOTA, NULL, NULL, 0, &ps, &pl, &st), CX_EINVAL);
    assert_non_null(strstr(st.message, "no device"));
    /* every op with a fixed arity refuses one tensor too many and one too few */
    for (int op = 0; op < CX_OP_COUNT; op++) {
        int n = cx_op_tensor_arity((cx_op_id)op);
        if (n < 0) continue;
        cx_tensor *many[8] = {x, x, x, x, x, x, x, x}; /* batch_norm takes 5 */
        cx_params empty = {0};
        fail_n((cx_op_id)op, &empty, many, n + 1, WORDS("expects", "got: "));
        if (n > 0) fail_n((cx_op_id)op, &empty, many, n - 1, WORDS("expects", "got: "));
    }
}

static void test_infer_unary(void **state) {
    (void)state;
    cx_plan pl;
    cx_params ps = {0};
    PLAN_OK(pl, NEGATE, ps, T(CX_S32, 2, 3));
    OUT(pl, CX_S32, 2, 3);
    assert_int_equal(pl.compute[0], CX_S32);
    PLAN_OK(pl, FLOOR, ps, T(CX_BF16, 0, 4));
    OUT(pl, CX_BF16, 0, 4);
    PLAN_OK(pl, EXP, ps, T(CX_S32, 2));
    OUT(pl, CX_F32, 2);
    assert_int_equal(pl.compute[0], CX_F32);
    PLAN_OK(pl, SQRT, ps, T(CX_U8, 1));
    OUT(pl, CX_F32, 1);
    PLAN_OK(pl, LOG, ps, T0(CX_F16));
    OUT0(pl, CX_F16);
    assert_int_equal(pl.compute[0], CX_F16);
    PLAN_OK(pl, TANH, ps, T(CX_F64, 3));
    OUT(pl, CX_F64, 3);
    PLAN_OK(pl, LOGICAL_NOT, ps, T(CX_F32, 3));
    OUT(pl, CX_U8, 3);
    assert_int_equal(pl.compute[0], CX_F32);
    FAILS(NEGATE, ps, (T(CX_S32, 2), T(CX_S32, 2)), "expects 1", "got: 2");
}

static void test_infer_binary(void **state) {
    (void)state;
    cx_plan pl;
    cx_params ps = {0};
    PLAN_OK(pl, ADD, ps, T(CX_U8, 3, 1, 5), T(CX_S32, 4, 1));
    OUT(pl, CX_S32, 3, 4, 5);
    assert_int_equal(pl.compute[0], CX_S32);
    assert_int_equal(pl.compute[1], CX_S32);
    PLAN_OK(pl, MULTIPLY, ps, T0(CX_F16), T(CX_BF16, 2));
    OUT(pl, CX_F32, 2);
    PLAN_OK(pl, DIVIDE, ps, T(CX_S32, 2), T(CX_S32, 2));
    OUT(pl, CX_F32, 2);
    assert_int_equal(pl.compute[0], CX_F32);
    PLAN_OK(pl, ATAN2, ps, T(CX_F64, 2), T(CX_S64, 1));
    OUT(pl, CX_F64, 2);
    PLAN_OK(pl, LESS, ps, T(CX_F16, 2), T(CX_BF16, 2));
    OUT(pl, CX_U8, 2);
    assert_int_equal(pl.compute[0], CX_F32);
    assert_int_equal(pl.compute[1], CX_F32);
    PLAN_OK(pl, EQUAL, ps, T(CX_S64, 0, 3), T(CX_U8, 1, 3));
    OUT(pl, CX_U8, 0, 3);
    PLAN_OK(pl, LOGICAL_AND, ps, T(CX_F32, 2, 1), T(CX_S32, 3));
    OUT(pl, CX_U8, 2, 3);
    assert_int_equal(pl.compute[0], CX_F32);
    assert_int_equal(pl.compute[1], CX_F32);
    PLAN_OK(pl, POW, ps, T0(CX_S32), T0(CX_S64));
    OUT0(pl, CX_S64);
    FAILS(ADD, ps, (T(CX_F32, 2, 3), T(CX_F32, 4)), "cannot broadcast", "{2, 3}", "{4}", "3 vs 4");
    FAILS(ADD, ps, (T(CX_F32, 2), T(CX_F32, 0)), "cannot broadcast", "{2}", "{0}");
    FAILS(LOGICAL_XOR, ps, (T(CX_U8, 3), T(CX_U8, 2)), "cannot broadcast");
    FAILS(GREATER, ps, (T(CX_U8, 3, 2), T(CX_U8, 3, 3)), "cannot broadcast");
    FAILS(ADD, ps, (T(CX_S32, 2)), "expects 2", "got: 1");
}

/* Broadcasting small inputs must not produce a result above the 2^48-element limit. */
static void test_infer_broadcast_limit(void **state) {
    (void)state;
    cx_params ps = {0};
    int64_t big = INT64_C(1) << 25, mid = INT64_C(1) << 24;
    FAILS(ADD, ps, (FAKE(CX_U8, big, 1), FAKE(CX_U8, 1, mid)), "2^48");
    FAILS(LOGICAL_OR, ps, (FAKE(CX_U8, big, 1), FAKE(CX_U8, 1, mid)), "2^48");
    int64_t e = INT64_C(1) << 21;
    /* three inputs: 2^63 elements would overflow int64 in every size computation */
    FAILS(SELECT, ps, (FAKE(CX_U8, e, 1, 1), FAKE(CX_F64, 1, e, 1), FAKE(CX_F64, 1, 1, e)), "2^48");
    cx_plan pl;
    PLAN_OK(pl, ADD, ps, FAKE(CX_U8, mid, 1), FAKE(CX_U8, 1, mid)); /* exactly 2^48 */
    OUT(pl, CX_U8, mid, mid);
}

static void test_infer_select_clip(void **state) {
    (void)state;
    cx_plan pl;
    cx_params ps = {0};
    PLAN_OK(pl, SELECT, ps, T(CX_U8, 3), T(CX_S32, 2, 1), T0(CX_F32));
    OUT(pl, CX_F32, 2, 3);
    assert_int_equal(pl.compute[0], CX_U8);
    assert_int_equal(pl.compute[1], CX_F32);
    assert_int_equal(pl.compute[2], CX_F32);
    PLAN_OK(pl, SELECT, ps, T(CX_F64, 2, 1), T(CX_S32, 1), T(CX_U8, 4));
    OUT(pl, CX_S32, 2, 4);
    assert_int_equal(pl.compute[0], CX_F64);
    FAILS(SELECT, ps, (T(CX_U8, 3), T(CX_S32, 2), T(CX_S32, 1)), "cannot broadcast");
    FAILS(SELECT, ps, (T(CX_U8, 3), T(CX_S32, 3), T(CX_S32, 2)), "cannot broadcast");
    PLAN_OK(pl, CLIP, ps, T(CX_S32, 2, 3), T0(CX_F32), T(CX_S32, 3));
    OUT(pl, CX_F32, 2, 3);
    for (int k = 0; k < 3; k++) assert_int_equal(pl.compute[k], CX_F32);
    PLAN_OK(pl, CLIP, ps, T(CX_U8, 2), T0(CX_U8), T0(CX_S64));
    OUT(pl, CX_S64, 2);
    FAILS(CLIP, ps, (T(CX_S32, 3), T(CX_S32, 2, 3), T0(CX_S32)), "min", "broadcast to the shape",
          "{3}", "{2, 3}");
    FAILS(CLIP, ps, (T(CX_S32, 2, 3), T0(CX_S32), T(CX_S32, 4, 2, 3)), "max", "{4, 2, 3}");
    FAILS(CLIP, ps, (T(CX_S32, 2, 3), T(CX_S32, 2), T0(CX_S32)), "cannot broadcast");
}

static void test_infer_as_type(void **state) {
    (void)state;
    cx_plan pl;
    cx_params ps = {0};
    FAILS(AS_TYPE, ps, (T(CX_S32, 2)), "type parameter is required");
    cx_param_put_int(&ps, CX_P_TYPE, CX_F16);
    PLAN_OK(pl, AS_TYPE, ps, T(CX_S32, 2, 2));
    OUT(pl, CX_F16, 2, 2);
    assert_int_equal(pl.compute[0], CX_S32);
    int64_t bad[] = {-1, CX_DTYPE_COUNT, 99, INT64_C(1) << 32, INT64_MIN};
    for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++) {
        cx_param_put_int(&ps, CX_P_TYPE, bad[k]);
        FAILS(AS_TYPE, ps, (T(CX_S32, 2)), "unknown type code");
    }
}

static void test_infer_reduce(void **state) {
    (void)state;
    cx_plan pl;
    cx_params ps = {0};
    cx_tensor *x = T(CX_S32, 2, 3, 4);
    PUT(ps, AXES, -1, 0);
    PLAN_OK(pl, SUM, ps, x);
    OUT(pl, CX_S64, 3);
    INTS(ps, AXES, 0, 2); /* normalised and sorted */
    assert_int_equal(pl.compute[0], CX_S32);
    assert_true(cx_param_has(&ps, CX_P_KEEP_AXES));
    assert_int_equal(ps.p[CX_P_KEEP_AXES].i[0], 0);
    cx_param_put_int(&ps, CX_P_KEEP_AXES, 1);
    PUT(ps, AXES, 2, 0);
    PLAN_OK(pl, PRODUCT, ps, x);
    OUT(pl, CX_S64, 1, 3, 1);
    ps = (cx_params){0};
    PLAN_OK(pl, SUM, ps, x);
    OUT0(pl, CX_S64);
    INTS(ps, AXES, 0, 1, 2);
    ps = (cx_params){0};
    PLAN_OK(pl, SUM, ps, T(CX_F16, 2, 3));
    OUT0(pl, CX_F16);
    ps = (cx_params){0};
    PLAN_OK(pl, REDUCE_MAX, ps, T(CX_U8, 2));
    OUT0(pl, CX_U8);
    ps = (cx_params){0};
    PUT(ps, AXES, 1);
    PLAN_OK(pl, REDUCE_MIN, ps, T(CX_BF16, 2, 0));
    OUT(pl, CX_BF16, 2);
    PLAN_OK(pl, ALL, ps, T(CX_F32, 2, 3));
    OUT(pl, CX_U8, 2);
    assert_int_equal(pl.compute[0], CX_F32);
    PLAN_OK(pl, ANY, ps, T(CX_S64, 5, 1));
    OUT(pl, CX_U8, 5);
    ps = (cx_params){0};
    PLAN_OK(pl, SUM, ps, T0(CX_S32));
    OUT0(pl, CX_S64);
    PUT(ps, AXES, 3);
    FAILS(SUM, ps, (x), "expected an axis in -3..2", "rank 3", "got: 3");
    PUT(ps, AXES, -4);
    FAILS(SUM, ps, (x), "axis", "got: -4");
    PUT(ps, AXES, 0, -3);
    FAILS(SUM, ps, (x), "axis 0 is given more than once");
    PUT(ps, AXES, 0, 1, 2, 0);
    FAILS(SUM, ps, (x), "at most 3 axes", "[0, 1, 2, 0]");
    PUT(ps, AXES, 0);
    FAILS(SUM, ps, (T0(CX_S32)), "at most 0 axes", "rank 0");
}

static void test_infer_argreduce(void **state) {
    (void)state;
    cx_plan pl;
    cx_params ps = {0};
    cx_tensor *x = T(CX_F32, 2, 3);
    cx_param_put_int(&ps, CX_P_AXIS, -1);
    PLAN_OK(pl, ARGMAX, ps, x);
    OUT(pl, CX_S64, 2);
    assert_int_equal(ps.p[CX_P_AXIS].i[0], 1);
    assert_int_equal(ps.p[CX_P_TIE_BREAK].i[0], 0); /* default filled */
    assert_int_equal(ps.p[CX_P_KEEP_AXIS].i[0], 0);
    assert_int_equal(pl.compute[0], CX_F32);
    cx_param_put_int(&ps, CX_P_KEEP_AXIS, 1);
    cx_param_put_int(&ps, CX_P_TIE_BREAK, 1);
    PLAN_OK(pl, ARGMIN, ps, x);
    OUT(pl, CX_S64, 2, 1);
    assert_int_equal(ps.p[CX_P_TIE_BREAK].i[0], 1);
    ps = (cx_params){0};
    PLAN_OK(pl, ARGMAX, ps, x);
    OUT0(pl, CX_S64);
    cx_param_put_int(&ps, CX_P_KEEP_AXIS, 1);
    PLAN_OK(pl, ARGMAX, ps, x);
    OUT(pl, CX_S64, 1, 1);
    ps = (cx_params){0};
    PLAN_OK(pl, ARGMIN, ps, T0(CX_U8));
    OUT0(pl, CX_S64);
    int64_t ties[] = {2, -1, INT64_MAX, INT64_MIN};
    for (size_t k = 0; k < sizeof ties / sizeof ties[0]; k++) {
        ps = (cx_params){0};
        cx_param_put_int(&ps, CX_P_TIE_BREAK, ties[k]);
        char got[40];
        snprintf(got, sizeof got, "got: %lld", (long long)ties[k]);
        FAILS(ARGMAX, ps, (x), "tie_break", got);
    }
    ps = (cx_params){0};
    cx_param_put_int(&ps, CX_P_AXIS, 2);
    FAILS(ARGMAX, ps, (x), "expected an axis in -2..1", "got: 2");
    cx_param_put_int(&ps, CX_P_AXIS, 0);
    FAILS(ARGMIN, ps, (T0(CX_F32)), "rank 0");
    ps = (cx_params){0};
    FAILS(ARGMAX, ps, (T(CX_F32, 0, 3)), "empty axis", "{0, 3}");
    /* along a non-empty axis of an empty tensor the result is empty too, as in Nx */
    cx_param_put_int(&ps, CX_P_AXIS, 1);
    const cx_tensor *ein[1] = {T(CX_F32, 0, 3)};
    cx_status est = {0};
    assert_int_equal(cx_plan_op(CX_OP_ARGMAX, NULL, ein, 1, &ps, &pl, &est), CX_OK);
    assert_int_equal(pl.out.rank, 1);
    assert_int_equal(pl.out.shape[0], 0);
    /* along the empty axis with something to answer, there is no answer */
    cx_param_put_int(&ps, CX_P_AXIS, 0);
    FAILS(ARGMAX, ps, (T(CX_F32, 0, 3)), "empty axis", "{0, 3}");
}

static void test_infer_reshape(void **state) {
    (void)state;
    cx_plan pl;
    cx_params ps = {0};
    cx_tensor *x = T(CX_S32, 2, 3);
    FAILS(RESHAPE, ps, (x), "shape parameter is required");
    PUT(ps, SHAPE, 3, 2);
    PLAN_OK(pl, RESHAPE, ps, x);
    OUT(pl, CX_S32, 3, 2);
    PUT(ps, SHAPE, 6, 1, 1);
    PLAN_OK(pl, RESHAPE, ps, x);
    OUT(pl, CX_S32, 6, 1, 1);
    cx_param_put_ints(&ps, CX_P_SHAPE, NULL, 0);
    PLAN_OK(pl, RESHAPE, ps, T(CX_F64, 1, 1));
    OUT0(pl, CX_F64);
    PUT(ps, SHAPE, 0, 5);
    PLAN_OK(pl, RESHAPE, ps, T(CX_U8, 5, 0));
    OUT(pl, CX_U8, 0, 5);
    PUT(ps, SHAPE, 4, 2);
    FAILS(RESHAPE, ps, (x), "cannot reshape", "{2, 3}", "6 elements", "{4, 2}", "8 elements");
    PUT(ps, SHAPE, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 6);
    FAILS(RESHAPE, ps, (x), "rank between 0 and 16", "got: 17");
    PUT(ps, SHAPE, INT64_C(1) << 24, INT64_C(1) << 24, 2);
    FAILS(RESHAPE, ps, (x), "2^48");
    PUT(ps, SHAPE, INT64_C(1) << 40, INT64_C(1) << 40, 0); /* a zero last does not excuse it */
    FAILS(RESHAPE, ps, (x), "2^48");
    PUT(ps, SHAPE, INT64_MAX, INT64_MAX);
    FAILS(RESHAPE, ps, (x), "2^48");
    PUT(ps, SHAPE, 0, INT64_C(1) << 25, INT64_C(1) << 25);
    FAILS(RESHAPE, ps, (T(CX_U8, 0)), "2^48");
    PUT(ps, SHAPE, -2, -3);
    FAILS(RESHAPE, ps, (x), "non-negative", "{-2, -3}");
    PUT(ps, SHAPE, 2, 3);
    FAILS(RESHAPE, ps, (x, x), "expects 1");
}

static void test_infer_transpose(void **state) {
    (void)state;
    cx_plan pl;
    cx_params ps = {0};
    cx_tensor *x = T(CX_F32, 2, 3, 4);
    PLAN_OK(pl, TRANSPOSE, ps, x);
    OUT(pl, CX_F32, 4, 3, 2);
    INTS(ps, AXES, 2, 1, 0);
    PUT(ps, AXES, 1, 0, 2);
    PLAN_OK(pl, TRANSPOSE, ps, x);
    OUT(pl, CX_F32, 3, 2, 4);
    PUT(ps, AXES, -1, 0, 1);
    PLAN_OK(pl, TRANSPOSE, ps, x);
    OUT(pl, CX_F32, 4, 2, 3);
    INTS(ps, AXES, 2, 0, 1); /* normalised, order kept */
    ps = (cx_params){0};
    PLAN_OK(pl, TRANSPOSE, ps, T0(CX_S64));
    OUT0(pl, CX_S64);
    PUT(ps, AXES, 1, 0);
    FAILS(TRANSPOSE, ps, (x), "expected 3 axes", "{2, 3, 4}", "got: [1, 0]");
    PUT(ps, AXES, 0, 1, 2, 0);
    FAILS(TRANSPOSE, ps, (x), "expected 3 axes");
    PUT(ps, AXES, 0, 0, 1);
    FAILS(TRANSPOSE, ps, (x), "more than once");
    PUT(ps, AXES, 0, 1, 5);
    FAILS(TRANSPOSE, ps, (x), "axis in -3..2", "got: 5");
}

static void test_infer_broadcast(void **state) {
    (void)state;
    cx_plan pl;
    cx_params ps = {0};
    FAILS(BROADCAST, ps, (T(CX_S32, 3)), "shape parameter is required");
    PUT(ps, SHAPE, 2, 3);
    PLAN_OK(pl, BROADCAST, ps, T(CX_S32, 3));
    OUT(pl, CX_S32, 2, 3);
    INTS(ps, AXES, 1);
    ps = (cx_params){0};
    PUT(ps, SHAPE, 2, 3, 4);
    PUT(ps, AXES, 1, 2);
    PLAN_OK(pl, BROADCAST, ps, T(CX_U8, 3, 1));
    OUT(pl, CX_U8, 2, 3, 4);
    PUT(ps, AXES, 0, -2);
    PLAN_OK(pl, BROADCAST, ps, T(CX_U8, 2, 3));
    OUT(pl, CX_U8, 2, 3, 4);
    INTS(ps, AXES, 0, 1);
    ps = (cx_params){0};
    PUT(ps, SHAPE, 5, 0);
    PLAN_OK(pl, BROADCAST, ps, T0(CX_F16));
    OUT(pl, CX_F16, 5, 0);
    PUT(ps, SHAPE, 3);
    FAILS(BROADCAST, ps, (T(CX_S32, 2, 3)), "smaller rank", "{2, 3}", "{3}");
    ps = (cx_params){0};
    PUT(ps, SHAPE, 2, 4);
    FAILS(BROADCAST, ps, (T(CX_S32, 3)), "cannot broadcast {3} to {2, 4}", "size 3", "size 4");
    ps = (cx_params){0};
    PUT(ps, SHAPE, 2, 3, 4);
    PUT(ps, AXES, 0);
    FAILS(BROADCAST, ps, (T(CX_S32, 3, 1)), "expected 2 axes", "got: [0]");
    PUT(ps, AXES, 2, 1);
    FAILS(BROADCAST, ps, (T(CX_S32, 4, 3)), "increasing", "[2, 1]");
    PUT(ps, AXES, 1, 1);
    FAILS(BROADCAST, ps, (T(CX_S32, 3, 3)), "more than once");
    PUT(ps, AXES, 1, 3);
    FAILS(BROADCAST, ps, (T(CX_S32, 3, 4)), "axis in -3..2", "got: 3");
    ps = (cx_params){0};
    PUT(ps, SHAPE, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1);
    FAILS(BROADCAST, ps, (T(CX_S32, 1)), "rank between 0 and 16", "got: 17");
    PUT(ps, SHAPE, INT64_C(1) << 30, INT64_C(1) << 30);
    FAILS(BROADCAST, ps, (T(CX_S32, 1)), "2^48");
}

static void test_infer_squeeze_reverse(void **state) {
    (void)state;
    cx_plan pl;
    cx_params ps = {0};
    cx_tensor *x = T(CX_F64, 1, 3, 1);
    PLAN_OK(pl, SQUEEZE, ps, x);
    OUT(pl, CX_F64, 3);
    INTS(ps, AXES, 0, 2);
    PUT(ps, AXES, -1);
    PLAN_OK(pl, SQUEEZE, ps, x);
    OUT(pl, CX_F64, 1, 3);
    PUT(ps, AXES, 2, 0);
    PLAN_OK(pl, SQUEEZE, ps, x);
    OUT(pl, CX_F64, 3);
    INTS(ps, AXES, 0, 2);
    PUT(ps, AXES, 1);
    FAILS(SQUEEZE, ps, (x), "cannot squeeze axis 1", "{1, 3, 1}", "size is 3, not 1");
    PUT(ps, AXES, 3);
    FAILS(SQUEEZE, ps, (x), "axis in -3..2");
    PUT(ps, AXES, 0, 0);
    FAILS(SQUEEZE, ps, (x), "more than once");
    ps = (cx_params){0};
    PLAN_OK(pl, SQUEEZE, ps, T(CX_U8, 2, 3));
    OUT(pl, CX_U8, 2, 3);

    ps = (cx_params){0};
    PLAN_OK(pl, REVERSE, ps, T(CX_BF16, 2, 3));
    OUT(pl, CX_BF16, 2, 3);
    INTS(ps, AXES, 0, 1);
    PUT(ps, AXES, -1);
    PLAN_OK(pl, REVERSE, ps, T(CX_BF16, 2, 3));
    INTS(ps, AXES, 1);
    PUT(ps, AXES, 2);
    FAILS(REVERSE, ps, (T(CX_BF16, 2, 3)), "axis in -2..1", "got: 2");
    PUT(ps, AXES, 1, -1);
    FAILS(REVERSE, ps, (T(CX_BF16, 2, 3)), "more than once");
}

static void test_infer_slice(void **state) {
    (void)state;
    cx_plan pl;
    cx_params ps = {0};
    cx_tensor *x = T(CX_S64, 5, 6);
    FAILS(SLICE, ps, (x), "start parameter is required");
    PUT(ps, START, 1, 2);
    FAILS(SLICE, ps, (x), "lengths parameter is required");
    PUT(ps, LENGTHS, 3, 4);
    PLAN_OK(pl, SLICE, ps, x);
    OUT(pl, CX_S64, 3, 4);
    INTS(ps, STRIDES, 1, 1); /* default */
    INTS(ps, START, 1, 2);
    PUT(ps, STRIDES, 2, 3);
    PLAN_OK(pl, SLICE, ps, x);
    OUT(pl, CX_S64, 2, 2);
    PUT(ps, LENGTHS, 5, 6);
    PUT(ps, STRIDES, 4, 7);
    PUT(ps, START, 0, 0);
    PLAN_OK(pl, SLICE, ps, x);
    OUT(pl, CX_S64, 2, 1);
    /* starts are clipped so that the slice fits, and normalised in the params */
    ps = (cx_params){0};
    PUT(ps, START, 4, -3);
    PUT(ps, LENGTHS, 3, 4);
    PLAN_OK(pl, SLICE, ps, x);
    OUT(pl, CX_S64, 3, 4);
    INTS(ps, START, 2, 0);
    PUT(ps, START, INT64_MAX, INT64_MIN);
    PLAN_OK(pl, SLICE, ps, x);
    INTS(ps, START, 2, 0);
    PUT(ps, START, 5, 6);
    PUT(ps, LENGTHS, 0, 0);
    PLAN_OK(pl, SLICE, ps, x);
    OUT(pl, CX_S64, 0, 0);
    INTS(ps, START, 5, 6);
    ps = (cx_params){0};
    PUT(ps, START, 0, 0);
    PUT(ps, LENGTHS, 6, 4);
    FAILS(SLICE, ps, (x), "length 6 of axis 0", "0..5", "{5, 6}");
    PUT(ps, LENGTHS, 2, -1);
    FAILS(SLICE, ps, (x), "length -1 of axis 1", "0..6");
    PUT(ps, LENGTHS, 2, 2);
    PUT(ps, STRIDES, 1, 0);
    FAILS(SLICE, ps, (x), "strides to be positive", "[1, 0]");
    PUT(ps, STRIDES, -1, 1);
    FAILS(SLICE, ps, (x), "strides to be positive", "[-1, 1]");
    PUT(ps, STRIDES, 1);
    FAILS(SLICE, ps, (x), "strides to have 2 entries", "[1]");
    ps = (cx_params){0};
    PUT(ps, START, 0);
    PUT(ps, LENGTHS, 1, 1);
    FAILS(SLICE, ps, (x), "start to have 2 entries", "got: [0]");
    PUT(ps, START, 0, 0);
    PUT(ps, LENGTHS, 1, 1, 1);
    FAILS(SLICE, ps, (x), "lengths to have 2 entries", "got: [1, 1, 1]");
    ps = (cx_params){0};
    cx_param_put_ints(&ps, CX_P_START, NULL, 0);
    cx_param_put_ints(&ps, CX_P_LENGTHS, NULL, 0);
    PLAN_OK(pl, SLICE, ps, T0(CX_U8));
    OUT0(pl, CX_U8);
}

static void test_infer_put_slice(void **state) {
    (void)state;
    cx_plan pl;
    cx_params ps = {0};
    cx_tensor *x = T(CX_S32, 5, 6);
    FAILS(PUT_SLICE, ps, (x, T(CX_S32, 2, 3)), "start parameter is required");
    PUT(ps, START, 1, 2);
    PLAN_OK(pl, PUT_SLICE, ps, x, T(CX_S32, 2, 3));
    OUT(pl, CX_S32, 5, 6);
    INTS(ps, START, 1, 2);
    PUT(ps, START, 4, 5);
    PLAN_OK(pl, PUT_SLICE, ps, x, T(CX_F32, 2, 3));
    OUT(pl, CX_F32, 5, 6);
    assert_int_equal(pl.compute[0], CX_F32);
    assert_int_equal(pl.compute[1], CX_F32);
    INTS(ps, START, 3, 3);
    PUT(ps, START, -7, INT64_MAX);
    PLAN_OK(pl, PUT_SLICE, ps, x, T(CX_U8, 5, 0));
    OUT(pl, CX_S32, 5, 6);
    INTS(ps, START, 0, 6);
    PUT(ps, START, 0, 0);
    FAILS(PUT_SLICE, ps, (x, T(CX_S32, 6, 1)), "slice {6, 1} does not fit in {5, 6}");
    FAILS(PUT_SLICE, ps, (x, T(CX_S32, 3)), "rank", "{5, 6}", "{3}");
    PUT(ps, START, 0);
    FAILS(PUT_SLICE, ps, (x, T(CX_S32, 1, 1)), "start to have 2 entries");
}

static void test_infer_pad(void **state) {
    (void)state;
    cx_plan pl;
    cx_params ps = {0};
    cx_tensor *x = T(CX_S32, 3);
    PUT(ps, PADS, 1, 2, 1);
    FAILS(PAD, ps, (x), "value parameter is required");
    ps = (cx_params){0};
    cx_param_put_int(&ps, CX_P_VALUE, 0);
    FAILS(PAD, ps, (x), "pads parameter is required");
    PUT(ps, PADS, 1, 2, 1);
    PLAN_OK(pl, PAD, ps, x);
    OUT(pl, CX_S32, 8);
    assert_int_equal(pl.compute[0], CX_S32);
    cx_param_put_float(&ps, CX_P_VALUE, 0.5);
    PLAN_OK(pl, PAD, ps, x);
    OUT(pl, CX_F32, 8);
    assert_int_equal(pl.compute[0], CX_F32);
    PLAN_OK(pl, PAD, ps, T(CX_F16, 3));
    OUT(pl, CX_F16, 8);
    cx_param_put_int(&ps, CX_P_VALUE, 7);
    PUT(ps, PADS, -1, -1, 0, 0, 0, 2);
    PLAN_OK(pl, PAD, ps, T(CX_U8, 3, 4));
    OUT(pl, CX_U8, 1, 10);
    PUT(ps, PADS, -3, 0, 0);
    PLAN_OK(pl, PAD, ps, x);
    OUT(pl, CX_S32, 0);
    PUT(ps, PADS, 2, 3, 5);
    PLAN_OK(pl, PAD, ps, T(CX_S32, 0));
    OUT(pl, CX_S32, 5);
    PUT(ps, PADS, -3, -1, 0);
    FAILS(PAD, ps, (x), "padding {-3, -1, 0}", "axis 0", "{3}", "size of -1");
    PUT(ps, PADS, 0, 0, -1);
    FAILS(PAD, ps, (x), "interior padding", "{0, 0, -1}");
    PUT(ps, PADS, INT64_MIN, 0, 0);
    FAILS(PAD, ps, (x), "within", "axis 0");
    PUT(ps, PADS, 0, INT64_MAX, 0);
    FAILS(PAD, ps, (x), "within", "axis 0");
    PUT(ps, PADS, 1, 2);
    FAILS(PAD, ps, (x), "expected 1 {low, high, interior} entries", "{3}");
    PUT(ps, PADS, 0, 0, 0, 0, 0, 0);
    FAILS(PAD, ps, (x), "expected 1");
    /* the element limit over all axes */
    PUT(ps, PADS, 0, INT64_C(1) << 47, 0, 0, INT64_C(1) << 47, 0);
    FAILS(PAD, ps, (T(CX_U8, 2, 2)), "2^48");
    /* interior growth: d + (d - 1) * interior must not overflow int64 */
    PUT(ps, PADS, 0, 0, INT64_C(1) << 48);
    FAILS(PAD, ps, (T(CX_U8, 3)), "interior padding", "2^48");
    FAILS(PAD, ps, (FAKE(CX_U8, 65537)), "interior padding", "2^48", "{65537}");
    FAILS(PAD, ps, (FAKE(CX_U8, INT64_C(1) << 40)), "interior padding", "2^48");
    PUT(ps, PADS, 0, 0, INT64_C(1) << 30);
    FAILS(PAD, ps, (FAKE(CX_U8, INT64_C(1) << 20)), "interior padding", "2^48");
    PUT(ps, PADS, 0, 0, INT64_C(1) << 28); /* 2^20 + (2^20 - 1) * 2^28 fits */
    PLAN_OK(pl, PAD, ps, FAKE(CX_U8, INT64_C(1) << 20));
    OUT(pl, CX_U8, (INT64_C(1) << 20) + ((INT64_C(1) << 20) - 1) * (INT64_C(1) << 28));
    PUT(ps, PADS, 0, 0, INT64_C(1) << 47);
    PLAN_OK(pl, PAD, ps, T(CX_U8, 2)); /* 2^47 + 2 */
    OUT(pl, CX_U8, (INT64_C(1) << 47) + 2);
}

static void test_infer_concatenate(void **state) {
    (void)state;
    cx_plan pl;
    cx_params ps = {0};
    PLAN_OK(pl, CONCATENATE, ps, T(CX_S32, 2, 3), T(CX_F32, 4, 3), T(CX_U8, 0, 3));
    OUT(pl, CX_F32, 6, 3);
    for (int k = 0; k < 3; k++) assert_int_equal(pl.compute[k], CX_F32);
    assert_int_equal(ps.p[CX_P_AXIS].i[0], 0);
    cx_param_put_int(&ps, CX_P_AXIS, -1);
    PLAN_OK(pl, CONCATENATE, ps, T(CX_S32, 2, 3), T(CX_S64, 2, 5));
    OUT(pl, CX_S64, 2, 8);
    assert_int_equal(ps.p[CX_P_AXIS].i[0], 1);
    PLAN_OK(pl, CONCATENATE, ps, T(CX_BF16, 2, 3));
    OUT(pl, CX_BF16, 2, 3);
    cx_param_put_int(&ps, CX_P_AXIS, 1);
    FAILS(CONCATENATE, ps, (T(CX_S32, 2, 3), T(CX_S32, 3, 3)),
          "expected all shapes to match {2, 3} except on axis 1, got: {3, 3}");
    FAILS(CONCATENATE, ps, (T(CX_S32, 2, 3), T(CX_S32, 2, 3, 1)), "got: {2, 3, 1}");
    FAILS(CONCATENATE, ps, (T(CX_S32, 2, 3), T(CX_S32, 2)), "got: {2}");
    cx_param_put_int(&ps, CX_P_AXIS, 2);
    FAILS(CONCATENATE, ps, (T(CX_S32, 2, 3), T(CX_S32, 2, 3)), "axis in -2..1", "got: 2");
    ps = (cx_params){0};
    FAILS(CONCATENATE, ps, (T0(CX_S32), T0(CX_S32)), "axis", "rank 0");
    fail_n(CX_OP_CONCATENATE, &ps, NULL, 0, WORDS("non-empty list"));
    /* the most inputs allowed, and the size limit over them */
    cx_tensor *many[CX_MAX_INPUTS + 1];
    cx_tensor *one = T(CX_S32, 1, 2);
    for (int k = 0; k <= CX_MAX_INPUTS; k++) many[k] = one;
    many[CX_MAX_INPUTS - 1] = T(CX_F64, 3, 2);
    plan_ok_n(&pl, CX_OP_CONCATENATE, &ps, many, CX_MAX_INPUTS);
    OUT(pl, CX_F64, CX_MAX_INPUTS + 2, 2);
    for (int k = 0; k < CX_MAX_INPUTS; k++) assert_int_equal(pl.compute[k], CX_F64);
    fail_n(CX_OP_CONCATENATE, &ps, many, CX_MAX_INPUTS + 1, WORDS("at most 256", "257"));
    cx_tensor *big = FAKE(CX_U8, INT64_C(1) << 41, 1);
    for (int k = 0; k < CX_MAX_INPUTS; k++) many[k] = big;
    fail_n(CX_OP_CONCATENATE, &ps, many, CX_MAX_INPUTS, WORDS("2^48"));
}

static void test_infer_take_gather(void **state) {
    (void)state;
    cx_plan pl;
    cx_params ps = {0};
    cx_tensor *x = T(CX_F32, 4, 5);
    PLAN_OK(pl, TAKE, ps, x, T(CX_S32, 2, 3));
    OUT(pl, CX_F32, 2, 3, 5);
    assert_int_equal(pl.compute[0], CX_F32);
    assert_int_equal(pl.compute[1], CX_S64);
    assert_int_equal(ps.p[CX_P_AXIS].i[0], 0);
    cx_param_put_int(&ps, CX_P_AXIS, -1);
    PLAN_OK(pl, TAKE, ps, x, T(CX_U8, 2, 3));
    OUT(pl, CX_F32, 4, 2, 3);
    assert_int_equal(ps.p[CX_P_AXIS].i[0], 1);
    PLAN_OK(pl, TAKE, ps, x, T0(CX_S64));
    OUT(pl, CX_F32, 4);
    PLAN_OK(pl, TAKE, ps, T(CX_F32, 4, 0), T(CX_S64, 0));
    OUT(pl, CX_F32, 4, 0);
    FAILS(TAKE, ps, (T(CX_F32, 4, 0), T(CX_S64, 1)), "axis 1 of size 0", "{4, 0}");
    FAILS(TAKE, ps, (x, T(CX_F32, 2)), "indices to have an integer type, got: f32");
    FAILS(TAKE, ps, (x, T(CX_BF16, 2)), "integer type, got: bf16");
    cx_param_put_int(&ps, CX_P_AXIS, 2);
    FAILS(TAKE, ps, (x, T(CX_S64, 2)), "axis in -2..1", "got: 2");
    ps = (cx_params){0};
    FAILS(TAKE, ps, (T0(CX_F32), T(CX_S64, 2)), "rank 0");
    FAILS(TAKE, ps, (T(CX_F32, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2), T(CX_S64, 1, 1)),
          "rank 17", "limit of 16");
    PLAN_OK(pl, TAKE, ps, T(CX_F32, 2, 1, 1, 1, 1, 1, 1, 1), T(CX_S64, 1));
    OUT(pl, CX_F32, 1, 1, 1, 1, 1, 1, 1, 1);
    FAILS(TAKE, ps, (FAKE(CX_U8, 1, INT64_C(1) << 40), FAKE(CX_S64, INT64_C(1) << 10)), "2^48");

    ps = (cx_params){0};
    cx_tensor *y = T(CX_S32, 3, 4, 5);
    PLAN_OK(pl, GATHER, ps, y, T(CX_S64, 6, 2));
    OUT(pl, CX_S32, 6, 5);
    INTS(ps, AXES, 0, 1);
    assert_int_equal(pl.compute[1], CX_S64);
    PUT(ps, AXES, 0, -1);
    PLAN_OK(pl, GATHER, ps, y, T(CX_U8, 7, 6, 2));
    OUT(pl, CX_S32, 7, 6, 4);
    INTS(ps, AXES, 0, 2);
    ps = (cx_params){0};
    PLAN_OK(pl, GATHER, ps, y, T(CX_S32, 3));
    OUT0(pl, CX_S32);
    ps = (cx_params){0};
    PLAN_OK(pl, GATHER, ps, y, T(CX_S32, 2, 0));
    OUT(pl, CX_S32, 2, 3, 4, 5);
    PUT(ps, AXES, 2, 0);
    FAILS(GATHER, ps, (y, T(CX_S64, 6, 2)), "increasing", "[2, 0]");
    PUT(ps, AXES, 1, 1);
    FAILS(GATHER, ps, (y, T(CX_S64, 6, 2)), "increasing");
    PUT(ps, AXES, 0);
    FAILS(GATHER, ps, (y, T(CX_S64, 6, 2)), "expected 2 axes", "got: [0]");
    PUT(ps, AXES, 0, 3);
    FAILS(GATHER, ps, (y, T(CX_S64, 6, 2)), "axis in -3..2", "got: 3");
    ps = (cx_params){0};
    FAILS(GATHER, ps, (y, T(CX_F64, 6, 2)), "indices to have an integer type, got: f64");
    FAILS(GATHER, ps, (y, T(CX_S64, 6, 4)), "last indices dimension (4)", "tensor rank (3)");
    FAILS(GATHER, ps, (y, T0(CX_S64)), "rank 1 or more", "{}");
    FAILS(GATHER, ps,
          (T(CX_U8, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1),
           T(CX_S64, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 0)),
          "rank above 16");
    ps = (cx_params){0}; /* inference filled in the default axes */
    FAILS(GATHER, ps, (T(CX_U8, 0, 3), T(CX_S64, 2, 1)), "axis 0 of size 0");
    ps = (cx_params){0};
    PLAN_OK(pl, GATHER, ps, T(CX_U8, 0, 3), T(CX_S64, 0, 1));
    OUT(pl, CX_U8, 0, 3);
}

static void test_infer_dot(void **state) {
    (void)state;
    cx_plan pl;
    cx_params ps = {0};
    PLAN_OK(pl, DOT, ps, T(CX_S32, 2, 3), T(CX_F32, 3, 4));
    OUT(pl, CX_F32, 2, 4);
    assert_int_equal(pl.compute[0], CX_F32);
    assert_int_equal(pl.compute[1], CX_F32);
    INTS(ps, CONTRACT_A, 1);
    INTS(ps, CONTRACT_B, 0);
    INTS0(ps, BATCH_A);
    INTS0(ps, BATCH_B);
    /* cost: inputs + outputs + one multiply-add per contracted element of every output */
    assert_true(pl.cost == 6 + 12 + 8 + 8 * 3);
    ps = (cx_params){0};
    PLAN_OK(pl, DOT, ps, T(CX_U8, 3), T(CX_U8, 3));
    OUT0(pl, CX_U8);
    ps = (cx_params){0};
    PLAN_OK(pl, DOT, ps, T(CX_S64, 2, 3), T(CX_S64, 3));
    OUT(pl, CX_S64, 2);
    ps = (cx_params){0};
    PLAN_OK(pl, DOT, ps, T(CX_F16, 3), T(CX_F16, 2, 3, 4));
    OUT(pl, CX_F16, 2, 4);
    INTS(ps, CONTRACT_B, 1);
    ps = (cx_params){0};
    PLAN_OK(pl, DOT, ps, T0(CX_F64), T(CX_F32, 2, 3));
    OUT(pl, CX_F64, 2, 3);
    INTS0(ps, CONTRACT_A);
    ps = (cx_params){0};
    PUT(ps, CONTRACT_A, 2);
    PUT(ps, BATCH_A, 0);
    PUT(ps, CONTRACT_B, 1);
    PUT(ps, BATCH_B, 0);
    PLAN_OK(pl, DOT, ps, T(CX_BF16, 5, 2, 3), T(CX_BF16, 5, 3, 4));
    OUT(pl, CX_BF16, 5, 2, 4);
    PUT(ps, CONTRACT_A, -1);
    PUT(ps, CONTRACT_B, -2);
    PLAN_OK(pl, DOT, ps, T(CX_BF16, 5, 2, 3), T(CX_BF16, 5, 3, 4));
    INTS(ps, CONTRACT_A, 2);
    INTS(ps, CONTRACT_B, 1);
    ps = (cx_params){0};
    FAILS(DOT, ps, (T(CX_F32, 2, 3), T(CX_F32, 4, 5)), "cannot contract axis 1 of {2, 3}",
          "axis 0 of {4, 5}", "sizes 3 and 4");
    ps = (cx_params){0};
    FAILS(DOT, ps,
          (T(CX_F32, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1), T(CX_F32, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1)),
          "rank 18", "limit of 16");
    ps = (cx_params){0};
    PUT(ps, CONTRACT_A, 0);
    FAILS(DOT, ps, (T(CX_F32, 3), T(CX_F32, 3)), "as many axes", "contracting 1 vs 0");
    PUT(ps, CONTRACT_B, 0);
    PUT(ps, BATCH_A, 0);
    FAILS(DOT, ps, (T(CX_F32, 3), T(CX_F32, 3)), "batch 1 vs 0");
    ps = (cx_params){0};
    PUT(ps, CONTRACT_A, 1, 1);
    PUT(ps, CONTRACT_B, 0, 1);
    FAILS(DOT, ps, (T(CX_F32, 2, 2), T(CX_F32, 2, 2)), "axis 1 of the left operand is used twice");
    PUT(ps, CONTRACT_A, 0);
    PUT(ps, CONTRACT_B, 0);
    PUT(ps, BATCH_A, 1);
    PUT(ps, BATCH_B, 0);
    FAILS(DOT, ps, (T(CX_F32, 2, 2), T(CX_F32, 2, 2)), "axis 0 of the right operand is used twice");
    PUT(ps, BATCH_B, 1);
    FAILS(DOT, ps, (T(CX_F32, 2, 3), T(CX_F32, 2, 4)), "batch axis 1 of {2, 3}", "sizes 3 and 4");
    PUT(ps, BATCH_B, 2);
    FAILS(DOT, ps, (T(CX_F32, 2, 3), T(CX_F32, 2, 4)), "axis in -2..1", "got: 2");
    ps = (cx_params){0};
    FAILS(DOT, ps, (FAKE(CX_U8, INT64_C(1) << 30, 1), FAKE(CX_U8, 1, INT64_C(1) << 30)), "2^48");
}

static void test_infer_creation(void **state) {
    (void)state;
    cx_plan pl;
    cx_params ps = {0};
    FAILS0(FULL, ps, "value parameter is required");
    cx_param_put_int(&ps, CX_P_VALUE, 7);
    FAILS0(FULL, ps, "shape parameter is required");
    PUT(ps, SHAPE, 2, 3);
    PLAN_OK0(pl, FULL, ps);
    OUT(pl, CX_S64, 2, 3);
    assert_true(pl.cost == 6);
    ps = (cx_params){0};
    cx_param_put_float(&ps, CX_P_VALUE, 1.5);
    PUT(ps, SHAPE, 2);
    PLAN_OK0(pl, FULL, ps);
    OUT(pl, CX_F32, 2);
    cx_param_put_int(&ps, CX_P_TYPE, CX_F16);
    cx_param_put_ints(&ps, CX_P_SHAPE, NULL, 0);
    PLAN_OK0(pl, FULL, ps);
    OUT0(pl, CX_F16);
    cx_param_put_int(&ps, CX_P_TYPE, 42);
    FAILS0(FULL, ps, "unknown type code 42");
    cx_param_put_int(&ps, CX_P_TYPE, CX_U8);
    PUT(ps, SHAPE, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1);
    FAILS0(FULL, ps, "rank between 0 and 16", "got: 17");
    PUT(ps, SHAPE, INT64_C(1) << 20, INT64_C(1) << 20, INT64_C(1) << 9);
    FAILS0(FULL, ps, "{1048576, 1048576, 512}", "more than 2^48");
    /* zero dimensions do not excuse the others, wherever they are: a reduction over the empty
     * axis of {0, 2^40, 2^40} would have 2^80 elements */
    PUT(ps, SHAPE, 0, INT64_C(1) << 40, INT64_C(1) << 40);
    FAILS0(FULL, ps, "2^48");
    PUT(ps, SHAPE, INT64_C(1) << 40, 0, INT64_C(1) << 40);
    FAILS0(FULL, ps, "2^48");
    PUT(ps, SHAPE, 0, INT64_C(1) << 48);
    PLAN_OK0(pl, FULL, ps);
    OUT(pl, CX_U8, 0, INT64_C(1) << 48);
    PUT(ps, SHAPE, INT64_C(1) << 20, INT64_C(1) << 20, INT64_C(1) << 8);
    PLAN_OK0(pl, FULL, ps);
    PUT(ps, SHAPE, 2, -1);
    FAILS0(FULL, ps, "non-negative", "{2, -1}");
    PUT(ps, SHAPE, 2);
    FAILS(FULL, ps, (T(CX_F32, 2)), "expects 0", "got: 1");

    ps = (cx_params){0};
    FAILS0(IOTA, ps, "shape parameter is required");
    PUT(ps, SHAPE, 2, 3);
    PLAN_OK0(pl, IOTA, ps);
    OUT(pl, CX_S64, 2, 3);
    assert_int_equal(ps.p[CX_P_TYPE].i[0], CX_S64);
    cx_param_put_int(&ps, CX_P_AXIS, -1);
    cx_param_put_int(&ps, CX_P_TYPE, CX_F32);
    PLAN_OK0(pl, IOTA, ps);
    OUT(pl, CX_F32, 2, 3);
    assert_int_equal(ps.p[CX_P_AXIS].i[0], 1);
    cx_param_put_int(&ps, CX_P_AXIS, 2);
    FAILS0(IOTA, ps, "axis in -2..1", "got: 2");
    cx_param_put_int(&ps, CX_P_AXIS, 0);
    cx_param_put_ints(&ps, CX_P_SHAPE, NULL, 0);
    FAILS0(IOTA, ps, "rank 0");
    cx_param_put_int(&ps, CX_P_AXIS, 0);
    cx_param_put_int(&ps, CX_P_TYPE, -5);
    PUT(ps, SHAPE, 4);
    FAILS0(IOTA, ps, "unknown type code -5");

    ps = (cx_params){0};
    FAILS0(EYE, ps, "shape parameter is required");
    PUT(ps, SHAPE, 3, 3);
    PLAN_OK0(pl, EYE, ps);
    OUT(pl, CX_S64, 3, 3);
    cx_param_put_int(&ps, CX_P_TYPE, CX_BF16);
    PUT(ps, SHAPE, 2, 3, 4);
    PLAN_OK0(pl, EYE, ps);
    OUT(pl, CX_BF16, 2, 3, 4);
    PUT(ps, SHAPE, 3);
    FAILS0(EYE, ps, "rank 2 or more", "{3}");
    cx_param_put_ints(&ps, CX_P_SHAPE, NULL, 0);
    FAILS0(EYE, ps, "rank 2 or more", "{}");

    for (int normal = 0; normal < 2; normal++) {
        cx_op_id op = normal ? CX_OP_RANDOM_NORMAL : CX_OP_RANDOM_UNIFORM;
        cx_param_id lo = normal ? CX_P_MEAN : CX_P_MIN, hi = normal ? CX_P_STD : CX_P_MAX;
        ps = (cx_params){0};
        fail_n(op, &ps, NULL, 0, WORDS("shape parameter is required"));
        PUT(ps, SHAPE, 4);
        fail_n(op, &ps, NULL, 0, WORDS("key"));
        cx_param_put_int(&ps, CX_P_KEY, 42);
        plan_ok_n(&pl, op, &ps, NULL, 0);
        OUT(pl, CX_F32, 4);
        assert_true(cx_param_has(&ps, lo) && ps.p[lo].f == 0.0);
        assert_true(cx_param_has(&ps, hi) && ps.p[hi].f == 1.0);
        cx_param_put_float(&ps, lo, -3.0);
        cx_param_put_int(&ps, CX_P_TYPE, CX_F64);
        plan_ok_n(&pl, op, &ps, NULL, 0);
        OUT(pl, CX_F64, 4);
        assert_true(ps.p[lo].f == -3.0); /* given values are kept */
        cx_param_put_int(&ps, CX_P_TYPE, CX_BF16);
        plan_ok_n(&pl, op, &ps, NULL, 0);
        OUT(pl, CX_BF16, 4);
        cx_dtype ints[] = {CX_U8, CX_S32, CX_S64};
        for (int k = 0; k < 3; k++) {
            cx_param_put_int(&ps, CX_P_TYPE, ints[k]);
            fail_n(op, &ps, NULL, 0, WORDS("expected a float type", cx_dtype_name(ints[k])));
        }
        cx_param_put_int(&ps, CX_P_TYPE, CX_F32);
        PUT(ps, SHAPE, -4);
        fail_n(op, &ps, NULL, 0, WORDS("non-negative"));
    }
}

/* Every op on random inputs and random (well-formed) parameters: no crash, no undefined
 * behaviour, and a sane result whenever it is accepted. */
static void test_infer_fuzz(void **state) {
    (void)state;
    static const int64_t dims[] = {0, 1, 1, 2, 3, 5, 1, 2, 7, INT64_C(1) << 20, INT64_C(1) << 33};
    static const int64_t ints[] = {
        0, 1, 2, -1, -2, 3, 7, -8, INT64_MAX, INT64_MIN, 1, 0, 1ll << 48, -(1ll << 48), 1ll << 47};
    const int n_dims = sizeof dims / sizeof dims[0], n_ints = sizeof ints / sizeof ints[0];
    cx_tensor *in[8]; /* up to the largest arity (batch_norm: 5) */
    int accepted = 0;
    for (int iter = 0; iter < 60000; iter++) {
        cx_op_id op = (cx_op_id)(rnd() % CX_OP_COUNT);
        int n = cx_op_tensor_arity(op);
        if (n < 0) n = 1 + (int)(rnd() % 4);
        if (rnd() % 16 == 0) n = (int)(rnd() % 4);
        for (int k = 0; k < n; k++) {
            cx_desc d = {.dtype = (cx_dtype)(rnd() % CX_DTYPE_COUNT), .rank = (int)(rnd() % 5)};
            if (rnd() % 8 == 0) d.rank = (int)(rnd() % 9);
            /* a valid tensor: its non-zero dimensions multiply to at most 2^48 */
            int64_t numel = 1;
            for (int a = 0; a < d.rank; a++) {
                int64_t v = dims[rnd() % n_dims];
                if (v > 0 && numel > MAX_NUMEL / v) v = 1;
                d.shape[a] = v;
                if (v > 0) numel *= v;
            }
            in[k] = fake(d.dtype, d.rank, d.shape);
        }
        cx_params ps;
        memset(&ps, 0xa5, sizeof ps); /* unset slots hold garbage */
        ps.set = 0;
        for (int id = 0; id < CX_PARAM_COUNT; id++) {
            if (rnd() % 3) continue;
            switch (cx_param_table[id].kind) {
            case CX_PK_INTS: {
                int64_t v[CX_MAX_PARAM_INTS];
                int cnt = (int)(rnd() % 6);
                if (rnd() % 8 == 0) cnt = (int)(rnd() % (CX_MAX_PARAM_INTS + 1));
                for (int k = 0; k < cnt; k++)
                    v[k] = rnd() % 4 ? (int64_t)(rnd() % 7) - 3 : ints[rnd() % n_ints];
                cx_param_put_ints(&ps, (cx_param_id)id, v, cnt);
                break;
            }
            case CX_PK_INT:
            case CX_PK_BOOL:
                cx_param_put_int(&ps, (cx_param_id)id,
                                 rnd() % 2 ? (int64_t)(rnd() % 5) - 2 : ints[rnd() % n_ints]);
                break;
            case CX_PK_TYPE:
                cx_param_put_int(&ps, (cx_param_id)id, (int64_t)(rnd() % (CX_DTYPE_COUNT + 2)) - 1);
                break;
            case CX_PK_NUMBER:
                if (rnd() % 2)
                    cx_param_put_int(&ps, (cx_param_id)id, ints[rnd() % n_ints]);
                else
                    cx_param_put_float(&ps, (cx_param_id)id, 0.25);
                break;
            }
        }
        cx_plan pl;
        cx_status st;
        cx_code rc = plan_n(op, in, n, &ps, &pl, &st);
        if (rc != CX_OK) {
            if (rc != CX_EINVAL || st.code != CX_EINVAL ||
                !strstr(st.message, cx_op_table[op].name))
                fail_msg("%s: bad failure %s: %s", cx_op_table[op].name, cx_code_name(rc),
                         st.message);
        } else {
            accepted++;
            const cx_desc *o = &pl.out;
            assert_true(cx_dtype_valid(o->dtype));
            assert_true(o->rank >= 0 && o->rank <= CX_MAX_RANK);
            int64_t numel = 1;
            for (int a = 0; a < o->rank; a++) {
                if (o->shape[a] < 0 || (o->shape[a] > 0 && numel > MAX_NUMEL / o->shape[a]))
                    fail_msg("%s: bad output shape (axis %d: %lld)", cx_op_table[op].name, a,
                             (long long)o->shape[a]);
                if (o->shape[a] > 0) numel *= o->shape[a];
            }
            for (int k = 0; k < n; k++) assert_true(cx_dtype_valid(pl.compute[k]));
            assert_true(pl.cost >= 0);
        }
        teardown_pool(NULL);
    }
    print_message("fuzz: %d of 60000 plans accepted\n", accepted);
    assert_true(accepted > 1000);
}

/* ---------------------------------------------------------------------------------------------
 * tensor.c */

static int64_t live(void) {
    return atomic_load(&tu_cpu()->live_bytes);
}

static void init_tensor(cx_tensor *t, cx_dtype dt, int rank, const int64_t *shape) {
    cx_desc d = tu_desc(dt, rank, shape);
    cx_status st = {0};
    assert_int_equal(cx_tensor_init(t, tu_cpu(), &d, &st), CX_OK);
}

static void test_tensor_lifecycle(void **state) {
    (void)state;
    cx_device *dev = tu_cpu();
    int64_t start = live(), tensors = atomic_load(&dev->live_tensors);
    cx_tensor t;
    init_tensor(&t, CX_F32, 2, TU_SHAPE(3, 5));
    assert_int_equal(t.numel, 15);
    assert_int_equal(t.nbytes, 60);
    assert_ptr_equal(t.device, dev);
    assert_non_null(t.data);
    assert_false(cx_tensor_is_freed(&t));
    assert_int_equal(live(), start + 60);
    assert_int_equal(atomic_load(&dev->live_tensors), tensors + 1);
    assert_true(atomic_load(&dev->peak_bytes) >= start + 60);
    /* upload / download */
    float src[15], dst[15];
    for (int k = 0; k < 15; k++) src[k] = (float)k * 1.5f;
    cx_status st = {0};
    assert_int_equal(cx_tensor_upload(&t, src, sizeof src, &st), CX_OK);
    assert_int_equal(cx_tensor_download(&t, dst, sizeof dst, &st), CX_OK);
    assert_memory_equal(src, dst, sizeof src);
    assert_int_equal(cx_tensor_upload(&t, src, 56, &st), CX_EINVAL);
    assert_non_null(strstr(st.message, "expected 60 bytes"));
    assert_int_equal(cx_tensor_download(&t, dst, 64, &st), CX_EINVAL);
    assert_int_equal(cx_tensor_download(&t, dst, 8, &st), CX_OK);
    /* pin, unpin, free */
    assert_int_equal(cx_tensor_pin(&t, &st), CX_OK);
    cx_tensor_unpin(&t);
    assert_int_equal(live(), start + 60);
    cx_tensor_free(&t);
    assert_true(cx_tensor_is_freed(&t));
    assert_null(t.data);
    assert_int_equal(live(), start);
    assert_int_equal(atomic_load(&dev->live_tensors), tensors);
    cx_tensor_free(&t); /* idempotent */
    cx_tensor_free(&t);
    assert_int_equal(live(), start);
    assert_int_equal(atomic_load(&dev->live_tensors), tensors);
    memset(&st, 0, sizeof st);
    assert_int_equal(cx_tensor_pin(&t, &st), CX_EFREED);
    assert_int_equal(st.code, CX_EFREED);
    assert_non_null(strstr(st.message, "freed"));
    assert_int_equal(cx_tensor_pin(&t, NULL), CX_EFREED); /* a NULL status is allowed */
    /* empty and scalar tensors */
    init_tensor(&t, CX_S64, 2, TU_SHAPE(0, 4));
    assert_int_equal(t.nbytes, 0);
    assert_int_equal(live(), start);
    cx_tensor_free(&t);
    init_tensor(&t, CX_U8, 0, NULL);
    assert_int_equal(t.numel, 1);
    assert_int_equal(live(), start + 1);
    cx_tensor_free(&t);
    assert_int_equal(live(), start);
}

/* cx_tensor_init is also reached from outside the dispatcher (tensors built from user data):
 * a bad description is refused before any size is computed from it. */
/* The array converters (F16C where the processor has it) agree with half.h bit for bit. */
static void test_half_array_matches_scalar(void **state) {
    (void)state;
    enum { N = 65536 };
    uint16_t *h = malloc(N * sizeof *h), *back = malloc(N * sizeof *back);
    float *f = malloc(N * sizeof *f);
    for (int i = 0; i < N; i++) h[i] = (uint16_t)i;
    cx_f16_to_f32_array(h, f, N);
    for (int i = 0; i < N; i++) {
        float want = cx_f16_to_f32(h[i]);
        if (want == want)
            assert_int_equal(cx_f32_bits(f[i]), cx_f32_bits(want));
        else
            assert_true(f[i] != f[i]);
    }
    /* every f16 value, every midpoint between neighbours, and points just beside them */
    for (int round = 0; round < 3; round++) {
        for (int i = 0; i < N; i++) {
            float a = cx_f16_to_f32((uint16_t)i), b = cx_f16_to_f32((uint16_t)(i + 1));
            float mid = (float)(((double)a + (double)b) / 2);
            f[i] = round == 0 ? a : round == 1 ? mid : nextafterf(mid, INFINITY);
            if (f[i] != f[i] || isinf(f[i])) f[i] = a;
        }
        cx_f32_to_f16_array(f, back, N);
        for (int i = 0; i < N; i++) assert_int_equal(back[i], cx_f16_from_f32(f[i]));
    }
    free(h);
    free(back);
    free(f);
}

/* cx_status_on_device: a host kernel's "cpu: ..." message under the device that ran it, cut to
 * the message's size; other messages, and the cpu's own, as they were */
static void test_status_on_device(void **state) {
    (void)state;
    cx_status st = {0};
    cx_fail(&st, CX_ENOMEM, "cpu: could not allocate %d bytes", 64);
    cx_status_on_device(&st, "blas");
    assert_string_equal(st.message, "blas: could not allocate 64 bytes");
    cx_status_on_device(&st, "opencl:1"); /* not a host kernel's message any more */
    assert_string_equal(st.message, "blas: could not allocate 64 bytes");
    cx_fail(&st, CX_ENOMEM, "cpu: no memory");
    cx_status_on_device(&st, "cpu");
    assert_string_equal(st.message, "cpu: no memory");
    cx_status_on_device(&st, "ab");
    assert_string_equal(st.message, "ab: no memory");
    char longest[sizeof st.message];
    memset(longest, 'x', sizeof longest - 1);
    longest[sizeof longest - 1] = 0;
    memcpy(longest, "cpu: ", 5);
    cx_fail(&st, CX_EINVAL, "%s", longest);
    cx_status_on_device(&st, "a-longer-device-name");
    assert_int_equal(strlen(st.message), sizeof st.message - 1);
    assert_memory_equal(st.message, "a-longer-device-name: xx", 24);
    assert_int_equal(st.code, CX_EINVAL);
}

/* Regression: iota of {2^40, 0} walked 2^40 empty rows; an empty result now costs nothing. */
static void test_empty_results_return_at_once(void **state) {
    (void)state;
    cx_params ps = {0};
    cx_param_put_ints(&ps, CX_P_SHAPE, (int64_t[]){INT64_C(1) << 40, 0}, 2);
    cx_param_put_int(&ps, CX_P_AXIS, 0);
    cx_tensor out;
    cx_status st = {0};
    assert_int_equal(cx_run(CX_OP_IOTA, tu_cpu(), NULL, 0, &ps, &out, &st), CX_OK);
    assert_int_equal(out.numel, 0);
    assert_int_equal(out.desc.shape[0], INT64_C(1) << 40);
    cx_tensor_free(&out);
}

/* Regression: an op on a freed input failed before the output was set up, and freeing that
 * output (as the NIF's resource destructor does) dereferenced a NULL device. */
static void test_run_on_freed_input(void **state) {
    (void)state;
    cx_tensor *a = tu_tensor(CX_F32, 1, TU_SHAPE(2), TU_VALUES(1, 2));
    cx_tensor_free(a);
    cx_tensor *in[2] = {a, a};
    cx_tensor out;
    cx_status st = {0};
    cx_params ps = {0};
    assert_int_equal(cx_run(CX_OP_ADD, NULL, in, 2, &ps, &out, &st), CX_EFREED);
    assert_non_null(strstr(st.message, "freed"));
    cx_tensor_free(&out); /* must be a no-op */
    cx_tensor_free(&out);
    free(a);
}

static void test_tensor_bad_desc(void **state) {
    (void)state;
    int64_t start = live();
    struct {
        cx_desc d;
        const char *word;
    } bad[] = {
        {{.dtype = CX_F32, .rank = CX_MAX_RANK + 1}, "rank"},
        {{.dtype = CX_F32, .rank = -1}, "rank"},
        {{.dtype = CX_F32, .rank = 2, .shape = {3, -1}}, "non-negative"},
        {{.dtype = CX_U8, .rank = 2, .shape = {INT64_C(1) << 25, INT64_C(1) << 24}}, "2^48"},
        {{.dtype = CX_U8, .rank = 3, .shape = {0, INT64_C(1) << 40, INT64_C(1) << 40}}, "2^48"},
        {{.dtype = CX_U8, .rank = 2, .shape = {INT64_MAX, INT64_MAX}}, "2^48"},
        {{.dtype = (cx_dtype)CX_DTYPE_COUNT, .rank = 1, .shape = {2}}, "type"},
        {{.dtype = CX_DTYPE_INVALID, .rank = 1, .shape = {2}}, "type"},
    };
    for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++) {
        cx_tensor t;
        cx_status st = {0};
        assert_int_equal(cx_tensor_init(&t, tu_cpu(), &bad[k].d, &st), CX_EINVAL);
        assert_int_equal(st.code, CX_EINVAL);
        if (!strstr(st.message, bad[k].word))
            fail_msg("case %zu: message lacks \"%s\": %s", k, bad[k].word, st.message);
        assert_null(t.data);
        assert_true(cx_tensor_is_freed(&t));
        assert_int_equal(cx_tensor_pin(&t, &st), CX_EFREED);
        cx_tensor_free(&t);
        assert_int_equal(live(), start);
    }
    /* the limit itself is fine to describe (the allocation may still fail) */
    cx_tensor t;
    cx_status st = {0};
    cx_desc d = {.dtype = CX_U8, .rank = 3, .shape = {0, INT64_C(1) << 24, INT64_C(1) << 24}};
    assert_int_equal(cx_tensor_init(&t, tu_cpu(), &d, &st), CX_OK);
    assert_int_equal(t.numel, 0);
    cx_tensor_free(&t);
    assert_int_equal(live(), start);
}

static void test_tensor_deferred_release(void **state) {
    (void)state;
    int64_t start = live();
    cx_tensor t;
    cx_status st = {0};
    init_tensor(&t, CX_F64, 1, TU_SHAPE(100));
    assert_int_equal(live(), start + 800);
    assert_int_equal(cx_tensor_pin(&t, &st), CX_OK);
    assert_int_equal(cx_tensor_pin(&t, &st), CX_OK);
    double *data = t.data;
    cx_tensor_free(&t);
    assert_true(cx_tensor_is_freed(&t));
    assert_int_equal(live(), start + 800); /* still pinned twice */
    assert_ptr_equal(t.data, data);
    data[99] = 1.0; /* still ours */
    assert_int_equal(cx_tensor_pin(&t, &st), CX_EFREED);
    cx_tensor_free(&t);
    assert_int_equal(live(), start + 800);
    cx_tensor_unpin(&t);
    assert_int_equal(live(), start + 800);
    assert_non_null(t.data);
    cx_tensor_unpin(&t);
    assert_int_equal(live(), start);
    assert_null(t.data);
    cx_tensor_free(&t);
    assert_int_equal(live(), start);
}

/* A borrowed tensor (the NIF's view of a value) is read and written by ops over the caller's
 * buffer, counts no device memory, and is never released, moved or marked freed: a release would
 * hand a stack buffer to the cpu driver's cache (ASan and valgrind would see it). */
static void test_tensor_borrowed(void **state) {
    (void)state;
    int64_t start = live();
    float a[3] = {1, 2, 3}, b[3] = {10, 20, 30}, r[3] = {0, 0, 0};
    cx_desc d = tu_desc(CX_F32, 1, TU_SHAPE(3));
    cx_tensor x, y, out;
    cx_tensor_borrow(&x, tu_cpu(), &d, a);
    cx_tensor_borrow(&y, tu_cpu(), &d, b);
    assert_int_equal(x.numel, 3);
    assert_int_equal(x.nbytes, 12);
    assert_int_equal(live(), start);
    cx_status st = {0};
    for (int k = 0; k < 3; k++) assert_int_equal(cx_tensor_pin(&x, &st), CX_OK);
    cx_tensor_unpin(&x);
    cx_tensor_free(&x);
    cx_tensor_free(&x);
    assert_false(cx_tensor_is_freed(&x));
    assert_int_equal(cx_tensor_pin(&x, &st), CX_OK); /* still readable */
    assert_ptr_equal(x.data, a);
    cx_tensor taken;
    assert_false(cx_tensor_take(&x, &taken));
    assert_ptr_equal(x.data, a);

    /* an op from borrowed inputs into a borrowed result */
    cx_params ps = {0};
    cx_plan plan;
    cx_tensor *in[2] = {&x, &y};
    assert_int_equal(
        cx_plan_op(CX_OP_ADD, tu_cpu(), (const cx_tensor *const *)in, 2, &ps, &plan, &st), CX_OK);
    cx_tensor_borrow(&out, tu_cpu(), &plan.out, r);
    assert_int_equal(cx_run_plan_into(&plan, in, 2, &ps, &out, &st), CX_OK);
    assert_true(r[0] == 11 && r[1] == 22 && r[2] == 33);
    assert_true(a[0] == 1 && b[2] == 30);
    /* and into a tensor of its own */
    cx_tensor own;
    assert_int_equal(cx_run(CX_OP_MULTIPLY, tu_cpu(), in, 2, &ps, &own, &st), CX_OK);
    assert_true(((float *)own.data)[2] == 90);
    assert_int_equal(live(), start + 12);
    cx_tensor_free(&own);
    assert_int_equal(live(), start);
    /* a failed run leaves the borrowed result's buffer alone */
    cx_desc wrong = tu_desc(CX_F32, 1, TU_SHAPE(2));
    cx_tensor_borrow(&out, tu_cpu(), &wrong, r);
    assert_int_equal(cx_run_plan_into(&plan, in, 2, &ps, &out, &st), CX_EINVAL);
    assert_ptr_equal(out.data, r);
    assert_int_equal(live(), start);
}

static void test_tensor_unavailable_device(void **state) {
    (void)state;
    cx_device dev;
    memset(&dev, 0, sizeof dev);
    dev.driver = tu_cpu()->driver;
    snprintf(dev.name, sizeof dev.name, "fake");
    snprintf(dev.reason, sizeof dev.reason, "no such hardware");
    dev.available = false;
    cx_tensor t;
    cx_desc d = tu_desc(CX_F32, 1, TU_SHAPE(4));
    cx_status st = {0};
    assert_int_equal(cx_tensor_init(&t, &dev, &d, &st), CX_EDEVICE);
    assert_non_null(strstr(st.message, "fake"));
    assert_non_null(strstr(st.message, "no such hardware"));
    assert_null(t.data);
    assert_true(cx_tensor_is_freed(&t));
    assert_int_equal(cx_tensor_pin(&t, &st), CX_EFREED);
    cx_tensor_free(&t); /* a no-op on a tensor without buffer */
    assert_int_equal(atomic_load(&dev.live_bytes), 0);
}

#define PIN_THREADS 16
#define PIN_ROUNDS  100000

typedef struct {
    cx_tensor *t;
    _Atomic int64_t pinned, refused, bad, sum;
} pin_shared;

static void *pin_worker(void *arg) {
    pin_shared *s = arg;
    int64_t sum = 0;
    for (int i = 0; i < PIN_ROUNDS; i++) {
        cx_status st = {0};
        cx_code rc = cx_tensor_pin(s->t, &st);
        if (rc == CX_OK) {
            const int32_t *p = s->t->data;
            sum += p[i % 64];
            atomic_fetch_add(&s->pinned, 1);
            cx_tensor_unpin(s->t);
        } else {
            atomic_fetch_add(rc == CX_EFREED && st.code == CX_EFREED ? &s->refused : &s->bad, 1);
        }
    }
    atomic_fetch_add(&s->sum, sum);
    return NULL;
}

static void test_tensor_threads(void **state) {
    (void)state;
    int64_t start = live();
    cx_tensor *t = malloc(sizeof *t);
    assert_non_null(t);
    init_tensor(t, CX_S32, 1, TU_SHAPE(64));
    for (int k = 0; k < 64; k++) ((int32_t *)t->data)[k] = 1;
    pin_shared s = {.t = t};
    pthread_t th[PIN_THREADS];
    for (int k = 0; k < PIN_THREADS; k++)
        assert_int_equal(pthread_create(&th[k], NULL, pin_worker, &s), 0);
    /* free midway, while the workers pin and unpin */
    while (atomic_load(&s.pinned) < (int64_t)PIN_THREADS * PIN_ROUNDS / 2) {
        struct timespec ts = {0, 50000};
        nanosleep(&ts, NULL);
    }
    cx_tensor_free(t);
    for (int k = 0; k < PIN_THREADS; k++) assert_int_equal(pthread_join(th[k], NULL), 0);
    int64_t pinned = atomic_load(&s.pinned), refused = atomic_load(&s.refused);
    assert_int_equal(atomic_load(&s.bad), 0);
    assert_int_equal(pinned + refused, (int64_t)PIN_THREADS * PIN_ROUNDS);
    assert_true(pinned >= (int64_t)PIN_THREADS * PIN_ROUNDS / 2);
    assert_int_equal(atomic_load(&s.sum), pinned); /* every pinned read saw the data */
    assert_true(cx_tensor_is_freed(t));
    assert_null(t->data);
    assert_int_equal(live(), start);
    cx_status st = {0};
    assert_int_equal(cx_tensor_pin(t, &st), CX_EFREED);
    cx_tensor_free(t);
    assert_int_equal(live(), start);
    print_message("threads: %lld pins, %lld refused after free\n", (long long)pinned,
                  (long long)refused);
    free(t);
}

/* ---------------------------------------------------------------------------------------------
 * device.c */

static void test_devices(void **state) {
    (void)state;
    cx_status st = {0};
    assert_int_equal(cx_devices_init(NULL, 0, &st), CX_OK);
    assert_int_equal(cx_devices_init(NULL, 0, &st), CX_OK); /* twice is fine */
    assert_true(cx_device_count() >= 1);
    cx_device *cpu = cx_device_find("cpu");
    assert_non_null(cpu);
    assert_true(cpu->available);
    assert_string_equal(cpu->name, "cpu");
    assert_ptr_equal(cx_device_get(cpu->id), cpu);
    assert_ptr_equal(cx_device_get(0), cpu);
    assert_null(cx_device_get(-1));
    assert_null(cx_device_get(cx_device_count()));
    assert_null(cx_device_get(CX_MAX_DEVICES));
    assert_null(cx_device_find("gpu"));
    assert_null(cx_device_find(""));
    assert_null(cx_device_find("cpu0"));
    assert_true(cpu->props.host_memory);
    assert_int_equal(cpu->driver->abi, CX_DRIVER_ABI);
}

static cx_tensor *alloc_bytes(int64_t n) {
    cx_tensor *t = malloc(sizeof *t);
    assert_non_null(t);
    init_tensor(t, CX_U8, 1, (int64_t[]){n});
    return t;
}

static void test_device_gc(void **state) {
    (void)state;
    cx_device *d = tu_cpu();
    const int64_t start = live();
    cx_set_gc_interval(4096);
    assert_int_equal(cx_gc_interval(), 4096);
    assert_false(cx_device_wants_gc(d));
    cx_tensor *t[16];
    for (int k = 0; k < 3; k++) {
        t[k] = alloc_bytes(1024);
        assert_false(cx_device_wants_gc(d));
    }
    t[3] = alloc_bytes(1024); /* one interval of growth */
    assert_true(cx_device_wants_gc(d));
    assert_false(cx_device_wants_gc(d)); /* not twice without more growth */
    assert_false(cx_device_wants_gc(d));
    for (int k = 4; k < 7; k++) {
        t[k] = alloc_bytes(1024);
        assert_false(cx_device_wants_gc(d));
    }
    t[7] = alloc_bytes(1024);
    assert_true(cx_device_wants_gc(d));
    assert_false(cx_device_wants_gc(d));
    /* releases lower the mark: the next request comes one interval above the live set */
    for (int k = 0; k < 8; k++) tu_drop(t[k]);
    assert_int_equal(live(), start);
    assert_false(cx_device_wants_gc(d));
    for (int k = 0; k < 3; k++) t[k] = alloc_bytes(1024);
    assert_false(cx_device_wants_gc(d));
    t[3] = alloc_bytes(1024);
    assert_true(cx_device_wants_gc(d));
    assert_false(cx_device_wants_gc(d));
    for (int k = 0; k < 4; k++) tu_drop(t[k]);
    /* growth of several intervals between two checks asks once */
    t[0] = alloc_bytes(3 * 4096 + 100);
    assert_true(cx_device_wants_gc(d));
    assert_false(cx_device_wants_gc(d));
    t[1] = alloc_bytes(4000);
    assert_false(cx_device_wants_gc(d));
    t[2] = alloc_bytes(96);
    assert_true(cx_device_wants_gc(d));
    for (int k = 0; k < 3; k++) tu_drop(t[k]);
    /* a new interval counts from the live set at that moment */
    t[0] = alloc_bytes(10000);
    cx_set_gc_interval(2048);
    assert_false(cx_device_wants_gc(d));
    t[1] = alloc_bytes(2047);
    assert_false(cx_device_wants_gc(d));
    t[2] = alloc_bytes(1);
    assert_true(cx_device_wants_gc(d));
    /* a non-positive interval is clamped to one byte, mark included */
    cx_set_gc_interval(0);
    assert_int_equal(cx_gc_interval(), 1);
    assert_false(cx_device_wants_gc(d));
    t[3] = alloc_bytes(1);
    assert_true(cx_device_wants_gc(d));
    assert_false(cx_device_wants_gc(d));
    cx_set_gc_interval(-5);
    assert_int_equal(cx_gc_interval(), 1);
    assert_false(cx_device_wants_gc(d));
    /* a huge interval (to turn collection off) must not overflow with live bytes around */
    cx_set_gc_interval(INT64_MAX);
    assert_int_equal(cx_gc_interval(), INT64_MAX);
    assert_false(cx_device_wants_gc(d));
    t[4] = alloc_bytes(1 << 20);
    assert_false(cx_device_wants_gc(d));
    for (int k = 0; k < 5; k++) tu_drop(t[k]);
    assert_false(cx_device_wants_gc(d));
    assert_int_equal(live(), start);
    cx_set_gc_interval(INT64_C(4) << 20);
    assert_int_equal(cx_gc_interval(), INT64_C(4) << 20);
    assert_false(cx_device_wants_gc(d));
}

/* Requests are minor until the live set has grown CX_GC_MAJOR_INTERVALS intervals above its low
 * point (what minor collections could not release); releases lower both marks. */
static void test_device_gc_major(void **state) {
    (void)state;
    cx_device *d = tu_cpu();
    const int64_t start = live();
    cx_set_gc_interval(1000);
    cx_tensor *t[CX_GC_MAJOR_INTERVALS + 4];
    /* growth that no collection releases: minor requests, then one major */
    for (int k = 0; k < CX_GC_MAJOR_INTERVALS - 1; k++) {
        t[k] = alloc_bytes(1000);
        assert_int_equal(cx_device_wants_gc(d), CX_GC_MINOR);
    }
    t[CX_GC_MAJOR_INTERVALS - 1] = alloc_bytes(1000);
    assert_int_equal(cx_device_wants_gc(d), CX_GC_MAJOR);
    assert_int_equal(cx_device_wants_gc(d), CX_GC_NONE);
    /* the next major one counts from there */
    t[CX_GC_MAJOR_INTERVALS] = alloc_bytes(1000);
    assert_int_equal(cx_device_wants_gc(d), CX_GC_MINOR);
    /* a collection that releases (a loop dropping its results) keeps the requests minor */
    for (int k = 0; k <= CX_GC_MAJOR_INTERVALS; k++) tu_drop(t[k]);
    assert_int_equal(live(), start);
    for (int round = 0; round < 4 * CX_GC_MAJOR_INTERVALS; round++) {
        cx_tensor *x = alloc_bytes(1000);
        assert_int_equal(cx_device_wants_gc(d), CX_GC_MINOR);
        tu_drop(x);
    }
    assert_int_equal(live(), start);
    cx_set_gc_interval(INT64_C(4) << 20);
    assert_int_equal(cx_device_wants_gc(d), CX_GC_NONE);
}

/* Asked before an allocation, a request counts the tensor about to be made as live: a loop that
 * drops each result is asked to collect before the allocation that reaches the mark, not after
 * it, and the allocation that follows the request makes no second one. */
static void test_device_gc_before(void **state) {
    (void)state;
    cx_device *d = tu_cpu();
    const int64_t start = live();
    cx_set_gc_interval(4096);
    cx_tensor *t[8];
    for (int k = 0; k < 3; k++) {
        assert_int_equal(cx_device_wants_gc_before(d, 1024), CX_GC_NONE);
        t[k] = alloc_bytes(1024);
        assert_int_equal(cx_device_wants_gc(d), CX_GC_NONE);
    }
    assert_int_equal(cx_device_wants_gc_before(d, 1023), CX_GC_NONE);
    assert_int_equal(cx_device_wants_gc_before(d, 1024), CX_GC_MINOR); /* reaches the mark */
    assert_int_equal(cx_device_wants_gc_before(d, 1024), CX_GC_NONE);  /* not twice */
    t[3] = alloc_bytes(1024);
    assert_int_equal(cx_device_wants_gc(d), CX_GC_NONE); /* asked already */
    /* the collection releases the dropped tensors: the mark follows the live set down, to one
     * interval above it */
    for (int k = 0; k < 4; k++) tu_drop(t[k]);
    assert_int_equal(live(), start);
    assert_int_equal(cx_device_wants_gc_before(d, 4095), CX_GC_NONE);
    assert_int_equal(cx_device_wants_gc_before(d, -1), CX_GC_NONE);
    /* a tensor of an interval or more asks before every allocation: one collection a call, as
     * its growth alone asks for; the request after it would be a second (the NIF's caller,
     * having just collected, skips that one) */
    for (int round = 0; round < 3; round++) {
        assert_int_equal(cx_device_wants_gc_before(d, 4096), CX_GC_MINOR);
        t[0] = alloc_bytes(4096);
        tu_drop(t[0]); /* what the collection of the next round releases */
    }
    /* live + bytes saturates instead of overflowing (to below the marks) */
    assert_int_equal(cx_device_wants_gc_before(d, INT64_MAX), CX_GC_MAJOR);
    cx_set_gc_interval(4096);
    /* a major request when the live set with the new tensor passes the major mark */
    cx_set_gc_interval(1000);
    cx_tensor *kept[CX_GC_MAJOR_INTERVALS];
    for (int k = 0; k < CX_GC_MAJOR_INTERVALS - 1; k++) {
        kept[k] = alloc_bytes(1000);
        assert_int_equal(cx_device_wants_gc(d), CX_GC_MINOR);
    }
    kept[CX_GC_MAJOR_INTERVALS - 1] = alloc_bytes(1);
    assert_int_equal(cx_device_wants_gc(d), CX_GC_NONE);
    assert_int_equal(cx_device_wants_gc_before(d, 999), CX_GC_MAJOR);
    cx_tensor *last = alloc_bytes(999);
    assert_int_equal(cx_device_wants_gc(d), CX_GC_NONE);
    tu_drop(last);
    for (int k = 0; k < CX_GC_MAJOR_INTERVALS; k++) tu_drop(kept[k]);
    assert_int_equal(live(), start);
    cx_set_gc_interval(INT64_C(4) << 20);
}

/* ---------------------------------------------------------------------------------------------
 * params.c, ops.c, status.c */

static void test_params_table(void **state) {
    (void)state;
    int count = 0;
#define CX_PARAM(pid, pname, pkind)                                                                \
    assert_int_equal(cx_param_find(pname), CX_P_##pid);                                            \
    assert_string_equal(cx_param_table[CX_P_##pid].name, pname);                                   \
    assert_int_equal(cx_param_table[CX_P_##pid].kind, CX_PK_##pkind);                              \
    count++;
#include "../core/params.def"
#undef CX_PARAM
    assert_int_equal(count, CX_PARAM_COUNT);
    assert_true(CX_PARAM_COUNT <= 64); /* `set` is a 64-bit mask */
    const char *unknown[] = {"", "Axes", "axes ", "ax", "nope", "std", "standard_deviation_"};
    for (size_t k = 0; k < sizeof unknown / sizeof unknown[0]; k++)
        assert_int_equal(cx_param_find(unknown[k]), -1);
    /* the put helpers */
    cx_params ps = {0};
    int64_t v[CX_MAX_PARAM_INTS + 6];
    for (int k = 0; k < CX_MAX_PARAM_INTS + 6; k++) v[k] = k;
    cx_param_put_ints(&ps, CX_P_PADS, v, CX_MAX_PARAM_INTS + 6);
    assert_int_equal(ps.p[CX_P_PADS].n, CX_MAX_PARAM_INTS); /* clamped */
    assert_int_equal(ps.p[CX_P_PADS].i[CX_MAX_PARAM_INTS - 1], CX_MAX_PARAM_INTS - 1);
    assert_true(cx_param_has(&ps, CX_P_PADS));
    assert_false(cx_param_has(&ps, CX_P_AXES));
    assert_null(cx_param_get(&ps, CX_P_AXES));
    assert_ptr_equal(cx_param_get(&ps, CX_P_PADS), &ps.p[CX_P_PADS]);
    cx_param_put_int(&ps, CX_P_KEY, -3);
    assert_true(ps.p[CX_P_KEY].is_int && ps.p[CX_P_KEY].i[0] == -3 && ps.p[CX_P_KEY].f == -3.0);
    cx_param_put_float(&ps, CX_P_VALUE, 2.5);
    assert_true(!ps.p[CX_P_VALUE].is_int && ps.p[CX_P_VALUE].f == 2.5);
}

static void test_ops_table(void **state) {
    (void)state;
    int count = 0;
#define CX_OP(oid, oname, okind, oargs, oopts, oinfer, odoc, oex, ores)                            \
    assert_int_equal(cx_op_find(oname), CX_OP_##oid);                                              \
    assert_string_equal(cx_op_table[CX_OP_##oid].name, oname);                                     \
    assert_int_equal(cx_op_table[CX_OP_##oid].kind, CX_KIND_##okind);                              \
    assert_true(cx_op_table[CX_OP_##oid].infer == oinfer);                                         \
    count++;
#define CX_COMPOSITE(oid, oname, oargs, oopts, oinfer, odec, osample, odoc, oex, ores)             \
    assert_int_equal(cx_op_find(oname), CX_OP_##oid);                                              \
    assert_int_equal(cx_op_table[CX_OP_##oid].kind, CX_KIND_COMPOSITE);                            \
    assert_true(cx_op_table[CX_OP_##oid].infer == oinfer);                                         \
    assert_true(cx_op_table[CX_OP_##oid].decompose == odec);                                       \
    assert_true(cx_op_table[CX_OP_##oid].sample == osample);                                       \
    count++;
#include "../core/ops.def"
#undef CX_OP
#undef CX_COMPOSITE
    assert_int_equal(count, CX_OP_COUNT);
    assert_int_equal(cx_op_find("nope"), -1);
    assert_int_equal(cx_op_find(""), -1);
    assert_int_equal(cx_op_find("Add"), -1);
    assert_int_equal(cx_op_tensor_arity(CX_OP_NEGATE), 1);
    assert_int_equal(cx_op_tensor_arity(CX_OP_ADD), 2);
    assert_int_equal(cx_op_tensor_arity(CX_OP_SELECT), 3);
    assert_int_equal(cx_op_tensor_arity(CX_OP_CLIP), 3);
    assert_int_equal(cx_op_tensor_arity(CX_OP_AS_TYPE), 1);
    assert_int_equal(cx_op_tensor_arity(CX_OP_PUT_SLICE), 2);
    assert_int_equal(cx_op_tensor_arity(CX_OP_TAKE), 2);
    assert_int_equal(cx_op_tensor_arity(CX_OP_GATHER), 2);
    assert_int_equal(cx_op_tensor_arity(CX_OP_CONCATENATE), -1);
    assert_int_equal(cx_op_tensor_arity(CX_OP_FULL), 0);
    assert_int_equal(cx_op_tensor_arity(CX_OP_RANDOM_NORMAL), 0);
    cx_desc d = tu_desc(CX_F32, 3, TU_SHAPE(2, 3, 4));
    assert_int_equal(cx_desc_numel(&d), 24);
    d.rank = 0;
    assert_int_equal(cx_desc_numel(&d), 1);
    assert_string_equal(cx_code_name(CX_OK), "ok");
    assert_string_equal(cx_code_name(CX_EINVAL), "invalid_argument");
    assert_string_equal(cx_code_name(CX_EFREED), "freed");
    assert_string_equal(cx_code_name(CX_ENOMEM), "out_of_memory");
    assert_string_equal(cx_code_name(CX_EUNSUPPORTED), "unsupported");
    assert_string_equal(cx_code_name(CX_EDEVICE), "device_error");
    assert_string_equal(cx_code_name((cx_code)99), "unknown");
    cx_status st = {0};
    assert_int_equal(cx_fail(&st, CX_ENOMEM, "x=%d", 5), CX_ENOMEM);
    assert_int_equal(st.code, CX_ENOMEM);
    assert_string_equal(st.message, "x=5");
    assert_int_equal(cx_fail(NULL, CX_EINVAL, "ignored"), CX_EINVAL);
    char long_arg[1000];
    memset(long_arg, 'a', sizeof long_arg - 1);
    long_arg[sizeof long_arg - 1] = 0;
    cx_fail(&st, CX_EINVAL, "%s", long_arg); /* truncated, terminated */
    assert_int_equal(strlen(st.message), sizeof st.message - 1);
}

#define TP(f) cmocka_unit_test_teardown(f, teardown_pool)

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_dtype_sizes_names),
        cmocka_unit_test(test_dtype_merge),
        cmocka_unit_test(test_dtype_to_float_aggregate),
        cmocka_unit_test(test_f16_all_patterns),
        cmocka_unit_test(test_bf16_all_patterns),
        cmocka_unit_test(test_f16_rounding_cases),
        cmocka_unit_test(test_f16_all_ties),
        cmocka_unit_test(test_f16_from_f32_sweep),
        cmocka_unit_test(test_f16_random_doubles),
        cmocka_unit_test(test_bf16_rounding_cases),
        cmocka_unit_test(test_bf16_all_ties),
        cmocka_unit_test(test_bf16_sweeps),
        TP(test_plan_bad_calls),
        TP(test_infer_unary),
        TP(test_infer_binary),
        TP(test_infer_broadcast_limit),
        TP(test_infer_select_clip),
        TP(test_infer_as_type),
        TP(test_infer_reduce),
        TP(test_infer_argreduce),
        TP(test_infer_reshape),
        TP(test_infer_transpose),
        TP(test_infer_broadcast),
        TP(test_infer_squeeze_reverse),
        TP(test_infer_slice),
        TP(test_infer_put_slice),
        TP(test_infer_pad),
        TP(test_infer_concatenate),
        TP(test_infer_take_gather),
        TP(test_infer_dot),
        TP(test_infer_creation),
        TP(test_infer_fuzz),
        cmocka_unit_test(test_tensor_lifecycle),
        cmocka_unit_test(test_tensor_bad_desc),
        cmocka_unit_test(test_run_on_freed_input),
        cmocka_unit_test(test_empty_results_return_at_once),
        cmocka_unit_test(test_status_on_device),
        cmocka_unit_test(test_half_array_matches_scalar),
        cmocka_unit_test(test_tensor_deferred_release),
        cmocka_unit_test(test_tensor_borrowed),
        cmocka_unit_test(test_tensor_unavailable_device),
        cmocka_unit_test(test_tensor_threads),
        cmocka_unit_test(test_devices),
        cmocka_unit_test(test_device_gc),
        cmocka_unit_test(test_device_gc_major),
        cmocka_unit_test(test_device_gc_before),
        cmocka_unit_test(test_params_table),
        cmocka_unit_test(test_ops_table),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
