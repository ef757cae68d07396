/* The OpenCL C source of the opencl driver's kernels, generated once per device from the tables
 * below: one kernel per (op, types) so that the op and the types are fixed at compile time.
 *
 * - f16 is storage only: loaded with vload_half into f32, computed in f32, stored with
 *   vstore_half_rte (one rounding, like the cpu driver), so no device needs cl_khr_fp16.
 * - bf16 likewise: the top half of an f32, widened by a shift, computed in f32 and rounded to
 *   nearest even on store with the cpu driver's rules (core/half.h): NaN keeps its sign and top
 *   payload bits and gets the quiet bit, a double rounds to odd into f32 first (one rounding
 *   in all), an integer is rounded once.
 * - Integer arithmetic runs in the unsigned type, which wraps, like the cpu driver.
 * - Sums and softmax denominators accumulate in double where the device has cl_khr_fp64 (the
 *   cpu driver reduces floats in double too), else in float. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "opencl_source.h"

#include "../../core/fused.h"

/* the structs below mirror opencl_driver.h's, whose arrays hold CX_MAX_RANK dimensions */
#define CX_TEXT_(x)  #x
#define CX_TEXT(x)   CX_TEXT_(x)
#define CX_RANK_TEXT CX_TEXT(CX_MAX_RANK)

typedef struct {
    char *s;
    size_t len, cap;
    bool oom;
} text;

/* An empty text with room for cap bytes; false when out of memory. */
static bool text_init(text *b, size_t cap) {
    *b = (text){.s = malloc(cap), .cap = cap};
    if (b->s) b->s[0] = 0;
    return b->s != NULL;
}

static void add(text *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void add(text *b, const char *fmt, ...) {
    if (b->oom) return;
    for (;;) {
        va_list ap;
        va_start(ap, fmt);
        int n = vsnprintf(b->s + b->len, b->cap - b->len, fmt, ap);
        va_end(ap);
        if (n < 0) {
            b->oom = true;
            return;
        }
        if ((size_t)n < b->cap - b->len) {
            b->len += (size_t)n;
            return;
        }
        size_t cap = b->cap * 2 + (size_t)n;
        char *s = realloc(b->s, cap);
        if (!s) {
            b->oom = true;
            return;
        }
        b->s = s;
        b->cap = cap;
    }
}

/* ---- types ---------------------------------------------------------------------------- */

typedef struct {
    const char *tag;     /* kernel-name suffix, and LD_/ST_ macro suffix */
    const char *store;   /* element type in the buffer */
    const char *compute; /* type the kernel computes in */
    const char *uns;     /* unsigned type that integer arithmetic wraps in */
    const char *raw;     /* same-size type values are copied as (select) */
    char cls;            /* 'f' float, 's' signed, 'u' unsigned */
} ocl_type;

static const ocl_type types[CX_DTYPE_COUNT] = {
    [CX_F16] = {"f16", "half", "float", NULL, "ushort", 'f'},
    [CX_BF16] = {"bf16", "ushort", "float", NULL, "ushort", 'f'},
    [CX_F32] = {"f32", "float", "float", NULL, "float", 'f'},
    [CX_F64] = {"f64", "double", "double", NULL, "double", 'f'},
    [CX_U8] = {"u8", "uchar", "uchar", "uint", "uchar", 'u'},
    [CX_S32] = {"s32", "int", "int", "uint", "int", 's'},
    [CX_S64] = {"s64", "long", "long", "ulong", "long", 's'},
};

bool ocl_type_supported(cx_dtype t, bool fp64) {
    return cx_dtype_valid(t) && types[t].tag && (t != CX_F64 || fp64);
}

const char *ocl_type_tag(cx_dtype t) {
    return cx_dtype_valid(t) ? types[t].tag : NULL;
}

/* ---- elementwise expressions: x and y in CT (the compute type), U the unsigned type ----- */

typedef struct {
    const char *f, *s, *u; /* float, signed and unsigned forms; NULL: no kernel */
} ew_expr;

#define NAN_MAX  "x > y || x != x ? x : y"
#define NAN_MIN  "x < y || x != x ? x : y"
#define WRAP(op) "(CT)((U)x " op " (U)y)"
#define SAME(e)                                                                                    \
    { e, e, e }
#define FLOAT(e)                                                                                   \
    { e, NULL, NULL }

static const ew_expr exprs[CX_OP_COUNT] = {
    [CX_OP_NEGATE] = {"-x", "(CT)((U)0 - (U)x)", "(CT)((U)0 - (U)x)"},
    [CX_OP_ABS] = {"fabs(x)", "x < 0 ? (CT)((U)0 - (U)x) : x", "x"},
    [CX_OP_SIGN] = {"x > 0 ? (CT)1 : x < 0 ? (CT)-1 : x", "(CT)((x > 0) - (x < 0))",
                    "(CT)(x != 0)"},
    [CX_OP_EXP] = FLOAT("exp(x)"),
    [CX_OP_EXPM1] = FLOAT("expm1(x)"),
    [CX_OP_LOG] = FLOAT("log(x)"),
    [CX_OP_LOG1P] = FLOAT("log1p(x)"),
    [CX_OP_SQRT] = FLOAT("sqrt(x)"),
    [CX_OP_RSQRT] = FLOAT("(CT)1 / sqrt(x)"),
    [CX_OP_SIN] = FLOAT("sin(x)"),
    [CX_OP_COS] = FLOAT("cos(x)"),
    [CX_OP_TANH] = FLOAT("tanh(x)"),
    /* below zero exp(x) cannot overflow, as in the cpu driver */
    [CX_OP_SIGMOID] = FLOAT("x >= 0 ? (CT)1 / ((CT)1 + exp(-x)) : exp(x) / ((CT)1 + exp(x))"),
    [CX_OP_ERF] = FLOAT("erf(x)"),
    [CX_OP_ERFC] = FLOAT("erfc(x)"),
    /* erf_inv: OpenCL C has none; the negotiation moves it */
    [CX_OP_TAN] = FLOAT("tan(x)"),
    [CX_OP_ASIN] = FLOAT("asin(x)"),
    [CX_OP_ACOS] = FLOAT("acos(x)"),
    [CX_OP_ATAN] = FLOAT("atan(x)"),
    [CX_OP_SINH] = FLOAT("sinh(x)"),
    [CX_OP_COSH] = FLOAT("cosh(x)"),
    [CX_OP_ASINH] = FLOAT("asinh(x)"),
    [CX_OP_ACOSH] = FLOAT("acosh(x)"),
    [CX_OP_ATANH] = FLOAT("atanh(x)"),
    [CX_OP_CBRT] = FLOAT("cbrt(x)"),
    [CX_OP_FLOOR] = {"floor(x)", "x", "x"},
    [CX_OP_CEIL] = {"ceil(x)", "x", "x"},
    [CX_OP_ROUND] = {"round(x)", "x", "x"},
    [CX_OP_RECIPROCAL] = FLOAT("(CT)1 / x"),
    [CX_OP_LOGICAL_NOT] = SAME("x == 0"),
    [CX_OP_IS_NAN] = {"isnan(x) != 0", "(x & 0) != 0", "(x & 0) != 0"},
    [CX_OP_IS_INFINITY] = {"isinf(x) != 0", "(x & 0) != 0", "(x & 0) != 0"},
    /* integer bits; W is the width. Shifts as Elixir's bsl/bsr, like the cpu driver. */
    [CX_OP_BITWISE_NOT] = {NULL, "(CT)~x", "(CT)~x"},
    [CX_OP_POPULATION_COUNT] = {NULL, "(CT)popcount(x)", "(CT)popcount(x)"},
    [CX_OP_COUNT_LEADING_ZEROS] = {NULL, "(CT)clz(x)", "(CT)clz(x)"},
    [CX_OP_BITWISE_AND] = {NULL, "x & y", "x & y"},
    [CX_OP_BITWISE_OR] = {NULL, "x | y", "x | y"},
    [CX_OP_BITWISE_XOR] = {NULL, "x ^ y", "x ^ y"},
    [CX_OP_LEFT_SHIFT] = {NULL,
                          "y >= W ? (CT)0 : y >= 0 ? (CT)((U)x << y) : y <= -W ? "
                          "(x < 0 ? (CT)-1 : (CT)0) : (CT)(x >> -y)",
                          "y >= W ? (CT)0 : (CT)((U)x << y)"},
    [CX_OP_RIGHT_SHIFT] = {NULL,
                           "y >= W ? (x < 0 ? (CT)-1 : (CT)0) : y >= 0 ? (CT)(x >> y) : y <= -W ? "
                           "(CT)0 : (CT)((U)x << -y)",
                           "y >= W ? (CT)0 : (CT)(x >> y)"},
    [CX_OP_QUOTIENT] = {NULL, "y == 0 ? (CT)0 : y == -1 ? (CT)((U)0 - (U)x) : x / y",
                        "y ? x / y : (CT)0"},
    [CX_OP_ADD] = {"x + y", WRAP("+"), WRAP("+")},
    [CX_OP_SUBTRACT] = {"x - y", WRAP("-"), WRAP("-")},
    [CX_OP_MULTIPLY] = {"x * y", WRAP("*"), WRAP("*")},
    [CX_OP_DIVIDE] = FLOAT("x / y"),
    [CX_OP_POW] = {"pow(x, y)", "(CT)ipow_signed(x, y)", "(CT)ipow_wrap(x, y)"},
    [CX_OP_MAX] = {NAN_MAX, "x > y ? x : y", "x > y ? x : y"},
    [CX_OP_MIN] = {NAN_MIN, "x < y ? x : y", "x < y ? x : y"},
    /* x % -1 is 0 anyway, and skipping it avoids INT_MIN % -1 */
    [CX_OP_REMAINDER] = {"fmod(x, y)", "y == 0 || y == -1 ? (CT)0 : x % y", "y ? x % y : (CT)0"},
    [CX_OP_ATAN2] = FLOAT("atan2(x, y)"),
    [CX_OP_EQUAL] = SAME("x == y"),
    [CX_OP_NOT_EQUAL] = SAME("x != y"),
    [CX_OP_LESS] = SAME("x < y"),
    [CX_OP_LESS_EQUAL] = SAME("x <= y"),
    [CX_OP_GREATER] = SAME("x > y"),
    [CX_OP_GREATER_EQUAL] = SAME("x >= y"),
    [CX_OP_LOGICAL_AND] = SAME("(x != 0) & (y != 0)"),
    [CX_OP_LOGICAL_OR] = SAME("(x != 0) | (y != 0)"),
    [CX_OP_LOGICAL_XOR] = SAME("(x != 0) ^ (y != 0)"),
};

const char *ocl_elementwise_expr(cx_op_id op, cx_dtype t) {
    if ((int)op < 0 || op >= CX_OP_COUNT || !cx_dtype_valid(t) || !types[t].tag) return NULL;
    const ew_expr *e = &exprs[op];
    switch (types[t].cls) {
    case 'f': return e->f;
    case 's': return e->s;
    default: return e->u;
    }
}

/* ---- fused chains ---------------------------------------------------------------------- */

/* The chain per element, then either stored (one work-item per element) or, with `reduce`,
 * summed along rows of `cols` elements: a group of RG work-items per row, each summing every
 * RG-th element in double, then the group's sums added pairwise, rounded once to f32 (the cpu
 * sums its f32 values in double too). */
char *ocl_fused_source(const cx_fused_code *c, int n_in, const bool *wide, bool reduce) {
    text b;
    if (!text_init(&b, 4096)) return NULL;
    /* each op rounds its result, as the ops one by one do: no contraction into fma */
    add(&b, "#pragma OPENCL FP_CONTRACT OFF\n#define CT float\n");
    if (reduce)
        add(&b, "#pragma OPENCL EXTENSION cl_khr_fp64 : enable\n#define RG %d\n", OCL_REDUCE_GROUP);
    for (int k = 0; k < c->n; k++) {
        const char *e = ocl_elementwise_expr(c->op[k], CX_F32);
        if (!e) {
            free(b.s);
            return NULL;
        }
        add(&b, "static float op%d(float x, float y) { return %s; }\n", k, e);
    }
    add(&b, "__kernel void fused(__global float *out");
    for (int k = 0; k < n_in; k++) add(&b, ", __global const float *in%d", k);
    if (reduce)
        add(&b, ", const long cols) {\n  __local double part[RG];\n"
                "  long g = get_group_id(0); int l = get_local_id(0);\n  double a = 0.0;\n"
                "  for (long j = l; j < cols; j += RG) {\n    long i = g * cols + j;\n");
    else
        add(&b, ", const long n) {\n  long i = get_global_id(0);\n  if (i >= n) return;\n  {\n");
    for (int k = 0; k < n_in; k++)
        add(&b, "    float v%d = in%d[%s];\n", k, k, wide[k] ? "i" : "0");
    for (int k = 0; k < c->n; k++) {
        add(&b, "    float v%d = op%d(v%d, ", n_in + k, k, c->a[k]);
        if (c->b[k] < 0)
            add(&b, "0.0f);\n");
        else
            add(&b, "v%d);\n", c->b[k]);
    }
    if (reduce)
        add(&b,
            "    a += (double)v%d;\n  }\n  part[l] = a;\n  barrier(CLK_LOCAL_MEM_FENCE);\n"
            "  for (int w = RG / 2; w > 0; w >>= 1) {\n"
            "    if (l < w) part[l] += part[l + w];\n    barrier(CLK_LOCAL_MEM_FENCE);\n  }\n"
            "  if (l == 0) out[g] = (float)part[0];\n}\n",
            n_in + c->n - 1);
    else
        add(&b, "    out[i] = v%d;\n  }\n}\n", n_in + c->n - 1);
    if (b.oom) {
        free(b.s);
        return NULL;
    }
    return b.s;
}

/* ---- reductions ------------------------------------------------------------------------ */

/* The reductions the driver runs, and how each folds: AT is the accumulator type ("F" the float
 * accumulator, "I" long, "B" int for truth values), init, fold of a CT value v into a, and
 * combination of two accumulators. */
typedef struct {
    cx_op_id op;
    const char *name;
} reduce_op;

static const reduce_op reduce_ops[] = {
    {CX_OP_SUM, "sum"},
    {CX_OP_PRODUCT, "product"},
    {CX_OP_REDUCE_MAX, "reduce_max"},
    {CX_OP_REDUCE_MIN, "reduce_min"},
    {CX_OP_ALL, "all"},
    {CX_OP_ANY, "any"},
};

/* The output type of a reduction on t (cx_infer_reduce's rule). */
cx_dtype ocl_reduce_out(cx_op_id op, cx_dtype t) {
    if (op == CX_OP_ALL || op == CX_OP_ANY) return CX_U8;
    if (op == CX_OP_SUM || op == CX_OP_PRODUCT) return cx_dtype_to_aggregate(t);
    return t;
}

static const char *int_min(cx_dtype t) {
    return t == CX_U8 ? "0" : t == CX_S32 ? "(long)INT_MIN" : "LONG_MIN";
}

static const char *int_max(cx_dtype t) {
    return t == CX_U8 ? "255" : t == CX_S32 ? "(long)INT_MAX" : "LONG_MAX";
}

static void reduce_kernel(text *b, cx_op_id op, const char *name, cx_dtype t, bool group) {
    const ocl_type *it = &types[t], *ot = &types[ocl_reduce_out(op, t)];
    bool fl = it->cls == 'f';
    const char *at, *init, *fold, *comb;
    switch (op) {
    case CX_OP_SUM:
        at = fl ? "ACC" : "long";
        init = "0";
        fold = fl ? "a + (AT)v" : "(long)((ulong)a + (ulong)(long)v)";
        comb = fl ? "a + c" : "(long)((ulong)a + (ulong)c)";
        break;
    case CX_OP_PRODUCT:
        at = fl ? "ACC" : "long";
        init = "1";
        fold = fl ? "a * (AT)v" : "(long)((ulong)a * (ulong)(long)v)";
        comb = fl ? "a * c" : "(long)((ulong)a * (ulong)c)";
        break;
    case CX_OP_REDUCE_MAX:
        at = fl ? "CT" : "long";
        init = fl ? "-INFINITY" : int_min(t);
        fold = fl ? "v > a || v != v ? v : a" : "(long)v > a ? (long)v : a";
        comb = fl ? "c > a || c != c ? c : a" : "c > a ? c : a";
        break;
    case CX_OP_REDUCE_MIN:
        at = fl ? "CT" : "long";
        init = fl ? "INFINITY" : int_max(t);
        fold = fl ? "v < a || v != v ? v : a" : "(long)v < a ? (long)v : a";
        comb = fl ? "c < a || c != c ? c : a" : "c < a ? c : a";
        break;
    case CX_OP_ALL:
        at = "int";
        init = "1";
        fold = "a & (v != 0)";
        comb = "a & c";
        break;
    default:
        at = "int";
        init = "0";
        fold = "a | (v != 0)";
        comb = "a | c";
        break;
    }
    add(b,
        "#define CT %s\n#define AT %s\n"
        "__kernel void rd_%s_%s_%s(__global %s *o, __global const %s *x, const cx_rd r) {\n",
        it->compute, at, name, it->tag, group ? "group" : "serial", ot->store, it->store);
    if (group) {
        add(b,
            "  __local AT part[RG];\n"
            "  long g = get_group_id(0); int l = get_local_id(0);\n"
            "  long base = rd_base(&r, g);\n"
            "  AT a = %s;\n"
            "  for (long j = l; j < r.nred; j += RG) { CT v = LD_%s(x, base + rd_off(&r, j)); "
            "a = %s; }\n"
            "  part[l] = a;\n"
            "  barrier(CLK_LOCAL_MEM_FENCE);\n"
            "  for (int w = RG / 2; w > 0; w >>= 1) {\n"
            "    if (l < w) { AT a = part[l], c = part[l + w]; part[l] = %s; }\n"
            "    barrier(CLK_LOCAL_MEM_FENCE);\n"
            "  }\n"
            "  if (l == 0) ST_%s(o, g, part[0]);\n}\n",
            init, it->tag, fold, comb, ot->tag);
    } else {
        add(b,
            "  long g = get_global_id(0); if (g >= r.nout) return;\n"
            "  long base = rd_base(&r, g);\n"
            "  AT a = %s;\n"
            "  for (long j = 0; j < r.nred; j++) { CT v = LD_%s(x, base + rd_off(&r, j)); "
            "a = %s; }\n"
            "  ST_%s(o, g, a);\n}\n",
            init, it->tag, fold, ot->tag);
    }
    add(b, "#undef CT\n#undef AT\n");
}

/* ---- the source ------------------------------------------------------------------------ */

static const char prelude[] =
    "#define LD_f16(p, i) vload_half((i), (p))\n"
    /* NaN is stored as the cpu driver stores it: the sign kept, the quiet bit, no payload */
    "#define ST_f16(p, i, v) do { if (isnan(v)) ((__global ushort *)(p))[i] = signbit(v) ? "
    "(ushort)0xfe00 : (ushort)0x7e00; else vstore_half_rte((v), (i), (p)); } while (0)\n"
    "#define LD_f32(p, i) ((p)[i])\n"
    "#define ST_f32(p, i, v) ((p)[i] = (float)(v))\n"
    "#define LD_f64(p, i) ((p)[i])\n"
    "#define ST_f64(p, i, v) ((p)[i] = (double)(v))\n"
    "#define LD_u8(p, i) ((p)[i])\n"
    "#define ST_u8(p, i, v) ((p)[i] = (uchar)(v))\n"
    "#define LD_s32(p, i) ((p)[i])\n"
    "#define ST_s32(p, i, v) ((p)[i] = (int)(v))\n"
    "#define LD_s64(p, i) ((p)[i])\n"
    "#define ST_s64(p, i, v) ((p)[i] = (long)(v))\n"
    "typedef struct { long n; int rank; int pad; long shape[" CX_RANK_TEXT
    "]; long st[3][" CX_RANK_TEXT "]; } cx_bc;\n"
    "typedef struct { long nout, nred; int krank, rrank; long kshape[" CX_RANK_TEXT
    "], kst[" CX_RANK_TEXT "], rshape[" CX_RANK_TEXT "], "
    "rst[" CX_RANK_TEXT "]; } cx_rd;\n"
    "typedef struct { long outer, n, inner; } cx_rows;\n"
    "typedef struct { long rows, n; int rank; int pad; long shape[" CX_RANK_TEXT
    "], gst[" CX_RANK_TEXT "], bst[" CX_RANK_TEXT "]; } "
    "cx_norm;\n"
    "typedef struct { long n; int rank; int pad; long ishape[" CX_RANK_TEXT "], lo[" CX_RANK_TEXT
    "], step[" CX_RANK_TEXT "], oshape[" CX_RANK_TEXT "], "
    "ost[" CX_RANK_TEXT "]; } cx_pad;\n"
    "typedef struct { long n, c, h, w, cg, og, kh, kw, oh, ow, s0, s1, d0, d1, lo0, lo1, p, k, "
    "groups, nhwc; } cx_conv;\n"
    "typedef struct { long n; int k; int pad; long dims[" CX_RANK_TEXT "]; } cx_ixc;\n"
    "typedef struct { long n, dim, count, inner; } cx_take;\n"
    "typedef struct { long n, block; int k, rank; long ist[" CX_RANK_TEXT "], shape[" CX_RANK_TEXT
    "], st[" CX_RANK_TEXT "]; } cx_gather;\n"
    "void bc_offsets(const cx_bc *b, long i, long *off) {\n"
    "  off[0] = off[1] = off[2] = 0;\n"
    "  if (b->rank == 1) { off[0] = i * b->st[0][0]; off[1] = i * b->st[1][0]; "
    "off[2] = i * b->st[2][0]; return; }\n"
    "  for (int k = b->rank - 1; k >= 0; k--) {\n"
    "    long n = b->shape[k], c = i % n; i /= n;\n"
    "    off[0] += c * b->st[0][k]; off[1] += c * b->st[1][k]; off[2] += c * b->st[2][k];\n"
    "  }\n"
    "}\n"
    "long rd_base(const cx_rd *r, long g) {\n"
    "  long off = 0;\n"
    "  for (int k = r->krank - 1; k >= 0; k--) { long n = r->kshape[k]; off += (g % n) * "
    "r->kst[k]; g /= n; }\n"
    "  return off;\n"
    "}\n"
    "long rd_off(const cx_rd *r, long j) {\n"
    "  if (r->rrank == 1) return j * r->rst[0];\n"
    "  long off = 0;\n"
    "  for (int k = r->rrank - 1; k >= 0; k--) { long n = r->rshape[k]; off += (j % n) * "
    "r->rst[k]; j /= n; }\n"
    "  return off;\n"
    "}\n"
    "long norm_off(const cx_norm *p, const long *st, long j) {\n"
    "  long off = 0;\n"
    "  for (int k = p->rank - 1; k >= 0; k--) { long n = p->shape[k]; off += (j % n) * st[k]; "
    "j /= n; }\n"
    "  return off;\n"
    "}\n"
    /* wrapping exponentiation by squaring; a negative exponent gives 1/base^|e| truncated */
    "ulong ipow_wrap(ulong base, ulong e) {\n"
    "  ulong r = 1;\n"
    "  while (e) { if (e & 1) r *= base; base *= base; e >>= 1; }\n"
    "  return r;\n"
    "}\n"
    "long ipow_signed(long base, long e) {\n"
    "  if (e >= 0) return (long)ipow_wrap((ulong)base, (ulong)e);\n"
    "  if (base == 1) return 1;\n"
    "  if (base == -1) return (e & 1) ? -1 : 1;\n"
    "  return 0;\n"
    "}\n";

/* bf16 as the cpu driver converts it (core/half.h): cx_bf16_to_f32, cx_bf16_from_f32, and an
 * integer rounded once (truncated into f32 with a sticky bit, then rounded to nearest even). */
static const char bf16_prelude[] =
    "#define LD_bf16(p, i) as_float((uint)(p)[i] << 16)\n"
    "ushort bf16_of_float(float f) {\n"
    "  uint u = as_uint(f);\n"
    "  if ((u & 0x7fffffffu) > 0x7f800000u) return (ushort)((u >> 16) | 0x40);\n"
    "  u += 0x7fffu + ((u >> 16) & 1);\n"
    "  return (ushort)(u >> 16);\n"
    "}\n"
    "float bf16_round_long(long x) {\n"
    "  float f = convert_float_rtz(x);\n"
    "  if (convert_long(f) != x) f = as_float(as_uint(f) | 1);\n"
    "  return as_float((uint)bf16_of_float(f) << 16);\n"
    "}\n";

static void elementwise_kernels(text *b, bool fp64) {
    for (int op = 0; op < CX_OP_COUNT; op++) {
        cx_op_kind kind = cx_op_table[op].kind;
        int arity = cx_op_tensor_arity((cx_op_id)op);
        for (int t = 0; t < CX_DTYPE_COUNT; t++) {
            const char *e = ocl_elementwise_expr((cx_op_id)op, (cx_dtype)t);
            if (!e || !ocl_type_supported((cx_dtype)t, fp64)) continue;
            const ocl_type *it = &types[t];
            const ocl_type *ot =
                kind == CX_KIND_COMPARE || kind == CX_KIND_LOGICAL ? &types[CX_U8] : it;
            add(b, "#define CT %s\n#define W ((long)sizeof(CT) * 8)\n", it->compute);
            if (it->uns) add(b, "#define U %s\n", it->uns);
            add(b, "__kernel void ew_%s_%s(__global %s *o, __global const %s *a, ",
                cx_op_table[op].name, it->tag, ot->store, it->store);
            if (arity == 2) add(b, "__global const %s *b, ", it->store);
            add(b,
                "const cx_bc bc) {\n"
                "  long i = get_global_id(0); if (i >= bc.n) return;\n"
                "  long off[3]; bc_offsets(&bc, i, off);\n"
                "  CT x = LD_%s(a, off[0]);\n",
                it->tag);
            if (arity == 2) add(b, "  CT y = LD_%s(b, off[1]);\n", it->tag);
            add(b, "  ST_%s(o, i, (%s)(%s));\n}\n#undef CT\n#undef W\n", ot->tag, ot->compute, e);
            if (it->uns) add(b, "#undef U\n");
        }
    }
}

/* select copies values as stored; the predicate is true where non-zero (f16: any bit but the
 * sign). clip is max then min with the NaN rules of max and min. */
static void select_kernels(text *b, bool fp64) {
    for (int p = 0; p < CX_DTYPE_COUNT; p++) {
        if (!ocl_type_supported((cx_dtype)p, fp64)) continue;
        bool half = p == CX_F16 || p == CX_BF16;
        const char *truth = half ? "(c[off[0]] & 0x7fff) != 0" : "c[off[0]] != 0";
        for (int t = 0; t < CX_DTYPE_COUNT; t++) {
            if (!ocl_type_supported((cx_dtype)t, fp64)) continue;
            const char *raw = types[t].raw;
            add(b,
                "__kernel void sel_%s_%s(__global %s *o, __global const %s *c, __global const %s "
                "*a, __global const %s *b, const cx_bc bc) {\n"
                "  long i = get_global_id(0); if (i >= bc.n) return;\n"
                "  long off[3]; bc_offsets(&bc, i, off);\n"
                "  o[i] = %s ? a[off[1]] : b[off[2]];\n}\n",
                types[p].tag, types[t].tag, raw, types[p].raw, raw, raw, truth);
        }
    }
    for (int t = 0; t < CX_DTYPE_COUNT; t++) {
        if (!ocl_type_supported((cx_dtype)t, fp64)) continue;
        const ocl_type *it = &types[t];
        bool fl = it->cls == 'f';
        add(b,
            "#define CT %s\n"
            "__kernel void clip_%s(__global %s *o, __global const %s *a, __global const %s *lo, "
            "__global const %s *hi, const cx_bc bc) {\n"
            "  long i = get_global_id(0); if (i >= bc.n) return;\n"
            "  long off[3]; bc_offsets(&bc, i, off);\n"
            "  CT x = LD_%s(a, off[0]), y = LD_%s(lo, off[1]);\n"
            "  x = %s;\n"
            "  y = LD_%s(hi, off[2]);\n"
            "  ST_%s(o, i, %s);\n}\n#undef CT\n",
            it->compute, it->tag, it->store, it->store, it->store, it->store, it->tag, it->tag,
            fl ? NAN_MAX : "x > y ? x : y", it->tag, it->tag, fl ? NAN_MIN : "x < y ? x : y");
    }
}

/* Conversions: floats into integers truncate and saturate with NaN as 0 (OpenCL's _sat_rtz
 * conversions do exactly that); everything else rounds to nearest even. */
static const char *conversion(cx_dtype s, cx_dtype d) {
    bool fs = types[s].cls == 'f';
    switch (d) {
    case CX_F16: return fs ? "x" : "convert_float_rte(x)";
    case CX_BF16: return fs ? "x" : "bf16_round_long((long)x)";
    case CX_F32: return "convert_float_rte(x)";
    case CX_F64: return "convert_double_rte(x)";
    case CX_U8: return fs ? "convert_uchar_sat_rtz(x)" : "(uchar)x";
    case CX_S32: return fs ? "convert_int_sat_rtz(x)" : "(int)x";
    default: return fs ? "convert_long_sat_rtz(x)" : "(long)x";
    }
}

static void cast_kernels(text *b, bool fp64) {
    for (int s = 0; s < CX_DTYPE_COUNT; s++)
        for (int d = 0; d < CX_DTYPE_COUNT; d++) {
            if (!ocl_type_supported((cx_dtype)s, fp64) || !ocl_type_supported((cx_dtype)d, fp64))
                continue;
            add(b,
                "__kernel void cast_%s_%s(__global %s *o, __global const %s *a, const long n) {\n"
                "  long i = get_global_id(0); if (i >= n) return;\n"
                "  %s x = LD_%s(a, i);\n"
                "  ST_%s(o, i, %s);\n}\n",
                types[s].tag, types[d].tag, types[d].store, types[s].store, types[s].compute,
                types[s].tag, types[d].tag, conversion((cx_dtype)s, (cx_dtype)d));
        }
}

/* Layout ops move elements without arithmetic: a strided gather by element size. */
static void copy_kernels(text *b) {
    static const char *const raw[] = {"uchar", "ushort", "uint", "ulong"};
    for (int k = 0; k < 4; k++)
        add(b,
            "__kernel void copy_%d(__global %s *o, __global const %s *a, const cx_bc bc, "
            "const long base) {\n"
            "  long i = get_global_id(0); if (i >= bc.n) return;\n"
            "  long off[3]; bc_offsets(&bc, i, off);\n"
            "  o[i] = a[base + off[0]];\n}\n",
            1 << k, raw[k], raw[k]);
    /* pad: the output is filled with the value first; each input element lands or is cropped */
    for (int k = 0; k < 4; k++)
        add(b,
            "__kernel void pad_%d(__global %s *o, __global const %s *a, const cx_pad p) {\n"
            "  long i = get_global_id(0); if (i >= p.n) return;\n"
            "  long j = i, off = 0;\n"
            "  for (int k = p.rank - 1; k >= 0; k--) {\n"
            "    long c = j %% p.ishape[k]; j /= p.ishape[k];\n"
            "    long q = p.lo[k] + c * p.step[k];\n"
            "    if (q < 0 || q >= p.oshape[k]) return;\n"
            "    off += q * p.ost[k];\n"
            "  }\n"
            "  o[off] = a[i];\n}\n",
            1 << k, raw[k], raw[k]);
}

static void reduce_kernels(text *b, bool fp64) {
    for (size_t k = 0; k < sizeof reduce_ops / sizeof reduce_ops[0]; k++)
        for (int t = 0; t < CX_DTYPE_COUNT; t++) {
            /* sums of u8 are u64, a type these kernels do not store: the cpu takes them */
            if (!ocl_type_supported((cx_dtype)t, fp64) ||
                !ocl_type_supported(ocl_reduce_out(reduce_ops[k].op, (cx_dtype)t), fp64))
                continue;
            reduce_kernel(b, reduce_ops[k].op, reduce_ops[k].name, (cx_dtype)t, false);
            reduce_kernel(b, reduce_ops[k].op, reduce_ops[k].name, (cx_dtype)t, true);
        }
}

/* argmax and argmin over rows {outer, n, inner} (cx_rows), the s64 position along n, as the cpu
 * driver picks it: scanning in order, an element replaces the best so far when it is greater
 * (argmin: smaller), or equal and ties go high; NaN beats every number, and among NaNs the first
 * wins (ties low) or the last (ties high). The serial form gives each output one work-item; the
 * group form splits a row over RG work-items, each scanning every RG-th element, then merges
 * the candidates pairwise: a NaN beats a number, the better value wins, equal values (or two
 * NaNs) keep the lower position (ties low) or the higher (ties high). */
static void arg_kernels(text *b, bool fp64) {
    for (int t = 0; t < CX_DTYPE_COUNT; t++) {
        if (!ocl_type_supported((cx_dtype)t, fp64)) continue;
        const ocl_type *it = &types[t];
        bool fl = it->cls == 'f';
        for (int max = 0; max < 2; max++) {
            const char *name = max ? "argmax" : "argmin", *gt = max ? ">" : "<";
            add(b, "#define CT %s\n#define TIE(p, q) (high ? (p) > (q) : (p) < (q))\n",
                it->compute);
            if (fl)
                add(b,
                    "#define TAKE(v, w) ((v) != (v) ? ((w) == (w) || high) : (w) != (w) ? 0 : "
                    "(v) == (w) ? high : (v) %s (w))\n"
                    "#define BETTER(c, ic, a, ia) ((c) != (c) ? ((a) != (a) ? TIE(ic, ia) : 1) : "
                    "(a) != (a) ? 0 : (c) == (a) ? TIE(ic, ia) : (c) %s (a))\n",
                    gt, gt);
            else
                add(b,
                    "#define TAKE(v, w) ((v) == (w) ? high : (v) %s (w))\n"
                    "#define BETTER(c, ic, a, ia) ((c) == (a) ? TIE(ic, ia) : (c) %s (a))\n",
                    gt, gt);
            add(b,
                "__kernel void %s_%s_serial(__global long *o, __global const %s *x, const cx_rows "
                "r, const int high) {\n"
                "  long g = get_global_id(0); if (g >= r.outer * r.inner) return;\n"
                "  long base = (g / r.inner) * r.n * r.inner + g %% r.inner;\n"
                "  CT best = LD_%s(x, base); long at = 0;\n"
                "  for (long j = 1; j < r.n; j++) { CT v = LD_%s(x, base + j * r.inner); "
                "if (TAKE(v, best)) { best = v; at = j; } }\n"
                "  o[g] = at;\n}\n",
                name, it->tag, it->store, it->tag, it->tag);
            add(b,
                "__kernel void %s_%s_group(__global long *o, __global const %s *x, const cx_rows "
                "r, const int high) {\n"
                "  __local CT bv[RG]; __local long bi[RG];\n"
                "  long g = get_group_id(0); int l = get_local_id(0);\n"
                "  long base = (g / r.inner) * r.n * r.inner + g %% r.inner;\n"
                "  CT best = 0; long at = -1;\n"
                "  for (long j = l; j < r.n; j += RG) { CT v = LD_%s(x, base + j * r.inner); "
                "if (at < 0 || TAKE(v, best)) { best = v; at = j; } }\n"
                "  bv[l] = best; bi[l] = at;\n"
                "  barrier(CLK_LOCAL_MEM_FENCE);\n"
                "  for (int w = RG / 2; w > 0; w >>= 1) {\n"
                "    if (l < w) { CT a = bv[l], c = bv[l + w]; long ia = bi[l], ic = bi[l + w];\n"
                "      if (ic >= 0 && (ia < 0 || BETTER(c, ic, a, ia))) { bv[l] = c; bi[l] = ic; } "
                "}\n"
                "    barrier(CLK_LOCAL_MEM_FENCE);\n"
                "  }\n"
                "  if (l == 0) o[g] = bi[0];\n}\n"
                "#undef CT\n#undef TIE\n#undef TAKE\n#undef BETTER\n",
                name, it->tag, it->store, it->tag);
        }
    }
}

/* iota and eye: element i gets an integer (its position along the axis; 1 on the diagonal, else
 * 0) converted to the type as the cpu driver converts integers: wrapping into integer types,
 * rounding to nearest into floats. */
static void create_kernels(text *b, bool fp64) {
    for (int t = 0; t < CX_DTYPE_COUNT; t++) {
        if (!ocl_type_supported((cx_dtype)t, fp64)) continue;
        const ocl_type *it = &types[t];
        const char *conv = conversion(CX_S64, (cx_dtype)t);
        add(b,
            "__kernel void iota_%s(__global %s *o, const long n, const long len, const long "
            "inner) {\n"
            "  long i = get_global_id(0); if (i >= n) return;\n"
            "  long x = inner == 1 ? (len == n ? i : i %% len) : (i / inner) %% len;\n"
            "  ST_%s(o, i, %s);\n}\n"
            "__kernel void eye_%s(__global %s *o, const long n, const long cols, const long "
            "square) {\n"
            "  long i = get_global_id(0); if (i >= n) return;\n"
            "  long e = i %% square, x = e / cols == e %% cols;\n"
            "  ST_%s(o, i, %s);\n}\n",
            it->tag, it->store, it->tag, conv, it->tag, it->store, it->tag, conv);
    }
}

/* take and gather move elements by element size, like the other layout ops; index_check flags
 * any index outside its axis first (the host reads the flag before moving anything). The
 * 64-bit divisions are skipped where a size is 1 (on PoCL they cost more than the moves). */
static void index_kernels(text *b) {
    static const char *const raw[] = {"uchar", "ushort", "uint", "ulong"};
    add(b, "__kernel void index_check(__global int *bad, __global const long *ix, const cx_ixc "
           "c) {\n"
           "  long i = get_global_id(0); if (i >= c.n) return;\n"
           "  long v = ix[i];\n"
           "  if (v < 0 || v >= c.dims[c.k == 1 ? 0 : i %% c.k]) *bad = 1;\n}\n");
    for (int k = 0; k < 4; k++)
        add(b,
            "__kernel void take_%d(__global %s *o, __global const %s *a, __global const long *ix, "
            "const cx_take t) {\n"
            "  long i = get_global_id(0); if (i >= t.n) return;\n"
            "  long e = t.inner == 1 ? 0 : i %% t.inner, r = t.inner == 1 ? i : i / t.inner;\n"
            "  long j = r < t.count ? r : r %% t.count, q = r < t.count ? 0 : r / t.count;\n"
            "  o[i] = a[(q * t.dim + ix[j]) * t.inner + e];\n}\n"
            "__kernel void gather_%d(__global %s *o, __global const %s *a, __global const long "
            "*ix, const cx_gather g) {\n"
            "  long i = get_global_id(0); if (i >= g.n) return;\n"
            "  long r = g.block == 1 ? i : i / g.block, e = g.block == 1 ? 0 : i %% g.block, off = "
            "0;\n"
            "  for (int j = 0; j < g.k; j++) off += ix[r * g.k + j] * g.ist[j];\n"
            "  for (int k = g.rank - 1; k >= 0; k--) { long s = g.shape[k]; off += (e %% s) * "
            "g.st[k]; e /= s; }\n"
            "  o[i] = a[off];\n}\n",
            1 << k, raw[k], raw[k], 1 << k, raw[k], raw[k]);
}

/* softmax and log_softmax as their decompositions compute them, fused: one work-item per row,
 * exp(x - max) / sum and (x - max) - log(sum). layer_norm: (x - mean) * (1 / sqrt(variance +
 * epsilon)) * gamma + beta, the mean and the biased variance over the row. */
static void nn_kernels(text *b, bool fp64) {
    for (int t = 0; t < CX_DTYPE_COUNT; t++) {
        if (types[t].cls != 'f' || t == CX_BF16 || !ocl_type_supported((cx_dtype)t, fp64)) continue;
        const ocl_type *it = &types[t];
        for (int log_form = 0; log_form < 2; log_form++)
            add(b,
                "#define CT %s\n"
                "__kernel void %s_%s(__global %s *o, __global const %s *a, const cx_rows r) {\n"
                "  long w = get_global_id(0); if (w >= r.outer * r.inner) return;\n"
                "  long base = (w / r.inner) * r.n * r.inner + w %% r.inner;\n"
                "  CT m = -INFINITY;\n"
                "  for (long k = 0; k < r.n; k++) { CT v = LD_%s(a, base + k * r.inner); "
                "m = v > m || v != v ? v : m; }\n"
                "  ACC s = 0;\n"
                "  for (long k = 0; k < r.n; k++) s += (ACC)exp(LD_%s(a, base + k * r.inner) - "
                "m);\n"
                "  CT sum = (CT)s;\n"
                "%s"
                "  for (long k = 0; k < r.n; k++) { long i = base + k * r.inner; CT d = "
                "LD_%s(a, i) - m; ST_%s(o, i, %s); }\n"
                "}\n#undef CT\n",
                it->compute, log_form ? "log_softmax" : "softmax", it->tag, it->store, it->store,
                it->tag, it->tag, log_form ? "  CT ls = log(sum);\n" : "", it->tag, it->tag,
                log_form ? "d - ls" : "exp(d) / sum");
        add(b,
            "#define CT %s\n"
            "__kernel void layer_norm_%s(__global %s *o, __global const %s *a, __global const %s "
            "*g, __global const %s *b, const cx_norm p, const CT eps) {\n"
            "  long row = get_global_id(0); if (row >= p.rows) return;\n"
            "  long base = row * p.n;\n"
            "  ACC s = 0;\n"
            "  for (long j = 0; j < p.n; j++) s += LD_%s(a, base + j);\n"
            "  CT mean = (CT)s / (CT)p.n;\n"
            "  s = 0;\n"
            "  for (long j = 0; j < p.n; j++) { CT d = LD_%s(a, base + j) - mean; s += d * d; }\n"
            "  CT inv = (CT)1 / sqrt((CT)s / (CT)p.n + eps);\n"
            "  for (long j = 0; j < p.n; j++) {\n"
            "    CT d = LD_%s(a, base + j) - mean;\n"
            "    CT y = d * inv * LD_%s(g, norm_off(&p, p.gst, j)) + LD_%s(b, norm_off(&p, p.bst, "
            "j));\n"
            "    ST_%s(o, base + j, y);\n"
            "  }\n}\n#undef CT\n",
            it->compute, it->tag, it->store, it->store, it->store, it->store, it->tag, it->tag,
            it->tag, it->tag, it->tag, it->tag);
    }
}

/* conv2d around one GEMM (opencl_ops.c): im2col writes row (g, p) of the {groups, p, k} matrix
 * in the compute type (f16 loaded into f32), zeros where the window reads padding; conv_out
 * moves the GEMM's {groups, p, og} result into the output layout, storing in the output type.
 * Both loop over a contiguous run per work-item, so the divisions are per row. */
static void conv_kernels(text *b, bool fp64) {
    for (int t = 0; t < CX_DTYPE_COUNT; t++) {
        if (types[t].cls != 'f' || t == CX_BF16 || !ocl_type_supported((cx_dtype)t, fp64)) continue;
        const ocl_type *it = &types[t];
        add(b,
            "#define CT %s\n"
            "__kernel void conv_im2col_%s(__global CT *cols, __global const %s *x, const cx_conv "
            "v) {\n"
            "  long r = get_global_id(0); if (r >= v.groups * v.p) return;\n"
            "  long p = r %% v.p, g = r / v.p;\n"
            "  long ow = p %% v.ow, t = p / v.ow, oh = t %% v.oh, n = t / v.oh;\n"
            "  long h0 = oh * v.s0 - v.lo0, w0 = ow * v.s1 - v.lo1, c0 = g * v.cg;\n"
            "  __global CT *d = cols + r * v.k;\n"
            "  if (v.nhwc) {\n"
            "    for (long i = 0; i < v.kh; i++) { long ih = h0 + i * v.d0; bool hin = ih >= 0 && "
            "ih < v.h;\n"
            "      for (long j = 0; j < v.kw; j++) { long iw = w0 + j * v.d1;\n"
            "        if (hin && iw >= 0 && iw < v.w) { long base = ((n * v.h + ih) * v.w + iw) * "
            "v.c + c0;\n"
            "          for (long ci = 0; ci < v.cg; ci++) *d++ = LD_%s(x, base + ci); }\n"
            "        else for (long ci = 0; ci < v.cg; ci++) *d++ = (CT)0; } }\n"
            "  } else {\n"
            "    for (long ci = 0; ci < v.cg; ci++) { long base = (n * v.c + c0 + ci) * v.h;\n"
            "      for (long i = 0; i < v.kh; i++) { long ih = h0 + i * v.d0; bool hin = ih >= 0 "
            "&& ih < v.h;\n"
            "        for (long j = 0; j < v.kw; j++) { long iw = w0 + j * v.d1;\n"
            "          *d++ = hin && iw >= 0 && iw < v.w ? (CT)LD_%s(x, (base + ih) * v.w + iw) : "
            "(CT)0; } } }\n"
            "  }\n}\n"
            "__kernel void conv_out_%s(__global %s *o, __global const CT *y, const cx_conv v) {\n"
            "  long r = get_global_id(0), oc = v.groups * v.og;\n"
            "  if (v.nhwc) {\n"
            "    if (r >= v.p) return;\n"
            "    for (long g = 0; g < v.groups; g++) for (long c = 0; c < v.og; c++)\n"
            "      ST_%s(o, r * oc + g * v.og + c, y[(g * v.p + r) * v.og + c]);\n"
            "  } else {\n"
            "    if (r >= v.n * oc * v.oh) return;\n"
            "    long oh = r %% v.oh, t = r / v.oh, co = t %% oc, n = t / oc;\n"
            "    long g = co / v.og, c = co %% v.og, p = (n * v.oh + oh) * v.ow;\n"
            "    __global const CT *s = y + (g * v.p + p) * v.og + c;\n"
            "    for (long ow = 0; ow < v.ow; ow++) ST_%s(o, r * v.ow + ow, s[ow * v.og]);\n"
            "  }\n}\n#undef CT\n",
            t == CX_F64 ? "double" : "float", it->tag, it->store, it->tag, it->tag, it->tag,
            it->store, it->tag, it->tag);
    }
}

char *ocl_source(bool fp64) {
    text b;
    if (!text_init(&b, 1 << 16)) return NULL;
    if (fp64)
        add(&b, "#pragma OPENCL EXTENSION cl_khr_fp64 : enable\n#define ACC double\n");
    else
        add(&b, "#define ACC float\n");
    add(&b, "#define RG %d\n%s%s", OCL_REDUCE_GROUP, prelude, bf16_prelude);
    /* a double rounds to odd into f32, then to nearest even into bf16 (cx_bf16_from_f64); the
     * store picks the conversion by the size of the value: only floats and doubles reach it */
    if (fp64)
        add(&b, "%s",
            "ushort bf16_of_double(double d) {\n"
            "  float f = (float)d;\n"
            "  if (f == f && (double)f != d) {\n"
            "    uint u = as_uint(f); double back = (double)f;\n"
            "    if ((back > d && d > 0) || (back < d && d < 0)) u -= 1;\n"
            "    f = as_float(u | 1);\n"
            "  }\n"
            "  return bf16_of_float(f);\n"
            "}\n"
            "#define ST_bf16(p, i, v) ((p)[i] = sizeof(v) == 8 ? bf16_of_double((double)(v)) : "
            "bf16_of_float((float)(v)))\n");
    else
        add(&b, "#define ST_bf16(p, i, v) ((p)[i] = bf16_of_float((float)(v)))\n");
    elementwise_kernels(&b, fp64);
    select_kernels(&b, fp64);
    cast_kernels(&b, fp64);
    copy_kernels(&b);
    reduce_kernels(&b, fp64);
    arg_kernels(&b, fp64);
    create_kernels(&b, fp64);
    index_kernels(&b);
    nn_kernels(&b, fp64);
    conv_kernels(&b, fp64);
    if (b.oom) {
        free(b.s);
        return NULL;
    }
    return b.s;
}
