/* The vector kernels' tables (simd_kernels.c, built once per instruction set) called directly,
 * for what the differential suite reaches only through some shapes: the transpose, at every
 * size around its 8 x 8 blocks and 32 x 32 tiles, and the f16/bf16 binary kernels and sums
 * against the scalar conversions of half.h, tails and broadcasts included, and the f32 erf (our
 * own approximation) against double erf, gelu and silu against their formulas, and floor, ceil,
 * round, sign, remainder and the functions computed in double against libm. Each table runs
 * where the processor has its instruction set. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <cpuid.h>

#include "../../../core/half.h"
#include "../../../core/half_array.h"
#include "../blas_simd.h"

static const simd_table *tables[3];
static int n_tables;
static simd_table with_bf16; /* simd_avx512 with the AVX512-BF16 rounding, where it runs */

static void find_tables(void) {
    __builtin_cpu_init();
    n_tables = 0;
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
        tables[n_tables++] = &simd_avx2;
    if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512dq") &&
        __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl"))
        tables[n_tables++] = &simd_avx512;
    unsigned a, b, c, d;
    if (n_tables == 2 && __get_cpuid_count(7, 1, &a, &b, &c, &d) && (a & (1u << 5))) {
        simd_avx512_bf16(&with_bf16);
        with_bf16.name = "avx512+bf16";
        tables[n_tables++] = &with_bf16;
    }
    if (n_tables == 0)
        printf("simd: this processor has neither AVX2 nor AVX-512: nothing to run\n");
}

static void test_transpose(void **state) {
    (void)state;
    const int64_t sizes[] = {1, 2, 7, 8, 9, 15, 16, 31, 32, 33, 40, 64, 65, 676};
    const int n_sizes = (int)(sizeof sizes / sizeof sizes[0]);
    float *t = malloc(sizeof(float) * 676 * 676), *y = malloc(sizeof(float) * 676 * 676);
    assert_non_null(t);
    assert_non_null(y);
    for (int k = 0; k < n_tables; k++)
        for (int a = 0; a < n_sizes; a++)
            for (int b = 0; b < n_sizes; b++) {
                int64_t rows = sizes[a], cols = sizes[b];
                for (int64_t i = 0; i < rows * cols; i++) t[i] = (float)i + 0.5f;
                memset(y, 0xff, sizeof(float) * (size_t)(rows * cols));
                tables[k]->transpose_f32(y, t, rows, cols);
                for (int64_t r = 0; r < rows; r++)
                    for (int64_t c = 0; c < cols; c++)
                        if (y[c * rows + r] != t[r * cols + c])
                            fail_msg("%s: %lld x %lld: y[%lld][%lld] = %g, expected %g",
                                     tables[k]->name, (long long)rows, (long long)cols,
                                     (long long)c, (long long)r, (double)y[c * rows + r],
                                     (double)t[r * cols + c]);
            }
    free(t);
    free(y);
}

/* gemm_rows_f32 against its definition: each element of C its products summed in k's order
 * from +0 with one rounding each (fmaf), then added to C; row counts around the kernel's
 * blocks, several vectors of columns, rows of A, B and C wider than their operands */
static void test_gemm_rows(void **state) {
    (void)state;
    const int64_t ms[] = {1, 3, 4, 8, 9, 17}, ks[] = {0, 1, 5, 64};
    for (int t = 0; t < n_tables; t++) {
        const simd_table *tb = tables[t];
        int nr = tb->gemm_nr;
        for (size_t a = 0; a < sizeof ms / sizeof ms[0]; a++)
            for (size_t b = 0; b < sizeof ks / sizeof ks[0]; b++)
                for (int64_t blocks = 1; blocks <= 3; blocks++) {
                    int64_t m = ms[a], k = ks[b], n = blocks * nr, ldc = n + 3, lda = k + 2,
                            ldb = n + 5;
                    float *x = malloc(sizeof(float) * (size_t)(m * lda + 1));
                    float *bp = malloc(sizeof(float) * (size_t)(ldb * k + 1));
                    float *c = malloc(sizeof(float) * (size_t)(m * ldc));
                    float *want = malloc(sizeof(float) * (size_t)(m * ldc));
                    assert_true(x && bp && c && want);
                    for (int64_t i = 0; i < m * lda; i++) x[i] = sinf((float)i) * 3;
                    for (int64_t i = 0; i < ldb * k; i++) bp[i] = cosf((float)i * 0.7f);
                    for (int64_t i = 0; i < m * ldc; i++) c[i] = want[i] = (float)(i % 13) - 6;
                    for (int64_t i = 0; i < m; i++)
                        for (int64_t j = 0; j < n; j++) {
                            float acc = 0;
                            for (int64_t q = 0; q < k; q++)
                                acc = fmaf(x[i * lda + q], bp[q * ldb + j], acc);
                            want[i * ldc + j] += acc;
                        }
                    tb->gemm_rows_f32(c, ldc, x, lda, bp, ldb, m, n, k);
                    for (int64_t i = 0; i < m * ldc; i++)
                        if (memcmp(&c[i], &want[i], sizeof(float)) != 0)
                            fail_msg("%s gemm_rows %lld x %lld x %lld: at %lld %a, expected %a",
                                     tb->name, (long long)m, (long long)n, (long long)k,
                                     (long long)i, (double)c[i], (double)want[i]);
                    free(x);
                    free(bp);
                    free(c);
                    free(want);
                }
    }
}

/* the values the half kernels see: ordinary, tiny, huge, signed zeros, infinities, NaN */
static float sample(int64_t i) {
    /* 1e-39 and -2.5e-39 are denormal in f32 and bf16 (the AVX512-BF16 instruction flushes
     * them) */
    static const float special[] = {0.0f,   -0.0f,  1.0f,   -1.5f,    65504.0f, 1e30f,
                                    -1e30f, 3e-8f,  0.1f,   123.456f, -7e-5f,   1e-3f,
                                    2.5f,   -3.25f, 1e-39f, -2.5e-39f};
    if (i % 29 == 5) return NAN;
    if (i % 31 == 7) return i % 2 ? INFINITY : -INFINITY;
    return special[i % 16] * (float)(1 + i % 5);
}

static uint16_t to_half(int bf, float f) {
    return bf ? cx_bf16_from_f32(f) : cx_f16_from_f32(f);
}
static float from_half(int bf, uint16_t h) {
    return bf ? cx_bf16_to_f32(h) : cx_f16_to_f32(h);
}

static float reference(cx_op_id op, float x, float y) {
    switch (op) {
    case CX_OP_ADD: return x + y;
    case CX_OP_SUBTRACT: return x - y;
    case CX_OP_MULTIPLY: return x * y;
    case CX_OP_DIVIDE: return x / y;
    case CX_OP_MAX: return x > y || x != x ? x : y;
    default: return x < y || x != x ? x : y; /* min */
    }
}

static void test_half_binary(void **state) {
    (void)state;
    const cx_op_id ops[] = {CX_OP_ADD,    CX_OP_SUBTRACT, CX_OP_MULTIPLY,
                            CX_OP_DIVIDE, CX_OP_MAX,      CX_OP_MIN};
    enum { N = 133 };
    uint16_t a[N], b[N], o[N];
    for (int k = 0; k < n_tables; k++)
        for (int bf = 0; bf < 2; bf++)
            for (int q = 0; q < 6; q++)
                for (int form = 0; form < 4; form++) /* both arrays, a one value, b one, both */
                    for (int64_t n = 1; n <= N; n += n < 40 ? 1 : 31) {
                        int sa = !(form & 1), sb = !(form & 2);
                        for (int64_t i = 0; i < N; i++) {
                            a[i] = to_half(bf, sample(i));
                            b[i] = to_half(bf, sample(3 * i + 1));
                        }
                        simd_binary_h fn =
                            bf ? tables[k]->binary_bf16[ops[q]] : tables[k]->binary_f16[ops[q]];
                        assert_non_null(fn);
                        fn(o, a, b, sa, sb, n);
                        for (int64_t i = 0; i < n; i++) {
                            float x = from_half(bf, a[sa ? i : 0]),
                                  y = from_half(bf, b[sb ? i : 0]);
                            uint16_t want = to_half(bf, reference(ops[q], x, y));
                            if (o[i] != want)
                                fail_msg("%s %s op %d form %d n %lld at %lld: %04x, expected %04x",
                                         tables[k]->name, bf ? "bf16" : "f16", (int)ops[q], form,
                                         (long long)n, (long long)i, o[i], want);
                        }
                    }
}

/* distance in steps between two non-NaN f16 (or two bf16) values (+0 and -0 the same): both
 * are sign and magnitude */
static int half_steps(uint16_t a, uint16_t b) {
    int ia = a & 0x8000 ? -(int)(a & 0x7fff) : (int)a,
        ib = b & 0x8000 ? -(int)(b & 0x7fff) : (int)b;
    return abs(ia - ib);
}

/* gelu in double: x Phi(x), with erfc so that Phi keeps its relative precision for x < 0 */
static double gelu_ref(double x) {
    return 0.5 * x * erfc(-x / sqrt(2.0));
}

/* The f16 and bf16 functions computed in registers (unary_f16, unary_bf16: exp and tanh, and bf16
 * gelu, on AVX-512) on every one of the 65,536 inputs, against the function in double rounded
 * once: a quiet NaN for NaN (f16: half.h's), a zero of the right sign, at most 1 ulp elsewhere,
 * never 1 ulp from an infinity, and at most `most` results off at all (the counts measured when
 * written: f16 exp 6; f16 tanh and bf16 exp, tanh and gelu 0, correctly rounded); and every length
 * up to 40, so that each tail goes through the zero-padded copy (and, on AVX512-BF16, the pairs of
 * vectors through their own loop), giving the same bits as the whole array. */
static void test_half_unary(void **state) {
    (void)state;
    enum { N = 65536 };
    static uint16_t a[N], o[N], part[64];
    static const struct {
        cx_op_id op;
        const char *name;
        double (*f)(double);
        int most[2]; /* f16, bf16 */
    } fns[] = {{CX_OP_EXP, "exp", exp, {6, 0}},
               {CX_OP_TANH, "tanh", tanh, {0, 0}},
               {CX_OP_GELU, "gelu", gelu_ref, {0, 0}}};
    for (int32_t i = 0; i < N; i++) a[i] = (uint16_t)i;
    int ran = 0;
    for (int k = 0; k < n_tables; k++)
        for (int bf = 0; bf < 2; bf++)
            for (size_t q = 0; q < sizeof fns / sizeof fns[0]; q++) {
                simd_unary_h fn =
                    bf ? tables[k]->unary_bf16[fns[q].op] : tables[k]->unary_f16[fns[q].op];
                if (!fn) continue;
                const char *type = bf ? "bf16" : "f16";
                uint16_t inf_bits = bf ? 0x7f80 : 0x7c00, quiet = bf ? 0x0040 : 0x0200;
                ran++;
                fn(o, a, N);
                int off = 0;
                for (int32_t i = 0; i < N; i++) {
                    float x = from_half(bf, a[i]);
                    if (isnan(x)) {
                        bool ok = bf ? (o[i] & 0x7fff) > inf_bits && (o[i] & quiet)
                                     : o[i] == cx_f16_from_f32(x);
                        if (!ok)
                            fail_msg("%s %s %s of NaN %04x: %04x", tables[k]->name, fns[q].name,
                                     type, a[i], o[i]);
                        continue;
                    }
                    double y = fns[q].f((double)x);
                    uint16_t want = bf ? cx_bf16_from_f64(y) : cx_f16_from_f64(y);
                    int d = half_steps(o[i], want);
                    if (!(want & 0x7fff) && o[i] != want) /* a zero keeps its sign */
                        fail_msg("%s %s %s of %g: %04x, expected %04x", tables[k]->name,
                                 fns[q].name, type, (double)x, o[i], want);
                    if (d > 1 || (d == 1 &&
                                  ((want & inf_bits) == inf_bits || (o[i] & inf_bits) == inf_bits)))
                        fail_msg("%s %s %s of %g: %04x, expected %04x", tables[k]->name,
                                 fns[q].name, type, (double)x, o[i], want);
                    off += d;
                }
                printf("%s %s %s: %d of %d results 1 ulp off\n", tables[k]->name, fns[q].name, type,
                       off, N);
                if (off > fns[q].most[bf])
                    fail_msg("%s %s %s: %d results 1 ulp off", tables[k]->name, fns[q].name, type,
                             off);
                uint16_t one = bf ? 0x3f80 : 0x3c00;
                for (int64_t n = 1; n <= 40; n++) {
                    memset(part, 0xff, sizeof part);
                    fn(part, a + one, n); /* from 1.0 up */
                    for (int64_t i = 0; i < 64; i++)
                        if (part[i] != (i < n ? o[one + i] : 0xffff))
                            fail_msg("%s %s %s of %lld values: at %lld %04x", tables[k]->name,
                                     fns[q].name, type, (long long)n, (long long)i, part[i]);
                }
            }
    if (!ran) printf("no unary f16/bf16 kernel in these tables\n");
}

/* f16 and bf16 negate, abs, sqrt and reciprocal in registers (unary_f16, unary_bf16, every table)
 * against the chunked path they replace -- the table's widening, its f32 kernel, its narrowing --
 * bit for bit on every one of the 65,536 inputs (NaNs, infinities, zeros and subnormals
 * included), and at every length up to 40 the bits of the whole array (each tail through the
 * zero-padded copy). */
static void test_half_unary_simple(void **state) {
    (void)state;
    enum { N = 65536 };
    static uint16_t a[N], o[N], want[N], part[64];
    static float f[N], r[N];
    static const cx_op_id ops[] = {CX_OP_NEGATE, CX_OP_ABS, CX_OP_SQRT, CX_OP_RECIPROCAL};
    for (int32_t i = 0; i < N; i++) a[i] = (uint16_t)i;
    for (int k = 0; k < n_tables; k++)
        for (int bf = 0; bf < 2; bf++)
            for (size_t q = 0; q < sizeof ops / sizeof ops[0]; q++) {
                const simd_table *t = tables[k];
                const char *type = bf ? "bf16" : "f16", *name = cx_op_table[ops[q]].name;
                simd_unary_h fn = bf ? t->unary_bf16[ops[q]] : t->unary_f16[ops[q]];
                if (!fn) fail_msg("%s %s %s: no kernel in registers", t->name, name, type);
                if (bf)
                    t->bf16_to_f32(a, f, N);
                else
                    t->f16_to_f32(a, f, N);
                t->unary_f32[ops[q]](r, f, N);
                if (bf)
                    t->f32_to_bf16(r, want, N);
                else
                    t->f32_to_f16(r, want, N);
                fn(o, a, N);
                for (int32_t i = 0; i < N; i++)
                    if (o[i] != want[i])
                        fail_msg("%s %s %s of %04x: %04x, the chunked path %04x", t->name, name,
                                 type, a[i], o[i], want[i]);
                for (int64_t n = 1; n <= 40; n++) {
                    memset(part, 0xff, sizeof part);
                    fn(part, a + 0x3c00, n);
                    for (int64_t i = 0; i < 64; i++)
                        if (part[i] != (i < n ? o[0x3c00 + i] : 0xffff))
                            fail_msg("%s %s %s of %lld values: at %lld %04x", t->name, name, type,
                                     (long long)n, (long long)i, part[i]);
                }
            }
}

/* div_f32 of the n values at `in` by s, against the division, bit for bit (any NaN for a NaN) */
static void check_div(const simd_table *t, const float *in, int n, float s) {
    static float o[1 << 16];
    assert_true(n <= (int)(sizeof o / sizeof o[0]));
    memcpy(o, in, sizeof(float) * (size_t)n);
    t->div_f32(o, n, s);
    for (int i = 0; i < n; i++) {
        float want = in[i] / s;
        if (memcmp(&o[i], &want, 4) != 0 && !(isnan(o[i]) && isnan(want)))
            fail_msg("%s div_f32 of %d values: %a / %a gave %a, expected %a", t->name, n,
                     (double)in[i], (double)s, (double)o[i], (double)want);
    }
}

/* div_f32 (softmax's last step, by a reciprocal and a correction in place of the division)
 * against the division, bit for bit: every 997th f32 from the smallest subnormal up to 1 (the
 * exponentials softmax divides) for divisors around 1 and 1000, powers of two, significands of all
 * ones, and beyond the fast path's range; 2.5M random bit patterns by random divisors; NaN,
 * infinities and zeros of both signs in the row, and every tail. */
static void test_div_f32(void **state) {
    (void)state;
    enum { N = 1 << 16 };
    static float in[N];
    static const float divisors[] = {1.0f,        1.5f,    3.0f,       1.99999988f, 2.0f,
                                     7.00000048f, 1000.3f, 1048576.0f, 999999.94f,  1.0000001f,
                                     16777215.0f, 1e30f,   3.4e38f};
    for (int k = 0; k < n_tables; k++)
        for (size_t d = 0; d < sizeof divisors / sizeof divisors[0]; d++)
            for (uint32_t start = 1; start <= 0x3f800000u; start += 997u * N) {
                int n = 0;
                for (uint32_t b = start; n < N && b <= 0x3f800000u; b += 997, n++)
                    memcpy(&in[n], &b, 4);
                check_div(tables[k], in, n, divisors[d]);
            }
    /* random bit patterns (any sign and exponent, NaNs and infinities among them), 64 to a row,
     * each row by a random divisor: whole rows of the fast path's range [1, 2^100] and beyond */
    uint64_t x = 0x9E3779B97F4A7C15u;
    for (int k = 0; k < n_tables; k++)
        for (int row = 0; row < 40000; row++) {
            x = x * 6364136223846793005u + 1442695040888963407u;
            uint32_t sb = 0x3f800000u + (uint32_t)((x >> 33) % (100u << 23)) +
                          (row % 10 == 0 ? (uint32_t)(x >> 60) << 26 : 0);
            float s;
            memcpy(&s, &sb, 4);
            for (int i = 0; i < 64; i++) {
                x = x * 6364136223846793005u + 1442695040888963407u;
                uint32_t b = (uint32_t)(x >> 32);
                memcpy(&in[i], &b, 4);
            }
            check_div(tables[k], in, 64, s);
        }
    /* specials, and every length up to 40 (the tail goes through the scalar loop) */
    static const float specials[] = {NAN, INFINITY, -INFINITY, 0.0f, -0.0f, 0.5f, -2.0f, 1e-40f};
    for (int k = 0; k < n_tables; k++)
        for (int n = 1; n <= 40; n++) {
            for (int i = 0; i < n; i++) in[i] = specials[(i * 5 + n) % 8];
            check_div(tables[k], in, n, 3.0f);
        }
}

/* The mixed kernel (gelu_bf16_mixed: bf16 gelu in registers beside the table of its results)
 * gives the bits of the register kernel alone, at every length around its pattern of two vectors
 * and 16 table values, on values that put some vectors in gelu's tail (x <= -2, which it takes
 * from the table) and leave others out of it. */
static void test_half_mixed(void **state) {
    (void)state;
    enum { N = 65536, LEN = 3000 };
    static uint16_t all[N], tab[N], a[LEN], want[LEN], got[LEN + 8];
    for (int32_t i = 0; i < N; i++) all[i] = (uint16_t)i;
    int ran = 0;
    for (int k = 0; k < n_tables; k++) {
        simd_mixed_h mixed = tables[k]->gelu_bf16_mixed;
        if (!mixed) continue;
        simd_unary_h fn = tables[k]->unary_bf16[CX_OP_GELU];
        assert_non_null(fn);
        ran++;
        fn(tab, all, N);
        for (int64_t i = 0; i < LEN; i++) {
            /* runs of 40 values in [-1, 1], every third with one value below -2, and now and
             * then any bf16 at all */
            float x = (float)((i * 7919) % 2001) / 1000.0f - 1.0f;
            if ((i / 40) % 3 == 2 && i % 40 == 17) x = -2.0f - (float)(i % 7);
            a[i] = i % 97 == 5 ? (uint16_t)(i * 40503u) : cx_bf16_from_f32(x);
        }
        fn(want, a, LEN);
        for (int64_t n = 0; n <= LEN; n += n < 200 ? 1 : 397) {
            memset(got, 0xee, sizeof got);
            mixed(got, a, n, tab);
            for (int64_t i = 0; i < n + 8; i++)
                if (got[i] != (i < n ? want[i] : 0xeeee))
                    fail_msg("%s mixed bf16 gelu, %lld values: at %lld %04x, expected %04x",
                             tables[k]->name, (long long)n, (long long)i, got[i],
                             i < n ? want[i] : 0xeeee);
        }
    }
    if (!ran) printf("no mixed kernel in these tables\n");
}

static void test_half_sum(void **state) {
    (void)state;
    enum { N = 3000 };
    static uint16_t h[N];
    static float f[1024];
    for (int k = 0; k < n_tables; k++)
        for (int bf = 0; bf < 2; bf++)
            for (int spread = 0; spread < 2; spread++) {
                /* sixteenths, whose sums are exact in any order; then magnitudes 2^-12 .. 2^12,
                 * whose f32 sums round, so that only the same additions in the same order agree */
                for (int64_t i = 0; i < N; i++)
                    h[i] = to_half(bf, spread ? ldexpf((float)((i * 7919) % 201) / 64.0f - 1.5f,
                                                       (int)((i * 31) % 25) - 12)
                                              : (float)((i * 7919) % 201) / 16.0f - 6.0f);
                for (int64_t n = 1; n <= N; n += n < 70 ? 1 : 97) {
                    /* what widening blocks of 1024 and summing each with sum_f32 gives */
                    double want = -0.0;
                    for (int64_t i = 0; i < n; i += 1024) {
                        int64_t m = n - i < 1024 ? n - i : 1024;
                        for (int64_t j = 0; j < m; j++) f[j] = from_half(bf, h[i + j]);
                        want += tables[k]->sum_f32(f, m);
                    }
                    double got = bf ? tables[k]->sum_bf16(h, n) : tables[k]->sum_f16(h, n);
                    if (got != want)
                        fail_msg("%s %s sum of %lld: %.17g, expected %.17g", tables[k]->name,
                                 bf ? "bf16" : "f16", (long long)n, got, want);
                }
            }
}

/* f32_to_bf16 and bf16_to_f32, and f32_to_f16, against half.h on bit patterns of every kind:
 * random ones (NaNs with payloads, denormals), exact ties, and a block of denormals among normal
 * values (the AVX512-BF16 rounding sends a pair with one the integer way), at every tail length;
 * f16_to_f32 on every f16. */
static unsigned bits_of(float x) {
    uint32_t u;
    memcpy(&u, &x, 4);
    return u;
}

/* narrow(f, h, n) gives half.h's want(f[i]) for each of the n values and writes nothing past
 * them (h holds `cap`) */
static void narrows_as_half_h(const char *table, const char *what,
                              void (*narrow)(const float *, uint16_t *, int64_t),
                              uint16_t (*want)(float), const float *f, uint16_t *h, int64_t n,
                              int64_t cap) {
    memset(h, 0xab, sizeof(uint16_t) * (size_t)cap);
    narrow(f, h, n);
    for (int64_t i = 0; i < n; i++)
        if (h[i] != want(f[i]))
            fail_msg("%s: %s of %08x (n %lld, at %lld): %04x, expected %04x", table, what,
                     bits_of(f[i]), (long long)n, (long long)i, h[i], want(f[i]));
    if (n < cap && h[n] != 0xabab) fail_msg("%s: %s wrote past %lld", table, what, (long long)n);
}

static void test_bf16_convert(void **state) {
    (void)state;
    enum { N = 4099 };
    static float f[N], back[N];
    static uint16_t h[N];
    uint32_t seed = 12345;
    for (int64_t i = 0; i < N; i++) {
        seed = seed * 1664525u + 1013904223u;
        uint32_t bits = seed;
        if (i % 7 == 1) bits = (bits & 0xffff0000u) | 0x8000u;      /* a tie */
        if (i % 11 == 2) bits &= 0x807fffffu;                       /* denormal */
        if (i % 13 == 3) bits = 0x7f800000u | (bits & 0x807fffffu); /* NaN or infinity */
        if (i >= 2048 && i < 2048 + 64) bits = (bits & 0x807fffffu) | (i % 2 ? 0x3f800000u : 0);
        memcpy(&f[i], &bits, 4);
    }
    for (int k = 0; k < n_tables; k++)
        for (int64_t n = 1; n <= N; n += n < 70 ? 1 : 331) {
            narrows_as_half_h(tables[k]->name, "f32_to_bf16", tables[k]->f32_to_bf16,
                              cx_bf16_from_f32, f, h, n, N);
            tables[k]->bf16_to_f32(h, back, n);
            for (int64_t i = 0; i < n; i++)
                if (bits_of(back[i]) != bits_of(cx_bf16_to_f32(h[i])))
                    fail_msg("%s: bf16_to_f32 of %04x", tables[k]->name, h[i]);
            /* f16 the same way: f32_to_f16 as half.h rounds (NaNs made its quiet NaN) */
            narrows_as_half_h(tables[k]->name, "f32_to_f16", tables[k]->f32_to_f16, cx_f16_from_f32,
                              f, h, n, N);
        }
    /* f16_to_f32 on every f16, as the core's arrays widen (F16C quiets a signalling NaN, keeping
     * its payload, where half.h's scalar keeps it signalling) */
    static uint16_t all[65536];
    static float wide[65536], core[65536];
    for (int32_t i = 0; i < 65536; i++) all[i] = (uint16_t)i;
    cx_f16_to_f32_array(all, core, 65536);
    for (int k = 0; k < n_tables; k++) {
        tables[k]->f16_to_f32(all, wide, 65536);
        for (int32_t i = 0; i < 65536; i++)
            if (bits_of(wide[i]) != bits_of(core[i]))
                fail_msg("%s: f16_to_f32 of %04x: %08x", tables[k]->name, all[i], bits_of(wide[i]));
    }
}

/* An f32 function of ours against its double reference, one float in 1021 of the bits [from,
 * to) and their negatives: the worst error in ulp of the exact result's binade in f32, and with
 * `odd` the function odd to the bit. Every tail length gives the bits of a full vector. */
static void check_f32(const simd_table *t, cx_op_id op, const char *name, double (*ref)(double),
                      uint32_t from, uint32_t to, double bound, bool odd) {
    enum { N = 1024 };
    float *a = malloc(sizeof(float) * N), *o = malloc(sizeof(float) * N);
    assert_non_null(a);
    assert_non_null(o);
    double worst = 0;
    float at = 0;
    uint32_t bits = from;
    while (bits < to) {
        int n = 0;
        for (; n < N && bits < to; n += 2, bits += 1021) {
            memcpy(&a[n], &bits, sizeof bits);
            a[n + 1] = -a[n];
        }
        t->unary_f32[op](o, a, n);
        for (int i = 0; i < n; i++) {
            double r = ref((double)a[i]);
            int e2;
            frexp(r, &e2); /* the ulp of r's own binade (of the subnormals below 2^-126) */
            double ulp = ldexp(1.0, (e2 < -125 ? -125 : e2) - 24);
            double e = fabs((double)o[i] - r) / ulp;
            if (e > worst) worst = e, at = a[i];
            if (odd && i % 2 && o[i] != -o[i - 1])
                fail_msg("%s: %s(%a) = %a but %s(%a) = %a", t->name, name, (double)a[i - 1],
                         (double)o[i - 1], name, (double)a[i], (double)o[i]);
        }
    }
    printf("%s %s: at most %.3f ulp (at %a)\n", t->name, name, worst, (double)at);
    if (worst > bound) fail_msg("%s: %s off by %.3f ulp at %a", t->name, name, worst, (double)at);
    for (int i = 0; i < 40; i++) a[i] = (float)i * 0.173f - 3.0f;
    t->unary_f32[op](o, a, 40);
    for (int n = 1; n < 40; n++) {
        float part[40];
        t->unary_f32[op](part, a, n);
        assert_memory_equal(part, o, sizeof(float) * (size_t)n);
    }
    free(a);
    free(o);
}

/* The f32 erf within 1.07 ulp of double erf (the exhaustive check over [4.7e-10, 4.5] that
 * chose its coefficients measured 1.063; here one float in 1021 of that range), and right at the
 * specials. */
static void test_erf_f32(void **state) {
    (void)state;
    for (int k = 0; k < n_tables; k++) {
        check_f32(tables[k], CX_OP_ERF, "erf", erf, 0x30000000u, 0x40900000u, 1.07, true);
        const float sp[] = {0.0f, -0.0f, INFINITY, -INFINITY, NAN, 5.0f, -30.0f, 1e-30f, 1.0f};
        float so[9];
        tables[k]->unary_f32[CX_OP_ERF](so, sp, 9);
        assert_true(so[0] == 0.0f && !signbit(so[0]) && so[1] == 0.0f && signbit(so[1]));
        assert_true(so[2] == 1.0f && so[3] == -1.0f && isnan(so[4]));
        assert_true(so[5] == 1.0f && so[6] == -1.0f);
        assert_true(fabs(so[7] - 1.1283791670955126e-30) < 1e-36);
        assert_true(fabs(so[8] - erf(1.0)) < 1e-7);
    }
}

/* The f32 exp (exp_vf) within 0.91 ulp of double exp (exhaustively over every f32 when
 * written: 0.909, at 5.1998), from |x| = 2^-126 to 88.7, and right where it overflows, underflows
 * to a subnormal or to 0, and at the specials. */
static void test_exp_f32(void **state) {
    (void)state;
    for (int k = 0; k < n_tables; k++) {
        check_f32(tables[k], CX_OP_EXP, "exp", exp, 0x00800000u, 0x42b17200u, 0.91, false);
        const float sp[] = {0.0f, -0.0f, INFINITY, -INFINITY, NAN, 88.8f, -104.0f, -100.0f, 1.0f};
        float so[9];
        tables[k]->unary_f32[CX_OP_EXP](so, sp, 9);
        assert_true(so[0] == 1.0f && so[1] == 1.0f && so[2] == INFINITY && so[3] == 0.0f);
        assert_true(isnan(so[4]) && so[5] == INFINITY && so[6] == 0.0f);
        assert_true(fabs(so[7] - exp(-100.0)) <= 0x1p-150 && so[7] > 0);
        assert_true(so[8] == (float)M_E);
    }
}

/* The f32 tanh (tanh_vf) within 2.5 ulp of double tanh (exhaustively over the non-negative
 * floats up to 11 when written: 2.498, at 4.505), from the smallest normal float to 11 and past
 * where tanh rounds to 1, and right at the specials (subnormals unchanged). */
static void test_tanh_f32(void **state) {
    (void)state;
    for (int k = 0; k < n_tables; k++) {
        check_f32(tables[k], CX_OP_TANH, "tanh", tanh, 0x00800000u, 0x41300000u, 2.5, true);
        const float sp[] = {0.0f, -0.0f, INFINITY, -INFINITY, NAN, 9.2f, -30.0f, 1e-30f, 1e-40f};
        float so[9];
        tables[k]->unary_f32[CX_OP_TANH](so, sp, 9);
        assert_true(so[0] == 0.0f && !signbit(so[0]) && so[1] == 0.0f && signbit(so[1]));
        assert_true(so[2] == 1.0f && so[3] == -1.0f && isnan(so[4]));
        assert_true(so[5] == 1.0f && so[6] == -1.0f);
        assert_true(so[7] == 1e-30f && so[8] == 1e-40f);
    }
}

/* gelu (both forms) and silu, whose exp is exp_neg_vf (2 ulp), within the composites' tolerance
 * of the differential suite, 8 eps (|f(x)| + |x|), of the formulas in double, over [-20, 20]
 * every 2^-10; at -inf, inf and NaN what the formulas give. */
static void test_gelu_silu_f32(void **state) {
    (void)state;
    enum { N = 40 * 1024 + 3 };
    float *a = malloc(sizeof(float) * N), *o = malloc(sizeof(float) * N);
    assert_non_null(a);
    assert_non_null(o);
    for (int i = 0; i < N - 3; i++) a[i] = -20.0f + (float)i / 1024.0f;
    a[N - 3] = -INFINITY; /* NaN (-inf times 0), as the formulas give */
    a[N - 2] = INFINITY;
    a[N - 1] = NAN;
    for (int k = 0; k < n_tables; k++)
        for (int f = 0; f < 3; f++) {
            if (f < 2)
                tables[k]->gelu_f32(o, a, N, f);
            else
                tables[k]->silu_f32(o, a, N);
            assert_true(isnan(o[N - 3]) && o[N - 2] == INFINITY && isnan(o[N - 1]));
            for (int i = 0; i < N - 3; i++) {
                double x = a[i], r;
                if (f == 0)
                    r = 0.5 * x * (1 + erf(x / sqrt(2.0)));
                else if (f == 1)
                    r = 0.5 * x * (1 + tanh(sqrt(2 / M_PI) * (x + 0.044715 * x * x * x)));
                else
                    r = x / (1 + exp(-x));
                if (fabs(o[i] - r) > 8 * 0x1p-23 * (fabs(r) + fabs(x)))
                    fail_msg("%s: %s(%a) = %a, expected %a", tables[k]->name,
                             f == 0   ? "gelu"
                             : f == 1 ? "gelu_tanh"
                                      : "silu",
                             x, (double)o[i], r);
            }
        }
    free(a);
    free(o);
}

/* The values the exact and f64-computed kernels are checked on: every special the functions
 * treat apart (zeros, halves and their neighbours for round, integers around 2^23 and 2^24,
 * subnormals, infinities, NaN, the domains' ends), then random bit patterns of every magnitude. */
#define EDGE_N 4096
static int edge_values(float *v) {
    static const float fixed[] = {
        0.0f,    -0.0f,          0.5f,          -0.5f,          1.5f,       -1.5f,       2.5f,
        -2.5f,   0.49999997f,    -0.49999997f,  0.50000006f,    1.0f,       -1.0f,       0.3f,
        -0.3f,   8388607.5f,     -8388607.5f,   8388608.0f,     8388609.0f, 16777217.0f, 1e-45f,
        -1e-45f, 1.1754942e-38f, 3.4028235e38f, -3.4028235e38f, INFINITY,   -INFINITY,   NAN,
        -NAN,    0.99999994f,    -0.99999994f,  1.0000001f,     88.7f,      -88.7f,      710.0f,
        1e-20f,  -1e-20f,        3.1415927f,    1.5707964f};
    int n = (int)(sizeof fixed / sizeof fixed[0]);
    memcpy(v, fixed, sizeof fixed);
    uint64_t x = 88172645463325252ull;
    for (int i = n; i < EDGE_N; i++) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        uint32_t b = (uint32_t)x;
        if (i % 3 == 0) b = (b & 0x807fffffu) | ((uint32_t)(100 + i % 60) << 23); /* |x| ~ 1 */
        memcpy(&v[i], &b, 4);
    }
    return EDGE_N;
}

static bool same_bits_or_nans(float a, float b) {
    return (isnan(a) && isnan(b)) || bits_of(a) == bits_of(b);
}

/* floor, ceil, round (halves away from zero), sign: libm's bits exactly, f32 and f64; remainder:
 * fmodf's bits; tan ... erfc in f32: within 1 ulp of libm's double function rounded to f32 (the
 * cpu's way), and bit for bit in nearly every case for sinh, cosh, asinh and acosh (computed in
 * double; the others are SLEEF's f32 functions, 1 ulp off in up to 13% of cases); f64 (all but
 * sinh and cosh) within 4 ulp of libm's. Lengths with a tail. */
static void test_exact_and_double_math(void **state) {
    (void)state;
    static float in[EDGE_N], in2[EDGE_N], out[EDGE_N];
    static double din[EDGE_N], dout[EDGE_N];
    int n = edge_values(in) - 3;
    for (int i = 0; i < n; i++) in2[i] = in[(i * 7 + 3) % n], din[i] = in[i];
    enum { EXACT, VIA_DOUBLE, ONE_ULP }; /* ONE_ULP: SLEEF's f32 function */
    struct {
        cx_op_id op;
        double (*ref)(double);
        int bound;
    } fns[] = {{CX_OP_FLOOR, floor, EXACT},      {CX_OP_CEIL, ceil, EXACT},
               {CX_OP_ROUND, round, EXACT},      {CX_OP_SIGN, NULL, EXACT},
               {CX_OP_TAN, tan, ONE_ULP},        {CX_OP_ASIN, asin, ONE_ULP},
               {CX_OP_ACOS, acos, ONE_ULP},      {CX_OP_ATAN, atan, ONE_ULP},
               {CX_OP_SINH, sinh, VIA_DOUBLE},   {CX_OP_COSH, cosh, VIA_DOUBLE},
               {CX_OP_ASINH, asinh, VIA_DOUBLE}, {CX_OP_ACOSH, acosh, VIA_DOUBLE},
               {CX_OP_ATANH, atanh, ONE_ULP},    {CX_OP_CBRT, cbrt, ONE_ULP},
               {CX_OP_ERFC, erfc, ONE_ULP}};
    for (int k = 0; k < n_tables; k++) {
        const simd_table *t = tables[k];
        for (size_t q = 0; q < sizeof fns / sizeof fns[0]; q++) {
            assert_non_null(t->unary_f32[fns[q].op]);
            t->unary_f32[fns[q].op](out, in, n);
            simd_unary_f64 f64 = t->unary_f64[fns[q].op]; /* none for sinh and cosh */
            if (f64) f64(dout, din, n);
            int off = 0;
            for (int i = 0; i < n; i++) {
                double x = in[i];
                double r = fns[q].ref ? fns[q].ref(x) : x > 0 ? 1.0 : x < 0 ? -1.0 : x;
                float want = (float)r;
                if (!same_bits_or_nans(out[i], want)) {
                    float lo = nextafterf(want, -INFINITY), hi = nextafterf(want, INFINITY);
                    if (fns[q].bound == EXACT || !(out[i] == lo || out[i] == hi))
                        fail_msg("%s f32 op %d of %a: %a, expected %a", t->name, (int)fns[q].op, x,
                                 (double)out[i], (double)want);
                    off++;
                }
                if (!f64) continue;
                double dw = r, dg = dout[i];
                bool dok = (isnan(dw) && isnan(dg)) || (dg == dw && signbit(dg) == signbit(dw)) ||
                           (fns[q].bound != EXACT && isfinite(dw) &&
                            fabs(dg - dw) <= 4 * fabs(nextafter(dw, INFINITY) - dw));
                if (!dok)
                    fail_msg("%s f64 op %d of %a: %a, expected %a", t->name, (int)fns[q].op, x, dg,
                             dw);
            }
            if (fns[q].bound == VIA_DOUBLE && off > n / 100)
                fail_msg("%s op %d: %d of %d f32 results 1 ulp from libm's", t->name,
                         (int)fns[q].op, off, n);
        }
        /* round of doubles beyond the floats' values: halves and their neighbours at every
         * magnitude up to where the spacing is 1, libm's bits */
        {
            static double dr[4 * 60 + 8], dro[4 * 60 + 8];
            int m = 0;
            const double fixed_d[] = {0.49999999999999994, -0.49999999999999994, 0.5,  -0.5,
                                      4503599627370495.5,  4503599627370497.0,   -0.0, 1e300};
            for (int k = 0; k < 8; k++) dr[m++] = fixed_d[k];
            for (int e = 0; e < 60; e++) {
                double half = ldexp(1.0, e) + 0.5; /* k + 1/2 while representable */
                dr[m++] = half;
                dr[m++] = -nextafter(half, 0.0);
                dr[m++] = nextafter(half, INFINITY);
                dr[m++] = -ldexp(1.0, e) - 0.25;
            }
            t->unary_f64[CX_OP_ROUND](dro, dr, m);
            for (int i = 0; i < m; i++)
                if (memcmp(&dro[i], &(double){round(dr[i])}, 8) != 0)
                    fail_msg("%s round of %a: %a, expected %a", t->name, dr[i], dro[i],
                             round(dr[i]));
        }
        /* remainder: both operands arrays, and each one value */
        for (int form = 0; form < 3; form++) {
            int sa = form != 1, sb = form != 2;
            t->binary_f32[CX_OP_REMAINDER](out, in, in2, sa, sb, n);
            for (int i = 0; i < n; i++) {
                float want = fmodf(in[sa ? i : 0], in2[sb ? i : 0]);
                if (!same_bits_or_nans(out[i], want))
                    fail_msg("%s remainder of %a, %a: %a, expected %a", t->name,
                             (double)in[sa ? i : 0], (double)in2[sb ? i : 0], (double)out[i],
                             (double)want);
            }
        }
    }
}

int main(void) {
    find_tables();
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_transpose),     cmocka_unit_test(test_gemm_rows),
        cmocka_unit_test(test_half_binary),   cmocka_unit_test(test_half_sum),
        cmocka_unit_test(test_half_unary),    cmocka_unit_test(test_half_unary_simple),
        cmocka_unit_test(test_div_f32),       cmocka_unit_test(test_half_mixed),
        cmocka_unit_test(test_bf16_convert),  cmocka_unit_test(test_erf_f32),
        cmocka_unit_test(test_tanh_f32),      cmocka_unit_test(test_exp_f32),
        cmocka_unit_test(test_gelu_silu_f32), cmocka_unit_test(test_exact_and_double_math),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
