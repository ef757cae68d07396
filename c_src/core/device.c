#include "device.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

static cx_device devices[CX_MAX_DEVICES];
static int n_devices;
static pthread_once_t init_once = PTHREAD_ONCE_INIT;
static _Atomic int64_t gc_interval = INT64_C(4) << 20;

/* a + b for b > 0, saturating: a huge interval (collection turned off) must not overflow. */
static int64_t add_sat(int64_t a, int64_t b) {
    return a > INT64_MAX - b ? INT64_MAX : a + b;
}

/* How far above the live set a full collection is asked for. */
static int64_t major_step(void) {
    int64_t i = atomic_load(&gc_interval);
    return i > INT64_MAX / CX_GC_MAJOR_INTERVALS ? INT64_MAX : i * CX_GC_MAJOR_INTERVALS;
}

/* Lowers *mark to want if it is above. */
static void lower_to(_Atomic int64_t *mark, int64_t want) {
    int64_t m = atomic_load(mark);
    while (want < m && !atomic_compare_exchange_weak(mark, &m, want)) {
    }
}

static const cx_driver *builtins[4];
static int n_builtins;
static cx_code init_rc = CX_OK;
static char init_msg[512];

static cx_device *new_device(const char *driver_name, int index) {
    cx_device *dev = &devices[n_devices];
    memset(dev, 0, sizeof *dev);
    dev->id = n_devices++;
    dev->index = index;
    snprintf(dev->driver_name, sizeof dev->driver_name, "%s", driver_name);
    if (index == 0)
        snprintf(dev->name, sizeof dev->name, "%s", driver_name);
    else
        snprintf(dev->name, sizeof dev->name, "%.20s:%d", driver_name, index);
    atomic_store(&dev->gc_mark, atomic_load(&gc_interval));
    atomic_store(&dev->major_mark, major_step());
    return dev;
}

static void unavailable(const char *driver_name, const char *fmt, const char *detail) {
    if (n_devices == CX_MAX_DEVICES) return;
    cx_device *dev = new_device(driver_name, 0);
    snprintf(dev->reason, sizeof dev->reason, fmt, detail);
}

/* Starts a driver and registers each of its devices (or one unavailable entry, with why). */
static void add_driver(const char *name, const cx_driver *drv) {
    char why[256];
    if (drv->abi != CX_DRIVER_ABI) {
        snprintf(why, sizeof why, "driver ABI %u, expected %u (rebuild the driver)", drv->abi,
                 CX_DRIVER_ABI);
        unavailable(name, "%s", why);
        return;
    }
    if (!drv->ops_signature || strcmp(drv->ops_signature, cx_ops_signature) != 0) {
        unavailable(name, "%s", "built from another op table than the NIF library (rebuild it)");
        return;
    }
    cx_status st = {CX_OK, ""};
    void *drv_ctx = NULL;
    if (drv->probe(&drv_ctx, &st) != CX_OK) {
        unavailable(name, "%s", st.message);
        return;
    }
    int count = drv->device_count(drv_ctx);
    if (count <= 0) {
        unavailable(name, "%s", "the driver started but found no device");
        return;
    }
    for (int k = 0; k < count && n_devices < CX_MAX_DEVICES; k++) {
        cx_device *dev = new_device(drv->name, k);
        dev->driver = drv;
        st.code = CX_OK;
        if (drv->open_device(drv_ctx, k, &dev->ctx, &dev->props, &st) == CX_OK)
            dev->available = true;
        else
            snprintf(dev->reason, sizeof dev->reason, "%.255s", st.message);
    }
}

static void load_driver(const cx_driver_spec *spec) {
    for (int k = 0; k < n_devices; k++)
        if (strcmp(devices[k].driver_name, spec->name) == 0) return; /* listed twice */
    if (access(spec->path, F_OK) != 0) {
        unavailable(spec->name,
                    "not built: %s does not exist (a driver is built only where its "
                    "toolkit was found at build time)",
                    spec->path);
        return;
    }
    void *handle = dlopen(spec->path, RTLD_NOW | RTLD_LOCAL);
    if (!handle) {
        const char *err = dlerror();
        unavailable(spec->name, "could not load the driver: %s", err ? err : spec->path);
        return;
    }
    cx_driver_entry_fn entry = (cx_driver_entry_fn)dlsym(handle, "cx_driver_entry");
    const cx_driver *drv = entry ? entry() : NULL;
    if (!drv) {
        unavailable(spec->name, "%s does not export cx_driver_entry", spec->path);
        dlclose(handle);
        return;
    }
    /* the handle stays open for the life of the process: tensors may point into the driver */
    add_driver(spec->name, drv);
}

void cx_devices_add_builtin(const cx_driver *drv) {
    if (n_builtins < (int)(sizeof builtins / sizeof builtins[0])) builtins[n_builtins++] = drv;
}

static const cx_driver_spec *init_specs;
static int init_n_specs;

static void init_devices(void) {
    add_driver("cpu", cx_cpu_driver());
    if (!devices[0].available) {
        init_rc = CX_EDEVICE;
        snprintf(init_msg, sizeof init_msg, "the cpu driver did not start: %s", devices[0].reason);
        return;
    }
    for (int k = 0; k < n_builtins; k++) add_driver(builtins[k]->name, builtins[k]);
    for (int k = 0; k < init_n_specs; k++)
        if (strcmp(init_specs[k].name, "cpu") != 0) load_driver(&init_specs[k]);
}

cx_code cx_devices_init(const cx_driver_spec *specs, int n_specs, cx_status *st) {
    init_specs = specs;
    init_n_specs = n_specs;
    pthread_once(&init_once, init_devices);
    if (init_rc != CX_OK) return cx_fail(st, init_rc, "%s", init_msg);
    return CX_OK;
}

cx_device *cx_device_cpu(void) {
    return &devices[0];
}

int cx_device_count(void) {
    return n_devices;
}

cx_device *cx_device_get(int id) {
    return id >= 0 && id < n_devices ? &devices[id] : NULL;
}

cx_device *cx_device_find(const char *name) {
    for (int k = 0; k < n_devices; k++)
        if (strcmp(devices[k].name, name) == 0) return &devices[k];
    return NULL;
}

void cx_set_gc_interval(int64_t bytes) {
    if (bytes < 1) bytes = 1;
    atomic_store(&gc_interval, bytes);
    for (int k = 0; k < n_devices; k++) {
        int64_t live = atomic_load(&devices[k].live_bytes);
        atomic_store(&devices[k].gc_mark, add_sat(live, bytes));
        atomic_store(&devices[k].major_mark, add_sat(live, major_step()));
    }
}

int64_t cx_gc_interval(void) {
    return atomic_load(&gc_interval);
}

static atomic_bool reproducible;

bool cx_set_reproducible(bool on) {
    static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
    pthread_mutex_lock(&lock); /* two callers at once: the drivers end in the last one's state */
    bool was = atomic_exchange(&reproducible, on);
    for (int k = 0; k < n_devices; k++)
        if (devices[k].available && devices[k].driver->set_reproducible)
            devices[k].driver->set_reproducible(devices[k].ctx, on);
    pthread_mutex_unlock(&lock);
    return was;
}

bool cx_reproducible(void) {
    return atomic_load(&reproducible);
}

void cx_device_count_alloc(cx_device *dev, int64_t bytes) {
    int64_t live = atomic_fetch_add(&dev->live_bytes, bytes) + bytes;
    atomic_fetch_add(&dev->live_tensors, 1);
    int64_t peak = atomic_load(&dev->peak_bytes);
    while (live > peak && !atomic_compare_exchange_weak(&dev->peak_bytes, &peak, live)) {
    }
}

void cx_device_count_release(cx_device *dev, int64_t bytes) {
    int64_t live = atomic_fetch_sub(&dev->live_bytes, bytes) - bytes;
    atomic_fetch_sub(&dev->live_tensors, 1);
    /* Follow the live set down so that the next request comes one interval above it. */
    lower_to(&dev->gc_mark, add_sat(live, atomic_load(&gc_interval)));
    lower_to(&dev->major_mark, add_sat(live, major_step()));
}

static cx_gc_request wants_gc(cx_device *dev, int64_t bytes) {
    int64_t live = add_sat(atomic_load(&dev->live_bytes), bytes);
    int64_t mark = atomic_load(&dev->gc_mark);
    if (live < mark) return CX_GC_NONE;
    if (!atomic_compare_exchange_strong(&dev->gc_mark, &mark,
                                        add_sat(live, atomic_load(&gc_interval))))
        return CX_GC_NONE;
    int64_t major = atomic_load(&dev->major_mark);
    if (live >= major &&
        atomic_compare_exchange_strong(&dev->major_mark, &major, add_sat(live, major_step())))
        return CX_GC_MAJOR;
    return CX_GC_MINOR;
}

cx_gc_request cx_device_wants_gc(cx_device *dev) {
    return wants_gc(dev, 0);
}

cx_gc_request cx_device_wants_gc_before(cx_device *dev, int64_t bytes) {
    if (bytes < 0) return CX_GC_NONE;
    return wants_gc(dev, bytes);
}
