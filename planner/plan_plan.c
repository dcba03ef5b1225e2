/* plan_plan.c — plans each strategy and recommends: DDP when it fits (simplest, least
 * traffic); otherwise the simplest sharded strategy that fits (strategy table's order). */
#include "plan_plan.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

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
    int best = -1;
    for (int i = 0; i < out->n_rows; i++) {
        if (!out->rows[i].mem.fits) continue;
        if (best < 0 || plan_strategy(out->rows[i].kind)->simplicity <
                            plan_strategy(out->rows[best].kind)->simplicity)
            best = i;
    }
    out->recommended = best;
    char a[32], b[32];
    int ddp = -1;
    for (int i = 0; i < out->n_rows; i++) if (out->rows[i].kind == STRAT_DDP) ddp = i;
    if (best < 0) {
        double least = out->n_rows ? out->rows[0].mem.peak : 0, host = 0;
        int li = 0, hi = -1;   /* the smallest GPU peak; the least host memory among GPU fits */
        for (int i = 1; i < out->n_rows; i++)
            if (out->rows[i].mem.peak < least) { least = out->rows[i].mem.peak; li = i; }
        for (int i = 0; i < out->n_rows; i++)
            if (out->rows[i].mem.gpu_fits && (hi < 0 || out->rows[i].mem.host_per_node < host)) {
                host = out->rows[i].mem.host_per_node;
                hi = i;
            }
        if (hi >= 0) {   /* the GPUs fit: host memory is the cause */
            snprintf(out->reason, sizeof(out->reason),
                     "nothing fits in host memory: %s fits the GPU (peak %s) but needs %s per node, %s available "
                     "(%s); give --host-mem %.0fGiB or more, %s, or more GPUs to shard over",
                     plan_strategy(out->rows[hi].kind)->name, plan_fmt_bytes(out->rows[hi].mem.peak, a, sizeof(a)),
                     plan_fmt_bytes(host, b, sizeof(b)), plan_fmt_bytes(out->rows[hi].mem.host_capacity, (char[32]){0}, 32),
                     t->offload ? "CPU offload keeps its state in host memory" : "the load-time copies of the model",
                     ceil(host / GIB),
                     t->offload ? "less offload (--offload none, if the GPU then fits)" : "a smaller model");
            return 0;
        }
        snprintf(out->reason, sizeof(out->reason),
                 "nothing fits: the smallest peak is %s (%s) against %s per GPU; use more GPUs, "
                 "--act-ckpt full, CPU offload (--offload), a smaller --batch/--seq, or a larger GPU "
                 "(memplan auto searches these)",
                 plan_fmt_bytes(least, a, sizeof(a)), plan_strategy(out->rows[li].kind)->name,
                 plan_fmt_bytes(c->gpu.mem_bytes, b, sizeof(b)));
        return 0;
    }
    const StrategyPlan *r = &out->rows[best];
    if (r->kind == STRAT_DDP) {
        snprintf(out->reason, sizeof(out->reason),
                 "DDP fits with %s headroom (peak %s of %s): simplest, no sharding needed",
                 plan_fmt_bytes(r->mem.headroom, a, sizeof(a)),
                 plan_fmt_bytes(r->mem.peak, b, sizeof(b)),
                 plan_fmt_bytes(c->gpu.mem_bytes, (char[32]){0}, 32));
    } else if (ddp >= 0) {
        snprintf(out->reason, sizeof(out->reason),
                 "DDP needs %s per GPU (%s short); %s is the simplest strategy that fits, "
                 "peak %s with %s headroom",
                 plan_fmt_bytes(out->rows[ddp].mem.peak, a, sizeof(a)),
                 plan_fmt_bytes(-out->rows[ddp].mem.headroom, b, sizeof(b)),
                 plan_strategy(r->kind)->name, plan_fmt_bytes(r->mem.peak, (char[32]){0}, 32),
                 plan_fmt_bytes(r->mem.headroom, (char[32]){0}, 32));
    } else {
        snprintf(out->reason, sizeof(out->reason),
                 "%s is the simplest of the requested strategies that fits (peak %s, headroom %s)",
                 plan_strategy(r->kind)->name, plan_fmt_bytes(r->mem.peak, a, sizeof(a)),
                 plan_fmt_bytes(r->mem.headroom, b, sizeof(b)));
    }
    return 0;
}
