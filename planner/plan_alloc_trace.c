/* plan_alloc_trace.c — reading an allocation sequence and replaying it through the caching
 * allocator model. Addresses become handles: each allocation is one, and a free (or a
 * record_stream) belongs to the latest allocation at its address before it. */
#include "plan_alloc_trace.h"

#include <ctype.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "plan_util.h"

typedef struct {
    uint64_t addr;
    int idx;
} AddrRef;

static int ref_cmp(const void *x, const void *y) {
    const AddrRef *p = x, *q = y;
    if (p->addr != q->addr) return p->addr < q->addr ? -1 : 1;
    return (p->idx > q->idx) - (p->idx < q->idx);
}

static int push_ev(AllocTrace *t, AllocEv e) {
    if (plan_grow((void **)&t->ev, &t->cap, t->n + 1, sizeof *t->ev)) return -1;
    t->ev[t->n++] = e;
    return 0;
}

static int mark_index(AllocTrace *t, const char *name) {
    for (int i = 0; i < t->n_marks; i++)
        if (!strcmp(t->marks[i], name)) return i;
    if (plan_grow((void **)&t->marks, &t->cap_marks, t->n_marks + 1, sizeof *t->marks)) return -1;
    snprintf(t->marks[t->n_marks], sizeof t->marks[0], "%s", name);
    return t->n_marks++;
}

static int parse_u64(const char *s, int base, uint64_t *v) {
    if (!s) return -1;
    char *end;
    errno = 0;
    unsigned long long x = strtoull(s, &end, base);
    if (errno || end == s || *end || *s == '-') return -1;
    *v = x;
    return 0;
}

static int parse_stream(const char *s, int *stream) {
    uint64_t v = 0;
    if (s && (parse_u64(s, 10, &v) || v >= PLAN_ALLOC_STREAMS)) return -1;
    *stream = (int)v;
    return 0;
}

static void read_comment(AllocTrace *t, const char *line) {
    uint64_t v;
    char num[32];
    if (sscanf(line, "# peak_excl_backend %31s", num) == 1 && !parse_u64(num, 10, &v)) t->harness_peak = v;
    if (!strncmp(line, "# setup ", 8)) snprintf(t->setup, sizeof t->setup, "%.159s", line + 8);
}

/* One line into an event; *addr is its address (a, x, f, r). -1: not a valid line. */
static int parse_line(AllocTrace *t, char *line, AllocEv *e, uint64_t *addr, int *gloo) {
    char *save, *op = strtok_r(line, " \t", &save), *p1 = strtok_r(NULL, " \t", &save);
    char *p2 = strtok_r(NULL, " \t", &save), *p3 = strtok_r(NULL, " \t", &save);
    if (!op || op[1] || strtok_r(NULL, " \t", &save)) return -1;
    *gloo = 0;
    switch (op[0]) {
    case 'x': *gloo = 1; /* fall through */
    case 'a':
        e->kind = AEV_ALLOC;
        /* a size above 2^50 bytes (1 PiB) is no allocation a GPU makes: refused, so that sums stay exact */
        return parse_u64(p1, 16, addr) || parse_u64(p2, 10, &e->size) || e->size > (1ull << 50) || (*gloo && p3) ||
               parse_stream(p3, &e->stream) ? -1 : 0;
    case 'f':
        e->kind = AEV_FREE;
        return p2 || parse_u64(p1, 16, addr) ? -1 : 0;
    case 'r':
        e->kind = AEV_RECORD;
        return p3 || !p2 || parse_u64(p1, 16, addr) || parse_stream(p2, &e->stream) ? -1 : 0;
    case 's':
        e->kind = AEV_SYNC;
        return p2 || !p1 || parse_stream(p1, &e->stream) ? -1 : 0;
    case 'e':
        e->kind = AEV_EMPTY;
        return p1 ? -1 : 0;
    case 'm':
        e->kind = AEV_MARK;
        return !p1 || p2 || (e->id = mark_index(t, p1)) < 0 ? -1 : 0;
    }
    return -1;
}

/* Gives each free and record_stream the handle of the allocation it refers to and drops those
   that refer to none or to a gloo buffer. gone[i]: event i is dropped. */
static int link_addresses(AllocTrace *t, const uint64_t *addr, const char *gloo, char *gone) {
    int n = 0;
    for (int i = 0; i < t->n; i++) n += t->ev[i].kind <= AEV_RECORD;
    AddrRef *r = malloc((size_t)(n ? n : 1) * sizeof *r);
    if (!r) return -1;
    n = 0;
    for (int i = 0; i < t->n; i++)
        if (t->ev[i].kind <= AEV_RECORD) r[n++] = (AddrRef){addr[i], i};
    qsort(r, (size_t)n, sizeof *r, ref_cmp);
    int cur = -1;   /* the live allocation's event at this address */
    for (int k = 0; k < n; k++) {
        int i = r[k].idx;
        if (k && r[k - 1].addr != r[k].addr) cur = -1;
        AllocEv *e = &t->ev[i];
        if (e->kind == AEV_ALLOC) {
            cur = i;
            gone[i] = gloo[i];
            continue;
        }
        if (cur < 0 || gloo[cur]) {
            gone[i] = 1;
            t->unmatched_frees += cur < 0;
        } else e->id = t->ev[cur].id;
        if (e->kind == AEV_FREE) cur = -1;
    }
    free(r);
    return 0;
}

static int read_lines(FILE *f, AllocTrace *t, uint64_t **addr, char **gloo, char *err, size_t errlen) {
    char line[512];
    long no = 0;
    int cap_a = 0, cap_g = 0;
    while (fgets(line, sizeof line, f)) {
        no++;
        size_t len = strlen(line);
        while (len && isspace((unsigned char)line[len - 1])) line[--len] = 0;
        if (line[0] == '#') read_comment(t, line);
        if (!len || line[0] == '#') continue;
        AllocEv e = {.line = no};
        uint64_t a = 0;
        int g;
        char copy[512];
        snprintf(copy, sizeof copy, "%s", line);
        if (parse_line(t, line, &e, &a, &g)) {
            snprintf(err, errlen, "line %ld: '%.80s' is not an allocation event (a ADDR SIZE [STREAM], "
                     "x ADDR SIZE, f ADDR, r ADDR STREAM, s STREAM, e, m NAME; SIZE in bytes up to 2^50)", no, copy);
            return -1;
        }
        if (e.kind == AEV_ALLOC) {
            e.id = g ? -1 : t->n_allocs++;
            t->gloo_allocs += g;
        }
        if (push_ev(t, e)) goto oom;
        if (plan_grow((void **)addr, &cap_a, t->n, sizeof **addr) || plan_grow((void **)gloo, &cap_g, t->n, 1)) goto oom;
        (*addr)[t->n - 1] = a;
        (*gloo)[t->n - 1] = (char)g;
    }
    if (ferror(f)) {
        snprintf(err, errlen, "read error after line %ld", no);
        return -1;
    }
    return 0;
oom:
    snprintf(err, errlen, "out of memory at line %ld", no);
    return -1;
}

int plan_alloc_trace_read(FILE *f, AllocTrace *t, char *err, size_t errlen) {
    memset(t, 0, sizeof *t);
    uint64_t *addr = NULL;
    char *gloo = NULL, *gone = NULL;
    int rc = read_lines(f, t, &addr, &gloo, err, errlen);
    if (!rc && t->n) {
        gone = calloc((size_t)t->n, 1);
        rc = !gone || link_addresses(t, addr, gloo, gone) ? -1 : 0;
        if (rc) snprintf(err, errlen, "out of memory");
    }
    int k = 0;
    for (int i = 0; !rc && i < t->n; i++)
        if (!gone[i]) t->ev[k++] = t->ev[i];
    if (!rc) t->n = k;
    free(addr);
    free(gloo);
    free(gone);
    if (rc) plan_alloc_trace_free(t);
    return rc;
}

void plan_alloc_trace_free(AllocTrace *t) {
    free(t->ev);
    free(t->marks);
    memset(t, 0, sizeof *t);
}

/* The whole sequence's figures: the current ones, with each peak the larger of before and
   after the window's reset. */
static PlanAllocStats merge_peaks(const PlanAllocStats *pre, const PlanAllocStats *now) {
    PlanAllocStats w = *now;
    if (pre->max_allocated > now->max_allocated) {
        w.max_allocated = pre->max_allocated;
        w.reserved_at_max_allocated = pre->reserved_at_max_allocated;
    }
    if (pre->max_reserved > w.max_reserved) w.max_reserved = pre->max_reserved;
    if (pre->max_requested > w.max_requested) w.max_requested = pre->max_requested;
    if (pre->max_segments > w.max_segments) w.max_segments = pre->max_segments;
    return w;
}

static int replay_event(PlanAlloc *a, const AllocEv *e, AllocReplay *r) {
    switch (e->kind) {
    case AEV_ALLOC: {
        int rc = plan_alloc_malloc(a, e->id, e->size, e->stream);
        if (rc == 1 && !r->first_oom_line) r->first_oom_line = e->line;
        return rc < 0 ? -1 : 0;
    }
    case AEV_FREE: plan_alloc_free(a, e->id); return 0;   /* -1: it ran out of memory earlier */
    case AEV_RECORD: plan_alloc_record_stream(a, e->id, e->stream); return 0;
    case AEV_SYNC: return plan_alloc_sync(a, e->stream);
    case AEV_EMPTY: plan_alloc_empty_cache(a); return 0;
    case AEV_MARK: return 0;
    }
    return -1;
}

int plan_alloc_replay(const AllocTrace *t, const PlanAllocConfig *c, const char *from, AllocReplay *r,
                      char *err, size_t errlen) {
    memset(r, 0, sizeof *r);
    if (plan_alloc_config_check(c, err, errlen)) return -1;
    PlanAlloc *a = plan_alloc_new(c);
    if (!a) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    PlanAllocStats pre = *plan_alloc_stats(a);
    for (int i = 0; i < t->n; i++) {
        const AllocEv *e = &t->ev[i];
        if (e->kind == AEV_MARK && from && !r->has_window && !strcmp(t->marks[e->id], from)) {
            pre = *plan_alloc_stats(a);
            plan_alloc_reset_peaks(a);
            r->has_window = 1;
        }
        if (replay_event(a, e, r)) {
            snprintf(err, errlen, "line %ld: the allocator model failed (out of host memory?)", e->line);
            plan_alloc_free_all(a);
            return -1;
        }
    }
    r->window = *plan_alloc_stats(a);
    r->whole = merge_peaks(&pre, &r->window);
    plan_alloc_free_all(a);
    return 0;
}
