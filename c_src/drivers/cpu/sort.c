/* The SORT kind (sort, argsort) along one axis, as Nx: stable, ascending with NaN last or
 * descending with NaN first, -0.0 equal to 0.0.
 *
 * Each line along the axis is read into keys (floats as double, which holds every f16, bf16,
 * f32 and f64 value; u64 as uint64; the other integers as int64) and its positions 0..n-1 are
 * merge-sorted by key: runs of RUN sorted by insertion, then merged bottom-up. Both keep equal
 * keys in order, which makes the sort stable. sort then copies the elements (their bytes, so
 * every type and NaN payload moves unchanged) in that order; argsort writes the positions.
 *
 * argsort with k (Nx.top_k) writes the first k positions only. For a small k each line is read
 * once, keeping the best k positions so far in order: a position goes in only when it goes
 * strictly before the k-th kept one, and after the kept ones it equals, so the k kept are the
 * stable sort's first k. Most elements of a long line cost one comparison with the k-th; an
 * input in the worst order moves the kept ones for each element, which is why a large k sorts
 * instead. */
#include <stdlib.h>
#include <string.h>

#include "cpu_kernels.h"

#define RUN 16

/* Orders: LESS(x, y) is whether x goes strictly before y. */
#define ASC_F(x, y)  ((x) < (y) || ((y) != (y) && (x) == (x)))
#define DESC_F(x, y) ((x) > (y) || ((x) != (x) && (y) == (y)))
#define ASC_I(x, y)  ((x) < (y))
#define DESC_I(x, y) ((x) > (y))

#define SORTER(name, K, LESS)                                                                      \
    static void name(const K *key, int64_t *idx, int64_t *tmp, int64_t n) {                        \
        for (int64_t lo = 0; lo < n; lo += RUN) {                                                  \
            int64_t hi = lo + RUN < n ? lo + RUN : n;                                              \
            for (int64_t i = lo + 1; i < hi; i++) {                                                \
                int64_t v = idx[i], j = i;                                                         \
                for (; j > lo && LESS(key[v], key[idx[j - 1]]); j--) idx[j] = idx[j - 1];          \
                idx[j] = v;                                                                        \
            }                                                                                      \
        }                                                                                          \
        int64_t *src = idx, *dst = tmp;                                                            \
        for (int64_t w = RUN; w < n; w *= 2) {                                                     \
            for (int64_t lo = 0; lo < n; lo += 2 * w) {                                            \
                int64_t mid = lo + w < n ? lo + w : n, hi = lo + 2 * w < n ? lo + 2 * w : n;       \
                int64_t a = lo, b = mid, o = lo;                                                   \
                while (a < mid && b < hi)                                                          \
                    dst[o++] = LESS(key[src[b]], key[src[a]]) ? src[b++] : src[a++];               \
                while (a < mid) dst[o++] = src[a++];                                               \
                while (b < hi) dst[o++] = src[b++];                                                \
            }                                                                                      \
            int64_t *t = src;                                                                      \
            src = dst;                                                                             \
            dst = t;                                                                               \
        }                                                                                          \
        if (src != idx) memcpy(idx, src, sizeof(int64_t) * (size_t)n);                             \
    }

/* the best k positions of key[0..n) in order, into idx[0..k): a position that goes in is placed
 * by binary search after the kept ones it does not go strictly before (the kept are in order,
 * so that predicate is false and then true along them) */
#define SELECTOR(name, K, LESS)                                                                    \
    static void name(const K *key, int64_t *idx, int64_t n, int64_t k) {                           \
        int64_t m = 0;                                                                             \
        for (int64_t j = 0; j < n; j++) {                                                          \
            if (m == k && !LESS(key[j], key[idx[k - 1]])) continue;                                \
            int64_t end = m < k ? m : k - 1, lo = 0, hi = end;                                     \
            while (lo < hi) {                                                                      \
                int64_t mid = lo + (hi - lo) / 2;                                                  \
                if (LESS(key[j], key[idx[mid]]))                                                   \
                    hi = mid;                                                                      \
                else                                                                               \
                    lo = mid + 1;                                                                  \
            }                                                                                      \
            memmove(idx + lo + 1, idx + lo, sizeof(int64_t) * (size_t)(end - lo));                 \
            idx[lo] = j;                                                                           \
            if (m < k) m++;                                                                        \
        }                                                                                          \
    }

/* the largest k a line is selected for rather than sorted: an input in the worst order moves
 * up to k positions per element (one memmove), about what sorting the line costs at 256 */
#define SELECT_MAX 256

SELECTOR(select_f_asc, double, ASC_F)
SELECTOR(select_f_desc, double, DESC_F)
SELECTOR(select_i_asc, int64_t, ASC_I)
SELECTOR(select_i_desc, int64_t, DESC_I)
SELECTOR(select_u_asc, uint64_t, ASC_I)
SELECTOR(select_u_desc, uint64_t, DESC_I)

SORTER(sort_f_asc, double, ASC_F)
SORTER(sort_f_desc, double, DESC_F)
SORTER(sort_i_asc, int64_t, ASC_I)
SORTER(sort_i_desc, int64_t, DESC_I)
SORTER(sort_u_asc, uint64_t, ASC_I)
SORTER(sort_u_desc, uint64_t, DESC_I)

cx_code cpu_sort(cx_op_id op, const cx_tensor *in, const cx_params *ps, cx_tensor *out,
                 cx_status *st) {
    const cx_desc *d = &in->desc;
    if (in->numel == 0) return CX_OK;
    int axis = d->rank ? (int)ps->p[CX_P_AXIS].i[0] : 0;
    bool desc = ps->p[CX_P_DIRECTION].i[0] == 1, arg = op == CX_OP_ARGSORT;
    int64_t outer, n = d->rank ? d->shape[axis] : 1, inner;
    /* the positions written per line: k for argsort with k, else all */
    int64_t k = d->rank ? out->desc.shape[axis] : 1;
    bool select = arg && k < n && k <= SELECT_MAX;
    cpu_around_axis(d, axis, &outer, &inner);
    cx_dtype t = d->dtype;
    int kind = cx_dtype_is_float(t) ? 0 : t == CX_U64 ? 2 : 1;
    size_t es = cx_dtype_size(t), os = cx_dtype_size(out->desc.dtype);
    void *keys = malloc(8 * (size_t)n);
    int64_t *idx = malloc(sizeof(int64_t) * (size_t)n), *tmp = malloc(sizeof(int64_t) * (size_t)n);
    if (!keys || !idx || !tmp) {
        free(keys);
        free(idx);
        free(tmp);
        return cx_fail(st, CX_ENOMEM, "cpu: no memory to sort lines of %lld elements",
                       (long long)n);
    }
    for (int64_t o = 0; o < outer; o++)
        for (int64_t c = 0; c < inner; c++) {
            int64_t base = o * n * inner + c;
            for (int64_t j = 0; j < n; j++) {
                int64_t at = base + j * inner;
                idx[j] = j;
                if (kind == 0)
                    ((double *)keys)[j] = cpu_load_f64(t, in->data, at);
                else if (kind == 1)
                    ((int64_t *)keys)[j] = (int64_t)cpu_load_bits64(t, in->data, at);
                else
                    ((uint64_t *)keys)[j] = ((const uint64_t *)in->data)[at];
            }
            if (select) switch (kind * 2 + desc) {
                case 0: select_f_asc(keys, idx, n, k); break;
                case 1: select_f_desc(keys, idx, n, k); break;
                case 2: select_i_asc(keys, idx, n, k); break;
                case 3: select_i_desc(keys, idx, n, k); break;
                case 4: select_u_asc(keys, idx, n, k); break;
                default: select_u_desc(keys, idx, n, k); break;
                }
            else
                switch (kind * 2 + desc) {
                case 0: sort_f_asc(keys, idx, tmp, n); break;
                case 1: sort_f_desc(keys, idx, tmp, n); break;
                case 2: sort_i_asc(keys, idx, tmp, n); break;
                case 3: sort_i_desc(keys, idx, tmp, n); break;
                case 4: sort_u_asc(keys, idx, tmp, n); break;
                default: sort_u_desc(keys, idx, tmp, n); break;
                }
            char *o_bytes = out->data;
            const char *i_bytes = in->data;
            for (int64_t j = 0; j < k; j++) {
                int64_t put = (o * k + j) * inner + c; /* the output's line holds k */
                if (arg) /* the position's low bytes (little-endian): wraps into narrow types */
                    memcpy(o_bytes + (size_t)put * os, &idx[j], os);
                else
                    memcpy(o_bytes + (size_t)put * es,
                           i_bytes + (size_t)(base + idx[j] * inner) * es, es);
            }
        }
    free(keys);
    free(idx);
    free(tmp);
    return CX_OK;
}
