/* prof_export.c — profiler measurements as Chrome trace events (see prof_export.h). */
#include "prof_export.h"

int prof_export_spans(const PhaseTimer *t, int pid, double origin_us, TraceEvent *out, int max)
{
    int n;
    const PhaseSpan *s = prof_phase_spans(t, &n);
    double shift = prof_phase_origin_us(t) - origin_us;
    for (int i = 0; i < n && i < max && out; i++)
        prof_trace_event_complete(&out[i], s[i].name, s[i].cat, pid, s[i].lane,
                                  s[i].start_us + shift, s[i].dur_us);
    return n;
}

int prof_export_memory(const MemTracker *m, int pid, double origin_us, TraceEvent *out, int max)
{
    int n;
    const MemSample *s = prof_mem_timeline(m, &n);
    double shift = prof_mem_origin_us(m) - origin_us;
    for (int i = 0; i < n && i < max && out; i++) {
        prof_trace_event_counter(&out[i], "memory", pid, s[i].t_us + shift);
        for (int c = 0; c < MEM_CATEGORY_COUNT; c++)
            prof_trace_event_arg(&out[i], prof_mem_category_name((MemCategory)c), (double)s[i].by_cat[c]);
    }
    return n;
}
