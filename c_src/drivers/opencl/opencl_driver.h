/* The opencl driver's shared declarations: the device context, the kernel-argument structs that
 * the OpenCL C source declares identically (opencl_source.c), and the kernel families
 * (opencl_ops.c). */
#ifndef CX_OPENCL_DRIVER_H
#define CX_OPENCL_DRIVER_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include <CL/cl.h>
/* the ICD loader's "no platform" code (cl_ext.h), without pulling the whole header in */
#ifndef CL_PLATFORM_NOT_FOUND_KHR
#define CL_PLATFORM_NOT_FOUND_KHR -1001
#endif

#include "../../core/tensor.h"
#include "opencl_describe.h"

/* Work-items per group of the reductions that split one output over a group. */
#define OCL_REDUCE_GROUP 64
/* Reductions over at most this many elements per output use one work-item per output. */
#define OCL_REDUCE_SERIAL 256
/* Kernels created so far per device (one per (op, types) actually used). */
#define OCL_MAX_KERNELS 1024
/* Fused chains (core/fused.h) built per device, each its own program; the oldest is replaced. */
#define OCL_MAX_FUSED 64
/* Work in flight on a device (opencl_driver.c: ocl_track): at most OCL_FLIGHT_OPS ops, and ops
 * whose results and inputs hold at most OCL_FLIGHT_BYTES between them (one larger op alone),
 * queued and not yet done; a producer beyond either waits. The ring holds the ops and the
 * asynchronous downloads, which never wait for room (OCL_FLIGHT_RING leaves them that much). */
#define OCL_FLIGHT_OPS   64
#define OCL_FLIGHT_BYTES ((size_t)64 << 20)
#define OCL_FLIGHT_RING  1024
/* The waiter gives memory back to the system (malloc_trim) when the queue is idle and buffers of
 * OCL_TRIM_BYTES or more were released since it last did */
#define OCL_TRIM_BYTES ((size_t)64 << 20)

/* One entry of the ring: an op's marker (done NULL) or a download's read. */
typedef struct {
    cl_event event;
    size_t bytes;          /* an op's result and input bytes */
    cx_download_done done; /* a download's, with its ctx */
    void *ctx;
} ocl_flight;

#define OCL_FUSED_KEY 160
typedef struct {
    char key[OCL_FUSED_KEY]; /* the chain's code and which inputs are numbers */
    cl_program program;
    cl_kernel kernel;
} ocl_fused_slot;

typedef struct {
    char name[48];
    cl_kernel kernel;
} ocl_kernel_slot;

typedef struct {
    /* what the probe found: the properties, fp64 and fp16 (cl_khr_fp64: f64 kernels are built
     * and claimed), max_group, max_alloc (the largest scratch buffer) */
    const ocl_desc *desc;
    /* platform, device, context and queue are set when the device starts, at its first
     * allocation (ocl_start), after which `started` is true; a failure to start is kept */
    _Atomic bool started;
    char start_error[256];
    cl_platform_id platform;
    cl_device_id device;
    cl_context context;
    cl_command_queue queue; /* the one queue of this device, in order */
    /* Guards the program, the kernel table and every clSetKernelArg + enqueue: a cl_kernel holds
     * its arguments, so two threads setting them at once would launch each other's. */
    pthread_mutex_t lock;
    cl_program program; /* built on first use, then kept */
    bool build_failed;
    char build_error[256];
    int n_kernels;
    ocl_kernel_slot kernels[OCL_MAX_KERNELS];
    int n_fused; /* fused programs built so far (slot n_fused % OCL_MAX_FUSED is next) */
    ocl_fused_slot fused[OCL_MAX_FUSED];
    /* Work in flight, oldest first from `head`, under flight_lock: the waiter thread (started
     * with the first entry or release) waits for the oldest event and drops it, signalling
     * `room`; `work` wakes the waiter. ops and bytes count the ops among the entries and the
     * bytes they keep alive. */
    pthread_mutex_t flight_lock;
    pthread_cond_t room, work;
    bool waiter;
    int head, n_flight;
    ocl_flight flight[OCL_FLIGHT_RING];
    _Atomic int ops;
    _Atomic size_t bytes;
    /* buffers released, for the waiter to release to OpenCL (under flight_lock) */
    cl_mem *releases;
    int n_releases, cap_releases;
    size_t released_bytes; /* since the last malloc_trim */
} ocl_device;

/* ---- kernel argument structs: the same layout as the typedefs in the OpenCL source ---- */

/* Elementwise broadcasting: output element i reads input j at sum(coord_k * st[j][k]). */
typedef struct {
    cl_long n;
    cl_int rank;
    cl_int pad;
    cl_long shape[CX_MAX_RANK];
    cl_long st[3][CX_MAX_RANK];
} ocl_bcast;

/* Reductions: output g enumerates the kept axes, each output folds the reduced ones. */
typedef struct {
    cl_long nout, nred;
    cl_int krank, rrank;
    cl_long kshape[CX_MAX_RANK], kst[CX_MAX_RANK];
    cl_long rshape[CX_MAX_RANK], rst[CX_MAX_RANK];
} ocl_reduce;

/* Softmax rows: row (o, i) holds the elements o * n * inner + k * inner + i, k < n. */
typedef struct {
    cl_long outer, n, inner;
} ocl_rows;

/* layer_norm over the trailing `rank` axes of `shape` (n elements per row); gamma and beta are
 * read at sum(coord_k * gst[k]) and sum(coord_k * bst[k]). */
typedef struct {
    cl_long rows, n;
    cl_int rank;
    cl_int pad;
    cl_long shape[CX_MAX_RANK], gst[CX_MAX_RANK], bst[CX_MAX_RANK];
} ocl_norm;

/* pad: input element i (coordinates c_k) goes to output coordinates lo_k + c_k * step_k (step =
 * interior + 1), unless one falls outside oshape (cropped); the rest is the filled value. */
typedef struct {
    cl_long n;
    cl_int rank;
    cl_int pad;
    cl_long ishape[CX_MAX_RANK], lo[CX_MAX_RANK], step[CX_MAX_RANK], oshape[CX_MAX_RANK],
        ost[CX_MAX_RANK];
} ocl_pad;

/* Index checks of take and gather: entry i of the s64 indices must lie in [0, dims[i % k]). */
typedef struct {
    cl_long n;
    cl_int k;
    cl_int pad;
    cl_long dims[CX_MAX_RANK];
} ocl_index_check;

/* take: the input as {outer, dim, inner}, the output (n elements) as {outer, count, inner}. */
typedef struct {
    cl_long n, dim, count, inner;
} ocl_take;

/* gather: output element i is row i / block of the indices (k coordinates, along axes of input
 * strides ist) and element i % block of the block of the other axes (shape, input strides st). */
typedef struct {
    cl_long n, block;
    cl_int k, rank;
    cl_long ist[CX_MAX_RANK], shape[CX_MAX_RANK], st[CX_MAX_RANK];
} ocl_gather;

/* conv2d: the geometry of the im2col and output kernels (every field a long, no padding). The
 * im2col matrix is {groups, p, k}: p = n * oh * ow output positions, k = cg * kh * kw, in the
 * order (ci, ki, kj) for nchw and (ki, kj, ci) for nhwc (the order of the kernel's own axes). */
typedef struct {
    cl_long n, c, h, w, cg, og, kh, kw, oh, ow;
    cl_long s0, s1, d0, d1, lo0, lo1;
    cl_long p, k, groups, nhwc;
} ocl_conv;

/* opencl_driver.c: the kernel called `name`, from the device's program (built on first use).
 * Call with dev->lock held. NULL with the reason in st when it cannot be had. */
cl_kernel ocl_kernel(ocl_device *dev, const char *name, cx_status *st);
/* The options every program is built with (correctly rounded division and sqrt where the
 * device has them, as the cpu driver computes). */
const char *ocl_build_options(ocl_device *dev);
/* Records the op just enqueued (a marker after its commands) with the bytes it keeps alive,
 * then waits while the device has more in flight than OCL_FLIGHT_OPS or OCL_FLIGHT_BYTES. Call
 * without dev->lock. */
cx_code ocl_track(ocl_device *dev, size_t bytes, cx_status *st);
/* Reports an OpenCL error code as a CX_EDEVICE status. */
cx_code ocl_fail(cx_status *st, cl_int err, const char *what);

/* opencl_ops.c */
cx_cap ocl_capability(const ocl_device *dev, cx_op_id op, const cx_dtype *types, int n_in);
bool ocl_refine(const ocl_device *dev, cx_op_id op, const cx_desc *in, int n_in,
                const cx_params *ps, char *reason, size_t len);
cx_code ocl_execute(ocl_device *dev, cx_op_id op, const cx_tensor *const *in, int n_in,
                    const cx_params *ps, cx_tensor *out, cx_status *st);

#endif
