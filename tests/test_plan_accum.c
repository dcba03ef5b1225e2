/* test_plan_accum.c — gradient accumulation (--grad-accum K > 1): what the last micro-step starts
 * with under each strategy (docs/formulas.md "Gradient accumulation"), FSDP's two styles
 * (--fsdp-grad-sync every|last) in memory, in the collectives per optimizer step and in the
 * simulated step. The figures are gpt2-tiny's on 2 ranks, fp32, as the saved `_accum2` rows
 * in bench/torch/results measure them. */
#include <criterion/criterion.h>
#include <math.h>
#include <string.h>

#include "plan_comm.h"
#include "plan_deepspeed.h"
#include "plan_load.h"
#include "plan_memory.h"
#include "plan_sim.h"
#include "test_plan.h"

#define MAX_MOMENTS 256

/* Every moment of one walk: phase, layer and gradient bytes. */
typedef struct {
    int n;
    PhaseKind ph[MAX_MOMENTS];
    int layer[MAX_MOMENTS];
    double grads[MAX_MOMENTS];
} Moments;

static void capture(void *ctx, PhaseKind ph, int layer, const double term[TERM_COUNT], double total) {
    (void)total;
    Moments *k = ctx;
    if (k->n >= MAX_MOMENTS) return;
    k->ph[k->n] = ph;
    k->layer[k->n] = layer;
    k->grads[k->n] = term[TERM_GRADS];
    k->n++;
}

static ModelSpec tiny(void) {
    ModelSpec m;
    char msg[256];
    cr_assert_eq(plan_load_model(&m, "gpt2-tiny", msg, sizeof msg), 0, "%s", msg);
    return m;
}

/* The harness's setup: 2 CPU ranks, fp32, eager, batch 1, seq 64, HF Trainer's loop. */
static void setup(TrainSpec *t, ClusterSpec *c, int64_t accum, FsdpSyncKind sync) {
    plan_train_defaults(t);
    t->seq = 64;
    t->grad_accum = accum;
    t->precision = PREC_FP32;
    t->attn = ATTN_EAGER;
    t->dropout = 0;
    t->autocast_cpu = 1;
    t->loop_trainer = 1;
    t->fsdp_grad_sync = sync;
    cluster(c, 2, 2);
}

static MemResult walk(const ModelSpec *m, const TrainSpec *t, const ClusterSpec *c, StrategyKind k, Moments *mo) {
    MemResult r;
    memset(mo, 0, sizeof(*mo));
    plan_memory_walk(m, t, c, k, &r, capture, mo);
    cr_assert(mo->n > 2 && mo->n < MAX_MOMENTS);
    return r;
}

/* The first moment (forward of layer 0), the last in backward and the step's. */
static double first_grads(const Moments *k) { return k->grads[0]; }
static double step_grads(const Moments *k) { return k->grads[k->n - 1]; }
static double last_backward_grads(const Moments *k) {
    for (int i = k->n - 1; i >= 0; i--)
        if (k->ph[i] == PHASE_BACKWARD) return k->grads[i];
    return -1;
}
static double backward_grads_of(const Moments *k, int layer) {   /* the first moment at that layer */
    for (int i = 0; i < k->n; i++)
        if (k->ph[i] == PHASE_BACKWARD && k->layer[i] == layer) return k->grads[i];
    return -1;
}

static double psi(const ModelSpec *m) { return (double)plan_model_params(m); }

/* DDP under no_sync(): the earlier micro-steps leave every full .grad; the last one's
   AccumulateGrad adds into them in place (measured: gpt2-tiny ddp _accum2, +0.05 %) */
Test(accum, ddp_should_start_the_last_micro_step_with_every_full_gradient) {
    ModelSpec m = tiny();
    TrainSpec t1, t2;
    ClusterSpec c;
    setup(&t1, &c, 1, FSDP_SYNC_EVERY);
    setup(&t2, &c, 2, FSDP_SYNC_EVERY);
    Moments k1, k2;
    MemResult r1 = walk(&m, &t1, &c, STRAT_DDP, &k1), r2 = walk(&m, &t2, &c, STRAT_DDP, &k2);
    cr_expect_eq(first_grads(&k1), 0, "one micro-step: no gradient before backward");
    /* the full gradients, no more: in forward, at the loss's backward and the step; a layer's
       backward adds its largest tensor's new gradient until AccumulateGrad has added it in place,
       and the tied head's half waits in the autograd engine from the head's backward to the
       embedding's */
    double tied = (double)m.layers[0].largest_tensor * 4;
    int backward = 0;   /* the first backward moment is the loss's, before the head's */
    for (int i = 0; i < k2.n; i++) {
        int layer = k2.ph[i] == PHASE_BACKWARD && backward++ > 0;
        double extra = layer ? tied + (double)m.layers[k2.layer[i]].largest_tensor * 4 : 0;
        cr_expect_eq(k2.grads[i], psi(&m) * 4 + extra, "moment %d", i);
    }
    cr_expect_eq(backward_grads_of(&k2, 0), psi(&m) * 4 + 2 * tied, "the embedding's backward: its half in flight");
    cr_expect_eq(step_grads(&k1), step_grads(&k2));
    cr_expect_eq(r1.ms_grads, r2.ms_grads, "model states do not depend on K");
    cr_expect_gt(r2.peak, r1.peak);
    plan_model_free(&m);
}

/* ZeRO-1 reduces only at the accumulation boundary: the full .grad are held until that
   reduction moves them into the bucket; the partition is allocated after it */
Test(accum, zero1_should_hold_the_full_gradients_until_the_boundary_reduction) {
    ModelSpec m = tiny();
    TrainSpec t1, t2;
    ClusterSpec c;
    setup(&t1, &c, 1, FSDP_SYNC_EVERY);
    setup(&t2, &c, 2, FSDP_SYNC_EVERY);
    Moments k1, k2;
    MemResult r1 = walk(&m, &t1, &c, STRAT_ZERO1, &k1), r2 = walk(&m, &t2, &c, STRAT_ZERO1, &k2);
    double norm = plan_ds_norm_bytes(0);
    cr_expect_eq(first_grads(&k1), norm);
    cr_expect_eq(first_grads(&k2), psi(&m) * 4 + norm);
    /* the embedding's backward: the full gradients, the tied head's half waiting and the
       embedding's in flight until AccumulateGrad adds it; no partition yet */
    cr_expect_eq(backward_grads_of(&k2, 0), psi(&m) * 4 + norm + 2 * (double)m.layers[0].largest_tensor * 4);
    /* the boundary's reduction: the gradients are views of the bucket, as with one micro-step */
    cr_expect_eq(last_backward_grads(&k2), last_backward_grads(&k1));
    cr_expect_eq(step_grads(&k2), step_grads(&k1));
    cr_expect_eq(r2.ms_grads, r1.ms_grads);
    plan_model_free(&m);
}

/* ZeRO-2 reduces every micro-step: the first micro-step's grads_in_partition (whole boundary
   tensors included) is held beside the last one's own until the epilogue adds them */
Test(accum, zero2_should_hold_the_first_micro_steps_partition) {
    ModelSpec m = tiny();
    TrainSpec t1, t2;
    ClusterSpec c;
    setup(&t1, &c, 1, FSDP_SYNC_EVERY);
    setup(&t2, &c, 2, FSDP_SYNC_EVERY);
    Moments k1, k2;
    MemResult r1 = walk(&m, &t1, &c, STRAT_ZERO2, &k1), r2 = walk(&m, &t2, &c, STRAT_ZERO2, &k2);
    double norm = plan_ds_norm_bytes(0), part = r1.ms_grads - norm;   /* grads_in_partition */
    cr_expect_eq(part, 281600, "gpt2-tiny's larger rank: (60,288 + 10,112) x 4 (measured 281,604 B with the norm)");
    cr_expect_eq(first_grads(&k2), first_grads(&k1) + part);
    cr_expect_eq(last_backward_grads(&k2), last_backward_grads(&k1) + part);
    cr_expect_eq(step_grads(&k2), step_grads(&k1), "the accumulated partition is the step's");
    cr_expect_eq(r2.ms_grads, r1.ms_grads);
    plan_model_free(&m);
}

/* ZeRO-3 adds each micro-step's partition into grad_partitions_flat_buffer, allocated at init */
Test(accum, zero3_memory_should_not_depend_on_accumulation) {
    ModelSpec m = tiny();
    TrainSpec t1, t2;
    ClusterSpec c;
    setup(&t1, &c, 1, FSDP_SYNC_EVERY);
    setup(&t2, &c, 4, FSDP_SYNC_EVERY);
    Moments k1, k2;
    MemResult r1 = walk(&m, &t1, &c, STRAT_ZERO3, &k1), r2 = walk(&m, &t2, &c, STRAT_ZERO3, &k2);
    cr_expect_eq(r1.peak, r2.peak);
    cr_expect_eq(k1.n, k2.n);
    for (int i = 0; i < k1.n && i < k2.n; i++) cr_expect_eq(k1.grads[i], k2.grads[i], "moment %d", i);
    plan_model_free(&m);
}

/* FSDP2, every (its default): the sharded gradients are held; the last micro-step's
   reduce-scatter outputs are added into them and freed, so none accumulates in backward */
Test(accum, fsdp_every_should_hold_the_sharded_gradients_and_add_none) {
    ModelSpec m = tiny();
    TrainSpec t1, t2;
    ClusterSpec c;
    setup(&t1, &c, 1, FSDP_SYNC_EVERY);
    setup(&t2, &c, 2, FSDP_SYNC_EVERY);
    Moments k1, k2;
    MemSizes z;
    plan_memory_sizes(&m, &t2, &c, STRAT_FSDP_FULL, &z);
    MemResult r1 = walk(&m, &t1, &c, STRAT_FSDP_FULL, &k1), r2 = walk(&m, &t2, &c, STRAT_FSDP_FULL, &k2);
    cr_expect_eq(first_grads(&k1), 0);
    cr_expect_eq(first_grads(&k2), z.psi_shard * 4);
    /* the root's reduce-scatter, last: with one micro-step the block shards and the root's new
       one; accumulated, every shard and the root's new one beside its held shard */
    cr_expect_eq(last_backward_grads(&k2), last_backward_grads(&k1) + z.root_shard * 4);
    cr_expect_eq(step_grads(&k2), step_grads(&k1));
    cr_expect_eq(r2.ms_grads, r1.ms_grads);
    plan_model_free(&m);
}

/* FSDP2, last (set_requires_gradient_sync(False) on the non-final micro-steps): every unit's
   unsharded gradient is held, each freed at its reduce-scatter in the last micro-step */
Test(accum, fsdp_last_should_hold_every_units_unsharded_gradient_until_its_reduce_scatter) {
    ModelSpec m = tiny();
    TrainSpec t1, te, tl;
    ClusterSpec c;
    setup(&t1, &c, 1, FSDP_SYNC_EVERY);
    setup(&te, &c, 2, FSDP_SYNC_EVERY);
    setup(&tl, &c, 2, FSDP_SYNC_LAST);
    Moments k1, ke, kl;
    MemResult r1 = walk(&m, &t1, &c, STRAT_FSDP_FULL, &k1);
    MemResult re = walk(&m, &te, &c, STRAT_FSDP_FULL, &ke);
    MemResult rl = walk(&m, &tl, &c, STRAT_FSDP_FULL, &kl);
    cr_expect_eq(first_grads(&kl), psi(&m) * 4, "unpadded: each parameter's own gradient");
    /* at the root's reduce-scatter only the root's accumulated gradients are left unsharded:
       the same bytes as one micro-step's (block shards + the root's full gradient + its shard) */
    cr_expect_eq(last_backward_grads(&kl), last_backward_grads(&k1));
    /* the tied embedding's backward: the accumulated V x e gradient beside the head's half, the
       embedding's half and their sum: one V x e more than with one micro-step */
    int emb = -1;
    for (int i = 0; i < m.n_layers; i++) if (m.layers[i].kind == LAYER_EMBED) emb = i;
    cr_assert_geq(emb, 0);
    cr_assert(m.tied_embeddings);
    cr_expect_eq(backward_grads_of(&kl, emb), backward_grads_of(&k1, emb) + (double)m.layers[emb].largest_tensor * 4);
    cr_expect_eq(step_grads(&kl), step_grads(&ke));
    cr_expect_eq(rl.ms_grads, re.ms_grads);
    cr_expect_gt(rl.peak, re.peak, "last holds more gradient memory than every");
    cr_expect_gt(re.peak, r1.peak * 0.999);
    plan_model_free(&m);
}

/* MixedPrecisionPolicy(param_dtype=bf16, reduce_dtype=fp32): the unsynchronized gradients
   accumulate in the reduce dtype (set_requires_gradient_sync's docstring) */
Test(accum, fsdp_last_under_mixed_precision_should_accumulate_in_fp32) {
    ModelSpec m = tiny();
    TrainSpec t;
    ClusterSpec c;
    setup(&t, &c, 2, FSDP_SYNC_LAST);
    t.precision = PREC_MIXED_BF16;
    Moments k;
    walk(&m, &t, &c, STRAT_FSDP_FULL, &k);
    cr_expect_eq(first_grads(&k), psi(&m) * 4);
    plan_model_free(&m);
}

/* FSDP1 (--fsdp 1): every keeps the shards from the start, no_sync (last) the unsharded ones */
Test(accum, fsdp1_should_hold_shards_under_every_and_full_gradients_under_last) {
    ModelSpec m = tiny();
    TrainSpec te, tl;
    ClusterSpec c;
    setup(&te, &c, 2, FSDP_SYNC_EVERY);
    setup(&tl, &c, 2, FSDP_SYNC_LAST);
    te.fsdp_impl = tl.fsdp_impl = 1;
    MemSizes z;
    plan_memory_sizes(&m, &te, &c, STRAT_FSDP_FULL, &z);
    Moments ke, kl;
    walk(&m, &te, &c, STRAT_FSDP_FULL, &ke);
    walk(&m, &tl, &c, STRAT_FSDP_FULL, &kl);
    cr_expect_eq(first_grads(&ke), z.grads);
    cr_expect_eq(first_grads(&kl), psi(&m) * 4);
    cr_expect_eq(step_grads(&kl), z.grads);
    plan_model_free(&m);
}

/* Collectives per optimizer step: DDP and ZeRO-1 reduce once, ZeRO-2/3 and FSDP every
   micro-step; FSDP last reduce-scatters (and HSDP all-reduces) once and still all-gathers
   every micro-step */
static void sums(const CommPlan *p, CollKind op, double *count, double *payload) {
    *count = *payload = 0;
    for (int i = 0; i < p->n; i++)
        if (p->c[i].op == op) { *count += p->c[i].count; *payload += p->c[i].payload_bytes; }
}

Test(accum, collectives_per_step_should_follow_each_strategys_accumulation) {
    ModelSpec m = tiny();
    static const struct { StrategyKind k; CollKind op; int per_micro; } REDUCE[] = {
        {STRAT_DDP, COLL_ALL_REDUCE, 0}, {STRAT_ZERO1, COLL_ALL_REDUCE, 0},
        {STRAT_ZERO2, COLL_ALL_REDUCE, 1}, {STRAT_ZERO3, COLL_REDUCE_SCATTER, 1},
        {STRAT_FSDP_FULL, COLL_REDUCE_SCATTER, 1}, {STRAT_FSDP_GRAD_OP, COLL_REDUCE_SCATTER, 1},
    };
    for (size_t i = 0; i < sizeof REDUCE / sizeof REDUCE[0]; i++) {
        TrainSpec t1, t3;
        ClusterSpec c;
        setup(&t1, &c, 1, FSDP_SYNC_EVERY);
        setup(&t3, &c, 3, FSDP_SYNC_EVERY);
        CommPlan p1, p3;
        plan_comm(&m, &t1, &c, REDUCE[i].k, &p1);
        plan_comm(&m, &t3, &c, REDUCE[i].k, &p3);
        double n1, b1, n3, b3;
        sums(&p1, REDUCE[i].op, &n1, &b1);
        sums(&p3, REDUCE[i].op, &n3, &b3);
        cr_assert_gt(b1, 0, "%s", plan_strategy(REDUCE[i].k)->name);
        double x = REDUCE[i].per_micro ? 3 : 1;
        /* ZeRO-1/2 also all-reduce the 4-byte norm at the step, once */
        double norm = REDUCE[i].k == STRAT_ZERO1 || REDUCE[i].k == STRAT_ZERO2 ? 4 : 0;
        cr_expect_eq(b3 - norm, (b1 - norm) * x, "%s: reductions x%.0f", plan_strategy(REDUCE[i].k)->name, x);
        if (REDUCE[i].k != STRAT_FSDP_FULL && REDUCE[i].k != STRAT_FSDP_GRAD_OP) continue;
        /* last: one reduce-scatter per unit per step, the all-gathers unchanged */
        TrainSpec tl = t3;
        tl.fsdp_grad_sync = FSDP_SYNC_LAST;
        CommPlan pl;
        plan_comm(&m, &tl, &c, REDUCE[i].k, &pl);
        double nl, bl, ag3, agl, x3, xl;
        sums(&pl, COLL_REDUCE_SCATTER, &nl, &bl);
        cr_expect_eq(bl, b1);
        cr_expect_eq(nl, n1);
        sums(&p3, COLL_ALL_GATHER, &x3, &ag3);
        sums(&pl, COLL_ALL_GATHER, &xl, &agl);
        cr_expect_eq(agl, ag3);
        cr_expect_lt(pl.wire_bytes, p3.wire_bytes);
    }
    plan_model_free(&m);
}

Test(accum, hsdp_last_should_all_reduce_the_shards_once_per_step) {
    ModelSpec m = tiny();
    TrainSpec te, tl;
    ClusterSpec c;
    setup(&te, &c, 2, FSDP_SYNC_EVERY);
    setup(&tl, &c, 2, FSDP_SYNC_LAST);
    cluster(&c, 4, 2);   /* replicate 2 x shard 2 */
    CommPlan pe, pl;
    plan_comm(&m, &te, &c, STRAT_FSDP_HYBRID, &pe);
    plan_comm(&m, &tl, &c, STRAT_FSDP_HYBRID, &pl);
    double ne, be, nl, bl;
    sums(&pe, COLL_ALL_REDUCE, &ne, &be);
    sums(&pl, COLL_ALL_REDUCE, &nl, &bl);
    cr_assert_gt(be, 0);
    cr_expect_eq(be, 2 * bl);
    cr_expect_eq(ne, 2 * nl);
    plan_model_free(&m);
}

/* The simulated step issues the reduce-scatters in the last micro-step only under last. Its
   compute is the same as every micro-step syncing's where the collectives take nothing from it
   (a measured steal of ~0: plan_coll_steal returns it); with the SM rule each compute is
   stretched by at most the steal x the communication that runs beside it, by how much depends
   on what overlaps what (here last's is the longer: its gathers overlap more compute once the
   reduce-scatters no longer hold the stream), so the bound is asserted */
Test(accum, simulated_step_under_last_should_send_less_and_not_take_longer) {
    ModelSpec m = zoo("gpt2");
    TrainSpec te, tl;
    ClusterSpec c;
    plan_train_defaults(&te);
    te.grad_accum = 4;
    tl = te;
    tl.fsdp_grad_sync = FSDP_SYNC_LAST;
    cluster(&c, 8, 8);
    SimResult se, sl;
    cr_assert_eq(plan_sim(&m, &te, &c, STRAT_FSDP_FULL, 0, &se), 0);
    cr_assert_eq(plan_sim(&m, &tl, &c, STRAT_FSDP_FULL, 0, &sl), 0);
    cr_expect_lt(sl.comm_s, se.comm_s);
    cr_expect_leq(sl.step_s, se.step_s);
    ClusterSpec c0 = c;
    c0.comm_steal = 1e-300;   /* "measured" and nothing: no SMs taken */
    SimResult be, bl;
    cr_assert_eq(plan_sim(&m, &te, &c0, STRAT_FSDP_FULL, 0, &be), 0);
    cr_assert_eq(plan_sim(&m, &tl, &c0, STRAT_FSDP_FULL, 0, &bl), 0);
    cr_expect_eq(bl.compute_s, be.compute_s);
    double k = plan_coll_steal(&c, 0);
    cr_expect(se.compute_s > be.compute_s && se.compute_s <= be.compute_s + k * se.comm_s, "every: %.9f of %.9f", se.compute_s,
              be.compute_s);
    cr_expect(sl.compute_s > bl.compute_s && sl.compute_s <= bl.compute_s + k * sl.comm_s, "last: %.9f of %.9f", sl.compute_s,
              bl.compute_s);
    plan_model_free(&m);
}
