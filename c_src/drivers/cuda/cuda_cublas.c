/* cuBLAS, loaded with dlopen at a device's first product rather than linked.
 *
 * libcublas.so maps libcublasLt, and loading the two costs a process about 150 MB of resident
 * memory (their relocations and static tables) before any GEMM has run. Linked, every BEAM that
 * loads Cascade paid that, GPU or not. Now the driver's shared object needs only the NVIDIA
 * driver library (itself looked for with dlopen by cuda_probe), and cuBLAS comes when a device
 * that exists is first asked for a product: cuda_blas_handle, on its owner thread.
 *
 * The emulator build (CK_EMULATE) links its own cuBLAS functions and takes their addresses. */
#include "cuda_device.h"

#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

cuda_cublas_api cuda_cublas;

static bool loaded;
static char load_error[200];
static pthread_once_t load_once = PTHREAD_ONCE_INIT;

#define STR_(x) #x
#define STR(x)  STR_(x)
/* the soname of the toolkit the driver was built with, e.g. libcublas.so.13; found through the
 * driver's rpath to the toolkit (driver.mk) or the usual search */
#define CUBLAS_SONAME "libcublas.so." STR(CUBLAS_VER_MAJOR)

static void load(void) {
#ifdef CK_EMULATE
    cuda_cublas = (cuda_cublas_api){cublasCreate, cublasSetStream, cublasGemmStridedBatchedEx,
                                    cublasGetStatusName, cublasGetStatusString};
    loaded = true;
#else
    void *h = dlopen(CUBLAS_SONAME, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        snprintf(load_error, sizeof load_error, "%s", dlerror());
        return;
    }
    /* the exported names: cublas_v2.h maps cublasCreate and cublasSetStream onto _v2 */
    const char *names[] = {"cublasCreate_v2", "cublasSetStream_v2", "cublasGemmStridedBatchedEx",
                           "cublasGetStatusName", "cublasGetStatusString"};
    void *fns[5];
    for (int k = 0; k < 5; k++)
        if (!(fns[k] = dlsym(h, names[k]))) {
            snprintf(load_error, sizeof load_error, "%s has no %s", CUBLAS_SONAME, names[k]);
            dlclose(h);
            return;
        }
    *(void **)&cuda_cublas.create = fns[0];
    *(void **)&cuda_cublas.set_stream = fns[1];
    *(void **)&cuda_cublas.gemm_strided_batched = fns[2];
    *(void **)&cuda_cublas.status_name = fns[3];
    *(void **)&cuda_cublas.status_string = fns[4];
    loaded = true; /* kept open for the life of the process */
#endif
}

cx_code cuda_blas_handle(cuda_device *d, cublasHandle_t *out, cx_status *st) {
    if (!d->blas) {
        pthread_once(&load_once, load);
        if (!loaded)
            return cx_fail(st, CX_EDEVICE, "cuda:%d: cuBLAS could not be loaded: %s", d->ordinal,
                           load_error);
        cublasHandle_t h = NULL;
        cx_code rc = cuda_check_blas(d, cuda_cublas.create(&h), "cublasCreate", st);
        if (!rc)
            rc = cuda_check_blas(d, cuda_cublas.set_stream(h, d->stream), "cublasSetStream", st);
        if (rc) return rc; /* a handle whose stream could not be set is left, not used */
        d->blas = h;
    }
    *out = d->blas;
    return CX_OK;
}
