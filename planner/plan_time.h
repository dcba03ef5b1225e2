/* plan_time.h — what a plan's times rest on: the published sources whose runs cover a strategy's
 * setup, each with its leave-one-source-out error (bench/published, `make fit-time`), or "estimate"
 * with the first way the setup differs from every source; and the achieved model FLOPs
 * utilization. docs/formulas.md "Time", docs/validation-time.md. */
#ifndef PLAN_TIME_H
#define PLAN_TIME_H

#include <stddef.h>

#include "plan_gpu.h"
#include "plan_model.h"
#include "plan_strategy.h"
#include "plan_train.h"

/* One published source as `make fit-time` summarised it (planner/plan_time_sources.h, generated):
 * its name, usable runs, and the median |error| of the time model on them with the shares fitted
 * on every other source (held out). */
typedef struct {
    const char *name;
    int rows;
    double held_out_pct;
} PlanTimeSource;
/* One setup its runs had: the GPU preset, strategy, checkpointing (--act-ckpt as the CLI takes
 * it), compute dtype, attention, TP and PP degrees, optimizer offload, and the range of sequences
 * and GPU counts its runs of that setup span. */
typedef struct {
    int source;              /* index into the sources */
    const char *gpu, *strategy, *ckpt, *dtype, *attn;
    int tp, pp, offload;     /* offload: 1 = --offload optimizer */
    int64_t seq_min, seq_max, gpus_min, gpus_max;
} PlanTimeSetup;

#define PLAN_TIME_MAX_SOURCES 16
typedef struct {
    int published;                /* 1: at least one source's runs cover the setup */
    int n;                        /* the covering sources */
    const PlanTimeSource *src[PLAN_TIME_MAX_SOURCES];
    char why[160];                /* estimate: the first way the setup differs from the closest source
                                     (published: the covering sources with their held-out error) */
} TimeBasis;

/* Which sources cover strategy k's setup under the per-operation model: a source covers it when
 * its runs include one with the GPU preset, strategy, checkpointing, compute dtype, attention and
 * TP and PP degrees, and the sequence and GPU count lie within those runs'. The flat model
 * (--mfu), models other than dense decoders, --impl engine, LoRA/frozen parameters and pipeline
 * schedules other than 1F1B are estimates; so is offload unless a source ran it. */
TimeBasis plan_time_basis(const ModelSpec *m, const TrainSpec *t, const ClusterSpec *c, StrategyKind k);
const char *plan_time_basis_name(const TimeBasis *b);   /* "published" or "estimate" */
/* The basis as the time lines print it: "backed by published runs: llm-foundry (209 runs,
 * held-out error 4.2 %), ..." or "an estimate (no published run on this GPU)". Returns buf. */
const char *plan_time_basis_text(const TimeBasis *b, char *buf, size_t len);
/* The sources the planner was built with (planner/plan_time_sources.h). */
int plan_time_source_count(void);
const PlanTimeSource *plan_time_source(int i);

/* Achieved model FLOPs utilization: the step's model FLOPs (forward + backward, no recompute)
 * over the step's seconds at the precision's dense peak; 0 when unknown. */
double plan_time_mfu(const ClusterSpec *c, const TrainSpec *t, double flops_per_step, double step_s);

/* --time-shares "gemm=F,attn=F,passes=F" (any of them, any order) into *out (the others 0: the
 * shipped shares). 0, or -1 with one sentence naming the bad part and the valid ones in err. */
int plan_time_shares_parse(const char *s, TimeShares *out, char *err, size_t len);
#define PLAN_TIME_SHARES_HELP "gemm=F (0.05..1.5), attn=F (0.05..3), passes=F (0.05..20)"

#endif
