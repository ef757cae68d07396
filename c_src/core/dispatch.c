#include "dispatch.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "graph.h"

const char *cx_route_name(cx_route r) {
    switch (r) {
    case CX_ROUTE_NATIVE: return "native";
    case CX_ROUTE_DECOMPOSED: return "decomposed";
    case CX_ROUTE_FALLBACK: return "cpu_fallback";
    default: return "unknown";
    }
}

/* ---- policy ------------------------------------------------------------------------------- */

static _Atomic int policy = CX_POLICY_WARN;

void cx_set_policy(cx_policy p) {
    atomic_store(&policy, (int)p);
}

cx_policy cx_get_policy(void) {
    return (cx_policy)atomic_load(&policy);
}

/* ---- stats -------------------------------------------------------------------------------- */

static _Atomic long long stat_calls[CX_MAX_DEVICES][CX_OP_COUNT + 1][CX_ROUTE_COUNT];
static _Atomic long long stat_bytes[CX_MAX_DEVICES][CX_OP_COUNT + 1][CX_ROUTE_COUNT];

static void count(const cx_device *dev, int op, cx_route r, long long bytes) {
    atomic_fetch_add_explicit(&stat_calls[dev->id][op][r], 1, memory_order_relaxed);
    if (bytes) atomic_fetch_add_explicit(&stat_bytes[dev->id][op][r], bytes, memory_order_relaxed);
}

/* Native calls by library: a few slots per (device, op), each a driver's static name claimed once.
 * A native call is counted once, under its library where it has one and a slot (cx_stats_get adds
 * the slots to the route's own count), else under the route: one atomic addition a call instead
 * of two (a one-element add made both). */
#define LIB_SLOTS 4
static _Atomic(const char *) lib_name[CX_MAX_DEVICES][CX_OP_COUNT][LIB_SLOTS];
static _Atomic long long lib_calls[CX_MAX_DEVICES][CX_OP_COUNT][LIB_SLOTS];

/* Whether the call was counted under its library. */
static bool count_library(const cx_device *dev, int op, const char *library) {
    if (!library || op < 0 || op >= CX_OP_COUNT) return false;
    for (int k = 0; k < LIB_SLOTS; k++) {
        const char *have = atomic_load(&lib_name[dev->id][op][k]);
        if (!have && atomic_compare_exchange_strong(&lib_name[dev->id][op][k], &have, library))
            have = library;
        if (have == library || strcmp(have, library) == 0) {
            atomic_fetch_add_explicit(&lib_calls[dev->id][op][k], 1, memory_order_relaxed);
            return true;
        }
    }
    return false;
}

int cx_stats_libraries(int device_id, int op, const char **names, long long *calls, int max) {
    if (device_id < 0 || device_id >= CX_MAX_DEVICES || op < 0 || op >= CX_OP_COUNT) return 0;
    int n = 0;
    for (int k = 0; k < LIB_SLOTS && n < max; k++) {
        const char *name = atomic_load(&lib_name[device_id][op][k]);
        long long c = atomic_load(&lib_calls[device_id][op][k]);
        if (name && c > 0) {
            names[n] = name;
            calls[n++] = c;
        }
    }
    return n;
}

cx_stat cx_stats_get(int device_id, int op, cx_route route) {
    cx_stat s = {0, 0};
    if (device_id < 0 || device_id >= CX_MAX_DEVICES || op < 0 || op > CX_OP_COUNT ||
        route >= CX_ROUTE_COUNT)
        return s;
    s.calls = atomic_load(&stat_calls[device_id][op][route]);
    s.bytes = atomic_load(&stat_bytes[device_id][op][route]);
    if (route == CX_ROUTE_NATIVE && op < CX_OP_COUNT)
        for (int k = 0; k < LIB_SLOTS; k++) s.calls += atomic_load(&lib_calls[device_id][op][k]);
    return s;
}

void cx_stats_reset(void) {
    for (int d = 0; d < CX_MAX_DEVICES; d++)
        for (int o = 0; o <= CX_OP_COUNT; o++)
            for (int r = 0; r < CX_ROUTE_COUNT; r++) {
                atomic_store(&stat_calls[d][o][r], 0);
                atomic_store(&stat_bytes[d][o][r], 0);
            }
    for (int d = 0; d < CX_MAX_DEVICES; d++)
        for (int o = 0; o < CX_OP_COUNT; o++)
            for (int k = 0; k < LIB_SLOTS; k++) atomic_store(&lib_calls[d][o][k], 0);
}

void cx_stats_count_transfer(int device_id, long long bytes) {
    cx_device *dev = cx_device_get(device_id);
    if (dev) count(dev, CX_OP_COUNT, CX_ROUTE_NATIVE, bytes);
}

/* ---- warnings ----------------------------------------------------------------------------- */

#define WARN_SEEN    512
#define WARN_PENDING 16

static pthread_mutex_t warn_lock = PTHREAD_MUTEX_INITIALIZER;
static uint64_t warn_seen[WARN_SEEN];
static int warn_seen_n;
static char warn_queue[WARN_PENDING][512];
static int warn_head, warn_count;
static _Atomic int warn_pending;

static uint64_t hash_str(uint64_t h, const char *s) {
    for (; *s; s++) h = (h ^ (unsigned char)*s) * UINT64_C(0x100000001b3);
    return h;
}

/* Queues a report unless one was queued for the same (device, op, type, reason). */
static void warn_once(const cx_device *dev, cx_op_id op, cx_dtype t, const char *reason,
                      const char *text) {
    uint64_t h = UINT64_C(0xcbf29ce484222325);
    h = hash_str(h, dev->name);
    h = hash_str(h, cx_op_table[op].name);
    h = hash_str(h, cx_dtype_name(t));
    h = hash_str(h, reason);
    pthread_mutex_lock(&warn_lock);
    bool seen = false;
    for (int k = 0; k < warn_seen_n && !seen; k++) seen = warn_seen[k] == h;
    if (!seen) {
        if (warn_seen_n < WARN_SEEN) warn_seen[warn_seen_n++] = h;
        if (warn_count < WARN_PENDING) {
            snprintf(warn_queue[(warn_head + warn_count) % WARN_PENDING], 512, "%s", text);
            warn_count++;
            atomic_store(&warn_pending, warn_count);
        }
    }
    pthread_mutex_unlock(&warn_lock);
}

int cx_warnings_pending(void) {
    return atomic_load_explicit(&warn_pending, memory_order_relaxed);
}

bool cx_warning_take(char *buf, size_t len) {
    pthread_mutex_lock(&warn_lock);
    bool any = warn_count > 0;
    if (any) {
        snprintf(buf, len, "%s", warn_queue[warn_head]);
        warn_head = (warn_head + 1) % WARN_PENDING;
        warn_count--;
        atomic_store(&warn_pending, warn_count);
    }
    pthread_mutex_unlock(&warn_lock);
    return any;
}

/* ---- the memo: the driver's answer per (device, op, types, ranks) ----------------------- */

#define MEMO_SLOTS 4096
#define MEMO_PROBE 8

/* A slot holds key << 2 | (cap + 1) in one word, so readers need no lock; 0 is empty. */
static _Atomic uint64_t memo[MEMO_SLOTS];

/* The key, or 0 when the call has too many inputs to be memoized. Every field has a fixed
 * place: the inputs' (type, rank) bytes in bits 0-31 (a creation op's result type in bits 0-3),
 * the input count in 32-34, the op in 35-42, the device in 43-60, and bit 61 set so that no key
 * is 0. (The fields were once shifted in one after another, so that keys of different input
 * counts could coincide: one device's answer for a creation op could be read as another's for
 * a unary op, depending on which was asked first.) */
static uint64_t memo_key(const cx_device *dev, cx_op_id op, const cx_dtype *types,
                         const cx_desc *in, int n_in) {
    if (n_in > 4) return 0;
    _Static_assert(CX_DTYPE_COUNT <= 16 && CX_OP_COUNT <= 256 && CX_MAX_DEVICES <= (1 << 18),
                   "memo keys hold a type in 4 bits, an op in 8, a device in 18");
    uint64_t key = (uint64_t)dev->id << 43 | (uint64_t)op << 35 | (uint64_t)n_in << 32;
    for (int k = 0; k < n_in; k++) {
        if (in[k].rank > 15) return 0; /* a rank in 4 bits: rank 16 is asked each time */
        key |= ((uint64_t)types[k] << 4 | (uint64_t)in[k].rank) << (8 * k);
    }
    if (n_in == 0) key |= (uint64_t)types[0]; /* creation: the result's type */
    return key | UINT64_C(1) << 61;
}

static uint32_t memo_slot(uint64_t key) {
    return (uint32_t)((key * UINT64_C(0x9E3779B97F4A7C15)) >> 52) % MEMO_SLOTS;
}

static int memo_find(uint64_t key) {
    uint32_t s = memo_slot(key);
    for (int k = 0; k < MEMO_PROBE; k++) {
        uint64_t w = atomic_load_explicit(&memo[(s + k) % MEMO_SLOTS], memory_order_acquire);
        if (w == 0) return -1;
        if (w >> 2 == (key & (UINT64_MAX >> 2))) return (int)(w & 3) - 1;
    }
    return -1;
}

static void memo_store(uint64_t key, cx_cap cap) {
    uint64_t w = (key & (UINT64_MAX >> 2)) << 2 | (uint64_t)(cap + 1);
    uint32_t s = memo_slot(key);
    for (int k = 0; k < MEMO_PROBE; k++) {
        uint64_t expected = 0;
        _Atomic uint64_t *slot = &memo[(s + k) % MEMO_SLOTS];
        if (atomic_compare_exchange_strong(slot, &expected, w) || expected == w) return;
    }
    /* full neighbourhood: the answer is simply asked again next time */
}

static cx_cap capability(cx_device *dev, cx_op_id op, const cx_dtype *types, const cx_desc *in,
                         int n_in) {
    uint64_t key = memo_key(dev, op, types, in, n_in);
    if (key) {
        int c = memo_find(key);
        if (c >= 0) return (cx_cap)c;
    }
    cx_cap c = dev->driver->capability(dev->ctx, op, types, n_in);
    if (c != CX_CAP_NATIVE && c != CX_CAP_SHAPE) c = CX_CAP_NO;
    if (c == CX_CAP_SHAPE && !dev->driver->refine) c = CX_CAP_NO;
    if (key) memo_store(key, c);
    return c;
}

/* ---- choosing the route ------------------------------------------------------------------- */

/* Appends s to the string in buf (room for len bytes), truncating: the reasons below are built
 * on every plan that is not native, where snprintf took ~5% of a small decomposed op. */
static size_t cat(char *buf, size_t len, size_t used, const char *s) {
    while (*s && used + 1 < len) buf[used++] = *s++;
    if (used < len) buf[used] = 0;
    return used;
}

static size_t describe_types(const cx_dtype *types, int n_in, char *buf, size_t len, size_t used) {
    if (n_in == 0) {
        used = cat(buf, len, used, "a ");
        used = cat(buf, len, used, cx_dtype_name(types[0]));
        return cat(buf, len, used, " result");
    }
    for (int k = 0; k < n_in && k < 4; k++) {
        if (k) used = cat(buf, len, used, ", ");
        used = cat(buf, len, used, cx_dtype_name(types[k]));
    }
    return n_in > 4 ? cat(buf, len, used, ", ...") : used;
}

/* "the <driver> driver has no native <op> for <types>" */
static void no_native(const cx_device *dev, cx_op_id op, const cx_dtype *types, int n_in, char *buf,
                      size_t len) {
    size_t used = cat(buf, len, 0, "the ");
    used = cat(buf, len, used, dev->driver_name);
    used = cat(buf, len, used, " driver has no native ");
    used = cat(buf, len, used, cx_op_table[op].name);
    used = cat(buf, len, used, " for ");
    describe_types(types, n_in, buf, len, used);
}

/* What runs op natively on dev for inputs `in` in the compute types: the driver's answer, or its
 * name. */
static const char *library_of(cx_device *dev, cx_op_id op, const cx_desc *in, int n_in,
                              const cx_dtype *compute, const cx_params *ps) {
    const char *lib = NULL;
    if (dev->driver->library) {
        cx_desc d[8];
        if (n_in <= 8) {
            for (int k = 0; k < n_in; k++) {
                d[k] = in[k];
                d[k].dtype = compute[k];
            }
            lib = dev->driver->library(dev->ctx, op, d, n_in, ps);
        }
    }
    return lib ? lib : dev->driver_name;
}

/* The library of a route: the device's for native, the cpu's for cpu_fallback. */
static const char *route_library(cx_device *dev, cx_route route, cx_op_id op, const cx_desc *in,
                                 int n_in, const cx_dtype *compute, const cx_params *ps) {
    if (route == CX_ROUTE_NATIVE) return library_of(dev, op, in, n_in, compute, ps);
    if (route == CX_ROUTE_FALLBACK && cx_op_table[op].kind != CX_KIND_COMPOSITE)
        return library_of(cx_device_cpu(), op, in, n_in, compute, ps);
    return NULL;
}

/* True when not one step of the decomposition of composite `op` would run natively on `dev`:
 * then moving the composite's inputs to the cpu once beats moving every step's. */
static bool decomposition_all_moved(cx_device *dev, cx_op_id op, const cx_desc *in, int n_in,
                                    const cx_params *ps) {
    cx_explain ex = {0};
    cx_status st = {CX_OK, ""};
    bool all_moved = cx_graph_plan(op, dev, in, n_in, ps, &ex, 1, &st) == CX_OK && ex.n > 0;
    for (int k = 0; k < ex.n && all_moved; k++)
        if (ex.steps[k].route == CX_ROUTE_NATIVE) all_moved = false;
    cx_explain_free(&ex);
    return all_moved;
}

/* The answer of decomposition_all_moved is kept per scheduler thread for the last few
 * (composite, device, inputs, normalised parameters): planning the whole decomposition again on
 * every call took about a fifth of a small decomposed op (a 10 x 10 mean), and the answer
 * depends on nothing else (the drivers' answers are fixed once they are loaded). Parameters
 * are compared as a serialisation of the set ones; calls whose parameters do not fit are
 * planned every time. */
#define MOVED_SLOTS     8
#define MOVED_MAX_IN    4
#define MOVED_KEY_BYTES 320

typedef struct {
    cx_op_id op;
    int n_in; /* 0: empty slot */
    const cx_device *device;
    cx_desc in[MOVED_MAX_IN];
    int key_len;
    unsigned char key[MOVED_KEY_BYTES];
    bool all_moved;
} moved_entry;

static __thread moved_entry moved_cache[MOVED_SLOTS];
static __thread unsigned moved_next;

/* The set parameters as bytes (id, count, values), or -1 when they do not fit. */
static int params_key(const cx_params *ps, unsigned char *key) {
    int len = 0;
    for (uint64_t bits = ps->set; bits; bits &= bits - 1) {
        int id = __builtin_ctzll(bits);
        const cx_param *p = &ps->p[id];
        int n = cx_param_ints(p);
        bool number = cx_param_table[id].kind == CX_PK_NUMBER;
        int need = 2 + (number ? 1 + (int)sizeof(double) : 0) + n * (int)sizeof(int64_t);
        if (len + need > MOVED_KEY_BYTES) return -1;
        key[len++] = (unsigned char)id;
        key[len++] = (unsigned char)n;
        if (number) {
            key[len++] = p->is_int;
            memcpy(key + len, &p->f, sizeof(double));
            len += (int)sizeof(double);
        }
        memcpy(key + len, p->i, sizeof(int64_t) * (size_t)n);
        len += n * (int)sizeof(int64_t);
    }
    return len;
}

static bool same_descs(const cx_desc *a, const cx_desc *b, int n) {
    for (int k = 0; k < n; k++)
        if (a[k].dtype != b[k].dtype || !cx_desc_same_shape(&a[k], &b[k])) return false;
    return true;
}

static bool decomposition_all_moved_kept(cx_device *dev, cx_op_id op, const cx_desc *in, int n_in,
                                         const cx_params *ps) {
    moved_entry probe;
    probe.key_len = n_in <= MOVED_MAX_IN ? params_key(ps, probe.key) : -1;
    if (probe.key_len < 0) return decomposition_all_moved(dev, op, in, n_in, ps);
    for (int s = 0; s < MOVED_SLOTS; s++) {
        const moved_entry *e = &moved_cache[s];
        if (e->n_in == n_in && e->op == op && e->device == dev && e->key_len == probe.key_len &&
            same_descs(e->in, in, n_in) && memcmp(e->key, probe.key, (size_t)probe.key_len) == 0)
            return e->all_moved;
    }
    bool all_moved = decomposition_all_moved(dev, op, in, n_in, ps);
    if (n_in > 0) { /* a composite creation op would look empty */
        moved_entry *e = &moved_cache[moved_next++ % MOVED_SLOTS];
        e->op = op;
        e->n_in = n_in;
        e->device = dev;
        memcpy(e->in, in, sizeof(cx_desc) * (size_t)n_in);
        e->key_len = probe.key_len;
        memcpy(e->key, probe.key, (size_t)probe.key_len);
        e->all_moved = all_moved;
    }
    return all_moved;
}

/* Whether the device converts an input of type `from` into `to` natively: a native route casts
 * its inputs to the compute types on the device, so an input type the device cannot convert
 * makes the whole op take another route. */
static bool casts_natively(cx_device *dev, const cx_desc *from, cx_dtype to) {
    if (from->dtype == to) return true;
    cx_cap c = capability(dev, CX_OP_AS_TYPE, &from->dtype, from, 1);
    if (c == CX_CAP_NATIVE) return true;
    if (c != CX_CAP_SHAPE) return false;
    cx_params cps;
    cx_params_clear(&cps);
    cx_param_put_int(&cps, CX_P_TYPE, to);
    char why[160];
    return dev->driver->refine(dev->ctx, CX_OP_AS_TYPE, from, 1, &cps, why, sizeof why);
}

static cx_code choose_route(cx_device *dev, cx_op_id op, const cx_desc *in, int n_in,
                            const cx_dtype *compute, const cx_params *ps, cx_route *route,
                            char *reason, size_t len, cx_status *st) {
    reason[0] = 0;
    if (!dev->available)
        return cx_fail(st, CX_EDEVICE, "device %s is unavailable: %s", dev->name, dev->reason);
    cx_cap c = capability(dev, op, compute, in, n_in);
    for (int k = 0; c != CX_CAP_NO && in && k < n_in; k++)
        if (!casts_natively(dev, &in[k], compute[k])) {
            snprintf(reason, len, "the %s driver cannot convert %s into %s", dev->driver_name,
                     cx_dtype_name(in[k].dtype), cx_dtype_name(compute[k]));
            c = CX_CAP_NO;
        }
    if (c == CX_CAP_SHAPE) {
        char why[160] = "";
        if (dev->driver->refine(dev->ctx, op, in, n_in, ps, why, sizeof why)) {
            *route = CX_ROUTE_NATIVE;
            return CX_OK;
        }
        snprintf(reason, len, "%s: %s", dev->driver_name, why[0] ? why : "shape not supported");
    } else if (c == CX_CAP_NATIVE) {
        *route = CX_ROUTE_NATIVE;
        return CX_OK;
    } else if (!reason[0]) {
        no_native(dev, op, compute, n_in, reason, len);
    }
    if (cx_op_table[op].kind == CX_KIND_COMPOSITE) {
        *route = CX_ROUTE_DECOMPOSED;
        if (dev != cx_device_cpu() && decomposition_all_moved_kept(dev, op, in, n_in, ps)) {
            cat(reason, len, strlen(reason), ", nor any step of its decomposition");
            *route = CX_ROUTE_FALLBACK;
        }
        return CX_OK;
    }
    if (dev == cx_device_cpu())
        return cx_fail(st, CX_EUNSUPPORTED, "%s: no route (%s)", cx_op_table[op].name, reason);
    *route = CX_ROUTE_FALLBACK;
    return CX_OK;
}

/* ---- planning ----------------------------------------------------------------------------- */

/* Relative cost of one element of an op, so that the NIF layer's threshold for moving a call
 * to a dirty scheduler holds for slow functions too. The unit is one element of most elementwise
 * ops, about a nanosecond (the scale normal_watch.c's threshold assumes). Measured with libm on
 * this project's machine: transcendental functions cost several units (sin of huge arguments
 * more), fmod far more when the exponents are far apart (so remainder counts as the worst). */
static double work_per_element(cx_op_id op) {
    if (op == CX_OP_REMAINDER) return 1536;
    /* Philox: a uniform costs several units, a normal a few times that (log, sqrt, sin/cos) */
    if (op == CX_OP_RANDOM_NORMAL) return 48;
    if (op == CX_OP_RANDOM_UNIFORM) return 16;
    if (op == CX_OP_POW || cx_op_table[op].kind == CX_KIND_UNARY_FLOAT ||
        cx_op_table[op].kind == CX_KIND_BINARY_FLOAT)
        return 16;
    /* a decomposition makes several passes, some of them transcendental */
    if (cx_op_table[op].kind == CX_KIND_COMPOSITE) return 32;
    return 1;
}

/* How much faster than the portable loops the library that runs an op is, as a factor on the
 * cost above, so that the estimate stays near nanoseconds: the vector kernels (blas: "avx2",
 * "avx512") run 8 or 16 lanes on every core, and OpenBLAS's products are faster still. Measured
 * on this project's 2-core machines: a 1M-element f32 add (cost 3M) and a sum of 1M; exp, tanh
 * and gelu of 1M, softmax and layer_norm of 1000 x 1000 (2M elements in and out: one factor per
 * element, whatever the op's weight above); a 256 x 256 product (cost 17M). dense on OpenBLAS is
 * its product (and its composite weight does not apply): a 64 x 784 by 784 x 256 layer, 12.8M
 * multiply-adds. The factors stay on the slow side of those measurements. Other libraries
 * (oneDNN's convolutions, whose cost above leaves out the kernel's window) keep the portable
 * estimate. */
static double library_speed(const char *library, cx_op_id op) {
    if (!library) return 1;
    if (strcmp(library, "avx2") == 0 || strcmp(library, "avx512") == 0)
        return work_per_element(op) > 1 ? 0.2 / work_per_element(op) : 0.05;
    /* oneDNN's products too (bf16 ones run faster): they never wait for its one thread
     * (blas_dnnl.c), and run on OpenBLAS when another call has it. Its convolutions do wait,
     * behind another process's perhaps, which only a dirty scheduler may do. */
    bool gemm = strcmp(library, "openblas") == 0 || strcmp(library, "onednn") == 0;
    if (gemm && op == CX_OP_DOT) return 0.02;
    if (gemm && op == CX_OP_DENSE) return 0.02 / work_per_element(op);
    return 1;
}

static cx_code check_op(cx_op_id op, int n_in, cx_status *st) {
    if ((int)op < 0 || op >= CX_OP_COUNT)
        return cx_fail(st, CX_EINVAL, "unknown op id %d", (int)op);
    if (n_in < 0 || n_in > CX_MAX_INPUTS)
        return cx_fail(st, CX_EINVAL, "%s: expected at most %d tensors, got: %d",
                       cx_op_table[op].name, CX_MAX_INPUTS, n_in);
    return CX_OK;
}

cx_code cx_plan_op(cx_op_id op, cx_device *device, const cx_tensor *const *in, int n_in,
                   cx_params *ps, cx_plan *plan, cx_status *st) {
    if (check_op(op, n_in, st) != CX_OK) return st->code;
    cx_desc descs[CX_MAX_INPUTS];
    for (int k = 0; k < n_in; k++) {
        descs[k] = in[k]->desc;
        if (in[k]->device != in[0]->device)
            return cx_fail(st, CX_EINVAL,
                           "%s: expected all tensors on one device, got %s and %s (use "
                           "Cascade.transfer/2)",
                           cx_op_table[op].name, in[0]->device->name, in[k]->device->name);
    }
    return cx_plan_descs(op, n_in > 0 ? in[0]->device : device, descs, n_in, ps, plan, st);
}

/* ---- the plan cache: elementwise calls without parameters ---------------------------------
 *
 * A loop of small elementwise calls would spend a noticeable part of each call planning it again:
 * inference, the memo, the driver's library. For these ops the plan depends only on the op, the
 * device and the inputs' types and shapes (capabilities are fixed once a driver is loaded; the
 * elementwise kernels' library too), so each scheduler thread keeps its last few native plans. Only
 * native plans are kept: the others carry a reason and may warn. */

#define PLAN_CACHE_SLOTS  8
#define PLAN_CACHE_MAX_IN 3

typedef struct {
    cx_op_id op;
    int n_in; /* 0: empty slot */
    const cx_device *device;
    cx_desc in[PLAN_CACHE_MAX_IN];
    cx_desc out;
    cx_dtype compute[PLAN_CACHE_MAX_IN];
    double cost;
    const char *library;
} plan_entry;

static __thread plan_entry plan_cache[PLAN_CACHE_SLOTS];
static __thread unsigned plan_cache_next;

static bool plan_cacheable(cx_op_id op, int n_in, const cx_params *ps) {
    cx_op_kind k = cx_op_table[op].kind;
    return ps->set == 0 && n_in >= 1 && n_in <= PLAN_CACHE_MAX_IN && k >= CX_KIND_UNARY &&
           k <= CX_KIND_SELECT;
}

static const plan_entry *plan_find(cx_op_id op, const cx_device *dev, const cx_desc *in, int n_in) {
    for (int s = 0; s < PLAN_CACHE_SLOTS; s++) {
        const plan_entry *e = &plan_cache[s];
        if (e->n_in == n_in && e->op == op && e->device == dev && same_descs(e->in, in, n_in))
            return e;
    }
    return NULL;
}

static void plan_keep(const cx_plan *plan, const cx_desc *in, int n_in) {
    plan_entry *e = &plan_cache[plan_cache_next++ % PLAN_CACHE_SLOTS];
    e->op = plan->op;
    e->n_in = n_in;
    e->device = plan->device;
    for (int k = 0; k < n_in; k++) {
        e->in[k] = in[k];
        e->compute[k] = plan->compute[k];
    }
    e->out = plan->out;
    e->cost = plan->cost;
    e->library = plan->library;
}

static cx_code plan_descs(cx_op_id op, cx_device *device, const cx_desc *descs, int n_in,
                          cx_params *ps, cx_plan *plan, cx_status *st);

cx_code cx_plan_descs(cx_op_id op, cx_device *device, const cx_desc *descs, int n_in, cx_params *ps,
                      cx_plan *plan, cx_status *st) {
    if (check_op(op, n_in, st) != CX_OK) return st->code;
    if (!device || !plan_cacheable(op, n_in, ps))
        return plan_descs(op, device, descs, n_in, ps, plan, st);
    const plan_entry *e = plan_find(op, device, descs, n_in);
    if (e) {
        plan->op = op;
        plan->device = device;
        plan->route = CX_ROUTE_NATIVE;
        plan->out = e->out;
        for (int k = 0; k < n_in; k++) plan->compute[k] = e->compute[k];
        plan->cost = e->cost;
        plan->reason[0] = 0;
        plan->library = e->library;
        return CX_OK;
    }
    cx_code rc = plan_descs(op, device, descs, n_in, ps, plan, st);
    if (rc == CX_OK && plan->route == CX_ROUTE_NATIVE && ps->set == 0) plan_keep(plan, descs, n_in);
    return rc;
}

static cx_code plan_descs(cx_op_id op, cx_device *device, const cx_desc *descs, int n_in,
                          cx_params *ps, cx_plan *plan, cx_status *st) {
    double cost = 0;
    for (int k = 0; k < n_in; k++) cost += (double)cx_desc_numel(&descs[k]);
    plan->op = op;
    plan->device = device;
    if (!plan->device) return cx_fail(st, CX_EINVAL, "%s: no device given", cx_op_table[op].name);
    if (cx_infer_op(op, descs, n_in, ps, &plan->out, plan->compute, st) != CX_OK) return st->code;
    /* creation ops have no inputs: the driver is asked about the result's type */
    if (choose_route(plan->device, op, descs, n_in, n_in ? plan->compute : &plan->out.dtype, ps,
                     &plan->route, plan->reason, sizeof plan->reason, st) != CX_OK)
        return st->code;
    plan->library = route_library(plan->device, plan->route, op, descs, n_in, plan->compute, ps);
    double out_n = (double)cx_desc_numel(&plan->out);
    cost += out_n;
    if (op == CX_OP_DOT) {
        /* every output element sums over the contracted size */
        const cx_param *ca = &ps->p[CX_P_CONTRACT_A];
        double k = 1;
        for (int j = 0; j < ca->n; j++) k *= (double)descs[0].shape[ca->i[j]];
        cost += out_n * k;
    } else if (op == CX_OP_DENSE && n_in >= 2 && descs[1].rank == 2) {
        /* the same for dense's product (kernel {k, n}), and an activation counted as a
         * transcendental function per output element (scaled by OpenBLAS's factor below) */
        const cx_param *act = &ps->p[CX_P_ACTIVATION];
        bool activated = act->n > 0 && act->i[0] != CX_ACTIVATION_NONE;
        cost += out_n * ((double)descs[1].shape[0] + (activated ? 16 : 0));
    }
    plan->cost = cost * work_per_element(op) * library_speed(plan->library, op);
    return CX_OK;
}

/* ---- running ------------------------------------------------------------------------------ */

/* Casts one input to its compute type on the same device (negotiated like any op). */
static cx_code cast_input(cx_device *dev, cx_tensor *src, cx_dtype to, cx_tensor *tmp,
                          cx_status *st) {
    cx_params ps;
    cx_params_clear(&ps);
    cx_param_put_int(&ps, CX_P_TYPE, to);
    return cx_run(CX_OP_AS_TYPE, dev, &src, 1, &ps, tmp, st);
}

/* `have_out`: out already holds its buffer (cx_run_plan_into) */
static cx_code run_native(const cx_plan *plan, cx_tensor *const *in, int n_in, const cx_params *ps,
                          cx_tensor *out, bool have_out, cx_status *st) {
    cx_device *dev = plan->device;
    const cx_tensor *args_small[8];
    cx_tensor *casts_small[8];
    const cx_tensor **args = n_in <= 8 ? args_small : malloc(sizeof(*args) * (size_t)n_in);
    cx_tensor **casts = n_in <= 8 ? casts_small : calloc((size_t)n_in, sizeof(*casts));
    cx_code rc = CX_OK;
    if (!args || !casts) {
        rc = cx_fail(st, CX_ENOMEM, "out of host memory for %d arguments", n_in);
        goto done;
    }
    for (int k = 0; k < n_in; k++) casts[k] = NULL;
    for (int k = 0; k < n_in; k++) {
        args[k] = in[k];
        if (plan->compute[k] == in[k]->desc.dtype) continue;
        casts[k] = malloc(sizeof(cx_tensor));
        if (!casts[k]) {
            rc = cx_fail(st, CX_ENOMEM, "out of host memory");
            goto done;
        }
        if ((rc = cast_input(dev, in[k], plan->compute[k], casts[k], st)) != CX_OK) {
            free(casts[k]);
            casts[k] = NULL;
            goto done;
        }
        args[k] = casts[k];
    }
    if (!have_out && (rc = cx_tensor_init(out, dev, &plan->out, st)) != CX_OK) goto done;
    if ((rc = dev->driver->execute(dev->ctx, plan->op, args, n_in, ps, out, st)) != CX_OK) {
        cx_status_on_device(st, dev->name);
        cx_tensor_free(out);
    } else {
        if (!count_library(dev, plan->op, plan->library)) count(dev, plan->op, CX_ROUTE_NATIVE, 0);
    }
done:
    for (int k = 0; k < n_in && casts; k++)
        if (casts[k]) {
            cx_tensor_free(casts[k]);
            free(casts[k]);
        }
    if (args != args_small) free(args);
    if (casts != casts_small) free(casts);
    return rc;
}

/* Makes `view` a cpu tensor with the contents of `src`: the same buffer when src's device
 * keeps host memory (nothing to release), else a copy. Returns the bytes copied. */
static cx_code to_cpu(cx_tensor *src, cx_tensor *view, bool *copied, long long *bytes,
                      cx_status *st) {
    cx_device *cpu = cx_device_cpu();
    if (src->device->props.host_memory) {
        memcpy((void *)view, (const void *)src, sizeof *view);
        view->device = cpu;
        atomic_store(&view->state, 0);
        *copied = false;
        return CX_OK;
    }
    if (cx_tensor_init(view, cpu, &src->desc, st) != CX_OK) return st->code;
    if (src->device->driver->download(src->device->ctx, view->data, src->data, src->nbytes, st) !=
        CX_OK) {
        cx_tensor_free(view);
        return st->code;
    }
    *copied = true;
    *bytes += (long long)src->nbytes;
    return CX_OK;
}

static long long input_bytes(const cx_desc *in, int n_in) {
    long long b = 0;
    for (int k = 0; k < n_in; k++)
        b += (long long)cx_desc_numel(&in[k]) * (long long)cx_dtype_size(in[k].dtype);
    return b;
}

static cx_code run_fallback(const cx_plan *plan, cx_tensor *const *in, int n_in,
                            const cx_params *ps, cx_tensor *out, cx_status *st) {
    cx_device *dev = plan->device;
    const char *name = cx_op_table[plan->op].name;
    if (cx_get_policy() == CX_POLICY_ERROR)
        return cx_fail(st, CX_EUNSUPPORTED,
                       "%s on %s would move its inputs to the cpu (%s), and the fallback policy "
                       "is :error",
                       name, dev->name, plan->reason);
    cx_tensor views_small[4];
    bool copied_small[4];
    cx_tensor *views = n_in <= 4 ? views_small : calloc((size_t)n_in, sizeof(cx_tensor));
    bool *copied = n_in <= 4 ? copied_small : calloc((size_t)n_in, sizeof(bool));
    cx_tensor res;
    cx_tensor_clear(&res);
    long long bytes = 0;
    int made = 0;
    cx_code rc = CX_OK;
    if (!views || !copied) {
        rc = cx_fail(st, CX_ENOMEM, "out of host memory");
        goto done;
    }
    for (; made < n_in; made++)
        if ((rc = to_cpu(in[made], &views[made], &copied[made], &bytes, st)) != CX_OK) goto done;
    cx_tensor *args_small[4];
    cx_tensor **args = n_in <= 4 ? args_small : malloc(sizeof(cx_tensor *) * (size_t)n_in);
    if (!args) {
        rc = cx_fail(st, CX_ENOMEM, "out of host memory");
        goto done;
    }
    for (int k = 0; k < n_in; k++) args[k] = &views[k];
    cx_params local;
    cx_params_copy(&local, ps);
    rc = cx_run(plan->op, cx_device_cpu(), args, n_in, &local, &res, st);
    if (args != args_small) free(args);
    if (rc != CX_OK) goto done;
    if ((rc = cx_tensor_init(out, dev, &res.desc, st)) != CX_OK) goto done;
    if ((rc = cx_tensor_upload(out, res.data, res.nbytes, st)) != CX_OK) {
        cx_tensor_free(out);
        goto done;
    }
    if (!dev->props.host_memory) bytes += (long long)res.nbytes;
    count(dev, plan->op, CX_ROUTE_FALLBACK, bytes);
    if (cx_get_policy() == CX_POLICY_WARN) {
        char text[512];
        snprintf(text, sizeof text,
                 "Cascade: %s on %s ran on the cpu: %s; %lld bytes copied (this call). Counted in "
                 "Cascade.stats/0; set `config :cascade, fallback: :allow` to silence this or "
                 ":error to forbid it",
                 name, dev->name, plan->reason, bytes);
        warn_once(dev, plan->op, n_in ? in[0]->desc.dtype : plan->out.dtype, plan->reason, text);
    }
done:
    cx_tensor_free(&res);
    for (int k = 0; k < made; k++)
        if (copied[k]) cx_tensor_free(&views[k]);
    if (views && views != views_small) free(views);
    if (copied && copied != copied_small) free(copied);
    return rc;
}

/* cx_run_plan, or with `have_out` cx_run_plan_into (a native plan, out holding its buffer,
 * freed on failure) */
static cx_code run_plan(const cx_plan *plan, cx_tensor *const *in, int n_in, const cx_params *ps,
                        cx_tensor *out, bool have_out, cx_status *st) {
    cx_device *dev = plan->device;
    int pinned = 0;
    cx_code rc = CX_OK;
    if (!have_out) cx_tensor_clear(out);
    for (; pinned < n_in; pinned++)
        if ((rc = cx_tensor_pin(in[pinned], st)) != CX_OK) goto done;
    /* An empty result needs no work, whatever the inputs: kernels need not walk empty shapes
     * such as {2^48, 0}, which would keep a scheduler busy for days. */
    if (cx_desc_numel(&plan->out) == 0) {
        if (!have_out) rc = cx_tensor_init(out, dev, &plan->out, st);
        goto done;
    }
    switch (plan->route) {
    case CX_ROUTE_NATIVE: rc = run_native(plan, in, n_in, ps, out, have_out, st); break;
    case CX_ROUTE_DECOMPOSED:
        rc = cx_graph_run(plan->op, dev, in, n_in, ps, out, st);
        if (rc == CX_OK) count(dev, plan->op, CX_ROUTE_DECOMPOSED, 0);
        break;
    case CX_ROUTE_FALLBACK: rc = run_fallback(plan, in, n_in, ps, out, st); break;
    default: rc = cx_fail(st, CX_EINVAL, "bad route");
    }
done:
    for (int k = 0; k < pinned; k++) cx_tensor_unpin(in[k]);
    /* idempotent: run_native may have freed it already */
    if (rc != CX_OK && have_out) cx_tensor_free(out);
    return rc;
}

bool cx_device_queues(const cx_device *dev) {
    return dev && dev->driver && dev->driver->may_block;
}

bool cx_device_may_block(const cx_device *dev) {
    return cx_device_queues(dev) && dev->driver->may_block(dev->ctx, CX_OP_COUNT, NULL, 0, NULL);
}

bool cx_plan_may_block(const cx_plan *plan, const cx_tensor *const *in, int n_in,
                       const cx_params *ps) {
    const cx_device *dev = plan->device;
    if (!cx_device_queues(dev)) return false;
    if (plan->route != CX_ROUTE_NATIVE) return true;
    cx_desc descs[CX_MAX_INPUTS];
    for (int k = 0; k < n_in && k < CX_MAX_INPUTS; k++) descs[k] = in[k]->desc;
    return dev->driver->may_block(dev->ctx, plan->op, descs, n_in, ps);
}

cx_code cx_run_plan(const cx_plan *plan, cx_tensor *const *in, int n_in, const cx_params *ps,
                    cx_tensor *out, cx_status *st) {
    return run_plan(plan, in, n_in, ps, out, false, st);
}

cx_code cx_run_plan_into(const cx_plan *plan, cx_tensor *const *in, int n_in, const cx_params *ps,
                         cx_tensor *out, cx_status *st) {
    if (plan->route == CX_ROUTE_NATIVE && out->device == plan->device &&
        out->desc.dtype == plan->out.dtype && cx_desc_same_shape(&out->desc, &plan->out))
        return run_plan(plan, in, n_in, ps, out, true, st);
    cx_tensor_free(out);
    return cx_fail(st, CX_EINVAL, "%s: the buffer given does not fit the result",
                   cx_op_table[plan->op].name);
}

cx_code cx_run(cx_op_id op, cx_device *device, cx_tensor *const *in, int n_in, cx_params *ps,
               cx_tensor *out, cx_status *st) {
    cx_plan plan;
    cx_tensor_clear(out);
    if (cx_plan_op(op, device, (const cx_tensor *const *)in, n_in, ps, &plan, st) != CX_OK)
        return st->code;
    return cx_run_plan(&plan, in, n_in, ps, out, st);
}

/* ---- explain ------------------------------------------------------------------------------ */

static cx_step *add_step(cx_explain *ex, cx_status *st) {
    if (ex->n == ex->cap) {
        int cap = ex->cap ? ex->cap * 2 : 16;
        cx_step *s = realloc(ex->steps, sizeof(*s) * (size_t)cap);
        if (!s) {
            cx_fail(st, CX_ENOMEM, "out of host memory planning");
            return NULL;
        }
        ex->steps = s;
        ex->cap = cap;
    }
    cx_step *s = &ex->steps[ex->n++];
    memset(s, 0, sizeof *s);
    return s;
}

cx_code cx_explain_at(cx_op_id op, cx_device *device, const cx_desc *in, int n_in, cx_params *ps,
                      cx_explain *ex, int depth, cx_desc *out, cx_status *st) {
    if (check_op(op, n_in, st) != CX_OK) return st->code;
    if (depth > 32)
        return cx_fail(st, CX_EINVAL, "%s: decompositions nest too deep", cx_op_table[op].name);
    cx_dtype compute[CX_MAX_INPUTS];
    if (cx_infer_op(op, in, n_in, ps, out, compute, st) != CX_OK) return st->code;
    cx_step *s = add_step(ex, st);
    if (!s) return st->code;
    s->depth = depth;
    s->op = op;
    s->device = device;
    s->out = *out;
    if (choose_route(device, op, in, n_in, n_in ? compute : &out->dtype, ps, &s->route, s->reason,
                     sizeof s->reason, st) != CX_OK)
        return st->code;
    s->library = route_library(device, s->route, op, in, n_in, compute, ps);
    if (s->route == CX_ROUTE_FALLBACK && cx_desc_numel(out) > 0)
        s->bytes_moved = (device->props.host_memory ? 0 : input_bytes(in, n_in)) +
                         (device->props.host_memory ? 0
                                                    : (long long)cx_desc_numel(out) *
                                                          (long long)cx_dtype_size(out->dtype));
    if (s->route == CX_ROUTE_DECOMPOSED && cx_desc_numel(out) > 0)
        return cx_graph_plan(op, device, in, n_in, ps, ex, depth + 1, st);
    return CX_OK;
}

cx_code cx_explain_op(cx_op_id op, cx_device *device, const cx_desc *in, int n_in, cx_params *ps,
                      cx_explain *ex, cx_status *st) {
    cx_desc out;
    return cx_explain_at(op, device, in, n_in, ps, ex, 0, &out, st);
}

void cx_explain_free(cx_explain *ex) {
    free(ex->steps);
    ex->steps = NULL;
    ex->n = ex->cap = 0;
}

/* ---- capabilities ------------------------------------------------------------------------- */

cx_code cx_capability(cx_device *device, cx_op_id op, cx_dtype t, cx_route *route,
                      cx_explain *steps, cx_status *st) {
    if (check_op(op, 0, st) != CX_OK) return st->code;
    if (!device->available)
        return cx_fail(st, CX_EDEVICE, "device %s is unavailable: %s", device->name,
                       device->reason);
    if (cx_op_table[op].kind == CX_KIND_COMPOSITE) {
        cx_desc in[8];
        int n_in = 0;
        cx_params ps = {0};
        cx_op_table[op].sample(op, t, in, &n_in, &ps);
        if (cx_explain_op(op, device, in, n_in, &ps, steps, st) != CX_OK) return st->code;
        *route = steps->steps[0].route;
        /* the plan judged the sample shapes only: a composite the driver claims for some shapes
         * is marked so, as a primitive is */
        cx_dtype types[8];
        for (int k = 0; k < n_in; k++) types[k] = in[k].dtype;
        if (*route == CX_ROUTE_NATIVE && device != cx_device_cpu() &&
            capability(device, op, types, in, n_in) == CX_CAP_SHAPE) {
            steps->steps[0].shape_dependent = true;
            snprintf(steps->steps[0].reason, sizeof steps->steps[0].reason,
                     "native for some shapes only");
        }
        return CX_OK;
    }
    if (cx_op_integer_only(op) && (cx_dtype_is_float(t) || cx_dtype_is_complex(t)))
        return cx_fail(st, CX_EINVAL, "%s takes integer tensors only, not %s", cx_op_table[op].name,
                       cx_dtype_name(t));
    if (cx_dtype_is_complex(t) && !cx_op_takes_complex(op))
        return cx_fail(st, CX_EINVAL, "%s: not defined for complex numbers, got type %s",
                       cx_op_table[op].name, cx_dtype_name(t));
    /* primitives: the driver's answer for these types; tensor arguments have type t, indices
     * s64 and predicates u8 */
    cx_dtype types[3] = {t, t, t};
    cx_desc in[3] = {{t, 1, {1}}, {t, 1, {1}}, {t, 1, {1}}};
    int n = cx_op_tensor_arity(op);
    if (n < 0) n = 2;
    if (n > 3) n = 3;
    const char *args = cx_op_table[op].args;
    if (strstr(args, ":indices")) types[n - 1] = CX_S64;
    if (strstr(args, ":pred")) types[0] = CX_U8;
    for (int k = 0; k < n; k++) in[k].dtype = types[k];
    cx_cap c = capability(device, op, types, in, n);
    cx_step *s = add_step(steps, st);
    if (!s) return st->code;
    s->op = op;
    s->device = device;
    s->library = route_library(
        device, c != CX_CAP_NO || device == cx_device_cpu() ? CX_ROUTE_NATIVE : CX_ROUTE_FALLBACK,
        op, in, n, types, NULL);
    if (c == CX_CAP_NATIVE) {
        *route = CX_ROUTE_NATIVE;
    } else if (c == CX_CAP_SHAPE) {
        *route = CX_ROUTE_NATIVE;
        s->shape_dependent = true;
        snprintf(s->reason, sizeof s->reason, "native for some shapes only");
    } else {
        *route = device == cx_device_cpu() ? CX_ROUTE_NATIVE : CX_ROUTE_FALLBACK;
        no_native(device, op, types, n, s->reason, sizeof s->reason);
    }
    s->route = *route;
    return CX_OK;
}

/* ---- transfer ----------------------------------------------------------------------------- */

cx_code cx_transfer(cx_tensor *src, cx_device *to, cx_tensor *out, cx_status *st) {
    cx_tensor_clear(out);
    if (cx_tensor_pin(src, st) != CX_OK) return st->code;
    cx_code rc = cx_tensor_init(out, to, &src->desc, st);
    cx_device *from = src->device;
    if (rc == CX_OK && src->nbytes > 0) {
        if (from->props.host_memory) {
            rc = cx_tensor_upload(out, src->data, src->nbytes, st);
        } else if (to->props.host_memory) {
            rc = from->driver->download(from->ctx, out->data, src->data, src->nbytes, st);
        } else {
            void *tmp = malloc(src->nbytes);
            rc =
                tmp ? from->driver->download(from->ctx, tmp, src->data, src->nbytes, st)
                    : cx_fail(st, CX_ENOMEM, "out of host memory for a %zu-byte copy", src->nbytes);
            if (rc == CX_OK) rc = cx_tensor_upload(out, tmp, src->nbytes, st);
            free(tmp);
        }
        if (rc != CX_OK) cx_tensor_free(out);
    }
    if (rc == CX_OK) cx_stats_count_transfer(to->id, (long long)src->nbytes);
    cx_tensor_unpin(src);
    return rc;
}
