/* cli_harness.c — running bench/torch/harness.py and reading its results (see cli_harness.h). */
#include "cli_harness.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "plan_zoo.h"

/* ---- the harness's vocabulary ---- */

static const char *const LOOP_NAMES[2] = {"common", "hf"};       /* by loop_trainer */
static const char *const ZERO_GRAD_NAMES[2] = {"none", "zeros"};  /* by zero_grad_keep */

const char *cli_harness_loop_name(int loop_trainer) { return LOOP_NAMES[loop_trainer != 0]; }
const char *cli_harness_zero_grad_name(int keep) { return ZERO_GRAD_NAMES[keep != 0]; }

/* Index of name in a two-name table, or -1. */
static int name_index(const char *const names[2], const char *name)
{
    for (int i = 0; i < 2; i++)
        if (strcmp(names[i], name) == 0) return i;
    return -1;
}

/* The phases the harness names (its optimizer step is "optimizer", and zero_grad follows it),
 * with the planner's phase of a peak there and the phase its collectives count in. "step" is
 * the planner's own name, which results written by other tools (the tests' fakes) use. */
static const struct {
    const char *name;
    int peak;      /* PhaseKind */
    int comm;      /* CommPhase; -1: no collectives are counted there */
} PHASES[] = {
    {"forward", PHASE_FORWARD, CPHASE_FORWARD},
    {"backward", PHASE_BACKWARD, CPHASE_BACKWARD},
    {"optimizer", PHASE_STEP, CPHASE_STEP},
    {"zero_grad", PHASE_STEP, -1},
    {"step", PHASE_STEP, -1},
};
#define NPHASES ((int)(sizeof PHASES / sizeof PHASES[0]))

int cli_harness_peak_phase(const char *name)
{
    for (int i = 0; i < NPHASES; i++)
        if (strcmp(PHASES[i].name, name) == 0) return PHASES[i].peak;
    return -1;
}

int cli_harness_comm_phase(const char *name)
{
    for (int i = 0; i < NPHASES; i++)
        if (strcmp(PHASES[i].name, name) == 0) return PHASES[i].comm;
    return -1;
}

const char *cli_harness_comm_phase_name(CommPhase p)
{
    for (int i = 0; i < NPHASES; i++)
        if (PHASES[i].comm == (int)p) return PHASES[i].name;
    return "?";
}

int cli_harness_coll_op(const char *name)   /* the harness uses the planner's names */
{
    for (int k = 0; k < PCOLL_COUNT; k++)
        if (strcmp(name, plan_coll_name((PlanCollOp)k)) == 0) return k;
    return -1;
}

/* ---- where it runs ---- */

/* scripts/torch_env.sh's venv, by the same rule. */
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

int cli_harness_locate(HarnessEnv *env, char *err, size_t errlen)
{
    const char *py = getenv("MEMPLAN_TORCH_PYTHON");
    if (env_dir(env->venv, sizeof env->venv) || harness_path(env->harness, sizeof env->harness)) {
        snprintf(err, errlen, "cannot resolve the PyTorch environment or the harness path");
        return -1;
    }
    if (py && *py) snprintf(env->python, sizeof env->python, "%s", py);
    else snprintf(env->python, sizeof env->python, "%s/bin/python", env->venv);
    if (access(env->python, X_OK)) {
        snprintf(err, errlen, "validate --against torch needs PyTorch 2.15 in %s (not found): run `make torch-env` once "
                 "(installs torch, transformers and deepspeed there, about 5 GB; MEMPLAN_TORCH_ENV chooses another place)",
                 env->venv);
        return -1;
    }
    if (access(env->harness, R_OK)) {
        snprintf(err, errlen, "the harness %s is missing (MEMPLAN_TORCH_HARNESS names another)", env->harness);
        return -1;
    }
    return 0;
}

/* ---- running it ---- */

static volatile sig_atomic_t g_stop;
static void on_signal(int sig) { g_stop = sig; }

int cli_harness_interrupted(void) { return g_stop != 0; }

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

cJSON *cli_harness_read(const char *path, char *err, size_t errlen)
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

cJSON *cli_harness_run(const HarnessEnv *env, const HarnessSetup *s, const char *out_json, const char *log,
                       long long timeout_s, double *seconds, char *err, size_t errlen)
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
    TrainSpec tc;   /* the checkpointing as the flag spells it (every:N) */
    plan_train_defaults(&tc);
    tc.act_ckpt = s->ckpt;
    tc.ckpt_every = s->ckpt_every;
    char ckpt[24];
    plan_ckpt_label(&tc, ckpt, sizeof ckpt);
    const char *argv[] = {
        env->python, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", nproc, env->harness,
        "--model", s->model, "--strategy", plan_strategy(s->strategy)->name, "--batch", batch, "--seq", seq,
        "--grad-accum", accum, "--steps", steps, "--precision", plan_precision(s->precision)->name,
        "--act-ckpt", ckpt, "--attn", plan_attn_name(s->attn), "--dropout", drop,
        "--grad-as-bucket-view", gabv, "--zero-grad", cli_harness_zero_grad_name(s->zero_grad_keep),
        "--loop", cli_harness_loop_name(s->loop_trainer), "--shard-group", group,
        "--fsdp-grad-sync", plan_fsdp_sync_name(s->fsdp_sync), "--json", out_json, "--bucket-mb", bucket, NULL,
    };
    if (s->bucket_mb <= 0) argv[sizeof argv / sizeof argv[0] - 3] = NULL;   /* DDP's own buckets */
    unlink(out_json);
    char why[PATH_MAX + 128] = "";
    double t0 = now_s();
    int rc = run_child((char *const *)argv, log, timeout_s, why, sizeof why);
    *seconds = now_s() - t0;
    char jerr[PATH_MAX + 128];
    cJSON *j = cli_harness_read(out_json, jerr, sizeof jerr);
    if (rc == 0 && j && cli_harness_ok(j)) return j;
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

double cli_harness_num(const cJSON *o, const char *k, double dflt)
{
    const cJSON *v = o ? cJSON_GetObjectItem(o, k) : NULL;
    return cJSON_IsNumber(v) ? v->valuedouble : dflt;
}

const char *cli_harness_str(const cJSON *o, const char *k, const char *dflt)
{
    const cJSON *v = o ? cJSON_GetObjectItem(o, k) : NULL;
    return cJSON_IsString(v) ? v->valuestring : dflt;
}

int cli_harness_ok(const cJSON *result) { return strcmp(cli_harness_str(result, "status", ""), "ok") == 0; }

/* 1 when the run left DDP's buckets to DDP (25 MiB, the first 1 MiB), 0 when it passed
 * bucket_cap_mb. setup.bucket_mb is 25 either way; bucket_mb_default says which. Results written
 * before that field have only their implementation line ("bucket_cap_mb=default 25 ..." versus
 * "bucket_cap_mb=X (first bucket too)"): read there, those files no longer change. */
static int ddp_default_buckets(const cJSON *result, const cJSON *setup)
{
    const cJSON *d = cJSON_GetObjectItem(setup, "bucket_mb_default");
    if (cJSON_IsBool(d)) return cJSON_IsTrue(d);
    return strstr(cli_harness_str(result, "implementation", ""), "default") != NULL;
}

/* The model as the harness was given it (a zoo name or a config path). Results written before
 * "source" existed name config models by file stem: bench/torch/configs/<name>.json. */
static void model_of(const cJSON *mo, const char *model, HarnessSetup *s)
{
    snprintf(s->model, sizeof s->model, "%s", model);
    char cfg[PATH_MAX], hp[PATH_MAX];
    if (!cJSON_GetObjectItem(mo, "source") && !plan_zoo_has(model) && !strchr(model, '/') &&
        harness_path(hp, sizeof hp) == 0) {
        char *slash = strrchr(hp, '/');
        if (slash) *slash = 0;
        if (snprintf(cfg, sizeof cfg, "%s/configs/%s.json", hp, model) < (int)sizeof cfg && access(cfg, R_OK) == 0)
            snprintf(s->model, sizeof s->model, "%s", cfg);
    }
}

int cli_harness_setup_of(const cJSON *j, HarnessSetup *s, char *err, size_t errlen)
{
    const cJSON *su = cJSON_GetObjectItem(j, "setup"), *mo = cJSON_GetObjectItem(j, "model");
    const char *model = cli_harness_str(mo, "source", cli_harness_str(mo, "name", NULL));
    const char *strat = cli_harness_str(su, "strategy", NULL);
    if (!su || !model || !strat) { snprintf(err, errlen, "no setup/model/strategy in the result"); return -1; }
    memset(s, 0, sizeof *s);
    model_of(mo, model, s);
    int k = plan_strategy_by_name(strat);
    if (k < 0) { snprintf(err, errlen, "strategy '%s' has no planner row (valid: %s)", strat, plan_strategy_names()); return -1; }
    s->strategy = (StrategyKind)k;
    s->ranks = (long long)cli_harness_num(su, "ranks", 0);
    s->batch = (long long)cli_harness_num(su, "batch", 1);
    s->seq = (long long)cli_harness_num(su, "seq", 0);
    s->accum = (long long)cli_harness_num(su, "grad_accum", 1);
    s->steps = (long long)cli_harness_num(su, "steps", 3);
    s->shard_group = (long long)cli_harness_num(su, "shard_group", 0);
    s->dropout = cli_harness_num(su, "dropout", 0);
    s->bucket_mb = ddp_default_buckets(j, su) ? 0 : cli_harness_num(su, "bucket_mb", 0);
    s->gabv = (int)cli_harness_num(su, "grad_as_bucket_view", 0);
    int p = plan_precision_by_name(cli_harness_str(su, "precision", "fp32"));
    int c = plan_ckpt_parse(cli_harness_str(su, "act_ckpt", "none"), &s->ckpt, &s->ckpt_every);
    int a = plan_attn_by_name(cli_harness_str(su, "attn", "eager"));
    if (p < 0 || c < 0 || a < 0 || s->ranks < 1) { snprintf(err, errlen, "unreadable setup (precision/act_ckpt/attn/ranks)"); return -1; }
    s->precision = (PrecisionKind)p;
    s->attn = (AttnKind)a;
    const char *zg = cli_harness_str(su, "zero_grad", "none"), *loop = cli_harness_str(su, "loop", "hf");
    s->zero_grad_keep = name_index(ZERO_GRAD_NAMES, zg);
    s->loop_trainer = name_index(LOOP_NAMES, loop);
    if (s->zero_grad_keep < 0 || s->loop_trainer < 0) {
        snprintf(err, errlen, "unreadable setup (zero_grad '%s', loop '%s')", zg, loop);
        return -1;
    }
    /* results from before the harness had --fsdp-grad-sync: it called
       set_requires_gradient_sync(False) on the non-final micro-steps, i.e. last */
    int fs = plan_fsdp_sync_by_name(cli_harness_str(su, "fsdp_grad_sync", s->accum > 1 ? "last" : "every"));
    if (fs < 0) { snprintf(err, errlen, "unreadable setup (fsdp_grad_sync '%s')", cli_harness_str(su, "fsdp_grad_sync", "?")); return -1; }
    s->fsdp_sync = (FsdpSyncKind)fs;
    return 0;
}
