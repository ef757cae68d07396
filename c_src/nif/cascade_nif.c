/* The erl_nif layer: terms <-> core structs, resources, scheduling, errors -> exceptions.
 * No math here: every op goes through the core's dispatcher. */
#include <erl_nif.h>
#include <string.h>
#if defined(__GLIBC__)
#include <malloc.h>
#endif

#include "../core/dispatch.h"
#include "../core/program.h"
#include "normal_watch.h"
#include "op_flags.h"

static ErlNifResourceType *tensor_type, *program_type;

static ERL_NIF_TERM am_ok, am_true, am_false, am_nil, am_struct, am_gc, am_gc_major, am_gc_first,
    am_gc_major_first, am_loop, am_oom, am_nan, am_infinity, am_neg_infinity, am_exception,
    am_message, am_argument_error, am_cascade_error, am_code, am_driver;
static ERL_NIF_TERM am_dtype_kind[CX_DTYPE_COUNT];
static int dtype_bits[CX_DTYPE_COUNT] = {
#define CX_DTYPE_BITS(id, name, kind, bits, ctype) bits,
    CX_DTYPES(CX_DTYPE_BITS)
#undef CX_DTYPE_BITS
};
static ERL_NIF_TERM am_dtype_name[CX_DTYPE_COUNT];
static ERL_NIF_TERM am_param[CX_PARAM_COUNT];
static ERL_NIF_TERM am_driver_name[CX_MAX_DEVICES];
static ERL_NIF_TERM am_op_name[CX_OP_COUNT + 1];
static ERL_NIF_TERM am_route[CX_ROUTE_COUNT];
static ERL_NIF_TERM am_warn, am_allow, am_error, am_transfer, am_cascade_warn, am_shape_dependent;
static ERL_NIF_TERM am_async, am_download;

static void tensor_dtor(ErlNifEnv *env, void *obj) {
    (void)env;
    cx_tensor_free((cx_tensor *)obj);
}

/* ---- errors ---------------------------------------------------------------------------- */

static ERL_NIF_TERM raise_struct(ErlNifEnv *env, ERL_NIF_TERM mod, const char *msg,
                                 const cx_status *st, const char *driver) {
    ERL_NIF_TERM keys[5] = {am_struct, am_exception, am_message, am_code, am_driver};
    ERL_NIF_TERM vals[5] = {mod, am_true, am_nil, am_nil, am_nil};
    size_t len = strlen(msg);
    unsigned char *text = enif_make_new_binary(env, len, &vals[2]);
    if (!text) return enif_make_badarg(env);
    memcpy(text, msg, len);
    int n = 3;
    if (st) {
        vals[3] = enif_make_atom(env, cx_code_name(st->code));
        vals[4] = enif_make_atom(env, driver ? driver : "cascade");
        n = 5;
    }
    ERL_NIF_TERM map;
    if (!enif_make_map_from_arrays(env, keys, vals, (unsigned)n, &map))
        return enif_make_badarg(env);
    return enif_raise_exception(env, map);
}

static ERL_NIF_TERM raise_arg(ErlNifEnv *env, const char *msg) {
    return raise_struct(env, am_argument_error, msg, NULL, NULL);
}

/* ArgumentError for a term that should have been a tensor. A reference that is none is most
 * likely a tensor made on another node: a resource reaches another node as a plain reference
 * (its memory stays where it was made), and the message says what to send instead. */
static ERL_NIF_TERM raise_not_tensor(ErlNifEnv *env, ERL_NIF_TERM term, const char *msg) {
    if (!enif_is_ref(env, term)) return raise_arg(env, msg);
    char full[640];
    snprintf(full, sizeof full,
             "%s of this node, got a reference that names none: a Cascade tensor made on another "
             "node arrives as one, its memory stays on that node. Send tensors between nodes as "
             "binaries: Cascade.to_binary/1, or Nx.backend_copy/1 (as Nx.Serving's "
             "distributed_preprocessing and distributed_postprocessing)",
             msg);
    return raise_arg(env, full);
}

/* ArgumentError for misuse, {:cascade_oom, driver, message} so Elixir can collect and retry
 * (and name the driver when it raises), Cascade.Error for the rest. */
static ERL_NIF_TERM raise_status(ErlNifEnv *env, const cx_status *st, const char *driver) {
    switch (st->code) {
    case CX_EINVAL:
    case CX_EFREED: return raise_arg(env, st->message);
    case CX_ENOMEM: {
        ErlNifBinary bin;
        size_t len = strlen(st->message);
        if (!enif_alloc_binary(len, &bin)) return enif_raise_exception(env, am_oom);
        memcpy(bin.data, st->message, len);
        return enif_make_tuple3(env, am_oom, enif_make_atom(env, driver ? driver : "cpu"),
                                enif_make_binary(env, &bin));
    }
    default: return raise_struct(env, am_cascade_error, st->message, st, driver);
    }
}

/* ---- terms -> core --------------------------------------------------------------------- */

/* ---- small tensors as values -----------------------------------------------------------
 *
 * A resource costs the BEAM far more to make, collect and destroy than a binary of at most 64
 * bytes, which lives on the process heap (measured with a test NIF on Erlang 25): more than NumPy's
 * whole one-element add. So the result of an op that runs natively on a device with host memory and
 * has at most VALUE_MAX_BYTES of data is returned as a binary holding its description and its
 * bytes. Every entry point that takes a tensor takes both forms: a value is read through a view, a
 * borrowed cx_tensor on the caller's stack holding a copy of its bytes (cx_tensor_borrow).
 * A value owns no device memory: free has nothing to release, and memory/0 does not count it.
 *
 * Layout, 16 bytes then the data in native byte order: 'C', 'x', the type code, the device id,
 * the rank, three zero bytes, then one byte per dimension (1-255; zero past the rank). A binary
 * that does not parse exactly (a magic, a type or a device that does not exist, a size that does
 * not match) is not a tensor. */
#define VALUE_HEADER    16
#define VALUE_MAX_BYTES 48
#define VALUE_MAX_RANK  8 /* header bytes 8-15 */
/* room past the data for kernels that read or write whole vectors at a tail */
#define VALUE_SLACK 64

typedef struct {
    cx_tensor t;
    uint64_t data[(VALUE_MAX_BYTES + VALUE_SLACK) / 8];
} value_view;

static bool value_parse(const ErlNifBinary *bin, value_view *v) {
    const unsigned char *h = bin->data;
    if (bin->size < VALUE_HEADER || bin->size > VALUE_HEADER + VALUE_MAX_BYTES || h[0] != 'C' ||
        h[1] != 'x' || h[2] >= CX_DTYPE_COUNT || h[4] > VALUE_MAX_RANK || h[5] || h[6] || h[7])
        return false;
    cx_device *dev = cx_device_get(h[3]);
    if (!dev || !dev->available || !dev->props.host_memory) return false;
    cx_desc d = {(cx_dtype)h[2], h[4], {0}};
    int64_t numel = 1;
    for (int k = 0; k < VALUE_MAX_RANK; k++) {
        if ((k < d.rank) != (h[8 + k] != 0)) return false;
        /* bounded as it goes: eight dimensions of 255 would overflow the product, and a
         * product that wrapped could match the data's size */
        if (k < d.rank && (numel *= d.shape[k] = h[8 + k]) > VALUE_MAX_BYTES) return false;
    }
    size_t bytes = (size_t)numel * cx_dtype_size(d.dtype);
    if (bin->size != VALUE_HEADER + bytes) return false;
    memcpy(v->data, h + VALUE_HEADER, bytes);
    cx_tensor_borrow(&v->t, dev, &d, v->data);
    return true;
}

_Static_assert(CX_MAX_DEVICES <= 256 && CX_DTYPE_COUNT <= 256,
               "a value's header holds the device id and the type code in a byte each");

/* Whether a tensor of `d` on `dev` can be a value. */
static bool value_fits_desc(const cx_device *dev, const cx_desc *d) {
    int64_t numel = cx_desc_numel(d);
    return dev->props.host_memory && numel >= 1 && d->rank <= VALUE_MAX_RANK &&
           (size_t)numel * cx_dtype_size(d->dtype) <= VALUE_MAX_BYTES;
}

/* Whether a plan's result is returned as a value. */
static bool value_fits(const cx_plan *plan) {
    return plan->route == CX_ROUTE_NATIVE && value_fits_desc(plan->device, &plan->out);
}

/* The binary of a value of `d` on `dev` holding `data` (value_fits_desc), or 0 when the
 * binary could not be made. */
static ERL_NIF_TERM value_binary(ErlNifEnv *env, const cx_device *dev, const cx_desc *d,
                                 const void *data) {
    size_t nbytes = (size_t)cx_desc_numel(d) * cx_dtype_size(d->dtype);
    ERL_NIF_TERM bin;
    unsigned char *p = enif_make_new_binary(env, VALUE_HEADER + nbytes, &bin);
    if (!p) return 0;
    memset(p, 0, VALUE_HEADER);
    p[0] = 'C';
    p[1] = 'x';
    p[2] = (unsigned char)d->dtype;
    p[3] = (unsigned char)dev->id;
    p[4] = (unsigned char)d->rank;
    for (int k = 0; k < d->rank; k++) p[8 + k] = (unsigned char)d->shape[k];
    memcpy(p + VALUE_HEADER, data, nbytes);
    return bin;
}

/* A tensor argument: a resource, or a value read into `room`. */
static bool get_tensor(ErlNifEnv *env, ERL_NIF_TERM term, cx_tensor **out, value_view *room) {
    if (enif_get_resource(env, term, tensor_type, (void **)out)) return true;
    ErlNifBinary bin;
    if (!enif_inspect_binary(env, term, &bin) || !value_parse(&bin, room)) return false;
    *out = &room->t;
    return true;
}

static bool get_dtype(ErlNifEnv *env, ERL_NIF_TERM term, cx_dtype *out) {
    for (int t = 0; t < CX_DTYPE_COUNT; t++)
        if (enif_is_identical(term, am_dtype_name[t])) {
            *out = (cx_dtype)t;
            return true;
        }
    return false;
}

static bool get_i64(ErlNifEnv *env, ERL_NIF_TERM term, int64_t *out) {
    ErlNifSInt64 v;
    if (enif_get_int64(env, term, &v)) {
        *out = (int64_t)v;
        return true;
    }
    ErlNifUInt64 u; /* keys may use the whole 64 bits */
    if (enif_get_uint64(env, term, &u)) {
        *out = (int64_t)u;
        return true;
    }
    return false;
}

/* Reads a list or tuple of integers. */
static bool get_ints(ErlNifEnv *env, ERL_NIF_TERM term, cx_param *p) {
    const ERL_NIF_TERM *elems;
    int arity;
    p->n = 0;
    if (enif_get_tuple(env, term, &arity, &elems)) {
        if (arity > CX_MAX_PARAM_INTS) return false;
        for (int k = 0; k < arity; k++)
            if (!get_i64(env, elems[k], &p->i[p->n++])) return false;
        return true;
    }
    ERL_NIF_TERM head, tail = term;
    while (enif_get_list_cell(env, tail, &head, &tail)) {
        if (p->n == CX_MAX_PARAM_INTS || !get_i64(env, head, &p->i[p->n++])) return false;
    }
    return enif_is_empty_list(env, tail);
}

static bool get_number(ErlNifEnv *env, ERL_NIF_TERM term, cx_param *p) {
    p->n = 1;
    if (enif_get_double(env, term, &p->f)) {
        p->is_int = false;
        return true;
    }
    ErlNifSInt64 v;
    if (enif_get_int64(env, term, &v)) {
        p->is_int = true;
        p->i[0] = (int64_t)v;
        p->f = (double)v;
        return true;
    }
    ErlNifUInt64 u; /* u64 values from 2^63 up: the bits, which integer types wrap */
    if (enif_get_uint64(env, term, &u)) {
        p->is_int = true;
        p->i[0] = (int64_t)u;
        p->f = (double)u;
        return true;
    }
    p->is_int = false;
    if (enif_is_identical(term, am_nan))
        p->f = __builtin_nan("");
    else if (enif_is_identical(term, am_infinity))
        p->f = __builtin_inf();
    else if (enif_is_identical(term, am_neg_infinity))
        p->f = -__builtin_inf();
    else
        return false;
    return true;
}

static bool get_param(ErlNifEnv *env, int id, ERL_NIF_TERM value, cx_param *p) {
    switch (cx_param_table[id].kind) {
    case CX_PK_INTS: return get_ints(env, value, p);
    case CX_PK_INT: p->n = 1; return get_i64(env, value, &p->i[0]);
    case CX_PK_BOOL:
        p->n = 1;
        p->i[0] = enif_is_identical(value, am_true);
        return p->i[0] || enif_is_identical(value, am_false);
    case CX_PK_NUMBER: return get_number(env, value, p);
    case CX_PK_TYPE: {
        cx_dtype t;
        p->n = 1;
        if (!get_dtype(env, value, &t)) return false;
        p->i[0] = t;
        return true;
    }
    }
    return false;
}

/* Decodes a map of parameter atoms to values; fills msg on failure. */
static bool get_params(ErlNifEnv *env, ERL_NIF_TERM map, cx_params *ps, char *msg, size_t n) {
    ps->set = 0;
    size_t size;
    if (!enif_get_map_size(env, map, &size)) {
        snprintf(msg, n, "expected the parameters as a map");
        return false;
    }
    if (size == 0) return true;
    ErlNifMapIterator it;
    if (!enif_map_iterator_create(env, map, &it, ERL_NIF_MAP_ITERATOR_FIRST)) return false;
    ERL_NIF_TERM key, value;
    bool ok = true;
    while (ok && enif_map_iterator_get_pair(env, &it, &key, &value)) {
        /* atoms are immediate terms: equal atoms are equal words */
        int id = -1;
        for (int k = 0; k < CX_PARAM_COUNT && id < 0; k++)
            if (key == am_param[k]) id = k;
        if (id < 0) {
            enif_snprintf(msg, n, "unknown parameter %T", key);
            ok = false;
        } else if (!get_param(env, id, value, cx_param_put(ps, (cx_param_id)id))) {
            static const char *kinds[] = {"a list of at most 24 integers in -2^63..2^64-1",
                                          "an integer in -2^63..2^64-1", "a boolean",
                                          "a number (integers in -2^63..2^63-1)", "a type atom"};
            enif_snprintf(msg, n, "expected the %s parameter to be %s, got: %T",
                          cx_param_table[id].name, kinds[cx_param_table[id].kind], value);
            ok = false;
        }
        enif_map_iterator_next(env, &it);
    }
    enif_map_iterator_destroy(env, &it);
    return ok;
}

/* ---- core -> terms --------------------------------------------------------------------- */

static ERL_NIF_TERM make_type(ErlNifEnv *env, cx_dtype t) {
    return enif_make_tuple2(env, am_dtype_kind[t], enif_make_int(env, dtype_bits[t]));
}

static ERL_NIF_TERM make_shape(ErlNifEnv *env, const cx_desc *d) {
    ERL_NIF_TERM dims[CX_MAX_RANK];
    for (int k = 0; k < d->rank; k++) dims[k] = enif_make_int64(env, d->shape[k]);
    return enif_make_tuple_from_array(env, dims, (unsigned)d->rank);
}

/* The device as Elixir names it: the driver's atom for its first device, {atom, index} after. */
static ERL_NIF_TERM make_device(ErlNifEnv *env, const cx_device *dev) {
    if (dev->index == 0) return am_driver_name[dev->id];
    return enif_make_tuple2(env, am_driver_name[dev->id], enif_make_int(env, dev->index));
}

static ERL_NIF_TERM make_string(ErlNifEnv *env, const char *text) {
    ERL_NIF_TERM res;
    size_t len = strlen(text);
    unsigned char *p = enif_make_new_binary(env, len, &res);
    if (p) memcpy(p, text, len);
    return res;
}

/* Wraps a result in {:cascade_warn, [message], result} when fallback reports wait (policy
 * :warn): Elixir logs them. */
static ERL_NIF_TERM with_warnings(ErlNifEnv *env, ERL_NIF_TERM res) {
    if (!cx_warnings_pending()) return res;
    char msg[512];
    ERL_NIF_TERM list = enif_make_list(env, 0);
    while (cx_warning_take(msg, sizeof msg))
        list = enif_make_list_cell(env, make_string(env, msg), list);
    return enif_make_tuple3(env, am_cascade_warn, list, res);
}

/* {ref, shape, type, device}, from which Elixir builds the %Cascade.Tensor{} (a 4-tuple costs
 * less to make than the struct's map here). Consumes the resource reference. */
static ERL_NIF_TERM tensor_term(ErlNifEnv *env, cx_tensor *t) {
    ERL_NIF_TERM res = enif_make_tuple4(env, enif_make_resource(env, t), make_shape(env, &t->desc),
                                        make_type(env, t->desc.dtype), make_device(env, t->device));
    enif_release_resource(t);
    return res;
}

/* {:cascade_gc, res} when the device asks the caller for a minor garbage collection,
 * {:cascade_gc_major, res} for a full one, else res. */
static ERL_NIF_TERM with_gc(ErlNifEnv *env, cx_device *dev, ERL_NIF_TERM res) {
    switch (cx_device_wants_gc(dev)) {
    case CX_GC_MINOR: return enif_make_tuple2(env, am_gc, res);
    case CX_GC_MAJOR: return enif_make_tuple2(env, am_gc_major, res);
    default: return res;
    }
}

/* A value's tensor term, as tensor_term's {ref, shape, type, device} with the binary for the
 * ref, or 0 when the binary could not be made. */
static ERL_NIF_TERM value_term(ErlNifEnv *env, const cx_device *dev, const cx_desc *d,
                               const void *data) {
    ERL_NIF_TERM bin = value_binary(env, dev, d, data);
    return bin ? enif_make_tuple4(env, bin, make_shape(env, d), make_type(env, d->dtype),
                                  make_device(env, dev))
               : 0;
}

/* A new tensor's term, with the device's request for a collection. */
static ERL_NIF_TERM make_tensor(ErlNifEnv *env, cx_tensor *t) {
    cx_device *dev = t->device;
    return with_gc(env, dev, tensor_term(env, t));
}

/* ---- NIFs ------------------------------------------------------------------------------ */

typedef struct {
    cx_op_id op;
    cx_device *device;
    int n_in;
    cx_tensor *in_small[8];
    cx_tensor **in;
    value_view vals_small[8];
    value_view *vals; /* room for the values among the inputs, one per input */
    cx_params ps;
    cx_plan plan;
} op_call;

/* Decodes op(op_id, [ref], params, device_id, values) or explain(op_id, [ref], params,
 * device_id) (the first four arguments) and plans it; a ref may be a value. On failure returns
 * false with the raised exception in *err: an exception is THE_NON_VALUE, which may be 0, so it
 * cannot double as a success flag. */
static bool decode_op(ErlNifEnv *env, const ERL_NIF_TERM argv[], op_call *c, ERL_NIF_TERM *err) {
    int op, dev;
    unsigned len;
    char msg[256];
    c->in = c->in_small;
    c->vals = c->vals_small;
    if (!enif_get_int(env, argv[0], &op) || op < 0 || op >= CX_OP_COUNT)
        return *err = raise_arg(env, "Cascade.Native.op: unknown op id"), false;
    c->op = (cx_op_id)op;
    if (!enif_get_int(env, argv[3], &dev) || !(c->device = cx_device_get(dev)))
        return *err = raise_arg(env, "Cascade.Native.op: unknown device id"), false;
    if (!enif_get_list_length(env, argv[1], &len) || len > CX_MAX_INPUTS) {
        snprintf(msg, sizeof msg, "%s: expected a list of at most %d tensors", cx_op_table[op].name,
                 CX_MAX_INPUTS);
        return *err = raise_arg(env, msg), false;
    }
    if (len > 8 && (!(c->in = enif_alloc(sizeof(cx_tensor *) * len)) ||
                    !(c->vals = enif_alloc(sizeof(value_view) * len))))
        return *err = raise_arg(env, "out of memory decoding the arguments"), false;
    ERL_NIF_TERM head, tail = argv[1];
    c->n_in = 0;
    while (enif_get_list_cell(env, tail, &head, &tail)) {
        int k = c->n_in++;
        if (!get_tensor(env, head, &c->in[k], &c->vals[k])) {
            snprintf(msg, sizeof msg, "%s: argument %d is not a Cascade tensor reference",
                     cx_op_table[op].name, k + 1);
            return *err = raise_not_tensor(env, head, msg), false;
        }
    }
    char why[160];
    if (!get_params(env, argv[2], &c->ps, why, sizeof why)) {
        snprintf(msg, sizeof msg, "%s: %s", cx_op_table[op].name, why);
        return *err = raise_arg(env, msg), false;
    }
    cx_status st;
    CX_STATUS_RESET(st);
    if (cx_plan_op(c->op, c->device, (const cx_tensor *const *)c->in, c->n_in, &c->ps, &c->plan,
                   &st) != CX_OK)
        return *err = raise_status(env, &st, NULL), false;
    return true;
}

static void release_call(op_call *c) {
    if (c->in && c->in != c->in_small) enif_free(c->in);
    if (c->vals && c->vals != c->vals_small) enif_free(c->vals);
}

/* The result as a value (see value_view): computed into a buffer with slack, then copied into
 * a new binary after its header. */
static ERL_NIF_TERM run_value(ErlNifEnv *env, op_call *c) {
    const cx_desc *d = &c->plan.out;
    cx_device *dev = c->plan.device;
    uint64_t buf[(VALUE_MAX_BYTES + VALUE_SLACK) / 8];
    cx_tensor out;
    cx_tensor_borrow(&out, dev, d, buf);
    cx_status st;
    CX_STATUS_RESET(st);
    if (cx_run_plan_into(&c->plan, c->in, c->n_in, &c->ps, &out, &st) != CX_OK)
        return raise_status(env, &st, dev->driver_name);
    ERL_NIF_TERM term = value_term(env, dev, d, buf);
    if (!term) return enif_make_tuple2(env, am_oom, enif_make_atom(env, "resource"));
    return with_warnings(env, term);
}

static int op_flags(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[]) {
    int flags;
    return argc > 4 && enif_get_int(env, argv[4], &flags) ? flags : 0;
}

/* Whether the call answers :cascade_gc_first (:cascade_gc_major_first, in *answer) instead of
 * running: it may ask (OP_GC_FIRST), its result will be a resource, and the device wants a
 * collection before it is made. Asked before a costly call moves to a dirty scheduler, so that
 * the call made again moves once. */
static bool gc_first(const op_call *c, int flags, ERL_NIF_TERM *answer) {
    if (!(flags & OP_GC_FIRST) || ((flags & OP_VALUES) && value_fits(&c->plan))) return false;
    const cx_desc *d = &c->plan.out;
    int64_t bytes = cx_desc_numel(d) * (int64_t)cx_dtype_size(d->dtype);
    switch (cx_device_wants_gc_before(c->plan.device, bytes)) {
    case CX_GC_MINOR: *answer = am_gc_first; return true;
    case CX_GC_MAJOR: *answer = am_gc_major_first; return true;
    default: return false;
    }
}

static ERL_NIF_TERM run_call(ErlNifEnv *env, op_call *c, int flags) {
    if ((flags & OP_VALUES) && value_fits(&c->plan)) return run_value(env, c);
    /* cx_run_plan and cx_tensor_init empty the tensor before anything can fail, so the
     * destructor is safe on every error path below */
    cx_tensor *out = enif_alloc_resource(tensor_type, sizeof(cx_tensor));
    if (!out) return enif_make_tuple2(env, am_oom, enif_make_atom(env, "resource"));
    cx_status st;
    CX_STATUS_RESET(st);
    if (cx_run_plan(&c->plan, c->in, c->n_in, &c->ps, out, &st) != CX_OK) {
        enif_release_resource(out);
        /* an exception is not a term to wrap: reports wait for the next call */
        return raise_status(env, &st, c->plan.device->driver_name);
    }
    return with_warnings(env,
                         (flags & OP_COLLECTED) ? tensor_term(env, out) : make_tensor(env, out));
}

static ERL_NIF_TERM op_dirty(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[]) {
    op_call c;
    ERL_NIF_TERM res;
    if (decode_op(env, argv, &c, &res)) res = run_call(env, &c, op_flags(env, argc, argv));
    release_call(&c);
    return res;
}

/* Tells the scheduler what part of its ~1 ms time slice a call of this estimated cost (about
 * ns) took, so that a process running a loop of such calls is scheduled out as often as one
 * running Erlang code. That matters beyond fairness: the BEAM destroys resources that a
 * collection released (the tensors a loop dropped) only once its schedulers pass a point of
 * thread progress, between processes; a loop of 1M-element adds, counted as a few reductions
 * each, kept ~250 dead results (1 GB) alive and faulted every new one's pages in, which made
 * each call far slower. */
static void consume_slice(ErlNifEnv *env, double cost) {
    int percent = (int)(cost / 10000.0);
    if (percent >= 1) enif_consume_timeslice(env, percent > 100 ? 100 : percent);
}

/* The dirty scheduler for work on `dev`: a device that queues work (opencl) computes on threads of
 * its own while the caller waits, so its calls go to the dirty I/O schedulers, and the dirty CPU
 * ones stay for the host's computing. */
static ErlNifDirtyTaskFlags dirty_kind(const cx_device *dev) {
    return cx_device_queues(dev) ? ERL_NIF_DIRTY_JOB_IO_BOUND : ERL_NIF_DIRTY_JOB_CPU_BOUND;
}

static ERL_NIF_TERM op_nif(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[]) {
    op_call c;
    ERL_NIF_TERM res; /* the exception when decoding fails */
    if (decode_op(env, argv, &c, &res)) {
        int flags = op_flags(env, argc, argv);
        if (gc_first(&c, flags, &res)) {
            /* res is the request: the caller collects and calls again */
        } else if (c.plan.cost > nw_dirty_cost() ||
                   cx_plan_may_block(&c.plan, (const cx_tensor *const *)c.in, c.n_in, &c.ps)) {
            /* a wait for the device (its queue full, a kernel to build) holds no normal one */
            res =
                enif_schedule_nif(env, "op_dirty", dirty_kind(c.plan.device), op_dirty, argc, argv);
        } else {
            res = run_call(env, &c, flags);
            consume_slice(env, c.plan.cost);
        }
    }
    release_call(&c);
    return res;
}

/* A new tensor resource of `d` on `dev` holding `bytes` (its whole size), or NULL: with *st
 * still CX_OK when the BEAM had no memory for the resource, else with the device's failure. */
static cx_tensor *resource_holding(cx_device *dev, const cx_desc *d, const void *bytes, size_t size,
                                   cx_status *st) {
    cx_tensor *t = enif_alloc_resource(tensor_type, sizeof(cx_tensor));
    if (!t) return NULL;
    if (cx_tensor_init(t, dev, d, st) != CX_OK || cx_tensor_upload(t, bytes, size, st) != CX_OK) {
        enif_release_resource(t); /* the destructor frees what init made */
        return NULL;
    }
    return t;
}

/* from_binary(binary, type, shape, device_id) */
static ERL_NIF_TERM from_binary_run(ErlNifEnv *env, const ERL_NIF_TERM argv[]) {
    ErlNifBinary bin;
    cx_desc d;
    cx_param shape;
    int dev_id;
    cx_device *dev;
    char msg[256];
    if (!enif_inspect_binary(env, argv[0], &bin)) return raise_arg(env, "expected a binary");
    if (!get_dtype(env, argv[1], &d.dtype)) return raise_arg(env, "unknown type");
    if (!get_ints(env, argv[2], &shape) || shape.n > CX_MAX_RANK) {
        enif_snprintf(msg, sizeof msg,
                      "expected a shape tuple of at most 8 non-negative integers, got: %T",
                      argv[2]);
        return raise_arg(env, msg);
    }
    if (!enif_get_int(env, argv[3], &dev_id) || !(dev = cx_device_get(dev_id)))
        return raise_arg(env, "unknown device id");
    d.rank = shape.n;
    int64_t numel = 1;
    for (int k = 0; k < d.rank; k++) {
        if (shape.i[k] < 0 || (shape.i[k] > 0 && numel > (INT64_C(1) << 48) / shape.i[k])) {
            enif_snprintf(msg, sizeof msg,
                          "expected a shape of non-negative dimensions with at most 2^48 "
                          "elements, got: %T",
                          argv[2]);
            return raise_arg(env, msg);
        }
        d.shape[k] = shape.i[k];
        numel *= shape.i[k];
    }
    size_t want = (size_t)numel * cx_dtype_size(d.dtype);
    if (bin.size != want) {
        snprintf(msg, sizeof msg,
                 "expected a binary of %zu bytes for a %s tensor of %lld elements, got: %zu bytes",
                 want, cx_dtype_name(d.dtype), (long long)numel, bin.size);
        return raise_arg(env, msg);
    }
    cx_status st = {CX_OK, ""};
    cx_tensor *t = resource_holding(dev, &d, bin.data, bin.size, &st);
    if (!t)
        return st.code == CX_OK ? enif_make_tuple2(env, am_oom, enif_make_atom(env, "resource"))
                                : raise_status(env, &st, dev->driver_name);
    return make_tensor(env, t);
}

static ERL_NIF_TERM from_binary_dirty(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[]) {
    (void)argc;
    return from_binary_run(env, argv);
}

static ERL_NIF_TERM from_binary_nif(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[]) {
    ErlNifBinary bin;
    int id;
    /* an upload waits for the work queued before it on a device that queues work */
    const cx_device *dev = enif_get_int(env, argv[3], &id) ? cx_device_get(id) : NULL;
    if (enif_inspect_binary(env, argv[0], &bin) &&
        (bin.size > nw_dirty_bytes() || cx_device_may_block(dev)))
        return enif_schedule_nif(env, "from_binary_dirty", dirty_kind(dev), from_binary_dirty, argc,
                                 argv);
    return from_binary_run(env, argv);
}

/* The bytes to_binary copies: the whole tensor, or `limit` bytes when that is less. */
static size_t download_bytes(ErlNifEnv *env, const cx_tensor *t, ERL_NIF_TERM limit_term) {
    ErlNifUInt64 limit;
    if (enif_get_uint64(env, limit_term, &limit) && (size_t)limit < t->nbytes) return (size_t)limit;
    return t->nbytes;
}

/* to_binary(ref, limit_bytes | nil, tag), synchronously */
static ERL_NIF_TERM to_binary_run(ErlNifEnv *env, const ERL_NIF_TERM argv[]) {
    cx_tensor *t;
    value_view room;
    if (!get_tensor(env, argv[0], &t, &room))
        return raise_not_tensor(env, argv[0], "expected a Cascade tensor reference");
    cx_status st = {CX_OK, ""};
    if (cx_tensor_pin(t, &st) != CX_OK) return raise_status(env, &st, NULL);
    size_t bytes = download_bytes(env, t, argv[1]);
    ERL_NIF_TERM res;
    unsigned char *dst = enif_make_new_binary(env, bytes, &res);
    cx_code rc = dst ? cx_tensor_download(t, dst, bytes, &st)
                     : cx_fail(&st, CX_ENOMEM, "could not allocate a %zu-byte binary", bytes);
    cx_tensor_unpin(t);
    return rc == CX_OK ? res : raise_status(env, &st, t->device->driver_name);
}

static ERL_NIF_TERM to_binary_dirty(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[]) {
    (void)argc;
    return to_binary_run(env, argv);
}

/* ---- asynchronous downloads ------------------------------------------------------------
 *
 * From a device whose driver has download_async, to_binary returns :cascade_async at once and
 * the driver's thread later sends the caller {:cascade_download, tag, binary} or
 * {:cascade_download, tag, {:error, code, driver, message}}; Elixir waits in a receive, so no
 * scheduler, dirty or not, waits for the device. A transfer to a host-memory device (the cpu)
 * goes the same way, the bytes landing in the new tensor's buffer and the reply carrying the
 * tensor ({ref, shape, type, device}, as op/5 answers) instead of a binary.
 *
 * Lifetimes: the job holds a reference to the tensor's resource (enif_keep_resource: the
 * struct outlives every term that named it, so a caller that dies or drops the tensor cannot
 * free it under the driver) and a pin (the device buffer outlives a free/1 that comes
 * meanwhile; the buffer goes when the pin drops). The binary, or the transfer's new tensor, is
 * the job's until the reply takes it; a reply to a dead process is dropped with its
 * environment, binary or tensor reference included (the new tensor is then destroyed).
 *
 * Unloading: download_done is code of this library, called from a driver's thread. ERTS
 * unloads a NIF library only after its module is purged and the last resource of its
 * resource types is gone, and the job's reference is dropped by the last statement of
 * download_done, so the library cannot go while a download is pending. What remains is the
 * return from download_done after that release; Cascade.Native is never purged while its
 * tensors live (it has no code upgrades that drop the library), and the drivers are never
 * unloaded (core/device.c), which is what we rely on. */

typedef struct {
    cx_tensor *t;
    cx_tensor *out;   /* a transfer's new tensor (its allocation's reference), or NULL */
    ErlNifBinary bin; /* to_binary's, when out is NULL */
    ErlNifPid caller;
    ErlNifEnv *env; /* the reply's: the tag, then the message */
    ERL_NIF_TERM tag;
} download_job;

/* started, completed (the reply sent or dropped), undelivered (the caller had died) */
static _Atomic int64_t downloads_started, downloads_completed, downloads_undelivered;

static void download_done(void *ctx, cx_code rc, const char *message) {
    download_job *j = ctx;
    ErlNifEnv *env = j->env;
    ERL_NIF_TERM reply;
    if (rc == CX_OK && j->out) {
        cx_stats_count_transfer(j->out->device->id, (long long)j->out->nbytes);
        reply = make_tensor(env, j->out);
    } else if (rc == CX_OK) {
        reply = enif_make_binary(env, &j->bin);
    } else {
        if (j->out) {
            cx_tensor_free(j->out);
            enif_release_resource(j->out);
        } else {
            enif_release_binary(&j->bin);
        }
        reply = enif_make_tuple4(env, am_error, enif_make_atom(env, cx_code_name(rc)),
                                 am_driver_name[j->t->device->id],
                                 make_string(env, message ? message : "the download failed"));
    }
    if (!enif_send(NULL, &j->caller, env, enif_make_tuple3(env, am_download, j->tag, reply)))
        atomic_fetch_add(&downloads_undelivered, 1);
    enif_free_env(env);
    cx_tensor *t = j->t;
    enif_free(j);
    cx_tensor_unpin(t);
    atomic_fetch_add(&downloads_completed, 1);
    enif_release_resource(t); /* last: it may destroy the tensor (see Unloading above) */
}

/* Starts an asynchronous download of `bytes` bytes, into a new binary, or into `out`'s buffer
 * for a transfer (the job takes the reference). True with *res set (:cascade_async, or the
 * exception / out-of-memory answer when it could not start); false when the driver asks for a
 * synchronous download of this one (nothing held then, `out` released). */
static bool start_download(ErlNifEnv *env, cx_tensor *t, size_t bytes, cx_tensor *out,
                           ERL_NIF_TERM tag, ERL_NIF_TERM *res) {
    cx_status st = {CX_OK, ""};
    download_job *j = NULL;
    ErlNifEnv *msg_env = NULL;
    bool answered = true;
    if (cx_tensor_pin(t, &st) != CX_OK) {
        *res = raise_status(env, &st, NULL);
        goto failed;
    }
    j = enif_alloc(sizeof *j);
    msg_env = j ? enif_alloc_env() : NULL;
    if (!msg_env || (!out && !enif_alloc_binary(bytes, &j->bin))) {
        cx_tensor_unpin(t);
        cx_fail(&st, CX_ENOMEM, "could not allocate a %zu-byte binary", bytes);
        *res = raise_status(env, &st, t->device->driver_name);
        goto failed;
    }
    j->t = t;
    j->out = out;
    j->env = msg_env;
    j->tag = enif_make_copy(msg_env, tag);
    enif_self(env, &j->caller);
    enif_keep_resource(t);
    atomic_fetch_add(&downloads_started, 1);
    /* from here the job may complete on another thread at any time: not touched on success */
    cx_code rc =
        cx_tensor_download_async(t, out ? out->data : j->bin.data, bytes, download_done, j, &st);
    if (rc == CX_OK) return *res = am_async, true;
    atomic_fetch_sub(&downloads_started, 1);
    enif_release_resource(t); /* the caller's term still holds the tensor */
    if (!out) enif_release_binary(&j->bin);
    cx_tensor_unpin(t);
    answered = rc != CX_EUNSUPPORTED;
    if (answered) *res = raise_status(env, &st, t->device->driver_name);
failed:
    if (msg_env) enif_free_env(msg_env);
    if (j) enif_free(j);
    if (out) {
        cx_tensor_free(out);
        enif_release_resource(out);
    }
    return answered;
}

/* to_binary's work: asynchronous where the driver can, else synchronous, on a dirty scheduler
 * above nw_dirty_bytes() unless it runs on one already (`dirty`). */
static ERL_NIF_TERM to_binary_call(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[],
                                   bool dirty) {
    cx_tensor *t;
    value_view room;
    if (!get_tensor(env, argv[0], &t, &room))
        return raise_not_tensor(env, argv[0], "expected a Cascade tensor reference");
    size_t bytes = download_bytes(env, t, argv[1]);
    ERL_NIF_TERM res;
    if (bytes > 0 && cx_tensor_downloads_async(t) &&
        start_download(env, t, bytes, NULL, argv[2], &res))
        return res;
    if (!dirty && bytes > nw_dirty_bytes())
        return enif_schedule_nif(env, "to_binary_dirty", ERL_NIF_DIRTY_JOB_CPU_BOUND,
                                 to_binary_dirty, argc, argv);
    return to_binary_run(env, argv);
}

static ERL_NIF_TERM to_binary_io(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[]) {
    return to_binary_call(env, argc, argv, true);
}

/* to_binary(ref, limit_bytes | nil, tag): asynchronous where the driver can, else synchronous;
 * on a device whose calls may wait (driver.h: may_block), all of it on a dirty I/O scheduler. */
static ERL_NIF_TERM to_binary_nif(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[]) {
    cx_tensor *t;
    value_view room;
    if (get_tensor(env, argv[0], &t, &room) && cx_device_may_block(t->device))
        return enif_schedule_nif(env, "to_binary_io", ERL_NIF_DIRTY_JOB_IO_BOUND, to_binary_io,
                                 argc, argv);
    return to_binary_call(env, argc, argv, false);
}

/* {started, completed, undelivered} asynchronous downloads since the library loaded */
static ERL_NIF_TERM async_downloads_nif(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[]) {
    (void)argc;
    (void)argv;
    return enif_make_tuple3(env, enif_make_int64(env, atomic_load(&downloads_started)),
                            enif_make_int64(env, atomic_load(&downloads_completed)),
                            enif_make_int64(env, atomic_load(&downloads_undelivered)));
}

static ERL_NIF_TERM free_dirty(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[]) {
    (void)argc;
    cx_tensor *t;
    value_view room;
    if (!get_tensor(env, argv[0], &t, &room))
        return raise_not_tensor(env, argv[0], "expected a Cascade tensor reference");
    cx_tensor_free(t);
    return am_ok;
}

/* Giving memory back costs time by its size (munmap of a large buffer held a normal scheduler
 * too long in a CI run), so a large tensor is freed on a dirty scheduler. */
static ERL_NIF_TERM free_nif(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[]) {
    cx_tensor *t;
    value_view room;
    if (!get_tensor(env, argv[0], &t, &room))
        return raise_not_tensor(env, argv[0], "expected a Cascade tensor reference");
    if (t->nbytes > nw_dirty_bytes())
        return enif_schedule_nif(env, "free_dirty", ERL_NIF_DIRTY_JOB_CPU_BOUND, free_dirty, argc,
                                 argv);
    return free_dirty(env, argc, argv);
}

static ERL_NIF_TERM freed_nif(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[]) {
    (void)argc;
    cx_tensor *t;
    value_view room;
    if (!get_tensor(env, argv[0], &t, &room))
        return raise_not_tensor(env, argv[0], "expected a Cascade tensor reference");
    return cx_tensor_is_freed(t) ? am_true : am_false;
}

/* [{device, live_bytes, peak_bytes, live_tensors}] for the available devices */
static ERL_NIF_TERM memory_nif(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[]) {
    (void)argc;
    (void)argv;
    ERL_NIF_TERM list = enif_make_list(env, 0);
    for (int k = cx_device_count() - 1; k >= 0; k--) {
        cx_device *d = cx_device_get(k);
        if (!d->available) continue;
        /* An allocation raises live_bytes before peak_bytes: read between the two, the peak
         * would be below the live bytes. The peak is at least what is live. */
        int64_t live = atomic_load(&d->live_bytes);
        int64_t peak = atomic_load(&d->peak_bytes);
        if (peak < live) peak = live;
        ERL_NIF_TERM row = enif_make_tuple4(env, make_device(env, d), enif_make_int64(env, live),
                                            enif_make_int64(env, peak),
                                            enif_make_int64(env, atomic_load(&d->live_tensors)));
        list = enif_make_list_cell(env, row, list);
    }
    return list;
}

/* [{id, device, driver, available, reason, %{name, kind, memory, host_memory, detail}}] in
 * device-id order */
static ERL_NIF_TERM devices_nif(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[]) {
    (void)argc;
    (void)argv;
    ERL_NIF_TERM list = enif_make_list(env, 0);
    for (int k = cx_device_count() - 1; k >= 0; k--) {
        cx_device *d = cx_device_get(k);
        ERL_NIF_TERM keys[5] = {enif_make_atom(env, "name"), enif_make_atom(env, "kind"),
                                enif_make_atom(env, "memory"), enif_make_atom(env, "host_memory"),
                                enif_make_atom(env, "detail")};
        ERL_NIF_TERM vals[5] = {make_string(env, d->props.name), make_string(env, d->props.kind),
                                enif_make_int64(env, d->props.memory),
                                d->props.host_memory ? am_true : am_false,
                                make_string(env, d->props.detail)};
        ERL_NIF_TERM props;
        if (!enif_make_map_from_arrays(env, keys, vals, 5, &props)) return enif_make_badarg(env);
        ERL_NIF_TERM row[6] = {enif_make_int(env, k),       make_device(env, d),
                               am_driver_name[k],           d->available ? am_true : am_false,
                               make_string(env, d->reason), props};
        list = enif_make_list_cell(env, enif_make_tuple_from_array(env, row, 6), list);
    }
    return list;
}

/* [{depth, op, device, route, type, shape, bytes_moved, reason, library | nil}] for explain and
 * capabilities */
static ERL_NIF_TERM make_steps(ErlNifEnv *env, const cx_explain *ex) {
    ERL_NIF_TERM list = enif_make_list(env, 0);
    for (int k = ex->n - 1; k >= 0; k--) {
        const cx_step *s = &ex->steps[k];
        ERL_NIF_TERM row[9] = {enif_make_int(env, s->depth),
                               am_op_name[s->op],
                               make_device(env, s->device),
                               am_route[s->route],
                               make_type(env, s->out.dtype),
                               make_shape(env, &s->out),
                               enif_make_int64(env, s->bytes_moved),
                               make_string(env, s->reason),
                               s->library ? make_string(env, s->library) : am_nil};
        list = enif_make_list_cell(env, enif_make_tuple_from_array(env, row, 9), list);
    }
    return list;
}

/* explain(op_id, [ref], params, device_id): the plan, nothing run. */
static ERL_NIF_TERM explain_nif(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[]) {
    (void)argc;
    op_call c;
    ERL_NIF_TERM res;
    if (!decode_op(env, argv, &c, &res)) {
        release_call(&c);
        return res;
    }
    cx_desc descs_small[8];
    cx_desc *descs = c.n_in <= 8 ? descs_small : enif_alloc(sizeof(cx_desc) * (size_t)c.n_in);
    if (!descs) {
        release_call(&c);
        return raise_arg(env, "out of memory");
    }
    for (int k = 0; k < c.n_in; k++) descs[k] = c.in[k]->desc;
    cx_explain ex = {0};
    cx_status st = {CX_OK, ""};
    if (cx_explain_op(c.op, c.plan.device, descs, c.n_in, &c.ps, &ex, &st) == CX_OK)
        res = make_steps(env, &ex);
    else
        res = raise_status(env, &st, NULL);
    cx_explain_free(&ex);
    if (descs != descs_small) enif_free(descs);
    release_call(&c);
    return res;
}

/* capabilities(device_id): [{op, type, route | :shape_dependent, steps}] for every op and type
 * the op takes */
static ERL_NIF_TERM capabilities_nif(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[]) {
    (void)argc;
    int id;
    cx_device *dev;
    if (!enif_get_int(env, argv[0], &id) || !(dev = cx_device_get(id)))
        return raise_arg(env, "unknown device id");
    ERL_NIF_TERM list = enif_make_list(env, 0);
    for (int op = CX_OP_COUNT - 1; op >= 0; op--)
        for (int t = CX_DTYPE_COUNT - 1; t >= 0; t--) {
            cx_route r;
            cx_explain ex = {0};
            cx_status st = {CX_OK, ""};
            cx_code rc = cx_capability(dev, (cx_op_id)op, (cx_dtype)t, &r, &ex, &st);
            if (rc == CX_OK) {
                bool some_shapes = ex.n > 0 && ex.steps[0].shape_dependent;
                ERL_NIF_TERM row[4] = {am_op_name[op], am_dtype_name[t],
                                       some_shapes ? am_shape_dependent : am_route[r],
                                       make_steps(env, &ex)};
                list = enif_make_list_cell(env, enif_make_tuple_from_array(env, row, 4), list);
            }
            cx_explain_free(&ex);
            if (rc == CX_EDEVICE) return raise_status(env, &st, dev->driver_name);
        }
    return list;
}

/* [{device, op | :transfer, route, calls, bytes, [{library, calls}]}] for every counter that is
 * not zero; the libraries for the native route */
static ERL_NIF_TERM stats_nif(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[]) {
    (void)argc;
    (void)argv;
    ERL_NIF_TERM list = enif_make_list(env, 0);
    for (int d = cx_device_count() - 1; d >= 0; d--)
        for (int op = CX_OP_COUNT; op >= 0; op--)
            for (int r = CX_ROUTE_COUNT - 1; r >= 0; r--) {
                cx_stat s = cx_stats_get(d, op, (cx_route)r);
                if (s.calls == 0) continue;
                ERL_NIF_TERM libs = enif_make_list(env, 0);
                if (r == CX_ROUTE_NATIVE && op < CX_OP_COUNT) {
                    const char *names[8];
                    long long calls[8];
                    int n = cx_stats_libraries(d, op, names, calls, 8);
                    for (int k = n - 1; k >= 0; k--)
                        libs = enif_make_list_cell(env,
                                                   enif_make_tuple2(env, make_string(env, names[k]),
                                                                    enif_make_int64(env, calls[k])),
                                                   libs);
                }
                ERL_NIF_TERM row[6] = {make_device(env, cx_device_get(d)),
                                       am_op_name[op],
                                       op == CX_OP_COUNT ? am_transfer : am_route[r],
                                       enif_make_int64(env, s.calls),
                                       enif_make_int64(env, s.bytes),
                                       libs};
                list = enif_make_list_cell(env, enif_make_tuple_from_array(env, row, 6), list);
            }
    return list;
}

static ERL_NIF_TERM reset_stats_nif(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[]) {
    (void)argc;
    (void)argv;
    cx_stats_reset();
    return am_ok;
}

static bool get_policy(ErlNifEnv *env, ERL_NIF_TERM term, cx_policy *p) {
    if (enif_is_identical(term, am_allow))
        *p = CX_POLICY_ALLOW;
    else if (enif_is_identical(term, am_warn))
        *p = CX_POLICY_WARN;
    else if (enif_is_identical(term, am_error))
        *p = CX_POLICY_ERROR;
    else
        return false;
    return true;
}

static ERL_NIF_TERM set_policy_nif(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[]) {
    (void)argc;
    cx_policy p;
    if (!get_policy(env, argv[0], &p)) return raise_arg(env, "expected :allow, :warn or :error");
    cx_set_policy(p);
    return am_ok;
}

/* transfer(ref, device_id, tag), synchronously */
static ERL_NIF_TERM transfer_run(ErlNifEnv *env, const ERL_NIF_TERM argv[]) {
    cx_tensor *t;
    int id;
    cx_device *to;
    value_view room;
    if (!get_tensor(env, argv[0], &t, &room))
        return raise_not_tensor(env, argv[0], "expected a Cascade tensor reference");
    if (!enif_get_int(env, argv[1], &id) || !(to = cx_device_get(id)))
        return raise_arg(env, "unknown device id");
    cx_tensor *out = enif_alloc_resource(tensor_type, sizeof(cx_tensor));
    if (!out) return enif_make_tuple2(env, am_oom, enif_make_atom(env, "resource"));
    cx_status st = {CX_OK, ""};
    if (cx_transfer(t, to, out, &st) != CX_OK) {
        enif_release_resource(out);
        return raise_status(env, &st, to->driver_name);
    }
    return make_tensor(env, out);
}

static ERL_NIF_TERM transfer_dirty(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[]) {
    (void)argc;
    return transfer_run(env, argv);
}

/* transfer's work: asynchronous where it can, else synchronous, on a dirty scheduler above
 * nw_dirty_bytes() unless it runs on one already (`dirty`). */
static ERL_NIF_TERM transfer_call(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[], bool dirty) {
    cx_tensor *t;
    int id;
    cx_device *to;
    value_view room;
    if (!get_tensor(env, argv[0], &t, &room))
        return raise_not_tensor(env, argv[0], "expected a Cascade tensor reference");
    if (!enif_get_int(env, argv[1], &id) || !(to = cx_device_get(id)))
        return raise_arg(env, "unknown device id");
    if (t->nbytes > 0 && to->props.host_memory && !t->device->props.host_memory &&
        cx_tensor_downloads_async(t)) {
        cx_tensor *out = enif_alloc_resource(tensor_type, sizeof(cx_tensor));
        if (!out) return enif_make_tuple2(env, am_oom, enif_make_atom(env, "resource"));
        cx_status st = {CX_OK, ""};
        if (cx_tensor_init(out, to, &t->desc, &st) != CX_OK) {
            enif_release_resource(out);
            return raise_status(env, &st, to->driver_name);
        }
        ERL_NIF_TERM res;
        if (start_download(env, t, t->nbytes, out, argv[2], &res)) return res;
    }
    if (!dirty && t->nbytes > nw_dirty_bytes())
        return enif_schedule_nif(env, "transfer_dirty", ERL_NIF_DIRTY_JOB_CPU_BOUND, transfer_dirty,
                                 argc, argv);
    return transfer_run(env, argv);
}

static ERL_NIF_TERM transfer_io(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[]) {
    return transfer_call(env, argc, argv, true);
}

/* transfer(ref, device_id, tag): from a device that downloads asynchronously to one with host
 * memory, the bytes land in the new tensor's buffer as a download's would (:cascade_async, then
 * the reply); otherwise synchronously. From or to a device whose calls may wait, on a dirty I/O
 * scheduler. */
static ERL_NIF_TERM transfer_nif(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[]) {
    cx_tensor *t;
    int id;
    value_view room;
    if (get_tensor(env, argv[0], &t, &room) && enif_get_int(env, argv[1], &id) &&
        (cx_device_may_block(t->device) || cx_device_may_block(cx_device_get(id))))
        return enif_schedule_nif(env, "transfer_io", ERL_NIF_DIRTY_JOB_IO_BOUND, transfer_io, argc,
                                 argv);
    return transfer_call(env, argc, argv, false);
}

/* The op names in id order: lets Elixir check that its compiled table matches the library. */
static ERL_NIF_TERM ops_nif(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[]) {
    (void)argc;
    (void)argv;
    ERL_NIF_TERM list = enif_make_list(env, 0);
    for (int k = CX_OP_COUNT - 1; k >= 0; k--)
        list = enif_make_list_cell(env, enif_make_atom(env, cx_op_table[k].name), list);
    return list;
}

static ERL_NIF_TERM set_gc_interval_nif(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[]) {
    (void)argc;
    ErlNifSInt64 bytes;
    if (!enif_get_int64(env, argv[0], &bytes) || bytes <= 0)
        return raise_arg(env, "expected a positive number of bytes");
    cx_set_gc_interval(bytes);
    return am_ok;
}

/* set_reproducible(true | false): the setting before (cx_set_reproducible) */
static ERL_NIF_TERM set_reproducible_nif(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[]) {
    (void)argc;
    bool on = enif_is_identical(argv[0], am_true);
    if (!on && !enif_is_identical(argv[0], am_false)) return raise_arg(env, "expected a boolean");
    return cx_set_reproducible(on) ? am_true : am_false;
}

/* On upgrade (the module reloaded while this library stays mapped) the resource type already
 * exists: it must be taken over, and a failure must not clear tensor_type, which the old code
 * still uses for every tensor. */
/* load_info: %{drivers: [{name_atom, path_binary}], fallback: policy} */
/* ---- programs (Cascade.Compiler) ------------------------------------------------------- */

/* A program with the constants it reads: their resources are kept until the program goes. */
typedef struct {
    cx_program prog;
    int n_consts;
    cx_tensor **consts;
} program_res;

static void program_dtor(ErlNifEnv *env, void *obj) {
    (void)env;
    program_res *r = obj;
    cx_program_free(&r->prog);
    for (int k = 0; k < r->n_consts; k++) enif_release_resource(r->consts[k]);
    enif_free(r->consts);
}

static bool get_desc(ErlNifEnv *env, ERL_NIF_TERM term, cx_desc *d) {
    const ERL_NIF_TERM *el;
    int arity;
    cx_param shape;
    if (!enif_get_tuple(env, term, &arity, &el) || arity != 2 ||
        !get_dtype(env, el[0], &d->dtype) || !get_ints(env, el[1], &shape) || shape.n > CX_MAX_RANK)
        return false;
    d->rank = shape.n;
    for (int k = 0; k < d->rank; k++) {
        if (shape.i[k] < 0 || shape.i[k] > (INT64_C(1) << 48)) return false;
        d->shape[k] = shape.i[k];
    }
    return true;
}

/* Reads a list of at most `max` small non-negative integers. */
static int get_slots(ErlNifEnv *env, ERL_NIF_TERM list, int *out, int max) {
    unsigned len;
    if (!enif_get_list_length(env, list, &len) || (int)len > max) return -1;
    ERL_NIF_TERM head;
    int n = 0;
    while (enif_get_list_cell(env, list, &head, &list))
        if (!enif_get_int(env, head, &out[n++]) || out[n - 1] < 0) return -1;
    return n;
}

/* program_new(device_id, [{type, shape}], [const_ref], [{op_id, [slot], params}], [slot],
 * [donated input slot]): plans every step once; raises naming the step that cannot run. */
static ERL_NIF_TERM program_new_nif(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[]) {
    (void)argc;
    int dev_id;
    cx_device *dev;
    unsigned n_in, n_consts, n_steps, n_out;
    char msg[320];
    if (!enif_get_int(env, argv[0], &dev_id) || !(dev = cx_device_get(dev_id)))
        return raise_arg(env, "Cascade.Native.program_new/5: unknown device id");
    if (!enif_get_list_length(env, argv[1], &n_in) ||
        !enif_get_list_length(env, argv[2], &n_consts) ||
        !enif_get_list_length(env, argv[3], &n_steps) ||
        !enif_get_list_length(env, argv[4], &n_out) || n_in > (1u << 20) || n_consts > (1u << 20) ||
        n_steps > (1u << 24) || n_out > n_steps)
        return raise_arg(env, "Cascade.Native.program_new/5: expected four lists");
    program_res *r = enif_alloc_resource(program_type, sizeof(program_res));
    if (!r) return raise_arg(env, "out of memory");
    memset(r, 0, sizeof *r);
    cx_desc *descs = enif_alloc(sizeof(cx_desc) * (n_in + n_consts + 1));
    int *slots = enif_alloc(sizeof(int) * (n_out + 1));
    r->consts = enif_alloc(sizeof(cx_tensor *) * (n_consts + 1));
    ERL_NIF_TERM res = 0, head, list = argv[1];
    bool ok = descs && slots && r->consts;
    if (!ok) res = raise_arg(env, "out of memory");
    for (unsigned k = 0; ok && enif_get_list_cell(env, list, &head, &list); k++)
        if (!get_desc(env, head, &descs[k])) {
            enif_snprintf(msg, sizeof msg, "program: input %u: expected {type, shape}, got: %T", k,
                          head);
            res = raise_arg(env, msg), ok = false;
        }
    list = argv[2];
    for (unsigned k = 0; ok && enif_get_list_cell(env, list, &head, &list); k++) {
        cx_tensor *t;
        value_view room;
        if (!get_tensor(env, head, &t, &room)) {
            res = raise_not_tensor(env, head,
                                   "program: a constant is not a Cascade tensor reference"),
            ok = false;
            break;
        }
        if (t->device != dev) {
            snprintf(msg, sizeof msg, "program: constant %u lives on %s, the program runs on %s", k,
                     t->device->name, dev->name);
            res = raise_arg(env, msg), ok = false;
            break;
        }
        if (t == &room.t) { /* a value: the program keeps a tensor of its own */
            cx_status vst = {CX_OK, ""};
            if (!(t = resource_holding(dev, &room.t.desc, room.t.data, room.t.nbytes, &vst))) {
                res = vst.code == CX_OK ? raise_arg(env, "out of memory")
                                        : raise_status(env, &vst, dev->driver_name);
                ok = false;
                break;
            }
        } else {
            enif_keep_resource(t);
        }
        r->consts[r->n_consts++] = t;
        descs[n_in + k] = t->desc;
    }
    cx_status st = {CX_OK, ""};
    if (ok &&
        cx_program_init(&r->prog, dev, descs, (int)n_in, descs + n_in, (int)n_consts, &st) != CX_OK)
        res = raise_status(env, &st, NULL), ok = false;
    list = argv[3];
    for (unsigned k = 0; ok && enif_get_list_cell(env, list, &head, &list); k++) {
        const ERL_NIF_TERM *el;
        int arity, op, in[CX_MAX_INPUTS], n;
        cx_params ps;
        char why[160];
        if (!enif_get_tuple(env, head, &arity, &el) || arity != 3 ||
            !enif_get_int(env, el[0], &op) || op < 0 || op >= CX_OP_COUNT ||
            (n = get_slots(env, el[1], in, CX_MAX_INPUTS)) < 0) {
            enif_snprintf(msg, sizeof msg, "program: step %u: expected {op_id, [slot], params}", k);
            res = raise_arg(env, msg), ok = false;
        } else if (!get_params(env, el[2], &ps, why, sizeof why)) {
            snprintf(msg, sizeof msg, "program: step %u (%s): %s", k, cx_op_table[op].name, why);
            res = raise_arg(env, msg), ok = false;
        } else if (cx_program_add(&r->prog, (cx_op_id)op, in, n, &ps, &st) < 0) {
            res = raise_status(env, &st, NULL), ok = false;
        }
    }
    int n = ok ? get_slots(env, argv[4], slots, (int)n_out) : 0;
    if (ok && n < 0) res = raise_arg(env, "program: expected a list of result slots"), ok = false;
    unsigned n_donated = 0;
    int *donated = NULL, nd = -1;
    if (ok) {
        if (enif_get_list_length(env, argv[5], &n_donated) && n_donated <= n_in &&
            (donated = enif_alloc(sizeof(int) * (n_donated + 1))))
            nd = get_slots(env, argv[5], donated, (int)n_donated);
        if (nd < 0)
            res = raise_arg(env, "program: expected a list of donated input slots"), ok = false;
        else if (cx_program_donate(&r->prog, donated, nd, &st) != CX_OK)
            res = raise_arg(env, st.message), ok = false;
    }
    if (donated) enif_free(donated);
    if (ok && cx_program_finish(&r->prog, slots, n, &st) != CX_OK)
        res = raise_status(env, &st, NULL), ok = false;
    if (ok) res = enif_make_resource(env, r);
    enif_release_resource(r); /* the destructor frees what was built on failure */
    enif_free(descs);
    enif_free(slots);
    return res;
}

/* program_run(program, [ref]): the results as make_tensor's tuples, in a list (itself wrapped
 * in {:cascade_gc, list} when the device asks for a collection). */
static ERL_NIF_TERM program_run_call(ErlNifEnv *env, program_res *r, const ERL_NIF_TERM argv[]) {
    const cx_program *p = &r->prog;
    cx_tensor **in = enif_alloc(sizeof(cx_tensor *) * ((size_t)p->n_inputs + 1));
    value_view *rooms = enif_alloc(sizeof(value_view) * ((size_t)p->n_inputs + 1));
    cx_tensor *out = enif_alloc(sizeof(cx_tensor) * ((size_t)p->n_out + 1));
    ERL_NIF_TERM res, head, list = argv[1];
    if (!in || !rooms || !out) {
        res = raise_arg(env, "out of memory");
        goto done;
    }
    int n = 0;
    for (; n < p->n_inputs && enif_get_list_cell(env, list, &head, &list); n++)
        if (!get_tensor(env, head, &in[n], &rooms[n])) {
            res =
                raise_not_tensor(env, head, "program: an input is not a Cascade tensor reference");
            goto done;
        }
    if (n != p->n_inputs || !enif_is_empty_list(env, list)) {
        res = raise_arg(env, "program: wrong number of inputs");
        goto done;
    }
    cx_status st = {CX_OK, ""};
    if (cx_program_run(p, in, r->consts, out, &st) != CX_OK) {
        res = raise_status(env, &st, p->dev->driver_name);
        goto done;
    }
    res = enif_make_list(env, 0);
    bool oom = false;
    for (int k = p->n_out - 1; k >= 0; k--) {
        /* a small result on a host device comes back as a value, as an op's does */
        if (!oom && value_fits_desc(out[k].device, &out[k].desc)) {
            ERL_NIF_TERM term = value_term(env, out[k].device, &out[k].desc, out[k].data);
            cx_tensor_free(&out[k]);
            if (term)
                res = enif_make_list_cell(env, term, res);
            else
                oom = true;
            continue;
        }
        cx_tensor *t = oom ? NULL : enif_alloc_resource(tensor_type, sizeof(cx_tensor));
        if (!t) {
            oom = true;
            cx_tensor_free(&out[k]);
            continue;
        }
        memcpy(t, &out[k], sizeof(cx_tensor));
        res = enif_make_list_cell(env, tensor_term(env, t), res);
    }
    res = with_warnings(env, oom ? enif_make_tuple2(env, am_oom, enif_make_atom(env, "resource"))
                                 : with_gc(env, p->dev, res));
done:
    enif_free(in);
    enif_free(rooms);
    enif_free(out);
    return res;
}

static ERL_NIF_TERM program_run_dirty(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[]) {
    (void)argc;
    program_res *r;
    if (!enif_get_resource(env, argv[0], program_type, (void **)&r))
        return raise_arg(env, "program: not a program");
    return program_run_call(env, r, argv);
}

static ERL_NIF_TERM program_run_nif(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[]) {
    program_res *r;
    if (!enif_get_resource(env, argv[0], program_type, (void **)&r))
        return raise_arg(env, "Cascade.Native.program_run/2: not a program");
    /* on a device that queues work a program's steps may wait for room */
    if (r->prog.cost > nw_dirty_cost() || cx_device_queues(r->prog.dev))
        return enif_schedule_nif(env, "program_run_dirty", dirty_kind(r->prog.dev),
                                 program_run_dirty, argc, argv);
    ERL_NIF_TERM res = program_run_call(env, r, argv);
    consume_slice(env, r->prog.cost);
    return res;
}

/* program_loop(cond, cond_pick, body, [body_pick], [state_ref]): cx_program_loop on the state
 * until the condition is false; the state reached, as tensor references in a list (their
 * types and shapes are the state's; in {:cascade_gc, list} when the device asks for a
 * collection), or {:cascade_loop, list} when the loop is not done but the device asks for a
 * collection first: the caller collects and calls again with that state. A loop whose turn is
 * estimated above the dirty threshold runs on a dirty scheduler, 20 ms of turns a call; a cheaper
 * one runs turns for about a millisecond a call on the normal scheduler; either goes on from the
 * state reached (enif_schedule_nif) until it ends. */
#define LOOP_MAX_STATE 4096
#define LOOP_TURNS     8
#define LOOP_SLICE_US  1000
#define LOOP_DIRTY_US  20000

static ERL_NIF_TERM program_loop_call(ErlNifEnv *env, const ERL_NIF_TERM argv[], bool dirty);
/* the entry point through the watch (below), which each yielded call goes through again */
static ERL_NIF_TERM program_loop_nif_watched(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[]);

static ERL_NIF_TERM program_loop_dirty(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[]) {
    (void)argc;
    return program_loop_call(env, argv, true);
}

static ERL_NIF_TERM program_loop_nif(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[]) {
    (void)argc;
    return program_loop_call(env, argv, false);
}

static ERL_NIF_TERM program_loop_call(ErlNifEnv *env, const ERL_NIF_TERM argv[], bool dirty) {
    program_res *c, *b;
    int cond_pick;
    unsigned n, n_picks;
    if (!enif_get_resource(env, argv[0], program_type, (void **)&c) ||
        !enif_get_int(env, argv[1], &cond_pick) ||
        !enif_get_resource(env, argv[2], program_type, (void **)&b) ||
        !enif_get_list_length(env, argv[3], &n_picks) || !enif_get_list_length(env, argv[4], &n) ||
        n != n_picks || n > LOOP_MAX_STATE)
        return raise_arg(env, "Cascade.Native.program_loop/5: expected a program, a pick, a "
                              "program, a list of picks and a list of as many tensors");
    double turn_cost = c->prog.cost + b->prog.cost;
    if (!dirty && (turn_cost > nw_dirty_cost() || cx_device_queues(b->prog.dev)))
        return enif_schedule_nif(env, "program_loop_dirty", dirty_kind(b->prog.dev),
                                 program_loop_dirty, 5, argv);
    size_t m = n > 0 ? n : 1;
    int *picks = enif_alloc(sizeof(int) * m);
    cx_tensor **state = enif_alloc(sizeof(cx_tensor *) * m);
    bool *owned = enif_alloc(sizeof(bool) * m);
    ERL_NIF_TERM *terms = enif_alloc(sizeof(ERL_NIF_TERM) * m);
    value_view *rooms = enif_alloc(sizeof(value_view) * m);
    ERL_NIF_TERM res, head, list = argv[3], refs = argv[4];
    if (!picks || !state || !owned || !terms || !rooms) {
        res = raise_arg(env, "out of memory");
        goto done;
    }
    for (unsigned k = 0; k < n; k++) {
        enif_get_list_cell(env, list, &head, &list);
        if (!enif_get_int(env, head, &picks[k])) {
            res = raise_arg(env, "program_loop: a pick is not an integer");
            goto done;
        }
        enif_get_list_cell(env, refs, &terms[k], &refs);
        if (!get_tensor(env, terms[k], &state[k], &rooms[k])) {
            res = raise_not_tensor(env, terms[k],
                                   "program_loop: a state value is not a Cascade tensor reference");
            goto done;
        }
        owned[k] = false;
    }
    /* turns for about a millisecond on a normal scheduler, LOOP_DIRTY_US on a dirty one (a few
     * turns at a time, between which it reads the clock: the estimated costs leave out the
     * fixed cost of a step, which is all a cheap turn costs); then the call goes on from the
     * state reached, so that a loop that never ends can still be killed between slices */
    bool finished = false;
    cx_status st = {CX_OK, ""};
    cx_code rc;
    ErlNifTime start = enif_monotonic_time(ERL_NIF_USEC);
    do {
        rc = cx_program_loop(&c->prog, c->consts, cond_pick, &b->prog, b->consts, picks, (int)n,
                             state, owned, dirty ? 1 : LOOP_TURNS, &finished, &st);
    } while (rc == CX_OK && !finished &&
             enif_monotonic_time(ERL_NIF_USEC) - start < (dirty ? LOOP_DIRTY_US : LOOP_SLICE_US));
    /* the values the loop made become resources (once each, however many positions hold them),
     * or are freed on failure */
    bool oom = false;
    for (unsigned k = 0; k < n; k++) {
        if (!owned[k]) continue;
        unsigned first = 0;
        while (first < k && !(owned[first] && state[first] == state[k])) first++;
        if (first < k) {
            terms[k] = terms[first];
            continue;
        }
        if (rc == CX_OK && !oom && value_fits_desc(state[k]->device, &state[k]->desc)) {
            /* a small result on a host device comes back as a value, as an op's does */
            terms[k] = value_binary(env, state[k]->device, &state[k]->desc, state[k]->data);
            oom = !terms[k];
            cx_tensor_free(state[k]);
            free(state[k]);
            continue;
        }
        cx_tensor *t =
            rc == CX_OK && !oom ? enif_alloc_resource(tensor_type, sizeof(cx_tensor)) : NULL;
        if (t) {
            memcpy(t, state[k], sizeof(cx_tensor));
            terms[k] = enif_make_resource(env, t);
            enif_release_resource(t);
        } else {
            oom = rc == CX_OK;
            cx_tensor_free(state[k]);
        }
        free(state[k]);
    }
    if (rc != CX_OK) {
        res = raise_status(env, &st, b->prog.dev->driver_name);
        goto done;
    }
    if (oom) {
        res = enif_make_tuple2(env, am_oom, enif_make_atom(env, "resource"));
        goto done;
    }
    ERL_NIF_TERM out = enif_make_list_from_array(env, terms, n);
    if (finished) {
        res = with_warnings(env, with_gc(env, b->prog.dev, out));
    } else if (cx_device_wants_gc(b->prog.dev) != CX_GC_NONE) {
        /* the states of earlier slices, resources now garbage, hold device memory: back to the
         * caller, which collects and calls again with the state reached */
        res = enif_make_tuple2(env, am_loop, out);
    } else {
        /* yield, and go on from the state reached */
        ERL_NIF_TERM next[5] = {argv[0], argv[1], argv[2], argv[3], out};
        enif_consume_timeslice(env, 100);
        res = dirty ? enif_schedule_nif(env, "program_loop_dirty", dirty_kind(b->prog.dev),
                                        program_loop_dirty, 5, next)
                    : enif_schedule_nif(env, "program_loop", 0, program_loop_nif_watched, 5, next);
    }
done:
    enif_free(picks);
    enif_free(state);
    enif_free(owned);
    enif_free(terms);
    enif_free(rooms);
    return res;
}

/* program_steps(program): [{op, route, library | nil, type, shape, reason, [slot], [fused op],
 * donated slot | nil}] per step that runs (steps folded into others are left out); the list of
 * ops names a fused step's chain, or the chain another op runs as its epilogue, in order (the
 * epilogue's inputs are the slots after the op's own); the donated slot is the input whose buffer
 * the step writes its result into */
static ERL_NIF_TERM program_steps_nif(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[]) {
    (void)argc;
    program_res *r;
    if (!enif_get_resource(env, argv[0], program_type, (void **)&r))
        return raise_arg(env, "Cascade.Native.program_steps/1: not a program");
    ERL_NIF_TERM list = enif_make_list(env, 0);
    for (int k = r->prog.n_steps - 1; k >= 0; k--) {
        const cx_prog_step *s = &r->prog.steps[k];
        if (s->dead) continue;
        ERL_NIF_TERM in = enif_make_list(env, 0);
        for (int j = s->n_in - 1; j >= 0; j--)
            in = enif_make_list_cell(env, enif_make_int(env, s->in[j]), in);
        ERL_NIF_TERM fused = enif_make_list(env, 0);
        const cx_param *code = s->plan.op == CX_OP_FUSED ? cx_param_get(&s->ps, CX_P_CODE)
                                                         : cx_param_get(&s->ps, CX_P_EPILOGUE);
        for (int j = code ? code->n / 3 - 1 : -1; j >= 0; j--)
            fused = enif_make_list_cell(env, am_op_name[code->i[3 * j]], fused);
        ERL_NIF_TERM row[9] = {am_op_name[s->plan.op],
                               am_route[s->plan.route],
                               s->plan.library ? make_string(env, s->plan.library) : am_nil,
                               make_type(env, s->plan.out.dtype),
                               make_shape(env, &s->plan.out),
                               make_string(env, s->plan.reason),
                               in,
                               fused,
                               s->alias ? enif_make_int(env, s->alias - 1) : am_nil};
        list = enif_make_list_cell(env, enif_make_tuple_from_array(env, row, 9), list);
    }
    return list;
}

/* The BEAM sets malloc's trim threshold and top pad at start (mallopt(M_TRIM_THRESHOLD, 128 KiB),
 * mallopt(M_TOP_PAD, 0): seen with an LD_PRELOAD shim), and any such call stops glibc from
 * raising its mmap threshold (128 KiB) as large blocks are freed. Every malloc of 128 KiB or more
 * inside the BEAM is then a fresh mapping, faulted in page by page and unmapped when freed: the
 * libraries under the blas driver allocate scratch on each call (oneDNN's sgemm: 0.4-1.6 MB per
 * thread per 1024 x 1024 product, strace: three mmap/munmap pairs a thread a call), and the
 * product's thread spent 10% of its time in page faults (perf, Intel Xeon). These are the values
 * glibc's own adaptation stops at (an mmap threshold of 32 MiB on 64-bit, trim at twice that), as
 * in any process that leaves mallopt alone; `config :cascade, malloc_tuning: false` keeps the
 * BEAM's. Cascade's own tensors of 2 MiB or more are mapped by its buffer cache either way. */
static void tune_malloc(void) {
#if defined(__GLIBC__)
    mallopt(M_MMAP_THRESHOLD, 32 << 20);
    mallopt(M_TRIM_THRESHOLD, 64 << 20);
#endif
}

static int init(ErlNifEnv *env, ErlNifResourceFlags flags, ERL_NIF_TERM info) {
    cx_status st = {CX_OK, ""};
    cx_driver_spec specs[CX_MAX_DEVICES];
    char names[CX_MAX_DEVICES][24], paths[CX_MAX_DEVICES][1024];
    int n = 0;
    ERL_NIF_TERM list, head, value;
    if (enif_is_map(env, info) &&
        enif_get_map_value(env, info, enif_make_atom(env, "drivers"), &list)) {
        while (n < CX_MAX_DEVICES && enif_get_list_cell(env, list, &head, &list)) {
            int arity;
            const ERL_NIF_TERM *el;
            ErlNifBinary path;
            if (!enif_get_tuple(env, head, &arity, &el) || arity != 2 ||
                !enif_get_atom(env, el[0], names[n], sizeof names[n], ERL_NIF_LATIN1) ||
                !enif_inspect_binary(env, el[1], &path) || path.size >= sizeof paths[n])
                return 1;
            memcpy(paths[n], path.data, path.size);
            paths[n][path.size] = 0;
            specs[n] = (cx_driver_spec){names[n], paths[n]};
            n++;
        }
    }
    if (!nw_init() || cx_devices_init(specs, n, &st) != CX_OK) return 1;
    ErlNifResourceType *type =
        enif_open_resource_type(env, NULL, "cascade_tensor", tensor_dtor, flags, NULL);
    if (!type) return 1;
    tensor_type = type;
    program_type = enif_open_resource_type(env, NULL, "cascade_program", program_dtor, flags, NULL);
    if (!program_type) return 1;
    am_ok = enif_make_atom(env, "ok");
    am_true = enif_make_atom(env, "true");
    am_false = enif_make_atom(env, "false");
    am_nil = enif_make_atom(env, "nil");
    am_struct = enif_make_atom(env, "__struct__");
    am_exception = enif_make_atom(env, "__exception__");
    am_message = enif_make_atom(env, "message");
    am_code = enif_make_atom(env, "code");
    am_driver = enif_make_atom(env, "driver");
    am_argument_error = enif_make_atom(env, "Elixir.ArgumentError");
    am_cascade_error = enif_make_atom(env, "Elixir.Cascade.Error");
    am_gc = enif_make_atom(env, "cascade_gc");
    am_gc_major = enif_make_atom(env, "cascade_gc_major");
    am_gc_first = enif_make_atom(env, "cascade_gc_first");
    am_gc_major_first = enif_make_atom(env, "cascade_gc_major_first");
    am_loop = enif_make_atom(env, "cascade_loop");
    am_oom = enif_make_atom(env, "cascade_oom");
    am_nan = enif_make_atom(env, "nan");
    am_infinity = enif_make_atom(env, "infinity");
    am_neg_infinity = enif_make_atom(env, "neg_infinity");
    for (int t = 0; t < CX_DTYPE_COUNT; t++) {
        const char *name = cx_dtype_name((cx_dtype)t);
        am_dtype_name[t] = enif_make_atom(env, name);
        am_dtype_kind[t] = enif_make_atom_len(env, name, t == CX_BF16 ? 2 : 1);
    }
    for (int k = 0; k < CX_PARAM_COUNT; k++)
        am_param[k] = enif_make_atom(env, cx_param_table[k].name);
    for (int k = 0; k < cx_device_count(); k++)
        am_driver_name[k] = enif_make_atom(env, cx_device_get(k)->driver_name);
    for (int k = 0; k < CX_OP_COUNT; k++) am_op_name[k] = enif_make_atom(env, cx_op_table[k].name);
    am_transfer = enif_make_atom(env, "transfer");
    am_op_name[CX_OP_COUNT] = am_transfer;
    for (int r = 0; r < CX_ROUTE_COUNT; r++)
        am_route[r] = enif_make_atom(env, cx_route_name((cx_route)r));
    am_warn = enif_make_atom(env, "warn");
    am_cascade_warn = enif_make_atom(env, "cascade_warn");
    am_shape_dependent = enif_make_atom(env, "shape_dependent");
    am_allow = enif_make_atom(env, "allow");
    am_error = enif_make_atom(env, "error");
    am_async = enif_make_atom(env, "cascade_async");
    am_download = enif_make_atom(env, "cascade_download");
    cx_policy p;
    if (enif_is_map(env, info) &&
        enif_get_map_value(env, info, enif_make_atom(env, "fallback"), &value) &&
        get_policy(env, value, &p))
        cx_set_policy(p);
    if (!(enif_is_map(env, info) &&
          enif_get_map_value(env, info, enif_make_atom(env, "malloc_tuning"), &value) &&
          enif_is_identical(value, enif_make_atom(env, "false"))))
        tune_malloc();
    return 0;
}

static int load(ErlNifEnv *env, void **priv, ERL_NIF_TERM info) {
    (void)priv;
    return init(env, ERL_NIF_RT_CREATE, info);
}

static int upgrade(ErlNifEnv *env, void **priv, void **old_priv, ERL_NIF_TERM info) {
    (void)priv;
    (void)old_priv;
    return init(env, ERL_NIF_RT_CREATE | ERL_NIF_RT_TAKEOVER, info);
}

/* Every entry point runs on a normal scheduler first: each goes through the watch
 * (normal_watch.h), which costs one atomic load while it is off. */
static const char *op_name_of(ErlNifEnv *env, const ERL_NIF_TERM argv[]) {
    int id;
    return enif_get_int(env, argv[0], &id) && id >= 0 && id < CX_OP_COUNT ? cx_op_table[id].name
                                                                          : NULL;
}

/* Every NIF once: its name in Cascade.Native, its arity, its C function and what names a call
 * in the watch's records (NULL: the NIF's name alone). Each runs through the watch. */
#define CASCADE_NIFS(X)                                                                            \
    X("op", 5, op_nif, op_name_of)                                                                 \
    X("from_binary", 4, from_binary_nif, NULL)                                                     \
    X("to_binary", 3, to_binary_nif, NULL)                                                         \
    X("async_downloads", 0, async_downloads_nif, NULL)                                             \
    X("free", 1, free_nif, NULL)                                                                   \
    X("freed?", 1, freed_nif, NULL)                                                                \
    X("memory", 0, memory_nif, NULL)                                                               \
    X("devices", 0, devices_nif, NULL)                                                             \
    X("ops", 0, ops_nif, NULL)                                                                     \
    X("set_gc_interval", 1, set_gc_interval_nif, NULL)                                             \
    X("set_reproducible", 1, set_reproducible_nif, NULL)                                           \
    X("explain", 4, explain_nif, op_name_of)                                                       \
    X("capabilities", 1, capabilities_nif, NULL)                                                   \
    X("stats", 0, stats_nif, NULL)                                                                 \
    X("reset_stats", 0, reset_stats_nif, NULL)                                                     \
    X("set_policy", 1, set_policy_nif, NULL)                                                       \
    X("transfer", 3, transfer_nif, NULL)                                                           \
    X("program_new", 6, program_new_nif, NULL)                                                     \
    X("program_run", 2, program_run_nif, NULL)                                                     \
    X("program_steps", 1, program_steps_nif, NULL)                                                 \
    X("program_loop", 5, program_loop_nif, NULL)

#define WATCHED(name, arity, fn, detail)                                                           \
    static ERL_NIF_TERM fn##_watched(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[]) {        \
        return nw_run(name, fn, detail, env, argc, argv);                                          \
    }
CASCADE_NIFS(WATCHED)
#undef WATCHED

#define ENTRY(name, arity, fn, detail) {name, arity, fn##_watched, 0},
static ErlNifFunc nif_funcs[] = {CASCADE_NIFS(ENTRY)
                                 /* the watch's own controls, not watched */
                                 {"watch_normal", 1, nw_watch_nif, 0},
                                 {"normal_records", 0, nw_records_nif, 0},
                                 {"set_dirty_thresholds", 2, nw_set_thresholds_nif, 0}};
#undef ENTRY

ERL_NIF_INIT(Elixir.Cascade.Native, nif_funcs, load, NULL, upgrade, NULL)
