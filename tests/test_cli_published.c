/* test_cli_published.c — bench/published_check.py and bench/fit_time.py end to end, fast: every
 * table under bench/published parses (each usable row names a model its file defines, each
 * unusable one says why), memplan plans one run of each source, the JSON table has a record per
 * source with the held-out median and the two baselines; and the leave-one-source-out fit runs on
 * two sources. The whole corpus runs with `make published-check` and `make fit-time` (not part of
 * `make test`; docs/validation-time.md). bench/published_memory_check.py: every row of
 * bench/published_memory plans, with its source line and a figure (docs/validation-torch.md
 * "Against published GPU runs"). */
#include <cjson/cJSON.h>
#include <criterion/criterion.h>
#include <libgen.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "test_run.h"

/* bench/<script> with args over tables; its JSON (caller deletes) and its output in *out. */
static cJSON *run_script(const char *script, const char *args, const char *tables, char **out) {
    char bin[PATH_MAX], root[PATH_MAX], cmd[4 * PATH_MAX], json[] = "/tmp/memplan-published-XXXXXX";
    test_sibling_path(bin, sizeof bin, "../memplan");
    cr_assert_not_null(realpath(bin, root), "no %s", bin);
    char *r = dirname(dirname(root));   /* <repository>/build/memplan */
    int fd = mkstemp(json);
    cr_assert(fd >= 0);
    close(fd);
    snprintf(cmd, sizeof cmd, "cd %s && python3 bench/%s --memplan %s %s --tables %s --json=%s 2>&1", r, script, bin,
             args, tables, json);
    Run run = test_run_cmd(cmd);
    cJSON *j = test_read_json(json);
    unlink(json);
    *out = run.out;
    return j;
}

/* published_check.py over tables (default bench/published), without the fit cache */
static cJSON *check(const char *args, const char *tables, char **out) {
    char a[256];
    snprintf(a, sizeof a, "--no-cache %s", args);
    return run_script("published_check.py", a, tables ? tables : "bench/published", out);
}

/* the per-source records the issue asks for: name, runs, held-out median and the two baselines */
static int source_records(const cJSON *j) {
    const cJSON *s;
    int n = 0;
    cJSON_ArrayForEach(s, cJSON_GetObjectItem(j, "sources")) {
        cr_expect(cJSON_IsString(cJSON_GetObjectItem(s, "name")));
        cr_expect(cJSON_GetObjectItem(s, "rows")->valueint >= 1);
        static const char *const K[] = {"held_out_median_pct", "nearest_row_baseline_pct", "gpu_mfu_baseline_pct"};
        for (int k = 0; k < 3; k++)
            cr_expect(cJSON_IsNumber(cJSON_GetObjectItem(s, K[k])) && cJSON_GetObjectItem(s, K[k])->valuedouble >= 0,
                      "%s", K[k]);
        n++;
    }
    cr_expect(cJSON_IsNumber(cJSON_GetObjectItem(j, "overall_median_pct")));
    return n;
}

Test(cli_published, every_source_should_parse_and_one_run_of_each_should_be_predicted, .timeout = 60)
{
    char *out;
    cJSON *j = check("--shipped --rows 1", NULL, &out);
    cr_assert_not_null(j, "%s", out);
    cr_expect(strstr(out, "# the shipped shares for every run") != NULL, "%s", out);
    cr_expect_geq(source_records(j), 6, "at least six independent sources");
    const cJSON *row;
    int predicted = 0, unusable = 0;
    cJSON_ArrayForEach(row, cJSON_GetObjectItem(j, "rows")) {
        const cJSON *use = cJSON_GetObjectItem(row, "use");
        if (cJSON_IsString(use) && strcmp(use->valuestring, "unusable") == 0) {
            cr_expect(strlen(cJSON_GetStringValue(cJSON_GetObjectItem(row, "why"))) > 0, "an unusable run says why");
            unusable++;
            continue;
        }
        cr_expect(cJSON_IsNumber(cJSON_GetObjectItem(row, "predicted")), "a run without a prediction");
        cr_expect(strchr(cJSON_GetStringValue(cJSON_GetObjectItem(row, "where")), ':') != NULL, "file:line");
        predicted++;
    }
    cr_expect_geq(predicted, 6);
    cr_expect_gt(unusable, 0, "the unusable rows are listed with their reasons");
    cJSON_Delete(j);
    free(out);
}

static const char *const TWO_SOURCES[] = {"torchtitan.json", "fms-fsdp.json"};

/* a folder of links to two of bench/published's sources (dir a mkdtemp template); the repository's
 * root in here */
static void link_two_sources(char *dir, char *here, size_t n)
{
    char bin[PATH_MAX], root[PATH_MAX], link[PATH_MAX + 64];
    cr_assert_not_null(mkdtemp(dir));
    test_sibling_path(bin, sizeof bin, "../memplan");
    cr_assert_not_null(realpath(bin, root));
    snprintf(here, n, "%s", dirname(dirname(root)));
    for (int i = 0; i < 2; i++) {
        char target[2 * PATH_MAX];
        snprintf(target, sizeof target, "%s/bench/published/%s", here, TWO_SOURCES[i]);
        snprintf(link, sizeof link, "%s/%s", dir, TWO_SOURCES[i]);
        cr_assert_eq(symlink(target, link), 0);
    }
}

static void unlink_two_sources(const char *dir)
{
    char link[PATH_MAX + 64];
    for (int i = 0; i < 2; i++) {
        snprintf(link, sizeof link, "%s/%s", dir, TWO_SOURCES[i]);
        unlink(link);
    }
    rmdir(dir);
}

/* two sources, one run each: each predicted with the shares fitted on the other */
Test(cli_published, a_source_should_be_predicted_with_the_shares_fitted_without_it, .timeout = 120)
{
    char dir[] = "/tmp/memplan-loso-XXXXXX", here[PATH_MAX];
    link_two_sources(dir, here, sizeof here);
    char *out;
    cJSON *j = check("--rows 1", dir, &out);
    cr_assert_not_null(j, "%s", out);
    cr_expect(cJSON_IsTrue(cJSON_GetObjectItem(j, "held_out")));
    cr_expect_eq(source_records(j), 2);
    cr_expect(strstr(out, "# without fms-fsdp: ") != NULL && strstr(out, "# without torchtitan: ") != NULL, "%s", out);
    unlink_two_sources(dir);
    cJSON_Delete(j);
    free(out);
}

/* fit_time.py --flatness: each fold scored at the point its fit chose gives the held-out error the
 * fit reported, no single fine step from it scores lower (where coordinate descent stops), and a
 * --score point is scored too */
Test(cli_published, a_folds_flatness_should_score_its_own_point_as_its_fit_did_and_no_step_lower, .timeout = 120)
{
    char dir[] = "/tmp/memplan-flat-XXXXXX", here[PATH_MAX], bin[PATH_MAX], cmd[4 * PATH_MAX];
    link_two_sources(dir, here, sizeof here);
    test_sibling_path(bin, sizeof bin, "../memplan");
    snprintf(cmd, sizeof cmd, "cd %s && python3 bench/fit_time.py --memplan %s --no-cache --rows 1 --tables %s "
             "--score 'p:gemm.ampere 0.90, gemm.hopper 0.90, passes 3.00' 2>&1", here, bin, dir);
    Run run = test_run_cmd(cmd);
    cr_expect_eq(run.status, 0, "%s", run.out);
    static const char *const NAMES[] = {"torchtitan", "fms-fsdp"};
    for (int i = 0; i < 2; i++) {
        char key[128], held[32] = "", own[48];
        snprintf(key, sizeof key, "%s held out: median |error| ", NAMES[i]);
        const char *h = strstr(run.out, key);
        cr_assert_not_null(h, "%s", run.out);
        cr_assert_eq(sscanf(h + strlen(key), "%31s", held), 1);
        snprintf(key, sizeof key, "\nwithout %s ", NAMES[i]);
        const char *line = strstr(run.out, key);
        cr_assert_not_null(line, "%s", run.out);
        snprintf(own, sizeof own, "(%s)", held);
        const char *o = strstr(line, "own ");
        cr_expect(o && strstr(o, own) && strstr(o, own) < strchr(o, ';'), "own point's error %s: %.200s", own, line);
        const char *eol = strchr(line + 1, '\n');
        cr_expect(strstr(line, "; p ") && strstr(line, "; p ") < eol, "%.200s", line);
        const char *steps = strstr(line, "one step either side of own: ");
        cr_assert_not_null(steps, "%s", run.out);
        int n = 0;
        for (const char *c = strchr(steps, ':') + 1; *c && *c != '\n'; c++) {
            if ((*c == '+' || *c == '-') && c[1] >= '0' && c[1] <= '9') {
                cr_expect_gt(strtod(c, NULL), -0.0005, "a step lower than the fit's point: %.300s", steps);
                n++;
            }
        }
        cr_expect_geq(n, 4, "a rise each way for GEMM and passes at least: %.300s", steps);
    }
    unlink_two_sources(dir);
    free(run.out);
}

/* every published memory row plans: a figure memplan can name, its source line, an error */
Test(cli_published, every_published_memory_row_should_plan_with_its_source_line, .timeout = 60)
{
    char *out;
    cJSON *j = run_script("published_memory_check.py", "", "bench/published_memory", &out);
    cr_assert_not_null(j, "%s", out);
    const cJSON *row;
    int rows = 0;
    cJSON_ArrayForEach(row, cJSON_GetObjectItem(j, "rows")) {
        const char *fig = cJSON_GetStringValue(cJSON_GetObjectItem(row, "figure"));
        cr_expect(fig && (strcmp(fig, "max_memory_reserved") == 0 || strcmp(fig, "nvidia-smi") == 0), "%s",
                  fig ? fig : "no figure");
        cr_expect(strstr(cJSON_GetStringValue(cJSON_GetObjectItem(row, "where")), " line ") != NULL, "file line");
        cr_expect_gt(cJSON_GetObjectItem(row, "planned_bytes")->valuedouble, 0);
        cr_expect(cJSON_IsNumber(cJSON_GetObjectItem(row, "err_pct")));
        rows++;
    }
    cr_expect_geq(rows, 9, "%s", out);
    cr_expect_geq(cJSON_GetArraySize(cJSON_GetObjectItem(j, "per_source_median_abs_err_pct")), 2, "two sources");
    cr_expect(strstr(out, "median |err| over") != NULL, "%s", out);
    cJSON_Delete(j);
    free(out);
}
