/* cli_harness.c — running bench/torch/harness.py and reading its results (see cli_harness.h). */
#include "cli_harness.h"
#include "plan_dim_ft.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <signal.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
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
    int comm;      /* PhaseKind; -1: no collectives are counted there */
} PHASES[] = {
    {"forward", PHASE_FORWARD, PHASE_FORWARD},
    {"backward", PHASE_BACKWARD, PHASE_BACKWARD},
    {"optimizer", PHASE_STEP, PHASE_STEP},
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

const char *cli_harness_comm_phase_name(PhaseKind p)
{
    for (int i = 0; i < NPHASES; i++)
        if (PHASES[i].comm == (int)p) return PHASES[i].name;
    return "?";
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

/* The whole file at path, or NULL with the reason in err, without the path (the caller names
 * the file): "not found", "is a directory, not a result file", "cannot be read: <why>". */
static char *read_file(const char *path, char *err, size_t errlen)
{
    struct stat st;
    if (stat(path, &st) == 0 && S_ISDIR(st.st_mode)) {
        snprintf(err, errlen, "is a directory, not a result file");
        return NULL;
    }
    FILE *f = fopen(path, "rb");
    if (!f) {
        if (errno == ENOENT) snprintf(err, errlen, "not found");
        else snprintf(err, errlen, "cannot be read: %s", strerror(errno));
        return NULL;
    }
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
    if (!buf || bad) {
        snprintf(err, errlen, "cannot be read: %s", buf ? "a read failed" : "out of memory");
        free(buf);
        return NULL;
    }
    buf[n] = 0;
    return buf;
}

cJSON *cli_harness_read(const char *path, char *err, size_t errlen)
{
    char *txt = read_file(path, err, errlen);
    if (!txt) return NULL;
    if (!txt[strspn(txt, " \t\r\n")]) {
        snprintf(err, errlen, "is empty");
        free(txt);
        return NULL;
    }
    const char *end = txt;
    cJSON *j = cJSON_ParseWithOpts(txt, &end, 1);   /* text after the JSON is an error too */
    if (!j) {   /* where the parser stopped, as an editor shows it */
        int line = 1, col = 1;
        for (const char *p = txt; end && p < end && *p; p++) {
            if (*p == '\n') line++, col = 1;
            else col++;
        }
        snprintf(err, errlen, "is not JSON (at line %d, column %d)", line, col);
    }
    free(txt);
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
    char nproc[24], batch[24], seq[24], accum[24], steps[24], drop[32], bucket[32], gabv[4], group[24], tp[16];
    snprintf(tp, sizeof tp, "%d", s->tp > 1 ? s->tp : 1);
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
    char dsz[512], fsdp[4], minp[32];
    cli_harness_ds_zero(&s->ds, dsz, sizeof dsz);
    int fsdp1 = s->fsdp_impl == 1 && strncmp(plan_strategy(s->strategy)->name, "fsdp-", 5) == 0;
    snprintf(fsdp, sizeof fsdp, "%d", fsdp1 ? 1 : 2);
    snprintf(minp, sizeof minp, "%.0f", s->fsdp1.min_params);
    const char *argv[] = {
        env->python, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", nproc, env->harness,
        "--model", s->model, "--strategy", plan_strategy(s->strategy)->name, "--batch", batch, "--seq", seq,
        "--grad-accum", accum, "--steps", steps, "--precision", plan_precision(s->precision)->name,
        "--act-ckpt", ckpt, "--attn", plan_attn_name(s->attn), "--dropout", drop,
        "--grad-as-bucket-view", gabv, "--zero-grad", cli_harness_zero_grad_name(s->zero_grad_keep),
        "--loop", cli_harness_loop_name(s->loop_trainer), "--shard-group", group,
        "--fsdp-grad-sync", plan_fsdp_sync_name(s->fsdp_sync), "--tp", tp, "--sp", s->sp ? "on" : "off",
        "--loss-parallel", s->loss_parallel ? "on" : "off", "--fsdp", fsdp,
        "--fsdp-min-params", fsdp1 ? minp : "0", "--fsdp-limit-all-gathers", fsdp1 && s->fsdp1.no_limit ? "off" : "on",
        "--fsdp-backward-prefetch", fsdp1 ? plan_fsdp_bwd_name(s->fsdp1.bwd) : "pre",
        "--fsdp-forward-prefetch", fsdp1 && s->fsdp1.fwd ? "on" : "off",
        "--json", out_json, "--ds-zero", dsz, "--bucket-mb", bucket, NULL,
    };
    size_t n_argv = sizeof argv / sizeof argv[0];
    if (s->bucket_mb <= 0) argv[n_argv - 3] = NULL;   /* DDP's own buckets */
    if (!dsz[0]) {                                    /* DeepSpeed's defaults: no --ds-zero */
        argv[n_argv - 5] = argv[n_argv - 3];
        argv[n_argv - 4] = argv[n_argv - 2];
        argv[n_argv - 3] = NULL;
    }
    /* PEFT LoRA: --lora R --lora-alpha A --lora-dropout P [--lora-targets LIST] after the rest;
       room for LoRA's 8, --freeze's 2, --alloc-trace's 2 and EP's 4 (argv's own NULL ends it) */
    const char *full[sizeof argv / sizeof argv[0] + 16];
    size_t k = 0;
    for (; k < n_argv && argv[k]; k++) full[k] = argv[k];
    char rank[24], alpha[32], ldrop[32];
    if (s->ft.rank > 0) {
        snprintf(rank, sizeof rank, "%d", s->ft.rank);
        snprintf(alpha, sizeof alpha, "%.17g", s->ft.alpha);
        snprintf(ldrop, sizeof ldrop, "%.17g", s->ft.dropout);
        full[k++] = "--lora"; full[k++] = rank; full[k++] = "--lora-alpha"; full[k++] = alpha;
        full[k++] = "--lora-dropout"; full[k++] = ldrop;
        if (s->ft.targets[0]) { full[k++] = "--lora-targets"; full[k++] = s->ft.targets; }
    }
    char fzl[32], epn[16];
    if (s->ft.freeze != FREEZE_NONE) { full[k++] = "--freeze"; full[k++] = plan_freeze_label(&s->ft, fzl, sizeof fzl); }
    if (s->alloc_trace[0]) { full[k++] = "--alloc-trace"; full[k++] = s->alloc_trace; }
    if (s->ep > 1) {   /* expert parallel: every rank gets its share of the rows (or the worst case) */
        snprintf(epn, sizeof epn, "%d", s->ep);
        full[k++] = "--ep"; full[k++] = epn;
        full[k++] = "--moe-routing"; full[k++] = s->moe_skewed ? "skewed" : "balanced";
    }
    full[k] = NULL;
    unlink(out_json);
    char why[PATH_MAX + 128] = "";
    double t0 = now_s();
    int rc = run_child((char *const *)full, log, timeout_s, why, sizeof why);
    *seconds = now_s() - t0;
    char jerr[PATH_MAX + 128];
    cJSON *j = cli_harness_read(out_json, jerr, sizeof jerr);
    if (rc == 0 && j && cli_harness_ok(j)) return j;
    const cJSON *e = j ? cJSON_GetObjectItem(j, "error") : NULL;
    if (cJSON_IsString(e)) snprintf(err, errlen, "%s", e->valuestring);
    else if (rc < 0) snprintf(err, errlen, "%s", why);
    else if (rc == 2) snprintf(err, errlen, "the harness refused the setup (exit 2)");
    else if (rc == 0) snprintf(err, errlen, "its result '%s' %s", out_json, jerr);
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

int cli_harness_check_shape(const cJSON *j, char *err, size_t errlen)
{
    /* what bench/torch/harness.py writes: a failed run has status and error, a finished one
       also the model, the setup it ran and the figures per rank */
    static const struct { const char *parent, *key; int type; } NEED[] = {
        {NULL, "status", cJSON_String}, {NULL, "model", cJSON_Object}, {NULL, "setup", cJSON_Object},
        {"setup", "strategy", cJSON_String}, {NULL, "per_rank", cJSON_Array},
    };
    if (!cJSON_IsObject(j)) { snprintf(err, errlen, "is not a harness result (not a JSON object)"); return -1; }
    int ok = cJSON_IsString(cJSON_GetObjectItem(j, "status")) && cli_harness_ok(j);
    for (size_t i = 0; i < sizeof NEED / sizeof NEED[0] && (i == 0 || ok); i++) {
        const cJSON *in = NEED[i].parent ? cJSON_GetObjectItem(j, NEED[i].parent) : j;
        const cJSON *v = cJSON_GetObjectItem(in, NEED[i].key);
        if (!v || !(v->type & NEED[i].type)) {
            snprintf(err, errlen, "is not a harness result (%s \"%s%s%s\"; bench/torch/harness.py writes status, model, "
                     "setup and per_rank)", v ? "wrong type of" : "no", NEED[i].parent ? NEED[i].parent : "",
                     NEED[i].parent ? "." : "", NEED[i].key);
            return -1;
        }
    }
    if (ok && cJSON_GetArraySize(cJSON_GetObjectItem(j, "per_rank")) == 0) {
        snprintf(err, errlen, "has no figures (\"per_rank\" is empty)");
        return -1;
    }
    const cJSON *mo = cJSON_GetObjectItem(j, "model");
    if (ok && !cJSON_IsString(cJSON_GetObjectItem(mo, "source")) && !cJSON_IsString(cJSON_GetObjectItem(mo, "name"))) {
        snprintf(err, errlen, "is not a harness result (no \"model.name\" or \"model.source\")");
        return -1;
    }
    if (!ok && !cJSON_IsString(cJSON_GetObjectItem(j, "error"))) {
        snprintf(err, errlen, "is not a harness result (status \"%s\" without an \"error\")", cli_harness_str(j, "status", "?"));
        return -1;
    }
    return 0;
}

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

/* DeepSpeed's zero_optimization keys memplan models, with the DsKnobs field each sets and its
   least value (zero/config.py 0.19.8: reduce_bucket_size gt=0, the stage-3 sizes ge=0). */
static const struct { const char *key; size_t off; double lo; } DS_ZERO_KEYS[] = {
    {"reduce_bucket_size", offsetof(DsKnobs, reduce_bucket), 1},
    {"stage3_prefetch_bucket_size", offsetof(DsKnobs, prefetch), 0},
    {"stage3_max_live_parameters", offsetof(DsKnobs, max_live), 0},
    {"stage3_max_reuse_distance", offsetof(DsKnobs, max_reuse), 0},
    {"stage3_param_persistence_threshold", offsetof(DsKnobs, persist), 0},
};

const char *cli_harness_ds_zero(const DsKnobs *k, char *buf, size_t len)
{
    size_t n = 0;
    buf[0] = 0;
    for (size_t i = 0; i < sizeof DS_ZERO_KEYS / sizeof DS_ZERO_KEYS[0] && n < len; i++) {
        double v = *(const double *)((const char *)k + DS_ZERO_KEYS[i].off);
        if (v > 0) n += (size_t)snprintf(buf + n, len - n, "%s\"%s\": %.0f", n ? ", " : "{", DS_ZERO_KEYS[i].key, v);
    }
    if (k->overlap_comm && n < len)
        n += (size_t)snprintf(buf + n, len - n, "%s\"overlap_comm\": %s", n ? ", " : "{", k->overlap_comm == 1 ? "true" : "false");
    if (n && n < len) snprintf(buf + n, len - n, "}");
    return buf;
}

/* setup.ds_zero (the harness's --ds-zero) into s->ds. 0, or -1 naming a key memplan does not model. */
static int ds_zero_of(const cJSON *su, HarnessSetup *s, char *err, size_t errlen)
{
    const cJSON *d = cJSON_GetObjectItem(su, "ds_zero"), *e;
    if (!d) return 0;
    if (!cJSON_IsObject(d)) { snprintf(err, errlen, "setup.ds_zero is not an object"); return -1; }
    cJSON_ArrayForEach(e, d) {
        size_t i = 0;
        while (i < sizeof DS_ZERO_KEYS / sizeof DS_ZERO_KEYS[0] && strcmp(e->string, DS_ZERO_KEYS[i].key)) i++;
        if (i < sizeof DS_ZERO_KEYS / sizeof DS_ZERO_KEYS[0] && cJSON_IsNumber(e) && e->valuedouble >= DS_ZERO_KEYS[i].lo &&
            e->valuedouble <= 1e13 && e->valuedouble == floor(e->valuedouble))
            *(double *)((char *)&s->ds + DS_ZERO_KEYS[i].off) = e->valuedouble < 1 ? 1 : e->valuedouble;
        else if (strcmp(e->string, "overlap_comm") == 0 && cJSON_IsBool(e))
            s->ds.overlap_comm = cJSON_IsTrue(e) ? 1 : 2;
        else {
            snprintf(err, errlen, "setup.ds_zero.%s: not a DeepSpeed setting memplan models (valid: reduce_bucket_size, "
                     "overlap_comm, stage3_prefetch_bucket_size, stage3_max_live_parameters, stage3_max_reuse_distance, "
                     "stage3_param_persistence_threshold, as whole element counts)", e->string);
            return -1;
        }
    }
    return 0;
}

/* setup.fsdp (results before it: 2, fully_shard) and FSDP1's knobs (before them: the defaults). 0, or -1
   naming a value that is not one. */
static int fsdp_of(const cJSON *su, HarnessSetup *s, char *err, size_t errlen)
{
    s->fsdp_impl = (int)cli_harness_num(su, "fsdp", 2);
    s->fsdp1.min_params = cli_harness_num(su, "fsdp_min_params", 0);
    const char *lim = cli_harness_str(su, "fsdp_limit_all_gathers", "on"), *fwd = cli_harness_str(su, "fsdp_forward_prefetch", "off");
    const char *bwd = cli_harness_str(su, "fsdp_backward_prefetch", "pre");
    int b = plan_fsdp_bwd_by_name(bwd);
    if ((s->fsdp_impl != 1 && s->fsdp_impl != 2) || s->fsdp1.min_params < 0 || b < 0 ||
        (strcmp(lim, "on") && strcmp(lim, "off")) || (strcmp(fwd, "on") && strcmp(fwd, "off"))) {
        snprintf(err, errlen, "setup.fsdp %d / fsdp_min_params %.0f / fsdp_limit_all_gathers '%s' / fsdp_backward_prefetch '%s' / "
                 "fsdp_forward_prefetch '%s' (valid: 1|2, >= 0, on|off, pre|post|none, on|off)", s->fsdp_impl,
                 s->fsdp1.min_params, lim, bwd, fwd);
        return -1;
    }
    s->fsdp1.no_limit = strcmp(lim, "off") == 0;
    s->fsdp1.bwd = (FsdpBwdPrefetch)b;
    s->fsdp1.fwd = strcmp(fwd, "on") == 0;
    return 0;
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
    if (k < 0) { snprintf(err, errlen, "setup.strategy '%s' has no planner row (valid: %s)", strat, plan_strategy_names()); return -1; }
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
    if (s->ranks < 1) { snprintf(err, errlen, "no setup.ranks"); return -1; }
    if (p < 0 || c < 0 || a < 0) {   /* cli_harness_check_values names the value and the valid ones */
        snprintf(err, errlen, "unreadable setup.precision/act_ckpt/attn");
        return -1;
    }
    s->precision = (PrecisionKind)p;
    s->attn = (AttnKind)a;
    const char *zg = cli_harness_str(su, "zero_grad", "none"), *loop = cli_harness_str(su, "loop", "hf");
    s->zero_grad_keep = name_index(ZERO_GRAD_NAMES, zg);
    s->loop_trainer = name_index(LOOP_NAMES, loop);
    if (s->zero_grad_keep < 0 || s->loop_trainer < 0) {
        snprintf(err, errlen, "setup.zero_grad '%s' / setup.loop '%s' (valid: %s, %s / %s, %s)", zg, loop, ZERO_GRAD_NAMES[0],
                 ZERO_GRAD_NAMES[1], LOOP_NAMES[0], LOOP_NAMES[1]);
        return -1;
    }
    /* results from before the harness had --fsdp-grad-sync: it called
       set_requires_gradient_sync(False) on the non-final micro-steps, i.e. last */
    int fs = plan_fsdp_sync_by_name(cli_harness_str(su, "fsdp_grad_sync", s->accum > 1 ? "last" : "every"));
    if (fs < 0) { snprintf(err, errlen, "setup.fsdp_grad_sync '%s' (valid: every, last)", cli_harness_str(su, "fsdp_grad_sync", "?")); return -1; }
    s->fsdp_sync = (FsdpSyncKind)fs;
    /* tensor parallel (results before the harness had --tp: none) */
    s->tp = (int)cli_harness_num(su, "tp", 1);
    const cJSON *sp = cJSON_GetObjectItem(su, "sp");
    s->sp = cJSON_IsTrue(sp);
    s->loss_parallel = cJSON_IsTrue(cJSON_GetObjectItem(su, "loss_parallel"));
    if (s->tp < 1 || s->ranks % s->tp) { snprintf(err, errlen, "setup.tp %d must divide setup.ranks %lld", s->tp, s->ranks); return -1; }
    /* expert parallel and the routing the harness forced (results before --ep: none, the router's) */
    s->ep = (int)cli_harness_num(su, "ep", 1);
    s->moe_skewed = strcmp(cli_harness_str(su, "moe_routing", "natural"), "skewed") == 0;
    if (s->ep < 1 || s->ranks % s->ep) { snprintf(err, errlen, "setup.ep %d must divide setup.ranks %lld", s->ep, s->ranks); return -1; }
    const cJSON *lo = cJSON_GetObjectItem(su, "lora");   /* null or absent: full fine-tuning */
    if (cJSON_IsObject(lo)) {
        s->ft.rank = (int)cli_harness_num(lo, "rank", 0);
        s->ft.alpha = cli_harness_num(lo, "alpha", 8);
        s->ft.dropout = cli_harness_num(lo, "dropout", 0);
        snprintf(s->ft.targets, sizeof s->ft.targets, "%s", cli_harness_str(lo, "targets", ""));
        if (s->ft.rank < 1) { snprintf(err, errlen, "setup.lora.rank %d is not a rank >= 1", s->ft.rank); return -1; }
    }
    const char *fz = cli_harness_str(su, "freeze", "none");   /* absent: nothing frozen */
    if (plan_freeze_parse(fz, &s->ft)) {
        snprintf(err, errlen, "setup.freeze '%s' (valid: none, embeddings, all-but-last:N)", fz);
        return -1;
    }
    return fsdp_of(su, s, err, errlen) ? -1 : ds_zero_of(su, s, err, errlen);
}

/* ---- the values of a result, checked ---- */

/* The setup's keys and the flag of `memplan validate --against torch` each one is run with
 * (number: a JSON number, else a string). The value must be one that flag takes: it goes through
 * the flag's own parser, so a file and the command line take the same ranges. */
static const struct {
    const char *key, *flag;
    int number;
} SETUP_FLAGS[] = {
    {"ranks", "--ranks", 1}, {"batch", "--batch", 1}, {"seq", "--seq", 1}, {"grad_accum", "--grad-accum", 1},
    {"steps", "--steps", 1}, {"shard_group", "--shard-group", 1}, {"dropout", "--dropout", 1},
    {"bucket_mb", "--bucket-mb", 1}, {"precision", "--precision", 0}, {"act_ckpt", "--act-ckpt", 0},
    {"attn", "--attn", 0}, {"zero_grad", "--zero-grad", 0}, {"fsdp_grad_sync", "--fsdp-grad-sync", 0},
};

/* One setup value through its flag's parser. 0, or -1 with "setup.KEY VALUE: <the flag's
 * message>" in err. */
static int setup_value_ok(const cJSON *v, const char *key, const char *flag, int number, const CliExtra *flags,
                          char *err, size_t errlen)
{
    char val[64], msg[512];
    if (number ? !cJSON_IsNumber(v) : !cJSON_IsString(v)) {
        snprintf(err, errlen, "setup.%s is not a %s", key, number ? "number" : "string");
        return -1;
    }
    if (number) snprintf(val, sizeof val, "%.15g", v->valuedouble);   /* 2, 0.1, 1e+09: as a user types them */
    char *argv[] = {"validate", (char *)flag, number ? val : v->valuestring, NULL};
    CliSetup cs;
    cli_usage_capture(msg, sizeof msg);   /* the flag's one line, without "memplan: " */
    int rc = cli_parse_setup(3, argv, "validate", &cs, flags, 0);
    cli_usage_capture(NULL, 0);
    if (rc == 0) cli_setup_free(&cs);
    if (rc == 0) return 0;
    snprintf(err, errlen, "setup.%s %s%s%s: %s", key, number ? "" : "'", number ? val : v->valuestring, number ? "" : "'", msg);
    return -1;
}

/* A measured figure: absent, or a number in [0, max], whole if `whole` (a count, a rank; bytes
 * need not be: a fake or an averaged result may have fractions). 0, or -1 with
 * "<where><key> <value> ..." in err. */
#define FIGURE_MAX 9007199254740992.0   /* 2^53: the largest whole number a JSON number holds exactly */
static int figure_ok(const cJSON *o, const char *key, const char *where, double max, int whole, char *err, size_t errlen)
{
    const cJSON *v = cJSON_GetObjectItem(o, key);
    if (!v) return 0;
    double x = cJSON_IsNumber(v) ? v->valuedouble : -1;
    if (cJSON_IsNumber(v) && x >= 0 && x <= max && (!whole || x == floor(x))) return 0;
    if (!cJSON_IsNumber(v)) snprintf(err, errlen, "%s%s is not a number", where, key);
    else
        snprintf(err, errlen, "%s%s %.15g is not a %snumber in [0, %.0f]%s", where, key, x, whole ? "whole " : "", max,
                 max == FIGURE_MAX ? " (2^53, the largest whole number a JSON number holds exactly)" : "");
    return -1;
}

/* The harness's memory categories at a peak (cli_torch.c reads these). */
static const char *const AT_PEAK_KEYS[] = {"params", "grads", "comm_buffers", "optimizer", "activations", "temporaries", "other"};

/* What one rank measured: the peaks, the split at them, the model states. */
static int rank_figures_ok(const cJSON *r, int i, double ranks, char *err, size_t errlen)
{
    char w[96];
    snprintf(w, sizeof w, "per_rank[%d].", i);
    if (!cJSON_IsObject(r)) {
        snprintf(err, errlen, "per_rank[%d] is not an object", i);
        return -1;
    }
    if (figure_ok(r, "rank", w, ranks - 1, 1, err, errlen) || figure_ok(r, "peak_bytes", w, FIGURE_MAX, 0, err, errlen) ||
        figure_ok(r, "at_peak_backend_internal", w, FIGURE_MAX, 0, err, errlen))
        return -1;
    static const char *const PARTS[] = {"at_peak", "model_states", "peak_excl_backend", "peak_excl_backend.at_peak"};
    for (size_t p = 0; p < sizeof PARTS / sizeof PARTS[0]; p++) {
        const cJSON *o = p < 3 ? cJSON_GetObjectItem(r, PARTS[p])
                               : cJSON_GetObjectItem(cJSON_GetObjectItem(r, "peak_excl_backend"), "at_peak");
        snprintf(w, sizeof w, "per_rank[%d].%s.", i, PARTS[p]);
        if (p == 2 && (figure_ok(o, "bytes", w, FIGURE_MAX, 0, err, errlen) || figure_ok(o, "bytes_upper", w, FIGURE_MAX, 0, err, errlen)))
            return -1;
        for (size_t k = 0; p != 2 && k < sizeof AT_PEAK_KEYS / sizeof AT_PEAK_KEYS[0]; k++)
            if (figure_ok(o, AT_PEAK_KEYS[k], w, FIGURE_MAX, 0, err, errlen)) return -1;
    }
    return 0;
}

int cli_harness_check_values(const cJSON *j, const CliExtra *flags, char *err, size_t errlen)
{
    const cJSON *su = cJSON_GetObjectItem(j, "setup"), *v;
    for (size_t i = 0; i < sizeof SETUP_FLAGS / sizeof SETUP_FLAGS[0]; i++)
        if ((v = cJSON_GetObjectItem(su, SETUP_FLAGS[i].key)) &&
            setup_value_ok(v, SETUP_FLAGS[i].key, SETUP_FLAGS[i].flag, SETUP_FLAGS[i].number, flags, err, errlen))
            return -1;
    if (figure_ok(su, "grad_as_bucket_view", "setup.", 1, 1, err, errlen)) return -1;   /* the switch: 0 or 1 */
    if (figure_ok(cJSON_GetObjectItem(j, "model"), "params", "model.", FIGURE_MAX, 1, err, errlen)) return -1;
    double ranks = cli_harness_num(su, "ranks", 64);
    int i = 0;
    cJSON_ArrayForEach(v, cJSON_GetObjectItem(j, "per_rank"))
        if (rank_figures_ok(v, i++, ranks, err, errlen)) return -1;
    i = 0;
    cJSON_ArrayForEach(v, cJSON_GetObjectItem(j, "collectives")) {
        char w[48];
        snprintf(w, sizeof w, "collectives[%d]", i++);
        if (!cJSON_IsObject(v)) {
            snprintf(err, errlen, "%s is not an object", w);
            return -1;
        }
        strcat(w, ".");
        if (figure_ok(v, "count", w, FIGURE_MAX, 1, err, errlen) || figure_ok(v, "payload_bytes", w, FIGURE_MAX, 0, err, errlen))
            return -1;
    }
    return 0;
}
