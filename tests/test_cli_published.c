/* test_cli_published.c — bench/published_check.py end to end on two rows (fast): every table
 * under bench/published parses (each usable row names a model the file defines, each row a use of
 * set, held-out or unusable), memplan plans the rows, and the JSON holds a prediction per row.
 * The whole table runs with `make published-check` (not part of `make test`). */
#include <cjson/cJSON.h>
#include <criterion/criterion.h>
#include <libgen.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "test_run.h"

Test(cli_published, the_table_should_parse_and_two_rows_should_be_predicted, .timeout = 60)
{
    char bin[PATH_MAX], root[PATH_MAX], cmd[3 * PATH_MAX], out[] = "/tmp/memplan-published-XXXXXX";
    test_sibling_path(bin, sizeof bin, "../memplan");
    cr_assert_not_null(realpath(bin, root), "no %s", bin);
    char *r = dirname(dirname(root));   /* <repository>/build/memplan */
    int fd = mkstemp(out);
    cr_assert(fd >= 0);
    close(fd);
    snprintf(cmd, sizeof cmd, "cd %s && python3 bench/published_check.py --memplan %s --rows 2 --json=%s 2>&1",
             r, bin, out);
    Run run = test_run_cmd(cmd);
    cr_expect_eq(run.status, 0, "%s", run.out);
    cr_expect(strstr(run.out, "# median |error|") != NULL, "%s", run.out);
    cJSON *j = test_read_json(out);
    const cJSON *rows = cJSON_GetObjectItem(j, "rows"), *row;
    int predicted = 0, unusable = 0;
    cJSON_ArrayForEach(row, rows) {
        const cJSON *use = cJSON_GetObjectItem(row, "use");
        cr_assert(cJSON_IsString(use));
        if (strcmp(use->valuestring, "unusable") == 0) { unusable++; continue; }
        const cJSON *p = cJSON_GetObjectItem(row, "predicted"), *pub = cJSON_GetObjectItem(row, "published");
        cr_expect(cJSON_IsNumber(p) && p->valuedouble > 0, "row without a prediction");
        cr_expect(cJSON_IsNumber(pub) && pub->valuedouble > 0);
        predicted++;
    }
    cr_expect_eq(predicted, 2);
    cr_expect_gt(unusable, 0, "the unusable rows are listed with their reasons");
    cJSON_Delete(j);
    unlink(out);
    free(run.out);
}
