/* The cuda driver's benchmark, beside bench_torch.py (the same ops, sizes and iteration
 * counts in PyTorch). Runs through the core as Cascade does (cx_run: dispatch, then the
 * driver's execute on the device's owner thread), no BEAM needed:
 *
 *   matmul f32 and bf16 at 1024, 4096, 8192; add and exp on 64M f32 elements; softmax over the
 *   last axis of 8192 x 8192 f32; conv2d (nchw, 3x3, padding 1) of 64x32x28x28 with 64 filters
 *   and of 32x256x56x56 with 256 (a ResNet layer), f32 and f16, once per path of the driver:
 *   "conv2d:im2col" and "conv2d:cudnn" (cx_cuda_set_conv_path, whatever CASCADE_CUDA_CONV says;
 *   the cudnn row is left out where libcudnn.so.9 does not load), then "conv2d" with the
 *   default (auto), the row compare.py sets against PyTorch's.
 *
 * Each op runs a few times to warm up, then `iters` times back to back; the clock stops after
 * cx_cuda_synchronize, so the time is the GPU's, launch overhead included. One JSON object per
 * line: {"op", "type", "size", "ms", "rate", "unit"}.
 *
 * usage: bench_cuda [path/to/cascade_driver_cuda.so] */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../../c_src/core/dispatch.h"
#include "../../c_src/core/half.h"

#ifndef CX_BUILD_DIR
#define CX_BUILD_DIR "build"
#endif

static cx_device *cpu, *gpu;
static cx_code (*synchronize)(void *, cx_status *);
static int (*set_conv_path)(const char *);

static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static void check(cx_code rc, const cx_status *st, const char *what) {
    if (rc == CX_OK) return;
    fprintf(stderr, "bench_cuda: %s: %s\n", what, st->message);
    exit(1);
}

/* A tensor of pseudo-random values in [-1, 1) on the gpu, made on the cpu and moved. */
static cx_tensor *random_on_gpu(cx_dtype t, int rank, const int64_t *shape) {
    cx_desc d = {.dtype = t, .rank = rank};
    memcpy(d.shape, shape, sizeof(int64_t) * (size_t)rank);
    cx_status st = {0};
    cx_tensor host, *x = malloc(sizeof *x);
    check(cx_tensor_init(&host, cpu, &d, &st), &st, "alloc");
    uint64_t s = 88172645463325252u;
    for (int64_t i = 0; i < host.numel; i++) {
        s ^= s << 13, s ^= s >> 7, s ^= s << 17;
        float v = (float)((double)(s >> 11) / 4503599627370496.0 - 1.0);
        if (t == CX_F32)
            ((float *)host.data)[i] = v;
        else if (t == CX_F16)
            ((uint16_t *)host.data)[i] = cx_f16_from_f32(v);
        else { /* bf16: the high half of the f32 (truncation is fine for random inputs) */
            uint32_t bits;
            memcpy(&bits, &v, 4);
            ((uint16_t *)host.data)[i] = (uint16_t)(bits >> 16);
        }
    }
    check(cx_transfer(&host, gpu, x, &st), &st, "transfer");
    cx_tensor_free(&host);
    return x;
}

static void sync_gpu(void) {
    cx_status st = {0};
    check(synchronize(gpu->ctx, &st), &st, "synchronize");
}

/* Milliseconds per run of op on the inputs, after warming up. */
static double timed(cx_op_id op, cx_tensor **in, int n, const cx_params *ps, int iters) {
    cx_status st = {0};
    for (int k = 0; k < 3; k++) {
        cx_params p = *ps;
        cx_tensor out;
        check(cx_run(op, gpu, in, n, &p, &out, &st), &st, cx_op_table[op].name);
        cx_tensor_free(&out);
    }
    sync_gpu();
    double t0 = now_ms();
    for (int k = 0; k < iters; k++) {
        cx_params p = *ps;
        cx_tensor out;
        check(cx_run(op, gpu, in, n, &p, &out, &st), &st, cx_op_table[op].name);
        cx_tensor_free(&out);
    }
    sync_gpu();
    return (now_ms() - t0) / iters;
}

static void report(const char *op, const char *type, const char *size, double ms, double rate,
                   const char *unit) {
    printf("{\"op\": \"%s\", \"type\": \"%s\", \"size\": \"%s\", \"ms\": %.4f, \"rate\": %.2f, "
           "\"unit\": \"%s\"}\n",
           op, type, size, ms, rate, unit);
    fflush(stdout);
}

static void bench_matmul(cx_dtype t, int64_t n) {
    cx_tensor *a = random_on_gpu(t, 2, (int64_t[]){n, n});
    cx_tensor *b = random_on_gpu(t, 2, (int64_t[]){n, n});
    cx_params ps = {0};
    cx_param_put_ints(&ps, CX_P_CONTRACT_A, (int64_t[]){1}, 1);
    cx_param_put_ints(&ps, CX_P_CONTRACT_B, (int64_t[]){0}, 1);
    int iters = n <= 1024 ? 100 : n <= 4096 ? 20 : 10;
    double ms = timed(CX_OP_DOT, (cx_tensor *[]){a, b}, 2, &ps, iters);
    char size[48];
    snprintf(size, sizeof size, "%lldx%lld", (long long)n, (long long)n);
    report("matmul", cx_dtype_name(t), size, ms, 2.0 * n * n * n / ms / 1e9, "TFLOP/s");
    cx_tensor_free(a);
    cx_tensor_free(b);
    free(a);
    free(b);
}

static void bench_elementwise(void) {
    int64_t n = INT64_C(64) << 20;
    cx_tensor *a = random_on_gpu(CX_F32, 1, &n);
    cx_tensor *b = random_on_gpu(CX_F32, 1, &n);
    cx_params ps = {0};
    double ms = timed(CX_OP_ADD, (cx_tensor *[]){a, b}, 2, &ps, 50);
    report("add", "f32", "64M", ms, 3.0 * 4 * n / ms / 1e6, "GB/s");
    ms = timed(CX_OP_EXP, (cx_tensor *[]){a}, 1, &ps, 50);
    report("exp", "f32", "64M", ms, 2.0 * 4 * n / ms / 1e6, "GB/s");
    cx_tensor_free(a);
    cx_tensor_free(b);
    free(a);
    free(b);
}

static void bench_softmax(void) {
    cx_tensor *x = random_on_gpu(CX_F32, 2, (int64_t[]){8192, 8192});
    cx_params ps = {0};
    cx_param_put_int(&ps, CX_P_AXIS, 1);
    double ms = timed(CX_OP_SOFTMAX, &x, 1, &ps, 50);
    report("softmax", "f32", "8192x8192", ms, 2.0 * 4 * 8192 * 8192 / ms / 1e6, "GB/s");
    cx_tensor_free(x);
    free(x);
}

/* conv2d of {n, c, hw, hw} with o filters of 3x3, padding 1 (:same), on each path. */
static void bench_conv2d(cx_dtype t, int64_t n, int64_t c, int64_t hw, int64_t o, int iters) {
    cx_tensor *x = random_on_gpu(t, 4, (int64_t[]){n, c, hw, hw});
    cx_tensor *k = random_on_gpu(t, 4, (int64_t[]){o, c, 3, 3});
    cx_params ps = {0};
    cx_param_put_ints(&ps, CX_P_PADDING, (int64_t[]){1, 1, 1, 1}, 4);
    char size[64];
    snprintf(size, sizeof size, "%lldx%lldx%lldx%lld,%lldx3x3", (long long)n, (long long)c,
             (long long)hw, (long long)hw, (long long)o);
    double flop = 2.0 * n * o * hw * hw * c * 9;
    static const char *const paths[][2] = {
        {"im2col", "conv2d:im2col"}, {"cudnn", "conv2d:cudnn"}, {"auto", "conv2d"}};
    for (int p = 0; p < 3; p++) {
        if (set_conv_path(paths[p][0]) == 2 && p == 1) {
            fprintf(stderr, "bench_cuda: libcudnn.so.9 does not load: no conv2d:cudnn row\n");
            continue;
        }
        double ms = timed(CX_OP_CONV2D, (cx_tensor *[]){x, k}, 2, &ps, iters);
        report(paths[p][1], cx_dtype_name(t), size, ms, flop / ms / 1e9, "TFLOP/s");
    }
    cx_tensor_free(x);
    cx_tensor_free(k);
    free(x);
    free(k);
}

int main(int argc, char **argv) {
    const char *path = argc > 1 ? argv[1] : CX_BUILD_DIR "/cascade_driver_cuda.so";
    cx_driver_spec spec = {"cuda", path};
    cx_status st = {0};
    check(cx_devices_init(&spec, 1, &st), &st, "init");
    cpu = cx_device_find("cpu");
    gpu = cx_device_find("cuda");
    if (!gpu || !gpu->available) {
        fprintf(stderr, "bench_cuda: cuda is unavailable: %s\n", gpu ? gpu->reason : "?");
        return 2;
    }
    void *h = dlopen(path, RTLD_NOW | RTLD_NOLOAD);
    *(void **)&synchronize = h ? dlsym(h, "cx_cuda_synchronize") : NULL;
    if (!synchronize) {
        fprintf(stderr, "bench_cuda: %s exports no cx_cuda_synchronize\n", path);
        return 2;
    }
    *(void **)&set_conv_path = h ? dlsym(h, "cx_cuda_set_conv_path") : NULL;
    if (!set_conv_path) {
        fprintf(stderr, "bench_cuda: %s exports no cx_cuda_set_conv_path\n", path);
        return 2;
    }
    fprintf(stderr, "bench_cuda: %s, %s\n", gpu->props.name, gpu->props.detail);
    cx_set_policy(CX_POLICY_ERROR); /* a fallback to the cpu would not be a GPU number */
    for (int64_t n = 1024; n <= 8192; n *= (n == 1024 ? 4 : 2)) {
        bench_matmul(CX_F32, n);
        bench_matmul(CX_BF16, n);
    }
    bench_elementwise();
    bench_softmax();
    for (int j = 0; j < 2; j++) {
        cx_dtype t = j ? CX_F16 : CX_F32;
        bench_conv2d(t, 64, 32, 28, 64, 100);
        bench_conv2d(t, 32, 256, 56, 256, 20);
    }
    return 0;
}
