/* Helpers for the cmocka tests: build tensors on the cpu device from C arrays, run ops, read
 * results back as doubles. Header-only so each test program stays one file. */
#ifndef CX_TEST_UTIL_H
#define CX_TEST_UTIL_H

#include <math.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cmocka.h>

#include "../core/dispatch.h"
#include "../core/half.h"

static inline cx_device *tu_cpu(void) {
    cx_status st = {0};
    assert_int_equal(cx_devices_init(NULL, 0, &st), CX_OK);
    return cx_device_find("cpu");
}

static inline cx_desc tu_desc(cx_dtype t, int rank, const int64_t *shape) {
    cx_desc d = {.dtype = t, .rank = rank};
    for (int k = 0; k < rank; k++) d.shape[k] = shape[k];
    return d;
}

/* Stores a double into element i of a host buffer of type t (rounding like as_type). */
static inline void tu_store(cx_dtype t, void *buf, int64_t i, double v) {
    switch (t) {
    case CX_F16: ((uint16_t *)buf)[i] = cx_f16_from_f64(v); break;
    case CX_BF16: ((uint16_t *)buf)[i] = cx_bf16_from_f64(v); break;
    case CX_F32: ((float *)buf)[i] = (float)v; break;
    case CX_F64: ((double *)buf)[i] = v; break;
    /* through int64_t, so that a value out of the type's range wraps instead of being UB */
    case CX_U8: ((uint8_t *)buf)[i] = (uint8_t)(int64_t)v; break;
    case CX_S32: ((int32_t *)buf)[i] = (int32_t)(uint32_t)(int64_t)v; break;
    case CX_S64: ((int64_t *)buf)[i] = (int64_t)v; break;
    case CX_S8: ((int8_t *)buf)[i] = (int8_t)(uint8_t)(int64_t)v; break;
    case CX_S16: ((int16_t *)buf)[i] = (int16_t)(uint16_t)(int64_t)v; break;
    case CX_U16: ((uint16_t *)buf)[i] = (uint16_t)(int64_t)v; break;
    case CX_U32: ((uint32_t *)buf)[i] = (uint32_t)(int64_t)v; break;
    /* values from 2^63 up do not fit int64_t */
    case CX_U64:
        ((uint64_t *)buf)[i] = v >= 9223372036854775808.0 ? (uint64_t)v : (uint64_t)(int64_t)v;
        break;
    /* a complex number with no imaginary part */
    case CX_C64: memcpy((char *)buf + 8 * i, (float[2]){(float)v, 0}, 8); break;
    case CX_C128: memcpy((char *)buf + 16 * i, (double[2]){v, 0}, 16); break;
    default: fail_msg("bad dtype");
    }
}

static inline double tu_load(cx_dtype t, const void *buf, int64_t i) {
    switch (t) {
    case CX_F16: return cx_f16_to_f32(((const uint16_t *)buf)[i]);
    case CX_BF16: return cx_bf16_to_f32(((const uint16_t *)buf)[i]);
    case CX_F32: return ((const float *)buf)[i];
    case CX_F64: return ((const double *)buf)[i];
    case CX_U8: return ((const uint8_t *)buf)[i];
    case CX_S32: return ((const int32_t *)buf)[i];
    case CX_S64: return (double)((const int64_t *)buf)[i];
    case CX_S8: return ((const int8_t *)buf)[i];
    case CX_S16: return ((const int16_t *)buf)[i];
    case CX_U16: return ((const uint16_t *)buf)[i];
    case CX_U32: return ((const uint32_t *)buf)[i];
    case CX_U64: return (double)((const uint64_t *)buf)[i];
    /* complex: the magnitude */
    case CX_C64: {
        float c[2];
        memcpy(c, (const char *)buf + 8 * i, 8);
        return hypot(c[0], c[1]);
    }
    case CX_C128: {
        double c[2];
        memcpy(c, (const char *)buf + 16 * i, 16);
        return hypot(c[0], c[1]);
    }
    default: fail_msg("bad dtype");
    }
    return 0;
}

/* Whether t is an unsigned integer type. */
static inline bool tu_unsigned(cx_dtype t) {
    return !cx_dtype_is_float(t) && !cx_dtype_is_signed(t);
}

/* The integer bits v wrapped into type t, as a double (exact up to 2^53). */
static inline double tu_wrap(cx_dtype t, uint64_t v) {
    int bits = cx_dtype_bits(t);
    if (bits < 64) v &= (UINT64_C(1) << bits) - 1;
    if (cx_dtype_is_signed(t) && bits < 64 && (v >> (bits - 1)) & 1) v |= ~UINT64_C(0) << bits;
    return cx_dtype_is_signed(t) ? (double)(int64_t)v : (double)v;
}

/* A heap tensor on the cpu device holding `values` (converted to t). Free with tu_drop. */
static inline cx_tensor *tu_tensor(cx_dtype t, int rank, const int64_t *shape,
                                   const double *values) {
    cx_tensor *x = malloc(sizeof *x);
    cx_desc d = tu_desc(t, rank, shape);
    cx_status st = {0};
    assert_int_equal(cx_tensor_init(x, tu_cpu(), &d, &st), CX_OK);
    for (int64_t i = 0; i < x->numel; i++) tu_store(t, x->data, i, values[i]);
    return x;
}

static inline void tu_drop(cx_tensor *x) {
    if (!x) return;
    cx_tensor_free(x);
    free(x);
}

/* Runs op on the inputs; returns the output tensor, or NULL with *code set on failure. */
static inline cx_tensor *tu_run(cx_op_id op, cx_tensor **in, int n, cx_params *ps, cx_code *code,
                                cx_status *st_out) {
    cx_tensor *out = malloc(sizeof *out);
    cx_status st = {0};
    cx_params empty = {0};
    cx_code rc = cx_run(op, tu_cpu(), in, n, ps ? ps : &empty, out, &st);
    if (code) *code = rc;
    if (st_out) *st_out = st;
    if (rc != CX_OK) {
        free(out);
        return NULL;
    }
    return out;
}

/* Runs op and asserts success, printing the message otherwise. */
static inline cx_tensor *tu_run_ok(cx_op_id op, cx_tensor **in, int n, cx_params *ps) {
    cx_status st = {0};
    cx_code rc;
    cx_tensor *out = tu_run(op, in, n, ps, &rc, &st);
    if (rc != CX_OK) fail_msg("%s failed: %s", cx_op_table[op].name, st.message);
    return out;
}

/* Asserts the tensor's shape and that every element is within tol of expected (NaN matches NaN). */
static inline void tu_expect(const cx_tensor *x, cx_dtype t, int rank, const int64_t *shape,
                             const double *expected, double tol) {
    assert_int_equal(x->desc.dtype, t);
    assert_int_equal(x->desc.rank, rank);
    for (int k = 0; k < rank; k++) assert_int_equal(x->desc.shape[k], shape[k]);
    for (int64_t i = 0; i < x->numel; i++) {
        double got = tu_load(t, x->data, i), want = expected[i];
        if (isnan(want) && isnan(got)) continue;
        if (isinf(want) && got == want) continue;
        if (!(fabs(got - want) <= tol * (1.0 + fabs(want))))
            fail_msg("element %lld: expected %.17g, got %.17g (tolerance %g)", (long long)i, want,
                     got, tol);
    }
}

/* The end of an asynchronous download (cx_tensor_download_async), waited for. */
typedef struct {
    pthread_mutex_t lock;
    pthread_cond_t cond;
    int calls;
    cx_code rc;
    char message[512];
    pthread_t caller, thread; /* the thread that started it, and the one that ended it */
} tu_download;

static inline void tu_download_init(tu_download *w) {
    memset(w, 0, sizeof *w);
    pthread_mutex_init(&w->lock, NULL);
    pthread_cond_init(&w->cond, NULL);
    w->caller = pthread_self();
    w->rc = (cx_code)-1;
}

static inline void tu_download_done(void *ctx, cx_code rc, const char *message) {
    tu_download *w = ctx;
    pthread_mutex_lock(&w->lock);
    w->calls++;
    w->rc = rc;
    snprintf(w->message, sizeof w->message, "%s", message ? message : "");
    w->thread = pthread_self();
    pthread_cond_broadcast(&w->cond);
    pthread_mutex_unlock(&w->lock);
}

/* Whether done was called within `ms` milliseconds. */
static inline bool tu_download_wait(tu_download *w, int ms) {
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += ms / 1000;
    until.tv_nsec += (long)(ms % 1000) * 1000000L;
    if (until.tv_nsec >= 1000000000L) {
        until.tv_sec++;
        until.tv_nsec -= 1000000000L;
    }
    pthread_mutex_lock(&w->lock);
    while (w->calls == 0 && pthread_cond_timedwait(&w->cond, &w->lock, &until) == 0) {
    }
    bool called = w->calls > 0;
    pthread_mutex_unlock(&w->lock);
    return called;
}

static inline void tu_download_destroy(tu_download *w) {
    pthread_mutex_destroy(&w->lock);
    pthread_cond_destroy(&w->cond);
}

/* A rank-1 tensor of n values (rounded or wrapped into t). */
static inline cx_tensor *tu_vec(cx_dtype t, int64_t n, const double *v) {
    return tu_tensor(t, 1, (const int64_t[]){n}, v);
}

/* A rank-1 tensor from raw element bytes, for values a double cannot hold. */
static inline cx_tensor *tu_raw(cx_dtype t, int64_t n, const void *bytes) {
    cx_tensor *x = malloc(sizeof *x);
    cx_desc d = tu_desc(t, 1, (const int64_t[]){n});
    cx_status st = {0};
    assert_int_equal(cx_tensor_init(x, tu_cpu(), &d, &st), CX_OK);
    memcpy(x->data, bytes, x->nbytes);
    return x;
}

#define TU_SHAPE(...)  ((const int64_t[]){__VA_ARGS__})
#define TU_VALUES(...) ((const double[]){__VA_ARGS__})

#endif
