/* plan_memory.h — the per-GPU memory model. One step is walked phase by phase (end of
 * forward; backward layer by layer; optimizer step) and the peak is the largest total seen,
 * not a sum of per-term maxima. The terms reported are those at the peak moment; they add up
 * to the peak exactly. docs/formulas.md gives every term with its source. */
#ifndef PLAN_MEMORY_H
#define PLAN_MEMORY_H

#include <stdint.h>
#include "plan_coll.h"
#include "plan_gpu.h"
#include "plan_sizes.h"
#include "plan_model.h"
#include "plan_strategy.h"
#include "plan_train.h"

typedef enum { TERM_PARAMS = 0, TERM_GRADS, TERM_COMM, TERM_OPTIMIZER, TERM_ACTIVATIONS,
               TERM_TRANSIENT, TERM_OVERHEAD, TERM_COUNT } TermKind;
const char *plan_term_name(TermKind k);   /* JSON names: params, grads, comm_buffers, ... */


typedef struct {
    double term[TERM_COUNT];     /* bytes at the peak moment; Σ = peak */
    double peak;                 /* bytes */
    PhaseKind peak_phase;
    char peak_where[64];         /* "end of forward", "backward of block.3", "optimizer step" */
    double phase_peak[PHASE_COUNT];
    double model_states;         /* params + grads + optimizer states, fully allocated */
    /* model_states split as the walk charges it (= ms_params + ms_grads + ms_optimizer): with
       DeepSpeed's fp32 partition copy in ms_optimizer, its gradient buffers and norm scalar in
       ms_grads, ZeRO-3's persistent tensors in ms_params */
    double ms_params, ms_grads, ms_optimizer;
    /* torch Adam/AdamW's per-tensor `step` scalars (fp32, 4 B each): foreach and for-loop Adam
       keep them on the host even for GPU parameters (torch/optim/adam.py: device="cpu" unless
       capturable or fused), so they are in no GPU term; on CPU ranks they are tensor memory
       (validate --against torch adds them). 0 for DeepSpeed's optimizers and unknown tensors. */
    double opt_host_bytes;
    /* pieces of TERM_OVERHEAD and context */
    double cuda_context, cublas_ws, nccl, margin;
    /* the caching allocator model's replay of the step (ClusterSpec.alloc_model; plan_step.h
       plan_step_alloc): margin = alloc_reserved - alloc_tensor_peak */
    int alloc_model;
    double alloc_tensor_peak;    /* the account's live bytes at the peak (bytes) */
    double alloc_allocated;      /* max_memory_allocated of the replay (bytes) */
    double alloc_reserved;       /* max_memory_reserved of the replay (bytes) */
    int alloc_segments;          /* segments held at most */
    int alloc_oom;               /* the replay ran out of the GPU's memory less the fixed
                                    overheads; the figures are those without a limit */
    int nccl_comms;
    int64_t shard_group;         /* N for sharding (gpus, or gpus per node for hybrid) */
    int acts_known;              /* 0: activations unknown for this model (reported as such) */
    int fits;                    /* gpu_fits && host_fits */
    double headroom;             /* capacity - peak (negative = shortfall) */
    int gpu_fits;                /* peak <= GPU capacity */
    /* host memory per node (plan_dim_offload.h): model states offloaded by the node's ranks, or the
       load-time copies, whichever is larger */
    double host_per_node, host_capacity;
    int host_fits;
} MemResult;

/* One moment of the walk: after layer `layer`'s forward or backward (layer = -1 for the
 * optimizer step), with the terms alive then (overhead included) and their total. */
typedef void (*MemMomentFn)(void *ctx, PhaseKind phase, int layer, const double term[TERM_COUNT],
                            double total);

/* Returns 0 (-1 out of host memory); fills r. The setup must be valid (validated by the
 * caller). */
int plan_memory_walk(const ModelSpec *m, const TrainSpec *t, const ClusterSpec *c, StrategyKind s,
                     MemResult *r, MemMomentFn fn, void *ctx);
int plan_memory(const ModelSpec *m, const TrainSpec *t, const ClusterSpec *c, StrategyKind s,
                MemResult *r);
/* plan_memory_walk for a caller that needs r->fits first (the searches): when the step is known
 * not to fit the GPU before its allocator replay is done (plan_step_replay_fits), r->fits and
 * r->gpu_fits are 0, r->peak is a lower bound (tensors and fixed overheads), the rest of r is
 * zero and fn is never called; otherwise exactly plan_memory_walk. plan_memory_fits: r->fits
 * alone. */
int plan_memory_walk_fits(const ModelSpec *m, const TrainSpec *t, const ClusterSpec *c, StrategyKind s,
                          MemResult *r, MemMomentFn fn, void *ctx);
int plan_memory_fits(const ModelSpec *m, const TrainSpec *t, const ClusterSpec *c, StrategyKind s);
struct Step;
/* The memory model of a built step (plan_step.h): r from its replay on c's GPU, fits and host
   memory; fits_only as plan_memory_walk_fits. PLAN_OK, or the step's PlanStatus when it could
   not be built (r->peak is then HUGE_VAL and r->peak_where says why). */
int plan_memory_step(const struct Step *st, const ClusterSpec *c, MemResult *r, MemMomentFn fn, void *ctx,
                     int fits_only);
/* Largest micro-batch whose peak fits the GPU (0 if none), searching up to max_b: each probe a
   step built at that batch, so a plan at the answer fits and one at the answer + 1 does not. */
int64_t plan_max_micro_batch(const ModelSpec *m, const TrainSpec *t, const ClusterSpec *c,
                             StrategyKind s, int64_t max_b);
/* The same, from a plan's row: its step (built at its micro-batch) and its verdict, which the
   search reads instead of building that batch again. */
int64_t plan_max_micro_batch_step(const struct Step *row, const ModelSpec *m, const TrainSpec *t,
                                  const ClusterSpec *c, StrategyKind s, int64_t max_b, int row_fits);

#endif
