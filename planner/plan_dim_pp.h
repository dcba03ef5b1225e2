/* plan_dim_pp.h — pipeline parallelism (--pp N, --pp-schedule 1f1b|gpipe, --microbatches M) as
 * torch.distributed.pipelining runs it: the repeated blocks split evenly over pp stages (stage 0
 * also holds the layers before the first block, the embedding; the last stage the layers after
 * the last block, the final norm, the head and the loss), one stage per rank of a pp group, the
 * data-parallel strategy (ddp, fsdp-full: FSDP2) on the remaining gpus / (tp * pp) ranks. The M
 * micro-batches of one step are the step's accumulation count (TrainSpec.grad_accum).
 *
 * One dimension (plan_dim.h). One stage is a model of its own (plan_pp_stage_view), planned like a
 * whole model with M micro-steps, plus the activations of the micro-batches a schedule keeps in
 * flight beside the running one (plan_pp_in_flight; rule_pp). The plan is the most loaded stage's:
 * stage 0 or the last (a middle stage holds as many blocks as stage 0, no embedding and fewer
 * micro-batches in flight). Closed forms; the memory checked on CPU ranks for gpt2-mini in 2
 * stages (bench/torch/pp_probe.py), the bubble and send/recv not measured: docs/formulas.md
 * "Pipeline parallel". */
#ifndef PLAN_DIM_PP_H
#define PLAN_DIM_PP_H

#include <stddef.h>

#include "plan_dim.h"

#include "plan_gpu.h"
#include "plan_model.h"
#include "plan_strategy.h"
#include "plan_train.h"

/* t's pipeline degree (1: none). */
int plan_pp_degree(const TrainSpec *t);
/* The micro-batches of one step (t->grad_accum under --pp). */
int plan_pp_microbatches(const TrainSpec *t);
/* Repeated blocks of m (LAYER_BLOCK layers). */
int plan_pp_blocks(const ModelSpec *m);
/* 0 when pp applies to m on c under strategy s, else -1 with one sentence in msg. */
int plan_pp_check(const ModelSpec *m, const TrainSpec *t, const ClusterSpec *c, StrategyKind s,
                  char *msg, size_t len);
/* Micro-batches whose activations stage `stage` holds at once: 1F1B min(M, pp - stage)
   (torch's Schedule1F1B._step_microbatches warmup_chunks; Narayanan et al. 2021 §2.2), GPipe M
   (ScheduleGPipe._step_microbatches: every forward before any backward; Huang et al. 2019). */
int plan_pp_in_flight(const TrainSpec *t, int stage);
/* "1f1b" or "gpipe"; by name -1 if unknown. */
const char *plan_pp_schedule_name(PpSchedule k);
int plan_pp_schedule_by_name(const char *s);
/* v = stage `stage` of pp of m: its blocks (blocks/pp of them), stage 0 the layers before the
   first block, the last stage the layers after the last one. A stage without the head is
   headless (its output is what it sends on); a tied model's last stage holds its own copy of the
   head weight (the embedding is on stage 0). 0, or -1 out of memory. Free with plan_model_free. */
int plan_pp_stage_view(const ModelSpec *m, int pp, int stage, ModelSpec *v);
/* d = c as one stage's data-parallel strategy sees it: gpus / pp ranks, at most that many per
   node. */
void plan_pp_cluster(const ClusterSpec *c, int pp, ClusterSpec *d);

extern const PlanDim plan_dim_pp;

#endif
