/* prof_comm.c — collective counters behind prof_comm.h: per collective type and phase, the
 * number of calls, payload bytes (full buffer), per-rank wire bytes and seconds. The wire bytes
 * are planner/plan_coll.h's (the nccl-tests bus-bandwidth factors), the planner's own. */
#include "prof_comm.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    char name[32];
    CollStats stats[COLL_COUNT];
} CountedPhase;

struct CommCounters {
    int nranks;
    CountedPhase phases[PROF_MAX_PHASES];   /* the last slot collects phases beyond the table */
    int nphases, phase;                  /* phase: index of the current one, -1 before any */
};

CommCounters *prof_comm_create(int nranks)
{
    CommCounters *c = calloc(1, sizeof *c);
    if (!c) return NULL;
    c->nranks = nranks < 1 ? 1 : nranks;
    c->phase = -1;
    return c;
}

void prof_comm_destroy(CommCounters *c) { free(c); }

static int find_phase(const CommCounters *c, const char *name)
{
    for (int i = 0; i < c->nphases; i++)
        if (strncmp(c->phases[i].name, name, sizeof c->phases[i].name - 1) == 0) return i;
    return -1;
}

static int get_phase(CommCounters *c, const char *name)
{
    int i = find_phase(c, name);
    if (i >= 0) return i;
    if (c->nphases >= PROF_MAX_PHASES - 1) {
        /* Table full: the last slot, "other", collects the rest rather than drop the bytes. */
        if (c->nphases == PROF_MAX_PHASES - 1)
            snprintf(c->phases[c->nphases++].name, sizeof c->phases[0].name, "%s", "other");
        return PROF_MAX_PHASES - 1;
    }
    snprintf(c->phases[c->nphases].name, sizeof c->phases[0].name, "%s", name);
    return c->nphases++;
}

void prof_comm_set_phase(CommCounters *c, const char *phase)
{
    if (c) c->phase = get_phase(c, phase ? phase : "");
}

const char *prof_comm_current_phase(const CommCounters *c)
{
    return (c && c->phase >= 0) ? c->phases[c->phase].name : "none";
}

void prof_comm_record_in(CommCounters *c, const char *phase, CollKind op, double payload_bytes,
                         double seconds)
{
    if (!c || (unsigned)op >= COLL_COUNT) return;
    int i = phase ? get_phase(c, phase) : (c->phase >= 0 ? c->phase : get_phase(c, "none"));
    CollStats *s = &c->phases[i].stats[op];
    s->count++;
    s->payload_bytes += payload_bytes;
    s->wire_bytes += coll_wire_bytes(op, payload_bytes, c->nranks);
    s->seconds += seconds;
}

void prof_comm_record(CommCounters *c, CollKind op, double payload_bytes, double seconds)
{
    prof_comm_record_in(c, NULL, op, payload_bytes, seconds);
}

CollStats prof_comm_total(const CommCounters *c, CollKind op)
{
    CollStats t = {0};
    if (!c || (unsigned)op >= COLL_COUNT) return t;
    for (int i = 0; i < c->nphases; i++) {
        const CollStats *s = &c->phases[i].stats[op];
        t.count += s->count;
        t.payload_bytes += s->payload_bytes;
        t.wire_bytes += s->wire_bytes;
        t.seconds += s->seconds;
    }
    return t;
}

CollStats prof_comm_phase(const CommCounters *c, CollKind op, const char *phase)
{
    CollStats none = {0};
    if (!c || !phase || (unsigned)op >= COLL_COUNT) return none;
    int i = find_phase(c, phase);
    return i < 0 ? none : c->phases[i].stats[op];
}

int prof_comm_phases(const CommCounters *c, const char **names, int max)
{
    int n = 0;
    for (int i = 0; i < c->nphases && n < max; i++) names[n++] = c->phases[i].name;
    return n;
}

void prof_comm_reset(CommCounters *c)
{
    if (!c) return;
    /* Forget every phase but the current one, whose name stays set. */
    char cur[32] = "";
    if (c->phase >= 0) memcpy(cur, c->phases[c->phase].name, sizeof cur);
    int had = c->phase >= 0;
    memset(c->phases, 0, sizeof c->phases);
    c->nphases = 0;
    c->phase = had ? get_phase(c, cur) : -1;
}
