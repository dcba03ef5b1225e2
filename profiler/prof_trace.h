/* prof_trace.h — a Chrome trace JSON writer: the format chrome://tracing and Perfetto open,
 *   {"traceEvents":[ ... ], "displayTimeUnit":"ms"}
 * with complete events (ph "X": a span on a lane), counter events (ph "C": e.g. memory per
 * category over time), instant events (ph "i") and metadata (process and thread names).
 * pid is the rank, tid the lane; times are microseconds.
 *
 * Pure C with no vendor headers and no dependency on the rest of the profiler: the CLI writes
 * the planner's simulated timeline with the same writer. Events stream out with fprintf as they
 * are given; strings are JSON-escaped (invalid UTF-8 bytes become '?').
 *
 * TraceEvent is plain fixed-size data without pointers, so the executor can gather the events
 * of every rank as bytes (Comm all_gather_v of DT_U8) and rank 0 writes them all with
 * prof_trace_write_ranks. */
#ifndef PROF_TRACE_H
#define PROF_TRACE_H

#include <stdio.h>

#define TRACE_MAX_ARGS 8   /* numeric args of a span, or values of a counter */

typedef enum { TRACE_COMPLETE = 0, TRACE_COUNTER, TRACE_INSTANT } TraceKind;

typedef struct {
    TraceKind kind;
    char name[48];
    char cat[24];
    int pid, tid;                     /* rank, lane (tid unused by counters) */
    double ts_us, dur_us;             /* start, duration (complete events only) */
    int nargs;
    char arg_keys[TRACE_MAX_ARGS][24];
    double arg_values[TRACE_MAX_ARGS];
} TraceEvent;

/* Fills e (name and cat are truncated to fit). */
void prof_trace_event_complete(TraceEvent *e, const char *name, const char *cat, int pid, int tid,
                               double ts_us, double dur_us);
void prof_trace_event_counter(TraceEvent *e, const char *name, int pid, double ts_us);
/* Adds a numeric arg (a counter's series); -1 when TRACE_MAX_ARGS are used. */
int prof_trace_event_arg(TraceEvent *e, const char *key, double value);

typedef struct TraceWriter TraceWriter;   /* opaque */

/* Starts a trace on f (not closed by prof_trace_end). NULL if out of memory. */
TraceWriter *prof_trace_begin(FILE *f);
/* Opens path for writing and starts a trace there; NULL with errno set on failure. */
TraceWriter *prof_trace_open(const char *path);
/* Finishes the JSON, closes the file if prof_trace_open opened it, frees w. Returns 0, or -1 if
 * any write failed. */
int prof_trace_end(TraceWriter *w);
long prof_trace_event_count(const TraceWriter *w);   /* events written so far, metadata included */

/* Metadata: "rank 0", "compute", "comm" ... sort indexes order the rows in the viewer. */
void prof_trace_process_name(TraceWriter *w, int pid, const char *name);
void prof_trace_process_sort(TraceWriter *w, int pid, int index);
void prof_trace_thread_name(TraceWriter *w, int pid, int tid, const char *name);

/* A span: keys/values are optional numeric args (nargs may be 0, keys NULL). */
void prof_trace_complete(TraceWriter *w, const char *name, const char *cat, int pid, int tid,
                         double ts_us, double dur_us, const char *const *keys,
                         const double *values, int nargs);
/* A counter sample: the viewer stacks the series (e.g. bytes per memory category). */
void prof_trace_counter(TraceWriter *w, const char *name, int pid, double ts_us,
                        const char *const *keys, const double *values, int n);
void prof_trace_event(TraceWriter *w, const TraceEvent *e);

/* One complete file from several ranks' events (events[r][0..counts[r])), e.g. what rank 0
 * gathered: each rank's process is named "rank R" and, when lane_names is given, its lanes
 * 0..nlanes-1; pid is forced to the rank. Returns 0, or -1 on a write error. */
int prof_trace_write_ranks(FILE *f, const TraceEvent *const *events, const int *counts, int nranks,
                           const char *const *lane_names, int nlanes);

#endif
