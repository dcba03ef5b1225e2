/* test_plan_pp.c — pipeline parallelism (plan_pp.h, plan_rules_pp.c): the stages' layers, the
 * micro-batches each schedule keeps in flight, the refusals, the most loaded stage's model states
 * and in-flight activations, the send/recv and the bubble in the simulated step (closed forms;
 * the stage memory checked on CPU ranks for gpt2-mini: docs/formulas.md "Pipeline parallel"). */
#include <criterion/criterion.h>
#include <math.h>

#include "plan_comm.h"
#include "plan_memory.h"
#include "plan_dim_pp.h"
#include "plan_sim.h"
#include "plan_step.h"
#include "plan_dim_tp.h"
#include "test_plan.h"

static void train(TrainSpec *t, int pp, int M, PpSchedule sched) {
    plan_train_defaults(t);
    t->precision = PREC_BF16;     /* 2-byte params, grads and activations */
    t->seq = 1024;
    t->pp = pp;
    t->grad_accum = M;
    t->pp_schedule = sched;
}

static int count_kind(const ModelSpec *m, LayerKind k) {
    int n = 0;
    for (int i = 0; i < m->n_layers; i++) n += m->layers[i].kind == k;
    return n;
}

Test(pp, stages_should_split_the_blocks_evenly_with_the_embedding_first_and_the_head_last) {
    ModelSpec m = zoo("llama2-7b"), v[4];
    double sum = 0;
    for (int s = 0; s < 4; s++) {
        cr_assert_eq(plan_pp_stage_view(&m, 4, s, &v[s]), 0);
        cr_expect_eq(count_kind(&v[s], LAYER_BLOCK), 8);
        cr_expect_eq(count_kind(&v[s], LAYER_EMBED), s == 0);
        cr_expect_eq(count_kind(&v[s], LAYER_HEAD), s == 3);
        cr_expect_eq(v[s].headless, s != 3, "only the last stage has the loss");
        sum += (double)plan_model_params(&v[s]);
        plan_model_free(&v[s]);
    }
    cr_expect_eq(sum, (double)plan_model_params(&m), "an untied model's parameters, each on one stage");
    plan_model_free(&m);
}

Test(pp, a_tied_models_last_stage_should_hold_its_own_copy_of_the_head_weight) {
    ModelSpec m = zoo("gpt2"), a, b;
    cr_assert_eq(plan_pp_stage_view(&m, 2, 0, &a), 0);
    cr_assert_eq(plan_pp_stage_view(&m, 2, 1, &b), 0);
    double vh = (double)m.vocab * (double)m.d_model;
    cr_expect_eq((double)plan_model_params(&a) + (double)plan_model_params(&b), (double)plan_model_params(&m) + vh);
    plan_model_free(&a);
    plan_model_free(&b);
    plan_model_free(&m);
}

Test(pp, in_flight_should_follow_1f1b_warmup_and_gpipe_all_microbatches) {
    TrainSpec t;
    train(&t, 4, 8, PP_1F1B);
    int want[4] = {4, 3, 2, 1};   /* Schedule1F1B warmup_chunks = min(M, pp - stage) */
    for (int s = 0; s < 4; s++) cr_expect_eq(plan_pp_in_flight(&t, s), want[s]);
    t.grad_accum = 2;
    t.pp = 2;
    cr_expect_eq(plan_pp_in_flight(&t, 0), 2);
    train(&t, 4, 8, PP_GPIPE);
    for (int s = 0; s < 4; s++) cr_expect_eq(plan_pp_in_flight(&t, s), 8);
}

Test(pp, should_refuse_what_it_does_not_plan_with_one_sentence) {
    ModelSpec m = zoo("llama2-7b");
    TrainSpec t;
    ClusterSpec c;
    char msg[320];
    cluster(&c, 8, 8);
    train(&t, 4, 4, PP_1F1B);
    cr_expect_eq(plan_pp_check(&m, &t, &c, STRAT_DDP, msg, sizeof msg), 0, "%s", msg);
    cr_expect_eq(plan_pp_check(&m, &t, &c, STRAT_FSDP_FULL, msg, sizeof msg), 0, "%s", msg);
    cr_expect_eq(plan_pp_check(&m, &t, &c, STRAT_ZERO1, msg, sizeof msg), 0, "%s", msg);
    cr_expect_eq(plan_pp_check(&m, &t, &c, STRAT_ZERO2, msg, sizeof msg), -1);
    cr_expect(strstr(msg, "ddp, zero1 and fsdp-full") && strstr(msg, "ZeRO-2 and ZeRO-3 are incompatible"), "%s", msg);
    t.grad_accum = 2;
    cr_expect_eq(plan_pp_check(&m, &t, &c, STRAT_DDP, msg, sizeof msg), -1, "1F1B needs M >= pp");
    t.pp_schedule = PP_GPIPE;
    cr_expect_eq(plan_pp_check(&m, &t, &c, STRAT_DDP, msg, sizeof msg), 0, "GPipe runs M < pp: %s", msg);
    train(&t, 3, 3, PP_1F1B);
    cluster(&c, 6, 6);
    cr_expect_eq(plan_pp_check(&m, &t, &c, STRAT_DDP, msg, sizeof msg), -1, "3 does not divide 32 blocks");
    cr_expect(strstr(msg, "32 blocks") != NULL, "%s", msg);
    train(&t, 4, 4, PP_1F1B);
    cluster(&c, 6, 6);
    cr_expect_eq(plan_pp_check(&m, &t, &c, STRAT_DDP, msg, sizeof msg), -1, "4 does not divide 6 GPUs");
    cluster(&c, 8, 8);
    t.offload = OFFLOAD_OPT;
    cr_expect_eq(plan_pp_check(&m, &t, &c, STRAT_DDP, msg, sizeof msg), -1);
    t.offload = OFFLOAD_NONE;
    t.ft.rank = 8;
    cr_expect_eq(plan_pp_check(&m, &t, &c, STRAT_DDP, msg, sizeof msg), -1);
    t.ft.rank = 0;
    t.impl = IMPL_ENGINE;
    cr_expect_eq(plan_pp_check(&m, &t, &c, STRAT_DDP, msg, sizeof msg), -1);
    plan_model_free(&m);
}

/* Bytes rule r allocates in st (its + events). */
static double allocated(const Step *st, RuleId r) {
    double b = 0;
    for (int e = 0; e < st->n_mem; e++)
        if (st->mem[e].rule == r && st->mem[e].bytes > 0) b += st->mem[e].bytes;
    return b;
}

Test(pp, stage_0_under_1f1b_should_hold_min_m_pp_microbatches_of_its_activations) {
    ModelSpec m = zoo("llama2-7b");
    TrainSpec t;
    ClusterSpec c;
    cluster(&c, 4, 4);
    train(&t, 4, 8, PP_1F1B);
    Step st;
    cr_assert_eq(plan_step_build(&st, &m, &t, &c, STRAT_DDP), 0);
    cr_expect_eq(st.view.stage, 0, "the embedding and 4 micro-batches outweigh the head and 1");
    cr_expect_eq(st.view.in_flight, 4);
    double one = allocated(&st, RULE_SAVED_ACTS);
    cr_expect(one > 0);
    cr_expect_eq(allocated(&st, RULE_PP_IN_FLIGHT), 3 * one, "3 other micro-batches beside the running one");
    plan_step_free(&st);
    plan_model_free(&m);
}

/* The model states of strategy sk on the stage the plan reports (llama2-7b, pp 4 on 8 GPUs, 1F1B,
   M = 4, at precision prec), and that stage's share of the model in v. */
static MemResult stage_states(ModelSpec *m, StrategyKind sk, PrecisionKind prec, ModelSpec *v) {
    TrainSpec t;
    ClusterSpec c;
    cluster(&c, 8, 8);
    train(&t, 4, 4, PP_1F1B);
    t.precision = prec;
    MemResult r;
    cr_assert_eq(plan_memory(m, &t, &c, sk, &r), 0);
    Step st;
    cr_assert_eq(plan_step_build(&st, m, &t, &c, sk), 0);
    int stage = st.view.stage;
    cr_expect_eq(st.view.dp.gpus, 2, "8 GPUs / pp 4");
    plan_step_free(&st);
    cr_assert(stage == 0 || stage == 3);
    cr_assert_eq(plan_pp_stage_view(m, 4, stage, v), 0);
    return r;
}

Test(pp, ddp_model_states_should_be_the_planned_stages_parameters) {
    ModelSpec m = zoo("llama2-7b"), v;
    TrainSpec t;
    ClusterSpec c;
    cluster(&c, 8, 8);
    train(&t, 4, 4, PP_1F1B);
    MemResult r = stage_states(&m, STRAT_DDP, t.precision, &v);
    cr_expect_eq(r.ms_params, 2 * (double)plan_model_params(&v), "bf16: 2 bytes per parameter of the stage");
    MemResult one;
    TrainSpec t1;
    train(&t1, 1, 1, PP_1F1B);
    cr_assert_eq(plan_memory(&m, &t1, &c, STRAT_DDP, &one), 0);
    cr_expect(r.ms_params < one.ms_params / 3, "a quarter of the blocks");
    plan_model_free(&v);
    plan_model_free(&m);
}

Test(pp, gpipe_should_never_hold_less_than_1f1b) {
    ModelSpec m = zoo("gpt2-medium");
    TrainSpec t;
    ClusterSpec c;
    cluster(&c, 4, 4);
    MemResult a, b;
    train(&t, 4, 16, PP_1F1B);
    cr_assert_eq(plan_memory(&m, &t, &c, STRAT_DDP, &a), 0);
    t.pp_schedule = PP_GPIPE;
    cr_assert_eq(plan_memory(&m, &t, &c, STRAT_DDP, &b), 0);
    cr_expect(b.term[TERM_ACTIVATIONS] > 3 * a.term[TERM_ACTIVATIONS], "16 micro-batches in flight against 4");
    plan_model_free(&m);
}

/* The bubble of equal ranks: pp - 1 slots of a micro-step, of one of V stages under the
   interleaved schedule: (pp - 1) / (V M + pp - 1) of the pipelined part (Narayanan et al. 2021
   §2.2, §2.2.2). */
static void expect_bubble(const ModelSpec *m, const TrainSpec *t, const ClusterSpec *c, double fraction) {
    SimResult s;
    cr_assert_eq(plan_sim(m, t, c, STRAT_DDP, 0, &s), 0);
    double pipe = s.fwd_s + s.bwd_s;
    cr_expect(s.pp_bubble_s > 0);
    cr_expect(fabs(s.pp_bubble_s / (pipe + s.pp_bubble_s) - fraction) < 1e-12, "bubble %.6f of the pipelined part, not %.6f",
              s.pp_bubble_s / (pipe + s.pp_bubble_s), fraction);
    cr_expect(s.step_s >= pipe + s.pp_bubble_s);
}

Test(pp, simulated_step_should_add_the_bubble_pp_minus_1_over_v_m_plus_pp_minus_1) {
    ModelSpec m = zoo("gpt2-medium");
    TrainSpec t;
    ClusterSpec c;
    cluster(&c, 4, 4);
    train(&t, 4, 8, PP_1F1B);
    expect_bubble(&m, &t, &c, 3.0 / 11.0);
    t.pp_schedule = PP_GPIPE;
    expect_bubble(&m, &t, &c, 3.0 / 11.0);
    t.pp_schedule = PP_INTERLEAVED;   /* 2 stages per rank */
    expect_bubble(&m, &t, &c, 3.0 / 19.0);
    plan_model_free(&m);
}

/* torchtitan's split (generate_llm_fqn_per_model_part): its docstring's example, 3 layers in 2
   stages with the embedding and the output as 2 layers each, gives 2 and 1; Llama 3 405B's 126
   layers in 16 stages with 1 and 1 give 7, 8 x 14, 7 (Llama 3 paper: "one fewer layer on the
   first and the last stage"). */
Test(pp, the_uneven_split_should_follow_torchtitans_weights) {
    int first[16], count[16];
    char msg[320];
    cr_assert_eq(plan_pp_split(3, 2, 2, 2, first, count, msg, sizeof msg), 0, "%s", msg);
    cr_expect(count[0] == 2 && count[1] == 1 && first[1] == 2);
    cr_assert_eq(plan_pp_split(126, 16, 1, 1, first, count, msg, sizeof msg), 0, "%s", msg);
    cr_expect_eq(count[0], 7);
    cr_expect_eq(count[15], 7);
    for (int k = 1; k < 15; k++) cr_expect_eq(count[k], 8);
    cr_expect_eq(first[15] + count[15], 126);
    cr_expect_eq(plan_pp_split(32, 4, 0, 0, first, count, msg, sizeof msg), 0);
    for (int k = 0; k < 4; k++) cr_expect(count[k] == 8 && first[k] == 8 * k, "no weights: the even split");
    cr_expect_eq(plan_pp_split(8, 4, 3, 0, first, count, msg, sizeof msg), -1, "3 exceeds 2 per stage");
    cr_expect(strstr(msg, "exceed") != NULL, "%s", msg);
    /* a rank view: llama2-7b in 4 stages with 2 and 2: 36 / 4 = 9, stage 0 and 3 hold 7 blocks */
    ModelSpec m = zoo("llama2-7b"), v;
    TrainSpec t;
    train(&t, 4, 4, PP_1F1B);
    t.pp_less_first = t.pp_less_last = 2;
    int layers[PLAN_PP_MAX_VIRTUAL];
    static const int blocks[4] = {7, 9, 9, 7};
    for (int r = 0; r < 4; r++) {
        cr_assert_eq(plan_pp_rank_view(&m, &t, r, &v, layers), 0);
        cr_expect_eq(count_kind(&v, LAYER_BLOCK), blocks[r]);
        cr_expect_eq(layers[0], v.n_layers, "one stage per rank");
        plan_model_free(&v);
    }
    plan_model_free(&m);
}

/* ScheduleInterleaved1F1B (torch/distributed/pipelining/schedules.py _get_warmup_ops): pp 4,
   V 2, M 8 gives 2 rounds of 4 micro-batches; rank r runs (V - 1) 4 + 2 (3 - r) warmup forwards
   and one more before its first backward, forward op j on its stage (j / 4) mod 2: rank 0 has 11
   done (7 of its first stage, 4 of its second), rank 3 has 5 (4 and 1). Rank r holds stages r and
   r + 4. */
Test(pp, interleaved_ranks_should_hold_their_warmup_forwards_of_each_stage) {
    TrainSpec t;
    train(&t, 4, 8, PP_INTERLEAVED);
    int n[PLAN_PP_MAX_VIRTUAL];
    cr_expect_eq(plan_pp_chunk_in_flight(&t, 0, n), 11);
    cr_expect(n[0] == 7 && n[1] == 4, "%d %d", n[0], n[1]);
    cr_expect_eq(plan_pp_chunk_in_flight(&t, 3, n), 5);
    cr_expect(n[0] == 4 && n[1] == 1, "%d %d", n[0], n[1]);
    ModelSpec m = zoo("llama2-7b"), v;
    int layers[PLAN_PP_MAX_VIRTUAL];
    cr_assert_eq(plan_pp_rank_view(&m, &t, 0, &v, layers), 0);
    cr_expect_eq(count_kind(&v, LAYER_BLOCK), 8, "stages 0 and 4, 4 blocks each");
    cr_expect_eq(layers[0], 5, "the embedding and blocks 0-3");
    cr_expect_eq(layers[1], 4, "blocks 16-19");
    cr_expect_eq(v.layers[5].unit - v.layers[4].unit, 1, "units renumbered in order");
    plan_model_free(&v);
    ClusterSpec c;
    cluster(&c, 4, 4);
    Step st;
    cr_assert_eq(plan_step_build(&st, &m, &t, &c, STRAT_DDP), 0);
    double one = allocated(&st, RULE_SAVED_ACTS);
    cr_expect_eq(st.view.stage, 0);
    /* 7 forwards of stage 0 (embedding + 4 blocks) and 4 of stage 4 (4 blocks) against one of each */
    cr_expect(allocated(&st, RULE_PP_IN_FLIGHT) > 4.3 * one && allocated(&st, RULE_PP_IN_FLIGHT) < 4.7 * one,
              "about (7 + 4) / 2 - 1 = 4.5 micro-batches beside the running one (the embedding's share aside): %.3g of %.3g",
              allocated(&st, RULE_PP_IN_FLIGHT), one);
    plan_step_free(&st);
    plan_model_free(&m);
}

Test(pp, each_boundary_should_send_b_s_h_each_way_per_microbatch) {
    ModelSpec m = zoo("llama2-7b");
    TrainSpec t;
    ClusterSpec c;
    cluster(&c, 4, 4);
    train(&t, 4, 8, PP_1F1B);
    CommPlan p;
    plan_comm(&m, &t, &c, STRAT_DDP, &p);
    Step st;
    cr_assert_eq(plan_step_build(&st, &m, &t, &c, STRAT_DDP), 0);
    int stage = st.view.stage;
    plan_step_free(&st);
    double bounds = stage == 0 || stage == 3 ? 1 : 2;
    double each = 1.0 * 1024 * 4096 * 2;   /* b s h, bf16 */
    int seen = 0;
    for (int i = 0; i < p.n; i++) {
        if (p.c[i].op != COLL_SEND_RECV) continue;
        seen++;
        cr_expect_eq(p.c[i].purpose, PURPOSE_PP_ACTS);
        cr_expect_eq(p.c[i].count, 8 * bounds, "one per micro-batch and boundary");
        cr_expect_eq(p.c[i].payload_bytes, 8 * bounds * each);
        cr_expect_eq(p.c[i].wire_bytes, p.c[i].payload_bytes, "the whole payload to one peer");
        cr_expect(p.c[i].phase == PHASE_FORWARD || p.c[i].phase == PHASE_BACKWARD);
    }
    cr_expect_eq(seen, 2, "forward and backward");
    plan_model_free(&m);
}

/* GPipe (and 1F1B with M <= pp - stage) runs every forward before the stage's first backward:
   the peak holds all M micro-batches and no accumulated gradient (measured on CPU ranks:
   gpt2-mini, 2 stages, docs/formulas.md "Pipeline parallel"); 1F1B's steady state holds both. */
Test(pp, the_first_backward_should_hold_every_microbatch_but_no_accumulated_gradient) {
    ModelSpec m = zoo("llama2-7b");
    TrainSpec t;
    ClusterSpec c;
    cluster(&c, 4, 4);
    Step st;
    train(&t, 4, 8, PP_GPIPE);
    cr_assert_eq(plan_step_build(&st, &m, &t, &c, STRAT_DDP), 0);
    cr_expect_eq(st.view.in_flight, 8);
    cr_expect_eq(allocated(&st, RULE_GRADS_KEPT) + allocated(&st, RULE_ACCUM_GRADS), 0);
    plan_step_free(&st);
    train(&t, 4, 8, PP_1F1B);
    cr_assert_eq(plan_step_build(&st, &m, &t, &c, STRAT_DDP), 0);
    cr_expect_eq(st.view.in_flight, 4);
    cr_expect(allocated(&st, RULE_GRADS_KEPT) + allocated(&st, RULE_ACCUM_GRADS) > 0,
              "the earlier micro-batches' gradients beside 4 in flight");
    plan_step_free(&st);
    plan_model_free(&m);
}

Test(pp, tp_times_pp_should_plan_a_stage_of_the_tp_share) {
    ModelSpec m = zoo("llama2-70b"), tv, sv;
    TrainSpec t;
    ClusterSpec c;
    cluster(&c, 16, 8);
    train(&t, 4, 8, PP_1F1B);
    t.tp = 2;
    MemResult r;
    cr_assert_eq(plan_memory(&m, &t, &c, STRAT_DDP, &r), 0);
    cr_expect(isfinite(r.peak) && r.peak > 0, "peak %g", r.peak);
    Step st;
    cr_assert_eq(plan_step_build(&st, &m, &t, &c, STRAT_DDP), 0);
    cr_expect_eq(st.view.stage, 0);
    cr_expect_eq(st.view.tp, 2, "the stage is of the tp share");
    plan_step_free(&st);
    cr_assert_eq(plan_tp_view(&m, 2, &tv), 0);
    cr_assert_eq(plan_pp_stage_view(&tv, 4, 0, &sv), 0);
    cr_expect_eq(r.ms_params, 2 * (double)plan_model_params(&sv), "stage 0 of the tp share, bf16");
    plan_model_free(&sv);
    plan_model_free(&tv);
    plan_model_free(&m);
}

/* torch's schedule.step() returns the last stage's outputs (return_outputs=True by default): each
   micro-batch's logits stay in stage.output_chunks after its backward until the next step, and
   are merged (torch.cat) at the end. Measured on CPU ranks (gpt2-mini, fp32, 2 stages, 1F1B,
   M = 4, the last stage with 3 blocks and the head): return_outputs on - off = 1,572,864 B =
   3 x (128 x 1024 x 4) on the last rank, nothing on rank 0; GPipe (all 4 in flight at the
   peak): 0 (docs/formulas.md "Pipeline parallel"). */
static double last_stage_peak(PpSchedule sched, int drop) {
    ModelSpec m = zoo("gpt2-mini");
    TrainSpec t;
    ClusterSpec c;
    cluster(&c, 2, 2);
    train(&t, 2, 4, sched);
    t.precision = PREC_FP32;
    t.seq = 128;
    t.dropout = 0;
    t.pp_less_first = 2;
    t.pp_drop_outputs = drop;
    Step st;
    cr_assert_eq(plan_step_build(&st, &m, &t, &c, STRAT_DDP), 0);
    cr_expect_eq(st.view.stage, 1, "the last stage: 3 blocks and the head");
    double held = allocated(&st, RULE_PP_OUTPUTS);
    cr_expect_eq(held > 0, !drop, "return_outputs off keeps no outputs");
    plan_step_free(&st);
    MemResult r;
    cr_assert_eq(plan_memory(&m, &t, &c, STRAT_DDP, &r), 0);
    plan_model_free(&m);
    return r.peak - r.term[TERM_OVERHEAD];   /* the tensors' peak */
}

Test(pp, the_last_stage_should_keep_the_outputs_of_the_microbatches_done_unless_return_outputs_is_off) {
    double O = 128.0 * 1024 * 4;   /* gpt2-mini's fp32 logits of one micro-batch (b 1, s 128, V 1024) */
    double on = last_stage_peak(PP_1F1B, 0), off = last_stage_peak(PP_1F1B, 1);
    cr_expect_eq(on - off, 3 * O, "1F1B: 3 outputs done at the last backward (%.0f - %.0f)", on, off);
    cr_expect_eq(last_stage_peak(PP_GPIPE, 0) - last_stage_peak(PP_GPIPE, 1), 0, "GPipe: every output still in flight");
}

/* ZeRO-1 beside the pipeline (Megatron-DeepSpeed's setup; DeepSpeed's PipelineEngine takes stage 1
   only): the stage's parameters on every rank, their optimizer states over the gpus / pp
   data-parallel ranks. llama2-7b, pp 4 on 8 GPUs, mixed-bf16: 2 data-parallel ranks, so the fp32
   master, m and v (12 B) of the stage's parameters halve. */
Test(pp, zero1_should_shard_the_stages_optimizer_states_over_the_data_parallel_ranks) {
    ModelSpec m = zoo("llama2-7b"), v;
    MemResult r = stage_states(&m, STRAT_ZERO1, PREC_MIXED_BF16, &v);
    double local = (double)plan_model_params(&v);
    cr_expect_eq(r.ms_params, 2 * local);
    cr_expect(fabs(r.ms_optimizer - 12 * local / 2) <= 12 * 2, "%.0f vs %.0f (the partition padded to the group)",
              r.ms_optimizer, 12 * local / 2);
    plan_model_free(&v);
    plan_model_free(&m);
}
