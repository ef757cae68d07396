/* Asynchronous downloads (driver ABI 3, download_async) through the core, on the test driver:
 * its completion thread copies and calls back, and two prefixes of the source make a download
 * fail or slow (c_src/drivers/test/test_driver.c). What the NIF relies on: done runs exactly
 * once, on another thread, after the bytes are there or with the error; nothing runs after a
 * refusal; a pinned tensor's buffer outlives a free/1 that comes while the copy is pending. */
#include <unistd.h>

#include "test_util.h"

#define SLOW    "cx-test:slow-dl!"
#define FAIL    "cx-test:fail-dl!"
#define SYNC    "cx-test:sync-dl!"
#define WAIT_MS 10000

static cx_device *cpu, *test;

static int setup(void **state) {
    (void)state;
    static const cx_driver_spec specs[] = {{"test", CX_TEST_DRIVER}};
    cx_status st = {0};
    if (cx_devices_init(specs, 1, &st) != CX_OK) return -1;
    cpu = cx_device_find("cpu");
    test = cx_device_find("test");
    return cpu && test && test->available ? 0 : -1;
}

/* A u8 tensor on the test device holding `bytes` bytes: `prefix` (may be NULL), then k % 251. */
static cx_tensor *on_test(size_t bytes, const char *prefix) {
    unsigned char *host = malloc(bytes ? bytes : 1);
    for (size_t k = 0; k < bytes; k++) host[k] = (unsigned char)(k % 251);
    if (prefix) memcpy(host, prefix, 16);
    cx_tensor *t = malloc(sizeof *t);
    cx_desc d = tu_desc(CX_U8, 1, (int64_t[]){(int64_t)bytes});
    cx_status st = {0};
    assert_int_equal(cx_tensor_init(t, test, &d, &st), CX_OK);
    assert_int_equal(cx_tensor_upload(t, host, bytes, &st), CX_OK);
    free(host);
    return t;
}

static void expect_pattern(const unsigned char *got, size_t bytes, const char *prefix) {
    for (size_t k = prefix ? 16 : 0; k < bytes; k++)
        if (got[k] != (unsigned char)(k % 251))
            fail_msg("byte %zu: expected %u, got %u", k, (unsigned)(k % 251), (unsigned)got[k]);
    if (prefix) assert_memory_equal(got, prefix, 16);
}

static void only_the_test_driver_downloads_asynchronously(void **state) {
    (void)state;
    assert_int_equal(test->driver->abi, CX_DRIVER_ABI);
    assert_non_null(test->driver->download_async);
    assert_null(cpu->driver->download_async);
    cx_tensor *c = tu_tensor(CX_F32, 1, TU_SHAPE(2), TU_VALUES(1, 2));
    cx_tensor *t = on_test(8, NULL);
    assert_false(cx_tensor_downloads_async(c));
    assert_true(cx_tensor_downloads_async(t));
    unsigned char dst[16];
    tu_download w;
    tu_download_init(&w);
    cx_status st = {0};
    assert_int_equal(cx_tensor_download_async(c, dst, 8, tu_download_done, &w, &st),
                     CX_EUNSUPPORTED);
    assert_int_equal(cx_tensor_download_async(t, dst, 9, tu_download_done, &w, &st), CX_EINVAL);
    assert_non_null(strstr(st.message, "9 bytes of a 8-byte tensor"));
    assert_false(tu_download_wait(&w, 50)); /* a refusal calls nothing back */
    tu_download_destroy(&w);
    tu_drop(t);
    tu_drop(c);
}

static void completes_once_on_another_thread_with_the_contents(void **state) {
    (void)state;
    const size_t sizes[] = {0, 1, 16, 4099, (size_t)3 << 20};
    for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++) {
        size_t n = sizes[s];
        cx_tensor *t = on_test(n, NULL);
        unsigned char *dst = malloc(n + 1);
        dst[n] = 0xEE; /* a download writes no further than asked */
        tu_download w;
        tu_download_init(&w);
        cx_status st = {0};
        assert_int_equal(cx_tensor_pin(t, &st), CX_OK);
        assert_int_equal(cx_tensor_download_async(t, dst, n, tu_download_done, &w, &st), CX_OK);
        assert_true(tu_download_wait(&w, WAIT_MS));
        assert_int_equal(w.rc, CX_OK);
        assert_false(pthread_equal(w.thread, w.caller));
        expect_pattern(dst, n, NULL);
        assert_int_equal(dst[n], 0xEE);
        usleep(20000);
        assert_int_equal(w.calls, 1);
        cx_tensor_unpin(t);
        tu_download_destroy(&w);
        free(dst);
        tu_drop(t);
    }
}

static void a_prefix_only(void **state) {
    (void)state;
    cx_tensor *t = on_test(1000, NULL);
    unsigned char dst[100];
    memset(dst, 0xEE, sizeof dst);
    tu_download w;
    tu_download_init(&w);
    cx_status st = {0};
    assert_int_equal(cx_tensor_download_async(t, dst, 64, tu_download_done, &w, &st), CX_OK);
    assert_true(tu_download_wait(&w, WAIT_MS));
    assert_int_equal(w.rc, CX_OK);
    expect_pattern(dst, 64, NULL);
    assert_int_equal(dst[64], 0xEE);
    tu_download_destroy(&w);
    tu_drop(t);
}

static void a_failure_is_called_back_with_the_reason(void **state) {
    (void)state;
    cx_tensor *t = on_test(64, FAIL);
    unsigned char dst[64];
    memset(dst, 0xEE, sizeof dst);
    tu_download w;
    tu_download_init(&w);
    cx_status st = {0};
    assert_int_equal(cx_tensor_download_async(t, dst, 64, tu_download_done, &w, &st), CX_OK);
    assert_true(tu_download_wait(&w, WAIT_MS));
    assert_int_equal(w.rc, CX_EDEVICE);
    assert_non_null(strstr(w.message, "injected"));
    assert_int_equal(dst[0], 0xEE);
    tu_download_destroy(&w);
    tu_drop(t);
}

static void a_refusal_means_synchronous(void **state) {
    (void)state;
    cx_tensor *t = on_test(64, SYNC);
    unsigned char dst[64];
    tu_download w;
    tu_download_init(&w);
    cx_status st = {0};
    assert_int_equal(cx_tensor_download_async(t, dst, 64, tu_download_done, &w, &st),
                     CX_EUNSUPPORTED);
    assert_false(tu_download_wait(&w, 50));
    assert_int_equal(cx_tensor_download(t, dst, 64, &st), CX_OK);
    expect_pattern(dst, 64, SYNC);
    tu_download_destroy(&w);
    tu_drop(t);
}

/* Many at once, from several tensors: every one completes, each with its own bytes. */
static void many_in_flight(void **state) {
    (void)state;
    enum { N = 48 };
    cx_tensor *t[N];
    unsigned char *dst[N];
    tu_download w[N];
    cx_status st = {0};
    for (int k = 0; k < N; k++) {
        t[k] = on_test(1000 + (size_t)k * 37, NULL);
        dst[k] = malloc(t[k]->nbytes);
        tu_download_init(&w[k]);
        assert_int_equal(cx_tensor_pin(t[k], &st), CX_OK);
        assert_int_equal(
            cx_tensor_download_async(t[k], dst[k], t[k]->nbytes, tu_download_done, &w[k], &st),
            CX_OK);
    }
    for (int k = 0; k < N; k++) {
        assert_true(tu_download_wait(&w[k], WAIT_MS));
        assert_int_equal(w[k].rc, CX_OK);
        expect_pattern(dst[k], t[k]->nbytes, NULL);
        cx_tensor_unpin(t[k]);
        tu_download_destroy(&w[k]);
        free(dst[k]);
        tu_drop(t[k]);
    }
}

/* free/1 while the copy is pending: the pin keeps the buffer until the copy is done (ASan and
 * valgrind would see a read of freed memory otherwise), and the buffer goes with the pin. */
static void the_pin_outlives_a_free_while_pending(void **state) {
    (void)state;
    int64_t live = atomic_load(&test->live_bytes);
    size_t n = (size_t)1 << 20;
    cx_tensor *t = on_test(n, SLOW);
    unsigned char *dst = malloc(n);
    tu_download w;
    tu_download_init(&w);
    cx_status st = {0};
    assert_int_equal(cx_tensor_pin(t, &st), CX_OK);
    assert_int_equal(cx_tensor_download_async(t, dst, n, tu_download_done, &w, &st), CX_OK);
    cx_tensor_free(t);
    assert_true(cx_tensor_is_freed(t));
    assert_int_equal(atomic_load(&test->live_bytes), live + (int64_t)n); /* still pinned */
    assert_int_equal(w.calls, 0);                                        /* still slow */
    assert_true(tu_download_wait(&w, WAIT_MS));
    assert_int_equal(w.rc, CX_OK);
    expect_pattern(dst, n, SLOW);
    cx_tensor_unpin(t);
    assert_int_equal(atomic_load(&test->live_bytes), live);
    assert_null(t->data);
    tu_download_destroy(&w);
    free(dst);
    free(t);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(only_the_test_driver_downloads_asynchronously),
        cmocka_unit_test(completes_once_on_another_thread_with_the_contents),
        cmocka_unit_test(a_prefix_only),
        cmocka_unit_test(a_failure_is_called_back_with_the_reason),
        cmocka_unit_test(a_refusal_means_synchronous),
        cmocka_unit_test(many_in_flight),
        cmocka_unit_test(the_pin_outlives_a_free_while_pending),
    };
    return cmocka_run_group_tests(tests, setup, NULL);
}
