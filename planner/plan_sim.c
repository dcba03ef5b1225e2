/* plan_sim.c — see plan_sim.h. Times in seconds. */
#include "plan_sim.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "plan_comm.h"

static int is_transformer(const ModelSpec *m) {
    return m->arch == ARCH_DECODER || m->arch == ARCH_ENCODER || m->arch == ARCH_ENC_DEC;
}

double plan_layer_fwd_flops(const ModelSpec *m, int i, const TrainSpec *t) {
    const LayerSpec *l = &m->layers[i];
    double b = (double)t->micro_batch;
    double s = (double)(t->seq > 0 ? t->seq : (m->max_seq > 0 ? m->max_seq : 1));
    if (l->fwd_flops > 0) return l->fwd_flops * b;             /* CNN layers, given per sample */
    if (!is_transformer(m)) return 2.0 * (double)l->params * b * s;
    double h = (double)m->d_model, attn = (double)m->n_head * (double)m->d_head;
    switch (l->kind) {
    /* 2 FLOPs per weight per token, + QK^T and AV: 2 x 2 s d per token (full, not halved) */
    case LAYER_BLOCK: return b * s * (2.0 * (double)l->params + 4.0 * s * attn);
    case LAYER_HEAD: return b * s * 2.0 * h * (double)m->vocab + 2.0 * (double)l->params * b * s;
    case LAYER_LINEAR: return 2.0 * (double)l->params * b;
    default: return 0;                                         /* lookups, norms: memory-bound */
    }
}

typedef struct {
    SimResult *r;
    int record;
    int oom;
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
}

/* The communication stream: FIFO, one collective at a time. */
typedef struct {
    double free_at, busy;
} Stream;

static double comm_issue(Stream *cs, Rec *rc, double issue, double dur, const char *what,
                         const char *layer, double bytes) {
    double start = fmax(issue, cs->free_at);
    cs->free_at = start + dur;
    cs->busy += dur;
    rec_op(rc, what, layer, LANE_COMM, start, dur, bytes);
    return cs->free_at;
}

typedef struct {
    const ModelSpec *m;
    const TrainSpec *t;
    const ClusterSpec *c;
    const Strategy *s;
    const PrecisionSpec *p;
    MemSizes z;
    double rate;             /* FLOP/s achieved */
    int multi_node, group_crosses;
    int gathers_fwd, gathers_bwd, rs_per_unit;
    double *fwd_end, *bwd_end;   /* per layer, last simulated micro-step (record only) */
} Sim;

static int is_root(const Sim *S, int i) {
    return is_transformer(S->m) && S->m->layers[i].kind != LAYER_BLOCK;
}

/* One micro-step starting at t0; sync = gradients are reduced this micro-step. Returns the time
 * at which all its compute and communication are done; adds compute time to *compute. */
static double micro_step(Sim *S, Rec *rc, Stream *cs, double t0, int sync, double *compute) {
    const ModelSpec *m = S->m;
    const ClusterSpec *c = S->c;
    int L = m->n_layers;
    int64_t N = c->gpus, n = S->z.n;
    double pb = S->p->param_bytes, gb = S->p->grad_bytes, t = t0;
    int ddp = S->s->buffers == BUF_DDP_BUCKETS, ds = S->s->buffers == BUF_DS_REDUCE;
    int syncbn = S->t->syncbn && N > 1;

    /* ---- forward ---- */
    if (ddp && N > 1 && plan_model_buffers(m) > 0) {       /* broadcast_buffers, synchronous */
        double pay = (double)plan_model_buffers(m) * 4;
        t = comm_issue(cs, rc, t, plan_coll_seconds(c, PCOLL_BROADCAST, pay, N, S->multi_node),
                       "broadcast", "buffers", pay);
    }
    double root_ready = t;
    if (S->gathers_fwd && S->z.root_unit > 0 && S->s->buffers != BUF_DS_STAGE3) {
        double pay = S->z.root_unit * pb;
        root_ready = comm_issue(cs, rc, t, plan_coll_seconds(c, PCOLL_ALL_GATHER, pay, n, S->group_crosses),
                                "all_gather", "root", pay);
    }
    /* gathers are issued one unit ahead: unit i's gather when unit i-1's compute starts */
    double issue = t, prev_ready = root_ready;
    for (int i = 0; i < L; i++) {
        const LayerSpec *l = &m->layers[i];
        double ready = (i == 0) ? root_ready : t;
        if (S->gathers_fwd && l->params > 0 && (!is_root(S, i) || S->s->buffers == BUF_DS_STAGE3)) {
            double pay = (double)l->params * pb;
            ready = comm_issue(cs, rc, issue, plan_coll_seconds(c, PCOLL_ALL_GATHER, pay, n, S->group_crosses),
                               "all_gather", l->name, pay);
        }
        t = fmax(t, fmax(ready, prev_ready));
        issue = t;
        double f = plan_layer_fwd_flops(m, i, S->t) / S->rate;
        rec_op(rc, "fwd", l->name, LANE_COMPUTE, t, f, 0);
        t += f;
        *compute += f;
        if (syncbn && l->bn_channels > 0) {   /* all-gather [mean, invstd, count], then apply */
            double pay = (2.0 * (double)l->bn_channels + 1) * 4 * (double)N;
            t = comm_issue(cs, rc, t, plan_coll_seconds(c, PCOLL_ALL_GATHER, pay, N, S->multi_node),
                           "all_gather", "syncbn", pay);
        }
        if (S->fwd_end) S->fwd_end[i] = t;
    }

    /* ---- backward ---- */
    double bucket = 0, cap = ddp ? PLAN_DDP_FIRST_BUCKET : PLAN_DS_REDUCE_BUCKET * gb;
    int reduce_now = ddp ? sync : (ds ? ((S->s->shard & SHARD_GRAD) ? 1 : sync) : 0);
    issue = t;
    for (int i = L - 1; i >= 0; i--) {
        const LayerSpec *l = &m->layers[i];
        double ready = t;
        if (S->gathers_bwd && l->params > 0 && (!is_root(S, i) || S->s->buffers == BUF_DS_STAGE3)) {
            double pay = (double)l->params * pb;
            ready = comm_issue(cs, rc, issue, plan_coll_seconds(c, PCOLL_ALL_GATHER, pay, n, S->group_crosses),
                               "all_gather", l->name, pay);
        }
        t = fmax(t, ready);
        issue = t;
        double f = plan_layer_fwd_flops(m, i, S->t) / S->rate;
        double bwd = 2 * f + ((S->t->act_ckpt == CKPT_FULL && l->kind == LAYER_BLOCK) ? f : 0);
        rec_op(rc, "bwd", l->name, LANE_COMPUTE, t, bwd, 0);
        t += bwd;
        *compute += bwd;
        if (syncbn && l->bn_channels > 0) {   /* all-reduce [sum_dy, sum_dy_xmu] */
            double pay = 2.0 * (double)l->bn_channels * 4;
            t = comm_issue(cs, rc, t, plan_coll_seconds(c, PCOLL_ALL_REDUCE, pay, N, S->multi_node),
                           "all_reduce", "syncbn", pay);
        }
        if (S->bwd_end) S->bwd_end[i] = t;
        if (N <= 1 || l->params == 0) continue;
        if (S->rs_per_unit && !(is_root(S, i) && S->s->buffers != BUF_DS_STAGE3)) {
            double pay = (double)l->params * gb;
            comm_issue(cs, rc, t, plan_coll_seconds(c, PCOLL_REDUCE_SCATTER, pay, n, S->group_crosses),
                       "reduce_scatter", l->name, pay);
            if (S->s->group_node && N > n)
                comm_issue(cs, rc, t, plan_coll_seconds(c, PCOLL_ALL_REDUCE, ceil((double)l->params / n) * gb,
                           (N + n - 1) / n, 1), "all_reduce", l->name, ceil((double)l->params / n) * gb);
        }
        if ((ddp || ds) && reduce_now) {      /* buckets fill in gradient-ready order */
            bucket += (double)l->params * gb;
            if (bucket >= cap) {
                PlanCollOp op = ddp ? PCOLL_ALL_REDUCE : PCOLL_REDUCE_SCATTER;
                comm_issue(cs, rc, t, plan_coll_seconds(c, op, bucket, N, S->multi_node),
                           ddp ? "all_reduce" : "reduce_scatter", "bucket", bucket);
                bucket = 0;
                if (ddp) cap = PLAN_DDP_BUCKET;
            }
        }
    }
    if (N > 1 && S->rs_per_unit && S->z.root_unit > 0 && S->s->buffers != BUF_DS_STAGE3) {
        double pay = S->z.root_unit * gb;
        comm_issue(cs, rc, t, plan_coll_seconds(c, PCOLL_REDUCE_SCATTER, pay, n, S->group_crosses),
                   "reduce_scatter", "root", pay);
        if (S->s->group_node && N > n)
            comm_issue(cs, rc, t, plan_coll_seconds(c, PCOLL_ALL_REDUCE, ceil(S->z.root_unit / n) * gb,
                       (N + n - 1) / n, 1), "all_reduce", "root", ceil(S->z.root_unit / n) * gb);
    }
    if ((ddp || ds) && reduce_now && bucket > 0 && N > 1) {
        PlanCollOp op = ddp ? PCOLL_ALL_REDUCE : PCOLL_REDUCE_SCATTER;
        comm_issue(cs, rc, t, plan_coll_seconds(c, op, bucket, N, S->multi_node),
                   ddp ? "all_reduce" : "reduce_scatter", "bucket", bucket);
    }
    return fmax(t, cs->free_at);
}

typedef struct {
    Sim *S;
    Rec *rc;
} MemCtx;

static void on_moment(void *ctx, PhaseKind ph, int layer, const double term[TERM_COUNT], double total) {
    MemCtx *mc = ctx;
    SimResult *r = mc->rc->r;
    double t = ph == PHASE_FORWARD ? mc->S->fwd_end[layer]
             : ph == PHASE_BACKWARD ? mc->S->bwd_end[layer] : r->step_s;
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

int plan_sim(const ModelSpec *m, const TrainSpec *t, const ClusterSpec *c, StrategyKind sk,
             int record, SimResult *out) {
    memset(out, 0, sizeof(*out));
    Sim S;
    memset(&S, 0, sizeof(S));
    S.m = m;
    S.t = t;
    S.c = c;
    S.s = plan_strategy(sk);
    S.p = plan_precision(t->precision);
    plan_memory_sizes(m, t, c, sk, &S.z);
    S.rate = c->gpu.peak_tflops[S.p->peak] * 1e12 * c->mfu;
    if (S.rate <= 0) S.rate = c->gpu.peak_tflops[PEAK_FP32] * 1e12 * c->mfu;
    S.multi_node = plan_cluster_nodes(c) > 1;
    S.group_crosses = S.s->group_node ? 0 : S.multi_node;
    int sharded_params = c->gpus > 1 && (S.s->shard & SHARD_PARAM);
    S.gathers_fwd = sharded_params;
    S.gathers_bwd = sharded_params && S.s->buffers != BUF_FSDP_GRAD_OP;
    S.rs_per_unit = sharded_params;
    Rec rc = {out, record, 0};
    if (record) {
        S.fwd_end = calloc((size_t)m->n_layers, sizeof(double));
        S.bwd_end = calloc((size_t)m->n_layers, sizeof(double));
        if (!S.fwd_end || !S.bwd_end) { free(S.fwd_end); free(S.bwd_end); return -1; }
    }
    Stream cs = {0, 0};
    double compute = 0, t_end = 0;
    int64_t K = t->grad_accum;
    /* micro-steps without gradient sync are identical: simulate one and scale */
    if (K > 1) {
        Rec quiet = {out, 0, 0};
        double *fe = S.fwd_end, *be = S.bwd_end;
        S.fwd_end = S.bwd_end = NULL;
        double c1 = 0;
        Stream cs1 = {0, 0};
        double t1 = micro_step(&S, &quiet, &cs1, 0, 0, &c1);
        S.fwd_end = fe;
        S.bwd_end = be;
        t_end = t1 * (double)(K - 1);
        compute = c1 * (double)(K - 1);
        cs.busy = cs1.busy * (double)(K - 1);
        cs.free_at = t_end;
    }
    t_end = micro_step(&S, &rc, &cs, t_end, 1, &compute);
    /* optimizer step: memory-bound over the local optimizer elements */
    const OptimizerSpec *o = plan_optimizer(t->optimizer);
    double o_local = (S.s->shard & SHARD_OPT) ? S.z.psi_shard : S.z.psi;
    double bytes = o_local * (2.0 * (S.p->param_bytes + S.p->master_bytes) + S.p->grad_bytes +
                              2.0 * o->states * S.p->state_bytes);
    double opt = bytes / (c->gpu.mem_bw * 1e9);
    rec_op(&rc, "optimizer", "step", LANE_COMPUTE, t_end, opt, 0);
    t_end += opt;
    compute += opt;
    if (c->gpus > 1 && S.s->buffers == BUF_DS_REDUCE) {     /* gather the updated parameters */
        double pay = S.z.psi * S.p->param_bytes;
        t_end = comm_issue(&cs, &rc, t_end, plan_coll_seconds(c, PCOLL_ALL_GATHER, pay, c->gpus, S.multi_node),
                           "all_gather", "params", pay);
    }
    out->step_s = t_end;
    out->compute_s = compute;
    out->comm_s = cs.busy;
    out->exposed_comm_s = fmax(0, t_end - compute);
    double tokens = (double)t->micro_batch * (double)K * (double)c->gpus;
    if (is_transformer(m)) tokens *= (double)(t->seq > 0 ? t->seq : m->max_seq);
    out->tokens_per_s = t_end > 0 ? tokens / t_end : 0;
    for (int i = 0; i < m->n_layers; i++) out->flops_per_step += 3 * plan_layer_fwd_flops(m, i, t);
    out->flops_per_step *= (double)K;
    if (record) {
        MemResult mr;
        MemCtx mc = {&S, &rc};
        plan_memory_walk(m, t, c, sk, &mr, on_moment, &mc);
    }
    free(S.fwd_end);
    free(S.bwd_end);
    return rc.oom ? -1 : 0;
}

void plan_sim_free(SimResult *r) {
    free(r->ops);
    free(r->mem);
    r->ops = NULL;
    r->mem = NULL;
    r->n_ops = r->n_mem = r->cap_ops = r->cap_mem = 0;
}
