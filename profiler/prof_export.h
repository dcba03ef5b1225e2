/* prof_export.h — turns what the profiler measured into Chrome trace events (prof_trace.h):
 * phase spans become complete events on their lanes, the memory timeline becomes one counter
 * series per category. Times are shifted to µs since `origin_us` (absolute prof_clock_us()
 * units), so the spans and the memory of a rank share one time axis; ranks share it when each
 * uses the monotonic time right after a common barrier as origin. */
#ifndef PROF_EXPORT_H
#define PROF_EXPORT_H

#include "prof_mem.h"
#include "prof_phase.h"
#include "prof_trace.h"

/* Each returns how many events it would produce (may exceed max; only max are written to out,
 * out may be NULL to count). */
int prof_export_spans(const PhaseTimer *t, int pid, double origin_us, TraceEvent *out, int max);
/* Counter "memory" with args = bytes per category (the viewer stacks them). */
int prof_export_memory(const MemTracker *m, int pid, double origin_us, TraceEvent *out, int max);

#endif
