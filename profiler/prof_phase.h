/* prof_phase.h — phase timers: wall-clock time (CLOCK_MONOTONIC) spent in named phases of a
 * step ("forward", "backward", "comm_wait", "optimizer", ...), accumulated seconds and counts
 * per phase, and the spans themselves (name, category, lane, start, duration) for the trace.
 *
 * Phases nest (e.g. "comm_wait" inside "backward"); each end must close the innermost open
 * phase. Spans timed elsewhere (a collective from issue to completion) are added with
 * prof_phase_record_span. Times are µs since the timer's origin unless the name says _s. */
#ifndef PROF_PHASE_H
#define PROF_PHASE_H

#include <stdint.h>

/* Lanes of a rank's trace (Chrome trace tid). */
enum { PHASE_LANE_COMPUTE = 0, PHASE_LANE_COMM = 1, PHASE_LANE_COUNT };
const char *prof_phase_lane_name(int lane);   /* "compute", "comm"; "other" beyond */

typedef struct {
    char name[32];
    char cat[16];        /* "phase" for begin/end, else what record_span was given */
    int lane;
    double start_us, dur_us;
} PhaseSpan;

typedef struct {
    char name[32];
    double seconds;      /* inclusive: nested phases count in their parents too */
    int64_t count;       /* completed begin/end pairs */
} PhaseStat;

typedef struct PhaseTimer PhaseTimer;   /* opaque */

/* Absolute CLOCK_MONOTONIC time in µs (the same clock as the timer and prof_mem). */
double prof_clock_us(void);

/* max_spans: spans kept for the trace (0: 65536); later ones are counted as dropped. */
PhaseTimer *prof_phase_create(int max_spans);
void prof_phase_destroy(PhaseTimer *t);
/* Origin := now; clears stats, spans and open phases (e.g. after warm-up or a barrier). */
void prof_phase_reset(PhaseTimer *t);
double prof_phase_origin_us(const PhaseTimer *t);   /* absolute, prof_clock_us() units */
double prof_phase_now_us(const PhaseTimer *t);      /* µs since the origin */

/* Begin a phase on the compute lane, or on a given lane. 0, or -1 if nested too deep (16). */
int prof_phase_begin(PhaseTimer *t, const char *name);
int prof_phase_begin_on(PhaseTimer *t, const char *name, int lane);
/* End the innermost phase; name (optional, NULL = any) must match it. 0 or -1. */
int prof_phase_end(PhaseTimer *t, const char *name);
const char *prof_phase_current(const PhaseTimer *t);   /* innermost open phase, or "" */

/* A span timed elsewhere (start_us relative to this timer's origin); not added to the stats. */
void prof_phase_record_span(PhaseTimer *t, const char *name, const char *cat, int lane,
                            double start_us, double dur_us);

double prof_phase_seconds(const PhaseTimer *t, const char *name);   /* 0 if never seen */
int64_t prof_phase_count(const PhaseTimer *t, const char *name);
/* Per-phase stats in order of first appearance; *n = how many. */
const PhaseStat *prof_phase_stats(const PhaseTimer *t, int *n);
const PhaseSpan *prof_phase_spans(const PhaseTimer *t, int *n);
int64_t prof_phase_dropped(const PhaseTimer *t);   /* spans not kept (over max_spans) */

#endif
