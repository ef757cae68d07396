/* The dispatcher: infer, cast the inputs to the compute types, run on the device. The
 * negotiation (decomposition and fallback across devices) grows here. */
#ifndef CX_DISPATCH_H
#define CX_DISPATCH_H

#include "tensor.h"

typedef struct {
    cx_op_id op;
    cx_device *device;
    cx_desc out;
    cx_dtype compute[CX_MAX_INPUTS];
    /* Rough count of element operations: decides where the NIF layer runs the op. */
    double cost;
} cx_plan;

/* Checks the op on these inputs (or, for creation ops, on `device`), normalises `ps` and fills
 * the plan. Inputs must all live on one device. */
cx_code cx_plan_op(cx_op_id op, cx_device *device, const cx_tensor *const *in, int n_in,
                   cx_params *ps, cx_plan *plan, cx_status *st);

/* Runs a plan: pins the inputs, casts what needs casting, allocates `out` and executes.
 * On failure `out` holds no buffer. */
cx_code cx_run_plan(const cx_plan *plan, cx_tensor *const *in, int n_in, const cx_params *ps,
                    cx_tensor *out, cx_status *st);

/* cx_plan_op then cx_run_plan. */
cx_code cx_run(cx_op_id op, cx_device *device, cx_tensor *const *in, int n_in, cx_params *ps,
               cx_tensor *out, cx_status *st);

#endif
