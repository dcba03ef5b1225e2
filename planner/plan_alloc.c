/* plan_alloc.c — PyTorch's CUDA caching allocator, rule by rule.
 *
 * Source read: c10/cuda/CUDACachingAllocator.cpp as of a tree whose headers match torch 2.15's
 * (the wheel's include/c10/cuda/CUDAAllocatorConfig.h: expandable_segments_reserve,
 * per_process_memory_fraction; include/c10/core/AllocatorConfig.h: the constants and
 * large_segment_size_mb), class DeviceCachingAllocator; the function named in each comment is
 * that class's unless said otherwise. The wheel ships no .cpp; docs/formulas.md "The caching
 * allocator" says which copy was read.
 *
 * What is left out: CUDA-graph private pools and user mempools, IPC, the free-memory callbacks
 * (none registered by default), throw_on_cudamalloc_oom, and memory other processes take
 * (capacity stands for what cudaMalloc can get). Addresses are virtual: segments are laid out
 * one after another in creation order, which decides only best-fit ties. */
#include "plan_alloc.h"


#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "plan_util.h"

/* include/c10/core/AllocatorConfig.h (torch 2.15 wheel), lines 16-24 */
#define K_SMALL_BUFFER 2097152ull     /* kSmallBuffer: small requests share 2 MiB segments */
#define K_MIN_BLOCK 512ull            /* kMinBlockSize: every size rounds to 512 B */
#define K_SMALL_SIZE 1048576ull       /* kSmallSize: the small pool takes requests <= 1 MiB */
#define K_MIN_LARGE_ALLOC 10485760ull /* kMinLargeAlloc: 1-10 MiB requests get a large segment */
#define K_ROUND_LARGE 2097152ull      /* kRoundLarge: larger requests round to 2 MiB */
#define K_LARGE_BUFFER 20971520ull    /* kLargeBuffer / large_segment_size default: 20 MiB */
#define MB 1048576ull

typedef struct {
    int seg, prev, next;           /* owning segment; neighbours in it (-1 at its ends) */
    uint64_t off, size, requested; /* bytes from the segment's start; block size; asked for */
    int stream;
    unsigned char allocated, mapped, live;
    int free_pos;                  /* index in its pool's free (mapped) or unmapped list; -1 */
    int events;                    /* outstanding record_stream events (event_count) */
    uint32_t uses;                 /* streams recorded by record_stream (stream_uses), a bit each */
    int64_t gc_base;               /* the pool's get_free_block count when it entered the pool */
} Blk;

typedef struct {
    int small, stream, expandable, live;
    uint64_t base, size;           /* virtual address; bytes (an expandable one: its reserve) */
    uint64_t page;                 /* expandable: the mapping granularity */
} Seg;

typedef struct { int *v; int n, cap; } IntVec;

/* The best-fit index: the free blocks of a pool with their keys, in best-fit order (fit_less),
   cut into chunks of at most FIT_CHUNK so that an insertion or removal moves one chunk, not the
   whole index (a pool holds thousands of cached blocks); the last key of each chunk kept apart
   for the search. A block's key: stream, size, then address (the segment's registration counter,
   then the offset: segments take ascending addresses in the order they are created, so the two
   orders agree). Stream and size share one word, the stream above the size in 512 B units
   (every block's size is a multiple of kMinBlockSize: round_size, segment sizes, splits and
   pages all are), so the order is two comparisons of words. */
typedef struct { uint64_t key, addr; int blk; } FitEnt;
#define FIT_UNIT_BITS 9            /* log2 kMinBlockSize */
#define FIT_SIZE_BITS (64 - FIT_UNIT_BITS)   /* the size's units below the stream */
#define FIT_CHUNK 32               /* 32 against 64: 2-4 % less CPU on bench_startup's plans (a
                                      shorter move per insertion or removal, one more level of
                                      chunks searched) */
typedef struct { int n; FitEnt e[FIT_CHUNK]; } FitChunk;
typedef struct {
    FitChunk **c;                  /* the chunks in order, none empty */
    FitEnt *last;                  /* each chunk's last key */
    int nc, capc, capl, n;         /* chunks; entries in all */
    int hint_c, hint_i;            /* where the last erase left a gap (-1: none since, or the
                                      index changed after it): an insertion tries it first */
} FitIdx;
typedef struct { int c, i; } FitPos;   /* chunk, entry; c == nc: the end */
typedef struct { int blk, stream; uint64_t seq; } PendEv;

struct PlanAlloc {
    PlanAllocConfig c;
    uint64_t allowed;              /* allowed_memory_maximum (memory fraction), when limited */
    int limited;                   /* a fraction below 1 is set (allowed_memory_maximum has a value) */
    Blk *b; int nb, capb;
    IntVec spare;                  /* reusable block slots */
    Seg *s; int ns, caps;
    IntVec pool[2];                /* free mapped blocks: [0] large_blocks, [1] small_blocks */
    FitIdx fit[2];                 /* the same blocks in best-fit order (fit_less): the searches
                                      are binary searches; pool[] keeps the order that
                                      release_blocks and garbage_collect walk */
    IntVec unmapped[2];            /* unmapped blocks of expandable segments, per pool */
    int64_t gc_calls[2];           /* BlockPool::get_free_blocks_call_count */
    int fit_stale;                 /* list_del leaves fit[] to fit_compact (a pool emptied at once) */
    int *id_blk; int nid;          /* caller's handle -> block (-1) */
    PendEv *ev; int nev, capev;    /* cuda_events, in the order recorded */
    uint64_t rec_seq[PLAN_ALLOC_STREAMS], done_seq[PLAN_ALLOC_STREAMS];
    uint64_t next_base;
    long calls;
    uint64_t max_ask;              /* the most reserved + bytes a capacity check compared */
    PlanAllocStats st;
};

static int vec_push(IntVec *v, int x) {
    if (plan_grow((void **)&v->v, &v->cap, v->n + 1, sizeof *v->v)) return -1;
    v->v[v->n++] = x;
    return v->n - 1;
}

/* ---- configuration ---------------------------------------------------------------------- */

void plan_alloc_config_defaults(PlanAllocConfig *c) {
    memset(c, 0, sizeof *c);
    c->max_split_size = UINT64_MAX;                /* AcceleratorAllocatorConfig::max_split_size_ */
    c->large_segment_size = K_LARGE_BUFFER;        /* large_segment_size_{20971520} */
    c->max_non_split_rounding = K_LARGE_BUFFER;    /* constructor: = large_segment_size_ */
    c->memory_fraction = 1.0;                      /* CUDAAllocatorConfig m_per_process_memory_fraction */
}

void plan_alloc_config_describe(const PlanAllocConfig *c, char *buf, size_t len) {
    PlanAllocConfig d;
    plan_alloc_config_defaults(&d);
    size_t n = 0;
    buf[0] = 0;
#define SAY(...) (n < len ? (n += (size_t)snprintf(buf + n, len - n, __VA_ARGS__)) : n)
    if (c->max_split_size != d.max_split_size) SAY("%smax_split_size_mb:%llu", n ? "," : "", (unsigned long long)(c->max_split_size >> 20));
    if (c->max_non_split_rounding != d.max_non_split_rounding)
        SAY("%smax_non_split_rounding_mb:%llu", n ? "," : "", (unsigned long long)(c->max_non_split_rounding >> 20));
    if (c->large_segment_size != d.large_segment_size)
        SAY("%slarge_segment_size_mb:%llu", n ? "," : "", (unsigned long long)(c->large_segment_size >> 20));
    int divs = 0, same = 1;
    for (int i = 0; i < PLAN_ALLOC_INTERVALS; i++) {
        divs |= c->roundup_divisions[i] > 1;
        same &= c->roundup_divisions[i] == c->roundup_divisions[0];
    }
    if (divs && same) SAY("%sroundup_power2_divisions:%u", n ? "," : "", c->roundup_divisions[0]);
    else if (divs) {   /* the list form parse_divisions reads: interval i starts at 2^i MiB */
        SAY("%sroundup_power2_divisions:[", n ? "," : "");
        for (int i = 0; i < PLAN_ALLOC_INTERVALS - 1; i++) SAY("%s%llu:%u", i ? "," : "", 1ull << i, c->roundup_divisions[i]);
        SAY(",>:%u]", c->roundup_divisions[PLAN_ALLOC_INTERVALS - 1]);
    }
    if (c->gc_threshold > 0) SAY("%sgarbage_collection_threshold:%g", n ? "," : "", c->gc_threshold);
    if (c->expandable_segments) SAY("%sexpandable_segments:True", n ? "," : "");
    if (c->memory_fraction < 1.0) SAY("%sper_process_memory_fraction:%g", n ? "," : "", c->memory_fraction);
#undef SAY
    if (!n) snprintf(buf, len, "torch's defaults");
}

int plan_alloc_config_check(const PlanAllocConfig *c, char *err, size_t errlen) {
    if (c->memory_fraction < 1.0 && c->device_total == 0) {
        snprintf(err, errlen, "a memory fraction of %g needs the device's total memory", c->memory_fraction);
        return -1;
    }
    if (c->memory_fraction < 0.0 || c->memory_fraction > 1.0) {
        snprintf(err, errlen, "memory fraction %g: must be in [0, 1]", c->memory_fraction);
        return -1;
    }
    return 0;
}

/* ---- the rules on sizes ----------------------------------------------------------------- */

static int log2_floor(uint64_t x) { return 63 - __builtin_clzll(x); }

/* AcceleratorAllocatorConfig::roundup_power2_divisions(size) (c10/core/AllocatorConfig.cpp):
   interval 0 holds sizes below 2 MiB, interval i the sizes in [2^(20+i), 2^(21+i)), the last
   everything from 32 GiB up. */
static uint32_t divisions_for(const PlanAllocConfig *c, uint64_t size) {
    int lg = log2_floor(size);
    int i = lg > 20 ? lg - 20 : 0;
    if (i > PLAN_ALLOC_INTERVALS - 1) i = PLAN_ALLOC_INTERVALS - 1;
    return c->roundup_divisions[i];
}

/* roundup_power2_next_division: the next of `div` equal steps between two powers of two
   (1200 with 4 divisions: 1024, 1280, 1536, 1792 -> 1280); a power of two stays. */
static uint64_t roundup_power2_next_division(uint64_t size, uint64_t div) {
    if ((size & (size - 1)) == 0) return size;
    uint64_t floor2 = 1ull << log2_floor(size);
    uint64_t step = floor2 >> log2_floor(div);
    if (step == 0) return floor2 << 1;
    uint64_t lo = size & ~(step - 1);
    return lo == size ? size : lo + step;
}

/* round_size: at least kMinBlockSize, then to a power-of-2 division when configured for the
   size's interval and the size exceeds 512 B x divisions, else up to a multiple of 512 B. */
uint64_t plan_alloc_round_size(const PlanAllocConfig *c, uint64_t size) {
    if (size < K_MIN_BLOCK) return K_MIN_BLOCK;
    uint64_t div = divisions_for(c, size);
    if (div > 1 && size > K_MIN_BLOCK * div) return roundup_power2_next_division(size, div);
    return K_MIN_BLOCK * ((size + K_MIN_BLOCK - 1) / K_MIN_BLOCK);
}

/* get_allocation_size: the segment cudaMalloc'd when no cached block fits. */
uint64_t plan_alloc_segment_size(const PlanAllocConfig *c, uint64_t size) {
    if (size <= K_SMALL_SIZE) return K_SMALL_BUFFER;
    if (size < K_MIN_LARGE_ALLOC) return c->large_segment_size;
    return K_ROUND_LARGE * ((size + K_ROUND_LARGE - 1) / K_ROUND_LARGE);
}

/* ---- bookkeeping -------------------------------------------------------------------------- */

static void note_peaks(PlanAlloc *a) {
    PlanAllocStats *st = &a->st;
    if (st->allocated >= st->max_allocated) {
        st->max_allocated = st->allocated;
        st->reserved_at_max_allocated = st->reserved;
    }
    if (st->reserved > st->max_reserved) st->max_reserved = st->reserved;
    if (st->requested > st->max_requested) st->max_requested = st->requested;
    if (st->segments > st->max_segments) st->max_segments = st->segments;
}

/* What a capacity check is about to compare: a capacity at or above every ask so far refused
   nothing so far (plan_alloc_max_ask). */
static void note_ask(PlanAlloc *a, uint64_t bytes) {
    if (a->st.reserved + bytes > a->max_ask) a->max_ask = a->st.reserved + bytes;
}

static int new_block(PlanAlloc *a, int seg, uint64_t off, uint64_t size, int mapped) {
    int i;
    if (a->spare.n) i = a->spare.v[--a->spare.n];
    else {
        if (plan_grow((void **)&a->b, &a->capb, a->nb + 1, sizeof *a->b)) return -1;
        i = a->nb++;
    }
    Blk *b = &a->b[i];
    memset(b, 0, sizeof *b);
    b->seg = seg;
    b->prev = b->next = -1;
    b->off = off;
    b->size = size;
    b->stream = a->s[seg].stream;
    b->mapped = (unsigned char)mapped;
    b->live = 1;
    b->free_pos = -1;
    return i;
}

static void drop_block(PlanAlloc *a, int i) {
    a->b[i].live = 0;
    vec_push(&a->spare, i);   /* a failed push only leaks the slot */
}

static int new_segment(PlanAlloc *a, int small, int stream, uint64_t size, int expandable, uint64_t page) {
    if (plan_grow((void **)&a->s, &a->caps, a->ns + 1, sizeof *a->s)) return -1;
    Seg *s = &a->s[a->ns];
    s->small = small;
    s->stream = stream;
    s->expandable = expandable;
    s->live = 1;
    s->base = a->next_base;
    s->size = size;
    s->page = page;
    a->next_base += size;
    a->st.segments++;
    return a->ns++;
}

static int blk_small(const PlanAlloc *a, int i) { return a->s[a->b[i].seg].small; }
static int blk_exp(const PlanAlloc *a, int i) { return a->s[a->b[i].seg].expandable; }

/* The free list a block belongs to: the pool's blocks (mapped) or its unmapped set. */
static IntVec *list_of(PlanAlloc *a, int i) {
    int sm = blk_small(a, i);
    return a->b[i].mapped ? &a->pool[sm] : &a->unmapped[sm];
}

static uint64_t blk_addr(const PlanAlloc *a, int i) { return a->s[a->b[i].seg].base + a->b[i].off; }

/* Block order in a pool (BlockComparatorSizeCounterAddress within a stream): size, then the
   segment's registration counter (creation order), then address; the best-fit index orders by
   stream first. A block's key does not change while it is in a pool (every resize or move takes
   it out first), and its address is unique. A search key with address 0 comes before every
   block of its stream and size. */
static FitEnt fit_key(const PlanAlloc *a, int i) {
    const Blk *p = &a->b[i];
    return (FitEnt){(uint64_t)p->stream << FIT_SIZE_BITS | p->size >> FIT_UNIT_BITS, blk_addr(a, i), i};
}

/* The search key before every block of this stream holding at least size bytes: the size in
   whole units rounded up (blocks hold whole units); past the last unit, the next stream's start. */
static FitEnt fit_bound(int stream, uint64_t size) {
    uint64_t units = (size >> FIT_UNIT_BITS) + ((size & ((1ull << FIT_UNIT_BITS) - 1)) != 0);
    return (FitEnt){((uint64_t)stream << FIT_SIZE_BITS) + units, 0, -1};
}

static int fit_same(const FitEnt *x, const FitEnt *y) { return x->key == y->key && x->addr == y->addr && x->blk == y->blk; }

static int fit_stream(const FitEnt *e) { return (int)(e->key >> FIT_SIZE_BITS); }

static int fit_less(const FitEnt *x, const FitEnt *y) {   /* without branches: the searches' order is unpredictable */
    return (x->key < y->key) | ((x->key == y->key) & (x->addr < y->addr));
}

/* The first of v[0..n) (n >= 1) not before k, n when none: halving without branches. */
static int fit_bisect(const FitEnt *v, int n, const FitEnt *k) {
    const FitEnt *b = v;
    for (int len = n; len > 1;) {
        int half = len / 2;
        b += fit_less(&b[half - 1], k) ? half : 0;
        len -= half;
    }
    return (int)(b - v) + fit_less(b, k);
}

/* The first position whose key is not before k (lower bound; the end when none). */
static FitPos fit_lower(const FitIdx *f, const FitEnt *k) {
    if (!f->nc) return (FitPos){0, 0};
    int c = fit_bisect(f->last, f->nc, k);   /* the first chunk whose last key is not before k */
    if (c == f->nc) return (FitPos){f->nc, 0};
    return (FitPos){c, fit_bisect(f->c[c]->e, f->c[c]->n, k)};
}

static const FitEnt *fit_at(const FitIdx *f, FitPos p) {
    return p.c >= 0 && p.c < f->nc ? &f->c[p.c]->e[p.i] : NULL;
}

static FitPos fit_next(const FitIdx *f, FitPos p) {
    return p.i + 1 < f->c[p.c]->n ? (FitPos){p.c, p.i + 1} : (FitPos){p.c + 1, 0};
}

static FitPos fit_prev(const FitIdx *f, FitPos p) {
    if (p.i > 0) return (FitPos){p.c, p.i - 1};
    return p.c > 0 ? (FitPos){p.c - 1, f->c[p.c - 1]->n - 1} : (FitPos){-1, 0};
}

/* An empty chunk at position at. -1 out of host memory (nothing changed). */
static int fit_chunk_new(FitIdx *f, int at) {
    if (plan_grow((void **)&f->c, &f->capc, f->nc + 1, sizeof *f->c) ||
        plan_grow((void **)&f->last, &f->capl, f->nc + 1, sizeof *f->last)) return -1;
    FitChunk *ch = malloc(sizeof *ch);
    if (!ch) return -1;
    ch->n = 0;
    memmove(f->c + at + 1, f->c + at, sizeof *f->c * (size_t)(f->nc - at));
    memmove(f->last + at + 1, f->last + at, sizeof *f->last * (size_t)(f->nc - at));
    f->c[at] = ch;
    f->nc++;
    return 0;
}

static void fit_chunk_drop(FitIdx *f, int at) {
    free(f->c[at]);
    memmove(f->c + at, f->c + at + 1, sizeof *f->c * (size_t)(f->nc - at - 1));
    memmove(f->last + at, f->last + at + 1, sizeof *f->last * (size_t)(f->nc - at - 1));
    f->nc--;
}

/* k enters the index in order; a full chunk splits in two. -1 out of host memory (not indexed).
   Where the last change was an erase and k falls in its gap (a block split or merged takes its
   old key's neighbours: about half the insertions of a gpt2-xl plan), no search: the gap is the
   first position not before k, as fit_lower would find (the entry there is not before k, the one
   before it, in its chunk or the previous chunk's last, is). */
static int fit_insert(FitIdx *f, FitEnt k) {
    FitPos p;
    int hc = f->hint_c, hi = f->hint_i;
    f->hint_c = -1;
    if (hc >= 0 && hc < f->nc && hi < f->c[hc]->n && !fit_less(&f->c[hc]->e[hi], &k) &&
        (hi > 0 ? fit_less(&f->c[hc]->e[hi - 1], &k) : hc == 0 || fit_less(&f->last[hc - 1], &k))) {
        p = (FitPos){hc, hi};   /* the gap is k's place: fit_lower's answer without the search */
    } else p = fit_lower(f, &k);
    if (!f->nc && fit_chunk_new(f, 0)) return -1;
    if (p.c == f->nc) p = (FitPos){f->nc - 1, f->c[f->nc - 1]->n};   /* after every key */
    FitChunk *ch = f->c[p.c];
    if (ch->n == FIT_CHUNK) {
        int h = FIT_CHUNK / 2;
        if (fit_chunk_new(f, p.c + 1)) return -1;
        FitChunk *up = f->c[p.c + 1];
        memcpy(up->e, ch->e + h, sizeof *ch->e * (size_t)(FIT_CHUNK - h));
        up->n = FIT_CHUNK - h;
        ch->n = h;
        f->last[p.c] = ch->e[h - 1];
        f->last[p.c + 1] = up->e[up->n - 1];
        if (p.i > h) {
            p = (FitPos){p.c + 1, p.i - h};
            ch = up;
        }
    }
    memmove(ch->e + p.i + 1, ch->e + p.i, sizeof *ch->e * (size_t)(ch->n - p.i));
    ch->e[p.i] = k;
    if (p.i == ch->n++) f->last[p.c] = k;
    f->n++;
    return 0;
}

/* The entry at p leaves; an emptied chunk goes, a chunk under a quarter full joins its
   successor when both fit in one. */
static void fit_erase(FitIdx *f, FitPos p) {
    FitChunk *ch = f->c[p.c];
    memmove(ch->e + p.i, ch->e + p.i + 1, sizeof *ch->e * (size_t)(ch->n - p.i - 1));
    ch->n--;
    f->n--;
    f->hint_c = -1;
    if (!ch->n) {
        fit_chunk_drop(f, p.c);
        return;
    }
    f->hint_c = p.c;
    f->hint_i = p.i;
    f->last[p.c] = ch->e[ch->n - 1];
    if (ch->n < FIT_CHUNK / 4 && p.c + 1 < f->nc && ch->n + f->c[p.c + 1]->n <= FIT_CHUNK) {
        FitChunk *nx = f->c[p.c + 1];
        memcpy(ch->e + ch->n, nx->e, sizeof *nx->e * (size_t)nx->n);
        ch->n += nx->n;
        f->last[p.c] = f->last[p.c + 1];
        fit_chunk_drop(f, p.c + 1);
    }
}

static void fit_free(FitIdx *f) {
    for (int k = 0; k < f->nc; k++) free(f->c[k]);
    free(f->c);
    free(f->last);
}

/* The first block of this stream at or after k in best-fit order, its position in *pos; -1. */
static int fit_first(const PlanAlloc *a, int small, int stream, uint64_t size, FitPos *pos) {
    const FitIdx *f = &a->fit[small];
    FitEnt k = fit_bound(stream, size);
    *pos = fit_lower(f, &k);
    const FitEnt *e = fit_at(f, *pos);
    return e && fit_stream(e) == stream ? e->blk : -1;
}

/* BlockPool::insert_into_blocks: the block enters its pool; gc_count_base restarts. */
static void list_add(PlanAlloc *a, int i) {
    a->b[i].gc_base = a->gc_calls[blk_small(a, i)];
    a->b[i].free_pos = vec_push(list_of(a, i), i);
    if (!a->b[i].mapped || a->b[i].free_pos < 0) return;
    fit_insert(&a->fit[blk_small(a, i)], fit_key(a, i));   /* as vec_push: a failure leaves it out of the searches */
}

/* The block leaves its free list (the last one takes its place). */
static void pool_remove(PlanAlloc *a, int i) {
    IntVec *v = list_of(a, i);
    int pos = a->b[i].free_pos, last = v->v[--v->n];
    v->v[pos] = last;
    a->b[last].free_pos = pos;
    a->b[i].free_pos = -1;
}

/* list_del of a block found at pos of its pool's index. */
static void list_del_at(PlanAlloc *a, int i, FitPos pos) {
    pool_remove(a, i);
    fit_erase(&a->fit[blk_small(a, i)], pos);
}

static void list_del(PlanAlloc *a, int i) {
    pool_remove(a, i);
    if (!a->b[i].mapped || a->fit_stale) return;
    FitIdx *f = &a->fit[blk_small(a, i)];
    FitEnt k = fit_key(a, i);
    FitPos p = fit_lower(f, &k);
    const FitEnt *e = fit_at(f, p);
    if (e && e->blk == i) fit_erase(f, p);   /* else never indexed (out of host memory) */
}

/* ---- the allocator ---------------------------------------------------------------------- */

PlanAlloc *plan_alloc_new(const PlanAllocConfig *c) {
    PlanAlloc *a = calloc(1, sizeof *a);
    if (!a) return NULL;
    a->c = *c;
    /* setMemoryFraction: allowed_memory_maximum = static_cast<size_t>(fraction x total) when the
       fraction is below 1 (0 allows nothing) */
    if (c->memory_fraction < 1.0 && c->device_total) {
        a->allowed = (uint64_t)(c->memory_fraction * (double)c->device_total);
        a->limited = 1;
    }
    a->st.first_oom_event = -1;
    a->next_base = 1ull << 32;
    a->fit[0].hint_c = a->fit[1].hint_c = -1;
    return a;
}

void plan_alloc_free_all(PlanAlloc *a) {
    if (!a) return;
    free(a->b);
    free(a->s);
    free(a->spare.v);
    for (int k = 0; k < 2; k++) {
        free(a->pool[k].v);
        fit_free(&a->fit[k]);
        free(a->unmapped[k].v);
    }
    free(a->id_blk);
    free(a->ev);
    free(a);
}

const PlanAllocStats *plan_alloc_stats(const PlanAlloc *a) { return &a->st; }

uint64_t plan_alloc_max_ask(const PlanAlloc *a) { return a->max_ask; }

void plan_alloc_set_capacity(PlanAlloc *a, uint64_t capacity) { a->c.capacity = capacity; }

/* A copy of v's n elements (NULL for none); *ok cleared when out of host memory. */
static void *dup_of(const void *v, size_t n, size_t size, int *ok) {
    if (!v || !n) return NULL;
    void *p = malloc(n * size);
    if (!p) *ok = 0;
    else memcpy(p, v, n * size);
    return p;
}

static void vec_dup(IntVec *to, const IntVec *from, int *ok) {
    to->v = dup_of(from->v, (size_t)from->n, sizeof *from->v, ok);
    to->cap = to->v ? from->n : 0;
}

PlanAlloc *plan_alloc_clone(const PlanAlloc *a) {
    PlanAlloc *x = malloc(sizeof *x);
    if (!x) return NULL;
    *x = *a;
    int ok = 1;
    x->b = dup_of(a->b, (size_t)a->nb, sizeof *a->b, &ok);
    x->capb = x->b ? a->nb : 0;
    x->s = dup_of(a->s, (size_t)a->ns, sizeof *a->s, &ok);
    x->caps = x->s ? a->ns : 0;
    x->id_blk = dup_of(a->id_blk, (size_t)a->nid, sizeof *a->id_blk, &ok);
    if (!x->id_blk) x->nid = 0;
    x->ev = dup_of(a->ev, (size_t)a->nev, sizeof *a->ev, &ok);
    x->capev = x->ev ? a->nev : 0;
    vec_dup(&x->spare, &a->spare, &ok);
    for (int k = 0; k < 2; k++) {
        vec_dup(&x->pool[k], &a->pool[k], &ok);
        vec_dup(&x->unmapped[k], &a->unmapped[k], &ok);
        const FitIdx *f = &a->fit[k];
        FitIdx *g = &x->fit[k];
        g->c = dup_of(f->c, (size_t)f->nc, sizeof *f->c, &ok);
        g->last = dup_of(f->last, (size_t)f->nc, sizeof *f->last, &ok);
        g->capc = g->c ? f->nc : 0;
        g->capl = g->last ? f->nc : 0;
        if (!g->c) { g->nc = 0; continue; }
        for (int j = 0; j < f->nc; j++) {
            int cok = 1;
            g->c[j] = dup_of(f->c[j], 1, sizeof *f->c[j], &cok);
            if (!cok) { ok = 0; g->nc = j; break; }
        }
    }
    if (!ok) {
        plan_alloc_free_all(x);
        return NULL;
    }
    return x;
}

/* BlockComparatorSizeCounterAddress within a stream, from the block's own fields (the index's
   order checked against it): stream, size, segment, offset. */
static int pool_less(const PlanAlloc *a, int i, int j) {
    const Blk *x = &a->b[i], *y = &a->b[j];
    if (x->stream != y->stream) return x->stream < y->stream;
    if (x->size != y->size) return x->size < y->size;
    if (x->seg != y->seg) return x->seg < y->seg;
    return x->off < y->off;
}

/* The best fit by a linear scan of the pool, as get_free_block searched before the index. */
static int scan_first(const PlanAlloc *a, int small, int stream, uint64_t size) {
    const IntVec *p = &a->pool[small];
    int it = -1;
    for (int j = 0; j < p->n; j++) {
        int i = p->v[j];
        if (a->b[i].stream != stream || a->b[i].size < size) continue;
        if (it < 0 || pool_less(a, i, it)) it = i;
    }
    return it;
}

int plan_alloc_check_index(const PlanAlloc *a) {
    for (int sm = 0; sm < 2; sm++) {
        const IntVec *p = &a->pool[sm];
        const FitIdx *f = &a->fit[sm];
        int n = 0, prev = -1;
        for (int c = 0; c < f->nc; c++) {
            const FitChunk *ch = f->c[c];
            if (ch->n < 1 || ch->n > FIT_CHUNK || !fit_same(&f->last[c], &ch->e[ch->n - 1])) return -1;
            for (int j = 0; j < ch->n; j++, n++) {
                int i = ch->e[j].blk;
                FitEnt k = fit_key(a, i);
                if (!a->b[i].live || !a->b[i].mapped || a->b[i].allocated || a->b[i].free_pos < 0 ||
                    p->v[a->b[i].free_pos] != i || blk_small(a, i) != sm || !fit_same(&k, &ch->e[j])) return -1;
                if (prev >= 0 && !pool_less(a, prev, i)) return -1;
                prev = i;
            }
        }
        if (n != p->n || n != f->n) return -1;
        for (int j = 0; j < p->n; j++)   /* every size a free block has, and one byte more */
            for (uint64_t d = 0; d < 2; d++) {
                int stream = a->b[p->v[j]].stream;
                uint64_t size = a->b[p->v[j]].size + d;
                FitPos pos;
                if (fit_first(a, sm, stream, size, &pos) != scan_first(a, sm, stream, size)) return -1;
            }
    }
    return 0;
}

void plan_alloc_reset_peaks(PlanAlloc *a) {
    PlanAllocStats *st = &a->st;
    st->max_allocated = st->allocated;
    st->reserved_at_max_allocated = st->reserved;
    st->max_reserved = st->reserved;
    st->max_requested = st->requested;
    st->max_segments = st->segments;
}

/* try_merge_blocks: src joins dst when it is free (not allocated, no outstanding event or
   stream use) and mapped alike. Returns 1 when merged. */
static int try_merge(PlanAlloc *a, int dst, int src) {
    if (src < 0) return 0;
    Blk *d = &a->b[dst], *s = &a->b[src];
    if (s->allocated || s->events > 0 || s->uses || d->mapped != s->mapped) return 0;
    list_del(a, src);
    if (d->prev == src) {          /* [src dst] */
        d->off = s->off;
        d->prev = s->prev;
        if (d->prev >= 0) a->b[d->prev].next = dst;
    } else {                       /* [dst src] */
        d->next = s->next;
        if (d->next >= 0) a->b[d->next].prev = dst;
    }
    d->size += s->size;
    drop_block(a, src);
    return 1;
}

/* free_block: a freed block merges with its free neighbours and goes back to its pool. */
static void free_block(PlanAlloc *a, int i) {
    try_merge(a, i, a->b[i].prev);
    try_merge(a, i, a->b[i].next);
    list_add(a, i);
}

/* process_events (at the start of every malloc) and synchronize_and_free_events (all of them,
   when cached blocks are released): an event whose stream has completed decrements its block's
   count; the last one returns the block to its pool. */
static void finish_events(PlanAlloc *a, int all) {
    int k = 0;
    for (int e = 0; e < a->nev; e++) {
        PendEv pe = a->ev[e];
        if (!all && pe.seq > a->done_seq[pe.stream]) {
            a->ev[k++] = pe;
            continue;
        }
        if (--a->b[pe.blk].events == 0) free_block(a, pe.blk);
    }
    a->nev = k;
}

/* release_block: cudaFree of a whole cached segment. */
static void release_block(PlanAlloc *a, int i) {
    Seg *s = &a->s[a->b[i].seg];
    list_del(a, i);
    a->st.reserved -= s->size;
    a->st.segments--;
    a->st.n_device_free++;
    s->live = 0;
    drop_block(a, i);
}

/* ---- expandable segments (Note [Expandable Segments]) ---------------------------------- */

static int allocatable(const PlanAlloc *a, int i) {
    return i >= 0 && !a->b[i].allocated && a->b[i].events == 0 && !a->b[i].uses;
}

/* find_expandable_block: the lowest-address unmapped range of this stream's segments that,
   with the free block before it and what follows, holds `size`; else a new segment reserving
   address space for 9/8 of the device (ExpandableSegment's constructor) with nothing mapped.
   -1 when even a fresh segment is smaller than size. */
static int find_expandable_block(PlanAlloc *a, int small, int stream, uint64_t size) {
    IntVec *u = &a->unmapped[small];
    uint64_t last = 0;
    for (;;) {
        int c = -1;
        for (int k = 0; k < u->n; k++) {
            int i = u->v[k];
            if (a->b[i].stream != stream || blk_addr(a, i) < last) continue;
            if (c < 0 || blk_addr(a, i) < blk_addr(a, c)) c = i;
        }
        if (c < 0) break;
        last = blk_addr(a, c) + 1;
        int start = allocatable(a, a->b[c].prev) ? a->b[c].prev : c;
        uint64_t bytes = 0;
        for (int x = start; bytes < size && allocatable(a, x); x = a->b[x].next) bytes += a->b[x].size;
        if (bytes >= size) return start;
    }
    uint64_t page = small ? K_SMALL_BUFFER : a->c.large_segment_size;
    uint64_t t = a->c.device_total, want = t ? t + t / 8 : 1ull << 48;
    uint64_t reserve = page * ((want + page - 1) / page);
    if (reserve < size) return -1;
    int seg = new_segment(a, small, stream, reserve, 1, page);
    int c = seg < 0 ? -1 : new_block(a, seg, 0, reserve, 0);
    if (c < 0) return -2;
    list_add(a, c);
    note_peaks(a);
    return c;
}

/* map_block: physical pages (2 MiB in the small pool, large_segment_size in the large one)
   for [start, start + size) of an unmapped block, rounded out to whole pages
   (ExpandableSegment::map); the mapped part merges with free neighbours and joins the pool.
   -1 when the device cannot give the pages (cuMemCreate out of memory: none stay mapped). */
static int map_block(PlanAlloc *a, int i, uint64_t size) {
    const Seg *s = &a->s[a->b[i].seg];
    uint64_t off = a->b[i].off, page = s->page;
    uint64_t bytes = ((off + size + page - 1) / page - off / page) * page;
    note_ask(a, bytes);
    if (a->c.capacity && a->st.reserved + bytes > a->c.capacity) { a->st.n_capacity_refusals++; return -1; }
    list_del(a, i);
    a->b[i].mapped = 1;
    if (bytes < a->b[i].size) {
        int r = new_block(a, a->b[i].seg, off + bytes, a->b[i].size - bytes, 0);
        if (r < 0) return -2;
        a->b[r].prev = i;
        a->b[r].next = a->b[i].next;
        if (a->b[r].next >= 0) a->b[a->b[r].next].prev = r;
        a->b[i].next = r;
        a->b[i].size = bytes;
        list_add(a, r);
    }
    try_merge(a, i, a->b[i].prev);
    try_merge(a, i, a->b[i].next);
    list_add(a, i);
    a->st.reserved += bytes;
    a->st.n_device_alloc++;
    note_peaks(a);
    return 0;
}

/* try_allocate_expandable_block: map pages from the candidate on until one free block holds
   size; it leaves the pool for the caller. Growth is by whole pages of what is asked
   (p.size()), not get_allocation_size. */
static int try_allocate_expandable(PlanAlloc *a, int small, int stream, uint64_t size) {
    int c = find_expandable_block(a, small, stream, size);
    if (c < 0) return c;
    if (!a->b[c].mapped) {
        uint64_t m = a->b[c].size < size ? a->b[c].size : size;
        int rc = map_block(a, c, m);
        if (rc) return rc;
    }
    while (a->b[c].size < size) {
        int n = a->b[c].next;
        uint64_t rem = size - a->b[c].size, m = rem < a->b[n].size ? rem : a->b[n].size;
        int rc = map_block(a, n, m);   /* n absorbs c */
        if (rc) return rc;
        c = n;
    }
    list_del(a, c);
    return c;
}

/* A new block beside i in its segment (before or after it), cached in its pool when `cache`. */
static int link_new(PlanAlloc *a, int i, uint64_t off, uint64_t size, int before, int cache) {
    int n = new_block(a, a->b[i].seg, off, size, 1);
    if (n < 0) return -1;
    if (before) {
        a->b[n].prev = a->b[i].prev;
        a->b[n].next = i;
        if (a->b[n].prev >= 0) a->b[a->b[n].prev].next = n;
        a->b[i].prev = n;
    } else {
        a->b[n].next = a->b[i].next;
        a->b[n].prev = i;
        if (a->b[n].next >= 0) a->b[a->b[n].next].prev = n;
        a->b[i].next = n;
    }
    if (cache) list_add(a, n);
    return 0;
}

/* unmap_block: the whole pages inside a free block go back to the device
   (ExpandableSegment::unmap); what is left at either end stays a free mapped block. */
static int unmap_block(PlanAlloc *a, int i) {
    uint64_t page = a->s[a->b[i].seg].page, off = a->b[i].off, end = off + a->b[i].size;
    uint64_t u0 = (off + page - 1) / page * page, u1 = end / page * page;
    if (u0 >= u1) return 0;
    list_del(a, i);
    if (u0 > off && link_new(a, i, off, u0 - off, 1, 1)) return -1;
    if (u1 < end && link_new(a, i, u1, end - u1, 0, 1)) return -1;
    a->b[i].off = u0;
    a->b[i].size = u1 - u0;
    a->b[i].mapped = 0;
    try_merge(a, i, a->b[i].prev);
    try_merge(a, i, a->b[i].next);
    list_add(a, i);
    a->st.reserved -= u1 - u0;
    a->st.n_device_free++;
    return 0;
}

/* ---- releasing cached memory -------------------------------------------------------------- */

static int blk_split(const PlanAlloc *a, int i) { return a->b[i].prev >= 0 || a->b[i].next >= 0; }

/* release_blocks: every free block that is a whole segment is cudaFree'd; the free pages of
   expandable segments are unmapped, and a segment left wholly unmapped is released
   (release_expandable_segment). */
/* The best-fit index without the blocks list_del took out of the pool while a->fit_stale was
   set (their free_pos is -1): one pass, the order kept. */
static void fit_compact(PlanAlloc *a, int small) {
    FitIdx *f = &a->fit[small];
    f->n = 0;
    f->hint_c = -1;
    for (int c = 0; c < f->nc;) {
        FitChunk *ch = f->c[c];
        int n = 0;
        for (int k = 0; k < ch->n; k++)
            if (a->b[ch->e[k].blk].free_pos >= 0) ch->e[n++] = ch->e[k];
        ch->n = n;
        f->n += n;
        if (!n) {
            fit_chunk_drop(f, c);
            continue;
        }
        f->last[c++] = ch->e[n - 1];
    }
    a->fit_stale = 0;
}

static int release_blocks(PlanAlloc *a, int small) {
    IntVec *p = &a->pool[small];
    IntVec todo = {0};
    int rc = 0;
    a->fit_stale = 1;   /* no search until fit_compact: each removal would move the index */
    for (int k = p->n - 1; k >= 0; k--) {   /* downward: a removal moves a visited block here */
        int i = p->v[k];
        if (blk_exp(a, i)) rc |= vec_push(&todo, i) < 0;
        else if (!blk_split(a, i)) release_block(a, i);
    }
    fit_compact(a, small);
    for (int k = 0; k < todo.n && !rc; k++) {
        int i = todo.v[k];
        rc = unmap_block(a, i);
        if (!rc && !a->b[i].mapped && !blk_split(a, i)) {
            list_del(a, i);
            a->s[a->b[i].seg].live = 0;
            a->st.segments--;
            drop_block(a, i);
        }
    }
    free(todo.v);
    return rc ? -1 : 0;
}

/* release_cached_blocks: wait for every recorded stream (synchronize_and_free_events), then
   release the large pool's and the small pool's free segments. */
static int release_cached(PlanAlloc *a) {
    finish_events(a, 1);
    return release_blocks(a, 0) | release_blocks(a, 1);
}

/* release_available_cached_blocks (only with max_split_size set): before the full release,
   free the smallest oversize (>= max_split_size) cached block of this stream that covers the
   request (at least max_split_size); failing one, oversize blocks from the largest down until
   their sum does. Expandable blocks are passed over. */
static int release_available(PlanAlloc *a, int small, int stream, uint64_t size) {
    uint64_t ms = a->c.max_split_size;
    if (ms == UINT64_MAX) return 0;
    uint64_t key = size < ms ? ms : size;
    const FitIdx *f = &a->fit[small];
    FitPos pos;
    int it = fit_first(a, small, stream, key, &pos);
    if (it >= 0 && !blk_exp(a, it)) {
        release_block(a, it);
        return 1;
    }
    FitEnt bound = fit_bound(stream, key);   /* the search key: everything before it is smaller than key */
    uint64_t released = 0;
    while (released < key) {
        const FitEnt *e = fit_at(f, fit_prev(f, fit_lower(f, &bound)));   /* the largest of this stream's blocks before bound */
        int c = e && fit_stream(e) == stream ? e->blk : -1;
        if (c < 0 || a->b[c].size < ms) break;
        bound = fit_key(a, c);
        if (!blk_exp(a, c)) {
            released += a->b[c].size;
            release_block(a, c);
        }
    }
    return released >= key;
}

/* garbage_collect_cached_blocks (garbage_collection_threshold, with a memory fraction): once
   the reserved bytes pass threshold x allowed, release whole cached large-pool segments whose
   age (get_free_block calls on the pool since they were cached) is at least the average, pass
   after pass, until the excess is reclaimed. */
static void garbage_collect(PlanAlloc *a) {
    uint64_t thr = (uint64_t)(a->c.gc_threshold * (double)a->allowed);
    if (a->st.reserved <= thr) return;
    uint64_t target = a->st.reserved - thr, reclaimed = 0, total_age = 0;
    IntVec *p = &a->pool[0];
    int count = 0;
    for (int k = 0; k < p->n; k++)
        if (!blk_split(a, p->v[k])) {
            total_age += (uint64_t)(a->gc_calls[0] - a->b[p->v[k]].gc_base);
            count++;
        }
    int freed = 1;
    while (reclaimed < target && freed && count > 0) {
        double age_thr = (double)total_age / count;
        freed = 0;
        for (int k = p->n - 1; k >= 0; k--) {
            int i = p->v[k];
            uint64_t age = (uint64_t)(a->gc_calls[0] - a->b[i].gc_base);
            if (blk_split(a, i) || blk_exp(a, i) || (double)age < age_thr) continue;
            freed = 1;
            reclaimed += a->b[i].size;
            total_age -= age;
            count--;
            release_block(a, i);
        }
    }
}

/* ---- allocation ---------------------------------------------------------------------------- */

static uint64_t expandable_size(const PlanAlloc *a, int i) {
    int n = a->b[i].next;
    return a->b[i].size + (n >= 0 && !a->b[n].mapped ? a->b[n].size : 0);
}

/* get_free_block: best fit — the smallest cached block of this stream's pool that holds the
   rounded size (ties: the older segment, then the lower address). In an expandable segment a
   block that could grow into unmapped space counts as that large, so a smaller fixed block
   after it wins. max_split_size: a request below it never takes an oversize block; one above
   it takes one only within max_non_split_rounding of its size. */
static int get_free_block(PlanAlloc *a, int small, int stream, uint64_t size) {
    if (a->limited && a->c.gc_threshold > 0) a->gc_calls[small]++;
    const FitIdx *f = &a->fit[small];
    FitPos pos;
    int it = fit_first(a, small, stream, size, &pos);
    if (it < 0) return -1;
    while (blk_exp(a, it)) {   /* the next candidate in pool order */
        FitPos np = fit_next(f, pos);
        const FitEnt *e = fit_at(f, np);
        int nx = e && fit_stream(e) == stream ? e->blk : -1;
        if (nx < 0 || expandable_size(a, nx) >= expandable_size(a, it)) break;
        it = nx;
        pos = np;
    }
    uint64_t ms = a->c.max_split_size, bs = a->b[it].size;
    if (size < ms && bs >= ms) return -1;
    if (size >= ms && bs >= size + a->c.max_non_split_rounding) return -1;
    list_del_at(a, it, pos);
    return it;
}

/* should_split: the small pool and expandable segments split off any remainder of 512 B or
   more; the large pool only a remainder above 1 MiB (kSmallSize), and never for a request of
   max_split_size or more. */
static int should_split(const PlanAlloc *a, int i, uint64_t size) {
    uint64_t rem = a->b[i].size - size;
    if (blk_small(a, i) || a->c.expandable_segments) return rem >= K_MIN_BLOCK;
    return size < a->c.max_split_size && rem > K_SMALL_SIZE;
}

/* alloc_found_block: the request takes the front of the block; a split remainder goes back to
   the pool. allocated_bytes counts the block's size (rounding and unsplit remainders
   included), requested_bytes what was asked. */
static int alloc_found(PlanAlloc *a, int i, uint64_t size, uint64_t orig) {
    if (should_split(a, i, size)) {
        if (link_new(a, i, a->b[i].off, size, 1, 0)) return -1;   /* the allocation: not cached */
        int n = a->b[i].prev;
        a->b[i].off += size;
        a->b[i].size -= size;
        list_add(a, i);
        i = n;
    }
    a->b[i].allocated = 1;
    a->b[i].requested = orig;
    a->st.allocated += a->b[i].size;
    a->st.requested += orig;
    note_peaks(a);
    return i;
}

/* alloc_block: a new segment of get_allocation_size bytes from cudaMalloc — or, with
   expandable segments, pages mapped onto this stream's segment. Fails past the memory
   fraction (allowed_memory_maximum, checked with the segment size in both cases) or the
   device's capacity. -1: out of memory, -2: out of host memory. */
static int alloc_block(PlanAlloc *a, int small, int stream, uint64_t size, uint64_t alloc_size, int retry) {
    if (retry) a->st.n_alloc_retries++;
    if (a->limited && a->st.reserved + alloc_size > a->allowed) return -1;
    if (a->c.expandable_segments) return try_allocate_expandable(a, small, stream, size);
    note_ask(a, alloc_size);
    if (a->c.capacity && a->st.reserved + alloc_size > a->c.capacity) { a->st.n_capacity_refusals++; return -1; }
    int seg = new_segment(a, small, stream, alloc_size, 0, 0);
    int i = seg < 0 ? -1 : new_block(a, seg, 0, alloc_size, 1);
    if (i < 0) return -2;
    a->st.reserved += alloc_size;
    a->st.n_device_alloc++;
    note_peaks(a);
    return i;
}

/* malloc, when no cached block fits: garbage collection (if on), a new segment, else release
   oversize cached blocks and retry, else release every cached segment and retry once more. */
static int grow_pool(PlanAlloc *a, int small, int stream, uint64_t size, uint64_t alloc_size) {
    if (a->limited && a->c.gc_threshold > 0) garbage_collect(a);
    int i = alloc_block(a, small, stream, size, alloc_size, 0);
    if (i == -1 && release_available(a, small, stream, size)) i = alloc_block(a, small, stream, size, alloc_size, 0);
    if (i == -1) {
        if (release_cached(a)) return -2;
        i = alloc_block(a, small, stream, size, alloc_size, 1);
    }
    return i;
}

static int id_slot(PlanAlloc *a, int id) {
    if (id < 0) return -1;
    if (id >= a->nid) {
        int n = a->nid ? a->nid : 256;
        while (n <= id) n *= 2;
        int *p = realloc(a->id_blk, (size_t)n * sizeof *p);
        if (!p) return -1;
        for (int k = a->nid; k < n; k++) p[k] = -1;
        a->id_blk = p;
        a->nid = n;
    }
    return 0;
}

int plan_alloc_malloc(PlanAlloc *a, int id, uint64_t orig, int stream) {
    long call = a->calls++;
    if (stream < 0 || stream >= PLAN_ALLOC_STREAMS || id_slot(a, id) || a->id_blk[id] >= 0) return -1;
    finish_events(a, 0);             /* prepare_for_malloc -> process_events */
    uint64_t size = plan_alloc_round_size(&a->c, orig);
    int small = size <= K_SMALL_SIZE;   /* get_pool */
    int i = get_free_block(a, small, stream, size);
    if (i < 0) i = grow_pool(a, small, stream, size, plan_alloc_segment_size(&a->c, size));
    if (i == -2) return -1;
    if (i < 0) {
        PlanAllocStats *st = &a->st;
        st->n_ooms++;
        if (st->first_oom_event < 0) {
            st->first_oom_event = call;
            st->first_oom_size = plan_alloc_segment_size(&a->c, size);
            st->first_oom_allocated = st->allocated;
            st->first_oom_reserved = st->reserved;
        }
        return 1;
    }
    i = alloc_found(a, i, size, orig);
    if (i < 0) return -1;
    a->id_blk[id] = i;
    a->st.n_malloc++;
    return 0;
}

/* free_locked: the bytes stop counting as allocated at once; a block recorded on other
   streams gets an event on each (insert_events) and is cached only when they complete. */
int plan_alloc_free(PlanAlloc *a, int id) {
    a->calls++;
    if (id < 0 || id >= a->nid || a->id_blk[id] < 0) return -1;
    int i = a->id_blk[id];
    a->id_blk[id] = -1;
    a->b[i].allocated = 0;
    a->st.allocated -= a->b[i].size;
    a->st.requested -= a->b[i].requested;
    a->st.n_free++;
    if (!a->b[i].uses) {
        free_block(a, i);
        return 0;
    }
    for (int s = 0; s < PLAN_ALLOC_STREAMS; s++) {
        if (!(a->b[i].uses >> s & 1)) continue;
        if (plan_grow((void **)&a->ev, &a->capev, a->nev + 1, sizeof *a->ev)) return -1;
        a->ev[a->nev++] = (PendEv){i, s, ++a->rec_seq[s]};
        a->b[i].events++;
    }
    a->b[i].uses = 0;
    return 0;
}

/* recordStream: a use on the allocation stream needs nothing. */
int plan_alloc_record_stream(PlanAlloc *a, int id, int stream) {
    a->calls++;
    if (id < 0 || id >= a->nid || a->id_blk[id] < 0 || stream < 0 || stream >= PLAN_ALLOC_STREAMS) return -1;
    int i = a->id_blk[id];
    if (stream != a->b[i].stream) a->b[i].uses |= 1u << stream;
    return 0;
}

int plan_alloc_sync(PlanAlloc *a, int stream) {
    a->calls++;
    if (stream < 0 || stream >= PLAN_ALLOC_STREAMS) return -1;
    a->done_seq[stream] = a->rec_seq[stream];
    return 0;
}

/* emptyCache -> release_cached_blocks */
void plan_alloc_empty_cache(PlanAlloc *a) {
    a->calls++;
    release_cached(a);
}

/* ---- PYTORCH_CUDA_ALLOC_CONF ------------------------------------------------------------- */

/* torch 2.15 parses the variable twice, with one tokenizer (c10/core/AllocatorConfig.h
   ConfigTokenizer: ',' ':' '[' ']' are tokens of their own, white space is dropped):
   AcceleratorAllocatorConfig::parseArgs (c10/core/AllocatorConfig.cpp) takes the device-wide
   keys, large_segment_size_mb in a pass of its own first (so max_split_size_mb's and
   max_non_split_rounding_mb's lower bound is the final large segment size, whatever the
   order), and CUDAAllocatorConfig::parseArgs (c10/cuda/CUDAAllocatorConfig.cpp) the CUDA ones;
   each refuses a key neither knows ("Unrecognized key"). Neither checks the ':' and ','
   separators (ConfigTokenizer::checkToken returns a bool that the parsers drop): a value is
   the token two after its key. Numbers go through std::stoull / std::stod, which read the
   longest numeric prefix and refuse a token with none. Read at cyyever/pytorch 106319cb
   (AllocatorConfig.cpp) and 0b2b76de (CUDAAllocatorConfig.cpp), whose key lists match the
   2.15 wheel's headers (include/c10/core/AllocatorConfig.h, include/c10/cuda/
   CUDAAllocatorConfig.h getKeys). */

typedef struct {
    char (*tok)[64];
    int n, cap;
} Tokens;

static int tokenize(const char *s, Tokens *t, char *err, size_t errlen) {
    size_t len = 0;
    t->n = 0;
    for (;; s++) {
        int sep = !*s || strchr(",:[]", *s);
        if (sep && len) t->n++, len = 0;
        if (!*s) return 0;
        if (!sep && isspace((unsigned char)*s)) continue;   /* dropped, inside a token too */
        if (plan_grow((void **)&t->tok, &t->cap, t->n + 1, sizeof *t->tok)) {
            snprintf(err, errlen, "out of memory reading the allocator settings");
            return -1;
        }
        if (sep) {
            t->tok[t->n][0] = *s;
            t->tok[t->n++][1] = 0;
        } else {
            if (len + 1 >= sizeof t->tok[0]) {
                snprintf(err, errlen, "allocator setting '%.20s...' is longer than 63 characters", t->tok[t->n]);
                return -1;
            }
            t->tok[t->n][len++] = *s;
            t->tok[t->n][len] = 0;
        }
    }
}

static const char *tok(const Tokens *t, int i) { return i >= 0 && i < t->n ? t->tok[i] : ""; }

/* std::stoull: optional white space and sign (a minus wraps around), the longest run of digits;
   no digits: refused (std::invalid_argument). ULLONG_MAX when out of range (std::out_of_range
   in torch: refused too). */
static int stoull_like(const char *s, uint64_t *v) {
    char *end;
    errno = 0;
    unsigned long long x = strtoull(s, &end, 10);
    if (end == s || errno == ERANGE) return -1;
    *v = x;
    return 0;
}

static int stod_like(const char *s, double *v) {
    char *end;
    errno = 0;
    double x = strtod(s, &end);
    if (end == s || errno == ERANGE) return -1;
    *v = x;
    return 0;
}

/* ConfigTokenizer::toBool: "True" or "False", nothing else. */
static int to_bool(const char *s, int *v) {
    if (!strcmp(s, "True")) *v = 1;
    else if (!strcmp(s, "False")) *v = 0;
    else return -1;
    return 0;
}

static int is_pow2(uint64_t x) { return x && !(x & (x - 1)); }

/* ConfigTokenizer::skipKey: the value's index, or a list's closing ']'. */
static int skip_key(const Tokens *t, int i) {
    i += 2;
    if (strcmp(tok(t, i), "[")) return i;
    while (++i < t->n && strcmp(t->tok[i], "]")) {}
    return i;
}

#define CONF_ERR(...) (snprintf(err, errlen, __VA_ARGS__), -1)

/* parseRoundUpPower2Divisions: one power of two for every interval, or a list "[64:8,256:4,>:1]"
   of interval starts in MiB (powers of two: the interval from 2^i MiB is index i, clamped to the
   16 intervals) with their divisions (0 or a power of two); the first entry also covers the
   intervals below it, ">" those after the last one set. */
static int parse_divisions(PlanAllocConfig *c, const Tokens *t, int *i, char *err, size_t errlen) {
    uint64_t v;
    *i += 2;
    if (strcmp(tok(t, *i), "[")) {
        if (stoull_like(tok(t, *i), &v) || !is_pow2(v))
            return CONF_ERR("roundup_power2_divisions:%s: the divisions must be a power of two (or a list such as "
                            "[64:8,256:4,>:1])", tok(t, *i));
        for (int k = 0; k < PLAN_ALLOC_INTERVALS; k++) c->roundup_divisions[k] = (uint32_t)v;
        return 0;
    }
    int first = 1, last = 0;
    while (++*i < t->n && strcmp(t->tok[*i], "]")) {
        int at = *i;
        *i += 2;
        if (stoull_like(tok(t, *i), &v) || (v && !is_pow2(v)))
            return CONF_ERR("roundup_power2_divisions: '%s' is not 0 or a power of two", tok(t, *i));
        if (!strcmp(tok(t, at), ">")) {
            for (int k = last + 1; k < PLAN_ALLOC_INTERVALS; k++) c->roundup_divisions[k] = (uint32_t)v;
        } else {
            uint64_t mb;
            if (stoull_like(tok(t, at), &mb) || !is_pow2(mb))
                return CONF_ERR("roundup_power2_divisions: the interval '%s' is not a power of two (MiB)", tok(t, at));
            int idx = log2_floor(mb) < PLAN_ALLOC_INTERVALS ? log2_floor(mb) : PLAN_ALLOC_INTERVALS - 1;
            for (int k = 0; first && k < idx; k++) c->roundup_divisions[k] = (uint32_t)v;
            first = 0;
            c->roundup_divisions[idx] = (uint32_t)v;
            last = idx;
        }
        if (strcmp(tok(t, *i + 1), "]")) ++*i;   /* the ',' (not checked, as in torch) */
    }
    if (*i >= t->n) return CONF_ERR("roundup_power2_divisions: the list has no closing ']'");
    return 0;
}

/* A "_mb" value of at least min_mb (strictly above it: strict), clamped to what size_t holds. */
static int parse_mb(const Tokens *t, int i, uint64_t min_mb, int strict, uint64_t *out) {
    uint64_t v;
    if (stoull_like(tok(t, i), &v) || (strict ? v <= min_mb : v < min_mb)) return -1;
    *out = v > UINT64_MAX / MB ? UINT64_MAX / MB * MB : v * MB;
    return 0;
}

/* The keys of AcceleratorAllocatorConfig::parseArgs (its second pass) and of
   CUDAAllocatorConfig::parseArgs whose values change no device memory: pinned (host) memory,
   locking, threads, CUDA-graph capture, the early out-of-memory error, the expandable segments'
   address reserve (address space, not memory). Their values are checked as torch checks them. */
typedef enum { V_BOOL, V_SIZE, V_POW2_THREADS, V_POSITIVE, V_RESERVE, V_RESERVE_LIST } ValueKind;
static const struct {
    const char *key;
    ValueKind kind;
} NO_EFFECT[] = {
    {"pinned_use_background_threads", V_BOOL},   {"pinned_max_round_threshold_mb", V_SIZE},
    {"pinned_max_cached_size_mb", V_SIZE},       {"release_lock_on_cudamalloc", V_BOOL},
    {"release_lock_on_hipmalloc", V_BOOL},       {"pinned_use_cuda_host_register", V_BOOL},
    {"pinned_use_hip_host_register", V_BOOL},    {"pinned_num_register_threads", V_POW2_THREADS},
    {"pinned_reserve_segment_size_mb", V_POSITIVE}, {"graph_capture_record_stream_reuse", V_BOOL},
    {"pinned_free_catch_all", V_BOOL},           {"throw_on_cudamalloc_oom", V_BOOL},
    {"expandable_segments_reserve", V_RESERVE},  {"expandable_segments_reserve_by_class", V_RESERVE_LIST},
};
#define N_NO_EFFECT ((int)(sizeof NO_EFFECT / sizeof NO_EFFECT[0]))
/* CUDAAllocatorConfig::pinned_max_register_threads() */
#define PINNED_MAX_REGISTER_THREADS 128

static int no_effect_key(const char *k) {
    for (int j = 0; j < N_NO_EFFECT; j++)
        if (!strcmp(k, NO_EFFECT[j].key)) return j;
    return -1;
}

/* A key that changes no device memory: its value checked; the index of its last token. */
static int parse_no_effect(const Tokens *t, int i, int j, char *err, size_t errlen) {
    const char *k = NO_EFFECT[j].key, *v = tok(t, i + 2);
    uint64_t x;
    int b;
    switch (NO_EFFECT[j].kind) {
    case V_BOOL:
        if (to_bool(v, &b)) return CONF_ERR("%s:%s: expected True or False", k, v);
        return i + 2;
    case V_SIZE:
        if (stoull_like(v, &x)) return CONF_ERR("%s:%s: expected a whole number of MiB", k, v);
        return i + 2;
    case V_POW2_THREADS:
        if (stoull_like(v, &x) || !is_pow2(x) || x > PINNED_MAX_REGISTER_THREADS)
            return CONF_ERR("%s:%s: expected a power of two up to %d", k, v, PINNED_MAX_REGISTER_THREADS);
        return i + 2;
    case V_POSITIVE:
        if (stoull_like(v, &x) || x == 0) return CONF_ERR("%s:%s: expected a size in MiB above 0", k, v);
        return i + 2;
    case V_RESERVE:   /* a bad value is a warning in torch (parseReserveSpec), not an error */
        return i + 2;
    case V_RESERVE_LIST:
        if (strcmp(v, "[")) return CONF_ERR("%s: expected a list [name:value,...]", k);
        return skip_key(t, i);
    }
    return i + 2;
}

/* One key of the second pass at token i; the index of its last token, or -1 with err. */
static int parse_key(PlanAllocConfig *c, const Tokens *t, int i, char *err, size_t errlen) {
    const char *k = tok(t, i), *v = tok(t, i + 2);
    uint64_t min_large = c->large_segment_size / MB;
    int j = no_effect_key(k), b;
    double d;
    if (!strcmp(k, "large_segment_size_mb")) return skip_key(t, i);   /* the first pass's */
    if (!strcmp(k, "max_split_size_mb")) {
        if (parse_mb(t, i + 2, min_large, 0, &c->max_split_size))
            return CONF_ERR("max_split_size_mb:%s: must be a whole number >= %llu (the large segment size)", v,
                            (unsigned long long)min_large);
    } else if (!strcmp(k, "max_non_split_rounding_mb")) {
        if (parse_mb(t, i + 2, min_large, 0, &c->max_non_split_rounding))
            return CONF_ERR("max_non_split_rounding_mb:%s: must be a whole number >= %llu (the large segment size)", v,
                            (unsigned long long)min_large);
    } else if (!strcmp(k, "garbage_collection_threshold")) {
        if (stod_like(v, &d) || !(d > 0.0 && d < 1.0))
            return CONF_ERR("garbage_collection_threshold:%s: must be in (0.0, 1.0)", v);
        c->gc_threshold = d;
    } else if (!strcmp(k, "roundup_power2_divisions")) {
        int at = i;
        if (parse_divisions(c, t, &at, err, errlen)) return -1;
        return at;
    } else if (!strcmp(k, "expandable_segments")) {
        if (to_bool(v, &b)) return CONF_ERR("expandable_segments:%s: expected True or False", v);
        c->expandable_segments = b;
    } else if (!strcmp(k, "per_process_memory_fraction")) {
        if (stod_like(v, &d) || !(d >= 0.0 && d <= 1.0))
            return CONF_ERR("per_process_memory_fraction:%s: must be in [0.0, 1.0]", v);
        c->memory_fraction = d;
    } else if (!strcmp(k, "backend")) {
        if (!strcmp(v, "cudaMallocAsync"))
            return CONF_ERR("backend:cudaMallocAsync: CUDA's own pool allocator is not modelled (valid: native)");
        if (strcmp(v, "native")) return CONF_ERR("backend:%s: unknown allocator backend (options are native and cudaMallocAsync)", v);
    } else if (j >= 0) {
        return parse_no_effect(t, i, j, err, errlen);
    } else {
        return CONF_ERR("unrecognized key '%s' in the allocator settings (valid: large_segment_size_mb, "
                        "max_split_size_mb, max_non_split_rounding_mb, garbage_collection_threshold, "
                        "roundup_power2_divisions, expandable_segments, per_process_memory_fraction, backend, "
                        "and torch's keys for pinned memory and locking)", k);
    }
    return i + 2;
}

int plan_alloc_config_parse(PlanAllocConfig *c, const char *conf, char *err, size_t errlen) {
    Tokens t = {0};
    int rc = tokenize(conf, &t, err, errlen);
    /* parseArgs resets these each time; large_segment_size_mb first, then
       max_non_split_rounding_size_ = large_segment_size_ */
    c->max_split_size = UINT64_MAX;
    memset(c->roundup_divisions, 0, sizeof c->roundup_divisions);
    c->gc_threshold = 0;
    for (int i = 0; !rc && i < t.n; i++) {
        if (strcmp(t.tok[i], "large_segment_size_mb")) continue;
        if (parse_mb(&t, i + 2, K_MIN_LARGE_ALLOC / MB, 1, &c->large_segment_size)) {
            snprintf(err, errlen, "large_segment_size_mb:%s: must be a whole number > %d", tok(&t, i + 2),
                     (int)(K_MIN_LARGE_ALLOC / MB));
            rc = -1;
        }
        i += 2;
    }
    if (!rc) c->max_non_split_rounding = c->large_segment_size;
    for (int i = 0; !rc && i < t.n; i++) {
        int last = parse_key(c, &t, i, err, errlen);
        if (last < 0) rc = -1;
        else i = last + 1;   /* the ',' after it (not checked, as in torch) */
    }
    free(t.tok);
    return rc;
}

int plan_alloc_config_no_effect(const char *conf, char *buf, size_t len) {
    Tokens t = {0};
    char err[128];
    int n = 0;
    size_t used = 0;
    buf[0] = 0;
    if (tokenize(conf, &t, err, sizeof err)) { free(t.tok); return 0; }
    for (int i = 0; i < t.n; i++) {
        if (i > 0 && strcmp(t.tok[i - 1], ",")) continue;   /* keys follow a ',' or start */
        if (no_effect_key(t.tok[i]) < 0) continue;
        if (used < len) used += (size_t)snprintf(buf + used, len - used, "%s%s", n ? ", " : "", t.tok[i]);
        n++;
    }
    free(t.tok);
    return n;
}
