/* test_cli_bench.c — `memplan bench syncbn` end to end on the tiny CNN (one measured step, so it
 * stays quick on 2 cores): the table, the JSON records, the plot files, the extra collectives
 * against plan_comm's SyncBN formula, and the usage errors. Launched with `timeout 60 mpirun`
 * like tests/test_exec_run.c. */
#include <cjson/cJSON.h>
#include <criterion/criterion.h>
#include <libgen.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "test_plan.h"
#include "test_run.h"

/* `timeout 60 [mpirun -np np --oversubscribe] memplan args` (np 0: without mpirun) */
static Run launch(int np, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static Run launch(int np, const char *fmt, ...)
{
    char bin[PATH_MAX], args[1024];
    test_sibling_path(bin, sizeof bin, "../memplan");
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(args, sizeof args, fmt, ap);
    va_end(ap);
    return test_launch(bin, np, 60, args);
}

static double num(const cJSON *o, const char *key)
{
    const cJSON *v = cJSON_GetObjectItem(o, key);
    cr_assert(cJSON_IsNumber(v), "no number '%s'", key);
    return v->valuedouble;
}

Test(cli_bench, syncbn_should_print_the_table_and_write_json_and_plot_data, .timeout = 120)
{
    char dir[] = "/tmp/memplan-bench-XXXXXX", json[96], plot[96], dat[128];
    cr_assert_not_null(mkdtemp(dir));
    snprintf(json, sizeof json, "%s/b.json", dir);
    snprintf(plot, sizeof plot, "%s/b.png", dir);
    Run r = launch(4, "bench syncbn --model resnet-tiny --batches 4,2 --ranks 2,4 --steps 1 --warmup 0 --json=%s --plot %s",
                   json, plot);
    cr_assert_eq(r.status, 0, "%s", r.out);
    cr_expect(strstr(r.out, "ranks   batch   bn_fwd") != NULL, "no header:\n%s", r.out);
    cr_expect(strstr(r.out, "    - per_gpu       ms") != NULL, "no units row:\n%s", r.out);
    cr_expect(strstr(r.out, "equal to plan_comm's SyncBN formula") != NULL, "%s", r.out);
    cr_expect(strstr(r.out, "# conclusion: below 16 images per GPU") != NULL, "%s", r.out);
    cr_expect(strstr(r.out, "# link on 4 ranks:") != NULL, "%s", r.out);
    cJSON *j = read_json(json);
    cJSON *recs = cJSON_GetObjectItem(j, "records"), *e;
    cr_assert_eq(cJSON_GetArraySize(recs), 4, "2 rank counts x 2 batches");
    int i = 0;
    cJSON_ArrayForEach(e, recs) {
        int ranks = (int)num(e, "ranks"), batch = (int)num(e, "batch_per_gpu");
        cr_expect_eq(ranks, i < 2 ? 2 : 4);
        cr_expect_eq(batch, i % 2 ? 4 : 2, "batches are sorted");
        const cJSON *ex = cJSON_GetObjectItem(e, "extra_collectives"), *p = cJSON_GetObjectItem(e, "predicted");
        /* resnet-tiny: 17 BN layers, sum C = 1208 */
        cr_expect_eq(num(ex, "all_gather_count"), 17);
        cr_expect_eq(num(ex, "all_gather_bytes"), (2.0 * 1208 + 17) * 4 * ranks);
        cr_expect_eq(num(ex, "all_reduce_count"), 17);
        cr_expect_eq(num(ex, "all_reduce_bytes"), 2.0 * 1208 * 4);
        cr_expect_eq(num(p, "collectives"), 34);
        cr_expect_eq(num(p, "bytes"), num(ex, "all_gather_bytes") + num(ex, "all_reduce_bytes"));
        cr_expect_gt(num(p, "comm_ms"), 0);
        cr_expect_gt(num(cJSON_GetObjectItem(e, "bn"), "step_ms"), 0);
        cr_expect_gt(num(cJSON_GetObjectItem(e, "in_syncbn_collectives"), "forward_min_ms"), 0);
        i++;
    }
    cr_expect_eq(cJSON_GetArraySize(cJSON_GetObjectItem(j, "links")), 2);
    cr_expect(cJSON_IsString(cJSON_GetObjectItem(j, "conclusion")));
    cJSON_Delete(j);
    struct stat st;
    snprintf(dat, sizeof dat, "%s.by_batch.dat", plot);
    cr_expect_eq(stat(dat, &st), 0, "no %s", dat);
    snprintf(dat, sizeof dat, "%s.by_ranks.dat", plot);
    cr_expect_eq(stat(dat, &st), 0, "no %s", dat);
    free(r.out);
    char cmd[160];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    cr_expect_eq(system(cmd), 0);
}

Test(cli_bench, usage_errors_should_exit_2_with_one_line, .timeout = 60)
{
    Run r = launch(0, "bench syncbn --model resnet-tiny");
    cr_expect_eq(r.status, 2, "%s", r.out);
    cr_expect(strstr(r.out, "start it on 2 or more ranks") != NULL, "%s", r.out);
    free(r.out);
    r = launch(0, "bench allreduce");
    cr_expect_eq(r.status, 2, "%s", r.out);
    cr_expect(strstr(r.out, "unknown benchmark 'allreduce' (valid: syncbn)") != NULL, "%s", r.out);
    free(r.out);
    r = launch(2, "bench syncbn --model gpt2-tiny");
    cr_expect_eq(r.status, 2, "%s", r.out);
    cr_expect(strstr(r.out, "runs the executor's CNN presets (resnet50, resnet-tiny, resnet-mini)") != NULL, "%s", r.out);
    free(r.out);
    r = launch(2, "bench syncbn --batches 2,x");
    cr_expect_eq(r.status, 2, "%s", r.out);
    cr_expect(strstr(r.out, "--batches '2,x'") != NULL, "%s", r.out);
    free(r.out);
    r = launch(2, "bench syncbn --ranks 4");
    cr_expect_eq(r.status, 2, "%s", r.out);
    cr_expect(strstr(r.out, "--ranks 4 exceeds the 2 ranks") != NULL, "%s", r.out);
    free(r.out);
    r = launch(0, "bench syncbn --help");
    cr_expect_eq(r.status, 0, "%s", r.out);
    cr_expect(strstr(r.out, "--image-size S") != NULL, "%s", r.out);
    free(r.out);
}
