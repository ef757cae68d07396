/* The cuda driver's own paths, run on the cpu emulator (emu/, `make test-cuda-emu`): what the
 * differential suite does not reach -- explicit transfers and their counts, asynchronous
 * downloads in several staging chunks, running out of device memory and recovering, and a
 * sticky fault that marks the device lost while the rest of Cascade goes on.
 *
 *   test_cuda_emu          everything but the fault (CKE_MEMORY is set to 64 MiB here)
 *   test_cuda_emu lost     the fault: run with CKE_FAIL_LAUNCH=3 (make test-cuda-emu does) */
#include <dlfcn.h>

#include "../../../tests/test_util.h"

#define WAIT_MS 10000
#define MIB     ((size_t)1 << 20)

static cx_device *cpu, *cuda;
static void (*transfer_counts)(void *dev, long long out[4]);

static int setup(void **state) {
    (void)state;
    static const cx_driver_spec specs[] = {{"cuda", CX_EMU_DRIVER}};
    cx_status st = {0};
    if (cx_devices_init(specs, 1, &st) != CX_OK) return -1;
    cpu = cx_device_find("cpu");
    cuda = cx_device_find("cuda");
    if (!cuda || !cuda->available) {
        fprintf(stderr, "cuda (emulated) is not available: %s\n", cuda ? cuda->reason : "absent");
        return -1;
    }
    void *h = dlopen(CX_EMU_DRIVER, RTLD_NOW | RTLD_NOLOAD);
    transfer_counts =
        h ? (void (*)(void *, long long[4]))dlsym(h, "cx_cuda_transfer_counts") : NULL;
    return transfer_counts ? 0 : -1;
}

static cx_tensor *on_cuda(cx_tensor *host) {
    cx_tensor *t = malloc(sizeof *t);
    cx_status st = {0};
    if (cx_transfer(host, cuda, t, &st) != CX_OK) fail_msg("transfer to cuda: %s", st.message);
    return t;
}

static cx_tensor *to_cpu(cx_tensor *dev) {
    cx_tensor *t = malloc(sizeof *t);
    cx_status st = {0};
    if (cx_transfer(dev, cpu, t, &st) != CX_OK) fail_msg("transfer to cpu: %s", st.message);
    return t;
}

/* A u8 tensor of `bytes` bytes holding k % 251 at k, on the device. */
static cx_tensor *pattern_on_cuda(size_t bytes, cx_code *code, cx_status *st) {
    unsigned char *host = malloc(bytes ? bytes : 1);
    for (size_t k = 0; k < bytes; k++) host[k] = (unsigned char)(k % 251);
    cx_tensor *t = malloc(sizeof *t);
    cx_desc d = tu_desc(CX_U8, 1, (int64_t[]){(int64_t)bytes});
    *code = cx_tensor_init(t, cuda, &d, st);
    if (*code == CX_OK) {
        *code = cx_tensor_upload(t, host, bytes, st);
        if (*code != CX_OK) cx_tensor_free(t);
    }
    free(host);
    if (*code != CX_OK) {
        free(t);
        return NULL;
    }
    return t;
}

static void the_emulated_device_is_listed_as_a_gpu(void **state) {
    (void)state;
    assert_non_null(strstr(cuda->props.name, "emulator"));
    assert_string_equal(cuda->props.kind, "gpu");
    assert_false(cuda->props.host_memory);
    assert_int_equal(cuda->driver->abi, CX_DRIVER_ABI);
    assert_non_null(cuda->driver->download_async);
}

/* Work runs on the emulated stream after the call returns; a download waits for it. */
static void a_chain_of_ops_runs_and_comes_back(void **state) {
    (void)state;
    cx_tensor *a = tu_tensor(CX_F32, 2, TU_SHAPE(2, 3), TU_VALUES(1, 2, 3, 4, 5, 6));
    cx_tensor *b = tu_tensor(CX_F32, 2, TU_SHAPE(3, 2), TU_VALUES(1, 0, 0, 1, 1, 1));
    cx_tensor *da = on_cuda(a), *db = on_cuda(b);
    cx_status st = {0};
    cx_params none = {0}, dot = {0};
    cx_tensor e, s, p;
    cx_param_put_ints(&dot, CX_P_CONTRACT_A, (int64_t[]){1}, 1);
    cx_param_put_ints(&dot, CX_P_CONTRACT_B, (int64_t[]){0}, 1);
    assert_int_equal(cx_run(CX_OP_EXP, cuda, (cx_tensor *[]){da}, 1, &none, &e, &st), CX_OK);
    assert_int_equal(cx_run(CX_OP_DOT, cuda, (cx_tensor *[]){da, db}, 2, &dot, &p, &st), CX_OK);
    assert_int_equal(cx_run(CX_OP_SOFTMAX, cuda, (cx_tensor *[]){&p}, 1, &none, &s, &st), CX_OK);
    assert_ptr_equal(s.device, cuda);
    cx_tensor *hp = to_cpu(&p), *hs = to_cpu(&s), *he = to_cpu(&e);
    tu_expect(hp, CX_F32, 2, TU_SHAPE(2, 2), TU_VALUES(4, 5, 10, 11), 0);
    double e1 = 1 / (1 + exp(1.0));
    tu_expect(hs, CX_F32, 2, TU_SHAPE(2, 2), TU_VALUES(e1, 1 - e1, e1, 1 - e1), 1e-6);
    tu_expect(he, CX_F32, 2, TU_SHAPE(2, 3),
              TU_VALUES(exp(1.0), exp(2.0), exp(3.0), exp(4.0), exp(5.0), exp(6.0)), 1e-6);
    cx_tensor_free(&e);
    cx_tensor_free(&s);
    cx_tensor_free(&p);
    tu_drop(hp);
    tu_drop(hs);
    tu_drop(he);
    tu_drop(da);
    tu_drop(db);
    tu_drop(a);
    tu_drop(b);
}

/* Every byte that crosses between host and device is counted, once. */
static void transfers_are_counted(void **state) {
    (void)state;
    long long before[4], after[4];
    transfer_counts(cuda->ctx, before);
    cx_code rc;
    cx_status st = {0};
    cx_tensor *t = pattern_on_cuda(1000, &rc, &st);
    assert_int_equal(rc, CX_OK);
    cx_tensor *back = to_cpu(t);
    transfer_counts(cuda->ctx, after);
    assert_int_equal(after[0] - before[0], 1);
    assert_int_equal(after[1] - before[1], 1000);
    assert_int_equal(after[2] - before[2], 1);
    assert_int_equal(after[3] - before[3], 1000);
    for (int k = 0; k < 1000; k++) assert_int_equal(((unsigned char *)back->data)[k], k % 251);
    tu_drop(back);
    tu_drop(t);
}

/* Through the pinned staging buffer in 8 MiB chunks: 0 bytes, one chunk, several, a tail. */
static void asynchronous_downloads_arrive_whole(void **state) {
    (void)state;
    const size_t sizes[] = {0, 1, 8 * MIB, 8 * MIB + 1, 20 * MIB + 12345};
    for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++) {
        size_t n = sizes[s];
        cx_code rc;
        cx_status st = {0};
        cx_tensor *t = pattern_on_cuda(n, &rc, &st);
        assert_int_equal(rc, CX_OK);
        unsigned char *dst = malloc(n + 1);
        dst[n] = 0xEE;
        tu_download w;
        tu_download_init(&w);
        assert_int_equal(cx_tensor_download_async(t, dst, n, tu_download_done, &w, &st), CX_OK);
        assert_true(tu_download_wait(&w, WAIT_MS));
        assert_int_equal(w.rc, CX_OK);
        assert_int_equal(w.calls, 1);
        assert_false(pthread_equal(w.thread, w.caller)); /* on the stream's thread */
        for (size_t k = 0; k < n; k++)
            if (dst[k] != (unsigned char)(k % 251)) fail_msg("%zu bytes: byte %zu differs", n, k);
        assert_int_equal(dst[n], 0xEE);
        tu_download_destroy(&w);
        free(dst);
        tu_drop(t);
    }
}

/* Past CKE_MEMORY (64 MiB here): CX_ENOMEM with the figures; once memory is freed, the device
 * works again. */
static void out_of_memory_is_an_error_and_the_device_stays_usable(void **state) {
    (void)state;
    cx_tensor *held[16];
    int n = 0;
    cx_code rc = CX_OK;
    cx_status st = {0};
    while (n < 16) {
        held[n] = pattern_on_cuda(16 * MIB, &rc, &st);
        if (!held[n]) break;
        n++;
    }
    assert_int_equal(rc, CX_ENOMEM);
    assert_in_range(n, 2, 4);
    assert_non_null(strstr(st.message, "out of device memory"));
    /* an op whose output does not fit fails the same way */
    cx_tensor out;
    cx_params none = {0};
    assert_int_equal(cx_run(CX_OP_NEGATE, cuda, (cx_tensor *[]){held[0]}, 1, &none, &out, &st),
                     CX_ENOMEM);
    for (int k = 0; k < n; k++) tu_drop(held[k]);
    cx_tensor *again = pattern_on_cuda(16 * MIB, &rc, &st);
    assert_int_equal(rc, CX_OK);
    cx_tensor *back = to_cpu(again);
    assert_int_equal(((unsigned char *)back->data)[16 * MIB - 1], (16 * MIB - 1) % 251);
    tu_drop(back);
    tu_drop(again);
}

/* CKE_FAIL_LAUNCH=3: the third kernel faults. The error surfaces at the next synchronisation;
 * from then on the device is lost and says so, a pending asynchronous download ends with an
 * error instead of never, and the cpu goes on. */
static void a_sticky_fault_marks_the_device_lost(void **state) {
    (void)state;
    const char *env = getenv("CKE_FAIL_LAUNCH");
    if (!env || strcmp(env, "3") != 0) fail_msg("run with CKE_FAIL_LAUNCH=3");
    cx_tensor *a = tu_tensor(CX_F32, 1, TU_SHAPE(4), TU_VALUES(1, 2, 3, 4));
    cx_tensor *da = on_cuda(a);
    cx_status st = {0};
    cx_params none = {0};
    cx_tensor r1, r2, r3;
    assert_int_equal(cx_run(CX_OP_EXP, cuda, (cx_tensor *[]){da}, 1, &none, &r1, &st), CX_OK);
    assert_int_equal(cx_run(CX_OP_SIN, cuda, (cx_tensor *[]){&r1}, 1, &none, &r2, &st), CX_OK);
    /* the third launch: usually enqueued without complaint, as on a GPU; but when the device
     * thread has already run it and faulted by the time the launch is checked, the sticky error
     * surfaces at once (a real GPU does the same), so both answers are right */
    cx_code third = cx_run(CX_OP_COS, cuda, (cx_tensor *[]){&r2}, 1, &none, &r3, &st);
    if (third == CX_OK) {
        float got[4];
        tu_download w;
        tu_download_init(&w);
        cx_code rc = cx_tensor_download_async(&r3, got, sizeof got, tu_download_done, &w, &st);
        if (rc == CX_OK) {
            assert_true(tu_download_wait(&w, WAIT_MS)); /* called back, with the error */
            assert_int_equal(w.calls, 1);
            assert_int_equal(w.rc, CX_EDEVICE);
        } else {
            assert_int_equal(rc, CX_EDEVICE);
        }
        tu_download_destroy(&w);
        assert_int_equal(cx_tensor_download(&r3, got, sizeof got, &st), CX_EDEVICE);
    } else {
        assert_int_equal(third, CX_EDEVICE);
    }
    assert_non_null(strstr(st.message, "is lost"));
    assert_non_null(strstr(st.message, "cudaErrorIllegalAddress"));
    cx_tensor r4;
    assert_int_equal(cx_run(CX_OP_EXP, cuda, (cx_tensor *[]){da}, 1, &none, &r4, &st), CX_EDEVICE);
    assert_non_null(strstr(st.message, "is lost"));
    /* freeing tensors of a lost device is quiet, and the cpu is unaffected */
    cx_tensor_free(&r1);
    cx_tensor_free(&r2);
    if (third == CX_OK) cx_tensor_free(&r3);
    tu_drop(da);
    cx_tensor *c = tu_run_ok(CX_OP_EXP, (cx_tensor *[]){a}, 1, NULL);
    tu_expect(c, CX_F32, 1, TU_SHAPE(4), TU_VALUES(exp(1.0), exp(2.0), exp(3.0), exp(4.0)), 1e-6);
    tu_drop(c);
    tu_drop(a);
}

int main(int argc, char **argv) {
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (argc > 1 && strcmp(argv[1], "lost") == 0) {
        const struct CMUnitTest lost[] = {cmocka_unit_test(a_sticky_fault_marks_the_device_lost)};
        return cmocka_run_group_tests_name("cuda emulator: device lost", lost, setup, NULL);
    }
    setenv("CKE_MEMORY", "67108864", 1); /* read once, at the first allocation */
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(the_emulated_device_is_listed_as_a_gpu),
        cmocka_unit_test(a_chain_of_ops_runs_and_comes_back),
        cmocka_unit_test(transfers_are_counted),
        cmocka_unit_test(asynchronous_downloads_arrive_whole),
        cmocka_unit_test(out_of_memory_is_an_error_and_the_device_stays_usable),
    };
    return cmocka_run_group_tests_name("cuda emulator", tests, setup, NULL);
}
