/* prof_comm.h — collective counters: count, payload bytes, per-rank wire bytes and time per
 * collective type and phase, as the comm backends report each call. Wire bytes use the
 * nccl-tests factors (all-reduce 2(n-1)/n, reduce-scatter/all-gather (n-1)/n of the full
 * size, broadcast 1, all-to-all (n-1)/n of the rank's send buffer), the same rule the planner's communication model uses. */
#ifndef PROF_COMM_H
#define PROF_COMM_H

#include <stddef.h>
#include <stdint.h>

#include "plan_coll.h"   /* CollKind, its names and wire factors: the planner's own */



typedef struct {
    int64_t count;
    double payload_bytes;      /* Σ full buffer sizes */
    double wire_bytes;         /* Σ per-rank wire bytes */
    double seconds;            /* Σ time from issue to completion seen by this rank */
} CollStats;

#define PROF_MAX_PHASES 8
typedef struct CommCounters CommCounters;   /* opaque */

CommCounters *prof_comm_create(int nranks);
void prof_comm_destroy(CommCounters *c);
void prof_comm_set_phase(CommCounters *c, const char *phase);
void prof_comm_record(CommCounters *c, CollKind op, double payload_bytes, double seconds);
CollStats prof_comm_total(const CommCounters *c, CollKind op);            /* over phases */
CollStats prof_comm_phase(const CommCounters *c, CollKind op, const char *phase);
int prof_comm_phases(const CommCounters *c, const char **names, int max); /* phase names seen */
void prof_comm_reset(CommCounters *c);   /* zero everything; the current phase stays set */

/* ---- additions ---- */
/* Phase calls are recorded in before any set_phase: "none". nranks <= 1: wire bytes are 0. */
const char *prof_comm_current_phase(const CommCounters *c);
/* Record into a named phase (NULL: the current one): a non-blocking collective is counted in
 * the phase it was issued in, even when it completes later. */
void prof_comm_record_in(CommCounters *c, const char *phase, CollKind op, double payload_bytes,
                         double seconds);

#endif
