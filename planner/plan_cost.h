/* plan_cost.h — the per-layer cost model: forward FLOPs and elementwise bytes per micro-batch,
 * priced by the compute rule (plan_rules.c) and read by tests. docs/formulas.md "Time". */
#ifndef PLAN_COST_H
#define PLAN_COST_H

#include "plan_model.h"
#include "plan_train.h"

/* Forward FLOPs of layer i for the micro-batch (per GPU). */
double plan_layer_fwd_flops(const ModelSpec *m, int i, const TrainSpec *t);
/* Bytes read + written by layer i's elementwise passes (norms, softmax, activation, residual
 * adds, embedding lookup, cross-entropy; under --impl engine also its bias copies, zeroed
 * scratch and in-place accumulation) in forward and in backward, for the micro-batch. */
void plan_layer_mem_bytes(const ModelSpec *m, int i, const TrainSpec *t, double *fwd, double *bwd);
/* Keys each query's scores are computed for, on average over a sequence of s: s (PyTorch's eager
 * attention computes every score and masks after), or under --impl engine the engine's causal
 * blocks of PLAN_ENGINE_ATT_BLOCK query rows, each stopping at its last row's key. */
double plan_attn_keys_per_query(const TrainSpec *t, double s);
#define PLAN_ENGINE_ATT_BLOCK 64   /* kernels/kern_fast.h KERN_FAST_ATT_BLOCK */

#endif
