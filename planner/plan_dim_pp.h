/* plan_dim_pp.h — pipeline parallelism (--pp N, --pp-schedule 1f1b|gpipe|interleaved,
 * --pp-virtual V, --microbatches M, --pp-less-first/--pp-less-last) as torch.distributed.pipelining
 * runs it: the repeated blocks split over pp x V stages (V = 1 but for the interleaved schedule),
 * evenly or as torchtitan splits them with the embedding and the head counted as blocks (stage 0
 * also holds the layers before the first block, the embedding; the last stage the layers after
 * the last block, the final norm, the head and the loss), rank r holding stages r, r + pp, ...,
 * the data-parallel strategy (ddp; zero1, DeepSpeed's ZeRO-1; fsdp-full: FSDP2) on the remaining
 * gpus / (tp * pp) ranks. The
 * M micro-batches of one step are the step's accumulation count (TrainSpec.grad_accum).
 *
 * One dimension (plan_dim.h). One rank is a model of its own (plan_pp_rank_view), planned like a
 * whole model with M micro-steps, plus the activations of the micro-batches its schedule keeps in
 * flight beside the running one (plan_pp_chunk_in_flight; rule_pp). The memory is the most
 * loaded rank's: rank 0, the last or the middle rank with the most blocks; the time is that
 * rank's micro-steps with the bubble of equal ranks (plan_sim.c). Closed forms; the memory checked on CPU
 * ranks (bench/torch/pp_probe.py), the bubble and send/recv not measured: docs/formulas.md
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
/* The strategies pipeline parallel is planned with, a mask of 1u << StrategyKind: ddp, zero1 and
   fsdp-full. The check, --pp auto and the CLI read it here. */
unsigned plan_pp_strategies(void);
int plan_pp_check(const ModelSpec *m, const TrainSpec *t, const ClusterSpec *c, StrategyKind s,
                  char *msg, size_t len);
/* Stages per rank: --pp-virtual under the interleaved schedule (default 2), else 1. */
int plan_pp_virtual(const TrainSpec *t);
/* Blocks first[k], count[k] of each of S stages over nb blocks, the embedding counted as w_in
   blocks and the norm and head as w_out (torchtitan generate_llm_fqn_per_model_part; 0 and 0 with
   S dividing nb: the even split). 0, or -1 with a sentence in msg. */
int plan_pp_split(int nb, int S, int w_in, int w_out, int *first, int *count, char *msg, size_t len);
/* Forwards of each of rank r's stages done at its first backward, into n[0..V), and their sum:
   1F1B min(M, pp - r) (torch's Schedule1F1B._step_microbatches warmup_chunks; Narayanan et al.
   2021 §2.2), GPipe M (ScheduleGPipe: every forward before any backward; Huang et al. 2019),
   interleaved its warmup_ops + 1 (ScheduleInterleaved1F1B, _get_warmup_ops). */
int plan_pp_chunk_in_flight(const TrainSpec *t, int r, int n[PLAN_PP_MAX_VIRTUAL]);
/* Their sum (micro-batches in flight on a one-stage rank). */
int plan_pp_in_flight(const TrainSpec *t, int stage);
/* "1f1b" or "gpipe"; by name -1 if unknown. */
const char *plan_pp_schedule_name(PpSchedule k);
int plan_pp_schedule_by_name(const char *s);
/* v = rank r's share of m under t's split: the blocks of its stages in order (chunk_layers[k],
   when given: the layers of its k-th stage), with stage 0 the layers before the first block, the
   last stage the layers after the last one. A rank without the head is headless (its output is
   what it sends on); a tied model's last rank holds its own copy of the head weight (the
   embedding is on rank 0). 0, or -1 out of memory or a split plan_pp_check refuses. Free with
   plan_model_free. */
int plan_pp_rank_view(const ModelSpec *m, const TrainSpec *t, int r, ModelSpec *v, int chunk_layers[PLAN_PP_MAX_VIRTUAL]);
/* The even split's stage `stage` of pp (1F1B). */
int plan_pp_stage_view(const ModelSpec *m, int pp, int stage, ModelSpec *v);
/* d = c as one stage's data-parallel strategy sees it: gpus / pp ranks, at most that many per
   node. */
void plan_pp_cluster(const ClusterSpec *c, int pp, ClusterSpec *d);

extern const PlanDim plan_dim_pp;

#endif
