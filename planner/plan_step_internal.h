/* plan_step_internal.h — what the rules share: one setup resolved once (plan_step_ctx.c), the
 * rule functions (plan_rules_*.c) and small helpers. Not for callers outside planner/. */
#ifndef PLAN_STEP_INTERNAL_H
#define PLAN_STEP_INTERNAL_H

#include "plan_activ.h"
#include "plan_deepspeed.h"
#include "plan_dim.h"
#include "plan_dim_moe.h"
#include "plan_dim_offload.h"
#include "plan_dim_pp.h"
#include "plan_dim_tp.h"
#include "plan_fsdp.h"
#include "plan_step.h"

/* Gradient accumulation (--grad-accum K > 1; docs/formulas.md "Gradient accumulation"): what
   the K-1 earlier micro-steps leave for the last one, whose backward holds the peak. */
typedef struct {
    double held;         /* gradient bytes from the start of the last micro-step's forward */
    int in_place;        /* the held gradients are the ones the last micro-step accumulates into:
                            its backward adds none (ZeRO-1, FSDP1 no_sync, FSDP2 every) */
    int persistent;      /* held by the resident gradients (DDP, one GPU, FSDP1 every, the
                            other torch layouts); held stays 0 */
    int unit_unsharded;  /* FSDP2 last: held is every unit's unsharded gradient */
    double ub;           /* FSDP2 last: bytes per held unsharded element */
    int in_place_tensor; /* a layer's backward holds its largest tensor's new gradient (at the
                            gradients' dtype) until AccumulateGrad has added it to the held one */
} Accum;

/* The units a sharded strategy gathers and reduces one at a time: the model's repeated blocks,
   then the root (the layers outside them), or every layer with parameters where the model has no
   units. Shards as plan_memory_sizes pads them (per flat unit, or FSDP2's per-tensor dim 0). */
typedef struct {
    int first, last;     /* layers [first, last] (the root: every unit-0 layer, first..last span) */
    double elems;        /* parameters */
    double shard;        /* this rank's shard (elements) */
    double felems, fshard;   /* frozen parameters: gathered, never reduced (0 without them) */
    int root;
    double eshard;       /* of shard, the routed experts' part: gathered and reduced over the
                            expert data-parallel group, not n (plan_dim_ep.h; 0 without --ep) */
} StepUnit;

typedef struct StepCtx {
    const RankView *v;       /* the rank's view the step is of (plan_dim.h) */
    const ModelSpec *m;      /* its model (v->m): one rank's share under --tp, one stage under --pp */
    const TrainSpec *t;      /* v->t */
    const ClusterSpec *c;    /* v->dp: the data-parallel cluster the strategy's rules see */
    const ClusterSpec *full; /* v->full: the whole cluster (the tp and pp groups' links) */
    StrategyKind sk;
    const Strategy *s;
    const PrecisionSpec *p;
    const OptimizerSpec *o;
    MemSizes z;
    ActInputs in;
    int L;
    int64_t N, n;            /* ranks; shard group */
    /* which layout runs (docs/formulas.md "Checked against PyTorch and DeepSpeed") */
    int torch;               /* --impl pytorch: the frameworks' own layouts */
    int engine;              /* --impl engine: memplan's own engine */
    int ds_py;               /* DeepSpeed as it runs (zero1/2/3, --impl pytorch) */
    int ds12, ds12_stage1;   /* ZeRO-1/2 as it runs; stage 1 */
    int ds12_forward;        /* its buckets filled in forward order: ZeRO-1 without overlap_comm
                                (reduce_gradients walks the groups after backward), else the hooks' */
    Ds12Buckets ds12b;       /* its reduce buckets (plan_ds12_buckets) */
    int ds3_py, ds3;         /* ZeRO-3 as it runs; on more than one rank (it gathers) */
    int fsdp;                /* the fsdp-* rows */
    Fsdp2 f2;                /* FSDP2's timeline (f2.on) */
    DsSizes ds;              /* DeepSpeed's per-tensor sizes (ds_py) */
    DsKnobs dsk;             /* DeepSpeed's bucket and stage-3 sizes (plan_ds_knobs) */
    Accum acc;
    int opt_on_gpu;          /* the optimizer step runs on the GPU (no CPU offload) */
    int grads_persistent;    /* gradients live across steps */
    double params_steady, opt_steady, grads_steady;   /* bytes; grads_steady without ds_norm */
    double ds_norm;          /* DeepSpeed's kept norm scalar (bytes) */
    double ds_fp32;          /* DeepSpeed's fp32 partition copy of fp32 parameters (bytes) */
    double o_part;           /* local optimizer elements */
    int reduce_pt;           /* where backward's gradients give way to the reduction's: the first
                                reduction (ZeRO-1/2 on several ranks), else the norm */
    StepUnit *units;         /* the sharded units (n_units), root last */
    int n_units;
    int *unit_of;            /* [L]: index into units of layer i's unit, -1 none */
    OffloadHost host;        /* the rank's host memory, traffic and CPU step (plan_offload_host of
                                the view's model, setup and cluster), made once for the rules */
    double *mlp_ws;          /* [L]: step_mlp_ws, computed once (four rules read it per layer);
                                NULL in a time-only build (no rule that reads it runs) */
    double *moe_freed;       /* [L]: step_moe_freed, computed once (two rules read it per layer);
                                NULL in a time-only build, as mlp_ws */
} StepCtx;

/* Resolves the setup of view v; 0, or -1 out of memory (FSDP2's or the units' tables).
   plan_step_ctx_init_for: for a build of `what` (plan_step.h): a time-only build leaves mlp_ws
   NULL, which only rules that write memory events alone read. */
int plan_step_ctx_init(StepCtx *x, const RankView *v);
int plan_step_ctx_init_for(StepCtx *x, const RankView *v, unsigned what);
void plan_step_ctx_free(StepCtx *x);

/* The account's memory events in step order (point, then before/after its moment), stable: a
   malloc'd index array, or NULL when out of memory. */
int *plan_step_order_events(const Step *st);
/* The account's moments replayed with c's flat margin (no allocator replay): fills r and calls
   fn at every moment (plan_step.c); plan_step_replay adds the allocator's share on top
   (plan_step_alloc.c). */
void plan_step_replay_tensors(const Step *st, const ClusterSpec *c, MemResult *r, MemMomentFn fn, void *ctx);

/* The tensors, streams and order the allocation listing gives each rule's events under x's
   layout (plan_step_alloc.c): fills st->alloc_*. */
void plan_step_alloc_layout(Step *st, const struct StepCtx *x);

/* Point shorthands. */
static inline int pt(const StepCtx *x, PointKind k, int i) { return plan_step_point(x->L, k, i); }

/* A level a rule keeps (a gathered-bytes figure computed point by point): each change is one
   memory event, so the account stays a list of allocations and frees. */
typedef struct {
    Step *st;
    RuleId rule;
    TermKind term;
    double now;
} StepLevel;

static inline void step_level(StepLevel *lv, int point, double value) {
    if (value != lv->now) step_mem(lv->st, lv->rule, lv->term, point, AT_BEFORE, value - lv->now);
    lv->now = value;
}

/* 1 when a PyTorch block's backward has an MLP moment (plan_act_block_backward_bytes > 0). */
double step_mlp_ws(const StepCtx *x, int i);
/* Bytes of a routed MoE block's saved tensors freed at its MLP moment (plan_moe_bwd_freed_bytes). */
double step_moe_freed(const StepCtx *x, int i);
/* Elements of layer i that autocast casts (its matmul weights; a tied head: the embedding's). */
double step_cast_elems(const StepCtx *x, int i);
/* 1 when layer i is checkpointed and its casts live only in autocast's cache: cleared when the
   region exits after forward, made again when it is recomputed. */
int step_casts_cached(const StepCtx *x, int i);
/* 1 when layer i's casts live only while it runs (checkpointed under FSDP1's flat-parameter
   views, never cached). */
int step_casts_leave_with_block(const StepCtx *x, int i);

/* The core rules, in the order the builder runs them (the collective table's row order follows
   it); each dimension's rules (PlanDim.rule) run after them, in the table's order. */
typedef void (*StepRuleFn)(const StepCtx *x, Step *st);
void rule_model_states(const StepCtx *x, Step *st);
void rule_grads_kept(const StepCtx *x, Step *st);
void rule_accum_grads(const StepCtx *x, Step *st);
void rule_autograd_grads(const StepCtx *x, Step *st);
void rule_tied_head(const StepCtx *x, Step *st);
void rule_engine_grad_flight(const StepCtx *x, Step *st);
void rule_ds12_gradients(const StepCtx *x, Step *st);
void rule_fsdp2_gradients(const StepCtx *x, Step *st);
void rule_mlp_pending_grads(const StepCtx *x, Step *st);
void rule_step_grads(const StepCtx *x, Step *st);
void rule_ddp_reducer(const StepCtx *x, Step *st);
void rule_ds12_reducer(const StepCtx *x, Step *st);
void rule_ds3_coordinator(const StepCtx *x, Step *st);
void rule_unit_static_buffers(const StepCtx *x, Step *st);
void rule_fsdp2_buffers(const StepCtx *x, Step *st);
void rule_unit_collectives(const StepCtx *x, Step *st);
void rule_engine_buckets(const StepCtx *x, Step *st);
void rule_ds_step_collectives(const StepCtx *x, Step *st);
void rule_ddp_broadcast(const StepCtx *x, Step *st);
void rule_syncbn(const StepCtx *x, Step *st);
void rule_host_copies(const StepCtx *x, Step *st);   /* plan_dim_offload.c */
void rule_saved_activations(const StepCtx *x, Step *st);
void rule_autocast_cache(const StepCtx *x, Step *st);
void rule_backward_transients(const StepCtx *x, Step *st);
void rule_loss(const StepCtx *x, Step *st);
void rule_optimizer_transients(const StepCtx *x, Step *st);
void rule_compute(const StepCtx *x, Step *st);
void rule_tp(const StepCtx *x, Step *st);           /* plan_dim_tp.c */
/* Every rule a step runs, in order (the core rules, then each dimension's): fns[0..max), their
   count. */
int plan_step_rule_fns(StepRuleFn *fns, int max);
/* The rule ids rule fn writes (memory events, transfers, work) when it runs alone on view v:
   written[id] = 1. 0, or -1 out of memory. For the invariant that a rule writes only its own. */
int plan_step_rule_writes(const RankView *v, StepRuleFn fn, unsigned char written[RULE_COUNT]);
void rule_pp(const StepCtx *x, Step *st);           /* plan_dim_pp.c */

#endif
