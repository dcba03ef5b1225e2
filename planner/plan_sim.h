/* plan_sim.h — an event-level simulation of one optimizer step on one rank (all ranks are
 * symmetric): per-layer compute on a compute stream, collectives on a communication stream in
 * FIFO order, DDP bucket triggers, FSDP/ZeRO-3 just-in-time gathers with one unit of prefetch,
 * reduce-scatters after each unit's backward, synchronous SyncBN collectives, and the optimizer
 * step. It yields the step time, the exposed communication, and — from the same account's memory
 * replay, stamped with the simulated times — a memory-over-time curve whose maximum is the memory
 * model's peak. docs/formulas.md "Time". */
#ifndef PLAN_SIM_H
#define PLAN_SIM_H

#include "plan_comm.h"
#include "plan_gpu.h"
#include "plan_memory.h"
#include "plan_model.h"
#include "plan_strategy.h"
#include "plan_train.h"
#include "plan_cost.h"

typedef enum { LANE_COMPUTE = 0, LANE_COMM = 1 } SimLane;

typedef struct {
    char name[40];           /* "fwd block.3", "all_gather block.4", "optimizer" */
    SimLane lane;
    double start, dur;       /* seconds from the start of the step */
    double bytes;            /* payload of a collective */
} SimOp;

typedef struct {
    double t;                /* seconds */
    double term[TERM_COUNT];
    double total;
} SimMem;

typedef struct {
    double compute_s;        /* Σ compute on the compute stream (incl. optimizer) */
    double fwd_s, bwd_s, opt_s;   /* phase walls per optimizer step: forward (all micro-steps),
                                     backward (to the last collective it waits for), optimizer
                                     (incl. ZeRO-1/2's parameter all-gather): compute + waits */
    double fwd_compute_s, bwd_compute_s, opt_compute_s;   /* the compute inside them */
    double zero_s;           /* before forward, in no phase: the engine zeroing its gradients
                                (--impl engine; 0 otherwise); the phases + zero_s = the step */
    double comm_s;           /* Σ collective time on the communication stream */
    double exposed_comm_s;   /* step_s - compute_s: communication not hidden by compute */
    double pp_bubble_s;      /* --pp: the pipeline's fill and drain, (pp - 1) / (V M) x the micro-steps' walls (in step_s) */
    double step_s;           /* one optimizer step (grad_accum micro-steps) */
    double tokens_per_s;     /* global tokens (samples for CNNs) per second */
    double flops_per_step;   /* per GPU */
    /* the collectives the step ran over all its micro-steps, per purpose and op: what the
       collective table counts (plan_comm_step), call by call and byte by byte */
    double coll_count[PURPOSE_COUNT][COLL_COUNT];
    double coll_payload[PURPOSE_COUNT][COLL_COUNT];
    SimOp *ops; int n_ops, cap_ops;     /* recorded when asked */
    SimMem *mem; int n_mem, cap_mem;
    double mem_peak;
} SimResult;

/* The simulated step of a built step account (plan_step.h) as it is: its micro-batch, its
 * grad_accum micro-steps, its rank's view (the tp share, the pp stage) on the whole cluster's
 * links. record = 1 keeps the op list and the memory curve (the same account's moments; free
 * with plan_sim_free). Returns 0, -1 when out of memory, the step's PlanStatus when it was not
 * built. */
struct Step;
int plan_sim_step(const struct Step *st, int record, SimResult *out);
/* A ceiling on plan_sim_step(st)'s tokens_per_s without simulating: the step's samples over its
 * micro-steps' layer compute, its zeroing and its optimizer's compute alone (a floor under the step's time). INFINITY where it has none. */
double plan_sim_tokens_ceiling(const struct Step *st);
/* plan_sim_step of the step of (m, t, c, s), built for the purpose. */
int plan_sim(const ModelSpec *m, const TrainSpec *t, const ClusterSpec *c, StrategyKind s,
             int record, SimResult *out);
void plan_sim_free(SimResult *r);

#endif
