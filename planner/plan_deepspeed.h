/* plan_deepspeed.h — DeepSpeed's per-tensor layout (0.19.8, defaults), read from the model's
 * parameter tensors (LayerSpec.tensor_elems): ZeRO-1/2's flat partition and the whole gradients
 * it keeps of the tensors that cross a partition boundary; ZeRO-3's per-tensor partitions and
 * the tensors below stage3_param_persistence_threshold that it never partitions. Used by the
 * memory and communication models for the zero* rows under --impl pytorch.
 * docs/formulas.md "DeepSpeed ZeRO-1/2 gradients" and "DeepSpeed ZeRO-3 persistent tensors". */
#ifndef PLAN_DEEPSPEED_H
#define PLAN_DEEPSPEED_H

#include <stdint.h>
#include "plan_model.h"
#include "plan_train.h"

/* deepspeed/runtime/zero/config.py: stage3_param_persistence_threshold (elements) */
#define PLAN_DS3_PERSIST 1e5
/* stage_1_and_2.py: nccl_start_alignment_factor; the flat group is padded to a multiple of
   this x the data-parallel size */
#define PLAN_DS12_ALIGN 2

typedef struct {
    double part;            /* ZeRO-1/2: local partition (elements) of the flat list padded to
                               a multiple of PLAN_DS12_ALIGN x n */
    double grad_part;       /* ZeRO-1/2: the largest rank's grads_in_partition: Σ elements of
                               every tensor that overlaps the rank's partition (whole tensors) */
    double shard;           /* ZeRO-3: Σ ceil(numel / n), every tensor's ds_tensor */
    double padded;          /* ZeRO-3: Σ n x ceil(numel / n), what reduce-scatter moves */
    double persist;         /* ZeRO-3: elements of the persistent tensors (numel < threshold) */
    double persist_padded;  /* ZeRO-3: Σ n x ceil(numel / n) over them: their step all-gathers,
                               and their full data (a view of that padded buffer) */
    double persist_count;   /* ZeRO-3: how many */
} DsSizes;

/* stage3_max_reuse_distance (elements): a layer stays gathered from its forward to its backward
   when the trace between them, 2 x Σ later layers' elements, is shorter */
#define PLAN_DS3_REUSE 1e9
int plan_ds3_kept(double later_elems);

/* The scalars DeepSpeed keeps and all-reduces at the step: the global gradient norm (ZeRO-1/2:
   fp32, get_grad_norm_direct's .float(); ZeRO-3: fp64, get_norm_dtype()), kept in
   _global_grad_norm between steps, and the overflow flag (uint8) where it checks: ZeRO-1/2
   under fp16 or bf16 (engine.py check_grad_overflow), ZeRO-3 under fp16 only. */
int plan_ds_norm_bytes(int stage3);
int plan_ds_overflow_bytes(int stage3, const PrecisionSpec *p);

/* n: data-parallel ranks. Layers whose tensors are unknown count as one tensor each. */
void plan_ds_sizes(const ModelSpec *m, int64_t n, DsSizes *out);
/* ZeRO-3: elements of layer l that are gathered (non-persistent tensors, each padded to
   n x ceil(numel / n)); 0 on one rank. */
double plan_ds3_gathered_elems(const LayerSpec *l, int64_t n);

#endif
