#include "tensor.h"

#include <string.h>

/* The same bounds as inference's (infer.c): callers outside the dispatcher (the NIF building a
 * tensor from user data) must not reach cx_desc_numel with a shape that overflows it. */
static cx_code check_desc(const cx_desc *d, cx_status *st) {
    if (!cx_dtype_valid(d->dtype))
        return cx_fail(st, CX_EINVAL, "expected a valid type, got type code %d", (int)d->dtype);
    if (d->rank < 0 || d->rank > CX_MAX_RANK)
        return cx_fail(st, CX_EINVAL, "expected a rank between 0 and %d, got: %d", CX_MAX_RANK,
                       (int)d->rank);
    int64_t n = 1;
    for (int k = 0; k < d->rank; k++) {
        int64_t s = d->shape[k];
        if (s < 0)
            return cx_fail(st, CX_EINVAL, "expected non-negative dimensions, got %lld on axis %d",
                           (long long)s, k);
        if (s == 0) continue;
        if (n > (INT64_C(1) << 48) / s)
            return cx_fail(st, CX_EINVAL,
                           "expected a shape whose non-zero dimensions multiply to at most 2^48");
        n *= s;
    }
    return CX_OK;
}

/* A tensor being made is not shared yet: plain stores (a sequentially consistent one is an
 * xchg, which showed in the profile of a loop of one-element adds). It is published through
 * the NIF's resource or a result pointer, both made after. */
void cx_tensor_clear(cx_tensor *t) {
    memset(t, 0, sizeof *t);
    atomic_store_explicit(&t->state, CX_TENSOR_FREED | CX_TENSOR_RELEASED, memory_order_relaxed);
}

/* t's description and the sizes that follow from it */
static void describe(cx_tensor *t, const cx_desc *desc) {
    t->desc = *desc;
    t->numel = cx_desc_numel(desc);
    t->nbytes = (size_t)t->numel * cx_dtype_size(desc->dtype);
}

cx_code cx_tensor_init(cx_tensor *t, cx_device *dev, const cx_desc *desc, cx_status *st) {
    cx_tensor_clear(t);
    t->device = dev;
    if (check_desc(desc, st) != CX_OK) return CX_EINVAL;
    describe(t, desc);
    if (!dev->available)
        return cx_fail(st, CX_EDEVICE, "device %s is unavailable: %s", dev->name, dev->reason);
    if (dev->driver->alloc(dev->ctx, t->nbytes, &t->data, st) != CX_OK) {
        cx_status_on_device(st, dev->name);
        return st->code;
    }
    cx_device_count_alloc(dev, (int64_t)t->nbytes);
    atomic_store_explicit(&t->state, 0, memory_order_release);
    return CX_OK;
}

void cx_tensor_borrow(cx_tensor *t, cx_device *dev, const cx_desc *desc, void *data) {
    describe(t, desc);
    t->device = dev;
    t->data = data;
    atomic_init(&t->state, CX_TENSOR_BORROWED);
}

cx_code cx_tensor_pin(cx_tensor *t, cx_status *st) {
    uint64_t s = atomic_load(&t->state);
    if (s & CX_TENSOR_BORROWED) return CX_OK; /* the caller keeps the buffer */
    do {
        if (s & CX_TENSOR_FREED)
            return cx_fail(st, CX_EFREED,
                           "the tensor was freed (Cascade.free/1, or donated to a compiled "
                           "function) and cannot be used");
    } while (!atomic_compare_exchange_weak(&t->state, &s, s + 1));
    return CX_OK;
}

/* Releases the buffer exactly once, when freed and unpinned. */
static void release_if_idle(cx_tensor *t) {
    uint64_t s = atomic_load(&t->state);
    while (s == CX_TENSOR_FREED) {
        if (atomic_compare_exchange_weak(&t->state, &s, CX_TENSOR_FREED | CX_TENSOR_RELEASED)) {
            t->device->driver->release(t->device->ctx, t->data);
            cx_device_count_release(t->device, (int64_t)t->nbytes);
            t->data = NULL;
            return;
        }
    }
}

void cx_tensor_unpin(cx_tensor *t) {
    if (atomic_load_explicit(&t->state, memory_order_relaxed) & CX_TENSOR_BORROWED) return;
    atomic_fetch_sub(&t->state, 1);
    release_if_idle(t);
}

void cx_tensor_free(cx_tensor *t) {
    if (atomic_load_explicit(&t->state, memory_order_relaxed) & CX_TENSOR_BORROWED) return;
    atomic_fetch_or(&t->state, CX_TENSOR_FREED);
    release_if_idle(t);
}

bool cx_tensor_take(cx_tensor *t, cx_tensor *into) {
    uint64_t idle = 0;
    if (!atomic_compare_exchange_strong(&t->state, &idle, CX_TENSOR_FREED | CX_TENSOR_RELEASED))
        return false;
    into->desc = t->desc;
    into->numel = t->numel;
    into->nbytes = t->nbytes;
    into->device = t->device;
    into->data = t->data;
    atomic_store(&into->state, 0);
    t->data = NULL;
    return true;
}

bool cx_tensor_is_freed(const cx_tensor *t) {
    uint64_t s = atomic_load(&((cx_tensor *)t)->state);
    return (s & CX_TENSOR_FREED) && !(s & CX_TENSOR_BORROWED);
}

cx_code cx_tensor_upload(cx_tensor *t, const void *src, size_t bytes, cx_status *st) {
    if (bytes != t->nbytes)
        return cx_fail(st, CX_EINVAL,
                       "expected %zu bytes for a %s tensor of %lld elements, got: %zu", t->nbytes,
                       cx_dtype_name(t->desc.dtype), (long long)t->numel, bytes);
    return t->device->driver->upload(t->device->ctx, t->data, src, bytes, st);
}

cx_code cx_tensor_download(const cx_tensor *t, void *dst, size_t bytes, cx_status *st) {
    if (bytes > t->nbytes)
        return cx_fail(st, CX_EINVAL, "asked for %zu bytes of a %zu-byte tensor", bytes, t->nbytes);
    return t->device->driver->download(t->device->ctx, dst, t->data, bytes, st);
}

bool cx_tensor_downloads_async(const cx_tensor *t) {
    return t->device->driver && t->device->driver->download_async;
}

cx_code cx_tensor_download_async(const cx_tensor *t, void *dst, size_t bytes, cx_download_done done,
                                 void *ctx, cx_status *st) {
    if (bytes > t->nbytes)
        return cx_fail(st, CX_EINVAL, "asked for %zu bytes of a %zu-byte tensor", bytes, t->nbytes);
    if (!cx_tensor_downloads_async(t))
        return cx_fail(st, CX_EUNSUPPORTED, "the %s driver downloads synchronously only",
                       t->device->driver_name);
    return t->device->driver->download_async(t->device->ctx, dst, t->data, bytes, done, ctx, st);
}

cx_code cx_check_indices(cx_op_id op, const cx_desc *t, const int64_t *idx, int64_t n,
                         const int64_t *axes, int k, cx_status *st) {
    /* a pass without a branch or a division per index first (the demo's augmentation checks
     * 150,000 indices a batch, and i % k took a division each); the message comes from the
     * second loop, only when some index is out of bounds */
    uint64_t bad = 0;
    if (n == 0) return CX_OK; /* k may be 0 then: an empty index tensor */
    if (k == 1) {
        uint64_t dim = (uint64_t)t->shape[axes[0]];
        for (int64_t i = 0; i < n; i++) bad |= (uint64_t)idx[i] >= dim;
    } else if (k < 1 || k > CX_MAX_RANK) {
        bad = 1; /* not an index row of a tensor's axes: the loop below judges */
    } else {
        uint64_t dims[CX_MAX_RANK];
        for (int j = 0; j < k; j++) dims[j] = (uint64_t)t->shape[axes[j]];
        int64_t i = 0;
        for (; i + k <= n; i += k)
            for (int j = 0; j < k; j++) bad |= (uint64_t)idx[i + j] >= dims[j];
        for (int j = 0; i < n; i++, j++) bad |= (uint64_t)idx[i] >= dims[j];
    }
    if (!bad) return CX_OK;
    if (k < 1)
        return cx_fail(st, CX_EINVAL, "%s: %lld indices for no axis", cx_op_table[op].name,
                       (long long)n);
    for (int64_t i = 0; i < n; i++) {
        int j = (int)(i % k);
        int64_t dim = t->shape[axes[j]];
        if (idx[i] >= 0 && idx[i] < dim) continue;
        if (op == CX_OP_TAKE || op == CX_OP_TAKE_ALONG_AXIS)
            return cx_fail(st, CX_EINVAL,
                           "%s: index %lld is out of bounds for axis %d of size %lld",
                           cx_op_table[op].name, (long long)idx[i], (int)axes[0], (long long)dim);
        return cx_fail(st, CX_EINVAL,
                       "%s: index %lld (entry %d of index row %lld) is out of bounds for axis "
                       "%lld of size %lld",
                       cx_op_table[op].name, (long long)idx[i], j, (long long)(i / k),
                       (long long)axes[j], (long long)dim);
    }
    return CX_OK;
}
