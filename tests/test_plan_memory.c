/* test_plan_memory.c — the zoo's exact parameter counts, the ZeRO paper's Figure 1, each
 * memory term against its formula, the peak-over-phases rule and the largest micro-batch. */
#include <criterion/criterion.h>
#include <math.h>
#include <string.h>

#include "plan_activ.h"
#include "plan_cost.h"
#include "plan_load.h"
#include "plan_time.h"
#include "plan_memory.h"
#include "plan_plan.h"
#include "plan_zoo.h"
#include "test_plan.h"

Test(zoo, parameter_counts_should_equal_the_reference_implementations) {
    static const struct { const char *name; long long params; } REF[] = {
        {"gpt2", 124439808LL}, {"gpt2-medium", 354823168LL}, {"gpt2-large", 774030080LL},
        {"gpt2-xl", 1557611200LL}, {"llama2-7b", 6738415616LL}, {"llama2-13b", 13015864320LL},
        {"llama2-70b", 68976648192LL}, {"bert-base", 109514298LL}, {"bert-large", 335174458LL},
        {"resnet50", 25557032LL},
    };
    for (size_t i = 0; i < sizeof(REF) / sizeof(REF[0]); i++) {
        ModelSpec m = zoo(REF[i].name);
        cr_expect_eq(plan_model_params(&m), REF[i].params, "%s: %lld != %lld", REF[i].name,
                     (long long)plan_model_params(&m), REF[i].params);
        plan_model_free(&m);
    }
}

Test(zoo, resnet50_should_keep_53_batchnorm_layers_with_their_channels) {
    ModelSpec m = zoo("resnet50");
    int64_t sum = 0;
    cr_expect_eq(plan_model_bn_layers(&m, &sum), 53);
    cr_expect_eq(sum, 26560);
    plan_model_free(&m);
}

Test(zoo, unknown_model_should_be_refused_with_the_nearest_names) {
    ModelSpec m;
    char msg[512];
    cr_assert_eq(plan_zoo_build(&m, "gpt5", msg, sizeof(msg)), -1);
    cr_expect(strstr(msg, "gpt5") && strstr(msg, "nearest: gpt2;") && strstr(msg, "`memplan models` lists all"), "%s", msg);
}

/* ZeRO paper Figure 1: Ψ = 7.5B, N = 64, K = 12 (mixed precision Adam). */
Test(memory, model_states_should_match_zero_paper_figure_1) {
    ModelSpec m;
    char msg[256];
    cr_assert_eq(plan_model_generic(&m, "generic", 7500000000LL, 32, msg, sizeof(msg)), 0);
    TrainSpec t;
    plan_train_defaults(&t);
    t.precision = PREC_MIXED_FP16;
    t.optimizer = OPT_ADAM;
    ClusterSpec c;
    cluster(&c, 64, 8);
    t.impl = IMPL_ENGINE;   /* the paper's accounting: ZeRO-1 keeps full gradients */
    static const struct { StrategyKind k; double gb; } EXP[] = {
        {STRAT_DDP, 120.0}, {STRAT_ZERO1, 31.4}, {STRAT_ZERO2, 16.6}, {STRAT_ZERO3, 1.875},
    };
    for (size_t i = 0; i < 4; i++) {
        MemResult r;
        plan_memory(&m, &t, &c, EXP[i].k, &r);
        cr_expect(fabs(r.model_states / 1e9 - EXP[i].gb) < 0.05, "%s: %.4f GB, expected %.3f",
                  plan_strategy(EXP[i].k)->name, r.model_states / 1e9, EXP[i].gb);
    }
    /* DeepSpeed as it runs: ZeRO-1 also keeps only grads_in_partition after the reduction, so
       its model states are ZeRO-2's (docs/formulas.md "DeepSpeed ZeRO-2 gradients") */
    t.impl = IMPL_PYTORCH;
    MemResult a, b;
    plan_memory(&m, &t, &c, STRAT_ZERO1, &a);
    plan_memory(&m, &t, &c, STRAT_ZERO2, &b);
    cr_expect_eq(a.model_states, b.model_states);
    cr_expect(a.model_states / 1e9 < 17.0, "%.4f GB", a.model_states / 1e9);
    /* the split as DeepSpeed allocates it (stage_1_and_2.py), by hand: the flat 16-bit group
       padded to 2 x 64 = 128 elements (7.5e9 is a multiple: 15e9 B), each rank's partition
       117,187,500 elements with its fp32 master and Adam's m and v (12 B each), and
       grads_in_partition: each rank's partition lies inside one 234,375,000-element layer (a
       generic model's layers are one tensor each), held whole in bf16, + the fp32 norm */
    cr_expect_eq(a.ms_params, 15e9);
    cr_expect_eq(a.ms_optimizer, 117187500.0 * 12);
    cr_expect_eq(a.ms_grads, 234375000.0 * 2 + 4);
    plan_model_free(&m);
}

Test(memory, ddp_should_keep_a_bucket_copy_of_gradients_unless_grads_are_bucket_views) {
    ModelSpec m = zoo("gpt2");
    TrainSpec t;
    plan_train_defaults(&t);
    ClusterSpec c;
    cluster(&c, 8, 8);
    MemResult r;
    plan_memory(&m, &t, &c, STRAT_DDP, &r);
    double psi = (double)plan_model_params(&m);
    cr_expect_eq(r.term[TERM_PARAMS], 4 * psi);          /* amp: fp32 params */
    cr_expect_eq(r.term[TERM_COMM], 4 * psi);            /* fp32 bucket copy */
    cr_expect_eq(r.term[TERM_OPTIMIZER], 8 * psi);       /* AdamW m, v fp32 */
    t.grad_as_bucket_view = 1;
    plan_memory(&m, &t, &c, STRAT_DDP, &r);
    cr_expect_eq(r.term[TERM_COMM], 0);
    plan_model_free(&m);
}

Test(memory, sharded_terms_should_use_per_unit_padding_to_a_multiple_of_n) {
    ModelSpec m = zoo("gpt2-xl");
    TrainSpec t;
    plan_train_defaults(&t);
    ClusterSpec c;
    cluster(&c, 7, 7);     /* 7 does not divide most unit sizes */
    /* FSDP1: one flat root unit (everything outside the blocks) and one per block */
    MemSizes z;
    t.fsdp_impl = 1;
    plan_memory_sizes(&m, &t, &c, STRAT_FSDP_FULL, &z);
    cr_expect_eq(z.dim0, 0);
    double expect = 0, root = 0;
    for (int i = 0; i < m.n_layers; i++) {
        if (m.layers[i].kind == LAYER_BLOCK) expect += ceil((double)m.layers[i].params / 7.0);
        else root += (double)m.layers[i].params;
    }
    expect += ceil(root / 7.0);
    cr_expect_eq(z.psi_shard, expect);
    cr_expect_eq(z.params, 4 * expect);
    cr_expect_eq(z.optimizer, 8 * expect);
    cr_expect_gt(z.psi_shard * 7, z.psi);
    /* FSDP2 (the default) pads each tensor's dim 0 instead (docs/formulas.md "FSDP2 buffers") */
    t.fsdp_impl = 2;
    plan_memory_sizes(&m, &t, &c, STRAT_FSDP_FULL, &z);
    cr_expect_eq(z.dim0, 1);
    double d0 = 0;
    for (int i = 0; i < m.n_layers; i++) d0 += (double)plan_layer_shard_dim0(&m.layers[i], 7);
    cr_expect_eq(z.psi_shard, d0);
    cr_expect_eq(z.params, 4 * d0);
    /* ZeRO-1/2 shard every layer on its own */
    plan_memory_sizes(&m, &t, &c, STRAT_ZERO2, &z);
    expect = 0;
    for (int i = 0; i < m.n_layers; i++) expect += ceil((double)m.layers[i].params / 7.0);
    cr_expect_eq(z.psi_shard, expect);
    cr_expect_eq(z.grads, 4 * expect);
    plan_model_free(&m);
}

Test(memory, overhead_should_be_context_plus_cublas_plus_nccl_plus_margin) {
    ModelSpec m = zoo("gpt2");
    TrainSpec t;
    plan_train_defaults(&t);
    ClusterSpec c;
    cluster(&c, 8, 8);
    MemResult r;
    plan_memory(&m, &t, &c, STRAT_ZERO2, &r);
    double managed = 0;
    for (int k = 0; k < TERM_OVERHEAD; k++) managed += r.term[k];
    double expect = c.cuda_context + c.gpu.cublas_ws_bytes + c.nccl_per_comm + 0.05 * managed;
    cr_expect(fabs(r.term[TERM_OVERHEAD] - expect) < 1, "%f vs %f", r.term[TERM_OVERHEAD], expect);
    double sum = 0;
    for (int k = 0; k < TERM_COUNT; k++) sum += r.term[k];
    cr_expect(fabs(sum - r.peak) < 1e-3 * r.peak, "terms should add up to the peak");
    /* one GPU: no NCCL communicator */
    cluster(&c, 1, 1);
    plan_memory(&m, &t, &c, STRAT_DDP, &r);
    cr_expect_eq(r.nccl, 0);
    plan_model_free(&m);
}

Test(memory, peak_should_be_the_largest_phase_total_not_a_sum_of_term_maxima) {
    ModelSpec m = zoo("gpt2");
    TrainSpec t;
    plan_train_defaults(&t);
    t.micro_batch = 4;
    ClusterSpec c;
    cluster(&c, 8, 8);
    MemResult r;
    plan_memory(&m, &t, &c, STRAT_DDP, &r);
    double mx = 0;
    for (int k = 0; k < PHASE_COUNT; k++) if (r.phase_peak[k] > mx) mx = r.phase_peak[k];
    cr_expect_eq(r.peak, mx);
    /* activations peak in backward, the optimizer temporary in the step: never both */
    cr_expect_gt(r.phase_peak[PHASE_BACKWARD], r.phase_peak[PHASE_STEP]);
    double psi = (double)plan_model_params(&m);
    cr_expect_eq(r.term[TERM_TRANSIENT] == 4 * psi, 0, "the optimizer temporary is not in the backward peak");
    plan_model_free(&m);
}

Test(activations, gpt2_eager_blocks_should_match_the_measured_hugging_face_coefficients) {
    ModelSpec m = zoo("gpt2");
    TrainSpec t;
    plan_train_defaults(&t);
    t.attn = ATTN_EAGER;
    double h = 768, a = 12, lin, quad;
    t.precision = PREC_AMP_BF16;
    plan_act_block_coeffs(&m, &t, 0.1, 0, &lin, &quad);
    cr_expect_eq(lin, 86 * h + 16);
    cr_expect_eq(quad, 7 * a);
    t.precision = PREC_FP32;
    plan_act_block_coeffs(&m, &t, 0.1, 0, &lin, &quad);
    cr_expect_eq(lin, 114 * h + 16);
    cr_expect_eq(quad, 9 * a);
    /* pure bf16 with a fused GELU is Megatron's 34 s b h + 5 a s^2 b */
    m.mlp = MLP_GELU;
    t.precision = PREC_BF16;
    plan_act_block_coeffs(&m, &t, 0.1, 0, &lin, &quad);
    cr_expect_eq(lin, 34 * h + 16);
    cr_expect_eq(quad, 5 * a);
    /* SDPA drops the s^2 term and keeps an fp32 log-sum-exp per head */
    t.attn = ATTN_SDPA;
    plan_act_block_coeffs(&m, &t, 0.1, 0, &lin, &quad);
    cr_expect_eq(quad, 0);
    cr_expect_eq(lin, 34 * h + 16 + 4 * a);
    plan_model_free(&m);
}

Test(activations, checkpointing_should_keep_only_block_inputs) {
    ModelSpec m = zoo("gpt2");
    TrainSpec t;
    plan_train_defaults(&t);
    t.micro_batch = 2;
    ClusterSpec c;
    cluster(&c, 1, 1);
    MemResult full, ck;
    plan_memory(&m, &t, &c, STRAT_DDP, &full);
    t.act_ckpt = CKPT_FULL;
    plan_memory(&m, &t, &c, STRAT_DDP, &ck);
    cr_expect_lt(ck.peak, full.peak);
    ActInputs in = {2, 1024, 0.1};
    cr_expect_eq(plan_act_ckpt_bytes(&m, 1, &t, &in), 2.0 * 1024 * 4 * 768);
    plan_model_free(&m);
}

/* Batch b fits and b + 1 does not. */
static void expect_boundary(const ModelSpec *m, const TrainSpec *t, const ClusterSpec *c, StrategyKind s, int64_t b) {
    TrainSpec u = *t;
    MemResult r;
    u.micro_batch = b;
    plan_memory(m, &u, c, s, &r);
    cr_expect(r.fits, "batch %lld should fit", (long long)b);
    u.micro_batch = b + 1;
    plan_memory(m, &u, c, s, &r);
    cr_expect(!r.fits, "batch %lld should not fit", (long long)b + 1);
}

Test(memory, max_micro_batch_should_be_the_largest_batch_that_fits) {
    ModelSpec m = zoo("gpt2-medium");
    TrainSpec t;
    plan_train_defaults(&t);
    ClusterSpec c;
    cluster(&c, 8, 8);
    int64_t b = plan_max_micro_batch(&m, &t, &c, STRAT_DDP, 65536);
    cr_assert_gt(b, 0);
    expect_boundary(&m, &t, &c, STRAT_DDP, b);
    plan_model_free(&m);
}

/* Far above the affine bound from batches 1 and 2 (resnet50 at 32 x 32 with --autocast cpu: the
   bound says 3,708, the answer is above 20,000) the search gallops and bisects instead of walking
   batch by batch (19,591 probes, 9 s for one strategy), and still lands on a boundary. */
Test(memory, max_micro_batch_should_find_a_boundary_far_above_the_affine_bound) {
    ModelSpec m = zoo("resnet50");
    TrainSpec t;
    plan_train_defaults(&t);
    t.precision = PREC_FP32;
    t.autocast_cpu = 1;
    t.seq = 32;
    ClusterSpec c;
    cluster(&c, 2, 2);
    int64_t b = plan_max_micro_batch(&m, &t, &c, STRAT_DDP, 65536);
    cr_assert_gt(b, 10000, "%lld", (long long)b);
    expect_boundary(&m, &t, &c, STRAT_DDP, b);
    plan_model_free(&m);
}

/* The printed max micro-batch is the boundary the search's bisection finds (fits(b), not
   fits(b + 1)); where fits is monotone over the batches scanned that is the largest batch that
   fits, which a linear scan of every batch's verdict finds. Four models x seven strategies on
   GPUs small enough to scan (answers 0-41); a non-monotone scan must still end on a boundary. */
Test(memory, max_micro_batch_should_equal_a_linear_scan_where_fits_is_monotone) {
    static const struct { const char *model; double gib; int64_t n; } CASES[] = {
        {"gpt2", 12, 12}, {"bert-base", 6, 16}, {"gpt2-medium", 12, 6}, {"resnet50", 3, 48},
    };
    int monotone = 0, scanned = 0;
    for (size_t i = 0; i < sizeof CASES / sizeof CASES[0]; i++) {
        ModelSpec m = zoo(CASES[i].model);
        TrainSpec t;
        plan_train_defaults(&t);
        ClusterSpec c;
        cluster(&c, 4, 4);
        c.gpu.mem_bytes = CASES[i].gib * 1024 * 1024 * 1024;
        for (int k = 0; k < STRAT_COUNT; k++) {
            int fits[64] = {0}, last = 0, mono = 1;
            int64_t n = CASES[i].n;
            for (int64_t b = 1; b <= n + 1; b++) {   /* the batch above the range too */
                TrainSpec u = t;
                u.micro_batch = b;
                fits[b] = plan_memory_fits(&m, &u, &c, (StrategyKind)k);
                if (fits[b] && b <= n) {
                    if (last != b - 1) mono = 0;
                    last = (int)b;
                }
            }
            int64_t got = plan_max_micro_batch(&m, &t, &c, (StrategyKind)k, n);
            scanned++;
            cr_expect(got == 0 ? !fits[1] : fits[got] && (got == n || !fits[got + 1]),
                      "%s %s: %lld is no boundary", CASES[i].model, plan_strategy((StrategyKind)k)->name, (long long)got);
            cr_expect(got < n, "%s %s: the range should hold the boundary", CASES[i].model,
                      plan_strategy((StrategyKind)k)->name);
            if (!mono) continue;
            monotone++;
            cr_expect_eq(got, last, "%s %s: search %lld, linear scan %d", CASES[i].model,
                         plan_strategy((StrategyKind)k)->name, (long long)got, last);
        }
        plan_model_free(&m);
    }
    cr_expect_geq(monotone, scanned - 2, "%d of %d scans monotone", monotone, scanned);
}

/* The search's probes depend on the setup alone: a plan asked at micro-batch 1, 2 or 5 (whose
   row's verdict the search reads as a kept probe) prints the same max micro-batch. */
Test(memory, max_micro_batch_should_not_depend_on_the_batch_the_plan_was_asked_at) {
    ModelSpec m = zoo("bert-base");
    TrainSpec t;
    plan_train_defaults(&t);
    ClusterSpec c;
    cluster(&c, 4, 4);
    c.gpu.mem_bytes = 6.0 * 1024 * 1024 * 1024;
    int64_t first[STRAT_COUNT] = {0};
    const int64_t batches[] = {1, 2, 5};
    for (size_t i = 0; i < sizeof batches / sizeof batches[0]; i++) {
        t.micro_batch = batches[i];
        Plan p;
        plan_run(&m, &t, &c, (1u << STRAT_COUNT) - 1, &p);
        for (int r = 0; r < p.n_rows; r++) {
            int64_t mb = p.rows[r].max_micro_batch;
            if (i == 0) first[r] = mb;
            cr_expect_eq(mb, first[r], "%s at batch %lld: %lld, at batch 1: %lld", plan_strategy(p.rows[r].kind)->name,
                         (long long)batches[i], (long long)mb, (long long)first[r]);
            cr_expect_gt(mb, 2, "%s", plan_strategy(p.rows[r].kind)->name);
        }
        plan_free(&p);
    }
    plan_model_free(&m);
}

Test(memory, more_gpus_should_never_raise_per_gpu_model_states) {
    ModelSpec m = zoo("llama2-7b");
    TrainSpec t;
    plan_train_defaults(&t);
    for (int k = 0; k < STRAT_COUNT; k++) {
        double prev = INFINITY;
        for (int64_t n = 1; n <= 4096; n *= 2) {
            ClusterSpec c;
            cluster(&c, n, n < 8 ? n : 8);
            MemResult r;
            plan_memory(&m, &t, &c, (StrategyKind)k, &r);
            cr_expect_leq(r.model_states, prev, "%s at %lld GPUs", plan_strategy((StrategyKind)k)->name, (long long)n);
            prev = r.model_states;
        }
    }
    plan_model_free(&m);
}

/* plan's pick is auto's rule over its rows (plan_auto_recommend): a row that leaves the safety
   margin (5 % of the GPU, at least 512 MiB), within 3 % of the fastest such row, and the simplest
   of those; gpt2-xl on 24 GiB GPUs: DDP does not fit, so a sharded strategy. */
static void expect_autos_rule(const Plan *p, const ClusterSpec *c) {
    cr_assert_geq(p->recommended, 0);
    double margin = fmax(0.05 * c->gpu.mem_bytes, 512.0 * 1024 * 1024), top = 0;
    for (int i = 0; i < p->n_rows; i++)
        if (p->rows[i].mem.fits && p->rows[i].mem.headroom >= margin && p->rows[i].time.tokens_per_s > top)
            top = p->rows[i].time.tokens_per_s;
    const StrategyPlan *w = &p->rows[p->recommended];
    cr_expect_geq(w->mem.headroom, margin);
    cr_expect_geq(w->time.tokens_per_s, 0.97 * top * (1 - 1e-9));
    for (int i = 0; i < p->n_rows; i++)   /* no simpler row within 3 % leaves the margin */
        if (plan_strategy(p->rows[i].kind)->simplicity < plan_strategy(w->kind)->simplicity)
            cr_expect(!(p->rows[i].mem.headroom >= margin && p->rows[i].time.tokens_per_s >= 0.97 * top),
                      "%s is simpler and as good", plan_strategy(p->rows[i].kind)->name);
    cr_expect(strstr(p->reason, "safety margin"), "%s", p->reason);
}

Test(plan, should_recommend_by_autos_rule_and_shard_when_ddp_does_not_fit) {
    ModelSpec m = zoo("gpt2");
    TrainSpec t;
    plan_train_defaults(&t);
    ClusterSpec c;
    cluster(&c, 8, 8);
    Plan p;
    plan_run(&m, &t, &c, (1u << STRAT_COUNT) - 1, &p);
    expect_autos_rule(&p, &c);
    plan_free(&p);
    plan_model_free(&m);
    m = zoo("gpt2-xl");
    c.gpu.mem_bytes = 24.0 * 1024 * 1024 * 1024;
    plan_run(&m, &t, &c, (1u << STRAT_COUNT) - 1, &p);
    cr_expect(!p.rows[0].mem.fits, "DDP should not fit gpt2-xl in 24 GiB");
    expect_autos_rule(&p, &c);
    cr_expect_neq(p.rows[p.recommended].kind, STRAT_DDP);
    plan_free(&p);
    plan_model_free(&m);
}

Test(memory, absurd_sizes_should_plan_without_overflow) {
    ModelSpec m;
    char msg[256];
    cr_assert_eq(plan_model_generic(&m, "huge", 1000000000000000LL, 32, msg, sizeof(msg)), 0);
    TrainSpec t;
    plan_train_defaults(&t);
    ClusterSpec c;
    cluster(&c, 1000000, 8);
    Plan p;
    plan_run(&m, &t, &c, (1u << STRAT_COUNT) - 1, &p);
    for (int i = 0; i < p.n_rows; i++) {
        cr_expect(isfinite(p.rows[i].mem.peak) && p.rows[i].mem.peak > 0);
        cr_expect_geq(p.rows[i].max_micro_batch, 0);
    }
    cr_expect(!p.rows[0].mem.fits, "DDP cannot hold 1e15 parameters");
    plan_model_free(&m);
}

/* --act-ckpt every:N (docs/formulas.md "Selective checkpointing"): blocks N, 2N, ... counted
   from 1 are checkpointed, as torchtitan's layer-frequency selective AC chose them; every:1 is
   full; anything else is refused. */
Test(memory, every_n_checkpointing_should_checkpoint_blocks_n_2n_counted_from_one) {
    CkptKind k;
    int n;
    cr_expect_eq(plan_ckpt_parse("every:2", &k, &n), 0);
    cr_expect(k == CKPT_EVERY && n == 2);
    cr_expect_eq(plan_ckpt_parse("every:1", &k, &n), 0);
    cr_expect(k == CKPT_FULL, "every block is full checkpointing");
    cr_expect_eq(plan_ckpt_parse("full", &k, &n), 0);
    cr_expect(k == CKPT_FULL && n == 1);
    const char *bad[] = {"every:0", "every:", "every:x", "every:2x", "every:-1", "every:1000000", "sometimes"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) cr_expect_eq(plan_ckpt_parse(bad[i], &k, &n), -1, "%s", bad[i]);
    ModelSpec m = zoo("gpt2-mini");   /* embeddings, 4 blocks, final norm, head */
    TrainSpec t;
    plan_train_defaults(&t);
    t.act_ckpt = CKPT_EVERY;
    t.ckpt_every = 2;
    int got[8] = {0}, k1 = 0;
    for (int i = 0; i < m.n_layers; i++)
        if (m.layers[i].kind == LAYER_BLOCK) got[++k1] = plan_act_checkpointed(&m, &t, i);
    cr_expect(!got[1] && got[2] && !got[3] && got[4], "blocks 2 and 4 of 4");
    t.ckpt_every = 3;
    k1 = 0;
    for (int i = 0; i < m.n_layers; i++)
        if (m.layers[i].kind == LAYER_BLOCK) got[++k1] = plan_act_checkpointed(&m, &t, i);
    cr_expect(!got[1] && !got[2] && got[3] && !got[4], "block 3 of 4");
    char buf[24];
    cr_expect_str_eq(plan_ckpt_label(&t, buf, sizeof buf), "every:3");
    plan_model_free(&m);
}

Test(memory, every_n_checkpointing_should_save_between_none_and_full) {
    ModelSpec m = zoo("gpt2");
    TrainSpec t;
    plan_train_defaults(&t);
    t.micro_batch = 4;
    ClusterSpec c;
    cluster(&c, 8, 8);
    double fwd[3];
    const struct { CkptKind k; int n; } POL[3] = {{CKPT_NONE, 0}, {CKPT_EVERY, 2}, {CKPT_FULL, 1}};
    for (int i = 0; i < 3; i++) {
        t.act_ckpt = POL[i].k;
        t.ckpt_every = POL[i].n;
        MemResult r;
        plan_memory(&m, &t, &c, STRAT_DDP, &r);
        fwd[i] = r.phase_peak[PHASE_FORWARD];
    }
    cr_expect_gt(fwd[0], fwd[1]);
    cr_expect_gt(fwd[1], fwd[2]);
    /* half of the 12 blocks keep everything, half only their input: the saved activations at
       the end of forward are halfway */
    double mid = (fwd[0] + fwd[2]) / 2;
    cr_expect(fabs(fwd[1] - mid) < 0.02 * mid, "%.0f vs halfway %.0f", fwd[1], mid);
    plan_model_free(&m);
}

/* --act-ckpt op and selective parse; "every" alone is no policy. */
Test(memory, op_and_selective_should_parse_and_every_alone_should_not) {
    CkptKind k;
    int n;
    cr_expect_eq(plan_ckpt_parse("op", &k, &n), 0);
    cr_expect(k == CKPT_OP);
    cr_expect_eq(plan_ckpt_parse("selective", &k, &n), 0);
    cr_expect(k == CKPT_SELECTIVE);
    cr_expect_eq(plan_ckpt_parse("every", &k, &n), -1);
    TrainSpec t;
    plan_train_defaults(&t);
    t.act_ckpt = CKPT_OP;
    char buf[24];
    cr_expect_str_eq(plan_ckpt_label(&t, buf, sizeof buf), "op");
}

/* torchtitan's SelectiveAC: a projection without a bias runs aten.mm, counted, every second
   recomputed (LLaMA: q, v, gate, down saved; k, o, up recomputed); a projection with one runs
   aten.addmm, always saved (GPT-2's Conv1D). */
Test(memory, op_checkpointing_should_recompute_every_second_mm_and_save_every_addmm) {
    ModelSpec l = zoo("llama2-7b"), g = zoo("gpt2");
    int blk = 1;   /* layer 0 is the embeddings */
    cr_assert_eq(l.layers[blk].kind, LAYER_BLOCK);
    PlanProj p[PLAN_MAX_PROJ];
    cr_assert_eq(plan_act_block_projs(&l, &l.layers[blk], p), 7);
    const int want[7] = {1, 0, 1, 0, 1, 0, 1};
    for (int k = 0; k < 7; k++) cr_expect_eq(plan_act_proj_saved(&l, &l.layers[blk], k), want[k], "projection %d", k);
    int ng = plan_act_block_projs(&g, &g.layers[blk], p);
    cr_assert_eq(ng, 4, "c_attn, c_proj, c_fc, c_proj");
    for (int k = 0; k < ng; k++) cr_expect(plan_act_proj_saved(&g, &g.layers[blk], k), "Conv1D %d is an addmm", k);
    plan_model_free(&l);
    plan_model_free(&g);
}

/* gpt2-mini, fp32, eager, CPU kernels, s 128: block_probe.py --act-ckpt op measured 7,168 B per
   token retained by a block's forward beyond its output, and a backward working set of 12,816
   B/token above the start (the incoming gradient, R·h = 512, already counted there): the input
   (512) plus c_attn (1,536), c_proj (512), c_fc (2,048), c_proj (512), the scores bmm
   (4·4·128 = 2,048) and the context bmm (512). */
Test(memory, op_checkpointing_should_keep_the_saved_ops_outputs_as_measured) {
    ModelSpec m = zoo("gpt2-mini");
    TrainSpec t;
    plan_train_defaults(&t);
    t.precision = PREC_FP32;
    t.attn = ATTN_EAGER;
    t.autocast_cpu = 1;
    t.act_ckpt = CKPT_OP;
    ActInputs in = {2, 128, 0};
    double tok = 2.0 * 128;
    cr_expect_float_eq(plan_act_ckpt_bytes(&m, 2, &t, &in) / tok, 512 + 7168, 1e-9);
    cr_expect_float_eq(plan_act_block_backward_bytes(&m, 2, &t, &in) / tok, 12816 + 512, 1e-9);
    /* under full checkpointing the same block keeps its input only */
    t.act_ckpt = CKPT_FULL;
    cr_expect_float_eq(plan_act_ckpt_bytes(&m, 2, &t, &in) / tok, 512, 1e-9);
    plan_model_free(&m);
}

/* Megatron's selective recompute: a block keeps all but its core attention's saved tensors,
   its q, k, v inputs instead: eager attention loses its s-proportional terms (the
   probabilities), SDPA only its log-sum-exp (4 B per head and token). */
Test(memory, selective_should_drop_the_core_attentions_saved_tensors) {
    ModelSpec m = zoo("gpt2-mini");
    TrainSpec t;
    plan_train_defaults(&t);
    t.precision = PREC_FP32;
    t.attn = ATTN_EAGER;
    t.autocast_cpu = 1;
    ActInputs in = {1, 128, 0};
    double none = plan_act_ckpt_bytes(&m, 2, &t, &in);
    t.act_ckpt = CKPT_SELECTIVE;
    double sel = plan_act_ckpt_bytes(&m, 2, &t, &in);
    cr_expect_float_eq(none - sel, 128.0 * 4 * 4 * 128, 1e-9, "the fp32 probabilities, a·s per token");
    cr_expect(!plan_act_checkpointed(&m, &t, 2) && plan_act_core_recomputed(&m, &t, 2));
    t.attn = ATTN_SDPA;
    t.act_ckpt = CKPT_NONE;
    none = plan_act_ckpt_bytes(&m, 2, &t, &in);
    t.act_ckpt = CKPT_SELECTIVE;
    cr_expect_float_eq(none - plan_act_ckpt_bytes(&m, 2, &t, &in), 128.0 * 4 * 4, 1e-9, "the log-sum-exp");
    plan_model_free(&m);
}

/* Recompute in time: op recomputes less than full (its saved GEMMs are not run again),
   selective only the core attention. */
Test(memory, partial_policies_should_recompute_less_than_full) {
    ModelSpec m = zoo("llama2-7b");
    TrainSpec t;
    plan_train_defaults(&t);
    t.seq = 4096;
    ClusterSpec c;
    cluster(&c, 8, 8);
    double f[5], b[5];
    const CkptKind K[5] = {CKPT_NONE, CKPT_FULL, CKPT_OP, CKPT_SELECTIVE, CKPT_NONE};
    for (int i = 0; i < 4; i++) {
        t.act_ckpt = K[i];
        t.ckpt_every = K[i] == CKPT_FULL;
        plan_layer_seconds(&m, 1, &t, &c, &f[i], &b[i]);
    }
    cr_expect_float_eq(f[2], f[0], 1e-12, "forward is the same");
    cr_expect_gt(b[1], b[2]);
    cr_expect_gt(b[2], b[0]);
    cr_expect_gt(b[3], b[0]);
    cr_expect_gt(b[2], b[3], "op recomputes every elementwise op and three GEMMs");
    plan_model_free(&m);
}

/* torchtitan's published op-level SAC runs (bench/published/torchtitan.json) back --act-ckpt
   op's times on FSDP on A100; selective has no published run and stays an estimate. */
Test(memory, op_times_should_be_backed_by_the_published_runs_and_selective_should_not) {
    ModelSpec m = zoo("llama2-13b");
    TrainSpec t;
    plan_train_defaults(&t);
    t.precision = PREC_MIXED_BF16;
    t.seq = 4096;
    ClusterSpec c;
    cluster(&c, 64, 8);
    c.gpu = *plan_gpu_by_name("a100-80gb");
    t.act_ckpt = CKPT_OP;
    TimeBasis b = plan_time_basis(&m, &t, &c, STRAT_FSDP_FULL);
    cr_expect(b.published, "%s", b.why);
    t.act_ckpt = CKPT_SELECTIVE;
    b = plan_time_basis(&m, &t, &c, STRAT_FSDP_FULL);
    cr_expect(!b.published);
    plan_model_free(&m);
}

/* Selective recompute with eager attention at s512: the recomputed core's softmax backward is
   the block's largest moment (block_probe.py, llama-mini fp32: 18,940 B/token above the block
   backward's start, + the incoming R·h = 512); at s128 the MLP moment stays (2,816 + 512). */
Test(memory, selective_should_take_the_recomputed_attentions_backward_when_it_is_larger) {
    ModelSpec m;
    char msg[256];
    cr_assert_eq(plan_load_model(&m, "bench/torch/configs/llama-mini.json", msg, sizeof msg), 0, "%s", msg);
    TrainSpec t;
    plan_train_defaults(&t);
    t.precision = PREC_FP32;
    t.attn = ATTN_EAGER;
    t.autocast_cpu = 1;
    t.act_ckpt = CKPT_SELECTIVE;
    ActInputs in = {1, 512, 0};
    cr_expect_float_eq(plan_act_block_backward_bytes(&m, 1, &t, &in) / 512, 18940 + 512, 1e-9);
    in.s = 128;
    cr_expect_float_eq(plan_act_block_backward_bytes(&m, 1, &t, &in) / 128, 2816 + 512, 1e-9);
    plan_model_free(&m);
}

/* The same moment under op (block_probe.py, llama-mini fp32 eager, s512: 15,748 B/token measured,
   the model 512 over), and not at s128, where the recomputed MLP moment is measured (9,864). */
Test(memory, op_should_take_the_attention_backward_at_long_eager_sequences) {
    ModelSpec m;
    char msg[256];
    cr_assert_eq(plan_load_model(&m, "bench/torch/configs/llama-mini.json", msg, sizeof msg), 0, "%s", msg);
    TrainSpec t;
    plan_train_defaults(&t);
    t.precision = PREC_FP32;
    t.attn = ATTN_EAGER;
    t.autocast_cpu = 1;
    t.act_ckpt = CKPT_OP;
    ActInputs in = {1, 512, 0};
    cr_expect_float_eq(plan_act_block_backward_bytes(&m, 1, &t, &in) / 512, 15748 + 512 + 512, 1e-9);
    in.s = 128;
    cr_expect_float_eq(plan_act_block_backward_bytes(&m, 1, &t, &in) / 128, 9864 + 512, 1e-9);
    plan_model_free(&m);
}
