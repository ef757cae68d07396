/* Devices: a driver plus its context, with live memory counted. */
#ifndef CX_DEVICE_H
#define CX_DEVICE_H

#include <stdatomic.h>
#include <stdint.h>

#include "driver.h"

#define CX_MAX_DEVICES 16

typedef struct cx_device {
    const cx_driver *driver;
    void *ctx;
    int id;        /* index in the device list */
    char name[32]; /* "cpu" */
    bool available;
    char reason[256]; /* why not, when unavailable */
    _Atomic int64_t live_bytes;
    _Atomic int64_t peak_bytes;
    _Atomic int64_t live_tensors;
    _Atomic int64_t gc_mark; /* live bytes above which a collection is asked for */
} cx_device;

/* Registers and probes the built-in drivers; safe to call more than once. */
cx_code cx_devices_init(cx_status *st);
int cx_device_count(void);
cx_device *cx_device_get(int id);
/* The device with this name, or NULL. */
cx_device *cx_device_find(const char *name);

/* Bytes of new allocation after which the caller is asked to collect garbage (default 64 MiB). */
void cx_set_gc_interval(int64_t bytes);
int64_t cx_gc_interval(void);

void cx_device_count_alloc(cx_device *dev, int64_t bytes);
void cx_device_count_release(cx_device *dev, int64_t bytes);
/* True once live bytes have grown by the gc interval since the last time it returned true:
 * dropped tensors are NIF resources that only a garbage collection of their owner releases. */
bool cx_device_wants_gc(cx_device *dev);

#endif
