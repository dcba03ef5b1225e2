/* test_cli_config.c — `--config FILE` as a user meets it: each kind recognised from its content
 * and mapped onto memplan's flags (the same plan as those flags given by hand), the command line
 * winning over the file, the one warning line for keys memplan does not model, one-line errors
 * for bad values, and `auto --emit deepspeed` read back to the plan auto picked. Runs build/memplan
 * (or $BUILD/memplan) on the examples in docs/examples/ and on files written here. */
#define TEST_CLI_FILES_DIR "/tmp/memplan-cfg-XXXXXX"
#include "test_cli_files.h"

static int lines(const char *s) {
    int n = 0;
    for (; *s; s++) n += *s == '\n';
    return n;
}

static const char *str(const cJSON *o, const char *a, const char *b) {
    const cJSON *v = cJSON_GetObjectItem(cJSON_GetObjectItem(o, a), b);
    return cJSON_IsString(v) ? v->valuestring : "";
}

static double num(const cJSON *o, const char *a, const char *b) {
    return cJSON_GetObjectItem(cJSON_GetObjectItem(o, a), b)->valuedouble;
}

/* The setting of flag in the JSON's config object, or NULL. */
static const cJSON *setting(const cJSON *j, const char *flag) {
    const cJSON *s;
    cJSON_ArrayForEach(s, cJSON_GetObjectItem(cJSON_GetObjectItem(j, "config"), "settings"))
        if (strcmp(cJSON_GetObjectItem(s, "flag")->valuestring, flag) == 0) return s;
    return NULL;
}

static const char *setting_value(const cJSON *j, const char *flag) {
    const cJSON *s = setting(j, flag);
    return s ? cJSON_GetObjectItem(s, "value")->valuestring : "(none)";
}

typedef struct {
    const char *flag, *value;
} Want;

/* Runs memplan ARGS --json and expects the config to set each flag of want (ended by {0}) to its
 * value; returns the JSON for more checks (the caller deletes it). */
static cJSON *expect_settings(const char *args, const Want *want) {
    cr_assert_eq(runf("%s --json", args), 0, "%s: %s", args, err);
    cJSON *j = json_out();
    for (; want->flag; want++) cr_expect_str_eq(setting_value(j, want->flag), want->value, "%s: --%s", args, want->flag);
    return j;
}

/* The plan's JSON with the config object removed, as text: what the same flags by hand give. */
static char *plan_text(void) {
    cJSON *j = json_out();
    cJSON_DeleteItemFromObject(j, "config");
    char *t = cJSON_PrintUnformatted(j);
    cJSON_Delete(j);
    return t;
}

#define EX "docs/examples/"

TestSuite(cli_config, .init = setup, .fini = teardown);

Test(cli_config, each_example_should_be_recognised_from_its_content_and_plan_without_warnings) {
    static const struct { const char *file, *kind, *args; } E[] = {
        {EX "ds_zero2.json", "deepspeed", "--model gpt2-mini --gpus 2"},
        {EX "accelerate_fsdp2.yaml", "accelerate", "--model llama2-7b"},
        {EX "torchtitan.toml", "torchtitan", "--model llama2-7b"},
        {EX "hf_training_args.json", "hf-trainer", "--model gpt2 --gpus 4"},
    };
    for (size_t i = 0; i < sizeof E / sizeof E[0]; i++) {
        cr_assert_eq(runf("--config %s %s --json", E[i].file, E[i].args), 0, "%s: %s", E[i].file, err);
        cr_expect_str_empty(err, "%s warned: %s", E[i].file, err);
        cJSON *j = json_out();
        cr_expect_str_eq(str(j, "config", "kind"), E[i].kind);
        cr_expect(cJSON_IsTrue(cJSON_GetObjectItem(cJSON_GetObjectItem(j, "config"), "detected")));
        cr_expect_eq(cJSON_GetArraySize(cJSON_GetObjectItem(cJSON_GetObjectItem(j, "config"), "not_modelled")), 0);
        cJSON_Delete(j);
        cr_assert_eq(runf("--config %s %s", E[i].file, E[i].args), 0);
        /* the verdict first, then the header line */
        cr_expect((strncmp(out, "fits: ", 6) == 0 || strncmp(out, "does not fit", 12) == 0) && strstr(out, "\n# config: ") ==
                  strchr(out, '\n'), "no verdict and header line: %.200s", out);
    }
}

Test(cli_config, a_deepspeed_zero2_config_should_plan_as_its_flags_given_by_hand) {
    cr_assert_eq(run("--config " EX "ds_zero2.json --model gpt2-mini --gpus 2 --json"), 0, "%s", err);
    char *a = plan_text();
    cr_assert_eq(run("--model gpt2-mini --gpus 2 --strategy zero2 --batch 4 --grad-accum 2 --ds-reduce-bucket 1000000 "
                     "--precision mixed-bf16 --optimizer adamw --offload none --json"), 0, "%s", err);
    char *b = plan_text();
    cr_expect_str_eq(a, b);
    free(a);
    free(b);
    /* the bucket of 1e6 elements moves the ZeRO-2 comm term below the default 5e8 one */
    cr_assert_eq(run("--config " EX "ds_zero2.json --model gpt2-mini --gpus 2 --json"), 0);
    cJSON *j = json_out();
    double small = num(cJSON_GetArrayItem(cJSON_GetObjectItem(j, "strategies"), 0), "memory", "comm_buffers");
    cJSON_Delete(j);
    cr_assert_eq(run("--model gpt2-mini --gpus 2 --strategy zero2 --batch 4 --grad-accum 2 --precision mixed-bf16 --json"), 0);
    j = json_out();
    cr_expect_lt(small, num(cJSON_GetArrayItem(cJSON_GetObjectItem(j, "strategies"), 0), "memory", "comm_buffers"));
    cJSON_Delete(j);
}

Test(cli_config, deepspeed_keys_should_map_onto_their_flags) {
    const char *f = put("ds3.json",
        "{\"train_batch_size\": 32, \"train_micro_batch_size_per_gpu\": 2,\n"
        " \"zero_optimization\": {\"stage\": 3, \"stage3_prefetch_bucket_size\": 2e6, \"stage3_max_live_parameters\": 3e6,\n"
        "   \"stage3_max_reuse_distance\": 4e6, \"stage3_param_persistence_threshold\": 1e4, \"reduce_bucket_size\": 5e6,\n"
        "   \"offload_optimizer\": {\"device\": \"cpu\", \"pin_memory\": true}, \"offload_param\": {\"device\": \"cpu\"}},\n"
        " \"bf16\": {\"enabled\": true, \"bf16_master_weights_and_grads\": true, \"bf16_optimizer_states\": true},\n"
        " \"optimizer\": {\"type\": \"SGD\", \"params\": {\"lr\": 0.1, \"momentum\": 0.9}},\n"
        " \"activation_checkpointing\": {\"partition_activations\": false}}\n");
    char args[512];
    snprintf(args, sizeof args, "--config %s --model gpt2 --gpus 4", f);
    cJSON *j = expect_settings(args, (const Want[]){
        {"strategy", "zero3"}, {"batch", "2"}, {"grad-accum", "4"}, {"ds3-prefetch", "2000000"},
        {"ds3-max-live", "3000000"}, {"ds3-max-reuse", "4000000"}, {"ds3-persist", "10000"},
        {"ds-reduce-bucket", "5000000"}, {"offload", "params"}, {"precision", "bf16"},
        {"optimizer", "sgd-momentum"}, {"act-ckpt", "full"}, {0, 0}});
    cr_expect_str_eq(str(j, "train", "precision"), "bf16");
    cr_expect_eq(num(j, "train", "grad_accum"), 4);
    cr_expect_str_eq(str(j, "train", "offload"), "params");
    cr_expect_eq(cJSON_GetArraySize(cJSON_GetObjectItem(j, "strategies")), 1);
    cJSON_Delete(j);
}

Test(cli_config, an_accelerate_fsdp2_yaml_should_map_onto_fsdp_flags) {
    cJSON *j = expect_settings("--config " EX "accelerate_fsdp2.yaml --model llama2-7b", (const Want[]){
        {"gpus", "8"}, {"gpus-per-node", "8"}, {"fsdp", "2"}, {"strategy", "fsdp-full"}, {"act-ckpt", "full"},
        {"precision", "mixed-bf16"}, {"offload", "none"}, {"fsdp-grad-sync", "last"}, {0, 0}});
    cr_expect_eq(num(j, "cluster", "gpus"), 8);
    cr_expect_str_eq(cJSON_GetObjectItem(cJSON_GetArrayItem(cJSON_GetObjectItem(j, "strategies"), 0), "name")->valuestring,
                     "fsdp-full");
    cJSON_Delete(j);
    /* FSDP1 through its sharding strategy's number, and MULTI_GPU's autocast */
    const char *f1 = put("f1.yaml", "distributed_type: FSDP\nmixed_precision: fp16\nnum_processes: 16\nnum_machines: 2\n"
                                    "fsdp_config:\n  fsdp_version: 1\n  fsdp_sharding_strategy: 4\n");
    char args[512];
    snprintf(args, sizeof args, "--config %s --model gpt2", f1);
    cJSON_Delete(expect_settings(args, (const Want[]){
        {"strategy", "fsdp-hybrid"}, {"fsdp", "1"}, {"gpus-per-node", "8"}, {"precision", "mixed-fp16"}, {0, 0}}));
    snprintf(args, sizeof args, "--config %s --model gpt2",
             put("ddp.yaml", "distributed_type: MULTI_GPU\nmixed_precision: bf16\nnum_processes: 4\n"));
    cJSON_Delete(expect_settings(args, (const Want[]){{"strategy", "ddp"}, {"precision", "amp-bf16"}, {0, 0}}));
}

Test(cli_config, fsdp1_wrapping_and_prefetch_keys_should_map_onto_the_fsdp1_flags) {
    /* accelerate FSDP1: SIZE_BASED_WRAP with min_num_params, the prefetch knobs, limit_all_gathers */
    const char *y = put("sz.yaml", "distributed_type: FSDP\nnum_processes: 2\nfsdp_config:\n  fsdp_version: 1\n"
                                   "  fsdp_auto_wrap_policy: SIZE_BASED_WRAP\n  fsdp_min_num_params: 200000\n"
                                   "  fsdp_backward_prefetch: BACKWARD_POST\n  fsdp_forward_prefetch: true\n"
                                   "  fsdp_limit_all_gathers: false\n");
    char args[512];
    snprintf(args, sizeof args, "--config %s --model bench/torch/configs/llama-mini.json", y);
    cJSON_Delete(expect_settings(args, (const Want[]){
        {"strategy", "fsdp-full"}, {"fsdp", "1"}, {"fsdp-min-params", "200000"}, {"fsdp-backward-prefetch", "post"},
        {"fsdp-forward-prefetch", "on"}, {"fsdp-limit-all-gathers", "off"}, {0, 0}}));
    /* limit_all_gathers false is honoured as the flag but named: its GPU effect is not modelled */
    cr_expect(strstr(err, "limit_all_gathers=false"), "%s", err);
    /* absent backward_prefetch: accelerate's NO_PREFETCH; NO_WRAP: everything in the root */
    const char *n = put("nw.yaml", "distributed_type: FSDP\nnum_processes: 2\nfsdp_config:\n  fsdp_version: 1\n"
                                   "  fsdp_auto_wrap_policy: NO_WRAP\n");
    snprintf(args, sizeof args, "--config %s --model gpt2-mini", n);
    cJSON_Delete(expect_settings(args, (const Want[]){
        {"fsdp-min-params", "10000000000000000"}, {"fsdp-backward-prefetch", "none"}, {0, 0}}));
    /* the Trainer's fsdp_config (no prefix), FSDP1 */
    const char *h = put("hsz.json", "{\"output_dir\": \"o\", \"fsdp\": \"full_shard\", \"fsdp_config\": {\"version\": 1,"
                                    " \"auto_wrap_policy\": \"SIZE_BASED_WRAP\", \"min_num_params\": 2000000,"
                                    " \"backward_prefetch\": \"BACKWARD_PRE\"}}");
    snprintf(args, sizeof args, "--config %s --model gpt2-mini --gpus 2", h);
    cJSON_Delete(expect_settings(args, (const Want[]){
        {"fsdp", "1"}, {"fsdp-min-params", "2000000"}, {"fsdp-backward-prefetch", "pre"}, {0, 0}}));
    /* FSDP2: none of them apply (no effect), size-based wrapping is not modelled */
    const char *y2 = put("sz2.yaml", "distributed_type: FSDP\nnum_processes: 2\nfsdp_config:\n  fsdp_version: 2\n"
                                     "  fsdp_auto_wrap_policy: SIZE_BASED_WRAP\n  fsdp_min_num_params: 300000\n"
                                     "  fsdp_backward_prefetch: BACKWARD_POST\n");
    snprintf(args, sizeof args, "--config %s --model gpt2-mini", y2);
    cJSON_Delete(expect_settings(args, (const Want[]){{"fsdp", "2"}, {"fsdp-min-params", "(none)"},
                                                      {"fsdp-backward-prefetch", "(none)"}, {0, 0}}));
    cr_expect(strstr(err, "auto_wrap_policy=SIZE_BASED_WRAP"), "%s", err);
}

Test(cli_config, an_accelerate_deepspeed_yaml_should_read_the_json_it_names) {
    put("ds.json", "{\"train_micro_batch_size_per_gpu\": 2, \"zero_optimization\": {\"stage\": 1, \"reduce_bucket_size\": 2e6},"
                   " \"bf16\": {\"enabled\": \"auto\"}}");
    const char *y = put("acc.yaml", "distributed_type: DEEPSPEED\nmixed_precision: bf16\nnum_processes: 2\n"
                                    "deepspeed_config:\n  deepspeed_config_file: ds.json\n  zero3_init_flag: false\n");
    char args[512];
    snprintf(args, sizeof args, "--config %s --model gpt2", y);
    cJSON *j = expect_settings(args, (const Want[]){
        {"strategy", "zero1"}, {"ds-reduce-bucket", "2000000"}, {"precision", "mixed-bf16"}, {0, 0}});
    cr_expect(strstr(cJSON_GetObjectItem(setting(j, "strategy"), "key")->valuestring, "ds.json:zero_optimization.stage"));
    cJSON_Delete(j);
    /* accelerate refuses zero_stage beside the file */
    const char *bad = put("acc2.yaml", "distributed_type: DEEPSPEED\ndeepspeed_config:\n  deepspeed_config_file: ds.json\n  zero_stage: 3\n");
    cr_expect_eq(runf("--config %s --model gpt2", bad), 2);
    cr_expect_eq(lines(err), 1, "%s", err);
    cr_expect(strstr(err, "zero_stage"), "%s", err);
}

Test(cli_config, a_torchtitan_toml_should_map_onto_fsdp2_flags) {
    cJSON_Delete(expect_settings("--config " EX "torchtitan.toml --model llama2-7b", (const Want[]){
        {"batch", "1"}, {"seq", "8192"}, {"gpus", "8"}, {"fsdp", "2"}, {"strategy", "fsdp-full"},
        {"precision", "mixed-bf16"}, {"act-ckpt", "every:2"}, {"grad-accum", "2"}, {"optimizer", "adamw"}, {0, 0}}));
    /* HSDP: replicas across nodes, the shard degree inside one; -1 takes the GPUs given */
    const char *f = put("hsdp.toml", "[training]\nlocal_batch_size = 2\nseq_len = 4096\n[parallelism]\n"
                                     "data_parallel_replicate_degree = 2\n[activation_checkpoint]\nmode = \"full\"\n");
    char args[512];
    snprintf(args, sizeof args, "--config %s --model llama2-7b --gpus 16", f);
    cJSON_Delete(expect_settings(args, (const Want[]){
        {"strategy", "fsdp-hybrid"}, {"gpus-per-node", "8"}, {"act-ckpt", "full"}, {0, 0}}));
    /* tensor parallel: --tp with torchtitan's SequenceParallel norms and its loss parallel
       (disable_loss_parallel absent: false; apply_tp's head Shard(-1), train_context's loss_parallel()) */
    const char *tp = put("tp.toml", "[training]\nlocal_batch_size = 1\nseq_len = 4096\n[parallelism]\n"
                                    "tensor_parallel_degree = 2\n");
    snprintf(args, sizeof args, "--config %s --model llama2-7b --gpus 8", tp);
    cJSON_Delete(expect_settings(args, (const Want[]){{"tp", "2"}, {"sp", "on"}, {"loss-parallel", "on"},
                                                      {"strategy", "fsdp-full"}, {0, 0}}));
    cr_expect_null(strstr(err, "disable_loss_parallel"), "loss parallel is planned, not named: %s", err);
    const char *gathered = put("tpg.toml", "[training]\nlocal_batch_size = 1\nseq_len = 4096\n[parallelism]\n"
                                           "tensor_parallel_degree = 2\ndisable_loss_parallel = true\n");
    snprintf(args, sizeof args, "--config %s --model llama2-7b --gpus 8", gathered);
    cJSON_Delete(expect_settings(args, (const Want[]){{"tp", "2"}, {"loss-parallel", "off"}, {0, 0}}));
    /* a tied head under tp: loss parallel refused in one line naming the way out */
    cr_expect_eq(runf("--config %s --model gpt2 --gpus 8 --seq 1024", tp), 2);
    cr_expect_eq(lines(err), 1, "%s", err);
    cr_expect(strstr(err, "--loss-parallel off"), "%s", err);
    cr_expect_eq(runf("--config %s --model llama2-7b", f), 2, "shard degree -1 without --gpus");
    cr_expect_eq(lines(err), 1, "%s", err);
    cr_expect(strstr(err, "--gpus"), "%s", err);
    /* selective_ac_option "op": torchtitan's op-level SAC */
    const char *op = put("op.toml", "[activation_checkpoint]\nmode = \"selective\"\nselective_ac_option = \"op\"\n");
    snprintf(args, sizeof args, "--config %s --model llama2-7b --gpus 8", op);
    cJSON_Delete(expect_settings(args, (const Want[]){{"act-ckpt", "op"}, {0, 0}}));
}

/* torchtitan's own DeepSeek-V3 16B job (v0.2.2, tests/data/torchtitan) plans as written: expert
   parallel 8 maps to --ep 8, its op-level checkpointing to --act-ckpt op (measured for DeepSeek's
   MoE blocks), and its tensors fit 8 H100s (76.4 GiB against the 78.1 GiB left after the context,
   cuBLAS and NCCL). Whether the step fits is the allocator's need (issue 34), 81.6 GiB at this
   commit: not asserted, as the job runs compiled (compile.enable, not modelled). Context parallel
   maps to --cp; a rotate method other than allgather is named not modelled. */
Test(cli_config, torchtitans_expert_and_context_parallel_degrees_should_map_onto_ep_and_cp) {
    cJSON *j = expect_settings("--config tests/data/torchtitan/deepseek_v3_16b.toml --model "
                               "tests/data/torchtitan/deepseek_v3_16b.json --gpus 8 --gpu h100-80gb",
                               (const Want[]){{"ep", "8"}, {"act-ckpt", "op"}, {"batch", "4"}, {"seq", "4096"},
                                              {"strategy", "fsdp-full"}, {"precision", "mixed-bf16"}, {0, 0}});
    cr_expect_eq(num(j, "train", "ep"), 8);
    cr_expect_eq(num(j, "train", "ep_experts_per_rank"), 8, "64 experts over 8 ranks");
    cJSON *al = cJSON_GetObjectItem(cJSON_GetObjectItem(cJSON_GetArrayItem(cJSON_GetObjectItem(j, "strategies"), 0),
                                                         "overhead_detail"), "allocator");
    cr_assert_not_null(al);
    cr_expect_lt(cJSON_GetObjectItem(al, "tensor_peak")->valuedouble, cJSON_GetObjectItem(al, "limit")->valuedouble);
    cJSON_Delete(j);
    char args[512];
    const char *cp = put("cp.toml", "[training]\nlocal_batch_size = 1\nseq_len = 131072\n[parallelism]\n"
                                    "context_parallel_degree = 8\ncontext_parallel_rotate_method = \"alltoall\"\n"
                                    "[activation_checkpoint]\nmode = \"full\"\n");
    snprintf(args, sizeof args, "--config %s --model tests/data/hf/llama-3.1-8b.json --gpus 8 --gpu h100-80gb", cp);
    cJSON_Delete(expect_settings(args, (const Want[]){{"cp", "8"}, {"seq", "131072"}, {"strategy", "fsdp-full"}, {0, 0}}));
    cr_expect(strstr(err, "context_parallel_rotate_method=alltoall"), "%s", err);
}

/* torchtitan's own Llama 4 Scout job (v0.2.2, tests/data/torchtitan, planned with the 17bx16e
   flavor's shape: tests/data/torchtitan/llama4_17bx16e.json) plans as written: tensor parallel 8
   of its MoE blocks (the experts split by hidden width: expert_tensor_parallel_degree has no
   effect with expert parallel 1), FSDP2 over the 8 data-parallel ranks of 64 GPUs, full
   checkpointing. Expert tensor parallel other than 1 or tp, or 1 under tp with ep > 1 (ep
   borrowing the tp ranks), is refused with one line. */
Test(cli_config, torchtitans_llama4_job_should_plan_tensor_parallel_moe_blocks_as_written) {
    cJSON *j = expect_settings("--config tests/data/torchtitan/llama4_17bx16e.toml --model "
                               "tests/data/torchtitan/llama4_17bx16e.json --gpus 64 --gpu h100-80gb",
                               (const Want[]){{"tp", "8"}, {"sp", "on"}, {"act-ckpt", "full"}, {"batch", "8"},
                                              {"seq", "8192"}, {"strategy", "fsdp-full"}, {"precision", "mixed-bf16"},
                                              {0, 0}});
    cr_expect_eq(num(j, "train", "tp"), 8);
    cr_expect_eq(num(j, "train", "data_parallel"), 8);
    cJSON_Delete(j);
    cr_expect(!strstr(err, "expert_tensor_parallel_degree"), "%s", err);
    char args[512];
    const char *bad = put("etp.toml", "[parallelism]\ntensor_parallel_degree = 8\nexpert_parallel_degree = 2\n"
                                      "expert_tensor_parallel_degree = 4\n");
    snprintf(args, sizeof args, "--config %s --model tests/data/torchtitan/llama4_17bx16e.json --gpus 64", bad);
    cr_expect_eq(run(args), 2);
    cr_expect_eq(lines(err), 1, "%s", err);
    cr_expect(strstr(err, "expert_tensor_parallel_degree 4") && strstr(err, "1 or the tensor-parallel degree 8"), "%s", err);
    const char *borrow = put("etp1.toml", "[parallelism]\ntensor_parallel_degree = 8\nexpert_parallel_degree = 2\n"
                                          "expert_tensor_parallel_degree = 1\n");
    snprintf(args, sizeof args, "--config %s --model tests/data/torchtitan/llama4_17bx16e.json --gpus 64", borrow);
    cr_expect_eq(run(args), 2);
    cr_expect_eq(lines(err), 1, "%s", err);
    cr_expect(strstr(err, "ReordererSequenceParallel"), "%s", err);
    const char *etp = put("etp8.toml", "[parallelism]\ntensor_parallel_degree = 8\nexpert_parallel_degree = 2\n"
                                       "expert_tensor_parallel_degree = 8\n");
    snprintf(args, sizeof args, "--config %s --model tests/data/torchtitan/llama4_17bx16e.json --gpus 64", etp);
    cJSON_Delete(expect_settings(args, (const Want[]){{"tp", "8"}, {"ep", "2"}, {0, 0}}));
}

Test(cli_config, hf_training_arguments_should_map_onto_the_trainers_flags) {
    cJSON *j = expect_settings("--config " EX "hf_training_args.json --model gpt2 --gpus 4", (const Want[]){
        {"loop", "trainer"}, {"batch", "4"}, {"grad-accum", "4"}, {"strategy", "ddp"}, {"precision", "amp-bf16"},
        {"act-ckpt", "full"}, {"optimizer", "adamw"}, {0, 0}});
    cr_expect_str_eq(str(j, "train", "loop"), "trainer");
    cJSON_Delete(j);
    /* an inline DeepSpeed dict: "auto" filled from the arguments and the model's hidden size */
    const char *f = put("hfds.json", "{\"output_dir\": \"o\", \"per_device_train_batch_size\": 2, \"gradient_accumulation_steps\": 3,"
                                     " \"bf16\": true, \"deepspeed\": {\"train_micro_batch_size_per_gpu\": \"auto\","
                                     " \"zero_optimization\": {\"stage\": 2, \"reduce_bucket_size\": \"auto\"},"
                                     " \"bf16\": {\"enabled\": \"auto\"}}}");
    char args[512];
    snprintf(args, sizeof args, "--config %s --model gpt2 --gpus 2", f);
    cJSON_Delete(expect_settings(args, (const Want[]){   /* reduce_bucket_size: gpt2's hidden size 768, squared */
        {"strategy", "zero2"}, {"precision", "mixed-bf16"}, {"batch", "2"}, {"ds-reduce-bucket", "589824"}, {0, 0}}));
}

Test(cli_config, the_command_line_should_win_and_the_header_should_say_so) {
    cr_assert_eq(run("--config " EX "hf_training_args.json --model gpt2 --gpus 4 --batch 2 --json"), 0, "%s", err);
    cJSON *j = json_out();
    cr_expect_eq(num(j, "train", "micro_batch"), 2);
    const cJSON *s = setting(j, "batch");
    cr_assert_not_null(s);
    cr_expect_str_eq(cJSON_GetObjectItem(s, "source")->valuestring, "command line");
    cr_expect_str_eq(cJSON_GetObjectItem(s, "command_line_value")->valuestring, "2");
    cJSON_Delete(j);
    cr_assert_eq(run("--config " EX "hf_training_args.json --model gpt2 --gpus 4 --batch 2 --wide"), 0);
    cr_expect(strstr(out, "from the command line instead: --batch 2 (not 4 from per_device_train_batch_size)"), "%.600s", out);
    /* auto keeps what the file fixes, as if given */
    cr_assert_eq(run("auto --config " EX "hf_training_args.json --model gpt2 --gpus 4 --wide"), 0, "%s", err);
    cr_expect(strstr(out, "kept as given: ") && strstr(out, "--precision amp-bf16"), "%.800s", out);
}

Test(cli_config, keys_memplan_does_not_model_should_be_named_in_one_warning_line) {
    const char *f = put("w.json", "{\"train_micro_batch_size_per_gpu\": 2, \"zero_optimization\": {\"stage\": 2,"
                                  " \"overlap_comm\": true, \"contiguous_gradients\": false, \"sub_group_size\": 1e8},"
                                  " \"amp\": {\"enabled\": true}, \"my_own_key\": 1, \"steps_per_print\": 5}");
    cr_assert_eq(runf("--config %s --model gpt2 --gpus 2 --wide", f), 0, "%s", err);
    cr_expect_eq(lines(err), 1, "%s", err);
    cr_expect(strstr(err, "memplan: ") == err && strstr(err, "w.json: not modelled: "), "%s", err);
    static const char *const NAMED[] = {"zero_optimization.contiguous_gradients=false",
                                        "zero_optimization.sub_group_size=100000000", "amp", "my_own_key=1"};
    for (size_t i = 0; i < sizeof NAMED / sizeof NAMED[0]; i++) cr_expect(strstr(err, NAMED[i]), "%s missing: %s", NAMED[i], err);
    cr_expect_null(strstr(err, "steps_per_print"), "logging has no effect: %s", err);
    cr_expect(strstr(out, "not modelled: 4 keys"), "%.400s", out);
    /* overlap_comm under stage 2 is honoured: --ds-overlap-comm on (a second reduce bucket) */
    cr_expect(strstr(out, "--ds-overlap-comm on (zero_optimization.overlap_comm)"), "%.800s", out);
    cr_expect_null(strstr(err, "overlap_comm"), "%s", err);
    /* stage 0 is named and planned as DDP */
    const char *z = put("z.json", "{\"train_micro_batch_size_per_gpu\": 2}");
    char args[512];
    snprintf(args, sizeof args, "--config %s --model gpt2 --gpus 2", z);   /* without fp16/bf16: fp32 */
    cJSON_Delete(expect_settings(args, (const Want[]){{"strategy", "ddp"}, {"precision", "fp32"}, {0, 0}}));
    cr_expect(strstr(err, "zero_optimization.stage=0"), "%s", err);
}

Test(cli_config, a_bad_value_should_be_one_line_naming_the_key_the_value_and_the_valid_ones) {
    static const struct { const char *name, *text, *want[3]; } B[] = {
        {"s.json", "{\"zero_optimization\": {\"stage\": 5}}", {"zero_optimization.stage", "5", "0 to 3"}},
        {"b.json", "{\"train_micro_batch_size_per_gpu\": 1, \"bf16\": {\"enabled\": \"maybe\"}}", {"bf16.enabled", "maybe", "true, false"}},
        {"o.json", "{\"zero_optimization\": {\"stage\": 2, \"offload_optimizer\": {\"device\": \"gpu\"}}}",
         {"zero_optimization.offload_optimizer.device", "gpu", "none, cpu, nvme"}},
        {"a.yaml", "distributed_type: FSDP\nfsdp_config:\n  fsdp_sharding_strategy: HALF_SHARD\n",
         {"fsdp_config.fsdp_sharding_strategy", "HALF_SHARD", "FULL_SHARD"}},
        {"t.toml", "[activation_checkpoint]\nmode = \"sometimes\"\n", {"activation_checkpoint.mode", "sometimes", "selective, full"}},
        {"h.json", "{\"output_dir\": \"o\", \"per_device_train_batch_size\": \"lots\"}", {"per_device_train_batch_size", "lots", "whole number"}},
    };
    for (size_t i = 0; i < sizeof B / sizeof B[0]; i++) {
        const char *f = put(B[i].name, B[i].text);
        cr_expect_eq(runf("--config %s --model llama2-7b --gpus 8", f), 2, "%s: %s", B[i].name, err);
        cr_expect_eq(lines(err), 1, "%s: %s", B[i].name, err);
        cr_expect_str_empty(out, "%s: work was done: %.200s", B[i].name, out);
        for (int k = 0; k < 3; k++) cr_expect(strstr(err, B[i].want[k]), "%s: no '%s' in %s", B[i].name, B[i].want[k], err);
    }
    const char *what = put("what.yaml", "foo: 1\n");
    cr_expect_eq(runf("--config %s --model gpt2", what), 2);
    cr_expect(strstr(err, "give --config-kind (valid: deepspeed, accelerate, torchtitan, hf-trainer, trl, llama-factory, axolotl)"), "%s", err);
    cr_expect_eq(run("--config /nonexistent/ds.json --model gpt2"), 2);
    cr_expect_eq(lines(err), 1, "%s", err);
    cr_expect_eq(run("--config-kind deepspeed --model gpt2"), 2);
    cr_expect_eq(run("--config " EX "ds_zero2.json --config-kind onnx --model gpt2"), 2);
    cr_expect(strstr(err, "valid: deepspeed, accelerate, torchtitan, hf-trainer"), "%s", err);
}

Test(cli_config, the_parsers_error_for_a_value_from_the_file_should_name_its_key_and_file) {
    const char *two = put("two.yaml", "distributed_type: MULTI_GPU\nnum_processes: 8\nnum_machines: 2\n");
    cr_expect_eq(runf("--config %s --model llama2-7b --gpus 7", two), 2);   /* re-derived over the file's 2 machines */
    cr_expect_eq(lines(err), 1, "%s", err);
    cr_expect(strstr(err, "--gpus 7 does not split over num_machines 2"), "%s", err);
    cr_expect_eq(run("--config " EX "ds_zero2.json --model gpt2 --gpus 2 --gpu v100-32gb"), 2);
    cr_expect(strstr(err, "--precision mixed-bf16 is bf16.enabled in " EX "ds_zero2.json"), "%s", err);
    const char *f = put("seq.toml", "[training]\nseq_len = 4096\n[parallelism]\ndata_parallel_shard_degree = 2\n");
    cr_expect_eq(runf("--config %s --model gpt2", f), 2);
    cr_expect(strstr(err, "training.seq_len"), "%s", err);
}

Test(cli_config, batch_sizes_that_disagree_once_the_gpus_are_known_should_be_one_line) {
    cr_expect_eq(run("--config " EX "ds_zero2.json --model gpt2-mini --gpus 4"), 2);
    cr_expect_eq(lines(err), 1, "%s", err);
    cr_expect(strstr(err, "train_batch_size 16 is not --batch 4 (train_micro_batch_size_per_gpu) x --grad-accum 2 "
                          "(gradient_accumulation_steps) x --gpus 4 (command line) = 32"), "%s", err);
    const char *f = put("tb.json", "{\"train_batch_size\": 30, \"train_micro_batch_size_per_gpu\": 4, \"zero_optimization\": {\"stage\": 1}}");
    cr_expect_eq(runf("--config %s --model gpt2 --gpus 2", f), 2);
    cr_expect(strstr(err, "train_batch_size 30 is not a multiple"), "%s", err);
    const char *g = put("tb2.json", "{\"train_batch_size\": 32, \"train_micro_batch_size_per_gpu\": 4, \"zero_optimization\": {\"stage\": 1}}");
    char args[512];
    snprintf(args, sizeof args, "--config %s --model gpt2 --gpus 2", g);   /* DeepSpeed derives it: 32 / (4 x 2) */
    cJSON_Delete(expect_settings(args, (const Want[]){{"grad-accum", "4"}, {0, 0}}));
}

Test(cli_config, run_and_validate_should_refuse_a_config_in_one_line) {
    static const char *const CMD[] = {"run", "validate", "validate --against torch"};
    for (size_t i = 0; i < sizeof CMD / sizeof CMD[0]; i++) {
        cr_expect_eq(runf("%s --config " EX "ds_zero2.json --model gpt2-mini", CMD[i]), 2, "%s", CMD[i]);
        cr_expect_eq(lines(err), 1, "%s: %s", CMD[i], err);
        cr_expect(strstr(err, "--config is read by plan and auto"), "%s: %s", CMD[i], err);
    }
}

/* auto --emit deepspeed, read back: the same strategy, micro-batch, accumulation, precision,
   offload, checkpointing and sizes, so the same peak and traffic as auto's pick. */
static void round_trip(const char *setup, const char *auto_only) {
    cr_assert_eq(runf("auto %s %s --strategy zero1,zero2,zero3 --json", setup, auto_only), 0, "%s", err);
    cJSON *a = json_out();
    const cJSON *rec = cJSON_GetObjectItem(a, "recommendation"), *as = cJSON_GetArrayItem(cJSON_GetObjectItem(a, "strategies"), 0);
    cr_assert(cJSON_IsString(cJSON_GetObjectItem(rec, "strategy")), "auto found nothing for %s", setup);
    cr_assert_eq(runf("auto %s %s --emit deepspeed", setup, auto_only), 0, "%s", err);
    const char *f = put("emitted.json", out);
    cr_assert_eq(runf("--config %s %s --json", f, setup), 0, "%s", err);
    cr_expect_str_empty(err, "the emitted config warned: %s", err);
    cJSON *p = json_out();
    const cJSON *ps = cJSON_GetArrayItem(cJSON_GetObjectItem(p, "strategies"), 0);
    cr_expect_eq(cJSON_GetArraySize(cJSON_GetObjectItem(p, "strategies")), 1);
    cr_expect_str_eq(cJSON_GetObjectItem(ps, "name")->valuestring, str(a, "recommendation", "strategy"), "%s", setup);
    cr_expect_eq(num(p, "train", "micro_batch"), num(a, "recommendation", "micro_batch"), "%s", setup);
    cr_expect_eq(num(p, "train", "grad_accum"), num(a, "recommendation", "grad_accum"), "%s", setup);
    cr_expect_str_eq(str(p, "train", "precision"), str(a, "recommendation", "precision"), "%s", setup);
    cr_expect_str_eq(str(p, "train", "offload"), str(a, "recommendation", "offload"), "%s", setup);
    cr_expect_str_eq(str(p, "train", "act_ckpt"), str(a, "recommendation", "act_ckpt"), "%s", setup);
    cr_expect_eq(num(ps, "memory", "peak"), num(as, "memory", "peak"), "%s", setup);
    cr_expect_eq(num(ps, "comm", "bytes_per_gpu"), num(as, "comm", "bytes_per_gpu"), "%s", setup);
    cJSON_Delete(a);
    cJSON_Delete(p);
}

Test(cli_config, auto_emit_deepspeed_should_read_back_to_the_plan_auto_picked) {
    round_trip("--model gpt2-xl --gpus 8 --gpu-mem 24GiB", "");
    round_trip("--model llama2-13b --gpus 2 --gpu-mem 24GiB --host-mem 1TiB", "");         /* offload params */
    round_trip("--model gpt2-mini --gpus 2 --ds-reduce-bucket 1000000", "--global-batch 16");  /* sizes, accumulation */
    round_trip("--model llama2-7b --gpus 8 --gpu v100-32gb --seq 2048", "");               /* fp16 */
    round_trip("--model gpt2 --gpus 2 --precision amp-bf16", "");                           /* torch_autocast */
    round_trip("--model gpt2 --gpus 4 --precision bf16", "");                               /* DeepSpeed's pure bf16 */
}

Test(cli_config, fsdp1_flags_should_refuse_bad_values_and_setups_in_one_line) {
    static const struct { const char *args, *want; } B[] = {
        {"--model gpt2-mini --gpus 2 --strategy fsdp-full --fsdp-min-params 2e6", "give --fsdp 1"},
        {"--model gpt2-mini --gpus 2 --strategy fsdp-full --fsdp 2 --fsdp-forward-prefetch on", "give --fsdp 1"},
        {"--model gpt2-mini --gpus 2 --strategy fsdp-full --fsdp 1 --fsdp-backward-prefetch sideways",
         "valid: pre, post, none"},
        {"--model gpt2-mini --gpus 2 --strategy fsdp-full --fsdp 1 --fsdp-limit-all-gathers maybe", "valid: on, off"},
        {"--model gpt2-mini --gpus 2 --strategy fsdp-full --fsdp 1 --fsdp-min-params 1.5", "whole number"},
        {"--model gpt2-mini --gpus 2 --strategy ddp,fsdp-full --fsdp 1 --fsdp-min-params 2e6", "give only fsdp-full"},
        {"--model gpt2-mini --gpus 2 --strategy ddp --fsdp 1 --fsdp-backward-prefetch post", "add fsdp-full"},
        {"--model gpt2-mini --gpus 2 --strategy fsdp-full --fsdp 1 --fsdp-min-params 1000", "valid: above 198272"},
    };
    for (size_t i = 0; i < sizeof B / sizeof B[0]; i++) {
        cr_expect_eq(run(B[i].args), 2, "%s: %s", B[i].args, err);
        cr_expect_eq(lines(err), 1, "%s: %s", B[i].args, err);
        cr_expect(strstr(err, B[i].want), "%s: no '%s' in %s", B[i].args, B[i].want, err);
    }
    /* above the model: everything in the root, planned */
    cr_expect_eq(run("--model gpt2-mini --gpus 2 --strategy fsdp-full --fsdp 1 --fsdp-min-params 2e6 "
                     "--fsdp-backward-prefetch none"), 0, "%s", err);
}
