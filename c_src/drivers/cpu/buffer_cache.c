/* Host buffers for the cpu driver, with a small cache of freed large buffers.
 *
 * Why: tensors are released by the BEAM's garbage collector in batches, and a large buffer
 * returned to libc is unmapped; the next one is mapped again and every page faults on first
 * touch. A 1M-element f32 add then spent 85% of its time in page faults (measured with perf:
 * 1.8 ms against 0.25 ms of arithmetic). Keeping a bounded number of freed large buffers and
 * handing them back for requests of the same rounded size removes that cost for the usual
 * loop that makes tensors of the same shapes again and again. When the cache is full the
 * buffers freed longest ago make room: a cache filled once with sizes no longer asked for
 * would otherwise keep the current ones out (that made the benchmark's 1M add 6x slower
 * after the dot cases had run).
 *
 * Sizes: Cascade asks a process to collect once a device's tensors have grown by gc_interval (64
 * MiB by default; core/device.c), so up to that much garbage comes back at once; the cache holds
 * that much, in as many slots as 256 KiB buffers take (a 256 x 256 f32 dot in a loop: 64 slots let
 * three results in four miss the cache and fault their pages in, 1.2x slower; 128 MiB instead of
 * 64 made no measurable difference and left the idle set twice as large). */
#include <pthread.h>
#include <stdlib.h>

#include "cpu_kernels.h"

#define HEADER      64          /* keeps the data 64-byte aligned */
#define CACHED_MIN  (64u << 10) /* smaller buffers are cheap for libc */
#define CACHE_SLOTS CPU_BUFFER_CACHE_SLOTS
#define CACHE_CAP   CPU_BUFFER_CACHE_CAP

typedef struct {
    size_t size; /* rounded data size */
} header;

static struct {
    pthread_mutex_t lock;
    size_t total;
    uint64_t clock; /* counts puts */
    size_t size[CACHE_SLOTS];
    uint64_t stamp[CACHE_SLOTS]; /* when each block was put */
    void *block[CACHE_SLOTS];
} cache = {.lock = PTHREAD_MUTEX_INITIALIZER};

static size_t rounded_size(size_t bytes) {
    return bytes >= CACHED_MIN ? (bytes + 4095) & ~(size_t)4095 : (bytes + 63) & ~(size_t)63;
}

static void *from_cache(size_t size) {
    void *found = NULL;
    pthread_mutex_lock(&cache.lock);
    for (int k = 0; k < CACHE_SLOTS; k++)
        if (cache.block[k] && cache.size[k] == size) {
            found = cache.block[k];
            cache.block[k] = NULL;
            cache.total -= size;
            break;
        }
    pthread_mutex_unlock(&cache.lock);
    return found;
}

void cpu_buffer_trim(void) {
    pthread_mutex_lock(&cache.lock);
    for (int k = 0; k < CACHE_SLOTS; k++) {
        free(cache.block[k]);
        cache.block[k] = NULL;
    }
    cache.total = 0;
    pthread_mutex_unlock(&cache.lock);
}

void *cpu_buffer_get(size_t bytes) {
    size_t size = rounded_size(bytes ? bytes : 1);
    if (size < bytes || size > SIZE_MAX - HEADER) return NULL;
    void *block = size >= CACHED_MIN ? from_cache(size) : NULL;
    if (!block) block = aligned_alloc(64, HEADER + size);
    if (!block) { /* memory is short: give the idle buffers back and try once more */
        cpu_buffer_trim();
        block = aligned_alloc(64, HEADER + size);
    }
    if (!block) return NULL;
    ((header *)block)->size = size;
    return (char *)block + HEADER;
}

/* Takes the oldest cached block out (to be freed outside the lock); NULL when empty. */
static void *evict_oldest(void) {
    int oldest = -1;
    for (int k = 0; k < CACHE_SLOTS; k++)
        if (cache.block[k] && (oldest < 0 || cache.stamp[k] < cache.stamp[oldest])) oldest = k;
    if (oldest < 0) return NULL;
    void *block = cache.block[oldest];
    cache.block[oldest] = NULL;
    cache.total -= cache.size[oldest];
    return block;
}

void cpu_buffer_put(void *data) {
    if (!data) return;
    void *block = (char *)data - HEADER;
    size_t size = ((header *)block)->size;
    if (size < CACHED_MIN || size > CACHE_CAP) {
        free(block);
        return;
    }
    void *evicted[CACHE_SLOTS];
    int n_evicted = 0;
    pthread_mutex_lock(&cache.lock);
    int slot = -1;
    for (;;) {
        for (int k = 0; k < CACHE_SLOTS && slot < 0; k++)
            if (!cache.block[k]) slot = k;
        if (slot >= 0 && cache.total + size <= CACHE_CAP) break;
        slot = -1;
        evicted[n_evicted++] = evict_oldest();
    }
    cache.block[slot] = block;
    cache.size[slot] = size;
    cache.stamp[slot] = ++cache.clock;
    cache.total += size;
    pthread_mutex_unlock(&cache.lock);
    for (int k = 0; k < n_evicted; k++) free(evicted[k]);
}
