/* test_plan_ep.c — expert parallelism (plan_dim_ep.h): one rank's share of the experts, the
 * model states of the two FSDP2 groups, the all-to-alls with their counts, payloads and groups,
 * the nested experts unit in FSDP2's timeline, the compute a rank keeps, the refusals, the
 * all-to-all's price, and auto's search of the degree. The measured runs these figures were set
 * against are the bench/torch/results files named ..._ep2 and ..._ep4 (check_saved.py compares
 * them in full). */
#include <criterion/criterion.h>
#include <math.h>
#include <string.h>

#include "plan_activ.h"
#include "plan_auto.h"
#include "plan_comm.h"
#include "plan_dim_ep.h"
#include "plan_load.h"
#include "plan_memory.h"
#include "plan_sim.h"
#include "plan_step.h"
#include "test_plan.h"

#define MIXTRAL_WIDE "bench/torch/configs/mixtral-wide.json"

/* The harness's setup of mixtral-wide_fsdp-full_fp32_none_eager_r4_b4_s128_ep2: 4 CPU ranks,
   fp32, eager attention, micro-batch 4 of 128 tokens, its loop, overheads zeroed. */
static void harness_setup(TrainSpec *t, ClusterSpec *c, int ep) {
    plan_train_defaults(t);
    t->precision = PREC_FP32;
    t->attn = ATTN_EAGER;
    t->micro_batch = 4;
    t->seq = 128;
    t->dropout = 0;
    t->autocast_cpu = 1;
    t->loop_trainer = 1;   /* the harness's loop drops the logits before backward */
    t->ep = ep;
    cluster(c, 4, 4);
    c->cuda_context = c->nccl_per_comm = c->alloc_margin = 0;
    c->gpu.cublas_ws_bytes = 0;
    c->gpu.mem_bytes = 1e18;
}

/* mixtral-wide in the harness's setup at ep, and its collective table (p may be NULL). */
static ModelSpec mixtral(TrainSpec *t, ClusterSpec *c, int ep, CommPlan *p) {
    ModelSpec m = load_model(MIXTRAL_WIDE);
    harness_setup(t, c, ep);
    if (p) plan_comm(&m, t, c, STRAT_FSDP_FULL, p);
    return m;
}

static const PlanColl *row(const CommPlan *p, CollKind op, PhaseKind ph, CollPurpose what) {
    for (int i = 0; i < p->n; i++)
        if (p->c[i].op == op && p->c[i].phase == ph && p->c[i].purpose == what) return &p->c[i];
    return NULL;
}

Test(ep, the_view_should_hold_the_ranks_share_of_every_blocks_experts) {
    ModelSpec m = load_model(MIXTRAL_WIDE), v;
    cr_assert_eq(plan_ep_view(&m, 2, &v), 0);
    double experts = 0;
    for (int i = 0; i < m.n_layers; i++) experts += (double)m.layers[i].expert_params;
    cr_expect_eq(experts, 2 * (4.0 * 2048 * 64 + 4.0 * 64 * 1024), "two blocks of 4 experts (gate_up, down)");
    cr_expect_eq((double)plan_model_params(&v), (double)plan_model_params(&m) - experts / 2);
    cr_expect_eq(v.moe.ep, 2);
    cr_expect_eq(v.moe.n_experts, 4, "the router still scores every expert");
    /* a token computes as much with or without expert parallel: top_k experts' worth */
    cr_expect_eq((double)plan_model_active_params(&v), (double)plan_model_active_params(&m));
    plan_model_free(&v);
    plan_model_free(&m);
}

/* Measured (bench/torch/results/mixtral-wide_..._ep2.json): every rank holds 1,726,272 B of
   parameters, as many of gradients, 3,452,628 B of optimizer state (AdamW's m, v and step
   scalars): the experts' shard over 2 expert data-parallel ranks of 2 experts is a quarter of
   the experts, as FSDP over all 4 ranks would give, the rest a quarter of everything else. */
Test(ep, model_states_should_be_the_measured_ones_of_the_two_fsdp_groups) {
    TrainSpec t;
    ClusterSpec c;
    ModelSpec m = mixtral(&t, &c, 2, NULL);
    MemResult r;
    cr_assert_eq(plan_memory(&m, &t, &c, STRAT_FSDP_FULL, &r), 0);
    cr_expect_eq(r.ms_params, 1726272);
    cr_expect_eq(r.ms_grads, 1726272);
    cr_expect_eq(r.ms_optimizer + r.opt_host_bytes, 3452628);
    plan_model_free(&m);
}

/* Measured on rank 0 (the same run): forward 6 all-to-alls, 1,048,640 B (per MoE block the 4
   experts' token counts, 32 B, then 512 x 2 routed rows of 64 fp32 each way, 262,144 B); backward
   4 of 262,144 B; the experts gathered and reduce-scattered over 2 ranks, 1,572,864 B each
   (2 experts of 196,608 fp32). */
Test(ep, the_all_to_alls_and_the_expert_groups_collectives_should_be_the_measured_ones) {
    TrainSpec t;
    ClusterSpec c;
    CommPlan p;
    ModelSpec m = mixtral(&t, &c, 2, &p);
    const PlanColl *n = row(&p, COLL_ALL_TO_ALL, PHASE_FORWARD, PURPOSE_EP_COUNTS);
    const PlanColl *f = row(&p, COLL_ALL_TO_ALL, PHASE_FORWARD, PURPOSE_EP_TOKENS);
    const PlanColl *b = row(&p, COLL_ALL_TO_ALL, PHASE_BACKWARD, PURPOSE_EP_TOKENS);
    const PlanColl *g = row(&p, COLL_ALL_GATHER, PHASE_FORWARD, PURPOSE_EXPERT_PARAMS);
    const PlanColl *rs = row(&p, COLL_REDUCE_SCATTER, PHASE_BACKWARD, PURPOSE_EXPERT_GRADS);
    cr_assert(n && f && b && g && rs);
    cr_expect_eq(n->count, 2);
    cr_expect_eq(n->payload_bytes, 64);
    cr_expect_eq(f->count, 4);
    cr_expect_eq(f->payload_bytes, 4 * 262144.0);
    cr_expect_eq(b->count, 4);
    cr_expect_eq(b->payload_bytes, 4 * 262144.0);
    cr_expect_eq(f->group, 2);
    cr_expect_eq(g->group, 2, "the expert data-parallel group: 4 ranks / ep 2");
    cr_expect_eq(g->payload_bytes, 2 * 1572864.0);
    cr_expect_eq(rs->payload_bytes, 2 * 1572864.0);
    cr_expect(fabs(f->wire_bytes - f->payload_bytes / 2) < 1e-6, "all-to-all: (n-1)/n of the send buffer leaves");
    plan_model_free(&m);
}

/* With ep = the data-parallel ranks each expert lives on one rank: nothing is gathered or
   reduced over its group (measured: ep 4 on 4 ranks, no experts' collectives). */
Test(ep, experts_on_one_rank_each_should_have_no_gathers_or_reductions) {
    TrainSpec t;
    ClusterSpec c;
    CommPlan p;
    ModelSpec m = mixtral(&t, &c, 4, &p);
    cr_expect_null(row(&p, COLL_ALL_GATHER, PHASE_FORWARD, PURPOSE_EXPERT_PARAMS));
    cr_expect_null(row(&p, COLL_REDUCE_SCATTER, PHASE_BACKWARD, PURPOSE_EXPERT_GRADS));
    cr_expect_not_null(row(&p, COLL_ALL_TO_ALL, PHASE_FORWARD, PURPOSE_EP_TOKENS));
    plan_model_free(&m);
}

/* The measured peak (55,819,932 B, in the last block's experts' backward) within 3 %, and below
   the plan without expert parallel (61,099,164 B measured: every rank gathered all 4 experts). */
Test(ep, the_peak_should_be_the_measured_one_and_below_the_plan_without_it) {
    TrainSpec t;
    ClusterSpec c;
    ModelSpec m = mixtral(&t, &c, 2, NULL);
    MemResult with, without;
    plan_memory(&m, &t, &c, STRAT_FSDP_FULL, &with);
    t.ep = 1;
    plan_memory(&m, &t, &c, STRAT_FSDP_FULL, &without);
    cr_expect(fabs(with.peak - 55819932.0) / 55819932.0 < 0.03, "peak %.0f", with.peak);
    cr_expect(with.peak < without.peak);
    cr_expect_eq(with.peak_phase, PHASE_BACKWARD);
    plan_model_free(&m);
}

/* Under --moe-imbalance F the busiest rank receives F times its share of rows (at most every
   rank's, ep times): its combine sends F times the rows back. */
Test(ep, an_imbalance_should_scale_the_busiest_ranks_rows_up_to_every_ranks) {
    TrainSpec t;
    ClusterSpec c;
    CommPlan p1, p2;
    ModelSpec m = mixtral(&t, &c, 2, &p1);
    t.moe_imbalance = 2;
    plan_comm(&m, &t, &c, STRAT_FSDP_FULL, &p2);
    double a = row(&p1, COLL_ALL_TO_ALL, PHASE_FORWARD, PURPOSE_EP_TOKENS)->payload_bytes;
    double b = row(&p2, COLL_ALL_TO_ALL, PHASE_FORWARD, PURPOSE_EP_TOKENS)->payload_bytes;
    cr_expect_eq(b, a * 1.5, "dispatch T k, combine 2 T k: %.0f vs %.0f", b, a);
    cr_expect_eq(plan_ep_rows_per_token(&m, &t), m.moe.top_k, "the model as given has no ep share");
    MemResult r1, r2;
    t.moe_imbalance = 1;
    plan_memory(&m, &t, &c, STRAT_FSDP_FULL, &r1);
    t.moe_imbalance = 2;
    plan_memory(&m, &t, &c, STRAT_FSDP_FULL, &r2);
    cr_expect(r2.peak > r1.peak);
    plan_model_free(&m);
}

/* The all-to-alls are on the critical path (the experts wait for the tokens): the simulated step
   runs every one the table counts, and a larger ep group over two nodes costs more time. */
Test(ep, the_step_should_wait_for_the_all_to_alls) {
    ModelSpec m = zoo("llama2-7b");   /* dense: refused below */
    ModelSpec q = load_model("tests/data/hf/qwen3-30b-a3b.json");
    TrainSpec t;
    plan_train_defaults(&t);
    t.seq = 4096;
    t.act_ckpt = CKPT_FULL;
    ClusterSpec c;
    cluster(&c, 16, 8);
    c.gpu = *plan_gpu_by_name("h100-80gb");
    SimResult s8, s16;
    t.ep = 8;
    cr_assert_eq(plan_sim(&q, &t, &c, STRAT_FSDP_FULL, 0, &s8), 0);
    t.ep = 16;
    cr_assert_eq(plan_sim(&q, &t, &c, STRAT_FSDP_FULL, 0, &s16), 0);
    cr_expect(s8.coll_count[PURPOSE_EP_TOKENS][COLL_ALL_TO_ALL] == 48 * 4 + 48 * 2, "48 MoE blocks, recomputed");
    cr_expect(s16.step_s > s8.step_s, "ep 16 crosses the nodes: %.3f s vs %.3f s", s16.step_s, s8.step_s);
    Step st;
    t.ep = 2;
    cr_expect_eq(plan_step_build(&st, &m, &t, &c, STRAT_FSDP_FULL), PLAN_ERR_REFUSED);
    cr_expect(strstr(st.fail_why, "no mixture-of-experts blocks") != NULL, "%s", st.fail_why);
    plan_step_free(&st);
    plan_model_free(&q);
    plan_model_free(&m);
}

Test(ep, a_setup_it_does_not_apply_to_should_be_refused_with_the_valid_values) {
    ModelSpec m = load_model(MIXTRAL_WIDE), l4 = load_model("tests/data/hf/llama-4-scout-17b-16e-text.json");
    TrainSpec t;
    ClusterSpec c;
    harness_setup(&t, &c, 2);
    char msg[320];
    cr_expect_neq(plan_ep_check(&m, &t, &c, STRAT_DDP, msg, sizeof msg), 0);
    cr_expect(strstr(msg, "--ep 2 with --strategy ddp") && strstr(msg, "fsdp-full"), "%s", msg);
    t.ep = 3;
    cr_expect_neq(plan_ep_check(&m, &t, &c, STRAT_FSDP_FULL, msg, sizeof msg), 0);
    cr_expect(strstr(msg, "must divide") != NULL, "%s", msg);
    t.ep = 8;   /* 4 experts */
    cr_expect_neq(plan_ep_check(&m, &t, &c, STRAT_FSDP_FULL, msg, sizeof msg), 0);
    cr_expect(strstr(msg, "4 experts") != NULL, "%s", msg);
    t.ep = 2;
    cluster(&c, 8, 8);
    cr_expect_neq(plan_ep_check(&l4, &t, &c, STRAT_FSDP_FULL, msg, sizeof msg), 0);
    cr_expect(strstr(msg, "every token") != NULL, "%s", msg);
    plan_model_free(&l4);
    plan_model_free(&m);
}

/* NCCL's all-to-all is grouped point-to-point sends: inside a node at the links' rate, across
   nodes bound by the NIC share of the blocks that leave the node. */
Test(ep, an_all_to_all_across_nodes_should_cost_more_than_inside_one) {
    ClusterSpec c;
    cluster(&c, 16, 8);
    c.gpu = *plan_gpu_by_name("h100-80gb");
    double in = plan_coll_seconds(&c, COLL_ALL_TO_ALL, 1e9, 8, 0);
    double across = plan_coll_seconds(&c, COLL_ALL_TO_ALL, 1e9, 16, 1);
    cr_expect(across > 2 * in, "%.4f s vs %.4f s", across, in);
    cr_expect_eq(coll_bus_factor(COLL_ALL_TO_ALL, 8), 7.0 / 8);
    cr_expect_str_eq(coll_name(COLL_ALL_TO_ALL), "all_to_all");
}

Test(ep, auto_should_search_the_degree_and_say_which_it_took) {
    ModelSpec q = load_model("tests/data/hf/qwen3-30b-a3b.json");
    TrainSpec t;
    plan_train_defaults(&t);
    t.seq = 4096;
    t.ep = -1;
    ClusterSpec c;
    cluster(&c, 16, 8);
    c.gpu = *plan_gpu_by_name("h100-80gb");
    AutoSpec a;
    plan_auto_defaults(&a);
    AutoResult r;
    cr_assert_eq(plan_auto_dims(&q, &t, &c, &a, &r), 0);
    cr_expect(r.found);
    cr_expect(strstr(r.explain, "expert parallel searched") != NULL, "%s", r.explain);
    cr_expect(strstr(r.explain, "ep 8 (16 experts per rank)") != NULL, "%s", r.explain);
    cr_expect(r.train.ep >= 1);
    plan_model_free(&q);
}

/* torchtitan's op-level checkpointing of DeepSeek's blocks under expert parallel (measured:
   deepseek-v3-tiny_fsdp-full_fp32_op_eager_r4_b4_s128_ep2, peak 12,061,112 B): every second
   matmul's output, the attention's two bmm outputs, the router's three topk and the two
   functional all-to-alls' outputs are kept, so the recomputation runs only the tokens-per-expert
   exchange (a c10d call) again. Mixtral's router renormalises its saved top-k values in place,
   which torch's selective checkpointing refuses: refused. */
Test(ep, op_checkpointing_of_deepseek_blocks_should_save_the_all_to_alls_outputs) {
    ModelSpec m = load_model("bench/torch/configs/deepseek-v3-tiny.json");
    TrainSpec t;
    ClusterSpec c;
    harness_setup(&t, &c, 2);
    t.act_ckpt = CKPT_OP;
    cr_assert_null(plan_act_ckpt_unsupported(&m, &t));
    MemResult r;
    plan_memory(&m, &t, &c, STRAT_FSDP_FULL, &r);
    cr_expect(fabs(r.peak - 12061112.0) / 12061112.0 < 0.03, "peak %.0f", r.peak);
    CommPlan p;
    plan_comm(&m, &t, &c, STRAT_FSDP_FULL, &p);
    cr_expect_eq(row(&p, COLL_ALL_TO_ALL, PHASE_BACKWARD, PURPOSE_EP_TOKENS)->payload_bytes, 2 * 262144.0,
                 "only the two gradients: the tokens were kept");
    cr_expect_eq(row(&p, COLL_ALL_TO_ALL, PHASE_BACKWARD, PURPOSE_EP_COUNTS)->count, 1, "the counts exchange again");
    ModelSpec x = load_model(MIXTRAL_WIDE);
    const char *why = plan_act_ckpt_unsupported(&x, &t);
    cr_expect(why && strstr(why, "in-place"), "%s", why ? why : "(allowed)");
    plan_model_free(&x);
    plan_model_free(&m);
}
