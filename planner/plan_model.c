/* plan_model.c — ModelSpec construction: the layer list, totals, and the transformer and
 * generic builders. Parameter counts are computed from shapes (docs/model-formats.md gives
 * each formula and the reference implementation it reproduces). */
#include "plan_model.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void plan_model_init(ModelSpec *m, const char *name, ArchKind arch) {
    memset(m, 0, sizeof(*m));
    snprintf(m->name, sizeof(m->name), "%s", name ? name : "model");
    m->arch = arch;
}

void plan_model_free(ModelSpec *m) {
    free(m->layers);
    m->layers = NULL;
    m->n_layers = m->cap_layers = 0;
}

LayerSpec *plan_model_add_layer(ModelSpec *m, const LayerSpec *l) {
    if (m->n_layers == m->cap_layers) {
        int cap = m->cap_layers ? 2 * m->cap_layers : 64;
        LayerSpec *p = realloc(m->layers, (size_t)cap * sizeof(*p));
        if (!p) return NULL;
        m->layers = p;
        m->cap_layers = cap;
    }
    LayerSpec *dst = &m->layers[m->n_layers++];
    *dst = *l;
    if (dst->largest_tensor == 0) dst->largest_tensor = dst->params;
    if (dst->kind == LAYER_BLOCK && dst->unit <= 0) dst->unit = plan_model_units(m) + 1;   /* the next unit */
    return dst;
}

LayerSpec *plan_model_add(ModelSpec *m, LayerKind kind, const char *name, int64_t params) {
    LayerSpec l;
    memset(&l, 0, sizeof(l));
    l.kind = kind;
    snprintf(l.name, sizeof(l.name), "%s", name);
    l.params = params;
    return plan_model_add_layer(m, &l);
}

int64_t plan_model_params(const ModelSpec *m) {
    int64_t s = 0;
    for (int i = 0; i < m->n_layers; i++) s += m->layers[i].params;
    return s;
}

double plan_layer_active_params(const ModelSpec *m, const LayerSpec *l) {
    /* a frozen weight computes as much, a packed one as its unpacked weight */
    double all = (double)l->params + (double)l->frozen + (double)l->frozen_flops_extra;
    if (l->expert_params <= 0 || m->moe.n_experts <= 0) return all;
    /* under expert parallelism the layer holds E / ep experts and they run on the rows the
       dispatch brings, top_k per token in expectation: as many as without it */
    double ep = m->moe.ep > 1 ? m->moe.ep : 1;
    return all - (double)l->expert_params * (1.0 - ep * m->moe.top_k / m->moe.n_experts);
}

int64_t plan_model_active_params(const ModelSpec *m) {
    double s = 0;
    for (int i = 0; i < m->n_layers; i++) s += plan_layer_active_params(m, &m->layers[i]);
    return (int64_t)(s + 0.5);
}

double plan_model_buffer_bytes(const ModelSpec *m, int *dtypes) {
    int64_t i64 = 0, all = 0;
    for (int i = 0; i < m->n_layers; i++) {
        all += m->layers[i].buffers;
        if (m->layers[i].bn_channels > 0 && m->layers[i].buffers > 0) i64++;   /* num_batches_tracked */
        i64 += m->layers[i].buffers_i64;
    }
    if (dtypes) *dtypes = (all - i64 > 0) + (i64 > 0);
    return (double)(all - i64) * 4 + (double)i64 * 8;
}

double plan_cnn_area_scale(const ModelSpec *m, int64_t seq) {
    if (m->arch != ARCH_CNN || seq <= 1 || m->image_size <= 0) return 1.0;
    double r = (double)seq / (double)m->image_size;
    return r * r;
}

int64_t plan_model_buffers(const ModelSpec *m) {
    int64_t s = 0;
    for (int i = 0; i < m->n_layers; i++) s += m->layers[i].buffers;
    return s;
}

int plan_layer_add_tensor_dim0(LayerSpec *l, int64_t elems, int64_t dim0) {
    if (l->n_tensors < 0 || l->n_tensors >= PLAN_LAYER_MAX_TENSORS) {
        l->n_tensors = -1;
        return -1;
    }
    l->tensor_dim0[l->n_tensors] = dim0 > 0 && elems > 0 && elems % dim0 == 0 ? dim0 : 0;
    l->tensor_elems[l->n_tensors++] = elems;
    return 0;
}

int plan_layer_add_tensor(LayerSpec *l, int64_t elems) { return plan_layer_add_tensor_dim0(l, elems, 0); }

int plan_model_units(const ModelSpec *m) {
    /* units are numbered in layer order: the last layer in a unit has the largest (O(the root
       layers after the last block)) */
    for (int i = m->n_layers - 1; i >= 0; i--)
        if (m->layers[i].unit > 0) return m->layers[i].unit;
    return 0;
}

int64_t plan_layer_frozen_shard_dim0(const LayerSpec *l, int64_t n) {
    int64_t s = 0;
    if (n < 1) return -1;
    for (int k = 0; k < l->n_frozen; k++) {
        int64_t d = l->frozen_dim0[k], e = l->frozen_elems[k];
        if (e == 0) continue;
        if (d <= 0) return -1;
        s += (d + n - 1) / n * (e / d);
    }
    return s;
}

int64_t plan_layer_shard_dim0(const LayerSpec *l, int64_t n) {
    if (l->params == 0) return 0;
    if (l->n_tensors <= 0 || n < 1) return -1;
    /* the planner asks this for every layer of every walk: no division where n is a power of
       two dividing dim 0 (the common case), else ceil(dim0 / n) rows of elems / dim0 */
    int pow2 = (n & (n - 1)) == 0, shift = 0;
    while (pow2 && ((int64_t)1 << shift) < n) shift++;
    int64_t s = 0, sum = 0;
    for (int k = 0; k < l->n_tensors; k++) {
        int64_t d = l->tensor_dim0[k], e = l->tensor_elems[k];
        sum += e;
        if (e == 0) continue;             /* an empty tensor shards to nothing */
        if (d <= 0) return -1;
        if (pow2 && (d & (n - 1)) == 0) s += e >> shift;
        else s += (d + n - 1) / n * (e / d);   /* torch.chunk: every rank's shard as the first's */
    }
    return sum == l->params ? s : -1;
}

int64_t plan_layer_shard_dim0_ep(const LayerSpec *l, int64_t n, int64_t ne, int64_t *experts) {
    if (experts) *experts = 0;
    if (l->params == 0) return 0;
    if (l->n_tensors <= 0 || n < 1 || ne < 1) return -1;
    int64_t s = 0, e = 0, sum = 0;
    for (int k = 0; k < l->n_tensors; k++) {
        int64_t d = l->tensor_dim0[k], el = l->tensor_elems[k];
        int expert = k < 32 && (l->expert_mask >> k & 1u);
        int64_t g = expert ? ne : n;
        sum += el;
        if (el == 0) continue;
        if (d <= 0) return -1;
        int64_t rows = (d + g - 1) / g * (el / d);
        if (expert) e += rows;
        else s += rows;
    }
    if (sum != l->params) return -1;
    if (experts) *experts = e;
    return s + e;
}

/* A layer's tensors are known when they add up to its params. */
static int layer_tensors_known(const LayerSpec *l) {
    if (l->params == 0) return l->n_tensors >= 0;
    if (l->n_tensors <= 0) return 0;
    int64_t s = 0;
    for (int k = 0; k < l->n_tensors; k++) s += l->tensor_elems[k];
    return s == l->params;
}

int plan_model_family_in(const ModelSpec *m, const char *const *names) {
    for (; *names; names++)
        if (strcmp(m->family, *names) == 0) return 1;
    return 0;
}

int plan_model_tensors_known(const ModelSpec *m) {
    if (m->n_layers == 0) return 0;
    for (int i = 0; i < m->n_layers; i++)
        if (!layer_tensors_known(&m->layers[i])) return 0;
    return 1;
}

int plan_model_dim0_known(const ModelSpec *m) {
    if (m->n_layers == 0) return 0;
    for (int i = 0; i < m->n_layers; i++)
        if (plan_layer_shard_dim0(&m->layers[i], 1) < 0) return 0;
    return 1;
}

int64_t plan_model_n_tensors(const ModelSpec *m) {
    if (!plan_model_tensors_known(m)) return -1;
    int64_t n = 0;
    for (int i = 0; i < m->n_layers; i++) n += m->layers[i].n_tensors;
    return n;
}

int plan_model_bn_layers(const ModelSpec *m, int64_t *sum_channels) {
    int n = 0;
    int64_t s = 0;
    for (int i = 0; i < m->n_layers; i++)
        if (m->layers[i].bn_channels > 0) { n++; s += m->layers[i].bn_channels; }
    if (sum_channels) *sum_channels = s;
    return n;
}

int plan_model_acts_known(const ModelSpec *m) {
    if (m->arch == ARCH_DECODER || m->arch == ARCH_ENCODER || m->arch == ARCH_ENC_DEC) return 1;
    if (m->n_layers == 0) return 0;
    for (int i = 0; i < m->n_layers; i++)
        if (!m->layers[i].act_known) return 0;
    return 1;
}

static const char *const ARCH_NAMES[ARCH_KIND_COUNT] = {"generic", "decoder", "encoder",
                                                        "encoder-decoder", "cnn"};
static const char *const LAYER_NAMES[LAYER_KIND_COUNT] = {"embed", "block", "norm", "head",
                                                          "conv", "bn", "linear", "other"};

const char *plan_arch_name(ArchKind a) {
    return (a >= 0 && a < ARCH_KIND_COUNT) ? ARCH_NAMES[a] : "?";
}

const char *plan_layer_kind_name(LayerKind k) {
    return (k >= 0 && k < LAYER_KIND_COUNT) ? LAYER_NAMES[k] : "?";
}

static const struct { const char *name; int group; } MODULES[PLAN_MOD_COUNT] = {
    {"", 0}, {"q_proj", 1}, {"k_proj", 1}, {"v_proj", 1}, {"o_proj", 2}, {"gate_proj", 3},
    {"up_proj", 3}, {"down_proj", 4}, {"c_attn", 1}, {"c_proj", 2}, {"c_proj", 4}, {"c_fc", 3},
    {"lm_head", 5},
};

const char *plan_module_name(int mod) {
    int id = PLAN_MOD_ID(mod);
    return id > 0 && id < PLAN_MOD_COUNT ? MODULES[id].name : "";
}

static const char *const MODULE_KEYS[PLAN_MOD_COUNT] = {
    "", "q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj", "c_attn",
    "attn.c_proj", "mlp.c_proj", "c_fc", "lm_head",
};

const char *plan_module_key(int mod, char *buf, size_t len) {
    int id = PLAN_MOD_ID(mod);
    snprintf(buf, len, "%s%s", id > 0 && id < PLAN_MOD_COUNT ? MODULE_KEYS[id] : "",
             id > 0 && (mod & PLAN_MOD_CONV1D) ? ":conv1d" : "");
    return buf;
}

int plan_module_by_key(const char *key) {
    const char *colon = strchr(key, ':');
    size_t n = colon ? (size_t)(colon - key) : strlen(key);
    int conv = 0;
    if (colon) {
        if (strcmp(colon, ":conv1d") != 0 || n == 0) return -1;
        conv = PLAN_MOD_CONV1D;
    }
    for (int id = 0; id < PLAN_MOD_COUNT; id++)
        if (strlen(MODULE_KEYS[id]) == n && strncmp(MODULE_KEYS[id], key, n) == 0) return id | conv;
    return -1;
}

int plan_module_group(int mod) {
    int id = PLAN_MOD_ID(mod);
    return id > 0 && id < PLAN_MOD_COUNT ? MODULES[id].group : 0;
}

void plan_module_features(int mod, int64_t elems, int64_t dim0, int64_t *in, int64_t *out) {
    int64_t other = dim0 > 0 ? elems / dim0 : 0;
    if (mod & PLAN_MOD_CONV1D) { *in = dim0; *out = other; }   /* Conv1D (in, out) */
    else { *out = dim0; *in = other; }                          /* nn.Linear (out, in) */
}

int64_t plan_model_frozen(const ModelSpec *m) {
    int64_t s = 0;
    for (int i = 0; i < m->n_layers; i++) s += m->layers[i].frozen;
    return s;
}

/* ---- transformer builder ---- */

static int64_t norm_params(const TransformerConfig *c) {
    return c->norm_bias ? 2 * c->d_model : c->d_model;
}

/* Self- or cross-attention: q and o use all heads, k and v the KV heads (GQA). */
static int64_t attn_params(const TransformerConfig *c, int64_t d_head, int kv_heads, int cross,
                           int64_t *largest) {
    int64_t h = c->d_model, q = (int64_t)c->n_head * d_head;
    int64_t kv = cross ? q : (int64_t)kv_heads * d_head;
    int64_t p = h * q + 2 * h * kv + q * h;
    if (c->qkv_bias) p += q + 2 * kv;
    if (c->out_bias) p += h;
    if (h * q > *largest) *largest = h * q;
    return p;
}

static int64_t mlp_params(const TransformerConfig *c, int64_t *largest) {
    int64_t h = c->d_model, f = c->d_ff;
    int gated = c->mlp == MLP_SWIGLU;
    int64_t p = (gated ? 3 : 2) * h * f;
    if (c->mlp_bias) p += (gated ? 2 * f : f) + h;
    if (h * f > *largest) *largest = h * f;
    return p;
}

/* ---- parameter tensors in registration order (TensorLayout) ---- */

/* a tensor of n elements whose dim 0 is rows (1-D tensors: rows = n) */
static void t_add(LayerSpec *l, int64_t n, int64_t rows) { plan_layer_add_tensor_dim0(l, n, rows); }

static void t_norm(LayerSpec *l, const TransformerConfig *c) {
    t_add(l, c->d_model, c->d_model);
    if (c->norm_bias) t_add(l, c->d_model, c->d_model);
}

/* nn.Linear(in, out) stores its weight as (out, in); GPT-2's Conv1D(nf=out, nx=in) as (in, out)
   (transformers pytorch_utils.py: nn.Parameter(torch.empty(nx, nf))) */
static void t_linear(LayerSpec *l, int64_t in, int64_t out, int bias) {
    t_add(l, in * out, out);
    if (bias) t_add(l, out, out);
}

static void t_conv1d(LayerSpec *l, int64_t in, int64_t out, int bias) {
    t_add(l, in * out, in);
    if (bias) t_add(l, out, out);
}

/* the family's projection: Conv1D for GPT-2, nn.Linear for the others */
static void t_proj(LayerSpec *l, const TransformerConfig *c, int64_t in, int64_t out, int bias) {
    if (c->layout == LAYOUT_GPT2) t_conv1d(l, in, out, bias);
    else t_linear(l, in, out, bias);
}

/* The same, naming the module (PlanModule) whose weight it adds, for --lora-targets. */
static void t_named(LayerSpec *l, const TransformerConfig *c, int64_t in, int64_t out, int bias, int mod) {
    int k = l->n_tensors;
    t_proj(l, c, in, out, bias);
    if (l->n_tensors > k && k < PLAN_LAYER_MAX_TENSORS)
        l->tensor_mod[k] = (uint8_t)(mod | (c->layout == LAYOUT_GPT2 ? PLAN_MOD_CONV1D : 0));
}

/* q, k, v, o (fused q|k|v for GPT-2 and NeoX, k, v, q for OPT); T5's relative attention bias
   follows o in the first block of each stack */
static void t_attn(LayerSpec *l, const TransformerConfig *c, int64_t d_head, int kv_heads, int cross,
                   int rel_bias) {
    int64_t h = c->d_model, q = (int64_t)c->n_head * d_head;
    int64_t kv = cross ? q : (int64_t)kv_heads * d_head;
    switch (c->layout) {
    case LAYOUT_GPT2:
        t_named(l, c, h, q + 2 * kv, c->qkv_bias, PLAN_MOD_C_ATTN);
        t_named(l, c, q, h, c->out_bias, PLAN_MOD_C_PROJ_ATTN);
        return;
    case LAYOUT_NEOX:
        t_proj(l, c, h, q + 2 * kv, c->qkv_bias);
        break;
    case LAYOUT_OPT:
        t_linear(l, h, kv, c->qkv_bias);
        t_linear(l, h, kv, c->qkv_bias);
        t_linear(l, h, q, c->qkv_bias);
        break;
    default:
        t_linear(l, h, q, c->qkv_bias);
        t_linear(l, h, kv, c->qkv_bias);
        t_linear(l, h, kv, c->qkv_bias);
        break;
    }
    t_proj(l, c, q, h, c->out_bias);
    /* T5: nn.Embedding(relative_attention_num_buckets, n_heads) */
    if (rel_bias) t_add(l, (int64_t)c->rel_pos_buckets * c->n_head, c->rel_pos_buckets);
}

static void t_mlp(LayerSpec *l, const TransformerConfig *c) {
    int64_t h = c->d_model, f = c->d_ff;
    if (c->layout == LAYOUT_GPT2 && c->mlp != MLP_SWIGLU) {
        t_named(l, c, h, f, c->mlp_bias, PLAN_MOD_C_FC);
        t_named(l, c, f, h, c->mlp_bias, PLAN_MOD_C_PROJ_MLP);
        return;
    }
    if (c->mlp == MLP_SWIGLU) t_proj(l, c, h, f, c->mlp_bias);   /* gate (T5: wi_0) */
    t_proj(l, c, h, f, c->mlp_bias);
    t_proj(l, c, f, h, c->mlp_bias);
}

/* 1 when decoder block i is a mixture-of-experts block (the family's pattern). */
static int moe_block(const TransformerConfig *c, int i) {
    if (c->moe.n_experts <= 0 || i < c->moe_first_dense) return 0;
    if (c->dense_blocks && c->dense_blocks[i]) return 0;
    return c->moe_step <= 1 || (i + 1) % c->moe_step == 0;
}

/* Multi-head latent attention (DeepSeek-V3 modeling_deepseek_v3.py DeepseekV3Attention):
   q_a_proj (+ bias), q_a_layernorm, q_b_proj, or a plain q_proj; kv_a_proj_with_mqa (+ bias),
   kv_a_layernorm, kv_b_proj; o_proj (+ bias). */
static void t_mla(LayerSpec *l, const TransformerConfig *c) {
    const MlaSpec *a = &c->mla;
    int64_t h = c->d_model, A = c->n_head, qk = a->nope_dim + a->rope_dim;
    if (a->q_rank > 0) {
        t_linear(l, h, a->q_rank, c->qkv_bias);
        t_add(l, a->q_rank, a->q_rank);
        t_linear(l, a->q_rank, A * qk, 0);
    } else {
        t_linear(l, h, A * qk, 0);
    }
    t_linear(l, h, a->kv_rank + a->rope_dim, c->qkv_bias);
    t_add(l, a->kv_rank, a->kv_rank);
    t_linear(l, a->kv_rank, A * (a->nope_dim + a->v_dim), 0);
    t_linear(l, A * a->v_dim, h, c->out_bias);
}

/* A LLaMA-layout attention: GPT-OSS's sinks (the module's own parameter, listed before its
   children), q, k, v, o (Phi-3: o_proj, then the fused qkv_proj), then Qwen3 / Gemma 3 /
   OLMo 2 q and k norms. */
static void t_attn_llama(LayerSpec *l, const TransformerConfig *c, int64_t d_head, int kv_heads) {
    int64_t h = c->d_model, q = (int64_t)c->n_head * d_head, kv = (int64_t)kv_heads * d_head;
    if (c->mla.kv_rank > 0) { t_mla(l, c); return; }
    if (c->sinks) t_add(l, c->n_head, c->n_head);
    if (c->fused_qkv) {
        t_linear(l, q, h, c->out_bias);
        t_linear(l, h, q + 2 * kv, c->qkv_bias);
    } else {
        t_named(l, c, h, q, c->qkv_bias, PLAN_MOD_Q);
        t_named(l, c, h, kv, c->qkv_bias, PLAN_MOD_K);
        t_named(l, c, h, kv, c->qkv_bias, PLAN_MOD_V);
        t_named(l, c, q, h, c->out_bias, PLAN_MOD_O);
    }
    if (c->qk_norm == 1) { t_add(l, d_head, d_head); t_add(l, d_head, d_head); }
    if (c->qk_norm == 2) { t_add(l, q, q); t_add(l, kv, kv); }
}

/* An MLP of width f: gated, gate, up, down (Phi-3: gate_up_proj, down); else c_fc, c_proj
   (StarCoder2). */
static void t_gated(LayerSpec *l, const TransformerConfig *c, int64_t f, int fused) {
    int64_t h = c->d_model;
    if (c->mlp != MLP_SWIGLU) t_linear(l, h, f, c->mlp_bias);
    else if (fused) t_linear(l, h, 2 * f, c->mlp_bias);
    else { t_named(l, c, h, f, c->mlp_bias, PLAN_MOD_GATE); t_named(l, c, h, f, c->mlp_bias, PLAN_MOD_UP); }
    if (c->mlp == MLP_SWIGLU && !fused) t_named(l, c, f, h, c->mlp_bias, PLAN_MOD_DOWN);
    else t_linear(l, f, h, c->mlp_bias);
}

/* A MoE block's MLP: the router (h x E, GPT-OSS + bias), the routed experts as two 3-D tensors
   (transformers 5's fused Experts modules: gate|up and down, dim 0 = E; GPT-OSS + biases), the
   shared expert(s) and Qwen2-MoE's shared-expert gate, in the family's order. Returns the
   routed experts' elements. */
static int64_t t_moe(LayerSpec *l, const TransformerConfig *c) {
    int64_t h = c->d_model, E = c->moe.n_experts, f = c->moe.d_ff_expert;
    int n0 = l->n_tensors;
    int bias = c->moe.bias;
    if (c->moe_router_first) t_linear(l, h, E, bias);
    t_add(l, E * 2 * f * h, E);
    if (bias) t_add(l, E * 2 * f, E);
    t_add(l, E * f * h, E);
    if (bias) t_add(l, E * h, E);
    int64_t experts = 0;
    for (int k = n0 + (c->moe_router_first ? 1 + bias : 0); k < l->n_tensors; k++) {
        experts += l->tensor_elems[k];
        if (k < 32) l->expert_mask |= 1u << k;   /* the routed experts' tensors (expert parallelism) */
    }
    if (!c->moe_router_first) t_linear(l, h, E, bias);
    if (c->moe.d_ff_shared > 0) t_gated(l, c, c->moe.d_ff_shared, 0);
    if (c->moe.shared_gate) t_linear(l, h, 1, 0);
    /* DeepSeek's router holds e_score_correction_bias, nn.Buffer of E fp32 (modeling_deepseek_v3.py
       DeepseekV3TopkRouter): no parameter, but a buffer DDP broadcasts every forward (measured) */
    if (c->moe.router == MOE_ROUTER_GROUPED) l->buffers += E;
    return experts;
}

/* A LLaMA-layout block: attention, the MLP (dense or MoE), then its norms (input and
   post-attention; Gemma 2/3 also pre- and post-feedforward; OLMo 2's two are post-norms).
   Its params are the sum of its tensors. */
static void llama_block(LayerSpec *l, const TransformerConfig *c, int i, int64_t d_head, int kv) {
    t_attn_llama(l, c, d_head, kv);
    if (moe_block(c, i)) l->expert_params = t_moe(l, c);
    else t_gated(l, c, c->d_ff, c->fused_gate_up);
    for (int k = 0; k < (c->block_norms > 0 ? c->block_norms : 2); k++) t_norm(l, c);
    l->params = 0;
    for (int k = 0; k < l->n_tensors; k++) l->params += l->tensor_elems[k];
    l->largest_tensor = 0;
    for (int k = 0; k < l->n_tensors; k++)
        if (l->tensor_elems[k] > l->largest_tensor) l->largest_tensor = l->tensor_elems[k];
}

/* One block's tensors; T5's stack-final norm is added by the caller. */
static void t_block(LayerSpec *l, const TransformerConfig *c, int64_t d_head, int kv, int cross,
                    int rel_bias) {
    switch (c->layout) {
    case LAYOUT_GPT2:
        t_norm(l, c); t_attn(l, c, d_head, kv, 0, 0); t_norm(l, c); t_mlp(l, c);
        break;
    case LAYOUT_NEOX:
        t_norm(l, c); t_norm(l, c); t_attn(l, c, d_head, kv, 0, 0); t_mlp(l, c);
        break;
    case LAYOUT_OPT: case LAYOUT_BERT:
        t_attn(l, c, d_head, kv, 0, 0); t_norm(l, c); t_mlp(l, c); t_norm(l, c);
        break;
    case LAYOUT_T5:
        t_attn(l, c, d_head, kv, 0, rel_bias); t_norm(l, c);
        if (cross) { t_attn(l, c, d_head, kv, 1, 0); t_norm(l, c); }
        t_mlp(l, c); t_norm(l, c);
        break;
    default:   /* LLAMA */
        t_attn(l, c, d_head, kv, 0, 0); t_mlp(l, c); t_norm(l, c); t_norm(l, c);
        break;
    }
}

/* The builder's tensors must add up to the layer's params; where a shape combination is not
   covered they are left unknown rather than wrong. */
static void t_check(LayerSpec *l) {
    if (!layer_tensors_known(l)) l->n_tensors = 0;
}

/* The most parameters a model may have (10^15, a thousand times the largest published dense
 * model): above it a config is taken as a mistake, and every sum stays far from int64 overflow
 * (one block is at most ~2^47 elements under the shape limits below). */
#define MAX_MODEL_PARAMS 1000000000000000LL

/* The shape limits a config must keep (each below 2^16..2^24, heads dividing the hidden size and
   KV heads dividing the heads); 0, or -1 with msg naming the values. */
static int check_shape(const TransformerConfig *c, char *msg, size_t msglen) {
    if (c->n_layer <= 0 || c->d_model <= 0 || c->n_head <= 0 || c->vocab <= 0 ||
        c->d_ff <= 0 || c->max_seq <= 0 || c->n_layer > 100000 || c->d_model > (1 << 20) ||
        c->d_ff > (1 << 22) || c->vocab > (1 << 24) || c->max_seq > (1 << 24) ||
        c->n_head > 65536) {
        snprintf(msg, msglen, "invalid transformer shape: layers %d, hidden %lld, heads %d, ffn "
                 "%lld, vocab %lld, context %lld (all must be positive and below 2^20..2^24)",
                 c->n_layer, (long long)c->d_model, c->n_head, (long long)c->d_ff,
                 (long long)c->vocab, (long long)c->max_seq);
        return -1;
    }
    if (c->arch == ARCH_ENC_DEC && (c->n_enc_layer <= 0 || c->n_enc_layer > 100000)) {
        snprintf(msg, msglen, "an encoder-decoder needs 1..100000 encoder layers (got %d)",
                 c->n_enc_layer);
        return -1;
    }
    if (c->d_head < 0 || c->d_head > 65536 || c->n_kv_head < 0 || c->embed_dim < 0 ||
        c->embed_dim > (1 << 20) || c->pos_offset < 0 || c->pos_offset > 65536 ||
        c->type_vocab < 0 || c->type_vocab > 65536 || c->rel_pos_buckets < 0 ||
        c->rel_pos_buckets > 65536 || c->cls_outputs < 0 || c->cls_outputs > (1 << 24)) {
        snprintf(msg, msglen, "invalid transformer shape: head dim %lld, KV heads %d, embedding "
                 "width %lld, position offset %lld, token types %d, relative buckets %d, "
                 "classifier outputs %lld (none may be negative or above 2^16..2^24)",
                 (long long)c->d_head, c->n_kv_head, (long long)c->embed_dim,
                 (long long)c->pos_offset, c->type_vocab, c->rel_pos_buckets,
                 (long long)c->cls_outputs);
        return -1;
    }
    const MoeSpec *e = &c->moe;
    if (e->n_experts < 0 || e->n_experts > 65536 || (e->n_experts > 0 && (e->top_k < 1 || e->top_k > e->n_experts ||
        e->d_ff_expert < 1 || e->d_ff_expert > (1 << 22))) || e->d_ff_shared < 0 || e->d_ff_shared > (1 << 24)) {
        snprintf(msg, msglen, "invalid mixture of experts: %d experts, top-%d, expert width %lld, shared width %lld "
                 "(1..65536 experts, top-k from 1 to the experts, widths up to 2^22)", e->n_experts, e->top_k,
                 (long long)e->d_ff_expert, (long long)e->d_ff_shared);
        return -1;
    }
    const MlaSpec *a = &c->mla;
    if (a->kv_rank < 0 || a->kv_rank > 65536 || a->q_rank < 0 || a->q_rank > 65536 ||
        a->rope_dim < 0 || a->rope_dim > 65536 || a->nope_dim < 0 || a->nope_dim > 65536 ||
        a->v_dim < 0 || a->v_dim > 65536 || (a->kv_rank > 0 && (a->nope_dim + a->rope_dim < 1 || a->v_dim < 1))) {
        snprintf(msg, msglen, "invalid latent attention: q rank %lld, kv rank %lld, rope %lld, nope %lld, v %lld "
                 "(each 0..65536; heads need qk and v dimensions)", (long long)a->q_rank,
                 (long long)a->kv_rank, (long long)a->rope_dim, (long long)a->nope_dim,
                 (long long)a->v_dim);
        return -1;
    }
    int64_t d_head = c->d_head > 0 ? c->d_head : c->d_model / c->n_head;
    int kv = c->n_kv_head > 0 ? c->n_kv_head : c->n_head;
    if (c->d_head <= 0 && c->d_model % c->n_head != 0) {
        snprintf(msg, msglen, "hidden size %lld is not divisible by %d heads",
                 (long long)c->d_model, c->n_head);
        return -1;
    }
    if (c->n_head % kv != 0) {
        snprintf(msg, msglen, "%d attention heads are not a multiple of %d KV heads", c->n_head, kv);
        return -1;
    }
    if ((int64_t)c->n_head * d_head > (1 << 22)) {
        snprintf(msg, msglen, "%d heads of dimension %lld exceed 2^22 attention features",
                 c->n_head, (long long)d_head);
        return -1;
    }
    return 0;
}

/* The embeddings layer: token (+ position, token-type) embeddings, BERT's LayerNorm, OPT's
   project_in; and the module buffers DDP broadcasts. */
static void embed_layer(LayerSpec *l, const TransformerConfig *c, int64_t d_head) {
    int64_t h = c->d_model;
    /* token embedding width: OPT-350m embeds in 512 and projects in/out of its 1024 hidden */
    int64_t e = c->embed_dim > 0 ? c->embed_dim : h;
    memset(l, 0, sizeof(*l));
    l->kind = LAYER_EMBED;
    snprintf(l->name, sizeof(l->name), "embeddings");
    l->params = c->vocab * e;
    l->largest_tensor = c->vocab * e;
    if (e != h) l->params += e * h;                                /* project_in, no bias */
    if (c->learned_pos) l->params += (c->max_seq + c->pos_offset) * h;
    l->params += (int64_t)c->type_vocab * h;
    if (c->arch == ARCH_ENCODER) l->params += norm_params(c);   /* BERT embeddings.LayerNorm */
    /* nn.Embedding (rows, width); OPT's project_in = nn.Linear(e, h, bias=False): (h, e) */
    t_add(l, c->vocab * e, c->vocab);
    if (c->learned_pos) t_add(l, (c->max_seq + c->pos_offset) * h, c->max_seq + c->pos_offset);
    if (c->type_vocab) t_add(l, (int64_t)c->type_vocab * h, c->type_vocab);
    if (c->arch == ARCH_ENCODER) t_norm(l, c);
    if (e != h) t_add(l, e * h, h);
    /* the rotary embedding (one module per model in transformers 5: LlamaRotaryEmbedding,
       GPTNeoXRotaryEmbedding) holds inv_freq and original_inv_freq, nn.Buffer(persistent=False),
       arange(0, dims, 2) fp32 elements each. Not parameters, but module buffers, which DDP
       broadcasts every forward (measured: 128 B per forward for llama-mini, head dim 32;
       docs/formulas.md "DDP buffer broadcast") */
    double rot = c->rotary_frac > 0 ? c->rotary_frac : c->rotary_frac < 0 ? 0.0 : c->layout == LAYOUT_LLAMA ? 1.0
               : c->layout == LAYOUT_NEOX ? 0.25 : 0.0;
    if (rot > 0 && !c->learned_pos) {   /* latent attention rotates qk_rope_head_dim dims */
        int64_t dims = c->mla.kv_rank > 0 ? c->mla.rope_dim : (int64_t)((double)d_head * rot);
        l->buffers += (c->rope_kinds > 1 ? c->rope_kinds : 1) * 2 * ((dims + 1) / 2);
    }
    /* Gemma's scaled token embedding (Gemma*TextScaledWordEmbedding) holds embed_scale =
       sqrt(hidden_size) as a 0-d fp32 nn.Buffer(persistent=False): 4 B more in DDP's broadcast
       (measured: 132 B per forward for gemma2-mini, 260 for gemma3-mini with its two rotary pairs) */
    if (c->embed_scale_buffer) l->buffers += 1;
    /* BERT's embeddings hold position_ids and token_type_ids, nn.Buffer(persistent=False) of
       (1, max_position_embeddings) int64 each (models/bert/modeling_bert.py BertEmbeddings),
       broadcast by DDP every forward (measured: 8,192 B per forward for bert-base) */
    if (c->layout == LAYOUT_BERT) {
        l->buffers += 2 * (c->max_seq + c->pos_offset);
        l->buffers_i64 += 2 * (c->max_seq + c->pos_offset);
    }
    t_check(l);
}

/* Block i of n_enc encoder blocks and the decoder blocks after them (an encoder-decoder), or of
   one stack. */
static void block_layer(LayerSpec *l, const TransformerConfig *c, int i, int n_enc, int64_t d_head, int kv) {
    int is_dec_of_encdec = c->arch == ARCH_ENC_DEC && i >= n_enc;
    int first_of_stack = i == 0 || (c->arch == ARCH_ENC_DEC && i == n_enc);
    int64_t largest = 0;
    memset(l, 0, sizeof(*l));
    l->kind = LAYER_BLOCK;
    if (c->arch == ARCH_ENC_DEC)
        snprintf(l->name, sizeof(l->name), "%s.%d", is_dec_of_encdec ? "decoder" : "encoder",
                 is_dec_of_encdec ? i - n_enc : i);
    else
        snprintf(l->name, sizeof(l->name), "block.%d", i);
    if (c->layout == LAYOUT_LLAMA && c->arch == ARCH_DECODER) {
        llama_block(l, c, i, d_head, kv);
        if (c->sliding_blocks && c->sliding_blocks[i]) l->attn_window = c->window;
        l->no_rope = c->no_rope_blocks && c->no_rope_blocks[i];
        return;
    }
    l->params = attn_params(c, d_head, kv, 0, &largest) + mlp_params(c, &largest) + 2 * norm_params(c);
    if (is_dec_of_encdec) l->params += attn_params(c, d_head, kv, 1, &largest) + norm_params(c);
    if (c->rel_pos_buckets && first_of_stack) l->params += (int64_t)c->rel_pos_buckets * c->n_head;
    l->largest_tensor = largest;
    /* T5: each stack ends with its own final norm, kept in the stack's last block */
    if (c->arch == ARCH_ENC_DEC && c->final_norm && i == n_enc - 1) l->params += norm_params(c);
    t_block(l, c, d_head, kv, is_dec_of_encdec, c->rel_pos_buckets && first_of_stack);
    if (c->arch == ARCH_ENC_DEC && c->final_norm && i == n_enc - 1) t_norm(l, c);
    t_check(l);
}

/* The output head: an untied LM head, OPT's project_out, BERT's MLM transform and decoder bias,
   a classifier. */
static void head_layer(LayerSpec *l, const TransformerConfig *c) {
    int64_t h = c->d_model, e = c->embed_dim > 0 ? c->embed_dim : h;
    memset(l, 0, sizeof(*l));
    l->kind = LAYER_HEAD;
    snprintf(l->name, sizeof(l->name), "lm_head");
    if (!c->tied) l->params += c->vocab * e;
    if (e != h) l->params += h * e;                                /* project_out, no bias */
    if (c->mlm_head) l->params += h * h + h + norm_params(c) + c->vocab;  /* transform + decoder bias */
    l->params += c->cls_outputs * h + c->cls_outputs;              /* NSP / classifier */
    l->largest_tensor = !c->tied ? c->vocab * e : c->mlm_head ? h * h : e != h ? h * e : 0;
    if (c->cls_outputs * h > l->largest_tensor) l->largest_tensor = c->cls_outputs * h;
    /* BERT's prediction head registers its decoder bias before the transform */
    if (c->mlm_head) { t_add(l, c->vocab, c->vocab); t_linear(l, h, h, 1); t_norm(l, c); }
    if (!c->tied) {                                            /* nn.Linear(e, V): (V, e) */
        if (l->n_tensors < PLAN_LAYER_MAX_TENSORS) l->tensor_mod[l->n_tensors] = PLAN_MOD_LM_HEAD;
        t_add(l, c->vocab * e, c->vocab);
    }
    if (e != h) t_add(l, h * e, e);                            /* project_out: (e, h) */
    if (c->cls_outputs) t_linear(l, h, c->cls_outputs, 1);
    t_check(l);
}

/* What the block saves beyond the classic block of its norm (BlockSpec): only what differs from
   what the norm implies is set, so the classic families keep an all-zero BlockSpec. A LayerNorm
   LLaMA-layout block (StarCoder2) has separate q, k, v and the rotary attention of the RMSNorm
   decoders. */
static void block_spec(BlockSpec *b, const TransformerConfig *c) {
    memset(b, 0, sizeof(*b));
    if (c->layout != LAYOUT_LLAMA || c->arch != ARCH_DECODER || c->mla.kv_rank > 0) return;
    b->qk_norm = c->qk_norm == 1 || c->qk_norm == 2 ? c->qk_norm : 0;   /* Llama 4's L2 (3): ModelSpec.qk_norm alone */
    b->norm_place = c->post_norms ? NORM_PLACE_POST : c->block_norms == 4 ? NORM_PLACE_SANDWICH : NORM_PLACE_PRE;
    b->norm_fp32 = c->norm_fp32;
    b->qkv = c->fused_qkv ? QKV_FUSED : c->norm == NORM_LAYERNORM ? QKV_SEPARATE : QKV_CLASSIC;
    b->fused_gate_up = c->fused_gate_up;
    b->rotary = c->norm == NORM_LAYERNORM;
    b->rotary_cat = c->rotary_cat;
    b->resid_dropout = c->resid_dropout;
    b->attn_softcap = c->attn_softcap;
    b->logit_softcap = c->logit_softcap;
}

int plan_model_transformer(ModelSpec *m, const TransformerConfig *c, char *msg, size_t msglen) {
    if (check_shape(c, msg, msglen)) return -1;
    int64_t d_head = c->d_head > 0 ? c->d_head : c->d_model / c->n_head;
    int kv = c->n_kv_head > 0 ? c->n_kv_head : c->n_head;
    plan_model_init(m, c->name, c->arch);
    m->n_layer = c->n_layer;
    m->n_enc_layer = c->arch == ARCH_ENC_DEC ? c->n_enc_layer : 0;
    m->d_model = c->d_model;
    m->n_head = c->n_head;
    m->n_kv_head = kv;
    m->d_head = d_head;
    m->d_ff = c->d_ff;
    m->vocab = c->vocab;
    m->max_seq = c->max_seq;
    m->tied_embeddings = c->tied;
    m->headless = c->headless;
    m->norm = c->norm;
    m->mlp = c->mlp;
    m->fused_qkv = c->layout == LAYOUT_GPT2 || c->layout == LAYOUT_NEOX;
    m->learned_pos = c->learned_pos;
    if (c->layout == LAYOUT_GPT2)   /* Conv1D: torch.addmm(bias, x, weight) */
        m->addmm_proj = PLAN_PROJ_QKV | PLAN_PROJ_OUT | PLAN_PROJ_MLP;
    else
        m->addmm_proj = (c->qkv_bias ? PLAN_PROJ_QKV : 0) | (c->out_bias ? PLAN_PROJ_OUT : 0) |
                        (c->mlp_bias ? PLAN_PROJ_MLP : 0);
    m->moe = c->moe;
    if (c->mla.kv_rank > 0) {   /* latent attention: per-head q/k of nope + rope dims, k and v per head */
        m->mla = c->mla;
        m->d_head = c->mla.nope_dim + c->mla.rope_dim;
        m->n_kv_head = c->n_head;
    }
    block_spec(&m->block, c);
    m->attn_sinks = c->sinks;
    m->qk_norm = c->qk_norm;
    m->nope_every = c->nope_every;
    m->dropout = c->dropout;
    snprintf(m->act_fn, sizeof(m->act_fn), "%s", c->act_fn ? c->act_fn : "");
    snprintf(m->family, sizeof(m->family), "%s", c->family ? c->family : "");
    snprintf(m->source, sizeof(m->source), "zoo");
    int64_t h = c->d_model, total = 0;
    LayerSpec l;
    embed_layer(&l, c, d_head);
    total += l.params;
    if (!plan_model_add_layer(m, &l)) goto oom;
    int n_blocks = c->n_layer + m->n_enc_layer;
    for (int i = 0; i < n_blocks; i++) {
        block_layer(&l, c, i, m->n_enc_layer, d_head, kv);
        total += l.params;
        if (total > MAX_MODEL_PARAMS) goto too_big;
        if (!plan_model_add_layer(m, &l)) goto oom;
    }
    if (c->final_norm) {
        LayerSpec *fn = plan_model_add(m, LAYER_NORM, "final_norm", norm_params(c));
        if (!fn) goto oom;
        t_norm(fn, c);
    }
    if (c->pooler) {
        LayerSpec *pl = plan_model_add(m, LAYER_LINEAR, "pooler", h * h + h);
        if (!pl) goto oom;
        t_linear(pl, h, h, 1);
    }
    /* a base class (GPT2Model, LlamaModel, BertModel, T5Model) ends here: no output head, so
       neither a tied nor an untied head adds parameters (transformers: GPT2Model of gpt2-xl has
       1,557,611,200 parameters whatever tie_word_embeddings says) */
    if (c->headless) return 0;
    head_layer(&l, c);
    total += l.params;
    if (total > MAX_MODEL_PARAMS) goto too_big;
    if (!plan_model_add_layer(m, &l)) goto oom;
    return 0;
too_big:
    snprintf(msg, msglen, "%s would have more than 10^15 parameters (%d blocks of hidden %lld, "
             "ffn %lld): check the shape", c->name, n_blocks, (long long)h, (long long)c->d_ff);
    plan_model_free(m);
    return -1;
oom:
    snprintf(msg, msglen, "out of host memory building %s", c->name);
    plan_model_free(m);
    return -1;
}

int plan_model_generic(ModelSpec *m, const char *name, int64_t params, int n_units, char *msg,
                       size_t msglen) {
    if (params <= 0 || n_units <= 0 || params < n_units) {
        snprintf(msg, msglen, "a generic model needs params >= units > 0 (got %lld params, %d units)",
                 (long long)params, n_units);
        return -1;
    }
    plan_model_init(m, name, ARCH_GENERIC);
    snprintf(m->source, sizeof(m->source), "--params");
    int64_t each = params / n_units, rest = params % n_units;
    for (int i = 0; i < n_units; i++) {
        char nm[32];
        snprintf(nm, sizeof(nm), "unit.%d", i);
        if (!plan_model_add(m, LAYER_OTHER, nm, each + (i < rest ? 1 : 0))) {
            snprintf(msg, msglen, "out of host memory building %s", name);
            plan_model_free(m);
            return -1;
        }
    }
    return 0;
}

/* Every field of LayerSpec but name and unit: a field added to the struct must be added here
   (the size check below stops the build until it is). */
_Static_assert(sizeof(LayerSpec) == 1336, "LayerSpec changed: compare its new fields in plan_layer_same");
int plan_layer_same(const LayerSpec *a, const LayerSpec *b) {
#define SAME(f) (a->f == b->f)
#define SAME_N(f, n) (memcmp(a->f, b->f, sizeof a->f[0] * (size_t)(n)) == 0)
    if (!(SAME(kind) && SAME(params) && SAME(buffers) && SAME(buffers_i64) && SAME(bn_channels) && SAME(largest_tensor) &&
          SAME(fwd_flops) && SAME(act_elems) && SAME(act_fp32_elems) && SAME(act_mask_elems) && SAME(act_bytes) &&
          SAME(act_known) && SAME(n_tensors) && SAME(conv_kernel) && SAME(conv_stride) && SAME(expert_params) && SAME(expert_mask) &&
          SAME(attn_window) && SAME(no_rope) && SAME(frozen) && SAME(n_frozen) && SAME(act_unsaved_tok) &&
          SAME(act_unsaved_tok_ac) && SAME(lora_r_tok) && SAME(lora_drop_tok) && SAME(frozen_flops_extra) &&
          SAME(grad_frontier)))
        return 0;
    int n = a->n_tensors > 0 ? a->n_tensors : 0, nf = a->n_frozen > 0 ? a->n_frozen : 0;
    return SAME_N(tensor_elems, n) && SAME_N(tensor_dim0, n) && SAME_N(tensor_mod, n) && SAME_N(frozen_elems, nf) &&
           SAME_N(frozen_dim0, nf) && SAME_N(frozen_mod, nf);
#undef SAME
#undef SAME_N
}
