#include "device.h"

#include <pthread.h>
#include <stdio.h>
#include <string.h>

static cx_device devices[CX_MAX_DEVICES];
static int n_devices;
static pthread_once_t init_once = PTHREAD_ONCE_INIT;
static _Atomic int64_t gc_interval = INT64_C(64) << 20;

/* a + b for b > 0, saturating: a huge interval (collection turned off) must not overflow. */
static int64_t add_sat(int64_t a, int64_t b) {
    return a > INT64_MAX - b ? INT64_MAX : a + b;
}

static void add_device(const cx_driver *drv) {
    cx_device *dev = &devices[n_devices];
    dev->driver = drv;
    dev->id = n_devices;
    snprintf(dev->name, sizeof dev->name, "%s", drv->name);
    cx_status st = {CX_OK, ""};
    if (drv->abi != CX_DRIVER_ABI) {
        snprintf(dev->reason, sizeof dev->reason, "driver ABI %u, expected %u", drv->abi,
                 CX_DRIVER_ABI);
    } else if (drv->probe(&dev->ctx, &st) == CX_OK) {
        dev->available = true;
    } else {
        snprintf(dev->reason, sizeof dev->reason, "%.255s", st.message);
    }
    atomic_store(&dev->gc_mark, atomic_load(&gc_interval));
    n_devices++;
}

static void init_devices(void) {
    add_device(cx_cpu_driver());
}

cx_code cx_devices_init(cx_status *st) {
    pthread_once(&init_once, init_devices);
    if (n_devices == 0 || !devices[0].available)
        return cx_fail(st, CX_EDEVICE, "the cpu driver did not start: %s", devices[0].reason);
    return CX_OK;
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
    for (int k = 0; k < n_devices; k++)
        atomic_store(&devices[k].gc_mark, add_sat(atomic_load(&devices[k].live_bytes), bytes));
}

int64_t cx_gc_interval(void) {
    return atomic_load(&gc_interval);
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
    int64_t want = add_sat(live, atomic_load(&gc_interval));
    int64_t mark = atomic_load(&dev->gc_mark);
    while (want < mark && !atomic_compare_exchange_weak(&dev->gc_mark, &mark, want)) {
    }
}

bool cx_device_wants_gc(cx_device *dev) {
    int64_t live = atomic_load(&dev->live_bytes);
    int64_t mark = atomic_load(&dev->gc_mark);
    if (live < mark) return false;
    return atomic_compare_exchange_strong(&dev->gc_mark, &mark,
                                          add_sat(live, atomic_load(&gc_interval)));
}
