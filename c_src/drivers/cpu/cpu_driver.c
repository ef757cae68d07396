/* The portable C driver: host memory, every primitive for every type. The device of last resort. */
#include <stdlib.h>
#include <string.h>

#include "cpu_kernels.h"

static cx_code cpu_probe(void **ctx, cx_status *st) {
    (void)st;
    *ctx = NULL;
    return CX_OK;
}

static cx_code cpu_alloc(void *ctx, size_t bytes, void **out, cx_status *st) {
    (void)ctx;
    void *p = cpu_buffer_get(bytes);
    if (!p) return cx_fail(st, CX_ENOMEM, "cpu: could not allocate %zu bytes", bytes);
    *out = p;
    return CX_OK;
}

static void cpu_release(void *ctx, void *buffer) {
    (void)ctx;
    cpu_buffer_put(buffer);
}

static cx_code cpu_copy(void *ctx, void *dst, const void *src, size_t bytes, cx_status *st) {
    (void)ctx;
    (void)st;
    if (bytes) memcpy(dst, src, bytes);
    return CX_OK;
}

static bool cpu_supports(void *ctx, cx_op_id op, const cx_dtype *types, int n_in) {
    (void)ctx;
    (void)types;
    (void)n_in;
    return op >= 0 && op < CX_OP_COUNT;
}

static cx_code cpu_execute(void *ctx, cx_op_id op, const cx_tensor *const *in, int n_in,
                           const cx_params *ps, cx_tensor *out, cx_status *st) {
    (void)ctx;
    switch (cx_op_table[op].kind) {
    case CX_KIND_UNARY:
    case CX_KIND_UNARY_FLOAT:
    case CX_KIND_BINARY:
    case CX_KIND_BINARY_FLOAT:
    case CX_KIND_COMPARE:
    case CX_KIND_LOGICAL:
    case CX_KIND_SELECT: return cpu_elementwise(op, in, n_in, out, st);
    case CX_KIND_CAST: return cpu_cast(in[0], out, st);
    case CX_KIND_REDUCE:
    case CX_KIND_ARGREDUCE: return cpu_reduce(op, in[0], ps, out, st);
    case CX_KIND_LAYOUT: return cpu_layout(op, in, n_in, ps, out, st);
    case CX_KIND_DOT: return cpu_dot(in[0], in[1], ps, out, st);
    case CX_KIND_CREATE: return cpu_create(op, ps, out, st);
    }
    return cx_fail(st, CX_EUNSUPPORTED, "cpu: no kernel for %s", cx_op_table[op].name);
}

static const cx_driver cpu_driver = {
    .abi = CX_DRIVER_ABI,
    .name = "cpu",
    .host_memory = true,
    .probe = cpu_probe,
    .alloc = cpu_alloc,
    .release = cpu_release,
    .upload = cpu_copy,
    .download = cpu_copy,
    .supports = cpu_supports,
    .execute = cpu_execute,
};

const cx_driver *cx_cpu_driver(void) {
    return &cpu_driver;
}
