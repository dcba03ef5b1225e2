/* cli_bench.c — `memplan bench syncbn`: the price of SyncBatchNorm, measured and predicted.
 *
 * For each rank count n (sub-communicators of the first n ranks of the job; the other ranks
 * wait asleep, so they leave the cores to the working ones) and each per-GPU batch b, two copies
 * of the CNN are trained under DDP on the same seeded images, one with BatchNorm and one
 * converted to SyncBatchNorm before wrapping; their steps alternate (BN, SyncBN, BN, ...) so that
 * both see the same machine. Each step is timed per phase (forward; backward with the end of
 * DDP's gradient reduction; the optimizer step) on every rank, the slowest rank counts, and the
 * median over the measured steps is reported. The extra collectives are the SyncBN run's counted
 * collectives minus the BN run's, per step.
 *
 * The prediction: before the steps, each sub-communicator measures MPI all-reduce and
 * all-gather at SyncBN's message sizes and at 4 MiB; the planner's alpha-beta model (a latency
 * per ring step and a bandwidth: plan_coll_seconds) is fitted to them, and the planner then
 * predicts the step of the same model shape (plan_model_resnet) under DDP in fp32, with and
 * without SyncBN: plan_comm's SyncBN collective time, and plan_sim's step-time difference (the
 * compute rate set from the measured BN step, so the simulation's buckets overlap as here).
 * Everything is printed by rank 0: lines that are not data start with '#'. */
#include "cli_bench.h"

#include <cblas.h>
#include <cjson/cJSON.h>
#include <getopt.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

#include "cli_io.h"
#include "cli_ranks.h"
#include "cli_setup.h"
#include "exec_cnn.h"
#include "kern_cnn.h"
#include "exec_comm.h"
#include "exec_device.h"
#include "exec_strategy.h"
#include "plan_comm.h"
#include "plan_gpu.h"
#include "plan_model.h"
#include "plan_sim.h"
#include "plan_strategy.h"
#include "plan_train.h"
#include "plan_util.h"
#include "plan_zoo.h"
#include "prof_comm.h"
#include "prof_phase.h"

#define MAX_LIST 16
#define IDLE_POLL_S 0.005

typedef struct {
    const char *model;
    int image;                    /* 0: the bench default (64 for resnet50, else the model's) */
    int batches[MAX_LIST], nb;
    int ranks[MAX_LIST], nr;      /* 0 entries: 2, 4, 8, ... up to the job, and the job */
    int steps, warmup;
    double bucket_mb;             /* DDP bucket cap; 0: 25 MiB */
    long long seed;
    int bn_min;                   /* the planner's --bn-min-batch rule */
    double timeout;
    const char *json, *plot;      /* json: the file of --json=FILE */
    int json_stdout;              /* --json: the records to standard output (the table to stderr) */
} Opts;

typedef struct { double fwd, bwd, opt, step; } Phases;   /* ms */

typedef struct {
    int ranks;
    double ar_small_b, ag_small_b, ar_large_b, ag_large_b;   /* payload bytes (the planner's) */
    double ar_small_s, ag_small_s, ar_large_s, ag_large_s;   /* median seconds, slowest rank */
    double alpha_s, bw_gbps;                                 /* fitted */
} Link;

typedef struct {
    int ranks, batch;
    Phases bn, sync;                       /* medians over the measured steps, slowest rank */
    Phases diff;                           /* medians of the paired differences SyncBN - BN (the
                                              steps alternate, so pairs share the machine's state) */
    double diff_se;                        /* standard error of the step difference, ms */
    double coll_min_ms[2], coll_mean_ms[2];  /* SyncBN run: time inside SyncBN's collectives per
                                                step (forward, backward), the rank that waited
                                                least and the mean over ranks; medians */
    double extra_count[COLL_OP_COUNT];     /* per step, the SyncBN run minus the BN run */
    double extra_bytes[COLL_OP_COUNT];
    double pred_count, pred_bytes;         /* plan_comm's SyncBN collectives per step */
    double pred_comm_ms;                   /* plan_comm's SyncBN time per step */
    double pred_bn_ms, pred_sync_ms;       /* plan_sim's steps */
} Record;

/* ---- options ---- */

enum { O_MODEL = 3000, O_IMAGE, O_BATCHES, O_RANKS, O_STEPS, O_WARMUP, O_SEED, O_BNMIN, O_TIMEOUT, O_JSON, O_PLOT, O_HELP,
       O_BUCKET };
static const struct option OPTIONS[] = {
    {"model", required_argument, 0, O_MODEL},     {"image-size", required_argument, 0, O_IMAGE},
    {"batches", required_argument, 0, O_BATCHES}, {"ranks", required_argument, 0, O_RANKS},
    {"steps", required_argument, 0, O_STEPS},     {"warmup", required_argument, 0, O_WARMUP},
    {"seed", required_argument, 0, O_SEED},       {"bn-min-batch", required_argument, 0, O_BNMIN},
    {"timeout", required_argument, 0, O_TIMEOUT}, {"json", optional_argument, 0, O_JSON},
    {"plot", required_argument, 0, O_PLOT},       {"help", no_argument, 0, O_HELP},
    {"bucket-mb", required_argument, 0, O_BUCKET},
    {0, 0, 0, 0},
};

static void help(FILE *f)
{
    fprintf(f,
        "mpirun -np N memplan bench syncbn [options]   (N >= 2)\n"
        "  what SyncBatchNorm costs: the CNN under DDP with BatchNorm and with SyncBN, per-GPU batch by\n"
        "  rank count, measured per phase next to the planner's prediction; table, JSON, plot\n"
        "  --model NAME          resnet50 (default), resnet-mini or resnet-tiny (the executor's CNN presets)\n"
        "  --image-size S        input side in pixels, >= 32 (default 64 for resnet50 on CPUs, the model's otherwise;\n"
        "                        resnet50's own is 224)\n"
        "  --batches LIST        per-GPU batches, comma-separated (default 2,4,8)\n"
        "  --ranks LIST          rank counts, each in [2, N] (default 2, 4, 8, ... up to N, and N): the first n ranks\n"
        "                        run, the others wait asleep\n"
        "  --steps K             measured steps per mode (default 3; the median is reported)\n"
        "  --warmup W            steps before measuring (default 1)\n"
        "  --seed N              parameters and synthetic images (default 1337)\n"
        "  --bucket-mb X         DDP's bucket cap in MiB (default 25, as PyTorch; the planner's prediction assumes 25)\n"
        "  --bn-min-batch B      per-GPU batch below which SyncBN is worth it, for the conclusion (default 16,\n"
        "                        as memplan auto)\n"
        "  --timeout S           seconds any collective may wait (default 300)\n"
        "  --json[=FILE]         the records as JSON: --json to standard output (the table then goes to\n"
        "                        standard error), --json=FILE to a file\n"
        "  --plot FILE.png|.svg  overhead versus per-GPU batch and versus ranks (gnuplot; without it, the data\n"
        "                        and script are written and a message says so)\n"
        "Time in ms (per step, the slowest rank, median over the steps); bytes are collective payloads;\n"
        "bandwidth in decimal GB/s. docs/syncbn.md has this machine's results and how they compare.\n");
}

static int bad(char *err, size_t len, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int bad(char *err, size_t len, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, len, fmt, ap);
    va_end(ap);
    return 2;
}

/* A comma-separated list of distinct integers in [lo, hi]: 0, -1 (malformed), -2 (too many), or
 * the duplicated value (> 0). */
static int parse_list(const char *s, int lo, int hi, int *out, int *n)
{
    *n = 0;
    char *buf = strdup(s);
    int rc = buf ? 0 : -1;
    for (char *save = NULL, *tok = buf ? strtok_r(buf, ",", &save) : NULL; tok && !rc; tok = strtok_r(NULL, ",", &save)) {
        long long v;
        if (*n == MAX_LIST) rc = -2;
        else if (plan_parse_int(tok, lo, hi, &v)) rc = -1;
        for (int i = 0; i < *n && !rc; i++)
            if (out[i] == v) rc = (int)v;
        if (!rc) out[(*n)++] = (int)v;
    }
    free(buf);
    return rc ? rc : *n ? 0 : -1;
}

/* The message of a bad list (parse_list's rc). */
static int bad_list(char *err, size_t len, const char *flag, const char *a, int rc, int lo)
{
    if (rc > 0) return bad(err, len, "%s '%s' lists %d twice: give each value once", flag, a, rc);
    if (rc == -2) return bad(err, len, "%s '%s' has more than %d values", flag, a, MAX_LIST);
    return bad(err, len, "%s '%s' is not a comma-separated list of integers >= %d%s", flag, a, lo,
               lo == 1 ? " (up to 4096)" : "");
}

static int safe_path(const char *p) { return p[0] && !strpbrk(p, "'\"`$\\"); }

/* 0 to run, 1 after --help, 2 on a usage error (message in err). */
static int parse(int argc, char **argv, Opts *o, char *err, size_t len)
{
    memset(o, 0, sizeof *o);
    o->model = "resnet50";
    o->batches[0] = 2, o->batches[1] = 4, o->batches[2] = 8, o->nb = 3;
    o->steps = 3;
    o->warmup = 1;
    o->seed = 1337;
    o->bn_min = 16;
    optind = 1;
    opterr = 0;
    int c, li, lrc;
    long long v;
    const char *seen[sizeof OPTIONS / sizeof OPTIONS[0]] = {0};
    while ((li = -1, c = getopt_long(argc, argv, ":", OPTIONS, &li)) != -1) {
        const char *a = optarg;
        if (li >= 0) {   /* a flag given twice would win silently; a value that is a flag was forgotten */
            if (seen[li]) return bad(err, len, "--%s given twice ('%s' and '%s'): give it once", OPTIONS[li].name, seen[li], a ? a : "on");
            seen[li] = a ? a : "on";
            if (OPTIONS[li].has_arg == required_argument && a[0] == '-' && a[1] == '-')
                return bad(err, len, "--%s needs a value (got the option '%s')", OPTIONS[li].name, a);
        }
        switch (c) {
        case O_MODEL: o->model = a; break;
        case O_IMAGE:
            if (plan_parse_int(a, 32, 1024, &v)) return bad(err, len, "--image-size '%s' is not an integer in [32, 1024]", a);
            o->image = (int)v;
            break;
        case O_BATCHES:
            if ((lrc = parse_list(a, 1, 4096, o->batches, &o->nb))) return bad_list(err, len, "--batches", a, lrc, 1);
            break;
        case O_RANKS:
            if ((lrc = parse_list(a, 2, 1 << 20, o->ranks, &o->nr))) return bad_list(err, len, "--ranks", a, lrc, 2);
            break;
        case O_STEPS:
            if (plan_parse_int(a, 1, 1000, &v)) return bad(err, len, "--steps '%s' is not an integer in [1, 1000]", a);
            o->steps = (int)v;
            break;
        case O_WARMUP:
            if (plan_parse_int(a, 0, 1000, &v)) return bad(err, len, "--warmup '%s' is not an integer in [0, 1000]", a);
            o->warmup = (int)v;
            break;
        case O_SEED:
            if (plan_parse_int(a, 0, 1LL << 62, &v)) return bad(err, len, "--seed '%s' is not a non-negative integer", a);
            o->seed = v;
            break;
        case O_BNMIN:
            if (plan_parse_int(a, 1, 1000000, &v)) return bad(err, len, "--bn-min-batch '%s' is not an integer in [1, 1000000]", a);
            o->bn_min = (int)v;
            break;
        case O_TIMEOUT:
            if (plan_parse_double(a, 0.1, 86400, &o->timeout)) return bad(err, len, "--timeout '%s' is not a number of seconds in [0.1, 86400]", a);
            break;
        case O_JSON:
            if (a && !safe_path(a)) return bad(err, len, "--json '%s': give a file name without quotes or $", a);
            o->json = a;
            o->json_stdout = !a;
            break;
        case O_PLOT: {
            size_t n = strlen(a);
            if (!safe_path(a) || n < 5 || (strcasecmp(a + n - 4, ".png") && strcasecmp(a + n - 4, ".svg")))
                return bad(err, len, "--plot '%s' must be a file name ending in .png or .svg (no quotes or $)", a);
            o->plot = a;
            break;
        }
        case O_BUCKET:
            if (plan_parse_double(a, 0.001, 1e6, &o->bucket_mb)) return bad(err, len, "--bucket-mb '%s' is not a number in [0.001, 1e6]", a);
            break;
        case O_HELP: return 1;
        case ':': return bad(err, len, "%s needs a value", argv[optind - 1]);
        default: return bad(err, len, "unknown option '%s' for 'bench syncbn' (see memplan bench syncbn --help)", argv[optind - 1]);
        }
    }
    if (optind < argc) {
        int bare_json = 0;   /* `--json out.json`: the file belongs after '=' */
        for (int i = 1; i < optind; i++) bare_json |= strcmp(argv[i], "--json") == 0;
        return bad(err, len, "unexpected argument '%s' for 'bench syncbn'%s", argv[optind],
                   bare_json ? ": --json writes to standard output, --json=FILE to a file" : "");
    }
    char perr[PATH_MAX + 256];
    const char *outs[5] = {o->json, o->plot, NULL, NULL, NULL}, *flags[5] = {"--json", "--plot", "--plot", "--plot", "--plot"};
    char aux[3][PATH_MAX + 16];
    static const char *const EXT[3] = {".by_batch.dat", ".by_ranks.dat", ".gp"};   /* write_plot's files */
    for (int i = 0; o->plot && i < 3; i++) {
        snprintf(aux[i], sizeof aux[i], "%s%s", o->plot, EXT[i]);
        outs[2 + i] = aux[i];
    }
    for (int i = 0; i < 5; i++) {
        if (!outs[i]) continue;
        if (cli_check_output(flags[i], outs[i], NULL, 0, perr, sizeof perr)) return bad(err, len, "%s", perr);
        for (int k = 0; k < i; k++)
            if (outs[k] && cli_same_file(outs[i], outs[k]))
                return bad(err, len, "%s and %s both write '%s': give each output its own file", flags[k], flags[i], outs[i]);
    }
    return 0;
}

/* ---- measuring ---- */

/* The slowest rank's values (element-wise max), uncounted. */
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
static int measure_link(Comm *c, int cmean, Link *k)
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
    double war_l = k->ar_large_b * plan_coll_factor(PCOLL_ALL_REDUCE, n);
    double wag_l = k->ag_large_b * plan_coll_factor(PCOLL_ALL_GATHER, n);
    double bw = 0.5 * (war_l / k->ar_large_s + wag_l / k->ag_large_s);   /* B/s */
    double s_ar = 2.0 * (n - 1), s_ag = (double)(n - 1);
    double r_ar = k->ar_small_s - k->ar_small_b * plan_coll_factor(PCOLL_ALL_REDUCE, n) / bw;
    double r_ag = k->ag_small_s - k->ag_small_b * plan_coll_factor(PCOLL_ALL_GATHER, n) / bw;
    k->alpha_s = fmax(0.0, (s_ar * r_ar + s_ag * r_ag) / (s_ar * s_ar + s_ag * s_ag));
    k->bw_gbps = bw / 1e9;
    return 0;
}

/* One copy of the model under DDP, BN or SyncBN, with its own collective counters. */
typedef struct {
    ExecStrategy *s;
    Cnn *cnn;
    ExecModel *m;
    CommCounters *cc;
    double ms[4][1000];        /* fwd, bwd, opt, step per measured step (slowest rank) */
    double coll_min[2][1000], coll_mean[2][1000];   /* SyncBN collectives, forward and backward */
    CollStats last[COLL_OP_COUNT];   /* counted in the last measured step */
} Runner;

static void runner_free(Runner *r)
{
    exec_cnn_destroy(r->cnn);
    exec_strategy_destroy(r->s);
    prof_comm_destroy(r->cc);
    memset(r, 0, sizeof *r);
}

static int runner_create(Runner *r, Comm *c, MemTracker *mt, const CnnConfig *cfg, int syncbn, uint64_t seed,
                         double bucket_bytes, char *err, size_t len)
{
    memset(r, 0, sizeof *r);
    ExecStrategyOptions so = {EXEC_DDP, bucket_bytes, 0, 0};
    ExecHooks hooks;
    r->cc = prof_comm_create(comm_size(c));
    if (!r->cc || exec_strategy_create(&r->s, &so, c, mt, r->cc, NULL, err, len)) return -1;
    exec_strategy_hooks(r->s, &hooks);
    if (exec_cnn_create(&r->cnn, cfg, mt, &hooks, r->s)) {
        snprintf(err, len, "cannot create the CNN (out of memory?)");
        return -1;
    }
    r->m = exec_cnn_model(r->cnn);
    if (syncbn && exec_cnn_convert_sync_batchnorm(r->cnn, c) < 0) {   /* before DDP wraps it */
        snprintf(err, len, "%s", exec_cnn_error(r->cnn));
        return -1;
    }
    if (exec_strategy_bind(r->s, r->m, seed, 1)) {
        snprintf(err, len, "%s", exec_strategy_error(r->s));
        return -1;
    }
    return 0;
}

/* One DDP step; k >= 0 records it as measured step k. Errors abort the job: peers may be
 * inside a collective. */
static void runner_step(Runner *r, Comm *c, const ExecBatch *b, int t, int k)
{
    static const char *const PH[3] = {"forward", "backward", "step"};
    static const ExecAdamW opt = {1e-4f, 0.9f, 0.999f, 1e-8f, 0.0f};
    const char *why = NULL;
    comm_set_counters(c, NULL);
    if (comm_barrier(c)) comm_abort(c, "the step barrier failed");
    comm_set_counters(c, r->cc);
    CollStats before[COLL_OP_COUNT];
    for (int op = 0; op < COLL_OP_COUNT; op++) before[op] = prof_comm_total(r->cc, (CollOp)op);
    double cs0[2], cs1[2];
    exec_cnn_syncbn_seconds(r->cnn, cs0);
    double t0 = prof_clock_us(), t1, t2, t3;
    float loss;
    exec_strategy_zero_grad(r->s);
    exec_strategy_begin_micro(r->s, 1);
    prof_comm_set_phase(r->cc, PH[0]);
    if (exec_model_forward(r->m, b, &loss)) why = exec_model_error(r->m);
    t1 = prof_clock_us();
    prof_comm_set_phase(r->cc, PH[1]);
    if (!why && exec_model_backward(r->m)) why = exec_model_error(r->m);
    if (!why && exec_strategy_end_backward(r->s)) why = exec_strategy_error(r->s);
    t2 = prof_clock_us();
    prof_comm_set_phase(r->cc, PH[2]);
    if (!why && exec_strategy_step(r->s, &opt, t)) why = exec_strategy_error(r->s);
    t3 = prof_clock_us();
    comm_set_counters(c, NULL);
    if (why) {
        char msg[400];
        snprintf(msg, sizeof msg, "bench syncbn: a training step failed: %s", why);
        comm_abort(c, msg);
    }
    exec_cnn_syncbn_seconds(r->cnn, cs1);
    double v[6] = {(t1 - t0) / 1e3, (t2 - t1) / 1e3, (t3 - t2) / 1e3, (t3 - t0) / 1e3, (cs1[0] - cs0[0]) * 1e3,
                   (cs1[1] - cs0[1]) * 1e3};
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
    for (int op = 0; op < COLL_OP_COUNT; op++) {
        CollStats now = prof_comm_total(r->cc, (CollOp)op);
        r->last[op].count = now.count - before[op].count;
        r->last[op].payload_bytes = now.payload_bytes - before[op].payload_bytes;
    }
}

static Phases medians(Runner *r, int K)
{
    Phases p;
    p.fwd = plan_median(r->ms[0], K);
    p.bwd = plan_median(r->ms[1], K);
    p.opt = plan_median(r->ms[2], K);
    p.step = plan_median(r->ms[3], K);
    return p;
}

/* The planner's view of the same step, on a cluster fitted to this link and compute rate. */
static void predict(const CnnConfig *cfg, const Link *k, const Record *rec, Record *out)
{
    ModelSpec m;
    char msg[256];
    if (plan_model_resnet(&m, cfg->name, cfg->depths, 1, cfg->width, cfg->image_size, cfg->classes, msg, sizeof msg))
        return;
    TrainSpec t;
    plan_train_defaults(&t);
    t.precision = PREC_FP32;
    t.optimizer = OPT_ADAMW;
    t.micro_batch = rec->batch;
    ClusterSpec c;
    plan_cluster_defaults(&c);
    c.gpus = c.gpus_per_node = rec->ranks;
    c.gpu.intra_bw = c.gpu.inter_bw = k->bw_gbps;
    c.gpu.intra_lat = c.gpu.inter_lat = k->alpha_s;
    c.coll_base_lat = 0;        /* the fit has one latency per ring step and no base */
    /* compute as measured: 3 x forward FLOPs over the BN run's forward + backward */
    double flops = 3.0 * exec_cnn_cfg_fwd_flops(cfg) * rec->batch, secs = (rec->bn.fwd + rec->bn.bwd) / 1e3;
    for (int i = 0; i < 3; i++) c.gpu.peak_tflops[i] = secs > 0 ? flops / secs / 1e12 : 1;
    c.mfu = 1.0;
    t.syncbn = 1;
    CommPlan cp;
    plan_comm(&m, &t, &c, STRAT_DDP, &cp);
    for (int i = 0; i < cp.n; i++)
        if (plan_coll_purpose_is_syncbn(cp.c[i].purpose)) {
            out->pred_count += cp.c[i].count;
            out->pred_bytes += cp.c[i].payload_bytes;
            out->pred_comm_ms += cp.c[i].seconds * 1e3;
        }
    SimResult s;
    if (plan_sim(&m, &t, &c, STRAT_DDP, 0, &s) == 0) out->pred_sync_ms = s.step_s * 1e3;
    t.syncbn = 0;
    if (plan_sim(&m, &t, &c, STRAT_DDP, 0, &s) == 0) out->pred_bn_ms = s.step_s * 1e3;
    plan_model_free(&m);
}

/* Every batch on one sub-communicator; records land on its rank 0. */
static int run_ranks(Comm *c, const CnnConfig *cfg, const Opts *o, Link *link, Record *recs, char *err, size_t len)
{
    int n = comm_size(c), r = comm_rank(c), nbn;
    int64_t sum_c = 0;
    nbn = exec_cnn_cfg_bn_layers(cfg, &sum_c);
    if (measure_link(c, (int)llround((double)sum_c / nbn), link)) {
        snprintf(err, len, "measuring the collectives failed");
        return -1;
    }
    char derr[256];
    Device *dev = exec_device_create(DEVICE_HOST, comm_local_rank(c), derr, sizeof derr);
    MemTracker *mt = dev ? exec_device_tracker_create(dev, 0) : NULL;
    size_t img = (size_t)cfg->in_channels * cfg->image_size * cfg->image_size;
    int rc = 0;
    for (int bi = 0; bi < o->nb && rc == 0; bi++) {
        int B = o->batches[bi];
        Runner *run = calloc(2, sizeof *run);
        float *images = malloc((size_t)B * img * sizeof *images);
        int *labels = malloc((size_t)B * sizeof *labels);
        int ok = run && images && labels && mt;
        for (int mode = 0; ok && mode < 2; mode++) ok = runner_create(&run[mode], c, mt, cfg, mode, (uint64_t)o->seed,
                                                                             o->bucket_mb * MIB, err, len) == 0;
        double mine = ok, all = ok;   /* every rank must have set up (nothing is in flight yet) */
        if (comm_all_reduce(c, &mine, &all, 1, DT_F64, NULL) || all != n) {
            if (ok) snprintf(err, len, "another rank could not set up (its message is on its stderr)");
            else if (r > 0 || !*err) fprintf(stderr, "rank %d: bench syncbn: %s\n", r, *err ? err : "out of host memory");
            rc = -1;
        }
        for (int step = 0; rc == 0 && step < o->warmup + o->steps; step++) {
            int k = step - o->warmup;
            if (exec_cnn_synthetic_batch(cfg, (uint64_t)o->seed, step, r * B, B, images, labels))
                comm_abort(c, "bench syncbn: cannot make the synthetic batch");
            ExecBatch batch = {images, labels, B, 0};
            for (int mode = 0; mode < 2; mode++) runner_step(&run[mode], c, &batch, step + 1, k);
        }
        if (rc == 0) {
            Record *x = &recs[bi];
            memset(x, 0, sizeof *x);
            x->ranks = n;
            x->batch = B;
            x->bn = medians(&run[0], o->steps);
            x->sync = medians(&run[1], o->steps);
            double d[4][1000];
            for (int k = 0; k < o->steps; k++)
                for (int i = 0; i < 4; i++) d[i][k] = run[1].ms[i][k] - run[0].ms[i][k];
            double mean = 0, var = 0;
            for (int k = 0; k < o->steps; k++) mean += d[3][k] / o->steps;
            for (int k = 0; k < o->steps; k++) var += (d[3][k] - mean) * (d[3][k] - mean);
            x->diff_se = o->steps > 1 ? sqrt(var / (o->steps - 1) / o->steps) : 0;
            x->diff.fwd = plan_median(d[0], o->steps);
            x->diff.bwd = plan_median(d[1], o->steps);
            x->diff.opt = plan_median(d[2], o->steps);
            x->diff.step = plan_median(d[3], o->steps);
            for (int j = 0; j < 2; j++) {
                x->coll_min_ms[j] = plan_median(run[1].coll_min[j], o->steps);
                x->coll_mean_ms[j] = plan_median(run[1].coll_mean[j], o->steps);
            }
            for (int op = 0; op < COLL_OP_COUNT; op++) {
                x->extra_count[op] = (double)(run[1].last[op].count - run[0].last[op].count);
                x->extra_bytes[op] = run[1].last[op].payload_bytes - run[0].last[op].payload_bytes;
            }
            predict(cfg, link, x, x);
            if (r == 0) {
                fprintf(stderr, "# measured %d ranks, batch %d: BN %.1f ms, SyncBN %.1f ms per step\n", n, B, x->bn.step, x->sync.step);
                fflush(stderr);
            }
        }
        if (run) {
            runner_free(&run[0]);
            runner_free(&run[1]);
        }
        free(run);
        free(images);
        free(labels);
    }
    prof_mem_destroy(mt);
    exec_device_destroy(dev);
    return rc;
}

/* ---- output ---- */

typedef struct {
    const char *model;
    CnnConfig cfg;
    int64_t params, sum_c;
    int nbn, world, cores;
    char date[64];
} Setup;

static double overhead(const Record *x) { return x->diff.step; }
static double overhead_pct(const Record *x) { return x->bn.step > 0 ? 100.0 * overhead(x) / x->bn.step : 0; }
static double pred_ms(const Record *x) { return x->pred_sync_ms - x->pred_bn_ms; }
static double pct(const Record *x, double ms) { return x->bn.step > 0 ? 100.0 * ms / x->bn.step : 0; }
static double extra_count(const Record *x)
{
    return x->extra_count[COLL_ALL_GATHER] + x->extra_count[COLL_ALL_REDUCE];
}
static double extra_bytes(const Record *x)
{
    return x->extra_bytes[COLL_ALL_GATHER] + x->extra_bytes[COLL_ALL_REDUCE];
}

/* The measured batch below the rule, on the most ranks, the largest such batch: "what it costs
 * there". NULL when no measured batch is below the rule. */
static const Record *conclusion_record(const Record *recs, int n, int bn_min)
{
    const Record *best = NULL;
    for (int i = 0; i < n; i++) {
        const Record *x = &recs[i];
        if (x->batch >= bn_min) continue;
        if (!best || x->ranks > best->ranks || (x->ranks == best->ranks && x->batch > best->batch)) best = x;
    }
    return best;
}

static void conclusion(char *buf, size_t len, const Record *recs, int n, const Opts *o, int nbn)
{
    const Record *x = conclusion_record(recs, n, o->bn_min);
    if (!x) {
        snprintf(buf, len, "every measured per-GPU batch is >= %d (--bn-min-batch): BatchNorm's statistics are steady "
                 "there, plain BatchNorm; SyncBN would only add its collectives", o->bn_min);
        return;
    }
    snprintf(buf, len, "below %d images per GPU (--bn-min-batch, as memplan auto) SyncBN is worth it for steady "
             "BatchNorm statistics; at batch %d on %d ranks it costs %+.1f ms +- %.1f per step (%+.1f %% of the BN step, "
             "%+.0f us per BN layer) for %.0f extra collectives, whose own time the planner puts at %.2f ms (%.2f ms "
             "queued behind DDP's buckets on one stream); at %d or more per GPU keep plain BatchNorm", o->bn_min,
             x->batch, x->ranks, overhead(x), x->diff_se, overhead_pct(x), 1e3 * overhead(x) / nbn, extra_count(x),
             x->pred_comm_ms, pred_ms(x), o->bn_min);
}

static void print_table(FILE *out, const Setup *su, const Opts *o, const Link *links, int nl, const Record *recs, int n)
{
    char pc[32], cc[32];
    fprintf(out, "# memplan bench syncbn: %s (%s parameters, %d BN layers, sum C %s) at %dx%d, DDP, fp32, AdamW\n", su->model,
           plan_fmt_count(su->params, pc, sizeof pc), su->nbn, plan_fmt_count(su->sum_c, cc, sizeof cc),
           su->cfg.image_size, su->cfg.image_size);
    fprintf(out, "# %s; MPI on %d ranks, %d cores; %d measured steps per mode after %d warm-up, BN and SyncBN steps "
           "alternating; times: median over steps of the slowest rank\n", su->date, su->world, su->cores, o->steps, o->warmup);
    for (int i = 0; i < nl; i++) {
        const Link *k = &links[i];
        fprintf(out, "# link on %d ranks: all-reduce %.0f B %.1f us, all-gather %.0f B %.1f us, all-reduce 4 MiB %.2f ms, "
               "all-gather 4 MiB %.2f ms -> planner alpha %.2f us per ring step, bandwidth %.2f GB/s (decimal)\n",
               k->ranks, k->ar_small_b, k->ar_small_s * 1e6, k->ag_small_b, k->ag_small_s * 1e6, k->ar_large_s * 1e3,
               k->ag_large_s * 1e3, k->alpha_s * 1e6, k->bw_gbps);
    }
    fprintf(out, "%5s %7s %8s %8s %8s %8s %8s %8s %8s %6s %6s %9s %7s %7s %6s %9s %9s %9s\n", "ranks", "batch", "bn_fwd",
           "bn_bwd", "bn_step", "sy_fwd", "sy_bwd", "sy_step", "overhead", "+-", "ovh", "per_layer", "in_fwd", "in_bwd",
           "colls", "bytes", "pred_comm", "pred_sim");
    fprintf(out, "%5s %7s %8s %8s %8s %8s %8s %8s %8s %6s %6s %9s %7s %7s %6s %9s %9s %9s\n", "-", "per_gpu", "ms", "ms", "ms",
           "ms", "ms", "ms", "ms", "ms", "%", "us", "ms", "ms", "count", "B", "ms", "ms");
    for (int i = 0; i < n; i++) {
        const Record *x = &recs[i];
        fprintf(out, "%5d %7d %8.1f %8.1f %8.1f %8.1f %8.1f %8.1f %8.2f %6.2f %6.2f %9.1f %7.2f %7.2f %6.0f %9.0f %9.2f %9.2f\n",
               x->ranks, x->batch, x->bn.fwd, x->bn.bwd, x->bn.step, x->sync.fwd, x->sync.bwd, x->sync.step, overhead(x),
               x->diff_se, overhead_pct(x), 1e3 * overhead(x) / su->nbn, x->coll_min_ms[0], x->coll_min_ms[1],
               extra_count(x), extra_bytes(x), x->pred_comm_ms, pred_ms(x));
    }
    int match = 1;
    for (int i = 0; i < n; i++)
        match &= extra_count(&recs[i]) == recs[i].pred_count && extra_bytes(&recs[i]) == recs[i].pred_bytes;
    fprintf(out, "# colls, bytes: SyncBN's extra collectives per step (all-gathers in forward + all-reduces in backward), "
           "measured; %s plan_comm's SyncBN formula\n", match ? "equal to" : "DIFFERENT FROM");
    fprintf(out, "# bn_*, sy_*: forward, backward (with DDP's reduction), whole step with BatchNorm and with SyncBN; overhead: "
           "median of the paired step differences SyncBN - BN, +- its standard error, in %% of bn_step and per BN layer\n"
           "# in_fwd, in_bwd: time inside SyncBN's all-gathers and all-reduces on the rank that waited least; MPI "
           "progresses DDP's bucket all-reduces from inside any wait, so in_bwd also holds DDP work done there\n");
    fprintf(out, "# pred_comm: plan_comm's SyncBN time on the fitted link; pred_sim: plan_sim's step with SyncBN minus "
           "without (compute rate from the BN step; SyncBN queued behind DDP's buckets on one stream, as on a GPU)\n");
    char buf[768];
    conclusion(buf, sizeof buf, recs, n, o, su->nbn);
    fprintf(out, "# conclusion: %s\n", buf);
}

static cJSON *phases_json(const Phases *p)
{
    cJSON *j = cJSON_CreateObject();
    cJSON_AddNumberToObject(j, "forward_ms", p->fwd);
    cJSON_AddNumberToObject(j, "backward_ms", p->bwd);
    cJSON_AddNumberToObject(j, "optimizer_ms", p->opt);
    cJSON_AddNumberToObject(j, "step_ms", p->step);
    return j;
}

static int write_json(const char *path, const Setup *su, const Opts *o, const Link *links, int nl, const Record *recs, int n)
{
    cJSON *j = cJSON_CreateObject();
    cJSON_AddStringToObject(j, "bench", "syncbn");
    cJSON_AddStringToObject(j, "date", su->date);
    cJSON_AddStringToObject(j, "model", su->model);
    cJSON_AddNumberToObject(j, "image_size", su->cfg.image_size);
    cJSON_AddNumberToObject(j, "params", (double)su->params);
    cJSON_AddNumberToObject(j, "bn_layers", su->nbn);
    cJSON_AddNumberToObject(j, "bn_channels", (double)su->sum_c);
    cJSON_AddStringToObject(j, "strategy", "ddp");
    cJSON_AddStringToObject(j, "precision", "fp32");
    cJSON_AddStringToObject(j, "backend", "mpi");
    cJSON_AddNumberToObject(j, "world_size", su->world);
    cJSON_AddNumberToObject(j, "cores", su->cores);
    cJSON_AddNumberToObject(j, "steps", o->steps);
    cJSON_AddNumberToObject(j, "warmup", o->warmup);
    cJSON_AddNumberToObject(j, "bn_min_batch", o->bn_min);
    cJSON_AddNumberToObject(j, "ddp_bucket_bytes", o->bucket_mb > 0 ? o->bucket_mb * MIB : 25 * MIB);
    cJSON *ls = cJSON_AddArrayToObject(j, "links");
    for (int i = 0; i < nl; i++) {
        const Link *k = &links[i];
        cJSON *x = cJSON_CreateObject();
        cJSON_AddNumberToObject(x, "ranks", k->ranks);
        cJSON_AddNumberToObject(x, "all_reduce_small_bytes", k->ar_small_b);
        cJSON_AddNumberToObject(x, "all_reduce_small_s", k->ar_small_s);
        cJSON_AddNumberToObject(x, "all_gather_small_bytes", k->ag_small_b);
        cJSON_AddNumberToObject(x, "all_gather_small_s", k->ag_small_s);
        cJSON_AddNumberToObject(x, "all_reduce_large_bytes", k->ar_large_b);
        cJSON_AddNumberToObject(x, "all_reduce_large_s", k->ar_large_s);
        cJSON_AddNumberToObject(x, "all_gather_large_bytes", k->ag_large_b);
        cJSON_AddNumberToObject(x, "all_gather_large_s", k->ag_large_s);
        cJSON_AddNumberToObject(x, "alpha_s", k->alpha_s);
        cJSON_AddNumberToObject(x, "bandwidth_gbps", k->bw_gbps);
        cJSON_AddItemToArray(ls, x);
    }
    cJSON *rs = cJSON_AddArrayToObject(j, "records");
    for (int i = 0; i < n; i++) {
        const Record *x = &recs[i];
        cJSON *e = cJSON_CreateObject();
        cJSON_AddNumberToObject(e, "ranks", x->ranks);
        cJSON_AddNumberToObject(e, "batch_per_gpu", x->batch);
        cJSON_AddItemToObject(e, "bn", phases_json(&x->bn));
        cJSON_AddItemToObject(e, "syncbn", phases_json(&x->sync));
        cJSON_AddNumberToObject(e, "overhead_ms", overhead(x));
        cJSON_AddNumberToObject(e, "overhead_pct", overhead_pct(x));
        cJSON_AddNumberToObject(e, "overhead_se_ms", x->diff_se);
        cJSON_AddNumberToObject(e, "forward_overhead_ms", x->diff.fwd);
        cJSON_AddNumberToObject(e, "backward_overhead_ms", x->diff.bwd);
        cJSON_AddNumberToObject(e, "optimizer_overhead_ms", x->diff.opt);
        cJSON_AddNumberToObject(e, "overhead_per_layer_us", 1e3 * overhead(x) / su->nbn);
        cJSON *ic = cJSON_AddObjectToObject(e, "in_syncbn_collectives");
        cJSON_AddNumberToObject(ic, "forward_min_ms", x->coll_min_ms[0]);
        cJSON_AddNumberToObject(ic, "backward_min_ms", x->coll_min_ms[1]);
        cJSON_AddNumberToObject(ic, "forward_mean_ms", x->coll_mean_ms[0]);
        cJSON_AddNumberToObject(ic, "backward_mean_ms", x->coll_mean_ms[1]);

        cJSON *ex = cJSON_AddObjectToObject(e, "extra_collectives");
        cJSON_AddNumberToObject(ex, "all_gather_count", x->extra_count[COLL_ALL_GATHER]);
        cJSON_AddNumberToObject(ex, "all_gather_bytes", x->extra_bytes[COLL_ALL_GATHER]);
        cJSON_AddNumberToObject(ex, "all_reduce_count", x->extra_count[COLL_ALL_REDUCE]);
        cJSON_AddNumberToObject(ex, "all_reduce_bytes", x->extra_bytes[COLL_ALL_REDUCE]);
        cJSON *p = cJSON_AddObjectToObject(e, "predicted");
        cJSON_AddNumberToObject(p, "collectives", x->pred_count);
        cJSON_AddNumberToObject(p, "bytes", x->pred_bytes);
        cJSON_AddNumberToObject(p, "comm_ms", x->pred_comm_ms);
        cJSON_AddNumberToObject(p, "bn_step_ms", x->pred_bn_ms);
        cJSON_AddNumberToObject(p, "syncbn_step_ms", x->pred_sync_ms);
        cJSON_AddNumberToObject(p, "overhead_ms", pred_ms(x));
        cJSON_AddItemToArray(rs, e);
    }
    char buf[768];
    conclusion(buf, sizeof buf, recs, n, o, su->nbn);
    cJSON_AddStringToObject(j, "conclusion", buf);
    char *txt = cJSON_Print(j);
    cJSON_Delete(j);
    int rc = txt ? cli_write_text("the --json output", path, txt) : 1;   /* path NULL: standard output */
    if (!txt) fprintf(stderr, "memplan: out of memory writing the JSON\n");
    free(txt);
    return rc;
}

#define DAT_COLUMNS "x overhead_pct se_pct pred_comm_pct pred_sim_pct overhead_ms se_ms pred_comm_ms pred_sim_ms"
static void dat_row(FILE *f, int xval, const Record *x)
{
    fprintf(f, "%d %.5f %.5f %.5f %.5f %.5f %.5f %.5f %.5f\n", xval, overhead_pct(x), pct(x, x->diff_se),
            pct(x, x->pred_comm_ms), pct(x, pred_ms(x)), overhead(x), x->diff_se, x->pred_comm_ms, pred_ms(x));
}

/* Two data files (blocks per rank count, blocks per batch) and a gnuplot script beside path. */
static int write_plot(const char *path, const Setup *su, const Opts *o, const Record *recs, int n)
{
    char by_b[1100], by_n[1100], gp[1100];
    snprintf(by_b, sizeof by_b, "%s.by_batch.dat", path);
    snprintf(by_n, sizeof by_n, "%s.by_ranks.dat", path);
    snprintf(gp, sizeof gp, "%s.gp", path);
    FILE *f = fopen(by_b, "w");
    if (!f) return -1;
    int nblocks_b = 0, nblocks_n = 0;
    for (int ri = 0; ri < o->nr; ri++) {   /* one block per rank count: x = batch */
        fprintf(f, "# ranks %d: %s\n", o->ranks[ri], DAT_COLUMNS);
        for (int i = 0; i < n; i++)
            if (recs[i].ranks == o->ranks[ri]) dat_row(f, recs[i].batch, &recs[i]);
        fprintf(f, "\n\n");
        nblocks_b++;
    }
    if (fclose(f)) return -1;
    if (!(f = fopen(by_n, "w"))) return -1;
    for (int bi = 0; bi < o->nb; bi++) {   /* one block per batch: x = ranks */
        fprintf(f, "# batch %d: %s\n", o->batches[bi], DAT_COLUMNS);
        for (int i = 0; i < n; i++)
            if (recs[i].batch == o->batches[bi]) dat_row(f, recs[i].ranks, &recs[i]);
        fprintf(f, "\n\n");
        nblocks_n++;
    }
    if (fclose(f)) return -1;
    if (!(f = fopen(gp, "w"))) return -1;
    size_t len = strlen(path);
    int svg = len > 4 && strcasecmp(path + len - 4, ".svg") == 0;
    fprintf(f, "set terminal %s size 1300,520 font ',10'\nset output '%s'\n", svg ? "svg" : "pngcairo", path);
    fprintf(f, "set multiplot layout 1,2 title \"SyncBatchNorm cost per step: %s at %dx%d, DDP over MPI, %s\\n"
               "solid: measured step difference (bars: standard error), dashed: the planner's time of the collectives, "
               "dotted: the planner's simulated step difference\"\n", su->model, su->cfg.image_size, su->cfg.image_size, su->date);
    fprintf(f, "set grid\nset key top right\nset ylabel 'cost (%% of the BatchNorm step)'\nset logscale x 2\n"
               "set xlabel 'per-GPU batch'\nset title 'versus per-GPU batch'\nset arrow from %d, graph 0 to %d, graph 1 "
               "nohead dt 3 lc rgb 'gray'\n", o->bn_min, o->bn_min);
    /* one value on an axis: gnuplot cannot autoscale it ("empty x range"), so the range is given */
    if (o->nb == 1) fprintf(f, "set xrange [%g:%g]\n", o->batches[0] / 2.0, o->batches[0] * 2.0);
    fprintf(f, "plot ");
    for (int i = 0; i < nblocks_b; i++)
        fprintf(f, "%s'%s' index %d using 1:2:3 with yerrorlines lw 2 lc %d title '%d ranks', '' index %d using 1:4 with "
                   "lines dt 2 lc %d notitle, '' index %d using 1:5 with lines dt 3 lc %d notitle",
                i ? ", " : "", by_b, i, i + 1, o->ranks[i], i, i + 1, i, i + 1);
    fprintf(f, "\nunset arrow\nset autoscale x\nset xlabel 'ranks'\nset title 'versus ranks'\n");
    if (o->nr == 1) fprintf(f, "set xrange [%g:%g]\n", o->ranks[0] / 2.0, o->ranks[0] * 2.0);
    fprintf(f, "plot ");
    for (int i = 0; i < nblocks_n; i++)
        fprintf(f, "%s'%s' index %d using 1:2:3 with yerrorlines lw 2 lc %d title 'batch %d', '' index %d using 1:4 with "
                   "lines dt 2 lc %d notitle, '' index %d using 1:5 with lines dt 3 lc %d notitle",
                i ? ", " : "", by_n, i, i + 1, o->batches[i], i, i + 1, i, i + 1);
    fprintf(f, "\nunset multiplot\n");
    if (fclose(f)) return -1;
    if (system("command -v gnuplot >/dev/null 2>&1") != 0) {
        fprintf(stderr, "memplan: gnuplot not found: wrote the data (%s, %s) and the script (%s); install gnuplot-nox "
                        "and run 'gnuplot %s'\n", by_b, by_n, gp, gp);
        return 0;
    }
    char cmd[1200];
    snprintf(cmd, sizeof cmd, "gnuplot '%s'", gp);
    if (system(cmd) != 0) {
        fprintf(stderr, "memplan: gnuplot failed on %s\n", gp);
        return -1;
    }
    return 0;
}

/* ---- the command ---- */

static int bench_syncbn(int argc, char **argv)
{
    char err[512] = "";
    Comm *world = comm_create(comm_launch_kind(), &argc, &argv, 300, err, sizeof err);
    if (!world) {
        fprintf(stderr, "memplan: cannot start the communicator: %s\n", err);
        return 1;
    }
    int rank = comm_rank(world), N = comm_size(world), rc = 0;
    Opts o;
    Setup su;
    memset(&su, 0, sizeof su);
    int prc = parse(argc, argv, &o, err, sizeof err);
    if (prc == 0 && exec_cnn_config_preset(&su.cfg, o.model)) {
        char names[256] = "";
        for (int i = 0; i < exec_cnn_preset_count(); i++)
            snprintf(names + strlen(names), sizeof names - strlen(names), "%s%s", i ? ", " : "", exec_cnn_preset_name(i));
        prc = bad(err, sizeof err, "bench syncbn runs the executor's CNN presets (%s); '%s' is not one", names, o.model);
    }
    if (prc == 0 && N < 2)
        prc = bad(err, sizeof err, "bench syncbn measures SyncBN's collectives: start it on 2 or more ranks "
                                   "(mpirun -np 4 memplan bench syncbn)");
    if (prc == 0 && o.nr == 0) {   /* 2, 4, 8, ... up to the job, and the job */
        for (int n = 2; n <= N && o.nr < MAX_LIST - 1; n *= 2) o.ranks[o.nr++] = n;
        if (o.ranks[o.nr - 1] != N) o.ranks[o.nr++] = N;
    }
    for (int i = 0; prc == 0 && i < o.nr; i++)
        if (o.ranks[i] > N) prc = bad(err, sizeof err, "--ranks %d exceeds the %d ranks this job was started with", o.ranks[i], N);
    if (prc == 0 && o.steps > 1000) prc = bad(err, sizeof err, "--steps is too large");
    if (prc == 0) {   /* BatchNorm trains on more than one value per channel: the last stage's maps are the smallest */
        int img = o.image ? o.image : strcmp(su.cfg.name, "resnet50") == 0 ? 64 : su.cfg.image_size;
        int h = kern_conv2d_out_size(kern_conv2d_out_size(img, 7, 2, 3), 3, 2, 1);   /* stem conv, max-pool */
        for (int st = 1; st < 4; st++) h = kern_conv2d_out_size(h, 3, 2, 1);        /* stages 2..4 halve */
        for (int i = 0; prc == 0 && i < o.nb; i++)
            if ((long long)o.batches[i] * h * h < 2)
                prc = bad(err, sizeof err, "--batches: a per-GPU batch of %d gives BatchNorm one value per channel in %s's "
                          "last stage (%dx%d maps at --image-size %d), and BatchNorm cannot train on one: give batches of "
                          "2 or more, or a larger --image-size", o.batches[i], su.cfg.name, h, h, img);
    }
    /* every rank checked its own arguments and paths: all learn at once if one failed */
    int st = cli_ranks_agree(world, argc, argv, prc == 1 ? CLI_RANKS_HELP : prc, prc ? err : "");
    if (st == CLI_RANKS_HELP) {
        if (rank == 0) help(stdout);
        comm_destroy(world);
        return 0;
    }
    if (st) {
        comm_destroy(world);
        return st;
    }
    if (o.timeout > 0) comm_set_timeout(world, o.timeout);
    /* BLAS threads: the cores shared by this node's ranks (OpenBLAS would start one per core in
       every rank), unless OPENBLAS_NUM_THREADS says otherwise */
    int blas = getenv("OPENBLAS_NUM_THREADS") ? openblas_get_num_threads() : 0;
    if (!blas) {
        long cores = sysconf(_SC_NPROCESSORS_ONLN);
        blas = cores / comm_local_size(world) > 1 ? (int)(cores / comm_local_size(world)) : 1;
        openblas_set_num_threads(blas);
    }
    su.cfg.image_size = o.image ? o.image : strcmp(su.cfg.name, "resnet50") == 0 ? 64 : su.cfg.image_size;
    su.model = su.cfg.name;
    su.params = exec_cnn_cfg_num_params(&su.cfg);
    su.nbn = exec_cnn_cfg_bn_layers(&su.cfg, &su.sum_c);
    su.world = N;
    su.cores = (int)sysconf(_SC_NPROCESSORS_ONLN);
    time_t now = time(NULL);
    strftime(su.date, sizeof su.date, "%Y-%m-%d %H:%M UTC", gmtime(&now));
    /* sort the lists so tables and plots read in order */
    for (int i = 1; i < o.nb; i++)
        for (int j = i; j > 0 && o.batches[j] < o.batches[j - 1]; j--) {
            int t = o.batches[j];
            o.batches[j] = o.batches[j - 1];
            o.batches[j - 1] = t;
        }
    for (int i = 1; i < o.nr; i++)
        for (int j = i; j > 0 && o.ranks[j] < o.ranks[j - 1]; j--) {
            int t = o.ranks[j];
            o.ranks[j] = o.ranks[j - 1];
            o.ranks[j - 1] = t;
        }
    if (rank == 0) {
        fprintf(stderr, "# bench syncbn: %s at %dx%d, per-GPU batches", su.model, su.cfg.image_size, su.cfg.image_size);
        for (int i = 0; i < o.nb; i++) fprintf(stderr, "%s%d", i ? "," : " ", o.batches[i]);
        fprintf(stderr, ", ranks");
        for (int i = 0; i < o.nr; i++) fprintf(stderr, "%s%d", i ? "," : " ", o.ranks[i]);
        fprintf(stderr, " of %d, %d steps after %d warm-up per mode (the first n ranks run, the others wait asleep), "
                "%d BLAS thread%s per rank\n", N, o.steps, o.warmup, blas, blas > 1 ? "s" : "");
        fflush(stderr);
    }
    Link *links = calloc((size_t)o.nr, sizeof *links);
    Record *recs = calloc((size_t)o.nr * o.nb, sizeof *recs);
    if (!links || !recs) {
        free(links);
        free(recs);
        comm_abort(world, "out of host memory");
    }
    for (int ri = 0; ri < o.nr && rc == 0; ri++) {
        int n = o.ranks[ri];
        Comm *sub = comm_split(world, rank < n ? 0 : -1, err, sizeof err);
        if (rank < n && !sub) comm_abort(world, err);
        if (sub) {
            if (run_ranks(sub, &su.cfg, &o, &links[ri], recs + (size_t)ri * o.nb, err, sizeof err)) rc = 1;
            comm_destroy(sub);
        }
        double mine = rc, worst = rc;
        if (comm_barrier_idle(world, IDLE_POLL_S) || comm_all_reduce(world, &mine, &worst, 1, DT_F64, NULL)) rc = 1;
        if (worst != 0) rc = 1;
    }
    if (rc) {
        if (rank == 0) fprintf(stderr, "memplan: bench syncbn failed%s%s\n", *err ? ": " : "", err);
    } else if (rank == 0) {
        int n = o.nr * o.nb;
        print_table(o.json_stdout ? stderr : stdout, &su, &o, links, o.nr, recs, n);   /* stdout carries the JSON */
        fflush(stdout);
        if ((o.json || o.json_stdout) && write_json(o.json, &su, &o, links, o.nr, recs, n)) rc = 1;
        if (o.plot && write_plot(o.plot, &su, &o, recs, n)) {
            fprintf(stderr, "memplan: cannot write --plot file '%s'\n", o.plot);
            rc = 1;
        }
        if (o.json && !rc) fprintf(stderr, "# wrote %s\n", o.json);
        if (o.plot && !rc) fprintf(stderr, "# wrote the plot to %s\n", o.plot);
    }
    free(links);
    free(recs);
    comm_destroy(world);
    return rc;
}

int cli_cmd_bench(int argc, char **argv)
{
    if (argc < 2 || strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "help") == 0) {
        printf("memplan bench syncbn [options]: what SyncBatchNorm costs (memplan bench syncbn --help)\n");
        return argc < 2 ? 2 : 0;
    }
    if (strcmp(argv[1], "syncbn") != 0) return cli_usage_error("unknown benchmark '%s' (valid: syncbn)", argv[1]);
    return bench_syncbn(argc - 1, argv + 1);
}
