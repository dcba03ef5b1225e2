/* exec_syncbn_bench.c — the SyncBN benchmark's measurements and predictions
 * (exec_syncbn_bench.h). */
#include "exec_syncbn_bench.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "exec_device.h"
#include "exec_step.h"
#include "exec_strategy.h"
#include "plan_comm.h"
#include "plan_gpu.h"
#include "plan_model.h"
#include "plan_sim.h"
#include "plan_step.h"
#include "plan_strategy.h"
#include "plan_train.h"
#include "plan_util.h"
#include "plan_zoo.h"
#include "prof_phase.h"

#define IDLE_POLL_S 0.005   /* ranks outside the measured rank count sleep this long between polls */

/* ---- the link ---- */

/* The slowest rank's values (element-wise max). */
static int max_over_ranks(Comm *c, double *v, int n)
{
    int N = comm_size(c);
    double *all = malloc((size_t)N * n * sizeof *all);
    if (!all) return -1;
    int rc = comm_all_gather(c, v, all, (size_t)n, DT_F64, NULL);
    for (int r = 0; rc == 0 && r < N; r++)
        for (int i = 0; i < n; i++)
            if (all[(size_t)r * n + i] > v[i]) v[i] = all[(size_t)r * n + i];
    free(all);
    return rc;
}

/* Median seconds of one blocking collective of `count` fp32 (per rank for the all-gather),
 * slowest rank. */
static double time_coll(Comm *c, int all_gather, size_t count, int reps)
{
    int N = comm_size(c);
    float *buf = calloc(count * (all_gather ? (size_t)N : 1), sizeof *buf);
    double *t = calloc((size_t)reps, sizeof *t), med = -1;
    if (!buf || !t) goto out;
    for (int i = -3; i < reps; i++) {
        if (comm_barrier(c)) goto out;
        double t0 = prof_clock_us();
        int rc = all_gather ? comm_all_gather(c, buf + (size_t)comm_rank(c) * count, buf, count, DT_F32, NULL)
                            : comm_all_reduce(c, buf, buf, count, DT_F32, NULL);
        if (rc) goto out;
        if (i >= 0) t[i] = (prof_clock_us() - t0) * 1e-6;
    }
    med = plan_median(t, reps);
    if (max_over_ranks(c, &med, 1)) med = -1;
out:
    free(buf);
    free(t);
    return med;
}

/* Measures the link at SyncBN's mean message and at 4 MiB, and fits the planner's model:
 * t = alpha · steps + payload · factor / bw (plan_coll_seconds; ring steps: 2(n-1) for an
 * all-reduce, n-1 for an all-gather). bw from the 4 MiB transfers, then alpha by least squares
 * over the two small ones. */
static int measure_link(Comm *c, int cmean, SyncbnLink *k)
{
    int n = comm_size(c);
    memset(k, 0, sizeof *k);
    k->ranks = n;
    size_t ar_s = 2 * (size_t)cmean, ag_s = 2 * (size_t)cmean + 1, large = (size_t)1 << 20;   /* floats */
    k->ar_small_s = time_coll(c, 0, ar_s, 50);
    k->ag_small_s = time_coll(c, 1, ag_s, 50);
    k->ar_large_s = time_coll(c, 0, large, 6);
    k->ag_large_s = time_coll(c, 1, large / (size_t)n, 6);
    if (k->ar_small_s < 0 || k->ag_small_s < 0 || k->ar_large_s < 0 || k->ag_large_s < 0) return -1;
    k->ar_small_b = 4.0 * ar_s;
    k->ag_small_b = 4.0 * ag_s * n;
    k->ar_large_b = 4.0 * large;
    k->ag_large_b = 4.0 * (double)(large / (size_t)n) * n;
    double war_l = k->ar_large_b * coll_bus_factor(COLL_ALL_REDUCE, n);
    double wag_l = k->ag_large_b * coll_bus_factor(COLL_ALL_GATHER, n);
    double bw = 0.5 * (war_l / k->ar_large_s + wag_l / k->ag_large_s);   /* B/s */
    double s_ar = 2.0 * (n - 1), s_ag = (double)(n - 1);
    double r_ar = k->ar_small_s - k->ar_small_b * coll_bus_factor(COLL_ALL_REDUCE, n) / bw;
    double r_ag = k->ag_small_s - k->ag_small_b * coll_bus_factor(COLL_ALL_GATHER, n) / bw;
    k->alpha_s = fmax(0.0, (s_ar * r_ar + s_ag * r_ag) / (s_ar * s_ar + s_ag * s_ag));
    k->bw_gbps = bw / 1e9;
    return 0;
}

/* ---- the training runs ---- */

/* One copy of the model under DDP, BN or SyncBN, with its own collective counters, and its
 * measured steps in step order (the BN and SyncBN runs' step k are a pair). */
typedef struct {
    ExecStrategy *s;
    Cnn *cnn;
    ExecModel *m;
    CommCounters *cc;
    double *buf;                     /* the 8 columns below, K steps each */
    double *ms[4];                   /* forward, backward, optimizer, step, ms (slowest rank) */
    double *coll_min[2], *coll_mean[2];   /* inside SyncBN's collectives, forward and backward, ms */
    CollStats last[COLL_COUNT];   /* counted in the last measured step */
} Runner;

static void runner_free(Runner *r)
{
    exec_cnn_destroy(r->cnn);
    exec_strategy_destroy(r->s);
    prof_comm_destroy(r->cc);
    free(r->buf);
    memset(r, 0, sizeof *r);
}

static int runner_create(Runner *r, Comm *c, MemTracker *mt, const SyncbnBench *b, int syncbn, char *err, size_t len)
{
    memset(r, 0, sizeof *r);
    ExecStrategyOptions so = {EXEC_DDP, b->bucket_bytes, 0, 0};
    ExecHooks hooks;
    size_t K = (size_t)b->steps;
    if (!(r->buf = calloc(8 * K, sizeof *r->buf))) {
        snprintf(err, len, "out of host memory");
        return -1;
    }
    for (int i = 0; i < 4; i++) r->ms[i] = r->buf + (size_t)i * K;
    for (int j = 0; j < 2; j++) {
        r->coll_min[j] = r->buf + (4 + (size_t)j) * K;
        r->coll_mean[j] = r->buf + (6 + (size_t)j) * K;
    }
    r->cc = prof_comm_create(comm_size(c));
    if (!r->cc || exec_strategy_create(&r->s, &so, c, mt, r->cc, NULL, err, len)) return -1;
    exec_strategy_hooks(r->s, &hooks);
    if (exec_cnn_create(&r->cnn, &b->cfg, mt, &hooks, r->s)) {
        snprintf(err, len, "cannot create the CNN (out of memory?)");
        return -1;
    }
    r->m = exec_cnn_model(r->cnn);
    if (syncbn && exec_cnn_convert_sync_batchnorm(r->cnn, c) < 0) {   /* before DDP wraps it */
        snprintf(err, len, "%s", exec_cnn_error(r->cnn));
        return -1;
    }
    if (exec_strategy_bind(r->s, r->m, b->seed, 1)) {
        snprintf(err, len, "%s", exec_strategy_error(r->s));
        return -1;
    }
    return 0;
}

/* One DDP step (exec_step); k >= 0 records it as measured step k. Errors abort the job: peers
 * may be inside a collective. */
static void runner_step(Runner *r, Comm *c, ExecBatch *batch, int t, int k)
{
    static const ExecAdamW OPT = {1e-4f, 0.9f, 0.999f, 1e-8f, 0.0f};
    comm_set_counters(c, NULL);
    if (comm_barrier(c)) comm_abort(c, "the step barrier failed");
    comm_set_counters(c, r->cc);
    CollStats before[COLL_COUNT];
    for (int op = 0; op < COLL_COUNT; op++) before[op] = prof_comm_total(r->cc, (CollKind)op);
    double cs0[2], cs1[2];
    exec_cnn_syncbn_seconds(r->cnn, cs0);
    ExecStep st = {.m = r->m, .s = r->s, .opt = OPT, .accum = 1, .batch = exec_step_fixed_batch, .batch_ctx = batch,
                   .cc = r->cc};
    ExecStepResult sr;
    int rc = exec_step(&st, t, &sr);
    comm_set_counters(c, NULL);
    if (rc) {
        char msg[400];
        snprintf(msg, sizeof msg, "bench syncbn: a training step failed: %s", sr.why);
        comm_abort(c, msg);
    }
    exec_cnn_syncbn_seconds(r->cnn, cs1);
    /* forward as this bench reports it: the step up to the end of forward (zero_grad included) */
    const double *ms = sr.ms;
    double v[6] = {ms[EXEC_PHASE_STEP] - ms[EXEC_PHASE_BACKWARD] - ms[EXEC_PHASE_OPTIMIZER], ms[EXEC_PHASE_BACKWARD],
                   ms[EXEC_PHASE_OPTIMIZER], ms[EXEC_PHASE_STEP], (cs1[0] - cs0[0]) * 1e3, (cs1[1] - cs0[1]) * 1e3};
    int N = comm_size(c);
    double *all = malloc((size_t)N * 6 * sizeof *all);
    if (!all || comm_all_gather(c, v, all, 6, DT_F64, NULL)) comm_abort(c, "gathering the step times failed");
    if (k >= 0) {
        for (int i = 0; i < 4; i++) r->ms[i][k] = 0;
        for (int j = 0; j < 2; j++) r->coll_min[j][k] = r->coll_mean[j][k] = 0;
        for (int q = 0; q < N; q++) {
            const double *w = all + (size_t)q * 6;
            for (int i = 0; i < 4; i++) r->ms[i][k] = fmax(r->ms[i][k], w[i]);
            for (int j = 0; j < 2; j++) {
                r->coll_min[j][k] = q ? fmin(r->coll_min[j][k], w[4 + j]) : w[4 + j];
                r->coll_mean[j][k] += w[4 + j] / N;
            }
        }
    }
    free(all);
    if (k < 0) return;
    for (int op = 0; op < COLL_COUNT; op++) {
        CollStats now = prof_comm_total(r->cc, (CollKind)op);
        r->last[op].count = now.count - before[op].count;
        r->last[op].payload_bytes = now.payload_bytes - before[op].payload_bytes;
    }
}

/* plan_median of a copy (in scratch): the columns keep their step order, the pairing */
static double median_kept(const double *v, int n, double *scratch)
{
    memcpy(scratch, v, (size_t)n * sizeof *v);
    return plan_median(scratch, n);
}

static SyncbnPhases phases_of(const double v[4]) { return (SyncbnPhases){v[0], v[1], v[2], v[3]}; }

/* The record of one rank count and batch from the BN run (run[0]) and the SyncBN run (run[1]) of
 * K measured steps; scratch holds 2K values. */
static void summarize(const Runner run[2], int K, double *scratch, SyncbnRecord *x)
{
    double *d = scratch + K, med[2][4], dmed[4];
    for (int i = 0; i < 4; i++) {
        for (int mode = 0; mode < 2; mode++) med[mode][i] = median_kept(run[mode].ms[i], K, scratch);
        for (int k = 0; k < K; k++) d[k] = run[1].ms[i][k] - run[0].ms[i][k];
        if (i == 3) {   /* the step difference's standard error, from the pairs */
            double mean = 0, var = 0;
            for (int k = 0; k < K; k++) mean += d[k] / K;
            for (int k = 0; k < K; k++) var += (d[k] - mean) * (d[k] - mean);
            x->diff_se = K > 1 ? sqrt(var / (K - 1) / K) : 0;
        }
        dmed[i] = plan_median(d, K);
    }
    x->bn = phases_of(med[0]);
    x->sync = phases_of(med[1]);
    x->diff = phases_of(dmed);
    for (int j = 0; j < 2; j++) {
        x->coll_min_ms[j] = median_kept(run[1].coll_min[j], K, scratch);
        x->coll_mean_ms[j] = median_kept(run[1].coll_mean[j], K, scratch);
    }
    for (int op = 0; op < COLL_COUNT; op++) {
        x->extra_count[op] = (double)(run[1].last[op].count - run[0].last[op].count);
        x->extra_bytes[op] = run[1].last[op].payload_bytes - run[0].last[op].payload_bytes;
    }
}

/* The planner's view of the same step, on a cluster fitted to this link and compute rate. */
static void predict(const CnnConfig *cfg, const SyncbnLink *k, SyncbnRecord *x)
{
    ModelSpec m;
    char msg[256];
    if (plan_model_resnet(&m, cfg->name, cfg->depths, 1, cfg->width, cfg->image_size, cfg->classes, msg, sizeof msg))
        return;
    TrainSpec t;
    plan_train_defaults(&t);
    t.precision = PREC_FP32;
    t.optimizer = OPT_ADAMW;
    t.micro_batch = x->batch;
    ClusterSpec c;
    plan_cluster_defaults(&c);
    c.gpus = c.gpus_per_node = x->ranks;
    c.gpu.intra_bw = c.gpu.inter_bw = k->bw_gbps;
    c.gpu.intra_lat = c.gpu.inter_lat = k->alpha_s;
    c.coll_base_lat = 0;        /* the fit has one latency per ring step and no base */
    /* compute as measured: 3 x forward FLOPs over the BN run's forward + backward */
    double flops = 3.0 * exec_cnn_cfg_fwd_flops(cfg) * x->batch, secs = (x->bn.fwd + x->bn.bwd) / 1e3;
    for (int i = 0; i < 3; i++) c.gpu.peak_tflops[i] = secs > 0 ? flops / secs / 1e12 : 1;
    c.mfu = 1.0;
    t.syncbn = 1;
    CommPlan cp;
    Step st;   /* the step with SyncBN: its collectives and its time from one account */
    plan_step_build(&st, &m, &t, &c, STRAT_DDP);
    plan_comm_step(&st, &cp);
    for (int i = 0; i < cp.n; i++)
        if (plan_coll_purpose_is_syncbn(cp.c[i].purpose)) {
            x->pred_count += cp.c[i].count;
            x->pred_bytes += cp.c[i].payload_bytes;
            x->pred_comm_ms += cp.c[i].seconds * 1e3;
        }
    SimResult s;
    if (plan_sim_step(&st, 0, &s) == 0) x->pred_sync_ms = s.step_s * 1e3;
    plan_step_free(&st);
    t.syncbn = 0;
    if (plan_sim(&m, &t, &c, STRAT_DDP, 0, &s) == 0) x->pred_bn_ms = s.step_s * 1e3;
    plan_model_free(&m);
}

/* One per-GPU batch B on sub-communicator c: both copies set up (every rank learns whether all
 * could), warmed up, measured in alternation. 0, or -1 with err. */
static int run_batch(Comm *c, MemTracker *mt, const SyncbnBench *b, const SyncbnLink *link, int B, SyncbnRecord *x,
                     char *err, size_t len)
{
    int n = comm_size(c), r = comm_rank(c), K = b->steps, rc = 0;
    size_t img = (size_t)b->cfg.in_channels * b->cfg.image_size * b->cfg.image_size;
    Runner *run = calloc(2, sizeof *run);
    float *images = malloc((size_t)B * img * sizeof *images);
    int *labels = malloc((size_t)B * sizeof *labels);
    double *scratch = malloc(2 * (size_t)K * sizeof *scratch);
    int ok = run && images && labels && scratch && mt;
    for (int mode = 0; ok && mode < 2; mode++) ok = runner_create(&run[mode], c, mt, b, mode, err, len) == 0;
    double mine = ok, all = ok;   /* every rank must have set up (nothing is in flight yet) */
    if (comm_all_reduce(c, &mine, &all, 1, DT_F64, NULL) || all != n) {
        if (ok) snprintf(err, len, "another rank could not set up (its message is on its stderr)");
        else if (r > 0 || !*err) fprintf(stderr, "rank %d: bench syncbn: %s\n", r, *err ? err : "out of host memory");
        rc = -1;
    }
    ExecBatch batch = {images, labels, B, 0};
    for (int step = 0; rc == 0 && step < b->warmup + K; step++) {
        if (exec_cnn_synthetic_batch(&b->cfg, b->seed, step, r * B, B, images, labels))
            comm_abort(c, "bench syncbn: cannot make the synthetic batch");
        for (int mode = 0; mode < 2; mode++) runner_step(&run[mode], c, &batch, step + 1, step - b->warmup);
    }
    if (rc == 0) {
        memset(x, 0, sizeof *x);
        x->ranks = n;
        x->batch = B;
        summarize(run, K, scratch, x);
        predict(&b->cfg, link, x);
        if (r == 0 && b->progress) {
            fprintf(b->progress, "# measured %d ranks, batch %d: BN %.1f ms, SyncBN %.1f ms per step\n", n, B, x->bn.step,
                    x->sync.step);
            fflush(b->progress);
        }
    }
    if (run) {
        runner_free(&run[0]);
        runner_free(&run[1]);
    }
    free(run);
    free(images);
    free(labels);
    free(scratch);
    return rc;
}

/* Every batch on one sub-communicator; records land on its rank 0. */
static int run_ranks(Comm *c, const SyncbnBench *b, SyncbnLink *link, SyncbnRecord *recs, char *err, size_t len)
{
    int64_t sum_c = 0;
    int nbn = exec_cnn_cfg_bn_layers(&b->cfg, &sum_c);
    if (measure_link(c, (int)llround((double)sum_c / nbn), link)) {
        snprintf(err, len, "measuring the collectives failed");
        return -1;
    }
    char derr[256];
    Device *dev = exec_device_create(DEVICE_HOST, comm_local_rank(c), derr, sizeof derr);
    MemTracker *mt = dev ? exec_device_tracker_create(dev, 0) : NULL;
    int rc = 0;
    for (int bi = 0; bi < b->nb && rc == 0; bi++) rc = run_batch(c, mt, b, link, b->batches[bi], &recs[bi], err, len);
    prof_mem_destroy(mt);
    exec_device_destroy(dev);
    return rc;
}

int exec_syncbn_bench(Comm *world, const SyncbnBench *b, SyncbnLink *links, SyncbnRecord *records, char *err,
                      size_t errlen)
{
    int rank = comm_rank(world), rc = 0;
    for (int ri = 0; ri < b->nr && rc == 0; ri++) {
        int n = b->ranks[ri];
        Comm *sub = comm_split(world, rank < n ? 0 : -1, err, errlen);
        if (rank < n && !sub) comm_abort(world, err);
        if (sub) {
            if (run_ranks(sub, b, &links[ri], records + (size_t)ri * b->nb, err, errlen)) rc = -1;
            comm_destroy(sub);
        }
        /* the ranks that waited learn whether the measured ones could go on */
        double mine = rc, worst = rc;
        if (comm_barrier_idle(world, IDLE_POLL_S) || comm_all_reduce(world, &mine, &worst, 1, DT_F64, NULL)) rc = -1;
        if (worst != 0) rc = -1;
    }
    return rc;
}
