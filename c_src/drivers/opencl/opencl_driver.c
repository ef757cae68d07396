/* The opencl driver: any OpenCL 1.2 device reached through the ICD loader (PoCL on a machine
 * without a GPU). Loaded with dlopen from priv/; with no platform or no device it is listed as
 * unavailable with the reason.
 *
 * - Devices are numbered over every platform in the loader's order: {:opencl, 1} is the second.
 * - Each device has one context and one in-order command queue, owned here. Kernels are only
 *   enqueued: a later read of the result (download, blocking) waits for them, and OpenCL keeps a
 *   released buffer alive until the commands that use it have run.
 * - The program holding every kernel (opencl_source.c) is built on the device's first launch and
 *   kept; kernel objects are created once per name. Setting a kernel's arguments and enqueueing
 *   it happen under the device's lock, so concurrent callers never launch each other's
 *   arguments. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "opencl_source.h"

#define MAX_DEVICES 16

static const char signature[] =
#include "../../core/ops_signature.inc"
    ;

typedef struct {
    int n;
    cl_platform_id platform[MAX_DEVICES];
    cl_device_id device[MAX_DEVICES];
    ocl_device *open[MAX_DEVICES];
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
 * ignores it. The BEAM's own children are spawned by its forker process (erl_child_setup), so
 * the default disposition (children are kept until waited for) costs it nothing. */
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

static cx_code ocl_probe(void **drv, cx_status *st) {
    ocl_driver *d = &driver_state;
    let_children_be_waited_for();
    cl_uint np = 0;
    cl_platform_id platforms[MAX_DEVICES];
    cl_int err = clGetPlatformIDs(MAX_DEVICES, platforms, &np);
    if (err == CL_PLATFORM_NOT_FOUND_KHR || (err == CL_SUCCESS && np == 0))
        return cx_fail(st, CX_EDEVICE,
                       "opencl: no OpenCL platform (the ICD loader found no driver in "
                       "/etc/OpenCL/vendors; pocl-opencl-icd gives one on any CPU)");
    if (err != CL_SUCCESS) return ocl_fail(st, err, "clGetPlatformIDs");
    if (np > MAX_DEVICES) np = MAX_DEVICES;
    d->n = 0;
    for (cl_uint p = 0; p < np && d->n < MAX_DEVICES; p++) {
        cl_uint nd = 0;
        cl_device_id ids[MAX_DEVICES];
        if (clGetDeviceIDs(platforms[p], CL_DEVICE_TYPE_ALL, MAX_DEVICES, ids, &nd) != CL_SUCCESS)
            continue;
        for (cl_uint k = 0; k < nd && d->n < MAX_DEVICES; k++) {
            d->platform[d->n] = platforms[p];
            d->device[d->n] = ids[k];
            d->n++;
        }
    }
    if (d->n == 0)
        return cx_fail(st, CX_EDEVICE, "opencl: %u OpenCL platform(s) but no device", np);
    *drv = d;
    return CX_OK;
}

static int ocl_device_count(void *drv) {
    return ((ocl_driver *)drv)->n;
}

static bool has_extension(cl_device_id id, const char *ext) {
    size_t len = 0;
    if (clGetDeviceInfo(id, CL_DEVICE_EXTENSIONS, 0, NULL, &len) != CL_SUCCESS || !len)
        return false;
    char *s = malloc(len + 1);
    if (!s) return false;
    bool found = false;
    if (clGetDeviceInfo(id, CL_DEVICE_EXTENSIONS, len, s, NULL) == CL_SUCCESS) {
        s[len] = 0;
        size_t n = strlen(ext);
        for (char *p = strstr(s, ext); p && !found; p = strstr(p + 1, ext))
            found = (p == s || p[-1] == ' ') && (p[n] == 0 || p[n] == ' ');
    }
    free(s);
    return found;
}

static void device_props(ocl_device *dev, cx_device_props *props) {
    char name[256] = "", version[256] = "";
    cl_device_type type = 0;
    cl_ulong mem = 0;
    clGetDeviceInfo(dev->device, CL_DEVICE_NAME, sizeof name - 1, name, NULL);
    clGetDeviceInfo(dev->device, CL_DEVICE_VERSION, sizeof version - 1, version, NULL);
    clGetDeviceInfo(dev->device, CL_DEVICE_TYPE, sizeof type, &type, NULL);
    clGetDeviceInfo(dev->device, CL_DEVICE_GLOBAL_MEM_SIZE, sizeof mem, &mem, NULL);
    /* precision bounds say outright that long names are cut (gcc -O1 warns otherwise) */
    snprintf(props->name, sizeof props->name, "%.63s", name);
    /* "OpenCL 3.0 PoCL HSTR: ...": the standard, then the driver's own version */
    char *cut = version, driver[64] = "";
    clGetDeviceInfo(dev->device, CL_DRIVER_VERSION, sizeof driver - 1, driver, NULL);
    for (int words = 0; *cut && words < 2; words++) {
        cut += strspn(cut, " ");
        cut += strcspn(cut, " ");
    }
    snprintf(cut, sizeof version - (size_t)(cut - version), ", driver %s", driver);
    snprintf(props->kind, sizeof props->kind, "%s",
             type & CL_DEVICE_TYPE_GPU           ? "gpu"
             : type & CL_DEVICE_TYPE_ACCELERATOR ? "accelerator"
                                                 : "cpu");
    props->memory = (long long)mem;
    props->host_memory = false;
    snprintf(props->detail, sizeof props->detail,
             "%.40s; f16/bf16 stored, computed in f32%s; %s; %s", version,
             dev->fp16 ? "" : " (no cl_khr_fp16)",
             dev->fp64 ? "f64 native" : "no f64 (no cl_khr_fp64)",
#ifdef CX_HAVE_CLBLAST
             "dot by CLBlast (f32, f64)"
#else
             "no dot (built without CLBlast)"
#endif
    );
}

static cx_code ocl_open_device(void *drv, int index, void **out, cx_device_props *props,
                               cx_status *st) {
    ocl_driver *d = drv;
    if (index < 0 || index >= d->n)
        return cx_fail(st, CX_EINVAL, "opencl: no device %d (there are %d)", index, d->n);
    pthread_mutex_lock(&open_lock);
    ocl_device *dev = d->open[index];
    cx_code rc = CX_OK;
    if (!dev) {
        dev = calloc(1, sizeof *dev);
        cl_int err = CL_SUCCESS;
        if (!dev) {
            rc = cx_fail(st, CX_ENOMEM, "opencl: out of host memory");
            goto done;
        }
        dev->platform = d->platform[index];
        dev->device = d->device[index];
        cl_context_properties cp[] = {CL_CONTEXT_PLATFORM, (cl_context_properties)dev->platform, 0};
        dev->context = clCreateContext(cp, 1, &dev->device, NULL, NULL, &err);
        if (err == CL_SUCCESS)
            dev->queue = clCreateCommandQueue(dev->context, dev->device, 0, &err);
        if (err != CL_SUCCESS) {
            if (dev->context) clReleaseContext(dev->context);
            free(dev);
            dev = NULL;
            rc = ocl_fail(st, err, "creating the context and queue");
            goto done;
        }
        dev->fp64 = has_extension(dev->device, "cl_khr_fp64");
        dev->fp16 = has_extension(dev->device, "cl_khr_fp16");
        if (clGetDeviceInfo(dev->device, CL_DEVICE_MAX_WORK_GROUP_SIZE, sizeof dev->max_group,
                            &dev->max_group, NULL) != CL_SUCCESS)
            dev->max_group = 1;
        if (clGetDeviceInfo(dev->device, CL_DEVICE_MAX_MEM_ALLOC_SIZE, sizeof dev->max_alloc,
                            &dev->max_alloc, NULL) != CL_SUCCESS)
            dev->max_alloc = 0;
        pthread_mutex_init(&dev->lock, NULL);
        d->open[index] = dev;
    }
    device_props(dev, props);
    *out = dev;
done:
    pthread_mutex_unlock(&open_lock);
    return rc;
}

static cx_code ocl_alloc(void *ctx, size_t bytes, void **out, cx_status *st) {
    ocl_device *dev = ctx;
    cl_int err;
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

static void ocl_release(void *ctx, void *buffer) {
    if (buffer) clReleaseMemObject((cl_mem)buffer);
}

static cx_code ocl_upload(void *ctx, void *dst, const void *src, size_t bytes, cx_status *st) {
    ocl_device *dev = ctx;
    if (!bytes) return CX_OK;
    cl_int err =
        clEnqueueWriteBuffer(dev->queue, (cl_mem)dst, CL_TRUE, 0, bytes, src, 0, NULL, NULL);
    return err == CL_SUCCESS ? CX_OK : ocl_fail(st, err, "clEnqueueWriteBuffer");
}

/* Blocking: it also waits for the kernels that wrote the buffer. */
static cx_code ocl_download(void *ctx, void *dst, const void *src, size_t bytes, cx_status *st) {
    ocl_device *dev = ctx;
    if (!bytes) return CX_OK;
    cl_int err =
        clEnqueueReadBuffer(dev->queue, (cl_mem)src, CL_TRUE, 0, bytes, dst, 0, NULL, NULL);
    return err == CL_SUCCESS ? CX_OK : ocl_fail(st, err, "clEnqueueReadBuffer");
}

/* Builds the program once; a failed build is remembered with its log's start. */
static cx_code build_program(ocl_device *dev, cx_status *st) {
    if (dev->program) return CX_OK;
    if (dev->build_failed) return cx_fail(st, CX_EDEVICE, "%s", dev->build_error);
    char *src = ocl_source(dev->fp64);
    if (!src) return cx_fail(st, CX_ENOMEM, "opencl: out of host memory for the kernel source");
    cl_int err;
    const char *srcs[1] = {src};
    cl_program p = clCreateProgramWithSource(dev->context, 1, srcs, NULL, &err);
    free(src);
    if (err != CL_SUCCESS) return ocl_fail(st, err, "clCreateProgramWithSource");
    /* the cpu driver's division and sqrt are correctly rounded; ask the same where possible */
    cl_device_fp_config fp = 0;
    clGetDeviceInfo(dev->device, CL_DEVICE_SINGLE_FP_CONFIG, sizeof fp, &fp, NULL);
    const char *opts = fp & CL_FP_CORRECTLY_ROUNDED_DIVIDE_SQRT
                           ? "-cl-std=CL1.2 -cl-fp32-correctly-rounded-divide-sqrt"
                           : "-cl-std=CL1.2";
    err = clBuildProgram(p, 1, &dev->device, opts, NULL, NULL);
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
    return ocl_execute(ctx, op, in, n_in, ps, out, st);
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
    /* synchronous for now (a dirty scheduler above 1 MiB); clEnqueueReadBuffer with an event
     * callback would make it asynchronous */
    .download_async = NULL,
};

__attribute__((visibility("default"))) const cx_driver *cx_driver_entry(void) {
    return &opencl_driver;
}
