/* plan_activ.c — saved activations per layer. Notation (bytes per element): X = compute dtype
 * (2 under autocast / 16-bit, 4 in fp32), R = residual stream = parameter dtype, F = 4 (fp32
 * kept by autocast: softmax, pow, LayerNorm statistics), M = what a dropout keeps per element
 * when dropout is on (plan_act_dropout_bytes). h hidden, f MLP width, a heads, s sequence.
 * Derivations: docs/formulas.md. */
#include <math.h>

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

/* LLaMA-style decoders (Llama, Mistral, Qwen2, Gemma and the 2024-26 RMSNorm families: RMSNorm,
   rotary, separate q/k/v and gate/up projections unless fused, no hidden dropout), as
   transformers 5's modeling_llama.py and its kin run them. */
static int llama_style(const ModelSpec *m) {
    return m->arch == ARCH_DECODER && m->norm == NORM_RMSNORM;
}

/* transformers' shared eager_attention_forward after a rotary embedding (modeling_llama.py):
   softmax(dtype=float32).to(query.dtype), q in fp32 under autocast after the product with the
   fp32 cos/sin. The RMSNorm decoders and StarCoder2. */
static int rotary_attn(const ModelSpec *m) {
    return llama_style(m) || m->block.rotary;
}

/* q, k and v from three projections: autocast casts their fp32 input once per projection. */
static int separate_qkv(const ModelSpec *m) {
    return m->block.qkv == QKV_SEPARATE || (m->block.qkv == QKV_CLASSIC && llama_style(m));
}

/* What a norm of width w saves per token, in `rows` groups (a per-head norm: one per head), for
   an input of in_bytes per element. LayerNorm: its input and fp32 mean + rstd per row.
   LlamaRMSNorm (modeling_llama.py): hidden_states.to(float32) (pow and the rsqrt product save it:
   4·w), the fp32 rsqrt per row, and weight * normed.to(input_dtype) saves the normalised tensor
   at the input's dtype; measured 8h + 4 per norm in fp32 and under autocast (block_probe.py,
   llama-mini). Gemma's and OLMo 2's RMSNorm scale first and cast after ((x * w).to(dtype):
   modeling_gemma2.py Gemma2RMSNorm.forward, modeling_olmo2.py Olmo2RMSNorm.forward), so the
   normalised tensor is saved in fp32. Other RMSNorms (T5) keep the earlier input + rsqrt. */
static double norm_saves(const ModelSpec *m, double in_bytes, double w, double rows) {
    if (m->norm == NORM_LAYERNORM) return in_bytes * w + 8 * rows;
    if (!llama_style(m)) return in_bytes * w + 4 * rows;
    return (4 + (m->block.norm_fp32 ? 4 : in_bytes)) * w + 4 * rows;
}

/* A block's norms per token: those on the residual stream (R; none in OLMo 2), those on the
   sublayers' outputs (X: Gemma 2/3's post_attention_layernorm and post_feedforward_layernorm
   beside their input norms, OLMo 2's instead of them), and the q and k norms on the
   projections' outputs (X): per head (Qwen3Attention, Gemma3Attention: q_norm over head_dim,
   a and kv rows per token) or over all of q and of k (Olmo2Attention). */
static double block_norm_bytes(const ModelSpec *m, double X, double R, int cross) {
    const BlockSpec *b = &m->block;
    double h = (double)m->d_model, qd = (double)m->n_head * (double)m->d_head;
    double kvd = (double)m->n_kv_head * (double)m->d_head;
    int pre = b->norm_place == NORM_PLACE_POST ? 0 : (cross ? 3 : 2);
    int post = b->norm_place == NORM_PLACE_PRE ? 0 : 2;
    double bytes = pre * norm_saves(m, R, h, 1) + post * norm_saves(m, X, h, 1);
    if (b->qk_norm == 1) bytes += norm_saves(m, X, qd, m->n_head) + norm_saves(m, X, kvd, m->n_kv_head);
    if (b->qk_norm == 2) bytes += norm_saves(m, X, qd, 1) + norm_saves(m, X, kvd, 1);
    return bytes;
}

/* The embeddings' dropout (LLaMA-style models have none). */
static double embed_dropout_bytes(const ModelSpec *m, const TrainSpec *t, double dropout, double in_bytes) {
    return llama_style(m) ? 0 : plan_act_dropout_bytes(t, dropout, in_bytes);
}

/* The dropouts on a block's sublayer outputs: GPT-2's, BERT's, StarCoder2's residual_dropout;
   Phi-3's resid_attn_dropout and resid_mlp_dropout (modeling_phi3.py Phi3DecoderLayer); other
   LLaMA-style blocks have only the attention probabilities'. */
static double resid_dropout_bytes(const ModelSpec *m, const TrainSpec *t, double dropout, double in_bytes) {
    return llama_style(m) && !m->block.resid_dropout ? 0 : plan_act_dropout_bytes(t, dropout, in_bytes);
}

static double mlp_bytes(const ModelSpec *m, const TrainSpec *t, double f, double mlp_in);

/* Eager attention's core per token per key position (a·s per token): q·kᵀ, softmax, dropout and
   the AV matmul's saved input. l: the layer (NULL: a rotary one). */
static double eager_core_quad(const ModelSpec *m, const LayerSpec *l, const TrainSpec *t, double dropout) {
    const PrecisionSpec *p = plan_precision(t->precision);
    double X = p->act_bytes, F = 4, a = m->n_head, quad;
    int amp = p->autocast;
    if (rotary_attn(m)) {
        /* softmax(dtype=float32).to(query.dtype): fp32 probabilities; q is fp32 after the rotary
           product with fp32 cos/sin under autocast (not in SmolLM3's NoPE layers), so the
           dropout runs in fp32 there, and the AV matmul saves its X copy (autocast) or its input */
        int rope = !(l && l->no_rope);
        double Mq = plan_act_dropout_bytes(t, dropout, amp && rope ? F : X);
        quad = a * (F + Mq + ((Mq > 0 || X < F) ? X : 0));
    } else {
        double S = amp ? F : X;                            /* softmax output (fp32 under autocast) */
        double Mq = plan_act_dropout_bytes(t, dropout, X);
        quad = a * (S + Mq + ((Mq > 0 || amp) ? X : 0));   /* + mask, + dropout out / cast */
    }
    /* Gemma 2's soft-capping: tanh(scores / cap) saves its output at the scores' dtype
       (modeling_gemma2.py eager_attention_forward: / softcap, tanh, * softcap) */
    if (m->block.attn_softcap > 0) quad += a * X;
    return quad;
}

/* One attention sublayer per token: bytes = *lin + s·*quad. l: the layer (NULL: a full-attention
   one), s: the sequence (a sliding window shorter than it materialises a mask). */
static void attn_coeffs(const ModelSpec *m, const LayerSpec *l, const TrainSpec *t, double dropout, double s,
                        double *lin, double *quad) {
    const PrecisionSpec *p = plan_precision(t->precision);
    double X = p->act_bytes, F = 4, h = (double)m->d_model, a = m->n_head;
    double qd = a * (double)m->d_head, kvd = (double)m->n_kv_head * (double)m->d_head;
    double M = resid_dropout_bytes(m, t, dropout, X);     /* dropouts on compute-dtype tensors */
    /* autocast casts a linear's fp32 input for each call: one copy per projection where they
       are separate (LLaMA-style q, k, v: measured 3 X·h copies); fp32 and 16-bit models, and
       a fused projection (GPT-2's c_attn, Phi-3's qkv_proj), share one input tensor */
    *lin += (p->autocast && separate_qkv(m) ? 3 : 1) * X * h;   /* q/k/v projection input */
    *lin += X * qd;                                         /* attention output = out-proj input */
    *lin += M * h;                                          /* residual dropout mask / noise */
    if (t->attn == ATTN_EAGER) {
        *lin += X * 3 * qd;            /* q, k, v as the two matmuls save them: k and v expanded (repeat_kv) */
        *quad += eager_core_quad(m, l, t, dropout);
    } else if (plan_act_sdpa_math(t, dropout)) {
        /* the math kernel in fp32 (attention.cpp _scaled_dot_product_attention_math: half
           and bf16 q, k, v are upcast, "Keep query, key, value in high precision"): the
           two matmuls save q and k scaled by sqrt(scale) and v, fp32 and expanded to a
           heads (GQA: enable_gqa repeat_interleaves them); then per head and key position
           the fp32 probabilities (_safe_softmax), the dropout noise and the dropout output */
        *lin += 4 * 3 * qd;
        *quad += a * (4 + 4 + 4);
    } else {
        /* a sliding window shorter than the sequence: transformers hands SDPA a boolean mask
           (masking_utils.py _ignore_causal_mask_sdpa), which SDPA converts to q's dtype and the
           kernel saves, one per layer (measured: X·s per token), and then GQA k and v are
           expanded (sdpa_attention.py use_gqa_in_sdpa needs no mask and head_dim <= 256) */
        int masked = l && l->attn_window > 0 && s > (double)l->attn_window;
        int expand = kvd < qd && (masked || m->d_head > 256);
        *lin += X * (qd + 2 * (expand ? qd : kvd));         /* q, k, v (GQA: enable_gqa) */
        *lin += F * a;                                     /* SDPA log-sum-exp, fp32 */
        if (masked) *quad += X;
        /* Phi-3: v is a view of the fused q|k|v output, and the kernel's saved v keeps all of it;
           q leaves its torch.cat rotary contiguous per head and the CPU flash kernel lays its
           output out like q, so the output it saves is not the out-projection's input (measured) */
        if (m->block.qkv == QKV_FUSED && !expand) *lin += X * (qd + kvd);
        if (m->block.rotary_cat && t->autocast_cpu) *lin += X * qd;
    }
}

/* Eager PyTorch transformer block (layer l; NULL: a full-attention rotary block), per token:
   bytes = lin + s*quad. */
static void block_coeffs(const ModelSpec *m, const LayerSpec *l, const TrainSpec *t, double dropout, int cross,
                         double s, double *lin_out, double *quad_out) {
    const PrecisionSpec *p = plan_precision(t->precision);
    double X = p->act_bytes, R = p->param_bytes;
    double M = resid_dropout_bytes(m, t, dropout, X);
    int amp = p->autocast;
    /* SwiGLU's gate and up: two casts of the norm output under autocast (Phi-3's fused gate_up: one) */
    double mlp_in = llama_style(m) && amp && m->mlp == MLP_SWIGLU && !m->block.fused_gate_up ? 2 : 1;
    double lin = block_norm_bytes(m, X, R, cross), quad = 0;   /* norm inputs + statistics */
    for (int k = 0; k < (cross ? 2 : 1); k++) attn_coeffs(m, l, t, dropout, s, &lin, &quad);
    lin += mlp_bytes(m, t, (double)m->d_ff, mlp_in);
    lin += M * (double)m->d_model;                         /* MLP dropout mask */
    *lin_out = lin;
    *quad_out = quad;
}

void plan_act_block_coeffs(const ModelSpec *m, const TrainSpec *t, double dropout, int cross,
                           double *lin_out, double *quad_out) {
    block_coeffs(m, NULL, t, dropout, cross, 0, lin_out, quad_out);
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

/* Phi-3 eager attention at micro-batch 1 without GQA: repeat_kv returns v itself, a view of the
   fused q|k|v output, and the AV matmul's reshape of a (1, a, s, d) view is a view too, so the
   saved v keeps the whole fused output (at larger batches the reshape copies). Per token. */
static double eager_batch1_view_bytes(const ModelSpec *m, const TrainSpec *t, const ActInputs *in) {
    if (t->attn != ATTN_EAGER || m->block.qkv != QKV_FUSED || m->n_kv_head != m->n_head || in->b != 1) return 0;
    double qd = (double)m->n_head * (double)m->d_head, kvd = (double)m->n_kv_head * (double)m->d_head;
    return plan_precision(t->precision)->act_bytes * (qd + kvd);
}

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
    double M = embed_dropout_bytes(m, t, in->dropout, R);   /* the embeddings' dropout: R input */
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
        block_coeffs(m, l, t, in->dropout, cross, s, &lin, &quad);
        return bs * (lin + eager_batch1_view_bytes(m, t, in) + plan_act_moe_delta(m, l, t) + s * quad);
    }
    case LAYER_NORM: return bs * norm_saves(m, R, h, 1);
    case LAYER_LINEAR: return b * X * h;                             /* pooler: first token */
    case LAYER_HEAD: {
        double per_tok = X * h;                                      /* head input */
        if (m->arch == ARCH_ENCODER) per_tok += 2 * X * h + R * h + stats;  /* MLM transform */
        /* logits (X, the model's output, held by the caller) and the fp32 log-softmax output
           that cross_entropy saves; transformers' ForCausalLMLoss upcasts the logits to fp32
           (logits.float()) only inside the loss function: log_softmax saves its output, not its
           input, so the upcast is freed with the forward (measured, docs/formulas.md) */
        per_tok += V * ((t->loop_trainer ? 0 : X) + 4);
        /* Gemma 2's final soft-capping: tanh(logits / cap) saves its output (modeling_gemma2.py
           Gemma2ForCausalLM.forward), the logits' dtype */
        if (m->block.logit_softcap > 0) per_tok += V * X;
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

/* The attention mask a decoder block is handed (transformers' masking_utils.py): eager attention
   gets a (b, 1, s, s) additive float mask at the embeddings' dtype (R), one per kind and forward,
   shared by the blocks of that kind (create_causal_mask; create_sliding_window_causal_mask for
   sliding-window blocks); SDPA gets none (is_causal) unless a sliding window shorter than the
   sequence makes sdpa_mask materialise a (b, 1, s, s) boolean one. Returns its kind (0: none,
   1: causal, 2: sliding) and *bytes its size. */
static int block_mask(const ModelSpec *m, const LayerSpec *l, const TrainSpec *t, const ActInputs *in, double *bytes) {
    double b = (double)in->b, s = (double)in->s;
    if (m->arch != ARCH_DECODER || t->impl != IMPL_PYTORCH || l->kind != LAYER_BLOCK) return 0;
    if (t->attn == ATTN_EAGER) {
        *bytes = b * s * s * plan_precision(t->precision)->param_bytes;
        return l->attn_window > 0 ? 2 : 1;
    }
    if (l->attn_window <= 0 || s <= (double)l->attn_window) return 0;
    *bytes = b * s * s;
    return 2;
}

/* Under non-reentrant checkpointing each checkpointed block keeps its arguments for the
   recomputation (torch/utils/checkpoint.py), its mask among them, so a mask lives from forward to
   the end of the backward of the first checkpointed block it was handed to: charged there.
   Measured: docs/formulas.md "A block's backward". */
static double ckpt_causal_mask_bytes(const ModelSpec *m, int i, const TrainSpec *t, const ActInputs *in) {
    double bytes = 0, other;
    int kind = plan_act_checkpointed(m, t, i) ? block_mask(m, &m->layers[i], t, in, &bytes) : 0;
    for (int j = 0; j < i && kind; j++)
        if (plan_act_checkpointed(m, t, j) && block_mask(m, &m->layers[j], t, in, &other) == kind) kind = 0;
    return kind ? bytes : 0;
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

/* Which part of a block's backward holds the most, per token above its start (which holds all
   the block's saved tensors and its output's gradient). */
typedef enum { BWD_MLP = 0, BWD_POST_NORM, BWD_ATTN } BlockBwdPart;

/* Eager attention's backward at its softmax's backward (decoders): the probabilities' gradient
   and the softmax input's (a·s each at the softmax output's dtype: fp32 after a rotary q, or
   autocast's) and v's (X·qd) are alive, while what the block saved after the softmax is freed:
   the MLP, the norms after the attention, the out-projection's input, the dropouts, the AV
   matmul's v and probabilities input (its cast, the dropout's noise and output); the input
   norm, the q/k norms, the projections' input, q and the expanded k, the softmax output and a
   soft-cap's tanh remain. Measured (block_probe.py, llama-mini, s 512): 8,700 B/token fp32,
   7,676 under autocast, at SoftmaxBackward0, as this gives. */
static double eager_attn_backward(const ModelSpec *m, const LayerSpec *l, const TrainSpec *t, const ActInputs *in) {
    const PrecisionSpec *p = plan_precision(t->precision);
    double X = p->act_bytes, R = p->param_bytes, F = 4, s = (double)in->s, a = m->n_head, h = (double)m->d_model;
    double qd = a * (double)m->d_head;
    double S = rotary_attn(m) || p->autocast ? F : X;        /* the softmax output's dtype */
    double lin, quad;
    block_coeffs(m, l, t, in->dropout, 0, s, &lin, &quad);
    double all = lin + s * quad + plan_act_moe_delta(m, l, t) + eager_batch1_view_bytes(m, t, in);
    int pre = m->block.norm_place != NORM_PLACE_POST, post = m->block.norm_place != NORM_PLACE_PRE;
    double in_norm = pre ? norm_saves(m, R, h, 1) : 0;
    double qk_norms = block_norm_bytes(m, X, R, 0) - 2 * in_norm - (post ? 2 * norm_saves(m, X, h, 1) : 0);
    double qkv_in = (p->autocast && separate_qkv(m) ? 3 : 1) * X * h;
    double stays = in_norm + qk_norms + qkv_in + 2 * X * qd + s * a * (S + (m->block.attn_softcap > 0 ? X : 0));
    return s * 2 * a * S + X * qd - (all - stays);
}

/* The largest working set of block i's backward per token above its start, and which part.
   The MLP's (PyTorch layout), beyond the saved activations, which are all still
   alive (the MLP runs last in forward, so its backward runs first). At its largest, in the
   activation's backward: fc2's backward has made the f-wide gradient of its input and freed its
   saved input (the same size), and the activation's backward (GELU's products, SwiGLU's
   gate x up) makes two more f-wide gradients: + 2·f·X per token. The MLP dropout's saved
   mask or noise (M·h) is freed by then. The residual stream's gradient (R·h) is alive
   throughout (the residual add hands the same tensor to both branches). Under checkpointing
   the block's activations are recomputed first, all but its input, which the checkpoint holds.
   A post-norm's backward and eager attention's may hold more (below). Measured per token with
   bench/torch/block_probe.py: docs/formulas.md "A block's backward". */
static double block_backward_ws(const ModelSpec *m, int i, const TrainSpec *t, const ActInputs *in, BlockBwdPart *part) {
    const LayerSpec *l = &m->layers[i];
    const PrecisionSpec *p = plan_precision(t->precision);
    double X = p->act_bytes, h = (double)m->d_model, f = plan_act_mlp_width(m, l);
    double M = resid_dropout_bytes(m, t, in->dropout, X);
    /* the MLP's: fc2's input gradient and the activation's two products (f-wide each) */
    double ws = 2 * f * X - M * h;
    *part = BWD_MLP;
    if (m->block.norm_place != NORM_PLACE_PRE) {
        /* a norm on the MLP's output (Gemma 2/3's post_feedforward_layernorm, OLMo 2's) runs its
           backward first: its saved tensors are freed by the MLP's; its own backward, (x * w) in
           fp32, holds five fp32 h-wide tensors less its normalised one and rsqrt (measured
           16h − 4 B/token above the block's start, fp32 and autocast, h 128 and 256) */
        ws -= norm_saves(m, X, h, 1);
        if (m->block.norm_fp32 && 16 * h - 4 > ws) { ws = 16 * h - 4; *part = BWD_POST_NORM; }
    }
    if (t->attn == ATTN_EAGER && m->arch == ARCH_DECODER) {
        double at = eager_attn_backward(m, l, t, in);
        if (at > ws) { ws = at; *part = BWD_ATTN; }
    }
    return ws;
}

/* That working set for the whole micro-batch, with the residual stream's gradient (R·h per token)
   and, under checkpointing, the recomputed activations. */
double plan_act_block_backward_bytes(const ModelSpec *m, int i, const TrainSpec *t, const ActInputs *in) {
    const LayerSpec *l = &m->layers[i];
    if (t->impl != IMPL_PYTORCH || l->kind != LAYER_BLOCK || !is_transformer(m)) return 0;
    double R = plan_precision(t->precision)->param_bytes, h = (double)m->d_model;
    double bs = (double)in->b * (double)in->s;
    BlockBwdPart part;
    double ws = bs * (block_backward_ws(m, i, t, in, &part) + R * h);
    if (plan_act_checkpointed(m, t, i)) ws += plan_act_layer_bytes(m, i, t, in) - bs * R * h;
    return ws;
}

double plan_act_block_bwd_done_elems(const ModelSpec *m, int i, const TrainSpec *t, const ActInputs *in) {
    const LayerSpec *l = &m->layers[i];
    BlockBwdPart part = BWD_MLP;
    if (t->impl == IMPL_PYTORCH && l->kind == LAYER_BLOCK && is_transformer(m)) block_backward_ws(m, i, t, in, &part);
    double h = (double)m->d_model, qd = (double)m->n_head * (double)m->d_head;
    double kvd = (double)m->n_kv_head * (double)m->d_head;
    if (part == BWD_POST_NORM) return h;                  /* the post-feedforward norm's weight */
    if (part == BWD_ATTN) {
        /* all but q, k, v (their biases, where a family has them, counted as done: qd + 2 kvd
           elements at most), the q/k norms and the input norm (none before OLMo 2's post-norm
           block; a LayerNorm's weight and bias) */
        double in_norm = m->block.norm_place == NORM_PLACE_POST ? 0 : m->norm == NORM_LAYERNORM ? 2 * h : h;
        double qk = m->block.qk_norm == 1 ? 2.0 * (double)m->d_head : m->block.qk_norm == 2 ? qd + kvd : 0;
        return fmax(0, (double)l->params - h * (qd + 2 * kvd) - in_norm - qk);
    }
    return plan_act_block_mlp_out_elems(m, i);
}

/* Elements of a block's MLP output projection (fc2 / c_proj / down_proj), whose gradients
   exist during the MLP's backward; the block's others come after it. */
double plan_act_block_mlp_out_elems(const ModelSpec *m, int i) {
    const LayerSpec *l = &m->layers[i];
    if (l->expert_params > 0 && m->moe.n_experts > 0)
        return (double)l->expert_params + (double)m->moe.d_ff_shared * (double)m->d_model;
    return (double)m->d_ff * (double)m->d_model;
}
