/* plan_time.c — see plan_time.h. */
#include "plan_time.h"

#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "plan_time_sources.h"
#include "plan_util.h"

#define N_SOURCES ((int)(sizeof PLAN_TIME_SOURCES / sizeof PLAN_TIME_SOURCES[0]))
_Static_assert(sizeof PLAN_TIME_SOURCES / sizeof PLAN_TIME_SOURCES[0] <= PLAN_TIME_MAX_SOURCES,
               "PLAN_TIME_MAX_SOURCES holds every source");

int plan_time_source_count(void) { return N_SOURCES; }
const PlanTimeSource *plan_time_source(int i) { return i >= 0 && i < N_SOURCES ? &PLAN_TIME_SOURCES[i] : NULL; }

/* 1 when v is one of the space-separated words of list. */
static int in_list(const char *list, const char *v) {
    size_t n = strlen(v);
    for (const char *p = list; (p = strstr(p, v)) != NULL; p += n)
        if ((p == list || p[-1] == ' ') && (p[n] == 0 || p[n] == ' ')) return 1;
    return 0;
}

static const char *const DTYPES[] = {"fp32", "fp16", "bf16"};   /* PeakKind order */

/* The checks a source's runs make of a setup, in the order the estimate's reason names the first
   that fails. */
typedef struct {
    const char *gpu, *strategy, *dtype, *attn, *ckpt;
    char tp[16], pp[16];
    int64_t seq, gpus;
} Setup;

static int covers(const PlanTimeSource *s, const Setup *u, char *why, size_t len) {
    static const char *const WHY[] = {
        "no published run on this GPU", "no published run of this strategy on this GPU",
        "no published run in this precision", "no published run with this attention",
        "no published run with this checkpointing", "no published run at this tensor-parallel degree",
        "no published run with this many pipeline stages"};
    const char *list[] = {s->gpus, s->strategies, s->dtypes, s->attns, s->ckpts, s->tps, s->pps};
    const char *value[] = {u->gpu, u->strategy, u->dtype, u->attn, u->ckpt, u->tp, u->pp};
    int k = 0;
    while (k < 7 && in_list(list[k], value[k])) k++;
    if (k < 7) {
        snprintf(why, len, "%s", WHY[k]);
        return k;
    }
    if (u->seq < s->seq_min || u->seq > s->seq_max || u->gpus < s->gpus_min || u->gpus > s->gpus_max) {
        snprintf(why, len, "outside the published runs' sequences (%lld-%lld) or GPU counts (%lld-%lld)",
                 (long long)s->seq_min, (long long)s->seq_max, (long long)s->gpus_min, (long long)s->gpus_max);
        return 7;
    }
    return 8;
}
#define COVERED 8

TimeBasis plan_time_basis(const ModelSpec *m, const TrainSpec *t, const ClusterSpec *c, StrategyKind k) {
    TimeBasis b;
    memset(&b, 0, sizeof b);
    const char *why = NULL;
    if (plan_time_flat(c)) why = "the flat model (--mfu or a measured description)";
    else if (m->arch != ARCH_DECODER || m->moe.n_experts > 0) why = "no published run of this kind of model";
    else if (t->impl != IMPL_PYTORCH || t->offload != OFFLOAD_NONE) why = "no published run with this layout or offload";
    else if (t->ft.rank > 0 || t->ft.freeze != FREEZE_NONE) why = "no published run with LoRA or frozen parameters";
    else if (t->pp > 1 && t->pp_schedule != PP_1F1B) why = "no published run with this pipeline schedule";
    if (why) {
        snprintf(b.why, sizeof b.why, "%s", why);
        return b;
    }
    char ckpt[32];
    Setup u = {c->gpu.name, plan_strategy(k)->name, DTYPES[plan_precision(t->precision)->peak],
               plan_attn_name(t->attn), plan_ckpt_label(t, ckpt, sizeof ckpt), "", "",
               t->seq > 0 ? t->seq : m->max_seq, c->gpus};
    snprintf(u.tp, sizeof u.tp, "%d", t->tp > 1 ? t->tp : 1);
    snprintf(u.pp, sizeof u.pp, "%d", t->pp > 1 ? t->pp : 1);
    int best = -1;
    size_t n = 0;
    for (int i = 0; i < N_SOURCES; i++) {
        char w[sizeof b.why];
        int depth = covers(&PLAN_TIME_SOURCES[i], &u, w, sizeof w);
        if (depth == COVERED) {
            b.src[b.n++] = &PLAN_TIME_SOURCES[i];
            n += (size_t)snprintf(b.why + n, n < sizeof b.why ? sizeof b.why - n : 0, "%s%s %.1f %% (%d runs)",
                                  b.n > 1 ? ", " : "", PLAN_TIME_SOURCES[i].name, PLAN_TIME_SOURCES[i].held_out_pct,
                                  PLAN_TIME_SOURCES[i].rows);
        } else if (!b.n && depth > best) {
            best = depth;
            snprintf(b.why, sizeof b.why, "%s", w);
        }
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
