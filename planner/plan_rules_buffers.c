/* plan_rules_buffers.c — rules for what the data-parallel mechanisms allocate and communicate:
 * DDP's reducer, DeepSpeed's reduce buckets and ZeRO-3 fetch coordinator, FSDP's and the
 * engine's sharded units, SyncBatchNorm, and CPU offload's host copies. Each rule emits both the
 * buffers its mechanism holds and the collectives it issues. Sources: docs/formulas.md
 * (sections named in the rule table, plan_rules.c). */
#include <math.h>

#include "plan_step_internal.h"

/* The crosses_nodes of the data-parallel group (plan_coll_seconds): 0 within a node; else its
   ranks every tp-th rank of the cluster (the tensor-parallel group is the innermost), so a node
   holds gpus_per_node / tp of them, each group on its ranks' NIC shares. */
static int dp_crosses(const StepCtx *x) { return plan_cluster_nodes(x->c) > 1 ? plan_crosses_stride(x->v->tp) : 0; }

/* One collective: what, when the table and the simulated step count it, how big. */
static StepXfer *coll(Step *st, RuleId r, int point, CollKind op, CollPurpose what, PhaseKind ph,
                      StepSched sched, StepMicro micro, double payload, int64_t group, int crosses) {
    if (payload <= 0) return NULL;
    StepXfer *e = step_xfer(st, r, XFER_COLL, point);
    if (!e) return NULL;
    e->op = (uint8_t)op;
    e->purpose = (uint8_t)what;
    e->phase = (uint8_t)ph;
    e->sched = (uint8_t)sched;
    e->micro = (uint8_t)micro;
    e->payload = payload;
    e->group = group;
    e->crosses = crosses;
    e->charge = sched == SCHED_PREFETCH || sched == SCHED_ASYNC_AFTER || sched == SCHED_ASYNC_BEFORE;
    return e;
}

/* How a run of buckets is issued: in which micro-steps, on which stream (SCHED_ASYNC_AFTER: their
   own; SCHED_SYNC_AFTER: the compute stream's), chained (StepXfer.chain) or not. */
typedef struct {
    StepMicro micro;
    StepSched sched;
    int chain;
} BucketIssue;

static const BucketIssue DDP_ISSUE = {MICRO_LAST, SCHED_ASYNC_AFTER, 0};

static void bucket_coll(const StepCtx *x, Step *st, RuleId r, int point, CollKind op, BucketIssue how, double n,
                        double bytes, int64_t group) {
    StepXfer *e = coll(st, r, point, op, PURPOSE_GRAD_BUCKETS, PHASE_BACKWARD, how.sched, how.micro, bytes, group,
                       dp_crosses(x));
    if (!e) return;
    e->count = n;
    e->chain = (uint8_t)how.chain;
}

/* n buckets of `each` bytes issued at one point: one entry each, or, beyond 1024 (absurd sizes:
   1e15 parameters make 1e6-1e8 buckets), one entry with their count — the table's count and
   payload are the same, and the account stays small. */
static void bucket_run(const StepCtx *x, Step *st, RuleId r, int point, CollKind op, BucketIssue how, double n,
                       double each, int64_t group) {
    if (n > 1024) {
        bucket_coll(x, st, r, point, op, how, n, n * each, group);
        return;
    }
    for (double j = 0; j < n; j++) bucket_coll(x, st, r, point, op, how, 1, each, group);
}

/* Reduce buckets of cap_elems parameters: count of them split total bytes (each cap_elems x
   bytes per element, the last the rest), each issued after the backward of the layer at which
   the running count of parameters (in gradient-ready order) reaches the bucket's end, the last at
   the end of backward; at_end: all at the end (reduced there). */
static void buckets(const StepCtx *x, Step *st, RuleId r, CollKind op, BucketIssue how, double count,
                    double total, double cap_bytes, double cap_elems, int at_end, int64_t group) {
    double seen = 0, done = 0, k = 0;
    for (int i = x->L - 1; i >= 0 && k < count - 1; i--) {
        seen += (double)x->m->layers[i].params;
        if (at_end) continue;
        double n = fmin(count - 1, floor(seen / cap_elems)) - k;   /* buckets that close in layer i */
        if (n > 0) bucket_run(x, st, r, pt(x, PT_BWD, i), op, how, n, cap_bytes, group);
        if (n > 0) done += n * cap_bytes, k += n;
    }
    /* the rest at the end of backward: the last bucket its remainder */
    bucket_run(x, st, r, pt(x, PT_BWD, 0), op, how, count - 1 - k, cap_bytes, group);
    if (count - k >= 1)
        bucket_coll(x, st, r, pt(x, PT_BWD, 0), op, how, 1, total - done - (count - 1 - k) * cap_bytes, group);
}

/* ---- DDP (torch/nn/parallel/distributed.py, reducer.cpp) ---- */

/* The reducer's flat bucket copy of every gradient (gradient_as_bucket_view=False), allocated
   at construction; one all-reduce per bucket in the micro-step that syncs. Buckets: whole
   tensors in gradient-ready order, the first closing at 1 MiB, the others at 25 MiB
   (compute_bucket_assignment_by_size, after the first iteration's rebuild); memplan's engine
   splits its flat fp32 run freely at the caps (exec/exec_strategy.c ddp_setup). */
void rule_ddp_reducer(const StepCtx *x, Step *st) {
    if (x->s->buffers != BUF_DDP_BUCKETS) return;
    const ModelSpec *m = x->m;
    double gb = x->p->grad_bytes, total = x->z.psi * gb;
    if (!x->t->grad_as_bucket_view && x->N > 1)
        step_hold(st, RULE_DDP_BUCKETS, TERM_COMM, pt(x, PT_START, 0), AT_BEFORE, pt(x, PT_END, 0), AT_AFTER, total);
    if (x->N <= 1) return;
    double fill = 0, lim = PLAN_DDP_FIRST_BUCKET;
    if (x->torch && plan_model_tensors_known(m)) {
        for (int i = x->L - 1; i >= 0; i--)
            for (int k = m->layers[i].n_tensors - 1; k >= 0; k--) {
                fill += (double)m->layers[i].tensor_elems[k] * gb;
                if (fill < lim) continue;
                coll(st, RULE_DDP_BUCKETS, pt(x, PT_BWD, i), COLL_ALL_REDUCE, PURPOSE_GRAD_BUCKETS, PHASE_BACKWARD,
                     SCHED_ASYNC_AFTER, MICRO_LAST, fill, x->N, dp_crosses(x));
                fill = 0;
                lim = PLAN_DDP_BUCKET;
            }
        coll(st, RULE_DDP_BUCKETS, pt(x, PT_BWD, 0), COLL_ALL_REDUCE, PURPOSE_GRAD_BUCKETS, PHASE_BACKWARD,
             SCHED_ASYNC_AFTER, MICRO_LAST, fill, x->N, dp_crosses(x));
        return;
    }
    /* the first bucket closes at 1 MiB, then full 25 MiB ones (bucket_run: one entry per bucket,
       or one with their count at absurd sizes), the last the remainder at the end of the model */
    double start = 0, first = fmin(total, PLAN_DDP_FIRST_BUCKET);
    for (int i = x->L - 1; i >= 0 && start < total; i--) {
        fill += (double)m->layers[i].params * gb;
        int at = pt(x, PT_BWD, i);
        if (start == 0 && fill >= first) {
            coll(st, RULE_DDP_BUCKETS, at, COLL_ALL_REDUCE, PURPOSE_GRAD_BUCKETS, PHASE_BACKWARD, SCHED_ASYNC_AFTER,
                 MICRO_LAST, first, x->N, dp_crosses(x));
            start = first;
        }
        if (start == 0) continue;
        double n = floor((fmin(fill, total) - start) / PLAN_DDP_BUCKET);   /* full buckets closing here */
        bucket_run(x, st, RULE_DDP_BUCKETS, at, COLL_ALL_REDUCE, DDP_ISSUE, n, PLAN_DDP_BUCKET, x->N);
        start += n * PLAN_DDP_BUCKET;
        if (fill >= total && start < total) {
            coll(st, RULE_DDP_BUCKETS, at, COLL_ALL_REDUCE, PURPOSE_GRAD_BUCKETS, PHASE_BACKWARD, SCHED_ASYNC_AFTER,
                 MICRO_LAST, total - start, x->N, dp_crosses(x));
            start = total;
        }
    }
}

/* broadcast_buffers: module buffers (BN statistics, rotary tables) from rank 0 before every
   forward, one coalesced broadcast per dtype. docs/formulas.md "DDP buffer broadcast". */
void rule_ddp_broadcast(const StepCtx *x, Step *st) {
    if (x->s->buffers != BUF_DDP_BUCKETS || plan_model_buffers(x->m) <= 0) return;
    int dtypes = 1;
    double bytes = x->engine ? (double)plan_model_buffers(x->m) * 4   /* the engine: one fp32 buffer */
                             : plan_model_buffer_bytes(x->m, &dtypes);
    StepXfer *e = coll(st, RULE_DDP_BROADCAST, pt(x, PT_FWD, 0), COLL_BROADCAST, PURPOSE_BUFFERS, PHASE_FORWARD,
                       SCHED_SYNC_BEFORE, MICRO_EVERY, bytes, x->N, dp_crosses(x));
    if (e) e->count = dtypes;
}

/* ---- DeepSpeed ZeRO-1/2 as it runs (stage_1_and_2.py) ---- */

/* ZeRO-1/2's bucket all-reduces (plan_ds_reduce_buckets, plan_ds12_bucket_allreduces): one entry
   per bucket with its count, after the backward of the layer whose tensor's hook closed it, the
   epilogue's after the first layer's; ZeRO-1's all after the boundary's backward (at_end: where
   reduce_gradients fills them without overlap_comm; with it the hooks of the boundary's backward
   do, which docs/validation-time.md "DeepSpeed's schedule" tried and did not keep). */
typedef struct {
    const StepCtx *x;
    Step *st;
    BucketIssue how;
    int at_end;
} Ds12Reduce;

static void ds12_reduce_bucket(void *ctx, const DsBucket *b) {
    Ds12Reduce *d = ctx;
    const StepCtx *x = d->x;
    double flat, n = plan_ds12_bucket_allreduces(b, x->ds.part, x->dsk.reduce_bucket, &flat);
    int at = d->at_end || b->at < 0 ? 0 : b->at;
    bucket_coll(x, d->st, RULE_DS_BUCKET, pt(x, PT_BWD, at), COLL_ALL_REDUCE, d->how, n, b->elems * x->p->grad_bytes,
                x->N);
}

/* The IPG reduce bucket (reduce_bucket_size elements of the 16-bit gradients, whatever the
   model's size, on one GPU too; two with overlap_comm) lives from the first gradient hook of a backward
   (process_gradients -> setup_buckets) to that backward's epilogue (_release_ipg_buffers).
   The buckets hold whole tensors (plan_ds_reduce_buckets); each reduction flattens its bucket's
   slices into a new tensor (allreduce_bucket: self.flatten(bucket)) and all-reduces it
   (use_multi_rank_bucket_allreduce): ZeRO-2 as buckets fill, every micro-step; ZeRO-1 at the
   boundary, filled after backward in the groups' order (reduce_gradients), or with overlap_comm
   by the hooks in backward order (placed after backward either way). The account holds the flattened copies of the reductions after backward (ZeRO-1's first
   two, ZeRO-2's epilogue). The step all-gathers the updated partitions. docs/formulas.md
   "DeepSpeed's reduce bucket", "DeepSpeed collectives". */
void rule_ds12_reducer(const StepCtx *x, Step *st) {
    if (!x->ds12) return;
    double gb = x->p->grad_bytes, bkt = x->dsk.reduce_bucket;
    const Ds12Buckets *b = &x->ds12b;
    int hooked = -1;
    for (int i = x->L - 1; i >= 0 && hooked < 0; i--)
        if (x->m->layers[i].params > 0) hooked = i;
    /* overlap_comm: a second bucket buffer, so that one fills while the other reduces
       (setup_buckets: "Use double buffers ... when overlap_comm is enabled") */
    double bufs = x->dsk.overlap_comm == 1 ? 2 : 1;
    if (hooked >= 0)
        step_hold(st, RULE_DS_BUCKET, TERM_COMM, pt(x, PT_BWD_MLP, hooked), AT_BEFORE, pt(x, PT_NORM, 0), AT_BEFORE,
                  bufs * bkt * gb);
    if (x->N <= 1) return;
    int r1 = pt(x, PT_REDUCE1, 0), r2 = pt(x, PT_REDUCE2, 0);
    if (x->ds12_stage1) {
        step_at(st, RULE_DS_FLATTEN, TERM_COMM, r1, b->flat[0] * gb);
        if (b->count > 1) step_at(st, RULE_DS_FLATTEN, TERM_COMM, r2, b->flat[1] * gb);
    } else {
        step_at(st, RULE_DS_FLATTEN, TERM_COMM, r1, b->last_flat * gb);
    }
    /* the stream a bucket is reduced on (stage_1_and_2.py average_tensor): with overlap_comm the
       reduction stream, after the compute stream has been made to wait for it (the previous
       bucket's reduction: chained); without, the compute stream. ZeRO-1 at the
       boundary. docs/formulas.md "DeepSpeed ZeRO-1/2's reduce buckets on their streams" */
    int overlap = x->dsk.overlap_comm == 1;
    Ds12Reduce rd = {x, st, {x->ds12_stage1 ? MICRO_LAST : MICRO_EVERY, overlap ? SCHED_ASYNC_AFTER : SCHED_SYNC_AFTER,
                             overlap}, x->ds12_stage1};
    plan_ds_reduce_buckets(x->m, x->n, bkt, x->ds12_forward, ds12_reduce_bucket, &rd);
    /* one all_gather_into_tensor of the flat group per parameter group (runtime/utils.py
       all_gather_dp_groups: torch has all_gather_into_tensor, so allgather_bucket_size's
       sequential shards are never used); or, --zero-param-sync broadcast, one broadcast of each
       rank's shard from its owner, all issued then waited for (InternLM's
       HybridZeroOptimizer.broadcast_params: dist.broadcast(src=rank) for every rank of the
       group): n collectives of a shard each, every one paying the whole group's latency */
    double all = (double)x->n * x->ds.part * x->p->param_bytes;
    int bcast = x->dsk.param_sync == PARAM_SYNC_BROADCAST;
    /* within the shard group (every rank, or --zero-group's: a node's ranks run first) */
    int crosses = x->n < x->N && x->n <= x->c->gpus_per_node ? 0 : dp_crosses(x);
    StepXfer *e = coll(st, RULE_DS_STEP_GATHER, pt(x, PT_STEP, 0), bcast ? COLL_BROADCAST : COLL_ALL_GATHER,
                       PURPOSE_UPDATED_PARAMS, PHASE_STEP, SCHED_SYNC_AFTER, MICRO_ONCE, all, x->n, crosses);
    if (e && bcast) e->count = (double)x->n;
}

/* The global gradient norm (fp32 for ZeRO-1/2, fp64 for ZeRO-3) and, under fp16/bf16, the
   uint8 overflow flag, all-reduced before the step (engine.py check_grad_overflow). */
void rule_ds_step_collectives(const StepCtx *x, Step *st) {
    if (!x->ds_py || x->N <= 1) return;
    int s = pt(x, PT_STEP, 0);
    coll(st, RULE_DS_NORM_ALLREDUCE, s, COLL_ALL_REDUCE, PURPOSE_GRAD_NORM, PHASE_STEP, SCHED_SYNC_BEFORE, MICRO_ONCE,
         plan_ds_norm_bytes(x->ds3_py), x->N, dp_crosses(x));
    coll(st, RULE_DS_NORM_ALLREDUCE, s, COLL_ALL_REDUCE, PURPOSE_OVERFLOW_FLAG, PHASE_STEP, SCHED_SYNC_BEFORE, MICRO_ONCE,
         plan_ds_overflow_bytes(x->ds3_py, x->p), x->N, dp_crosses(x));
}

/* ---- DeepSpeed ZeRO-3 as it runs (stage3.py, partitioned_param_coordinator.py) ---- */

typedef struct {
    const StepCtx *x;
    Step *st;
} Ds3Emit;

/* One coalesced all-gather (plan_deepspeed.h Ds3Sim): issued during the fetch of layer g->at,
   waited for by the first layer that uses one of its tensors. */
static void ds3_group(void *ctx, const Ds3Group *g, int use_layer, int use_bwd) {
    Ds3Emit *d = ctx;
    const StepCtx *x = d->x;
    int at = pt(x, g->at_bwd ? PT_BWD : PT_FWD, g->at);
    StepXfer *e = coll(d->st, RULE_DS3_GATHER, at, COLL_ALL_GATHER, PURPOSE_MODULE_PARAMS,
                       g->at_bwd ? PHASE_BACKWARD : PHASE_FORWARD, SCHED_ASYNC_BEFORE, MICRO_EVERY,
                       g->flat * x->p->param_bytes, x->n, dp_crosses(x));
    if (e) e->wait = pt(x, use_bwd ? PT_BWD : PT_FWD, use_layer);
}

/* ZeRO-3's reduce-scatters (plan_ds_reduce_buckets): each from the hook of the tensor that closed
   its bucket, after that layer's backward (the buckets a layer closes: one entry with their
   count), the last after the first layer's (the epilogue); the last's padded size kept for the
   epilogue's flat copy. */
typedef struct {
    const StepCtx *x;
    Step *st;
    int at;                  /* layer of the pending entry (-2: none) */
    double count, bytes, last;
} Ds3Reduce;

static void ds3_reduce_flush(Ds3Reduce *d) {
    if (d->count <= 0) return;
    const StepCtx *x = d->x;
    StepXfer *e = coll(d->st, RULE_DS3_REDUCE_SCATTER, pt(x, PT_BWD, d->at >= 0 ? d->at : 0), COLL_REDUCE_SCATTER,
                       PURPOSE_GRAD_BUCKETS, PHASE_BACKWARD, SCHED_ASYNC_AFTER, MICRO_EVERY, d->bytes, x->n, dp_crosses(x));
    if (e) e->count = d->count;
    d->count = d->bytes = 0;
}

static void ds3_reduce_bucket(void *ctx, const DsBucket *b) {
    Ds3Reduce *d = ctx;
    if (b->at != d->at) ds3_reduce_flush(d);
    d->at = b->at;
    d->count++;
    d->bytes += b->padded * d->x->p->grad_bytes;
    d->last = b->padded;
}

/* The reduce bucket allocated once at init; the fetch coordinator's gathered parameters (copied
   out of their flat buffers at first use, released after the layer unless reused within
   stage3_max_reuse_distance); at the end of backward the epilogue copies the last bucket's
   gradients, padded, into one flat tensor beside the bucket (reduce_scatter_coalesced) while the
   first layer is still gathered. Gathers per coalesced group; reduce-scatters per bucket; the
   step all-gathers each persistent tensor's partition. docs/formulas.md "DeepSpeed ZeRO-3". */
void rule_ds3_coordinator(const StepCtx *x, Step *st) {
    if (!x->ds3_py) return;
    double pb = x->p->param_bytes, gb = x->p->grad_bytes, bkt = x->dsk.reduce_bucket;
    step_hold(st, RULE_DS_BUCKET, TERM_COMM, pt(x, PT_START, 0), AT_BEFORE, pt(x, PT_END, 0), AT_AFTER, bkt * gb);
    if (!x->ds3) return;   /* one rank gathers nothing */
    Ds3Sim d;
    Ds3Emit em = {x, st};
    plan_ds3_sim_init(&d, x->m, x->n, &x->dsk);
    d.on_group = ds3_group;
    d.on_group_ctx = &em;
    StepLevel lv = {st, RULE_DS3_GATHER, TERM_COMM, 0};
    for (int i = 0; i < x->L; i++) step_level(&lv, pt(x, PT_FWD, i), plan_ds3_sim_forward(&d, i) * pb);
    for (int i = x->L - 1; i >= 0; i--) {
        step_level(&lv, pt(x, PT_BWD_MLP, i), plan_ds3_sim_backward(&d, i) * pb);
        if (i > 0) plan_ds3_sim_release(&d, i);   /* layer 0: after the reduction */
    }
    Ds3Reduce rd = {x, st, -2, 0, 0, 0};
    plan_ds_reduce_buckets(x->m, x->n, bkt, 0, ds3_reduce_bucket, &rd);
    ds3_reduce_flush(&rd);
    int r1 = pt(x, PT_REDUCE1, 0);
    step_sample(st, r1);
    step_at(st, RULE_DS_FLATTEN, TERM_COMM, r1, rd.last * gb);
    step_level(&lv, pt(x, PT_NORM, 0), 0);
    StepXfer *e = coll(st, RULE_DS_STEP_GATHER, pt(x, PT_STEP, 0), COLL_ALL_GATHER, PURPOSE_PERSISTENT_PARAMS,
                       PHASE_STEP, SCHED_SYNC_AFTER, MICRO_ONCE,
                       (x->ds.persist_padded + x->ds.frozen_persist_padded) * pb, x->n, dp_crosses(x));
    /* every persistent tensor, frozen ones too (measured: gpt2-mini LoRA r=8, 59 all-gathers) */
    if (e) e->count = x->ds.persist_count + x->ds.frozen_persist_count;
}

/* ---- sharded units: FSDP1, FSDP2, memplan's engine ZeRO-3 ---- */

/* memplan's engine ZeRO-3 (and FSDP1 where plan_fsdp2_setup leaves the timeline off) as fixed buffers: FULL_SHARD holds the root
   unit and two units in flight (the rate limiter), and in backward two reduce-scatter buffers
   and the root's gradients; SHARD_GRAD_OP every unit from forward through backward; ZeRO-3 the
   gathered layer and the prefetched one (the engine: its root and two blocks). One GPU shards
   nothing, unless the parameters live on the host. docs/formulas.md "Strategies". */
void rule_unit_static_buffers(const StepCtx *x, Step *st) {
    if (x->f2.on || x->ds3 || x->L == 0) return;
    if (x->fsdp && x->torch && x->t->fsdp_impl == 1 && x->n <= 1 && x->N > 1) return;   /* FSDP1 NO_SHARD (plan_fsdp.c) */
    const MemSizes *z = &x->z;
    double pb = x->p->param_bytes, gb = x->p->grad_bytes, fwd = 0, bwd = 0;
    switch (x->s->buffers) {
    case BUF_FSDP_FULL:
        fwd = (z->root_unit + 2 * z->largest_unit) * pb;
        bwd = fwd + 2 * z->largest_unit * gb + z->root_unit * gb;
        break;
    case BUF_FSDP_GRAD_OP:
        fwd = z->psi * pb;
        bwd = fwd + 2 * z->largest_unit * gb + z->root_unit * gb;
        break;
    case BUF_DS_STAGE3:
        fwd = x->engine ? (z->root_unit + 2 * z->largest_unit) * pb : 2 * z->largest_any * pb;
        bwd = fwd;
        break;
    default: return;
    }
    if (x->N == 1 && !plan_offload_params_on_host(x->t, x->sk)) return;
    step_hold(st, RULE_UNIT_GATHER, TERM_COMM, pt(x, PT_FWD, 0), AT_BEFORE, pt(x, PT_LOSS_BWD, 0), AT_AFTER, fwd);
    step_hold(st, RULE_UNIT_GATHER, TERM_COMM, pt(x, PT_BWD_MLP, x->L - 1), AT_BEFORE, pt(x, PT_BWD, 0), AT_AFTER, bwd);
}

/* FSDP2's unsharded parameters, flat all-gather outputs, prefetches and reduce-scatter inputs,
   point by point as plan_fsdp.c computes them. docs/formulas.md "FSDP2 buffers". */
void rule_fsdp2_buffers(const StepCtx *x, Step *st) {
    if (!x->f2.on) return;
    const Fsdp2 *f = &x->f2;
    const ModelSpec *m = x->m;
    StepLevel lv = {st, RULE_FSDP2_BUFFERS, TERM_COMM, 0};
    for (int i = 0; i < x->L; i++) step_level(&lv, pt(x, PT_FWD, i), plan_fsdp2_fwd_comm(f, m, i));
    step_level(&lv, pt(x, PT_LOSS_BWD, 0), plan_fsdp2_bwd_comm(f, m, x->L - 1));
    for (int i = x->L - 1; i >= 0; i--) {
        step_level(&lv, pt(x, PT_BWD_MLP, i), plan_fsdp2_bwd_comm(f, m, i));
        step_level(&lv, pt(x, PT_BWD, i), plan_fsdp2_bwd_rest_comm(f, m, i));   /* --ep: experts resharded */
        if (plan_fsdp2_unit_starts(m, i)) step_level(&lv, pt(x, PT_BWD_UNIT, i), plan_fsdp2_rs_comm(f, m, i));
    }
    step_level(&lv, pt(x, PT_ROOT_RS, 0), f->rroot * f->rb);
    step_level(&lv, pt(x, PT_NORM, 0), 0);
}

/* Expert parallelism under FSDP2 (plan_dim_ep.h): a block's routed experts are a unit of their
   own (fully_shard on the experts module over the expert data-parallel mesh: transformers 5.24
   distributed/fsdp.py apply_fully_sharded_data_parallelism; torchtitan's dp_mod_ep mesh), so
   they are gathered and reduced over those ne = n / ep ranks, strided by ep (the expert mesh's
   inner dimension is ep), beside the block's own collective, when and as often as it is. */
static void expert_unit_coll(const StepCtx *x, Step *st, const StepUnit *u, CollKind op, PhaseKind ph,
                             StepMicro micro, double bytes) {
    int64_t ne = x->f2.on ? x->f2.ne : 0;
    if (u->eshard <= 0 || ne <= 1) return;
    int gather = op == COLL_ALL_GATHER;
    int at = gather ? pt(x, ph == PHASE_FORWARD ? PT_FWD : PT_BWD, ph == PHASE_FORWARD ? u->first : u->last)
                    : pt(x, PT_BWD, u->first);
    StepXfer *e = coll(st, RULE_UNIT_COLLECTIVES, at, op, gather ? PURPOSE_EXPERT_PARAMS : PURPOSE_EXPERT_GRADS, ph,
                       gather ? SCHED_PREFETCH : SCHED_ASYNC_AFTER, micro, (double)ne * u->eshard * bytes, ne,
                       dp_crosses(x));
    if (e && gather) e->wait = e->point;
}

/* The units' collectives, each moving the unit padded (n x its shard): the root gathered before
   forward (and for the engine's ZeRO-3 again before backward), each unit one ahead of its
   forward and (FULL_SHARD, ZeRO-3) of its backward, its reduce-scatter after its backward
   (HYBRID_SHARD: then its shard all-reduced across the replicas, one rank per node, each on its
   NIC share while the node's other ranks reduce theirs); under --fsdp-grad-sync last
   the reductions run in the last micro-step only. docs/formulas.md "Communication per optimizer
   step". */
void rule_unit_collectives(const StepCtx *x, Step *st) {
    int engine_z3 = x->s->buffers == BUF_DS_STAGE3 && !x->ds_py;
    if (!(x->fsdp || engine_z3) || x->L == 0) return;
    int64_t n = x->n, replicas = (x->N + n - 1) / n;
    int crosses = x->s->group_node ? 0 : dp_crosses(x), hsdp = x->s->group_node && x->N > n;
    double pb = x->p->param_bytes, gb = plan_fsdp_reduce_bytes(x->t, x->sk);
    StepMicro rmicro = plan_fsdp_reduce_last_only(x->t, x->sk) ? MICRO_LAST : MICRO_EVERY;
    const StepUnit *root = NULL;
    for (int k = 0; k < x->n_units; k++)
        if (x->units[k].root && x->z.root_unit + x->z.root_frozen > 0) root = &x->units[k];
    StepXfer *g = root ? coll(st, RULE_UNIT_COLLECTIVES, pt(x, PT_FWD, 0), COLL_ALL_GATHER, PURPOSE_UNIT_PARAMS,
                              PHASE_FORWARD, SCHED_ASYNC_BEFORE, MICRO_EVERY, (double)n * (root->shard + root->fshard) * pb, n, crosses)
                         : NULL;
    if (g) {   /* gathered first, as forward starts (no prefetch ahead of it) */
        g->charge = 0;
        g->wait = g->point;
        g->root = 1;
    }
    for (int k = 0; k < x->n_units; k++) {
        const StepUnit *u = &x->units[k];
        if (u->root || u->elems + u->felems <= 0) continue;
        StepXfer *e = coll(st, RULE_UNIT_COLLECTIVES, pt(x, PT_FWD, u->first), COLL_ALL_GATHER, PURPOSE_UNIT_PARAMS,
                           PHASE_FORWARD, SCHED_PREFETCH, MICRO_EVERY, (double)n * (u->shard - u->eshard + u->fshard) * pb,
                           n, crosses);
        if (e) e->wait = e->point;
        expert_unit_coll(x, st, u, COLL_ALL_GATHER, PHASE_FORWARD, MICRO_EVERY, pb);
    }
    if (x->s->buffers != BUF_FSDP_GRAD_OP) {
        StepXfer *r = root && engine_z3 ? coll(st, RULE_UNIT_COLLECTIVES, pt(x, PT_BWD, x->L - 1), COLL_ALL_GATHER,
                                               PURPOSE_UNIT_PARAMS, PHASE_BACKWARD, SCHED_SYNC_BEFORE, MICRO_EVERY,
                                               (double)n * (root->shard + root->fshard) * pb, n, crosses) : NULL;
        if (r) r->root = 1;   /* the engine releases its root after forward: gathered again */
        for (int k = x->n_units - 1; k >= 0; k--) {
            const StepUnit *u = &x->units[k];
            if (u->root || u->elems + u->felems <= 0) continue;
            StepXfer *e = coll(st, RULE_UNIT_COLLECTIVES, pt(x, PT_BWD, u->last), COLL_ALL_GATHER, PURPOSE_UNIT_PARAMS,
                               PHASE_BACKWARD, SCHED_PREFETCH, MICRO_EVERY,
                               (double)n * (u->shard - u->eshard + u->fshard) * pb, n, crosses);
            if (e) e->wait = e->point;
            expert_unit_coll(x, st, u, COLL_ALL_GATHER, PHASE_BACKWARD, MICRO_EVERY, pb);
        }
    }
    for (int k = x->n_units - 1; k >= 0; k--) {
        const StepUnit *u = &x->units[k];
        if (u->root ? !root || x->z.root_unit <= 0 : u->elems <= 0) continue;   /* gradients only */
        int at = pt(x, PT_BWD, u->root ? 0 : u->first);
        StepXfer *s = coll(st, RULE_UNIT_COLLECTIVES, at, COLL_REDUCE_SCATTER, PURPOSE_UNIT_GRADS, PHASE_BACKWARD,
                           SCHED_ASYNC_AFTER, rmicro, (double)n * (u->shard - u->eshard) * gb, n, crosses);
        if (s) s->root = (uint8_t)u->root;
        expert_unit_coll(x, st, u, COLL_REDUCE_SCATTER, PHASE_BACKWARD, rmicro, gb);
        StepXfer *a = hsdp ? coll(st, RULE_UNIT_COLLECTIVES, at, COLL_ALL_REDUCE, PURPOSE_REPLICA_GRADS, PHASE_BACKWARD,
                                  SCHED_ASYNC_AFTER, rmicro, u->shard * gb, replicas, PLAN_CROSSES_STRIDED) : NULL;
        if (a) {
            a->charge = 0;   /* issued with the reduce-scatter */
            a->root = (uint8_t)u->root;
        }
    }
}

/* memplan's engine under ZeRO-1/2/3: its reduce bucket sized to the model (at most
   reduce_bucket_size), and for ZeRO-1/2 the bucket reduce-scatters (every micro-step for ZeRO-2,
   at the boundary for ZeRO-1) and the step's all-gathers of the updated shards through it
   (exec/exec_strategy.c; validate checks them). */
void rule_engine_buckets(const StepCtx *x, Step *st) {
    if (!plan_strategy_is_deepspeed(x->sk) || x->ds_py) return;
    double gb = x->p->grad_bytes, psi = x->z.psi, bkt = PLAN_DS_REDUCE_BUCKET;   /* the engine's own */
    if (x->N > 1)
        step_hold(st, RULE_DS_BUCKET, TERM_COMM, pt(x, PT_START, 0), AT_BEFORE, pt(x, PT_END, 0), AT_AFTER,
                  fmin(bkt, psi) * gb);
    if (x->s->buffers != BUF_DS_REDUCE || x->N <= 1) return;
    double n_buckets = ceil(psi / bkt), padded = (double)x->n * x->z.psi_shard;
    BucketIssue how = {(x->s->shard & SHARD_GRAD) ? MICRO_EVERY : MICRO_LAST, SCHED_ASYNC_AFTER, 0};
    buckets(x, st, RULE_ENGINE_BUCKETS, COLL_REDUCE_SCATTER, how, n_buckets, padded * gb, bkt * gb, bkt, 0, x->N);
    StepXfer *e = coll(st, RULE_ENGINE_BUCKETS, pt(x, PT_STEP, 0), COLL_ALL_GATHER, PURPOSE_UPDATED_PARAMS, PHASE_STEP,
                       SCHED_SYNC_AFTER, MICRO_ONCE, padded * x->p->param_bytes, x->N, dp_crosses(x));
    if (e) e->count = n_buckets;
}

/* SyncBatchNorm (torch/nn/modules/_functions.py): per BN layer, forward all-gathers
   [mean, invstd, count] (2C+1 fp32 per rank), backward all-reduces [sum_dy, sum_dy_xmu] (2C
   fp32); both synchronous. */
void rule_syncbn(const StepCtx *x, Step *st) {
    if (!x->t->syncbn) return;
    for (int i = 0; i < x->L; i++) {
        double C = (double)x->m->layers[i].bn_channels;
        if (C > 0)
            coll(st, RULE_SYNCBN, pt(x, PT_FWD, i), COLL_ALL_GATHER, PURPOSE_SYNCBN_STATS, PHASE_FORWARD,
                 SCHED_SYNC_AFTER, MICRO_EVERY, (2.0 * C + 1) * 4 * (double)x->N, x->N, dp_crosses(x));
    }
    for (int i = x->L - 1; i >= 0; i--) {
        double C = (double)x->m->layers[i].bn_channels;
        if (C > 0)
            coll(st, RULE_SYNCBN, pt(x, PT_BWD, i), COLL_ALL_REDUCE, PURPOSE_SYNCBN_GRADS, PHASE_BACKWARD,
                 SCHED_SYNC_AFTER, MICRO_EVERY, 2.0 * C * 4, x->N, dp_crosses(x));
    }
}
