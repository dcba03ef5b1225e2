/* plan_load_hf.c — Hugging Face config.json → TransformerConfig → ModelSpec. Each supported
 * model_type is one row of HF_TYPES: its accepted architecture classes and a reader that maps
 * the config's keys (with the defaults of transformers' configuration class for keys a saved
 * config may omit) onto the shared transformer builder. docs/model-formats.md gives each
 * architecture's parameter formula and the published count it is tested against. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "plan_load.h"
#include "plan_load_internal.h"

/* Shape bounds: the same as plan_model_transformer's, so the message names the config key. */
#define MAX_HIDDEN (1 << 20)
#define MAX_FFN (1 << 22)
#define MAX_VOCAB (1 << 24)
#define MAX_CTX (1 << 24)
#define MAX_LAYERS 100000
#define MAX_HEADS 65536

typedef struct {
    char name[64];
    char act[32];
    TransformerConfig t;
    unsigned char *dense;      /* per block, 1 = dense in a MoE model (freed by ld_hf_config) */
    unsigned char *sliding;    /* per block, 1 = sliding-window attention (freed likewise) */
    unsigned char *no_rope;    /* per block, 1 = no rotary embedding (freed likewise) */
} HfBuild;

static void hf_build_free(HfBuild *b) {
    free(b->dense);
    free(b->sliding);
    free(b->no_rope);
}

#define HF_MAX_CLASSES 5

typedef int (*HfReader)(LoadCtx *c, const cJSON *root, const char *cls, HfBuild *b);

static int read_gpt2(LoadCtx *c, const cJSON *root, const char *cls, HfBuild *b);
static int read_llama_like(LoadCtx *c, const cJSON *root, const char *cls, HfBuild *b);
static int read_gpt_neox(LoadCtx *c, const cJSON *root, const char *cls, HfBuild *b);
static int read_opt(LoadCtx *c, const cJSON *root, const char *cls, HfBuild *b);
static int read_bert(LoadCtx *c, const cJSON *root, const char *cls, HfBuild *b);
static int read_t5(LoadCtx *c, const cJSON *root, const char *cls, HfBuild *b);

typedef struct {
    const char *type;          /* model_type */
    const char *classes[HF_MAX_CLASSES];    /* accepted "architectures" entries; [0] is the default */
    HfReader read;
} HfType;

static const HfType HF_TYPES[] = {
    {"gpt2", {"GPT2LMHeadModel", "GPT2Model"}, read_gpt2},
    {"llama", {"LlamaForCausalLM", "LlamaModel"}, read_llama_like},
    {"mistral", {"MistralForCausalLM", "MistralModel"}, read_llama_like},
    {"qwen2", {"Qwen2ForCausalLM", "Qwen2Model"}, read_llama_like},
    {"gemma", {"GemmaForCausalLM", "GemmaModel"}, read_llama_like},
    {"qwen3", {"Qwen3ForCausalLM", "Qwen3Model"}, read_llama_like},
    {"gemma2", {"Gemma2ForCausalLM", "Gemma2Model"}, read_llama_like},
    {"gemma3_text", {"Gemma3ForCausalLM", "Gemma3TextModel"}, read_llama_like},
    {"phi3", {"Phi3ForCausalLM", "Phi3Model"}, read_llama_like},
    {"olmo2", {"Olmo2ForCausalLM", "Olmo2Model"}, read_llama_like},
    {"granite", {"GraniteForCausalLM", "GraniteModel"}, read_llama_like},
    {"smollm3", {"SmolLM3ForCausalLM", "SmolLM3Model"}, read_llama_like},
    {"starcoder2", {"Starcoder2ForCausalLM", "Starcoder2Model"}, read_llama_like},
    {"mixtral", {"MixtralForCausalLM", "MixtralModel"}, read_llama_like},
    {"qwen2_moe", {"Qwen2MoeForCausalLM", "Qwen2MoeModel"}, read_llama_like},
    {"qwen3_moe", {"Qwen3MoeForCausalLM", "Qwen3MoeModel"}, read_llama_like},
    {"deepseek_v3", {"DeepseekV3ForCausalLM", "DeepseekV3Model"}, read_llama_like},
    {"gpt_oss", {"GptOssForCausalLM", "GptOssModel"}, read_llama_like},
    {"llama4_text", {"Llama4ForCausalLM", "Llama4TextModel"}, read_llama_like},
    {"gpt_neox", {"GPTNeoXForCausalLM"}, read_gpt_neox},
    {"opt", {"OPTForCausalLM"}, read_opt},
    {"bert", {"BertForMaskedLM", "BertLMHeadModel", "BertForPreTraining", "BertModel"}, read_bert},
    {"t5", {"T5ForConditionalGeneration", "T5WithLMHeadModel", "T5Model"}, read_t5},
};
#define N_HF_TYPES ((int)(sizeof(HF_TYPES) / sizeof(HF_TYPES[0])))

/* Base classes: the transformer without an output head. They return hidden states, so they
 * have no logits and no loss (transformers: GPT2Model, LlamaModel, ... T5Model). */
static const char *const HF_HEADLESS[] = {"GPT2Model", "LlamaModel", "MistralModel", "Qwen2Model",
                                          "GemmaModel", "BertModel", "T5Model", "Qwen3Model", "Gemma2Model",
                                          "Gemma3TextModel", "Phi3Model", "Olmo2Model", "GraniteModel",
                                          "SmolLM3Model", "Starcoder2Model", "MixtralModel", "Qwen2MoeModel",
                                          "Qwen3MoeModel", "DeepseekV3Model", "GptOssModel", "Llama4TextModel"};

static int hf_headless(const char *cls) {
    for (size_t i = 0; i < sizeof(HF_HEADLESS) / sizeof(HF_HEADLESS[0]); i++)
        if (strcmp(HF_HEADLESS[i], cls) == 0) return 1;
    return 0;
}

static const char *plan_load_hf_types(void) {
    static char buf[256];
    if (!buf[0]) {
        size_t n = 0;
        for (int i = 0; i < N_HF_TYPES; i++)
            n += (size_t)snprintf(buf + n, sizeof(buf) - n, "%s%s", i ? ", " : "", HF_TYPES[i].type);
    }
    return buf;
}

/* The LLaMA-layout families, as data: what each one's config keys mean and which parts its
 * blocks have (transformers 5.24's configuration_*.py defaults for omitted keys; the parameter
 * registration order in plan_model.c). One row per model_type; a new family of the same
 * layout is a new row. */
enum {
    F_QKV_BIAS = 1 << 0,      /* q, k, v biases always (Qwen2, Qwen2-MoE) */
    F_ATTN_BIAS = 1 << 1,     /* reads attention_bias (q, k, v and o biases) */
    F_MLP_BIAS = 1 << 2,      /* reads mlp_bias */
    F_USE_BIAS = 1 << 3,      /* reads use_bias for every linear (StarCoder2) */
    F_QK_NORM_HEAD = 1 << 4,  /* RMSNorm on each head's q and k (Qwen3, Gemma 3) */
    F_QK_NORM_FULL = 1 << 5,  /* RMSNorm on all of q and of k (OLMo 2) */
    F_SANDWICH = 1 << 6,      /* four norms per block (Gemma 2, Gemma 3) */
    F_FUSED = 1 << 7,         /* fused qkv_proj and gate_up_proj (Phi-3) */
    F_SINKS = 1 << 8,         /* attention sinks (GPT-OSS) */
    F_LAYERNORM = 1 << 9,     /* LayerNorm with bias and a plain c_fc/c_proj MLP (StarCoder2) */
    F_MLA = 1 << 10,          /* multi-head latent attention (DeepSeek-V3) */
    F_HIDDEN_ACTIVATION = 1 << 11,  /* the activation is hidden_activation (Gemma 2/3; Gemma too when given) */
    F_POST_NORMS = 1 << 12,   /* the two norms act on the sublayers' outputs (OLMo 2) */
    F_NORM_FP32 = 1 << 13,    /* RMSNorm as (x * w).to(dtype) (Gemma, Gemma 2/3, OLMo 2) */
    F_RESID_DROPOUT = 1 << 14,  /* resid_pdrop dropouts on the sublayers' outputs (Phi-3) */
    F_ROTARY_CAT = 1 << 15,   /* partial rotary through torch.cat (Phi-3) */
    F_SOFTCAP = 1 << 16,      /* reads attn_logit_softcapping, final_logit_softcapping (Gemma 2/3) */
    F_EMBED_SCALE = 1 << 17,  /* the scaled token embedding's 0-d embed_scale buffer (Gemma, Gemma 2/3) */
    F_ROPE_PER_KIND = 1 << 18,  /* one rotary inv_freq pair per attention kind in layer_types (Gemma 3) */
    F_QK_L2 = 1 << 19,        /* reads use_qk_norm: an L2 norm per head on q and k, no weights, and
                                 no_rope_layer_interval: every N-th block has neither rope nor it (Llama 4) */
};

/* Which blocks attend through a sliding window of sliding_window keys (transformers 5.24's
   configuration classes; a config's explicit layer_types list wins where the class reads one). */
typedef enum {
    WIN_NONE = 0,
    WIN_ALL,           /* every block when sliding_window is set (Mistral, Phi-3, StarCoder2) */
    WIN_ALTERNATE,     /* blocks 0, 2, 4, ... ((i + 1) % 2: Gemma 2) */
    WIN_PATTERN,       /* all but every sliding_window_pattern-th (default 6: Gemma 3) */
    WIN_FROM_LAYER,    /* with use_sliding_window, blocks from max_window_layers on (Qwen2, Qwen3) */
    WIN_NO_ROPE,       /* with use_sliding_window, the no-rope blocks (SmolLM3) */
} WindowRule;

typedef struct {
    const char *type;
    unsigned feat;
    int tied;                  /* tie_word_embeddings default */
    int64_t head_dim;          /* head_dim default (0 = hidden / heads) */
    const char *act;           /* hidden_act default */
    int64_t max_pos;           /* max_position_embeddings default (no parameters depend on it) */
    int attn_bias;             /* attention_bias default (GPT-OSS: true) */
    /* mixture of experts (NULL experts key: dense) */
    const char *k_experts;     /* num_local_experts, num_experts, n_routed_experts; "a|b": the
                                  config class's attribute_map alias b read when a is absent */
    int experts, top_k;        /* their defaults */
    const char *k_expert_ff;   /* each expert's width: moe_intermediate_size, or intermediate_size */
    int64_t expert_ff;
    const char *k_shared;      /* shared expert width (Qwen2-MoE), or how many of expert width
                                  (DeepSeek n_shared_experts), or NULL */
    int64_t shared;            /* its default */
    int shared_experts;        /* k_shared counts experts of expert width (DeepSeek) */
    int shared_of_ff;          /* one shared expert of intermediate_size (Llama 4) */
    int router_first;          /* router registered before the experts */
    int shared_gate, moe_bias; /* Qwen2-MoE's shared-expert gate; GPT-OSS's biases */
    /* how its MoE block runs (MoeSpec; each row from the family's modeling_*.py): the router,
       whether it renormalises the top-k weights (norm_topk 1: always; k_norm_topk: the config key
       and its default), the weights stay fp32, the shared expert runs after the routed ones,
       GPT-OSS's clamped SwiGLU, a load-balancing loss on output_router_logits */
    MoeRouter router;
    int norm_topk;
    const char *k_norm_topk;
    int fp32_weights, shared_last, clamped_glu, aux_loss;
    const char *k_dense_ff;    /* the dense blocks' width key when not intermediate_size (Llama 4) */
    int64_t dense_ff;
    /* which blocks are MoE: the first k dense (DeepSeek), every step-th (Qwen-MoE, Llama 4), a
       list of dense ones (Qwen-MoE mlp_only_layers) or of MoE ones (Llama 4 moe_layers) */
    const char *k_first_dense;
    int first_dense;
    const char *k_step;
    const char *k_dense_list, *k_moe_list;
    /* attention: soft-capping defaults (F_SOFTCAP; attn_cap < 0: read by the config class, not
       applied), the sliding window's default and its rule */
    double attn_cap, logit_cap;
    int64_t window;
    WindowRule win;
} Family;

static const Family FAMILIES[] = {
    {.type = "llama", .feat = F_ATTN_BIAS | F_MLP_BIAS, .act = "silu", .max_pos = 2048},
    {.type = "mistral", .act = "silu", .max_pos = 131072, .window = 4096, .win = WIN_ALL},
    {.type = "qwen2", .feat = F_QKV_BIAS, .act = "silu", .max_pos = 32768, .window = 4096, .win = WIN_FROM_LAYER},
    {.type = "gemma", .feat = F_ATTN_BIAS | F_NORM_FP32 | F_EMBED_SCALE, .tied = 1, .head_dim = 256,
     .act = "gelu_pytorch_tanh", .max_pos = 8192},
    {.type = "qwen3", .feat = F_ATTN_BIAS | F_QK_NORM_HEAD, .head_dim = 128, .act = "silu", .max_pos = 32768,
     .window = 4096, .win = WIN_FROM_LAYER},
    {.type = "gemma2", .feat = F_ATTN_BIAS | F_SANDWICH | F_HIDDEN_ACTIVATION | F_NORM_FP32 | F_SOFTCAP | F_EMBED_SCALE,
     .tied = 1, .head_dim = 256, .act = "gelu_pytorch_tanh", .max_pos = 8192, .attn_cap = 50, .logit_cap = 30,
     .window = 4096, .win = WIN_ALTERNATE},
    {.type = "gemma3_text", .feat = F_ATTN_BIAS | F_SANDWICH | F_QK_NORM_HEAD | F_HIDDEN_ACTIVATION | F_NORM_FP32 |
     F_SOFTCAP | F_EMBED_SCALE | F_ROPE_PER_KIND, .tied = 1, .head_dim = 256, .act = "gelu_pytorch_tanh",
     .max_pos = 131072, .attn_cap = -1, .window = 4096, .win = WIN_PATTERN},
    {.type = "phi3", .feat = F_FUSED | F_RESID_DROPOUT | F_ROTARY_CAT, .act = "silu", .max_pos = 4096, .win = WIN_ALL},
    {.type = "olmo2", .feat = F_ATTN_BIAS | F_QK_NORM_FULL | F_POST_NORMS | F_NORM_FP32, .act = "silu", .max_pos = 2048},
    {.type = "granite", .feat = F_ATTN_BIAS | F_MLP_BIAS, .act = "silu", .max_pos = 2048},
    {.type = "smollm3", .feat = F_ATTN_BIAS | F_MLP_BIAS, .tied = 1, .act = "silu", .max_pos = 32768, .win = WIN_NO_ROPE},
    {.type = "starcoder2", .feat = F_USE_BIAS | F_LAYERNORM, .tied = 1, .act = "gelu_pytorch_tanh", .max_pos = 4096,
     .win = WIN_ALL},
    {.type = "mixtral", .act = "silu", .max_pos = 131072, .k_experts = "num_local_experts|num_experts", .experts = 8, .top_k = 2,
     .k_expert_ff = "intermediate_size", .expert_ff = 14336, .router_first = 1, .norm_topk = 1, .fp32_weights = 1,
     .aux_loss = 1},
    {.type = "qwen2_moe", .feat = F_QKV_BIAS, .act = "silu", .max_pos = 32768, .k_experts = "num_experts",
     .experts = 60, .top_k = 4, .k_expert_ff = "moe_intermediate_size", .expert_ff = 1408,
     .k_shared = "shared_expert_intermediate_size", .shared = 5632, .router_first = 1, .shared_gate = 1,
     .k_norm_topk = "norm_topk_prob", .aux_loss = 1,
     .k_step = "decoder_sparse_step", .k_dense_list = "mlp_only_layers"},
    {.type = "qwen3_moe", .feat = F_ATTN_BIAS | F_QK_NORM_HEAD, .act = "silu", .max_pos = 32768,
     .k_experts = "num_experts|num_local_experts", .experts = 128, .top_k = 8, .k_expert_ff = "moe_intermediate_size", .expert_ff = 768,
     .k_norm_topk = "norm_topk_prob", .aux_loss = 1,
     .k_step = "decoder_sparse_step", .k_dense_list = "mlp_only_layers"},
    {.type = "deepseek_v3", .feat = F_ATTN_BIAS | F_MLA, .act = "silu", .max_pos = 4096, .k_experts = "n_routed_experts|num_local_experts",
     .experts = 256, .top_k = 8, .k_expert_ff = "moe_intermediate_size", .expert_ff = 2048,
     .k_shared = "n_shared_experts", .shared = 1, .shared_experts = 1, .k_first_dense = "first_k_dense_replace",
     .first_dense = 3, .router = MOE_ROUTER_GROUPED, .k_norm_topk = "norm_topk_prob", .norm_topk = 1, .shared_last = 1},
    {.type = "gpt_oss", .feat = F_ATTN_BIAS | F_SINKS, .attn_bias = 1, .head_dim = 64, .act = "silu", .max_pos = 131072,
     .k_experts = "num_local_experts|num_experts", .experts = 128, .top_k = 4, .k_expert_ff = "intermediate_size",
     .expert_ff = 2880, .router_first = 1, .moe_bias = 1, .router = MOE_ROUTER_TOPK_SOFTMAX, .clamped_glu = 1,
     .aux_loss = 1},
    {.type = "llama4_text", .feat = F_ATTN_BIAS | F_QK_L2, .head_dim = 128, .act = "silu", .max_pos = 131072,
     .k_experts = "num_local_experts", .experts = 16, .top_k = 1, .k_expert_ff = "intermediate_size",
     .expert_ff = 8192, .shared_of_ff = 1, .k_dense_ff = "intermediate_size_mlp", .dense_ff = 16384,
     .k_step = "interleave_moe_layer_step", .k_moe_list = "moe_layers", .router = MOE_ROUTER_ALL_EXPERTS,
     .shared_last = 1},
};
#define N_FAMILIES ((int)(sizeof(FAMILIES) / sizeof(FAMILIES[0])))

/* The MLP kind that an activation name implies (non-gated MLPs). */
static MlpKind mlp_of_act(const char *act) {
    if (strcmp(act, "gelu_new") == 0) return MLP_GELU_NEW;   /* composite tanh formula */
    if (strcmp(act, "relu") == 0) return MLP_RELU;
    return MLP_GELU;
}

static int dropout(LoadCtx *c, const cJSON *root, const char *key, double def, HfBuild *b) {
    return ld_num(c, root, "", key, 0, def, 0.0, 1.0, &b->t.dropout);
}

static int tied(LoadCtx *c, const cJSON *root, int def, HfBuild *b) {
    return ld_bool(c, root, "", "tie_word_embeddings", 0, def, 0, &b->t.tied);
}

static int act(LoadCtx *c, const cJSON *root, const char *key, const char *def, HfBuild *b) {
    if (ld_str(c, root, "", key, 0, def, b->act, sizeof(b->act))) return -1;
    b->t.act_fn = b->act;
    return 0;
}

/* GPT2LMHeadModel: wte V*h, wpe P*h; per block ln_1, c_attn (h x 3h + 3h), c_proj, ln_2, c_fc
 * (h x f + f), c_proj (f x h + h); ln_f; lm_head tied to wte. */
static int read_gpt2(LoadCtx *c, const cJSON *root, const char *cls, HfBuild *b) {
    TransformerConfig *t = &b->t;
    int64_t pos, inner;
    int cross;
    (void)cls;
    if (ld_int(c, root, "", "vocab_size", 1, 0, 1, MAX_VOCAB, &t->vocab) ||
        ld_int(c, root, "", "n_embd", 1, 0, 1, MAX_HIDDEN, &t->d_model) ||
        ld_int32(c, root, "", "n_layer", 1, 0, 1, MAX_LAYERS, &t->n_layer) ||
        ld_int32(c, root, "", "n_head", 1, 0, 1, MAX_HEADS, &t->n_head) ||
        ld_int(c, root, "", "n_ctx", 0, 1024, 1, MAX_CTX, &pos) ||
        ld_int(c, root, "", "n_positions", 0, pos, 1, MAX_CTX, &t->max_seq) ||
        ld_int(c, root, "", "n_inner", 0, 0, 1, MAX_FFN, &inner) ||
        ld_bool(c, root, "", "add_cross_attention", 0, 0, 0, &cross) ||
        act(c, root, "activation_function", "gelu_new", b) || tied(c, root, 1, b) ||
        dropout(c, root, "resid_pdrop", 0.1, b))
        return -1;
    if (cross)
        return ld_fail(c, "add_cross_attention = true (GPT-2 as a decoder of an encoder-decoder) "
                       "is not supported");
    t->arch = ARCH_DECODER;
    t->d_ff = inner > 0 ? inner : 4 * t->d_model;
    t->norm = NORM_LAYERNORM;
    t->mlp = mlp_of_act(b->act);
    t->learned_pos = 1;
    t->qkv_bias = t->out_bias = t->mlp_bias = t->norm_bias = 1;
    t->final_norm = 1;
    t->layout = LAYOUT_GPT2;
    return 0;
}

/* A list of block indices (Qwen-MoE mlp_only_layers, Llama 4 moe_layers) into flags: each
   listed block gets `set`, the others `1 - set`. Absent: 0 and *flags untouched. */
static int block_list(LoadCtx *c, const cJSON *root, const char *key, int n, int set, HfBuild *b) {
    const cJSON *a = key ? cJSON_GetObjectItemCaseSensitive(root, key) : NULL;
    if (!a || cJSON_IsNull(a)) return 0;
    if (!cJSON_IsArray(a)) return ld_fail(c, "field '%s' must be a list of layer indices", key);
    if (!b->dense && !(b->dense = calloc((size_t)n, 1))) return ld_fail(c, "out of host memory");
    for (int i = 0; i < n; i++) b->dense[i] = (unsigned char)(1 - set);
    int k = 0;
    for (const cJSON *e = a->child; e; e = e->next, k++) {
        if (!cJSON_IsNumber(e) || e->valuedouble != (double)(int)e->valuedouble || e->valuedouble < 0 ||
            e->valuedouble >= n)
            return ld_fail(c, "field '%s[%d]' must be a layer index from 0 to %d", key, k, n - 1);
        b->dense[(int)e->valuedouble] = (unsigned char)set;
    }
    return 0;
}

/* How the family's MoE block runs (Family: router, top-k renormalisation, dtypes, order), with
   the config's norm_topk_prob and output_router_logits where the family reads them. */
static int read_moe_layout(LoadCtx *c, const cJSON *root, const Family *v, MoeSpec *e) {
    e->router = v->router;
    e->norm_topk = v->norm_topk;
    e->fp32_weights = v->fp32_weights;
    e->shared_last = v->shared_last && e->d_ff_shared > 0;
    e->clamped_glu = v->clamped_glu;
    if (v->k_norm_topk && ld_bool(c, root, "", v->k_norm_topk, 0, v->norm_topk, 0, &e->norm_topk)) return -1;
    if (v->aux_loss && ld_bool(c, root, "", "output_router_logits", 0, 0, 0, &e->router_logits)) return -1;
    /* DeepSeek's group-limited routing: the top-2 scores per group, the best groups, then the
       experts (DeepseekV3MoE.route_tokens_to_experts: three topk, whose outputs op-level
       checkpointing saves) */
    if (e->router == MOE_ROUTER_GROUPED &&
        (ld_int32(c, root, "", "n_group", 0, 1, 1, 65536, &e->n_group) ||
         ld_int32(c, root, "", "topk_group", 0, 1, 1, 65536, &e->topk_group)))
        return -1;
    return 0;
}

/* A MoE family's experts, shared experts and which blocks route (Family); dense families
   and configs with no experts leave t->moe zero. */
static int read_moe(LoadCtx *c, const cJSON *root, const Family *v, HfBuild *b) {
    TransformerConfig *t = &b->t;
    if (!v->k_experts) return 0;
    MoeSpec *e = &t->moe;
    int64_t shared = 0;
    char key[64];   /* the first of the alias keys the config gives (else the first) */
    snprintf(key, sizeof key, "%s", v->k_experts);
    char *alt = strchr(key, '|');
    if (alt) {
        *alt++ = 0;
        const cJSON *k0 = cJSON_GetObjectItemCaseSensitive(root, key);
        if ((!k0 || cJSON_IsNull(k0)) && cJSON_GetObjectItemCaseSensitive(root, alt)) memmove(key, alt, strlen(alt) + 1);
    }
    if (ld_int32(c, root, "", key, 0, v->experts, 0, 65536, &e->n_experts) ||
        ld_int32(c, root, "", "num_experts_per_tok", 0, v->top_k, 1, 65536, &e->top_k) ||
        ld_int(c, root, "", v->k_expert_ff, 0, v->expert_ff, 1, MAX_FFN, &e->d_ff_expert) ||
        (v->k_shared && ld_int(c, root, "", v->k_shared, 0, v->shared, 0, MAX_FFN, &shared)) ||
        (v->k_dense_ff && ld_int(c, root, "", v->k_dense_ff, 0, v->dense_ff, 1, MAX_FFN, &t->d_ff)) ||
        (v->k_first_dense && ld_int32(c, root, "", v->k_first_dense, 0, v->first_dense, 0, MAX_LAYERS,
                                      &t->moe_first_dense)) ||
        (v->k_step && ld_int32(c, root, "", v->k_step, 0, 1, 1, MAX_LAYERS, &t->moe_step)))
        return -1;
    if (e->n_experts == 0) { memset(e, 0, sizeof(*e)); return 0; }
    if (e->top_k > e->n_experts)
        return ld_fail(c, "num_experts_per_tok %d exceeds the %d experts of '%s'", e->top_k, e->n_experts, key);
    e->d_ff_shared = v->shared_experts ? shared * e->d_ff_expert : shared;
    if (v->shared_of_ff) e->d_ff_shared = e->d_ff_expert;   /* Llama 4: one shared expert of intermediate_size */
    t->moe_router_first = v->router_first;
    e->shared_gate = v->shared_gate && e->d_ff_shared > 0;
    e->bias = v->moe_bias;
    if (read_moe_layout(c, root, v, e)) return -1;
    if (block_list(c, root, v->k_dense_list, t->n_layer, 1, b) || block_list(c, root, v->k_moe_list, t->n_layer, 0, b))
        return -1;
    if (v->k_moe_list && cJSON_IsArray(cJSON_GetObjectItemCaseSensitive(root, v->k_moe_list)))
        t->moe_step = 1;   /* the list names every MoE block (Llama4TextConfig: moe_layers wins) */
    t->dense_blocks = b->dense;
    return 0;
}

/* Llama 4's q/k L2 norm (Llama4TextL2Norm, no parameters) when use_qk_norm, on the blocks with
   rope: no_rope_layers defaults to a NoPE block every no_rope_layer_interval blocks
   (configuration_llama4.py); an explicit list is read as that pattern only when it is one. */
static int read_qk_l2(LoadCtx *c, const cJSON *root, TransformerConfig *t) {
    int on = 1;
    if (ld_bool(c, root, "", "use_qk_norm", 0, 1, 0, &on) ||
        ld_int32(c, root, "", "no_rope_layer_interval", 0, 4, 1, MAX_LAYERS, &t->nope_every))
        return -1;
    const cJSON *list = cJSON_GetObjectItemCaseSensitive(root, "no_rope_layers");
    int i = 0;
    for (const cJSON *e = list && cJSON_IsArray(list) ? list->child : NULL; e; e = e->next, i++)
        if (!cJSON_IsNumber(e) || (e->valueint != 0) != ((i + 1) % t->nope_every != 0))
            return ld_fail(c, "no_rope_layers: memplan reads the pattern of no_rope_layer_interval %d only "
                           "(a NoPE block every %d); entry %d differs", t->nope_every, t->nope_every, i);
    if (on) t->qk_norm = 3;
    return 0;
}

/* DeepSeek's multi-head latent attention dimensions; an explicit null q_lora_rank means a plain
   q_proj (DeepseekV3Attention), which null_is_absent would otherwise read as the default. */
static int read_mla(LoadCtx *c, const cJSON *root, HfBuild *b) {
    TransformerConfig *t = &b->t;
    const cJSON *q = cJSON_GetObjectItemCaseSensitive(root, "q_lora_rank");
    MlaSpec *a = &t->mla;
    if (ld_int(c, root, "", "q_lora_rank", 0, 1536, 1, 65536, &a->q_rank) ||
        ld_int(c, root, "", "kv_lora_rank", 0, 512, 1, 65536, &a->kv_rank) ||
        ld_int(c, root, "", "qk_rope_head_dim", 0, 64, 1, 65536, &a->rope_dim) ||
        ld_int(c, root, "", "qk_nope_head_dim", 0, 128, 0, 65536, &a->nope_dim) ||
        ld_int(c, root, "", "v_head_dim", 0, 128, 1, 65536, &a->v_dim))
        return -1;
    if (q && cJSON_IsNull(q)) a->q_rank = 0;
    return 0;
}

/* A number whose explicit null means "off" (transformers' None: a soft-cap, a window), where
   null_is_absent would read it as the default. */
static int num_or_off(LoadCtx *c, const cJSON *root, const char *key, double def, double *out) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(root, key);
    if (v && cJSON_IsNull(v)) { *out = 0; return 0; }
    return ld_num(c, root, "", key, 0, def, 0.0, 1e9, out);
}

/* SmolLM3's NoPE blocks: no_rope_layers (per layer, 1 = rotary, 0 = none) or else every
   no_rope_layer_interval-th block (configuration_smollm3.py). */
static int read_no_rope(LoadCtx *c, const cJSON *root, HfBuild *b) {
    int n = b->t.n_layer, every, i = 0;
    const cJSON *a = cJSON_GetObjectItemCaseSensitive(root, "no_rope_layers");
    if (ld_int32(c, root, "", "no_rope_layer_interval", 0, 4, 1, MAX_LAYERS, &every)) return -1;
    if (!(b->no_rope = calloc((size_t)n, 1))) return ld_fail(c, "out of host memory");
    b->t.no_rope_blocks = b->no_rope;
    if (!a || cJSON_IsNull(a)) {
        for (i = 0; i < n; i++) b->no_rope[i] = (i + 1) % every == 0;
        return 0;
    }
    if (!cJSON_IsArray(a) || cJSON_GetArraySize(a) != n)
        return ld_fail(c, "field 'no_rope_layers' must list 0 or 1 for each of the %d layers", n);
    for (const cJSON *e = a->child; e; e = e->next, i++) {
        if (!cJSON_IsNumber(e) || (e->valuedouble != 0 && e->valuedouble != 1))
            return ld_fail(c, "field 'no_rope_layers[%d]' must be 0 or 1", i);
        b->no_rope[i] = e->valuedouble == 0;
    }
    return 0;
}

/* 1 when block i of the family's rule attends through the sliding window. */
static int rule_sliding(WindowRule w, int i, int from, int pattern, const unsigned char *no_rope) {
    switch (w) {
    case WIN_ALL: return 1;
    case WIN_ALTERNATE: return (i + 1) % 2 != 0;
    case WIN_PATTERN: return (i + 1) % pattern != 0;
    case WIN_FROM_LAYER: return i >= from;
    case WIN_NO_ROPE: return no_rope && no_rope[i];
    default: return 0;
    }
}

/* Which blocks attend through a sliding window of sliding_window keys (Family.win): an explicit
   layer_types list ("sliding_attention" per block) where the family's class reads one, else its
   rule; sliding_window null or 0, or use_sliding_window false where it gates, means none. */
static int read_windows(LoadCtx *c, const cJSON *root, const Family *v, HfBuild *b) {
    TransformerConfig *t = &b->t;
    int n = t->n_layer, gate = 1, from = 0, pattern = 6;
    double w;
    if (v->win == WIN_NONE) return 0;
    if (num_or_off(c, root, "sliding_window", (double)v->window, &w)) return -1;
    if ((v->win == WIN_FROM_LAYER || v->win == WIN_NO_ROPE) &&
        ld_bool(c, root, "", "use_sliding_window", 0, 0, 0, &gate))
        return -1;
    if ((v->win == WIN_FROM_LAYER && ld_int32(c, root, "", "max_window_layers", 0, 28, 0, MAX_LAYERS, &from)) ||
        (v->win == WIN_PATTERN && ld_int32(c, root, "", "sliding_window_pattern", 0, 6, 1, MAX_LAYERS, &pattern)))
        return -1;
    if (w < 1 || !gate) return 0;
    t->window = (int64_t)w;
    if (!(b->sliding = calloc((size_t)n, 1))) return ld_fail(c, "out of host memory");
    t->sliding_blocks = b->sliding;
    const cJSON *lt = v->win == WIN_ALL ? NULL : cJSON_GetObjectItemCaseSensitive(root, "layer_types");
    if (lt && !cJSON_IsNull(lt) && (!cJSON_IsArray(lt) || cJSON_GetArraySize(lt) != n))
        return ld_fail(c, "field 'layer_types' must list one attention type for each of the %d layers", n);
    const cJSON *e = lt && cJSON_IsArray(lt) ? lt->child : NULL;
    for (int i = 0; i < n; i++, e = e ? e->next : NULL)
        b->sliding[i] = (unsigned char)(e ? cJSON_IsString(e) && strcmp(e->valuestring, "sliding_attention") == 0
                                          : rule_sliding(v->win, i, from, pattern, b->no_rope));
    return 0;
}

/* Gemma 3's rotary embedding keeps an inv_freq pair for each distinct entry of layer_types
   (modeling_gemma3.py Gemma3RotaryEmbedding.__init__: sorted(set(config.layer_types))), which
   its config class fills from sliding_window_pattern when absent (configuration_gemma3.py),
   whether or not sliding_window is set. */
static int read_rope_kinds(LoadCtx *c, const cJSON *root, HfBuild *b) {
    int n = b->t.n_layer, pattern = 6, kinds = 0;
    const cJSON *lt = cJSON_GetObjectItemCaseSensitive(root, "layer_types");
    if (lt && cJSON_IsArray(lt)) {
        for (const cJSON *e = lt->child; e; e = e->next) {
            if (!cJSON_IsString(e)) continue;
            int seen = 0;
            for (const cJSON *f = lt->child; f != e && !seen; f = f->next)
                seen = cJSON_IsString(f) && strcmp(f->valuestring, e->valuestring) == 0;
            kinds += !seen;
        }
    } else {
        int sliding = 0, full = 0;
        if (ld_int32(c, root, "", "sliding_window_pattern", 0, 6, 1, MAX_LAYERS, &pattern)) return -1;
        for (int i = 0; i < n; i++) {
            if ((i + 1) % pattern) sliding = 1;
            else full = 1;
        }
        kinds = sliding + full;
    }
    b->t.rope_kinds = kinds;
    return 0;
}

/* The attention parts of a family (Family): soft-capping (Gemma 2/3), NoPE blocks and sliding
   windows; OLMo 2's post-norms, the Gemma-style RMSNorm, Phi-3's residual dropouts and
   concatenating rotary. */
static int read_attention(LoadCtx *c, const cJSON *root, const Family *v, HfBuild *b) {
    TransformerConfig *t = &b->t;
    /* Gemma 3 reads attn_logit_softcapping but its attention never applies it (modeling_gemma3.py
       Gemma3Attention.forward passes no softcap): attn_cap < 0 */
    if ((v->feat & F_SOFTCAP) &&
        ((v->attn_cap >= 0 && num_or_off(c, root, "attn_logit_softcapping", v->attn_cap, &t->attn_softcap)) ||
         num_or_off(c, root, "final_logit_softcapping", v->logit_cap, &t->logit_softcap)))
        return -1;
    if (v->win == WIN_NO_ROPE && read_no_rope(c, root, b)) return -1;
    if (read_windows(c, root, v, b)) return -1;
    if ((v->feat & F_ROPE_PER_KIND) && read_rope_kinds(c, root, b)) return -1;
    t->embed_scale_buffer = (v->feat & F_EMBED_SCALE) != 0;
    t->post_norms = (v->feat & F_POST_NORMS) != 0;
    t->norm_fp32 = (v->feat & F_NORM_FP32) != 0;
    t->resid_dropout = (v->feat & F_RESID_DROPOUT) != 0;
    t->rotary_cat = (v->feat & F_ROTARY_CAT) != 0;
    return 0;
}

/* The LLaMA-layout families (FAMILIES): embed_tokens V*h; per block the attention (q, k, v,
 * o, or Phi-3's fused qkv, or DeepSeek's latent attention; q/k norms; GPT-OSS sinks), the MLP
 * (gate/up/down, Phi-3's fused gate_up, StarCoder2's c_fc/c_proj, or the experts), 2 or 4
 * norms; norm (h); lm_head V*h unless tied. */
static int read_llama_like(LoadCtx *c, const cJSON *root, const char *cls, HfBuild *b) {
    const Family *v = NULL;
    char type[32];
    if (ld_str(c, root, "", "model_type", 0, "", type, sizeof(type))) return -1;
    for (int i = 0; i < N_FAMILIES; i++)
        if (strcmp(FAMILIES[i].type, type) == 0) v = &FAMILIES[i];
    if (!v) {   /* known only from its class name */
        for (int i = 0; i < N_FAMILIES; i++)
            for (int k = 0; k < N_HF_TYPES; k++)
                if (strcmp(HF_TYPES[k].type, FAMILIES[i].type) == 0 && strcmp(HF_TYPES[k].classes[0], cls) == 0)
                    v = &FAMILIES[i];
    }
    if (!v) return ld_fail(c, "internal error: no family row for '%s'", cls);
    TransformerConfig *t = &b->t;
    int attn_bias = 0, mlp_bias = 0, use_bias = 1;
    const char *act_key = v->feat & F_HIDDEN_ACTIVATION ? "hidden_activation" : "hidden_act";
    if (ld_int(c, root, "", "vocab_size", 1, 0, 1, MAX_VOCAB, &t->vocab) ||
        ld_int(c, root, "", "hidden_size", 1, 0, 1, MAX_HIDDEN, &t->d_model) ||
        ld_int(c, root, "", "intermediate_size", 1, 0, 1, MAX_FFN, &t->d_ff) ||
        ld_int32(c, root, "", "num_hidden_layers", 1, 0, 1, MAX_LAYERS, &t->n_layer) ||
        ld_int32(c, root, "", "num_attention_heads", 1, 0, 1, MAX_HEADS, &t->n_head) ||
        ld_int32(c, root, "", "num_key_value_heads", 0, t->n_head, 1, MAX_HEADS, &t->n_kv_head) ||
        ld_int(c, root, "", "head_dim", 0, v->head_dim, 1, MAX_HEADS, &t->d_head) ||
        ld_int(c, root, "", "max_position_embeddings", 0, v->max_pos, 1, MAX_CTX, &t->max_seq) ||
        tied(c, root, v->tied, b) || act(c, root, act_key, v->act, b) ||
        dropout(c, root, "attention_dropout", 0.0, b))
        return -1;
    if ((v->feat & F_ATTN_BIAS) && ld_bool(c, root, "", "attention_bias", 0, v->attn_bias, 0, &attn_bias)) return -1;
    if ((v->feat & F_MLP_BIAS) && ld_bool(c, root, "", "mlp_bias", 0, 0, 0, &mlp_bias)) return -1;
    if ((v->feat & F_USE_BIAS) && ld_bool(c, root, "", "use_bias", 0, 1, 0, &use_bias)) return -1;
    /* Gemma names its activation hidden_activation in later configs; it wins when present */
    if (strcmp(v->type, "gemma") == 0 && cJSON_IsString(cJSON_GetObjectItemCaseSensitive(
                                             root, "hidden_activation")) &&
        act(c, root, "hidden_activation", v->act, b))
        return -1;
    if ((v->feat & F_MLA) && read_mla(c, root, b)) return -1;
    if (read_moe(c, root, v, b) || read_attention(c, root, v, b)) return -1;
    t->arch = ARCH_DECODER;
    t->norm = v->feat & F_LAYERNORM ? NORM_LAYERNORM : NORM_RMSNORM;
    t->mlp = v->feat & F_LAYERNORM ? mlp_of_act(b->act) : MLP_SWIGLU;   /* gated: SwiGLU, or GeGLU (same shapes) */
    t->norm_bias = (v->feat & F_LAYERNORM) != 0;
    t->qkv_bias = (v->feat & F_QKV_BIAS) || attn_bias || ((v->feat & F_USE_BIAS) && use_bias);
    t->out_bias = attn_bias || ((v->feat & F_USE_BIAS) && use_bias);
    t->mlp_bias = mlp_bias || ((v->feat & F_USE_BIAS) && use_bias);
    t->qk_norm = v->feat & F_QK_NORM_HEAD ? 1 : v->feat & F_QK_NORM_FULL ? 2 : 0;
    if ((v->feat & F_QK_L2) && read_qk_l2(c, root, t)) return -1;
    t->block_norms = v->feat & F_SANDWICH ? 4 : 2;
    t->fused_qkv = t->fused_gate_up = (v->feat & F_FUSED) != 0;
    t->sinks = (v->feat & F_SINKS) != 0;
    t->final_norm = 1;
    return 0;
}

/* GPTNeoXForCausalLM: embed_in V*h; per block input/post-attention LayerNorms (2h each),
 * query_key_value (h x 3h + 3h), dense (h x h + h), dense_h_to_4h (h x f + f), dense_4h_to_h
 * (f x h + h); final_layer_norm; embed_out V*h (untied by default). Rotary: no parameters. */
static int read_gpt_neox(LoadCtx *c, const cJSON *root, const char *cls, HfBuild *b) {
    TransformerConfig *t = &b->t;
    int attn_bias;
    (void)cls;
    if (ld_int(c, root, "", "vocab_size", 1, 0, 1, MAX_VOCAB, &t->vocab) ||
        ld_int(c, root, "", "hidden_size", 1, 0, 1, MAX_HIDDEN, &t->d_model) ||
        ld_int(c, root, "", "intermediate_size", 1, 0, 1, MAX_FFN, &t->d_ff) ||
        ld_int32(c, root, "", "num_hidden_layers", 1, 0, 1, MAX_LAYERS, &t->n_layer) ||
        ld_int32(c, root, "", "num_attention_heads", 1, 0, 1, MAX_HEADS, &t->n_head) ||
        ld_int(c, root, "", "max_position_embeddings", 0, 2048, 1, MAX_CTX, &t->max_seq) ||
        ld_bool(c, root, "", "attention_bias", 0, 1, 0, &attn_bias) || tied(c, root, 0, b) ||
        act(c, root, "hidden_act", "gelu", b) || dropout(c, root, "hidden_dropout", 0.0, b) ||
        ld_num(c, root, "", "rotary_pct", 0, 0.25, 0.0, 1.0, &t->rotary_frac))
        return -1;
    if (t->rotary_frac == 0) t->rotary_frac = -1;   /* rotary_pct 0: no rotary dims at all */
    t->arch = ARCH_DECODER;
    t->norm = NORM_LAYERNORM;
    t->mlp = mlp_of_act(b->act);
    t->qkv_bias = t->out_bias = attn_bias;
    t->mlp_bias = t->norm_bias = 1;
    t->final_norm = 1;
    t->layout = LAYOUT_NEOX;
    return 0;
}

/* OPTForCausalLM: embed_tokens V*e (e = word_embed_proj_dim, default h), embed_positions
 * (P + 2) x h, project_in e x h and project_out h x e (no bias) when e != h; per block
 * q/k/v/out_proj (h x h + h), self_attn_layer_norm, fc1 (h x f + f), fc2 (f x h + h),
 * final_layer_norm; a final LayerNorm only when do_layer_norm_before (and not
 * _remove_final_layer_norm); lm_head (e x V) tied to embed_tokens. */
static int read_opt(LoadCtx *c, const cJSON *root, const char *cls, HfBuild *b) {
    TransformerConfig *t = &b->t;
    int before, removed, bias, affine;
    int64_t hid;
    (void)cls;
    /* early OPT configs call the hidden size d_model */
    if (ld_int(c, root, "", "d_model", 0, 0, 1, MAX_HIDDEN, &hid) ||
        ld_int(c, root, "", "hidden_size", hid == 0, hid, 1, MAX_HIDDEN, &t->d_model) ||
        ld_int(c, root, "", "vocab_size", 1, 0, 1, MAX_VOCAB, &t->vocab) ||
        ld_int(c, root, "", "ffn_dim", 1, 0, 1, MAX_FFN, &t->d_ff) ||
        ld_int32(c, root, "", "num_hidden_layers", 1, 0, 1, MAX_LAYERS, &t->n_layer) ||
        ld_int32(c, root, "", "num_attention_heads", 1, 0, 1, MAX_HEADS, &t->n_head) ||
        ld_int(c, root, "", "max_position_embeddings", 1, 0, 1, MAX_CTX, &t->max_seq) ||
        ld_int(c, root, "", "word_embed_proj_dim", 0, t->d_model, 1, MAX_HIDDEN, &t->embed_dim) ||
        ld_bool(c, root, "", "do_layer_norm_before", 0, 1, 0, &before) ||
        ld_bool(c, root, "", "_remove_final_layer_norm", 0, 0, 0, &removed) ||
        ld_bool(c, root, "", "enable_bias", 0, 1, 0, &bias) ||
        ld_bool(c, root, "", "layer_norm_elementwise_affine", 0, 1, 0, &affine) ||
        tied(c, root, 1, b) || act(c, root, "activation_function", "relu", b) ||
        dropout(c, root, "dropout", 0.1, b))
        return -1;
    if (!affine)
        return ld_fail(c, "layer_norm_elementwise_affine = false (LayerNorms without weights) is "
                       "not supported");
    t->arch = ARCH_DECODER;
    t->norm = NORM_LAYERNORM;
    t->mlp = mlp_of_act(b->act);
    t->learned_pos = 1;
    t->pos_offset = 2;        /* OPTLearnedPositionalEmbedding keeps 2 extra rows */
    t->qkv_bias = t->out_bias = t->mlp_bias = bias;
    t->norm_bias = 1;
    t->final_norm = before && !removed;
    t->layout = LAYOUT_OPT;
    return 0;
}

/* BertForMaskedLM / BertLMHeadModel: word (V*h), position (P*h) and token-type (T*h)
 * embeddings + LayerNorm; per block query/key/value/output dense (h x h + h), LayerNorm,
 * intermediate (h x f + f), output (f x h + h), LayerNorm; no pooler; cls.predictions:
 * transform dense (h x h + h) + LayerNorm, decoder tied to the word embeddings + bias V.
 * BertForPreTraining adds the pooler (h x h + h) and seq_relationship (h x 2 + 2). */
static int read_bert(LoadCtx *c, const cJSON *root, const char *cls, HfBuild *b) {
    TransformerConfig *t = &b->t;
    char pos_type[32];
    (void)cls;
    if (ld_int(c, root, "", "vocab_size", 1, 0, 1, MAX_VOCAB, &t->vocab) ||
        ld_int(c, root, "", "hidden_size", 1, 0, 1, MAX_HIDDEN, &t->d_model) ||
        ld_int(c, root, "", "intermediate_size", 1, 0, 1, MAX_FFN, &t->d_ff) ||
        ld_int32(c, root, "", "num_hidden_layers", 1, 0, 1, MAX_LAYERS, &t->n_layer) ||
        ld_int32(c, root, "", "num_attention_heads", 1, 0, 1, MAX_HEADS, &t->n_head) ||
        ld_int(c, root, "", "max_position_embeddings", 1, 0, 1, MAX_CTX, &t->max_seq) ||
        ld_int32(c, root, "", "type_vocab_size", 0, 2, 0, MAX_HEADS, &t->type_vocab) ||
        ld_str(c, root, "", "position_embedding_type", 0, "absolute", pos_type,
               sizeof(pos_type)) ||
        tied(c, root, 1, b) || act(c, root, "hidden_act", "gelu", b) ||
        dropout(c, root, "hidden_dropout_prob", 0.1, b))
        return -1;
    if (strcmp(pos_type, "absolute") != 0)
        return ld_fail(c, "position_embedding_type '%s' is not supported (only 'absolute')",
                       pos_type);
    t->arch = ARCH_ENCODER;
    t->norm = NORM_LAYERNORM;
    t->mlp = mlp_of_act(b->act);
    t->learned_pos = 1;
    t->qkv_bias = t->out_bias = t->mlp_bias = t->norm_bias = 1;
    t->mlm_head = !hf_headless(cls);
    t->layout = LAYOUT_BERT;
    if (hf_headless(cls)) t->pooler = 1;   /* BertModel: add_pooling_layer=True by default */
    if (strcmp(cls, "BertForPreTraining") == 0) {
        t->pooler = 1;
        t->cls_outputs = 2;   /* next-sentence prediction */
    }
    return 0;
}

/* T5ForConditionalGeneration: shared V*d (both stacks' embed_tokens); per encoder block
 * SelfAttention q/k/v (d x H*dkv), o (H*dkv x d), RMSNorm (d), DenseReluDense wi (d x f) and
 * wo (f x d) — gated v1.1: wi_0, wi_1, wo — RMSNorm; per decoder block also EncDecAttention
 * (same shapes) + RMSNorm; relative_attention_bias (buckets x H) in block 0 of each stack;
 * a final RMSNorm per stack; lm_head V*d unless tied. No biases. */
static int read_t5(LoadCtx *c, const cJSON *root, const char *cls, HfBuild *b) {
    TransformerConfig *t = &b->t;
    char ff[32];
    (void)cls;
    if (ld_int(c, root, "", "vocab_size", 1, 0, 1, MAX_VOCAB, &t->vocab) ||
        ld_int(c, root, "", "d_model", 1, 0, 1, MAX_HIDDEN, &t->d_model) ||
        ld_int(c, root, "", "d_ff", 1, 0, 1, MAX_FFN, &t->d_ff) ||
        ld_int(c, root, "", "d_kv", 1, 0, 1, MAX_HEADS, &t->d_head) ||
        ld_int32(c, root, "", "num_heads", 1, 0, 1, MAX_HEADS, &t->n_head) ||
        ld_int32(c, root, "", "num_layers", 1, 0, 1, MAX_LAYERS, &t->n_enc_layer) ||
        ld_int32(c, root, "", "num_decoder_layers", 0, t->n_enc_layer, 1, MAX_LAYERS,
                 &t->n_layer) ||
        ld_int32(c, root, "", "relative_attention_num_buckets", 0, 32, 1, MAX_HEADS,
                 &t->rel_pos_buckets) ||
        ld_int(c, root, "", "n_positions", 0, 512, 1, MAX_CTX, &t->max_seq) ||
        ld_str(c, root, "", "feed_forward_proj", 0, "relu", ff, sizeof(ff)) ||
        tied(c, root, 1, b) || dropout(c, root, "dropout_rate", 0.1, b))
        return -1;
    /* "relu", "gelu", "gated-gelu", "gated-silu": [gated-]ACT as transformers parses it */
    const char *fn = ff;
    int gated = strncmp(ff, "gated-", 6) == 0;
    if (gated) fn += 6;
    if (!fn[0] || strchr(fn, '-'))
        return ld_fail(c, "field 'feed_forward_proj' must be ACT or gated-ACT (got '%s')", ff);
    snprintf(b->act, sizeof(b->act), "%s", ff);
    t->act_fn = b->act;
    t->arch = ARCH_ENC_DEC;
    t->norm = NORM_RMSNORM;
    t->mlp = gated ? MLP_SWIGLU : mlp_of_act(fn);
    t->final_norm = 1;
    t->layout = LAYOUT_T5;
    /* transformers 5 ties T5's head whatever the config says: T5Config pops
       tie_word_embeddings into scale_decoder_outputs and sets tie_word_embeddings = True
       (models/t5/configuration_t5.py); measured 222,903,552 parameters for t5-v1_1-base */
    t->tied = 1;
    return 0;
}

/* Edit distance of two short strings (model_type names), capped at 64 characters. */
static int edit_distance(const char *a, const char *b) {
    int la = (int)strlen(a), lb = (int)strlen(b), d[65];
    if (la > 64 || lb > 64) return 99;
    for (int j = 0; j <= lb; j++) d[j] = j;
    for (int i = 1; i <= la; i++) {
        int prev = d[0];
        d[0] = i;
        for (int j = 1; j <= lb; j++) {
            int cur = d[j], sub = prev + (a[i - 1] != b[j - 1]);
            d[j] = sub < d[j] + 1 ? sub : d[j] + 1;
            if (d[j - 1] + 1 < d[j]) d[j] = d[j - 1] + 1;
            prev = cur;
        }
    }
    return d[lb];
}

/* The supported model_type closest to an unknown one ("qwen3_next" -> qwen3, "gemma4" ->
   gemma), or NULL when none is within half its length. */
static const char *nearest_type(const char *type) {
    const char *best = NULL;
    int bd = 99;
    for (int i = 0; i < N_HF_TYPES; i++) {
        const char *k = HF_TYPES[i].type;
        size_t n = strlen(k);
        /* a known name followed by a suffix ("qwen3_next", "llama4") counts as its distance from
           the prefix alone, so variants find their family */
        int d = strncmp(type, k, n) == 0 ? 1 : edit_distance(type, k);
        if (d < bd) { bd = d; best = k; }
    }
    return bd <= (int)strlen(type) / 2 ? best : NULL;
}

int ld_hf_config(ModelSpec *m, const cJSON *root, LoadCtx *c) {
    char type[64] = "", cls[96] = "";
    const cJSON *archs = cJSON_GetObjectItemCaseSensitive(root, "architectures");
    if (ld_str(c, root, "", "model_type", 0, "", type, sizeof(type))) return -1;
    /* null or [] say nothing; then model_type alone decides */
    if (archs && !cJSON_IsNull(archs) && !(cJSON_IsArray(archs) && !archs->child)) {
        const cJSON *a0 = cJSON_IsArray(archs) ? archs->child : NULL;
        if (!a0 || !cJSON_IsString(a0) || !a0->valuestring) {
            char got[64];
            ld_describe(a0 ? a0 : archs, got, sizeof(got));
            return ld_fail(c, "field 'architectures' must be a list of class names (got %s)", got);
        }
        snprintf(cls, sizeof(cls), "%s", a0->valuestring);
    }
    const HfType *ht = NULL;
    for (int i = 0; i < N_HF_TYPES && !ht; i++) {
        if (type[0]) {
            if (strcmp(HF_TYPES[i].type, type) == 0) ht = &HF_TYPES[i];
        } else {
            for (int k = 0; k < HF_MAX_CLASSES && HF_TYPES[i].classes[k]; k++)
                if (strcmp(HF_TYPES[i].classes[k], cls) == 0) ht = &HF_TYPES[i];
        }
    }
    if (!ht && !type[0] && !cls[0])
        return ld_fail(c, "missing field 'model_type' (and no class in 'architectures')");
    if (!ht) {
        const char *got = type[0] ? type : cls, *near = type[0] ? nearest_type(type) : NULL;
        char hint[96] = "";
        if (near) snprintf(hint, sizeof hint, "; nearest: '%s', if it is a variant of it", near);
        /* a multimodal wrapper (Llama 4, Gemma 3 4B+): its language model is a family memplan knows */
        const cJSON *tc = cJSON_GetObjectItemCaseSensitive(root, "text_config");
        const cJSON *tt = cJSON_IsObject(tc) ? cJSON_GetObjectItemCaseSensitive(tc, "model_type") : NULL;
        for (int i = 0; cJSON_IsString(tt) && i < N_HF_TYPES; i++)
            if (strcmp(HF_TYPES[i].type, tt->valuestring) == 0)
                return ld_fail(c, "'%s' is a multimodal model: memplan plans language models; its text model is "
                               "model_type '%s' (save its text_config as a config.json of its own to plan that part; "
                               "the vision tower is not planned)", got, tt->valuestring);
        snprintf(c->msg, c->msglen, "unsupported architecture '%s' in %s (supported: %s%s); plan it from its "
                 "parameter list instead: a params.json of {name: shape} from model.named_parameters(), or "
                 "--params N (docs/model-formats.md)", got, c->label, plan_load_hf_types(), hint);
        return -1;
    }
    if (cls[0]) {
        int ok = 0;
        for (int k = 0; k < HF_MAX_CLASSES && ht->classes[k] && !ok; k++) ok = strcmp(ht->classes[k], cls) == 0;
        if (!ok) {
            char list[160];
            size_t n = 0;
            for (int k = 0; k < HF_MAX_CLASSES && ht->classes[k]; k++)
                n += (size_t)snprintf(list + n, sizeof(list) - n, "%s%s", k ? ", " : "",
                                      ht->classes[k]);
            return ld_fail(c, "%s model class '%s' is not supported (supported: %s; for another "
                           "head, give a params.json)", ht->type, cls, list);
        }
    } else {
        snprintf(cls, sizeof(cls), "%s", ht->classes[0]);
    }

    HfBuild b;
    memset(&b, 0, sizeof(b));
    const cJSON *nm = cJSON_GetObjectItemCaseSensitive(root, "_name_or_path");
    if (cJSON_IsString(nm) && nm->valuestring && nm->valuestring[0] &&
        strlen(nm->valuestring) < sizeof(b.name)) {
        snprintf(b.name, sizeof(b.name), "%s", nm->valuestring);
    } else {
        /* absent, or too long to keep (a local path): the file's name is the better label */
        ld_name_from_label(c->label, b.name, sizeof(b.name));
    }
    b.t.name = b.name;
    b.t.family = ht->type;
    if (ht->read(c, root, cls, &b)) {
        hf_build_free(&b);
        return -1;
    }
    b.t.headless = hf_headless(cls);
    char err[256];
    int rc = plan_model_transformer(m, &b.t, err, sizeof(err));
    hf_build_free(&b);
    if (rc) return ld_fail(c, "%s", err);
    return 0;
}
