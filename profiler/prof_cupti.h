/* prof_cupti.h — GPU activity measured by CUPTI, independently of the executor's own accounting:
 * kernels (CONCURRENT_KERNEL, which keeps kernels concurrent; KERNEL would serialize them),
 * memcpy, memset and device allocation records (MEMORY2), collected in activity buffers,
 * flushed at stop and aggregated per phase. The profiler aggregates; it never prints records.
 *
 *   ProfCupti *s = prof_cupti_start(0, err, sizeof err);   // NULL: no device / built without CUPTI
 *   prof_cupti_set_phase(s, "forward");  ...  prof_cupti_set_phase(s, "backward");  ...
 *   prof_cupti_stop(s);                  // synchronizes, flushes, aggregates
 *   prof_cupti_phase(s, "backward")->nccl[COLL_ALL_REDUCE].count ...
 *   prof_cupti_destroy(s);
 *
 * Phases: set_phase stores (name, CUPTI timestamp); a record belongs to the phase that was set
 * at its GPU start time. Work the host queued in one phase but the GPU ran after the next
 * set_phase counts in the later phase: synchronize at phase boundaries when that matters.
 *
 * NCCL: kernels whose names start with ncclKernel, ncclDevKernel or ncclSymkDevKernel are NCCL's.
 * The name gives the collective when NCCL compiled a specialized kernel (AllReduce, ReduceScatter,
 * AllGather, Broadcast); NCCL 2.19+ runs most sizes in ncclDevKernel_Generic, whose name says
 * nothing. For those, the caller brackets each collective with prof_cupti_collective_begin/end
 * (a thread-local hint); the session maps the kernel launched inside the bracket (CUPTI driver
 * callback, by correlation id) to that collective. NCCL kernels neither way: "unattributed".
 *
 * Memory: a timeline of device bytes rebuilt from allocation/release records (cudaMalloc and
 * friends, cudaMallocAsync sub-allocations; NCCL's and cuBLAS's own buffers included), counting
 * only allocations made while the session ran. prof_cupti_check_mem compares its peak with the
 * tracked allocator's (prof_mem).
 *
 * Times: CUPTI timestamps are ns on CUPTI's clock; exported times are µs on prof_clock_us()'s
 * clock (an offset measured at start), so GPU lanes line up with the phase spans.
 *
 * Without CUPTI (NO_CUPTI=1, NO_CUDA=1) the same functions exist: prof_cupti_start returns NULL
 * with "built without CUPTI ...". The offline session (prof_cupti_offline + prof_cupti_feed)
 * runs the same aggregation on synthetic records, with or without CUPTI, for tests.
 * No vendor types in this header. */
#ifndef PROF_CUPTI_H
#define PROF_CUPTI_H

#include <stddef.h>
#include <stdint.h>

#include "prof_comm.h"
#include "prof_mem.h"
#include "prof_phase.h"
#include "prof_trace.h"

typedef struct cJSON cJSON;

/* memcpy directions (array copies count with their host/device side). */
typedef enum {
    CUPTI_COPY_HTOD = 0,
    CUPTI_COPY_DTOH,
    CUPTI_COPY_DTOD,
    CUPTI_COPY_HTOH,
    CUPTI_COPY_PTOP,      /* peer to peer, across devices */
    CUPTI_COPY_OTHER,
    CUPTI_COPY_COUNT
} CuptiCopyDir;   /* JSON names: "htod", "dtoh", "dtod", "htoh", "ptop", "other" */

/* Index of NCCL kernels attributed to no collective, in ProfCuptiPhase.nccl[]. */
#define CUPTI_NCCL_UNATTRIBUTED COLL_COUNT
#define CUPTI_NCCL_SLOTS (COLL_COUNT + 1)

/* Trace lanes (tid) of the GPU, after the phase timer's compute and comm lanes. */
enum { CUPTI_LANE_KERNELS = PHASE_LANE_COUNT, CUPTI_LANE_MEMCPY, CUPTI_LANE_END };
const char *prof_cupti_lane_name(int lane);   /* "gpu kernels", "gpu memcpy" (memset too) */

typedef struct {
    int64_t count;
    double us;            /* Σ durations, µs */
} CuptiKernelStats;

typedef struct {
    int64_t count;
    double bytes;
    double us;            /* Σ durations, µs */
} CuptiXferStats;

typedef struct {
    char name[32];
    CuptiKernelStats kernels;                 /* every kernel, NCCL's included */
    CuptiKernelStats nccl_total;              /* NCCL kernels */
    CuptiKernelStats nccl[CUPTI_NCCL_SLOTS];  /* by CollKind; [CUPTI_NCCL_UNATTRIBUTED] */
    CuptiXferStats memcpy[CUPTI_COPY_COUNT];
    CuptiXferStats memset;
    CuptiXferStats alloc, release;            /* device allocations (count, bytes; us unused) */
} ProfCuptiPhase;

typedef struct {
    double t_us;          /* prof_clock_us() units (absolute) */
    double bytes;         /* device bytes live, allocated during the session */
} CuptiMemSample;

typedef struct {
    double current;       /* bytes still live at stop */
    double peak;          /* bytes */
    double peak_t_us;     /* when (prof_clock_us() units) */
    char peak_phase[32];
    int64_t allocs, releases;
    int64_t unmatched_releases;   /* frees of memory allocated before the session: ignored */
    int64_t other_kinds;          /* pinned/managed/array records: not in the device timeline */
} CuptiMemSummary;

typedef struct ProfCupti ProfCupti;   /* opaque session */

/* ---- the live session (one per process: CUPTI's buffers are process-wide) ---- */

/* Starts tracing on every device of the process. max_spans: kernel/memcpy spans kept for the
 * trace (0: 65536; later ones are counted, not kept). NULL with a reason in err: "built without
 * CUPTI (NO_CUPTI=1 or NO_CUDA=1)", "no CUDA device (<driver's reason>)", "a CUPTI session is
 * already running", or the failing CUPTI call. */
ProfCupti *prof_cupti_start(int max_spans, char *err, size_t errlen);
/* Records from now on belong to `name` (truncated to 31 characters). The first phase is "init".
 * 31 names are told apart; later ones share "other". */
void prof_cupti_set_phase(ProfCupti *s, const char *name);
/* Synchronizes the current device, flushes CUPTI's buffers, disables tracing and aggregates.
 * 0, or -1 if a CUPTI call failed (message printed). Results are valid after stop. */
int prof_cupti_stop(ProfCupti *s);
void prof_cupti_destroy(ProfCupti *s);   /* stops first if needed; NULL ignored */

/* The collective the calling thread is issuing (thread-local; a begin replaces an open one):
 * NCCL kernels launched until collective_end are attributed to op. No-ops without a running session or
 * without CUPTI, so comm backends can call them unconditionally. */
void prof_cupti_collective_begin(CollKind op);
void prof_cupti_collective_end(void);

/* ---- results ---- */

const ProfCuptiPhase *prof_cupti_phases(const ProfCupti *s, int *n);   /* in order of first use */
const ProfCuptiPhase *prof_cupti_phase(const ProfCupti *s, const char *name);   /* NULL if none */
ProfCuptiPhase prof_cupti_total(const ProfCupti *s);                   /* summed over phases */
CuptiMemSummary prof_cupti_memory(const ProfCupti *s);
const CuptiMemSample *prof_cupti_mem_timeline(const ProfCupti *s, int *n);
int64_t prof_cupti_dropped_records(const ProfCupti *s);   /* lost by CUPTI (buffers full) */
int64_t prof_cupti_dropped_spans(const ProfCupti *s);     /* not kept for the trace */

/* Cross-check of the memory peaks: CUPTI's device timeline against the tracked allocator. */
typedef struct {
    double cupti_peak;    /* bytes */
    double tracked_peak;  /* prof_mem_peak_total, bytes */
    double rel_diff;      /* (cupti - tracked) / tracked; 0 when both are 0 */
    int within;           /* |rel_diff| <= tolerance */
} CuptiMemCheck;
CuptiMemCheck prof_cupti_check_mem(const ProfCupti *s, const MemTracker *m, double tolerance);

/* Trace events: kernels on CUPTI_LANE_KERNELS, memcpy/memset on CUPTI_LANE_MEMCPY (cat "gpu"),
 * then the counter "gpu memory" (arg "cupti" = bytes). Times in µs since origin_us (absolute
 * prof_clock_us() units). Returns how many events there are (may exceed max; out may be NULL). */
int prof_cupti_export(const ProfCupti *s, int pid, double origin_us, TraceEvent *out, int max);
/* {"phases":[...], "total":{...}, "memory":{...}, "memory_check":{...} (when m is given),
 *  "dropped_records":N, "dropped_spans":N}; see docs/gpu-profiling.md. NULL if out of memory. */
cJSON *prof_cupti_json(const ProfCupti *s, const MemTracker *m, double tolerance);

/* ---- names ---- */

/* NCCL kernel -> collective: -1 if not an NCCL kernel, else a CollKind (all_reduce,
 * reduce_scatter, all_gather, broadcast) or CUPTI_NCCL_UNATTRIBUTED (Generic, SendRecv, Reduce,
 * unknown). Takes mangled (_Z31ncclDevKernel_AllGather_RING_LL24...) or plain names. */
int prof_cupti_nccl_collective(const char *kernel_name);
/* A readable kernel name for the trace: the identifier of a mangled _Z<len><id> or
 * _ZN<len><id>...E name ("ncclDevKernel_AllReduce_Sum_f32_RING_LL", "ns::kernel"), else name. */
void prof_cupti_short_name(const char *kernel_name, char *out, size_t outlen);

/* ---- offline aggregation (tests; synthetic records on CUPTI's clock, ns) ---- */

typedef enum { CUPTI_REC_KERNEL = 0, CUPTI_REC_MEMCPY, CUPTI_REC_MEMSET, CUPTI_REC_ALLOC,
               CUPTI_REC_RELEASE, CUPTI_REC_OTHER_MEMORY } CuptiRecKind;

typedef struct {
    CuptiRecKind kind;
    const char *name;         /* kernel name as CUPTI gives it (mangled) */
    uint64_t start_ns, end_ns;   /* ALLOC/RELEASE: start_ns is the timestamp */
    uint64_t bytes;           /* RELEASE with 0: the size of the matching ALLOC */
    CuptiCopyDir dir;         /* MEMCPY */
    uint64_t address;         /* ALLOC/RELEASE */
    uint32_t correlation_id;  /* KERNEL: matched against collective hints */
} CuptiRecord;

/* A session without CUPTI: clock_offset_us maps CUPTI ns to prof_clock_us() µs
 * (t_us = ns / 1000 + offset). */
ProfCupti *prof_cupti_offline(int max_spans, double clock_offset_us);
void prof_cupti_mark_phase(ProfCupti *s, const char *name, uint64_t t_ns);
/* What the driver callback records inside a collective bracket: launch correlation_id -> op. */
void prof_cupti_feed_launch(ProfCupti *s, uint32_t correlation_id, CollKind op);
/* Hints still waiting for their kernel record: at most CUPTI_MAX_HINTS (+1), 0 after finish. */
#define CUPTI_MAX_HINTS 4096
size_t prof_cupti_pending_hints(ProfCupti *s);
void prof_cupti_feed(ProfCupti *s, const CuptiRecord *r);
/* prof_cupti_stop ends an offline session too: it builds the memory timeline. */

#endif
