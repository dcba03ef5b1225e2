/* prof_comm.c — collective counters behind prof_comm.h: per collective type and phase, the
 * number of calls, payload bytes (full buffer), per-rank wire bytes and seconds.
 *
 * Wire-byte factors are the nccl-tests bus-bandwidth factors (NVIDIA/nccl-tests,
 * doc/PERFORMANCE.md): a ring all-reduce moves 2(n-1)/n of the buffer through each rank,
 * reduce-scatter and all-gather (n-1)/n of the full buffer, broadcast the buffer once. With a
 * single rank nothing crosses a wire, so every factor is 0 there. */
#include "prof_comm.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Described as data: name and wire factor as a function of n. */
typedef struct {
    const char *name;
    double (*factor)(int n);
} CollInfo;

static double f_all_reduce(int n) { return 2.0 * (n - 1) / n; }
static double f_gather_scatter(int n) { return (double)(n - 1) / n; }
static double f_broadcast(int n) { (void)n; return 1.0; }
static double f_zero(int n) { (void)n; return 0.0; }

static const CollInfo COLL_INFO[COLL_OP_COUNT] = {
    [COLL_ALL_REDUCE] = {"all_reduce", f_all_reduce},
    [COLL_REDUCE_SCATTER] = {"reduce_scatter", f_gather_scatter},
    [COLL_ALL_GATHER] = {"all_gather", f_gather_scatter},
    [COLL_BROADCAST] = {"broadcast", f_broadcast},
    [COLL_ALL_GATHER_V] = {"all_gather_v", f_gather_scatter},
    [COLL_BARRIER] = {"barrier", f_zero},
    [COLL_ALL_TO_ALL] = {"all_to_all", f_gather_scatter},   /* nccl-tests alltoall.cu: (n-1)/n */
};

const char *prof_coll_name(CollOp op)
{
    return (unsigned)op < COLL_OP_COUNT ? COLL_INFO[op].name : "unknown";
}

double prof_coll_wire_bytes(CollOp op, double payload_bytes, int nranks)
{
    if ((unsigned)op >= COLL_OP_COUNT || nranks <= 1) return 0.0;
    return COLL_INFO[op].factor(nranks) * payload_bytes;
}

typedef struct {
    char name[32];
    CollStats stats[COLL_OP_COUNT];
} CommPhase;

struct CommCounters {
    int nranks;
    CommPhase phases[PROF_MAX_PHASES];   /* the last slot collects phases beyond the table */
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

void prof_comm_record_in(CommCounters *c, const char *phase, CollOp op, double payload_bytes,
                         double seconds)
{
    if (!c || (unsigned)op >= COLL_OP_COUNT) return;
    int i = phase ? get_phase(c, phase) : (c->phase >= 0 ? c->phase : get_phase(c, "none"));
    CollStats *s = &c->phases[i].stats[op];
    s->count++;
    s->payload_bytes += payload_bytes;
    s->wire_bytes += prof_coll_wire_bytes(op, payload_bytes, c->nranks);
    s->seconds += seconds;
}

void prof_comm_record(CommCounters *c, CollOp op, double payload_bytes, double seconds)
{
    prof_comm_record_in(c, NULL, op, payload_bytes, seconds);
}

CollStats prof_comm_total(const CommCounters *c, CollOp op)
{
    CollStats t = {0};
    if (!c || (unsigned)op >= COLL_OP_COUNT) return t;
    for (int i = 0; i < c->nphases; i++) {
        const CollStats *s = &c->phases[i].stats[op];
        t.count += s->count;
        t.payload_bytes += s->payload_bytes;
        t.wire_bytes += s->wire_bytes;
        t.seconds += s->seconds;
    }
    return t;
}

CollStats prof_comm_phase(const CommCounters *c, CollOp op, const char *phase)
{
    CollStats none = {0};
    if (!c || !phase || (unsigned)op >= COLL_OP_COUNT) return none;
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
