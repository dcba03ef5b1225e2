/* cli_bench.c — `memplan bench syncbn`: the price of SyncBatchNorm, measured and predicted.
 * This file is the command: its flags (parse, validate, echo the resolved setup), the table, the
 * JSON records and the plot. The measurements and the planner's predictions are the engine's
 * (exec/exec_syncbn_bench.h: for each rank count and per-GPU batch, the CNN under DDP with
 * BatchNorm and with SyncBN, steps alternating, medians of the slowest rank, the link fitted to
 * the planner's alpha-beta model). Everything is printed by rank 0: lines that are not data start
 * with '#'. */
#include "cli_bench.h"

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
#include "cli_plot.h"
#include "cli_ranks.h"
#include "cli_setup.h"
#include "exec_cnn.h"
#include "exec_comm.h"
#include "exec_syncbn_bench.h"
#include "kern_blas.h"
#include "kern_cnn.h"
#include "plan_util.h"
#include "prof_comm.h"

#define MAX_LIST 16
#define CPU_IMAGE_MAX 64   /* the default input side's cap, pixels */

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
        "  --image-size S        input side in pixels, >= 32 (default: the model's, at most 64 on CPUs: 64 for resnet50,\n"
        "                        whose own is 224)\n"
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
            if (plan_parse_int(a, 1, 1000000, &v)) return bad(err, len, "--steps '%s' is not an integer in [1, 1000000]", a);
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

/* ---- output ---- */

typedef struct {
    const char *model;
    CnnConfig cfg;
    int64_t params, sum_c;
    int nbn, world, cores;
    char date[64];
} Setup;

static double overhead(const SyncbnRecord *x) { return x->diff.step; }
static double overhead_pct(const SyncbnRecord *x) { return x->bn.step > 0 ? 100.0 * overhead(x) / x->bn.step : 0; }
static double pred_ms(const SyncbnRecord *x) { return x->pred_sync_ms - x->pred_bn_ms; }
static double pct(const SyncbnRecord *x, double ms) { return x->bn.step > 0 ? 100.0 * ms / x->bn.step : 0; }
static double extra_count(const SyncbnRecord *x)
{
    return x->extra_count[COLL_ALL_GATHER] + x->extra_count[COLL_ALL_REDUCE];
}
static double extra_bytes(const SyncbnRecord *x)
{
    return x->extra_bytes[COLL_ALL_GATHER] + x->extra_bytes[COLL_ALL_REDUCE];
}

/* The measured batch below the rule, on the most ranks, the largest such batch: "what it costs
 * there". NULL when no measured batch is below the rule. */
static const SyncbnRecord *conclusion_record(const SyncbnRecord *recs, int n, int bn_min)
{
    const SyncbnRecord *best = NULL;
    for (int i = 0; i < n; i++) {
        const SyncbnRecord *x = &recs[i];
        if (x->batch >= bn_min) continue;
        if (!best || x->ranks > best->ranks || (x->ranks == best->ranks && x->batch > best->batch)) best = x;
    }
    return best;
}

static void conclusion(char *buf, size_t len, const SyncbnRecord *recs, int n, const Opts *o, int nbn)
{
    const SyncbnRecord *x = conclusion_record(recs, n, o->bn_min);
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

static void print_table(FILE *out, const Setup *su, const Opts *o, const SyncbnLink *links, int nl,
                        const SyncbnRecord *recs, int n)
{
    char pc[32], cc[32];
    fprintf(out, "# memplan bench syncbn: %s (%s parameters, %d BN layers, sum C %s) at %dx%d, DDP, fp32, AdamW\n", su->model,
           plan_fmt_count(su->params, pc, sizeof pc), su->nbn, plan_fmt_count(su->sum_c, cc, sizeof cc),
           su->cfg.image_size, su->cfg.image_size);
    fprintf(out, "# %s; MPI on %d ranks, %d cores; %d measured steps per mode after %d warm-up, BN and SyncBN steps "
           "alternating; times: median over steps of the slowest rank\n", su->date, su->world, su->cores, o->steps, o->warmup);
    for (int i = 0; i < nl; i++) {
        const SyncbnLink *k = &links[i];
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
        const SyncbnRecord *x = &recs[i];
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

static cJSON *phases_json(const SyncbnPhases *p)
{
    cJSON *j = cJSON_CreateObject();
    cJSON_AddNumberToObject(j, "forward_ms", p->fwd);
    cJSON_AddNumberToObject(j, "backward_ms", p->bwd);
    cJSON_AddNumberToObject(j, "optimizer_ms", p->opt);
    cJSON_AddNumberToObject(j, "step_ms", p->step);
    return j;
}

static int write_json(const char *path, const Setup *su, const Opts *o, const SyncbnLink *links, int nl,
                      const SyncbnRecord *recs, int n)
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
        const SyncbnLink *k = &links[i];
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
        const SyncbnRecord *x = &recs[i];
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
static void dat_row(FILE *f, int xval, const SyncbnRecord *x)
{
    fprintf(f, "%d %.5f %.5f %.5f %.5f %.5f %.5f %.5f %.5f\n", xval, overhead_pct(x), pct(x, x->diff_se),
            pct(x, x->pred_comm_ms), pct(x, pred_ms(x)), overhead(x), x->diff_se, x->pred_comm_ms, pred_ms(x));
}

/* A data file of one block per value of the key (rank count or batch), x the other. 0 or -1. */
static int write_blocks(const char *file, const int *keys, int nkeys, int by_ranks, const SyncbnRecord *recs, int n)
{
    FILE *f = fopen(file, "w");
    if (!f) return -1;
    for (int k = 0; k < nkeys; k++) {
        fprintf(f, "# %s %d: %s\n", by_ranks ? "ranks" : "batch", keys[k], DAT_COLUMNS);
        for (int i = 0; i < n; i++)
            if ((by_ranks ? recs[i].ranks : recs[i].batch) == keys[k])
                dat_row(f, by_ranks ? recs[i].batch : recs[i].ranks, &recs[i]);
        fprintf(f, "\n\n");
    }
    return fclose(f) ? -1 : 0;
}

/* One panel: per block of dat, the measured cost with its error bars (solid), the planner's
 * collective time (dashed) and its simulated step difference (dotted). */
static void plot_blocks(FILE *f, const char *dat, const int *keys, int nkeys, int by_ranks)
{
    fprintf(f, "plot ");
    for (int i = 0; i < nkeys; i++) {
        char title[32];
        snprintf(title, sizeof title, by_ranks ? "%d ranks" : "batch %d", keys[i]);
        fprintf(f, "%s'%s' index %d using 1:2:3 with yerrorlines lw 2 lc %d title '%s', '' index %d using 1:4 with "
                   "lines dt 2 lc %d notitle, '' index %d using 1:5 with lines dt 3 lc %d notitle",
                i ? ", " : "", dat, i, i + 1, title, i, i + 1, i, i + 1);
    }
}

/* Two data files (blocks per rank count, blocks per batch) and a gnuplot script beside path. */
static int write_plot(const char *path, const Setup *su, const Opts *o, const SyncbnRecord *recs, int n)
{
    char by_b[1100], by_n[1100], gp[1100], data[2300];
    snprintf(by_b, sizeof by_b, "%s.by_batch.dat", path);
    snprintf(by_n, sizeof by_n, "%s.by_ranks.dat", path);
    snprintf(gp, sizeof gp, "%s.gp", path);
    if (write_blocks(by_b, o->ranks, o->nr, 1, recs, n) || write_blocks(by_n, o->batches, o->nb, 0, recs, n)) return -1;
    FILE *f = fopen(gp, "w");
    if (!f) return -1;
    cli_plot_terminal(f, path, 1300, 520);
    fprintf(f, "set multiplot layout 1,2 title \"SyncBatchNorm cost per step: %s at %dx%d, DDP over MPI, %s\\n"
               "solid: measured step difference (bars: standard error), dashed: the planner's time of the collectives, "
               "dotted: the planner's simulated step difference\"\n", su->model, su->cfg.image_size, su->cfg.image_size,
            su->date);
    fprintf(f, "set grid\nset key top right\nset ylabel 'cost (%% of the BatchNorm step)'\nset logscale x 2\n"
               "set xlabel 'per-GPU batch'\nset title 'versus per-GPU batch'\nset arrow from %d, graph 0 to %d, graph 1 "
               "nohead dt 3 lc rgb 'gray'\n", o->bn_min, o->bn_min);
    /* one value on an axis: gnuplot cannot autoscale it ("empty x range"), so the range is given */
    if (o->nb == 1) fprintf(f, "set xrange [%g:%g]\n", o->batches[0] / 2.0, o->batches[0] * 2.0);
    plot_blocks(f, by_b, o->ranks, o->nr, 1);
    fprintf(f, "\nunset arrow\nset autoscale x\nset xlabel 'ranks'\nset title 'versus ranks'\n");
    if (o->nr == 1) fprintf(f, "set xrange [%g:%g]\n", o->ranks[0] / 2.0, o->ranks[0] * 2.0);
    plot_blocks(f, by_n, o->batches, o->nb, 0);
    fprintf(f, "\nunset multiplot\n");
    if (fclose(f)) return -1;
    snprintf(data, sizeof data, "%s, %s", by_b, by_n);
    return cli_plot_run(gp, data);
}

/* ---- the command ---- */

static int cmp_int(const void *a, const void *b)
{
    int x = *(const int *)a, y = *(const int *)b;
    return (x > y) - (x < y);
}

/* The checks that need the model and the job's size, after parse; the setup they resolve (the
 * default rank counts, the lists sorted so tables and plots read in order). 0 or 2 (err). */
static int resolve(Opts *o, Setup *su, int N, char *err, size_t len)
{
    if (exec_cnn_config_preset(&su->cfg, o->model)) {
        char names[256] = "";
        for (int i = 0; i < exec_cnn_preset_count(); i++)
            snprintf(names + strlen(names), sizeof names - strlen(names), "%s%s", i ? ", " : "", exec_cnn_preset_name(i));
        return bad(err, len, "bench syncbn runs the executor's CNN presets (%s); '%s' is not one", names, o->model);
    }
    if (N < 2)
        return bad(err, len, "bench syncbn measures SyncBN's collectives: start it on 2 or more ranks "
                             "(mpirun -np 4 memplan bench syncbn)");
    if (o->nr == 0) {   /* 2, 4, 8, ... up to the job, and the job */
        for (int n = 2; n <= N && o->nr < MAX_LIST - 1; n *= 2) o->ranks[o->nr++] = n;
        if (o->ranks[o->nr - 1] != N) o->ranks[o->nr++] = N;
    }
    for (int i = 0; i < o->nr; i++)
        if (o->ranks[i] > N) return bad(err, len, "--ranks %d exceeds the %d ranks this job was started with", o->ranks[i], N);
    /* BatchNorm trains on more than one value per channel: the last stage's maps are the smallest */
    /* the model's own images, at most 64 pixels (resnet50's 224 would take minutes a step on CPUs) */
    if (o->image) su->cfg.image_size = o->image;
    else if (su->cfg.image_size > CPU_IMAGE_MAX) su->cfg.image_size = CPU_IMAGE_MAX;
    int img = su->cfg.image_size;
    int h = kern_conv2d_out_size(kern_conv2d_out_size(img, 7, 2, 3), 3, 2, 1);   /* stem conv, max-pool */
    for (int st = 1; st < 4; st++) h = kern_conv2d_out_size(h, 3, 2, 1);        /* stages 2..4 halve */
    for (int i = 0; i < o->nb; i++)
        if ((long long)o->batches[i] * h * h < 2)
            return bad(err, len, "--batches: a per-GPU batch of %d gives BatchNorm one value per channel in %s's "
                       "last stage (%dx%d maps at --image-size %d), and BatchNorm cannot train on one: give batches of "
                       "2 or more, or a larger --image-size", o->batches[i], su->cfg.name, h, h, img);
    qsort(o->batches, (size_t)o->nb, sizeof *o->batches, cmp_int);
    qsort(o->ranks, (size_t)o->nr, sizeof *o->ranks, cmp_int);
    su->model = su->cfg.name;
    su->params = exec_cnn_cfg_num_params(&su->cfg);
    su->nbn = exec_cnn_cfg_bn_layers(&su->cfg, &su->sum_c);
    su->world = N;
    su->cores = (int)sysconf(_SC_NPROCESSORS_ONLN);
    time_t now = time(NULL);
    strftime(su->date, sizeof su->date, "%Y-%m-%d %H:%M UTC", gmtime(&now));
    return 0;
}

static void echo_setup(FILE *f, const Setup *su, const Opts *o, int blas)
{
    fprintf(f, "# bench syncbn: %s at %dx%d, per-GPU batches", su->model, su->cfg.image_size, su->cfg.image_size);
    for (int i = 0; i < o->nb; i++) fprintf(f, "%s%d", i ? "," : " ", o->batches[i]);
    fprintf(f, ", ranks");
    for (int i = 0; i < o->nr; i++) fprintf(f, "%s%d", i ? "," : " ", o->ranks[i]);
    fprintf(f, " of %d, %d steps after %d warm-up per mode (the first n ranks run, the others wait asleep), "
            "%d BLAS thread%s per rank\n", su->world, o->steps, o->warmup, blas, blas > 1 ? "s" : "");
    fflush(f);
}

/* Rank 0's outputs: the table, the JSON, the plot. 0 or 1. */
static int report(const Setup *su, const Opts *o, const SyncbnLink *links, const SyncbnRecord *recs)
{
    int n = o->nr * o->nb, rc = 0;
    print_table(o->json_stdout ? stderr : stdout, su, o, links, o->nr, recs, n);   /* stdout carries the JSON */
    fflush(stdout);
    if ((o->json || o->json_stdout) && write_json(o->json, su, o, links, o->nr, recs, n)) rc = 1;
    if (o->plot && write_plot(o->plot, su, o, recs, n)) {
        fprintf(stderr, "memplan: cannot write --plot file '%s'\n", o->plot);
        rc = 1;
    }
    if (o->json && !rc) fprintf(stderr, "# wrote %s\n", o->json);
    if (o->plot && !rc) fprintf(stderr, "# wrote the plot to %s\n", o->plot);
    return rc;
}

static int bench_syncbn(int argc, char **argv)
{
    char err[512] = "";
    Comm *world = comm_create(comm_launch_kind(), &argc, &argv, 300, err, sizeof err);
    if (!world) {
        fprintf(stderr, "memplan: cannot start the communicator: %s\n", err);
        return 1;
    }
    int rank = comm_rank(world), rc = 0;
    Opts o;
    Setup su;
    memset(&su, 0, sizeof su);
    int prc = parse(argc, argv, &o, err, sizeof err);
    if (prc == 0) prc = resolve(&o, &su, comm_size(world), err, sizeof err);
    /* every rank checked its own arguments and paths: all learn at once if one failed */
    int st = cli_ranks_agree(world, argc, argv, prc == 1 ? CLI_RANKS_HELP : prc, prc ? err : "");
    if (st == CLI_RANKS_HELP && rank == 0) help(stdout);
    if (st) {
        comm_destroy(world);
        return st == CLI_RANKS_HELP ? 0 : st;
    }
    if (o.timeout > 0) comm_set_timeout(world, o.timeout);
    /* BLAS threads: the cores shared by this node's ranks (OpenBLAS would start one per core in
       every rank), unless OPENBLAS_NUM_THREADS says otherwise */
    int blas = kern_blas_set_threads(comm_local_size(world));
    if (rank == 0) echo_setup(stderr, &su, &o, blas);
    SyncbnLink *links = calloc((size_t)o.nr, sizeof *links);
    SyncbnRecord *recs = calloc((size_t)o.nr * o.nb, sizeof *recs);
    if (!links || !recs) {
        free(links);
        free(recs);
        comm_abort(world, "out of host memory");
    }
    SyncbnBench b = {su.cfg, o.batches, o.nb, o.ranks, o.nr, o.steps, o.warmup, o.bucket_mb * MIB, (uint64_t)o.seed,
                     rank == 0 ? stderr : NULL};
    if (exec_syncbn_bench(world, &b, links, recs, err, sizeof err)) {
        if (rank == 0) fprintf(stderr, "memplan: bench syncbn failed%s%s\n", *err ? ": " : "", err);
        rc = 1;
    } else if (rank == 0) {
        rc = report(&su, &o, links, recs);
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
