/* The differential suite: "a driver may not lie" (guides/design.md, The negotiation), in C, without
 * a BEAM. Every (op, type) that a device other than the cpu claims -- cx_capability() routes it
 * native, or native for some shapes only -- is run on a grid of shapes (rank 0, sizes 1/7/17,
 * broadcasting, empty axes) with special values (+-0, +-inf, NaN, subnormals) on that device and
 * on the cpu, from the same inputs, and the results must agree: the same type and shape, the
 * result on the device, the call routed and counted native (stats), and the same values -- bit
 * for bit for the test driver, within the tolerance table below for real drivers. An op claimed
 * without a case generator fails by name, so a driver cannot claim something untested. The
 * Elixir twin of this file is test/capability_honesty_test.exs.
 *
 * Which drivers: every CX_BUILD_DIR/cascade_driver_<name>.so (the test driver included), or
 *
 *   CX_DIFF_DIR=/some/dir      look for cascade_driver_*.so there instead of the build directory
 *   CX_DIFF_DRIVERS=blas,cuda  only these drivers (a name given here but not built fails)
 *   CX_DIFF_SKIP=opencl        not these (e.g. under valgrind, where a runtime is too heavy)
 *   CX_DIFF_REQUIRE=cuda       fail unless these drivers have an available device (a built but
 *                              unavailable driver is otherwise only reported, with its reason)
 *   CX_DIFF_VERBOSE=1          print every claim checked
 *
 * On a GPU machine without Erlang: build the binary and the driver (`make
 * build/tests/test_differential build/cascade_driver_cuda.so`, where nvcc is), copy
 * build/tests/test_differential and build/cascade_driver_cuda.so into one directory there (the
 * binary links the core statically; it needs libcmocka.so.0, libm and libdl only), and run
 *
 *   CX_DIFF_DIR=. CX_DIFF_DRIVERS=cuda CX_DIFF_REQUIRE=cuda ./test_differential
 *
 * (CX_DIFF_VERBOSE=1 lists every claim with its cases; the last lines give one summary per
 * device, and the failures, the first 60, with the elements that differ.)
 *
 * To add a driver's tolerances, see tolerance_table below; to add an op, give it a generator in
 * generator_for(). */
#include <dirent.h>
#include <stdio.h>
#include <time.h>

#include "test_util.h"

#include "../core/graph.h"

#ifndef CX_BUILD_DIR
#define CX_BUILD_DIR "build"
#endif

/* ==== tolerances ============================================================================
 *
 * How closely a device must agree with the cpu, by (driver, op, result type). The first rule
 * that matches wins, so put a driver's own rules before the general ones. Whatever the rule:
 * results must have the same type and shape; integer and u8 results are compared exactly; NaN
 * equals NaN (any payload, any sign) except under BITWISE; an infinity must be the same
 * infinity; bitwise equal values always agree.
 *
 *   BITWISE        every bit, NaN payloads included: the test driver (the cpu's own kernels) and
 *                  the layout ops, which move elements without reading them
 *   EXACT          the same value: bitwise, except that a NaN agrees with any NaN. A GPU makes
 *                  the NaNs it computes canonical (PTX's 0x7fffffff, 0x7fff), where the cpu keeps
 *                  the sign and payload of the NaN it was given; Cascade promises neither
 *   ULP(n)         at most n units in the last place of the result type apart (+0 and -0 are
 *                  0 apart), e.g. transcendental functions whose libraries round differently
 *   CLOSE(k, m)    |device - cpu| <= k * eps * L * (|cpu| + M): for results that sum, where the
 *                  order of summation is the driver's. eps is the result type's machine epsilon;
 *                  L the length of the longest sum: the elements reduced (sum, mean, logsumexp
 *                  ...), the contracted size (dot), the axis (softmax), 1 for the elementwise
 *                  composites (gelu ...), the largest input's size for anything else; M the scale
 *                  of the terms: with m = IN, the largest finite |input| (dot, dense, conv and
 *                  the norms: the product of the first two inputs'; elementwise composites: each
 *                  element's own |input|), at least 1; with m = ONE, 1 (results that are
 *                  normalised, such as softmax).
 *
 * To add a driver: add rules with its name first, e.g.
 *     {"mydriver", "exp,log", ANY_TYPE, ULP(3)},   exp and log within 3 ulp of the cpu
 *     {"mydriver", "@reduce", F16 | BF16, CLOSE(16, IN)},  any op of kind REDUCE, half types
 * ops: a comma-separated list of op names, "@kind" for every op of a kind (@unary,
 * @unary_float, @binary, @binary_float, @compare, @logical, @select, @cast, @reduce, @argreduce,
 * @layout, @dot, @create, @linalg, @composite), or NULL for every op; types: a mask of result
 * types. */

typedef enum { TOL_BITWISE, TOL_EXACT, TOL_ULP, TOL_CLOSE } tol_kind;

typedef struct {
    tol_kind kind;
    double n;         /* ULP: units; CLOSE: k */
    bool input_scale; /* CLOSE: M is the inputs' scale (else 1) */
} tolerance;

#define BITWISE     ((tolerance){TOL_BITWISE, 0, false})
#define EXACT       ((tolerance){TOL_EXACT, 0, false})
#define ULP(u)      ((tolerance){TOL_ULP, (u), false})
#define CLOSE(k, m) ((tolerance){TOL_CLOSE, (k), (m)})
#define IN          true
#define ONE         false

#define T(t)     (1u << CX_##t)
#define F16      T(F16)
#define BF16     T(BF16)
#define F32      T(F32)
#define F64      T(F64)
#define HALF     (F16 | BF16)
#define FLOATS   (F16 | BF16 | F32 | F64)
#define ANY_TYPE 0u

typedef struct {
    const char *driver; /* NULL: every driver */
    const char *ops;    /* NULL: every op; else names and @kinds, comma-separated */
    unsigned types;     /* result types; 0: every type */
    tolerance tol;
} tol_rule;

static const tol_rule tolerance_table[] = {
    /* The test driver runs the cpu driver's own kernels: it must agree bit for bit. */
    {"test", NULL, ANY_TYPE, BITWISE},

    /* OpenCL C's accuracy requirements (OpenCL C spec, "Relative Error as ULPs", full profile,
     * f32), plus one ulp for the cpu's libm. f64 bounds are tighter there; the general rules
     * below cover them. */
    {"opencl", "divide", F32, ULP(4)},
    {"opencl", "sqrt,exp,expm1,log,log1p", F32, ULP(4)},
    {"opencl", "sin,cos,rsqrt,tanh,sigmoid,atan2", F32, ULP(7)},
    {"opencl", "erf,pow", F32, ULP(17)},

    /* Moving, comparing, choosing, counting: nothing is rounded, so nothing may differ; what
     * only moves elements moves their bits. */
    {NULL, "@layout", ANY_TYPE, BITWISE},
    {NULL, "@compare,@logical,@select,@cast,@argreduce", ANY_TYPE, EXACT},
    /* sorting moves elements: the same bits in the same places */
    {NULL, "@sort,indexed_put", ANY_TYPE, BITWISE},
    {NULL, "window_max,window_min,cumulative_max,cumulative_min", ANY_TYPE, EXACT},
    {NULL, "full,iota,eye,random_uniform,reduce_max,reduce_min,all,any,relu", ANY_TYPE, EXACT},
    {NULL, "negate,abs,sign,floor,ceil,round,max,min", ANY_TYPE, EXACT},
    /* One IEEE operation, correctly rounded: exact in f32/f64. Half types computed in f32 and
     * rounded once more may differ from a native half kernel by one ulp (double rounding). */
    {NULL, "add,subtract,multiply", F32 | F64, EXACT},
    {NULL, "add,subtract,multiply,divide,sqrt,reciprocal", HALF, ULP(1)},
    {NULL, "divide,sqrt", F32 | F64, ULP(1)},
    /* Philox is exact; Box-Muller goes through log, sqrt and sin/cos (philox.h). */
    {NULL, "random_normal", ANY_TYPE, ULP(8)},
    /* Transcendental functions: libraries differ by a few ulp. */
    {NULL, "@unary,@unary_float,@binary,@binary_float", HALF, ULP(2)},
    {NULL, "@unary,@unary_float,@binary,@binary_float", F32 | F64, ULP(4)},
    /* Results normalised to about 1 whatever the scale of the inputs. */
    {NULL, "softmax,log_softmax,hard_sigmoid", ANY_TYPE, CLOSE(8, ONE)},
    /* product: relative to the result (the terms' scale says nothing about it). */
    {NULL, "product,cumulative_product", ANY_TYPE, CLOSE(8, ONE)},
    /* Everything else sums: reductions, dot, dense, norms, convolutions, losses; and the
     * elementwise composites (gelu, silu, elu, softplus ...), for which L is 1 and M the
     * element's own |input|: a chain of a few roundings, with cancellation where the formula
     * subtracts. */
    {NULL, NULL, ANY_TYPE, CLOSE(8, IN)},
};

static const char *const kind_names[] = {
    [CX_KIND_UNARY] = "unary",
    [CX_KIND_UNARY_FLOAT] = "unary_float",
    [CX_KIND_BINARY] = "binary",
    [CX_KIND_BINARY_FLOAT] = "binary_float",
    [CX_KIND_COMPARE] = "compare",
    [CX_KIND_LOGICAL] = "logical",
    [CX_KIND_SELECT] = "select",
    [CX_KIND_CAST] = "cast",
    [CX_KIND_REDUCE] = "reduce",
    [CX_KIND_ARGREDUCE] = "argreduce",
    [CX_KIND_SORT] = "sort",
    [CX_KIND_LINALG] = "linalg",
    [CX_KIND_SCAN] = "scan",
    [CX_KIND_LAYOUT] = "layout",
    [CX_KIND_DOT] = "dot",
    [CX_KIND_CREATE] = "create",
    [CX_KIND_COMPOSITE] = "composite",
};

static bool name_in_list(const char *list, const char *name, cx_op_kind kind) {
    size_t n = strlen(name);
    for (const char *p = list; *p;) {
        const char *end = strchr(p, ',');
        size_t len = end ? (size_t)(end - p) : strlen(p);
        if (p[0] == '@') {
            const char *k = kind_names[kind];
            if (k && len - 1 == strlen(k) && strncmp(p + 1, k, len - 1) == 0) return true;
        } else if (len == n && strncmp(p, name, n) == 0) {
            return true;
        }
        p += len + (end ? 1 : 0);
    }
    return false;
}

static tolerance tolerance_for(const char *driver, cx_op_id op, cx_dtype result) {
    if (!cx_dtype_is_float(result)) return EXACT;
    for (size_t k = 0; k < sizeof tolerance_table / sizeof tolerance_table[0]; k++) {
        const tol_rule *r = &tolerance_table[k];
        if (r->driver && strcmp(r->driver, driver) != 0) continue;
        if (r->types && !(r->types & (1u << result))) continue;
        if (r->ops && !name_in_list(r->ops, cx_op_table[op].name, cx_op_table[op].kind)) continue;
        return r->tol;
    }
    return EXACT;
}

/* The first name in a rule's list that is neither an op nor an @kind, or NULL (a typo would
 * otherwise make a rule silently match nothing). */
static const char *unknown_rule_name(const char *list, char *buf, size_t len) {
    for (const char *p = list; *p;) {
        const char *end = strchr(p, ',');
        size_t n = end ? (size_t)(end - p) : strlen(p);
        snprintf(buf, len, "%.*s", (int)n, p);
        bool known = cx_op_find(buf) >= 0;
        for (size_t k = 0; k < sizeof kind_names / sizeof kind_names[0] && !known && buf[0] == '@';
             k++)
            known = kind_names[k] && strcmp(buf + 1, kind_names[k]) == 0;
        if (!known) return buf;
        p += n + (end ? 1 : 0);
    }
    return NULL;
}

/* ==== comparing values ======================================================================= */

static double type_epsilon(cx_dtype t) {
    switch (t) {
    case CX_F16: return 0x1p-10;
    case CX_BF16: return 0x1p-7;
    case CX_F32: return 0x1p-23;
    default: return 0x1p-52;
    }
}

/* The raw bits of element i of a buffer of type t. */
static uint64_t bits_at(cx_dtype t, const void *buf, int64_t i) {
    switch (cx_dtype_size(t)) {
    case 1: return ((const uint8_t *)buf)[i];
    case 2: return ((const uint16_t *)buf)[i];
    case 4: return ((const uint32_t *)buf)[i];
    default: return ((const uint64_t *)buf)[i];
    }
}

static int float_exp_bits(cx_dtype t) {
    return t == CX_F16 ? 5 : t == CX_BF16 ? 8 : t == CX_F32 ? 8 : 11;
}

/* The bits of a float as an integer in the order of the values (+0 and -0 both 0). */
static int64_t ordinal(cx_dtype t, uint64_t w) {
    int bits = (int)cx_dtype_size(t) * 8;
    uint64_t sign = UINT64_C(1) << (bits - 1);
    int64_t mag = (int64_t)(w & (sign - 1));
    return (w & sign) ? -mag : mag;
}

static bool is_nan_bits(cx_dtype t, uint64_t w) {
    int bits = (int)cx_dtype_size(t) * 8, e = float_exp_bits(t), m = bits - 1 - e;
    uint64_t mag = w & ((UINT64_C(1) << (bits - 1)) - 1);
    return mag > (((UINT64_C(1) << e) - 1) << m);
}

/* Whether device value `d` agrees with cpu value `c` (element bits `wd`, `wc` of type t). */
static bool values_agree(cx_dtype t, uint64_t wd, uint64_t wc, double d, double c, tolerance tol,
                         double length, double scale) {
    if (wd == wc) return true;
    if (tol.kind == TOL_BITWISE || !cx_dtype_is_float(t)) return false;
    bool nd = is_nan_bits(t, wd), nc = is_nan_bits(t, wc);
    if (nd || nc) return nd && nc;
    if (tol.kind == TOL_EXACT) return false;
    if (isinf(d) || isinf(c)) return d == c;
    if (tol.kind == TOL_ULP) return llabs(ordinal(t, wd) - ordinal(t, wc)) <= (long long)tol.n;
    double m = tol.input_scale ? scale : 1.0;
    return fabs(d - c) <= tol.n * type_epsilon(t) * length * (fabs(c) + m);
}

/* ==== random inputs ========================================================================== */

typedef struct {
    uint64_t s;
} rng;

static uint64_t next_u64(rng *r) {
    uint64_t z = (r->s += UINT64_C(0x9E3779B97F4A7C15));
    z = (z ^ (z >> 30)) * UINT64_C(0xBF58476D1CE4E5B9);
    z = (z ^ (z >> 27)) * UINT64_C(0x94D049BB133111EB);
    return z ^ (z >> 31);
}

/* Uniform in [0, 1). */
static double uniform(rng *r) {
    return (double)(next_u64(r) >> 11) * 0x1p-53;
}

/* Uniform integer in [0, n). */
static int64_t below(rng *r, int64_t n) {
    return (int64_t)(next_u64(r) % (uint64_t)n);
}

/* The kinds of values an input holds (mirrors the domains of capability_honesty_test.exs). */
typedef enum {
    D_ANY,      /* floats: mostly [-10, 10), some +-1e6, ~8% special (+-0, +-inf, NaN, subnormal) */
    D_FINITE,   /* [-10, 10) */
    D_POSITIVE, /* [0.1, 5.1) */
    D_UNIT,     /* [0, 1) */
    D_SMALL,    /* small integers, in floats with NaN and -0 */
    D_WIDE,     /* values at the edges of every type: for casts */
    D_LOW,      /* clip's lower bounds */
    D_HIGH,     /* clip's upper bounds */
    D_PRED,     /* predicates: 0, 1 (u8: also 2 and 255) */
    D_EXPONENT, /* integer powers 0..5 */
    D_ONEHOT,   /* one_hot indices -1..5 */
} domain;

static double subnormal(cx_dtype t) {
    return t == CX_F16 ? 3.0e-6 : t == CX_F64 ? 5.0e-310 : 5.0e-39;
}

static double float_value(rng *r, domain d, cx_dtype t) {
    static const double wide[] = {
        0.5,   1.5,    2.5,     -0.5,         -1.7,         255.5,  256.0, 300.0, -300.0,
        65504, 65520,  70000,   2147483647.0, 3.0e9,        -3.0e9, 1e19,  -1e19, 3.0e38,
        1e-8,  6.0e-8, 1.0e300, 1e-45,        4294967296.0, -129.0, 128.5};
    double specials[] = {0.0, -0.0, INFINITY, -INFINITY, NAN, subnormal(t), -subnormal(t)};
    int nspecials = (int)(sizeof specials / sizeof specials[0]);
    switch (d) {
    case D_ANY: {
        int64_t k = below(r, 100);
        if (k < 8) return specials[below(r, nspecials)];
        if (k < 12) return (uniform(r) - 0.5) * 2.0e6;
        return (uniform(r) - 0.5) * 20;
    }
    case D_FINITE: return (uniform(r) - 0.5) * 20;
    case D_POSITIVE: return 0.1 + uniform(r) * 5;
    case D_UNIT: return uniform(r);
    case D_LOW: return -uniform(r) * 4;
    case D_HIGH: return uniform(r) * 4;
    case D_ONEHOT: return (double)(below(r, 8) - 2);
    case D_EXPONENT: return (double)below(r, 6);
    case D_PRED: return (double)below(r, 2);
    case D_SMALL: {
        int64_t k = below(r, 20);
        return k == 0 ? NAN : k == 1 ? -0.0 : (double)(below(r, 7) - 3);
    }
    case D_WIDE: {
        int64_t k = below(r, 10);
        if (k < 2) return specials[below(r, nspecials)];
        if (k < 7)
            return wide[below(r, (int64_t)(sizeof wide / sizeof wide[0]))] * (below(r, 2) ? 1 : -1);
        return (uniform(r) - 0.5) * 600;
    }
    }
    return 0;
}

/* Integers of any width; unsigned types get the u8 domains (values wrap into narrow types when
 * stored: every driver sees the same bits). */
static int64_t int_value(rng *r, domain d, cx_dtype t) {
    bool u8 = !cx_dtype_is_float(t) && !cx_dtype_is_signed(t);
    int bits = cx_dtype_bits(t);
    switch (d) {
    case D_ANY:
    case D_WIDE: {
        if (t != CX_U8 && below(r, 10) == 0) {
            /* the type's extremes: for unsigned types lo is 0 and hi all ones (-1 as bits) */
            int64_t lo = u8 ? 0 : bits == 64 ? INT64_MIN : -(INT64_C(1) << (bits - 1));
            int64_t hi = u8           ? (bits == 64 ? -1 : (INT64_C(1) << bits) - 1)
                         : bits == 64 ? INT64_MAX
                                      : (INT64_C(1) << (bits - 1)) - 1;
            int64_t pick[] = {lo, hi, 0, u8 ? hi - 1 : -1, lo + 1};
            return pick[below(r, 5)];
        }
        if (bits == 8) return u8 ? below(r, 256) : below(r, 256) - 128;
        return u8 ? below(r, 2001) : below(r, 2001) - 1000;
    }
    case D_PRED: return u8 ? (int64_t[]){0, 0, 1, 1, 2, 255}[below(r, 6)] : below(r, 2);
    case D_SMALL: return u8 ? below(r, 4) : below(r, 7) - 3;
    case D_EXPONENT: return below(r, 6);
    case D_FINITE: return u8 ? below(r, 16) : below(r, 21) - 10;
    case D_POSITIVE: return 1 + below(r, 5);
    case D_UNIT: return below(r, 2);
    case D_LOW: return u8 ? below(r, 3) : -1 - below(r, 4);
    case D_HIGH: return 3 + below(r, 4);
    case D_ONEHOT: return u8 ? below(r, 7) : below(r, 8) - 2;
    }
    return 0;
}

/* ==== cases ================================================================================== */

#define MAX_CASE_IN 6

typedef struct {
    int rank;
    int64_t d[CX_MAX_RANK];
} shape;

#define SH(...) ((shape){(int)(sizeof((int64_t[]){__VA_ARGS__}) / sizeof(int64_t)), {__VA_ARGS__}})
#define SCALAR  ((shape){0, {0}})

typedef struct {
    cx_op_id op;
    int n_in;
    cx_tensor *in[MAX_CASE_IN]; /* on the cpu */
    cx_params ps;
} dcase;

typedef struct {
    cx_op_id op;
    cx_dtype t; /* the claim's type */
    rng r;
    dcase *c;
    int n, cap;
} gen;

static dcase *new_case(gen *g) {
    if (g->n == g->cap) {
        g->cap = g->cap ? 2 * g->cap : 32;
        g->c = realloc(g->c, sizeof(dcase) * (size_t)g->cap);
        assert_non_null(g->c);
    }
    dcase *c = &g->c[g->n++];
    memset(c, 0, sizeof *c);
    c->op = g->op;
    return c;
}

static void free_cases(gen *g) {
    for (int k = 0; k < g->n; k++)
        for (int j = 0; j < g->c[k].n_in; j++) tu_drop(g->c[k].in[j]);
    free(g->c);
    g->c = NULL;
    g->n = g->cap = 0;
}

static void store_value(cx_dtype t, void *buf, int64_t i, double f, int64_t v) {
    switch (t) {
    case CX_F16: ((uint16_t *)buf)[i] = cx_f16_from_f64(f); break;
    case CX_BF16: ((uint16_t *)buf)[i] = cx_bf16_from_f64(f); break;
    case CX_F32: ((float *)buf)[i] = (float)f; break;
    case CX_F64: ((double *)buf)[i] = f; break;
    default: /* integers: the low bytes of v (little-endian), which wraps it */
        memcpy((char *)buf + (size_t)i * cx_dtype_size(t), &v, cx_dtype_size(t));
        break;
    }
}

/* A cpu tensor of type t and shape s holding values of domain d. */
static cx_tensor *tensor_of(gen *g, cx_dtype t, shape s, domain d) {
    cx_tensor *x = malloc(sizeof *x);
    assert_non_null(x);
    cx_desc desc = tu_desc(t, s.rank, s.d);
    cx_status st = {0};
    assert_int_equal(cx_tensor_init(x, cx_device_cpu(), &desc, &st), CX_OK);
    bool fl = cx_dtype_is_float(t);
    if (cx_dtype_is_complex(t)) {
        /* each part a value of the real type's domain */
        cx_dtype rt = cx_dtype_to_real(t);
        for (int64_t i = 0; i < 2 * x->numel; i++)
            store_value(rt, x->data, i, float_value(&g->r, d, rt), 0);
        return x;
    }
    for (int64_t i = 0; i < x->numel; i++)
        store_value(t, x->data, i, fl ? float_value(&g->r, d, t) : 0,
                    fl ? 0 : int_value(&g->r, d, t));
    return x;
}

/* A cpu tensor of s64 (or type t) holding integers below `bound` at each position; with
 * `axes`/`n_axes`, the last axis of s lists coordinates along those axes of `within`. */
static cx_tensor *indices_of(gen *g, cx_dtype t, shape s, int64_t bound, const shape *within,
                             const int64_t *axes) {
    cx_tensor *x = tensor_of(g, t, s, D_UNIT);
    int last = s.rank ? (int)s.d[s.rank - 1] : 1;
    for (int64_t i = 0; i < x->numel; i++) {
        int64_t b = within ? within->d[axes[i % last]] : bound;
        store_value(t, x->data, i, 0, b > 0 ? below(&g->r, b) : 0);
    }
    return x;
}

static void arg(dcase *c, cx_tensor *x) {
    assert_true(c->n_in < MAX_CASE_IN);
    c->in[c->n_in++] = x;
}

static void put_shape(cx_params *ps, cx_param_id id, shape s) {
    cx_param_put_ints(ps, id, s.d, s.rank);
}

static dcase *unary_case(gen *g, shape s, domain d) {
    dcase *c = new_case(g);
    arg(c, tensor_of(g, g->t, s, d));
    return c;
}

/* ---- the grids ---- */

/* R12: a rank-12 shape (any rank up to CX_MAX_RANK runs on every driver), 72 elements: in the
 * binary ops' broadcasting pairs (strided at rank 12), reductions and the layout ops, not in the
 * grid every elementwise op runs (contiguous, it is the rank-1 loop), which would lengthen the
 * suite's sanitised and valgrind runs by a tenth */
#define R12 SH(2, 1, 3, 1, 1, 2, 1, 1, 3, 1, 2, 1)

static const shape *shapes_grid(int *n) {
    static shape grid[9];
    grid[0] = SCALAR;
    grid[1] = SH(1);
    grid[2] = SH(7);
    grid[3] = SH(17);
    grid[4] = SH(0);
    grid[5] = SH(2, 0);
    grid[6] = SH(3, 7);
    grid[7] = SH(2, 3, 5);
    grid[8] = SH(1, 17, 1);
    *n = 9;
    return grid;
}

/* ---- elementwise ---- */

static void gen_elementwise(gen *g) {
    cx_op_kind kind = cx_op_table[g->op].kind;
    int arity = cx_op_tensor_arity(g->op), n;
    const shape *grid = shapes_grid(&n);
    bool logical = kind == CX_KIND_LOGICAL || kind == CX_KIND_COMPARE;
    if (arity == 1) {
        for (int k = 0; k < n; k++) unary_case(g, grid[k], logical ? D_SMALL : D_ANY);
        return;
    }
    domain dl = logical ? D_SMALL : D_ANY, dr = dl;
    if (g->op == CX_OP_POW && !cx_dtype_is_float(g->t)) dl = D_SMALL, dr = D_EXPONENT;
    shape pairs[][2] = {{SH(3, 1), SH(1, 7)},
                        {SH(7), SH(3, 7)},
                        {SCALAR, SH(17)},
                        {SH(2, 3, 5), SH(5)},
                        {SH(2, 1, 5), SH(3, 1)},
                        {SH(0, 1), SH(1, 7)},
                        {SH(1), SH(0)},
                        {SH(17, 1), SCALAR},
                        {SH(7), SCALAR},
                        {SCALAR, SH(3, 7)},
                        {R12, SH(1, 1, 3, 1, 1, 1, 1, 1, 3, 1, 1, 1)}};
    for (int k = 0; k < n; k++) {
        dcase *c = new_case(g);
        arg(c, tensor_of(g, g->t, grid[k], dl));
        arg(c, tensor_of(g, g->t, grid[k], dr));
    }
    for (size_t k = 0; k < sizeof pairs / sizeof pairs[0]; k++) {
        dcase *c = new_case(g);
        arg(c, tensor_of(g, g->t, pairs[k][0], dl));
        arg(c, tensor_of(g, g->t, pairs[k][1], dr));
    }
}

static void gen_select(gen *g) {
    int n;
    const shape *grid = shapes_grid(&n);
    shape extra[][3] = {{SH(7), SCALAR, SH(3, 7)},      {SH(3, 1), SH(1, 7), SH(3, 7)},
                        {SCALAR, SH(7), SH(7)},         {SH(0), SH(0), SCALAR},
                        {SH(2, 3, 5), SH(5), SH(3, 1)}, {SH(3, 7), SH(3, 7), SCALAR}};
    for (int k = 0; k < n + 6; k++) {
        const shape *s = k < n ? (shape[3]){grid[k], grid[k], grid[k]} : extra[k - n];
        dcase *c = new_case(g);
        arg(c, tensor_of(g, CX_U8, s[0], D_PRED));
        arg(c, tensor_of(g, g->t, s[1], D_ANY));
        arg(c, tensor_of(g, g->t, s[2], D_ANY));
    }
}

static void gen_clip(gen *g) {
    int n;
    const shape *grid = shapes_grid(&n);
    shape extra[][3] = {{SH(7), SCALAR, SCALAR},
                        {SH(3, 7), SH(7), SH(3, 1)},
                        {SH(0), SCALAR, SCALAR},
                        {SH(2, 3, 5), SH(3, 1), SCALAR},
                        {SH(17), SCALAR, SCALAR}};
    for (int k = 0; k < n + 5; k++) {
        const shape *s = k < n ? (shape[3]){grid[k], grid[k], grid[k]} : extra[k - n];
        dcase *c = new_case(g);
        arg(c, tensor_of(g, g->t, s[0], D_ANY));
        arg(c, tensor_of(g, g->t, s[1], D_LOW));
        arg(c, tensor_of(g, g->t, s[2], D_HIGH));
    }
}

static void gen_as_type(gen *g) {
    shape grid[] = {SCALAR, SH(7), SH(17), SH(0), SH(3, 5), SH(67)};
    for (int to = 0; to < CX_DTYPE_COUNT; to++)
        for (size_t k = 0; k < sizeof grid / sizeof grid[0]; k++) {
            dcase *c = unary_case(g, grid[k], D_WIDE);
            cx_param_put_int(&c->ps, CX_P_TYPE, to);
        }
}

/* ---- reductions ---- */

typedef struct {
    shape s;
    int n_axes; /* -1: not given (all axes) */
    int64_t axes[3];
} reduce_spec;

static const reduce_spec reduce_grid[] = {
    {SCALAR, -1, {0}},
    {SCALAR, 0, {0}},
    {{1, {7}}, -1, {0}},
    {{1, {17}}, 1, {0}},
    {{1, {0}}, 1, {0}},
    {{2, {3, 0}}, 1, {1}},
    {{2, {3, 0}}, 1, {0}},
    {{2, {3, 7}}, 1, {1}},
    {{2, {3, 7}}, 1, {0}},
    {{2, {3, 7}}, 2, {0, 1}},
    {{3, {2, 3, 5}}, 2, {0, 2}},
    {{3, {2, 3, 5}}, 1, {1}},
    {{3, {1, 17, 1}}, 1, {-2}},
    {{2, {4, 65}}, 1, {1}},
    {{12, {2, 1, 3, 1, 1, 2, 1, 1, 3, 1, 2, 1}}, 3, {0, 5, 10}},
    {{12, {2, 1, 3, 1, 1, 2, 1, 1, 3, 1, 2, 1}}, -1, {0}},
};

static void gen_reduce_grid(gen *g, domain d, bool ddof) {
    for (size_t k = 0; k < sizeof reduce_grid / sizeof reduce_grid[0]; k++) {
        const reduce_spec *r = &reduce_grid[k];
        dcase *c = unary_case(g, r->s, d);
        if (r->n_axes >= 0) cx_param_put_ints(&c->ps, CX_P_AXES, r->axes, r->n_axes);
        bool keep = k % 2 == 1;
        cx_param_put(&c->ps, CX_P_KEEP_AXES)->i[0] = keep;
        if (ddof && keep) cx_param_put_float(&c->ps, CX_P_DDOF, 1.0);
    }
}

static void gen_reduce(gen *g) {
    bool small = g->op == CX_OP_ALL || g->op == CX_OP_ANY || g->op == CX_OP_PRODUCT;
    gen_reduce_grid(g, small ? D_SMALL : D_ANY, false);
}

/* Lines with ties and NaN (small values), both directions, every axis; argsort into s64 and
 * narrower types. */
static void gen_sort(gen *g) {
    struct {
        shape s;
        int axis;
    } grid[] = {{SH(7), 0},        {SCALAR, 0},      {SH(17), -1},      {SH(3, 7), 1},
                {SH(3, 7), 0},     {SH(2, 3, 5), 1}, {SH(2, 3, 5), -1}, {SH(2, 0), 1},
                {SH(1, 17, 1), 1}, {SH(4, 65), 1},   {SH(300, 3), 0},   {SH(2, 700), 1}};
    for (size_t k = 0; k < sizeof grid / sizeof grid[0]; k++)
        for (int dir = 0; dir < 2; dir++) {
            dcase *c = unary_case(g, grid[k].s, k % 3 == 2 ? D_ANY : D_SMALL);
            cx_param_put_int(&c->ps, CX_P_AXIS, grid[k].axis);
            cx_param_put_int(&c->ps, CX_P_DIRECTION, dir);
            if (g->op == CX_OP_ARGSORT && k % 4 == 3) cx_param_put_int(&c->ps, CX_P_TYPE, CX_S32);
        }
}

static void gen_argreduce(gen *g) {
    struct {
        shape s;
        int axis; /* 99: not given */
    } grid[] = {{SH(7), 99},   {SCALAR, 99},      {SH(17), 0},      {SH(3, 7), 1},
                {SH(3, 7), 0}, {SH(3, 7), 99},    {SH(2, 3, 5), 1}, {SH(2, 3, 5), -1},
                {SH(2, 0), 0}, {SH(1, 17, 1), 1}, {SH(4, 65), 1}};
    for (size_t k = 0; k < sizeof grid / sizeof grid[0]; k++) {
        dcase *c = unary_case(g, grid[k].s, D_SMALL);
        cx_param_put_int(&c->ps, CX_P_TIE_BREAK, (int64_t)(k % 2));
        cx_param_put(&c->ps, CX_P_KEEP_AXIS)->i[0] = (k / 2) % 2 == 1;
        if (grid[k].axis != 99) cx_param_put_int(&c->ps, CX_P_AXIS, grid[k].axis);
    }
    /* rows long enough for a driver to split over threads: with NaN and ties (small values),
     * then without NaN (floats) and with ties (integers) */
    struct {
        shape s;
        int axis;
    } rows[] = {{SH(2, 700), 1}, {SH(1000), 99}, {SH(300, 3), 0}};
    for (int k = 0; k < 6; k++) {
        dcase *c = unary_case(g, rows[k % 3].s, k < 3 ? D_SMALL : D_FINITE);
        cx_param_put_int(&c->ps, CX_P_TIE_BREAK, (int64_t)(k % 2));
        if (rows[k % 3].axis != 99) cx_param_put_int(&c->ps, CX_P_AXIS, rows[k % 3].axis);
    }
}

/* ---- layout ---- */

static void gen_reshape(gen *g) {
    shape grid[][2] = {{SH(2, 3, 5), SH(5, 6)}, {SH(7), SH(1, 7, 1)}, {SCALAR, SH(1, 1)},
                       {SH(1), SCALAR},         {SH(0, 3), SH(3, 0)}, {SH(17), SH(17)},
                       {SH(3, 7), SH(21)},      {R12, SH(6, 12)},     {SH(6, 12), R12}};
    for (size_t k = 0; k < sizeof grid / sizeof grid[0]; k++)
        put_shape(&unary_case(g, grid[k][0], D_ANY)->ps, CX_P_SHAPE, grid[k][1]);
}

/* Cases of one tensor and an optional axes list (rank -1: not given). */
typedef struct {
    shape s;
    shape axes; /* rank -1: not given */
} shape_axes;

#define NO_AXES ((shape){-1, {0}})

static void gen_shape_axes(gen *g, const shape_axes *grid, size_t n, cx_param_id id) {
    for (size_t k = 0; k < n; k++) {
        dcase *c = unary_case(g, grid[k].s, D_ANY);
        if (grid[k].axes.rank >= 0) put_shape(&c->ps, id, grid[k].axes);
    }
}

static void gen_transpose(gen *g) {
    shape_axes grid[] = {{SH(3, 7), NO_AXES},
                         {SH(2, 3, 5), SH(1, 0, 2)},
                         {SH(2, 3, 5), SH(2, 0, 1)},
                         {SCALAR, NO_AXES},
                         {SH(7), NO_AXES},
                         {SH(0, 3), NO_AXES},
                         {SH(1, 17, 1), SH(2, 1, 0)},
                         {SH(2, 1, 3, 5), SH(3, 1, 0, 2)},
                         {SH(9, 13), NO_AXES},
                         {R12, SH(11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0)},
                         {R12, SH(2, 0, 8, 1, 3, 4, 5, 6, 7, 9, 10, 11)}};
    gen_shape_axes(g, grid, sizeof grid / sizeof grid[0], CX_P_AXES);
}

static void gen_squeeze(gen *g) {
    shape_axes grid[] = {{SH(1, 7, 1), NO_AXES}, {SH(1, 7, 1), SH(0)}, {SH(1), NO_AXES},
                         {SH(3, 1, 0), SH(1)},   {SH(1, 1), NO_AXES},  {SH(7), NO_AXES},
                         {SH(17, 1), SH(-1)}};
    gen_shape_axes(g, grid, sizeof grid / sizeof grid[0], CX_P_AXES);
}

static void gen_reverse(gen *g) {
    shape_axes grid[] = {{SH(7), NO_AXES},        {SH(3, 7), SH(0)},     {SH(3, 7), SH(1)},
                         {SH(2, 3, 5), SH(0, 2)}, {SCALAR, NO_AXES},     {SH(0, 3), NO_AXES},
                         {SH(17), SH(0)},         {R12, SH(0, 2, 8, 10)}};
    gen_shape_axes(g, grid, sizeof grid / sizeof grid[0], CX_P_AXES);
}

static void gen_broadcast(gen *g) {
    struct {
        shape s, to, axes;
    } grid[] = {{SH(7), SH(3, 7), NO_AXES},          {SCALAR, SH(2, 3), NO_AXES},
                {SH(3, 1), SH(3, 7), NO_AXES},       {SH(3), SH(3, 4), SH(0)},
                {SH(1, 7), SH(0, 7), NO_AXES},       {SH(3, 7), SH(2, 3, 7), NO_AXES},
                {SH(2, 1, 5), SH(2, 7, 5), NO_AXES}, {SH(5), SH(5, 1, 17), SH(0)},
                {SH(17), SH(17), NO_AXES},           {SH(3, 1, 2), R12, SH(2, 5, 10)}};
    for (size_t k = 0; k < sizeof grid / sizeof grid[0]; k++) {
        dcase *c = unary_case(g, grid[k].s, D_ANY);
        put_shape(&c->ps, CX_P_SHAPE, grid[k].to);
        if (grid[k].axes.rank >= 0) put_shape(&c->ps, CX_P_AXES, grid[k].axes);
    }
}

static void gen_slice(gen *g) {
    struct {
        shape s, start, lengths, strides;
    } grid[] = {
        {SH(17), SH(1), SH(5), SH(3)},
        {SH(3, 7), SH(1, 2), SH(2, 4), NO_AXES},
        {SH(3, 7), SH(0, 0), SH(2, 3), SH(2, 3)},
        {SH(17), SH(15), SH(5), NO_AXES},
        {SH(2, 3, 5), SH(0, 1, 1), SH(2, 2, 3), SH(1, 2, 2)},
        {SH(7), SH(0), SH(0), NO_AXES},
        {SH(0, 3), SH(0, 0), SH(0, 2), NO_AXES},
        {SCALAR, SCALAR, SCALAR, NO_AXES},
        {SH(1, 17, 1), SH(0, 3, 0), SH(1, 7, 1), SH(1, 7, 1)},
        {R12, SH(1, 0, 1, 0, 0, 0, 0, 0, 0, 0, 1, 0), SH(1, 1, 2, 1, 1, 2, 1, 1, 3, 1, 1, 1),
         SH(1, 1, 1, 1, 1, 1, 1, 1, 2, 1, 1, 1)},
    };
    for (size_t k = 0; k < sizeof grid / sizeof grid[0]; k++) {
        dcase *c = unary_case(g, grid[k].s, D_ANY);
        put_shape(&c->ps, CX_P_START, grid[k].start);
        put_shape(&c->ps, CX_P_LENGTHS, grid[k].lengths);
        if (grid[k].strides.rank >= 0) put_shape(&c->ps, CX_P_STRIDES, grid[k].strides);
    }
}

static void gen_put_slice(gen *g) {
    struct {
        shape s, start, u;
    } grid[] = {{SH(17), SH(3), SH(5)},
                {SH(3, 7), SH(1, 5), SH(2, 4)},
                {SH(2, 3, 5), SH(0, 1, 1), SH(1, 2, 3)},
                {SH(7), SH(2), SH(0)},
                {SCALAR, SCALAR, SCALAR},
                {SH(1, 17, 1), SH(0, 16, 0), SH(1, 1, 1)},
                {SH(3, 7), SH(0, 0), SH(3, 7)}};
    for (size_t k = 0; k < sizeof grid / sizeof grid[0]; k++) {
        dcase *c = unary_case(g, grid[k].s, D_ANY);
        arg(c, tensor_of(g, g->t, grid[k].u, D_ANY));
        put_shape(&c->ps, CX_P_START, grid[k].start);
    }
}

static void gen_pad(gen *g) {
    struct {
        shape s;
        int n;
        int64_t pads[9];
    } grid[] = {
        {SH(7), 3, {1, 2, 0}},
        {SH(7), 3, {-2, 1, 1}},
        {SH(3, 5), 6, {0, 0, 2, -1, -1, 0}},
        {SH(3, 5), 6, {2, -1, 1, 1, 3, 3}},
        {SCALAR, 0, {0}},
        {SH(0), 3, {1, 1, 0}},
        {SH(0), 3, {1, 1, 3}},
        {SH(2, 3, 5), 9, {1, 0, 0, 0, 0, 1, -2, -2, 0}},
        {SH(7), 3, {-3, -4, 0}},
        {SH(17), 3, {-5, -4, 2}},
    };
    double value = cx_dtype_is_float(g->t) ? -1.5 : 7;
    for (size_t k = 0; k < sizeof grid / sizeof grid[0]; k++) {
        dcase *c = unary_case(g, grid[k].s, D_ANY);
        cx_param_put_ints(&c->ps, CX_P_PADS, grid[k].pads, grid[k].n);
        if (cx_dtype_is_float(g->t))
            cx_param_put_float(&c->ps, CX_P_VALUE, value);
        else
            cx_param_put_int(&c->ps, CX_P_VALUE, (int64_t)value);
    }
}

static void gen_concatenate(gen *g) {
    struct {
        int n;
        shape s[3];
        int axis;
    } grid[] = {{3, {SH(7), SH(1), SH(17)}, 0},
                {2, {SH(3, 7), SH(3, 1)}, 1},
                {2, {SH(2, 3), SH(0, 3)}, 0},
                {2, {SH(2, 3, 5), SH(2, 3, 5)}, 2},
                {1, {SH(7)}, 0},
                {2, {SH(1), SH(0)}, 0},
                {3, {SH(2, 3, 5), SH(2, 1, 5), SH(2, 4, 5)}, -2},
                {2, {R12, R12}, 8}};
    for (size_t k = 0; k < sizeof grid / sizeof grid[0]; k++) {
        dcase *c = new_case(g);
        for (int j = 0; j < grid[k].n; j++) arg(c, tensor_of(g, g->t, grid[k].s[j], D_ANY));
        cx_param_put_int(&c->ps, CX_P_AXIS, grid[k].axis);
    }
}

static void gen_take(gen *g) {
    struct {
        shape s, idx;
        int axis;
    } grid[] = {{SH(7), SH(5), 0},    {SH(3, 7), SH(2, 4), 1}, {SH(3, 7), SCALAR, 0},
                {SH(3, 7), SH(0), 1}, {SH(17), SH(17), 0},     {SH(2, 3, 5), SH(3), 2}};
    for (size_t k = 0; k < sizeof grid / sizeof grid[0]; k++) {
        dcase *c = unary_case(g, grid[k].s, D_ANY);
        arg(c, indices_of(g, CX_S64, grid[k].idx, grid[k].s.d[grid[k].axis], NULL, NULL));
        cx_param_put_int(&c->ps, CX_P_AXIS, grid[k].axis);
    }
}

/* the cumulative ops: along each axis of a few shapes, both directions; lines long enough for
 * the blas driver to split rows across its threads */
static void gen_scan(gen *g) {
    struct {
        shape s;
        int axis;
    } grid[] = {{SCALAR, 0},   {SH(7), 0},       {SH(3, 7), 1},    {SH(3, 7), 0},
                {SH(2, 0), 1}, {SH(4, 3, 5), 1}, {SH(40, 500), 1}, {SH(600, 4, 8), 2}};
    for (size_t k = 0; k < sizeof grid / sizeof grid[0]; k++)
        for (int rev = 0; rev < 2; rev++) {
            /* products of many values: near 1, so that the lines stay finite and away from 0 */
            domain d = g->op == CX_OP_CUMULATIVE_PRODUCT ? D_UNIT : D_ANY;
            dcase *c = unary_case(g, grid[k].s, d);
            cx_param_put_int(&c->ps, CX_P_AXIS, grid[k].axis);
            cx_param_put_int(&c->ps, CX_P_REVERSE, rev);
        }
}

static void gen_take_along_axis(gen *g) {
    struct {
        shape s;
        int64_t n; /* the indices' size along the axis */
        int axis;
    } grid[] = {{SH(7), 5, 0},       {SH(3, 7), 4, 1},     {SH(3, 7), 0, 1},
                {SH(4, 3, 5), 2, 1}, {SH(5, 2), 6, 0},     {SH(2, 3, 17), 17, 2},
                {SH(40, 500), 9, 1}, {SH(600, 4, 8), 3, 2}};
    for (size_t k = 0; k < sizeof grid / sizeof grid[0]; k++) {
        dcase *c = unary_case(g, grid[k].s, D_ANY);
        shape is = grid[k].s;
        is.d[grid[k].axis] = grid[k].n;
        arg(c, indices_of(g, CX_S64, is, grid[k].s.d[grid[k].axis], NULL, NULL));
        cx_param_put_int(&c->ps, CX_P_AXIS, grid[k].axis);
    }
}

static void gen_gather(gen *g) {
    struct {
        shape s, batch, axes;
        bool given;
    } grid[] = {{SH(3, 7), SH(5), SH(0, 1), false},
                {SH(3, 7), SH(4), SH(1), true},
                {SH(2, 3, 5), SH(2, 3), SH(0, 1), false},
                {SH(2, 3, 5), SH(2), SH(0, 2), true},
                {SH(7), SH(0), SH(0), false},
                {SH(17), SCALAR, SH(0), true}};
    for (size_t k = 0; k < sizeof grid / sizeof grid[0]; k++) {
        dcase *c = unary_case(g, grid[k].s, D_ANY);
        shape idx = grid[k].batch;
        idx.d[idx.rank++] = grid[k].axes.rank;
        arg(c, indices_of(g, CX_S64, idx, 0, &grid[k].s, grid[k].axes.d));
        if (grid[k].given) put_shape(&c->ps, CX_P_AXES, grid[k].axes);
    }
}

/* indexed_add/indexed_put: gather's grid, with updates of the shape the indices ask for; few
 * distinct positions, so that updates collide (summed in order, or the last written). */
static void gen_indexed(gen *g) {
    struct {
        shape s, batch, axes;
        bool given;
    } grid[] = {{SH(3, 7), SH(5), SH(0, 1), false},
                {SH(3, 7), SH(4), SH(1), true},
                {SH(2, 3, 5), SH(2, 3), SH(0, 1), false},
                {SH(2, 3, 5), SH(9), SH(0, 2), true},
                {SH(7), SH(0), SH(0), false},
                {SH(4), SH(40), SH(0), false},
                {SH(2, 0), SH(3), SH(0), true}};
    for (size_t k = 0; k < sizeof grid / sizeof grid[0]; k++) {
        dcase *c = unary_case(g, grid[k].s, D_FINITE);
        shape idx = grid[k].batch, up = grid[k].batch;
        idx.d[idx.rank++] = grid[k].axes.rank;
        arg(c, indices_of(g, CX_S64, idx, 0, &grid[k].s, grid[k].axes.d));
        for (int a = 0; a < grid[k].s.rank; a++) {
            bool used = false;
            for (int j = 0; j < grid[k].axes.rank; j++) used |= grid[k].axes.d[j] == a;
            if (!used) up.d[up.rank++] = grid[k].s.d[a];
        }
        arg(c, tensor_of(g, g->t, up, D_FINITE));
        if (grid[k].given) put_shape(&c->ps, CX_P_AXES, grid[k].axes);
    }
}

/* svd_packed of finite values, full matrices and thin: distinct singular values, whose vectors
 * are unique up to the sign the canonical form fixes (a rank-deficient matrix's null vectors
 * are the library's: test_cpu_linalg.c checks them). lu_factor and eigh_packed of finite
 * values: no ties between candidate pivots (small integers
 * have them, and which of two equal magnitudes wins then depends on the rounding of the
 * elimination: FMA or not, AVX-512 or AVX2 kernels) and distinct eigenvalues (the eigenvectors
 * are then unique up to the sign, which the canonical form fixes); the cpu kernel's ties and
 * singular matrices are in test_cpu_linalg.c. Triangular solves on both sides, with matrices
 * and vectors, every option, of matrices whose diagonal (25) dominates the other triangle's
 * [-10, 10): well conditioned, so that drivers that sum in another order stay close. Integer
 * types run in f32. */
static void gen_linalg(gen *g) {
    if (g->op == CX_OP_SVD_PACKED) { /* tall, wide, square and batched; full and thin */
        shape grid[] = {SH(1, 1), SH(3, 3), SH(2, 5, 3), SH(0, 4, 4), SH(4, 9), SH(2, 1, 3, 2)};
        for (size_t k = 0; k < sizeof grid / sizeof grid[0]; k++)
            for (int full = 0; full < 2; full++)
                cx_param_put_int(&unary_case(g, grid[k], D_FINITE)->ps, CX_P_FULL_MATRICES, full);
        return;
    }
    if (g->op == CX_OP_LU_FACTOR || g->op == CX_OP_EIGH_PACKED) {
        shape grid[] = {SH(1, 1), SH(3, 3), SH(2, 5, 5), SH(0, 4, 4), SH(9, 9), SH(2, 1, 3, 3)};
        for (size_t k = 0; k < sizeof grid / sizeof grid[0]; k++) unary_case(g, grid[k], D_FINITE);
        return;
    }
    struct {
        shape a, b;
        bool left;
    } grid[] = {{SH(3, 3), SH(3, 2), true},       {SH(2, 4, 4), SH(2, 4), true},
                {SH(2, 4, 4), SH(2, 4, 3), true}, {SH(5, 5), SH(2, 5), false},
                {SH(2, 3, 3), SH(2, 3), false},   {SH(1, 1), SH(1), true},
                {SH(3, 3), SH(3, 0), true},       {SH(0, 2, 2), SH(0, 2, 2), false}};
    for (size_t k = 0; k < sizeof grid / sizeof grid[0]; k++)
        for (int opt = 0; opt < 4; opt++) {
            dcase *c = unary_case(g, grid[k].a, D_FINITE);
            int64_t m = grid[k].a.d[grid[k].a.rank - 1];
            for (int64_t i = 0; i < c->in[0]->numel; i++)
                if ((i % (m * m)) % (m + 1) == 0) store_value(g->t, c->in[0]->data, i, 25, 25);
            arg(c, tensor_of(g, g->t, grid[k].b, D_FINITE));
            cx_param_put_int(&c->ps, CX_P_LOWER, opt & 1);
            cx_param_put_int(&c->ps, CX_P_LEFT_SIDE, grid[k].left);
            cx_param_put_int(&c->ps, CX_P_TRANSFORM_A, opt >> 1);
        }
}

/* window reductions: windows, strides, dilations and padding on every axis, ranks 1 to 3 */
/* window_scatter_max/min: the source has one element per window (its shape given here) */
static void gen_window_scatter(gen *g) {
    struct {
        shape s, w, str, src;
        int64_t pad[6]; /* pad[0] == -9: not given */
    } grid[] = {
        {SH(7), SH(2), SH(2), SH(3), {-9}},
        {SH(7), SH(3), SH(1), SH(7), {1, 1}},
        {SH(3, 7), SH(2, 2), SH(1, 2), SH(3, 4), {0, 1, 1, 0}},
        {SH(2, 4, 6), SH(1, 2, 2), SH(1, 2, 2), SH(2, 2, 3), {-9}},
        {SH(4), SH(6), SH(1), SH(0), {-9}},
    };
    for (size_t k = 0; k < sizeof grid / sizeof grid[0]; k++) {
        dcase *c = unary_case(g, grid[k].s, D_SMALL);
        arg(c, tensor_of(g, g->t, grid[k].src, D_FINITE));
        put_shape(&c->ps, CX_P_WINDOW, grid[k].w);
        put_shape(&c->ps, CX_P_STRIDES, grid[k].str);
        if (cx_dtype_is_float(g->t))
            cx_param_put_float(&c->ps, CX_P_VALUE, 0.5);
        else
            cx_param_put_int(&c->ps, CX_P_VALUE, 1);
        if (grid[k].pad[0] != -9)
            cx_param_put_ints(&c->ps, CX_P_PADDING, grid[k].pad, 2 * grid[k].s.rank);
    }
}

static void gen_window(gen *g) {
    if (g->op == CX_OP_WINDOW_SCATTER_MAX || g->op == CX_OP_WINDOW_SCATTER_MIN) {
        gen_window_scatter(g);
        return;
    }
    struct {
        shape s, w, str, dil;
        int64_t pad[6]; /* low, high per axis; pad[0] == -9: not given (:valid) */
    } grid[] = {
        {SH(7), SH(2), SH(1), SH(1), {-9}},
        {SH(7), SH(3), SH(2), SH(1), {1, 1}},
        {SH(3, 7), SH(2, 2), SH(1, 2), SH(1, 1), {0, 1, 1, 0}},
        {SH(3, 7), SH(1, 3), SH(1, 1), SH(1, 2), {-9}},
        {SH(2, 3, 5), SH(1, 2, 2), SH(1, 2, 2), SH(1, 1, 1), {0, 0, 1, 1, 0, 1}},
        {SH(2, 3, 5), SH(2, 3, 2), SH(1, 1, 3), SH(1, 1, 2), {0, 0, 0, 2, 2, 0}},
        {SH(4), SH(6), SH(1), SH(1), {-9}},
        {SH(0, 3), SH(1, 2), SH(1, 1), SH(1, 1), {-9}},
    };
    for (size_t k = 0; k < sizeof grid / sizeof grid[0]; k++) {
        dcase *c = unary_case(g, grid[k].s, cx_dtype_is_float(g->t) ? D_ANY : D_SMALL);
        put_shape(&c->ps, CX_P_WINDOW, grid[k].w);
        put_shape(&c->ps, CX_P_STRIDES, grid[k].str);
        put_shape(&c->ps, CX_P_WINDOW_DILATIONS, grid[k].dil);
        if (grid[k].pad[0] != -9)
            cx_param_put_ints(&c->ps, CX_P_PADDING, grid[k].pad, 2 * grid[k].s.rank);
    }
}

/* ---- dot ---- */

static void gen_dot(gen *g) {
    domain d = cx_dtype_is_float(g->t) ? D_FINITE : D_SMALL;
    shape pairs[][2] = {{SH(3, 7), SH(7, 5)},    {SH(7), SH(7)},         {SH(3, 7), SH(7)},
                        {SH(7), SH(7, 5)},       {SH(1, 17), SH(17, 1)}, {SH(0, 7), SH(7, 3)},
                        {SH(3, 0), SH(0, 4)},    {SH(2, 64), SH(64, 3)}, {SH(2, 65), SH(65, 3)},
                        {SH(2, 3, 8), SH(8, 5)}, {SCALAR, SH(3, 7)},     {R12, SH(1, 4)}};
    for (size_t k = 0; k < sizeof pairs / sizeof pairs[0]; k++) {
        dcase *c = new_case(g);
        arg(c, tensor_of(g, g->t, pairs[k][0], d));
        arg(c, tensor_of(g, g->t, pairs[k][1], d));
    }
    /* special values through the products */
    dcase *c = new_case(g);
    arg(c, tensor_of(g, g->t, SH(2, 7), D_ANY));
    arg(c, tensor_of(g, g->t, SH(7, 3), D_ANY));
    /* batch and contracting axes (dot/6) */
    struct {
        shape a, ca, ba, b, cb, bb;
    } grid[] = {
        {SH(2, 3, 5), SH(2), SH(0), SH(2, 5, 4), SH(1), SH(0)},
        {SH(4, 2, 3), SH(2), SH(1), SH(2, 3, 7), SH(1), SH(0)},
        {SH(3, 5, 13), SH(1, 2), SCALAR, SH(5, 13, 2), SH(0, 1), SCALAR},
        {SH(2, 9, 8), SH(1, 2), SH(0), SH(2, 8, 9), SH(2, 1), SH(0)},
        {SH(2, 1, 17), SH(2), SH(0), SH(2, 17), SH(1), SH(0)},
        {SH(0, 3, 4), SH(2), SH(0), SH(0, 4, 2), SH(1), SH(0)},
    };
    for (size_t k = 0; k < sizeof grid / sizeof grid[0]; k++) {
        c = new_case(g);
        arg(c, tensor_of(g, g->t, grid[k].a, d));
        arg(c, tensor_of(g, g->t, grid[k].b, d));
        put_shape(&c->ps, CX_P_CONTRACT_A, grid[k].ca);
        put_shape(&c->ps, CX_P_BATCH_A, grid[k].ba);
        put_shape(&c->ps, CX_P_CONTRACT_B, grid[k].cb);
        put_shape(&c->ps, CX_P_BATCH_B, grid[k].bb);
    }
}

/* ---- creation ---- */

static void gen_full(gen *g) {
    shape shapes[] = {SCALAR, SH(7), SH(0), SH(3, 17), SH(2, 3, 5)};
    double fv[] = {1.5, -0.0, NAN, INFINITY, -3.0e38, 7, 1e-40};
    int64_t iv[] = {7, 0, -1, 255, INT64_C(1) << 40};
    bool fl = cx_dtype_is_float(g->t);
    int n = fl ? 7 : 5;
    for (int k = 0; k < n; k++) {
        dcase *c = new_case(g);
        put_shape(&c->ps, CX_P_SHAPE, shapes[k % 5]);
        cx_param_put_int(&c->ps, CX_P_TYPE, g->t);
        if (fl)
            cx_param_put_float(&c->ps, CX_P_VALUE, fv[k]);
        else
            cx_param_put_int(&c->ps, CX_P_VALUE, iv[k]);
    }
}

static void gen_iota(gen *g) {
    struct {
        shape s;
        int axis; /* 99: not given */
    } grid[] = {{SCALAR, 99},    {SH(7), 99},      {SH(0), 99},  {SH(3, 17), 1},
                {SH(3, 17), 99}, {SH(2, 3, 5), 0}, {SH(300), 99}};
    for (size_t k = 0; k < sizeof grid / sizeof grid[0]; k++) {
        dcase *c = new_case(g);
        put_shape(&c->ps, CX_P_SHAPE, grid[k].s);
        cx_param_put_int(&c->ps, CX_P_TYPE, g->t);
        if (grid[k].axis != 99) cx_param_put_int(&c->ps, CX_P_AXIS, grid[k].axis);
    }
}

static void gen_eye(gen *g) {
    shape grid[] = {SH(1, 1), SH(7, 7), SH(3, 5), SH(5, 3), SH(2, 3, 3), SH(0, 0), SH(2, 0, 4)};
    for (size_t k = 0; k < sizeof grid / sizeof grid[0]; k++) {
        dcase *c = new_case(g);
        put_shape(&c->ps, CX_P_SHAPE, grid[k]);
        cx_param_put_int(&c->ps, CX_P_TYPE, g->t);
    }
}

static void gen_random(gen *g) {
    if (!cx_dtype_is_float(g->t)) return;
    bool normal = g->op == CX_OP_RANDOM_NORMAL;
    struct {
        shape s;
        int64_t key;
        bool params;
    } grid[] = {{SCALAR, 0, false},         {SH(7), 42, false},   {SH(17), 42, true},
                {SH(0), 1, false},          {SH(3, 5), -1, true}, {SH(2, 3, 5), 123456789, false},
                {SH(67), 0x5DEECE66D, true}};
    for (size_t k = 0; k < sizeof grid / sizeof grid[0]; k++) {
        dcase *c = new_case(g);
        put_shape(&c->ps, CX_P_SHAPE, grid[k].s);
        cx_param_put_int(&c->ps, CX_P_TYPE, g->t);
        cx_param_put_int(&c->ps, CX_P_KEY, grid[k].key);
        if (grid[k].params) {
            cx_param_put_float(&c->ps, normal ? CX_P_MEAN : CX_P_MIN, normal ? 1.0 : -2.0);
            cx_param_put_float(&c->ps, normal ? CX_P_STD : CX_P_MAX, normal ? 2.0 : 3.0);
        }
    }
}

/* ---- composites ---- */

/* The composite's own sample (cx_sample_fn): its representative inputs. Indices get values in
 * 0..3; everything else finite values. */
static void gen_sample(gen *g) {
    cx_desc in[8];
    int n_in = 0;
    dcase *c = new_case(g);
    cx_op_table[g->op].sample(g->op, g->t, in, &n_in, &c->ps);
    for (int k = 0; k < n_in; k++) {
        shape s = {in[k].rank, {0}};
        memcpy(s.d, in[k].shape, sizeof(int64_t) * (size_t)in[k].rank);
        arg(c, cx_dtype_is_float(in[k].dtype) ? tensor_of(g, in[k].dtype, s, D_FINITE)
                                              : indices_of(g, in[k].dtype, s, 4, NULL, NULL));
    }
}

/* Elementwise composites (relu, gelu ...): the shapes grid, and each option in turn. */
static void gen_composite_unary(gen *g) {
    gen_sample(g);
    int n;
    const shape *grid = shapes_grid(&n);
    const char *opts = cx_op_table[g->op].opts;
    for (int k = 0; k < n; k++) {
        dcase *c = unary_case(g, grid[k], D_ANY);
        if (k % 2 == 1 && strstr(opts, "alpha:")) cx_param_put_float(&c->ps, CX_P_ALPHA, 0.25);
        if (k % 2 == 1 && strstr(opts, "approximate:"))
            cx_param_put_int(&c->ps, CX_P_APPROXIMATE, 1);
    }
}

static void gen_composite_reduce(gen *g) {
    gen_sample(g);
    gen_reduce_grid(g, D_ANY, strstr(cx_op_table[g->op].opts, "ddof:") != NULL);
}

static void gen_softmax(gen *g) {
    gen_sample(g);
    shape_axes grid[] = {{SH(7), SH(-1)},      {SH(3, 7), SH(0)}, {SH(3, 7), SH(1)},
                         {SH(2, 3, 5), SH(1)}, {SH(0, 3), SH(1)}, {SH(1), SH(0)},
                         {SH(1, 17, 1), SH(1)}};
    for (size_t k = 0; k < sizeof grid / sizeof grid[0]; k++)
        cx_param_put_int(&unary_case(g, grid[k].s, D_ANY)->ps, CX_P_AXIS, grid[k].axes.d[0]);
}

static void gen_layer_norm(gen *g) {
    gen_sample(g);
    cx_dtype t = g->t;
    dcase *c = unary_case(g, SH(3, 7), D_ANY);
    arg(c, tensor_of(g, t, SH(7), D_ANY));
    arg(c, tensor_of(g, t, SH(7), D_ANY));
    c = unary_case(g, SH(2, 3, 5), D_ANY);
    arg(c, tensor_of(g, t, SH(3, 5), D_ANY));
    arg(c, tensor_of(g, t, SH(1, 5), D_ANY));
    cx_param_put_ints(&c->ps, CX_P_AXES, (int64_t[]){1, 2}, 2);
    c = unary_case(g, SH(17), D_FINITE);
    arg(c, tensor_of(g, t, SCALAR, D_FINITE));
    arg(c, tensor_of(g, t, SCALAR, D_FINITE));
    cx_param_put_float(&c->ps, CX_P_EPSILON, 1e-3);
    c = unary_case(g, SH(0, 7), D_ANY);
    arg(c, tensor_of(g, t, SH(7), D_ANY));
    arg(c, tensor_of(g, t, SH(1), D_ANY));
}

static void gen_batch_norm(gen *g) {
    gen_sample(g);
    struct {
        shape s;
        int axis, f;
    } grid[] = {{SH(2, 3, 5), 1, 3}, {SH(4, 3), 1, 3}, {SH(2, 5, 7), 2, 7}, {SH(0, 3), 1, 3}};
    for (size_t k = 0; k < sizeof grid / sizeof grid[0]; k++) {
        dcase *c = unary_case(g, grid[k].s, D_ANY);
        for (int j = 0; j < 4; j++)
            arg(c, tensor_of(g, g->t, SH(grid[k].f), j == 3 ? D_POSITIVE : D_ANY));
        cx_param_put_int(&c->ps, CX_P_AXIS, grid[k].axis);
    }
}

static void gen_dense(gen *g) {
    gen_sample(g);
    shape grid[][3] = {{SH(3, 7), SH(7, 5), SH(5)},
                       {SH(7), SH(7, 2), SH(2)},
                       {SH(2, 3, 7), SH(7, 4), SCALAR},
                       {SH(0, 7), SH(7, 3), SH(3)},
                       {SH(17, 3), SH(3, 1), SCALAR}};
    for (size_t k = 0; k < sizeof grid / sizeof grid[0]; k++)
        for (int act = 0; act < CX_ACTIVATION_COUNT; act++) {
            dcase *c = unary_case(g, grid[k][0], D_FINITE);
            arg(c, tensor_of(g, g->t, grid[k][1], D_FINITE));
            arg(c, tensor_of(g, g->t, grid[k][2], D_ANY));
            if (act) cx_param_put_int(&c->ps, CX_P_ACTIVATION, act);
        }
}

/* recurrent: every cell both ways; batches that split between threads with rows left over, a
 * width that is no multiple of a vector panel, no steps, no batch */
static void gen_recurrent(gen *g) {
    gen_sample(g);
    int64_t grid[][3] = {{3, 1, 5}, {2, 9, 7}, {4, 17, 33}, {0, 2, 3}, {2, 0, 3}};
    for (size_t k = 0; k < sizeof grid / sizeof grid[0]; k++)
        for (int cell = 0; cell < CX_CELL_COUNT; cell++)
            for (int reverse = 0; reverse < 2; reverse++) {
                int64_t t = grid[k][0], b = grid[k][1], h = grid[k][2];
                int64_t w = (cell == CX_CELL_LSTM ? 4 : cell == CX_CELL_GRU ? 3 : 1) * h;
                dcase *c = unary_case(g, SH(t, b, w), D_FINITE);
                arg(c, tensor_of(g, g->t, SH(w, h), D_UNIT));
                arg(c, tensor_of(g, g->t, SH(w), D_UNIT));
                arg(c, tensor_of(g, g->t, SH(b, h), D_UNIT));
                arg(c, tensor_of(g, g->t, SH(b, h), D_UNIT));
                cx_param_put_int(&c->ps, CX_P_CELL, cell);
                cx_param_put_int(&c->ps, CX_P_REVERSE, reverse);
            }
}

static void gen_one_hot(gen *g) {
    gen_sample(g);
    cx_dtype it = cx_dtype_is_float(g->t) ? CX_S64 : g->t;
    shape grid[] = {SCALAR, SH(7), SH(3, 4), SH(0), SH(17)};
    for (size_t k = 0; k < sizeof grid / sizeof grid[0]; k++) {
        dcase *c = new_case(g);
        arg(c, tensor_of(g, it, grid[k], D_ONEHOT));
        cx_param_put_int(&c->ps, CX_P_DEPTH, 5);
        cx_param_put_int(&c->ps, CX_P_TYPE, g->t);
    }
}

static void gen_loss(gen *g) {
    gen_sample(g);
    struct {
        shape s;
        bool logits;
    } grid[] = {{SH(3, 7), false},
                {SH(7), false},
                {SH(2, 3, 4), true},
                {SH(3, 7), true},
                {SH(0, 5), false}};
    bool mse = g->op == CX_OP_MEAN_SQUARED_ERROR;
    for (size_t k = 0; k < sizeof grid / sizeof grid[0]; k++) {
        dcase *c = unary_case(g, grid[k].s, D_UNIT);
        arg(c, tensor_of(g, g->t, grid[k].s, grid[k].logits || mse ? D_ANY : D_UNIT));
        cx_param_put_int(&c->ps, CX_P_REDUCTION, (int64_t)(k % 3));
        if (!mse) cx_param_put(&c->ps, CX_P_FROM_LOGITS)->i[0] = grid[k].logits;
    }
}

/* The shape `op` gives on inputs `a`, `b` with parameters `ps` (for the gradients' inputs). */
static shape inferred(cx_op_id op, const cx_tensor *a, const cx_tensor *b, const cx_params *ps) {
    cx_desc in[2] = {a->desc, b ? b->desc : a->desc}, out;
    cx_dtype compute[2];
    cx_params p = *ps;
    cx_status st = {0};
    if (cx_op_table[op].infer(op, in, b ? 2 : 1, &p, &out, compute, &st) != CX_OK)
        fail_msg("bad %s case: %s", cx_op_table[op].name, st.message);
    shape s = {out.rank, {0}};
    memcpy(s.d, out.shape, sizeof(int64_t) * (size_t)out.rank);
    return s;
}

static shape desc_shape(const cx_tensor *x) {
    shape s = {x->desc.rank, {0}};
    memcpy(s.d, x->desc.shape, sizeof(int64_t) * (size_t)x->desc.rank);
    return s;
}

/* conv2d and its gradients, pooling and its gradients: one grid of geometries each. */
static void gen_conv(gen *g) {
    gen_sample(g);
    cx_dtype t = g->t;
    bool pool = g->op == CX_OP_MAX_POOL2D || g->op == CX_OP_AVG_POOL2D ||
                g->op == CX_OP_MAX_POOL2D_GRAD || g->op == CX_OP_AVG_POOL2D_GRAD;
    for (int k = 0; k < 5; k++) {
        cx_params ps = {0};
        shape xs, ks = SCALAR;
        int64_t win[2] = {2, 2};
        switch (k) {
        case 0: xs = SH(1, 2, 7, 7), ks = SH(3, 2, 3, 3); break;
        case 1:
            xs = pool ? SH(2, 1, 7, 5) : SH(2, 2, 7, 5), ks = SH(4, 1, 3, 2);
            win[0] = 3;
            cx_param_put_ints(&ps, CX_P_STRIDES, (int64_t[]){2, 1}, 2);
            cx_param_put_ints(&ps, CX_P_PADDING, (int64_t[]){1}, 1); /* :same */
            if (!pool) cx_param_put_int(&ps, CX_P_FEATURE_GROUP_SIZE, 2);
            break;
        case 2:
            xs = SH(1, 3, 9, 9), ks = SH(2, 3, 2, 2);
            win[0] = win[1] = 3;
            if (pool) {
                cx_param_put_ints(&ps, CX_P_STRIDES, (int64_t[]){2, 2}, 2);
                cx_param_put_ints(&ps, CX_P_PADDING, (int64_t[]){1, 0, 2, 1}, 4);
            } else {
                cx_param_put_ints(&ps, CX_P_KERNEL_DILATION, (int64_t[]){2, 3}, 2);
                cx_param_put_ints(&ps, CX_P_PADDING, (int64_t[]){1, 0, -1, 2}, 4);
            }
            break;
        case 3:
            xs = SH(1, 5, 5, 2), ks = SH(3, 3, 2, 3);
            win[1] = 3;
            cx_param_put_int(&ps, CX_P_LAYOUT, 1); /* nhwc */
            if (!pool) cx_param_put_ints(&ps, CX_P_STRIDES, (int64_t[]){2, 2}, 2);
            break;
        default: xs = SH(0, 2, 4, 4), ks = SH(1, 2, 3, 3); break;
        }
        if (pool) cx_param_put_ints(&ps, CX_P_WINDOW, win, 2);
        dcase *c = new_case(g);
        c->ps = ps;
        cx_tensor *x = tensor_of(g, t, xs, pool ? D_SMALL : D_FINITE);
        if (g->op == CX_OP_MAX_POOL2D || g->op == CX_OP_AVG_POOL2D) {
            arg(c, x);
        } else if (g->op == CX_OP_CONV2D) {
            arg(c, x);
            arg(c, tensor_of(g, t, ks, D_FINITE));
        } else if (g->op == CX_OP_MAX_POOL2D_GRAD) {
            arg(c, x);
            arg(c, tensor_of(g, t, inferred(CX_OP_MAX_POOL2D, x, NULL, &ps), D_FINITE));
        } else if (g->op == CX_OP_AVG_POOL2D_GRAD) {
            arg(c, tensor_of(g, t, inferred(CX_OP_AVG_POOL2D, x, NULL, &ps), D_FINITE));
            put_shape(&c->ps, CX_P_INPUT_SHAPE, xs);
            tu_drop(x);
        } else {
            cx_tensor *kt = tensor_of(g, t, ks, D_FINITE);
            shape ys = inferred(CX_OP_CONV2D, x, kt, &ps);
            if (g->op == CX_OP_CONV2D_GRAD_INPUT) {
                arg(c, tensor_of(g, t, ys, D_FINITE));
                arg(c, kt);
                put_shape(&c->ps, CX_P_INPUT_SHAPE, desc_shape(x));
                tu_drop(x);
            } else {
                arg(c, x);
                arg(c, tensor_of(g, t, ys, D_FINITE));
                put_shape(&c->ps, CX_P_KERNEL_SHAPE, desc_shape(kt));
                tu_drop(kt);
            }
        }
    }
}

/* ---- which generator ---- */

typedef void (*generator)(gen *g);

/* The case generator of an op, or NULL when it has none (then a claim of it fails). */
/* Rows of the last axis, kept, padded and cut (length), with and without the eps cleanup. */
static void gen_fft(gen *g) {
    struct {
        shape s;
        int64_t length; /* 0: the axis's own */
    } grid[] = {{SH(1), 0},        {SH(7), 0},    {SH(8), 0},      {SH(3, 7), 0},
                {SH(2, 3, 16), 0}, {SH(5), 8},    {SH(17), 4},     {SH(3, 12), 17},
                {SH(2, 0), 3},     {SH(0, 4), 0}, {SH(2, 100), 0}, {SH(1024), 0}};
    for (size_t k = 0; k < sizeof grid / sizeof grid[0]; k++) {
        dcase *c = unary_case(g, grid[k].s, k % 4 == 3 ? D_ANY : D_FINITE);
        if (grid[k].length) cx_param_put_int(&c->ps, CX_P_LENGTH, grid[k].length);
        if (k % 2) cx_param_put_float(&c->ps, CX_P_EPS, 1e-6);
    }
}

static generator generator_for(cx_op_id op) {
    const cx_op_info *info = &cx_op_table[op];
    switch (op) {
    case CX_OP_SELECT: return gen_select;
    case CX_OP_CLIP: return gen_clip;
    case CX_OP_AS_TYPE: return gen_as_type;
    case CX_OP_RESHAPE: return gen_reshape;
    case CX_OP_TRANSPOSE: return gen_transpose;
    case CX_OP_BROADCAST: return gen_broadcast;
    case CX_OP_SQUEEZE: return gen_squeeze;
    case CX_OP_SLICE: return gen_slice;
    case CX_OP_PUT_SLICE: return gen_put_slice;
    case CX_OP_PAD: return gen_pad;
    case CX_OP_REVERSE: return gen_reverse;
    case CX_OP_CONCATENATE: return gen_concatenate;
    case CX_OP_TAKE: return gen_take;
    case CX_OP_GATHER: return gen_gather;
    case CX_OP_TAKE_ALONG_AXIS: return gen_take_along_axis;
    case CX_OP_CUMULATIVE_SUM:
    case CX_OP_CUMULATIVE_PRODUCT:
    case CX_OP_CUMULATIVE_MAX:
    case CX_OP_CUMULATIVE_MIN: return gen_scan;
    case CX_OP_INDEXED_ADD:
    case CX_OP_INDEXED_PUT: return gen_indexed;
    case CX_OP_DOT: return gen_dot;
    case CX_OP_FFT:
    case CX_OP_IFFT: return gen_fft;
    case CX_OP_FULL: return gen_full;
    case CX_OP_IOTA: return gen_iota;
    case CX_OP_EYE: return gen_eye;
    case CX_OP_RANDOM_UNIFORM:
    case CX_OP_RANDOM_NORMAL: return gen_random;
    case CX_OP_SOFTMAX:
    case CX_OP_LOG_SOFTMAX: return gen_softmax;
    case CX_OP_LAYER_NORM: return gen_layer_norm;
    case CX_OP_BATCH_NORM: return gen_batch_norm;
    case CX_OP_DENSE: return gen_dense;
    case CX_OP_ONE_HOT: return gen_one_hot;
    case CX_OP_RECURRENT: return gen_recurrent;
    case CX_OP_CATEGORICAL_CROSS_ENTROPY:
    case CX_OP_BINARY_CROSS_ENTROPY:
    case CX_OP_MEAN_SQUARED_ERROR: return gen_loss;
    case CX_OP_CONV2D:
    case CX_OP_CONV2D_GRAD_INPUT:
    case CX_OP_CONV2D_GRAD_KERNEL:
    case CX_OP_MAX_POOL2D:
    case CX_OP_AVG_POOL2D:
    case CX_OP_MAX_POOL2D_GRAD:
    case CX_OP_AVG_POOL2D_GRAD: return gen_conv;
    default: break;
    }
    switch (info->kind) {
    case CX_KIND_UNARY:
    case CX_KIND_UNARY_FLOAT:
    case CX_KIND_BINARY:
    case CX_KIND_BINARY_FLOAT:
    case CX_KIND_COMPARE:
    case CX_KIND_LOGICAL: return gen_elementwise;
    case CX_KIND_REDUCE: return gen_reduce;
    case CX_KIND_ARGREDUCE: return gen_argreduce;
    case CX_KIND_SORT: return gen_sort;
    case CX_KIND_WINDOW: return gen_window;
    case CX_KIND_LINALG: return gen_linalg;
    case CX_KIND_COMPOSITE:
        /* composites by the shape of their signature; any other one has its sample only */
        if (strcmp(info->args, "tensor:tensor") == 0 &&
            strncmp(info->opts, "axes:axes=nil, keep_axes:bool=false", 35) == 0)
            return gen_composite_reduce;
        if (strcmp(info->args, "tensor:tensor") == 0 && !strstr(info->opts, "axis") &&
            !strstr(info->opts, "type:"))
            return gen_composite_unary;
        return info->sample ? gen_sample : NULL;
    default: return NULL; /* a primitive nobody wrote cases for */
    }
}

/* The cases for (op, t): the same inputs on every device and every run. */
static void generate(gen *g, cx_op_id op, cx_dtype t) {
    memset(g, 0, sizeof *g);
    g->op = op;
    g->t = t;
    uint64_t h = UINT64_C(20250101);
    for (const char *p = cx_op_table[op].name; *p; p++) h = h * 131 + (unsigned char)*p;
    g->r.s = h * 31 + (uint64_t)t;
    generator fn = generator_for(op);
    if (fn) fn(g);
}

/* ==== describing a case ====================================================================== */

static void describe(const dcase *c, char *buf, size_t len) {
    size_t used = (size_t)snprintf(buf, len, "%s(", cx_op_table[c->op].name);
    for (int k = 0; k < c->n_in && used < len; k++) {
        const cx_desc *d = &c->in[k]->desc;
        used += (size_t)snprintf(buf + used, len - used, "%s%s{", k ? ", " : "",
                                 cx_dtype_name(d->dtype));
        for (int j = 0; j < d->rank && used < len; j++)
            used += (size_t)snprintf(buf + used, len - used, "%s%lld", j ? ", " : "",
                                     (long long)d->shape[j]);
        if (used < len) used += (size_t)snprintf(buf + used, len - used, "}");
    }
    bool first = c->n_in == 0;
    for (int id = 0; id < CX_PARAM_COUNT && used < len; id++) {
        if (!cx_param_has(&c->ps, (cx_param_id)id)) continue;
        const cx_param *p = &c->ps.p[id];
        used += (size_t)snprintf(buf + used, len - used, "%s%s: ", first ? "" : ", ",
                                 cx_param_table[id].name);
        first = false;
        switch (cx_param_table[id].kind) {
        case CX_PK_INTS:
            used += (size_t)snprintf(buf + used, len - used, "[");
            for (int j = 0; j < p->n && used < len; j++)
                used += (size_t)snprintf(buf + used, len - used, "%s%lld", j ? ", " : "",
                                         (long long)p->i[j]);
            if (used < len) used += (size_t)snprintf(buf + used, len - used, "]");
            break;
        case CX_PK_NUMBER:
            if (p->is_int)
                used += (size_t)snprintf(buf + used, len - used, "%lld", (long long)p->i[0]);
            else
                used += (size_t)snprintf(buf + used, len - used, "%g", p->f);
            break;
        case CX_PK_TYPE:
            used +=
                (size_t)snprintf(buf + used, len - used, "%s", cx_dtype_name((cx_dtype)p->i[0]));
            break;
        case CX_PK_BOOL:
            used += (size_t)snprintf(buf + used, len - used, "%s", p->i[0] ? "true" : "false");
            break;
        default: used += (size_t)snprintf(buf + used, len - used, "%lld", (long long)p->i[0]);
        }
    }
    if (used < len) snprintf(buf + used, len - used, ")");
}

/* ==== running a claim ======================================================================== */

typedef struct {
    cx_device *dev;
    long long claims, native_claims, shape_claims, cases;
    long long vacuous; /* claims of types the op does not take (creation ops) */
    long long routes[CX_ROUTE_COUNT];
    long long failures;
    char *log; /* the failures, one paragraph each (the first ones) */
    size_t log_len, log_cap;
    double seconds;
} report;

#define MAX_LOGGED_FAILURES 60

static void failure(report *rep, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void failure(report *rep, const char *fmt, ...) {
    rep->failures++;
    if (rep->failures > MAX_LOGGED_FAILURES) return;
    char line[1536];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    size_t n = strlen(line) + 2;
    if (rep->log_len + n + 1 > rep->log_cap) {
        rep->log_cap = (rep->log_len + n + 1) * 2;
        rep->log = realloc(rep->log, rep->log_cap);
        assert_non_null(rep->log);
    }
    memcpy(rep->log + rep->log_len, line, n - 2);
    memcpy(rep->log + rep->log_len + n - 2, "\n\n", 3);
    rep->log_len += n;
}

/* The length L of the longest reduction of a case (tolerance CLOSE): the elements summed into
 * one result for reductions and dot, the largest input's size for anything else. `ps` is
 * normalised (after planning). */
static double reduction_length(const dcase *c, const cx_params *ps) {
    const cx_desc *a = c->n_in ? &c->in[0]->desc : NULL;
    generator gen = generator_for(c->op);
    double len = 1;
    if (cx_op_table[c->op].kind == CX_KIND_REDUCE || gen == gen_composite_reduce) {
        const cx_param *axes = cx_param_get(ps, CX_P_AXES);
        if (!axes) return (double)(cx_desc_numel(a) > 1 ? cx_desc_numel(a) : 1);
        for (int j = 0; j < axes->n; j++) len *= (double)a->shape[axes->i[j]];
        return len < 1 ? 1 : len;
    }
    if (c->op == CX_OP_DOT) {
        const cx_param *ca = cx_param_get(ps, CX_P_CONTRACT_A);
        for (int j = 0; ca && j < ca->n; j++) len *= (double)a->shape[ca->i[j]];
        return len < 1 ? 1 : len;
    }
    if (c->op == CX_OP_SOFTMAX || c->op == CX_OP_LOG_SOFTMAX) {
        int64_t axis = cx_param_has(ps, CX_P_AXIS) ? ps->p[CX_P_AXIS].i[0] : -1;
        if (axis < 0) axis += a->rank;
        len = a->rank && axis >= 0 && axis < a->rank ? (double)a->shape[axis] : 1;
        return len < 1 ? 1 : len;
    }
    if (gen == gen_composite_unary) return 1; /* elementwise: nothing is summed */
    for (int k = 0; k < c->n_in; k++) {
        double n = (double)c->in[k]->numel;
        if (n > len) len = n;
    }
    return len;
}

/* The scale M of a case's terms (tolerance CLOSE with IN): the largest finite |input|, the
 * product of both sides' for dot-like ops. */
static double input_scale(const dcase *c) {
    double prod = 1, best = 0;
    for (int k = 0; k < c->n_in; k++) {
        const cx_tensor *x = c->in[k];
        double m = 0;
        for (int64_t i = 0; i < x->numel; i++) {
            double v = fabs(tu_load(x->desc.dtype, x->data, i));
            if (isfinite(v) && v > m) m = v;
        }
        if (k < 2) prod *= m > 1 ? m : 1;
        if (m > best) best = m;
    }
    bool products = c->op == CX_OP_DOT || c->op == CX_OP_DENSE || c->op == CX_OP_CONV2D ||
                    c->op == CX_OP_CONV2D_GRAD_INPUT || c->op == CX_OP_CONV2D_GRAD_KERNEL ||
                    c->op == CX_OP_LAYER_NORM || c->op == CX_OP_BATCH_NORM;
    return products ? (prod > best ? prod : best) : (best > 1 ? best : 1);
}

static void free_tensor(cx_tensor **x) {
    if (*x) tu_drop(*x);
    *x = NULL;
}

static bool ran_on_cpu(void) {
    for (int op = 0; op <= CX_OP_COUNT; op++)
        for (int r = 0; r < CX_ROUTE_COUNT; r++)
            if (cx_stats_get(0, op, (cx_route)r).calls) return true;
    return false;
}

/* Runs one case on the cpu and on the device and compares. Returns the route it took there
 * (CX_ROUTE_COUNT when it did not run). */
static cx_route run_case(report *rep, const char *where, bool claimed_native, const dcase *c) {
    cx_device *dev = rep->dev, *cpu = cx_device_cpu();
    char label[600];
    describe(c, label, sizeof label);
    cx_status st = {0};
    cx_params ps_cpu = c->ps, ps_dev = c->ps;
    cx_tensor *want = malloc(sizeof *want), *got = malloc(sizeof *got);
    cx_tensor *on_dev[MAX_CASE_IN] = {NULL};
    cx_route route = CX_ROUTE_COUNT;
    void *host = NULL;
    assert_true(want && got);
    cx_tensor_clear(want);
    cx_tensor_clear(got);
    rep->cases++;
    if (cx_run(c->op, cpu, (cx_tensor *const *)c->in, c->n_in, &ps_cpu, want, &st) != CX_OK) {
        failure(rep, "%s, %s: the cpu refused the case (a bad generator?): %s", where, label,
                st.message);
        goto done;
    }
    for (int k = 0; k < c->n_in; k++) {
        on_dev[k] = malloc(sizeof(cx_tensor));
        assert_non_null(on_dev[k]);
        if (cx_transfer(c->in[k], dev, on_dev[k], &st) != CX_OK) {
            free(on_dev[k]);
            on_dev[k] = NULL;
            failure(rep, "%s, %s: transfer of input %d failed: %s", where, label, k, st.message);
            goto done;
        }
    }
    cx_plan plan;
    if (cx_plan_op(c->op, dev, (const cx_tensor *const *)on_dev, c->n_in, &ps_dev, &plan, &st) !=
        CX_OK) {
        failure(rep, "%s, %s: planning on the device failed: %s", where, label, st.message);
        goto done;
    }
    if (plan.device != dev) {
        failure(rep, "%s, %s: planned on %s", where, label, plan.device->name);
        goto done;
    }
    if (claimed_native && plan.route != CX_ROUTE_NATIVE) {
        failure(rep, "%s, %s: claimed native, but routed %s: %s", where, label,
                cx_route_name(plan.route), plan.reason);
        goto done;
    }
    /* what explain says in advance is what runs */
    cx_desc descs[MAX_CASE_IN];
    for (int k = 0; k < c->n_in; k++) descs[k] = on_dev[k]->desc;
    cx_params ps_explain = c->ps;
    cx_explain ex = {0};
    if (cx_explain_op(c->op, dev, descs, c->n_in, &ps_explain, &ex, &st) != CX_OK)
        failure(rep, "%s, %s: explain failed: %s", where, label, st.message);
    else if (ex.n < 1 || ex.steps[0].route != plan.route ||
             ex.steps[0].out.dtype != plan.out.dtype || ex.steps[0].out.rank != plan.out.rank)
        failure(rep, "%s, %s: explain routes it %s, the plan %s", where, label,
                ex.n ? cx_route_name(ex.steps[0].route) : "nowhere", cx_route_name(plan.route));
    cx_explain_free(&ex);
    cx_stats_reset();
    if (cx_run_plan(&plan, on_dev, c->n_in, &ps_dev, got, &st) != CX_OK) {
        failure(rep, "%s, %s: failed on the device (routed %s): %s", where, label,
                cx_route_name(plan.route), st.message);
        goto done;
    }
    route = plan.route;
    bool empty = cx_desc_numel(&plan.out) == 0;
    if (route == CX_ROUTE_NATIVE && !empty) {
        long long n = cx_stats_get(dev->id, c->op, CX_ROUTE_NATIVE).calls;
        if (n != 1)
            failure(rep, "%s, %s: routed native, but stats count %lld native call(s)", where, label,
                    n);
        if (ran_on_cpu())
            failure(rep, "%s, %s: routed native, yet some op ran on the cpu", where, label);
    } else if (!empty && cx_stats_get(dev->id, c->op, route).calls != 1) {
        failure(rep, "%s, %s: routed %s, but stats did not count it", where, label,
                cx_route_name(route));
    }
    if (got->device != dev) {
        failure(rep, "%s, %s: the result lives on %s", where, label, got->device->name);
        goto done;
    }
    const cx_desc *wd = &want->desc, *gd = &got->desc;
    if (gd->dtype != wd->dtype || gd->rank != wd->rank ||
        memcmp(gd->shape, wd->shape, sizeof(int64_t) * (size_t)wd->rank) != 0) {
        char a[64] = "", b[64] = "";
        for (int j = 0; j < gd->rank; j++)
            snprintf(a + strlen(a), sizeof a - strlen(a), "%s%lld", j ? "," : "",
                     (long long)gd->shape[j]);
        for (int j = 0; j < wd->rank; j++)
            snprintf(b + strlen(b), sizeof b - strlen(b), "%s%lld", j ? "," : "",
                     (long long)wd->shape[j]);
        failure(rep, "%s, %s: %s{%s} on the device, %s{%s} on the cpu", where, label,
                cx_dtype_name(gd->dtype), a, cx_dtype_name(wd->dtype), b);
        goto done;
    }
    host = malloc(got->nbytes ? got->nbytes : 1);
    assert_non_null(host);
    if (got->nbytes && cx_tensor_download(got, host, got->nbytes, &st) != CX_OK) {
        failure(rep, "%s, %s: download failed: %s", where, label, st.message);
        goto done;
    }
    /* complex results compare part by part, each as an element of the real type */
    cx_dtype t = cx_dtype_is_complex(wd->dtype) ? cx_dtype_to_real(wd->dtype) : wd->dtype;
    int64_t count = cx_dtype_is_complex(wd->dtype) ? 2 * want->numel : want->numel;
    tolerance tol = tolerance_for(dev->driver_name, c->op, t);
    double length = reduction_length(c, &ps_dev), scale = input_scale(c);
    /* elementwise composites (gelu ...): the scale of each element is its own input's */
    bool own_scale = generator_for(c->op) == gen_composite_unary && c->n_in == 1 &&
                     c->in[0]->numel == want->numel;
    int64_t bad = 0, first[4];
    for (int64_t i = 0; i < count; i++) {
        uint64_t a = bits_at(t, host, i), b = bits_at(t, want->data, i);
        double m = scale;
        if (own_scale) {
            m = fabs(tu_load(c->in[0]->desc.dtype, c->in[0]->data, i));
            m = isfinite(m) && m > 1 ? m : 1;
        }
        if (!values_agree(t, a, b, tu_load(t, host, i), tu_load(t, want->data, i), tol, length, m))
            if (bad++ < 4) first[bad - 1] = i;
    }
    if (bad) {
        char detail[400] = "";
        for (int j = 0; j < (bad < 4 ? bad : 4); j++)
            snprintf(detail + strlen(detail), sizeof detail - strlen(detail),
                     " [%lld] %.9g (0x%llx) vs %.9g (0x%llx);", (long long)first[j],
                     tu_load(t, host, first[j]), (unsigned long long)bits_at(t, host, first[j]),
                     tu_load(t, want->data, first[j]),
                     (unsigned long long)bits_at(t, want->data, first[j]));
        const char *kinds[] = {"exact", "ulp", "close"};
        failure(rep, "%s, %s: %lld of %lld elements differ (%s %g, L %g, M %g); device vs cpu:%s",
                where, label, (long long)bad, (long long)count, kinds[tol.kind], tol.n, length,
                scale, detail);
    }
done:
    free(host);
    for (int k = 0; k < c->n_in; k++) free_tensor(&on_dev[k]);
    free_tensor(&want);
    free_tensor(&got);
    if (route < CX_ROUTE_COUNT) rep->routes[route]++;
    return route;
}

static bool verbose(void) {
    const char *v = getenv("CX_DIFF_VERBOSE");
    return v && *v && strcmp(v, "0") != 0;
}

/* Whether a creation op makes results of type t at all (random_uniform makes floats only):
 * cx_capability passes a creation op's type to the driver unchecked, so a driver may claim a
 * call nobody can make. Such claims are counted apart, not tested. */
static bool takes_type(cx_op_id op, cx_dtype t) {
    if (cx_op_table[op].kind != CX_KIND_CREATE) return true;
    cx_params ps = {0};
    cx_param_put_ints(&ps, CX_P_SHAPE, (int64_t[]){1, 1}, 2);
    cx_param_put_int(&ps, CX_P_TYPE, t);
    cx_param_put_int(&ps, CX_P_KEY, 0);
    cx_param_put_int(&ps, CX_P_VALUE, 0);
    cx_desc out;
    cx_dtype compute[1];
    cx_status st = {0};
    return cx_op_table[op].infer(op, NULL, 0, &ps, &out, compute, &st) == CX_OK;
}

/* What the driver answers for a composite on its sample's compute types. cx_capability routes a
 * composite by its sample's shapes only, and marks no composite shape-dependent: a composite the
 * driver claims for some shapes would look native (or not claimed at all) from there. So for
 * composites the driver itself is asked, as the dispatcher asks it. */
static cx_cap composite_claim(cx_device *dev, cx_op_id op, cx_dtype t) {
    cx_desc in[8], out;
    cx_dtype compute[8];
    int n_in = 0;
    cx_params ps = {0};
    cx_status st = {0};
    cx_op_table[op].sample(op, t, in, &n_in, &ps);
    if (cx_op_table[op].infer(op, in, n_in, &ps, &out, compute, &st) != CX_OK) return CX_CAP_NO;
    /* as the dispatcher: inputs the device cannot convert to the compute types rule it out */
    for (int k = 0; k < n_in; k++)
        if (in[k].dtype != compute[k] &&
            dev->driver->capability(dev->ctx, CX_OP_AS_TYPE, &in[k].dtype, 1) == CX_CAP_NO)
            return CX_CAP_NO;
    cx_cap c = dev->driver->capability(dev->ctx, op, n_in ? compute : &out.dtype, n_in);
    return c == CX_CAP_SHAPE && !dev->driver->refine ? CX_CAP_NO : c;
}

/* Every claim of one device: (op, type) that cx_capability routes native, or native for some
 * shapes (the driver's CX_CAP_SHAPE). */
static void check_device(report *rep) {
    cx_device *dev = rep->dev;
    cx_set_policy(CX_POLICY_ALLOW);
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    char without[1024] = "";
    for (int op = 0; op < CX_OP_COUNT; op++) {
        for (int t = 0; t < CX_DTYPE_COUNT; t++) {
            cx_route route;
            cx_explain ex = {0};
            cx_status st = {0};
            if (cx_capability(dev, (cx_op_id)op, (cx_dtype)t, &route, &ex, &st) != CX_OK) {
                cx_explain_free(&ex);
                continue; /* the op does not take this type */
            }
            bool some_shapes = ex.n > 0 && ex.steps[0].shape_dependent;
            cx_explain_free(&ex);
            if (cx_op_table[op].kind == CX_KIND_COMPOSITE &&
                composite_claim(dev, (cx_op_id)op, (cx_dtype)t) == CX_CAP_SHAPE)
                some_shapes = true;
            if (route != CX_ROUTE_NATIVE && !some_shapes) continue;
            if (!takes_type((cx_op_id)op, (cx_dtype)t)) {
                rep->vacuous++;
                continue;
            }
            rep->claims++;
            some_shapes ? rep->shape_claims++ : rep->native_claims++;
            char where[160];
            snprintf(where, sizeof where, "%s claims (%s, %s) %s", dev->name, cx_op_table[op].name,
                     cx_dtype_name((cx_dtype)t), some_shapes ? "for some shapes" : "native");
            if (!generator_for((cx_op_id)op)) {
                if (!strstr(without, cx_op_table[op].name))
                    snprintf(without + strlen(without), sizeof without - strlen(without), " %s",
                             cx_op_table[op].name);
                failure(rep,
                        "%s: no case generator for %s in c_src/tests/test_differential.c (add "
                        "one to generator_for)",
                        where, cx_op_table[op].name);
                continue;
            }
            gen g;
            generate(&g, (cx_op_id)op, (cx_dtype)t);
            if (g.n == 0) failure(rep, "%s: the generator gave no case for this type", where);
            int native = 0;
            for (int k = 0; k < g.n; k++)
                if (run_case(rep, where, !some_shapes, &g.c[k]) == CX_ROUTE_NATIVE) native++;
            if (some_shapes && g.n > 0 && native == 0)
                failure(rep, "%s: no case of the grid ran natively, so the claim went untested",
                        where);
            if (verbose()) printf("  %-60s %d cases, %d native\n", where, g.n, native);
            free_cases(&g);
        }
    }
    clock_gettime(CLOCK_MONOTONIC, &t1);
    rep->seconds = (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec);
    if (without[0])
        printf("differential: %s claims ops without a generator:%s\n", dev->name, without);
}

/* ==== drivers ================================================================================ */

#define MAX_DRIVERS 16

typedef struct {
    char name[24];
    char path[1024];
} found_driver;

static found_driver drivers[MAX_DRIVERS];
static int n_drivers;
static cx_device *checked[CX_MAX_DEVICES];
static int n_checked;
static char skipped_log[2048];

/* Whether `name` is in the comma-separated list in environment variable `var`. */
static bool listed(const char *var, const char *name) {
    const char *list = getenv(var);
    if (!list || !*list) return false;
    size_t n = strlen(name);
    for (const char *p = list; *p;) {
        const char *end = strchr(p, ',');
        size_t len = end ? (size_t)(end - p) : strlen(p);
        if (len == n && strncmp(p, name, n) == 0) return true;
        p += len + (end ? 1 : 0);
    }
    return false;
}

static void note_skip(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

static void note_skip(const char *fmt, ...) {
    size_t used = strlen(skipped_log);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(skipped_log + used, sizeof skipped_log - used, fmt, ap);
    va_end(ap);
    used = strlen(skipped_log);
    snprintf(skipped_log + used, sizeof skipped_log - used, "\n");
}

static void add_driver(const char *name, const char *path) {
    static char seen[2 * MAX_DRIVERS][24];
    static int n_seen;
    for (int k = 0; k < n_seen; k++)
        if (strcmp(seen[k], name) == 0) return;
    if (n_seen == 2 * MAX_DRIVERS || n_drivers == MAX_DRIVERS) {
        note_skip("  %-8s skipped: more than %d drivers", name, MAX_DRIVERS);
        return;
    }
    snprintf(seen[n_seen++], sizeof seen[0], "%s", name);
    if (getenv("CX_DIFF_DRIVERS") && *getenv("CX_DIFF_DRIVERS") &&
        !listed("CX_DIFF_DRIVERS", name)) {
        note_skip("  %-8s skipped: not in CX_DIFF_DRIVERS", name);
        return;
    }
    if (listed("CX_DIFF_SKIP", name)) {
        note_skip("  %-8s skipped: in CX_DIFF_SKIP", name);
        return;
    }
    snprintf(drivers[n_drivers].name, sizeof drivers[n_drivers].name, "%s", name);
    snprintf(drivers[n_drivers].path, sizeof drivers[n_drivers].path, "%s", path);
    n_drivers++;
}

static int compare_names(const void *a, const void *b) {
    return strcmp((const char *)a, (const char *)b);
}

static void find_drivers(void) {
    const char *dir = getenv("CX_DIFF_DIR");
    if (!dir || !*dir) dir = CX_BUILD_DIR;
    DIR *d = opendir(dir);
    if (d) {
        /* sorted, so that the order does not depend on the file system */
        char names[MAX_DRIVERS * 2][64];
        int n = 0;
        struct dirent *e;
        while ((e = readdir(d)) != NULL && n < MAX_DRIVERS * 2) {
            size_t len = strlen(e->d_name);
            if (strncmp(e->d_name, "cascade_driver_", 15) != 0 || len < 19 || len - 18 > 23 ||
                strcmp(e->d_name + len - 3, ".so") != 0)
                continue;
            snprintf(names[n], sizeof names[n], "%.*s", (int)(len - 18), e->d_name + 15);
            n++;
        }
        closedir(d);
        qsort(names, (size_t)n, sizeof names[0], compare_names);
        for (int k = 0; k < n; k++) {
            char path[1024];
            if (snprintf(path, sizeof path, "%s/cascade_driver_%s.so", dir, names[k]) <
                (int)sizeof path)
                add_driver(names[k], path);
        }
    } else {
        note_skip("  (no directory %s to look for drivers in)", dir);
    }
#ifdef CX_TEST_DRIVER
    add_driver("test", CX_TEST_DRIVER);
#endif
}

static int setup_devices(void **state) {
    (void)state;
    find_drivers();
    cx_driver_spec specs[MAX_DRIVERS];
    for (int k = 0; k < n_drivers; k++)
        specs[k] = (cx_driver_spec){drivers[k].name, drivers[k].path};
    cx_status st = {0};
    if (cx_devices_init(specs, n_drivers, &st) != CX_OK) {
        fprintf(stderr, "differential: cx_devices_init failed: %s\n", st.message);
        return -1;
    }
    for (int id = 1; id < cx_device_count(); id++) {
        cx_device *dev = cx_device_get(id);
        if (!dev->available)
            note_skip("  %-8s unavailable: %s", dev->name, dev->reason);
        else if (n_checked < CX_MAX_DEVICES)
            checked[n_checked++] = dev;
    }
    return 0;
}

/* ==== tests ================================================================================== */

/* The drivers found, the devices that will be checked, what was skipped and why; and every name
 * in CX_DIFF_DRIVERS / CX_DIFF_REQUIRE accounted for. */
static void test_drivers_found(void **state) {
    (void)state;
    printf("differential: drivers found:");
    for (int k = 0; k < n_drivers; k++) printf(" %s (%s)", drivers[k].name, drivers[k].path);
    printf("\ndifferential: devices checked:");
    for (int k = 0; k < n_checked; k++)
        printf(" %s [%s]", checked[k]->name, checked[k]->props.name);
    printf("%s\n",
           n_checked ? "" : " none: no device other than the cpu is available, nothing to compare");
    if (skipped_log[0]) printf("differential: not checked:\n%s", skipped_log);
    fflush(stdout);
    const char *vars[] = {"CX_DIFF_DRIVERS", "CX_DIFF_REQUIRE"};
    for (int v = 0; v < 2; v++) {
        const char *list = getenv(vars[v]);
        if (!list || !*list) continue;
        char copy[512];
        snprintf(copy, sizeof copy, "%s", list);
        for (char *save = NULL, *name = strtok_r(copy, ",", &save); name;
             name = strtok_r(NULL, ",", &save)) {
            bool loaded = false, available = false;
            for (int k = 0; k < n_drivers; k++) loaded |= strcmp(drivers[k].name, name) == 0;
            for (int k = 0; k < n_checked; k++)
                available |= strcmp(checked[k]->driver_name, name) == 0;
            if (!loaded)
                fail_msg("%s names driver %s, but no cascade_driver_%s.so was found (or it is in "
                         "CX_DIFF_SKIP)",
                         vars[v], name, name);
            if (v == 1 && !available)
                fail_msg("CX_DIFF_REQUIRE names driver %s, but it has no available device", name);
        }
    }
}

static void test_device_agrees_with_cpu(void **state) {
    cx_device *dev = *state;
    report rep = {.dev = dev};
    check_device(&rep);
    char vacuous[96] = "";
    if (rep.vacuous)
        snprintf(vacuous, sizeof vacuous, " (and %lld claims of types the op does not take)",
                 rep.vacuous);
    printf("differential: %-8s %lld claims (%lld native, %lld for some shapes), %lld cases "
           "(native %lld, decomposed %lld, cpu_fallback %lld), %lld failure(s), %.2f s%s\n",
           dev->name, rep.claims, rep.native_claims, rep.shape_claims, rep.cases,
           rep.routes[CX_ROUTE_NATIVE], rep.routes[CX_ROUTE_DECOMPOSED],
           rep.routes[CX_ROUTE_FALLBACK], rep.failures, rep.seconds, vacuous);
    fflush(stdout);
    if (rep.failures) {
        fprintf(stderr, "%s", rep.log);
        free(rep.log);
        fail_msg("%s: %lld broken claim case(s)%s", dev->name, rep.failures,
                 rep.failures > MAX_LOGGED_FAILURES ? " (the first ones shown)" : "");
    }
    free(rep.log);
}

/* The generators serve drivers that do not exist yet: every case of every (op, type) the cpu
 * takes must be a valid call today, not only those of the ops some driver claims. */
static void test_generators_make_valid_cases(void **state) {
    (void)state;
    cx_device *cpu = cx_device_cpu();
    long long cases = 0, bad = 0;
    char without[1024] = "";
    for (int op = 0; op < CX_OP_COUNT; op++) {
        if (!generator_for((cx_op_id)op)) {
            snprintf(without + strlen(without), sizeof without - strlen(without), " %s",
                     cx_op_table[op].name);
            continue;
        }
        for (int t = 0; t < CX_DTYPE_COUNT; t++) {
            cx_route route;
            cx_explain ex = {0};
            cx_status st = {0};
            cx_code rc = cx_capability(cpu, (cx_op_id)op, (cx_dtype)t, &route, &ex, &st);
            cx_explain_free(&ex);
            if (rc != CX_OK) continue;
            gen g;
            generate(&g, (cx_op_id)op, (cx_dtype)t);
            if (g.n == 0 && op != CX_OP_RANDOM_UNIFORM && op != CX_OP_RANDOM_NORMAL) {
                printf("  no case for (%s, %s)\n", cx_op_table[op].name, cx_dtype_name(t));
                bad++;
            }
            for (int k = 0; k < g.n; k++) {
                cx_params ps = g.c[k].ps;
                cx_tensor out;
                cases++;
                if (cx_run((cx_op_id)op, cpu, g.c[k].in, g.c[k].n_in, &ps, &out, &st) != CX_OK) {
                    char label[600];
                    describe(&g.c[k], label, sizeof label);
                    if (bad++ < 40) printf("  invalid case %s: %s\n", label, st.message);
                } else {
                    cx_tensor_free(&out);
                }
            }
            free_cases(&g);
        }
    }
    printf("differential: %lld generated cases valid on the cpu%s%s\n", cases - bad,
           without[0] ? "; no generator yet (fails once a device claims them):" : "", without);
    assert_int_equal(bad, 0);
}

/* The tolerances are not exercised by the test driver (it must agree bit for bit): check the
 * comparison itself, so that it is right on the day a real driver needs it. */
static void test_comparison(void **state) {
    (void)state;
    const uint64_t one = 0x3F800000, max = 0x7F7FFFFF, inf = 0x7F800000, qnan = 0x7FC00000;
#define AGREE(w1, w2, tol)                                                                         \
    values_agree(CX_F32, (w1), (w2), cx_f32_from_bits((uint32_t)(w1)),                             \
                 cx_f32_from_bits((uint32_t)(w2)), (tol), 1, 1)
    assert_true(AGREE(one, one, EXACT));
    assert_false(AGREE(one, one + 1, EXACT));
    assert_true(AGREE(one, one + 1, ULP(1)));
    assert_true(AGREE(0, 0x80000000u, ULP(0)));      /* +0 and -0 */
    assert_false(AGREE(one - 1, one + 1, ULP(1)));   /* 2 ulp apart */
    assert_true(AGREE(qnan, 0xFFC00001u, ULP(0)));   /* NaN = NaN, any payload and sign */
    assert_true(AGREE(qnan, 0xFFC00001u, EXACT));    /* ... under EXACT too */
    assert_false(AGREE(qnan, 0xFFC00001u, BITWISE)); /* ... but not bitwise */
    assert_false(AGREE(0, 0x80000000u, EXACT));      /* +0 and -0 are not the same value */
    assert_false(AGREE(qnan, one, ULP(4)));
    assert_false(AGREE(one, qnan, CLOSE(1e9, ONE)));
    assert_false(AGREE(inf, max, ULP(4))); /* infinities exact */
    assert_false(AGREE(inf, inf | 0x80000000u, CLOSE(1e9, ONE)));
    assert_true(AGREE(one + 3, one, CLOSE(2, ONE))); /* 3 ulp = 1.5 eps of 2 * eps * (1 + 1) */
    assert_false(AGREE(one + 30, one, CLOSE(2, ONE)));
#undef AGREE
    /* half types: 1.0 and the next number up */
    assert_true(values_agree(CX_F16, 0x3C00, 0x3C01, 1, 1 + 0x1p-10, ULP(1), 1, 1));
    assert_false(values_agree(CX_BF16, 0x3F80, 0x3F82, 1, 1 + 0x1p-6, ULP(1), 1, 1));
    /* integers: exact whatever the rule */
    assert_false(values_agree(CX_S32, 1, 2, 1, 2, ULP(8), 1, 1));
    /* every name in the table is an op or a kind */
    for (size_t k = 0; k < sizeof tolerance_table / sizeof tolerance_table[0]; k++) {
        char buf[64];
        const char *bad = tolerance_table[k].ops
                              ? unknown_rule_name(tolerance_table[k].ops, buf, sizeof buf)
                              : NULL;
        if (bad)
            fail_msg("tolerance_table[%zu] names %s, which is neither an op nor an @kind", k, bad);
    }
    /* the table: first match wins, by driver, op and type */
    assert_int_equal(tolerance_for("test", CX_OP_EXP, CX_F32).kind, TOL_BITWISE);
    assert_int_equal(tolerance_for("cuda", CX_OP_ADD, CX_F32).kind, TOL_EXACT);
    assert_int_equal(tolerance_for("cuda", CX_OP_ADD, CX_F16).kind, TOL_ULP);
    assert_int_equal(tolerance_for("cuda", CX_OP_EXP, CX_F32).kind, TOL_ULP);
    assert_true(tolerance_for("opencl", CX_OP_ERF, CX_F32).n > 4);
    assert_int_equal(tolerance_for("cuda", CX_OP_SUM, CX_F32).kind, TOL_CLOSE);
    assert_int_equal(tolerance_for("cuda", CX_OP_SUM, CX_S64).kind, TOL_EXACT);
    assert_int_equal(tolerance_for("cuda", CX_OP_TRANSPOSE, CX_F32).kind, TOL_BITWISE);
    assert_int_equal(tolerance_for("cuda", CX_OP_SOFTMAX, CX_F32).kind, TOL_CLOSE);
}

int main(void) {
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (setup_devices(NULL) != 0) return 1;
    int n = 0;
    struct CMUnitTest tests[CX_MAX_DEVICES + 4];
    char names[CX_MAX_DEVICES][64];
    tests[n++] = (struct CMUnitTest)cmocka_unit_test(test_drivers_found);
    tests[n++] = (struct CMUnitTest)cmocka_unit_test(test_comparison);
    tests[n++] = (struct CMUnitTest)cmocka_unit_test(test_generators_make_valid_cases);
    for (int k = 0; k < n_checked; k++) {
        snprintf(names[k], sizeof names[k], "%s agrees with the cpu", checked[k]->name);
        tests[n++] =
            (struct CMUnitTest){names[k], test_device_agrees_with_cpu, NULL, NULL, checked[k]};
    }
    return _cmocka_run_group_tests("differential", tests, (size_t)n, NULL, NULL);
}
