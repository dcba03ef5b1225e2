/* test_exec_gpu.c — the GPU engine (`memplan run/validate --device cuda [--cupti]`), launched as
 * programs (Criterion forks; MPI and CUDA live in their own processes) and checked through exit
 * status, output, --json and --dump-params files; plus what is testable without a GPU: the host
 * kernel table, the flags, and the one-line refusal when there is no device.
 *
 * GPU tests skip visibly ("skipped: no CUDA device") without one. Two ranks use two GPUs when
 * there are two, else both ranks share GPU 0 as two fake hosts: a distinct NCCL_HOSTID per rank
 * (NCCL tells hosts apart by it and refuses two ranks of one host on one GPU), sockets over
 * loopback (NCCL_SOCKET_IFNAME=lo, NCCL_IB_DISABLE=1). If NCCL still refuses that setup the
 * two-rank tests skip with NCCL's reason: a property of the machine, not of the engine (and at
 * once when MEMPLAN_FAKE_HOSTS=0, which bench/gpu_check.sh sets after its probe failed).
 *
 * Tolerance GPU vs CPU: the CUDA kernels are not bitwise the CPU's (sums in another order, fused
 * multiply-adds; docs/gpu-kernels.md: up to 1e-4 relative for a matmul). After 3 AdamW steps at
 * lr 1e-4 the per-unit normwise relative difference ||gpu - cpu|| / ||cpu|| must stay below 1e-4
 * and every step's loss within 1e-4 relative; the CPU engine itself holds 1e-5 between rank
 * counts (test_exec_run.c), so 1e-4 leaves room for the kernels' rounding and nothing else. */
#include <cjson/cJSON.h>
#include <criterion/criterion.h>
#include <libgen.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "exec_comm.h"
#include "exec_device.h"
#include "exec_gpt2.h"
#include "exec_kern.h"
#include "exec_run.h"
#include "kern_fast.h"
#include "kern_ops.h"

#include "test_run.h"

#define GPU_TOL 1e-4

/* `timeout T [mpirun -np np ...] memplan args`; np 0: without mpirun. On a GPU machine with fewer
 * GPUs than ranks, each rank is its own fake host (see the top of this file). */
static Run launch(int np, int timeout_s, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static Run launch(int np, int timeout_s, const char *fmt, ...)
{
    char bin[PATH_MAX], args[2048], cmd[PATH_MAX + 2800];
    test_sibling_path(bin, sizeof bin, "../memplan");
    test_mpi_env();
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(args, sizeof args, fmt, ap);
    va_end(ap);
    int ngpu = exec_device_cuda_available();
    /* bench/gpu_check.sh sets MEMPLAN_FAKE_HOSTS=0 when its probe found that NCCL refuses (or
       hangs on) fake hosts: the two-rank tests then skip at once instead of timing out */
    const char *fake = getenv("MEMPLAN_FAKE_HOSTS");
    if (np > 1 && ngpu > 0 && ngpu < np && fake && strcmp(fake, "0") == 0)
        cr_skip_test("skipped: fake hosts on one GPU did not work here (MEMPLAN_FAKE_HOSTS=0)");
    if (np == 0)
        snprintf(cmd, sizeof cmd, "timeout %d %s %s 2>&1", timeout_s, bin, args);
    else if (ngpu > 0 && ngpu < np)
        snprintf(cmd, sizeof cmd,
                 "timeout %d mpirun -np %d --oversubscribe -x NCCL_SOCKET_IFNAME=lo -x NCCL_IB_DISABLE=1 "
                 "sh -c 'NCCL_HOSTID=memplan-fake-host-$OMPI_COMM_WORLD_RANK exec \"$0\" \"$@\"' %s %s 2>&1",
                 timeout_s, np, bin, args);
    else
        snprintf(cmd, sizeof cmd, "timeout %d mpirun -np %d --oversubscribe %s %s 2>&1", timeout_s, np, bin, args);
    return test_run_cmd(cmd);
}

static int lines(const char *out)
{
    int n = 0;
    for (const char *p = out; *p; p++) n += *p == '\n';
    return n;
}

static float *read_floats(const char *path, size_t n)
{
    FILE *f = fopen(path, "rb");
    cr_assert_not_null(f, "no parameter dump %s", path);
    float *a = malloc((n + 1) * sizeof *a);
    size_t got = fread(a, sizeof *a, n + 1, f);
    fclose(f);
    cr_assert_eq(got, n, "%s holds %zu floats, expected %zu", path, got, n);
    return a;
}

static void skip_without_gpu(void)
{
    if (exec_device_cuda_available() == 0) cr_skip_test("skipped: no CUDA device");
}

/* Two ranks on one GPU as fake hosts: NCCL may still refuse them as the same GPU twice (the
 * machine's property: its duplicate-GPU check). Only that refusal skips; any other failure of
 * ncclCommInitRank (a crash, a timeout, a transport error) fails the test. */
static void skip_if_nccl_refused(const Run *r)
{
    if (r->status != 0 && strstr(r->out, "Duplicate GPU") && exec_device_cuda_available() < 2)
        cr_skip_test("skipped: NCCL refused 2 ranks on one GPU as fake hosts (NCCL_HOSTID per rank):\n%s", r->out);
}

/* ---- without a GPU: the host kernel table and the flags ---- */

static void fill(float *a, size_t n, unsigned seed)
{
    for (size_t i = 0; i < n; i++) {
        seed = seed * 1664525u + 1013904223u;
        a[i] = (float)((seed >> 8) & 0xFFFF) / 32768.0f - 1.0f;
    }
}

/* The host table calls kern_fast.h's fast paths where one exists (bit for bit what they compute;
 * within test_kern_ops.c's tolerance of the kern_ops.h reference) and kern_ops.h otherwise. */
static void expect_near(const float *a, const float *ref, size_t n)
{
    for (size_t i = 0; i < n; i++)
        cr_expect(fabsf(a[i] - ref[i]) <= 1e-5f + 1e-4f * fabsf(ref[i]), "[%zu] %g vs reference %g", i, a[i], ref[i]);
}

Test(exec_gpu, the_host_kernel_table_should_compute_bitwise_what_the_cpu_kernels_compute)
{
    const ExecKernels *k = exec_kernels(DEVICE_HOST);
    cr_expect_str_eq(k->name, "cpu");
    enum { B = 2, T = 5, C = 8, OC = 12, NH = 2 };
    float inp[B * T * 3 * C], w[OC * C], bias[OC], out1[B * T * OC], out2[B * T * OC];
    fill(inp, B * T * 3 * C, 1);
    fill(w, OC * C, 2);
    fill(bias, OC, 3);
    kern_matmul_forward(out1, inp, w, bias, B, T, C, OC);
    cr_expect_eq(k->matmul_forward(out2, inp, w, bias, B, T, C, OC, NULL), 0);
    cr_expect_arr_eq(out1, out2, sizeof out1);

    float y1[B * T * C], y2[B * T * C], pre1[B * NH * T * T], pre2[B * NH * T * T], att1[B * NH * T * T], att2[B * NH * T * T];
    kern_attention_forward_fast(y1, pre1, att1, inp, B, T, C, NH);
    cr_expect_eq(k->attention_forward(y2, pre2, att2, inp, B, T, C, NH, NULL), 0);
    cr_expect_arr_eq(y1, y2, sizeof y1);
    cr_expect_arr_eq(att1, att2, sizeof att1);
    kern_attention_forward(y1, pre1, att1, inp, B, T, C, NH);
    expect_near(y2, y1, B * T * C);
    expect_near(att2, att1, B * NH * T * T);

    float lw[C], lb[C], m1[B * T], m2[B * T], r1[B * T], r2[B * T];
    fill(lw, C, 4);
    fill(lb, C, 5);
    kern_layernorm_forward_fast(y1, m1, r1, inp, lw, lb, B, T, C);
    cr_expect_eq(k->layernorm_forward(y2, m2, r2, inp, lw, lb, B, T, C, NULL), 0);
    cr_expect_arr_eq(y1, y2, sizeof y1);
    cr_expect_arr_eq(r1, r2, sizeof r1);
    kern_layernorm_forward(y1, m1, r1, inp, lw, lb, B, T, C);
    expect_near(y2, y1, B * T * C);

    float p1[64], p2[64], g[64], mo1[64] = {0}, mo2[64] = {0}, v1[64] = {0}, v2[64] = {0};
    fill(p1, 64, 6);
    memcpy(p2, p1, sizeof p1);
    fill(g, 64, 7);
    kern_adamw_update(p1, g, mo1, v1, 0, 64, 1e-3f, 0.9f, 0.999f, 1e-8f, 0.01f, 1);
    cr_expect_eq(k->adamw_update(p2, g, mo2, v2, 0, 64, 1e-3f, 0.9f, 0.999f, 1e-8f, 0.01f, 1, NULL), 0);
    cr_expect_arr_eq(p1, p2, sizeof p1);

    float acc[64], want[64];
    fill(acc, 64, 8);
    for (int i = 0; i < 64; i++) want[i] = acc[i] + g[i];
    cr_expect_eq(k->add(acc, g, 64, NULL), 0);
    cr_expect_arr_eq(acc, want, sizeof acc, "add is dst[i] += src[i], as the strategies' loops were");
    cr_expect_str_eq(exec_kernels(DEVICE_CUDA)->name, "cuda");
}

Test(exec_gpu, device_cuda_without_a_gpu_should_fail_with_one_line, .timeout = 60)
{
    if (exec_device_cuda_available() > 0) cr_skip_test("skipped: a CUDA device is present");
    Run r = launch(0, 60, "run --model gpt2-tiny --steps 2 --device cuda");
    cr_expect_eq(r.status, 1, "%s", r.out);
    cr_expect_eq(lines(r.out), 1, "one line:\n%s", r.out);
    cr_expect(strncmp(r.out, "memplan: no CUDA device (", 25) == 0, "%s", r.out);
    free(r.out);
    r = launch(0, 60, "run --model gpt2-tiny --steps 2 --device cuda --cupti");
    cr_expect_eq(r.status, 1, "%s", r.out);
    cr_expect_eq(lines(r.out), 1, "%s", r.out);
    cr_expect(strstr(r.out, "no CUDA device") != NULL, "%s", r.out);
    free(r.out);
}

Test(exec_gpu, validate_with_device_cuda_on_2_ranks_without_a_gpu_should_say_it_once, .timeout = 60)
{
    if (exec_device_cuda_available() > 0) cr_skip_test("skipped: a CUDA device is present");
    Run r = launch(2, 60, "validate --model gpt2-tiny --device cuda");
    cr_expect_neq(r.status, 0, "%s", r.out);
    cr_expect_neq(r.status, 124, "the job hung:\n%s", r.out);
    cr_expect_lt(r.status, 128, "crashed:\n%s", r.out);
    cr_expect_eq(test_count(r.out, "no CUDA device"), 1, "rank 0 alone says it:\n%s", r.out);
    cr_expect_eq(test_count(r.out, "memplan:"), 1, "%s", r.out);
    free(r.out);
}

Test(exec_gpu, device_and_cupti_flags_should_refuse_bad_values, .timeout = 60)
{
    Run r = launch(0, 60, "run --model gpt2-tiny --device gpu");
    cr_expect_eq(r.status, 2, "%s", r.out);
    cr_expect(strstr(r.out, "--device 'gpu' is not cpu or cuda") != NULL, "%s", r.out);
    free(r.out);
    r = launch(0, 60, "run --model gpt2-tiny --cupti");
    cr_expect_eq(r.status, 2, "%s", r.out);
    cr_expect(strstr(r.out, "--cupti traces the GPU: give --device cuda as well") != NULL, "%s", r.out);
    free(r.out);
    r = launch(0, 60, "run --help");
    cr_expect_eq(r.status, 0, "%s", r.out);
    cr_expect(strstr(r.out, "--device cpu|cuda") != NULL && strstr(r.out, "--cupti") != NULL, "%s", r.out);
    free(r.out);
}

Test(exec_gpu, device_cpu_should_be_the_default_engine_bit_for_bit, .timeout = 60)
{
    char dir[64], a[128], b[128];
    test_tmpdir(dir, sizeof dir, "memplan-gpu");
    snprintf(a, sizeof a, "%s/default.bin", dir);
    snprintf(b, sizeof b, "%s/cpu.bin", dir);
    Run r = launch(0, 60, "run --model gpt2-tiny --steps 2 --batch 2 --dump-params %s", a);
    cr_assert_eq(r.status, 0, "%s", r.out);
    free(r.out);
    r = launch(0, 60, "run --model gpt2-tiny --steps 2 --batch 2 --device cpu --dump-params %s", b);
    cr_assert_eq(r.status, 0, "%s", r.out);
    cr_expect(strstr(r.out, "fp32 on the CPU (BLAS)") != NULL, "%s", r.out);
    free(r.out);
    Gpt2Config cfg;
    gpt2_config_preset(&cfg, "gpt2-tiny");
    size_t n = (size_t)gpt2_cfg_num_params(&cfg);
    float *x = read_floats(a, n), *y = read_floats(b, n);
    cr_expect_arr_eq(x, y, n * sizeof *x);
    free(x);
    free(y);
    unlink(a);
    unlink(b);
    rmdir(dir);
}

Test(exec_gpu, exec_run_on_a_missing_gpu_should_return_an_error_not_crash)
{
    if (exec_device_cuda_available() > 0) cr_skip_test("skipped: a CUDA device is present");
    char err[128];
    Comm *c = comm_create(COMM_SELF, NULL, NULL, 10, err, sizeof err);
    cr_assert_not_null(c, "%s", err);
    ExecRunConfig cfg;
    exec_run_config_defaults(&cfg);
    gpt2_config_preset(&cfg.model, "gpt2-tiny");
    cfg.steps = 1;
    cfg.device = DEVICE_CUDA;
    cfg.cupti = 1;
    ExecRunResult r;
    cr_expect_eq(exec_run(c, &cfg, &r), EXEC_RUN_ERROR);
    cr_expect(strstr(r.message, "no CUDA device") || strstr(r.message, "built without CUDA"), "%s", r.message);
    cr_expect_eq(r.steps_done, 0);
    exec_run_result_free(&r);
    comm_destroy(c);
}

/* ---- on the GPU ---- */

/* Per unit of gpt2-tiny: the normwise relative difference of two dumps; the worst unit. */
static double worst_unit_diff(const char *ref_path, const char *path)
{
    Gpt2Config cfg;
    gpt2_config_preset(&cfg, "gpt2-tiny");
    size_t n = (size_t)gpt2_cfg_num_params(&cfg), off = 0;
    float *a = read_floats(path, n), *b = read_floats(ref_path, n);
    double worst = 0;
    for (int u = 0; u < gpt2_cfg_units(&cfg); u++) {
        size_t m = gpt2_cfg_unit_numel(&cfg, u);
        double d2 = 0, b2 = 0;
        for (size_t i = off; i < off + m; i++) {
            cr_assert(isfinite(a[i]), "%s: parameter %zu is not finite", path, i);
            double d = (double)a[i] - (double)b[i];
            d2 += d * d;
            b2 += (double)b[i] * (double)b[i];
        }
        if (sqrt(d2 / b2) > worst) worst = sqrt(d2 / b2);
        off += m;
    }
    free(a);
    free(b);
    return worst;
}

static void expect_same_losses(const char *ref_json, const char *json, const char *what)
{
    cJSON *a = test_read_json(ref_json), *b = test_read_json(json);
    cJSON *la = cJSON_GetObjectItem(a, "steps_log"), *lb = cJSON_GetObjectItem(b, "steps_log");
    cr_assert_eq(cJSON_GetArraySize(la), cJSON_GetArraySize(lb));
    for (int i = 0; i < cJSON_GetArraySize(la); i++) {
        double x = cJSON_GetObjectItem(cJSON_GetArrayItem(la, i), "loss")->valuedouble;
        double y = cJSON_GetObjectItem(cJSON_GetArrayItem(lb, i), "loss")->valuedouble;
        cr_expect_lt(fabs(y - x) / fabs(x), GPU_TOL, "%s: step %d loss %.8f on the GPU, %.8f on the CPU", what, i + 1, y, x);
    }
    cJSON_Delete(a);
    cJSON_Delete(b);
}

Test(exec_gpu, one_rank_on_the_gpu_should_train_as_the_cpu_within_1e_4, .timeout = 300)
{
    skip_without_gpu();
    char dir[64], ref[128], refj[128], path[128], pj[128];
    test_tmpdir(dir, sizeof dir, "memplan-gpu");
    snprintf(ref, sizeof ref, "%s/cpu.bin", dir);
    snprintf(refj, sizeof refj, "%s/cpu.json", dir);
    snprintf(path, sizeof path, "%s/gpu.bin", dir);
    snprintf(pj, sizeof pj, "%s/gpu.json", dir);
    const char *common = "run --model gpt2-tiny --steps 3 --batch 4 --lr 1e-4";
    Run r = launch(0, 120, "%s --dump-params %s --json=%s", common, ref, refj);
    cr_assert_eq(r.status, 0, "%s", r.out);
    free(r.out);
    r = launch(0, 120, "%s --device cuda --dump-params %s --json=%s", common, path, pj);
    cr_assert_eq(r.status, 0, "%s", r.out);
    cr_expect(strstr(r.out, "fp32 on the GPU") != NULL, "%s", r.out);
    free(r.out);
    double w = worst_unit_diff(ref, path);
    cr_expect_lt(w, GPU_TOL, "worst unit differs by %.3g (normwise relative)", w);
    cr_log_info("1 rank, GPU vs CPU: worst unit %.3g (normwise relative)", w);
    expect_same_losses(refj, pj, "1 rank");
    cJSON *j = test_read_json(pj);
    cr_expect_str_eq(cJSON_GetObjectItem(j, "device")->valuestring, "cuda");
    cJSON_Delete(j);
}

Test(exec_gpu, two_ranks_on_the_gpu_should_train_as_one_cpu_process_for_every_strategy, .timeout = 600)
{
    skip_without_gpu();
    char dir[64], ref[128], refj[128], path[128], pj[128];
    test_tmpdir(dir, sizeof dir, "memplan-gpu");
    snprintf(ref, sizeof ref, "%s/cpu.bin", dir);
    snprintf(refj, sizeof refj, "%s/cpu.json", dir);
    const char *common = "run --model gpt2-tiny --steps 3 --lr 1e-4";
    Run r = launch(0, 120, "%s --batch 8 --dump-params %s --json=%s", common, ref, refj);
    cr_assert_eq(r.status, 0, "%s", r.out);
    free(r.out);
    static const char *const S[] = {"ddp", "zero1", "zero2", "zero3"};
    for (int k = 0; k < 4; k++) {
        snprintf(path, sizeof path, "%s/%s.bin", dir, S[k]);
        snprintf(pj, sizeof pj, "%s/%s.json", dir, S[k]);
        r = launch(2, 240, "%s --strategy %s --batch 4 --device cuda --timeout 120 --dump-params %s --json=%s", common,
                   S[k], path, pj);
        skip_if_nccl_refused(&r);
        cr_assert_eq(r.status, 0, "%s on 2 ranks exited %d:\n%s", S[k], r.status, r.out);
        free(r.out);
        double w = worst_unit_diff(ref, path);
        cr_expect_lt(w, GPU_TOL, "%s: worst unit differs by %.3g (normwise relative)", S[k], w);
        cr_log_info("%s on 2 GPU ranks vs 1 CPU process: worst unit %.3g", S[k], w);
        expect_same_losses(refj, pj, S[k]);
        cJSON *j = test_read_json(pj);
        cr_expect_str_eq(cJSON_GetObjectItem(j, "comm")->valuestring, "nccl");
        cJSON_Delete(j);
    }
}

Test(exec_gpu, validate_on_the_gpu_should_pass_for_gpt2_tiny, .timeout = 600)
{
    skip_without_gpu();
    Run r = launch(2, 300, "validate --model gpt2-tiny --device cuda --strategy all --timeout 120");
    skip_if_nccl_refused(&r);
    cr_expect_eq(r.status, 0, "%s", r.out);
    cr_expect(strstr(r.out, "# validate: pass") != NULL, "%s", r.out);
    cr_expect_eq(test_count(r.out, "FAIL"), 0, "%s", r.out);
    free(r.out);
}

Test(exec_gpu, cupti_should_see_the_kernels_the_nccl_collectives_and_the_memory, .timeout = 600)
{
    skip_without_gpu();
    char dir[64], js[128], tr[128];
    test_tmpdir(dir, sizeof dir, "memplan-gpu");
    snprintf(js, sizeof js, "%s/run.json", dir);
    snprintf(tr, sizeof tr, "%s/trace.json", dir);
    Run r = launch(2, 300, "run --model gpt2-tiny --strategy ddp --steps 3 --batch 2 --device cuda --cupti --timeout 120 "
                           "--json=%s --trace %s", js, tr);
    skip_if_nccl_refused(&r);
    cr_assert_eq(r.status, 0, "%s", r.out);
    cr_expect(strstr(r.out, "# CUPTI, rank 0") != NULL, "%s", r.out);
    cr_expect(strstr(r.out, "# fixed GPU overheads") != NULL, "%s", r.out);
    free(r.out);
    cJSON *j = test_read_json(js);
    cJSON *cu = cJSON_GetObjectItem(j, "cupti");
    cr_assert_not_null(cJSON_GetObjectItem(cu, "phases"), "no CUPTI phases: %s", cJSON_PrintUnformatted(cu));
    int fwd = 0, bwd = 0, opt = 0;
    cJSON *ph;
    cJSON_ArrayForEach(ph, cJSON_GetObjectItem(cu, "phases")) {
        const char *name = cJSON_GetObjectItem(ph, "name")->valuestring;
        double kc = cJSON_GetObjectItem(cJSON_GetObjectItem(ph, "kernels"), "count")->valuedouble;
        if (strcmp(name, "forward") == 0) fwd = kc > 0;
        if (strcmp(name, "backward") == 0) bwd = kc > 0;
        if (strcmp(name, "optimizer") == 0) opt = kc > 0;
    }
    cr_expect(fwd && bwd && opt, "kernels in forward %d, backward %d, optimizer %d", fwd, bwd, opt);
    cJSON *by = cJSON_GetObjectItem(cJSON_GetObjectItem(cJSON_GetObjectItem(cu, "total"), "nccl"), "by_collective");
    cJSON *ar = cJSON_GetObjectItem(by, "all_reduce");
    cr_expect(ar && cJSON_GetObjectItem(ar, "count")->valuedouble >= 3, "one bucket all-reduce per step attributed: %s",
              cJSON_PrintUnformatted(by));
    cJSON *mc = cJSON_GetObjectItem(cu, "memory_check");
    cr_assert_not_null(mc);
    cr_expect_gt(cJSON_GetObjectItem(mc, "cupti_peak_bytes")->valuedouble, 0);
    cr_expect_gt(cJSON_GetObjectItem(mc, "tracked_peak_bytes")->valuedouble, 0);
    cJSON *ov = cJSON_GetObjectItem(cJSON_GetObjectItem(j, "overheads"), "measured");
    cr_assert(ov && !cJSON_IsNull(ov), "overheads not measured");
    cr_expect_gt(cJSON_GetObjectItem(ov, "cuda_context_bytes")->valuedouble, 0);
    cJSON_Delete(j);
    j = test_read_json(tr);
    int gpu_spans = 0;
    cJSON *e;
    cJSON_ArrayForEach(e, cJSON_GetObjectItem(j, "traceEvents")) {
        cJSON *cat = cJSON_GetObjectItem(e, "cat");
        if (cat && cJSON_IsString(cat) && strcmp(cat->valuestring, "gpu") == 0) gpu_spans++;
    }
    cr_expect_gt(gpu_spans, 0, "the trace has no GPU lanes");
    cJSON_Delete(j);
    unlink(js);
    unlink(tr);
    rmdir(dir);
}
