/* plan_step_ctx.c — one setup resolved once for the rules (plan_step_internal.h): which layout
 * runs, the steady model-state sizes, what accumulation leaves behind, and the sharded units.
 * Each figure's source is named where it is set; docs/formulas.md has the derivations. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "plan_step_internal.h"

/* Gradient accumulation (--grad-accum K > 1; docs/formulas.md "Gradient accumulation"). The
   peak is in the last of the K micro-steps, which starts with what the K-1 before it left:
   - DDP under no_sync() (torch/nn/parallel/distributed.py: no prepare_for_backward, so the
     reducer's hooks do nothing): every parameter's full .grad; the last micro-step's
     AccumulateGrad adds into it in place, so its backward keeps no new gradient (each is alive
     until it is added: a layer's largest tensor at most). The bucket copy is allocated at
     construction and stays. Likewise one GPU, FSDP1 every (its sharded gradients) and the other
     torch layouts: gradients held from the start.
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
static void accum_setup(StepCtx *x, double ds_part_bytes) {
    const TrainSpec *t = x->t;
    Accum *a = &x->acc;
    memset(a, 0, sizeof(*a));
    if (t->grad_accum <= 1 || !x->torch || x->ds3_py) return;
    int last = x->fsdp && t->fsdp_grad_sync == FSDP_SYNC_LAST && x->N > 1;
    a->in_place_tensor = 1;
    if (x->f2.on) {
        if (last) {
            a->unit_unsharded = 1;
            a->ub = x->f2.rb;   /* accumulated in the reduce dtype (= the gradients' without a policy) */
            a->held = x->z.psi * a->ub;
        } else {
            a->in_place = 1;
            a->in_place_tensor = 0;   /* the last micro-step's unsharded gradients are new */
            a->held = plan_offload_grads_to_host(t, x->sk) ? 0 : x->z.psi_shard * x->f2.sb;
        }
    } else if (x->ds12) {
        if (x->s->shard & SHARD_GRAD) {
            a->in_place_tensor = 0;    /* its hooks copy each new gradient into the bucket */
            a->held = ds_part_bytes;   /* offload: 0, accumulated on the host */
        } else {
            a->in_place = 1;
            a->held = x->z.psi * x->p->grad_bytes;
        }
    } else if (last) {   /* FSDP1 no_sync: the unsharded flat gradients */
        a->in_place = 1;
        a->held = x->z.psi * x->p->grad_bytes;
    } else {
        a->persistent = 1;
        a->in_place_tensor = !x->fsdp;   /* FSDP1 every: its unsharded flat gradients are new */
    }
}

/* The steady model states: what the optimizer steps and keeps, per layout. */
static void model_states(StepCtx *x) {
    const TrainSpec *t = x->t;
    const PrecisionSpec *p = x->p;
    const Strategy *s = x->s;
    x->params_steady = x->z.params;
    x->opt_steady = x->z.optimizer;
    x->grads_steady = x->z.grads;
    /* torch frees gradients in zero_grad(set_to_none=True); DeepSpeed and memplan's engine keep
       them allocated across steps, and so does torch with zero_grad(set_to_none=False) (zeroed in
       place) or DDP with gradient_as_bucket_view=True (the gradients are views of the persistent
       buckets). docs/formulas.md "Gradients kept across steps" */
    x->grads_persistent = s->grads_persistent || x->engine ||
                          (x->torch && (t->zero_grad_keep ||
                                        (s->buffers == BUF_DDP_BUCKETS && t->grad_as_bucket_view)));
    x->o_part = (s->shard & SHARD_OPT) ? x->z.psi_shard : x->z.psi;
    double state_b = p->master_bytes + x->o->states * p->state_bytes;
    if (x->ds12) {
        /* the flat 16-bit group padded to 2n, split in n (flatten_dense_tensors_aligned);
           grads_in_partition: the tensors overlapping the rank's partition, whole
           (docs/formulas.md "DeepSpeed ZeRO-2 gradients"); offload_optimizer sends them to the
           host instead */
        x->o_part = x->ds.part;
        x->params_steady = (double)x->n * x->ds.part * p->param_bytes + x->z.frozen;
        if (x->opt_on_gpu) x->opt_steady = x->o_part * state_b;
        x->grads_persistent = 0;
        x->grads_steady = x->opt_on_gpu ? x->ds.grad_part * p->grad_bytes : x->z.grads;
    }
    if (x->ds3_py) {
        /* every tensor's ds_tensor, and the persistent ones whole in their padded all-gather
           buffer (docs/formulas.md "DeepSpeed ZeRO-3 persistent tensors") */
        x->o_part = x->ds.shard;
        if (!plan_offload_params_on_host(t, x->sk))
            x->params_steady = (x->ds.shard + x->ds.persist_padded + x->ds.frozen_shard + x->ds.frozen_persist_padded) *
                               p->param_bytes;
        if (!plan_offload_grads_to_host(t, x->sk)) x->grads_steady = x->ds.shard * p->grad_bytes;
        if (x->opt_on_gpu) x->opt_steady = x->o_part * state_b;
    }
    /* DeepSpeed keeps its own copy of the local partition at the master dtype even when that is
       the parameters' own (stage_1_and_2.py single_partition_of_fp32_groups: .clone().to(
       master_weights_and_grads_dtype), stage3.py fp32_partitioned_groups_flat): fp32 for fp32
       parameters, bf16 for pure bf16 (bf16_master_weights_and_grads, as auto --emit writes it;
       an estimate, not yet measured) */
    x->ds_fp32 = (s->buffers == BUF_DS_REDUCE || s->buffers == BUF_DS_STAGE3) && x->torch && p->master_bytes == 0 &&
                 x->opt_on_gpu ? x->o_part * p->param_bytes : 0;
    /* the global gradient norm DeepSpeed keeps between steps (_global_grad_norm) */
    x->ds_norm = x->ds_py && x->N > 1 && x->opt_on_gpu ? plan_ds_norm_bytes(x->ds3_py) : 0;
}

/* The sharded units in the order plan_memory_sizes pads them: the repeated blocks, the root
   last; a model without units: each layer with parameters. */
static int units_setup(StepCtx *x) {
    const ModelSpec *m = x->m;
    int K = plan_model_units(m);
    int own = K == 0 && !m->root_only;   /* every layer its own unit */
    int cap = own ? m->n_layers : K + 1;
    x->units = calloc((size_t)(cap > 0 ? cap : 1), sizeof(StepUnit));
    x->unit_of = malloc(sizeof(int) * (size_t)(m->n_layers > 0 ? m->n_layers : 1));
    if (!x->units || !x->unit_of) return -1;
    double nn = (double)x->n;
    int dim0 = x->z.dim0;
    int64_t ep = m->moe.ep > 1 && x->n % m->moe.ep == 0 && dim0 ? m->moe.ep : 1;   /* plan_dim_ep.h */
    StepUnit root = {-1, -1, 0, 0, 0, 0, 1, 0};
    for (int i = 0; i < m->n_layers; i++) {
        const LayerSpec *l = &m->layers[i];
        int64_t esh = 0;
        double sh = ep > 1 && l->expert_mask ? (double)plan_layer_shard_dim0_ep(l, x->n, x->n / ep, &esh)
                  : dim0 ? (double)plan_layer_shard_dim0(l, x->n) : ceil((double)l->params / nn);
        double fsh = l->frozen <= 0 ? 0 : dim0 ? (double)plan_layer_frozen_shard_dim0(l, x->n) : ceil((double)l->frozen / nn);
        x->unit_of[i] = -1;
        if (own) {
            if (l->params <= 0) continue;
            x->unit_of[i] = x->n_units;
            x->units[x->n_units++] = (StepUnit){i, i, (double)l->params, sh, 0, 0, 0, 0};
            continue;
        }
        if (l->unit == 0) {
            if (root.first < 0) root.first = i;
            root.last = i;
            root.elems += (double)l->params;
            root.shard += dim0 ? sh : 0;
            root.felems += (double)l->frozen;
            root.fshard += dim0 ? fsh : 0;
            x->unit_of[i] = K;                 /* the root's slot, filled below */
            continue;
        }
        StepUnit *u = x->n_units > 0 && x->units[x->n_units - 1].last == i - 1 &&
                      m->layers[i - 1].unit == l->unit ? &x->units[x->n_units - 1] : NULL;
        if (!u) { u = &x->units[x->n_units++]; *u = (StepUnit){i, i, 0, 0, 0, 0, 0, 0}; }
        u->last = i;
        u->elems += (double)l->params;
        u->shard += dim0 ? sh : 0;
        u->eshard += (double)esh;
        u->felems += (double)l->frozen;
        u->fshard += dim0 ? fsh : 0;
        x->unit_of[i] = (int)(u - x->units);
    }
    if (own) return 0;
    for (int k = 0; k < x->n_units; k++)
        if (!dim0) {
            x->units[k].shard = ceil(x->units[k].elems / nn);
            x->units[k].fshard = ceil(x->units[k].felems / nn);
        }
    root.shard = x->z.root_shard;
    root.fshard = x->z.root_frozen_shard;
    int slot = x->n_units;
    x->units[x->n_units++] = root;
    for (int i = 0; i < m->n_layers; i++) if (x->unit_of[i] == K) x->unit_of[i] = slot;
    return 0;
}

int plan_step_ctx_init(StepCtx *x, const RankView *v) { return plan_step_ctx_init_for(x, v, PLAN_STEP_ALL); }

int plan_step_ctx_init_for(StepCtx *x, const RankView *v, unsigned what) {
    memset(x, 0, sizeof(*x));
    const ModelSpec *m = &v->m;
    const TrainSpec *t = &v->t;
    const ClusterSpec *c = &v->dp;
    StrategyKind sk = v->sk;
    x->v = v;
    x->m = m; x->t = t; x->c = c; x->sk = sk;
    x->full = &v->full;
    x->s = plan_strategy(sk);
    x->p = plan_precision(t->precision);
    x->o = plan_optimizer(t->optimizer);
    x->L = m->n_layers;
    plan_memory_sizes(m, t, c, sk, &x->z);
    plan_offload_host_sized(m, t, c, sk, &x->z, &x->host);   /* what plan_offload_host(m, t, c, sk) gives */
    x->in.b = t->micro_batch;
    x->in.s = t->seq > 0 ? t->seq : m->max_seq;
    x->in.dropout = t->dropout >= 0 ? t->dropout : m->dropout;
    x->N = c->gpus;
    x->n = x->z.n;
    x->torch = t->impl == IMPL_PYTORCH;
    x->engine = t->impl == IMPL_ENGINE;
    x->ds_py = plan_strategy_is_deepspeed(sk) && x->torch;
    x->ds12 = x->s->buffers == BUF_DS_REDUCE && x->torch;
    /* ZeRO-1: the hooks only set up the bucket; every gradient stays an ordinary .grad through
       backward (docs/formulas.md "DeepSpeed ZeRO-1 gradients are ordinary .grad tensors") */
    x->ds12_stage1 = x->ds12 && !(x->s->shard & SHARD_GRAD);
    x->ds3_py = x->ds_py && x->s->buffers == BUF_DS_STAGE3;
    x->ds3 = x->ds3_py && x->N > 1;
    x->fsdp = x->s->buffers == BUF_FSDP_FULL || x->s->buffers == BUF_FSDP_GRAD_OP;
    x->opt_on_gpu = !plan_offload_cpu_step(t, sk);
    /* the compute rule reads no more (the model, the setup, the sizes, the host's figures) */
    if (what & PLAN_STEP_COMPUTE) return 0;
    if (plan_fsdp2_setup(&x->f2, m, t, c, sk, &x->z)) return -1;
    x->dsk = plan_ds_knobs(t);
    if (x->ds_py) plan_ds_sizes(m, x->n, x->dsk.persist, &x->ds);
    x->ds12_forward = x->ds12_stage1 && x->dsk.overlap_comm != 1;
    if (x->ds12) plan_ds12_buckets(m, x->n, x->ds.part, x->dsk.reduce_bucket, x->ds12_forward, &x->ds12b);
    model_states(x);
    accum_setup(x, x->ds12 && x->opt_on_gpu ? x->ds.grad_part * x->p->grad_bytes : 0);
    if (x->acc.persistent) x->grads_persistent = 1;
    x->reduce_pt = x->ds12 && x->N > 1 ? pt(x, PT_REDUCE1, 0) : pt(x, PT_NORM, 0);
    if (!(what & PLAN_STEP_TIME)) {
        size_t nl = (size_t)(x->L > 0 ? x->L : 1);
        x->mlp_ws = malloc(sizeof *x->mlp_ws * nl);
        x->moe_freed = malloc(sizeof *x->moe_freed * nl);
        if (!x->mlp_ws || !x->moe_freed) return -1;
        for (int i = 0; i < x->L; i++) {
            x->mlp_ws[i] = plan_act_block_backward_bytes(m, i, t, &x->in);
            x->moe_freed[i] = plan_moe_bwd_freed_bytes(m, i, t, &x->in);
        }
    }
    return units_setup(x);
}

void plan_step_ctx_free(StepCtx *x) {
    plan_fsdp2_free(&x->f2);
    free(x->units);
    free(x->unit_of);
    free(x->mlp_ws);
    free(x->moe_freed);
    x->units = NULL;
    x->unit_of = NULL;
    x->mlp_ws = NULL;
    x->moe_freed = NULL;
}

double step_mlp_ws(const StepCtx *x, int i) { return x->mlp_ws[i]; }
double step_moe_freed(const StepCtx *x, int i) { return x->moe_freed[i]; }

/* Elements of layer i that autocast casts to the low-precision dtype: the weights of its
   matmuls and convolutions. Embedding lookups and norms run in fp32 under autocast (measured:
   F.embedding and F.layer_norm return fp32), so the embedding casts nothing; a tied head casts
   the shared V x e embedding weight. memplan's engine layout keeps its whole-parameter count. */
double step_cast_elems(const StepCtx *x, int i) {
    const ModelSpec *m = x->m;
    const LayerSpec *l = &m->layers[i];
    if (x->engine) return (double)l->params;
    switch (l->kind) {
    case LAYER_EMBED: case LAYER_NORM: case LAYER_BN: return 0;
    case LAYER_HEAD: {
        double e = 0;
        for (int k = 0; k < m->n_layers && m->tied_embeddings; k++)
            if (m->layers[k].kind == LAYER_EMBED) e = (double)m->layers[k].largest_tensor;
        return (double)l->params + e;
    }
    default: return (double)l->params - plan_act_uncast_params(m, l);   /* grouped_mm experts: uncast */
    }
}

/* Autocast caches the low-precision copy of every leaf tensor that requires grad until the
   autocast region exits (aten/src/ATen/autocast_mode.cpp cached_cast; torch.amp.autocast.__exit__
   clears the cache). A checkpointed block saves nothing, so its copies live as long as the
   cache; a recomputed block re-enters autocast and holds its own while it runs.
   docs/formulas.md "Autocast's cast cache". */
int step_casts_cached(const StepCtx *x, int i) {
    return plan_act_checkpointed(x->m, x->t, i) && x->p->cast_copy_bytes > 0 && x->torch;
}

/* FSDP1 (--fsdp 1) hands the module views of its flat parameter: not leaves, never cached, so a
   checkpointed block's casts are freed with its forward (torch/distributed/fsdp/_flat_param.py
   _use_unsharded_views(as_params=False)). */
int step_casts_leave_with_block(const StepCtx *x, int i) {
    return step_casts_cached(x, i) && x->fsdp && x->t->fsdp_impl == 1;
}
