/* plan_time.h — what a plan's times rest on: the label each strategy's simulated step carries
 * ("published" where published GPU runs of that setup back the model, bench/published; else
 * "estimate") and the achieved model FLOPs utilization. docs/formulas.md "Time". */
#ifndef PLAN_TIME_H
#define PLAN_TIME_H

#include "plan_gpu.h"
#include "plan_model.h"
#include "plan_strategy.h"
#include "plan_train.h"

typedef struct {
    int published;       /* 1: the setup is of a kind the published table backs */
    const char *why;     /* one clause: what backs it, or the first way it differs from them */
} TimeBasis;

/* The published runs (bench/published, bench/published_check.py) are FSDP FULL_SHARD and
 * SHARD_GRAD_OP runs of dense decoders in bf16 with SDPA/flash attention on 8-512 A100 40/80GB
 * and H100 80GB, checkpointing none, full or every 2nd block, sequences 512-65536: such a setup
 * under the per-operation model is "published", anything else an "estimate". */
TimeBasis plan_time_basis(const ModelSpec *m, const TrainSpec *t, const ClusterSpec *c, StrategyKind k);
const char *plan_time_basis_name(const TimeBasis *b);   /* "published" or "estimate" */
/* Achieved model FLOPs utilization: the step's model FLOPs (forward + backward, no recompute)
 * over the step's seconds at the precision's dense peak; 0 when unknown. */
double plan_time_mfu(const ClusterSpec *c, const TrainSpec *t, double flops_per_step, double step_s);
/* The published table's held-out median |error| (%), as bench/published_check.py last printed it. */
#define PLAN_PUBLISHED_HELDOUT_ERR 3.5
#define PLAN_PUBLISHED_HELDOUT_ROWS 160

#endif
