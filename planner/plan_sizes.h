/* plan_sizes.h — the static sizes of one setup per rank: parameters, gradients and optimizer
 * state as each strategy shards them (per flat unit, or FSDP2's per-tensor dim 0), the units, and
 * what CPU offload moves off the GPU. The step's rules and the host-memory model read them.
 * docs/formulas.md "Strategies", "FSDP2 buffers" (padding), "Offload and host memory". */
#ifndef PLAN_SIZES_H
#define PLAN_SIZES_H

#include <stdint.h>
#include "plan_gpu.h"
#include "plan_model.h"
#include "plan_strategy.h"
#include "plan_train.h"

/* Static sizes of one setup (per rank, bytes), shared with the communication model. */
typedef struct {
    int64_t n;                   /* shard group size */
    double psi;                  /* Ψ, parameters */
    double psi_shard;            /* Σ_u ceil(P_u / n): local elements when sharded */
    double params, grads, optimizer;     /* steady-state bytes */
    double largest_unit;         /* elements of the largest non-root unit */
    double largest_any;          /* elements of the largest layer, root layers included */
    double root_unit;            /* elements of the FSDP root unit (outside blocks) */
    double root_shard;           /* the root's local shard: ceil(root_unit / n), FSDP2 per tensor */
    double frozen;               /* bytes of frozen parameters (LoRA's base, --freeze) held whole by
                                    each rank, in params (strategies that shard no parameters) */
    /* frozen parameters under parameter sharding (FSDP2 shards and gathers them, reduces none):
       their local shard in all (elements), the root unit's elements and local shard */
    double frozen_shard, root_frozen, root_frozen_shard;
    int dim0;                    /* 1: FSDP2 shards padded per tensor's dim 0 (plan_fsdp2_dim0_rows);
                                    0: per flat unit (FSDP1, ZeRO, dim 0 unknown) */
} MemSizes;

void plan_memory_sizes(const ModelSpec *m, const TrainSpec *t, const ClusterSpec *c,
                       StrategyKind s, MemSizes *out);

#endif
