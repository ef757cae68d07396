/* The cuda driver's own kernels: elementwise, cast, strided copy, reductions, and the fused
 * softmax, log_softmax and layer_norm. matmul is cuBLAS (cuda_blas.c). See cuda_kernels.h.
 *
 * Each function has one kernel per value type with the op switch outside the element loop, so
 * the branch is taken once per thread and the loop is a plain one. Contiguous elementwise work
 * moves four elements per load (buffers come from cudaMallocAsync, 256-byte aligned). The
 * formulas are the cpu driver's (elementwise.c): max and min let NaN through, sigmoid never
 * overflows, rsqrt is 1 / sqrt, round is half away from zero. */
#ifdef CK_EMULATE
#include "emu/cke.h"
#else
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#endif
#include <math.h>

#include "cuda_kernels.h"

namespace {

const int THREADS = 256;

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

template <typename T> struct alignas(sizeof(T) * 4) vec4 { T v[4]; };

/* Launches kernel `k` on `grid` blocks of `block` threads on stream s. One place, so that a
 * build for the cpu emulator (CK_EMULATE, c_src/drivers/cuda/emu) can run the same kernels. */
template <typename... P, typename... A>
void launch(unsigned grid, unsigned block, cudaStream_t s, void (*k)(P...), A... a) {
#ifdef CK_EMULATE
    cke_launch(grid, block, s, reinterpret_cast<const void *>(k), [=] { k(a...); });
#else
    k<<<grid, block, 0, s>>>(a...);
#endif
}

/* Enough blocks to fill the GPU several times over; the loops stride over the grid. */
unsigned blocks_for(int64_t n) {
    int64_t b = (n + THREADS - 1) / THREADS;
    if (b > 65536) b = 65536;
    return b < 1 ? 1u : (unsigned)b;
}

__device__ __forceinline__ float sigmoid_f(float x) {
    if (x >= 0) return 1.0f / (1.0f + expf(-x));
    float e = expf(x);
    return e / (1.0f + e);
}

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

/* unary, binary, comparisons (O = uint8_t), select and clip. */
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
    bool compare = op >= CX_OP_EQUAL && op <= CX_OP_GREATER_EQUAL;
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

__device__ __forceinline__ float fold(int op, float acc, float x) {
    switch (op) {
    case CX_OP_SUM: return acc + x;
    case CX_OP_PRODUCT: return acc * x;
    case CX_OP_REDUCE_MAX: return acc != acc ? acc : max_nan(x, acc);
    default: return acc != acc ? acc : min_nan(x, acc);
    }
}

__device__ __forceinline__ float identity_of(int op) {
    switch (op) {
    case CX_OP_SUM: return -0.0f;
    case CX_OP_PRODUCT: return 1.0f;
    case CX_OP_REDUCE_MAX: return -INFINITY;
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
template <typename T>
__global__ void k_reduce_rows(int op, const T *__restrict__ x, T *__restrict__ y,
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
        if (threadIdx.x == 0) y[o] = from_f<T>(acc);
    }
}

/* One thread per output element: for reductions that keep the innermost axis, so that neighbour
 * threads read neighbour elements. */
template <typename T>
__global__ void k_reduce_columns(int op, const T *__restrict__ x, T *__restrict__ y,
                                 ck_reduce_plan p) {
    int64_t step = (int64_t)gridDim.x * blockDim.x;
    for (int64_t o = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; o < p.n_out; o += step) {
        const T *base = x + kept_offset(p, o);
        float acc = identity_of(op);
        for (int64_t r = 0; r < p.n_reduced; r++) acc = fold(op, acc, to_f(base[red_offset(p, r)]));
        y[o] = from_f<T>(acc);
    }
}

template <typename T>
cudaError_t reduce_t(cx_op_id op, const void *x, void *y, const ck_reduce_plan *p, cudaStream_t s) {
    if (p->n_out == 0) return cudaSuccess;
    bool inner_reduced = p->n_red > 0 && p->red_stride[p->n_red - 1] == 1;
    if (inner_reduced || p->n_out < 1024) {
        unsigned blocks = p->n_out > 65536 ? 65536u : (unsigned)p->n_out;
        launch(blocks, THREADS, s, k_reduce_rows<T>, op, static_cast<const T *>(x),
               static_cast<T *>(y), *p);
    } else {
        launch(blocks_for(p->n_out), THREADS, s, k_reduce_columns<T>, op, static_cast<const T *>(x),
               static_cast<T *>(y), *p);
    }
    return cudaGetLastError();
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
    default: return cudaErrorInvalidValue;
    }
}

extern "C" cudaError_t ck_cast(cx_dtype from, cx_dtype to, const void *x, void *y, int64_t n,
                               cudaStream_t s) {
    if (n == 0) return cudaSuccess;
    if (from == to)
        return cudaMemcpyAsync(y, x, (size_t)n * (from == CX_F32 ? 4 : 2), cudaMemcpyDeviceToDevice,
                               s);
    switch (from) {
    case CX_F32: return cast_from<float>(to, x, y, n, s);
    case CX_F16: return cast_from<__half>(to, x, y, n, s);
    case CX_BF16: return cast_from<__nv_bfloat16>(to, x, y, n, s);
    default: return cudaErrorInvalidValue;
    }
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
