/* The driver table: what every device driver fills in. A driver knows nothing of the others;
 * only the dispatcher chooses. Optional drivers will be loaded with dlopen and must export
 * `cx_driver_entry`, returning this table with `abi` set to CX_DRIVER_ABI. */
#ifndef CX_DRIVER_H
#define CX_DRIVER_H

#include <stdbool.h>
#include <stddef.h>

#include "ops.h"

#define CX_DRIVER_ABI 1

struct cx_tensor;

typedef struct cx_driver {
    unsigned abi;
    const char *name;
    /* Buffers are plain host pointers that the core may read and write directly. */
    bool host_memory;
    /* Starts the driver; *ctx is passed back to every call. On failure, the reason in st. */
    cx_code (*probe)(void **ctx, cx_status *st);
    cx_code (*alloc)(void *ctx, size_t bytes, void **out, cx_status *st);
    void (*release)(void *ctx, void *buffer);
    cx_code (*upload)(void *ctx, void *dst, const void *src, size_t bytes, cx_status *st);
    cx_code (*download)(void *ctx, void *dst, const void *src, size_t bytes, cx_status *st);
    /* Whether execute runs `op` natively when the inputs have the given compute types. */
    bool (*supports)(void *ctx, cx_op_id op, const cx_dtype *types, int n_in);
    /* Runs `op` on inputs already cast to the compute types; `out` is allocated. Parameters are
     * normalised by inference (axes positive, defaults filled). */
    cx_code (*execute)(void *ctx, cx_op_id op, const struct cx_tensor *const *in, int n_in,
                       const cx_params *ps, struct cx_tensor *out, cx_status *st);
} cx_driver;

/* The portable C driver, always present. */
const cx_driver *cx_cpu_driver(void);

#endif
