/* The CREATE kind: full, iota, eye, random_uniform and random_normal.
 *
 * Random numbers follow philox.h element by element: element i (row-major) of a tensor takes
 * u = cx_uniform01_*(key, i) or z = cx_normal_*(key, i), with the f32 functions for f32, f16 and
 * bf16 and the f64 ones for f64. The value is then computed in double with one fused
 * multiply-add, which every device has and which rounds the same everywhere, and rounded once
 * into the type:
 *   uniform: fma(max - min, u, min), moved to the nearest value of the type inside [min, max)
 *            when rounding takes it out (only when min < max),
 *   normal:  fma(standard_deviation, z, mean). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cpu_kernels.h"
#include "../../core/philox.h"

/* Stores one element of type t, given as raw bits of its size. */
static inline void put_bits(void *buf, size_t es, int64_t i, uint64_t bits) {
    switch (es) {
    case 1: ((uint8_t *)buf)[i] = (uint8_t)bits; break;
    case 2: ((uint16_t *)buf)[i] = (uint16_t)bits; break;
    case 4: ((uint32_t *)buf)[i] = (uint32_t)bits; break;
    default: ((uint64_t *)buf)[i] = bits; break;
    }
}

/* A float into an integer type: truncated toward zero, saturated, NaN to 0 (like as_type). The
 * result is the element's bits, widened to 64. */
static uint64_t float_to_int(double f, cx_dtype t) {
    if (f != f) return 0;
    if (t == CX_U64) return f <= 0 ? 0 : f >= 18446744073709551616.0 ? UINT64_MAX : (uint64_t)f;
    /* 2^63 - 1 rounds up to 2^63 in double, which no int64 holds */
    if (t == CX_S64)
        return (uint64_t)(f <= -9223372036854775808.0  ? INT64_MIN
                          : f >= 9223372036854775808.0 ? INT64_MAX
                                                       : (int64_t)f);
    int bits = cx_dtype_bits(t);
    double lo = cx_dtype_is_signed(t) ? -ldexp(1, bits - 1) : 0;
    double hi = cx_dtype_is_signed(t) ? ldexp(1, bits - 1) - 1 : ldexp(1, bits) - 1;
    return (uint64_t)(int64_t)(f <= lo ? lo : f >= hi ? hi : f);
}

/* The bits of the double v in type t: floats round to nearest even, integers as float_to_int. */
static uint64_t bits_of_double(cx_dtype t, double v) {
    uint64_t u = 0;
    switch (t) {
    case CX_F16: return cx_f16_from_f64(v);
    case CX_BF16: return cx_bf16_from_f64(v);
    case CX_F32: return cx_f32_bits((float)v);
    case CX_F64: memcpy(&u, &v, 8); return u;
    default: return float_to_int(v, t);
    }
}

/* The bits of the integer v in type t: integer types wrap, floats round. */
static uint64_t bits_of_int(cx_dtype t, int64_t v) {
    return cx_dtype_is_float(t) ? bits_of_double(t, (double)v) : (uint64_t)v;
}

/* n elements from i, all the same bits. */
static void fill(void *buf, size_t es, int64_t i, int64_t n, uint64_t bits) {
    if (es == 1) {
        memset((uint8_t *)buf + i, (int)(bits & 0xff), (size_t)n);
        return;
    }
    for (int64_t k = i; k < i + n; k++) put_bits(buf, es, k, bits);
}

static cx_code create_full(const cx_params *ps, cx_tensor *out) {
    const cx_param *v = &ps->p[CX_P_VALUE];
    cx_dtype t = out->desc.dtype;
    uint64_t bits = v->is_int ? bits_of_int(t, v->i[0]) : bits_of_double(t, v->f);
    fill(out->data, cx_dtype_size(t), 0, out->numel, bits);
    return CX_OK;
}

/* 0, 1, 2... over the whole tensor; the common types get loops the compiler vectorises. */
static void iota_flat(cx_tensor *out) {
    int64_t n = out->numel;
    void *p = out->data;
    switch (out->desc.dtype) {
    case CX_S64:
        for (int64_t i = 0; i < n; i++) ((int64_t *)p)[i] = i;
        break;
    case CX_F32:
        for (int64_t i = 0; i < n; i++) ((float *)p)[i] = (float)i;
        break;
    case CX_F64:
        for (int64_t i = 0; i < n; i++) ((double *)p)[i] = (double)i;
        break;
    default:
        for (int64_t i = 0; i < n; i++)
            put_bits(p, cx_dtype_size(out->desc.dtype), i, bits_of_int(out->desc.dtype, i));
        break;
    }
}

static cx_code create_iota(const cx_params *ps, cx_tensor *out) {
    const cx_desc *d = &out->desc;
    size_t es = cx_dtype_size(d->dtype);
    if (!cx_param_has(ps, CX_P_AXIS)) {
        iota_flat(out);
        return CX_OK;
    }
    /* the tensor as {outer, n, inner}: each index j along the axis fills a run of inner */
    int axis = (int)ps->p[CX_P_AXIS].i[0];
    int64_t outer, n = d->shape[axis], inner;
    cpu_around_axis(d, axis, &outer, &inner);
    for (int64_t o = 0; o < outer; o++)
        for (int64_t j = 0; j < n; j++)
            fill(out->data, es, (o * n + j) * inner, inner, bits_of_int(d->dtype, j));
    return CX_OK;
}

static cx_code create_eye(cx_tensor *out) {
    const cx_desc *d = &out->desc;
    size_t es = cx_dtype_size(d->dtype);
    int64_t rows = d->shape[d->rank - 2], cols = d->shape[d->rank - 1];
    int64_t diag = rows < cols ? rows : cols;
    uint64_t one = bits_of_int(d->dtype, 1);
    if (out->numel == 0) return CX_OK;
    memset(out->data, 0, out->nbytes);
    for (int64_t b = 0; b < out->numel / (rows * cols); b++)
        for (int64_t k = 0; k < diag; k++) put_bits(out->data, es, (b * rows + k) * cols + k, one);
    return CX_OK;
}

/* v in type t, as a double (exact). */
static double round_to(cx_dtype t, double v) {
    switch (t) {
    case CX_F16: return cx_f16_to_f32(cx_f16_from_f64(v));
    case CX_BF16: return cx_bf16_to_f32(cx_bf16_from_f64(v));
    case CX_F32: return (float)v;
    default: return v;
    }
}

/* The neighbour of v (a value of type t) toward +inf when up, else toward -inf. */
static double step_to(cx_dtype t, double v, bool up) {
    if (t == CX_F64) return nextafter(v, up ? INFINITY : -INFINITY);
    if (t == CX_F32) return nextafterf((float)v, up ? INFINITY : -INFINITY);
    uint16_t h = t == CX_F16 ? cx_f16_from_f64(v) : cx_bf16_from_f64(v);
    bool neg = (h & 0x8000) != 0;
    if ((h & 0x7fff) == 0)
        h = up ? 1 : 0x8001; /* the smallest subnormal on that side */
    else
        h = (uint16_t)(neg == up ? h - 1 : h + 1); /* magnitude shrinks, or grows */
    return t == CX_F16 ? cx_f16_to_f32(h) : cx_bf16_to_f32(h);
}

/* The values of type t closest to [min, max) from inside. Requires min < max, both finite. */
static void uniform_bounds(cx_dtype t, double min, double max, double *lo, double *hi) {
    *lo = round_to(t, min);
    while (*lo < min) *lo = step_to(t, *lo, true);
    *hi = round_to(t, max);
    while (*hi >= max) *hi = step_to(t, *hi, false);
}

/* How u in [0, 1) becomes an element of t: scaled, rounded, and kept inside [min, max) when that
 * range is finite and holds a value of t. */
typedef struct {
    cx_dtype t;
    double min, range, lo, hi;
    bool clamp;
} uniform_map;

static uniform_map uniform_init(cx_dtype t, double min, double max) {
    uniform_map m = {t, min, max - min, 0, 0, false};
    m.clamp = min < max && isfinite(min) && isfinite(max);
    if (m.clamp) uniform_bounds(t, min, max, &m.lo, &m.hi);
    /* a range with no value of t inside (say [0.1, 0.1001) in f16) has nowhere to go */
    m.clamp = m.clamp && m.lo <= m.hi;
    return m;
}

static uint64_t uniform_bits(const uniform_map *m, double u) {
    double v = round_to(m->t, fma(m->range, u, m->min));
    /* !(v >= lo) also catches the NaN of an infinite range times u = 0 */
    if (m->clamp) v = !(v >= m->lo) ? m->lo : v > m->hi ? m->hi : v;
    return bits_of_double(m->t, v);
}

/* A Philox block feeds 4 f32 (or 2 f64) elements; computing it once per block, rather than per
 * element as cx_uniform01_* would, keeps the same mapping at a quarter of the cost. */
static void uniform_f32(uint64_t key, const uniform_map *m, cx_tensor *out) {
    size_t es = cx_dtype_size(m->t);
    for (int64_t q = 0; q * 4 < out->numel; q++) {
        cx_philox_block b = cx_philox(key, (uint64_t)q);
        for (int64_t w = 0; w < 4 && q * 4 + w < out->numel; w++) {
            float u = (float)(b.v[w] >> 8) * 0x1.0p-24f;
            put_bits(out->data, es, q * 4 + w, uniform_bits(m, u));
        }
    }
}

static void uniform_f64(uint64_t key, const uniform_map *m, cx_tensor *out) {
    for (int64_t q = 0; q * 2 < out->numel; q++) {
        cx_philox_block b = cx_philox(key, (uint64_t)q);
        for (int64_t w = 0; w < 2 && q * 2 + w < out->numel; w++) {
            uint64_t bits53 = ((uint64_t)b.v[2 * w] << 21) | (b.v[2 * w + 1] >> 11);
            put_bits(out->data, 8, q * 2 + w, uniform_bits(m, (double)bits53 * 0x1.0p-53));
        }
    }
}

static cx_code create_uniform(const cx_params *ps, cx_tensor *out) {
    uint64_t key = (uint64_t)ps->p[CX_P_KEY].i[0];
    uniform_map m = uniform_init(out->desc.dtype, ps->p[CX_P_MIN].f, ps->p[CX_P_MAX].f);
    if (m.t == CX_F64)
        uniform_f64(key, &m, out);
    else
        uniform_f32(key, &m, out);
    return CX_OK;
}

static cx_code create_normal(const cx_params *ps, cx_tensor *out) {
    uint64_t key = (uint64_t)ps->p[CX_P_KEY].i[0];
    double mean = ps->p[CX_P_MEAN].f, std = ps->p[CX_P_STD].f;
    cx_dtype t = out->desc.dtype;
    size_t es = cx_dtype_size(t);
    for (int64_t i = 0; i < out->numel; i++) {
        double z = t == CX_F64 ? cx_normal_f64(key, (uint64_t)i) : cx_normal_f32(key, (uint64_t)i);
        put_bits(out->data, es, i, bits_of_double(t, fma(std, z, mean)));
    }
    return CX_OK;
}

/* full, iota and eye of a complex type: made in the real type, then cast (imaginary part 0). */
static cx_code create_complex(cx_op_id op, const cx_params *ps, cx_tensor *out, cx_status *st) {
    cx_tensor real = *out;
    real.desc.dtype = cx_dtype_to_real(out->desc.dtype);
    real.nbytes = (size_t)out->numel * cx_dtype_size(real.desc.dtype);
    real.data = malloc(real.nbytes ? real.nbytes : 1);
    if (!real.data) return cx_fail(st, CX_ENOMEM, "cpu: could not allocate %zu bytes", real.nbytes);
    cx_code rc = cpu_create(op, ps, &real, st);
    if (rc == CX_OK) rc = cpu_cast(&real, out, st);
    free(real.data);
    return rc;
}

cx_code cpu_create(cx_op_id op, const cx_params *ps, cx_tensor *out, cx_status *st) {
    bool random = op == CX_OP_RANDOM_UNIFORM || op == CX_OP_RANDOM_NORMAL;
    if (!random && cx_dtype_is_complex(out->desc.dtype)) return create_complex(op, ps, out, st);
    if (random && !cx_dtype_is_float(out->desc.dtype))
        return cx_fail(st, CX_EINVAL, "cpu: %s needs a float type, got: %s", cx_op_table[op].name,
                       cx_dtype_name(out->desc.dtype));
    switch (op) {
    case CX_OP_FULL: return create_full(ps, out);
    case CX_OP_IOTA: return create_iota(ps, out);
    case CX_OP_EYE: return create_eye(out);
    case CX_OP_RANDOM_UNIFORM: return create_uniform(ps, out);
    case CX_OP_RANDOM_NORMAL: return create_normal(ps, out);
    default: break;
    }
    return cx_fail(st, CX_EUNSUPPORTED, "cpu: %s is not a creation op", cx_op_table[op].name);
}
