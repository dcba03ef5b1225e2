/* cli_time.c — validate's time rows (cli_time.h). */
#include "cli_time.h"

#include <math.h>
#include <string.h>

#include "plan_comm.h"
#include "plan_sim.h"
#include "plan_util.h"

void cli_time_cluster(const DeviceDesc *d, ClusterSpec *c)
{
    for (int i = 0; i < 3; i++) c->gpu.peak_tflops[i] = d->gemm_flops / 1e12;
    c->mfu = 1.0;
    c->gpu.mem_bw = d->mem_bw / 1e9;
    c->opt_bw = d->opt_bw / 1e9;
    c->gpu.intra_bw = c->gpu.inter_bw = d->bw / 1e9;
    c->gpu.intra_lat = c->gpu.inter_lat = d->alpha_s;
    static const int OP[DESC_NCOLL] = {[DESC_AR] = COLL_ALL_REDUCE, [DESC_RS] = COLL_REDUCE_SCATTER,
                                       [DESC_AG] = COLL_ALL_GATHER};
    for (int k = 0; k < DESC_NCOLL; k++) {
        c->coll_bw[OP[k]] = d->coll_bw[k] / 1e9;
        c->coll_lat[OP[k]] = d->coll_alpha_s[k] > 0 ? d->coll_alpha_s[k] : 1e-12;   /* 0 would mean "the link's" */
    }
    c->coll_base_lat = d->sync_s;   /* per collective: ranks arriving from compute */
    c->comm_steal = d->steal;
    c->coll_issue_s = d->issue_s;
}

void cli_time_print_desc(FILE *f, const char *strategy, const DeviceDesc *d)
{
    fprintf(f, "# device description for %s (%s, %d ranks measured together%s, before and after the run: rates the %s, "
               "costs the mean, %.2f s): GEMM %.1f GFLOP/s "
               "(the step's %.0f calls), elementwise %.2f GB/s, optimizer %.2f GB/s (read + write)",
            strategy, d->kind, d->ranks, d->pooled ? " sharing the cores" : "", d->pooled ? "harmonic mean" : "higher",
            d->seconds, d->gemm_flops / 1e9, d->gemm_calls, d->mem_bw / 1e9,
            d->opt_bw / 1e9);
    for (int k = 0; k < DESC_NCOLL; k++)
        fprintf(f, "; %s %.1f us/step %.2f GB/s", exec_describe_coll_name(k), d->coll_alpha_s[k] * 1e6, d->coll_bw[k] / 1e9);
    fprintf(f, " (bus, decimal); among computing ranks: %.0f us per collective, steal %.2f, %.0f us per collective issued "
               "behind compute\n", d->sync_s * 1e6, d->steal, d->issue_s * 1e6);
}

cJSON *cli_time_desc_json(const DeviceDesc *d)
{
    cJSON *j = cJSON_CreateObject();
    cJSON_AddStringToObject(j, "kind", d->kind);
    cJSON_AddNumberToObject(j, "ranks", d->ranks);
    cJSON_AddBoolToObject(j, "pooled", d->pooled);
    cJSON_AddNumberToObject(j, "gemm_flops", d->gemm_flops);
    cJSON_AddNumberToObject(j, "gemm_calls", d->gemm_calls);
    cJSON_AddNumberToObject(j, "mem_bw_bytes_per_s", d->mem_bw);
    cJSON_AddNumberToObject(j, "opt_bw_bytes_per_s", d->opt_bw);
    for (int k = 0; k < DESC_NCOLL; k++) {
        cJSON *c = cJSON_AddObjectToObject(j, exec_describe_coll_name(k));
        cJSON_AddNumberToObject(c, "alpha_s_per_step", d->coll_alpha_s[k]);
        cJSON_AddNumberToObject(c, "busbw_bytes_per_s", d->coll_bw[k]);
    }
    cJSON_AddNumberToObject(j, "sync_s_per_collective", d->sync_s);
    cJSON_AddNumberToObject(j, "steal", d->steal);
    cJSON_AddNumberToObject(j, "issue_s_per_collective", d->issue_s);
    cJSON_AddNumberToObject(j, "seconds", d->seconds);
    return j;
}

/* NO_PHASE: the step's wall (as a phase) or nothing to subtract (as minus) */
#define NO_PHASE (-1)

/* The steady steps' (2..K; 1 when K = 1) seconds of a phase, less another's (minus), or of the
 * step's wall (NO_PHASE), into v; returns how many (none for a phase that never ran). */
static int steady_steps(const ExecRunResult *r, int K, int phase, int minus, double *v)
{
    int n = 0;
    if (phase != NO_PHASE && (r->phase_count[phase] == 0 || !r->step_phase_s)) return 0;
    if (minus != NO_PHASE && r->phase_count[minus] == 0) minus = NO_PHASE;
    for (int i = K > 1 ? 1 : 0; i < K && i < r->steps_done; i++) {
        const double *s = phase == NO_PHASE ? NULL : r->step_phase_s + (size_t)i * EXEC_PHASE_COUNT;
        v[n++] = !s ? r->step_ms[i] / 1e3 : s[phase] - (minus != NO_PHASE ? s[minus] : 0);
    }
    return n;
}

int cli_time_rows(FILE *f, const char *sn, const ModelSpec *m, const TrainSpec *t, const ClusterSpec *c,
                  StrategyKind k, const ExecRunResult *r, int K, cJSON *o)
{
    SimResult s;
    if (plan_sim(m, t, c, k, 0, &s) != 0) {
        fprintf(f, "# %s: the time simulation ran out of memory\n", sn);
        plan_sim_free(&s);
        return 0;
    }
    /* like with like: a phase is its wall time, compute and the waits inside it, on both sides;
       compute is the step without the waits. Each measured figure is the median of the steady
       steps: a step that the allocator still grows (the second on gpt2's ZeRO-1/2) or that a
       burst of other work hits does not set it. */
    struct {
        const char *name, *note;
        int phase, minus;   /* ExecPhase or NO_PHASE */
        double pred;
    } rows[] = {
        {"step", "wall, median of steps 2..K", NO_PHASE, NO_PHASE, s.step_s},
        {"forward", "wall: compute + waits", EXEC_PHASE_FORWARD, NO_PHASE, s.fwd_s},
        {"backward", "wall: compute + waits", EXEC_PHASE_BACKWARD, NO_PHASE, s.bwd_s},
        {"optimizer", "wall: compute + waits", EXEC_PHASE_OPTIMIZER, NO_PHASE, s.opt_s},
        {"compute", "step phase - waits", EXEC_PHASE_STEP, EXEC_PHASE_COMM_WAIT, s.compute_s},
        {"exposed_comm", "waits (comm_wait)", EXEC_PHASE_COMM_WAIT, NO_PHASE, s.exposed_comm_s},
    };
    fprintf(f, "%-8s %-26s %16s %16s %9s %s\n", "strategy", "time", "predicted", "measured", "rel_err", "check");
    fprintf(f, "%-8s %-26s %16s %16s %9s %s\n", "-", "-", "ms/step", "ms/step", "%", "-");
    cJSON *arr = cJSON_AddArrayToObject(o, "time");
    int ok = 1, steady = 0;
    double step_ms = 0;
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
        double per[K > 0 ? K : 1], sorted[K > 0 ? K : 1];
        int n = steady_steps(r, K, rows[i].phase, rows[i].minus, per);
        memcpy(sorted, per, (size_t)n * sizeof *per);
        double meas = n ? plan_median(sorted, n) : 0;
        double e = rows[i].pred > 0 ? (meas - rows[i].pred) / rows[i].pred : (meas > 0 ? INFINITY : 0);
        char check[64];
        if (i == 0) {   /* the step: judged when the run was long enough to say */
            steady = n;
            step_ms = meas * 1e3;
            ok = n < CLI_TIME_MIN_STEADY || step_ms < CLI_TIME_MIN_STEP_MS ? CLI_TIME_NOT_JUDGED
                                                                           : fabs(e) <= CLI_TIME_TOLERANCE;
            snprintf(check, sizeof check, "%s", ok == CLI_TIME_NOT_JUDGED ? "not judged (run too short)"
                                                : ok ? "ok (within 15%)" : "over 15% (reported)");
        } else {
            snprintf(check, sizeof check, "%s", rows[i].note);
        }
        char es[16];
        if (isinf(e)) snprintf(es, sizeof es, "new");
        else snprintf(es, sizeof es, "%+.2f", 100 * e);
        fprintf(f, "%-8s %-26s %16.2f %16.2f %9s %s\n", sn, rows[i].name, rows[i].pred * 1e3, meas * 1e3, es,
                check);
        cJSON *q = cJSON_CreateObject();
        cJSON_AddStringToObject(q, "quantity", rows[i].name);
        cJSON_AddStringToObject(q, "includes", rows[i].note);
        cJSON_AddNumberToObject(q, "predicted_ms", rows[i].pred * 1e3);
        cJSON_AddNumberToObject(q, "measured_ms", meas * 1e3);
        cJSON *ps = cJSON_AddArrayToObject(q, "measured_ms_per_step");   /* steps 2..K */
        for (int j = 0; j < n; j++) cJSON_AddItemToArray(ps, cJSON_CreateNumber(per[j] * 1e3));
        cJSON_AddItemToArray(arr, q);
    }
    if (ok == CLI_TIME_NOT_JUDGED)
        fprintf(f, "# %s: step time not judged: %d steady step%s of %.1f ms (median); it takes %d or more of %.0f ms or "
                   "more to judge it here (give --steps %d or more, and a larger --batch or --seq for longer steps; "
                   "docs/validation.md \"Time rows\")\n",
                sn, steady, steady == 1 ? "" : "s", step_ms, CLI_TIME_MIN_STEADY, CLI_TIME_MIN_STEP_MS,
                CLI_TIME_MIN_STEADY + 1);
    plan_sim_free(&s);
    return ok;
}
