/* test_run.h — what the tests that launch programs share (Criterion forks, so MPI programs run
 * in processes of their own): the path of a program beside the test binary, the mpirun
 * environment, running a command with its output captured, and small readers. Header-only. */
#ifndef TEST_RUN_H
#define TEST_RUN_H

#include <cjson/cJSON.h>
#include <criterion/criterion.h>
#include <libgen.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

typedef struct {
    int status;      /* exit status; 124 if `timeout` killed it, 128 + signal if killed */
    double seconds;  /* wall time */
    char *out;       /* stdout + stderr */
} Run;

static inline double test_now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

/* <build>/tests/<this test> -> <build>/tests/<rel>; asserts it is executable. */
static inline void test_sibling_path(char *buf, size_t len, const char *rel)
{
    char exe[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    cr_assert(n > 0);
    exe[n] = 0;
    snprintf(buf, len, "%s/%s", dirname(exe), rel);
    cr_assert(access(buf, X_OK) == 0, "missing %s (build it: make test-bin)", buf);
}

/* mpirun as root, and no BLAS threads on top of oversubscribed ranks. Sanitizer builds: OpenMPI
 * 4.1 leaks in its dlclosed components at exit (no frame of ours, nothing a suppression can
 * match), so leak detection is off for the launched processes only; ASan and UBSan stay on. */
static inline void test_mpi_env(void)
{
    setenv("OMPI_ALLOW_RUN_AS_ROOT", "1", 1);
    setenv("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1", 1);
    setenv("OPENBLAS_NUM_THREADS", "1", 1);
    const char *asan = getenv("ASAN_OPTIONS");
    if (!asan || !strstr(asan, "detect_leaks=0")) {
        char opts[1024];
        snprintf(opts, sizeof opts, "%s%sdetect_leaks=0", asan ? asan : "", asan && *asan ? ":" : "");
        setenv("ASAN_OPTIONS", opts, 1);
    }
}

/* Runs a shell command, capturing stdout and stderr (give "2>&1" in cmd). */
static inline Run test_run_cmd(const char *cmd)
{
    Run r = {0};
    size_t cap = 1 << 16, len = 0, got;
    r.out = malloc(cap);
    cr_assert_not_null(r.out);
    double t0 = test_now_s();
    FILE *p = popen(cmd, "r");
    cr_assert_not_null(p);
    while ((got = fread(r.out + len, 1, cap - len - 1, p)) > 0) {
        len += got;
        if (cap - len < 4096) {
            r.out = realloc(r.out, cap *= 2);
            cr_assert_not_null(r.out);
        }
    }
    r.out[len] = 0;
    int st = pclose(p);
    r.status = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
    r.seconds = test_now_s() - t0;
    return r;
}

/* `timeout T [mpirun -np np --oversubscribe] bin args 2>&1`; np 0: without mpirun. */
static inline Run test_launch(const char *bin, int np, int timeout_s, const char *args)
{
    char cmd[PATH_MAX + 4096];
    test_mpi_env();
    if (np > 0)
        snprintf(cmd, sizeof cmd, "timeout %d mpirun -np %d --oversubscribe %s %s 2>&1", timeout_s, np, bin, args);
    else
        snprintf(cmd, sizeof cmd, "timeout %d %s %s 2>&1", timeout_s, bin, args);
    return test_run_cmd(cmd);
}

/* Occurrences of needle in out. */
static inline int test_count(const char *out, const char *needle)
{
    int n = 0;
    for (const char *p = out; (p = strstr(p, needle)); p += strlen(needle)) n++;
    return n;
}

static inline void test_tmpdir(char *buf, size_t len, const char *prefix)
{
    snprintf(buf, len, "/tmp/%s-XXXXXX", prefix);
    cr_assert_not_null(mkdtemp(buf));
}

static inline cJSON *test_read_json(const char *path)
{
    FILE *f = fopen(path, "r");
    cr_assert_not_null(f, "no JSON file %s", path);
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *buf = malloc((size_t)n + 1);
    cr_assert_not_null(buf);
    size_t got = fread(buf, 1, (size_t)n, f);
    fclose(f);
    buf[got] = 0;
    cJSON *j = cJSON_Parse(buf);
    free(buf);
    cr_assert_not_null(j, "%s is not JSON", path);
    return j;
}

#endif
