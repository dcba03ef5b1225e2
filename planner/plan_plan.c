/* plan_plan.c — plans each strategy; the recommendation is auto's rule over the rows
 * (plan_auto_recommend: the safety margin, the fastest, the simpler within 3 %). */
#include "plan_plan.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "plan_auto.h"
#include "plan_util.h"

void plan_free(Plan *p) {
    for (int i = 0; i < p->n_rows; i++) plan_step_free(&p->rows[i].step);
    p->n_rows = 0;
}

void plan_steps(const Plan *p, const Step *rows[STRAT_COUNT]) {
    for (int i = 0; i < p->n_rows; i++) rows[i] = &p->rows[i].step;
}

int plan_run(const ModelSpec *m, const TrainSpec *t, const ClusterSpec *c, unsigned which, Plan *out) {
    memset(out, 0, sizeof(*out));
    out->recommended = -1;
    for (int k = 0; k < STRAT_COUNT; k++) {
        if (!(which & (1u << k))) continue;
        StrategyPlan *row = &out->rows[out->n_rows++];
        row->kind = (StrategyKind)k;
        plan_step_build(&row->step, m, t, c, (StrategyKind)k);
        plan_memory_step(&row->step, c, &row->mem, NULL, NULL, 0);
        plan_comm_step(&row->step, &row->comm);
        plan_sim_step(&row->step, 0, &row->time);
        row->max_micro_batch = plan_max_micro_batch_step(&row->step, m, t, c, (StrategyKind)k, PLAN_MAX_BATCH_SEARCH,
                                                         row->mem.fits);
    }
    plan_auto_recommend(m, t, c, NULL, out);   /* auto's rule over these rows (plan_auto.h) */
    return 0;
}
