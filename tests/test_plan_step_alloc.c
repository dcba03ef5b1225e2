/* test_plan_step_alloc.c — the step account replayed through the caching allocator model
 * (plan_step_alloc.h; docs/formulas.md "The allocator in the plan"): how the account's
 * events become allocations and frees, worked out by hand from the allocator's rules (sizes
 * above 1 MiB: the large pool; a request below 10 MiB opens a 20 MiB segment, a larger one a
 * segment of its size rounded to 2 MiB; a free block is split when more than 1 MiB remains), and
 * the plan's overhead taken from it over the matrix of models and strategies. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "plan_activ.h"
#include "plan_dim_ft.h"
#include "plan_memory.h"
#include "plan_step_alloc.h"
#include "test_plan.h"

#define MiB (1024.0 * 1024.0)

/* An empty account of a one-layer step: points 0..12 (plan_step_point). */
static Step empty_step(void) {
    Step st;
    memset(&st, 0, sizeof(st));
    st.n_layers = 1;
    st.n_points = 13;
    st.sampled = calloc(13, 1);
    cr_assert_not_null(st.sampled);
    return st;
}

/* The replay of one step of st from an empty cache, with settings c. */
static PlanAllocStats run_one(const Step *st, const PlanAllocConfig *c) {
    StepAllocOpts o;
    StepAllocResult r;
    plan_step_alloc_opts_default(&o);
    o.steps = 1;
    cr_assert_eq(plan_step_alloc_with(st, c, &o, &r), 0);
    return r.whole;
}

/* The replay of one step of st as the account of model m's layers (NULL: no layers to split
   by), at torch's default settings. */
static PlanAllocStats run(const Step *st, const ModelSpec *m) {
    PlanAllocConfig c;
    plan_alloc_config_defaults(&c);
    Step v = *st;
    if (m) { v.view.m = *m; v.view.own_m = 0; }
    return run_one(&v, &c);
}

/* Two 5 MiB events: each below 10 MiB, so the first opens a 20 MiB segment and the second is
   split from its 15 MiB remainder. */
Test(step_alloc, each_event_should_be_one_allocation) {
    Step st = empty_step();
    step_mem(&st, RULE_SAVED_ACTS, TERM_ACTIVATIONS, 1, AT_BEFORE, 5 * MiB);
    step_mem(&st, RULE_SAVED_ACTS, TERM_ACTIVATIONS, 2, AT_BEFORE, 5 * MiB);
    PlanAllocStats s = run(&st, NULL);
    cr_expect_eq(s.n_malloc, 2);
    cr_expect_eq(s.max_allocated, (uint64_t)(10 * MiB));
    cr_expect_eq(s.max_reserved, (uint64_t)(20 * MiB));
    plan_step_free(&st);
}

/* Within one point the frees come first: a 30 MiB block freed and a 20 MiB one allocated at
   the same point reuse the cached block (split, 10 MiB left), 30 MiB reserved, not 50. */
Test(step_alloc, a_points_frees_should_come_before_its_allocations) {
    Step st = empty_step();
    step_mem(&st, RULE_SAVED_ACTS, TERM_ACTIVATIONS, 1, AT_BEFORE, 30 * MiB);
    step_mem(&st, RULE_LOSS_FORWARD, TERM_TRANSIENT, 2, AT_BEFORE, 20 * MiB);   /* written first */
    step_mem(&st, RULE_SAVED_ACTS, TERM_ACTIVATIONS, 2, AT_BEFORE, -30 * MiB);
    PlanAllocStats s = run(&st, NULL);
    cr_expect_eq(s.max_reserved, (uint64_t)(30 * MiB));
    cr_expect_eq(s.max_allocated, (uint64_t)(30 * MiB));
    cr_expect_eq(s.n_device_alloc, 1);
    plan_step_free(&st);
}

/* Bytes moving from one rule to another of the same term at one point (backward's gradients
   becoming the step's) keep their block: no free, no new allocation. */
Test(step_alloc, bytes_moving_between_rules_should_keep_their_block) {
    Step st = empty_step();
    step_mem(&st, RULE_AUTOGRAD_GRADS, TERM_GRADS, 1, AT_BEFORE, 30 * MiB);
    step_mem(&st, RULE_AUTOGRAD_GRADS, TERM_GRADS, 2, AT_BEFORE, -30 * MiB);
    step_mem(&st, RULE_STEP_GRADS, TERM_GRADS, 2, AT_BEFORE, 30 * MiB);
    step_mem(&st, RULE_STEP_GRADS, TERM_GRADS, 3, AT_BEFORE, -30 * MiB);   /* its free finds the block */
    PlanAllocStats s = run(&st, NULL);
    cr_expect_eq(s.n_malloc, 1);
    cr_expect_eq(s.n_free, 1);
    cr_expect_eq(s.allocated, 0);
    cr_expect_eq(s.max_reserved, (uint64_t)(30 * MiB));
    plan_step_free(&st);
}

/* A rule that lowers its figure before raising it again (the MLP moment's pending gradients)
   frees nothing it has not allocated: the bytes are owed, and its next allocation of them is
   not made. */
Test(step_alloc, a_free_before_any_allocation_should_be_owed_not_made) {
    Step st = empty_step();
    step_mem(&st, RULE_MLP_PENDING_GRADS, TERM_GRADS, 1, AT_BEFORE, -12 * MiB);
    step_mem(&st, RULE_MLP_PENDING_GRADS, TERM_GRADS, 1, AT_AFTER, 12 * MiB);
    PlanAllocStats s = run(&st, NULL);
    cr_expect_eq(s.n_malloc, 0);
    cr_expect_eq(s.max_reserved, 0);
    plan_step_free(&st);
}

/* A block freed in part (a level that steps down) stays, holding fewer bytes: nothing is freed
   or allocated until the rest goes too. */
Test(step_alloc, a_partial_free_should_keep_the_block_until_the_rest_goes) {
    Step st = empty_step();
    step_mem(&st, RULE_UNIT_GATHER, TERM_COMM, 1, AT_BEFORE, 30 * MiB);
    step_mem(&st, RULE_UNIT_GATHER, TERM_COMM, 2, AT_BEFORE, -10 * MiB);
    step_mem(&st, RULE_LOSS_FORWARD, TERM_TRANSIENT, 3, AT_BEFORE, 10 * MiB);   /* not below 10 MiB: its own segment */
    step_mem(&st, RULE_UNIT_GATHER, TERM_COMM, 4, AT_BEFORE, -20 * MiB);
    PlanAllocStats s = run(&st, NULL);
    cr_expect_eq(s.n_malloc, 2);
    cr_expect_eq(s.n_free, 1);
    cr_expect_eq(s.max_allocated, (uint64_t)(40 * MiB), "the 30 MiB block whole, and 10 MiB");
    cr_expect_eq(s.max_reserved, (uint64_t)(40 * MiB));
    plan_step_free(&st);
}

/* Gradients that become one rule's lump at one point (DeepSpeed's gradients not yet moved into
   their partition) keep their per-layer blocks: two 8 MiB blocks taken over by an 18 MiB
   allocation, which asks the allocator only for the 2 MiB left (from the 20 MiB segment's
   remainder: 20 MiB reserved, not 20 + 18). */
Test(step_alloc, gradients_gathered_into_one_rule_should_keep_their_blocks) {
    Step st = empty_step();
    step_mem(&st, RULE_AUTOGRAD_GRADS, TERM_GRADS, 1, AT_BEFORE, 8 * MiB);
    step_mem(&st, RULE_AUTOGRAD_GRADS, TERM_GRADS, 2, AT_BEFORE, 8 * MiB);
    step_mem(&st, RULE_AUTOGRAD_GRADS, TERM_GRADS, 3, AT_BEFORE, -16 * MiB);
    step_mem(&st, RULE_DS12_NOT_MOVED, TERM_GRADS, 3, AT_BEFORE, 18 * MiB);
    PlanAllocStats s = run(&st, NULL);
    cr_expect_eq(s.n_malloc, 3);
    cr_expect_eq(s.n_free, 0);
    cr_expect_eq(s.max_allocated, (uint64_t)(18 * MiB));
    cr_expect_eq(s.max_reserved, (uint64_t)(20 * MiB));
    plan_step_free(&st);
}

/* A rule of per-parameter tensors (SPLIT_TENSORS) whose layers' tensors are unknown is split by
   layer in proportion to the layers' parameters: 32 MiB over layers of 1 and 3 parameters ->
   8 MiB (a 20 MiB segment) and 24 MiB (its own 24 MiB segment): 44 MiB reserved; unsplit, one
   32 MiB segment. */
Test(step_alloc, per_parameter_rules_should_be_split_by_layer) {
    ModelSpec m;
    memset(&m, 0, sizeof(m));
    LayerSpec layers[2];
    memset(layers, 0, sizeof(layers));
    layers[0].params = 1;
    layers[1].params = 3;
    m.layers = layers;
    m.n_layers = 2;
    Step st = empty_step();
    step_mem(&st, RULE_PARAMS, TERM_PARAMS, 0, AT_BEFORE, 32 * MiB);
    PlanAllocStats s = run(&st, &m);
    cr_expect_eq(s.max_reserved, (uint64_t)(32 * MiB), "not split: one 32 MiB segment");
    st.alloc_split[RULE_PARAMS] = SPLIT_TENSORS;
    s = run(&st, &m);
    cr_expect_eq(s.n_malloc, 2);
    cr_expect_eq(s.max_reserved, (uint64_t)(44 * MiB));
    plan_step_free(&st);
}

static const char *const MODELS[] = {"gpt2-mini", "gpt2", "llama2-7b"};

/* The allocator model over every strategy: the tensor terms are those of the flat account with
   no margin (the allocator figure moves no tensor), the margin is the step's need less the
   tensor peak, and the peak is the need plus the fixed overheads. */
Test(step_alloc, the_plans_allocator_figure_should_be_the_need_less_the_tensor_peak) {
    for (size_t mi = 0; mi < sizeof(MODELS) / sizeof(MODELS[0]); mi++) {
        ModelSpec m = zoo(MODELS[mi]);
        TrainSpec t;
        plan_train_defaults(&t);
        t.seq = 256;
        t.micro_batch = 2;
        ClusterSpec flat, model;
        cluster(&flat, 8, 8);
        flat.alloc_margin = 0;
        model = flat;
        model.alloc_model = 1;
        for (int k = 0; k < STRAT_COUNT; k++) {
            const char *n = plan_strategy((StrategyKind)k)->name;
            MemResult a, b;
            plan_memory(&m, &t, &flat, (StrategyKind)k, &a);
            plan_memory(&m, &t, &model, (StrategyKind)k, &b);
            cr_assert(b.alloc_model, "%s %s", m.name, n);
            for (int j = 0; j < TERM_OVERHEAD; j++)
                cr_expect_eq(a.term[j], b.term[j], "%s %s: %s moved", m.name, n, plan_term_name((TermKind)j));
            cr_expect_str_eq(a.peak_where, b.peak_where, "%s %s", m.name, n);
            double fixed = a.cuda_context + a.cublas_ws + a.nccl;
            cr_expect(fabs(b.alloc_tensor_peak - (a.peak - fixed)) < 1, "%s %s: tensor peak", m.name, n);
            cr_expect_geq(b.alloc_allocated + 1, b.alloc_tensor_peak, "%s %s", m.name, n);
            cr_expect_geq(b.alloc_reserved, b.alloc_allocated, "%s %s", m.name, n);
            cr_expect_geq(b.alloc_need, b.alloc_reserved, "%s %s: the replay at the need reserves at most it", m.name, n);
            cr_expect(fabs(b.margin - (b.alloc_need - b.alloc_tensor_peak)) < 1, "%s %s: margin", m.name, n);
            cr_expect(fabs(b.peak - (b.alloc_need + fixed)) < 1, "%s %s: peak %.0f, need %.0f + fixed %.0f",
                      m.name, n, b.peak, b.alloc_need, fixed);
        }
        plan_model_free(&m);
    }
}

/* Settings reach the replay: expandable segments map 20 MiB pages of one segment, so a 5 MiB
   and a 30 MiB event reserve 40 MiB (two separate segments without: 20 + 30 = 50 MiB). */
Test(step_alloc, the_allocator_settings_should_reach_the_replay) {
    Step st = empty_step();
    step_mem(&st, RULE_SAVED_ACTS, TERM_ACTIVATIONS, 1, AT_BEFORE, 5 * MiB);
    step_mem(&st, RULE_SAVED_ACTS, TERM_ACTIVATIONS, 2, AT_BEFORE, 5 * MiB);
    step_mem(&st, RULE_LOSS_FORWARD, TERM_TRANSIENT, 3, AT_BEFORE, 30 * MiB);
    PlanAllocConfig c;
    char err[128];
    plan_alloc_config_defaults(&c);
    cr_expect_eq(run_one(&st, &c).max_reserved, (uint64_t)(50 * MiB));
    cr_assert_eq(plan_alloc_config_parse(&c, "expandable_segments:True", err, sizeof err), 0, "%s", err);
    cr_expect_eq(run_one(&st, &c).max_reserved, (uint64_t)(40 * MiB));
    plan_step_free(&st);
}

/* plan_memory_fits against the full plan for model m's every strategy at micro-batches 1, 2 and
   4, on GPUs around each setup's tensor peak and its allocator peak; frac: under a memory
   fraction; forget: every kept replay forgotten before each question (the verdict made from a
   listing not seen before). seen[v]: the full plan's verdicts counted. */
static void expect_fits_as_full(const ModelSpec *m, int frac, int forget, int seen[2]) {
    for (int k = 0; k < STRAT_COUNT; k++)
        for (int64_t b = 1; b <= 4; b *= 2) {
            const char *n = plan_strategy((StrategyKind)k)->name;
            TrainSpec t;
            plan_train_defaults(&t);
            t.seq = 256;
            t.micro_batch = b;
            ClusterSpec c;
            cluster(&c, 8, 8);
            c.alloc_model = 1;
            if (frac) c.alloc_conf.memory_fraction = 0.97;
            MemResult r;
            plan_memory(m, &t, &c, (StrategyKind)k, &r);
            double fixed = r.cuda_context + r.cublas_ws + r.nccl;
            double tensors = r.alloc_tensor_peak + fixed, peak = r.peak;
            const double scale[] = {0.9, 0.999, 1.0, 1.001, 1.02};
            for (int s = 0; s < 10; s++) {
                c.gpu.mem_bytes = (s < 5 ? tensors : peak) * scale[s % 5];
                if (forget) plan_step_alloc_forget();
                int fits = plan_memory_fits(m, &t, &c, (StrategyKind)k);
                if (forget) plan_step_alloc_forget();
                MemResult full;
                plan_memory(m, &t, &c, (StrategyKind)k, &full);
                cr_expect_eq(fits, full.fits, "%s %s b%lld frac %d forget %d: GPU %.0f (tensors %.0f, peak %.0f)",
                             m->name, n, (long long)b, frac, forget, c.gpu.mem_bytes, tensors, peak);
                seen[full.fits != 0]++;
            }
        }
}

/* The searches' shortcut (plan_memory_fits: no replay when the tensors alone exceed the GPU, the
   capacity search stopped once every capacity up to the GPU's has run out) answers as the full
   plan does, with and without a memory fraction (under which even the unlimited replay runs
   out). */
Test(step_alloc, the_fit_shortcut_should_answer_as_the_full_plan) {
    int seen[2] = {0, 0};
    for (size_t mi = 0; mi < 2; mi++) {
        ModelSpec m = zoo(MODELS[mi]);
        for (int frac = 0; frac < 2; frac++) expect_fits_as_full(&m, frac, 0, seen);
        plan_model_free(&m);
    }
}

/* One meaning for "fits" (docs/formulas.md "The allocator in the plan"): the peak is what the
   step needs of the allocator plus the fixed overheads, the same on a 40 and an 80 GiB GPU where
   it fits both; the GPU's reserved memory at its limit is shown apart and is never below the
   need. */
Test(step_alloc, a_setup_should_need_the_same_on_any_gpu_it_fits) {
    ModelSpec m = zoo("gpt2-xl");
    TrainSpec t;
    plan_train_defaults(&t);
    for (int k = 0; k < STRAT_COUNT; k++) {
        const char *n = plan_strategy((StrategyKind)k)->name;
        MemResult r[2];
        for (int g = 0; g < 2; g++) {
            ClusterSpec c;
            cluster(&c, 8, 8);
            c.alloc_model = 1;
            c.gpu.mem_bytes = (g ? 80.0 : 40.0) * 1024 * 1024 * 1024;
            plan_memory(&m, &t, &c, (StrategyKind)k, &r[g]);
            if (r[g].fits) cr_expect_geq(r[g].alloc_reserved_at_limit, r[g].alloc_need - 1, "%s: reserved at the limit", n);
        }
        if (!r[0].fits || !r[1].fits) continue;
        cr_expect_eq(r[0].peak, r[1].peak, "%s: peak %.0f on 40 GiB, %.0f on 80 GiB", n, r[0].peak, r[1].peak);
        cr_expect_eq(r[0].alloc_need, r[1].alloc_need, "%s", n);
    }
    plan_model_free(&m);
}

/* per_process_memory_fraction is a limit the replay runs against: where it runs out the step does
   not fit, whatever its figures (gpt2-xl on 8 x 24 GiB at fractions 0.8 and 0.9: issue 34 found
   zero1/2/3 shown as fitting while the replay ran out); where it fits, the need is within the
   fraction's share of the GPU. */
Test(step_alloc, a_memory_fraction_that_runs_out_should_not_fit) {
    ModelSpec m = zoo("gpt2-xl");
    TrainSpec t;
    plan_train_defaults(&t);
    for (int f = 0; f < 2; f++)
        for (int k = 0; k < STRAT_COUNT; k++) {
            const char *n = plan_strategy((StrategyKind)k)->name;
            ClusterSpec c;
            cluster(&c, 8, 8);
            c.alloc_model = 1;
            c.gpu.mem_bytes = 24.0 * 1024 * 1024 * 1024;
            c.alloc_conf.memory_fraction = f ? 0.9 : 0.8;
            MemResult r;
            plan_memory(&m, &t, &c, (StrategyKind)k, &r);
            cr_assert(r.alloc_model, "%s", n);
            cr_expect(fabs(r.alloc_limit - c.alloc_conf.memory_fraction * c.gpu.mem_bytes) < 2, "%s: limit %.0f", n,
                      r.alloc_limit);
            if (r.alloc_oom) cr_expect(!r.fits, "%s at %.1f: the replay runs out, yet it fits", n, c.alloc_conf.memory_fraction);
            if (r.fits) cr_expect_leq(r.alloc_need, r.alloc_limit, "%s at %.1f", n, c.alloc_conf.memory_fraction);
            cr_expect_gt(r.margin, 0, "%s: the allocator's share is never 0 B", n);
            cr_expect_eq(plan_memory_fits(&m, &t, &c, (StrategyKind)k), r.fits, "%s: the shortcut's verdict", n);
        }
    plan_model_free(&m);
}

/* The listing allocates what the account holds: the steady step's peak of requested bytes is
   the account's tensor peak, give or take the pieces' rounding and ZeRO-3's coalesced gather
   buffers, which stay whole until every parameter in them is released while the account's level
   falls parameter by parameter (gpt2-mini, gpt2, llama2-7b x every strategy x plain,
   checkpointed and accumulated steps): within 7 % (at most 6.1 % today: gpt2 zero3 under full
   checkpointing; 2.0 % for the others, 3.8 % while a block's pending gradients were listed at
   its MLP moment and owed). */
Test(step_alloc, the_listing_should_hold_the_accounts_bytes) {
    for (size_t mi = 0; mi < sizeof(MODELS) / sizeof(MODELS[0]); mi++) {
        ModelSpec m = zoo(MODELS[mi]);
        for (int v = 0; v < 3; v++)
            for (int k = 0; k < STRAT_COUNT; k++) {
                const char *n = plan_strategy((StrategyKind)k)->name;
                TrainSpec t;
                plan_train_defaults(&t);
                t.seq = 256;
                t.micro_batch = 2;
                if (v == 1) t.act_ckpt = CKPT_FULL;
                if (v == 2) t.grad_accum = 2;
                ClusterSpec c;
                cluster(&c, 8, 8);
                c.alloc_margin = 0;
                MemResult r;
                memset(&r, 0, sizeof r);   /* the replay keeps the largest moment it sees in r */
                Step st;
                cr_assert_eq(plan_step_build(&st, &m, &t, &c, (StrategyKind)k), 0);
                plan_step_replay(&st, &c, &r, NULL, NULL);
                double tensors = r.peak - st.fixed;
                StepAllocOpts o;
                StepAllocResult a;
                PlanAllocConfig conf;
                plan_alloc_config_defaults(&conf);
                plan_step_alloc_opts_default(&o);
                cr_assert_eq(plan_step_alloc_with(&st, &conf, &o, &a), 0);
                double req = (double)a.steady.max_requested;
                cr_expect(fabs(req - tensors) <= 0.07 * tensors, "%s %s v%d: requested %.0f, account %.0f (%+.2f%%)",
                          m.name, n, v, req, tensors, 100 * (req - tensors) / tensors);
                plan_step_free(&st);
            }
        plan_model_free(&m);
    }
}

/* The trace plan_step_alloc_write writes for st (two steps): its allocations, and the most
   bytes the allocations under rule `rule`'s comment lines hold at once. */
/* The step of m under t and strategy s on one node of 8 GPUs. */
static Step built_on_8(const ModelSpec *m, const TrainSpec *t, StrategyKind s) {
    ClusterSpec c;
    cluster(&c, 8, 8);
    Step st;
    cr_assert_eq(plan_step_build(&st, m, t, &c, s), 0);
    return st;
}

/* The trace plan_step_alloc_write writes for st (two steps), in a temporary file at its start. */
static FILE *written_trace(const Step *st) {
    FILE *f = tmpfile();
    cr_assert_not_null(f);
    StepAllocOpts o;
    plan_step_alloc_opts_default(&o);
    cr_assert_eq(plan_step_alloc_write(st, &o, f, NULL), 0);
    rewind(f);
    return f;
}

static int written_allocs(const Step *st, const char *rule, double *most) {
    FILE *f = written_trace(st);
    static double size[1 << 20];   /* by handle; the rule's only */
    memset(size, 0, sizeof size);
    char line[256], cur[128] = "";
    int n = 0;
    double live = 0;
    *most = 0;
    while (fgets(line, sizeof line, f)) {
        unsigned id;
        double b;
        if (line[0] == '#') sscanf(line, "# %127s", cur);
        else if (sscanf(line, "a %x %lf", &id, &b) == 2) {
            n++;
            if (strcmp(cur, rule) == 0 && id < (1u << 20)) { size[id] = b; live += b; }
        } else if (sscanf(line, "f %x", &id) == 1 && id < (1u << 20)) {
            live -= size[id];
            size[id] = 0;
        }
        if (live > *most) *most = live;
    }
    fclose(f);
    return n;
}

/* A LoRA model's FSDP2 units gather their frozen weights too: the level's bytes are the unit's
   tensors (trainable and frozen) and a few flat buffers, not millions of adapter-sized pieces
   (the listing of llama2-70b at 512 tokens had 27.6 million requests before). */
Test(step_alloc, a_fine_tuned_fsdp2_unit_should_list_its_frozen_weights) {
    ModelSpec m = zoo("llama2-7b");
    TrainSpec t;
    plan_train_defaults(&t);
    t.ft.rank = 16;
    t.ft.alpha = 32;
    snprintf(t.ft.targets, sizeof t.ft.targets, "q_proj,v_proj");
    char msg[256];
    cr_assert_eq(plan_finetune_apply(&m, &t, msg, sizeof msg), 0, "%s", msg);
    Step st = built_on_8(&m, &t, STRAT_FSDP_FULL);
    double most;
    int n = written_allocs(&st, "-", &most);
    cr_expect_lt(n, 200 * m.n_layers, "%d allocations for %d layers", n, m.n_layers);
    plan_step_free(&st);
    plan_model_free(&m);
}

/* DDP's construction broadcast keeps at most two flat chunks of 250 MiB in flight (comm.cpp
   broadcast_coalesced, max_in_flight = 2): gpt2-xl's 6 GiB of fp32 parameters never have more
   than two chunks (each a little over 250 MiB) allocated at once. */
Test(step_alloc, ddps_broadcast_should_hold_two_chunks_at_most) {
    ModelSpec m = zoo("gpt2-xl");
    TrainSpec t;
    plan_train_defaults(&t);
    t.precision = PREC_FP32;
    Step st = built_on_8(&m, &t, STRAT_DDP);
    double most;
    written_allocs(&st, "ddp_broadcast_buffers", &most);
    double largest = (double)m.d_model * (double)m.vocab * 4;   /* the embedding, one tensor */
    cr_expect_gt(most, 250 * MiB, "a chunk is at least the bucket's limit: %.0f", most);
    cr_expect_leq(most, 2 * (250 * MiB + largest), "%.0f bytes in flight", most);
    plan_step_free(&st);
    plan_model_free(&m);
}

/* A replay at the GPU's limit that runs out may stop there (the plan reads only the verdict), and
   is kept for the searches; a caller of the figures at the same settings gets the whole replay,
   every out-of-memory counted, not the stopped one (gpt2-xl ddp on 8 x 24 GiB does not fit). */
Test(step_alloc, a_replay_stopped_at_its_first_out_of_memory_should_serve_only_verdicts) {
    ModelSpec m = zoo("gpt2-xl");
    TrainSpec t;
    plan_train_defaults(&t);
    ClusterSpec c;
    cluster(&c, 8, 8);
    c.alloc_model = 1;
    c.gpu.mem_bytes = 24.0 * 1024 * 1024 * 1024;
    Step st;
    cr_assert_eq(plan_step_build(&st, &m, &t, &c, STRAT_DDP), 0);
    MemResult r;
    plan_memory_step(&st, &c, &r, NULL, NULL, 0);
    cr_assert(r.alloc_model && r.alloc_oom, "it runs out at 24 GiB");
    PlanAllocConfig conf = c.alloc_conf;   /* the replay at the limit, as replay_alloc makes it */
    conf.device_total = (uint64_t)c.gpu.mem_bytes;
    conf.capacity = (uint64_t)(c.gpu.mem_bytes - st.fixed);
    StepAllocOpts o;
    StepAllocResult whole, again;
    plan_step_alloc_opts_default(&o);
    cr_assert_eq(plan_step_alloc_with(&st, &conf, &o, &whole), 0);
    cr_expect_eq(whole.stopped, 0);
    cr_expect_gt(whole.whole.n_ooms, 0);
    cr_assert_eq(plan_step_alloc_with(&st, &conf, &o, &again), 0);
    cr_expect_eq(memcmp(&whole, &again, sizeof whole), 0, "the kept whole replay");
    MemResult r2;
    plan_memory_step(&st, &c, &r2, NULL, NULL, 0);
    cr_expect_eq(r2.peak, r.peak, "the plan's figures do not depend on what was kept");
    cr_expect_eq(r2.alloc_need, r.alloc_need);
    plan_step_free(&st);
    plan_model_free(&m);
}

/* The listing of st as plan_step_alloc_write prints it, in a string the caller frees. */
static char *written(const Step *st) {
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    cr_assert_not_null(f);
    StepAllocOpts o;
    plan_step_alloc_opts_default(&o);
    cr_assert_eq(plan_step_alloc_write(st, &o, f, NULL), 0);
    fclose(f);
    return buf;
}

/* A listing makes its FSDP units' parameter table once (plan_step_alloc.c UnitTable): a step
   built where the last listed one lay, of another model, lists its own units, not the table
   kept from before (gpt2, then gpt2-medium in the same Step), as the same step built elsewhere
   does. */
Test(step_alloc, a_listing_should_not_depend_on_the_step_listed_before_it) {
    const char *names[] = {"gpt2", "gpt2-medium"};
    char *out[3];
    Step st, other;
    for (int k = 0; k < 3; k++) {
        ModelSpec m = zoo(names[k > 0]);
        TrainSpec t;
        plan_train_defaults(&t);
        Step *s = k < 2 ? &st : &other;
        *s = built_on_8(&m, &t, STRAT_FSDP_FULL);
        out[k] = written(s);
        plan_step_free(s);
        plan_model_free(&m);
    }
    cr_expect_not_null(strstr(out[0], "# fsdp2_buffers\n"), "the units are listed");
    cr_expect_neq(strcmp(out[0], out[1]), 0, "two models, two listings");
    cr_expect_eq(strcmp(out[1], out[2]), 0, "the same step, the same listing, wherever it lies");
    for (int k = 0; k < 3; k++) free(out[k]);
}

/* A fits-only verdict on a listing not seen before follows the listing as it is resolved and
   stops resolving at the first out-of-memory (plan_step_alloc.c verdict_following): with every
   kept replay forgotten before each question, it answers as the whole plan does, both verdicts
   met. */
Test(step_alloc, a_fits_only_verdict_on_a_new_listing_should_answer_as_the_full_plan) {
    ModelSpec m = zoo("gpt2");
    int seen[2] = {0, 0};
    expect_fits_as_full(&m, 0, 1, seen);
    cr_expect_gt(seen[0], 0, "some do not fit");
    cr_expect_gt(seen[1], 0, "some fit");
    plan_model_free(&m);
}

/* The written trace of st's second step as (kind, bytes, rule) rows: kind 'a' or 'f', the bytes
   of the handle, the rule whose comment the allocation came under (a free: the rule the handle
   was allocated under). At most `max`; the count returned. */
typedef struct {
    char kind;
    double bytes;
    char rule[32];
} TraceRow;

static int step2_rows(const Step *st, TraceRow *rows, int max) {
    FILE *f = written_trace(st);
    static double size[1 << 16];
    static char rule_of[1 << 16][32];
    char line[256], cur[32] = "";
    int n = 0, in2 = 0;
    while (fgets(line, sizeof line, f) && n < max) {
        unsigned id;
        double b;
        if (line[0] == '#') sscanf(line, "# %31s", cur);
        else if (strncmp(line, "m step", 6) == 0) in2 = atoi(line + 6) == 2;
        else if (sscanf(line, "a %x %lf", &id, &b) == 2 && id < (1u << 16)) {
            size[id] = b;
            snprintf(rule_of[id], sizeof rule_of[id], "%s", cur);
            if (in2) rows[n++] = (TraceRow){'a', b, ""};
            if (in2) snprintf(rows[n - 1].rule, sizeof rows[n - 1].rule, "%s", cur);
        } else if (sscanf(line, "f %x", &id) == 1 && id < (1u << 16) && in2) {
            rows[n++] = (TraceRow){'f', size[id], ""};
            snprintf(rows[n - 1].rule, sizeof rows[n - 1].rule, "%s", rule_of[id]);
        }
    }
    fclose(f);
    return n;
}

/* torch's defaults, fp32, micro-batch b of s tokens. */
static TrainSpec fp32_train(int b, int s) {
    TrainSpec t;
    plan_train_defaults(&t);
    t.precision = PREC_FP32;
    t.micro_batch = b;
    t.seq = s;
    return t;
}

/* A MoE block's MLP moment as PyTorch makes it (mixtral-wide, fp32, b4 s128: T·k = 1,024 routed
   rows, d_ff_expert 1,024): the product act(gate)·up that down's grouped_mm saved (4 MiB) is
   freed there, and three gradients of its size are live (down's input's, the gate's and up's:
   recorded, docs/formulas.md "A MoE block's MLP backward"); the gate_up weight's gradient (2 MiB)
   comes after the moment, not before it (the block's pending gradients). Before, the listing
   made one 7.9 MiB working set beside the saved product and the 2 MiB gradient, and its replay
   reserved 96 MiB against the 78 recorded. */
Test(step_alloc, a_moe_blocks_mlp_moment_should_free_the_product_for_three_gradients_of_its_size) {
    ModelSpec m = load_model("bench/torch/configs/mixtral-wide.json");
    TrainSpec t = fp32_train(4, 128);
    Step st = built_on_8(&m, &t, STRAT_DDP);
    static TraceRow rows[1 << 14];
    int n = step2_rows(&st, rows, 1 << 14), ws = -1;
    const double prod = 1024.0 * 1024 * 4, gate_up_grad = 4.0 * 2048 * 64 * 4;
    for (int k = 0; k < n && ws < 0; k++)
        if (rows[k].kind == 'a' && strcmp(rows[k].rule, "mlp_backward") == 0) ws = k;
    cr_assert_geq(ws, 3, "no working set in step 2");
    int freed = 0, grad_before = 0;
    for (int k = ws - 1; k >= 0 && strcmp(rows[k].rule, "loss_backward") != 0; k--) {
        freed += rows[k].kind == 'f' && rows[k].bytes == prod && strcmp(rows[k].rule, "saved_activations") == 0;
        grad_before += rows[k].kind == 'a' && rows[k].bytes == gate_up_grad;
    }
    cr_expect_eq(freed, 1, "the saved product freed before the working set");
    cr_expect_eq(grad_before, 0, "the gate_up weight's gradient is not made before the moment");
    for (int k = ws; k < ws + 3; k++)
        cr_expect(rows[k].kind == 'a' && rows[k].bytes == prod && strcmp(rows[k].rule, "mlp_backward") == 0,
                  "working set piece %d: %c %.0f %s", k - ws, rows[k].kind, rows[k].bytes, rows[k].rule);
    int after = 0, k0 = ws + 3;
    while (k0 < n && strcmp(rows[k0].rule, "mlp_backward") == 0) k0++;   /* the rest of the working set, its frees */
    for (int k = k0; k < n && !after; k++) {
        if (rows[k].kind == 'a' && strcmp(rows[k].rule, "mlp_backward") == 0) break;   /* the next block's */
        after = rows[k].kind == 'a' && rows[k].bytes == gate_up_grad;
    }
    cr_expect(after, "the gate_up weight's gradient made after the moment");
    plan_step_free(&st);
    plan_model_free(&m);
}

/* A slot's take-overs (plan_step_alloc.c match_find: the slot's released blocks looked up by
   term and bytes) against a reference worked out here: 240 blocks of five sizes in a
   scrambled order, all released at one point while another rule of the same term asks for
   some of each size there. Each request takes the latest released block of its bytes not yet
   taken; a size asked more often than released gets new blocks; the released blocks left go
   back oldest first. */
Test(step_alloc, a_slots_take_overs_should_take_the_latest_released_blocks_of_their_bytes) {
    enum { N = 240, SIZES = 5 };
    static const int want[SIZES] = {0, 7, 30, 1000, 13};   /* takers per size (1000: more than released) */
    Step st = empty_step();
    int size_of[N], count[SIZES] = {0};
    unsigned x = 12345;
    for (int k = 0; k < N; k++) {
        x = x * 1103515245u + 12345u;
        size_of[k] = (int)(x >> 16) % SIZES;
        count[size_of[k]]++;
        step_mem(&st, RULE_SAVED_ACTS, TERM_ACTIVATIONS, 1, AT_BEFORE, (size_of[k] + 1) * MiB);
    }
    for (int k = N - 1; k >= 0; k--)
        step_mem(&st, RULE_SAVED_ACTS, TERM_ACTIVATIONS, 2, AT_BEFORE, -(size_of[k] + 1) * MiB);
    int asked[SIZES];
    for (int g = 0; g < SIZES; g++) {
        asked[g] = want[g] < 1000 ? want[g] : count[g] + 3;
        cr_assert_leq(want[g] < 1000 ? want[g] : 0, count[g], "the scramble gives each size enough blocks");
        for (int j = 0; j < asked[g]; j++) step_mem(&st, RULE_LOSS_FORWARD, TERM_ACTIVATIONS, 2, AT_BEFORE, (g + 1) * MiB);
    }
    /* the reference: per size, the latest `asked` blocks are taken; the rest freed, ascending */
    int taken[N] = {0}, expect_free[N], n_free = 0, fresh = 0;
    for (int g = 0; g < SIZES; g++) {
        int left = asked[g];
        for (int k = N - 1; k >= 0 && left > 0; k--)
            if (size_of[k] == g) { taken[k] = 1; left--; }
        fresh += left;
    }
    for (int k = 0; k < N; k++)
        if (!taken[k]) expect_free[n_free++] = k;
    StepAllocOpts o;
    plan_step_alloc_opts_default(&o);
    o.steps = 1;
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    cr_assert_not_null(f);
    cr_assert_eq(plan_step_alloc_write(&st, &o, f, NULL), 0);
    fclose(f);
    int n_alloc = 0, got_free = 0, order_ok = 1;
    for (char *line = strtok(buf, "\n"); line; line = strtok(NULL, "\n")) {
        unsigned id;
        if (sscanf(line, "a %x", &id) == 1) n_alloc++;
        else if (sscanf(line, "f %x", &id) == 1) {
            if (got_free >= n_free || (int)id != expect_free[got_free]) order_ok = 0;
            got_free++;
        }
    }
    cr_expect_eq(n_alloc, N + fresh, "the released blocks are taken over, only the excess allocated");
    cr_expect_eq(got_free, n_free);
    cr_expect(order_ok, "the blocks given back are those not taken, oldest first");
    free(buf);
    plan_step_free(&st);
}

/* A kept replay answers only for its own listing (plan_step_alloc.c run_ops' memo, 128 kept,
   found by a hash and compared whole): gpt2's plans at micro-batches 1..6 for every strategy,
   each asked again after all of them (kept replays), give what each gives with everything
   forgotten first (every replay made). */
Test(step_alloc, a_kept_replay_should_answer_as_the_replay_made_again) {
    ModelSpec m = zoo("gpt2");
    enum { B = 6 };
    MemResult kept[STRAT_COUNT][B], fresh;
    ClusterSpec c;
    cluster(&c, 8, 8);
    c.alloc_model = 1;
    plan_step_alloc_forget();
    for (int pass = 0; pass < 3; pass++)   /* made; kept (asked again); made again, alone */
        for (int k = 0; k < STRAT_COUNT; k++)
            for (int b = 1; b <= B; b++) {
                TrainSpec t;
                plan_train_defaults(&t);
                t.seq = 256;
                t.micro_batch = b;
                if (pass < 2) {
                    plan_memory(&m, &t, &c, (StrategyKind)k, &kept[k][b - 1]);
                    continue;
                }
                plan_step_alloc_forget();
                plan_memory(&m, &t, &c, (StrategyKind)k, &fresh);
                const char *n = plan_strategy((StrategyKind)k)->name;
                cr_expect_eq(kept[k][b - 1].alloc_need, fresh.alloc_need, "%s b%d", n, b);
                cr_expect_eq(kept[k][b - 1].alloc_reserved, fresh.alloc_reserved, "%s b%d", n, b);
                cr_expect_eq(kept[k][b - 1].alloc_allocated, fresh.alloc_allocated, "%s b%d", n, b);
                cr_expect_eq(kept[k][b - 1].peak, fresh.peak, "%s b%d", n, b);
            }
    plan_model_free(&m);
}

/* A kept replay made on one GPU answers for another GPU's setting where the device's total is
   not read (no memory fraction, no expandable segments; plan_step_alloc.c conf_equal): gpt2's
   plans on 40 GiB asked again on a GPU just above, at and below each plan's peak (auto's rule on
   the plan's GPU less its safety margin replays each row so), with expandable segments and with a
   memory fraction too (where the total is read), give what each gives with everything forgotten
   first. */
Test(step_alloc, a_replay_kept_on_another_gpu_should_answer_as_the_replay_made_again) {
    ModelSpec m = zoo("gpt2");
    static const double SCALE[] = {1.05, 1.0, 0.995, 0.9};   /* of the peak */
    int seen[2] = {0, 0};
    for (int set = 0; set < 3; set++)   /* defaults, expandable segments, a memory fraction */
        for (int k = 0; k < STRAT_COUNT; k++)
            for (size_t g = 0; g < sizeof SCALE / sizeof SCALE[0]; g++) {
                TrainSpec t;
                plan_train_defaults(&t);
                t.seq = 512;
                t.micro_batch = 4;
                ClusterSpec c;
                cluster(&c, 8, 8);
                c.alloc_model = 1;
                c.alloc_conf.expandable_segments = set == 1;
                if (set == 2) c.alloc_conf.memory_fraction = 0.9;
                c.gpu.mem_bytes = 40.0 * 1024 * MiB;
                MemResult kept, fresh;
                plan_step_alloc_forget();
                plan_memory(&m, &t, &c, (StrategyKind)k, &kept);
                c.gpu.mem_bytes = kept.peak * SCALE[g] / (set == 2 ? 0.9 : 1.0);
                plan_memory(&m, &t, &c, (StrategyKind)k, &kept);
                plan_step_alloc_forget();
                plan_memory(&m, &t, &c, (StrategyKind)k, &fresh);
                const char *n = plan_strategy((StrategyKind)k)->name;
                cr_expect_eq(memcmp(&kept, &fresh, sizeof kept), 0, "%s setting %d, %.3f x the peak: fits %d / %d, need %.0f / %.0f",
                             n, set, SCALE[g], kept.fits, fresh.fits, kept.alloc_need, fresh.alloc_need);
                seen[fresh.fits != 0]++;
            }
    cr_expect_gt(seen[0], 0, "some GPU should be too small");
    cr_expect_gt(seen[1], 0, "some GPU should fit");
    plan_model_free(&m);
}

/* Where the host is the device (CPU ranks: validate against torch), torch.optim's per-parameter
   `step` scalars (adam.py _init_group: `torch.tensor(0.0, dtype=_get_scalar_dtype())`, host
   memory on a GPU: Step.opt_host_bytes) are made at the first step(), each before its
   parameter's two states; on a GPU they are not the device's. gpt2-mini ddp: 52 parameter
   tensors, recorded as 52 requests of 4 B, each before a pair of zeros_like. */
Test(step_alloc, cpu_ranks_should_list_a_step_scalar_before_each_parameters_optimizer_states) {
    ModelSpec m = zoo("gpt2-mini");
    TrainSpec t = fp32_train(1, 128);
    Step st = built_on_8(&m, &t, STRAT_DDP);
    cr_assert_eq(st.opt_host_bytes, 4.0 * 52, "gpt2-mini holds 52 parameter tensors");
    for (int host = 0; host < 2; host++) {
        FILE *f = tmpfile();
        cr_assert_not_null(f);
        StepAllocOpts o;
        plan_step_alloc_opts_default(&o);
        o.host_on_device = host;
        cr_assert_eq(plan_step_alloc_write(&st, &o, f, NULL), 0);
        rewind(f);
        char line[256], cur[32] = "";
        int scalars = 0, states = 0, step = 0, paired = 1, since = 2;
        unsigned id;
        double b;
        while (fgets(line, sizeof line, f)) {
            if (line[0] == '#') sscanf(line, "# %31s", cur);
            else if (strncmp(line, "m step", 6) == 0) step = atoi(line + 6);
            else if (sscanf(line, "a %x %lf", &id, &b) == 2 && strcmp(cur, "optimizer_state") == 0) {
                cr_expect_eq(step, 1, "the states are made in the first step");
                if (b == 4) {
                    paired &= since == 2;   /* the previous parameter's two states came first */
                    scalars++;
                    since = 0;
                } else {
                    states++;
                    since++;
                }
            }
        }
        fclose(f);
        cr_expect_eq(states, 2 * 52, "two states per parameter tensor");
        cr_expect_eq(scalars, host ? 52 : 0, "host_on_device %d: %d step scalars", host, scalars);
        cr_expect(paired, "each scalar before its parameter's two states");
    }
    plan_step_free(&st);
    plan_model_free(&m);
}

/* A block's MLP moment holds its output projection's gradients, the bias's too where it has one
   (GPT-2's c_proj: AddmmBackward0 makes the bias's `sum` beside the weight's mm, recorded before
   the activation's backward), so the block's pending gradients the listing makes after the
   moment are whole tensors: no piece of c_proj's weight gradient (262,144 B) cut at the bias's
   512 B. gpt2-mini ddp fp32 b1 s128 under full checkpointing, step 2. */
Test(step_alloc, a_blocks_pending_gradients_should_be_whole_tensors) {
    ModelSpec m = zoo("gpt2-mini");
    TrainSpec t = fp32_train(1, 128);
    t.act_ckpt = CKPT_FULL;
    Step st = built_on_8(&m, &t, STRAT_DDP);
    static TraceRow rows[1 << 14];
    int n = step2_rows(&st, rows, 1 << 14), grads = 0, whole = 0;
    for (int k = 0; k < n; k++) {
        if (rows[k].kind != 'a' || strcmp(rows[k].rule, "autograd_grad") != 0) continue;
        grads++;
        double b = rows[k].bytes;   /* gpt2-mini's tensors: 512, 1,536, 2,048, 65,536, 196,608, 262,144, 524,288 B */
        whole += b == 512 || b == 1536 || b == 2048 || b == 65536 || b == 196608 || b == 262144 || b == 524288;
    }
    cr_assert_gt(grads, 40, "the blocks' gradients are listed");
    cr_expect_eq(whole, grads, "%d of %d gradient requests are whole tensors", whole, grads);
    plan_step_free(&st);
    plan_model_free(&m);
}

/* GPT-2's attention keeps q, k and v as views of its one c_attn output (plan_activ.c
   qkv_views_saved): one saved tensor of 3·qd per token under SDPA at any batch and in eager
   attention at micro-batch 1, three of qd in eager attention at larger batches (matmul's reshape
   copies them); the layer's bytes are the same either way. Recorded: gpt2-mini fp32 b1 eager
   makes one 196,608 B addmm output per block and no copies. */
Test(step_alloc, gpt2s_q_k_and_v_should_be_saved_as_one_tensor_where_they_stay_views) {
    ModelSpec m = zoo("gpt2-mini");
    static const struct { AttnKind attn; int b; int whole; } C[] = {
        {ATTN_EAGER, 1, 1}, {ATTN_EAGER, 4, 0}, {ATTN_SDPA, 1, 1}, {ATTN_SDPA, 4, 1}};
    int blk = 0;
    while (m.layers[blk].kind != LAYER_BLOCK) blk++;
    for (size_t c = 0; c < sizeof C / sizeof C[0]; c++) {
        TrainSpec t = fp32_train(C[c].b, 128);
        t.autocast_cpu = 1;
        t.attn = C[c].attn;
        ActInputs in = {C[c].b, 128, 0};
        double v[PLAN_ACT_MAX_TENSORS], qkv = C[c].b * 128.0 * 3 * 128 * 4, sum = 0;
        int n = plan_act_ckpt_tensors(&m, blk, &t, &in, v, PLAN_ACT_MAX_TENSORS), whole = 0;
        for (int k = 0; k < n; k++) {
            whole += v[k] == qkv;
            sum += v[k];
        }
        cr_expect_eq(whole, C[c].whole, "case %zu: %d tensors of %.0f B", c, whole, qkv);
        cr_expect_leq(sum, plan_act_layer_bytes(&m, blk, &t, &in) + 0.5, "case %zu: within the layer's bytes", c);
    }
    plan_model_free(&m);
}

/* Under selective recompute a block's saved tensors are what it keeps: the core attention's own
   (the scores, probabilities, dropout; q, k, v as the matmuls save them) are dropped and the
   checkpoint's inputs q, k and v kept (plan_activ.c selective_delta), so the tensors the listing
   cuts add up to the block's bytes and no piece is scaled to fit them (the listing had cut
   llama-mini's 262,144 B tensors into 220,160 B pieces). */
Test(step_alloc, selective_recompute_should_list_the_tensors_a_block_keeps) {
    static const char *const M[] = {"bench/torch/configs/llama-mini.json", "gpt2-mini"};
    for (size_t k = 0; k < sizeof M / sizeof M[0]; k++) {
        ModelSpec m = k == 0 ? load_model(M[k]) : zoo(M[k]);
        TrainSpec t = fp32_train(4, 128);
        t.autocast_cpu = 1;
        t.attn = ATTN_EAGER;
        t.act_ckpt = CKPT_SELECTIVE;
        ActInputs in = {4, 128, 0};
        for (int i = 0; i < m.n_layers; i++) {
            if (m.layers[i].kind != LAYER_BLOCK) continue;
            double v[PLAN_ACT_MAX_TENSORS], sum = 0;
            int n = plan_act_ckpt_tensors(&m, i, &t, &in, v, PLAN_ACT_MAX_TENSORS);
            for (int j = 0; j < n; j++) sum += v[j];
            cr_expect_leq(fabs(sum - plan_act_ckpt_bytes(&m, i, &t, &in)), 1, "%s layer %d: tensors %.0f B, bytes %.0f B",
                          M[k], i, sum, plan_act_ckpt_bytes(&m, i, &t, &in));
        }
        plan_model_free(&m);
    }
}

/* A LoRA model's layers list the tensors PEFT and autograd keep (plan_activ.c finetune_delta,
   from the counts plan_dim_ft.c sets): the frozen projections' inputs no longer saved taken out,
   each adapter's A output (r per token, saved by B; peft/tuners/lora/layer.py Linear.forward)
   and under lora_dropout the dropout's output and noise added, under autocast each frozen
   projection's cast weight; so the noted tensors add up to the layer's bytes and no piece is
   scaled to fit them (gpt2-mini ddp fp32 b1 lora8 had pieces of 49,732 and 149,198 B where the
   recorded run makes 65,536 and 196,608 B tensors). */
Test(step_alloc, a_lora_layers_tensors_should_add_up_to_its_saved_bytes) {
    static const struct { const char *model, *targets; PrecisionKind prec; double drop; } C[] = {
        {"gpt2-mini", "", PREC_FP32, 0}, {"gpt2-mini", "", PREC_AMP_BF16, 0}, {"gpt2-mini", "", PREC_FP32, 0.1},
        {"bench/torch/configs/llama-mini.json", "", PREC_FP32, 0},
        {"bench/torch/configs/llama-mini.json", "", PREC_AMP_BF16, 0},
        {"bench/torch/configs/llama-mini.json", "all-linear", PREC_FP32, 0.1}};
    for (size_t c = 0; c < sizeof C / sizeof C[0]; c++) {
        ModelSpec m = strchr(C[c].model, '/') ? load_model(C[c].model) : zoo(C[c].model);
        TrainSpec t = fp32_train(4, 128);
        t.precision = C[c].prec;
        t.autocast_cpu = 1;
        t.attn = ATTN_EAGER;
        t.ft.rank = 8;
        t.ft.alpha = 16;
        t.ft.dropout = C[c].drop;
        snprintf(t.ft.targets, sizeof t.ft.targets, "%s", C[c].targets);
        char msg[256];
        cr_assert_eq(plan_finetune_apply(&m, &t, msg, sizeof msg), 0, "%s", msg);
        ActInputs in = {4, 128, 0};
        double a_out = 4 * 128.0 * 8 * plan_precision(t.precision)->act_bytes;
        int adapters = 0, a_outs = 0;
        for (int i = 0; i < m.n_layers; i++) {
            double v[PLAN_ACT_MAX_TENSORS], sum = 0, bytes = plan_act_ckpt_bytes(&m, i, &t, &in);
            int n = plan_act_ckpt_tensors(&m, i, &t, &in, v, PLAN_ACT_MAX_TENSORS);
            for (int j = 0; j < n; j++) {
                sum += v[j];
                a_outs += v[j] == a_out;
            }
            adapters += (int)(m.layers[i].lora_r_tok / 8);
            cr_expect_leq(fabs(sum - bytes), 1, "case %zu layer %d: tensors %.0f B, bytes %.0f B", c, i, sum, bytes);
        }
        cr_expect_geq(a_outs, adapters, "case %zu: %d A outputs of %.0f B for %d adapters", c, a_outs, a_out, adapters);
        cr_expect_gt(adapters, 0, "case %zu", c);
        plan_model_free(&m);
    }
}

/* A frozen output projection saves no input its backward's f-wide input gradient could replace,
   so a LoRA block's MLP moment holds three f-wide gradients (recorded, gpt2-mini ddp fp32 b4
   lora8: c_proj's mm and MulBackward0's two products, 1 MiB each, beside the 256 KiB residual
   gradient), as the account counts them (plan_act_mlp_bwd_grads); the listing had made two and
   one 1.25 MiB piece, a large-pool request the run never makes. */
Test(step_alloc, a_frozen_output_projections_mlp_moment_should_hold_three_f_wide_gradients) {
    ModelSpec m = zoo("gpt2-mini");
    TrainSpec t = fp32_train(4, 128);
    t.autocast_cpu = 1;
    t.attn = ATTN_EAGER;
    t.ft.rank = 8;
    t.ft.alpha = 16;
    char msg[256];
    cr_assert_eq(plan_finetune_apply(&m, &t, msg, sizeof msg), 0, "%s", msg);
    Step st = built_on_8(&m, &t, STRAT_DDP);
    static TraceRow rows[1 << 14];
    int n = step2_rows(&st, rows, 1 << 14), f_wide = 0;
    const double f = 4 * 128.0 * 512 * 4;
    for (int k = 0; k < n; k++) {
        if (rows[k].kind != 'a' || strcmp(rows[k].rule, "mlp_backward") != 0) continue;
        f_wide += rows[k].bytes == f;
    }
    cr_expect_eq(f_wide, 3 * 4, "%d f-wide gradients over 4 blocks", f_wide);
    int blk = 0;
    while (m.layers[blk].kind != LAYER_BLOCK) blk++;
    cr_expect_eq(plan_act_mlp_bwd_grads(&m, blk, &t), 3);
    plan_step_free(&st);
    plan_model_free(&m);
}

/* resnet50's saved tensors as PyTorch makes them (plan_activ.c cnn_layer_bytes), at b2 and a
   32-pixel image (--seq 32): the stem convolution keeps the image and its output, BatchNorm its
   output and save_mean / save_invstd, (C,) fp32 each whatever the batch and image
   (Normalization.cpp batch_norm_cpu), max pooling its output and int64 indices, the head the
   pooled features, not scaled by the image's area. Recorded (harness --alloc-ops, resnet50 ddp
   fp32 b2 s32): 24,576 B data; conv1 131,072; bn1 131,072 + 256 + 256; maxpool 32,768 + 65,536;
   avgpool 16,384. The listing had scaled the stats with the batch and the area (21 B at bn1)
   and the head with the area. */
Test(step_alloc, a_cnns_saved_tensors_should_be_those_pytorch_makes) {
    ModelSpec m = zoo("resnet50");
    TrainSpec t = fp32_train(2, 32);
    ActInputs in = {2, 32, 0};
    static const struct { const char *layer; double bytes[3]; } C[] = {
        {"stem.conv", {24576, 131072, 0}},     {"stem.bn", {131072, 256, 256}},
        {"stem.maxpool", {32768, 65536, 0}},   {"layer1.0.1.conv", {32768, 0, 0}},
        {"layer4.2.3.bn", {16384, 8192, 8192}}, {"fc", {16384, 8000, 8000}}};
    for (size_t c = 0; c < sizeof C / sizeof C[0]; c++) {
        int i = 0;
        while (i < m.n_layers && strcmp(m.layers[i].name, C[c].layer) != 0) i++;
        cr_assert_lt(i, m.n_layers, "%s is a layer", C[c].layer);
        double v[PLAN_ACT_MAX_TENSORS], sum = 0;
        int n = plan_act_ckpt_tensors(&m, i, &t, &in, v, PLAN_ACT_MAX_TENSORS);
        for (int k = 0; k < 3 && C[c].bytes[k] > 0; k++)
            cr_expect(k < n && v[k] == C[c].bytes[k], "%s tensor %d: %.0f B, recorded %.0f B", C[c].layer, k,
                      k < n ? v[k] : -1, C[c].bytes[k]);
        for (int k = 0; k < n; k++) sum += v[k];
        cr_expect_eq(sum, plan_act_layer_bytes(&m, i, &t, &in), "%s: the tensors are the layer's bytes", C[c].layer);
    }
    plan_model_free(&m);
}

/* Each saved-activation request the listing makes for resnet50 (ddp fp32 b2 s32, step 2) is one
   of the tensors the account counts, whole: none scaled to fit, none a rounding error below its
   size (the shares of whole weights that add up to the bytes land on 131,071.99...; the listing
   had asked for 131,071 B). */
Test(step_alloc, a_cnns_saved_activation_requests_should_be_whole_tensors) {
    ModelSpec m = zoo("resnet50");
    TrainSpec t = fp32_train(2, 32);
    ActInputs in = {2, 32, 0};
    Step st = built_on_8(&m, &t, STRAT_DDP);
    static double sizes[8192];
    int ns = 0;
    for (int i = 0; i < m.n_layers; i++)
        ns += plan_act_ckpt_tensors(&m, i, &t, &in, sizes + ns, (int)(sizeof sizes / sizeof sizes[0]) - ns);
    static TraceRow rows[1 << 14];
    int n = step2_rows(&st, rows, 1 << 14), acts = 0, whole = 0;
    for (int k = 0; k < n; k++) {
        if (rows[k].kind != 'a' || strcmp(rows[k].rule, "saved_activations") != 0) continue;
        acts++;
        int found = 0;
        for (int j = 0; j < ns && !found; j++) found = rows[k].bytes == sizes[j];
        whole += found;
        if (!found) cr_log_warn("a request of %.0f B is no tensor", rows[k].bytes);
    }
    cr_assert_gt(acts, 150, "the layers' tensors are listed");
    cr_expect_eq(whole, acts, "%d of %d saved-activation requests are whole tensors", whole, acts);
    plan_step_free(&st);
    plan_model_free(&m);
}

/* GPT-2's block forward with its op temporaries between the saved tensors (plan_act_ckpt_ops):
   eager attention's scores before the softmax (matmul(q, k^T), * scale, + mask: a·s·s each, each
   freed by the next op, the last once the softmax is made) and gelu_new's terms (x^3,
   0.044715·x^3, x + ..., c·(...): b·s·f each, the last freed once tanh is made), made and freed
   oldest first, at most two of a kind live; recorded on gpt2-mini fp32 eager b1 (aten::bmm, mul,
   add, _softmax: 262,144 B; pow, mul, add, mul, tanh: 262,144 B). The saved tensors are the
   layer's bytes; the temporaries are not. */
Test(step_alloc, gpt2s_block_should_list_its_scores_and_gelu_new_terms_between_its_saved_tensors) {
    ModelSpec m = zoo("gpt2-mini");
    TrainSpec t = fp32_train(1, 128);
    t.autocast_cpu = 1;
    t.attn = ATTN_EAGER;
    ActInputs in = {1, 128, 0};
    int blk = 0;
    while (m.layers[blk].kind != LAYER_BLOCK) blk++;
    double v[PLAN_ACT_MAX_TENSORS], saved = 0, live = 0, most = 0;
    int kind[PLAN_ACT_MAX_TENSORS], made = 0, freed = 0, tanh_before_last_free = 0;
    double scores = (double)m.n_head * 128 * 128 * 4, gelu = 128.0 * (double)m.d_ff * 4;
    int n = plan_act_ckpt_ops(&m, blk, &t, &in, v, kind, PLAN_ACT_MAX_TENSORS), of_size[1] = {0};
    for (int k = 0; k < n; k++) {
        if (kind[k] == PLAN_ACT_SAVED) saved += v[k];
        if (kind[k] == PLAN_ACT_TEMP_MAKE) {
            made++;
            live++;
            of_size[0] += v[k] == scores || v[k] == gelu;   /* equal on gpt2-mini at s128: 4 heads, f 512 */
        }
        if (kind[k] == PLAN_ACT_TEMP_FREE) {
            freed++;
            live--;
            if (k > 0 && kind[k - 1] == PLAN_ACT_SAVED && v[k - 1] == gelu) tanh_before_last_free = k;
        }
        most = fmax(most, live);
    }
    cr_expect_eq(made, 7, "three score and four gelu_new temporaries made: %d", made);
    cr_expect_eq(freed, made, "each freed within the forward: %d of %d", freed, made);
    cr_expect_eq(of_size[0], 7, "sizes a·s·s·4 = %.0f, b·s·f·4 = %.0f B", scores, gelu);
    cr_expect_leq(most, 2, "at most two live at once: %.0f", most);
    cr_expect_gt(tanh_before_last_free, 0, "c·(...) freed once tanh (saved, b·s·f·4) is made");
    cr_expect_leq(fabs(saved - plan_act_ckpt_bytes(&m, blk, &t, &in)), 0.5, "the saved tensors are the layer's bytes");
    /* the same block's saved tensors alone: the listing's old cut */
    double alone[PLAN_ACT_MAX_TENSORS], sum = 0;
    int na = plan_act_ckpt_tensors(&m, blk, &t, &in, alone, PLAN_ACT_MAX_TENSORS);
    for (int k = 0; k < na; k++) sum += alone[k];
    cr_expect_eq(na, n - made - freed, "plan_act_ckpt_tensors lists the saved ones only");
    cr_expect_leq(fabs(sum - saved), 0.5);
    /* under autocast the mask's add promotes the scores: not listed; SDPA makes none */
    TrainSpec amp = t;
    amp.precision = PREC_AMP_BF16;
    t.attn = ATTN_SDPA;
    const TrainSpec *other[] = {&amp, &t};
    for (int c = 0; c < 2; c++) {
        n = plan_act_ckpt_ops(&m, blk, other[c], &in, v, kind, PLAN_ACT_MAX_TENSORS);
        int sc = 0;
        for (int k = 0; k < n; k++) sc += kind[k] == PLAN_ACT_TEMP_MAKE;
        cr_expect_eq(sc, 4, "case %d: gelu_new's four temporaries, no scores: %d", c, sc);
    }
    plan_model_free(&m);
}

/* The forward working set the account holds for those temporaries (RULE_FWD_TEMPS): what the
   layer's saved tensors made so far and its live temporaries hold at most, above all its saved
   tensors; none where the temporaries are gone before the later tensors outgrow them. On
   gpt2-mini b1 s128 the scores (two of 262,144 B live) come before the probabilities and the MLP's
   five f-wide tensors, so no forward moment is above the layer's saved bytes; at s1024 the two
   12·1024·1024·4 B scores are. */
Test(step_alloc, the_forward_working_set_should_be_the_temporaries_above_the_layers_saved_tensors) {
    ModelSpec m = zoo("gpt2-mini");
    TrainSpec t = fp32_train(1, 128);
    t.attn = ATTN_EAGER;
    ActInputs in = {1, 128, 0};
    int blk = 0;
    while (m.layers[blk].kind != LAYER_BLOCK) blk++;
    cr_expect_eq(plan_act_fwd_temp_peak(&m, blk, &t, &in), 0);
    double v[PLAN_ACT_MAX_TENSORS], saved = 0, live = 0, peak = 0, fifo[PLAN_ACT_MAX_TENSORS];
    int kind[PLAN_ACT_MAX_TENSORS], head = 0, tail = 0;
    t.seq = 1024;
    in.s = 1024;
    int n = plan_act_ckpt_ops(&m, blk, &t, &in, v, kind, PLAN_ACT_MAX_TENSORS);
    for (int k = 0; k < n; k++) {
        if (kind[k] == PLAN_ACT_TEMP_MAKE) live += fifo[tail++] = v[k];
        if (kind[k] == PLAN_ACT_TEMP_FREE) live -= fifo[head++];
        if (kind[k] == PLAN_ACT_SAVED) saved += v[k];
        peak = fmax(peak, saved + live);
    }
    double ws = plan_act_fwd_temp_peak(&m, blk, &t, &in);
    cr_expect_gt(ws, 0, "s1024: the scores outgrow the tensors made after them");
    cr_expect_leq(fabs(ws - (peak - saved)), 0.5, "%.0f B, walked %.0f B", ws, peak - saved);
    plan_model_free(&m);
}

/* An eager decoder's causal mask (transformers masking_utils.py create_causal_mask: an additive
   (b, 1, s, s) mask at the embeddings' dtype) lives from before the first block to the end of
   the base model's forward (recorded on gpt2-mini eager b1: aten::where's 65,536 B, freed after
   ln_f, before lm_head): the account holds it there (RULE_ATTN_MASK); SDPA makes none, and under
   checkpointing the first checkpointed block keeps it as a saved tensor instead. */
Test(step_alloc, an_eager_decoders_causal_mask_should_live_from_its_first_block_to_its_forwards_end) {
    ModelSpec m = zoo("gpt2-mini");
    TrainSpec t = fp32_train(1, 128);
    t.attn = ATTN_EAGER;
    ActInputs in = {1, 128, 0};
    int first = -2, blk = 0;
    while (m.layers[blk].kind != LAYER_BLOCK) blk++;
    cr_expect_eq(plan_act_forward_masks(&m, &t, &in, &first), 128.0 * 128 * 4);
    cr_expect_eq(first, blk);
    t.attn = ATTN_SDPA;
    cr_expect_eq(plan_act_forward_masks(&m, &t, &in, &first), 0);
    cr_expect_eq(first, -1);
    t.attn = ATTN_EAGER;
    t.act_ckpt = CKPT_FULL;
    cr_expect_eq(plan_act_forward_masks(&m, &t, &in, &first), 0, "held by the first checkpoint");
    plan_model_free(&m);
}
