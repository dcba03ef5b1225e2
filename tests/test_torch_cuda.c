/* test_torch_cuda.c — the ground-truth harness's CUDA mode (bench/torch/harness.py --device cuda,
 * bench/torch/cuda_mode.py) as far as a machine without a GPU can check it: with --dry-cpu the
 * CUDA path runs on CPU tensors over gloo, every CUDA call skipped and named, and trains exactly
 * as the saved CPU rows of the same setup (the same model, batches, optimizer and wrapping); the
 * settings it cannot take are refused with a sentence; a GPU row is never compared as a CPU row
 * by bench/torch/check_saved.py. The venv comes from scripts/torch_env.sh (make test installs
 * it); on a GPU machine bench/gpu_check.sh runs the mode for real under the image's python3. */
#include <criterion/criterion.h>
#include <math.h>

#include "test_run.h"

static char g_root[PATH_MAX], g_memplan[PATH_MAX];

static void setup_paths(void)
{
    test_sibling_path(g_memplan, sizeof g_memplan, "../memplan");
    test_sibling_path(g_root, sizeof g_root, "../..");   /* <build>/tests/../.. */
}

TestSuite(torch_cuda, .init = setup_paths, .timeout = 600);

/* The venv's python, from scripts/torch_env.sh --print (the one place that knows it). */
static void venv_python(char *py, size_t len)
{
#if defined(__SANITIZE_ADDRESS__)
    cr_skip_test("skipped: sanitizer build (the harness is Python; nothing of ours to sanitize)");
#endif
    char cmd[PATH_MAX + 64];
    snprintf(cmd, sizeof cmd, "'%s/scripts/torch_env.sh' --print 2>/dev/null", g_root);
    Run r = test_run_cmd(cmd);
    cr_assert_eq(r.status, 0, "no PyTorch environment: run `make torch-env` (make test runs it)\n%s", r.out);
    r.out[strcspn(r.out, "\n")] = 0;
    cr_assert(access(r.out, X_OK) == 0, "scripts/torch_env.sh printed '%s', not a program", r.out);
    snprintf(py, len, "%s", r.out);
    free(r.out);
}

/* Runs the harness under torchrun on `ranks` CPU processes; returns the Run, JSON at jpath. */
static Run harness(const char *py, int ranks, const char *args, const char *jpath)
{
    char cmd[3 * PATH_MAX];
    snprintf(cmd, sizeof cmd,
             "cd /tmp && OMP_NUM_THREADS=1 timeout 300 '%s' -m torch.distributed.run --standalone --nproc-per-node %d "
             "'%s/bench/torch/harness.py' %s --json '%s' 2>&1",
             py, ranks, g_root, args, jpath);
    return test_run_cmd(cmd);
}

static double num(const cJSON *o, const char *k)
{
    const cJSON *x = cJSON_GetObjectItem(o, k);
    cr_assert(cJSON_IsNumber(x), "no number %s", k);
    return x->valuedouble;
}

/* The dry run's loss and rank 0's model states equal the saved CPU row's. */
static void trains_as_saved_row(const cJSON *j, const char *saved)
{
    char path[PATH_MAX + 64];
    snprintf(path, sizeof path, "%s/bench/torch/results/%s.json", g_root, saved);
    cJSON *s = test_read_json(path);
    const cJSON *la = cJSON_GetObjectItem(j, "loss"), *lb = cJSON_GetObjectItem(s, "loss");
    cr_assert_eq(cJSON_GetArraySize(la), cJSON_GetArraySize(lb));
    for (int i = 0; i < cJSON_GetArraySize(la); i++) {
        double a = cJSON_GetArrayItem(la, i)->valuedouble, b = cJSON_GetArrayItem(lb, i)->valuedouble;
        cr_expect(fabs(a - b) <= 1e-5 * fabs(b), "step %d loss %.6f, the saved CPU row %s has %.6f", i + 1, a, saved, b);
    }
    const cJSON *ma = cJSON_GetObjectItem(cJSON_GetArrayItem(cJSON_GetObjectItem(j, "per_rank"), 0), "model_states");
    const cJSON *mb = cJSON_GetObjectItem(cJSON_GetArrayItem(cJSON_GetObjectItem(s, "per_rank"), 0), "model_states");
    static const char *STATES[] = {"params", "grads", "optimizer"};
    for (int i = 0; i < 3; i++)
        cr_expect_eq(num(ma, STATES[i]), num(mb, STATES[i]), "%s bytes differ from %s", STATES[i], saved);
    cJSON_Delete(s);
}

/* What every dry result must say: a CUDA row, dry, its backend, the skipped calls, no CPU peak. */
static void is_dry_cuda_row(const cJSON *j, const char *out)
{
    cr_assert_str_eq(cJSON_GetObjectItem(j, "status")->valuestring, "ok", "%s", out);
    cr_expect_str_eq(cJSON_GetObjectItem(j, "device")->valuestring, "cuda");
    cr_expect(cJSON_IsTrue(cJSON_GetObjectItem(j, "dry_cpu")));
    cr_expect_str_eq(cJSON_GetObjectItem(cJSON_GetObjectItem(j, "backend"), "name")->valuestring, "gloo");
    const cJSON *sk = cJSON_GetObjectItem(j, "cuda_skipped");
    cr_expect_geq(cJSON_GetArraySize(sk), 5, "every CUDA measurement is named as skipped");
    const cJSON *v = cJSON_GetObjectItem(cJSON_GetObjectItem(j, "versions"), "torch");
    cr_expect(cJSON_IsString(v) && strncmp(v->valuestring, "2.", 2) == 0, "the torch version is in the result");
    const cJSON *r0 = cJSON_GetArrayItem(cJSON_GetObjectItem(j, "per_rank"), 0);
    cr_expect_null(cJSON_GetObjectItem(r0, "peak_bytes"), "a CUDA row must not carry the CPU rows' peak_bytes");
    cr_expect(cJSON_IsNull(cJSON_GetObjectItem(cJSON_GetObjectItem(r0, "cuda"), "max_memory_allocated")));
    cr_expect(strstr(out, "harness: --dry-cpu: the CUDA path on CPU tensors over gloo; skipped: torch.cuda.set_device"),
              "the skips are said on stderr:\n%s", out);
    cr_expect(strstr(out, "# cuda (dry-cpu): the CUDA path ran on CPU tensors"), "%s", out);
}

/* One dry run of gpt2-tiny (batch 1, 64 tokens) under `strategy` on `ranks` CPU processes: a dry
   CUDA row; with `saved`, it trains as that saved CPU row. */
static void dry_run(int ranks, const char *strategy, const char *saved)
{
    char py[PATH_MAX], dir[96], jpath[160], args[256];
    venv_python(py, sizeof py);
    test_tmpdir(dir, sizeof dir, "torchcuda");
    snprintf(jpath, sizeof jpath, "%s/r.json", dir);
    snprintf(args, sizeof args, "--device cuda --dry-cpu --model gpt2-tiny --strategy %s --batch 1 --seq 64", strategy);
    Run r = harness(py, ranks, args, jpath);
    cr_assert_eq(r.status, 0, "%s", r.out);
    cJSON *j = test_read_json(jpath);
    is_dry_cuda_row(j, r.out);
    cr_expect_str_eq(cJSON_GetObjectItem(cJSON_GetObjectItem(j, "setup"), "measure")->valuestring, "cuda");
    if (saved) trains_as_saved_row(j, saved);
    cJSON_Delete(j);
    free(r.out);
    snprintf(args, sizeof args, "rm -rf '%s'", dir);
    cr_expect_eq(system(args), 0);
}

Test(torch_cuda, the_cuda_mode_should_run_on_cpu_tensors_with_every_cuda_call_skipped_and_named)
{
    dry_run(1, "ddp", NULL);
}

Test(torch_cuda, two_dry_ddp_ranks_should_train_as_the_saved_cpu_row)
{
    dry_run(2, "ddp", "gpt2-tiny_ddp_fp32_none_eager_r2_b1_s64");
}

Test(torch_cuda, two_dry_fsdp_ranks_should_train_as_the_saved_cpu_row)
{
    dry_run(2, "fsdp-full", "gpt2-tiny_fsdp-full_fp32_none_eager_r2_b1_s64");
}

Test(torch_cuda, settings_the_cuda_mode_cannot_take_should_be_refused_with_a_sentence)
{
    /* refused while parsing, before torch is imported: any python3 will do */
    static const struct { const char *args, *says; } CASES[] = {
        {"--dry-cpu", "--dry-cpu: needs --device cuda"},
        {"--backend nccl", "--backend nccl: needs --device cuda"},
        {"--device cuda --measure profiler", "--measure profiler: valid values are cuda"},
        {"--device gpu", "--device gpu: valid values are cpu, cuda"},
    };
    for (size_t i = 0; i < sizeof CASES / sizeof CASES[0]; i++) {
        char cmd[PATH_MAX + 256];
        snprintf(cmd, sizeof cmd, "python3 '%s/bench/torch/harness.py' %s 2>&1", g_root, CASES[i].args);
        Run r = test_run_cmd(cmd);
        cr_expect_eq(r.status, 2, "%s: %s", CASES[i].args, r.out);
        cr_expect(strstr(r.out, CASES[i].says), "%s: expected '%s':\n%s", CASES[i].args, CASES[i].says, r.out);
        free(r.out);
    }
}

Test(torch_cuda, a_gpu_row_should_be_listed_apart_by_check_saved_and_never_compared)
{
    char dir[96], gpu[160], cmd[4 * PATH_MAX];
    test_tmpdir(dir, sizeof dir, "torchcuda");
    snprintf(gpu, sizeof gpu, "%s/gpt2-tiny_ddp_fp32_none_eager_r1_b1_s64_cuda.json", dir);
    FILE *f = fopen(gpu, "w");
    cr_assert_not_null(f);
    fputs("{\"harness\": \"memplan bench/torch/harness.py\", \"device\": \"cuda\", \"status\": \"ok\",\n"
          " \"setup\": {\"ranks\": 1, \"strategy\": \"ddp\", \"device\": \"cuda\"},\n"
          " \"per_rank\": [{\"rank\": 0, \"cuda\": {\"max_memory_allocated\": 123}}]}\n", f);
    fclose(f);
    snprintf(cmd, sizeof cmd,
             "python3 '%s/bench/torch/check_saved.py' --memplan '%s' '%s' '%s/bench/torch/results/gpt2-tiny_ddp_fp32_none_eager_r2_b1_s64.json' 2>&1",
             g_root, g_memplan, gpu, g_root);
    Run r = test_run_cmd(cmd);
    cr_expect_eq(r.status, 0, "%s", r.out);
    cr_expect(strstr(r.out, "1 of 1 rows pass"), "only the CPU row is compared:\n%s", r.out);
    cr_expect(strstr(r.out, "1 GPU rows not compared (device cuda: gpt2-tiny_ddp_fp32_none_eager_r1_b1_s64_cuda.json)"),
              "%s", r.out);
    free(r.out);
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    cr_expect_eq(system(cmd), 0);
}

/* bench/torch/gpu_alloc_check.py, what bench/gpu_check.sh runs after PyTorch's GPU rows, on a
   GPU row made from the saved CPU row gpt2-mini ddp (its recorded allocations standing in for
   the GPU's history, its replayed reserved as the measured figure): the replay of the row's own
   allocations equals it, and the plan of the same setup is shown beside it. */
Test(torch_cuda, the_gpu_reserved_check_should_compare_a_rows_reserved_with_its_replay_and_plan)
{
    char dir[96], row[160], cmd[4 * PATH_MAX];
    test_tmpdir(dir, sizeof dir, "torchcuda");
    snprintf(row, sizeof row, "%s/gpt2-mini_ddp_fp32_none_eager_r2_b1_s128_cuda.json", dir);
    snprintf(cmd, sizeof cmd, "zcat '%s/bench/torch/results/traces/gpt2-mini_ddp_fp32_none_eager_r2_b1_s128.txt.gz' "
             "> '%s/gpt2-mini_ddp_fp32_none_eager_r2_b1_s128_cuda.trace.txt'", g_root, dir);
    cr_assert_eq(system(cmd), 0);
    FILE *f = fopen(row, "w");
    cr_assert_not_null(f);
    fputs("{\"harness\": \"memplan bench/torch/harness.py\", \"device\": \"cuda\", \"status\": \"ok\",\n"
          " \"model\": {\"name\": \"gpt2-mini\", \"source\": \"gpt2-mini\"},\n"
          " \"setup\": {\"ranks\": 2, \"strategy\": \"ddp\", \"batch\": 1, \"seq\": 128, \"precision\": \"fp32\",\n"
          "           \"act_ckpt\": \"none\", \"attn\": \"eager\", \"dropout\": 0.0, \"device\": \"cuda\"},\n"
          " \"per_rank\": [{\"rank\": 0, \"cuda\": {\"max_memory_reserved\": 44040192, \"device_total_bytes\": 85899345920,\n"
          "                \"cublas\": {\"workspace_allocated_bytes\": 0}}}]}\n", f);
    fclose(f);
    snprintf(cmd, sizeof cmd, "python3 '%s/bench/torch/gpu_alloc_check.py' --memplan '%s' '%s' 2>&1", g_root, g_memplan, row);
    Run r = test_run_cmd(cmd);
    cr_expect_eq(r.status, 0, "%s", r.out);
    cr_expect(strstr(r.out, "| gpt2-mini_ddp_fp32_none_eager_r2_b1_s128_cuda | 42.00 | 42.00 | +0.00 | "), "%s", r.out);
    free(r.out);
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    cr_expect_eq(system(cmd), 0);
}
