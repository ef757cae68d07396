/* CLBlast SGEMM against a hand-written tiled OpenCL GEMM on the first OpenCL device, square
 * f32 matrices, row-major: the measurement behind "GEMM through CLBlast where it beats a
 * hand-written kernel" (bench/opencl/run.sh builds and runs it).
 *
 * Each figure is the median of 5 timed runs after one warm-up run (which includes building the
 * kernels), each run enqueued and finished with clFinish. The two results are compared with
 * each other (max relative difference printed) so that a fast wrong kernel cannot win. */
#define CL_TARGET_OPENCL_VERSION 120
#include <CL/cl.h>
#include <clblast_c.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define TILE 16

static const char *tiled_src =
    "#define TILE 16\n"
    "__kernel void gemm_tiled(const int n, __global const float *a, __global const float *b,\n"
    "                         __global float *c) {\n"
    "  __local float as[TILE][TILE], bs[TILE][TILE];\n"
    "  int lr = get_local_id(1), lc = get_local_id(0);\n"
    "  int row = get_group_id(1) * TILE + lr, col = get_group_id(0) * TILE + lc;\n"
    "  float acc = 0;\n"
    "  for (int t = 0; t < n; t += TILE) {\n"
    "    as[lr][lc] = a[row * n + t + lc];\n"
    "    bs[lr][lc] = b[(t + lr) * n + col];\n"
    "    barrier(CLK_LOCAL_MEM_FENCE);\n"
    "    for (int k = 0; k < TILE; k++) acc += as[lr][k] * bs[k][lc];\n"
    "    barrier(CLK_LOCAL_MEM_FENCE);\n"
    "  }\n"
    "  c[row * n + col] = acc;\n"
    "}\n";

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static int cmp(const void *x, const void *y) {
    double a = *(const double *)x, b = *(const double *)y;
    return a < b ? -1 : a > b;
}

#define CHECK(e)                                                                                   \
    do {                                                                                           \
        cl_int err_ = (e);                                                                         \
        if (err_ != CL_SUCCESS) {                                                                  \
            fprintf(stderr, "%s failed: %d\n", #e, (int)err_);                                     \
            exit(1);                                                                               \
        }                                                                                          \
    } while (0)

int main(void) {
    cl_platform_id platform;
    cl_device_id device;
    cl_uint np = 0;
    if (clGetPlatformIDs(1, &platform, &np) != CL_SUCCESS || np == 0) {
        printf("gemm_bench: no OpenCL platform\n");
        return 0;
    }
    CHECK(clGetDeviceIDs(platform, CL_DEVICE_TYPE_ALL, 1, &device, NULL));
    char name[256] = "";
    clGetDeviceInfo(device, CL_DEVICE_NAME, sizeof name - 1, name, NULL);
    cl_int err;
    cl_context ctx = clCreateContext(NULL, 1, &device, NULL, NULL, &err);
    CHECK(err);
    cl_command_queue q = clCreateCommandQueue(ctx, device, 0, &err);
    CHECK(err);
    cl_program prog = clCreateProgramWithSource(ctx, 1, &tiled_src, NULL, &err);
    CHECK(err);
    CHECK(clBuildProgram(prog, 1, &device, "", NULL, NULL));
    cl_kernel k = clCreateKernel(prog, "gemm_tiled", &err);
    CHECK(err);
    printf("device: %s\n\n| n | CLBlast SGEMM | tiled kernel (16x16) | max rel. diff |\n"
           "|---|---------------|----------------------|---------------|\n",
           name);
    static const int sizes[] = {256, 512, 1024};
    for (int s = 0; s < 3; s++) {
        int n = sizes[s];
        size_t bytes = sizeof(float) * (size_t)n * n;
        float *ha = malloc(bytes), *hb = malloc(bytes), *c1 = malloc(bytes), *c2 = malloc(bytes);
        srand(7);
        for (size_t i = 0; i < (size_t)n * n; i++) {
            ha[i] = (float)rand() / RAND_MAX - 0.5f;
            hb[i] = (float)rand() / RAND_MAX - 0.5f;
        }
        cl_mem a = clCreateBuffer(ctx, CL_MEM_READ_ONLY | CL_MEM_COPY_HOST_PTR, bytes, ha, &err);
        cl_mem b = clCreateBuffer(ctx, CL_MEM_READ_ONLY | CL_MEM_COPY_HOST_PTR, bytes, hb, &err);
        cl_mem c = clCreateBuffer(ctx, CL_MEM_READ_WRITE, bytes, NULL, &err);
        double t[2][6];
        for (int which = 0; which < 2; which++) {
            for (int r = 0; r < 6; r++) {
                double t0 = now();
                if (which == 0) {
                    CLBlastStatusCode rc =
                        CLBlastSgemm(CLBlastLayoutRowMajor, CLBlastTransposeNo, CLBlastTransposeNo,
                                     n, n, n, 1.0f, a, 0, n, b, 0, n, 0.0f, c, 0, n, &q, NULL);
                    if (rc != CLBlastSuccess) {
                        fprintf(stderr, "CLBlastSgemm: %d\n", (int)rc);
                        return 1;
                    }
                } else {
                    size_t global[2] = {(size_t)n, (size_t)n}, local[2] = {TILE, TILE};
                    CHECK(clSetKernelArg(k, 0, sizeof n, &n));
                    CHECK(clSetKernelArg(k, 1, sizeof a, &a));
                    CHECK(clSetKernelArg(k, 2, sizeof b, &b));
                    CHECK(clSetKernelArg(k, 3, sizeof c, &c));
                    CHECK(clEnqueueNDRangeKernel(q, k, 2, NULL, global, local, 0, NULL, NULL));
                }
                CHECK(clFinish(q));
                t[which][r] = now() - t0;
            }
            CHECK(clEnqueueReadBuffer(q, c, CL_TRUE, 0, bytes, which ? c2 : c1, 0, NULL, NULL));
            qsort(&t[which][1], 5, sizeof(double), cmp); /* run 0 is the warm-up */
        }
        double diff = 0;
        for (size_t i = 0; i < (size_t)n * n; i++) {
            double d = fabs((double)c1[i] - c2[i]) / (fabs((double)c1[i]) + 1e-3);
            if (d > diff) diff = d;
        }
        double flop = 2.0 * n * n * n;
        printf("| %d | %.2f ms (%.1f GFLOP/s) | %.2f ms (%.1f GFLOP/s) | %.1e |\n", n,
               t[0][3] * 1e3, flop / t[0][3] * 1e-9, t[1][3] * 1e3, flop / t[1][3] * 1e-9, diff);
        clReleaseMemObject(a);
        clReleaseMemObject(b);
        clReleaseMemObject(c);
        free(ha);
        free(hb);
        free(c1);
        free(c2);
    }
    clReleaseKernel(k);
    clReleaseProgram(prog);
    clReleaseCommandQueue(q);
    clReleaseContext(ctx);
    return 0;
}
