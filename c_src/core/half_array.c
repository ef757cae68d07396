/* Whole-array f16 <-> f32 conversion, the inner loop of every f16 kernel. On x86-64 processors
 * with F16C the hardware converts 8 values per instruction (same rounding: nearest even);
 * elsewhere the portable functions of half.h run. Chosen once, at first use. */
#include <stdatomic.h>

#include "half.h"
#include "half_array.h"

static void widen_portable(const uint16_t *h, float *f, int64_t n) {
    for (int64_t i = 0; i < n; i++) f[i] = cx_f16_to_f32(h[i]);
}

static void narrow_portable(const float *f, uint16_t *h, int64_t n) {
    for (int64_t i = 0; i < n; i++) h[i] = cx_f16_from_f32(f[i]);
}

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>

__attribute__((target("avx,f16c"))) static void widen_f16c(const uint16_t *h, float *f, int64_t n) {
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(f + i, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(h + i))));
    widen_portable(h + i, f + i, n - i);
}

__attribute__((target("avx,f16c"))) static void narrow_f16c(const float *f, uint16_t *h,
                                                            int64_t n) {
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256 v = _mm256_loadu_ps(f + i);
        /* the hardware keeps NaN payloads; make NaN the canonical quiet NaN like half.h */
        __m256 nan = _mm256_cmp_ps(v, v, _CMP_UNORD_Q);
        __m128i r = _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT);
        if (!_mm256_testz_ps(nan, nan)) {
            _mm_storeu_si128((__m128i *)(h + i), r);
            for (int k = 0; k < 8; k++)
                if (f[i + k] != f[i + k]) h[i + k] = cx_f16_from_f32(f[i + k]);
            continue;
        }
        _mm_storeu_si128((__m128i *)(h + i), r);
    }
    narrow_portable(f + i, h + i, n - i);
}

#include <cpuid.h>

/* CPUID.1:ECX bit 29 is F16C, 28 AVX, 27 OSXSAVE; XCR0 bits 1-2 say the OS saves YMM state.
 * (Read directly: clang 14's __builtin_cpu_supports does not know "f16c".) */
static bool has_f16c(void) {
    unsigned a, b, c, d;
    if (!__get_cpuid(1, &a, &b, &c, &d)) return false;
    if (!(c & (1u << 29)) || !(c & (1u << 28)) || !(c & (1u << 27))) return false;
    unsigned lo, hi;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    return (lo & 6u) == 6u;
}
#else
static bool has_f16c(void) {
    return false;
}
#define widen_f16c  widen_portable
#define narrow_f16c narrow_portable
#endif

typedef void (*widen_fn)(const uint16_t *, float *, int64_t);
typedef void (*narrow_fn)(const float *, uint16_t *, int64_t);
static _Atomic(widen_fn) widen_impl;
static _Atomic(narrow_fn) narrow_impl;

static void choose(void) {
    bool hw = has_f16c();
    atomic_store(&widen_impl, hw ? widen_f16c : widen_portable);
    atomic_store(&narrow_impl, hw ? narrow_f16c : narrow_portable);
}

void cx_f16_to_f32_array(const uint16_t *h, float *f, int64_t n) {
    widen_fn fn = atomic_load_explicit(&widen_impl, memory_order_relaxed);
    if (!fn) {
        choose();
        fn = atomic_load(&widen_impl);
    }
    fn(h, f, n);
}

void cx_f32_to_f16_array(const float *f, uint16_t *h, int64_t n) {
    narrow_fn fn = atomic_load_explicit(&narrow_impl, memory_order_relaxed);
    if (!fn) {
        choose();
        fn = atomic_load(&narrow_impl);
    }
    fn(f, h, n);
}

bool cx_f16_hardware(void) {
    if (!atomic_load(&widen_impl)) choose();
    return atomic_load(&widen_impl) != widen_portable;
}

void cx_bf16_to_f32_array(const uint16_t *b, float *f, int64_t n) {
    for (int64_t i = 0; i < n; i++) f[i] = cx_bf16_to_f32(b[i]);
}

void cx_f32_to_bf16_array(const float *f, uint16_t *b, int64_t n) {
    for (int64_t i = 0; i < n; i++) b[i] = cx_bf16_from_f32(f[i]);
}
