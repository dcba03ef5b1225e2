/* test_plan_tp.c — tensor and sequence parallelism (plan_tp.h, plan_rules_tp.c): one rank's share
 * of the model, the model states, the TP collectives with their counts and payloads, SP's
 * activations, the refusals, and the TP collectives on the simulated step's critical path. */
#include <cjson/cJSON.h>
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "plan_activ.h"
#include "plan_auto.h"
#include "plan_comm.h"
#include "plan_memory.h"
#include "plan_sim.h"
#include "plan_dim_ep.h"
#include "plan_dim_tp.h"
#include "plan_load.h"
#include "test_plan.h"

static void train(TrainSpec *t, int tp, int sp) {
    plan_train_defaults(t);
    t->precision = PREC_BF16;     /* 2-byte params, grads and activations */
    t->seq = 1024;
    t->tp = tp;
    t->sp = sp;
}

/* The collective row of op, phase and purpose (NULL if none). */
static const PlanColl *row(const CommPlan *p, CollKind op, PhaseKind ph, CollPurpose what) {
    for (int i = 0; i < p->n; i++)
        if (p->c[i].op == op && p->c[i].phase == ph && p->c[i].purpose == what) return &p->c[i];
    return NULL;
}

/* Elements every rank keeps whole: a block's two RMSNorm weights, the final norm. */
static double llama_replicated(const ModelSpec *m) { return (2.0 * m->n_layer + 1) * (double)m->d_model; }

Test(tp, view_should_split_every_linear_and_the_vocab_but_keep_the_norms) {
    ModelSpec m = zoo("llama2-70b"), v;
    cr_assert_eq(plan_tp_view(&m, 8, &v), 0);
    double total = (double)plan_model_params(&m), rep = llama_replicated(&m);
    cr_expect_eq((double)plan_model_params(&v), (total - rep) / 8 + rep);
    cr_expect_eq(v.n_head, 8);
    cr_expect_eq(v.n_kv_head, 1);
    cr_expect_eq(v.d_ff, 28672 / 8);
    cr_expect_eq(v.vocab, m.vocab, "the logits are gathered: the loss sees all of V");
    plan_model_free(&v);
    plan_model_free(&m);
}

Test(tp, gpt2_should_keep_its_tied_embedding_and_biases_of_h_whole) {
    ModelSpec m = zoo("gpt2"), v;
    cr_assert_eq(plan_tp_view(&m, 4, &v), 0);
    double h = 768, L = 12;
    /* per block replicated: ln_1 (w, b), ln_2 (w, b), the two c_proj biases */
    double blocks = 0;
    for (int i = 0; i < m.n_layers; i++)
        if (m.layers[i].kind == LAYER_BLOCK) blocks += (double)m.layers[i].params;
    double rep = 6 * h * L, root = (double)plan_model_params(&m) - blocks;
    cr_expect_eq((double)plan_model_params(&v), root + (blocks - rep) / 4 + rep);
    plan_model_free(&v);
    plan_model_free(&m);
}

Test(tp, ddp_model_states_should_be_the_rank_share_with_the_embedding_gradient_whole) {
    ModelSpec m = zoo("llama2-7b"), v;
    TrainSpec t;
    ClusterSpec c;
    train(&t, 2, 0);
    cluster(&c, 2, 2);
    MemResult r;
    plan_memory(&m, &t, &c, STRAT_DDP, &r);
    cr_assert_eq(plan_tp_view(&m, 2, &v), 0);
    double local = (double)plan_model_params(&v), emb = (double)m.vocab * (double)m.d_model;
    cr_expect_eq(r.ms_params, 2 * local);
    cr_expect_eq(r.ms_grads, 2 * local + 2 * emb / 2, "RowwiseParallel's embedding gradient comes back V x h");
    /* tp 2 x fsdp 2 on 4 GPUs: the dp dimension shards the rank's share */
    cluster(&c, 4, 4);
    MemResult f;
    plan_memory(&m, &t, &c, STRAT_FSDP_FULL, &f);
    cr_expect(fabs(f.ms_params - local) < 1e4 * 2, "half the tp share on each of 2 dp ranks (padding aside)");
    plan_model_free(&v);
    plan_model_free(&m);
}

Test(tp, should_all_reduce_twice_per_block_each_way_without_sp) {
    ModelSpec m = zoo("llama2-7b");
    TrainSpec t;
    ClusterSpec c;
    train(&t, 4, 0);
    cluster(&c, 8, 8);
    CommPlan p;
    plan_comm(&m, &t, &c, STRAT_DDP, &p);
    double bsh = 1.0 * 1024 * 4096 * 2, L = m.n_layer;
    const PlanColl *f = row(&p, COLL_ALL_REDUCE, PHASE_FORWARD, PURPOSE_TP_ACTS);
    const PlanColl *b = row(&p, COLL_ALL_REDUCE, PHASE_BACKWARD, PURPOSE_TP_ACTS);
    const PlanColl *lg = row(&p, COLL_ALL_GATHER, PHASE_FORWARD, PURPOSE_TP_LOGITS);
    cr_assert(f && b && lg);
    cr_expect_eq(f->count, 2 * L + 1, "o and down per block, the embedding's partial rows");
    cr_expect_eq(f->payload_bytes, (2 * L + 1) * bsh);
    cr_expect_eq(b->count, 2 * L + 1, "the column inputs' gradients per block, the head's input");
    cr_expect_eq(f->group, 4);
    cr_expect_eq(lg->payload_bytes, 1024.0 * 32000 * 2);
    cr_expect_null(row(&p, COLL_REDUCE_SCATTER, PHASE_FORWARD, PURPOSE_TP_ACTS));
    /* the data-parallel all-reduce runs on gpus / tp = 2 ranks */
    const PlanColl *g = row(&p, COLL_ALL_REDUCE, PHASE_BACKWARD, PURPOSE_GRAD_BUCKETS);
    cr_assert(g);
    cr_expect_eq(g->group, 2);
    plan_model_free(&m);
}

Test(tp, sp_should_trade_each_all_reduce_for_a_gather_and_a_scatter) {
    ModelSpec m = zoo("llama2-7b");
    TrainSpec t;
    ClusterSpec c;
    train(&t, 2, 1);
    cluster(&c, 2, 2);
    CommPlan p;
    plan_comm(&m, &t, &c, STRAT_DDP, &p);
    double bsh = 1.0 * 1024 * 4096 * 2, L = m.n_layer;
    const PlanColl *rs = row(&p, COLL_REDUCE_SCATTER, PHASE_FORWARD, PURPOSE_TP_ACTS);
    const PlanColl *ag = row(&p, COLL_ALL_GATHER, PHASE_FORWARD, PURPOSE_TP_ACTS);
    const PlanColl *agb = row(&p, COLL_ALL_GATHER, PHASE_BACKWARD, PURPOSE_TP_ACTS);
    const PlanColl *norms = row(&p, COLL_ALL_REDUCE, PHASE_STEP, PURPOSE_TP_REPLICA_GRADS);
    cr_assert(rs && ag && agb && norms);
    cr_expect_eq(rs->payload_bytes, (2 * L + 1) * bsh);
    cr_expect_eq(ag->count, 2 * L + 1, "attention and MLP inputs, the head's input");
    cr_expect_eq(agb->count, 2 * L + 1, "backward's gathers: per block, the embedding's");
    cr_expect_eq(norms->count, 3 * (2 * L + 1), "pure TP: foreach AdamW reduces each partial norm gradient 3 times");
    cr_expect_null(row(&p, COLL_ALL_REDUCE, PHASE_FORWARD, PURPOSE_TP_ACTS));
    plan_model_free(&m);
}

Test(tp, sp_should_shard_the_norms_activations) {
    ModelSpec m = zoo("llama2-7b");
    TrainSpec t;
    ClusterSpec c;
    cluster(&c, 8, 8);
    c.gpu.mem_bytes = 1e15;
    MemResult off, on, none;
    train(&t, 1, 0);
    t.micro_batch = 16;    /* activations dominate: the peak is in forward/backward */
    plan_memory(&m, &t, &c, STRAT_FSDP_FULL, &none);
    train(&t, 8, 0);
    t.micro_batch = 16;
    plan_memory(&m, &t, &c, STRAT_FSDP_FULL, &off);
    train(&t, 8, 1);
    t.micro_batch = 16;
    plan_memory(&m, &t, &c, STRAT_FSDP_FULL, &on);
    cr_expect_lt(off.term[TERM_ACTIVATIONS], none.term[TERM_ACTIVATIONS], "heads and MLP split");
    cr_expect_lt(on.term[TERM_ACTIVATIONS], off.term[TERM_ACTIVATIONS], "norms on 1/tp of the sequence");
    plan_model_free(&m);
}

Test(tp, should_refuse_what_it_does_not_plan) {
    ModelSpec m = zoo("gpt2");
    TrainSpec t;
    ClusterSpec c;
    char msg[320];
    cluster(&c, 16, 8);
    train(&t, 2, 0);
    cr_expect_neq(plan_tp_check(&m, &t, &c, STRAT_ZERO3, msg, sizeof msg), 0);
    cr_expect(strstr(msg, "--strategy zero3: tensor parallel is planned with ddp, zero1, zero2 and fsdp-full") != NULL,
              "%s", msg);
    cr_expect_neq(plan_tp_check(&m, &t, &c, STRAT_FSDP_GRAD_OP, msg, sizeof msg), 0);
    cr_expect(strstr(msg, "--strategy fsdp-grad-op") != NULL && strchr(msg, '\n') == NULL, "%s", msg);
    cr_expect_neq(plan_tp_check(&m, &t, &c, STRAT_FSDP_HYBRID, msg, sizeof msg), 0);
    cr_expect_eq(plan_tp_check(&m, &t, &c, STRAT_ZERO1, msg, sizeof msg), 0, "%s", msg);
    cr_expect_eq(plan_tp_check(&m, &t, &c, STRAT_ZERO2, msg, sizeof msg), 0, "%s", msg);
    cr_expect_eq(plan_tp_check(&m, &t, &c, STRAT_FSDP_FULL, msg, sizeof msg), 0, "%s", msg);
    train(&t, 8, 0);   /* 12 heads */
    cr_expect_neq(plan_tp_check(&m, &t, &c, STRAT_DDP, msg, sizeof msg), 0);
    cr_expect(strstr(msg, "heads (12)") != NULL, "%s", msg);
    train(&t, 3, 0);   /* divides the heads, not the 8 GPUs per node */
    cr_expect_neq(plan_tp_check(&m, &t, &c, STRAT_DDP, msg, sizeof msg), 0);
    cr_expect(strstr(msg, "GPUs per node") != NULL, "%s", msg);
    train(&t, 1, 1);
    cr_expect_neq(plan_tp_check(&m, &t, &c, STRAT_DDP, msg, sizeof msg), 0, "--sp without --tp");
    plan_model_free(&m);
}

/* Loss parallel (torch's loss_parallel(), torchtitan's default): the logits stay vocab-sharded;
   the loss all-reduces three fp32 rows of b x s (the rows' max, their sums of exps, the target's
   logit) where the gathered plan all-gathers b x s x V (measured on gloo ranks:
   bench/torch/results/llama-mini_*_tp2*_lp.json). */
Test(tp, loss_parallel_should_all_reduce_three_rows_instead_of_gathering_the_logits) {
    ModelSpec m = zoo("llama2-7b");
    TrainSpec t;
    ClusterSpec c;
    train(&t, 4, 1);
    t.loss_parallel = 1;
    cluster(&c, 8, 8);
    CommPlan p;
    plan_comm(&m, &t, &c, STRAT_DDP, &p);
    const PlanColl *lp = row(&p, COLL_ALL_REDUCE, PHASE_FORWARD, PURPOSE_TP_LOGITS);
    cr_assert(lp);
    cr_expect_eq(lp->count, 3);
    cr_expect_eq(lp->payload_bytes, 3 * 1024.0 * 4, "one fp32 per token each, whatever the logits' dtype");
    cr_expect_eq(lp->group, 4);
    cr_expect_null(row(&p, COLL_ALL_GATHER, PHASE_FORWARD, PURPOSE_TP_LOGITS), "no logits gathered");
    plan_model_free(&m);
}

/* The rank's logits, log-softmax output and loss gradients are its vocab shard's. Measured on 2
   gloo ranks (bench/torch/results/llama-mini_ddp_fp32_none_eager_r2_b2_s128_tp2_lp.json, torch
   2.15): the peak is the loss's backward, its temporaries loss parallel's three fp32 shards of
   b x s x V/tp (the handler's zeroed grad_input, exp(x), their sum: aten::empty_strided,
   aten::exp, aten::add of 524,288 B each), the step's peak 16,687,184 B. */
Test(tp, loss_parallel_should_hold_the_ranks_vocab_shard_of_the_loss) {
    ModelSpec m = load_model("bench/torch/configs/llama-mini.json");
    TrainSpec t;
    ClusterSpec c;
    train(&t, 2, 0);
    t.precision = PREC_FP32;
    t.attn = ATTN_EAGER;
    t.autocast_cpu = 1;
    t.loop_trainer = 1;
    t.micro_batch = 2;
    t.seq = 128;
    cluster(&c, 2, 2);
    c.cuda_context = c.nccl_per_comm = 0;
    c.alloc_margin = 0;
    c.alloc_model = 0;
    c.gpu.cublas_ws_bytes = 0;
    c.gpu.mem_bytes = 1e18;
    MemResult off, on;
    plan_memory(&m, &t, &c, STRAT_DDP, &off);
    t.loss_parallel = 1;
    plan_memory(&m, &t, &c, STRAT_DDP, &on);
    double shard = 2.0 * 128 * (1024 / 2) * 4;
    cr_expect_eq(on.term[TERM_TRANSIENT], 3 * shard, "%.0f", on.term[TERM_TRANSIENT]);
    cr_expect_lt(fabs(on.peak - 16687184) / on.peak, 0.03, "%.0f", on.peak);
    cr_expect_lt(on.peak, off.peak, "the whole-vocabulary loss of the gathered logits is larger");
    plan_model_free(&m);
}

Test(tp, loss_parallel_should_be_refused_without_vocab_sharded_logits) {
    ModelSpec g = zoo("gpt2"), m = zoo("llama2-7b");
    TrainSpec t;
    ClusterSpec c;
    char msg[320];
    cluster(&c, 8, 8);
    train(&t, 1, 0);
    t.loss_parallel = 1;
    cr_expect_neq(plan_tp_check(&m, &t, &c, STRAT_DDP, msg, sizeof msg), 0);
    cr_expect(strstr(msg, "needs --tp 2") != NULL, "%s", msg);
    train(&t, 2, 0);
    t.loss_parallel = 1;
    cr_expect_eq(plan_tp_check(&m, &t, &c, STRAT_DDP, msg, sizeof msg), 0, "%s", msg);
    cr_expect_neq(plan_tp_check(&g, &t, &c, STRAT_DDP, msg, sizeof msg), 0, "GPT-2's tied head stays replicated");
    cr_expect(strstr(msg, "tied embedding") != NULL, "%s", msg);
    plan_model_free(&g);
    plan_model_free(&m);
}

Test(tp, tp_collectives_should_sit_on_the_critical_path) {
    ModelSpec m = zoo("llama2-7b");
    TrainSpec t;
    ClusterSpec c;
    train(&t, 2, 0);
    cluster(&c, 2, 2);       /* pure TP: no data-parallel traffic to hide */
    SimResult fast, slow;
    cr_assert_eq(plan_sim(&m, &t, &c, STRAT_DDP, 0, &fast), 0);
    c.gpu.intra_bw /= 10;
    cr_assert_eq(plan_sim(&m, &t, &c, STRAT_DDP, 0, &slow), 0);
    cr_expect_gt(fast.exposed_comm_s, 0);
    cr_expect(fabs((slow.step_s - fast.step_s) - (slow.comm_s - fast.comm_s)) < 1e-6 * slow.step_s,
              "every second added to the TP collectives adds to the step");
    cr_expect_eq(fast.tokens_per_s * fast.step_s, 1024.0, "2 tp ranks train one sample of 1024 tokens");
    plan_model_free(&m);
}

Test(tp, checkpointed_blocks_under_sp_should_keep_their_sequence_shard) {
    ModelSpec m = zoo("llama2-7b");
    TrainSpec t;
    ClusterSpec c;
    cluster(&c, 8, 8);
    c.gpu.mem_bytes = 1e15;
    MemResult off, on;
    train(&t, 8, 0);
    t.act_ckpt = CKPT_FULL;
    t.micro_batch = 16;
    plan_memory(&m, &t, &c, STRAT_FSDP_FULL, &off);
    t.sp = 1;
    plan_memory(&m, &t, &c, STRAT_FSDP_FULL, &on);
    cr_expect_lt(on.peak, off.peak, "checkpoint(block) keeps a Shard(1) input under SP");
    plan_model_free(&m);
}

Test(tp, auto_should_size_the_global_batch_by_data_parallel_replicas) {
    ModelSpec m = zoo("llama2-7b");
    TrainSpec t;
    ClusterSpec c;
    train(&t, 4, 1);
    t.precision = PREC_AMP_BF16;
    cluster(&c, 8, 8);
    AutoSpec a;
    plan_auto_defaults(&a);
    a.strategies = (1u << STRAT_DDP) | (1u << STRAT_FSDP_FULL);
    a.global_batch = 16;     /* 2 replicas of 4 tp ranks: 8 samples each per step */
    AutoResult r;
    cr_assert_eq(plan_auto(&m, &t, &c, &a, &r), 0);
    cr_assert(r.found, "%s", r.explain);
    cr_expect_eq(r.train.tp, 4);
    cr_expect_eq(r.train.offload, OFFLOAD_NONE);
    cr_expect_eq(r.train.micro_batch * r.train.grad_accum * 2, 16, "%s", r.explain);
    cr_expect(strstr(r.explain, "data-parallel replicas") != NULL, "%s", r.explain);
    plan_model_free(&m);
}

/* Non-reentrant checkpointing recomputes a block up to the last tensor backward needs: its
   gathers and the attention's reduction again, not the MLP output's (measured on llama-mini). */
Test(tp, recomputed_blocks_should_repeat_their_collectives_but_the_last) {
    ModelSpec m = zoo("llama2-7b");
    TrainSpec t;
    ClusterSpec c;
    cluster(&c, 2, 2);
    double L = m.n_layer;
    CommPlan none, full;
    train(&t, 2, 1);
    plan_comm(&m, &t, &c, STRAT_DDP, &none);
    t.act_ckpt = CKPT_FULL;
    plan_comm(&m, &t, &c, STRAT_DDP, &full);
    const PlanColl *ag0 = row(&none, COLL_ALL_GATHER, PHASE_BACKWARD, PURPOSE_TP_ACTS);
    const PlanColl *ag1 = row(&full, COLL_ALL_GATHER, PHASE_BACKWARD, PURPOSE_TP_ACTS);
    const PlanColl *rs0 = row(&none, COLL_REDUCE_SCATTER, PHASE_BACKWARD, PURPOSE_TP_ACTS);
    const PlanColl *rs1 = row(&full, COLL_REDUCE_SCATTER, PHASE_BACKWARD, PURPOSE_TP_ACTS);
    cr_assert(ag0 && ag1 && rs0 && rs1);
    cr_expect_eq(ag1->count - ag0->count, 2 * L);
    cr_expect_eq(rs1->count - rs0->count, L);
    train(&t, 2, 0);
    t.act_ckpt = CKPT_FULL;
    plan_comm(&m, &t, &c, STRAT_DDP, &full);
    const PlanColl *ar = row(&full, COLL_ALL_REDUCE, PHASE_BACKWARD, PURPOSE_TP_ACTS);
    cr_assert(ar);
    cr_expect_eq(ar->count, 3 * L + 1);
    plan_model_free(&m);
}

/* Op-level checkpointing runs the whole block again (torchtitan's checkpoint_wrapper with
   early_stop=False): both all-reductions without SP; under SP both all-gathers but no
   reduce-scatter, whose outputs its save list keeps (measured on llama-mini, tp 2). Megatron's
   selective recompute of the core attention repeats none. */
Test(tp, op_level_checkpointing_should_repeat_the_whole_blocks_collectives_but_its_saved_scatters) {
    ModelSpec m = zoo("llama2-7b");
    TrainSpec t;
    ClusterSpec c;
    cluster(&c, 2, 2);
    double L = m.n_layer;
    CommPlan none, op;
    for (int sp = 0; sp <= 1; sp++) {
        train(&t, 2, sp);
        t.attn = ATTN_SDPA;
        plan_comm(&m, &t, &c, STRAT_DDP, &none);
        t.act_ckpt = CKPT_OP;
        cr_assert_null(plan_act_ckpt_unsupported(&m, &t), "%s", plan_act_ckpt_unsupported(&m, &t));
        plan_comm(&m, &t, &c, STRAT_DDP, &op);
        if (!sp) {
            const PlanColl *a0 = row(&none, COLL_ALL_REDUCE, PHASE_BACKWARD, PURPOSE_TP_ACTS);
            const PlanColl *a1 = row(&op, COLL_ALL_REDUCE, PHASE_BACKWARD, PURPOSE_TP_ACTS);
            cr_assert(a0 && a1);
            cr_expect_eq(a1->count - a0->count, 2 * L);
        } else {
            const PlanColl *ag0 = row(&none, COLL_ALL_GATHER, PHASE_BACKWARD, PURPOSE_TP_ACTS);
            const PlanColl *ag1 = row(&op, COLL_ALL_GATHER, PHASE_BACKWARD, PURPOSE_TP_ACTS);
            const PlanColl *rs0 = row(&none, COLL_REDUCE_SCATTER, PHASE_BACKWARD, PURPOSE_TP_ACTS);
            const PlanColl *rs1 = row(&op, COLL_REDUCE_SCATTER, PHASE_BACKWARD, PURPOSE_TP_ACTS);
            cr_assert(ag0 && ag1 && rs0 && rs1);
            cr_expect_eq(ag1->count - ag0->count, 2 * L);
            cr_expect_eq(rs1->count, rs0->count);
        }
        t.act_ckpt = CKPT_SELECTIVE;
        cr_assert_null(plan_act_ckpt_unsupported(&m, &t));
        plan_comm(&m, &t, &c, STRAT_DDP, &op);
        cr_expect_eq(op.n, none.n);
        for (int i = 0; i < op.n && i < none.n; i++) cr_expect_eq(op.c[i].count, none.c[i].count, "row %d", i);
    }
    plan_model_free(&m);
}

/* Under autocast the residual stream stays fp32 (the embeddings', the norms' outputs and the
   gradients of the column inputs) while a row-parallel output is bf16. */
Test(tp, payloads_should_follow_each_tensors_dtype_under_autocast) {
    ModelSpec m = zoo("llama2-7b");
    TrainSpec t;
    ClusterSpec c;
    cluster(&c, 2, 2);
    train(&t, 2, 0);
    t.precision = PREC_AMP_BF16;
    CommPlan p;
    plan_comm(&m, &t, &c, STRAT_DDP, &p);
    double bs_h = 1.0 * 1024 * 4096, L = m.n_layer;
    const PlanColl *f = row(&p, COLL_ALL_REDUCE, PHASE_FORWARD, PURPOSE_TP_ACTS);
    const PlanColl *b = row(&p, COLL_ALL_REDUCE, PHASE_BACKWARD, PURPOSE_TP_ACTS);
    cr_assert(f && b);
    cr_expect_eq(f->payload_bytes, 2 * L * bs_h * 2 + bs_h * 4, "bf16 row outputs, the fp32 embedding");
    cr_expect_eq(b->payload_bytes, (2 * L + 1) * bs_h * 4, "fp32 input gradients");
    plan_model_free(&m);
}

/* --tp auto: data parallel alone stays unless a tensor-parallel degree is faster by more than
   the margin; every degree tried is listed. */
Test(tp, auto_should_keep_data_parallel_alone_when_tp_does_not_pay) {
    ModelSpec m = zoo("gpt2");
    TrainSpec t;
    ClusterSpec c;
    plan_train_defaults(&t);
    t.seq = 1024;
    cluster(&c, 8, 8);
    AutoSpec a;
    plan_auto_defaults(&a);
    a.strategies = (1u << STRAT_COUNT) - 1;
    AutoResult r;
    t.tp = -1;   /* --tp auto */
    cr_assert_eq(plan_auto_dims(&m, &t, &c, &a, &r), 0);
    cr_assert(r.found, "%s", r.explain);
    cr_expect_eq(plan_tp_degree(&r.train), 1, "%s", r.explain);
    cr_expect(strstr(r.explain, "tp 4 sp on:") != NULL, "%s", r.explain);
    cr_expect(strstr(r.explain, "tp 8") == NULL, "12 heads: tp 8 does not apply\n%s", r.explain);
    plan_model_free(&m);
}

/* The step is read as it was built, at its micro-batch and with the rank's share (issue "One
   step, built once"): llama2-70b on 64 H100s, tp 8 with SP, FSDP2, seq 4096, full checkpointing.
   Compute at b = 2 and 8 is the share's at that batch, not the whole model's (it was 8.7 s at
   b = 2, the model without tp), and the simulated step runs the table's communication (it ran
   b = 1's: 0.52 s of 2.12 s at b = 8). */
Test(tp, the_simulated_step_should_read_the_share_and_the_payloads_at_every_micro_batch) {
    ModelSpec m = zoo("llama2-70b");
    ClusterSpec c;
    cluster(&c, 64, 8);
    c.gpu = *plan_gpu_by_name("h100-80gb");
    double comp[3];
    static const int64_t B[3] = {1, 2, 8};
    for (int i = 0; i < 3; i++) {
        TrainSpec t;
        train(&t, 8, 1);
        t.precision = PREC_AMP_BF16;
        t.seq = 4096;
        t.act_ckpt = CKPT_FULL;
        t.micro_batch = B[i];
        CommPlan cp;
        SimResult s;
        plan_comm(&m, &t, &c, STRAT_FSDP_FULL, &cp);
        cr_assert_eq(plan_sim(&m, &t, &c, STRAT_FSDP_FULL, 0, &s), 0);
        comp[i] = s.compute_s;
        cr_expect(fabs(s.comm_s - cp.seconds) <= 0.01 * cp.seconds, "b%lld: the step runs %.3f s of the table's %.3f s",
                  (long long)B[i], s.comm_s, cp.seconds);
        TrainSpec t1 = t;
        t1.tp = 1;
        t1.sp = 0;
        SimResult whole;
        cr_assert_eq(plan_sim(&m, &t1, &c, STRAT_FSDP_FULL, 0, &whole), 0);
        cr_expect(s.compute_s < whole.compute_s / 5, "b%lld: tp 8 computes %.3f s, the whole model %.3f s", (long long)B[i],
                  s.compute_s, whole.compute_s);
    }
    cr_expect(comp[1] / comp[0] >= 1.6 && comp[1] / comp[0] <= 2.1, "b2/b1 %.3f", comp[1] / comp[0]);
    cr_expect(comp[2] / comp[1] >= 3.2 && comp[2] / comp[1] <= 4.2, "b8/b2 %.3f", comp[2] / comp[1]);
    plan_model_free(&m);
}

/* ColwiseParallel computes the rank's vocab shard of the logits whether or not the loss then
   gathers them (torch/distributed/tensor/parallel/style.py ColwiseParallel: output Shard(-1),
   use_local_output=False; without loss parallel the all-gather comes after the GEMM), so the head's
   GEMM is V/tp columns either way: the same FLOPs per GPU with and without --loss-parallel (they
   differ in the loss, a memory-bound pass, not in the GEMM). */
Test(tp, the_heads_gemm_should_compute_the_ranks_vocab_shard_with_or_without_loss_parallel) {
    ModelSpec m = zoo("llama2-7b");
    ClusterSpec c;
    cluster(&c, 8, 8);
    c.gpu = *plan_gpu_by_name("h100-80gb");
    TrainSpec t;
    train(&t, 8, 1);
    SimResult off, on, whole;
    cr_assert_eq(plan_sim(&m, &t, &c, STRAT_DDP, 0, &off), 0);
    t.loss_parallel = 1;
    cr_assert_eq(plan_sim(&m, &t, &c, STRAT_DDP, 0, &on), 0);
    cr_expect_eq(off.flops_per_step, on.flops_per_step, "%.6g against %.6g FLOPs", off.flops_per_step, on.flops_per_step);
    t.tp = 1;
    t.sp = 0;
    t.loss_parallel = 0;
    cr_assert_eq(plan_sim(&m, &t, &c, STRAT_DDP, 0, &whole), 0);
    cr_expect(fabs(off.flops_per_step * 8 / whole.flops_per_step - 1) < 1e-3, "every GEMM a rank's eighth (the replicated norms aside): %.6f",
              off.flops_per_step * 8 / whole.flops_per_step);
    plan_model_free(&m);
}

/* ---- MoE blocks as torchtitan splits them (models/llama4/infra/parallelize.py apply_moe_ep_tp;
   distributed/expert_parallel.py TensorParallel): docs/formulas.md "Tensor parallel of MoE
   blocks" ---- */

#define TT_LLAMA4 "tests/data/torchtitan/llama4_17bx16e.json"

Test(tp, moe_blocks_should_split_each_experts_hidden_width_and_keep_the_router_whole) {
    ModelSpec m = load_model(TT_LLAMA4), v;
    cr_assert_eq(plan_tp_view(&m, 8, &v), 0);
    const LayerSpec *b = &m.layers[1], *w = &v.layers[1];
    cr_assert_eq(b->kind, LAYER_BLOCK);
    double h = 5120, E = 16, f = 8192;
    cr_expect_eq((double)b->expert_params, 3 * E * h * f, "w1, w3 and w2 of 16 experts");
    cr_expect_eq((double)w->expert_params, 3 * E * h * f / 8, "Shard(1) / Shard(2): each expert's hidden width / tp");
    int router = 0;
    for (int k = 0; k < b->n_tensors; k++) {
        if (b->expert_mask >> k & 1u)
            cr_expect_eq(w->tensor_dim0[k], 16, "dim 0 stays the expert index (FSDP and --ep shard it)");
        if (b->tensor_elems[k] == E * h && !(b->expert_mask >> k & 1u)) {
            router++;
            cr_expect_eq(w->tensor_elems[k], b->tensor_elems[k], "the router is NoParallel: whole on every rank");
        }
    }
    cr_expect_eq(router, 1);
    /* per block: the router and two norms whole, the rest (attention, experts, shared expert) / 8 */
    double whole = E * h + 2 * h;
    cr_expect_eq((double)w->params, ((double)b->params - whole) / 8 + whole);
    cr_expect_eq(v.moe.d_ff_expert, 1024);
    cr_expect_eq(v.moe.d_ff_shared, 1024);
    cr_expect_eq(v.moe.n_experts, 16, "the router still scores every expert");
    plan_model_free(&v);
    plan_model_free(&m);
}

/* Per MoE block under SP: forward as a dense block (the input gathered from sequence shards, the
   Partial output reduce-scattered to them); backward, the output's gradient gathered, and instead
   of the input gradient's reduce-scatter, all-reduces by each consumer that splits the work: the
   routed experts' T k rows and the shared expert's w1 and w3 inputs. */
Test(tp, a_moe_block_should_all_reduce_its_consumers_input_gradients_instead_of_a_reduce_scatter) {
    ModelSpec m = load_model(TT_LLAMA4);
    TrainSpec t;
    ClusterSpec c;
    train(&t, 8, 1);
    t.micro_batch = 1;
    cluster(&c, 16, 8);
    CommPlan p;
    plan_comm(&m, &t, &c, STRAT_FSDP_FULL, &p);
    double bsh = 1.0 * 1024 * 5120 * 2, L = m.n_layer;
    const PlanColl *ar = row(&p, COLL_ALL_REDUCE, PHASE_BACKWARD, PURPOSE_TP_ACTS);
    const PlanColl *rs = row(&p, COLL_REDUCE_SCATTER, PHASE_BACKWARD, PURPOSE_TP_ACTS);
    const PlanColl *ag = row(&p, COLL_ALL_GATHER, PHASE_FORWARD, PURPOSE_TP_ACTS);
    const PlanColl *rsf = row(&p, COLL_REDUCE_SCATTER, PHASE_FORWARD, PURPOSE_TP_ACTS);
    cr_assert(ar && rs && ag && rsf);
    cr_expect_eq(ar->count, 3 * L, "routed rows (top-1), shared w1, shared w3");
    cr_expect_eq(ar->payload_bytes, 3 * L * bsh);
    cr_expect_eq(ar->group, 8);
    cr_expect_eq(rs->count, L + 1, "the attention input's gradient per block, the head's input");
    cr_expect_eq(ag->count, 2 * L + 1, "forward as a dense block: attention and MoE inputs, the head's");
    cr_expect_eq(rsf->count, 2 * L + 1);
    plan_model_free(&m);
}

Test(tp, moe_blocks_it_does_not_split_should_be_refused_with_the_reason) {
    TrainSpec t;
    ClusterSpec c;
    char msg[512];
    cluster(&c, 16, 8);
    ModelSpec hf = load_model("tests/data/hf/llama-4-scout-17b-16e-text.json");
    train(&t, 8, 1);
    cr_expect_neq(plan_tp_check(&hf, &t, &c, STRAT_FSDP_FULL, msg, sizeof msg), 0);
    cr_expect(strstr(msg, "take every token") && strstr(msg, "torchtitan"), "%s", msg);
    plan_model_free(&hf);
    ModelSpec m = load_model(TT_LLAMA4);
    train(&t, 8, 0);
    cr_expect_neq(plan_tp_check(&m, &t, &c, STRAT_FSDP_FULL, msg, sizeof msg), 0);
    cr_expect(strstr(msg, "--sp on"), "%s", msg);
    train(&t, 8, 1);
    cr_expect_eq(plan_tp_check(&m, &t, &c, STRAT_FSDP_FULL, msg, sizeof msg), 0, "%s", msg);
    plan_model_free(&m);
}

/* Measured on 4 gloo ranks (bench/torch/moe_tp_probe.py: torchtitan 0.2.2's own Llama 4 model,
   a tiny flavor of 2 MoE blocks, parallelised by its own apply_non_moe_tp and apply_moe_ep_tp,
   fp32, micro-batch 2 x 64 tokens, one forward and backward): rank 0's parameter elements before
   data-parallel sharding and its TP and EP collectives of forward and backward, count and payload
   per kind and phase, exact. tp 4: TensorParallel on the experts; tp 2 x ep 2:
   ExpertTensorParallel (etp = tp), balanced routing, under FSDP2 as memplan plans --ep (its
   gathers and reductions are not in the probe's rows). */
static void probe_case(const char *result, int tp, int ep, StrategyKind sk) {
    cJSON *j = read_json(result);
    ModelSpec m = load_model("tests/data/torchtitan/llama4_tiny.json"), v, w;
    TrainSpec t;
    ClusterSpec c;
    train(&t, tp, 1);
    t.precision = PREC_FP32;
    t.micro_batch = 2;
    t.seq = 64;
    t.ep = ep;
    cluster(&c, 4, 4);
    char msg[512];
    cr_assert_eq(plan_tp_check(&m, &t, &c, sk, msg, sizeof msg), 0, "%s", msg);
    cr_assert_eq(plan_tp_view(&m, tp, &v), 0);
    cr_assert_eq(plan_ep_view(&v, ep, &w), 0);
    cr_expect_eq((double)plan_model_params(&w), cJSON_GetObjectItem(j, "params")->valuedouble, "%s", result);
    CommPlan p;
    plan_comm(&m, &t, &c, sk, &p);
    int rows = 0;
    for (cJSON *r = cJSON_GetObjectItem(j, "collectives")->child; r; r = r->next, rows++) {
        const char *op = cJSON_GetObjectItem(r, "op")->valuestring, *ph = cJSON_GetObjectItem(r, "phase")->valuestring;
        double count = 0, bytes = 0;
        for (int i = 0; i < p.n; i++) {
            CollPurpose u = p.c[i].purpose;
            if ((int)p.c[i].op == coll_by_name(op) && !strcmp(phase_name(p.c[i].phase), ph) &&
                (u == PURPOSE_TP_ACTS || u == PURPOSE_TP_LOGITS || u == PURPOSE_EP_COUNTS || u == PURPOSE_EP_TOKENS)) {
                count += p.c[i].count;
                bytes += p.c[i].payload_bytes;
            }
        }
        cr_expect_eq(count, cJSON_GetObjectItem(r, "count")->valuedouble, "%s: %s %s count", result, op, ph);
        cr_expect_eq(bytes, cJSON_GetObjectItem(r, "bytes")->valuedouble, "%s: %s %s payload", result, op, ph);
    }
    cr_expect_eq(rows, ep > 1 ? 7 : 5, "gathers and scatters both ways, all-reduces in backward (+ all-to-alls)");
    cJSON_Delete(j);
    plan_model_free(&w);
    plan_model_free(&v);
    plan_model_free(&m);
}

Test(tp, torchtitans_moe_plan_should_hold_the_measured_shares_and_issue_the_measured_collectives) {
    probe_case("bench/torch/results/probes/llama4-tiny_tp4.json", 4, 1, STRAT_DDP);
    probe_case("bench/torch/results/probes/llama4-tiny_tp2_ep2.json", 2, 2, STRAT_FSDP_FULL);
}

/* llama2-7b under mixed-bf16 (InternLM's regime: 2-byte parameters and gradients, fp32 master,
   m and v), tp 2 on a cluster of gpus, gpn per node. */
static ModelSpec mixed_tp2(TrainSpec *t, ClusterSpec *c, int64_t gpus, int64_t gpn) {
    train(t, 2, 0);
    t->precision = PREC_MIXED_BF16;
    cluster(c, gpus, gpn);
    return zoo("llama2-7b");
}

/* ZeRO-1/2 under tensor parallel, as Megatron-DeepSpeed and InternLM run it: the rank's tp share,
   its optimizer states (ZeRO-2: and gradients) sharded over the data-parallel group of gpus / tp
   ranks. Hand-worked for llama2-7b, tp 2 on 16 GPUs, mixed-bf16: the share is 3,369,340,928
   parameters (plan_tp_view), 2 B each on every rank; fp32 master, m and v (12 B) over 8 ranks. The
   gradients are the share's plan on the 8-rank data-parallel cluster, plus, under ZeRO-1 (whole
   gradients until the step, as DDP), RowwiseParallel's V x h embedding gradient: (tp - 1) x V/2 x
   h x 2 B = 131,072,000 B more. */
Test(tp, zero1_and_zero2_model_states_should_be_the_tp_share_sharded_over_the_data_parallel_group) {
    TrainSpec t;
    ClusterSpec c, dp;
    ModelSpec m = mixed_tp2(&t, &c, 16, 8), v;
    cr_assert_eq(plan_tp_view(&m, 2, &v), 0);
    double local = (double)plan_model_params(&v);
    cr_expect_eq(local, 3369340928.0);
    TrainSpec t1 = t;
    t1.tp = 1;
    cluster(&dp, 8, 4);   /* the data-parallel cluster the strategy sees: gpus / tp, gpus_per_node / tp */
    for (int s = STRAT_ZERO1; s <= STRAT_ZERO2; s++) {
        MemResult r, share;
        plan_memory(&m, &t, &c, (StrategyKind)s, &r);
        plan_memory(&v, &t1, &dp, (StrategyKind)s, &share);
        cr_expect_eq(r.ms_params, 2 * local, "%s: every rank keeps its whole share", plan_strategy(s)->name);
        cr_expect_eq(r.ms_optimizer, 12 * local / 8, "%s: master, m and v over 8 data-parallel ranks",
                     plan_strategy(s)->name);
        double extra = s == STRAT_ZERO1 ? 131072000.0 : 0;
        cr_expect_eq(r.ms_grads, share.ms_grads + extra, "%s: %.0f vs the share's %.0f", plan_strategy(s)->name,
                     r.ms_grads, share.ms_grads);
        cr_expect_lt(share.ms_grads, local * 2 / 2, "%s: gradients partitioned, not whole", plan_strategy(s)->name);
    }
    plan_model_free(&v);
    plan_model_free(&m);
}

/* tp 2 x ZeRO-1 on 16 GPUs (2 nodes of 8): the gradient all-reduces and the step's all-gather run
   over the 8-rank data-parallel group, every second rank of the cluster (4 on each node: each
   group rides its 4 ranks' NIC shares while the node's other group runs its own, priced as
   plan_crosses_stride(2)); the TP all-reduces over 2 ranks inside a node. Hand-worked: the share's
   gradients, 3,369,340,928 x 2 B = 6,738,681,856 B, in ceil(share / 5e8) = 7 reduce buckets; the
   all-gather the same bytes (8 partitions); --zero-param-sync broadcast: 8 broadcasts of one
   partition each. At tp 8 the group is one rank per node. */
Test(tp, zero1_under_tp2_should_reduce_and_sync_over_the_data_parallel_group_strided_across_tp) {
    TrainSpec t;
    ClusterSpec c;
    ModelSpec m = mixed_tp2(&t, &c, 16, 8);
    CommPlan p;
    plan_comm(&m, &t, &c, STRAT_ZERO1, &p);
    const PlanColl *ar = row(&p, COLL_ALL_REDUCE, PHASE_BACKWARD, PURPOSE_GRAD_BUCKETS);
    const PlanColl *ag = row(&p, COLL_ALL_GATHER, PHASE_STEP, PURPOSE_UPDATED_PARAMS);
    const PlanColl *tpf = row(&p, COLL_ALL_REDUCE, PHASE_FORWARD, PURPOSE_TP_ACTS);
    cr_assert(ar && ag && tpf);
    cr_expect_eq(ar->count, 7);
    cr_expect_eq(ar->payload_bytes, 6738681856.0);
    cr_expect_eq(ar->group, 8);
    cr_expect_eq(ag->count, 1);
    cr_expect_eq(ag->payload_bytes, 6738681856.0);
    cr_expect_eq(ag->group, 8);
    cr_expect_eq(tpf->group, 2);
    cr_expect_eq(tpf->count, 2 * m.n_layer + 1);
    cr_expect_eq(tpf->payload_bytes, (2 * m.n_layer + 1) * 1024.0 * 4096 * 2);
    double strided = plan_coll_seconds(&c, COLL_ALL_GATHER, ag->payload_bytes, 8, plan_crosses_stride(2));
    double packed = plan_coll_seconds(&c, COLL_ALL_GATHER, ag->payload_bytes, 8, 1);
    cr_expect(fabs(ag->seconds / strided - 1) < 1e-9, "%g vs %g", ag->seconds, strided);
    cr_expect_gt(strided, 1.5 * packed, "2 nodes of 4 ranks on 4 NIC shares, not 1 node of 8: %g vs %g", strided, packed);
    t.ds.param_sync = PARAM_SYNC_BROADCAST;
    plan_comm(&m, &t, &c, STRAT_ZERO1, &p);
    const PlanColl *bc = row(&p, COLL_BROADCAST, PHASE_STEP, PURPOSE_UPDATED_PARAMS);
    cr_assert(bc);
    cr_expect_eq(bc->count, 8, "one per rank of the group, from its owner");
    cr_expect_eq(bc->payload_bytes, 6738681856.0);
    cr_expect_eq(bc->group, 8);
    cr_expect_null(row(&p, COLL_ALL_GATHER, PHASE_STEP, PURPOSE_UPDATED_PARAMS));
    /* --zero-group 4: a node's 4 data-parallel ranks shard and broadcast; the reduction stays on 8 */
    t.ds.zero_group = 4;
    plan_comm(&m, &t, &c, STRAT_ZERO1, &p);
    bc = row(&p, COLL_BROADCAST, PHASE_STEP, PURPOSE_UPDATED_PARAMS);
    ar = row(&p, COLL_ALL_REDUCE, PHASE_BACKWARD, PURPOSE_GRAD_BUCKETS);
    cr_assert(bc && ar);
    cr_expect_eq(bc->count, 4);
    cr_expect_eq(bc->group, 4);
    cr_expect(fabs(bc->seconds / (4 * plan_coll_seconds(&c, COLL_BROADCAST, bc->payload_bytes / 4, 4, 0)) - 1) < 1e-9,
              "inside the node");
    cr_expect_eq(ar->group, 8);
    plan_model_free(&m);
    /* tp 8 fills a node: the data-parallel group is one rank per node, priced as HSDP's replicas
       (PLAN_CROSSES_STRIDED) */
    m = zoo("llama2-70b");
    train(&t, 8, 0);
    cluster(&c, 64, 8);
    plan_comm(&m, &t, &c, STRAT_ZERO1, &p);
    ag = row(&p, COLL_ALL_GATHER, PHASE_STEP, PURPOSE_UPDATED_PARAMS);
    cr_assert(ag);
    cr_expect_eq(ag->group, 8);
    double one = plan_coll_seconds(&c, COLL_ALL_GATHER, ag->payload_bytes, 8, PLAN_CROSSES_STRIDED);
    cr_expect(fabs(ag->seconds / one - 1) < 1e-9, "%g vs %g", ag->seconds, one);
    plan_model_free(&m);
}
