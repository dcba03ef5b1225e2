/* bench_planner.c — planner speed against its limits, measured in the same run:
 *   planning every strategy for one setup (memory, largest micro-batch, collectives, simulated
 *   step) must take under 1 ms; an auto search over at least 10,000 candidate setups under
 *   100 ms — with the flat allocator margin (ClusterSpec's default). With the allocator model
 *   (the CLI's default: the step replayed through plan_alloc) the limits are 5 ms and 300 ms
 *   (the CLI's promise of an answer in milliseconds), and issue 33's: the allocator model's plan
 *   within 2x the flat margin's (the ratio printed per model). Times are the process's CPU time;
 *   each allocator-model repetition starts without the planner's remembered replays. Prints a
 *   table (lines not data start with '#') and, with --json FILE, the same records.
 *   Usage: build/bench/bench_planner [--json FILE] */
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "plan_auto.h"
#include "plan_plan.h"
#include "plan_step_alloc.h"
#include "plan_zoo.h"

/* The process's CPU time: steadier than the wall on a machine other jobs share (the planner runs
   on one thread). */
static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

typedef struct {
    const char *what;
    const char *model;
    const char *margin;      /* "flat" or "allocator" */
    double ms, limit_ms;
    long candidates, simulated;
} Row;

int main(int argc, char **argv) {
    const char *json = argc == 3 && strcmp(argv[1], "--json") == 0 ? argv[2] : NULL;
    if (argc > 1 && !json) { fprintf(stderr, "usage: bench_planner [--json FILE]\n"); return 2; }
    Row rows[16];
    int n = 0;
    const char *models[] = {"gpt2-xl", "llama2-70b", "resnet50"};
    char msg[256];
    for (int mi = 0; mi < 6; mi++) {
        int alloc = mi >= 3;      /* the allocator model: the CLI's default */
        ModelSpec m;
        if (plan_zoo_build(&m, models[mi % 3], msg, sizeof(msg))) { fprintf(stderr, "%s\n", msg); return 1; }
        TrainSpec t;
        plan_train_defaults(&t);
        ClusterSpec c;
        plan_cluster_defaults(&c);
        c.gpus = 8;
        c.gpus_per_node = 8;
        c.alloc_model = alloc;
        Plan p;
        int reps = alloc ? 3 : 200;
        double best = 1e9;
        for (int r = 0; r < 5; r++) {        /* best of 5 batches: the machine is shared */
            double t0 = now();
            for (int i = 0; i < reps; i++) {
                plan_step_alloc_forget();   /* each plan replays from nothing, as a process does */
                plan_run(&m, &t, &c, (1u << STRAT_COUNT) - 1, &p);
            }
            double dt = (now() - t0) / reps;
            if (dt < best) best = dt;
        }
        rows[n++] = (Row){"plan all 7 strategies", models[mi % 3], alloc ? "allocator" : "flat", best * 1e3,
                          alloc ? 5.0 : 1.0, 7, 7};
        plan_model_free(&m);
    }
    /* auto: gpt2 on H200s, where most of the 14,336 candidates fit and are simulated */
    const char *auto_models[] = {"gpt2", "gpt2-xl", "resnet50"};
    for (int mi = 0; mi < 6; mi++) {
        int alloc = mi >= 3;
        ModelSpec m;
        plan_zoo_build(&m, auto_models[mi % 3], msg, sizeof(msg));
        TrainSpec t;
        plan_train_defaults(&t);
        ClusterSpec c;
        plan_cluster_defaults(&c);
        c.gpu = *plan_gpu_by_name("h200");
        c.gpus = 8;
        c.gpus_per_node = 8;
        c.alloc_model = alloc;
        AutoSpec a;
        plan_auto_defaults(&a);
        AutoResult r;
        double best = 1e9;
        for (int k = 0; k < 5; k++) {
            plan_step_alloc_forget();
            double t0 = now();
            plan_auto(&m, &t, &c, &a, &r);
            double dt = now() - t0;
            if (dt < best) best = dt;
        }
        rows[n++] = (Row){"auto search", auto_models[mi % 3], alloc ? "allocator" : "flat", best * 1e3,
                          alloc ? 300.0 : 100.0, r.candidates, r.evaluated};
        plan_model_free(&m);
    }
    printf("# planner speed on this machine (CPU time, best of 5; limits from issue 3, the allocator's from its own;\n"
           "# each allocator-model plan or search replays from nothing: plan_step_alloc_forget)\n");
    printf("%-22s %-11s %-9s %10s %9s %8s %11s %10s\n", "benchmark", "model", "margin", "time", "limit", "ratio",
           "candidates", "simulated");
    printf("%-22s %-11s %-9s %10s %9s %8s %11s %10s\n", "-", "-", "-", "ms", "ms", "t/limit", "count", "count");
    int ok = 1;
    for (int i = 0; i < n; i++) {
        printf("%-22s %-11s %-9s %10.4f %9.1f %8.3f %11ld %10ld\n", rows[i].what, rows[i].model, rows[i].margin, rows[i].ms,
               rows[i].limit_ms, rows[i].ms / rows[i].limit_ms, rows[i].candidates, rows[i].simulated);
        if (rows[i].ms > rows[i].limit_ms) ok = 0;
    }
    /* issue 33's target: a plan with the allocator model within 2x the flat margin's */
    printf("%-34s %10s %9s\n", "plan all 7: allocator / flat", "ratio", "limit");
    for (int i = 0; i < 3; i++) {
        double q = rows[i + 3].ms / rows[i].ms;
        printf("%-34s %10.2f %9.2f %s\n", rows[i].model, q, 2.0, q <= 2.0 ? "met" : "MISSED");
        if (q > 2.0) ok = 0;
    }
    printf("# %s\n", ok ? "all within their limits" : "SOME ABOVE THEIR LIMITS");
    if (json) {
        FILE *f = fopen(json, "w");
        if (!f) { fprintf(stderr, "cannot write %s\n", json); return 1; }
        fprintf(f, "[\n");
        for (int i = 0; i < n; i++)
            fprintf(f, "  {\"benchmark\": \"%s\", \"model\": \"%s\", \"margin\": \"%s\", \"ms\": %.6f, \"limit_ms\": %.1f, "
                    "\"candidates\": %ld, \"simulated\": %ld}%s\n", rows[i].what, rows[i].model, rows[i].margin, rows[i].ms,
                    rows[i].limit_ms, rows[i].candidates, rows[i].simulated, i + 1 < n ? "," : "");
        fprintf(f, "]\n");
        fclose(f);
    }
    return ok ? 0 : 1;
}
