/* plan_activ.c — saved activations per layer. Notation (bytes per element): X = compute dtype
 * (2 under autocast / 16-bit, 4 in fp32), R = residual stream = parameter dtype, F = 4 (fp32
 * kept by autocast: softmax, pow, LayerNorm statistics), M = what a dropout keeps per element
 * when dropout is on (plan_act_dropout_bytes). h hidden, f MLP width, a heads, s sequence.
 * Derivations: docs/formulas.md. */
#include "plan_activ.h"
#include "plan_lora.h"

static int is_transformer(const ModelSpec *m) {
    return m->arch == ARCH_DECODER || m->arch == ARCH_ENCODER || m->arch == ARCH_ENC_DEC;
}

/* CUDA's dropout is the fused kernel (native_dropout), which saves a 1-byte bool mask. On CPU
   aten/src/ATen/native/Dropout.cpp `dropout` takes the fused path only for CUDA, XPU, lazy and
   privateuse1 tensors (is_fused_kernel_acceptable); _dropout_impl makes a noise tensor
   empty_like(input), bernoulli_(1 - p), div_(1 - p), and returns input.mul(noise), whose
   backward saves the noise: the input's dtype per element. Measured: docs/formulas.md
   "CPU kernels". */
double plan_act_dropout_bytes(const TrainSpec *t, double dropout, double in_bytes) {
    if (dropout <= 0) return 0;
    return t->autocast_cpu ? in_bytes : 1;
}

/* SDPA on CPU picks the flash kernel unless a constraint fails; check_for_dropout fails for any
   dropout > 0 (aten/src/ATen/native/transformers/sdp_utils_cpp.h, use_flash_attention_cpp in
   sdp_utils_cpp.cpp), so training with attention dropout runs _scaled_dot_product_attention_math
   (attention.cpp), which materialises the probabilities. GPUs keep their fused kernels. */
int plan_act_sdpa_math(const TrainSpec *t, double dropout) {
    return t->attn == ATTN_SDPA && t->autocast_cpu && dropout > 0;
}

/* LLaMA-style decoders (Llama, Mistral, Qwen2, Gemma: RMSNorm, rotary, separate q/k/v and
   gate/up projections, no hidden dropout), as transformers 5's modeling_llama.py runs them. */
static int llama_style(const ModelSpec *m) {
    return m->arch == ARCH_DECODER && m->norm == NORM_RMSNORM;
}

/* What a norm saves per token. LayerNorm: its input and fp32 mean + rstd. LlamaRMSNorm
   (modeling_llama.py): hidden_states.to(float32) (pow and the rsqrt product save it: 4·h), the
   fp32 rsqrt, and weight * normed.to(input_dtype) saves the normalised tensor (R·h); measured
   8h + 4 per norm in fp32 and under autocast (block_probe.py, llama-mini). Other RMSNorms keep
   the earlier input + rsqrt. */
static double norm_bytes(const ModelSpec *m, double R, double h) {
    if (llama_style(m)) return (4 + R) * h + 4;
    return R * h + (m->norm == NORM_LAYERNORM ? 8 : 4);
}

/* The block's residual and MLP dropouts and the embeddings' (LLaMA-style models have only the
   attention probabilities' dropout). */
static double hidden_dropout_bytes(const ModelSpec *m, const TrainSpec *t, double dropout, double in_bytes) {
    return llama_style(m) ? 0 : plan_act_dropout_bytes(t, dropout, in_bytes);
}

static double mlp_bytes(const ModelSpec *m, const TrainSpec *t, double f, double mlp_in);

/* Eager PyTorch transformer block, per token: bytes = lin + s*quad. */
void plan_act_block_coeffs(const ModelSpec *m, const TrainSpec *t, double dropout, int cross,
                           double *lin_out, double *quad_out) {
    const PrecisionSpec *p = plan_precision(t->precision);
    double X = p->act_bytes, R = p->param_bytes, F = 4;
    double M = hidden_dropout_bytes(m, t, dropout, X);     /* dropouts on compute-dtype tensors */
    double h = (double)m->d_model, f = (double)m->d_ff, a = m->n_head;
    double qd = (double)m->n_head * (double)m->d_head, kvd = (double)m->n_kv_head * (double)m->d_head;
    int amp = p->autocast;
    int llama = llama_style(m);
    /* autocast casts a linear's fp32 input for each call: one copy per projection where they
       are separate (LLaMA-style q, k, v and gate, up: measured 3 and 2 X·h copies); fp32 and
       16-bit models share one input tensor */
    double qkv_in = llama && amp ? 3 : 1, mlp_in = llama && amp && m->mlp == MLP_SWIGLU ? 2 : 1;
    double lin = 0, quad = 0;

    lin += (cross ? 3 : 2) * norm_bytes(m, R, h);          /* norm inputs + statistics */
    for (int k = 0; k < (cross ? 2 : 1); k++) {
        lin += qkv_in * X * h;                             /* q/k/v projection input */
        lin += X * qd;                                     /* attention output = out-proj input */
        lin += M * h;                                      /* residual dropout mask / noise */
        if (t->attn == ATTN_EAGER) {
            /* q, k, v as the two matmuls save them: k and v expanded to a heads (repeat_kv) */
            lin += X * 3 * qd;
            if (llama) {
                /* softmax(dtype=float32).to(query.dtype): fp32 probabilities; q is fp32 after
                   the rotary product with fp32 cos/sin under autocast, so the dropout runs in
                   fp32 there, and the AV matmul saves its X copy (autocast) or its input */
                double Mq = plan_act_dropout_bytes(t, dropout, amp ? F : X);
                quad += a * (F + Mq + ((Mq > 0 || X < F) ? X : 0));
            } else {
                double S = amp ? F : X;                    /* softmax output (fp32 under autocast) */
                double Mq = plan_act_dropout_bytes(t, dropout, X);
                quad += a * (S + Mq + ((Mq > 0 || amp) ? X : 0)); /* + mask, + dropout out / cast */
            }
        } else if (plan_act_sdpa_math(t, dropout)) {
            /* the math kernel in fp32 (attention.cpp _scaled_dot_product_attention_math: half
               and bf16 q, k, v are upcast, "Keep query, key, value in high precision"): the
               two matmuls save q and k scaled by sqrt(scale) and v, fp32 and expanded to a
               heads (GQA: enable_gqa repeat_interleaves them); then per head and key position
               the fp32 probabilities (_safe_softmax), the dropout noise and the dropout output */
            lin += 4 * 3 * qd;
            quad += a * (4 + 4 + 4);
        } else {
            lin += X * (qd + 2 * kvd);                     /* q, k, v (GQA: enable_gqa) */
            lin += F * a;                                  /* SDPA log-sum-exp, fp32 */
        }
    }
    lin += mlp_bytes(m, t, f, mlp_in);
    lin += M * h;                                          /* MLP dropout mask */
    *lin_out = lin;
    *quad_out = quad;
}

/* A dense MLP of width f per token: what its linears and activation save. */
static double mlp_bytes(const ModelSpec *m, const TrainSpec *t, double f, double mlp_in) {
    const PrecisionSpec *p = plan_precision(t->precision);
    double X = p->act_bytes, F = 4, h = (double)m->d_model, lin = 0;
    int amp = p->autocast;
    switch (m->mlp) {
    case MLP_GELU: lin += X * (h + 2 * f); break;          /* fc1 input, GELU input, fc2 input */
    case MLP_GELU_NEW:                                     /* 0.5x(1+tanh(c(x+0.044715x^3))) */
        /* CUDA autocast runs pow in fp32, and tanh and 1+tanh follow it; CPU autocast leaves
           them in the compute dtype (measured, docs/formulas.md "Autocast on CPU") */
        lin += amp && !t->autocast_cpu ? X * h + F * 3 * f + X * 2 * f   /* pow/tanh/1+tanh fp32 */
                                       : X * (h + 5 * f);  /* x, tanh, 0.5x, 1+tanh, fc2 input */
        break;
    case MLP_RELU: lin += X * (h + f); break;
    case MLP_SWIGLU: lin += X * (mlp_in * h + 4 * f); break;   /* gate, silu, up, product */
    }
    return lin;
}

double plan_act_mlp_width(const ModelSpec *m, const LayerSpec *l) {
    if (l->expert_params <= 0 || m->moe.n_experts <= 0) return (double)m->d_ff;
    return (double)m->moe.top_k * (double)m->moe.d_ff_expert + (double)m->moe.d_ff_shared;
}

/* transformers 5's eager experts loop (Qwen3MoeExperts.forward and its kin): the router's
   linear saves its input (X·h) and softmax(dtype=float32) its fp32 output (4·E), topk its
   indices (8·k) and weights (X·k); every routed token is gathered (hidden_states[token_idx]:
   the gate_up linear saves it, X·h), its gate_up output split into gate and up (the activation
   saves gate, the product saves act(gate) and up: 3·X·f_e), down saves the product (X·f_e), the
   routing-weight product saves the expert output (X·h); the shared expert is a dense gated MLP.
   An estimate from the source until measured. */
double plan_act_moe_delta(const ModelSpec *m, const LayerSpec *l, const TrainSpec *t) {
    if (l->expert_params <= 0 || m->moe.n_experts <= 0) return 0;
    const PrecisionSpec *p = plan_precision(t->precision);
    double X = p->act_bytes, h = (double)m->d_model, k = m->moe.top_k, fe = (double)m->moe.d_ff_expert;
    double mlp_in = llama_style(m) && p->autocast ? 2 : 1;
    double moe = X * h + 4.0 * m->moe.n_experts + 8 * k + X * k + k * X * (2 * h + 4 * fe);
    if (m->moe.d_ff_shared > 0) moe += mlp_bytes(m, t, (double)m->moe.d_ff_shared, mlp_in);
    return moe - mlp_bytes(m, t, (double)m->d_ff, mlp_in);
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

/* What a trainable subset changes in layer i's saved tensors (planner/plan_lora.c sets the
   counts): a layer before the first trainable parameter records nothing for autograd, so it
   saves nothing; the first LoRA block's input norm neither; inputs of frozen projections are
   not saved; each LoRA adapter saves A's output (r) for B, and under lora_dropout the dropout's
   output for A with its mask or noise. docs/formulas.md "LoRA and frozen parameters". */
static double finetune_delta(const ModelSpec *m, int i, const TrainSpec *t, const ActInputs *in) {
    const LayerSpec *l = &m->layers[i];
    if (l->grad_frontier == 1) return -transformer_layer_bytes(m, i, t, in);
    const PrecisionSpec *p = plan_precision(t->precision);
    double X = p->act_bytes, bs = (double)in->b * (double)in->s;
    double d = -X * (double)l->act_unsaved_tok + X * (double)l->lora_r_tok +
               (X + plan_act_dropout_bytes(t, t->ft.dropout, X)) * (double)l->lora_drop_tok;
    double h = (double)m->d_model;
    if (l->grad_frontier == 2) {
        d -= norm_bytes(m, p->param_bytes, h);
        /* the adapters on its attention input: their dropout's input needs no gradient, so the
           dropout keeps no mask or noise (A still saves its output) */
        double M = plan_act_dropout_bytes(t, t->ft.dropout, X);
        for (int k = 0; k < l->n_frozen && M > 0; k++) {
            int mod = l->frozen_mod[k];
            if (plan_module_group(mod) != 1 || !plan_lora_adapts(m, &t->ft, mod)) continue;
            int64_t fin, fout;
            plan_module_features(mod, l->frozen_elems[k], l->frozen_dim0[k], &fin, &fout);
            d -= M * (double)fin;
        }
    }
    /* autocast casts a frozen weight at every call and caches none (autocast_mode.cpp
       cached_cast caches leaves that require grad only); the matmul saves the copy for its
       input's gradient until the layer's backward: X per frozen projection element (not the
       first block's attention inputs, whose matmuls need no gradient). Measured with saved-
       tensor hooks on llama-mini + LoRA under CPU autocast. Per micro-batch, not per token. */
    double casts = 0;
    if (p->autocast)
        for (int k = 0; k < l->n_frozen; k++) {
            int mod = l->frozen_mod[k];
            if (PLAN_MOD_ID(mod) == PLAN_MOD_NONE || (l->grad_frontier == 2 && plan_module_group(mod) == 1)) continue;
            casts += (double)l->frozen_elems[k];
        }
    /* a head tied to frozen embeddings: F.linear(x, wte) casts the shared weight the same way */
    if (p->autocast && l->kind == LAYER_HEAD && m->tied_embeddings && l->params == 0 && l->act_unsaved_tok > 0)
        casts += (double)m->vocab * h;
    /* LlamaRMSNorm's last product, weight * normed: with the weight frozen it saves the weight
       only (derivatives.yaml mul: self is saved when other requires grad), not the normalised
       tensor (R·h per token per norm; measured with saved-tensor hooks on llama-mini + LoRA) */
    if (llama_style(m)) {
        int norms = 0;
        for (int k = 0; k < l->n_frozen; k++)
            norms += l->frozen_mod[k] == PLAN_MOD_NONE && l->frozen_elems[k] == m->d_model && l->frozen_dim0[k] == m->d_model;
        if (l->grad_frontier == 2 && norms > 0) norms--;   /* the first norm: dropped whole above */
        d -= norms * p->param_bytes * h;
    }
    return bs * d + X * casts;
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
    return out + transformer_layer_bytes(m, i, t, in) + finetune_delta(m, i, t, in);
}

/* Eager PyTorch saved tensors of transformer layer i (docs/formulas.md "Activations"). */
static double transformer_layer_bytes(const ModelSpec *m, int i, const TrainSpec *t,
                                      const ActInputs *in) {
    const LayerSpec *l = &m->layers[i];
    const PrecisionSpec *p = plan_precision(t->precision);
    double b = (double)in->b, s = (double)in->s, bs = b * s;
    double X = p->act_bytes, R = p->param_bytes;
    double M = hidden_dropout_bytes(m, t, in->dropout, R);  /* the embeddings' dropout: R input */
    double h = (double)m->d_model, V = (double)m->vocab;
    double stats = m->norm == NORM_LAYERNORM ? 8 : 4;
    switch (l->kind) {
    case LAYER_EMBED: {
        double per_tok = 8 + M * h;                                  /* int64 ids, dropout mask/noise */
        if (m->arch == ARCH_ENCODER) per_tok += 8 + R * h + stats;   /* ids, embeddings LayerNorm */
        return bs * per_tok;
    }
    case LAYER_BLOCK: {
        int cross = m->arch == ARCH_ENC_DEC && i > m->n_enc_layer;  /* layer 0 is embeddings */
        double lin, quad;
        plan_act_block_coeffs(m, t, in->dropout, cross, &lin, &quad);
        return bs * (lin + plan_act_moe_delta(m, l, t) + s * quad);
    }
    case LAYER_NORM: return bs * norm_bytes(m, R, h);
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

int plan_act_checkpointed(const ModelSpec *m, const TrainSpec *t, int i) {
    if (t->act_ckpt == CKPT_NONE || m->layers[i].kind != LAYER_BLOCK || !is_transformer(m)) return 0;
    if (t->act_ckpt == CKPT_FULL) return 1;
    int k = 0;   /* every:N: the block's ordinal, 1-based (torchtitan's counter is incremented
                    before `_count % ac_freq == 0` is tested) */
    for (int j = 0; j <= i; j++) k += m->layers[j].kind == LAYER_BLOCK;
    return t->ckpt_every > 0 && k % t->ckpt_every == 0;
}

/* Eager attention's causal mask: transformers' create_causal_mask → eager_mask makes one
   (b, 1, s, s) additive float mask at the embeddings' dtype (R) per forward and hands it to
   every block (masking_utils.py; SDPA without padding passes is_causal and no mask). Under
   non-reentrant checkpointing each checkpointed block keeps its arguments for the
   recomputation (torch/utils/checkpoint.py), the mask among them, so it lives from forward to
   the end of the first block's backward. Measured: docs/formulas.md "A block's backward". */
static double ckpt_causal_mask_bytes(const ModelSpec *m, int i, const TrainSpec *t, const ActInputs *in) {
    int first = plan_act_checkpointed(m, t, i);   /* the first checkpointed block: freed last */
    for (int j = 0; j < i && first; j++) first = !plan_act_checkpointed(m, t, j);
    if (!first || m->arch != ARCH_DECODER || t->attn != ATTN_EAGER || t->impl != IMPL_PYTORCH) return 0;
    double s = (double)in->s;
    return (double)in->b * s * s * plan_precision(t->precision)->param_bytes;
}

double plan_act_ckpt_bytes(const ModelSpec *m, int i, const TrainSpec *t, const ActInputs *in) {
    if (!plan_act_checkpointed(m, t, i)) return plan_act_layer_bytes(m, i, t, in);
    /* checkpoint(block) keeps only the block input (the residual stream), and the first
       checkpointed block the causal mask all of them were handed */
    return (double)in->b * (double)in->s * plan_precision(t->precision)->param_bytes * (double)m->d_model +
           ckpt_causal_mask_bytes(m, i, t, in);
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
    double bs = (double)in->b * (double)in->s;
    /* engine: backward scratch for the whole of backward: dresidual, dbtc (B,T,C), dfch_gelu,
       dfch (B,T,4C), dpreatt, datt (B,NH,T,T); under checkpointing the block's full activations
       exist again while it runs */
    if (t->impl == IMPL_ENGINE) {
        double ws = 4.0 * bs * 10.0 * (double)m->d_model + 8.0 * (double)in->b * m->n_head * (double)in->s * (double)in->s;
        if (plan_act_checkpointed(m, t, i)) ws += plan_act_layer_bytes(m, i, t, in);
        return ws;
    }
    /* PyTorch, the end of a block's backward: its saved (and recomputed) activations are freed,
       the gradient of its input, the residual stream's (R·h), is what it leaves */
    if (l->kind == LAYER_BLOCK && is_transformer(m))
        return bs * plan_precision(t->precision)->param_bytes * (double)m->d_model;
    return 0;
}

/* A block's MLP backward (PyTorch layout), beyond the saved activations, which are all still
   alive (the MLP runs last in forward, so its backward runs first). At its largest, in the
   activation's backward: fc2's backward has made the f-wide gradient of its input and freed its
   saved input (the same size), and the activation's backward (GELU's products, SwiGLU's
   gate x up) makes two more f-wide gradients: + 2·f·X per token. The MLP dropout's saved
   mask or noise (M·h) is freed by then. The residual stream's gradient (R·h) is alive
   throughout (the residual add hands the same tensor to both branches). Under checkpointing
   the block's activations are recomputed first, all but its input, which the checkpoint holds.
   Measured per token with bench/torch/block_probe.py: docs/formulas.md "A block's backward". */
double plan_act_block_backward_bytes(const ModelSpec *m, int i, const TrainSpec *t, const ActInputs *in) {
    const LayerSpec *l = &m->layers[i];
    if (t->impl != IMPL_PYTORCH || l->kind != LAYER_BLOCK || !is_transformer(m)) return 0;
    const PrecisionSpec *p = plan_precision(t->precision);
    double X = p->act_bytes, R = p->param_bytes, h = (double)m->d_model, f = plan_act_mlp_width(m, l);
    double M = hidden_dropout_bytes(m, t, in->dropout, X);
    double bs = (double)in->b * (double)in->s;
    double ws = bs * (2 * f * X + R * h - M * h);
    /* a frozen output projection saved no input (plan_lora.c), so its backward's f-wide input
       gradient replaces nothing: + f·X (unless an adapter reads that input undropped) */
    int out_frozen = 0, out_saved = 0;
    for (int k = 0; k < l->n_frozen; k++)
        if (plan_module_group(l->frozen_mod[k]) == 4) {
            out_frozen = 1;
            out_saved |= plan_lora_adapts(m, &t->ft, l->frozen_mod[k]) && t->ft.dropout <= 0;
        }
    if (out_frozen && !out_saved) ws += bs * f * X;
    if (plan_act_checkpointed(m, t, i)) ws += plan_act_layer_bytes(m, i, t, in) - bs * R * h;
    return ws;
}

/* Elements of a block's MLP output projection (fc2 / c_proj / down_proj), whose gradients
   exist during the MLP's backward; the block's others come after it. */
double plan_act_block_mlp_out_elems(const ModelSpec *m, int i) {
    const LayerSpec *l = &m->layers[i];
    if (l->expert_params > 0 && m->moe.n_experts > 0)
        return (double)l->expert_params + (double)m->moe.d_ff_shared * (double)m->d_model;
    return (double)m->d_ff * (double)m->d_model;
}
