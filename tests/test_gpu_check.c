/* test_gpu_check.c — bench/gpu_check.sh's failure paths on a machine without a usable GPU, by
 * faking their causes: a fake nvidia-smi on PATH (one that lists an H200, one that lists none),
 * CUDA hidden (CUDA_VISIBLE_DEVICES= : the tests behave the same on a GPU machine), a fake make
 * (no build: the real build/ is used, or the build of the tests fails), and a fake build whose
 * programs pass, fail or hang (a hang that leaves an orphan behind). GPU_CHECK_MAX_STEP caps
 * every step at 2 s, so each case takes seconds. The script's own output is in the assertion
 * messages. */
#include <criterion/criterion.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "test_run.h"

/* Writes an executable shell script. */
static void script(const char *dir, const char *name, const char *body)
{
    char path[700];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "w");
    cr_assert_not_null(f, "cannot write %s", path);
    fprintf(f, "#!/bin/sh\n%s\n", body);
    fclose(f);
    cr_assert_eq(chmod(path, 0755), 0);
}

/* nvidia-smi listing one H200 whose driver speaks CUDA 13.0, in the Default compute mode. */
static const char *SMI_H200 =
    "case \"$*\" in\n"
    "  -L) echo 'GPU 0: NVIDIA H200 (UUID: GPU-00000000-0000-0000-0000-000000000000)' ;;\n"
    "  *compute-apps*) ;;\n"
    "  *driver_version*) echo '580.65.06' ;;\n"
    "  *compute_mode*) echo 'Default' ;;\n"
    "  *name,memory*) echo 'NVIDIA H200, 143771 MiB' ;;\n"
    "  --query-gpu*) echo 'index, name'; echo '0, NVIDIA H200' ;;\n"
    "  '') echo '| NVIDIA-SMI 580.65.06   Driver Version: 580.65.06   CUDA Version: 13.0 |' ;;\n"
    "esac\nexit 0";

typedef struct {
    char dir[96], bin[128], out[128], build[512];
} Case;

/* A temporary directory with bin/ (first on PATH) and out/; build = the real build/ by default. */
static void case_new(Case *c)
{
    test_tmpdir(c->dir, sizeof c->dir, "memplan-gpucheck");
    snprintf(c->bin, sizeof c->bin, "%s/bin", c->dir);
    snprintf(c->out, sizeof c->out, "%s/out", c->dir);
    cr_assert_eq(mkdir(c->bin, 0755), 0);
    char memplan[480];
    test_sibling_path(memplan, sizeof memplan, "../memplan");
    snprintf(c->build, sizeof c->build, "%s", dirname(memplan));
    script(c->bin, "make", "echo \"fake make $*\"; exit 0");   /* the build is already there */
}

static Run run_check(const Case *c)
{
    char root[512], cmd[2048];
    test_sibling_path(root, sizeof root, "../../bench/gpu_check.sh");
    snprintf(cmd, sizeof cmd,
             "cd / && PATH='%s':\"$PATH\" CUDA_VISIBLE_DEVICES= GPU_CHECK_DEV_GLOB=/nonexistent BUILD='%s' MAKE=make GPU_CHECK_MAX_STEP=2 "
             "GPU_CHECK_BUDGET=300 timeout 120 bash '%s' '%s' 2>&1",
             c->bin, c->build, root, c->out);
    return test_run_cmd(cmd);
}

static char *summary_line1(const Case *c)
{
    char path[160];
    snprintf(path, sizeof path, "%s/summary.txt", c->out);
    FILE *f = fopen(path, "r");
    cr_assert_not_null(f, "no %s", path);
    static char line[8192];
    cr_assert_not_null(fgets(line, sizeof line, f));
    fclose(f);
    return line;
}

/* Running: exists and is no zombie (a killed orphan waits as one for a subreaper to reap it). */
static int alive(int pid)
{
    char path[64], st[256];
    snprintf(path, sizeof path, "/proc/%d/stat", pid);
    FILE *f = fopen(path, "r");
    if (!f) return 0;
    size_t n = fread(st, 1, sizeof st - 1, f);
    fclose(f);
    st[n] = 0;
    const char *paren = strrchr(st, ')');
    return paren && paren[1] == ' ' && paren[2] != 'Z' && paren[2] != 'X';
}

static void case_free(Case *c)
{
    char cmd[256];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", c->dir);
    cr_expect_eq(system(cmd), 0);
}

Test(gpu_check, a_gpu_that_nvidia_smi_lists_but_cuda_cannot_use_should_fail_loudly_with_both_facts, .timeout = 150)
{
    Case c;
    case_new(&c);
    script(c.bin, "nvidia-smi", SMI_H200);
    Run r = run_check(&c);
    char *l1 = summary_line1(&c);
    cr_expect_eq(r.status, 1, "must not exit 0:\n%s", r.out);
    cr_expect(strncmp(l1, "# gpu_check FAIL", 16) == 0, "%s", l1);
    cr_expect(strstr(l1, "GPU PRESENT BUT UNUSABLE") != NULL, "%s", l1);
    cr_expect(strstr(l1, "nvidia-smi lists 1 GPU(s) (NVIDIA H200, 143771 MiB)") != NULL, "%s", l1);
    cr_expect(strstr(l1, "CUDA reports: no CUDA device (") != NULL, "%s", l1);
    cr_expect(strstr(l1, "driver 580.65.06 (CUDA 13.0), compute mode Default") != NULL, "%s", l1);
    cr_expect(strstr(r.out, "test_kern_cuda") && strstr(r.out, "skipped: the GPU is unusable"), "%s", r.out);
    cr_expect(strstr(r.out, "torch_1rank") != NULL, "the reserved place of the torch row is in the order:\n%s", r.out);
    free(r.out);
    case_free(&c);
}

Test(gpu_check, no_gpu_at_all_should_skip_every_gpu_step_and_pass, .timeout = 150)
{
    Case c;
    case_new(&c);
    script(c.bin, "nvidia-smi", "echo 'No devices were found'; exit 6");
    Run r = run_check(&c);
    char *l1 = summary_line1(&c);
    cr_expect_eq(r.status, 0, "%s", r.out);
    cr_expect(strncmp(l1, "# gpu_check PASS", 16) == 0, "%s", l1);
    cr_expect(strstr(l1, "failed: none") != NULL, "%s", l1);
    cr_expect(strstr(l1, "no GPU: no CUDA device (") != NULL, "%s", l1);
    cr_expect(strstr(l1, "ran 2 step(s), 2 ok") != NULL, "only the build's two steps run:\n%s", r.out);
    cr_expect_geq(test_count(r.out, ": skipped: no CUDA device ("), 15, "every GPU step says why:\n%s", r.out);
    free(r.out);
    case_free(&c);
}

Test(gpu_check, a_failing_test_build_a_failing_test_and_a_hanging_step_should_cost_only_themselves, .timeout = 150)
{
    Case c;
    case_new(&c);
    script(c.bin, "nvidia-smi", SMI_H200);
    /* a fake build: the programs "work", one hangs and leaves an orphan; the tests' build fails
       after building one test binary, which fails */
    snprintf(c.build, sizeof c.build, "%s/build", c.dir);
    char d[600];
    cr_assert_eq(mkdir(c.build, 0755), 0);
    snprintf(d, sizeof d, "%s/bench", c.build);
    cr_assert_eq(mkdir(d, 0755), 0);
    char body[2600];
    snprintf(body, sizeof body,
             "case \"$*\" in *test-bin*) mkdir -p '%s/tests'; printf '#!/bin/sh\\necho \"[FAIL] kern_cuda::x: wrong\"; exit 1\\n' "
             "> '%s/tests/test_kern_cuda'; chmod +x '%s/tests/test_kern_cuda'; echo 'error: a test did not compile'; exit 2 ;; esac; exit 0",
             c.build, c.build, c.build);
    script(c.bin, "make", body);
    script(c.build, "memplan", "echo \"fake memplan $*\"; exit 0");
    snprintf(body, sizeof body, "sleep 300 & echo $! > '%s/orphan.pid'; sleep 300", c.dir);
    script(d, "gpu_overheads", body);
    script(d, "cnn_device", "echo '       8      10.00      9.00       800.0         0.00      100.0     6.9000  -'; exit 0");
    script(d, "bench_nccl", "echo '# peak busbw: all_reduce 1.000 GB/s'; exit 0");
    Run r = run_check(&c);
    char *l1 = summary_line1(&c);
    cr_expect_eq(r.status, 1, "%s", r.out);
    cr_expect(strncmp(l1, "# gpu_check FAIL", 16) == 0, "%s", l1);
    cr_expect(strstr(l1, "build_tests FAIL") != NULL, "%s", l1);
    cr_expect(strstr(l1, "overheads_1rank timeout: killed after 2 s; ended ") != NULL, "%s", l1);
    cr_expect(strstr(l1, "test_kern_cuda FAIL") != NULL, "%s", l1);
    cr_expect(strstr(r.out, "test_prof_cupti        skipped") && strstr(r.out, "not built (build_tests failed"), "%s", r.out);
    /* the steps after the hang ran */
    cr_expect(strstr(r.out, "run_gpt2_cupti         ok") != NULL, "%s", r.out);
    cr_expect(strstr(r.out, "cnn_1rank              ok") != NULL, "%s", r.out);
    cr_expect(strstr(r.out, "nccl_sweep             ok") != NULL, "%s", r.out);
    /* the orphan is gone */
    char pidfile[160];
    snprintf(pidfile, sizeof pidfile, "%s/orphan.pid", c.dir);
    FILE *f = fopen(pidfile, "r");
    cr_assert_not_null(f, "the hanging step never started:\n%s", r.out);
    int pid = 0;
    cr_assert_eq(fscanf(f, "%d", &pid), 1);
    fclose(f);
    cr_expect(pid > 0 && !alive(pid), "the orphan %d of the hanging step is still alive", pid);
    free(r.out);
    case_free(&c);
}
