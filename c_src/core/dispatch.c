#include "dispatch.h"

#include <stdlib.h>
#include <string.h>

/* Relative cost of one element of an op, so that the NIF layer's threshold for moving a call
 * to a dirty scheduler holds for slow functions too. Measured with libm on this project's
 * machine: most elementwise ops take about 1 ns per element, transcendental functions 4-11 ns
 * (sin of huge arguments 45 ns), fmod up to 1.5 us when the exponents are far apart. */
static double work_per_element(cx_op_id op) {
    if (op == CX_OP_REMAINDER) return 256;
    /* Philox: ~6-10 ns per uniform, 25-35 ns per normal (log, sqrt, sin/cos) */
    if (op == CX_OP_RANDOM_NORMAL) return 48;
    if (op == CX_OP_RANDOM_UNIFORM) return 16;
    if (op == CX_OP_POW || cx_op_table[op].kind == CX_KIND_UNARY_FLOAT ||
        cx_op_table[op].kind == CX_KIND_BINARY_FLOAT)
        return 16;
    return 1;
}

cx_code cx_plan_op(cx_op_id op, cx_device *device, const cx_tensor *const *in, int n_in,
                   cx_params *ps, cx_plan *plan, cx_status *st) {
    if ((int)op < 0 || op >= CX_OP_COUNT)
        return cx_fail(st, CX_EINVAL, "unknown op id %d", (int)op);
    if (n_in < 0 || n_in > CX_MAX_INPUTS)
        return cx_fail(st, CX_EINVAL, "%s: expected at most %d tensors, got: %d",
                       cx_op_table[op].name, CX_MAX_INPUTS, n_in);
    cx_desc descs[CX_MAX_INPUTS];
    double cost = 0;
    for (int k = 0; k < n_in; k++) {
        descs[k] = in[k]->desc;
        cost += (double)in[k]->numel;
        if (in[k]->device != in[0]->device)
            return cx_fail(st, CX_EINVAL,
                           "%s: expected all tensors on one device, got %s and %s (use "
                           "Cascade.transfer/2)",
                           cx_op_table[op].name, in[0]->device->name, in[k]->device->name);
    }
    plan->op = op;
    plan->device = n_in > 0 ? in[0]->device : device;
    if (!plan->device) return cx_fail(st, CX_EINVAL, "%s: no device given", cx_op_table[op].name);
    if (cx_op_table[op].infer(op, descs, n_in, ps, &plan->out, plan->compute, st) != CX_OK)
        return st->code;
    double out_n = (double)cx_desc_numel(&plan->out);
    cost += out_n;
    if (op == CX_OP_DOT) {
        /* every output element sums over the contracted size */
        const cx_param *ca = &ps->p[CX_P_CONTRACT_A];
        double k = 1;
        for (int j = 0; j < ca->n; j++) k *= (double)in[0]->desc.shape[ca->i[j]];
        cost += out_n * k;
    }
    plan->cost = cost * work_per_element(op);
    return CX_OK;
}

/* Casts one input to its compute type on the same device, into a temporary tensor. */
static cx_code cast_input(cx_device *dev, cx_tensor *src, cx_dtype to, cx_tensor *tmp,
                          cx_status *st) {
    cx_desc d = src->desc;
    d.dtype = to;
    if (cx_tensor_init(tmp, dev, &d, st) != CX_OK) return st->code;
    cx_params ps = {0};
    cx_param_put_int(&ps, CX_P_TYPE, to);
    const cx_tensor *args[1] = {src};
    if (dev->driver->execute(dev->ctx, CX_OP_AS_TYPE, args, 1, &ps, tmp, st) != CX_OK) {
        cx_tensor_free(tmp);
        return st->code;
    }
    return CX_OK;
}

cx_code cx_run_plan(const cx_plan *plan, cx_tensor *const *in, int n_in, const cx_params *ps,
                    cx_tensor *out, cx_status *st) {
    cx_device *dev = plan->device;
    const cx_tensor *args_small[8];
    cx_tensor *casts_small[8];
    const cx_tensor **args = n_in <= 8 ? args_small : malloc(sizeof(*args) * (size_t)n_in);
    cx_tensor **casts = n_in <= 8 ? casts_small : calloc((size_t)n_in, sizeof(*casts));
    int pinned = 0;
    cx_code rc = CX_OK;
    cx_tensor_clear(out);
    if (!args || !casts) {
        rc = cx_fail(st, CX_ENOMEM, "out of host memory for %d arguments", n_in);
        goto done;
    }
    for (int k = 0; k < n_in; k++) casts[k] = NULL;
    for (; pinned < n_in; pinned++)
        if ((rc = cx_tensor_pin(in[pinned], st)) != CX_OK) goto done;
    /* An empty result needs no work, whatever the inputs: kernels need not walk empty shapes
     * such as {2^48, 0}, which would keep a scheduler busy for days. */
    if (cx_desc_numel(&plan->out) == 0) {
        rc = cx_tensor_init(out, dev, &plan->out, st);
        goto done;
    }
    for (int k = 0; k < n_in; k++) {
        args[k] = in[k];
        if (plan->compute[k] == in[k]->desc.dtype) continue;
        casts[k] = malloc(sizeof(cx_tensor));
        if (!casts[k]) {
            rc = cx_fail(st, CX_ENOMEM, "out of host memory");
            goto done;
        }
        if ((rc = cast_input(dev, in[k], plan->compute[k], casts[k], st)) != CX_OK) {
            free(casts[k]);
            casts[k] = NULL;
            goto done;
        }
        args[k] = casts[k];
    }
    if ((rc = cx_tensor_init(out, dev, &plan->out, st)) != CX_OK) goto done;
    if ((rc = dev->driver->execute(dev->ctx, plan->op, args, n_in, ps, out, st)) != CX_OK)
        cx_tensor_free(out);
done:
    for (int k = 0; k < n_in && casts; k++)
        if (casts[k]) {
            cx_tensor_free(casts[k]);
            free(casts[k]);
        }
    for (int k = 0; k < pinned; k++) cx_tensor_unpin(in[k]);
    if (args != args_small) free(args);
    if (casts != casts_small) free(casts);
    return rc;
}

cx_code cx_run(cx_op_id op, cx_device *device, cx_tensor *const *in, int n_in, cx_params *ps,
               cx_tensor *out, cx_status *st) {
    cx_plan plan;
    if (cx_plan_op(op, device, (const cx_tensor *const *)in, n_in, ps, &plan, st) != CX_OK)
        return st->code;
    return cx_run_plan(&plan, in, n_in, ps, out, st);
}
