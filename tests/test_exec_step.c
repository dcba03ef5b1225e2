/* test_exec_step.c — the one training step (exec_step.h) that `memplan run`/`validate`, `memplan
 * bench syncbn` and bench/cnn_device all run: it is the model's calls in order, bit for bit; it
 * asks for every micro-batch and sums their losses; it names its phases to the tracker, the
 * counters and the timer; it fails with a sentence; and the programs give the losses they gave
 * before the step was written once (pinned from the three copies it replaced, commit 9fb9e22, to
 * 1e-5: OpenBLAS's GEMM kernel depends on the CPU, and its rounding on the kernel; a step that
 * skipped or reordered a call moves a loss by far more). */
#include <cjson/cJSON.h>
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "exec_cnn.h"
#include "exec_comm.h"
#include "exec_device.h"
#include "exec_step.h"
#include "exec_strategy.h"

#include "test_run.h"

static const ExecAdamW OPT = {1e-3f, 0.9f, 0.999f, 1e-8f, 0.01f};
enum { B = 4, SEED = 5 };

/* resnet-tiny on one rank (COMM_SELF: the strategy trains the plain replica), its tracker, a
 * synthetic batch of B images */
typedef struct {
    Device *dev;
    MemTracker *mt;
    Comm *self;
    ExecStrategy *s;
    Cnn *cnn;
    CnnConfig cfg;
    float *images;
    int labels[B];
    ExecBatch batch;
} One;

static void one_create(One *o)
{
    char err[256];
    memset(o, 0, sizeof *o);
    cr_assert_eq(exec_cnn_config_preset(&o->cfg, "resnet-tiny"), 0);
    o->dev = exec_device_create(DEVICE_HOST, 0, err, sizeof err);
    cr_assert_not_null(o->dev, "%s", err);
    o->mt = exec_device_tracker_create(o->dev, 0);
    o->self = comm_create(COMM_SELF, NULL, NULL, 5, err, sizeof err);
    cr_assert_not_null(o->self, "%s", err);
    ExecStrategyOptions so = {EXEC_DDP, 0, 0, 0};
    cr_assert_eq(exec_strategy_create(&o->s, &so, o->self, o->mt, NULL, NULL, err, sizeof err), 0, "%s", err);
    ExecHooks hooks;
    exec_strategy_hooks(o->s, &hooks);
    cr_assert_eq(exec_cnn_create(&o->cnn, &o->cfg, o->mt, &hooks, o->s), 0);
    cr_assert_eq(exec_strategy_bind(o->s, exec_cnn_model(o->cnn), SEED, 1), 0);
    size_t img = (size_t)o->cfg.in_channels * o->cfg.image_size * o->cfg.image_size;
    o->images = malloc(B * img * sizeof *o->images);
    cr_assert_not_null(o->images);
    cr_assert_eq(exec_cnn_synthetic_batch(&o->cfg, SEED, 0, 0, B, o->images, o->labels), 0);
    o->batch = (ExecBatch){o->images, o->labels, B, 0};
}

static void one_free(One *o)
{
    exec_cnn_destroy(o->cnn);
    exec_strategy_destroy(o->s);
    comm_destroy(o->self);
    free(o->images);
    prof_mem_destroy(o->mt);
    exec_device_destroy(o->dev);
}

static ExecStep step_of(One *o)
{
    return (ExecStep){.m = exec_cnn_model(o->cnn), .s = o->s, .opt = OPT, .accum = 1, .batch = exec_step_fixed_batch,
                      .batch_ctx = &o->batch};
}

Test(exec_step, one_step_should_be_the_models_calls_in_order_bit_for_bit)
{
    One o;
    one_create(&o);
    /* the same model without a strategy, stepped by hand: zero_grad, forward, backward, AdamW */
    Cnn *hand = NULL;
    cr_assert_eq(exec_cnn_create(&hand, &o.cfg, o.mt, NULL, NULL), 0);
    cr_assert_eq(exec_cnn_init_params(hand, SEED), 0);
    ExecModel *h = exec_cnn_model(hand), *m = exec_cnn_model(o.cnn);
    ExecStep st = step_of(&o);
    for (int t = 1; t <= 3; t++) {
        ExecStepResult sr;
        cr_assert_eq(exec_step(&st, t, &sr), 0, "%s", sr.why);
        float loss = 0;
        exec_model_zero_grad(h);
        cr_assert_eq(exec_model_forward(h, &o.batch, &loss), 0);
        cr_assert_eq(exec_model_backward(h), 0);
        cr_assert_eq(exec_model_adamw_step(h, &OPT, t), 0);
        cr_expect_eq(sr.loss_sum, (double)loss, "step %d: %.9g vs %.9g", t, sr.loss_sum, (double)loss);
        cr_expect_eq(sr.nonfinite, 0);
    }
    for (int u = 0; u < exec_model_units(m); u++)
        cr_expect_arr_eq(exec_model_unit_params(m, u), exec_model_unit_params(h, u),
                         exec_model_unit_numel(m, u) * sizeof(float), "unit %d", u);
    exec_cnn_destroy(hand);
    one_free(&o);
}

typedef struct {
    ExecBatch b;
    int asked[8], n;
} Micro;

static int count_micro(void *ctx, int micro, ExecBatch *b)
{
    Micro *x = ctx;
    if (x->n < 8) x->asked[x->n++] = micro;
    *b = x->b;
    return 0;
}

Test(exec_step, gradient_accumulation_should_ask_for_each_micro_batch_and_sum_their_losses)
{
    One a, b;
    one_create(&a);
    one_create(&b);
    ExecStep one = step_of(&a), three = step_of(&b);
    Micro x = {.b = b.batch};
    three.accum = 3;
    three.batch = count_micro;
    three.batch_ctx = &x;
    ExecStepResult r1, r3;
    cr_assert_eq(exec_step(&one, 1, &r1), 0, "%s", r1.why);
    cr_assert_eq(exec_step(&three, 1, &r3), 0, "%s", r3.why);
    cr_expect_eq(x.n, 3);
    for (int i = 0; i < x.n; i++) cr_expect_eq(x.asked[i], i, "micro-batch %d asked as %d", i, x.asked[i]);
    /* the parameters do not move inside a step: three equal forwards */
    cr_expect_eq(r3.loss_sum, 3 * r1.loss_sum, "%.9g vs 3 x %.9g", r3.loss_sum, r1.loss_sum);
    one_free(&a);
    one_free(&b);
}

Test(exec_step, phases_should_reach_the_tracker_the_counters_and_the_timer)
{
    One o;
    one_create(&o);
    CommCounters *cc = prof_comm_create(1);
    PhaseTimer *pt = prof_phase_create(0);
    ExecStep st = step_of(&o);
    st.accum = 2;
    st.mt = o.mt, st.cc = cc, st.pt = pt, st.dev = o.dev;
    ExecStepResult sr;
    cr_assert_eq(exec_step(&st, 1, &sr), 0, "%s", sr.why);
    cr_expect_eq(prof_phase_count(pt, exec_phase_name(EXEC_PHASE_STEP)), 1);
    cr_expect_eq(prof_phase_count(pt, exec_phase_name(EXEC_PHASE_FORWARD)), 2);
    cr_expect_eq(prof_phase_count(pt, exec_phase_name(EXEC_PHASE_BACKWARD)), 2);
    cr_expect_eq(prof_phase_count(pt, exec_phase_name(EXEC_PHASE_OPTIMIZER)), 1);
    cr_expect_str_eq(prof_phase_current(pt), "", "every phase closed");
    /* the planner's names: activations peak in forward/backward, AdamW's state appears in "step" */
    cr_expect_gt(prof_mem_phase_peak(o.mt, "forward"), 0);
    cr_expect_gt(prof_mem_phase_peak(o.mt, "backward"), 0);
    cr_expect_gt(prof_mem_phase_peak(o.mt, "step"), 0);
    cr_expect_str_eq(prof_comm_current_phase(cc), "step");
    double parts = sr.ms[EXEC_PHASE_FORWARD] + sr.ms[EXEC_PHASE_BACKWARD] + sr.ms[EXEC_PHASE_OPTIMIZER];
    for (int p = 0; p <= EXEC_PHASE_STEP; p++) cr_expect_gt(sr.ms[p], 0, "phase %s", exec_phase_name((ExecPhase)p));
    cr_expect_geq(sr.ms[EXEC_PHASE_STEP], parts, "the step holds its parts: %g < %g ms", sr.ms[EXEC_PHASE_STEP], parts);
    cr_expect_leq(fabs(sr.ms[EXEC_PHASE_STEP] - 1e3 * prof_phase_seconds(pt, "step")), 1.0,
                  "the timer saw the same step");
    prof_phase_destroy(pt);
    prof_comm_destroy(cc);
    one_free(&o);
}

static int no_batch(void *ctx, int micro, ExecBatch *b) { return -1; }

Test(exec_step, a_batch_that_cannot_be_made_should_fail_the_step_with_a_sentence)
{
    One o;
    one_create(&o);
    PhaseTimer *pt = prof_phase_create(0);
    ExecStep st = step_of(&o);
    st.batch = no_batch;
    st.pt = pt;
    ExecStepResult sr;
    cr_expect_eq(exec_step(&st, 1, &sr), -1);
    cr_assert_not_null(sr.why);
    cr_expect(strstr(sr.why, "batch") != NULL, "%s", sr.why);
    cr_expect_str_eq(prof_phase_current(pt), "", "the step's phase closed on the way out");
    prof_phase_destroy(pt);
    one_free(&o);
}

Test(exec_step, a_non_finite_loss_should_be_flagged_for_the_caller_to_stop_on)
{
    One o;
    one_create(&o);
    ExecStep st = step_of(&o);
    st.opt.lr = 1e30f;   /* the first step blows the weights up; the next loss is not a number */
    ExecStepResult sr;
    cr_assert_eq(exec_step(&st, 1, &sr), 0, "%s", sr.why);
    cr_expect_eq(sr.nonfinite, 0);
    cr_expect_eq(exec_step(&st, 2, &sr), 0, "a NaN is the caller's to stop on: %s", sr.why);
    cr_expect_eq(sr.nonfinite, 1);
    cr_expect(!isfinite(sr.loss_sum));
    one_free(&o);
}

/* ---- the programs: the losses they gave before the step was shared ---- */

static double *run_losses(int np, const char *args, int *n)
{
    char bin[PATH_MAX], json[64], all[512];
    test_sibling_path(bin, sizeof bin, "../memplan");
    snprintf(json, sizeof json, "/tmp/memplan-step-%d.json", (int)getpid());
    snprintf(all, sizeof all, "%s --json=%s", args, json);
    Run r = test_launch(bin, np, 60, all);
    cr_assert_eq(r.status, 0, "%s", r.out);
    free(r.out);
    cJSON *j = test_read_json(json), *e;
    const cJSON *log = cJSON_GetObjectItem(j, "steps_log");
    double *loss = calloc(16, sizeof *loss);
    *n = 0;
    cJSON_ArrayForEach(e, log) if (*n < 16) loss[(*n)++] = cJSON_GetObjectItem(e, "loss")->valuedouble;
    cJSON_Delete(j);
    unlink(json);
    return loss;
}

static void expect_losses(int np, const char *args, const double *want, int nwant)
{
    int n;
    double *got = run_losses(np, args, &n);
    cr_expect_eq(n, nwant, "%s", args);
    for (int i = 0; i < n && i < nwant; i++)
        cr_expect_float_eq(got[i], want[i], 1e-5 * want[i], "%s: step %d loss %.17g, before %.17g", args, i + 1, got[i],
                           want[i]);
    free(got);
}

Test(exec_step, memplan_run_should_give_the_losses_it_gave_before_the_step_was_shared, .timeout = 120)
{
    static const double ZERO2[] = {5.55117678642273, 5.478223085403442, 5.41522514820099};
    static const double ZERO3[] = {5.201022624969482, 5.01685094833374};
    expect_losses(2, "run --model gpt2-tiny --strategy zero2 --steps 3 --grad-accum 2 --seed 7", ZERO2, 3);
    expect_losses(0, "run --model gpt2-tiny --strategy zero3 --steps 2 --seed 3", ZERO3, 2);
}

Test(exec_step, cnn_device_should_give_the_losses_it_gave_before_the_step_was_shared, .timeout = 120)
{
    char bin[PATH_MAX], json[64], args[256];
    test_sibling_path(bin, sizeof bin, "../bench/cnn_device");
    snprintf(json, sizeof json, "/tmp/memplan-step-cnn-%d.json", (int)getpid());
    snprintf(args, sizeof args,
             "--device cpu --model resnet-tiny --image 64 --batches 2,4 --steps 2 --seed 5 --check --json %s", json);
    Run r = test_launch(bin, 2, 60, args);
    cr_assert_eq(r.status, 0, "%s", r.out);
    /* the CPU reference is the same step on one process over the global batch */
    cr_expect_eq(test_count(r.out, "ok: worst unit"), 2, "%s", r.out);
    free(r.out);
    cJSON *j = test_read_json(json), *e;
    static const double WANT[] = {2.8020715713500977, 2.4895281791687012};
    int i = 0;
    cJSON_ArrayForEach(e, cJSON_GetObjectItem(j, "rows")) {
        cr_assert_lt(i, 2);
        double loss = cJSON_GetObjectItem(e, "loss")->valuedouble;
        cr_expect_float_eq(loss, WANT[i], 1e-5 * WANT[i], "batch row %d: loss %.17g, before %.17g", i, loss, WANT[i]);
        i++;
    }
    cr_expect_eq(i, 2);
    cJSON_Delete(j);
    unlink(json);
}
