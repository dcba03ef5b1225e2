/* test_cli_io.c — the planning front end (build/memplan) as a command: nothing it writes is lost
 * or lands in the wrong place, every flag means one thing, and every failure is one line with
 * exit status 1 (an output could not be written) or 2 (a usage error, found before any work).
 * One case per item of issue 11; each checks the status, the message, and what was (not)
 * written. The executor's commands (memplan-exec, under mpirun) are in test_cli_ranks.c. */
#include <cjson/cJSON.h>
#include <criterion/criterion.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "test_run.h"

static char bin[PATH_MAX];

/* `cd dir && memplan <args>`; args may redirect (the command runs in sh). Without a redirection
 * of its own, stderr joins stdout. */
static Run mp_in(const char *dir, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static Run mp_in(const char *dir, const char *fmt, ...)
{
    if (!*bin) test_sibling_path(bin, sizeof bin, "../memplan");
    char args[4096], cmd[PATH_MAX + 4200];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(args, sizeof args, fmt, ap);
    va_end(ap);
    snprintf(cmd, sizeof cmd, "cd %s && timeout 60 %s %s%s", dir ? dir : ".", bin, args, strstr(args, "2>") ? "" : " 2>&1");
    return test_run_cmd(cmd);
}
#define mp(...) mp_in(NULL, __VA_ARGS__)

static int lines(const char *s)
{
    int n = 0;
    for (; *s; s++) n += *s == '\n';
    return n;
}

static int exists(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0;
}

/* A usage error: exit 2, exactly one line, containing `what`. */
static void expect_usage(Run r, const char *args, const char *what)
{
    cr_expect_eq(r.status, 2, "'%s' exited %d: %s", args, r.status, r.out);
    cr_expect(strstr(r.out, what) != NULL, "'%s' said: %s", args, r.out);
    cr_expect_eq(lines(r.out), 1, "'%s' printed %d lines: %s", args, lines(r.out), r.out);
    cr_expect(strncmp(r.out, "memplan: ", 9) == 0, "%s", r.out);
    free(r.out);
}
#define USAGE(what, ...) do { char a_[2048]; snprintf(a_, sizeof a_, __VA_ARGS__); expect_usage(mp("%s", a_), a_, what); } while (0)

/* ---- output lost ---- */

Test(cli_io, json_to_a_full_device_should_exit_1_naming_the_file)
{
    Run r = mp("--model gpt2 --json=/dev/full");
    cr_expect_eq(r.status, 1, "%s", r.out);
    cr_expect(strstr(r.out, "memplan: cannot write the --json output '/dev/full': No space left on device") != NULL, "%s", r.out);
    cr_expect_eq(lines(r.out), 1, "%s", r.out);
    free(r.out);
}

Test(cli_io, standard_output_on_a_full_device_should_exit_1_for_every_planning_command)
{
    const char *cmds[] = {"--model gpt2", "--model gpt2 --json", "auto --model gpt2 --gpus 8", "models", "models --json",
                          "gpus", "gpus --json", "models --export gpt2", "help"};
    for (size_t i = 0; i < sizeof cmds / sizeof cmds[0]; i++) {
        Run r = mp("%s 2>&1 >/dev/full", cmds[i]);   /* stderr to the pipe, stdout to the full device */
        cr_expect_eq(r.status, 1, "'%s' exited %d: %s", cmds[i], r.status, r.out);
        cr_expect(strstr(r.out, "standard output") && strstr(r.out, "No space left on device"), "'%s': %s", cmds[i], r.out);
        cr_expect_eq(lines(r.out), 1, "'%s': %s", cmds[i], r.out);
        free(r.out);
    }
}

Test(cli_io, a_closed_standard_output_should_exit_1_and_not_write_into_another_file)
{
    char dir[64], trace[128];
    test_tmpdir(dir, sizeof dir, "memplan-io");
    snprintf(trace, sizeof trace, "%s/t.json", dir);
    Run r = mp("--model gpt2 --json 2>&1 >&-");
    cr_expect_eq(r.status, 1, "%s", r.out);
    cr_expect(strstr(r.out, "standard output: it is closed") != NULL, "%s", r.out);
    free(r.out);
    /* the trace is the first file opened: it must not receive the table meant for fd 1 */
    r = mp("--model gpt2 --trace %s 2>&1 >&-", trace);
    cr_expect_eq(r.status, 1, "%s", r.out);
    cr_expect(strstr(r.out, "memplan: cannot write standard output: it is closed") != NULL, "%s", r.out);
    cJSON *j = test_read_json(trace);
    cr_expect(cJSON_IsArray(cJSON_GetObjectItem(j, "traceEvents")), "the trace holds only the trace");
    cJSON_Delete(j);
    free(r.out);
}

Test(cli_io, emit_should_refuse_json_trace_and_plot_instead_of_ignoring_them)
{
    char dir[64];
    test_tmpdir(dir, sizeof dir, "memplan-io");
    const char *extra[] = {"--json=x.json", "--json", "--trace t.json", "--plot p.png"};
    for (size_t i = 0; i < 4; i++) {
        Run r = mp_in(dir, "auto --model gpt2 --gpus 8 --emit deepspeed %s", extra[i]);
        cr_expect_eq(r.status, 2, "'%s': %s", extra[i], r.out);
        cr_expect(strstr(r.out, "--emit deepspeed prints only the DeepSpeed config") != NULL, "%s", r.out);
        cr_expect_eq(lines(r.out), 1, "%s", r.out);
        free(r.out);
    }
    char p[128];
    const char *files[] = {"x.json", "t.json", "p.png", "p.png.gp"};
    for (size_t i = 0; i < 4; i++) {
        snprintf(p, sizeof p, "%s/%s", dir, files[i]);
        cr_expect(!exists(p), "%s was written", p);
    }
}

Test(cli_io, a_file_flag_followed_by_a_flag_should_name_the_missing_value)
{
    char dir[64], p[128];
    test_tmpdir(dir, sizeof dir, "memplan-io");
    Run r = mp_in(dir, "--model gpt2 --trace --json");
    cr_expect_eq(r.status, 2, "%s", r.out);
    cr_expect(strstr(r.out, "memplan: --trace needs a value (got the option '--json')") != NULL, "%s", r.out);
    free(r.out);
    snprintf(p, sizeof p, "%s/--json", dir);
    cr_expect(!exists(p), "a file named --json was written");
}

Test(cli_io, an_output_in_a_missing_folder_should_fail_before_any_work)
{
    Run r = mp("--model gpt2 --trace /nonexistent-memplan/t.json");
    cr_expect_eq(r.status, 2, "%s", r.out);
    cr_expect(strstr(r.out, "--trace '/nonexistent-memplan/t.json': the folder '/nonexistent-memplan' does not exist"), "%s", r.out);
    cr_expect(strstr(r.out, "strategy") == NULL, "no table before the error: %s", r.out);
    free(r.out);
    USAGE("--plot '/nonexistent-memplan/p.png'", "--model gpt2 --plot /nonexistent-memplan/p.png");
    USAGE("--json '/etc/passwd/x.json'", "--model gpt2 --json=/etc/passwd/x.json");
    USAGE("--json '/tmp' is a folder", "--model gpt2 --json=/tmp");
    USAGE("--json needs a file name", "--model gpt2 --json=");
    USAGE("--json '/nonexistent-memplan/g.json'", "gpus --json=/nonexistent-memplan/g.json");
}

Test(cli_io, an_output_that_is_the_model_file_should_be_refused_and_the_model_kept)
{
    char dir[64], model[128], before[1 << 12];
    test_tmpdir(dir, sizeof dir, "memplan-io");
    snprintf(model, sizeof model, "%s/mine.json", dir);
    Run r = mp("models --export gpt2 > %s 2>&1", model);
    cr_assert_eq(r.status, 0, "%s", r.out);
    free(r.out);
    FILE *f = fopen(model, "r");
    cr_assert_not_null(f);
    size_t n = fread(before, 1, sizeof before - 1, f);
    fclose(f);
    before[n] = 0;
    const char *flags[] = {"--trace", "--json=", "--plot"};
    for (int i = 0; i < 3; i++) {
        char args[512];
        snprintf(args, sizeof args, "--model %s %s%s%s", model, flags[i], flags[i][6] == '=' ? "" : " ", model);
        if (i == 2) snprintf(args, sizeof args, "--model %s --plot %s.png --json=%s.png.gp", model, model, model);
        r = mp("%s", args);
        cr_expect_eq(r.status, 2, "'%s': %s", args, r.out);
        cr_expect(strstr(r.out, i == 2 ? "both write" : "is the input file"), "'%s': %s", args, r.out);
        free(r.out);
    }
    char after[1 << 12];
    f = fopen(model, "r");
    cr_assert_not_null(f);
    n = fread(after, 1, sizeof after - 1, f);
    fclose(f);
    after[n] = 0;
    cr_expect_str_eq(after, before, "the model file was changed");
}

Test(cli_io, json_should_mean_stdout_bare_and_a_file_with_equals_everywhere)
{
    char dir[64], p[128];
    test_tmpdir(dir, sizeof dir, "memplan-io");
    const char *cmds[] = {"--model gpt2", "auto --model gpt2 --gpus 8", "models", "gpus"};
    for (int i = 0; i < 4; i++) {
        snprintf(p, sizeof p, "%s/%d.json", dir, i);
        Run r = mp("%s --json=%s", cmds[i], p);
        cr_expect_eq(r.status, 0, "%s: %s", cmds[i], r.out);
        cJSON_Delete(test_read_json(p));
        free(r.out);
        r = mp("%s --json 2>/dev/null", cmds[i]);
        cJSON *j = cJSON_Parse(r.out);
        cr_expect_not_null(j, "%s --json: not JSON on stdout: %.200s", cmds[i], r.out);
        cJSON_Delete(j);
        free(r.out);
    }
    USAGE("--json writes to standard output, --json=FILE to a file", "--model gpt2 --json out.json");
    USAGE("a file is --json=FILE", "gpus --json out.json");
}

/* ---- flags silently ignored or misread ---- */

Test(cli_io, a_flag_given_twice_should_be_refused)
{
    USAGE("--gpus given twice ('8' and '2')", "--model gpt2 --gpus 8 --gpus 2");
    USAGE("--json given twice", "--model gpt2 --json --json=x.json");
    USAGE("--emit given twice", "auto --model gpt2 --emit torch --emit deepspeed");
    USAGE("--json given twice", "gpus --json --json");
}

Test(cli_io, a_size_without_a_unit_should_be_refused)
{
    USAGE("--alloc-margin '5' needs a unit", "--model gpt2 --alloc-margin 5");
    USAGE("--cuda-context '1.5' needs a unit", "--model gpt2 --cuda-context 1.5");
    USAGE("--nccl-mem '512' needs a unit", "--model gpt2 --nccl-mem 512");
    USAGE("--cublas-ws '8' needs a unit", "--model gpt2 --cublas-ws 8");
    USAGE("--cublas-ws '1TiB' is not a size up to 64GiB", "--model gpt2 --cublas-ws 1TiB");
    Run r = mp("--model gpt2 --alloc-margin 5%% --cuda-context 600MiB --nccl-mem 0 --json");
    cr_expect_eq(r.status, 0, "%s", r.out);
    free(r.out);
}

/* the preset's cuBLAS workspace is replaced by --cublas-ws whether it comes before or after --gpu */
Test(cli_io, cublas_ws_should_override_the_presets_workspace_in_any_order)
{
    const char *orders[] = {"--gpu h100-80gb --cublas-ws 1MiB", "--cublas-ws 1MiB --gpu h100-80gb"};
    for (int i = 0; i < 2; i++) {
        Run r = mp("--model gpt2 --strategy ddp %s --json", orders[i]);
        cr_assert_eq(r.status, 0, "%s", r.out);
        cr_expect(strstr(r.out, "\"cublas_workspace\":\t1048576,"),
                  "%s: %s", orders[i], r.out);
        free(r.out);
    }
    Run d = mp("--model gpt2 --strategy ddp --gpu h100-80gb --json");
    cr_expect(strstr(d.out, "\"cublas_workspace\":\t33554432,"),
              "the preset's own: %s", d.out);
    free(d.out);
}

Test(cli_io, a_missing_model_value_should_blame_the_model_flag)
{
    USAGE("--model needs a value (got the option '--gpus')", "--model --gpus 8");
}

Test(cli_io, strategy_all_in_a_list_should_say_it_stands_alone)
{
    USAGE("'all' stands alone", "--model gpt2 --strategy all,ddp");
}

Test(cli_io, help_of_every_planning_command_should_exit_0)
{
    const char *cmds[] = {"gpus --help", "models --help", "auto --help", "plan --help", "help"};
    for (int i = 0; i < 5; i++) {
        Run r = mp("%s", cmds[i]);
        cr_expect_eq(r.status, 0, "'%s' exited %d: %s", cmds[i], r.status, r.out);
        cr_expect(strstr(r.out, "memplan") != NULL, "%s", r.out);
        free(r.out);
    }
}

Test(cli_io, a_sequence_past_learned_positions_should_be_refused)
{
    USAGE("--seq 4096 exceeds gpt2's 1024 learned positions", "--model gpt2 --seq 4096");
    USAGE("exceeds bert-base's 512 learned positions", "--model bert-base --seq 1024");
    Run r = mp("--model llama2-7b --seq 8192 --json");   /* rotary positions: no table to run past */
    cr_expect_eq(r.status, 0, "%s", r.out);
    free(r.out);
}

Test(cli_io, auto_without_activations_should_not_recommend_a_batch_from_nothing)
{
    const char *models[] = {"--params 7.5e9", "--model tests/data/params/mlp-bare.json"};
    for (int i = 0; i < 2; i++) {
        Run r = mp("auto %s --gpus 8", models[i]);
        cr_expect_eq(r.status, 0, "%s", r.out);
        cr_expect(strstr(r.out, "the micro-batch is not searched (kept at --batch 1)") != NULL, "%s", r.out);
        cr_expect(strstr(r.out, "time: not known") != NULL, "%s", r.out);
        cr_expect(strstr(r.out, "tokens/s") == NULL || strstr(r.out, "tokens/s are not known"), "%s", r.out);
        cr_expect(strstr(r.out, "--batch 1 ") != NULL && strstr(r.out, "--batch 1024") == NULL, "%s", r.out);
        free(r.out);
    }
}

Test(cli_io, plan_without_activations_should_not_show_a_max_batch)
{
    Run r = mp("--params 7.5e9 --gpus 8");
    cr_expect_eq(r.status, 0, "%s", r.out);
    cr_expect(strstr(r.out, "65536") == NULL, "%s", r.out);
    cr_expect(strstr(r.out, "unknown  end of forward") != NULL || strstr(r.out, "  unknown  ") != NULL, "%s", r.out);
    free(r.out);
    r = mp("--params 7.5e9 --gpus 8 --json 2>/dev/null");
    cJSON *j = cJSON_Parse(r.out), *e;
    cr_assert_not_null(j, "%.200s", r.out);
    int nulls = 0;
    cJSON_ArrayForEach(e, cJSON_GetObjectItem(j, "strategies")) {
        cJSON *mb = cJSON_GetObjectItem(e, "max_micro_batch");
        cr_expect(cJSON_IsNull(mb) || (cJSON_IsNumber(mb) && mb->valuedouble == 0), "max_micro_batch must be null or 0");
        nulls += cJSON_IsNull(mb);
    }
    cr_expect_gt(nulls, 0);
    cJSON_Delete(j);
    free(r.out);
}

Test(cli_io, a_global_batch_that_the_gpus_do_not_divide_should_exit_2)
{
    USAGE("--global-batch 12 is not a multiple of the 8 GPUs", "auto --model gpt2 --gpus 8 --global-batch 12");
    USAGE("--global-batch 4 is smaller than the 8 GPUs", "auto --model gpt2 --gpus 8 --global-batch 4");
}

Test(cli_io, a_model_without_parameters_should_be_refused)
{
    char dir[64], p[128];
    test_tmpdir(dir, sizeof dir, "memplan-io");
    snprintf(p, sizeof p, "%s/zero.json", dir);
    FILE *f = fopen(p, "w");
    cr_assert_not_null(f);
    fputs("{\"memplan_model\": 1, \"name\": \"nothing\", \"arch\": \"generic\", \"layers\": "
          "[{\"name\": \"in\", \"kind\": \"linear\", \"params\": 0}]}\n", f);
    fclose(f);
    USAGE("has no trainable parameters", "--model %s", p);
}

Test(cli_io, a_json_key_given_twice_should_be_refused)
{
    char dir[64], p[128];
    test_tmpdir(dir, sizeof dir, "memplan-io");
    snprintf(p, sizeof p, "%s/dup.json", dir);
    FILE *f = fopen(p, "w");
    cr_assert_not_null(f);
    fputs("{\"model_type\": \"gpt2\", \"n_layer\": 12, \"n_layer\": 48, \"n_embd\": 768, \"n_head\": 12,"
          " \"vocab_size\": 50257, \"n_positions\": 1024}\n", f);
    fclose(f);
    USAGE("key 'n_layer' is given twice", "--model %s", p);
}

Test(cli_io, gpus_that_do_not_fill_equal_nodes_should_be_refused)
{
    USAGE("--gpus 7 does not fill nodes of 3 GPUs", "--model gpt2 --gpus 7 --gpus-per-node 3");
    USAGE("--gpus 12 does not fill nodes of 8 GPUs (the default --gpus-per-node", "--model gpt2 --gpus 12");
    Run r = mp("--model gpt2 --gpus 12 --gpus-per-node 4 --json");
    cr_expect_eq(r.status, 0, "%s", r.out);
    free(r.out);
}

Test(cli_io, the_simulated_step_should_give_throughput_per_gpu_and_for_all_gpus)
{
    Run r = mp("--model gpt2 --gpus 8 --wide");
    cr_expect_eq(r.status, 0, "%s", r.out);
    cr_expect(strstr(r.out, "throughput per GPU and for all 8 GPUs") != NULL, "%s", r.out);
    cr_expect(strstr(r.out, "per_gpu     all_gpus") != NULL, "%s", r.out);
    /* docs/formulas.md "Time": a strategy's time line names the published sources whose runs cover
       its setup with their held-out error (llm-foundry ran FSDP FULL_SHARD on 8 A100-40GB, none
       ran DDP there), the others are estimates with the reason */
    cr_expect(strstr(r.out, "# times of fsdp-full: backed by published runs of this setup, median error with each "
                            "source held out of the fit: llm-foundry ") != NULL, "%s", r.out);
    cr_expect(strstr(r.out, "# times of ddp, zero1, zero2, zero3") != NULL, "%s", r.out);
    cr_expect(strstr(r.out, ": an estimate (no published run of this strategy on this GPU)") != NULL, "%s", r.out);
    free(r.out);
    r = mp("auto --model gpt2 --gpus 8");
    cr_expect(strstr(r.out, "time: step ") != NULL, "%s", r.out);
    cr_expect(strstr(r.out, "% MFU; an estimate (") != NULL || strstr(r.out, "% MFU; backed by published runs") != NULL,
              "%s", r.out);
    free(r.out);
    r = mp("--model gpt2 --gpus 8 --json 2>/dev/null");
    cJSON *j = cJSON_Parse(r.out), *e;
    cr_assert_not_null(j);
    cJSON_ArrayForEach(e, cJSON_GetObjectItem(j, "strategies")) {
        cJSON *t = cJSON_GetObjectItem(e, "time");
        const char *k = cJSON_GetStringValue(cJSON_GetObjectItem(e, "name"));
        const char *basis = cJSON_GetStringValue(cJSON_GetObjectItem(t, "basis"));
        const char *why = cJSON_GetStringValue(cJSON_GetObjectItem(t, "basis_why"));
        cr_assert(basis && why, "%s", k);
        if (strcmp(k, "fsdp-full") == 0) cr_expect(strstr(why, "llm-foundry ") == why, "%s", why);
        if (strcmp(k, "ddp") == 0) cr_expect_str_eq(basis, "estimate");
        cr_expect_eq(strcmp(basis, "published") == 0, strstr(why, " runs)") != NULL, "%s: %s %s", k, basis, why);
        double all = cJSON_GetObjectItem(t, "tokens_per_s")->valuedouble;
        double one = cJSON_GetObjectItem(t, "tokens_per_s_per_gpu")->valuedouble;
        cr_expect_float_eq(one * 8, all, 1e-6 * all);
    }
    cJSON_Delete(j);
    free(r.out);
}

/* --time-shares, the fit's override, in one line when wrong; a lower GEMM share lengthens the
   step, the shipped share spelled out leaves it as it was */
static double step_s(const char *args)
{
    Run r = mp("--model gpt2 --gpus 8 --strategy ddp --json %s 2>/dev/null", args);
    cJSON *j = cJSON_Parse(r.out);
    cr_assert_not_null(j, "%s", r.out);
    cJSON *s = cJSON_GetArrayItem(cJSON_GetObjectItem(j, "strategies"), 0);
    double v = cJSON_GetObjectItem(cJSON_GetObjectItem(s, "time"), "step_s")->valuedouble;
    cJSON_Delete(j);
    free(r.out);
    return v;
}

Test(cli_io, time_shares_should_reprice_the_step_and_refuse_a_bad_share_in_one_line)
{
    USAGE("--time-shares 'gemm=2': 'gemm=2' is not one of gemm=F", "--model gpt2 --time-shares gemm=2");
    USAGE("'flops=1' is not one of", "--model gpt2 --time-shares attn=0.5,flops=1");
    double base = step_s("");
    cr_expect_gt(step_s("--time-shares gemm=0.5"), base * 1.2);
    Run r = mp("gpus --json 2>/dev/null");
    cJSON *g = cJSON_Parse(r.out), *e;
    cr_assert_not_null(g);
    double share = 0;
    cJSON_ArrayForEach(e, g)
        if (strcmp(cJSON_GetStringValue(cJSON_GetObjectItem(e, "name")), "a100-40gb") == 0)
            share = cJSON_GetObjectItem(cJSON_GetObjectItem(e, "achieved"), "gemm_share")->valuedouble;
    cJSON_Delete(g);
    free(r.out);
    char arg[64];
    snprintf(arg, sizeof arg, "--time-shares gemm=%.4f", share);
    cr_expect_float_eq(step_s(arg), base, 1e-9 * base);
}

/* --fsdp-reduce-dtype: FSDP1's fp32 reduce-scatter moves twice the bf16 one's bytes; a 16-bit
   dtype other than the compute dtype, or no fsdp-* strategy, is refused in one line */
static double rs_payload(const char *dtype)
{
    Run r = mp("--model gpt2 --gpus 8 --strategy fsdp-full --fsdp 1 --precision mixed-bf16 --fsdp-reduce-dtype %s "
               "--json 2>/dev/null", dtype);
    cJSON *j = cJSON_Parse(r.out), *c;
    cr_assert_not_null(j, "%s", r.out);
    double b = 0;
    cJSON *s = cJSON_GetArrayItem(cJSON_GetObjectItem(j, "strategies"), 0);
    cJSON_ArrayForEach(c, cJSON_GetObjectItem(cJSON_GetObjectItem(s, "comm"), "collectives"))
        if (strcmp(cJSON_GetStringValue(cJSON_GetObjectItem(c, "op")), "reduce_scatter") == 0)
            b += cJSON_GetObjectItem(c, "payload_bytes")->valuedouble;
    cJSON_Delete(j);
    free(r.out);
    return b;
}

Test(cli_io, an_fp32_reduce_dtype_should_double_fsdp1s_reduce_scatter_bytes)
{
    double bf = rs_payload("bf16"), fp = rs_payload("fp32");
    cr_expect_gt(bf, 0);
    cr_expect_float_eq(fp, 2 * bf, 1e-9 * fp);
    USAGE("--fsdp-reduce-dtype fp16 needs a precision that computes in fp16 (--precision mixed-bf16 computes in bf16; "
          "valid here: fp32, bf16)", "--model gpt2 --strategy fsdp-full --precision mixed-bf16 --fsdp-reduce-dtype fp16");
    /* without fsdp-* rows the flag changes nothing: said on standard error, the plan made */
    Run r = mp("--model gpt2 --strategy ddp --fsdp-reduce-dtype fp32 2>&1 >/dev/null");
    cr_expect_eq(r.status, 0, "%s", r.out);
    cr_expect(strstr(r.out, "memplan: note: --fsdp-reduce-dtype fp32 changes nothing without an fsdp-* strategy") != NULL, "%s", r.out);
    free(r.out);
    USAGE("unknown --fsdp-reduce-dtype 'fp8' (valid: fp32, bf16, fp16)", "--model gpt2 --fsdp-reduce-dtype fp8");
}

/* ---- start-up ---- */

Test(cli_io, the_planner_should_load_no_gpu_mpi_or_blas_library)
{
    if (!*bin) test_sibling_path(bin, sizeof bin, "../memplan");
    char cmd[PATH_MAX + 32];
    snprintf(cmd, sizeof cmd, "ldd %s 2>&1", bin);
    Run r = test_run_cmd(cmd);
    cr_expect_eq(r.status, 0, "%s", r.out);
    const char *banned[] = {"libmpi", "libcuda", "libcublas", "libnccl", "libcupti", "libopenblas", "libblas"};
    for (int i = 0; i < 7; i++) cr_expect(strstr(r.out, banned[i]) == NULL, "memplan links %s:\n%s", banned[i], r.out);
    free(r.out);
}

Test(cli_io, the_planner_should_finish_under_an_address_space_limit)
{
#ifdef __SANITIZE_ADDRESS__
    cr_skip_test("ASan reserves terabytes of address space: ulimit -v cannot apply");
#endif
    if (!*bin) test_sibling_path(bin, sizeof bin, "../memplan");
    char cmd[PATH_MAX + 128];
    snprintf(cmd, sizeof cmd, "ulimit -v 1000000; timeout 20 %s --model gpt2-xl --gpus 8 2>&1", bin);
    Run r = test_run_cmd(cmd);
    cr_expect_eq(r.status, 0, "%s", r.out);
    cr_expect(strstr(r.out, "recommendation: ") != NULL, "stdout was lost: %s", r.out);
    free(r.out);
}

Test(cli_io, a_valid_config_too_large_for_the_memory_limit_should_say_out_of_memory)
{
#ifdef __SANITIZE_ADDRESS__
    cr_skip_test("ASan reserves terabytes of address space: ulimit -v cannot apply");
#endif
    if (!*bin) test_sibling_path(bin, sizeof bin, "../memplan");
    /* a valid Hugging Face config with an 8-million-entry list (24 MB): cJSON needs about 500 MB
       to hold it, more than the 400 MB limit; the failure is memory, not the JSON */
    char path[] = "/tmp/memplan_big_XXXXXX";
    int fd = mkstemp(path);
    cr_assert(fd >= 0);
    FILE *f = fdopen(fd, "w");
    fputs("{\"model_type\": \"llama\", \"hidden_size\": 512, \"num_hidden_layers\": 2, \"num_attention_heads\": 8, "
          "\"intermediate_size\": 1024, \"vocab_size\": 1000, \"pad\": [0", f);
    for (int i = 1; i < 8000000; i++) fputs(",0", f);
    fputs("]}\n", f);
    fclose(f);
    char cmd[PATH_MAX + 256];
    snprintf(cmd, sizeof cmd, "ulimit -v 400000; timeout 60 %s --model %s 2>&1", bin, path);
    Run r = test_run_cmd(cmd);
    unlink(path);
    cr_expect_eq(r.status, 2, "%s", r.out);
    cr_expect(strstr(r.out, "out of memory parsing the file") != NULL, "%s", r.out);
    cr_expect(strstr(r.out, "invalid JSON") == NULL, "%s", r.out);
    free(r.out);
}

Test(cli_io, a_missing_executor_should_be_one_line_naming_it)
{
    if (!*bin) test_sibling_path(bin, sizeof bin, "../memplan");
    char dir[64], cmd[PATH_MAX + 256];
    test_tmpdir(dir, sizeof dir, "memplan-io");
    snprintf(cmd, sizeof cmd, "cp %s %s/memplan && %s/memplan run --model gpt2-tiny 2>&1", bin, dir, dir);
    Run r = test_run_cmd(cmd);
    cr_expect_eq(r.status, 1, "%s", r.out);
    cr_expect(strstr(r.out, "memplan-exec, which is missing (build it: make)") != NULL, "%s", r.out);
    cr_expect_eq(lines(r.out), 1, "%s", r.out);
    free(r.out);
}
