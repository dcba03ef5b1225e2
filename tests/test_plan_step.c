/* test_plan_step.c — the step account (planner/plan_step.h): the invariants every rule must keep
 * (allocations balanced, the peak's terms made of the rules' bytes, the simulated step issuing
 * exactly the table's collectives) over a matrix of models, strategies and setups, and rules read
 * on their own. */
#include <criterion/criterion.h>
#include <math.h>
#include <string.h>

#include "plan_activ.h"
#include "plan_comm.h"
#include "plan_memory.h"
#include "plan_sim.h"
#include "plan_step.h"
#include "test_plan.h"

/* The setups every invariant is checked over: the layouts each rule has a branch for. */
typedef struct {
    const char *name;
    PrecisionKind prec;
    CkptKind ckpt;
    int64_t accum;
    ImplKind impl;
    FsdpSyncKind sync;
    int fsdp_impl;
    OffloadKind off;
    int autocast_cpu;
} Setup;

static const Setup SETUPS[] = {
    {"amp-bf16", PREC_AMP_BF16, CKPT_NONE, 1, IMPL_PYTORCH, FSDP_SYNC_EVERY, 2, OFFLOAD_NONE, 0},
    {"fp32 cpu ckpt", PREC_FP32, CKPT_FULL, 1, IMPL_PYTORCH, FSDP_SYNC_EVERY, 2, OFFLOAD_NONE, 1},
    {"mixed accum last", PREC_MIXED_BF16, CKPT_NONE, 3, IMPL_PYTORCH, FSDP_SYNC_LAST, 2, OFFLOAD_NONE, 0},
    {"amp ckpt accum fsdp1", PREC_AMP_FP16, CKPT_FULL, 2, IMPL_PYTORCH, FSDP_SYNC_EVERY, 1, OFFLOAD_NONE, 0},
    {"offload params", PREC_MIXED_BF16, CKPT_NONE, 1, IMPL_PYTORCH, FSDP_SYNC_EVERY, 2, OFFLOAD_PARAM, 0},
    {"offload optimizer", PREC_AMP_BF16, CKPT_NONE, 2, IMPL_PYTORCH, FSDP_SYNC_EVERY, 2, OFFLOAD_OPT, 0},
    {"engine", PREC_FP32, CKPT_NONE, 2, IMPL_ENGINE, FSDP_SYNC_EVERY, 2, OFFLOAD_NONE, 0},
};
static const char *const MODELS[] = {"gpt2-mini", "bert-base", "resnet50", "llama2-7b"};

static TrainSpec train_of(const Setup *s, int64_t b) {
    TrainSpec t;
    plan_train_defaults(&t);
    t.micro_batch = b;
    t.seq = 128;
    t.precision = s->prec;
    t.act_ckpt = s->ckpt;
    t.grad_accum = s->accum;
    t.impl = s->impl;
    t.fsdp_grad_sync = s->sync;
    t.fsdp_impl = s->fsdp_impl;
    t.offload = s->off;
    t.autocast_cpu = s->autocast_cpu;
    return t;
}

static int applies(const ModelSpec *m, const Setup *s) {
    return s->impl != IMPL_ENGINE || strncmp(m->name, "gpt2", 4) == 0;
}

/* Live bytes per term once the step is over, by summing the events before the end point's
   frees: what lives across steps (freed "after the end"). */
static void live_at_end(const Step *st, double live[TERM_COUNT]) {
    int end = plan_step_point(st->n_layers, PT_END, 0);
    memset(live, 0, sizeof(double) * TERM_COUNT);
    for (int e = 0; e < st->n_mem; e++)
        if (st->mem[e].point < end || st->mem[e].when == AT_BEFORE) live[st->mem[e].term] += st->mem[e].bytes;
}

Test(step, every_allocation_should_be_freed_by_the_end_but_what_lives_across_steps) {
    for (size_t mi = 0; mi < sizeof(MODELS) / sizeof(MODELS[0]); mi++) {
        ModelSpec m = zoo(MODELS[mi]);
        for (size_t si = 0; si < sizeof(SETUPS) / sizeof(SETUPS[0]); si++) {
            if (!applies(&m, &SETUPS[si])) continue;
            TrainSpec t = train_of(&SETUPS[si], 2);
            ClusterSpec c;
            cluster(&c, 4, 4);
            for (int k = 0; k < STRAT_COUNT; k++) {
                Step st;
                cr_assert_eq(plan_step_build(&st, &m, &t, &c, (StrategyKind)k), 0);
                double live[TERM_COUNT];
                live_at_end(&st, live);
                const char *n = plan_strategy((StrategyKind)k)->name;
                /* the model states, declared by their rules, are all that is left of them */
                cr_expect(fabs(live[TERM_PARAMS] - st.ms_params) < 0.5, "%s %s %s: params", m.name, SETUPS[si].name, n);
                cr_expect(fabs(live[TERM_OPTIMIZER] - st.ms_optimizer) < 0.5, "%s %s %s: optimizer", m.name,
                          SETUPS[si].name, n);
                cr_expect(fabs(live[TERM_GRADS] - st.ms_grads) < 0.5, "%s %s %s: grads %.0f vs %.0f", m.name,
                          SETUPS[si].name, n, live[TERM_GRADS], st.ms_grads);
                cr_expect(fabs(live[TERM_TRANSIENT]) < 0.5, "%s %s %s: transients %.0f left", m.name, SETUPS[si].name, n,
                          live[TERM_TRANSIENT]);
                /* the activations left: the loop's logits, held into the next forward */
                ActInputs in = {t.micro_batch, t.seq, m.dropout};
                cr_expect(fabs(live[TERM_ACTIVATIONS] - plan_act_loop_held(&m, &t, &in)) < 1e-3, "%s %s %s: activations",
                          m.name, SETUPS[si].name, n);
                plan_step_free(&st);
            }
        }
        plan_model_free(&m);
    }
}

Test(step, each_term_at_the_peak_should_be_the_bytes_its_rules_hold) {
    static double by[RULE_COUNT][TERM_COUNT];
    for (size_t mi = 0; mi < sizeof(MODELS) / sizeof(MODELS[0]); mi++) {
        ModelSpec m = zoo(MODELS[mi]);
        for (size_t si = 0; si < sizeof(SETUPS) / sizeof(SETUPS[0]); si++) {
            if (!applies(&m, &SETUPS[si])) continue;
            TrainSpec t = train_of(&SETUPS[si], 3);
            ClusterSpec c;
            cluster(&c, 16, 8);
            for (int k = 0; k < STRAT_COUNT; k++) {
                MemResult r;
                Step st;
                plan_memory(&m, &t, &c, (StrategyKind)k, &r);
                cr_assert_eq(plan_step_build(&st, &m, &t, &c, (StrategyKind)k), 0);
                plan_step_live_at_peak(&st, &c, by);
                for (int j = 0; j < TERM_COUNT; j++) {
                    if (j == TERM_OVERHEAD) continue;
                    double sum = 0;
                    for (int q = 0; q < RULE_COUNT; q++) sum += by[q][j];
                    cr_expect(fabs(sum - r.term[j]) <= 1e-9 * r.peak + 1e-6, "%s %s %s %s: rules %.3f, term %.3f", m.name,
                              SETUPS[si].name, plan_strategy((StrategyKind)k)->name, plan_term_name((TermKind)j), sum,
                              r.term[j]);
                }
                plan_step_free(&st);
            }
        }
        plan_model_free(&m);
    }
}

/* One table, one schedule: every collective the table counts is one the simulated step runs
   (K = 1, so each runs once), op by op. */
Test(step, the_simulated_step_should_run_exactly_the_collectives_of_the_table) {
    for (size_t mi = 0; mi < sizeof(MODELS) / sizeof(MODELS[0]); mi++) {
        ModelSpec m = zoo(MODELS[mi]);
        for (size_t si = 0; si < sizeof(SETUPS) / sizeof(SETUPS[0]); si++) {
            Setup s1 = SETUPS[si];
            s1.accum = 1;
            if (!applies(&m, &s1) || s1.off != OFFLOAD_NONE) continue;
            TrainSpec t = train_of(&s1, 1);
            t.syncbn = plan_model_bn_layers(&m, NULL) > 0;
            ClusterSpec c;
            cluster(&c, 16, 8);
            for (int k = 0; k < STRAT_COUNT; k++) {
                CommPlan cp;
                SimResult sim;
                plan_comm(&m, &t, &c, (StrategyKind)k, &cp);
                cr_assert_eq(plan_sim(&m, &t, &c, (StrategyKind)k, 1, &sim), 0);
                for (int op = 0; op < COLL_COUNT; op++) {
                    char name[40];   /* the simulated step names a collective op by its kind, then a space */
                    snprintf(name, sizeof name, "%s ", coll_name((CollKind)op));
                    double table = 0, ran = 0;
                    for (int i = 0; i < cp.n; i++) if ((int)cp.c[i].op == op) table += cp.c[i].count;
                    for (int i = 0; i < sim.n_ops; i++)
                        if (sim.ops[i].lane == LANE_COMM && strncmp(sim.ops[i].name, name, strlen(name)) == 0) ran++;
                    /* a collective of count c runs as one op of c collectives' time */
                    double grouped = 0;
                    for (int i = 0; i < cp.n; i++)
                        if ((int)cp.c[i].op == op && (cp.c[i].purpose == PURPOSE_BUFFERS || cp.c[i].purpose == PURPOSE_UPDATED_PARAMS ||
                                                 cp.c[i].purpose == PURPOSE_PERSISTENT_PARAMS))
                            grouped += cp.c[i].count - (cp.c[i].count > 0);
                    cr_expect_eq(ran + grouped, table, "%s %s %s %s: ran %.0f (+%.0f grouped), the table has %.0f", m.name,
                                 s1.name, plan_strategy((StrategyKind)k)->name, name, ran, grouped, table);
                }
                plan_sim_free(&sim);
            }
        }
        plan_model_free(&m);
    }
}

/* A rule read on its own: DDP's reducer holds one flat copy of every gradient and all-reduces
   it in torch's buckets (reducer.cpp: whole tensors, 1 MiB then 25 MiB). */
Test(step, ddp_reducer_rule_should_hold_the_bucket_copy_and_reduce_every_gradient_once) {
    ModelSpec m = zoo("gpt2");
    TrainSpec t;
    plan_train_defaults(&t);
    ClusterSpec c;
    cluster(&c, 8, 8);
    Step st;
    cr_assert_eq(plan_step_build(&st, &m, &t, &c, STRAT_DDP), 0);
    double held = 0, peak_held = 0, reduced = 0, n = 0;
    for (int e = 0; e < st.n_mem; e++)
        if (st.mem[e].rule == RULE_DDP_BUCKETS) {
            held += st.mem[e].bytes;
            if (held > peak_held) peak_held = held;
        }
    for (int e = 0; e < st.n_xfer; e++)
        if (st.xfer[e].rule == RULE_DDP_BUCKETS) {
            reduced += st.xfer[e].payload;
            n += st.xfer[e].count;
            cr_expect_eq(st.xfer[e].micro, MICRO_LAST, "no_sync: only the last micro-step reduces");
        }
    double psi = (double)plan_model_params(&m);
    cr_expect_eq(peak_held, psi * 4, "fp32 gradients (autocast), one flat copy");
    cr_expect_eq(held, 0, "freed only at the end of the account");
    cr_expect_eq(reduced, psi * 4);
    cr_expect_eq(n, plan_ddp_buckets_tensors(&m, 4, PLAN_DDP_FIRST_BUCKET, PLAN_DDP_BUCKET));
    plan_step_free(&st);
    plan_model_free(&m);
}

Test(step, points_should_map_back_to_their_kind_and_layer_in_step_order) {
    for (int L = 1; L < 7; L++) {
        int prev_kind = -1, prev_layer = -1;
        for (int p = 0; p < 9 + 4 * L; p++) {
            int layer;
            PointKind k = plan_step_point_kind(L, p, &layer);
            int ki = (int)k;
            cr_expect_eq(plan_step_point(L, k, layer < 0 ? 0 : layer), p, "L %d point %d round trip", L, p);
            /* forward in layer order, backward from the last layer, its three points together */
            if (k == PT_FWD && prev_kind == (int)PT_FWD) cr_expect_eq(layer, prev_layer + 1);
            if (k == PT_BWD_MLP && prev_kind == (int)PT_BWD_UNIT) cr_expect_eq(layer, prev_layer - 1);
            if (k == PT_BWD || k == PT_BWD_UNIT) cr_expect_eq(layer, prev_layer);
            cr_expect((int)k >= prev_kind || (k == PT_BWD_MLP && prev_kind == (int)PT_BWD_UNIT), "L %d point %d kind %d after %d", L, p,
                      k, prev_kind);
            prev_kind = ki;
            prev_layer = layer;
        }
        cr_expect_eq(prev_kind, (int)PT_END);
    }
}

/* The dimensions a time-only build is checked under besides the setups above (tp, sp, pp, LoRA). */
typedef struct {
    const char *name;
    int tp, sp, pp, lora;
} Dims;
static const Dims DIMS[] = {{"none", 1, 0, 1, 0}, {"tp 2", 2, 0, 1, 0}, {"tp 2 sp", 2, 1, 1, 0},
                            {"pp 2", 1, 0, 2, 0}, {"lora 16", 1, 0, 1, 16}};

/* Two builds of one setup whose work, collectives, simulated step and collective table agree
   field by field: the time-only build (auto's scores) against the whole one. */
static void expect_same_time(const ModelSpec *m, const TrainSpec *t, const ClusterSpec *c, StrategyKind k,
                             const char *what, int *built) {
    Step whole, time_only;
    int rw = plan_step_build(&whole, m, t, c, k), rt = plan_step_build_for(&time_only, m, t, c, k, PLAN_STEP_TIME);
    const char *n = plan_strategy(k)->name;
    cr_assert_eq(rt, rw, "%s %s %s: status", m->name, what, n);
    if (!rw) {
        (*built)++;
        cr_assert_eq(time_only.n_work, whole.n_work, "%s %s %s: work items", m->name, what, n);
        cr_assert_eq(time_only.n_xfer, whole.n_xfer, "%s %s %s: collectives", m->name, what, n);
        cr_expect_eq(memcmp(time_only.work, whole.work, sizeof *whole.work * (size_t)whole.n_work), 0, "%s %s %s: work",
                     m->name, what, n);
        cr_expect_eq(memcmp(time_only.xfer, whole.xfer, sizeof *whole.xfer * (size_t)whole.n_xfer), 0,
                     "%s %s %s: collectives", m->name, what, n);
        SimResult sw, st;
        int sw_rc = plan_sim_step(&whole, 0, &sw), st_rc = plan_sim_step(&time_only, 0, &st);
        cr_expect_eq(st_rc, sw_rc, "%s %s %s: simulated", m->name, what, n);
        cr_expect_eq(memcmp(&st, &sw, sizeof sw), 0, "%s %s %s: simulated step %.9g s vs %.9g s", m->name, what, n,
                     st.step_s, sw.step_s);
        CommPlan cw, ct;
        plan_comm_step(&whole, &cw);
        plan_comm_step(&time_only, &ct);
        cr_expect_eq(memcmp(&ct, &cw, sizeof cw), 0, "%s %s %s: collective table", m->name, what, n);
        if (time_only.built_for & PLAN_STEP_TIME) {   /* (a pipeline's stages are built whole) */
            MemResult r;
            cr_expect_eq(plan_memory_step(&time_only, c, &r, NULL, NULL, 0), PLAN_ERR_REFUSED, "%s %s %s: memory",
                         m->name, what, n);
            cr_expect_eq(plan_sim_step(&time_only, 1, &st), PLAN_ERR_REFUSED, "%s %s %s: recorded", m->name, what, n);
        }
    }
    plan_step_free(&whole);
    plan_step_free(&time_only);
}

/* auto scores a setup on a step built for its time only (PLAN_STEP_TIME: the rules that write
   memory events alone left out): the same work items, collectives, simulated step and
   collective table as the whole build, byte for byte, over the models and setups above, an MoE
   model, micro-batches 1, 2 and 8, and tp 2 (with and without sp), pp 2 and LoRA. */
Test(step, a_time_only_build_should_simulate_as_the_whole_build) {
    static const char *const MORE[] = {"gpt2-mini", "bert-base", "resnet50", "llama2-7b", "qwen1.5-moe-a2.7b"};
    int built = 0;
    for (size_t mi = 0; mi < sizeof(MORE) / sizeof(MORE[0]); mi++) {
        ModelSpec m = zoo(MORE[mi]);
        for (size_t si = 0; si < sizeof(SETUPS) / sizeof(SETUPS[0]); si++)
            for (size_t di = 0; di < sizeof(DIMS) / sizeof(DIMS[0]); di++)
                for (int64_t b = 1; b <= 8; b *= (b == 2 ? 4 : 2)) {
                    if (!applies(&m, &SETUPS[si])) continue;
                    if (di && (si % 3) != (di % 3) && b != 2) continue;   /* the dimensions over a third of the rest */
                    TrainSpec t = train_of(&SETUPS[si], b);
                    t.tp = DIMS[di].tp;
                    t.sp = DIMS[di].sp;
                    t.pp = DIMS[di].pp;
                    if (t.pp > 1 && t.grad_accum < 2) t.grad_accum = 2;
                    t.ft.rank = DIMS[di].lora;
                    ClusterSpec c;
                    cluster(&c, 16, 8);
                    char what[96];
                    snprintf(what, sizeof what, "%s, %s, b%lld", SETUPS[si].name, DIMS[di].name, (long long)b);
                    for (int k = 0; k < STRAT_COUNT; k++) expect_same_time(&m, &t, &c, (StrategyKind)k, what, &built);
                }
        plan_model_free(&m);
    }
    cr_expect_gt(built, 1000, "built %d", built);
}

/* The simulated step prices a collective again only when its arguments differ from the last
   one's (plan_sim.c prepare: a model's repeated blocks write the same collectives layer after
   layer): in a run of three equal all-gathers (gpt2-mini, FSDP2, 16 GPUs on 2 nodes) the middle
   one made three times larger runs for its own price, and the one after it for the others',
   each plan_coll_seconds of its own arguments. */
Test(step, a_collective_unlike_the_last_should_be_priced_afresh_in_the_simulated_step) {
    ModelSpec m = zoo("gpt2-mini");
    TrainSpec t = train_of(&SETUPS[0], 2);
    ClusterSpec c;
    cluster(&c, 16, 8);
    Step st;
    cr_assert_eq(plan_step_build(&st, &m, &t, &c, STRAT_FSDP_FULL), 0);
    int k = -1;
    for (int e = 0; e + 2 < st.n_xfer && k < 0; e++) {
        const StepXfer *x = &st.xfer[e];
        int same = x->kind == XFER_COLL && x->group > 1 && x->count == 1;
        for (int j = 1; j <= 2 && same; j++)
            same = st.xfer[e + j].kind == XFER_COLL && st.xfer[e + j].op == x->op && st.xfer[e + j].payload == x->payload &&
                   st.xfer[e + j].group == x->group && st.xfer[e + j].crosses == x->crosses && st.xfer[e + j].count == 1;
        if (same) k = e;
    }
    cr_assert_geq(k, 0, "a run of three equal collectives");
    const StepXfer *x = &st.xfer[k];
    double was = x->payload, now = 3 * was;
    st.xfer[k + 1].payload = now;
    const ClusterSpec *cc = &st.view.full;
    double s_was = plan_coll_seconds(cc, (CollKind)x->op, was, x->group, x->crosses);
    double s_now = plan_coll_seconds(cc, (CollKind)x->op, now, x->group, x->crosses);
    SimResult sim;
    cr_assert_eq(plan_sim_step(&st, 1, &sim), 0);
    int n_was = 0, n_now = 0;
    for (int i = 0; i < sim.n_ops; i++) {
        const SimOp *o = &sim.ops[i];
        if (o->lane != LANE_COMM) continue;
        if (o->bytes == now) { n_now++; cr_expect_eq(o->dur, s_now, "%s: %.12g s, priced %.12g s", o->name, o->dur, s_now); }
        if (o->bytes == was) { n_was++; cr_expect_eq(o->dur, s_was, "%s: %.12g s, priced %.12g s", o->name, o->dur, s_was); }
    }
    cr_expect_eq(n_now, 1);
    cr_expect_geq(n_was, 2);
    plan_sim_free(&sim);
    plan_step_free(&st);
    plan_model_free(&m);
}
