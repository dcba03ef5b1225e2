/* test_cli_recipes.c — the files people launch, read as their frameworks read them (issue 36):
 * real configs and recipes from public repositories (tests/data/configs, SOURCES.tsv names each
 * one's repository, path and commit) mapped onto memplan's flags with every assumption named;
 * DeepSpeed's "auto" resolved by its launcher, the command line, or auto's search (refused in a
 * plan, naming the flag); the default sequence; overrides re-deriving what the file derived;
 * duplicate and merge keys, types and zeros as the frameworks take them; torchtitan's flavor;
 * emitted DeepSpeed configs read back to the same peak for a matrix of auto's picks; a quantized
 * base under ZeRO-3 and FSDP held as its packed storage. Runs build/memplan ($BUILD/memplan). */
#include <math.h>
#define TEST_CLI_FILES_DIR "/tmp/memplan-rcp-XXXXXX"
#include "test_cli_files.h"

/* The config's setting of flag: its value, or its source "auto search", or "(none)". */
static const char *setting(const cJSON *j, const char *flag, const char **key) {
    const cJSON *s;
    cJSON_ArrayForEach(s, cJSON_GetObjectItem(cJSON_GetObjectItem(j, "config"), "settings"))
        if (strcmp(cJSON_GetObjectItem(s, "flag")->valuestring, flag) == 0) {
            if (key) *key = cJSON_GetObjectItem(s, "key")->valuestring;
            const char *src = cJSON_GetObjectItem(s, "source")->valuestring;
            return strcmp(src, "auto search") == 0 ? src : cJSON_GetObjectItem(s, "value")->valuestring;
        }
    return "(none)";
}

/* 1 when the config's notes hold text. */
static int noted(const cJSON *j, const char *text) {
    const cJSON *s;
    cJSON_ArrayForEach(s, cJSON_GetObjectItem(cJSON_GetObjectItem(j, "config"), "notes"))
        if (strstr(s->valuestring, text)) return 1;
    return 0;
}

static double peak(const cJSON *j, int row) {
    return cJSON_GetObjectItem(cJSON_GetObjectItem(cJSON_GetArrayItem(cJSON_GetObjectItem(j, "strategies"), row), "memory"),
                               "peak")->valuedouble;
}

static double term(const cJSON *j, const char *name) {
    return cJSON_GetObjectItem(cJSON_GetObjectItem(cJSON_GetArrayItem(cJSON_GetObjectItem(j, "strategies"), 0), "memory"),
                               name)->valuedouble;
}

typedef struct { const char *flag, *value; } Want;

static cJSON *expect(const char *args, const Want *w) {
    cr_assert_eq(runf("%s --json", args), 0, "%s: %s", args, err);
    cJSON *j = json_out();
    for (; w->flag; w++) cr_expect_str_eq(setting(j, w->flag, NULL), w->value, "%s: --%s", args, w->flag);
    return j;
}

#define C "tests/data/configs/"
#define AX C "axolotl-ai-cloud+axolotl/"
#define AH C "huggingface+alignment-handbook/recipes/"
#define LF C "hiyouga+LLaMA-Factory/examples/"
#define TT C "pytorch+torchtitan/torchtitan/models/llama3/train_configs/"

TestSuite(cli_recipes, .init = setup, .fini = teardown);

Test(cli_recipes, at_least_25_real_configs_should_be_kept_with_their_source) {
    FILE *f = fopen(C "SOURCES.tsv", "r");
    cr_assert_not_null(f);
    char line[1024];
    int n = 0;
    while (fgets(line, sizeof line, f)) {
        char repo[200], path[600], commit[64];
        cr_assert_eq(sscanf(line, "%199[^\t]\t%599[^\t]\t%63s", repo, path, commit), 3, "%s", line);
        cr_expect_eq(strlen(commit), 40, "%s: a commit", path);
        char file[1000];
        for (char *p = repo; *p; p++) if (*p == '/') *p = '+';
        snprintf(file, sizeof file, C "%s/%s", repo, path);
        cr_expect(access(file, R_OK) == 0, "%s is missing", file);
        n++;
    }
    fclose(f);
    cr_expect_geq(n, 25);
}

Test(cli_recipes, a_deepspeed_auto_should_be_refused_in_a_plan_naming_the_flag_and_the_filler) {
    /* axolotl's zero2.json: every size "auto", as the HF Trainer and accelerate fill it */
    cr_expect_eq(run("--config " AX "deepspeed_configs/zero2.json --model llama2-7b --gpus 8"), 2);
    cr_expect(strstr(err, "train_micro_batch_size_per_gpu is \"auto\"") && strstr(err, "give --batch"), "%s", err);
    cr_expect_eq(run("--config " AX "deepspeed_configs/zero2.json --model llama2-7b --gpus 8 --batch 2 --grad-accum 1"), 2);
    cr_expect(strstr(err, "bf16.enabled") && strstr(err, "give --precision") && strstr(err, "mixed-bf16"), "%s", err);
    /* resolved by the command line, and said so; a value its fp16 / bf16 sections cannot be refused */
    cJSON *j = expect("--config " AX "deepspeed_configs/zero2.json --model llama2-7b --gpus 8 --batch 2 --grad-accum 1 "
                      "--precision mixed-bf16", (const Want[]){{"strategy", "zero2"}, {"offload", "optimizer"}, {0, 0}});
    cr_expect(noted(j, "the command line's --precision") && noted(j, "the command line's --batch"));
    cJSON_Delete(j);
    cr_expect_eq(run("--config " AX "deepspeed_configs/zero2.json --model llama2-7b --gpus 8 --batch 2 --grad-accum 1 "
                     "--precision amp-bf16"), 2);
    cr_expect(strstr(err, "none of them"), "%s", err);
    /* the text header names what the command line resolved */
    cr_assert_eq(run("--config " AX "deepspeed_configs/zero2.json --model llama2-7b --gpus 8 --batch 2 --grad-accum 1 "
                     "--precision mixed-bf16"), 0);
    cr_expect(strstr(out, "read as the framework reads it:") && strstr(out, "\"auto\": the command line's --precision"), "%.600s", out);
}

Test(cli_recipes, auto_should_search_a_deepspeed_auto_not_keep_fp32) {
    /* the case: fp32 kept as if fixed (1,708 tokens/s recommended instead of 24,321) */
    cr_assert_eq(run("auto --model llama2-7b --gpus 8 --seq 4096 --config " AX "deepspeed_configs/zero2.json --json"), 0, "%s", err);
    cJSON *j = json_out();
    cr_expect_str_eq(setting(j, "precision", NULL), "auto search");
    cr_expect_str_eq(setting(j, "batch", NULL), "auto search");
    const char *p = cJSON_GetObjectItem(cJSON_GetObjectItem(j, "auto"), "precision")->valuestring;
    cr_expect(!strcmp(p, "mixed-bf16") || !strcmp(p, "mixed-fp16"), "auto picked %s: DeepSpeed's fp16/bf16 only", p);
    cJSON_Delete(j);
}

Test(cli_recipes, under_the_trainer_and_accelerate_auto_should_be_filled_from_their_keys) {
    /* LLaMA-Factory's full SFT recipe names examples/deepspeed/ds_z3_config.json from the repository
       root: found above the recipe's folder, every "auto" filled by the Trainer from the recipe */
    cJSON *j = expect("--config " LF "train_full/qwen3_full_sft.yaml --model tests/data/hf/qwen3-8b.json --gpus 8",
                      (const Want[]){{"strategy", "zero3"}, {"precision", "mixed-bf16"}, {"batch", "1"}, {"grad-accum", "2"},
                                     {"seq", "2048"}, {"act-ckpt", "full"}, {0, 0}});
    cr_expect(noted(j, "found above the recipe's folder"));
    cr_expect(noted(j, "\"auto\" is filled by the HF Trainer"));
    cJSON_Delete(j);
    /* accelerate's deepspeed_config_file: precision from mixed_precision, the micro-batch the DataLoader's */
    cr_expect_eq(run("--config " C "huggingface+accelerate/examples/config_yaml_templates/deepspeed.yaml --model gpt2"), 2);
    cr_expect(strstr(err, "accelerate fills in") && strstr(err, "give --batch"), "%s", err);
}

Test(cli_recipes, the_default_sequence_should_be_at_most_4096_and_said) {
    cr_assert_eq(run("--model tests/data/hf/llama-3.1-8b.json --gpus 8 --json"), 0);
    cJSON *j = json_out();
    cJSON *t = cJSON_GetObjectItem(j, "train");
    cr_expect_eq(cJSON_GetObjectItem(t, "seq")->valuedouble, 4096);
    cr_expect_eq(cJSON_GetObjectItem(t, "model_context")->valuedouble, 131072);
    cJSON_Delete(j);
    cr_assert_eq(run("--model tests/data/hf/llama-3.1-8b.json --gpus 8"), 0);
    cr_expect(strstr(out, "# seq 4096: memplan's default, min(the model's context 131072, 4096)"), "%.300s", out);
    /* a context within it, or --seq: no note */
    cr_assert_eq(run("--model gpt2 --gpus 2"), 0);
    cr_expect(!strstr(out, "memplan's default, min"));
    cr_assert_eq(run("--model tests/data/hf/llama-3.1-8b.json --gpus 8 --seq 131072 --json"), 0);
    j = json_out();
    cr_expect_null(cJSON_GetObjectItem(cJSON_GetObjectItem(j, "train"), "model_context"));
    cJSON_Delete(j);
}

Test(cli_recipes, a_trl_qlora_recipe_should_map_lora_4bit_dtype_sequence_and_checkpointing) {
    /* alignment-handbook's zephyr-7b-beta SFT QLoRA recipe (TRL SFTConfig + ModelConfig) */
    cJSON *j = expect("--config " AH "zephyr-7b-beta/sft/config_qlora.yaml --model tests/data/hf/mistral-7b-v0.1.json --gpus 8",
                      (const Want[]){{"batch", "4"}, {"grad-accum", "2"}, {"seq", "2048"}, {"act-ckpt", "full"}, {"lora", "16"},
                                     {"lora-alpha", "16"}, {"lora-dropout", "0.05"},
                                     {"lora-targets", "q_proj,k_proj,v_proj,o_proj,gate_proj,up_proj,down_proj"},
                                     {"quant-base", "nf4"}, {"precision", "amp-bf16"}, {"strategy", "ddp"}, {"attn", "sdpa"}, {0, 0}});
    const cJSON *nm = cJSON_GetObjectItem(cJSON_GetObjectItem(j, "config"), "not_modelled");
    char *t = cJSON_PrintUnformatted(nm);
    cr_expect(strstr(t, "use_bnb_nested_quant") && strstr(t, "chunked_nll"), "%s", t);   /* named, not dropped */
    free(t);
    cJSON_Delete(j);
    /* the DPO recipe: chosen and rejected in one forward, the reference model named */
    j = expect("--config " AH "zephyr-7b-beta/dpo/config_full.yaml --model tests/data/hf/mistral-7b-v0.1.json --gpus 8",
               (const Want[]){{"batch", "16"}, {"seq", "1024"}, {"optimizer", "adamw"}, {0, 0}});
    t = cJSON_PrintUnformatted(cJSON_GetObjectItem(cJSON_GetObjectItem(j, "config"), "not_modelled"));
    cr_expect(strstr(t, "reference model"), "%s", t);
    free(t);
    cJSON_Delete(j);
    /* TRL's defaults where the recipe is silent: max_length 1024, gradient checkpointing, bf16 */
    cJSON_Delete(expect("--config " C "huggingface+trl/examples/cli_configs/example_config.yaml --model gpt2 --gpus 2",
                        (const Want[]){{"seq", "1024"}, {"act-ckpt", "full"}, {"precision", "amp-bf16"}, {"batch", "8"}, {0, 0}}));
}

Test(cli_recipes, llama_factory_and_axolotl_recipes_should_map_onto_the_same_flags) {
    cJSON_Delete(expect("--config " LF "train_qlora/qwen3_lora_sft_otfq.yaml --model tests/data/hf/qwen3-8b.json --gpus 8",
                        (const Want[]){{"lora", "8"}, {"lora-alpha", "16"}, {"lora-targets", "all-linear"}, {"quant-base", "nf4"},
                                       {"seq", "2048"}, {"act-ckpt", "full"}, {"batch", "1"}, {"grad-accum", "8"}, {0, 0}}));
    /* LoRA over a bf16 checkpoint: the frozen base at its load dtype */
    cJSON_Delete(expect("--config " LF "train_lora/qwen3_lora_sft.yaml --model tests/data/hf/qwen3-8b.json --gpus 8",
                        (const Want[]){{"quant-base", "bf16"}, {"precision", "amp-bf16"}, {0, 0}}));
    /* axolotl: lora_target_linear, bf16 "auto" by the GPU (fp16 on a V100) */
    cJSON_Delete(expect("--config " AX "examples/llama-3/qlora.yml --model llama2-7b --gpus 8",
                        (const Want[]){{"lora", "32"}, {"lora-targets", "all-linear"}, {"quant-base", "nf4"}, {"seq", "4096"},
                                       {"batch", "2"}, {"grad-accum", "4"}, {"precision", "amp-bf16"}, {0, 0}}));
    cJSON_Delete(expect("--config " AX "examples/llama-3/qlora.yml --model llama2-7b --gpus 8 --gpu v100-32gb",
                        (const Want[]){{"precision", "amp-fp16"}, {0, 0}}));
    /* axolotl's FSDP QLoRA recipe (fsdp words and fsdp_config) and its DeepSpeed pointer */
    cJSON_Delete(expect("--config " AX "examples/llama-3/qlora-fsdp-70b.yaml --model llama2-70b --gpus 8",
                        (const Want[]){{"strategy", "fsdp-full"}, {"offload", "params"}, {"quant-base", "nf4"}, {0, 0}}));
    cJSON_Delete(expect("--config " AX "examples/mistral/bigstral/bigstral-ds-zero3.yaml --model tests/data/hf/mixtral-8x7b-v0.1.json --gpus 8",
                        (const Want[]){{"strategy", "zero3"}, {"precision", "mixed-bf16"}, {0, 0}}));
    /* TrainingArguments as YAML (HfArgumentParser.parse_yaml_file) */
    const char *y = put("args.yaml", "output_dir: out\nper_device_train_batch_size: 4\nbf16: true\ngradient_checkpointing: true\n");
    char args[600];
    snprintf(args, sizeof args, "--config %s --model gpt2 --gpus 2", y);
    cJSON_Delete(expect(args, (const Want[]){{"batch", "4"}, {"precision", "amp-bf16"}, {"act-ckpt", "full"}, {0, 0}}));
}

Test(cli_recipes, a_command_line_flag_should_re_derive_what_the_file_derived_from_it) {
    /* accelerate: --gpus 16 over the file's num_machines 2 is 8 per node (the issue: 4 kept) */
    cJSON *j = expect("--config " C "huggingface+accelerate/examples/config_yaml_templates/multi_node.yaml --model gpt2 --gpus 16",
                      (const Want[]){{"gpus-per-node", "8"}, {0, 0}});
    cr_expect(noted(j, "re-derived"));
    cJSON_Delete(j);
    /* torchtitan 70B: tp 8 with its SequenceParallel norms; --tp 1 drops them */
    cr_assert_eq(run("--config " TT "llama3_70b.toml --gpus 8 --tp 1 --json"), 0, "%s", err);
    j = json_out();
    cr_expect_str_eq(setting(j, "sp", NULL), "(none)");
    cr_expect(noted(j, "tensor parallel from the command line's --tp 1"));
    cJSON_Delete(j);
    /* --pp 2 over a file whose accumulation was derived: the micro-batches instead */
    cr_assert_eq(run("--config " TT "llama3_70b.toml --gpus 16 --pp 2 --json"), 0, "%s", err);
    j = json_out();
    cr_expect_str_eq(setting(j, "grad-accum", NULL), "(none)");
    cr_expect_str_neq(setting(j, "microbatches", NULL), "(none)");
    cJSON_Delete(j);
    /* --pp over a file's gradient_accumulation_steps: its micro-batches (the issue: refused because
       of the derived --grad-accum), or the pipeline's default when fewer than the stages */
    char args[600];
    snprintf(args, sizeof args, "--config %s --model gpt2 --gpus 4 --pp 2",
             put("ga.json", "{\"output_dir\": \"o\", \"gradient_accumulation_steps\": 4}"));
    cJSON_Delete(expect(args, (const Want[]){{"microbatches", "4"}, {"grad-accum", "(none)"}, {0, 0}}));
    snprintf(args, sizeof args, "--config %s --model gpt2 --gpus 4 --pp 2",
             put("ga1.json", "{\"output_dir\": \"o\", \"gradient_accumulation_steps\": 1}"));
    cr_assert_eq(runf("%s --json", args), 0, "%s", err);
    j = json_out();
    cr_expect(noted(j, "fewer than the stages"));
    cr_expect_eq(cJSON_GetObjectItem(cJSON_GetObjectItem(j, "train"), "grad_accum")->valuedouble, 2);
    cJSON_Delete(j);
}

Test(cli_recipes, torchtitan_flavor_should_be_checked_against_the_model_or_be_the_model) {
    cr_expect_eq(run("--config " TT "llama3_70b.toml --model tests/data/hf/llama-3.1-8b.json --gpus 8"), 2);
    cr_expect(strstr(err, "model.flavor 70B") && strstr(err, "32 blocks, hidden 4096"), "%s", err);
    cr_assert_eq(run("--config " TT "llama3_8b.toml --gpus 8 --json"), 0, "%s", err);
    cJSON *j = json_out();
    cr_expect_eq(cJSON_GetObjectItem(cJSON_GetObjectItem(j, "model"), "params")->valuedouble, 8030261248.0);   /* Llama 3.1 8B */
    cJSON_Delete(j);
    cr_expect_eq(run("--config " TT "llama3_8b.toml --model tests/data/hf/llama-3.1-8b.json --gpus 8"), 0, "%s", err);
    /* pipeline_parallel_degree onto --pp */
    const char *f = put("pp.toml", "[training]\nlocal_batch_size = 8\nseq_len = 512\n[parallelism]\npipeline_parallel_degree = 2\n"
                                   "data_parallel_shard_degree = 1\n[model]\nname = \"llama3\"\nflavor = \"debugmodel\"\n");
    char args[600];
    snprintf(args, sizeof args, "--config %s --gpus 2", f);
    cJSON_Delete(expect(args, (const Want[]){{"pp", "2"}, {"pp-schedule", "1f1b"}, {"batch", "1"}, {"microbatches", "8"},
                                             {"pp-less-first", "1"}, {"pp-less-last", "1"}, {"pp-return-outputs", "off"},
                                             {0, 0}}));
    /* Interleaved1F1B: 2 stages per rank (pipeline_parallel.py), the split's weights as given */
    f = put("ppi.toml", "[training]\nlocal_batch_size = 8\nseq_len = 512\n[parallelism]\npipeline_parallel_degree = 2\n"
                        "pipeline_parallel_schedule = \"Interleaved1F1B\"\npipeline_parallel_first_stage_less_layers = 0\n"
                        "pipeline_parallel_last_stage_less_layers = 2\ndata_parallel_shard_degree = 1\n[model]\nname = \"llama3\"\n"
                        "flavor = \"debugmodel\"\n");
    snprintf(args, sizeof args, "--config %s --gpus 2", f);
    cJSON_Delete(expect(args, (const Want[]){{"pp-schedule", "interleaved"}, {"pp-virtual", "2"}, {"pp-less-first", "0"},
                                             {"pp-less-last", "2"}, {0, 0}}));
}

Test(cli_recipes, keys_should_be_read_as_each_framework_reads_them) {
    char args[600];
    /* duplicates: DeepSpeed refuses, accelerate's PyYAML keeps the last (and says so) */
    snprintf(args, sizeof args, "--config %s --model gpt2 --gpus 2",
             put("d.json", "{\"train_micro_batch_size_per_gpu\": 2, \"train_micro_batch_size_per_gpu\": 4, \"bf16\": {\"enabled\": true}}"));
    cr_expect_eq(run(args), 2);
    cr_expect(strstr(err, "appears twice") && strstr(err, "DeepSpeed refuses"), "%s", err);
    snprintf(args, sizeof args, "--config %s --model gpt2",
             put("a.yaml", "distributed_type: MULTI_GPU\nmixed_precision: fp16\nmixed_precision: bf16\nnum_processes: 2\n"));
    cJSON *j = expect(args, (const Want[]){{"precision", "amp-bf16"}, {0, 0}});
    cr_expect(noted(j, "duplicate key mixed_precision"));
    cJSON_Delete(j);
    /* a merge key lends its keys; explicit ones win */
    snprintf(args, sizeof args, "--config %s --model gpt2",
             put("m.yaml", "base: &b\n  fsdp_version: 2\n  fsdp_reshard_after_forward: false\n  fsdp_offload_params: true\n"
                           "distributed_type: FSDP\nnum_processes: 2\nfsdp_config:\n  <<: *b\n  fsdp_offload_params: false\n"));
    cJSON_Delete(expect(args, (const Want[]){{"fsdp", "2"}, {"strategy", "fsdp-grad-op"}, {"offload", "none"}, {0, 0}}));
    /* types: a string where DeepSpeed takes a table; its bool spelling of stage 1; zeros valid */
    snprintf(args, sizeof args, "--config %s --model gpt2",
             put("s.json", "{\"train_micro_batch_size_per_gpu\": 1, \"zero_optimization\": \"3\", \"bf16\": {\"enabled\": true}}"));
    cr_expect_eq(run(args), 2);
    cr_expect(strstr(err, "zero_optimization '3' is not valid (valid: a table of settings)"), "%s", err);
    snprintf(args, sizeof args, "--config %s --model gpt2 --gpus 2",
             put("t.json", "{\"train_micro_batch_size_per_gpu\": 1, \"zero_optimization\": true, \"bf16\": {\"enabled\": true}}"));
    cJSON_Delete(expect(args, (const Want[]){{"strategy", "zero1"}, {0, 0}}));
    snprintf(args, sizeof args, "--config %s --model gpt2 --gpus 2",
             put("z.json", "{\"train_micro_batch_size_per_gpu\": 1, \"bf16\": {\"enabled\": true}, \"zero_optimization\": "
                           "{\"stage\": 3, \"stage3_prefetch_bucket_size\": 0}}"));
    cJSON_Delete(expect(args, (const Want[]){{"ds3-prefetch", "0"}, {0, 0}}));
    /* but reduce_bucket_size from 1: DeepSpeed refuses 0 (zero/config.py: gt=0) */
    snprintf(args, sizeof args, "--config %s --model gpt2 --gpus 2",
             put("z0.json", "{\"train_micro_batch_size_per_gpu\": 1, \"bf16\": {\"enabled\": true}, \"zero_optimization\": "
                            "{\"stage\": 2, \"reduce_bucket_size\": 0}}"));
    cr_expect_eq(run(args), 2);
    cr_expect(strstr(err, "reduce_bucket_size") && strstr(err, "0"), "%s", err);
    /* a newline in a value: the warning stays one line */
    snprintf(args, sizeof args, "--config %s --model gpt2", put("n.yaml", "distributed_type: MULTI_GPU\nodd: \"a\\nb\"\n"));
    cr_assert_eq(run(args), 0);
    cr_expect(strstr(err, "odd=a\\nb") && strchr(err, '\n') == err + strlen(err) - 1, "%s", err);
}

Test(cli_recipes, parsers_should_be_bounded) {
    char args[600], bomb[2048];
    size_t o = (size_t)snprintf(bomb, sizeof bomb, "a: &a [x,x,x,x,x,x,x,x,x]\n");
    for (int i = 0; i < 8; i++)
        o += (size_t)snprintf(bomb + o, sizeof bomb - o, "%c: &%c [*%c,*%c,*%c,*%c,*%c,*%c,*%c,*%c,*%c]\n", 'b' + i, 'b' + i,
                              'a' + i, 'a' + i, 'a' + i, 'a' + i, 'a' + i, 'a' + i, 'a' + i, 'a' + i, 'a' + i);
    snprintf(args, sizeof args, "--config %s --model gpt2", put("bomb.yaml", bomb));
    cr_expect_eq(run(args), 2);
    cr_expect(strstr(err, "alias") && strstr(err, "100000 values"), "%s", err);
    static char deep[200010];
    memset(deep, '[', 100000);
    memset(deep + 100000, ']', 100000);
    snprintf(args, sizeof args, "--config %s --model gpt2", put("deep.yaml", deep));
    cr_expect_eq(run(args), 2);
    cr_expect(strstr(err, "nests deeper"), "%s", err);
    cr_expect_eq(run("--config /dev/zero --model gpt2"), 2);
    cr_expect(strstr(err, "not a regular file"), "%s", err);
    cr_expect_eq(run("alloc /dev/zero"), 2);
    cr_expect_str_empty(out);
    cr_expect_eq(run("alloc tests/data/alloc/gpt2-mini_ddp_fp32_none_eager_r2_b1_s128.txt /dev/null"), 2);
    cr_expect_str_empty(out, "the first trace's rows were printed before the second failed: %.200s", out);
}

/* auto --emit deepspeed, then the read-back line it prints: the same strategy and peak. */
static void round_trip(const char *args) {
    char cmd[4096], rb[4096];
    snprintf(cmd, sizeof cmd, "auto %s --emit deepspeed", args);
    cr_assert_eq(run(cmd), 0, "%s: %s", args, err);
    const char *j = put("rt.json", out);
    const char *pred = strstr(err, "# memplan prediction for ");
    cr_assert_not_null(pred, "%s", err);
    char strat[32];
    double gib;
    cr_assert_eq(sscanf(pred, "# memplan prediction for %31[^ ,]%*[^:]: peak %lf GiB", strat, &gib), 2, "%.200s", pred);
    const char *line = strstr(err, "# read back: memplan --config FILE");
    cr_assert_not_null(line, "%s", err);
    line += strlen("# read back: memplan --config FILE");
    size_t n = strcspn(line, "\n");
    snprintf(rb, sizeof rb, "--config %s%.*s --json", j, (int)n, line);
    cr_assert_eq(run(rb), 0, "%s: %s", rb, err);
    cJSON *p = json_out();
    cr_expect_str_eq(cJSON_GetObjectItem(cJSON_GetArrayItem(cJSON_GetObjectItem(p, "strategies"), 0), "name")->valuestring, strat);
    cr_expect(fabs(peak(p, 0) / (1024.0 * 1024 * 1024) - gib) < 0.006, "%s: predicted %.2f GiB, read back %.3f GiB", args, gib,
              peak(p, 0) / (1024.0 * 1024 * 1024));
    cJSON_Delete(p);
}

Test(cli_recipes, every_emitted_deepspeed_config_should_read_back_to_the_same_peak) {
    round_trip("--model gpt2-xl --gpus 8");                                     /* dense */
    round_trip("--model llama2-7b --gpus 8 --lora 16");                         /* LoRA */
    round_trip("--model llama2-7b --gpus 8 --lora 16 --quant-base nf4");        /* QLoRA (37.81 vs 40.26 GiB before) */
    round_trip("--model llama2-7b --gpus 2 --offload optimizer");               /* offload */
    round_trip("--model llama2-13b --gpus 8 --offload params");
    round_trip("--model llama2-7b --gpus 8 --precision bf16");                  /* pure bf16 */
    round_trip("--model gpt2 --gpus 4 --lora 8 --lora-targets all-linear --lora-dropout 0.1");
    round_trip("--model llama2-7b --gpus 8 --alloc-conf expandable_segments:True");
    /* tp and pp picks: no DeepSpeed config can hold them, refused in one line */
    cr_expect_eq(run("auto --model llama2-7b --gpus 8 --tp auto --emit deepspeed"), 2);
    cr_expect(strstr(err, "tensor parallel") && !out[0]);
    cr_expect_eq(run("auto --model gpt2 --gpus 8 --pp auto --emit deepspeed"), 2);
    cr_expect(strstr(err, "pipeline stages") && !out[0]);
}

Test(cli_recipes, the_torch_snippet_should_be_the_plan) {
    cr_assert_eq(run("auto --model llama2-7b --gpus 8 --lora 16 --quant-base nf4 --precision fp32 --act-ckpt none --emit torch"), 0, "%s", err);
    cr_expect(strstr(out, "bnb_4bit_compute_dtype=torch.float32"), "%s", out);   /* not a hard-coded bf16 */
    cr_expect(strstr(out, "prepare_model_for_kbit_training(model, use_gradient_checkpointing=False)"), "%s", out);
    cr_expect(!strstr(out, "gradient_checkpointing_enable"), "%s", out);
    cr_assert_eq(run("auto --model gpt2-xl --gpus 8 --alloc-conf expandable_segments:True --emit torch"), 0);
    cr_expect(strncmp(out, "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True torchrun", 57) == 0, "%.120s", out);
}

Test(cli_recipes, a_quantized_base_should_be_sharded_and_gathered_as_its_packed_storage) {
    double p[3], g[3];
    static const char *const Q[3] = {"none", "bf16", "nf4"};
    for (int i = 0; i < 3; i++) {
        cr_assert_eq(runf("--model llama2-7b --gpus 8 --lora 16 --quant-base %s --strategy zero3 --json", Q[i]), 0, "%s", err);
        cJSON *j = json_out();
        p[i] = term(j, "params");
        cJSON_Delete(j);
        cr_assert_eq(runf("--model llama2-7b --gpus 8 --lora 16 --quant-base %s --strategy fsdp-grad-op --json", Q[i]), 0, "%s", err);
        j = json_out();
        g[i] = term(j, "comm_buffers");
        cJSON_Delete(j);
    }
    /* ZeRO-3 holds 1/8 of each: fp32 4 B, bf16 2 B, NF4 0.52 B per weight of the 6.48 B projections */
    cr_expect(p[0] > 1.8 * p[1] && p[1] > 2.5 * p[2], "zero3 params %.3g %.3g %.3g GiB", p[0] / (1 << 30), p[1] / (1 << 30), p[2] / (1 << 30));
    cr_expect(p[2] < 0.6 * (1 << 30), "zero3 nf4 params %.3g GiB", p[2] / (1 << 30));
    /* SHARD_GRAD_OP keeps every gathered unit from forward to backward: at the stored bytes */
    cr_expect(g[0] > 1.8 * g[1] && g[1] > 3 * g[2], "fsdp-grad-op gathered %.3g %.3g %.3g GiB", g[0] / (1 << 30), g[1] / (1 << 30),
              g[2] / (1 << 30));
    cr_expect_eq(run("--model llama2-7b --gpus 8 --lora 16 --quant-base int8 --strategy zero3"), 2);
    cr_expect(strstr(err, "8-bit base is not sharded"), "%s", err);
}

Test(cli_recipes, bounds_should_mean_something) {
    cr_expect_eq(run("--model gpt2 --lora 65536"), 2);
    cr_expect(strstr(err, "valid here: 1 to 768"), "%s", err);
    cr_expect_eq(run("--model gpt2 --gpus 2 --tp 2 --offload params --json"), 2);
    cr_expect_str_empty(out);
    cr_expect_eq(run("--model tests/data/hf/llama-4-scout-17b-16e-text.json --gpus 8 --moe-imbalance 4"), 0);
    cr_expect(strstr(err, "--moe-imbalance 4 changes nothing"), "%s", err);
    cr_expect_eq(run("run --model gpt2-tiny --lora 8"), 2);
    cr_expect(strstr(err, "does not honour --lora"), "%s", err);
    cr_expect_eq(run("validate --model gpt2-tiny --freeze embeddings"), 2);
    cr_expect_eq(run("--model gpt2 --dropout 0.9995"), 2);
    cr_expect(strstr(err, "[0, 0.999]"), "%s", err);
    cr_expect_eq(run("--model gpt2 --dropout 0.999"), 0);
}

Test(cli_recipes, accelerates_fsdp_mixed_precision_should_reduce_in_16_bits) {
    /* the case: planned with an fp32 reduction, accelerate reduces in bf16 (43.5 vs ~32.9 GiB) */
    cJSON *j = expect("--config " C "huggingface+trl/trl/accelerate_configs/fsdp2.yaml --model llama2-7b --gpus 8",
                      (const Want[]){{"fsdp-reduce-dtype", "bf16"}, {"precision", "mixed-bf16"}, {0, 0}});
    cJSON_Delete(j);
    double wire[2];
    for (int i = 0; i < 2; i++) {
        cr_assert_eq(runf("--model llama2-7b --gpus 8 --strategy fsdp-full --precision mixed-bf16 --fsdp-reduce-dtype %s --json",
                          i ? "bf16" : "fp32"), 0, "%s", err);
        j = json_out();
        const cJSON *col;
        wire[i] = 0;
        cJSON_ArrayForEach(col, cJSON_GetObjectItem(cJSON_GetObjectItem(cJSON_GetArrayItem(cJSON_GetObjectItem(j, "strategies"), 0), "comm"), "collectives"))
            if (!strcmp(cJSON_GetObjectItem(col, "op")->valuestring, "reduce_scatter"))
                wire[i] += cJSON_GetObjectItem(col, "wire_bytes_per_gpu")->valuedouble;
        cJSON_Delete(j);
    }
    cr_expect(wire[0] > 0 && fabs(wire[1] / wire[0] - 0.5) < 0.01, "reduce-scatter wire fp32 %g, bf16 %g", wire[0], wire[1]);
}

