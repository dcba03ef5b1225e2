/* plan_deepspeed.h — DeepSpeed's per-tensor layout (0.19.8, defaults), read from the model's
 * parameter tensors (LayerSpec.tensor_elems): ZeRO-1/2's flat partition and the whole gradients
 * it keeps of the tensors that cross a partition boundary; ZeRO-3's per-tensor partitions and
 * the tensors below stage3_param_persistence_threshold that it never partitions. Used by the
 * memory and communication models for the zero* rows under --impl pytorch.
 * docs/formulas.md "DeepSpeed ZeRO-2 gradients" and "DeepSpeed ZeRO-3 persistent tensors". */
#ifndef PLAN_DEEPSPEED_H
#define PLAN_DEEPSPEED_H

#include <stdint.h>
#include "plan_model.h"
#include "plan_train.h"

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
    /* ZeRO-3's frozen parameters (partitioned and gathered, never reduced or stepped): Σ
       ceil(numel / n), and the persistent ones as above. The fields above are the trainable
       parameters' only. */
    double frozen_shard, frozen_persist, frozen_persist_padded, frozen_persist_count;
} DsSizes;

/* stage3_max_reuse_distance (elements, PLAN_DS3_REUSE): a layer stays gathered from its forward
   to its backward when the trace between them, 2 x Σ later layers' elements, is shorter */

/* ZeRO-3's parameter fetching over one step (partitioned_param_coordinator.py, defaults from
   zero/config.py): the step's trace of non-persistent tensors (forward in order, then backward,
   in reverse, for the layers released after their forward) is gathered ahead of use in
   coalesced groups: every module's fetch_sub_module gathers what the module needs and is not
   in flight, then prefetches the next tensors of the trace that are not gathered, adding
   tensors while the group is below min(stage3_prefetch_bucket_size, stage3_max_live_parameters
   - elements gathered); a module's fetch comes often enough that memplan fills the queue up to
   that limit at every tensor's use. A group is one all-gather into one flat buffer
   (partition_parameters.py _all_gather_dtype: n x Σ ceil(numel / n)); at the first use of any
   of its tensors AllGatherCoalescedHandle.wait copies every tensor of the group out of it
   (param.data = torch.cat(partitions)), and the flat buffer lives while the coordinator's
   inflight registry still holds the handle for one of the group's tensors, i.e. until the
   group's last tensor is used. A layer's tensors are released after its forward unless it is
   kept (plan_ds3_kept), and after its backward. */
#define PLAN_DS3_MAX_GROUPS 64     /* live groups: with the default knobs each but the last holds
                                      >= 5e7 of <= 1e9; smaller prefetch buckets stop at 64 */

typedef struct {
    double k0, k1;           /* trace positions [k0, k1) */
    double flat;             /* elements of the flat all-gather buffer */
    double elems;            /* elements of its tensors, unpadded */
    int at, at_bwd;          /* issued during layer `at`'s fetch, in backward (1) or forward (0) */
} Ds3Group;

/* Called once per all-gather when its first tensor is used: where it was issued, where it is
   first needed (layer, backward), its flat elements. */
typedef void (*Ds3GroupFn)(void *ctx, const Ds3Group *g, int use_layer, int use_bwd);

typedef struct {
    const ModelSpec *m;
    int64_t n;
    double psi;
    /* DeepSpeed's knobs (elements), its defaults from plan_ds3_sim_init; a test may set others
       (bench/torch/ds3_probe.py runs DeepSpeed with small ones) */
    double prefetch, max_live, persist, reuse;
    /* the trace: position k, and the (layer, tensor) of the next tensor to issue */
    double issued;           /* trace positions issued so far */
    int ql, qt, qbwd;        /* queue cursor: layer, tensor index, in backward */
    double qbefore;          /* elements of the layers before the cursor's */
    int in_bwd;              /* the step is in backward (the phase a gather is issued in) */
    int cur;                 /* the layer being fetched */
    Ds3GroupFn on_group;     /* optional: each group at its first use (plan_step's collectives) */
    void *on_group_ctx;
    double seen;             /* elements of the layers before the walk's current one */
    double avail;            /* issued and not released (DeepSpeed's __n_available_params) */
    double mat;              /* copied out of their flat buffer and not released */
    double used;             /* trace positions used so far */
    Ds3Group g[PLAN_DS3_MAX_GROUPS];
    int ng;                  /* live groups (flat buffer still held), oldest first */
    double ag_count[2], ag_elems[2];   /* all-gathers issued in forward [0] / backward [1]:
                                          count, padded elements */
} Ds3Sim;

/* k: DeepSpeed's sizes (plan_ds_knobs). */
void plan_ds3_sim_init(Ds3Sim *z, const ModelSpec *m, int64_t n, const DsKnobs *k);
/* Layer i's forward (layers in order, 0 first): returns the gathered elements while it runs
   (copied-out tensors + live flat buffers), then releases the layer if it is not kept. */
double plan_ds3_sim_forward(Ds3Sim *z, int i);
/* Layer i's backward (layers in reverse order, after every forward): gathered elements while it
   runs; the layer is released after it (see plan_ds3_sim_release). */
double plan_ds3_sim_backward(Ds3Sim *z, int i);
void plan_ds3_sim_release(Ds3Sim *z, int i);

/* DeepSpeed's gradient reduce buckets, ZeRO-1/2's and ZeRO-3's alike (stage_1_and_2.py and
   stage3.py reduce_independent_p_g_buckets_and_remove_grads): gradients arrive one tensor at a
   time; a tensor that would take the bucket past reduce_bucket_size elements reduces the bucket
   first (when it holds any), so a bucket holds whole tensors and a tensor larger than the bucket
   is reduced alone. Order: backward (the layers in reverse, a layer's tensors in reverse: the
   gradient hooks), or forward (layers and tensors in order: ZeRO-1 without overlap_comm, whose
   reduce_gradients walks each parameter group after backward). A bucket is reduced from the hook
   of the tensor that closed it (in layer `at`'s backward), the last in the epilogue (at = -1).
   Layers whose tensors are unknown count as one tensor. fn gets each bucket in order; returns
   how many. */
typedef struct {
    int at;            /* layer whose tensor closed the bucket; -1: the epilogue */
    double elems;      /* its gradients' elements */
    double padded;     /* each tensor padded to n x ceil(numel / n) (ZeRO-3's reduce_scatter_coalesced) */
    double offset;     /* one tensor larger than the bucket, reduced from its own gradient
                          (stage_1_and_2.py extra_large_param_to_reduce): its offset in the flat
                          parameters (layer order); -1: a bucket of the IPG buffer */
    double done;       /* elements of layer `at`'s tensors walked up to and including the one
                          that closed the bucket (its hook runs once they all exist) */
} DsBucket;
typedef void (*DsBucketFn)(void *ctx, const DsBucket *b);
double plan_ds_reduce_buckets(const ModelSpec *m, int64_t n, double bucket, int forward, DsBucketFn fn, void *ctx);

/* ZeRO-1/2's all-reduces of one bucket (stage_1_and_2.py average_tensor -> allreduce_and_scatter,
   use_multi_rank_bucket_allreduce): its gradients cut at the partition edges (part elements per
   rank), chunks of slices each closed by the slice that takes it past `bucket` elements, one
   flattened all-reduce per chunk. A bucket of the IPG buffer never passes the bucket: one; a
   tensor larger than the bucket one per chunk (reduce_bucket_size 0 or 1: one per slice).
   *largest: the largest chunk's elements (allreduce_bucket's flatten). */
double plan_ds12_bucket_allreduces(const DsBucket *b, double part, double bucket, double *largest);

/* The largest of layer l's trainable tensors (elements; the layer's parameters where its tensors
   are unknown): ZeRO-2's hooks copy each gradient into the bucket and free it as AccumulateGrad
   makes it, so a layer's backward holds one of its gradients at a time. */
double plan_ds_largest_tensor(const LayerSpec *l);

/* What ZeRO-1/2's memory account reads of its buckets (plan_ds_reduce_buckets in the order
   `forward`, part elements per rank's partition). */
typedef struct {
    double count;          /* buckets */
    int first_at;          /* layer whose tensor closed the first bucket (-1: the epilogue) */
    double first_done;     /* its DsBucket.done: how far into that layer's backward it closed */
    double elems[2];       /* the first two buckets' elements (0: none) */
    double flat[2];        /* their largest flattened all-reduce input (elements) */
    double last_flat;      /* the last bucket's (the epilogue's) */
} Ds12Buckets;
void plan_ds12_buckets(const ModelSpec *m, int64_t n, double part, double bucket, int forward, Ds12Buckets *out);

/* The scalars DeepSpeed keeps and all-reduces at the step: the global gradient norm (ZeRO-1/2:
   fp32, get_grad_norm_direct's .float(); ZeRO-3: fp64, get_norm_dtype()), kept in
   _global_grad_norm between steps, and the overflow flag (uint8) where it checks: ZeRO-1/2
   under fp16 or bf16 (engine.py check_grad_overflow), ZeRO-3 under fp16 only. */
int plan_ds_norm_bytes(int stage3);
int plan_ds_overflow_bytes(int stage3, const PrecisionSpec *p);

/* n: data-parallel ranks; persist: stage3_param_persistence_threshold (elements). Layers whose
   tensors are unknown count as one tensor each. */
void plan_ds_sizes(const ModelSpec *m, int64_t n, double persist, DsSizes *out);

#endif
