/* exec_run.c — the executor's run loop (see exec_run.h): setup, K optimizer steps under one
 * strategy, failure agreement, and the gathering of every rank's measurements, trace events
 * and (for tests) final parameters. */
#include "exec_run.h"

#include <cjson/cJSON.h>
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "exec_device.h"
#include "exec_gpt2_model.h"
#include "kern_blas.h"
#include "prof_export.h"
#include "prof_trace.h"

static const char *const STATUS_NAMES[] = {"ok", "config-mismatch", "out-of-memory", "non-finite-loss", "error"};
const char *exec_run_status_name(ExecRunStatus s)
{
    return (unsigned)s <= EXEC_RUN_ERROR ? STATUS_NAMES[s] : "unknown";
}

void exec_run_config_defaults(ExecRunConfig *c)
{
    memset(c, 0, sizeof *c);
    c->strategy = EXEC_DDP;
    c->micro_batch = 4;
    c->seq = 0;
    c->grad_accum = 1;
    c->steps = 10;
    c->seed = 1337;
    c->opt = (Gpt2AdamW){1e-3f, 0.9f, 0.999f, 1e-8f, 0.0f};
}

/* FNV-1a over the bytes of each field. */
static void h_bytes(unsigned long long *h, const void *p, size_t n)
{
    const unsigned char *b = p;
    for (size_t i = 0; i < n; i++) {
        *h ^= b[i];
        *h *= 1099511628211ull;
    }
}

/* Hash of everything that must agree between ranks (model, strategy, shapes, steps, buckets,
 * limit, seed, optimizer, device, cupti); not the output paths, the fault or data_comm. */
static unsigned long long exec_run_config_hash(const ExecRunConfig *c)
{
    unsigned long long h = 14695981039346656037ull;
    const Gpt2Config *m = &c->model;
    h_bytes(&h, m->name, strnlen(m->name, sizeof m->name));
    int ints[] = {m->n_layer, m->n_head, m->d_model, m->vocab, m->max_seq, (int)c->strategy,
                  c->micro_batch, c->seq > 0 ? c->seq : m->max_seq, c->grad_accum, c->steps,
                  (int)c->device, c->cupti};
    h_bytes(&h, ints, sizeof ints);
    double d[] = {c->bucket_bytes, (double)c->mem_limit, (double)c->seed, c->opt.lr, c->opt.beta1,
                  c->opt.beta2, c->opt.eps, c->opt.weight_decay};
    h_bytes(&h, d, sizeof d);
    return h;
}

void exec_run_result_free(ExecRunResult *r)
{
    if (!r) return;
    free(r->loss);
    free(r->step_ms);
    free(r->step_phase_s);
    free(r->report);
    free(r->cupti_json);
    r->loss = r->step_ms = r->step_phase_s = NULL;
    r->report = NULL;
    r->cupti_json = NULL;
}

/* ---- control traffic: not counted (it is not part of the training step) ---- */

static int control_gather(Comm *c, CommCounters *cc, const double *mine, int n, double *all)
{
    comm_set_counters(c, NULL);
    int rc = comm_all_gather(c, mine, all, (size_t)n, DT_F64, NULL);
    comm_set_counters(c, cc);
    return rc;
}

static int control_gather_bytes(Comm *c, CommCounters *cc, const void *mine, size_t bytes, void *all)
{
    comm_set_counters(c, NULL);
    int rc = comm_all_gather(c, mine, all, bytes, DT_U8, NULL);
    comm_set_counters(c, cc);
    return rc;
}

static int control_barrier(Comm *c, CommCounters *cc)
{
    comm_set_counters(c, NULL);
    int rc = comm_barrier(c);
    comm_set_counters(c, cc);
    return rc;
}

/* ---- the trace: every rank's spans and memory timeline, written by rank 0 ---- */

/* cs: this rank's CUPTI session (NULL: none); gpu_lanes: name the GPU lanes (every rank the
 * same, even one whose session did not start). */
static int write_trace(Comm *c, CommCounters *cc, PhaseTimer *pt, MemTracker *mt, const ProfCupti *cs,
                       int gpu_lanes, const char *path, char *msg, size_t msglen)
{
    int rank = comm_rank(c), N = comm_size(c), rc = 0;
    double origin = prof_phase_origin_us(pt);
    int ns = prof_export_spans(pt, rank, origin, NULL, 0), nm = prof_export_memory(mt, rank, origin, NULL, 0);
    int ng = cs ? prof_cupti_export(cs, rank, origin, NULL, 0) : 0;
    TraceEvent *mine = calloc((size_t)(ns + nm + ng) + 1, sizeof *mine);
    double *counts = calloc((size_t)N, sizeof *counts);
    size_t *bc = calloc((size_t)N, sizeof *bc), *bd = calloc((size_t)N, sizeof *bd);
    int *ic = calloc((size_t)N, sizeof *ic);
    const TraceEvent **ptrs = calloc((size_t)N, sizeof *ptrs);
    char *all = NULL;
    double n_mine = ns + nm + ng;
    if (!mine || !counts || !bc || !bd || !ic || !ptrs) {
        snprintf(msg, msglen, "out of host memory writing the trace");
        rc = -1;
        goto out;
    }
    prof_export_spans(pt, rank, origin, mine, ns);
    prof_export_memory(mt, rank, origin, mine + ns, nm);
    if (cs) prof_cupti_export(cs, rank, origin, mine + ns + nm, ng);   /* the GPU's lanes */
    if (control_gather(c, cc, &n_mine, 1, counts)) {
        snprintf(msg, msglen, "gathering the trace failed");
        rc = -1;
        goto out;
    }
    size_t total = 0;
    for (int r = 0; r < N; r++) {
        ic[r] = (int)counts[r];
        bc[r] = (size_t)ic[r] * sizeof(TraceEvent);
        bd[r] = total;
        total += bc[r];
    }
    all = malloc(total + 1);
    comm_set_counters(c, NULL);
    int grc = all ? comm_all_gather_v(c, mine, all, bc, bd, DT_U8) : -1;
    comm_set_counters(c, cc);
    if (grc) {
        snprintf(msg, msglen, "gathering the trace failed");
        rc = -1;
        goto out;
    }
    if (rank == 0) {
        FILE *f = fopen(path, "w");
        for (int r = 0; r < N; r++) ptrs[r] = (const TraceEvent *)(all + bd[r]);
        const char *lanes[CUPTI_LANE_END];
        for (int l = 0; l < CUPTI_LANE_END; l++)
            lanes[l] = l < PHASE_LANE_COUNT ? prof_phase_lane_name(l) : prof_cupti_lane_name(l);
        if (!f || prof_trace_write_ranks(f, ptrs, ic, N, lanes, gpu_lanes ? CUPTI_LANE_END : PHASE_LANE_COUNT) ||
            fclose(f)) {
            snprintf(msg, msglen, "cannot write the trace file '%s'", path);
            rc = -1;
        }
    }
out:
    free(mine);
    free(counts);
    free(bc);
    free(bd);
    free(ic);
    free(ptrs);
    free(all);
    return rc;
}

/* ---- the run ---- */

static int fail_setup(ExecRunResult *res, ExecRunStatus st, const char *msg)
{
    res->status = st;
    snprintf(res->message, sizeof res->message, "%s", msg);
    return st;
}

static char *oom_report(const MemTracker *mt, int rank)
{
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    if (!f) return NULL;
    prof_mem_print_oom(mt, f, rank);
    fclose(f);
    return buf;
}

/* Turns a failure inside a step (or during setup) into the result. */
static void classify_failure(ExecRunResult *res, MemTracker *mt, const char *why, int rank, int step)
{
    const MemOom *o = prof_mem_oom(mt);
    res->fail_step = step;
    if (o->happened) {
        res->status = EXEC_RUN_OOM;
        res->report = oom_report(mt, rank);
        snprintf(res->message, sizeof res->message,
                 "rank %d ran out of memory %s%.0d in phase %s (request of %zu bytes for '%s')", rank,
                 step ? "at step " : "during setup", step, o->phase, o->request, o->what);
    } else {
        res->status = EXEC_RUN_ERROR;
        snprintf(res->message, sizeof res->message, "rank %d failed %s%.0d: %s", rank,
                 step ? "at step " : "during setup", step, why && *why ? why : "(no reason given)");
    }
}

/* ---- the GPU: what the CUPTI session measured ---- */

/* Stops the session and copies its aggregates into res (rank 0 reports them). */
static void cupti_results(ProfCupti *cs, MemTracker *mt, ExecRunResult *res)
{
    if (prof_cupti_stop(cs)) {
        snprintf(res->cupti_note, sizeof res->cupti_note, "stopping the CUPTI session failed (see the message above)");
        return;
    }
    int n = 0;
    const ProfCuptiPhase *ph = prof_cupti_phases(cs, &n);
    res->cupti_nphases = n < 8 ? n : 8;
    memcpy(res->cupti_phase, ph, (size_t)res->cupti_nphases * sizeof *ph);
    res->cupti_total = prof_cupti_total(cs);
    res->cupti_memory = prof_cupti_memory(cs);
    res->cupti_mem_check = prof_cupti_check_mem(cs, mt, EXEC_CUPTI_MEM_TOLERANCE);
    res->cupti_dropped = prof_cupti_dropped_records(cs);
    cJSON *j = prof_cupti_json(cs, mt, EXEC_CUPTI_MEM_TOLERANCE);
    res->cupti_json = j ? cJSON_PrintUnformatted(j) : NULL;
    cJSON_Delete(j);
    res->cupti = 1;
}

static void stall_or_die(const ExecFault *f, int rank, int step, double timeout_s)
{
    if (f->kind == EXEC_FAULT_NONE || f->rank != rank || f->step != step) return;
    fprintf(stderr, "rank %d: --fault: %s at step %d\n", rank, f->kind == EXEC_FAULT_STALL ? "stalling" : "exiting", step);
    fflush(stderr);
    if (f->kind == EXEC_FAULT_EXIT) _exit(3);
    /* sleep well past every peer's timeout; the peers abort the job before this returns */
    for (double slept = 0; slept < 4 * timeout_s + 10; slept += 0.1) usleep(100000);
    _exit(3);
}

/* CPU time of this process, all threads, ms */
static double process_cpu_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec * 1e-6;
}


/* ---- the run ---- */

/* One run's state: what exec_run sets up, uses and tears down. */
typedef struct {
    Comm *c, *dc;                 /* control traffic; the strategy's collectives (NCCL on GPUs) */
    const ExecRunConfig *cfg;
    ExecRunResult *res;
    int N, rank, B, T, A, K, gpu;
    Device *dev;
    MemTracker *mt;
    CommCounters *cc;
    PhaseTimer *pt;
    ProfCupti *cs;
    ExecStrategy *s;
    ExecModel *m;
    int *tokens, *targets;        /* (B, T) int32: the micro-batch */
    int step;                     /* the step running (1-based), whose batch gpt2_batch makes */
    double steady_us, steady_cpu_ms;            /* steps 2..K (step 1 when K = 1) */
    double phase_seen[EXEC_PHASE_COUNT];        /* each phase's seconds up to the last step */
    CollStats before[COLL_COUNT][EXEC_PHASE_PARTS];   /* the counters before the last step */
} Run;

/* 1. Every rank must run the same configuration, with usable shapes. 0 to go on, else the status. */
static int check_config(Run *x)
{
    const ExecRunConfig *cfg = x->cfg;
    ExecRunResult *res = x->res;
    int bad = -1;
    if (comm_check_same(x->c, exec_run_config_hash(cfg), &bad)) {
        res->bad_rank = bad;
        if (bad < 0) return fail_setup(res, EXEC_RUN_ERROR, "the configuration check between ranks failed");
        res->status = EXEC_RUN_CONFIG_MISMATCH;
        snprintf(res->message, sizeof res->message,
                 "rank %d was started with a different configuration than rank 0 (model, strategy, "
                 "batch, sequence, accumulation, steps, buckets, memory limit, seed or optimizer): "
                 "give every rank the same flags", bad);
        return res->status;
    }
    char msg[256];
    const Gpt2Config *mc = &cfg->model;
    x->B = cfg->micro_batch, x->T = cfg->seq > 0 ? cfg->seq : mc->max_seq, x->A = cfg->grad_accum, x->K = cfg->steps;
    if (gpt2_config_check(mc, msg, sizeof msg)) return fail_setup(res, EXEC_RUN_ERROR, msg);
    if (x->B < 1 || x->A < 1 || x->K < 1 || x->T < 1 || x->T > mc->max_seq) {
        snprintf(msg, sizeof msg, "need batch >= 1, grad-accum >= 1, steps >= 1 and 1 <= seq <= %d (got %d, %d, %d, %d)",
                 mc->max_seq, x->B, x->A, x->K, x->T);
        return fail_setup(res, EXEC_RUN_ERROR, msg);
    }
    res->params = gpt2_cfg_num_params(mc);
    res->tokens_per_step = (double)x->B * x->T * x->A * x->N;
    /* BLAS threads: this node's cores shared among its ranks (one each on 2 cores, 2 ranks) */
    if (cfg->device == DEVICE_HOST) {
        kern_blas_set_threads(comm_local_size(x->c));
        /* freed step buffers stay mapped for the next step: comm_create's host memory policy */
    }
    /* the GPU on several ranks collects over NCCL (every rank has the same cfg: clean) */
    x->gpu = cfg->device == DEVICE_CUDA;
    if (x->gpu && x->N > 1) {
        x->dc = cfg->data_comm;
        if (!x->dc || comm_kind(x->dc) != COMM_NCCL || comm_size(x->dc) != x->N) {
            x->dc = x->c;
            return fail_setup(res, EXEC_RUN_ERROR, "a GPU run on several ranks needs an NCCL communicator of the same "
                                                   "ranks (ExecRunConfig.data_comm)");
        }
    }
    return 0;
}

/* The strategy and the model on this rank's device (the profiler is ready). 1 or 0 (err). */
static int set_up_model(Run *x, char *err, size_t errlen)
{
    const ExecRunConfig *cfg = x->cfg;
    if (x->gpu && cfg->cupti) {   /* before any tracked allocation: CUPTI sees them all */
        char cerr[200];
        if (!(x->cs = prof_cupti_start(0, cerr, sizeof cerr)))
            snprintf(x->res->cupti_note, sizeof x->res->cupti_note, "no CUPTI session: %s", cerr);
        else prof_cupti_set_phase(x->cs, "setup");
    }
    comm_set_counters(x->c, x->cc);
    if (x->dc != x->c) {
        comm_set_counters(x->dc, x->cc);
        comm_set_stream(x->dc, exec_device_comm_stream(x->dev));
        comm_set_after_stream(x->dc, exec_device_stream(x->dev));
    }
    prof_mem_set_phase(x->mt, "setup");
    ExecStrategyOptions so = {cfg->strategy, cfg->bucket_bytes, 0, 0};
    ExecHooks hooks;
    if (exec_strategy_create(&x->s, &so, x->dc, x->mt, x->cc, x->pt, err, errlen)) return 0;
    exec_strategy_set_device(x->s, x->dev);
    exec_strategy_hooks(x->s, &hooks);
    if (exec_gpt2_model_create_on(&x->m, &cfg->model, x->mt, x->dev, &hooks, x->s)) {
        snprintf(err, errlen, "cannot create the model (out of memory or invalid)");
        return 0;
    }
    if (exec_strategy_bind(x->s, x->m, cfg->seed, x->A)) {
        snprintf(err, errlen, "%s", exec_strategy_error(x->s));
        return 0;
    }
    if (x->gpu && (exec_device_sync_compute(x->dev) || exec_device_failed(x->dev))) {
        snprintf(err, errlen, "a CUDA call failed during setup (see the message above)");
        return 0;
    }
    return 1;
}

/* 2. Device, tracker, profiler, strategy and model on this rank. 1 when all is set up, 0 when
 * it failed here (classified in res), -1 when even the agreement cannot run: on the host only
 * memory can fail, alike on every rank; a GPU may fail on one rank alone, so a GPU run goes on
 * to the agreement. */
static int set_up(Run *x)
{
    ExecRunResult *res = x->res;
    int K = x->K;
    char err[256] = "";
    x->dev = exec_device_create(x->cfg->device, comm_local_rank(x->c), err, sizeof err);
    x->mt = x->dev ? exec_device_tracker_create(x->dev, x->cfg->mem_limit) : NULL;
    x->cc = prof_comm_create(x->N);
    x->pt = prof_phase_create(0);
    res->loss = calloc((size_t)K, sizeof *res->loss);
    res->step_ms = calloc((size_t)K, sizeof *res->step_ms);
    res->step_phase_s = calloc((size_t)K * EXEC_PHASE_COUNT, sizeof *res->step_phase_s);
    x->tokens = malloc((size_t)x->B * x->T * sizeof *x->tokens);
    x->targets = malloc((size_t)x->B * x->T * sizeof *x->targets);
    if (!(x->dev && x->mt && x->cc && x->pt && res->loss && res->step_ms && res->step_phase_s && x->tokens &&
          x->targets)) {
        fail_setup(res, EXEC_RUN_ERROR, *err ? err : "out of host memory");
        return x->gpu && x->cc ? 0 : -1;
    }
    snprintf(res->device_name, sizeof res->device_name, "%s", exec_device_name(x->dev));
    int ok = set_up_model(x, err, sizeof err);
    if (!ok) classify_failure(res, x->mt, err, x->rank, 0);
    return ok;
}

/* Every rank learns whether all could set up (nothing else is in flight: this is clean).
 * 0 when all did. */
static int agree_setup(Run *x, int ok)
{
    ExecRunResult *res = x->res;
    double mine = ok, *all = calloc((size_t)x->N, sizeof *all);
    if (!all || control_gather(x->c, x->cc, &mine, 1, all)) {
        free(all);
        fail_setup(res, EXEC_RUN_ERROR, "the setup agreement between ranks failed");
        res->needs_abort = x->N > 1;
        return -1;
    }
    for (int r = 0; r < x->N && ok; r++)
        if (!all[r]) {
            ok = 0;
            res->status = EXEC_RUN_ERROR;
            snprintf(res->message, sizeof res->message, "rank %d failed during setup (its report is on its stderr)", r);
        }
    free(all);
    if (!ok) return -1;
    res->buckets = exec_strategy_buckets(x->s);
    res->shard_elems = exec_strategy_shard_elems(x->s);
    return 0;
}

/* Micro-batch a of the step: the step's global batch is B·N·A synthetic rows in N·A contiguous
 * chunks, chunk a·N + r for micro-batch a of rank r, so the rows of a step do not depend on N
 * or A. */
static int gpt2_batch(void *ctx, int a, ExecBatch *b)
{
    Run *x = ctx;
    if (gpt2_synthetic_batch(x->cfg->seed, x->step - 1, x->B * x->N * x->A, a * x->N + x->rank, x->N * x->A, x->T,
                             x->cfg->model.vocab, x->tokens, x->targets))
        return -1;
    *b = (ExecBatch){x->tokens, x->targets, x->B, x->T};
    return 0;
}

/* After a step: one control exchange (not counted: it is not part of the training step) of the
 * loss and a non-finite flag, so every rank agrees to stop on NaN/inf and rank 0 has the global
 * mean loss; the step's times, its progress line. 0 to go on, -1 when the run stops. */
static int record_step(Run *x, int step, const ExecStepResult *sr, double t0, double cpu0)
{
    ExecRunResult *res = x->res;
    int N = x->N, K = x->K;
    double mine[2] = {sr->loss_sum, sr->nonfinite}, *all = calloc((size_t)2 * N, sizeof *all);
    if (!all || control_gather(x->c, x->cc, mine, 2, all)) {
        free(all);
        classify_failure(res, x->mt, "the per-step loss exchange failed", x->rank, step);
        res->needs_abort = N > 1;
        return -1;
    }
    double gsum = 0;
    int bad_rank = -1;
    for (int r = 0; r < N; r++) {
        gsum += all[2 * r];
        if (all[2 * r + 1] != 0 && bad_rank < 0) bad_rank = r;
    }
    free(all);
    double t1 = prof_clock_us();
    res->loss[step - 1] = gsum / ((double)x->A * N);
    res->step_ms[step - 1] = (t1 - t0) / 1e3;
    res->steps_done = step;
    for (int p = 0; p < EXEC_PHASE_COUNT; p++) {
        double s = prof_phase_seconds(x->pt, exec_phase_name((ExecPhase)p));
        res->step_phase_s[(size_t)(step - 1) * EXEC_PHASE_COUNT + p] = s - x->phase_seen[p];
        x->phase_seen[p] = s;
    }
    if (step > 1 || K == 1) {
        x->steady_us += t1 - t0;
        x->steady_cpu_ms += process_cpu_ms() - cpu0;
    }
    if (x->cfg->progress && x->rank == 0) {
        fprintf(x->cfg->progress, "%6d %12.6f %10.2f %12.0f\n", step, res->loss[step - 1], res->step_ms[step - 1],
                res->tokens_per_step / ((t1 - t0) / 1e6));
        fflush(x->cfg->progress);
    }
    if (bad_rank >= 0 || !isfinite(res->loss[step - 1])) {
        res->status = EXEC_RUN_NONFINITE;
        res->fail_step = step;
        snprintf(res->message, sizeof res->message, "the loss is %s at step %d (first on rank %d); stopping",
                 isnan(res->loss[step - 1]) ? "NaN" : "infinite", step, bad_rank < 0 ? 0 : bad_rank);
        return -1;
    }
    if (step == 1) {   /* the first step created the lazy state: the steady state's peaks from here */
        res->peak_total_first = (double)prof_mem_peak_total(x->mt);
        if (K > 1) prof_mem_reset_peaks(x->mt);
    }
    return 0;
}

/* 3. The steps. 0 when all ran. */
static int run_steps(Run *x)
{
    const ExecRunConfig *cfg = x->cfg;
    ExecRunResult *res = x->res;
    if (control_barrier(x->c, x->cc)) {
        fail_setup(res, EXEC_RUN_ERROR, "the start barrier failed");
        res->needs_abort = x->N > 1;
        return -1;
    }
    prof_phase_reset(x->pt);   /* a common time origin for every rank's trace */
    double t_start = prof_clock_us();
    if (cfg->progress && x->rank == 0) {
        fprintf(cfg->progress, "%6s %12s %10s %12s\n", "step", "loss", "time", "throughput");
        fprintf(cfg->progress, "%6s %12s %10s %12s\n", "-", "nats", "ms", "tokens/s");
        fflush(cfg->progress);
    }
    ExecStep st = {x->m, x->s, {cfg->opt.lr, cfg->opt.beta1, cfg->opt.beta2, cfg->opt.eps, cfg->opt.weight_decay},
                   x->A, gpt2_batch, x, x->mt, x->cc, x->pt, x->dev, x->cs};
    for (int step = 1; step <= x->K; step++) {
        stall_or_die(&cfg->fault, x->rank, step, comm_timeout(x->c));
        if (step == x->K)
            for (int op = 0; op < COLL_COUNT; op++)
                for (int ph = 0; ph < EXEC_PHASE_PARTS; ph++)
                    x->before[op][ph] = prof_comm_phase(x->cc, (CollKind)op, exec_phase_planner_name((ExecPhase)ph));
        double t0 = prof_clock_us(), cpu0 = process_cpu_ms();
        x->step = step;
        ExecStepResult sr;
        if (exec_step(&st, step, &sr)) {
            classify_failure(res, x->mt, sr.why, x->rank, step);
            res->needs_abort = x->N > 1;
            return -1;
        }
        if (record_step(x, step, &sr, t0, cpu0)) return -1;
    }
    int K = x->K;
    res->seconds = (prof_clock_us() - t_start) / 1e6;
    res->steady_ms = x->steady_us / 1e3 / (K > 1 ? K - 1 : 1);
    res->steady_cpu_ms = x->steady_cpu_ms / (K > 1 ? K - 1 : 1);
    if (x->cs) cupti_results(x->cs, x->mt, res);
    return 0;
}

/* The collectives (rank 0's: every rank does the same), over the run and in the last step by
 * part, and the phase timer's phases. */
static void collect_comm_and_phases(Run *x)
{
    ExecRunResult *res = x->res;
    for (int op = 0; op < COLL_COUNT; op++) {
        res->coll_total[op] = prof_comm_total(x->cc, (CollKind)op);
        for (int ph = 0; ph < EXEC_PHASE_PARTS; ph++) {
            CollStats now = prof_comm_phase(x->cc, (CollKind)op, exec_phase_planner_name((ExecPhase)ph));
            const CollStats *b = &x->before[op][ph];
            CollStats *d = &res->coll_step_phase[op][ph];
            d->count = now.count - b->count;
            d->payload_bytes = now.payload_bytes - b->payload_bytes;
            d->wire_bytes = now.wire_bytes - b->wire_bytes;
            d->seconds = now.seconds - b->seconds;
            res->coll_step[op].count += d->count;
            res->coll_step[op].payload_bytes += d->payload_bytes;
            res->coll_step[op].wire_bytes += d->wire_bytes;
            res->coll_step[op].seconds += d->seconds;
        }
    }
    const PhaseStat *ps = prof_phase_stats(x->pt, &res->nphases);
    if (res->nphases > EXEC_RUN_PHASES) res->nphases = EXEC_RUN_PHASES;
    memcpy(res->phases, ps, (size_t)res->nphases * sizeof *ps);
    for (int p = 0; p < EXEC_PHASE_COUNT; p++)
        res->phase_count[p] = prof_phase_count(x->pt, exec_phase_name((ExecPhase)p));
}

/* 4. Every rank's memory, one control exchange: each value the maximum over ranks, the split
 * and the phase (the tracker's name) at the highest peak. 0 or -1. */
static int gather_memory(Run *x)
{
    enum { V_PEAK, V_FIRST, V_CAT, V_AT = V_CAT + MEM_CATEGORY_COUNT, V_PH = V_AT + MEM_CATEGORY_COUNT,
           V_ST = V_PH + EXEC_PHASE_PARTS, V_N = V_ST + EXEC_STATE_COUNT };
    typedef struct {
        double v[V_N];
        char peak_phase[32];
    } RankMemory;
    ExecRunResult *res = x->res;
    MemTracker *mt = x->mt;
    RankMemory mine, *all = calloc((size_t)x->N, sizeof *all);
    memset(&mine, 0, sizeof mine);
    double *v = mine.v;
    size_t at[MEM_CATEGORY_COUNT];
    prof_mem_peak_breakdown(mt, at);
    v[V_PEAK] = (double)prof_mem_peak_total(mt);
    v[V_FIRST] = x->K == 1 ? v[V_PEAK] : res->peak_total_first;
    for (int k = 0; k < MEM_CATEGORY_COUNT; k++) {
        v[V_CAT + k] = (double)prof_mem_peak(mt, (MemCategory)k);
        v[V_AT + k] = (double)at[k];
    }
    for (int ph = 0; ph < EXEC_PHASE_PARTS; ph++)
        v[V_PH + ph] = (double)prof_mem_phase_peak(mt, exec_phase_planner_name((ExecPhase)ph));
    v[V_ST + EXEC_STATE_PARAMS] = (double)prof_mem_current(mt, MEM_PARAMS);
    v[V_ST + EXEC_STATE_GRADS] = (double)prof_mem_current(mt, MEM_GRADS);
    v[V_ST + EXEC_STATE_OPTIMIZER] = (double)prof_mem_current(mt, MEM_OPTIMIZER);
    snprintf(mine.peak_phase, sizeof mine.peak_phase, "%s", prof_mem_peak_phase(mt));
    if (!all || control_gather_bytes(x->c, x->cc, &mine, sizeof mine, all)) {
        free(all);
        fail_setup(res, EXEC_RUN_ERROR, "gathering the measurements failed");
        res->needs_abort = x->N > 1;
        return -1;
    }
    for (int r = 0; r < x->N; r++) {
        const double *w = all[r].v;
        if (w[V_PEAK] > res->peak_total) {
            res->peak_total = w[V_PEAK];
            res->peak_rank = r;
            memcpy(res->at_peak, w + V_AT, sizeof res->at_peak);
            snprintf(res->peak_phase, sizeof res->peak_phase, "%s", all[r].peak_phase);
        }
        if (w[V_FIRST] > res->peak_total_first) res->peak_total_first = w[V_FIRST];
        for (int k = 0; k < MEM_CATEGORY_COUNT; k++)
            if (w[V_CAT + k] > res->peak[k]) res->peak[k] = w[V_CAT + k];
        for (int ph = 0; ph < EXEC_PHASE_PARTS; ph++)
            if (w[V_PH + ph] > res->phase_peak[ph]) res->phase_peak[ph] = w[V_PH + ph];
        double st = 0;
        for (int k = 0; k < EXEC_STATE_COUNT; k++) st += w[V_ST + k];
        if (st > res->model_states) {
            res->model_states = st;
            memcpy(res->states, w + V_ST, sizeof res->states);
        }
    }
    free(all);
    return 0;
}

/* 5. The trace and the parameter dump (rank 0 writes them); every rank learns whether rank 0
 * could, so that none waits for it in the next run's collectives (validate runs strategy after
 * strategy). */
static void write_outputs(Run *x)
{
    const ExecRunConfig *cfg = x->cfg;
    ExecRunResult *res = x->res;
    char msg[256];
    if (cfg->trace_path && write_trace(x->c, x->cc, x->pt, x->mt, res->cupti ? x->cs : NULL, x->gpu && cfg->cupti,
                                       cfg->trace_path, msg, sizeof msg))
        fail_setup(res, EXEC_RUN_ERROR, msg);
    if (cfg->dump_path) {
        float *full = x->rank == 0 ? malloc((size_t)res->params * sizeof *full) : NULL;
        int drc = (x->rank == 0 && !full) ? -1 : 0;
        if (exec_strategy_gather_params(x->s, full)) drc = -1;
        if (!drc && x->rank == 0) {
            FILE *f = fopen(cfg->dump_path, "wb");
            if (!f || fwrite(full, sizeof *full, (size_t)res->params, f) != (size_t)res->params) drc = -1;
            if (f && fclose(f)) drc = -1;
        }
        free(full);
        if (drc) {
            snprintf(msg, sizeof msg, "cannot write the parameter dump '%s'", cfg->dump_path);
            fail_setup(res, EXEC_RUN_ERROR, msg);
        }
    }
    if ((cfg->trace_path || cfg->dump_path) && x->N > 1) {
        double wrote = res->status == EXEC_RUN_OK, *oks = calloc((size_t)x->N, sizeof *oks);
        if (!oks || control_gather(x->c, x->cc, &wrote, 1, oks)) {
            fail_setup(res, EXEC_RUN_ERROR, "the exchange after writing the output files failed");
            res->needs_abort = 1;
        } else {
            for (int r = 0; r < x->N && res->status == EXEC_RUN_OK; r++)
                if (oks[r] == 0) {
                    snprintf(msg, sizeof msg, "rank %d could not write its output files", r);
                    fail_setup(res, EXEC_RUN_ERROR, msg);
                }
        }
        free(oks);
    }
}

static void tear_down(Run *x)
{
    comm_set_counters(x->c, NULL);
    if (x->dc != x->c) {   /* the caller's communicator outlives this run's device and counters */
        comm_set_counters(x->dc, NULL);
        comm_set_stream(x->dc, NULL);
        comm_set_after_stream(x->dc, NULL);
    }
    exec_model_destroy(x->m);
    exec_strategy_destroy(x->s);
    /* stopping CUPTI synchronizes the device: not with a collective stuck in flight (the caller
       aborts the job; the session dies with the process) */
    if (!(x->gpu && x->res->needs_abort)) prof_cupti_destroy(x->cs);
    free(x->tokens);
    free(x->targets);
    prof_phase_destroy(x->pt);
    prof_comm_destroy(x->cc);
    prof_mem_destroy(x->mt);
    exec_device_destroy(x->dev);
}

int exec_run(Comm *c, const ExecRunConfig *cfg, ExecRunResult *res)
{
    memset(res, 0, sizeof *res);
    Run x;
    memset(&x, 0, sizeof x);
    x.c = x.dc = c;
    x.cfg = cfg;
    x.res = res;
    x.N = comm_size(c);
    x.rank = comm_rank(c);
    res->nranks = x.N;
    res->mem_limit = cfg->mem_limit;
    if (check_config(&x)) return res->status;
    int ok = set_up(&x);
    if (ok >= 0 && agree_setup(&x, ok) == 0 && run_steps(&x) == 0) {
        collect_comm_and_phases(&x);
        if (gather_memory(&x) == 0) write_outputs(&x);
    }
    tear_down(&x);
    return res->status;
}
