/* What every .cu file of the cuda driver starts from (C++ only): the CUDA headers, or the cpu
 * emulator's device side under CK_EMULATE (emu/cke.h), and the one way kernels are launched. */
#ifndef CX_CK_LAUNCH_H
#define CX_CK_LAUNCH_H

#ifdef CK_EMULATE
#include "emu/cke.h"
#else
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#endif
#include <stdint.h>

namespace {

const int THREADS = 256;

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

/* Enough blocks to fill the GPU several times over; the kernels' loops stride over the grid. */
inline unsigned blocks_for(int64_t n) {
    int64_t b = (n + THREADS - 1) / THREADS;
    if (b > 65536) b = 65536;
    return b < 1 ? 1u : (unsigned)b;
}

} // namespace

#endif
