/* Tensors: a type and shape, the device that owns the buffer, and a pin count so that free/1
 * can run while an op reads the tensor in another thread. */
#ifndef CX_TENSOR_H
#define CX_TENSOR_H

#include <stdatomic.h>

#include "device.h"

typedef struct cx_tensor {
    cx_desc desc;
    int64_t numel;
    size_t nbytes;
    cx_device *device;
    void *data; /* the device's buffer handle; a host pointer on host-memory devices */
    /* pins in the low bits, CX_TENSOR_FREED and CX_TENSOR_RELEASED above them */
    _Atomic uint64_t state;
} cx_tensor;

#define CX_TENSOR_FREED    (UINT64_C(1) << 62)
#define CX_TENSOR_RELEASED (UINT64_C(1) << 63)
/* The buffer belongs to the caller (cx_tensor_borrow): never released, moved or freed here. */
#define CX_TENSOR_BORROWED (UINT64_C(1) << 61)

/* Makes `t` an empty, already released tensor: freeing it does nothing. */
void cx_tensor_clear(cx_tensor *t);
/* Allocates the buffer for `desc` on `dev`. On failure the tensor holds no buffer. */
cx_code cx_tensor_init(cx_tensor *t, cx_device *dev, const cx_desc *desc, cx_status *st);
/* Makes `t` a tensor of `desc` on host-memory device `dev` over the caller's buffer `data`
 * (at least desc's size): a view that ops read and write like any tensor, for as long as the
 * caller keeps `data`. Pins cost nothing, cx_tensor_free leaves it readable and cx_tensor_take
 * refuses it. Not to be shared with other threads. */
void cx_tensor_borrow(cx_tensor *t, cx_device *dev, const cx_desc *desc, void *data);
/* Keeps the buffer alive while an op reads it; CX_EFREED after free. */
cx_code cx_tensor_pin(cx_tensor *t, cx_status *st);
void cx_tensor_unpin(cx_tensor *t);
/* Marks the tensor freed; its buffer goes when the last pin drops. Idempotent. */
void cx_tensor_free(cx_tensor *t);
bool cx_tensor_is_freed(const cx_tensor *t);
/* Moves t's buffer into `into` (which then owns it) and leaves t freed without releasing it:
 * only when nothing pins t and it is not freed (false, and nothing changes, otherwise). */
bool cx_tensor_take(cx_tensor *t, cx_tensor *into);

/* Copies host bytes into / out of the tensor's buffer (whole buffer). */
cx_code cx_tensor_upload(cx_tensor *t, const void *src, size_t bytes, cx_status *st);
cx_code cx_tensor_download(const cx_tensor *t, void *dst, size_t bytes, cx_status *st);
/* Whether the tensor's driver can download without blocking the caller (download_async). */
bool cx_tensor_downloads_async(const cx_tensor *t);
/* Starts copying the first `bytes` bytes into host memory at `dst`; on CX_OK, done(ctx, rc,
 * message) runs once, later, on a driver thread (driver.h). The caller pins the tensor and keeps
 * `dst` alive until then. CX_EUNSUPPORTED: use cx_tensor_download instead. */
cx_code cx_tensor_download_async(const cx_tensor *t, void *dst, size_t bytes, cx_download_done done,
                                 void *ctx, cx_status *st);

/* take's (k = 1) or gather's (k = the axes) index check on host indices `idx` (n of them, rows
 * of k for gather) against the sizes of t's `axes`: CX_OK, or CX_EINVAL naming the first index
 * out of bounds. Every driver's take and gather fail with this message. */
cx_code cx_check_indices(cx_op_id op, const cx_desc *t, const int64_t *idx, int64_t n,
                         const int64_t *axes, int k, cx_status *st);

#endif
