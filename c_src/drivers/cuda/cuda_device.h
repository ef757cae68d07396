/* A CUDA device as the cuda driver holds it: one host thread (the owner) that made the device
 * current, holds its stream, its memory pool and its cuBLAS handle, and runs every piece of
 * work posted to it, in order. Callers never touch the CUDA API themselves.
 *
 * What waits where:
 *   - execute, alloc and upload are submitted and the caller waits until the owner thread has
 *     *enqueued* the work on the stream (kernel launches, cudaMallocAsync, a pageable
 *     cudaMemcpyAsync that returns once the source is staged): microseconds, never the GPU.
 *     The one exception: take and gather read back a flag that says whether an index is out of
 *     range (the op's outcome is an error or not), so they wait for the stream.
 *   - download_async (what to_binary uses) is submitted like an upload: the owner enqueues
 *     copies into a pinned staging buffer, each followed by a stream callback that copies the
 *     chunk on into the caller's memory; the last callback calls the caller's `done`. No
 *     thread waits for the GPU; errors of earlier kernels reach `done` as the stream's status.
 *   - download (used inside the core: fallbacks, transfers) waits for the stream: the bytes
 *     must be in host memory when it returns, and errors of earlier kernels surface there.
 *   - release is posted without waiting (cudaFreeAsync, stream-ordered after every kernel that
 *     read the buffer), so a garbage collection never blocks on the GPU.
 *   - out of memory: the owner synchronises the stream and trims the pool once, then retries. */
#ifndef CX_CUDA_DEVICE_H
#define CX_CUDA_DEVICE_H

#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#include <pthread.h>
#include <stdatomic.h>

#include "../../core/tensor.h"

struct cuda_device;
typedef struct cuda_job cuda_job;
typedef cx_code (*cuda_job_fn)(struct cuda_device *d, void *arg, cx_status *st);

typedef struct cuda_device {
    int ordinal;
    pthread_t owner;
    pthread_mutex_t lock;
    pthread_cond_t work;    /* the owner waits for jobs */
    pthread_cond_t settled; /* callers wait for their job */
    cuda_job *head, *tail;
    /* owned by the owner thread */
    cudaStream_t stream;
    cudaMemPool_t pool;
    cublasHandle_t blas; /* made at the first product: cuda_blas_handle */
    int major, minor;
    /* pinned host memory that asynchronous downloads pass through, CUDA_STAGING_BYTES, made on
     * first use; stream order keeps one download's chunk from overwriting another's before its
     * callback has copied it out */
    void *staging;
    /* a sticky CUDA error: the device is unusable until the process restarts */
    _Atomic bool lost;
    char lost_reason[256];
    /* explicit transfers between host and device memory */
    _Atomic long long uploads, upload_bytes, downloads, download_bytes;
} cuda_device;

/* Starts the driver: the NVIDIA driver library and at least one device, or the reason why not. */
cx_code cuda_probe(int *count, cx_status *st);
/* Starts the owner thread of device `ordinal`; on failure the reason, and no thread is left. */
cx_code cuda_device_open(int ordinal, cuda_device **out, cx_device_props *props, cx_status *st);

/* Runs fn(d, arg) on the owner thread and waits for it. */
cx_code cuda_submit(cuda_device *d, cuda_job_fn fn, void *arg, cx_status *st);
/* Runs fn(d, arg) on the owner thread later; arg is freed with free() afterwards. */
void cuda_post(cuda_device *d, cuda_job_fn fn, void *arg);

/* On the owner thread: turns a CUDA error into a status (CX_ENOMEM for out of memory, the
 * device marked lost for a sticky error). `what` names the call. */
cx_code cuda_check(cuda_device *d, cudaError_t e, const char *what, cx_status *st);
cx_code cuda_check_blas(cuda_device *d, cublasStatus_t s, const char *what, cx_status *st);

/* cuBLAS, loaded at the first product (cuda_cublas.c): its entry points, valid once
 * cuda_blas_handle has succeeded. */
typedef struct {
    cublasStatus_t (*create)(cublasHandle_t *);
    cublasStatus_t (*set_stream)(cublasHandle_t, cudaStream_t);
    __typeof__(&cublasGemmStridedBatchedEx) gemm_strided_batched;
    const char *(*status_name)(cublasStatus_t);
    const char *(*status_string)(cublasStatus_t);
} cuda_cublas_api;
extern cuda_cublas_api cuda_cublas;
/* On the owner thread: d's cuBLAS handle on its stream, loading cuBLAS and making the handle at
 * the first call; the reason in st when cuBLAS cannot be had. */
cx_code cuda_blas_handle(cuda_device *d, cublasHandle_t *out, cx_status *st);

/* On the owner thread: stream-ordered device memory, with one trim-and-retry on exhaustion. */
cx_code cuda_mem_alloc(cuda_device *d, size_t bytes, void **out, cx_status *st);
void cuda_mem_free(cuda_device *d, void *p);

#endif
