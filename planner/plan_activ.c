/* plan_activ.c — saved activations per layer. Notation (bytes per element): X = compute dtype
 * (2 under autocast / 16-bit, 4 in fp32), R = residual stream = parameter dtype, F = 4 (fp32
 * kept by autocast: softmax, pow, LayerNorm statistics), M = 1 per mask element when dropout
 * is on. h hidden, f MLP width, a heads, s sequence. Derivations: docs/formulas.md. */
#include "plan_activ.h"

static int is_transformer(const ModelSpec *m) {
    return m->arch == ARCH_DECODER || m->arch == ARCH_ENCODER || m->arch == ARCH_ENC_DEC;
}

/* Eager PyTorch transformer block, per token: bytes = lin + s*quad. */
void plan_act_block_coeffs(const ModelSpec *m, const TrainSpec *t, double dropout, int cross,
                           double *lin_out, double *quad_out) {
    const PrecisionSpec *p = plan_precision(t->precision);
    double X = p->act_bytes, R = p->param_bytes, F = 4, M = dropout > 0 ? 1 : 0;
    double h = (double)m->d_model, f = (double)m->d_ff, a = m->n_head;
    double qd = (double)m->n_head * (double)m->d_head, kvd = (double)m->n_kv_head * (double)m->d_head;
    int amp = p->autocast;
    double stats = m->norm == NORM_LAYERNORM ? 8 : 4;     /* mean+rstd or rstd, fp32 */
    int rope = m->arch == ARCH_DECODER && m->norm == NORM_RMSNORM;  /* LLaMA-style rotary */
    double lin = 0, quad = 0;

    lin += (cross ? 3 : 2) * (R * h + stats);              /* norm inputs + statistics */
    for (int k = 0; k < (cross ? 2 : 1); k++) {
        lin += X * h;                                      /* q/k/v projection input */
        lin += X * (qd + 2 * kvd);                         /* q, k, v */
        if (rope) lin += X * 2 * (qd + kvd);               /* rotate_half copies, rotated q, k */
        lin += X * qd;                                     /* attention output = out-proj input */
        lin += M * h;                                      /* residual dropout mask */
        if (t->attn == ATTN_EAGER) {
            double S = amp ? F : X;                        /* softmax output (fp32 under autocast) */
            quad += a * (S + M + ((M > 0 || amp) ? X : 0)); /* + mask, + dropout out / cast copy */
        } else {
            lin += F * a;                                  /* SDPA log-sum-exp, fp32 */
        }
    }
    switch (m->mlp) {
    case MLP_GELU: lin += X * (h + 2 * f); break;          /* fc1 input, GELU input, fc2 input */
    case MLP_GELU_NEW:                                     /* 0.5x(1+tanh(c(x+0.044715x^3))) */
        /* CUDA autocast runs pow in fp32, and tanh and 1+tanh follow it; CPU autocast leaves
           them in the compute dtype (measured, docs/formulas.md "Autocast on CPU") */
        lin += amp && !t->autocast_cpu ? X * h + F * 3 * f + X * 2 * f   /* pow/tanh/1+tanh fp32 */
                                       : X * (h + 5 * f);  /* x, tanh, 0.5x, 1+tanh, fc2 input */
        break;
    case MLP_RELU: lin += X * (h + f); break;
    case MLP_SWIGLU: lin += X * (h + 4 * f); break;        /* gate, silu, up, product */
    }
    lin += M * h;                                          /* MLP dropout mask */
    *lin_out = lin;
    *quad_out = quad;
}

static double transformer_layer_bytes(const ModelSpec *m, int i, const TrainSpec *t,
                                      const ActInputs *in);

/* memplan engine (fp32, exec/exec_gpt2.c): per block per token 18h + 4 floats and 2a*s
 * floats (preatt, att); see docs/formulas.md "engine layout". */
static double engine_layer_bytes(const ModelSpec *m, const LayerSpec *l, double bs, double s) {
    double h = (double)m->d_model, V = (double)m->vocab;
    switch (l->kind) {
    case LAYER_EMBED: return bs * 4 * h;                            /* encoded */
    case LAYER_BLOCK: return bs * 4 * (18 * h + 4 + 2 * m->n_head * s);
    case LAYER_NORM: return bs * 4 * (h + 2);                       /* lnf, mean, rstd */
    case LAYER_HEAD: return bs * 4 * (V + 2);                       /* logits, lse, losses */
    default: return 0;
    }
}

double plan_act_layer_bytes(const ModelSpec *m, int i, const TrainSpec *t, const ActInputs *in) {
    const LayerSpec *l = &m->layers[i];
    const PrecisionSpec *p = plan_precision(t->precision);
    double b = (double)in->b, s = (double)in->s, bs = b * s;
    if (l->act_bytes > 0) return b * (double)l->act_bytes;          /* measured, as given */
    if (!is_transformer(m))   /* CNN: given per sample at the model's image side; --seq rescales */
        return b * plan_cnn_area_scale(m, t->seq) *
               ((double)l->act_elems * p->act_bytes + 4.0 * (double)l->act_fp32_elems + (double)l->act_mask_elems);
    if (t->impl == IMPL_ENGINE) return engine_layer_bytes(m, l, bs, s);
    /* a base class returns its last hidden state (R per element), which the caller holds
       through backward (the training loop's `outputs`); it has no head to hold logits */
    double out = m->headless && i == m->n_layers - 1
                     ? bs * p->param_bytes * (double)m->d_model : 0;
    return out + transformer_layer_bytes(m, i, t, in);
}

/* Eager PyTorch saved tensors of transformer layer i (docs/formulas.md "Activations"). */
static double transformer_layer_bytes(const ModelSpec *m, int i, const TrainSpec *t,
                                      const ActInputs *in) {
    const LayerSpec *l = &m->layers[i];
    const PrecisionSpec *p = plan_precision(t->precision);
    double b = (double)in->b, s = (double)in->s, bs = b * s;
    double X = p->act_bytes, R = p->param_bytes, M = in->dropout > 0 ? 1 : 0;
    double h = (double)m->d_model, V = (double)m->vocab;
    double stats = m->norm == NORM_LAYERNORM ? 8 : 4;
    switch (l->kind) {
    case LAYER_EMBED: {
        double per_tok = 8 + M * h;                                  /* int64 ids, dropout mask */
        if (m->arch == ARCH_ENCODER) per_tok += 8 + R * h + stats;   /* ids, embeddings LayerNorm */
        return bs * per_tok;
    }
    case LAYER_BLOCK: {
        int cross = m->arch == ARCH_ENC_DEC && i > m->n_enc_layer;  /* layer 0 is embeddings */
        double lin, quad;
        plan_act_block_coeffs(m, t, in->dropout, cross, &lin, &quad);
        return bs * (lin + s * quad);
    }
    case LAYER_NORM: return bs * (R * h + stats);
    case LAYER_LINEAR: return b * X * h;                             /* pooler: first token */
    case LAYER_HEAD: {
        double per_tok = X * h;                                      /* head input */
        if (m->arch == ARCH_ENCODER) per_tok += 2 * X * h + R * h + stats;  /* MLM transform */
        /* logits (X, the model's output, held by the caller) and the fp32 log-softmax output
           that cross_entropy saves; transformers' ForCausalLMLoss upcasts the logits to fp32
           (logits.float()) only inside the loss function: log_softmax saves its output, not its
           input, so the upcast is freed with the forward (measured, docs/formulas.md) */
        per_tok += V * ((t->loop_trainer ? 0 : X) + 4);
        return bs * per_tok;
    }
    default: return 0;
    }
}

double plan_act_ckpt_bytes(const ModelSpec *m, int i, const TrainSpec *t, const ActInputs *in) {
    const LayerSpec *l = &m->layers[i];
    if (t->act_ckpt != CKPT_FULL || l->kind != LAYER_BLOCK || !is_transformer(m))
        return plan_act_layer_bytes(m, i, t, in);
    /* checkpoint(block) keeps only the block input (the residual stream) */
    return (double)in->b * (double)in->s * plan_precision(t->precision)->param_bytes * (double)m->d_model;
}

double plan_act_loss_transient(const ModelSpec *m, const TrainSpec *t, const ActInputs *in) {
    double bs = (double)in->b * (double)in->s;
    if (m->arch == ARCH_GENERIC || m->headless) return 0;   /* no loss, no logits gradient */
    if (m->arch == ARCH_CNN) return (double)in->b * 4.0 * (double)m->vocab;
    if (t->impl == IMPL_ENGINE) return 0;   /* the fused LM head: dlogits overwrite the logits */
    return bs * 4.0 * (double)m->vocab;        /* fp32 gradient of the log-softmax input */
}

/* The loss's forward: the logits the model returns (held by the caller until the forward
   returns; under the common loop they are saved activations already) and, below fp32, the fp32
   upcast transformers' ForCausalLMLoss makes (logits.float()) while log_softmax runs. Freed when
   the forward returns. Measured: docs/formulas.md "FSDP2 buffers" (the fsdp-grad-op peak). */
double plan_act_loss_forward_transient(const ModelSpec *m, const TrainSpec *t, const ActInputs *in) {
    if (m->arch == ARCH_GENERIC || m->arch == ARCH_CNN || m->headless || t->impl == IMPL_ENGINE) return 0;
    double X = plan_precision(t->precision)->act_bytes;
    return (double)in->b * (double)in->s * (double)m->vocab * ((t->loop_trainer ? X : 0) + (X < 4 ? 4 : 0));
}

/* The common loop (`outputs = model(**batch); loss = outputs.loss`) keeps `outputs`, and with
   it the logits (b·s·V·X), from one forward until the next forward returns: through backward,
   the step and the next forward. HF Trainer's loop drops them after the forward. */
double plan_act_loop_held(const ModelSpec *m, const TrainSpec *t, const ActInputs *in) {
    if (t->loop_trainer || m->arch == ARCH_GENERIC || m->arch == ARCH_CNN || m->headless || t->impl == IMPL_ENGINE)
        return 0;
    return (double)in->b * (double)in->s * (double)m->vocab * plan_precision(t->precision)->act_bytes;
}

double plan_act_backward_workspace(const ModelSpec *m, int i, const TrainSpec *t, const ActInputs *in) {
    const LayerSpec *l = &m->layers[i];
    double ws = 0;
    /* engine: backward scratch for the whole of backward: dresidual, dbtc (B,T,C), dfch_gelu,
       dfch (B,T,4C), dpreatt, datt (B,NH,T,T) */
    if (t->impl == IMPL_ENGINE) {
        double bs = (double)in->b * (double)in->s;
        ws += 4.0 * bs * 10.0 * (double)m->d_model + 8.0 * (double)in->b * m->n_head * (double)in->s * (double)in->s;
    }
    /* recomputation under checkpointing: the block's full activations exist again */
    if (t->act_ckpt == CKPT_FULL && l->kind == LAYER_BLOCK && is_transformer(m))
        ws += plan_act_layer_bytes(m, i, t, in);
    return ws;
}
