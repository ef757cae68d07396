/* Cascade.Native.op/5's last argument, a set of bits. lib/cascade/op.ex reads the values from
 * this file (each "OP_NAME = value"): they are written once.
 *
 * OP_VALUES: a small result may be a value (not while the compiler records a program: it tells
 * tensors apart by their references, and equal values are one term). OP_GC_FIRST: when the
 * device wants a collection, the call may answer :cascade_gc_first (:cascade_gc_major_first)
 * without running, for the caller to collect and call again (cx_device_wants_gc_before).
 * OP_COLLECTED: the caller has just collected; the result comes without a request (a result of
 * a gc interval or more would ask for a second collection after the one before it). */
#ifndef CASCADE_OP_FLAGS_H
#define CASCADE_OP_FLAGS_H

enum { OP_VALUES = 1, OP_GC_FIRST = 2, OP_COLLECTED = 4 };

#endif
