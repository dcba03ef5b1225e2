/* plan_activ.c — saved activations per layer. Notation (bytes per element): X = compute dtype
 * (2 under autocast / 16-bit, 4 in fp32), R = residual stream = parameter dtype, F = 4 (fp32
 * kept by autocast: softmax, pow, LayerNorm statistics), M = what a dropout keeps per element
 * when dropout is on (plan_act_dropout_bytes). h hidden, f MLP width, a heads, s sequence.
 * Derivations: docs/formulas.md. */
#include <math.h>

#include "plan_activ.h"
#include "plan_dim_ep.h"
#include "plan_dim_moe.h"
#include "plan_dim_ft.h"

static int is_transformer(const ModelSpec *m) {
    return m->arch == ARCH_DECODER || m->arch == ARCH_ENCODER || m->arch == ARCH_ENC_DEC;
}

/* ---- the saved tensors one by one (plan_act_layer_tensors) ----
   Each contribution to a layer's saved bytes is written as n tensors of `each` bytes per token
   (T) or per token and key position (Q): they return n x each, which the sums below add as
   before (whole numbers: exact in any order), and while plan_act_layer_tensors listens they
   note the tensors, so the allocation listing (plan_step_alloc.c) cuts a layer's saved bytes
   into the tensors this file counts: one source. mult: how many times the contributions being
   made count (a norm applied twice, sequence parallel's share). */
typedef struct {
    double n, each;
    int quad;   /* 0: each per token; QUAD_S: each per token per key position (s); QUAD_S1: per
                   token per s + 1 positions (a softmax over the sink column too); WHOLE: each is
                   the tensor's bytes (a CNN's tensors, whose sizes are no multiple of tokens) */
} ActNote;
/* TEMP_MAKE / TEMP_FREE: not saved, an op's output freed within the forward (each per token,
   bytes counted by no sum): made there, or the oldest such one still live freed there; the
   listing makes them between the saved tensors (plan_act_ckpt_ops) */
enum { QUAD_S = 1, QUAD_S1 = 2, WHOLE = 3, TEMP_MAKE = 4, TEMP_FREE = 5 };

typedef struct {
    ActNote v[PLAN_ACT_MAX_TENSORS];
    int n;
    double mult;
} ActSink;

static _Thread_local ActSink *act_sink;
/* 1 while a block whose core attention selective recompute drops is counted: the core's tensors
   (what core_attn_coeffs counts) are not noted, the checkpoint's inputs are (selective_delta) */
static _Thread_local int core_unnoted;

static double note(double n, double each, int quad) {
    ActSink *k = act_sink;
    if (k && n > 0 && each > 0 && k->n < PLAN_ACT_MAX_TENSORS) k->v[k->n++] = (ActNote){n * k->mult, each, quad};
    return n * each;
}
static double T(double n, double each) { return note(n, each, 0); }
double plan_act_note(double n, double each) { return note(n, each, 0); }
static double Q(double n, double each) { return note(n, each, QUAD_S); }
/* Takes n noted tensors of `each` bytes per token back out (the latest so noted): what a rule
   subtracts from bytes it counted as saved. */
static void unnote(double n, double each) {
    ActSink *k = act_sink;
    for (int j = k ? k->n - 1 : -1; j >= 0 && n > 0; j--) {
        ActNote *x = &k->v[j];
        if (x->quad || fabs(x->each - each) > 1e-9 * each || x->n < 1) continue;
        double take = x->n < n ? floor(x->n) : n;
        x->n -= take;
        n -= take;
    }
}
static double W(double n, double bytes) { return note(n, bytes, WHOLE); }
/* A forward temporary of `each` bytes per token made (TEMP_MAKE) or the oldest live one freed
   (TEMP_FREE); adds nothing to the saved bytes. */
static void tmp(int kind, double each) {
    ActSink *k = act_sink;
    if (k && each > 0 && k->n < PLAN_ACT_MAX_TENSORS) k->v[k->n++] = (ActNote){k->mult, each, kind};
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
int plan_act_llama_style(const ModelSpec *m) {
    return m->arch == ARCH_DECODER && m->norm == NORM_RMSNORM;
}

/* Sequence parallel (plan_dim_tp.h): a SequenceParallel norm runs on this rank's 1/tp of the
   sequence, so what it saves is 1/tp of the replicated norm's. */
static double sp_share(const TrainSpec *t) { return t->sp && t->tp > 1 ? 1.0 / t->tp : 1.0; }

/* transformers' shared eager_attention_forward after a rotary embedding (modeling_llama.py):
   softmax(dtype=float32).to(query.dtype), q in fp32 under autocast after the product with the
   fp32 cos/sin. The RMSNorm decoders and StarCoder2. */
static int rotary_attn(const ModelSpec *m) {
    return plan_act_llama_style(m) || m->block.rotary;
}

/* GPT-2's attention saves q, k and v as views of its one c_attn output (transformers
   modeling_gpt2.py GPT2Attention.forward: `self.c_attn(hidden_states).split(self.split_size,
   dim=2)`, each `.view(...).transpose(1, 2)`; learned positions: no rotary embedding makes new
   q and k as NeoX's does, no GQA
   expands k and v), so what they keep alive is that one output, 3·qd per token, not three
   tensors: under SDPA at any batch (the kernel takes the strided views and its backward saves
   them), in eager attention at micro-batch 1, where torch.matmul folds a (1, a, s, d) view into
   bmm's dimensions by `reshape`, a view (aten/src/ATen/native/LinearAlgebra.cpp
   _matmul_impl; at larger batches the reshape copies q, kᵀ and v and the copies are saved).
   Measured (harness --alloc-ops, 2026-12-07): gpt2-mini b1 eager and b4 SDPA make one addmm
   output per block (196,608 B fp32 b1; 393,216 B bf16 b4) and no copies of q, k or v. */
static int qkv_one_output(const ModelSpec *m) {
    return m->fused_qkv && m->learned_pos && !rotary_attn(m) && m->n_kv_head == m->n_head;
}
static int qkv_views_saved(const ModelSpec *m, const TrainSpec *t, double b) {
    return qkv_one_output(m) && (t->attn == ATTN_EAGER ? b == 1 : t->attn == ATTN_SDPA);
}

/* q, k and v from three projections: autocast casts their fp32 input once per projection. */
static int separate_qkv(const ModelSpec *m) {
    return m->block.qkv == QKV_SEPARATE || (m->block.qkv == QKV_CLASSIC && plan_act_llama_style(m));
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
    if (m->norm == NORM_LAYERNORM) return T(1, in_bytes * w) + T(2, 4 * rows);   /* input; mean, rstd */
    if (!plan_act_llama_style(m)) return T(1, in_bytes * w) + T(1, 4 * rows);
    return T(1, 4 * w) + T(1, (m->block.norm_fp32 ? 4 : in_bytes) * w) + T(1, 4 * rows);
}

/* norm_saves, its tensors noted `times` times (the caller multiplies the bytes). */
static double norm_saves_x(const ModelSpec *m, double in_bytes, double w, double rows, double times) {
    ActSink *k = act_sink;
    double old = k ? k->mult : 1;
    if (k) k->mult = old * times;
    double v = norm_saves(m, in_bytes, w, rows);
    if (k) k->mult = old;
    return v;
}

/* A block's norms per token: those on the residual stream (R; none in OLMo 2), those on the
   sublayers' outputs (X: Gemma 2/3's post_attention_layernorm and post_feedforward_layernorm
   beside their input norms, OLMo 2's instead of them), and the q and k norms on the
   projections' outputs (X): per head (Qwen3Attention, Gemma3Attention: q_norm over head_dim,
   a and kv rows per token) or over all of q and of k (Olmo2Attention). Under sequence parallel
   only the norms on the residual stream run on the rank's sequence shard (sp: sp_share). */
static double block_norm_bytes(const ModelSpec *m, double X, double R, int cross, double sp) {
    const BlockSpec *b = &m->block;
    double h = (double)m->d_model, qd = (double)m->n_head * (double)m->d_head;
    double kvd = (double)m->n_kv_head * (double)m->d_head;
    int pre = b->norm_place == NORM_PLACE_POST ? 0 : (cross ? 3 : 2);
    int post = b->norm_place == NORM_PLACE_PRE ? 0 : 2;
    double bytes = pre * norm_saves_x(m, R, h, 1, pre * sp) * sp + post * norm_saves_x(m, X, h, 1, post);
    if (b->qk_norm == 1) bytes += norm_saves(m, X, qd, m->n_head) + norm_saves(m, X, kvd, m->n_kv_head);
    if (b->qk_norm == 2) bytes += norm_saves(m, X, qd, 1) + norm_saves(m, X, kvd, 1);
    return bytes;
}

/* The embeddings' dropout (LLaMA-style models have none). */
static double embed_dropout_bytes(const ModelSpec *m, const TrainSpec *t, double dropout, double in_bytes) {
    return plan_act_llama_style(m) ? 0 : plan_act_dropout_bytes(t, dropout, in_bytes);
}

/* The dropouts on a block's sublayer outputs: GPT-2's, BERT's, StarCoder2's residual_dropout;
   Phi-3's resid_attn_dropout and resid_mlp_dropout (modeling_phi3.py Phi3DecoderLayer); other
   LLaMA-style blocks have only the attention probabilities'. */
static double resid_dropout_bytes(const ModelSpec *m, const TrainSpec *t, double dropout, double in_bytes) {
    return plan_act_llama_style(m) && !m->block.resid_dropout ? 0 : plan_act_dropout_bytes(t, dropout, in_bytes);
}

static void mla_attention_bytes(const ModelSpec *m, const TrainSpec *t, double dropout, double *lin, double *quad);

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
        if (plan_act_llama_style(m)) {
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
        /* GPT-OSS: the probabilities are one tensor over s + 1 columns (sinks_bytes counts the
           sink column's bytes; here it is noted as part of that tensor) */
        quad = note(1, a * F, m->attn_sinks ? QUAD_S1 : QUAD_S) + Q(1, a * Mq) +
               Q(1, a * ((Mq > 0 || X < F) ? X : 0));
    } else {
        double S = amp ? F : X;                            /* softmax output (fp32 under autocast) */
        double Mq = plan_act_dropout_bytes(t, dropout, X);
        quad = Q(1, a * S) + Q(1, a * Mq) + Q(1, a * ((Mq > 0 || amp) ? X : 0));   /* + mask, + dropout out / cast */
    }
    /* Gemma 2's soft-capping: tanh(scores / cap) saves its output at the scores' dtype
       (modeling_gemma2.py eager_attention_forward: / softcap, tanh, * softcap) */
    if (m->block.attn_softcap > 0) quad += Q(1, a * X);
    return quad;
}

/* One attention sublayer per token: bytes = *lin + s·*quad. l: the layer (NULL: a full-attention
   one), s: the sequence (a sliding window shorter than it materialises a mask). */
static void attn_coeffs(const ModelSpec *m, const LayerSpec *l, const TrainSpec *t, double dropout, double s,
                        double b, double *lin, double *quad) {
    const PrecisionSpec *p = plan_precision(t->precision);
    double X = p->act_bytes, F = 4, h = (double)m->d_model, a = m->n_head;
    double qd = a * (double)m->d_head, kvd = (double)m->n_kv_head * (double)m->d_head;
    double M = resid_dropout_bytes(m, t, dropout, X);     /* dropouts on compute-dtype tensors */
    /* autocast casts a linear's fp32 input for each call: one copy per projection where they
       are separate (LLaMA-style q, k, v: measured 3 X·h copies); fp32 and 16-bit models, and
       a fused projection (GPT-2's c_attn, Phi-3's qkv_proj), share one input tensor */
    *lin += T(p->autocast && separate_qkv(m) ? 3 : 1, X * h);   /* q/k/v projection input */
    *lin += T(1, X * qd);                                   /* attention output = out-proj input */
    *lin += T(1, M * h);                                    /* residual dropout mask / noise */
    ActSink *sink = act_sink;
    if (core_unnoted) act_sink = NULL;   /* the core attention's own tensors (core_attn_coeffs) */
    if (t->attn == ATTN_EAGER) {
        /* q, k, v as the two matmuls save them: k and v expanded (repeat_kv); GPT-2's at
           micro-batch 1 views of one tensor (qkv_views_saved) */
        *lin += qkv_views_saved(m, t, b) ? T(1, 3 * X * qd) : T(3, X * qd);
        /* the scores before the softmax (transformers eager_attention_forward: matmul(q, k^T),
           * scaling, + causal mask), each freed by the next op, the last once the softmax is
           made; at one dtype only (under autocast the mask's add promotes) */
        int temps = !p->autocast && s > 0;
        if (temps) tmp(TEMP_MAKE, a * s * X), tmp(TEMP_MAKE, a * s * X), tmp(TEMP_FREE, a * s * X),
                   tmp(TEMP_MAKE, a * s * X), tmp(TEMP_FREE, a * s * X);
        *quad += eager_core_quad(m, l, t, dropout);
        if (temps) tmp(TEMP_FREE, a * s * X);
    } else if (plan_act_sdpa_math(t, dropout)) {
        /* the math kernel in fp32 (attention.cpp _scaled_dot_product_attention_math: half
           and bf16 q, k, v are upcast, "Keep query, key, value in high precision"): the
           two matmuls save q and k scaled by sqrt(scale) and v, fp32 and expanded to a
           heads (GQA: enable_gqa repeat_interleaves them); then per head and key position
           the fp32 probabilities (_safe_softmax), the dropout noise and the dropout output */
        *lin += T(3, 4 * qd);
        *quad += Q(3, a * 4);
    } else {
        /* a sliding window shorter than the sequence: transformers hands SDPA a boolean mask
           (masking_utils.py _ignore_causal_mask_sdpa), which SDPA converts to q's dtype and the
           kernel saves, one per layer (measured: X·s per token), and then GQA k and v are
           expanded (sdpa_attention.py use_gqa_in_sdpa needs no mask and head_dim <= 256) */
        int masked = l && l->attn_window > 0 && s > (double)l->attn_window;
        int expand = kvd < qd && (masked || m->d_head > 256);
        /* q, k, v (GQA: enable_gqa); GPT-2's views of one tensor (qkv_views_saved) */
        *lin += qkv_views_saved(m, t, b) ? T(1, 3 * X * qd) : T(1, X * qd) + T(2, X * (expand ? qd : kvd));
        *lin += T(1, F * a);                               /* SDPA log-sum-exp, fp32 */
        act_sink = sink;
        if (masked) *quad += Q(1, X);
        /* Phi-3: v is a view of the fused q|k|v output, and the kernel's saved v keeps all of it;
           q leaves its torch.cat rotary contiguous per head and the CPU flash kernel lays its
           output out like q, so the output it saves is not the out-projection's input (measured) */
        if (m->block.qkv == QKV_FUSED && !expand) *lin += T(1, X * (qd + kvd));
        if (m->block.rotary_cat && t->autocast_cpu) *lin += T(1, X * qd);
    }
    act_sink = sink;
}

/* Eager PyTorch transformer block (layer l; NULL: a full-attention rotary block), per token:
   bytes = lin + s*quad. */
static void block_coeffs(const ModelSpec *m, const LayerSpec *l, const TrainSpec *t, double dropout, int cross,
                         double s, double b, double *lin_out, double *quad_out) {
    const PrecisionSpec *p = plan_precision(t->precision);
    double X = p->act_bytes, R = p->param_bytes;
    double M = resid_dropout_bytes(m, t, dropout, X);
    int amp = p->autocast;
    /* SwiGLU's gate and up: two casts of the norm output under autocast (Phi-3's fused gate_up: one) */
    double mlp_in = plan_act_llama_style(m) && amp && m->mlp == MLP_SWIGLU && !m->block.fused_gate_up ? 2 : 1;
    double lin = block_norm_bytes(m, X, R, cross, sp_share(t)), quad = 0;   /* norm inputs + statistics */
    if (m->mla.kv_rank > 0) mla_attention_bytes(m, t, dropout, &lin, &quad);   /* DeepSeek */
    else for (int k = 0; k < (cross ? 2 : 1); k++) attn_coeffs(m, l, t, dropout, s, b, &lin, &quad);
    /* a MoE block's MLP is its experts (plan_act_moe_delta replaces these bytes and notes the
       experts' own tensors): the dense MLP's are not noted */
    lin += l && plan_moe_block(m, l) ? plan_act_mlp_bytes_unnoted(m, t, (double)m->d_ff, mlp_in)
                                     : plan_act_mlp_bytes(m, t, (double)m->d_ff, mlp_in);
    lin += T(1, M * (double)m->d_model);                   /* MLP dropout mask */
    *lin_out = lin;
    *quad_out = quad;
}

void plan_act_block_coeffs(const ModelSpec *m, const TrainSpec *t, double dropout, int cross,
                           double *lin_out, double *quad_out) {
    block_coeffs(m, NULL, t, dropout, cross, 0, 0, lin_out, quad_out);
}

/* DeepSeek's multi-head latent attention (modeling_deepseek_v3.py DeepseekV3Attention), per token,
   measured with block_probe.py (docs/formulas.md "Multi-head latent attention"): the input of
   q_a_proj (or q_proj) and kv_a_proj_with_mqa (X·h, autocast casts it for each); each latent's
   RMSNorm, (4 + 2X)·rank + 4 — its fp32 input (a copy, or in fp32 the projection's output
   itself, of which the kv norm's split view keeps the rope part too: + 4·r), the rsqrt, the
   normalised tensor the weight multiplies and the next projection's input; the rotary products
   save nothing per token (cos and sin need no gradient). Eager: the matmuls save q and k (a·(n +
   r) each) and v copied contiguous (a·v), the probabilities as LLaMA's; SDPA on CPU ranks runs
   the fp32 math kernel when q/k and v head dims differ (sdp_utils_cpp.cpp: flash needs equal
   head dims): q, k, v upcast to fp32 and the fp32 probabilities. o_proj's input (X·a·v). */
static void mla_attention_bytes(const ModelSpec *m, const TrainSpec *t, double dropout, double *lin, double *quad) {
    const PrecisionSpec *p = plan_precision(t->precision);
    const MlaSpec *a = &m->mla;
    double X = p->act_bytes, F = 4, h = (double)m->d_model, A = m->n_head;
    double qk = (double)(a->nope_dim + a->rope_dim), v = (double)a->v_dim, c = (double)a->kv_rank;
    *lin += T(p->autocast ? 2 : 1, X * h);
    if (a->q_rank > 0) *lin += T(1, 4 * (double)a->q_rank) + T(2, X * (double)a->q_rank) + T(1, 4);
    *lin += T(1, 4 * c) + T(2, X * c) + T(1, 4) + T(1, X >= 4 ? 4 * (double)a->rope_dim : 0);
    /* v is a view of kv_b_proj's (n + v)-wide output; the AV matmul folds (b, heads) without a copy
       when b = 1 (its batch stride then does not matter), saving the view and with it all of the
       output (measured: +X·a·n per token at micro-batch 1) */
    double vw = t->micro_batch == 1 ? (double)a->nope_dim + v : v;
    *lin += T(1, X * A * v);                               /* o_proj input */
    if (t->attn == ATTN_SDPA && ((t->autocast_cpu && qk != v) || plan_act_sdpa_math(t, dropout))) {
        *lin += T(2, F * A * qk) + T(1, X < F ? F * A * v : F * A * vw);   /* v upcast: a copy of v alone */
        *quad += Q(dropout > 0 ? 3 : 1, A * F);            /* probabilities (+ dropout noise, output) */
    } else if (t->attn == ATTN_SDPA) {
        *lin += T(2, X * A * qk) + T(1, X * A * v) + T(1, F * A);   /* q, k, v, log-sum-exp */
    } else {
        double Mq = plan_act_dropout_bytes(t, dropout, p->autocast ? F : X);
        *lin += T(2, X * A * qk) + T(1, X * A * vw);
        *quad += Q(1, A * F) + Q(1, A * Mq) + Q(1, A * ((Mq > 0 || X < F) ? X : 0));
    }
}

double plan_act_mlp_bytes_unnoted(const ModelSpec *m, const TrainSpec *t, double f, double mlp_in) {
    ActSink *k = act_sink;
    act_sink = NULL;
    double v = plan_act_mlp_bytes(m, t, f, mlp_in);
    act_sink = k;
    return v;
}

/* gelu_new's temporaries before tanh: x^3, 0.044715 x^3 (x^3 freed), x + ... (the product
   freed), c * (...) (the sum freed); c * (...) is freed once tanh is made (the caller). */
static void gelu_new_temps(double each) {
    tmp(TEMP_MAKE, each), tmp(TEMP_MAKE, each), tmp(TEMP_FREE, each);
    tmp(TEMP_MAKE, each), tmp(TEMP_FREE, each);
    tmp(TEMP_MAKE, each), tmp(TEMP_FREE, each);
}

/* A dense MLP of width f per token: what its linears and activation save. */
double plan_act_mlp_bytes(const ModelSpec *m, const TrainSpec *t, double f, double mlp_in) {
    const PrecisionSpec *p = plan_precision(t->precision);
    double X = p->act_bytes, F = 4, h = (double)m->d_model, lin = 0;
    int amp = p->autocast;
    switch (m->mlp) {
    case MLP_GELU: lin += T(1, X * h) + T(2, X * f); break;   /* fc1 input, GELU input, fc2 input */
    case MLP_GELU_NEW:                                     /* 0.5x(1+tanh(c(x+0.044715x^3))) */
        /* CUDA autocast runs pow in fp32, and tanh and 1+tanh follow it; CPU autocast leaves
           them in the compute dtype (measured, docs/formulas.md "Autocast on CPU") */
        /* transformers activations.py NewGELUActivation: 0.5 * x saved by the last product,
           pow(x, 3) (pow saves x, not its output), 0.044715 * x^3, x + ..., c * (...) made and
           each freed by the next op, tanh saved (its result), 1 + tanh and the product saved */
        if (amp && !t->autocast_cpu) {   /* pow/tanh/1+tanh fp32 (temporaries not listed) */
            lin += T(1, X * h) + T(3, F * f) + T(2, X * f);
        } else {
            lin += T(1, X * h) + T(2, X * f);   /* c_fc's input, x, 0.5x */
            gelu_new_temps(X * f);
            lin += T(1, X * f);                 /* tanh */
            tmp(TEMP_FREE, X * f);
            lin += T(2, X * f);                 /* 1 + tanh, the product (c_proj's input) */
        }
        break;
    case MLP_RELU: lin += T(1, X * h) + T(1, X * f); break;
    case MLP_SWIGLU: lin += T(mlp_in, X * h) + T(4, X * f); break;   /* gate, silu, up, product */
    }
    return lin;
}











static double transformer_layer_bytes(const ModelSpec *m, int i, const TrainSpec *t,
                                      const ActInputs *in);

/* GPT-OSS's attention sinks (modeling_gpt_oss.py eager_attention_forward): the sink logit joins
   each row, combined_logits.max(dim=-1) saves its int64 indices (8·a per token) and the fp32
   softmax runs over s + 1 columns (4·a more than LLaMA's s), measured. Eager only: the family has
   no SDPA path (GptOssPreTrainedModel._supports_sdpa = False; cli_setup.c resolves --attn). */
static double sinks_bytes(const ModelSpec *m, const TrainSpec *t) {
    if (!m->attn_sinks || t->attn != ATTN_EAGER) return 0;
    /* the indices a tensor of their own; the probabilities' column is part of the softmax
       output, one request of b·a·s·(s + 1)·4 bytes (measured: 1,056,768 B at b 4, a 4, s 128,
       above the small pool's 1 MiB; eager_core_quad notes it) */
    return T(1, 8.0 * m->n_head) + 4.0 * m->n_head;
}

/* q/k norms per head, measured with block_probe.py (fp32 and autocast): Qwen3's (and
   Qwen3-MoE's) RMSNorm (modeling_qwen3_moe.py q_norm, k_norm, the LlamaRMSNorm of norm_bytes over
   d_head) saves the fp32 input (a copy below fp32), the normalised tensor the weight multiplies
   (X) and one fp32 rsqrt per head; Llama 4's L2 norm (Llama4TextL2Norm: x.float() * rsqrt(...),
   no weight) the fp32 input and the rsqrt, on blocks with rope only (Llama4TextAttention: every
   nope_every-th block has neither). Block i (layer index). A model whose BlockSpec carries its
   q/k norms (Qwen3, Qwen3-MoE, Gemma 3, OLMo 2: block.qk_norm, set from the same config) has them
   counted once, in block_norm_bytes; Llama 4's L2 norm (3) is counted here only. */
static double qk_norm_bytes(const ModelSpec *m, int i, const TrainSpec *t) {
    if ((m->qk_norm != 1 && m->qk_norm != 3) || m->arch != ARCH_DECODER || m->block.qk_norm != 0) return 0;
    int k = 0;   /* the block's ordinal, 1-based */
    for (int j = 0; j <= i; j++) k += m->layers[j].kind == LAYER_BLOCK;
    if (m->qk_norm == 3 && m->nope_every > 0 && k % m->nope_every == 0) return 0;
    double X = plan_precision(t->precision)->act_bytes, d = (double)m->d_head;
    double rows = m->n_head + m->n_kv_head;
    return (4 + (m->qk_norm == 1 ? X : 0)) * rows * d + 4 * rows;
}

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

/* What a trainable subset changes in layer i's saved tensors (planner/plan_dim_ft.c sets the
   counts): a layer before the first trainable parameter records nothing for autograd, so it
   saves nothing; the first LoRA block's input norm neither; inputs of frozen projections are
   not saved; each LoRA adapter saves A's output (r) for B, and under lora_dropout the dropout's
   output for A with its mask or noise. docs/formulas.md "LoRA and frozen parameters". */
static double finetune_delta(const ModelSpec *m, int i, const TrainSpec *t, const ActInputs *in) {
    const LayerSpec *l = &m->layers[i];
    ActSink *sink = act_sink;
    if (l->grad_frontier == 1) {
        act_sink = NULL;
        double all = transformer_layer_bytes(m, i, t, in);
        act_sink = sink;
        if (sink) sink->n = 0;   /* nothing of it is saved (the sink is this layer's: plan_act_ckpt_tensors) */
        return -all;
    }
    const PrecisionSpec *p = plan_precision(t->precision);
    double X = p->act_bytes, bs = (double)in->b * (double)in->s;
    double d = -X * (double)(p->autocast ? l->act_unsaved_tok_ac : l->act_unsaved_tok) + X * (double)l->lora_r_tok +
               (X + plan_act_dropout_bytes(t, t->ft.dropout, X)) * (double)l->lora_drop_tok;
    double h = (double)m->d_model, M = plan_act_dropout_bytes(t, t->ft.dropout, X);
    if (sink) {
        /* the listing's tensors for those counts (the same rules): each group's inputs no longer
           saved taken out; per adapter (peft/tuners/lora/layer.py Linear.forward:
           lora_B(lora_A(dropout(x))) * scaling), the dropout's output and its mask or noise
           (saved by A and by the dropout), then A's output (saved by B) */
        int64_t in_of[6];
        int unsaved[6];
        plan_lora_unsaved(m, l, &t->ft, p->autocast, in_of, unsaved);
        int64_t rest = p->autocast ? l->act_unsaved_tok_ac : l->act_unsaved_tok;
        for (int g = 1; g < 6; g++) {
            unnote(unsaved[g], X * (double)in_of[g]);
            rest -= (int64_t)unsaved[g] * in_of[g];
        }
        if (rest > 0) unnote(1, X * (double)rest);   /* a frozen head's input (plan_dim_ft.c ft_mark_frontier) */
        for (int k = 0; k < l->n_frozen; k++) {
            int mod = l->frozen_mod[k];
            if (!plan_module_group(mod) || !plan_lora_adapts(m, &t->ft, mod)) continue;
            int64_t fin, fout;
            plan_module_features(mod, l->frozen_elems[k], l->frozen_dim0[k], &fin, &fout);
            if (t->ft.dropout > 0) T(1, X * (double)fin), T(1, M * (double)fin);
            T(1, X * (double)t->ft.rank);
        }
    }
    if (l->grad_frontier == 2) {
        act_sink = NULL;
        double nb = norm_saves(m, p->param_bytes, h, 1);
        act_sink = sink;
        d -= nb;
        if (sink) {   /* the same norm's tensors, taken out of the noted ones */
            ActSink one = {.mult = 1};
            act_sink = &one;
            norm_saves(m, p->param_bytes, h, 1);
            act_sink = sink;
            for (int j = 0; j < one.n; j++) unnote(one.v[j].n, one.v[j].each);
        }
        /* the adapters on its attention input: their dropout's input needs no gradient, so the
           dropout keeps no mask or noise (A still saves its output) */
        for (int k = 0; k < l->n_frozen && M > 0; k++) {
            int mod = l->frozen_mod[k];
            if (plan_module_group(mod) != 1 || !plan_lora_adapts(m, &t->ft, mod)) continue;
            int64_t fin, fout;
            plan_module_features(mod, l->frozen_elems[k], l->frozen_dim0[k], &fin, &fout);
            d -= M * (double)fin;
            unnote(1, M * (double)fin);
        }
    }
    /* autocast casts a frozen weight at every call and caches none (autocast_mode.cpp
       cached_cast caches leaves that require grad only); the matmul saves the copy for its
       input's gradient until the layer's backward: X per frozen projection element (not the
       first block's attention inputs, whose matmuls need no gradient). Measured with saved-
       tensor hooks on llama-mini + LoRA under CPU autocast. Per micro-batch, not per token.
       Only an fp32 base is cast: a --quant-base bf16 weight is already at the compute dtype
       (autocast hands it through), and bitsandbytes' 4- and 8-bit matmuls save the packed
       weight, not a 16-bit copy (bitsandbytes autograd/_functions.py MatMul4Bit: ctx.tensors
       = (A, B) with B the quantized weight; its dequantized copy is a transient). */
    double casts = 0;
    int cast_base = p->autocast && t->ft.quant == QUANT_NONE;
    if (cast_base)
        for (int k = 0; k < l->n_frozen; k++) {
            int mod = l->frozen_mod[k];
            if (PLAN_MOD_ID(mod) == PLAN_MOD_NONE || (l->grad_frontier == 2 && plan_module_group(mod) == 1)) continue;
            casts += (double)l->frozen_elems[k];
            if (bs > 0) T(1, X * (double)l->frozen_elems[k] / bs);   /* one copy per projection */
        }
    /* a head tied to frozen embeddings: F.linear(x, wte) casts the shared weight the same way */
    if (cast_base && l->kind == LAYER_HEAD && m->tied_embeddings && l->params == 0 && l->act_unsaved_tok > 0) {
        casts += (double)m->vocab * h;
        if (bs > 0) T(1, X * (double)m->vocab * h / bs);
    }
    /* LlamaRMSNorm's last product, weight * normed: with the weight frozen it saves the weight
       only (derivatives.yaml mul: self is saved when other requires grad), not the normalised
       tensor (R·h per token per norm; measured with saved-tensor hooks on llama-mini + LoRA) */
    if (plan_act_llama_style(m)) {
        int norms = 0;
        for (int k = 0; k < l->n_frozen; k++)
            norms += l->frozen_mod[k] == PLAN_MOD_NONE && l->frozen_elems[k] == m->d_model && l->frozen_dim0[k] == m->d_model;
        if (l->grad_frontier == 2 && norms > 0) norms--;   /* the first norm: dropped whole above */
        d -= norms * p->param_bytes * h;
        unnote(norms, p->param_bytes * h);
    }
    return bs * d + X * casts;
}

/* A CNN layer's saved tensors, each as PyTorch makes it (docs/formulas.md "CNN activations"):
   given per sample at the model's image side, the feature maps scaled by --seq's area (a square
   image of that side); the head's are pooled, so not. The first convolution keeps the input
   image (its ConvolutionBackward0 saves it), then each layer its output: a convolution's (which
   BatchNorm saves), BatchNorm's (which an in-place ReLU saves, or the residual add and ReLU make
   the block's output in place), max pooling's output and int64 indices (fp32 elements x 2).
   BatchNorm also keeps save_mean and save_invstd, (C,) fp32 each whatever the batch and image
   (aten/src/ATen/native/Normalization.cpp batch_norm_cpu / cudnn's and native_batch_norm's
   save tensors; derivatives.yaml native_batch_norm: result1, result2). The head keeps the pooled
   features (addmm's input), then its logits-sized tensors one each. */
static double cnn_layer_bytes(const ModelSpec *m, int i, const TrainSpec *t, double b) {
    const LayerSpec *l = &m->layers[i];
    double X = plan_precision(t->precision)->act_bytes, V = (double)m->vocab;
    int head = l->kind == LAYER_HEAD;
    double per = b * (head ? 1.0 : plan_cnn_area_scale(m, t->seq));   /* samples x area */
    double e = (double)l->act_elems, f = (double)l->act_fp32_elems, sum = 0;
    double img = i == 0 && l->kind == LAYER_CONV ? (double)m->in_channels * m->image_size * m->image_size : 0;
    if (img > 0 && img < e) {
        sum += W(1, round(per * img * X));
        e -= img;
    }
    /* the head's logits (past its pooled features) and fp32 tensors: one of the classes each */
    double logits = head && V > 0 && e > V ? V : 0, nf = head && V > 0 ? floor(f / V) : 0;
    sum += W(1, round(per * (e - logits) * X)) + W(1, round(per * logits * X));
    sum += W(nf, round(per * V * 4)) + W(1, round(per * (f - nf * V) * 4)) +
           W(1, round(per * (double)l->act_mask_elems));
    if (l->kind == LAYER_BN && l->act_known) sum += W(2, 4.0 * (double)l->bn_channels);
    return sum;
}

double plan_act_layer_bytes(const ModelSpec *m, int i, const TrainSpec *t, const ActInputs *in) {
    const LayerSpec *l = &m->layers[i];
    const PrecisionSpec *p = plan_precision(t->precision);
    double b = (double)in->b, s = (double)in->s, bs = b * s;
    if (l->act_bytes > 0) return b * (double)l->act_bytes;          /* measured, as given */
    if (!is_transformer(m)) return cnn_layer_bytes(m, i, t, b);
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
    double M = embed_dropout_bytes(m, t, in->dropout, R);   /* the embeddings' dropout: R input */
    double h = (double)m->d_model, V = (double)m->vocab;
    double stats = m->norm == NORM_LAYERNORM ? 8 : 4;
    switch (l->kind) {
    case LAYER_EMBED: {
        double per_tok = T(1, 8) + T(1, M * h);                      /* int64 ids, dropout mask/noise */
        if (m->arch == ARCH_ENCODER) per_tok += T(1, 8) + T(1, R * h) + T(stats / 4, 4);   /* ids, embeddings LayerNorm */
        return bs * per_tok;
    }
    case LAYER_BLOCK: {
        int cross = m->arch == ARCH_ENC_DEC && i > m->n_enc_layer;  /* layer 0 is embeddings */
        double lin, quad;
        block_coeffs(m, l, t, in->dropout, cross, s, b, &lin, &quad);
        return bs * (lin + eager_batch1_view_bytes(m, t, in) + plan_act_moe_delta(m, l, t) + sinks_bytes(m, t) +
                     qk_norm_bytes(m, i, t) + s * quad);
    }
    case LAYER_NORM: return bs * norm_saves_x(m, R, h, 1, sp_share(t)) * sp_share(t);
    case LAYER_LINEAR: return b * X * h;                             /* pooler: first token */
    case LAYER_HEAD: {
        double per_tok = T(1, X * h);                                /* head input */
        if (m->arch == ARCH_ENCODER) per_tok += T(2, X * h) + T(1, R * h) + T(stats / 4, 4);  /* MLM transform */
        /* logits (X, the model's output, held by the caller) and the fp32 log-softmax output
           that cross_entropy saves; transformers' ForCausalLMLoss upcasts the logits to fp32
           (logits.float()) only inside the loss function: log_softmax saves its output, not its
           input, so the upcast is freed with the forward (measured, docs/formulas.md) */
        per_tok += T(1, V * (t->loop_trainer ? 0 : X)) + T(1, V * 4);
        /* Gemma 2's final soft-capping: tanh(logits / cap) saves its output (modeling_gemma2.py
           Gemma2ForCausalLM.forward), the logits' dtype */
        if (m->block.logit_softcap > 0) per_tok += T(1, V * X);
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

/* A checkpointed block, or a recomputed core (selective), keeps its mask for the recomputation. */
static int holds_mask(const ModelSpec *m, const TrainSpec *t, int i) {
    return plan_act_checkpointed(m, t, i) || plan_act_core_recomputed(m, t, i);
}

/* Under non-reentrant checkpointing each checkpointed block keeps its arguments for the
   recomputation (torch/utils/checkpoint.py), its mask among them, so a mask lives from forward to
   the end of the backward of the first checkpointed block it was handed to: charged there.
   Measured: docs/formulas.md "A block's backward". */
static double ckpt_causal_mask_bytes(const ModelSpec *m, int i, const TrainSpec *t, const ActInputs *in) {
    double bytes = 0, other;
    int kind = holds_mask(m, t, i) ? block_mask(m, &m->layers[i], t, in, &bytes) : 0;
    for (int j = 0; j < i && kind; j++)
        if (holds_mask(m, t, j) && block_mask(m, &m->layers[j], t, in, &other) == kind) kind = 0;
    return kind ? bytes : 0;
}

double plan_act_forward_masks(const ModelSpec *m, const TrainSpec *t, const ActInputs *in, int *first) {
    double total = 0, bytes = 0;
    *first = -1;
    for (int kind = 1; kind <= 2; kind++) {
        int at = -1, held = 0;
        double one = 0;
        for (int i = 0; i < m->n_layers; i++) {
            if (block_mask(m, &m->layers[i], t, in, &bytes) != kind) continue;
            if (at < 0) at = i, one = bytes;
            held |= holds_mask(m, t, i);
        }
        if (at < 0 || held) continue;   /* none, or a checkpoint holds it (ckpt_causal_mask_bytes) */
        total += one;
        if (*first < 0 || at < *first) *first = at;
    }
    return total;
}

const char *plan_act_ckpt_unsupported(const ModelSpec *m, const TrainSpec *t) {
    if (t->act_ckpt != CKPT_OP && t->act_ckpt != CKPT_SELECTIVE) return NULL;
    if (t->impl != IMPL_PYTORCH) return "a PyTorch policy; memplan's engine recomputes whole blocks only";
    if (m->arch != ARCH_DECODER) return "modelled for decoder-only transformers (GPT-2, LLaMA and their kin) only";
    /* op-level checkpointing of MoE blocks: DeepSeek's (measured, with and without expert
       parallel); the other routers renormalise the saved top-k values in place, which torch's
       selective checkpointing refuses (measured on Mixtral, torch 2.15: "Tensor cached during
       selective activation checkpoint has been mutated") */
    if (m->moe.n_experts > 0 && !(t->act_ckpt == CKPT_OP && m->moe.router == MOE_ROUTER_GROUPED))
        return t->act_ckpt == CKPT_OP ? "not modelled for this family's mixture-of-experts blocks (measured for DeepSeek's; "
                                        "Mixtral's in-place top-k renormalisation breaks torch's selective checkpointing)"
                                      : "not modelled for mixture-of-experts blocks yet";
    if (plan_finetune_on(&t->ft)) return "not modelled with --lora/--freeze yet (the frozen projections save other tensors)";
    /* the blocks whose op lists were read and measured: GPT-2's and LLaMA's (and the same blocks
       under Mistral's and Qwen2's model types); the newer families' extra norms are not listed */
    static const char *const FAMILIES[] = {"", "gpt2", "llama", "mistral", "qwen2", NULL};
    static const char *const OP_FAMILIES[] = {"deepseek_v3", NULL};   /* latent attention + MoE: op only */
    if (plan_model_family_in(m, FAMILIES) || (t->act_ckpt == CKPT_OP && plan_model_family_in(m, OP_FAMILIES)))
        return NULL;
    return "modelled for GPT-2, LLaMA, Mistral and Qwen2 blocks only (their op lists were measured; op also for "
           "DeepSeek-V3's)";
}

int plan_act_core_recomputed(const ModelSpec *m, const TrainSpec *t, int i) {
    return t->act_ckpt == CKPT_SELECTIVE && m->layers[i].kind == LAYER_BLOCK && is_transformer(m);
}

/* Latent attention's projections (modeling_deepseek_v3.py DeepseekV3Attention.forward, in
   order): q (q_proj, or q_a_proj then q_b_proj), kv_a_proj_with_mqa, kv_b_proj, then o_proj after
   the attention; q_a and kv_a carry attention_bias, o_proj too. */
static int mla_projs(const ModelSpec *m, PlanProj *p) {
    const MlaSpec *a = &m->mla;
    double h = (double)m->d_model, A = m->n_head, qk = (double)(a->nope_dim + a->rope_dim);
    int n = 0, b = m->addmm_proj;
    if (a->q_rank > 0) {
        p[n++] = (PlanProj){h, (double)a->q_rank, b & PLAN_PROJ_QKV};
        p[n++] = (PlanProj){(double)a->q_rank, A * qk, 0};
    } else {
        p[n++] = (PlanProj){h, A * qk, 0};
    }
    p[n++] = (PlanProj){h, (double)(a->kv_rank + a->rope_dim), b & PLAN_PROJ_QKV};
    p[n++] = (PlanProj){(double)a->kv_rank, A * (double)(a->nope_dim + a->v_dim), 0};
    p[n++] = (PlanProj){A * (double)a->v_dim, h, b & PLAN_PROJ_OUT};
    return n;
}

int plan_act_block_projs(const ModelSpec *m, const LayerSpec *l, PlanProj p[PLAN_MAX_PROJ]) {
    double qd = (double)m->n_head * (double)m->d_head, kvd = (double)m->n_kv_head * (double)m->d_head;
    double h = (double)m->d_model, f = (double)m->d_ff;
    int n = 0, b = m->addmm_proj;
    if (m->mla.kv_rank > 0) {
        n = mla_projs(m, p);
    } else {
        if (m->fused_qkv) {
            p[n++] = (PlanProj){h, qd + 2 * kvd, b & PLAN_PROJ_QKV};
        } else {
            p[n++] = (PlanProj){h, qd, b & PLAN_PROJ_QKV};
            p[n++] = (PlanProj){h, kvd, b & PLAN_PROJ_QKV};
            p[n++] = (PlanProj){h, kvd, b & PLAN_PROJ_QKV};
        }
        p[n++] = (PlanProj){qd, h, b & PLAN_PROJ_OUT};
    }
    if (plan_moe_block(m, l)) {
        /* the router (h x E; GPT-OSS's with a bias), then after the routed experts the shared
           experts' gate, up and down (DeepseekV3MoE, Qwen2MoeSparseMoeBlock) and Qwen2-MoE's
           shared-expert gate (h x 1) */
        double fs = (double)m->moe.d_ff_shared;
        p[n++] = (PlanProj){h, (double)m->moe.n_experts, m->moe.bias};
        if (fs > 0) {
            p[n++] = (PlanProj){h, fs, 0};
            p[n++] = (PlanProj){h, fs, 0};
            p[n++] = (PlanProj){fs, h, 0};
        }
        if (m->moe.shared_gate) p[n++] = (PlanProj){h, 1, 0};
        return n;
    }
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
    const PrecisionSpec *pr = plan_precision(t->precision);
    double X = pr->act_bytes, a = m->n_head;
    /* the context's width: a heads of d_head, or latent attention's v dims */
    double qd = (double)m->n_head * (double)(m->mla.kv_rank > 0 ? m->mla.v_dim : m->d_head);
    /* latent attention's q/k and v head dims differ: CPU SDPA runs the math kernel, which the
       save list holds (sdp_utils_cpp.cpp: flash needs equal head dims) */
    int mla_math = m->mla.kv_rank > 0 && t->attn == ATTN_SDPA && t->autocast_cpu &&
                   m->mla.nope_dim + m->mla.rope_dim != m->mla.v_dim;
    PlanProj p[PLAN_MAX_PROJ];
    int n = plan_act_block_projs(m, l, p);
    double saved = 0;
    for (int k = 0; k < n; k++)
        if (plan_act_proj_saved(m, l, k)) saved += T(1, X * p[k].out);
    if (plan_act_op_core_saved(t, dropout) || mla_math) {
        if (t->attn == ATTN_EAGER) saved += Q(1, X * a) * s + T(1, X * qd);
        else if (plan_act_sdpa_math(t, dropout) || mla_math) saved += Q(1, 4 * a) * s + T(1, 4 * qd);
        else saved += T(1, X * qd) + T(1, 4 * a);
    }
    /* sequence parallel: the two row-parallel outputs' reduce-scatters are in the save list
       (torch.ops._c10d_functional.reduce_scatter_tensor): their sequence shards, at the
       outputs' dtype (each noted: two tensors for the allocation listing) */
    if (t->tp > 1 && t->sp)
        for (int k = 0; k < 2; k++) saved += T(sp_share(t), X * (double)m->d_model);
    if (plan_moe_block(m, l)) {
        /* topk is in the save list: its values and int64 indices; DeepSeek's group-limited
           routing runs three (the top 2 per group, the best groups, the experts), over fp32
           scores (the fp32 correction bias promotes them); a softmax router's are fp32 too */
        const MoeSpec *e = &m->moe;
        double k = e->top_k, g = e->n_group > 0 ? e->n_group : 1, tg = e->topk_group > 0 ? e->topk_group : 1;
        if (e->router == MOE_ROUTER_GROUPED) saved += T(1, 4 * 2 * g) + T(1, 8 * 2 * g) + T(1, 4 * tg) + T(1, 8 * tg);
        saved += T(1, 4 * k) + T(1, 8 * k);   /* each topk's fp32 values and int64 indices */
        /* expert parallel: the functional all_to_all_single's outputs (the rows received for
           the experts, the experts' outputs received back) are in the save list too */
        if (e->ep > 1)
            saved += T(1, plan_ep_rows_per_token(m, t) * (double)m->d_model * pr->param_bytes) +
                     T(1, k * (double)m->d_model * pr->param_bytes);
    }
    return saved;
}

/* Per token, what a block keeps under Megatron's selective recompute: all it saves without
   checkpointing, but for the core attention's own saved tensors (core_attn_coeffs), which
   its checkpoint replaces by its inputs q, k and v (unexpanded: n_kv_head heads for k and v;
   LLaMA-style q and k are fp32 after the rotary product with fp32 cos and sin under autocast). */
static double selective_delta(const ModelSpec *m, const TrainSpec *t, double dropout, double s) {
    const PrecisionSpec *p = plan_precision(t->precision);
    double X = p->act_bytes, qk = plan_act_llama_style(m) && p->autocast ? 4 : X;
    double qd = (double)m->n_head * (double)m->d_head, kvd = (double)m->n_kv_head * (double)m->d_head;
    double cl, cq;
    ActSink *k = act_sink;
    act_sink = NULL;   /* what it takes away is not noted as saved */
    core_attn_coeffs(m, t, dropout, &cl, &cq);
    act_sink = k;
    /* the checkpoint's inputs, noted: q, k and v, or GPT-2's views of its one c_attn output */
    if (k && qkv_one_output(m)) T(1, 3 * X * qd);   /* the checkpoint's inputs are views at any batch */
    else if (k) {
        T(1, qk * qd);
        T(1, qk * kvd);
        T(1, X * kvd);
    }
    return qk * (qd + kvd) + X * kvd - cl - s * cq;
}

/* Bytes of block i's saved tensors under --act-ckpt op, without the causal mask. */
static double op_block_bytes(const ModelSpec *m, int i, const TrainSpec *t, const ActInputs *in) {
    double bs = (double)in->b * (double)in->s;
    return bs * (T(1, plan_precision(t->precision)->param_bytes * (double)m->d_model) +
                 op_saved_per_token(m, &m->layers[i], t, in->dropout, (double)in->s));
}

/* The causal mask a checkpointed block keeps (ckpt_causal_mask_bytes), noted as one tensor. */
static double ckpt_mask_noted(const ModelSpec *m, int i, const TrainSpec *t, const ActInputs *in) {
    double bytes = ckpt_causal_mask_bytes(m, i, t, in), bss = (double)in->b * (double)in->s * (double)in->s;
    if (bytes > 0 && bss > 0) Q(1, bytes / bss);
    return bytes;
}

double plan_act_ckpt_bytes(const ModelSpec *m, int i, const TrainSpec *t, const ActInputs *in) {
    if (plan_act_core_recomputed(m, t, i)) {
        core_unnoted = 1;
        double all = plan_act_layer_bytes(m, i, t, in);
        core_unnoted = 0;
        return all + (double)in->b * (double)in->s * selective_delta(m, t, in->dropout, (double)in->s) +
               ckpt_mask_noted(m, i, t, in);
    }
    if (!plan_act_checkpointed(m, t, i)) return plan_act_layer_bytes(m, i, t, in);
    if (t->act_ckpt == CKPT_OP) return op_block_bytes(m, i, t, in) + ckpt_mask_noted(m, i, t, in);
    /* checkpoint(block) keeps only the block input (the residual stream), and the first
       checkpointed block the causal mask all of them were handed */
    double R = plan_precision(t->precision)->param_bytes;
    T(sp_share(t), R * (double)m->d_model);   /* noted: the input, the sequence shard under SP */
    return (double)in->b * (double)in->s * R * (double)m->d_model *
               sp_share(t) +   /* SP: the block input is the sequence shard */
           ckpt_mask_noted(m, i, t, in);
}

int plan_act_ckpt_ops(const ModelSpec *m, int i, const TrainSpec *t, const ActInputs *in, double *out, int *kind,
                      int max) {
    ActSink sink = {.mult = 1};
    ActSink *old = act_sink;
    act_sink = &sink;
    plan_act_ckpt_bytes(m, i, t, in);
    act_sink = old;
    double b = (double)in->b, s = (double)in->s;
    int n = 0;
    for (int k = 0; k < sink.n && n < max; k++) {
        const ActNote *x = &sink.v[k];
        int temp = x->quad == TEMP_MAKE ? PLAN_ACT_TEMP_MAKE : x->quad == TEMP_FREE ? PLAN_ACT_TEMP_FREE : PLAN_ACT_SAVED;
        if (temp != PLAN_ACT_SAVED && !kind) continue;
        double one = x->quad == WHOLE ? x->each : b * s * x->each * (x->quad == QUAD_S1 ? s + 1 : x->quad == QUAD_S || x->quad == QUAD_S1 ? s : 1);
        if (x->n != floor(x->n) && temp == PLAN_ACT_SAVED) {   /* a share of a tensor (sequence parallel): one of its size */
            if (kind) kind[n] = temp;
            out[n++] = one * x->n;
            continue;
        }
        for (double j = 0; j < x->n && n < max; j++) {
            if (kind) kind[n] = temp;
            out[n++] = one;
        }
    }
    return n;
}

int plan_act_ckpt_tensors(const ModelSpec *m, int i, const TrainSpec *t, const ActInputs *in, double *out, int max) {
    return plan_act_ckpt_ops(m, i, t, in, out, NULL, max);
}

double plan_act_fwd_temp_peak(const ModelSpec *m, int i, const TrainSpec *t, const ActInputs *in) {
    double v[PLAN_ACT_MAX_TENSORS], live = 0, saved = 0, peak = 0, fifo[PLAN_ACT_MAX_TENSORS];
    int kind[PLAN_ACT_MAX_TENSORS], head = 0, tail = 0;
    int n = plan_act_ckpt_ops(m, i, t, in, v, kind, PLAN_ACT_MAX_TENSORS);
    for (int k = 0; k < n; k++) {
        if (kind[k] == PLAN_ACT_TEMP_MAKE) live += fifo[tail++] = v[k];
        else if (kind[k] == PLAN_ACT_TEMP_FREE && head < tail) live -= fifo[head++];
        else if (kind[k] == PLAN_ACT_SAVED) saved += v[k];
        peak = fmax(peak, saved + live);
    }
    return fmax(0, peak - saved);   /* above all the layer's saved tensors */
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
    return (t->loop_trainer ? plan_act_logits_bytes(m, t, in) : 0) + plan_act_loss_upcast(m, t, in);
}

double plan_act_logits_bytes(const ModelSpec *m, const TrainSpec *t, const ActInputs *in) {
    if (m->arch == ARCH_GENERIC || m->arch == ARCH_CNN || m->headless || t->impl == IMPL_ENGINE) return 0;
    return (double)in->b * (double)in->s * (double)m->vocab * plan_precision(t->precision)->act_bytes;
}

double plan_act_loss_upcast(const ModelSpec *m, const TrainSpec *t, const ActInputs *in) {
    if (m->arch == ARCH_GENERIC || m->arch == ARCH_CNN || m->headless || t->impl == IMPL_ENGINE) return 0;
    double X = plan_precision(t->precision)->act_bytes;
    return X < 4 ? (double)in->b * (double)in->s * (double)m->vocab * 4 : 0;
}

/* The common loop (`outputs = model(**batch); loss = outputs.loss`) keeps `outputs`, and with
   it the logits (b·s·V·X), from one forward until the next forward returns: through backward,
   the step and the next forward. HF Trainer's loop drops them after the forward. */
double plan_act_loop_held(const ModelSpec *m, const TrainSpec *t, const ActInputs *in) {
    return t->loop_trainer ? 0 : plan_act_logits_bytes(m, t, in);
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
    double M = resid_dropout_bytes(m, t, dropout, X);
    double mlp_in = plan_act_llama_style(m) && p->autocast && m->mlp == MLP_SWIGLU ? 2 : 1;
    double freed = X * qd + 2 * M * h + norm_saves(m, R, h, 1) + plan_act_mlp_bytes(m, t, plan_act_mlp_width(m, l), mlp_in);
    return recomputed + 2 * a * s * X + X * qd + R * h - freed;
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
    block_coeffs(m, l, t, in->dropout, 0, s, (double)in->b, &lin, &quad);
    double all = lin + s * quad + plan_act_moe_delta(m, l, t) + eager_batch1_view_bytes(m, t, in);
    int pre = m->block.norm_place != NORM_PLACE_POST, post = m->block.norm_place != NORM_PLACE_PRE;
    double in_norm = pre ? norm_saves(m, R, h, 1) * sp_share(t) : 0;
    double qk_norms = block_norm_bytes(m, X, R, 0, sp_share(t)) - 2 * in_norm - (post ? 2 * norm_saves(m, X, h, 1) : 0);
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
/* The MLP's f-wide gradients alive at once in its backward: fc2's input gradient and the
   activation's two products; a frozen output projection saved no input (plan_dim_ft.c), so its
   backward's f-wide input gradient replaces nothing: one more (unless an adapter reads that
   input undropped, which keeps it saved). */
int plan_act_mlp_bwd_grads(const ModelSpec *m, int i, const TrainSpec *t) {
    const LayerSpec *l = &m->layers[i];
    int out_frozen = 0, out_saved = 0;
    for (int k = 0; k < l->n_frozen; k++)
        if (plan_module_group(l->frozen_mod[k]) == 4) {
            out_frozen = 1;
            out_saved |= plan_lora_adapts(m, &t->ft, l->frozen_mod[k]) && t->ft.dropout <= 0;
        }
    return out_frozen && !out_saved ? 3 : 2;
}

static double block_backward_ws(const ModelSpec *m, int i, const TrainSpec *t, const ActInputs *in, BlockBwdPart *part) {
    const LayerSpec *l = &m->layers[i];
    const PrecisionSpec *p = plan_precision(t->precision);
    double X = p->act_bytes, h = (double)m->d_model, f = plan_act_mlp_width(m, l);
    double M = resid_dropout_bytes(m, t, in->dropout, X);
    double ws = plan_act_mlp_bwd_grads(m, i, t) * f * X - M * h;
    *part = BWD_MLP;
    if (m->block.norm_place != NORM_PLACE_PRE) {
        /* a norm on the MLP's output (Gemma 2/3's post_feedforward_layernorm, OLMo 2's) runs its
           backward first: its saved tensors are freed by the MLP's; its own backward, (x * w) in
           fp32, holds five fp32 h-wide tensors less its normalised one and rsqrt (measured
           16h − 4 B/token above the block's start, fp32 and autocast, h 128 and 256) */
        ws -= norm_saves(m, X, h, 1);
        if (m->block.norm_fp32 && 16 * h - 4 > ws) { ws = 16 * h - 4; *part = BWD_POST_NORM; }
    }
    /* (not latent attention's: mla_attention_bytes saves other tensors; its blocks keep the MLP's) */
    if (t->attn == ATTN_EAGER && m->arch == ARCH_DECODER && m->mla.kv_rank <= 0) {
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
    /* a MoE block: its routed experts' backward (moe_backward); a dense one: block_backward_ws */
    double ws = plan_moe_block(m, l) ? bs * R * h + plan_moe_backward(m, l, t, in, NULL, NULL)
                                : bs * (block_backward_ws(m, i, t, in, &part) + R * h);
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

/* The parameters whose backward is done at the moment (their weights' casts released); grads:
   whose gradients exist, which at the MLP moment holds the output projection's bias too where
   it has one: addmm's backward makes the bias's gradient (`grad.sum(0)`) beside the weight's,
   before the activation's backward runs, while the bias's cast is no saved tensor of that node
   (derivatives.yaml addmm; measured, GPT-2's c_proj: a 512 B sum after the 262,144 B mm at
   AddmmBackward0, gpt2-mini harness --alloc-ops, 2026-12-07). */
static double bwd_done_elems(const ModelSpec *m, int i, const TrainSpec *t, const ActInputs *in, int grads) {
    const LayerSpec *l = &m->layers[i];
    BlockBwdPart part = BWD_MLP;
    if (plan_moe_block(m, l)) return plan_act_block_mlp_out_elems(m, i, t, in);   /* moe_backward's moment */
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
    double bias = grads && (m->addmm_proj & PLAN_PROJ_MLP) ? h : 0;
    return plan_act_block_mlp_out_elems(m, i, t, in) + bias;
}

double plan_act_block_bwd_done_elems(const ModelSpec *m, int i, const TrainSpec *t, const ActInputs *in) {
    return bwd_done_elems(m, i, t, in, 1);
}

/* Elements of a block's MLP output projection (fc2 / c_proj / down_proj), whose gradients
   exist during the MLP's backward; the block's others come after it. A MoE block: moe_backward. */
double plan_act_block_mlp_out_elems(const ModelSpec *m, int i, const TrainSpec *t, const ActInputs *in) {
    const LayerSpec *l = &m->layers[i];
    double g = (double)m->d_ff * (double)m->d_model;
    if (plan_moe_block(m, l)) plan_moe_backward(m, l, t, in, &g, NULL);
    return g;
}

double plan_act_block_bwd_cast_elems(const ModelSpec *m, int i, const TrainSpec *t, const ActInputs *in) {
    const LayerSpec *l = &m->layers[i];
    if (!plan_moe_block(m, l)) return bwd_done_elems(m, i, t, in, 0);
    double c = 0;
    plan_moe_backward(m, l, t, in, NULL, &c);
    return c;
}
