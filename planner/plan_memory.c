/* plan_memory.c — see plan_memory.h and docs/formulas.md. */
#include "plan_memory.h"

#include <math.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>

#include "plan_activ.h"
#include "plan_deepspeed.h"
#include "plan_fsdp.h"
#include "plan_offload.h"

static const char *const TERM_NAMES[TERM_COUNT] = {"params", "grads", "comm_buffers",
    "optimizer", "activations", "transient", "overhead"};
static const char *const PHASE_NAMES[PHASE_COUNT] = {"forward", "backward", "step"};

const char *plan_term_name(TermKind k) { return TERM_NAMES[k]; }
const char *plan_phase_name(PhaseKind p) { return PHASE_NAMES[p]; }

void plan_memory_sizes(const ModelSpec *m, const TrainSpec *t, const ClusterSpec *c,
                       StrategyKind sk, MemSizes *z) {
    const Strategy *s = plan_strategy(sk);
    const PrecisionSpec *p = plan_precision(t->precision);
    const OptimizerSpec *o = plan_optimizer(t->optimizer);
    memset(z, 0, sizeof(*z));
    z->n = s->group_node ? (c->gpus_per_node < c->gpus ? c->gpus_per_node : c->gpus) : c->gpus;
    /* Parameter-sharding strategies wrap like FSDP: one root unit holding every layer outside
       the model's repeated blocks (LayerSpec.unit 0), one unit per block; the others, and
       models without units, shard each layer on its own. A flat unit (FSDP1, ZeRO) is padded
       to a multiple of n; FSDP2 pads each tensor's dim 0 instead (plan_fsdp2_dim0_rows), where
       every dim 0 is known. Both paddings are summed in one pass; the per-tensor one is taken
       when no layer's dim 0 turned out unknown. */
    int units = plan_model_units(m);
    int root_flat = (s->shard & SHARD_PARAM) && units > 0;
    int64_t n = z->n;
    int dim0 = plan_fsdp2_dim0_rows(t, sk);
    double flat = 0, d0 = 0;                     /* local shard: per unit, per tensor */
    double u_elems = 0, u_d0 = 0, root_d0 = 0;   /* the unit being summed; the root's */
    for (int i = 0; i < m->n_layers; i++) {
        const LayerSpec *l = &m->layers[i];
        double pu = (double)l->params, lf = ceil(pu / (double)n);
        double ld = 0;
        if (dim0 && (ld = (double)plan_layer_shard_dim0(l, n)) < 0) dim0 = 0;   /* unknown: per unit */
        z->psi += pu;
        if (pu > z->largest_any) z->largest_any = pu;
        if (!root_flat) { flat += lf; d0 += ld; }   /* each layer on its own (ZeRO-1/2, no units) */
        if (units == 0) {                        /* every layer its own unit */
            if (pu > z->largest_unit) z->largest_unit = pu;
            continue;
        }
        if (l->unit == 0) {                      /* the root */
            z->root_unit += pu;
            root_d0 += ld;
            continue;
        }
        u_elems += pu;
        u_d0 += ld;
        if (i + 1 == m->n_layers || m->layers[i + 1].unit != l->unit) {   /* the unit's last layer */
            if (u_elems > z->largest_unit) z->largest_unit = u_elems;
            if (root_flat) { flat += ceil(u_elems / (double)n); d0 += u_d0; }
            u_elems = u_d0 = 0;
        }
    }
    z->dim0 = dim0 && m->n_layers > 0;
    z->root_shard = z->dim0 ? root_d0 : ceil(z->root_unit / (double)n);
    z->psi_shard = (z->dim0 ? d0 : flat) + (root_flat ? z->root_shard : 0);
    double p_local = (s->shard & SHARD_PARAM) ? z->psi_shard : z->psi;
    double g_local = (s->shard & SHARD_GRAD) ? z->psi_shard : z->psi;
    double o_local = (s->shard & SHARD_OPT) ? z->psi_shard : z->psi;
    z->params = p_local * p->param_bytes;
    z->grads = g_local * p->grad_bytes;
    z->optimizer = o_local * (p->master_bytes + o->states * p->state_bytes);
    if (plan_fsdp2_fp32_shards(t, sk)) {   /* FSDP2 MixedPrecisionPolicy: fp32 shards, no master */
        z->params = p_local * p->master_bytes;
        z->grads = g_local * 4.0;
        z->optimizer = o_local * o->states * p->state_bytes;
    }
    plan_offload_gpu_sizes(t, sk, z);   /* CPU offload: what leaves the GPU */
}

/* A tied output head (lm_head.weight is the token embedding's Parameter) gives that parameter
   two uses, so its AccumulateGrad node runs only when both gradients have arrived: the LM head's
   vocabulary x hidden gradient waits in the autograd engine's input buffer from the head's
   backward until the embedding's backward adds the second one (torch/csrc/autograd/
   input_buffer.h), and only then does .grad exist or DDP's hook fire. Returns those bytes, or 0
   where they are already charged: the FSDP rows hold the root unit's full gradient through
   backward, and memplan's engine layout (grad_flight: its ZeRO-2 in-flight gradients) has its
   own accounting, which validate checks.
   Measured: docs/formulas.md "Tied output head". */
static double tied_head_grad_bytes(const ModelSpec *m, const TrainSpec *t, const Strategy *s,
                                   const PrecisionSpec *p, int grad_flight) {
    if (!m->tied_embeddings || m->headless || t->impl == IMPL_ENGINE || grad_flight) return 0;
    if (s->buffers == BUF_FSDP_FULL || s->buffers == BUF_FSDP_GRAD_OP) return 0;
    for (int i = 0; i < m->n_layers; i++)
        if (m->layers[i].kind == LAYER_EMBED)
            return (double)m->layers[i].largest_tensor * p->grad_bytes;   /* V x e */
    return 0;
}

/* Autocast's cast cache under full activation checkpointing. autocast caches the
   low-precision copy of every leaf tensor that requires grad (parameters: DDP's, DeepSpeed's
   gathered ones, and FSDP2's unsharded nn.Parameters alike) until the autocast region exits
   (aten/src/ATen/autocast_mode.cpp cached_cast; torch.amp.autocast.__exit__ clears the cache).
   A checkpointed block saves nothing, so its copies live exactly as long as the cache: all of
   them at the end of forward, none once the region exits before backward; a recomputed block
   re-enters autocast (torch/utils/checkpoint.py) and holds its own copies while it runs.
   Layers outside the blocks (the LM head) are not checkpointed and keep theirs saved. */
static int ckpt_casts_cached(const TrainSpec *t, const PrecisionSpec *p) {
    return t->act_ckpt == CKPT_FULL && p->cast_copy_bytes > 0 && t->impl == IMPL_PYTORCH;
}

/* FSDP1 (--fsdp 1) hands the module views of its flat parameter: not leaves, never cached, so a
   checkpointed block's casts are freed with its forward (torch/distributed/fsdp/_flat_param.py
   _use_unsharded_views(as_params=False) in forward and backward: plain tensor views with a
   grad_fn). */
static int casts_leave_with_block(const Strategy *s, const TrainSpec *t, const PrecisionSpec *p) {
    int fsdp = s->buffers == BUF_FSDP_FULL || s->buffers == BUF_FSDP_GRAD_OP;
    return ckpt_casts_cached(t, p) && fsdp && t->fsdp_impl == 1;
}

/* Elements of the weight a tied output head shares with the token embedding (V x e, the
   embedding layer's largest tensor); 0 without tied embeddings. */
static double tied_embed_elems(const ModelSpec *m) {
    double e = 0;
    for (int k = 0; k < m->n_layers && m->tied_embeddings; k++)
        if (m->layers[k].kind == LAYER_EMBED) e = (double)m->layers[k].largest_tensor;
    return e;
}

/* Elements of layer i that autocast casts to the low-precision dtype: the weights of its
   matmuls and convolutions. Embedding lookups and norms run in fp32 under autocast (they are
   not on its lower-precision op list; measured: F.embedding and F.layer_norm return fp32), so
   the embedding layer casts nothing; a tied head casts the shared V x e embedding weight. */
static double layer_cast_elems(const ModelSpec *m, int i) {
    const LayerSpec *l = &m->layers[i];
    switch (l->kind) {
    case LAYER_EMBED: case LAYER_NORM: case LAYER_BN: return 0;
    case LAYER_HEAD: return (double)l->params + tied_embed_elems(m);
    default: return (double)l->params;
    }
}

/* The copies still held at the start of backward under full checkpointing: the saved ones of
   the layers outside the blocks. */
static double ckpt_casts_after_forward(const ModelSpec *m, const PrecisionSpec *p) {
    double b = 0;
    for (int i = 0; i < m->n_layers; i++)
        if (m->layers[i].kind != LAYER_BLOCK) b += layer_cast_elems(m, i) * p->cast_copy_bytes;
    return b;
}

/* DeepSpeed ZeRO-1/2 optimizer step (deepspeed/runtime/zero/stage_1_and_2.py, step()): first
   the gradient norm, which reads the flat gradient partition through an fp64 copy
   (get_grad_norm_direct: g.to(get_norm_dtype()), fp64 wherever the device has it,
   deepspeed/runtime/zero/utils.py); then, in the mixed-precision regimes, an fp32 copy of the
   partition (flat_grad_partition.to(single_partition_of_fp32_groups[i].dtype)) that becomes the
   fp32 master's .grad through the optimizer step, while the 16-bit partition gradients are
   freed (free_grad_in_param_list). Bytes per local optimizer element: norm_b at the norm,
   fp32_b - grad bytes at the step. Measured: docs/formulas.md "DeepSpeed ZeRO-1/2 step". */
static int ds_zero12_step(const Strategy *s, const TrainSpec *t, const PrecisionSpec *p,
                          double *norm_b, double *fp32_b) {
    if (s->buffers != BUF_DS_REDUCE || t->impl != IMPL_PYTORCH) return 0;
    *norm_b = 8;
    *fp32_b = p->master_bytes > 0 ? 4.0 - p->grad_bytes : 0;
    return 1;
}

/* DeepSpeed ZeRO-3 gathers parameters as partitioned_param_coordinator.py fetches them:
   coalesced groups prefetched ahead of use up to stage3_max_live_parameters, each a flat
   buffer that lives until the group's last tensor is used, with every tensor of the group
   copied out at its first use; a layer stays gathered from its forward to its backward when
   it is used again within stage3_max_reuse_distance (plan_deepspeed.h Ds3Sim). Measured:
   docs/formulas.md "DeepSpeed ZeRO-3". */

/* CPU ranks (--autocast cpu: the CPU kernels, as validate --against torch plans them): ATen runs
   a float convolution through oneDNN unless it is pointwise (1x1, stride 1) with a batch below 16
   on one thread (torchrun's default OMP_NUM_THREADS=1), or a batch of 1 with a kernel of at most
   3 and at most 20480 input elements (aten/src/ATen/native/Convolution.cpp
   ConvParams::use_mkldnn); those run THNN's slow_conv2d, which writes the weight gradient in
   place. oneDNN's backward (native/mkldnn/Conv.cpp mkldnn_convolution_backward_weights) computes
   the weight gradient in an ideep buffer and copies it into the dense gradient
   (mkldnn_to_dense): both live until the convolution's backward returns, one weight-sized
   transient. Measured per conv shape (ResNet-50, batch 2, bench/torch/conv_probe.py): exactly
   the weight at 32 px, and from layer2.1 on at 128 px; 0 for the pointwise ones;
   docs/formulas.md "CPU convolution backward".
   Returns bytes while layer i's backward runs (0 on GPUs: cuDNN's workspace is not modelled). */
static double cpu_conv_backward_bytes(const ModelSpec *m, int i, const TrainSpec *t, const PrecisionSpec *p) {
    const LayerSpec *l = &m->layers[i];
    if (!t->autocast_cpu || t->impl != IMPL_PYTORCH || l->kind != LAYER_CONV || l->conv_kernel <= 0 ||
        l->params <= 0)
        return 0;
    int64_t b = t->micro_batch, k = l->conv_kernel, s = l->conv_stride > 0 ? l->conv_stride : 1;
    /* input elements per sample: in channels x (output side x stride)^2, the output area from
       the FLOPs (2 x weight x output positions) at this image size */
    double in = 1e18;   /* unknown out channels: large (batch 1 then takes oneDNN) */
    if (l->n_tensors > 0 && l->tensor_dim0[0] > 0 && l->fwd_flops > 0) {
        double cin = (double)l->params / ((double)l->tensor_dim0[0] * (double)(k * k));
        double area = l->fwd_flops / (2.0 * (double)l->params) * plan_cnn_area_scale(m, t->seq);
        in = cin * area * (double)(s * s);
    }
    int onednn = (!(k == 1 && s == 1) || b >= 16) && (k > 3 || b > 1 || (double)b * in > 20480);
    return onednn ? (double)l->params * p->act_bytes : 0;
}

/* Elements of the model's largest parameter tensor. */
static int64_t largest_tensor(const ModelSpec *m) {
    int64_t b = 0;
    for (int i = 0; i < m->n_layers; i++)
        if (m->layers[i].largest_tensor > b) b = m->layers[i].largest_tensor;
    return b;
}

/* Gradient accumulation (--grad-accum K > 1; docs/formulas.md "Gradient accumulation"). The
   peak is in the last of the K micro-steps, which starts with what the K-1 before it left:
   - DDP under no_sync() (torch/nn/parallel/distributed.py: no prepare_for_backward, so the
     reducer's hooks do nothing): every parameter's full .grad; the last micro-step's
     AccumulateGrad adds into it in place, so its backward keeps no new gradient (each is alive
     until it is added: a layer's largest tensor at most). The bucket copy is allocated at
     construction and stays (persistent_comm). Likewise one GPU, FSDP1 every (its sharded
     gradients) and the other torch layouts: gradients held from the start.
   - DeepSpeed ZeRO-1: the full .grad too (stage 1 reduces only at the accumulation boundary:
     engine.allreduce_gradients -> reduce_gradients), moved into the reduce bucket at the
     boundary's end of backward.
   - DeepSpeed ZeRO-2: the first micro-step's grads_in_partition, whose views
     independent_gradient_partition_epilogue keeps in all_grad_tensors (stage_1_and_2.py), beside
     the last micro-step's own partition, until the epilogue adds that one into it.
   - ZeRO-3: nothing more: partition_grads adds into grad_partitions_flat_buffer, allocated at
     init (stage3.py).
   - FSDP2, --fsdp-grad-sync every: the sharded gradients; the last micro-step's reduce-scatter
     outputs are added into them and freed (_fsdp_collectives.py foreach_reduce:
     sharded_param.grad._local_tensor += new_sharded_grad).
   - FSDP2, --fsdp-grad-sync last (set_requires_gradient_sync(False): post_backward returns
     before _take_unsharded_grads_to_reduce): every unit's unsharded gradient (in the reduce dtype
     when the MixedPrecisionPolicy has one), freed unit by unit at the last micro-step's
     reduce-scatters. FSDP1's no_sync() alike, at the unit granularity memplan has. */
typedef struct {
    double held;         /* gradient bytes from the start of the last micro-step's forward */
    int in_place;        /* the held gradients are the ones the last micro-step accumulates into:
                            its backward adds none (ZeRO-1, FSDP1 no_sync, FSDP2 every) */
    int persistent;      /* the walk's grads_persistent path holds them, held stays 0 (DDP, one
                            GPU, FSDP1 every, the other torch layouts) */
    int unit_unsharded;  /* FSDP2 last: held is every unit's unsharded gradient */
    double ub;           /* FSDP2 last: bytes per held unsharded element */
    int in_place_tensor; /* a layer's backward holds its largest tensor's new gradient (at the
                            gradients' dtype) until AccumulateGrad has added it to the held one */
} Accum;

static void accum_setup(const TrainSpec *t, const ClusterSpec *c, StrategyKind sk,
                        const MemSizes *z, const Fsdp2 *f2, int ds12, int ds3, double ds_part_bytes,
                        Accum *a) {
    const Strategy *s = plan_strategy(sk);
    const PrecisionSpec *p = plan_precision(t->precision);
    memset(a, 0, sizeof(*a));
    if (t->grad_accum <= 1 || t->impl != IMPL_PYTORCH || ds3) return;
    int fsdp = s->buffers == BUF_FSDP_FULL || s->buffers == BUF_FSDP_GRAD_OP;
    int last = fsdp && t->fsdp_grad_sync == FSDP_SYNC_LAST && c->gpus > 1;
    a->in_place_tensor = 1;
    if (f2->on) {
        if (last) {
            a->unit_unsharded = 1;
            a->ub = f2->rb;   /* accumulated in the reduce dtype (= the gradients' without a policy) */
            a->held = z->psi * a->ub;
        } else {
            a->in_place = 1;
            a->in_place_tensor = 0;   /* the last micro-step's unsharded gradients are new */
            a->held = plan_offload_grads_to_host(t, sk) ? 0 : z->psi_shard * f2->sb;   /* offload: on the host */
        }
    } else if (ds12) {
        if (s->shard & SHARD_GRAD) {
            a->in_place_tensor = 0;    /* its hooks copy each new gradient into the bucket */
            a->held = ds_part_bytes;   /* offload: ds_part_bytes 0, accumulated on the host */
        } else {
            a->in_place = 1;
            a->held = z->psi * p->grad_bytes;
        }
    } else if (last) {   /* FSDP1 no_sync: the unsharded flat gradients */
        a->in_place = 1;
        a->held = z->psi * p->grad_bytes;
    } else {
        a->persistent = 1;
        a->in_place_tensor = !fsdp;   /* FSDP1 every: its unsharded flat gradients are new */
    }
}

/* Everything the walk needs, resolved once. */
typedef struct {
    const ModelSpec *m;
    const TrainSpec *t;
    const ClusterSpec *c;
    const Strategy *s;
    const PrecisionSpec *p;
    MemSizes z;
    ActInputs in;
    double fixed;            /* context + cuBLAS + NCCL */
    MemResult *r;
    MemMomentFn fn;
    void *ctx;
    const char *peak_where;  /* formatted into r->peak_where once, after the walk */
    int peak_layer;
} Walk;

/* Records one moment: terms t[], where. Margin is added here. */
/* where: "forward", "end of forward", "backward of" (+ the layer's name), "optimizer step";
   formatted only when the moment becomes the peak. */
static void moment(Walk *w, PhaseKind ph, int layer, const double t[TERM_COUNT], const char *where) {
    double managed = 0;
    for (int k = 0; k < TERM_COUNT; k++) if (k != TERM_OVERHEAD) managed += t[k];
    double margin = w->c->margin_is_frac ? managed * w->c->alloc_margin : w->c->alloc_margin;
    double total = managed + w->fixed + margin;
    MemResult *r = w->r;
    if (w->fn) {
        double all[TERM_COUNT];
        memcpy(all, t, sizeof(all));
        all[TERM_OVERHEAD] = w->fixed + margin;
        w->fn(w->ctx, ph, layer, all, total);
    }
    if (total > r->phase_peak[ph]) r->phase_peak[ph] = total;
    if (total > r->peak) {
        r->peak = total;
        r->peak_phase = ph;
        w->peak_where = where;
        w->peak_layer = layer;
        memcpy(r->term, t, sizeof(r->term));
        r->term[TERM_OVERHEAD] = w->fixed + margin;
        r->margin = margin;
    }
}

int plan_memory(const ModelSpec *m, const TrainSpec *t, const ClusterSpec *c, StrategyKind sk,
                MemResult *r) {
    return plan_memory_walk(m, t, c, sk, r, NULL, NULL);
}

int plan_memory_walk(const ModelSpec *m, const TrainSpec *t, const ClusterSpec *c, StrategyKind sk,
                     MemResult *r, MemMomentFn fn, void *ctx) {
    memset(r, 0, sizeof(*r));
    Walk w = {m, t, c, plan_strategy(sk), plan_precision(t->precision), {0}, {0}, 0, r, fn, ctx, "", -1};
    plan_memory_sizes(m, t, c, sk, &w.z);
    const Strategy *s = w.s;
    const PrecisionSpec *p = w.p;
    const OptimizerSpec *o = plan_optimizer(t->optimizer);
    const MemSizes *z = &w.z;
    w.in.b = t->micro_batch;
    w.in.s = t->seq > 0 ? t->seq : m->max_seq;
    w.in.dropout = t->dropout >= 0 ? t->dropout : m->dropout;
    r->shard_group = z->n;
    r->acts_known = plan_model_acts_known(m);

    /* fixed overheads: CUDA context, cuBLAS workspace, NCCL communicators */
    r->cuda_context = c->cuda_context;
    r->cublas_ws = c->gpu.cublas_ws_bytes;
    r->nccl_comms = c->gpus > 1 ? 1 : 0;
    if (s->group_node && c->gpus > z->n) r->nccl_comms = 2;   /* intra-node shard + inter-node replica */
    r->nccl = r->nccl_comms * c->nccl_per_comm;
    w.fixed = r->cuda_context + r->cublas_ws + r->nccl;

    /* persistent communication buffers */
    double persistent_comm = 0;
    if (s->buffers == BUF_DDP_BUCKETS && !t->grad_as_bucket_view && c->gpus > 1)
        persistent_comm = z->psi * p->grad_bytes;          /* flat bucket copy of all grads */
    if ((s->buffers == BUF_DS_REDUCE || s->buffers == BUF_DS_STAGE3) && c->gpus > 1)
        persistent_comm = fmin(PLAN_DS_REDUCE_BUCKET, z->psi) * p->grad_bytes;   /* nothing to reduce on one GPU */
    /* DeepSpeed allocates the whole reduce_bucket_size buffer, whatever the model's size and on
       one GPU too (stage_1_and_2.py setup_buckets, stage3.py __init__: torch.empty(
       reduce_bucket_size, dtype=16-bit grads)); memplan's engine sizes it to the model */
    if ((s->buffers == BUF_DS_REDUCE || s->buffers == BUF_DS_STAGE3) && t->impl == IMPL_PYTORCH)
        persistent_comm = PLAN_DS_REDUCE_BUCKET * p->grad_bytes;
    /* parameter buffers live between gathers (forward and backward) */
    double fwd_comm = 0, bwd_comm = 0;
    switch (s->buffers) {
    case BUF_FSDP_FULL:      /* root unit + 2 units in flight (rate limiter); 2 RS buffers in bwd */
        fwd_comm = (z->root_unit + 2 * z->largest_unit) * p->param_bytes;
        bwd_comm = fwd_comm + 2 * z->largest_unit * p->grad_bytes + z->root_unit * p->grad_bytes;
        break;
    case BUF_FSDP_GRAD_OP:   /* every unit stays unsharded from forward through backward */
        fwd_comm = z->psi * p->param_bytes;
        bwd_comm = fwd_comm + 2 * z->largest_unit * p->grad_bytes + z->root_unit * p->grad_bytes;
        break;
    case BUF_DS_STAGE3:      /* the gathered layer and the prefetched next one */
        fwd_comm = 2 * z->largest_any * p->param_bytes;
        /* engine: its root unit (embeddings tied to the LM head, + final norm) brackets each pass
           (exec_gpt2.h hook order), so it stays gathered through forward and through backward,
           beside the two blocks in flight */
        if (t->impl == IMPL_ENGINE) fwd_comm = (z->root_unit + 2 * z->largest_unit) * p->param_bytes;
        bwd_comm = fwd_comm;
        break;
    default: break;
    }
    /* nothing is sharded on one GPU, unless the parameters live on the host (offload): then
       units come up to the GPU as they would be gathered */
    if (c->gpus == 1 && !plan_offload_params_on_host(t, sk)) fwd_comm = bwd_comm = 0;
    /* FSDP2 (--fsdp 2, the default): unit by unit, plan_fsdp.h */
    Fsdp2 f2;
    if (plan_fsdp2_setup(&f2, m, t, c, sk, z)) {   /* out of host memory: never "fits" */
        r->peak = HUGE_VAL;
        snprintf(r->peak_where, sizeof(r->peak_where), "out of host memory planning it");
        return -1;
    }

    /* DeepSpeed as it runs (--impl pytorch): its per-tensor layout (plan_deepspeed.h) */
    int ds_py = plan_strategy_is_deepspeed(sk) && t->impl == IMPL_PYTORCH;
    int ds3_py = ds_py && s->buffers == BUF_DS_STAGE3;
    DsSizes ds;
    memset(&ds, 0, sizeof(ds));
    if (ds_py) plan_ds_sizes(m, z->n, &ds);
    double params_steady = z->params, opt_steady = z->optimizer;
    double grads_steady = z->grads;
    /* torch frees gradients in zero_grad(set_to_none=True); DeepSpeed and memplan's engine keep
       them allocated across steps, and so does torch with zero_grad(set_to_none=False) (zeroed in
       place) or DDP with gradient_as_bucket_view=True (the gradients are views of the persistent
       buckets: set_to_none drops the views, not the storage). Measured: docs/formulas.md
       "Gradients kept across steps" */
    int grads_persistent = s->grads_persistent || t->impl == IMPL_ENGINE ||
                           (t->impl == IMPL_PYTORCH && (t->zero_grad_keep ||
                            (s->buffers == BUF_DDP_BUCKETS && t->grad_as_bucket_view)));
    double grads_fwd = grads_persistent ? grads_steady : 0;
    /* DeepSpeed ZeRO-1/2 as it runs (stage_1_and_2.py, contiguous_gradients): each parameter's
       gradient is copied into the reduce bucket (ZeRO-2: by its hook, as it is ready; ZeRO-1:
       all at the end of backward) and freed; after the bucket's reduction
       copy_grads_in_partition copies the gradients of the rank's params_in_partition into
       grads_in_partition, sized for those tensors whole (the ones crossing the partition's ends
       included: DsSizes.grad_part), which lives from the first reduction (the bucket full, or
       the end of backward) until the step frees it. Measured: docs/formulas.md "DeepSpeed ZeRO-2
       gradients". */
    int ds12 = s->buffers == BUF_DS_REDUCE && t->impl == IMPL_PYTORCH;
    /* ZeRO-1 (partition_gradients off, overlap_comm off by default): the gradient hooks only set
       up the bucket (process_gradients calls reduce_ready_partitions_and_remove_grads only under
       partition_gradients or overlap_comm), so every gradient stays an ordinary .grad through
       backward, as under DDP; reduce_gradients copies them into the bucket at the end of
       backward. Measured: docs/formulas.md "DeepSpeed ZeRO-1 gradients are ordinary .grad tensors". */
    int ds12_stage1 = ds12 && !(s->shard & SHARD_GRAD);
    /* ZeRO-1/2's bucket lives from the first gradient hook of a backward (process_gradients ->
       setup_buckets) to that backward's epilogue (_release_ipg_buffers: bucket.buffer.clear()):
       not in forward, not at the loss's backward, not at the step. Measured: docs/formulas.md
       "DeepSpeed's reduce bucket". ZeRO-3 allocates its bucket once (stage3.py __init__). */
    double ds12_bucket = 0;
    int ds12_hooked = 0;   /* the walk has reached a layer with parameters in backward */
    if (ds12) { ds12_bucket = persistent_comm; persistent_comm = 0; }
    double o_part = (s->shard & SHARD_OPT) ? z->psi_shard : z->psi, ds12_seen = 0;
    int opt_on_gpu = !plan_offload_cpu_step(t, sk);
    const OptimizerSpec *os = plan_optimizer(t->optimizer);
    if (ds12) {
        o_part = ds.part;   /* the flat list padded to 2n, split in n */
        /* the parameters are views of the flat 16-bit group, padded the same way
           (flatten_dense_tensors_aligned; measured bert-base: 109,514,300 x 4 B) */
        params_steady = (double)z->n * ds.part * p->param_bytes;
        if (opt_on_gpu) opt_steady = o_part * (p->master_bytes + os->states * p->state_bytes);
        grads_persistent = 0;
        grads_fwd = 0;
        /* offload_optimizer: copy_grads_in_partition sends each reduced gradient to the host
           buffer instead (async_inplace_copy_grad_to_fp32_buffer_from_gpu); no
           grads_in_partition on the GPU: plan_offload_gpu_sizes' figure stands */
        grads_steady = opt_on_gpu ? ds.grad_part * p->grad_bytes : z->grads;
    }
    /* ZeRO-3 (stage3.py, partition_parameters.py): every tensor has its ds_tensor of
       ceil(numel / n) elements; tensors below stage3_param_persistence_threshold are also kept
       whole on every rank (in their padded all-gather buffer) and never gathered. Gradients and the fp32 partition follow the
       ds_tensors. Measured: docs/formulas.md "DeepSpeed ZeRO-3 persistent tensors". */
    if (ds3_py) {
        o_part = ds.shard;
        /* a persistent tensor's full data is the view of its all-gather buffer, n x ceil(numel / n) */
        if (!plan_offload_params_on_host(t, sk)) params_steady = (ds.shard + ds.persist_padded) * p->param_bytes;
        if (!plan_offload_grads_to_host(t, sk)) grads_steady = ds.shard * p->grad_bytes;
        if (opt_on_gpu) opt_steady = o_part * (p->master_bytes + os->states * p->state_bytes);
        grads_fwd = grads_steady;
    }
    /* gradient accumulation: the last micro-step starts with what the others left (accum_setup) */
    Accum acc;
    accum_setup(t, c, sk, z, &f2, ds12, ds3_py, ds12 && opt_on_gpu ? ds.grad_part * p->grad_bytes : 0, &acc);
    if (acc.persistent) {
        grads_persistent = 1;
        grads_fwd = grads_steady;
    }
    double acc_held = acc.held;   /* FSDP2 last: counts down unit by unit in backward */
    /* the global gradient norm DeepSpeed keeps between steps (_global_grad_norm, a scalar) */
    double ds_norm = ds_py && c->gpus > 1 && opt_on_gpu ? plan_ds_norm_bytes(ds3_py) : 0;   /* offload: not measured */
    grads_fwd += ds_norm;
    grads_steady += ds_norm;
    /* DeepSpeed keeps its own fp32 copy of the local partition for the optimizer even when the
       parameters are fp32 (stage_1_and_2.py single_partition_of_fp32_groups = ...clone().float(),
       stage3.py fp32_partitioned_groups_flat); measured: 3 x 4 B per local element with Adam */
    double ds_fp32 = (s->buffers == BUF_DS_REDUCE || s->buffers == BUF_DS_STAGE3) &&
                     t->impl == IMPL_PYTORCH && p->master_bytes == 0 &&
                     opt_on_gpu ? o_part * 4 : 0;   /* offload: on the host */
    r->ms_params = params_steady;
    r->ms_grads = grads_steady;
    r->ms_optimizer = opt_steady + ds_fp32;
    r->model_states = r->ms_params + r->ms_grads + r->ms_optimizer;
    /* torch Adam's step scalars (host memory on GPUs; see MemResult.opt_host_bytes) */
    int64_t n_tensors = plan_model_n_tensors(m);
    if (!ds_py && t->impl == IMPL_PYTORCH && os->step_scalar && n_tensors > 0 && opt_on_gpu)
        r->opt_host_bytes = 4.0 * (double)n_tensors;

    /* ---- forward, layer by layer: saved activations and autocast casts accumulate ---- */
    double acts = 0, casts = 0;
    /* the common loop's `outputs` holds the logits from the forward that made them through
       backward, the step and the next forward (until `outputs = model(...)` is reassigned);
       the head's own activations count them while the head's backward has not run */
    double held = plan_act_loop_held(m, t, &w.in);
    int head_done = 0;
    double tv[TERM_COUNT] = {0};
    tv[TERM_PARAMS] = params_steady;
    tv[TERM_GRADS] = grads_fwd + acc_held;
    tv[TERM_COMM] = persistent_comm + fwd_comm;
    int ds3 = ds3_py && c->gpus > 1;   /* ZeRO-3's gathers (Ds3Sim); one GPU gathers nothing */
    double ds3_now = 0;   /* gathered bytes at the current layer's backward */
    Ds3Sim d3;            /* ZeRO-3's fetching, only where ds3 */
    if (ds3) plan_ds3_sim_init(&d3, m, z->n);
    tv[TERM_OPTIMIZER] = opt_steady + ds_fp32;
    for (int i = 0; i < m->n_layers; i++) {
        acts += plan_act_ckpt_bytes(m, i, t, &w.in);
        /* autocast weight copies (memplan's engine layout keeps its whole-parameter count) */
        if (!(casts_leave_with_block(s, t, p) && m->layers[i].kind == LAYER_BLOCK))
            casts += (t->impl == IMPL_ENGINE ? (double)m->layers[i].params : layer_cast_elems(m, i)) *
                     p->cast_copy_bytes;
        tv[TERM_ACTIVATIONS] = acts + held;   /* + the previous step's logits */
        tv[TERM_TRANSIENT] = casts;
        if (f2.on) tv[TERM_COMM] = persistent_comm + plan_fsdp2_fwd_comm(&f2, m, i);
        if (ds3) tv[TERM_COMM] = persistent_comm + plan_ds3_sim_forward(&d3, i) * p->param_bytes;
        moment(&w, PHASE_FORWARD, i, tv, i == m->n_layers - 1 ? "end of forward" : "forward");
    }

    /* the loss's forward: the logits (and their fp32 upcast) beside the saved activations */
    double loss_fwd = plan_act_loss_forward_transient(m, t, &w.in);
    if (loss_fwd > 0 && m->n_layers > 0) {
        tv[TERM_TRANSIENT] = casts + loss_fwd;
        moment(&w, PHASE_FORWARD, m->n_layers - 1, tv, "loss forward");
        tv[TERM_TRANSIENT] = casts;
    }

    /* ---- backward, layer by layer from the last ---- */
    double loss_tr = plan_act_loss_transient(m, t, &w.in);
    double grads_now = grads_fwd;
    /* ZeRO-2 (DeepSpeed reduce bucket): a layer's full gradient exists from its backward until
       it is copied into the bucket; a tied embedding's, written first by the LM head, lives
       until the embedding's own backward completes it */
    int grad_flight = s->buffers == BUF_DS_REDUCE && (s->shard & SHARD_GRAD) && c->gpus > 1 && !ds12;
    double embed_params = 0;
    for (int i = 0; i < m->n_layers && m->tied_embeddings; i++)
        if (m->layers[i].kind == LAYER_EMBED) embed_params += (double)m->layers[i].params;
    double tied_grad = tied_head_grad_bytes(m, t, s, p, grad_flight), tied_live = 0;
    double root_grads = 0;                  /* FSDP2: the root unit's unsharded gradients */
    double unit_elems = 0;                  /* FSDP2: the current unit's elements, until its reduce-scatter */
    double head_tied = m->headless ? 0 : tied_embed_elems(m);   /* a tied head's V x e */
    double mlp_out = plan_act_block_mlp_out_elems(m);   /* a block's MLP output projection (elements) */
    int cached = ckpt_casts_cached(t, p);
    if (cached) casts = ckpt_casts_after_forward(m, p);   /* the region exited: cache cleared */
    /* the loss's own backward, before the head's: nll_loss's backward allocates a zeroed
       logits-sized gradient and log_softmax's backward a second one while the first is alive
       (measured: 2 x 4·b·s·V beyond the saved activations); the head's backward then holds one */
    if (t->impl == IMPL_PYTORCH && loss_tr > 0 && m->n_layers > 0) {
        tv[TERM_ACTIVATIONS] = acts;
        if (f2.on) tv[TERM_COMM] = persistent_comm + plan_fsdp2_bwd_comm(&f2, m, m->n_layers - 1);
        tv[TERM_TRANSIENT] = casts + 2 * loss_tr;
        moment(&w, PHASE_BACKWARD, m->n_layers - 1, tv, "loss backward");
    }
    for (int i = m->n_layers - 1; i >= 0; i--) {
        const LayerSpec *l = &m->layers[i];
        double pu = (double)l->params;
        double g_before = grads_now;   /* to tell the layer's own gradients (MLP backward) */
        if (l->kind == LAYER_HEAD) tied_live = tied_grad;   /* until the embedding's backward */
        double tied_sum = 0;    /* tied head: the sum of the two V x e halves (FSDP2: + its own half) */
        if (f2.on) {
            /* the embedding's backward writes its own V x e gradient beside the head's, and
               accumulating the two makes a third (the sum) before both halves are freed:
               measured 3 x V x e at the embedding's backward (gpt2, 2 ranks) */
            if (l->kind == LAYER_EMBED) tied_sum = 2 * head_tied * p->grad_bytes;
            /* a unit's gradients stay unsharded until its post-backward reduce-scatter (after
               its first layer's backward); the root unit's (the tied head's V x e first) until
               the end of backward */
            if (acc.unit_unsharded)   /* accumulated: only a tied head's half waits beside them */
                root_grads += (l->kind == LAYER_HEAD ? head_tied : 0) * p->grad_bytes;
            else if (l->unit <= 0)   /* the root */
                root_grads += (l->kind == LAYER_HEAD ? head_tied + pu : l->kind == LAYER_EMBED ? pu - head_tied : pu) *
                              p->grad_bytes;   /* a tied head's V x e arrives with the head's backward */
            if (l->unit > 0) unit_elems += pu;
        } else if (!grads_persistent && (!ds12 || ds12_stage1) && !acc.in_place &&
                   !plan_offload_grads_to_host(t, sk))   /* offloaded: shard leaves; accumulated: added in place */
            grads_now += ((s->shard & SHARD_GRAD) && c->gpus > 1 ? ceil(pu / (double)z->n) : pu) * p->grad_bytes;
        /* the autograd engine sums the two halves of a tied weight's gradient out of place
           (input_buffer.cpp accumulate: the head's half is a view of its mm output), so the
           embedding's backward holds the head's half, its own and the sum, whatever wraps the
           model (measured: three V x e tensors, aten::mm, embedding_dense_backward and aten::add,
           at BERT's word embeddings under DeepSpeed ZeRO-1; plain torch the same) */
        if (!f2.on && l->kind == LAYER_EMBED) tied_sum = tied_live;
        /* ZeRO-2: the partition exists from the first reduction: the bucket full (mid-backward)
           or the end of backward ("gradient reduction" below), not before */
        if (ds12 && !ds12_stage1 && (ds12_seen += pu) >= PLAN_DS_REDUCE_BUCKET)
            grads_now = grads_steady;
        /* + ZeRO-2's layer in flight (each gradient until its hook copies it into the bucket);
           + what the earlier micro-steps accumulated (accum_setup) */
        tv[TERM_GRADS] = grads_now + acc_held + (ds12 && !ds12_stage1 ? pu * p->grad_bytes : 0);
        if (grad_flight)
            tv[TERM_GRADS] += (embed_params + (l->kind != LAYER_EMBED ? pu : 0)) * p->grad_bytes;
        /* FSDP2: the current unit's new unsharded gradients (accumulated: added in place into acc_held) */
        double unit_grads = acc.unit_unsharded ? 0 : unit_elems * p->grad_bytes;
        tv[TERM_GRADS] += tied_live + root_grads + unit_grads + tied_sum;
        /* accumulating into existing gradients: AccumulateGrad adds the layer's new gradient
           in place and frees it, one parameter tensor at a time (the largest at most; a tied
           embedding: already in tied_sum, its half and the sum) */
        if (acc.in_place_tensor && tied_sum == 0) tv[TERM_GRADS] += (double)l->largest_tensor * p->grad_bytes;
        if (ds12 && pu > 0) ds12_hooked = 1;   /* its gradients' hooks have run */
        tv[TERM_COMM] = persistent_comm + (f2.on ? plan_fsdp2_bwd_comm(&f2, m, i) : bwd_comm) +
                        (ds12_hooked ? ds12_bucket : 0);
        if (ds3) tv[TERM_COMM] = persistent_comm + (ds3_now = plan_ds3_sim_backward(&d3, i) * p->param_bytes);
        tv[TERM_ACTIVATIONS] = acts + (head_done ? held : 0);
        double cast_i = (t->impl == IMPL_ENGINE ? pu : layer_cast_elems(m, i)) * p->cast_copy_bytes;
        double recast = cached && l->kind == LAYER_BLOCK ? cast_i : 0;
        /* a PyTorch block's backward starts with its MLP's (plan_act_block_backward_bytes): all
           its saved activations (and casts) are alive beside the MLP's working set, and of its
           own gradients only the MLP output projection's exist yet; by the block's end its
           activations and casts are freed and all its gradients exist ("backward of").
           Measured: docs/formulas.md "A block's backward" */
        double mlp_ws = plan_act_block_backward_bytes(m, i, t, &w.in);
        if (mlp_ws > 0) {
            double g_all = tv[TERM_GRADS];
            /* the block's own new gradients: FSDP2's unit (unless accumulated unsharded, added
               in place), ZeRO-2's in flight, else what this layer added (0 when accumulated in
               place or persistent) */
            double own = f2.on ? (l->unit > 0 && !acc.unit_unsharded ? pu * p->grad_bytes : 0)
                         : ds12 && !ds12_stage1 ? pu * p->grad_bytes : grads_now - g_before;
            double later = pu > 0 ? 1 - fmin(1, mlp_out / pu) : 0;
            tv[TERM_GRADS] = g_all - own * later;
            /* fc2's backward is done: its saved cast weight is freed (measured: the bf16 copy of
               c_proj.weight goes with AddmmBackward0, block_probe.py) */
            double fc2_cast = fmin(cast_i, mlp_out * p->cast_copy_bytes);
            tv[TERM_TRANSIENT] = casts + recast + mlp_ws - fc2_cast;
            moment(&w, PHASE_BACKWARD, i, tv, "MLP backward of");
            tv[TERM_GRADS] = g_all;
            /* by the block's end its saved activations and casts are freed (a recomputed
               block's casts too: recast is then not charged below) */
            acts -= plan_act_ckpt_bytes(m, i, t, &w.in);
            if (!recast) casts -= cast_i;
            tv[TERM_ACTIVATIONS] = acts + (head_done ? held : 0);
        }
        tv[TERM_TRANSIENT] = casts + (mlp_ws > 0 ? 0 : recast) +
                             plan_act_backward_workspace(m, i, t, &w.in) + (i == m->n_layers - 1 ? loss_tr : 0) +
                             cpu_conv_backward_bytes(m, i, t, p);
        moment(&w, PHASE_BACKWARD, i, tv, "backward of");
        if (ds3 && i > 0) plan_ds3_sim_release(&d3, i);   /* layer 0: after the reduction below */
        if (mlp_ws <= 0) {   /* freed after the layer's backward (a block with an MLP moment: above) */
            acts -= plan_act_ckpt_bytes(m, i, t, &w.in);
            if (!recast) casts -= cast_i;
        }
        if (l->kind == LAYER_HEAD) head_done = 1;
        if (l->kind == LAYER_EMBED) tied_live = 0;
        if (acc.unit_unsharded && l->kind == LAYER_EMBED)
            root_grads -= head_tied * p->grad_bytes;   /* the halves' sum went into the accumulated one */
        if (f2.on && plan_fsdp2_unit_starts(m, i)) {
            /* the unit's post-backward: its reduce-scatter input filled from the unsharded
               gradients, whose output becomes the sharded gradients (its local shard, padded
               per tensor's dim 0) */
            double shard = plan_fsdp2_shard(&f2, l->unit) * f2.sb;
            tv[TERM_ACTIVATIONS] = acts + held;
            tv[TERM_TRANSIENT] = casts;
            tv[TERM_COMM] = persistent_comm + plan_fsdp2_rs_comm(&f2, m, i);
            tv[TERM_GRADS] = grads_now + acc_held + root_grads + unit_grads + shard;
            moment(&w, PHASE_BACKWARD, i, tv, "reduce-scatter of");
            if (!plan_offload_grads_to_host(t, sk) && !acc.in_place) grads_now += shard;   /* offloaded: to the host;
                                                                         accumulated: added into the held shard */
            if (acc.unit_unsharded) acc_held -= unit_elems * acc.ub;   /* the unit's accumulated gradients, reduced */
            unit_elems = 0;
        }
    }
    if (f2.on) {
        /* the root's post-backward, last (its inputs need no gradient: the final callback) */
        double shard = z->root_shard * f2.sb;
        tv[TERM_ACTIVATIONS] = held;
        tv[TERM_TRANSIENT] = casts;
        tv[TERM_COMM] = persistent_comm + f2.root * f2.rb;
        tv[TERM_GRADS] = grads_now + acc_held + root_grads + shard;
        moment(&w, PHASE_BACKWARD, 0, tv, "reduce-scatter of the root unit");   /* after layer 0 */
        if (!plan_offload_grads_to_host(t, sk) && !acc.in_place) grads_now += shard;
        if (acc.unit_unsharded) acc_held = 0;   /* the root's, the last */
    }

    /* DeepSpeed ZeRO-1/2 at the end of backward, the last bucket's reduction (engine.backward
       -> reduce_ipg_grads -> average_tensor -> allreduce_and_scatter): allreduce_bucket
       flattens the bucket's gradient slices into a new tensor (self.flatten(bucket)) and
       all-reduces it; grads_in_partition is allocated only after, by copy_grads_in_partition.
       Measured (gpt2-mini fp32, full checkpointing): the peak is there, with the flattened copy
       (Ψ x 4 B, aten::cat in the allreduce_bucket scope) beside the 5e8-element bucket. The
       earlier buckets of a model above 5e8 elements are reduced the same way mid-backward;
       memplan charges their flattened copies only at the end. */
    if (ds12 && c->gpus > 1) {
        double buckets = ceil(z->psi / PLAN_DS_REDUCE_BUCKET);
        tv[TERM_ACTIVATIONS] = acts + held;
        tv[TERM_TRANSIENT] = casts;
        if (ds12_stage1) {
            /* ZeRO-1 reduces everything here (reduce_gradients): the .grad tensors move into
               the bucket one by one (their storage freed), the full bucket is flattened and
               all-reduced, and the partition is allocated after the first reduction. The first
               reduction holds the gradients not yet moved; the second (a model above 5e8
               elements) those left and the partition; later ones hold less. */
            double bkt = PLAN_DS_REDUCE_BUCKET;
            tv[TERM_GRADS] = ds_norm + fmax(0, z->psi - bkt) * p->grad_bytes;
            tv[TERM_COMM] = persistent_comm + ds12_bucket + fmin(bkt, z->psi) * p->grad_bytes;
            moment(&w, PHASE_BACKWARD, 0, tv, "gradient reduction");
            if (buckets > 1) {
                tv[TERM_GRADS] = grads_steady + fmax(0, z->psi - 2 * bkt) * p->grad_bytes;
                tv[TERM_COMM] = persistent_comm + ds12_bucket + fmin(bkt, z->psi - bkt) * p->grad_bytes;
                moment(&w, PHASE_BACKWARD, 0, tv, "gradient reduction");
            }
        } else {
            /* accumulation: the first micro-steps' partition is still held beside the new one
               (accum_setup); ZeRO-1's accumulated .grad are the ones moved above */
            tv[TERM_GRADS] = (buckets > 1 ? grads_steady : ds_norm) + acc_held;
            tv[TERM_COMM] = persistent_comm + ds12_bucket +
                            (z->psi - (buckets - 1) * PLAN_DS_REDUCE_BUCKET) * p->grad_bytes;
            moment(&w, PHASE_BACKWARD, 0, tv, "gradient reduction");   /* after layer 0's backward */
        }
    }

    /* DeepSpeed ZeRO-3 at the end of backward: the last gradient hook runs the epilogue
       (independent_gradient_partition_epilogue -> __reduce_and_partition_ipg_grads ->
       __avg_scatter_grads -> reduce_scatter_coalesced), which copies the bucket's gradients,
       each padded to n x ceil(numel / n), into one flat tensor (torch.cat, the reduce-scatter's
       input) beside the bucket, while the first layer, whose hook ran last, is still gathered;
       it is released after. Measured (bert-base, 2 ranks, fp32): aten::cat of 438,057,192 B in
       ds_avg_scatter_grads beside the 2e9 B bucket and the gathered word and position
       embeddings. Earlier buckets of a model above 5e8 elements are reduced mid-backward the
       same way; memplan charges only the last one. */
    if (ds3) {
        double buckets = ceil(z->psi / PLAN_DS_REDUCE_BUCKET);
        double last = fmax(0, ds.padded - (buckets - 1) * PLAN_DS_REDUCE_BUCKET);
        tv[TERM_GRADS] = grads_steady;
        tv[TERM_COMM] = persistent_comm + ds3_now + last * p->grad_bytes;
        tv[TERM_ACTIVATIONS] = acts + held;
        tv[TERM_TRANSIENT] = casts;
        moment(&w, PHASE_BACKWARD, 0, tv, "gradient reduction");
        plan_ds3_sim_release(&d3, 0);
    }

    /* ---- optimizer step ---- */
    tv[TERM_GRADS] = grads_steady;
    tv[TERM_COMM] = persistent_comm;
    tv[TERM_ACTIVATIONS] = held;   /* the common loop's logits */
    double o_local = ds_py ? o_part : (s->shard & SHARD_OPT) ? z->psi_shard : z->psi;
    /* torch's default foreach Adam allocates one state-sized temporary; DeepSpeed's fused
       optimizers (FusedAdam, the harness's and DeepSpeed's default: in place) do not */
    int torch_opt = p->master_bytes == 0 || plan_fsdp2_fp32_shards(t, sk);   /* torch.optim steps */
    tv[TERM_TRANSIENT] = (o->foreach_temp && torch_opt && t->impl != IMPL_ENGINE &&
                          !ds_py && !plan_offload_cpu_step(t, sk))   /* offload: the step runs on the CPU */
                             ? o_local * p->state_bytes : 0;   /* the engine updates in place */
    double norm_b, fp32_b;
    if (!plan_offload_cpu_step(t, sk) && ds_zero12_step(s, t, p, &norm_b, &fp32_b)) {   /* offload: on the host */
        double opt_tr = tv[TERM_TRANSIENT];
        /* fp64 copy for the norm: get_grad_norm_direct converts one gradient at a time of
           averaged_gradients, a list of the partition's per-tensor views
           (get_flat_partition(..., return_tensor_list=True)); each copy is freed after its
           vector_norm. fp32 parameters (measured): the largest tensor's slice; the mixed
           regimes keep i10p's measured whole-partition copy (bf16 run, docs). */
        double norm_elems = p->master_bytes > 0 ? o_local : fmin(o_local, (double)largest_tensor(m));
        tv[TERM_TRANSIENT] = norm_elems * norm_b;
        moment(&w, PHASE_STEP, -1, tv, "gradient norm");
        tv[TERM_TRANSIENT] = opt_tr;
        tv[TERM_GRADS] = grads_steady + o_local * fp32_b;     /* fp32 partition grad, 16-bit freed */
    }
    moment(&w, PHASE_STEP, -1, tv, "optimizer step");

    if (w.peak_layer >= 0 && r->peak_phase == PHASE_BACKWARD &&
        (strcmp(w.peak_where, "backward of") == 0 || strcmp(w.peak_where, "reduce-scatter of") == 0 ||
         strcmp(w.peak_where, "MLP backward of") == 0))
        snprintf(r->peak_where, sizeof(r->peak_where), "%s %s", w.peak_where, m->layers[w.peak_layer].name);
    else
        snprintf(r->peak_where, sizeof(r->peak_where), "%s", w.peak_where);
    r->gpu_fits = r->peak <= c->gpu.mem_bytes;
    r->headroom = c->gpu.mem_bytes - r->peak;
    OffloadHost h;
    plan_offload_host(m, t, c, sk, &h);
    r->host_per_node = h.per_node;
    r->host_capacity = h.capacity;
    r->host_fits = h.fits;
    r->fits = r->gpu_fits && r->host_fits;
    plan_fsdp2_free(&f2);
    return 0;
}

/* Every moment's total is affine in the micro-batch (activations, loss and scratch scale with
   b; everything else does not; the margin is a fraction or a constant). So two walks (b = 1, 2)
   give each moment's a + s*b, and the largest b that keeps every moment under the capacity
   follows directly; a final check at b and b+1 guards against rounding. */
typedef struct {
    double *tot;
    int n, cap;
} Totals;

static void collect(void *ctx, PhaseKind ph, int layer, const double term[TERM_COUNT], double total) {
    (void)ph; (void)layer; (void)term;
    Totals *T = ctx;
    if (T->n < T->cap) T->tot[T->n] = total;
    T->n++;
}

static int fits_at(const ModelSpec *m, const TrainSpec *t, const ClusterSpec *c, StrategyKind s, int64_t b) {
    TrainSpec tt = *t;
    MemResult r;
    tt.micro_batch = b;
    plan_memory(m, &tt, c, s, &r);
    return r.fits;
}

int64_t plan_max_micro_batch(const ModelSpec *m, const TrainSpec *t, const ClusterSpec *c,
                             StrategyKind s, int64_t max_b) {
    if (max_b < 1 || !fits_at(m, t, c, s, 1)) return 0;
    int cap = 4 * m->n_layers + 8;   /* forward per layer; per layer in backward up to 3 (a block's MLP
                                        backward, its end, a reduce-scatter); loss, reductions, norm, step */
    double stack1[512], stack2[512];
    double *t1 = cap <= 512 ? stack1 : malloc(sizeof(double) * (size_t)cap);
    double *t2 = cap <= 512 ? stack2 : malloc(sizeof(double) * (size_t)cap);
    int64_t best = max_b;
    if (!t1 || !t2) {              /* out of memory: fall back to bisection */
        int64_t lo = 1, hi = max_b + 1;
        while (hi - lo > 1) { int64_t mid = lo + (hi - lo) / 2; if (fits_at(m, t, c, s, mid)) lo = mid; else hi = mid; }
        best = lo;
    } else {
        Totals A = {t1, 0, cap}, B = {t2, 0, cap};
        TrainSpec tt = *t;
        MemResult r;
        tt.micro_batch = 1;
        plan_memory_walk(m, &tt, c, s, &r, collect, &A);
        tt.micro_batch = 2;
        plan_memory_walk(m, &tt, c, s, &r, collect, &B);
        int n = A.n < B.n ? A.n : B.n;
        if (n > cap) n = cap;
        for (int k = 0; k < n; k++) {
            double slope = t2[k] - t1[k], base = t1[k] - slope;
            if (slope <= 0) continue;
            double bk = floor((c->gpu.mem_bytes - base) / slope);
            if (bk < (double)best) best = bk < 1 ? 1 : (int64_t)bk;
        }
        while (best > 1 && !fits_at(m, t, c, s, best)) best--;
        while (best < max_b && fits_at(m, t, c, s, best + 1)) best++;
    }
    if (t1 != stack1) free(t1);
    if (t2 != stack2) free(t2);
    return best;
}
