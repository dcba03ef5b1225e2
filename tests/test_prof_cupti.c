/* test_prof_cupti.c — CUPTI activity aggregation: NCCL kernel names to collectives, phase
 * attribution by start time, launch hints, the memory timeline and its cross-check, trace and
 * JSON export (synthetic records, no GPU needed); and, on a GPU, a tiny kernel, copies, a memset
 * and allocations under phases, whose aggregates must equal what was issued. Without a GPU the
 * GPU tests report "skipped: no CUDA device". */
#include <criterion/criterion.h>
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "prof_cupti.h"
#include "prof_mem.h"
#include "prof_overhead.h"

#ifndef MEMPLAN_CUDA
#define MEMPLAN_CUDA 0
#endif
#ifndef MEMPLAN_CUPTI
#define MEMPLAN_CUPTI 0
#endif
#if MEMPLAN_CUDA
#include <cuda_runtime.h>
#endif

#define MiB (1024.0 * 1024.0)

static int have_device(void)
{
    char why[256];
    return prof_overhead_devices(why, sizeof why) > 0;
}

static CuptiRecord kernel(const char *name, uint64_t start, uint64_t end, uint32_t corr)
{
    CuptiRecord r = {.kind = CUPTI_REC_KERNEL, .name = name, .start_ns = start, .end_ns = end,
                     .correlation_id = corr};
    return r;
}

static CuptiRecord copy(CuptiCopyDir dir, uint64_t bytes, uint64_t start, uint64_t end)
{
    CuptiRecord r = {.kind = CUPTI_REC_MEMCPY, .dir = dir, .bytes = bytes, .start_ns = start, .end_ns = end};
    return r;
}

static CuptiRecord mem(CuptiRecKind kind, uint64_t address, uint64_t bytes, uint64_t t)
{
    CuptiRecord r = {.kind = kind, .address = address, .bytes = bytes, .start_ns = t, .end_ns = t};
    return r;
}

/* ---- names ---- */

Test(prof_cupti, nccl_kernel_names_should_map_to_their_collectives)
{
    /* names as they are in libnccl 2.28 (mangled), 2.18 (ncclKernel_) and demangled */
    cr_expect_eq(prof_cupti_nccl_collective("_Z40ncclDevKernel_AllReduce_Sum_f32_RING_LL24ncclDevKernelArgsStorageILm4096EE"),
                 COLL_ALL_REDUCE);
    cr_expect_eq(prof_cupti_nccl_collective("_Z44ncclDevKernel_ReduceScatter_Sum_bf16_RING_LL24ncclDevKernelArgsStorageILm4096EE"),
                 COLL_REDUCE_SCATTER);
    cr_expect_eq(prof_cupti_nccl_collective("_Z31ncclDevKernel_AllGather_RING_LL24ncclDevKernelArgsStorageILm4096EE"),
                 COLL_ALL_GATHER);
    cr_expect_eq(prof_cupti_nccl_collective("_Z31ncclDevKernel_Broadcast_RING_LL24ncclDevKernelArgsStorageILm4096EE"),
                 COLL_BROADCAST);
    cr_expect_eq(prof_cupti_nccl_collective("_Z30ncclSymkDevKernel_AllGather_LL21ncclSymkDevWorkArgs4K"), COLL_ALL_GATHER);
    cr_expect_eq(prof_cupti_nccl_collective("ncclKernel_AllReduce_RING_LL_Sum_float(ncclDevComm*, unsigned long, ncclWork*)"),
                 COLL_ALL_REDUCE);
    cr_expect_eq(prof_cupti_nccl_collective("ncclDevKernel_ReduceScatter_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)"),
                 COLL_REDUCE_SCATTER);
    /* NCCL kernels whose name does not say the collective */
    cr_expect_eq(prof_cupti_nccl_collective("_Z21ncclDevKernel_Generic24ncclDevKernelArgsStorageILm4096EE"),
                 CUPTI_NCCL_UNATTRIBUTED);
    cr_expect_eq(prof_cupti_nccl_collective("_Z22ncclDevKernel_SendRecv24ncclDevKernelArgsStorageILm4096EE"),
                 CUPTI_NCCL_UNATTRIBUTED);
    cr_expect_eq(prof_cupti_nccl_collective("_Z33ncclDevKernel_Reduce_Sum_f32_RING_LL24ncclDevKernelArgsStorageILm4096EE"),
                 CUPTI_NCCL_UNATTRIBUTED, "Reduce is not ReduceScatter");
    /* not NCCL */
    cr_expect_eq(prof_cupti_nccl_collective("memplan_fill_kernel"), -1);
    cr_expect_eq(prof_cupti_nccl_collective("_Z16ncclLaunchKernelP8ncclCommP14ncclKernelPlan"), -1);
    cr_expect_eq(prof_cupti_nccl_collective("_Z13layernorm_fwdPfS_"), -1);
    cr_expect_eq(prof_cupti_nccl_collective(""), -1);
    cr_expect_eq(prof_cupti_nccl_collective(NULL), -1);
    cr_expect_eq(prof_cupti_nccl_collective("_Z99ncclDevKernel_AllReduce"), COLL_ALL_REDUCE, "a length past the end is clamped");
}

Test(prof_cupti, short_names_should_be_the_identifier_of_a_mangled_name)
{
    char s[48];
    prof_cupti_short_name("_Z31ncclDevKernel_AllGather_RING_LL24ncclDevKernelArgsStorageILm4096EE", s, sizeof s);
    cr_expect_str_eq(s, "ncclDevKernel_AllGather_RING_LL");
    prof_cupti_short_name("_ZN7cutlass6KernelINS_4gemm6kernel4GemmEEEvNT_6ParamsE", s, sizeof s);
    cr_expect_str_eq(s, "cutlass::Kernel");
    prof_cupti_short_name("memplan_fill_kernel", s, sizeof s);
    cr_expect_str_eq(s, "memplan_fill_kernel");
    prof_cupti_short_name("ncclDevKernel_Generic(ncclDevKernelArgsStorage<4096ul>)", s, sizeof s);
    cr_expect_str_eq(s, "ncclDevKernel_Generic");
    char tiny[6];
    prof_cupti_short_name("_Z13layernorm_fwdPfS_", tiny, sizeof tiny);
    cr_expect_str_eq(tiny, "layer");
}

/* ---- aggregation of synthetic records ---- */

Test(prof_cupti, records_should_count_in_the_phase_set_at_their_start_time)
{
    ProfCupti *s = prof_cupti_offline(0, 0);
    prof_cupti_mark_phase(s, "forward", 1000);
    prof_cupti_mark_phase(s, "backward", 2000);
    prof_cupti_mark_phase(s, "step", 3000);
    CuptiRecord r[] = {
        kernel("k_init", 500, 600, 1),
        kernel("k_fwd", 1500, 2500, 2),   /* crosses into backward: its start decides */
        kernel("k_bwd", 2000, 2100, 3),   /* exactly at the mark: the new phase */
        kernel("k_step", 3500, 3600, 4),
        copy(CUPTI_COPY_HTOD, 1 << 20, 1200, 1300),
        copy(CUPTI_COPY_DTOH, 4096, 2200, 2300),
        copy(CUPTI_COPY_DTOH, 4096, 2400, 2600),
        {.kind = CUPTI_REC_MEMSET, .bytes = 512, .start_ns = 3100, .end_ns = 3110},
    };
    for (size_t i = 0; i < sizeof r / sizeof *r; i++) prof_cupti_feed(s, &r[i]);
    cr_assert_eq(prof_cupti_stop(s), 0);

    int n;
    const ProfCuptiPhase *ph = prof_cupti_phases(s, &n);
    cr_assert_eq(n, 4);
    cr_expect_str_eq(ph[0].name, "init");
    cr_expect_eq(ph[0].kernels.count, 1);
    const ProfCuptiPhase *fwd = prof_cupti_phase(s, "forward"), *bwd = prof_cupti_phase(s, "backward"),
                         *step = prof_cupti_phase(s, "step");
    cr_assert(fwd && bwd && step);
    cr_expect_eq(fwd->kernels.count, 1);
    cr_expect_float_eq(fwd->kernels.us, 1.0, 1e-9, "1000 ns = 1 us");
    cr_expect_eq(bwd->kernels.count, 1);
    cr_expect_eq(step->kernels.count, 1);
    cr_expect_eq(fwd->memcpy[CUPTI_COPY_HTOD].count, 1);
    cr_expect_float_eq(fwd->memcpy[CUPTI_COPY_HTOD].bytes, MiB, 0);
    cr_expect_eq(bwd->memcpy[CUPTI_COPY_DTOH].count, 2);
    cr_expect_float_eq(bwd->memcpy[CUPTI_COPY_DTOH].bytes, 8192, 0);
    cr_expect_float_eq(bwd->memcpy[CUPTI_COPY_DTOH].us, 0.3, 1e-9);
    cr_expect_eq(step->memset.count, 1);
    cr_expect_float_eq(step->memset.bytes, 512, 0);
    cr_expect_null(prof_cupti_phase(s, "optimizer"));

    ProfCuptiPhase t = prof_cupti_total(s);
    cr_expect_str_eq(t.name, "total");
    cr_expect_eq(t.kernels.count, 4);
    cr_expect_eq(t.nccl_total.count, 0);
    cr_expect_eq(t.memcpy[CUPTI_COPY_DTOH].count + t.memcpy[CUPTI_COPY_HTOD].count, 3);
    prof_cupti_destroy(s);
}

Test(prof_cupti, a_phase_set_again_should_collect_into_the_same_entry)
{
    ProfCupti *s = prof_cupti_offline(0, 0);
    for (int step = 0; step < 3; step++) {
        uint64_t base = 10000 * (uint64_t)step;
        prof_cupti_mark_phase(s, "forward", base + 1000);
        prof_cupti_mark_phase(s, "backward", base + 5000);
        CuptiRecord a = kernel("f", base + 1100, base + 1200, 0), b = kernel("b", base + 5100, base + 5300, 0);
        prof_cupti_feed(s, &a);
        prof_cupti_feed(s, &b);
    }
    prof_cupti_stop(s);
    int n;
    prof_cupti_phases(s, &n);
    cr_expect_eq(n, 3, "init, forward, backward");
    cr_expect_eq(prof_cupti_phase(s, "forward")->kernels.count, 3);
    cr_expect_float_eq(prof_cupti_phase(s, "backward")->kernels.us, 0.6, 1e-9);
    prof_cupti_destroy(s);
}

Test(prof_cupti, phases_beyond_the_limit_should_share_other)
{
    ProfCupti *s = prof_cupti_offline(0, 0);
    char name[32];
    for (int i = 0; i < 40; i++) {
        snprintf(name, sizeof name, "p%d", i);
        prof_cupti_mark_phase(s, name, 1000 * (uint64_t)(i + 1));
        CuptiRecord k = kernel("k", 1000 * (uint64_t)(i + 1) + 10, 1000 * (uint64_t)(i + 1) + 20, 0);
        prof_cupti_feed(s, &k);
    }
    prof_cupti_stop(s);
    int n;
    const ProfCuptiPhase *ph = prof_cupti_phases(s, &n);
    cr_expect_eq(n, 32);
    cr_expect_str_eq(ph[31].name, "other");
    cr_expect_str_eq(ph[30].name, "p29");
    cr_expect_eq(ph[31].kernels.count, 10, "p30..p39");
    cr_expect_eq(prof_cupti_total(s).kernels.count, 40);
    prof_cupti_destroy(s);
}

Test(prof_cupti, nccl_kernels_should_count_per_collective_by_name_or_by_launch_hint)
{
    ProfCupti *s = prof_cupti_offline(0, 0);
    prof_cupti_mark_phase(s, "backward", 100);
    prof_cupti_feed_launch(s, 7, COLL_REDUCE_SCATTER);
    prof_cupti_feed_launch(s, 8, COLL_ALL_GATHER_V);
    prof_cupti_feed_launch(s, 9, COLL_ALL_REDUCE);
    CuptiRecord r[] = {
        kernel("_Z40ncclDevKernel_AllReduce_Sum_f32_RING_LL24ncclDevKernelArgsStorageILm4096EE", 200, 300, 5),
        kernel("_Z21ncclDevKernel_Generic24ncclDevKernelArgsStorageILm4096EE", 400, 1400, 7),   /* hint */
        kernel("_Z21ncclDevKernel_Generic24ncclDevKernelArgsStorageILm4096EE", 1500, 1600, 6),  /* none */
        kernel("_Z31ncclDevKernel_Broadcast_RING_LL24ncclDevKernelArgsStorageILm4096EE", 1700, 1800, 8),
        kernel("memplan_fill_kernel", 1900, 2000, 9),   /* a hint never makes a kernel NCCL's */
    };
    for (size_t i = 0; i < sizeof r / sizeof *r; i++) prof_cupti_feed(s, &r[i]);
    prof_cupti_stop(s);
    const ProfCuptiPhase *b = prof_cupti_phase(s, "backward");
    cr_assert(b);
    cr_expect_eq(b->kernels.count, 5);
    cr_expect_eq(b->nccl_total.count, 4);
    cr_expect_float_eq(b->nccl_total.us, 0.1 + 1.0 + 0.1 + 0.1, 1e-9);
    cr_expect_eq(b->nccl[COLL_ALL_REDUCE].count, 1);
    cr_expect_eq(b->nccl[COLL_REDUCE_SCATTER].count, 1);
    cr_expect_float_eq(b->nccl[COLL_REDUCE_SCATTER].us, 1.0, 1e-9);
    cr_expect_eq(b->nccl[COLL_ALL_GATHER_V].count, 1, "the caller's bracket wins over the name");
    cr_expect_eq(b->nccl[COLL_BROADCAST].count, 0);
    cr_expect_eq(b->nccl[CUPTI_NCCL_UNATTRIBUTED].count, 1);
    prof_cupti_destroy(s);
}

Test(prof_cupti, launch_hints_whose_kernel_never_comes_should_stay_bounded_and_go_at_the_end)
{
    ProfCupti *s = prof_cupti_offline(0, 0);
    prof_cupti_mark_phase(s, "backward", 100);
    for (uint32_t id = 1; id <= 100000; id++) prof_cupti_feed_launch(s, id, COLL_ALL_REDUCE);   /* no records */
    cr_expect_leq(prof_cupti_pending_hints(s), (size_t)CUPTI_MAX_HINTS + 1, "%zu hints kept",
                  prof_cupti_pending_hints(s));
    cr_expect_geq(prof_cupti_pending_hints(s), (size_t)CUPTI_MAX_HINTS / 2);
    /* the recent hints still attribute their kernels */
    CuptiRecord k = kernel("_Z21ncclDevKernel_Generic24ncclDevKernelArgsStorageILm4096EE", 200, 300, 99999);
    prof_cupti_feed(s, &k);
    prof_cupti_stop(s);
    cr_expect_eq(prof_cupti_phase(s, "backward")->nccl[COLL_ALL_REDUCE].count, 1);
    cr_expect_eq(prof_cupti_pending_hints(s), 0, "finish drops the unmatched hints");
    prof_cupti_destroy(s);
}

Test(prof_cupti, memory_timeline_should_rebuild_current_and_peak_from_allocation_records)
{
    ProfCupti *s = prof_cupti_offline(0, 1e6);
    prof_cupti_mark_phase(s, "forward", 1000);
    prof_cupti_mark_phase(s, "backward", 5000);
    /* fed out of order (records come in several buffers), sorted by time at stop */
    CuptiRecord r[] = {
        mem(CUPTI_REC_ALLOC, 0xA000, 4u << 20, 1100),
        mem(CUPTI_REC_RELEASE, 0xB000, 0, 5100),         /* size from its allocation */
        mem(CUPTI_REC_ALLOC, 0xB000, 2u << 20, 1200),
        mem(CUPTI_REC_ALLOC, 0xC000, 1u << 20, 5200),
        mem(CUPTI_REC_RELEASE, 0xD000, 8u << 20, 5300),  /* allocated before the session */
        mem(CUPTI_REC_RELEASE, 0xA000, 4u << 20, 5400),
        mem(CUPTI_REC_OTHER_MEMORY, 0xE000, 64, 5500),   /* pinned host: not device memory */
    };
    for (size_t i = 0; i < sizeof r / sizeof *r; i++) prof_cupti_feed(s, &r[i]);
    prof_cupti_stop(s);
    CuptiMemSummary m = prof_cupti_memory(s);
    cr_expect_float_eq(m.peak, 6 * MiB, 0);
    cr_expect_str_eq(m.peak_phase, "forward");
    cr_expect_float_eq(m.peak_t_us, 1.2 + 1e6, 1e-6, "CUPTI ns / 1000 + the clock offset");
    cr_expect_float_eq(m.current, 1 * MiB, 0);
    cr_expect_eq(m.allocs, 3);
    cr_expect_eq(m.releases, 2);
    cr_expect_eq(m.unmatched_releases, 1);
    cr_expect_eq(m.other_kinds, 1);
    const ProfCuptiPhase *f = prof_cupti_phase(s, "forward"), *b = prof_cupti_phase(s, "backward");
    cr_expect_eq(f->alloc.count, 2);
    cr_expect_float_eq(f->alloc.bytes, 6 * MiB, 0);
    cr_expect_eq(b->release.count, 3, "every release record is counted in its phase");
    cr_expect_float_eq(b->release.bytes, (2 + 8 + 4) * MiB, 0, "the sizeless release gets its allocation's size");
    int n;
    const CuptiMemSample *tl = prof_cupti_mem_timeline(s, &n);
    cr_assert_eq(n, 5, "one sample per matched event");
    for (int i = 1; i < n; i++) cr_expect_geq(tl[i].t_us, tl[i - 1].t_us);
    cr_expect_float_eq(tl[1].bytes, 6 * MiB, 0);
    cr_expect_float_eq(tl[n - 1].bytes, 1 * MiB, 0);
    prof_cupti_destroy(s);
}

static void *host_alloc(void *ctx, size_t n)
{
    (void)ctx;
    return malloc(n);
}

static void host_free(void *ctx, void *p)
{
    (void)ctx;
    free(p);
}

Test(prof_cupti, the_memory_check_should_give_the_relative_difference_to_the_tracked_peak)
{
    MemTracker *t = prof_mem_create(host_alloc, host_free, NULL, 0);
    void *a = prof_mem_alloc(t, MEM_PARAMS, 4 << 20, "a");
    void *b = prof_mem_alloc(t, MEM_ACTIVATIONS, 2 << 20, "b");
    prof_mem_free(t, b);
    ProfCupti *s = prof_cupti_offline(0, 0);
    CuptiRecord r[] = {mem(CUPTI_REC_ALLOC, 1, 4u << 20, 10), mem(CUPTI_REC_ALLOC, 2, 2u << 20, 20),
                       mem(CUPTI_REC_ALLOC, 3, 300u << 10, 30)};   /* + 300 KiB that NCCL or cuBLAS took */
    for (int i = 0; i < 3; i++) prof_cupti_feed(s, &r[i]);
    prof_cupti_stop(s);
    CuptiMemCheck c = prof_cupti_check_mem(s, t, 0.1);
    cr_expect_float_eq(c.tracked_peak, 6 * MiB, 0);
    cr_expect_float_eq(c.cupti_peak, 6 * MiB + 300 * 1024.0, 0);
    cr_expect_float_eq(c.rel_diff, 300 * 1024.0 / (6 * MiB), 1e-12);
    cr_expect(c.within);
    cr_expect_not(prof_cupti_check_mem(s, t, 0.01).within);
    prof_cupti_destroy(s);

    ProfCupti *empty = prof_cupti_offline(0, 0);
    prof_cupti_stop(empty);
    c = prof_cupti_check_mem(empty, t, 0.1);
    cr_expect_float_eq(c.rel_diff, -1.0, 1e-12, "CUPTI saw nothing: -100 %%");
    cr_expect_not(c.within);
    prof_cupti_destroy(empty);
    prof_mem_free(t, a);
    prof_mem_destroy(t);
}

Test(prof_cupti, export_should_put_kernels_and_copies_on_gpu_lanes_and_memory_as_a_counter)
{
    ProfCupti *s = prof_cupti_offline(3, 500.0);   /* keep 3 spans */
    CuptiRecord r[] = {
        kernel("_Z21ncclDevKernel_Generic24ncclDevKernelArgsStorageILm4096EE", 1000, 3000, 1),
        copy(CUPTI_COPY_HTOD, 256, 4000, 5000),
        {.kind = CUPTI_REC_MEMSET, .bytes = 128, .start_ns = 6000, .end_ns = 6500},
        kernel("dropped", 7000, 8000, 2),
        mem(CUPTI_REC_ALLOC, 0x10, 1024, 9000),
    };
    for (size_t i = 0; i < sizeof r / sizeof *r; i++) prof_cupti_feed(s, &r[i]);
    prof_cupti_stop(s);
    cr_expect_eq(prof_cupti_dropped_spans(s), 1);
    cr_expect_eq(prof_cupti_export(s, 2, 0, NULL, 0), 4, "3 spans + 1 memory sample");
    TraceEvent ev[8];
    int n = prof_cupti_export(s, 2, 100.0, ev, 8);
    cr_assert_eq(n, 4);
    cr_expect_eq(ev[0].kind, TRACE_COMPLETE);
    cr_expect_str_eq(ev[0].name, "ncclDevKernel_Generic");
    cr_expect_str_eq(ev[0].cat, "gpu");
    cr_expect_eq(ev[0].pid, 2);
    cr_expect_eq(ev[0].tid, CUPTI_LANE_KERNELS);
    cr_expect_float_eq(ev[0].ts_us, 1.0 + 500.0 - 100.0, 1e-9);
    cr_expect_float_eq(ev[0].dur_us, 2.0, 1e-9);
    cr_expect_eq(ev[0].nargs, 0);
    cr_expect_str_eq(ev[1].name, "memcpy htod");
    cr_expect_eq(ev[1].tid, CUPTI_LANE_MEMCPY);
    cr_expect_eq(ev[1].nargs, 1);
    cr_expect_str_eq(ev[1].arg_keys[0], "bytes");
    cr_expect_float_eq(ev[1].arg_values[0], 256, 0);
    cr_expect_str_eq(ev[2].name, "memset");
    cr_expect_eq(ev[2].tid, CUPTI_LANE_MEMCPY);
    cr_expect_eq(ev[3].kind, TRACE_COUNTER);
    cr_expect_str_eq(ev[3].name, "gpu memory");
    cr_expect_str_eq(ev[3].arg_keys[0], "cupti");
    cr_expect_float_eq(ev[3].arg_values[0], 1024, 0);
    cr_expect_float_eq(ev[3].ts_us, 9.0 + 400.0, 1e-9);
    cr_expect_eq(prof_cupti_export(s, 2, 0, ev, 2), 4, "the count is the total even when max cuts");
    cr_expect_str_eq(prof_cupti_lane_name(CUPTI_LANE_KERNELS), "gpu kernels");
    cr_expect_str_eq(prof_cupti_lane_name(CUPTI_LANE_MEMCPY), "gpu memcpy");
    cr_expect_str_eq(prof_cupti_lane_name(PHASE_LANE_COMM), "comm");
    prof_cupti_destroy(s);
}

Test(prof_cupti, json_should_carry_phases_totals_memory_and_the_check)
{
    ProfCupti *s = prof_cupti_offline(0, 0);
    prof_cupti_mark_phase(s, "backward", 10);
    prof_cupti_feed_launch(s, 3, COLL_ALL_REDUCE);
    CuptiRecord r[] = {
        kernel("_Z21ncclDevKernel_Generic24ncclDevKernelArgsStorageILm4096EE", 100, 2100, 3),
        copy(CUPTI_COPY_DTOD, 4096, 3000, 3100),
        mem(CUPTI_REC_ALLOC, 0x20, 2u << 20, 50),
    };
    for (size_t i = 0; i < sizeof r / sizeof *r; i++) prof_cupti_feed(s, &r[i]);
    prof_cupti_stop(s);
    MemTracker *t = prof_mem_create(host_alloc, host_free, NULL, 0);
    void *p = prof_mem_alloc(t, MEM_GRADS, 2 << 20, "g");
    cJSON *j = prof_cupti_json(s, t, 0.05);
    cr_assert(j);
    char *text = cJSON_PrintUnformatted(j);
    cJSON *back = cJSON_Parse(text);
    cr_assert(back, "the JSON must parse back");
    cJSON *phases = cJSON_GetObjectItem(back, "phases");
    cr_assert_eq(cJSON_GetArraySize(phases), 2);
    cJSON *bw = cJSON_GetArrayItem(phases, 1);
    cr_expect_str_eq(cJSON_GetObjectItem(bw, "name")->valuestring, "backward");
    cJSON *nccl = cJSON_GetObjectItem(bw, "nccl");
    cr_expect_eq(cJSON_GetObjectItem(nccl, "count")->valuedouble, 1);
    cJSON *ar = cJSON_GetObjectItem(cJSON_GetObjectItem(nccl, "by_collective"), "all_reduce");
    cr_assert(ar);
    cr_expect_float_eq(cJSON_GetObjectItem(ar, "us")->valuedouble, 2.0, 1e-9);
    cJSON *dtod = cJSON_GetObjectItem(cJSON_GetObjectItem(bw, "memcpy"), "dtod");
    cr_expect_eq(cJSON_GetObjectItem(dtod, "bytes")->valuedouble, 4096);
    cr_expect_null(cJSON_GetObjectItem(cJSON_GetObjectItem(bw, "memcpy"), "htod"), "directions never used are left out");
    cJSON *total = cJSON_GetObjectItem(back, "total");
    cr_expect_eq(cJSON_GetObjectItem(cJSON_GetObjectItem(total, "kernels"), "count")->valuedouble, 1);
    cJSON *memj = cJSON_GetObjectItem(back, "memory");
    cr_expect_eq(cJSON_GetObjectItem(memj, "peak_bytes")->valuedouble, 2 * MiB);
    cr_expect_str_eq(cJSON_GetObjectItem(memj, "peak_phase")->valuestring, "backward");
    cJSON *check = cJSON_GetObjectItem(back, "memory_check");
    cr_assert(check);
    cr_expect_eq(cJSON_GetObjectItem(check, "rel_diff")->valuedouble, 0);
    cr_expect(cJSON_IsTrue(cJSON_GetObjectItem(check, "within")));
    cr_expect_eq(cJSON_GetObjectItem(back, "dropped_records")->valuedouble, 0);
    cJSON *nocheck = prof_cupti_json(s, NULL, 0);
    cr_expect_null(cJSON_GetObjectItem(nocheck, "memory_check"), "no tracker, no check");
    cJSON_Delete(nocheck);
    cJSON_Delete(back);
    free(text);
    cJSON_Delete(j);
    prof_mem_free(t, p);
    prof_mem_destroy(t);
    prof_cupti_destroy(s);
}

Test(prof_cupti, start_should_give_a_reason_when_it_cannot_trace)
{
    char err[256] = "unchanged";
    ProfCupti *s = prof_cupti_start(0, err, sizeof err);
    if (!MEMPLAN_CUPTI) {
        cr_expect_null(s);
        cr_expect_str_eq(err, "built without CUPTI (NO_CUPTI=1 or NO_CUDA=1)");
    } else if (!have_device()) {
        cr_expect_null(s);
        cr_expect(strncmp(err, "no CUDA device (", 16) == 0, "got: %s", err);
    } else {
        cr_assert(s, "a GPU is present, start failed: %s", err);
        char err2[128];
        cr_expect_null(prof_cupti_start(0, err2, sizeof err2), "one session per process");
        cr_expect_str_eq(err2, "a CUPTI session is already running");
        cr_expect_eq(prof_cupti_stop(s), 0);
    }
    prof_cupti_destroy(s);
    prof_cupti_collective_begin(COLL_ALL_REDUCE);   /* without a session: no effect, no crash */
    prof_cupti_collective_end();
}

/* ---- on a GPU ---- */

#if MEMPLAN_CUDA
/* extern "C" __global__ void memplan_fill_kernel(float *p, float v, int n) { p[i] = v for i < n },
 * as PTX (nvcc -ptx -arch=compute_75), loaded at run time: the test is C, compiled by mpicc. */
static const char FILL_PTX[] =
    ".version 7.0\n"
    ".target sm_75\n"
    ".address_size 64\n"
    ".visible .entry memplan_fill_kernel(\n"
    "  .param .u64 memplan_fill_kernel_param_0,\n"
    "  .param .f32 memplan_fill_kernel_param_1,\n"
    "  .param .u32 memplan_fill_kernel_param_2\n"
    ")\n"
    "{\n"
    "  .reg .pred %p<2>;\n"
    "  .reg .f32 %f<2>;\n"
    "  .reg .b32 %r<6>;\n"
    "  .reg .b64 %rd<5>;\n"
    "  ld.param.u64 %rd1, [memplan_fill_kernel_param_0];\n"
    "  ld.param.f32 %f1, [memplan_fill_kernel_param_1];\n"
    "  ld.param.u32 %r2, [memplan_fill_kernel_param_2];\n"
    "  mov.u32 %r3, %ctaid.x;\n"
    "  mov.u32 %r4, %ntid.x;\n"
    "  mov.u32 %r5, %tid.x;\n"
    "  mad.lo.s32 %r1, %r3, %r4, %r5;\n"
    "  setp.ge.s32 %p1, %r1, %r2;\n"
    "  @%p1 bra DONE;\n"
    "  cvta.to.global.u64 %rd2, %rd1;\n"
    "  mul.wide.s32 %rd3, %r1, 4;\n"
    "  add.s64 %rd4, %rd2, %rd3;\n"
    "  st.global.f32 [%rd4], %f1;\n"
    "DONE:\n"
    "  ret;\n"
    "}\n";

static void *dev_alloc(void *ctx, size_t n)
{
    (void)ctx;
    void *p = NULL;
    return cudaMalloc(&p, n) == cudaSuccess ? p : NULL;
}

static void dev_free(void *ctx, void *p)
{
    (void)ctx;
    cudaFree(p);
}

static void cu_ok(cudaError_t e, const char *call)
{
    cr_assert_eq(e, cudaSuccess, "%s: %s", call, cudaGetErrorString(e));
}
#define CU(call) cu_ok((call), #call)
#endif

Test(prof_cupti, gpu_activity_should_aggregate_to_what_was_issued)
{
    if (!have_device()) cr_skip_test("skipped: no CUDA device");
    if (!MEMPLAN_CUPTI) cr_skip_test("skipped: built without CUPTI");
#if MEMPLAN_CUDA
    const int n = 1 << 18;                   /* floats: 1 MiB */
    const size_t A = 4u << 20, B = 2u << 20; /* device bytes: multiples of the 2 MiB page */
    CU(cudaSetDevice(0));
    cudaLibrary_t lib;
    cudaKernel_t fill;
    CU(cudaLibraryLoadData(&lib, FILL_PTX, NULL, NULL, 0, NULL, NULL, 0));
    CU(cudaLibraryGetKernel(&fill, lib, "memplan_fill_kernel"));
    float *host = NULL;
    CU(cudaMallocHost((void **)&host, (size_t)n * sizeof(float)));   /* pinned: one copy record */
    for (int i = 0; i < n; i++) host[i] = 0.0f;
    MemTracker *t = prof_mem_create(dev_alloc, dev_free, NULL, 0);

    char err[256];
    ProfCupti *s = prof_cupti_start(0, err, sizeof err);
    cr_assert(s, "prof_cupti_start: %s", err);
    prof_cupti_set_phase(s, "alloc");
    float *a = prof_mem_alloc(t, MEM_PARAMS, A, "a");
    void *b = prof_mem_alloc(t, MEM_ACTIVATIONS, B, "b");
    cr_assert(a && b);
    CU(cudaDeviceSynchronize());

    prof_cupti_set_phase(s, "compute");
    int count = n;
    float v = 3.0f;
    void *args[] = {&a, &v, &count};
    dim3 grid = {(unsigned)(n / 256), 1, 1}, block = {256, 1, 1};
    for (int k = 0; k < 3; k++) CU(cudaLaunchKernel((const void *)fill, grid, block, args, 0, 0));
    CU(cudaGetLastError());
    CU(cudaMemcpy(a, host, (size_t)n * sizeof(float), cudaMemcpyHostToDevice));
    CU(cudaMemcpy(host, a, (size_t)n * sizeof(float), cudaMemcpyDeviceToHost));
    CU(cudaMemset(b, 0, B));
    CU(cudaDeviceSynchronize());

    prof_cupti_set_phase(s, "free");
    prof_mem_free(t, a);
    prof_mem_free(t, b);
    CU(cudaDeviceSynchronize());
    cr_assert_eq(prof_cupti_stop(s), 0);

    cr_expect_eq(prof_cupti_dropped_records(s), 0);
    const ProfCuptiPhase *al = prof_cupti_phase(s, "alloc"), *co = prof_cupti_phase(s, "compute"),
                         *fr = prof_cupti_phase(s, "free");
    cr_assert(al && co && fr);
    cr_expect_eq(co->kernels.count, 3);
    cr_expect_gt(co->kernels.us, 0);
    cr_expect_eq(co->nccl_total.count, 0);
    cr_expect_eq(co->memcpy[CUPTI_COPY_HTOD].count, 1);
    cr_expect_float_eq(co->memcpy[CUPTI_COPY_HTOD].bytes, (double)n * 4, 0);
    cr_expect_eq(co->memcpy[CUPTI_COPY_DTOH].count, 1);
    cr_expect_float_eq(co->memcpy[CUPTI_COPY_DTOH].bytes, (double)n * 4, 0);
    cr_expect_eq(co->memset.count, 1);
    cr_expect_float_eq(co->memset.bytes, (double)B, 0);
    cr_expect_eq(al->alloc.count, 2);
    cr_expect_float_eq(al->alloc.bytes, (double)(A + B), 0);
    cr_expect_eq(fr->release.count, 2);
    CuptiMemSummary m = prof_cupti_memory(s);
    cr_expect_float_eq(m.peak, (double)(A + B), 0, "the timeline's peak is what was allocated");
    cr_expect_float_eq(m.current, 0, 0);
    CuptiMemCheck c = prof_cupti_check_mem(s, t, 0.0);
    cr_expect(c.within, "CUPTI peak %.0f vs tracked %.0f", c.cupti_peak, c.tracked_peak);
    TraceEvent ev[64];
    int ne = prof_cupti_export(s, 0, prof_clock_us(), ev, 64);
    int kernels = 0, copies = 0;
    for (int i = 0; i < ne && i < 64; i++) {
        kernels += ev[i].kind == TRACE_COMPLETE && ev[i].tid == CUPTI_LANE_KERNELS;
        copies += ev[i].kind == TRACE_COMPLETE && ev[i].tid == CUPTI_LANE_MEMCPY;
        if (ev[i].tid == CUPTI_LANE_KERNELS) cr_expect_str_eq(ev[i].name, "memplan_fill_kernel");
    }
    cr_expect_eq(kernels, 3);
    cr_expect_eq(copies, 3, "two copies and a memset");
    prof_cupti_destroy(s);
    prof_mem_destroy(t);
    cudaFreeHost(host);
    cudaLibraryUnload(lib);
#endif
}
