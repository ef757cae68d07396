/* The driver ABI: the table of functions every device driver fills in. A driver knows nothing of
 * the others; only the dispatcher chooses. Drivers other than `cpu` are shared objects loaded
 * with dlopen that export
 *
 *     const cx_driver *cx_driver_entry(void);
 *
 * The core refuses a table whose `abi` is not CX_DRIVER_ABI or whose `ops_signature` differs
 * from its own (the driver was built from another op table), and lists the driver as
 * unavailable with the reason.
 *
 * A driver has a context (from probe) and one or more devices, each with its own context (from
 * open_device); every call after that gets the device's context.
 *
 * ABI 3 added download_async (optional); ABI 4 library (optional); ABI 5 set_reproducible
 * (optional); ABI 6 may_block (optional); ABI 7 epilogue (optional) and the EPILOGUE
 * parameter. */
#ifndef CX_DRIVER_H
#define CX_DRIVER_H

#include <stdbool.h>
#include <stddef.h>

#include "ops.h"

#define CX_DRIVER_ABI 7

struct cx_tensor;

/* What a driver says about an (op, input types): native, not at all, or native for some shapes
 * only — then `refine` decides per call and says why not. */
typedef enum { CX_CAP_NO = 0, CX_CAP_NATIVE = 1, CX_CAP_SHAPE = 2 } cx_cap;

typedef struct {
    char name[64];    /* what the hardware calls itself */
    char kind[16];    /* "cpu", "gpu", "accelerator", "test" */
    long long memory; /* bytes the device can hold, 0 when unknown */
    /* Buffers are host pointers that the cpu driver may read and write in place: moving a tensor
     * between this device and the cpu costs no copy. */
    bool host_memory;
    char detail[160]; /* anything a user should know, e.g. "f16 computed in f32" */
} cx_device_props;

/* How an asynchronous download ends: once, from a thread of the driver's, with CX_OK when the bytes
 * are in host memory, or with the error and its message (NULL on success). It must be quick and
 * must not call into the driver, except that it may release buffers (a tensor it holds the last
 * reference to may be destroyed in it). */
typedef void (*cx_download_done)(void *ctx, cx_code rc, const char *message);

typedef struct cx_driver {
    unsigned abi;
    const char *name;          /* "cpu", "opencl" ... also the device atom in Elixir */
    const char *ops_signature; /* the op table it was built from: ops_signature.inc */
    /* Starts the driver; *drv is passed to device_count and open_device. On failure the reason,
     * which users read in Cascade.devices/0. */
    cx_code (*probe)(void **drv, cx_status *st);
    int (*device_count)(void *drv);
    cx_code (*open_device)(void *drv, int index, void **dev, cx_device_props *props, cx_status *st);
    cx_code (*alloc)(void *dev, size_t bytes, void **out, cx_status *st);
    void (*release)(void *dev, void *buffer);
    /* Whole-buffer copies from and to host memory (download may stop after `bytes`). */
    cx_code (*upload)(void *dev, void *dst, const void *src, size_t bytes, cx_status *st);
    cx_code (*download)(void *dev, void *dst, const void *src, size_t bytes, cx_status *st);
    /* Whether execute runs `op` natively on inputs of these (compute) types; for creation ops
     * (n_in == 0) types[0] is the result's type. The answer must depend on nothing else: the
     * dispatcher memoizes it. */
    cx_cap (*capability)(void *dev, cx_op_id op, const cx_dtype *types, int n_in);
    /* For CX_CAP_SHAPE: whether these shapes and parameters are supported; when not, the reason
     * in `reason`. May be NULL when the driver never answers CX_CAP_SHAPE. */
    bool (*refine)(void *dev, cx_op_id op, const cx_desc *in, int n_in, const cx_params *ps,
                   char *reason, size_t len);
    /* Runs `op` on inputs already cast to the compute types; `out` is allocated on this device.
     * Parameters are normalised by inference (axes positive, defaults filled in). */
    cx_code (*execute)(void *dev, cx_op_id op, const struct cx_tensor *const *in, int n_in,
                       const cx_params *ps, struct cx_tensor *out, cx_status *st);
    /* Optional; NULL when downloads are synchronous only. Starts copying `bytes` from `src` into
     * host memory at `dst` and returns without waiting for the device. On CX_OK, done(ctx, ...)
     * runs exactly once, later, from a thread of the driver's (never from the caller's thread
     * inside this call, though it may run before this call returns); until it has run the
     * caller keeps `dst` and `src` alive. Any other answer means nothing was started and done
     * will not run; CX_EUNSUPPORTED asks the caller to use `download` for this one. */
    cx_code (*download_async)(void *dev, void *dst, const void *src, size_t bytes,
                              cx_download_done done, void *ctx, cx_status *st);
    /* Optional; NULL means the driver's own name. The library that runs `op` natively on inputs
     * of these descriptions (compute types) and parameters -- "openblas", "avx512", "portable"
     * -- as execute would run it: users read it in explain, stats and capabilities. A static
     * string; `ps` may be NULL (capabilities: every axis, the defaults). */
    const char *(*library)(void *dev, cx_op_id op, const cx_desc *in, int n_in,
                           const cx_params *ps);
    /* Optional; NULL for a driver that never chooses how to run an op by timing its ways of
     * running it. on: from the next call, every such choice follows a fixed rule instead (for
     * the shape, the types and the processor alone), so that the same program on the same inputs
     * and machine gives the same bits on every run; off: the driver measures again. For the
     * whole driver, whichever device it is called on; may be called at any time, from any
     * thread. */
    void (*set_reproducible)(void *dev, bool on);
    /* Optional; NULL for a driver whose execute never waits for its device. A driver that queues
     * work answers whether execute of `op` on inputs of these descriptions (their own types,
     * before any cast) and normalised parameters may now wait: the work it has in flight is at
     * its bound, or a kernel the op needs is not built yet. The NIF then runs the call on a
     * dirty scheduler, where a wait holds no normal one; a driver with may_block also gets
     * every program run there. op CX_OP_COUNT (in NULL) asks about a transfer: whether an
     * upload, or a download by `download`, would wait now for queued work. A hint that may be
     * stale by the time execute runs; quick, from any thread. */
    bool (*may_block)(void *dev, cx_op_id op, const cx_desc *in, int n_in, const cx_params *ps);
    /* Optional; NULL for a driver that runs no epilogues. Whether execute runs `op`, native on
     * its own n_op inputs in[0 .. n_op - 1] (capability and refine have said so), followed by
     * the fused chain (fused.h) in ps's EPILOGUE parameter applied to its result `out` in place:
     * the chain's value 0 is op's result, its values 1 .. n_in - n_op the inputs in[n_op ..]
     * (numbers, rows or channel vectors of out, or out's shape; of out's type). Programs ask it
     * to fold a fused step into the op whose result is that step's full input (program.c), so
     * that the chain runs on each block of the result while it is still in cache instead of as
     * a pass of its own; execute then gets all n_in inputs and the EPILOGUE parameter. */
    bool (*epilogue)(void *dev, cx_op_id op, const cx_desc *in, int n_op, int n_in,
                     const cx_desc *out, const cx_params *ps);
} cx_driver;

typedef const cx_driver *(*cx_driver_entry_fn)(void);

/* The portable C driver, always present, linked in. */
const cx_driver *cx_cpu_driver(void);

#endif
