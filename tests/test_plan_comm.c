/* test_plan_comm.c — collective volumes equal their closed forms per strategy. */
#include <criterion/criterion.h>
#include <math.h>

#include "plan_comm.h"
#include "plan_memory.h"
#include "plan_zoo.h"

static double wire(const CommPlan *p) { return p->wire_bytes; }

static void setup(ModelSpec *m, const char *name, TrainSpec *t, ClusterSpec *c, int64_t n) {
    char msg[256];
    cr_assert_eq(plan_zoo_build(m, name, msg, sizeof(msg)), 0, "%s", msg);
    plan_train_defaults(t);
    t->precision = PREC_MIXED_BF16;       /* equal param and grad dtype (2 bytes) */
    plan_cluster_defaults(c);
    c->gpus = n;
    c->gpus_per_node = n < 8 ? n : 8;
}

Test(comm, ddp_should_all_reduce_every_gradient_once_per_step) {
    ModelSpec m; TrainSpec t; ClusterSpec c;
    setup(&m, "gpt2", &t, &c, 8);
    CommPlan p;
    plan_comm(&m, &t, &c, STRAT_DDP, &p);
    double psi = (double)plan_model_params(&m);
    cr_assert_eq(p.n, 1);
    cr_expect_eq(p.c[0].payload_bytes, 2 * psi);
    cr_expect(fabs(wire(&p) - 2.0 * 7 / 8 * 2 * psi) < 1, "2(n-1)/n x payload");
    cr_expect_eq(p.c[0].count, plan_ddp_buckets_tensors(&m, 2, PLAN_DDP_FIRST_BUCKET, PLAN_DDP_BUCKET));
    t.grad_accum = 4;                    /* no_sync: still once per optimizer step */
    CommPlan q;
    plan_comm(&m, &t, &c, STRAT_DDP, &q);
    cr_expect_eq(wire(&q), wire(&p));
    plan_model_free(&m);
}

/* torch's reducer packs whole tensors in gradient-ready order and closes a bucket once it
   reaches its cap (reducer.cpp compute_bucket_assignment_by_size; 1 MiB first, 25 MiB after).
   Counted by the harness (all-reduces in backward, 2 gloo ranks, fp32): gpt2 13, bert-base 14,
   resnet50 5, gpt2-mini 2 (1,056,768 + 2,706,432 B); gpt2-xl from the same function in Python
   (dist._compute_bucket_assignment_by_size over the reversed parameters): 145. Dividing Ψ by
   the cap gave 20, 18, 5, 2 and 239. */
Test(comm, ddp_buckets_should_pack_whole_tensors_in_reverse_parameter_order) {
    static const struct { const char *model; double buckets, by_psi; } CASES[] = {
        {"gpt2", 13, 20}, {"bert-base", 14, 18}, {"resnet50", 5, 5}, {"gpt2-mini", 2, 2},
        {"gpt2-tiny", 1, 1}, {"gpt2-xl", 145, 239}};
    for (size_t k = 0; k < sizeof CASES / sizeof CASES[0]; k++) {
        ModelSpec m; TrainSpec t; ClusterSpec c;
        setup(&m, CASES[k].model, &t, &c, 2);
        double psi = (double)plan_model_params(&m);
        cr_expect_eq(plan_ddp_buckets_tensors(&m, 4, PLAN_DDP_FIRST_BUCKET, PLAN_DDP_BUCKET), CASES[k].buckets,
                     "%s: %g buckets", CASES[k].model,
                     plan_ddp_buckets_tensors(&m, 4, PLAN_DDP_FIRST_BUCKET, PLAN_DDP_BUCKET));
        cr_expect_eq(plan_ddp_buckets(psi, 4, 0), CASES[k].by_psi, "%s", CASES[k].model);
        t.precision = PREC_FP32;
        CommPlan p;
        plan_comm(&m, &t, &c, STRAT_DDP, &p);
        cr_expect_eq(p.c[0].count, CASES[k].buckets, "%s: the collective table", CASES[k].model);
        cr_expect_eq(p.c[0].payload_bytes, 4 * psi);
        t.impl = IMPL_ENGINE;             /* memplan's engine: flat fp32 runs split at the caps */
        plan_comm(&m, &t, &c, STRAT_DDP, &p);
        cr_expect_eq(p.c[0].count, CASES[k].by_psi, "%s: the engine", CASES[k].model);
        plan_model_free(&m);
    }
    /* a tensor never splits: a 1 KiB gradient (ready first) and a 3 MiB one make one 1 MiB-cap
       bucket of 3 MiB + 1 KiB; with 1 KiB caps each closes its own bucket */
    ModelSpec m;
    plan_model_init(&m, "t", ARCH_GENERIC);
    LayerSpec *l = plan_model_add(&m, LAYER_LINEAR, "a", 3 * 262144 + 256);
    cr_assert_not_null(l);
    plan_layer_add_tensor(l, 3 * 262144);
    plan_layer_add_tensor(l, 256);
    cr_expect_eq(plan_ddp_buckets_tensors(&m, 4, PLAN_DDP_FIRST_BUCKET, PLAN_DDP_BUCKET), 1);
    cr_expect_eq(plan_ddp_buckets_tensors(&m, 4, 1024, 1024), 2);
    l->n_tensors = 0;                     /* unknown tensors: no answer */
    cr_expect_eq(plan_ddp_buckets_tensors(&m, 4, PLAN_DDP_FIRST_BUCKET, PLAN_DDP_BUCKET), -1);
    plan_model_free(&m);
}

Test(comm, zero1_and_zero2_should_move_what_ddp_moves) {
    ModelSpec m; TrainSpec t; ClusterSpec c;
    setup(&m, "gpt2-medium", &t, &c, 8);
    CommPlan d, z1, z2;
    t.impl = IMPL_ENGINE;                /* the ZeRO paper's schedule: reduce-scatter + all-gather */
    plan_comm(&m, &t, &c, STRAT_DDP, &d);
    plan_comm(&m, &t, &c, STRAT_ZERO1, &z1);
    plan_comm(&m, &t, &c, STRAT_ZERO2, &z2);
    cr_expect(fabs(wire(&z1) - wire(&d)) < 1);
    cr_expect(fabs(wire(&z2) - wire(&d)) < 1);
    plan_model_free(&m);
}

/* DeepSpeed as it runs (--impl pytorch): the bucket is all-reduced (use_multi_rank_bucket_allreduce),
   then the updated partitions all-gathered: 1.5 x DDP, plus the 4-byte norm all-reduce */
Test(comm, deepspeed_zero1_and_zero2_should_all_reduce_the_bucket_and_all_gather_the_partitions) {
    ModelSpec m; TrainSpec t; ClusterSpec c;
    setup(&m, "gpt2-medium", &t, &c, 8);
    t.impl = IMPL_PYTORCH;
    CommPlan d, z1;
    plan_comm(&m, &t, &c, STRAT_DDP, &d);
    plan_comm(&m, &t, &c, STRAT_ZERO1, &z1);
    double psi = (double)plan_model_params(&m);
    int ar = 0, ag = 0, norm = 0;
    double step_ar = 0;
    for (int i = 0; i < z1.n; i++) {
        const PlanColl *x = &z1.c[i];
        if (x->op == COLL_ALL_REDUCE && x->phase == PHASE_BACKWARD) { ar++; cr_expect_eq(x->payload_bytes, psi * 2); }
        if (x->op == COLL_ALL_GATHER && x->phase == PHASE_STEP) { ag++; cr_expect_geq(x->payload_bytes, psi * 2); }
        if (x->op == COLL_ALL_REDUCE && x->phase == PHASE_STEP) { norm++; step_ar += x->payload_bytes; }
        cr_expect_neq(x->op, COLL_REDUCE_SCATTER);
    }
    cr_expect(ar == 1 && ag == 1 && norm == 2, "all-reduce %d, all-gather %d, step all-reduces %d", ar, ag, norm);
    cr_expect_eq(step_ar, 4 + 1, "fp32 norm + bf16 overflow flag: %g", step_ar);
    cr_expect(fabs(wire(&z1) / wire(&d) - 1.5) < 1e-6, "DeepSpeed ZeRO-1 / DDP = %f", wire(&z1) / wire(&d));
    plan_model_free(&m);
}

Test(comm, full_shard_should_move_about_one_and_a_half_times_ddp) {
    ModelSpec m; TrainSpec t; ClusterSpec c;
    setup(&m, "gpt2-xl", &t, &c, 8);
    CommPlan d, f, z3, g;
    t.fsdp_impl = 1;   /* FSDP1 MixedPrecision reduces in bf16; FSDP2's policy in fp32 (below) */
    plan_comm(&m, &t, &c, STRAT_DDP, &d);
    plan_comm(&m, &t, &c, STRAT_FSDP_FULL, &f);
    t.impl = IMPL_ENGINE;                /* ZeRO-3 as the paper (and memplan's engine) has it */
    plan_comm(&m, &t, &c, STRAT_ZERO3, &z3);
    t.impl = IMPL_PYTORCH;
    plan_comm(&m, &t, &c, STRAT_FSDP_GRAD_OP, &g);
    double r = wire(&f) / wire(&d);
    cr_expect(r > 1.4 && r <= 1.5, "FULL_SHARD / DDP = %f", r);
    cr_expect(fabs(wire(&z3) / wire(&d) - 1.5) < 1e-9, "ZeRO-3 is 3 psi: %f", wire(&z3) / wire(&d));
    cr_expect(fabs(wire(&g) - wire(&d)) < 1, "SHARD_GRAD_OP = DDP volume");
    /* closed form (REFERENCE): (N-1)/N [(2 psi - U_root) b_p + psi b_r] */
    MemSizes z;
    plan_memory_sizes(&m, &t, &c, STRAT_FSDP_FULL, &z);
    double expect = 7.0 / 8 * ((2 * z.psi - z.root_unit) * 2 + z.psi * 2);
    cr_expect(fabs(wire(&f) - expect) < 1, "%f vs %f", wire(&f), expect);
    /* FSDP2 MixedPrecisionPolicy(param_dtype=bf16, reduce_dtype=fp32): b_r = 4; the units as
       gathered, each tensor's dim 0 padded to a multiple of 8 */
    t.fsdp_impl = 2;
    plan_comm(&m, &t, &c, STRAT_FSDP_FULL, &f);
    plan_memory_sizes(&m, &t, &c, STRAT_FSDP_FULL, &z);
    double pad = 8 * z.psi_shard, pad_root = 8 * z.root_shard;
    cr_expect_lt(pad / z.psi - 1, 1e-4, "padding %f", pad - z.psi);
    expect = 7.0 / 8 * ((2 * pad - pad_root) * 2 + pad * 4);
    cr_expect(fabs(wire(&f) - expect) < 1, "%f vs %f", wire(&f), expect);
    plan_model_free(&m);
}

Test(comm, syncbn_should_gather_2c_plus_1_and_reduce_2c_floats_per_bn_layer) {
    ModelSpec m; TrainSpec t; ClusterSpec c;
    setup(&m, "resnet50", &t, &c, 4);
    t.syncbn = 1;
    CommPlan p;
    plan_comm(&m, &t, &c, STRAT_DDP, &p);
    int found = 0;
    for (int i = 0; i < p.n; i++) {
        if (p.c[i].what[0] != 'S') continue;
        found++;
        cr_expect_eq(p.c[i].count, 53);
        if (p.c[i].op == COLL_ALL_GATHER) cr_expect_eq(p.c[i].payload_bytes, 212692.0 * 4);
        else cr_expect_eq(p.c[i].payload_bytes, 212480.0);
    }
    cr_expect_eq(found, 2);
    plan_model_free(&m);
}

Test(comm, one_gpu_should_need_no_collectives) {
    ModelSpec m; TrainSpec t; ClusterSpec c;
    setup(&m, "gpt2", &t, &c, 1);
    for (int k = 0; k < STRAT_COUNT; k++) {
        CommPlan p;
        plan_comm(&m, &t, &c, (StrategyKind)k, &p);
        cr_expect_eq(p.n, 0);
    }
    plan_model_free(&m);
}

Test(plan_comm, a_measured_bandwidth_and_latency_per_collective_should_replace_the_link) {
    ClusterSpec c;
    plan_cluster_defaults(&c);
    c.gpus = c.gpus_per_node = 4;
    c.coll_base_lat = 1e-3;
    c.coll_bw[COLL_REDUCE_SCATTER] = 2;      /* GB/s bus */
    c.coll_lat[COLL_REDUCE_SCATTER] = 5e-6;  /* s per ring step */
    double pay = 8e6;
    cr_expect(fabs(plan_coll_seconds(&c, COLL_REDUCE_SCATTER, pay, 4, 0) - (1e-3 + 3 * 5e-6 + pay * 0.75 / 2e9)) < 1e-15);
    /* the others keep the preset's link: a measured reduce-scatter moves no other collective */
    ClusterSpec plain = c;
    plain.coll_bw[COLL_REDUCE_SCATTER] = 0;
    plain.coll_lat[COLL_REDUCE_SCATTER] = 0;
    double link = plan_coll_seconds(&plain, COLL_ALL_REDUCE, pay, 4, 0);
    cr_expect(link > 0);
    cr_expect(fabs(plan_coll_seconds(&c, COLL_ALL_REDUCE, pay, 4, 0) - link) < 1e-15);
    cr_expect(fabs(plan_coll_seconds(&plain, COLL_REDUCE_SCATTER, pay, 4, 0) -
                   plan_coll_seconds(&c, COLL_REDUCE_SCATTER, pay, 4, 0)) > 1e-6);
}

/* InternLM's hybrid ZeRO (HybridZeroOptimizer at 85706ef): gradients all-reduced over every rank,
   the updated shards broadcast from their owners one rank at a time (broadcast_params), within
   the ZeRO group (--zero-group). Hand-worked: ZeRO-1 on 64 GPUs (8 nodes) moves the same bytes
   after the step as one all-gather, as 64 broadcasts of a 64th each, each one a whole broadcast
   over the group; with a group of 8 (a node) 8 broadcasts of an 8th, within the node, and the
   optimizer's shard 8 times the 64-rank one. */
Test(comm, internlm_hybrid_zero_should_broadcast_each_shard_from_its_owner_within_the_group) {
    ModelSpec m; TrainSpec t; ClusterSpec c;
    setup(&m, "gpt2-medium", &t, &c, 64);
    t.impl = IMPL_PYTORCH;
    CommPlan ag, bc, grp;
    plan_comm(&m, &t, &c, STRAT_ZERO1, &ag);
    t.ds.param_sync = PARAM_SYNC_BROADCAST;
    plan_comm(&m, &t, &c, STRAT_ZERO1, &bc);
    const PlanColl *a = NULL, *b = NULL, *g = NULL, *ar = NULL, *gar = NULL;
    for (int i = 0; i < ag.n; i++) if (ag.c[i].phase == PHASE_STEP && ag.c[i].op == COLL_ALL_GATHER) a = &ag.c[i];
    for (int i = 0; i < bc.n; i++) {
        if (bc.c[i].phase == PHASE_STEP && bc.c[i].op == COLL_BROADCAST) b = &bc.c[i];
        if (bc.c[i].phase == PHASE_BACKWARD && bc.c[i].op == COLL_ALL_REDUCE) ar = &bc.c[i];
    }
    cr_assert(a && b && ar);
    cr_expect_eq(b->count, 64);
    cr_expect_eq(b->group, 64);
    cr_expect(fabs(b->payload_bytes / a->payload_bytes - 1) < 1e-12, "%g vs %g", b->payload_bytes, a->payload_bytes);
    double one = plan_coll_seconds(&c, COLL_BROADCAST, b->payload_bytes / 64, 64, 1);
    cr_expect(fabs(b->seconds / (64 * one) - 1) < 1e-9, "%g s vs 64 x %g s", b->seconds, one);
    cr_expect_gt(b->seconds, 2 * a->seconds, "64 latencies: %g s vs the all-gather's %g s", b->seconds, a->seconds);
    t.ds.zero_group = 8;
    plan_comm(&m, &t, &c, STRAT_ZERO1, &grp);
    for (int i = 0; i < grp.n; i++) {
        if (grp.c[i].phase == PHASE_STEP && grp.c[i].op == COLL_BROADCAST) g = &grp.c[i];
        if (grp.c[i].phase == PHASE_BACKWARD && grp.c[i].op == COLL_ALL_REDUCE) gar = &grp.c[i];
    }
    cr_assert(g && gar);
    cr_expect_eq(g->count, 8);
    cr_expect_eq(g->group, 8);
    cr_expect(fabs(g->seconds / (8 * plan_coll_seconds(&c, COLL_BROADCAST, g->payload_bytes / 8, 8, 0)) - 1) < 1e-9);
    cr_expect_eq(gar->group, 64, "gradients still all-reduced over every rank");
    cr_expect_eq(gar->payload_bytes, ar->payload_bytes);
    MemResult r64, r8;
    t.ds.zero_group = 0;
    plan_memory(&m, &t, &c, STRAT_ZERO1, &r64);
    t.ds.zero_group = 8;
    plan_memory(&m, &t, &c, STRAT_ZERO1, &r8);
    cr_expect_gt(r8.ms_optimizer, 7 * r64.ms_optimizer, "optimizer shard over 8 ranks: %g vs %g over 64", r8.ms_optimizer, r64.ms_optimizer);
    cr_expect_lt(r8.ms_optimizer, 9 * r64.ms_optimizer);
    plan_model_free(&m);
}

/* HYBRID_SHARD's replica all-reduce runs over one rank per node while the node's other ranks run
   theirs: each ring has its GPU's NIC share only, not the node's NICs a ring of consecutive ranks
   gets (NCCL runs a channel per NIC). Hand-worked for 16 nodes of 8 at 6.25 GB/s per GPU: the
   all-reduce's bandwidth term is 2 x 15/16 x the payload over 6.25 GB/s x NCCL's link efficiency,
   8 times the packed group's. */
Test(comm, hybrid_shard_replicas_should_all_reduce_at_the_gpus_nic_share) {
    ModelSpec m; TrainSpec t; ClusterSpec c;
    setup(&m, "llama2-7b", &t, &c, 128);
    c.gpu.inter_bw = 6.25;
    CommPlan p;
    plan_comm(&m, &t, &c, STRAT_FSDP_HYBRID, &p);
    const PlanColl *ar = NULL;
    for (int i = 0; i < p.n; i++) if (p.c[i].purpose == PURPOSE_REPLICA_GRADS) ar = &p.c[i];
    cr_assert(ar);
    cr_expect_eq(ar->group, 16);
    double each = ar->payload_bytes / ar->count;
    double strided = plan_coll_seconds(&c, COLL_ALL_REDUCE, each, 16, PLAN_CROSSES_STRIDED);
    double packed = plan_coll_seconds(&c, COLL_ALL_REDUCE, each, 16, 1);
    cr_expect(fabs(ar->seconds / (ar->count * strided) - 1) < 1e-9, "%g vs %g x %g", ar->seconds, ar->count, strided);
    double beta = 2.0 * 15 / 16 * each / (6.25e9 * 235.0 / 300.0);   /* NCCL_LINK_EFF */
    cr_expect(strided >= beta && strided < beta * 1.1, "%g s, bandwidth term %g s", strided, beta);
    cr_expect_gt(strided, 6 * packed, "%g vs packed %g", strided, packed);
    plan_model_free(&m);
}
