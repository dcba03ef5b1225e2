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

static int control_barrier(Comm *c, CommCounters *cc)
{
    comm_set_counters(c, NULL);
    int rc = comm_barrier(c);
    comm_set_counters(c, cc);
    return rc;
}

/* ---- phases ---- */

static const char *const MEM_PHASES[3] = {"forward", "backward", "step"};

static void enter(MemTracker *mt, CommCounters *cc, PhaseTimer *pt, int ph, const char *timer_name)
{
    prof_mem_set_phase(mt, MEM_PHASES[ph]);
    prof_comm_set_phase(cc, MEM_PHASES[ph]);
    prof_phase_begin(pt, timer_name);
}

static int phase_index(const char *name)
{
    for (int i = 0; i < 3; i++)
        if (strcmp(name, MEM_PHASES[i]) == 0) return i;
    return 3;
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

/* ---- the GPU: phase boundaries for CUPTI, and what the session measured ---- */

/* A CUPTI phase boundary: the compute stream is drained first, so the kernels the host queued
 * in the previous phase count there (collectives in flight on the comm stream run on). */
static void gpu_phase(Device *dev, ProfCupti *cs, const char *name)
{
    if (!cs) return;
    exec_device_sync_compute(dev);
    prof_cupti_set_phase(cs, name);
}

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

int exec_run(Comm *c, const ExecRunConfig *cfg, ExecRunResult *res)
{
    memset(res, 0, sizeof *res);
    int N = comm_size(c), rank = comm_rank(c);
    res->nranks = N;
    res->mem_limit = cfg->mem_limit;

    /* 1. every rank must run the same configuration */
    int bad = -1;
    if (comm_check_same(c, exec_run_config_hash(cfg), &bad)) {
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
    int B = cfg->micro_batch, T = cfg->seq > 0 ? cfg->seq : mc->max_seq, A = cfg->grad_accum, K = cfg->steps;
    if (gpt2_config_check(mc, msg, sizeof msg)) return fail_setup(res, EXEC_RUN_ERROR, msg);
    if (B < 1 || A < 1 || K < 1 || T < 1 || T > mc->max_seq) {
        snprintf(msg, sizeof msg, "need batch >= 1, grad-accum >= 1, steps >= 1 and 1 <= seq <= %d (got %d, %d, %d, %d)",
                 mc->max_seq, B, A, K, T);
        return fail_setup(res, EXEC_RUN_ERROR, msg);
    }
    res->params = gpt2_cfg_num_params(mc);
    res->tokens_per_step = (double)B * T * A * N;
    /* BLAS threads: this node's cores shared among its ranks (one each on 2 cores, 2 ranks) */
    if (cfg->device == DEVICE_HOST) {
        kern_blas_set_threads(comm_local_size(c));
        /* freed step buffers stay mapped for the next step: comm_create's host memory policy */
    }

    /* the GPU on several ranks collects over NCCL (every rank has the same cfg: clean) */
    int gpu = cfg->device == DEVICE_CUDA;
    Comm *dc = c;   /* the strategy's collectives */
    if (gpu && N > 1) {
        dc = cfg->data_comm;
        if (!dc || comm_kind(dc) != COMM_NCCL || comm_size(dc) != N)
            return fail_setup(res, EXEC_RUN_ERROR, "a GPU run on several ranks needs an NCCL communicator of the same "
                                                   "ranks (ExecRunConfig.data_comm)");
    }

    /* 2. setup: device, tracker, profiler, strategy, model */
    Device *dev = NULL;
    MemTracker *mt = NULL;
    CommCounters *cc = NULL;
    PhaseTimer *pt = NULL;
    ProfCupti *cs = NULL;
    ExecStrategy *s = NULL;
    ExecModel *m = NULL;
    int *tokens = NULL, *targets = NULL;
    char err[256] = "";
    dev = exec_device_create(cfg->device, comm_local_rank(c), err, sizeof err);
    mt = dev ? exec_device_tracker_create(dev, cfg->mem_limit) : NULL;
    cc = prof_comm_create(N);
    pt = prof_phase_create(0);
    res->loss = calloc((size_t)K, sizeof *res->loss);
    res->step_ms = calloc((size_t)K, sizeof *res->step_ms);
    res->step_phase_s = calloc((size_t)K * EXEC_RUN_PHASES, sizeof *res->step_phase_s);
    tokens = malloc((size_t)B * T * sizeof *tokens);
    targets = malloc((size_t)B * T * sizeof *targets);
    int ok = dev && mt && cc && pt && res->loss && res->step_ms && res->step_phase_s && tokens && targets;
    if (!ok) {
        /* on the host only memory can fail, alike on every rank; a GPU may fail on one rank
           alone, so a GPU run goes on to the setup agreement */
        fail_setup(res, EXEC_RUN_ERROR, *err ? err : "out of host memory");
        if (!gpu || !cc) goto done_local;
    }
    if (ok) {
        snprintf(res->device_name, sizeof res->device_name, "%s", exec_device_name(dev));
        if (gpu && cfg->cupti) {   /* before any tracked allocation: CUPTI sees them all */
            char cerr[200];
            if (!(cs = prof_cupti_start(0, cerr, sizeof cerr)))
                snprintf(res->cupti_note, sizeof res->cupti_note, "no CUPTI session: %s", cerr);
            gpu_phase(dev, cs, "setup");
        }
        comm_set_counters(c, cc);
        if (dc != c) {
            comm_set_counters(dc, cc);
            comm_set_stream(dc, exec_device_comm_stream(dev));
            comm_set_after_stream(dc, exec_device_stream(dev));
        }
        prof_mem_set_phase(mt, "setup");
        ExecStrategyOptions so = {cfg->strategy, cfg->bucket_bytes, 0, 0};
        ExecHooks hooks;
        ok = exec_strategy_create(&s, &so, dc, mt, cc, pt, err, sizeof err) == 0;
        if (ok) {
            exec_strategy_set_device(s, dev);
            exec_strategy_hooks(s, &hooks);
            ok = exec_gpt2_model_create_on(&m, mc, mt, dev, &hooks, s) == 0;
            if (!ok) snprintf(err, sizeof err, "cannot create the model (out of memory or invalid)");
        }
        if (ok && exec_strategy_bind(s, m, cfg->seed, A)) {
            ok = 0;
            snprintf(err, sizeof err, "%s", exec_strategy_error(s));
        }
        if (ok && gpu && (exec_device_sync_compute(dev) || exec_device_failed(dev))) {
            ok = 0;
            snprintf(err, sizeof err, "a CUDA call failed during setup (see the message above)");
        }
        if (!ok) classify_failure(res, mt, err, rank, 0);
    }
    /* every rank learns whether all could set up (nothing else is in flight: this is clean) */
    double mine_ok = ok, *all_ok = calloc((size_t)N, sizeof *all_ok);
    if (!all_ok || control_gather(c, cc, &mine_ok, 1, all_ok)) {
        free(all_ok);
        fail_setup(res, EXEC_RUN_ERROR, "the setup agreement between ranks failed");
        res->needs_abort = N > 1;
        goto done;
    }
    for (int r = 0; r < N && ok; r++)
        if (!all_ok[r]) {
            ok = 0;
            res->status = EXEC_RUN_ERROR;
            snprintf(res->message, sizeof res->message, "rank %d failed during setup (its report is on its stderr)", r);
        }
    free(all_ok);
    if (!ok) goto done;
    res->buckets = exec_strategy_buckets(s);
    res->shard_elems = exec_strategy_shard_elems(s);

    /* 3. the steps */
    if (control_barrier(c, cc)) {
        fail_setup(res, EXEC_RUN_ERROR, "the start barrier failed");
        res->needs_abort = N > 1;
        goto done;
    }
    prof_phase_reset(pt);   /* a common time origin for every rank's trace */
    CollStats before[COLL_OP_COUNT][3];
    memset(before, 0, sizeof before);
    double t_start = prof_clock_us(), steady_us = 0, steady_cpu_ms = 0;
    double phase_seen[EXEC_RUN_PHASES] = {0};   /* the phases' seconds up to the last step (a phase keeps its index) */
    if (cfg->progress && rank == 0) {
        fprintf(cfg->progress, "%6s %12s %10s %12s\n", "step", "loss", "time", "throughput");
        fprintf(cfg->progress, "%6s %12s %10s %12s\n", "-", "nats", "ms", "tokens/s");
        fflush(cfg->progress);
    }
    for (int step = 1; step <= K; step++) {
        stall_or_die(&cfg->fault, rank, step, comm_timeout(c));
        if (step == K)
            for (int op = 0; op < COLL_OP_COUNT; op++)
                for (int ph = 0; ph < 3; ph++) before[op][ph] = prof_comm_phase(cc, (CollOp)op, MEM_PHASES[ph]);
        double t0 = prof_clock_us(), cpu0 = process_cpu_ms();
        prof_phase_begin(pt, "step");
        exec_strategy_zero_grad(s);
        double loss_sum = 0, nonfinite = 0;
        const char *why = NULL;
        for (int a = 0; a < A && !why; a++) {
            /* step's global batch: B·N·A rows in N·A contiguous chunks, chunk a·N + r for
               micro-batch a of rank r, so the rows of a step do not depend on N or A */
            if (gpt2_synthetic_batch(cfg->seed, step - 1, B * N * A, a * N + rank, N * A, T, mc->vocab, tokens, targets)) {
                why = "cannot make the synthetic batch";
                break;
            }
            exec_strategy_begin_micro(s, a == A - 1);
            float loss = 0;
            ExecBatch batch = {tokens, targets, B, T};
            gpu_phase(dev, cs, "forward");
            enter(mt, cc, pt, 0, "forward");
            if (exec_model_forward(m, &batch, &loss)) why = exec_model_error(m);
            prof_phase_end(pt, "forward");
            if (why) break;
            loss_sum += loss;
            if (!isfinite(loss)) nonfinite = 1;
            gpu_phase(dev, cs, "backward");
            enter(mt, cc, pt, 1, "backward");
            if (exec_model_backward(m)) why = exec_model_error(m);
            else {
                gpu_phase(dev, cs, "comm");
                if (exec_strategy_end_backward(s)) why = exec_strategy_error(s);
            }
            prof_phase_end(pt, "backward");
        }
        if (!why) {
            gpu_phase(dev, cs, "optimizer");
            enter(mt, cc, pt, 2, "optimizer");
            ExecAdamW opt = {cfg->opt.lr, cfg->opt.beta1, cfg->opt.beta2, cfg->opt.eps, cfg->opt.weight_decay};
            if (exec_strategy_step(s, &opt, step)) why = exec_strategy_error(s);
            /* the step's time is the GPU's: wait for its last kernels */
            if (!why && gpu && (exec_device_sync_compute(dev) || exec_device_failed(dev)))
                why = "a CUDA call failed on the GPU (see the message above)";
            prof_phase_end(pt, "optimizer");
        }
        prof_phase_end(pt, "step");
        if (why) {
            /* A strategy hook's own reason is more precise than the model's "hook failed". */
            const char *detail = exec_strategy_error(s);
            classify_failure(res, mt, detail && *detail ? detail : why, rank, step);
            res->needs_abort = N > 1;
            goto done;
        }
        double mine[2] = {loss_sum, nonfinite}, *all = calloc((size_t)2 * N, sizeof *all);
        if (!all || control_gather(c, cc, mine, 2, all)) {
            free(all);
            classify_failure(res, mt, "the per-step loss exchange failed", rank, step);
            res->needs_abort = N > 1;
            goto done;
        }
        double gsum = 0;
        int bad_rank = -1;
        for (int r = 0; r < N; r++) {
            gsum += all[2 * r];
            if (all[2 * r + 1] != 0 && bad_rank < 0) bad_rank = r;
        }
        free(all);
        double t1 = prof_clock_us();
        res->loss[step - 1] = gsum / ((double)A * N);
        res->step_ms[step - 1] = (t1 - t0) / 1e3;
        res->steps_done = step;
        int np = 0;
        const PhaseStat *pn = prof_phase_stats(pt, &np);
        for (int j = 0; j < np && j < EXEC_RUN_PHASES; j++) {
            res->step_phase_s[(size_t)(step - 1) * EXEC_RUN_PHASES + j] = pn[j].seconds - phase_seen[j];
            phase_seen[j] = pn[j].seconds;
        }
        if (step > 1 || K == 1) {
            steady_us += t1 - t0;
            steady_cpu_ms += process_cpu_ms() - cpu0;
        }
        if (cfg->progress && rank == 0) {
            fprintf(cfg->progress, "%6d %12.6f %10.2f %12.0f\n", step, res->loss[step - 1], res->step_ms[step - 1],
                    res->tokens_per_step / ((t1 - t0) / 1e6));
            fflush(cfg->progress);
        }
        if (bad_rank >= 0 || !isfinite(res->loss[step - 1])) {
            res->status = EXEC_RUN_NONFINITE;
            res->fail_step = step;
            snprintf(res->message, sizeof res->message, "the loss is %s at step %d (first on rank %d); stopping",
                     isnan(res->loss[step - 1]) ? "NaN" : "infinite", step, bad_rank < 0 ? 0 : bad_rank);
            goto done;
        }
        if (step == 1) {
            res->peak_total_first = (double)prof_mem_peak_total(mt);
            if (K > 1) prof_mem_reset_peaks(mt);
        }
    }
    res->seconds = (prof_clock_us() - t_start) / 1e6;
    res->steady_ms = steady_us / 1e3 / (K > 1 ? K - 1 : 1);
    res->steady_cpu_ms = steady_cpu_ms / (K > 1 ? K - 1 : 1);
    if (cs) cupti_results(cs, mt, res);

    /* 4. measurements of every rank (rank 0 reports) */
    for (int op = 0; op < COLL_OP_COUNT; op++) {
        res->coll_total[op] = prof_comm_total(cc, (CollOp)op);
        for (int ph = 0; ph < 3; ph++) {
            CollStats now = prof_comm_phase(cc, (CollOp)op, MEM_PHASES[ph]), *d = &res->coll_step_phase[op][ph];
            d->count = now.count - before[op][ph].count;
            d->payload_bytes = now.payload_bytes - before[op][ph].payload_bytes;
            d->wire_bytes = now.wire_bytes - before[op][ph].wire_bytes;
            d->seconds = now.seconds - before[op][ph].seconds;
            res->coll_step[op].count += d->count;
            res->coll_step[op].payload_bytes += d->payload_bytes;
            res->coll_step[op].wire_bytes += d->wire_bytes;
            res->coll_step[op].seconds += d->seconds;
        }
    }
    const PhaseStat *ps = prof_phase_stats(pt, &res->nphases);
    if (res->nphases > EXEC_RUN_PHASES) res->nphases = EXEC_RUN_PHASES;
    memcpy(res->phases, ps, (size_t)res->nphases * sizeof *ps);

    enum { V_PEAK, V_FIRST, V_CAT, V_AT = V_CAT + MEM_CATEGORY_COUNT, V_PH = V_AT + MEM_CATEGORY_COUNT,
           V_ST = V_PH + 3, V_PHASE = V_ST + EXEC_STATE_COUNT, V_N };
    double v[V_N], *vall = calloc((size_t)V_N * N, sizeof *vall);
    size_t at[MEM_CATEGORY_COUNT];
    prof_mem_peak_breakdown(mt, at);
    v[V_PEAK] = (double)prof_mem_peak_total(mt);
    v[V_FIRST] = K == 1 ? v[V_PEAK] : res->peak_total_first;
    for (int k = 0; k < MEM_CATEGORY_COUNT; k++) {
        v[V_CAT + k] = (double)prof_mem_peak(mt, (MemCategory)k);
        v[V_AT + k] = (double)at[k];
    }
    for (int ph = 0; ph < 3; ph++) v[V_PH + ph] = (double)prof_mem_phase_peak(mt, MEM_PHASES[ph]);
    v[V_ST + EXEC_STATE_PARAMS] = (double)prof_mem_current(mt, MEM_PARAMS);
    v[V_ST + EXEC_STATE_GRADS] = (double)prof_mem_current(mt, MEM_GRADS);
    v[V_ST + EXEC_STATE_OPTIMIZER] = (double)prof_mem_current(mt, MEM_OPTIMIZER);
    v[V_PHASE] = phase_index(prof_mem_peak_phase(mt));
    if (!vall || control_gather(c, cc, v, V_N, vall)) {
        free(vall);
        fail_setup(res, EXEC_RUN_ERROR, "gathering the measurements failed");
        res->needs_abort = N > 1;
        goto done;
    }
    for (int r = 0; r < N; r++) {
        const double *w = vall + (size_t)r * V_N;
        if (w[V_PEAK] > res->peak_total) {
            res->peak_total = w[V_PEAK];
            res->peak_rank = r;
            memcpy(res->at_peak, w + V_AT, sizeof res->at_peak);
            int pi = (int)w[V_PHASE];
            snprintf(res->peak_phase, sizeof res->peak_phase, "%s", pi < 3 ? MEM_PHASES[pi] : "other");
        }
        if (w[V_FIRST] > res->peak_total_first) res->peak_total_first = w[V_FIRST];
        for (int k = 0; k < MEM_CATEGORY_COUNT; k++)
            if (w[V_CAT + k] > res->peak[k]) res->peak[k] = w[V_CAT + k];
        for (int ph = 0; ph < 3; ph++)
            if (w[V_PH + ph] > res->phase_peak[ph]) res->phase_peak[ph] = w[V_PH + ph];
        double st = 0;
        for (int k = 0; k < EXEC_STATE_COUNT; k++) st += w[V_ST + k];
        if (st > res->model_states) {
            res->model_states = st;
            memcpy(res->states, w + V_ST, sizeof res->states);
        }
    }
    free(vall);

    if (cfg->trace_path && write_trace(c, cc, pt, mt, res->cupti ? cs : NULL, gpu && cfg->cupti, cfg->trace_path, msg, sizeof msg))
        fail_setup(res, EXEC_RUN_ERROR, msg);
    if (cfg->dump_path) {
        float *full = rank == 0 ? malloc((size_t)res->params * sizeof *full) : NULL;
        int drc = (rank == 0 && !full) ? -1 : 0;
        if (exec_strategy_gather_params(s, full)) drc = -1;
        if (!drc && rank == 0) {
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
    /* rank 0 writes the files: every rank learns whether it could, so that none waits for it in
       the next run's collectives (validate runs strategy after strategy) */
    if ((cfg->trace_path || cfg->dump_path) && N > 1) {
        double wrote = res->status == EXEC_RUN_OK, *oks = calloc((size_t)N, sizeof *oks);
        if (!oks || control_gather(c, cc, &wrote, 1, oks)) {
            fail_setup(res, EXEC_RUN_ERROR, "the exchange after writing the output files failed");
            res->needs_abort = 1;
        } else {
            for (int r = 0; r < N && res->status == EXEC_RUN_OK; r++)
                if (oks[r] == 0) {
                    snprintf(msg, sizeof msg, "rank %d could not write its output files", r);
                    fail_setup(res, EXEC_RUN_ERROR, msg);
                }
        }
        free(oks);
    }

done:
    comm_set_counters(c, NULL);
    if (dc != c) {   /* the caller's communicator outlives this run's device and counters */
        comm_set_counters(dc, NULL);
        comm_set_stream(dc, NULL);
        comm_set_after_stream(dc, NULL);
    }
    exec_model_destroy(m);
    exec_strategy_destroy(s);
done_local:
    /* stopping CUPTI synchronizes the device: not with a collective stuck in flight (the
       caller aborts the job; the session dies with the process) */
    if (!(gpu && res->needs_abort)) prof_cupti_destroy(cs);
    free(tokens);
    free(targets);
    prof_phase_destroy(pt);
    prof_comm_destroy(cc);
    prof_mem_destroy(mt);
    exec_device_destroy(dev);
    return res->status;
}
