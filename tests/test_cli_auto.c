/* test_cli_auto.c — auto's output, --emit and the offload / host-memory flags as a user meets
 * them: DeepSpeed configs loaded by DeepSpeed's own parser (tests/ds_config_check.py, skipped
 * visibly when DeepSpeed is not installed), the torch snippet, the host column and verdict,
 * the JSON fields, and one-line errors. Runs build/memplan (or $BUILD/memplan). */
#include <cjson/cJSON.h>
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "plan_deepspeed.h"
#include "plan_memory.h"
#include "plan_zoo.h"

static char out[1 << 20];
static void expect_usage_error(const char *args, const char *needle);

/* Runs memplan with args (stdout only unless the args redirect); returns the exit status. */
static int run(const char *args) {
    const char *b = getenv("BUILD");
    char cmd[2048];
    snprintf(cmd, sizeof(cmd), "%s/memplan %s", b && *b ? b : "build", args);
    FILE *p = popen(cmd, "r");
    cr_assert_not_null(p);
    size_t n = fread(out, 1, sizeof(out) - 1, p);
    out[n] = 0;
    int st = pclose(p);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

/* The top-level keys DeepSpeed documents that memplan may write (docs/json.md). */
static const char *const DS_KEYS[] = {"train_batch_size", "train_micro_batch_size_per_gpu",
    "gradient_accumulation_steps", "zero_optimization", "bf16", "fp16", "torch_autocast", "optimizer",
    "activation_checkpointing"};

typedef struct {
    const char *args;
    int world, stage;
    const char *offload_optimizer, *offload_param, *dtype;   /* NULL: not checked */
} DsCase;

static const DsCase CASES[] = {
    {"auto --model gpt2 --gpus 8 --strategy ddp", 8, 0, "none", "none", "autocast-bfloat16"},
    {"auto --model gpt2-xl --gpus 8 --gpu-mem 24GiB --strategy zero2 --offload optimizer --precision mixed-bf16",
     8, 2, "cpu", "none", "bf16"},
    {"auto --model gpt2-xl --gpus 8 --gpu-mem 24GiB --strategy zero1 --precision mixed-fp16", 8, 1, "none", "none", "fp16"},
    /* pure bf16 is not mixed-bf16: no fp32 master and bf16 moments, as the planner predicts */
    {"auto --model gpt2-xl --gpus 8 --strategy zero1 --precision bf16", 8, 1, "none", "none", "bf16-pure"},
    {"auto --model llama2-70b --gpus 64 --gpus-per-node 8 --gpu h100-80gb --seq 4096 --strategy zero3 --offload params",
     64, 3, "cpu", "cpu", NULL},
};
#define N_CASES (sizeof(CASES) / sizeof(CASES[0]))

/* memplan's host memory per node and GPU model states for the setups DeepSpeed's estimators
   describe (bf16 with fp32 master = DeepSpeed's bf16; zero.Init for stage 3), for
   ds_config_check.py to compare with estimate_zero2/3_model_states_mem_needs. */
static cJSON *estimates(void) {
    static const struct { StrategyKind k; OffloadKind off; int64_t gpn, nodes; } E[] = {
        {STRAT_ZERO2, OFFLOAD_OPT, 4, 1}, {STRAT_ZERO2, OFFLOAD_OPT, 8, 1}, {STRAT_ZERO2, OFFLOAD_NONE, 8, 2},
        {STRAT_ZERO3, OFFLOAD_PARAM, 8, 1}, {STRAT_ZERO3, OFFLOAD_PARAM, 8, 4}, {STRAT_ZERO3, OFFLOAD_OPT, 8, 2},
        {STRAT_ZERO3, OFFLOAD_NONE, 8, 2},
    };
    ModelSpec m;
    char msg[256];
    cr_assert_eq(plan_zoo_build(&m, "llama2-13b", msg, sizeof(msg)), 0, "%s", msg);
    double psi = (double)plan_model_params(&m), ll = 0;
    for (int i = 0; i < m.n_layers; i++) if ((double)m.layers[i].params > ll) ll = (double)m.layers[i].params;
    cJSON *arr = cJSON_CreateArray();
    for (size_t i = 0; i < sizeof(E) / sizeof(E[0]); i++) {
        TrainSpec t;
        plan_train_defaults(&t);
        t.precision = PREC_MIXED_BF16;
        t.offload = E[i].off;
        ClusterSpec c;
        plan_cluster_defaults(&c);
        c.gpus = E[i].gpn * E[i].nodes;
        c.gpus_per_node = E[i].gpn;
        c.host_mem = 1e15;
        MemResult r;
        plan_memory(&m, &t, &c, E[i].k, &r);
        cJSON *o = cJSON_CreateObject();
        cJSON_AddNumberToObject(o, "stage", E[i].k == STRAT_ZERO2 ? 2 : 3);
        cJSON_AddNumberToObject(o, "total_params", psi);
        cJSON_AddNumberToObject(o, "largest_layer_params", ll);
        cJSON_AddNumberToObject(o, "gpn", (double)E[i].gpn);
        cJSON_AddNumberToObject(o, "nodes", (double)E[i].nodes);
        cJSON_AddBoolToObject(o, "cpu_offload", E[i].off != OFFLOAD_NONE);
        cJSON_AddBoolToObject(o, "offload_params", E[i].off == OFFLOAD_PARAM);
        cJSON_AddNumberToObject(o, "host_per_node", r.host_per_node);
        /* the GPU's model states; without offload DeepSpeed also counts the fp32 gradient
           partition (18 B/param), which memplan's walk does not hold at the peak: compare only
           where the states are offloaded */
        /* DeepSpeed's estimator ignores stage3_param_persistence_threshold: the tensors below it
           stay whole on every rank (docs/formulas.md "DeepSpeed ZeRO-3 persistent tensors"),
           which memplan adds to the parameters where they are on the GPU */
        double persist = 0;
        if (E[i].k == STRAT_ZERO3 && E[i].off != OFFLOAD_PARAM) {
            DsSizes ds;
            plan_ds_sizes(&m, c.gpus, PLAN_DS3_PERSIST, &ds);
            persist = ds.persist_padded * plan_precision(t.precision)->param_bytes;
        }
        if (E[i].off != OFFLOAD_NONE) cJSON_AddNumberToObject(o, "gpu_states", r.model_states - persist);
        cJSON_AddItemToArray(arr, o);
    }
    plan_model_free(&m);
    return arr;
}

/* Writes each case's config to dir; checks what needs no DeepSpeed; fills the cases file for
   ds_config_check.py. */
static void write_configs(const char *dir, char *cases_path, size_t len) {
    cJSON *cases = cJSON_CreateArray();
    for (size_t i = 0; i < N_CASES; i++) {
        char args[1024], path[512];
        snprintf(path, sizeof(path), "%s/ds%zu.json", dir, i);
        snprintf(args, sizeof(args), "%s --emit deepspeed 2>/dev/null", CASES[i].args);
        cr_assert_eq(run(args), 0, "%s", CASES[i].args);
        cJSON *j = cJSON_Parse(out);
        cr_assert_not_null(j, "stdout is the config alone: %s", out);
        for (cJSON *k = j->child; k; k = k->next) {
            int known = 0;
            for (size_t d = 0; d < sizeof(DS_KEYS) / sizeof(DS_KEYS[0]); d++) known |= strcmp(k->string, DS_KEYS[d]) == 0;
            cr_expect(known, "unknown top-level key '%s' in %s", k->string, CASES[i].args);
        }
        cJSON *z = cJSON_GetObjectItem(j, "zero_optimization");
        cr_expect_eq(cJSON_GetObjectItem(z, "stage")->valueint, CASES[i].stage, "%s", CASES[i].args);
        cJSON *rb = cJSON_GetObjectItem(z, "reduce_bucket_size");
        if (rb) cr_expect(strstr(out, "\"reduce_bucket_size\":\t500000000,"), "an integer byte count: %s", out);
        cr_expect_eq(!!cJSON_GetObjectItem(z, "offload_optimizer"), strcmp(CASES[i].offload_optimizer, "cpu") == 0);
        cr_expect_eq(!!cJSON_GetObjectItem(z, "offload_param"), strcmp(CASES[i].offload_param, "cpu") == 0);
        FILE *f = fopen(path, "w");
        cr_assert_not_null(f);
        fputs(out, f);
        fclose(f);
        cJSON *c = cJSON_CreateObject(), *e = cJSON_CreateObject();
        cJSON_AddStringToObject(c, "path", path);
        cJSON_AddNumberToObject(c, "world_size", CASES[i].world);
        cJSON_AddNumberToObject(e, "stage", CASES[i].stage);
        cJSON_AddStringToObject(e, "offload_optimizer", CASES[i].offload_optimizer);
        cJSON_AddStringToObject(e, "offload_param", CASES[i].offload_param);
        if (CASES[i].dtype) cJSON_AddStringToObject(e, "dtype", CASES[i].dtype);
        cJSON_AddNumberToObject(e, "micro_batch", cJSON_GetObjectItem(j, "train_micro_batch_size_per_gpu")->valuedouble);
        cJSON_AddNumberToObject(e, "grad_accum", cJSON_GetObjectItem(j, "gradient_accumulation_steps")->valuedouble);
        cJSON_AddItemToObject(c, "expect", e);
        cJSON_AddItemToArray(cases, c);
        cJSON_Delete(j);
    }
    snprintf(cases_path, len, "%s/cases.json", dir);
    cJSON *all = cJSON_CreateObject();
    cJSON_AddItemToObject(all, "configs", cases);
    cJSON_AddItemToObject(all, "estimates", estimates());
    char *txt = cJSON_Print(all);
    FILE *f = fopen(cases_path, "w");
    cr_assert_not_null(f);
    fputs(txt, f);
    fclose(f);
    free(txt);
    cJSON_Delete(all);
}

Test(cli_auto, deepspeed_should_load_the_emitted_configs_and_its_estimators_should_agree, .timeout = 120) {
    char dir[] = "/tmp/memplan_ds_XXXXXX", cases[600], cmd[1200];
    cr_assert_not_null(mkdtemp(dir));
    write_configs(dir, cases, sizeof(cases));
    const char *py = getenv("MEMPLAN_TORCH_PYTHON");
    if (!py || !*py) py = "/root/.cache/memplan/torch-venv/bin/python";
    snprintf(cmd, sizeof(cmd), "%s -c 'import deepspeed' >/dev/null 2>&1", py);
    char rm[700];
    snprintf(rm, sizeof(rm), "rm -rf %s", dir);
    if (access(py, X_OK) != 0 || system(cmd) != 0) {
        if (system(rm)) {}
        cr_skip_test("DeepSpeed not importable with %s (keys and types checked without it); install: "
                     "%s -m pip install deepspeed==0.19.8, or set MEMPLAN_TORCH_PYTHON", py, py);
    }
    snprintf(cmd, sizeof(cmd), "%s tests/ds_config_check.py %s 2>&1 | grep -v WARNING", py, cases);
    FILE *p = popen(cmd, "r");
    cr_assert_not_null(p);
    size_t n = fread(out, 1, sizeof(out) - 1, p);
    out[n] = 0;
    pclose(p);   /* the pipe's status is grep's: count the checker's own "ok" lines instead */
    int oks = strncmp(out, "ok ", 3) == 0;
    for (const char *s = out; (s = strstr(s, "\nok ")) != NULL; s++) oks++;
    if (system(rm)) {}
    cr_expect_eq(oks, (int)N_CASES + 7, "DeepSpeed's estimators and DeepSpeedConfig on every emitted config:\n%s", out);
}

Test(cli_auto, emit_torch_should_write_fsdp2_as_planned_by_default) {
    /* FSDP2 is what the fsdp rows mean by default (--fsdp 2): fully_shard per block and the root,
       MixedPrecisionPolicy with fp32 reductions over fp32 shards, CPUOffloadPolicy, checkpointing
       before sharding */
    cr_assert_eq(run("auto --model llama2-7b --gpus 8 --gpu-mem 24GiB --strategy fsdp-full --offload params "
                     "--precision mixed-bf16 --emit torch"), 0, "%s", out);
    cr_expect(strstr(out, "torchrun --nnodes 1 --nproc-per-node 8"), "%s", out);
    cr_expect(strstr(out, "from transformers.models.llama.modeling_llama import LlamaDecoderLayer"), "%s", out);
    cr_expect(strstr(out, "mp_policy=MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)"), "%s", out);
    cr_expect(strstr(out, "offload_policy=CPUOffloadPolicy()"), "%s", out);
    cr_expect(strstr(out, "fully_shard(block, reshard_after_forward=True, **kw)") && strstr(out, "fully_shard(model, **kw)"),
              "%s", out);
    cr_expect(!strstr(out, "FullyShardedDataParallel"), "no FSDP1 code for an FSDP2 plan: %s", out);
    /* llama2-7b at seq 4096 on 24 GiB needs checkpointing, applied before sharding */
    const char *ck = strstr(out, "gradient_checkpointing_enable"), *fs = strstr(out, "fully_shard(block");
    cr_expect(ck && fs && ck < fs, "checkpointing before fully_shard: %s", out);
    cr_assert_eq(run("auto --model llama2-7b --gpus 16 --strategy fsdp-grad-op,fsdp-hybrid --precision amp-bf16 "
                     "--act-ckpt every:2 --emit torch"), 0, "%s", out);
    cr_expect(strstr(out, "(i + 1) % 2 == 0") && strstr(out, "check_fn=lambda m: id(m) in ckpt"), "every:2 kept: %s", out);
    cr_expect(strstr(out, "init_device_mesh(\"cuda\", (2, 8), mesh_dim_names=(\"replicate\", \"shard\"))") ||
              strstr(out, "reshard_after_forward=False, **kw)  # SHARD_GRAD_OP"), "%s", out);
    cr_expect(!strstr(out, "mp_policy") && strstr(out, "torch.autocast(\"cuda\", dtype=torch.bfloat16)"), "%s", out);
}

Test(cli_auto, emit_torch_should_write_fsdp1_and_ddp_when_planned) {
    /* --fsdp 1: the flat-parameter wrapper, its micro-batch planned by the FSDP1 model */
    cr_assert_eq(run("auto --model llama2-7b --gpus 8 --gpu-mem 24GiB --strategy fsdp-full --offload params "
                     "--precision mixed-bf16 --fsdp 1 --emit torch"), 0, "%s", out);
    cr_expect(strstr(out, "MixedPrecision(param_dtype=torch.bfloat16, reduce_dtype=torch.bfloat16"), "%s", out);
    cr_expect(strstr(out, "cpu_offload=CPUOffload(offload_params=True)"), "%s", out);
    cr_expect(strstr(out, "transformer_layer_cls={LlamaDecoderLayer}"), "%s", out);
    cr_expect(strstr(out, "apply_activation_checkpointing(") && strstr(out, "isinstance(m, LlamaDecoderLayer)"), "%s", out);
    cr_expect(!strstr(out, "fully_shard"), "%s", out);
    cr_assert_eq(run("auto --model gpt2 --gpus 8 --emit torch"), 0);
    cr_expect(strstr(out, "DDP(model.cuda()") && strstr(out, "torch.autocast(\"cuda\", dtype=torch.bfloat16)"), "%s", out);
}

/* ZeRO beside tensor parallel is planned (Megatron-DeepSpeed, InternLM) but no torch script expresses
   it: --emit torch under --tp picks among ddp and fsdp-full, and refuses a --strategy of ZeRO alone. */
Test(cli_auto, emit_torch_under_tp_should_pick_a_torch_strategy_and_refuse_zero_alone) {
    cr_assert_eq(run("auto --model llama2-7b --gpus 16 --tp 2 --emit torch"), 0, "%s", out);
    cr_expect(strstr(out, "torchrun --nnodes 2") && strstr(out, "parallelize_module"), "%s", out);
    cr_expect(!strstr(out, "ZeRO") && !strstr(out, "deepspeed"), "%s", out);
    expect_usage_error("auto --model llama2-7b --gpus 16 --tp 2 --strategy zero1 --emit torch",
                       "--emit torch with --tp 2 and only ZeRO strategies: torch's parallelize_module takes ddp or "
                       "fsdp-full (valid: --strategy ddp,fsdp-full)");
    expect_usage_error("auto --model llama2-7b --gpus 16 --tp 2 --strategy zero1 --emit deepspeed",
                       "--emit torch prints the mesh and the parallelize_module plan of ddp or fsdp-full");
    /* --tp auto's pick of zero2 at tp 2: no script, one line on stderr, exit 1 (as a pipeline pick) */
    cr_assert_eq(run("auto --model llama2-13b --gpus 16 --gpu a100-40gb --strategy zero1,zero2 --tp auto --emit torch "
                     "2>&1"), 1, "%s", out);
    cr_expect(strstr(out, "memplan: --emit torch writes no code for zero2 beside tensor parallel: the pick is tp 2"),
              "%s", out);
    int lines = 0;
    for (const char *s = out; *s; s++) lines += *s == '\n';
    cr_expect_eq(lines, 1, "one line: %s", out);
}

Test(cli_auto, auto_should_explain_the_pick_the_runner_up_and_the_simpler_setups) {
    cr_assert_eq(run("auto --model gpt2-xl --gpus 8 --gpu-mem 24GiB"), 0, "%s", out);
    cr_expect(strstr(out, "picked "), "%s", out);
    cr_expect(strstr(out, "safety margin"), "%s", out);
    cr_expect(strstr(out, "runner-up: "), "%s", out);
    cr_expect(strstr(out, "simpler setups:\n  ddp does not fit"), "%s", out);
    cr_expect(strstr(out, "recommendation: ") && strstr(out, "--offload ") && strstr(out, "--precision "), "%s", out);
    cr_assert_eq(run("auto --model llama2-70b --gpus 2 --gpu rtx4090"), 0, "%s", out);
    cr_expect(strstr(out, "would fit with: ") && strstr(out, "recommendation: change the setup: "), "%s", out);
    cr_expect(!strstr(out, "recommendation: none"), "%s", out);
    cr_assert_eq(run("auto --model gpt2-xl --gpus 8 --gpu-mem 24GiB --json"), 0);
    cJSON *j = cJSON_Parse(out);
    cr_assert_not_null(j);
    cJSON *a = cJSON_GetObjectItem(j, "auto");
    cr_expect(cJSON_IsNumber(cJSON_GetObjectItem(a, "min_headroom_bytes")));
    cr_expect(cJSON_IsObject(cJSON_GetObjectItem(a, "runner_up")));
    cr_expect(cJSON_IsString(cJSON_GetObjectItem(cJSON_GetObjectItem(j, "recommendation"), "offload")));
    cJSON_Delete(j);
}

/* What the user fixes, auto keeps (or refuses when it cannot be kept). */
Test(cli_auto, auto_should_keep_the_given_batch_checkpointing_and_accumulation) {
    cr_assert_eq(run("auto --model gpt2 --batch 4"), 0, "%s", out);
    cr_expect(strstr(out, "kept as given: --batch 4") && strstr(out, "--batch 4 --grad-accum 1"), "%s", out);
    cr_assert_eq(run("auto --model gpt2 --act-ckpt full"), 0, "%s", out);
    cr_expect(strstr(out, "kept as given: --act-ckpt full") && strstr(out, "--act-ckpt full\n"), "%s", out);
    cr_assert_eq(run("auto --model gpt2 --act-ckpt every:2"), 0, "%s", out);
    cr_expect(strstr(out, "--act-ckpt every:2\n"), "%s", out);
    cr_assert_eq(run("auto --model gpt2 --global-batch 24 --grad-accum 3"), 0, "%s", out);
    cr_expect(strstr(out, "--batch 8 --grad-accum 3 "), "the micro-batch follows: 24 / 3: %s", out);
    cr_assert_eq(run("auto --model gpt2 --gpus 8 --global-batch 64 --batch 2"), 0, "%s", out);
    cr_expect(strstr(out, "--batch 2 --grad-accum 4 "), "the accumulation follows: 64 / 8 / 2: %s", out);
    cr_assert_eq(run("auto --model gpt2 --batch 4 --precision amp-bf16 --json"), 0, "%s", out);
    cJSON *j = cJSON_Parse(out);
    cr_assert_not_null(j);
    cJSON *rec = cJSON_GetObjectItem(j, "recommendation");
    cr_expect_eq(cJSON_GetObjectItem(rec, "micro_batch")->valuedouble, 4);
    cr_expect_str_eq(cJSON_GetObjectItem(rec, "precision")->valuestring, "amp-bf16");
    cJSON_Delete(j);
    expect_usage_error("auto --model gpt2 --gpus 8 --global-batch 24 --grad-accum 2",
                       "--global-batch 24 over 8 GPUs is 3 samples per GPU, which --grad-accum 2 does not divide");
    expect_usage_error("auto --model gpt2 --gpus 8 --global-batch 24 --batch 2", "give --batch 1 or 3");
    expect_usage_error("auto --model gpt2 --gpus 8 --global-batch 24 --batch 1 --grad-accum 2", "not --global-batch 24");
}

/* Without an activation model compute is unknown: auto ranks by communication, not tokens/s. */
Test(cli_auto, auto_without_activations_should_rank_by_communication_time) {
    cr_assert_eq(run("auto --params 7.5e9 --gpus 8"), 0, "%s", out);
    cr_expect(strstr(out, "ms of communication per step") || strstr(out, "the least communication per step"), "%s", out);
    cr_expect(!strstr(out, "tokens/s, within") && !strstr(out, "highest simulated throughput"), "%s", out);
    const char *ru = strstr(out, "runner-up: ");
    cr_expect(ru && strstr(ru, "ms of communication per step"), "%s", out);
    cr_assert_eq(run("auto --params 7.5e9 --gpus 8 --json 2>/dev/null"), 0, "%s", out);
    cJSON *j = cJSON_Parse(out);
    cr_assert_not_null(j);
    cJSON *a = cJSON_GetObjectItem(j, "auto");
    cr_expect_str_eq(cJSON_GetObjectItem(a, "ranked_by")->valuestring, "comm_s");
    cr_expect(cJSON_GetObjectItem(a, "comm_s")->valuedouble > 0);
    cr_expect_null(cJSON_GetObjectItem(cJSON_GetObjectItem(a, "runner_up"), "tokens_per_s"));
    cJSON_Delete(j);
}

/* --emit when nothing fits is a failure: exit 1 and nothing on stdout for `> ds.json`. */
Test(cli_auto, emit_should_fail_with_nothing_on_stdout_when_nothing_fits) {
    cr_expect_eq(run("auto --model llama2-70b --gpus 1 --emit deepspeed 2>/dev/null"), 1);
    cr_expect_str_eq(out, "");
    cr_expect_eq(run("auto --model llama2-70b --gpus 1 --emit torch 2>/dev/null"), 1);
    cr_expect_str_eq(out, "");
    cr_expect_eq(run("auto --model llama2-70b --gpus 1 --emit torch 2>&1"), 1);
    cr_expect(strstr(out, "memplan: nothing fits, so no torchrun command") && strstr(out, "would fit with: "), "%s", out);
}

/* No --precision: the default follows the GPU (amp-fp16 where bf16 is missing), never an error. */
Test(cli_auto, the_default_precision_should_be_one_the_gpu_runs) {
    cr_assert_eq(run("auto --model gpt2 --gpu v100-32gb"), 0, "%s", out);
    cr_expect(strstr(out, "--precision amp-fp16") || strstr(out, "--precision mixed-fp16"), "%s", out);
    cr_assert_eq(run("--model gpt2 --gpu v100-32gb"), 0, "%s", out);
    cr_expect(strstr(out, "precision amp-fp16"), "%s", out);
}

Test(cli_auto, plan_should_show_host_memory_and_its_verdict) {
    cr_assert_eq(run("--model llama2-7b --gpus 8 --strategy zero3 --offload optimizer --act-ckpt full --host-mem 64GiB --wide"), 0, "%s", out);
    cr_expect(strstr(out, " host ") && strstr(out, "GiB/node"), "%s", out);
    cr_expect(strstr(out, "# zero3 does not fit in host memory: needs "), "%s", out);
    cr_expect(strstr(out, "copy_d2h") && strstr(out, "copy_h2d"), "host copies in the collective table: %s", out);
    /* the GPUs fit, host memory does not: the advice names host memory, not GPU peaks */
    cr_assert_eq(run("--model gpt2-xl --gpus 8 --offload optimizer --host-mem 1GiB --wide"), 0, "%s", out);
    cr_expect(strstr(out, "recommendation: none\nwhy: nothing fits in host memory: ") && strstr(out, "--host-mem 35GiB"),
              "%s", out);
    cr_assert_eq(run("--model llama2-7b --gpus 8 --strategy zero3 --offload params --json"), 0);
    cJSON *j = cJSON_Parse(out);
    cr_assert_not_null(j);
    cJSON *s = cJSON_GetArrayItem(cJSON_GetObjectItem(j, "strategies"), 0);
    cr_expect(cJSON_IsNumber(cJSON_GetObjectItem(s, "host_bytes_per_node")));
    cr_expect(cJSON_IsBool(cJSON_GetObjectItem(s, "host_fits")));
    cJSON *hc = cJSON_GetObjectItem(cJSON_GetObjectItem(s, "comm"), "host_copies");
    cr_expect_eq(cJSON_GetArraySize(hc), 2);
    cr_expect_str_eq(cJSON_GetObjectItem(cJSON_GetObjectItem(j, "train"), "offload")->valuestring, "params");
    cr_expect(cJSON_GetObjectItem(cJSON_GetObjectItem(j, "cluster"), "host_mem_bytes_per_node")->valuedouble ==
              1024.0 * 1024 * 1024 * 1024);
    cJSON_Delete(j);
}

Test(cli_auto, emit_torch_snippets_should_be_valid_python) {
    if (system("python3 -c 'pass' >/dev/null 2>&1") != 0) cr_skip_test("python3 not found: snippets not compiled");
    const char *cases[] = {
        "--model llama2-7b --gpus 8 --gpu-mem 24GiB --strategy fsdp-full --offload params --precision mixed-bf16",
        "--model gpt2 --gpus 8", "--model gpt2-xl --gpus 8 --gpu-mem 24GiB --strategy zero3",
        "--model resnet50 --gpus 8 --gpu-mem 8GiB", "--model llama2-70b --gpus 64 --gpu h100-80gb --seq 4096",
        "--model llama2-7b --gpus 8 --gpu-mem 24GiB --strategy fsdp-full --offload params --precision mixed-bf16 --fsdp 1",
        "--model llama2-7b --gpus 16 --strategy fsdp-hybrid --act-ckpt every:2",
        "--model gpt2-xl --gpus 8 --strategy fsdp-grad-op --offload params --act-ckpt full",
        "--model gpt2-xl --gpus 8 --strategy ddp --precision bf16",
        "--model llama2-7b --gpus 8 --strategy fsdp-full --act-ckpt op",
        "--model llama2-7b --gpus 8 --strategy fsdp-full --act-ckpt selective --attn eager"};
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        char args[700];
        /* everything after the torchrun line is Python */
        snprintf(args, sizeof(args), "auto %s --emit torch | tail -n +2 | python3 -c \"import sys; "
                 "compile(sys.stdin.read(), 'snippet', 'exec'); print('compiles')\" 2>&1", cases[i]);
        run(args);
        cr_expect(strstr(out, "compiles"), "%s: %s", cases[i], out);
    }
}

static void expect_usage_error(const char *args, const char *needle) {
    char a[512];
    snprintf(a, sizeof(a), "%s 2>&1", args);
    cr_expect_eq(run(a), 2, "%s", args);
    cr_expect(strstr(out, needle), "%s: %s", args, out);
    int lines = 0;
    for (const char *s = out; *s; s++) lines += *s == '\n';
    cr_expect_eq(lines, 1, "one line: %s", out);
}

Test(cli_auto, act_ckpt_should_refuse_bad_values_and_unmodelled_models_in_one_line) {
    expect_usage_error("plan --model gpt2 --act-ckpt sometimes", "valid: none, full, every:N (N in 1..100000), op, selective");
    expect_usage_error("plan --model bert-base --act-ckpt op", "decoder-only");
    expect_usage_error("plan --model gpt2 --impl engine --precision fp32 --act-ckpt selective", "engine");
}

Test(cli_auto, offload_flags_should_refuse_bad_values_in_one_line) {
    expect_usage_error("--model gpt2 --offload disk", "unknown --offload 'disk' (valid: none, optimizer, params)");
    expect_usage_error("--model gpt2 --host-mem 12KiB", "--host-mem '12KiB'");
    expect_usage_error("auto --model gpt2 --min-headroom 90%", "--min-headroom '90%'");
    expect_usage_error("--model gpt2 --host-bw 0", "--host-bw '0'");
    expect_usage_error("--model gpt2 --strategy ddp --offload optimizer", "none of the chosen strategies offers it");
    cr_assert_eq(run("--help"), 0);
    cr_expect(strstr(out, "--min-headroom") && strstr(out, "default: 5% of GPU") && strstr(out, "at least 512 MiB"), "%s", out);
}

/* --pp auto: pp 1 and each pipeline degree (divisors of the blocks, tp x pp dividing the GPUs),
   1F1B with the fewest micro-batches, the simpler kept within 3 %. llama2-13b with ddp alone on
   4 H100s fits only in 4 stages (13B x 16 bytes of model states); gpt2 on 8 GPUs keeps pp 1. */
Test(cli_auto, pp_auto_should_pick_stages_only_where_they_fit_or_win_and_say_why) {
    cr_assert_eq(run("auto --model llama2-13b --gpus 4 --gpu h100-80gb --strategy ddp --pp auto --wide"), 0, "%s", out);
    cr_expect(strstr(out, "pipeline stages searched"), "%s", out);
    cr_expect(strstr(out, "  pp 1 (no pipeline): nothing fits"), "%s", out);
    cr_expect(strstr(out, "  pp 4 (1f1b, 4 micro-batches): ddp tp 1,"), "%s", out);
    cr_expect(strstr(out, "pp 4 picked: without pipeline stages nothing fits"), "%s", out);
    /* the bubble is idle time, not communication: shown apart, and exposed <= communication */
    const char *tl = strstr(out, "communication ");
    double comm = 0, exposed = 0;
    cr_assert(tl && sscanf(tl, "communication %lf ms of which %lf ms exposed", &comm, &exposed) == 2, "%s", out);
    cr_expect_leq(exposed, comm + 1e-9, "%s", out);
    cr_expect(strstr(out, ", pipeline bubble "), "%s", out);
    cr_expect(strstr(out, "# pipeline parallel: pp 4, schedule 1f1b, the blocks split evenly over 4 stages, 4 micro-batches"), "%s", out);
    cr_expect(strstr(out, "--microbatches 4 --act-ckpt") && strstr(out, "--pp 4 --pp-schedule 1f1b\n"), "%s", out);
    cr_assert_eq(run("auto --model gpt2 --gpus 8 --pp auto"), 0, "%s", out);
    cr_expect(strstr(out, "  pp 1 (no pipeline): ddp tp 1,"), "%s", out);
    cr_expect(strstr(out, "  pp 2 (1f1b, 2 micro-batches):") && strstr(out, "  pp 4 (1f1b, 4 micro-batches):"), "%s", out);
    cr_expect(strstr(out, "pp 1 kept: no pipeline degree"), "%s", out);
    cr_expect(!strstr(out, "# pipeline parallel"), "%s", out);
    /* the global batch fixes the micro-batches: the fewest >= pp dividing a replica's share */
    cr_assert_eq(run("auto --model llama2-13b --gpus 4 --gpu h100-80gb --strategy ddp --pp auto --global-batch 24"), 0, "%s", out);
    cr_expect(strstr(out, "  pp 4 (1f1b, 4 micro-batches)") || strstr(out, "  pp 4 (1f1b, 6 micro-batches)"), "%s", out);
    /* --emit torch writes no pipeline code: one line with the split */
    char a[512];
    snprintf(a, sizeof a, "auto --model llama2-13b --gpus 4 --gpu h100-80gb --strategy ddp --pp auto --emit torch 2>&1");
    cr_expect_eq(run(a), 1, "%s", out);
    cr_expect(strstr(out, "--emit torch writes no pipeline code: the pick is pp 4 (1f1b, 4 micro-batches, 10 blocks per stage"), "%s", out);
    int lines = 0;
    for (const char *s = out; *s; s++) lines += *s == '\n';
    cr_expect_eq(lines, 1, "one line: %s", out);
    /* without a pipeline pick, --emit torch is unchanged */
    cr_assert_eq(run("auto --model gpt2 --gpus 8 --pp auto --emit torch"), 0, "%s", out);
    cr_expect(strstr(out, "DistributedDataParallel") || strstr(out, "DDP"), "%s", out);
}

Test(cli_auto, pp_auto_should_refuse_bad_values_in_one_line) {
    expect_usage_error("auto --model gpt2 --pp sometimes", "--pp 'sometimes' is not an integer in [1, 1024] or auto");
    expect_usage_error("plan --model gpt2 --pp auto", "--pp auto belongs to 'memplan auto'");
    expect_usage_error("auto --model gpt2 --pp auto --microbatches 4", "--microbatches with --pp auto");
    expect_usage_error("auto --model gpt2 --pp auto --pp-schedule gpipe", "--pp-schedule with --pp auto");
}

/* One recommendation: plan's pick is auto's rule over the strategies with the rest as plan fixed
   it, so on every setup of the matrix (models x GPU counts x GPU memory) plan and auto kept to
   plan's micro-batch, accumulation, checkpointing, precision and offload name the same strategy
   (or both nothing), and plan's command, pasted, plans that strategy with the margin left. */
static cJSON *run_json(const char *args) {
    cr_assert_eq(run(args), 0, "%s: %s", args, out);
    cJSON *j = cJSON_Parse(out);
    cr_assert_not_null(j, "%s: not JSON: %.300s", args, out);
    return j;
}

Test(cli_auto, plan_and_auto_should_agree_on_every_setup_of_the_matrix, .timeout = 240) {
    const char *models[] = {"gpt2", "gpt2-xl", "llama2-7b", "qwen3-0.6b"};
    const char *gpus[] = {"1", "8", "64"};
    const char *mems[] = {"16GiB", "24GiB", "40GiB", "80GiB"};
    int agreed = 0, picked = 0;
    for (size_t a = 0; a < sizeof models / sizeof *models; a++)
        for (size_t g = 0; g < sizeof gpus / sizeof *gpus; g++)
            for (size_t k = 0; k < sizeof mems / sizeof *mems; k++) {
                char setup[256], args[512];
                snprintf(setup, sizeof setup, "--model %s --gpus %s --gpu-mem %s --seq 1024", models[a], gpus[g], mems[k]);
                snprintf(args, sizeof args, "%s --json", setup);
                cJSON *p = run_json(args);
                const cJSON *rec = cJSON_GetObjectItem(p, "recommendation");
                const cJSON *ps = cJSON_GetObjectItem(rec, "strategy");
                if (cJSON_IsString(ps))
                    cr_expect(strstr(cJSON_GetObjectItem(rec, "reason")->valuestring, "safety margin"), "%s", setup);
                snprintf(args, sizeof args, "auto %s --batch 1 --grad-accum 1 --act-ckpt none --precision amp-bf16 "
                         "--offload none --json", setup);
                cJSON *au = run_json(args);
                const cJSON *found = cJSON_GetObjectItem(cJSON_GetObjectItem(au, "auto"), "found");
                const cJSON *as = cJSON_GetObjectItem(cJSON_GetObjectItem(au, "auto"), "strategy");
                if (cJSON_IsString(ps)) {
                    cr_expect(cJSON_IsTrue(found), "%s: plan picks %s, auto nothing", setup, ps->valuestring);
                    cr_expect(cJSON_IsString(as) && strcmp(as->valuestring, ps->valuestring) == 0, "%s: plan %s, auto %s",
                              setup, ps->valuestring, cJSON_IsString(as) ? as->valuestring : "nothing");
                    picked++;
                } else {
                    cr_expect(cJSON_IsFalse(found), "%s: auto picks %s, plan nothing", setup, as ? as->valuestring : "?");
                }
                agreed++;
                cJSON_Delete(au);
                cJSON_Delete(p);
            }
    cr_expect_eq(agreed, 48);
    cr_expect_gt(picked, 10);
    cr_expect_lt(picked, 48, "the matrix should hold setups where nothing leaves the margin");
}

/* The pasted command plans the pick: one row, fitting with the margin (gpt2-xl on 8 x 40 GiB:
   ddp fits with 102 MiB, under the 2 GiB margin, so plan no longer picks it). */
Test(cli_auto, plans_command_should_paste_and_leave_the_margin) {
    cJSON *p = run_json("--model gpt2-xl --gpus 8 --json");
    const char *pick = cJSON_GetObjectItem(cJSON_GetObjectItem(p, "recommendation"), "strategy")->valuestring;
    cr_expect_str_neq(pick, "ddp");
    cr_assert_eq(run("--model gpt2-xl --gpus 8"), 0, "%s", out);
    char want[128], pasted[1024];
    snprintf(want, sizeof want, "recommendation: memplan --model gpt2-xl --gpus 8 --strategy %s\nwhy: auto's rule", pick);
    cr_assert_not_null(strstr(out, want), "%s", out);
    snprintf(pasted, sizeof pasted, "--model gpt2-xl --gpus 8 --strategy %s --json", pick);
    cJSON *q = run_json(pasted);
    const cJSON *rows = cJSON_GetObjectItem(q, "strategies");
    cr_assert_eq(cJSON_GetArraySize(rows), 1);
    cr_expect_str_eq(cJSON_GetObjectItem(cJSON_GetArrayItem(rows, 0), "name")->valuestring, pick);
    cr_expect_gt(cJSON_GetObjectItem(cJSON_GetArrayItem(rows, 0), "headroom_bytes")->valuedouble, 2.0 * (1 << 30));
    cJSON_Delete(q);
    /* auto's recommendation line pastes too: the pick, planned alone, leaves auto's margin */
    cr_assert_eq(run("auto --model gpt2-xl --gpus 8 --gpu-mem 24GiB"), 0, "%s", out);
    const char *line = strstr(out, "recommendation: memplan --model gpt2-xl --gpus 8 --gpu-mem 24GiB --strategy ");
    cr_assert_not_null(line, "%s", out);
    snprintf(pasted, sizeof pasted, "%.*s --json", (int)strcspn(line + 24, "\n"), line + 24);
    q = run_json(pasted);
    cr_expect_eq(cJSON_GetArraySize(cJSON_GetObjectItem(q, "strategies")), 1);
    cr_expect_gt(cJSON_GetObjectItem(cJSON_GetArrayItem(cJSON_GetObjectItem(q, "strategies"), 0), "headroom_bytes")->valuedouble,
                 1.2 * (1 << 30) - 1);
    cJSON_Delete(q);
    cJSON_Delete(p);
}
