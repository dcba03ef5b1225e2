/* plan_dim_tp.h — tensor parallelism (--tp N) and sequence parallelism (--sp) as PyTorch's
 * parallelize_module applies them: torchtitan's Llama plan (torchtitan/models/llama3/infra/
 * parallelize.py apply_tp: q/k/v and gate/up ColwiseParallel, o and down RowwiseParallel, the
 * token embedding RowwiseParallel and the LM head ColwiseParallel, both vocab-sharded; with SP the
 * norms SequenceParallel) and its GPT-2 twin (c_attn, c_fc column, the two c_proj row; the tied
 * embedding and head replicated). The data-parallel strategy (ddp; zero1 or zero2, DeepSpeed's
 * ZeRO-1/2 as Megatron-DeepSpeed and InternLM run it; fsdp-full: FSDP2 on the dp dimension of a
 * 2-D mesh) runs on the remaining gpus / tp ranks.
 *
 * One dimension (plan_dim.h): its check, one rank's share as a model of its own (plan_tp_view
 * divides the split tensors, the heads and the MLP width by tp, so the memory rules, the
 * activation model and the FLOPs read the local model; plan_tp_cluster gives the data-parallel
 * cluster the strategy's rules see), its rules (the TP collectives and the effects the split
 * model does not show), its header/JSON lines, the degrees auto tries and the torch snippet.
 * docs/formulas.md "Tensor and sequence parallel". */
#ifndef PLAN_DIM_TP_H
#define PLAN_DIM_TP_H

#include <stddef.h>
#include <stdio.h>

#include "plan_dim.h"

#include "plan_gpu.h"
#include "plan_model.h"
#include "plan_strategy.h"
#include "plan_train.h"

/* t's tensor-parallel degree (1: none). */
int plan_tp_degree(const TrainSpec *t);
/* 0 when tp (and sp) apply to m on c under strategy s, else -1 with one sentence in msg. */
int plan_tp_check(const ModelSpec *m, const TrainSpec *t, const ClusterSpec *c, StrategyKind s,
                  char *msg, size_t len);
/* The strategies tensor parallel is planned with, a mask of 1u << StrategyKind: ddp, zero1, zero2
   and fsdp-full. The check, --tp auto and the CLI read it here. */
unsigned plan_tp_strategies(void);
/* 1 when the token embedding and the LM head are vocab-sharded (an untied decoder: torchtitan's
   plan); a tied GPT-2 keeps them replicated. */
int plan_tp_root_sharded(const ModelSpec *m);
/* v = what one of tp ranks holds of m: split tensors (2-D weights, column-parallel biases) / tp,
   replicated 1-D tensors of h or d_head elements (norms, row-parallel biases), heads, KV heads and
   the MLP width / tp. 0, or -1 out of memory. Free with plan_model_free. */
int plan_tp_view(const ModelSpec *m, int tp, ModelSpec *v);
/* d = c as the data-parallel strategy sees it: gpus / tp ranks, gpus_per_node / tp per node. */
void plan_tp_cluster(const ClusterSpec *c, int tp, ClusterSpec *d);
/* --emit torch: the 2-D mesh and the parallelize_module plan of t's tp on Hugging Face's module
   names. */
void plan_tp_emit_torch(FILE *f, const ModelSpec *m, const ClusterSpec *c, const TrainSpec *t);

extern const PlanDim plan_dim_tp;

#endif
