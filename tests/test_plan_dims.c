/* test_plan_dims.c — one step, built once, read by every part, over the dimensions (plan_dim.h):
 * dense, MoE, LoRA/QLoRA, offload, tp 2/8 with and without SP, tp 2 under ZeRO-1/2 on two nodes,
 * pp 2/4, tp x pp (ddp, zero1, fsdp-full), ep 2/4 (one node
 * and two), cp 2 and tp x cp, at micro-batch 1, 2 and 8. The invariants: the simulated step runs the collective table's collectives call
 * by call and byte by byte; compute grows with the micro-batch and falls with tp; the plan's
 * verdict at a batch is the max-batch search's; every rule and dimension row is filled in. */
#include <criterion/criterion.h>
#include <math.h>
#include <string.h>

#include "plan_auto.h"
#include "plan_comm.h"
#include "plan_dim.h"
#include "plan_dim_ft.h"
#include "plan_load.h"
#include "plan_memory.h"
#include "plan_plan.h"
#include "plan_sim.h"
#include "plan_step.h"
#include "plan_step_internal.h"
#include "test_plan.h"

/* One setup of the matrix: a model, a cluster and what the dimensions add. */
typedef struct {
    const char *name;
    const char *model;
    int gpus, gpn;
    int tp, sp, pp, micro;   /* pp: micro-batches per step (grad_accum) */
    int ep, cp;              /* expert- and context-parallel degrees (0: none) */
    int lora;                /* LoRA rank (0 none), on PEFT's default targets */
    QuantKind quant;
    OffloadKind off;
    unsigned strategies;     /* the strategies it is planned with */
    const char *gpu;         /* the GPU preset (NULL: the default) */
    int loss_parallel;       /* --loss-parallel on (with tp > 1) */
} Case;

#define DP_FSDP ((1u << STRAT_DDP) | (1u << STRAT_FSDP_FULL))
#define ALL ((1u << STRAT_COUNT) - 1)
#define NO_FSDP1_LORA ((1u << STRAT_DDP) | (1u << STRAT_ZERO1) | (1u << STRAT_ZERO2) | (1u << STRAT_ZERO3) | DP_FSDP)

static const Case CASES[] = {
    {"dense", "gpt2-xl", 8, 8, 1, 0, 1, 1, 0, 0, 0, QUANT_NONE, OFFLOAD_NONE, ALL, NULL, 0},
    {"moe", "bench/torch/configs/mixtral-wide.json", 4, 4, 1, 0, 1, 1, 0, 0, 0, QUANT_NONE, OFFLOAD_NONE, ALL, NULL, 0},
    {"lora", "llama2-7b", 8, 8, 1, 0, 1, 1, 0, 0, 16, QUANT_NONE, OFFLOAD_NONE, NO_FSDP1_LORA, NULL, 0},
    {"qlora", "llama2-7b", 2, 2, 1, 0, 1, 1, 0, 0, 16, QUANT_NF4, OFFLOAD_NONE, (1u << STRAT_DDP) | (1u << STRAT_ZERO2), NULL, 0},
    {"offload", "gpt2-xl", 8, 8, 1, 0, 1, 1, 0, 0, 0, QUANT_NONE, OFFLOAD_OPT,
     (1u << STRAT_ZERO1) | (1u << STRAT_ZERO2) | (1u << STRAT_ZERO3) | (1u << STRAT_FSDP_FULL), NULL, 0},
    {"tp2", "llama2-7b", 8, 8, 2, 0, 1, 1, 0, 0, 0, QUANT_NONE, OFFLOAD_NONE, DP_FSDP, NULL, 0},
    {"tp2 sp", "llama2-7b", 8, 8, 2, 1, 1, 1, 0, 0, 0, QUANT_NONE, OFFLOAD_NONE, DP_FSDP, NULL, 0},
    {"tp8", "llama2-70b", 64, 8, 8, 0, 1, 1, 0, 0, 0, QUANT_NONE, OFFLOAD_NONE, DP_FSDP, "h100-80gb", 0},
    {"tp8 sp", "llama2-70b", 64, 8, 8, 1, 1, 1, 0, 0, 0, QUANT_NONE, OFFLOAD_NONE, DP_FSDP, "h100-80gb", 0},
    {"pp2", "gpt2-medium", 8, 8, 1, 0, 2, 4, 0, 0, 0, QUANT_NONE, OFFLOAD_NONE, DP_FSDP, NULL, 0},
    {"pp4", "llama2-7b", 8, 8, 1, 0, 4, 8, 0, 0, 0, QUANT_NONE, OFFLOAD_NONE, DP_FSDP, NULL, 0},
    {"tp2 x pp2", "llama2-13b", 16, 8, 2, 1, 2, 4, 0, 0, 0, QUANT_NONE, OFFLOAD_NONE, DP_FSDP | (1u << STRAT_ZERO1),
     NULL, 0},
    {"moe ep2", "bench/torch/configs/mixtral-wide.json", 4, 4, 1, 0, 1, 1, 2, 0, 0, QUANT_NONE, OFFLOAD_NONE,
     1u << STRAT_FSDP_FULL, NULL, 0},
    {"moe ep4 x 2 nodes", "bench/torch/configs/mixtral-wide.json", 8, 4, 1, 0, 1, 1, 4, 0, 0, QUANT_NONE, OFFLOAD_NONE,
     1u << STRAT_FSDP_FULL, NULL, 0},
    {"cp2", "llama2-7b", 8, 8, 1, 0, 1, 1, 0, 2, 0, QUANT_NONE, OFFLOAD_NONE, 1u << STRAT_FSDP_FULL, NULL, 0},
    {"tp2 x cp2", "llama2-7b", 8, 8, 2, 1, 1, 1, 0, 2, 0, QUANT_NONE, OFFLOAD_NONE, 1u << STRAT_FSDP_FULL, NULL, 0},
    {"tp8 sp loss parallel", "llama2-70b", 64, 8, 8, 1, 1, 1, 0, 0, 0, QUANT_NONE, OFFLOAD_NONE, DP_FSDP, "h100-80gb", 1},
    {"tp2 zero1/2 x 2 nodes", "llama2-7b", 16, 8, 2, 0, 1, 1, 0, 0, 0, QUANT_NONE, OFFLOAD_NONE,
     (1u << STRAT_ZERO1) | (1u << STRAT_ZERO2), NULL, 0},
};
static const int64_t BATCHES[] = {1, 2, 8};

static ModelSpec model_of(const Case *k) {
    ModelSpec m;
    char msg[512];
    if (strchr(k->model, '/')) cr_assert_eq(plan_load_model(&m, k->model, msg, sizeof msg), 0, "%s", msg);
    else m = zoo(k->model);
    return m;
}

static void cluster_of(ClusterSpec *c, const Case *k) {
    cluster(c, k->gpus, k->gpn);
    if (k->gpu) c->gpu = *plan_gpu_by_name(k->gpu);
}

static TrainSpec train_of(const Case *k, int64_t b) {
    TrainSpec t;
    plan_train_defaults(&t);
    t.micro_batch = b;
    t.seq = strncmp(k->model, "gpt2", 4) == 0 ? 1024 : 2048;   /* GPT-2: its learned positions */
    t.tp = k->tp;
    t.sp = k->sp;
    t.loss_parallel = k->loss_parallel;
    t.pp = k->pp;
    t.grad_accum = k->micro;
    t.ep = k->ep > 1 ? k->ep : 1;
    t.cp = k->cp > 1 ? k->cp : 1;
    t.offload = k->off;
    if (k->lora) {
        t.ft.rank = k->lora;
        t.ft.alpha = 16;
        t.ft.quant = k->quant;
    }
    return t;
}

/* The model as the setup plans it: the fine-tuning dimension's setup applied once. */
static ModelSpec setup_model(const Case *k, const TrainSpec *t) {
    ModelSpec m = model_of(k);
    char msg[512];
    cr_assert_eq(plan_dims_setup(&m, t, msg, sizeof msg), 0, "%s: %s", k->name, msg);
    return m;
}

Test(dims, the_simulated_step_should_run_the_collective_table_call_by_call_and_byte_by_byte) {
    for (size_t i = 0; i < sizeof CASES / sizeof CASES[0]; i++) {
        const Case *k = &CASES[i];
        for (size_t bi = 0; bi < sizeof BATCHES / sizeof BATCHES[0]; bi++) {
            TrainSpec t = train_of(k, BATCHES[bi]);
            ModelSpec m = setup_model(k, &t);
            ClusterSpec c;
            cluster_of(&c, k);
            for (int s = 0; s < STRAT_COUNT; s++) {
                if (!(k->strategies & (1u << s))) continue;
                Step st;
                cr_assert_eq(plan_step_build(&st, &m, &t, &c, (StrategyKind)s), PLAN_OK, "%s %s b%lld: %s", k->name,
                             plan_strategy((StrategyKind)s)->name, (long long)t.micro_batch, st.fail_why);
                CommPlan cp;
                SimResult sim;
                plan_comm_step(&st, &cp);
                cr_assert_eq(plan_sim_step(&st, 0, &sim), 0);
                double table[PURPOSE_COUNT][COLL_COUNT] = {{0}}, bytes[PURPOSE_COUNT][COLL_COUNT] = {{0}};
                for (int r = 0; r < cp.n; r++) {
                    table[cp.c[r].purpose][cp.c[r].op] += cp.c[r].count;
                    bytes[cp.c[r].purpose][cp.c[r].op] += cp.c[r].payload_bytes;
                }
                for (int u = 0; u < PURPOSE_COUNT; u++)
                    for (int o = 0; o < COLL_COUNT; o++) {
                        cr_expect(fabs(sim.coll_count[u][o] - table[u][o]) <= 1e-9 * table[u][o],
                                  "%s %s b%lld purpose %d %s: the step ran %.3f calls, the table has %.3f", k->name,
                                  plan_strategy((StrategyKind)s)->name, (long long)t.micro_batch, u,
                                  coll_name((CollKind)o), sim.coll_count[u][o], table[u][o]);
                        cr_expect(fabs(sim.coll_payload[u][o] - bytes[u][o]) <= 1e-9 * bytes[u][o],
                                  "%s %s b%lld purpose %d %s: the step moved %.0f B, the table %.0f B", k->name,
                                  plan_strategy((StrategyKind)s)->name, (long long)t.micro_batch, u,
                                  coll_name((CollKind)o), sim.coll_payload[u][o], bytes[u][o]);
                    }
                plan_step_free(&st);
            }
            plan_model_free(&m);
        }
    }
}

/* Compute over the micro-batch: b = 2 costs 1.6 to 2.1 times b = 1 at these sizes (the GEMMs'
   efficiency grows with the batch, the fixed per-step work does not), and 8 more than 2; under
   tp each rank computes its share, less than the whole model's. */
Test(dims, compute_should_grow_with_the_micro_batch_and_fall_with_tp) {
    for (size_t i = 0; i < sizeof CASES / sizeof CASES[0]; i++) {
        const Case *k = &CASES[i];
        for (int s = 0; s < STRAT_COUNT; s++) {
            if (!(k->strategies & (1u << s))) continue;
            double comp[3];
            for (int bi = 0; bi < 3; bi++) {
                TrainSpec t = train_of(k, BATCHES[bi]);
                ModelSpec m = setup_model(k, &t);
                ClusterSpec c;
                cluster_of(&c, k);
                SimResult sim;
                cr_assert_eq(plan_sim(&m, &t, &c, (StrategyKind)s, 0, &sim), 0);
                /* the layers' compute: the step's less the optimizer's, which has no batch */
                comp[bi] = sim.fwd_compute_s + sim.bwd_compute_s;
                plan_model_free(&m);
            }
            double r2 = comp[1] / comp[0];
            cr_expect(r2 >= 1.6 && r2 <= 2.1, "%s %s: compute b2/b1 = %.3f", k->name, plan_strategy((StrategyKind)s)->name, r2);
            cr_expect(comp[2] > 3 * comp[1], "%s %s: compute b8 %.4f s vs b2 %.4f s", k->name,
                      plan_strategy((StrategyKind)s)->name, comp[2], comp[1]);
            if (k->tp > 1) {   /* the same setup without tp: each rank computes the whole model */
                Case k1 = *k;
                k1.tp = 1;
                k1.sp = k1.loss_parallel = 0;
                for (int bi = 0; bi < 3; bi++) {
                    TrainSpec t = train_of(&k1, BATCHES[bi]);
                    ModelSpec m = setup_model(&k1, &t);
                    ClusterSpec c;
                    cluster_of(&c, k);
                    SimResult sim;
                    cr_assert_eq(plan_sim(&m, &t, &c, (StrategyKind)s, 0, &sim), 0);
                    double whole = sim.fwd_compute_s + sim.bwd_compute_s;
                    cr_expect(comp[bi] < whole * 0.75, "%s %s b%lld: tp %d computes %.4f s, the whole model %.4f s", k->name,
                              plan_strategy((StrategyKind)s)->name, (long long)BATCHES[bi], k->tp, comp[bi], whole);
                    plan_model_free(&m);
                }
            }
        }
    }
}

/* The tp, pp, ep and cp collectives move the micro-batch's activations (tokens, keys and values):
   8 samples move 8 times 1's. */
Test(dims, tp_pp_ep_and_cp_payloads_should_scale_with_the_micro_batch_in_the_table_and_the_step) {
    for (size_t i = 0; i < sizeof CASES / sizeof CASES[0]; i++) {
        const Case *k = &CASES[i];
        if (k->tp == 1 && k->pp == 1 && k->ep <= 1 && k->cp <= 1) continue;
        double tab[2] = {0}, ran[2] = {0};
        for (int bi = 0; bi < 3; bi += 2) {
            TrainSpec t = train_of(k, BATCHES[bi]);
            ModelSpec m = setup_model(k, &t);
            ClusterSpec c;
            cluster_of(&c, k);
            Step st;
            cr_assert_eq(plan_step_build(&st, &m, &t, &c, STRAT_FSDP_FULL), PLAN_OK, "%s", st.fail_why);
            CommPlan cp;
            SimResult sim;
            plan_comm_step(&st, &cp);
            plan_sim_step(&st, 0, &sim);
            static const CollPurpose ACTS[] = {PURPOSE_TP_ACTS, PURPOSE_TP_LOGITS, PURPOSE_PP_ACTS, PURPOSE_EP_TOKENS,
                                               PURPOSE_CP_KV};
            for (size_t a = 0; a < sizeof ACTS / sizeof ACTS[0]; a++) {
                for (int r = 0; r < cp.n; r++) if (cp.c[r].purpose == ACTS[a]) tab[bi / 2] += cp.c[r].payload_bytes;
                for (int o = 0; o < COLL_COUNT; o++) ran[bi / 2] += sim.coll_payload[ACTS[a]][o];
            }
            plan_step_free(&st);
            plan_model_free(&m);
        }
        cr_expect(tab[0] > 0, "%s: activations move", k->name);
        cr_expect(fabs(tab[1] - 8 * tab[0]) <= 1e-9 * tab[1], "%s: table b8 %.0f vs 8 x b1 %.0f", k->name, tab[1], 8 * tab[0]);
        cr_expect(fabs(ran[1] - 8 * ran[0]) <= 1e-9 * ran[1], "%s: step b8 %.0f vs 8 x b1 %.0f", k->name, ran[1], 8 * ran[0]);
    }
}

/* The plan at a batch and the max-batch search agree: the row at b fits exactly when b is at most
   the search's answer, and a plan at the answer fits while one above it does not. */
Test(dims, the_peak_printed_at_a_batch_should_be_the_max_batch_searchs_verdict) {
    for (size_t i = 0; i < sizeof CASES / sizeof CASES[0]; i++) {
        const Case *k = &CASES[i];
        TrainSpec t = train_of(k, 1);
        ModelSpec m = setup_model(k, &t);
        ClusterSpec c;
        cluster_of(&c, k);
        c.alloc_model = 1;   /* the CLI's default: the caching allocator's replay */
        for (size_t bi = 0; bi < sizeof BATCHES / sizeof BATCHES[0]; bi++) {
            t.micro_batch = BATCHES[bi];
            Plan p;
            plan_run(&m, &t, &c, k->strategies, &p);
            for (int r = 0; r < p.n_rows; r++) {
                int64_t mb = p.rows[r].max_micro_batch;
                cr_expect_eq(p.rows[r].mem.fits, BATCHES[bi] <= mb, "%s %s b%lld: row fits %d, max batch %lld", k->name,
                             plan_strategy(p.rows[r].kind)->name, (long long)BATCHES[bi], p.rows[r].mem.fits, (long long)mb);
                if (bi > 0 || mb == 0 || mb >= PLAN_MAX_BATCH_SEARCH) continue;
                TrainSpec ta = t;
                MemResult at, above;
                ta.micro_batch = mb;
                plan_memory(&m, &ta, &c, p.rows[r].kind, &at);
                ta.micro_batch = mb + 1;
                plan_memory(&m, &ta, &c, p.rows[r].kind, &above);
                cr_expect(at.fits && !above.fits, "%s %s: a plan at the max batch %lld fits (%d), at %lld does not (%d)",
                          k->name, plan_strategy(p.rows[r].kind)->name, (long long)mb, at.fits, (long long)mb + 1,
                          above.fits);
            }
            plan_free(&p);
        }
        plan_model_free(&m);
    }
}

/* A plan's row is read from its own step: the step's view is of the row's strategy, at the
   plan's micro-batch, and under tp the rank's share (not the model as given). */
Test(dims, each_row_should_keep_the_step_its_figures_are_read_from) {
    const Case *k = &CASES[7];   /* tp8 */
    TrainSpec t = train_of(k, 2);
    ModelSpec m = setup_model(k, &t);
    ClusterSpec c;
    cluster_of(&c, k);
    Plan p;
    plan_run(&m, &t, &c, k->strategies, &p);
    cr_assert_eq(p.n_rows, 2);
    for (int r = 0; r < p.n_rows; r++) {
        const Step *st = &p.rows[r].step;
        cr_expect_eq(st->view.sk, p.rows[r].kind);
        cr_expect_eq(st->view.t.micro_batch, 2);
        cr_expect_eq(st->view.tp, 8);
        cr_expect_eq(st->view.dp.gpus, 8, "64 GPUs / tp 8");
        cr_expect((double)plan_model_params(&st->view.m) < (double)plan_model_params(&m) / 7, "one rank's share");
        SimResult again;
        plan_sim_step(st, 0, &again);
        cr_expect_eq(again.step_s, p.rows[r].time.step_s, "the row's time is its step's");
    }
    plan_free(&p);
    plan_model_free(&m);
}

/* Every rule id has its row (name, mechanism, source), and every dimension of the table names
   itself, says when it is on, and how a refusal reads; a dimension with a search has its
   settings and lines. */
Test(dims, every_rule_and_dimension_row_should_be_filled_in) {
    for (int r = 0; r < RULE_COUNT; r++) {
        const RuleInfo *ri = plan_rule_info((RuleId)r);
        cr_expect(ri->name && ri->name[0], "rule %d has no name", r);
        cr_expect(ri->mechanism && ri->mechanism[0], "rule %d (%s) has no mechanism", r, ri->name ? ri->name : "?");
        cr_expect(ri->source && ri->source[0], "rule %d (%s) has no source", r, ri->name ? ri->name : "?");
        for (int q = 0; q < r && ri->name; q++)
            cr_expect(strcmp(ri->name, plan_rule_info((RuleId)q)->name) != 0, "rules %d and %d share the name %s", q, r, ri->name);
    }
    cr_assert(plan_dim_count() >= 5);
    for (int i = 0; i < plan_dim_count(); i++) {
        const PlanDim *d = plan_dim(i);
        cr_expect(d->name && d->on && d->not_planned, "dimension %d is missing its name, on or refusal text", i);
        cr_expect(!d->settings == !d->auto_on && !d->settings == !d->describe && !d->settings == !d->search_title,
                  "dimension %s: a search needs auto_on, settings, describe and a title together", d->name);
    }
}

/* The rank views of case k under strategy sk at micro-batch 1, into v; how many (m: the model as
   the setup plans it, for the caller to free). */
static int views_of(const Case *k, StrategyKind sk, ModelSpec *m, RankView *v) {
    TrainSpec t = train_of(k, 1);
    *m = setup_model(k, &t);
    ClusterSpec c;
    cluster_of(&c, k);
    char why[320];
    const char *where;
    int n = plan_rank_views(m, &t, &c, sk, v, PLAN_MAX_VIEWS, why, sizeof why, &where);
    cr_assert(n >= 1, "%s: %s", k->name, why);
    return n;
}

/* Views apply once, in the table's order: under tp x pp the stage is of the tp share, and the
   data-parallel group is the GPUs over both degrees. */
Test(dims, views_should_compose_tp_then_pp) {
    ModelSpec m;
    RankView v[PLAN_MAX_VIEWS];
    int n = views_of(&CASES[11], STRAT_DDP, &m, v);   /* tp2 x pp2 on 16 GPUs */
    cr_assert_eq(n, 2, "stage 0 and the last");
    for (int i = 0; i < n; i++) {
        cr_expect_eq(v[i].tp, 2);
        cr_expect_eq(v[i].pp, 2);
        cr_expect_eq(v[i].dp.gpus, 4, "16 / (tp 2 x pp 2)");
        cr_expect_eq(v[i].full.gpus, 16);
        cr_expect_eq(v[i].m.n_head, m.n_head / 2, "the stage of the tp share");
        plan_rank_view_free(&v[i]);
    }
    cr_expect_eq(v[0].stage, 0);
    cr_expect_eq(v[1].stage, 1);
    plan_model_free(&m);
}

/* A refused setup is a status with a reason, not a bare -1. */
Test(dims, a_refused_setup_should_say_which_dimension_and_why) {
    ModelSpec m = zoo("gpt2");
    TrainSpec t;
    plan_train_defaults(&t);
    t.tp = 2;
    ClusterSpec c;
    cluster(&c, 8, 8);
    Step st;
    cr_expect_eq(plan_step_build(&st, &m, &t, &c, STRAT_ZERO3), PLAN_ERR_REFUSED);
    cr_expect_str_eq(st.fail_where, "tensor parallel does not apply to this setup");
    cr_expect(strstr(st.fail_why, "--tp 2 with --strategy zero3") != NULL, "%s", st.fail_why);
    MemResult r;
    cr_expect_eq(plan_memory_step(&st, &c, &r, NULL, NULL, 0), PLAN_ERR_REFUSED);
    cr_expect(!r.fits && isinf(r.peak));
    plan_step_free(&st);
    plan_model_free(&m);
}

/* A rule writes only under its own ids: run alone on each setup's view, no two rules write the
   same id (the DeepSpeed bucket ids are one mechanism's, written by whichever of ZeRO-1/2's,
   ZeRO-3's or the engine's reducer runs: never two in one step). Views from the matrix and
   every strategy, and the layouts the core rules branch on (DeepSpeed, the engine, FSDP1). */
Test(dims, each_rule_id_should_be_written_by_one_rule_in_a_step) {
    StepRuleFn fns[64];
    int nf = plan_step_rule_fns(fns, 64);
    cr_assert(nf >= 29);
    unsigned char seen[RULE_COUNT] = {0};
    for (size_t i = 0; i < sizeof CASES / sizeof CASES[0]; i++) {
        const Case *k = &CASES[i];
        for (int variant = 0; variant < 7; variant++) {
            TrainSpec t = train_of(k, 2);
            if (variant == 1) t.fsdp_impl = 1;   /* FSDP1's layout */
            if (variant == 2) { t.impl = IMPL_ENGINE; t.precision = PREC_FP32; }
            if (variant == 3) { t.precision = PREC_MIXED_BF16; t.act_ckpt = CKPT_FULL; }   /* DeepSpeed's fp32 step */
            if (variant == 4) { t.syncbn = 1; t.autocast_cpu = 1; t.precision = PREC_FP32; t.seq = 64; }   /* a CNN on CPU */
            if (variant == 5) { t.precision = PREC_AMP_BF16; t.act_ckpt = CKPT_FULL; }   /* recomputed casts */
            /* eager attention: the causal mask, the scores' forward working set (gpt2-mini s1024) */
            if (variant == 6) { t.attn = ATTN_EAGER; t.precision = PREC_FP32; t.seq = 1024; }
            if (variant && (k->tp > 1 || k->pp > 1 || k->lora)) continue;   /* refused there */
            if (variant == 2 && strncmp(k->model, "gpt2", 4) != 0) continue;
            if ((variant == 4 || variant == 6) && i > 0) continue;
            ModelSpec m = variant == 4 ? zoo("resnet50") : variant == 6 ? zoo("gpt2-mini") : setup_model(k, &t);
            ClusterSpec c;
            cluster_of(&c, k);
            for (int s = 0; s < STRAT_COUNT; s++) {
                if (!(k->strategies & (1u << s))) continue;
                RankView v[PLAN_MAX_VIEWS];
                char why[320];
                const char *where;
                int n = plan_rank_views(&m, &t, &c, (StrategyKind)s, v, PLAN_MAX_VIEWS, why, sizeof why, &where);
                if (n < 0) continue;   /* a refusal: nothing built */
                for (int j = 0; j < n; j++) {   /* every candidate view: a pipeline's last rank has rules rank 0 has not */
                    int writer[RULE_COUNT];
                    for (int r = 0; r < RULE_COUNT; r++) writer[r] = -1;
                    for (int f = 0; f < nf; f++) {
                        unsigned char w[RULE_COUNT];
                        cr_assert_eq(plan_step_rule_writes(&v[j], fns[f], w), 0);
                        for (int r = 0; r < RULE_COUNT; r++) {
                            if (!w[r]) continue;
                            seen[r] = 1;
                            cr_expect(writer[r] < 0, "%s %s variant %d view %d: rule id %s written by rules %d and %d", k->name,
                                      plan_strategy((StrategyKind)s)->name, variant, j, plan_rule_info((RuleId)r)->name,
                                      writer[r], f);
                            writer[r] = f;
                        }
                    }
                }
                for (int j = 0; j < n; j++) plan_rank_view_free(&v[j]);
            }
            plan_model_free(&m);
        }
    }
    int unseen = 0;
    for (int r = 0; r < RULE_COUNT; r++) unseen += !seen[r];
    for (int r = 0; r < RULE_COUNT; r++)
        if (!seen[r]) cr_log_info("rule id %s not written over the matrix", plan_rule_info((RuleId)r)->name);
    /* pp_in_flight reads the saved activations the account holds: run alone it has none */
    cr_expect(unseen <= 1 && !seen[RULE_PP_IN_FLIGHT], "%d rule ids never written over the matrix", unseen);
}

/* Context parallel applies after tp (the stage's share of the sequence) and keeps the
   data-parallel group (FSDP2 shards over dp x cp); expert parallel narrows the experts of the
   rank's model and adds its two groups' communicators. */
Test(dims, views_should_compose_tp_then_cp_and_narrow_the_experts_under_ep) {
    ModelSpec m;
    RankView v[PLAN_MAX_VIEWS];
    cr_assert_eq(views_of(&CASES[15], STRAT_FSDP_FULL, &m, v), 1);   /* tp2 x cp2 on 8 GPUs */
    cr_expect_eq(v[0].t.seq, 1024, "2048 tokens over cp 2");
    cr_expect_eq(v[0].m.n_head, m.n_head / 2);
    cr_expect_eq(v[0].dp.gpus, 4, "8 / tp 2: cp stays in the data-parallel group");
    cr_expect_eq(v[0].comms, 1, "the ring's");
    plan_rank_view_free(&v[0]);
    plan_model_free(&m);
    cr_assert_eq(views_of(&CASES[12], STRAT_FSDP_FULL, &m, v), 1);   /* mixtral-wide ep 2 on 4 GPUs */
    cr_expect_eq(v[0].ep, 2);
    cr_expect_eq(v[0].m.moe.ep, 2);
    cr_expect_eq(v[0].comms, 2, "the ep group and the expert data-parallel group of 2");
    cr_expect(plan_model_params(&v[0].m) < plan_model_params(&m));
    plan_rank_view_free(&v[0]);
    plan_model_free(&m);
}
