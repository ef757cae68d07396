/* Devices: a driver's device plus its context, with live memory counted. The registry holds the
 * cpu device first, then the devices of the drivers loaded with dlopen, and one unavailable
 * entry (with the reason) for each driver that could not be loaded or started. */
#ifndef CX_DEVICE_H
#define CX_DEVICE_H

#include <stdatomic.h>
#include <stdint.h>

#include "driver.h"

#define CX_MAX_DEVICES 16

typedef struct cx_device {
    const cx_driver *driver; /* NULL when the driver could not be loaded */
    void *ctx;               /* the device's context from open_device */
    int id;                  /* index in the device list */
    int index;               /* the device's index within its driver */
    char driver_name[24];    /* "cpu", "opencl" */
    char name[32];           /* "cpu", "opencl:1" */
    bool available;
    char reason[256]; /* why not, when unavailable */
    cx_device_props props;
    _Atomic int64_t live_bytes;
    _Atomic int64_t peak_bytes;
    _Atomic int64_t live_tensors;
    _Atomic int64_t gc_mark;    /* live bytes above which a collection is asked for */
    _Atomic int64_t major_mark; /* ... a full one (CX_GC_MAJOR_INTERVALS intervals) */
} cx_device;

/* A driver to load: its name and the path of its shared object. */
typedef struct {
    const char *name;
    const char *path;
} cx_driver_spec;

/* Registers the cpu driver and then loads the given drivers, in order. Only the first call does
 * anything; later calls return the result of the first. The cpu driver failing is the only
 * error: other drivers that fail are listed as unavailable. */
cx_code cx_devices_init(const cx_driver_spec *specs, int n_specs, cx_status *st);
/* Registers a driver table that is linked in (tests). Call before cx_devices_init. */
void cx_devices_add_builtin(const cx_driver *drv);
int cx_device_count(void);
cx_device *cx_device_get(int id);
/* The cpu device (id 0). */
cx_device *cx_device_cpu(void);
/* The device with this name ("cpu", "test:1"), or NULL. */
cx_device *cx_device_find(const char *name);

/* Bytes of new allocation after which the caller is asked to collect garbage (default 4 MiB):
 * a minor collection, which releases the tensors it dropped since the last one. After
 * CX_GC_MAJOR_INTERVALS intervals of growth above the live set's low point (tensors a minor
 * collection cannot reach: they outlived one before they were dropped, as the parameters of a
 * training step do), a full one. */
void cx_set_gc_interval(int64_t bytes);
int64_t cx_gc_interval(void);
#define CX_GC_MAJOR_INTERVALS 16

/* Whether the drivers choose how to run an op by timing its ways (off, the default) or by fixed
 * rules, so that a program gives the same bits on every run (on): set for every driver that
 * has such choices (cx_driver.set_reproducible). Returns the setting before. */
bool cx_set_reproducible(bool on);
bool cx_reproducible(void);

typedef enum { CX_GC_NONE = 0, CX_GC_MINOR = 1, CX_GC_MAJOR = 2 } cx_gc_request;

void cx_device_count_alloc(cx_device *dev, int64_t bytes);
void cx_device_count_release(cx_device *dev, int64_t bytes);
/* A collection request once live bytes have grown by the gc interval since the last request
 * (a major one past the major mark), else CX_GC_NONE: dropped tensors are NIF resources that
 * only a garbage collection of their owner releases. */
cx_gc_request cx_device_wants_gc(cx_device *dev);
/* The same request made before a new tensor of `bytes` is allocated, as if it were already
 * live: a collection then returns the caller's dropped tensors first, so that the new one can
 * reuse their memory, still in the caches (a loop of 1M-element adds ran faster on one buffer
 * than on three in turn). A request moves the mark above live + bytes, so the
 * allocation that follows makes no second one; a tensor of an interval or more asks again once
 * the collection has lowered the mark, so the caller, having just collected, skips the request
 * after that allocation (the NIF's OP_COLLECTED). */
cx_gc_request cx_device_wants_gc_before(cx_device *dev, int64_t bytes);

#endif
