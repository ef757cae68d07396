/* conv2d's im2col (kernels_conv.h): one thread per element of the scratch matrices, in the
 * order they are stored, so that the writes are coalesced; the reads walk the input along its
 * innermost axis too (ow for nchw, ci for nhwc). The copy moves bits: f16 and bf16 share the
 * 2-byte kernel, f32 has the 4-byte one, and a zero of either width is +0.
 *
 * Indices: 32-bit while the chunk has fewer than 2^31 elements (the usual case: cuda_conv.c
 * cuts the batch into chunks of at most 256 MiB), so that the six divisions per element are
 * 32-bit ones; 64-bit otherwise. Input positions are always computed in 64 bits (padding may be
 * as large as 2^48). */
#include "ck_launch.h"
#include <stdint.h>

#include "kernels_conv.h"

namespace {

/* T: the element (uint16_t or uint32_t); I: the index type (uint32_t or int64_t). */
template <typename T, typename I>
__global__ void k_im2col_nchw(ck_im2col_geom g, const T *__restrict__ x, T *__restrict__ cols,
                              I total) {
    const I ow_n = (I)g.ow, oh_n = (I)g.oh, kw_n = (I)g.kw, kh_n = (I)g.kh, c_n = (I)g.c;
    I step = (I)gridDim.x * blockDim.x;
    for (I i = (I)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += step) {
        I r = i;
        I ow = r % ow_n;
        r /= ow_n;
        I oh = r % oh_n;
        r /= oh_n;
        I kj = r % kw_n;
        r /= kw_n;
        I ki = r % kh_n;
        r /= kh_n;
        I c = r % c_n;
        I n = r / c_n;
        int64_t ih = (int64_t)oh * g.s0 - g.lo0 + (int64_t)ki * g.d0;
        int64_t iw = (int64_t)ow * g.s1 - g.lo1 + (int64_t)kj * g.d1;
        T v = 0;
        if (ih >= 0 && ih < g.h && iw >= 0 && iw < g.w)
            v = x[(((int64_t)n * g.c + (int64_t)c) * g.h + ih) * g.w + iw];
        cols[i] = v;
    }
}

template <typename T, typename I>
__global__ void k_im2col_nhwc(ck_im2col_geom g, const T *__restrict__ x, T *__restrict__ cols,
                              I total) {
    const I cg_n = (I)g.cg, kw_n = (I)g.kw, kh_n = (I)g.kh, ow_n = (I)g.ow, oh_n = (I)g.oh,
            nb_n = (I)g.nb;
    I step = (I)gridDim.x * blockDim.x;
    for (I i = (I)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += step) {
        I r = i;
        I ci = r % cg_n;
        r /= cg_n;
        I kj = r % kw_n;
        r /= kw_n;
        I ki = r % kh_n;
        r /= kh_n;
        I ow = r % ow_n;
        r /= ow_n;
        I oh = r % oh_n;
        r /= oh_n;
        I n = r % nb_n;
        I grp = r / nb_n;
        int64_t ih = (int64_t)oh * g.s0 - g.lo0 + (int64_t)ki * g.d0;
        int64_t iw = (int64_t)ow * g.s1 - g.lo1 + (int64_t)kj * g.d1;
        T v = 0;
        if (ih >= 0 && ih < g.h && iw >= 0 && iw < g.w)
            v = x[(((int64_t)n * g.h + ih) * g.w + iw) * g.c + (int64_t)grp * g.cg + (int64_t)ci];
        cols[i] = v;
    }
}

template <typename T, typename I>
void im2col_as(const ck_im2col_geom &g, const void *x, void *cols, int64_t total, cudaStream_t s) {
    if (g.nhwc)
        launch(blocks_for(total), THREADS, s, k_im2col_nhwc<T, I>, g, (const T *)x, (T *)cols,
               (I)total);
    else
        launch(blocks_for(total), THREADS, s, k_im2col_nchw<T, I>, g, (const T *)x, (T *)cols,
               (I)total);
}

template <typename T>
void im2col_of(const ck_im2col_geom &g, const void *x, void *cols, int64_t total, cudaStream_t s) {
    /* i + the grid's stride stays below 2^32: no wrap-around in the 32-bit loop */
    if (total <= INT32_MAX)
        im2col_as<T, uint32_t>(g, x, cols, total, s);
    else
        im2col_as<T, int64_t>(g, x, cols, total, s);
}

} // namespace

extern "C" cudaError_t ck_im2col(size_t size, const void *x, void *cols, const ck_im2col_geom *g,
                                 cudaStream_t stream) {
    int64_t total = g->nb * g->c * g->kh * g->kw * g->oh * g->ow;
    if (total <= 0) return cudaSuccess;
    if (size == 2)
        im2col_of<uint16_t>(*g, x, cols, total, stream);
    else if (size == 4)
        im2col_of<uint32_t>(*g, x, cols, total, stream);
    else
        return cudaErrorInvalidValue;
    return cudaGetLastError();
}
