/* plan_time.c — see plan_time.h. */
#include "plan_time.h"

#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "plan_time_sources.h"
#include "plan_util.h"

#define N_SOURCES ((int)(sizeof PLAN_TIME_SOURCES / sizeof PLAN_TIME_SOURCES[0]))
#define N_SETUPS ((int)(sizeof PLAN_TIME_SETUPS / sizeof PLAN_TIME_SETUPS[0]))
_Static_assert(sizeof PLAN_TIME_SOURCES / sizeof PLAN_TIME_SOURCES[0] <= PLAN_TIME_MAX_SOURCES,
               "PLAN_TIME_MAX_SOURCES holds every source");

int plan_time_source_count(void) { return N_SOURCES; }
const PlanTimeSource *plan_time_source(int i) { return i >= 0 && i < N_SOURCES ? &PLAN_TIME_SOURCES[i] : NULL; }

static const char *const DTYPES[] = {"fp32", "fp16", "bf16"};   /* PeakKind order */

/* A plan's setup in the terms of PlanTimeSetup. */
typedef struct {
    const char *gpu, *strategy, *ckpt, *dtype, *attn;
    int tp, pp, offload;
    int64_t seq, gpus;
} Setup;

/* How far setup u matches one a source ran: the checks in order, COVERED when all pass; else the
   first that fails, with its reason in why (the estimate names the closest source's). */
#define CHECKS 8
#define COVERED (CHECKS + 1)
static int matches(const PlanTimeSetup *s, const Setup *u, char *why, size_t len) {
    static const char *const WHY[CHECKS] = {
        "no published run on this GPU", "no published run of this strategy on this GPU",
        "no published run in this precision", "no published run with this attention",
        "no published run with this checkpointing", "no published run at this tensor-parallel degree",
        "no published run with this many pipeline stages", "no published run with this offload"};
    int same[CHECKS] = {!strcmp(s->gpu, u->gpu), !strcmp(s->strategy, u->strategy), !strcmp(s->dtype, u->dtype),
                        !strcmp(s->attn, u->attn), !strcmp(s->ckpt, u->ckpt), s->tp == u->tp, s->pp == u->pp,
                        s->offload == u->offload};
    int k = 0;
    while (k < CHECKS && same[k]) k++;
    if (k < CHECKS) {
        snprintf(why, len, "%s", WHY[k]);
        return k;
    }
    if (u->seq < s->seq_min || u->seq > s->seq_max || u->gpus < s->gpus_min || u->gpus > s->gpus_max) {
        snprintf(why, len, "outside the sequences (%lld-%lld) and GPU counts (%lld-%lld) of the published runs of "
                 "this setup", (long long)s->seq_min, (long long)s->seq_max, (long long)s->gpus_min,
                 (long long)s->gpus_max);
        return CHECKS;
    }
    return COVERED;
}

TimeBasis plan_time_basis(const ModelSpec *m, const TrainSpec *t, const ClusterSpec *c, StrategyKind k) {
    TimeBasis b;
    memset(&b, 0, sizeof b);
    const char *why = NULL;
    if (plan_time_flat(c)) why = "the flat model (--mfu or a measured description)";
    else if (m->arch != ARCH_DECODER || m->moe.n_experts > 0) why = "no published run of this kind of model";
    else if (t->impl != IMPL_PYTORCH) why = "no published run of memplan's engine";
    else if (t->ft.rank > 0 || t->ft.freeze != FREEZE_NONE) why = "no published run with LoRA or frozen parameters";
    else if (t->pp > 1 && t->pp_schedule != PP_1F1B) why = "no published run with this pipeline schedule";
    else if (t->offload != OFFLOAD_NONE && t->offload != OFFLOAD_OPT) why = "no published run offloading parameters";
    if (why) {
        snprintf(b.why, sizeof b.why, "%s", why);
        return b;
    }
    char ckpt[32];
    Setup u = {c->gpu.name, plan_strategy(k)->name, plan_ckpt_label(t, ckpt, sizeof ckpt),
               DTYPES[plan_precision(t->precision)->peak], plan_attn_label(t), t->tp > 1 ? t->tp : 1,
               t->pp > 1 ? t->pp : 1, t->offload == OFFLOAD_OPT, t->seq > 0 ? t->seq : m->max_seq, c->gpus};
    int best = -1, covered[PLAN_TIME_MAX_SOURCES] = {0};
    for (int i = 0; i < N_SETUPS; i++) {
        const PlanTimeSetup *s = &PLAN_TIME_SETUPS[i];
        char w[sizeof b.why];
        int depth = matches(s, &u, w, sizeof w);
        if (depth == COVERED) covered[s->source] = 1;
        else if (depth > best) {
            best = depth;
            snprintf(b.why, sizeof b.why, "%s", w);
        }
    }
    size_t n = 0;
    for (int i = 0; i < N_SOURCES; i++) {
        if (!covered[i]) continue;
        const PlanTimeSource *s = &PLAN_TIME_SOURCES[i];
        if (n < sizeof b.why)   /* the list, as far as it fits */
            n += (size_t)snprintf(b.why + n, sizeof b.why - n, "%s%s %.1f %% (%d runs)", b.n ? ", " : "", s->name,
                                  s->held_out_pct, s->rows);
        b.src[b.n++] = s;
    }
    b.published = b.n > 0;
    return b;
}

const char *plan_time_basis_name(const TimeBasis *b) { return b->published ? "published" : "estimate"; }

const char *plan_time_basis_text(const TimeBasis *b, char *buf, size_t len) {
    if (b->published)
        snprintf(buf, len, "backed by published runs of this setup, median error with each source held out of the "
                           "fit: %s", b->why);
    else
        snprintf(buf, len, "an estimate (%s)", b->why);
    return buf;
}

double plan_time_mfu(const ClusterSpec *c, const TrainSpec *t, double flops_per_step, double step_s) {
    const PrecisionSpec *p = plan_precision(t->precision);
    double peak = c->gpu.peak_tflops[p->peak] > 0 ? c->gpu.peak_tflops[p->peak] : c->gpu.peak_tflops[PEAK_FP32];
    return step_s > 0 && peak > 0 ? flops_per_step / step_s / (peak * 1e12) : 0;
}

int plan_time_shares_parse(const char *s, TimeShares *out, char *err, size_t len) {
    static const struct { const char *key; size_t off; double lo, hi; } KEYS[] = {
        {"gemm", offsetof(TimeShares, gemm), 0.05, 1.5},
        {"attn", offsetof(TimeShares, attn), 0.05, 3},
        {"passes", offsetof(TimeShares, passes), 0.05, 20},
    };
    memset(out, 0, sizeof *out);
    char buf[256];
    if (!s || !*s || strlen(s) >= sizeof buf) {
        snprintf(err, len, "--time-shares '%s' is not a list of %s", s ? s : "", PLAN_TIME_SHARES_HELP);
        return -1;
    }
    snprintf(buf, sizeof buf, "%s", s);
    for (char *save = NULL, *item = strtok_r(buf, ",", &save); item; item = strtok_r(NULL, ",", &save)) {
        char *eq = strchr(item, '=');
        size_t k = 0, n = sizeof KEYS / sizeof KEYS[0];
        if (eq) {
            *eq = 0;
            while (k < n && strcmp(item, KEYS[k].key) != 0) k++;
        }
        double v;
        if (!eq || k == n || plan_parse_double(eq + 1, KEYS[k].lo, KEYS[k].hi, &v)) {
            snprintf(err, len, "--time-shares '%s': '%s%s%s' is not one of %s", s, item, eq ? "=" : "",
                     eq ? eq + 1 : "", PLAN_TIME_SHARES_HELP);
            return -1;
        }
        *(double *)((char *)out + KEYS[k].off) = v;
    }
    return 0;
}
