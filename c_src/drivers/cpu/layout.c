/* The LAYOUT kind: ops that move elements without arithmetic. Each op describes its work as a
 * "move" (per axis a size, a source stride and a destination stride, in elements) that one
 * engine runs on bytes, so every type shares the same code; only pad looks at the type, to
 * build its fill value. Take and gather first check every index, so nothing reads outside the
 * input. */
#include <string.h>

#include "cpu_kernels.h"

#define ALWAYS_INLINE static inline __attribute__((always_inline))

/* Tile side in elements. Larger tiles lose when the row stride is a power of two: their rows
 * share cache sets and evict each other (measured on 4096 x 4096 transposes of u8 to f64). */
#define TILE 16

/* Axes in the order they are walked. A source stride of 0 repeats an element (broadcast) and a
 * negative one walks backwards (reverse). `tiled` is set by move_prepare. */
typedef struct {
    int rank;
    bool tiled;
    int64_t shape[CX_MAX_RANK];
    int64_t src[CX_MAX_RANK];
    int64_t dst[CX_MAX_RANK];
} move;

/* A move that copies `d` densely onto a buffer of the same shape. */
static void move_dense(move *m, const cx_desc *d) {
    m->rank = d->rank;
    m->tiled = false;
    memcpy(m->shape, d->shape, sizeof(int64_t) * (size_t)d->rank);
    cpu_strides(d, m->src);
    cpu_strides(d, m->dst);
}

/* Drops axes of size 1 and merges neighbours that are contiguous on both sides, so that the
 * innermost axis is as long as possible. Leaves at least one axis. */
static void move_simplify(move *m) {
    int r = 0;
    for (int k = 0; k < m->rank; k++) {
        if (m->shape[k] == 1) continue;
        if (r > 0 && m->src[r - 1] == m->src[k] * m->shape[k] &&
            m->dst[r - 1] == m->dst[k] * m->shape[k]) {
            m->shape[r - 1] *= m->shape[k];
            m->src[r - 1] = m->src[k];
            m->dst[r - 1] = m->dst[k];
            continue;
        }
        m->shape[r] = m->shape[k];
        m->src[r] = m->src[k];
        m->dst[r] = m->dst[k];
        r++;
    }
    if (r == 0) {
        m->shape[0] = 1;
        m->src[0] = m->dst[0] = 1;
        r = 1;
    }
    m->rank = r;
}

/* Reads that stride through memory on the innermost axis touch a new cache line per element.
 * When another axis reads contiguously, copying square tiles of the two keeps both sides in
 * cache: that axis is moved next to the innermost one and walked in tiles with it. */
static void move_choose_tiles(move *m) {
    int b = m->rank - 1;
    m->tiled = false;
    if (b < 1 || m->src[b] == 0 || m->src[b] == 1 || m->src[b] == -1) return;
    for (int a = b - 1; a >= 0; a--) {
        if (m->src[a] != 1) continue;
        int64_t shape = m->shape[a], src = m->src[a], dst = m->dst[a];
        for (int k = a; k < b - 1; k++) {
            m->shape[k] = m->shape[k + 1];
            m->src[k] = m->src[k + 1];
            m->dst[k] = m->dst[k + 1];
        }
        m->shape[b - 1] = shape;
        m->src[b - 1] = src;
        m->dst[b - 1] = dst;
        m->tiled = true;
        return;
    }
}

/* Simplifies and picks the walk; false when there is nothing to copy. */
static bool move_prepare(move *m) {
    for (int k = 0; k < m->rank; k++)
        if (m->shape[k] == 0) return false;
    move_simplify(m);
    move_choose_tiles(m);
    return true;
}

/* The element copies below take the element size as a constant where the callers' switches
 * allow, so each memcpy becomes one load and one store. */
ALWAYS_INLINE void run_sized(char *d, int64_t ds, const char *s, int64_t ss, int64_t n,
                             int64_t es) {
    for (int64_t i = 0; i < n; i++) memcpy(d + i * ds * es, s + i * ss * es, (size_t)es);
}

/* n elements from s to d, strides in elements. */
static void copy_run(char *d, int64_t ds, const char *s, int64_t ss, int64_t n, int64_t es) {
    if (ds == 1 && ss == 1) {
        memcpy(d, s, (size_t)(n * es));
        return;
    }
    if (ds == 1 && ss == 0 && es == 1) {
        memset(d, (unsigned char)*s, (size_t)n);
        return;
    }
    if (ds == 1 && ss == -1) { /* reverse: constant strides, which the compiler vectorises */
        switch (es) {
        case 1: run_sized(d, 1, s, -1, n, 1); return;
        case 2: run_sized(d, 1, s, -1, n, 2); return;
        case 4: run_sized(d, 1, s, -1, n, 4); return;
        case 8: run_sized(d, 1, s, -1, n, 8); return;
        default: break;
        }
    }
    switch (es) {
    case 1: run_sized(d, ds, s, ss, n, 1); break;
    case 2: run_sized(d, ds, s, ss, n, 2); break;
    case 4: run_sized(d, ds, s, ss, n, 4); break;
    case 8: run_sized(d, ds, s, ss, n, 8); break;
    default: run_sized(d, ds, s, ss, n, es); break;
    }
}

/* One tile: ni x nj elements; st holds the byte strides {dst i, dst j, src i, src j}. */
ALWAYS_INLINE void block_sized(char *d, const char *s, int64_t ni, int64_t nj, const int64_t *st,
                               int64_t es) {
    for (int64_t i = 0; i < ni; i++)
        for (int64_t j = 0; j < nj; j++)
            memcpy(d + i * st[0] + j * st[1], s + i * st[2] + j * st[3], (size_t)es);
}

static void copy_block(char *d, const char *s, int64_t ni, int64_t nj, const int64_t *st,
                       int64_t es) {
    switch (es) {
    case 1: block_sized(d, s, ni, nj, st, 1); break;
    case 2: block_sized(d, s, ni, nj, st, 2); break;
    case 4: block_sized(d, s, ni, nj, st, 4); break;
    case 8: block_sized(d, s, ni, nj, st, 8); break;
    default: block_sized(d, s, ni, nj, st, es); break;
    }
}

static int64_t min64(int64_t a, int64_t b) {
    return a < b ? a : b;
}

/* The two innermost axes of a tiled move, tile by tile. */
static void copy_tiles(const move *m, char *d, const char *s, int64_t es) {
    int a = m->rank - 2, b = m->rank - 1;
    int64_t st[4] = {m->dst[a] * es, m->dst[b] * es, m->src[a] * es, m->src[b] * es};
    for (int64_t i = 0; i < m->shape[a]; i += TILE)
        for (int64_t j = 0; j < m->shape[b]; j += TILE)
            copy_block(d + i * st[0] + j * st[1], s + i * st[2] + j * st[3],
                       min64(TILE, m->shape[a] - i), min64(TILE, m->shape[b] - j), st, es);
}

static void copy_inner(const move *m, char *d, const char *s, int64_t es) {
    int b = m->rank - 1;
    if (m->tiled)
        copy_tiles(m, d, s, es);
    else
        copy_run(d, m->dst[b], s, m->src[b], m->shape[b], es);
}

/* Runs a prepared move; offsets are in elements. Walks the outer axes like an odometer, only
 * ever forming pointers to elements that exist. */
static void move_exec(const move *m, char *dst, int64_t doff, const char *src, int64_t soff,
                      int64_t es) {
    int outer = m->rank - (m->tiled ? 2 : 1);
    int64_t idx[CX_MAX_RANK] = {0};
    for (;;) {
        copy_inner(m, dst + doff * es, src + soff * es, es);
        int k = outer - 1;
        for (; k >= 0 && idx[k] == m->shape[k] - 1; k--) {
            doff -= m->dst[k] * idx[k];
            soff -= m->src[k] * idx[k];
            idx[k] = 0;
        }
        if (k < 0) return;
        idx[k]++;
        doff += m->dst[k];
        soff += m->src[k];
    }
}

static void move_run(move m, char *dst, int64_t doff, const char *src, int64_t soff, int64_t es) {
    if (move_prepare(&m)) move_exec(&m, dst, doff, src, soff, es);
}

static int64_t elem_size(const cx_tensor *t) {
    return (int64_t)cx_dtype_size(t->desc.dtype);
}

/* reshape and squeeze: the row-major order does not change. */
static cx_code layout_copy(const cx_tensor *in, cx_tensor *out) {
    if (out->nbytes) memcpy(out->data, in->data, out->nbytes);
    return CX_OK;
}

static cx_code layout_transpose(const cx_tensor *in, const cx_params *ps, cx_tensor *out) {
    const cx_param *axes = &ps->p[CX_P_AXES];
    int64_t in_str[CX_MAX_RANK];
    cpu_strides(&in->desc, in_str);
    move m;
    move_dense(&m, &out->desc);
    for (int k = 0; k < m.rank; k++) m.src[k] = in_str[axes->i[k]];
    move_run(m, out->data, 0, in->data, 0, elem_size(out));
    return CX_OK;
}

static cx_code layout_broadcast(const cx_tensor *in, const cx_params *ps, cx_tensor *out) {
    const cx_param *axes = &ps->p[CX_P_AXES];
    int64_t in_str[CX_MAX_RANK];
    cpu_strides(&in->desc, in_str);
    move m;
    move_dense(&m, &out->desc);
    for (int k = 0; k < m.rank; k++) m.src[k] = 0;
    for (int k = 0; k < in->desc.rank; k++)
        if (in->desc.shape[k] != 1) m.src[axes->i[k]] = in_str[k];
    move_run(m, out->data, 0, in->data, 0, elem_size(out));
    return CX_OK;
}

/* Inference clipped START so that every element read lies inside the input. */
static cx_code layout_slice(const cx_tensor *in, const cx_params *ps, cx_tensor *out) {
    const int64_t *start = ps->p[CX_P_START].i, *stride = ps->p[CX_P_STRIDES].i;
    int64_t in_str[CX_MAX_RANK], soff = 0;
    cpu_strides(&in->desc, in_str);
    move m;
    move_dense(&m, &out->desc);
    for (int k = 0; k < m.rank; k++) {
        /* a stride past the end of a length-1 axis is never used (and may be huge) */
        m.src[k] = m.shape[k] > 1 ? in_str[k] * stride[k] : 0;
        soff += start[k] * in_str[k];
    }
    move_run(m, out->data, 0, in->data, soff, elem_size(out));
    return CX_OK;
}

static cx_code layout_put_slice(const cx_tensor *in, const cx_tensor *slice, const cx_params *ps,
                                cx_tensor *out) {
    const int64_t *start = ps->p[CX_P_START].i;
    int64_t doff = 0;
    layout_copy(in, out);
    move m;
    move_dense(&m, &slice->desc);
    cpu_strides(&out->desc, m.dst);
    for (int k = 0; k < m.rank; k++) doff += start[k] * m.dst[k];
    move_run(m, out->data, doff, slice->data, 0, elem_size(out));
    return CX_OK;
}

/* An integer pad value wraps into narrow integer types, as Nx writes it. Inference makes the
 * output a float type whenever the value is a float, so the float branch is only a guard; it
 * truncates and saturates like as_type. */
static int64_t pad_int(const cx_param *v) {
    if (v->is_int) return v->i[0];
    if (v->f != v->f) return 0;
    if (v->f >= 9223372036854775807.0) return INT64_MAX;
    if (v->f <= -9223372036854775808.0) return INT64_MIN;
    return (int64_t)v->f;
}

/* The pad value as the bytes of one element of type t. */
static void pad_value(cx_dtype t, const cx_param *v, unsigned char *bytes) {
    double f = cx_param_f64(v);
    uint64_t u = (uint64_t)pad_int(v);
    switch (t) {
    case CX_F16: memcpy(bytes, &(uint16_t){cx_f16_from_f64(f)}, 2); break;
    case CX_BF16: memcpy(bytes, &(uint16_t){cx_bf16_from_f64(f)}, 2); break;
    case CX_F32: memcpy(bytes, &(float){(float)f}, 4); break;
    case CX_F64: memcpy(bytes, &f, 8); break;
    case CX_C64: memcpy(bytes, (float[2]){(float)f, 0}, 8); break;
    case CX_C128: memcpy(bytes, (double[2]){f, 0}, 16); break;
    default: /* integers wrap: the low bytes (little-endian) */
        memcpy(bytes, &u, cx_dtype_size(t));
        break;
    }
}

/* Fills n elements with one value, doubling the filled prefix with each memcpy. */
static void fill_elems(char *d, const unsigned char *value, int64_t n, int64_t es) {
    if (n == 0) return;
    memcpy(d, value, (size_t)es);
    int64_t done = es, total = n * es;
    while (done < total) {
        int64_t chunk = min64(done, total - done);
        memcpy(d + done, d, (size_t)chunk);
        done += chunk;
    }
}

/* Whether some output position gets no input element, so the fill is needed. */
static bool pad_has_gaps(const int64_t *pads, const cx_desc *in) {
    for (int k = 0; k < in->rank; k++)
        if (pads[3 * k] > 0 || pads[3 * k + 1] > 0 || (pads[3 * k + 2] > 0 && in->shape[k] > 1))
            return true;
    return false;
}

/* Input index j lands at lo + j * (interior + 1) and is kept when that is in [0, out). Sets the
 * first kept index and how many are kept; false when none is. */
static bool pad_kept(const int64_t *pad, int64_t in, int64_t out, int64_t *first, int64_t *n) {
    int64_t lo = pad[0], step = pad[2] + 1;
    int64_t j0 = lo >= 0 ? 0 : (step - 1 - lo) / step;
    int64_t j1 = out - lo <= 0 ? 0 : min64(in, (out - lo + step - 1) / step);
    *first = j0;
    *n = j1 - j0;
    return j1 > j0;
}

/* The move that copies the kept input elements to their padded positions; false when no input
 * element survives the cropping. */
static bool pad_move(const cx_desc *in, const cx_desc *out, const int64_t *pads, move *m,
                     int64_t *soff, int64_t *doff) {
    int64_t first[CX_MAX_RANK], in_str[CX_MAX_RANK], out_str[CX_MAX_RANK];
    m->rank = in->rank;
    m->tiled = false;
    for (int k = 0; k < in->rank; k++)
        if (!pad_kept(&pads[3 * k], in->shape[k], out->shape[k], &first[k], &m->shape[k]))
            return false;
    cpu_strides(in, in_str);
    cpu_strides(out, out_str);
    *soff = *doff = 0;
    for (int k = 0; k < in->rank; k++) {
        int64_t step = pads[3 * k + 2] + 1;
        m->src[k] = in_str[k];
        /* with one kept element the step is never taken (and may be huge) */
        m->dst[k] = m->shape[k] > 1 ? out_str[k] * step : 0;
        *soff += first[k] * in_str[k];
        *doff += (pads[3 * k] + first[k] * step) * out_str[k];
    }
    return true;
}

static cx_code layout_pad(const cx_tensor *in, const cx_params *ps, cx_tensor *out) {
    const int64_t *pads = ps->p[CX_P_PADS].i;
    int64_t es = elem_size(out), soff, doff;
    unsigned char value[16];
    pad_value(out->desc.dtype, &ps->p[CX_P_VALUE], value);
    if (pad_has_gaps(pads, &in->desc)) fill_elems(out->data, value, out->numel, es);
    move m;
    if (pad_move(&in->desc, &out->desc, pads, &m, &soff, &doff))
        move_run(m, out->data, doff, in->data, soff, es);
    return CX_OK;
}

static cx_code layout_reverse(const cx_tensor *in, const cx_params *ps, cx_tensor *out) {
    const cx_param *axes = &ps->p[CX_P_AXES];
    int64_t soff = 0;
    if (out->numel == 0) return CX_OK;
    move m;
    move_dense(&m, &out->desc);
    for (int k = 0; k < axes->n; k++) {
        int64_t a = axes->i[k];
        soff += (m.shape[a] - 1) * m.src[a];
        m.src[a] = -m.src[a];
    }
    move_run(m, out->data, 0, in->data, soff, elem_size(out));
    return CX_OK;
}

static cx_code layout_concatenate(const cx_tensor *const *in, int n_in, const cx_params *ps,
                                  cx_tensor *out) {
    int axis = (int)ps->p[CX_P_AXIS].i[0];
    int64_t out_str[CX_MAX_RANK], at = 0;
    cpu_strides(&out->desc, out_str);
    for (int k = 0; k < n_in; k++) {
        move m;
        move_dense(&m, &in[k]->desc);
        memcpy(m.dst, out_str, sizeof(int64_t) * (size_t)m.rank);
        move_run(m, out->data, at * out_str[axis], in[k]->data, 0, elem_size(out));
        at += in[k]->desc.shape[axis];
    }
    return CX_OK;
}

/* Copies n rows of `bytes` each: row i of d is row rows[i] of s. */
ALWAYS_INLINE void pick_sized(char *d, const char *s, const int64_t *rows, int64_t n,
                              int64_t bytes) {
    for (int64_t i = 0; i < n; i++) memcpy(d + i * bytes, s + rows[i] * bytes, (size_t)bytes);
}

static void pick_rows(char *d, const char *s, const int64_t *rows, int64_t n, int64_t bytes) {
    switch (bytes) {
    case 1: pick_sized(d, s, rows, n, 1); break;
    case 2: pick_sized(d, s, rows, n, 2); break;
    case 4: pick_sized(d, s, rows, n, 4); break;
    case 8: pick_sized(d, s, rows, n, 8); break;
    default: pick_sized(d, s, rows, n, bytes); break;
    }
}

static cx_code layout_take(const cx_tensor *t, const cx_tensor *ix, const cx_params *ps,
                           cx_tensor *out, cx_status *st) {
    int axis = (int)ps->p[CX_P_AXIS].i[0];
    const int64_t *idx = ix->data;
    int64_t dim = t->desc.shape[axis], n = ix->numel, outer, inner;
    if (cx_check_indices(CX_OP_TAKE, &t->desc, idx, n, ps->p[CX_P_AXIS].i, 1, st)) return st->code;
    if (out->numel == 0) return CX_OK;
    cpu_around_axis(&t->desc, axis, &outer, &inner);
    inner *= elem_size(t);
    /* the input as {outer, dim, inner bytes}, the output as {outer, n, inner bytes} */
    for (int64_t o = 0; o < outer; o++)
        pick_rows((char *)out->data + o * n * inner, (const char *)t->data + o * dim * inner, idx,
                  n, inner);
    return CX_OK;
}

/* an element of 16 bytes (c128), moved as two 8-byte halves */
typedef struct {
    uint64_t re, im;
} pair16;

/* Each line along the axis: the input as {outer, dim, inner}, indices and output as {outer, n,
 * inner}; out[o][j][i] = t[o][idx[o][j][i]][i], by element size. */
#define ALONG_AXIS(T)                                                                              \
    {                                                                                              \
        const T *s = t->data;                                                                      \
        T *d = out->data;                                                                          \
        if (inner == 1) /* along the last axis: one element a position */                          \
            for (int64_t o = 0; o < outer; o++) {                                                  \
                const T *sr = s + o * dim;                                                         \
                for (int64_t j = 0; j < n; j++) d[o * n + j] = sr[idx[o * n + j]];                 \
            }                                                                                      \
        else                                                                                       \
            for (int64_t o = 0; o < outer; o++)                                                    \
                for (int64_t j = 0; j < n; j++) {                                                  \
                    const int64_t *ix = idx + (o * n + j) * inner;                                 \
                    T *dr = d + (o * n + j) * inner;                                               \
                    const T *sr = s + o * dim * inner;                                             \
                    for (int64_t i = 0; i < inner; i++) dr[i] = sr[ix[i] * inner + i];             \
                }                                                                                  \
    }

static cx_code layout_take_along_axis(const cx_tensor *t, const cx_tensor *ix, const cx_params *ps,
                                      cx_tensor *out, cx_status *st) {
    int axis = (int)ps->p[CX_P_AXIS].i[0];
    const int64_t *idx = ix->data;
    int64_t dim = t->desc.shape[axis], n = ix->desc.shape[axis], outer, inner;
    if (cx_check_indices(CX_OP_TAKE_ALONG_AXIS, &t->desc, idx, ix->numel, ps->p[CX_P_AXIS].i, 1,
                         st))
        return st->code;
    if (out->numel == 0) return CX_OK;
    cpu_around_axis(&t->desc, axis, &outer, &inner);
    switch (elem_size(t)) {
    case 1: ALONG_AXIS(uint8_t) break;
    case 2: ALONG_AXIS(uint16_t) break;
    case 4: ALONG_AXIS(uint32_t) break;
    case 8: ALONG_AXIS(uint64_t) break;
    default: ALONG_AXIS(pair16) break;
    }
    return CX_OK;
}
#undef ALONG_AXIS

/* The move that copies the axes gather does not index, at one index row, into a dense block. */
static void gather_block(const cx_tensor *t, const cx_param *axes, const int64_t *in_str, move *m) {
    bool used[CX_MAX_RANK] = {false};
    for (int j = 0; j < axes->n; j++) used[axes->i[j]] = true;
    m->rank = 0;
    m->tiled = false;
    for (int a = 0; a < t->desc.rank; a++)
        if (!used[a]) {
            m->shape[m->rank] = t->desc.shape[a];
            m->src[m->rank++] = in_str[a];
        }
    int64_t s = 1;
    for (int k = m->rank - 1; k >= 0; k--) {
        m->dst[k] = s;
        s *= m->shape[k];
    }
}

static cx_code layout_gather(const cx_tensor *t, const cx_tensor *ix, const cx_params *ps,
                             cx_tensor *out, cx_status *st) {
    const cx_param *axes = &ps->p[CX_P_AXES];
    const int64_t *idx = ix->data;
    int64_t rows = 1, in_str[CX_MAX_RANK], es = elem_size(t);
    for (int k = 0; k < ix->desc.rank - 1; k++) rows *= ix->desc.shape[k];
    if (cx_check_indices(CX_OP_GATHER, &t->desc, idx, rows * axes->n, axes->i, axes->n, st))
        return st->code;
    if (out->numel == 0) return CX_OK;
    cpu_strides(&t->desc, in_str);
    move m;
    gather_block(t, axes, in_str, &m);
    int64_t block = out->numel / rows;
    if (!move_prepare(&m)) return CX_OK;
    for (int64_t r = 0; r < rows; r++) {
        int64_t soff = 0;
        for (int j = 0; j < axes->n; j++) soff += idx[r * axes->n + j] * in_str[axes->i[j]];
        move_exec(&m, out->data, r * block, t->data, soff, es);
    }
    return CX_OK;
}

cx_code cpu_layout(cx_op_id op, const cx_tensor *const *in, int n_in, const cx_params *ps,
                   cx_tensor *out, cx_status *st) {
    switch (op) {
    case CX_OP_RESHAPE:
    case CX_OP_SQUEEZE: return layout_copy(in[0], out);
    case CX_OP_TRANSPOSE: return layout_transpose(in[0], ps, out);
    case CX_OP_BROADCAST: return layout_broadcast(in[0], ps, out);
    case CX_OP_SLICE: return layout_slice(in[0], ps, out);
    case CX_OP_PUT_SLICE: return layout_put_slice(in[0], in[1], ps, out);
    case CX_OP_PAD: return layout_pad(in[0], ps, out);
    case CX_OP_REVERSE: return layout_reverse(in[0], ps, out);
    case CX_OP_CONCATENATE: return layout_concatenate(in, n_in, ps, out);
    case CX_OP_TAKE: return layout_take(in[0], in[1], ps, out, st);
    case CX_OP_GATHER: return layout_gather(in[0], in[1], ps, out, st);
    case CX_OP_TAKE_ALONG_AXIS: return layout_take_along_axis(in[0], in[1], ps, out, st);
    default: break;
    }
    return cx_fail(st, CX_EUNSUPPORTED, "cpu: %s is not a layout op", cx_op_table[op].name);
}
