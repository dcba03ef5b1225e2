/* cli_time.c — validate's time rows (cli_time.h). */
#include "cli_time.h"

#include <math.h>
#include <string.h>

#include "plan_sim.h"

void cli_time_cluster(const DeviceDesc *d, ClusterSpec *c)
{
    for (int i = 0; i < 3; i++) c->gpu.peak_tflops[i] = d->gemm_flops / 1e12;
    c->mfu = 1.0;
    c->gpu.mem_bw = d->mem_bw / 1e9;
    c->gpu.intra_bw = c->gpu.inter_bw = d->bw / 1e9;
    c->gpu.intra_lat = c->gpu.inter_lat = d->alpha_s;
    c->coll_base_lat = 0;   /* the fit has one latency per ring step and no base */
}

void cli_time_print_desc(FILE *f, const DeviceDesc *d)
{
    fprintf(f, "# device description (%s, %d ranks measured together, slowest rank): GEMM %.1f GFLOP/s, memory %.2f GB/s "
               "(read + write)", d->kind, d->ranks, d->gemm_flops / 1e9, d->mem_bw / 1e9);
    for (int k = 0; k < DESC_NCOLL; k++)
        fprintf(f, "; %s %.1f us/step %.2f GB/s", exec_describe_coll_name(k), d->coll_alpha_s[k] * 1e6, d->coll_bw[k] / 1e9);
    fprintf(f, " (bus, decimal)\n");
}

cJSON *cli_time_desc_json(const DeviceDesc *d)
{
    cJSON *j = cJSON_CreateObject();
    cJSON_AddStringToObject(j, "kind", d->kind);
    cJSON_AddNumberToObject(j, "ranks", d->ranks);
    cJSON_AddNumberToObject(j, "gemm_flops", d->gemm_flops);
    cJSON_AddNumberToObject(j, "mem_bw_bytes_per_s", d->mem_bw);
    for (int k = 0; k < DESC_NCOLL; k++) {
        cJSON *c = cJSON_AddObjectToObject(j, exec_describe_coll_name(k));
        cJSON_AddNumberToObject(c, "alpha_s_per_step", d->coll_alpha_s[k]);
        cJSON_AddNumberToObject(c, "busbw_bytes_per_s", d->coll_bw[k]);
    }
    return j;
}

/* steady seconds per step of a phase, 0 when it did not run */
static double phase_s(const ExecRunResult *r, const char *name, int steps)
{
    for (int i = 0; i < r->nphases; i++)
        if (strcmp(r->steady_phases[i].name, name) == 0) return r->steady_phases[i].seconds / steps;
    return 0;
}

int cli_time_rows(FILE *f, const char *sn, const ModelSpec *m, const TrainSpec *t, const ClusterSpec *c,
                  StrategyKind k, const ExecRunResult *r, int K, cJSON *o)
{
    SimResult s;
    if (plan_sim(m, t, c, k, 1, &s) != 0) {
        fprintf(f, "# %s: the time simulation ran out of memory\n", sn);
        plan_sim_free(&s);
        return 0;
    }
    /* compute per lane from the recorded ops: the last micro-step is recorded, the earlier
       (identical) ones are in the totals */
    double fwd = 0, bwd = 0;
    for (int i = 0; i < s.n_ops; i++) {
        const SimOp *op = &s.ops[i];
        if (op->lane != LANE_COMPUTE) continue;
        if (strncmp(op->name, "fwd ", 4) == 0) fwd += op->dur;
        else if (strncmp(op->name, "bwd ", 4) == 0) bwd += op->dur;
    }
    double A = (double)t->grad_accum, opt = s.compute_s - A * (fwd + bwd);
    int steps = K > 1 ? K - 1 : 1;
    struct {
        const char *name, *note;
        double pred, meas;
    } rows[] = {
        {"step", "steady step, wall", s.step_s, r->steady_ms / 1e3},
        {"forward", "compute; measured incl. waits", A * fwd, phase_s(r, "forward", steps)},
        {"backward", "compute; measured incl. waits", A * bwd, phase_s(r, "backward", steps)},
        {"optimizer", "measured incl. waits", opt, phase_s(r, "optimizer", steps)},
        {"exposed_comm", "measured: comm_wait", s.exposed_comm_s, phase_s(r, "comm_wait", steps)},
    };
    fprintf(f, "%-8s %-26s %16s %16s %9s %s\n", "strategy", "time", "predicted", "measured", "rel_err", "check");
    fprintf(f, "%-8s %-26s %16s %16s %9s %s\n", "-", "-", "ms/step", "ms/step", "%", "-");
    cJSON *arr = cJSON_AddArrayToObject(o, "time");
    int ok = 1;
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
        double e = rows[i].pred > 0 ? (rows[i].meas - rows[i].pred) / rows[i].pred : (rows[i].meas > 0 ? INFINITY : 0);
        char check[64];
        if (i == 0) {
            ok = fabs(e) <= CLI_TIME_TOLERANCE;
            snprintf(check, sizeof check, "%s", ok ? "ok (within 15%)" : "over 15% (reported)");
        } else {
            snprintf(check, sizeof check, "%s", rows[i].note);
        }
        char es[16];
        if (isinf(e)) snprintf(es, sizeof es, "new");
        else snprintf(es, sizeof es, "%+.2f", 100 * e);
        fprintf(f, "%-8s %-26s %16.2f %16.2f %9s %s\n", sn, rows[i].name, rows[i].pred * 1e3, rows[i].meas * 1e3, es,
                check);
        cJSON *q = cJSON_CreateObject();
        cJSON_AddStringToObject(q, "quantity", rows[i].name);
        cJSON_AddNumberToObject(q, "predicted_ms", rows[i].pred * 1e3);
        cJSON_AddNumberToObject(q, "measured_ms", rows[i].meas * 1e3);
        cJSON_AddItemToArray(arr, q);
    }
    plan_sim_free(&s);
    return ok;
}
