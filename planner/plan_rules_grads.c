/* plan_rules_grads.c — rules for the model states and for the gradients as backward makes them:
 * what each framework allocates, when, and when it gives them up to the reduction or the
 * optimizer. Each rule's source and measurement: docs/formulas.md (the section named in the
 * rule table, plan_rules.c). Points: plan_step.h. */
#include <math.h>

#include "plan_step_internal.h"

/* The point before which backward's gradients give way to what the optimizer steps: the first
   reduction for ZeRO-1 (its .grad tensors move into the bucket there), else the norm. */
static int grads_end(const StepCtx *x) { return x->ds12_stage1 ? x->reduce_pt : pt(x, PT_NORM, 0); }

void rule_model_states(const StepCtx *x, Step *st) {
    int s0 = pt(x, PT_START, 0), end = pt(x, PT_END, 0);
    step_hold(st, RULE_PARAMS, TERM_PARAMS, s0, AT_BEFORE, end, AT_AFTER, x->params_steady);
    step_hold(st, RULE_OPTIMIZER, TERM_OPTIMIZER, s0, AT_BEFORE, end, AT_AFTER, x->opt_steady);
    step_hold(st, RULE_DS_FP32_COPY, TERM_OPTIMIZER, s0, AT_BEFORE, end, AT_AFTER, x->ds_fp32);
    step_hold(st, RULE_DS_NORM_SCALAR, TERM_GRADS, s0, AT_BEFORE, end, AT_AFTER, x->ds_norm);
    /* the model states as validate compares them: DeepSpeed's fp32 copy in the optimizer's, its
       gradient buffers and norm scalar in the gradients', ZeRO-3's persistent tensors in the
       parameters' */
    st->ms_params = x->params_steady;
    st->ms_grads = x->grads_steady + x->ds_norm;
    st->ms_optimizer = x->opt_steady + x->ds_fp32;
    /* torch Adam/AdamW's per-tensor `step` scalars: fp32, kept on the host even for GPU
       parameters (torch/optim/adam.py: device="cpu" unless capturable or fused) */
    int64_t n_tensors = plan_model_n_tensors(x->m);
    if (x->fsdp && x->t->fsdp_impl == 1 && x->torch && x->n > 1) {   /* FSDP1's original parameters */
        int64_t r = plan_fsdp1_rank_tensors(x->m, x->n);
        if (r >= 0) n_tensors = r;
    }
    if (!x->ds_py && x->torch && x->o->step_scalar && n_tensors > 0 && x->opt_on_gpu)
        st->opt_host_bytes = 4.0 * (double)n_tensors;
}

/* DeepSpeed, memplan's engine, zero_grad(set_to_none=False) and DDP's gradient_as_bucket_view
   keep the gradients allocated from one step to the next. */
void rule_grads_kept(const StepCtx *x, Step *st) {
    if (!x->grads_persistent) return;
    step_hold(st, RULE_GRADS_KEPT, TERM_GRADS, pt(x, PT_START, 0), AT_BEFORE, pt(x, PT_END, 0), AT_AFTER,
              x->grads_steady);
}

/* What the earlier micro-steps accumulated (plan_step_ctx.c accum_setup). Under FSDP2's
   --fsdp-grad-sync last each unit's unsharded gradients go with the unit's reduce-scatter in
   the last micro-step, the root's last; otherwise they are the gradients until the step. */
void rule_accum_grads(const StepCtx *x, Step *st) {
    const Accum *a = &x->acc;
    int s0 = pt(x, PT_START, 0);
    if (a->held <= 0) return;
    if (!a->unit_unsharded) {
        step_hold(st, RULE_ACCUM_GRADS, TERM_GRADS, s0, AT_BEFORE, grads_end(x), AT_BEFORE, a->held);
        return;
    }
    double rest = a->held;
    for (int k = 0; k < x->n_units; k++) {
        const StepUnit *u = &x->units[k];
        if (u->root || u->first < 0) continue;
        double b = u->elems * a->ub;
        step_hold(st, RULE_ACCUM_GRADS, TERM_GRADS, s0, AT_BEFORE, pt(x, PT_BWD_UNIT, u->first), AT_AFTER, b);
        rest -= b;
    }
    step_hold(st, RULE_ACCUM_GRADS, TERM_GRADS, s0, AT_BEFORE, pt(x, PT_ROOT_RS, 0), AT_AFTER, rest);
}

/* A layer's new .grad from AccumulateGrad, where torch (DDP, FSDP1, ZeRO-1's ordinary .grad,
   one GPU) allocates it in backward: the full tensor, or its shard where gradients are sharded.
   0 where something else holds them: kept gradients, FSDP2's unit timeline, ZeRO-2's bucket
   copy, accumulation in place, or offload to the host. */
static double autograd_grad(const StepCtx *x, int i) {
    if (x->f2.on || x->grads_persistent || (x->ds12 && !x->ds12_stage1) || x->acc.in_place ||
        plan_offload_grads_to_host(x->t, x->sk))
        return 0;
    double pu = (double)x->m->layers[i].params;
    return ((x->s->shard & SHARD_GRAD) && x->N > 1 ? ceil(pu / (double)x->n) : pu) * x->p->grad_bytes;
}

void rule_autograd_grads(const StepCtx *x, Step *st) {
    for (int i = x->L - 1; i >= 0; i--)
        step_hold(st, RULE_AUTOGRAD_GRADS, TERM_GRADS, pt(x, PT_BWD_MLP, i), AT_BEFORE, grads_end(x), AT_BEFORE,
                  autograd_grad(x, i));
}

/* The gradients the optimizer steps, where backward's were transient (torch's, FSDP's): from
   the norm on, at their steady size. ZeRO-1/2's partition is its own rule's. */
void rule_step_grads(const StepCtx *x, Step *st) {
    if (x->grads_persistent || x->ds12) return;
    step_hold(st, RULE_STEP_GRADS, TERM_GRADS, pt(x, PT_NORM, 0), AT_BEFORE, pt(x, PT_END, 0), AT_AFTER,
              x->grads_steady);
}

/* ---- tied output head (docs/formulas.md "Tied output head") ---- */

static int layer_of_kind(const ModelSpec *m, LayerKind k, int last) {
    int f = -1;
    for (int i = 0; i < m->n_layers; i++)
        if (m->layers[i].kind == k && (f < 0 || last)) f = i;
    return f;
}

/* A tied head (lm_head.weight is the token embedding's Parameter) gives that parameter two uses,
   so its AccumulateGrad node runs only when both gradients have arrived: the head's V x e
   gradient waits in the autograd engine's input buffer from the head's backward until the
   embedding's (torch/csrc/autograd/input_buffer.h). 0 where already charged: FSDP holds the root
   unit's full gradient through backward, and memplan's engine layout has its own accounting. */
static double tied_grad_bytes(const StepCtx *x) {
    const ModelSpec *m = x->m;
    int grad_flight = x->s->buffers == BUF_DS_REDUCE && (x->s->shard & SHARD_GRAD) && x->N > 1 && !x->ds12;
    if (!m->tied_embeddings || m->headless || x->engine || grad_flight || x->fsdp) return 0;
    int e = layer_of_kind(m, LAYER_EMBED, 0);
    return e >= 0 ? (double)m->layers[e].largest_tensor * x->p->grad_bytes : 0;
}

/* The V x e elements a tied head shares with the embedding (0 untied, or without a head). */
static double head_tied_elems(const ModelSpec *m) {
    if (m->headless || !m->tied_embeddings) return 0;
    int e = layer_of_kind(m, LAYER_EMBED, 1);
    return e >= 0 ? (double)m->layers[e].largest_tensor : 0;
}

/* The autograd engine sums the two halves of a tied weight's gradient out of place
   (input_buffer.cpp accumulate), so the embedding's backward holds the head's half, its own and
   the sum (measured: three V x e tensors at BERT's word embeddings, plain torch and ZeRO-1);
   under FSDP2 the embedding's own half and the sum beside the root's unsharded gradient. */
static double tied_sum_bytes(const StepCtx *x, int i) {
    if (x->m->layers[i].kind != LAYER_EMBED) return 0;
    if (x->f2.on) return 2 * head_tied_elems(x->m) * x->p->grad_bytes;
    int h = layer_of_kind(x->m, LAYER_HEAD, 1), e = layer_of_kind(x->m, LAYER_EMBED, 1);
    return h > i && i == e ? tied_grad_bytes(x) : 0;   /* the embedding backward reaches first */
}

void rule_tied_head(const StepCtx *x, Step *st) {
    const ModelSpec *m = x->m;
    double g = tied_grad_bytes(x);
    int h = layer_of_kind(m, LAYER_HEAD, 1), e = layer_of_kind(m, LAYER_EMBED, 1);
    if (g > 0 && h >= 0 && e >= 0 && e < h)
        step_hold(st, RULE_TIED_HEAD_GRAD, TERM_GRADS, pt(x, PT_BWD_MLP, h), AT_BEFORE, pt(x, PT_BWD, e), AT_AFTER, g);
    for (int i = 0; i < x->L; i++) {
        double sum = tied_sum_bytes(x, i);
        step_hold(st, RULE_TIED_SUM, TERM_GRADS, pt(x, PT_BWD_MLP, i), AT_BEFORE, pt(x, PT_BWD, i), AT_AFTER, sum);
        /* accumulating into existing gradients: AccumulateGrad adds the layer's new gradient in
           place and frees it, one parameter tensor at a time (the largest at most; a tied
           embedding's is the sum above) */
        if (x->acc.in_place_tensor && sum == 0)
            step_hold(st, RULE_INPLACE_ACCUM, TERM_GRADS, pt(x, PT_BWD_MLP, i), AT_BEFORE, pt(x, PT_BWD, i), AT_AFTER,
                      (double)m->layers[i].largest_tensor * x->p->grad_bytes);
    }
}

/* memplan's engine under ZeRO-2: a layer's full gradient exists from its backward until it is
   scattered into the bucket; a tied embedding's, written first by the LM head, lives until the
   embedding's own backward completes it (exec/exec_strategy.c; validate checks it). */
void rule_engine_grad_flight(const StepCtx *x, Step *st) {
    const ModelSpec *m = x->m;
    int flight = x->s->buffers == BUF_DS_REDUCE && (x->s->shard & SHARD_GRAD) && x->N > 1 && !x->ds12;
    if (!flight || x->L == 0) return;
    double gb = x->p->grad_bytes, embed = 0;
    for (int i = 0; i < x->L && m->tied_embeddings; i++)
        if (m->layers[i].kind == LAYER_EMBED) embed += (double)m->layers[i].params;
    step_hold(st, RULE_ENGINE_GRAD_FLIGHT, TERM_GRADS, pt(x, PT_BWD_MLP, x->L - 1), AT_BEFORE, pt(x, PT_BWD, 0), AT_AFTER,
              embed * gb);
    for (int i = 0; i < x->L; i++)
        if (m->layers[i].kind != LAYER_EMBED)
            step_hold(st, RULE_ENGINE_GRAD_FLIGHT, TERM_GRADS, pt(x, PT_BWD_MLP, i), AT_BEFORE, pt(x, PT_BWD, i), AT_AFTER,
                      (double)m->layers[i].params * gb);
}

/* ---- DeepSpeed ZeRO-1/2 (stage_1_and_2.py, contiguous_gradients) ---- */

/* ZeRO-2: each parameter's gradient is copied into the reduce bucket by its hook as it is ready
   and freed; grads_in_partition (the tensors overlapping the rank's partition, whole) exists
   from the first reduction: the first bucket closed mid-backward (by the hook of the tensor
   that did not fit, plan_ds_reduce_buckets), or the end of backward; a layer's backward holds
   one of its gradients at a time. ZeRO-1: the .grad tensors
   (rule_autograd_grads) move into the bucket at the end of backward one by one, whole, in the
   groups' order: the first reduction holds those not yet moved (all but the first bucket's), the
   partition is allocated after it, and a second reduction holds what is left beside the
   partition. docs/formulas.md "DeepSpeed ZeRO-2 gradients", "DeepSpeed ZeRO-1 gradients are
   ordinary .grad tensors through backward". */
void rule_ds12_gradients(const StepCtx *x, Step *st) {
    if (!x->ds12) return;
    const ModelSpec *m = x->m;
    const Ds12Buckets *b = &x->ds12b;
    double gb = x->p->grad_bytes, psi = x->z.psi;
    int end = pt(x, PT_END, 0), reduce = x->N > 1;
    if (!x->ds12_stage1) {
        /* the partition: from the hook of the tensor that closed the first bucket (at the MLP
           moment if the tensors made by then closed it, else at the rest of that layer's
           backward), else the norm */
        int at = pt(x, PT_NORM, 0), f = b->first_at;
        if (b->count > 1 && f >= 0)
            at = b->first_done <= plan_act_block_bwd_done_elems(m, f, x->t, &x->in) ? pt(x, PT_BWD_MLP, f)
                                                                                       : pt(x, PT_BWD, f);
        /* one gradient at a time: AccumulateGrad makes it, its hook copies it into the bucket and
           frees it (a tensor larger than the bucket waits for the next hook's reduction) */
        for (int i = x->L - 1; i >= 0; i--)
            step_hold(st, RULE_DS12_IN_FLIGHT, TERM_GRADS, pt(x, PT_BWD_MLP, i), AT_BEFORE, pt(x, PT_BWD, i), AT_AFTER,
                      plan_ds_largest_tensor(&m->layers[i]) * gb);
        step_hold(st, RULE_DS12_PARTITION, TERM_GRADS, at, AT_BEFORE, end, AT_AFTER, x->grads_steady);
        if (reduce) step_sample(st, pt(x, PT_REDUCE1, 0));
        return;
    }
    if (!reduce) {
        step_hold(st, RULE_DS12_PARTITION, TERM_GRADS, pt(x, PT_NORM, 0), AT_BEFORE, end, AT_AFTER, x->grads_steady);
        return;
    }
    int r1 = pt(x, PT_REDUCE1, 0), r2 = pt(x, PT_REDUCE2, 0);
    step_sample(st, r1);
    step_at(st, RULE_DS12_NOT_MOVED, TERM_GRADS, r1, fmax(0, psi - b->elems[0]) * gb);
    step_hold(st, RULE_DS12_PARTITION, TERM_GRADS, r1, AT_AFTER, end, AT_AFTER, x->grads_steady);
    if (b->count > 1) {
        step_sample(st, r2);
        step_at(st, RULE_DS12_NOT_MOVED, TERM_GRADS, r2, fmax(0, psi - b->elems[0] - b->elems[1]) * gb);
    }
}

/* ---- FSDP2 (torch/distributed/fsdp/_fully_shard/_fsdp_param_group.py post_backward) ---- */

/* A unit's gradients stay unsharded from its layers' backward until its post-backward
   reduce-scatter (after its first layer's backward), whose output becomes the sharded gradient
   (kept, unless it is added into the accumulated one or sent to the host); the root unit's (a
   tied head's V x e first) until the end of backward. Under --fsdp-grad-sync last only a tied
   head's half waits beside the accumulated ones. docs/formulas.md "FSDP2 buffers". */
void rule_fsdp2_gradients(const StepCtx *x, Step *st) {
    if (!x->f2.on) return;
    const ModelSpec *m = x->m;
    const Fsdp2 *f = &x->f2;
    double gb = x->p->grad_bytes, tied = head_tied_elems(m);
    int keep = !plan_offload_grads_to_host(x->t, x->sk) && !x->acc.in_place;
    int root_rs = pt(x, PT_ROOT_RS, 0), norm = pt(x, PT_NORM, 0);
    int e = layer_of_kind(m, LAYER_EMBED, 1);
    for (int i = x->L - 1; i >= 0; i--) {
        const LayerSpec *l = &m->layers[i];
        double pu = (double)l->params;
        int at = pt(x, PT_BWD_MLP, i);
        if (x->acc.unit_unsharded) {
            if (l->kind == LAYER_HEAD && e >= 0)
                step_hold(st, RULE_FSDP2_UNSHARDED_GRADS, TERM_GRADS, at, AT_BEFORE, pt(x, PT_BWD, e), AT_AFTER, tied * gb);
        } else if (l->unit <= 0) {   /* the root; a tied head's V x e arrives with the head's backward */
            double r = l->kind == LAYER_HEAD ? tied + pu : l->kind == LAYER_EMBED ? pu - tied : pu;
            step_hold(st, RULE_FSDP2_UNSHARDED_GRADS, TERM_GRADS, at, AT_BEFORE, root_rs, AT_AFTER, r * gb);
        } else {
            const StepUnit *u = &x->units[x->unit_of[i]];
            step_hold(st, RULE_FSDP2_UNSHARDED_GRADS, TERM_GRADS, at, AT_BEFORE, pt(x, PT_BWD_UNIT, u->first), AT_AFTER,
                      pu * gb);
        }
        if (plan_fsdp2_unit_starts(m, i)) {   /* the unit's reduce-scatter output */
            int p = pt(x, PT_BWD_UNIT, i);
            step_sample(st, p);
            double shard = plan_fsdp2_shard(f, l->unit) * f->sb;
            if (keep) step_hold(st, RULE_FSDP2_SHARDED_GRADS, TERM_GRADS, p, AT_BEFORE, norm, AT_BEFORE, shard);
            else step_at(st, RULE_FSDP2_SHARDED_GRADS, TERM_GRADS, p, shard);
        }
    }
    step_sample(st, root_rs);
    double shard = x->z.root_shard * f->sb;
    if (keep) step_hold(st, RULE_FSDP2_SHARDED_GRADS, TERM_GRADS, root_rs, AT_BEFORE, norm, AT_BEFORE, shard);
    else step_at(st, RULE_FSDP2_SHARDED_GRADS, TERM_GRADS, root_rs, shard);
}

/* A block's backward starts with its MLP's: of the block's own new gradients only the MLP
   output projection's exist yet (plan_act_block_backward_bytes). The others are pending at the
   MLP moment: the block's gradient bytes times the share of its parameters outside fc2.
   docs/formulas.md "A block's backward". */
void rule_mlp_pending_grads(const StepCtx *x, Step *st) {
    const ModelSpec *m = x->m;
    double gb = x->p->grad_bytes;
    for (int i = 0; i < x->L; i++) {
        if (step_mlp_ws(x, i) <= 0) continue;
        double mlp_out = plan_act_block_bwd_done_elems(m, i, x->t, &x->in);
        const LayerSpec *l = &m->layers[i];
        double pu = (double)l->params;
        /* ZeRO-2 holds one tensor, its largest (rule_ds12_gradients): at the MLP moment as much of
           it as the MLP output projection has made */
        double one = x->ds12 && !x->ds12_stage1 ? plan_ds_largest_tensor(l) : 0;
        double own = x->f2.on ? (l->unit > 0 && !x->acc.unit_unsharded ? pu * gb : 0)
                   : one > 0 ? one * gb : autograd_grad(x, i);
        double whole = one > 0 ? one : pu;
        double later = whole > 0 ? 1 - fmin(1, mlp_out / whole) : 0;
        double pending = own * later;
        int p = pt(x, PT_BWD_MLP, i);
        step_mem(st, RULE_MLP_PENDING_GRADS, TERM_GRADS, p, AT_BEFORE, -pending);
        step_mem(st, RULE_MLP_PENDING_GRADS, TERM_GRADS, p, AT_AFTER, pending);
    }
}
