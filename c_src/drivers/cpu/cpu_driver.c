/* The portable C driver: host memory, every primitive for every type. The device of last resort. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cpu_kernels.h"

static cx_code cpu_probe(void **drv, cx_status *st) {
    (void)st;
    *drv = NULL;
    return CX_OK;
}

static int cpu_device_count(void *drv) {
    return 1;
}

/* The processor's model name from /proc/cpuinfo, where there is one. */
static void cpu_model(char *out, size_t len) {
    snprintf(out, len, "host processor");
    FILE *f = fopen("/proc/cpuinfo", "r");
    if (!f) return;
    char line[256];
    while (fgets(line, sizeof line, f)) {
        if (strncmp(line, "model name", 10) != 0) continue;
        char *colon = strchr(line, ':');
        if (!colon) break;
        colon += strspn(colon + 1, " \t") + 1;
        colon[strcspn(colon, "\n")] = 0;
        snprintf(out, len, "%s", colon);
        break;
    }
    fclose(f);
}

static cx_code cpu_open_device(void *drv, int index, void **dev, cx_device_props *props,
                               cx_status *st) {
    *dev = NULL;
    cpu_model(props->name, sizeof props->name);
    snprintf(props->kind, sizeof props->kind, "cpu");
    long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
    props->memory = pages > 0 && page > 0 ? (long long)pages * page : 0;
    props->host_memory = true;
    snprintf(props->detail, sizeof props->detail,
             "portable C, one thread per call; f16/bf16 computed in f32");
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

/* Every primitive for every type; composites run as their decompositions. */
static cx_cap cpu_capability(void *ctx, cx_op_id op, const cx_dtype *types, int n_in) {
    return cx_op_table[op].kind == CX_KIND_COMPOSITE ? CX_CAP_NO : CX_CAP_NATIVE;
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
    case CX_KIND_SORT: return cpu_sort(op, in[0], ps, out, st);
    case CX_KIND_SCATTER: return cpu_scatter(op, in, ps, out, st);
    case CX_KIND_SCAN: return cpu_scan(op, in[0], ps, out, st);
    case CX_KIND_WINDOW: return cpu_window(op, in, ps, out, st);
    case CX_KIND_LINALG: return cpu_linalg(op, in, ps, out, st);
    case CX_KIND_LAYOUT: return cpu_layout(op, in, n_in, ps, out, st);
    case CX_KIND_DOT: return cpu_dot(in[0], in[1], ps, out, st);
    case CX_KIND_FFT: return cpu_fft(op, in[0], ps, out, st);
    case CX_KIND_CREATE: return cpu_create(op, ps, out, st);
    case CX_KIND_COMPOSITE: break;
    }
    return cx_fail(st, CX_EUNSUPPORTED, "cpu: no kernel for %s", cx_op_table[op].name);
}

static const char *cpu_library(void *ctx, cx_op_id op, const cx_desc *in, int n_in,
                               const cx_params *ps) {
    return "portable";
}

static const cx_driver cpu_driver = {
    .abi = CX_DRIVER_ABI,
    .name = "cpu",
    .ops_signature = cx_ops_signature,
    .probe = cpu_probe,
    .device_count = cpu_device_count,
    .open_device = cpu_open_device,
    .alloc = cpu_alloc,
    .release = cpu_release,
    .upload = cpu_copy,
    .download = cpu_copy,
    .capability = cpu_capability,
    .execute = cpu_execute,
    .download_async = NULL, /* host memory: a download is a memcpy */
    .library = cpu_library,
};

const cx_driver *cx_cpu_driver(void) {
    return &cpu_driver;
}
