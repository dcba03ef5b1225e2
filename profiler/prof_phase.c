/* prof_phase.c — phase timers behind prof_phase.h: a stack of open phases, per-name totals,
 * and a bounded array of spans for the trace. */
#include "prof_phase.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define PHASE_MAX_DEPTH 16
#define PHASE_MAX_NAMES 32
#define PHASE_SPANS_DEFAULT 65536

typedef struct {
    int stat;            /* index into stats */
    int lane;
    double start_us;
} OpenPhase;

struct PhaseTimer {
    double origin_us;
    OpenPhase stack[PHASE_MAX_DEPTH];
    int depth;
    PhaseStat stats[PHASE_MAX_NAMES];   /* the last slot, "other", collects names beyond */
    int nstats;
    PhaseSpan *spans;
    int nspans, max_spans;
    int64_t dropped;
};

static const char *const LANE_NAMES[PHASE_LANE_COUNT] = {
    [PHASE_LANE_COMPUTE] = "compute", [PHASE_LANE_COMM] = "comm",
};

const char *prof_phase_lane_name(int lane)
{
    return lane >= 0 && lane < PHASE_LANE_COUNT ? LANE_NAMES[lane] : "other";
}

double prof_clock_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec * 1e-3;
}

PhaseTimer *prof_phase_create(int max_spans)
{
    PhaseTimer *t = calloc(1, sizeof *t);
    if (!t) return NULL;
    t->max_spans = max_spans > 0 ? max_spans : PHASE_SPANS_DEFAULT;
    t->spans = malloc((size_t)t->max_spans * sizeof *t->spans);
    if (!t->spans) {
        free(t);
        return NULL;
    }
    t->origin_us = prof_clock_us();
    return t;
}

void prof_phase_destroy(PhaseTimer *t)
{
    if (!t) return;
    free(t->spans);
    free(t);
}

void prof_phase_reset(PhaseTimer *t)
{
    t->origin_us = prof_clock_us();
    t->depth = 0;
    t->nstats = 0;
    t->nspans = 0;
    t->dropped = 0;
}

double prof_phase_origin_us(const PhaseTimer *t) { return t->origin_us; }
double prof_phase_now_us(const PhaseTimer *t) { return prof_clock_us() - t->origin_us; }

static int find_stat(const PhaseTimer *t, const char *name)
{
    for (int i = 0; i < t->nstats; i++)
        if (strncmp(t->stats[i].name, name, sizeof t->stats[i].name - 1) == 0) return i;
    return -1;
}

static int get_stat(PhaseTimer *t, const char *name)
{
    int i = find_stat(t, name);
    if (i >= 0) return i;
    int full = t->nstats >= PHASE_MAX_NAMES - 1;
    if (full && t->nstats == PHASE_MAX_NAMES) return PHASE_MAX_NAMES - 1;
    PhaseStat *s = &t->stats[t->nstats];
    memset(s, 0, sizeof *s);
    snprintf(s->name, sizeof s->name, "%s", full ? "other" : name);
    return t->nstats++;
}

int prof_phase_begin_on(PhaseTimer *t, const char *name, int lane)
{
    if (t->depth == PHASE_MAX_DEPTH) return -1;
    OpenPhase *o = &t->stack[t->depth++];
    o->stat = get_stat(t, name ? name : "");
    o->lane = lane;
    o->start_us = prof_phase_now_us(t);
    return 0;
}

int prof_phase_begin(PhaseTimer *t, const char *name)
{
    return prof_phase_begin_on(t, name, PHASE_LANE_COMPUTE);
}

int prof_phase_end(PhaseTimer *t, const char *name)
{
    if (t->depth == 0) return -1;
    OpenPhase *o = &t->stack[t->depth - 1];
    PhaseStat *s = &t->stats[o->stat];
    if (name && find_stat(t, name) != o->stat) return -1;
    double end = prof_phase_now_us(t);
    s->seconds += (end - o->start_us) * 1e-6;
    s->count++;
    prof_phase_record_span(t, s->name, "phase", o->lane, o->start_us, end - o->start_us);
    t->depth--;
    return 0;
}

const char *prof_phase_current(const PhaseTimer *t)
{
    return t->depth ? t->stats[t->stack[t->depth - 1].stat].name : "";
}

void prof_phase_record_span(PhaseTimer *t, const char *name, const char *cat, int lane,
                            double start_us, double dur_us)
{
    if (t->nspans == t->max_spans) {
        t->dropped++;
        return;
    }
    PhaseSpan *p = &t->spans[t->nspans++];
    snprintf(p->name, sizeof p->name, "%s", name ? name : "");
    snprintf(p->cat, sizeof p->cat, "%s", cat ? cat : "");
    p->lane = lane;
    p->start_us = start_us;
    p->dur_us = dur_us;
}

double prof_phase_seconds(const PhaseTimer *t, const char *name)
{
    int i = find_stat(t, name);
    return i < 0 ? 0.0 : t->stats[i].seconds;
}

int64_t prof_phase_count(const PhaseTimer *t, const char *name)
{
    int i = find_stat(t, name);
    return i < 0 ? 0 : t->stats[i].count;
}

const PhaseStat *prof_phase_stats(const PhaseTimer *t, int *n)
{
    *n = t->nstats;
    return t->stats;
}

const PhaseSpan *prof_phase_spans(const PhaseTimer *t, int *n)
{
    *n = t->nspans;
    return t->spans;
}

int64_t prof_phase_dropped(const PhaseTimer *t) { return t->dropped; }
