/* test_plan_sim.c — the simulated step and auto mode. */
#include <criterion/criterion.h>
#include <math.h>
#include <string.h>

#include "plan_auto.h"
#include "plan_sim.h"
#include "plan_zoo.h"
#include "test_plan.h"

Test(sim, memory_curve_maximum_should_equal_the_memory_model_peak) {
    const char *models[] = {"gpt2", "bert-base", "resnet50", "llama2-7b"};
    for (int mi = 0; mi < 4; mi++) {
        ModelSpec m = zoo(models[mi]);
        TrainSpec t;
        plan_train_defaults(&t);
        t.micro_batch = 2;
        t.grad_accum = 2;
        ClusterSpec c;
        cluster(&c, 16, 8);
        for (int k = 0; k < STRAT_COUNT; k++) {
            SimResult s;
            MemResult r;
            cr_assert_eq(plan_sim(&m, &t, &c, (StrategyKind)k, 1, &s), 0);
            plan_memory(&m, &t, &c, (StrategyKind)k, &r);
            cr_expect(fabs(s.mem_peak - r.peak) <= 1e-9 * r.peak, "%s %s: %f vs %f", models[mi],
                      plan_strategy((StrategyKind)k)->name, s.mem_peak, r.peak);
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
