/* The cpu driver's buffer cache: reuse, alignment, eviction of sizes no longer asked for. */
#include "test_util.h"

#include "../drivers/cpu/cpu_kernels.h"

static void test_alignment_and_small_buffers(void **state) {
    (void)state;
    for (size_t n = 0; n < 300000; n = n * 3 + 1) {
        unsigned char *p = cpu_buffer_get(n);
        assert_non_null(p);
        assert_int_equal((uintptr_t)p % 64, 0);
        memset(p, 0xab, n); /* ASan checks the whole size is usable */
        cpu_buffer_put(p);
    }
    cpu_buffer_put(NULL);
}

static void test_large_buffers_are_reused(void **state) {
    (void)state;
    cpu_buffer_trim();
    void *a = cpu_buffer_get(4 << 20);
    cpu_buffer_put(a);
    void *b = cpu_buffer_get((4 << 20) - 100); /* same rounded size */
    assert_ptr_equal(a, b);
    void *c = cpu_buffer_get(4 << 20); /* the cache is empty again: a new block */
    assert_ptr_not_equal(b, c);
    cpu_buffer_put(b);
    cpu_buffer_put(c);
    cpu_buffer_trim();
}

/* Blocks of 2 MiB or more are mapped on their own from a 2 MiB boundary (their data one 64-byte
 * header past it), so that huge pages can back them from the first touch; every byte asked for
 * is usable, and they go back to the system when evicted, trimmed or too large to keep (ASan and
 * valgrind see a wrong unmap length as a fault or a leak). */
static void test_large_blocks_are_mapped_on_huge_page_boundaries(void **state) {
    (void)state;
    cpu_buffer_trim();
    const size_t sizes[] = {
        (2 << 20) - 64,          2 << 20, 4000000, 4 << 20, (4 << 20) + 1, 9 << 20,
        CPU_BUFFER_CACHE_CAP + 1};
    for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++) {
        unsigned char *p = cpu_buffer_get(sizes[k]);
        assert_non_null(p);
        assert_int_equal((uintptr_t)p % (2 << 20), 64);
        p[0] = 1;
        p[sizes[k] - 1] = 2;
        memset(p + sizes[k] / 2, 0xcd, 4096);
        cpu_buffer_put(p);
    }
    /* a smaller one comes from malloc, 64-byte aligned */
    unsigned char *small = cpu_buffer_get((2 << 20) - 8192);
    assert_int_equal((uintptr_t)small % 64, 0);
    cpu_buffer_put(small);
    cpu_buffer_trim();
}

static void test_old_sizes_make_room(void **state) {
    (void)state;
    cpu_buffer_trim();
    /* fill the cache's bytes with 1 MiB buffers nobody will ask for again */
    enum { N_OLD = (int)(CPU_BUFFER_CACHE_CAP >> 20) };
    static void *old[N_OLD];
    for (int k = 0; k < N_OLD; k++) old[k] = cpu_buffer_get(1 << 20);
    for (int k = 0; k < N_OLD; k++) cpu_buffer_put(old[k]);
    /* a 4 MiB buffer freed now must still be cached, evicting the oldest */
    void *big = cpu_buffer_get(4 << 20);
    cpu_buffer_put(big);
    assert_ptr_equal(cpu_buffer_get(4 << 20), big);
    cpu_buffer_put(big);
    /* a buffer larger than the whole cache is simply freed */
    void *huge = cpu_buffer_get(CPU_BUFFER_CACHE_CAP + (1 << 20));
    assert_non_null(huge);
    cpu_buffer_put(huge);
    cpu_buffer_trim();
}

/* Full of small cached buffers (every slot taken), a new one still gets a slot. */
static void test_old_slots_make_room(void **state) {
    (void)state;
    cpu_buffer_trim();
    static void *old[CPU_BUFFER_CACHE_SLOTS];
    for (int k = 0; k < CPU_BUFFER_CACHE_SLOTS; k++) old[k] = cpu_buffer_get(64 << 10);
    for (int k = 0; k < CPU_BUFFER_CACHE_SLOTS; k++) cpu_buffer_put(old[k]);
    void *other = cpu_buffer_get(128 << 10);
    cpu_buffer_put(other);
    assert_ptr_equal(cpu_buffer_get(128 << 10), other);
    cpu_buffer_put(other);
    cpu_buffer_trim();
}

/* Buffers of 64, 128 and 256 bytes come back from free lists (not under ASan, which must see
 * every free), at most a bounded number of them. */
static void test_small_buffers_are_reused(void **state) {
    (void)state;
    cpu_buffer_trim();
    void *a = cpu_buffer_get(4);
    cpu_buffer_put(a);
    void *b = cpu_buffer_get(60); /* the same class: 64 bytes */
#if defined(__SANITIZE_ADDRESS__)
    (void)a;
#elif defined(__has_feature)
#if !__has_feature(address_sanitizer)
    assert_ptr_equal(a, b);
#endif
#else
    assert_ptr_equal(a, b);
#endif
    cpu_buffer_put(b);
    static void *many[1000];
    for (int k = 0; k < 1000; k++) many[k] = cpu_buffer_get(200);
    for (int k = 0; k < 1000; k++) cpu_buffer_put(many[k]); /* most are freed, not kept */
    cpu_buffer_trim();
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_alignment_and_small_buffers),
        cmocka_unit_test(test_large_buffers_are_reused),
        cmocka_unit_test(test_large_blocks_are_mapped_on_huge_page_boundaries),
        cmocka_unit_test(test_old_sizes_make_room),
        cmocka_unit_test(test_old_slots_make_room),
        cmocka_unit_test(test_small_buffers_are_reused),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
