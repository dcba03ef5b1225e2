/* test_plan_load.c — models from files: Hugging Face config.json against published parameter
 * counts, params.json exact totals and BatchNorm detection, memplan's own format round trips
 * for every zoo model, and every file of tests/data/bad rejected with a message that names the
 * file and the problem. Run from the repository root (paths are relative to it). */
#include <cjson/cJSON.h>
#include <criterion/criterion.h>
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "plan_fsdp.h"
#include "plan_load.h"
#include "plan_zoo.h"

static char msg[1024];

/* Loads path or fails the test with the loader's message. */
static void load(ModelSpec *m, const char *path) {
    cr_assert_eq(plan_load_model(m, path, msg, sizeof(msg)), 0, "%s", msg);
}

static int64_t count_of(const char *path) {
    ModelSpec m;
    load(&m, path);
    int64_t n = plan_model_params(&m);
    plan_model_free(&m);
    return n;
}

/* ---- Hugging Face config.json: one published count per architecture ---- */

Test(plan_load_hf, gpt2_config_should_count_124439808_parameters_with_the_head_tied) {
    cr_expect_eq(count_of("tests/data/hf/gpt2.json"), 124439808LL);
}

Test(plan_load_hf, llama_2_7b_config_should_count_6738415616_parameters) {
    cr_expect_eq(count_of("tests/data/hf/llama-2-7b.json"), 6738415616LL);
}

Test(plan_load_hf, llama_3_8b_config_should_count_8030261248_parameters_with_grouped_query_attention) {
    ModelSpec m;
    load(&m, "tests/data/hf/llama-3-8b.json");
    cr_expect_eq(plan_model_params(&m), 8030261248LL);
    cr_expect_eq(m.n_head, 32);
    cr_expect_eq(m.n_kv_head, 8);
    cr_expect_eq(m.tied_embeddings, 0);
    plan_model_free(&m);
}

Test(plan_load_hf, llama_3_2_1b_config_should_count_1235814400_parameters_with_a_tied_head) {
    ModelSpec m;
    load(&m, "tests/data/hf/llama-3.2-1b.json");
    cr_expect_eq(plan_model_params(&m), 1235814400LL);
    cr_expect_eq(m.tied_embeddings, 1);
    cr_expect_eq(m.d_head, 64);
    cr_expect_eq(m.max_seq, 131072);
    plan_model_free(&m);
}

Test(plan_load_hf, mistral_7b_config_should_count_7241732096_parameters) {
    cr_expect_eq(count_of("tests/data/hf/mistral-7b-v0.1.json"), 7241732096LL);
}

Test(plan_load_hf, qwen2_0_5b_config_should_count_494032768_parameters_with_qkv_biases) {
    cr_expect_eq(count_of("tests/data/hf/qwen2-0.5b.json"), 494032768LL);
}

Test(plan_load_hf, gemma_2b_config_should_count_2506172416_parameters_and_note_its_activation) {
    ModelSpec m;
    load(&m, "tests/data/hf/gemma-2b.json");
    cr_expect_eq(plan_model_params(&m), 2506172416LL);
    cr_expect_eq(m.d_head, 256);         /* 8 heads x 256 = 2048 = hidden, by config not by division */
    cr_expect_eq(m.n_kv_head, 1);
    cr_expect_eq(m.mlp, MLP_SWIGLU);     /* GeGLU: the same three matrices */
    cr_expect_str_eq(m.act_fn, "gelu");
    plan_model_free(&m);
}

Test(plan_load_hf, pythia_160m_config_should_count_162322944_parameters_with_an_untied_embed_out) {
    cr_expect_eq(count_of("tests/data/hf/pythia-160m.json"), 162322944LL);
}

Test(plan_load_hf, opt_125m_config_should_count_125239296_parameters_with_two_extra_positions) {
    cr_expect_eq(count_of("tests/data/hf/opt-125m.json"), 125239296LL);
}

Test(plan_load_hf, opt_350m_config_should_count_331196416_parameters_with_project_in_and_out) {
    /* word_embed_proj_dim 512 != hidden 1024, and no final LayerNorm (do_layer_norm_before
     * false) */
    cr_expect_eq(count_of("tests/data/hf/opt-350m.json"), 331196416LL);
}

Test(plan_load_hf, bert_base_config_should_count_109514298_parameters_as_bert_for_masked_lm) {
    cr_expect_eq(count_of("tests/data/hf/bert-base-uncased.json"), 109514298LL);
}

Test(plan_load_hf, t5_base_config_should_count_222903552_parameters_as_an_encoder_decoder) {
    ModelSpec m;
    load(&m, "tests/data/hf/t5-base.json");
    cr_expect_eq(plan_model_params(&m), 222903552LL);
    cr_expect_eq(m.arch, ARCH_ENC_DEC);
    cr_expect_eq(m.n_enc_layer, 12);
    cr_expect_eq(m.n_layer, 12);
    cr_expect_eq(m.tied_embeddings, 1);
    /* relative attention bias (32 buckets x 12 heads) only in the first block of each stack */
    cr_expect_eq(m.layers[1].params - m.layers[2].params, 32 * 12);
    cr_expect_eq(m.layers[13].params - m.layers[14].params, 32 * 12);
    plan_model_free(&m);
}

/* tie_word_embeddings: false, but transformers 5 ties T5's head anyway (T5Config turns the flag
   into scale_decoder_outputs); measured 222,903,552 = t5-base's count */
Test(plan_load_hf, t5_v1_1_base_config_should_count_222903552_parameters_gated_and_tied_as_transformers_5) {
    ModelSpec m;
    load(&m, "tests/data/hf/t5-v1_1-base.json");
    cr_expect_eq(plan_model_params(&m), 222903552LL);
    cr_expect(m.tied_embeddings);
    cr_expect_eq(m.mlp, MLP_SWIGLU);
    cr_expect_str_eq(m.act_fn, "gated-gelu");
    plan_model_free(&m);
}

/* The config and the zoo describe the same network: every layer must agree. */
static void expect_same_layers(const char *path, const char *zoo) {
    ModelSpec a, b;
    load(&a, path);
    cr_assert_eq(plan_zoo_build(&b, zoo, msg, sizeof(msg)), 0, "%s", msg);
    cr_assert_eq(a.n_layers, b.n_layers, "%s vs %s", path, zoo);
    for (int i = 0; i < a.n_layers; i++) {
        cr_expect_eq(a.layers[i].params, b.layers[i].params, "%s layer %d", path, i);
        cr_expect_eq(a.layers[i].largest_tensor, b.layers[i].largest_tensor, "%s layer %d", path, i);
        cr_expect_eq(a.layers[i].kind, b.layers[i].kind, "%s layer %d", path, i);
    }
    cr_expect_eq(a.arch, b.arch);
    cr_expect_eq(a.n_layer, b.n_layer);
    cr_expect_eq(a.d_model, b.d_model);
    cr_expect_eq(a.d_ff, b.d_ff);
    cr_expect_eq(a.vocab, b.vocab);
    cr_expect_eq(a.max_seq, b.max_seq);
    cr_expect_eq(a.mlp, b.mlp);
    cr_expect_eq(a.norm, b.norm);
    cr_expect_float_eq(a.dropout, b.dropout, 1e-12);
    plan_model_free(&a);
    plan_model_free(&b);
}

Test(plan_load_hf, configs_of_zoo_models_should_build_the_zoo_layers) {
    expect_same_layers("tests/data/hf/gpt2.json", "gpt2");
    expect_same_layers("tests/data/hf/llama-2-7b.json", "llama2-7b");
    expect_same_layers("tests/data/hf/bert-base-uncased.json", "bert-base");
}

Test(plan_load_hf, the_model_should_be_named_by_name_or_path_else_by_its_file) {
    ModelSpec m;
    load(&m, "tests/data/hf/llama-2-7b.json");
    cr_expect_str_eq(m.name, "meta-llama/Llama-2-7b-hf");
    cr_expect_str_eq(m.source, "tests/data/hf/llama-2-7b.json");
    plan_model_free(&m);
    load(&m, "tests/data/hf/mistral-7b-v0.1.json");
    cr_expect_str_eq(m.name, "mistral-7b-v0.1");
    plan_model_free(&m);
}

Test(plan_load_hf, a_model_directory_should_be_read_through_its_config_json) {
    char dir[] = "/tmp/memplan-test-XXXXXX";
    cr_assert_not_null(mkdtemp(dir));
    char path[256];
    snprintf(path, sizeof(path), "%s/config.json", dir);
    FILE *f = fopen(path, "w");
    cr_assert_not_null(f);
    fputs("{\"model_type\": \"gpt2\", \"n_embd\": 768, \"n_layer\": 12, \"n_head\": 12, "
          "\"vocab_size\": 50257, \"n_positions\": 1024}", f);
    fclose(f);
    ModelSpec m;
    int rc = plan_load_model(&m, dir, msg, sizeof(msg));
    unlink(path);
    rmdir(dir);
    cr_assert_eq(rc, 0, "%s", msg);
    cr_expect_eq(plan_model_params(&m), 124439808LL);
    cr_expect_str_eq(m.source, path);
    plan_model_free(&m);
}

Test(plan_load_hf, a_config_without_model_type_should_be_recognised_by_its_class) {
    const char *js = "{\"architectures\": [\"GPT2LMHeadModel\"], \"n_embd\": 768, \"n_layer\": 12, "
                     "\"n_head\": 12, \"vocab_size\": 50257}";
    ModelSpec m;
    cr_assert_eq(plan_load_model_from_buffer(&m, js, strlen(js), "mem", msg, sizeof(msg)), 0, "%s", msg);
    cr_expect_eq(plan_model_params(&m), 124439808LL);   /* n_positions defaults to 1024 */
    plan_model_free(&m);
}

Test(plan_load_hf, omitted_keys_should_take_the_defaults_of_the_transformers_config_class) {
    /* no num_key_value_heads (= heads), no max_position_embeddings (LlamaConfig: 2048), no
     * tie_word_embeddings (Llama: untied), an empty architectures list (model_type decides) */
    const char *js = "{\"model_type\": \"llama\", \"architectures\": [], \"hidden_size\": 4096, "
                     "\"intermediate_size\": 11008, \"num_hidden_layers\": 32, "
                     "\"num_attention_heads\": 32, \"vocab_size\": 32000, \"head_dim\": null}";
    ModelSpec m;
    cr_assert_eq(plan_load_model_from_buffer(&m, js, strlen(js), "mem", msg, sizeof(msg)), 0, "%s", msg);
    cr_expect_eq(plan_model_params(&m), 6738415616LL);
    cr_expect_eq(m.n_kv_head, 32);
    cr_expect_eq(m.max_seq, 2048);
    cr_expect_eq(m.tied_embeddings, 0);
    plan_model_free(&m);
}

Test(plan_load_hf, an_unsupported_architecture_should_be_named_with_the_supported_list) {
    ModelSpec m;
    cr_expect_neq(plan_load_model(&m, "tests/data/bad/hf-unsupported-type.json", msg, sizeof(msg)), 0);
    cr_expect(strstr(msg, "unsupported architecture 'mamba' in tests/data/bad/hf-unsupported-type.json"),
              "%s", msg);
    cr_expect(strstr(msg, "supported: gpt2, llama, mistral, qwen2, gemma, qwen3, gemma2, gemma3_text, phi3, "
                          "olmo2, granite, smollm3, starcoder2, mixtral, qwen2_moe, qwen3_moe, deepseek_v3, "
                          "gpt_oss, llama4_text, gpt_neox, opt, bert, t5"), "%s", msg);
    cr_expect(strstr(msg, "a params.json of {name: shape}") && !strstr(msg, "nearest"), "%s", msg);
    /* a variant of a known family is named with it */
    const char *v = "{\"model_type\": \"qwen3_next\", \"hidden_size\": 64}";
    cr_expect_neq(plan_load_model_from_buffer(&m, v, strlen(v), "qn.json", msg, sizeof(msg)), 0);
    cr_expect(strstr(msg, "unsupported architecture 'qwen3_next'") && strstr(msg, "nearest: 'qwen3'"), "%s", msg);
}

/* The 2024-26 families and their features, from minimal configs (only the keys given; the rest
   must be the configuration classes' defaults, plan_load_hf.c FAMILIES): counts from
   transformers 5.24 on the meta device (model.parameters(), tied tensors once). */
static const struct { const char *file; int64_t params; } VARIANTS[] = {
    {"qwen3.json", 362304}, {"gemma2.json", 126016}, {"gemma3_text.json", 126080}, {"phi3.json", 189760},
    {"phi3-gqa.json", 185664}, {"olmo2.json", 189952}, {"granite.json", 189760}, {"smollm3.json", 125760},
    {"starcoder2.json", 114496}, {"starcoder2-nobias.json", 113792}, {"mixtral.json", 300864},
    {"qwen2-moe.json", 221376}, {"qwen2-moe-sparse.json", 267648}, {"qwen3-moe.json", 202624},
    {"deepseek-v3.json", 200848}, {"deepseek-v3-noq.json", 211552}, {"gpt-oss.json", 303312},
    {"gpt-oss-nobias.json", 302928}, {"llama4-text.json", 269888}, {"llama4-text-list.json", 411712},
};

Test(plan_load_hf, every_family_variant_should_count_what_transformers_builds) {
    for (size_t i = 0; i < sizeof(VARIANTS) / sizeof(VARIANTS[0]); i++) {
        char path[256];
        snprintf(path, sizeof path, "tests/data/hf/variants/%s", VARIANTS[i].file);
        ModelSpec m;
        cr_assert_eq(plan_load_model(&m, path, msg, sizeof(msg)), 0, "%s", msg);
        cr_expect_eq(plan_model_params(&m), VARIANTS[i].params, "%s: %lld, transformers %lld", path,
                     (long long)plan_model_params(&m), (long long)VARIANTS[i].params);
        cr_expect(plan_model_tensors_known(&m) && plan_model_dim0_known(&m), "%s: tensors and their dim 0", path);
        plan_model_free(&m);
    }
}

Test(plan_load_hf, a_mixture_of_experts_should_know_its_active_parameters_and_moe_blocks) {
    ModelSpec m;
    /* Mixtral: 4 experts of 3 x 96 x 64 in each of 2 blocks, top-2: half of them are not used */
    cr_assert_eq(plan_load_model(&m, "tests/data/hf/variants/mixtral.json", msg, sizeof(msg)), 0, "%s", msg);
    cr_expect_eq(m.moe.n_experts, 4);
    cr_expect_eq(m.moe.top_k, 2);
    cr_expect_eq(plan_model_active_params(&m), 300864 - 2 * 4 * 3 * 96 * 64 / 2);
    plan_model_free(&m);
    /* Qwen2-MoE with decoder_sparse_step 2 and mlp_only_layers [3]: of blocks 0-3 only block 1 routes */
    cr_assert_eq(plan_load_model(&m, "tests/data/hf/variants/qwen2-moe-sparse.json", msg, sizeof(msg)), 0, "%s", msg);
    int moe[4] = {0};
    for (int i = 0, b = 0; i < m.n_layers; i++)
        if (m.layers[i].kind == LAYER_BLOCK) moe[b++] = m.layers[i].expert_params > 0;
    cr_expect(!moe[0] && moe[1] && !moe[2] && !moe[3], "%d %d %d %d", moe[0], moe[1], moe[2], moe[3]);
    cr_expect_eq(m.moe.d_ff_shared, 48);
    plan_model_free(&m);
    /* DeepSeek-V3: first_k_dense_replace 1; the experts are dim-0 = E tensors (FSDP2 shards by expert) */
    cr_assert_eq(plan_load_model(&m, "tests/data/hf/variants/deepseek-v3.json", msg, sizeof(msg)), 0, "%s", msg);
    cr_expect_eq(m.layers[1].expert_params, 0);
    cr_expect_eq(m.layers[2].expert_params, 4 * 3 * 32 * 64);
    cr_expect_eq(m.moe.d_ff_shared, 32);
    plan_model_free(&m);
}

static int from_text(ModelSpec *m, const char *js) {
    return plan_load_model_from_buffer(m, js, strlen(js), "config.json", msg, sizeof(msg));
}

/* Each block's sliding window (0: full attention) and NoPE flag, block by block. */
static void windows_of(const ModelSpec *m, int64_t *win, int *no_rope) {
    for (int i = 0, b = 0; i < m->n_layers; i++)
        if (m->layers[i].kind == LAYER_BLOCK) { win[b] = m->layers[i].attn_window; no_rope[b++] = m->layers[i].no_rope; }
}

/* ---- what the 2024-26 dense blocks save beyond the classic block (BlockSpec; docs/formulas.md
 * "Activations") and their sliding windows, from transformers 5.24's configuration classes ---- */

Test(plan_load_hf, the_dense_families_should_describe_their_blocks) {
    ModelSpec m;
    load(&m, "bench/torch/configs/qwen3-mini.json");
    cr_expect_eq(m.block.qk_norm, 1);
    cr_expect_eq(m.block.norm_place, NORM_PLACE_PRE);
    cr_expect_eq(m.d_head, 64);
    plan_model_free(&m);
    load(&m, "bench/torch/configs/gemma2-mini.json");
    cr_expect_eq(m.block.norm_place, NORM_PLACE_SANDWICH);
    cr_expect(m.block.norm_fp32 && m.block.attn_softcap == 50 && m.block.logit_softcap == 30);
    plan_model_free(&m);
    load(&m, "bench/torch/configs/olmo2-mini.json");
    cr_expect_eq(m.block.qk_norm, 2);
    cr_expect_eq(m.block.norm_place, NORM_PLACE_POST);
    cr_expect(m.block.norm_fp32);
    plan_model_free(&m);
    load(&m, "bench/torch/configs/phi3-mini.json");
    cr_expect_eq(m.block.qkv, QKV_FUSED);
    cr_expect(m.block.fused_gate_up && m.block.rotary_cat && m.block.resid_dropout);
    plan_model_free(&m);
    load(&m, "bench/torch/configs/starcoder2-mini.json");   /* LayerNorm, but Llama's attention */
    cr_expect(m.block.qkv == QKV_SEPARATE && m.block.rotary && !m.block.norm_fp32);
    plan_model_free(&m);
    /* the classic families keep the classic block; Gemma's RMSNorm scales in fp32 */
    load(&m, "tests/data/hf/llama-3.2-1b.json");
    BlockSpec zero;
    memset(&zero, 0, sizeof(zero));
    cr_expect_eq(memcmp(&m.block, &zero, sizeof(zero)), 0);
    plan_model_free(&m);
    load(&m, "tests/data/hf/gemma-2b.json");
    cr_expect(m.block.norm_fp32);
    plan_model_free(&m);
}

Test(plan_load_hf, sliding_windows_and_nope_layers_should_follow_each_config_class) {
    ModelSpec m;
    int64_t w[8];
    int nr[8];
    /* Mistral: sliding_window defaults to 4096 on every block; null turns it off */
    cr_assert_eq(from_text(&m, "{\"model_type\": \"mistral\", \"hidden_size\": 64, \"intermediate_size\": 96, "
                               "\"num_hidden_layers\": 2, \"num_attention_heads\": 4, \"vocab_size\": 100}"), 0, "%s", msg);
    windows_of(&m, w, nr);
    cr_expect(w[0] == 4096 && w[1] == 4096);
    plan_model_free(&m);
    cr_assert_eq(from_text(&m, "{\"model_type\": \"mistral\", \"hidden_size\": 64, \"intermediate_size\": 96, "
                               "\"num_hidden_layers\": 2, \"num_attention_heads\": 4, \"vocab_size\": 100, "
                               "\"sliding_window\": null}"), 0, "%s", msg);
    windows_of(&m, w, nr);
    cr_expect(w[0] == 0 && w[1] == 0);
    plan_model_free(&m);
    /* Gemma 2 alternates from block 0; Gemma 3 slides on all but every 6th (here 2nd) */
    load(&m, "bench/torch/configs/gemma2-mini.json");
    windows_of(&m, w, nr);
    cr_expect(w[0] == 64 && w[1] == 0 && w[2] == 64 && w[3] == 0);
    plan_model_free(&m);
    cr_assert_eq(from_text(&m, "{\"model_type\": \"gemma3_text\", \"hidden_size\": 64, \"intermediate_size\": 96, "
                               "\"num_hidden_layers\": 4, \"num_attention_heads\": 4, \"vocab_size\": 100, "
                               "\"head_dim\": 16, \"sliding_window\": 512, \"sliding_window_pattern\": 2}"), 0, "%s", msg);
    windows_of(&m, w, nr);
    cr_expect(w[0] == 512 && w[1] == 0 && w[2] == 512 && w[3] == 0);
    plan_model_free(&m);
    /* Gemma 3's attention never applies attn_logit_softcapping (its final soft-cap it does) */
    cr_assert_eq(from_text(&m, "{\"model_type\": \"gemma3_text\", \"hidden_size\": 64, \"intermediate_size\": 96, "
                               "\"num_hidden_layers\": 2, \"num_attention_heads\": 4, \"vocab_size\": 100, \"head_dim\": 16, "
                               "\"attn_logit_softcapping\": 50, \"final_logit_softcapping\": 30}"), 0, "%s", msg);
    cr_expect(m.block.attn_softcap == 0 && m.block.logit_softcap == 30);
    plan_model_free(&m);
    /* an explicit layer_types list wins; Qwen3 slides only with use_sliding_window, from max_window_layers */
    load(&m, "bench/torch/configs/gemma3-mini.json");
    windows_of(&m, w, nr);
    cr_expect(w[0] == 64 && w[1] == 64 && w[2] == 64 && w[3] == 0);
    plan_model_free(&m);
    cr_assert_eq(from_text(&m, "{\"model_type\": \"qwen3\", \"hidden_size\": 64, \"intermediate_size\": 96, "
                               "\"num_hidden_layers\": 3, \"num_attention_heads\": 4, \"vocab_size\": 100, "
                               "\"use_sliding_window\": true, \"max_window_layers\": 1}"), 0, "%s", msg);
    windows_of(&m, w, nr);
    cr_expect(w[0] == 0 && w[1] == 4096 && w[2] == 4096);
    plan_model_free(&m);
    /* SmolLM3: every 4th block has no rotary embedding, or as no_rope_layers lists (0 = none) */
    load(&m, "bench/torch/configs/smollm3-mini.json");
    windows_of(&m, w, nr);
    cr_expect(!nr[0] && !nr[1] && !nr[2] && nr[3] && w[3] == 0);
    plan_model_free(&m);
    cr_assert_eq(from_text(&m, "{\"model_type\": \"smollm3\", \"hidden_size\": 64, \"intermediate_size\": 96, "
                               "\"num_hidden_layers\": 2, \"num_attention_heads\": 4, \"vocab_size\": 100, "
                               "\"no_rope_layers\": [0, 1], \"use_sliding_window\": true, \"sliding_window\": 32}"), 0, "%s", msg);
    windows_of(&m, w, nr);
    cr_expect(nr[0] && !nr[1] && w[0] == 32 && w[1] == 0);
    plan_model_free(&m);
    /* a list that does not give one entry per layer is refused by name */
    cr_expect_neq(from_text(&m, "{\"model_type\": \"gemma2\", \"hidden_size\": 64, \"intermediate_size\": 96, "
                                "\"num_hidden_layers\": 2, \"num_attention_heads\": 4, \"vocab_size\": 100, "
                                "\"layer_types\": [\"full_attention\"]}"), 0);
    cr_expect(strstr(msg, "layer_types"), "%s", msg);
    cr_expect_neq(from_text(&m, "{\"model_type\": \"smollm3\", \"hidden_size\": 64, \"intermediate_size\": 96, "
                                "\"num_hidden_layers\": 2, \"num_attention_heads\": 4, \"vocab_size\": 100, "
                                "\"no_rope_layers\": [1, 2]}"), 0);
    cr_expect(strstr(msg, "no_rope_layers[1]"), "%s", msg);
}

static int cmp_pair(const void *a, const void *b) {
    const double *x = a, *y = b;
    return x[0] != y[0] ? (x[0] < y[0] ? -1 : 1) : x[1] != y[1] ? (x[1] < y[1] ? -1 : 1) : 0;
}

/* memplan's tensors and counts.json's entry e as multisets of (elements, dim 0). */
static void expect_same_tensors_any_order(const ModelSpec *m, cJSON *e, const char *path) {
    static double a[4096][2], b[4096][2];
    int na = 0, nb = 0;
    for (int i = 0; i < m->n_layers; i++)
        for (int k = 0; k < m->layers[i].n_tensors && na < 4096; k++, na++) {
            a[na][0] = (double)m->layers[i].tensor_elems[k];
            a[na][1] = (double)m->layers[i].tensor_dim0[k];
        }
    cJSON *g, *t, *d;
    cJSON_ArrayForEach(g, cJSON_GetObjectItem(e, "groups"))
        for (int r = 0; r < cJSON_GetObjectItem(g, "repeat")->valueint; r++)
            cJSON_ArrayForEach(t, cJSON_GetObjectItem(g, "tensors")) {
                if (nb >= 4096) break;
                cJSON *shape = cJSON_GetArrayItem(t, 1);
                b[nb][0] = 1;
                cJSON_ArrayForEach(d, shape) b[nb][0] *= d->valuedouble;
                b[nb++][1] = cJSON_GetArrayItem(shape, 0)->valuedouble;
            }
    cr_assert_eq(na, nb, "%s: %d tensors, transformers %d", path, na, nb);
    qsort(a, (size_t)na, sizeof a[0], cmp_pair);
    qsort(b, (size_t)nb, sizeof b[0], cmp_pair);
    for (int i = 0; i < na; i++)
        cr_expect(a[i][0] == b[i][0] && a[i][1] == b[i][1], "%s: tensor %.0f x dim0 %.0f vs %.0f x %.0f", path,
                  a[i][0], a[i][1], b[i][0], b[i][1]);
}

/* The published configs in tests/data/hf against transformers' own classes (counts.json, made by
   scripts/hf_counts.py on the meta device): the total, and every parameter tensor in
   model.parameters() order with its element count and dim 0 (which FSDP2 shards and pads and
   DeepSpeed's ZeRO-3 partitions and keeps whole below its threshold). */
Test(plan_load_hf, every_published_config_should_match_transformers_tensor_for_tensor, .timeout = 60) {
    FILE *f = fopen("tests/data/hf/counts.json", "rb");
    cr_assert_not_null(f, "run from the repository root");
    static char buf[1 << 20];
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = 0;
    cJSON *root = cJSON_Parse(buf), *e;
    cr_assert_not_null(root);
    int seen = 0, moe = 0;
    cJSON_ArrayForEach(e, cJSON_GetObjectItem(root, "configs")) {
        char path[256];
        snprintf(path, sizeof path, "tests/data/hf/%s", e->string);
        ModelSpec m;
        cr_assert_eq(plan_load_model(&m, path, msg, sizeof(msg)), 0, "%s", msg);
        cr_expect_eq((double)plan_model_params(&m), cJSON_GetObjectItem(e, "total")->valuedouble, "%s total", path);
        /* OPT registers final_layer_norm, project_out and project_in in its decoder before the
           layers (OPTDecoder.__init__); memplan keeps them where they run: the same tensors, in
           another order, so OPT is compared as a multiset */
        int any_order = strcmp(m.family, "opt") == 0;
        if (any_order) {
            expect_same_tensors_any_order(&m, e, path);
            seen++;
            plan_model_free(&m);
            continue;
        }
        int li = 0, ti = 0, mismatch = 0;   /* walk memplan's tensors beside transformers' */
        cJSON *g, *t;
        cJSON_ArrayForEach(g, cJSON_GetObjectItem(e, "groups")) {
            int rep = cJSON_GetObjectItem(g, "repeat")->valueint;
            for (int r = 0; r < rep; r++)
                cJSON_ArrayForEach(t, cJSON_GetObjectItem(g, "tensors")) {
                    while (li < m.n_layers && ti >= m.layers[li].n_tensors) { li++; ti = 0; }
                    cJSON *shape = cJSON_GetArrayItem(t, 1), *d;
                    double elems = 1;
                    cJSON_ArrayForEach(d, shape) elems *= d->valuedouble;
                    double dim0 = cJSON_GetArrayItem(shape, 0)->valuedouble;
                    if (li >= m.n_layers || (double)m.layers[li].tensor_elems[ti] != elems ||
                        (double)m.layers[li].tensor_dim0[ti] != dim0) {
                        if (!mismatch++)
                            cr_expect(0, "%s: %s.%s (%.0f elements, dim 0 %.0f) is memplan's layer %d tensor %d (%lld, %lld)",
                                      path, g->string ? g->string : cJSON_GetObjectItem(g, "group")->valuestring,
                                      cJSON_GetArrayItem(t, 0)->valuestring, elems, dim0, li, ti,
                                      li < m.n_layers ? (long long)m.layers[li].tensor_elems[ti] : -1LL,
                                      li < m.n_layers ? (long long)m.layers[li].tensor_dim0[ti] : -1LL);
                    }
                    ti++;
                }
        }
        moe += m.moe.n_experts > 0;
        seen++;
        plan_model_free(&m);
    }
    cJSON_Delete(root);
    cr_expect_geq(seen, 49, "configs checked: %d", seen);
    cr_expect_geq(moe, 12, "MoE configs checked: %d", moe);
}

/* ---- the zoo stays exact ---- */

Test(plan_load_zoo, zoo_names_should_build_with_their_published_counts) {
    static const struct { const char *name; long long params; } ZOO[] = {
        {"gpt2", 124439808LL},         {"gpt2-medium", 354823168LL},
        {"gpt2-large", 774030080LL},   {"gpt2-xl", 1557611200LL},
        {"llama2-7b", 6738415616LL},   {"llama2-13b", 13015864320LL},
        {"llama2-70b", 68976648192LL}, {"bert-base", 109514298LL},
        {"bert-large", 335174458LL},   {"resnet50", 25557032LL},
    };
    for (size_t i = 0; i < sizeof(ZOO) / sizeof(ZOO[0]); i++) {
        ModelSpec m;
        load(&m, ZOO[i].name);
        cr_expect_eq(plan_model_params(&m), ZOO[i].params, "%s", ZOO[i].name);
        cr_expect_str_eq(m.source, "zoo");
        plan_model_free(&m);
    }
}

Test(plan_load_zoo, an_unknown_name_should_get_the_nearest_zoo_names_and_the_other_forms) {
    ModelSpec m;
    cr_expect_neq(plan_load_model(&m, "gpt5", msg, sizeof(msg)), 0);
    cr_expect(strstr(msg, "unknown model 'gpt5' (nearest: gpt2;"), "%s", msg);
    cr_expect(strstr(msg, "`memplan models` lists all"), "%s", msg);
    cr_expect(strstr(msg, "hub id ORG/NAME") && strstr(msg, "path"), "%s", msg);
    cr_expect_eq(m.layers, NULL);
}

/* ---- params.json ---- */

Test(plan_load_params, resnet50_list_should_give_exact_states_and_53_batchnorm_layers) {
    ModelSpec m;
    load(&m, "tests/data/params/resnet50.json");
    cr_expect_eq(plan_model_params(&m), 25557032LL);
    cr_expect_eq(plan_model_buffers(&m), 53173LL);   /* 2C + 1 (num_batches_tracked) per BN */
    int64_t sum_c = 0;
    cr_expect_eq(plan_model_bn_layers(&m, &sum_c), 53);
    cr_expect_eq(sum_c, 26560LL);
    cr_expect_eq(m.arch, ARCH_GENERIC);
    cr_expect_str_eq(m.name, "resnet50");
    /* conv1, bn1, 16 bottlenecks with their 52 BNs, fc */
    cr_expect_eq(m.n_layers, 71);
    cr_expect_str_eq(m.layers[0].name, "conv1");
    cr_expect_str_eq(m.layers[1].name, "bn1");
    cr_expect_eq(m.layers[1].kind, LAYER_BN);
    cr_expect_eq(m.layers[1].bn_channels, 64);
    cr_expect_eq(m.layers[1].params, 128);
    cr_expect_eq(m.layers[1].buffers, 129);
    /* layer1.0 holds its convs and downsample conv; its BNs are their own layers */
    cr_expect_str_eq(m.layers[2].name, "layer1.0");
    cr_expect_eq(m.layers[2].params, 64 * 64 + 64 * 64 * 9 + 64 * 256 + 64 * 256);
    cr_expect_eq(m.layers[2].largest_tensor, 64 * 64 * 9);
    cr_expect_str_eq(m.layers[m.n_layers - 1].name, "fc");
    cr_expect_eq(m.layers[m.n_layers - 1].params, 2048 * 1000 + 1000);
    plan_model_free(&m);
}

Test(plan_load_params, without_a_measurement_activations_should_be_unknown_not_zero) {
    ModelSpec m;
    load(&m, "tests/data/params/resnet50.json");
    cr_expect_eq(plan_model_acts_known(&m), 0);
    for (int i = 0; i < m.n_layers; i++) cr_expect_eq(m.layers[i].act_known, 0);
    plan_model_free(&m);
}

Test(plan_load_params, gpt2_list_should_group_blocks_and_spread_the_measured_activations) {
    ModelSpec m;
    load(&m, "tests/data/params/gpt2.json");
    cr_expect_eq(plan_model_params(&m), 124439808LL);
    cr_expect_eq(m.n_layers, 13);   /* "transformer" (wte, wpe, ln_f) + 12 blocks */
    cr_expect_str_eq(m.layers[0].name, "transformer");
    cr_expect_eq(m.layers[0].params, 50257LL * 768 + 1024 * 768 + 2 * 768);
    cr_expect_eq(m.layers[0].largest_tensor, 50257LL * 768);
    cr_expect_str_eq(m.layers[1].name, "transformer.h.0");
    cr_expect_eq(m.layers[1].params, 7087872);
    cr_expect_str_eq(m.layers[12].name, "transformer.h.11");
    cr_expect_eq(m.max_seq, 1024);
    cr_expect_eq(plan_model_acts_known(&m), 1);
    int64_t acts = 0;
    for (int i = 0; i < m.n_layers; i++) acts += m.layers[i].act_bytes;
    cr_expect_eq(acts, 2500000003LL);
    cr_expect_eq(m.layers[0].act_bytes - m.layers[12].act_bytes, 1);   /* remainder goes first */
    plan_model_free(&m);
}

Test(plan_load_params, a_bare_name_to_shape_map_should_be_read_as_a_parameter_list) {
    ModelSpec m;
    load(&m, "tests/data/params/mlp-bare.json");
    cr_expect_eq(plan_model_params(&m), 212);
    cr_expect_eq(m.n_layers, 2);
    cr_expect_str_eq(m.layers[0].name, "0");
    cr_expect_eq(m.layers[0].params, 8 * 16 + 16);
    cr_expect_str_eq(m.layers[1].name, "2");
    plan_model_free(&m);
}

Test(plan_load_params, an_explicit_batchnorm_list_should_find_bn_without_running_stats) {
    ModelSpec m;
    load(&m, "tests/data/params/cnn-bnlist.json");
    cr_expect_eq(plan_model_params(&m), 10538);
    int64_t sum_c = 0;
    cr_expect_eq(plan_model_bn_layers(&m, &sum_c), 2);
    cr_expect_eq(sum_c, 64);
    cr_expect_eq(m.n_layers, 5);
    cr_expect_str_eq(m.layers[1].name, "norm");
    cr_expect_eq(m.layers[1].bn_channels, 32);   /* from its weight: no running_mean */
    cr_expect_eq(m.layers[1].buffers, 0);
    cr_expect_str_eq(m.layers[3].name, "blocks.0.bn");
    cr_expect_eq(m.layers[3].buffers, 65);
    plan_model_free(&m);
}

/* ---- memplan's own format: export then import gives the same ModelSpec ---- */

static void expect_same_model(const ModelSpec *a, const ModelSpec *b, const char *what) {
    cr_expect_str_eq(a->name, b->name, "%s", what);
    cr_expect_eq(a->arch, b->arch, "%s", what);
    cr_expect_eq(a->n_layer, b->n_layer, "%s", what);
    cr_expect_eq(a->n_enc_layer, b->n_enc_layer, "%s", what);
    cr_expect_eq(a->d_model, b->d_model, "%s", what);
    cr_expect_eq(a->n_head, b->n_head, "%s", what);
    cr_expect_eq(a->n_kv_head, b->n_kv_head, "%s", what);
    cr_expect_eq(a->d_head, b->d_head, "%s", what);
    cr_expect_eq(a->d_ff, b->d_ff, "%s", what);
    cr_expect_eq(a->vocab, b->vocab, "%s", what);
    cr_expect_eq(a->max_seq, b->max_seq, "%s", what);
    cr_expect_eq(a->tied_embeddings, b->tied_embeddings, "%s", what);
    cr_expect_eq(a->root_only, b->root_only, "%s", what);
    cr_expect_eq(a->fused_qkv, b->fused_qkv, "%s", what);
    cr_expect_eq(a->learned_pos, b->learned_pos, "%s", what);
    cr_expect_eq(a->addmm_proj, b->addmm_proj, "%s", what);
    cr_expect_eq(a->norm, b->norm, "%s", what);
    cr_expect_eq(a->mlp, b->mlp, "%s", what);
    cr_expect(a->dropout == b->dropout, "%s: dropout %.17g vs %.17g", what, a->dropout, b->dropout);
    cr_expect_str_eq(a->act_fn, b->act_fn, "%s", what);
    cr_expect_str_eq(a->family, b->family, "%s", what);
    cr_expect_eq(a->image_size, b->image_size, "%s", what);
    cr_expect_eq(a->in_channels, b->in_channels, "%s", what);
    cr_expect_eq(a->moe.n_experts, b->moe.n_experts, "%s", what);
    cr_expect_eq(a->moe.top_k, b->moe.top_k, "%s", what);
    cr_expect_eq(a->moe.d_ff_expert, b->moe.d_ff_expert, "%s", what);
    cr_expect_eq(a->moe.d_ff_shared, b->moe.d_ff_shared, "%s", what);
    cr_expect_eq(memcmp(&a->block, &b->block, sizeof(a->block)), 0, "%s: block", what);
    cr_expect_eq(a->moe.router, b->moe.router, "%s", what);
    cr_expect_eq(a->moe.norm_topk, b->moe.norm_topk, "%s", what);
    cr_expect_eq(a->moe.fp32_weights, b->moe.fp32_weights, "%s", what);
    cr_expect_eq(a->moe.shared_gate, b->moe.shared_gate, "%s", what);
    cr_expect_eq(a->moe.shared_last, b->moe.shared_last, "%s", what);
    cr_expect_eq(a->moe.bias, b->moe.bias, "%s", what);
    cr_expect_eq(a->moe.clamped_glu, b->moe.clamped_glu, "%s", what);
    cr_expect_eq(a->moe.n_group, b->moe.n_group, "%s", what);
    cr_expect_eq(a->moe.topk_group, b->moe.topk_group, "%s", what);
    cr_expect_eq(a->moe.router_logits, b->moe.router_logits, "%s", what);
    cr_expect(memcmp(&a->mla, &b->mla, sizeof a->mla) == 0, "%s: latent attention", what);
    cr_expect_eq(a->attn_sinks, b->attn_sinks, "%s", what);
    cr_expect_eq(a->qk_norm, b->qk_norm, "%s", what);
    cr_expect_eq(a->nope_every, b->nope_every, "%s", what);
    cr_assert_eq(a->n_layers, b->n_layers, "%s", what);
    for (int i = 0; i < a->n_layers; i++) {
        const LayerSpec *x = &a->layers[i], *y = &b->layers[i];
        cr_expect_str_eq(x->name, y->name, "%s layer %d", what, i);
        cr_expect_eq(x->kind, y->kind, "%s layer %d", what, i);
        cr_expect_eq(x->params, y->params, "%s layer %d", what, i);
        cr_expect_eq(x->buffers, y->buffers, "%s layer %d", what, i);
        cr_expect_eq(x->buffers_i64, y->buffers_i64, "%s layer %d", what, i);
        cr_expect_eq(x->bn_channels, y->bn_channels, "%s layer %d", what, i);
        cr_expect_eq(x->largest_tensor, y->largest_tensor, "%s layer %d", what, i);
        cr_expect(x->fwd_flops == y->fwd_flops, "%s layer %d: flops %.17g vs %.17g", what, i,
                  x->fwd_flops, y->fwd_flops);
        cr_expect_eq(x->act_elems, y->act_elems, "%s layer %d", what, i);
        cr_expect_eq(x->act_fp32_elems, y->act_fp32_elems, "%s layer %d", what, i);
        cr_expect_eq(x->act_mask_elems, y->act_mask_elems, "%s layer %d", what, i);
        cr_expect_eq(x->act_bytes, y->act_bytes, "%s layer %d", what, i);
        cr_expect_eq(x->act_known, y->act_known, "%s layer %d", what, i);
        cr_expect_eq(x->expert_params, y->expert_params, "%s layer %d", what, i);
        cr_expect_eq(x->expert_mask, y->expert_mask, "%s layer %d expert tensors", what, i);
        cr_expect_eq(x->n_tensors, y->n_tensors, "%s layer %d tensors", what, i);
        for (int k = 0; k < x->n_tensors && k < y->n_tensors; k++) {
            cr_expect_eq(x->tensor_elems[k], y->tensor_elems[k], "%s layer %d tensor %d", what, i, k);
            cr_expect_eq(x->tensor_dim0[k], y->tensor_dim0[k], "%s layer %d tensor %d dim 0", what, i, k);
            cr_expect_eq(x->tensor_mod[k], y->tensor_mod[k], "%s layer %d tensor %d module", what, i, k);
        }
        cr_expect_eq(x->unit, y->unit, "%s layer %d unit", what, i);
        cr_expect_eq(x->conv_kernel, y->conv_kernel, "%s layer %d conv kernel", what, i);
        cr_expect_eq(x->conv_stride, y->conv_stride, "%s layer %d conv stride", what, i);
        cr_expect_eq(x->attn_window, y->attn_window, "%s layer %d attention window", what, i);
        cr_expect_eq(x->no_rope, y->no_rope, "%s layer %d no rope", what, i);
    }
}

static void round_trip(const ModelSpec *a, const char *what) {
    char *js = NULL;
    cr_assert_eq(plan_model_export_json(a, &js), 0);
    ModelSpec b;
    int rc = plan_load_model_from_buffer(&b, js, strlen(js), what, msg, sizeof(msg));
    cr_assert_eq(rc, 0, "%s: %s\n%s", what, msg, js);
    free(js);
    expect_same_model(a, &b, what);
    cr_expect_str_eq(b.source, what);
    plan_model_free(&b);
}

Test(plan_load_memplan, layer_tensors_should_be_optional_and_add_up_to_the_params) {
    static const char *const BAD[] = {
        "{\"memplan_model\": 1, \"name\": \"x\", \"arch\": \"generic\", \"layers\": [{\"name\": \"a\", \"kind\": \"linear\", \"params\": 10, \"tensors\": [4, 5]}]}",
        "{\"memplan_model\": 1, \"name\": \"x\", \"arch\": \"generic\", \"layers\": [{\"name\": \"a\", \"kind\": \"linear\", \"params\": 10, \"tensors\": []}]}",
        "{\"memplan_model\": 1, \"name\": \"x\", \"arch\": \"generic\", \"layers\": [{\"name\": \"a\", \"kind\": \"linear\", \"params\": 10, \"tensors\": [10.5]}]}",
    };
    ModelSpec m;
    for (size_t k = 0; k < sizeof BAD / sizeof BAD[0]; k++) {
        cr_expect_neq(plan_load_model_from_buffer(&m, BAD[k], strlen(BAD[k]), "bad", msg, sizeof(msg)), 0, "%s", BAD[k]);
        cr_expect(strstr(msg, "tensors") != NULL, "%s", msg);
    }
    const char *ok = "{\"memplan_model\": 1, \"name\": \"x\", \"arch\": \"generic\", \"layers\": ["
                     "{\"name\": \"a\", \"kind\": \"linear\", \"params\": 10, \"tensors\": [8, 2]},"
                     "{\"name\": \"b\", \"kind\": \"linear\", \"params\": 6}]}";
    cr_assert_eq(plan_load_model_from_buffer(&m, ok, strlen(ok), "ok", msg, sizeof(msg)), 0, "%s", msg);
    cr_expect_eq(m.layers[0].n_tensors, 2);
    cr_expect_eq(m.layers[0].tensor_elems[0], 8);
    cr_expect_eq(plan_model_n_tensors(&m), -1);   /* layer b says nothing: unknown */
    plan_model_free(&m);
}

Test(plan_load_memplan, tensor_dim0_should_be_optional_and_refused_when_it_cannot_be_a_dim0) {
    /* each refused with one line naming the entry */
    static const struct { const char *layer, *fragment; } BAD_DIM0[] = {
        {"\"tensors\": [8, 2], \"tensor_dim0\": [4, 1e300]", "'layers[0].tensor_dim0' entry 1 must be an integer from 0 to 2 (got 1e+300)"},
        {"\"tensors\": [8, 2], \"tensor_dim0\": [2.5, 2]", "'layers[0].tensor_dim0' entry 0 must be an integer from 0 to 8 (got 2.5)"},
        {"\"tensors\": [8, 2], \"tensor_dim0\": [-4, 2]", "'layers[0].tensor_dim0' entry 0 must be an integer from 0 to 8 (got -4)"},
        {"\"tensors\": [8, 2], \"tensor_dim0\": [\"4\", 2]", "'layers[0].tensor_dim0' entry 0 must be an integer from 0 to 8 (got the string"},
        {"\"tensors\": [8, 2], \"tensor_dim0\": [3, 2]", "'layers[0].tensor_dim0' entry 0 (3) must divide the tensor's 8 elements"},
        {"\"tensors\": [8, 2], \"tensor_dim0\": [4]", "'layers[0].tensor_dim0' must be a list of 2 dim-0 sizes"},
        {"\"tensor_dim0\": [4, 2]", "'layers[0].tensor_dim0' needs 'tensors'"},
    };
    char js[512];
    ModelSpec m;
    for (size_t k = 0; k < sizeof BAD_DIM0 / sizeof BAD_DIM0[0]; k++) {
        snprintf(js, sizeof js, "{\"memplan_model\": 1, \"name\": \"x\", \"arch\": \"generic\", \"layers\": "
                 "[{\"name\": \"a\", \"kind\": \"linear\", \"params\": 10, %s}]}", BAD_DIM0[k].layer);
        msg[0] = '\0';
        cr_expect_neq(plan_load_model_from_buffer(&m, js, strlen(js), "bad", msg, sizeof(msg)), 0, "%s", js);
        cr_expect(strstr(msg, BAD_DIM0[k].fragment) != NULL, "expected \"%s\" in: %s", BAD_DIM0[k].fragment, msg);
        cr_expect(strchr(msg, '\n') == NULL, "one line: %s", msg);
    }
    /* 0 = unknown; absent = all unknown */
    const char *ok = "{\"memplan_model\": 1, \"name\": \"x\", \"arch\": \"generic\", \"layers\": ["
                     "{\"name\": \"a\", \"kind\": \"linear\", \"params\": 10, \"tensors\": [8, 2], \"tensor_dim0\": [4, 2]},"
                     "{\"name\": \"b\", \"kind\": \"linear\", \"params\": 6, \"tensors\": [6], \"tensor_dim0\": [0]}]}";
    cr_assert_eq(plan_load_model_from_buffer(&m, ok, strlen(ok), "ok", msg, sizeof(msg)), 0, "%s", msg);
    cr_expect_eq(m.layers[0].tensor_dim0[0], 4);
    cr_expect_eq(plan_layer_shard_dim0(&m.layers[0], 3), 2 * 2 + 1 * 1);
    cr_expect_not(plan_model_dim0_known(&m));         /* layer b's is unknown */
    plan_model_free(&m);
}

Test(plan_load_memplan, units_should_number_consecutive_layers_in_order) {
    const char *ok = "{\"memplan_model\": 1, \"name\": \"x\", \"arch\": \"cnn\", \"image_size\": 32, \"in_channels\": 3, "
                     "\"layers\": [{\"name\": \"stem\", \"kind\": \"conv\", \"params\": 10},"
                     "{\"name\": \"b0.c\", \"kind\": \"conv\", \"params\": 10, \"unit\": 1},"
                     "{\"name\": \"b0.bn\", \"kind\": \"bn\", \"params\": 2, \"unit\": 1},"
                     "{\"name\": \"b1\", \"kind\": \"block\", \"params\": 10},"  /* a block: the next unit */
                     "{\"name\": \"fc\", \"kind\": \"head\", \"params\": 4}]}";
    ModelSpec m;
    cr_assert_eq(plan_load_model_from_buffer(&m, ok, strlen(ok), "ok", msg, sizeof(msg)), 0, "%s", msg);
    cr_expect_eq(m.layers[0].unit, 0);
    cr_expect_eq(m.layers[2].unit, 1);
    cr_expect_eq(m.layers[3].unit, 2);
    cr_expect_eq(m.layers[4].unit, 0);
    cr_expect_eq(plan_model_units(&m), 2);
    plan_model_free(&m);
    /* a unit's layers are consecutive: unit 1 again after a root layer is refused */
    const char *bad = "{\"memplan_model\": 1, \"name\": \"x\", \"arch\": \"generic\", \"layers\": ["
                      "{\"name\": \"a\", \"kind\": \"other\", \"params\": 1, \"unit\": 1},"
                      "{\"name\": \"b\", \"kind\": \"other\", \"params\": 1},"
                      "{\"name\": \"c\", \"kind\": \"other\", \"params\": 1, \"unit\": 1}]}";
    cr_expect_neq(plan_load_model_from_buffer(&m, bad, strlen(bad), "bad", msg, sizeof(msg)), 0);
    cr_expect(strstr(msg, "field 'layers[2].unit' must be 2 (the next unit), or 0 for the root (got 1)") != NULL, "%s", msg);
}

Test(plan_load_params, numbered_blocks_should_be_the_fsdp_units_and_the_rest_the_root) {
    ModelSpec m;
    load(&m, "tests/data/params/resnet50.json");
    cr_expect_eq(plan_model_units(&m), 16);              /* layer1.0 ... layer4.2 */
    cr_expect_eq(m.layers[0].unit, 0);                   /* conv1 */
    cr_expect_str_eq(m.layers[3].name, "layer1.0.bn1");
    cr_expect_eq(m.layers[3].unit, 1);                   /* a block's BN layers are in its unit */
    cr_expect_eq(m.layers[m.n_layers - 1].unit, 0);      /* fc */
    plan_model_free(&m);
    load(&m, "tests/data/params/gpt2.json");
    cr_expect_eq(plan_model_units(&m), 12);
    cr_expect_eq(m.layers[0].unit, 0);                   /* transformer: wte, wpe, ln_f */
    plan_model_free(&m);
    /* a block's BatchNorm layer listed after the next block: not consecutive, so every layer
       its own unit */
    const char *split = "{\"parameters\": {\"h.0.w\": [4], \"h.1.w\": [4], \"h.0.bn.weight\": [4]}, "
                        "\"batchnorm\": [\"h.0.bn\"]}";
    cr_assert_eq(plan_load_model_from_buffer(&m, split, strlen(split), "p.json", msg, sizeof(msg)), 0, "%s", msg);
    cr_expect_eq(plan_model_units(&m), 0);
    plan_model_free(&m);
}

Test(plan_load_params, shapes_should_give_each_tensor_its_dim0) {
    ModelSpec m;
    load(&m, "tests/data/params/resnet50.json");
    cr_expect(plan_model_dim0_known(&m));
    cr_expect_eq(m.layers[0].tensor_dim0[0], 64);       /* conv1.weight [64, 3, 7, 7] */
    plan_model_free(&m);
    const char *scalar = "{\"w\": [4, 3], \"s\": []}";  /* a 0-d parameter: FSDP2 cannot shard it */
    cr_assert_eq(plan_load_model_from_buffer(&m, scalar, strlen(scalar), "p.json", msg, sizeof(msg)), 0, "%s", msg);
    cr_expect_eq(m.layers[0].tensor_dim0[0], 4);
    cr_expect_not(plan_model_dim0_known(&m));
    plan_model_free(&m);
}

Test(plan_load_memplan, an_empty_tensor_should_survive_export_and_import) {
    /* a params.json may list a 0-element parameter (found by the fuzzer: the export's
       "tensors": [0] was refused on import) */
    const char *p = "{\"0.weight\": [16, 8], \"e\": [0, 16], \"2.bias\": [4]}";
    ModelSpec m;
    cr_assert_eq(plan_load_model_from_buffer(&m, p, strlen(p), "p.json", msg, sizeof(msg)), 0, "%s", msg);
    round_trip(&m, "p.json");
    plan_model_free(&m);
}

Test(plan_load_memplan, a_model_wrapped_into_its_root_should_survive_export_and_import) {
    ModelSpec m;
    char err[512];
    cr_assert_eq(plan_zoo_build(&m, "gpt2-mini", err, sizeof err), 0, "%s", err);
    cr_assert_eq(plan_fsdp_size_wrap(&m, 2e6, err, sizeof err), 0, "%s", err);
    cr_assert(m.root_only);
    round_trip(&m, "wrapped.json");
    plan_model_free(&m);
}

Test(plan_load_memplan, the_struct_fields_should_be_the_ones_the_format_carries) {
    /* A field added to LayerSpec or ModelSpec must be added to plan_load_json.c (both ways),
     * docs/model-formats.md and expect_same_model above; then update these sizes (x86-64). The
     * trainable-subset fields (frozen*, act_unsaved_tok(_ac), lora_*_tok, grad_frontier) are not the
     * model's: plan_finetune_apply sets them from the training setup (--lora, --freeze), and
     * frozen_flops_extra the fine-tuning dimension's view of a rank (a packed quantized base);
     * MoeSpec.ep is expert parallelism's view of a rank (plan_dim_ep), not the model's, and
     * head_cols tensor parallel's (the head GEMM's V/tp columns, plan_dim_tp.c tp_view). */
    cr_expect_eq(sizeof(LayerSpec), 672 + 16 + 32 + 8 + 8 + 2 * 256 + 32 + 3 * 8 + 8 + 2 * 8 + 8, "LayerSpec changed: carry the new field in the format");
    cr_expect_eq(sizeof(ModelSpec), 688, "ModelSpec changed: carry the new field in the format");
}

Test(plan_load_memplan, every_zoo_model_should_survive_export_and_import_field_for_field) {
    for (int i = 0; i < plan_zoo_count(); i++) {
        const char *name = plan_zoo_entry(i)->name;
        ModelSpec a;
        cr_assert_eq(plan_zoo_build(&a, name, msg, sizeof(msg)), 0, "%s", msg);
        round_trip(&a, name);
        plan_model_free(&a);
    }
}

Test(plan_load_memplan, loaded_configs_and_parameter_lists_should_survive_export_and_import) {
    static const char *const FILES[] = {
        "tests/data/hf/t5-v1_1-base.json", "tests/data/hf/opt-350m.json",
        "tests/data/hf/gemma-2b.json",     "tests/data/params/resnet50.json",
        "tests/data/params/gpt2.json",     "tests/data/memplan/custom-mlp.json",
        "bench/torch/configs/gemma2-mini.json", "bench/torch/configs/phi3-mini.json",
        "bench/torch/configs/smollm3-mini.json", "bench/torch/configs/olmo2-mini.json",
        /* every MoE router kind, shared experts (gated, last), biases, latent attention, sinks, q/k norms */
        "tests/data/hf/variants/mixtral.json", "tests/data/hf/variants/qwen2-moe.json",
        "tests/data/hf/variants/qwen3-moe.json", "tests/data/hf/variants/deepseek-v3.json",
        "tests/data/hf/variants/gpt-oss.json", "tests/data/hf/variants/llama4-text.json",
    };
    for (size_t i = 0; i < sizeof(FILES) / sizeof(FILES[0]); i++) {
        ModelSpec a;
        load(&a, FILES[i]);
        round_trip(&a, FILES[i]);
        plan_model_free(&a);
    }
}

Test(plan_load_memplan, an_exported_file_should_load_from_disk_like_the_zoo_model) {
    ModelSpec a, b;
    load(&a, "tests/data/memplan/gpt2-tiny.json");
    cr_assert_eq(plan_zoo_build(&b, "gpt2-tiny", msg, sizeof(msg)), 0, "%s", msg);
    expect_same_model(&a, &b, "gpt2-tiny.json");
    plan_model_free(&a);
    plan_model_free(&b);
}

Test(plan_load_memplan, a_hand_written_model_should_take_defaults_for_omitted_fields) {
    ModelSpec m;
    load(&m, "tests/data/memplan/custom-mlp.json");
    cr_expect_eq(m.arch, ARCH_GENERIC);
    cr_expect_eq(plan_model_params(&m), 2109450);
    cr_expect_eq(m.layers[0].largest_tensor, 1049600);   /* omitted: the layer's params */
    cr_expect_eq(m.layers[2].largest_tensor, 10240);
    cr_expect_eq(plan_model_acts_known(&m), 1);
    plan_model_free(&m);
}

/* ---- bad input ---- */

/* Every file in tests/data/bad and the fragment its message must contain. */
static const struct { const char *file, *fragment; } BAD[] = {
    {"empty.json", "empty file"},
    {"whitespace-only.json", "line 3, column 3: unexpected end of file"},
    {"syntax-trailing-comma.json", "line 3, column 22: trailing comma before '}'"},
    {"syntax-truncated.json", "line 3, column 15: unexpected end of file"},
    {"syntax-bad-literal.json", "line 1, column 35, near 'tru}'"},
    {"syntax-trailing-garbage.json", "line 1, column 24, near 'x'"},
    {"nul-byte.json", "NUL byte at offset 21"},
    {"deep-nesting.json", "invalid JSON at line 1"},
    {"not-an-object.json", "expected a JSON object at the top level (got an array)"},
    {"unknown-format.json", "not a model description"},
    {"hf-unsupported-type.json", "unsupported architecture 'mamba'"},
    {"hf-escaped-nul.json", "a string holds \\u0000 (a NUL character) at line 1, column 22"},
    {"hf-no-type.json", "missing field 'model_type' (and no class in 'architectures')"},
    {"hf-missing-field.json", "missing field 'hidden_size'"},
    {"hf-null-required-field.json", "missing field 'hidden_size'"},
    {"hf-negative-layers.json", "field 'num_hidden_layers' must be an integer from 1 to 100000 (got -2)"},
    {"hf-absurd-hidden.json", "field 'hidden_size' must be an integer from 1 to 1048576 (got 1000000000000)"},
    {"hf-noninteger-field.json", "field 'hidden_size' must be an integer from 1 to 1048576 (got 4096.5)"},
    {"hf-string-field.json", "field 'hidden_size' must be an integer from 1 to 1048576 (got the string \"4096\")"},
    {"hf-bool-field.json", "field 'tie_word_embeddings' must be true or false"},
    {"hf-gqa-mismatch.json", "32 attention heads are not a multiple of 7 KV heads"},
    {"hf-heads-not-dividing.json", "hidden size 4096 is not divisible by 30 heads"},
    {"hf-unsupported-head.json", "model class 'LlamaForSequenceClassification' is not supported"},
    {"hf-architectures-not-list.json", "field 'architectures' must be a list"},
    {"hf-too-many-params.json", "more than 10^15 parameters"},
    {"hf-t5-bad-ffproj.json", "field 'feed_forward_proj' must be ACT or gated-ACT"},
    {"hf-bert-relative-pos.json", "position_embedding_type 'relative_key' is not supported"},
    {"hf-gpt2-huge-dropout.json", "field 'resid_pdrop' must be a number from 0 to 1 (got 3)"},
    {"params-negative-dim.json", "parameter 'fc.weight' dimension 0 must be an integer from 0"},
    {"params-shape-not-list.json", "parameter 'fc.weight': the shape must be a list of sizes (got 12)"},
    {"params-fractional-dim.json", "parameter 'fc.weight' dimension 0 must be an integer"},
    {"params-overflow.json", "parameter 'fc.weight' has more than 2^53 elements"},
    {"params-too-many.json", "more than 10^15 parameters"},
    {"params-duplicate-name.json", "parameter 'fc.weight' is listed twice"},
    {"params-unknown-key.json", "unknown key 'buffer'"},
    {"params-empty.json", "the parameter list is empty"},
    {"params-all-zero.json", "the parameter list has no elements"},
    {"params-bn-not-found.json", "batchnorm module 'bn9' has no parameters or buffers"},
    {"params-bn-mismatch.json", "batchnorm 'bn1': weight has 64 elements but running_mean has 32"},
    {"params-bn-list-not-strings.json", "field 'batchnorm[0]' must be a module name"},
    {"params-negative-activations.json", "field 'activation_bytes_per_sample' must be an integer from 0"},
    {"params-buffers-not-object.json", "field 'buffers' must be an object"},
    {"params-bare-not-shape.json", "parameter 'fc.bias': the shape must be a list of sizes"},
    {"memplan-unknown-key.json", "unknown key 'layers[0].parms'"},
    {"memplan-unknown-top-key.json", "unknown key 'n_layers'"},
    {"memplan-version.json", "memplan_model version 2 is not supported"},
    {"memplan-missing-layers.json", "missing field 'layers'"},
    {"memplan-empty-layers.json", "field 'layers' must be a non-empty list"},
    {"memplan-bad-kind.json", "field 'layers[0].kind' must be one of embed, block"},
    {"memplan-bad-arch.json", "field 'arch' must be one of generic, decoder"},
    {"memplan-negative-params.json", "field 'layers[0].params' must be an integer from 0"},
    {"memplan-largest-over-params.json", "field 'layers[0].largest_tensor' (101) exceeds the layer's params (100)"},
    {"memplan-long-layer-name.json", "field 'layers[0].name' is longer than 47 characters"},
    {"memplan-layer-not-object.json", "field 'layers[0]' must be an object"},
    {"memplan-total-too-large.json", "more than 10^15 parameters in all"},
    {"memplan-nan-flops.json", "field 'layers[0].fwd_flops' must be a number from 0"},
    {"memplan-decoder-missing-hyper.json", "missing field 'n_layer'"},
    {"memplan-block-count.json", "n_layer 2 + n_enc_layer 0 blocks expected, but layers[] has 0"},
    {"memplan-duplicate-key.json", "key 'name' is given twice"},
    {"memplan-dim0-huge.json", "field 'layers[0].tensor_dim0' entry 1 must be an integer from 0 to 20 (got 1e+300)"},
    {"memplan-unit-order.json", "field 'layers[2].unit' must be 2 (the next unit) or the previous layer's, or 0"},
};
#define N_BAD (sizeof(BAD) / sizeof(BAD[0]))

Test(plan_load_bad, every_bad_file_should_fail_with_a_message_naming_the_file_and_the_problem) {
    DIR *d = opendir("tests/data/bad");
    cr_assert_not_null(d, "run the tests from the repository root");
    int seen = 0;
    for (struct dirent *e; (e = readdir(d));) {
        if (e->d_name[0] == '.') continue;
        const char *fragment = NULL;
        for (size_t i = 0; i < N_BAD && !fragment; i++)
            if (strcmp(BAD[i].file, e->d_name) == 0) fragment = BAD[i].fragment;
        cr_expect_not_null(fragment, "tests/data/bad/%s has no expected message in BAD[]", e->d_name);
        if (!fragment) continue;
        char path[512];
        snprintf(path, sizeof(path), "tests/data/bad/%s", e->d_name);
        ModelSpec m;
        msg[0] = '\0';
        cr_expect_neq(plan_load_model(&m, path, msg, sizeof(msg)), 0, "%s was accepted", path);
        cr_expect(strstr(msg, path) != NULL, "%s: message does not name the file: %s", path, msg);
        cr_expect(strstr(msg, fragment) != NULL, "%s: expected \"%s\" in: %s", path, fragment, msg);
        cr_expect_eq(m.layers, NULL, "%s: a failed load must leave nothing to free", path);
        cr_expect_eq(m.n_layers, 0);
        seen++;
    }
    closedir(d);
    cr_expect_eq(seen, (int)N_BAD, "every BAD[] entry should have its file");
}

Test(plan_load_bad, a_missing_file_should_say_so_and_list_the_zoo) {
    ModelSpec m;
    cr_expect_neq(plan_load_model(&m, "no/such/config.json", msg, sizeof(msg)), 0);
    cr_expect(strstr(msg, "no/such/config.json: no such file"), "%s", msg);
    cr_expect(strstr(msg, "gpt2-xl"), "%s", msg);
}

Test(plan_load_bad, a_directory_without_config_json_should_be_rejected_by_name) {
    ModelSpec m;
    cr_expect_neq(plan_load_model(&m, "tests/data/bad", msg, sizeof(msg)), 0);
    cr_expect(strstr(msg, "tests/data/bad: is a directory without a config.json"), "%s", msg);
}

Test(plan_load_bad, a_device_file_should_be_rejected_as_not_a_regular_file) {
    ModelSpec m;
    cr_expect_neq(plan_load_model(&m, "/dev/null", msg, sizeof(msg)), 0);
    cr_expect(strstr(msg, "/dev/null: not a regular file"), "%s", msg);
}

Test(plan_load_bad, an_empty_argument_should_ask_for_a_model) {
    ModelSpec m;
    cr_expect_neq(plan_load_model(&m, "", msg, sizeof(msg)), 0);
    cr_expect(strstr(msg, "no model given"), "%s", msg);
}

Test(plan_load_bad, a_buffer_should_be_read_only_up_to_its_length) {
    /* the bytes after len would make it valid JSON; they must not be read */
    const char *js = "{\"model_type\": \"gpt2\"}";
    ModelSpec m;
    cr_expect_neq(plan_load_model_from_buffer(&m, js, 10, "cut", msg, sizeof(msg)), 0);
    cr_expect(strstr(msg, "cut: invalid JSON at line 1"), "%s", msg);
}

Test(plan_load_bad, a_utf8_byte_order_mark_should_be_skipped) {
    const char *js = "\xEF\xBB\xBF{\"0.weight\": [3, 4]}";
    ModelSpec m;
    cr_assert_eq(plan_load_model_from_buffer(&m, js, strlen(js), "bom", msg, sizeof(msg)), 0, "%s", msg);
    cr_expect_eq(plan_model_params(&m), 12);
    plan_model_free(&m);
}

Test(plan_load_bad, a_tiny_message_buffer_should_be_truncated_not_overrun) {
    char small[8];
    ModelSpec m;
    memset(small, 'x', sizeof(small));
    cr_expect_neq(plan_load_model_from_buffer(&m, "[", 1, "label", small, sizeof(small)), 0);
    cr_expect_eq(small[7], '\0');
    cr_expect_neq(plan_load_model_from_buffer(&m, "[", 1, "label", NULL, 0), 0);
}
