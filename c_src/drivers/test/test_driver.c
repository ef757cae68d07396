/* The test driver: a device double, built only for tests, that claims a fixed subset of the ops
 * so that every route of the dispatcher (native, decomposed, moved to the cpu, refused) can be
 * exercised without hardware.
 *
 * - Two devices, "test" and "test:1". Buffers are NOT host memory: a buffer handle is the
 *   address XORed with a key, so a core that dereferenced one instead of calling download would
 *   crash in the tests rather than pass by luck.
 * - Native: elementwise ops except erf, remainder and atan2; sum and reduce_max; every layout op
 *   except take and gather; as_type; full and iota; dot only when it contracts at most 64
 *   elements (a shape refinement, with a reason); the composite relu on f32 (its own kernel).
 *   Nothing in f16 or bf16. Everything else is refused, so it is decomposed or falls back.
 * - Kernels are the cpu driver's, run on the decoded buffers.
 * - Every download can be asynchronous (download_async): the copy and the completion call run on
 *   the driver's completion thread, one download after another, as a GPU's stream would. Two
 *   16-byte prefixes of the source let tests reach the rare cases: a buffer that starts with
 *   TEST_SLOW_PREFIX completes only after TEST_SLOW_MS (a download still pending while its
 *   caller dies or frees the tensor), one that starts with TEST_FAIL_PREFIX fails with
 *   CX_EDEVICE instead of copying, and download_async refuses one that starts with
 *   TEST_SYNC_PREFIX (CX_EUNSUPPORTED: the caller downloads synchronously). */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../../core/tensor.h"

#define TEST_DEVICES 2
#define HANDLE_KEY   ((uintptr_t)0x5A5A5A5A5A5A5A50u)

#define TEST_SLOW_PREFIX "cx-test:slow-dl!"
#define TEST_FAIL_PREFIX "cx-test:fail-dl!"
#define TEST_SYNC_PREFIX "cx-test:sync-dl!"
#define TEST_SLOW_MS     300

static const char signature[] =
#include "../../core/ops_signature.inc"
    ;

typedef struct {
    int index;
} test_device;

static test_device devices[TEST_DEVICES];
static int relu_op = -1; /* looked up by name: the driver needs no composite at compile time */

static void *decode(const void *handle) {
    return handle ? (void *)((uintptr_t)handle ^ HANDLE_KEY) : NULL;
}

static void *encode(void *p) {
    return p ? (void *)((uintptr_t)p ^ HANDLE_KEY) : NULL;
}

static cx_code test_probe(void **drv, cx_status *st) {
    *drv = devices;
    relu_op = cx_op_find("relu");
    return CX_OK;
}

static int test_device_count(void *drv) {
    return TEST_DEVICES;
}

static cx_code test_open_device(void *drv, int index, void **dev, cx_device_props *props,
                                cx_status *st) {
    devices[index].index = index;
    *dev = &devices[index];
    snprintf(props->name, sizeof props->name, "test device %d", index);
    snprintf(props->kind, sizeof props->kind, "test");
    props->memory = 1LL << 30;
    props->host_memory = false;
    snprintf(props->detail, sizeof props->detail,
             "a test double: a fixed subset of the ops, no f16/bf16, dot up to 64 contracted");
    return CX_OK;
}

static cx_code test_alloc(void *dev, size_t bytes, void **out, cx_status *st) {
    void *p = malloc(bytes ? bytes : 1);
    if (!p) return cx_fail(st, CX_ENOMEM, "test: could not allocate %zu bytes", bytes);
    *out = encode(p);
    return CX_OK;
}

static void test_release(void *dev, void *buffer) {
    free(decode(buffer));
}

static cx_code test_upload(void *dev, void *dst, const void *src, size_t bytes, cx_status *st) {
    if (bytes) memcpy(decode(dst), src, bytes);
    return CX_OK;
}

static cx_code test_download(void *dev, void *dst, const void *src, size_t bytes, cx_status *st) {
    if (bytes) memcpy(dst, decode(src), bytes);
    return CX_OK;
}

/* ---- asynchronous downloads: one completion thread, started on first use ------------------ */

typedef struct pending_download {
    void *dst;
    const void *src; /* decoded */
    size_t bytes;
    cx_download_done done;
    void *ctx;
    struct pending_download *next;
} pending_download;

static pthread_mutex_t queue_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t queue_work = PTHREAD_COND_INITIALIZER;
static pending_download *queue_head, *queue_tail;
static bool completer_started;

static bool has_prefix(const pending_download *p, const char *prefix) {
    return p->bytes >= 16 && memcmp(p->src, prefix, 16) == 0;
}

static void *completer_main(void *arg) {
    (void)arg;
    for (;;) {
        pthread_mutex_lock(&queue_lock);
        while (!queue_head) pthread_cond_wait(&queue_work, &queue_lock);
        pending_download *p = queue_head;
        queue_head = p->next;
        if (!queue_head) queue_tail = NULL;
        pthread_mutex_unlock(&queue_lock);

        if (has_prefix(p, TEST_SLOW_PREFIX))
            nanosleep(&(struct timespec){0, TEST_SLOW_MS * 1000000L}, NULL);
        if (has_prefix(p, TEST_FAIL_PREFIX)) {
            p->done(p->ctx, CX_EDEVICE,
                    "test: the download failed (injected: the buffer starts with " TEST_FAIL_PREFIX
                    ")");
        } else {
            if (p->bytes) memcpy(p->dst, p->src, p->bytes);
            p->done(p->ctx, CX_OK, NULL);
        }
        free(p);
    }
    return NULL;
}

static cx_code test_download_async(void *dev, void *dst, const void *src, size_t bytes,
                                   cx_download_done done, void *ctx, cx_status *st) {
    pending_download *p = malloc(sizeof *p);
    if (!p) return cx_fail(st, CX_ENOMEM, "test: out of host memory");
    *p = (pending_download){dst, decode(src), bytes, done, ctx, NULL};
    if (has_prefix(p, TEST_SYNC_PREFIX)) {
        free(p);
        return cx_fail(st, CX_EUNSUPPORTED, "test: this one downloads synchronously (injected)");
    }
    pthread_mutex_lock(&queue_lock);
    if (!completer_started) {
        /* detached: it lives as long as the process, as the driver (never unloaded) does */
        pthread_t thread;
        pthread_attr_t attr;
        pthread_attr_init(&attr);
        pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
        completer_started = pthread_create(&thread, &attr, completer_main, NULL) == 0;
        pthread_attr_destroy(&attr);
        if (!completer_started) {
            pthread_mutex_unlock(&queue_lock);
            free(p);
            return cx_fail(st, CX_EDEVICE, "test: could not start the completion thread");
        }
    }
    if (queue_tail)
        queue_tail->next = p;
    else
        queue_head = p;
    queue_tail = p;
    pthread_cond_signal(&queue_work);
    pthread_mutex_unlock(&queue_lock);
    return CX_OK;
}

static cx_cap test_capability(void *dev, cx_op_id op, const cx_dtype *types, int n_in) {
    /* creation ops: types[0] is the result's type */
    for (int k = 0; k < (n_in ? n_in : 1); k++)
        if (types[k] == CX_F16 || types[k] == CX_BF16) return CX_CAP_NO;
    if ((int)op == relu_op) return n_in == 1 && types[0] == CX_F32 ? CX_CAP_NATIVE : CX_CAP_NO;
    switch (op) {
    case CX_OP_ERF:
    case CX_OP_REMAINDER:
    case CX_OP_ATAN2:
    case CX_OP_TAKE:
    case CX_OP_GATHER: return CX_CAP_NO;
    case CX_OP_SUM:
    case CX_OP_REDUCE_MAX:
    case CX_OP_FULL:
    case CX_OP_IOTA: return CX_CAP_NATIVE;
    case CX_OP_DOT: return CX_CAP_SHAPE;
    default: break;
    }
    switch (cx_op_table[op].kind) {
    case CX_KIND_UNARY:
    case CX_KIND_UNARY_FLOAT:
    case CX_KIND_BINARY:
    case CX_KIND_BINARY_FLOAT:
    case CX_KIND_COMPARE:
    case CX_KIND_LOGICAL:
    case CX_KIND_SELECT:
    case CX_KIND_CAST:
    case CX_KIND_LAYOUT: return CX_CAP_NATIVE;
    default: return CX_CAP_NO;
    }
}

static bool test_refine(void *dev, cx_op_id op, const cx_desc *in, int n_in, const cx_params *ps,
                        char *reason, size_t len) {
    if (op != CX_OP_DOT) return true;
    const cx_param *ca = cx_param_get(ps, CX_P_CONTRACT_A);
    int64_t k = 1;
    for (int j = 0; ca && j < ca->n; j++) k *= in[0].shape[ca->i[j]];
    if (k <= 64) return true;
    snprintf(reason, len, "dot contracts %lld elements, more than the test device's 64",
             (long long)k);
    return false;
}

static cx_code test_execute(void *dev, cx_op_id op, const cx_tensor *const *in, int n_in,
                            const cx_params *ps, cx_tensor *out, cx_status *st) {
    if ((int)op == relu_op) {
        const float *x = decode(in[0]->data);
        float *y = decode(out->data);
        /* NaN stays NaN, as max(x, 0) keeps it (the honesty test caught a kernel that did not) */
        for (int64_t k = 0; k < out->numel; k++) y[k] = x[k] > 0 || x[k] != x[k] ? x[k] : 0.0f;
        return CX_OK;
    }
    /* the cpu kernels read only type, shape and data: give them decoded views */
    cx_tensor views_small[8];
    const cx_tensor *args_small[8];
    cx_tensor *views = n_in <= 8 ? views_small : malloc(sizeof(cx_tensor) * (size_t)n_in);
    const cx_tensor **args = n_in <= 8 ? args_small : malloc(sizeof(cx_tensor *) * (size_t)n_in);
    if (!views || !args) {
        if (views != views_small) free(views);
        if (args != args_small) free(args);
        return cx_fail(st, CX_ENOMEM, "test: out of host memory");
    }
    for (int k = 0; k < n_in; k++) {
        memcpy((void *)&views[k], (const void *)in[k], sizeof views[k]);
        views[k].data = decode(in[k]->data);
        args[k] = &views[k];
    }
    cx_tensor res;
    memcpy((void *)&res, (const void *)out, sizeof res);
    res.data = decode(out->data);
    cx_code rc = cx_cpu_driver()->execute(NULL, op, args, n_in, ps, &res, st);
    if (views != views_small) free(views);
    if (args != args_small) free(args);
    return rc;
}

static const cx_driver test_driver = {
    .abi = CX_DRIVER_ABI,
    .name = "test",
    .ops_signature = signature,
    .probe = test_probe,
    .device_count = test_device_count,
    .open_device = test_open_device,
    .alloc = test_alloc,
    .release = test_release,
    .upload = test_upload,
    .download = test_download,
    .capability = test_capability,
    .refine = test_refine,
    .execute = test_execute,
    .download_async = test_download_async,
};

__attribute__((visibility("default"))) const cx_driver *cx_driver_entry(void) {
    return &test_driver;
}
