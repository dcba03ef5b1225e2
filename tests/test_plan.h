/* test_plan.h — fixtures the planner tests share: a zoo model or a model file (asserting it
 * loads), a cluster of the default preset with a given size, a JSON file read whole. Header-only. */
#ifndef TEST_PLAN_H
#define TEST_PLAN_H

#include <cjson/cJSON.h>
#include <criterion/criterion.h>
#include <stdio.h>

#include "plan_gpu.h"
#include "plan_load.h"
#include "plan_zoo.h"

static inline ModelSpec zoo(const char *name) {
    ModelSpec m;
    char msg[256];
    cr_assert_eq(plan_zoo_build(&m, name, msg, sizeof(msg)), 0, "%s", msg);
    return m;
}

static inline ModelSpec load_model(const char *path) {
    ModelSpec m;
    char msg[512];
    cr_assert_eq(plan_load_model(&m, path, msg, sizeof msg), 0, "%s", msg);
    return m;
}

/* The JSON document in file path (the caller deletes it). */
static inline cJSON *read_json(const char *path) {
    FILE *f = fopen(path, "r");
    cr_assert_not_null(f, "no JSON file %s", path);
    static char buf[1 << 20];
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = 0;
    cJSON *j = cJSON_Parse(buf);
    cr_assert_not_null(j, "%s is not JSON", path);
    return j;
}

static inline void cluster(ClusterSpec *c, int64_t gpus, int64_t gpn) {
    plan_cluster_defaults(c);
    c->gpus = gpus;
    c->gpus_per_node = gpn;
}

#endif
