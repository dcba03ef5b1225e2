/* plan_sim.c — the simulated step (plan_sim.h): the step account's work and transfers
 * (plan_step.h) scheduled on a compute stream and a FIFO communication stream, point by point.
 * Each transfer says when it is issued and who waits for it (StepSched); the scheduler knows
 * nothing of strategies. Times in seconds. docs/formulas.md "Time". */
#include "plan_sim.h"
#include "plan_dim_pp.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "plan_cost.h"
#include "plan_step.h"
#include "plan_dim_tp.h"

typedef struct {
    SimResult *r;
    int record;
    int oom;
    int last_compute;    /* the last compute op recorded (-1: none), which lookback stretches */
} Rec;

static void rec_op(Rec *rc, const char *name, const char *layer, SimLane lane, double start,
                   double dur, double bytes) {
    if (!rc->record || dur <= 0) return;
    SimResult *r = rc->r;
    if (r->n_ops == r->cap_ops) {
        int cap = r->cap_ops ? 2 * r->cap_ops : 256;
        SimOp *p = realloc(r->ops, (size_t)cap * sizeof(*p));
        if (!p) { rc->oom = 1; return; }
        r->ops = p;
        r->cap_ops = cap;
    }
    SimOp *o = &r->ops[r->n_ops++];
    snprintf(o->name, sizeof(o->name), "%s %s", name, layer);
    o->lane = lane;
    o->start = start;
    o->dur = dur;
    o->bytes = bytes;
    if (lane == LANE_COMPUTE) rc->last_compute = r->n_ops - 1;
}

/* The communication stream: FIFO, one collective at a time. Where a transfer steals compute
 * (plan_coll_steal: NCCL's CTAs on a GPU's SMs, the cores on CPU ranks) its busy intervals are
 * kept, so that compute overlapping them can be slowed. */
typedef struct {
    double free_at, busy;
    double *iv;          /* [start, end, steal) triples in issue order (only when stealing) */
    int n_iv, cap_iv, first;
    int keep, oom;
} Stream;

static double comm_issue(Stream *cs, Rec *rc, double issue, double dur, double steal, const char *what,
                         const char *layer, double bytes) {
    double start = fmax(issue, cs->free_at);
    cs->free_at = start + dur;
    cs->busy += dur;
    if (cs->keep && dur > 0 && steal > 0) {
        if (cs->n_iv == cs->cap_iv) {
            int cap = cs->cap_iv ? 2 * cs->cap_iv : 64;
            double *q = realloc(cs->iv, (size_t)cap * 3 * sizeof(*q));
            if (!q) cs->oom = 1;
            else { cs->iv = q; cs->cap_iv = cap; }
        }
        if (cs->n_iv < cs->cap_iv) {
            cs->iv[3 * cs->n_iv] = start;
            cs->iv[3 * cs->n_iv + 1] = start + dur;
            cs->iv[3 * cs->n_iv + 2] = steal;
            cs->n_iv++;
        }
    }
    rec_op(rc, what, layer, LANE_COMM, start, dur, bytes);
    return cs->free_at;
}

/* A compute op of dur seconds from t: its duration, stretched by each overlapping collective's
 * steal x the time it overlaps (compute only moves forward, so intervals that ended before t are
 * skipped for good). Without steal it is dur itself, so compute sums do not depend on where the
 * op starts. */
static double compute_dur(Stream *cs, double t, double dur) {
    if (!cs->keep) return dur;
    double end = t + dur, lost = 0;
    while (cs->first < cs->n_iv && cs->iv[3 * cs->first + 1] <= t) cs->first++;
    for (int k = cs->first; k < cs->n_iv && cs->iv[3 * k] < end; k++)
        lost += cs->iv[3 * k + 2] * (fmin(end, cs->iv[3 * k + 1]) - fmax(t, cs->iv[3 * k]));
    return dur + lost;
}

/* The account read once, per point: its work (at its micro-batch) and transfers. */
typedef struct SimPrep {
    const Step *st;      /* the account (borrowed) */
    const ModelSpec *m;  /* its layers: the rank's view (its tp share, its pp stage) */
    const ClusterSpec *c;   /* the whole cluster: the links' rates, the GPUs */
    int L;
    int *xs, *xo;        /* the transfers of point p: xo[xs[p] .. xs[p+1]) */
    double *xdur;        /* [n_xfer] seconds of each transfer (all its collectives) */
    double *xsteal;      /* [n_xfer] compute seconds lost per second it runs (plan_coll_steal) */
    double *fwd, *bwd;   /* [L] compute seconds of the micro-batch */
    double *fix_every, *fix_last;   /* [L] fixed work after layer i's backward (engine copies) */
    double *h2d, *d2h;   /* [L] host copies beside layer i's gathers / reductions (param offload) */
    int h2d_bwd;         /* the host copies come up before backward too (units released after forward) */
    double end_every, end_last;     /* fixed work once backward's transfers are done */
    double zero_s, opt_s;           /* before the step's first forward; the optimizer (+ its host copy) */
    double overlap_s, overlap_n;    /* optimizer offload: gradient copy per copy, copies per step */
    double steal, issue_s;          /* the measured steal (host copies too; 0 on GPUs) */
    int stealing;                   /* some transfer steals: keep the streams' intervals */
    double tokens_per_sample, flops_per_micro;
} SimPrep;

static void work_at(SimPrep *P, const StepWork *w) {
    int layer;
    PointKind k = plan_step_point_kind(P->L, w->point, &layer);
    if (w->scale == WORK_BATCH) {
        if (k == PT_FWD) P->fwd[layer] += w->seconds;
        else if (k == PT_BWD) P->bwd[layer] += w->seconds;
        P->flops_per_micro += w->flops;
        return;
    }
    if (k == PT_START) P->zero_s += w->seconds;
    else if (k == PT_BWD) (w->micro == MICRO_LAST ? P->fix_last : P->fix_every)[layer] += w->seconds;
    else if (k == PT_REDUCE1) *(w->micro == MICRO_LAST ? &P->end_last : &P->end_every) += w->seconds;
    else if (k == PT_STEP) P->opt_s += w->seconds;
}

/* Host copies of CPU offload (their seconds at the host link): spread over the layers by
   parameters (param offload), overlapping backward, or after the CPU step. */
static void host_at(SimPrep *P, const StepXfer *x) {
    double psi = 0;
    for (int i = 0; i < P->L; i++) psi += (double)P->m->layers[i].params;
    if (x->sched == SCHED_HOST_SPREAD) {
        for (int i = 0; i < P->L && psi > 0; i++) {
            double share = (double)P->m->layers[i].params / psi;
            if (x->kind == XFER_H2D) P->h2d[i] += x->seconds * share / x->count;
            else P->d2h[i] += x->seconds * share / x->count;
        }
        if (x->kind == XFER_H2D) P->h2d_bwd = x->wait > 1;
    } else if (x->sched == SCHED_HOST_OVERLAP) {
        P->overlap_n = x->count;
        P->overlap_s = x->seconds / x->count;
    } else {
        P->opt_s += x->seconds;
    }
}

static int prep_alloc(SimPrep *P) {
    int L = P->L > 0 ? P->L : 1, np = P->st->n_points, nx = P->st->n_xfer > 0 ? P->st->n_xfer : 1;
    P->fwd = calloc((size_t)(6 * L), sizeof(double));
    P->xs = calloc((size_t)np + 1, sizeof(int));
    P->xo = malloc(sizeof(int) * (size_t)nx);
    P->xdur = calloc((size_t)(2 * nx), sizeof(double));
    if (!P->fwd || !P->xs || !P->xo || !P->xdur) return -1;
    P->xsteal = P->xdur + nx;
    P->bwd = P->fwd + L; P->fix_every = P->fwd + 2 * L; P->fix_last = P->fwd + 3 * L;
    P->h2d = P->fwd + 4 * L; P->d2h = P->fwd + 5 * L;
    return 0;
}

static void prep_free(SimPrep *P) {
    free(P->fwd);
    free(P->xs);
    free(P->xo);
    free(P->xdur);
}

/* Reads st once: work by layer, transfers by point with their seconds on c's links. */
static int prepare(SimPrep *P, const Step *st) {
    memset(P, 0, sizeof *P);
    P->st = st;
    P->m = &st->view.m;
    P->c = &st->view.full;
    P->L = st->view.m.n_layers;
    if (prep_alloc(P)) { prep_free(P); return -1; }
    const ClusterSpec *c = P->c;
    P->steal = c->comm_steal > 0 ? c->comm_steal : 0;
    P->issue_s = c->coll_issue_s > 0 ? c->coll_issue_s : 0;
    P->tokens_per_sample = st->tokens_per_sample;
    for (int w = 0; w < st->n_work; w++) work_at(P, &st->work[w]);
    CollPrice last = PLAN_COLL_PRICE_NONE;   /* plan_coll_seconds_last */
    for (int e = 0; e < st->n_xfer; e++) {   /* transfers by point, in the order the rules wrote them */
        const StepXfer *x = &st->xfer[e];
        P->xs[x->point + 1]++;
        if (x->kind != XFER_COLL) host_at(P, x);
        else if (x->group > 1 && x->count > 0) {
            P->xdur[e] = x->count * plan_coll_seconds_last(c, &last, (CollKind)x->op, x->payload / x->count, x->group,
                                                           x->crosses);
            P->xsteal[e] = plan_coll_steal(c, x->crosses);
            if (P->xsteal[e] > 0) P->stealing = 1;
        }
    }
    if (P->steal > 0) P->stealing = 1;
    for (int p = 0; p < st->n_points; p++) P->xs[p + 1] += P->xs[p];
    int *fill = calloc((size_t)st->n_points, sizeof(int));
    if (!fill) { prep_free(P); return -1; }
    for (int e = 0; e < st->n_xfer; e++) P->xo[P->xs[st->xfer[e].point] + fill[st->xfer[e].point]++] = e;
    free(fill);
    return 0;
}

typedef struct {
    const SimPrep *P;
    Rec *rc;
    double *fwd_end, *bwd_end;
    double *ready;       /* [n_points] when the transfers a point waits for are done */
    double (*ran)[COLL_COUNT];      /* collectives issued, per purpose and op (NULL: not counted) */
    double (*ran_bytes)[COLL_COUNT];   /* their payload bytes */
    double chain_done;   /* when the last chained transfer of the micro-step is done (StepXfer.chain) */
} Run;

/* What one micro-step took: phase walls (compute and the waits inside) and their compute. */
typedef struct {
    double fwd, bwd;          /* wall seconds */
    double fwd_c, bwd_c;      /* compute seconds (stretched by steal) */
} Micro;

/* A collective issued to run behind compute costs the issuing rank's compute this much (CPU
 * ranks: the hand-over to the progress thread and its wake-up; 0 unless measured). */
static double issue_cost(const SimPrep *P, double t, double *acc) {
    *acc += P->issue_s;
    return t + P->issue_s;
}

/* A compute op on the compute stream from t: recorded, counted, its end returned. */
static double compute(Run *R, Stream *cs, const char *what, const char *layer, double t, double dur, double *acc) {
    double d = compute_dur(cs, t, dur);
    rec_op(R->rc, what, layer, LANE_COMPUTE, t, d, 0);
    *acc += d;
    return t + d;
}

static int active(const StepXfer *x, int sync) {
    return x->kind == XFER_COLL && (x->micro == MICRO_EVERY || (x->micro == MICRO_LAST && sync));
}

/* A short name for the trace: the layer, or what the transfer moves. */
static const char *xfer_where(const SimPrep *P, const StepXfer *x) {
    switch (x->purpose) {
    case PURPOSE_GRAD_BUCKETS: return "bucket";
    case PURPOSE_BUFFERS: return "buffers";
    case PURPOSE_SYNCBN_STATS: case PURPOSE_SYNCBN_GRADS: return "syncbn";
    case PURPOSE_UPDATED_PARAMS: case PURPOSE_PERSISTENT_PARAMS: return "params";
    case PURPOSE_GRAD_NORM: return "norm";
    case PURPOSE_OVERFLOW_FLAG: return "flag";
    default: break;
    }
    if (x->root) return "root";
    int layer;
    plan_step_point_kind(P->L, x->point, &layer);
    return layer >= 0 && layer < P->L ? P->m->layers[layer].name : "step";
}

/* The trace's name of a collective: tensor parallel's are told apart from the data-parallel ones. */
static const char *xfer_op_name(const StepXfer *x) {
    static const char *const TP_NAMES[COLL_COUNT] = {"tp_all_reduce", "tp_reduce_scatter", "tp_all_gather",
                                                      "tp_broadcast", "tp_send_recv", "tp_all_to_all", "tp_all_gather_v", "tp_barrier"};
    int tp = x->purpose == PURPOSE_TP_ACTS || x->purpose == PURPOSE_TP_LOGITS || x->purpose == PURPOSE_TP_REPLICA_GRADS;
    return tp ? TP_NAMES[x->op] : coll_name((CollKind)x->op);
}

static double issue(Run *R, Stream *cs, const StepXfer *x, int e, double at) {
    if (R->ran) {
        R->ran[x->purpose][x->op] += x->count;
        R->ran_bytes[x->purpose][x->op] += x->payload;
    }
    return comm_issue(cs, R->rc, at, R->P->xdur[e], R->P->xsteal[e], xfer_op_name(x), xfer_where(R->P, x), x->payload);
}

/* A prefetch issued at `at`, when the compute before point p started, and done at `done`: that
   compute (from `at` to t) was priced before the prefetch was on the stream, so the part of it the
   prefetch overlaps is stretched now, by its steal (compute_dur's rule, looking back). */
static double lookback(Run *R, int e, double done, double at, double t, double *acc) {
    double ov = fmin(done, t) - fmax(done - R->P->xdur[e], at);
    double lost = ov > 0 ? R->P->xsteal[e] * ov : 0;
    *acc += lost;
    if (lost > 0 && R->rc->record && R->rc->last_compute >= 0) R->rc->r->ops[R->rc->last_compute].dur += lost;
    return lost;
}

/* Before point p's compute: blocking transfers, then the ones issued now (prefetches at the start
   of the previous compute, prev < 0: none yet in this pass), then the wait for p's own. */
static double before(Run *R, Stream *cs, int p, int layer, double t, double prev, int sync, double *acc) {
    const SimPrep *P = R->P;
    if (P->h2d[layer] > 0 && (p == plan_step_point(P->L, PT_FWD, layer) || P->h2d_bwd))
        R->ready[p] = fmax(R->ready[p], comm_issue(cs, R->rc, prev >= 0 ? prev : t, P->h2d[layer], P->steal, "copy_h2d",
                                                   P->m->layers[layer].name, 0));
    for (int q = P->xs[p]; q < P->xs[p + 1]; q++) {
        int e = P->xo[q];
        const StepXfer *x = &P->st->xfer[e];
        if (!active(x, sync) || P->xdur[e] <= 0) continue;
        if (x->sched == SCHED_SYNC_BEFORE) t = issue(R, cs, x, e, t);
        else if (x->sched == SCHED_ASYNC_BEFORE || x->sched == SCHED_PREFETCH) {
            double at = x->sched == SCHED_PREFETCH && prev >= 0 ? prev : t;
            double done = issue(R, cs, x, e, at);
            t += lookback(R, e, done, at, t, acc);
            if (x->charge) t = issue_cost(P, t, acc);
            int w = x->wait >= 0 ? x->wait : p;
            R->ready[w] = fmax(R->ready[w], done);
        }
    }
    return fmax(t, R->ready[p]);
}

/* After point p's compute: blocking transfers (SyncBN), then, once the end is recorded, the ones
   that run behind the next compute. */
static double after(Run *R, Stream *cs, int p, int layer, double t, int sync, int async, double *acc) {
    const SimPrep *P = R->P;
    for (int q = P->xs[p]; q < P->xs[p + 1]; q++) {
        int e = P->xo[q];
        const StepXfer *x = &P->st->xfer[e];
        if (!active(x, sync) || P->xdur[e] <= 0) continue;
        if (!async && x->sched == SCHED_SYNC_AFTER) t = issue(R, cs, x, e, t);
        else if (async && x->sched == SCHED_ASYNC_AFTER) {
            double done = issue(R, cs, x, e, t);
            if (x->charge) t = issue_cost(P, t, acc);
            if (x->chain) {   /* the compute after it waits for the previous one */
                t = fmax(t, R->chain_done);
                R->chain_done = done;
            }
        }
    }
    if (async && P->d2h[layer] > 0 && p == plan_step_point(P->L, PT_BWD, layer))
        comm_issue(cs, R->rc, t, P->d2h[layer], P->steal, "copy_d2h", P->m->layers[layer].name, 0);
    return t;
}

/* One micro-step from t0; sync = gradients are reduced this micro-step. Returns when all its
 * compute and communication are done (backward waits for its transfers at the end). */
static double micro_step(Run *R, Stream *cs, double t0, int sync, Micro *mo) {
    const SimPrep *P = R->P;
    const ModelSpec *m = P->m;
    int L = P->L;
    double t = t0, prev = -1;
    memset(R->ready, 0, sizeof(double) * (size_t)P->st->n_points);
    R->chain_done = 0;
    for (int i = 0; i < L; i++) {
        int p = plan_step_point(L, PT_FWD, i);
        t = before(R, cs, p, i, t, prev, sync, &mo->fwd_c);
        prev = t;
        t = compute(R, cs, "fwd", m->layers[i].name, t, P->fwd[i], &mo->fwd_c);
        t = after(R, cs, p, i, t, sync, 0, &mo->fwd_c);
        if (R->fwd_end) R->fwd_end[i] = t;
        t = after(R, cs, p, i, t, sync, 1, &mo->fwd_c);
    }
    mo->fwd += t - t0;
    double t_bwd = t;
    prev = -1;
    for (int i = L - 1; i >= 0; i--) {
        int p = plan_step_point(L, PT_BWD, i);
        t = before(R, cs, p, i, t, prev, sync, &mo->bwd_c);
        prev = t;
        t = compute(R, cs, "bwd", m->layers[i].name, t, P->bwd[i], &mo->bwd_c);
        double fix = P->fix_every[i] + (sync ? P->fix_last[i] : 0);
        if (fix > 0) t = compute(R, cs, "copy", m->layers[i].name, t, fix, &mo->bwd_c);
        t = after(R, cs, p, i, t, sync, 0, &mo->bwd_c);
        if (R->bwd_end) R->bwd_end[i] = t;
        t = after(R, cs, p, i, t, sync, 1, &mo->bwd_c);
    }
    double end = t > cs->free_at ? t : cs->free_at;
    double fix = P->end_every + (sync ? P->end_last : 0);
    if (fix > 0) end = compute(R, cs, "copy", "grads", end, fix, &mo->bwd_c);
    mo->bwd += end - t_bwd;
    return end;
}

typedef struct {
    Run *R;
    SimResult *r;
    Rec *rc;
} MemCtx;

static void on_moment(void *ctx, PhaseKind ph, int layer, const double term[TERM_COUNT], double total) {
    MemCtx *mc = ctx;
    SimResult *r = mc->r;
    double t = ph == PHASE_FORWARD ? mc->R->fwd_end[layer]
             : ph == PHASE_BACKWARD ? mc->R->bwd_end[layer] : r->step_s;
    if (r->n_mem == r->cap_mem) {
        int cap = r->cap_mem ? 2 * r->cap_mem : 256;
        SimMem *p = realloc(r->mem, (size_t)cap * sizeof(*p));
        if (!p) { mc->rc->oom = 1; return; }
        r->mem = p;
        r->cap_mem = cap;
    }
    SimMem *s = &r->mem[r->n_mem++];
    s->t = t;
    memcpy(s->term, term, sizeof(s->term));
    s->total = total;
    if (total > r->mem_peak) r->mem_peak = total;
}

/* The optimizer step after the micro-steps: what the gradient copies to the host left exposed,
   the step's blocking collectives (the norm before, the parameter gathers after), its compute. */
static double step_tail(Run *R, Stream *cs, double t_end, Micro *mo, SimResult *out) {
    const SimPrep *P = R->P;
    if (P->overlap_s > 0) {   /* gradient copies to the host: what backward does not hide */
        double bwd = 0;
        for (int i = 0; i < P->L; i++) bwd += P->bwd[i];
        double exposed = P->overlap_s > bwd ? P->overlap_s - bwd : 0;
        rec_op(R->rc, "copy_d2h", "grads", LANE_COMM, t_end, exposed, 0);
        t_end += exposed * P->overlap_n;
        mo->bwd += exposed * P->overlap_n;
    }
    double t_opt = t_end;
    int s = plan_step_point(P->L, PT_STEP, 0);
    for (int pass = 0; pass < 2; pass++) {
        for (int q = P->xs[s]; q < P->xs[s + 1]; q++) {
            int e = P->xo[q];
            const StepXfer *x = &P->st->xfer[e];
            if (x->kind == XFER_COLL && P->xdur[e] > 0 && x->sched == (pass ? SCHED_SYNC_AFTER : SCHED_SYNC_BEFORE))
                t_end = issue(R, cs, x, e, t_end);
        }
        if (pass == 0) {
            rec_op(R->rc, "optimizer", "step", LANE_COMPUTE, t_end, P->opt_s, 0);
            t_end += P->opt_s;
        }
    }
    out->opt_s = t_end - t_opt;
    return t_end;
}

/* The samples one step trains over the cluster: the tp ranks of a group (and the pp stages of a
   pipeline) train the same samples, so gpus / (tp x pp) data-parallel replicas. */
static double step_samples(const Step *st) {
    const TrainSpec *vt = &st->view.t;
    return (double)vt->micro_batch * (double)vt->grad_accum * (double)st->view.full.gpus / st->view.tp / st->view.pp;
}

/* The step of P on the two streams: grad_accum micro-steps (the first K - 1 without gradient
   sync, identical: one simulated and scaled), the optimizer step, the pipeline bubble. */
static int run(const SimPrep *P, int record, SimResult *out) {
    memset(out, 0, sizeof(*out));
    const TrainSpec *vt = &P->st->view.t;
    Rec rc = {out, record, 0, -1};
    double *ready = calloc((size_t)P->st->n_points, sizeof(double));
    Run R = {P, &rc, NULL, NULL, ready, out->coll_count, out->coll_payload, 0};
    if (record) {
        R.fwd_end = calloc((size_t)(P->L > 0 ? P->L : 1), sizeof(double));
        R.bwd_end = calloc((size_t)(P->L > 0 ? P->L : 1), sizeof(double));
    }
    if (!ready || (record && (!R.fwd_end || !R.bwd_end))) {
        free(R.fwd_end); free(R.bwd_end); free(ready);
        return -1;
    }
    double K = (double)vt->grad_accum;
    Stream cs = {0};
    cs.keep = P->stealing;
    Micro mo = {0};
    double t_end = P->zero_s;   /* the engine's gradient zeroing (0 otherwise) */
    rec_op(&rc, "zero", "grads", LANE_COMPUTE, 0, P->zero_s, 0);
    if (vt->grad_accum > 1) {   /* micro-steps without gradient sync are identical: one, scaled */
        Rec quiet = {out, 0, 0, -1};
        double q_ran[PURPOSE_COUNT][COLL_COUNT] = {{0}}, q_bytes[PURPOSE_COUNT][COLL_COUNT] = {{0}};
        Run Q = {P, &quiet, NULL, NULL, ready, q_ran, q_bytes, 0};
        Stream cs1 = {0};
        cs1.keep = cs.keep;
        Micro m1 = {0};
        double t1 = micro_step(&Q, &cs1, 0, 0, &m1);
        for (int u = 0; u < PURPOSE_COUNT; u++)
            for (int o = 0; o < COLL_COUNT; o++) {
                out->coll_count[u][o] += q_ran[u][o] * (K - 1);
                out->coll_payload[u][o] += q_bytes[u][o] * (K - 1);
            }
        t_end += t1 * (K - 1);
        mo.fwd = m1.fwd * (K - 1); mo.bwd = m1.bwd * (K - 1);
        mo.fwd_c = m1.fwd_c * (K - 1); mo.bwd_c = m1.bwd_c * (K - 1);
        cs.busy = cs1.busy * (K - 1);
        cs.free_at = t_end;
        if (cs1.oom) rc.oom = 1;
        free(cs1.iv);
    }
    t_end = micro_step(&R, &cs, t_end, 1, &mo);
    t_end = step_tail(&R, &cs, t_end, &mo, out);
    /* --pp: the pipeline's fill and drain. Each rank idles pp - 1 slots of a micro-step's forward
       and backward, of one of its V stages under the interleaved schedule: (pp - 1) (t_f + t_b) / V,
       a fraction (pp - 1) / (V M + pp - 1) of the pipelined part (Narayanan et al. 2021 §2.2:
       1F1B as GPipe, Huang et al. 2019 §2.2; §2.2.2: interleaved); closed form, at the walls of the
       planned rank (the most loaded by memory: plan_dim_pp.c) */
    int pp = P->st->view.pp;
    if (pp > 1 && K > 0) {
        int V = P->st->view.pp_chunks > 1 ? P->st->view.pp_chunks : 1;
        out->pp_bubble_s = (double)(pp - 1) / ((double)V * K) * (mo.fwd + mo.bwd);
        t_end += out->pp_bubble_s;
    }
    out->step_s = t_end;
    out->fwd_s = mo.fwd;
    out->bwd_s = mo.bwd;
    out->fwd_compute_s = mo.fwd_c;
    out->bwd_compute_s = mo.bwd_c;
    out->opt_compute_s = P->opt_s;
    out->zero_s = P->zero_s;
    out->compute_s = P->zero_s + mo.fwd_c + mo.bwd_c + P->opt_s;
    out->comm_s = cs.busy;
    /* exposed communication: the wall beyond compute, less the pipeline bubble (idle, not
       communication; reported apart as pp_bubble_s) */
    double busy_end = t_end - out->pp_bubble_s;
    out->exposed_comm_s = busy_end > out->compute_s ? busy_end - out->compute_s : 0;
    /* the tp ranks of a group (and the pp stages of a pipeline) train the same samples:
       gpus / (tp x pp) data-parallel replicas */
    double samples = step_samples(P->st);
    out->tokens_per_s = t_end > 0 ? samples * P->tokens_per_sample / t_end : 0;
    out->flops_per_step = P->flops_per_micro * K;
    if (cs.oom) rc.oom = 1;
    free(cs.iv);
    if (record) {   /* the memory over the step: the same account's moments, at the simulated times */
        MemResult mr;
        memset(&mr, 0, sizeof mr);
        MemCtx mc = {&R, out, &rc};
        plan_step_replay(P->st, P->c, &mr, on_moment, &mc);
    }
    free(R.fwd_end);
    free(R.bwd_end);
    free(ready);
    return rc.oom ? -1 : 0;
}

int plan_sim_step(const Step *st, int record, SimResult *out) {
    memset(out, 0, sizeof(*out));
    if (st->failed) return st->status ? st->status : -1;
    if (st->built_for & PLAN_STEP_MEMORY) return PLAN_ERR_REFUSED;   /* a memory-only probe has no work */
    if (record && (st->built_for & PLAN_STEP_TIME)) return PLAN_ERR_REFUSED;   /* nor a time-only one memory */
    if (st->built_for & PLAN_STEP_COMPUTE) return PLAN_ERR_REFUSED;   /* nor a compute-only one at all */
    SimPrep P;
    if (prepare(&P, st)) return -1;
    int rc = run(&P, record, out);
    prep_free(&P);
    return rc;
}

/* run()'s step is at least the engine's zeroing, its micro-steps' layer compute and the
   optimizer's compute: each micro-step's compute stream runs every layer's forward and backward
   one after the other (before/after only wait, compute_dur only stretches), the first K - 1
   scaled from one, after the zeroing; the tail adds the optimizer's work after them (and its
   collectives, the host copies and the bubble add to it). The sum is taken here in another order
   than run's, so it is lowered by 1e-12 (far above the rounding of a few thousand terms, ~n x
   1.1e-16). */
double plan_sim_tokens_ceiling(const Step *st) {
    if (st->failed || (st->built_for & PLAN_STEP_MEMORY)) return INFINITY;
    int L = st->view.m.n_layers, layer;
    double layers = 0, fixed = 0;
    for (int w = 0; w < st->n_work; w++) {   /* what work_at reads of each */
        const StepWork *x = &st->work[w];
        if (x->seconds <= 0) continue;
        PointKind k = plan_step_point_kind(L, x->point, &layer);
        if (x->scale == WORK_BATCH && (k == PT_FWD || k == PT_BWD)) layers += x->seconds;
        else if (x->scale != WORK_BATCH && (k == PT_START || k == PT_STEP)) fixed += x->seconds;
    }
    double floor_s = (fixed + layers * (double)st->view.t.grad_accum) * (1 - 1e-12);
    return floor_s > 0 ? step_samples(st) * st->tokens_per_sample / floor_s : INFINITY;
}

int plan_sim(const ModelSpec *m, const TrainSpec *t, const ClusterSpec *c, StrategyKind k,
             int record, SimResult *out) {
    Step st;
    plan_step_build(&st, m, t, c, k);
    int rc = plan_sim_step(&st, record, out);
    plan_step_free(&st);
    return rc;
}

void plan_sim_free(SimResult *r) {
    free(r->ops);
    free(r->mem);
    r->ops = NULL;
    r->mem = NULL;
    r->n_ops = r->n_mem = r->cap_ops = r->cap_mem = 0;
}
