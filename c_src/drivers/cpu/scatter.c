/* The SCATTER kind: indexed_add and indexed_put, as Nx.BinaryBackend computes them. The result
 * starts as a copy of the target; each index row names a position along `axes`, and the block of
 * the axes not indexed is updated there from the row's slice of `updates`.
 *
 * indexed_put writes the rows in order, so the last row at a position wins. indexed_add on
 * integers adds in place, wrapping (the order does not matter); on floats it sums the updates at
 * each position in double, in row order starting from 0, then adds the target's value and rounds
 * once: the steps Nx.BinaryBackend takes (it groups the updates by position first). */
#include <stdlib.h>
#include <string.h>

#include "cpu_kernels.h"

/* The low `es` bytes of an integer element (little-endian), and back. */
static uint64_t load_bits(const void *p, int64_t i, size_t es) {
    uint64_t v = 0;
    memcpy(&v, (const char *)p + (size_t)i * es, es);
    return v;
}

static void store_bits(void *p, int64_t i, size_t es, uint64_t v) {
    memcpy((char *)p + (size_t)i * es, &v, es);
}

/* An update of indexed_add on floats: its position in the result and its element in `updates`
 * (which grows with the row order). */
typedef struct {
    int64_t at, from;
} placed;

static int by_position(const void *a, const void *b) {
    const placed *x = a, *y = b;
    if (x->at != y->at) return x->at < y->at ? -1 : 1;
    return x->from < y->from ? -1 : x->from > y->from;
}

cx_code cpu_scatter(cx_op_id op, const cx_tensor *const *in, const cx_params *ps, cx_tensor *out,
                    cx_status *st) {
    const cx_tensor *t = in[0], *ix = in[1], *up = in[2];
    const cx_param *axes = &ps->p[CX_P_AXES];
    cx_dtype ty = out->desc.dtype;
    if (t->desc.dtype != ty || up->desc.dtype != ty || ix->desc.dtype != CX_S64)
        return cx_fail(st, CX_EINVAL, "cpu: %s expected target and updates of type %s, s64 indices",
                       cx_op_table[op].name, cx_dtype_name(ty));
    const int64_t *idx = ix->data;
    int64_t rows = 1, k = axes->n;
    for (int j = 0; j < ix->desc.rank - 1; j++) rows *= ix->desc.shape[j];
    if (cx_check_indices(op, &t->desc, idx, rows * k, axes->i, axes->n, st)) return st->code;
    if (out->numel == 0) return CX_OK;
    memcpy(out->data, t->data, out->nbytes);
    if (rows == 0) return CX_OK;

    /* target strides; the block of axes not indexed, with its strides in the target */
    int64_t tstr[CX_MAX_RANK], bshape[CX_MAX_RANK], bstr[CX_MAX_RANK], block = 1, s = 1;
    int brank = 0;
    bool used[CX_MAX_RANK] = {false};
    for (int a = t->desc.rank - 1; a >= 0; a--) {
        tstr[a] = s;
        s *= t->desc.shape[a];
    }
    for (int j = 0; j < k; j++) used[axes->i[j]] = true;
    for (int a = 0; a < t->desc.rank; a++)
        if (!used[a]) {
            bshape[brank] = t->desc.shape[a];
            bstr[brank++] = tstr[a];
            block *= t->desc.shape[a];
        }
    if (block == 0) return CX_OK;

    bool floats = cx_dtype_is_float(ty), add = op == CX_OP_INDEXED_ADD;
    size_t es = cx_dtype_size(ty);
    double *sum = NULL;
    uint8_t *touched = NULL;
    /* few updates into a large target (an embedding's gradient): the updates sorted by position
     * (then row order) and summed run by run, the same sums in the same order as the dense
     * arrays below, without a double and a flag per element of the target (a 1000 x 1000 f32
     * target with 500 updates spent most of its time on those arrays) */
    placed *list = NULL;
    int64_t updates = rows * block;
    if (add && floats && updates < out->numel / 8) {
        list = malloc(sizeof(placed) * (size_t)updates);
        if (!list)
            return cx_fail(st, CX_ENOMEM, "cpu: no memory for %s's sums", cx_op_table[op].name);
    } else if (add && floats) {
        sum = calloc((size_t)out->numel, sizeof(double));
        touched = calloc((size_t)out->numel, 1);
        if (!sum || !touched) {
            free(sum);
            free(touched);
            return cx_fail(st, CX_ENOMEM, "cpu: no memory for %s's sums", cx_op_table[op].name);
        }
    }
    for (int64_t r = 0; r < rows; r++) {
        int64_t base = 0, pos[CX_MAX_RANK] = {0}, off = 0;
        for (int j = 0; j < k; j++) base += idx[r * k + j] * tstr[axes->i[j]];
        for (int64_t e = 0; e < block; e++) {
            int64_t at = base + off, from = r * block + e;
            if (!add)
                memcpy((char *)out->data + (size_t)at * es,
                       (const char *)up->data + (size_t)from * es, es);
            else if (list) {
                list[from] = (placed){at, from};
            } else if (floats) {
                sum[at] += cpu_load_f64(ty, up->data, from);
                touched[at] = 1;
            } else {
                store_bits(out->data, at, es,
                           load_bits(out->data, at, es) + load_bits(up->data, from, es));
            }
            /* the next position of the block, odometer-wise */
            for (int d = brank - 1; d >= 0; d--) {
                off += bstr[d];
                if (++pos[d] < bshape[d]) break;
                off -= bstr[d] * bshape[d];
                pos[d] = 0;
            }
        }
    }
    if (list) {
        qsort(list, (size_t)updates, sizeof(placed), by_position);
        for (int64_t i = 0; i < updates;) {
            int64_t at = list[i].at;
            double s = 0;
            for (; i < updates && list[i].at == at; i++)
                s += cpu_load_f64(ty, up->data, list[i].from);
            cpu_store_f64(ty, out->data, at, cpu_load_f64(ty, t->data, at) + s);
        }
        free(list);
    }
    if (sum) {
        for (int64_t i = 0; i < out->numel; i++)
            if (touched[i]) cpu_store_f64(ty, out->data, i, cpu_load_f64(ty, t->data, i) + sum[i]);
        free(sum);
        free(touched);
    }
    return CX_OK;
}
