/* prof_trace.c — streaming Chrome trace JSON writer (see prof_trace.h). Format reference:
 * "Trace Event Format" (Google, the document chrome://tracing and Perfetto implement):
 * ph "X" complete events with ts/dur in µs, ph "C" counters whose args are the series,
 * ph "M" metadata (process_name, thread_name, *_sort_index). */
#include "prof_trace.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

struct TraceWriter {
    FILE *f;
    int owns;        /* opened by prof_trace_open */
    long nevents;
};

/* ---- JSON strings ---- */

/* Length of a valid UTF-8 sequence starting at s, or 0 if it is not valid. */
static int utf8_len(const unsigned char *s)
{
    int n;
    unsigned c = s[0];
    if (c < 0x80) return 1;
    if (c >= 0xc2 && c <= 0xdf) n = 2;
    else if (c >= 0xe0 && c <= 0xef) n = 3;
    else if (c >= 0xf0 && c <= 0xf4) n = 4;
    else return 0;
    for (int i = 1; i < n; i++)
        if ((s[i] & 0xc0) != 0x80) return 0;
    if (n == 3 && ((c == 0xe0 && s[1] < 0xa0) || (c == 0xed && s[1] > 0x9f))) return 0; /* overlong, surrogate */
    if (n == 4 && ((c == 0xf0 && s[1] < 0x90) || (c == 0xf4 && s[1] > 0x8f))) return 0; /* overlong, > U+10FFFF */
    return n;
}

/* Writes s as a JSON string literal with quotes. */
static void json_write_string(FILE *f, const char *s)
{
    fputc('"', f);
    const unsigned char *p = (const unsigned char *)(s ? s : "");
    while (*p) {
        unsigned c = *p;
        switch (c) {
        case '"': fputs("\\\"", f); break;
        case '\\': fputs("\\\\", f); break;
        case '\n': fputs("\\n", f); break;
        case '\r': fputs("\\r", f); break;
        case '\t': fputs("\\t", f); break;
        case '\b': fputs("\\b", f); break;
        case '\f': fputs("\\f", f); break;
        default:
            if (c < 0x20) {
                fprintf(f, "\\u%04x", c);
            } else if (c >= 0x80) {
                int n = utf8_len(p);
                if (n == 0) {
                    fputc('?', f);
                } else {
                    fwrite(p, 1, (size_t)n, f);
                    p += n - 1;
                }
            } else {
                fputc((int)c, f);
            }
        }
        p++;
    }
    fputc('"', f);
}

/* JSON has no NaN or infinity: write 0 for them. */
static void write_num(FILE *f, double v)
{
    fprintf(f, "%.9g", isfinite(v) ? v : 0.0);
}

static void write_time(FILE *f, double us)
{
    fprintf(f, "%.3f", isfinite(us) ? us : 0.0);   /* µs with ns resolution */
}

/* ---- events ---- */

static void event_open(TraceWriter *w, const char *ph)
{
    fputs(w->nevents ? ",\n" : "\n", w->f);
    fprintf(w->f, "{\"ph\":\"%s\"", ph);
    w->nevents++;
}

static void write_args(FILE *f, const char *const *keys, const double *values, int n)
{
    fputs(",\"args\":{", f);
    for (int i = 0; i < n; i++) {
        if (i) fputc(',', f);
        json_write_string(f, keys && keys[i] ? keys[i] : "value");
        fputc(':', f);
        write_num(f, values[i]);
    }
    fputc('}', f);
}

TraceWriter *prof_trace_begin(FILE *f)
{
    TraceWriter *w = calloc(1, sizeof *w);
    if (!w) return NULL;
    w->f = f;
    fputs("{\"traceEvents\":[", f);
    return w;
}

TraceWriter *prof_trace_open(const char *path)
{
    FILE *f = fopen(path, "w");
    if (!f) return NULL;
    TraceWriter *w = prof_trace_begin(f);
    if (!w) {
        fclose(f);
        return NULL;
    }
    w->owns = 1;
    return w;
}

int prof_trace_end(TraceWriter *w)
{
    if (!w) return -1;
    fputs("\n],\"displayTimeUnit\":\"ms\"}\n", w->f);
    int rc = fflush(w->f) == 0 && !ferror(w->f) ? 0 : -1;
    if (w->owns && fclose(w->f) != 0) rc = -1;
    free(w);
    return rc;
}

long prof_trace_event_count(const TraceWriter *w) { return w ? w->nevents : 0; }

static void metadata(TraceWriter *w, const char *what, int pid, int tid, const char *key,
                     const char *sval, int ival)
{
    event_open(w, "M");
    fputs(",\"name\":", w->f);
    json_write_string(w->f, what);
    fprintf(w->f, ",\"pid\":%d,\"tid\":%d,\"args\":{\"%s\":", pid, tid, key);
    if (sval) json_write_string(w->f, sval);
    else fprintf(w->f, "%d", ival);
    fputs("}}", w->f);
}

void prof_trace_process_name(TraceWriter *w, int pid, const char *name)
{
    metadata(w, "process_name", pid, 0, "name", name ? name : "", 0);
}

void prof_trace_process_sort(TraceWriter *w, int pid, int index)
{
    metadata(w, "process_sort_index", pid, 0, "sort_index", NULL, index);
}

void prof_trace_thread_name(TraceWriter *w, int pid, int tid, const char *name)
{
    metadata(w, "thread_name", pid, tid, "name", name ? name : "", 0);
}

static void thread_sort(TraceWriter *w, int pid, int tid, int index)
{
    metadata(w, "thread_sort_index", pid, tid, "sort_index", NULL, index);
}

static void named(TraceWriter *w, const char *ph, const char *name, const char *cat, int pid,
                  int tid, double ts_us)
{
    event_open(w, ph);
    fputs(",\"name\":", w->f);
    json_write_string(w->f, name);
    if (cat) {
        fputs(",\"cat\":", w->f);
        json_write_string(w->f, cat);
    }
    fprintf(w->f, ",\"pid\":%d,\"tid\":%d,\"ts\":", pid, tid);
    write_time(w->f, ts_us);
}

void prof_trace_complete(TraceWriter *w, const char *name, const char *cat, int pid, int tid,
                         double ts_us, double dur_us, const char *const *keys,
                         const double *values, int nargs)
{
    named(w, "X", name, cat ? cat : "", pid, tid, ts_us);
    fputs(",\"dur\":", w->f);
    write_time(w->f, dur_us < 0 ? 0 : dur_us);
    if (nargs > 0 && values) write_args(w->f, keys, values, nargs);
    fputc('}', w->f);
}

void prof_trace_counter(TraceWriter *w, const char *name, int pid, double ts_us,
                        const char *const *keys, const double *values, int n)
{
    named(w, "C", name, NULL, pid, 0, ts_us);
    write_args(w->f, keys, values, values ? n : 0);
    fputc('}', w->f);
}

static void instant(TraceWriter *w, const char *name, const char *cat, int pid, int tid, double ts_us)
{
    named(w, "i", name, cat ? cat : "", pid, tid, ts_us);
    fputs(",\"s\":\"t\"}", w->f);   /* scope: this thread's lane */
}

void prof_trace_event(TraceWriter *w, const TraceEvent *e)
{
    const char *keys[TRACE_MAX_ARGS];
    int n = e->nargs < 0 ? 0 : e->nargs > TRACE_MAX_ARGS ? TRACE_MAX_ARGS : e->nargs;
    /* Gathered bytes may lack terminators: copy the strings bounded. */
    char name[sizeof e->name + 1], cat[sizeof e->cat + 1];
    snprintf(name, sizeof name, "%.*s", (int)sizeof e->name, e->name);
    snprintf(cat, sizeof cat, "%.*s", (int)sizeof e->cat, e->cat);
    for (int i = 0; i < n; i++) keys[i] = memchr(e->arg_keys[i], 0, sizeof e->arg_keys[i]) ? e->arg_keys[i] : "value";
    switch (e->kind) {
    case TRACE_COUNTER: prof_trace_counter(w, name, e->pid, e->ts_us, keys, e->arg_values, n); break;
    case TRACE_INSTANT: instant(w, name, cat, e->pid, e->tid, e->ts_us); break;
    default:
        prof_trace_complete(w, name, cat, e->pid, e->tid, e->ts_us, e->dur_us, keys, e->arg_values, n);
    }
}

/* The events of one rank with pid forced to `rank`, after naming the process "rank R" and,
 * when lane_names is given, lanes 0..nlanes-1. */
static void write_rank(TraceWriter *w, int rank, const TraceEvent *events, int n,
                       const char *const *lane_names, int nlanes)
{
    char pname[32];
    snprintf(pname, sizeof pname, "rank %d", rank);
    prof_trace_process_name(w, rank, pname);
    prof_trace_process_sort(w, rank, rank);
    for (int l = 0; lane_names && l < nlanes; l++) {
        prof_trace_thread_name(w, rank, l, lane_names[l]);
        thread_sort(w, rank, l, l);
    }
    for (int i = 0; i < n; i++) {
        TraceEvent e = events[i];
        e.pid = rank;
        prof_trace_event(w, &e);
    }
}

int prof_trace_write_ranks(FILE *f, const TraceEvent *const *events, const int *counts, int nranks,
                           const char *const *lane_names, int nlanes)
{
    TraceWriter *w = prof_trace_begin(f);
    if (!w) return -1;
    for (int r = 0; r < nranks; r++)
        write_rank(w, r, events ? events[r] : NULL, events && counts ? counts[r] : 0, lane_names, nlanes);
    return prof_trace_end(w);
}

/* ---- TraceEvent helpers ---- */

void prof_trace_event_complete(TraceEvent *e, const char *name, const char *cat, int pid, int tid,
                               double ts_us, double dur_us)
{
    memset(e, 0, sizeof *e);
    e->kind = TRACE_COMPLETE;
    snprintf(e->name, sizeof e->name, "%s", name ? name : "");
    snprintf(e->cat, sizeof e->cat, "%s", cat ? cat : "");
    e->pid = pid;
    e->tid = tid;
    e->ts_us = ts_us;
    e->dur_us = dur_us;
}

void prof_trace_event_counter(TraceEvent *e, const char *name, int pid, double ts_us)
{
    prof_trace_event_complete(e, name, "", pid, 0, ts_us, 0);
    e->kind = TRACE_COUNTER;
}

int prof_trace_event_arg(TraceEvent *e, const char *key, double value)
{
    if (e->nargs < 0 || e->nargs >= TRACE_MAX_ARGS) return -1;
    snprintf(e->arg_keys[e->nargs], sizeof e->arg_keys[0], "%s", key ? key : "value");
    e->arg_values[e->nargs++] = value;
    return 0;
}
