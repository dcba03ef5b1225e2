/* prof_cupti.c — CUPTI activity tracing aggregated per phase (see prof_cupti.h).
 *
 * Two halves: the aggregation (phases, NCCL attribution, spans for the trace, the memory
 * timeline), plain C that the offline session and the tests use; and the live session, which
 * turns CUPTI's activity records into CuptiRecord and feeds them to the same aggregation from
 * CUPTI's buffer-completed callback (a CUPTI worker thread, or the thread that flushes). A mutex
 * guards the session; the process-wide pointer to the live session has its own. */
#include "prof_cupti.h"
#include "prof_check.h"
#include "prof_map.h"

#include <cjson/cJSON.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#define CUPTI_MAX_PHASES 32
#define CUPTI_SPANS_DEFAULT 65536

/* ---- names (tables, not switch ladders) ---- */

static const char *const COPY_NAMES[CUPTI_COPY_COUNT] = {
    [CUPTI_COPY_HTOD] = "htod", [CUPTI_COPY_DTOH] = "dtoh", [CUPTI_COPY_DTOD] = "dtod",
    [CUPTI_COPY_HTOH] = "htoh", [CUPTI_COPY_PTOP] = "ptop", [CUPTI_COPY_OTHER] = "other",
};

const char *prof_cupti_lane_name(int lane)
{
    if (lane == CUPTI_LANE_KERNELS) return "gpu kernels";
    if (lane == CUPTI_LANE_MEMCPY) return "gpu memcpy";
    return prof_phase_lane_name(lane);
}

/* Kernel-name prefixes NCCL uses: 2.x before 2.19, 2.19+, and 2.27+'s symmetric kernels. */
static const char *const NCCL_PREFIXES[] = {"ncclKernel_", "ncclDevKernel_", "ncclSymkDevKernel_"};

/* The token after the prefix names the collective when NCCL specialized the kernel. */
static const struct {
    const char *token;
    CollKind op;
} NCCL_COLLECTIVES[] = {
    {"AllReduce", COLL_ALL_REDUCE},
    {"ReduceScatter", COLL_REDUCE_SCATTER},
    {"AllGather", COLL_ALL_GATHER},
    {"Broadcast", COLL_BROADCAST},
};

/* The identifier of a kernel name: for "_Z<len><id>..." the <len> characters after the
 * digits, else the characters before '(' or '<'. Sets *id and returns its length. */
static size_t kernel_identifier(const char *name, const char **id)
{
    *id = name;
    if (name[0] == '_' && name[1] == 'Z' && name[2] >= '1' && name[2] <= '9') {
        char *end;
        unsigned long len = strtoul(name + 2, &end, 10);
        size_t avail = strlen(end);
        *id = end;
        return len < avail ? len : avail;
    }
    return strcspn(name, "(<");
}

int prof_cupti_nccl_collective(const char *kernel_name)
{
    if (!kernel_name) return -1;
    const char *id;
    size_t len = kernel_identifier(kernel_name, &id);
    for (size_t p = 0; p < sizeof NCCL_PREFIXES / sizeof *NCCL_PREFIXES; p++) {
        size_t pl = strlen(NCCL_PREFIXES[p]);
        if (len < pl || strncmp(id, NCCL_PREFIXES[p], pl) != 0) continue;
        const char *tok = id + pl;
        size_t tl = 0;
        while (pl + tl < len && tok[tl] != '_') tl++;
        for (size_t c = 0; c < sizeof NCCL_COLLECTIVES / sizeof *NCCL_COLLECTIVES; c++)
            if (strlen(NCCL_COLLECTIVES[c].token) == tl && strncmp(tok, NCCL_COLLECTIVES[c].token, tl) == 0)
                return (int)NCCL_COLLECTIVES[c].op;
        return CUPTI_NCCL_UNATTRIBUTED;
    }
    return -1;
}

void prof_cupti_short_name(const char *kernel_name, char *out, size_t outlen)
{
    if (!out || outlen == 0) return;
    out[0] = 0;
    if (!kernel_name) return;
    const char *s = kernel_name;
    if (s[0] == '_' && s[1] == 'Z' && s[2] == 'N') {
        /* nested name: <len><id> components up to 'E', joined with "::" */
        size_t used = 0;
        s += 3;
        while (*s >= '1' && *s <= '9') {
            char *end;
            unsigned long len = strtoul(s, &end, 10);
            if (strlen(end) < len) break;
            int w = snprintf(out + used, outlen - used, "%s%.*s", used ? "::" : "", (int)len, end);
            if (w < 0 || (size_t)w >= outlen - used) return;   /* truncated: keep what fits */
            used += (size_t)w;
            s = end + len;
        }
        if (used) return;
        s = kernel_name;
    }
    const char *id;
    size_t len = kernel_identifier(s, &id);
    snprintf(out, outlen, "%.*s", (int)len, id);
}

/* ---- the session ---- */

typedef struct {
    uint64_t t_ns;
    int phase;
} Mark;

typedef struct {
    char name[48];
    int lane;
    uint64_t start_ns, end_ns;
    double bytes;             /* memcpy/memset; -1 for kernels */
} Span;

typedef struct {
    uint64_t t_ns;
    uint64_t address, bytes;
    int64_t seq;              /* arrival order: ties keep it */
    int release;
} MemEvent;

struct ProfCupti {
    pthread_mutex_t mu;
    int live;                 /* started by prof_cupti_start and not yet stopped */
    int finished;
    double clock_offset_us;   /* prof_clock_us() = cupti_ns / 1000 + offset */

    ProfCuptiPhase phases[CUPTI_MAX_PHASES];
    int nphases;
    Mark *marks;
    int nmarks, capmarks;

    Span *spans;
    int nspans, maxspans;
    int64_t dropped_spans, dropped_records;

    ProfMap hints;            /* launch correlation id -> CollKind */

    MemEvent *mem;
    int64_t nmem, capmem;
    int64_t other_kinds;

    CuptiMemSample *timeline;
    int ntimeline;
    CuptiMemSummary summary;
};

static int add_phase(ProfCupti *s, const char *name)
{
    ProfCuptiPhase *p = &s->phases[s->nphases];
    memset(p, 0, sizeof *p);
    snprintf(p->name, sizeof p->name, "%s", name);
    return s->nphases++;
}

static int find_phase(const ProfCupti *s, const char *name)
{
    for (int i = 0; i < s->nphases; i++)
        if (strncmp(s->phases[i].name, name, sizeof s->phases[i].name - 1) == 0) return i;
    return -1;
}

/* Index of the phase called name, added if new. Phases are keyed by the caller's names; past
 * 31 of them (and for a NULL or empty name) records go to the phase "other", so the table
 * holds at most 32. */
static int phase_index(ProfCupti *s, const char *name)
{
    if (!name || !*name || (find_phase(s, name) < 0 && s->nphases >= CUPTI_MAX_PHASES - 1)) name = "other";
    int i = find_phase(s, name);
    return i >= 0 ? i : add_phase(s, name);
}

/* The phase at CUPTI time t: the last mark at or before t ("init" before any). */
static int phase_at(const ProfCupti *s, uint64_t t)
{
    int lo = 0, hi = s->nmarks;   /* first mark with t_ns > t */
    while (lo < hi) {
        int mid = (lo + hi) / 2;
        if (s->marks[mid].t_ns <= t) lo = mid + 1;
        else hi = mid;
    }
    return lo == 0 ? 0 : s->marks[lo - 1].phase;
}

static ProfCupti *session_new(int max_spans, double clock_offset_us)
{
    ProfCupti *s = calloc(1, sizeof *s);
    if (!s) return NULL;
    pthread_mutex_init(&s->mu, NULL);
    s->clock_offset_us = clock_offset_us;
    s->maxspans = max_spans > 0 ? max_spans : CUPTI_SPANS_DEFAULT;
    phase_index(s, "init");
    return s;
}

ProfCupti *prof_cupti_offline(int max_spans, double clock_offset_us)
{
    return session_new(max_spans, clock_offset_us);
}

static void mark_locked(ProfCupti *s, const char *name, uint64_t t_ns)
{
    if (s->nmarks == s->capmarks) {
        int ncap = s->capmarks ? s->capmarks * 2 : 64;
        Mark *nm = realloc(s->marks, (size_t)ncap * sizeof *nm);
        if (!nm) return;   /* out of memory: records stay in the previous phase */
        s->marks = nm;
        s->capmarks = ncap;
    }
    int i = s->nmarks++;
    while (i > 0 && s->marks[i - 1].t_ns > t_ns) {   /* host time only grows; keep sorted anyway */
        s->marks[i] = s->marks[i - 1];
        i--;
    }
    s->marks[i].t_ns = t_ns;
    s->marks[i].phase = phase_index(s, name);
}

void prof_cupti_mark_phase(ProfCupti *s, const char *name, uint64_t t_ns)
{
    if (!s) return;
    pthread_mutex_lock(&s->mu);
    mark_locked(s, name, t_ns);
    pthread_mutex_unlock(&s->mu);
}

/* Keeps only the hints of correlation ids >= min (a new table). */
static void hints_keep_from(ProfMap *hints, uint64_t min)
{
    ProfMap kept = {0};
    size_t pos = 0;
    uint64_t id, op;
    while (prof_map_next(hints, &pos, &id, &op))
        if (id >= min && prof_map_put(&kept, id, op)) break;   /* out of memory: fewer hints */
    prof_map_free(hints);
    *hints = kept;
}

void prof_cupti_feed_launch(ProfCupti *s, uint32_t correlation_id, CollKind op)
{
    if (!s || (unsigned)op >= COLL_COUNT) return;
    pthread_mutex_lock(&s->mu);
    /* A hint waits for its kernel's record; one whose record never comes (dropped, or a launch
     * that failed) would stay for good. Correlation ids grow: past CUPTI_MAX_HINTS waiting,
     * the older half goes (their records are long overdue). */
    if (prof_map_count(&s->hints) >= CUPTI_MAX_HINTS && correlation_id > CUPTI_MAX_HINTS / 2)
        hints_keep_from(&s->hints, (uint64_t)correlation_id - CUPTI_MAX_HINTS / 2);
    prof_map_put(&s->hints, correlation_id, (uint64_t)op);
    pthread_mutex_unlock(&s->mu);
}

static void add_span(ProfCupti *s, const char *name, int lane, uint64_t start, uint64_t end, double bytes)
{
    if (s->nspans == s->maxspans) {
        s->dropped_spans++;
        return;
    }
    if (!s->spans) {
        s->spans = malloc((size_t)s->maxspans * sizeof *s->spans);
        if (!s->spans) {
            s->dropped_spans++;
            return;
        }
    }
    Span *sp = &s->spans[s->nspans++];
    snprintf(sp->name, sizeof sp->name, "%s", name);
    sp->lane = lane;
    sp->start_ns = start;
    sp->end_ns = end;
    sp->bytes = bytes;
}

static void add_mem_event(ProfCupti *s, const CuptiRecord *r)
{
    if (s->nmem == s->capmem) {
        int64_t ncap = s->capmem ? s->capmem * 2 : 1024;
        MemEvent *nm = realloc(s->mem, (size_t)ncap * sizeof *nm);
        if (!nm) {
            s->dropped_records++;
            return;
        }
        s->mem = nm;
        s->capmem = ncap;
    }
    MemEvent *e = &s->mem[s->nmem];
    e->t_ns = r->start_ns;
    e->address = r->address;
    e->bytes = r->bytes;
    e->seq = s->nmem++;
    e->release = r->kind == CUPTI_REC_RELEASE;
}

static double dur_us(const CuptiRecord *r)
{
    return r->end_ns > r->start_ns ? (double)(r->end_ns - r->start_ns) / 1000.0 : 0.0;
}

static void feed_locked(ProfCupti *s, const CuptiRecord *r)
{
    ProfCuptiPhase *p = &s->phases[phase_at(s, r->start_ns)];
    double us = dur_us(r);
    char name[48];
    switch (r->kind) {
    case CUPTI_REC_KERNEL: {
        p->kernels.count++;
        p->kernels.us += us;
        int coll = prof_cupti_nccl_collective(r->name);
        uint64_t hint = 0;
        /* the launch bracket is authoritative when there is one; else the name decides */
        if (prof_map_take(&s->hints, r->correlation_id, &hint) && coll >= 0) coll = (int)hint;
        if (coll >= 0) {
            p->nccl_total.count++;
            p->nccl_total.us += us;
            p->nccl[coll].count++;
            p->nccl[coll].us += us;
        }
        prof_cupti_short_name(r->name ? r->name : "kernel", name, sizeof name);
        add_span(s, name, CUPTI_LANE_KERNELS, r->start_ns, r->end_ns, -1);
        break;
    }
    case CUPTI_REC_MEMCPY: {
        CuptiCopyDir d = (unsigned)r->dir < CUPTI_COPY_COUNT ? r->dir : CUPTI_COPY_OTHER;
        p->memcpy[d].count++;
        p->memcpy[d].bytes += (double)r->bytes;
        p->memcpy[d].us += us;
        snprintf(name, sizeof name, "memcpy %s", COPY_NAMES[d]);
        add_span(s, name, CUPTI_LANE_MEMCPY, r->start_ns, r->end_ns, (double)r->bytes);
        break;
    }
    case CUPTI_REC_MEMSET:
        p->memset.count++;
        p->memset.bytes += (double)r->bytes;
        p->memset.us += us;
        add_span(s, "memset", CUPTI_LANE_MEMCPY, r->start_ns, r->end_ns, (double)r->bytes);
        break;
    case CUPTI_REC_ALLOC:
        p->alloc.count++;
        p->alloc.bytes += (double)r->bytes;
        add_mem_event(s, r);
        break;
    case CUPTI_REC_RELEASE:
        p->release.count++;
        p->release.bytes += (double)r->bytes;   /* 0 when CUPTI gave no size: fixed in finish */
        add_mem_event(s, r);
        break;
    case CUPTI_REC_OTHER_MEMORY:
        s->other_kinds++;
        break;
    }
}

void prof_cupti_feed(ProfCupti *s, const CuptiRecord *r)
{
    if (!s || !r) return;
    pthread_mutex_lock(&s->mu);
    feed_locked(s, r);
    pthread_mutex_unlock(&s->mu);
}

static int mem_event_cmp(const void *a, const void *b)
{
    const MemEvent *x = a, *y = b;
    if (x->t_ns != y->t_ns) return x->t_ns < y->t_ns ? -1 : 1;
    return x->seq < y->seq ? -1 : x->seq > y->seq;
}

size_t prof_cupti_pending_hints(ProfCupti *s)
{
    if (!s) return 0;
    pthread_mutex_lock(&s->mu);
    size_t n = prof_map_count(&s->hints);
    pthread_mutex_unlock(&s->mu);
    return n;
}

/* Builds the memory timeline from the allocation records; prof_cupti_stop calls it. */
static void finish(ProfCupti *s)
{
    if (!s) return;
    pthread_mutex_lock(&s->mu);
    prof_map_free(&s->hints);   /* no kernel record comes after the session: unmatched hints go */
    if (s->nmem > 1) qsort(s->mem, (size_t)s->nmem, sizeof *s->mem, mem_event_cmp);
    free(s->timeline);
    s->timeline = s->nmem ? malloc((size_t)s->nmem * sizeof *s->timeline) : NULL;
    s->ntimeline = 0;
    CuptiMemSummary *m = &s->summary;
    memset(m, 0, sizeof *m);
    snprintf(m->peak_phase, sizeof m->peak_phase, "%s", s->phases[0].name);
    ProfMap live = {0};   /* device address -> bytes */
    double cur = 0;
    for (int64_t i = 0; i < s->nmem; i++) {
        const MemEvent *e = &s->mem[i];
        if (!e->release) {
            uint64_t old;
            if (prof_map_take(&live, e->address, &old)) cur -= (double)old;   /* a missed release */
            prof_map_put(&live, e->address, e->bytes);
            cur += (double)e->bytes;
            m->allocs++;
        } else {
            uint64_t bytes;
            if (!prof_map_take(&live, e->address, &bytes)) {
                m->unmatched_releases++;
                continue;
            }
            if (e->bytes == 0 && !s->finished) {   /* CUPTI gave no size: credit the phase */
                ProfCuptiPhase *p = &s->phases[phase_at(s, e->t_ns)];
                p->release.bytes += (double)bytes;
            }
            cur -= (double)bytes;
            m->releases++;
        }
        double t_us = (double)e->t_ns / 1000.0 + s->clock_offset_us;
        if (cur > m->peak) {
            m->peak = cur;
            m->peak_t_us = t_us;
            snprintf(m->peak_phase, sizeof m->peak_phase, "%s", s->phases[phase_at(s, e->t_ns)].name);
        }
        if (s->timeline) {
            s->timeline[s->ntimeline].t_us = t_us;
            s->timeline[s->ntimeline].bytes = cur;
            s->ntimeline++;
        }
    }
    prof_map_free(&live);
    m->current = cur;
    m->other_kinds = s->other_kinds;
    s->finished = 1;
    pthread_mutex_unlock(&s->mu);
}

/* ---- results ---- */

const ProfCuptiPhase *prof_cupti_phases(const ProfCupti *s, int *n)
{
    if (n) *n = s ? s->nphases : 0;
    return s ? s->phases : NULL;
}

const ProfCuptiPhase *prof_cupti_phase(const ProfCupti *s, const char *name)
{
    if (!s || !name) return NULL;
    for (int i = 0; i < s->nphases; i++)
        if (strcmp(s->phases[i].name, name) == 0) return &s->phases[i];
    return NULL;
}

static void add_kernel(CuptiKernelStats *a, const CuptiKernelStats *b)
{
    a->count += b->count;
    a->us += b->us;
}

static void add_xfer(CuptiXferStats *a, const CuptiXferStats *b)
{
    a->count += b->count;
    a->bytes += b->bytes;
    a->us += b->us;
}

ProfCuptiPhase prof_cupti_total(const ProfCupti *s)
{
    ProfCuptiPhase t;
    memset(&t, 0, sizeof t);
    snprintf(t.name, sizeof t.name, "total");
    for (int i = 0; s && i < s->nphases; i++) {
        const ProfCuptiPhase *p = &s->phases[i];
        add_kernel(&t.kernels, &p->kernels);
        add_kernel(&t.nccl_total, &p->nccl_total);
        for (int c = 0; c < CUPTI_NCCL_SLOTS; c++) add_kernel(&t.nccl[c], &p->nccl[c]);
        for (int d = 0; d < CUPTI_COPY_COUNT; d++) add_xfer(&t.memcpy[d], &p->memcpy[d]);
        add_xfer(&t.memset, &p->memset);
        add_xfer(&t.alloc, &p->alloc);
        add_xfer(&t.release, &p->release);
    }
    return t;
}

CuptiMemSummary prof_cupti_memory(const ProfCupti *s)
{
    CuptiMemSummary m;
    memset(&m, 0, sizeof m);
    return s ? s->summary : m;
}

const CuptiMemSample *prof_cupti_mem_timeline(const ProfCupti *s, int *n)
{
    if (n) *n = s ? s->ntimeline : 0;
    return s ? s->timeline : NULL;
}

int64_t prof_cupti_dropped_records(const ProfCupti *s) { return s ? s->dropped_records : 0; }
int64_t prof_cupti_dropped_spans(const ProfCupti *s) { return s ? s->dropped_spans : 0; }

CuptiMemCheck prof_cupti_check_mem(const ProfCupti *s, const MemTracker *m, double tolerance)
{
    CuptiMemCheck c;
    memset(&c, 0, sizeof c);
    c.cupti_peak = s ? s->summary.peak : 0;
    c.tracked_peak = m ? (double)prof_mem_peak_total(m) : 0;
    if (c.tracked_peak > 0) c.rel_diff = (c.cupti_peak - c.tracked_peak) / c.tracked_peak;
    else c.rel_diff = c.cupti_peak > 0 ? 1.0 : 0.0;
    c.within = (c.rel_diff < 0 ? -c.rel_diff : c.rel_diff) <= tolerance;
    return c;
}

int prof_cupti_export(const ProfCupti *s, int pid, double origin_us, TraceEvent *out, int max)
{
    if (!s) return 0;
    int n = 0;
    double shift = s->clock_offset_us - origin_us;
    for (int i = 0; i < s->nspans; i++, n++) {
        if (!out || n >= max) continue;
        const Span *sp = &s->spans[i];
        double t0 = (double)sp->start_ns / 1000.0 + shift;
        double d = sp->end_ns > sp->start_ns ? (double)(sp->end_ns - sp->start_ns) / 1000.0 : 0.0;
        prof_trace_event_complete(&out[n], sp->name, "gpu", pid, sp->lane, t0, d);
        if (sp->bytes >= 0) prof_trace_event_arg(&out[n], "bytes", sp->bytes);
    }
    for (int i = 0; i < s->ntimeline; i++, n++) {
        if (!out || n >= max) continue;
        prof_trace_event_counter(&out[n], "gpu memory", pid, s->timeline[i].t_us - origin_us);
        prof_trace_event_arg(&out[n], "cupti", s->timeline[i].bytes);
    }
    return n;
}

/* ---- JSON ---- */

static cJSON *kernel_json(const CuptiKernelStats *k)
{
    cJSON *o = cJSON_CreateObject();
    if (!o) return NULL;
    cJSON_AddNumberToObject(o, "count", (double)k->count);
    cJSON_AddNumberToObject(o, "us", k->us);
    return o;
}

static cJSON *xfer_json(const CuptiXferStats *x, int with_time)
{
    cJSON *o = cJSON_CreateObject();
    if (!o) return NULL;
    cJSON_AddNumberToObject(o, "count", (double)x->count);
    cJSON_AddNumberToObject(o, "bytes", x->bytes);
    if (with_time) cJSON_AddNumberToObject(o, "us", x->us);
    return o;
}

static cJSON *phase_json(const ProfCuptiPhase *p)
{
    cJSON *o = cJSON_CreateObject();
    if (!o) return NULL;
    cJSON_AddStringToObject(o, "name", p->name);
    cJSON_AddItemToObject(o, "kernels", kernel_json(&p->kernels));
    cJSON *nccl = kernel_json(&p->nccl_total);
    if (nccl) {
        cJSON *by = cJSON_AddObjectToObject(nccl, "by_collective");
        for (int c = 0; by && c < CUPTI_NCCL_SLOTS; c++) {
            if (!p->nccl[c].count) continue;
            cJSON_AddItemToObject(by, c == CUPTI_NCCL_UNATTRIBUTED ? "unattributed" : coll_name((CollKind)c),
                                  kernel_json(&p->nccl[c]));
        }
    }
    cJSON_AddItemToObject(o, "nccl", nccl);
    cJSON *mc = cJSON_AddObjectToObject(o, "memcpy");
    for (int d = 0; mc && d < CUPTI_COPY_COUNT; d++)
        if (p->memcpy[d].count) cJSON_AddItemToObject(mc, COPY_NAMES[d], xfer_json(&p->memcpy[d], 1));
    cJSON_AddItemToObject(o, "memset", xfer_json(&p->memset, 1));
    cJSON_AddItemToObject(o, "alloc", xfer_json(&p->alloc, 0));
    cJSON_AddItemToObject(o, "release", xfer_json(&p->release, 0));
    return o;
}

cJSON *prof_cupti_json(const ProfCupti *s, const MemTracker *m, double tolerance)
{
    if (!s) return NULL;
    cJSON *root = cJSON_CreateObject();
    if (!root) return NULL;
    cJSON *phases = cJSON_AddArrayToObject(root, "phases");
    for (int i = 0; phases && i < s->nphases; i++) cJSON_AddItemToArray(phases, phase_json(&s->phases[i]));
    ProfCuptiPhase total = prof_cupti_total(s);
    cJSON_AddItemToObject(root, "total", phase_json(&total));
    cJSON *mem = cJSON_AddObjectToObject(root, "memory");
    if (mem) {
        const CuptiMemSummary *ms = &s->summary;
        cJSON_AddNumberToObject(mem, "peak_bytes", ms->peak);
        cJSON_AddStringToObject(mem, "peak_phase", ms->peak_phase);
        cJSON_AddNumberToObject(mem, "current_bytes", ms->current);
        cJSON_AddNumberToObject(mem, "allocs", (double)ms->allocs);
        cJSON_AddNumberToObject(mem, "releases", (double)ms->releases);
        cJSON_AddNumberToObject(mem, "unmatched_releases", (double)ms->unmatched_releases);
        cJSON_AddNumberToObject(mem, "other_kinds", (double)ms->other_kinds);
    }
    if (m) {
        CuptiMemCheck c = prof_cupti_check_mem(s, m, tolerance);
        cJSON *mc = cJSON_AddObjectToObject(root, "memory_check");
        if (mc) {
            cJSON_AddNumberToObject(mc, "cupti_peak_bytes", c.cupti_peak);
            cJSON_AddNumberToObject(mc, "tracked_peak_bytes", c.tracked_peak);
            cJSON_AddNumberToObject(mc, "rel_diff", c.rel_diff);
            cJSON_AddNumberToObject(mc, "tolerance", tolerance);
            cJSON_AddBoolToObject(mc, "within", c.within);
        }
    }
    cJSON_AddNumberToObject(root, "dropped_records", (double)s->dropped_records);
    cJSON_AddNumberToObject(root, "dropped_spans", (double)s->dropped_spans);
    return root;
}

static void session_free(ProfCupti *s)
{
    pthread_mutex_destroy(&s->mu);
    free(s->marks);
    free(s->spans);
    free(s->mem);
    free(s->timeline);
    prof_map_free(&s->hints);
    free(s);
}

/* ---- the live session ---- */

#if MEMPLAN_CUDA && MEMPLAN_CUPTI

#define CUPTI_BUFFER_BYTES (8u << 20)   /* per activity buffer */

static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
/* This process's rank, taken on the main thread at start: CUPTI's buffer callback runs on
 * CUPTI's own thread, which must not call MPI (MPI_THREAD_FUNNELED), so its messages use this. */
static int g_log_rank_cached;
static ProfCupti *g_session;            /* the running session, under g_lock */
static int g_callbacks_registered;
static CUpti_SubscriberHandle g_subscriber;
static int g_subscribe_failed;
static _Thread_local int t_collective = -1;   /* CollKind the thread is issuing, -1 none */

/* What a session traces. CONCURRENT_KERNEL, not KERNEL: KERNEL serializes kernels. A kind that
 * is not required may be refused (an older driver, a tool holding it): tracing goes on without
 * it, with a note on stderr. */
static const struct {
    CUpti_ActivityKind kind;
    const char *name;
    int required;
} TRACED[] = {
    {CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL, "CONCURRENT_KERNEL", 1},
    {CUPTI_ACTIVITY_KIND_MEMCPY, "MEMCPY", 1},
    {CUPTI_ACTIVITY_KIND_MEMSET, "MEMSET", 1},
    {CUPTI_ACTIVITY_KIND_MEMCPY2, "MEMCPY2 (peer copies)", 0},
    {CUPTI_ACTIVITY_KIND_MEMORY2, "MEMORY2 (allocations: no memory timeline)", 0},
};
#define NTRACED ((int)(sizeof TRACED / sizeof *TRACED))
static int g_enabled[NTRACED];   /* kinds this session enabled */

/* The driver calls NCCL launches its kernels with. */
static const CUpti_CallbackId LAUNCH_CBIDS[] = {
    CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel, CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel_ptsz,
    CUPTI_DRIVER_TRACE_CBID_cuLaunchKernelEx, CUPTI_DRIVER_TRACE_CBID_cuLaunchKernelEx_ptsz,
    CUPTI_DRIVER_TRACE_CBID_cuLaunchCooperativeKernel,
};

/* CUPTI memcpy kinds -> directions (array copies by their host/device side). */
static const CuptiCopyDir COPY_KIND_DIR[] = {
    [CUPTI_ACTIVITY_MEMCPY_KIND_UNKNOWN] = CUPTI_COPY_OTHER, [CUPTI_ACTIVITY_MEMCPY_KIND_HTOD] = CUPTI_COPY_HTOD,
    [CUPTI_ACTIVITY_MEMCPY_KIND_DTOH] = CUPTI_COPY_DTOH,     [CUPTI_ACTIVITY_MEMCPY_KIND_HTOA] = CUPTI_COPY_HTOD,
    [CUPTI_ACTIVITY_MEMCPY_KIND_ATOH] = CUPTI_COPY_DTOH,     [CUPTI_ACTIVITY_MEMCPY_KIND_ATOA] = CUPTI_COPY_DTOD,
    [CUPTI_ACTIVITY_MEMCPY_KIND_ATOD] = CUPTI_COPY_DTOD,     [CUPTI_ACTIVITY_MEMCPY_KIND_DTOA] = CUPTI_COPY_DTOD,
    [CUPTI_ACTIVITY_MEMCPY_KIND_DTOD] = CUPTI_COPY_DTOD,     [CUPTI_ACTIVITY_MEMCPY_KIND_HTOH] = CUPTI_COPY_HTOH,
    [CUPTI_ACTIVITY_MEMCPY_KIND_PTOP] = CUPTI_COPY_PTOP,
};

static void CUPTIAPI buffer_requested(uint8_t **buffer, size_t *size, size_t *max_records)
{
    *buffer = aligned_alloc(8, CUPTI_BUFFER_BYTES);   /* CUPTI wants 8-byte alignment */
    *size = *buffer ? CUPTI_BUFFER_BYTES : 0;
    *max_records = 0;                                 /* as many as fit */
}

static int record_of(const CUpti_Activity *a, CuptiRecord *r)
{
    memset(r, 0, sizeof *r);
    switch (a->kind) {
    case CUPTI_ACTIVITY_KIND_KERNEL:
    case CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL: {
        const CUpti_ActivityKernel10 *k = (const CUpti_ActivityKernel10 *)a;
        r->kind = CUPTI_REC_KERNEL;
        r->name = k->name;
        r->start_ns = k->start;
        r->end_ns = k->end;
        r->correlation_id = k->correlationId;
        return 1;
    }
    case CUPTI_ACTIVITY_KIND_MEMCPY: {
        const CUpti_ActivityMemcpy6 *m = (const CUpti_ActivityMemcpy6 *)a;
        r->kind = CUPTI_REC_MEMCPY;
        r->dir = m->copyKind < sizeof COPY_KIND_DIR / sizeof *COPY_KIND_DIR ? COPY_KIND_DIR[m->copyKind]
                                                                          : CUPTI_COPY_OTHER;
        r->bytes = m->bytes;
        r->start_ns = m->start;
        r->end_ns = m->end;
        return 1;
    }
    case CUPTI_ACTIVITY_KIND_MEMCPY2: {
        const CUpti_ActivityMemcpyPtoP4 *m = (const CUpti_ActivityMemcpyPtoP4 *)a;
        r->kind = CUPTI_REC_MEMCPY;
        r->dir = CUPTI_COPY_PTOP;
        r->bytes = m->bytes;
        r->start_ns = m->start;
        r->end_ns = m->end;
        return 1;
    }
    case CUPTI_ACTIVITY_KIND_MEMSET: {
        const CUpti_ActivityMemset4 *m = (const CUpti_ActivityMemset4 *)a;
        r->kind = CUPTI_REC_MEMSET;
        r->bytes = m->bytes;
        r->start_ns = m->start;
        r->end_ns = m->end;
        return 1;
    }
    case CUPTI_ACTIVITY_KIND_MEMORY2: {
        const CUpti_ActivityMemory4 *m = (const CUpti_ActivityMemory4 *)a;
        if (m->memoryKind != CUPTI_ACTIVITY_MEMORY_KIND_DEVICE) r->kind = CUPTI_REC_OTHER_MEMORY;
        else if (m->memoryOperationType == CUPTI_ACTIVITY_MEMORY_OPERATION_TYPE_ALLOCATION)
            r->kind = CUPTI_REC_ALLOC;
        else if (m->memoryOperationType == CUPTI_ACTIVITY_MEMORY_OPERATION_TYPE_RELEASE)
            r->kind = CUPTI_REC_RELEASE;
        else return 0;
        r->address = m->address;
        r->bytes = m->bytes;
        r->start_ns = r->end_ns = m->timestamp;
        return 1;
    }
    default:
        return 0;
    }
}

static void CUPTIAPI buffer_completed(CUcontext ctx, uint32_t stream_id, uint8_t *buffer, size_t size,
                                      size_t valid)
{
    (void)size;
    pthread_mutex_lock(&g_lock);
    ProfCupti *s = g_session;
    if (s && valid > 0) {
        CUpti_Activity *a = NULL;
        CuptiRecord r;
        for (;;) {
            CUptiResult st = cuptiActivityGetNextRecord(buffer, valid, &a);
            if (st == CUPTI_ERROR_MAX_LIMIT_REACHED) break;
            if (st != CUPTI_SUCCESS) {   /* not CUPTI_CHECK: its rank lookup calls MPI */
                const char *msg = NULL;
                if (cuptiGetResultString(st, &msg) != CUPTI_SUCCESS || !msg) msg = "unknown CUPTI error";
                fprintf(stderr, "rank %d: %s:%d: cuptiActivityGetNextRecord failed: %s (%d); the rest of "
                        "this buffer is dropped\n", g_log_rank_cached, __FILE__, __LINE__, msg, (int)st);
                break;
            }
            if (record_of(a, &r)) prof_cupti_feed(s, &r);
        }
    }
    if (s) {
        size_t dropped = 0;
        if (cuptiActivityGetNumDroppedRecords(ctx, stream_id, &dropped) == CUPTI_SUCCESS && dropped) {
            pthread_mutex_lock(&s->mu);
            s->dropped_records += (int64_t)dropped;
            pthread_mutex_unlock(&s->mu);
        }
    }
    pthread_mutex_unlock(&g_lock);
    free(buffer);
}

/* Inside a collective bracket, remember which collective the launch's correlation id is. */
static void CUPTIAPI launch_callback(void *userdata, CUpti_CallbackDomain domain, CUpti_CallbackId cbid,
                                     const void *cbdata)
{
    (void)userdata;
    (void)cbid;
    if (t_collective < 0 || domain != CUPTI_CB_DOMAIN_DRIVER_API) return;
    const CUpti_CallbackData *d = cbdata;
    if (d->callbackSite != CUPTI_API_ENTER) return;
    pthread_mutex_lock(&g_lock);
    if (g_session) prof_cupti_feed_launch(g_session, d->correlationId, (CollKind)t_collective);
    pthread_mutex_unlock(&g_lock);
}

void prof_cupti_collective_begin(CollKind op) { t_collective = (unsigned)op < COLL_COUNT ? (int)op : -1; }
void prof_cupti_collective_end(void) { t_collective = -1; }

static int set_launch_callbacks(int enable)
{
    if (!g_subscriber) return -1;
    int bad = 0;
    for (size_t i = 0; i < sizeof LAUNCH_CBIDS / sizeof *LAUNCH_CBIDS; i++)
        bad |= CUPTI_CHECK(cuptiEnableCallback((uint32_t)enable, g_subscriber, CUPTI_CB_DOMAIN_DRIVER_API,
                                               LAUNCH_CBIDS[i]));
    return bad ? -1 : 0;
}

/* Enables every kind (0), or -1 with err set when a required one is refused. */
static int enable_kinds(char *err, size_t errlen)
{
    for (int i = 0; i < NTRACED; i++) {
        CUptiResult r = cuptiActivityEnable(TRACED[i].kind);
        g_enabled[i] = r == CUPTI_SUCCESS;
        if (g_enabled[i]) continue;
        const char *msg = NULL;
        if (cuptiGetResultString(r, &msg) != CUPTI_SUCCESS || !msg) msg = "unknown CUPTI error";
        if (TRACED[i].required) {
            snprintf(err, errlen, "cuptiActivityEnable(%s) failed: %s", TRACED[i].name, msg);
            return -1;
        }
        fprintf(stderr, "rank %d: # CUPTI: %s not traced: %s\n", prof_log_rank(), TRACED[i].name, msg);
    }
    return 0;
}

static int disable_kinds(void)
{
    int bad = 0;
    for (int i = 0; i < NTRACED; i++) {
        if (g_enabled[i]) bad |= CUPTI_CHECK(cuptiActivityDisable(TRACED[i].kind));
        g_enabled[i] = 0;
    }
    return bad ? -1 : 0;
}

ProfCupti *prof_cupti_start(int max_spans, char *err, size_t errlen)
{
    char dummy[8];
    if (!err || errlen == 0) {
        err = dummy;
        errlen = sizeof dummy;
    }
    err[0] = 0;
    int ndev = 0;
    cudaError_t ce = cudaGetDeviceCount(&ndev);
    if (ce != cudaSuccess || ndev == 0) {
        cudaGetLastError();
        snprintf(err, errlen, "no CUDA device (%s)", ce != cudaSuccess ? cudaGetErrorString(ce) : "none found");
        return NULL;
    }
    ProfCupti *s = session_new(max_spans, 0);
    if (!s) {
        snprintf(err, errlen, "out of host memory");
        return NULL;
    }
    pthread_mutex_lock(&g_lock);
    g_log_rank_cached = prof_log_rank();
    if (g_session) {
        pthread_mutex_unlock(&g_lock);
        session_free(s);
        snprintf(err, errlen, "a CUPTI session is already running");
        return NULL;
    }
    g_session = s;
    pthread_mutex_unlock(&g_lock);

    if (!g_callbacks_registered) {
        if (CUPTI_CHECK(cuptiActivityRegisterCallbacks(buffer_requested, buffer_completed))) {
            snprintf(err, errlen, "cuptiActivityRegisterCallbacks failed (see the message above)");
            goto fail;
        }
        g_callbacks_registered = 1;
    }
    if (enable_kinds(err, errlen)) goto fail;
    /* Collective attribution needs the driver callback; without it (another tool subscribed)
     * tracing still works and Generic NCCL kernels stay unattributed. */
    if (!g_subscriber && !g_subscribe_failed) {
        CUptiResult r = cuptiSubscribe(&g_subscriber, launch_callback, NULL);
        if (r != CUPTI_SUCCESS) {
            const char *msg = NULL;
            cuptiGetResultString(r, &msg);
            fprintf(stderr, "rank %d: # CUPTI: cuptiSubscribe failed (%s): NCCL kernels are attributed by "
                    "name only\n", prof_log_rank(), msg ? msg : "?");
            g_subscriber = NULL;
            g_subscribe_failed = 1;
        }
    }
    if (g_subscriber) set_launch_callbacks(1);

    /* One clock: prof_clock_us() ≈ cupti_ns / 1000 + offset, measured around a timestamp. */
    uint64_t ts = 0;
    double before = prof_clock_us();
    if (CUPTI_CHECK(cuptiGetTimestamp(&ts))) {
        snprintf(err, errlen, "cuptiGetTimestamp failed (see the message above)");
        goto fail;
    }
    double after = prof_clock_us();
    s->clock_offset_us = 0.5 * (before + after) - (double)ts / 1000.0;
    s->live = 1;
    return s;
fail:
    disable_kinds();
    if (g_subscriber) set_launch_callbacks(0);
    pthread_mutex_lock(&g_lock);
    g_session = NULL;
    pthread_mutex_unlock(&g_lock);
    session_free(s);
    return NULL;
}

void prof_cupti_set_phase(ProfCupti *s, const char *name)
{
    if (!s) return;
    uint64_t ts = 0;
    if (s->live && CUPTI_CHECK(cuptiGetTimestamp(&ts))) return;
    if (!s->live) ts = (uint64_t)((prof_clock_us() - s->clock_offset_us) * 1000.0);
    prof_cupti_mark_phase(s, name, ts);
}

int prof_cupti_stop(ProfCupti *s)
{
    if (!s) return -1;
    if (!s->live) {
        if (!s->finished) finish(s);
        return 0;
    }
    int bad = 0;
    /* Records of work still running would be incomplete: let it finish first. */
    bad |= CUDA_CHECK(cudaDeviceSynchronize());
    /* Flushing calls buffer_completed (possibly on this thread): no lock held here. */
    bad |= CUPTI_CHECK(cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED));
    bad |= disable_kinds();
    if (g_subscriber) set_launch_callbacks(0);
    bad |= CUPTI_CHECK(cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED));
    pthread_mutex_lock(&g_lock);
    g_session = NULL;
    pthread_mutex_unlock(&g_lock);
    s->live = 0;
    finish(s);
    return bad ? -1 : 0;
}

#else /* built without CUPTI */

ProfCupti *prof_cupti_start(int max_spans, char *err, size_t errlen)
{
    (void)max_spans;
    if (err && errlen) snprintf(err, errlen, "built without CUPTI (NO_CUPTI=1 or NO_CUDA=1)");
    return NULL;
}

void prof_cupti_set_phase(ProfCupti *s, const char *name)
{
    if (!s) return;
    prof_cupti_mark_phase(s, name, (uint64_t)((prof_clock_us() - s->clock_offset_us) * 1000.0));
}

int prof_cupti_stop(ProfCupti *s)
{
    if (!s) return -1;
    if (!s->finished) finish(s);
    return 0;
}

void prof_cupti_collective_begin(CollKind op) { (void)op; }
void prof_cupti_collective_end(void) {}

#endif

void prof_cupti_destroy(ProfCupti *s)
{
    if (!s) return;
    if (s->live) prof_cupti_stop(s);
    session_free(s);
}
