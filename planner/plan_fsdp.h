/* plan_fsdp.h — FSDP2 (torch.distributed.fsdp.fully_shard, torch 2.15) buffer timeline, what the
 * fsdp-* rows hold on more than one rank (with --fsdp 1, FullyShardedDataParallel's variant of it,
 * Fsdp2.v1, and its size-based wrapping: docs/formulas.md "FSDP1 and its knobs"): the unsharded parameters of each unit,
 * the flat all-gather output kept for copy-out overlap, the backward prefetch, the reduce-scatter
 * input kept until the next unit's reduction, the root unit left unsharded after forward
 * (fully_shard's default for the root). Units: the model's repeated blocks (LayerSpec.unit: a
 * transformer block, a ResNet bottleneck), the rest in the root. Sharded sizes: FSDP2 pads each
 * parameter's dim 0, not a flat unit. docs/formulas.md "FSDP2 buffers" gives each term with its
 * source and measurement. */
#ifndef PLAN_FSDP_H
#define PLAN_FSDP_H

#include "plan_sizes.h"

typedef struct {
    int on;          /* 1: the FSDP2 timeline applies (else the walk's FSDP1 / engine terms) */
    int keep;        /* blocks keep their unsharded parameters after forward
                        (reshard_after_forward=False: fsdp-grad-op) */
    int gather;      /* shard group > 1: all-gathers through a flat output buffer; a shard group
                        of 1 (fsdp-hybrid replicating across every rank) copies the local shard */
    int64_t n;       /* shard group */
    double pb;       /* bytes per element of the gathered parameters */
    double rb, sb;   /* reduce-scatter input (the reduce dtype) and sharded gradients */
    double root;     /* root unit elements as gathered (n x its local shard) */
    int units;       /* K, the units besides the root (numbered 1..K) */
    int v1;          /* FSDP1 (--fsdp 1): gathers into the flat parameter (no output buffer kept),
                        frees each reduce-scatter input with its reduction; bwd, fwd: its
                        backward_prefetch and forward_prefetch */
    int bwd, fwd;
    /* Resolved once by plan_fsdp2_setup (one allocation, plan_fsdp2_free), so every question
       below is O(1): */
    double *ug;      /* [K + 1] unit k's elements as gathered, n x its local shard (frozen
                        parameters included); ug[0] = root */
    double *ur;      /* [K + 1] the same reduced: its trainable parameters only (fully_shard
                        reduce-scatters the gradients that exist) */
    double rroot;    /* the root's reduced elements (n x its trainable shard) */
    int64_t ne;      /* expert parallelism: the routed experts' shard group (n / ep), whose
                        tensors each unit gathers and reduces over it instead of n
                        (planner/plan_dim_ep.h); n without it */
    double *us;      /* [K + 1] unit k's local shard of its trainable parameters (the output of
                        its reduce-scatters); us[0] = root */
    double *ux;      /* [K + 1] of ug[k], the routed experts' gathered elements (ne x their shard):
                        a unit of their own nested in the block (fully_shard on the experts
                        module), gathered after the block's own parameters and resharded after
                        the experts' backward; 0 without --ep */
    double *pre;     /* [K + 2] pre[k] = Σ ug[j] for 1 <= j < k (the units before k) */
    int *at;         /* [layers] layer i's unit, or for a root layer the last unit before it (0 none) */
} Fsdp2;

/* 1 when the fsdp-* rows mean FSDP2 with a MixedPrecisionPolicy: the regimes with fp32 master
   weights (mixed-bf16, mixed-fp16) as fully_shard runs them, MixedPrecisionPolicy(param_dtype=
   16-bit, reduce_dtype=fp32), torchtitan's default. The sharded parameters stay fp32 and the
   optimizer steps them directly (no separate master copy): 4 B parameter, 4 B gradient
   (reduce-scatter output in fp32) and the optimizer's states per local element; gathered
   parameters and unsharded gradients are 16-bit, the reduce-scatter input fp32. */
int plan_fsdp2_fp32_shards(const TrainSpec *t, StrategyKind sk);

/* 1 when strategy sk's rows are FSDP2's, sharded as FSDP2 pads them, per parameter tensor: each
   rank holds ceil(dim0 / n) rows of every tensor (torch.chunk along dim 0, each shard padded to
   the first chunk's size: _fsdp_param.py _init_sharded_param), and its collectives move n x
   that (_fsdp_collectives.py foreach_all_gather, foreach_reduce: _get_dim0_padded_size). That
   needs every tensor's dim 0 (LayerSpec.tensor_dim0, plan_model_dim0_known): where one is
   unknown the rows are padded per unit instead. 0 for the other strategies, FSDP1 (--fsdp 1:
   one flat parameter per unit, padded to a multiple of n) and --impl engine: per-unit padding. */
int plan_fsdp2_dim0_rows(const TrainSpec *t, StrategyKind sk);
/* Bytes per element fsdp-* rows reduce-scatter (and HSDP all-reduce) gradients in: fp32 where
   t->fsdp_reduce says so, the precision's 16-bit dtype where it says LOW; by default fully_shard
   with a MixedPrecisionPolicy reduces in fp32 (plan_fsdp2_fp32_shards) and otherwise in the
   gradients' dtype, as FSDP1's MixedPrecision(reduce_dtype=param_dtype) does. */
double plan_fsdp_reduce_bytes(const TrainSpec *t, StrategyKind sk);
/* fsdp-* rows under --fsdp-grad-sync last: the reduce-scatters (and HSDP's all-reduces) run in
 * the last micro-step only (set_requires_gradient_sync(False) / no_sync() on the others). */
int plan_fsdp_reduce_last_only(const TrainSpec *t, StrategyKind sk);

/* Fills f; f->on = 0 where the timeline does not apply (other strategies, --impl engine, one
   rank, models without repeated blocks unless a size wrap left everything in the root). With CPUOffloadPolicy the shards
   live on the host and are copied up before each all-gather: the GPU holds the same unsharded
   parameters and buffers, and the sharded gradients leave for the host (the caller's part).
   Returns 0, or -1 out of memory (f->on = 0). Free with plan_fsdp2_free. */
int plan_fsdp2_setup(Fsdp2 *f, const ModelSpec *m, const TrainSpec *t, const ClusterSpec *c,
                     StrategyKind sk, const MemSizes *z);
void plan_fsdp2_free(Fsdp2 *f);
/* Unit k's local shard (elements; k = 0: the root), the output of its reduce-scatter. */
double plan_fsdp2_shard(const Fsdp2 *f, int k);
/* 1 when layer i is the first layer of its unit (forward order): the unit's post-backward
   (reduce-scatter) follows layer i's backward. */
int plan_fsdp2_unit_starts(const ModelSpec *m, int i);
/* Communication-buffer bytes (unsharded parameters, flat all-gather outputs, reduce-scatter
   inputs) while layer i runs forward, runs backward, and at the reduce-scatter of layer i's
   unit (after its first layer's backward). */
double plan_fsdp2_fwd_comm(const Fsdp2 *f, const ModelSpec *m, int i);
double plan_fsdp2_bwd_comm(const Fsdp2 *f, const ModelSpec *m, int i);
double plan_fsdp2_rs_comm(const Fsdp2 *f, const ModelSpec *m, int i);
/* The same while the rest of layer i's backward runs after its routed experts' (--ep: their unit
   resharded, its reduce-scatter input kept); plan_fsdp2_bwd_comm where the layer has none. */
double plan_fsdp2_bwd_rest_comm(const Fsdp2 *f, const ModelSpec *m, int i);

/* FSDP1's size_based_auto_wrap_policy(min_num_params) (torch/distributed/fsdp/wrap.py
 * _recursive_wrap, size_based_auto_wrap_policy) on a decoder's module tree as memplan knows it:
 * the root (…ForCausalLM) holds the body (…Model: its embeddings, one module per tensor of the
 * embedding layer, the blocks in a ModuleList, the final norm) and the head. Children first, a
 * module is wrapped once its parameters not already wrapped reach min_params, a ModuleList never
 * (exclude_wrap_modules); what nothing wraps stays in the root. Renumbers m's LayerSpec.unit
 * accordingly. Only min_params above every block's parameters is modelled (a block is then never
 * wrapped, nor any module inside it, whose sizes memplan does not know). 0, or -1 with a
 * sentence in msg (a model that is not a decoder, a min_params that wraps blocks or a part of a
 * layer). */
int plan_fsdp_size_wrap(ModelSpec *m, double min_params, char *msg, size_t len);

/* FSDP1 with use_orig_params=True (accelerate's and the Trainer's default): the optimizer sees the
 * original parameters as views into each unit's local flat shard, and a tensor with no element in
 * a rank's shard has no gradient there, hence no optimizer state (no Adam `step` scalar). The
 * parameter tensors with elements on the rank that holds the most: each unit's tensors laid end
 * to end (the root's: the unit-0 layers in order) and cut into n chunks of ceil(U / n)
 * (_flat_param.py FlatParamHandle._get_shard). -1 when the tensors are unknown or n is absurd. */
int64_t plan_fsdp1_rank_tensors(const ModelSpec *m, int64_t n);

#endif
