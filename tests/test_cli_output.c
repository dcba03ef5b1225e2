/* test_cli_output.c — the simulated trace (one complete event per simulated op, valid JSON)
 * and the plot's data files. Builds cli/cli_output.c into the test. */
#include <cjson/cJSON.h>
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../cli/cli_output.c"
#include "../cli/cli_plot.c"
#include "plan_zoo.h"

static char *slurp(const char *path) {
    FILE *f = fopen(path, "rb");
    cr_assert_not_null(f, "%s", path);
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *b = malloc((size_t)n + 1);
    cr_assert_eq(fread(b, 1, (size_t)n, f), (size_t)n);
    b[n] = 0;
    fclose(f);
    return b;
}

static void setup(ModelSpec *m, TrainSpec *t, ClusterSpec *c, Plan *p) {
    char msg[256];
    cr_assert_eq(plan_zoo_build(m, "gpt2", msg, sizeof(msg)), 0);
    plan_train_defaults(t);
    t->micro_batch = 2;
    plan_cluster_defaults(c);
    c->gpus = 16;
    c->gpus_per_node = 8;
    plan_run(m, t, c, (1u << STRAT_COUNT) - 1, p);
}

Test(trace, should_parse_and_hold_one_event_per_simulated_op) {
    ModelSpec m; TrainSpec t; ClusterSpec c; Plan p;
    setup(&m, &t, &c, &p);
    char path[] = "/tmp/memplan_trace_XXXXXX";
    int fd = mkstemp(path);
    cr_assert_geq(fd, 0);
    close(fd);
    cr_assert_eq(cli_write_sim_trace(path, &m, &t, &c, &p), 0);
    char *txt = slurp(path);
    cJSON *j = cJSON_Parse(txt);
    cr_assert_not_null(j, "trace is not JSON");
    cJSON *ev = cJSON_GetObjectItem(j, "traceEvents");
    cr_assert(cJSON_IsArray(ev));
    int expect_x = 0, expect_c = 0;
    for (int i = 0; i < p.n_rows; i++) {
        SimResult s;
        plan_sim(&m, &t, &c, p.rows[i].kind, 1, &s);
        expect_x += s.n_ops;
        expect_c += s.n_mem;
        plan_sim_free(&s);
    }
    int nx = 0, nc = 0;
    cJSON *e;
    cJSON_ArrayForEach(e, ev) {
        const char *ph = cJSON_GetObjectItem(e, "ph")->valuestring;
        if (strcmp(ph, "X") == 0) {
            nx++;
            cr_expect(cJSON_IsNumber(cJSON_GetObjectItem(e, "ts")) && cJSON_IsNumber(cJSON_GetObjectItem(e, "dur")));
        }
        if (strcmp(ph, "C") == 0) nc++;
    }
    cr_expect_eq(nx, expect_x);
    cr_expect_eq(nc, expect_c);
    cJSON_Delete(j);
    free(txt);
    unlink(path);
    plan_model_free(&m);
}

Test(plot, should_write_the_data_files_beside_the_image) {
    ModelSpec m; TrainSpec t; ClusterSpec c; Plan p;
    setup(&m, &t, &c, &p);
    const char *png = "/tmp/memplan_plot_test.png";
    cr_assert_eq(cli_write_plot(png, &m, &t, &c, &p), 0);
    char *dat = slurp("/tmp/memplan_plot_test.png.terms.dat");
    cr_expect(strstr(dat, "fsdp-full") && strstr(dat, "ddp"));
    free(dat);
    if (system("command -v gnuplot >/dev/null 2>&1") == 0) {
        FILE *f = fopen(png, "rb");
        cr_assert_not_null(f, "gnuplot is installed but wrote no PNG");
        unsigned char sig[4] = {0};
        cr_expect_eq(fread(sig, 1, 4, f), 4u);
        cr_expect(sig[1] == 'P' && sig[2] == 'N' && sig[3] == 'G');
        fclose(f);
    }
    plan_model_free(&m);
}
