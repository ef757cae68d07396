/* The cpu driver's kernels, one file per family. Inputs arrive already cast to the compute types
 * that inference chose (ops.h), parameters normalised, and `out` allocated; every kernel handles
 * every type and empty tensors. f16/bf16 compute in f32 and round once. */
#ifndef CX_CPU_KERNELS_H
#define CX_CPU_KERNELS_H

#include "../../core/half.h"
#include "../../core/tensor.h"

/* One element i of a buffer of type t, for the kernels that fold element by element (sort,
 * scatter, window): a float as the double that holds it exactly, an integer widened to 64 bits
 * (sign-extended for signed types, zero-extended for unsigned ones); and a double stored into a
 * float type, rounded once. */
static inline double cpu_load_f64(cx_dtype t, const void *p, int64_t i) {
    switch (t) {
    case CX_F16: return cx_f16_to_f32(((const uint16_t *)p)[i]);
    case CX_BF16: return cx_bf16_to_f32(((const uint16_t *)p)[i]);
    case CX_F32: return ((const float *)p)[i];
    default: return ((const double *)p)[i];
    }
}

static inline void cpu_store_f64(cx_dtype t, void *p, int64_t i, double v) {
    switch (t) {
    case CX_F16: ((uint16_t *)p)[i] = cx_f16_from_f64(v); break;
    case CX_BF16: ((uint16_t *)p)[i] = cx_bf16_from_f64(v); break;
    case CX_F32: ((float *)p)[i] = (float)v; break;
    default: ((double *)p)[i] = v; break;
    }
}

static inline uint64_t cpu_load_bits64(cx_dtype t, const void *p, int64_t i) {
    switch (t) {
    case CX_S8: return (uint64_t)(int64_t)((const int8_t *)p)[i];
    case CX_S16: return (uint64_t)(int64_t)((const int16_t *)p)[i];
    case CX_S32: return (uint64_t)(int64_t)((const int32_t *)p)[i];
    case CX_U8: return ((const uint8_t *)p)[i];
    case CX_U16: return ((const uint16_t *)p)[i];
    case CX_U32: return ((const uint32_t *)p)[i];
    default: return ((const uint64_t *)p)[i];
    }
}

/* elementwise.c: UNARY, UNARY_FLOAT, BINARY, BINARY_FLOAT, COMPARE, LOGICAL and SELECT kinds */
cx_code cpu_elementwise(cx_op_id op, const cx_tensor *const *in, int n_in, cx_tensor *out,
                        cx_status *st);
/* elementwise.c: the inverse error function in double (the cuda emulator's erfinvf too) */
double cx_erf_inv(double y);
/* linalg.c: LINALG kind (triangular_solve, lu_factor, eigh_packed, svd_packed), in double.
 * cpu_eigh_order: n eigenpairs (vecs n x n row-major, one per column) in canonical form:
 * ascending eigenvalues (NaN last), each vector's largest component positive; scratch holds
 * n * n + n doubles, idx n. */
cx_code cpu_linalg(cx_op_id op, const cx_tensor *const *in, const cx_params *ps, cx_tensor *out,
                   cx_status *st);
void cpu_eigh_order(int64_t n, double *vals, double *vecs, double *scratch, int64_t *idx);
/* The steps of the LINALG kernels, on double matrices (row-major), which another driver may
 * replace with a library's (the blas driver: LAPACK); cpu_linalg_with does the rest (types,
 * batches, checks, packing, the eigenpairs' order).
 * trsm: solves M x = rhs in place (x: m rows of k), M lower triangular when `lower`.
 * getrf: factors w in place (L below the diagonal, U on and above) with partial pivoting;
 *   perm[i] is the input row at row i.
 * syev: the eigenvalues and eigenvectors (one per column of vecs) of the symmetric a, which
 *   it may overwrite; any order and signs.
 * gesvd: the thin singular value decomposition of a (m x n, finite, which it may overwrite):
 *   the k = min(m, n) singular values s, the left singular vectors as the rows of ut (k x m)
 *   and the right ones as the rows of vt (k x n); any order and signs, and any vectors (zeros
 *   too) for a zero singular value. false: no memory. */
typedef struct {
    void (*trsm)(bool lower, int64_t m, int64_t k, const double *mat, double *x);
    void (*getrf)(int64_t n, double *w, int64_t *perm);
    void (*syev)(int64_t n, double *a, double *vals, double *vecs);
    bool (*gesvd)(int64_t m, int64_t n, double *a, double *s, double *ut, double *vt);
} cpu_linalg_impl;
extern const cpu_linalg_impl cpu_linalg_portable;
cx_code cpu_linalg_with(const cpu_linalg_impl *impl, cx_op_id op, const cx_tensor *const *in,
                        const cx_params *ps, cx_tensor *out, cx_status *st);
/* cast.c: AS_TYPE */
cx_code cpu_sort(cx_op_id op, const cx_tensor *in, const cx_params *ps, cx_tensor *out,
                 cx_status *st);
/* scan.c: SCAN kind (cumulative_sum/product/max/min) */
cx_code cpu_scan(cx_op_id op, const cx_tensor *in, const cx_params *ps, cx_tensor *out,
                 cx_status *st);
cx_code cpu_scatter(cx_op_id op, const cx_tensor *const *in, const cx_params *ps, cx_tensor *out,
                    cx_status *st);
/* Whether a window op's windows span the last two axes only (every other axis: window 1,
 * stride 1, no padding, and no dilation when `dilations`): the pooling shape, which cpu_window
 * runs on f32 through loops of its own, and which splits by planes. */
bool cpu_window_inner_2d(const cx_desc *d, const cx_params *ps, bool dilations);
cx_code cpu_window(cx_op_id op, const cx_tensor *const *in, const cx_params *ps, cx_tensor *out,
                   cx_status *st);
cx_code cpu_cast(const cx_tensor *in, cx_tensor *out, cx_status *st);
/* cast.c: n elements from type `from` at src to type `to` at dst, as cpu_cast converts them. */
void cpu_cast_array(cx_dtype from, cx_dtype to, const void *src, void *dst, int64_t n);
/* reduce.c: REDUCE and ARGREDUCE kinds */
cx_code cpu_reduce(cx_op_id op, const cx_tensor *in, const cx_params *ps, cx_tensor *out,
                   cx_status *st);
/* layout.c: LAYOUT kind */
cx_code cpu_layout(cx_op_id op, const cx_tensor *const *in, int n_in, const cx_params *ps,
                   cx_tensor *out, cx_status *st);
/* dot.c: DOT */
cx_code cpu_dot(const cx_tensor *a, const cx_tensor *b, const cx_params *ps, cx_tensor *out,
                cx_status *st);
/* fft_op.c: FFT kind. fn transforms `rows` contiguous rows of n complex elements of type t
 * (inverse: divided by n), returning 0, or non-zero to have the reference (fft.c) run
 * instead; cpu_fft passes the reference itself. */
typedef int (*cpu_fft_rows_fn)(cx_dtype t, const void *in, void *out, int64_t rows, int64_t n,
                               int inverse);
cx_code cpu_fft_with(cx_op_id op, const cx_tensor *in, const cx_params *ps, cx_tensor *out,
                     cpu_fft_rows_fn fn, cx_status *st);
cx_code cpu_fft(cx_op_id op, const cx_tensor *in, const cx_params *ps, cx_tensor *out,
                cx_status *st);
/* create.c: CREATE kind (full, iota, eye, random) */
cx_code cpu_create(cx_op_id op, const cx_params *ps, cx_tensor *out, cx_status *st);

/* buffer_cache.c: 64-byte aligned host buffers; freed large ones are kept for reuse. */
/* buffer_cache.c: freed buffers of at least 64 KiB wait in a cache of this many slots and bytes
 * for a request of the same rounded size. */
#define CPU_BUFFER_CACHE_SLOTS 512
#define CPU_BUFFER_CACHE_CAP   ((size_t)64 << 20)
void *cpu_buffer_get(size_t bytes);
void cpu_buffer_put(void *data);
/* Frees every cached buffer. */
void cpu_buffer_trim(void);

/* A tensor seen as {outer, n, inner} around `axis` (n its size there): the products of the sizes
 * before and after it. */
static inline void cpu_around_axis(const cx_desc *d, int axis, int64_t *outer, int64_t *inner) {
    *outer = *inner = 1;
    for (int k = 0; k < axis; k++) *outer *= d->shape[k];
    for (int k = axis + 1; k < d->rank; k++) *inner *= d->shape[k];
}

/* Row-major strides in elements. */
static inline void cpu_strides(const cx_desc *d, int64_t *strides) {
    int64_t s = 1;
    for (int k = d->rank - 1; k >= 0; k--) {
        strides[k] = s;
        s *= d->shape[k];
    }
}

/* Some axes of an operand, in the order in which they index one dimension of a matrix (dot's
 * free or contracted axes); shared by the cpu and blas dot. */
typedef struct {
    int n;
    int64_t size[CX_MAX_RANK], stride[CX_MAX_RANK];
} cpu_axes_view;

void cpu_view_of(const cx_tensor *t, const int64_t *axes, int n, cpu_axes_view *v);
/* The axes of t in neither list, in order: its free axes. */
void cpu_free_view(const cx_tensor *t, const cx_param *x, const cx_param *y, cpu_axes_view *v);
int64_t cpu_view_count(const cpu_axes_view *v);
/* Whether the axes walk memory with one stride, like a single axis; sets it (`single` when the
 * view has a single index). */
bool cpu_view_stride(const cpu_axes_view *v, int64_t single, int64_t *stride);
/* The element offset of each index of the view, in row-major order of its axes (NULL when out
 * of memory; free it). */
int64_t *cpu_view_offsets(const cpu_axes_view *v);
/* Gathers the rows x cols matrix at element offset base of t, whose rows and columns start at
 * the given offsets, into a contiguous row-major matrix (f32: from f32, f16 or bf16). */
void cpu_gather_f32(const cx_tensor *t, const int64_t *roff, const int64_t *coff, int64_t base,
                    int64_t rows, int64_t cols, float *dst);
void cpu_gather_f64(const cx_tensor *t, const int64_t *roff, const int64_t *coff, int64_t base,
                    int64_t rows, int64_t cols, double *dst);
/* The element offsets of a dot's batch element in a and b, advanced like an odometer. */
typedef struct {
    int64_t idx[CX_MAX_RANK];
    int64_t a, b;
} cpu_batch_walk;
void cpu_batch_next(const cpu_axes_view *va, const cpu_axes_view *vb, cpu_batch_walk *w);

#endif
