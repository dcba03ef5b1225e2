/* plan_load_hf.c — Hugging Face config.json → TransformerConfig → ModelSpec. Each supported
 * model_type is one row of HF_TYPES: its accepted architecture classes and a reader that maps
 * the config's keys (with the defaults of transformers' configuration class for keys a saved
 * config may omit) onto the shared transformer builder. docs/model-formats.md gives each
 * architecture's parameter formula and the published count it is tested against. */
#include <stdio.h>
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
} HfBuild;

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
    {"gpt_neox", {"GPTNeoXForCausalLM"}, read_gpt_neox},
    {"opt", {"OPTForCausalLM"}, read_opt},
    {"bert", {"BertForMaskedLM", "BertLMHeadModel", "BertForPreTraining", "BertModel"}, read_bert},
    {"t5", {"T5ForConditionalGeneration", "T5WithLMHeadModel", "T5Model"}, read_t5},
};
#define N_HF_TYPES ((int)(sizeof(HF_TYPES) / sizeof(HF_TYPES[0])))

/* Base classes: the transformer without an output head. They return hidden states, so they
 * have no logits and no loss (transformers: GPT2Model, LlamaModel, ... T5Model). */
static const char *const HF_HEADLESS[] = {"GPT2Model", "LlamaModel", "MistralModel", "Qwen2Model",
                                          "GemmaModel", "BertModel", "T5Model"};

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

/* LLaMA-family variants: what differs between the four model types that share one layout
 * (RMSNorm, gated MLP, RoPE, no positions table). Defaults are transformers' config classes. */
typedef struct {
    const char *type;
    int tied;                  /* tie_word_embeddings default */
    int qkv_bias;              /* q/k/v biases always present (Qwen2) */
    int has_attention_bias;    /* reads attention_bias (q, k, v and o) */
    int has_mlp_bias;          /* reads mlp_bias (gate, up, down) */
    int64_t head_dim;          /* head_dim default (0 = hidden / heads) */
    const char *act;           /* hidden_act default */
    int64_t max_pos;           /* max_position_embeddings default (no parameters depend on it) */
} LlamaVariant;

static const LlamaVariant LLAMA_VARIANTS[] = {
    {"llama", 0, 0, 1, 1, 0, "silu", 2048},
    {"mistral", 0, 0, 0, 0, 0, "silu", 4096 * 32},
    {"qwen2", 0, 1, 0, 0, 0, "silu", 32768},
    {"gemma", 1, 0, 1, 0, 256, "gelu_pytorch_tanh", 8192},
};

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

/* LlamaForCausalLM and its relatives: embed_tokens V*h; per block q (h x A*d), k and v
 * (h x KV*d), o (A*d x h), gate/up (h x f), down (f x h), two RMSNorms (h); norm (h); lm_head
 * V*h unless tied. Qwen2 adds q/k/v biases; attention_bias adds q/k/v/o biases, mlp_bias
 * gate/up/down biases. */
static int read_llama_like(LoadCtx *c, const cJSON *root, const char *cls, HfBuild *b) {
    const LlamaVariant *v = NULL;
    char type[32];
    if (ld_str(c, root, "", "model_type", 0, "", type, sizeof(type))) return -1;
    for (size_t i = 0; i < sizeof(LLAMA_VARIANTS) / sizeof(LLAMA_VARIANTS[0]); i++)
        if (strcmp(LLAMA_VARIANTS[i].type, type) == 0) v = &LLAMA_VARIANTS[i];
    if (!v) {   /* known only from its class name */
        for (size_t i = 0; i < sizeof(LLAMA_VARIANTS) / sizeof(LLAMA_VARIANTS[0]); i++)
            for (int k = 0; k < N_HF_TYPES; k++)
                if (strcmp(HF_TYPES[k].type, LLAMA_VARIANTS[i].type) == 0 &&
                    strcmp(HF_TYPES[k].classes[0], cls) == 0)
                    v = &LLAMA_VARIANTS[i];
    }
    if (!v) return ld_fail(c, "internal error: no LLaMA variant for '%s'", cls);
    TransformerConfig *t = &b->t;
    int attn_bias = 0, mlp_bias = 0;
    if (ld_int(c, root, "", "vocab_size", 1, 0, 1, MAX_VOCAB, &t->vocab) ||
        ld_int(c, root, "", "hidden_size", 1, 0, 1, MAX_HIDDEN, &t->d_model) ||
        ld_int(c, root, "", "intermediate_size", 1, 0, 1, MAX_FFN, &t->d_ff) ||
        ld_int32(c, root, "", "num_hidden_layers", 1, 0, 1, MAX_LAYERS, &t->n_layer) ||
        ld_int32(c, root, "", "num_attention_heads", 1, 0, 1, MAX_HEADS, &t->n_head) ||
        ld_int32(c, root, "", "num_key_value_heads", 0, t->n_head, 1, MAX_HEADS, &t->n_kv_head) ||
        ld_int(c, root, "", "head_dim", 0, v->head_dim, 1, MAX_HEADS, &t->d_head) ||
        ld_int(c, root, "", "max_position_embeddings", 0, v->max_pos, 1, MAX_CTX, &t->max_seq) ||
        tied(c, root, v->tied, b) || act(c, root, "hidden_act", v->act, b) ||
        dropout(c, root, "attention_dropout", 0.0, b))
        return -1;
    if (v->has_attention_bias && ld_bool(c, root, "", "attention_bias", 0, 0, 0, &attn_bias))
        return -1;
    if (v->has_mlp_bias && ld_bool(c, root, "", "mlp_bias", 0, 0, 0, &mlp_bias)) return -1;
    /* Gemma names its activation hidden_activation in later configs; it wins when present */
    if (strcmp(v->type, "gemma") == 0 && cJSON_IsString(cJSON_GetObjectItemCaseSensitive(
                                             root, "hidden_activation")) &&
        act(c, root, "hidden_activation", v->act, b))
        return -1;
    t->arch = ARCH_DECODER;
    t->norm = NORM_RMSNORM;
    t->mlp = MLP_SWIGLU;       /* gated: SwiGLU, or GeGLU for Gemma (same shapes) */
    t->qkv_bias = v->qkv_bias || attn_bias;
    t->out_bias = attn_bias;
    t->mlp_bias = mlp_bias;
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
        snprintf(c->msg, c->msglen, "unsupported architecture '%s' in %s (supported: %s)",
                 type[0] ? type : cls, c->label, plan_load_hf_types());
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
    if (ht->read(c, root, cls, &b)) return -1;
    b.t.headless = hf_headless(cls);
    char err[256];
    if (plan_model_transformer(m, &b.t, err, sizeof(err))) return ld_fail(c, "%s", err);
    return 0;
}
