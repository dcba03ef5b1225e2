/* test_cli_ranks.c — the executor's commands (run, validate, bench: memplan execs memplan-exec)
 * under mpirun, item by item from issue 11: no rank waits for a peer that failed (every rank
 * checks its arguments and outputs, then all agree in one collective, and the failing rank's
 * own line reaches the user), no output is lost, and planning flags the engine does not honour
 * are refused instead of ignored. Each case checks the status, the message, that the job ended
 * at once (no 300 s collective timeout) and what was (not) written. */
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

/* `timeout 60 [mpirun -np np --oversubscribe] memplan args 2>&1` (np 0: without mpirun) */
static Run launch(int np, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static Run launch(int np, const char *fmt, ...)
{
    char bin[PATH_MAX], args[2048];
    test_sibling_path(bin, sizeof bin, "../memplan");
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(args, sizeof args, fmt, ap);
    va_end(ap);
    return test_launch(bin, np, 60, args);
}

static int exists(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0;
}

/* A usage error found before any work: exit 2 within seconds, `what` said once (by rank 0), no
 * training step printed. */
static void expect_refused(Run r, const char *what)
{
    cr_expect_eq(r.status, 2, "exit %d:\n%s", r.status, r.out);
    cr_expect_eq(test_count(r.out, what), 1, "expected '%s' once:\n%s", what, r.out);
    cr_expect(strstr(r.out, "  step ") == NULL, "a step ran:\n%s", r.out);
    cr_expect_lt(r.seconds, 30, "took %.1f s", r.seconds);
    free(r.out);
}

/* ---- hangs ---- */

Test(cli_ranks, a_trace_that_cannot_be_written_should_end_validate_at_once, .timeout = 90)
{
    Run r = launch(2, "validate --model gpt2-tiny --steps 2 --trace /dev/full");
    cr_expect_eq(r.status, 1, "%s", r.out);
    cr_expect(strstr(r.out, "memplan: cannot write the trace file '/dev/full'") != NULL, "%s", r.out);
    cr_expect_eq(test_count(r.out, "memplan:"), 1, "one line:\n%s", r.out);
    cr_expect_lt(r.seconds, 30, "took %.1f s: a rank waited for rank 0", r.seconds);
    free(r.out);
}

Test(cli_ranks, unwritable_outputs_should_be_refused_on_every_rank_before_the_run, .timeout = 90)
{
    expect_refused(launch(2, "validate --model gpt2-tiny --steps 2 --trace /nonexistent-memplan/t.json"),
                   "--trace '/nonexistent-memplan/t.json': the folder '/nonexistent-memplan' does not exist");
    expect_refused(launch(2, "run --model gpt2-tiny --steps 2 --dump-params /nonexistent-memplan/p.bin"),
                   "--dump-params '/nonexistent-memplan/p.bin': the folder");
    expect_refused(launch(2, "run --model gpt2-tiny --steps 2 --trace /tmp --json=/tmp/x.json"), "--trace '/tmp' is a folder");
}

Test(cli_ranks, a_usage_error_on_one_rank_should_reach_the_user_and_stop_every_rank, .timeout = 90)
{
    /* the same arguments, but rank 1's working folder lacks sub/: only rank 1 fails */
    char dir[64], cmd[PATH_MAX + 512], bin[PATH_MAX];
    test_tmpdir(dir, sizeof dir, "memplan-ranks");
    test_sibling_path(bin, sizeof bin, "../memplan");
    snprintf(cmd, sizeof cmd, "mkdir -p %s/r0/sub %s/r1", dir, dir);
    cr_assert_eq(system(cmd), 0);
    test_mpi_env();
    snprintf(cmd, sizeof cmd, "timeout 60 mpirun -np 2 --oversubscribe sh -c 'cd %s/r$OMPI_COMM_WORLD_RANK && exec %s "
             "run --model gpt2-tiny --steps 2 --trace sub/t.json' 2>&1", dir, bin);
    Run r = test_run_cmd(cmd);
    cr_expect_eq(r.status, 2, "%s", r.out);
    cr_expect_eq(test_count(r.out, "memplan: rank 1: --trace 'sub/t.json': the folder 'sub' does not exist"), 1, "%s", r.out);
    cr_expect(strstr(r.out, "  step ") == NULL, "%s", r.out);
    cr_expect_lt(r.seconds, 30, "took %.1f s", r.seconds);
    snprintf(cmd, sizeof cmd, "%s/r0/sub/t.json", dir);
    cr_expect(!exists(cmd), "rank 0 wrote a trace of a run that did not happen");
    free(r.out);
}

Test(cli_ranks, run_on_one_rank_and_validate_on_another_should_stop_at_once, .timeout = 90)
{
    char bin[PATH_MAX];
    test_sibling_path(bin, sizeof bin, "../memplan");
    expect_refused(launch(1, "run --model gpt2-tiny --steps 2 : -np 1 %s validate --model gpt2-tiny --steps 2", bin),
                   "rank 1 was started with a different configuration than rank 0");
    expect_refused(launch(1, "run --model gpt2-tiny --steps 2 : -np 1 %s bench syncbn --model resnet-tiny", bin),
                   "rank 1 was started with a different configuration than rank 0");
}

Test(cli_ranks, the_executor_should_survive_an_address_space_limit, .timeout = 60)
{
#ifdef __SANITIZE_ADDRESS__
    cr_skip_test("ASan reserves terabytes of address space: ulimit -v cannot apply");
#endif
    char bin[PATH_MAX], cmd[PATH_MAX + 128];
    test_sibling_path(bin, sizeof bin, "../memplan");
    test_mpi_env();
    unsetenv("OPENBLAS_NUM_THREADS");   /* memplan chooses: one thread under a limit */
    snprintf(cmd, sizeof cmd, "ulimit -v 1000000; timeout 30 %s run --model gpt2-tiny --steps 2 2>&1", bin);
    Run r = test_run_cmd(cmd);
    cr_expect_neq(r.status, 124, "hung:\n%s", r.out);
    if (r.status == 0) {
        cr_expect(strstr(r.out, "# steady step") != NULL, "%s", r.out);
    } else {
        cr_expect_eq(r.status, 1, "%s", r.out);
        cr_expect(strstr(r.out, "memplan: the address-space limit (ulimit -v 1000000 KiB) leaves no room for BLAS") != NULL,
                  "%s", r.out);
    }
    free(r.out);
    snprintf(cmd, sizeof cmd, "ulimit -v 3000000; timeout 30 %s run --model gpt2-tiny --steps 2 2>&1", bin);
    r = test_run_cmd(cmd);
    cr_expect_eq(r.status, 0, "room for BLAS's buffer, yet:\n%s", r.out);
    cr_expect(strstr(r.out, "# steady step") != NULL, "%s", r.out);
    free(r.out);
}

/* ---- output lost ---- */

Test(cli_ranks, validate_json_to_a_full_device_should_exit_1_and_keep_the_table, .timeout = 90)
{
    Run r = launch(2, "validate --model gpt2-tiny --strategy ddp --steps 2 --json=/dev/full");
    cr_expect_eq(r.status, 1, "%s", r.out);
    cr_expect(strstr(r.out, "memplan: cannot write the --json output '/dev/full': No space left on device") != NULL, "%s", r.out);
    cr_expect(strstr(r.out, "# validate: pass") != NULL, "the table was lost:\n%s", r.out);
    free(r.out);
    /* the per-strategy JSON rewrite (FILE.tmp renamed over FILE) must leave devices alone */
    struct stat st;
    cr_assert_eq(stat("/dev/full", &st), 0);
    cr_assert(S_ISCHR(st.st_mode), "/dev/full was replaced by a plain file");
}

Test(cli_ranks, run_json_to_a_full_device_should_say_so_in_one_line, .timeout = 60)
{
    Run r = launch(0, "run --model gpt2-tiny --steps 2 --json=/dev/full");
    cr_expect_eq(r.status, 1, "%s", r.out);
    cr_expect_eq(test_count(r.out, "memplan: cannot write the --json output '/dev/full'"), 1, "%s", r.out);
    cr_expect(strstr(r.out, "# steady step") != NULL, "the summary was lost:\n%s", r.out);
    free(r.out);
}

Test(cli_ranks, run_stdout_on_a_full_device_should_exit_1, .timeout = 60)
{
    char bin[PATH_MAX], cmd[PATH_MAX + 128];
    test_sibling_path(bin, sizeof bin, "../memplan");
    test_mpi_env();
    snprintf(cmd, sizeof cmd, "timeout 30 %s run --model gpt2-tiny --steps 2 2>&1 >/dev/full", bin);
    Run r = test_run_cmd(cmd);
    cr_expect_eq(r.status, 1, "%s", r.out);
    cr_expect(strstr(r.out, "memplan: cannot write standard output") != NULL, "%s", r.out);
    free(r.out);
}

Test(cli_ranks, a_trace_in_a_missing_folder_should_fail_before_training, .timeout = 60)
{
    expect_refused(launch(0, "run --model gpt2-tiny --steps 2 --trace nodir-memplan/t.json"),
                   "--trace 'nodir-memplan/t.json': the folder 'nodir-memplan' does not exist");
}

/* ---- flags silently ignored or misread ---- */

Test(cli_ranks, planning_flags_the_engine_does_not_honour_should_be_refused, .timeout = 90)
{
    const char *flags[][2] = {
        {"--optimizer sgd", "run does not honour --optimizer 'sgd'"},
        {"--precision bf16", "run does not honour --precision 'bf16'"},
        {"--act-ckpt full", "run does not honour --act-ckpt 'full'"},
        {"--dropout 0.5", "run does not honour --dropout '0.5'"},
        {"--gpus 8", "run does not honour --gpus '8'"},
        {"--attn sdpa", "run does not honour --attn 'sdpa'"},
        {"--grad-as-bucket-view", "run does not honour --grad-as-bucket-view"},
        {"--gpu h100-80gb", "run does not use --gpu without --cupti"},
        {"--alloc-conf expandable_segments:True", "run does not honour --alloc-conf"},
    };
    for (size_t i = 0; i < sizeof flags / sizeof flags[0]; i++)   /* one rank: the same check, quicker */
        expect_refused(launch(0, "run --model gpt2-tiny --steps 2 %s", flags[i][0]), flags[i][1]);
    /* what the engine does anyway is accepted */
    Run r = launch(2, "run --model gpt2-tiny --steps 2 --optimizer adamw --precision fp32 --gpus 2");
    cr_expect_eq(r.status, 0, "%s", r.out);
    free(r.out);
}

/* issue 23 item 11: PyTorch's loop, zero_grad, autocast and FSDP choices mean nothing to the
   engine (its summary was byte-identical with them): refused, each with why */
Test(cli_ranks, pytorch_loop_autocast_and_fsdp_flags_should_be_refused_with_why, .timeout = 90)
{
    const char *flags[][2] = {
        {"--zero-grad zeros", "run does not honour --zero-grad 'zeros': the engine keeps its gradient buffers"},
        {"--loop trainer", "run does not honour --loop 'trainer': the engine's fused LM head"},
        {"--fsdp 1", "run does not honour --fsdp '1': the engine implements ddp and zero1-zero3, no FSDP"},
        {"--autocast cpu", "run does not honour --autocast 'cpu': the engine trains in fp32, without autocast"},
        {"--fsdp-grad-sync every", "run does not honour --fsdp-grad-sync 'every': the engine implements ddp"},
        {"--fsdp-grad=last", "run does not honour --fsdp-grad-sync 'last'"},   /* abbreviated: still it */
    };
    for (size_t i = 0; i < sizeof flags / sizeof flags[0]; i++)
        expect_refused(launch(0, "run --model gpt2-tiny --steps 2 %s", flags[i][0]), flags[i][1]);
    expect_refused(launch(2, "validate --model gpt2-tiny --steps 2 --zero-grad none"),
                   "validate does not honour --zero-grad 'none'");
}

Test(cli_ranks, a_model_file_should_not_be_trained_as_the_preset_it_names, .timeout = 60)
{
    /* tests/data/memplan/gpt2-tiny.json says "name": "gpt2-tiny" */
    expect_refused(launch(0, "run --model tests/data/memplan/gpt2-tiny.json --steps 2"),
                   "by name; 'tests/data/memplan/gpt2-tiny.json' is not one");
}

Test(cli_ranks, validate_with_one_step_should_ask_for_two, .timeout = 60)
{
    expect_refused(launch(0, "validate --model gpt2-tiny --steps 1"), "give --steps 2 or more");
}

Test(cli_ranks, a_fault_that_never_fires_should_be_refused, .timeout = 60)
{
    expect_refused(launch(2, "run --model gpt2-tiny --fault exit@5:1"), "--fault at rank 5, step 1 never fires");
    expect_refused(launch(2, "run --model gpt2-tiny --steps 3 --fault exit@1:9"), "--fault at rank 1, step 9 never fires");
}

Test(cli_ranks, executor_flags_should_refuse_duplicates_and_unitless_sizes, .timeout = 60)
{
    expect_refused(launch(0, "run --model gpt2-tiny --steps 2 --steps 3"), "--steps given twice ('2' and '3')");
    expect_refused(launch(0, "run --model gpt2-tiny --mem-limit 64"), "--mem-limit '64' needs a unit");
    expect_refused(launch(0, "run --model gpt2-tiny --trace --json"), "--trace needs a value (got the option '--json')");
}

Test(cli_ranks, bench_syncbn_should_refuse_batches_batchnorm_cannot_train, .timeout = 60)
{
    expect_refused(launch(2, "bench syncbn --model resnet-tiny --batches 1 --ranks 2"),
                   "a per-GPU batch of 1 gives BatchNorm one value per channel");
}

Test(cli_ranks, bench_syncbn_lists_should_not_be_truncated_or_repeated, .timeout = 60)
{
    char list[400];
    memset(list, '0', 300);             /* 300 characters: a list truncated at 255 would read "0...0" */
    snprintf(list + 300, sizeof list - 300, "2,x");
    expect_refused(launch(2, "bench syncbn --model resnet-tiny --batches %s", list), "is not a comma-separated list");
    expect_refused(launch(2, "bench syncbn --model resnet-tiny --batches 2,2"), "--batches '2,2' lists 2 twice");
    expect_refused(launch(2, "bench syncbn --model resnet-tiny --batches 2 --batches 4"), "--batches given twice");
}

Test(cli_ranks, bench_syncbn_json_should_go_to_stdout_and_one_rank_count_should_plot, .timeout = 120)
{
    char dir[64], bin[PATH_MAX], cmd[2 * PATH_MAX], out[128], err[128], plot[128], gp[160];
    test_tmpdir(dir, sizeof dir, "memplan-ranks");
    test_sibling_path(bin, sizeof bin, "../memplan");
    snprintf(out, sizeof out, "%s/out.json", dir);
    snprintf(err, sizeof err, "%s/err.txt", dir);
    snprintf(plot, sizeof plot, "%s/p.png", dir);
    test_mpi_env();
    snprintf(cmd, sizeof cmd, "timeout 90 mpirun -np 2 --oversubscribe %s bench syncbn --model resnet-tiny --batches 2 "
             "--ranks 2 --steps 1 --warmup 0 --json --plot %s > %s 2> %s; echo $?", bin, plot, out, err);
    Run r = test_run_cmd(cmd);
    cr_expect_eq(atoi(r.out), 0, "exit %s", r.out);
    free(r.out);
    cJSON *j = test_read_json(out);   /* stdout holds the JSON alone */
    cr_expect_str_eq(cJSON_GetObjectItem(j, "bench")->valuestring, "syncbn");
    cr_expect_eq(cJSON_GetArraySize(cJSON_GetObjectItem(j, "records")), 1);
    cJSON_Delete(j);
    snprintf(cmd, sizeof cmd, "cat %s", err);
    r = test_run_cmd(cmd);
    cr_expect(strstr(r.out, "# conclusion:") != NULL, "the table goes to stderr:\n%s", r.out);
    cr_expect(strstr(r.out, "empty x range") == NULL && strstr(r.out, "warning") == NULL, "gnuplot complained:\n%s", r.out);
    free(r.out);
    snprintf(gp, sizeof gp, "%s.gp", plot);
    cr_expect(exists(gp), "no plot script");
    expect_refused(launch(2, "bench syncbn --model resnet-tiny --json out.json"),
                   "--json writes to standard output, --json=FILE to a file");
}
