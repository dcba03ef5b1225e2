/* cli_torch.c — `memplan validate --against torch`: the planner's PyTorch layout checked against
 * real PyTorch / DeepSpeed. For each strategy the setup is planned (overheads zeroed: CPU ranks
 * have no CUDA context, NCCL buffers or caching allocator), the same setup runs in
 * bench/torch/harness.py under torchrun on CPU ranks (gloo), and predicted and measured figures
 * are printed side by side: parameters and model states exactly, the per-rank tensor peak within
 * a tolerance and at the same phase, the split at the peak, and every collective of one optimizer
 * step (payload bytes exactly). `--measured FILE` compares a saved harness result instead of
 * running one (the calibration matrix in docs/validation-torch.md is re-checked that way).
 * docs/validation-torch.md describes the harness and the rules. */
#include "cli_torch.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "cli_io.h"
#include "cli_setup.h"
#include "plan_comm.h"
#include "plan_load.h"
#include "plan_memory.h"
#include "plan_strategy.h"
#include "plan_util.h"
#include "plan_zoo.h"

#define MAX_MEASURED 256

/* One setup as the harness runs it (the names are the harness's flags). */
typedef struct {
    char model[PATH_MAX];    /* zoo name or config path, as the harness is given it */
    StrategyKind strategy;
    long long ranks, batch, seq, accum, steps, shard_group;
    PrecisionKind precision;
    CkptKind ckpt;
    AttnKind attn;
    double dropout, bucket_mb;
    int gabv;                /* gradient_as_bucket_view */
    char zero_grad[8];       /* none | zeros */
    char loop[8];            /* hf | common */
    FsdpSyncKind fsdp_sync;  /* fsdp-* under accumulation: every | last */
} TorchSetup;

typedef struct {
    int against;             /* --against torch given */
    long long ranks, steps, shard_group, timeout_s;
    double tol, bucket_mb;
    const char *keep;
    const char *measured[MAX_MEASURED];
    int n_measured;
} TorchOpts;

enum { OPT_AGAINST = 3000, OPT_RANKS, OPT_STEPS, OPT_TOL, OPT_BUCKET_MB,
       OPT_SHARD_GROUP, OPT_TIMEOUT, OPT_KEEP, OPT_MEASURED };
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
    {0, 0, 0, 0},
};

/* Precisions the harness runs on CPU ranks (a subset of the planner's). */
static const PrecisionKind HARNESS_PRECISIONS[] = {PREC_FP32, PREC_AMP_BF16, PREC_MIXED_BF16};
#define HARNESS_PRECISION_NAMES "fp32, amp-bf16, mixed-bf16"

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
        "tensor peak is within the tolerance and in the same phase.\n"
        "What runs: ddp = torch DDP; zero1/zero2/zero3 = DeepSpeed; fsdp-full/fsdp-grad-op/fsdp-hybrid =\n"
        "FSDP2 fully_shard (flat-parameter FSDP refuses CPU ranks in torch 2.15).\n\n"
        "Options (besides the plan flags --model, --strategy, --batch, --seq, --grad-accum, --precision,\n"
        "--act-ckpt, --attn, --dropout, --grad-as-bucket-view, --loop, --fsdp-grad-sync, --json[=FILE]; the prediction uses\n"
        "--autocast cpu and --fsdp 2, as the CPU ranks run):\n"
        "  --against torch       required: check against PyTorch (without it, validate checks memplan's engine)\n"
        "  --ranks N             CPU ranks torchrun starts (default 2)\n"
        "  --steps K             optimizer steps, K >= 2; steps 2..K are the steady state (default 3)\n"
        "  --tol PCT             peak tolerance in percent (default 3)\n"
        "  --loop common|trainer the training loop (a plan flag): common keeps `outputs` (the logits) alive\n"
        "                        through backward and the step (default), trainer (HF Trainer's) drops them\n"
        "  --zero-grad none|zeros zero_grad(set_to_none=True|False) (a plan flag; default none, PyTorch >= 2.0)\n"
        "  --bucket-mb X         DDP bucket_cap_mb, every bucket X MiB (default: not passed, DDP's own 25 MiB\n"
        "                        with a 1 MiB first bucket; passing it makes the first bucket X MiB too)\n"
        "  --shard-group G       fsdp-hybrid: shard inside groups of G ranks (default N/2)\n"
        "  --timeout S           seconds one strategy may run (default 1800)\n"
        "  --keep DIR            keep the harness's JSON and torchrun's output (.log) per strategy in DIR\n"
        "                        (without it a temporary directory; a failed run's output is kept and named)\n"
        "  --measured FILE       compare a saved harness result (repeatable); the setup comes from the file\n\n"
        "Precisions on CPU ranks: " HARNESS_PRECISION_NAMES "; optimizer: adamw.\n"
        "Needs PyTorch 2.15, transformers and DeepSpeed in a virtual environment: `make torch-env` installs them\n"
        "(about 5 GB) in ${MEMPLAN_TORCH_ENV:-~/.cache/memplan/torch-venv}; MEMPLAN_TORCH_ENV chooses another place.\n"
        "Exit status: 0 every row passes, 1 a row fails or a run failed, 2 usage error or no environment.\n");
}

/* ---- the environment ---- */

static int env_dir(char *out, size_t len)
{
    const char *e = getenv("MEMPLAN_TORCH_ENV");
    if (e && *e) return snprintf(out, len, "%s", e) >= (int)len ? -1 : 0;
    const char *x = getenv("XDG_CACHE_HOME"), *h = getenv("HOME");
    if (x && *x) return snprintf(out, len, "%s/memplan/torch-venv", x) >= (int)len ? -1 : 0;
    return snprintf(out, len, "%s/.cache/memplan/torch-venv", h && *h ? h : "/root") >= (int)len ? -1 : 0;
}

/* The harness beside this executable: <dir of exe>/../bench/torch/harness.py, unless
 * MEMPLAN_TORCH_HARNESS names one. */
static int harness_path(char *out, size_t len)
{
    const char *e = getenv("MEMPLAN_TORCH_HARNESS");
    if (e && *e) return snprintf(out, len, "%s", e) >= (int)len ? -1 : 0;
    char exe[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n <= 0) return -1;
    exe[n] = 0;
    char *slash = strrchr(exe, '/');
    if (!slash) return -1;
    *slash = 0;
    return snprintf(out, len, "%s/../bench/torch/harness.py", exe) >= (int)len ? -1 : 0;
}

/* ---- running the harness ---- */

static volatile sig_atomic_t g_stop;
static void on_signal(int sig) { g_stop = sig; }

static double now_s(void)   /* monotonic seconds */
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* Runs argv in its own process group, its stdout and stderr written to the file log (torchrun's
 * banners, the profiler's and transformers' notices: shown only when the run fails), for at most
 * timeout_s seconds. Returns the exit status, or -1 (timeout/signal/exec failure, in err). */
static int run_child(char *const argv[], const char *log, long long timeout_s, char *err, size_t errlen)
{
    fflush(stdout);
    fflush(stderr);
    int fd = open(log, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) { snprintf(err, errlen, "cannot write '%s': %s", log, strerror(errno)); return -1; }
    pid_t pid = fork();
    if (pid < 0) { close(fd); snprintf(err, errlen, "fork: %s", strerror(errno)); return -1; }
    if (pid == 0) {
        setpgid(0, 0);
        dup2(fd, STDOUT_FILENO);
        dup2(fd, STDERR_FILENO);
        execv(argv[0], argv);
        fprintf(stderr, "memplan: cannot start %s: %s\n", argv[0], strerror(errno));
        _exit(127);
    }
    close(fd);
    setpgid(pid, pid);
    struct sigaction sa, old_int, old_term;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigaction(SIGINT, &sa, &old_int);
    sigaction(SIGTERM, &sa, &old_term);
    g_stop = 0;
    struct timespec nap = {0, 50 * 1000 * 1000};
    double t0 = now_s();
    int status = 0, rc = -1, killed = 0;
    for (;;) {
        pid_t w = waitpid(pid, &status, WNOHANG);
        if (w == pid) break;
        if (w < 0 && errno != EINTR) { snprintf(err, errlen, "waitpid: %s", strerror(errno)); break; }
        double el = now_s() - t0;
        if (!killed && (g_stop || el > (double)timeout_s)) {
            kill(-pid, SIGTERM);
            killed = 1;
            if (g_stop) snprintf(err, errlen, "interrupted");
            else snprintf(err, errlen, "timed out after %lld s (--timeout)", timeout_s);
        } else if (killed && el > (double)timeout_s + 10) {
            kill(-pid, SIGKILL);
        }
        nanosleep(&nap, NULL);
    }
    sigaction(SIGINT, &old_int, NULL);
    sigaction(SIGTERM, &old_term, NULL);
    if (killed) return -1;
    if (WIFEXITED(status)) rc = WEXITSTATUS(status);
    else if (WIFSIGNALED(status)) snprintf(err, errlen, "killed by signal %d", WTERMSIG(status));
    return rc;
}

static char *read_file(const char *path, char *err, size_t errlen)
{
    FILE *f = fopen(path, "rb");
    if (!f) { snprintf(err, errlen, "cannot read '%s': %s", path, strerror(errno)); return NULL; }
    size_t cap = 1 << 16, n = 0;
    char *buf = malloc(cap);
    while (buf) {
        size_t got = fread(buf + n, 1, cap - n - 1, f);
        n += got;
        if (n + 1 < cap) break;
        char *nb = realloc(buf, cap *= 2);
        if (!nb) { free(buf); buf = NULL; }
        else buf = nb;
    }
    int bad = ferror(f);
    fclose(f);
    if (!buf || bad) { free(buf); snprintf(err, errlen, "cannot read '%s'", path); return NULL; }
    buf[n] = 0;
    return buf;
}

static cJSON *read_json(const char *path, char *err, size_t errlen)
{
    char *txt = read_file(path, err, errlen);
    if (!txt) return NULL;
    cJSON *j = cJSON_Parse(txt);
    free(txt);
    if (!j) snprintf(err, errlen, "'%s' is not valid JSON", path);
    return j;
}

/* The last n lines of the file at path, each indented, to stderr (a failed run's output). */
static void print_tail(const char *path, int n)
{
    char e[PATH_MAX + 64];
    char *txt = read_file(path, e, sizeof e);
    if (!txt) return;
    size_t len = strlen(txt);
    while (len && txt[len - 1] == '\n') txt[--len] = 0;
    char *start = txt + len;
    for (int k = 0; start > txt && k < n; k++)
        for (start--; start > txt && start[-1] != '\n'; start--) {}
    if (*start) {
        for (char *line = strtok(start, "\n"); line; line = strtok(NULL, "\n")) fprintf(stderr, "  | %s\n", line);
    }
    free(txt);
}

/* Runs the harness for one setup, its output in log; returns its JSON (caller frees) or NULL
 * with err set (the log's last lines then printed). */
static cJSON *launch(const char *python, const char *harness, const TorchSetup *s, const char *out_json,
                     const char *log, long long timeout_s, char *err, size_t errlen)
{
    char nproc[24], batch[24], seq[24], accum[24], steps[24], drop[32], bucket[32], gabv[4], group[24];
    snprintf(nproc, sizeof nproc, "%lld", s->ranks);
    snprintf(batch, sizeof batch, "%lld", s->batch);
    snprintf(seq, sizeof seq, "%lld", s->seq);
    snprintf(accum, sizeof accum, "%lld", s->accum);
    snprintf(steps, sizeof steps, "%lld", s->steps);
    snprintf(drop, sizeof drop, "%.17g", s->dropout);
    snprintf(bucket, sizeof bucket, "%.17g", s->bucket_mb);
    snprintf(gabv, sizeof gabv, "%d", s->gabv);
    snprintf(group, sizeof group, "%lld", s->shard_group);
    const char *argv[] = {
        python, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", nproc, harness,
        "--model", s->model, "--strategy", plan_strategy(s->strategy)->name, "--batch", batch, "--seq", seq,
        "--grad-accum", accum, "--steps", steps, "--precision", plan_precision(s->precision)->name,
        "--act-ckpt", plan_ckpt_name(s->ckpt), "--attn", plan_attn_name(s->attn), "--dropout", drop,
        "--grad-as-bucket-view", gabv, "--zero-grad", s->zero_grad, "--loop", s->loop,
        "--shard-group", group, "--fsdp-grad-sync", plan_fsdp_sync_name(s->fsdp_sync),
        "--json", out_json, "--bucket-mb", bucket, NULL,
    };
    if (s->bucket_mb <= 0) argv[sizeof argv / sizeof argv[0] - 3] = NULL;   /* DDP's own buckets */
    unlink(out_json);
    char why[PATH_MAX + 128] = "";
    int rc = run_child((char *const *)argv, log, timeout_s, why, sizeof why);
    char jerr[PATH_MAX + 128];
    cJSON *j = read_json(out_json, jerr, sizeof jerr);
    const cJSON *st = j ? cJSON_GetObjectItem(j, "status") : NULL;
    if (rc == 0 && j && cJSON_IsString(st) && strcmp(st->valuestring, "ok") == 0) return j;
    const cJSON *e = j ? cJSON_GetObjectItem(j, "error") : NULL;
    if (cJSON_IsString(e)) snprintf(err, errlen, "%s", e->valuestring);
    else if (rc < 0) snprintf(err, errlen, "%s", why);
    else if (rc == 2) snprintf(err, errlen, "the harness refused the setup (exit 2)");
    else snprintf(err, errlen, "the harness exited with status %d", rc);
    if (access(log, R_OK) == 0) {
        fprintf(stderr, "# the run's last lines (all of them: %s)\n", log);
        print_tail(log, 15);
    }
    cJSON_Delete(j);
    return NULL;
}

/* ---- reading a result ---- */

static double num(const cJSON *o, const char *k, double dflt)
{
    const cJSON *v = o ? cJSON_GetObjectItem(o, k) : NULL;
    return cJSON_IsNumber(v) ? v->valuedouble : dflt;
}
static const char *str(const cJSON *o, const char *k, const char *dflt)
{
    const cJSON *v = o ? cJSON_GetObjectItem(o, k) : NULL;
    return cJSON_IsString(v) ? v->valuestring : dflt;
}

/* The setup a saved result was measured with. 0, or -1 with err. */
static int setup_from_json(const cJSON *j, TorchSetup *s, char *err, size_t errlen)
{
    const cJSON *su = cJSON_GetObjectItem(j, "setup"), *mo = cJSON_GetObjectItem(j, "model");
    /* the model as the harness was given it (a zoo name or a config path); results written before
       "source" existed name config models by file stem: bench/torch/configs/<name>.json */
    const char *model = str(mo, "source", str(mo, "name", NULL)), *strat = str(su, "strategy", NULL);
    if (!su || !model || !strat) { snprintf(err, errlen, "no setup/model/strategy in the result"); return -1; }
    memset(s, 0, sizeof *s);
    snprintf(s->model, sizeof s->model, "%s", model);
    char cfg[PATH_MAX], hp[PATH_MAX];
    if (!cJSON_GetObjectItem(mo, "source") && !plan_zoo_has(model) && !strchr(model, '/') &&
        harness_path(hp, sizeof hp) == 0) {
        char *slash = strrchr(hp, '/');
        if (slash) *slash = 0;
        if (snprintf(cfg, sizeof cfg, "%s/configs/%s.json", hp, model) < (int)sizeof cfg && access(cfg, R_OK) == 0)
            snprintf(s->model, sizeof s->model, "%s", cfg);
    }
    int k = plan_strategy_by_name(strat);
    if (k < 0) { snprintf(err, errlen, "strategy '%s' has no planner row (valid: %s)", strat, plan_strategy_names()); return -1; }
    s->strategy = (StrategyKind)k;
    s->ranks = (long long)num(su, "ranks", 0);
    s->batch = (long long)num(su, "batch", 1);
    s->seq = (long long)num(su, "seq", 0);
    s->accum = (long long)num(su, "grad_accum", 1);
    s->steps = (long long)num(su, "steps", 3);
    s->shard_group = (long long)num(su, "shard_group", 0);
    s->dropout = num(su, "dropout", 0);
    /* DDP's own buckets (1 MiB first) unless bucket_cap_mb was passed, which the implementation
       line says ("default" when it was not) */
    s->bucket_mb = strstr(str(j, "implementation", ""), "default") ? 0 : num(su, "bucket_mb", 0);
    s->gabv = (int)num(su, "grad_as_bucket_view", 0);
    int p = plan_precision_by_name(str(su, "precision", "fp32"));
    int c = plan_ckpt_by_name(str(su, "act_ckpt", "none"));
    int a = plan_attn_by_name(str(su, "attn", "eager"));
    if (p < 0 || c < 0 || a < 0 || s->ranks < 1) { snprintf(err, errlen, "unreadable setup (precision/act_ckpt/attn/ranks)"); return -1; }
    s->precision = (PrecisionKind)p;
    s->ckpt = (CkptKind)c;
    s->attn = (AttnKind)a;
    snprintf(s->zero_grad, sizeof s->zero_grad, "%s", str(su, "zero_grad", "none"));
    snprintf(s->loop, sizeof s->loop, "%s", str(su, "loop", "hf"));
    /* results from before the harness had --fsdp-grad-sync: it called
       set_requires_gradient_sync(False) on the non-final micro-steps, i.e. last */
    int fs = plan_fsdp_sync_by_name(str(su, "fsdp_grad_sync", s->accum > 1 ? "last" : "every"));
    if (fs < 0) { snprintf(err, errlen, "unreadable setup (fsdp_grad_sync '%s')", str(su, "fsdp_grad_sync", "?")); return -1; }
    s->fsdp_sync = (FsdpSyncKind)fs;
    return 0;
}

/* ---- comparing ---- */

typedef struct {
    double count, payload;
} CollSum;

static const char *HARNESS_PHASES[CPHASE_COUNT] = {"forward", "backward", "optimizer"};

/* The harness's phase names for the planner's (its optimizer step is "optimizer"). */
static const char *planner_phase(const char *harness_phase)
{
    if (strcmp(harness_phase, "optimizer") == 0 || strcmp(harness_phase, "zero_grad") == 0) return "step";
    return harness_phase;
}

static void row(FILE *f, const char *strat, const char *q, double p, double m, const char *check)
{
    char a[32], b[32], e[32];
    fprintf(f, "%-13s %-30s %16s %16s %9s %s\n", strat, q, plan_fmt_count(llround(p), a, sizeof a),
            plan_fmt_count(llround(m), b, sizeof b), plan_fmt_rel_err(plan_rel_err(p, m), e, sizeof e), check);
}

static cJSON *pm_json(double p, double m)
{
    cJSON *o = cJSON_CreateObject();
    cJSON_AddNumberToObject(o, "predicted", p);
    cJSON_AddNumberToObject(o, "measured", m);
    return o;
}

/* The planner's inputs for a harness setup: CPU ranks, overheads zeroed, unbounded memory. */
static void plan_inputs(const TorchSetup *s, TrainSpec *t, ClusterSpec *c)
{
    plan_train_defaults(t);
    t->micro_batch = s->batch;
    t->seq = s->seq;
    t->grad_accum = s->accum;
    t->precision = s->precision;
    t->optimizer = OPT_ADAMW;
    t->act_ckpt = s->ckpt;
    t->attn = s->attn;
    t->dropout = s->dropout;
    t->impl = IMPL_PYTORCH;
    t->autocast_cpu = 1;                     /* CPU autocast's op lists (docs/formulas.md) */
    t->fsdp_impl = 2;                        /* FSDP2 fully_shard: FSDP1 refuses CPU ranks */
    t->loop_trainer = strcmp(s->loop, "hf") == 0;
    t->zero_grad_keep = strcmp(s->zero_grad, "zeros") == 0;
    t->grad_as_bucket_view = s->gabv;
    t->fsdp_grad_sync = s->fsdp_sync;
    t->syncbn = 0;
    plan_cluster_defaults(c);
    c->gpus = s->ranks;
    c->gpus_per_node = s->strategy == STRAT_FSDP_HYBRID && s->shard_group > 0 ? s->shard_group : s->ranks;
    c->cuda_context = 0;
    c->nccl_per_comm = 0;
    c->alloc_margin = 0;
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
    if (cJSON_IsObject(x)) return num(x, "bytes", 0);
    return num(r, "peak_bytes", 0) - num(r, "at_peak_backend_internal", 0);
}

/* Where that peak's phase, module and split are: peak_excl_backend when the harness gives it. */
static const cJSON *peak_view(const cJSON *r)
{
    const cJSON *x = cJSON_GetObjectItem(r, "peak_excl_backend");
    return cJSON_IsObject(x) ? x : r;
}

/* One strategy: prints rows, appends a JSON record, returns 1 if it passes, 0 if not, -1 if
 * the planner could not read the model. */
static int compare(FILE *f, const TorchSetup *s, const cJSON *h, double tol, cJSON *arr, int *header)
{
    char err[512];
    ModelSpec m;
    if (plan_load_model(&m, s->model, err, sizeof err)) { fprintf(stderr, "memplan: %s\n", err); return -1; }
    TrainSpec t;
    ClusterSpec c;
    plan_inputs(s, &t, &c);
    MemResult mr;
    MemSizes ms;
    CommPlan cp;
    plan_memory(&m, &t, &c, s->strategy, &mr);
    plan_memory_sizes(&m, &t, &c, s->strategy, &ms);
    plan_comm(&m, &t, &c, s->strategy, &cp);
    const char *sn = plan_strategy(s->strategy)->name;

    /* the rank with the largest peak; model states: the largest rank */
    const cJSON *ranks = cJSON_GetObjectItem(h, "per_rank"), *r, *top = NULL;
    double mpeak = -1, mupper = INFINITY, ms_p = 0, ms_g = 0, ms_o = 0;
    cJSON_ArrayForEach(r, ranks) {
        double pk = measured_peak(r);
        if (pk > mpeak) { mpeak = pk; top = r; }
        /* the ranks do the same work: the peak without gloo's buffers is at most the smallest
           rank's upper bound (blocks freed unseen on gloo's threads still counted there) */
        const cJSON *x = cJSON_GetObjectItem(r, "peak_excl_backend");
        double up = cJSON_IsObject(x) ? num(x, "bytes_upper", INFINITY) : INFINITY;
        if (up < mupper) mupper = up;
        const cJSON *st = cJSON_GetObjectItem(r, "model_states");
        double tot = num(st, "params", 0) + num(st, "grads", 0) + num(st, "optimizer", 0);
        if (tot > ms_p + ms_g + ms_o) { ms_p = num(st, "params", 0); ms_g = num(st, "grads", 0); ms_o = num(st, "optimizer", 0); }
    }
    if (!top) { fprintf(stderr, "memplan: %s: the result has no per_rank figures\n", sn); plan_model_free(&m); return 0; }

    if (!*header) {
        fprintf(f, "%-13s %-30s %16s %16s %9s %s\n", "strategy", "quantity", "predicted", "measured", "rel_err", "check");
        fprintf(f, "%-13s %-30s %16s %16s %9s %s\n", "-", "-", "bytes", "bytes", "%", "-");
        *header = 1;
    }
    int pass = 1;
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "strategy", sn);
    cJSON_AddStringToObject(o, "implementation", str(h, "implementation", "?"));
    cJSON_AddStringToObject(o, "model", s->model);

    double pp = (double)plan_model_params(&m), mp = num(cJSON_GetObjectItem(h, "model"), "params", -1);
    int ok = pp == mp;
    pass &= ok;
    row(f, sn, "parameters (count)", pp, mp, ok ? "ok (exact)" : "FAIL (must be exact)");
    cJSON_AddItemToObject(o, "params", pm_json(pp, mp));

    /* the split the walk charges (DeepSpeed's fp32 copy, gradient buffers and norm scalar,
       ZeRO-3's persistent tensors); torch Adam's step scalars live in host memory, which on
       CPU ranks is where everything is */
    struct { const char *name; double p, m; } st[] = {
        {"model states: params", mr.ms_params, ms_p}, {"model states: grads", mr.ms_grads, ms_g},
        {"model states: optimizer", mr.ms_optimizer + mr.opt_host_bytes, ms_o},
    };
    cJSON *msj = cJSON_AddObjectToObject(o, "model_states");
    for (size_t i = 0; i < sizeof st / sizeof st[0]; i++) {
        ok = llround(st[i].p) == llround(st[i].m);
        pass &= ok;
        row(f, sn, st[i].name, st[i].p, st[i].m, ok ? "ok (exact)" : "FAIL (must be exact)");
        cJSON_AddItemToObject(msj, st[i].name + strlen("model states: "), pm_json(st[i].p, st[i].m));
    }

    /* the split at the peak (reported; the peak itself is the check) */
    static const struct { TermKind term; const char *key, *label; } CATS[] = {
        {TERM_PARAMS, "params", "at peak: params"}, {TERM_GRADS, "grads", "at peak: grads"},
        {TERM_COMM, "comm_buffers", "at peak: comm_buffers"}, {TERM_OPTIMIZER, "optimizer", "at peak: optimizer"},
        {TERM_ACTIVATIONS, "activations", "at peak: activations"}, {TERM_TRANSIENT, "temporaries", "at peak: temporaries"},
        {TERM_COUNT, "other", "at peak: other"},
    };
    const cJSON *pv = peak_view(top);
    const cJSON *at = cJSON_GetObjectItem(pv, "at_peak");
    cJSON *cats = cJSON_AddArrayToObject(o, "memory_at_peak");
    for (size_t i = 0; i < sizeof CATS / sizeof CATS[0]; i++) {
        double p = CATS[i].term == TERM_COUNT ? 0 : mr.term[CATS[i].term], mm = num(at, CATS[i].key, 0);
        row(f, sn, CATS[i].label, p, mm, "reported");
        cJSON *q = pm_json(p, mm);
        cJSON_AddStringToObject(q, "category", CATS[i].key);
        cJSON_AddItemToArray(cats, q);
    }
    double pe = plan_rel_err(mr.peak, mpeak);
    int peak_ok = fabs(pe) <= tol;
    /* a prediction between the known peak and the upper bound (or within the tolerance of the
       bound) is as close as the run can say */
    int bounded = !peak_ok && mupper >= mpeak && mr.peak >= mpeak &&
                  (mr.peak <= mupper || fabs(plan_rel_err(mr.peak, mupper)) <= tol);
    peak_ok |= bounded;
    const char *mphase = str(pv, "peak_phase", "?");
    int phase_ok = strcmp(planner_phase(mphase), plan_phase_name(mr.peak_phase)) == 0;
    char chk[96];
    if (bounded) snprintf(chk, sizeof chk, "ok (between the bounds)");
    else snprintf(chk, sizeof chk, "%s (within %.3g%%)", peak_ok ? "ok" : "FAIL", 100 * tol);
    row(f, sn, "peak (max over ranks)", mr.peak, mpeak, chk);
    if (isfinite(mupper) && mupper > mpeak)
        row(f, sn, "peak upper bound (gloo frees)", mr.peak, mupper, "reported");
    pass &= peak_ok & phase_ok;
    fprintf(f, "%-13s %-30s %16s %16s %9s %s\n", sn, "peak phase", plan_phase_name(mr.peak_phase), mphase, "",
            phase_ok ? "ok (same phase)" : "FAIL (different phase)");
    cJSON *pk = cJSON_AddObjectToObject(o, "peak");
    cJSON_AddNumberToObject(pk, "predicted_bytes", mr.peak);
    cJSON_AddNumberToObject(pk, "measured_bytes", mpeak);
    cJSON_AddStringToObject(pk, "predicted_phase", plan_phase_name(mr.peak_phase));
    cJSON_AddStringToObject(pk, "measured_phase", mphase);
    cJSON_AddStringToObject(pk, "predicted_at", mr.peak_where);
    cJSON_AddStringToObject(pk, "measured_module", str(pv, "peak_module", "?"));
    cJSON_AddNumberToObject(pk, "measured_rank", num(top, "rank", 0));

    /* collectives of one optimizer step, by (op, phase) */
    CollSum pred[PCOLL_COUNT][CPHASE_COUNT], meas[PCOLL_COUNT][CPHASE_COUNT];
    memset(pred, 0, sizeof pred);
    memset(meas, 0, sizeof meas);
    for (int i = 0; i < cp.n; i++) {
        CollSum *q = &pred[cp.c[i].op][cp.c[i].phase];
        double count = cp.c[i].count;
        if (s->strategy == STRAT_DDP && cp.c[i].op == PCOLL_ALL_REDUCE && s->bucket_mb > 0 &&
            cp.c[i].purpose == PURPOSE_GRAD_BUCKETS) {   /* every bucket at the cap, the first too; whole tensors */
            int gbytes = plan_precision(t.precision)->grad_bytes;
            double cap = s->bucket_mb * 1024 * 1024;
            count = plan_ddp_buckets_tensors(&m, gbytes, cap, cap);
            if (count < 0) count = fmax(1, ceil(ms.psi * gbytes / cap));
        }
        q->count += count;
        q->payload += cp.c[i].payload_bytes;
    }
    cJSON *colls = cJSON_AddArrayToObject(o, "collectives_per_step");
    const cJSON *hc;
    cJSON_ArrayForEach(hc, cJSON_GetObjectItem(h, "collectives")) {
        const char *op = str(hc, "op", "?"), *ph = str(hc, "phase", "?");
        int oi = -1, pi = -1;
        for (int k = 0; k < PCOLL_COUNT; k++) if (strcmp(op, plan_coll_name((PlanCollOp)k)) == 0) oi = k;
        for (int k = 0; k < CPHASE_COUNT; k++) if (strcmp(ph, HARNESS_PHASES[k]) == 0) pi = k;
        double cnt = num(hc, "count", 0), pay = num(hc, "payload_bytes", 0);
        if (oi < 0 || pi < 0) {   /* a collective the planner has no row for: never exact */
            char q[64];
            snprintf(q, sizeof q, "%s %s bytes", op, ph);
            row(f, sn, q, 0, pay, "FAIL (not planned)");
            pass = 0;
            cJSON *x = cJSON_CreateObject();
            cJSON_AddStringToObject(x, "op", op);
            cJSON_AddStringToObject(x, "phase", ph);
            cJSON_AddNumberToObject(x, "predicted_count", 0);
            cJSON_AddNumberToObject(x, "measured_count", cnt);
            cJSON_AddNumberToObject(x, "predicted_payload_bytes", 0);
            cJSON_AddNumberToObject(x, "measured_payload_bytes", pay);
            cJSON_AddItemToArray(colls, x);
            continue;
        }
        meas[oi][pi].count += cnt;
        meas[oi][pi].payload += pay;
    }
    for (int op = 0; op < PCOLL_COUNT; op++)
        for (int ph = 0; ph < CPHASE_COUNT; ph++) {
            const CollSum *p = &pred[op][ph], *q = &meas[op][ph];
            if (p->count == 0 && q->count == 0) continue;
            char q1[64], q2[64];
            snprintf(q1, sizeof q1, "%s %s count", plan_coll_name((PlanCollOp)op), HARNESS_PHASES[ph]);
            snprintf(q2, sizeof q2, "%s %s bytes", plan_coll_name((PlanCollOp)op), HARNESS_PHASES[ph]);
            int bytes_ok = llround(p->payload) == llround(q->payload);
            pass &= bytes_ok;
            row(f, sn, q1, p->count, q->count, llround(p->count) == llround(q->count) ? "ok" : "differs (reported)");
            row(f, sn, q2, p->payload, q->payload, bytes_ok ? "ok (exact)" : "FAIL (must be exact)");
            cJSON *x = cJSON_CreateObject();
            cJSON_AddStringToObject(x, "op", plan_coll_name((PlanCollOp)op));
            cJSON_AddStringToObject(x, "phase", HARNESS_PHASES[ph]);
            cJSON_AddNumberToObject(x, "predicted_count", p->count);
            cJSON_AddNumberToObject(x, "measured_count", q->count);
            cJSON_AddNumberToObject(x, "predicted_payload_bytes", p->payload);
            cJSON_AddNumberToObject(x, "measured_payload_bytes", q->payload);
            cJSON_AddItemToArray(colls, x);
        }
    fprintf(f, "# %s: %s; predicted peak at %s, measured in %s of %s on rank %.0f; %s\n", sn, str(h, "implementation", "?"),
            mr.peak_where, mphase, str(pv, "peak_module", "?"), num(top, "rank", 0), pass ? "pass" : "FAIL");
    cJSON_AddBoolToObject(o, "pass", pass);
    cJSON_AddItemToArray(arr, o);
    plan_model_free(&m);
    return pass;
}

/* ---- the command ---- */

static void echo_versions(FILE *f, const cJSON *h, int *shown)
{
    if (*shown) return;
    const cJSON *v = cJSON_GetObjectItem(h, "versions");
    fprintf(f, "# measured: torch %s, transformers %s, deepspeed %s; %s\n", str(v, "torch", "?"),
            str(v, "transformers", "?"), str(v, "deepspeed", "-"), str(h, "measured_by", "?"));
    *shown = 1;
}

int cli_cmd_validate_torch(int argc, char **argv)
{
    TorchOpts o;
    memset(&o, 0, sizeof o);
    o.ranks = 2;
    o.steps = 3;
    o.tol = 0.03;
    o.bucket_mb = 0;   /* not passed: DDP's own buckets */
    o.timeout_s = 1800;
    for (int i = 1; i < argc; i++)
        if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) { print_help(stdout); return 0; }
    int measured_mode = 0;
    for (int i = 1; i < argc; i++)
        if (strcmp(argv[i], "--measured") == 0 || strncmp(argv[i], "--measured=", 11) == 0) measured_mode = 1;
    CliSetup cs;
    CliExtra extra = {TORCH_OPTIONS, torch_opt, &o};
    int rc = cli_parse_setup(argc, argv, "validate", &cs, &extra, !measured_mode);
    if (rc == 1) { print_help(stdout); return 0; }
    if (rc) return rc;
    if (!o.against) { cli_setup_free(&cs); return cli_usage_error("validate: this path needs --against torch"); }
    if (measured_mode && cs.have_model) {
        cli_setup_free(&cs);
        return cli_usage_error("--measured takes the model and setup from the result file: drop --model/--params");
    }

    /* the setups to check */
    TorchSetup base;
    memset(&base, 0, sizeof base);
    if (!measured_mode) {
        int prec_ok = 0;
        for (size_t i = 0; i < sizeof HARNESS_PRECISIONS / sizeof HARNESS_PRECISIONS[0]; i++)
            prec_ok |= cs.train.precision == HARNESS_PRECISIONS[i];
        const char *why = NULL;
        char msg[256];
        if (!prec_ok) {
            snprintf(msg, sizeof msg, "--precision %s does not run on CPU ranks (valid with --against torch: " HARNESS_PRECISION_NAMES ")",
                     plan_precision(cs.train.precision)->name);
            why = msg;
        } else if (cs.train.optimizer != OPT_ADAMW) {
            why = "--against torch trains with AdamW (valid --optimizer: adamw)";
        } else if (cs.train.impl != IMPL_PYTORCH) {
            why = "--against torch checks the PyTorch layout (valid --impl: pytorch)";
        } else if (cs.train.fsdp_impl == 1) {
            why = "--fsdp 1: flat-parameter FullyShardedDataParallel refuses CPU ranks in torch 2.15 (valid with --against torch: --fsdp 2)";
        } else if (cs.train.syncbn) {
            why = "--syncbn is not run by the torch harness yet (use memplan bench syncbn)";
        } else if (strcmp(cs.model.source, "zoo") && strchr(cs.model.source, '\'')) {
            why = "the model path contains a quote";
        } else if (cs.model.arch == ARCH_GENERIC) {
            why = "--against torch needs a real model (a zoo name or a Hugging Face config.json), not --params or params.json";
        }
        if (why) { cli_setup_free(&cs); return cli_usage_error("%s", why); }
        if ((cs.strategies & (1u << STRAT_FSDP_HYBRID)) && o.ranks < 2) {
            cli_setup_free(&cs);
            return cli_usage_error("--ranks %lld: fsdp-hybrid needs at least 2 ranks (valid: --ranks 2 or more, or a --strategy list without fsdp-hybrid)", o.ranks);
        }
        long long group = o.shard_group ? o.shard_group : (o.ranks >= 2 ? o.ranks / 2 : 1);
        if ((cs.strategies & (1u << STRAT_FSDP_HYBRID)) && o.ranks % group) {
            cli_setup_free(&cs);
            return cli_usage_error("--shard-group %lld does not divide --ranks %lld", group, o.ranks);
        }
        snprintf(base.model, sizeof base.model, "%s", strcmp(cs.model.source, "zoo") ? cs.model.source : cs.model.name);
        base.ranks = o.ranks;
        base.batch = cs.train.micro_batch;
        base.seq = cs.train.seq > 0 ? cs.train.seq : cs.model.arch == ARCH_CNN ? cs.model.image_size : cs.model.max_seq;
        base.accum = cs.train.grad_accum;
        base.steps = o.steps;
        base.precision = cs.train.precision;
        base.ckpt = cs.train.act_ckpt;
        base.attn = cs.train.attn;
        base.dropout = cs.train.dropout >= 0 ? cs.train.dropout : cs.model.dropout;
        base.bucket_mb = o.bucket_mb;
        base.gabv = cs.train.grad_as_bucket_view;
        base.shard_group = group;
        snprintf(base.zero_grad, sizeof base.zero_grad, "%s", cs.train.zero_grad_keep ? "zeros" : "none");
        snprintf(base.loop, sizeof base.loop, "%s", cs.train.loop_trainer ? "hf" : "common");
        base.fsdp_sync = cs.train.fsdp_grad_sync;
    }

    if (cs.json_path) {   /* before any work, without touching it: never a model or a measured input */
        char err[PATH_MAX + 256];
        const char *inputs[MAX_MEASURED + 1];
        int n_in = 0;
        for (int i = 0; i < o.n_measured; i++) inputs[n_in++] = o.measured[i];
        if (cs.have_model && strcmp(cs.model.source, "zoo")) inputs[n_in++] = cs.model.source;
        if (cli_check_output("--json", cs.json_path, inputs, n_in, err, sizeof err)) {
            cli_setup_free(&cs);
            return cli_usage_error("%s", err);
        }
    }
    char envd[PATH_MAX], python[PATH_MAX + 16], harness[PATH_MAX], dir[PATH_MAX];
    if (!measured_mode) {
        const char *py = getenv("MEMPLAN_TORCH_PYTHON");
        if (env_dir(envd, sizeof envd) || harness_path(harness, sizeof harness)) {
            cli_setup_free(&cs);
            return cli_usage_error("cannot resolve the PyTorch environment or the harness path");
        }
        snprintf(python, sizeof python, "%s", py && *py ? py : envd);
        if (!(py && *py)) strncat(python, "/bin/python", sizeof python - strlen(python) - 1);
        if (access(python, X_OK)) {
            cli_setup_free(&cs);
            return cli_usage_error("validate --against torch needs PyTorch 2.15 in %s (not found): run `make torch-env` once "
                                   "(installs torch, transformers and deepspeed there, about 5 GB; MEMPLAN_TORCH_ENV chooses another place)",
                                   envd);
        }
        if (access(harness, R_OK)) {
            cli_setup_free(&cs);
            return cli_usage_error("the harness %s is missing (MEMPLAN_TORCH_HARNESS names another)", harness);
        }
        if (o.keep) {
            if (mkdir(o.keep, 0755) && errno != EEXIST) {
                cli_setup_free(&cs);
                return cli_usage_error("--keep '%s': cannot create the directory: %s", o.keep, strerror(errno));
            }
            snprintf(dir, sizeof dir, "%s", o.keep);
        } else {
            const char *tmp = getenv("TMPDIR");
            snprintf(dir, sizeof dir, "%s/memplan-torch-XXXXXX", tmp && *tmp ? tmp : "/tmp");
            if (!mkdtemp(dir)) { cli_setup_free(&cs); fprintf(stderr, "memplan: cannot create a temporary directory\n"); return 1; }
        }
    }
    FILE *out = cs.json && !cs.json_path ? stderr : stdout;
    setvbuf(out, NULL, _IOLBF, 0);
    if (!measured_mode) {
        char strategies[128] = "";
        for (int k = 0; k < STRAT_COUNT; k++)
            if (cs.strategies & (1u << k))
                snprintf(strategies + strlen(strategies), sizeof strategies - strlen(strategies), "%s%s", *strategies ? "," : "", plan_strategy((StrategyKind)k)->name);
        fprintf(out, "# validate --against torch: model %s, %lld CPU ranks (gloo), strategies %s\n", base.model, base.ranks, strategies);
        fprintf(out, "# train: micro-batch %lld, seq %lld, grad-accum %lld, precision %s, adamw, act-ckpt %s, attn %s, dropout %g, "
                     "steps %lld (steady state 2..%lld), loop %s, zero_grad %s, fsdp-grad-sync %s\n",
                base.batch, base.seq, base.accum, plan_precision(base.precision)->name, plan_ckpt_name(base.ckpt),
                plan_attn_name(base.attn), base.dropout, base.steps, base.steps, base.loop, base.zero_grad,
                plan_fsdp_sync_name(base.fsdp_sync));
    }
    fprintf(out, "# predicted: the planner's PyTorch layout with the overheads zeroed (CPU ranks: no CUDA context, "
                 "cuBLAS workspace, NCCL buffers or caching-allocator margin); peak tolerance %.3g%%\n", 100 * o.tol);

    cJSON *arr = cJSON_CreateArray();
    int all_pass = 1, header = 0, versions = 0, runs = 0, failed_runs = 0, keep_dir = 0;
    if (measured_mode) {
        for (int i = 0; i < o.n_measured; i++) {
            char err[PATH_MAX + 128];
            TorchSetup s;
            cJSON *h = read_json(o.measured[i], err, sizeof err);
            if (!h || setup_from_json(h, &s, err + strlen(err), sizeof err - strlen(err))) {
                fprintf(stderr, "memplan: --measured %s: %s\n", o.measured[i], err);
                cJSON_Delete(h);
                all_pass = 0;
                failed_runs++;
                continue;
            }
            if (strcmp(str(h, "status", ""), "ok")) {
                fprintf(stderr, "memplan: --measured %s: the run failed: %s\n", o.measured[i], str(h, "error", "?"));
                cJSON_Delete(h);
                all_pass = 0;
                failed_runs++;
                continue;
            }
            echo_versions(out, h, &versions);
            char sync[48] = "";
            if (s.accum > 1) snprintf(sync, sizeof sync, " (fsdp-grad-sync %s)", plan_fsdp_sync_name(s.fsdp_sync));
            fprintf(out, "# %s: model %s, %lld ranks, micro-batch %lld, seq %lld, accum %lld%s, %s, act-ckpt %s, attn %s, dropout %g\n",
                    o.measured[i], s.model, s.ranks, s.batch, s.seq, s.accum, sync,
                    plan_precision(s.precision)->name, plan_ckpt_name(s.ckpt), plan_attn_name(s.attn), s.dropout);
            int p = compare(out, &s, h, o.tol, arr, &header);
            if (p < 0) failed_runs++;
            all_pass &= p == 1;
            runs++;
            cJSON_Delete(h);
        }
    } else {
        for (int k = 0; k < STRAT_COUNT; k++) {
            if (!(cs.strategies & (1u << k))) continue;
            TorchSetup s = base;
            s.strategy = (StrategyKind)k;
            char path[PATH_MAX + 64], log[PATH_MAX + 64], err[PATH_MAX + 256];
            snprintf(path, sizeof path, "%s/%s.json", dir, plan_strategy(s.strategy)->name);
            snprintf(log, sizeof log, "%s/%s.log", dir, plan_strategy(s.strategy)->name);
            fprintf(stderr, "# running %s on %lld CPU ranks (torchrun's output: %s) ...\n", plan_strategy(s.strategy)->name,
                    s.ranks, log);
            double t0 = now_s();
            cJSON *h = launch(python, harness, &s, path, log, o.timeout_s, err, sizeof err);
            double ran_s = now_s() - t0;
            if (!h) {
                keep_dir = 1;   /* the failed run's output stays where the message says */
                fprintf(stderr, "memplan: validate --against torch: %s did not run: %s\n", plan_strategy(s.strategy)->name, err);
                cJSON *x = cJSON_CreateObject();
                cJSON_AddStringToObject(x, "strategy", plan_strategy(s.strategy)->name);
                cJSON_AddStringToObject(x, "error", err);
                cJSON_AddBoolToObject(x, "pass", 0);
                cJSON_AddItemToArray(arr, x);
                all_pass = 0;
                failed_runs++;
                if (g_stop) break;
                continue;
            }
            fprintf(stderr, "# %s ran in %.0f s\n", plan_strategy(s.strategy)->name, ran_s);
            echo_versions(out, h, &versions);
            int p = compare(out, &s, h, o.tol, arr, &header);
            all_pass &= p == 1;
            runs++;
            cJSON_Delete(h);
            if (!o.keep) {
                unlink(path);
                unlink(log);
            }
        }
        if (!o.keep && !keep_dir) rmdir(dir);
    }
    fprintf(out, "# validate --against torch: %s (%d compared%s)\n", all_pass ? "pass" : "FAIL", runs,
            failed_runs ? ", some did not run" : "");
    rc = all_pass ? 0 : 1;
    if (cs.json) {
        cJSON *j = cJSON_CreateObject();
        cJSON_AddStringToObject(j, "against", "torch");
        cJSON_AddNumberToObject(j, "tolerance", o.tol);
        cJSON_AddItemToObject(j, "strategies", arr);
        arr = NULL;
        cJSON_AddBoolToObject(j, "pass", all_pass);
        char *txt = cJSON_Print(j);
        if (!txt) { fprintf(stderr, "memplan: out of memory writing the JSON\n"); rc = 1; }
        else if (cli_write_text("the --json output", cs.json_path, txt)) rc = 1;   /* every write checked */
        free(txt);
        cJSON_Delete(j);
    }
    cJSON_Delete(arr);
    if (fflush(stdout)) { fprintf(stderr, "memplan: cannot write to standard output\n"); rc = 1; }
    cli_setup_free(&cs);
    return rc;
}
