/* plan_coll.h — the collectives and the phases of a step, described once for every part that
 * names or counts them: the planner's collective table and simulated step, the profiler's
 * counters and CUPTI brackets, the executor's backends, the benches and the validators. Header
 * only, plain C (no CUDA, NCCL or MPI), so each library includes it without linking another.
 *
 * A collective's kind, its name (the JSON's, the tables' and the traces') and its bus factor:
 * the bytes one rank puts on the wire per byte of payload (the full, unsharded buffer), the
 * nccl-tests bus-bandwidth factors (NVIDIA/nccl-tests doc/PERFORMANCE.md: all-reduce 2(n-1)/n,
 * reduce-scatter, all-gather and all-to-all (n-1)/n, broadcast 1); a point-to-point send the
 * whole payload to one peer; a barrier nothing. With one rank nothing crosses a wire.
 * docs/formulas.md "Communication". */
#ifndef PLAN_COLL_H
#define PLAN_COLL_H

#include <stdint.h>
#include <string.h>

/* COLL_SEND_RECV: a transfer to or from one neighbour (pipeline stages).
   COLL_ALL_TO_ALL: every rank sends a block to every other (expert parallelism's dispatch and
   combine: all_to_all_single); its payload is the rank's input buffer (nccl-tests alltoall.cu).
   COLL_ALL_GATHER_V (uneven shards) and COLL_BARRIER: issued by the executor, planned by no rule. */
typedef enum {
    COLL_ALL_REDUCE = 0, COLL_REDUCE_SCATTER, COLL_ALL_GATHER, COLL_BROADCAST, COLL_SEND_RECV,
    COLL_ALL_TO_ALL, COLL_ALL_GATHER_V, COLL_BARRIER, COLL_COUNT
} CollKind;

/* The parts of a step, as the memory account, the collective table, the profiler's counters and
   the executor's tracker name them. */
typedef enum { PHASE_FORWARD = 0, PHASE_BACKWARD, PHASE_STEP, PHASE_COUNT } PhaseKind;

static inline const char *coll_name(CollKind k) {
    static const char *const NAMES[COLL_COUNT] = {"all_reduce", "reduce_scatter", "all_gather", "broadcast",
                                                  "send_recv",  "all_to_all",     "all_gather_v", "barrier"};
    return (unsigned)k < COLL_COUNT ? NAMES[k] : "unknown";
}

/* The kind named name ("all_reduce", ...), or -1. */
static inline int coll_by_name(const char *name) {
    for (int k = 0; name && k < COLL_COUNT; k++)
        if (strcmp(name, coll_name((CollKind)k)) == 0) return k;
    return -1;
}

/* Wire bytes per payload byte for one rank of a group of n. */
static inline double coll_bus_factor(CollKind k, int64_t n) {
    if (n <= 1) return 0;
    double nn = (double)n;
    switch (k) {
    case COLL_ALL_REDUCE: return 2 * (nn - 1) / nn;
    case COLL_REDUCE_SCATTER:
    case COLL_ALL_GATHER:
    case COLL_ALL_GATHER_V:
    case COLL_ALL_TO_ALL: return (nn - 1) / nn;
    case COLL_BROADCAST:
    case COLL_SEND_RECV: return 1;
    default: return 0;   /* a barrier, or not a kind */
    }
}

static inline double coll_wire_bytes(CollKind k, double payload_bytes, int64_t n) {
    return coll_bus_factor(k, n) * payload_bytes;
}

static inline const char *phase_name(PhaseKind p) {
    static const char *const NAMES[PHASE_COUNT] = {"forward", "backward", "step"};
    return (unsigned)p < PHASE_COUNT ? NAMES[p] : "unknown";
}

#endif
