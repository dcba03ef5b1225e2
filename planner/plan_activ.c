/* plan_activ.c — saved activations per layer. Notation (bytes per element): X = compute dtype
 * (2 under autocast / 16-bit, 4 in fp32), R = residual stream = parameter dtype, F = 4 (fp32
 * kept by autocast: softmax, pow, LayerNorm statistics), M = what a dropout keeps per element
 * when dropout is on (plan_act_dropout_bytes). h hidden, f MLP width, a heads, s sequence.
 * Derivations: docs/formulas.md. */
#include "plan_activ.h"

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

/* What the core attention (scores, softmax, dropout, the context product: the part Megatron's
   selective recompute recomputes) saves per token: lin + s*quad bytes. */
static void core_attn_coeffs(const ModelSpec *m, const TrainSpec *t, double dropout, double *lin_out,
                             double *quad_out) {
    const PrecisionSpec *p = plan_precision(t->precision);
    double X = p->act_bytes, F = 4, a = m->n_head;
    double qd = (double)m->n_head * (double)m->d_head, kvd = (double)m->n_kv_head * (double)m->d_head;
    int amp = p->autocast;
    double lin = 0, quad = 0;
    if (t->attn == ATTN_EAGER) {
        /* q, k, v as the two matmuls save them: k and v expanded to a heads (repeat_kv) */
        lin += X * 3 * qd;
        if (llama_style(m)) {
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
    *lin_out = lin;
    *quad_out = quad;
}

/* Eager PyTorch transformer block, per token: bytes = lin + s*quad. */
void plan_act_block_coeffs(const ModelSpec *m, const TrainSpec *t, double dropout, int cross,
                           double *lin_out, double *quad_out) {
    const PrecisionSpec *p = plan_precision(t->precision);
    double X = p->act_bytes, R = p->param_bytes;
    double M = hidden_dropout_bytes(m, t, dropout, X);     /* dropouts on compute-dtype tensors */
    double h = (double)m->d_model, f = (double)m->d_ff;
    double qd = (double)m->n_head * (double)m->d_head;
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
        double cl, cq;
        core_attn_coeffs(m, t, dropout, &cl, &cq);
        lin += cl;
        quad += cq;
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
    if (t->act_ckpt == CKPT_NONE || t->act_ckpt == CKPT_SELECTIVE || m->layers[i].kind != LAYER_BLOCK ||
        !is_transformer(m))
        return 0;
    if (t->act_ckpt == CKPT_FULL || t->act_ckpt == CKPT_OP) return 1;
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
static int holds_mask(const ModelSpec *m, const TrainSpec *t, int i) {
    return plan_act_checkpointed(m, t, i) || plan_act_core_recomputed(m, t, i);
}

static double ckpt_causal_mask_bytes(const ModelSpec *m, int i, const TrainSpec *t, const ActInputs *in) {
    int first = holds_mask(m, t, i);   /* the first checkpointed block (or core): freed last */
    for (int j = 0; j < i && first; j++) first = !holds_mask(m, t, j);
    if (!first || m->arch != ARCH_DECODER || t->attn != ATTN_EAGER || t->impl != IMPL_PYTORCH) return 0;
    double s = (double)in->s;
    return (double)in->b * s * s * plan_precision(t->precision)->param_bytes;
}

const char *plan_act_ckpt_unsupported(const ModelSpec *m, const TrainSpec *t) {
    if (t->act_ckpt != CKPT_OP && t->act_ckpt != CKPT_SELECTIVE) return NULL;
    if (t->impl != IMPL_PYTORCH) return "a PyTorch policy; memplan's engine recomputes whole blocks only";
    if (m->arch != ARCH_DECODER) return "modelled for decoder-only transformers (GPT-2, LLaMA and their kin) only";
    if (m->moe.n_experts > 0) return "not modelled for mixture-of-experts blocks yet";
    return NULL;
}

int plan_act_core_recomputed(const ModelSpec *m, const TrainSpec *t, int i) {
    return t->act_ckpt == CKPT_SELECTIVE && m->layers[i].kind == LAYER_BLOCK && is_transformer(m);
}

int plan_act_block_projs(const ModelSpec *m, const LayerSpec *l, PlanProj p[PLAN_MAX_PROJ]) {
    double qd = (double)m->n_head * (double)m->d_head, kvd = (double)m->n_kv_head * (double)m->d_head;
    double h = (double)m->d_model, f = plan_act_mlp_width(m, l);
    int n = 0, b = m->addmm_proj;
    if (m->fused_qkv) {
        p[n++] = (PlanProj){h, qd + 2 * kvd, b & PLAN_PROJ_QKV};
    } else {
        p[n++] = (PlanProj){h, qd, b & PLAN_PROJ_QKV};
        p[n++] = (PlanProj){h, kvd, b & PLAN_PROJ_QKV};
        p[n++] = (PlanProj){h, kvd, b & PLAN_PROJ_QKV};
    }
    p[n++] = (PlanProj){qd, h, b & PLAN_PROJ_OUT};
    for (int k = 0; k < (m->mlp == MLP_SWIGLU ? 2 : 1); k++) p[n++] = (PlanProj){h, f, b & PLAN_PROJ_MLP};
    p[n++] = (PlanProj){f, h, b & PLAN_PROJ_MLP};
    return n;
}

/* torchtitan's SelectiveAC policy (torchtitan/distributed/activation_checkpoint.py, commit
   b5bcd76c66d0acb1a08b176d9639425bc55e0b2a): an op in its save list is MUST_SAVE, except every
   second aten.mm / aten.linear (a counter per forward of the block), which is PREFER_RECOMPUTE
   with every op off the list. A projection with a bias runs aten.addmm (in the list, never
   counted); one without runs aten.mm (at::linear -> matmul folds the tokens into one mm). */
int plan_act_proj_saved(const ModelSpec *m, const LayerSpec *l, int k) {
    PlanProj p[PLAN_MAX_PROJ];
    int n = plan_act_block_projs(m, l, p), mm = 0, saved = 0;
    for (int j = 0; j <= k && j < n; j++) {
        if (p[j].addmm) { saved = 1; continue; }
        saved = ++mm % 2 == 1;
    }
    return saved;
}

/* 1 when op-level checkpointing saves the core attention's output: the save list holds bmm
   (eager attention's two matmuls, and the math kernel's, which is composite: the policy sees
   its bmms) and the CUDA SDPA kernels (_scaled_dot_product_flash_attention and
   _efficient_attention), not _scaled_dot_product_flash_attention_for_cpu, which CPU kernels
   (--autocast cpu) run without dropout: recomputed there. */
int plan_act_op_core_saved(const TrainSpec *t, double dropout) {
    return t->attn == ATTN_EAGER || plan_act_sdpa_math(t, dropout) || !t->autocast_cpu;
}

/* Per token, what op-level checkpointing keeps of a block beyond its input: the outputs of the
   saved projections and of the attention ops in the save list (torch/utils/checkpoint.py
   _CachingTorchDispatchMode stores each MUST_SAVE op's outputs, detached, until the
   recomputation consumes them). Eager attention: its two bmms, the scores (a·s per token, X)
   and the context (X·qd); the math kernel's the same in fp32; the CUDA kernels their output
   (X·qd) and fp32 log-sum-exp (4·a). */
static double op_saved_per_token(const ModelSpec *m, const LayerSpec *l, const TrainSpec *t, double dropout,
                                 double s) {
    double X = plan_precision(t->precision)->act_bytes, a = m->n_head;
    double qd = (double)m->n_head * (double)m->d_head;
    PlanProj p[PLAN_MAX_PROJ];
    int n = plan_act_block_projs(m, l, p);
    double saved = 0;
    for (int k = 0; k < n; k++)
        if (plan_act_proj_saved(m, l, k)) saved += X * p[k].out;
    if (plan_act_op_core_saved(t, dropout)) {
        if (t->attn == ATTN_EAGER) saved += X * a * s + X * qd;
        else if (plan_act_sdpa_math(t, dropout)) saved += 4 * a * s + 4 * qd;
        else saved += X * qd + 4 * a;
    }
    return saved;
}

/* Per token, what a block keeps under Megatron's selective recompute: all it saves without
   checkpointing, but for the core attention's own saved tensors (core_attn_coeffs), which
   its checkpoint replaces by its inputs q, k and v (unexpanded: n_kv_head heads for k and v;
   LLaMA-style q and k are fp32 after the rotary product with fp32 cos and sin under autocast). */
static double selective_delta(const ModelSpec *m, const TrainSpec *t, double dropout, double s) {
    const PrecisionSpec *p = plan_precision(t->precision);
    double X = p->act_bytes, qk = llama_style(m) && p->autocast ? 4 : X;
    double qd = (double)m->n_head * (double)m->d_head, kvd = (double)m->n_kv_head * (double)m->d_head;
    double cl, cq;
    core_attn_coeffs(m, t, dropout, &cl, &cq);
    return qk * (qd + kvd) + X * kvd - cl - s * cq;
}

/* Bytes of block i's saved tensors under --act-ckpt op, without the causal mask. */
static double op_block_bytes(const ModelSpec *m, int i, const TrainSpec *t, const ActInputs *in) {
    double bs = (double)in->b * (double)in->s;
    return bs * (plan_precision(t->precision)->param_bytes * (double)m->d_model +
                 op_saved_per_token(m, &m->layers[i], t, in->dropout, (double)in->s));
}

double plan_act_ckpt_bytes(const ModelSpec *m, int i, const TrainSpec *t, const ActInputs *in) {
    if (plan_act_core_recomputed(m, t, i))
        return plan_act_layer_bytes(m, i, t, in) +
               (double)in->b * (double)in->s * selective_delta(m, t, in->dropout, (double)in->s) +
               ckpt_causal_mask_bytes(m, i, t, in);
    if (!plan_act_checkpointed(m, t, i)) return plan_act_layer_bytes(m, i, t, in);
    if (t->act_ckpt == CKPT_OP) return op_block_bytes(m, i, t, in) + ckpt_causal_mask_bytes(m, i, t, in);
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
/* Per token, beyond a block's saved tensors, at the softmax's backward in an eager core
   attention (or the math kernel) whose block or core was recomputed: what the recomputation put
   back (`recomputed`: selective, the core's own saved tensors, core_attn_coeffs' q, k, v copies
   and probabilities; op, all the block saves without checkpointing less what it kept), the
   gradients of the probabilities and of the scores (a·s·X each) and of the expanded v (X·qd),
   the residual stream's gradient R·h; the MLP's saved tensors, the second norm's, the output
   projection's input and the dropouts' are freed by then. Measured (block_probe.py, llama-mini
   fp32 eager, s512, at SoftmaxBackward0, above the block backward's start, where the incoming
   R·h already is): selective 18,940 B/token (six times its MLP moment), op 15,748 (predicted
   16,260: 512 over, not traced); at s128 the MLP moment is the larger for both. Without
   checkpointing and under full the same moment exists and is not modelled (docs/formulas.md). */
static double attn_backward_per_token(const ModelSpec *m, const LayerSpec *l, const TrainSpec *t,
                                      double dropout, double s, double recomputed) {
    const PrecisionSpec *p = plan_precision(t->precision);
    double X = p->act_bytes, R = p->param_bytes, h = (double)m->d_model, a = m->n_head;
    double qd = (double)m->n_head * (double)m->d_head;
    double M = hidden_dropout_bytes(m, t, dropout, X);
    double mlp_in = llama_style(m) && p->autocast && m->mlp == MLP_SWIGLU ? 2 : 1;
    double freed = X * qd + 2 * M * h + norm_bytes(m, R, h) + mlp_bytes(m, t, plan_act_mlp_width(m, l), mlp_in);
    return recomputed + 2 * a * s * X + X * qd + R * h - freed;
}

double plan_act_block_backward_bytes(const ModelSpec *m, int i, const TrainSpec *t, const ActInputs *in) {
    const LayerSpec *l = &m->layers[i];
    if (t->impl != IMPL_PYTORCH || l->kind != LAYER_BLOCK || !is_transformer(m)) return 0;
    const PrecisionSpec *p = plan_precision(t->precision);
    double X = p->act_bytes, R = p->param_bytes, h = (double)m->d_model, f = plan_act_mlp_width(m, l);
    double M = hidden_dropout_bytes(m, t, in->dropout, X);
    double bs = (double)in->b * (double)in->s;
    double ws = bs * (2 * f * X + R * h - M * h);
    /* op-level: the recomputation (early_stop=False: the whole forward) has consumed the saved
       outputs into the block's graph, which then holds what it holds without checkpointing */
    if (t->act_ckpt == CKPT_OP && plan_act_checkpointed(m, t, i))
        ws += plan_act_layer_bytes(m, i, t, in) - op_block_bytes(m, i, t, in);
    else if (plan_act_checkpointed(m, t, i)) ws += plan_act_layer_bytes(m, i, t, in) - bs * R * h;
    int partial = plan_act_core_recomputed(m, t, i) || (t->act_ckpt == CKPT_OP && plan_act_checkpointed(m, t, i));
    if (partial && (t->attn == ATTN_EAGER || plan_act_sdpa_math(t, in->dropout))) {
        double rec, cl, cq, s = (double)in->s;
        core_attn_coeffs(m, t, in->dropout, &cl, &cq);
        if (t->act_ckpt == CKPT_OP) rec = (plan_act_layer_bytes(m, i, t, in) - op_block_bytes(m, i, t, in)) / bs;
        else rec = cl + s * cq;
        double att = bs * attn_backward_per_token(m, l, t, in->dropout, s, rec);
        if (att > ws) ws = att;   /* the block's larger moment, taken at its MLP point */
    }
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
