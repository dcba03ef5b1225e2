/* plan_cost.h — the per-layer cost model: forward FLOPs and elementwise bytes per micro-batch,
 * priced by the compute rule (plan_rules.c) and read by tests. docs/formulas.md "Time". */
#ifndef PLAN_COST_H
#define PLAN_COST_H

#include "plan_gpu.h"
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

/* Seconds of layer i's forward and backward for t's micro-batch on c (backward with the forward
 * again when the layer is checkpointed). The flat model (plan_time_flat: --mfu, a measured
 * description): forward FLOPs at mfu x the dense peak + elementwise bytes at the memory
 * bandwidth, backward 2x the FLOPs. Per operation: each GEMM at the generation's measured GEMM
 * fraction less tile and wave quantization (or its operands' traffic at HBM bandwidth, whichever
 * is longer), the attention core by its kernel (flash at its measured fraction; eager as batched
 * GEMMs), elementwise passes at HBM bandwidth. docs/formulas.md "Time". */
void plan_layer_seconds(const ModelSpec *m, int i, const TrainSpec *t, const ClusterSpec *c, double *fwd,
                        double *bwd);
/* Seconds of batch GEMMs (M x K)(K x N) of elem_bytes operands at peak FLOP/s on c's GPU. */
double plan_gemm_seconds(const ClusterSpec *c, double peak, double M, double N, double K, double batch,
                         double elem_bytes);

#endif
