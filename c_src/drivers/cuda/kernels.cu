/* The cuda driver's own kernels: elementwise (logical ops included), cast between every type,
 * strided copy, fill, reductions (all and any included), argmax/argmin, take and gather with
 * their index check, iota, eye, Philox random numbers, and the fused softmax, log_softmax and
 * layer_norm. matmul is cuBLAS (cuda_blas.c). See cuda_kernels.h.
 *
 * Each function has one kernel per value type with the op switch outside the element loop, so
 * the branch is taken once per thread and the loop is a plain one. Contiguous elementwise work
 * moves four elements per load (buffers come from cudaMallocAsync, 256-byte aligned). The
 * formulas are the cpu driver's (elementwise.c): max and min let NaN through, sigmoid never
 * overflows, rsqrt is 1 / sqrt, round is half away from zero. */
#include "ck_launch.h"
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "../../core/half.h"
#include "cuda_kernels.h"

namespace {

__device__ __forceinline__ float to_f(float x) {
    return x;
}
__device__ __forceinline__ float to_f(__half x) {
    return __half2float(x);
}
__device__ __forceinline__ float to_f(__nv_bfloat16 x) {
    return __bfloat162float(x);
}

template <typename T> __device__ __forceinline__ T from_f(float x);
template <> __device__ __forceinline__ float from_f<float>(float x) {
    return x;
}
template <> __device__ __forceinline__ __half from_f<__half>(float x) {
    return __float2half_rn(x);
}
template <> __device__ __forceinline__ __nv_bfloat16 from_f<__nv_bfloat16>(float x) {
    return __float2bfloat16_rn(x);
}
/* u8: the truth values of logical ops, comparisons, all and any (0 or 1), and their inputs */
__device__ __forceinline__ float to_f(uint8_t x) {
    return (float)x;
}
template <> __device__ __forceinline__ uint8_t from_f<uint8_t>(float x) {
    return x != 0.0f ? 1 : 0;
}

/* ---- conversions with the cpu driver's rules (cpu/cast.c, core/half.h) ------------------------
 *
 * A value is read as a double (every float type widens exactly) or as an int64_t (the integer
 * types), and written into the destination type as the cpu writes it: into f16 and bf16 rounded
 * once to nearest even (an integer beyond 2^53 rounded to odd into double first, a double to odd
 * into f32 first for bf16), into f32 and f64 rounded to nearest, into integers from a float
 * truncated toward zero and saturated with NaN as 0, into integers from an integer wrapped. */

/* cpu/cast.c's int_to_f64_odd: exact below 2^53, rounded to odd above */
__device__ __forceinline__ double int_to_f64_odd(int64_t x) {
    uint64_t u = x < 0 ? 0 - (uint64_t)x : (uint64_t)x;
    if (u < (1ull << 53)) return (double)x;
    int sh = 0;
    while ((u >> sh) >= (1ull << 53)) sh++;
    uint64_t kept = (u >> sh) | ((u & ((1ull << sh) - 1)) != 0);
    double mag = (double)kept * (double)(1ull << sh);
    return x < 0 ? -mag : mag;
}

__device__ __forceinline__ __half half_of(uint16_t bits) {
    __half_raw r;
    r.x = bits;
    return __half(r);
}
__device__ __forceinline__ __nv_bfloat16 bfloat16_of(uint16_t bits) {
    __nv_bfloat16_raw r;
    r.x = bits;
    return __nv_bfloat16(r);
}

/* An element as the value it holds: a double for the float types, an int64_t for the others. */
__device__ __forceinline__ double value_of(float x) {
    return x;
}
__device__ __forceinline__ double value_of(double x) {
    return x;
}
__device__ __forceinline__ double value_of(__half x) {
    return __half2float(x);
}
__device__ __forceinline__ double value_of(__nv_bfloat16 x) {
    return __bfloat162float(x);
}
__device__ __forceinline__ int64_t value_of(uint8_t x) {
    return x;
}
__device__ __forceinline__ int64_t value_of(int32_t x) {
    return x;
}
__device__ __forceinline__ int64_t value_of(int64_t x) {
    return x;
}

/* A double into type T. */
template <typename T> __device__ T store_as(double d);
template <> __device__ __forceinline__ float store_as<float>(double d) {
    return (float)d;
}
template <> __device__ __forceinline__ double store_as<double>(double d) {
    return d;
}
template <> __device__ __forceinline__ __half store_as<__half>(double d) {
    return half_of(cx_f16_from_f64(d));
}
template <> __device__ __forceinline__ __nv_bfloat16 store_as<__nv_bfloat16>(double d) {
    return bfloat16_of(cx_bf16_from_f64(d));
}
template <> __device__ __forceinline__ uint8_t store_as<uint8_t>(double d) {
    return d > 0 ? (d < 255 ? (uint8_t)d : (uint8_t)255) : (uint8_t)0;
}
template <> __device__ __forceinline__ int32_t store_as<int32_t>(double d) {
    if (d != d) return 0;
    if (d <= -2147483648.0) return INT32_MIN;
    if (d >= 2147483647.0) return INT32_MAX;
    return (int32_t)d;
}
template <> __device__ __forceinline__ int64_t store_as<int64_t>(double d) {
    if (d != d) return 0;
    if (d <= -9223372036854775808.0) return INT64_MIN;
    if (d >= 9223372036854775808.0) return INT64_MAX;
    return (int64_t)d;
}

/* An integer into type T. */
template <typename T> __device__ T store_as(int64_t x);
template <> __device__ __forceinline__ float store_as<float>(int64_t x) {
    return (float)x;
}
template <> __device__ __forceinline__ double store_as<double>(int64_t x) {
    return (double)x;
}
template <> __device__ __forceinline__ __half store_as<__half>(int64_t x) {
    return half_of(cx_f16_from_f64(int_to_f64_odd(x)));
}
template <> __device__ __forceinline__ __nv_bfloat16 store_as<__nv_bfloat16>(int64_t x) {
    return bfloat16_of(cx_bf16_from_f64(int_to_f64_odd(x)));
}
template <> __device__ __forceinline__ uint8_t store_as<uint8_t>(int64_t x) {
    return (uint8_t)x;
}
template <> __device__ __forceinline__ int32_t store_as<int32_t>(int64_t x) {
    return (int32_t)(uint32_t)x;
}
template <> __device__ __forceinline__ int64_t store_as<int64_t>(int64_t x) {
    return x;
}

template <typename T> struct alignas(sizeof(T) * 4) vec4 { T v[4]; };

__device__ __forceinline__ float sigmoid_f(float x) {
    if (x >= 0) return 1.0f / (1.0f + expf(-x));
    float e = expf(x);
    return e / (1.0f + e);
}

#ifdef CK_EMULATE
/* the host's libm has no erfinvf: the cpu driver's, in double */
extern "C" double cx_erf_inv(double y);
__device__ __forceinline__ float erf_inv_f(float x) {
    return (float)cx_erf_inv(x);
}
#else
__device__ __forceinline__ float erf_inv_f(float x) {
    return erfinvf(x);
}
#endif

__device__ __forceinline__ float max_nan(float x, float y) {
    return x > y || x != x ? x : y;
}
__device__ __forceinline__ float min_nan(float x, float y) {
    return x < y || x != x ? x : y;
}

/* The op's formula on f32 values x (and y): one case per op, each a loop (LOOP is defined by
 * the kernel that expands it). */
#define UNARY_CASES(LOOP)                                                                          \
    case CX_OP_NEGATE: LOOP(-x); break;                                                            \
    case CX_OP_ABS: LOOP(fabsf(x)); break;                                                         \
    case CX_OP_SIGN: LOOP(x > 0 ? 1.0f : x < 0 ? -1.0f : x); break;                                \
    case CX_OP_EXP: LOOP(expf(x)); break;                                                          \
    case CX_OP_EXPM1: LOOP(expm1f(x)); break;                                                      \
    case CX_OP_LOG: LOOP(logf(x)); break;                                                          \
    case CX_OP_LOG1P: LOOP(log1pf(x)); break;                                                      \
    case CX_OP_SQRT: LOOP(sqrtf(x)); break;                                                        \
    case CX_OP_RSQRT: LOOP(1.0f / sqrtf(x)); break;                                                \
    case CX_OP_SIN: LOOP(sinf(x)); break;                                                          \
    case CX_OP_COS: LOOP(cosf(x)); break;                                                          \
    case CX_OP_TANH: LOOP(tanhf(x)); break;                                                        \
    case CX_OP_SIGMOID: LOOP(sigmoid_f(x)); break;                                                 \
    case CX_OP_ERF: LOOP(erff(x)); break;                                                          \
    case CX_OP_ERFC: LOOP(erfcf(x)); break;                                                        \
    case CX_OP_ERF_INV: LOOP(erf_inv_f(x)); break;                                                 \
    case CX_OP_TAN: LOOP(tanf(x)); break;                                                          \
    case CX_OP_ASIN: LOOP(asinf(x)); break;                                                        \
    case CX_OP_ACOS: LOOP(acosf(x)); break;                                                        \
    case CX_OP_ATAN: LOOP(atanf(x)); break;                                                        \
    case CX_OP_SINH: LOOP(sinhf(x)); break;                                                        \
    case CX_OP_COSH: LOOP(coshf(x)); break;                                                        \
    case CX_OP_ASINH: LOOP(asinhf(x)); break;                                                      \
    case CX_OP_ACOSH: LOOP(acoshf(x)); break;                                                      \
    case CX_OP_ATANH: LOOP(atanhf(x)); break;                                                      \
    case CX_OP_CBRT: LOOP(cbrtf(x)); break;                                                        \
    case CX_OP_FLOOR: LOOP(floorf(x)); break;                                                      \
    case CX_OP_CEIL: LOOP(ceilf(x)); break;                                                        \
    case CX_OP_ROUND: LOOP(roundf(x)); break;                                                      \
    case CX_OP_RECIPROCAL:                                                                         \
        LOOP(1.0f / x);                                                                            \
        break;

#define BINARY_CASES(LOOP)                                                                         \
    case CX_OP_ADD: LOOP(x + y); break;                                                            \
    case CX_OP_SUBTRACT: LOOP(x - y); break;                                                       \
    case CX_OP_MULTIPLY: LOOP(x *y); break;                                                        \
    case CX_OP_DIVIDE: LOOP(x / y); break;                                                         \
    case CX_OP_POW: LOOP(powf(x, y)); break;                                                       \
    case CX_OP_MAX: LOOP(max_nan(x, y)); break;                                                    \
    case CX_OP_MIN: LOOP(min_nan(x, y)); break;                                                    \
    case CX_OP_REMAINDER: LOOP(fmodf(x, y)); break;                                                \
    case CX_OP_ATAN2:                                                                              \
        LOOP(atan2f(x, y));                                                                        \
        break;

#define COMPARE_CASES(LOOP)                                                                        \
    case CX_OP_EQUAL: LOOP(x == y); break;                                                         \
    case CX_OP_NOT_EQUAL: LOOP(x != y); break;                                                     \
    case CX_OP_LESS: LOOP(x < y); break;                                                           \
    case CX_OP_LESS_EQUAL: LOOP(x <= y); break;                                                    \
    case CX_OP_GREATER: LOOP(x > y); break;                                                        \
    case CX_OP_GREATER_EQUAL: LOOP(x >= y); break;

/* NaN is non-zero, so true, as in the cpu driver */
#define LOGICAL_CASES(LOOP)                                                                        \
    case CX_OP_LOGICAL_AND: LOOP(x != 0.0f && y != 0.0f); break;                                   \
    case CX_OP_LOGICAL_OR: LOOP(x != 0.0f || y != 0.0f); break;                                    \
    case CX_OP_LOGICAL_XOR: LOOP((x != 0.0f) != (y != 0.0f)); break;

__host__ __device__ __forceinline__ bool is_logical(int op) {
    return op == CX_OP_LOGICAL_NOT || op == CX_OP_IS_NAN || op == CX_OP_IS_INFINITY ||
           op == CX_OP_LOGICAL_AND || op == CX_OP_LOGICAL_OR || op == CX_OP_LOGICAL_XOR;
}

/* ---- contiguous unary and binary: four elements per load ------------------------------- */

template <typename T>
__global__ void k_unary_contig(int op, const T *__restrict__ a, T *__restrict__ out, int64_t n) {
    int64_t step = (int64_t)gridDim.x * blockDim.x;
    int64_t i0 = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    int64_t n4 = n / 4;
    const vec4<T> *av = reinterpret_cast<const vec4<T> *>(a);
    vec4<T> *ov = reinterpret_cast<vec4<T> *>(out);
#define UNARY_LOOP(EXPR)                                                                           \
    for (int64_t i = i0; i < n4; i += step) {                                                      \
        vec4<T> va = av[i], r;                                                                     \
        _Pragma("unroll") for (int k = 0; k < 4; k++) {                                            \
            float x = to_f(va.v[k]);                                                               \
            r.v[k] = from_f<T>(EXPR);                                                              \
        }                                                                                          \
        ov[i] = r;                                                                                 \
    }                                                                                              \
    for (int64_t i = n4 * 4 + i0; i < n; i += step) {                                              \
        float x = to_f(a[i]);                                                                      \
        out[i] = from_f<T>(EXPR);                                                                  \
    }
    switch (op) {
        UNARY_CASES(UNARY_LOOP)
    default: break;
    }
#undef UNARY_LOOP
}

/* Each input is contiguous or a single value (sa, sb: contiguous when true). */
template <typename T>
__global__ void k_binary_contig(int op, const T *__restrict__ a, const T *__restrict__ b, bool sa,
                                bool sb, T *__restrict__ out, int64_t n) {
    int64_t step = (int64_t)gridDim.x * blockDim.x;
    int64_t i0 = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    int64_t n4 = n / 4;
    const vec4<T> *av = reinterpret_cast<const vec4<T> *>(a);
    const vec4<T> *bv = reinterpret_cast<const vec4<T> *>(b);
    vec4<T> *ov = reinterpret_cast<vec4<T> *>(out);
    float a0 = sa ? 0.0f : to_f(a[0]), b0 = sb ? 0.0f : to_f(b[0]);
#define BINARY_LOOP(EXPR)                                                                          \
    for (int64_t i = i0; i < n4; i += step) {                                                      \
        vec4<T> va{}, vb{}, r;                                                                     \
        if (sa) va = av[i];                                                                        \
        if (sb) vb = bv[i];                                                                        \
        _Pragma("unroll") for (int k = 0; k < 4; k++) {                                            \
            float x = sa ? to_f(va.v[k]) : a0;                                                     \
            float y = sb ? to_f(vb.v[k]) : b0;                                                     \
            r.v[k] = from_f<T>(EXPR);                                                              \
        }                                                                                          \
        ov[i] = r;                                                                                 \
    }                                                                                              \
    for (int64_t i = n4 * 4 + i0; i < n; i += step) {                                              \
        float x = sa ? to_f(a[i]) : a0;                                                            \
        float y = sb ? to_f(b[i]) : b0;                                                            \
        out[i] = from_f<T>(EXPR);                                                                  \
    }
    switch (op) {
        BINARY_CASES(BINARY_LOOP)
    default: break;
    }
#undef BINARY_LOOP
}

/* ---- fused chains: one pass, the instructions interpreted per element ------------------ */

struct fused_args {
    const float *in[8];
    float *out;
    int64_t n;
    ck_fused_plan p;
};

/* The chain's value at element i: the instructions interpreted one after another. */
__device__ __forceinline__ float fused_value(const fused_args &f, int64_t i) {
    float v[16];
    for (int k = 0; k < f.p.n_in; k++) v[k] = f.in[k][(f.p.wide >> k) & 1 ? i : 0];
    for (int k = 0; k < f.p.n; k++) {
        float x = v[f.p.a[k]], y = f.p.b[k] >= 0 ? v[f.p.b[k]] : 0.0f, r = 0.0f;
#define FUSED_SET(EXPR) r = (EXPR)
        switch (f.p.op[k]) {
            UNARY_CASES(FUSED_SET)
            BINARY_CASES(FUSED_SET)
        default: break;
        }
#undef FUSED_SET
        v[f.p.n_in + k] = r;
    }
    return v[f.p.n_in + f.p.n - 1];
}

__global__ void k_fused(fused_args f) {
    int64_t step = (int64_t)gridDim.x * blockDim.x;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < f.n; i += step)
        f.out[i] = fused_value(f, i);
}

/* The chain with a sum at the end: a block per row of `cols` elements (grid-strided over the
 * rows), each thread summing every blockDim-th element in double, then the block's sums added
 * pairwise in shared memory and rounded once to f32 (the cpu sums f32 values in double too). */
__global__ void k_fused_sum(fused_args f, int64_t rows, int64_t cols) {
    __shared__ double part[THREADS];
    for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
        double acc = 0.0;
        for (int64_t j = threadIdx.x; j < cols; j += blockDim.x)
            acc += (double)fused_value(f, row * cols + j);
        part[threadIdx.x] = acc;
        __syncthreads();
        for (int w = THREADS / 2; w > 0; w >>= 1) {
            if ((int)threadIdx.x < w) part[threadIdx.x] += part[threadIdx.x + w];
            __syncthreads();
        }
        if (threadIdx.x == 0) f.out[row] = (float)part[0];
        __syncthreads();
    }
}

/* The kernels' arguments; false for a plan the kernels cannot run. */
static bool fused_setup(fused_args *f, const float *const *in, float *out, int64_t n,
                        const ck_fused_plan *p) {
    if (p->n_in < 1 || p->n_in > 8 || p->n < 1 || p->n > 8) return false;
    for (int k = 0; k < 8; k++) f->in[k] = k < p->n_in ? in[k] : nullptr;
    f->out = out;
    f->n = n;
    f->p = *p;
    return true;
}

extern "C" cudaError_t ck_fused_sum(const float *const *in, float *out, int64_t rows, int64_t cols,
                                    const ck_fused_plan *p, cudaStream_t stream) {
    fused_args f;
    if (!fused_setup(&f, in, out, rows * cols, p)) return cudaErrorInvalidValue;
    if (rows == 0) return cudaSuccess;
    launch(rows > 65536 ? 65536u : (unsigned)rows, THREADS, stream, k_fused_sum, f, rows, cols);
    return cudaGetLastError();
}

extern "C" bool ck_fused_supports(int op) {
#define FUSED_YES(EXPR) return true
    switch (op) {
        UNARY_CASES(FUSED_YES)
        BINARY_CASES(FUSED_YES)
    default: return false;
    }
#undef FUSED_YES
}

extern "C" cudaError_t ck_fused(const float *const *in, float *out, int64_t n,
                                const ck_fused_plan *p, cudaStream_t stream) {
    fused_args f;
    if (!fused_setup(&f, in, out, n, p)) return cudaErrorInvalidValue;
    if (n == 0) return cudaSuccess;
    launch(blocks_for(n), THREADS, stream, k_fused, f);
    return cudaGetLastError();
}

/* ---- general elementwise: any mix of scalar, contiguous and strided inputs -------------- */

__device__ __forceinline__ int64_t offset_of(const ck_layout &l, int j, int64_t i) {
    if (l.mode[j] == CK_SCALAR) return 0;
    if (l.mode[j] == CK_CONTIGUOUS) return i;
    int64_t off = 0, r = i;
    for (int d = l.rank - 1; d >= 0; d--) {
        int64_t idx = r % l.shape[d];
        r /= l.shape[d];
        off += idx * l.stride[j][d];
    }
    return off;
}

__device__ __forceinline__ bool truth(const void *p, cx_dtype t, int64_t i) {
    switch (t) {
    case CX_U8: return static_cast<const uint8_t *>(p)[i] != 0;
    case CX_F16: return to_f(static_cast<const __half *>(p)[i]) != 0.0f;
    case CX_BF16: return to_f(static_cast<const __nv_bfloat16 *>(p)[i]) != 0.0f;
    default: return static_cast<const float *>(p)[i] != 0.0f;
    }
}

struct ew_args {
    const void *in[3];
    void *out;
    int64_t n;
    ck_layout l;
};

/* unary, binary, comparisons and logical ops (O = uint8_t), select and clip. */
template <typename T, typename O> __global__ void k_elementwise(int op, cx_dtype pred, ew_args p) {
    int64_t step = (int64_t)gridDim.x * blockDim.x;
    int64_t i0 = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    const T *a = static_cast<const T *>(p.in[0]);
    const T *b = static_cast<const T *>(p.in[1]);
    const T *c = static_cast<const T *>(p.in[2]);
    O *out = static_cast<O *>(p.out);
#define EW_LOOP1(EXPR)                                                                             \
    for (int64_t i = i0; i < p.n; i += step) {                                                     \
        float x = to_f(a[offset_of(p.l, 0, i)]);                                                   \
        out[i] = from_f<T>(EXPR);                                                                  \
    }
#define EW_LOOP2(EXPR)                                                                             \
    for (int64_t i = i0; i < p.n; i += step) {                                                     \
        float x = to_f(a[offset_of(p.l, 0, i)]), y = to_f(b[offset_of(p.l, 1, i)]);                \
        out[i] = from_f<T>(EXPR);                                                                  \
    }
#define EW_COMPARE(EXPR)                                                                           \
    for (int64_t i = i0; i < p.n; i += step) {                                                     \
        float x = to_f(a[offset_of(p.l, 0, i)]), y = to_f(b[offset_of(p.l, 1, i)]);                \
        out[i] = (EXPR) ? 1 : 0;                                                                   \
    }
    if constexpr (sizeof(O) == 1) {
        switch (op) {
            COMPARE_CASES(EW_COMPARE)
            LOGICAL_CASES(EW_COMPARE)
        case CX_OP_LOGICAL_NOT:
            for (int64_t i = i0; i < p.n; i += step) out[i] = to_f(a[offset_of(p.l, 0, i)]) == 0.0f;
            break;
        case CX_OP_IS_NAN:
            for (int64_t i = i0; i < p.n; i += step) out[i] = isnan(to_f(a[offset_of(p.l, 0, i)]));
            break;
        case CX_OP_IS_INFINITY:
            for (int64_t i = i0; i < p.n; i += step) out[i] = isinf(to_f(a[offset_of(p.l, 0, i)]));
            break;
        default: break;
        }
    } else {
        switch (op) {
            UNARY_CASES(EW_LOOP1)
            BINARY_CASES(EW_LOOP2)
        case CX_OP_SELECT:
            for (int64_t i = i0; i < p.n; i += step) {
                bool t = truth(p.in[0], pred, offset_of(p.l, 0, i));
                out[i] = t ? b[offset_of(p.l, 1, i)] : c[offset_of(p.l, 2, i)];
            }
            break;
        case CX_OP_CLIP:
            for (int64_t i = i0; i < p.n; i += step) {
                float x = to_f(a[offset_of(p.l, 0, i)]);
                float lo = to_f(b[offset_of(p.l, 1, i)]), hi = to_f(c[offset_of(p.l, 2, i)]);
                out[i] = from_f<T>(min_nan(max_nan(x, lo), hi));
            }
            break;
        default: break;
        }
    }
#undef EW_LOOP1
#undef EW_LOOP2
#undef EW_COMPARE
}

template <typename T>
cudaError_t elementwise_t(cx_op_id op, cx_dtype pred, const void *const *in, int n_in, void *out,
                          int64_t n, const ck_layout *l, cudaStream_t s) {
    bool compare = (op >= CX_OP_EQUAL && op <= CX_OP_GREATER_EQUAL) || is_logical(op);
    bool select = op == CX_OP_SELECT || op == CX_OP_CLIP;
    bool fast = !compare && !select;
    for (int j = 0; j < n_in && fast; j++) fast = l->mode[j] != CK_STRIDED;
    unsigned blocks = blocks_for(fast ? (n + 3) / 4 : n);
    if (fast && n_in == 1) {
        launch(blocks, THREADS, s, k_unary_contig<T>, op, static_cast<const T *>(in[0]),
               static_cast<T *>(out), n);
    } else if (fast && n_in == 2) {
        launch(blocks, THREADS, s, k_binary_contig<T>, op, static_cast<const T *>(in[0]),
               static_cast<const T *>(in[1]), l->mode[0] == CK_CONTIGUOUS,
               l->mode[1] == CK_CONTIGUOUS, static_cast<T *>(out), n);
    } else {
        ew_args p = {};
        for (int j = 0; j < n_in; j++) p.in[j] = in[j];
        p.out = out;
        p.n = n;
        p.l = *l;
        if (compare)
            launch(blocks, THREADS, s, k_elementwise<T, uint8_t>, op, pred, p);
        else
            launch(blocks, THREADS, s, k_elementwise<T, T>, op, pred, p);
    }
    return cudaGetLastError();
}

/* Comparisons and logical ops of u8 inputs (comparison results, masks): only the u8-out half of
 * k_elementwise is instantiated for u8. */
cudaError_t truth_u8(cx_op_id op, const void *const *in, int n_in, void *out, int64_t n,
                     const ck_layout *l, cudaStream_t s) {
    bool compare = (op >= CX_OP_EQUAL && op <= CX_OP_GREATER_EQUAL) || is_logical(op);
    if (!compare) return cudaErrorInvalidValue;
    ew_args p = {};
    for (int j = 0; j < n_in && j < 3; j++) p.in[j] = in[j];
    p.out = out;
    p.n = n;
    p.l = *l;
    launch(blocks_for(n), THREADS, s, k_elementwise<uint8_t, uint8_t>, (int)op, CX_U8, p);
    return cudaGetLastError();
}

/* ---- cast and strided copy ---------------------------------------------------------------- */

template <typename F, typename T>
__global__ void k_cast(const F *__restrict__ x, T *__restrict__ y, int64_t n) {
    int64_t step = (int64_t)gridDim.x * blockDim.x;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += step)
        y[i] = from_f<T>(to_f(x[i]));
}

template <typename F>
cudaError_t cast_from(cx_dtype to, const void *x, void *y, int64_t n, cudaStream_t s) {
    const F *src = static_cast<const F *>(x);
    switch (to) {
    case CX_F32:
        launch(blocks_for(n), THREADS, s, k_cast<F, float>, src, static_cast<float *>(y), n);
        break;
    case CX_F16:
        launch(blocks_for(n), THREADS, s, k_cast<F, __half>, src, static_cast<__half *>(y), n);
        break;
    default:
        launch(blocks_for(n), THREADS, s, k_cast<F, __nv_bfloat16>, src,
               static_cast<__nv_bfloat16 *>(y), n);
        break;
    }
    return cudaGetLastError();
}

template <typename E>
__global__ void k_copy(const E *__restrict__ src, E *__restrict__ dst, ck_copy c, int64_t n) {
    int64_t step = (int64_t)gridDim.x * blockDim.x;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += step) {
        int64_t r = i, so = c.src_off, dof = c.dst_off;
        for (int d = c.rank - 1; d >= 0; d--) {
            int64_t idx = r % c.shape[d];
            r /= c.shape[d];
            so += idx * c.src_stride[d];
            dof += idx * c.dst_stride[d];
        }
        dst[dof] = src[so];
    }
}

/* ---- reductions ------------------------------------------------------------------------------ */

/* all and any fold truth values (0 or 1; NaN is non-zero) */
__device__ __forceinline__ float fold(int op, float acc, float x) {
    switch (op) {
    case CX_OP_SUM: return acc + x;
    case CX_OP_PRODUCT: return acc * x;
    case CX_OP_REDUCE_MAX: return acc != acc ? acc : max_nan(x, acc);
    case CX_OP_ALL: return acc != 0.0f && x != 0.0f ? 1.0f : 0.0f;
    case CX_OP_ANY: return acc != 0.0f || x != 0.0f ? 1.0f : 0.0f;
    default: return acc != acc ? acc : min_nan(x, acc);
    }
}

__device__ __forceinline__ float identity_of(int op) {
    switch (op) {
    case CX_OP_SUM: return -0.0f;
    case CX_OP_PRODUCT: return 1.0f;
    case CX_OP_REDUCE_MAX: return -INFINITY;
    case CX_OP_ALL: return 1.0f;
    case CX_OP_ANY: return 0.0f;
    default: return INFINITY;
    }
}

__device__ __forceinline__ int64_t kept_offset(const ck_reduce_plan &p, int64_t o) {
    int64_t off = 0;
    for (int d = p.n_kept - 1; d >= 0; d--) {
        off += (o % p.kept_shape[d]) * p.kept_stride[d];
        o /= p.kept_shape[d];
    }
    return off;
}

__device__ __forceinline__ int64_t red_offset(const ck_reduce_plan &p, int64_t r) {
    int64_t off = 0;
    for (int d = p.n_red - 1; d >= 0; d--) {
        off += (r % p.red_shape[d]) * p.red_stride[d];
        r /= p.red_shape[d];
    }
    return off;
}

/* Folds a value over the block; every thread gets the result. */
template <typename F> __device__ float block_fold(float v, F f, float *shared) {
    for (int o = 16; o > 0; o >>= 1) v = f(v, __shfl_xor_sync(0xffffffffu, v, o));
    int warp = threadIdx.x / 32, lane = threadIdx.x % 32, warps = blockDim.x / 32;
    __syncthreads(); /* shared may still be read by a previous fold */
    if (lane == 0) shared[warp] = v;
    __syncthreads();
    v = shared[0];
    for (int w = 1; w < warps; w++) v = f(v, shared[w]);
    return v;
}

/* One block per output element: for reductions whose innermost axis is reduced (contiguous). */
template <typename T, typename O>
__global__ void k_reduce_rows(int op, const T *__restrict__ x, O *__restrict__ y,
                              ck_reduce_plan p) {
    __shared__ float shared[32];
    for (int64_t o = blockIdx.x; o < p.n_out; o += gridDim.x) {
        const T *base = x + kept_offset(p, o);
        float acc = identity_of(op);
        if (p.n_red == 1 && p.red_stride[0] == 1) {
            for (int64_t r = threadIdx.x; r < p.n_reduced; r += blockDim.x)
                acc = fold(op, acc, to_f(base[r]));
        } else {
            for (int64_t r = threadIdx.x; r < p.n_reduced; r += blockDim.x)
                acc = fold(op, acc, to_f(base[red_offset(p, r)]));
        }
        acc = block_fold(
            acc, [op](float a, float b) { return fold(op, a, b); }, shared);
        if (threadIdx.x == 0) y[o] = from_f<O>(acc);
    }
}

/* One thread per output element: for reductions that keep the innermost axis, so that neighbour
 * threads read neighbour elements. */
template <typename T, typename O>
__global__ void k_reduce_columns(int op, const T *__restrict__ x, O *__restrict__ y,
                                 ck_reduce_plan p) {
    int64_t step = (int64_t)gridDim.x * blockDim.x;
    for (int64_t o = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; o < p.n_out; o += step) {
        const T *base = x + kept_offset(p, o);
        float acc = identity_of(op);
        for (int64_t r = 0; r < p.n_reduced; r++) acc = fold(op, acc, to_f(base[red_offset(p, r)]));
        y[o] = from_f<O>(acc);
    }
}

template <typename T, typename O>
cudaError_t reduce_to(cx_op_id op, const void *x, void *y, const ck_reduce_plan *p,
                      cudaStream_t s) {
    if (p->n_out == 0) return cudaSuccess;
    bool inner_reduced = p->n_red > 0 && p->red_stride[p->n_red - 1] == 1;
    if (inner_reduced || p->n_out < 1024) {
        unsigned blocks = p->n_out > 65536 ? 65536u : (unsigned)p->n_out;
        launch(blocks, THREADS, s, k_reduce_rows<T, O>, op, static_cast<const T *>(x),
               static_cast<O *>(y), *p);
    } else {
        launch(blocks_for(p->n_out), THREADS, s, k_reduce_columns<T, O>, op,
               static_cast<const T *>(x), static_cast<O *>(y), *p);
    }
    return cudaGetLastError();
}

/* all and any write u8; the others keep the type (u8 inputs: all and any only) */
template <typename T>
cudaError_t reduce_t(cx_op_id op, const void *x, void *y, const ck_reduce_plan *p, cudaStream_t s) {
    if (op == CX_OP_ALL || op == CX_OP_ANY) return reduce_to<T, uint8_t>(op, x, y, p, s);
    if constexpr (sizeof(T) == 1)
        return cudaErrorInvalidValue;
    else
        return reduce_to<T, T>(op, x, y, p, s);
}

/* ---- softmax and log_softmax ---------------------------------------------------------------- */

/* One block per contiguous row (inner == 1): the maximum, the sum of exp(x - max), then the
 * result, as the decomposition computes them (the row is re-read from L2). */
template <typename T>
__global__ void k_softmax_rows(bool log, const T *__restrict__ x, T *__restrict__ y, int64_t rows,
                               int64_t n) {
    __shared__ float shared[32];
    for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
        const T *xr = x + row * n;
        T *yr = y + row * n;
        float m = -INFINITY;
        for (int64_t j = threadIdx.x; j < n; j += blockDim.x) m = max_nan(to_f(xr[j]), m);
        m = block_fold(
            m, [](float a, float b) { return a != a ? a : max_nan(b, a); }, shared);
        float sum = 0.0f;
        for (int64_t j = threadIdx.x; j < n; j += blockDim.x) sum += expf(to_f(xr[j]) - m);
        sum = block_fold(
            sum, [](float a, float b) { return a + b; }, shared);
        if (log) {
            float ls = logf(sum);
            for (int64_t j = threadIdx.x; j < n; j += blockDim.x)
                yr[j] = from_f<T>((to_f(xr[j]) - m) - ls);
        } else {
            for (int64_t j = threadIdx.x; j < n; j += blockDim.x)
                yr[j] = from_f<T>(expf(to_f(xr[j]) - m) / sum);
        }
    }
}

/* One thread per (outer, inner) column when the axis is not the innermost: neighbour threads
 * read neighbour elements. */
template <typename T>
__global__ void k_softmax_columns(bool log, const T *__restrict__ x, T *__restrict__ y,
                                  int64_t outer, int64_t n, int64_t inner) {
    int64_t step = (int64_t)gridDim.x * blockDim.x;
    for (int64_t c = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; c < outer * inner; c += step) {
        int64_t base = (c / inner) * n * inner + c % inner;
        float m = -INFINITY, sum = 0.0f;
        for (int64_t j = 0; j < n; j++) m = max_nan(to_f(x[base + j * inner]), m);
        for (int64_t j = 0; j < n; j++) sum += expf(to_f(x[base + j * inner]) - m);
        float ls = logf(sum);
        for (int64_t j = 0; j < n; j++) {
            float v = to_f(x[base + j * inner]) - m;
            y[base + j * inner] = from_f<T>(log ? v - ls : expf(v) / sum);
        }
    }
}

template <typename T>
cudaError_t softmax_t(bool log, const void *x, void *y, int64_t outer, int64_t n, int64_t inner,
                      cudaStream_t s) {
    const T *xt = static_cast<const T *>(x);
    T *yt = static_cast<T *>(y);
    if (outer == 0 || n == 0 || inner == 0) return cudaSuccess;
    if (inner == 1) {
        int threads = n >= 4096 ? 1024 : n >= 1024 ? 512 : 128;
        unsigned blocks = outer > 65536 ? 65536u : (unsigned)outer;
        launch(blocks, threads, s, k_softmax_rows<T>, log, xt, yt, outer, n);
    } else {
        launch(blocks_for(outer * inner), THREADS, s, k_softmax_columns<T>, log, xt, yt, outer, n,
               inner);
    }
    return cudaGetLastError();
}

/* ---- layer_norm ------------------------------------------------------------------------------ */

__device__ __forceinline__ void param_offsets(const ck_norm_plan &p, int64_t j, int64_t *g,
                                              int64_t *b) {
    int64_t go = 0, bo = 0;
    for (int d = p.rank - 1; d >= 0; d--) {
        int64_t idx = j % p.shape[d];
        j /= p.shape[d];
        go += idx * p.gamma_stride[d];
        bo += idx * p.beta_stride[d];
    }
    *g = go;
    *b = bo;
}

/* One block per row: the mean, the biased variance of (x - mean), then
 * (x - mean) * rsqrt(variance + epsilon) * gamma + beta, as the decomposition does. */
template <typename T>
__global__ void k_layer_norm(const T *__restrict__ x, const T *__restrict__ gamma,
                             const T *__restrict__ beta, T *__restrict__ y, int64_t rows, int64_t n,
                             ck_norm_plan p, float eps) {
    __shared__ float shared[32];
    for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
        const T *xr = x + row * n;
        T *yr = y + row * n;
        float sum = 0.0f;
        for (int64_t j = threadIdx.x; j < n; j += blockDim.x) sum += to_f(xr[j]);
        float mean = block_fold(
                         sum, [](float a, float b) { return a + b; }, shared) /
                     (float)n;
        float sq = 0.0f;
        for (int64_t j = threadIdx.x; j < n; j += blockDim.x) {
            float d = to_f(xr[j]) - mean;
            sq += d * d;
        }
        float var = block_fold(
                        sq, [](float a, float b) { return a + b; }, shared) /
                    (float)n;
        float inv = 1.0f / sqrtf(var + eps);
        for (int64_t j = threadIdx.x; j < n; j += blockDim.x) {
            int64_t go, bo;
            param_offsets(p, j, &go, &bo);
            float r = (to_f(xr[j]) - mean) * inv;
            yr[j] = from_f<T>(r * to_f(gamma[go]) + to_f(beta[bo]));
        }
    }
}

/* ---- as_type between any two types ----------------------------------------------------------- */

template <typename F, typename T>
__global__ void k_cast_any(const F *__restrict__ x, T *__restrict__ y, int64_t n) {
    int64_t step = (int64_t)gridDim.x * blockDim.x;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += step)
        y[i] = store_as<T>(value_of(x[i]));
}

template <typename F>
cudaError_t cast_any_from(cx_dtype to, const void *x, void *y, int64_t n, cudaStream_t s) {
    const F *src = static_cast<const F *>(x);
    unsigned b = blocks_for(n);
    switch (to) {
    case CX_F32:
        launch(b, THREADS, s, k_cast_any<F, float>, src, static_cast<float *>(y), n);
        break;
    case CX_F64:
        launch(b, THREADS, s, k_cast_any<F, double>, src, static_cast<double *>(y), n);
        break;
    case CX_F16:
        launch(b, THREADS, s, k_cast_any<F, __half>, src, static_cast<__half *>(y), n);
        break;
    case CX_BF16:
        launch(b, THREADS, s, k_cast_any<F, __nv_bfloat16>, src, static_cast<__nv_bfloat16 *>(y),
               n);
        break;
    case CX_U8:
        launch(b, THREADS, s, k_cast_any<F, uint8_t>, src, static_cast<uint8_t *>(y), n);
        break;
    case CX_S32:
        launch(b, THREADS, s, k_cast_any<F, int32_t>, src, static_cast<int32_t *>(y), n);
        break;
    case CX_S64:
        launch(b, THREADS, s, k_cast_any<F, int64_t>, src, static_cast<int64_t *>(y), n);
        break;
    default: return cudaErrorInvalidValue;
    }
    return cudaGetLastError();
}

/* ---- creation ------------------------------------------------------------------------------- */

template <typename E> __global__ void k_fill(E *__restrict__ y, int64_t n, E v) {
    int64_t step = (int64_t)gridDim.x * blockDim.x;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += step) y[i] = v;
}

/* element i: its position along the axis, (i / inner) % len, as an integer in type T */
template <typename T>
__global__ void k_iota(T *__restrict__ y, int64_t n, int64_t len, int64_t inner) {
    int64_t step = (int64_t)gridDim.x * blockDim.x;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += step)
        y[i] = store_as<T>((int64_t)((inner == 1 ? i : i / inner) % len));
}

/* `one` where the row equals the column in the matrices of `square` elements, 0 elsewhere */
template <typename E>
__global__ void k_eye(E *__restrict__ y, int64_t n, int64_t cols, int64_t square, E one) {
    int64_t step = (int64_t)gridDim.x * blockDim.x;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += step) {
        int64_t e = i % square;
        y[i] = e / cols == e % cols ? one : (E)0;
    }
}

/* core/philox.h, word for word: cx_philox. */
struct philox4 {
    uint32_t v[4];
};

__device__ __forceinline__ philox4 philox(uint64_t key, uint64_t counter) {
    uint32_t c0 = (uint32_t)counter, c1 = (uint32_t)(counter >> 32), c2 = 0, c3 = 0;
    uint32_t k0 = (uint32_t)key, k1 = (uint32_t)(key >> 32);
    for (int r = 0; r < 10; r++) {
        uint64_t p0 = (uint64_t)0xD2511F53u * c0, p1 = (uint64_t)0xCD9E8D57u * c2;
        uint32_t n0 = (uint32_t)(p1 >> 32) ^ c1 ^ k0, n2 = (uint32_t)(p0 >> 32) ^ c3 ^ k1;
        c1 = (uint32_t)p1;
        c3 = (uint32_t)p0;
        c0 = n0;
        c2 = n2;
        k0 += 0x9E3779B9u;
        k1 += 0xBB67AE85u;
    }
    philox4 b = {{c0, c1, c2, c3}};
    return b;
}

/* Element w of Philox block b, as the cpu driver maps it (core/philox.h, cpu/create.c): f32, f16
 * and bf16 take 4 elements per block, f64 2. Uniform: u in [0, 1). Normal: Box-Muller. */
template <typename T> __device__ __forceinline__ double uniform01(const philox4 &b, int w) {
    if constexpr (sizeof(T) == 8) {
        uint64_t bits53 = ((uint64_t)b.v[2 * w] << 21) | (b.v[2 * w + 1] >> 11);
        return (double)bits53 * 0x1.0p-53;
    } else {
        return (double)((float)(b.v[w] >> 8) * 0x1.0p-24f);
    }
}

template <typename T> __device__ __forceinline__ double normal01(const philox4 &b, int w) {
    if constexpr (sizeof(T) == 8) {
        double u1 = (double)((((uint64_t)b.v[0] << 21) | (b.v[1] >> 11)) + 1) * 0x1.0p-53;
        double u2 = (double)(((uint64_t)b.v[2] << 21) | (b.v[3] >> 11)) * 0x1.0p-53;
        double r = sqrt(-2.0 * log(u1));
        double a = 6.283185307179586 * u2;
        return (w % 2) ? r * sin(a) : r * cos(a);
    } else {
        int p = w / 2;
        float u1 = (float)((b.v[2 * p] >> 8) + 1) * 0x1.0p-24f;
        float u2 = (float)(b.v[2 * p + 1] >> 8) * 0x1.0p-24f;
        /* log, sin and cos in double rounded to f32: the correctly rounded f32 values, which
         * the cpu's libm gives for all but about 1.5% of elements (glibc, 1 ulp apart there),
         * where CUDA's own f32 functions are up to 1-2 ulp off far more often; and a host
         * build (the emulator) computes the same values as the GPU */
        float r = sqrtf(-2.0f * (float)log((double)u1));
        float a = 6.283185307179586f * u2;
        return (w % 2) ? r * (float)sin((double)a) : r * (float)cos((double)a);
    }
}

/* One thread per Philox block. uniform: fma(max - min, u, min) rounded once into T and kept in
 * [lo, hi] when clamped; normal: fma(standard_deviation, z, mean) rounded once. */
template <typename T> __global__ void k_random(T *__restrict__ y, int64_t n, ck_random r) {
    const int per = sizeof(T) == 8 ? 2 : 4;
    int64_t blocks = (n + per - 1) / per;
    int64_t step = (int64_t)gridDim.x * blockDim.x;
    for (int64_t q = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; q < blocks; q += step) {
        philox4 b = philox(r.key, (uint64_t)q);
        for (int w = 0; w < per && q * per + w < n; w++) {
            T v;
            if (r.normal) {
                v = store_as<T>(fma(r.scale, normal01<T>(b, w), r.offset));
            } else {
                v = store_as<T>(fma(r.scale, uniform01<T>(b, w), r.offset));
                double back = value_of(v);
                if (r.clamp && !(back >= r.lo))
                    v = store_as<T>(r.lo);
                else if (r.clamp && back > r.hi)
                    v = store_as<T>(r.hi);
            }
            y[q * per + w] = v;
        }
    }
}

template <typename T> cudaError_t random_t(void *y, int64_t n, const ck_random *r, cudaStream_t s) {
    int64_t blocks = (n + (sizeof(T) == 8 ? 1 : 3)) / (sizeof(T) == 8 ? 2 : 4);
    launch(blocks_for(blocks), THREADS, s, k_random<T>, static_cast<T *>(y), n, *r);
    return cudaGetLastError();
}

/* ---- argmax and argmin --------------------------------------------------------------------------
 *
 * As the cpu driver picks (cpu/reduce.c): scanning in order, an element replaces the best so far
 * when it is greater (argmin: smaller), or equal and ties go high; NaN beats every number, and
 * among NaNs the first wins (ties low) or the last (ties high). The block form splits a row over
 * the threads, each scanning every blockDim-th element, then merges the candidates pairwise: a
 * NaN beats a number, the better value wins, equal values (or two NaNs) keep the lower position
 * (ties low) or the higher (ties high) -- as opencl's group form does. */

__device__ __forceinline__ bool arg_takes(float v, float best, bool max, bool high) {
    if (v != v) return best == best || high;
    if (best != best) return false;
    if (v == best) return high;
    return max ? v > best : v < best;
}

__device__ __forceinline__ bool arg_better(float c, int64_t ic, float a, int64_t ia, bool max,
                                           bool high) {
    bool tie = high ? ic > ia : ic < ia;
    if (c != c) return a != a ? tie : true;
    if (a != a) return false;
    if (c == a) return tie;
    return max ? c > a : c < a;
}

/* One thread per output, for short rows. */
template <typename T>
__global__ void k_arg_serial(const T *__restrict__ x, int64_t *__restrict__ y, int64_t outer,
                             int64_t n, int64_t inner, bool max, bool high) {
    int64_t step = (int64_t)gridDim.x * blockDim.x;
    for (int64_t g = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; g < outer * inner; g += step) {
        const T *row = x + (g / inner) * n * inner + g % inner;
        float best = to_f(row[0]);
        int64_t at = 0;
        for (int64_t j = 1; j < n; j++) {
            float v = to_f(row[j * inner]);
            if (arg_takes(v, best, max, high)) {
                best = v;
                at = j;
            }
        }
        y[g] = at;
    }
}

/* One block (THREADS threads) per output, for long rows. */
template <typename T>
__global__ void k_arg_block(const T *__restrict__ x, int64_t *__restrict__ y, int64_t outer,
                            int64_t n, int64_t inner, bool max, bool high) {
    __shared__ float bv[THREADS];
    __shared__ int64_t bi[THREADS];
    int l = threadIdx.x;
    for (int64_t g = blockIdx.x; g < outer * inner; g += gridDim.x) {
        const T *row = x + (g / inner) * n * inner + g % inner;
        float best = 0.0f;
        int64_t at = -1;
        for (int64_t j = l; j < n; j += blockDim.x) {
            float v = to_f(row[j * inner]);
            if (at < 0 || arg_takes(v, best, max, high)) {
                best = v;
                at = j;
            }
        }
        __syncthreads(); /* the previous output's merge is read */
        bv[l] = best;
        bi[l] = at;
        __syncthreads();
        for (int w = blockDim.x / 2; w > 0; w >>= 1) {
            if (l < w) {
                float a = bv[l], c = bv[l + w];
                int64_t ia = bi[l], ic = bi[l + w];
                if (ic >= 0 && (ia < 0 || arg_better(c, ic, a, ia, max, high))) {
                    bv[l] = c;
                    bi[l] = ic;
                }
            }
            __syncthreads();
        }
        if (l == 0) y[g] = bi[0];
    }
}

template <typename T>
cudaError_t argreduce_t(bool max, bool high, const void *x, int64_t *y, int64_t outer, int64_t n,
                        int64_t inner, cudaStream_t s) {
    const T *xt = static_cast<const T *>(x);
    int64_t n_out = outer * inner;
    if (n >= THREADS && (inner == 1 || n_out < 1024)) {
        unsigned blocks = n_out > 65536 ? 65536u : (unsigned)n_out;
        launch(blocks, THREADS, s, k_arg_block<T>, xt, y, outer, n, inner, max, high);
    } else {
        launch(blocks_for(n_out), THREADS, s, k_arg_serial<T>, xt, y, outer, n, inner, max, high);
    }
    return cudaGetLastError();
}

/* ---- take and gather --------------------------------------------------------------------------
 */

/* Sets *bad when an index lies outside its axis: entry i against dims[i % k]. */
__global__ void k_index_check(const int64_t *__restrict__ ix, int64_t n, ck_index_dims c,
                              int *bad) {
    int64_t step = (int64_t)gridDim.x * blockDim.x;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += step) {
        int64_t v = ix[i], dim = c.dim[c.k == 1 ? 0 : i % c.k];
        if (v < 0 || v >= dim) atomicOr(bad, 1);
    }
}

/* The input as {outer, dim, inner}, the output as {outer, count, inner}. */
template <typename E>
__global__ void k_take(const E *__restrict__ x, const int64_t *__restrict__ ix, E *__restrict__ y,
                       int64_t n, int64_t dim, int64_t count, int64_t inner) {
    int64_t step = (int64_t)gridDim.x * blockDim.x;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += step) {
        int64_t e = i % inner, r = i / inner;
        int64_t j = r % count, q = r / count;
        y[i] = x[(q * dim + ix[j]) * inner + e];
    }
}

/* take_along_axis: the input as {outer, dim, inner}, indices and output as {outer, count, inner};
 * each output element reads its own index. */
template <typename E>
__global__ void k_take_along(const E *__restrict__ x, const int64_t *__restrict__ ix,
                             E *__restrict__ y, int64_t n, int64_t dim, int64_t count,
                             int64_t inner) {
    int64_t step = (int64_t)gridDim.x * blockDim.x;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += step) {
        int64_t e = i % inner, q = i / inner / count;
        y[i] = x[(q * dim + ix[i]) * inner + e];
    }
}

/* Output row r (a block of `block` elements) reads the input at index row r over the indexed
 * axes, and through the other axes' strides within the block. */
template <typename E>
__global__ void k_gather(const E *__restrict__ x, const int64_t *__restrict__ ix, E *__restrict__ y,
                         int64_t n, ck_gather_plan g) {
    int64_t step = (int64_t)gridDim.x * blockDim.x;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += step) {
        int64_t r = i / g.block, e = i % g.block, off = 0;
        for (int j = 0; j < g.k; j++) off += ix[r * g.k + j] * g.index_stride[j];
        for (int d = g.rank - 1; d >= 0; d--) {
            off += (e % g.shape[d]) * g.stride[d];
            e /= g.shape[d];
        }
        y[i] = x[off];
    }
}

/* Runs kernel K<E> for the element size `size`: uint8_t, uint16_t, uint32_t or uint64_t. */
#define BY_SIZE(size, CALL)                                                                        \
    switch (size) {                                                                                \
    case 1: CALL(uint8_t); break;                                                                  \
    case 2: CALL(uint16_t); break;                                                                 \
    case 4: CALL(uint32_t); break;                                                                 \
    case 8: CALL(uint64_t); break;                                                                 \
    default: return cudaErrorInvalidValue;                                                         \
    }

/* Runs CALL(T) for the value type of t. */
#define BY_TYPE(t, CALL)                                                                           \
    switch (t) {                                                                                   \
    case CX_F32: CALL(float); break;                                                               \
    case CX_F64: CALL(double); break;                                                              \
    case CX_F16: CALL(__half); break;                                                              \
    case CX_BF16: CALL(__nv_bfloat16); break;                                                      \
    case CX_U8: CALL(uint8_t); break;                                                              \
    case CX_S32: CALL(int32_t); break;                                                             \
    case CX_S64: CALL(int64_t); break;                                                             \
    default: return cudaErrorInvalidValue;                                                         \
    }

} // namespace

/* ---- the C interface ------------------------------------------------------------------------- */

extern "C" cudaError_t ck_elementwise(cx_op_id op, cx_dtype t, cx_dtype pred, const void *const *in,
                                      int n_in, void *out, int64_t n, const ck_layout *l,
                                      cudaStream_t s) {
    if (n == 0) return cudaSuccess;
    switch (t) {
    case CX_F32: return elementwise_t<float>(op, pred, in, n_in, out, n, l, s);
    case CX_F16: return elementwise_t<__half>(op, pred, in, n_in, out, n, l, s);
    case CX_BF16: return elementwise_t<__nv_bfloat16>(op, pred, in, n_in, out, n, l, s);
    case CX_U8: return truth_u8(op, in, n_in, out, n, l, s);
    default: return cudaErrorInvalidValue;
    }
}

static size_t size_of(cx_dtype t) {
    switch (t) {
    case CX_U8: return 1;
    case CX_F16:
    case CX_BF16: return 2;
    case CX_F32:
    case CX_S32: return 4;
    default: return 8;
    }
}

static bool is_float3(cx_dtype t) {
    return t == CX_F32 || t == CX_F16 || t == CX_BF16;
}

extern "C" cudaError_t ck_cast(cx_dtype from, cx_dtype to, const void *x, void *y, int64_t n,
                               cudaStream_t s) {
    if (n == 0) return cudaSuccess;
    if (from == to)
        return cudaMemcpyAsync(y, x, (size_t)n * size_of(from), cudaMemcpyDeviceToDevice, s);
    /* between f32, f16 and bf16 through f32 registers; everything else through a double or an
     * int64_t */
    if (is_float3(from) && is_float3(to)) {
        switch (from) {
        case CX_F32: return cast_from<float>(to, x, y, n, s);
        case CX_F16: return cast_from<__half>(to, x, y, n, s);
        default: return cast_from<__nv_bfloat16>(to, x, y, n, s);
        }
    }
#define CAST_FROM(T) return cast_any_from<T>(to, x, y, n, s)
    BY_TYPE(from, CAST_FROM)
#undef CAST_FROM
}

extern "C" cudaError_t ck_copy_strided(size_t size, const void *src, void *dst, const ck_copy *c,
                                       cudaStream_t s) {
    int64_t n = 1;
    for (int d = 0; d < c->rank; d++) n *= c->shape[d];
    if (n == 0) return cudaSuccess;
    unsigned blocks = blocks_for(n);
    switch (size) {
    case 1:
        launch(blocks, THREADS, s, k_copy<uint8_t>, static_cast<const uint8_t *>(src),
               static_cast<uint8_t *>(dst), *c, n);
        break;
    case 2:
        launch(blocks, THREADS, s, k_copy<uint16_t>, static_cast<const uint16_t *>(src),
               static_cast<uint16_t *>(dst), *c, n);
        break;
    case 4:
        launch(blocks, THREADS, s, k_copy<uint32_t>, static_cast<const uint32_t *>(src),
               static_cast<uint32_t *>(dst), *c, n);
        break;
    case 8:
        launch(blocks, THREADS, s, k_copy<uint64_t>, static_cast<const uint64_t *>(src),
               static_cast<uint64_t *>(dst), *c, n);
        break;
    default: return cudaErrorInvalidValue;
    }
    return cudaGetLastError();
}

extern "C" cudaError_t ck_reduce(cx_op_id op, cx_dtype t, const void *x, void *y,
                                 const ck_reduce_plan *p, cudaStream_t s) {
    switch (t) {
    case CX_F32: return reduce_t<float>(op, x, y, p, s);
    case CX_F16: return reduce_t<__half>(op, x, y, p, s);
    case CX_BF16: return reduce_t<__nv_bfloat16>(op, x, y, p, s);
    case CX_U8: return reduce_t<uint8_t>(op, x, y, p, s);
    default: return cudaErrorInvalidValue;
    }
}

extern "C" cudaError_t ck_softmax(bool log, cx_dtype t, const void *x, void *y, int64_t outer,
                                  int64_t n, int64_t inner, cudaStream_t s) {
    switch (t) {
    case CX_F32: return softmax_t<float>(log, x, y, outer, n, inner, s);
    case CX_F16: return softmax_t<__half>(log, x, y, outer, n, inner, s);
    case CX_BF16: return softmax_t<__nv_bfloat16>(log, x, y, outer, n, inner, s);
    default: return cudaErrorInvalidValue;
    }
}

extern "C" cudaError_t ck_layer_norm(cx_dtype t, const void *x, const void *gamma, const void *beta,
                                     void *y, int64_t rows, int64_t n, const ck_norm_plan *p,
                                     float eps, cudaStream_t s) {
    if (rows == 0 || n == 0) return cudaSuccess;
    unsigned blocks = rows > 65536 ? 65536u : (unsigned)rows;
    int threads = n >= 4096 ? 1024 : n >= 1024 ? 512 : 128;
    switch (t) {
    case CX_F32:
        launch(blocks, threads, s, k_layer_norm<float>, static_cast<const float *>(x),
               static_cast<const float *>(gamma), static_cast<const float *>(beta),
               static_cast<float *>(y), rows, n, *p, eps);
        break;
    case CX_F16:
        launch(blocks, threads, s, k_layer_norm<__half>, static_cast<const __half *>(x),
               static_cast<const __half *>(gamma), static_cast<const __half *>(beta),
               static_cast<__half *>(y), rows, n, *p, eps);
        break;
    case CX_BF16:
        launch(blocks, threads, s, k_layer_norm<__nv_bfloat16>,
               static_cast<const __nv_bfloat16 *>(x), static_cast<const __nv_bfloat16 *>(gamma),
               static_cast<const __nv_bfloat16 *>(beta), static_cast<__nv_bfloat16 *>(y), rows, n,
               *p, eps);
        break;
    default: return cudaErrorInvalidValue;
    }
    return cudaGetLastError();
}

extern "C" cudaError_t ck_argreduce(bool max, bool high, cx_dtype t, const void *x, int64_t *y,
                                    int64_t outer, int64_t n, int64_t inner, cudaStream_t s) {
    if (outer * inner == 0 || n == 0) return cudaSuccess;
    switch (t) {
    case CX_F32: return argreduce_t<float>(max, high, x, y, outer, n, inner, s);
    case CX_F16: return argreduce_t<__half>(max, high, x, y, outer, n, inner, s);
    case CX_BF16: return argreduce_t<__nv_bfloat16>(max, high, x, y, outer, n, inner, s);
    default: return cudaErrorInvalidValue;
    }
}

extern "C" cudaError_t ck_fill(size_t size, void *y, int64_t n, uint64_t bits, cudaStream_t s) {
    if (n == 0) return cudaSuccess;
#define FILL(E) launch(blocks_for(n), THREADS, s, k_fill<E>, static_cast<E *>(y), n, (E)bits)
    BY_SIZE(size, FILL)
#undef FILL
    return cudaGetLastError();
}

extern "C" cudaError_t ck_iota(cx_dtype t, void *y, int64_t n, int64_t len, int64_t inner,
                               cudaStream_t s) {
    if (n == 0) return cudaSuccess;
#define IOTA(T) launch(blocks_for(n), THREADS, s, k_iota<T>, static_cast<T *>(y), n, len, inner)
    BY_TYPE(t, IOTA)
#undef IOTA
    return cudaGetLastError();
}

extern "C" cudaError_t ck_eye(size_t size, void *y, int64_t n, int64_t cols, int64_t square,
                              uint64_t one, cudaStream_t s) {
    if (n == 0) return cudaSuccess;
#define EYE(E)                                                                                     \
    launch(blocks_for(n), THREADS, s, k_eye<E>, static_cast<E *>(y), n, cols, square, (E)one)
    BY_SIZE(size, EYE)
#undef EYE
    return cudaGetLastError();
}

extern "C" cudaError_t ck_random_fill(cx_dtype t, void *y, int64_t n, const ck_random *r,
                                      cudaStream_t s) {
    if (n == 0) return cudaSuccess;
    switch (t) {
    case CX_F32: return random_t<float>(y, n, r, s);
    case CX_F64: return random_t<double>(y, n, r, s);
    case CX_F16: return random_t<__half>(y, n, r, s);
    case CX_BF16: return random_t<__nv_bfloat16>(y, n, r, s);
    default: return cudaErrorInvalidValue;
    }
}

extern "C" cudaError_t ck_index_check(const int64_t *ix, int64_t n, const ck_index_dims *c,
                                      int *bad, cudaStream_t s) {
    if (n == 0) return cudaSuccess;
    launch(blocks_for(n), THREADS, s, k_index_check, ix, n, *c, bad);
    return cudaGetLastError();
}

extern "C" cudaError_t ck_take(size_t size, const void *x, const int64_t *ix, void *y, int64_t n,
                               int64_t dim, int64_t count, int64_t inner, bool along,
                               cudaStream_t s) {
    if (n == 0) return cudaSuccess;
#define TAKE(E)                                                                                    \
    launch(blocks_for(n), THREADS, s, along ? k_take_along<E> : k_take<E>,                         \
           static_cast<const E *>(x), ix, static_cast<E *>(y), n, dim, count, inner)
    BY_SIZE(size, TAKE)
#undef TAKE
    return cudaGetLastError();
}

extern "C" cudaError_t ck_gather(size_t size, const void *x, const int64_t *ix, void *y, int64_t n,
                                 const ck_gather_plan *g, cudaStream_t s) {
    if (n == 0) return cudaSuccess;
#define GATHER(E)                                                                                  \
    launch(blocks_for(n), THREADS, s, k_gather<E>, static_cast<const E *>(x), ix,                  \
           static_cast<E *>(y), n, *g)
    BY_SIZE(size, GATHER)
#undef GATHER
    return cudaGetLastError();
}
