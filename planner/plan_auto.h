/* plan_auto.h — auto mode: pick DDP when it fits (simplest, least traffic), else the
 * least-sharded strategy that fits, then search micro-batch, gradient accumulation (to reach
 * a global batch when one is given) and activation checkpointing for the most predicted
 * tokens/s; explain the choice, and for each strategy that does not fit the cheapest change that
 * would make it fit. Emits a DeepSpeed config or a torchrun command with the wrapping snippet. */
#ifndef PLAN_AUTO_H
#define PLAN_AUTO_H

#include <stdio.h>
#include "plan_plan.h"

typedef struct {
    int64_t global_batch;    /* samples per optimizer step over all GPUs; 0 = keep --grad-accum */
    int64_t bn_min_batch;    /* per-GPU batch below which SyncBN is worth its cost (16) */
    int64_t max_micro_batch; /* search bound (1024) */
    unsigned strategies;     /* candidates (bit per StrategyKind) */
} AutoSpec;

typedef struct {
    int found;
    StrategyKind strategy;
    TrainSpec train;         /* the chosen micro-batch, accumulation, checkpointing */
    MemResult mem;
    CommPlan comm;
    SimResult time;
    long candidates;         /* setups considered (strategy x micro-batch x checkpointing) */
    long evaluated;          /* of those, simulated (the rest were pruned: larger than the largest
                                micro-batch that fits, or not dividing the global batch) */
    char explain[4096];      /* lines, each ending in '\n' */
} AutoResult;

void plan_auto_defaults(AutoSpec *a);
int plan_auto(const ModelSpec *m, const TrainSpec *t, const ClusterSpec *c, const AutoSpec *a,
              AutoResult *out);
/* DeepSpeed config JSON for the choice (caller frees). */
char *plan_auto_deepspeed_json(const ModelSpec *m, const ClusterSpec *c, const AutoResult *r);
/* torchrun command line and the DDP/FSDP wrapping snippet. */
void plan_auto_torch(FILE *f, const ModelSpec *m, const ClusterSpec *c, const AutoResult *r);

#endif
