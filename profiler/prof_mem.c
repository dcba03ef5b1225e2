/* prof_mem.c — the tracked allocator behind prof_mem.h.
 *
 * Every live pointer is kept in the profiler's hash map (prof_map.h: O(1) expected per
 * alloc/free) with its size and category. Totals per category, the total peak with the
 * categories at that moment, per-phase peaks and a capped memory timeline are updated on every
 * alloc/free. All sizes are bytes. */
#include "prof_mem.h"
#include "prof_map.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

#define MEM_MAX_PHASES 32
#define MEM_TIMELINE_CAP_DEFAULT 4096
/* A live pointer's map value: its size and category in one word, bytes << CAT_BITS | category.
 * A request of 2^61 bytes or more cannot be packed; no device has it to give anyway. */
#define CAT_BITS 3
_Static_assert(MEM_CATEGORY_COUNT <= 1 << CAT_BITS, "a category must fit in CAT_BITS");
#define MEM_MAX_REQUEST ((size_t)(UINT64_MAX >> CAT_BITS))

static const char *const CATEGORY_NAMES[MEM_CATEGORY_COUNT] = {
    [MEM_PARAMS] = "params",           [MEM_GRADS] = "grads",
    [MEM_OPTIMIZER] = "optimizer",     [MEM_ACTIVATIONS] = "activations",
    [MEM_COMM] = "comm",               [MEM_WORKSPACE] = "workspace",
};

const char *prof_mem_category_name(MemCategory c)
{
    return (unsigned)c < MEM_CATEGORY_COUNT ? CATEGORY_NAMES[c] : "unknown";
}

typedef struct {
    char name[32];
    size_t peak;          /* peak total while in this phase, bytes */
} PhasePeak;

struct MemTracker {
    ProfRawAlloc raw_alloc;
    ProfRawFree raw_free;
    ProfRawZero raw_zero;
    void *ctx;
    size_t limit;

    ProfMap live;         /* live pointer -> packed size and category */

    size_t current[MEM_CATEGORY_COUNT], peak[MEM_CATEGORY_COUNT];
    size_t current_total, peak_total;
    size_t peak_by_cat[MEM_CATEGORY_COUNT];   /* categories when peak_total was reached */
    char peak_phase[32];
    int64_t live_allocs, bad_frees;

    PhasePeak phases[MEM_MAX_PHASES];
    int nphases, phase;   /* index of the current phase */

    MemOom oom;

    /* Timeline: samples[0..ntl) are final; while `stride` > 1, each final sample is the highest
     * of `stride` consecutive events, and samples[ntl] accumulates the window in progress
     * (pending events of it so far). */
    MemSample *samples;
    int tl_cap, ntl;
    int64_t stride, pending;

    struct timespec t0;
};

static double now_us(const struct timespec *t0)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)(t.tv_sec - t0->tv_sec) * 1e6 + (double)(t.tv_nsec - t0->tv_nsec) * 1e-3;
}

/* ---- live pointers ---- */

static uint64_t live_key(const void *p) { return (uint64_t)(uintptr_t)p; }

/* Size and category of a live pointer; 0 if the tracker does not own it. */
static size_t live_lookup(const MemTracker *t, const void *p, MemCategory *cat)
{
    uint64_t v;
    if (!prof_map_get(&t->live, live_key(p), &v)) return 0;
    if (cat) *cat = (MemCategory)(v & ((1u << CAT_BITS) - 1));
    return (size_t)(v >> CAT_BITS);
}

/* ---- phases ---- */

static int phase_index(MemTracker *t, const char *name, int create)
{
    for (int i = 0; i < t->nphases; i++)
        if (strncmp(t->phases[i].name, name, sizeof t->phases[i].name - 1) == 0) return i;
    if (!create) return -1;
    int full = t->nphases >= MEM_MAX_PHASES - 1;   /* the last slot, "other", collects the rest */
    if (full && t->nphases == MEM_MAX_PHASES) return MEM_MAX_PHASES - 1;
    PhasePeak *ph = &t->phases[t->nphases];
    snprintf(ph->name, sizeof ph->name, "%s", full ? "other" : name);
    ph->peak = 0;
    return t->nphases++;
}

/* ---- timeline ---- */

static void timeline_add(MemTracker *t)
{
    if (!t->samples) return;
    MemSample s = {.t_us = now_us(&t->t0), .total = t->current_total};
    memcpy(s.by_cat, t->current, sizeof s.by_cat);
    MemSample *slot = &t->samples[t->ntl];           /* the window in progress */
    if (t->pending == 0 || s.total >= slot->total) *slot = s;
    if (++t->pending < t->stride) return;
    t->pending = 0;
    if (++t->ntl < t->tl_cap) return;
    /* Full: merge neighbours, keeping the higher of each pair so peaks stay visible. */
    int n = 0;
    for (int i = 0; i + 1 < t->ntl; i += 2)
        t->samples[n++] = t->samples[i + 1].total > t->samples[i].total ? t->samples[i + 1] : t->samples[i];
    if (t->ntl % 2) t->samples[n++] = t->samples[t->ntl - 1];
    t->ntl = n;
    t->stride *= 2;
}

/* ---- public ---- */

static void host_zero(void *ctx, void *p, size_t bytes)
{
    (void)ctx;
    memset(p, 0, bytes);
}

MemTracker *prof_mem_create(ProfRawAlloc raw_alloc, ProfRawFree raw_free, void *ctx, size_t limit)
{
    if (!raw_alloc || !raw_free) return NULL;
    MemTracker *t = calloc(1, sizeof *t);
    if (!t) return NULL;
    t->raw_alloc = raw_alloc;
    t->raw_free = raw_free;
    t->raw_zero = host_zero;
    t->ctx = ctx;
    t->limit = limit;
    t->tl_cap = MEM_TIMELINE_CAP_DEFAULT;
    t->samples = calloc((size_t)t->tl_cap + 1, sizeof *t->samples);
    if (!t->samples) goto fail;
    t->stride = 1;
    clock_gettime(CLOCK_MONOTONIC, &t->t0);
    t->phase = phase_index(t, "init", 1);
    snprintf(t->peak_phase, sizeof t->peak_phase, "%s", "init");
    return t;
fail:
    free(t->samples);
    free(t);
    return NULL;
}

void prof_mem_destroy(MemTracker *t)
{
    if (!t) return;
    /* Whatever is still live goes back to the device (leaks are the caller's bug, not a crash). */
    size_t pos = 0;
    uint64_t key;
    while (prof_map_next(&t->live, &pos, &key, NULL)) t->raw_free(t->ctx, (void *)(uintptr_t)key);
    prof_map_free(&t->live);
    free(t->samples);
    free(t);
}

void prof_mem_set_zero_fn(MemTracker *t, ProfRawZero raw_zero)
{
    t->raw_zero = raw_zero ? raw_zero : host_zero;
}

int prof_mem_set_timeline_cap(MemTracker *t, int cap)
{
    if (cap < 2) cap = 0;
    MemSample *s = NULL;
    if (cap > 0 && !(s = calloc((size_t)cap + 1, sizeof *s))) return -1;
    free(t->samples);
    t->samples = s;
    t->tl_cap = cap;
    t->ntl = 0;
    t->stride = 1;
    t->pending = 0;
    return 0;
}

static void record_oom(MemTracker *t, MemCategory cat, size_t bytes, const char *what)
{
    if (t->oom.happened) return;
    MemOom *o = &t->oom;
    o->happened = 1;
    snprintf(o->phase, sizeof o->phase, "%s", t->phases[t->phase].name);
    snprintf(o->what, sizeof o->what, "%s", what ? what : "?");
    o->category = cat;
    o->request = bytes;
    o->limit = t->limit;
    memcpy(o->current, t->current, sizeof o->current);
    o->current_total = t->current_total;
}

void *prof_mem_alloc(MemTracker *t, MemCategory cat, size_t bytes, const char *what)
{
    if (!t || bytes == 0 || (unsigned)cat >= MEM_CATEGORY_COUNT) return NULL;
    if (t->limit && (bytes > t->limit || t->current_total > t->limit - bytes)) {
        record_oom(t, cat, bytes, what);
        return NULL;
    }
    void *p = bytes <= MEM_MAX_REQUEST ? t->raw_alloc(t->ctx, bytes) : NULL;
    if (!p) {
        record_oom(t, cat, bytes, what);
        return NULL;
    }
    if (prof_map_put(&t->live, live_key(p), (uint64_t)bytes << CAT_BITS | (uint64_t)cat)) {
        t->raw_free(t->ctx, p);   /* host memory for the map ran out: untracked memory is not handed out */
        return NULL;
    }
    t->live_allocs++;
    t->current[cat] += bytes;
    t->current_total += bytes;
    if (t->current[cat] > t->peak[cat]) t->peak[cat] = t->current[cat];
    if (t->current_total > t->peak_total) {
        t->peak_total = t->current_total;
        memcpy(t->peak_by_cat, t->current, sizeof t->peak_by_cat);
        memcpy(t->peak_phase, t->phases[t->phase].name, sizeof t->peak_phase);
    }
    if (t->current_total > t->phases[t->phase].peak) t->phases[t->phase].peak = t->current_total;
    timeline_add(t);
    return p;
}

void *prof_mem_calloc(MemTracker *t, MemCategory cat, size_t bytes, const char *what)
{
    void *p = prof_mem_alloc(t, cat, bytes, what);
    if (p) t->raw_zero(t->ctx, p, bytes);
    return p;
}

void prof_mem_free(MemTracker *t, void *p)
{
    if (!t || !p) return;
    MemCategory cat;
    size_t bytes = live_lookup(t, p, &cat);
    if (!bytes) {
        /* Not ours (or freed twice): leave it alone rather than corrupt the device heap. */
        if (t->bad_frees++ == 0)
            fprintf(stderr, "memplan: prof_mem_free of a pointer the tracker does not own (%p); ignored\n", p);
        return;
    }
    t->current[cat] -= bytes;
    t->current_total -= bytes;
    prof_map_take(&t->live, live_key(p), NULL);
    t->live_allocs--;
    t->raw_free(t->ctx, p);
    timeline_add(t);
}

size_t prof_mem_size_of(const MemTracker *t, const void *p, MemCategory *cat)
{
    if (!t || !p) return 0;
    return live_lookup(t, p, cat);
}

void prof_mem_set_phase(MemTracker *t, const char *phase)
{
    t->phase = phase_index(t, phase ? phase : "", 1);
    if (t->current_total > t->phases[t->phase].peak) t->phases[t->phase].peak = t->current_total;
}

const char *prof_mem_phase(const MemTracker *t) { return t->phases[t->phase].name; }

size_t prof_mem_current(const MemTracker *t, MemCategory c)
{
    return (unsigned)c < MEM_CATEGORY_COUNT ? t->current[c] : 0;
}

size_t prof_mem_peak(const MemTracker *t, MemCategory c)
{
    return (unsigned)c < MEM_CATEGORY_COUNT ? t->peak[c] : 0;
}

size_t prof_mem_current_total(const MemTracker *t) { return t->current_total; }
size_t prof_mem_peak_total(const MemTracker *t) { return t->peak_total; }

void prof_mem_peak_breakdown(const MemTracker *t, size_t out[MEM_CATEGORY_COUNT])
{
    memcpy(out, t->peak_by_cat, sizeof t->peak_by_cat);
}

const char *prof_mem_peak_phase(const MemTracker *t) { return t->peak_phase; }

size_t prof_mem_phase_peak(const MemTracker *t, const char *phase)
{
    for (int i = 0; i < t->nphases; i++)
        if (strncmp(t->phases[i].name, phase, sizeof t->phases[i].name - 1) == 0) return t->phases[i].peak;
    return 0;
}

int prof_mem_phases(const MemTracker *t, const char **names, int max)
{
    int n = 0;
    for (int i = 0; i < t->nphases && n < max; i++) names[n++] = t->phases[i].name;
    return t->nphases;
}

void prof_mem_reset_peaks(MemTracker *t)
{
    memcpy(t->peak, t->current, sizeof t->peak);
    t->peak_total = t->current_total;
    memcpy(t->peak_by_cat, t->current, sizeof t->peak_by_cat);
    memcpy(t->peak_phase, t->phases[t->phase].name, sizeof t->peak_phase);
    for (int i = 0; i < t->nphases; i++) t->phases[i].peak = 0;
    t->phases[t->phase].peak = t->current_total;
}

size_t prof_mem_limit(const MemTracker *t) { return t->limit; }
const MemOom *prof_mem_oom(const MemTracker *t) { return &t->oom; }
int64_t prof_mem_live_count(const MemTracker *t) { return t->live_allocs; }
double prof_mem_origin_us(const MemTracker *t)
{
    return (double)t->t0.tv_sec * 1e6 + (double)t->t0.tv_nsec * 1e-3;
}

int prof_mem_format_bytes(char *buf, size_t len, double bytes)
{
    static const char *const units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    int u = 0;
    double v = bytes;
    while (v >= 1024.0 && u < 4) {
        v /= 1024.0;
        u++;
    }
    return u == 0 ? snprintf(buf, len, "%.0f B", v) : snprintf(buf, len, "%.2f %s", v, units[u]);
}

void prof_mem_print_oom(const MemTracker *t, FILE *f, int rank)
{
    const MemOom *o = &t->oom;
    if (!o->happened) return;
    char req[32], used[32], lim[32], c[32];
    prof_mem_format_bytes(req, sizeof req, (double)o->request);
    prof_mem_format_bytes(used, sizeof used, (double)o->current_total);
    if (o->limit) {
        prof_mem_format_bytes(lim, sizeof lim, (double)o->limit);
        fprintf(f, "rank %d: out of memory in phase %s: request %s for '%s' (%s) with %s of %s in use\n",
                rank, o->phase, req, o->what, prof_mem_category_name(o->category), used, lim);
        if (o->request <= o->limit && o->current_total + o->request <= o->limit)
            fprintf(f, "  the device itself refused the allocation below the limit\n");
    } else {
        fprintf(f, "rank %d: out of memory in phase %s: request %s for '%s' (%s) with %s in use "
                   "(the device refused the allocation; no limit set)\n",
                rank, o->phase, req, o->what, prof_mem_category_name(o->category), used);
    }
    fprintf(f, "  in use by category at the failure (binary units):\n");
    for (int i = 0; i < MEM_CATEGORY_COUNT; i++) {
        prof_mem_format_bytes(c, sizeof c, (double)o->current[i]);
        fprintf(f, "    %-12s %12s\n", prof_mem_category_name((MemCategory)i), c);
    }
    prof_mem_format_bytes(c, sizeof c, (double)t->peak_total);
    fprintf(f, "  peak so far: %s in phase %s\n", c, t->peak_phase);
}

const MemSample *prof_mem_timeline(const MemTracker *t, int *n)
{
    if (n) *n = t->samples ? t->ntl + (t->pending > 0) : 0;
    return t->samples;
}
