/* What the opencl driver claims, and how it runs each claimed op: argument structs filled on the
 * host, one kernel launch (or a buffer copy, or a CLBlast GEMM) per op.
 *
 * Native: elementwise unary/binary/compare/logical ops (the expressions of opencl_source.c),
 * select and clip, as_type, sum/product/reduce_max/reduce_min/all/any, argmax/argmin, iota and
 * eye, for f16 and bf16 (stored; computed in f32), f32, f64 (with cl_khr_fp64), u8, s32 and s64;
 * reshape, squeeze, transpose, broadcast, slice, reverse, pad, concatenate, take, gather and
 * full for every type (elements moved by size); dot on f32/f64 through CLBlast when its operands
 * are [batch, rows, cols] blocks (shape-dependent); the composites softmax and log_softmax,
 * layer_norm over trailing axes (shape-dependent), and conv2d on floats through im2col + a
 * CLBlast GEMM (every geometry; refused only when the scratch exceeds the device's largest
 * buffer), except for bf16, where they decompose into the primitives. Everything else is
 * refused, so the dispatcher decomposes it or moves it to the cpu.
 *
 * take and gather check their indices before moving anything, as the cpu driver does: a kernel
 * flags a bad index and the host reads the flag back, so these two ops wait for the device. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifdef CX_HAVE_CLBLAST
#include <clblast_c.h>
#endif

#include "../../core/conv_geom.h"
#include "opencl_source.h"
#include "../../core/fused.h"

/* Work-items per group of the one-dimensional launches. */
#define GROUP 256

typedef struct {
    size_t size;
    const void *value;
} karg;

#define ARG(x)   ((karg){sizeof(x), &(x)})
#define MEM(t)   ((karg){sizeof(cl_mem), &(t)->data})
#define MAX_ARGS 8

static size_t round_up(size_t n, size_t m) {
    return (n + m - 1) / m * m;
}

/* Sets the arguments and enqueues `name` over `global` work-items in groups of `local` (0: the
 * driver's default), all under the device's lock. */
static cx_code launch(ocl_device *dev, const char *name, const karg *args, int n_args,
                      size_t global, size_t local, cx_status *st) {
    if (global == 0) return CX_OK;
    if (!local) {
        local = dev->desc->max_group < GROUP ? dev->desc->max_group : GROUP;
        global = round_up(global, local);
    }
    pthread_mutex_lock(&dev->lock);
    cl_kernel k = ocl_kernel(dev, name, st);
    cl_int err = CL_SUCCESS;
    for (int j = 0; k && j < n_args && err == CL_SUCCESS; j++)
        err = clSetKernelArg(k, (cl_uint)j, args[j].size, args[j].value);
    if (k && err == CL_SUCCESS)
        err = clEnqueueNDRangeKernel(dev->queue, k, 1, NULL, &global, &local, 0, NULL, NULL);
    pthread_mutex_unlock(&dev->lock);
    if (!k) return st->code;
    if (err != CL_SUCCESS) {
        char what[96];
        snprintf(what, sizeof what, "launching %s", name);
        return ocl_fail(st, err, what);
    }
    return CX_OK;
}

static void strides_of(const cx_desc *d, int64_t *s) {
    int64_t n = 1;
    for (int k = d->rank - 1; k >= 0; k--) {
        s[k] = n;
        n *= d->shape[k];
    }
}

/* ---- capability ------------------------------------------------------------------------ */

static bool is_float(cx_dtype t) {
    return t == CX_F16 || t == CX_F32 || t == CX_F64;
}

cx_cap ocl_capability(const ocl_device *dev, cx_op_id op, const cx_dtype *types, int n_in) {
    cx_op_kind kind = cx_op_table[op].kind;
    bool fp64 = dev->desc->fp64;
    /* the copy kernels move elements of up to 8 bytes: c64 moves, c128 does not */
    for (int k = 0; k < (n_in ? n_in : 1); k++)
        if (types[k] == CX_C128) return CX_CAP_NO;
    switch (op) {
    /* moves without arithmetic: any element size */
    case CX_OP_RESHAPE:
    case CX_OP_SQUEEZE:
    case CX_OP_TRANSPOSE:
    case CX_OP_BROADCAST:
    case CX_OP_SLICE:
    case CX_OP_REVERSE:
    case CX_OP_PAD:
    case CX_OP_CONCATENATE: return CX_CAP_NATIVE;
    default: break;
    }
    /* the value is converted by the cpu driver and the buffer filled with its bytes */
    if (op == CX_OP_FULL) return CX_CAP_NATIVE;
    /* creation: types[0] is the result type */
    if (op == CX_OP_IOTA || op == CX_OP_EYE)
        return ocl_type_supported(types[0], fp64) ? CX_CAP_NATIVE : CX_CAP_NO;
    if (kind == CX_KIND_CREATE) return CX_CAP_NO;
    /* moves by element size; the dispatcher casts the indices to s64 first */
    if (op == CX_OP_TAKE || op == CX_OP_GATHER)
        return n_in == 2 && types[1] == CX_S64 ? CX_CAP_NATIVE : CX_CAP_NO;
    for (int k = 0; k < n_in; k++)
        if (!ocl_type_supported(types[k], fp64)) return CX_CAP_NO;
    switch (kind) {
    case CX_KIND_UNARY:
    case CX_KIND_UNARY_FLOAT:
    case CX_KIND_BINARY:
    case CX_KIND_BINARY_FLOAT:
    case CX_KIND_COMPARE:
    case CX_KIND_LOGICAL:
        if (n_in == 2 && types[1] != types[0]) return CX_CAP_NO;
        return ocl_elementwise_expr(op, types[0]) ? CX_CAP_NATIVE : CX_CAP_NO;
    case CX_KIND_SELECT:
        if (op == CX_OP_CLIP && types[1] != types[0]) return CX_CAP_NO;
        return types[1] == types[2] ? CX_CAP_NATIVE : CX_CAP_NO;
    /* the result type is a parameter: refine checks it */
    case CX_KIND_CAST: return CX_CAP_SHAPE;
    case CX_KIND_REDUCE:
        return ocl_type_supported(ocl_reduce_out(op, types[0]), fp64) ? CX_CAP_NATIVE : CX_CAP_NO;
    case CX_KIND_ARGREDUCE: return CX_CAP_NATIVE;
    case CX_KIND_DOT:
#ifdef CX_HAVE_CLBLAST
        return types[0] == types[1] && (types[0] == CX_F32 || types[0] == CX_F64) ? CX_CAP_SHAPE
                                                                                  : CX_CAP_NO;
#else
        return CX_CAP_NO;
#endif
    case CX_KIND_COMPOSITE:
        /* refine checks that every instruction has an f32 expression */
        if (op == CX_OP_FUSED) {
            bool f32 = n_in >= 1;
            for (int k = 0; k < n_in; k++) f32 = f32 && types[k] == CX_F32;
            return f32 ? CX_CAP_SHAPE : CX_CAP_NO;
        }
        if (op == CX_OP_SOFTMAX || op == CX_OP_LOG_SOFTMAX)
            return is_float(types[0]) ? CX_CAP_NATIVE : CX_CAP_NO;
        if (op == CX_OP_LAYER_NORM)
            return is_float(types[0]) && types[1] == types[0] && types[2] == types[0] ? CX_CAP_SHAPE
                                                                                      : CX_CAP_NO;
#ifdef CX_HAVE_CLBLAST
        /* im2col into a scratch buffer, then one CLBlast GEMM: refine checks the scratch fits */
        if (op == CX_OP_CONV2D)
            return is_float(types[0]) && types[1] == types[0] ? CX_CAP_SHAPE : CX_CAP_NO;
#endif
        return CX_CAP_NO;
    default: return CX_CAP_NO;
    }
}

/* Whether the axes are first..first+n-1 in order. */
static bool consecutive(const cx_param *p, int64_t first) {
    for (int k = 0; p && k < p->n; k++)
        if (p->i[k] != first + k) return false;
    return true;
}

static int count(const cx_param *p) {
    return p ? p->n : 0;
}

/* dot in CLBlast's terms: A is [batch, M, K] (or [batch, K, M], transposed), B is [batch, K, N]
 * (or [batch, N, K]). */
typedef struct {
    bool ta, tb;
    int64_t batch, m, n, k;
} gemm_shape;

static bool gemm_layout(const cx_desc *a, const cx_desc *b, const cx_params *ps, gemm_shape *g) {
    const cx_param *ca = cx_param_get(ps, CX_P_CONTRACT_A), *cb = cx_param_get(ps, CX_P_CONTRACT_B);
    const cx_param *ba = cx_param_get(ps, CX_P_BATCH_A), *bb = cx_param_get(ps, CX_P_BATCH_B);
    int nb = count(ba), nc = count(ca);
    if (count(bb) != nb || count(cb) != nc || !consecutive(ba, 0) || !consecutive(bb, 0))
        return false;
    /* contracted axes last in A (no transpose) or right after the batch axes (transposed) */
    if (consecutive(ca, a->rank - nc))
        g->ta = false;
    else if (consecutive(ca, nb))
        g->ta = true;
    else
        return false;
    if (consecutive(cb, nb))
        g->tb = false;
    else if (consecutive(cb, b->rank - nc))
        g->tb = true;
    else
        return false;
    g->batch = g->m = g->n = g->k = 1;
    for (int j = 0; j < nb; j++) g->batch *= a->shape[j];
    for (int j = 0; j < nc; j++) g->k *= a->shape[ca->i[j]];
    for (int j = nb; j < a->rank; j++) g->m *= a->shape[j];
    for (int j = nb; j < b->rank; j++) g->n *= b->shape[j];
    g->m = g->k ? g->m / g->k : 0;
    g->n = g->k ? g->n / g->k : 0;
    if (!g->k) { /* the free sizes, counted without the empty contraction */
        g->m = g->n = 1;
        for (int j = nb; j < a->rank; j++) {
            bool c = false;
            for (int q = 0; q < nc; q++) c = c || ca->i[q] == j;
            if (!c) g->m *= a->shape[j];
        }
        for (int j = nb; j < b->rank; j++) {
            bool c = false;
            for (int q = 0; q < nc; q++) c = c || cb->i[q] == j;
            if (!c) g->n *= b->shape[j];
        }
    }
    return true;
}

/* conv2d's geometry (core/conv_geom.h) as the kernels take it. */
static void conv_geometry(const cx_desc *x, const cx_desc *kern, const cx_params *ps, ocl_conv *v) {
    cx_conv_dims g;
    cx_conv_dims_of(x, kern, ps, &g);
    *v = (ocl_conv){.n = g.n,
                    .c = g.c,
                    .h = g.h,
                    .w = g.w,
                    .cg = g.cg,
                    .og = g.og,
                    .kh = g.kh,
                    .kw = g.kw,
                    .oh = g.oh,
                    .ow = g.ow,
                    .s0 = g.s0,
                    .s1 = g.s1,
                    .d0 = g.d0,
                    .d1 = g.d1,
                    .lo0 = g.lo0,
                    .lo1 = g.lo1,
                    .p = g.n * g.oh * g.ow,
                    .k = g.cg * g.kh * g.kw,
                    .groups = g.groups,
                    .nhwc = g.nhwc};
}

/* Bytes of the im2col matrix, UINT64_MAX when it does not fit in 63 bits. */
static uint64_t conv_cols_bytes(const ocl_conv *v, size_t es) {
    uint64_t limit = (uint64_t)INT64_MAX, n = es;
    const cl_long f[3] = {v->groups, v->p, v->k};
    for (int j = 0; j < 3; j++) {
        if (f[j] && n > limit / (uint64_t)f[j]) return UINT64_MAX;
        n *= (uint64_t)f[j];
    }
    return n;
}

static size_t conv_compute_size(cx_dtype t) {
    return t == CX_F64 ? 8 : 4;
}

bool ocl_refine(const ocl_device *dev, cx_op_id op, const cx_desc *in, int n_in,
                const cx_params *ps, char *reason, size_t len) {
    if (op == CX_OP_CONV2D) {
        ocl_conv v;
        conv_geometry(&in[0], &in[1], ps, &v);
        size_t es = conv_compute_size(in[0].dtype);
        uint64_t bytes = conv_cols_bytes(&v, es);
        uint64_t out_bytes = (uint64_t)v.groups * (uint64_t)v.p * (uint64_t)v.og * es;
        if (bytes != UINT64_MAX && (!dev->desc->max_alloc || (bytes <= dev->desc->max_alloc &&
                                                              out_bytes <= dev->desc->max_alloc)))
            return true;
        snprintf(reason, len,
                 "the opencl conv2d's im2col scratch (%llu x %llu x %llu elements) exceeds the "
                 "device's largest buffer (%llu bytes)",
                 (unsigned long long)v.groups, (unsigned long long)v.p, (unsigned long long)v.k,
                 (unsigned long long)dev->desc->max_alloc);
        return false;
    }
    if (op == CX_OP_AS_TYPE) {
        cx_dtype t = (cx_dtype)ps->p[CX_P_TYPE].i[0];
        if (ocl_type_supported(t, dev->desc->fp64)) return true;
        snprintf(reason, len, "opencl has no %s kernels",
                 cx_dtype_valid(t) ? cx_dtype_name(t) : "?");
        return false;
    }
    if (op == CX_OP_DOT) {
        gemm_shape g;
        if (gemm_layout(&in[0], &in[1], ps, &g)) return true;
        snprintf(reason, len,
                 "CLBlast takes [batch, rows, cols] operands: these contraction/batch axes need a "
                 "transpose first");
        return false;
    }
    if (op == CX_OP_FUSED) {
        cx_fused_code c;
        cx_status st = {CX_OK, ""};
        bool ok = cx_fused_decode(ps, n_in, &c, &st) == CX_OK && !cx_fused_has_rows(in, n_in);
        for (int k = 0; ok && k < c.n; k++) ok = ocl_elementwise_expr(c.op[k], CX_F32) != NULL;
        int64_t rows, cols;
        bool reduce = ps->p[CX_P_REDUCE].i[0] != 0;
        if (ok && reduce)
            ok = dev->desc->fp64 && dev->desc->max_group >= OCL_REDUCE_GROUP &&
                 cx_fused_rows(&c, in, n_in, ps, &rows, &cols);
        if (ok) return true;
        snprintf(reason, len,
                 "the opencl kernel runs fused chains of ops it has kernels for, without "
                 "broadcast rows; with a sum at the end, over trailing axes on a device with "
                 "fp64");
        return false;
    }
    if (op == CX_OP_LAYER_NORM) {
        const cx_param *axes = cx_param_get(ps, CX_P_AXES);
        if (axes && consecutive(axes, in[0].rank - axes->n)) return true;
        snprintf(reason, len, "the opencl layer_norm kernel normalises over trailing axes only");
        return false;
    }
    return true;
}

/* ---- elementwise ----------------------------------------------------------------------- */

/* The output shape with size-1 axes dropped and neighbouring axes merged where every input
 * steps through them as one (as the cpu driver does). */
static void bcast_init(ocl_bcast *b, const cx_tensor *const *in, int n_in, const cx_desc *out) {
    int64_t full[3][CX_MAX_RANK];
    memset(b, 0, sizeof *b);
    for (int j = 0; j < n_in; j++) {
        int64_t rs[CX_MAX_RANK];
        const cx_desc *d = &in[j]->desc;
        strides_of(d, rs);
        int lead = out->rank - d->rank;
        for (int k = 0; k < out->rank; k++) {
            int kj = k - lead;
            full[j][k] = kj >= 0 && d->shape[kj] != 1 ? rs[kj] : 0;
        }
    }
    b->n = cx_desc_numel(out);
    for (int k = 0; k < out->rank; k++) {
        int64_t n = out->shape[k];
        if (n == 1) continue;
        int r = b->rank;
        bool merge = r > 0;
        for (int j = 0; j < n_in && merge; j++) merge = b->st[j][r - 1] == full[j][k] * n;
        if (merge) {
            b->shape[r - 1] *= n;
        } else {
            b->shape[r] = n;
            b->rank++;
        }
        for (int j = 0; j < n_in; j++) b->st[j][b->rank - 1] = full[j][k];
    }
    if (b->rank == 0) {
        b->rank = 1;
        b->shape[0] = 1;
    }
}

static cx_code run_elementwise(ocl_device *dev, cx_op_id op, const cx_tensor *const *in, int n_in,
                               cx_tensor *out, cx_status *st) {
    ocl_bcast b;
    bcast_init(&b, in, n_in, &out->desc);
    char name[64];
    if (op == CX_OP_SELECT)
        snprintf(name, sizeof name, "sel_%s_%s", ocl_type_tag(in[0]->desc.dtype),
                 ocl_type_tag(in[1]->desc.dtype));
    else if (op == CX_OP_CLIP)
        snprintf(name, sizeof name, "clip_%s", ocl_type_tag(in[0]->desc.dtype));
    else
        snprintf(name, sizeof name, "ew_%s_%s", cx_op_table[op].name,
                 ocl_type_tag(in[0]->desc.dtype));
    karg args[MAX_ARGS];
    int n = 0;
    args[n++] = MEM(out);
    for (int j = 0; j < n_in; j++) args[n++] = MEM(in[j]);
    args[n++] = ARG(b);
    return launch(dev, name, args, n, (size_t)out->numel, 0, st);
}

static cx_code run_cast(ocl_device *dev, const cx_tensor *in, cx_tensor *out, cx_status *st) {
    if (in->desc.dtype == out->desc.dtype) {
        cl_int err = clEnqueueCopyBuffer(dev->queue, (cl_mem)in->data, (cl_mem)out->data, 0, 0,
                                         out->nbytes, 0, NULL, NULL);
        return err == CL_SUCCESS ? CX_OK : ocl_fail(st, err, "clEnqueueCopyBuffer");
    }
    char name[64];
    snprintf(name, sizeof name, "cast_%s_%s", ocl_type_tag(in->desc.dtype),
             ocl_type_tag(out->desc.dtype));
    cl_long n = out->numel;
    karg args[] = {MEM(out), MEM(in), ARG(n)};
    return launch(dev, name, args, 3, (size_t)n, 0, st);
}

/* ---- layout ---------------------------------------------------------------------------- */

/* pad: the output filled with the value (one element made by the cpu driver's own pad, so the
 * value's conversion is the cpu's, bit for bit) where some of it is padding, then every input
 * element moved to its place or cropped. */
static cx_code run_pad(ocl_device *dev, const cx_tensor *in, const cx_params *ps, cx_tensor *out,
                       cx_status *st) {
    const cx_desc *d = &in->desc;
    const int64_t *pads = ps->p[CX_P_PADS].i;
    size_t es = cx_dtype_size(d->dtype);
    bool gaps = false;
    for (int k = 0; k < d->rank; k++)
        gaps = gaps || pads[3 * k] > 0 || pads[3 * k + 1] > 0 ||
               (pads[3 * k + 2] > 0 && d->shape[k] > 1);
    if (gaps || in->numel == 0) {
        uint64_t zero = 0, two[2] = {0, 0};
        cx_tensor one, pair;
        memset(&one, 0, sizeof one);
        one.desc.dtype = d->dtype;
        one.desc.rank = 1;
        one.desc.shape[0] = 1;
        one.numel = 1;
        one.nbytes = es;
        one.data = &zero;
        pair = one;
        pair.desc.shape[0] = 2;
        pair.numel = 2;
        pair.nbytes = 2 * es;
        pair.data = two;
        cx_params vp = {0};
        *cx_param_put(&vp, CX_P_VALUE) = ps->p[CX_P_VALUE];
        cx_param_put_ints(&vp, CX_P_PADS, (const int64_t[]){1, 0, 0}, 3);
        const cx_tensor *const one_in[1] = {&one};
        if (cx_cpu_driver()->execute(NULL, CX_OP_PAD, one_in, 1, &vp, &pair, st) != CX_OK)
            return st->code;
        cl_int err = clEnqueueFillBuffer(dev->queue, (cl_mem)out->data, two, es, 0, out->nbytes, 0,
                                         NULL, NULL);
        if (err != CL_SUCCESS) return ocl_fail(st, err, "clEnqueueFillBuffer");
    }
    if (in->numel == 0) return CX_OK;
    ocl_pad p;
    memset(&p, 0, sizeof p);
    p.n = in->numel;
    int64_t os[CX_MAX_RANK];
    strides_of(&out->desc, os);
    for (int k = 0; k < d->rank; k++) {
        p.ishape[k] = d->shape[k];
        p.lo[k] = pads[3 * k];
        p.step[k] = pads[3 * k + 2] + 1;
        p.oshape[k] = out->desc.shape[k];
        p.ost[k] = os[k];
    }
    p.rank = d->rank;
    if (p.rank == 0) {
        p.rank = 1;
        p.ishape[0] = p.step[0] = p.oshape[0] = 1;
    }
    char name[16];
    snprintf(name, sizeof name, "pad_%zu", es);
    karg args[] = {MEM(out), MEM(in), ARG(p)};
    return launch(dev, name, args, 3, (size_t)in->numel, 0, st);
}

/* concatenate: the output is [outer, total * inner] rows; input j fills its columns with one
 * rectangular copy. */
static cx_code run_concatenate(ocl_device *dev, const cx_tensor *const *in, int n_in,
                               const cx_params *ps, cx_tensor *out, cx_status *st) {
    const cx_desc *o = &out->desc;
    int axis = (int)ps->p[CX_P_AXIS].i[0];
    size_t es = cx_dtype_size(o->dtype), outer = 1, inner = es;
    for (int k = 0; k < axis; k++) outer *= (size_t)o->shape[k];
    for (int k = axis + 1; k < o->rank; k++) inner *= (size_t)o->shape[k];
    size_t row = (size_t)o->shape[axis] * inner, at = 0;
    for (int j = 0; j < n_in; j++) {
        size_t w = (size_t)in[j]->desc.shape[axis] * inner;
        if (in[j]->numel > 0) {
            size_t src[3] = {0, 0, 0}, dst[3] = {at, 0, 0}, region[3] = {w, outer, 1};
            cl_int err = clEnqueueCopyBufferRect(dev->queue, (cl_mem)in[j]->data, (cl_mem)out->data,
                                                 src, dst, region, w, 0, row, 0, 0, NULL, NULL);
            if (err != CL_SUCCESS) return ocl_fail(st, err, "clEnqueueCopyBufferRect");
        }
        at += w;
    }
    return CX_OK;
}

static cx_code run_layout(ocl_device *dev, cx_op_id op, const cx_tensor *in, const cx_params *ps,
                          cx_tensor *out, cx_status *st) {
    if (op == CX_OP_PAD) return run_pad(dev, in, ps, out, st);
    if (op == CX_OP_RESHAPE || op == CX_OP_SQUEEZE) {
        cl_int err = clEnqueueCopyBuffer(dev->queue, (cl_mem)in->data, (cl_mem)out->data, 0, 0,
                                         out->nbytes, 0, NULL, NULL);
        return err == CL_SUCCESS ? CX_OK : ocl_fail(st, err, "clEnqueueCopyBuffer");
    }
    const cx_desc *d = &in->desc;
    int64_t is[CX_MAX_RANK];
    strides_of(d, is);
    ocl_bcast b;
    memset(&b, 0, sizeof b);
    b.n = out->numel;
    b.rank = out->desc.rank;
    for (int k = 0; k < b.rank; k++) b.shape[k] = out->desc.shape[k];
    cl_long base = 0;
    const cx_param *axes = cx_param_get(ps, CX_P_AXES);
    switch (op) {
    case CX_OP_TRANSPOSE:
        for (int k = 0; k < b.rank; k++) b.st[0][k] = is[axes ? axes->i[k] : d->rank - 1 - k];
        break;
    case CX_OP_BROADCAST:
        for (int k = 0; k < d->rank; k++) {
            int64_t to = axes ? axes->i[k] : out->desc.rank - d->rank + k;
            b.st[0][to] = d->shape[k] == 1 ? 0 : is[k];
        }
        break;
    case CX_OP_SLICE: {
        const int64_t *start = ps->p[CX_P_START].i, *stride = ps->p[CX_P_STRIDES].i;
        for (int k = 0; k < d->rank; k++) {
            base += start[k] * is[k];
            b.st[0][k] = stride[k] * is[k];
        }
        break;
    }
    default: /* reverse */
        for (int k = 0; k < d->rank; k++) b.st[0][k] = is[k];
        for (int j = 0; j < (axes ? axes->n : d->rank); j++) {
            int k = axes ? (int)axes->i[j] : j;
            if (d->shape[k] == 0) continue;
            base += (d->shape[k] - 1) * is[k];
            b.st[0][k] = -is[k];
        }
        break;
    }
    if (b.rank == 0) {
        b.rank = 1;
        b.shape[0] = 1;
    }
    char name[16];
    snprintf(name, sizeof name, "copy_%zu", cx_dtype_size(d->dtype));
    karg args[] = {MEM(out), MEM(in), ARG(b), ARG(base)};
    return launch(dev, name, args, 4, (size_t)out->numel, 0, st);
}

/* full: one element made by the cpu driver (so the conversion of the value is the cpu's, bit
 * for bit), then the buffer filled with its bytes. */
static cx_code run_full(ocl_device *dev, const cx_params *ps, cx_tensor *out, cx_status *st) {
    uint64_t bytes = 0;
    cx_tensor one;
    memset(&one, 0, sizeof one);
    one.desc.dtype = out->desc.dtype;
    one.desc.rank = 0;
    one.numel = 1;
    one.nbytes = cx_dtype_size(out->desc.dtype);
    one.data = &bytes;
    if (cx_cpu_driver()->execute(NULL, CX_OP_FULL, NULL, 0, ps, &one, st) != CX_OK) return st->code;
    cl_int err = clEnqueueFillBuffer(dev->queue, (cl_mem)out->data, &bytes, one.nbytes, 0,
                                     out->nbytes, 0, NULL, NULL);
    return err == CL_SUCCESS ? CX_OK : ocl_fail(st, err, "clEnqueueFillBuffer");
}

/* iota: the position along the axis (over the whole tensor without one) as {outer, len,
 * inner}; eye: 1 where the row equals the column of the last two axes. */
static cx_code run_create(ocl_device *dev, cx_op_id op, const cx_params *ps, cx_tensor *out,
                          cx_status *st) {
    const cx_desc *d = &out->desc;
    cl_long n = out->numel, a, b;
    if (op == CX_OP_IOTA) {
        a = n; /* len */
        b = 1; /* inner */
        if (cx_param_has(ps, CX_P_AXIS)) {
            int axis = (int)ps->p[CX_P_AXIS].i[0];
            a = d->shape[axis];
            for (int k = axis + 1; k < d->rank; k++) b *= d->shape[k];
        }
    } else {
        a = d->shape[d->rank - 1];     /* cols */
        b = a * d->shape[d->rank - 2]; /* elements per matrix */
    }
    char name[32];
    snprintf(name, sizeof name, "%s_%s", cx_op_table[op].name, ocl_type_tag(d->dtype));
    karg args[] = {MEM(out), ARG(n), ARG(a), ARG(b)};
    return launch(dev, name, args, 4, (size_t)n, 0, st);
}

/* ---- take and gather ------------------------------------------------------------------- */

/* Whether every index lies inside its axis: entry i of ix against dims[i % k]. One kernel sets a
 * flag, read back here (blocking: the op's outcome is an error or not). On a bad index, the
 * indices are read and the first bad one named as the cpu driver names it. */
static cx_code check_indices(ocl_device *dev, cx_op_id op, const cx_tensor *ix, const cx_tensor *t,
                             const int64_t *axes, int k, cx_status *st) {
    if (ix->numel == 0) return CX_OK;
    ocl_index_check c;
    memset(&c, 0, sizeof c);
    c.n = ix->numel;
    c.k = k;
    for (int j = 0; j < k; j++) c.dims[j] = t->desc.shape[axes[j]];
    cl_int bad = 0, err;
    cl_mem flag = clCreateBuffer(dev->context, CL_MEM_READ_WRITE | CL_MEM_COPY_HOST_PTR, sizeof bad,
                                 &bad, &err);
    if (err != CL_SUCCESS) return ocl_fail(st, err, "clCreateBuffer");
    karg args[] = {{sizeof(cl_mem), &flag}, MEM(ix), ARG(c)};
    cx_code rc = launch(dev, "index_check", args, 3, (size_t)c.n, 0, st);
    if (rc == CX_OK) {
        err = clEnqueueReadBuffer(dev->queue, flag, CL_TRUE, 0, sizeof bad, &bad, 0, NULL, NULL);
        if (err != CL_SUCCESS) rc = ocl_fail(st, err, "clEnqueueReadBuffer");
    }
    clReleaseMemObject(flag);
    if (rc != CX_OK || !bad) return rc;
    int64_t *v = malloc((size_t)ix->nbytes);
    if (!v) return cx_fail(st, CX_ENOMEM, "opencl: out of host memory reading the indices");
    err =
        clEnqueueReadBuffer(dev->queue, (cl_mem)ix->data, CL_TRUE, 0, ix->nbytes, v, 0, NULL, NULL);
    if (err != CL_SUCCESS) {
        free(v);
        return ocl_fail(st, err, "clEnqueueReadBuffer");
    }
    rc = cx_check_indices(op, &t->desc, v, ix->numel, axes, k, st);
    if (rc == CX_OK)
        rc = cx_fail(st, CX_EINVAL, "%s: an index is out of bounds", cx_op_table[op].name);
    free(v);
    return rc;
}

static cx_code run_take(ocl_device *dev, const cx_tensor *t, const cx_tensor *ix,
                        const cx_params *ps, cx_tensor *out, cx_status *st) {
    int64_t axis = ps->p[CX_P_AXIS].i[0];
    if (check_indices(dev, CX_OP_TAKE, ix, t, &axis, 1, st) != CX_OK) return st->code;
    const cx_desc *d = &t->desc;
    ocl_take p = {out->numel, d->shape[axis], ix->numel, 1};
    for (int k = (int)axis + 1; k < d->rank; k++) p.inner *= d->shape[k];
    char name[16];
    snprintf(name, sizeof name, "take_%zu", cx_dtype_size(d->dtype));
    karg args[] = {MEM(out), MEM(t), MEM(ix), ARG(p)};
    return launch(dev, name, args, 4, (size_t)p.n, 0, st);
}

static cx_code run_gather(ocl_device *dev, const cx_tensor *t, const cx_tensor *ix,
                          const cx_params *ps, cx_tensor *out, cx_status *st) {
    const cx_param *axes = &ps->p[CX_P_AXES];
    if (check_indices(dev, CX_OP_GATHER, ix, t, axes->i, axes->n, st) != CX_OK) return st->code;
    const cx_desc *d = &t->desc;
    int64_t is[CX_MAX_RANK], rows = 1;
    strides_of(d, is);
    for (int k = 0; k < ix->desc.rank - 1; k++) rows *= ix->desc.shape[k];
    ocl_gather g;
    memset(&g, 0, sizeof g);
    g.n = out->numel;
    g.block = out->numel / rows;
    g.k = axes->n;
    bool used[CX_MAX_RANK] = {false};
    for (int j = 0; j < axes->n; j++) {
        used[axes->i[j]] = true;
        g.ist[j] = is[axes->i[j]];
    }
    for (int k = 0; k < d->rank; k++)
        if (!used[k]) {
            g.shape[g.rank] = d->shape[k];
            g.st[g.rank++] = is[k];
        }
    char name[16];
    snprintf(name, sizeof name, "gather_%zu", cx_dtype_size(d->dtype));
    karg args[] = {MEM(out), MEM(t), MEM(ix), ARG(g)};
    return launch(dev, name, args, 4, (size_t)g.n, 0, st);
}

/* ---- reductions ------------------------------------------------------------------------ */

/* argmax/argmin over {outer, n, inner} (n: the whole tensor without an axis); rows longer than
 * OCL_REDUCE_SERIAL are split over a group, as the other reductions are. */
static cx_code run_argreduce(ocl_device *dev, cx_op_id op, const cx_tensor *in, const cx_params *ps,
                             cx_tensor *out, cx_status *st) {
    const cx_desc *d = &in->desc;
    ocl_rows r = {1, in->numel, 1};
    if (cx_param_has(ps, CX_P_AXIS)) {
        int axis = (int)ps->p[CX_P_AXIS].i[0];
        r.n = d->shape[axis];
        for (int k = 0; k < axis; k++) r.outer *= d->shape[k];
        for (int k = axis + 1; k < d->rank; k++) r.inner *= d->shape[k];
    }
    cl_int high = ps->p[CX_P_TIE_BREAK].i[0] == 1;
    size_t nout = (size_t)(r.outer * r.inner);
    bool group = r.n > OCL_REDUCE_SERIAL && dev->desc->max_group >= OCL_REDUCE_GROUP;
    char name[64];
    snprintf(name, sizeof name, "%s_%s_%s", cx_op_table[op].name, ocl_type_tag(d->dtype),
             group ? "group" : "serial");
    karg args[] = {MEM(out), MEM(in), ARG(r), ARG(high)};
    if (group) return launch(dev, name, args, 4, nout * OCL_REDUCE_GROUP, OCL_REDUCE_GROUP, st);
    return launch(dev, name, args, 4, nout, 0, st);
}

static cx_code run_reduce(ocl_device *dev, cx_op_id op, const cx_tensor *in, const cx_params *ps,
                          cx_tensor *out, cx_status *st) {
    const cx_desc *d = &in->desc;
    bool reduced[CX_MAX_RANK] = {false};
    const cx_param *axes = cx_param_get(ps, CX_P_AXES);
    for (int k = 0; k < (axes ? axes->n : d->rank); k++) reduced[axes ? axes->i[k] : k] = true;
    int64_t is[CX_MAX_RANK];
    strides_of(d, is);
    ocl_reduce r;
    memset(&r, 0, sizeof r);
    r.nout = out->numel;
    r.nred = 1;
    for (int k = 0; k < d->rank; k++) {
        if (reduced[k]) r.nred *= d->shape[k];
        if (d->shape[k] == 1) continue; /* index 0: contributes nothing */
        if (reduced[k]) {
            r.rshape[r.rrank] = d->shape[k];
            r.rst[r.rrank++] = is[k];
        } else {
            r.kshape[r.krank] = d->shape[k];
            r.kst[r.krank++] = is[k];
        }
    }
    if (r.nout == 0) return CX_OK;
    bool group = r.nred > OCL_REDUCE_SERIAL && dev->desc->max_group >= OCL_REDUCE_GROUP;
    char name[64];
    snprintf(name, sizeof name, "rd_%s_%s_%s", cx_op_table[op].name, ocl_type_tag(d->dtype),
             group ? "group" : "serial");
    karg args[] = {MEM(out), MEM(in), ARG(r)};
    if (group)
        return launch(dev, name, args, 3, (size_t)r.nout * OCL_REDUCE_GROUP, OCL_REDUCE_GROUP, st);
    return launch(dev, name, args, 3, (size_t)r.nout, 0, st);
}

/* ---- composites ------------------------------------------------------------------------ */

static cx_code run_softmax(ocl_device *dev, cx_op_id op, const cx_tensor *in, const cx_params *ps,
                           cx_tensor *out, cx_status *st) {
    const cx_desc *d = &in->desc;
    int axis = (int)ps->p[CX_P_AXIS].i[0];
    ocl_rows r = {1, d->rank ? d->shape[axis] : 1, 1};
    for (int k = 0; k < axis; k++) r.outer *= d->shape[k];
    for (int k = axis + 1; k < d->rank; k++) r.inner *= d->shape[k];
    if (out->numel == 0) return CX_OK;
    char name[64];
    snprintf(name, sizeof name, "%s_%s", cx_op_table[op].name, ocl_type_tag(d->dtype));
    karg args[] = {MEM(out), MEM(in), ARG(r)};
    return launch(dev, name, args, 3, (size_t)(r.outer * r.inner), 0, st);
}

static cx_code run_layer_norm(ocl_device *dev, const cx_tensor *const *in, const cx_params *ps,
                              cx_tensor *out, cx_status *st) {
    const cx_desc *d = &in[0]->desc;
    const cx_param *axes = &ps->p[CX_P_AXES];
    int first = d->rank - axes->n;
    ocl_norm p;
    memset(&p, 0, sizeof p);
    p.rank = axes->n;
    p.n = 1;
    for (int k = 0; k < p.rank; k++) {
        p.shape[k] = d->shape[first + k];
        p.n *= p.shape[k];
    }
    if (out->numel == 0) return CX_OK;
    p.rows = out->numel / p.n;
    /* gamma and beta: one axis per normalised axis (size 1 broadcasts), or rank 0 */
    for (int j = 1; j <= 2; j++) {
        const cx_desc *g = &in[j]->desc;
        cl_long *gs = j == 1 ? p.gst : p.bst;
        int64_t s[CX_MAX_RANK];
        strides_of(g, s);
        for (int k = 0; k < p.rank && g->rank; k++) gs[k] = g->shape[k] == 1 ? 0 : s[k];
    }
    char name[64];
    snprintf(name, sizeof name, "layer_norm_%s", ocl_type_tag(d->dtype));
    double eps = ps->p[CX_P_EPSILON].f;
    float eps32 = (float)eps;
    karg args[] = {MEM(out),   MEM(in[0]), MEM(in[1]),
                   MEM(in[2]), ARG(p),     d->dtype == CX_F64 ? ARG(eps) : ARG(eps32)};
    return launch(dev, name, args, 6, (size_t)p.rows, 0, st);
}

/* ---- dot ------------------------------------------------------------------------------- */

static cx_code run_dot(ocl_device *dev, const cx_tensor *a, const cx_tensor *b, const cx_params *ps,
                       cx_tensor *out, cx_status *st) {
#ifdef CX_HAVE_CLBLAST
    gemm_shape g;
    if (!gemm_layout(&a->desc, &b->desc, ps, &g))
        return cx_fail(st, CX_EUNSUPPORTED, "opencl: dot with these axes needs a transpose first");
    if (out->numel == 0) return CX_OK;
    cl_mem c = (cl_mem)out->data;
    if (g.k == 0) { /* empty sums */
        size_t es = cx_dtype_size(out->desc.dtype);
        uint64_t zero = 0;
        cl_int err = clEnqueueFillBuffer(dev->queue, c, &zero, es, 0, out->nbytes, 0, NULL, NULL);
        return err == CL_SUCCESS ? CX_OK : ocl_fail(st, err, "clEnqueueFillBuffer");
    }
    size_t lda = g.ta ? (size_t)g.m : (size_t)g.k, ldb = g.tb ? (size_t)g.k : (size_t)g.n;
    CLBlastTranspose ta = g.ta ? CLBlastTransposeYes : CLBlastTransposeNo;
    CLBlastTranspose tb = g.tb ? CLBlastTransposeYes : CLBlastTransposeNo;
    size_t m = (size_t)g.m, n = (size_t)g.n, k = (size_t)g.k, batch = (size_t)g.batch;
    cl_mem am = (cl_mem)a->data, bm = (cl_mem)b->data;
    CLBlastStatusCode rc;
    /* CLBlast sets kernel arguments on kernels it caches: one call at a time per device */
    pthread_mutex_lock(&dev->lock);
    if (out->desc.dtype == CX_F32)
        rc = batch == 1 ? CLBlastSgemm(CLBlastLayoutRowMajor, ta, tb, m, n, k, 1.0f, am, 0, lda, bm,
                                       0, ldb, 0.0f, c, 0, n, &dev->queue, NULL)
                        : CLBlastSgemmStridedBatched(CLBlastLayoutRowMajor, ta, tb, m, n, k, 1.0f,
                                                     am, 0, lda, m * k, bm, 0, ldb, k * n, 0.0f, c,
                                                     0, n, m * n, batch, &dev->queue, NULL);
    else
        rc = batch == 1 ? CLBlastDgemm(CLBlastLayoutRowMajor, ta, tb, m, n, k, 1.0, am, 0, lda, bm,
                                       0, ldb, 0.0, c, 0, n, &dev->queue, NULL)
                        : CLBlastDgemmStridedBatched(CLBlastLayoutRowMajor, ta, tb, m, n, k, 1.0,
                                                     am, 0, lda, m * k, bm, 0, ldb, k * n, 0.0, c,
                                                     0, n, m * n, batch, &dev->queue, NULL);
    pthread_mutex_unlock(&dev->lock);
    if (rc != CLBlastSuccess)
        return cx_fail(st, CX_EDEVICE, "opencl: CLBlast GEMM failed (status %d)", (int)rc);
    return CX_OK;
#else
    return cx_fail(st, CX_EUNSUPPORTED, "opencl: built without CLBlast, no dot");
#endif
}

/* ---- conv2d ---------------------------------------------------------------------------- */

#ifdef CX_HAVE_CLBLAST
static cl_mem scratch(ocl_device *dev, size_t bytes, cx_status *st) {
    cl_int err;
    cl_mem m = clCreateBuffer(dev->context, CL_MEM_READ_WRITE, bytes ? bytes : 1, NULL, &err);
    if (err == CL_SUCCESS) return m;
    if (err == CL_INVALID_BUFFER_SIZE || err == CL_MEM_OBJECT_ALLOCATION_FAILURE ||
        err == CL_OUT_OF_RESOURCES || err == CL_OUT_OF_HOST_MEMORY)
        cx_fail(st, CX_ENOMEM, "opencl: could not allocate a conv2d scratch of %zu bytes", bytes);
    else
        ocl_fail(st, err, "clCreateBuffer");
    return NULL;
}
#endif

/* conv2d as im2col + GEMM: cols {G, P, K} (compute type: f32 for f16 and f32) times the kernel
 * seen as {G} blocks of [K, og] gives y {G, P, og}, moved into the layout by conv_out (or
 * written straight into the output for nhwc, one group, f32/f64). The kernel needs no copy: nchw
 * {O, cg, KH, KW} is [O, K] (group g: rows g og.., transposed), nhwc {KH, KW, cg, O} is [K, O]
 * (group g: columns g og..); only f16 kernels are converted to f32 first. Scratch buffers are
 * released after enqueueing: OpenCL frees them once the commands using them have run. */
static cx_code run_conv2d(ocl_device *dev, const cx_tensor *x, const cx_tensor *kern,
                          const cx_params *ps, cx_tensor *out, cx_status *st) {
#ifdef CX_HAVE_CLBLAST
    ocl_conv v;
    conv_geometry(&x->desc, &kern->desc, ps, &v);
    cx_dtype t = out->desc.dtype;
    const char *tag = ocl_type_tag(t);
    size_t es = conv_compute_size(t);
    if (v.k == 0) { /* no input channels: empty sums */
        uint64_t zero = 0;
        cl_int err = clEnqueueFillBuffer(dev->queue, (cl_mem)out->data, &zero, cx_dtype_size(t), 0,
                                         out->nbytes, 0, NULL, NULL);
        return err == CL_SUCCESS ? CX_OK : ocl_fail(st, err, "clEnqueueFillBuffer");
    }
    size_t g = (size_t)v.groups, p = (size_t)v.p, k = (size_t)v.k, og = (size_t)v.og;
    size_t o = g * og;
    bool direct = v.nhwc && g == 1 && t != CX_F16;
    cl_mem cols = scratch(dev, g * p * k * es, st), y = NULL, w = NULL;
    if (!cols) return st->code;
    cx_code rc = CX_OK;
    y = direct ? (cl_mem)out->data : scratch(dev, g * p * og * es, st);
    w = t == CX_F16 ? scratch(dev, o * k * es, st) : (cl_mem)kern->data;
    if (!y || !w) {
        rc = st->code;
        goto done;
    }
    char name[48];
    snprintf(name, sizeof name, "conv_im2col_%s", tag);
    karg args[] = {{sizeof(cl_mem), &cols}, MEM(x), ARG(v)};
    if ((rc = launch(dev, name, args, 3, g * p, 0, st)) != CX_OK) goto done;
    if (t == CX_F16) {
        cl_long n = (cl_long)(o * k);
        karg cargs[] = {{sizeof(cl_mem), &w}, MEM(kern), ARG(n)};
        if ((rc = launch(dev, "cast_f16_f32", cargs, 3, o * k, 0, st)) != CX_OK) goto done;
    }
    CLBlastTranspose tb = v.nhwc ? CLBlastTransposeNo : CLBlastTransposeYes;
    size_t ldb = v.nhwc ? o : k, b_stride = v.nhwc ? og : og * k;
    CLBlastStatusCode s;
    pthread_mutex_lock(&dev->lock);
    if (es == 4)
        s = g == 1 ? CLBlastSgemm(CLBlastLayoutRowMajor, CLBlastTransposeNo, tb, p, og, k, 1.0f,
                                  cols, 0, k, w, 0, ldb, 0.0f, y, 0, og, &dev->queue, NULL)
                   : CLBlastSgemmStridedBatched(CLBlastLayoutRowMajor, CLBlastTransposeNo, tb, p,
                                                og, k, 1.0f, cols, 0, k, p * k, w, 0, ldb, b_stride,
                                                0.0f, y, 0, og, p * og, g, &dev->queue, NULL);
    else
        s = g == 1 ? CLBlastDgemm(CLBlastLayoutRowMajor, CLBlastTransposeNo, tb, p, og, k, 1.0,
                                  cols, 0, k, w, 0, ldb, 0.0, y, 0, og, &dev->queue, NULL)
                   : CLBlastDgemmStridedBatched(CLBlastLayoutRowMajor, CLBlastTransposeNo, tb, p,
                                                og, k, 1.0, cols, 0, k, p * k, w, 0, ldb, b_stride,
                                                0.0, y, 0, og, p * og, g, &dev->queue, NULL);
    pthread_mutex_unlock(&dev->lock);
    if (s != CLBlastSuccess) {
        rc = cx_fail(st, CX_EDEVICE, "opencl: CLBlast GEMM of conv2d failed (status %d)", (int)s);
        goto done;
    }
    if (!direct) {
        snprintf(name, sizeof name, "conv_out_%s", tag);
        karg oargs[] = {MEM(out), {sizeof(cl_mem), &y}, ARG(v)};
        size_t rows = v.nhwc ? p : (size_t)v.n * o * (size_t)v.oh;
        rc = launch(dev, name, oargs, 3, rows, 0, st);
    }
done:
    clReleaseMemObject(cols);
    if (y && !direct) clReleaseMemObject(y);
    if (w && t == CX_F16) clReleaseMemObject(w);
    return rc;
#else
    (void)dev, (void)x, (void)kern, (void)ps, (void)out;
    return cx_fail(st, CX_EUNSUPPORTED, "opencl: built without CLBlast, no conv2d");
#endif
}

/* ---- fused chains ------------------------------------------------------------------------- */

/* The name a chain's kernel is kept under (its code, which inputs are numbers, whether it sums);
 * false when it does not fit. */
static bool fused_key(const cx_fused_code *c, int n_in, const bool *wide, bool reduce,
                      char key[OCL_FUSED_KEY]) {
    int len = snprintf(key, OCL_FUSED_KEY, "%s%d:", reduce ? "sum:" : "", n_in);
    for (int k = 0; k < n_in && len < OCL_FUSED_KEY; k++)
        len += snprintf(key + len, OCL_FUSED_KEY - (size_t)len, "%c", wide[k] ? 'w' : 'n');
    for (int k = 0; k < c->n && len < OCL_FUSED_KEY; k++)
        len += snprintf(key + len, OCL_FUSED_KEY - (size_t)len, ";%d,%d,%d", (int)c->op[k], c->a[k],
                        c->b[k]);
    return len < OCL_FUSED_KEY;
}

static cl_kernel built_fused(ocl_device *dev, const char *key) {
    for (int k = 0; k < OCL_MAX_FUSED; k++)
        if (dev->fused[k].kernel && strcmp(dev->fused[k].key, key) == 0)
            return dev->fused[k].kernel;
    return NULL;
}

/* The chain's kernel, built on first use from its own source (ocl_fused_source) and kept;
 * called with the device's lock held. */
static cl_kernel fused_kernel(ocl_device *dev, const cx_fused_code *c, int n_in, const bool *wide,
                              bool reduce, cx_status *st) {
    char key[OCL_FUSED_KEY];
    if (!fused_key(c, n_in, wide, reduce, key)) {
        cx_fail(st, CX_EINVAL, "opencl: fused chain too long to name");
        return NULL;
    }
    cl_kernel built = built_fused(dev, key);
    if (built) return built;
    char *src = ocl_fused_source(c, n_in, wide, reduce);
    if (!src) {
        cx_fail(st, CX_ENOMEM, "opencl: no source for the fused chain");
        return NULL;
    }
    cl_int err;
    const char *srcs[1] = {src};
    cl_program p = clCreateProgramWithSource(dev->context, 1, srcs, NULL, &err);
    free(src);
    if (err != CL_SUCCESS) {
        ocl_fail(st, err, "clCreateProgramWithSource (fused)");
        return NULL;
    }
    err = clBuildProgram(p, 1, &dev->device, ocl_build_options(dev), NULL, NULL);
    cl_kernel kern = err == CL_SUCCESS ? clCreateKernel(p, "fused", &err) : NULL;
    if (err != CL_SUCCESS) {
        char log[200] = "";
        clGetProgramBuildInfo(p, dev->device, CL_PROGRAM_BUILD_LOG, sizeof log - 1, log, NULL);
        clReleaseProgram(p);
        cx_fail(st, CX_EDEVICE, "opencl: building a fused chain failed (error %d): %s", (int)err,
                log);
        return NULL;
    }
    ocl_fused_slot *slot = &dev->fused[dev->n_fused++ % OCL_MAX_FUSED];
    if (slot->kernel) {
        clReleaseKernel(slot->kernel);
        clReleaseProgram(slot->program);
    }
    snprintf(slot->key, sizeof slot->key, "%s", key);
    slot->program = p;
    slot->kernel = kern;
    return kern;
}

static cx_code run_fused(ocl_device *dev, const cx_tensor *const *in, int n_in, const cx_params *ps,
                         cx_tensor *out, cx_status *st) {
    cx_fused_code c;
    if (cx_fused_decode(ps, n_in, &c, st) != CX_OK) return st->code;
    bool wide[CX_FUSED_MAX_INPUTS];
    cx_desc descs[CX_FUSED_MAX_INPUTS];
    for (int k = 0; k < n_in; k++) wide[k] = in[k]->desc.rank > 0, descs[k] = in[k]->desc;
    cl_long n = (cl_long)out->numel;
    size_t local = dev->desc->max_group < GROUP ? dev->desc->max_group : GROUP;
    size_t global = round_up((size_t)n, local);
    bool reduce = ps->p[CX_P_REDUCE].i[0] != 0;
    if (reduce) {
        /* a group per row; n is the row's length */
        int64_t rows, cols;
        if (!cx_fused_rows(&c, descs, n_in, ps, &rows, &cols))
            return cx_fail(st, CX_EINVAL, "opencl: fused sum over axes that do not trail");
        if (rows == 0) return CX_OK;
        if (cols == 0) {
            /* sums over nothing are 0 */
            cl_float zero = 0.0f;
            pthread_mutex_lock(&dev->lock);
            cl_int e = clEnqueueFillBuffer(dev->queue, out->data, &zero, sizeof zero, 0,
                                           sizeof(float) * (size_t)rows, 0, NULL, NULL);
            pthread_mutex_unlock(&dev->lock);
            return e == CL_SUCCESS ? CX_OK : ocl_fail(st, e, "zeroing a fused sum");
        }
        n = (cl_long)cols;
        local = OCL_REDUCE_GROUP;
        global = (size_t)rows * OCL_REDUCE_GROUP;
    }
    pthread_mutex_lock(&dev->lock);
    cl_kernel k = fused_kernel(dev, &c, n_in, wide, reduce, st);
    cl_int err = CL_SUCCESS;
    size_t most = 0;
    /* a group of OCL_REDUCE_GROUP per row: the kernel as built must allow that many */
    if (k && reduce &&
        (clGetKernelWorkGroupInfo(k, dev->device, CL_KERNEL_WORK_GROUP_SIZE, sizeof most, &most,
                                  NULL) != CL_SUCCESS ||
         most < OCL_REDUCE_GROUP)) {
        pthread_mutex_unlock(&dev->lock);
        return cx_fail(st, CX_EDEVICE,
                       "opencl: the fused sum's kernel runs groups of at most %zu work-items, "
                       "not %d",
                       most, OCL_REDUCE_GROUP);
    }
    if (k) err = clSetKernelArg(k, 0, sizeof(cl_mem), &out->data);
    for (int j = 0; k && j < n_in && err == CL_SUCCESS; j++)
        err = clSetKernelArg(k, (cl_uint)(j + 1), sizeof(cl_mem), &in[j]->data);
    if (k && err == CL_SUCCESS) err = clSetKernelArg(k, (cl_uint)(n_in + 1), sizeof n, &n);
    if (k && err == CL_SUCCESS)
        err = clEnqueueNDRangeKernel(dev->queue, k, 1, NULL, &global, &local, 0, NULL, NULL);
    pthread_mutex_unlock(&dev->lock);
    if (!k) return st->code;
    return err == CL_SUCCESS ? CX_OK : ocl_fail(st, err, "launching a fused chain");
}

cx_code ocl_execute(ocl_device *dev, cx_op_id op, const cx_tensor *const *in, int n_in,
                    const cx_params *ps, cx_tensor *out, cx_status *st) {
    if (out->numel == 0) return CX_OK;
    switch (cx_op_table[op].kind) {
    case CX_KIND_UNARY:
    case CX_KIND_UNARY_FLOAT:
    case CX_KIND_BINARY:
    case CX_KIND_BINARY_FLOAT:
    case CX_KIND_COMPARE:
    case CX_KIND_LOGICAL:
    case CX_KIND_SELECT: return run_elementwise(dev, op, in, n_in, out, st);
    case CX_KIND_CAST: return run_cast(dev, in[0], out, st);
    case CX_KIND_REDUCE: return run_reduce(dev, op, in[0], ps, out, st);
    case CX_KIND_ARGREDUCE: return run_argreduce(dev, op, in[0], ps, out, st);
    case CX_KIND_LAYOUT:
        if (op == CX_OP_CONCATENATE) return run_concatenate(dev, in, n_in, ps, out, st);
        if (op == CX_OP_TAKE) return run_take(dev, in[0], in[1], ps, out, st);
        if (op == CX_OP_GATHER) return run_gather(dev, in[0], in[1], ps, out, st);
        return run_layout(dev, op, in[0], ps, out, st);
    case CX_KIND_DOT: return run_dot(dev, in[0], in[1], ps, out, st);
    case CX_KIND_CREATE:
        if (op == CX_OP_FULL) return run_full(dev, ps, out, st);
        if (op == CX_OP_IOTA || op == CX_OP_EYE) return run_create(dev, op, ps, out, st);
        break;
    default: break;
    }
    if (op == CX_OP_SOFTMAX || op == CX_OP_LOG_SOFTMAX)
        return run_softmax(dev, op, in[0], ps, out, st);
    if (op == CX_OP_LAYER_NORM) return run_layer_norm(dev, in, ps, out, st);
    if (op == CX_OP_FUSED) return run_fused(dev, in, n_in, ps, out, st);
    if (op == CX_OP_CONV2D) return run_conv2d(dev, in[0], in[1], ps, out, st);
    return cx_fail(st, CX_EUNSUPPORTED, "opencl: no kernel for %s", cx_op_table[op].name);
}
