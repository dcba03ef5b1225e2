/* plan_alloc.h — a model of PyTorch's CUDA caching allocator (DeviceCachingAllocator in
 * c10/cuda/CUDACachingAllocator.cpp, torch 2.15): it replays a sequence of allocations, frees,
 * record_stream calls and stream completions and reports what torch.cuda.max_memory_reserved()
 * and max_memory_allocated() would say, the segments it holds, and the first allocation that
 * runs out of memory. Every rule (rounding, small and large pools, best fit, splitting and its
 * limits, coalescing, per-stream pools, record_stream events, max_split_size_mb,
 * roundup_power2_divisions, garbage_collection_threshold, expandable_segments, free-and-retry)
 * cites its source function in plan_alloc.c and in docs/formulas.md "The caching allocator".
 * Plain C: no CUDA header, no device; sizes in bytes. */
#ifndef PLAN_ALLOC_H
#define PLAN_ALLOC_H

#include <stddef.h>
#include <stdint.h>

#define PLAN_ALLOC_STREAMS 32        /* streams are small integers 0..31; 0 = the default stream */
#define PLAN_ALLOC_INTERVALS 16      /* roundup_power2_divisions: [<2 MiB), [2, 4 MiB), ..., [>=32 GiB) */

/* The allocator's settings (PYTORCH_CUDA_ALLOC_CONF, c10/core/AllocatorConfig.h) and the device. */
typedef struct {
    uint64_t max_split_size;          /* max_split_size_mb; UINT64_MAX = off (the default) */
    uint64_t max_non_split_rounding;  /* max_non_split_rounding_mb; default 20 MiB */
    uint64_t large_segment_size;      /* large_segment_size_mb: the 1-10 MiB requests' segment, 20 MiB */
    uint32_t roundup_divisions[PLAN_ALLOC_INTERVALS];   /* 0 or 1 = no power-of-2 rounding */
    double gc_threshold;              /* garbage_collection_threshold; 0 = off. Acts only when a
                                         memory fraction below 1 is set, as in the source */
    int expandable_segments;          /* expandable_segments:True */
    double memory_fraction;           /* per_process_memory_fraction (or
                                         torch.cuda.set_per_process_memory_fraction); 1 = none */
    uint64_t device_total;            /* cudaDeviceProp.totalGlobalMem: the fraction's base and the
                                         expandable segments' address reserve; 0 = unknown */
    uint64_t capacity;                /* bytes cudaMalloc can obtain in all (the device less the
                                         CUDA context, NCCL, other processes); 0 = unlimited */
} PlanAllocConfig;

void plan_alloc_config_defaults(PlanAllocConfig *c);
/* Parses a PYTORCH_CUDA_ALLOC_CONF string ("max_split_size_mb:128,expandable_segments:True")
 * onto c as torch 2.15 does (every key it accepts, large_segment_size_mb read before the keys
 * whose bounds depend on it, bounds, the roundup list form, numbers read as std::stoull and
 * std::stod read them). Keys that change no device memory (pinned host memory, locking,
 * threads, the expandable segments' address reserve; the HIP spellings too) are checked and
 * otherwise ignored (plan_alloc_config_no_effect names them); backend:cudaMallocAsync is
 * refused (a different allocator). Returns 0, or -1 with a sentence in err. */
int plan_alloc_config_parse(PlanAllocConfig *c, const char *conf, char *err, size_t errlen);
/* The keys of conf that torch accepts but that change no device memory, ", "-separated into
 * buf; how many. */
int plan_alloc_config_no_effect(const char *conf, char *buf, size_t len);
/* The settings that differ from torch's defaults, as PYTORCH_CUDA_ALLOC_CONF would give them
 * ("max_split_size_mb:128,expandable_segments:True"), or "torch's defaults". */
void plan_alloc_config_describe(const PlanAllocConfig *c, char *buf, size_t len);
/* Says (0) or refuses (-1, err) a configuration: a memory fraction needs device_total. */
int plan_alloc_config_check(const PlanAllocConfig *c, char *err, size_t errlen);

/* The allocator's figures (torch.cuda.memory_stats(): allocated_bytes, reserved_bytes,
 * requested_bytes "all"), now and at their peaks. */
typedef struct {
    uint64_t allocated, reserved, requested;            /* now */
    uint64_t max_allocated, max_reserved, max_requested;
    uint64_t reserved_at_max_allocated;  /* reserved when allocated last reached its peak */
    int segments, max_segments;          /* cudaMalloc segments + expandable segments */
    long n_malloc, n_free;
    long n_device_alloc, n_device_free;  /* cudaMalloc / page maps; cudaFree / page unmaps */
    long n_alloc_retries;                /* allocations retried after release_cached_blocks */
    long n_capacity_refusals;            /* device requests the capacity refused (cudaMalloc, page
                                            maps; a retry may follow): with none, any capacity
                                            from max_reserved up replays alike */
    long n_ooms;
    long first_oom_event;                /* the call (0-based, every API call counts) of the
                                            first out-of-memory; -1 when none */
    uint64_t first_oom_size;             /* what it asked cudaMalloc for (the segment size) */
    uint64_t first_oom_allocated, first_oom_reserved;
} PlanAllocStats;

typedef struct PlanAlloc PlanAlloc;

/* NULL when out of memory. The configuration is copied. */
PlanAlloc *plan_alloc_new(const PlanAllocConfig *c);
void plan_alloc_free_all(PlanAlloc *a);

/* Allocates `size` bytes for the caller's handle `id` (>= 0, not live) on `stream`.
 * Returns 0, 1 when out of memory (recorded in the stats; the handle stays unallocated), -1 on
 * a caller error (bad id or stream, or out of host memory). */
int plan_alloc_malloc(PlanAlloc *a, int id, uint64_t size, int stream);
/* Frees handle id: back to its pool, or, if it was recorded on other streams, once those
 * streams' work up to now has completed. Returns 0, -1 if id is not live. */
int plan_alloc_free(PlanAlloc *a, int id);
/* tensor.record_stream(stream): the block is in use on stream too. Returns 0, -1 (bad id). */
int plan_alloc_record_stream(PlanAlloc *a, int id, int stream);
/* All work queued on stream so far has completed (its events are seen as done at the next
 * allocation). Returns 0, -1 (bad stream). */
int plan_alloc_sync(PlanAlloc *a, int stream);
/* torch.cuda.empty_cache(): waits for every recorded stream and releases what is releasable. */
void plan_alloc_empty_cache(PlanAlloc *a);
/* torch.cuda.reset_peak_memory_stats(): the peaks restart from the current figures. */
void plan_alloc_reset_peaks(PlanAlloc *a);

const PlanAllocStats *plan_alloc_stats(const PlanAlloc *a);

/* A deep copy of the allocator as it stands (NULL when out of host memory): the same calls on
   both give the same results. */
PlanAlloc *plan_alloc_clone(const PlanAlloc *a);
/* The most that reserved plus a device request came to at any capacity check so far (met or
   refused). A run with a capacity at or above it refused nothing so far, and so took the same
   path as the run with any other such capacity, or none: the replays of one list at two
   capacities agree until the first request that either refuses. */
uint64_t plan_alloc_max_ask(const PlanAlloc *a);
/* Changes the capacity from here on (a clone resumed at another capacity). */
void plan_alloc_set_capacity(PlanAlloc *a, uint64_t capacity);

/* For tests: 0 when the best-fit index holds exactly each pool's free blocks in order and its
   search finds what a linear scan of the pool finds, for every cached block's size (and one
   byte more) on its stream; -1 otherwise. */
int plan_alloc_check_index(const PlanAlloc *a);

/* The rules on their own, for tests and for the step model. */
uint64_t plan_alloc_round_size(const PlanAllocConfig *c, uint64_t size);      /* round_size */
uint64_t plan_alloc_segment_size(const PlanAllocConfig *c, uint64_t rounded); /* get_allocation_size */

#endif
