/* plan_zoo.c — the built-in model table (architecture configs from the Hugging Face hub's
 * config.json files and torchvision) and the ResNet builder. `memplan models` lists each entry
 * with its parameter count; docs/model-formats.md ("Published counts the tests check") gives the
 * published counts they match and how each is derived. */
#include "plan_zoo.h"

#include <stdio.h>
#include <string.h>

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

static const ZooEntry ZOO[] = {
    {"gpt2-tiny", "gpt2", "memplan test shape (2 layers, 64 hidden)"},
    {"gpt2-mini", "gpt2", "memplan test shape (4 layers, 128 hidden)"},
    {"gpt2", "gpt2", "HF GPT2LMHeadModel, 124,439,808"},
    {"gpt2-medium", "gpt2", "HF GPT2LMHeadModel, 354,823,168"},
    {"gpt2-large", "gpt2", "HF GPT2LMHeadModel, 774,030,080"},
    {"gpt2-xl", "gpt2", "HF GPT2LMHeadModel, 1,557,611,200"},
    {"llama2-7b", "llama2", "HF LlamaForCausalLM, 6,738,415,616"},
    {"llama2-13b", "llama2", "HF LlamaForCausalLM, 13,015,864,320"},
    {"llama2-70b", "llama2", "HF LlamaForCausalLM, 68,976,648,192"},
    {"bert-base", "bert", "HF BertForMaskedLM, 109,514,298"},
    {"bert-large", "bert", "HF BertForMaskedLM, 335,174,458"},
    {"resnet50", "resnet", "torchvision resnet50, 25,557,032"},
};
#define N_ZOO ((int)(sizeof(ZOO) / sizeof(ZOO[0])))

int plan_zoo_count(void) { return N_ZOO; }
const ZooEntry *plan_zoo_entry(int i) { return (i >= 0 && i < N_ZOO) ? &ZOO[i] : NULL; }

const char *plan_zoo_names(void) {
    static char buf[512];
    if (!buf[0]) {
        size_t n = 0;
        for (int i = 0; i < N_ZOO; i++)
            n += (size_t)snprintf(buf + n, sizeof(buf) - n, "%s%s", i ? ", " : "", ZOO[i].name);
    }
    return buf;
}

static const TransformerConfig *plan_zoo_transformer_config(const char *name) {
    for (int i = 0; i < N_TRANSFORMERS; i++)
        if (strcmp(TRANSFORMERS[i].name, name) == 0) return &TRANSFORMERS[i];
    return NULL;
}

int plan_zoo_build(ModelSpec *m, const char *name, char *msg, size_t msglen) {
    const TransformerConfig *c = plan_zoo_transformer_config(name);
    if (c) return plan_model_transformer(m, c, msg, msglen);
    if (strcmp(name, "resnet50") == 0) {
        static const int depths[4] = {3, 4, 6, 3};
        return plan_model_resnet(m, "resnet50", depths, 1, 64, 224, 1000, msg, msglen);
    }
    snprintf(msg, msglen, "unknown model '%s' (valid: %s, a path to a Hugging Face config.json, a params.json or a memplan model JSON, or "
             "--params N)", name, plan_zoo_names());
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
    l.act_fp32_elems = 2 * (int64_t)cout;           /* saved mean, invstd */
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

int plan_zoo_has(const char *name) {
    for (int i = 0; i < plan_zoo_count(); i++)
        if (strcmp(plan_zoo_entry(i)->name, name) == 0) return 1;
    return 0;
}
