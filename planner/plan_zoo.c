/* plan_zoo.c — the built-in model table (the published config.json of each checkpoint, compiled
 * in; shape tables for GPT-2, LLaMA-2, BERT; torchvision) and the ResNet builder. `memplan models`
 * lists each entry; docs/models.md gives the lookup order and the sources, docs/model-formats.md
 * ("Published counts the tests check") the counts they match and how each is derived. */
#include "plan_zoo.h"

#include <ctype.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "plan_load.h"

/* GPT-2 (GPT2LMHeadModel): learned positions, LayerNorm with bias, biases everywhere, tied
 * head, gelu_new written out in eager PyTorch, dropout 0.1 (resid/embd/attn_pdrop). */
#define GPT2(nm, L, H, A) {.name = nm, .arch = ARCH_DECODER, .n_layer = L, .d_model = H, \
    .d_ff = 4 * (H), .vocab = 50257, .max_seq = 1024, .n_head = A, .norm = NORM_LAYERNORM, \
    .mlp = MLP_GELU_NEW, .tied = 1, .learned_pos = 1, .qkv_bias = 1, .out_bias = 1, \
    .mlp_bias = 1, .norm_bias = 1, .final_norm = 1, .dropout = 0.1, .layout = LAYOUT_GPT2, .family = "gpt2"}
/* LLaMA-2 (LlamaForCausalLM): RoPE, RMSNorm, SwiGLU, no biases, untied head, no dropout. */
#define LLAMA2(nm, L, H, A, KV, F) {.name = nm, .arch = ARCH_DECODER, .n_layer = L, \
    .d_model = H, .d_ff = F, .vocab = 32000, .max_seq = 4096, .n_head = A, .n_kv_head = KV, \
    .norm = NORM_RMSNORM, .mlp = MLP_SWIGLU, .final_norm = 1, .dropout = 0.0, .family = "llama"}
/* BERT (BertForMaskedLM: no pooler; MLM transform + decoder bias, decoder weight tied). */
#define BERT(nm, L, H, A) {.name = nm, .arch = ARCH_ENCODER, .n_layer = L, .d_model = H, \
    .d_ff = 4 * (H), .vocab = 30522, .max_seq = 512, .n_head = A, .norm = NORM_LAYERNORM, \
    .mlp = MLP_GELU, .tied = 1, .learned_pos = 1, .type_vocab = 2, .qkv_bias = 1, \
    .out_bias = 1, .mlp_bias = 1, .norm_bias = 1, .mlm_head = 1, .dropout = 0.1, .layout = LAYOUT_BERT, .family = "bert"}

static const TransformerConfig TRANSFORMERS[] = {
    /* small shapes for the executor's tests (not Hugging Face models) */
    {.name = "gpt2-tiny", .arch = ARCH_DECODER, .n_layer = 2, .d_model = 64, .d_ff = 256,
     .vocab = 256, .max_seq = 64, .n_head = 4, .norm = NORM_LAYERNORM, .mlp = MLP_GELU_NEW,
     .tied = 1, .learned_pos = 1, .qkv_bias = 1, .out_bias = 1, .mlp_bias = 1, .norm_bias = 1,
     .final_norm = 1, .dropout = 0.0, .layout = LAYOUT_GPT2, .family = "gpt2"},
    {.name = "gpt2-mini", .arch = ARCH_DECODER, .n_layer = 4, .d_model = 128, .d_ff = 512,
     .vocab = 1024, .max_seq = 128, .n_head = 4, .norm = NORM_LAYERNORM, .mlp = MLP_GELU_NEW,
     .tied = 1, .learned_pos = 1, .qkv_bias = 1, .out_bias = 1, .mlp_bias = 1, .norm_bias = 1,
     .final_norm = 1, .dropout = 0.0, .layout = LAYOUT_GPT2, .family = "gpt2"},
    GPT2("gpt2", 12, 768, 12),
    GPT2("gpt2-medium", 24, 1024, 16),
    GPT2("gpt2-large", 36, 1280, 20),
    GPT2("gpt2-xl", 48, 1600, 25),
    LLAMA2("llama2-7b", 32, 4096, 32, 32, 11008),
    LLAMA2("llama2-13b", 40, 5120, 40, 40, 13824),
    LLAMA2("llama2-70b", 80, 8192, 64, 8, 28672),
    BERT("bert-base", 12, 768, 12),
    BERT("bert-large", 24, 1024, 16),
};
#define N_TRANSFORMERS ((int)(sizeof(TRANSFORMERS) / sizeof(TRANSFORMERS[0])))

/* The zoo: one row per model. Built from `config` (compiled in) unless the name is in
 * TRANSFORMERS above or is resnet50. Sources: docs/model-formats.md "Sources" has each config's
 * in full (the hub was not reachable: configs were rebuilt from public copies of their values). */
#define LLMPROF "LLM-Prof sglang/Model_Config.md @8434c8d (verbatim config.json)"
#define MLC "mlc-llm python/mlc_llm/model/model_preset.py @79d603f"
#define MAXTEXT "maxtext checkpoint_conversion/utils/hf_model_configs.py @e591f30"
#define PUBLISHED "its published config.json (docs/model-formats.md, Published counts)"
static const ZooEntry ZOO[] = {
    /* memplan's test shapes and the models of 2019-23 (shape tables above) */
    {"gpt2-tiny", NULL, "gpt2", NULL, "memplan test shape (2 layers, 64 hidden)"},
    {"gpt2-mini", NULL, "gpt2", NULL, "memplan test shape (4 layers, 128 hidden)"},
    {"gpt2", "openai-community/gpt2", "gpt2", "gpt2", "GPT2Config defaults = " PUBLISHED},
    {"gpt2-medium", "openai-community/gpt2-medium", "gpt2", NULL, "published config.json (24 layers, 1024 hidden, 16 heads)"},
    {"gpt2-large", "openai-community/gpt2-large", "gpt2", NULL, "published config.json (36 layers, 1280 hidden, 20 heads)"},
    {"gpt2-xl", "openai-community/gpt2-xl", "gpt2", NULL, "published config.json (48 layers, 1600 hidden, 25 heads)"},
    {"llama2-7b", "meta-llama/Llama-2-7b-hf", "llama2", "llama-2-7b", PUBLISHED},
    {"llama2-13b", "meta-llama/Llama-2-13b-hf", "llama2", NULL, "published config.json (40 layers, 5120 hidden, ffn 13824)"},
    {"llama2-70b", "meta-llama/Llama-2-70b-hf", "llama2", NULL, "published config.json (80 layers, 8192 hidden, 8 KV heads)"},
    {"bert-base", "google-bert/bert-base-uncased", "bert", "bert-base-uncased", PUBLISHED},
    {"bert-large", "google-bert/bert-large-uncased", "bert", NULL, "published config.json (24 layers, 1024 hidden, 16 heads)"},
    {"resnet50", NULL, "resnet", NULL, "torchvision.models.resnet50"},
    /* the published configs of tests/data/hf (the models of 2024-26 and a few older ones) */
    {"llama3-8b", "meta-llama/Meta-Llama-3-8B", "llama3", "llama-3-8b", PUBLISHED},
    {"llama3.1-8b", "meta-llama/Llama-3.1-8B", "llama3", "llama-3.1-8b", LLMPROF "; " MLC " llama3_1_8b"},
    {"llama3.1-70b", "meta-llama/Llama-3.1-70B", "llama3", "llama-3.1-70b", MLC " llama3_1_70b; " MAXTEXT " llama31_70b_config"},
    {"llama3.2-1b", "meta-llama/Llama-3.2-1B", "llama3", "llama-3.2-1b", PUBLISHED},
    {"llama3.2-3b", "meta-llama/Llama-3.2-3B", "llama3", "llama-3.2-3b", LLMPROF "; " MLC " llama3_2_3b"},
    {"llama4-scout-17b-16e", "meta-llama/Llama-4-Scout-17B-16E", "llama4", "llama-4-scout-17b-16e-text",
     "the text model (Llama4ForCausalLM) of the checkpoint: maxtext configs/models/llama4-17b-16e.yml; Megatron-Bridge llama_provider.py @0015c0f"},
    {"llama4-maverick-17b-128e", "meta-llama/Llama-4-Maverick-17B-128E", "llama4", "llama-4-maverick-17b-128e-text",
     "the text model (Llama4ForCausalLM) of the checkpoint: maxtext configs/models/llama4-17b-128e.yml; Megatron-Bridge Llama4Experts128ModelProvider"},
    {"qwen2-0.5b", "Qwen/Qwen2-0.5B", "qwen2", "qwen2-0.5b", PUBLISHED},
    {"qwen2.5-0.5b", "Qwen/Qwen2.5-0.5B", "qwen2.5", "qwen2.5-0.5b", "a markdown copy of the checkpoint's config.json; i6_experiments qwen2_configs.py"},
    {"qwen2.5-7b", "Qwen/Qwen2.5-7B", "qwen2.5", "qwen2.5-7b", LLMPROF "; " MAXTEXT " qwen25_7b_config"},
    {"qwen1.5-moe-a2.7b", "Qwen/Qwen1.5-MoE-A2.7B", "qwen1.5", "qwen1.5-moe-a2.7b", MLC " qwen2moe; transformers Qwen2MoeConfig defaults"},
    {"qwen3-0.6b", "Qwen/Qwen3-0.6B", "qwen3", "qwen3-0.6b", MLC " qwen3_0.6b"},
    {"qwen3-8b", "Qwen/Qwen3-8B", "qwen3", "qwen3-8b", LLMPROF "; " MAXTEXT " qwen3_8b_config"},
    {"qwen3-14b", "Qwen/Qwen3-14B", "qwen3", "qwen3-14b", LLMPROF "; " MAXTEXT " qwen3_14b_config"},
    {"qwen3-32b", "Qwen/Qwen3-32B", "qwen3", "qwen3-32b", LLMPROF "; " MAXTEXT " qwen3_32b_config"},
    {"qwen3-30b-a3b", "Qwen/Qwen3-30B-A3B", "qwen3", "qwen3-30b-a3b", LLMPROF "; " MAXTEXT " qwen3_30b_a3b_base_config"},
    {"qwen3-235b-a22b", "Qwen/Qwen3-235B-A22B", "qwen3", "qwen3-235b-a22b", MAXTEXT " qwen3_235b_a22b_thinking_2507_config (same shapes)"},
    {"qwen3-coder-480b-a35b", "Qwen/Qwen3-Coder-480B-A35B-Instruct", "qwen3", "qwen3-coder-480b-a35b-instruct", MAXTEXT " qwen3_coder_480b_a35b_config"},
    {"gemma-2b", "google/gemma-2b", "gemma", "gemma-2b", PUBLISHED},
    {"gemma2-2b", "google/gemma-2-2b", "gemma2", "gemma-2-2b", MLC " gemma2_2b; " MAXTEXT " gemma2_2b_config"},
    {"gemma2-9b", "google/gemma-2-9b", "gemma2", "gemma-2-9b", MLC " gemma2_9b; " MAXTEXT " gemma2_9b_config"},
    {"gemma2-27b", "google/gemma-2-27b", "gemma2", "gemma-2-27b", MLC " gemma2_27b; " MAXTEXT " gemma2_27b_config"},
    {"gemma3-270m", "google/gemma-3-270m", "gemma3", "gemma-3-270m", "GGUF metadata of the converted checkpoint (ollama sam860/gemma3:270m); keras-hub gemma3_presets.py"},
    {"gemma3-1b-it", "google/gemma-3-1b-it", "gemma3", "gemma-3-1b-it", MLC " gemma3_1b_it"},
    {"mistral-7b-v0.1", "mistralai/Mistral-7B-v0.1", "mistral", "mistral-7b-v0.1", PUBLISHED},
    {"mistral-7b-v0.3", "mistralai/Mistral-7B-v0.3", "mistral", "mistral-7b-v0.3", MLC " mistral_7b_v03"},
    {"mistral-nemo-12b", "mistralai/Mistral-Nemo-Base-2407", "mistral", "mistral-nemo-base-2407", "thunder_model_blocks mistral_config.py @5c083b0 (verbatim config.json)"},
    {"mixtral-8x7b", "mistralai/Mixtral-8x7B-v0.1", "mixtral", "mixtral-8x7b-v0.1", MLC " Mixtral-8x7B-v0.1; maxtext mixtral_8x7b_dict"},
    {"mixtral-8x22b", "mistralai/Mixtral-8x22B-v0.1", "mixtral", "mixtral-8x22b-v0.1", "maxtext mixtral_8x22b_dict; Cerebras modelzoo params_mixtral_8x22b.yaml @f1fd1e0 (vocabulary)"},
    {"phi3-mini-4k", "microsoft/Phi-3-mini-4k-instruct", "phi3", "phi-3-mini-4k-instruct", "mlc-llm @f2b1ffe preset phi-3; transformers Phi3Config defaults"},
    {"phi3-medium-4k", "microsoft/Phi-3-medium-4k-instruct", "phi3", "phi-3-medium-4k-instruct", "apxml.com/models/phi-3-medium; the other keys as phi3-mini-4k"},
    {"olmo2-7b", "allenai/OLMo-2-1124-7B", "olmo2", "olmo-2-1124-7b", MLC " olmo2_7b; transformers Olmo2Config"},
    {"olmo2-13b", "allenai/OLMo-2-1124-13B", "olmo2", "olmo-2-1124-13b", MLC " olmo2_13b"},
    {"granite3.1-8b", "ibm-granite/granite-3.1-8b-base", "granite3", "granite-3.1-8b-base", "foundation-model-stack fms/models/granite.py @00b9af6 _8b_config"},
    {"smollm3-3b", "HuggingFaceTB/SmolLM3-3B", "smollm3", "smollm3-3b", "transformers configuration_smollm3.py defaults; huggingface/blog smollm3.md"},
    {"starcoder2-3b", "bigcode/starcoder2-3b", "starcoder2", "starcoder2-3b", "transformers Starcoder2Config defaults"},
    {"starcoder2-7b", "bigcode/starcoder2-7b", "starcoder2", "starcoder2-7b", MLC " starcoder2"},
    {"deepseek-v3", "deepseek-ai/DeepSeek-V3", "deepseek-v3", "deepseek-v3", "maxtext deepseek3_671b_dict (from the hub's config.json)"},
    {"moonlight-16b-a3b", "moonshotai/Moonlight-16B-A3B", "moonlight", "moonlight-16b-a3b", "Megatron-Bridge deepseek_provider.py @0015c0f MoonlightModelProvider16B"},
    {"gpt-oss-20b", "openai/gpt-oss-20b", "gpt-oss", "gpt-oss-20b", "maxtext gpt_oss_20b_dict (from the hub's config.json)"},
    {"gpt-oss-120b", "openai/gpt-oss-120b", "gpt-oss", "gpt-oss-120b", "maxtext gpt_oss_120b_dict (from the hub's config.json)"},
    {"opt-125m", "facebook/opt-125m", "opt", "opt-125m", PUBLISHED},
    {"opt-350m", "facebook/opt-350m", "opt", "opt-350m", PUBLISHED},
    {"pythia-160m", "EleutherAI/pythia-160m", "pythia", "pythia-160m", PUBLISHED},
    {"t5-base", "google-t5/t5-base", "t5", "t5-base", PUBLISHED},
    {"t5-v1.1-base", "google/t5-v1_1-base", "t5", "t5-v1_1-base", PUBLISHED},
};
#define N_ZOO ((int)(sizeof(ZOO) / sizeof(ZOO[0])))

/* build/gen/plan_zoo_configs.c (scripts/zoo_embed.sh): every .json of tests/data/hf but counts.json */
typedef struct {
    const char *stem;   /* "llama-3.1-8b" */
    const char *text;   /* the file's bytes */
} ZooConfigText;
extern const ZooConfigText PLAN_ZOO_CONFIGS[];
extern const int PLAN_ZOO_N_CONFIGS;

int plan_zoo_count(void) { return N_ZOO; }
const ZooEntry *plan_zoo_entry(int i) { return (i >= 0 && i < N_ZOO) ? &ZOO[i] : NULL; }

int plan_zoo_config_count(void) { return PLAN_ZOO_N_CONFIGS; }
const char *plan_zoo_config_text(const char *stem) {
    for (int i = 0; stem && i < PLAN_ZOO_N_CONFIGS; i++)
        if (strcmp(PLAN_ZOO_CONFIGS[i].stem, stem) == 0) return PLAN_ZOO_CONFIGS[i].text;
    return NULL;
}

const ZooEntry *plan_zoo_find(const char *name) {
    for (int i = 0; name && i < N_ZOO; i++)
        if (strcasecmp(ZOO[i].name, name) == 0 || (ZOO[i].hub_id && strcasecmp(ZOO[i].hub_id, name) == 0))
            return &ZOO[i];
    return NULL;
}

int plan_zoo_has(const char *name) { return plan_zoo_find(name) != NULL; }

const char *plan_zoo_hint(void) {
    static char buf[160];
    if (!buf[0])
        snprintf(buf, sizeof buf, "e.g. llama3.1-8b, qwen3-30b-a3b, gpt2-xl; `memplan models` lists all %d", N_ZOO);
    return buf;
}

int plan_zoo_family_known(const char *f) {
    for (int i = 0; f && i < N_ZOO; i++)
        if (strcasecmp(ZOO[i].family, f) == 0) return 1;
    return 0;
}

const char *plan_zoo_families(char *buf, size_t len) {
    size_t n = 0;
    if (len) buf[0] = 0;
    for (int i = 0; i < N_ZOO; i++) {
        int seen = 0;
        for (int k = 0; k < i && !seen; k++) seen = strcmp(ZOO[k].family, ZOO[i].family) == 0;
        if (seen || n >= len) continue;
        int w = snprintf(buf + n, len - n, "%s%s", n ? ", " : "", ZOO[i].family);
        n = w < 0 ? len : n + (size_t)w;
    }
    return buf;
}

/* Levenshtein distance of a and b, case-insensitive (names are short: at most 63 compared). */
static int edit_distance(const char *a, const char *b) {
    int la = (int)strnlen(a, 63), lb = (int)strnlen(b, 63), row[64];
    for (int j = 0; j <= lb; j++) row[j] = j;
    for (int i = 1; i <= la; i++) {
        int diag = row[0];
        row[0] = i;
        for (int j = 1; j <= lb; j++) {
            int up = row[j], sub = diag + (tolower((unsigned char)a[i - 1]) != tolower((unsigned char)b[j - 1]));
            int best = up + 1 < row[j - 1] + 1 ? up + 1 : row[j - 1] + 1;
            row[j] = sub < best ? sub : best;
            diag = up;
        }
    }
    return row[lb];
}

/* How near name is to candidate: a candidate containing name comes first, the closer in length
   the nearer (0 .. 0.99); otherwise the edit distance (1 and up). */
static double nearness(const char *name, const char *candidate) {
    size_t ln = strlen(name), lc = strlen(candidate);
    if (ln && strcasestr(candidate, name)) return (double)(lc - ln) / (double)(lc + 1);
    return edit_distance(name, candidate);
}

/* How near name is to entry e: to its alias, its hub id, or the hub id's part after '/' (what a
   user who leaves out the organisation, or gets it wrong, types). *as is what to suggest: the hub id when that was
   nearer than the alias, else the alias. */
static double entry_nearness(const char *name, const ZooEntry *e, const char **as) {
    double d = nearness(name, e->name);
    *as = e->name;
    if (e->hub_id) {
        const char *slash = strchr(e->hub_id, '/');
        const char *qslash = strchr(name, '/'), *qname = qslash ? qslash + 1 : name;   /* the names, orgs aside */
        double dh = nearness(name, e->hub_id), dn = slash ? nearness(qname, slash + 1) : dh;
        if (dn < dh) dh = dn;
        if (dh < d) {
            d = dh;
            *as = e->hub_id;
        }
    }
    return d;
}

const char *plan_zoo_nearest(const char *name, char *buf, size_t len) {
    enum { K = 3 };
    const char *slash = strchr(name, '/');   /* an id's organisation aside: the name decides what is near */
    double half = (double)strlen(slash ? slash + 1 : name) / 2, dist[K], limit = half > 2 ? half : 2;   /* farther: noise */
    int n = 0;
    const char *as[K];
    for (int i = 0; i < N_ZOO; i++) {
        const char *nm;
        double d = entry_nearness(name, &ZOO[i], &nm);
        if (d > limit || (n == K && d >= dist[K - 1])) continue;
        int k = n < K ? n++ : K - 1;
        while (k > 0 && dist[k - 1] > d) {   /* insertion: the earlier entry wins a tie */
            dist[k] = dist[k - 1], as[k] = as[k - 1];
            k--;
        }
        dist[k] = d, as[k] = nm;
    }
    size_t used = 0;
    if (len) buf[0] = 0;
    for (int k = 0; k < n && used < len; k++) {
        int w = snprintf(buf + used, len - used, "%s%s", k ? ", " : "", as[k]);
        used = w < 0 ? len : used + (size_t)w;
    }
    return buf;
}

static const TransformerConfig *plan_zoo_transformer_config(const char *name) {
    for (int i = 0; i < N_TRANSFORMERS; i++)
        if (strcmp(TRANSFORMERS[i].name, name) == 0) return &TRANSFORMERS[i];
    return NULL;
}

int plan_zoo_from_config(const ZooEntry *e) {
    return e->config && !plan_zoo_transformer_config(e->name) && strcmp(e->name, "resnet50") != 0;
}

int plan_zoo_build_entry(ModelSpec *m, const ZooEntry *e, char *msg, size_t msglen) {
    const TransformerConfig *c = plan_zoo_transformer_config(e->name);
    if (c) return plan_model_transformer(m, c, msg, msglen);
    if (strcmp(e->name, "resnet50") == 0) {
        static const int depths[4] = {3, 4, 6, 3};
        return plan_model_resnet(m, "resnet50", depths, 1, 64, 224, 1000, msg, msglen);
    }
    const char *text = plan_zoo_config_text(e->config);
    if (!text) {   /* a build without the generated file's entry: a bug, not a user error */
        snprintf(msg, msglen, "zoo model %s: its config %s.json was not compiled in", e->name, e->config ? e->config : "(none)");
        return -1;
    }
    char label[96];
    snprintf(label, sizeof label, "zoo %s (%s.json)", e->name, e->config);
    if (plan_load_model_from_buffer(m, text, strlen(text), label, msg, msglen)) return -1;
    snprintf(m->name, sizeof m->name, "%s", e->hub_id ? e->hub_id : e->name);
    snprintf(m->source, sizeof m->source, "zoo");
    return 0;
}

int plan_zoo_build(ModelSpec *m, const char *name, char *msg, size_t msglen) {
    const ZooEntry *e = plan_zoo_find(name);
    if (e) return plan_zoo_build_entry(m, e, msg, msglen);
    memset(m, 0, sizeof *m);
    char near[256];
    plan_zoo_nearest(name, near, sizeof near);
    snprintf(msg, msglen, "unknown model '%s' (%s%s%s`memplan models` lists all %d; or give a hub id ORG/NAME, a path to "
             "a config.json, params.json or memplan model file, or --params N)", name, near[0] ? "nearest: " : "", near,
             near[0] ? "; " : "", N_ZOO);
    return -1;
}

/* ---- ResNet ---- */

typedef struct {
    ModelSpec *m;
    int h, w;            /* current spatial size */
    int64_t flops;
    int unit;            /* the residual block being built (FSDP unit, from 1); 0 = stem: root */
} ResnetBuild;

/* conv (no bias) + BatchNorm; relu = 1 when an in-place ReLU follows the BN. Saved tensors
 * (torchvision, eager): the conv saves its input (already counted as the previous tensor),
 * BN saves its input (the conv output) and mean/invstd (C fp32 each); an in-place ReLU saves
 * its output (which the next conv also uses). The BN output before a residual add is freed
 * after the add (the add saves nothing), so it is not counted. */
static int res_conv_bn(ResnetBuild *b, const char *name, int cin, int cout, int k, int stride,
                       int relu) {
    int pad = k / 2;
    int ho = (b->h + 2 * pad - k) / stride + 1, wo = (b->w + 2 * pad - k) / stride + 1;
    LayerSpec l;
    memset(&l, 0, sizeof(l));
    l.kind = LAYER_CONV;
    snprintf(l.name, sizeof(l.name), "%s.conv", name);
    l.params = (int64_t)cin * cout * k * k;
    l.unit = b->unit;
    l.conv_kernel = k;
    l.conv_stride = stride;
    plan_layer_add_tensor_dim0(&l, l.params, cout);  /* weight (out_c, in_c, k, k), no bias */
    l.fwd_flops = 2.0 * cin * k * k * (double)cout * ho * wo;
    l.act_elems = (int64_t)cout * ho * wo;          /* conv output = BN input */
    l.act_known = 1;
    if (!plan_model_add_layer(b->m, &l)) return -1;
    memset(&l, 0, sizeof(l));
    l.kind = LAYER_BN;
    snprintf(l.name, sizeof(l.name), "%s.bn", name);
    l.params = 2 * (int64_t)cout;                   /* weight, bias */
    l.unit = b->unit;
    plan_layer_add_tensor_dim0(&l, cout, cout);
    plan_layer_add_tensor_dim0(&l, cout, cout);
    l.buffers = 2 * (int64_t)cout + 1;              /* running mean, var, num_batches_tracked */
    l.bn_channels = cout;
    l.fwd_flops = 8.0 * cout * ho * wo;
    /* saved mean, invstd: (C,) fp32 each, per layer, from bn_channels (plan_activ.c) */
    l.act_elems = relu ? (int64_t)cout * ho * wo : 0;   /* ReLU output (in place) */
    l.act_known = 1;
    if (!plan_model_add_layer(b->m, &l)) return -1;
    b->h = ho;
    b->w = wo;
    return 0;
}

int plan_model_resnet(ModelSpec *m, const char *name, const int depths[4], int bottleneck,
                      int width, int image_size, int classes, char *msg, size_t msglen) {
    if (image_size < 32 || image_size > 4096 || classes <= 0 || width <= 0) {
        snprintf(msg, msglen, "invalid resnet shape (image %d, classes %d)", image_size, classes);
        return -1;
    }
    plan_model_init(m, name, ARCH_CNN);
    snprintf(m->source, sizeof(m->source), "zoo");
    m->image_size = image_size;
    m->in_channels = 3;
    m->vocab = classes;
    m->max_seq = 1;
    ResnetBuild b = {m, image_size, image_size, 0, 0};
    LayerSpec *first;
    if (res_conv_bn(&b, "stem", 3, width, 7, 2, 1)) goto oom;
    first = &m->layers[0];
    first->act_elems += 3LL * image_size * image_size;   /* the input image, saved by conv1 */
    /* max pool 3x3 s2: saves its input (the ReLU output, counted) and int64 indices */
    b.h = (b.h + 2 - 3) / 2 + 1;
    b.w = (b.w + 2 - 3) / 2 + 1;
    {
        LayerSpec l;
        memset(&l, 0, sizeof(l));
        l.kind = LAYER_OTHER;
        snprintf(l.name, sizeof(l.name), "stem.maxpool");
        l.act_elems = (int64_t)width * b.h * b.w;           /* output = block input */
        l.act_fp32_elems = 2LL * width * b.h * b.w;          /* int64 indices = 2 fp32 */
        l.act_known = 1;
        if (!plan_model_add_layer(m, &l)) goto oom;
    }
    int cin = width, expansion = bottleneck ? 4 : 1;
    for (int s = 0; s < 4; s++) {
        int planes = width << s;
        for (int i = 0; i < depths[s]; i++) {
            int stride = (s > 0 && i == 0) ? 2 : 1;
            char nm[24];
            int h0 = b.h, w0 = b.w;
            snprintf(nm, sizeof(nm), "layer%d.%d", s + 1, i);
            b.unit++;   /* torchvision's Bottleneck / BasicBlock: one FSDP unit each */
            char sub[36];
            if (bottleneck) {
                snprintf(sub, sizeof(sub), "%s.1", nm);
                if (res_conv_bn(&b, sub, cin, planes, 1, 1, 1)) goto oom;
                snprintf(sub, sizeof(sub), "%s.2", nm);
                if (res_conv_bn(&b, sub, planes, planes, 3, stride, 1)) goto oom;
                snprintf(sub, sizeof(sub), "%s.3", nm);
                if (res_conv_bn(&b, sub, planes, planes * expansion, 1, 1, 0)) goto oom;
            } else {
                snprintf(sub, sizeof(sub), "%s.1", nm);
                if (res_conv_bn(&b, sub, cin, planes, 3, stride, 1)) goto oom;
                snprintf(sub, sizeof(sub), "%s.2", nm);
                if (res_conv_bn(&b, sub, planes, planes, 3, 1, 0)) goto oom;
            }
            int ho = b.h, wo = b.w;
            if (stride != 1 || cin != planes * expansion) {
                b.h = h0;
                b.w = w0;
                snprintf(sub, sizeof(sub), "%s.downsample", nm);
                if (res_conv_bn(&b, sub, cin, planes * expansion, 1, stride, 0)) goto oom;
            }
            /* residual add + in-place ReLU: the block output is saved (ReLU, next conv) */
            m->layers[m->n_layers - 1].act_elems += (int64_t)planes * expansion * ho * wo;
            cin = planes * expansion;
        }
    }
    /* global average pool saves nothing but the shape; fc saves its input (C) */
    LayerSpec l;
    memset(&l, 0, sizeof(l));
    l.kind = LAYER_HEAD;
    snprintf(l.name, sizeof(l.name), "fc");
    l.params = (int64_t)cin * classes + classes;
    l.largest_tensor = (int64_t)cin * classes;
    plan_layer_add_tensor_dim0(&l, (int64_t)cin * classes, classes);   /* (classes, C) */
    plan_layer_add_tensor_dim0(&l, classes, classes);
    l.fwd_flops = 2.0 * cin * classes + (double)cin * b.h * b.w;
    l.act_elems = cin + classes;     /* pooled features (fc input), logits */
    l.act_fp32_elems = 2LL * classes; /* fp32 log-softmax output + its upcast input */
    l.act_known = 1;
    if (!plan_model_add_layer(m, &l)) goto oom;
    return 0;
oom:
    snprintf(msg, msglen, "out of host memory building %s", name);
    plan_model_free(m);
    return -1;
}
