/* plan_dim_ep.h — expert parallelism (--ep N) as transformers 5.24 and torchtitan run it: the
 * routed experts of every MoE block split over ep ranks (Shard(0) on the experts' dimension:
 * transformers/distributed/expert_parallel.py MoEParamShard "grouped_gemm"; torchtitan
 * distributed/expert_parallel.py ExpertParallel._partition_fn), each token's top-k rows sent to
 * the ranks of their experts and the experts' outputs sent back by all-to-all
 * (AllToAllEP._dispatch_tokens / _combine_tokens; ExpertParallel._token_dispatch /
 * _token_combine), the router and the shared experts replicated with the rest of the block. Under
 * FSDP2 the experts are a unit of their own sharded over the expert data-parallel group, the
 * gpus / (tp x pp x ep) ranks that hold the same experts (transformers' efsdp mesh, torchtitan's
 * dp_mod_ep), and the rest of the model over the data-parallel group as before.
 *
 * One dimension (plan_dim.h): its check, one rank's view (the experts' tensors narrowed to the
 * rank's n_experts / ep; ModelSpec.moe.ep tells the activation model and the compute that the
 * experts run on the rows the dispatch brings), its rules (the all-to-alls, on the critical
 * path, and what a dispatch holds beyond the block's saved tensors), its header and JSON lines
 * and the degrees `memplan auto --ep auto` tries. Measured on gloo CPU ranks with transformers'
 * plan (bench/torch/harness.py --ep): docs/formulas.md "Expert parallel". */
#ifndef PLAN_DIM_EP_H
#define PLAN_DIM_EP_H

#include <stddef.h>

#include "plan_activ.h"
#include "plan_dim.h"

#include "plan_gpu.h"
#include "plan_model.h"
#include "plan_strategy.h"
#include "plan_train.h"

/* t's expert-parallel degree (1: none). */
int plan_ep_degree(const TrainSpec *t);
/* 0 when --ep applies to m on c under strategy s, else -1 with one sentence in msg. */
int plan_ep_check(const ModelSpec *m, const TrainSpec *t, const ClusterSpec *c, StrategyKind s,
                  char *msg, size_t len);
/* v = what one of ep ranks holds of m: every MoE block's routed-expert tensors (LayerSpec.
   expert_mask) with n_experts / ep of the experts, v->moe.ep = ep. 0, or -1 out of memory. */
int plan_ep_view(const ModelSpec *m, int ep, ModelSpec *v);
/* The routed rows one rank's experts run on per token of its micro-batch, under expert
   parallelism: top_k in expectation (every rank sends its tokens' top_k rows, spread over the
   ep ranks, and receives as many), times --moe-imbalance F on the busiest rank (F <= ep: every
   row to one rank). */
double plan_ep_rows_per_token(const ModelSpec *m, const TrainSpec *t);

extern const PlanDim plan_dim_ep;

#endif
