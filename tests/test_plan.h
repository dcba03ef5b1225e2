/* test_plan.h — fixtures the planner tests share: a zoo model (asserting it builds) and a
 * cluster of the default preset with a given size. Header-only. */
#ifndef TEST_PLAN_H
#define TEST_PLAN_H

#include <criterion/criterion.h>

#include "plan_gpu.h"
#include "plan_zoo.h"

static inline ModelSpec zoo(const char *name) {
    ModelSpec m;
    char msg[256];
    cr_assert_eq(plan_zoo_build(&m, name, msg, sizeof(msg)), 0, "%s", msg);
    return m;
}

static inline void cluster(ClusterSpec *c, int64_t gpus, int64_t gpn) {
    plan_cluster_defaults(c);
    c->gpus = gpus;
    c->gpus_per_node = gpn;
}

#endif
