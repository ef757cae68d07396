/* Programs: straight-line sequences of planned ops (program.h). */
#include "program.h"

#include "fused.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

static struct {
    pthread_mutex_t lock;
    struct cx_arena *newest, *oldest;
    size_t bytes;
    size_t cap;
} kept_blocks = {.lock = PTHREAD_MUTEX_INITIALIZER, .cap = CX_ARENA_IDLE_CAP};

size_t cx_program_arena_cap(size_t cap) {
    pthread_mutex_lock(&kept_blocks.lock);
    size_t old = kept_blocks.cap;
    kept_blocks.cap = cap;
    pthread_mutex_unlock(&kept_blocks.lock);
    return old;
}

size_t cx_program_idle_arena_bytes(void) {
    pthread_mutex_lock(&kept_blocks.lock);
    size_t n = kept_blocks.bytes;
    pthread_mutex_unlock(&kept_blocks.lock);
    return n;
}

/* Takes a's block off the list (under the lock); NULL when it keeps none. */
static cx_tensor *unlist(struct cx_arena *a) {
    cx_tensor *block = a->kept;
    if (!block) return NULL;
    if (a->prev)
        a->prev->next = a->next;
    else
        kept_blocks.newest = a->next;
    if (a->next)
        a->next->prev = a->prev;
    else
        kept_blocks.oldest = a->prev;
    a->prev = a->next = NULL;
    a->kept = NULL;
    kept_blocks.bytes -= a->bytes;
    return block;
}

cx_code cx_program_init(cx_program *p, cx_device *dev, const cx_desc *inputs, int n_inputs,
                        const cx_desc *consts, int n_consts, cx_status *st) {
    memset(p, 0, sizeof *p);
    p->dev = dev;
    if (!dev) return cx_fail(st, CX_EINVAL, "program: no device given");
    if (n_inputs < 0 || n_consts < 0) return cx_fail(st, CX_EINVAL, "program: bad slot counts");
    int n = n_inputs + n_consts;
    p->desc = malloc(sizeof(cx_desc) * (size_t)(n > 0 ? n : 1));
    if (!p->desc) return cx_fail(st, CX_ENOMEM, "program: out of host memory");
    for (int k = 0; k < n_inputs; k++) p->desc[k] = inputs[k];
    for (int k = 0; k < n_consts; k++) p->desc[n_inputs + k] = consts[k];
    p->n_inputs = n_inputs;
    p->n_consts = n_consts;
    p->n_slots = n;
    return CX_OK;
}

int cx_program_add(cx_program *p, cx_op_id op, const int *in, int n_in, const cx_params *ps,
                   cx_status *st) {
    if (p->done) return cx_fail(st, CX_EINVAL, "program: already finished"), -1;
    if (n_in < 0 || n_in > CX_MAX_INPUTS)
        return cx_fail(st, CX_EINVAL, "program: a step takes at most %d values", CX_MAX_INPUTS), -1;
    if ((int)op < 0 || (int)op >= CX_OP_COUNT)
        return cx_fail(st, CX_EINVAL, "program: unknown op"), -1;
    if (p->n_steps == p->cap) {
        int cap = p->cap ? 2 * p->cap : 16;
        cx_prog_step *steps = realloc(p->steps, sizeof *steps * (size_t)cap);
        if (!steps) return cx_fail(st, CX_ENOMEM, "program: out of host memory"), -1;
        p->steps = steps;
        cx_desc *desc = realloc(p->desc, sizeof *desc * (size_t)(p->n_inputs + p->n_consts + cap));
        if (!desc) return cx_fail(st, CX_ENOMEM, "program: out of host memory"), -1;
        p->desc = desc;
        p->cap = cap;
    }
    cx_prog_step *s = &p->steps[p->n_steps];
    memset(s, 0, sizeof *s);
    cx_desc descs[CX_MAX_INPUTS];
    for (int k = 0; k < n_in; k++) {
        if (in[k] < 0 || in[k] >= p->n_slots)
            return cx_fail(st, CX_EINVAL, "program: %s reads slot %d, which is not yet written",
                           cx_op_table[op].name, in[k]),
                   -1;
        descs[k] = p->desc[in[k]];
    }
    s->ps = *ps;
    if (cx_plan_descs(op, p->dev, descs, n_in, &s->ps, &s->plan, st) != CX_OK) return -1;
    s->in = malloc(sizeof(int) * (size_t)(n_in > 0 ? n_in : 1));
    if (!s->in) return cx_fail(st, CX_ENOMEM, "program: out of host memory"), -1;
    memcpy(s->in, in, sizeof(int) * (size_t)n_in);
    s->n_in = n_in;
    p->cost += s->plan.cost;
    p->desc[p->n_slots] = s->plan.out;
    p->n_steps++;
    return p->n_slots++;
}

/* How many live steps read `slot`. */
static int readers(const cx_program *p, int slot) {
    int n = 0;
    for (int k = 0; k < p->n_steps; k++)
        if (!p->steps[k].dead)
            for (int j = 0; j < p->steps[k].n_in; j++) n += p->steps[k].in[j] == slot;
    return n;
}

static bool returned(const int *out, int n_out, int slot) {
    for (int k = 0; k < n_out; k++)
        if (out[k] == slot) return true;
    return false;
}

/* transpose(dot(a, b)) with no batch axes, where the permutation puts b's free axes before a's,
 * is dot(b, a): one GEMM writing the result in the order wanted instead of a GEMM and a copy
 * (Nx's gradient of a dot ends in such a transpose). Only when nothing else reads the dot. */
static void fold_transposed_dots(cx_program *p, const int *out, int n_out) {
    int first = p->n_inputs + p->n_consts;
    for (int k = 0; k < p->n_steps; k++) {
        cx_prog_step *t = &p->steps[k];
        if (t->dead || t->plan.op != CX_OP_TRANSPOSE || t->plan.route != CX_ROUTE_NATIVE ||
            t->in[0] < first)
            continue;
        cx_prog_step *d = &p->steps[t->in[0] - first];
        if (d->dead || d->plan.op != CX_OP_DOT || readers(p, t->in[0]) != 1 ||
            returned(out, n_out, t->in[0]))
            continue;
        const cx_param *ca = &d->ps.p[CX_P_CONTRACT_A], *cb = &d->ps.p[CX_P_CONTRACT_B];
        if (d->ps.p[CX_P_BATCH_A].n != 0 || d->ps.p[CX_P_BATCH_B].n != 0) continue;
        int ra = p->desc[d->in[0]].rank - ca->n, rb = p->desc[d->in[1]].rank - cb->n;
        const cx_param *perm = &t->ps.p[CX_P_AXES];
        bool swap = perm->n == ra + rb;
        for (int j = 0; swap && j < rb; j++) swap = perm->i[j] == ra + j;
        for (int j = 0; swap && j < ra; j++) swap = perm->i[rb + j] == j;
        if (!swap || ra + rb == 0) continue;
        cx_params ps = {0};
        cx_param_put_ints(&ps, CX_P_CONTRACT_A, cb->i, cb->n);
        cx_param_put_ints(&ps, CX_P_CONTRACT_B, ca->i, ca->n);
        cx_param_put_ints(&ps, CX_P_BATCH_A, NULL, 0);
        cx_param_put_ints(&ps, CX_P_BATCH_B, NULL, 0);
        cx_desc in[2] = {p->desc[d->in[1]], p->desc[d->in[0]]};
        cx_plan plan;
        cx_status st = {CX_OK, ""};
        if (cx_plan_descs(CX_OP_DOT, p->dev, in, 2, &ps, &plan, &st) != CX_OK ||
            plan.route != CX_ROUTE_NATIVE || plan.out.dtype != t->plan.out.dtype ||
            !cx_desc_same_shape(&plan.out, &t->plan.out))
            continue;
        int *reads = realloc(t->in, sizeof(int) * 2);
        if (!reads) continue;
        reads[0] = d->in[1];
        reads[1] = d->in[0];
        t->in = reads;
        t->n_in = 2;
        t->ps = ps;
        p->cost += plan.cost - t->plan.cost - d->plan.cost;
        t->plan = plan;
        d->dead = true;
    }
}

/* An as_type to the type its input already has is that input: its readers read the input and
 * the step goes (it would copy the value on every run: ONNX's Resize and pooling end in one).
 * Not when the program returns it: a result is a step's own value. */
static void fold_identity_casts(cx_program *p, const int *out, int n_out) {
    int first = p->n_inputs + p->n_consts;
    for (int k = 0; k < p->n_steps; k++) {
        cx_prog_step *s = &p->steps[k];
        if (s->dead || s->plan.op != CX_OP_AS_TYPE || s->n_in != 1) continue;
        int src = s->in[0], slot = first + k;
        const cx_desc *d = &p->desc[src];
        if (d->dtype != s->plan.out.dtype || !cx_desc_same_shape(d, &s->plan.out) ||
            returned(out, n_out, slot))
            continue;
        for (int j = k + 1; j < p->n_steps; j++)
            for (int i = 0; i < p->steps[j].n_in; i++)
                if (p->steps[j].in[i] == slot) p->steps[j].in[i] = src;
        p->cost -= s->plan.cost;
        s->dead = true;
    }
}

/* Whether the device runs a fused chain that reads a row natively (add of a {3} to a {2, 3}),
 * or with `channel` a channel vector (add of a {3, 1} to a {2, 3, 4}). */
static bool fuses_broadcast(cx_device *dev, bool channel) {
    cx_desc in[2] = {{CX_F32, 2, {2, 3}}, {CX_F32, 1, {3}}};
    if (channel) {
        in[0] = (cx_desc){CX_F32, 3, {2, 3, 4}};
        in[1] = (cx_desc){CX_F32, 2, {3, 1}};
    }
    const int64_t code[3] = {CX_OP_ADD, 0, 1};
    cx_params ps = {0};
    cx_param_put_ints(&ps, CX_P_CODE, code, 3);
    cx_plan plan;
    cx_status st = {CX_OK, ""};
    return cx_plan_descs(CX_OP_FUSED, dev, in, 2, &ps, &plan, &st) == CX_OK &&
           plan.route == CX_ROUTE_NATIVE;
}

/* Whether step k can be an instruction of a fused chain: an elementwise op of f32, f16 or bf16
 * whose inputs have its result's type and shape, are rows or channel vectors of it (a bias,
 * where the device fuses those) or are numbers. */
static bool fusible(const cx_program *p, int k, bool rows, bool channels) {
    const cx_prog_step *s = &p->steps[k];
    const cx_desc *o = &s->plan.out;
    if (s->dead || !cx_fused_type_ok(o->dtype) || o->rank == 0 ||
        !cx_fused_op_ok(s->plan.op, s->n_in))
        return false;
    for (int j = 0; j < s->n_in; j++) {
        const cx_desc *d = &p->desc[s->in[j]];
        if (d->dtype != o->dtype ||
            (d->rank > 0 && !cx_desc_same_shape(d, o) && !(rows && cx_fused_is_row(d, o)) &&
             !(channels && cx_fused_is_channel(d, o, NULL))))
            return false;
    }
    return true;
}

/* A tree of fusible steps whose root is its last step: every other member's result is read
 * only by a member, once. */
typedef struct {
    int n;
    int step[CX_FUSED_MAX_CODE]; /* in program order */
} fuse_group;

/* The external inputs of group g (distinct slots) and its code; false when there are too many. */
static bool group_code(const cx_program *p, const fuse_group *g, int *ext, int *n_ext,
                       int64_t *code) {
    enum { MEMBER = 1 << 20 }; /* member q's result, until the inputs are counted */
    int first = p->n_inputs + p->n_consts;
    *n_ext = 0;
    for (int m = 0; m < g->n; m++) {
        const cx_prog_step *s = &p->steps[g->step[m]];
        int64_t reg[2] = {-1, -1};
        for (int j = 0; j < s->n_in; j++) {
            int slot = s->in[j], found = -1;
            for (int q = 0; q < m; q++)
                if (first + g->step[q] == slot) found = MEMBER + q;
            for (int e = 0; found < 0 && e < *n_ext; e++)
                if (ext[e] == slot) found = e;
            if (found < 0) {
                if (*n_ext == CX_FUSED_MAX_INPUTS) return false;
                found = (*n_ext)++;
                ext[found] = slot;
            }
            reg[j] = found;
        }
        code[3 * m] = s->plan.op;
        code[3 * m + 1] = reg[0];
        code[3 * m + 2] = reg[1];
    }
    for (int m = 0; m < g->n; m++)
        for (int j = 1; j < 3; j++)
            if (code[3 * m + j] >= MEMBER) code[3 * m + j] = *n_ext + (code[3 * m + j] - MEMBER);
    return true;
}

/* The step that sums step k's result, when that sum is its only reader and k's result is not
 * returned: the chain ending at k can run with the sum at its end (fused's reduce). -1 if none. */
static int sum_reader(const cx_program *p, int k, const int *out, int n_out) {
    int slot = p->n_inputs + p->n_consts + k;
    if (readers(p, slot) != 1 || returned(out, n_out, slot)) return -1;
    for (int j = k + 1; j < p->n_steps; j++) {
        const cx_prog_step *s = &p->steps[j];
        if (!s->dead && s->plan.op == CX_OP_SUM && s->n_in == 1 && s->in[0] == slot &&
            s->plan.out.dtype == CX_F32)
            return j;
    }
    return -1;
}

/* Chains of elementwise f32 ops whose intermediates nothing else reads become one fused step,
 * where the device runs fused natively (one pass over memory instead of one per op); a sum
 * that is the chain's only reader joins it where the device runs that too. */
static void fuse_elementwise(cx_program *p, const int *out, int n_out) {
    int first = p->n_inputs + p->n_consts;
    fuse_group *groups = calloc((size_t)(p->n_steps > 0 ? p->n_steps : 1), sizeof *groups);
    if (!groups) return;
    bool rows = fuses_broadcast(p->dev, false), channels = fuses_broadcast(p->dev, true);
    for (int k = 0; k < p->n_steps; k++) {
        if (!fusible(p, k, rows, channels)) continue;
        fuse_group *g = &groups[k];
        /* the members of each operand's group come first, in program order */
        fuse_group merged = {0};
        const cx_prog_step *s = &p->steps[k];
        for (int j = 0; j < s->n_in; j++) {
            int slot = s->in[j];
            if (slot < first) continue;
            int d = slot - first;
            fuse_group *h = &groups[d];
            /* a member computing on rows alone keeps its own step: every member of a chain has
             * the chain's shape */
            if (h->n <= 0 || readers(p, slot) != 1 || returned(out, n_out, slot) ||
                merged.n + h->n + 1 > CX_FUSED_MAX_CODE ||
                !cx_desc_same_shape(&p->steps[d].plan.out, &s->plan.out))
                continue;
            for (int q = 0; q < h->n; q++) merged.step[merged.n++] = h->step[q];
            h->n = -1; /* taken */
        }
        /* program order keeps every member after what it reads */
        for (int a = 1; a < merged.n; a++)
            for (int b = a; b > 0 && merged.step[b - 1] > merged.step[b]; b--) {
                int t = merged.step[b];
                merged.step[b] = merged.step[b - 1];
                merged.step[b - 1] = t;
            }
        merged.step[merged.n++] = k;
        *g = merged;
    }
    for (int k = 0; k < p->n_steps; k++) {
        fuse_group *g = &groups[k];
        if (g->n < 1) continue;
        int sum = sum_reader(p, k, out, n_out);
        if (sum < 0 && g->n < 2) continue;
        int ext[CX_FUSED_MAX_INPUTS], n_ext;
        int64_t code[3 * CX_FUSED_MAX_CODE];
        if (!group_code(p, g, ext, &n_ext, code)) continue;
        cx_desc in[CX_FUSED_MAX_INPUTS];
        for (int e = 0; e < n_ext; e++) in[e] = p->desc[ext[e]];
        /* with the sum after it, where the device runs that too; else the chain alone */
        for (int with_sum = sum >= 0; with_sum >= 0; with_sum--) {
            if (!with_sum && g->n < 2) break;
            cx_params ps = {0};
            cx_param_put_ints(&ps, CX_P_CODE, code, 3 * g->n);
            if (with_sum) {
                const cx_params *sp = &p->steps[sum].ps;
                cx_param_put_int(&ps, CX_P_REDUCE, 1);
                cx_param_put_ints(&ps, CX_P_AXES, sp->p[CX_P_AXES].i, sp->p[CX_P_AXES].n);
                cx_param_put_int(&ps, CX_P_KEEP_AXES, sp->p[CX_P_KEEP_AXES].i[0]);
            }
            cx_plan plan;
            cx_status st = {CX_OK, ""};
            if (cx_plan_descs(CX_OP_FUSED, p->dev, in, n_ext, &ps, &plan, &st) != CX_OK ||
                plan.route != CX_ROUTE_NATIVE)
                continue;
            cx_prog_step *root = &p->steps[with_sum ? sum : k];
            int *reads = realloc(root->in, sizeof(int) * (size_t)n_ext);
            if (!reads) break;
            memcpy(reads, ext, sizeof(int) * (size_t)n_ext);
            root->in = reads;
            root->n_in = n_ext;
            for (int m = 0; m < g->n; m++) {
                if (!with_sum && m == g->n - 1) break; /* the root itself */
                p->cost -= p->steps[g->step[m]].plan.cost;
                p->steps[g->step[m]].dead = true;
            }
            p->cost += plan.cost - root->plan.cost;
            root->ps = ps;
            root->plan = plan;
            break;
        }
    }
    free(groups);
}

/* Step s as a chain of elementwise instructions on its own inputs (its code into `code`, how
 * many integers into *n_ints): a native fused step without a sum, or an elementwise op a chain
 * may hold as one instruction. False for any other step. */
static bool step_chain(const cx_prog_step *s, int64_t *code, int *n_ints) {
    if (s->dead || s->plan.route != CX_ROUTE_NATIVE || !cx_fused_type_ok(s->plan.out.dtype) ||
        s->n_in > CX_FUSED_MAX_INPUTS)
        return false;
    if (s->plan.op == CX_OP_FUSED) {
        const cx_param *reduce = cx_param_get(&s->ps, CX_P_REDUCE),
                       *c = cx_param_get(&s->ps, CX_P_CODE);
        if ((reduce && reduce->i[0]) || !c || c->n > 3 * CX_FUSED_MAX_CODE) return false;
        memcpy(code, c->i, sizeof(int64_t) * (size_t)c->n);
        *n_ints = c->n;
        return true;
    }
    if (!cx_fused_op_ok(s->plan.op, s->n_in)) return false; /* (arity 1 or 2) */
    code[0] = s->plan.op;
    code[1] = 0;
    code[2] = s->n_in == 2 ? 1 : -1;
    *n_ints = 3;
    return true;
}

/* Tries to fold chain step j into step k, which makes j's input `at` and has nothing else
 * reading it: where the device runs k's op with the chain as its epilogue
 * (driver.h), step j becomes k's op on k's inputs and j's other inputs, with the chain in its
 * EPILOGUE parameter, and k is dropped. j runs where it ran, so every input is made by then. */
static bool fold_epilogue(cx_program *p, int j, int k, int at, const int64_t *code, int n_ints) {
    cx_prog_step *f = &p->steps[j], *s = &p->steps[k];
    const cx_desc *o = &f->plan.out;
    int n_op = s->n_in, n_in = s->n_in + f->n_in - 1;
    if (s->dead || s->plan.route != CX_ROUTE_NATIVE || s->plan.op == CX_OP_FUSED ||
        n_in > CX_MAX_INPUTS || s->plan.out.dtype != o->dtype ||
        !cx_desc_same_shape(&s->plan.out, o))
        return false;
    int *reads = malloc(sizeof(int) * (size_t)n_in);
    cx_desc *descs = malloc(sizeof(cx_desc) * (size_t)n_in);
    cx_params *ps = malloc(sizeof *ps);
    bool ok = reads && descs && ps;
    /* the chain's values: k's result first, then j's other inputs in their order */
    int map[CX_FUSED_MAX_INPUTS];
    for (int i = 0, e = 1; ok && i < f->n_in; i++) {
        map[i] = i == at ? 0 : e++;
        if (i == at) continue;
        ok = p->desc[f->in[i]].dtype == o->dtype && cx_fused_broadcasts(&p->desc[f->in[i]], o);
        reads[n_op + map[i] - 1] = f->in[i];
    }
    for (int i = 0; ok && i < n_op; i++) reads[i] = s->in[i];
    for (int i = 0; ok && i < n_in; i++) descs[i] = p->desc[reads[i]];
    int64_t epi[CX_MAX_PARAM_INTS];
    for (int q = 0; ok && q < n_ints; q++)
        epi[q] = q % 3 == 0 || code[q] < 0 || code[q] >= f->n_in ? code[q] : map[code[q]];
    if (ok) {
        *ps = s->ps;
        cx_param_put_ints(ps, CX_P_EPILOGUE, epi, n_ints);
        ok = p->dev->driver->epilogue(p->dev->ctx, s->plan.op, descs, n_op, n_in, o, ps);
    }
    if (ok) {
        cx_plan plan = s->plan;
        for (int i = n_op; i < n_in; i++) plan.compute[i] = descs[i].dtype;
        plan.cost += f->plan.cost;
        free(f->in);
        f->in = reads;
        f->n_in = n_in;
        f->ps = *ps;
        f->plan = plan;
        s->dead = true;
        reads = NULL;
    }
    free(reads);
    free(descs);
    free(ps);
    return ok;
}

/* A chain of elementwise ops (a fused step, or one op) whose full input is the result of an op
 * that nothing else reads -- a convolution's bias and activation -- runs as that op's epilogue
 * where the device runs it so: one step instead of two, and the chain on each
 * block of the result while it is in cache instead of in a pass of its own. Of several such
 * inputs, the one made last. */
static void fold_epilogues(cx_program *p, const int *out, int n_out) {
    if (!p->dev->driver->epilogue) return;
    int first = p->n_inputs + p->n_consts;
    for (int j = 0; j < p->n_steps; j++) {
        int64_t code[3 * CX_FUSED_MAX_CODE];
        int n_ints;
        if (!step_chain(&p->steps[j], code, &n_ints)) continue;
        /* j's inputs that a step makes for j alone, the one made last first */
        int tried = INT32_MAX;
        for (;;) {
            const cx_prog_step *f = &p->steps[j];
            int at = -1;
            for (int i = 0; i < f->n_in; i++) {
                int slot = f->in[i];
                if (slot < first || slot >= tried || (at >= 0 && slot <= f->in[at]) ||
                    readers(p, slot) != 1 || returned(out, n_out, slot))
                    continue;
                at = i;
            }
            if (at < 0 || fold_epilogue(p, j, f->in[at] - first, at, code, n_ints)) break;
            tried = f->in[at];
        }
    }
}

cx_code cx_program_donate(cx_program *p, const int *inputs, int n, cx_status *st) {
    if (p->done) return cx_fail(st, CX_EINVAL, "program: already finished");
    if (!p->donated && n > 0 && !(p->donated = calloc((size_t)p->n_inputs, sizeof(bool))))
        return cx_fail(st, CX_ENOMEM, "program: out of host memory");
    for (int k = 0; k < n; k++) {
        if (inputs[k] < 0 || inputs[k] >= p->n_inputs)
            return cx_fail(st, CX_EINVAL, "program: donated slot %d is not an input", inputs[k]);
        p->donated[inputs[k]] = true;
    }
    return CX_OK;
}

/* Whether step s can write its result into the buffer of an input of description d that it
 * reads: an elementwise op run natively, whose result is of d's type and shape. */
static bool writes_in_place(const cx_prog_step *s, const cx_desc *d) {
    cx_op_kind kind = cx_op_table[s->plan.op].kind;
    bool elementwise = kind == CX_KIND_UNARY || kind == CX_KIND_UNARY_FLOAT ||
                       kind == CX_KIND_BINARY || kind == CX_KIND_BINARY_FLOAT ||
                       (s->plan.op == CX_OP_FUSED && !s->ps.p[CX_P_REDUCE].i[0]);
    return elementwise && s->plan.route == CX_ROUTE_NATIVE && s->plan.out.dtype == d->dtype &&
           cx_desc_same_shape(&s->plan.out, d);
}

/* Each donated input's last reader writes into its buffer where it can (cx_program_donate). */
static void alias_donated(cx_program *p) {
    for (int v = 0; p->donated && v < p->n_inputs; v++) {
        if (!p->donated[v]) continue;
        int last = -1;
        for (int k = 0; k < p->n_steps; k++)
            for (int j = 0; j < p->steps[k].n_in && !p->steps[k].dead; j++)
                if (p->steps[k].in[j] == v) last = k;
        if (last >= 0 && !p->steps[last].alias && writes_in_place(&p->steps[last], &p->desc[v]))
            p->steps[last].alias = v + 1;
    }
}

/* ---- the arena (program.h) ---------------------------------------------------------------- */

#define ARENA_ALIGN 64

typedef struct {
    int step;
    int from, to; /* steps: written by `from`, last read by `to` */
    size_t bytes;
    int64_t at;
} arena_value;

static int larger_first(const void *a, const void *b) {
    const arena_value *x = a, *y = b;
    if (x->bytes != y->bytes) return x->bytes < y->bytes ? 1 : -1;
    return x->step - y->step;
}

static int by_offset(const void *a, const void *b) {
    const arena_value *x = *(const arena_value *const *)a, *y = *(const arena_value *const *)b;
    return x->at < y->at ? -1 : x->at > y->at;
}

/* Whether step k's result goes to the arena: a native step (its driver writes into a buffer it
 * is given) whose result the program neither returns nor writes into a donated input. */
static bool in_arena(const cx_program *p, int k, const int *last) {
    const cx_prog_step *s = &p->steps[k];
    return !s->dead && last[k] >= 0 && s->plan.route == CX_ROUTE_NATIVE && !s->alias &&
           cx_desc_numel(&s->plan.out) > 0;
}

/* Places the values largest first, each at the lowest offset where it meets no value placed
 * before whose life overlaps its own (the greedy-by-size plan of TFLite's arena planner). */
static cx_code plan_arena(cx_program *p, const int *last, cx_status *st) {
    free(p->offset); /* a finish that failed before may have left them */
    free(p->arena);
    p->offset = NULL;
    p->arena = NULL;
    if (!p->dev->props.host_memory || p->n_steps == 0) return CX_OK;
    int n = 0;
    for (int k = 0; k < p->n_steps; k++) n += in_arena(p, k, last);
    if (n < 2) return CX_OK; /* nothing to share */
    arena_value *vs = malloc(sizeof *vs * (size_t)n);
    arena_value **live = malloc(sizeof *live * (size_t)n);
    p->offset = malloc(sizeof(int64_t) * (size_t)p->n_steps);
    p->arena = calloc(1, sizeof *p->arena);
    if (!vs || !live || !p->offset || !p->arena) {
        free(vs);
        free(live);
        return cx_fail(st, CX_ENOMEM, "program: out of host memory");
    }
    n = 0;
    for (int k = 0; k < p->n_steps; k++) {
        p->offset[k] = -1;
        if (!in_arena(p, k, last)) continue;
        size_t bytes = (size_t)cx_desc_numel(&p->steps[k].plan.out) *
                       cx_dtype_size(p->steps[k].plan.out.dtype);
        vs[n++] =
            (arena_value){k, k, last[k], (bytes + ARENA_ALIGN - 1) & ~(size_t)(ARENA_ALIGN - 1), 0};
    }
    qsort(vs, (size_t)n, sizeof *vs, larger_first);
    size_t total = 0;
    for (int i = 0; i < n; i++) {
        int m = 0;
        for (int j = 0; j < i; j++)
            if (vs[j].from <= vs[i].to && vs[i].from <= vs[j].to) live[m++] = &vs[j];
        qsort(live, (size_t)m, sizeof *live, by_offset);
        int64_t at = 0;
        for (int j = 0; j < m; j++) {
            if (live[j]->at - at >= (int64_t)vs[i].bytes) break;
            int64_t end = live[j]->at + (int64_t)live[j]->bytes;
            if (end > at) at = end;
        }
        vs[i].at = at;
        p->offset[vs[i].step] = at;
        if ((size_t)at + vs[i].bytes > total) total = (size_t)at + vs[i].bytes;
    }
    free(vs);
    free(live);
    p->arena->bytes = total;
    return CX_OK;
}

/* The block for a run: the one kept, or a new one; NULL when none can be had (the steps then
 * take buffers of their own). */
static cx_tensor *arena_take(const cx_program *p) {
    if (!p->arena) return NULL;
    pthread_mutex_lock(&kept_blocks.lock);
    cx_tensor *a = unlist(p->arena);
    pthread_mutex_unlock(&kept_blocks.lock);
    if (a) return a;
    cx_status st = {0};
    cx_desc d = {.dtype = CX_U8, .rank = 1, .shape = {(int64_t)p->arena->bytes}};
    if (!(a = malloc(sizeof *a))) return NULL;
    if (cx_tensor_init(a, p->dev, &d, &st) != CX_OK) {
        free(a);
        return NULL;
    }
    return a;
}

static void arena_drop(cx_tensor *a) {
    cx_tensor_free(a);
    free(a);
}

/* Keeps the block for the next run, first on the list, the blocks kept longest ago freed while
 * the list holds more than the cap (each outside the lock); a block above the cap by itself, or
 * given back while the program keeps another (a run in another thread made it), is freed. */
static void arena_give_back(const cx_program *p, cx_tensor *a) {
    if (!a) return;
    struct cx_arena *r = p->arena;
    pthread_mutex_lock(&kept_blocks.lock);
    bool keep = r->bytes <= kept_blocks.cap && !r->kept;
    if (keep) {
        r->kept = a;
        r->next = kept_blocks.newest;
        if (r->next)
            r->next->prev = r;
        else
            kept_blocks.oldest = r;
        kept_blocks.newest = r;
        kept_blocks.bytes += r->bytes;
    }
    for (;;) {
        cx_tensor *old = kept_blocks.bytes > kept_blocks.cap && kept_blocks.oldest != r
                             ? unlist(kept_blocks.oldest)
                             : NULL;
        pthread_mutex_unlock(&kept_blocks.lock);
        if (!old) break;
        arena_drop(old);
        pthread_mutex_lock(&kept_blocks.lock);
    }
    if (!keep) arena_drop(a);
}

cx_code cx_program_finish(cx_program *p, const int *out, int n_out, cx_status *st) {
    int first = p->n_inputs + p->n_consts;
    if (p->done) return cx_fail(st, CX_EINVAL, "program: already finished");
    /* the last step reading each step slot; -1 when none (a result only, or unused) */
    int *last = malloc(sizeof(int) * (size_t)(p->n_steps > 0 ? p->n_steps : 1));
    free(p->out); /* a finish that failed before may have left one */
    p->out = malloc(sizeof(int) * (size_t)(n_out > 0 ? n_out : 1));
    p->n_out = 0;
    if (!last || !p->out) {
        free(last);
        return cx_fail(st, CX_ENOMEM, "program: out of host memory");
    }
    for (int k = 0; k < p->n_steps; k++) last[k] = -1;
    for (int k = 0; k < n_out; k++) {
        if (out[k] < first || out[k] >= p->n_slots) {
            free(last);
            return cx_fail(st, CX_EINVAL, "program: result %d is slot %d, not a step's", k, out[k]);
        }
        for (int j = 0; j < k; j++)
            if (out[j] == out[k]) {
                free(last);
                return cx_fail(st, CX_EINVAL, "program: slot %d returned twice", out[k]);
            }
        p->out[k] = out[k];
    }
    p->n_out = n_out;
    fold_identity_casts(p, out, n_out);
    fold_transposed_dots(p, out, n_out);
    fuse_elementwise(p, out, n_out);
    fold_epilogues(p, out, n_out);
    for (int k = 0; k < p->n_steps; k++)
        for (int j = 0; j < p->steps[k].n_in && !p->steps[k].dead; j++)
            if (p->steps[k].in[j] >= first) last[p->steps[k].in[j] - first] = k;
    /* results live on; an unread intermediate dies right after the step that wrote it */
    for (int k = 0; k < n_out; k++) last[out[k] - first] = -2;
    for (int k = 0; k < p->n_steps; k++)
        if (last[k] == -1) last[k] = k;
    for (int k = 0; k < p->n_steps; k++) {
        if (last[k] < 0 || p->steps[k].dead) continue;
        cx_prog_step *s = &p->steps[last[k]];
        int *drop = realloc(s->drop, sizeof(int) * (size_t)(s->n_drop + 1));
        if (!drop) {
            free(last);
            return cx_fail(st, CX_ENOMEM, "program: out of host memory");
        }
        s->drop = drop;
        s->drop[s->n_drop++] = first + k;
    }
    alias_donated(p);
    cx_code rc = plan_arena(p, last, st);
    free(last);
    if (rc != CX_OK) return rc;
    p->done = true;
    return CX_OK;
}

static cx_code check_value(const cx_program *p, const char *what, int k, const cx_tensor *t,
                           const cx_desc *want, cx_status *st) {
    if (t->device != p->dev)
        return cx_fail(st, CX_EINVAL, "program: %s %d lives on %s, the program runs on %s", what, k,
                       t->device->name, p->dev->name);
    if (t->desc.dtype != want->dtype || !cx_desc_same_shape(&t->desc, want))
        return cx_fail(st, CX_EINVAL,
                       "program: %s %d is not of the type and shape the program was built for",
                       what, k);
    return CX_OK;
}

cx_code cx_program_run(const cx_program *p, cx_tensor *const *inputs, cx_tensor *const *consts,
                       cx_tensor *out, cx_status *st) {
    for (int k = 0; k < p->n_out; k++) cx_tensor_clear(&out[k]);
    if (!p->done) return cx_fail(st, CX_EINVAL, "program: not finished");
    for (int k = 0; k < p->n_inputs; k++)
        if (check_value(p, "input", k, inputs[k], &p->desc[k], st) != CX_OK) return st->code;
    for (int k = 0; k < p->n_consts; k++)
        if (check_value(p, "constant", k, consts[k], &p->desc[p->n_inputs + k], st) != CX_OK)
            return st->code;
    int first = p->n_inputs + p->n_consts;
    cx_tensor *vals = malloc(sizeof(cx_tensor) * (size_t)(p->n_steps > 0 ? p->n_steps : 1));
    if (!vals) return cx_fail(st, CX_ENOMEM, "program: out of host memory");
    for (int k = 0; k < p->n_steps; k++) cx_tensor_clear(&vals[k]);
    cx_tensor *arena = arena_take(p);
    cx_code rc = CX_OK;
    for (int k = 0; k < p->n_steps && rc == CX_OK; k++) {
        const cx_prog_step *s = &p->steps[k];
        if (s->dead) continue;
        cx_tensor *in_small[8], **in = in_small;
        if (s->n_in > 8 && !(in = malloc(sizeof(cx_tensor *) * (size_t)s->n_in))) {
            rc = cx_fail(st, CX_ENOMEM, "program: out of host memory");
            break;
        }
        for (int j = 0; j < s->n_in; j++) {
            int v = s->in[j];
            in[j] = v < p->n_inputs ? inputs[v]
                    : v < first     ? consts[v - p->n_inputs]
                                    : &vals[v - first];
        }
        /* a donated input's buffer: taken when no other input or constant is the same tensor
         * and nothing pins it; the step then reads it through its result */
        int d = s->alias - 1;
        bool into = d >= 0;
        for (int u = 0; into && u < p->n_inputs; u++) into = u == d || inputs[u] != inputs[d];
        for (int u = 0; into && u < p->n_consts; u++) into = consts[u] != inputs[d];
        if (into && cx_tensor_take(inputs[d], &vals[k])) {
            for (int j = 0; j < s->n_in; j++)
                if (s->in[j] == d) in[j] = &vals[k];
            rc = cx_run_plan_into(&s->plan, in, s->n_in, &s->ps, &vals[k], st);
        } else if (arena && p->offset[k] >= 0) {
            cx_tensor_borrow(&vals[k], p->dev, &s->plan.out, (char *)arena->data + p->offset[k]);
            rc = cx_run_plan_into(&s->plan, in, s->n_in, &s->ps, &vals[k], st);
        } else {
            rc = cx_run_plan(&s->plan, in, s->n_in, &s->ps, &vals[k], st);
        }
        if (in != in_small) free(in);
        for (int j = 0; j < s->n_drop; j++) cx_tensor_free(&vals[s->drop[j] - first]);
    }
    if (rc == CX_OK)
        for (int k = 0; k < p->n_out; k++) {
            memcpy(&out[k], &vals[p->out[k] - first], sizeof(cx_tensor));
            cx_tensor_clear(&vals[p->out[k] - first]);
        }
    /* on failure: everything written so far, results included */
    for (int k = 0; k < p->n_steps; k++) cx_tensor_free(&vals[k]);
    free(vals);
    arena_give_back(p, arena);
    return rc;
}

/* Whether a one-element tensor is not zero: any bit but a sign bit set (NaN is true, -0 false),
 * for complex types in either part. */
static cx_code truthy(cx_tensor *t, bool *yes, cx_status *st) {
    unsigned char b[16] = {0};
    size_t size = cx_dtype_size(t->desc.dtype);
    if (t->numel != 1 || size > sizeof b)
        return cx_fail(st, CX_EINVAL, "program loop: the condition gave %lld elements, not one",
                       (long long)t->numel);
    /* the state passed through: the caller's tensor, which another process may free */
    if (cx_tensor_pin(t, st) != CX_OK) return st->code;
    cx_code rc = cx_tensor_download(t, b, size, st);
    cx_tensor_unpin(t);
    if (rc != CX_OK) return rc;
    bool is_float = cx_dtype_is_float(t->desc.dtype) || cx_dtype_is_complex(t->desc.dtype);
    size_t part = cx_dtype_is_complex(t->desc.dtype) ? size / 2 : size;
    *yes = false;
    for (size_t i = 0; i < size; i++) {
        /* little-endian: a part's sign bit is the top bit of its last byte */
        unsigned char mask = is_float && i % part == part - 1 ? 0x7f : 0xff;
        if (b[i] & mask) *yes = true;
    }
    return CX_OK;
}

static bool pick_ok(int pick, const cx_program *p, int n) {
    return pick >= 0 ? pick < p->n_out : pick >= -n; /* (not -pick: INT_MIN) */
}

cx_code cx_program_loop(const cx_program *cond, cx_tensor *const *cond_consts, int cond_pick,
                        const cx_program *body, cx_tensor *const *body_consts, const int *body_pick,
                        int n, cx_tensor **state, bool *owned, int64_t max_turns, bool *done,
                        cx_status *st) {
    *done = false;
    if (cond->n_inputs != n || body->n_inputs != n || !pick_ok(cond_pick, cond, n))
        return cx_fail(st, CX_EINVAL, "program loop: the programs do not take the state");
    for (int k = 0; k < n; k++)
        if (!pick_ok(body_pick[k], body, n))
            return cx_fail(st, CX_EINVAL, "program loop: the body does not give the state");
    int n_c = cond->n_out > 0 ? cond->n_out : 1, n_b = body->n_out > 0 ? body->n_out : 1;
    cx_tensor *c_out = malloc(sizeof(cx_tensor) * (size_t)n_c);
    cx_tensor *b_out = malloc(sizeof(cx_tensor) * (size_t)n_b);
    cx_tensor **made = calloc((size_t)n_b, sizeof(cx_tensor *));
    cx_tensor **next = malloc(sizeof(cx_tensor *) * (size_t)(n > 0 ? n : 1));
    bool *next_owned = malloc(sizeof(bool) * (size_t)(n > 0 ? n : 1));
    cx_code rc = CX_OK;
    if (!c_out || !b_out || !made || !next || !next_owned)
        rc = cx_fail(st, CX_ENOMEM, "program loop: out of host memory");
    for (int64_t turn = 0; rc == CX_OK && turn < max_turns; turn++) {
        bool go = false;
        if ((rc = cx_program_run(cond, state, cond_consts, c_out, st)) != CX_OK) break;
        rc = truthy(cond_pick >= 0 ? &c_out[cond_pick] : state[-cond_pick - 1], &go, st);
        for (int k = 0; k < cond->n_out; k++) cx_tensor_free(&c_out[k]);
        if (rc != CX_OK) break;
        if (!go) {
            *done = true;
            break;
        }
        if ((rc = cx_program_run(body, state, body_consts, b_out, st)) != CX_OK) break;
        /* the picked results to the heap, once each */
        for (int k = 0; k < body->n_out; k++) made[k] = NULL;
        for (int k = 0; k < n && rc == CX_OK; k++) {
            int pick = body_pick[k];
            if (pick >= 0 && !made[pick]) {
                if (!(made[pick] = malloc(sizeof(cx_tensor)))) {
                    rc = cx_fail(st, CX_ENOMEM, "program loop: out of host memory");
                    break;
                }
                memcpy(made[pick], &b_out[pick], sizeof(cx_tensor));
                cx_tensor_clear(&b_out[pick]);
            }
            next[k] = pick >= 0 ? made[pick] : state[-pick - 1];
            next_owned[k] = pick >= 0 ? true : owned[-pick - 1];
        }
        if (rc != CX_OK) {
            for (int k = 0; k < body->n_out; k++)
                if (made[k]) {
                    cx_tensor_free(made[k]);
                    free(made[k]);
                }
        }
        /* results nobody picked */
        for (int k = 0; k < body->n_out; k++) cx_tensor_free(&b_out[k]);
        if (rc != CX_OK) break;
        /* the values the loop made that no position holds any more, freed once each */
        for (int k = 0; k < n; k++) {
            bool kept = !owned[k];
            for (int j = 0; j < n && !kept; j++) kept = next[j] == state[k];
            for (int j = 0; j < k && !kept; j++) kept = owned[j] && state[j] == state[k];
            if (!kept) {
                cx_tensor_free(state[k]);
                free(state[k]);
            }
        }
        memcpy(state, next, sizeof(cx_tensor *) * (size_t)n);
        memcpy(owned, next_owned, sizeof(bool) * (size_t)n);
    }
    free(c_out);
    free(b_out);
    free(made);
    free(next);
    free(next_owned);
    return rc;
}

void cx_program_free(cx_program *p) {
    for (int k = 0; k < p->n_steps; k++) {
        free(p->steps[k].in);
        free(p->steps[k].drop);
    }
    free(p->steps);
    free(p->desc);
    free(p->out);
    free(p->donated);
    free(p->offset);
    if (p->arena) {
        pthread_mutex_lock(&kept_blocks.lock);
        cx_tensor *a = unlist(p->arena);
        pthread_mutex_unlock(&kept_blocks.lock);
        if (a) arena_drop(a);
        free(p->arena);
    }
    memset(p, 0, sizeof *p);
}
