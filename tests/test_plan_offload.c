/* test_plan_offload.c — CPU offload and host memory against DeepSpeed's own estimators
 * (deepspeed/runtime/zero/stage_1_and_2.py estimate_zero2_model_states_mem_needs, stage3.py
 * estimate_zero3_model_states_mem_needs, 0.19.8: formulas copied below), FSDP CPUOffload, the
 * host-memory verdict, host traffic and the CPU step; and auto's pick on the cases of issue 12. */
#include <criterion/criterion.h>
#include <math.h>
#include <string.h>

#include "plan_auto.h"
#include "plan_deepspeed.h"
#include "plan_dim_offload.h"
#include "test_plan.h"

/* DeepSpeed 0.19.8, verbatim in C: (cpu_mem per node, gpu_mem per GPU) */
static void ds_zero2(double total_params, double gpn, double nodes, int cpu_offload, double *cpu, double *gpu) {
    double total_gpus = nodes * gpn, f = 1.5;
    if (cpu_offload) {
        *gpu = 2 * total_params;
        *cpu = total_params * fmax(4 * total_gpus, 16) * f;
    } else {
        *gpu = 2 * total_params + floor(18 * total_params / total_gpus);
        *cpu = total_params * 4 * gpn * f;
    }
}

static void ds_zero3(double total_params, double largest, double gpn, double nodes, int off, int off_params,
                     double *cpu, double *gpu) {
    double total_gpus = nodes * gpn, gpus_factor = 1 / nodes, f = 1.5, llm = 4 * largest;
    if (off && off_params) { *gpu = llm; *cpu = total_params * 18 * gpus_factor * f; }
    else if (off) { *gpu = llm + floor(2 * total_params / total_gpus); *cpu = total_params * 16 * gpus_factor * f; }
    else { *gpu = llm + floor(18 * total_params / total_gpus); *cpu = largest * 4 * gpn * f; }
}

static double largest_layer(const ModelSpec *m) {
    double l = 0;
    for (int i = 0; i < m->n_layers; i++) if ((double)m->layers[i].params > l) l = (double)m->layers[i].params;
    return l;
}

static void setup(TrainSpec *t, ClusterSpec *c, int64_t gpus, int64_t gpn, OffloadKind off) {
    plan_train_defaults(t);
    t->precision = PREC_MIXED_BF16;   /* DeepSpeed bf16: 16-bit model, fp32 master in the optimizer */
    t->offload = off;
    cluster(c, gpus, gpn);
    c->host_mem = 1e15;
}

#define REL(a, b) (fabs((a) - (b)) / (b))

Test(offload, zero2_should_reproduce_deepspeeds_estimator_on_one_node) {
    ModelSpec m = zoo("llama2-7b");
    double psi = (double)plan_model_params(&m), cpu, gpu;
    for (int64_t g = 1; g <= 8; g *= 2) {
        TrainSpec t;
        ClusterSpec c;
        setup(&t, &c, g, g, OFFLOAD_OPT);
        MemResult r;
        plan_memory(&m, &t, &c, STRAT_ZERO2, &r);
        ds_zero2(psi, (double)g, 1, 1, &cpu, &gpu);
        cr_expect_lt(REL(r.host_per_node, cpu), 1e-6, "%lld GPUs: host %.0f vs DeepSpeed %.0f", (long long)g, r.host_per_node, cpu);
        cr_expect_lt(REL(r.model_states, gpu), 1e-9, "GPU keeps the 16-bit parameters only: %.0f vs %.0f", r.model_states, gpu);
        t.offload = OFFLOAD_NONE;
        plan_memory(&m, &t, &c, STRAT_ZERO2, &r);
        ds_zero2(psi, (double)g, 1, 0, &cpu, &gpu);
        cr_expect_lt(REL(r.host_per_node, cpu), 1e-9, "no offload: the fp32 model each rank loads, x1.5");
    }
    plan_model_free(&m);
}

Test(offload, zero3_should_reproduce_deepspeeds_estimator_with_zero_init) {
    ModelSpec m = zoo("llama2-13b");
    double psi = (double)plan_model_params(&m), ll = largest_layer(&m), cpu, gpu;
    TrainSpec t;
    ClusterSpec c;
    for (int nodes = 1; nodes <= 4; nodes *= 2) {
        setup(&t, &c, 8 * nodes, 8, OFFLOAD_PARAM);
        MemResult r;
        plan_memory(&m, &t, &c, STRAT_ZERO3, &r);
        ds_zero3(psi, ll, 8, nodes, 1, 1, &cpu, &gpu);
        cr_expect_lt(REL(r.host_per_node, cpu), 1e-4, "offload_param, %d nodes: host %.0f vs %.0f", nodes, r.host_per_node, cpu);
        cr_expect_eq(r.model_states, 0, "parameters, gradients and optimizer state all on the host");
        /* DeepSpeed's estimator puts 4 x the largest layer on the GPU (gpu here); the planner follows
           the gathering measured in DeepSpeed itself instead (module by module, prefetch and
           live-parameter caps: docs/formulas.md "DeepSpeed ZeRO-3" under "Checked against PyTorch"), so the gathered
           16-bit units lie between one largest layer and the whole 16-bit model, beside the bucket */
        double bucket = PLAN_DS_REDUCE_BUCKET * 2, gathered = r.term[TERM_COMM] - bucket;
        cr_expect_geq(gathered, 2 * ll, "gathered units %.0f below one largest layer %.0f", gathered, 2 * ll);
        cr_expect_leq(gathered, 2 * psi, "gathered units %.0f above the 16-bit model %.0f", gathered, 2 * psi);
        (void)gpu;
        t.offload = OFFLOAD_OPT;
        plan_memory(&m, &t, &c, STRAT_ZERO3, &r);
        ds_zero3(psi, ll, 8, nodes, 1, 0, &cpu, &gpu);
        cr_expect_lt(REL(r.host_per_node, cpu), 1e-4, "offload_optimizer: host %.0f vs %.0f", r.host_per_node, cpu);
        /* + the tensors below stage3_param_persistence_threshold, whole on every rank, which
           DeepSpeed's estimator leaves out (docs/formulas.md "DeepSpeed ZeRO-3 persistent tensors") */
        DsSizes ds;
        plan_ds_sizes(&m, c.gpus, PLAN_DS3_PERSIST, &ds);
        cr_expect_lt(REL(r.model_states - ds.persist_padded * 2, gpu - 4 * ll), 1e-4, "GPU keeps its 16-bit partition");
        t.offload = OFFLOAD_NONE;
        plan_memory(&m, &t, &c, STRAT_ZERO3, &r);
        ds_zero3(psi, ll, 8, nodes, 0, 0, &cpu, &gpu);
        cr_expect_lt(REL(r.host_per_node, cpu), 1e-9, "zero.Init: the largest layer per rank, x1.5");
    }
    plan_model_free(&m);
}

Test(offload, fsdp_cpu_offload_should_move_params_grads_and_state_to_the_host) {
    ModelSpec m = zoo("gpt2-xl");
    TrainSpec t;
    ClusterSpec c;
    setup(&t, &c, 8, 8, OFFLOAD_NONE);
    MemResult on, off;
    MemSizes z;
    plan_memory(&m, &t, &c, STRAT_FSDP_FULL, &off);
    t.offload = OFFLOAD_PARAM;
    plan_memory(&m, &t, &c, STRAT_FSDP_FULL, &on);
    plan_memory_sizes(&m, &t, &c, STRAT_FSDP_FULL, &z);
    cr_expect_eq(on.model_states, 0);
    /* the GPU peak drops by about the model states alive at it (FSDP2 peaks at the loss's
       backward, before any gradient shard exists) */
    double live = off.term[TERM_PARAMS] + off.term[TERM_GRADS] + off.term[TERM_OPTIMIZER];
    cr_expect_gt(live, 0.7 * off.model_states);
    cr_expect_lt(on.peak, off.peak - 0.9 * live, "the GPU peak drops by about the model states");
    /* fp32 shard (the master under MixedPrecision) + fp32 gradient shard + two fp32 Adam states */
    cr_expect_lt(REL(on.host_per_node, z.psi_shard * 16 * 8), 1e-12, "host %.0f", on.host_per_node);
    /* unsupported: DDP has no offload, its memory is unchanged */
    MemResult d0, d1;
    plan_memory(&m, &t, &c, STRAT_DDP, &d1);
    t.offload = OFFLOAD_NONE;
    plan_memory(&m, &t, &c, STRAT_DDP, &d0);
    cr_expect_eq(d0.peak, d1.peak);
    plan_model_free(&m);
}

Test(offload, host_memory_should_be_a_verdict_of_its_own) {
    ModelSpec m = zoo("llama2-7b");
    TrainSpec t;
    ClusterSpec c;
    setup(&t, &c, 8, 8, OFFLOAD_OPT);
    c.host_mem = 0;   /* the preset's node: DGX A100 320GB, 1 TiB */
    cr_expect_eq(plan_cluster_host_mem(&c), 1024.0 * 1024 * 1024 * 1024);
    MemResult r;
    plan_memory(&m, &t, &c, STRAT_ZERO3, &r);
    cr_expect(r.gpu_fits && r.host_fits && r.fits);
    c.host_mem = 64.0 * 1024 * 1024 * 1024;
    plan_memory(&m, &t, &c, STRAT_ZERO3, &r);
    cr_expect(r.gpu_fits, "the GPU side does not change");
    cr_expect(!r.host_fits && !r.fits, "does not fit in host memory: %.1f GiB of 64", r.host_per_node / (1 << 30));
    cr_expect_eq(plan_max_micro_batch(&m, &t, &c, STRAT_ZERO3, 64), 0);
    plan_model_free(&m);
}

Test(offload, host_traffic_and_cpu_step_should_enter_the_comm_table_and_the_step) {
    ModelSpec m = zoo("llama2-7b");
    TrainSpec t;
    ClusterSpec c;
    setup(&t, &c, 8, 8, OFFLOAD_NONE);
    t.grad_accum = 4;
    MemSizes z;
    plan_memory_sizes(&m, &t, &c, STRAT_ZERO2, &z);
    CommPlan p0, p1;
    SimResult s0, s1;
    plan_comm(&m, &t, &c, STRAT_ZERO2, &p0);
    plan_sim(&m, &t, &c, STRAT_ZERO2, 0, &s0);
    cr_expect_eq(p0.n_host, 0);
    t.offload = OFFLOAD_OPT;
    plan_comm(&m, &t, &c, STRAT_ZERO2, &p1);
    plan_sim(&m, &t, &c, STRAT_ZERO2, 0, &s1);
    cr_assert_eq(p1.n_host, 2);
    /* ZeRO-2 copies its gradient partition to the host every micro-step, converted to fp32 on the
       GPU first (async_inplace_copy_grad_to_fp32_buffer_from_gpu); the updated bf16 partition
       comes back once */
    cr_expect_eq(p1.host[0].bytes, z.psi_shard * 4 * 4);
    cr_expect_eq(p1.host[1].bytes, z.psi_shard * 2);
    cr_expect_eq(p1.wire_bytes, p0.wire_bytes, "host copies are not network traffic");
    cr_expect_lt(fabs(p1.host_seconds - p1.host_bytes / (c.gpu.host_bw * 1e9)), 1e-12);
    OffloadHost h;
    plan_offload_host(&m, &t, &c, STRAT_ZERO2, &h);
    /* the CPU step at half the node's DRAM bandwidth, shared by 8 ranks: CPU Adam's 28 B per
       parameter (read param, grad, m, v; write param, m, v: 4 B each), + unscale_and_clip_grads'
       mul_ over the fp32 gradient (read and write: 8 B), + the fp32 -> bf16 conversion of the copy
       into the 16-bit partition (read 4, write 2): 42 B */
    double expect = z.psi_shard * 8 * 42 / (c.gpu.host_mem_bw * 1e9 * PLAN_CPU_ADAM_BW_FRAC);
    cr_expect_lt(REL(h.cpu_step_s, expect), 1e-12);
    cr_expect_gt(s1.step_s, s0.step_s + h.cpu_step_s * 0.99, "the CPU step is on the critical path");
    plan_model_free(&m);
}

/* ---- auto on the cases of issue 12 ---- */

static void run_auto(const char *model, int64_t gpus, int64_t gpn, const char *gpu, double mem_gib, int64_t seq,
                     AutoResult *r) {
    ModelSpec m = zoo(model);
    TrainSpec t;
    plan_train_defaults(&t);
    t.seq = seq;
    ClusterSpec c;
    cluster(&c, gpus, gpn);
    if (gpu) c.gpu = *plan_gpu_by_name(gpu);
    if (mem_gib > 0) c.gpu.mem_bytes = mem_gib * 1024 * 1024 * 1024;
    AutoSpec a;
    plan_auto_defaults(&a);
    a.max_micro_batch = 64;
    a.precisions = plan_auto_precisions(t.precision);
    plan_auto(&m, &t, &c, &a, r);
    plan_model_free(&m);
}

Test(auto_cases, gpt2_on_8_a100_should_pick_ddp) {
    AutoResult r;
    run_auto("gpt2", 8, 8, "a100-40gb", 0, 0, &r);
    cr_assert(r.found, "%s", r.explain);
    cr_expect_eq(r.strategy, STRAT_DDP, "%s", r.explain);
    cr_expect_eq(r.train.offload, OFFLOAD_NONE);
}

Test(auto_cases, gpt2_xl_on_8_x_24_gib_should_pick_a_fast_plan_with_margin) {
    AutoResult r;
    run_auto("gpt2-xl", 8, 8, NULL, 24, 0, &r);
    cr_assert(r.found, "%s", r.explain);
    cr_expect_geq(r.margin, 0.05 * 24 * 1024 * 1024 * 1024);
    cr_expect_geq(r.mem.headroom, r.margin, "%s", r.explain);
    cr_expect_geq(r.time.tokens_per_s, r.top_tps * (1 - PLAN_AUTO_NEAR));
    /* faster than the seed's pick (zero1, full checkpointing, micro-batch 4: 69,390 tokens/s) */
    cr_expect_gt(r.time.tokens_per_s, 69390 * 1.1, "%s", r.explain);
    cr_expect(strstr(r.explain, "runner-up: ") && strstr(r.explain, "ddp does not fit"), "%s", r.explain);
}

Test(auto_cases, llama2_70b_on_64_h100_at_seq_4096_should_find_a_working_recipe) {
    AutoResult r;
    run_auto("llama2-70b", 64, 8, "h100-80gb", 0, 4096, &r);
    cr_assert(r.found, "%s", r.explain);
    cr_expect(plan_strategy(r.strategy)->shard & SHARD_PARAM, "70B needs its parameters sharded");
    cr_expect(r.mem.fits && r.mem.headroom >= r.margin);
    cr_expect_gt(r.time.tokens_per_s, 0);
}

Test(auto_cases, llama2_7b_on_one_24_gib_gpu_should_offload_or_say_how_many_gpus) {
    AutoResult r;
    run_auto("llama2-7b", 1, 1, NULL, 24, 0, &r);
    if (r.found) {
        cr_expect_neq(r.train.offload, OFFLOAD_NONE, "%s", r.explain);
        cr_expect(r.mem.host_fits && r.mem.headroom >= r.margin);
    } else {
        cr_expect(strstr(r.fix, "--gpus"), "%s", r.explain);
    }
}

Test(auto_cases, nothing_fits_should_name_the_cheapest_changes) {
    AutoResult r;
    run_auto("llama2-70b", 2, 2, "rtx4090", 0, 0, &r);
    cr_assert(!r.found, "%s", r.explain);
    cr_expect(strstr(r.fix, "--gpus "), "%s", r.fix);
    cr_expect(strstr(r.explain, "would fit with: "), "%s", r.explain);
}

/* The step's rules read the host's figures once per build (plan_step_ctx.c: plan_offload_host_sized
   with the sizes the context already holds); they equal plan_offload_host's, which sizes the
   model itself, byte for byte, for every strategy, offload and precision of two models. */
Test(offload, the_host_figures_from_given_sizes_should_equal_those_sized_afresh) {
    static const char *const MODELS[] = {"gpt2-xl", "llama2-7b"};
    int some = 0;
    for (size_t mi = 0; mi < sizeof MODELS / sizeof MODELS[0]; mi++) {
        ModelSpec m = zoo(MODELS[mi]);
        for (int k = 0; k < STRAT_COUNT; k++)
            for (int o = 0; o < OFFLOAD_COUNT; o++)
                for (int p = 0; p < PREC_COUNT; p++) {
                    TrainSpec t;
                    plan_train_defaults(&t);
                    t.offload = (OffloadKind)o;
                    t.precision = (PrecisionKind)p;
                    t.grad_accum = 2;
                    ClusterSpec c;
                    cluster(&c, 16, 8);
                    MemSizes z;
                    plan_memory_sizes(&m, &t, &c, (StrategyKind)k, &z);
                    OffloadHost fresh, given;
                    plan_offload_host(&m, &t, &c, (StrategyKind)k, &fresh);
                    plan_offload_host_sized(&m, &t, &c, (StrategyKind)k, &z, &given);
                    cr_expect_eq(memcmp(&fresh, &given, sizeof fresh), 0, "%s %s offload %d precision %d", m.name,
                                 plan_strategy((StrategyKind)k)->name, o, p);
                    some += fresh.d2h_bytes > 0;
                }
        plan_model_free(&m);
    }
    cr_expect_gt(some, 0, "some setup should copy to the host");
}
