/* cli_torch.c — `memplan validate --against torch`: the planner's PyTorch layout checked against
 * real PyTorch / DeepSpeed. For each strategy the setup is planned (overheads zeroed: CPU ranks
 * have no CUDA context, NCCL buffers or caching allocator), the same setup runs in
 * bench/torch/harness.py under torchrun on CPU ranks (gloo), and predicted and measured figures
 * are printed side by side: parameters and model states exactly, the per-rank tensor peak within
 * a tolerance and at the same phase, the split at the peak, and every collective of one optimizer
 * step (payload bytes exactly). `--measured FILE` compares a saved harness result instead of
 * running one (the calibration matrix in docs/validation-torch.md is re-checked that way).
 * docs/validation-torch.md describes the harness and the rules.
 *
 * Running the harness and reading its results is cli_harness.c; here each strategy is checked
 * (torch_check fills a TorchCheck: every quantity predicted, measured and its verdict), then
 * printed (torch_print) and written as a JSON record (torch_json) from that one result. */
#include "cli_torch.h"
#include "plan_dim_ft.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli_harness.h"
#include "cli_io.h"
#include "cli_setup.h"
#include "plan_fsdp.h"
#include "plan_comm.h"
#include "plan_load.h"
#include "plan_alloc_trace.h"
#include "plan_memory.h"
#include "plan_step_alloc.h"
#include "plan_strategy.h"
#include "plan_dim_ep.h"
#include "plan_dim_tp.h"
#include "plan_step.h"
#include "plan_util.h"
#include "plan_zoo.h"

#define MAX_MEASURED 256

typedef struct {
    int against;             /* --against torch given */
    long long ranks, steps, shard_group, timeout_s;
    double tol, bucket_mb;
    const char *keep;
    const char *alloc_out;   /* --alloc-out DIR: each planned allocation sequence written there */
    const char *measured[MAX_MEASURED];
    int n_measured;
} TorchOpts;

enum { OPT_AGAINST = 3000, OPT_RANKS, OPT_STEPS, OPT_TOL, OPT_BUCKET_MB,
       OPT_SHARD_GROUP, OPT_TIMEOUT, OPT_KEEP, OPT_MEASURED, OPT_ALLOC_OUT };
static const struct option TORCH_OPTIONS[] = {
    {"against", required_argument, 0, OPT_AGAINST},
    {"ranks", required_argument, 0, OPT_RANKS},
    {"steps", required_argument, 0, OPT_STEPS},
    {"tol", required_argument, 0, OPT_TOL},
    {"bucket-mb", required_argument, 0, OPT_BUCKET_MB},
    {"shard-group", required_argument, 0, OPT_SHARD_GROUP},
    {"timeout", required_argument, 0, OPT_TIMEOUT},
    {"keep", required_argument, 0, OPT_KEEP},
    {"measured", required_argument, 0, OPT_MEASURED},
    {"alloc-out", required_argument, 0, OPT_ALLOC_OUT},
    {0, 0, 0, 0},
};

/* Precisions the harness runs on CPU ranks (a subset of the planner's). */
static const PrecisionKind HARNESS_PRECISIONS[] = {PREC_FP32, PREC_AMP_BF16, PREC_MIXED_BF16, PREC_BF16};
#define HARNESS_PRECISION_NAMES "fp32, amp-bf16, mixed-bf16, bf16"

int cli_wants_against(int argc, char **argv)
{
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--") == 0) return 0;
        if (strcmp(argv[i], "--against") == 0 || strncmp(argv[i], "--against=", 10) == 0) return 1;
    }
    return 0;
}

static int torch_opt(void *ctx, int opt, const char *a, char *err, size_t errlen)
{
    TorchOpts *o = ctx;
    long long v;
    double d;
    switch (opt) {
    case OPT_AGAINST:
        if (strcmp(a, "torch")) {
            snprintf(err, errlen, "unknown --against '%s' (valid: torch; without --against, validate checks memplan's own engine under mpirun)", a);
            return -1;
        }
        o->against = 1;
        return 0;
    case OPT_RANKS:
        if (plan_parse_int(a, 1, 64, &v)) { snprintf(err, errlen, "--ranks '%s' is not an integer in [1, 64]", a); return -1; }
        o->ranks = v;
        return 0;
    case OPT_STEPS:
        if (plan_parse_int(a, 2, 100, &v)) {
            snprintf(err, errlen, "--steps '%s' is not an integer in [2, 100] (step 1 has no optimizer state: the steady state starts at step 2)", a);
            return -1;
        }
        o->steps = v;
        return 0;
    case OPT_TOL:
        if (plan_parse_double(a, 0, 100, &d)) { snprintf(err, errlen, "--tol '%s' is not a percentage in [0, 100]", a); return -1; }
        o->tol = d / 100;
        return 0;
    case OPT_BUCKET_MB:
        if (plan_parse_double(a, 0.001, 65536, &d)) { snprintf(err, errlen, "--bucket-mb '%s' is not a size in MiB in [0.001, 65536]", a); return -1; }
        o->bucket_mb = d;
        return 0;
    case OPT_SHARD_GROUP:
        if (plan_parse_int(a, 1, 64, &v)) { snprintf(err, errlen, "--shard-group '%s' is not an integer in [1, 64]", a); return -1; }
        o->shard_group = v;
        return 0;
    case OPT_TIMEOUT:
        if (plan_parse_int(a, 1, 86400, &v)) { snprintf(err, errlen, "--timeout '%s' is not a number of seconds in [1, 86400]", a); return -1; }
        o->timeout_s = v;
        return 0;
    case OPT_KEEP:
        if (!*a) { snprintf(err, errlen, "--keep needs a directory"); return -1; }
        o->keep = a;
        return 0;
    case OPT_ALLOC_OUT:
        if (!*a) { snprintf(err, errlen, "--alloc-out needs a directory"); return -1; }
        o->alloc_out = a;
        return 0;
    case OPT_MEASURED:
        if (o->n_measured >= MAX_MEASURED) { snprintf(err, errlen, "more than %d --measured files", MAX_MEASURED); return -1; }
        o->measured[o->n_measured++] = a;
        return 0;
    default: return 1;
    }
}

static void print_help(FILE *f)
{
    fprintf(f,
        "memplan validate --against torch — the planner's PyTorch layout checked against real PyTorch\n\n"
        "Usage: memplan validate --against torch --model NAME|config.json [--strategy all|S,...] [plan flags] [options]\n"
        "       memplan validate --against torch --measured RESULT.json [--measured ...]\n\n"
        "Plans each strategy with CPU overheads zeroed, runs the same setup in PyTorch / DeepSpeed on CPU\n"
        "ranks (bench/torch/harness.py under torchrun, gloo), and prints predicted vs measured. A row fails\n"
        "(exit 1) unless parameters, model states and collective payload bytes are exact and the per-rank\n"
        "tensor peak is within the tolerance and in the same phase. A run this host's memory cannot hold (the\n"
        "ranks times the larger of the predicted peak and the fp32 model, plus the processes) is refused first.\n"
        "What runs: ddp = torch DDP; zero1/zero2/zero3 = DeepSpeed; fsdp-full/fsdp-grad-op/fsdp-hybrid =\n"
        "FSDP2 fully_shard, or with --fsdp 1 FullyShardedDataParallel (and its --fsdp-min-params,\n"
        "--fsdp-backward-prefetch, --fsdp-forward-prefetch, --fsdp-limit-all-gathers).\n\n"
        "Options (besides the plan flags --model, --strategy, --batch, --seq, --grad-accum, --precision,\n"
        "--act-ckpt, --attn, --dropout, --grad-as-bucket-view, --loop, --fsdp-grad-sync, --json[=FILE]; the prediction uses\n"
        "--autocast cpu and --fsdp 2, as the CPU ranks run; the GPU and time flags, --gpus, --gpu, --gpu-mem, --autocast\n"
        "cuda, ..., do not apply to CPU ranks and are refused):\n"
        "  --against torch       required: check against PyTorch (without it, validate checks memplan's engine)\n"
        "  --ranks N             CPU ranks torchrun starts (default 2)\n"
        "  --steps K             optimizer steps, K >= 2; steps 2..K are the steady state (default 3)\n"
        "  --tol PCT             peak tolerance in percent, 0..100 (default 3; 0: the peak exact to the byte)\n"
        "  --loop common|trainer the training loop (a plan flag): common keeps `outputs` (the logits) alive\n"
        "                        through backward and the step (default), trainer (HF Trainer's) drops them\n"
        "  --zero-grad none|zeros zero_grad(set_to_none=True|False) (a plan flag; default none, PyTorch >= 2.0)\n"
        "  --bucket-mb X         DDP bucket_cap_mb, every bucket X MiB (default: not passed, DDP's own 25 MiB\n"
        "                        with a 1 MiB first bucket; passing it makes the first bucket X MiB too)\n"
        "  --shard-group G       fsdp-hybrid: shard inside groups of G ranks (default N/2)\n"
        "  --timeout S           seconds one strategy may run (default 1800)\n"
        "  --keep DIR            keep the harness's JSON and torchrun's output (.log) per strategy in the folder\n"
        "                        DIR (made if missing, checked before any run); without it a temporary directory\n"
        "                        (a failed run's output is kept and named)\n"
        "  --measured FILE       compare a saved harness result (repeatable); the model and setup come from the\n"
        "                        file, so only --tol, --json and --alloc-out apply; a file that is missing, empty, not\n"
        "                        JSON, not a harness result, or holds a value the flags would refuse is a usage error\n"
        "                        (exit 2)\n"
        "  --alloc-out DIR       also write each row's planned allocation sequence as DIR/<row>.planned.txt (a trace\n"
        "                        `memplan alloc` replays)\n"
        "Reserved memory: where the run's allocations were recorded (a run here records them; a saved result's\n"
        "are bench/torch/results/traces/<row>.txt.gz, bench/torch/record_traces.py), the recorded and the planned\n"
        "allocations are replayed through the caching allocator model and both max reserved are shown (target\n"
        "within 3 %%; reported, not a condition of the row).\n\n"
        "Precisions on CPU ranks: " HARNESS_PRECISION_NAMES "; optimizer: adamw.\n"
        "Needs PyTorch 2.15, transformers and DeepSpeed in a virtual environment: `make torch-env` installs them\n"
        "(about 5 GB) in ${MEMPLAN_TORCH_ENV:-~/.cache/memplan/torch-venv}; MEMPLAN_TORCH_ENV chooses another place.\n"
        "Exit status: 0 every row passes; 1 a row fails (one line on stderr names the rows) or a run failed;\n"
        "2 usage error or no environment.\n");
}

/* ---- checking one strategy ---- */

/* What a row checks, and so what its verdict says. */
typedef enum {
    RULE_EXACT,          /* predicted must equal measured */
    RULE_REPORTED,       /* shown, not judged */
    RULE_TOLERANCE,      /* the peak within the tolerance */
    RULE_BOUNDED,        /* the peak between the known peak and the run's upper bound */
    RULE_CALLS,          /* a collective's count: reported when it differs */
    RULE_NOT_PLANNED,    /* a measured collective the planner has no row for */
    RULE_RESERVED,       /* reserved memory of the planned against the recorded allocations:
                            within ALLOC_TOL, reported (not yet a condition of the row) */
    RULE_COUNT_
} CheckRule;

static const struct {
    const char *ok, *fail;
} VERDICTS[RULE_COUNT_] = {
    [RULE_EXACT] = {"ok (exact)", "FAIL (must be exact)"},
    [RULE_REPORTED] = {"reported", "reported"},
    [RULE_TOLERANCE] = {"ok", "FAIL"},   /* + " (within T%)" */
    [RULE_BOUNDED] = {"ok (between the bounds)", "ok (between the bounds)"},   /* only when it passes */
    [RULE_CALLS] = {"ok", "differs (reported)"},
    [RULE_NOT_PLANNED] = {"FAIL (not planned)", "FAIL (not planned)"},
    [RULE_RESERVED] = {"ok (within 3%)", "outside 3% (reported)"},
};

/* Reserved memory: the planned allocation sequence and the recorded one replayed through the
   same caching allocator model agree within this (issue 34's target). */
#define ALLOC_TOL 0.03

typedef struct {
    double predicted, measured;
    CheckRule rule;
    int ok;
} Quantity;

/* One (op, phase) of the collectives of an optimizer step. The names are the planner's, or for
 * a collective it does not plan, the result's (pointing into it). */
typedef struct {
    const char *op, *phase;
    int planned;
    Quantity count, payload;
} CollCheck;

/* Model states by the walk's split: the row's label and the JSON key. */
enum { STATE_PARAMS, STATE_GRADS, STATE_OPTIMIZER, STATE_COUNT };
static const struct {
    const char *label, *key;
} STATE_ROWS[STATE_COUNT] = {
    [STATE_PARAMS] = {"model states: params", "params"},
    [STATE_GRADS] = {"model states: grads", "grads"},
    [STATE_OPTIMIZER] = {"model states: optimizer", "optimizer"},
};

/* The split at the peak: the planner's term (TERM_COUNT: none, the harness's "other"), the
 * harness's category, and the row's label. */
static const struct {
    TermKind term;
    const char *key, *label;
} AT_PEAK[] = {
    {TERM_PARAMS, "params", "at peak: params"}, {TERM_GRADS, "grads", "at peak: grads"},
    {TERM_COMM, "comm_buffers", "at peak: comm_buffers"}, {TERM_OPTIMIZER, "optimizer", "at peak: optimizer"},
    {TERM_ACTIVATIONS, "activations", "at peak: activations"}, {TERM_TRANSIENT, "temporaries", "at peak: temporaries"},
    {TERM_COUNT, "other", "at peak: other"},
};
#define N_AT_PEAK ((int)(sizeof AT_PEAK / sizeof AT_PEAK[0]))

/* Everything one strategy's comparison found. Strings point into the setup and the result. */
typedef struct {
    const char *strategy, *implementation, *model;
    double tol;
    Quantity params, states[STATE_COUNT], at_peak[N_AT_PEAK], peak;
    int show_upper;              /* the run gave an upper bound above its peak */
    Quantity upper;
    PhaseKind predicted_phase;
    const char *measured_phase, *measured_module;
    int phase_ok;
    char predicted_at[64];       /* MemResult.peak_where */
    double measured_rank;
    CollCheck *colls;            /* the unplanned ones first, as the result lists them */
    int ncolls;
    int pass;
    /* the recorded allocation sequence (bench/torch/results/traces/<row>.txt.gz, or the run's)
       and the planned one replayed through the caching allocator model */
    int has_reserved;
    Quantity reserved;           /* max_memory_reserved: planned, recorded */
    Quantity reserved_tensors;   /* the replays' peaks of live tensor bytes */
    int planned_segments, recorded_segments;
} TorchCheck;

enum { CHECKED = 0, CHECK_NO_MODEL = -1, CHECK_NO_RANKS = -2 };

/* Whole bytes or counts; round(), not llround(): a prediction can exceed a long long (seq 1e7 x
 * batch 1e6 of a large model) */
static Quantity exact(double p, double m) { return (Quantity){p, m, RULE_EXACT, round(p) == round(m)}; }
static Quantity reported(double p, double m) { return (Quantity){p, m, RULE_REPORTED, 1}; }

/* The planner's inputs for a harness setup: CPU ranks, overheads zeroed, unbounded memory. */
static void plan_inputs(const HarnessSetup *s, TrainSpec *t, ClusterSpec *c)
{
    plan_train_defaults(t);
    t->micro_batch = s->batch;
    t->seq = s->seq;
    t->grad_accum = s->accum;
    t->precision = s->precision;
    t->optimizer = OPT_ADAMW;
    t->act_ckpt = s->ckpt;
    t->ckpt_every = s->ckpt_every;
    t->attn = s->attn;
    t->dropout = s->dropout;
    t->impl = IMPL_PYTORCH;
    t->autocast_cpu = 1;                     /* CPU autocast's op lists (docs/formulas.md) */
    t->fsdp_impl = s->fsdp_impl == 1 ? 1 : 2;   /* the harness's --fsdp (older results: 2) */
    t->fsdp1 = s->fsdp1;
    t->loop_trainer = s->loop_trainer;
    t->zero_grad_keep = s->zero_grad_keep;
    t->grad_as_bucket_view = s->gabv;
    t->fsdp_grad_sync = s->fsdp_sync;
    t->ds = s->ds;
    t->ft = s->ft;
    t->syncbn = 0;
    t->tp = s->tp > 1 ? s->tp : 1;
    t->sp = s->sp;
    t->loss_parallel = s->loss_parallel;
    t->ep = s->ep > 1 ? s->ep : 1;
    if (t->ep > 1 && s->moe_skewed) t->moe_imbalance = t->ep;   /* every row to the first rank's experts */
    plan_cluster_defaults(c);
    c->gpus = s->ranks;
    c->gpus_per_node = s->strategy == STRAT_FSDP_HYBRID && s->shard_group > 0 ? s->shard_group : s->ranks;
    c->cuda_context = 0;
    c->nccl_per_comm = 0;
    c->alloc_margin = 0;
    c->alloc_model = 0;
    c->margin_is_frac = 1;
    c->gpu.cublas_ws_bytes = 0;
    c->gpu.mem_bytes = 1e18;
}

/* A rank's measured peak as a GPU would see it: without the buffers gloo allocates inside its
 * collectives (NCCL does not allocate through PyTorch's allocator; docs/validation-torch.md
 * "Limits"). The harness's peak_excl_backend is the peak of that series; older results give
 * only the bytes gloo held at the raw peak, subtracted there. */
static double measured_peak(const cJSON *r)
{
    const cJSON *x = cJSON_GetObjectItem(r, "peak_excl_backend");
    if (cJSON_IsObject(x)) return cli_harness_num(x, "bytes", 0);
    return cli_harness_num(r, "peak_bytes", 0) - cli_harness_num(r, "at_peak_backend_internal", 0);
}

/* Where that peak's phase, module and split are: peak_excl_backend when the harness gives it. */
static const cJSON *peak_view(const cJSON *r)
{
    const cJSON *x = cJSON_GetObjectItem(r, "peak_excl_backend");
    return cJSON_IsObject(x) ? x : r;
}

/* The measured figures over the ranks: the rank with the largest peak, the smallest upper bound
 * of the peak that a rank gave (INFINITY: none did; results written before the harness measured
 * it have none), and the model states of the rank holding the most. NULL if there are no ranks. */
static const cJSON *measured_ranks(const cJSON *h, double *peak, double *upper, double states[STATE_COUNT])
{
    const cJSON *r, *top = NULL;
    *peak = -1;
    *upper = INFINITY;
    memset(states, 0, STATE_COUNT * sizeof *states);
    cJSON_ArrayForEach(r, cJSON_GetObjectItem(h, "per_rank")) {
        double pk = measured_peak(r);
        if (pk > *peak) { *peak = pk; top = r; }
        /* the ranks do the same work: the peak without gloo's buffers is at most the smallest
           rank's upper bound (blocks freed unseen on gloo's threads still counted there) */
        const cJSON *x = cJSON_GetObjectItem(r, "peak_excl_backend");
        double up = cJSON_IsObject(x) ? cli_harness_num(x, "bytes_upper", INFINITY) : INFINITY;
        if (up < *upper) *upper = up;
        const cJSON *st = cJSON_GetObjectItem(r, "model_states");
        double v[STATE_COUNT];
        for (int i = 0; i < STATE_COUNT; i++) v[i] = cli_harness_num(st, STATE_ROWS[i].key, 0);
        if (v[0] + v[1] + v[2] > states[0] + states[1] + states[2]) memcpy(states, v, sizeof v);
    }
    return top;
}

/* The peak, its upper bound and its phase. */
static void check_peak(TorchCheck *c, const MemResult *mr, const cJSON *top, double mpeak, double mupper)
{
    double pe = plan_rel_err(mr->peak, mpeak);
    int peak_ok = fabs(pe) <= c->tol;
    /* a prediction between the known peak and the upper bound (or within the tolerance of the
       bound) is as close as the run can say; without a bound the run knows the peak, and the
       tolerance is the rule (a missing bound is no licence to over-predict) */
    int bounded = !peak_ok && isfinite(mupper) && mupper >= mpeak && mr->peak >= mpeak &&
                  (mr->peak <= mupper || fabs(plan_rel_err(mr->peak, mupper)) <= c->tol);
    c->peak = (Quantity){mr->peak, mpeak, bounded ? RULE_BOUNDED : RULE_TOLERANCE, peak_ok | bounded};
    c->show_upper = isfinite(mupper) && mupper > mpeak;
    c->upper = reported(mr->peak, mupper);
    const cJSON *pv = peak_view(top);
    c->predicted_phase = mr->peak_phase;
    c->measured_phase = cli_harness_str(pv, "peak_phase", "?");
    c->phase_ok = cli_harness_peak_phase(c->measured_phase) == (int)mr->peak_phase;
    c->measured_module = cli_harness_str(pv, "peak_module", "?");
    c->measured_rank = cli_harness_num(top, "rank", 0);
    snprintf(c->predicted_at, sizeof c->predicted_at, "%s", mr->peak_where);
    const cJSON *at = cJSON_GetObjectItem(pv, "at_peak");
    for (int i = 0; i < N_AT_PEAK; i++)
        c->at_peak[i] = reported(AT_PEAK[i].term == TERM_COUNT ? 0 : mr->term[AT_PEAK[i].term],
                                 cli_harness_num(at, AT_PEAK[i].key, 0));
}

/* The collectives of one optimizer step by (op, phase): payload bytes exact, counts reported.
 * 0, or -1 if out of memory. */
static int check_collectives(TorchCheck *c, const HarnessSetup *s, const cJSON *h, const ModelSpec *m,
                             const TrainSpec *t, const MemSizes *ms, const CommPlan *cp)
{
    double pred[COLL_COUNT][PHASE_COUNT][2], meas[COLL_COUNT][PHASE_COUNT][2];   /* count, payload */
    memset(pred, 0, sizeof pred);
    memset(meas, 0, sizeof meas);
    for (int i = 0; i < cp->n; i++) {
        double count = cp->c[i].count;
        if (s->strategy == STRAT_DDP && cp->c[i].op == COLL_ALL_REDUCE && s->bucket_mb > 0 &&
            cp->c[i].purpose == PURPOSE_GRAD_BUCKETS) {   /* every bucket at the cap, the first too; whole tensors */
            int gbytes = plan_precision(t->precision)->grad_bytes;
            double cap = s->bucket_mb * 1024 * 1024;
            count = plan_ddp_buckets_tensors(m, gbytes, cap, cap);
            if (count < 0) count = fmax(1, ceil(ms->psi * gbytes / cap));
        }
        pred[cp->c[i].op][cp->c[i].phase][0] += count;
        pred[cp->c[i].op][cp->c[i].phase][1] += cp->c[i].payload_bytes;
    }
    const cJSON *hcs = cJSON_GetObjectItem(h, "collectives"), *hc;
    c->colls = malloc(((size_t)cJSON_GetArraySize(hcs) + COLL_COUNT * PHASE_COUNT) * sizeof *c->colls);
    if (!c->colls) return -1;
    cJSON_ArrayForEach(hc, hcs) {
        const char *op = cli_harness_str(hc, "op", "?"), *ph = cli_harness_str(hc, "phase", "?");
        int oi = coll_by_name(op), pi = cli_harness_comm_phase(ph);
        double cnt = cli_harness_num(hc, "count", 0), pay = cli_harness_num(hc, "payload_bytes", 0);
        if (oi < 0 || pi < 0) {   /* a collective the planner has no row for: never exact */
            c->colls[c->ncolls++] = (CollCheck){op, ph, 0, reported(0, cnt), {0, pay, RULE_NOT_PLANNED, 0}};
            c->pass = 0;
            continue;
        }
        meas[oi][pi][0] += cnt;
        meas[oi][pi][1] += pay;
    }
    for (int op = 0; op < COLL_COUNT; op++)
        for (int ph = 0; ph < PHASE_COUNT; ph++) {
            const double *p = pred[op][ph], *q = meas[op][ph];
            if (p[0] == 0 && q[0] == 0) continue;
            CollCheck *x = &c->colls[c->ncolls++];
            *x = (CollCheck){coll_name((CollKind)op), cli_harness_comm_phase_name((PhaseKind)ph), 1,
                             {p[0], q[0], RULE_CALLS, round(p[0]) == round(q[0])}, exact(p[1], q[1])};
            c->pass &= x->payload.ok;
        }
    return 0;
}

/* Where a row's recorded allocation sequence is kept: <dir of ROW.json>/traces/ROW.txt.gz. */
static void trace_of(const char *result, char *out, size_t len)
{
    const char *slash = strrchr(result, '/');
    int dir = slash ? (int)(slash - result) : 0;
    const char *base = slash ? slash + 1 : result;
    int n = (int)strlen(base);
    if (n > 5 && !strcmp(base + n - 5, ".json")) n -= 5;
    snprintf(out, len, "%.*s%straces/%.*s.txt.gz", dir, result, slash ? "/" : "", n, base);
}

/* The planned allocation sequence of the prediction's step st and the recorded one (trace) replayed
 * through the caching allocator model at torch's default settings with no capacity limit: the
 * planned one over two steps from an empty cache on one stream (CPU ranks have none), the
 * recorded one as it was made (three steps from the model's construction). With out_dir, the
 * planned sequence is written to <out_dir>/<name>.planned.txt too. 0, or -1 after a line on
 * stderr. */
static int check_reserved(TorchCheck *c, const Step *st, const char *trace, const char *out_dir, const char *name)
{
    StepAllocOpts o;
    StepAllocResult pl;
    PlanAllocConfig conf;
    plan_alloc_config_defaults(&conf);
    plan_step_alloc_opts_default(&o);
    o.one_stream = 1;
    o.host_on_device = 1;
    if (st->failed || plan_step_alloc_with(st, &conf, &o, &pl)) {
        fprintf(stderr, "memplan: %s: could not list its planned allocations\n", c->strategy);
        return -1;
    }
    if (out_dir) {
        char path[PATH_MAX + 256];
        snprintf(path, sizeof path, "%s/%s.planned.txt", out_dir, name);
        FILE *f = fopen(path, "w");
        const char *hdr[] = {"memplan planned allocation sequence (validate --against torch --alloc-out)", name, NULL};
        int bad = !f || plan_step_alloc_write(st, &o, f, hdr);
        if (f && fclose(f)) bad = 1;
        if (bad) fprintf(stderr, "memplan: cannot write '%s': %s\n", path, strerror(errno));
    }
    FILE *f = cli_open_maybe_gz(trace);
    if (!f) {
        fprintf(stderr, "memplan: %s: cannot read the recorded allocations '%s': %s\n", c->strategy, trace, strerror(errno));
        return -1;
    }
    AllocTrace tr;
    AllocReplay rr;
    char err[256];
    int rc = plan_alloc_trace_read(f, &tr, err, sizeof err);
    fclose(f);
    if (!rc) {
        rc = plan_alloc_replay(&tr, &conf, NULL, &rr, err, sizeof err);
        plan_alloc_trace_free(&tr);
    }
    if (rc) {
        fprintf(stderr, "memplan: %s: '%s': %s\n", c->strategy, trace, err);
        return -1;
    }
    double p = (double)pl.whole.max_reserved, r = (double)rr.whole.max_reserved;
    c->has_reserved = 1;
    c->reserved = (Quantity){p, r, RULE_RESERVED, fabs(plan_rel_err(p, r)) <= ALLOC_TOL};
    c->reserved_tensors = reported((double)pl.whole.max_requested, (double)rr.whole.max_requested);
    c->planned_segments = pl.whole.max_segments;
    c->recorded_segments = rr.whole.max_segments;
    return 0;
}

/* Plans s and compares it with the harness's result h: fills c (torch_check_free releases it);
 * with trace (a recorded allocation sequence that exists), the reserved memory of the planned
 * and the recorded allocations too. CHECKED, or CHECK_NO_MODEL / CHECK_NO_RANKS after a message
 * on stderr. */
static int torch_check(const HarnessSetup *s, const cJSON *h, double tol, const char *trace, const char *alloc_out,
                       const char *name, TorchCheck *c)
{
    memset(c, 0, sizeof *c);
    char err[512];
    ModelSpec m;
    if (plan_load_model(&m, s->model, err, sizeof err)) { fprintf(stderr, "memplan: %s\n", err); return CHECK_NO_MODEL; }
    if (s->fsdp_impl == 1 && s->fsdp1.min_params > 0 && plan_fsdp_size_wrap(&m, s->fsdp1.min_params, err, sizeof err)) {
        fprintf(stderr, "memplan: %s\n", err);
        plan_model_free(&m);
        return CHECK_NO_MODEL;
    }
    TrainSpec t;
    ClusterSpec cl;
    plan_inputs(s, &t, &cl);
    if (plan_dims_setup(&m, &t, err, sizeof err)) {   /* the harness's PEFT LoRA */
        fprintf(stderr, "memplan: %s\n", err);
        plan_model_free(&m);
        return CHECK_NO_MODEL;
    }
    MemResult mr;
    MemSizes ms;
    CommPlan cp;
    Step st;   /* the prediction: one step, its memory, its collectives, the rank's sizes */
    plan_step_build(&st, &m, &t, &cl, s->strategy);
    plan_memory_step(&st, &cl, &mr, NULL, NULL, 0);
    plan_comm_step(&st, &cp);
    plan_memory_sizes(&st.view.m, &st.view.t, &st.view.dp, s->strategy, &ms);
    c->strategy = plan_strategy(s->strategy)->name;
    c->implementation = cli_harness_str(h, "implementation", "?");
    c->model = s->model;
    c->tol = tol;

    double mpeak, mupper, mstates[STATE_COUNT];
    const cJSON *top = measured_ranks(h, &mpeak, &mupper, mstates);
    if (!top) {
        fprintf(stderr, "memplan: %s: the result has no per_rank figures\n", c->strategy);
        plan_step_free(&st);
        plan_model_free(&m);
        return CHECK_NO_RANKS;
    }
    /* every parameter; under LoRA the trainable ones must match too (PEFT's count) */
    c->params = exact((double)(plan_model_params(&m) + plan_model_frozen(&m)),
                      cli_harness_num(cJSON_GetObjectItem(h, "model"), "params", -1));
    c->params.ok = c->params.predicted == c->params.measured;
    double mtrain = cli_harness_num(cJSON_GetObjectItem(h, "model"), "trainable_params", -1);
    if (mtrain >= 0 && (double)plan_model_params(&m) != mtrain) {
        fprintf(stderr, "memplan: %s: trainable parameters %.0f planned, %.0f measured\n", c->strategy,
                (double)plan_model_params(&m), mtrain);
        c->params.ok = 0;
    }
    /* the split the walk charges (DeepSpeed's fp32 copy, gradient buffers and norm scalar,
       ZeRO-3's persistent tensors); torch Adam's step scalars live in host memory, which on
       CPU ranks is where everything is */
    const double pstates[STATE_COUNT] = {mr.ms_params, mr.ms_grads, mr.ms_optimizer + mr.opt_host_bytes};
    c->pass = c->params.ok;
    for (int i = 0; i < STATE_COUNT; i++) {
        c->states[i] = exact(pstates[i], mstates[i]);
        c->pass &= c->states[i].ok;
    }
    check_peak(c, &mr, top, mpeak, mupper);
    c->pass &= c->peak.ok & c->phase_ok;
    if (trace && access(trace, R_OK) == 0)
        check_reserved(c, &st, trace, alloc_out, name);   /* said on stderr if not */
    plan_step_free(&st);
    if (check_collectives(c, s, h, &m, &t, &ms, &cp)) {
        fprintf(stderr, "memplan: out of memory comparing %s\n", c->strategy);
        plan_model_free(&m);
        return CHECK_NO_MODEL;
    }
    plan_model_free(&m);
    return CHECKED;
}

static void torch_check_free(TorchCheck *c)
{
    free(c->colls);
    c->colls = NULL;
}

/* ---- the table and the JSON record of one check ---- */

/* A figure with thousands separators; beyond what a long long holds (a prediction can be), in
 * e-notation. */
static const char *fmt_figure(double v, char *buf, size_t len)
{
    if (fabs(v) < 9e18) return plan_fmt_count(llround(v), buf, len);
    snprintf(buf, len, "%.6g", v);
    return buf;
}

/* Calls fn for every row of a check, in the table's order, with its label and quantity (NULL
 * for the peak phase row, which compares names): the table and the closing failure line walk
 * the same rows. */
typedef void (*RowFn)(void *ctx, const TorchCheck *c, const char *label, const Quantity *q);
static void each_row(const TorchCheck *c, RowFn fn, void *ctx)
{
    fn(ctx, c, "parameters (count)", &c->params);
    for (int i = 0; i < STATE_COUNT; i++) fn(ctx, c, STATE_ROWS[i].label, &c->states[i]);
    for (int i = 0; i < N_AT_PEAK; i++) fn(ctx, c, AT_PEAK[i].label, &c->at_peak[i]);
    fn(ctx, c, "peak (max over ranks)", &c->peak);
    if (c->show_upper) fn(ctx, c, "peak upper bound (gloo frees)", &c->upper);
    fn(ctx, c, "peak phase", NULL);
    if (c->has_reserved) {
        fn(ctx, c, "allocator: tensor peak", &c->reserved_tensors);
        fn(ctx, c, "allocator: max reserved", &c->reserved);
    }
    for (int i = 0; i < c->ncolls; i++) {
        const CollCheck *x = &c->colls[i];
        char q[64];
        if (x->planned) {
            snprintf(q, sizeof q, "%s %s count", x->op, x->phase);
            fn(ctx, c, q, &x->count);
        }
        snprintf(q, sizeof q, "%s %s bytes", x->op, x->phase);
        fn(ctx, c, q, &x->payload);
    }
}

static void print_row(void *ctx, const TorchCheck *c, const char *label, const Quantity *q)
{
    FILE *f = ctx;
    char a[32], b[32], e[32], chk[96];
    if (!q) {
        fprintf(f, "%-13s %-30s %16s %16s %9s %s\n", c->strategy, label, phase_name(c->predicted_phase),
                c->measured_phase, "", c->phase_ok ? "ok (same phase)" : "FAIL (different phase)");
        return;
    }
    const char *v = q->ok ? VERDICTS[q->rule].ok : VERDICTS[q->rule].fail;
    if (q->rule == RULE_TOLERANCE) {
        snprintf(chk, sizeof chk, "%s (within %.3g%%)", v, 100 * c->tol);
        v = chk;
    }
    fprintf(f, "%-13s %-30s %16s %16s %9s %s\n", c->strategy, label, fmt_figure(q->predicted, a, sizeof a),
            fmt_figure(q->measured, b, sizeof b),
            plan_fmt_rel_err(plan_rel_err(q->predicted, q->measured), e, sizeof e), v);
}

/* The rows of one check, after the header if it is the first (*header). */
static void torch_print(FILE *f, const TorchCheck *c, int *header)
{
    if (!*header) {
        fprintf(f, "%-13s %-30s %16s %16s %9s %s\n", "strategy", "quantity", "predicted", "measured", "rel_err", "check");
        fprintf(f, "%-13s %-30s %16s %16s %9s %s\n", "-", "-", "bytes", "bytes", "%", "-");
        *header = 1;
    }
    each_row(c, print_row, f);
    fprintf(f, "# %s: %s; predicted peak at %s, measured in %s of %s on rank %.0f; %s\n", c->strategy,
            c->implementation, c->predicted_at, c->measured_phase, c->measured_module, c->measured_rank,
            c->pass ? "pass" : "FAIL");
}

/* Room for the failed rows' labels, ", "-separated (a full buffer ends in "..."). */
typedef struct {
    char *buf;
    size_t len;
} RowList;

static void list_append(RowList *l, const char *sep, const char *text)
{
    size_t used = strlen(l->buf);
    if (used + 4 >= l->len) return;   /* already cut */
    int n = snprintf(l->buf + used, l->len - used, "%s%s", used ? sep : "", text);
    if (n < 0 || (size_t)n >= l->len - used) snprintf(l->buf + l->len - 4, 4, "...");
}

/* A row that fails the check (counts and the split at the peak are reported, never failed). */
static void add_failed_row(void *ctx, const TorchCheck *c, const char *label, const Quantity *q)
{
    char item[128];
    if (q ? q->ok || q->rule == RULE_CALLS || q->rule == RULE_REPORTED || q->rule == RULE_RESERVED : c->phase_ok) return;
    if (q && q->rule == RULE_TOLERANCE)
        snprintf(item, sizeof item, "%s %+.2f%% (tolerance %.3g%%)", label, 100 * plan_rel_err(q->predicted, q->measured),
                 100 * c->tol);
    else
        snprintf(item, sizeof item, "%s", label);
    list_append(ctx, ", ", item);
}

static cJSON *pm_json(const Quantity *q)
{
    cJSON *o = cJSON_CreateObject();
    cJSON_AddNumberToObject(o, "predicted", q->predicted);
    cJSON_AddNumberToObject(o, "measured", q->measured);
    return o;
}

/* One check as a record of the --json output (docs/json.md). */
static cJSON *torch_json(const TorchCheck *c)
{
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "strategy", c->strategy);
    cJSON_AddStringToObject(o, "implementation", c->implementation);
    cJSON_AddStringToObject(o, "model", c->model);
    cJSON_AddItemToObject(o, "params", pm_json(&c->params));
    cJSON *msj = cJSON_AddObjectToObject(o, "model_states");
    for (int i = 0; i < STATE_COUNT; i++) cJSON_AddItemToObject(msj, STATE_ROWS[i].key, pm_json(&c->states[i]));
    cJSON *cats = cJSON_AddArrayToObject(o, "memory_at_peak");
    for (int i = 0; i < N_AT_PEAK; i++) {
        cJSON *q = pm_json(&c->at_peak[i]);
        cJSON_AddStringToObject(q, "category", AT_PEAK[i].key);
        cJSON_AddItemToArray(cats, q);
    }
    cJSON *pk = cJSON_AddObjectToObject(o, "peak");
    cJSON_AddNumberToObject(pk, "predicted_bytes", c->peak.predicted);
    cJSON_AddNumberToObject(pk, "measured_bytes", c->peak.measured);
    cJSON_AddStringToObject(pk, "predicted_phase", phase_name(c->predicted_phase));
    cJSON_AddStringToObject(pk, "measured_phase", c->measured_phase);
    cJSON_AddStringToObject(pk, "predicted_at", c->predicted_at);
    cJSON_AddStringToObject(pk, "measured_module", c->measured_module);
    cJSON_AddNumberToObject(pk, "measured_rank", c->measured_rank);
    if (c->has_reserved) {
        cJSON *rv = cJSON_AddObjectToObject(o, "reserved");
        cJSON_AddNumberToObject(rv, "planned_bytes", c->reserved.predicted);
        cJSON_AddNumberToObject(rv, "recorded_bytes", c->reserved.measured);
        cJSON_AddNumberToObject(rv, "planned_tensor_peak_bytes", c->reserved_tensors.predicted);
        cJSON_AddNumberToObject(rv, "recorded_tensor_peak_bytes", c->reserved_tensors.measured);
        cJSON_AddNumberToObject(rv, "planned_segments", c->planned_segments);
        cJSON_AddNumberToObject(rv, "recorded_segments", c->recorded_segments);
        cJSON_AddNumberToObject(rv, "tolerance", ALLOC_TOL);
        cJSON_AddBoolToObject(rv, "within_tolerance", c->reserved.ok);
    }
    cJSON *colls = cJSON_AddArrayToObject(o, "collectives_per_step");
    for (int i = 0; i < c->ncolls; i++) {
        const CollCheck *x = &c->colls[i];
        cJSON *y = cJSON_CreateObject();
        cJSON_AddStringToObject(y, "op", x->op);
        cJSON_AddStringToObject(y, "phase", x->phase);
        cJSON_AddNumberToObject(y, "predicted_count", x->count.predicted);
        cJSON_AddNumberToObject(y, "measured_count", x->count.measured);
        cJSON_AddNumberToObject(y, "predicted_payload_bytes", x->payload.predicted);
        cJSON_AddNumberToObject(y, "measured_payload_bytes", x->payload.measured);
        cJSON_AddItemToArray(colls, y);
    }
    cJSON_AddBoolToObject(o, "pass", c->pass);
    return o;
}

/* ---- the command ---- */

/* How the strategies went, over the command; failed: the comparisons that failed and their
 * rows, for the closing line on standard error. */
typedef struct {
    int all_pass, header, versions, runs, failed_runs;
    char failed[1024];
} Tally;

/* One strategy: prints its rows, appends its JSON record to arr and counts it in t (source: the
 * --measured file it came from, or NULL). */
static void compare(FILE *f, const HarnessSetup *s, const cJSON *h, double tol, cJSON *arr, Tally *t, const char *source,
                    const char *trace, const char *alloc_out)
{
    TorchCheck c;
    t->runs++;
    char name[PATH_MAX];
    const char *base = source ? strrchr(source, '/') : NULL;
    snprintf(name, sizeof name, "%s", source ? (base ? base + 1 : source) : plan_strategy(s->strategy)->name);
    size_t nl = strlen(name);
    if (nl > 5 && !strcmp(name + nl - 5, ".json")) name[nl - 5] = 0;
    if (torch_check(s, h, tol, trace, alloc_out, name, &c) != CHECKED) {   /* said on stderr */
        t->all_pass = 0;
        t->failed_runs++;
        return;
    }
    torch_print(f, &c, &t->header);
    cJSON_AddItemToArray(arr, torch_json(&c));
    if (!c.pass) {
        char rows[512] = "", item[PATH_MAX + 640];
        each_row(&c, add_failed_row, &(RowList){rows, sizeof rows});
        snprintf(item, sizeof item, "%s%s%s (%s)", source ? source : "", source ? " " : "", c.strategy, rows);
        list_append(&(RowList){t->failed, sizeof t->failed}, "; ", item);
    }
    t->all_pass &= c.pass;
    torch_check_free(&c);
}

static void echo_versions(FILE *f, const cJSON *h, int *shown)
{
    if (*shown) return;
    const cJSON *v = cJSON_GetObjectItem(h, "versions");
    fprintf(f, "# measured: torch %s, transformers %s, deepspeed %s; %s\n", cli_harness_str(v, "torch", "?"),
            cli_harness_str(v, "transformers", "?"), cli_harness_str(v, "deepspeed", "-"),
            cli_harness_str(h, "measured_by", "?"));
    *shown = 1;
}

/* With --measured the setup comes from each file: only these flags apply. A token is taken as
 * the flag it abbreviates (getopt_long takes unambiguous prefixes, and no other option's name is
 * a prefix of one of these, so a token that parsed and is a prefix of one of them is that one). */
static const char *const MEASURED_FLAGS[] = {"against", "measured", "tol", "json", "alloc-out", "help"};

/* 0, or 2 after naming the first flag given besides MEASURED_FLAGS. Called after a successful
 * parse: every token that starts with "--" (before a "--") is then an option, since the parser
 * refuses values that start with "--". */
static int measured_flags_only(int argc, char **argv)
{
    for (int i = 1; i < argc && strcmp(argv[i], "--") != 0; i++) {
        if (strncmp(argv[i], "--", 2) != 0) continue;
        const char *name = argv[i] + 2;
        int n = (int)strcspn(name, "="), ok = 0;
        for (size_t k = 0; k < sizeof MEASURED_FLAGS / sizeof MEASURED_FLAGS[0]; k++)
            ok |= n > 0 && strncmp(MEASURED_FLAGS[k], name, (size_t)n) == 0;
        if (!ok)
            return cli_usage_error("--%.*s does not apply with --measured: the model and setup come from the result file "
                                   "(valid with --measured: --tol, --json[=FILE], --alloc-out DIR)", n, name);
    }
    return 0;
}

/* Shared planning flags that do not apply to a run on CPU ranks, with the one value each may
 * still take (NULL: none) and why: torchrun starts --ranks N processes on this host, the
 * prediction zeroes the GPU overheads (CPU ranks have none) and no time is compared. */
static const struct {
    const char *flag, *same, *why;
} NOT_ON_CPU_RANKS[] = {
    {"gpus", NULL, "torchrun starts --ranks N CPU ranks (default 2)"},
    {"gpus-per-node", NULL, "the CPU ranks run on this one host"},
    {"gpu", NULL, "there is no GPU preset to a CPU rank"},
    {"gpu-mem", NULL, "a CPU rank has no device memory"},
    {"cuda-context", NULL, "the prediction zeroes the GPU overheads (CPU ranks have none)"},
    {"cublas-ws", NULL, "the prediction zeroes the GPU overheads (CPU ranks have none)"},
    {"nccl-mem", NULL, "the prediction zeroes the GPU overheads (gloo on CPU ranks)"},
    {"alloc-margin", NULL, "the prediction zeroes the caching allocator's margin (CPU ranks have none)"},
    {"mfu", NULL, "no time is compared"}, {"intra-bw", NULL, "no time is compared"},
    {"inter-bw", NULL, "no time is compared"}, {"nics", NULL, "no time is compared"}, {"latency", NULL, "no time is compared"},
    {"autocast", "cpu", "the CPU ranks run CPU autocast's op lists (valid: cpu)"},
    {"quant-base", "none", "the harness loads no bitsandbytes base (a quantized base is planned, not run)"},
    {"moe-imbalance", "1", "the harness cannot force a routing imbalance (it is planned, not run)"},
};

/* 0, or 2 after naming the first shared flag given that does not apply to CPU ranks. */
static int cpu_rank_flags_only(const CliSetup *cs)
{
    for (size_t i = 0; i < sizeof NOT_ON_CPU_RANKS / sizeof NOT_ON_CPU_RANKS[0]; i++) {
        const char *v = cli_setup_given(cs, NOT_ON_CPU_RANKS[i].flag);
        if (!v || (NOT_ON_CPU_RANKS[i].same && strcmp(v, NOT_ON_CPU_RANKS[i].same) == 0)) continue;
        return cli_usage_error("--%s%s%s%s does not apply to validate --against torch, which runs on CPU ranks: %s; drop it",
                               NOT_ON_CPU_RANKS[i].flag, *v ? " '" : "", v, *v ? "'" : "", NOT_ON_CPU_RANKS[i].why);
    }
    return 0;
}

/* Parses argv into cs and o. 0 to go on; 1 after --help (exit 0); else the exit status of a
 * usage error, with cs freed. */
static int torch_args(int argc, char **argv, CliSetup *cs, TorchOpts *o, int *measured_mode)
{
    memset(o, 0, sizeof *o);
    o->ranks = 2;
    o->steps = 3;
    o->tol = 0.03;
    o->bucket_mb = 0;   /* not passed: DDP's own buckets */
    o->timeout_s = 1800;
    for (int i = 1; i < argc; i++)
        if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) { print_help(stdout); return 1; }
    *measured_mode = 0;
    for (int i = 1; i < argc; i++)
        if (strcmp(argv[i], "--measured") == 0 || strncmp(argv[i], "--measured=", 11) == 0) *measured_mode = 1;
    CliExtra extra = {TORCH_OPTIONS, torch_opt, o, 0};
    int rc = cli_parse_setup(argc, argv, "validate", cs, &extra, !*measured_mode);
    if (rc == 1) { print_help(stdout); return 1; }
    if (rc) return rc;
    if (!o->against) rc = cli_usage_error("validate: this path needs --against torch");
    else rc = *measured_mode ? measured_flags_only(argc, argv) : cpu_rank_flags_only(cs);
    if (rc) cli_setup_free(cs);
    return rc;
}

/* Why the harness cannot run this setup, or NULL (msg: room for the sentence). */
static const char *refusal(const CliSetup *cs, int from_file, char *msg, size_t len)
{
    int prec_ok = 0;
    for (size_t i = 0; i < sizeof HARNESS_PRECISIONS / sizeof HARNESS_PRECISIONS[0]; i++)
        prec_ok |= cs->train.precision == HARNESS_PRECISIONS[i];
    if (!prec_ok) {
        snprintf(msg, len, "--precision %s does not run on CPU ranks (valid with --against torch: " HARNESS_PRECISION_NAMES ")",
                 plan_precision(cs->train.precision)->name);
        return msg;
    }
    if (cs->train.optimizer != OPT_ADAMW) return "--against torch trains with AdamW (valid --optimizer: adamw)";
    if (cs->train.impl != IMPL_PYTORCH) return "--against torch checks the PyTorch layout (valid --impl: pytorch)";
    if (cs->train.syncbn) return "--syncbn is not run by the torch harness yet (use memplan bench syncbn)";
    if (from_file && strchr(cs->model.source, '\'')) return "the model path contains a quote";
    const ZooEntry *ze = from_file || !cs->model_arg ? NULL : plan_zoo_find(cs->model_arg);
    if (ze && plan_zoo_from_config(ze)) {   /* the harness knows the shape-table models by name only */
        snprintf(msg, len, "--against torch takes %s as its config file: --model tests/data/hf/%s.json", ze->name, ze->config);
        return msg;
    }
    if (cs->model.arch == ARCH_GENERIC)
        return "--against torch needs a real model (a zoo name or a Hugging Face config.json), not --params or params.json";
    return NULL;
}

/* The setup every strategy runs with, from the flags. 0, or 2 after a usage error. */
static int base_setup(const CliSetup *cs, const TorchOpts *o, int from_file, HarnessSetup *base)
{
    char msg[256];
    const char *why = refusal(cs, from_file, msg, sizeof msg);
    if (why) return cli_usage_error("%s", why);
    if ((cs->strategies & (1u << STRAT_FSDP_HYBRID)) && o->ranks < 2)
        return cli_usage_error("--ranks %lld: fsdp-hybrid needs at least 2 ranks (valid: --ranks 2 or more, or a --strategy list without fsdp-hybrid)", o->ranks);
    long long group = o->shard_group ? o->shard_group : (o->ranks >= 2 ? o->ranks / 2 : 1);
    if ((cs->strategies & (1u << STRAT_FSDP_HYBRID)) && o->ranks % group)
        return cli_usage_error("--shard-group %lld does not divide --ranks %lld", group, o->ranks);
    int tp = plan_tp_degree(&cs->train);
    if (tp > 1 && o->ranks % tp)
        return cli_usage_error("--tp %d does not divide --ranks %lld (the harness's 2-D mesh is ranks / tp x tp)", tp, o->ranks);
    if (tp > 1 && cs->have_model) {   /* the harness's ranks are the cluster: one node of --ranks */
        ClusterSpec rc;
        plan_cluster_defaults(&rc);
        rc.gpus = rc.gpus_per_node = o->ranks;
        char tpmsg[320];
        for (int k = 0; k < STRAT_COUNT; k++)
            if ((cs->strategies & (1u << k)) && plan_tp_check(&cs->model, &cs->train, &rc, (StrategyKind)k, tpmsg, sizeof tpmsg))
                return cli_usage_error("%s", tpmsg);
    }
    /* the harness's tensor parallel is torch's with DDP or FSDP2; DeepSpeed's ZeRO beside it is
       planned (plan_tp_strategies), an estimate no CPU-rank run checks */
    const unsigned harness_tp = (1u << STRAT_DDP) | (1u << STRAT_FSDP_FULL);
    for (int k = 0; tp > 1 && k < STRAT_COUNT; k++)
        if ((cs->strategies & (1u << k)) && !(harness_tp & (1u << k)))
            return cli_usage_error("--tp %d with --strategy %s: the torch harness runs tensor parallel with ddp and "
                                   "fsdp-full; plan %s under --tp with 'memplan plan' (an estimate)", tp,
                                   plan_strategy((StrategyKind)k)->name, plan_strategy((StrategyKind)k)->name);
    if (tp > 1 && (cs->strategies & (1u << STRAT_FSDP_FULL)) && o->ranks == tp)
        return cli_usage_error("--tp %d with fsdp-full shards on the data-parallel dimension: give --ranks %d or more "
                               "(ranks / tp > 1), or --strategy ddp for pure tensor parallel", tp, 2 * tp);
    if (tp > 1 && (cs->strategies & (1u << STRAT_DDP)) && o->ranks != tp)
        return cli_usage_error("--tp %d with ddp runs pure tensor parallel in the harness: give --ranks %d, or "
                               "--strategy fsdp-full for tp x fsdp on %lld ranks", tp, tp, o->ranks);
    memset(base, 0, sizeof *base);
    snprintf(base->model, sizeof base->model, "%s", from_file ? cs->model.source : cs->model.name);
    base->ranks = o->ranks;
    base->batch = cs->train.micro_batch;
    base->seq = cs->train.seq > 0 ? cs->train.seq : cs->model.arch == ARCH_CNN ? cs->model.image_size : cs->model.max_seq;
    base->accum = cs->train.grad_accum;
    base->steps = o->steps;
    base->precision = cs->train.precision;
    base->ckpt = cs->train.act_ckpt;
    base->ckpt_every = cs->train.ckpt_every;
    base->attn = cs->train.attn;
    base->dropout = cs->train.dropout >= 0 ? cs->train.dropout : cs->model.dropout;
    base->bucket_mb = o->bucket_mb;
    base->gabv = cs->train.grad_as_bucket_view;
    base->shard_group = group;
    base->zero_grad_keep = cs->train.zero_grad_keep;
    base->loop_trainer = cs->train.loop_trainer;
    base->fsdp_sync = cs->train.fsdp_grad_sync;
    base->ds = cs->train.ds;
    base->tp = tp;
    base->sp = cs->train.sp;
    base->loss_parallel = cs->train.loss_parallel;
    base->ep = plan_ep_degree(&cs->train);
    base->moe_skewed = base->ep > 1 && cs->train.moe_imbalance >= base->ep;
    base->ft = cs->train.ft;
    base->fsdp_impl = cs->train.fsdp_impl;
    base->fsdp1 = cs->train.fsdp1;
    return 0;
}

/* ---- host memory, before a run ---- */

/* What a rank holds besides its tensors, and torchrun's agent process once per run (proportional
 * set sizes measured on gpt2-tiny, whose tensors are a few MiB: ranks 611-738 MiB, the agent 371
 * MiB; docs/validation-torch.md "Host memory"). Lower bounds: a refused run could not have fit. */
#define RANK_PROCESS_BYTES (600 * MIB)
#define AGENT_BYTES (350 * MIB)

/* The memory this process may still use, bytes: MemAvailable, or less under a cgroup v2 limit;
 * -1 when /proc/meminfo cannot say. */
static double host_available(void)
{
    double avail = -1, kib, lim, cur;
    char line[256];
    FILE *f = fopen("/proc/meminfo", "r");
    while (f && fgets(line, sizeof line, f))
        if (sscanf(line, "MemAvailable: %lf kB", &kib) == 1) avail = kib * 1024;
    if (f) fclose(f);
    f = fopen("/sys/fs/cgroup/memory.max", "r");   /* "max" when unlimited */
    int limited = f && fscanf(f, "%lf", &lim) == 1;
    if (f) fclose(f);
    f = fopen("/sys/fs/cgroup/memory.current", "r");
    if (limited && f && fscanf(f, "%lf", &cur) == 1 && avail >= 0 && lim - cur < avail) avail = lim - cur;
    if (f) fclose(f);
    return avail;
}

/* Refuses, before launching anything, a run this host cannot hold: each rank needs at least the
 * larger of its predicted peak and the fp32 model, which the harness builds whole on every rank
 * before it shards it (bench/torch/models.py), plus the process (RANK_PROCESS_BYTES); the
 * strategies run one after another. 0, or 2 after one line with the figures. */
static int check_host_memory(const CliSetup *cs, const HarnessSetup *base)
{
    double avail = host_available(), model = 4.0 * (double)plan_model_params(&cs->model), need = 0, peak = 0;
    const char *worst = NULL;
    for (int k = 0; k < STRAT_COUNT && avail >= 0; k++) {
        if (!(cs->strategies & (1u << k))) continue;
        HarnessSetup s = *base;
        s.strategy = (StrategyKind)k;
        TrainSpec t;
        ClusterSpec c;
        MemResult mr;
        plan_inputs(&s, &t, &c);
        plan_memory(&cs->model, &t, &c, s.strategy, &mr);
        double n = (double)s.ranks * (fmax(mr.peak, model) + RANK_PROCESS_BYTES) + AGENT_BYTES;
        if (n > need) need = n, peak = mr.peak, worst = plan_strategy(s.strategy)->name;
    }
    if (!worst || need <= avail) return 0;
    char a[32], b[32], m[32], p[32];
    return cli_usage_error("validate --against torch: %s on %lld CPU ranks needs at least %s of host memory, and %s is "
                           "available (MemAvailable): per rank the larger of the predicted peak, %s, and the fp32 model "
                           "the harness builds on every rank, %s, + %.0f MiB for Python and torch, + %.0f MiB for torchrun; "
                           "give fewer --ranks, a smaller --batch or --seq, or a smaller model",
                           worst, base->ranks, plan_fmt_bytes(need, a, sizeof a), plan_fmt_bytes(avail, b, sizeof b),
                           plan_fmt_bytes(peak, p, sizeof p), plan_fmt_bytes(model, m, sizeof m),
                           RANK_PROCESS_BYTES / MIB, AGENT_BYTES / MIB);
}

/* --json=FILE checked before any work, without touching it: never a model or a measured input.
 * 0, or 2 after a usage error. */
static int check_json_path(const CliSetup *cs, const TorchOpts *o, int from_file)
{
    if (!cs->json_path) return 0;
    char err[PATH_MAX + 256];
    const char *inputs[MAX_MEASURED + 1];
    int n_in = 0;
    for (int i = 0; i < o->n_measured; i++) inputs[n_in++] = o->measured[i];
    if (from_file) inputs[n_in++] = cs->model.source;
    if (cli_check_output("--json", cs->json_path, inputs, n_in, err, sizeof err)) return cli_usage_error("%s", err);
    return 0;
}

/* --keep DIR checked before any work: a folder that exists or can be made, that memplan can
 * write in, and where no strategy's result or log (DIR/<strategy>.json, .log) would land on the
 * model file or the --json output. The folder is made here. 0, or 2 after a usage error. */
static int check_keep(const CliSetup *cs, const TorchOpts *o, int from_file)
{
    struct stat st;
    if (mkdir(o->keep, 0755) && errno != EEXIST)
        return cli_usage_error("--keep '%s': cannot create the folder: %s", o->keep, strerror(errno));
    if (stat(o->keep, &st) || !S_ISDIR(st.st_mode))
        return cli_usage_error("--keep '%s' is not a folder: give a folder for each strategy's result and log", o->keep);
    if (access(o->keep, W_OK | X_OK))
        return cli_usage_error("--keep '%s': cannot write in the folder: %s", o->keep, strerror(errno));
    for (int k = 0; k < STRAT_COUNT; k++) {
        if (!(cs->strategies & (1u << k))) continue;
        for (int log = 0; log < 2; log++) {
            char path[PATH_MAX + 64];
            snprintf(path, sizeof path, "%s/%s.%s", o->keep, plan_strategy((StrategyKind)k)->name, log ? "log" : "json");
            const char *clash = from_file && cli_same_file(path, cs->model.source) ? "the model file"
                              : cli_same_file(path, cs->json_path)                 ? "the --json output" : NULL;
            if (clash)
                return cli_usage_error("--keep '%s' would write '%s' over %s: give another folder", o->keep, path, clash);
        }
    }
    return 0;
}

/* --alloc-out DIR: a folder memplan can write in, checked before any work. 0, or 2 after one line. */
static int check_alloc_out(const TorchOpts *o)
{
    struct stat st;
    if (!o->alloc_out) return 0;
    if (stat(o->alloc_out, &st) || !S_ISDIR(st.st_mode))
        return cli_usage_error("--alloc-out '%s' is not a folder: give one for the planned allocation sequences", o->alloc_out);
    if (access(o->alloc_out, W_OK | X_OK))
        return cli_usage_error("--alloc-out '%s': cannot write in the folder: %s", o->alloc_out, strerror(errno));
    return 0;
}

/* The harness's environment and the directory its files go to (--keep, else a temporary one).
 * 0; 2 after a usage error; 1 after another error. */
static int prepare_runs(const CliSetup *cs, const TorchOpts *o, int from_file, HarnessEnv *env, char *dir, size_t len)
{
    char err[2 * PATH_MAX + 256];
    if (cli_harness_locate(env, err, sizeof err)) return cli_usage_error("%s", err);
    if (o->keep) {
        int rc = check_keep(cs, o, from_file);
        if (!rc) snprintf(dir, len, "%s", o->keep);
        return rc;
    }
    const char *tmp = getenv("TMPDIR");
    snprintf(dir, len, "%s/memplan-torch-XXXXXX", tmp && *tmp ? tmp : "/tmp");
    if (!mkdtemp(dir)) { fprintf(stderr, "memplan: cannot create a temporary directory\n"); return 1; }
    return 0;
}

/* The setup's checkpointing as --act-ckpt spells it ("every:2"). */
static const char *ckpt_label(const HarnessSetup *s, char *buf, size_t len)
{
    TrainSpec t;
    plan_train_defaults(&t);
    t.act_ckpt = s->ckpt;
    t.ckpt_every = s->ckpt_every;
    return plan_ckpt_label(&t, buf, len);
}

/* ", fsdp 1 (...)" naming FSDP1's knobs, or "" for FSDP2 (the lines stay as they were). */
static const char *fsdp1_label(const HarnessSetup *s, char *buf, size_t len)
{
    buf[0] = 0;
    if (s->fsdp_impl != 1) return buf;
    char wrap[48] = "blocks";
    if (s->fsdp1.min_params > 0) snprintf(wrap, sizeof wrap, "min-params %.0f", s->fsdp1.min_params);
    snprintf(buf, len, ", fsdp 1 (%s, backward-prefetch %s, forward-prefetch %s, limit-all-gathers %s)", wrap,
             plan_fsdp_bwd_name(s->fsdp1.bwd), s->fsdp1.fwd ? "on" : "off", s->fsdp1.no_limit ? "off" : "on");
    return buf;
}

static void echo_run(FILE *out, const CliSetup *cs, const HarnessSetup *b)
{
    char strategies[128] = "";
    for (int k = 0; k < STRAT_COUNT; k++)
        if (cs->strategies & (1u << k))
            snprintf(strategies + strlen(strategies), sizeof strategies - strlen(strategies), "%s%s", *strategies ? "," : "", plan_strategy((StrategyKind)k)->name);
    fprintf(out, "# validate --against torch: model %s, %lld CPU ranks (gloo), strategies %s\n", b->model, b->ranks, strategies);
    fprintf(out, "# train: micro-batch %lld, seq %lld, grad-accum %lld, precision %s, adamw, act-ckpt %s, attn %s, dropout %g, "
                 "steps %lld (steady state 2..%lld), loop %s, zero_grad %s, fsdp-grad-sync %s%s\n",
            b->batch, b->seq, b->accum, plan_precision(b->precision)->name, ckpt_label(b, (char[24]){0}, 24),
            plan_attn_name(b->attn), b->dropout, b->steps, b->steps, cli_harness_loop_name(b->loop_trainer),
            cli_harness_zero_grad_name(b->zero_grad_keep), plan_fsdp_sync_name(b->fsdp_sync),
            fsdp1_label(b, (char[160]){0}, 160));
}

/* A --measured file, read and checked before any work. */
typedef struct {
    const char *path;
    cJSON *h;
    HarnessSetup s;   /* the setup it was measured with, when the run finished */
} Measured;

static void free_measured(Measured *m, int n)
{
    for (int i = 0; m && i < n; i++) cJSON_Delete(m[i].h);
    free(m);
}

/* Every --measured file read and checked before any work: one that is missing, a folder, empty,
 * not JSON, not a harness result, or holds a value the command line would refuse is a usage
 * error. The files (free_measured), or NULL after one line with *rc the exit status. */
static Measured *load_measured(const TorchOpts *o, int *rc)
{
    TorchOpts scratch;   /* the flags' parsers, to range-check the setups' values */
    CliExtra flags = {TORCH_OPTIONS, torch_opt, &scratch, 0};
    Measured *m = calloc((size_t)o->n_measured, sizeof *m);
    if (!m) {
        fprintf(stderr, "memplan: out of memory reading the --measured files\n");
        *rc = 1;
        return NULL;
    }
    for (int i = 0; i < o->n_measured; i++) {
        char err[PATH_MAX + 768] = "";
        Measured *x = &m[i];
        x->path = o->measured[i];
        x->h = cli_harness_read(x->path, err, sizeof err);
        int unreadable = !x->h || cli_harness_check_shape(x->h, err, sizeof err);
        int bad_value = !unreadable && cli_harness_ok(x->h) &&
                        (cli_harness_check_values(x->h, &flags, err, sizeof err) ||
                         cli_harness_setup_of(x->h, &x->s, err, sizeof err));
        if (unreadable || bad_value) {   /* "'F' is empty", "'F': setup.seq 1e+09: ..." */
            *rc = cli_usage_error("--measured '%s'%s %s", x->path, bad_value ? ":" : "", err);
            free_measured(m, i + 1);
            return NULL;
        }
    }
    return m;
}

/* --measured: each saved result against the plan of its own setup. */
static void check_measured(FILE *out, const TorchOpts *o, const Measured *m, cJSON *arr, Tally *t)
{
    for (int i = 0; i < o->n_measured; i++) {
        const HarnessSetup *s = &m[i].s;
        if (!cli_harness_ok(m[i].h)) {
            fprintf(stderr, "memplan: --measured '%s': the run failed: %s\n", m[i].path, cli_harness_str(m[i].h, "error", "?"));
            t->all_pass = 0;
            t->failed_runs++;
            continue;
        }
        echo_versions(out, m[i].h, &t->versions);
        char sync[48] = "";
        if (s->accum > 1) snprintf(sync, sizeof sync, " (fsdp-grad-sync %s)", plan_fsdp_sync_name(s->fsdp_sync));
        fprintf(out, "# %s: model %s, %lld ranks, micro-batch %lld, seq %lld, accum %lld%s, %s, act-ckpt %s, attn %s, dropout %g%s\n",
                m[i].path, s->model, s->ranks, s->batch, s->seq, s->accum, sync,
                plan_precision(s->precision)->name, ckpt_label(s, (char[24]){0}, 24), plan_attn_name(s->attn), s->dropout,
                fsdp1_label(s, (char[160]){0}, 160));
        char trace[PATH_MAX + 32];
        trace_of(m[i].path, trace, sizeof trace);
        compare(out, s, m[i].h, o->tol, arr, t, m[i].path, trace, o->alloc_out);
    }
}

/* Each strategy run in the harness and checked against its plan. */
static void check_runs(FILE *out, const CliSetup *cs, const TorchOpts *o, const HarnessSetup *base,
                       const HarnessEnv *env, const char *dir, cJSON *arr, Tally *t)
{
    int keep_dir = 0;
    for (int k = 0; k < STRAT_COUNT; k++) {
        if (!(cs->strategies & (1u << k))) continue;
        HarnessSetup s = *base;
        s.strategy = (StrategyKind)k;
        const char *sn = plan_strategy(s.strategy)->name;
        char path[PATH_MAX + 64], log[PATH_MAX + 64], err[PATH_MAX + 256];
        snprintf(path, sizeof path, "%s/%s.json", dir, sn);
        snprintf(log, sizeof log, "%s/%s.log", dir, sn);
        snprintf(s.alloc_trace, sizeof s.alloc_trace, "%s/%s.trace.txt", dir, sn);   /* its allocations */
        fprintf(stderr, "# running %s on %lld CPU ranks (torchrun's output: %s) ...\n", sn, s.ranks, log);
        double ran_s = 0;
        cJSON *h = cli_harness_run(env, &s, path, log, o->timeout_s, &ran_s, err, sizeof err);
        if (!h) {
            keep_dir = 1;   /* the failed run's output stays where the message says */
            fprintf(stderr, "memplan: validate --against torch: %s did not run: %s\n", sn, err);
            cJSON *x = cJSON_CreateObject();
            cJSON_AddStringToObject(x, "strategy", sn);
            cJSON_AddStringToObject(x, "error", err);
            cJSON_AddBoolToObject(x, "pass", 0);
            cJSON_AddItemToArray(arr, x);
            t->all_pass = 0;
            t->failed_runs++;
            if (cli_harness_interrupted()) break;
            continue;
        }
        fprintf(stderr, "# %s ran in %.0f s\n", sn, ran_s);
        echo_versions(out, h, &t->versions);
        compare(out, &s, h, o->tol, arr, t, NULL, s.alloc_trace, o->alloc_out);
        cJSON_Delete(h);
        if (!o->keep) {
            unlink(path);
            unlink(log);
            unlink(s.alloc_trace);
        }
    }
    if (!o->keep && !keep_dir) rmdir(dir);
}

/* The --json document; 0, or 1 if it could not be written (one line says so). */
static int write_json(const CliSetup *cs, const TorchOpts *o, cJSON *arr, int all_pass)
{
    cJSON *j = cJSON_CreateObject();
    cJSON_AddStringToObject(j, "against", "torch");
    cJSON_AddNumberToObject(j, "tolerance", o->tol);
    cJSON_AddItemToObject(j, "strategies", arr);
    cJSON_AddBoolToObject(j, "pass", all_pass);
    char *txt = cJSON_Print(j);
    int rc = 0;
    if (!txt) { fprintf(stderr, "memplan: out of memory writing the JSON\n"); rc = 1; }
    else if (cli_write_text("the --json output", cs->json_path, txt)) rc = 1;   /* every write checked */
    free(txt);
    cJSON_Delete(j);
    return rc;
}

int cli_cmd_validate_torch(int argc, char **argv)
{
    TorchOpts o;
    CliSetup cs;
    int measured_mode;
    int rc = torch_args(argc, argv, &cs, &o, &measured_mode);
    if (rc) return rc == 1 ? 0 : rc;
    /* a model from a file (a zoo model goes by its name) */
    /* a model from a file: not a zoo name, or a zoo hub id at another --revision (the cache's file) */
    int from_file = cs.have_model && cs.model_arg && (!plan_zoo_has(cs.model_arg) || cli_setup_given(&cs, "revision"));
    HarnessSetup base;
    HarnessEnv env;
    char dir[PATH_MAX];
    Measured *measured = NULL;
    memset(&base, 0, sizeof base);
    /* everything a user can get wrong is found here, before any output: exit 2, one line */
    /* --tp without --strategy: the one the harness runs on these ranks (tp = ranks: pure TP, ddp;
       more ranks: tp x fsdp-full) */
    if (!measured_mode && plan_tp_degree(&cs.train) > 1 && !cli_setup_given(&cs, "strategy"))
        cs.strategies = 1u << (o.ranks == cs.train.tp ? STRAT_DDP : STRAT_FSDP_FULL);
    if (!measured_mode) rc = base_setup(&cs, &o, from_file, &base);
    if (!rc) rc = check_json_path(&cs, &o, from_file);
    if (!rc) rc = check_alloc_out(&o);
    if (!rc && measured_mode) measured = load_measured(&o, &rc);
    if (!rc && !measured_mode) rc = check_host_memory(&cs, &base);
    if (!rc && !measured_mode) rc = prepare_runs(&cs, &o, from_file, &env, dir, sizeof dir);
    if (rc) {
        cli_setup_free(&cs);
        return rc;
    }
    FILE *out = cs.json && !cs.json_path ? stderr : stdout;
    setvbuf(out, NULL, _IOLBF, 0);
    if (!measured_mode) echo_run(out, &cs, &base);
    fprintf(out, "# predicted: the planner's PyTorch layout with the overheads zeroed (CPU ranks: no CUDA context, "
                 "cuBLAS workspace, NCCL buffers or caching-allocator margin); peak tolerance %.3g%%\n", 100 * o.tol);

    cJSON *arr = cJSON_CreateArray();
    Tally t = {.all_pass = 1};
    if (measured_mode) check_measured(out, &o, measured, arr, &t);
    else check_runs(out, &cs, &o, &base, &env, dir, arr, &t);
    free_measured(measured, o.n_measured);
    fprintf(out, "# validate --against torch: %s (%d compared%s)\n", t.all_pass ? "pass" : "FAIL", t.runs,
            t.failed_runs ? ", some did not run" : "");
    if (t.failed[0]) fprintf(stderr, "memplan: validate --against torch: FAIL: %s\n", t.failed);
    rc = t.all_pass ? 0 : 1;
    if (cs.json) {
        if (write_json(&cs, &o, arr, t.all_pass)) rc = 1;
    } else {
        cJSON_Delete(arr);
    }
    if (fflush(stdout)) { fprintf(stderr, "memplan: cannot write to standard output\n"); rc = 1; }
    cli_setup_free(&cs);
    return rc;
}
