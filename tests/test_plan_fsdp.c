/* test_plan_fsdp.c — FSDP2 (fully_shard) buffers unit by unit (planner/plan_fsdp.h,
 * docs/formulas.md "FSDP2 buffers"): the flat all-gather output kept to the next copy-out, the
 * backward prefetch, the reduce-scatter input kept to the next reduction, the root left unsharded
 * after forward, a shard group of 1 (HSDP replicating across every rank), and the measured peaks
 * of gpt2-mini on 2 CPU ranks (torch 2.15, fp32, batch 1, seq 128, eager, dropout 0). FSDP1
 * (--fsdp 1) keeps its flat-parameter model. */
#include <criterion/criterion.h>
#include <math.h>
#include <string.h>

#include "plan_comm.h"
#include "plan_fsdp.h"
#include "plan_memory.h"
#include "test_plan.h"

/* gpt2-mini (V 1024, ctx 128, h 128, 4 blocks): the root unit (wte, wpe, ln_f; lm_head tied)
   and one block, in elements; both even, so 2 ranks pad nothing */
#define ROOT 147712.0
#define UNIT 198272.0
#define PSI (ROOT + 4 * UNIT)

typedef struct {
    PhaseKind ph[64];
    int layer[64];
    double term[64][TERM_COUNT];
    double total[64];
    int n;
} Moments;

static void record(void *ctx, PhaseKind ph, int layer, const double term[TERM_COUNT], double total) {
    Moments *k = ctx;
    if (k->n >= 64) return;
    k->ph[k->n] = ph;
    k->layer[k->n] = layer;
    memcpy(k->term[k->n], term, sizeof(double) * TERM_COUNT);
    k->total[k->n++] = total;
}

/* the k-th moment (0-based) of phase ph at layer */
static int find(const Moments *k, PhaseKind ph, int layer, int nth) {
    for (int i = 0; i < k->n; i++)
        if (k->ph[i] == ph && k->layer[i] == layer && nth-- == 0) return i;
    return -1;
}

/* validate --against torch's setup: CPU ranks, overheads zeroed */
static void setup(TrainSpec *t, ClusterSpec *c, int64_t gpus, int64_t gpn) {
    plan_train_defaults(t);
    t->precision = PREC_FP32;
    t->micro_batch = 1;
    t->seq = 128;
    t->attn = ATTN_EAGER;
    t->dropout = 0;
    t->autocast_cpu = 1;
    t->loop_trainer = 1;
    cluster(c, gpus, gpn);
    c->cuda_context = 0;
    c->nccl_per_comm = 0;
    c->alloc_margin = 0;
    c->margin_is_frac = 1;
    c->gpu.cublas_ws_bytes = 0;
}

static MemResult walk(const ModelSpec *m, const TrainSpec *t, const ClusterSpec *c, StrategyKind s,
                      Moments *k) {
    MemResult r;
    memset(k, 0, sizeof(*k));
    plan_memory_walk(m, t, c, s, &r, record, k);
    return r;
}

Test(plan_fsdp2, full_forward_should_hold_the_root_the_unit_and_its_flat_all_gather_output) {
    ModelSpec m = zoo("gpt2-mini");
    TrainSpec t;
    ClusterSpec c;
    setup(&t, &c, 2, 2);
    Moments k;
    walk(&m, &t, &c, STRAT_FSDP_FULL, &k);
    /* embeddings: the root's unsharded parameters and its flat output, kept until block 0's
       copy-out */
    cr_expect_eq(k.term[find(&k, PHASE_FORWARD, 0, 0)][TERM_COMM], 2 * ROOT * 4);
    /* a block: the root, the block unsharded, the block's flat output */
    for (int i = 1; i <= 4; i++) cr_expect_eq(k.term[find(&k, PHASE_FORWARD, i, 0)][TERM_COMM], (ROOT + 2 * UNIT) * 4);
    /* the final norm and the head (and the loss): the last block's flat output until the root's
       post-forward */
    cr_expect_eq(k.term[find(&k, PHASE_FORWARD, 5, 0)][TERM_COMM], (ROOT + UNIT) * 4);
    cr_expect_eq(k.term[find(&k, PHASE_FORWARD, 6, 1)][TERM_COMM], (ROOT + UNIT) * 4);
    plan_model_free(&m);
}

Test(plan_fsdp2, full_backward_should_prefetch_the_previous_block_and_keep_the_last_reduce_scatter_input) {
    ModelSpec m = zoo("gpt2-mini");
    TrainSpec t;
    ClusterSpec c;
    setup(&t, &c, 2, 2);
    Moments k;
    walk(&m, &t, &c, STRAT_FSDP_FULL, &k);
    /* the loss's backward: the root, and block 3 prefetched by the root's pre-backward */
    cr_expect_eq(k.term[find(&k, PHASE_BACKWARD, 6, 0)][TERM_COMM], (ROOT + UNIT) * 4);
    /* block 3: itself, block 2 prefetched, no reduce-scatter yet */
    cr_expect_eq(k.term[find(&k, PHASE_BACKWARD, 4, 0)][TERM_COMM], (ROOT + 2 * UNIT) * 4);
    /* block 2: + block 3's reduce-scatter input */
    cr_expect_eq(k.term[find(&k, PHASE_BACKWARD, 3, 0)][TERM_COMM], (ROOT + 3 * UNIT) * 4);
    /* block 0: nothing left to prefetch (the root is unsharded) */
    cr_expect_eq(k.term[find(&k, PHASE_BACKWARD, 1, 0)][TERM_COMM], (ROOT + 2 * UNIT) * 4);
    /* block 2's reduce-scatter: its parameters freed, block 3's input released, its own input */
    int rs = find(&k, PHASE_BACKWARD, 3, 2);         /* after its MLP backward and its end */
    cr_expect_eq(k.term[rs][TERM_COMM], (ROOT + 2 * UNIT) * 4);
    /* gradients then: blocks 3's shard, the root's unsharded (tied V x h, ln_f), block 2's
       unsharded and its shard */
    cr_expect_eq(k.term[rs][TERM_GRADS], (UNIT / 2 + 1024.0 * 128 + 256 + UNIT + UNIT / 2) * 4);
    plan_model_free(&m);
}

Test(plan_fsdp2, the_root_gradient_should_stay_unsharded_until_the_end_of_backward) {
    ModelSpec m = zoo("gpt2-mini");
    TrainSpec t;
    ClusterSpec c;
    setup(&t, &c, 2, 2);
    Moments k;
    walk(&m, &t, &c, STRAT_FSDP_FULL, &k);
    int last = find(&k, PHASE_BACKWARD, 0, 1);         /* the root's reduce-scatter, after layer 0 */
    cr_assert_geq(last, 0);
    cr_expect_eq(k.term[last][TERM_GRADS], (4 * UNIT / 2 + ROOT + ROOT / 2) * 4);
    cr_expect_eq(k.term[last][TERM_COMM], ROOT * 4);
    int step = find(&k, PHASE_STEP, -1, 0);
    cr_expect_eq(k.term[step][TERM_GRADS], PSI / 2 * 4);  /* the sharded gradients, all */
    plan_model_free(&m);
}

Test(plan_fsdp2, full_peak_should_match_the_measured_run) {
    ModelSpec m = zoo("gpt2-mini");
    TrainSpec t;
    ClusterSpec c;
    setup(&t, &c, 2, 2);
    Moments k;
    MemResult r = walk(&m, &t, &c, STRAT_FSDP_FULL, &k);
    /* measured (peak without gloo's internal buffers): 17,600,864 B in block 3's backward */
    cr_expect_lt(fabs(r.peak / 17600864.0 - 1), 0.03, "%.0f", r.peak);
    cr_expect_eq(r.peak_phase, PHASE_BACKWARD);
    cr_expect_eq(r.term[TERM_COMM], (ROOT + 2 * UNIT) * 4);  /* measured: 2,177,032 */
    plan_model_free(&m);
}

Test(plan_fsdp2, grad_op_should_peak_in_the_loss_forward_with_every_unit_unsharded) {
    ModelSpec m = zoo("gpt2-mini");
    TrainSpec t;
    ClusterSpec c;
    setup(&t, &c, 2, 2);
    Moments k;
    MemResult r = walk(&m, &t, &c, STRAT_FSDP_GRAD_OP, &k);
    /* measured: 19,785,064 B in forward, at the loss (logits + log_softmax), with every unit
       unsharded and block 3's flat output (4,556,296 B of buffers) */
    cr_expect_eq(r.peak_phase, PHASE_FORWARD);
    cr_expect_lt(fabs(r.peak / 19785064.0 - 1), 0.03, "%.0f", r.peak);
    cr_expect_eq(r.term[TERM_COMM], (PSI + UNIT) * 4);
    cr_expect_eq(r.term[TERM_TRANSIENT], 128.0 * 1024 * 4);   /* the logits */
    /* backward: no all-gather; block 2 holds blocks 0..2 unsharded + block 3's RS input */
    cr_expect_eq(k.term[find(&k, PHASE_BACKWARD, 3, 0)][TERM_COMM], (ROOT + 3 * UNIT + UNIT) * 4);
    plan_model_free(&m);
}

Test(plan_fsdp2, hybrid_with_a_shard_group_of_one_should_copy_without_flat_buffers) {
    ModelSpec m = zoo("gpt2-mini");
    TrainSpec t;
    ClusterSpec c;
    setup(&t, &c, 2, 1);                                 /* replicate 2 x shard 1 */
    Moments k;
    MemResult r = walk(&m, &t, &c, STRAT_FSDP_HYBRID, &k);
    cr_expect_eq(k.term[find(&k, PHASE_FORWARD, 2, 0)][TERM_COMM], (ROOT + UNIT) * 4);
    cr_expect_eq(k.term[find(&k, PHASE_BACKWARD, 4, 0)][TERM_COMM], (ROOT + UNIT) * 4);
    cr_expect_eq(k.term[find(&k, PHASE_BACKWARD, 3, 0)][TERM_COMM], (ROOT + 2 * UNIT) * 4);
    /* measured: 22,452,576 B in block 3's backward, buffers 1,383,944 B */
    cr_expect_lt(fabs(r.peak / 22452576.0 - 1), 0.03, "%.0f", r.peak);
    cr_expect_eq(r.term[TERM_COMM], (ROOT + UNIT) * 4);
    /* collectives: the all-reduce across replicas only (a group of 1 gathers nothing) */
    CommPlan cp;
    plan_comm(&m, &t, &c, STRAT_FSDP_HYBRID, &cp);
    cr_expect_eq(cp.n, 1);
    cr_expect_eq(cp.c[0].op, PCOLL_ALL_REDUCE);
    cr_expect_eq(cp.c[0].count, 5);
    cr_expect_eq(cp.c[0].payload_bytes, PSI * 4);
    plan_model_free(&m);
}

Test(plan_fsdp2, full_backward_all_gathers_should_skip_the_root_left_unsharded) {
    ModelSpec m = zoo("gpt2-mini");
    TrainSpec t;
    ClusterSpec c;
    setup(&t, &c, 2, 2);
    CommPlan cp;
    plan_comm(&m, &t, &c, STRAT_FSDP_FULL, &cp);
    int seen = 0;
    for (int i = 0; i < cp.n; i++)
        if (cp.c[i].op == PCOLL_ALL_GATHER && cp.c[i].phase == CPHASE_BACKWARD) {
            cr_expect_eq(cp.c[i].count, 4);               /* measured: 4 x 793,088 B */
            cr_expect_eq(cp.c[i].payload_bytes, 4 * UNIT * 4);
            seen = 1;
        }
    cr_expect(seen);
    plan_model_free(&m);
}

Test(plan_fsdp2, fsdp1_engine_and_one_rank_should_keep_their_models) {
    ModelSpec m = zoo("gpt2-mini");
    TrainSpec t;
    ClusterSpec c;
    setup(&t, &c, 2, 2);
    MemSizes z;
    plan_memory_sizes(&m, &t, &c, STRAT_FSDP_FULL, &z);
    Fsdp2 f;
    plan_fsdp2_setup(&f, &m, &t, &c, STRAT_FSDP_FULL, &z);
    cr_expect(f.on);
    plan_fsdp2_setup(&f, &m, &t, &c, STRAT_DDP, &z);
    cr_expect(!f.on);
    t.impl = IMPL_ENGINE;
    plan_fsdp2_setup(&f, &m, &t, &c, STRAT_FSDP_FULL, &z);
    cr_expect(!f.on);
    t.impl = IMPL_PYTORCH;
    c.gpus = c.gpus_per_node = 1;
    plan_fsdp2_setup(&f, &m, &t, &c, STRAT_FSDP_FULL, &z);
    cr_expect(!f.on);
    /* FSDP1: root + 2 units in flight, + 2 reduce-scatter buffers and the root's gradient in
       backward (docs/formulas.md) */
    c.gpus = c.gpus_per_node = 2;
    t.fsdp_impl = 1;
    plan_fsdp2_setup(&f, &m, &t, &c, STRAT_FSDP_FULL, &z);
    cr_expect(!f.on);
    Moments k;
    walk(&m, &t, &c, STRAT_FSDP_FULL, &k);
    cr_expect_eq(k.term[find(&k, PHASE_FORWARD, 0, 0)][TERM_COMM], (ROOT + 2 * UNIT) * 4);
    cr_expect_eq(k.term[find(&k, PHASE_BACKWARD, 3, 0)][TERM_COMM], (ROOT + 2 * UNIT) * 4 + (2 * UNIT + ROOT) * 4);
    plan_model_free(&m);
}

Test(plan_fsdp2, mixed_precision_policy_should_keep_fp32_shards_and_reduce_in_fp32) {
    ModelSpec m = zoo("gpt2-mini");
    TrainSpec t;
    ClusterSpec c;
    setup(&t, &c, 2, 2);
    t.precision = PREC_MIXED_BF16;                       /* MixedPrecisionPolicy(bf16, reduce fp32) */
    MemSizes z;
    plan_memory_sizes(&m, &t, &c, STRAT_FSDP_FULL, &z);
    /* measured model states: 1,881,600 B parameters, 1,881,600 B gradients, AdamW's m and v */
    cr_expect_eq(z.params, PSI / 2 * 4);
    cr_expect_eq(z.grads, PSI / 2 * 4);
    cr_expect_eq(z.optimizer, PSI / 2 * 8);
    Moments k;
    MemResult r = walk(&m, &t, &c, STRAT_FSDP_FULL, &k);
    /* bf16 gathers; block 2's backward keeps block 3's fp32 reduce-scatter input */
    cr_expect_eq(k.term[find(&k, PHASE_BACKWARD, 3, 0)][TERM_COMM], (ROOT + 2 * UNIT) * 2 + UNIT * 4);
    cr_expect_lt(fabs(r.peak / 12178528.0 - 1), 0.03, "%.0f", r.peak);   /* measured */
    /* torch's foreach AdamW steps the fp32 shards: one state-sized temporary */
    cr_expect_eq(k.term[find(&k, PHASE_STEP, -1, 0)][TERM_TRANSIENT], PSI / 2 * 4);
    CommPlan cp;
    plan_comm(&m, &t, &c, STRAT_FSDP_FULL, &cp);
    for (int i = 0; i < cp.n; i++) {
        if (cp.c[i].op == PCOLL_REDUCE_SCATTER) cr_expect_eq(cp.c[i].payload_bytes, PSI * 4);
        if (cp.c[i].op == PCOLL_ALL_GATHER && cp.c[i].phase == CPHASE_FORWARD) cr_expect_eq(cp.c[i].payload_bytes, PSI * 2);
    }
    t.fsdp_impl = 1;                                     /* FSDP1: memplan's mixed row as before */
    plan_memory_sizes(&m, &t, &c, STRAT_FSDP_FULL, &z);
    cr_expect_eq(z.params, PSI / 2 * 2);
    plan_model_free(&m);
}

Test(plan_fsdp2, the_common_loop_should_hold_the_logits_through_backward_and_the_next_forward) {
    ModelSpec m = zoo("gpt2-mini");
    TrainSpec t;
    ClusterSpec c;
    setup(&t, &c, 2, 2);
    double logits = 128.0 * 1024 * 4;
    Moments hf, co;
    MemResult rh = walk(&m, &t, &c, STRAT_FSDP_FULL, &hf);
    t.loop_trainer = 0;                                  /* outputs = model(**batch) */
    MemResult rc = walk(&m, &t, &c, STRAT_FSDP_FULL, &co);
    /* block 3's backward (the head's done) and the step: + the logits; the embeddings'
       forward: + the previous step's */
    cr_expect_eq(co.term[find(&co, PHASE_BACKWARD, 4, 0)][TERM_ACTIVATIONS],
                 hf.term[find(&hf, PHASE_BACKWARD, 4, 0)][TERM_ACTIVATIONS] + logits);
    cr_expect_eq(co.term[find(&co, PHASE_STEP, -1, 0)][TERM_ACTIVATIONS], logits);
    cr_expect_eq(co.term[find(&co, PHASE_FORWARD, 0, 0)][TERM_ACTIVATIONS],
                 hf.term[find(&hf, PHASE_FORWARD, 0, 0)][TERM_ACTIVATIONS] + logits);
    /* measured with the common loop: 18,126,176 B in block 3's backward */
    cr_expect_lt(fabs(rc.peak / 18126176.0 - 1), 0.03, "%.0f", rc.peak);
    cr_expect_gt(rc.peak, rh.peak);
    plan_model_free(&m);
}

Test(plan_fsdp2, a_tied_embedding_should_hold_three_vocabulary_gradients_at_its_backward) {
    ModelSpec m = zoo("gpt2");                           /* V 50257, h 768, tied */
    TrainSpec t;
    ClusterSpec c;
    setup(&t, &c, 2, 2);
    Moments k;
    MemResult r = walk(&m, &t, &c, STRAT_FSDP_FULL, &k);
    double ve = 50257.0 * 768 * 4;
    int e = find(&k, PHASE_BACKWARD, 0, 0), root_rs = find(&k, PHASE_BACKWARD, 0, 1);
    /* the head's half, the embedding's own (with wpe) and their sum; then the sum alone */
    MemSizes z;
    plan_memory_sizes(&m, &t, &c, STRAT_FSDP_FULL, &z);
    cr_expect_eq(k.term[e][TERM_GRADS] - (k.term[root_rs][TERM_GRADS] - z.root_shard * 4), 2 * ve);
    /* measured: 1,568,971,360 B at the embedding's backward */
    cr_expect_lt(fabs(r.peak / 1568971360.0 - 1), 0.03, "%.0f", r.peak);
    plan_model_free(&m);
}
