/* prof_mem.h — the tracked allocator: every buffer of the executor is allocated here, with a
 * category, so the profiler knows current and peak bytes per category over a step, the
 * categories at the moment of the peak, per-phase peaks, and a memory timeline. A capacity
 * limit (--mem-limit) emulates a smaller GPU: the allocation that would cross it fails and is
 * recorded as an out-of-memory event (phase, request, what, category totals).
 *
 * The raw allocation comes from the device backend (host malloc or cudaMalloc) through two
 * callbacks, so this module carries no vendor types. All sizes are bytes. */
#ifndef PROF_MEM_H
#define PROF_MEM_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

typedef enum {
    MEM_PARAMS = 0,     /* model parameters (full or shard) */
    MEM_GRADS,          /* parameter gradients */
    MEM_OPTIMIZER,      /* optimizer state (AdamW m, v; fp32 master weights) */
    MEM_ACTIVATIONS,    /* tensors saved in forward for backward */
    MEM_COMM,           /* communication buffers: DDP buckets, gathered weights, RS buffers */
    MEM_WORKSPACE,      /* transient scratch: activation gradients, optimizer temporaries */
    MEM_CATEGORY_COUNT
} MemCategory;

const char *prof_mem_category_name(MemCategory c);  /* "params", "grads", ... (JSON names) */

typedef void *(*ProfRawAlloc)(void *ctx, size_t bytes);
typedef void (*ProfRawFree)(void *ctx, void *p);
typedef void (*ProfRawZero)(void *ctx, void *p, size_t bytes);   /* for prof_mem_calloc */

typedef struct MemTracker MemTracker;   /* opaque */

typedef struct {
    int happened;
    char phase[32];          /* phase at the failing request */
    char what[64];           /* the request's label */
    MemCategory category;
    size_t request;          /* bytes asked for */
    size_t limit;            /* capacity */
    size_t current[MEM_CATEGORY_COUNT];  /* category totals at the failure */
    size_t current_total;
} MemOom;

typedef struct {
    double t_us;             /* microseconds since the tracker was created */
    size_t total;
    size_t by_cat[MEM_CATEGORY_COUNT];
} MemSample;

/* limit = 0: no limit. Returns NULL on allocation failure of the tracker itself. */
MemTracker *prof_mem_create(ProfRawAlloc raw_alloc, ProfRawFree raw_free, void *ctx, size_t limit);
void prof_mem_destroy(MemTracker *t);

/* Returns NULL (and records the OOM, first one only) if the limit would be crossed or the raw
 * allocation fails. bytes = 0 returns NULL without error. */
void *prof_mem_alloc(MemTracker *t, MemCategory cat, size_t bytes, const char *what);
void *prof_mem_calloc(MemTracker *t, MemCategory cat, size_t bytes, const char *what);
void prof_mem_free(MemTracker *t, void *p);      /* NULL is ignored */

void prof_mem_set_phase(MemTracker *t, const char *phase);   /* "forward", "backward", "step" ... */
const char *prof_mem_phase(const MemTracker *t);

size_t prof_mem_current(const MemTracker *t, MemCategory c);
size_t prof_mem_peak(const MemTracker *t, MemCategory c);    /* peak of this category alone */
size_t prof_mem_current_total(const MemTracker *t);
size_t prof_mem_peak_total(const MemTracker *t);
/* Category totals at the moment the total peaked, and that phase's name. */
void prof_mem_peak_breakdown(const MemTracker *t, size_t out[MEM_CATEGORY_COUNT]);
const char *prof_mem_peak_phase(const MemTracker *t);
/* Peak total within a named phase; 0 if the phase never occurred. */
size_t prof_mem_phase_peak(const MemTracker *t, const char *phase);
void prof_mem_reset_peaks(MemTracker *t);         /* peaks := current (e.g. after warm-up) */
size_t prof_mem_limit(const MemTracker *t);
const MemOom *prof_mem_oom(const MemTracker *t);  /* ->happened = 0 if none */
void prof_mem_print_oom(const MemTracker *t, FILE *f, int rank);  /* the user-facing report */

/* Timeline: one sample after each alloc/free (capped; coalesced when full). */
const MemSample *prof_mem_timeline(const MemTracker *t, int *n);

/* ---- additions ---- */
/* How prof_mem_calloc zeroes raw memory (default memset; a CUDA device sets cudaMemset). */
void prof_mem_set_zero_fn(MemTracker *t, ProfRawZero raw_zero);
/* Timeline capacity in samples (default 4096; < 2 turns the timeline off); clears it. When
 * full, neighbouring samples merge pairwise keeping the higher total, so each sample then
 * stands for 2^k consecutive events and the peak stays in the timeline. -1 if out of memory. */
int prof_mem_set_timeline_cap(MemTracker *t, int cap);
/* Size and category of a live tracked pointer; 0 if the tracker does not own p. */
size_t prof_mem_size_of(const MemTracker *t, const void *p, MemCategory *cat);
/* Phase names seen so far (the first is "init", the phase before any set_phase); returns
 * how many there are (may exceed max). 31 are told apart; later ones share "other". */
int prof_mem_phases(const MemTracker *t, const char **names, int max);
int64_t prof_mem_live_count(const MemTracker *t);   /* live tracked allocations */
/* CLOCK_MONOTONIC time of creation in µs: MemSample.t_us + this = absolute monotonic µs. */
double prof_mem_origin_us(const MemTracker *t);
/* "512 B", "1.50 KiB", "3.25 GiB" (binary units, 2 decimals). Returns snprintf's result. */
int prof_mem_format_bytes(char *buf, size_t len, double bytes);

#endif
