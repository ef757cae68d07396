/* Watching the normal schedulers: which NIF calls ran long there, and why.
 *
 * A NIF on a normal scheduler must return within about a millisecond. The BEAM's own
 * long_schedule monitor reports a process that held a scheduler too long, but it cannot tell
 * a NIF that computed that long from a VM thread the host took off its core, or from a garbage
 * collection of a large heap. This watch measures the calls themselves: while it is on, every
 * NIF entry point that runs on a normal scheduler records, when its wall time reaches the
 * limit, the wall time, the thread's CPU time and its voluntary and involuntary context
 * switches. CPU time excludes the time the host took the thread away; a voluntary switch
 * means the call blocked (a lock, a condition variable). So a call that holds the scheduler
 * shows CPU time or voluntary switches, and one the host merely preempted shows neither.
 *
 * Off (the default) it costs one relaxed atomic load per call. The scheduling tests turn it on
 * with Cascade.Native.watch_normal/1 and read the records with Cascade.Native.normal_records/0.
 * The thresholds that send a call to a dirty scheduler live here too, so that a test can put
 * them out of reach and see the watch report what then holds the scheduler. */
#ifndef CASCADE_NORMAL_WATCH_H
#define CASCADE_NORMAL_WATCH_H

#include <erl_nif.h>

typedef ERL_NIF_TERM (*nw_nif)(ErlNifEnv *, int, const ERL_NIF_TERM[]);

/* Runs nif, measuring it while the watch is on. name is the NIF's name; detail, when not NULL,
 * names what the call did (the op) and is asked only for a call that is recorded. */
ERL_NIF_TERM nw_run(const char *name, nw_nif nif,
                    const char *(*detail)(ErlNifEnv *, const ERL_NIF_TERM[]), ErlNifEnv *env,
                    int argc, const ERL_NIF_TERM argv[]);

/* Calls above these go to a dirty CPU scheduler: the op's cost estimate (element operations),
 * and the bytes that from_binary, to_binary and transfer copy. */
double nw_dirty_cost(void);
size_t nw_dirty_bytes(void);

int nw_init(void);

/* watch_normal(limit_us | false): records calls of at least limit_us of wall time; false turns
 * the watch off. Clears the records. */
ERL_NIF_TERM nw_watch_nif(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[]);
/* normal_records() -> {[%{nif, detail, pid, wall_us, cpu_us, voluntary, involuntary}], dropped},
 * oldest first; clears them */
ERL_NIF_TERM nw_records_nif(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[]);
/* set_dirty_thresholds(cost, bytes) -> {old_cost, old_bytes}; for tests */
ERL_NIF_TERM nw_set_thresholds_nif(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[]);

#endif
