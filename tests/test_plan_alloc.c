/* test_plan_alloc.c — the caching allocator model against its source's rules, each worked out
 * by hand (docs/formulas.md "The caching allocator"; functions of DeviceCachingAllocator in
 * c10/cuda/CUDACachingAllocator.cpp). */
#include <criterion/criterion.h>
#include <stdint.h>
#include <string.h>

#include "plan_alloc.h"

#define MiB (1024ull * 1024ull)

/* torch's defaults with a PYTORCH_CUDA_ALLOC_CONF string (NULL: none) applied. */
static PlanAllocConfig conf_of(const char *conf) {
    PlanAllocConfig c;
    char err[200];
    plan_alloc_config_defaults(&c);
    if (conf) cr_assert_eq(plan_alloc_config_parse(&c, conf, err, sizeof err), 0, "%s: %s", conf, err);
    return c;
}

static PlanAlloc *with_conf(const char *conf) {
    PlanAllocConfig c = conf_of(conf);
    PlanAlloc *a = plan_alloc_new(&c);
    cr_assert_not_null(a);
    return a;
}

static PlanAlloc *with_config(const PlanAllocConfig *c) {
    PlanAlloc *a = plan_alloc_new(c);
    cr_assert_not_null(a);
    return a;
}

/* The defaults and a device from which cudaMalloc can get `capacity` bytes. */
static PlanAlloc *with_capacity(uint64_t capacity) {
    PlanAllocConfig c;
    plan_alloc_config_defaults(&c);
    c.capacity = capacity;
    return with_config(&c);
}

static void get(PlanAlloc *a, int id, uint64_t size, int stream) {
    cr_assert_eq(plan_alloc_malloc(a, id, size, stream), 0, "allocating %d (%llu B)", id, (unsigned long long)size);
}

static void put(PlanAlloc *a, int id) { cr_assert_eq(plan_alloc_free(a, id), 0, "freeing %d", id); }

static uint64_t reserved(const PlanAlloc *a) { return plan_alloc_stats(a)->reserved; }

/* round_size: below 512 B -> 512 B; otherwise up to a multiple of 512 B. */
Test(alloc, sizes_should_round_up_to_512_bytes) {
    PlanAllocConfig c;
    plan_alloc_config_defaults(&c);
    cr_expect_eq(plan_alloc_round_size(&c, 1), 512);
    cr_expect_eq(plan_alloc_round_size(&c, 512), 512);
    cr_expect_eq(plan_alloc_round_size(&c, 513), 1024);
    cr_expect_eq(plan_alloc_round_size(&c, MiB + 1), MiB + 512);
    cr_expect_eq(plan_alloc_round_size(&c, 3000), 3072);
}

/* roundup_power2_next_division, applied by round_size when the size's interval has divisions
   > 1 and the size exceeds 512 B x divisions: 4 divisions put 5 MiB + 1 B between 4 and 8 MiB
   on the 1 MiB steps -> 6 MiB; a power of two stays; 1200 B is not above 2048 B -> 1536 B. */
Test(alloc, roundup_power2_divisions_should_round_to_the_next_division) {
    PlanAllocConfig c = conf_of("roundup_power2_divisions:4");
    cr_expect_eq(plan_alloc_round_size(&c, 5 * MiB + 1), 6 * MiB);
    cr_expect_eq(plan_alloc_round_size(&c, 8 * MiB), 8 * MiB);
    cr_expect_eq(plan_alloc_round_size(&c, 3000), 3072);   /* 2048 + 512: the next quarter */
    cr_expect_eq(plan_alloc_round_size(&c, 1200), 1536);
    /* the list form: "64:8" covers every interval up to [64, 128) MiB, ">:1" those above */
    c = conf_of("roundup_power2_divisions:[64:8,>:1]");
    cr_expect_eq(plan_alloc_round_size(&c, 100 * MiB + 1), 104 * MiB);   /* 64 MiB + k x 8 MiB */
    cr_expect_eq(plan_alloc_round_size(&c, 5 * MiB + 1), 5 * MiB + 512 * 1024);   /* 4 + k x 0.5 MiB */
    cr_expect_eq(plan_alloc_round_size(&c, 200 * MiB + 1), 200 * MiB + 512);
}

/* get_pool / get_allocation_size: <= 1 MiB -> the small pool and a 2 MiB segment; up to 10 MiB
   -> a 20 MiB segment; from 10 MiB on -> the size rounded up to 2 MiB. */
Test(alloc, segment_sizes_should_follow_the_pool_rules) {
    PlanAllocConfig c;
    plan_alloc_config_defaults(&c);
    cr_expect_eq(plan_alloc_segment_size(&c, MiB), 2 * MiB);
    cr_expect_eq(plan_alloc_segment_size(&c, MiB + 512), 20 * MiB);
    cr_expect_eq(plan_alloc_segment_size(&c, 10 * MiB - 512), 20 * MiB);
    cr_expect_eq(plan_alloc_segment_size(&c, 10 * MiB), 10 * MiB);
    cr_expect_eq(plan_alloc_segment_size(&c, 11 * MiB + 512), 12 * MiB);
}

/* Small requests pack into one 2 MiB segment (the small pool splits any remainder >= 512 B). */
Test(alloc, small_requests_should_share_a_2_mib_segment) {
    PlanAlloc *a = with_conf(NULL);
    for (int i = 0; i < 4; i++) get(a, i, 512 * 1024, 0);
    cr_expect_eq(reserved(a), 2 * MiB);
    cr_expect_eq(plan_alloc_stats(a)->segments, 1);
    get(a, 4, 1, 0);   /* full: a second small segment */
    cr_expect_eq(reserved(a), 4 * MiB);
    cr_expect_eq(plan_alloc_stats(a)->allocated, 2 * MiB + 512);
    plan_alloc_free_all(a);
}

/* should_split (large pool): the remainder is split off only when it exceeds 1 MiB, so a
   19.5 MiB request keeps its whole 20 MiB segment and allocated_bytes counts 20 MiB, while
   requested_bytes counts 19.5 MiB. */
Test(alloc, a_large_block_should_not_split_off_a_remainder_of_1_mib_or_less) {
    PlanAlloc *a = with_conf(NULL);
    get(a, 0, 19 * MiB + MiB / 2, 0);
    const PlanAllocStats *s = plan_alloc_stats(a);
    cr_expect_eq(s->reserved, 20 * MiB);
    cr_expect_eq(s->allocated, 20 * MiB);
    cr_expect_eq(s->requested, 19 * MiB + MiB / 2);
    get(a, 1, 512 * 1024 + 1, 0);   /* small pool: its own 2 MiB segment, no sharing */
    cr_expect_eq(s->reserved, 22 * MiB);
    plan_alloc_free_all(a);
}

/* get_allocation_size + should_split: requests of 1-10 MiB carve one 20 MiB segment; four of
   5 MiB fill it exactly (the last takes the 5 MiB remainder unsplit), a fifth opens another. */
Test(alloc, mid_size_requests_should_reuse_one_20_mib_segment) {
    PlanAlloc *a = with_conf(NULL);
    for (int i = 0; i < 4; i++) get(a, i, 5 * MiB, 0);
    cr_expect_eq(reserved(a), 20 * MiB);
    cr_expect_eq(plan_alloc_stats(a)->segments, 1);
    get(a, 4, 5 * MiB, 0);
    cr_expect_eq(reserved(a), 40 * MiB);
    cr_expect_eq(plan_alloc_stats(a)->segments, 2);
    plan_alloc_free_all(a);
}

/* free_block / try_merge_blocks: freed neighbours coalesce, so a 10 MiB request fits where two
   adjacent 5 MiB blocks were; once all is free the block is the whole segment again and
   empty_cache (release_cached_blocks) returns it. */
Test(alloc, freed_neighbours_should_coalesce) {
    PlanAlloc *a = with_conf(NULL);
    for (int i = 0; i < 3; i++) get(a, i, 5 * MiB, 0);   /* [0][1][2][5 MiB free] */
    put(a, 1);
    put(a, 0);
    get(a, 3, 10 * MiB, 0);   /* best fit: the merged 10 MiB at the front */
    cr_expect_eq(reserved(a), 20 * MiB);
    put(a, 3);
    plan_alloc_empty_cache(a);
    cr_expect_eq(reserved(a), 20 * MiB, "block 2 still splits the segment");
    put(a, 2);
    plan_alloc_empty_cache(a);
    cr_expect_eq(reserved(a), 0);
    cr_expect_eq(plan_alloc_stats(a)->segments, 0);
    plan_alloc_free_all(a);
}

/* get_free_block is best fit: of the cached 30 and 12 MiB blocks, an 11 MiB request takes the
   12 MiB one (no split: 1 MiB left is not above 1 MiB). */
Test(alloc, the_smallest_cached_block_that_fits_should_be_taken) {
    PlanAlloc *a = with_conf(NULL);
    get(a, 0, 30 * MiB, 0);
    get(a, 1, 12 * MiB, 0);
    put(a, 0);
    put(a, 1);
    get(a, 2, 11 * MiB, 0);
    cr_expect_eq(plan_alloc_stats(a)->allocated, 12 * MiB);
    get(a, 3, 25 * MiB, 0);
    cr_expect_eq(reserved(a), 42 * MiB, "no new segment");
    plan_alloc_free_all(a);
}

/* Blocks are cached per stream (BlockComparator orders by stream first): a block freed on
   stream 0 does not serve stream 1. */
Test(alloc, a_cached_block_should_serve_only_its_own_stream) {
    PlanAlloc *a = with_conf(NULL);
    get(a, 0, 20 * MiB, 0);
    put(a, 0);
    get(a, 1, 20 * MiB, 1);
    cr_expect_eq(reserved(a), 40 * MiB);
    get(a, 2, 20 * MiB, 0);
    cr_expect_eq(reserved(a), 40 * MiB);
    plan_alloc_free_all(a);
}

/* recordStream + free (insert_events) + process_events: a block used on the communication
   stream returns to the pool only when that stream's work recorded at the free has completed;
   a completion seen before the free does not count. */
Test(alloc, record_stream_should_delay_reuse_until_the_stream_completes) {
    PlanAlloc *a = with_conf(NULL);
    get(a, 0, 20 * MiB, 0);
    cr_assert_eq(plan_alloc_record_stream(a, 0, 1), 0);
    plan_alloc_sync(a, 1);           /* before the free: the event comes after it */
    put(a, 0);
    cr_expect_eq(plan_alloc_stats(a)->allocated, 0, "freed bytes stop counting as allocated at once");
    get(a, 1, 20 * MiB, 0);
    cr_expect_eq(reserved(a), 40 * MiB, "the recorded block is not reusable yet");
    plan_alloc_sync(a, 1);
    get(a, 2, 20 * MiB, 0);
    cr_expect_eq(reserved(a), 40 * MiB, "reused once stream 1 completed");
    /* a use recorded on the allocation stream itself needs no event */
    cr_assert_eq(plan_alloc_record_stream(a, 2, 0), 0);
    put(a, 2);
    get(a, 3, 20 * MiB, 0);
    cr_expect_eq(reserved(a), 40 * MiB);
    plan_alloc_free_all(a);
}

/* release_cached_blocks first synchronizes every outstanding event: on the OOM path (and in
   empty_cache) a recorded block is cached and released even though no sync was seen. */
Test(alloc, releasing_cached_blocks_should_wait_for_recorded_streams) {
    PlanAlloc *a = with_capacity(40 * MiB);
    get(a, 0, 20 * MiB, 0);
    plan_alloc_record_stream(a, 0, 1);
    put(a, 0);
    get(a, 1, 20 * MiB, 0);
    get(a, 2, 20 * MiB, 0);   /* 60 > 40: sync, release block 0's segment, retry */
    cr_expect_eq(reserved(a), 40 * MiB);
    cr_expect_eq(plan_alloc_stats(a)->n_alloc_retries, 1);
    cr_expect_eq(plan_alloc_stats(a)->n_ooms, 0);
    plan_alloc_free_all(a);
}

/* max_split_size (get_free_block, should_split): a request below it never takes a cached block
   of max_split_size or more (without the limit it would split the 60 MiB block); one above it
   takes such a block only if the block is less than max_non_split_rounding (20 MiB) larger,
   unsplit. */
Test(alloc, max_split_size_should_keep_oversize_blocks_whole) {
    PlanAlloc *a = with_conf("max_split_size_mb:40");
    get(a, 0, 60 * MiB, 0);
    put(a, 0);
    get(a, 1, 30 * MiB, 0);
    cr_expect_eq(reserved(a), 90 * MiB, "30 MiB does not split the 60 MiB block");
    get(a, 2, 50 * MiB, 0);
    cr_expect_eq(reserved(a), 90 * MiB, "50 MiB takes the 60 MiB block");
    cr_expect_eq(plan_alloc_stats(a)->allocated, 90 * MiB, "whole: 30 + 60");
    put(a, 2);
    get(a, 3, 40 * MiB, 0);   /* 60 >= 40 + 20: too large to hand out */
    cr_expect_eq(reserved(a), 130 * MiB);
    plan_alloc_free_all(a);

    a = with_conf(NULL);
    get(a, 0, 60 * MiB, 0);
    put(a, 0);
    get(a, 1, 30 * MiB, 0);
    cr_expect_eq(reserved(a), 60 * MiB, "no limit: the 60 MiB block is split");
    plan_alloc_free_all(a);
}

/* release_available_cached_blocks: with max_split_size set, a failed cudaMalloc first frees the
   smallest oversize cached block of at least max(request, max_split_size) and retries, before
   any full release (so no retry is counted). */
Test(alloc, an_oom_should_first_release_an_oversize_cached_block) {
    PlanAllocConfig c = conf_of("max_split_size_mb:40");
    c.capacity = 120 * MiB;
    PlanAlloc *a = with_config(&c);
    get(a, 0, 100 * MiB, 0);
    put(a, 0);
    get(a, 1, 30 * MiB, 0);   /* may not use the oversize 100 MiB block; 130 > 120 */
    const PlanAllocStats *s = plan_alloc_stats(a);
    cr_expect_eq(s->reserved, 30 * MiB);
    cr_expect_eq(s->n_alloc_retries, 0);
    cr_expect_eq(s->n_ooms, 0);
    plan_alloc_free_all(a);
}

/* malloc: no fit and cudaMalloc fails -> release every cached whole segment, retry once; if
   that fails too, out of memory (the model records the first and leaves the handle unset). */
Test(alloc, a_failed_cudamalloc_should_free_the_cache_and_retry_then_oom) {
    PlanAlloc *a = with_capacity(60 * MiB);
    get(a, 0, 30 * MiB, 0);
    put(a, 0);
    get(a, 1, 40 * MiB, 0);   /* 30 cached + 40 > 60: release the 30, retry */
    const PlanAllocStats *s = plan_alloc_stats(a);
    cr_expect_eq(s->reserved, 40 * MiB);
    cr_expect_eq(s->n_alloc_retries, 1);
    cr_expect_eq(plan_alloc_malloc(a, 2, 30 * MiB, 0), 1, "40 + 30 > 60 with nothing to release");
    cr_expect_eq(s->n_ooms, 1);
    cr_expect_eq(s->first_oom_event, 3, "the fourth call");
    cr_expect_eq(s->first_oom_size, 30 * MiB);
    cr_expect_eq(s->first_oom_allocated, 40 * MiB);
    cr_expect_eq(plan_alloc_free(a, 2), -1, "the failed handle was never allocated");
    get(a, 3, 20 * MiB, 0);   /* fits: 60 */
    plan_alloc_free_all(a);
}

/* expandable_segments: one segment per stream and pool grows by 20 MiB pages (large pool) and
   any remainder is split (>= 512 B), so 5 + 5 + 30 MiB reserve 40 MiB (pages mapped onto the
   free tail) where separate segments reserve 20 + 30 = 50 MiB. */
Test(alloc, expandable_segments_should_grow_one_segment_by_pages) {
    PlanAlloc *a = with_conf("expandable_segments:True");
    get(a, 0, 5 * MiB, 0);
    cr_expect_eq(reserved(a), 20 * MiB);
    get(a, 1, 5 * MiB, 0);
    get(a, 2, 30 * MiB, 0);
    cr_expect_eq(reserved(a), 40 * MiB);
    cr_expect_eq(plan_alloc_stats(a)->segments, 1);
    cr_expect_eq(plan_alloc_stats(a)->allocated, 40 * MiB);
    get(a, 3, 1000, 0);   /* small pool: its own segment, 2 MiB pages */
    cr_expect_eq(reserved(a), 42 * MiB);
    for (int i = 0; i < 4; i++) put(a, i);
    plan_alloc_empty_cache(a);   /* release_blocks: unmap every free page, drop empty segments */
    cr_expect_eq(reserved(a), 0);
    cr_expect_eq(plan_alloc_stats(a)->segments, 0);
    plan_alloc_free_all(a);

    a = with_conf(NULL);
    get(a, 0, 5 * MiB, 0);
    get(a, 1, 5 * MiB, 0);
    get(a, 2, 30 * MiB, 0);
    cr_expect_eq(reserved(a), 50 * MiB);
    plan_alloc_free_all(a);
}

/* unmap_block under expandable segments: only whole free pages go back; a freed block in the
   middle of a page stays mapped. */
Test(alloc, expandable_release_should_keep_pages_that_hold_live_blocks) {
    PlanAlloc *a = with_conf("expandable_segments:True");
    get(a, 0, 30 * MiB, 0);   /* pages 0-1 (40 MiB mapped), 10 MiB free tail */
    get(a, 1, 10 * MiB, 0);   /* the tail */
    cr_expect_eq(reserved(a), 40 * MiB);
    put(a, 0);                /* [0, 30) free: page 0 whole, page 1 shared with block 1 */
    plan_alloc_empty_cache(a);
    cr_expect_eq(reserved(a), 20 * MiB);
    get(a, 2, 25 * MiB, 0);   /* the free 10 MiB + a remapped page 0 -> 30 MiB contiguous */
    cr_expect_eq(reserved(a), 40 * MiB);
    plan_alloc_free_all(a);
}

/* garbage_collect_cached_blocks (with a memory fraction): past threshold x allowed, whole
   cached large segments at least as old as the average (in get_free_block calls) are
   released, all of them in one pass (ages 1 and 1), or only the older (ages 5 and 1, mean 3);
   without a memory fraction nothing is collected. */
Test(alloc, garbage_collection_should_release_old_cached_segments) {
    PlanAllocConfig c = conf_of("garbage_collection_threshold:0.5");
    c.device_total = 200 * MiB;
    c.memory_fraction = 0.5;   /* allowed 100 MiB, collect above 50 MiB */
    PlanAlloc *a = with_config(&c);
    get(a, 0, 30 * MiB, 0);    /* call 1 on the large pool */
    put(a, 0);                 /* A cached at count 1 */
    get(a, 1, 2 * MiB, 1);     /* call 2: a 20 MiB segment on stream 1 */
    get(a, 2, 2 * MiB, 1);     /* call 3: splits it */
    get(a, 3, 30 * MiB, 0);    /* call 4: takes A */
    get(a, 4, 30 * MiB, 0);    /* call 5: B */
    put(a, 3);                 /* A again, at count 5 */
    put(a, 4);                 /* B at count 5 */
    cr_expect_eq(reserved(a), 80 * MiB);
    get(a, 5, 40 * MiB, 0);    /* call 6: no fit; ages A = B = 1: both go, then 40 */
    cr_expect_eq(reserved(a), 60 * MiB);
    plan_alloc_free_all(a);

    a = with_config(&c);
    get(a, 0, 30 * MiB, 0);    /* call 1 */
    put(a, 0);                 /* A at 1 */
    get(a, 1, 2 * MiB, 1);     /* 2 */
    get(a, 2, 2 * MiB, 1);     /* 3 */
    get(a, 3, 2 * MiB, 1);     /* 4 */
    get(a, 4, 30 * MiB, 2);    /* 5: B on stream 2 */
    put(a, 4);                 /* B at 5 */
    get(a, 5, 40 * MiB, 0);    /* 6: ages A 5, B 1, mean 3: A goes (80 - 30 = 50, done) */
    cr_expect_eq(reserved(a), 90 * MiB);
    get(a, 6, 30 * MiB, 2);    /* B is still cached */
    cr_expect_eq(reserved(a), 90 * MiB);
    plan_alloc_free_all(a);

    c.memory_fraction = 1.0;
    a = with_config(&c);
    get(a, 0, 30 * MiB, 0);
    put(a, 0);
    get(a, 1, 40 * MiB, 0);
    cr_expect_eq(reserved(a), 70 * MiB, "no fraction: no collection");
    plan_alloc_free_all(a);
}

/* AcceleratorAllocatorConfig / CUDAAllocatorConfig parsing: bounds and spellings as torch
   2.15 checks them. */
Test(alloc, allocator_settings_should_parse_as_torch_does) {
    PlanAllocConfig c;
    char err[200];
    const char *bad[] = {"max_split_size_mb:19", "garbage_collection_threshold:1.0", "expandable_segments:true",
                         "backend:cudaMallocAsync", "no_such_option:1", "large_segment_size_mb:10",
                         "roundup_power2_divisions:3", "max_split_size_mb", "roundup_power2_divisions:[64:8 256:4]"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        plan_alloc_config_defaults(&c);
        cr_expect_eq(plan_alloc_config_parse(&c, bad[i], err, sizeof err), -1, "%s accepted", bad[i]);
    }
    plan_alloc_config_defaults(&c);
    cr_assert_eq(plan_alloc_config_parse(&c, " max_split_size_mb : 20 , pinned_use_cuda_host_register:True,"
                                          "expandable_segments:True,garbage_collection_threshold:0.6,"
                                          "backend:native", err, sizeof err), 0, "%s", err);
    cr_expect_eq(c.max_split_size, 20 * MiB);
    cr_expect(c.expandable_segments);
    cr_expect_float_eq(c.gc_threshold, 0.6, 1e-12);
    plan_alloc_config_defaults(&c);
    cr_assert_eq(plan_alloc_config_parse(&c, "large_segment_size_mb:32", err, sizeof err), 0, "%s", err);
    cr_expect_eq(plan_alloc_segment_size(&c, 5 * MiB), 32 * MiB);
    cr_expect_eq(plan_alloc_config_parse(&c, "max_split_size_mb:20", err, sizeof err), -1,
                 "at least the large segment size");
    c.memory_fraction = 0.5;
    cr_expect_eq(plan_alloc_config_check(&c, err, sizeof err), -1, "a fraction needs the device's memory");
}

/* The best-fit index (a sorted array searched by bisection) against a linear scan of the pool,
   after every call of random sequences: sizes from 512 B to 64 MiB, frees in random order,
   record_stream and syncs on three streams, under the settings that change the searches. */
Test(alloc, the_best_fit_index_should_agree_with_a_linear_scan) {
    const char *confs[] = {NULL, "max_split_size_mb:40", "expandable_segments:True",
                           "roundup_power2_divisions:4", "max_split_size_mb:20,max_non_split_rounding_mb:30"};
    for (size_t ci = 0; ci < sizeof confs / sizeof *confs; ci++)
        for (int seed = 1; seed <= 4; seed++) {
            PlanAllocConfig c = conf_of(confs[ci]);
            c.capacity = seed & 1 ? 0 : 768 * MiB;   /* also free-and-retry and out of memory */
            c.device_total = 80ull << 30;
            PlanAlloc *a = with_config(&c);
            uint64_t x = (uint64_t)seed * 0x9E3779B97F4A7C15ull;
            int live[400], n = 0, next = 0;
            for (int step = 0; step < 1500; step++) {
                x ^= x << 13, x ^= x >> 7, x ^= x << 17;
                int op = (int)(x % 10);
                if (n > 0 && (op < 4 || n == 400)) {
                    int k = (int)((x >> 8) % (uint64_t)n);
                    plan_alloc_free(a, live[k]);
                    live[k] = live[--n];
                } else if (op == 4 && n > 0) {
                    plan_alloc_record_stream(a, live[(x >> 8) % (uint64_t)n], 1 + (int)((x >> 20) % 2));
                } else if (op == 5) {
                    plan_alloc_sync(a, 1 + (int)((x >> 8) % 2));
                } else {
                    uint64_t size = 512ull << ((x >> 8) % 18);
                    size += (x >> 32) % size;
                    int stream = (x >> 28) % 8 == 0 ? 1 : 0;
                    if (plan_alloc_malloc(a, next, size, stream) == 0) live[n++] = next;
                    next++;
                }
                cr_assert_eq(plan_alloc_check_index(a), 0, "conf %s seed %d step %d", confs[ci] ? confs[ci] : "default",
                             seed, step);
            }
            plan_alloc_empty_cache(a);
            cr_assert_eq(plan_alloc_check_index(a), 0);
            plan_alloc_free_all(a);
        }
}

/* torch 2.15 reads large_segment_size_mb before every other key (AcceleratorAllocatorConfig::
   parseArgs' first pass), so max_split_size_mb's lower bound is the final large segment size
   whatever the order, and max_non_split_rounding_mb starts from it; it accepts every key of
   AcceleratorAllocatorConfig and CUDAAllocatorConfig (the pinned-memory, locking and HIP ones
   change no device memory: accepted and named), a fraction of 0, a full 16-entry division list,
   and numbers as std::stoull reads them (the leading digits). */
Test(alloc, allocator_settings_should_parse_in_torchs_order_with_all_its_keys) {
    PlanAllocConfig c;
    char err[300], quiet[256];
    plan_alloc_config_defaults(&c);
    cr_assert_eq(plan_alloc_config_parse(&c, "max_split_size_mb:25,large_segment_size_mb:24", err, sizeof err), 0, "%s", err);
    cr_expect_eq(c.max_split_size, 25 * MiB);
    cr_expect_eq(c.large_segment_size, 24 * MiB);
    cr_expect_eq(c.max_non_split_rounding, 24 * MiB, "large_segment_size_mb resets max_non_split_rounding");
    plan_alloc_config_defaults(&c);
    cr_expect_eq(plan_alloc_config_parse(&c, "max_split_size_mb:22,large_segment_size_mb:24", err, sizeof err), -1,
                 "22 MiB is below the final large segment size, given before or after it");
    plan_alloc_config_defaults(&c);
    cr_assert_eq(plan_alloc_config_parse(&c, "max_non_split_rounding_mb:40,large_segment_size_mb:30", err, sizeof err), 0,
                 "%s", err);
    cr_expect_eq(c.max_non_split_rounding, 40 * MiB);
    const char *quiet_keys = "pinned_max_round_threshold_mb:64,pinned_max_cached_size_mb:1024,"
                             "release_lock_on_hipmalloc:True,pinned_use_hip_host_register:False,"
                             "release_lock_on_cudamalloc:False,pinned_use_cuda_host_register:True,"
                             "pinned_num_register_threads:8,pinned_use_background_threads:True,"
                             "pinned_reserve_segment_size_mb:64,pinned_free_catch_all:False,"
                             "graph_capture_record_stream_reuse:True,throw_on_cudamalloc_oom:True,"
                             "expandable_segments_reserve:0.5,expandable_segments_reserve_by_class:[nccl:2G,x:0.25]";
    plan_alloc_config_defaults(&c);
    cr_assert_eq(plan_alloc_config_parse(&c, quiet_keys, err, sizeof err), 0, "%s", err);
    PlanAllocConfig d;
    plan_alloc_config_defaults(&d);
    cr_expect_eq(memcmp(&c, &d, sizeof c), 0, "they change no device memory");
    cr_expect_eq(plan_alloc_config_no_effect(quiet_keys, quiet, sizeof quiet), 14, "%s", quiet);
    plan_alloc_config_defaults(&c);
    cr_assert_eq(plan_alloc_config_parse(&c, "per_process_memory_fraction:0", err, sizeof err), 0, "%s", err);
    cr_expect_eq(c.memory_fraction, 0.0);
    c.device_total = (uint64_t)(40 * MiB);
    cr_expect_eq(plan_alloc_config_check(&c, err, sizeof err), 0, "%s", err);
    PlanAlloc *a = with_config(&c);
    cr_expect_eq(plan_alloc_malloc(a, 0, 512, 0), 1, "a fraction of 0 allows nothing");
    plan_alloc_free_all(a);
    plan_alloc_config_defaults(&c);
    cr_assert_eq(plan_alloc_config_parse(&c, "roundup_power2_divisions:[1:1,2:2,4:4,8:8,16:16,32:16,64:8,128:4,256:2,"
                                             "512:1,1024:1,2048:1,4096:1,8192:1,16384:1,>:2]", err, sizeof err), 0,
                 "%s", err);
    cr_expect_eq(c.roundup_divisions[0], 1);
    cr_expect_eq(c.roundup_divisions[4], 16);
    cr_expect_eq(c.roundup_divisions[15], 2);
    plan_alloc_config_defaults(&c);
    cr_assert_eq(plan_alloc_config_parse(&c, "max_split_size_mb:128MB", err, sizeof err), 0, "%s", err);
    cr_expect_eq(c.max_split_size, 128 * MiB, "std::stoull reads the leading digits");
    const char *bad[] = {"per_process_memory_fraction:1.5", "pinned_num_register_threads:3", "release_lock_on_cudamalloc:1",
                         "pinned_reserve_segment_size_mb:0", "expandable_segments_reserve_by_class:0.5",
                         "backend:something"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        plan_alloc_config_defaults(&c);
        cr_expect_eq(plan_alloc_config_parse(&c, bad[i], err, sizeof err), -1, "%s accepted", bad[i]);
    }
}

/* Hundreds of cached blocks in one pool: the best-fit index cuts them into chunks, splitting
   full ones and dropping or joining emptied ones; it stays the linear scan's order through
   allocations that split cached blocks, frees in a scattered order and an empty_cache. */
Test(alloc, the_best_fit_index_should_hold_hundreds_of_cached_blocks_in_order) {
    PlanAllocConfig c = conf_of(NULL);
    PlanAlloc *a = with_config(&c);
    enum { N = 1200 };
    for (int i = 0; i < N; i++)   /* 12-36 MiB: a segment each, sizes in 2 MiB steps (ties by segment) */
        cr_assert_eq(plan_alloc_malloc(a, i, (12 + 2 * (uint64_t)(i % 13)) * MiB, 0), 0);
    for (int i = 0; i < N; i += 2) plan_alloc_free(a, i);   /* 600 cached blocks: ten chunks and more */
    cr_assert_eq(plan_alloc_check_index(a), 0);
    for (int i = 0; i < 300; i++) {   /* takes cached blocks (splitting the larger) */
        cr_assert_eq(plan_alloc_malloc(a, N + i, (11 + (uint64_t)(i % 7)) * MiB, 0), 0);
        if (i % 50 == 0) cr_assert_eq(plan_alloc_check_index(a), 0, "allocation %d", i);
    }
    for (int k = 0; k < N / 2; k++) {   /* the rest freed in a scattered order */
        plan_alloc_free(a, 2 * ((k * 7919) % (N / 2)) + 1);
        if (k % 100 == 0) cr_assert_eq(plan_alloc_check_index(a), 0, "free %d", k);
    }
    cr_assert_eq(plan_alloc_check_index(a), 0);
    plan_alloc_empty_cache(a);
    cr_assert_eq(plan_alloc_check_index(a), 0);
    plan_alloc_free_all(a);
}

/* The replay at capacity C that reached M reserved is the replay at any capacity in [M, C]
   (plan_step_alloc.c reuses it instead of replaying), and at any capacity from M up when C
   refused nothing: the same figures, out-of-memory included, for random sequences under
   free-and-retry. */
static PlanAllocStats replay_random(uint64_t capacity, uint64_t seed) {
    PlanAllocConfig c = conf_of(NULL);
    c.capacity = capacity;
    PlanAlloc *a = with_config(&c);
    uint64_t x = seed * 0x9E3779B97F4A7C15ull;
    int live[300], n = 0;
    for (int step = 0; step < 3000; step++) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        if (n > 0 && ((x % 10) < 4 || n == 300)) {
            int k = (int)((x >> 8) % (uint64_t)n);
            plan_alloc_free(a, live[k]);
            live[k] = live[--n];
        } else if (plan_alloc_malloc(a, step, (512ull << ((x >> 8) % 17)) + (x >> 40) % MiB, 0) == 0) {
            live[n++] = step;
        }
    }
    PlanAllocStats st = *plan_alloc_stats(a);
    plan_alloc_free_all(a);
    return st;
}

Test(alloc, a_replay_should_be_the_same_at_any_capacity_between_its_max_reserved_and_its_own) {
    for (uint64_t seed = 1; seed <= 6; seed++) {
        PlanAllocStats free_run = replay_random(0, seed);
        cr_assert_eq(free_run.n_capacity_refusals, 0);
        uint64_t cap = free_run.max_reserved * 3 / 4 / MiB * MiB;   /* refuses: retries, perhaps out of memory */
        PlanAllocStats at = replay_random(cap, seed);
        cr_assert_gt(at.n_capacity_refusals, 0, "seed %llu", (unsigned long long)seed);
        uint64_t mid = at.max_reserved + (cap - at.max_reserved) / 2;
        PlanAllocStats lo = replay_random(at.max_reserved, seed), in = replay_random(mid, seed);
        cr_expect_eq(memcmp(&lo, &at, sizeof at), 0, "seed %llu: at its max reserved", (unsigned long long)seed);
        cr_expect_eq(memcmp(&in, &at, sizeof at), 0, "seed %llu: between", (unsigned long long)seed);
        PlanAllocStats above = replay_random(free_run.max_reserved, seed);
        cr_expect_eq(memcmp(&above, &free_run, sizeof above), 0, "seed %llu: unlimited", (unsigned long long)seed);
        PlanAllocStats below = replay_random(at.max_reserved - 2 * MiB, seed);
        cr_expect_neq(memcmp(&below, &at, sizeof at), 0, "seed %llu: below its max reserved it differs",
                      (unsigned long long)seed);
    }
}

/* A random sequence as a list, so that a replay can stop and go on: mallocs of 512 B to 64 MiB
   on two streams, frees in random order. */
typedef struct { int free_of, id, stream; uint64_t size; } RandOp;
#define RAND_OPS 3000
static int random_ops(uint64_t seed, RandOp *ops) {
    uint64_t x = seed * 0x9E3779B97F4A7C15ull;
    int live[300], n = 0;
    for (int k = 0; k < RAND_OPS; k++) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        if (n > 0 && ((x % 10) < 4 || n == 300)) {
            int j = (int)((x >> 8) % (uint64_t)n);
            ops[k] = (RandOp){1, live[j], 0, 0};
            live[j] = live[--n];
        } else {
            ops[k] = (RandOp){0, k, (int)(x >> 60) & 1, (512ull << ((x >> 8) % 17)) + (x >> 40) % MiB};
            live[n++] = k;
        }
    }
    return RAND_OPS;
}

static void run_random(PlanAlloc *a, const RandOp *ops, int from, int to, uint64_t *ask) {
    for (int k = from; k < to; k++) {
        if (ops[k].free_of) plan_alloc_free(a, ops[k].id);   /* -1 for one that ran out of memory */
        else cr_assert_geq(plan_alloc_malloc(a, ops[k].id, ops[k].size, ops[k].stream), 0);
        if (ask) ask[k] = plan_alloc_max_ask(a);
    }
}

/* plan_step_alloc.c resumes a replay at capacity C from a copy of the unlimited replay taken
   before the first operation whose capacity check compared more than C: the same figures as the
   whole replay at C, for random sequences under each allocator setting, at capacities from below
   the most allocated (out of memory) to the unlimited replay's max reserved. */
Test(alloc, a_replay_resumed_from_the_unlimited_ones_copy_should_equal_the_whole_replay) {
    static const char *const CONFS[] = {NULL, "expandable_segments:True", "max_split_size_mb:64",
                                        "roundup_power2_divisions:4", "max_split_size_mb:32,roundup_power2_divisions:[256:1,>:8]"};
    static RandOp ops[RAND_OPS];
    static uint64_t ask[RAND_OPS];
    for (size_t ci = 0; ci < sizeof CONFS / sizeof CONFS[0]; ci++)
        for (uint64_t seed = 1; seed <= 4; seed++) {
            int n = random_ops(seed, ops);
            PlanAllocConfig c = conf_of(CONFS[ci]);
            c.device_total = 80ull << 30;
            PlanAlloc *base = with_config(&c), *copy[6] = {0};
            int at[6];
            for (int s = 0; s < 6; s++) {   /* copies every 500 operations */
                at[s] = s * 500;
                run_random(base, ops, s ? at[s - 1] : 0, at[s], ask);
                copy[s] = plan_alloc_clone(base);
                cr_assert_not_null(copy[s]);
            }
            run_random(base, ops, at[5], n, ask);
            const PlanAllocStats *free_run = plan_alloc_stats(base);
            cr_assert_eq(free_run->n_capacity_refusals, 0);
            cr_assert_eq(ask[n - 1], free_run->max_reserved, "%s seed %llu", CONFS[ci] ? CONFS[ci] : "defaults",
                         (unsigned long long)seed);
            int diverged = 0;
            for (int p = 0; p <= 16; p++) {
                uint64_t cap = free_run->max_allocated / 2 + (free_run->max_reserved - free_run->max_allocated / 2) / 16 * (uint64_t)p;
                int d = 0;   /* operations before d asked no more than cap */
                while (d < n && ask[d] <= cap) d++;
                int s = 5;
                while (at[s] > d) s--;
                PlanAlloc *r = plan_alloc_clone(copy[s]);
                cr_assert_not_null(r);
                plan_alloc_set_capacity(r, cap);
                run_random(r, ops, at[s], n, NULL);
                c.capacity = cap;
                PlanAlloc *whole = with_config(&c);
                run_random(whole, ops, 0, n, NULL);
                cr_expect_eq(memcmp(plan_alloc_stats(r), plan_alloc_stats(whole), sizeof(PlanAllocStats)), 0,
                             "%s seed %llu capacity %llu: resumed at %d (diverges at %d)", CONFS[ci] ? CONFS[ci] : "defaults",
                             (unsigned long long)seed, (unsigned long long)cap, at[s], d);
                diverged += plan_alloc_stats(whole)->n_capacity_refusals > 0 && at[s] > 0;
                plan_alloc_free_all(r);
                plan_alloc_free_all(whole);
                c.capacity = 0;
            }
            cr_expect_gt(diverged, 0, "some probe should resume from a later copy and then be refused");
            for (int s = 0; s < 6; s++) plan_alloc_free_all(copy[s]);
            plan_alloc_free_all(base);
        }
}

/* The device's total is read only under a memory fraction below 1 (its base) and expandable
   segments (their address reserve), so plan_step_alloc.c takes a kept replay made on one GPU for
   a setting that differs from it only there (the plan's rows, then auto's rule on the same GPU
   less its safety margin): the same figures on 0, 40 and 80 GiB, unlimited and at a capacity
   that refuses, under each other setting. */
Test(alloc, a_replay_should_not_read_the_devices_total_without_a_fraction_or_expandable_segments) {
    static const char *const CONFS[] = {NULL, "max_split_size_mb:64", "roundup_power2_divisions:4",
                                        "garbage_collection_threshold:0.6"};
    static const uint64_t TOTALS[] = {0, 40ull << 30, 80ull << 30};
    static RandOp ops[RAND_OPS];
    for (size_t ci = 0; ci < sizeof CONFS / sizeof CONFS[0]; ci++)
        for (uint64_t seed = 1; seed <= 3; seed++) {
            int n = random_ops(seed, ops);
            PlanAllocStats first[2];
            for (size_t ti = 0; ti < 3; ti++)
                for (int limited = 0; limited < 2; limited++) {
                    PlanAllocConfig c = conf_of(CONFS[ci]);
                    c.device_total = TOTALS[ti];
                    c.capacity = limited ? first[0].max_reserved * 3 / 4 : 0;
                    PlanAlloc *a = with_config(&c);
                    run_random(a, ops, 0, n, NULL);
                    PlanAllocStats st = *plan_alloc_stats(a);
                    plan_alloc_free_all(a);
                    if (limited) cr_assert_gt(st.n_capacity_refusals, 0);
                    if (ti == 0) { first[limited] = st; continue; }
                    cr_expect_eq(memcmp(&st, &first[limited], sizeof st), 0, "%s seed %llu: %llu GiB, %s",
                                 CONFS[ci] ? CONFS[ci] : "defaults", (unsigned long long)seed,
                                 (unsigned long long)(TOTALS[ti] >> 30), limited ? "limited" : "unlimited");
                }
        }
}
