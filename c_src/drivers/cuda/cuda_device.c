/* The owner thread of each CUDA device, its job queue, and the driver's start: see
 * cuda_device.h for what waits where. */
#include "cuda_device.h"

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The oldest compute capability this build runs on: bf16 arithmetic needs 8.0, and the build
 * carries compute_80 PTX (driver.mk). */
#define MIN_MAJOR 8

struct cuda_job {
    cuda_job_fn fn;
    void *arg;
    bool owned; /* posted: the owner frees arg and the job */
    bool done;
    cx_code rc;
    cx_status *st;
    cuda_job *next;
};

/* ---- errors ---------------------------------------------------------------------------------- */

/* Errors after which the CUDA context is unusable: every later call fails the same way. */
static bool sticky(cudaError_t e) {
    switch (e) {
    case cudaErrorIllegalAddress:
    case cudaErrorLaunchTimeout:
    case cudaErrorAssert:
    case cudaErrorHardwareStackError:
    case cudaErrorIllegalInstruction:
    case cudaErrorMisalignedAddress:
    case cudaErrorInvalidAddressSpace:
    case cudaErrorInvalidPc:
    case cudaErrorLaunchFailure:
    case cudaErrorECCUncorrectable:
    case cudaErrorNvlinkUncorrectable:
    case cudaErrorContextIsDestroyed:
    case cudaErrorExternalDevice: return true;
    default: return false;
    }
}

static cx_code lost_status(cuda_device *d, cx_status *st) {
    return cx_fail(st, CX_EDEVICE,
                   "cuda:%d is lost: %s. A sticky CUDA error leaves the device unusable until "
                   "the process restarts; tensors on it are gone",
                   d->ordinal, d->lost_reason);
}

cx_code cuda_check(cuda_device *d, cudaError_t e, const char *what, cx_status *st) {
    if (e == cudaSuccess) return CX_OK;
    if (e == cudaErrorMemoryAllocation) {
        cudaGetLastError(); /* not sticky: clear it */
        return cx_fail(st, CX_ENOMEM, "cuda:%d: out of device memory in %s", d->ordinal, what);
    }
    if (sticky(e)) {
        if (!atomic_load(&d->lost)) {
            snprintf(d->lost_reason, sizeof d->lost_reason, "%s failed with %s (%s)", what,
                     cudaGetErrorName(e), cudaGetErrorString(e));
            atomic_store(&d->lost, true);
        }
        return lost_status(d, st);
    }
    cudaGetLastError();
    return cx_fail(st, CX_EDEVICE, "cuda:%d: %s failed with %s (%s)", d->ordinal, what,
                   cudaGetErrorName(e), cudaGetErrorString(e));
}

cx_code cuda_check_blas(cuda_device *d, cublasStatus_t s, const char *what, cx_status *st) {
    if (s == CUBLAS_STATUS_SUCCESS) return CX_OK;
    if (s == CUBLAS_STATUS_ALLOC_FAILED)
        return cx_fail(st, CX_ENOMEM, "cuda:%d: out of device memory in %s", d->ordinal, what);
    /* an execution failure may hide a sticky CUDA error */
    cudaError_t e = cudaPeekAtLastError();
    if (sticky(e)) return cuda_check(d, e, what, st);
    return cx_fail(st, CX_EDEVICE, "cuda:%d: %s failed with %s (%s)", d->ordinal, what,
                   cuda_cublas.status_name(s), cuda_cublas.status_string(s));
}

/* ---- memory ---------------------------------------------------------------------------------- */

cx_code cuda_mem_alloc(cuda_device *d, size_t bytes, void **out, cx_status *st) {
    if (bytes == 0) bytes = 1; /* every tensor owns a distinct buffer */
    cudaError_t e = cudaMallocAsync(out, bytes, d->stream);
    if (e == cudaErrorMemoryAllocation) {
        /* Memory freed on the stream returns to the pool; give the pool's idle memory back and
         * try once more before reporting (Elixir then collects garbage and retries). */
        cudaGetLastError();
        cudaStreamSynchronize(d->stream);
        cudaMemPoolTrimTo(d->pool, 0);
        e = cudaMallocAsync(out, bytes, d->stream);
    }
    if (e == cudaErrorMemoryAllocation) {
        cudaGetLastError();
        size_t free_b = 0, total_b = 0;
        cudaMemGetInfo(&free_b, &total_b);
        return cx_fail(st, CX_ENOMEM,
                       "cuda:%d: out of device memory allocating %zu bytes (%zu MiB free of %zu "
                       "MiB)",
                       d->ordinal, bytes, free_b >> 20, total_b >> 20);
    }
    return cuda_check(d, e, "cudaMallocAsync", st);
}

void cuda_mem_free(cuda_device *d, void *p) {
    if (p && !atomic_load(&d->lost)) cudaFreeAsync(p, d->stream);
}

/* ---- the owner thread ------------------------------------------------------------------------ */

typedef struct {
    cuda_device *d;
    cx_status st;
    cx_code rc;
    bool started;
    cx_device_props *props;
    pthread_mutex_t lock;
    pthread_cond_t cond;
} start_arg;

/* On the owner thread: makes the device current and creates what it owns. */
static cx_code device_init(cuda_device *d, cx_device_props *props, cx_status *st) {
    cx_code rc = cuda_check(d, cudaSetDevice(d->ordinal), "cudaSetDevice", st);
    if (rc) return rc;
    struct cudaDeviceProp p;
    if ((rc =
             cuda_check(d, cudaGetDeviceProperties(&p, d->ordinal), "cudaGetDeviceProperties", st)))
        return rc;
    d->major = p.major;
    d->minor = p.minor;
    if (p.major < MIN_MAJOR)
        return cx_fail(st, CX_EDEVICE,
                       "%s has compute capability %d.%d; this build of the cuda driver needs %d.0 "
                       "or newer (bf16 kernels, compute_80 PTX)",
                       p.name, p.major, p.minor, MIN_MAJOR);
    if ((rc = cuda_check(d, cudaStreamCreateWithFlags(&d->stream, cudaStreamNonBlocking),
                         "cudaStreamCreate", st)))
        return rc;
    if ((rc = cuda_check(d, cudaDeviceGetDefaultMemPool(&d->pool, d->ordinal),
                         "cudaDeviceGetDefaultMemPool", st)))
        return rc;
    /* keep freed memory in the pool (a caching allocator, as PyTorch has); trimmed on OOM */
    uint64_t keep = UINT64_MAX;
    cudaMemPoolSetAttribute(d->pool, cudaMemPoolAttrReleaseThreshold, &keep);
    snprintf(props->name, sizeof props->name, "%.63s", p.name);
    snprintf(props->kind, sizeof props->kind, "gpu");
    props->memory = (long long)p.totalGlobalMem;
    props->host_memory = false;
    snprintf(props->detail, sizeof props->detail,
             "compute capability %d.%d, %d SMs; cuBLAS for dot (loaded at the first; tensor "
             "cores for f16/bf16); f16/bf16 stored natively, computed in f32",
             p.major, p.minor, p.multiProcessorCount);
    return CX_OK;
}

static void *owner_main(void *argp) {
    start_arg *a = argp;
    cuda_device *d = a->d;
    cx_code rc = device_init(d, a->props, &a->st);
    pthread_mutex_lock(&a->lock);
    a->rc = rc;
    a->started = true;
    pthread_cond_signal(&a->cond);
    pthread_mutex_unlock(&a->lock);
    if (rc != CX_OK) return NULL; /* `a` belongs to the opener again */

    pthread_mutex_lock(&d->lock);
    for (;;) {
        while (!d->head) pthread_cond_wait(&d->work, &d->lock);
        cuda_job *j = d->head;
        d->head = j->next;
        if (!d->head) d->tail = NULL;
        pthread_mutex_unlock(&d->lock);

        cx_status scratch = {CX_OK, ""};
        cx_status *st = j->owned ? &scratch : j->st;
        cx_code r = atomic_load(&d->lost) && !j->owned ? lost_status(d, st) : j->fn(d, j->arg, st);

        pthread_mutex_lock(&d->lock);
        if (j->owned) {
            free(j->arg);
            free(j);
        } else {
            j->rc = r;
            j->done = true;
            pthread_cond_broadcast(&d->settled);
        }
    }
    return NULL;
}

static void enqueue(cuda_device *d, cuda_job *j) {
    j->next = NULL;
    if (d->tail)
        d->tail->next = j;
    else
        d->head = j;
    d->tail = j;
    pthread_cond_signal(&d->work);
}

cx_code cuda_submit(cuda_device *d, cuda_job_fn fn, void *arg, cx_status *st) {
    if (atomic_load(&d->lost)) return lost_status(d, st);
    cuda_job j = {.fn = fn, .arg = arg, .st = st};
    pthread_mutex_lock(&d->lock);
    enqueue(d, &j);
    while (!j.done) pthread_cond_wait(&d->settled, &d->lock);
    pthread_mutex_unlock(&d->lock);
    return j.rc;
}

void cuda_post(cuda_device *d, cuda_job_fn fn, void *arg) {
    cuda_job *j = calloc(1, sizeof *j);
    if (!j) { /* cannot queue: leaking the buffer beats blocking a destructor */
        free(arg);
        return;
    }
    j->fn = fn;
    j->arg = arg;
    j->owned = true;
    pthread_mutex_lock(&d->lock);
    enqueue(d, j);
    pthread_mutex_unlock(&d->lock);
}

/* ---- start ----------------------------------------------------------------------------------- */

cx_code cuda_probe(int *count, cx_status *st) {
#ifndef CK_EMULATE /* the cpu emulator (emu/) stands in for the driver library too */
    /* The runtime (linked statically) loads the NVIDIA driver library itself; looking for it
     * first gives the user the reason in words rather than cudaErrorInsufficientDriver. */
    void *libcuda = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!libcuda) {
        const char *err = dlerror();
        return cx_fail(st, CX_EDEVICE,
                       "no NVIDIA driver on this machine: libcuda.so.1 could not be loaded (%s)",
                       err ? err : "not found");
    }
    /* kept open: the runtime uses it for the life of the process */
#endif
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess)
        return cx_fail(st, CX_EDEVICE, "the CUDA runtime could not start: %s (%s)",
                       cudaGetErrorName(e), cudaGetErrorString(e));
    if (n <= 0) return cx_fail(st, CX_EDEVICE, "the NVIDIA driver is loaded but sees no GPU");
    *count = n;
    return CX_OK;
}

cx_code cuda_device_open(int ordinal, cuda_device **out, cx_device_props *props, cx_status *st) {
    cuda_device *d = calloc(1, sizeof *d);
    if (!d) return cx_fail(st, CX_ENOMEM, "cuda: out of host memory");
    d->ordinal = ordinal;
    pthread_mutex_init(&d->lock, NULL);
    pthread_cond_init(&d->work, NULL);
    pthread_cond_init(&d->settled, NULL);
    start_arg a = {.d = d, .st = {CX_OK, ""}, .props = props};
    pthread_mutex_init(&a.lock, NULL);
    pthread_cond_init(&a.cond, NULL);
    cx_code rc;
    if (pthread_create(&d->owner, NULL, owner_main, &a) != 0) {
        rc = cx_fail(st, CX_EDEVICE, "cuda:%d: could not start the device's thread", ordinal);
    } else {
        pthread_mutex_lock(&a.lock);
        while (!a.started) pthread_cond_wait(&a.cond, &a.lock);
        pthread_mutex_unlock(&a.lock);
        rc = a.rc;
        if (rc != CX_OK) {
            pthread_join(d->owner, NULL);
            cx_fail(st, rc, "%s", a.st.message);
        } else {
            pthread_detach(d->owner); /* lives as long as the process */
        }
    }
    pthread_mutex_destroy(&a.lock);
    pthread_cond_destroy(&a.cond);
    if (rc != CX_OK) {
        pthread_mutex_destroy(&d->lock);
        pthread_cond_destroy(&d->work);
        pthread_cond_destroy(&d->settled);
        free(d);
        return rc;
    }
    *out = d;
    return CX_OK;
}
