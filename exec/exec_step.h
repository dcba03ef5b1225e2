/* exec_step.h — one optimizer step of a model under a data-parallel strategy: the training step
 * every program runs (exec_run for `memplan run` and `validate`, the SyncBN benchmark behind
 * `memplan bench syncbn`, bench/cnn_device), written once, for any model behind exec_model.h
 * (GPT-2, the CNN with or without SyncBN) on any device.
 *
 * The step: the strategy's zero_grad; for each of accum micro-batches (the batch callback gives
 * micro-batch a), begin_micro (only the last one reduces), forward, backward (the strategy
 * reduces in its hooks) and the strategy's end of backward; then the optimizer step through the
 * strategy. On a CUDA device the compute stream is synchronized at the end of the optimizer
 * phase, so the step's time is the GPU's.
 *
 * What a program adds is optional: the tracker's and the comm counters' phases (the planner's
 * names: forward, backward, step), the phase timer's (step around everything; forward, backward,
 * optimizer inside; the strategy adds comm_wait inside those), and CUPTI's (forward, backward,
 * comm = the end of backward, optimizer; at each boundary the compute stream is drained so the
 * GPU's work lands in the phase the host gave it). Each step's wall times per phase come back
 * whatever runs. */
#ifndef EXEC_STEP_H
#define EXEC_STEP_H

#include "exec_model.h"
#include "exec_strategy.h"
#include "prof_comm.h"
#include "prof_cupti.h"
#include "prof_mem.h"
#include "prof_phase.h"

/* The phases of a step, by what they are; their names are made from them (exec_phase_name). The
 * first EXEC_PHASE_PARTS are the parts the planner models (and the tracker and the counters
 * see); the step holds them, and comm_wait lies inside them. */
typedef enum {
    EXEC_PHASE_FORWARD = 0,    /* the forward passes */
    EXEC_PHASE_BACKWARD,       /* the backward passes, each with the strategy's end of backward */
    EXEC_PHASE_OPTIMIZER,      /* the optimizer step (and the GPU's last kernels) */
    EXEC_PHASE_STEP,           /* the whole step: zero_grad and the three parts */
    EXEC_PHASE_COMM_WAIT,      /* waiting for collectives (the strategy times it) */
    EXEC_PHASE_COUNT
} ExecPhase;
#define EXEC_PHASE_PARTS 3

/* The phase timer's name: "forward", "backward", "optimizer", "step", "comm_wait". */
const char *exec_phase_name(ExecPhase p);
/* The tracker's and the comm counters' name of a part, the planner's: "forward", "backward",
 * "step" (the optimizer); NULL for the step and comm_wait. */
const char *exec_phase_planner_name(ExecPhase p);

/* Fills micro-batch micro (0 .. accum-1) of the step; 0, or -1 when it cannot. */
typedef int (*ExecBatchFn)(void *ctx, int micro, ExecBatch *b);
/* The callback for one batch made before the step: ctx is that ExecBatch. */
int exec_step_fixed_batch(void *ctx, int micro, ExecBatch *b);

typedef struct {
    ExecModel *m;              /* created with s's hooks and bound (exec_strategy_bind) */
    ExecStrategy *s;
    ExecAdamW opt;
    int accum;                 /* micro-batches per step, >= 1 (as bound) */
    ExecBatchFn batch;
    void *batch_ctx;
    /* optional, NULL: none */
    MemTracker *mt;            /* phases set */
    CommCounters *cc;          /* phases set */
    PhaseTimer *pt;            /* phases timed */
    Device *dev;               /* a CUDA device: synchronized at the end, failures checked */
    ProfCupti *cupti;          /* phases set (dev must be its device) */
} ExecStep;

typedef struct {
    double loss_sum;           /* Σ over the micro-batches of their mean loss, nats */
    int nonfinite;             /* a micro-batch's loss was NaN or infinite */
    double ms[EXEC_PHASE_STEP + 1];   /* wall time per phase (the parts summed over micro-batches), ms */
    const char *why;           /* a failure: the strategy's own reason when it has one (more precise
                                  than the model's "hook failed"), else the model's or the step's */
} ExecStepResult;

/* Runs optimizer step t (1-based, AdamW's bias correction). 0, or -1 with out->why: peers may
 * then be inside a collective, so with several ranks the caller aborts the job; out of memory
 * is also in the tracker's record. */
int exec_step(const ExecStep *st, int t, ExecStepResult *out);

#endif
