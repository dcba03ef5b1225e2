/* test_exec_cnn.c — the CNN runtime and SyncBatchNorm. Single-process properties (shapes against
 * the planner's zoo, gradients against finite differences, evaluation mode, memory, learning)
 * are tested here directly; multi-rank ones run tests/mpi/cnn_check under `timeout 60 mpirun
 * -np N --oversubscribe` (Criterion forks, so MPI lives in its own processes).
 *
 * Equivalence tolerances: SyncBN against plain BN on the whole batch, one layer: normwise
 * relative < 1e-5 (measured ~5e-8). A DDP step of resnet-tiny with SyncBN on N ranks against one
 * process on the global batch of 8 images at 64×64: per unit, normwise relative < 1e-5 for the
 * reduced gradients and for the parameters after 3 AdamW steps at lr 1e-4 (measured: gradients
 * 2e-6, parameters 4e-7; the per-rank statistics and partial sums are rounded to fp32 before
 * they are combined, as in PyTorch). At the preset's 32×32 the last stage is 1×1, so its BN
 * layers see 8 values per channel and amplify those roundings (gradients 1.8e-5 on 2 ranks): the
 * tests use 64×64. No elementwise bound on parameters: AdamW divides by sqrt(v) + 1e-8, so an element
 * whose gradient is near 1e-8 (a BN bias deep in cancellation) moves by a step that depends on
 * its gradient's last bits (docs/validation.md says the same for GPT-2). */
#include <criterion/criterion.h>
#include <libgen.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "exec_cnn.h"
#include "exec_device.h"
#include "exec_kern.h"
#include "exec_model.h"
#include "kern_cnn.h"
#include "plan_comm.h"
#include "plan_gpu.h"
#include "plan_model.h"
#include "plan_strategy.h"
#include "plan_train.h"
#include "plan_zoo.h"
#include "prof_mem.h"

#include "test_run.h"

/* tests/mpi/cnn_check under `timeout 60 mpirun -np N --oversubscribe` */
static Run mpirun(int np, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static Run mpirun(int np, const char *fmt, ...)
{
    char bin[PATH_MAX], args[1024];
    test_sibling_path(bin, sizeof bin, "mpi/cnn_check");
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(args, sizeof args, fmt, ap);
    va_end(ap);
    return test_launch(bin, np, 60, args);
}

/* ---- single process ---- */

typedef struct {
    Device *dev;
    MemTracker *mt;
    Cnn *cnn;
    ExecModel *m;
    CnnConfig cfg;
    float *images;
    int *labels;
    int B;
} Fixture;

static void fixture(Fixture *f, const char *name, int B)
{
    char err[256];
    memset(f, 0, sizeof *f);
    cr_assert_eq(exec_cnn_config_preset(&f->cfg, name), 0);
    f->dev = exec_device_create(DEVICE_HOST, 0, err, sizeof err);
    cr_assert_not_null(f->dev, "%s", err);
    f->mt = exec_device_tracker_create(f->dev, 0);
    cr_assert_eq(exec_cnn_create(&f->cnn, &f->cfg, f->mt, NULL, NULL), 0);
    f->m = exec_cnn_model(f->cnn);
    cr_assert_eq(exec_model_init_params(f->m, 42), 0);
    f->B = B;
    size_t img = (size_t)f->cfg.in_channels * f->cfg.image_size * f->cfg.image_size;
    f->images = malloc((size_t)B * img * sizeof *f->images);
    f->labels = malloc((size_t)B * sizeof *f->labels);
    cr_assert_eq(exec_cnn_synthetic_batch(&f->cfg, 3, 0, 0, B, f->images, f->labels), 0);
}

static void fixture_free(Fixture *f)
{
    exec_cnn_destroy(f->cnn);
    cr_expect_eq(prof_mem_current_total(f->mt), 0, "the model left %zu tracked bytes", prof_mem_current_total(f->mt));
    prof_mem_destroy(f->mt);
    exec_device_destroy(f->dev);
    free(f->images);
    free(f->labels);
}

static float loss_of(Fixture *f)
{
    float loss = 0;
    ExecBatch b = {f->images, f->labels, f->B, 0};
    cr_assert_eq(exec_model_forward(f->m, &b, &loss), 0, "%s", exec_model_error(f->m));
    return loss;
}

/* The zoo's layers with parameters, one by one, against the runtime's units. */
static void expect_planner_layers(const CnnConfig *cfg, const ModelSpec *spec)
{
    int u = 0;
    char name[64];
    for (int i = 0; i < spec->n_layers; i++) {
        const LayerSpec *l = &spec->layers[i];
        if (l->params == 0) continue;
        cr_assert_lt(u, exec_cnn_cfg_units(cfg), "the planner has more layers with parameters");
        exec_cnn_cfg_unit_name(cfg, u, name, sizeof name);
        cr_expect_str_eq(name, l->name, "unit %d", u);
        cr_expect_eq((int64_t)exec_cnn_cfg_unit_numel(cfg, u), l->params, "unit %d (%s): %zu parameters, the planner %lld",
                     u, name, exec_cnn_cfg_unit_numel(cfg, u), (long long)l->params);
        u++;
    }
    cr_expect_eq(u, exec_cnn_cfg_units(cfg), "units %d, planner layers with parameters %d", exec_cnn_cfg_units(cfg), u);
    int64_t sc = 0, psc = 0;
    cr_expect_eq(exec_cnn_cfg_bn_layers(cfg, &sc), plan_model_bn_layers(spec, &psc));
    cr_expect_eq(sc, psc);
    cr_expect_eq(exec_cnn_cfg_num_params(cfg), plan_model_params(spec));
}

Test(exec_cnn, resnet50_should_have_torchvisions_parameters_and_the_planners_layers_one_by_one)
{
    CnnConfig cfg;
    cr_assert_eq(exec_cnn_config_preset(&cfg, "resnet50"), 0);
    cr_expect_eq(exec_cnn_cfg_num_params(&cfg), 25557032);
    int64_t sc = 0;
    cr_expect_eq(exec_cnn_cfg_bn_layers(&cfg, &sc), 53);
    cr_expect_eq(sc, 26560);
    cr_expect_eq(exec_cnn_cfg_units(&cfg), 107);
    ModelSpec spec;
    char msg[256];
    cr_assert_eq(plan_zoo_build(&spec, "resnet50", msg, sizeof msg), 0, "%s", msg);
    expect_planner_layers(&cfg, &spec);
    /* the buffers DDP broadcasts: running mean, var and num_batches_tracked per BN layer */
    Device *dev = exec_device_create(DEVICE_HOST, 0, msg, sizeof msg);
    MemTracker *dmt = exec_device_tracker_create(dev, 0);
    Cnn *c = NULL;
    ExecHooks ext = {0};
    ext.external_params = 1;   /* no 100 MB of parameters for a count */
    cr_assert_eq(exec_cnn_create(&c, &cfg, dmt, &ext, NULL), 0);
    size_t nbuf = 0;
    exec_model_buffers(exec_cnn_model(c), &nbuf);
    cr_expect_eq((int64_t)nbuf, plan_model_buffers(&spec));
    exec_cnn_destroy(c);
    prof_mem_destroy(dmt);
    exec_device_destroy(dev);
    plan_model_free(&spec);
}

Test(exec_cnn, resnet_tiny_should_match_the_planners_resnet_builder_layer_by_layer)
{
    CnnConfig cfg;
    cr_assert_eq(exec_cnn_config_preset(&cfg, "resnet-tiny"), 0);
    ModelSpec spec;
    char msg[256];
    cr_assert_eq(plan_model_resnet(&spec, "resnet-tiny", cfg.depths, 1, cfg.width, cfg.image_size, cfg.classes, msg,
                                   sizeof msg), 0, "%s", msg);
    expect_planner_layers(&cfg, &spec);
    plan_model_free(&spec);
}

Test(exec_cnn, gradients_should_match_central_differences_in_every_kind_of_layer)
{
    Fixture f;
    fixture(&f, "resnet-tiny", 4);
    loss_of(&f);
    cr_assert_eq(exec_model_backward(f.m), 0, "%s", exec_model_error(f.m));
    /* stem conv, stem BN, a 3x3 conv, a downsample conv, the last BN, the fc head */
    const char *want[] = {"stem.conv", "stem.bn", "layer2.0.2.conv", "layer3.0.downsample.conv", "layer4.0.3.bn", "fc"};
    char name[64];
    int checked = 0;
    for (int u = 0; u < exec_model_units(f.m); u++) {
        exec_cnn_cfg_unit_name(&f.cfg, u, name, sizeof name);
        int hit = 0;
        for (size_t k = 0; k < sizeof want / sizeof want[0]; k++) hit |= strcmp(name, want[k]) == 0;
        if (!hit) continue;
        float *p = exec_model_unit_params(f.m, u), *g = exec_model_unit_grads(f.m, u);
        size_t n = exec_model_unit_numel(f.m, u), best = 0;
        for (size_t i = 1; i < n; i++)
            if (fabsf(g[i]) > fabsf(g[best])) best = i;
        float save = p[best], h = 1e-3f;
        p[best] = save + h;
        double lp = loss_of(&f);
        p[best] = save - h;
        double lm = loss_of(&f);
        p[best] = save;
        double fd = (lp - lm) / (2.0 * h);
        cr_expect(fabs(fd - g[best]) <= 0.03 * fabs(g[best]) + 1e-4, "%s element %zu: backward %.6g, central difference %.6g",
                  name, best, g[best], fd);
        checked++;
    }
    cr_expect_eq(checked, 6);
    fixture_free(&f);
}

Test(exec_cnn, a_training_step_should_leave_no_activations_or_workspace_and_keep_gradients)
{
    Fixture f;
    fixture(&f, "resnet-tiny", 4);
    loss_of(&f);
    cr_expect_gt(prof_mem_current(f.mt, MEM_ACTIVATIONS), 0);
    cr_assert_eq(exec_model_backward(f.m), 0, "%s", exec_model_error(f.m));
    cr_expect_eq(prof_mem_current(f.mt, MEM_ACTIVATIONS), 0);
    cr_expect_eq(prof_mem_current(f.mt, MEM_WORKSPACE), 0);
    cr_expect_gt(prof_mem_peak(f.mt, MEM_WORKSPACE), 0);
    cr_expect_eq(prof_mem_current(f.mt, MEM_GRADS), 4 * (size_t)exec_model_num_params(f.m));
    ExecAdamW opt = {1e-3f, 0.9f, 0.999f, 1e-8f, 0.0f};
    cr_assert_eq(exec_model_adamw_step(f.m, &opt, 1), 0, "%s", exec_model_error(f.m));
    cr_expect_eq(prof_mem_current(f.mt, MEM_OPTIMIZER), 8 * (size_t)exec_model_num_params(f.m));
    cr_expect_neq(exec_model_backward(f.m), 0, "a second backward without forward must be refused");
    fixture_free(&f);
}

Test(exec_cnn, evaluation_mode_should_use_the_running_statistics_and_refuse_backward)
{
    Fixture f;
    fixture(&f, "resnet-tiny", 4);
    size_t nbuf = 0;
    float *buf = exec_model_buffers(f.m, &nbuf);
    cr_expect_eq(buf[0], 0.0f, "running_mean starts at 0");
    cr_expect_eq(buf[8], 1.0f, "running_var starts at 1");
    float *before = malloc(nbuf * sizeof *before);
    exec_cnn_set_training(f.cnn, 0);
    memcpy(before, buf, nbuf * sizeof *before);
    loss_of(&f);
    cr_expect_eq(memcmp(before, buf, nbuf * sizeof *buf), 0, "evaluation changed the buffers");
    int rows = 0;
    const float *logits = exec_cnn_logits(f.cnn, &rows);
    cr_assert_not_null(logits);
    cr_expect_eq(rows, 4);
    float first = logits[0];
    cr_expect_neq(exec_model_backward(f.m), 0);
    cr_expect(strstr(exec_model_error(f.m), "training-mode forward") != NULL, "%s", exec_model_error(f.m));
    exec_cnn_set_training(f.cnn, 1);
    loss_of(&f);
    cr_expect_eq(buf[16], 1.0f, "num_batches_tracked of the stem BN after one training forward");
    cr_expect_neq(buf[0], 0.0f, "the training forward updates running_mean");
    cr_expect_neq(exec_cnn_logits(f.cnn, NULL)[0], first, "batch statistics differ from the initial running ones");
    free(before);
    fixture_free(&f);
}

Test(exec_cnn, loss_should_fall_on_the_synthetic_images)
{
    Fixture f;
    fixture(&f, "resnet-tiny", 16);
    ExecAdamW opt = {3e-3f, 0.9f, 0.999f, 1e-8f, 0.0f};
    double first = 0, last = 0;
    for (int step = 1; step <= 15; step++) {
        cr_assert_eq(exec_cnn_synthetic_batch(&f.cfg, 3, step, 0, f.B, f.images, f.labels), 0);
        exec_model_zero_grad(f.m);
        double l = loss_of(&f);
        cr_assert_eq(exec_model_backward(f.m), 0, "%s", exec_model_error(f.m));
        cr_assert_eq(exec_model_adamw_step(f.m, &opt, step), 0);
        if (step == 1) first = l;
        last = l;
    }
    cr_expect(first > 1.8 && first < 3.2, "initial loss %.3f is not about ln(10) = 2.30", first);
    cr_expect_lt(last, first - 0.5, "loss went from %.3f to %.3f in 15 steps", first, last);
    fixture_free(&f);
}

Test(exec_cnn, synthetic_rows_should_not_depend_on_how_the_batch_is_split)
{
    CnnConfig cfg;
    exec_cnn_config_preset(&cfg, "resnet-tiny");
    size_t img = (size_t)cfg.in_channels * cfg.image_size * cfg.image_size;
    float *all = malloc(6 * img * sizeof *all), *part = malloc(2 * img * sizeof *part);
    int la[6], lp[2];
    cr_assert_eq(exec_cnn_synthetic_batch(&cfg, 9, 4, 0, 6, all, la), 0);
    cr_assert_eq(exec_cnn_synthetic_batch(&cfg, 9, 4, 3, 2, part, lp), 0);
    cr_expect_eq(memcmp(part, all + 3 * img, 2 * img * sizeof *part), 0);
    cr_expect(lp[0] == la[3] && lp[1] == la[4]);
    free(all);
    free(part);
}

/* ---- several ranks ---- */

static void expect_ok(int np, const char *args)
{
    Run r = mpirun(np, "%s", args);
    cr_expect_eq(r.status, 0, "cnn_check %s on %d ranks exited %d:\n%s", args, np, r.status, r.out);
    cr_expect_eq(test_count(r.out, "cnn_check: rank"), np, "%s", r.out);
    free(r.out);
}

Test(exec_cnn, syncbn_on_2_and_4_ranks_should_equal_batchnorm_on_the_whole_batch_in_one_process, .timeout = 120)
{
    expect_ok(2, "syncbn");
    expect_ok(4, "syncbn");
}

Test(exec_cnn, syncbn_should_combine_unequal_per_rank_batches, .timeout = 120)
{
    expect_ok(2, "syncbn --unequal");
    expect_ok(4, "syncbn --unequal");
}

Test(exec_cnn, converting_after_wrapping_should_be_refused_with_a_message_that_says_to_convert_first, .timeout = 60)
{
    Run r = mpirun(2, "refuse");
    cr_expect_eq(r.status, 0, "%s", r.out);
    cr_expect(strstr(r.out, "refused: cannot convert BatchNorm to SyncBatchNorm: the model is already wrapped by a "
                            "data-parallel strategy; convert first, then wrap") != NULL, "%s", r.out);
    free(r.out);
}

static void tmpdir(char *buf, size_t len)
{
    snprintf(buf, len, "/tmp/memplan-cnn-XXXXXX");
    cr_assert_not_null(mkdtemp(buf));
}

static float *read_floats(const char *path, size_t *n)
{
    FILE *f = fopen(path, "rb");
    cr_assert_not_null(f, "no dump %s", path);
    fseek(f, 0, SEEK_END);
    long bytes = ftell(f);
    fseek(f, 0, SEEK_SET);
    float *a = malloc((size_t)bytes);
    *n = fread(a, sizeof *a, (size_t)bytes / sizeof *a, f);
    fclose(f);
    return a;
}

/* Per unit (then the buffers as one block), normwise relative difference of b against ref. */
static double worst_unit(const char *ref_path, const char *path, const CnnConfig *cfg, const char **where)
{
    size_t na, nb;
    float *a = read_floats(path, &na), *b = read_floats(ref_path, &nb);
    cr_assert_eq(na, nb, "%s holds %zu floats, %s %zu", path, na, ref_path, nb);
    static char name[64];
    double worst = 0;
    size_t off = 0;
    for (int u = 0; off < na; u++) {
        size_t m = u < exec_cnn_cfg_units(cfg) ? exec_cnn_cfg_unit_numel(cfg, u) : na - off;
        double d2 = 0, b2 = 0;
        for (size_t i = off; i < off + m; i++) {
            cr_assert(isfinite(a[i]), "%s: element %zu is not finite", path, i);
            d2 += ((double)a[i] - b[i]) * ((double)a[i] - b[i]);
            b2 += (double)b[i] * b[i];
        }
        double rel = b2 > 0 ? sqrt(d2 / b2) : sqrt(d2);
        if (rel > worst) {
            worst = rel;
            if (u < exec_cnn_cfg_units(cfg)) exec_cnn_cfg_unit_name(cfg, u, name, sizeof name);
            else snprintf(name, sizeof name, "buffers");
            *where = name;
        }
        off += m;
    }
    free(a);
    free(b);
    return worst;
}

static double loss_at(const char *out, int step)
{
    char key[32];
    snprintf(key, sizeof key, "step %d loss ", step);
    const char *p = strstr(out, key);
    cr_assert_not_null(p, "no loss for step %d in:\n%s", step, out);
    return strtod(p + strlen(key), NULL);
}

/* One process on the global batch of 8 images, then `strategy` on np ranks (8/np images each). */
static void expect_equivalence(int np, const char *strategy, int syncbn, int same)
{
    CnnConfig cfg;
    exec_cnn_config_preset(&cfg, "resnet-tiny");
    char dir[64], ref[96], refg[96], path[96], grads[96];
    tmpdir(dir, sizeof dir);
    snprintf(ref, sizeof ref, "%s/ref.bin", dir);
    snprintf(refg, sizeof refg, "%s/refg.bin", dir);
    snprintf(path, sizeof path, "%s/run.bin", dir);
    snprintf(grads, sizeof grads, "%s/grads.bin", dir);
    const char *bn = syncbn ? "--syncbn" : "";
    Run r1 = mpirun(1, "train --image-size 64 --global-batch 8 --steps 3 %s --dump %s --grads %s", bn, ref, refg);
    cr_assert_eq(r1.status, 0, "%s", r1.out);
    Run rn = mpirun(np, "train --image-size 64 --global-batch 8 --steps 3 --strategy %s %s --dump %s --grads %s", strategy,
                    bn, path, grads);
    cr_assert_eq(rn.status, 0, "%s on %d ranks:\n%s", strategy, np, rn.out);
    const char *where = "";
    double p = worst_unit(ref, path, &cfg, &where);
    if (same) {
        cr_expect_lt(p, 1e-5, "%s with SyncBN on %d ranks: parameters or buffers of %s differ by %.3g", strategy, np, where, p);
        if (strcmp(strategy, "ddp") == 0) {
            double g = worst_unit(refg, grads, &cfg, &where);
            cr_expect_lt(g, 1e-5, "ddp on %d ranks: the reduced gradients of %s differ by %.3g", np, where, g);
        }
        for (int s = 1; s <= 3; s++) {
            double a = loss_at(r1.out, s), b = loss_at(rn.out, s);
            cr_expect_lt(fabs(a - b), 1e-5 * fabs(a), "step %d: loss %.9f on %d ranks, %.9f in one process", s, b, np, a);
        }
    } else {
        cr_expect_gt(p, 1e-3, "plain BatchNorm on %d ranks should not match one process (worst %.3g)", np, p);
    }
    free(r1.out);
    free(rn.out);
    unlink(ref);
    unlink(refg);
    unlink(path);
    unlink(grads);
    rmdir(dir);
}

Test(exec_cnn, ddp_with_syncbn_on_2_ranks_should_equal_one_process_on_the_global_batch, .timeout = 120)
{
    expect_equivalence(2, "ddp", 1, 1);
}

Test(exec_cnn, ddp_with_syncbn_on_4_ranks_should_equal_one_process_on_the_global_batch, .timeout = 120)
{
    expect_equivalence(4, "ddp", 1, 1);
}

Test(exec_cnn, zero1_zero2_and_zero3_with_syncbn_should_equal_one_process_on_the_global_batch, .timeout = 120)
{
    expect_equivalence(2, "zero1", 1, 1);
    expect_equivalence(2, "zero2", 1, 1);
    expect_equivalence(4, "zero3", 1, 1);
}

Test(exec_cnn, ddp_with_plain_batchnorm_should_differ_from_one_process_because_statistics_are_per_rank, .timeout = 120)
{
    expect_equivalence(2, "ddp", 0, 0);
}

/* plan_comm for DDP + SyncBN on the tiny model, summed by (collective, phase). */
static void planned(int np, double cnt[COLL_COUNT][PHASE_COUNT], double pay[COLL_COUNT][PHASE_COUNT])
{
    CnnConfig cfg;
    exec_cnn_config_preset(&cfg, "resnet-tiny");
    ModelSpec m;
    char msg[256];
    cr_assert_eq(plan_model_resnet(&m, "resnet-tiny", cfg.depths, 1, cfg.width, cfg.image_size, cfg.classes, msg, sizeof msg), 0);
    TrainSpec t;
    plan_train_defaults(&t);
    t.precision = PREC_FP32;
    t.micro_batch = 8 / np;
    t.syncbn = 1;
    t.impl = IMPL_ENGINE;   /* the engine keeps BN's counter in its fp32 buffer: one broadcast, 4 B each */
    ClusterSpec c;
    plan_cluster_defaults(&c);
    c.gpus = c.gpus_per_node = np;
    CommPlan cp;
    plan_comm(&m, &t, &c, (StrategyKind)plan_strategy_by_name("ddp"), &cp);
    memset(cnt, 0, sizeof(double) * COLL_COUNT * PHASE_COUNT);
    memset(pay, 0, sizeof(double) * COLL_COUNT * PHASE_COUNT);
    for (int i = 0; i < cp.n; i++) {
        cnt[cp.c[i].op][cp.c[i].phase] += cp.c[i].count;
        pay[cp.c[i].op][cp.c[i].phase] += cp.c[i].payload_bytes;
    }
    plan_model_free(&m);
}

static void expect_planned_collectives(int np)
{
    char dir[64], path[96];
    tmpdir(dir, sizeof dir);
    snprintf(path, sizeof path, "%s/coll.txt", dir);
    Run r = mpirun(np, "train --global-batch 8 --steps 2 --syncbn --coll %s", path);
    cr_assert_eq(r.status, 0, "%s", r.out);
    double cnt[COLL_COUNT][PHASE_COUNT], pay[COLL_COUNT][PHASE_COUNT], mc[COLL_COUNT][PHASE_COUNT] = {{0}},
           mp[COLL_COUNT][PHASE_COUNT] = {{0}};
    planned(np, cnt, pay);
    FILE *f = fopen(path, "r");
    cr_assert_not_null(f);
    char op[32], ph[32];
    long long n;
    double bytes;
    while (fscanf(f, "%31s %31s %lld %lf", op, ph, &n, &bytes) == 4) {
        int o = -1, p = -1;
        for (int k = 0; k < COLL_COUNT; k++)
            if (strcmp(op, coll_name((CollKind)k)) == 0) o = k;
        for (int k = 0; k < PHASE_COUNT; k++)
            if (strcmp(ph, phase_name((PhaseKind)k)) == 0) p = k;
        cr_assert(o >= 0 && p >= 0, "the run issued %s in %s, which the planner has no name for", op, ph);
        mc[o][p] += (double)n;
        mp[o][p] += bytes;
    }
    fclose(f);
    for (int o = 0; o < COLL_COUNT; o++)
        for (int p = 0; p < PHASE_COUNT; p++) {
            cr_expect_eq(mc[o][p], cnt[o][p], "%d ranks, %s in %s: measured %.0f per step, plan_comm %.0f", np,
                         coll_name((CollKind)o), phase_name((PhaseKind)p), mc[o][p], cnt[o][p]);
            cr_expect_eq(mp[o][p], pay[o][p], "%d ranks, %s in %s: measured %.0f bytes per step, plan_comm %.0f", np,
                         coll_name((CollKind)o), phase_name((PhaseKind)p), mp[o][p], pay[o][p]);
        }
    /* SyncBN alone: 17 BN layers, ΣC = 1208 -> all-gathers of (2·1208 + 17)·4·N bytes in forward */
    cr_expect_eq(mc[COLL_ALL_GATHER][PHASE_FORWARD], 17);
    cr_expect_eq(mp[COLL_ALL_GATHER][PHASE_FORWARD], (2.0 * 1208 + 17) * 4 * np);
    free(r.out);
    unlink(path);
    rmdir(dir);
}

Test(exec_cnn, measured_syncbn_and_ddp_collectives_should_equal_the_planners_formula_on_2_and_4_ranks, .timeout = 120)
{
    expect_planned_collectives(2);
    expect_planned_collectives(4);
}

/* ---- the device path: the kernel table, a CNN on a Device, the GPU (skipped without one) ---- */

static void fill_rand(float *a, size_t n, unsigned seed)
{
    for (size_t i = 0; i < n; i++) {
        seed = seed * 1664525u + 1013904223u;
        a[i] = (float)((seed >> 8) & 0xFFFF) / 32768.0f - 1.0f;
    }
}

Test(exec_cnn, the_host_kernel_tables_cnn_entries_should_compute_bitwise_what_kern_cnn_computes)
{
    const ExecKernels *k = exec_kernels(DEVICE_HOST);
    enum { N = 2, C = 3, H = 9, W = 7, OC = 4, K = 3, S = 2, P = 1 };
    int OH = kern_conv2d_out_size(H, K, S, P), OW = kern_conv2d_out_size(W, K, S, P);
    size_t col = kern_conv2d_col_size(C, H, W, K, S, P), nin = (size_t)N * C * H * W, nout = (size_t)N * OC * OH * OW;
    float *in = malloc(nin * 4), *w = malloc(OC * C * K * K * 4), *scratch = malloc(col * 4), *o1 = malloc(nout * 4),
          *o2 = malloc(nout * 4), *d1 = calloc(nin, 4), *d2 = calloc(nin, 4), *g1 = calloc(OC * C * K * K, 4),
          *g2 = calloc(OC * C * K * K, 4), *dout = malloc(nout * 4);
    fill_rand(in, nin, 1);
    fill_rand(w, OC * C * K * K, 2);
    fill_rand(dout, nout, 3);
    kern_conv2d_forward(o1, in, w, scratch, N, C, H, W, OC, K, S, P);
    cr_expect_eq(k->conv2d_forward(o2, in, w, scratch, N, C, H, W, OC, K, S, P, NULL), 0);
    cr_expect_arr_eq(o1, o2, nout * 4, "conv2d_forward");
    kern_conv2d_backward(d1, g1, scratch, dout, in, w, N, C, H, W, OC, K, S, P);
    cr_expect_eq(k->conv2d_backward(d2, g2, scratch, dout, in, w, N, C, H, W, OC, K, S, P, NULL), 0);
    cr_expect_arr_eq(d1, d2, nin * 4, "conv2d_backward dinp");
    cr_expect_arr_eq(g1, g2, OC * C * K * K * 4, "conv2d_backward dweight");
    /* BatchNorm over the conv output, forward and backward */
    float m1[OC], m2[OC], s1[OC], s2[OC], rm1[OC] = {0}, rm2[OC] = {0}, rv1[OC] = {1, 1, 1, 1}, rv2[OC] = {1, 1, 1, 1};
    kern_batchnorm_forward(o1, m1, s1, rm1, rv1, o2, NULL, NULL, N, OC, OH, OW, 0.1f);
    float *b2 = malloc(nout * 4);
    cr_expect_eq(k->batchnorm_forward(b2, m2, s2, rm2, rv2, o2, NULL, NULL, N, OC, OH, OW, 0.1f, NULL), 0);
    cr_expect_arr_eq(o1, b2, nout * 4, "batchnorm_forward");
    cr_expect_arr_eq(rv1, rv2, sizeof rv1, "running_var");
    float *e1 = calloc(nout, 4), *e2 = calloc(nout, 4);
    kern_batchnorm_backward(e1, NULL, NULL, dout, o2, m1, s1, NULL, N, OC, OH, OW);
    cr_expect_eq(k->batchnorm_backward(e2, NULL, NULL, dout, o2, m2, s2, NULL, N, OC, OH, OW, NULL), 0);
    cr_expect_arr_eq(e1, e2, nout * 4, "batchnorm_backward");
    int *a1 = malloc(nin * 4), *a2 = malloc(nin * 4);
    kern_maxpool2d_forward(d1, a1, in, N, C, H, W, 3, 2, 1);
    cr_expect_eq(k->maxpool2d_forward(d2, a2, in, N, C, H, W, 3, 2, 1, NULL), 0);
    size_t np = (size_t)N * C * kern_conv2d_out_size(H, 3, 2, 1) * kern_conv2d_out_size(W, 3, 2, 1);
    cr_expect_arr_eq(d1, d2, np * 4, "maxpool2d_forward");
    cr_expect_arr_eq(a1, a2, np * 4, "maxpool2d argmax");
    free(in); free(w); free(scratch); free(o1); free(o2); free(d1); free(d2); free(g1); free(g2); free(dout);
    free(b2); free(e1); free(e2); free(a1); free(a2);
}

/* Two steps (forward, backward, AdamW) of cnn on its images; the losses in loss[2]. */
static void train2(ExecModel *m, const float *images, const int *labels, int B, float loss[2])
{
    static const ExecAdamW opt = {1e-3f, 0.9f, 0.999f, 1e-8f, 0.01f};
    for (int t = 1; t <= 2; t++) {
        exec_model_zero_grad(m);
        ExecBatch b = {images, labels, B, 0};
        cr_assert_eq(exec_model_forward(m, &b, &loss[t - 1]), 0, "%s", exec_model_error(m));
        cr_assert_eq(exec_model_backward(m), 0, "%s", exec_model_error(m));
        cr_assert_eq(exec_model_adamw_step(m, &opt, t), 0, "%s", exec_model_error(m));
    }
}

Test(exec_cnn, a_cnn_on_a_host_device_should_train_bitwise_as_the_default_cnn)
{
    Fixture f;
    fixture(&f, "resnet-tiny", 4);
    char err[256];
    Device *dev = exec_device_create(DEVICE_HOST, 0, err, sizeof err);
    MemTracker *mt = exec_device_tracker_create(dev, 0);
    Cnn *on = NULL;
    cr_assert_eq(exec_cnn_create_on(&on, &f.cfg, mt, dev, NULL, NULL), 0);
    cr_expect_eq(exec_cnn_device(on), dev);
    cr_assert_eq(exec_cnn_init_params(on, 42), 0, "%s", exec_cnn_error(on));
    float l1[2], l2[2];
    train2(f.m, f.images, f.labels, f.B, l1);
    train2(exec_cnn_model(on), f.images, f.labels, f.B, l2);
    cr_expect_arr_eq(l1, l2, sizeof l1, "losses %g %g vs %g %g", l1[0], l1[1], l2[0], l2[1]);
    for (int u = 0; u < exec_model_units(f.m); u++)
        cr_expect_arr_eq(exec_model_unit_params(f.m, u), exec_model_unit_params(exec_cnn_model(on), u),
                         exec_model_unit_numel(f.m, u) * sizeof(float), "unit %d", u);
    size_t n1, n2;
    float *b1 = exec_model_buffers(f.m, &n1), *bb = exec_model_buffers(exec_cnn_model(on), &n2);
    cr_assert_eq(n1, n2);
    cr_expect_arr_eq(b1, bb, n1 * sizeof(float), "the BN buffers");
    exec_cnn_destroy(on);
    cr_expect_eq(prof_mem_current_total(mt), 0);
    prof_mem_destroy(mt);
    exec_device_destroy(dev);
    fixture_free(&f);
}

Test(exec_cnn, on_a_gpu_resnet_tiny_should_train_as_the_cpu_within_1e_4, .timeout = 120)
{
    char why[256];
    if (exec_device_cuda_count(why, sizeof why) == 0) cr_skip_test("skipped: %s", why);
    Fixture f;
    fixture(&f, "resnet-tiny", 4);
    f.cfg.image_size = 64;   /* as the multi-rank checks: the last stage's BN sees more than 1×1 */
    exec_cnn_destroy(f.cnn);
    cr_assert_eq(exec_cnn_create(&f.cnn, &f.cfg, f.mt, NULL, NULL), 0);
    f.m = exec_cnn_model(f.cnn);
    cr_assert_eq(exec_model_init_params(f.m, 42), 0);
    size_t img = (size_t)f.cfg.in_channels * 64 * 64;
    f.images = realloc(f.images, (size_t)f.B * img * sizeof *f.images);
    cr_assert_eq(exec_cnn_synthetic_batch(&f.cfg, 3, 0, 0, f.B, f.images, f.labels), 0);
    char err[256];
    Device *dev = exec_device_create(DEVICE_CUDA, 0, err, sizeof err);
    cr_assert_not_null(dev, "%s", err);
    MemTracker *mt = exec_device_tracker_create(dev, 0);
    Cnn *g = NULL;
    cr_assert_eq(exec_cnn_create_on(&g, &f.cfg, mt, dev, NULL, NULL), 0);
    cr_assert_eq(exec_cnn_init_params(g, 42), 0, "%s", exec_cnn_error(g));
    float lc[2], lg[2];
    train2(f.m, f.images, f.labels, f.B, lc);
    train2(exec_cnn_model(g), f.images, f.labels, f.B, lg);
    for (int i = 0; i < 2; i++) cr_expect_lt(fabs(lg[i] - lc[i]) / fabs(lc[i]), 1e-4, "step %d loss %g vs %g", i + 1, lg[i], lc[i]);
    for (int u = 0; u < exec_model_units(f.m); u++) {
        size_t n = exec_model_unit_numel(f.m, u);
        float *h = malloc(n * sizeof *h);
        exec_device_copy(dev, h, exec_model_unit_params(exec_cnn_model(g), u), n * sizeof *h);
        const float *c = exec_model_unit_params(f.m, u);
        double d2 = 0, c2 = 0;
        for (size_t i = 0; i < n; i++) {
            d2 += ((double)h[i] - c[i]) * ((double)h[i] - c[i]);
            c2 += (double)c[i] * c[i];
        }
        cr_expect_lt(sqrt(d2 / c2), 1e-4, "unit %d: normwise relative %.3e", u, sqrt(d2 / c2));
        free(h);
    }
    cr_expect_eq(exec_device_failed(dev), 0);
    exec_cnn_destroy(g);
    prof_mem_destroy(mt);
    exec_device_destroy(dev);
    fixture_free(&f);
}

/* build/bench/cnn_device: the device path under DDP (+ SyncBN on several ranks) with --check */
static Run cnn_device(int np, const char *args)
{
    char bin[PATH_MAX];
    test_sibling_path(bin, sizeof bin, "../bench/cnn_device");
    return test_launch(bin, np, 60, args);
}

Test(exec_cnn, the_cnn_device_bench_on_the_cpu_should_match_one_process_on_the_global_batch, .timeout = 120)
{
    const char *args = "--device cpu --model resnet-tiny --image 64 --batches 2,4 --steps 2 --check";
    Run r1 = cnn_device(0, args), r2 = cnn_device(2, args);
    cr_expect_eq(r1.status, 0, "%s", r1.out);
    cr_expect_eq(test_count(r1.out, "ok: worst unit"), 2, "%s", r1.out);
    cr_expect(strstr(r1.out, "rel 0.00e+00") != NULL, "one rank is the same computation, bit for bit:\n%s", r1.out);
    cr_expect_eq(r2.status, 0, "%s", r2.out);
    cr_expect_eq(test_count(r2.out, "ok: worst unit"), 2, "%s", r2.out);
    cr_expect(strstr(r2.out, "DDP + SyncBatchNorm") != NULL, "%s", r2.out);
    free(r1.out);
    free(r2.out);
}

Test(exec_cnn, the_cnn_device_bench_without_a_gpu_should_say_so_in_one_line_and_exit_1, .timeout = 60)
{
    char why[256];
    if (exec_device_cuda_count(why, sizeof why) > 0) cr_skip_test("skipped: this machine has a GPU");
    Run r = cnn_device(0, "--model resnet-tiny --batches 2");
    cr_expect_eq(r.status, 1, "%s", r.out);
    cr_expect(strstr(r.out, "cnn_device: no CUDA device (") != NULL, "%s", r.out);
    cr_expect_eq(test_count(r.out, "\n"), 1, "one line:\n%s", r.out);
    Run u = cnn_device(0, "--device tpu");
    cr_expect_eq(u.status, 2, "%s", u.out);
    cr_expect(strstr(u.out, "unknown --device 'tpu' (valid: cuda, cpu)") != NULL, "%s", u.out);
    free(r.out);
    free(u.out);
}
