/* Host buffers for the cpu driver, with a small cache of freed large buffers.
 *
 * Why: tensors are released by the BEAM's garbage collector in batches, and a large buffer
 * returned to libc is unmapped; the next one is mapped again and every page faults on first
 * touch. A 1M-element f32 add then spent most of its time in page faults (measured with perf).
 * Keeping a bounded number of freed large buffers and handing them back for requests of the same
 * rounded size removes that cost for the usual loop that makes tensors of the same shapes again
 * and again. When the cache is full the buffers freed longest ago make room: a cache filled once
 * with sizes no longer asked for would otherwise keep the current ones out (that made the
 * benchmark's 1M add much slower after the dot cases had run).
 *
 * Sizes: Cascade asks a process to collect once a device's tensors have grown by gc_interval (4
 * MiB by default since bdf0e4d, 64 MiB when this was written; core/device.c), so up to that much
 * garbage comes back at once, more where several processes allocate; the cache holds 64 MiB, in
 * as many slots as 256 KiB buffers take (a 256 x 256 f32 dot in a loop: 64 slots let
 * three results in four miss the cache and fault their pages in; 128 MiB instead of 64 made no
 * measurable difference and left the idle set twice as large). */
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/mman.h>

#include "cpu_kernels.h"

#define HEADER      64 /* keeps the data 64-byte aligned */
#define HUGE_PAGE   ((size_t)2 << 20)
#define CACHED_MIN  (64u << 10) /* smaller buffers are cheap for libc */
#define CACHE_SLOTS CPU_BUFFER_CACHE_SLOTS
#define CACHE_CAP   CPU_BUFFER_CACHE_CAP
/* Small buffers (a scalar, a short vector: the tensors of a loop of small ops) are kept on free
 * lists of 64, 128 and 256 bytes: aligned_alloc and free took a fair part of a one-element add
 * (perf); a list under an uncontended mutex costs a fraction of that. At most SMALL_KEEP per size:
 * the BEAM releases a loop's small tensors thousands at a time (they are too small for the gc
 * interval to ask for collections; its own minor collections find them), and with 256 a list most
 * of each batch went back to libc and came out again (a one-element add ran faster with 4096; the
 * lists hold at most 1.8 MB). */
#define SMALL_CLASSES 3
#define SMALL_KEEP    4096
/* Under AddressSanitizer every small buffer goes back to libc, so that a use after free is
 * still caught. */
#if defined(__SANITIZE_ADDRESS__)
#define SMALL_LISTS 0
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define SMALL_LISTS 0
#endif
#endif
#ifndef SMALL_LISTS
#define SMALL_LISTS 1
#endif

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

static struct {
    pthread_mutex_t lock;
    int n[SMALL_CLASSES];
    void *block[SMALL_CLASSES][SMALL_KEEP];
} small = {.lock = PTHREAD_MUTEX_INITIALIZER};

/* The free list of a rounded size, or -1. */
static int small_class(size_t size) {
    if (!SMALL_LISTS) return -1;
    return size == 64 ? 0 : size == 128 ? 1 : size == 256 ? 2 : -1;
}

static void *small_get(int c) {
    void *block = NULL;
    pthread_mutex_lock(&small.lock);
    if (small.n[c] > 0) block = small.block[c][--small.n[c]];
    pthread_mutex_unlock(&small.lock);
    return block;
}

static bool small_put(int c, void *block) {
    pthread_mutex_lock(&small.lock);
    bool kept = small.n[c] < SMALL_KEEP;
    if (kept) small.block[c][small.n[c]++] = block;
    pthread_mutex_unlock(&small.lock);
    return kept;
}

static size_t rounded_size(size_t bytes) {
    return bytes >= CACHED_MIN ? (bytes + 4095) & ~(size_t)4095 : (bytes + 63) & ~(size_t)63;
}

/* The block of this size put last: the one most likely still in the CPU's caches (a loop's
 * results are written to the same few megabytes again instead of walking the whole cache). */
static void *from_cache(size_t size) {
    void *found = NULL;
    pthread_mutex_lock(&cache.lock);
    int newest = -1;
    for (int k = 0; k < CACHE_SLOTS; k++)
        if (cache.block[k] && cache.size[k] == size &&
            (newest < 0 || cache.stamp[k] > cache.stamp[newest]))
            newest = k;
    if (newest >= 0) {
        found = cache.block[newest];
        cache.block[newest] = NULL;
        cache.total -= size;
    }
    pthread_mutex_unlock(&cache.lock);
    return found;
}

/* A new block. One of 2 MiB or more is mapped on its own, starting on a 2 MiB boundary, and asks
 * for transparent huge pages before any of it is touched (on Linux they are given to a range
 * that asks, by default): a 1M-element f32 add on the blas driver, 12 MB through the caches, ran
 * faster on them than on 4 KiB pages (C, AMD EPYC; fewer TLB misses). Not from malloc: past its
 * dynamic mmap threshold (raised by each large free) malloc hands out heap memory already faulted
 * in as 4 KiB pages, which madvise does not turn into huge ones (two 1M-element f32 tensors made
 * from malloc: AnonHugePages 4 MiB of their 8, and adding them was slower than mapped here). */
static size_t mapped_length(size_t size) {
    size_t pages = (HEADER + size + 4095) & ~(size_t)4095;
    size_t huge = (HEADER + size + HUGE_PAGE - 1) & ~(HUGE_PAGE - 1);
    /* the last 2 MiB in huge pages too unless that wastes more than an eighth (a 1M-element
     * f32 tensor: 4 MB in two huge pages, 194 KiB more) */
    return huge - pages <= pages / 8 ? huge : pages;
}

static bool is_mapped(size_t size) {
    return HEADER + size >= HUGE_PAGE;
}

static void *fresh_block(size_t size) {
    if (!is_mapped(size)) return aligned_alloc(64, HEADER + size);
    size_t len = mapped_length(size);
    if (len > SIZE_MAX - HUGE_PAGE) return NULL;
    char *map =
        mmap(NULL, len + HUGE_PAGE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (map == MAP_FAILED) return NULL;
    /* keep the 2 MiB-aligned part, give the rest back */
    char *block = (char *)(((uintptr_t)map + HUGE_PAGE - 1) & ~(uintptr_t)(HUGE_PAGE - 1));
    if (block > map) munmap(map, (size_t)(block - map));
    size_t tail = (size_t)(map + len + HUGE_PAGE - (block + len));
    if (tail) munmap(block + len, tail);
#ifdef MADV_HUGEPAGE
    madvise(block, len, MADV_HUGEPAGE);
#endif
    return block;
}

/* Gives a block back to the system (its header holds its rounded size). */
static void release_block(void *block) {
    if (!block) return;
    size_t size = ((header *)block)->size;
    if (is_mapped(size))
        munmap(block, mapped_length(size));
    else
        free(block);
}

void cpu_buffer_trim(void) {
    pthread_mutex_lock(&cache.lock);
    for (int k = 0; k < CACHE_SLOTS; k++) {
        release_block(cache.block[k]);
        cache.block[k] = NULL;
    }
    cache.total = 0;
    pthread_mutex_unlock(&cache.lock);
    pthread_mutex_lock(&small.lock);
    for (int c = 0; c < SMALL_CLASSES; c++)
        while (small.n[c] > 0) free(small.block[c][--small.n[c]]);
    pthread_mutex_unlock(&small.lock);
}

void *cpu_buffer_get(size_t bytes) {
    size_t size = rounded_size(bytes ? bytes : 1);
    if (size < bytes || size > SIZE_MAX - HEADER) return NULL;
    int c = small_class(size);
    void *block = size >= CACHED_MIN ? from_cache(size) : c >= 0 ? small_get(c) : NULL;
    if (!block) block = fresh_block(size);
    if (!block) { /* memory is short: give the idle buffers back and try once more */
        cpu_buffer_trim();
        block = fresh_block(size);
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
    int c = small_class(size);
    if (c >= 0 && small_put(c, block)) return;
    if (size < CACHED_MIN || size > CACHE_CAP) {
        release_block(block);
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
    for (int k = 0; k < n_evicted; k++) release_block(evicted[k]);
}
