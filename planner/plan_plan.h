/* plan_plan.h — a Plan: every requested strategy for one setup (memory, largest micro-batch)
 * and the recommendation with its reason. */
#ifndef PLAN_PLAN_H
#define PLAN_PLAN_H

#include "plan_comm.h"
#include "plan_gpu.h"
#include "plan_memory.h"
#include "plan_model.h"
#include "plan_sim.h"
#include "plan_strategy.h"
#include "plan_train.h"

typedef struct {
    StrategyKind kind;
    MemResult mem;
    CommPlan comm;           /* collectives per optimizer step */
    SimResult time;          /* simulated step (no op list) */
    int64_t max_micro_batch;
} StrategyPlan;

typedef struct {
    StrategyPlan rows[STRAT_COUNT];
    int n_rows;
    int recommended;         /* index into rows, -1 if nothing fits */
    char reason[512];
} Plan;

#define PLAN_MAX_BATCH_SEARCH 65536

/* Plans the strategies in `which` (bit i = StrategyKind i). */
int plan_run(const ModelSpec *m, const TrainSpec *t, const ClusterSpec *c, unsigned which, Plan *out);

#endif
