/* The cpu emulator's device side: what kernels.cu needs when it is compiled by the host C++
 * compiler with CK_EMULATE instead of by nvcc (see emu_runtime.cc for the runtime side and
 * driver.mk for the build).
 *
 * A launch runs its blocks one after the other on the stream's thread; the threads of a block
 * are fibers (emu_runtime.cc) that run in turn until each reaches __syncthreads() or returns, so
 * block barriers, warp shuffles and static __shared__ arrays behave as the kernels expect. What
 * this cannot show: races between blocks, memory-model or timing effects, and anything of the
 * hardware's own arithmetic (the math is the host's libm, not the GPU's). */
#ifndef CX_CKE_H
#define CX_CKE_H

#ifndef CK_EMULATE
#error "cke.h is the cpu emulator's device side: build with CK_EMULATE"
#endif

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime_api.h>

#include <functional>
#include <stdint.h>

/* A block's static shared memory: one copy per stream thread, shared by the fibers of the block
 * that runs there (blocks run one at a time). */
#undef __shared__
#define __shared__ static thread_local

struct cke_index {
    unsigned x, y, z;
};

extern thread_local cke_index cke_thread_idx, cke_block_idx, cke_block_dim, cke_grid_dim;

#undef threadIdx
#undef blockIdx
#undef blockDim
#undef gridDim
#define threadIdx cke_thread_idx
#define blockIdx  cke_block_idx
#define blockDim  cke_block_dim
#define gridDim   cke_grid_dim

/* Enqueues `body` (one thread of the kernel) on stream s as a grid of `grid` x `block`. An
 * invalid configuration sets the launch error cudaGetLastError() returns, as a real launch does.
 * `kernel` identifies the kernel: one that never reached a barrier in its first launch runs its
 * threads as plain calls afterwards, without fibers. */
void cke_launch(unsigned grid, unsigned block, cudaStream_t s, const void *kernel,
                std::function<void()> body);

/* Block barrier: the calling fiber waits until every thread of its block has reached one. */
void cke_syncthreads();
#define __syncthreads() cke_syncthreads()

/* Exchanges values between the lanes of a warp (every thread of the block must take part, as in
 * the kernels' block folds). */
float cke_shfl_xor(unsigned mask, float v, int lane_mask);
#define __shfl_xor_sync(mask, v, o) cke_shfl_xor((mask), (v), (o))

/* Atomics: the threads of a block run one at a time and blocks one after the other, so plain
 * read-modify-writes are atomic here. Each returns the old value, as CUDA's do. */
template <typename T> inline T atomicAdd(T *p, T v) {
    T old = *p;
    *p = old + v;
    return old;
}
template <typename T> inline T atomicOr(T *p, T v) {
    T old = *p;
    *p = old | v;
    return old;
}
template <typename T> inline T atomicMin(T *p, T v) {
    T old = *p;
    *p = v < old ? v : old;
    return old;
}
template <typename T> inline T atomicMax(T *p, T v) {
    T old = *p;
    *p = v > old ? v : old;
    return old;
}

#endif
