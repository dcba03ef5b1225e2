/* test_cli.c — the command line as a user meets it: the main job, JSON keys, exit codes and
 * one-line errors for bad input. Runs build/memplan (or $BUILD/memplan). */
#include <cjson/cJSON.h>
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#include "plan_util.h"

static char out[1 << 20];

/* Runs memplan with args; returns the exit status, output (stdout+stderr) in out. */
static int run(const char *args) {
    const char *b = getenv("BUILD");
    char cmd[1024];
    snprintf(cmd, sizeof(cmd), "%s/memplan %s 2>&1", b && *b ? b : "build", args);
    FILE *p = popen(cmd, "r");
    cr_assert_not_null(p);
    size_t n = fread(out, 1, sizeof(out) - 1, p);
    out[n] = 0;
    int st = pclose(p);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static int lines(const char *s) {
    int n = 0;
    for (; *s; s++) n += *s == '\n';
    return n;
}

Test(cli, main_job_should_plan_every_strategy_and_recommend) {
    cr_assert_eq(run("--model gpt2-xl --gpus 8"), 0, "%s", out);
    const char *names[] = {"ddp", "zero1", "zero2", "zero3", "fsdp-full", "fsdp-grad-op", "fsdp-hybrid"};
    for (int i = 0; i < 7; i++) cr_expect(strstr(out, names[i]), "missing %s", names[i]);
    cr_expect(strstr(out, "recommendation: "));
    cr_expect(strstr(out, "GiB"));
}

Test(cli, gpt2_xl_on_24_gib_should_not_fit_ddp_and_name_a_strategy_that_fits) {
    cr_assert_eq(run("--model gpt2-xl --gpus 8 --gpu-mem 24GiB --json"), 0, "%s", out);
    cJSON *j = cJSON_Parse(out);
    cr_assert_not_null(j, "output is not JSON: %.200s", out);
    cJSON *s = cJSON_GetObjectItem(j, "strategies");
    cJSON *ddp = cJSON_GetArrayItem(s, 0);
    cr_expect_str_eq(cJSON_GetObjectItem(ddp, "name")->valuestring, "ddp");
    cr_expect(cJSON_IsFalse(cJSON_GetObjectItem(ddp, "fits")));
    const char *rec = cJSON_GetObjectItem(cJSON_GetObjectItem(j, "recommendation"), "strategy")->valuestring;
    cr_assert_not_null(rec);
    cr_expect_str_neq(rec, "ddp");
    cJSON *e;
    int found = 0;
    cJSON_ArrayForEach(e, s) if (strcmp(cJSON_GetObjectItem(e, "name")->valuestring, rec) == 0) {
        found = 1;
        cr_expect(cJSON_IsTrue(cJSON_GetObjectItem(e, "fits")));
    }
    cr_expect(found);
    cJSON_Delete(j);
}

Test(cli, json_should_carry_every_contract_key) {
    cr_assert_eq(run("--model gpt2 --gpus 4 --json"), 0, "%s", out);
    cJSON *j = cJSON_Parse(out);
    cr_assert_not_null(j);
    const char *top[][2] = {{"model", "name"}, {"model", "params"}, {"cluster", "gpu"},
        {"cluster", "gpus"}, {"cluster", "gpus_per_node"}, {"cluster", "gpu_mem_bytes"},
        {"train", "micro_batch"}, {"train", "seq"}, {"train", "grad_accum"}, {"train", "precision"},
        {"train", "optimizer"}, {"train", "act_ckpt"}, {"train", "attn"}, {"train", "dropout"},
        {"recommendation", "strategy"}, {"recommendation", "reason"}};
    for (size_t i = 0; i < sizeof(top) / sizeof(top[0]); i++)
        cr_expect_not_null(cJSON_GetObjectItem(cJSON_GetObjectItem(j, top[i][0]), top[i][1]),
                           "missing %s.%s", top[i][0], top[i][1]);
    cr_expect_eq(cJSON_GetObjectItem(cJSON_GetObjectItem(j, "model"), "params")->valuedouble, 124439808.0);
    cJSON *s = cJSON_GetObjectItem(j, "strategies");
    cr_assert_eq(cJSON_GetArraySize(s), 7);
    cJSON *e;
    cJSON_ArrayForEach(e, s) {
        const char *k[] = {"name", "fits", "max_micro_batch", "model_states_bytes", "memory"};
        for (int i = 0; i < 5; i++) cr_expect_not_null(cJSON_GetObjectItem(e, k[i]), "missing %s", k[i]);
        const char *mk[] = {"params", "grads", "comm_buffers", "optimizer", "activations", "transient", "overhead", "peak"};
        for (int i = 0; i < 8; i++)
            cr_expect(cJSON_IsNumber(cJSON_GetObjectItem(cJSON_GetObjectItem(e, "memory"), mk[i])), "memory.%s", mk[i]);
    }
    cJSON_Delete(j);
}

Test(cli, one_strategy_by_name_should_give_one_row) {
    cr_assert_eq(run("--model gpt2 --gpus 2 --strategy zero2 --json"), 0);
    cJSON *j = cJSON_Parse(out);
    cr_assert_eq(cJSON_GetArraySize(cJSON_GetObjectItem(j, "strategies")), 1);
    cJSON_Delete(j);
}

/* The help by command: auto's own flags before the shared ones, examples in every help, -h as
   --help, the version on --version and in the JSON. */
static const char *at(const char *needle) {
    const char *p = strstr(out, needle);
    cr_assert_not_null(p, "missing '%s' in: %.400s", needle, out);
    return p;
}

Test(cli, auto_help_should_show_autos_flags_before_the_shared_ones) {
    cr_assert_eq(run("auto --help"), 0, "%s", out);
    cr_expect(strncmp(out, "memplan auto", 12) == 0, "%.200s", out);
    cr_expect(at("--global-batch G") < at("--model NAME|ID|PATH   a zoo model"));
    cr_expect(at("--emit deepspeed|torch") < at("--batch B "));
    cr_expect(at("--min-headroom") < at("--gpus N "));
}

Test(cli, every_help_should_carry_examples_and_h_should_be_help) {
    const char *cmds[] = {"--help", "-h", "help", "plan --help", "plan -h", "auto -h", "help auto"};
    for (size_t i = 0; i < sizeof cmds / sizeof cmds[0]; i++) {
        cr_assert_eq(run(cmds[i]), 0, "%s: %s", cmds[i], out);
        cr_expect(strstr(out, "Examples:\n  memplan "), "%s has no examples", cmds[i]);
        cr_expect(strstr(out, "(default"), "%s shows no defaults", cmds[i]);
    }
    cr_assert_eq(run("plan --help"), 0);
    cr_expect(strncmp(out, "memplan plan", 12) == 0, "%.200s", out);
    cr_assert_eq(run("models -h"), 0);
    cr_expect(strncmp(out, "memplan models", 14) == 0, "%.200s", out);
    cr_assert_eq(run("gpus -h"), 0);
}

Test(cli, help_should_list_strategy_auto) {
    cr_assert_eq(run("--help"), 0);
    cr_expect(strstr(out, "auto: the same as memplan auto"), "%s", out);
    cr_assert_eq(run("--model gpt2 --gpus 8 --strategy auto"), 0, "%s", out);
    cr_expect(strstr(out, "# auto: searched"), "%s", out);
}

Test(cli, version_should_print_and_ride_in_the_json) {
    cr_assert_eq(run("--version"), 0);
    char want[64];
    cr_assert(sscanf(out, "memplan %63s", want) == 1, "%s", out);
    cr_expect_eq(strspn(want, "0123456789."), strlen(want), "%s", out);
    cr_assert_eq(run("--model gpt2 --gpus 2 --json"), 0);
    cJSON *j = cJSON_Parse(out);
    cr_assert_not_null(j);
    cr_expect_str_eq(cJSON_GetObjectItem(j, "version")->valuestring, want);
    cJSON_Delete(j);
    cr_assert_eq(run("auto --model gpt2 --gpus 2 --json"), 0);
    j = cJSON_Parse(out);
    cr_assert_not_null(j);
    cr_expect_str_eq(cJSON_GetObjectItem(j, "version")->valuestring, want);
    cJSON_Delete(j);
}

Test(cli, help_should_show_the_defaults) {
    cr_assert_eq(run("--help"), 0);
    cr_expect(strstr(out, "default amp-bf16") && strstr(out, "default adamw") && strstr(out, "default sdpa"));
    cr_expect(strstr(out, "a100-40gb"));
}

Test(cli, models_and_gpus_should_list_the_tables) {
    cr_assert_eq(run("models"), 0);
    cr_expect(strstr(out, "1,557,611,200") && strstr(out, "25,557,032"));
    cr_assert_eq(run("gpus"), 0);
    cr_expect(strstr(out, "h100-80gb") && strstr(out, "titan-rtx"));
}

/* Each bad input: exit 2 and one line naming the bad value. */
static void expect_usage_error(const char *args, const char *fragment) {
    int rc = run(args);
    cr_expect_eq(rc, 2, "'%s' exited %d: %s", args, rc, out);
    cr_expect(strstr(out, fragment), "'%s' said: %s", args, out);
    cr_expect_eq(lines(out), 1, "'%s' printed %d lines: %s", args, lines(out), out);
}

Test(cli, bad_input_should_get_one_line_and_exit_2) {
    expect_usage_error("--model gpt5 --gpus 8", "unknown model 'gpt5'");
    expect_usage_error("--model gpt2 --gpu x100", "unknown --gpu 'x100'");
    expect_usage_error("--model gpt2 --strategy zero4", "unknown --strategy 'zero4'");
    expect_usage_error("--model gpt2 --precision fp8", "unknown --precision 'fp8'");
    expect_usage_error("--model gpt2 --optimizer lion", "unknown --optimizer 'lion'");
    expect_usage_error("--model gpt2 --gpus 0", "--gpus '0'");
    expect_usage_error("--model gpt2 --gpus -3", "--gpus '-3'");
    expect_usage_error("--model gpt2 --gpus eight", "--gpus 'eight'");
    expect_usage_error("--model gpt2 --gpus 1e12", "--gpus '1e12'");
    expect_usage_error("--model gpt2 --batch 0", "--batch '0'");
    expect_usage_error("--model gpt2 --gpu-mem 24XB", "--gpu-mem '24XB'");
    expect_usage_error("--model gpt2 --dropout 1.5", "--dropout '1.5'");
    expect_usage_error("--model gpt2 --alloc-margin 200%", "--alloc-margin '200%'");
    expect_usage_error("--params -5", "--params '-5'");
    expect_usage_error("--gpus 8", "no model");
    expect_usage_error("--model gpt2 --bogus", "unknown option '--bogus'");
    expect_usage_error("--model gpt2 --gpus", "--gpus needs a value");
    expect_usage_error("--model gpt2 --gpu v100-16gb --precision amp-bf16", "bf16");
    expect_usage_error("frobnicate", "unknown command 'frobnicate'");
}

/* --attn-kernel: FlashAttention-3 runs only on Hopper and FlashAttention-4 has a curve on B200
   only; a flash kernel needs SDPA's flash path (not eager); the kernel shows in the train line */
Test(cli, a_flash_kernel_should_be_planned_where_its_curve_is_published_and_refused_elsewhere) {
    expect_usage_error("--model gpt2 --attn-kernel fa9", "unknown --attn-kernel 'fa9'");
    expect_usage_error("--model gpt2 --gpu a100-80gb --attn-kernel fa3", "fa3 on: h100-80gb, h100-96gb, h800, h200");
    expect_usage_error("--model gpt2 --gpu h100-80gb --attn-kernel fa4", "fa4 on: b200");
    expect_usage_error("--model gpt2 --gpu h100-80gb --attn eager --attn-kernel fa3", "needs --attn sdpa");
    cr_assert_eq(run("--model gpt2 --gpus 8 --gpu h200 --attn-kernel fa3"), 0, "%s", out);
    cr_expect(strstr(out, "attn fa3,"), "%.300s", out);
    cr_assert_eq(run("--model gpt2 --gpus 8 --gpu b200 --attn-kernel fa4"), 0, "%s", out);
    cr_expect(strstr(out, "attn fa4,"), "%.300s", out);
}

/* GPT-OSS's attention sinks have no SDPA path in transformers 5.24: the default --attn follows it
   to eager (echoed), an explicit --attn sdpa is refused as transformers refuses it */
Test(cli, a_model_with_attention_sinks_should_plan_eager_attention) {
    cr_assert_eq(run("--model tests/data/hf/variants/gpt-oss.json --gpus 2"), 0, "%s", out);
    cr_expect(strstr(out, "attn eager,"), "%.300s", out);
    expect_usage_error("--model tests/data/hf/variants/gpt-oss.json --gpus 2 --attn sdpa", "attention sinks");
    cr_assert_eq(run("--model tests/data/hf/variants/mixtral.json --gpus 2"), 0, "%s", out);
    cr_expect(strstr(out, "attn sdpa,"), "%.300s", out);
}

/* --moe-imbalance F: shown in --help, F in [1, experts/top-k] on a MoE model (the busiest expert
   gets at most every token), refused on a dense one; above 1 the header calls it an estimate and
   the JSON carries it */
Test(cli, moe_imbalance_should_take_one_to_experts_per_top_k_on_moe_models_only) {
    cr_assert_eq(run("--help"), 0);
    cr_expect(strstr(out, "--moe-imbalance F"), "%.200s", out);
    const char *mix = "--model tests/data/hf/variants/mixtral.json --gpus 2";   /* top-2 of 4 experts */
    char a[256];
    snprintf(a, sizeof a, "%s --moe-imbalance 0.5", mix);
    expect_usage_error(a, "--moe-imbalance '0.5' is not a factor in [1, experts/top-k]");
    snprintf(a, sizeof a, "%s --moe-imbalance 2.5", mix);
    expect_usage_error(a, "valid: 1 to 2");
    expect_usage_error("--model gpt2 --moe-imbalance 1.5", "gpt2 has no experts");
    snprintf(a, sizeof a, "%s --moe-imbalance 2 --strategy ddp", mix);
    cr_assert_eq(run(a), 0, "%s", out);
    cr_expect(strstr(out, "planned 2 times (--moe-imbalance 2, an estimate"), "%.600s", out);
    double peak[2];
    for (int f = 1; f <= 2; f++) {
        snprintf(a, sizeof a, "%s --moe-imbalance %d --strategy ddp --json", mix, f);
        cr_assert_eq(run(a), 0, "%s", out);
        cJSON *j = cJSON_Parse(out);
        cr_assert_not_null(j, "%.200s", out);
        cr_expect_eq(cJSON_GetObjectItem(cJSON_GetObjectItem(j, "train"), "moe_imbalance")->valuedouble, f);
        cJSON *s = cJSON_GetArrayItem(cJSON_GetObjectItem(j, "strategies"), 0);
        peak[f - 1] = cJSON_GetObjectItem(cJSON_GetObjectItem(s, "memory"), "peak")->valuedouble;
        cJSON_Delete(j);
    }
    cr_expect_gt(peak[1], peak[0], "more routed rows, a higher peak");
}

/* --tp / --sp: what tensor parallel does not plan is refused before any work, in one line */
Test(cli, tp_should_refuse_what_it_does_not_plan_in_one_line) {
    expect_usage_error("--model gpt2 --gpus 8 --tp 8", "heads (12)");
    expect_usage_error("--model gpt2 --gpus 8 --tp 2 --strategy zero3", "ddp, zero1, zero2 and fsdp-full");
    expect_usage_error("--model gpt2 --gpus 8 --tp 2 --strategy fsdp-grad-op", "ddp, zero1, zero2 and fsdp-full");
    expect_usage_error("--model gpt2 --gpus 8 --sp on", "--tp 2 or more");
    expect_usage_error("--model gpt2 --gpus 8 --tp 0", "--tp '0'");
    expect_usage_error("--model gpt2 --gpus 16 --gpus-per-node 8 --tp 16", "GPUs per node");
    expect_usage_error("--model gpt2 --gpus 8 --tp 2 --sp maybe", "unknown --sp 'maybe'");
    expect_usage_error("auto --model gpt2 --gpus 8 --tp 2 --emit deepspeed", "--emit deepspeed with --tp");
    expect_usage_error("--model llama2-7b --gpus 8 --tp 2 --lora 8", "--tp 2 with --lora/--freeze");
    expect_usage_error("--model llama2-7b --gpus 8 --tp 2 --fsdp 1", "--tp 2 with --fsdp 1");
    /* op-level and selective checkpointing: measured on GPT-2/LLaMA blocks, full fine-tuning (with
       TP too: llama-mini tp 2 rows) */
    cr_expect_eq(run("--model llama2-7b --gpus 8 --tp 2 --act-ckpt op --strategy fsdp-full"), 0, "%s", out);
    expect_usage_error("--model llama2-7b --gpus 8 --lora 8 --act-ckpt selective", "not modelled with --lora");
    expect_usage_error("--model tests/data/hf/variants/qwen3.json --gpus 2 --act-ckpt op", "GPT-2, LLaMA, Mistral and Qwen2");
    expect_usage_error("--model tests/data/hf/variants/qwen3.json --gpus 2 --tp 2", "model_type qwen3");
    cr_assert_eq(run("--model llama2-7b --gpus 8 --tp 2 --sp on --json"), 0, "%s", out);
    cJSON *j = cJSON_Parse(out);
    cr_assert_not_null(j, "%.200s", out);
    cJSON *tr = cJSON_GetObjectItem(j, "train");
    cr_expect_eq(cJSON_GetObjectItem(tr, "tp")->valuedouble, 2);
    cr_expect_eq(cJSON_GetObjectItem(tr, "data_parallel")->valuedouble, 4);
    cr_expect_eq(cJSON_GetArraySize(cJSON_GetObjectItem(j, "strategies")), 4, "ddp, zero1, zero2 and fsdp-full only");
    cJSON_Delete(j);
}

/* --pp / --pp-schedule / --microbatches: what pipeline parallel does not plan is refused before
   any work, in one line; a plan names its stage and says what is closed form */
Test(cli, pp_should_refuse_what_it_does_not_plan_in_one_line) {
    expect_usage_error("--model llama2-7b --gpus 8 --pp 3", "--pp 3 x --tp 1 must divide the GPUs");
    expect_usage_error("--model llama2-7b --gpus 6 --pp 3", "32 blocks");
    expect_usage_error("--model llama2-7b --gpus 8 --pp 2 --strategy zero2", "ZeRO-2 and ZeRO-3 are incompatible with pipeline");
    expect_usage_error("--model llama2-7b --gpus 8 --pp 2 --strategy zero3", "ddp, zero1 and fsdp-full");
    expect_usage_error("--model llama2-7b --gpus 8 --pp 4 --microbatches 2", "--microbatches >= 4");
    expect_usage_error("--model llama2-7b --gpus 8 --microbatches 4", "--microbatches needs --pp 2");
    expect_usage_error("--model llama2-7b --gpus 8 --pp 2 --grad-accum 4", "--microbatches M");
    expect_usage_error("--model llama2-7b --gpus 8 --pp 2 --pp-schedule zb", "unknown --pp-schedule 'zb'");
    expect_usage_error("--model llama2-7b --gpus 8 --pp 2 --pp-return-outputs maybe", "unknown --pp-return-outputs 'maybe' (valid: on, off)");
    expect_usage_error("--model llama2-7b --gpus 8 --pp 2 --lora 8", "--pp 2 with --lora/--freeze");
    expect_usage_error("--model llama2-7b --gpus 8 --pp 2 --offload params", "CPU offload");
    expect_usage_error("auto --model llama2-7b --gpus 8 --pp 2", "does not search pipeline stages");
    cr_assert_eq(run("--model llama2-7b --gpus 8 --pp 4 --microbatches 8 --json"), 0, "%s", out);
    cJSON *j = cJSON_Parse(out);
    cr_assert_not_null(j, "%.200s", out);
    cJSON *tr = cJSON_GetObjectItem(j, "train");
    cr_expect_eq(cJSON_GetObjectItem(tr, "pp")->valuedouble, 4);
    cr_expect_eq(cJSON_GetObjectItem(tr, "microbatches")->valuedouble, 8);
    cr_expect_eq(cJSON_GetObjectItem(tr, "pp_data_parallel")->valuedouble, 2);
    cJSON *st = cJSON_GetArrayItem(cJSON_GetObjectItem(j, "strategies"), 0);
    cr_expect_eq(cJSON_GetObjectItem(st, "pp_stage")->valuedouble, 0, "1F1B: stage 0 holds 4 micro-batches");
    cr_expect_eq(cJSON_GetObjectItem(st, "pp_in_flight")->valuedouble, 4);
    cr_expect_eq(cJSON_GetArraySize(cJSON_GetObjectItem(j, "strategies")), 3, "ddp, zero1 and fsdp-full only");
    cJSON_Delete(j);
}

/* ZeRO beside tensor or pipeline parallel is an estimate no CPU-rank run checks: the header says so
   once, under --tp and under --pp alone, and not for the torch strategies */
Test(cli, zero_beside_tp_or_pp_should_say_it_is_an_estimate_once) {
    static const struct { const char *args, *has, *lacks; } CASES[] = {
        {"--tp 2 --strategy zero1", "# zero1/zero2 under tp:", "# zero1 beside the pipeline:"},
        {"--pp 2 --strategy zero1", "# zero1 beside the pipeline:", "# zero1/zero2 under tp:"},
        {"--tp 2 --pp 2 --strategy zero1", "# zero1/zero2 under tp:", "# zero1 beside the pipeline:"},
        {"--pp 2 --strategy ddp,fsdp-full", "# pipeline parallel:", "# zero1 beside the pipeline:"},
    };
    for (size_t i = 0; i < sizeof CASES / sizeof CASES[0]; i++) {
        char a[256];
        snprintf(a, sizeof a, "--model llama2-7b --gpus 16 %s", CASES[i].args);
        cr_assert_eq(run(a), 0, "%s: %s", a, out);
        cr_expect(strstr(out, CASES[i].has) && !strstr(out, CASES[i].lacks), "%s: %s", a, out);
        /* the JSON's zero rows carry it once, the torch strategies' rows not */
        snprintf(a, sizeof a, "--model llama2-7b --gpus 16 %s --json", CASES[i].args);
        cr_assert_eq(run(a), 0, "%s: %s", a, out);
        cJSON *j = cJSON_Parse(out);
        cr_assert_not_null(j, "%s: %.200s", a, out);
        cJSON *s;
        int marked = 0, rows = 0;
        cJSON_ArrayForEach(s, cJSON_GetObjectItem(j, "strategies")) {
            const char *name = cJSON_GetStringValue(cJSON_GetObjectItem(s, "name"));
            int zero = name && strncmp(name, "zero", 4) == 0, n = 0;
            cJSON *f;
            cJSON_ArrayForEach(f, s) n += f->string && strcmp(f->string, "estimate") == 0;
            cr_expect_eq(n, zero ? 1 : 0, "%s: %s has %d estimate fields", a, name, n);
            marked += n;
            rows++;
        }
        cr_expect_gt(rows, 0, "%s", a);
        cr_expect_eq(marked > 0, strstr(CASES[i].args, "zero1") != NULL, "%s", a);
        cJSON_Delete(j);
    }
}

/* --units splits a generic --params model into layers; a named model has its own, so the flag
   would be ignored: refused instead, also without any model */
Test(cli, units_without_params_should_be_refused_in_one_line) {
    expect_usage_error("--model gpt2 --units 5", "--units applies to --params only");
    expect_usage_error("--model gpt2 --units 5 --json", "--units applies to --params only");
    expect_usage_error("auto --model gpt2-xl --gpus 8 --units 12", "--units applies to --params only");
    expect_usage_error("--units 5 --gpus 8", "--units applies to --params only");
    cr_assert_eq(run("--params 1.3e9 --units 12 --gpus 8 --json"), 0, "%s", out);
    cJSON *j = cJSON_Parse(out);
    cr_assert_not_null(j, "%.200s", out);
    cr_expect_eq(cJSON_GetObjectItem(cJSON_GetObjectItem(j, "model"), "layers")->valuedouble, 12, "--units 12 with --params");
    cJSON_Delete(j);
}

Test(cli, absurd_but_valid_sizes_should_plan_cleanly) {
    cr_expect_eq(run("--params 1e15 --gpus 8"), 0, "%s", out);
    cr_expect(strstr(out, "nothing fits") || strstr(out, "recommendation"));
    cr_expect_eq(run("--model gpt2 --gpus 1000000"), 0, "%s", out);
    cr_expect(strstr(out, "recommendation"));
    cr_expect_eq(run("--params 7.5e9 --gpus 64 --precision mixed-fp16 --optimizer adam --json"), 0);
}

Test(cli, new_flags_should_refuse_bad_values_in_one_line) {
    expect_usage_error("--model gpt2 --plot mem.gif", "--plot 'mem.gif'");
    expect_usage_error("--model gpt2 --trace \"a'b.json\"", "--trace");
    expect_usage_error("auto --model gpt2 --emit yaml", "unknown --emit 'yaml'");
    expect_usage_error("--model gpt2 --emit torch", "--emit belongs to 'memplan auto'");
    /* auto-only flags in plan mode would do nothing: refused, not ignored */
    expect_usage_error("--model gpt2 --min-headroom 5", "--min-headroom '5' needs a unit");   /* plan's pick keeps it too */
    expect_usage_error("--model gpt2 --bn-min-batch 8", "--bn-min-batch belongs to 'memplan auto'");
    /* a size without a unit is refused the same way everywhere (5 would be 5 bytes) */
    expect_usage_error("auto --model gpt2 --min-headroom 5", "--min-headroom '5' needs a unit");
    expect_usage_error("--model gpt2 --host-mem 512", "--host-mem '512' needs a unit");
    expect_usage_error("--model gpt2 --alloc-margin 5", "--alloc-margin '5' needs a unit");
    /* a flag that cannot apply to the chosen strategies, and nodes larger than the job */
    expect_usage_error("--model gpt2 --strategy zero3 --grad-as-bucket-view", "add ddp to --strategy");
    expect_usage_error("--model gpt2 --gpus 8 --gpus-per-node 16", "--gpus-per-node 16 is more than the 8 GPUs");
    /* a regime the GPU lacks: the hint lists every regime it has */
    expect_usage_error("--model gpt2 --gpu v100-32gb --precision bf16", "valid there: fp32, amp-fp16, mixed-fp16");
    /* DeepSpeed's sizes: whole element counts, only beside a ZeRO row */
    expect_usage_error("--model gpt2 --strategy zero2 --ds-reduce-bucket -1", "--ds-reduce-bucket '-1' is not a whole number of elements in [1, 1e13]");
    /* DeepSpeed 0.19.8 refuses reduce_bucket_size 0 (zero/config.py: gt=0); it printed 6.7e9
       all-reduces for llama2-7b (one per element) */
    expect_usage_error("--model llama2-7b --gpus 8 --strategy zero2 --ds-reduce-bucket 0",
                       "--ds-reduce-bucket '0' is not a whole number of elements in [1, 1e13]");
    expect_usage_error("--model gpt2 --strategy zero3 --ds3-persist 1.5", "--ds3-persist '1.5'");
    expect_usage_error("--model gpt2 --strategy ddp --ds3-prefetch 1e6", "--ds3-prefetch is a DeepSpeed setting");
    expect_usage_error("auto --model gpt2 --global-batch 0", "--global-batch '0'");
    expect_usage_error("auto --model gpt2 --bn-min-batch -1", "--bn-min-batch '-1'");
    expect_usage_error("--model gpt2 --intra-bw 0", "--intra-bw '0'");
    expect_usage_error("--model gpt2 --inter-bw fast", "--inter-bw 'fast'");
    expect_usage_error("--model gpt2 --nics 2.5", "--nics '2.5' is not a whole number of NICs per node in [1, 64]");
    expect_usage_error("--model gpt2 --latency -2", "--latency '-2'");
    expect_usage_error("--model gpt2 --mfu 2", "--mfu '2'");
    expect_usage_error("--model gpt2 --grad-accum 2 --fsdp-grad-sync often",
                       "unknown --fsdp-grad-sync 'often' (valid: every, last)");
    expect_usage_error("--model gpt2 --fsdp-grad-sync", "--fsdp-grad-sync needs a value");
}

/* DeepSpeed's reduce_bucket_size sizes its bucket: gpt2-mini's ZeRO rows hold 5e8 elements of
   fp32 bucket by default and 1e6 with --ds-reduce-bucket 1e6 (a DeepSpeed config's key). */
Test(cli, ds_reduce_bucket_should_size_the_zero_bucket) {
    double comm[2];
    const char *args[2] = {"--model gpt2-mini --gpus 2 --strategy zero2 --precision fp32 --json",
                           "--model gpt2-mini --gpus 2 --strategy zero2 --precision fp32 --ds-reduce-bucket 1e6 --json"};
    for (int i = 0; i < 2; i++) {
        cr_assert_eq(run(args[i]), 0, "%s", out);
        cJSON *j = cJSON_Parse(out);
        cr_assert_not_null(j);
        cJSON *row = cJSON_GetArrayItem(cJSON_GetObjectItem(j, "strategies"), 0);
        comm[i] = cJSON_GetObjectItem(cJSON_GetObjectItem(row, "memory"), "comm_buffers")->valuedouble;
        cJSON_Delete(j);
    }
    cr_expect_eq(comm[0], 5e8 * 4, "default bucket: %.0f", comm[0]);
    cr_expect_eq(comm[1], 1e6 * 4, "1e6 bucket: %.0f", comm[1]);
}

/* KB, MB, GB, TB are decimal (as the SI prefixes and the GPU vendors' "80GB" say); KiB..TiB
   and the bare K, M, G, T binary. */
Test(cli, decimal_and_binary_size_units_should_mean_what_they_say) {
    static const struct { const char *text; double bytes; } SIZES[] = {
        {"24GB", 24e9}, {"24gb", 24e9}, {"24GiB", 24.0 * (1 << 30)}, {"24G", 24.0 * (1 << 30)},
        {"1TB", 1e12}, {"1TiB", 1024.0 * (1 << 30)}, {"512MB", 512e6}, {"512MiB", 512.0 * (1 << 20)},
        {"3KB", 3e3}, {"3K", 3072}, {"1e9", 1e9}, {"7B", 7},
    };
    for (size_t i = 0; i < sizeof SIZES / sizeof SIZES[0]; i++) {
        double b = -1;
        cr_expect_eq(plan_parse_size(SIZES[i].text, &b), 0, "%s", SIZES[i].text);
        cr_expect_eq(b, SIZES[i].bytes, "%s read as %.0f bytes", SIZES[i].text, b);
    }
    double b;
    cr_expect_neq(plan_parse_size("24XB", &b), 0);
    cr_expect_neq(plan_parse_size("24 GiBs", &b), 0);
    cr_assert_eq(run("--model gpt2 --gpu-mem 24GB --json"), 0, "%s", out);
    cJSON *j = cJSON_Parse(out);
    cr_assert_not_null(j);
    cr_expect_eq(cJSON_GetObjectItem(cJSON_GetObjectItem(j, "cluster"), "gpu_mem_bytes")->valuedouble, 24e9);
    cJSON_Delete(j);
}

/* The fsdp-* rows' style under accumulation: echoed in the header and the JSON, and the
   reduce-scatters of `last` run once per optimizer step, the all-gathers every micro-step */
static double fsdp_full_coll(const char *args, const char *op, const char **sync) {
    cr_assert_eq(run(args), 0, "%s", out);
    cJSON *j = cJSON_Parse(out);
    cr_assert_not_null(j, "%.200s", out);
    static char buf[16];
    snprintf(buf, sizeof buf, "%s", cJSON_GetObjectItem(cJSON_GetObjectItem(j, "train"), "fsdp_grad_sync")->valuestring);
    *sync = buf;
    double count = 0;
    cJSON *e, *c;
    cJSON_ArrayForEach(e, cJSON_GetObjectItem(j, "strategies"))
        cJSON_ArrayForEach(c, cJSON_GetObjectItem(cJSON_GetObjectItem(e, "comm"), "collectives"))
            if (strcmp(cJSON_GetObjectItem(c, "op")->valuestring, op) == 0)
                count += cJSON_GetObjectItem(c, "count")->valuedouble;
    cJSON_Delete(j);
    return count;
}

Test(cli, fsdp_grad_sync_should_be_echoed_and_change_the_reduce_scatters) {
    const char *sync;
    const char *every = "--model gpt2 --gpus 8 --grad-accum 4 --strategy fsdp-full --json";
    const char *last = "--model gpt2 --gpus 8 --grad-accum 4 --strategy fsdp-full --fsdp-grad-sync last --json";
    double rs_every = fsdp_full_coll(every, "reduce_scatter", &sync);
    cr_expect_str_eq(sync, "every", "the default");
    double rs_last = fsdp_full_coll(last, "reduce_scatter", &sync);
    cr_expect_str_eq(sync, "last");
    cr_expect_eq(rs_every, 4 * rs_last);
    cr_expect_eq(fsdp_full_coll(every, "all_gather", &sync), fsdp_full_coll(last, "all_gather", &sync));
    cr_assert_eq(run("--model gpt2 --gpus 8 --grad-accum 4 --fsdp-grad-sync last"), 0);
    cr_expect(strstr(out, "in the last micro-step only (--fsdp-grad-sync last)"), "%s", out);
    cr_assert_eq(run("--help"), 0);
    cr_expect(strstr(out, "--fsdp-grad-sync every|last") && strstr(out, "default every"), "%s", out);
}

Test(cli, auto_should_pick_ddp_for_gpt2_and_shard_gpt2_xl_on_24_gib) {
    cr_assert_eq(run("auto --model gpt2 --gpus 8"), 0, "%s", out);
    cr_expect(strstr(out, "recommendation: memplan --model gpt2 --gpus 8 --strategy ddp "), "%s", out);
    cr_assert_eq(run("auto --model gpt2-xl --gpus 8 --gpu-mem 24GiB"), 0, "%s", out);
    cr_expect(strstr(out, "recommendation: memplan ") && !strstr(out, "--strategy ddp "), "%s", out);
    cr_expect(strstr(out, "ddp does not fit"), "%s", out);
    cr_assert_eq(run("auto --model gpt2-xl --gpus 8 --gpu-mem 24GiB --emit deepspeed"), 0, "%s", out);
    cJSON *j = cJSON_Parse(out);
    cr_assert_not_null(j, "%s", out);
    cr_expect(cJSON_IsNumber(cJSON_GetObjectItem(cJSON_GetObjectItem(j, "zero_optimization"), "stage")));
    cr_expect(cJSON_IsNumber(cJSON_GetObjectItem(j, "train_micro_batch_size_per_gpu")));
    cJSON_Delete(j);
    cr_assert_eq(run("auto --model gpt2 --gpus 8 --emit torch"), 0);
    cr_expect(strstr(out, "torchrun --nnodes 1 --nproc-per-node 8") && strstr(out, "DDP("), "%s", out);
}

Test(cli, plan_json_should_carry_comm_and_time_per_strategy) {
    cr_assert_eq(run("--model gpt2-xl --gpus 16 --gpus-per-node 8 --json"), 0);
    cJSON *j = cJSON_Parse(out);
    cr_assert_not_null(j);
    cJSON *e;
    cJSON_ArrayForEach(e, cJSON_GetObjectItem(j, "strategies")) {
        cJSON *cm = cJSON_GetObjectItem(e, "comm"), *tm = cJSON_GetObjectItem(e, "time");
        cr_expect(cJSON_IsNumber(cJSON_GetObjectItem(cm, "bytes_per_gpu")));
        cr_expect(cJSON_GetArraySize(cJSON_GetObjectItem(cm, "collectives")) > 0);
        const char *k[] = {"compute_s", "comm_s", "exposed_comm_s", "step_s", "tokens_per_s"};
        for (int i = 0; i < 5; i++) cr_expect(cJSON_IsNumber(cJSON_GetObjectItem(tm, k[i])), "time.%s", k[i]);
    }
    cJSON_Delete(j);
}

/* Fine-tuning flags: bad values in one line naming them and the valid ones; the strategies whose
   frozen-parameter rules are not written are refused by name; the header prints PEFT's counts. */
Test(cli, lora_and_freeze_flags_should_refuse_bad_values_and_print_trainable_counts) {
    expect_usage_error("--model gpt2 --lora 0", "--lora '0' is not a rank in [1, 65536]");
    expect_usage_error("--model gpt2 --lora 8 --lora-targets q_proj", "'q_proj' is not a module of gpt2 (valid: all-linear, or a comma list of c_attn, c_proj, c_fc)");
    expect_usage_error("--model gpt2 --lora 8 --lora-targets c_attn,,c_fc", "--lora-targets 'c_attn,,c_fc'");
    expect_usage_error("--model gpt2 --lora-alpha 16", "--lora-alpha sets LoRA: add --lora R");
    expect_usage_error("--model gpt2 --quant-base nf4", "--quant-base nf4 stores a frozen LoRA base: add --lora R");
    expect_usage_error("--model gpt2 --lora 8 --quant-base fp4", "unknown --quant-base 'fp4' (valid: none, bf16, int8, nf4)");
    expect_usage_error("--model gpt2 --freeze head", "unknown --freeze 'head' (valid: none, embeddings, all-but-last:N");
    expect_usage_error("--model gpt2 --freeze all-but-last:13", "all-but-last:13: gpt2 has 12 blocks");
    expect_usage_error("--model gpt2 --lora 8 --freeze embeddings", "give one of them");
    expect_usage_error("--model gpt2 --lora 8 --fsdp 1 --strategy fsdp-full", "--strategy fsdp-full with --lora/--freeze under --fsdp 1");
    expect_usage_error("--params 7e9 --lora 8", "its parameter tensors are not known");
    expect_usage_error("--model resnet50 --freeze embeddings", "resnet50 has no token embeddings (valid there: none)");
    expect_usage_error("--model tests/data/hf/pythia-160m.json --lora 8 --lora-targets all-linear",
                       "does not know the projection names of pythia-160m");
    expect_usage_error("--model gpt2 --lora 8 --lora-targets lm_head", "'lm_head' is not a module of gpt2 (valid: all-linear, or a comma list of c_attn, c_proj, c_fc)");
    cr_expect_eq(run("auto --model gpt2 --gpus 2 --lora 8 --lora-targets c_attn,c_fc --emit torch"), 0, "%s", out);
    cr_expect(strstr(out, "model = get_peft_model(model, LoraConfig(r=8, lora_alpha=8, lora_dropout=0, "
                          "target_modules=[\"c_attn\", \"c_fc\"]))") != NULL, "%s", out);
    cr_expect_eq(run("--model llama2-7b --gpus 1 --gpu-mem 24GiB --lora 16 --quant-base nf4"), 0, "%s", out);
    cr_expect(strstr(out, "# trainable: 8,388,608 of 6,746,804,224 parameters") != NULL, "%s", out);
    cr_expect(strstr(out, "zero3 ") != NULL && strstr(out, "fsdp-full") != NULL, "ZeRO-3 and FSDP2 planned: %s", out);
    /* autocast casts an fp32 frozen base at every call and the matmul saves the bf16 copy; a
       4-bit base saves its packed weight instead (bitsandbytes MatMul4Bit): no copy per element */
    double act[2];
    for (int q = 0; q < 2; q++) {
        cr_assert_eq(run(q ? "--model llama2-7b --gpus 1 --lora 16 --quant-base nf4 --strategy ddp --json"
                           : "--model llama2-7b --gpus 1 --lora 16 --strategy ddp --json"), 0, "%s", out);
        cJSON *j = cJSON_Parse(out);
        cr_assert_not_null(j);
        act[q] = cJSON_GetObjectItem(cJSON_GetObjectItem(cJSON_GetArrayItem(cJSON_GetObjectItem(j, "strategies"), 0),
                                                         "memory"), "activations")->valuedouble;
        cJSON_Delete(j);
    }
    cr_expect_gt(act[0] - act[1], 6e9 * 2 * 0.9, "fp32 base: ~2 B per frozen weight of bf16 copies (%g vs %g)", act[0], act[1]);
    /* auto: a full fine-tune that fits nowhere names QLoRA as a change, with its peak */
    cr_expect_eq(run("auto --model llama2-13b --gpus 1 --gpu-mem 24GiB"), 0, "%s", out);
    cr_expect(strstr(out, "QLoRA instead of a full fine-tune (--lora 16 --quant-base nf4: peak ") != NULL, "%s", out);
    cr_expect_eq(run("--model gpt2-mini --gpus 2 --lora 8 --json"), 0, "%s", out);
    cr_expect(strstr(out, "\"trainable_params\":\t16384") != NULL, "%s", out);
}

/* memplan alloc: a harness trace replayed to a table row (the tensor peak is the harness's own
   figure); bad settings and missing traces are one line and exit 2. */
Test(cli, alloc_should_replay_a_trace_and_refuse_bad_settings) {
    const char *trace = "tests/data/alloc/gpt2-mini_ddp_fp32_none_eager_r2_b1_s128.txt";
    char args[512];
    snprintf(args, sizeof args, "alloc %s", trace);
    cr_assert_eq(run(args), 0, "%s", out);
    cr_expect(strstr(out, "gpt2-mini_ddp_fp32_none_eager_r2_b1_s128") && strstr(out, "23.99"), "%s", out);
    snprintf(args, sizeof args, "alloc --json --alloc-conf expandable_segments:True %s", trace);
    cr_assert_eq(run(args), 0, "%s", out);
    cr_expect(strstr(out, "\"tensors_peak_bytes\":\t25159000"), "%s", out);
    snprintf(args, sizeof args, "alloc --alloc-conf max_split_size_mb:5 %s", trace);
    expect_usage_error(args, "max_split_size_mb:5");
    snprintf(args, sizeof args, "alloc --alloc-conf per_process_memory_fraction:0.5 %s", trace);
    expect_usage_error(args, "--gpu-memory");
    expect_usage_error("alloc", "needs a trace file");
    expect_usage_error("alloc /no/such/trace", "cannot open trace '/no/such/trace'");
}

/* alloc's commentary ('#' lines) wraps at 100 columns as "#   ..." continuations, nothing of it
   lost; its table rows stay whole (cli_wrap_comments, shared with run and validate). */
Test(cli, alloc_should_wrap_its_comment_lines_at_100_columns) {
    const char *conf = "expandable_segments:True,garbage_collection_threshold:0.6,roundup_power2_divisions:4";
    char args[512];
    snprintf(args, sizeof args, "alloc --alloc-conf %s tests/data/alloc/gpt2-mini_ddp_fp32_none_eager_r2_b1_s128.txt", conf);
    cr_assert_eq(run(args), 0, "%s", out);
    int comments = 0, continued = 0;
    for (const char *l = out; *l; l += strcspn(l, "\n") + (l[strcspn(l, "\n")] == '\n')) {
        int n = (int)strcspn(l, "\n");
        if (*l != '#') continue;
        comments++;
        continued += strncmp(l, "#   ", 4) == 0;
        cr_expect_leq(n, 100, "a %d-column comment line: %.*s", n, n, l);
    }
    cr_expect_geq(comments, 3, "%s", out);
    cr_expect_geq(continued, 1, "the settings line is longer than 100 columns and goes on: %s", out);
    cr_expect(strstr(out, conf) != NULL, "the settings survive whole (breaks only at spaces): %s", out);
    cr_expect(strstr(out, "gpt2-mini_ddp_fp32_none_eager_r2_b1_s128") != NULL, "%s", out);
}

static double overhead_of(cJSON *j, int row, const char *key) {
    cJSON *r = cJSON_GetArrayItem(cJSON_GetObjectItem(j, "strategies"), row);
    cr_assert_not_null(r);
    return cJSON_GetObjectItem(cJSON_GetObjectItem(r, "overhead_detail"), key)->valuedouble;
}

/* The plan's allocator share: by default the caching allocator model's replay of the step (what
   the step needs of the allocator - tensor peak, with the figures in JSON); --alloc-margin flat
   is the old 5 % of the tensor bytes; the settings come from --alloc-conf or
   PYTORCH_CUDA_ALLOC_CONF, and a bad one is one line naming where it came from; keys torch
   accepts that change no device memory are accepted and named. */
Test(cli, the_overhead_should_show_the_caching_allocators_figure_unless_flat_is_asked) {
    cr_assert_eq(run("--model gpt2 --gpus 8 --strategy ddp --wide"), 0, "%s", out);
    cr_expect(strstr(out, "allocator: the step's allocations replayed through PyTorch's caching allocator (torch's defaults"), "%s", out);
    cr_assert_eq(run("--model gpt2 --gpus 8 --strategy ddp --json"), 0, "%s", out);
    cJSON *j = cJSON_Parse(out);
    cr_assert_not_null(j);
    cJSON *al = cJSON_GetObjectItem(cJSON_GetObjectItem(cJSON_GetArrayItem(cJSON_GetObjectItem(j, "strategies"), 0),
                                                        "overhead_detail"), "allocator");
    cr_assert_not_null(al, "%s", out);
    double need = cJSON_GetObjectItem(al, "need")->valuedouble;
    double tensors = cJSON_GetObjectItem(al, "tensor_peak")->valuedouble;
    double model = overhead_of(j, 0, "allocator_margin");
    cr_expect(need > tensors);
    cr_expect_leq(cJSON_GetObjectItem(al, "max_reserved")->valuedouble, need);
    cr_expect_geq(cJSON_GetObjectItem(al, "reserved_at_limit")->valuedouble, need - 1);
    cr_expect_float_eq(model, need - tensors, 1);
    cJSON_Delete(j);

    cr_assert_eq(run("--model gpt2 --gpus 8 --strategy ddp --alloc-margin flat"), 0, "%s", out);
    cr_expect(strstr(out, "allocator margin (5% of allocated)"), "%s", out);
    cr_assert_eq(run("--model gpt2 --gpus 8 --strategy ddp --alloc-margin flat --json"), 0, "%s", out);
    j = cJSON_Parse(out);
    cr_expect_float_eq(overhead_of(j, 0, "allocator_margin"), 0.05 * tensors, 1);
    cr_expect_null(cJSON_GetObjectItem(cJSON_GetObjectItem(cJSON_GetArrayItem(cJSON_GetObjectItem(j, "strategies"), 0),
                                                           "overhead_detail"), "allocator"));
    cJSON_Delete(j);

    cr_assert_eq(run("--model gpt2 --gpus 8 --strategy ddp --alloc-conf expandable_segments:True"), 0, "%s", out);
    cr_expect(strstr(out, "(expandable_segments:True;"), "%s", out);
    cr_assert_eq(run("--model gpt2 --gpus 8 --strategy ddp --alloc-conf garbage_collection_threshold:0.8,per_process_memory_fraction:0.9"), 0, "%s", out);
    cr_expect(strstr(out, "(garbage_collection_threshold:0.8,per_process_memory_fraction:0.9;"), "%s", out);
    cr_assert_eq(run("--model gpt2 --gpus 8 --strategy ddp --alloc-conf expandable_segments:True --json"), 0, "%s", out);
    j = cJSON_Parse(out);
    cr_expect_neq(overhead_of(j, 0, "allocator_margin"), model, "the settings changed nothing");
    cJSON_Delete(j);
    cr_assert_eq(run("--model gpt2 --gpus 8 --strategy ddp --alloc-margin allocator"), 0, "%s", out);
    cr_assert_eq(run("--model gpt2 --gpus 8 --strategy ddp --alloc-conf pinned_max_cached_size_mb:512,"
                     "pinned_use_hip_host_register:True,per_process_memory_fraction:0"), 0, "%s", out);
    cr_expect(strstr(out, "note: --alloc-conf: pinned_max_cached_size_mb, pinned_use_hip_host_register accepted"), "%s", out);
    cr_expect(strstr(out, " OOM "), "a fraction of 0 allows nothing: %s", out);
    expect_usage_error("--model gpt2 --alloc-conf max_split_size_mb:5", "--alloc-conf 'max_split_size_mb:5'");
    expect_usage_error("--model gpt2 --alloc-margin 5% --alloc-conf expandable_segments:True",
                       "--alloc-conf sets the caching allocator model");
    expect_usage_error("--model gpt2 --alloc-margin fla", "--alloc-margin 'fla'");
    cr_assert_eq(run("--model gpt2 --gpus 8 --strategy ddp --alloc-margin flat --alloc-margin 5%"), 2, "%s", out);
    setenv("PYTORCH_CUDA_ALLOC_CONF", "expandable_segments:True", 1);
    cr_assert_eq(run("--model gpt2 --gpus 8 --strategy ddp"), 0, "%s", out);
    cr_expect(strstr(out, "(expandable_segments:True;"), "%s", out);
    setenv("PYTORCH_CUDA_ALLOC_CONF", "max_split_size_mb:5", 1);
    expect_usage_error("--model gpt2", "PYTORCH_CUDA_ALLOC_CONF 'max_split_size_mb:5'");
    cr_assert_eq(run("--model gpt2 --gpus 8 --strategy ddp --alloc-margin flat"), 0, "flat ignores the variable: %s", out);
    unsetenv("PYTORCH_CUDA_ALLOC_CONF");
}

/* Answer first: the verdict is the first line (fits, the pick, its peak and headroom; or does not
   fit), --quiet prints it alone, the text fits 100 columns unless --wide (a command to paste stays
   whole), and --explain holds the legends. */
static int widest(const char *s) {
    int w = 0, n = 0;
    for (; *s; s++) {
        if (*s == '\n') { if (n > w) w = n; n = 0; }
        else n++;
    }
    return n > w ? n : w;
}

static int starts(const char *s, const char *prefix) { return strncmp(s, prefix, strlen(prefix)) == 0; }

Test(cli, the_verdict_should_be_the_first_line_and_quiet_should_print_it_alone) {
    cr_assert_eq(run("--model gpt2-xl --gpus 8 --gpu-mem 24GiB"), 0, "%s", out);
    cr_expect(starts(out, "fits: fsdp-grad-op, peak 19.76 GiB of 24.00 GiB per GPU, headroom 4.24 GiB, "), "%.300s", out);
    char first[512];
    snprintf(first, sizeof first, "%.*s\n", (int)strcspn(out, "\n"), out);
    cr_assert_eq(run("--model gpt2-xl --gpus 8 --gpu-mem 24GiB --quiet"), 0);
    cr_expect_str_eq(out, first);
    cr_assert_eq(run("--model gpt2-xl --gpus 8 --gpu-mem 20GiB --strategy ddp,zero1 --quiet"), 0);
    cr_expect(starts(out, "does not fit") && lines(out) == 1, "%s", out);
    cr_assert_eq(run("auto --model gpt2-xl --gpus 8 --quiet"), 0);
    cr_expect(starts(out, "fits: fsdp-grad-op, mixed-bf16, micro-batch ") && lines(out) == 1, "%s", out);
    cr_assert_eq(run("--model llama2-70b --gpus 8 --quiet"), 0);
    cr_expect(starts(out, "does not fit: the smallest peak is "), "%s", out);
    expect_usage_error("--model gpt2 --quiet --json", "--quiet prints the verdict line");
}

Test(cli, text_should_fit_100_columns_unless_wide) {
    const char *cmds[] = {"--model gpt2-xl --gpus 8", "--model llama2-70b --gpus 64 --gpu h100-80gb --seq 8192 --tp 8",
                          "auto --model gpt2-xl --gpus 8", "--model llama2-7b --gpus 8 --strategy zero3 --offload optimizer"};
    for (size_t i = 0; i < sizeof cmds / sizeof *cmds; i++) {
        cr_assert_eq(run(cmds[i]), 0, "%s", out);
        char *rec = strstr(out, "recommendation: memplan ");   /* the command to paste is never cut, */
        if (rec) *rec = 0;
        const char *body = strchr(out, '\n');                   /* nor the verdict */
        cr_assert_not_null(body);
        cr_expect_leq(widest(body), 100, "%s: %s", cmds[i], out);
    }
    cr_assert_eq(run("--model gpt2-xl --gpus 8 --wide"), 0);
    cr_expect_gt(widest(out), 100);
    cr_expect(strstr(out, "max_batch") && strstr(out, "peak_at"), "%s", out);
    cr_assert_eq(run("--model gpt2-xl --gpus 8"), 0);
    cr_expect(!strstr(out, "# host = host memory per node") && !strstr(out, "nccl-tests factors"), "%s", out);
    cr_assert_eq(run("--model gpt2-xl --gpus 8 --explain"), 0);
    cr_expect(strstr(out, "# host = host memory per node") && strstr(out, "nccl-tests"), "%s", out);
}

/* InternLM's hybrid ZeRO knobs: bad values and strategies they do not touch are refused in one
   line; the broadcast plan lists one broadcast per rank of the group after the step */
Test(cli, zero_param_sync_and_zero_group_should_refuse_what_they_do_not_plan) {
    expect_usage_error("--model gpt2 --gpus 8 --zero-param-sync bcast", "unknown --zero-param-sync 'bcast' (valid: allgather, broadcast)");
    expect_usage_error("--model gpt2 --gpus 8 --strategy ddp --zero-param-sync broadcast", "add zero1 or zero2 to --strategy");
    expect_usage_error("--model gpt2 --gpus 8 --strategy fsdp-full --zero-group 4", "add zero1 or zero2 to --strategy");
    expect_usage_error("--model gpt2 --gpus 8 --zero-group 3", "--zero-group 3 does not divide the 8 data-parallel ranks");
    expect_usage_error("--model gpt2 --gpus 8 --zero-group 2.5", "not a whole number of ranks");
    expect_usage_error("auto --model gpt2 --gpus 8 --zero-param-sync broadcast --emit deepspeed", "not a DeepSpeed or torch setting");
    cr_assert_eq(run("--model gpt2 --gpus 16 --strategy zero1 --zero-param-sync broadcast --zero-group 8"), 0, "%s", out);
    cr_expect(strstr(out, "broadcast"), "%.1500s", out);
    cr_expect(strstr(out, "updated parameters"), "%.1500s", out);
}
