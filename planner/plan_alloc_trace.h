/* plan_alloc_trace.h — allocation sequences for the caching allocator model (plan_alloc.h):
 * read from the text the harness writes (bench/torch/harness.py --alloc-trace) and replayed
 * to predict max_memory_reserved. The format, one event a line ('#' lines are comments):
 *
 *     a ADDR SIZE [STREAM]   SIZE bytes allocated at ADDR (hex), on STREAM (0..31, default 0)
 *     x ADDR SIZE            allocated inside a gloo collective: NCCL makes no such tensor
 *                            through PyTorch's allocator, so the replay leaves it (and its free) out
 *     f ADDR                 the live block at ADDR freed
 *     r ADDR STREAM          record_stream: the block at ADDR is used on STREAM
 *     s STREAM               the work queued on STREAM so far has completed
 *     e                      torch.cuda.empty_cache()
 *     m NAME                 a marker (a phase starts: step2, forward, ...)
 *
 * A header comment "# peak_excl_backend N" carries the harness's own tensor peak (steps
 * 2..K, gloo's buffers left out) for comparison. */
#ifndef PLAN_ALLOC_TRACE_H
#define PLAN_ALLOC_TRACE_H

#include <stdio.h>

#include "plan_alloc.h"

typedef enum { AEV_ALLOC, AEV_FREE, AEV_RECORD, AEV_SYNC, AEV_EMPTY, AEV_MARK } AllocEvKind;

typedef struct {
    AllocEvKind kind;
    int id;             /* the allocation's handle (its ordinal); AEV_MARK: the name's index */
    int stream;
    uint64_t size;
    long line;          /* in the file, for messages */
} AllocEv;

typedef struct {
    AllocEv *ev;
    int n, cap;
    int n_allocs;                 /* handles 0..n_allocs-1 */
    char (*marks)[32];            /* marker names */
    int n_marks, cap_marks;
    long gloo_allocs;             /* x lines left out */
    long unmatched_frees;         /* frees and record_streams of no live address (dropped) */
    uint64_t harness_peak;        /* "# peak_excl_backend N"; 0 when absent */
    char setup[160];              /* "# setup ..." */
} AllocTrace;

/* Reads a whole trace. Returns 0, or -1 with a sentence in err (the line it stopped at). */
int plan_alloc_trace_read(FILE *f, AllocTrace *t, char *err, size_t errlen);
void plan_alloc_trace_free(AllocTrace *t);

typedef struct {
    PlanAllocStats whole;         /* the whole sequence (max_memory_reserved() at its end) */
    PlanAllocStats window;        /* from the first marker `from` on: peaks reset there, as
                                     torch.cuda.reset_peak_memory_stats() would */
    int has_window;               /* the marker was found */
    long first_oom_line;          /* the trace line of the first allocation out of memory; 0 */
} AllocReplay;

/* Replays t through the allocator configured by c. from: a marker name ("step2") or NULL.
 * Returns 0, -1 with err. */
int plan_alloc_replay(const AllocTrace *t, const PlanAllocConfig *c, const char *from, AllocReplay *r,
                      char *err, size_t errlen);

#endif
