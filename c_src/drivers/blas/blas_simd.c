/* The vector kernels at work: which instruction set's table runs (cpuid, once), how a tensor op
 * becomes runs of contiguous elements for them, and how the runs are split across the pool's
 * threads. An op or layout these paths do not take returns false and the driver runs the cpu
 * kernel instead, so every answer here is an optimisation, never a new behaviour.
 *
 * Layouts: every operand is viewed against the output as a matrix of R rows of C elements, split
 * at one axis: an operand is the full output (FULL), one value (ONE), the same row for every row
 * (ROW: its axes before the split are 1, the bias of a dense layer) or one value per row (COL:
 * its axes from the split on are 1, the max or sum of softmax kept as an axis; its leading axes
 * may be 1 too, as the bias {1, C, 1, 1} of a convolution's {N, C, H, W} output). Anything else
 * -- such as a row broadcast over a middle axis -- goes to the cpu kernel.
 *
 * Threads: a run of at least `grain` elements per thread is split; cheap ops (add: one pass
 * over memory) need more elements to pay for a wake-up than a transcendental function. */
#include <math.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../../core/half.h"
#include "../../core/fused.h"
#include "../../core/half_array.h"
#include "../cpu/cpu_kernels.h"
#include "blas_kernels.h"
#include "blas_simd.h"

#define CHUNK 1024 /* f16/bf16 elements widened at a time: every f32 copy stays in L1 */
/* Elements per thread at least, for one pass over memory. 2^14 since the pool takes back a part
 * whose worker is asleep (blas_pool.c): in a loop, with the worker awake, a 64K-element f32 add
 * or negate ran faster split than on one thread; a call a while after the last costs more (the
 * wake-up, cold caches). At 2^14 without the taking back, the benchmark's CNN epoch looked
 * slower; with it, no slower than at 2^16, the MLP's unchanged. */
#define GRAIN_CHEAP (1 << 14)
#define GRAIN_MATH  (1 << 13) /* ... and for a transcendental function per element */
/* ... and for widening halves into f32 for a product: the product's threads read the copy next,
 * and a copy made by one thread is slow for the other to read and for the next call to write
 * (a bf16 256 x 256 dot ran faster split at 2^14 elements than at 2^16) */
#define GRAIN_WIDEN (1 << 14)

/* Scratch rows of f32, one per part: each starts on its own cache line, so that two threads
 * never write one line. Packed end to end, 1000-float rows (f16/bf16 softmax of 1000 x 1000)
 * shared a line at every boundary, and the two threads' stores to it, pass after pass, made two
 * threads no faster than one. */
#define LINE_FLOATS 16 /* 64 bytes */
static size_t part_floats(size_t n) {
    return (n + LINE_FLOATS - 1) / LINE_FLOATS * LINE_FLOATS;
}
/* parts scratch rows of `stride` floats (a part_floats), 64-byte aligned; free() releases them */
static float *part_scratch(size_t stride, int parts) {
    return aligned_alloc(64, sizeof(float) * stride * (size_t)(parts > 0 ? parts : 1));
}

static const simd_table *chosen;
static bool bf16_hw;      /* the chosen table rounds with AVX512-BF16 */
static int64_t stream_l2; /* a core's L2 where large f32/f64 ops stream on AVX2 (table_for), or 0 */

#if defined(CX_HAVE_SIMD) && defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <cpuid.h>
/* CPUID.1:ECX bit 29 (F16C: the half kernels convert f16 in hardware); every processor with
 * AVX2 has it, but it is checked rather than assumed. clang 14's __builtin_cpu_supports does
 * not know "f16c". */
static bool has_f16c(void) {
    unsigned a, b, c, d;
    return __get_cpuid(1, &a, &b, &c, &d) && (c & (1u << 29));
}
/* CPUID.(7,1):EAX bit 5, AVX512-BF16 (AMD Zen 4, Intel Cooper Lake and Sapphire Rapids): the
 * AVX-512 table rounds to bf16 with its instruction then; CASCADE_SIMD=avx512 turns that off */
static bool has_avx512_bf16(void) {
    unsigned a, b, c, d;
    return __get_cpuid_count(7, 1, &a, &b, &c, &d) && (a & (1u << 5));
}
#endif

static const simd_table *choose(void) {
#if defined(CX_HAVE_SIMD) && defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
    __builtin_cpu_init();
    bool avx512 = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512dq") &&
                  __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl");
    bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && has_f16c();
    avx512 = avx512 && avx2;
    const char *want = getenv("CASCADE_SIMD");
    if (want && strcmp(want, "none") == 0) return NULL;
    if (want && strcmp(want, "avx2") == 0) return avx2 ? &simd_avx2 : NULL;
    if (avx512 && !(want && strcmp(want, "avx512") == 0) && has_avx512_bf16()) {
        static simd_table with_bf16;
        simd_avx512_bf16(&with_bf16);
        bf16_hw = true;
        return &with_bf16;
    }
    if (avx512) return &simd_avx512;
    if (avx2) return &simd_avx2;
#endif
    return NULL;
}

/* table_for's second rule holds on Intel's processors whose L2 size is known */
static int64_t streaming_l2(void) {
#if defined(CX_HAVE_SIMD) && defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
    long l2 = sysconf(_SC_LEVEL2_CACHE_SIZE);
    return __builtin_cpu_is("intel") && l2 > 0 ? (int64_t)l2 : 0;
#else
    return 0;
#endif
}

const simd_table *blas_simd(void) {
    static bool done;
    /* set at probe, before any op runs (blas_driver.c); this is a fallback for tests */
    if (!done) {
        chosen = choose();
        stream_l2 = streaming_l2();
        done = true;
    }
    return chosen;
}

bool blas_simd_bf16_hw(void) {
    return blas_simd() && bf16_hw;
}

/* ==== the matrix view ========================================================================= */

typedef enum { V_FULL, V_ONE, V_ROW, V_COL } view;

typedef struct {
    int64_t rows, cols;
    int n_in;
    view v[3];
    int64_t mod[3]; /* COL: the operand's number of values (row r reads r % mod) */
} layout;

/* How input d broadcasts to out split before axis k (0 < k < rank), or -1. A COL operand may
 * also be broadcast over the leading axes (the bias {1, C, 1, 1} of an {N, C, H, W} output): its
 * value for row r is then at r % *mod, *mod its number of values (the rows, when it has one per
 * row). */
static int view_at(const cx_desc *d, const cx_desc *out, int k, int64_t *mod) {
    int64_t numel = 1;
    for (int a = 0; a < d->rank; a++) numel *= d->shape[a];
    int64_t total = 1;
    for (int a = 0; a < out->rank; a++) total *= out->shape[a];
    if (numel == 1) return V_ONE;
    if (numel == total) return V_FULL;
    bool row = true, col = true;
    int lead = out->rank - d->rank, j = 0; /* col: 1s before axis j, the output's sizes after */
    for (int a = 0; a < out->rank; a++) {
        int64_t s = a >= lead ? d->shape[a - lead] : 1;
        if (a < k) {
            row = row && s == 1;
            if (s != out->shape[a]) j = a + 1;
        } else {
            row = row && s == out->shape[a];
            col = col && s == 1;
        }
    }
    for (int a = lead; a < j; a++) col = col && d->shape[a - lead] == 1;
    *mod = numel;
    return row ? V_ROW : col ? V_COL : -1;
}

static bool layout_of(const cx_desc *in, int n_in, const cx_desc *o, layout *l) {
    int64_t total = cx_desc_numel(o);
    if (total <= 0) return false; /* an empty result runs no kernel (nor divides by its size) */
    l->n_in = n_in;
    l->rows = 1;
    l->cols = total;
    bool flat = true;
    for (int j = 0; j < n_in; j++) {
        int64_t n = cx_desc_numel(&in[j]);
        l->v[j] = n == 1 ? V_ONE : V_FULL;
        flat = flat && (n == 1 || n == total);
    }
    if (flat) return true;
    for (int k = 1; k < o->rank; k++) {
        bool ok = true;
        for (int j = 0; j < n_in && ok; j++) {
            int v = view_at(&in[j], o, k, &l->mod[j]);
            ok = v >= 0;
            if (ok) l->v[j] = (view)v;
        }
        if (!ok) continue;
        l->cols = 1;
        for (int a = k; a < o->rank; a++) l->cols *= o->shape[a];
        l->rows = total / l->cols;
        return true;
    }
    return false;
}

/* ==== elementwise ============================================================================= */

typedef enum { EW_ARITH, EW_COMPARE, EW_SELECT } ew_form;

typedef struct {
    const simd_table *t;
    cx_op_id op;
    cx_dtype type; /* the operands' type (select: the branches') */
    bool unary;
    const layout *l;
    const cx_tensor *const *in;
    cx_tensor *out;
    int64_t n, grain;
    ew_form form;
    size_t es[3], oes;     /* element sizes of the operands and of the output */
    const uint16_t *table; /* f16/bf16 function of one value: its table (or NULL) */
} ew_job;

static void widen(cx_dtype t, const simd_table *s, const uint16_t *h, float *f, int64_t n) {
    if (t == CX_F16)
        s->f16_to_f32(h, f, n);
    else
        s->bf16_to_f32(h, f, n);
}

static void narrow(cx_dtype t, const simd_table *s, const float *f, uint16_t *h, int64_t n) {
    if (t == CX_F16)
        s->f32_to_f16(f, h, n);
    else
        s->f32_to_bf16(f, h, n);
}

/* the f16 or bf16 function of one value computed in registers (NULL: none, or another type) */
static simd_unary_h unary_half(const simd_table *t, cx_dtype type, int op) {
    if (op >= CX_OP_COUNT) return NULL;
    if (type == CX_F16) return t->unary_f16[op];
    if (type == CX_BF16) return t->unary_bf16[op];
    return NULL;
}

/* ==== f16/bf16 functions of one value, by table ===============================================
 *
 * An f16 or bf16 argument has 65,536 values. A function's results for all of them, computed once
 * by the same widening, f32 kernel and rounding that the chunked path runs on each element (and so
 * bit for bit its results: the kernels treat each lane alone, the last partial vector included;
 * only a NaN's sign may differ, as it already may between a full vector and the last partial one,
 * compiled apart), make each element of a large tensor one load from the table. One table per type
 * and function, 128 KiB, built on the first call that needs it and kept for the life of the
 * process. From C, one thread, 1M bf16 values in [-1, 1] cost the same whatever the function. */
enum { HT_GELU = CX_OP_COUNT, HT_GELU_TANH, HT_SILU, HT_KEYS };
static _Atomic(uint16_t *) half_tables[2][HT_KEYS];

/* the functions worth a table: those whose f32 kernel costs more than a load */
static bool table_pays(cx_op_id op) {
    switch (op) {
    case CX_OP_EXP:
    case CX_OP_EXPM1:
    case CX_OP_LOG:
    case CX_OP_LOG1P:
    case CX_OP_SIN:
    case CX_OP_COS:
    case CX_OP_TANH:
    case CX_OP_ERF:
    case CX_OP_SIGMOID:
    case CX_OP_RSQRT: return true;
    default: return false;
    }
}

/* the table of function `key` (an op, or HT_*) for f16 or bf16, or NULL if memory ran out */
static const uint16_t *half_table(const simd_table *t, cx_dtype type, int key) {
    _Atomic(uint16_t *) *slot = &half_tables[type == CX_BF16][key];
    uint16_t *tab = atomic_load_explicit(slot, memory_order_acquire);
    if (tab) return tab;
    tab = malloc(sizeof(uint16_t) * 65536);
    if (!tab) return NULL;
    uint16_t arg[CHUNK];
    float a[CHUNK], r[CHUNK];
    /* a function with a register kernel: its results, so that the table and the kernel agree
     * bit for bit wherever either runs (bf16 gelu's mixed kernel runs both on one array) */
    simd_unary_h reg = unary_half(t, type, key == HT_GELU ? CX_OP_GELU : key);
    for (int32_t i = 0; i < 65536; i += CHUNK) {
        for (int k = 0; k < CHUNK; k++) arg[k] = (uint16_t)(i + k);
        if (reg) {
            reg(tab + i, arg, CHUNK);
            continue;
        }
        widen(type, t, arg, a, CHUNK);
        /* as ew_segment (unary ops) and row_part (gelu, silu in place) call them */
        switch (key) {
        case HT_GELU: t->gelu_f32(a, a, CHUNK, 0); break;
        case HT_GELU_TANH: t->gelu_f32(a, a, CHUNK, 1); break;
        case HT_SILU: t->silu_f32(a, a, CHUNK); break;
        default: t->unary_f32[key](r, a, CHUNK);
        }
        narrow(type, t, key >= CX_OP_COUNT ? a : r, tab + i, CHUNK);
    }
    uint16_t *none = NULL;
    if (!atomic_compare_exchange_strong(slot, &none, tab)) { /* another thread built it first */
        free(tab);
        tab = none;
    }
    return tab;
}

/* o[i] = tab[a[i]] (a[0] for all when sa is 0) */
static void table_apply(uint16_t *restrict o, const uint16_t *restrict a, int sa,
                        const uint16_t *restrict tab, int64_t n) {
    int64_t i = 0;
    if (!sa) {
        uint16_t v = tab[a[0]];
        for (; i < n; i++) o[i] = v;
        return;
    }
    simd_table_lookup(o, a, tab, n);
}

/* One run of len output elements at o from operands at p (steps s: 1, or 0 for one value). */
static void ew_segment(const ew_job *j, void *o, const void *const *p, const int *s, int64_t len) {
    const simd_table *t = j->t;
    if (j->form == EW_COMPARE) {
        if (j->type == CX_F32) {
            t->compare_f32[j->op](o, p[0], p[1], s[0], s[1], len);
        } else if (j->type == CX_F64) {
            t->compare_f64[j->op](o, p[0], p[1], s[0], s[1], len);
        } else { /* f16, bf16: widened exactly, compared as f32 */
            float a[CHUNK], b[CHUNK];
            for (int64_t i = 0; i < len; i += CHUNK) {
                int64_t m = len - i < CHUNK ? len - i : CHUNK;
                widen(j->type, t, (const uint16_t *)p[0] + (s[0] ? i : 0), a, s[0] ? m : 1);
                widen(j->type, t, (const uint16_t *)p[1] + (s[1] ? i : 0), b, s[1] ? m : 1);
                t->compare_f32[j->op]((uint8_t *)o + i, a, b, s[0], s[1], m);
            }
        }
        return;
    }
    if (j->form == EW_SELECT) {
        switch (cx_dtype_size(j->type)) {
        case 4: t->select_32(o, p[0], p[1], p[2], s[0], s[1], s[2], len); break;
        case 8: t->select_64(o, p[0], p[1], p[2], s[0], s[1], s[2], len); break;
        default: t->select_16(o, p[0], p[1], p[2], s[0], s[1], s[2], len);
        }
        return;
    }
    if (j->type == CX_F32) {
        if (j->unary)
            t->unary_f32[j->op](o, p[0], len);
        else
            t->binary_f32[j->op](o, p[0], p[1], s[0], s[1], len);
        return;
    }
    if (j->type == CX_F64) {
        if (j->unary)
            t->unary_f64[j->op](o, p[0], len);
        else
            t->binary_f64[j->op](o, p[0], p[1], s[0], s[1], len);
        return;
    }
    if (j->table) {
        table_apply(o, p[0], s[0], j->table, len);
        return;
    }
    simd_unary_h h = j->unary ? unary_half(t, j->type, j->op) : NULL;
    if (h) {
        h(o, p[0], s[0] ? len : 1);
        if (!s[0])
            for (int64_t i = 1; i < len; i++) ((uint16_t *)o)[i] = ((uint16_t *)o)[0];
        return;
    }
    if (!j->unary) {
        simd_binary_h h = j->type == CX_F16 ? t->binary_f16[j->op] : t->binary_bf16[j->op];
        if (h) {
            h(o, p[0], p[1], s[0], s[1], len);
            return;
        }
    }
    float a[CHUNK], b[CHUNK], r[CHUNK];
    for (int64_t i = 0; i < len; i += CHUNK) {
        int64_t m = len - i < CHUNK ? len - i : CHUNK;
        widen(j->type, t, (const uint16_t *)p[0] + (s[0] ? i : 0), a, s[0] ? m : 1);
        if (j->unary) {
            t->unary_f32[j->op](r, a, m);
        } else {
            widen(j->type, t, (const uint16_t *)p[1] + (s[1] ? i : 0), b, s[1] ? m : 1);
            t->binary_f32[j->op](r, a, b, s[0], s[1], m);
        }
        narrow(j->type, t, r, (uint16_t *)o + i, m);
    }
}

/* Elements lo .. hi of the output, row by row. */
static void ew_range(const ew_job *j, int64_t lo, int64_t hi) {
    int64_t cols = j->l->cols;
    /* row r, column c of element lo; one division at most (none from element 0): a 64-bit
     * division takes 40 - 90 cycles on an Intel Xeon, and a one-element add made four */
    int64_t r = lo == 0 ? 0 : lo / cols, c = lo - r * cols;
    for (int64_t pos = lo; pos < hi; r++, c = 0) {
        int64_t len = cols - c;
        if (len > hi - pos) len = hi - pos;
        const void *p[3];
        int s[3];
        for (int k = 0; k < j->l->n_in; k++) {
            const char *base = j->in[k]->data;
            size_t es = j->es[k];
            switch (j->l->v[k]) {
            case V_FULL: p[k] = base + es * (size_t)pos, s[k] = 1; break;
            case V_ONE: p[k] = base, s[k] = 0; break;
            case V_ROW: p[k] = base + es * (size_t)c, s[k] = 1; break;
            case V_COL: p[k] = base + es * (size_t)(r % j->l->mod[k]), s[k] = 0; break;
            }
        }
        ew_segment(j, (char *)j->out->data + j->oes * (size_t)pos, p, s, len);
        pos += len;
    }
}

static void ew_part(void *ctx, int index, int parts) {
    const ew_job *j = ctx;
    if (parts == 1)
        ew_range(j, 0, j->n);
    else
        ew_range(j, j->n * index / parts, j->n * (index + 1) / parts);
}

static int parts_for(int64_t n, int64_t grain) {
    if (n < 2 * grain) return 1; /* without a division: most calls are small */
    int64_t parts = n / grain;
    int threads = blas_pool_threads();
    return parts < 1 ? 1 : parts > threads ? threads : (int)parts;
}

static bool is_math(cx_op_id op) {
    switch (op) {
    case CX_OP_ADD:
    case CX_OP_SUBTRACT:
    case CX_OP_MULTIPLY:
    case CX_OP_MAX:
    case CX_OP_MIN:
    case CX_OP_NEGATE:
    case CX_OP_ABS:
    case CX_OP_FLOOR:
    case CX_OP_CEIL:
    case CX_OP_ROUND:
    case CX_OP_SIGN: return false;
    default: return true;
    }
}

/* Whether the vector kernels take this op on inputs `in` with the output `out`; sets the layout
 * and the form. */
static bool ew_takes(const simd_table *t, cx_op_id op, const cx_desc *in, int n_in,
                     const cx_desc *out, layout *l, ew_form *form) {
    cx_op_kind kind = cx_op_table[op].kind;
    if (!t) return false;
    if (kind == CX_KIND_COMPARE) {
        cx_dtype type = in[0].dtype;
        *form = EW_COMPARE;
        bool half = type == CX_F16 || type == CX_BF16;
        bool have = n_in == 2 && in[1].dtype == type && out->dtype == CX_U8 &&
                    (((type == CX_F32 || half) && t->compare_f32[op]) ||
                     (type == CX_F64 && t->compare_f64[op]));
        return have && layout_of(in, n_in, out, l);
    }
    if (op == CX_OP_SELECT) {
        *form = EW_SELECT;
        cx_dtype type = out->dtype;
        size_t es = cx_dtype_size(type); /* the values' bits move: any type of 2, 4 or 8 bytes */
        bool have = n_in == 3 && in[0].dtype == CX_U8 && in[1].dtype == type &&
                    in[2].dtype == type && (es == 2 || es == 4 || es == 8) && t->select_32;
        return have && layout_of(in, n_in, out, l);
    }
    *form = EW_ARITH;
    bool unary = kind == CX_KIND_UNARY || kind == CX_KIND_UNARY_FLOAT;
    bool binary = kind == CX_KIND_BINARY || kind == CX_KIND_BINARY_FLOAT;
    if (!(unary && n_in == 1) && !(binary && n_in == 2)) return false;
    cx_dtype type = out->dtype;
    for (int j = 0; j < n_in; j++)
        if (in[j].dtype != type) return false;
    bool have;
    switch (type) {
    case CX_F32:
    case CX_F16:
    case CX_BF16: have = unary ? t->unary_f32[op] != NULL : t->binary_f32[op] != NULL; break;
    case CX_F64: have = unary ? t->unary_f64[op] != NULL : t->binary_f64[op] != NULL; break;
    default: have = false;
    }
    return have && layout_of(in, n_in, out, l);
}

/* Two rules send an op whose every result is one rounding or none (add, subtract, multiply, max,
 * min, negate, abs, floor, ceil, round, sign: not is_math) to the AVX2 table where the AVX-512 one
 * was chosen. These ops give the same bits on both tables; functions stay on the chosen one, as a
 * value must not depend on the length of its tensor (SLEEF's log of 7 values on the AVX2 table
 * differed from the same values in a fused step on the AVX-512 one, which the property suite
 * caught).
 *
 * Runs of fewer than SMALL_RUN values. The AVX-512 f16/bf16 kernels take such a run as one
 * zero-padded 16-lane vector, and on a Xeon of the Cascade Lake generation a 512-bit instruction
 * moves the core to a lower frequency license for a while, so the whole call around it slowed: a
 * loop of one-element f16 adds ran slower than f32's, whose add is a scalar loop there (perf:
 * every function of the call slower, not only the kernel itself).
 *
 * f32 and f64 tensors whose operands and result together outgrow the L2 caches of the threads
 * that split them, on Intel's processors (stream_l2): they stream from L3 or memory, and 256-bit
 * loads and stores moved them faster than 512-bit ones on that Xeon (Cascade Lake, L2 1 MiB a
 * core; the tables' kernels called from C on one thread, best of ten: add of 1M and of 4M f32,
 * negate of 1M; through Cascade on two threads add of 1M, by less), while on data in L2 512-bit
 * ones were faster (add and negate of 65,536). GCC and LLVM, too, prefer 256-bit vectors when
 * they tune for Intel's AVX-512 processors. The f16/bf16 kernels stay on AVX-512 at every size:
 * their conversions make them faster there (bf16 add of 1M). Not on AMD's: Zen 4 runs a 512-bit
 * instruction as two 256-bit halves at the same clock, so there is nothing to expect, and it is not
 * measured. */
#define SMALL_RUN 16
static const simd_table *table_for(cx_op_id op, cx_dtype type, int64_t numel, int n_in) {
    const simd_table *t = blas_simd();
#if defined(CX_HAVE_SIMD) && defined(__x86_64__)
    if (!t || t == &simd_avx2 || is_math(op)) return t;
    if (numel < SMALL_RUN) return &simd_avx2;
    /* the elements whose operands and result fill the threads' L2 caches */
    if ((type == CX_F32 || type == CX_F64) && stream_l2 > 0 &&
        numel >= stream_l2 * blas_pool_threads() / (int64_t)cx_dtype_size(type) / (n_in + 1))
        return &simd_avx2;
#endif
    return t;
}

bool blas_simd_elementwise(cx_op_id op, const cx_tensor *const *in, int n_in, cx_tensor *out) {
    const simd_table *t = table_for(op, out->desc.dtype, out->numel, n_in);
    cx_desc d[3];
    if (out->numel == 0 || n_in > 3) return false;
    for (int j = 0; j < n_in; j++) d[j] = in[j]->desc;
    layout l;
    ew_form form;
    if (!ew_takes(t, op, d, n_in, &out->desc, &l, &form)) return false;
    cx_op_kind kind = cx_op_table[op].kind;
    bool unary = kind == CX_KIND_UNARY || kind == CX_KIND_UNARY_FLOAT;
    ew_job j = {t,     op,         form == EW_SELECT ? in[1]->desc.dtype : in[0]->desc.dtype,
                unary, &l,         in,
                out,   out->numel, form == EW_ARITH && is_math(op) ? GRAIN_MATH : GRAIN_CHEAP,
                form,  {0},        cx_dtype_size(out->desc.dtype),
                NULL};
    for (int k = 0; k < n_in; k++) j.es[k] = cx_dtype_size(in[k]->desc.dtype);
    if (form == EW_ARITH && unary && j.type != CX_F32 && j.type != CX_F64 &&
        j.n >= BLAS_HALF_TABLE_MIN && table_pays(op) && !unary_half(t, j.type, op)) {
        j.table = half_table(t, j.type, op);
        if (j.table) j.grain = GRAIN_CHEAP;
    }
    blas_parallel(parts_for(j.n, j.grain), false, ew_part, &j);
    return true;
}

/* ==== sum ===================================================================================== */

/* which axes a sum reduces: the last ones (each row summed), the first ones (each column),
 * both ends of the kept ones (an {A, K, B} view, each of the K summed over A runs of B: the
 * gradient of a convolution's bias, summed over axes 0, 2 and 3), or the middle ones (an {A, R,
 * B} view, each of the A rows of B summed over its R: the interpolation weights of a sample's
 * pixels, {batch, 4, pixels} summed over axis 1, which the cpu's loop was slow for with
 * 64 x 4 x 784 floats) */
typedef enum { SUM_INNER, SUM_OUTER, SUM_ENDS, SUM_MIDDLE } sum_form;

typedef struct {
    const simd_table *t;
    const cx_tensor *in;
    cx_tensor *out;
    int64_t rows, cols; /* ENDS: rows = A, cols = B; MIDDLE: rows = R, cols = B */
    sum_form form;
    double *acc; /* one row summed in slices: each slice's sum */
    int slots;   /* one row: it is summed in this many slices, whatever the threads that run them */
    int64_t kept;  /* ENDS: K; MIDDLE: A */
    int64_t units; /* MIDDLE: A times the blocks of SUM_BLOCK columns in B */
} sum_job;

/* MIDDLE: columns summed at a time, in a block of doubles on the stack. Into an array of all the
 * results instead, malloc mapped fresh pages for any of more than 128 KiB and each call faulted
 * them in (64 x 4 x 784 over axis 1: nearly all of a call's time went to the first stores). */
#define SUM_BLOCK 512
/* INNER: f32 and f64 rows shorter than this are summed here, in double and in order, which is
 * what sum_f32 and sum_f64 do with a row shorter than their vectors (both tables' vectors hold 8
 * floats at least, and their f64 loops take 16 doubles at least), without a call a row: a
 * {262144, 4} f32 sum over axis 1 was slow through them */
#define SUM_SHORT 8

/* n values of t's type from element off, as f32 (in buf) or f64 (in place) */
static double sum_values(const sum_job *j, int64_t off, int64_t n) {
    const cx_tensor *x = j->in;
    switch (x->desc.dtype) {
    case CX_F32: return j->t->sum_f32((const float *)x->data + off, n);
    case CX_F64: return j->t->sum_f64((const double *)x->data + off, n);
    case CX_F16: return j->t->sum_f16((const uint16_t *)x->data + off, n);
    case CX_BF16: return j->t->sum_bf16((const uint16_t *)x->data + off, n);
    default: {
        float buf[CHUNK];
        double s = -0.0;
        for (int64_t i = 0; i < n; i += CHUNK) {
            int64_t m = n - i < CHUNK ? n - i : CHUNK;
            widen(x->desc.dtype, j->t, (const uint16_t *)x->data + off + i, buf, m);
            s += j->t->sum_f32(buf, m);
        }
        return s;
    }
    }
}

/* rows runs of n from element off, `stride` apart, added into acc in order */
static void add_rows(const sum_job *j, double *acc, int64_t off, int64_t stride, int64_t rows,
                     int64_t n) {
    const cx_tensor *x = j->in;
    switch (x->desc.dtype) {
    case CX_F32: j->t->sum_row_f32(acc, (const float *)x->data + off, stride, rows, n); break;
    case CX_F64: j->t->sum_row_f64(acc, (const double *)x->data + off, stride, rows, n); break;
    default: {
        float buf[CHUNK];
        for (int64_t r = 0; r < rows; r++)
            for (int64_t i = 0; i < n; i += CHUNK) {
                int64_t m = n - i < CHUNK ? n - i : CHUNK;
                widen(x->desc.dtype, j->t, (const uint16_t *)x->data + off + r * stride + i, buf,
                      m);
                j->t->sum_row_f32(acc + i, buf, 0, 1, m);
            }
    }
    }
}

/* n sums from acc, rounded to the output's type, at its element `at` */
static void finish(const double *acc, cx_tensor *out, int64_t at, int64_t n) {
    switch (out->desc.dtype) {
    case CX_F64: memcpy((double *)out->data + at, acc, sizeof(double) * (size_t)n); break;
    case CX_F32:
        for (int64_t i = 0; i < n; i++) ((float *)out->data)[at + i] = (float)acc[i];
        break;
    case CX_F16:
        for (int64_t i = 0; i < n; i++) ((uint16_t *)out->data)[at + i] = cx_f16_from_f64(acc[i]);
        break;
    default:
        for (int64_t i = 0; i < n; i++) ((uint16_t *)out->data)[at + i] = cx_bf16_from_f64(acc[i]);
    }
}

/* inner: part `index` sums its share of the rows, or with one row the slices index, index +
 * parts ... of that row, each into its own acc[slice] (so the result does not depend on how many
 * threads were free); middle (and outer, as a middle with A = 1): its share of the blocks of
 * columns, each summed over its R rows in order; ends: its share of the K. Each result is the
 * same double sum in the same order whatever the split. */
static void sum_part(void *ctx, int index, int parts) {
    const sum_job *j = ctx;
    if (j->form == SUM_MIDDLE) {
        int64_t blocks = (j->cols + SUM_BLOCK - 1) / SUM_BLOCK;
        double acc[SUM_BLOCK];
        for (int64_t u = j->units * index / parts; u < j->units * (index + 1) / parts; u++) {
            int64_t a = u / blocks, lo = u % blocks * SUM_BLOCK;
            int64_t n = j->cols - lo < SUM_BLOCK ? j->cols - lo : SUM_BLOCK;
            for (int64_t c = 0; c < n; c++) acc[c] = -0.0;
            add_rows(j, acc, a * j->rows * j->cols + lo, j->cols, j->rows, n);
            finish(acc, j->out, a * j->cols + lo, n);
        }
    } else if (j->form == SUM_ENDS) { /* its share of the K, each over A runs of B, in order */
        for (int64_t k = j->kept * index / parts; k < j->kept * (index + 1) / parts; k++) {
            double s = -0.0;
            for (int64_t a = 0; a < j->rows; a++)
                s += sum_values(j, (a * j->kept + k) * j->cols, j->cols);
            finish(&s, j->out, k, 1);
        }
    } else if (j->rows == 1) {
        for (int k = index; k < j->slots; k += parts) {
            int64_t lo = j->cols * k / j->slots, hi = j->cols * (k + 1) / j->slots;
            j->acc[k] = sum_values(j, lo, hi - lo);
        }
    } else if (j->cols < SUM_SHORT && j->in->desc.dtype == CX_F32) {
        const float *x = j->in->data;
        float *o = j->out->data;
        for (int64_t r = j->rows * index / parts; r < j->rows * (index + 1) / parts; r++) {
            double s = 0.0; /* as sum_f32 starts a row shorter than a vector: -0.0 + 0.0 */
            for (int64_t c = 0; c < j->cols; c++) s += x[r * j->cols + c];
            o[r] = (float)s;
        }
    } else if (j->cols < SUM_SHORT && j->in->desc.dtype == CX_F64) {
        const double *x = j->in->data;
        double *o = j->out->data;
        for (int64_t r = j->rows * index / parts; r < j->rows * (index + 1) / parts; r++) {
            double s = 0.0;
            for (int64_t c = 0; c < j->cols; c++) s += x[r * j->cols + c];
            o[r] = s;
        }
    } else {
        for (int64_t r = j->rows * index / parts; r < j->rows * (index + 1) / parts; r++) {
            double s = sum_values(j, r * j->cols, j->cols);
            finish(&s, j->out, r, 1);
        }
    }
}

/* Whether the vector sum takes `in` reduced over ps's axes, and how (sum_form): a float type,
 * and the reduced axes (less those of size 1) the last ones, the first ones, some of each with
 * the kept ones between them, or kept ones on both sides of them. *tail: the elements after the
 * last reduced axis (outer, middle) or the last kept one (ends), size-1 axes aside: B of the
 * {A, K, B} and {A, R, B} views. */
static bool sum_takes(const simd_table *t, const cx_desc *in, const cx_params *ps, sum_form *form,
                      int64_t *tail) {
    cx_dtype type = in->dtype;
    if (!t || cx_desc_numel(in) == 0) return false;
    if (type != CX_F32 && type != CX_F64 && type != CX_F16 && type != CX_BF16) return false;
    const cx_param *axes = &ps->p[CX_P_AXES];
    int rank = in->rank;
    bool reduced[CX_MAX_RANK] = {false};
    for (int k = 0; k < axes->n && k < CX_MAX_PARAM_INTS; k++)
        if (axes->i[k] >= 0 && axes->i[k] < rank) reduced[axes->i[k]] = true;
    int last_kept = -1, first_kept = rank, last_red = -1, first_red = rank;
    bool gap = false; /* a reduced axis between kept ones */
    for (int a = 0; a < rank; a++) {
        if (in->shape[a] == 1) continue;
        if (reduced[a]) {
            last_red = a;
            if (first_red == rank) first_red = a;
        } else {
            gap = gap || (last_kept >= 0 && last_red > last_kept);
            last_kept = a;
            if (first_kept == rank) first_kept = a;
        }
    }
    if (last_red < 0) return false; /* nothing summed: a copy, left to the cpu kernel */
    *tail = 1;
    for (int a = (gap || last_red < first_kept ? last_red : last_kept) + 1; a < rank; a++)
        *tail *= in->shape[a];
    if (last_kept < first_red) {
        *form = SUM_INNER; /* kept axes, then reduced ones */
        return true;
    }
    if (last_red < first_kept) {
        *form = SUM_OUTER; /* reduced axes, then kept ones */
        return true;
    }
    if (!gap) {
        *form = SUM_ENDS;
        return true;
    }
    /* kept, reduced, kept: no kept axis among the reduced ones, no reduced one outside them */
    for (int a = first_red; a < last_red; a++)
        if (!reduced[a] && in->shape[a] != 1) return false;
    *form = SUM_MIDDLE;
    return first_kept < first_red && last_red < last_kept;
}

bool blas_simd_sum(const cx_tensor *in, const cx_params *ps, cx_tensor *out) {
    const simd_table *t = blas_simd();
    sum_form form;
    int64_t b; /* B */
    if (out->desc.dtype != in->desc.dtype || !sum_takes(t, &in->desc, ps, &form, &b)) return false;
    sum_job j = {t, in, out, 1, in->numel, form, NULL, 1, 0, 0};
    int64_t kept = out->numel;
    int parts = parts_for(in->numel, GRAIN_CHEAP);
    switch (form) {
    case SUM_OUTER: /* a middle with A = 1 */
    case SUM_MIDDLE:
        j.form = SUM_MIDDLE;
        j.cols = b;
        j.kept = kept / b;
        j.rows = in->numel / kept;
        j.units = j.kept * ((b + SUM_BLOCK - 1) / SUM_BLOCK);
        if (parts > j.units) parts = (int)j.units;
        break;
    case SUM_ENDS:
        j.cols = b;
        j.kept = kept;
        j.rows = in->numel / (kept * b);
        if (parts > kept) parts = (int)kept;
        break;
    case SUM_INNER:
        j.cols = in->numel / kept;
        j.rows = kept;
        if (j.rows > 1 && parts > j.rows) parts = (int)j.rows;
        break;
    }
    j.slots = parts;
    if (j.form == SUM_INNER && j.rows == 1 && !(j.acc = malloc(sizeof(double) * (size_t)parts)))
        return false;
    blas_parallel(parts, false, sum_part, &j);
    if (j.acc) {
        for (int k = 1; k < j.slots; k++) j.acc[0] += j.acc[k];
        finish(j.acc, out, 0, 1);
        free(j.acc);
    }
    return true;
}

/* ps, or (NULL: the capability listing) every axis of `in` reduced, in *buf: only its axes are
 * set, as sum_takes and ext_takes read no other (cx_params is 9 KB: zeroing it cost more than a
 * small reduction) */
static const cx_params *or_all_axes(const cx_params *ps, const cx_desc *in, cx_params *buf) {
    if (ps) return ps;
    buf->set = 0;
    buf->p[CX_P_AXES].n = in->rank;
    for (int a = 0; a < in->rank; a++) buf->p[CX_P_AXES].i[a] = a;
    return buf;
}

/* ==== extremes: reduce_max, reduce_min, argmax, argmin ======================================== */

/* f32 and f64 (the halves stay on the cpu): reduce_max/min over the last axes (each row, or all of
 * it in slices) or the first ones (each column, a row of accumulators); argmax/argmin along the
 * last axis that is not 1, or of everything. The cpu's results: the same values (NaN when a NaN
 * is reduced, the first or the last position of the extreme by tie_break, NaN counting as the
 * extreme, reduce.c). */
typedef struct {
    const simd_table *t;
    const cx_tensor *in;
    cx_tensor *out;
    int64_t rows, cols; /* outer: rows reduced, each of cols kept values */
    bool outer, is_min, arg, high;
    int slots;    /* one row: reduced in this many slices, whatever the threads */
    double *best; /* one row: each slice's extreme */
    int64_t *at;  /* ... and, for arg, its position */
} ext_job;

#define EXT_CHUNK 1024

/* rows shorter than this are folded here, one value at a time as the kernels fold their lanes:
 * through them a 10 x 10 reduce_max was slower than on the cpu */
#define EXT_SHORT 64

/* the extreme so far r with x folded in: a NaN wins and stays (reduce.c's F_MAX, F_MIN) */
static inline double ext_fold(double r, double x, bool is_min) {
    return (x != x || (is_min ? x < r : x > r)) && r == r ? x : r;
}

static double ext_values(const ext_job *j, int64_t off, int64_t n) {
    if (n < EXT_SHORT) {
        double r = j->is_min ? INFINITY : -INFINITY;
        const float *f = j->in->data;
        const double *d = j->in->data;
        if (j->in->desc.dtype == CX_F32)
            for (int64_t k = 0; k < n; k++) r = ext_fold(r, f[off + k], j->is_min);
        else
            for (int64_t k = 0; k < n; k++) r = ext_fold(r, d[off + k], j->is_min);
        return r;
    }
    return j->in->desc.dtype == CX_F32
               ? j->t->extreme_f32((const float *)j->in->data + off, n, j->is_min)
               : j->t->extreme_f64((const double *)j->in->data + off, n, j->is_min);
}

/* whether x replaces the best so far b (reduce.c's take_f64) */
static bool ext_take(double x, double b, bool max, bool high) {
    if (x != x) return b == b || high;
    if (b != b) return false;
    if (x == b) return high;
    return max ? x > b : x < b;
}

/* the position in x[0 .. n) of the first (last) value equal to v, NaN matching NaN; one tight
 * loop per case (a loop testing the type, the direction and NaN at each element took three
 * quarters of a 1000 x 1000 argmax) */
#define EXT_FIND(name, T)                                                                          \
    static int64_t name(const T *x, int64_t n, T v, bool last) {                                   \
        if (v != v) {                                                                              \
            for (int64_t k = 0; k < n; k++) {                                                      \
                int64_t at = last ? n - 1 - k : k;                                                 \
                if (x[at] != x[at]) return at;                                                     \
            }                                                                                      \
        } else if (last) {                                                                         \
            for (int64_t k = n - 1; k >= 0; k--)                                                   \
                if (x[k] == v) return k;                                                           \
        } else {                                                                                   \
            for (int64_t k = 0; k < n; k++)                                                        \
                if (x[k] == v) return k;                                                           \
        }                                                                                          \
        return 0;                                                                                  \
    }
EXT_FIND(ext_find_f32, float)
EXT_FIND(ext_find_f64, double)

static int64_t ext_find(const ext_job *j, int64_t off, int64_t n, double v) {
    return j->in->desc.dtype == CX_F32
               ? ext_find_f32((const float *)j->in->data + off, n, (float)v, j->high)
               : ext_find_f64((const double *)j->in->data + off, n, v, j->high);
}

/* the extreme of [off, off + n) and, for arg, its position there, chunk by chunk: a chunk is
 * searched only when its extreme replaces the best so far */
static double ext_run(const ext_job *j, int64_t off, int64_t n, int64_t *at) {
    if (!j->arg) return ext_values(j, off, n);
    double best = 0;
    *at = -1;
    for (int64_t s = 0; s < n; s += EXT_CHUNK) {
        int64_t m = n - s < EXT_CHUNK ? n - s : EXT_CHUNK;
        double e = ext_values(j, off + s, m);
        if (*at >= 0 && !ext_take(e, best, !j->is_min, j->high)) continue;
        best = e;
        *at = s + ext_find(j, off + s, m, e);
    }
    return best;
}

static void ext_store(const ext_job *j, int64_t r, double e, int64_t at) {
    if (j->arg)
        ((int64_t *)j->out->data)[r] = at;
    else if (j->out->desc.dtype == CX_F32)
        ((float *)j->out->data)[r] = (float)e;
    else
        ((double *)j->out->data)[r] = e;
}

static void ext_part(void *ctx, int index, int parts) {
    const ext_job *j = ctx;
    int64_t at = 0;
    if (j->outer) { /* its share of the columns: row 0, then the rest folded in */
        int64_t lo = j->cols * index / parts, hi = j->cols * (index + 1) / parts;
        size_t es = cx_dtype_size(j->in->desc.dtype);
        char *acc = (char *)j->out->data + es * (size_t)lo;
        const char *x = (const char *)j->in->data + es * (size_t)lo;
        memcpy(acc, x, es * (size_t)(hi - lo));
        for (int64_t r = 1; r < j->rows; r++) {
            const char *row = x + es * (size_t)(r * j->cols);
            if (es == 4)
                j->t->extreme_row_f32((float *)acc, (const float *)row, hi - lo, j->is_min);
            else
                j->t->extreme_row_f64((double *)acc, (const double *)row, hi - lo, j->is_min);
        }
    } else if (j->rows == 1) {
        for (int k = index; k < j->slots; k += parts) {
            int64_t lo = j->cols * k / j->slots, hi = j->cols * (k + 1) / j->slots;
            j->best[k] = ext_run(j, lo, hi - lo, &at);
            if (j->arg) j->at[k] = lo + at;
        }
    } else {
        for (int64_t r = j->rows * index / parts; r < j->rows * (index + 1) / parts; r++) {
            double e = ext_run(j, r * j->cols, j->cols, &at);
            ext_store(j, r, e, at);
        }
    }
}

/* Whether the vector kernels take this reduction, and its view: rows of cols reduced each (the
 * last axes; argmax's axis when every axis after it is 1), or for reduce_max/min over the first
 * axes, rows reduced into cols (*outer). */
static bool ext_takes(const simd_table *t, cx_op_id op, const cx_desc *in, const cx_params *ps,
                      int64_t *rows, int64_t *cols, bool *outer) {
    if (!t || !t->extreme_f32 || (in->dtype != CX_F32 && in->dtype != CX_F64)) return false;
    int64_t numel = cx_desc_numel(in);
    if (numel == 0) return false;
    *outer = false;
    if (op == CX_OP_ARGMAX || op == CX_OP_ARGMIN) {
        *rows = 1;
        *cols = numel;
        if (!ps || !cx_param_has(ps, CX_P_AXIS)) return true;
        int axis = (int)ps->p[CX_P_AXIS].i[0];
        if (axis < 0 || axis >= in->rank) return false;
        for (int a = axis + 1; a < in->rank; a++)
            if (in->shape[a] != 1) return false;
        *cols = in->shape[axis];
        *rows = numel / *cols;
        return true;
    }
    if (op != CX_OP_REDUCE_MAX && op != CX_OP_REDUCE_MIN) return false;
    sum_form form;
    int64_t tail;
    cx_params all;
    ps = or_all_axes(ps, in, &all);
    if (!sum_takes(t, in, ps, &form, &tail)) return false;
    /* the kept values: the product of the axes not reduced */
    const cx_param *axes = &ps->p[CX_P_AXES];
    int64_t kept = 1;
    for (int a = 0; a < in->rank; a++) {
        bool red = false;
        for (int k = 0; k < axes->n && k < CX_MAX_PARAM_INTS; k++) red = red || axes->i[k] == a;
        if (!red) kept *= in->shape[a];
    }
    if (form == SUM_INNER) {
        *rows = kept;
        *cols = numel / kept;
        return true;
    }
    if (form == SUM_OUTER) {
        *outer = true;
        *cols = kept;
        *rows = numel / kept;
        return true;
    }
    return false;
}

/* f16/bf16 in the f32 kernels: widened (exactly) into a buffer of the cpu's cache, reduced there,
 * reduce_max/min's extremes (each one of the elements, or a NaN) rounded back exactly. The cpu's
 * loops were far slower in f16 and bf16 than in f32 for the rows of 1000 x 1000. */
static bool extreme_half(cx_op_id op, const cx_tensor *in, const cx_params *ps, cx_tensor *out) {
    const simd_table *t = blas_simd();
    cx_desc d = in->desc;
    d.dtype = CX_F32;
    int64_t rows, cols;
    bool outer, arg = op == CX_OP_ARGMAX || op == CX_OP_ARGMIN;
    if (!ext_takes(t, op, &d, ps, &rows, &cols, &outer) ||
        (arg ? out->desc.dtype != CX_S64 : out->desc.dtype != in->desc.dtype))
        return false;
    cx_tensor wide = *in, res = *out;
    wide.desc = d;
    wide.nbytes = sizeof(float) * (size_t)in->numel;
    wide.data = blas_widen_f32(in);
    float *r = arg ? NULL : cpu_buffer_get(sizeof(float) * (size_t)(out->numel ? out->numel : 1));
    if (!arg) {
        res.desc.dtype = CX_F32;
        res.nbytes = sizeof(float) * (size_t)out->numel;
        res.data = r;
    }
    bool ok = wide.data && (arg || r) && blas_simd_extreme(op, &wide, ps, &res);
    if (ok && !arg) blas_narrow_serial(in->desc.dtype, r, out->data, out->numel);
    if (wide.data) cpu_buffer_put(wide.data);
    if (r) cpu_buffer_put(r);
    return ok;
}

bool blas_simd_extreme(cx_op_id op, const cx_tensor *in, const cx_params *ps, cx_tensor *out) {
    const simd_table *t = blas_simd();
    if (t && (in->desc.dtype == CX_F16 || in->desc.dtype == CX_BF16))
        return extreme_half(op, in, ps, out);
    ext_job j = {.t = t,
                 .in = in,
                 .out = out,
                 .is_min = op == CX_OP_REDUCE_MIN || op == CX_OP_ARGMIN,
                 .arg = op == CX_OP_ARGMAX || op == CX_OP_ARGMIN,
                 .slots = 1};
    if (!ext_takes(t, op, &in->desc, ps, &j.rows, &j.cols, &j.outer)) return false;
    if (j.arg) {
        if (out->desc.dtype != CX_S64) return false;
        j.high = cx_param_has(ps, CX_P_TIE_BREAK) && ps->p[CX_P_TIE_BREAK].i[0] == 1;
    } else if (out->desc.dtype != in->desc.dtype) {
        return false;
    }
    int parts = parts_for(in->numel, GRAIN_CHEAP);
    if (j.outer) {
        if (parts > j.cols / 64) parts = j.cols >= 128 ? (int)(j.cols / 64) : 1;
    } else if (j.rows > 1) {
        if (parts > j.rows) parts = (int)j.rows;
    } else {
        j.slots = parts;
        j.best = malloc(sizeof(double) * (size_t)parts);
        j.at = malloc(sizeof(int64_t) * (size_t)parts);
        if (!j.best || !j.at) {
            free(j.best);
            free(j.at);
            return false;
        }
    }
    blas_parallel(parts, false, ext_part, &j);
    if (j.best) { /* the slices in order */
        double e = j.best[0];
        int64_t at = j.at[0];
        for (int k = 1; k < j.slots; k++)
            if (!j.arg)
                e = ext_fold(e, j.best[k], j.is_min);
            else if (ext_take(j.best[k], e, !j.is_min, j.high))
                e = j.best[k], at = j.at[k];
        ext_store(&j, 0, e, at);
        free(j.best);
        free(j.at);
    }
    return true;
}

/* ==== clip, leaky_relu, elu, softplus ========================================================= */

/* f32 and f64 in one pass, f16 and bf16 widened in chunks: clip when both bounds are one value
 * (the others take the cpu's max and min passes), leaky_relu, elu and softplus always (the
 * driver claims them for these types) */
typedef struct {
    const simd_table *t;
    cx_op_id op;
    const cx_tensor *in;
    cx_tensor *out;
    double p, q; /* clip: the bounds; leaky_relu, elu: alpha */
} param_job;

static void param_f32(const param_job *j, float *o, const float *a, int64_t n) {
    if (j->op == CX_OP_CLIP)
        j->t->clip_f32(o, a, (float)j->p, (float)j->q, n);
    else if (j->op == CX_OP_LEAKY_RELU)
        j->t->leaky_relu_f32(o, a, (float)j->p, n);
    else if (j->op == CX_OP_ELU)
        j->t->elu_f32(o, a, n, (float)j->p);
    else
        j->t->softplus_f32(o, a, n);
}

static void param_part(void *ctx, int index, int parts) {
    const param_job *j = ctx;
    int64_t lo = j->out->numel * index / parts, hi = j->out->numel * (index + 1) / parts,
            n = hi - lo;
    cx_dtype type = j->out->desc.dtype;
    if (type == CX_F32) {
        param_f32(j, (float *)j->out->data + lo, (const float *)j->in->data + lo, n);
    } else if (type == CX_F16 || type == CX_BF16) {
        /* in f32 and rounded once, as the decomposition's work type computes them (clip: exact) */
        float buf[CHUNK];
        for (int64_t i = lo; i < hi; i += CHUNK) {
            int64_t m = hi - i < CHUNK ? hi - i : CHUNK;
            widen(type, j->t, (const uint16_t *)j->in->data + i, buf, m);
            param_f32(j, buf, buf, m);
            narrow(type, j->t, buf, (uint16_t *)j->out->data + i, m);
        }
    } else {
        double *o = (double *)j->out->data + lo;
        const double *a = (const double *)j->in->data + lo;
        if (j->op == CX_OP_CLIP)
            j->t->clip_f64(o, a, j->p, j->q, n);
        else if (j->op == CX_OP_LEAKY_RELU)
            j->t->leaky_relu_f64(o, a, j->p, n);
        else if (j->op == CX_OP_ELU)
            j->t->elu_f64(o, a, n, j->p);
        else
            j->t->softplus_f64(o, a, n);
    }
}

static bool param_takes(const simd_table *t, cx_op_id op, const cx_desc *in, int n_in) {
    cx_dtype d = in[0].dtype;
    if (!t || !t->clip_f32 || (d != CX_F32 && d != CX_F64 && d != CX_F16 && d != CX_BF16))
        return false;
    if (op == CX_OP_LEAKY_RELU || op == CX_OP_ELU || op == CX_OP_SOFTPLUS) return n_in == 1;
    return op == CX_OP_CLIP && n_in == 3 && in[1].dtype == in[0].dtype &&
           in[2].dtype == in[0].dtype && cx_desc_numel(&in[1]) == 1 && cx_desc_numel(&in[2]) == 1;
}

/* a float tensor's first value, widened exactly */
static double one_value(const cx_tensor *x) {
    const void *p = x->data;
    switch (x->desc.dtype) {
    case CX_F32: return *(const float *)p;
    case CX_F64: return *(const double *)p;
    case CX_F16: return cx_f16_to_f32(*(const uint16_t *)p);
    default: return cx_bf16_to_f32(*(const uint16_t *)p);
    }
}

bool blas_simd_param_op(cx_op_id op, const cx_tensor *const *in, int n_in, const cx_params *ps,
                        cx_tensor *out) {
    const simd_table *t = blas_simd();
    cx_desc d[3];
    if (n_in < 1 || n_in > 3) return false;
    for (int k = 0; k < n_in; k++) d[k] = in[k]->desc;
    if (!param_takes(t, op, d, n_in) || out->desc.dtype != d[0].dtype || out->numel != in[0]->numel)
        return false;
    param_job j = {t, op, in[0], out, 0, 0};
    if (op == CX_OP_CLIP) {
        j.p = one_value(in[1]);
        j.q = one_value(in[2]);
    } else if (op != CX_OP_SOFTPLUS) {
        j.p = ps->p[CX_P_ALPHA].f;
    }
    if (out->numel == 0) return true;
    bool math = op == CX_OP_ELU || op == CX_OP_SOFTPLUS;
    blas_parallel(parts_for(out->numel, math ? GRAIN_MATH : GRAIN_CHEAP), false, param_part, &j);
    return true;
}

/* whether blas_simd_param_op takes these types (the capability: leaky_relu, elu, softplus) */
bool blas_simd_param_types(cx_op_id op, const cx_dtype *types, int n_in) {
    cx_desc d[3] = {0};
    for (int k = 0; k < n_in && k < 3; k++) d[k].dtype = types[k];
    return n_in == 1 && param_takes(blas_simd(), op, d, 1);
}

/* ==== fused rows: softmax, log_softmax, gelu, silu ============================================ */

typedef struct {
    const simd_table *t;
    cx_op_id op;
    const cx_tensor *in;
    cx_tensor *out;
    int64_t rows, cols; /* softmax: rows of the axis; gelu, silu: one row of every element */
    bool tanh_approx;
    float *buf; /* f16/bf16: a row of f32 per part, `stride` apart */
    size_t stride;
    const uint16_t *table; /* f16/bf16 gelu, silu: its table (or NULL) */
    simd_unary_h half;     /* bf16 gelu in registers (or NULL) */
    simd_mixed_h mixed;    /* or beside its table */
} row_job;

/* f32 values in out, computed from a (o may be a) */
static void rows_f32(const row_job *j, float *o, const float *a, int64_t n) {
    switch (j->op) {
    case CX_OP_SOFTMAX: j->t->softmax_f32(o, a, n, 0); break;
    case CX_OP_LOG_SOFTMAX: j->t->softmax_f32(o, a, n, 1); break;
    case CX_OP_GELU: j->t->gelu_f32(o, a, n, j->tanh_approx); break;
    default: j->t->silu_f32(o, a, n);
    }
}

/* values lo .. hi of the one row of an elementwise op (or whole rows lo .. hi of softmax) */
static void row_part(void *ctx, int index, int parts) {
    const row_job *j = ctx;
    cx_dtype type = j->out->desc.dtype;
    bool rows = j->op == CX_OP_SOFTMAX || j->op == CX_OP_LOG_SOFTMAX;
    int64_t span = rows ? j->rows : j->cols, step = rows ? j->cols : CHUNK;
    int64_t lo = span * index / parts, hi = span * (index + 1) / parts;
    if (rows) lo *= j->cols, hi *= j->cols;
    float *buf = j->buf ? j->buf + (size_t)index * j->stride : NULL; /* f16/bf16 only */
    /* f16/bf16 from a function of one value: the values of the part */
    uint16_t *ho = (uint16_t *)j->out->data + lo;
    const uint16_t *ha = (const uint16_t *)j->in->data + lo;
    if (j->mixed) {
        j->mixed(ho, ha, hi - lo, j->table);
        return;
    }
    if (j->half) {
        j->half(ho, ha, hi - lo);
        return;
    }
    if (j->table) { /* one call over the part: called per CHUNK it took 10% longer (1M bf16 gelu) */
        table_apply(ho, ha, 1, j->table, hi - lo);
        return;
    }
    for (int64_t i = lo; i < hi; i += step) {
        int64_t n = hi - i < step ? hi - i : step;
        if (type == CX_F32) {
            rows_f32(j, (float *)j->out->data + i, (const float *)j->in->data + i, n);
        } else {
            widen(type, j->t, (const uint16_t *)j->in->data + i, buf, n);
            rows_f32(j, buf, buf, n);
            narrow(type, j->t, buf, (uint16_t *)j->out->data + i, n);
        }
    }
}

bool blas_simd_fused_fits(cx_op_id op, const cx_desc *in, const cx_params *ps) {
    if (op == CX_OP_SOFTMAX || op == CX_OP_LOG_SOFTMAX) {
        /* along the last axis, or an axis after which every axis is 1 */
        int64_t axis = ps->p[CX_P_AXIS].i[0];
        if (axis < 0 || axis >= in->rank) return false;
        for (int a = (int)axis + 1; a < in->rank; a++)
            if (in->shape[a] != 1) return false;
        return true;
    }
    return op == CX_OP_GELU || op == CX_OP_SILU;
}

bool blas_simd_fused(cx_op_id op, const cx_tensor *in, const cx_params *ps, cx_tensor *out) {
    const simd_table *t = blas_simd();
    cx_dtype type = out->desc.dtype;
    if (!t || in->desc.dtype != type || !blas_simd_fused_fits(op, &in->desc, ps)) return false;
    if (type != CX_F32 && type != CX_F16 && type != CX_BF16) return false;
    if (out->numel == 0) return true;
    row_job j = {t, op, in, out, 1, out->numel, false, NULL, 0, NULL, NULL, NULL};
    int parts = parts_for(out->numel, GRAIN_MATH);
    if (op == CX_OP_SOFTMAX || op == CX_OP_LOG_SOFTMAX) {
        j.cols = in->desc.shape[ps->p[CX_P_AXIS].i[0]];
        j.rows = out->numel / j.cols;
        if (parts > j.rows) parts = (int)j.rows;
    } else {
        j.tanh_approx = op == CX_OP_GELU && ps->p[CX_P_APPROXIMATE].i[0] == 1;
        simd_unary_h reg = op == CX_OP_GELU && !j.tanh_approx ? unary_half(t, type, op) : NULL;
        if (reg) {
            /* in registers at every size; bf16 beside its table on large arrays */
            j.half = reg;
            if (type == CX_BF16 && out->numel >= BLAS_HALF_TABLE_MIN && t->gelu_bf16_mixed) {
                j.table = half_table(t, type, HT_GELU);
                if (j.table) j.mixed = t->gelu_bf16_mixed;
            }
            parts = parts_for(out->numel, GRAIN_CHEAP);
        } else if (type != CX_F32 && out->numel >= BLAS_HALF_TABLE_MIN) {
            j.table = half_table(t, type,
                                 op == CX_OP_SILU ? HT_SILU
                                 : j.tanh_approx  ? HT_GELU_TANH
                                                  : HT_GELU);
            if (j.table) parts = parts_for(out->numel, GRAIN_CHEAP);
        }
    }
    if (type != CX_F32 && !j.table && !j.half) {
        size_t step =
            j.rows > 1 || op == CX_OP_SOFTMAX || op == CX_OP_LOG_SOFTMAX ? (size_t)j.cols : CHUNK;
        j.stride = part_floats(step);
        j.buf = part_scratch(j.stride, parts);
        if (!j.buf) return false;
    }
    blas_parallel(parts, false, row_part, &j);
    free(j.buf);
    return true;
}

/* ==== fused chains (core/fused.h) ==============================================================
 */

/* Each part runs the chain over blocks of CHAIN_BLOCK elements: every intermediate is a block in
 * the part's scratch (at most 8 of 2 KiB, which stay in L1 with the inputs' blocks), and only the
 * last instruction writes memory, so a chain of k ops reads its inputs once and writes once
 * instead of k times. A value read from a number (rank 0) stays one value until an instruction
 * combines it with a full one. Each instruction is still one vector kernel over its block: an
 * instruction costs a pass over L1 (blocks of 128 and 1024 measured slower), where code generated
 * for the whole chain would keep values in registers. */
#define CHAIN_BLOCK 512

typedef struct {
    const simd_table *t;
    cx_fused_code c;
    int n_in;
    /* f32, or f16/bf16: inputs widened a block at a time, each instruction's result rounded to
     * the type (as the op alone rounds it), the last narrowed into out */
    cx_dtype type;
    const float *in[CX_FUSED_MAX_INPUTS]; /* uint16_t data for f16/bf16 */
    int wide_in[CX_FUSED_MAX_INPUTS];     /* 0: one value (a number, or a row of one element) */
    int64_t row[CX_FUSED_MAX_INPUTS]; /* a row's length when above 1 (its elements repeat), or 0 */
    /* a channel vector (cx_fused_is_channel): each of its chan_n values repeats over chan[k]
     * elements (0: not one) */
    int64_t chan[CX_FUSED_MAX_INPUTS], chan_n[CX_FUSED_MAX_INPUTS];
    float *out;
    int64_t numel; /* elements of the chain */
    /* reduce: the chain's elements as rows of `cols` (the trailing axes summed), each summed in
     * double; split by rows, or when there are fewer rows than parts, by columns into
     * `partial` (rows x parts) */
    bool reduce, by_cols;
    int64_t rows, cols;
    double *partial;
    /* per part: CX_FUSED_MAX_CODE blocks, then CX_FUSED_MAX_INPUTS for rows and widened
     * inputs, then one of halves */
    float *scratch;
} chain_job;

#define CHAIN_SCRATCH (CX_FUSED_MAX_CODE + CX_FUSED_MAX_INPUTS + 1)

/* Rounds a block of f32 to type t (f16, bf16) and back, through h. */
static void round_block(const chain_job *j, float *f, uint16_t *h, int64_t n) {
    narrow(j->type, j->t, f, h, n);
    widen(j->type, j->t, h, f, n);
}

/* Elements lo .. lo + n of a row of len elements (of the chain's type) repeated, as f32: whole
 * copies of the row and the ends of one, widened from f16/bf16. */
static void row_block(const chain_job *j, float *dst, const void *row, int64_t len, int64_t lo,
                      int64_t n) {
    int64_t at = lo % len;
    for (int64_t t = 0; t < n;) {
        int64_t run = len - at < n - t ? len - at : n - t;
        if (j->type != CX_F32)
            widen(j->type, j->t, (const uint16_t *)row + at, dst + t, run);
        else
            memcpy(dst + t, (const float *)row + at, sizeof(float) * (size_t)run);
        t += run;
        at = 0;
    }
}

/* The chain over elements lo .. hi (within one row when reducing): written to out at lo, or
 * summed in double and returned. */
static double chain_run(const chain_job *j, float *scratch, int64_t lo, int64_t hi) {
    const cx_fused_code *c = &j->c;
    const float *v[CX_FUSED_MAX_INPUTS + CX_FUSED_MAX_CODE];
    int wide[CX_FUSED_MAX_INPUTS + CX_FUSED_MAX_CODE];
    double acc = 0;
    bool half = j->type != CX_F32;
    uint16_t *hbuf = (uint16_t *)(scratch + (size_t)(CHAIN_SCRATCH - 1) * CHAIN_BLOCK);
    for (int64_t i = lo, n; i < hi; i += n) {
        n = hi - i < CHAIN_BLOCK ? hi - i : CHAIN_BLOCK;
        /* a block ends where a channel vector's value changes: there it is one value */
        for (int k = 0; k < j->n_in; k++)
            if (j->chan[k] && j->chan[k] - i % j->chan[k] < n) n = j->chan[k] - i % j->chan[k];
        for (int k = 0; k < j->n_in; k++) {
            wide[k] = j->wide_in[k];
            float *b = scratch + (size_t)(CX_FUSED_MAX_CODE + k) * CHAIN_BLOCK;
            if (j->row[k]) {
                /* a row: this block of its repetition, gathered */
                row_block(j, b, j->in[k], j->row[k], i, n);
                v[k] = b;
            } else if (j->chan[k]) {
                int64_t c = (i / j->chan[k]) % j->chan_n[k];
                if (half)
                    widen(j->type, j->t, (const uint16_t *)j->in[k] + c, b, 1);
                else
                    b = (float *)j->in[k] + c;
                wide[k] = 0;
                v[k] = b;
            } else if (half) {
                widen(j->type, j->t, (const uint16_t *)j->in[k] + (wide[k] ? i : 0), b,
                      wide[k] ? n : 1);
                v[k] = b;
            } else {
                v[k] = wide[k] ? j->in[k] + i : j->in[k];
            }
        }
        for (int k = 0; k < c->n; k++) {
            int r = j->n_in + k, a = c->a[k], b = c->b[k];
            wide[r] = wide[a] || (b >= 0 && wide[b]);
            /* the last instruction writes the result, unless it is summed or narrowed; a
             * one-value result is one element */
            bool last = k == c->n - 1;
            float *o = last && !j->reduce && !half ? j->out + (wide[r] ? i : 0)
                                                   : scratch + (size_t)k * CHAIN_BLOCK;
            int64_t m = wide[r] ? n : 1;
            simd_unary_h reg = b < 0 ? unary_half(j->t, j->type, c->op[k]) : NULL;
            if (reg) {
                /* as the op alone runs it (ew_segment), from the f16/bf16 values v[a] holds
                 * exactly */
                uint16_t *ho = last ? (uint16_t *)j->out + (wide[r] ? i : 0) : hbuf + CHAIN_BLOCK;
                narrow(j->type, j->t, v[a], hbuf, m);
                reg(ho, hbuf, m);
                if (!last) widen(j->type, j->t, ho, o, m);
                v[r] = o;
                continue;
            }
            if (b < 0)
                j->t->unary_f32[c->op[k]](o, v[a], m);
            else
                j->t->binary_f32[c->op[k]](o, v[a], v[b], wide[a], wide[b], m);
            if (half && last)
                narrow(j->type, j->t, o, (uint16_t *)j->out + (wide[r] ? i : 0), m);
            else if (half)
                round_block(j, o, hbuf, m);
            v[r] = o;
        }
        if (j->reduce) acc += j->t->sum_f32(v[j->n_in + c->n - 1], n);
    }
    return acc;
}

static void chain_part(void *ctx, int index, int parts) {
    const chain_job *j = ctx;
    float *scratch = j->scratch + (size_t)index * CHAIN_SCRATCH * CHAIN_BLOCK;
    if (!j->reduce) {
        chain_run(j, scratch, j->numel * index / parts, j->numel * (index + 1) / parts);
    } else if (!j->by_cols) {
        for (int64_t r = j->rows * index / parts; r < j->rows * (index + 1) / parts; r++)
            j->out[r] = (float)chain_run(j, scratch, r * j->cols, (r + 1) * j->cols);
    } else {
        int64_t lo = j->cols * index / parts, hi = j->cols * (index + 1) / parts;
        for (int64_t r = 0; r < j->rows; r++)
            j->partial[r * parts + index] =
                chain_run(j, scratch, r * j->cols + lo, r * j->cols + hi);
    }
}

/* Which of the chain's inputs (descs[k] the description of in[k]) are rows, channel vectors or
 * one value of its full input, and where their data is. */
static void chain_inputs(chain_job *j, const cx_tensor *const *in, const cx_desc *descs, int n_in) {
    const cx_desc *full = cx_fused_full_input(descs, n_in);
    for (int k = 0; k < n_in; k++) {
        bool row = full && descs[k].rank > 0 && !cx_desc_same_shape(&descs[k], full);
        int64_t plane = 0;
        if (row && cx_fused_is_channel(&descs[k], full, &plane)) {
            row = false;
            j->chan[k] = plane;
            j->chan_n[k] = in[k]->numel;
        }
        j->in[k] = (const float *)in[k]->data;
        j->wide_in[k] = descs[k].rank > 0 && !(row && in[k]->numel == 1) && !j->chan[k];
        j->row[k] = row && in[k]->numel > 1 ? in[k]->numel : 0;
    }
}

bool blas_simd_chain_fits(const cx_desc *in, int n_in, const cx_params *ps) {
    const simd_table *t = blas_simd();
    cx_fused_code c;
    cx_status st = {CX_OK, ""};
    if (!t || cx_fused_decode(ps, n_in, &c, &st) != CX_OK) return false;
    /* f32, or f16/bf16 chains without a sum */
    cx_dtype type = in[0].dtype;
    if (!cx_fused_type_ok(type) || (type != CX_F32 && ps->p[CX_P_REDUCE].i[0])) return false;
    for (int k = 0; k < n_in; k++)
        if (in[k].dtype != type) return false;
    for (int k = 0; k < c.n; k++)
        if (c.b[k] < 0 ? !t->unary_f32[c.op[k]] : !t->binary_f32[c.op[k]]) return false;
    int64_t rows, cols;
    return !ps->p[CX_P_REDUCE].i[0] || cx_fused_rows(&c, in, n_in, ps, &rows, &cols);
}

bool blas_simd_chain(const cx_tensor *const *in, int n_in, const cx_params *ps, cx_tensor *out) {
    chain_job j = {.t = blas_simd(), .n_in = n_in, .out = out->data, .numel = out->numel};
    cx_desc descs[CX_FUSED_MAX_INPUTS];
    for (int k = 0; k < n_in && k < CX_FUSED_MAX_INPUTS; k++) descs[k] = in[k]->desc;
    cx_status st = {CX_OK, ""};
    if (!blas_simd_chain_fits(descs, n_in, ps) || out->desc.dtype != descs[0].dtype ||
        cx_fused_decode(ps, n_in, &j.c, &st) != CX_OK)
        return false;
    j.type = out->desc.dtype;
    bool math = false;
    for (int k = 0; k < j.c.n; k++)
        math |= cx_op_table[j.c.op[k]].kind == CX_KIND_UNARY_FLOAT || is_math(j.c.op[k]);
    chain_inputs(&j, in, descs, n_in);
    j.reduce = ps->p[CX_P_REDUCE].i[0] != 0;
    if (j.reduce) {
        cx_fused_rows(&j.c, descs, n_in, ps, &j.rows, &j.cols);
        j.numel = j.rows * j.cols;
    }
    if (out->numel == 0) return true;
    int want = parts_for(j.numel, math ? GRAIN_MATH : GRAIN_CHEAP);
    j.by_cols = j.reduce && j.rows < want;
    j.scratch = part_scratch(CHAIN_SCRATCH * CHAIN_BLOCK, want);
    j.partial = j.by_cols ? calloc((size_t)(j.rows * want), sizeof(double)) : NULL;
    if (!j.scratch || (j.by_cols && !j.partial)) {
        free(j.scratch);
        free(j.partial);
        return false;
    }
    if (j.reduce && j.cols == 0) {
        /* sums over nothing are 0 */
        for (int64_t r = 0; r < j.rows; r++) j.out[r] = 0.0f;
    } else {
        int parts = blas_parallel(want, false, chain_part, &j);
        /* the parts' sums of each row, in order */
        for (int64_t r = 0; j.by_cols && r < j.rows; r++) {
            double acc = 0;
            for (int p = 0; p < parts; p++) acc += j.partial[r * parts + p];
            j.out[r] = (float)acc;
        }
    }
    free(j.scratch);
    free(j.partial);
    return true;
}

/* ==== a chain as another op's epilogue (driver.h: epilogue) ================================
 * The chain's value 0 is the op's result, which the op has just written: each block runs the
 * chain over its own elements in place, on the thread that wrote them, while they are in that
 * core's cache. f32 only (a product's f16/bf16 result is rounded from f32 blocks later). */

struct blas_epilogue {
    chain_job j;
    int parts; /* scratch blocks: one per thread of the pool */
};

/* blas_epilogue_fits, with the chain's code into c */
static bool epilogue_code(const cx_desc *out, const cx_desc *extra, int n_extra,
                          const cx_params *ps, cx_fused_code *c) {
    const simd_table *t = blas_simd();
    cx_status st = {CX_OK, ""};
    if (!t || out->dtype != CX_F32 || out->rank == 0 || n_extra < 0 ||
        n_extra + 1 > CX_FUSED_MAX_INPUTS ||
        cx_fused_decode_param(ps, CX_P_EPILOGUE, n_extra + 1, c, &st) != CX_OK)
        return false;
    for (int k = 0; k < n_extra; k++)
        if (extra[k].dtype != CX_F32 || !cx_fused_broadcasts(&extra[k], out)) return false;
    for (int k = 0; k < c->n; k++)
        if (c->b[k] < 0 ? !t->unary_f32[c->op[k]] : !t->binary_f32[c->op[k]]) return false;
    return true;
}

bool blas_epilogue_fits(const cx_desc *out, const cx_desc *extra, int n_extra,
                        const cx_params *ps) {
    cx_fused_code c;
    return epilogue_code(out, extra, n_extra, ps, &c);
}

blas_epilogue *blas_epilogue_new(cx_tensor *out, const cx_tensor *const *extra, int n_extra,
                                 const cx_params *ps) {
    cx_desc descs[CX_FUSED_MAX_INPUTS];
    const cx_tensor *in[CX_FUSED_MAX_INPUTS];
    if (n_extra < 0 || n_extra + 1 > CX_FUSED_MAX_INPUTS) return NULL;
    descs[0] = out->desc;
    in[0] = out;
    for (int k = 0; k < n_extra; k++) {
        descs[k + 1] = extra[k]->desc;
        in[k + 1] = extra[k];
    }
    blas_epilogue *e = calloc(1, sizeof *e);
    if (!e || !epilogue_code(&descs[0], descs + 1, n_extra, ps, &e->j.c)) {
        free(e);
        return NULL;
    }
    e->j.t = blas_simd();
    e->j.n_in = n_extra + 1;
    e->j.type = CX_F32;
    e->j.out = out->data;
    e->j.numel = out->numel;
    chain_inputs(&e->j, in, descs, e->j.n_in);
    e->parts = blas_pool_threads();
    if (!(e->j.scratch = part_scratch(CHAIN_SCRATCH * CHAIN_BLOCK, e->parts))) {
        free(e);
        return NULL;
    }
    return e;
}

void blas_epilogue_run(const blas_epilogue *e, int part, int64_t lo, int64_t hi) {
    chain_run(&e->j, e->j.scratch + (size_t)part * CHAIN_SCRATCH * CHAIN_BLOCK, lo, hi);
}

void blas_epilogue_block(const blas_epilogue *e, int part, const float *c, int rows, int cols,
                         int ldc) {
    int64_t at = c - e->j.out;
    if (cols == ldc) {
        blas_epilogue_run(e, part, at, at + (int64_t)rows * cols);
        return;
    }
    for (int r = 0; r < rows; r++, at += ldc) blas_epilogue_run(e, part, at, at + cols);
}

static void epilogue_part(void *ctx, int index, int parts) {
    const blas_epilogue *e = ctx;
    blas_epilogue_run(e, index, e->j.numel * index / parts, e->j.numel * (index + 1) / parts);
}

void blas_epilogue_all(const blas_epilogue *e) {
    int parts = parts_for(e->j.numel, GRAIN_CHEAP);
    blas_parallel(parts < e->parts ? parts : e->parts, false, epilogue_part, (void *)e);
}

void blas_epilogue_free(blas_epilogue *e) {
    if (!e) return;
    free(e->j.scratch);
    free(e);
}

/* ==== layer_norm ============================================================================== */

typedef struct {
    const simd_table *t;
    const cx_tensor *x;
    cx_tensor *out;
    const float *g, *b; /* gamma and beta in f32 */
    int gs, bs;
    int64_t rows, cols;
    float eps;
    float *buf;    /* f16/bf16: two rows of f32 per part, each `stride` long */
    size_t stride; /* part_floats(cols) */
} norm_job;

static void norm_part(void *ctx, int index, int parts) {
    const norm_job *j = ctx;
    cx_dtype type = j->out->desc.dtype;
    float *in = j->buf ? j->buf + (size_t)index * 2 * j->stride : NULL;
    float *res = in ? in + j->stride : NULL;
    for (int64_t r = j->rows * index / parts; r < j->rows * (index + 1) / parts; r++) {
        int64_t off = r * j->cols;
        if (type == CX_F32) {
            j->t->layer_norm_f32((float *)j->out->data + off, (const float *)j->x->data + off, j->g,
                                 j->b, j->gs, j->bs, j->cols, j->eps);
        } else {
            widen(type, j->t, (const uint16_t *)j->x->data + off, in, j->cols);
            j->t->layer_norm_f32(res, in, j->g, j->b, j->gs, j->bs, j->cols, j->eps);
            narrow(type, j->t, res, (uint16_t *)j->out->data + off, j->cols);
        }
    }
}

bool blas_simd_layer_norm_fits(const cx_desc *in, int n_in, const cx_params *ps) {
    if (n_in != 3 || !blas_simd()) return false;
    cx_dtype type = in[0].dtype;
    if ((type != CX_F32 && type != CX_F16 && type != CX_BF16) || in[1].dtype != type ||
        in[2].dtype != type)
        return false;
    /* the normalised axes are the last ones, in order */
    const cx_param *axes = &ps->p[CX_P_AXES];
    int rank = in[0].rank;
    if (axes->n < 1 || axes->n > rank) return false;
    int64_t cols = 1;
    for (int k = 0; k < axes->n; k++) {
        if (axes->i[k] != rank - axes->n + k) return false;
        cols *= in[0].shape[axes->i[k]];
    }
    /* gamma and beta: a row of the normalised size, or one value */
    for (int k = 1; k < 3; k++) {
        int64_t n = cx_desc_numel(&in[k]);
        if (n != 1 && n != cols) return false;
    }
    return true;
}

/* gamma or beta as f32: in place, or widened into dst */
static const float *as_f32(const simd_table *t, const cx_tensor *p, float *dst) {
    if (p->desc.dtype == CX_F32) return p->data;
    widen(p->desc.dtype, t, p->data, dst, p->numel);
    return dst;
}

bool blas_simd_layer_norm(const cx_tensor *const *in, const cx_params *ps, cx_tensor *out) {
    const simd_table *t = blas_simd();
    cx_desc d[3] = {in[0]->desc, in[1]->desc, in[2]->desc};
    if (!blas_simd_layer_norm_fits(d, 3, ps) || out->desc.dtype != d[0].dtype) return false;
    if (out->numel == 0) return true;
    norm_job j = {t,
                  in[0],
                  out,
                  NULL,
                  NULL,
                  in[1]->numel != 1,
                  in[2]->numel != 1,
                  0,
                  0,
                  (float)ps->p[CX_P_EPSILON].f,
                  NULL,
                  0};
    const cx_param *axes = &ps->p[CX_P_AXES];
    j.cols = 1;
    for (int k = 0; k < axes->n; k++) j.cols *= d[0].shape[axes->i[k]];
    j.rows = out->numel / j.cols;
    int parts = parts_for(out->numel, GRAIN_CHEAP / 4);
    if (parts > j.rows) parts = (int)j.rows;
    bool half = d[0].dtype != CX_F32;
    /* f16/bf16: the parts' rows, then gamma and beta widened */
    j.stride = part_floats((size_t)j.cols);
    size_t rows = 2 * j.stride * (size_t)parts;
    float *mem =
        half ? part_scratch(part_floats(rows + (size_t)(in[1]->numel + in[2]->numel)), 1) : NULL;
    if (half && !mem) return false;
    if (half) {
        j.buf = mem;
        j.g = as_f32(t, in[1], mem + rows);
        j.b = as_f32(t, in[2], mem + rows + in[1]->numel);
    } else {
        j.g = in[1]->data;
        j.b = in[2]->data;
    }
    blas_parallel(parts, false, norm_part, &j);
    free(mem);
    return true;
}

/* ==== logsumexp and categorical cross-entropy: a number per row ============================== */

typedef struct {
    const simd_table *t;
    bool xent;
    const float *x, *y; /* logsumexp: x; cross-entropy: y_true y, y_pred x */
    int64_t rows, cols;
    int from_logits;
    float *res; /* the result of each row */
    /* logsumexp of one long row: its slices' maxima (phase 0), then their sums (phase 1) */
    int slots, phase;
    float *slot_max, m;
    double *slot_sum;
    /* f16/bf16 by rows: x and y are NULL, hx and hy their halves, each part widening a row of
     * each into its two scratch rows (buf, `stride` apart) */
    cx_dtype type;
    const uint16_t *hx, *hy;
    float *buf;
    size_t stride;
} rowred_job;

/* what logsumexp takes out of a row before exp, as the decomposition does: the row's max where
 * it is finite, else 0 (an infinite or NaN max then gives inf, -inf or NaN through exp and log) */
static float shifted_max(float m) {
    return fabsf(m) < INFINITY ? m : 0.0f;
}

static void rowred_part(void *ctx, int index, int parts) {
    const rowred_job *j = ctx;
    const simd_table *t = j->t;
    if (j->slots) {
        for (int k = index; k < j->slots; k += parts) {
            int64_t lo = j->cols * k / j->slots, hi = j->cols * (k + 1) / j->slots;
            if (j->phase == 0)
                j->slot_max[k] = t->row_max_f32(j->x + lo, hi - lo);
            else
                j->slot_sum[k] = t->sum_exp_f32(NULL, j->x + lo, hi - lo, j->m);
        }
        return;
    }
    float *bx = j->buf ? j->buf + (size_t)index * 2 * j->stride : NULL;
    float *by = bx ? bx + j->stride : NULL;
    for (int64_t r = j->rows * index / parts; r < j->rows * (index + 1) / parts; r++) {
        const float *x = j->x ? j->x + r * j->cols : bx, *y = j->y ? j->y + r * j->cols : by;
        if (!j->x) {
            widen(j->type, t, j->hx + r * j->cols, bx, j->cols);
            if (j->xent) widen(j->type, t, j->hy + r * j->cols, by, j->cols);
        }
        if (j->xent) {
            j->res[r] = t->xent_f32(y, x, j->cols, j->from_logits);
        } else {
            float m = shifted_max(t->row_max_f32(x, j->cols));
            j->res[r] = logf((float)t->sum_exp_f32(NULL, x, j->cols, m)) + m;
        }
    }
}

/* n halves to f32 (widening) or back (narrowing), split across the pool's threads */
typedef struct {
    const simd_table *t;
    cx_dtype type;
    bool widening;
    const void *src;
    void *dst;
    int64_t n;
} convert_job;

static void convert_part(void *ctx, int index, int parts) {
    const convert_job *c = ctx;
    int64_t lo = c->n * index / parts, hi = c->n * (index + 1) / parts;
    if (c->widening)
        widen(c->type, c->t, (const uint16_t *)c->src + lo, (float *)c->dst + lo, hi - lo);
    else
        narrow(c->type, c->t, (const float *)c->src + lo, (uint16_t *)c->dst + lo, hi - lo);
}

void blas_widen(cx_dtype type, const void *src, float *dst, int64_t n) {
    const simd_table *t = blas_simd();
    if (!t) {
        blas_widen_serial(type, src, dst, n);
        return;
    }
    convert_job c = {t, type, true, src, dst, n};
    blas_parallel(parts_for(n, GRAIN_WIDEN), false, convert_part, &c);
}

void blas_widen_serial(cx_dtype type, const void *src, float *dst, int64_t n) {
    const simd_table *t = blas_simd();
    if (t)
        widen(type, t, src, dst, n);
    else if (type == CX_F16)
        cx_f16_to_f32_array(src, dst, n);
    else
        cx_bf16_to_f32_array(src, dst, n);
}

void blas_narrow_serial(cx_dtype type, const float *src, void *dst, int64_t n) {
    const simd_table *t = blas_simd();
    if (t)
        narrow(type, t, src, dst, n);
    else if (type == CX_F16)
        cx_f32_to_f16_array(src, dst, n);
    else
        cx_f32_to_bf16_array(src, dst, n);
}

void blas_narrow(cx_dtype type, const float *src, void *dst, int64_t n) {
    const simd_table *t = blas_simd();
    if (!t) {
        blas_narrow_serial(type, src, dst, n);
        return;
    }
    convert_job c = {t, type, false, src, dst, n};
    blas_parallel(parts_for(n, GRAIN_CHEAP), false, convert_part, &c);
}

/* ==== as_type =================================================================================
 * f16/bf16 to and from f32 on the tables' conversions; f16 to bf16 and back, f16/bf16 into f64
 * and u8 into f16/bf16 through a chunk of f32 in L1 (through_f32: every step exact but the one
 * rounding, so the cpu's); f32 to and from f64, u8 and s32 as plain loops (int_cast): the same bits
 * as the cpu driver's cast.c, split across the pool's threads. The cpu's loops convert one element
 * at a time on one thread: 1M f32 to bf16 ran far slower there than PyTorch's (the Xeon). f64
 * into f16/bf16 (one rounding from double) and the other integer pairs stay on the cpu. */
static bool cast_takes(cx_dtype from, cx_dtype to) {
    bool half_from = from == CX_F16 || from == CX_BF16, half_to = to == CX_F16 || to == CX_BF16;
    if (from == to) return false;
    if (half_from) return half_to || to == CX_F32 || to == CX_F64;
    /* u8 fits both halves exactly; f64 into a half rounds once from double: the cpu's */
    if (half_to) return from == CX_F32 || from == CX_U8;
    if (from == CX_U8 || from == CX_S32) return to == CX_F32 || to == CX_F64;
    if (from == CX_F32) return to == CX_F64 || to == CX_U8 || to == CX_S32;
    return from == CX_F64 && to == CX_F32;
}

/* The loops below are compiled for AVX2, which every vector table needs (blas_simd() is NULL
 * without it): they vectorise at 8 lanes there. */
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define AVX2_LOOPS __attribute__((target("avx2")))
#else
#define AVX2_LOOPS
#endif

/* A chunk at a time through f32 in L1: f16/bf16 widened or u8 converted, both exactly, then
 * rounded once into f16/bf16 or widened exactly into f64. */
AVX2_LOOPS static void through_f32(const simd_table *t, cx_dtype from, cx_dtype to, const void *src,
                                   void *dst, int64_t lo, int64_t hi) {
    float buf[CHUNK];
    for (int64_t i = lo; i < hi; i += CHUNK) {
        int64_t m = hi - i < CHUNK ? hi - i : CHUNK;
        if (from == CX_U8)
            for (int64_t k = 0; k < m; k++) buf[k] = ((const uint8_t *)src)[i + k];
        else
            widen(from, t, (const uint16_t *)src + i, buf, m);
        if (to == CX_F64)
            for (int64_t k = 0; k < m; k++) ((double *)dst)[i + k] = buf[k];
        else
            narrow(to, t, buf, (uint16_t *)dst + i, m);
    }
}

/* u8 and s32 into f32 and f64 (exact, or s32 into f32 rounded once as C converts); f32 into u8
 * and s32 toward zero, saturated, NaN 0, as cast.c's sat_u8 and sat_s32 (compared in float: every
 * bound is a float, so the comparisons are the same). */
AVX2_LOOPS static void int_cast(cx_dtype from, cx_dtype to, const void *src, void *dst, int64_t lo,
                                int64_t hi) {
    if (from == CX_U8 || from == CX_S32) {
        const uint8_t *restrict u = src;
        const int32_t *restrict s = src;
        float *restrict f = dst;
        double *restrict d = dst;
        if (from == CX_U8 && to == CX_F32)
            for (int64_t i = lo; i < hi; i++) f[i] = u[i];
        else if (from == CX_U8)
            for (int64_t i = lo; i < hi; i++) d[i] = u[i];
        else if (to == CX_F32)
            for (int64_t i = lo; i < hi; i++) f[i] = (float)s[i];
        else
            for (int64_t i = lo; i < hi; i++) d[i] = s[i];
    } else if (to == CX_U8) {
        const float *restrict a = src;
        uint8_t *restrict o = dst;
        for (int64_t i = lo; i < hi; i++) {
            float v = a[i];
            o[i] = v > 0 ? (v < 255.0f ? (uint8_t)v : UINT8_MAX) : 0;
        }
    } else {
        const float *restrict a = src;
        int32_t *restrict o = dst;
        for (int64_t i = lo; i < hi; i++) {
            float v = a[i];
            o[i] = v != v                ? 0
                   : v <= -2147483648.0f ? INT32_MIN
                   : v >= 2147483648.0f  ? INT32_MAX
                                         : (int32_t)v;
        }
    }
}

typedef struct {
    const simd_table *t;
    cx_dtype from, to;
    const void *src;
    void *dst;
    int64_t n;
} cast_job;

static void cast_run(const cast_job *c, int64_t lo, int64_t hi) {
    const simd_table *t = c->t;
    cx_dtype from = c->from, to = c->to;
    bool half_from = from == CX_F16 || from == CX_BF16, half_to = to == CX_F16 || to == CX_BF16;
    if ((half_to && from != CX_F32) || (half_from && to == CX_F64)) {
        through_f32(t, from, to, c->src, c->dst, lo, hi);
    } else if (from == CX_U8 || from == CX_S32 || to == CX_U8 || to == CX_S32) {
        int_cast(from, to, c->src, c->dst, lo, hi);
    } else if (half_from) {
        widen(from, t, (const uint16_t *)c->src + lo, (float *)c->dst + lo, hi - lo);
    } else if (half_to) {
        narrow(to, t, (const float *)c->src + lo, (uint16_t *)c->dst + lo, hi - lo);
    } else if (from == CX_F32) {
        const float *restrict a = (const float *)c->src;
        double *restrict o = c->dst;
        for (int64_t i = lo; i < hi; i++) o[i] = a[i];
    } else {
        const double *restrict a = (const double *)c->src;
        float *restrict o = c->dst;
        for (int64_t i = lo; i < hi; i++) o[i] = (float)a[i];
    }
}

static void cast_part(void *ctx, int index, int parts) {
    const cast_job *c = ctx;
    cast_run(c, c->n * index / parts, c->n * (index + 1) / parts);
}

bool blas_simd_cast(const cx_tensor *in, cx_tensor *out) {
    const simd_table *t = blas_simd();
    cx_dtype from = in->desc.dtype, to = out->desc.dtype;
    if (!t || !cast_takes(from, to) || in->numel != out->numel) return false;
    cast_job c = {t, from, to, in->data, out->data, out->numel};
    if (c.n > 0) blas_parallel(parts_for(c.n, GRAIN_CHEAP), false, cast_part, &c);
    return true;
}

/* x as f32: in place, or widened into a buffer of the cpu's cache (*owned, to put back; a fresh
 * 4 MB from malloc page-faulted in on every call: a 1000 x 1000 bf16 cross-entropy, when it
 * widened this way, ran far slower than in f32). f16/bf16 logsumexp of one long row. */
static const float *f32_view(const cx_tensor *x, float **owned) {
    *owned = NULL;
    if (x->desc.dtype == CX_F32) return x->data;
    return *owned = blas_widen_f32(x);
}

static bool is_f32ish(cx_dtype t) {
    return t == CX_F32 || t == CX_F16 || t == CX_BF16;
}

bool blas_simd_rowred_fits(cx_op_id op, const cx_desc *in, int n_in, const cx_params *ps) {
    if (!blas_simd() || n_in < 1 || !is_f32ish(in[0].dtype)) return false;
    if (op == CX_OP_CATEGORICAL_CROSS_ENTROPY) {
        if (n_in != 2 || in[1].dtype != in[0].dtype || in[1].rank != in[0].rank || in[0].rank < 1)
            return false;
        for (int a = 0; a < in[0].rank; a++)
            if (in[0].shape[a] != in[1].shape[a]) return false;
        return true;
    }
    if (op != CX_OP_LOGSUMEXP || n_in != 1) return false;
    /* reduced over the last axes, in order */
    const cx_param *axes = &ps->p[CX_P_AXES];
    if (axes->n < 1 || axes->n > in[0].rank) return false;
    for (int k = 0; k < axes->n; k++)
        if (axes->i[k] != in[0].rank - axes->n + k) return false;
    return true;
}

bool blas_simd_rowred(cx_op_id op, const cx_tensor *const *in, const cx_params *ps,
                      cx_tensor *out) {
    const simd_table *t = blas_simd();
    bool xent = op == CX_OP_CATEGORICAL_CROSS_ENTROPY;
    int n_in = xent ? 2 : 1;
    cx_desc d[2] = {in[0]->desc, xent ? in[1]->desc : in[0]->desc};
    if (!blas_simd_rowred_fits(op, d, n_in, ps) || out->desc.dtype != d[0].dtype) return false;
    const cx_tensor *x = in[xent ? 1 : 0];
    int64_t cols = 1;
    if (xent) {
        cols = d[0].shape[d[0].rank - 1];
    } else {
        const cx_param *axes = &ps->p[CX_P_AXES];
        for (int k = 0; k < axes->n; k++) cols *= d[0].shape[axes->i[k]];
    }
    int64_t rows = xent ? (cols ? x->numel / cols : 1) : out->numel;
    if (xent && cols == 0) { /* the rows are the shape without its last axis */
        rows = 1;
        for (int a = 0; a + 1 < d[0].rank; a++) rows *= d[0].shape[a];
    }
    int parts = parts_for(rows * cols, GRAIN_MATH);
    bool slices = !xent && rows == 1 && parts > 1; /* one long row: by slices, in two passes */
    if (!slices && parts > rows) parts = (int)(rows ? rows : 1);
    /* f16/bf16 by rows: each part widens its rows one at a time, into scratch that stays in
     * L1, rather than the whole tensor first (a 1000 x 1000 bf16 cross-entropy ran faster so,
     * near f32's in the same minutes). Rows longer than 2^16 would not stay in L2
     * either, and each part's two would outgrow the one widened tensor. */
    bool by_rows = x->desc.dtype != CX_F32 && !slices && cols <= (1 << 16);
    size_t stride = part_floats(cols ? (size_t)cols : 1);
    float *own_x = NULL, *own_y = NULL, *buf = NULL;
    float *res = malloc(sizeof(float) * (size_t)(rows ? rows : 1));
    const float *xf = NULL, *yf = NULL;
    bool ok = res != NULL;
    if (ok && by_rows) {
        ok = (buf = part_scratch(2 * stride, parts)) != NULL;
    } else if (ok) {
        xf = f32_view(x, &own_x);
        yf = xf && xent ? f32_view(in[0], &own_y) : NULL;
        ok = xf && (!xent || yf);
    }
    if (ok) {
        rowred_job j = {
            .t = t, .xent = xent, .x = xf, .y = yf, .rows = rows, .cols = cols, .res = res};
        if (by_rows) {
            j.type = x->desc.dtype;
            j.hx = x->data;
            j.hy = xent ? in[0]->data : NULL;
            j.buf = buf;
            j.stride = stride;
        }
        if (xent) j.from_logits = (int)ps->p[CX_P_FROM_LOGITS].i[0];
        if (slices) {
            float maxima[64];
            double sums[64];
            j.slots = parts > 64 ? 64 : parts;
            j.slot_max = maxima;
            j.slot_sum = sums;
            blas_parallel(parts, false, rowred_part, &j);
            float m = -INFINITY;
            bool nan = false;
            for (int k = 0; k < j.slots; k++) {
                nan = nan || maxima[k] != maxima[k];
                m = maxima[k] > m ? maxima[k] : m;
            }
            j.m = shifted_max(nan ? NAN : m);
            j.phase = 1;
            blas_parallel(parts, false, rowred_part, &j);
            double s = 0;
            for (int k = 0; k < j.slots; k++) s += sums[k];
            res[0] = logf((float)s) + j.m;
        } else {
            blas_parallel(parts, false, rowred_part, &j);
        }
        int64_t how = xent ? ps->p[CX_P_REDUCTION].i[0] : 2;
        if (how != 2) { /* the losses summed in double, as the sum op does; mean: / n in f32 */
            double s = -0.0;
            for (int64_t r = 0; r < rows; r++) s += res[r];
            res[0] = how == 0 ? (float)s / (float)rows : (float)s;
        }
        if (out->desc.dtype == CX_F32)
            memcpy(out->data, res, sizeof(float) * (size_t)out->numel);
        else
            narrow(out->desc.dtype, t, res, out->data, out->numel);
    }
    free(res);
    free(buf);
    cpu_buffer_put(own_x);
    cpu_buffer_put(own_y);
    return ok;
}

/* ==== which library runs what ================================================================ */

/* The broadcast shape of the inputs: the elementwise ops' output. */
static void broadcast_desc(const cx_desc *in, int n_in, cx_desc *out) {
    *out = in[0];
    for (int j = 1; j < n_in; j++) {
        int rank = in[j].rank > out->rank ? in[j].rank : out->rank;
        cx_desc r = *out;
        r.rank = rank;
        for (int a = 0; a < rank; a++) {
            int ka = a - (rank - out->rank), kb = a - (rank - in[j].rank);
            int64_t x = ka >= 0 ? out->shape[ka] : 1, y = kb >= 0 ? in[j].shape[kb] : 1;
            r.shape[a] = x == 1 ? y : x;
        }
        *out = r;
    }
}

const char *blas_simd_library(cx_op_id op, const cx_desc *in, int n_in, const cx_params *ps) {
    const simd_table *t = blas_simd();
    if (!t || n_in < 1) return NULL;
    /* fused takes up to 8 inputs, the others at most 3 */
    if (op == CX_OP_SOFTMAX || op == CX_OP_LOG_SOFTMAX || op == CX_OP_GELU || op == CX_OP_SILU ||
        op == CX_OP_LAYER_NORM || op == CX_OP_LOGSUMEXP || op == CX_OP_CATEGORICAL_CROSS_ENTROPY ||
        op == CX_OP_FUSED)
        return t->name;
    if (n_in > 3) return NULL;
    if (op == CX_OP_AS_TYPE) { /* without a type (the capability listing): into f32, f32 into f16 */
        cx_dtype from = in[0].dtype, to = from == CX_F32 ? CX_F16 : CX_F32;
        if (ps && cx_param_has(ps, CX_P_TYPE)) to = (cx_dtype)ps->p[CX_P_TYPE].i[0];
        return n_in == 1 && cast_takes(from, to) ? t->name : NULL;
    }
    if (op == CX_OP_CLIP || op == CX_OP_LEAKY_RELU || op == CX_OP_ELU || op == CX_OP_SOFTPLUS)
        return param_takes(t, op, in, n_in) ? t->name : NULL;
    if (op == CX_OP_REDUCE_MAX || op == CX_OP_REDUCE_MIN || op == CX_OP_ARGMAX ||
        op == CX_OP_ARGMIN) {
        int64_t rows, cols;
        bool outer;
        cx_desc d = in[0]; /* f16/bf16 widened into the f32 kernels */
        if (d.dtype == CX_F16 || d.dtype == CX_BF16) d.dtype = CX_F32;
        return n_in == 1 && ext_takes(t, op, &d, ps, &rows, &cols, &outer) ? t->name : NULL;
    }
    if (op == CX_OP_SUM || op == CX_OP_MEAN) { /* mean: the sum, then one division */
        sum_form form;
        cx_params all;
        ps = or_all_axes(ps, &in[0], &all);
        int64_t tail;
        return sum_takes(t, &in[0], ps, &form, &tail) ? t->name : NULL;
    }
    cx_desc out;
    broadcast_desc(in, n_in, &out);
    cx_op_kind kind = cx_op_table[op].kind;
    if (kind == CX_KIND_COMPARE || kind == CX_KIND_LOGICAL) out.dtype = CX_U8;
    if (op == CX_OP_SELECT && n_in == 3) out.dtype = in[1].dtype;
    layout l;
    ew_form form;
    t = table_for(op, out.dtype, cx_desc_numel(&out), n_in);
    return ew_takes(t, op, in, n_in, &out, &l, &form) ? t->name : NULL;
}
