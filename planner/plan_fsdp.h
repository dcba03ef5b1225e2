/* plan_fsdp.h — FSDP2 (torch.distributed.fsdp.fully_shard, torch 2.15) buffer timeline, what the
 * fsdp-* rows hold with --fsdp 2 on more than one rank: the unsharded parameters of each unit,
 * the flat all-gather output kept for copy-out overlap, the backward prefetch, the reduce-scatter
 * input kept until the next unit's reduction, the root unit left unsharded after forward
 * (fully_shard's default for the root). Units: one per transformer block, the rest in the
 * root. docs/formulas.md "FSDP2 buffers" gives each term with its source and measurement. */
#ifndef PLAN_FSDP_H
#define PLAN_FSDP_H

#include "plan_memory.h"

typedef struct {
    int on;          /* 1: the FSDP2 timeline applies (else the walk's FSDP1 / engine terms) */
    int keep;        /* blocks keep their unsharded parameters after forward
                        (reshard_after_forward=False: fsdp-grad-op) */
    int gather;      /* shard group > 1: all-gathers through a flat output buffer; a shard group
                        of 1 (fsdp-hybrid replicating across every rank) copies the local shard */
    int64_t n;       /* shard group */
    double pb, gb;   /* bytes per element: gathered parameters, unsharded gradients */
    double rb, sb;   /* reduce-scatter input (the reduce dtype) and sharded gradients */
    double root;     /* root unit elements as gathered (padded to n) */
} Fsdp2;

/* 1 when the fsdp-* rows mean FSDP2 with a MixedPrecisionPolicy: the regimes with fp32 master
   weights (mixed-bf16, mixed-fp16) as fully_shard runs them, MixedPrecisionPolicy(param_dtype=
   16-bit, reduce_dtype=fp32), torchtitan's default. The sharded parameters stay fp32 and the
   optimizer steps them directly (no separate master copy): 4 B parameter, 4 B gradient
   (reduce-scatter output in fp32) and the optimizer's states per local element; gathered
   parameters and unsharded gradients are 16-bit, the reduce-scatter input fp32. */
int plan_fsdp2_fp32_shards(const TrainSpec *t, StrategyKind sk);

/* Fills f; f->on = 0 where the FSDP2 timeline does not apply (other strategies, --fsdp 1,
   --impl engine, one rank, models without transformer blocks). With CPUOffloadPolicy the shards
   live on the host and are copied up before each all-gather: the GPU holds the same unsharded
   parameters and buffers, and the sharded gradients leave for the host (the caller's part). */
void plan_fsdp2_setup(Fsdp2 *f, const ModelSpec *m, const TrainSpec *t, const ClusterSpec *c,
                      StrategyKind sk, const MemSizes *z);
/* Elements of layer i's unit as gathered (padded to n): blocks only, 0 for root layers. */
double plan_fsdp2_unit(const Fsdp2 *f, const ModelSpec *m, int i);
/* Communication-buffer bytes (unsharded parameters, flat all-gather outputs, reduce-scatter
   inputs) while layer i runs forward, runs backward, and at block i's reduce-scatter. */
double plan_fsdp2_fwd_comm(const Fsdp2 *f, const ModelSpec *m, int i);
double plan_fsdp2_bwd_comm(const Fsdp2 *f, const ModelSpec *m, int i);
double plan_fsdp2_rs_comm(const Fsdp2 *f, const ModelSpec *m, int i);

#endif
