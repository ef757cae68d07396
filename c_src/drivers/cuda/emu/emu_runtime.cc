/* The cpu emulator's runtime side: the CUDA runtime and cuBLAS calls the cuda driver makes,
 * carried out on the cpu, so that the driver's own code -- cuda_device.c, cuda_driver.c,
 * cuda_blas.c and the kernels of kernels.cu, compiled with CK_EMULATE -- runs and is tested on a
 * machine without a GPU (`make test-cuda-emu`). Linked in place of libcudart and libcublas; the
 * headers are the toolkit's own, so every type and constant is the real one.
 *
 * What is emulated, and how faithfully:
 *   - Streams are queues run by a thread of their own: kernels, copies, memsets, frees and GEMMs
 *     run after the call that enqueued them returned, in order, as on a GPU. A copy from
 *     pageable host memory takes its source at once (as cudaMemcpyAsync stages it); a copy into
 *     pageable host memory waits for the stream, into pinned memory (cudaMallocHost) it does not.
 *     Stream callbacks run on the stream's thread with the stream's status.
 *   - Device memory is host memory from malloc, filled with 0xff bytes (NaN as f32/f16/bf16) as
 *     a GPU pool hands back old contents, so that a kernel reading what it never wrote shows;
 *     under AddressSanitizer an out-of-bounds access by a kernel is reported like any other.
 *     cudaFreeAsync is stream-ordered. Allocation beyond CKE_MEMORY bytes (default 1 GiB) fails
 *     with cudaErrorMemoryAllocation, which exercises the out-of-memory path.
 *   - CKE_FAIL_LAUNCH=N makes the Nth kernel launch fault with cudaErrorIllegalAddress, a sticky
 *     error: it surfaces at the next synchronisation, callbacks get it, and every later call
 *     returns it -- the device-lost path. CKE_DEVICES=N (default 1) sets the device count.
 *   - cuBLAS GEMMs are plain loops accumulating in f32, as CUBLAS_COMPUTE_32F does.
 * Not emulated: timing, concurrency between blocks, the GPU's arithmetic (the host libm's
 * results, not the GPU's), TF32 or tensor-core rounding. */
#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <sys/mman.h>
#include <ucontext.h>

/* Under AddressSanitizer the fibers below announce their switches to it */
#if defined(__SANITIZE_ADDRESS__)
#define CKE_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define CKE_ASAN 1
#endif
#endif
#ifdef CKE_ASAN
#include <sanitizer/common_interface_defs.h>
#endif

#include <atomic>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "cke.h"

thread_local cke_index cke_thread_idx, cke_block_idx, cke_block_dim, cke_grid_dim;

namespace {

/* ---- configuration ----------------------------------------------------------------------------
 */

long long env_ll(const char *name, long long dflt) {
    const char *v = getenv(name);
    return v && *v ? strtoll(v, nullptr, 0) : dflt;
}

size_t memory_limit() {
    static size_t limit = (size_t)env_ll("CKE_MEMORY", 1LL << 30);
    return limit;
}

/* ---- errors -----------------------------------------------------------------------------------
 */

std::atomic<int> sticky{cudaSuccess}; /* the context's fatal error, once there is one */
thread_local cudaError_t last_error = cudaSuccess;

cudaError_t sticky_error() {
    return (cudaError_t)sticky.load();
}

/* What every call returns: the sticky error, else `e`; an error is also the last error. */
cudaError_t ret(cudaError_t e) {
    if (sticky_error() != cudaSuccess) e = sticky_error();
    if (e != cudaSuccess) last_error = e;
    return e;
}

/* ---- memory -----------------------------------------------------------------------------------
 */

/* Never destroyed: a lost device's memory is not freed (cuda_mem_free stops), and a real context
 * gives it back only when the process ends; the registry keeps it reachable until then. */
std::mutex mem_lock;
std::map<void *, size_t> &device_blocks = *new std::map<void *, size_t>;
std::map<const char *, size_t> &pinned_blocks = *new std::map<const char *, size_t>;
size_t device_used;

bool is_pinned(const void *p) {
    const char *c = static_cast<const char *>(p);
    std::lock_guard<std::mutex> g(mem_lock);
    auto it = pinned_blocks.upper_bound(c);
    if (it == pinned_blocks.begin()) return false;
    --it;
    return c < it->first + it->second;
}

void device_free_now(void *p) {
    std::lock_guard<std::mutex> g(mem_lock);
    auto it = device_blocks.find(p);
    if (it == device_blocks.end()) {
        fprintf(stderr, "cuda emulator: cudaFreeAsync of %p, which is not device memory\n", p);
        abort();
    }
    device_used -= it->second;
    device_blocks.erase(it);
    free(p);
}

/* ---- fibers: the threads of one block ---------------------------------------------------------
 * Each thread of a block that waits at barriers is a fiber on a stack of its own; the stream's
 * thread switches to each in turn until it reaches a barrier or ends. A reduction switches twice
 * per thread for every warp shuffle (cke_shfl_xor), so the switch is what such a launch costs.
 * On x86-64 it is cke_switch below: the callee-saved registers and the SSE and x87 control words
 * pushed on the stack, the stack pointer swapped, the same popped. glibc's swapcontext also saves
 * and restores the signal mask, a system call each way, and AddressSanitizer's interceptor of it
 * clears the shadow of the whole 256 KiB stack it switches to; on an Intel Xeon (Cascade Lake, 2
 * cores) they made test_cuda_load take 25 s plain and 317 s under ASan, three quarters of it in
 * the switches. Elsewhere (or built with -DCKE_UCONTEXT) the fibers are ucontext's, as before.
 * Under ASan each switch is announced (__sanitizer_start_switch_fiber /
 * __sanitizer_finish_switch_fiber), so that it knows which stack a fiber runs on. */

const size_t FIBER_STACK = 256 * 1024;
const unsigned MAX_BLOCK = 1024;

#if defined(__x86_64__) && !defined(CKE_UCONTEXT)
/* A fiber's saved state is its stack pointer; what cke_switch pushed lies above it. */
struct FiberCtx {
    void *sp;
};

} // namespace

extern "C" void cke_switch(void **save_sp, void *to_sp) __attribute__((visibility("hidden")));
asm(".text\n"
    ".globl cke_switch\n"
    ".hidden cke_switch\n"
    ".type cke_switch, @function\n"
    "cke_switch:\n"
    "    pushq %rbp\n"
    "    pushq %rbx\n"
    "    pushq %r12\n"
    "    pushq %r13\n"
    "    pushq %r14\n"
    "    pushq %r15\n"
    "    subq $8, %rsp\n"
    "    stmxcsr (%rsp)\n"
    "    fnstcw 4(%rsp)\n"
    "    movq %rsp, (%rdi)\n"
    "    movq %rsi, %rsp\n"
    "    ldmxcsr (%rsp)\n"
    "    fldcw 4(%rsp)\n"
    "    addq $8, %rsp\n"
    "    popq %r15\n"
    "    popq %r14\n"
    "    popq %r13\n"
    "    popq %r12\n"
    "    popq %rbx\n"
    "    popq %rbp\n"
    "    ret\n"
    ".size cke_switch, .-cke_switch\n");

namespace {

/* A stack that cke_switch, switching to it, leaves at the start of entry() with the stack aligned
 * as after a call (rsp + 8 a multiple of 16), the control words the current ones. entry never
 * returns. */
void ctx_init(FiberCtx &c, char *stack, size_t size, void (*entry)()) {
    void **sp =
        reinterpret_cast<void **>((reinterpret_cast<uintptr_t>(stack) + size) & ~(uintptr_t)15);
    *--sp = nullptr;                             /* entry's return address: none */
    *--sp = reinterpret_cast<void *>(entry);     /* where cke_switch's ret goes */
    for (int k = 0; k < 6; k++) *--sp = nullptr; /* rbp, rbx, r12 - r15 */
    --sp;
    asm volatile("stmxcsr %0" : "=m"(*reinterpret_cast<uint32_t *>(sp)));
    asm volatile("fnstcw %0" : "=m"(*(reinterpret_cast<uint16_t *>(sp) + 2)));
    c.sp = sp;
}

void ctx_switch(FiberCtx &from, FiberCtx &to) {
    cke_switch(&from.sp, to.sp);
}
#else
struct FiberCtx {
    ucontext_t uc;
};

/* Apart, so that getcontext (which returns twice) leaves the caller's locals alone. */
__attribute__((noinline)) void ctx_init(FiberCtx &c, char *stack, size_t size, void (*entry)()) {
    getcontext(&c.uc);
    c.uc.uc_stack.ss_sp = stack;
    c.uc.uc_stack.ss_size = size;
    c.uc.uc_link = nullptr;
    makecontext(&c.uc, entry, 0);
}

void ctx_switch(FiberCtx &from, FiberCtx &to) {
    swapcontext(&from.uc, &to.uc);
}
#endif

struct Fiber {
    FiberCtx ctx;
    char *stack;
    bool done;
};

/* One per stream thread: the block now running there. */
struct BlockRun {
    FiberCtx sched;
    std::deque<Fiber> fibers; /* never moved: a parked ucontext points into itself */
    unsigned current = 0;
    bool direct = false; /* threads run as plain calls: the kernel never waits at a barrier */
    bool barrier_seen = false;
    const std::function<void()> *body = nullptr;
    float lanes[MAX_BLOCK];
#ifdef CKE_ASAN
    const void *sched_bottom = nullptr; /* the stream thread's stack, as ASan gave it */
    size_t sched_size = 0;
#endif
};

thread_local BlockRun block_run;

/* The stream thread's scheduler runs fiber f until it waits or ends. */
void enter_fiber(BlockRun &b, Fiber &f) {
#ifdef CKE_ASAN
    void *fake = nullptr;
    __sanitizer_start_switch_fiber(&fake, f.stack, FIBER_STACK);
#endif
    ctx_switch(b.sched, f.ctx);
#ifdef CKE_ASAN
    __sanitizer_finish_switch_fiber(fake, nullptr, nullptr);
#endif
}

/* The running fiber goes back to the scheduler: to wait at a barrier, or having run its thread */
void leave_fiber(BlockRun &b) {
    Fiber &f = b.fibers[b.current];
#ifdef CKE_ASAN
    void *fake = nullptr;
    __sanitizer_start_switch_fiber(&fake, b.sched_bottom, b.sched_size);
#endif
    ctx_switch(f.ctx, b.sched);
#ifdef CKE_ASAN
    __sanitizer_finish_switch_fiber(fake, &b.sched_bottom, &b.sched_size);
#endif
}

/* A fiber runs one thread of a block each time the scheduler resumes it after it is done, for
 * as long as the stream's thread lives: its frames all return, so that under ASan no poisoned
 * stack is left behind for the next block's frames to land on, and nothing is set up again. */
void fiber_main() {
    BlockRun &b = block_run;
#ifdef CKE_ASAN
    __sanitizer_finish_switch_fiber(nullptr, &b.sched_bottom, &b.sched_size);
#endif
    for (;;) {
        (*b.body)();
        b.fibers[b.current].done = true;
        leave_fiber(b);
    }
}

void run_block_fibers(unsigned n, const std::function<void()> &body) {
    BlockRun &b = block_run;
    if (b.fibers.size() < n) {
        size_t old = b.fibers.size();
        b.fibers.resize(n);
        for (size_t k = old; k < n; k++) {
            void *s = mmap(nullptr, FIBER_STACK, PROT_READ | PROT_WRITE,
                           MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
            if (s == MAP_FAILED) {
                perror("cuda emulator: fiber stack");
                abort();
            }
            b.fibers[k].stack = static_cast<char *>(s);
            ctx_init(b.fibers[k].ctx, b.fibers[k].stack, FIBER_STACK, fiber_main);
        }
    }
    b.body = &body;
    for (unsigned t = 0; t < n; t++) b.fibers[t].done = false;
    unsigned left = n;
    while (left) {
        unsigned waiting = 0;
        for (unsigned t = 0; t < n; t++) {
            Fiber &f = b.fibers[t];
            if (f.done) continue;
            b.current = t;
            cke_thread_idx = {t, 0, 0};
            enter_fiber(b, f);
            if (f.done)
                left--;
            else
                waiting++;
        }
        if (waiting && waiting != left) {
            /* CUDA leaves a barrier that some threads skip undefined; the kernels never do it */
            fprintf(stderr, "cuda emulator: a block's threads diverged at __syncthreads\n");
            abort();
        }
    }
}

/* Kernels that never reached a barrier in their first launch run as plain calls afterwards. */
std::mutex kernel_lock;
std::map<const void *, bool> kernel_barriers;

void run_grid(unsigned grid, unsigned block, const void *key, const std::function<void()> &body) {
    bool known, barriers = true;
    {
        std::lock_guard<std::mutex> g(kernel_lock);
        auto it = kernel_barriers.find(key);
        known = it != kernel_barriers.end();
        if (known) barriers = it->second;
    }
    BlockRun &b = block_run;
    cke_grid_dim = {grid, 1, 1};
    cke_block_dim = {block, 1, 1};
    b.barrier_seen = false;
    b.direct = !barriers;
    for (unsigned g = 0; g < grid; g++) {
        cke_block_idx = {g, 0, 0};
        if (b.direct) {
            for (unsigned t = 0; t < block; t++) {
                cke_thread_idx = {t, 0, 0};
                body();
            }
        } else {
            run_block_fibers(block, body);
        }
    }
    if (!known) {
        std::lock_guard<std::mutex> g(kernel_lock);
        kernel_barriers[key] = b.barrier_seen;
    }
    b.direct = false;
}

} // namespace

void cke_syncthreads() {
    BlockRun &b = block_run;
    if (b.direct) {
        fprintf(stderr, "cuda emulator: a kernel reached __syncthreads only in a later launch\n");
        abort();
    }
    b.barrier_seen = true;
    leave_fiber(b);
}

float cke_shfl_xor(unsigned mask, float v, int lane_mask) {
    (void)mask;
    BlockRun &b = block_run;
    unsigned me = cke_thread_idx.x;
    b.lanes[me] = v;
    cke_syncthreads();
    unsigned other = me ^ (unsigned)lane_mask;
    float r = other < cke_block_dim.x ? b.lanes[other] : v;
    cke_syncthreads(); /* nobody overwrites lanes before every lane has read */
    cke_thread_idx = {me, 0, 0};
    return r;
}

/* ---- streams ----------------------------------------------------------------------------------
 */

struct CUstream_st {
    std::mutex m;
    std::condition_variable work, idle;
    std::deque<std::function<void()>> queue;
    bool busy = false;
};

namespace {

void stream_main(CUstream_st *s) {
    std::unique_lock<std::mutex> g(s->m);
    for (;;) {
        s->work.wait(g, [s] { return !s->queue.empty(); });
        std::function<void()> op = std::move(s->queue.front());
        s->queue.pop_front();
        s->busy = true;
        g.unlock();
        op();
        g.lock();
        s->busy = false;
        if (s->queue.empty()) s->idle.notify_all();
    }
}

CUstream_st *new_stream() {
    CUstream_st *s = new CUstream_st; /* lives as long as the process, as the driver's do */
    std::thread(stream_main, s).detach();
    return s;
}

CUstream_st *stream_of(cudaStream_t s) {
    static CUstream_st *legacy = new_stream();
    return s ? s : legacy;
}

void enqueue(cudaStream_t stream, std::function<void()> op) {
    CUstream_st *s = stream_of(stream);
    std::lock_guard<std::mutex> g(s->m);
    s->queue.push_back(std::move(op));
    s->work.notify_one();
}

void drain(cudaStream_t stream) {
    CUstream_st *s = stream_of(stream);
    std::unique_lock<std::mutex> g(s->m);
    s->idle.wait(g, [s] { return s->queue.empty() && !s->busy; });
}

/* Work enqueued before a fault does not run once the context has one. */
void enqueue_work(cudaStream_t stream, std::function<void()> op) {
    enqueue(stream, [op = std::move(op)] {
        if (sticky_error() == cudaSuccess) op();
    });
}

std::atomic<long long> launches{0};

} // namespace

void cke_launch(unsigned grid, unsigned block, cudaStream_t s, const void *key,
                std::function<void()> body) {
    if (sticky_error() != cudaSuccess) {
        last_error = sticky_error();
        return;
    }
    if (grid == 0 || block == 0 || block > MAX_BLOCK) {
        last_error = cudaErrorInvalidConfiguration;
        return;
    }
    long long nth = ++launches;
    if (nth == env_ll("CKE_FAIL_LAUNCH", 0)) {
        enqueue(s, [] {
            int none = cudaSuccess;
            sticky.compare_exchange_strong(none, cudaErrorIllegalAddress);
        });
        return;
    }
    enqueue_work(s,
                 [grid, block, key, body = std::move(body)] { run_grid(grid, block, key, body); });
}

/* ---- the runtime API --------------------------------------------------------------------------
 */

extern "C" {

cudaError_t cudaGetDeviceCount(int *count) {
    int n = (int)env_ll("CKE_DEVICES", 1);
    *count = n > 0 ? n : 0;
    return ret(n > 0 ? cudaSuccess : cudaErrorNoDevice);
}

cudaError_t cudaSetDevice(int device) {
    int n = 0;
    cudaGetDeviceCount(&n);
    return ret(device >= 0 && device < n ? cudaSuccess : cudaErrorInvalidDevice);
}

cudaError_t cudaGetDeviceProperties(struct cudaDeviceProp *p, int device) {
    memset(p, 0, sizeof *p);
    snprintf(p->name, sizeof p->name, "Cascade CUDA emulator %d (cpu)", device);
    p->major = 9;
    p->minor = 0;
    p->totalGlobalMem = memory_limit();
    p->multiProcessorCount = 1;
    p->warpSize = 32;
    p->maxThreadsPerBlock = (int)MAX_BLOCK;
    return ret(cudaSuccess);
}

cudaError_t cudaStreamCreateWithFlags(cudaStream_t *s, unsigned int flags) {
    (void)flags;
    *s = new_stream();
    return ret(cudaSuccess);
}

cudaError_t cudaStreamSynchronize(cudaStream_t s) {
    drain(s);
    return ret(cudaSuccess);
}

cudaError_t cudaStreamAddCallback(cudaStream_t stream, cudaStreamCallback_t cb, void *data,
                                  unsigned int flags) {
    (void)flags;
    if (sticky_error() != cudaSuccess) return ret(cudaSuccess);
    enqueue(stream, [stream, cb, data] { cb(stream, sticky_error(), data); });
    return cudaSuccess;
}

cudaError_t cudaDeviceGetDefaultMemPool(cudaMemPool_t *pool, int device) {
    static int token;
    (void)device;
    *pool = reinterpret_cast<cudaMemPool_t>(&token);
    return ret(cudaSuccess);
}

cudaError_t cudaMemPoolSetAttribute(cudaMemPool_t pool, enum cudaMemPoolAttr attr, void *value) {
    (void)pool, (void)attr, (void)value;
    return ret(cudaSuccess);
}

cudaError_t cudaMemPoolTrimTo(cudaMemPool_t pool, size_t keep) {
    (void)pool, (void)keep;
    return ret(cudaSuccess);
}

cudaError_t cudaMallocAsync(void **p, size_t bytes, cudaStream_t s) {
    (void)s;
    *p = nullptr;
    if (sticky_error() != cudaSuccess) return ret(cudaSuccess);
    std::lock_guard<std::mutex> g(mem_lock);
    if (bytes > memory_limit() - device_used) return ret(cudaErrorMemoryAllocation);
    void *m = malloc(bytes ? bytes : 1);
    if (!m) return ret(cudaErrorMemoryAllocation);
    memset(m, 0xff, bytes);
    device_blocks[m] = bytes;
    device_used += bytes;
    *p = m;
    return cudaSuccess;
}

cudaError_t cudaFreeAsync(void *p, cudaStream_t s) {
    if (!p) return ret(cudaSuccess);
    /* runs even after a fault: the driver no longer frees then, but a free already queued does */
    enqueue(s, [p] { device_free_now(p); });
    return ret(cudaSuccess);
}

cudaError_t cudaMemGetInfo(size_t *free_b, size_t *total_b) {
    std::lock_guard<std::mutex> g(mem_lock);
    *total_b = memory_limit();
    *free_b = memory_limit() - device_used;
    return ret(cudaSuccess);
}

cudaError_t cudaMallocHost(void **p, size_t bytes) {
    *p = malloc(bytes ? bytes : 1);
    if (!*p) return ret(cudaErrorMemoryAllocation);
    std::lock_guard<std::mutex> g(mem_lock);
    pinned_blocks[static_cast<const char *>(*p)] = bytes;
    return ret(cudaSuccess);
}

cudaError_t cudaFreeHost(void *p) {
    {
        std::lock_guard<std::mutex> g(mem_lock);
        pinned_blocks.erase(static_cast<const char *>(p));
    }
    free(p);
    return ret(cudaSuccess);
}

cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t bytes, enum cudaMemcpyKind kind,
                            cudaStream_t s) {
    if (sticky_error() != cudaSuccess) return ret(cudaSuccess);
    if (bytes == 0) return cudaSuccess;
    if (kind == cudaMemcpyHostToDevice) {
        /* the source is staged before the call returns */
        std::shared_ptr<std::vector<char>> staged =
            std::make_shared<std::vector<char>>((const char *)src, (const char *)src + bytes);
        enqueue_work(s, [dst, staged] { memcpy(dst, staged->data(), staged->size()); });
        return cudaSuccess;
    }
    enqueue_work(s, [dst, src, bytes] { memcpy(dst, src, bytes); });
    if (kind == cudaMemcpyDeviceToHost && !is_pinned(dst)) {
        drain(s); /* into pageable memory the call returns when the copy is done */
        return ret(cudaSuccess);
    }
    return cudaSuccess;
}

cudaError_t cudaMemsetAsync(void *p, int value, size_t bytes, cudaStream_t s) {
    if (sticky_error() != cudaSuccess) return ret(cudaSuccess);
    enqueue_work(s, [p, value, bytes] { memset(p, value, bytes); });
    return cudaSuccess;
}

cudaError_t cudaGetLastError(void) {
    cudaError_t e = sticky_error() != cudaSuccess ? sticky_error() : last_error;
    last_error = cudaSuccess;
    return e;
}

cudaError_t cudaPeekAtLastError(void) {
    return sticky_error() != cudaSuccess ? sticky_error() : last_error;
}

const char *cudaGetErrorName(cudaError_t e) {
    switch (e) {
    case cudaSuccess: return "cudaSuccess";
    case cudaErrorMemoryAllocation: return "cudaErrorMemoryAllocation";
    case cudaErrorInvalidValue: return "cudaErrorInvalidValue";
    case cudaErrorInvalidConfiguration: return "cudaErrorInvalidConfiguration";
    case cudaErrorIllegalAddress: return "cudaErrorIllegalAddress";
    case cudaErrorNoDevice: return "cudaErrorNoDevice";
    case cudaErrorInvalidDevice: return "cudaErrorInvalidDevice";
    default: return "cudaErrorUnknown";
    }
}

const char *cudaGetErrorString(cudaError_t e) {
    switch (e) {
    case cudaSuccess: return "no error";
    case cudaErrorMemoryAllocation: return "out of memory";
    case cudaErrorIllegalAddress:
        return "an illegal memory access was encountered (emulated: CKE_FAIL_LAUNCH)";
    case cudaErrorNoDevice: return "no CUDA-capable device is detected";
    default: return "emulated error";
    }
}

} // extern "C"

/* ---- cuBLAS -----------------------------------------------------------------------------------
 */

struct cublasContext {
    cudaStream_t stream;
};

namespace {

float load(cudaDataType t, const void *p, long long i) {
    switch (t) {
    case CUDA_R_16F: return __half2float(static_cast<const __half *>(p)[i]);
    case CUDA_R_16BF: return __bfloat162float(static_cast<const __nv_bfloat16 *>(p)[i]);
    default: return static_cast<const float *>(p)[i];
    }
}

void store(cudaDataType t, void *p, long long i, float v) {
    switch (t) {
    case CUDA_R_16F: static_cast<__half *>(p)[i] = __float2half_rn(v); break;
    case CUDA_R_16BF: static_cast<__nv_bfloat16 *>(p)[i] = __float2bfloat16_rn(v); break;
    default: static_cast<float *>(p)[i] = v; break;
    }
}

bool supported(cudaDataType t) {
    return t == CUDA_R_32F || t == CUDA_R_16F || t == CUDA_R_16BF;
}

} // namespace

extern "C" {

cublasStatus_t cublasCreate(cublasHandle_t *h) {
    *h = new cublasContext{nullptr};
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasSetStream(cublasHandle_t h, cudaStream_t s) {
    h->stream = s;
    return CUBLAS_STATUS_SUCCESS;
}

const char *cublasGetStatusName(cublasStatus_t s) {
    switch (s) {
    case CUBLAS_STATUS_SUCCESS: return "CUBLAS_STATUS_SUCCESS";
    case CUBLAS_STATUS_INVALID_VALUE: return "CUBLAS_STATUS_INVALID_VALUE";
    case CUBLAS_STATUS_NOT_SUPPORTED: return "CUBLAS_STATUS_NOT_SUPPORTED";
    case CUBLAS_STATUS_EXECUTION_FAILED: return "CUBLAS_STATUS_EXECUTION_FAILED";
    default: return "CUBLAS_STATUS_UNKNOWN";
    }
}

const char *cublasGetStatusString(cublasStatus_t s) {
    return s == CUBLAS_STATUS_SUCCESS ? "success" : "emulated cuBLAS error";
}

/* Column-major, as cuBLAS: C = alpha op(A) op(B) + beta C per batch, sums in f32. */
cublasStatus_t cublasGemmStridedBatchedEx(cublasHandle_t h, cublasOperation_t ta,
                                          cublasOperation_t tb, int m, int n, int k,
                                          const void *alpha, const void *A, cudaDataType at,
                                          int lda, long long sa, const void *B, cudaDataType bt,
                                          int ldb, long long sb, const void *beta, void *C,
                                          cudaDataType ct, int ldc, long long sc, int batch,
                                          cublasComputeType_t compute, cublasGemmAlgo_t algo) {
    (void)algo;
    if (compute != CUBLAS_COMPUTE_32F || !supported(at) || !supported(bt) || !supported(ct))
        return CUBLAS_STATUS_NOT_SUPPORTED;
    if (m < 0 || n < 0 || k < 0 || batch < 0 || lda < (ta == CUBLAS_OP_N ? m : k) ||
        ldb < (tb == CUBLAS_OP_N ? k : n) || ldc < m)
        return CUBLAS_STATUS_INVALID_VALUE;
    if (sticky_error() != cudaSuccess) return CUBLAS_STATUS_EXECUTION_FAILED;
    float al = *static_cast<const float *>(alpha), be = *static_cast<const float *>(beta);
    enqueue_work(h->stream, [=] {
        for (int q = 0; q < batch; q++)
            for (int j = 0; j < n; j++)
                for (int i = 0; i < m; i++) {
                    float acc = 0.0f;
                    for (int p = 0; p < k; p++) {
                        long long ia =
                            ta == CUBLAS_OP_N ? i + (long long)p * lda : p + (long long)i * lda;
                        long long ib =
                            tb == CUBLAS_OP_N ? p + (long long)j * ldb : j + (long long)p * ldb;
                        acc += load(at, A, q * sa + ia) * load(bt, B, q * sb + ib);
                    }
                    long long ic = q * sc + i + (long long)j * ldc;
                    float prev = be != 0.0f ? load(ct, C, ic) : 0.0f;
                    store(ct, C, ic, al * acc + be * prev);
                }
    });
    return CUBLAS_STATUS_SUCCESS;
}

} // extern "C"
