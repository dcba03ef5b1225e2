/* test_torch.c — a few rows of the calibration matrix against real PyTorch / DeepSpeed: memplan
 * validate --against torch launches bench/torch/harness.py under torchrun on 2 CPU ranks (gloo)
 * and must pass (parameters, model states and collective payloads exact, peak within 3 % and in
 * the same phase). The environment comes from `make torch-env` (make test installs it); without
 * it these tests FAIL with the command that installs it, they never pass silently. The full
 * matrix is bench/torch/run_matrix.sh (docs/validation-torch.md). */
#include <criterion/criterion.h>

#include "test_run.h"

static char g_memplan[PATH_MAX];

static void setup_paths(void)
{
    test_sibling_path(g_memplan, sizeof g_memplan, "../memplan");
}

/* The venv's python, as memplan resolves it; fails the test with the install command if absent. */
static void require_env(void)
{
    char py[PATH_MAX];
    const char *e = getenv("MEMPLAN_TORCH_ENV"), *x = getenv("XDG_CACHE_HOME"), *h = getenv("HOME");
    if (e && *e) snprintf(py, sizeof py, "%s/bin/python", e);
    else if (x && *x) snprintf(py, sizeof py, "%s/memplan/torch-venv/bin/python", x);
    else snprintf(py, sizeof py, "%s/.cache/memplan/torch-venv/bin/python", h && *h ? h : "/root");
    cr_assert(access(py, X_OK) == 0, "no PyTorch environment (%s missing): run `make torch-env` (make test runs it)", py);
}

/* One row: validate --against torch with the given flags must pass; the JSON says so too. */
static void row_passes(const char *flags)
{
#if defined(__SANITIZE_ADDRESS__)
    cr_skip_test("skipped: sanitizer build (the harness is Python; memplan's side of it runs in test_cli_torch)");
#endif
    require_env();
    char dir[256], jpath[300], args[2048];
    test_tmpdir(dir, sizeof dir, "torch");
    snprintf(jpath, sizeof jpath, "%s/v.json", dir);
    snprintf(args, sizeof args, "validate --against torch --ranks 2 --timeout 600 %s --json=%s", flags, jpath);
    Run r = test_launch(g_memplan, 0, 900, args);
    cr_assert_eq(r.status, 0, "memplan %s\n%s", args, r.out);
    cJSON *j = test_read_json(jpath);
    cr_assert(cJSON_IsTrue(cJSON_GetObjectItem(j, "pass")), "%s", r.out);
    cr_assert(strstr(r.out, "torch 2.15"), "the harness must report torch 2.15:\n%s", r.out);
    cJSON_Delete(j);
    free(r.out);
}

TestSuite(torch, .init = setup_paths, .timeout = 1000);

Test(torch, ddp_on_gpt2_tiny_should_match_pytorch_ddp)
{
    row_passes("--model gpt2-tiny --strategy ddp --batch 2 --seq 64 --precision fp32 --attn eager --dropout 0");
}

Test(torch, zero2_on_gpt2_tiny_should_match_deepspeed)
{
    row_passes("--model gpt2-tiny --strategy zero2 --batch 2 --seq 64 --precision fp32 --attn eager --dropout 0");
}

Test(torch, zero3_on_gpt2_tiny_should_match_deepspeed)
{
    row_passes("--model gpt2-tiny --strategy zero3 --batch 2 --seq 64 --precision fp32 --attn eager --dropout 0");
}
