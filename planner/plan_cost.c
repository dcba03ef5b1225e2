/* plan_cost.c — the per-layer cost model the compute rule prices (plan_rules.c rule_compute):
 * forward FLOPs, the bytes of each layer's elementwise passes, and their seconds on a cluster:
 * the flat model (FLOPs at --mfu x peak) or per operation (GEMMs at a shape-dependent share of
 * the GPU's measured GEMM rate, attention by its kernel, elementwise passes at HBM bandwidth).
 * docs/formulas.md "Time". */
#include "plan_cost.h"

#include "plan_activ.h"
#include "plan_dim_moe.h"
#include "plan_shares.h"

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

/* The head's logits GEMM weight elements (V x h; 0 headless) and its other parameters (an
   untied head's matrix is the logits GEMM's weight, counted once). */
static double head_cols(const ModelSpec *m) { return (double)(m->head_cols > 0 ? m->head_cols : m->vocab); }
static double logits_elems(const ModelSpec *m) {
    return m->headless ? 0 : (double)m->d_model * head_cols(m);
}
static double head_other_params(const ModelSpec *m, const LayerSpec *l) {
    double o = (double)l->params - (m->tied_embeddings ? 0 : logits_elems(m));
    return o > 0 ? o : 0;
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
    double attn = (double)m->n_head * (double)m->d_head;
    switch (l->kind) {
    /* 2 FLOPs per weight per token, + QK^T and AV: 2 x 2 x keys x d per token (PyTorch: every
       key, the mask applied after; the engine: the keys its causal blocks compute) */
    /* a MoE block: the parameters a token uses (top_k of the routed experts, plan_layer_active_params);
       Llama 4 in transformers runs every expert on every token (docs/formulas.md "Mixture of experts") */
    case LAYER_BLOCK: {
        double used = m->moe.router == MOE_ROUTER_ALL_EXPERTS ? (double)l->params : plan_layer_active_params(m, l);
        return b * s * (2.0 * used + 4.0 * plan_attn_keys_per_query(t, s) * attn);
    }
    case LAYER_HEAD: return b * s * 2.0 * (logits_elems(m) + head_other_params(m, l));
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

/* ---- seconds: the flat model and the per-operation model (docs/formulas.md "Time") ---- */

static double peak_of(const ClusterSpec *c, const PrecisionSpec *p) {
    double r = c->gpu.peak_tflops[p->peak] * 1e12;
    return r > 0 ? r : c->gpu.peak_tflops[PEAK_FP32] * 1e12;
}

static double hbm_of(const ClusterSpec *c) {
    return c->gpu.mem_bw > 0 ? c->gpu.mem_bw * 1e9 : INFINITY;
}

/* The fitted shares (plan_shares.h, fitted on the published runs by `make fit-time`): the plan's
   --time-shares where given, else the shipped ones (GEMM per generation, GpuEff; attention per
   flash kernel, plan_attn_share). */
static double share_gemm(const ClusterSpec *c) { return c->shares.gemm > 0 ? c->shares.gemm : c->gpu.eff->gemm_train; }
static double share_attn(const ClusterSpec *c, const TrainSpec *t) {
    return c->shares.attn > 0 ? c->shares.attn : plan_attn_share(t->attn_kernel);
}
static double share_passes(const ClusterSpec *c) { return c->shares.passes > 0 ? c->shares.passes : PLAN_SHARE_PASSES; }

/* The fraction of the dense peak a large GEMM sustains in training: the generation's measured
   best (MAMF) x the share of it training runs sustain (docs/gpus.md "Achieved rates"). */
static double gemm_frac(const ClusterSpec *c) {
    return c->gpu.eff ? c->gpu.eff->gemm_eff * share_gemm(c) : 1;
}

/* The share of the GPU's SMs a GEMM's output tiles keep busy: cuBLAS covers the M x N output
   (batch times) with tiles, one tile per SM per wave; a partial tile or a last wave that fills
   only some SMs leaves the rest idle (NVIDIA, "Matrix Multiplication Background User's Guide":
   tile and wave quantization). The best of the large tiles cuBLAS chooses among. */
static double wave_util(double M, double N, double batch, int sms) {
    static const double TILE[][2] = {{256, 128}, {128, 256}, {128, 128}};
    if (sms <= 0) return 1;
    double best = 0;
    for (size_t k = 0; k < sizeof TILE / sizeof TILE[0]; k++) {
        double tiles = ceil(M / TILE[k][0]) * ceil(N / TILE[k][1]) * batch;
        double waves = ceil(tiles / sms);
        double u = M * N * batch / (waves * sms * TILE[k][0] * TILE[k][1]);
        if (u > best) best = u;
    }
    return best;
}

double plan_gemm_seconds(const ClusterSpec *c, double peak, double M, double N, double K, double batch,
                         double elem_bytes) {
    if (M <= 0 || N <= 0 || K <= 0 || batch <= 0) return 0;
    double compute = 2 * M * N * K * batch / (peak * gemm_frac(c) * wave_util(M, N, batch, c->gpu.sms));
    double traffic = (M * K + K * N + M * N) * batch * elem_bytes / hbm_of(c);   /* roofline */
    return compute > traffic ? compute : traffic;
}

/* A GEMM's forward and its backward (the input gradient M x K from N, the weight gradient
   K x N over M). */
static void gemm_fb(const ClusterSpec *c, double peak, double M, double N, double K, double batch, double e,
                    double *f, double *b) {
    *f += plan_gemm_seconds(c, peak, M, N, K, batch, e);
    *b += plan_gemm_seconds(c, peak, M, K, N, batch, e) + plan_gemm_seconds(c, peak, K, N, M, batch, e);
}

/* The generation's flash-attention fraction of the peak at sequence s: the published points at
   512 ... 16k, interpolated in log2(s), held beyond them. */
static double attn_eff(const double pts[PLAN_ATTN_POINTS], double s) {
    double x = log2(s > 1 ? s : 1) - 9;   /* 0 at 512 */
    if (x <= 0) return pts[0];
    if (x >= PLAN_ATTN_POINTS - 1) return pts[PLAN_ATTN_POINTS - 1];
    int i = (int)x;
    return pts[i] + (pts[i + 1] - pts[i]) * (x - i);
}

/* The attention core (scores and values) of one block for b sequences of s tokens. SDPA's flash
   kernel: forward 4·b·s·s'·d_attn FLOPs (s' = s/2 causal: it skips masked tiles), backward 2.5x
   (FlashAttention-2's benchmark counts), each at the fraction the kernel (--attn-kernel: its
   curve on the generation, plan_attn_curve; FlashAttention-2's where the planner's caller gave a
   kernel the generation has no curve for, which the CLI refuses) reaches there. Eager (and
   the engine): batched GEMMs over b x heads, QK^T and AV forward, four in backward (dP, dV, dQ,
   dK); its softmax is an elementwise pass (plan_layer_mem_bytes). */
static void attn_core(const ModelSpec *m, const TrainSpec *t, const ClusterSpec *c, double peak, double e,
                      double *f, double *b) {
    double s = seq_of(m, t), bh = (double)t->micro_batch * (double)m->n_head, dh = (double)m->d_head;
    const double *fwd, *bwd;
    if (t->attn == ATTN_SDPA && t->impl != IMPL_ENGINE && c->gpu.eff &&
        (plan_attn_curve(c->gpu.eff, t->attn_kernel, &fwd, &bwd) >= 0 ||
         plan_attn_curve(c->gpu.eff, ATTN_KERNEL_FA2, &fwd, &bwd) >= 0)) {
        double keys = m->arch == ARCH_DECODER ? s / 2 : s;
        double fl = 4 * bh * s * keys * dh;
        double train = share_attn(c, t);
        *f += fl / (peak * attn_eff(fwd, s) * train);
        *b += 2.5 * fl / (peak * attn_eff(bwd, s) * train);
        return;
    }
    double keys = plan_attn_keys_per_query(t, s);
    *f += plan_gemm_seconds(c, peak, s, keys, dh, bh, e) + plan_gemm_seconds(c, peak, s, dh, keys, bh, e);
    *b += plan_gemm_seconds(c, peak, s, keys, dh, bh, e) + plan_gemm_seconds(c, peak, keys, dh, s, bh, e) +
          plan_gemm_seconds(c, peak, s, dh, keys, bh, e) + plan_gemm_seconds(c, peak, keys, dh, s, bh, e);
}

/* A transformer block's GEMMs for T tokens: QKV, the output projection, the MLP (SwiGLU: gate
   and up), down; a MoE block's MLP as the dense GEMMs of its active width. FLOPs the list does
   not hold (cross-attention, biases' share of the count) run at an (T, h, h) GEMM's rate. */
static void block_gemms(const ModelSpec *m, const LayerSpec *l, double T, const ClusterSpec *c, double peak,
                        double e, double *f, double *b) {
    double h = (double)m->d_model, dh = (double)m->d_head;
    double q = (double)m->n_head * dh, kv = (double)(m->n_kv_head > 0 ? m->n_kv_head : m->n_head) * dh;
    double attn_w = h * (q + 2 * kv) + q * h;
    int gated = m->mlp == MLP_SWIGLU;
    double fw = l->expert_params > 0 ? (plan_layer_active_params(m, l) - attn_w) / ((gated ? 3 : 2) * h)
                                     : plan_act_mlp_width(m, l);
    if (fw < 0) fw = 0;
    gemm_fb(c, peak, T, q + 2 * kv, h, 1, e, f, b);
    gemm_fb(c, peak, T, h, q, 1, e, f, b);
    for (int k = 0; k < (gated ? 2 : 1); k++) gemm_fb(c, peak, T, fw, h, 1, e, f, b);
    gemm_fb(c, peak, T, h, fw, 1, e, f, b);
    double rest = plan_layer_active_params(m, l) - attn_w - (gated ? 3 : 2) * h * fw - 4 * h;
    if (rest > h * h / 8) gemm_fb(c, peak, T, h, rest / h, 1, e, f, b);
}

/* Layer i's forward and backward seconds, per operation, for t's micro-batch (no recompute). */
static void layer_ops(const ModelSpec *m, int i, const TrainSpec *t, const ClusterSpec *c, double *f, double *b) {
    const LayerSpec *l = &m->layers[i];
    const PrecisionSpec *p = plan_precision(t->precision);
    double peak = peak_of(c, p), e = t->impl == IMPL_ENGINE ? 4 : p->act_bytes;
    double T = (double)t->micro_batch * seq_of(m, t), fb, bb;
    double gemm_rate = peak * gemm_frac(c);
    *f = *b = 0;
    if (is_transformer(m) && l->kind == LAYER_BLOCK) {
        block_gemms(m, l, T, c, peak, e, f, b);
        attn_core(m, t, c, peak, e, f, b);
    } else if (is_transformer(m) && l->kind == LAYER_HEAD) {
        if (!m->headless) gemm_fb(c, peak, T, head_cols(m), (double)m->d_model, 1, e, f, b);
        double o = 2 * T * head_other_params(m, l) / gemm_rate;
        *f += o; *b += 2 * o;
    } else {   /* CNN layers, generic linears, lookups: their FLOPs at the GEMM rate */
        double fl = plan_layer_fwd_flops(m, i, t);
        *f += fl / gemm_rate; *b += 2 * fl / gemm_rate;
    }
    plan_layer_mem_bytes(m, i, t, &fb, &bb);
    *f += share_passes(c) * fb / hbm_of(c);
    *b += share_passes(c) * bb / hbm_of(c);
}

/* What a block recomputes in backward under a partial policy, beyond what full recompute
   would: *saved_s the forward seconds (per-op model) and *saved_fl the FLOPs (flat model) it
   does not run again. op (torchtitan's policy, plan_act_proj_saved): the saved projections'
   GEMMs and a saved core attention; everything elementwise is recomputed. selective
   (Megatron): all but the core attention (its two GEMMs or kernel and the softmax's pass over
   the scores) is kept. */
static void recompute_saved(const ModelSpec *m, int i, const TrainSpec *t, const ClusterSpec *c, double fwd_s,
                            double *saved_s, double *saved_fl, double *saved_bytes) {
    const LayerSpec *l = &m->layers[i];
    const PrecisionSpec *p = plan_precision(t->precision);
    double peak = peak_of(c, p), e = p->act_bytes;
    double T = (double)t->micro_batch * seq_of(m, t), s = seq_of(m, t);
    double qd = (double)m->n_head * (double)m->d_head;
    double core_fl = T * 4.0 * plan_attn_keys_per_query(t, s) * qd, core_f = 0, core_b = 0, fb, bb;
    double scores = t->attn == ATTN_SDPA ? 0 : 2.0 * (double)m->n_head * s * T * e;   /* softmax r+w */
    attn_core(m, t, c, peak, e, &core_f, &core_b);
    plan_layer_mem_bytes(m, i, t, &fb, &bb);
    *saved_s = *saved_fl = *saved_bytes = 0;
    if (t->act_ckpt == CKPT_OP) {
        PlanProj pr[PLAN_MAX_PROJ];
        int n = plan_act_block_projs(m, l, pr);
        for (int k = 0; k < n; k++) {
            if (!plan_act_proj_saved(m, l, k)) continue;
            double gb = 0;
            gemm_fb(c, peak, T, pr[k].out, pr[k].in, 1, e, saved_s, &gb);
            *saved_fl += 2 * T * pr[k].in * pr[k].out;
        }
        if (plan_act_op_core_saved(t, t->dropout >= 0 ? t->dropout : m->dropout)) {
            *saved_s += core_f;
            *saved_fl += core_fl;
        }
    } else if (t->act_ckpt == CKPT_SELECTIVE) {
        double core_pass = share_passes(c) * scores / hbm_of(c);
        *saved_s = fwd_s - core_f - core_pass;
        *saved_fl = plan_layer_fwd_flops(m, i, t) - core_fl;
        *saved_bytes = fb - scores;
    }
    if (*saved_s < 0) *saved_s = 0;
    if (*saved_fl < 0) *saved_fl = 0;
    if (*saved_bytes < 0) *saved_bytes = 0;
}

void plan_layer_seconds(const ModelSpec *m, int i, const TrainSpec *t, const ClusterSpec *c, double *fwd,
                        double *bwd) {
    int rc = plan_act_checkpointed(m, t, i) || plan_act_core_recomputed(m, t, i);
    int part = rc && (t->act_ckpt == CKPT_OP || t->act_ckpt == CKPT_SELECTIVE) && is_transformer(m);
    if (part) {   /* the partial policies: full recompute's, less what they keep */
        double f0, b0, saved_s, saved_fl, saved_bytes;
        TrainSpec full = *t;
        full.act_ckpt = CKPT_FULL;
        full.ckpt_every = 1;
        plan_layer_seconds(m, i, &full, c, &f0, &b0);
        double f_none, b_none;
        full.act_ckpt = CKPT_NONE;
        plan_layer_seconds(m, i, &full, c, &f_none, &b_none);
        recompute_saved(m, i, t, c, f_none, &saved_s, &saved_fl, &saved_bytes);
        *fwd = f0;
        if (plan_time_flat(c)) {
            const PrecisionSpec *p = plan_precision(t->precision);
            saved_s = saved_fl / (peak_of(c, p) * c->mfu) + saved_bytes / hbm_of(c);
        }
        double rec = (b0 - b_none) - saved_s;   /* full recompute's extra seconds, less the kept */
        *bwd = b_none + (rec > 0 ? rec : 0);
        return;
    }
    if (plan_time_flat(c)) {   /* FLOPs at --mfu x the peak, elementwise bytes at the memory bandwidth */
        const PrecisionSpec *p = plan_precision(t->precision);
        double rate = peak_of(c, p) * c->mfu, fl = plan_layer_fwd_flops(m, i, t), fb, bb;
        plan_layer_mem_bytes(m, i, t, &fb, &bb);
        *fwd = fl / rate + fb / hbm_of(c);
        *bwd = (2 + rc) * fl / rate + (bb + (rc ? fb : 0)) / hbm_of(c);
        return;
    }
    layer_ops(m, i, t, c, fwd, bwd);
    if (rc) *bwd += *fwd;   /* a checkpointed layer runs its forward again in backward */
}
