/* plan_cost.c — the per-layer cost model the compute rule prices (plan_rules.c rule_compute):
 * forward FLOPs and the bytes of each layer's elementwise passes, per micro-batch.
 * docs/formulas.md "Time". */
#include "plan_cost.h"

#include "plan_activ.h"

#include <math.h>

static int is_transformer(const ModelSpec *m) {
    return m->arch == ARCH_DECODER || m->arch == ARCH_ENCODER || m->arch == ARCH_ENC_DEC;
}

double plan_attn_keys_per_query(const TrainSpec *t, double s) {
    if (t->impl != IMPL_ENGINE || s <= 0) return s;
    double sum = 0;   /* query rows [r0, r1) see keys 0 .. r1-1 */
    for (double r0 = 0; r0 < s; r0 += PLAN_ENGINE_ATT_BLOCK) {
        double r1 = fmin(r0 + PLAN_ENGINE_ATT_BLOCK, s);
        sum += (r1 - r0) * r1;
    }
    return sum / s;
}

static double seq_of(const ModelSpec *m, const TrainSpec *t) {
    return (double)(t->seq > 0 ? t->seq : (m->max_seq > 0 ? m->max_seq : 1));
}

double plan_layer_fwd_flops(const ModelSpec *m, int i, const TrainSpec *t) {
    const LayerSpec *l = &m->layers[i];
    double b = (double)t->micro_batch;
    double s = seq_of(m, t);
    if (l->fwd_flops > 0) return l->fwd_flops * b * plan_cnn_area_scale(m, t->seq);   /* CNN, per sample */
    if (!is_transformer(m)) return 2.0 * (double)l->params * b * s;
    double h = (double)m->d_model, attn = (double)m->n_head * (double)m->d_head;
    switch (l->kind) {
    /* 2 FLOPs per weight per token, + QK^T and AV: 2 x 2 x keys x d per token (PyTorch: every
       key, the mask applied after; the engine: the keys its causal blocks compute) */
    /* a MoE block: the parameters a token uses (top_k of the routed experts, plan_layer_active_params) */
    case LAYER_BLOCK: return b * s * (2.0 * plan_layer_active_params(m, l) + 4.0 * plan_attn_keys_per_query(t, s) * attn);
    case LAYER_HEAD: return b * s * 2.0 * h * (double)m->vocab + 2.0 * (double)l->params * b * s;
    case LAYER_LINEAR: return 2.0 * (double)l->params * b;
    default: return 0;                                         /* lookups, norms: memory-bound */
    }
}

/* A block's norms: 2 on the residual stream, or 4 with Gemma 2/3's post-norms (OLMo 2: 2, both
   on the sublayers' outputs). */
static double block_norms(const ModelSpec *m) {
    return m->block.norm_place == NORM_PLACE_SANDWICH ? 4 : 2;
}

/* Elements the q and k norms normalise per token (Qwen3, Gemma 3, OLMo 2: all of q and of k). */
static double qk_norm_elems(const ModelSpec *m) {
    if (m->block.qk_norm == 0) return 0;
    return (double)(m->n_head + (m->n_kv_head > 0 ? m->n_kv_head : m->n_head)) * (double)m->d_head;
}

/* Elements of a transformer block's weight matrices and norms; the rest of its parameters are
   the linear layers' biases, one element per output feature of a biased linear. */
static double block_bias_elems(const ModelSpec *m, const LayerSpec *l) {
    if (l->expert_params > 0) return 0;   /* MoE blocks: not counted (< 0.1 % of their passes) */
    double h = (double)m->d_model, dh = (double)m->d_head, f = (double)m->d_ff;
    double q = (double)m->n_head * dh, kv = (double)(m->n_kv_head > 0 ? m->n_kv_head : m->n_head) * dh;
    double mats = h * (q + 2 * kv) + q * h + (m->mlp == MLP_SWIGLU ? 3 : 2) * h * f;
    double norms = (m->norm == NORM_RMSNORM ? 1 : 2) * block_norms(m) * h;
    if (m->block.qk_norm == 1) norms += 2 * dh;                  /* a d_head weight each */
    if (m->block.qk_norm == 2) norms += qk_norm_elems(m);
    double rest = (double)l->params - mats - norms;
    return rest > 0 ? rest : 0;
}

void plan_layer_mem_bytes(const ModelSpec *m, int i, const TrainSpec *t, double *fwd, double *bwd) {
    *fwd = *bwd = 0;
    const LayerSpec *l = &m->layers[i];
    if (!is_transformer(m)) return;   /* CNN and generic layers: FLOPs only */
    const PrecisionSpec *p = plan_precision(t->precision);
    int eng = t->impl == IMPL_ENGINE;
    double X = eng ? 4 : p->act_bytes;   /* the engine runs in fp32 */
    double b = (double)t->micro_batch, s = seq_of(m, t), n = b * s;   /* tokens */
    double h = (double)m->d_model, dh = (double)m->d_head, f = plan_act_mlp_width(m, l), V = (double)m->vocab;
    double q = (double)m->n_head * dh, kv = (double)(m->n_kv_head > 0 ? m->n_kv_head : m->n_head) * dh;
    double fe = 0, be = 0;   /* elements per token */
    switch (l->kind) {
    case LAYER_BLOCK: {
        int gated = m->mlp == MLP_SWIGLU;
        double bias = block_bias_elems(m, l);
        double scores = t->attn == ATTN_SDPA ? 0 : b * (double)m->n_head * s * s / n;   /* per token */
        double norms = block_norms(m) * h + qk_norm_elems(m);   /* elements normalised per token */
        /* Gemma 2's soft-capping of the scores: divide, tanh, multiply (read, write each) */
        double cap = m->block.attn_softcap > 0 ? 3 : 0;
        /* forward: the norms (read x, write y), softmax over the scores (read, write), the MLP
           activation (read, write; SwiGLU reads gate and up), two residual adds (read 2, write 1) */
        fe = 2 * norms + (2 + 2 * cap) * scores + (gated ? 3 : 2) * f + 2 * (3 * h);
        /* backward: norms (read dy, x; write dx), softmax (read p, dp; write ds), the soft-cap
           (read dy, y; write dx, for tanh; read, write for the scalings), activation (read x, dy;
           write dx; SwiGLU: read gate, up, dy; write both), the bias gradients (read dy of each
           biased linear) */
        be = 3 * norms + (3 + 7 * cap / 3) * scores + (gated ? 5 : 3) * f + bias;
        if (eng)   /* the engine's own passes: bias rows copied into each biased output before its GEMM,
                      gradients accumulated in place (norms, GELU: +1 read), scratch zeroed before
                      accumulation (dfch_gelu, dfch, 3 x dbtc, dqkv) */
            fe += bias, be += 2 * h + f + (2 * f + 3 * h + q + 2 * kv);
        else       /* autograd sums the two branches into the residual stream's gradient */
            be += 2 * (3 * h);
        break;
    }
    case LAYER_NORM: fe = 2 * h; be = 3 * h + (eng ? h : 0); break;
    case LAYER_EMBED:   /* gather token rows (+ positions), write; backward scatter-adds */
        fe = 3 * h; be = 5 * h; break;
    case LAYER_HEAD:
        if (m->headless) break;
        /* softmax + cross-entropy over the vocabulary. PyTorch: read logits, write the
           log-probabilities; backward: read them, write dlogits. The engine's fused LM head
           (kern_lmhead_ce_*_fast): forward reads each chunk of logits its GEMM just wrote for the
           log-sum-exp; backward rewrites the logits as their gradient in place (read, write) */
        fe = eng ? V : 2 * V; be = 2 * V;
        if (m->block.logit_softcap > 0) fe += 6 * V, be += 7 * V;   /* Gemma 2: divide, tanh, multiply */
        break;
    default: break;
    }
    *fwd = fe * n * X;
    *bwd = be * n * X;
}
