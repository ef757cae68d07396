/* The dispatcher: the negotiation. For an op on a device:
 *
 *   native      the device's driver claims the op for these types (and shapes): it runs there;
 *   decomposed  the op is a composite the device does not claim: its decomposition runs on the
 *               same device, each step negotiated again (graph.h);
 *   cpu_fallback a primitive the device cannot run, or a composite none of whose steps the
 *               device runs natively: the inputs are copied to the cpu device once, the op
 *               runs there and the result is copied back — subject to the fallback policy.
 *
 * The driver's answer for (device, op, input types, ranks) is memoized; every op that runs is
 * counted per (device, op, route) with the bytes it moved (stats). */
#ifndef CX_DISPATCH_H
#define CX_DISPATCH_H

#include "tensor.h"

typedef enum { CX_ROUTE_NATIVE, CX_ROUTE_DECOMPOSED, CX_ROUTE_FALLBACK, CX_ROUTE_COUNT } cx_route;

const char *cx_route_name(cx_route r); /* "native", "decomposed", "cpu_fallback" */

typedef enum { CX_POLICY_ALLOW, CX_POLICY_WARN, CX_POLICY_ERROR } cx_policy;

/* What running a fallback costs the caller: copy silently, copy and report once per (device,
 * op, type, reason), or refuse with CX_EUNSUPPORTED before any data moves. */
void cx_set_policy(cx_policy p);
cx_policy cx_get_policy(void);

typedef struct {
    cx_op_id op;
    cx_device *device; /* where the inputs live and the result will */
    cx_route route;
    cx_desc out;
    cx_dtype compute[CX_MAX_INPUTS];
    /* Rough count of element operations: decides where the NIF layer runs the op. */
    double cost;
    char reason[192];    /* why the route is not native */
    const char *library; /* what runs it: the driver's answer (driver.h), the cpu's on fallback */
} cx_plan;

/* Checks the op on these inputs (or, for creation ops, on `device`), normalises `ps` and
 * chooses the route. Inputs must all live on one device. */
cx_code cx_plan_op(cx_op_id op, cx_device *device, const cx_tensor *const *in, int n_in,
                   cx_params *ps, cx_plan *plan, cx_status *st);

/* cx_plan_op on descriptions of the inputs, all on `device` (Cascade.Compiler's programs plan
 * each step once, before any tensor exists). */
cx_code cx_plan_descs(cx_op_id op, cx_device *device, const cx_desc *in, int n_in, cx_params *ps,
                      cx_plan *plan, cx_status *st);

/* Whether the device's driver queues work that a call may wait for (driver.h: may_block). */
bool cx_device_queues(const cx_device *dev);
/* Whether an upload to the device, or a synchronous download from it, may wait now for work it
 * has queued. False for NULL. */
bool cx_device_may_block(const cx_device *dev);
/* Whether running `plan` on these inputs may wait for its device: a native route asks the
 * driver; any other route on a device that queues work may read results back synchronously,
 * so it may. False on devices whose drivers never wait. */
bool cx_plan_may_block(const cx_plan *plan, const cx_tensor *const *in, int n_in,
                       const cx_params *ps);

/* Runs a plan: pins the inputs and runs the route. On failure `out` holds no buffer. */
cx_code cx_run_plan(const cx_plan *plan, cx_tensor *const *in, int n_in, const cx_params *ps,
                    cx_tensor *out, cx_status *st);
/* cx_run_plan for a native plan whose result `out` already holds a buffer of the plan's type and
 * shape (a program's donated input: in[] may be `out` itself, read and written in place, which
 * elementwise kernels allow). On failure out's buffer is freed. */
cx_code cx_run_plan_into(const cx_plan *plan, cx_tensor *const *in, int n_in, const cx_params *ps,
                         cx_tensor *out, cx_status *st);

/* cx_plan_op then cx_run_plan. */
cx_code cx_run(cx_op_id op, cx_device *device, cx_tensor *const *in, int n_in, cx_params *ps,
               cx_tensor *out, cx_status *st);

/* ---- explain: the plan of an op as a tree, without running anything ---------------------- */

typedef struct {
    int depth; /* 0 for the op asked about, 1 for the steps of its decomposition, ... */
    cx_op_id op;
    cx_device *device;
    cx_route route;
    cx_desc out;
    long long bytes_moved; /* cpu_fallback: bytes copied to the cpu and back */
    bool shape_dependent;  /* capabilities: native for some shapes only (refine decides) */
    char reason[192];
    const char *library; /* native and cpu_fallback steps: what runs it (NULL: decomposed) */
} cx_step;

typedef struct {
    cx_step *steps;
    int n, cap;
} cx_explain;

/* Plans op on inputs described by `in` (on `device`) and appends its steps to `ex` (which starts
 * zeroed; release with cx_explain_free). */
cx_code cx_explain_op(cx_op_id op, cx_device *device, const cx_desc *in, int n_in, cx_params *ps,
                      cx_explain *ex, cx_status *st);
void cx_explain_free(cx_explain *ex);
/* Used by graph.c: plans one op at a depth. */
cx_code cx_explain_at(cx_op_id op, cx_device *device, const cx_desc *in, int n_in, cx_params *ps,
                      cx_explain *ex, int depth, cx_desc *out, cx_status *st);

/* ---- capabilities ------------------------------------------------------------------------- */

/* The route `op` takes on `device` when every tensor input has type `t` (indices s64, predicates
 * u8), and for decomposed ops the steps of the decomposition on representative inputs.
 * CX_EINVAL when the op does not accept that type. */
cx_code cx_capability(cx_device *device, cx_op_id op, cx_dtype t, cx_route *route,
                      cx_explain *steps, cx_status *st);

/* ---- stats -------------------------------------------------------------------------------- */

typedef struct {
    long long calls;
    long long bytes; /* moved between devices on this route */
} cx_stat;

/* Counters of the op (or CX_OP_COUNT for explicit transfers) on the device by route. */
cx_stat cx_stats_get(int device_id, int op, cx_route route);
/* The native calls of the op on the device by the library that ran them: up to `max` names
 * and counts; returns how many. */
int cx_stats_libraries(int device_id, int op, const char **names, long long *calls, int max);
void cx_stats_reset(void);
/* Counts an explicit transfer of `bytes` onto device_id. */
void cx_stats_count_transfer(int device_id, long long bytes);

/* ---- warnings under the :warn policy --------------------------------------------------- */

/* Non-zero when fallback reports wait to be taken: a cheap check for the NIF layer. */
int cx_warnings_pending(void);
/* Takes the oldest waiting report into buf; false when none. */
bool cx_warning_take(char *buf, size_t len);

/* ---- transfer ----------------------------------------------------------------------------- */

/* Copies `src` to a new tensor `out` on `to` (through host memory unless one side is host
 * memory). */
cx_code cx_transfer(cx_tensor *src, cx_device *to, cx_tensor *out, cx_status *st);

#endif
