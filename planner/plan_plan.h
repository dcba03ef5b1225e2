/* plan_plan.h — a Plan: every requested strategy for one setup, each built once as a step
 * account (plan_step.h) that its memory, collective table, simulated step, --explain, --trace,
 * --plot and JSON are read from; the largest micro-batch (steps built at the batches probed);
 * the recommendation with its reason. */
#ifndef PLAN_PLAN_H
#define PLAN_PLAN_H

#include "plan_comm.h"
#include "plan_gpu.h"
#include "plan_memory.h"
#include "plan_model.h"
#include "plan_sim.h"
#include "plan_step.h"
#include "plan_strategy.h"
#include "plan_train.h"

typedef struct {
    StrategyKind kind;
    Step step;               /* the account every figure of the row is read from (owned) */
    MemResult mem;
    CommPlan comm;           /* collectives per optimizer step */
    SimResult time;          /* simulated step (no op list) */
    int64_t max_micro_batch;
} StrategyPlan;

typedef struct {
    StrategyPlan rows[STRAT_COUNT];
    int n_rows;
    int recommended;         /* index into rows, -1 if nothing fits */
    char reason[1024];
    double margin;           /* the safety margin the recommendation kept (bytes) */
} Plan;

#define PLAN_MAX_BATCH_SEARCH 65536

/* Plans the strategies in `which` (bit i = StrategyKind i): one step built per strategy, read by
   every figure of its row. Free with plan_free. */
int plan_run(const ModelSpec *m, const TrainSpec *t, const ClusterSpec *c, unsigned which, Plan *out);
void plan_free(Plan *p);
/* The rows' steps, for readers that take them as a list (PlanDim.header): rows[i] = &p->rows[i].step. */
void plan_steps(const Plan *p, const Step *rows[STRAT_COUNT]);

#endif
