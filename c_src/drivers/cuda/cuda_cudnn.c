/* conv2d through cuDNN (cuda_conv.h), loaded with dlopen("libcudnn.so.9") at the first conv2d:
 * nothing links it, so the driver builds where the toolkit has no cuDNN headers (this file then
 * compiles to "not loaded") and loads and runs where the library is missing (then im2col runs).
 * The cpu emulator build (CK_EMULATE) leaves cuDNN out the same way.
 *
 * The legacy convolution API (cudnnConvolutionForward): deprecated in cuDNN 9 but exported by
 * libcudnn.so.9, and it needs no graph building. Per device: one handle on the device's stream,
 * made on the owner thread at the first call, and a cache of PLANS geometries, each with its
 * descriptors and the algorithm cudnnGetConvolutionForwardAlgorithm_v7's heuristics rank first
 * (no benchmarking on the caller's path), or the note that cuDNN cannot run it. The cache and
 * the handle are touched by the owner thread only, so they need no lock.
 *
 * What cuDNN is given:
 *   - nchw: tensors NCHW and the kernel {O, cg, KH, KW} as it is (filter format NCHW);
 *   - nhwc: tensors NHWC; the kernel {KH, KW, cg, O} is copied into cuDNN's NHWC filter order
 *     {O, KH, KW, cg} first (a small copy beside the convolution);
 *   - f32 with CUDNN_FMA_MATH (IEEE f32, no TF32, as dot and PyTorch's default), f16 and bf16
 *     with f32 accumulation (compute type FLOAT) on tensor cores;
 *   - symmetric, non-negative padding only: the low padding of each axis, provided cuDNN's
 *     output size with it equals ours (the high padding then only decides how many windows
 *     fit). Other geometries, and sizes beyond cuDNN's 32-bit ones, run im2col. */
#include "cuda_conv.h"

#if !defined(CK_EMULATE) && defined(__has_include)
#if __has_include(<cudnn.h>)
#define CUDA_WITH_CUDNN 1
#endif
#endif

#ifndef CUDA_WITH_CUDNN

bool cuda_cudnn_loaded(void) {
    return false;
}

cx_code cuda_cudnn_conv2d(cuda_device *d, const cx_tensor *x, const cx_tensor *kern,
                          const cx_conv_dims *v, cx_tensor *out, bool *ran, cx_status *st) {
    *ran = false;
    return CX_OK;
}

#else

#include <cudnn.h>
#include <dlfcn.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_kernels.h"

/* ---- the library ------------------------------------------------------------------------------
 */

#define CUDNN_FUNCTIONS(X)                                                                         \
    X(cudnnGetErrorString)                                                                         \
    X(cudnnCreate)                                                                                 \
    X(cudnnSetStream)                                                                              \
    X(cudnnCreateTensorDescriptor)                                                                 \
    X(cudnnSetTensor4dDescriptor)                                                                  \
    X(cudnnDestroyTensorDescriptor)                                                                \
    X(cudnnCreateFilterDescriptor)                                                                 \
    X(cudnnSetFilter4dDescriptor)                                                                  \
    X(cudnnDestroyFilterDescriptor)                                                                \
    X(cudnnCreateConvolutionDescriptor)                                                            \
    X(cudnnSetConvolution2dDescriptor)                                                             \
    X(cudnnSetConvolutionGroupCount)                                                               \
    X(cudnnSetConvolutionMathType)                                                                 \
    X(cudnnGetConvolution2dForwardOutputDim)                                                       \
    X(cudnnDestroyConvolutionDescriptor)                                                           \
    X(cudnnGetConvolutionForwardAlgorithm_v7)                                                      \
    X(cudnnConvolutionForward)

/* The entry points, typed by the header's own declarations. */
static struct {
#define MEMBER(f) __typeof__(&f) f;
    CUDNN_FUNCTIONS(MEMBER)
#undef MEMBER
} api;

static bool loaded;
static pthread_once_t load_once = PTHREAD_ONCE_INIT;

static void load(void) {
    /* found through the driver's rpath to the toolkit's libraries, or the usual search */
    void *h = dlopen("libcudnn.so.9", RTLD_NOW | RTLD_LOCAL);
    if (!h) return;
    bool all = true;
#define LOOKUP(f) all = all && (*(void **)&api.f = dlsym(h, #f)) != NULL;
    CUDNN_FUNCTIONS(LOOKUP)
#undef LOOKUP
    if (!all) {
        memset(&api, 0, sizeof api);
        dlclose(h);
        return;
    }
    loaded = true; /* kept open for the life of the process */
}

bool cuda_cudnn_loaded(void) {
    pthread_once(&load_once, load);
    return loaded;
}

/* ---- plans ------------------------------------------------------------------------------------
 */

#define MAX_DEVICES   64
#define PLANS         32
/* The most workspace an algorithm may ask for: past it, the next one in the heuristics' order */
#define WORKSPACE_MAX ((size_t)512 << 20)

/* A geometry, every field an int64_t so that memcmp compares it; oh and ow stand for the high
 * paddings. */
typedef struct {
    int64_t dtype, nhwc, n, c, h, w, o, cg, kh, kw, oh, ow, s0, s1, d0, d1, p0, p1, groups;
} plan_key;

typedef struct {
    plan_key key;
    bool used;
    bool usable; /* cuDNN runs it; else im2col does */
    cudnnTensorDescriptor_t xd, yd;
    cudnnFilterDescriptor_t wd;
    cudnnConvolutionDescriptor_t cd;
    cudnnConvolutionFwdAlgo_t algo;
    cudnnMathType_t math;
    size_t workspace;
    /* the first algorithm that needs no workspace, for when the workspace cannot be had */
    bool has_lean;
    cudnnConvolutionFwdAlgo_t lean_algo;
    cudnnMathType_t lean_math;
} plan;

typedef struct {
    bool tried; /* cudnnCreate was called; handle is NULL if it failed */
    cudnnHandle_t handle;
    plan plans[PLANS];
    int victim; /* the next slot to reuse */
} device_cudnn;

/* Indexed by ordinal; each entry made and used by its device's owner thread only. */
static device_cudnn *devices[MAX_DEVICES];

/* The device's handle, made at the first call; NULL if cuDNN cannot start on it. */
static device_cudnn *device_state(cuda_device *d) {
    if (d->ordinal < 0 || d->ordinal >= MAX_DEVICES) return NULL;
    device_cudnn *s = devices[d->ordinal];
    if (!s) {
        s = calloc(1, sizeof *s);
        if (!s) return NULL;
        devices[d->ordinal] = s;
    }
    if (!s->tried) {
        s->tried = true;
        cudnnHandle_t h = NULL;
        /* e.g. a cuDNN built for another CUDA, or its sub-libraries missing */
        if (api.cudnnCreate(&h) == CUDNN_STATUS_SUCCESS &&
            api.cudnnSetStream(h, d->stream) == CUDNN_STATUS_SUCCESS)
            s->handle = h;
    }
    return s->handle ? s : NULL;
}

static bool fits_int(int64_t x) {
    return x >= 0 && x <= INT_MAX;
}

/* The key of a geometry cuDNN's descriptors can express, or false. */
static bool key_of(const cx_conv_dims *v, const cx_tensor *x, const cx_tensor *kern,
                   const cx_tensor *out, plan_key *k) {
    *k = (plan_key){out->desc.dtype, v->nhwc, v->n,   v->c,   v->h,     v->w,  v->groups * v->og,
                    v->cg,           v->kh,   v->kw,  v->oh,  v->ow,    v->s0, v->s1,
                    v->d0,           v->d1,   v->lo0, v->lo1, v->groups};
    const int64_t dims[] = {k->n,  k->c,  k->h,  k->w,  k->o,  k->cg, k->kh, k->kw,    k->oh,
                            k->ow, k->s0, k->s1, k->d0, k->d1, k->p0, k->p1, k->groups};
    for (size_t j = 0; j < sizeof dims / sizeof dims[0]; j++)
        if (!fits_int(dims[j])) return false; /* negative padding included */
    /* the legacy API's tensors have fewer than 2^31 elements */
    return fits_int(x->numel) && fits_int(kern->numel) && fits_int(out->numel);
}

static void plan_destroy(plan *p) {
    if (p->xd) api.cudnnDestroyTensorDescriptor(p->xd);
    if (p->yd) api.cudnnDestroyTensorDescriptor(p->yd);
    if (p->wd) api.cudnnDestroyFilterDescriptor(p->wd);
    if (p->cd) api.cudnnDestroyConvolutionDescriptor(p->cd);
    memset(p, 0, sizeof *p);
}

/* Picks the algorithms of a plan whose descriptors are set: the heuristics' first that
 * succeeds, keeps f32 in FMA (no TF32) and needs at most WORKSPACE_MAX, and the first that
 * needs no workspace. */
static void plan_algorithms(cudnnHandle_t h, plan *p, bool f32) {
    cudnnConvolutionFwdAlgoPerf_t perf[CUDNN_CONVOLUTION_FWD_ALGO_COUNT];
    int found = 0;
    if (api.cudnnGetConvolutionForwardAlgorithm_v7(h, p->xd, p->wd, p->cd, p->yd,
                                                   CUDNN_CONVOLUTION_FWD_ALGO_COUNT, &found,
                                                   perf) != CUDNN_STATUS_SUCCESS)
        return;
    for (int j = 0; j < found && j < CUDNN_CONVOLUTION_FWD_ALGO_COUNT; j++) {
        const cudnnConvolutionFwdAlgoPerf_t *r = &perf[j];
        if (r->status != CUDNN_STATUS_SUCCESS || (f32 && r->mathType != CUDNN_FMA_MATH)) continue;
        if (!p->usable && r->memory <= WORKSPACE_MAX) {
            p->usable = true;
            p->algo = r->algo;
            p->math = r->mathType;
            p->workspace = r->memory;
        }
        if (!p->has_lean && r->memory == 0) {
            p->has_lean = true;
            p->lean_algo = r->algo;
            p->lean_math = r->mathType;
        }
    }
}

/* Fills slot p (empty) with the plan of key k: descriptors, then the algorithms; p->usable
 * stays false when cuDNN cannot run the geometry. */
static void plan_make(cudnnHandle_t h, plan *p, const plan_key *k) {
    p->key = *k;
    p->used = true;
    cudnnDataType_t dt = k->dtype == CX_F32   ? CUDNN_DATA_FLOAT
                         : k->dtype == CX_F16 ? CUDNN_DATA_HALF
                                              : CUDNN_DATA_BFLOAT16;
    cudnnTensorFormat_t fmt = k->nhwc ? CUDNN_TENSOR_NHWC : CUDNN_TENSOR_NCHW;
    const cudnnStatus_t ok = CUDNN_STATUS_SUCCESS;
    /* a descriptor whose create failed stays NULL, which plan_destroy skips */
    if (api.cudnnCreateTensorDescriptor(&p->xd) != ok ||
        api.cudnnCreateTensorDescriptor(&p->yd) != ok ||
        api.cudnnCreateFilterDescriptor(&p->wd) != ok ||
        api.cudnnCreateConvolutionDescriptor(&p->cd) != ok)
        return;
    /* dimensions are given as (n, c, h, w) whatever the format; the filter's NHWC format is
     * {O, KH, KW, cg} in memory */
    if (api.cudnnSetTensor4dDescriptor(p->xd, fmt, dt, (int)k->n, (int)k->c, (int)k->h,
                                       (int)k->w) != ok ||
        api.cudnnSetTensor4dDescriptor(p->yd, fmt, dt, (int)k->n, (int)k->o, (int)k->oh,
                                       (int)k->ow) != ok ||
        api.cudnnSetFilter4dDescriptor(p->wd, dt, fmt, (int)k->o, (int)k->cg, (int)k->kh,
                                       (int)k->kw) != ok ||
        api.cudnnSetConvolution2dDescriptor(p->cd, (int)k->p0, (int)k->p1, (int)k->s0, (int)k->s1,
                                            (int)k->d0, (int)k->d1, CUDNN_CROSS_CORRELATION,
                                            CUDNN_DATA_FLOAT) != ok ||
        api.cudnnSetConvolutionGroupCount(p->cd, (int)k->groups) != ok ||
        api.cudnnSetConvolutionMathType(p->cd, k->dtype == CX_F32 ? CUDNN_FMA_MATH
                                                                  : CUDNN_TENSOR_OP_MATH) != ok)
        return;
    /* cuDNN pads both sides with the low padding: its windows are ours only if as many fit */
    int on = 0, oc = 0, oh = 0, ow = 0;
    if (api.cudnnGetConvolution2dForwardOutputDim(p->cd, p->xd, p->wd, &on, &oc, &oh, &ow) != ok ||
        on != k->n || oc != k->o || oh != k->oh || ow != k->ow)
        return;
    plan_algorithms(h, p, k->dtype == CX_F32);
}

/* The plan of key k, from the cache or made (evicting the oldest), or NULL without memory. */
static plan *plan_for(device_cudnn *s, const plan_key *k) {
    for (int j = 0; j < PLANS; j++)
        if (s->plans[j].used && memcmp(&s->plans[j].key, k, sizeof *k) == 0) return &s->plans[j];
    plan *p = &s->plans[s->victim];
    s->victim = (s->victim + 1) % PLANS;
    plan_destroy(p);
    plan_make(s->handle, p, k);
    return p;
}

/* ---- the convolution --------------------------------------------------------------------------
 */

static cx_code cudnn_failure(cuda_device *d, cudnnStatus_t s, const char *what, cx_status *st) {
    if (s == CUDNN_STATUS_INTERNAL_ERROR_DEVICE_ALLOCATION_FAILED ||
        s == CUDNN_STATUS_INTERNAL_ERROR_HOST_ALLOCATION_FAILED)
        return cx_fail(st, CX_ENOMEM, "cuda:%d: out of memory in %s", d->ordinal, what);
    /* an execution failure may hide a CUDA error, sticky or not */
    cudaError_t e = cudaPeekAtLastError();
    if (e != cudaSuccess) return cuda_check(d, e, what, st);
    return cx_fail(st, CX_EDEVICE, "cuda:%d: %s failed with %s (%d)", d->ordinal, what,
                   api.cudnnGetErrorString(s), (int)s);
}

/* The nhwc kernel {KH, KW, cg, O} in cuDNN's NHWC filter order {O, KH, KW, cg}, in a new buffer. */
static cx_code filter_ohwi(cuda_device *d, const cx_tensor *kern, const plan_key *k, void **out,
                           cx_status *st) {
    cx_code rc = cuda_mem_alloc(d, kern->nbytes, out, st);
    if (rc) {
        *out = NULL;
        return rc;
    }
    ck_copy c = {.rank = 4, .shape = {k->o, k->kh, k->kw, k->cg}};
    c.src_stride[0] = 1;
    c.src_stride[1] = k->kw * k->cg * k->o;
    c.src_stride[2] = k->cg * k->o;
    c.src_stride[3] = k->o;
    c.dst_stride[0] = k->kh * k->kw * k->cg;
    c.dst_stride[1] = k->kw * k->cg;
    c.dst_stride[2] = k->cg;
    c.dst_stride[3] = 1;
    return cuda_check(
        d, ck_copy_strided(cx_dtype_size(kern->desc.dtype), kern->data, *out, &c, d->stream),
        "conv2d: the kernel in cuDNN's order", st);
}

cx_code cuda_cudnn_conv2d(cuda_device *d, const cx_tensor *x, const cx_tensor *kern,
                          const cx_conv_dims *v, cx_tensor *out, bool *ran, cx_status *st) {
    *ran = false;
    plan_key k;
    if (!cuda_cudnn_loaded() || !key_of(v, x, kern, out, &k)) return CX_OK;
    device_cudnn *s = device_state(d);
    plan *p = s ? plan_for(s, &k) : NULL;
    if (!p || !p->usable) return CX_OK;

    cudnnConvolutionFwdAlgo_t algo = p->algo;
    cudnnMathType_t math = p->math;
    size_t ws_bytes = p->workspace;
    void *ws = NULL, *w_ohwi = NULL;
    cx_code rc = ws_bytes ? cuda_mem_alloc(d, ws_bytes, &ws, st) : CX_OK;
    if (rc == CX_ENOMEM && p->has_lean) { /* the algorithm that needs none */
        *st = (cx_status){CX_OK, ""};
        rc = CX_OK;
        algo = p->lean_algo;
        math = p->lean_math;
        ws_bytes = 0;
    }
    if (rc) return rc;
    if (!ws_bytes) ws = NULL;
    if (k.nhwc) rc = filter_ohwi(d, kern, &k, &w_ohwi, st);
    cudnnStatus_t cs = CUDNN_STATUS_SUCCESS;
    if (!rc) {
        const float one = 1.0f, zero = 0.0f;
        cs = api.cudnnSetConvolutionMathType(p->cd, math);
        if (cs == CUDNN_STATUS_SUCCESS)
            cs = api.cudnnConvolutionForward(s->handle, &one, p->xd, x->data, p->wd,
                                             k.nhwc ? w_ohwi : kern->data, p->cd, algo, ws,
                                             ws_bytes, &zero, p->yd, out->data);
        if (cs == CUDNN_STATUS_SUCCESS) {
            *ran = true;
        } else if (CUDNN_STATUS_CATEGORY(cs) == CUDNN_STATUS_NOT_SUPPORTED ||
                   CUDNN_STATUS_CATEGORY(cs) == CUDNN_STATUS_BAD_PARAM) {
            p->usable = false; /* refused before it ran: im2col from now on */
        } else {
            rc = cudnn_failure(d, cs, "cudnnConvolutionForward", st);
        }
    }
    /* stream-ordered: after the convolution that reads them */
    cuda_mem_free(d, ws);
    cuda_mem_free(d, w_ohwi);
    return rc;
}

#endif
