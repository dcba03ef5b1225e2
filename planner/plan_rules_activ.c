/* plan_rules_activ.c — rules for activations and transients: what forward saves for backward,
 * autocast's cast cache, the loss, the working sets of backward and the optimizer step's
 * temporaries. Per-layer sizes come from plan_activ.c; each rule says when they live.
 * Sources: docs/formulas.md "Activations", "Transients", "A block's backward". */
#include <math.h>

#include "plan_dim_ft.h"
#include "plan_dim_moe.h"
#include "plan_step_internal.h"

static int last_of_kind(const ModelSpec *m, LayerKind k) {
    int f = -1;
    for (int i = 0; i < m->n_layers; i++) if (m->layers[i].kind == k) f = i;
    return f;
}

/* A layer's saved tensors live from its forward to its backward; a PyTorch block's are freed by
   the end of its backward (its MLP moment sees them all, its "backward of" moment none). The
   common loop's `outputs` holds the logits from one forward until the next forward returns:
   through the previous step's tail and this step's forward, then again once the head's backward
   has freed its saved copy. */
void rule_saved_activations(const StepCtx *x, Step *st) {
    for (int i = 0; i < x->L; i++) {
        double a = plan_act_ckpt_bytes(x->m, i, x->t, &x->in), prod = step_moe_freed(x, i);
        StepWhen w = step_mlp_ws(x, i) > 0 ? AT_BEFORE : AT_AFTER;
        /* a MoE block's product, down output and weights go at its MLP moment (its working set
           holds them back) */
        step_hold(st, RULE_SAVED_ACTS, TERM_ACTIVATIONS, pt(x, PT_FWD, i), AT_BEFORE, pt(x, PT_BWD, i), w, a - prod);
        step_hold(st, RULE_SAVED_ACTS, TERM_ACTIVATIONS, pt(x, PT_FWD, i), AT_BEFORE, pt(x, PT_BWD_MLP, i), AT_BEFORE,
                  prod);
    }
    double held = plan_act_loop_held(x->m, x->t, &x->in);
    int h = last_of_kind(x->m, LAYER_HEAD), first;
    /* the blocks' attention mask: made before the first block, freed when the base model's
       forward returns (after its final norm, before the head's projection: recorded on
       gpt2-mini eager, freed after ln_f's allocations, before lm_head's) */
    double mask = plan_act_forward_masks(x->m, x->t, &x->in, &first);
    if (mask > 0)
        step_hold(st, RULE_ATTN_MASK, TERM_ACTIVATIONS, first > 0 ? pt(x, PT_FWD, first - 1) : pt(x, PT_FWD, first),
                  first > 0 ? AT_AFTER : AT_BEFORE,
                  h > first ? pt(x, PT_FWD, h) : pt(x, PT_LOSS_FWD, 0), AT_BEFORE, mask);
    step_hold(st, RULE_LOOP_LOGITS, TERM_ACTIVATIONS, pt(x, PT_START, 0), AT_BEFORE, pt(x, PT_LOSS_FWD, 0), AT_AFTER, held);
    if (h >= 0)
        step_hold(st, RULE_LOOP_LOGITS, TERM_ACTIVATIONS, pt(x, PT_BWD, h), AT_AFTER, pt(x, PT_END, 0), AT_AFTER, held);
}

/* Autocast's low-precision weight copies (plan_step_ctx.c step_ckpt_casts_cached): cached from
   each layer's forward, saved for its backward and freed with it (fc2's with its backward, at the
   MLP moment: measured, block_probe.py); under full checkpointing the blocks' copies go when the
   autocast region exits after forward, and a recomputed block holds its own while it runs;
   FSDP1's flat-parameter views are never cached. */
void rule_autocast_cache(const StepCtx *x, Step *st) {
    double ccb = x->p->cast_copy_bytes;
    if (ccb <= 0) return;
    for (int i = 0; i < x->L; i++) {
        double mlp_out = plan_act_block_bwd_cast_elems(x->m, i, x->t, &x->in) * ccb;
        double cast = step_cast_elems(x, i) * ccb;
        if (cast <= 0) continue;
        int cached = step_casts_cached(x, i), leave = step_casts_leave_with_block(x, i);
        int mlp = step_mlp_ws(x, i) > 0;
        int mp = pt(x, PT_BWD_MLP, i), bp = pt(x, PT_BWD, i);
        double fc2 = fmin(cast, mlp_out);
        if (!leave) step_mem(st, RULE_AUTOCAST_CACHE, TERM_TRANSIENT, pt(x, PT_FWD, i), AT_BEFORE, cast);
        if (cached) {
            if (!leave) step_mem(st, RULE_AUTOCAST_CACHE, TERM_TRANSIENT, pt(x, PT_LOSS_FWD, 0), AT_AFTER, -cast);
            if (mlp) {   /* recomputed: its copies while its MLP runs, fc2's gone with fc2's backward */
                step_mem(st, RULE_RECAST, TERM_TRANSIENT, mp, AT_BEFORE, cast - fc2);
                step_mem(st, RULE_RECAST, TERM_TRANSIENT, mp, AT_AFTER, -(cast - fc2));
            } else {
                step_at(st, RULE_RECAST, TERM_TRANSIENT, bp, cast);
            }
        } else if (mlp) {
            step_mem(st, RULE_AUTOCAST_CACHE, TERM_TRANSIENT, mp, AT_BEFORE, -fc2);
            step_mem(st, RULE_AUTOCAST_CACHE, TERM_TRANSIENT, bp, AT_BEFORE, -(cast - fc2));
        } else {
            step_mem(st, RULE_AUTOCAST_CACHE, TERM_TRANSIENT, bp, AT_AFTER, -cast);
        }
    }
}

/* Working sets while a layer's backward runs: a block's MLP backward (its two f-wide gradients,
   the residual stream's, recomputed activations under checkpointing: plan_act_block_backward_bytes),
   the gradient a block's backward leaves (plan_act_backward_workspace), and on CPU ranks
   oneDNN's weight-gradient buffer for a convolution (docs/formulas.md "CPU convolution
   backward"). */
static double cpu_conv_backward_bytes(const StepCtx *x, int i) {
    const ModelSpec *m = x->m;
    const TrainSpec *t = x->t;
    const LayerSpec *l = &m->layers[i];
    if (!t->autocast_cpu || !x->torch || l->kind != LAYER_CONV || l->conv_kernel <= 0 || l->params <= 0) return 0;
    /* ATen runs a float convolution through oneDNN unless it is pointwise (1x1, stride 1) with a
       batch below 16, or a batch of 1 with a kernel of at most 3 and at most 20480 input
       elements (aten/src/ATen/native/Convolution.cpp ConvParams::use_mkldnn) */
    int64_t b = t->micro_batch, k = l->conv_kernel, s = l->conv_stride > 0 ? l->conv_stride : 1;
    double in = 1e18;   /* unknown out channels: large (batch 1 then takes oneDNN) */
    if (l->n_tensors > 0 && l->tensor_dim0[0] > 0 && l->fwd_flops > 0) {
        double cin = (double)l->params / ((double)l->tensor_dim0[0] * (double)(k * k));
        double area = l->fwd_flops / (2.0 * (double)l->params) * plan_cnn_area_scale(m, t->seq);
        in = cin * area * (double)(s * s);
    }
    int onednn = (!(k == 1 && s == 1) || b >= 16) && (k > 3 || b > 1 || (double)b * in > 20480);
    return onednn ? (double)l->params * x->p->act_bytes : 0;
}

/* --quant-base nf4|int8: bitsandbytes' Linear4bit / Linear8bitLt dequantize the frozen weight
   to the compute dtype for each matmul (MatMul4Bit.forward: F.dequantize_4bit(B).to(A.dtype)),
   and again in backward for the input's gradient; the copy lives while the projection runs: the
   layer's largest frozen projection at the activations' dtype, in forward and in backward. An
   estimate from the source (no QLoRA step is measured). */
static double dequant_bytes(const StepCtx *x, int i) {
    QuantKind q = x->t->ft.quant;
    if (q != QUANT_NF4 && q != QUANT_INT8) return 0;
    const LayerSpec *l = &x->m->layers[i];
    double big = 0;
    for (int k = 0; k < l->n_frozen; k++) {
        int id = PLAN_MOD_ID(l->frozen_mod[k]);
        if (id != PLAN_MOD_NONE && id != PLAN_MOD_LM_HEAD && (double)l->frozen_elems[k] > big) big = (double)l->frozen_elems[k];
    }
    if (x->t->ft.packed)   /* the rank's view holds the packed storage: the weight it dequantizes to */
        big = floor(big * x->p->param_bytes / plan_quant_bytes_per_param(x->t));
    return big * x->p->act_bytes;
}

void rule_backward_transients(const StepCtx *x, Step *st) {
    for (int i = 0; i < x->L; i++) {
        double dq = dequant_bytes(x, i);
        if (dq > 0) {
            step_at(st, RULE_QUANT_DEQUANT, TERM_TRANSIENT, pt(x, PT_FWD, i), dq);
            step_at(st, RULE_QUANT_DEQUANT, TERM_TRANSIENT, pt(x, PT_BWD, i), dq);
        }
        /* the forward's op temporaries at their most at once (plan_act_fwd_temp_peak); the
           listing makes them between the layer's saved tensors (plan_step_alloc.c act_weights) */
        if (x->torch) step_at(st, RULE_FWD_TEMPS, TERM_TRANSIENT, pt(x, PT_FWD, i), plan_act_fwd_temp_peak(x->m, i, x->t, &x->in));
        double ws = step_mlp_ws(x, i);
        if (ws > 0) {
            ws += step_moe_freed(x, i);   /* freed from the saved ones here */
            step_sample(st, pt(x, PT_BWD_MLP, i));
            step_at(st, RULE_MLP_BACKWARD, TERM_TRANSIENT, pt(x, PT_BWD_MLP, i), ws);
        }
        step_at(st, RULE_BWD_WORKSPACE, TERM_TRANSIENT, pt(x, PT_BWD, i), plan_act_backward_workspace(x->m, i, x->t, &x->in));
        step_at(st, RULE_CPU_CONV_BWD, TERM_TRANSIENT, pt(x, PT_BWD, i), cpu_conv_backward_bytes(x, i));
    }
}

/* The loss: its forward holds the logits and their fp32 upcast (transformers' ForCausalLMLoss);
   its backward allocates a zeroed logits-sized gradient and log_softmax's backward a second one
   while the first is alive (measured: 2 x 4 b s V), and the head's backward then holds one. */
void rule_loss(const StepCtx *x, Step *st) {
    if (x->L == 0) return;
    double fwd = plan_act_loss_forward_transient(x->m, x->t, &x->in);
    double tr = plan_act_loss_transient(x->m, x->t, &x->in);
    if (fwd > 0) {
        /* two tensors, two requests to the allocator: the logits the caller holds until the
           forward returns, and their fp32 upcast */
        double up = plan_act_loss_upcast(x->m, x->t, &x->in);
        step_sample(st, pt(x, PT_LOSS_FWD, 0));
        if (fwd > up) step_at(st, RULE_LOSS_FORWARD, TERM_TRANSIENT, pt(x, PT_LOSS_FWD, 0), fwd - up);
        if (up > 0) step_at(st, RULE_LOSS_FORWARD, TERM_TRANSIENT, pt(x, PT_LOSS_FWD, 0), up);
    }
    if (x->torch && tr > 0) {
        step_sample(st, pt(x, PT_LOSS_BWD, 0));
        step_at(st, RULE_LOSS_BACKWARD, TERM_TRANSIENT, pt(x, PT_LOSS_BWD, 0), 2 * tr);
    }
    step_at(st, RULE_LOSS_BACKWARD, TERM_TRANSIENT, pt(x, PT_BWD, x->L - 1), tr);
}

/* The optimizer step's temporaries: torch's foreach Adam allocates one state-sized temporary
   (DeepSpeed's fused optimizers, the engine and a CPU step do not); DeepSpeed ZeRO-1/2 first
   computes the gradient norm through an fp64 copy (the largest tensor's slice for fp32
   parameters, the whole partition in the mixed regimes), then, mixed, converts the partition's
   gradient to fp32 for the master weights while the 16-bit one is freed. docs/formulas.md
   "DeepSpeed ZeRO-1/2 step". */
void rule_optimizer_transients(const StepCtx *x, Step *st) {
    const PrecisionSpec *p = x->p;
    double o_local = x->ds_py ? x->o_part : (x->s->shard & SHARD_OPT) ? x->z.psi_shard : x->z.psi;
    int torch_opt = p->master_bytes == 0 || plan_fsdp2_fp32_shards(x->t, x->sk);
    int s = pt(x, PT_STEP, 0);
    /* foreach runs per parameter group: its temporary is the larger group's where a dimension
       splits them (RankView.opt_plain_elems: --tp's plain tensors beside its DTensors) */
    double plain = x->v->opt_plain_elems, temp = plain > 0 ? fmax(plain, o_local - plain) : o_local;
    if (x->o->foreach_temp && torch_opt && !x->engine && !x->ds_py && x->opt_on_gpu)
        step_at(st, RULE_FOREACH_TEMP, TERM_TRANSIENT, s, temp * p->state_bytes);
    if (!x->ds12 || !x->opt_on_gpu) return;
    double largest = 0;
    for (int i = 0; i < x->L; i++)
        if ((double)x->m->layers[i].largest_tensor > largest) largest = (double)x->m->layers[i].largest_tensor;
    double norm_elems = p->master_bytes > 0 ? o_local : fmin(o_local, largest);
    step_sample(st, pt(x, PT_NORM, 0));
    step_at(st, RULE_DS_NORM_COPY, TERM_TRANSIENT, pt(x, PT_NORM, 0), norm_elems * 8);
    step_at(st, RULE_DS_FP32_STEP_GRAD, TERM_GRADS, s, o_local * (p->master_bytes > 0 ? 4.0 - p->grad_bytes : 0));
}
