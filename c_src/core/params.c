#include "params.h"

#include <string.h>

const cx_param_info cx_param_table[CX_PARAM_COUNT] = {
#define CX_PARAM(id, name, kind) {name, CX_PK_##kind},
#include "params.def"
#undef CX_PARAM
};

void cx_params_copy(cx_params *dst, const cx_params *src) {
    cx_params_clear(dst);
    dst->set = src->set;
    for (uint64_t bits = src->set; bits; bits &= bits - 1) {
        int id = __builtin_ctzll(bits);
        const cx_param *p = &src->p[id];
        cx_param *q = &dst->p[id];
        q->n = p->n;
        q->is_int = p->is_int;
        q->f = p->f;
        int n = cx_param_ints(p);
        memcpy(q->i, p->i, sizeof(int64_t) * (size_t)(n ? n : 1));
    }
}

void cx_param_put_ints(cx_params *ps, cx_param_id id, const int64_t *v, int n) {
    cx_param *p = cx_param_put(ps, id);
    if (n > CX_MAX_PARAM_INTS) n = CX_MAX_PARAM_INTS;
    p->n = n;
    for (int k = 0; k < n; k++) p->i[k] = v[k];
}

void cx_param_put_int(cx_params *ps, cx_param_id id, int64_t v) {
    cx_param *p = cx_param_put(ps, id);
    p->n = 1;
    p->i[0] = v;
    p->f = (double)v;
    p->is_int = true;
}

void cx_param_put_float(cx_params *ps, cx_param_id id, double v) {
    cx_param *p = cx_param_put(ps, id);
    p->n = 1;
    p->f = v;
    p->i[0] = 0;
    p->is_int = false;
}

int cx_param_find(const char *name) {
    for (int k = 0; k < CX_PARAM_COUNT; k++)
        if (strcmp(cx_param_table[k].name, name) == 0) return k;
    return -1;
}
