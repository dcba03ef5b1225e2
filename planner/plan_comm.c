/* plan_comm.c — see plan_comm.h. */
#include "plan_comm.h"

#include <math.h>
#include <string.h>

#include "plan_deepspeed.h"
#include "plan_memory.h"
#include "plan_fsdp.h"
#include "plan_offload.h"

static const char *const COLL_NAMES[PCOLL_COUNT] = {"all_reduce", "reduce_scatter", "all_gather",
                                                    "broadcast"};
static const char *const CPHASE_NAMES[CPHASE_COUNT] = {"forward", "backward", "step"};

static const char *const PURPOSE_LABELS[PURPOSE_COUNT] = {
    "gradient buckets", "updated parameters", "module parameters", "persistent parameters",
    "gradient norm", "overflow flag", "unit parameters", "unit gradients",
    "gradient shards across nodes", "module buffers (BN stats, rotary)", "SyncBN statistics",
    "SyncBN gradient sums", "gradient shards to host", "parameter shards from host (fwd + bwd)",
    "updated parameters from host"};

const char *plan_coll_name(PlanCollOp op) { return COLL_NAMES[op]; }
const char *plan_coll_purpose_label(CollPurpose p) { return PURPOSE_LABELS[p]; }
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

static void add(CommPlan *p, const ClusterSpec *c, PlanCollOp op, CommPhase ph, CollPurpose what,
                double count, double payload, int64_t group, int crosses_nodes) {
    if (group <= 1 || count <= 0 || payload <= 0 || p->n >= PLAN_MAX_COLLS) return;
    PlanColl *x = &p->c[p->n++];
    x->op = op;
    x->phase = ph;
    x->purpose = what;
    x->what = plan_coll_purpose_label(what);
    x->count = count;
    x->payload_bytes = payload;
    x->group = group;
    x->wire_bytes = payload * plan_coll_factor(op, group);
    /* count collectives of payload/count bytes each */
    x->seconds = count * plan_coll_seconds(c, op, payload / count, group, crosses_nodes);
    p->wire_bytes += x->wire_bytes;
    p->seconds += x->seconds;
}

static void add_host_copies(const ModelSpec *m, const TrainSpec *t, const ClusterSpec *c, StrategyKind sk,
                            CommPlan *out);

static void add_syncbn(CommPlan *out, const ModelSpec *m, const TrainSpec *t, const ClusterSpec *c,
                       int64_t N, int multi_node) {
    double K = (double)t->grad_accum;
    int64_t sum_c = 0;
    int nbn = plan_model_bn_layers(m, &sum_c);
    /* forward: all-gather [mean, invstd, count] (2C+1 fp32 per rank); backward: all-reduce
       [sum_dy, sum_dy_xmu] (2C fp32) per BN layer (torch/nn/modules/_functions.py) */
    add(out, c, PCOLL_ALL_GATHER, CPHASE_FORWARD, PURPOSE_SYNCBN_STATS, nbn * K,
        (2.0 * (double)sum_c + nbn) * 4 * (double)N * K, N, multi_node);
    add(out, c, PCOLL_ALL_REDUCE, CPHASE_BACKWARD, PURPOSE_SYNCBN_GRADS, nbn * K,
        2.0 * (double)sum_c * 4 * K, N, multi_node);
}

/* DeepSpeed 0.19.8 with its defaults as it runs (--impl pytorch), per tensor (plan_deepspeed.h);
   docs/formulas.md "DeepSpeed collectives".
   ZeRO-1/2 (stage_1_and_2.py): average_tensor splits each reduce bucket by destination rank,
   and with use_multi_rank_bucket_allreduce (default true) allreduce_and_scatter all-reduces
   the flattened bucket (allreduce_bucket: dist.all_reduce): Ψ gradient elements per step
   (every micro-step for stage 2, at the boundary for stage 1); the step all-gathers the
   updated partitions (n x the padded partition) and all-reduces the fp32 gradient norm
   (get_grad_norm_direct), plus the uint8 overflow flag under fp16/bf16.
   ZeRO-3 (stage3.py, partitioned_param_coordinator.py): forward all-gathers the non-persistent
   tensors (n x ceil(numel/n) each) in coalesced prefetch groups, backward again those released
   since their forward (plan_ds3_kept), one collective per group (plan_ds3_sim_gathers);
   reduce-scatter of every gradient (padded); the step all-gathers
   each persistent tensor's updated partition (one collective per tensor) and all-reduces the
   fp64 gradient norm (+ the uint8 overflow flag under fp16). */
static void add_deepspeed(CommPlan *out, const ModelSpec *m, const TrainSpec *t, const ClusterSpec *c,
                          StrategyKind sk, const MemSizes *z) {
    const Strategy *s = plan_strategy(sk);
    const PrecisionSpec *p = plan_precision(t->precision);
    double K = (double)t->grad_accum, pb = p->param_bytes, gb = p->grad_bytes;
    int64_t N = c->gpus, n = z->n;
    int multi_node = plan_cluster_nodes(c) > 1;
    DsSizes ds;
    plan_ds_sizes(m, n, &ds);
    double buckets = ceil(z->psi / PLAN_DS_REDUCE_BUCKET);
    int stage3 = s->buffers == BUF_DS_STAGE3;
    double norm = plan_ds_norm_bytes(stage3), flag = plan_ds_overflow_bytes(stage3, p);
    if (!stage3) {
        double times = (s->shard & SHARD_GRAD) ? K : 1;
        add(out, c, PCOLL_ALL_REDUCE, CPHASE_BACKWARD, PURPOSE_GRAD_BUCKETS, buckets * times,
            z->psi * gb * times, N, multi_node);
        add(out, c, PCOLL_ALL_GATHER, CPHASE_STEP, PURPOSE_UPDATED_PARAMS, buckets,
            (double)n * ds.part * pb, N, multi_node);
    } else {
        /* one all-gather per coalesced group, in the phase that issues it (Ds3Sim) */
        double cnt[2], el[2];
        plan_ds3_sim_gathers(m, n, cnt, el);
        add(out, c, PCOLL_ALL_GATHER, CPHASE_FORWARD, PURPOSE_MODULE_PARAMS, cnt[0] * K, el[0] * pb * K, n, multi_node);
        add(out, c, PCOLL_ALL_GATHER, CPHASE_BACKWARD, PURPOSE_MODULE_PARAMS, cnt[1] * K, el[1] * pb * K, n, multi_node);
        add(out, c, PCOLL_REDUCE_SCATTER, CPHASE_BACKWARD, PURPOSE_GRAD_BUCKETS, buckets * K,
            ds.padded * gb * K, n, multi_node);
        add(out, c, PCOLL_ALL_GATHER, CPHASE_STEP, PURPOSE_PERSISTENT_PARAMS, ds.persist_count,
            ds.persist_padded * pb, n, multi_node);
    }
    add(out, c, PCOLL_ALL_REDUCE, CPHASE_STEP, PURPOSE_GRAD_NORM, 1, norm, N, multi_node);
    add(out, c, PCOLL_ALL_REDUCE, CPHASE_STEP, PURPOSE_OVERFLOW_FLAG, 1, flag, N, multi_node);
}

void plan_comm(const ModelSpec *m, const TrainSpec *t, const ClusterSpec *c, StrategyKind sk,
               CommPlan *out) {
    memset(out, 0, sizeof(*out));
    const Strategy *s = plan_strategy(sk);
    const PrecisionSpec *p = plan_precision(t->precision);
    MemSizes z;
    plan_memory_sizes(m, t, c, sk, &z);
    double K = (double)t->grad_accum;
    int64_t n = z.n, N = c->gpus;
    int multi_node = plan_cluster_nodes(c) > 1;
    int group_crosses = s->group_node ? 0 : multi_node;
    double psi = z.psi, pb = p->param_bytes, gb = p->grad_bytes;
    if (plan_fsdp2_fp32_shards(t, sk)) gb = 4;   /* FSDP2 MixedPrecisionPolicy(reduce_dtype=fp32) */
    /* units: the model's repeated blocks (LayerSpec.unit: transformer blocks, ResNet
       bottlenecks) + the root; models without units: every layer with parameters */
    double units = 0;
    int has_units = plan_model_units(m) > 0;
    for (int i = 0, counted = 0; i < m->n_layers; i++) {
        const LayerSpec *l = &m->layers[i];
        if (l->params <= 0) continue;
        if (!has_units) units++;
        else if (l->unit > 0 && l->unit != counted) { units++; counted = l->unit; }
    }
    double root = z.root_unit > 0 ? 1 : 0;
    /* --fsdp-grad-sync last: the reduce-scatters (and HSDP's all-reduces) run in the last
       micro-step only (set_requires_gradient_sync(False) / no_sync() on the others); the
       all-gathers still run every micro-step */
    double Kr = plan_fsdp_reduce_last_only(t, sk) ? 1 : K;
    /* sharded collectives move whole padded units: n x the local shard (FSDP2: each tensor's
       dim 0 padded, _fsdp_collectives.py foreach_all_gather / foreach_reduce; FSDP1, ZeRO: the
       flat unit) */
    double padded = (double)n * z.psi_shard, padded_root = (double)n * z.root_shard;

    if (plan_strategy_is_deepspeed(sk) && t->impl == IMPL_PYTORCH && N > 1) {
        add_deepspeed(out, m, t, c, sk, &z);
        if (t->syncbn) add_syncbn(out, m, t, c, N, multi_node);
        add_host_copies(m, t, c, sk, out);
        return;
    }
    switch (s->buffers) {
    case BUF_DDP_BUCKETS: { /* one all-reduce per bucket, once per optimizer step (no_sync) */
        double nb = t->impl == IMPL_PYTORCH
                        ? plan_ddp_buckets_tensors(m, p->grad_bytes, PLAN_DDP_FIRST_BUCKET, PLAN_DDP_BUCKET) : -1;
        if (nb < 0) nb = plan_ddp_buckets(psi, p->grad_bytes, 0);   /* tensors unknown, or the engine */
        add(out, c, PCOLL_ALL_REDUCE, CPHASE_BACKWARD, PURPOSE_GRAD_BUCKETS, nb, psi * gb, N, multi_node);
        break;
    }
    case BUF_DS_REDUCE: {   /* ZeRO paper: reduce-scatter grads, all-gather updated params */
        double buckets = ceil(psi / PLAN_DS_REDUCE_BUCKET);
        double times = (s->shard & SHARD_GRAD) ? K : 1;   /* stage 2 reduces every micro-step */
        add(out, c, PCOLL_REDUCE_SCATTER, CPHASE_BACKWARD, PURPOSE_GRAD_BUCKETS, buckets * times,
            padded * gb * times, N, multi_node);
        add(out, c, PCOLL_ALL_GATHER, CPHASE_STEP, PURPOSE_UPDATED_PARAMS, buckets, padded * pb, N, multi_node);
        break;
    }
    case BUF_DS_STAGE3:
    case BUF_FSDP_FULL: {   /* gather each unit in forward and again in backward (not the root) */
        double fwd_units = units + root;
        double bwd_units = units;
        if (s->buffers == BUF_DS_STAGE3) { fwd_units = units + root; bwd_units = units + root; }
        double bwd_payload = (padded - (s->buffers == BUF_FSDP_FULL ? padded_root : 0)) * pb;
        add(out, c, PCOLL_ALL_GATHER, CPHASE_FORWARD, PURPOSE_UNIT_PARAMS, fwd_units * K, padded * pb * K, n, group_crosses);
        add(out, c, PCOLL_ALL_GATHER, CPHASE_BACKWARD, PURPOSE_UNIT_PARAMS, bwd_units * K, bwd_payload * K, n, group_crosses);
        add(out, c, PCOLL_REDUCE_SCATTER, CPHASE_BACKWARD, PURPOSE_UNIT_GRADS, (units + root) * Kr, padded * gb * Kr, n, group_crosses);
        break;
    }
    case BUF_FSDP_GRAD_OP:  /* parameters stay gathered from forward through backward */
        add(out, c, PCOLL_ALL_GATHER, CPHASE_FORWARD, PURPOSE_UNIT_PARAMS, (units + root) * K, padded * pb * K, n, group_crosses);
        add(out, c, PCOLL_REDUCE_SCATTER, CPHASE_BACKWARD, PURPOSE_UNIT_GRADS, (units + root) * Kr, padded * gb * Kr, n, group_crosses);
        break;
    default: break;
    }
    if (s->group_node && N > n)   /* HYBRID_SHARD: all-reduce each shard across the replicas */
        add(out, c, PCOLL_ALL_REDUCE, CPHASE_BACKWARD, PURPOSE_REPLICA_GRADS, (units + root) * Kr,
            z.psi_shard * gb * Kr, (N + n - 1) / n, 1);
    if (s->buffers == BUF_DDP_BUCKETS && plan_model_buffers(m) > 0) {   /* broadcast_buffers */
        int dtypes = 1;   /* one coalesced broadcast per dtype per forward (fp32; BN's int64 counter) */
        double bytes = t->impl == IMPL_ENGINE ? (double)plan_model_buffers(m) * 4   /* the engine: one fp32 buffer */
                                              : plan_model_buffer_bytes(m, &dtypes);
        add(out, c, PCOLL_BROADCAST, CPHASE_FORWARD, PURPOSE_BUFFERS, K * dtypes,
            bytes * K, N, multi_node);
    }
    if (t->syncbn) add_syncbn(out, m, t, c, N, multi_node);
    add_host_copies(m, t, c, sk, out);
}

/* CPU offload's host traffic (plan_offload.h): gradient shards down in backward, parameter
   shards up (before each gather under param offload, after the CPU step otherwise). */
static void add_host_copies(const ModelSpec *m, const TrainSpec *t, const ClusterSpec *c, StrategyKind sk,
                            CommPlan *out) {
    OffloadHost h;
    plan_offload_host(m, t, c, sk, &h);
    if (h.d2h_bytes > 0)
        out->host[out->n_host++] = (PlanHostCopy){"copy_d2h", CPHASE_BACKWARD, PURPOSE_HOST_GRADS,
                                                  plan_coll_purpose_label(PURPOSE_HOST_GRADS), h.d2h_bytes, h.d2h_s};
    if (h.h2d_bytes > 0) {
        CollPurpose hp = t->offload == OFFLOAD_PARAM ? PURPOSE_HOST_PARAMS : PURPOSE_HOST_UPDATED;
        out->host[out->n_host++] = (PlanHostCopy){"copy_h2d", t->offload == OFFLOAD_PARAM ? CPHASE_FORWARD : CPHASE_STEP,
                                                  hp, plan_coll_purpose_label(hp), h.h2d_bytes, h.h2d_s};
    }
    for (int i = 0; i < out->n_host; i++) {
        out->host_bytes += out->host[i].bytes;
        out->host_seconds += out->host[i].seconds;
    }
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
