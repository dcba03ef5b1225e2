/* plan_step.h — one training step as data: the account every figure of a plan is read from.
 *
 * A step is an ordered list of points (the forward of each layer, the loss, the backward of
 * each layer with its sub-moments, the end-of-backward reductions, the optimizer step). Small
 * rules (plan_rules.c: one per framework mechanism, each citing its source) describe what that
 * mechanism does at those points:
 *   - memory events: bytes allocated (+) or freed (-) for one term, before or after a point's
 *     moment;
 *   - moments: the points where the memory is sampled (candidate peaks);
 *   - transfers: collectives and host copies, with when they are issued and who waits for them;
 *   - work: the compute of each point (FLOPs and bytes, priced by the cluster's rates).
 * A step is built once per strategy (and once per micro-batch a search probes), for one rank's
 * view of the setup (plan_dim.h: the tp share, the pp stage), at the setup's micro-batch. The
 * memory model replays its events (peak, terms at the peak and the rule behind each byte), the
 * collective table sums its transfers, the simulated step schedules its work and transfers on
 * two streams, the max-micro-batch search replays the steps of the batches it probes, and
 * --explain, --trace, --plot and the JSON read the same object: one account, every reader.
 * docs/architecture.md draws the flow; docs/formulas.md gives every rule's source. */
#ifndef PLAN_STEP_H
#define PLAN_STEP_H

#include <stdint.h>

#include "plan_comm.h"
#include "plan_dim.h"
#include "plan_memory.h"
#include "plan_util.h"

/* ---- points ---- */
typedef enum {
    PT_START = 0,   /* before the first forward: what lives across steps */
    PT_FWD,         /* layer i's forward */
    PT_LOSS_FWD,    /* the loss's forward */
    PT_LOSS_BWD,    /* the loss's backward */
    PT_BWD_MLP,     /* the first part of block i's backward (its MLP) */
    PT_BWD,         /* layer i's backward */
    PT_BWD_UNIT,    /* after layer i's backward: its unit's post-backward (reduce-scatter) */
    PT_ROOT_RS,     /* the root unit's post-backward, after every layer */
    PT_REDUCE1,     /* end-of-backward gradient reduction(s) */
    PT_REDUCE2,
    PT_NORM,        /* the optimizer step's gradient norm */
    PT_STEP,        /* the optimizer step */
    PT_END,         /* after the step: what is freed only here lives across steps */
    PT_KIND_COUNT
} PointKind;

/* Point index of kind k at layer i (i ignored for the kinds without a layer). */
int plan_step_point(int n_layers, PointKind k, int i);
/* The kind and layer of point index p. */
PointKind plan_step_point_kind(int n_layers, int p, int *layer);

typedef enum { AT_BEFORE = 0, AT_AFTER = 1 } StepWhen;   /* relative to the point's moment */

/* ---- rules ---- */
typedef enum {
    /* model states */
    RULE_PARAMS = 0, RULE_OPTIMIZER, RULE_DS_FP32_COPY, RULE_GRADS_KEPT, RULE_DS_NORM_SCALAR,
    /* gradients in backward */
    RULE_ACCUM_GRADS, RULE_AUTOGRAD_GRADS, RULE_STEP_GRADS, RULE_INPLACE_ACCUM, RULE_TIED_HEAD_GRAD,
    RULE_TIED_SUM, RULE_MLP_PENDING_GRADS, RULE_ENGINE_GRAD_FLIGHT,
    /* DeepSpeed ZeRO-1/2 */
    RULE_DS12_PARTITION, RULE_DS12_IN_FLIGHT, RULE_DS12_NOT_MOVED, RULE_DS_BUCKET, RULE_DS_FLATTEN,
    RULE_DS_STEP_GATHER, RULE_DS_NORM_COPY, RULE_DS_FP32_STEP_GRAD, RULE_DS_NORM_ALLREDUCE,
    /* DeepSpeed ZeRO-3 */
    RULE_DS3_GATHER, RULE_DS3_REDUCE_SCATTER,
    /* DDP */
    RULE_DDP_BUCKETS, RULE_DDP_BROADCAST,
    /* sharded units: FSDP1, FSDP2, memplan's engine ZeRO-1/2/3 */
    RULE_UNIT_GATHER, RULE_FSDP2_BUFFERS, RULE_FSDP2_UNSHARDED_GRADS, RULE_FSDP2_SHARDED_GRADS,
    RULE_UNIT_COLLECTIVES, RULE_ENGINE_BUCKETS,
    /* activations and transients */
    RULE_SAVED_ACTS, RULE_LOOP_LOGITS, RULE_AUTOCAST_CACHE, RULE_RECAST, RULE_MLP_BACKWARD,
    RULE_BWD_WORKSPACE, RULE_LOSS_FORWARD, RULE_LOSS_BACKWARD, RULE_CPU_CONV_BWD, RULE_FOREACH_TEMP,
    RULE_QUANT_DEQUANT, RULE_ATTN_MASK, RULE_FWD_TEMPS,
    /* other collectives and host traffic */
    RULE_SYNCBN, RULE_HOST_COPIES, RULE_TP_COLLECTIVES,
    /* tensor parallel */
    RULE_TP_EMBED_GRAD, RULE_TP_LOGITS_GATHER, RULE_TP_LOSS_PARALLEL,
    /* pipeline parallel */
    RULE_PP_IN_FLIGHT, RULE_PP_SEND_RECV, RULE_PP_OUTPUTS,
    /* expert parallel */
    RULE_EP_ALL_TO_ALL,
    /* context parallel */
    RULE_CP_RING,
    /* compute */
    RULE_LAYER_COMPUTE, RULE_ENGINE_PASSES, RULE_OPTIMIZER_STEP,
    RULE_COUNT
} RuleId;

typedef struct {
    const char *name;        /* "ddp_bucket_copy" */
    const char *mechanism;   /* one line: what the framework does */
    const char *source;      /* the framework source and the docs/formulas.md section */
} RuleInfo;

const RuleInfo *plan_rule_info(RuleId r);

/* ---- the account ---- */
typedef struct {
    int32_t point;
    uint8_t when;            /* StepWhen */
    uint8_t term;            /* TermKind */
    uint16_t rule;           /* RuleId */
    double bytes;            /* + allocated, - freed */
} StepMem;

/* How the simulated step schedules a transfer. */
typedef enum {
    SCHED_SYNC_BEFORE = 0,   /* blocks the compute stream before the point's compute */
    SCHED_ASYNC_BEFORE,      /* issued before the point's compute; the `wait` point's compute waits */
    SCHED_PREFETCH,          /* issued when the compute before the point started (one ahead);
                                the point's compute waits */
    SCHED_SYNC_AFTER,        /* blocks the compute stream after the point's compute */
    SCHED_ASYNC_AFTER,       /* issued after the point's compute; the end of backward waits */
    SCHED_HOST_SPREAD,       /* host copy beside the gathers (h2d) / reduce-scatters (d2h), in
                                proportion to each layer's parameters */
    SCHED_HOST_OVERLAP,      /* host copy overlapping backward; what it does not hide is exposed */
    SCHED_HOST_AFTER_STEP    /* host copy on the critical path after the CPU optimizer step */
} StepSched;

/* In which micro-steps of a step with accumulation a transfer or compute runs. */
typedef enum { MICRO_EVERY = 0, MICRO_LAST, MICRO_ONCE } StepMicro;

typedef enum { XFER_COLL = 0, XFER_D2H, XFER_H2D } XferKind;

typedef struct {
    uint8_t kind;            /* XferKind */
    uint8_t op;              /* CollKind (XFER_COLL) */
    uint8_t purpose;         /* CollPurpose */
    uint8_t phase;           /* PhaseKind of the collective table */
    uint8_t sched;           /* StepSched */
    uint8_t micro;           /* StepMicro */
    uint8_t charge;          /* 1: issuing it costs the issuing rank compute (coll_issue_s) */
    uint8_t root;            /* 1: the root unit's (the layers outside the repeated blocks) */
    uint8_t chain;           /* 1 (SCHED_ASYNC_AFTER): once it is issued, the compute stream waits for
                                the previous chained transfer of the micro-step (DeepSpeed's
                                double-buffered reduce bucket, overlap_comm) */
    uint16_t rule;
    int32_t point;           /* where it is issued */
    int32_t wait;            /* whose compute waits for it (SCHED_ASYNC_BEFORE, SCHED_PREFETCH) */
    double count;            /* collectives (per micro-step where micro = EVERY) */
    double payload;          /* bytes, all of them */
    int64_t group;           /* ranks */
    int crosses;             /* the ring crosses nodes */
    double seconds;          /* host copies: their time (collectives: from the cost model) */
} StepXfer;

/* WORK_BATCH: a layer's forward or backward over the step's micro-batch (its seconds priced at
   that batch: the GEMMs' efficiency depends on it); WORK_FIXED: per micro-step whatever the batch
   (the engine's buffer passes, the optimizer). */
typedef enum { WORK_BATCH = 0, WORK_FIXED } WorkScale;

typedef struct {
    int32_t point;
    uint8_t scale;           /* WorkScale */
    uint8_t micro;           /* StepMicro */
    uint16_t rule;
    double seconds;          /* at the cluster's rates, for the step's micro-batch */
    double flops;            /* counted in the step's FLOPs, for the step's micro-batch */
} StepWork;

typedef struct Step {
    RankView view;           /* the rank's view the account is of (owned): its model, clusters, setup */
    int n_layers, n_points;
    StepMem *mem;   int n_mem, cap_mem;
    StepXfer *xfer; int n_xfer, cap_xfer;
    StepWork *work; int n_work, cap_work;
    uint8_t *sampled;        /* [n_points]: a moment is taken here */
    /* model states as the rules declare them (steady, fully allocated) */
    double ms_params, ms_grads, ms_optimizer, opt_host_bytes;
    double cuda_context, cublas_ws, nccl, fixed;
    int nccl_comms;
    int64_t shard_group;
    int acts_known;
    double tokens_per_sample;
    /* how the allocation listing (plan_step_alloc.c) reads the account, set at build by
       plan_step_alloc_layout: the tensors each rule's events stand for (StepSplit), the stream
       its allocations are made on, and whether the optimizer's states appear at the first
       step() (torch.optim) rather than before it */
    uint8_t alloc_split[RULE_COUNT];
    uint8_t alloc_stream[RULE_COUNT];
    uint8_t alloc_lazy_opt, alloc_opt_copies;
    uint8_t alloc_init_bcast;   /* DDP's construction broadcasts the module's states in flat chunks */
    uint8_t alloc_ddp_rebuild;  /* DDP's first iteration has one bucket, rebuilt in the second */
    uint8_t alloc_unit_keep;    /* FSDP keeps the units' unsharded parameters after forward (SHARD_GRAD_OP) */
    uint8_t alloc_unit_flat;    /* FSDP1: a unit's gathered parameters are one FlatParameter */
    uint8_t alloc_ds_flatten;   /* DeepSpeed ZeRO-1/2 flattens the parameters at initialisation */
    uint8_t alloc_level[RULE_COUNT];   /* the rule's events change one level (StepLevel): each change
                                          is its tensors freed and the new level's allocated */
    /* host memory per node (plan_dim_offload.h), of the setup as given: model states offloaded by
       the node's ranks, or the load-time copies */
    double host_per_node, host_capacity;
    int host_fits;
    int failed;              /* not built: status below */
    int status;              /* PlanStatus (plan_util.h): PLAN_ERR_NOMEM, PLAN_ERR_REFUSED */
    const char *fail_where;  /* short, for the peak_at column ("out of host memory planning it") */
    char fail_why[320];      /* the whole reason (a dimension's refusal) */
    unsigned built_for;      /* PLAN_STEP_ALL, PLAN_STEP_MEMORY (no work items) or PLAN_STEP_TIME
                                (no memory events) */
} Step;

/* Builds the account of one step of strategy s for setup (m, t, c): the rank's views
   (plan_rank_views; under --pp the most loaded stage's) at t's micro-batch. PLAN_OK, or a
   PlanStatus with st->fail_where and st->fail_why saying why (the step is then empty). Free with
   plan_step_free. */
int plan_step_build(Step *st, const ModelSpec *m, const TrainSpec *t, const ClusterSpec *c, StrategyKind s);
/* What a build is for: everything (PLAN_STEP_ALL), the account's memory only (PLAN_STEP_MEMORY:
   the max-batch search's probes; no work items, so such a step is not simulated), or its time
   only (PLAN_STEP_TIME: auto's scores; the work items and collectives as a whole build makes
   them, without the rules that write memory events alone, so such a step is simulated without
   its memory timeline and its memory, the host's included, is not planned). A setup of several candidate ranks (the
   pipeline's stages) is built whole either way: its memory picks the rank. PLAN_STEP_COMPUTE
   (with PLAN_STEP_TIME): the compute rule's work items alone, which a whole build writes alike
   (the rules read the context, not each other's events), so a subset of its work: what
   plan_sim_tokens_ceiling reads, and a step that is not simulated. */
enum { PLAN_STEP_ALL = 0, PLAN_STEP_MEMORY = 1, PLAN_STEP_TIME = 2, PLAN_STEP_COMPUTE = 4 };
int plan_step_build_for(Step *st, const ModelSpec *m, const TrainSpec *t, const ClusterSpec *c, StrategyKind s,
                        unsigned what);
void plan_step_free(Step *st);

/* The memory model over the account: fills r (terms, peak, phases, model states) and calls fn
   at every moment. Host memory and fits are the caller's (plan_memory_step). c: the GPU's memory
   and the allocator's settings. */
void plan_step_replay(const Step *st, const ClusterSpec *c, MemResult *r, MemMomentFn fn, void *ctx);
/* plan_step_replay for a caller that needs only whether the step fits c's GPU: returns 1 with
   r->peak (the tensors and fixed overheads, a lower bound of the peak) and r->alloc_oom (1: the
   allocator model's replay at the GPU's limit runs out, or the tensors alone exceed the GPU) when
   the verdict alone was computed (plan_step_alloc.c); else 0 with r, and the calls to fn, exactly
   plan_step_replay's. */
int plan_step_replay_fits(const Step *st, const ClusterSpec *c, MemResult *r, MemMomentFn fn, void *ctx);
/* Bytes of each rule per term live at moment index k (0 = the first moment; -1 = the peak), for
   explaining a figure: out[rule][term]. */
void plan_step_live_at_peak(const Step *st, const ClusterSpec *c, double out[RULE_COUNT][TERM_COUNT]);

/* Builder API for the rules (plan_rules*.c). */
void step_mem(Step *st, RuleId r, TermKind term, int point, StepWhen w, double bytes);
/* bytes live from (p0, w0) to (p1, w1) */
void step_hold(Step *st, RuleId r, TermKind term, int p0, StepWhen w0, int p1, StepWhen w1, double bytes);
/* bytes live only at point p's moment */
void step_at(Step *st, RuleId r, TermKind term, int point, double bytes);
void step_sample(Step *st, int point);
StepXfer *step_xfer(Step *st, RuleId r, XferKind kind, int point);
void step_work(Step *st, RuleId r, int point, WorkScale scale, StepMicro micro, double seconds, double flops);

#endif
