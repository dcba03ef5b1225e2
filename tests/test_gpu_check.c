/* test_gpu_check.c — bench/gpu_check.sh on a machine without a usable GPU: its failure paths, by
 * faking their causes: a fake nvidia-smi on PATH (one that lists an H200, one that lists none),
 * CUDA hidden (CUDA_VISIBLE_DEVICES= : the tests behave the same on a GPU machine), a python3
 * without torch, no bundle, a fake make (no build: the real build/ is used, or the build of the
 * tests fails), and a fake build whose programs pass, fail or hang (a hang that leaves an orphan
 * behind); GPU_CHECK_MAX_STEP caps every step at 2 s, so each case takes seconds. Then the two
 * walks a lent machine needs: the dry walk (GPU_CHECK_DRY=1: every step in order with its
 * timeout, no device program run, three files in OUTDIR) and a real bundle that passes its probe
 * and replaces the build. The script's own output is in the assertion messages. */
#include <criterion/criterion.h>
#include <dirent.h>
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
    char dir[96], bin[128], out[128], build[512], bundle[160];
    const char *env;   /* more environment for the script */
} Case;

/* A temporary directory with bin/ (first on PATH) and out/; build = the real build/ by default;
   no bundle; the GPU python a stub without torch. */
static void case_new(Case *c)
{
    test_tmpdir(c->dir, sizeof c->dir, "memplan-gpucheck");
    snprintf(c->bin, sizeof c->bin, "%s/bin", c->dir);
    snprintf(c->out, sizeof c->out, "%s/out", c->dir);
    snprintf(c->bundle, sizeof c->bundle, "%s/no-bundle/gpu-bundle", c->dir);
    c->env = "";
    cr_assert_eq(mkdir(c->bin, 0755), 0);
    char memplan[480];
    test_sibling_path(memplan, sizeof memplan, "../memplan");
    snprintf(c->build, sizeof c->build, "%s", dirname(memplan));
    script(c->bin, "make", "echo \"fake make $*\"; exit 0");   /* the build is already there */
    script(c->bin, "gpu-python3",
           "echo 'python3: test stub'; echo 'torch: absent (test stub)'; echo 'torch_cuda: no (test stub: no torch)'");
}

static Run run_check(const Case *c)
{
    char root[512], cmd[2400];
    test_sibling_path(root, sizeof root, "../../bench/gpu_check.sh");
    snprintf(cmd, sizeof cmd,
             "cd / && PATH='%s':\"$PATH\" CUDA_VISIBLE_DEVICES= GPU_CHECK_DEV_GLOB=/nonexistent BUILD='%s' MAKE=make GPU_CHECK_MAX_STEP=2 "
             "GPU_CHECK_BUDGET=300 GPU_CHECK_BUNDLE='%s' GPU_CHECK_PYTHON='%s/gpu-python3' %s timeout 120 bash '%s' '%s' 2>&1",
             c->bin, c->build, c->bundle, c->bin, c->env, root, c->out);
    return test_run_cmd(cmd);
}

/* The summary's text, whole. */
static char *summary(const Case *c)
{
    char path[160];
    snprintf(path, sizeof path, "%s/summary.txt", c->out);
    FILE *f = fopen(path, "r");
    cr_assert_not_null(f, "no %s", path);
    static char text[65536];
    size_t n = fread(text, 1, sizeof text - 1, f);
    fclose(f);
    text[n] = 0;
    return text;
}

/* Its first line: the verdict. */
static char *summary_line1(const Case *c)
{
    static char line[8192];
    const char *s = summary(c);
    size_t n = strcspn(s, "\n");
    cr_assert(n < sizeof line);
    memcpy(line, s, n);
    line[n] = 0;
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
    cr_expect(strstr(r.out, "torch_mini_ddp_1r") && strstr(r.out, "skipped: python3's torch cannot use a GPU: test stub: no torch"),
              "PyTorch's GPU rows say why they did not run:\n%s", r.out);
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
    cr_expect(strstr(l1, "ran 3 step(s), 3 ok") != NULL, "only the image probe and the build's two steps run:\n%s", r.out);
    cr_expect(strstr(r.out, "bundle: skipped: no bundle travelled"), "%s", r.out);
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

/* Whether a file exists. */
static int exists(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0;
}

/* A fake program that leaves a mark when it runs: a dry walk must run none. */
static void marking_program(const char *dir, const char *name, const char *mark)
{
    char body[512];
    snprintf(body, sizeof body, "touch '%s'; exit 0", mark);
    script(dir, name, body);
}

/* The order a lent machine runs the steps in (docs/gpu.md), each with its timeout in seconds. */
static const struct { const char *name; int timeout; } ORDER[] = {
    {"image", 0}, {"bundle", 45}, {"torch_mini_ddp_1r", 40}, {"torch_gpt2_b8_1r", 60}, {"torch_mini_ddp_2r", 50},
    {"torch_mini_fsdp_2r", 50}, {"torch_gpt2_fsdp_2r", 0}, {"build", 0}, {"build_tests", 0}, {"torch_reserved", 30},
    {"smoke", 45},
    {"overheads_1rank", 45}, {"run_gpt2_cupti", 90}, {"fake_hosts_probe", 60}, {"validate_gpt2", 120},
    {"test_kern_cuda", 60}, {"test_kern_cnn_cuda", 60}, {"test_prof_cupti", 45}, {"test_prof_overhead", 45},
    {"test_exec_device", 30}, {"test_exec_comm_nccl", 60}, {"cnn_1rank", 100}, {"cnn_check_1rank", 60},
    {"cnn_2ranks", 120}, {"cnn_check_2ranks", 60}, {"overheads_2ranks", 60}, {"test_exec_gpu", 180},
    {"nccl_sweep", 90}, {"validate_gpt2-medium", 120},
};

Test(gpu_check, a_dry_walk_should_show_every_step_in_order_with_its_timeout_and_run_no_device_program, .timeout = 150)
{
    Case c;
    case_new(&c);
    char mark[160], d[600], env[700];
    snprintf(mark, sizeof mark, "%s/a-device-program-ran", c.dir);
    marking_program(c.bin, "nvidia-smi", mark);        /* the script's own stubs come first */
    marking_program(c.bin, "gpu-python3", mark);
    /* a bundle that travelled: its programs leave the mark if anything runs them */
    snprintf(c.bundle, sizeof c.bundle, "%s/b/gpu-bundle", c.dir);
    snprintf(d, sizeof d, "mkdir -p '%s/bin/bench' '%s/bin/tests/mpi' && echo 'cuda_needed: libcudart.so.13' > '%s/MANIFEST'",
             c.bundle, c.bundle, c.bundle);
    cr_assert_eq(system(d), 0);
    static const char *PROGS[] = {"memplan", "bench/gpu_overheads", "bench/cnn_device", "bench/bench_nccl",
                                  "tests/test_kern_cuda", "tests/test_exec_gpu", "tests/mpi/comm_check", "bundle-env"};
    for (size_t i = 0; i < sizeof PROGS / sizeof PROGS[0]; i++) {
        snprintf(d, sizeof d, "%s/%s%s", c.bundle, i + 1 < sizeof PROGS / sizeof PROGS[0] ? "bin/" : "", PROGS[i]);
        char *slash = strrchr(d, '/');
        *slash = 0;
        marking_program(d, slash + 1, mark);
    }
    snprintf(env, sizeof env, "GPU_CHECK_DRY=1 GPU_CHECK_WORK='%s/work'", c.dir);
    c.env = env;
    Run r = run_check(&c);
    cr_expect_eq(r.status, 0, "%s", r.out);
    cr_expect(strncmp(summary_line1(&c), "# gpu_check DRY: walked ", 24) == 0, "%s", summary_line1(&c));
    cr_expect_not(exists(mark), "a device program ran in a dry walk:\n%s", r.out);
    const char *s = summary(&c);
    cr_expect(strstr(s, "\n# image: glibc: "), "the image's facts are in the summary:\n%s", s);
    const char *at = s;
    for (size_t i = 0; i < sizeof ORDER / sizeof ORDER[0]; i++) {
        char row[96];
        snprintf(row, sizeof row, "\n%-22s ", ORDER[i].name);
        const char *p = strstr(at, row);
        cr_expect(p != NULL, "%s is not where the order puts it:\n%s", ORDER[i].name, s);
        if (!p) continue;
        at = p + 1;
        if (ORDER[i].timeout > 0) {
            snprintf(row, sizeof row, "\n%-22s %-8s %5d  worst-case start ", ORDER[i].name, "dry", ORDER[i].timeout);
            cr_expect(strncmp(p, row, strlen(row)) == 0, "%s walked with its timeout %d s:\n%s", ORDER[i].name,
                      ORDER[i].timeout, s);
        }
    }
    cr_expect(strstr(s, "\nbuild                  skipped      0  the bundle travelled and passed its probe"), "%s", s);
    /* three files come back from the device tool; the loose ones stayed in GPU_CHECK_WORK */
    static const char *BACK[] = {"summary.txt", "image.txt", "results.tar.gz"};
    int n = 0;
    DIR *od = opendir(c.out);
    cr_assert_not_null(od);
    for (struct dirent *e; (e = readdir(od));) {
        if (e->d_name[0] == '.') continue;
        n++;
        int known = 0;
        for (size_t i = 0; i < 3; i++) known |= strcmp(e->d_name, BACK[i]) == 0;
        cr_expect(known, "%s in OUTDIR", e->d_name);
    }
    closedir(od);
    cr_expect_eq(n, 3, "OUTDIR holds %d entries", n);
    snprintf(d, sizeof d, "tar -tzf '%s/results.tar.gz'", c.out);
    Run t = test_run_cmd(d);
    cr_expect(strstr(t.out, "logs/") && strstr(t.out, "_torch_mini_ddp_1r.log"), "the logs are packed:\n%s", t.out);
    free(t.out);
    free(r.out);
    case_free(&c);
}

Test(gpu_check, a_dry_walk_without_a_bundle_should_walk_the_build_on_the_device, .timeout = 150)
{
    Case c;
    case_new(&c);
    c.env = "GPU_CHECK_DRY=1";
    Run r = run_check(&c);
    cr_expect_eq(r.status, 0, "%s", r.out);
    const char *s = summary(&c);
    cr_expect(strstr(s, "\nbundle                 skipped      0  no bundle travelled"), "%s", s);
    cr_expect(strstr(s, "\nbuild                  dry        120  worst-case start "), "%s", s);
    cr_expect(strstr(s, "\nbuild_tests            dry         90  worst-case start "), "%s", s);
    free(r.out);
    case_free(&c);
}

Test(gpu_check, a_bundle_that_passes_its_probe_should_replace_the_build_and_run_the_engine, .timeout = 300)
{
#if !MEMPLAN_CUDA || defined(__SANITIZE_ADDRESS__)
    cr_skip_test("skipped: the bundle is packed from the plain CUDA build (make gpu-bundle; test_gpu_bundle)");
#endif
    if (system("command -v ompi_info xz >/dev/null 2>&1") != 0)
        cr_skip_test("skipped: ompi_info or xz not found: the bundle cannot be packed on this machine");
    Case c;
    case_new(&c);
    script(c.bin, "nvidia-smi", "echo 'No devices were found'; exit 6");
    /* what travels is the archive alone: the check unpacks it */
    char pack[PATH_MAX], build[PATH_MAX], cmd[3 * PATH_MAX];
    test_sibling_path(pack, sizeof pack, "../../scripts/gpu_bundle.sh");
    test_sibling_path(build, sizeof build, "..");
    snprintf(c.bundle, sizeof c.bundle, "%s/b/gpu-bundle", c.dir);
    snprintf(cmd, sizeof cmd, "GPU_BUNDLE_XZ_LEVEL=0 '%s' pack '%s' '%s' 2>&1 && rm -rf '%s'", pack, build, c.bundle, c.bundle);
    Run p = test_run_cmd(cmd);
    cr_assert_eq(p.status, 0, "%s", p.out);
    free(p.out);
    unsetenv("BXFI_MAP");   /* Criterion's worker marks, inherited, would abort the bundle's tests */
    unsetenv("IS_SANDBOX");
    c.env = "GPU_CHECK_MAX_STEP=60";   /* the probe runs every program and 2 MPI ranks */
    Run r = run_check(&c);
    cr_expect_eq(r.status, 0, "no GPU: every GPU step skipped, the check passes:\n%s", r.out);
    const char *s = summary(&c);
    cr_expect(strstr(s, "\nbundle                 ok "), "the bundle passed its probe:\n%s\n%s", s, r.out);
    cr_expect(strstr(s, "\nbuild                  skipped      0  the bundle travelled and passed its probe"), "%s", s);
    cr_expect(strstr(s, "no GPU: no CUDA device ("), "the bundle's memplan said so:\n%s", s);
    char smoke[400];
    snprintf(smoke, sizeof smoke, "smoke (timeout 45 s): %s/bundle-env %s/bin/memplan run", c.bundle, c.bundle);
    cr_expect(strstr(r.out, smoke), "the engine runs through the bundle (%s):\n%s", smoke, r.out);
    free(r.out);
    case_free(&c);
}
