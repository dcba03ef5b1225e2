/* test_plan_sim.c — the simulated step and auto mode. */
#include <criterion/criterion.h>
#include <math.h>
#include <string.h>

#include "plan_auto.h"
#include "plan_comm.h"
#include "plan_sim.h"
#include "plan_step.h"
#include "plan_zoo.h"
#include "test_plan.h"

/* The memory curve is stamped with the simulated times: its largest point falls in the phase
   the memory model names for the peak (one micro-step: forward, then backward, then the step). */
Test(sim, the_memory_curve_should_peak_inside_the_phase_the_memory_model_names) {
    const char *models[] = {"gpt2", "bert-base", "resnet50", "llama2-7b"};
    for (int mi = 0; mi < 4; mi++) {
        ModelSpec m = zoo(models[mi]);
        TrainSpec t;
        plan_train_defaults(&t);
        t.micro_batch = 2;
        ClusterSpec c;
        cluster(&c, 16, 8);
        for (int k = 0; k < STRAT_COUNT; k++) {
            SimResult s;
            MemResult r;
            cr_assert_eq(plan_sim(&m, &t, &c, (StrategyKind)k, 1, &s), 0);
            plan_memory(&m, &t, &c, (StrategyKind)k, &r);
            double at = -1, top = -1;
            for (int i = 0; i < s.n_mem; i++) if (s.mem[i].total > top) { top = s.mem[i].total; at = s.mem[i].t; }
            double f0 = s.zero_s, f1 = f0 + s.fwd_s, b1 = f1 + s.bwd_s, eps = 1e-12;
            double lo = r.peak_phase == PHASE_FORWARD ? f0 : r.peak_phase == PHASE_BACKWARD ? f1 : b1;
            double hi = r.peak_phase == PHASE_FORWARD ? f1 : r.peak_phase == PHASE_BACKWARD ? b1 : s.step_s;
            cr_expect(at >= lo - eps && at <= hi + eps, "%s %s: peak (%s) at %.6f s, outside [%.6f, %.6f]", models[mi],
                      plan_strategy((StrategyKind)k)->name, phase_name(r.peak_phase), at, lo, hi);
            cr_expect_gt(s.n_ops, 0);
            cr_expect_geq(s.step_s + 1e-12, s.compute_s);
            cr_expect_leq(s.exposed_comm_s, s.comm_s + 1e-12);
            for (int i = 1; i < s.n_mem; i++) cr_expect_geq(s.mem[i].t + 1e-12, s.mem[i - 1].t, "time runs forward");
            plan_sim_free(&s);
        }
        plan_model_free(&m);
    }
}

Test(sim, ddp_bucket_all_reduces_should_overlap_backward) {
    ModelSpec m = zoo("gpt2-medium");
    TrainSpec t;
    plan_train_defaults(&t);
    t.micro_batch = 8;
    ClusterSpec c;
    cluster(&c, 8, 8);
    SimResult s;
    plan_sim(&m, &t, &c, STRAT_DDP, 0, &s);
    cr_expect_gt(s.comm_s, 0);
    cr_expect_lt(s.exposed_comm_s, s.comm_s, "some communication is hidden under backward");
    plan_model_free(&m);
}

Test(sim, one_gpu_should_have_no_communication) {
    ModelSpec m = zoo("gpt2");
    TrainSpec t;
    plan_train_defaults(&t);
    ClusterSpec c;
    cluster(&c, 1, 1);
    for (int k = 0; k < STRAT_COUNT; k++) {
        SimResult s;
        plan_sim(&m, &t, &c, (StrategyKind)k, 0, &s);
        cr_expect_eq(s.comm_s, 0);
        cr_expect(fabs(s.step_s - s.compute_s) < 1e-12);
    }
    plan_model_free(&m);
}

Test(sim, checkpointing_should_cost_one_more_forward) {
    ModelSpec m = zoo("gpt2");
    TrainSpec t;
    plan_train_defaults(&t);
    ClusterSpec c;
    cluster(&c, 1, 1);
    SimResult a, b;
    plan_sim(&m, &t, &c, STRAT_DDP, 0, &a);
    t.act_ckpt = CKPT_FULL;
    plan_sim(&m, &t, &c, STRAT_DDP, 0, &b);
    cr_expect_gt(b.compute_s, a.compute_s);
    cr_expect_lt(b.compute_s, a.compute_s * 4.0 / 3.0 + 1e-9, "at most 4/3: one more forward of the blocks");
    plan_model_free(&m);
}

Test(auto_mode, should_pick_ddp_when_it_fits_with_the_margin_and_is_within_a_few_percent) {
    const char *models[] = {"gpt2", "gpt2-medium", "gpt2-xl", "bert-large", "resnet50", "llama2-7b"};
    const double mem_gib[] = {16, 24, 40, 80};
    for (int mi = 0; mi < 6; mi++) {
        ModelSpec m = zoo(models[mi]);
        for (int gi = 0; gi < 4; gi++) {
            TrainSpec t;
            plan_train_defaults(&t);
            ClusterSpec c;
            cluster(&c, 8, 8);
            c.gpu.mem_bytes = mem_gib[gi] * 1024.0 * 1024 * 1024;
            AutoSpec a;
            plan_auto_defaults(&a);
            a.max_micro_batch = 64;
            a.precisions = plan_auto_precisions(t.precision);
            AutoResult ar, ddp;
            plan_auto(&m, &t, &c, &a, &ar);
            a.strategies = 1u << STRAT_DDP;   /* DDP's own best setup with the margin */
            plan_auto(&m, &t, &c, &a, &ddp);
            if (ddp.found) {
                cr_assert(ar.found);
                if (ddp.time.tokens_per_s >= ar.top_tps * (1 - PLAN_AUTO_NEAR))
                    cr_expect_eq(ar.strategy, STRAT_DDP, "%s at %.0f GiB: DDP within 3%% (%.0f vs %.0f), picked %s",
                                 models[mi], mem_gib[gi], ddp.time.tokens_per_s, ar.top_tps,
                                 plan_strategy(ar.strategy)->name);
                else   /* it lost on speed: the fastest is more than 3% faster */
                    cr_expect_lt(ddp.time.tokens_per_s, ar.top_tps * (1 - PLAN_AUTO_NEAR));
                cr_expect_geq(ar.time.tokens_per_s, ar.top_tps * (1 - PLAN_AUTO_NEAR) - 1e-6);
            } else if (ar.found) {
                cr_expect_neq(ar.strategy, STRAT_DDP);
            }
            if (ar.found) {   /* every pick leaves the margin on the GPU and fits the host */
                cr_expect_geq(ar.mem.headroom, ar.margin, "%s at %.0f GiB", models[mi], mem_gib[gi]);
                cr_expect(ar.mem.fits);
            }
        }
        plan_model_free(&m);
    }
}

Test(auto_mode, should_meet_the_global_batch_exactly) {
    ModelSpec m = zoo("gpt2");
    TrainSpec t;
    plan_train_defaults(&t);
    ClusterSpec c;
    cluster(&c, 8, 8);
    AutoSpec a;
    plan_auto_defaults(&a);
    a.global_batch = 512;
    AutoResult r;
    plan_auto(&m, &t, &c, &a, &r);
    cr_assert(r.found);
    cr_expect_eq(r.train.micro_batch * r.train.grad_accum * 8, 512);
    cr_expect(r.mem.fits);
    a.global_batch = 100;   /* not a multiple of 8 GPUs */
    plan_auto(&m, &t, &c, &a, &r);
    cr_expect(!r.found);
    plan_model_free(&m);
}

/* auto searches torchtitan's op-level policy between none and full: LLaMA-2 7B at 4k on 8 x
   40 GB does not fit without checkpointing, and op keeps enough to run a step faster than full
   at the same micro-batch (kept at 1 here: across micro-batches full at 3 and op at 1 are within
   2 % of each other, so which wins there is the time model's, not the search's); an encoder is
   offered none and full only. */
Test(auto_mode, should_search_op_level_checkpointing_for_decoders) {
    ModelSpec m = zoo("llama2-7b");
    TrainSpec t;
    plan_train_defaults(&t);
    t.seq = 4096;
    t.micro_batch = 1;
    ClusterSpec c;
    cluster(&c, 8, 8);
    AutoSpec a;
    plan_auto_defaults(&a);
    a.keep_batch = 1;
    AutoResult r;
    plan_auto(&m, &t, &c, &a, &r);
    cr_assert(r.found);
    cr_expect_eq(r.train.act_ckpt, CKPT_OP, "picked %s", plan_ckpt_name(r.train.act_ckpt));
    plan_model_free(&m);
    m = zoo("bert-large");
    plan_train_defaults(&t);
    t.micro_batch = 64;
    a.keep_batch = 1;
    plan_auto(&m, &t, &c, &a, &r);
    cr_assert(r.found);
    cr_expect_neq(r.train.act_ckpt, CKPT_OP);
    plan_model_free(&m);
}

Test(auto_mode, should_advise_syncbn_only_for_small_per_gpu_batches) {
    ModelSpec m = zoo("resnet50");
    TrainSpec t;
    plan_train_defaults(&t);
    ClusterSpec c;
    cluster(&c, 8, 8);
    AutoSpec a;
    plan_auto_defaults(&a);
    a.global_batch = 64;     /* 8 per GPU at most */
    AutoResult r;
    plan_auto(&m, &t, &c, &a, &r);
    cr_assert(r.found);
    cr_expect(strstr(r.explain, "SyncBN is worth it"), "%s", r.explain);
    a.global_batch = 1024;
    plan_auto(&m, &t, &c, &a, &r);
    cr_expect(strstr(r.explain, "SyncBN not needed"), "%s", r.explain);
    plan_model_free(&m);
}

/* ---- the time model's terms (docs/formulas.md "Time") ---- */

#define REL(a, b) (fabs((a) - (b)) / fabs(b))

static TrainSpec gpt2_step(int64_t b, int64_t s, ImplKind impl) {
    TrainSpec t;
    plan_train_defaults(&t);
    t.micro_batch = b;
    t.seq = s;
    t.precision = PREC_FP32;
    t.attn = ATTN_EAGER;
    t.dropout = 0;
    t.impl = impl;
    return t;
}

Test(sim_time, the_engine_attention_should_count_the_keys_of_its_causal_blocks) {
    TrainSpec eng = gpt2_step(1, 128, IMPL_ENGINE), pt = gpt2_step(1, 128, IMPL_PYTORCH);
    /* blocks of 64 query rows: rows 0-63 see 64 keys, rows 64-127 see 128 */
    cr_expect_eq(plan_attn_keys_per_query(&eng, 128), (64.0 * 64 + 64.0 * 128) / 128);   /* 96 */
    cr_expect_eq(plan_attn_keys_per_query(&eng, 64), 64);
    cr_expect_eq(plan_attn_keys_per_query(&eng, 100), (64.0 * 64 + 36.0 * 100) / 100);
    cr_expect_eq(plan_attn_keys_per_query(&pt, 128), 128, "PyTorch's eager attention scores every key");
    ModelSpec m = zoo("gpt2");
    double p = (double)m.layers[1].params, attn = 768;   /* 12 heads x 64 */
    cr_expect(REL(plan_layer_fwd_flops(&m, 1, &eng), 128 * (2 * p + 4 * 96 * attn)) < 1e-12);
    cr_expect(REL(plan_layer_fwd_flops(&m, 1, &pt), 128 * (2 * p + 4 * 128 * attn)) < 1e-12);
    plan_model_free(&m);
}

Test(sim_time, a_gpt2_block_should_move_the_bytes_of_its_elementwise_passes) {
    ModelSpec m = zoo("gpt2");
    double h = 768, f = 3072, a = 12, s = 128, n = 2 * s, fwd, bwd;
    cr_assert_eq(m.layers[1].kind, LAYER_BLOCK);
    /* the engine: norms 2 x (read h, write h), bias rows written before 4 GEMMs (3h + h + 4h + h),
       softmax (read, write a·s per token), GELU (read f, write f), two residual adds (3h each);
       backward: norms 2 x 4h (in place), bias gradients read 9h, softmax 3·a·s, GELU 4f (in
       place), scratch zeroed 2f + 3h + 3h: 27h + 2as and 47h + 3as per token, fp32 */
    TrainSpec t = gpt2_step(2, 128, IMPL_ENGINE);
    plan_layer_mem_bytes(&m, 1, &t, &fwd, &bwd);
    cr_expect(REL(fwd, (27 * h + 2 * a * s) * n * 4) < 1e-12, "%f", fwd);
    cr_expect(REL(bwd, (47 * h + 3 * a * s) * n * 4) < 1e-12, "%f", bwd);
    /* PyTorch: no bias pass (fused into the GEMM), no zeroing, no in-place reads, but autograd
       sums the two residual branches (2 x 3h) */
    t = gpt2_step(2, 128, IMPL_PYTORCH);
    plan_layer_mem_bytes(&m, 1, &t, &fwd, &bwd);
    cr_expect(REL(fwd, (4 * h + 2 * a * s + 2 * f + 6 * h) * n * 4) < 1e-12, "%f", fwd);
    cr_expect(REL(bwd, (6 * h + 3 * a * s + 3 * f + 9 * h + 6 * h) * n * 4) < 1e-12, "%f", bwd);
    t.attn = ATTN_SDPA;   /* the fused kernel keeps the scores on chip */
    plan_layer_mem_bytes(&m, 1, &t, &fwd, &bwd);
    cr_expect(REL(fwd, (4 * h + 2 * f + 6 * h) * n * 4) < 1e-12, "%f", fwd);
    t.precision = PREC_BF16;   /* 2-byte activations */
    double fwd2, bwd2;
    plan_layer_mem_bytes(&m, 1, &t, &fwd2, &bwd2);
    cr_expect(REL(fwd2, fwd / 2) < 1e-12);
    plan_model_free(&m);
}

Test(sim_time, the_head_should_move_the_vocabulary_per_pass_and_a_headless_model_nothing) {
    ModelSpec m = zoo("gpt2");
    int head = m.n_layers - 1;
    cr_assert_eq(m.layers[head].kind, LAYER_HEAD);
    double V = 50257, n = 4 * 64, fwd, bwd;
    TrainSpec t = gpt2_step(4, 64, IMPL_ENGINE);
    plan_layer_mem_bytes(&m, head, &t, &fwd, &bwd);
    /* the engine's fused LM head: the log-sum-exp reads the logits; backward rewrites them as
       their gradient in place */
    cr_expect(REL(fwd, 1 * V * n * 4) < 1e-12, "log-sum-exp: read the logits");
    cr_expect(REL(bwd, 2 * V * n * 4) < 1e-12, "read the logits, write dlogits over them");
    t.impl = IMPL_PYTORCH;
    plan_layer_mem_bytes(&m, head, &t, &fwd, &bwd);
    cr_expect(REL(fwd, 2 * V * n * 4) < 1e-12, "log_softmax: read logits, write log-probabilities");
    cr_expect(REL(bwd, 2 * V * n * 4) < 1e-12);
    m.headless = 1;
    plan_layer_mem_bytes(&m, head, &t, &fwd, &bwd);
    cr_expect_eq(fwd + bwd, 0);
    plan_model_free(&m);
}

Test(sim_time, one_rank_step_should_be_flops_at_the_rate_plus_bytes_at_the_bandwidths) {
    ModelSpec m = zoo("gpt2-mini");
    TrainSpec t = gpt2_step(4, 128, IMPL_ENGINE);
    ClusterSpec c;
    cluster(&c, 1, 1);
    for (int i = 0; i < 3; i++) c.gpu.peak_tflops[i] = 0.05;   /* 50 GFLOP/s */
    c.mfu = 1;
    c.gpu.mem_bw = 10;   /* GB/s, elementwise */
    c.opt_bw = 4;        /* GB/s, the optimizer's kernel */
    double expect = 0, psi = 0;
    for (int i = 0; i < m.n_layers; i++) {
        double fb, bb;
        plan_layer_mem_bytes(&m, i, &t, &fb, &bb);
        expect += 3 * plan_layer_fwd_flops(&m, i, &t) / 0.05e12 + (fb + bb) / 10e9;
        psi += (double)m.layers[i].params;
    }
    double opt = psi * 28 / 4e9;   /* fp32 AdamW: read p, g, m, v; write p, m, v */
    expect += opt + psi * 4 / 10e9;   /* + the engine zeroing its gradients before the step */
    SimResult s;
    cr_assert_eq(plan_sim(&m, &t, &c, STRAT_DDP, 0, &s), 0);
    cr_expect(REL(s.step_s, expect) < 1e-9, "%.9f vs %.9f", s.step_s, expect);
    cr_expect(REL(s.opt_s, opt) < 1e-9);
    cr_expect(REL(s.zero_s, psi * 4 / 10e9) < 1e-9);
    cr_expect(REL(s.compute_s, s.step_s) < 1e-12, "one rank: nothing exposed");
    plan_model_free(&m);
}

/* docs/formulas.md "The engine's buffer passes": the compute beyond the layers' and the
 * optimizer kernel's is the table's bytes at the elementwise rate */
Test(sim_time, the_engine_should_pay_its_buffer_passes_at_the_elementwise_rate) {
    ModelSpec m = zoo("gpt2-mini");
    ClusterSpec c;
    cluster(&c, 2, 2);
    for (int i = 0; i < 3; i++) c.gpu.peak_tflops[i] = 0.05;
    c.mfu = 1;
    c.gpu.mem_bw = 10;
    c.opt_bw = 4;
    for (int K = 1; K <= 2; K++)
        for (int k = STRAT_DDP; k <= STRAT_ZERO3; k++) {
            TrainSpec t = gpt2_step(2, 128, IMPL_ENGINE);
            t.grad_accum = K;
            MemSizes z;
            plan_memory_sizes(&m, &t, &c, (StrategyKind)k, &z);
            double layers = 0, psi = z.psi, S = z.psi_shard, n = 2;
            for (int i = 0; i < m.n_layers; i++) {
                double fb, bb;
                plan_layer_mem_bytes(&m, i, &t, &fb, &bb);
                TrainSpec t1 = t;
                t1.micro_batch = 1;
                layers += K * 2 * (3 * plan_layer_fwd_flops(&m, i, &t1) / 0.05e12) + K * (fb + bb) / 10e9;
            }
            double opt = (k == STRAT_DDP ? psi : S) * 28 / 4e9;
            double passes[] = {
                4 * psi + 8 * psi + 8 * psi,                                   /* ddp: once per step */
                4 * psi + 8 * psi + 8 * psi / n + 8 * S + 8 * psi,             /* zero1: once */
                4 * S + K * (4 * psi + 8 * psi + 12 * psi / n) + 8 * S + 8 * psi,   /* zero2: per micro */
                4 * S + K * (4 * psi + 12 * S),                                /* zero3: per micro */
            };
            SimResult r;
            cr_assert_eq(plan_sim(&m, &t, &c, (StrategyKind)k, 0, &r), 0);
            double got = r.compute_s - layers - opt, want = passes[k] / 10e9;
            cr_expect(REL(got, want) < 1e-6, "%s K=%d: passes %.6f ms, the table says %.6f ms",
                      plan_strategy((StrategyKind)k)->name, K, got * 1e3, want * 1e3);
            t.impl = IMPL_PYTORCH;   /* PyTorch's step has none of them */
            cr_assert_eq(plan_sim(&m, &t, &c, (StrategyKind)k, 0, &r), 0);
            cr_expect_eq(r.zero_s, 0);
        }
    plan_model_free(&m);
}

Test(sim_time, phase_walls_should_add_up_to_the_step_and_their_compute_to_the_compute) {
    ModelSpec m = zoo("gpt2-mini");
    ClusterSpec c;
    cluster(&c, 4, 4);
    for (int K = 1; K <= 2; K++)
        for (int k = 0; k < STRAT_COUNT; k++) {
            TrainSpec t = gpt2_step(2, 128, IMPL_ENGINE);
            t.grad_accum = K;
            SimResult s;
            cr_assert_eq(plan_sim(&m, &t, &c, (StrategyKind)k, 0, &s), 0);
            const char *n = plan_strategy((StrategyKind)k)->name;
            cr_expect(REL(s.zero_s + s.fwd_s + s.bwd_s + s.opt_s, s.step_s) < 1e-9, "%s K=%d", n, K);
            if (K == 1) {   /* the compute the trace records (the last micro-step and the step) is the compute counted */
                SimResult rec;
                cr_assert_eq(plan_sim(&m, &t, &c, (StrategyKind)k, 1, &rec), 0);
                double ops = 0;
                for (int i = 0; i < rec.n_ops; i++) if (rec.ops[i].lane == LANE_COMPUTE) ops += rec.ops[i].dur;
                cr_expect(REL(ops, s.compute_s) < 1e-9, "%s: traced compute %.9f, counted %.9f", n, ops, s.compute_s);
                plan_sim_free(&rec);
            }
            cr_expect_geq(s.fwd_s + 1e-12, s.fwd_compute_s, "%s: a wall holds its compute", n);
            cr_expect_geq(s.bwd_s + 1e-12, s.bwd_compute_s, "%s", n);
        }
    plan_model_free(&m);
}

Test(sim_time, the_engine_zero3_should_gather_the_root_once_per_pass_and_each_block_twice) {
    ModelSpec m = zoo("gpt2-mini");
    TrainSpec t = gpt2_step(2, 128, IMPL_ENGINE);
    ClusterSpec c;
    cluster(&c, 4, 4);
    SimResult s;
    cr_assert_eq(plan_sim(&m, &t, &c, STRAT_ZERO3, 1, &s), 0);
    int gathers = 0, root = 0, scatters = 0;
    for (int i = 0; i < s.n_ops; i++) {
        if (strncmp(s.ops[i].name, "all_gather", 10) == 0) gathers++;
        if (strcmp(s.ops[i].name, "all_gather root") == 0) root++;
        if (strncmp(s.ops[i].name, "reduce_scatter", 14) == 0) scatters++;
    }
    CommPlan cp;
    plan_comm(&m, &t, &c, STRAT_ZERO3, &cp);
    double ag = 0, rs = 0;
    for (int i = 0; i < cp.n; i++) {
        if (cp.c[i].op == COLL_ALL_GATHER) ag += cp.c[i].count;
        if (cp.c[i].op == COLL_REDUCE_SCATTER) rs += cp.c[i].count;
    }
    cr_expect_eq(root, 2, "gathered for forward, released, gathered again for backward");
    cr_expect_eq(gathers, ag, "the simulation issues what plan_comm counts (%d vs %.0f)", gathers, ag);
    cr_expect_eq(gathers, 2 * (4 + 1));
    cr_expect_eq(scatters, rs);
    plan_sim_free(&s);
    plan_model_free(&m);
}

Test(sim_time, a_collective_overlapping_compute_should_slow_it_by_at_most_the_steal_factor) {
    ModelSpec m = zoo("gpt2-medium");
    TrainSpec t;
    plan_train_defaults(&t);
    t.micro_batch = 8;
    ClusterSpec c;
    cluster(&c, 8, 8);
    SimResult a, b;
    plan_sim(&m, &t, &c, STRAT_DDP, 0, &a);
    c.comm_steal = 1;   /* CPU ranks: a second of copies costs a second of compute */
    plan_sim(&m, &t, &c, STRAT_DDP, 0, &b);
    cr_expect_gt(b.compute_s, a.compute_s, "the buckets' all-reduces overlap backward");
    cr_expect_leq(b.compute_s - a.compute_s, 1 * b.comm_s + 1e-12);
    cr_expect_gt(b.step_s, a.step_s);
    plan_model_free(&m);
}

/* An auto case: gpus x mem_gib GiB with the allocator model, micro-batches up to max_mb, t's
   precision regime. */
static void auto_case(const TrainSpec *t, int gpus, double mem_gib, int64_t max_mb, ClusterSpec *c, AutoSpec *a) {
    plan_cluster_defaults(c);
    c->gpus = c->gpus_per_node = gpus;
    c->gpu.mem_bytes = mem_gib * GIB;
    c->alloc_model = 1;
    plan_auto_defaults(a);
    a->max_micro_batch = max_mb;
    a->precisions = plan_auto_precisions(t->precision);
}

/* auto run twice, the second time with *flag (a field of a) set: the two results, freed as one. */
static AutoResult *auto_twice(const ModelSpec *m, const TrainSpec *t, const ClusterSpec *c, AutoSpec *a, int *flag) {
    AutoResult *r = calloc(2, sizeof *r);
    cr_assert(r);
    plan_auto(m, t, c, a, r);
    *flag = 1;
    plan_auto(m, t, c, a, r + 1);
    return r;
}

/* With the allocator model auto spares the max-micro-batch searches a bound says cannot matter
   (plan_auto.c: the best score over the batches whose tensors alone fit); the pick, its setup,
   the runner-up and every line of the explanation must be the exhaustive search's, with fewer
   setups simulated in at least one of these (else the bound spares nothing and is untested). */
Test(auto_mode, should_pick_and_explain_as_the_exhaustive_search_with_bounds) {
    struct { const char *model; int gpus; double mem_gib; int64_t global_batch; } cases[] = {
        {"gpt2", 8, 16, 0}, {"gpt2", 8, 40, 0}, {"gpt2-xl", 8, 24, 0}, {"gpt2-xl", 2, 40, 0}, {"llama2-7b", 8, 40, 64},
        {"resnet50", 8, 4, 0}, {"resnet50", 1, 8, 0},
    };
    int spared = 0;
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        ModelSpec m = zoo(cases[i].model);
        TrainSpec t;
        plan_train_defaults(&t);
        ClusterSpec c;
        AutoSpec a;
        auto_case(&t, cases[i].gpus, cases[i].mem_gib, 32, &c, &a);
        a.global_batch = cases[i].global_batch;
        AutoResult *bounded = auto_twice(&m, &t, &c, &a, &a.exhaustive), *full = bounded + 1;
        const char *what = cases[i].model;
        cr_expect_eq(bounded->found, full->found, "%s", what);
        cr_expect_eq(bounded->strategy, full->strategy, "%s", what);
        cr_expect_eq(bounded->train.micro_batch, full->train.micro_batch, "%s", what);
        cr_expect_eq(bounded->train.grad_accum, full->train.grad_accum, "%s", what);
        cr_expect_eq(bounded->train.act_ckpt, full->train.act_ckpt, "%s", what);
        cr_expect_eq(bounded->train.precision, full->train.precision, "%s", what);
        cr_expect_eq(bounded->train.offload, full->train.offload, "%s", what);
        cr_expect_eq(bounded->runner_found, full->runner_found, "%s", what);
        cr_expect_eq(bounded->runner, full->runner, "%s", what);
        cr_expect_eq(bounded->runner_train.micro_batch, full->runner_train.micro_batch, "%s", what);
        cr_expect_eq(bounded->candidates, full->candidates, "%s", what);
        cr_expect_str_eq(bounded->explain, full->explain, "%s", what);
        cr_expect_leq(bounded->evaluated, full->evaluated, "%s", what);
        spared += bounded->evaluated < full->evaluated;
        free(bounded);
        plan_model_free(&m);
    }
    cr_expect_gt(spared, 0);
}

/* auto's bound leaves a batch unsimulated where plan_sim_tokens_ceiling (the step's compute
   alone: its zeroing, K micro-steps of layer compute, its optimizer), read from a build of the
   compute rule alone (PLAN_STEP_COMPUTE), is below the score to beat, so that ceiling must never
   be below the whole step's, nor that one below the simulated tokens/s: over models with and without
   communication to hide, every strategy, checkpointing, accumulation, offload and one or 8 GPUs;
   and it must be reached where nothing is left to hide (one GPU), else it spares nothing. */
Test(sim_time, the_tokens_ceiling_should_never_be_below_the_simulated_tokens_per_second) {
    const char *models[] = {"gpt2", "resnet50", "llama2-7b"};
    int checked = 0, reached = 0;
    for (size_t mi = 0; mi < sizeof models / sizeof models[0]; mi++) {
        ModelSpec m = zoo(models[mi]);
        for (int gpus = 1; gpus <= 8; gpus += 7)
            for (int k = 0; k < STRAT_COUNT; k++)
                for (int v = 0; v < 4; v++) {
                    TrainSpec t;
                    plan_train_defaults(&t);
                    t.micro_batch = 1 + 3 * v;
                    t.grad_accum = v & 1 ? 3 : 1;
                    t.act_ckpt = v & 2 ? CKPT_FULL : CKPT_NONE;
                    t.ckpt_every = v & 2 ? 1 : 0;
                    t.offload = v == 3 && plan_strategy_offloads((StrategyKind)k, OFFLOAD_OPT) ? OFFLOAD_OPT : OFFLOAD_NONE;
                    ClusterSpec c;
                    cluster(&c, gpus, gpus);
                    Step st;
                    plan_step_build_for(&st, &m, &t, &c, (StrategyKind)k, PLAN_STEP_TIME);
                    Step cs;   /* the compute rule's work alone, as auto's bound reads it */
                    plan_step_build_for(&cs, &m, &t, &c, (StrategyKind)k, PLAN_STEP_TIME | PLAN_STEP_COMPUTE);
                    SimResult s;
                    cr_expect(st.failed || plan_sim_step(&cs, 0, &s) == PLAN_ERR_REFUSED, "a compute-only step is not simulated");
                    int same = 0, n_compute = 0;   /* its work: the whole build's compute rule's, item for item */
                    for (int w = 0; !st.failed && w < st.n_work; w++) {
                        int r = st.work[w].rule;
                        if (r != RULE_LAYER_COMPUTE && r != RULE_ENGINE_PASSES && r != RULE_OPTIMIZER_STEP) continue;
                        same += n_compute < cs.n_work && !memcmp(&st.work[w], &cs.work[n_compute], sizeof st.work[w]);
                        n_compute++;
                    }
                    if (!st.failed)
                        cr_expect(same == n_compute && n_compute == cs.n_work && n_compute > 0,
                                  "%s %d GPUs strategy %d case %d: %d of %d compute items alike, %d built",
                                  models[mi], gpus, k, v, same, n_compute, cs.n_work);
                    if (!st.failed && !plan_sim_step(&st, 0, &s)) {
                        double ceil = plan_sim_tokens_ceiling(&st), ceil_c = plan_sim_tokens_ceiling(&cs);
                        cr_expect_geq(ceil, s.tokens_per_s, "%s %d GPUs strategy %d case %d", models[mi], gpus, k, v);
                        cr_expect_geq(ceil_c, ceil, "%s %d GPUs strategy %d case %d", models[mi], gpus, k, v);
                        checked++;
                        reached += gpus == 1 && ceil_c < s.tokens_per_s * (1 + 1e-9);
                    }
                    plan_step_free(&st);
                    plan_step_free(&cs);
                }
        plan_model_free(&m);
    }
    cr_expect_gt(checked, 100);
    cr_expect_gt(reached, 0);
}

/* The plan's recommendation (plan_auto_recommend) reads auto's pick, its figures and the fix,
   not the explanation, so it asks auto without the per-strategy "why" lines (AutoSpec.no_why),
   each of which plans its strategy again: the result less the explanation is the same, byte for
   byte, where something fits, where nothing does and where only QLoRA would (its fix planned
   only where plan_memory_fits, the full plan's verdict, says it fits). */
Test(auto_mode, should_answer_without_its_why_lines_as_with_them) {
    struct { const char *model; int gpus; double mem_gib; int64_t seq; int keep_batch, found; const char *fix; } cases[] = {
        {"gpt2", 8, 40, 0, 1, 1, ""}, {"gpt2-xl", 8, 24, 0, 0, 1, ""}, {"gpt2-xl", 1, 2, 0, 1, 0, "GPU"},
        {"llama2-7b", 1, 10, 256, 1, 0, "QLoRA"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        ModelSpec m = zoo(cases[i].model);
        TrainSpec t;
        plan_train_defaults(&t);
        t.seq = cases[i].seq;
        ClusterSpec c;
        AutoSpec a;
        auto_case(&t, cases[i].gpus, cases[i].mem_gib, 16, &c, &a);
        a.keep_batch = cases[i].keep_batch;
        if (!cases[i].found) a.offloads = 1u << OFFLOAD_NONE;   /* as the plan's recommendation asks */
        AutoResult *with = auto_twice(&m, &t, &c, &a, &a.no_why), *without = with + 1;
        const char *what = cases[i].model;
        cr_expect_eq(with->found, cases[i].found, "%s", what);
        cr_expect(strstr(with->fix, cases[i].fix) != NULL, "%s: fix '%s'", what, with->fix);
        if (!with->found) {
            cr_expect(strstr(with->explain, "why each strategy fails:\n  ") != NULL, "%s: the why lines", what);
            cr_expect(strstr(without->explain, "why each strategy fails:\n  ") == NULL, "%s: no why lines", what);
        }
        memset(with->explain, 0, sizeof with->explain);
        memset(without->explain, 0, sizeof without->explain);
        cr_expect_eq(memcmp(with, without, sizeof *with), 0, "%s: found %d / %d, fix '%s' / '%s'", what, with->found,
                     without->found, with->fix, without->fix);
        free(with);
        plan_model_free(&m);
    }
}

/* DeepSpeed ZeRO-1/2's reduce buckets on their streams (stage_1_and_2.py average_tensor),
   hand-worked on three layers whose backward takes u, u and 3u, with a bucket of D = 1.5u
   closed after each of the first two (backward order: layers 2, 1, 0):
   - on the reduction stream, nothing waits but the end of backward: bucket 1 [u, 2.5u], bucket 2
     [2.5u, 4u], layer 0's backward [2u, 5u]: 5u;
   - chained (overlap_comm: reducing bucket 2 first makes the compute stream wait for bucket 1):
     layer 0 starts at 2.5u and ends at 5.5u;
   - on the compute stream (no overlap_comm): u + D + u + D + 3u = 8u. */
static double buckets_bwd(StepSched sched, int chain) {
    ModelSpec m;
    plan_model_init(&m, "t", ARCH_GENERIC);
    for (int i = 0; i < 3; i++) cr_assert_not_null(plan_model_add(&m, LAYER_LINEAR, "l", 1000000));
    TrainSpec t;
    plan_train_defaults(&t);
    ClusterSpec c;
    cluster(&c, 2, 2);
    c.gpu.sms = 0;   /* the schedule alone: no SMs taken by the collectives (plan_coll_steal 0; the work below is hand-set) */
    Step st;
    cr_assert_eq(plan_step_build(&st, &m, &t, &c, STRAT_ZERO2), PLAN_OK, "%s", st.fail_why);
    cr_assert_geq(st.cap_work, 3);
    cr_assert_geq(st.cap_xfer, 2);
    double payload = 4e6, D = plan_coll_seconds(&st.view.full, COLL_ALL_REDUCE, payload, 2, 0), u = D / 1.5;
    static const double BWD[3] = {3, 1, 1};   /* layer 0, 1, 2, in u */
    st.n_work = 0;
    for (int i = 0; i < 3; i++) {
        StepWork *w = &st.work[st.n_work++];
        memset(w, 0, sizeof *w);
        w->point = plan_step_point(st.view.m.n_layers, PT_BWD, i);
        w->scale = WORK_BATCH;
        w->seconds = BWD[i] * u;
    }
    st.n_xfer = 0;
    for (int i = 2; i >= 1; i--) {
        StepXfer *x = &st.xfer[st.n_xfer++];
        memset(x, 0, sizeof *x);
        x->kind = XFER_COLL;
        x->op = COLL_ALL_REDUCE;
        x->purpose = PURPOSE_GRAD_BUCKETS;
        x->phase = PHASE_BACKWARD;
        x->sched = (uint8_t)sched;
        x->chain = (uint8_t)chain;
        x->point = plan_step_point(st.view.m.n_layers, PT_BWD, i);
        x->count = 1;
        x->payload = payload;
        x->group = 2;
    }
    SimResult s;
    cr_assert_eq(plan_sim_step(&st, 0, &s), 0);
    double bwd = s.bwd_s / u;
    plan_sim_free(&s);
    plan_step_free(&st);
    plan_model_free(&m);
    return bwd;
}

Test(sim, deepspeeds_reduce_buckets_should_run_on_the_stream_their_overlap_comm_names) {
    cr_expect_float_eq(buckets_bwd(SCHED_ASYNC_AFTER, 0), 5.0, 1e-9, "own stream: %.3f u", buckets_bwd(SCHED_ASYNC_AFTER, 0));
    cr_expect_float_eq(buckets_bwd(SCHED_ASYNC_AFTER, 1), 5.5, 1e-9, "chained: %.3f u", buckets_bwd(SCHED_ASYNC_AFTER, 1));
    cr_expect_float_eq(buckets_bwd(SCHED_SYNC_AFTER, 0), 8.0, 1e-9, "compute stream: %.3f u", buckets_bwd(SCHED_SYNC_AFTER, 0));
}

/* The rules name them so: ZeRO-2 without overlap_comm (DeepSpeed's default) reduces on the
   compute stream as buckets fill, with it on the reduction stream, chained; ZeRO-1 at the end
   of backward, on the stream overlap_comm names. */
Test(sim, deepspeeds_overlap_comm_should_set_where_and_how_zero12_buckets_are_reduced) {
    ModelSpec m = zoo("gpt2-medium");
    TrainSpec t;
    plan_train_defaults(&t);
    t.ds.reduce_bucket = 5e7;
    ClusterSpec c;
    cluster(&c, 8, 8);
    static const struct { StrategyKind k; int overlap; StepSched sched; int chain, spread; } CASES[] = {
        {STRAT_ZERO2, 2, SCHED_SYNC_AFTER, 0, 1}, {STRAT_ZERO2, 1, SCHED_ASYNC_AFTER, 1, 1},
        {STRAT_ZERO1, 2, SCHED_SYNC_AFTER, 0, 0}, {STRAT_ZERO1, 1, SCHED_ASYNC_AFTER, 1, 0},
    };
    for (size_t k = 0; k < sizeof CASES / sizeof CASES[0]; k++) {
        t.ds.overlap_comm = CASES[k].overlap;
        Step st;
        cr_assert_eq(plan_step_build(&st, &m, &t, &c, CASES[k].k), PLAN_OK);
        int n = 0, points = 0, last = -1;
        for (int e = 0; e < st.n_xfer; e++) {
            const StepXfer *x = &st.xfer[e];
            if (x->purpose != PURPOSE_GRAD_BUCKETS) continue;
            n++;
            cr_expect_eq(x->sched, CASES[k].sched, "case %zu", k);
            cr_expect_eq(x->chain, CASES[k].chain, "case %zu", k);
            if (x->point != last) points++, last = x->point;
        }
        cr_expect_eq(n, 8, "case %zu: ceil(354.8e6 / 5e7) buckets", k);
        if (CASES[k].spread) cr_expect_gt(points, 4, "case %zu: reduced as they fill", k);
        else cr_expect_eq(points, 1, "case %zu: all at the end of backward", k);
        plan_step_free(&st);
    }
    plan_model_free(&m);
}

/* A hand-written account of two layers, each all-reducing its gradients after its backward
   (DDP's buckets): layer 1's all-reduce runs beside layer 0's backward, layer 0's after it. */
static SimResult two_buckets(const ClusterSpec *c, double f, double b, double payload, int crosses) {
    Step st;
    memset(&st, 0, sizeof st);
    LayerSpec layers[2];
    memset(layers, 0, sizeof layers);
    for (int i = 0; i < 2; i++) {
        snprintf(layers[i].name, sizeof layers[i].name, "block.%d", i);
        layers[i].params = 1000000;
    }
    st.view.m.layers = layers;
    st.view.m.n_layers = st.n_layers = 2;
    st.view.full = st.view.dp = *c;
    plan_train_defaults(&st.view.t);
    st.view.tp = st.view.pp = 1;
    st.n_points = plan_step_point(2, PT_END, 0) + 1;
    StepWork work[4];
    StepXfer xfer[2];
    memset(work, 0, sizeof work);
    memset(xfer, 0, sizeof xfer);
    for (int i = 0; i < 2; i++) {
        work[2 * i] = (StepWork){.point = plan_step_point(2, PT_FWD, i), .scale = WORK_BATCH, .seconds = f};
        work[2 * i + 1] = (StepWork){.point = plan_step_point(2, PT_BWD, i), .scale = WORK_BATCH, .seconds = b};
        xfer[i] = (StepXfer){.kind = XFER_COLL, .op = COLL_ALL_REDUCE, .sched = SCHED_ASYNC_AFTER,
                             .point = plan_step_point(2, PT_BWD, 1 - i), .count = 1, .payload = payload,
                             .group = c->gpus, .crosses = crosses};
    }
    st.work = work;
    st.n_work = 4;
    st.xfer = xfer;
    st.n_xfer = 2;
    SimResult s;
    cr_assert_eq(plan_sim_step(&st, 0, &s), 0);
    return s;
}

/* A collective's NCCL kernel holds one SM per channel (CTA) while it runs, so the compute beside
   it runs on the SMs left: slower by ctas / (sms - ctas) of the overlap (docs/formulas.md
   "Communication beside compute"). A100 (108 SMs): 24 CTAs in a node, 16 across 8-NIC nodes. Worked by
   hand: forward 2f, layer 1's backward b, its all-reduce a (shorter than b) beside layer 0's
   backward, stretched by s a; then layer 0's all-reduce, exposed. */
Test(sim_time, compute_beside_a_collective_should_run_on_the_sms_its_channels_leave) {
    ClusterSpec c;
    cluster(&c, 8, 8);
    cr_assert_eq(c.gpu.sms, 108);
    cr_expect(fabs(plan_coll_steal(&c, 0) - 24.0 / 84.0) < 1e-15);
    cr_expect(fabs(plan_coll_steal(&c, 1) - 16.0 / 92.0) < 1e-15);
    double a = plan_coll_seconds(&c, COLL_ALL_REDUCE, 2e8, 8, 0), f = a, b = 2 * a;
    double s = 24.0 / 84.0, want = 2 * f + b + (b + s * a) + a;
    SimResult r = two_buckets(&c, f, b, 2e8, 0);
    cr_expect(REL(r.step_s, want) < 1e-12, "%.9f against %.9f by hand", r.step_s, want);
    cr_expect(REL(r.compute_s, 2 * f + 2 * b + s * a) < 1e-12, "the compute is stretched, not the collective");
    cr_expect(REL(r.exposed_comm_s, a) < 1e-12);
    /* a collective longer than the compute beside it stretches it by s x the compute's own span
       (the overlap is counted in the span the compute would have run) */
    double b2 = a / 2, want2 = 2 * f + b2 + fmax(b2 * (1 + s), a) + a;
    r = two_buckets(&c, f, b2, 2e8, 0);
    cr_expect(REL(r.step_s, want2) < 1e-12, "%.9f against %.9f by hand", r.step_s, want2);
    /* measured CPU ranks keep their own steal; the flat model (--mfu) none */
    c.comm_steal = 1;
    cr_expect_eq(plan_coll_steal(&c, 0), 1);
    c.comm_steal = 0;
    c.mfu = 0.4;
    cr_expect_eq(plan_coll_steal(&c, 0), 0);
}

/* NCCL's channels across nodes follow the NICs (src/graph/search.cc ncclTopoCompute,
   ncclTopoDupChannels; connect.cc ncclTopoPostset), worked by hand: an 8-NIC DGX A100 (200 Gb/s
   = 25 GB/s each, PCIe Gen4 24) searches 8 channels at 24 GB/s, under 25 so not duplicated, 16
   per communicator; DGX H100 (400 Gb/s, Gen5 48) 8 at 48, Hopper with more than 4 under 50 not
   duplicated, 16; a 400 Gb/s A100 node (fms-fsdp's, two of the preset's NICs) 2 at 24 -> 4; an
   800 Gb/s H100 node 2 at 48, duplicated to 4 at 24, 8; the same A100 node as 4 x 100 Gb/s NICs
   (InternLM's, --nics 4) 4 at 12 -> 8; 32 NICs: the caps of NCCL at 5067397 (MAXCHANNELS 64). */
Test(sim_time, nccl_channels_across_nodes_should_follow_the_nodes_nics) {
    static const struct { const char *gpu; double inter_bw; int nics, want_nics, want; } CASES[] = {
        {"a100-80gb", 0, 0, 8, 16}, {"h100-80gb", 0, 0, 8, 16}, {"b200", 0, 0, 8, 16},
        {"a100-80gb", 6.25, 0, 2, 4}, {"h100-80gb", 12.5, 0, 2, 8}, {"a100-80gb", 6.25, 4, 4, 8},
        {"h800", 25, 0, 4, 16}, {"h800", 25, 8, 8, 16},
        /* 32 NICs of an H100 node's 400 Gb/s (12.5 GB/s each: speed 12): the search's cap
           MAXCHANNELS / 2 = 32 (device.h at 5067397: 64), not duplicated (< 25), 64 per
           communicator, Postset's cap MAXCHANNELS */
        {"h100-80gb", 0, 32, 32, 64},
    };
    for (size_t k = 0; k < sizeof CASES / sizeof CASES[0]; k++) {
        ClusterSpec c;
        plan_cluster_defaults(&c);
        c.gpu = *plan_gpu_by_name(CASES[k].gpu);
        c.gpus = 32;
        c.gpus_per_node = 8;
        if (CASES[k].inter_bw > 0) c.gpu.inter_bw = CASES[k].inter_bw;
        c.nics = CASES[k].nics;
        cr_expect_eq(plan_cluster_nics(&c), CASES[k].want_nics, "case %zu", k);
        cr_expect_eq(plan_nccl_net_channels(&c), CASES[k].want, "case %zu", k);
        cr_expect(fabs(plan_coll_steal(&c, 1) - (double)CASES[k].want / (c.gpu.sms - CASES[k].want)) < 1e-15, "case %zu", k);
        cr_expect(fabs(plan_coll_steal(&c, 0) - 24.0 / (c.gpu.sms - 24)) < 1e-15, "case %zu: inside a node 24", k);
    }
    /* in the step: two buckets over 16 A100s on two nodes of 400 Gb/s (fms-fsdp's), layer 1's
       all-reduce a beside layer 0's backward b = 2a, which it stretches by 4 / 104 a, not 16 / 92 a */
    ClusterSpec c;
    cluster(&c, 16, 8);
    c.gpu.inter_bw = 6.25;
    double a = plan_coll_seconds(&c, COLL_ALL_REDUCE, 2e8, 16, 1), f = a, b = 2 * a;
    SimResult r = two_buckets(&c, f, b, 2e8, 1);
    cr_expect(REL(r.compute_s, 2 * f + 2 * b + 4.0 / 104.0 * a) < 1e-12, "%.9f", r.compute_s);
    cr_expect(REL(r.step_s, 2 * f + b + (b + 4.0 / 104.0 * a) + a) < 1e-12, "%.9f", r.step_s);
}

/* The collective table's time is the sum of the collectives the simulation runs, also where one
   row holds calls of very different sizes (NCCL's time is not affine in the size): ZeRO-1/2 with
   reduce_bucket_size 1 all-reduce each tensor larger than the bucket one partition slice at a
   time, slices from a few elements to a partition, on one node and across two. */
Test(sim, the_collective_tables_time_should_be_the_simulated_steps_communication_at_any_bucket_size) {
    ModelSpec m = zoo("gpt2-medium");
    TrainSpec t;
    plan_train_defaults(&t);
    static const double BUCKETS[] = {1, 1e6, 5e7};
    static const int64_t GPUS[] = {8, 16};
    for (size_t g = 0; g < 2; g++)
        for (size_t b = 0; b < 3; b++)
            for (int k = STRAT_ZERO1; k <= STRAT_ZERO2; k++) {
                ClusterSpec c;
                cluster(&c, GPUS[g], 8);
                t.ds.reduce_bucket = BUCKETS[b];
                t.grad_accum = 2;
                Step st;
                cr_assert_eq(plan_step_build(&st, &m, &t, &c, (StrategyKind)k), PLAN_OK);
                CommPlan cp;
                plan_comm_step(&st, &cp);
                SimResult s;
                cr_assert_eq(plan_sim_step(&st, 0, &s), 0);
                cr_expect(fabs(cp.seconds - s.comm_s) <= 1e-9 * cp.seconds, "%lld GPUs, bucket %g, %s: table %.6f ms, simulated %.6f ms",
                          (long long)GPUS[g], BUCKETS[b], k == STRAT_ZERO1 ? "zero1" : "zero2", cp.seconds * 1e3, s.comm_s * 1e3);
                plan_step_free(&st);
            }
    plan_model_free(&m);
}
