/* plan_auto.h — auto mode: search strategy x CPU offload x precision regime x activation
 * checkpointing x micro-batch (x accumulation for a global batch), keep the setups whose peak
 * leaves the safety margin (and whose host memory fits), and pick the highest simulated
 * throughput (the least communication time when the model's compute is not known), preferring
 * the simpler setup (DDP, then ZeRO/FSDP by sharding, then offload) within a few percent. What the AutoSpec marks as kept (micro-batch, checkpointing,
 * accumulation) is not searched. Explains the winner, the runner-up and why the simpler ones
 * lost; when nothing fits, the cheapest change that would. Emits a DeepSpeed config or a
 * torchrun command with the wrapping snippet. docs/formulas.md "Auto". */
#ifndef PLAN_AUTO_H
#define PLAN_AUTO_H

#include <stdio.h>
#include "plan_plan.h"

typedef struct AutoSpec {
    int64_t global_batch;    /* samples per optimizer step over all GPUs; 0 = keep --grad-accum */
    int64_t bn_min_batch;    /* per-GPU batch below which SyncBN is worth its cost (16) */
    int64_t max_micro_batch; /* search bound (1024) */
    unsigned strategies;     /* candidates (bit per StrategyKind) */
    unsigned offloads;       /* bit per OffloadKind searched (default all) */
    unsigned precisions;     /* bit per PrecisionKind searched; 0 = the TrainSpec's only */
    double min_headroom_frac;   /* safety margin: max(frac x GPU memory, floor) ... */
    double min_headroom_floor;  /* ... bytes (defaults 5% and 512 MiB) */
    double near_frac;        /* throughputs within this fraction count as equal (0.03) */
    int keep_batch;          /* the TrainSpec's micro-batch is fixed (given, or nothing to size it from) */
    int keep_ckpt;           /* its act_ckpt / ckpt_every are fixed (given) */
    int keep_accum;          /* its grad_accum is fixed (given); with global_batch the micro-batch
                                follows: global_batch / gpus / grad_accum, a whole number */
    int sp_fixed;            /* --tp auto: --sp was given, so only that setting is tried */
    int exhaustive;          /* 1: every option's allocator search run, no bound spares one (the
                                result is the same; tests compare); 0 = bounded (plan_auto.c) */
    int no_why;              /* 1: the caller reads the pick, its figures and the fix but not the
                                explanation's per-strategy "why" lines, which are not made (each
                                plans its strategy again): plan_auto_recommend */
} AutoSpec;

#define PLAN_AUTO_HEADROOM_FRAC 0.05
#define PLAN_AUTO_HEADROOM_FLOOR (512.0 * 1024 * 1024)
#define PLAN_AUTO_NEAR 0.03

typedef struct {
    int found;
    StrategyKind strategy;
    TrainSpec train;         /* the chosen micro-batch, accumulation, checkpointing */
    MemResult mem;
    CommPlan comm;
    SimResult time;
    long candidates;         /* setups considered (strategy x micro-batch x checkpointing) */
    long evaluated;          /* of those, simulated (the rest were pruned: larger than the largest
                                micro-batch that fits, or not dividing the global batch) */
    double margin;           /* the safety margin applied (bytes) */
    int time_known;          /* the model's compute is known: setups rank by simulated tokens/s;
                                otherwise by their communication time (collectives + host copies) */
    double top_score;        /* the best score: tokens/s, or 1 / the least communication seconds */
    double top_tps;          /* the fastest setup's throughput (time known; the pick is within near_frac) */
    double comm_s;           /* the pick's communication per step (plan_comm: collectives + host) */
    int runner_found;        /* the best setup of another strategy/offload */
    StrategyKind runner;
    TrainSpec runner_train;
    double runner_tps, runner_comm_s;
    char fix[512];           /* nothing fits: the cheapest changes that would ("" otherwise) */
    char explain[6144];      /* lines, each ending in '\n' */
} AutoResult;

void plan_auto_defaults(AutoSpec *a);
/* "fsdp-full + offload opt, amp-bf16": a searched setup's name in explanations, into buf. */
const char *plan_auto_setup_name(StrategyKind k, const TrainSpec *t, char *buf, size_t len);
/* The precision regimes auto searches for precision p on a GPU: p's autocast and its
   fp32-master mixed twin (amp-bf16 <-> mixed-bf16, amp-fp16 <-> mixed-fp16). Bit mask. */
unsigned plan_auto_precisions(PrecisionKind p);
int plan_auto(const ModelSpec *m, const TrainSpec *t, const ClusterSpec *c, const AutoSpec *a,
              AutoResult *out);
/* auto over the dimensions whose degree is searched (--tp auto, --pp auto: PlanDim.auto_on): plan_auto
   for each setting each offers (pp outermost), the simpler kept unless a larger degree is faster
   by more than a->near_frac; the explanation lists each. Plain plan_auto when none is searched. 0,
   or -1 out of memory. */
int plan_auto_dims(const ModelSpec *m, const TrainSpec *t, const ClusterSpec *c, const AutoSpec *a,
                   AutoResult *out);
/* plan's recommendation: auto's rule (plan_auto_dims: the safety margin of `rule`, NULL for the
   defaults; the fastest; the simpler within near_frac) over the strategies of p's rows, with
   everything else as t fixes it (micro-batch, accumulation, checkpointing, precision, offload,
   the degrees). Sets p->recommended (-1 when no row leaves the margin) and p->reason. */
void plan_auto_recommend(const ModelSpec *m, const TrainSpec *t, const ClusterSpec *c, const AutoSpec *rule, Plan *p);
/* 1 when some strategy of the mask passes every dimension's check for t on c; else 0 with the
   last refusal in msg (may be NULL). */
int plan_auto_any_strategy(const ModelSpec *m, const TrainSpec *t, const ClusterSpec *c, unsigned strategies,
                           char *msg, size_t len);

#endif
