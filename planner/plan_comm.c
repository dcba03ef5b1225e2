/* plan_comm.c — see plan_comm.h. */
#include "plan_comm.h"

#include <math.h>
#include <string.h>

#include "plan_memory.h"
#include "plan_step.h"

static const char *const COLL_NAMES[PCOLL_COUNT] = {"all_reduce", "reduce_scatter", "all_gather",
                                                    "broadcast"};
static const char *const CPHASE_NAMES[CPHASE_COUNT] = {"forward", "backward", "step"};

static const char *const PURPOSE_LABELS[PURPOSE_COUNT] = {
    "gradient buckets", "updated parameters", "module parameters", "persistent parameters",
    "gradient norm", "overflow flag", "unit parameters", "unit gradients",
    "gradient shards across nodes", "module buffers (BN stats, rotary)", "SyncBN statistics",
    "SyncBN gradient sums", "gradient shards to host", "parameter shards from host (fwd + bwd)",
    "updated parameters from host", "TP block activations", "TP logits",
    "SP replicated-parameter gradients"};

const char *plan_coll_name(PlanCollOp op) { return COLL_NAMES[op]; }
static const char *plan_coll_purpose_label(CollPurpose p) { return PURPOSE_LABELS[p]; }
int plan_coll_purpose_is_syncbn(CollPurpose p) { return p == PURPOSE_SYNCBN_STATS || p == PURPOSE_SYNCBN_GRADS; }
const char *plan_comm_phase_name(CommPhase p) { return CPHASE_NAMES[p]; }

double plan_coll_factor(PlanCollOp op, int64_t n) {
    if (n <= 1) return 0;
    double nn = (double)n;
    switch (op) {
    case PCOLL_ALL_REDUCE: return 2 * (nn - 1) / nn;
    case PCOLL_REDUCE_SCATTER:
    case PCOLL_ALL_GATHER: return (nn - 1) / nn;
    case PCOLL_BROADCAST: return 1;
    default: return 0;
    }
}

/* Ring algorithm steps per collective (latency term). */
static double coll_steps(PlanCollOp op, int64_t n) {
    if (n <= 1) return 0;
    return op == PCOLL_ALL_REDUCE ? 2.0 * (double)(n - 1) : (double)(n - 1);
}

double plan_ddp_buckets(double psi, int grad_bytes, double bucket_bytes) {
    double total = psi * grad_bytes;
    double cap = bucket_bytes > 0 ? bucket_bytes : PLAN_DDP_BUCKET;
    if (total <= PLAN_DDP_FIRST_BUCKET) return 1;
    return 1 + ceil((total - PLAN_DDP_FIRST_BUCKET) / cap);
}

double plan_ddp_buckets_tensors(const ModelSpec *m, int grad_bytes, double first_cap, double cap) {
    if (!plan_model_tensors_known(m)) return -1;
    double n = 0, fill = 0, lim = first_cap;
    for (int i = m->n_layers - 1; i >= 0; i--) {
        const LayerSpec *l = &m->layers[i];
        for (int k = l->n_tensors - 1; k >= 0; k--) {
            fill += (double)l->tensor_elems[k] * grad_bytes;
            if (fill >= lim) { n++; fill = 0; lim = cap; }
        }
    }
    return n + (fill > 0);
}

double plan_coll_seconds(const ClusterSpec *c, PlanCollOp op, double payload, int64_t group,
                         int crosses_nodes) {
    if (group <= 1) return 0;
    double bw = (crosses_nodes ? fmin(c->gpu.intra_bw, c->gpu.inter_bw) : c->gpu.intra_bw) * 1e9;
    double hop = c->gpu.intra_lat;
    if (op >= 0 && op < 4 && c->coll_bw[op] > 0) bw = c->coll_bw[op] * 1e9;   /* a measured description */
    if (op >= 0 && op < 4 && c->coll_lat[op] > 0) hop = c->coll_lat[op];
    /* NCCL's latency model (tuning.cc): base + intra-node hops + inter-node hops, where a ring
       over `nodes` nodes crosses the network 2(nodes-1) times for an all-reduce, nodes-1 times
       otherwise */
    double steps = coll_steps(op, group), inter = 0;
    if (crosses_nodes) {
        double nodes = ceil((double)group / (double)(c->gpus_per_node > 0 ? c->gpus_per_node : 1));
        inter = op == PCOLL_ALL_REDUCE ? 2 * (nodes - 1) : nodes - 1;
        if (inter > steps) inter = steps;
    }
    double lat = c->coll_base_lat + (steps - inter) * hop + inter * c->gpu.inter_lat;
    return lat + payload * plan_coll_factor(op, group) / bw;
}

/* One row of the table: count collectives moving payload bytes (summed over the step's events of
   the same op, phase and purpose); its time is count x one collective of the mean size, which
   equals the sum over the events (the alpha-beta time is affine in the size). */
static void finish_row(CommPlan *p, const ClusterSpec *c, PlanColl *x, int crosses) {
    x->wire_bytes = x->payload_bytes * plan_coll_factor(x->op, x->group);
    x->seconds = x->count * plan_coll_seconds(c, x->op, x->payload_bytes / x->count, x->group, crosses);
    p->wire_bytes += x->wire_bytes;
    p->seconds += x->seconds;
}

/* The collective table reads the step account (plan_step.h): every transfer its rules emit,
   summed per (op, phase, purpose) in the order they first appear, x K for those that run every
   micro-step; host copies listed apart. */
void plan_comm(const ModelSpec *m, const TrainSpec *t, const ClusterSpec *c, StrategyKind sk,
               CommPlan *out) {
    memset(out, 0, sizeof(*out));
    Step st;
    if (plan_step_build(&st, m, t, c, sk)) { plan_step_free(&st); return; }
    double K = (double)t->grad_accum;
    int crosses[PLAN_MAX_COLLS] = {0};
    for (int e = 0; e < st.n_xfer; e++) {
        const StepXfer *x = &st.xfer[e];
        double mult = x->micro == MICRO_EVERY ? K : 1;
        if (x->kind != XFER_COLL) {
            if (out->n_host >= 2 || x->payload <= 0) continue;
            PlanHostCopy *h = &out->host[out->n_host++];
            *h = (PlanHostCopy){x->kind == XFER_D2H ? "copy_d2h" : "copy_h2d", (CommPhase)x->phase,
                                (CollPurpose)x->purpose, plan_coll_purpose_label((CollPurpose)x->purpose),
                                x->payload, x->seconds};
            out->host_bytes += h->bytes;
            out->host_seconds += h->seconds;
            continue;
        }
        if (x->group <= 1 || x->count <= 0 || x->payload <= 0) continue;
        int k = 0;
        while (k < out->n && !(out->c[k].op == x->op && out->c[k].phase == x->phase &&
                               out->c[k].purpose == x->purpose && out->c[k].group == x->group))
            k++;
        if (k == out->n) {
            if (out->n >= PLAN_MAX_COLLS) continue;
            out->c[out->n++] = (PlanColl){(PlanCollOp)x->op, (CommPhase)x->phase, (CollPurpose)x->purpose,
                                          plan_coll_purpose_label((CollPurpose)x->purpose), 0, 0, 0, x->group, 0};
            crosses[k] = x->crosses;
        }
        out->c[k].count += x->count * mult;
        out->c[k].payload_bytes += x->payload * mult;
    }
    for (int k = 0; k < out->n; k++) finish_row(out, c, &out->c[k], crosses[k]);
    plan_step_free(&st);
}

void plan_fsdp_no_sync(const ModelSpec *m, const TrainSpec *t, const ClusterSpec *c, StrategyKind sk,
                       double *extra_bytes, double *saved_wire_bytes) {
    const PrecisionSpec *p = plan_precision(t->precision);
    MemSizes z;
    plan_memory_sizes(m, t, c, sk, &z);
    double K = (double)t->grad_accum;
    *extra_bytes = c->gpus > 1 ? (z.psi - z.psi_shard) * p->grad_bytes : 0;
    *saved_wire_bytes = (K - 1) * (double)z.n * z.psi_shard * p->grad_bytes *
                        plan_coll_factor(PCOLL_REDUCE_SCATTER, z.n);
}
