/* plan_dim_cp.h — context parallelism (--cp N) as PyTorch 2.15 runs it for torchtitan
 * (parallelism.context_parallel_degree): every sequence of the micro-batch split over cp ranks
 * (torch/distributed/tensor/experimental/_context_parallel/_attention.py context_parallel, with
 * its round-robin load balancer: each rank holds two of 2 cp chunks), each rank running the
 * whole model on its seq / cp tokens, and ring attention in place of SDPA's flash, efficient and
 * cuDNN kernels (_templated_ring_attention): the keys and values of every shard all-gathered once
 * per attention call (the default rotate method, "allgather"), the outputs merged in fp32; in
 * backward the keys and values gathered again and their fp32 gradients passed round the ring
 * (permute_tensor, cp times). FSDP2 shards over the data-parallel and the cp ranks together
 * (torchtitan's dp_shard_cp mesh), so the strategies' group is unchanged.
 *
 * One dimension (plan_dim.h). The ring attention kernels PyTorch intercepts run on CUDA only
 * (aten._scaled_dot_product_flash/efficient/cudnn_attention; CPU SDPA is another op), so its
 * figures cannot be measured on CPU ranks: the rules are closed forms read from its source,
 * labelled estimates in the header and JSON, for the GPU check to measure. docs/formulas.md
 * "Context parallel". */
#ifndef PLAN_DIM_CP_H
#define PLAN_DIM_CP_H

#include <stddef.h>

#include "plan_dim.h"

#include "plan_gpu.h"
#include "plan_model.h"
#include "plan_strategy.h"
#include "plan_train.h"

/* t's context-parallel degree (1: none). */
int plan_cp_degree(const TrainSpec *t);
/* 0 when --cp applies to m on c under strategy s, else -1 with one sentence in msg. */
int plan_cp_check(const ModelSpec *m, const TrainSpec *t, const ClusterSpec *c, StrategyKind s,
                  char *msg, size_t len);

extern const PlanDim plan_dim_cp;

#endif
