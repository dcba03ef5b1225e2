/* bench_startup.c — how long a planning process takes, start to exit, against an empty C
 * program measured in the same run: `memplan --model gpt2-xl --gpus 8 --json`, many times
 * each, alternating, output to /dev/null; prints the medians (and the 10th/90th percentiles),
 * their ratio, and whether memplan's median is under the 10 ms target (exit 1 if not).
 *
 * Usage: bench_startup [REPS] [MEMPLAN] [EMPTY]   (defaults: 200, ../memplan and ./bench_empty
 * beside this program). Run it on a quiet machine: the figures are wall time. */
#include <fcntl.h>
#include <libgen.h>
#include <limits.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define TARGET_MS 10.0

extern char **environ;

static double now_ms(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e3 + t.tv_nsec * 1e-6;
}

/* Wall time of one run of argv with stdout and stderr on /dev/null; -1 if it failed. */
static double time_once(char *const argv[])
{
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
    posix_spawn_file_actions_addopen(&fa, 2, "/dev/null", O_WRONLY, 0);
    pid_t pid;
    double t0 = now_ms();
    int rc = posix_spawn(&pid, argv[0], &fa, NULL, argv, environ);
    posix_spawn_file_actions_destroy(&fa);
    if (rc != 0) return -1;
    int st;
    if (waitpid(pid, &st, 0) != pid) return -1;
    double t = now_ms() - t0;
    return WIFEXITED(st) && WEXITSTATUS(st) == 0 ? t : -1;
}

static int cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double pctl(const double *v, int n, double p) { return v[(int)(p * (n - 1) + 0.5)]; }

int main(int argc, char **argv)
{
    int reps = argc > 1 ? atoi(argv[1]) : 200;
    if (reps < 5 || reps > 100000) {
        fprintf(stderr, "bench_startup: REPS '%s' is not an integer in [5, 100000]\n", argv[1]);
        return 2;
    }
    char self[PATH_MAX], dir[PATH_MAX], memplan[PATH_MAX + 16], empty[PATH_MAX + 16];
    ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    if (n <= 0) return 2;
    self[n] = 0;
    snprintf(dir, sizeof dir, "%s", dirname(self));
    if (argc > 2) snprintf(memplan, sizeof memplan, "%s", argv[2]);
    else snprintf(memplan, sizeof memplan, "%s/../memplan", dir);
    if (argc > 3) snprintf(empty, sizeof empty, "%s", argv[3]);
    else snprintf(empty, sizeof empty, "%s/bench_empty", dir);
    char *plan_argv[] = {memplan, "--model", "gpt2-xl", "--gpus", "8", "--json", NULL};
    char *empty_argv[] = {empty, NULL};
    double *tp = calloc((size_t)reps, sizeof *tp), *te = calloc((size_t)reps, sizeof *te);
    if (!tp || !te) return 2;
    for (int i = 0; i < 5; i++) {   /* warm the page cache */
        if (time_once(plan_argv) < 0 || time_once(empty_argv) < 0) {
            fprintf(stderr, "bench_startup: cannot run '%s' or '%s' (build them: make bench)\n", memplan, empty);
            return 2;
        }
    }
    for (int i = 0; i < reps; i++) {   /* alternate, so both see the same machine */
        te[i] = time_once(empty_argv);
        tp[i] = time_once(plan_argv);
        if (tp[i] < 0 || te[i] < 0) {
            fprintf(stderr, "bench_startup: a run failed at repetition %d\n", i);
            return 2;
        }
    }
    qsort(tp, (size_t)reps, sizeof *tp, cmp);
    qsort(te, (size_t)reps, sizeof *te, cmp);
    double mp = pctl(tp, reps, 0.5), me = pctl(te, reps, 0.5);
    printf("# bench_startup: process wall time, start to exit, %d runs each (alternating), output to /dev/null\n", reps);
    printf("%-44s %10s %10s %10s\n", "program", "p10", "median", "p90");
    printf("%-44s %10s %10s %10s\n", "-", "ms", "ms", "ms");
    printf("%-44s %10.3f %10.3f %10.3f\n", "empty C program (bench_empty)", pctl(te, reps, 0.1), me, pctl(te, reps, 0.9));
    printf("%-44s %10.3f %10.3f %10.3f\n", "memplan --model gpt2-xl --gpus 8 --json", pctl(tp, reps, 0.1), mp, pctl(tp, reps, 0.9));
    printf("# ratio memplan / empty (medians): %.2f; memplan's own work over the empty process: %.3f ms\n", mp / me, mp - me);
    printf("# target: median under %.0f ms per planning process: %s\n", TARGET_MS, mp < TARGET_MS ? "met" : "MISSED");
    free(tp);
    free(te);
    return mp < TARGET_MS ? 0 : 1;
}
