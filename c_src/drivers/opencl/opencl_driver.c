/* The opencl driver: any OpenCL 1.2 device reached through the ICD loader (PoCL on a machine
 * without a GPU). Loaded with dlopen from priv/; with no platform or no device it is listed as
 * unavailable with the reason.
 *
 * - Devices are numbered over every platform in the loader's order: {:opencl, 1} is the second.
 * - Each device has one context and one in-order command queue, owned here. Kernels are only
 *   enqueued; OpenCL keeps a released buffer alive until the commands that use it have run, so
 *   the work in flight is bounded (below: work in flight), and reads are asynchronous.
 * - The program holding every kernel (opencl_source.c) is built on the device's first launch and
 *   kept; kernel objects are created once per name. Setting a kernel's arguments and enqueueing
 *   it happen under the device's lock, so concurrent callers never launch each other's
 *   arguments. */
#define _GNU_SOURCE /* dladdr, pipe2 */
#include <dlfcn.h>
#include <malloc.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "opencl_describe.h"
#include "opencl_source.h"

extern char **environ;

/* How long the probe waits for cascade_opencl_probe (PoCL's first start reads its caches) */
#define PROBE_TIMEOUT_MS 60000

static const char signature[] =
#include "../../core/ops_signature.inc"
    ;

typedef struct {
    int n;
    ocl_desc desc[OCL_MAX_DEVICES];
    ocl_device *open[OCL_MAX_DEVICES];
} ocl_driver;

static ocl_driver driver_state;
static pthread_mutex_t open_lock = PTHREAD_MUTEX_INITIALIZER;

cx_code ocl_fail(cx_status *st, cl_int err, const char *what) {
    return cx_fail(st,
                   err == CL_OUT_OF_RESOURCES || err == CL_MEM_OBJECT_ALLOCATION_FAILURE ||
                           err == CL_OUT_OF_HOST_MEMORY
                       ? CX_ENOMEM
                       : CX_EDEVICE,
                   "opencl: %s failed (OpenCL error %d)", what, (int)err);
}

/* PoCL compiles and links kernels in child processes and waits for them with waitpid, which
 * fails with ECHILD ("Final linking of kernel ... failed") when SIGCHLD is ignored, as the BEAM
 * ignores it; so does the probe's wait for its helper. The BEAM's own children are spawned by
 * its forker process (erl_child_setup), so the default disposition (children are kept until
 * waited for) costs it nothing. */
static void let_children_be_waited_for(void) {
    struct sigaction old;
    if (sigaction(SIGCHLD, NULL, &old) == 0 && old.sa_handler == SIG_IGN) {
        struct sigaction dfl;
        memset(&dfl, 0, sizeof dfl);
        dfl.sa_handler = SIG_DFL;
        sigemptyset(&dfl.sa_mask);
        sigaction(SIGCHLD, &dfl, NULL);
    }
}

/* ---- the probe: cascade_opencl_probe, beside this shared object (opencl_describe.h) ---- */

/* The helper's path, or false where this object's folder cannot be found or has none. */
static bool helper_path(char *path, size_t len) {
    Dl_info info;
    if (!dladdr((void *)&helper_path, &info) || !info.dli_fname) return false;
    const char *slash = strrchr(info.dli_fname, '/');
    int dir = slash ? (int)(slash - info.dli_fname) : 1;
    snprintf(path, len, "%.*s/cascade_opencl_probe", dir, slash ? info.dli_fname : ".");
    return access(path, X_OK) == 0;
}

static long long now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Reads what the helper writes until it closes its end, at most `cap` bytes, within the probe's
 * time; the count read, or -1 on a timeout. */
static ssize_t read_helper(int fd, char *buf, size_t cap) {
    size_t got = 0;
    long long deadline = now_ms() + PROBE_TIMEOUT_MS;
    for (;;) {
        long long left = deadline - now_ms();
        if (left <= 0) return -1;
        struct pollfd p = {.fd = fd, .events = POLLIN};
        int r = poll(&p, 1, (int)left);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) return -1;
        ssize_t n = read(fd, buf + got, cap - got);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) return (ssize_t)got;
        got += (size_t)n;
        if (got == cap) return (ssize_t)got;
    }
}

static cx_code probe_with_helper(const char *helper, ocl_driver *d, cx_status *st) {
    int fds[2];
    if (pipe2(fds, O_CLOEXEC) != 0)
        return cx_fail(st, CX_EDEVICE, "opencl: the probe could not make a pipe: %s",
                       strerror(errno));
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, fds[1], STDOUT_FILENO);
    posix_spawn_file_actions_addopen(&fa, STDERR_FILENO, "/dev/null", O_WRONLY, 0);
    char *argv[] = {(char *)helper, NULL};
    pid_t pid;
    int err = posix_spawn(&pid, helper, &fa, NULL, argv, environ);
    posix_spawn_file_actions_destroy(&fa);
    close(fds[1]);
    if (err) {
        close(fds[0]);
        return cx_fail(st, CX_EDEVICE, "opencl: could not run %s: %s", helper, strerror(err));
    }
    char buf[sizeof(ocl_probe_header) + sizeof(ocl_desc) * OCL_MAX_DEVICES];
    ssize_t got = read_helper(fds[0], buf, sizeof buf);
    close(fds[0]);
    if (got < 0) kill(pid, SIGKILL);
    int status = 0;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    if (got < 0)
        return cx_fail(st, CX_EDEVICE, "opencl: %s did not answer within %d s", helper,
                       PROBE_TIMEOUT_MS / 1000);
    if (WIFSIGNALED(status))
        return cx_fail(st, CX_EDEVICE,
                       "opencl: %s (describing the OpenCL devices) died of signal %d", helper,
                       WTERMSIG(status));
    ocl_probe_header h;
    if ((size_t)got < sizeof h)
        return cx_fail(st, CX_EDEVICE, "opencl: %s answered %zd bytes", helper, got);
    memcpy(&h, buf, sizeof h);
    if (h.magic != OCL_PROBE_MAGIC || h.desc_size != sizeof(ocl_desc) || h.count < 0 ||
        h.count > OCL_MAX_DEVICES || (size_t)got != sizeof h + sizeof(ocl_desc) * (size_t)h.count)
        return cx_fail(st, CX_EDEVICE,
                       "opencl: %s is not the one this driver was built with (run mix compile)",
                       helper);
    if (h.code != CX_OK) return cx_fail(st, (cx_code)h.code, "%.500s", h.message);
    memcpy(d->desc, buf + sizeof h, sizeof(ocl_desc) * (size_t)h.count);
    d->n = h.count;
    return CX_OK;
}

static cx_code ocl_probe(void **drv, cx_status *st) {
    ocl_driver *d = &driver_state;
    let_children_be_waited_for();
    char helper[1024];
    /* without the helper (a driver copied alone), in this process: the platform loads now */
    cx_code rc = helper_path(helper, sizeof helper) ? probe_with_helper(helper, d, st)
                                                    : ocl_describe_all(d->desc, &d->n, st);
    if (rc != CX_OK) return rc;
    *drv = d;
    return CX_OK;
}

static int ocl_device_count(void *drv) {
    return ((ocl_driver *)drv)->n;
}

/* Opening a device costs nothing: it is described, and starts (its platform loaded, its
 * context and queue made) at its first allocation. */
static cx_code ocl_open_device(void *drv, int index, void **out, cx_device_props *props,
                               cx_status *st) {
    ocl_driver *d = drv;
    if (index < 0 || index >= d->n)
        return cx_fail(st, CX_EINVAL, "opencl: no device %d (there are %d)", index, d->n);
    pthread_mutex_lock(&open_lock);
    ocl_device *dev = d->open[index];
    if (!dev && (dev = calloc(1, sizeof *dev))) {
        const ocl_desc *desc = &d->desc[index];
        dev->desc = desc;
        pthread_mutex_init(&dev->lock, NULL);
        pthread_mutex_init(&dev->flight_lock, NULL);
        pthread_cond_init(&dev->room, NULL);
        pthread_cond_init(&dev->work, NULL);
        d->open[index] = dev;
    }
    pthread_mutex_unlock(&open_lock);
    if (!dev) return cx_fail(st, CX_ENOMEM, "opencl: out of host memory");
    *props = d->desc[index].props;
    *out = dev;
    return CX_OK;
}

/* With open_lock held: finds the described device in this process's platforms, checking that it
 * is the same one, and makes its context and queue. */
static cx_code start_device(ocl_device *dev, cx_status *st) {
    const ocl_desc *desc = dev->desc;
    cl_uint np = 0, nd = 0;
    cl_platform_id platforms[OCL_MAX_DEVICES];
    cl_device_id ids[OCL_MAX_DEVICES];
    cl_int err = clGetPlatformIDs(OCL_MAX_DEVICES, platforms, &np);
    if (err != CL_SUCCESS) return ocl_fail(st, err, "clGetPlatformIDs");
    if ((cl_uint)desc->platform >= np)
        return cx_fail(st, CX_EDEVICE, "opencl: platform %d is gone (%u now)", desc->platform, np);
    err = clGetDeviceIDs(platforms[desc->platform], CL_DEVICE_TYPE_ALL, OCL_MAX_DEVICES, ids, &nd);
    if (err != CL_SUCCESS) return ocl_fail(st, err, "clGetDeviceIDs");
    char name[256] = "";
    if ((cl_uint)desc->index < nd)
        clGetDeviceInfo(ids[desc->index], CL_DEVICE_NAME, sizeof name - 1, name, NULL);
    if ((cl_uint)desc->index >= nd || strncmp(name, desc->props.name, 63) != 0)
        return cx_fail(st, CX_EDEVICE, "opencl: device %d of platform %d is no longer %s",
                       desc->index, desc->platform, desc->props.name);
    dev->platform = platforms[desc->platform];
    dev->device = ids[desc->index];
    cl_context_properties cp[] = {CL_CONTEXT_PLATFORM, (cl_context_properties)dev->platform, 0};
    dev->context = clCreateContext(cp, 1, &dev->device, NULL, NULL, &err);
    if (err == CL_SUCCESS) dev->queue = clCreateCommandQueue(dev->context, dev->device, 0, &err);
    if (err != CL_SUCCESS) {
        if (dev->context) clReleaseContext(dev->context);
        dev->context = NULL;
        return ocl_fail(st, err, "creating the context and queue");
    }
    return CX_OK;
}

/* Starts dev at its first use; a failure is remembered and reported again. */
static cx_code ocl_start(ocl_device *dev, cx_status *st) {
    if (atomic_load_explicit(&dev->started, memory_order_acquire)) return CX_OK;
    pthread_mutex_lock(&open_lock);
    cx_code rc = CX_OK;
    if (!atomic_load(&dev->started)) {
        if (dev->start_error[0]) {
            rc = cx_fail(st, CX_EDEVICE, "%s", dev->start_error);
        } else if ((rc = start_device(dev, st)) != CX_OK) {
            snprintf(dev->start_error, sizeof dev->start_error, "%.255s", st->message);
        } else {
            atomic_store_explicit(&dev->started, true, memory_order_release);
        }
    }
    pthread_mutex_unlock(&open_lock);
    return rc;
}

static cx_code ocl_alloc(void *ctx, size_t bytes, void **out, cx_status *st) {
    ocl_device *dev = ctx;
    cl_int err;
    /* every buffer, and so every upload, download and kernel, comes after an allocation */
    if (ocl_start(dev, st) != CX_OK) return st->code;
    /* OpenCL has no empty buffers */
    cl_mem m = clCreateBuffer(dev->context, CL_MEM_READ_WRITE, bytes ? bytes : 1, NULL, &err);
    if (err != CL_SUCCESS) {
        if (err == CL_INVALID_BUFFER_SIZE || err == CL_MEM_OBJECT_ALLOCATION_FAILURE ||
            err == CL_OUT_OF_RESOURCES || err == CL_OUT_OF_HOST_MEMORY)
            return cx_fail(st, CX_ENOMEM, "opencl: could not allocate %zu bytes (error %d)", bytes,
                           (int)err);
        return ocl_fail(st, err, "clCreateBuffer");
    }
    *out = m;
    return CX_OK;
}

static cx_code ocl_upload(void *ctx, void *dst, const void *src, size_t bytes, cx_status *st) {
    ocl_device *dev = ctx;
    if (!bytes) return CX_OK;
    cl_int err =
        clEnqueueWriteBuffer(dev->queue, (cl_mem)dst, CL_TRUE, 0, bytes, src, 0, NULL, NULL);
    return err == CL_SUCCESS ? CX_OK : ocl_fail(st, err, "clEnqueueWriteBuffer");
}

/* ---- work in flight -----------------------------------------------------------------------
 *
 * OpenCL takes work as fast as it is enqueued, and the one queue runs it in order: unbounded, a
 * loop of ops outruns the device, and every queued op keeps its result (a released buffer lives
 * until its commands have run): 2,000 dropped 1000x1000 products held gigabytes. So each op ends
 * with a marker whose event goes on the device's ring with the bytes the op keeps alive, and
 * each asynchronous download's read goes there with its callback. The waiter, one thread per
 * device, waits for the oldest event (the queue is in order: the others end after it), drops it
 * and runs the download's callback from its own thread, never from inside the OpenCL
 * implementation's. A producer past the bound waits for the waiter to make room.
 *
 * The implementation's calls take locks that its own threads hold while they schedule work; on
 * a loaded machine a preempted holder made an 8-byte read and a slice's enqueue wait far longer
 * than they take.
 * So the NIF makes every call on this device from a dirty I/O scheduler (may_block), and a
 * released buffer, which a garbage collection releases from any thread, a normal scheduler's
 * included, is handed to the waiter, which releases it to OpenCL. */

/* Starts the waiter, with flight_lock held; false when no thread could be started. */
static bool ensure_waiter(ocl_device *dev);

/* With flight_lock held: once the device is idle after OCL_TRIM_BYTES of released buffers, their
 * memory, which the implementation frees in pieces below malloc's mmap threshold, goes back to
 * the system (glibc gives back only the top of a heap by itself). */
static void trim_when_idle(ocl_device *dev) {
    if (dev->n_flight || dev->n_releases || dev->released_bytes < OCL_TRIM_BYTES) return;
    dev->released_bytes = 0;
    pthread_mutex_unlock(&dev->flight_lock);
    malloc_trim(0);
    pthread_mutex_lock(&dev->flight_lock);
}

static void *waiter_main(void *arg) {
    ocl_device *dev = arg;
    pthread_mutex_lock(&dev->flight_lock);
    for (;;) {
        while (dev->n_flight == 0 && dev->n_releases == 0)
            pthread_cond_wait(&dev->work, &dev->flight_lock);
        if (dev->n_releases) {
            cl_mem *take = dev->releases;
            int n = dev->n_releases;
            dev->releases = NULL;
            dev->n_releases = dev->cap_releases = 0;
            pthread_mutex_unlock(&dev->flight_lock);
            size_t bytes = 0;
            for (int k = 0; k < n; k++) {
                size_t size = 0;
                clGetMemObjectInfo(take[k], CL_MEM_SIZE, sizeof size, &size, NULL);
                bytes += size;
                clReleaseMemObject(take[k]);
            }
            free(take);
            pthread_mutex_lock(&dev->flight_lock);
            dev->released_bytes += bytes;
            trim_when_idle(dev);
            continue;
        }
        /* producers only append: the oldest entry stays put while the lock is released */
        ocl_flight f = dev->flight[dev->head];
        pthread_mutex_unlock(&dev->flight_lock);
        cl_int status = clWaitForEvents(1, &f.event);
        if (status == CL_SUCCESS || status == CL_EXEC_STATUS_ERROR_FOR_EVENTS_IN_WAIT_LIST) {
            cl_int exec = CL_COMPLETE;
            clGetEventInfo(f.event, CL_EVENT_COMMAND_EXECUTION_STATUS, sizeof exec, &exec, NULL);
            status = exec == CL_COMPLETE ? CL_SUCCESS : exec;
        }
        clReleaseEvent(f.event);
        if (f.done) {
            char message[96];
            snprintf(message, sizeof message, "opencl: the read failed (OpenCL error %d)",
                     (int)status);
            f.done(f.ctx, status == CL_SUCCESS ? CX_OK : CX_EDEVICE,
                   status == CL_SUCCESS ? NULL : message);
        }
        pthread_mutex_lock(&dev->flight_lock);
        dev->head = (dev->head + 1) % OCL_FLIGHT_RING;
        dev->n_flight--;
        if (!f.done) {
            atomic_fetch_sub(&dev->ops, 1);
            atomic_fetch_sub(&dev->bytes, f.bytes);
        }
        pthread_cond_broadcast(&dev->room);
        trim_when_idle(dev);
    }
    return NULL;
}

static bool ensure_waiter(ocl_device *dev) {
    if (dev->waiter) return true;
    pthread_attr_t attr;
    pthread_t th;
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    int err = pthread_create(&th, &attr, waiter_main, dev);
    pthread_attr_destroy(&attr);
    return dev->waiter = err == 0;
}

/* Appends f to the ring, with flight_lock held; false when the ring is full or no waiter could be
 * started (f is then the caller's still). */
static bool push_flight(ocl_device *dev, ocl_flight f) {
    if (dev->n_flight == OCL_FLIGHT_RING || !ensure_waiter(dev)) return false;
    dev->flight[(dev->head + dev->n_flight) % OCL_FLIGHT_RING] = f;
    dev->n_flight++;
    if (!f.done) {
        atomic_fetch_add(&dev->ops, 1);
        atomic_fetch_add(&dev->bytes, f.bytes);
    }
    pthread_cond_signal(&dev->work);
    return true;
}

static void ocl_release(void *ctx, void *buffer) {
    ocl_device *dev = ctx;
    if (!buffer) return;
    pthread_mutex_lock(&dev->flight_lock);
    bool handed = ensure_waiter(dev);
    if (handed && dev->n_releases == dev->cap_releases) {
        int cap = dev->cap_releases ? 2 * dev->cap_releases : 64;
        cl_mem *grown = realloc(dev->releases, sizeof(cl_mem) * (size_t)cap);
        if (grown) dev->releases = grown, dev->cap_releases = cap;
        handed = grown != NULL;
    }
    if (handed) {
        dev->releases[dev->n_releases++] = (cl_mem)buffer;
        pthread_cond_signal(&dev->work);
    }
    pthread_mutex_unlock(&dev->flight_lock);
    /* no thread or no memory to hand it over: released here */
    if (!handed) clReleaseMemObject((cl_mem)buffer);
}

static bool over_bound(ocl_device *dev) {
    int ops = atomic_load(&dev->ops);
    /* one op larger than the byte bound runs alone */
    return ops > OCL_FLIGHT_OPS || (ops > 1 && atomic_load(&dev->bytes) > OCL_FLIGHT_BYTES);
}

cx_code ocl_track(ocl_device *dev, size_t bytes, cx_status *st) {
    cl_event ev;
    cl_int err = clEnqueueMarkerWithWaitList(dev->queue, 0, NULL, &ev);
    if (err != CL_SUCCESS) return ocl_fail(st, err, "clEnqueueMarkerWithWaitList");
    clFlush(dev->queue);
    pthread_mutex_lock(&dev->flight_lock);
    bool pushed = push_flight(dev, (ocl_flight){ev, bytes, NULL, NULL});
    while (pushed && over_bound(dev)) pthread_cond_wait(&dev->room, &dev->flight_lock);
    pthread_mutex_unlock(&dev->flight_lock);
    if (!pushed) {
        /* no room to track it: the op is waited for here */
        clWaitForEvents(1, &ev);
        clReleaseEvent(ev);
    }
    return CX_OK;
}

static cx_code ocl_download_async(void *ctx, void *dst, const void *src, size_t bytes,
                                  cx_download_done done, void *done_ctx, cx_status *st) {
    ocl_device *dev = ctx;
    pthread_mutex_lock(&dev->flight_lock);
    bool room = dev->n_flight < OCL_FLIGHT_RING;
    pthread_mutex_unlock(&dev->flight_lock);
    if (!room || !bytes) return CX_EUNSUPPORTED;
    cl_event ev;
    cl_int err =
        clEnqueueReadBuffer(dev->queue, (cl_mem)src, CL_FALSE, 0, bytes, dst, 0, NULL, &ev);
    if (err != CL_SUCCESS) return ocl_fail(st, err, "clEnqueueReadBuffer");
    clFlush(dev->queue);
    pthread_mutex_lock(&dev->flight_lock);
    bool pushed = push_flight(dev, (ocl_flight){ev, 0, done, done_ctx});
    pthread_mutex_unlock(&dev->flight_lock);
    if (pushed) return CX_OK;
    /* the read is under way and done must not run on this thread: it ends here, and the
     * caller downloads again synchronously */
    clWaitForEvents(1, &ev);
    clReleaseEvent(ev);
    return CX_EUNSUPPORTED;
}

/* Every call may wait (above: work in flight), the first one on loading the platform (LLVM and
 * clang, for PoCL) and building the kernels. */
static bool ocl_may_block(void *ctx, cx_op_id op, const cx_desc *in, int n_in,
                          const cx_params *ps) {
    (void)ctx, (void)op, (void)in, (void)n_in, (void)ps;
    return true;
}

/* Blocking: it also waits for the kernels that wrote the buffer. */
static cx_code ocl_download(void *ctx, void *dst, const void *src, size_t bytes, cx_status *st) {
    ocl_device *dev = ctx;
    if (!bytes) return CX_OK;
    cl_int err =
        clEnqueueReadBuffer(dev->queue, (cl_mem)src, CL_TRUE, 0, bytes, dst, 0, NULL, NULL);
    return err == CL_SUCCESS ? CX_OK : ocl_fail(st, err, "clEnqueueReadBuffer");
}

const char *ocl_build_options(ocl_device *dev) {
    /* the cpu driver's division and sqrt are correctly rounded; ask the same where possible */
    cl_device_fp_config fp = 0;
    clGetDeviceInfo(dev->device, CL_DEVICE_SINGLE_FP_CONFIG, sizeof fp, &fp, NULL);
    return fp & CL_FP_CORRECTLY_ROUNDED_DIVIDE_SQRT
               ? "-cl-std=CL1.2 -cl-fp32-correctly-rounded-divide-sqrt"
               : "-cl-std=CL1.2";
}

/* Builds the program once; a failed build is remembered with its log's start. */
static cx_code build_program(ocl_device *dev, cx_status *st) {
    if (dev->program) return CX_OK;
    if (dev->build_failed) return cx_fail(st, CX_EDEVICE, "%s", dev->build_error);
    char *src = ocl_source(dev->desc->fp64);
    if (!src) return cx_fail(st, CX_ENOMEM, "opencl: out of host memory for the kernel source");
    cl_int err;
    const char *srcs[1] = {src};
    cl_program p = clCreateProgramWithSource(dev->context, 1, srcs, NULL, &err);
    free(src);
    if (err != CL_SUCCESS) return ocl_fail(st, err, "clCreateProgramWithSource");
    err = clBuildProgram(p, 1, &dev->device, ocl_build_options(dev), NULL, NULL);
    if (err != CL_SUCCESS) {
        char log[200] = "";
        clGetProgramBuildInfo(p, dev->device, CL_PROGRAM_BUILD_LOG, sizeof log - 1, log, NULL);
        clReleaseProgram(p);
        dev->build_failed = true;
        snprintf(dev->build_error, sizeof dev->build_error,
                 "opencl: building the kernels failed (error %d): %s", (int)err, log);
        return cx_fail(st, CX_EDEVICE, "%s", dev->build_error);
    }
    dev->program = p;
    return CX_OK;
}

static unsigned name_hash(const char *s) {
    unsigned h = 2166136261u;
    for (; *s; s++) h = (h ^ (unsigned char)*s) * 16777619u;
    return h;
}

cl_kernel ocl_kernel(ocl_device *dev, const char *name, cx_status *st) {
    if (build_program(dev, st) != CX_OK) return NULL;
    unsigned slot = name_hash(name) % OCL_MAX_KERNELS;
    for (int probes = 0; probes < OCL_MAX_KERNELS; probes++) {
        ocl_kernel_slot *k = &dev->kernels[(slot + (unsigned)probes) % OCL_MAX_KERNELS];
        if (k->kernel && strcmp(k->name, name) == 0) return k->kernel;
        if (k->kernel) continue;
        cl_int err;
        cl_kernel kern = clCreateKernel(dev->program, name, &err);
        if (err != CL_SUCCESS) {
            cx_fail(st, CX_EDEVICE, "opencl: no kernel %s (error %d)", name, (int)err);
            return NULL;
        }
        snprintf(k->name, sizeof k->name, "%s", name);
        k->kernel = kern;
        dev->n_kernels++;
        return kern;
    }
    cx_fail(st, CX_EDEVICE, "opencl: the kernel table is full");
    return NULL;
}

static cx_cap driver_capability(void *ctx, cx_op_id op, const cx_dtype *types, int n_in) {
    return ocl_capability(ctx, op, types, n_in);
}

static bool driver_refine(void *ctx, cx_op_id op, const cx_desc *in, int n_in, const cx_params *ps,
                          char *reason, size_t len) {
    return ocl_refine(ctx, op, in, n_in, ps, reason, len);
}

static cx_code driver_execute(void *ctx, cx_op_id op, const cx_tensor *const *in, int n_in,
                              const cx_params *ps, cx_tensor *out, cx_status *st) {
    if (ocl_execute(ctx, op, in, n_in, ps, out, st) != CX_OK) return st->code;
    if (!out->numel) return CX_OK;
    /* what the op keeps alive until it has run: its result and its inputs (a dropped input
     * lives on in the queue too) */
    size_t bytes = out->nbytes;
    for (int k = 0; k < n_in; k++) bytes += in[k]->nbytes;
    return ocl_track(ctx, bytes, st);
}

static const cx_driver opencl_driver = {
    .abi = CX_DRIVER_ABI,
    .name = "opencl",
    .ops_signature = signature,
    .probe = ocl_probe,
    .device_count = ocl_device_count,
    .open_device = ocl_open_device,
    .alloc = ocl_alloc,
    .release = ocl_release,
    .upload = ocl_upload,
    .download = ocl_download,
    .capability = driver_capability,
    .refine = driver_refine,
    .execute = driver_execute,
    .download_async = ocl_download_async,
    .may_block = ocl_may_block,
};

__attribute__((visibility("default"))) const cx_driver *cx_driver_entry(void) {
    return &opencl_driver;
}
