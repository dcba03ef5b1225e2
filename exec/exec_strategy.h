/* exec_strategy.h — the data-parallel strategies of the executor (DDP, ZeRO-1, ZeRO-2, ZeRO-3)
 * on any model runtime behind the model interface (exec_model.h: GPT-2, the CNN) and the comm
 * interface (exec_comm.h). A strategy plugs into the model through ExecHooks, owns its
 * communication buffers (tracked, MEM_COMM), shards what it shards, and runs the optimizer
 * step. The mechanics are those docs/formulas.md gives for the planner (the strategy table), so
 * `memplan validate` compares like with like; docs/validation.md lists where they differ. All
 * buffers are fp32, from the tracked allocator, on the model's device (host memory, or GPU
 * memory with NCCL collectives on the device's comm stream: exec_strategy_set_device);
 * gradients are pre-scaled by 1/N
 * (exec_model_set_grad_divisor) and reduced with SUM. U = the model's units.
 *
 *   ddp    full replica. Persistent flat bucket buffers (Ψ·4 bytes, MEM_COMM) in gradient-ready
 *          order (units U-1, ..., 1, 0), cut at 1 MiB then every bucket_bytes (PyTorch:
 *          first bucket 1 MiB, then 25 MiB). After a unit's backward its gradients are copied
 *          into the buckets and every bucket that is full starts a non-blocking all-reduce,
 *          polled (comm_progress) at every hook; at the end of backward the buckets are waited
 *          for and copied back into the gradients (gradient_as_bucket_view=False). Gradient
 *          accumulation: only the last micro-step reduces (no_sync). A model with buffers (BN
 *          running statistics) gets rank 0's broadcast to every rank at the start of every
 *          forward (broadcast_buffers=True), one broadcast of the flat buffer array.
 *   zero1  optimizer state sharded: rank r owns elements [r·⌈P_u/N⌉, (r+1)·⌈P_u/N⌉) of every
 *          unit u (per-unit padding, as the planner's Σ⌈P_u/N⌉). DeepSpeed's reduce (IPG)
 *          bucket of at most reduce_bucket_elems (5e8) elements, laid out rank-major (each
 *          rank's shards of the bucket's units contiguous) so one reduce-scatter per bucket
 *          hands every rank its shard. Full gradients persist (as DeepSpeed stage 1); the last
 *          micro-step copies them into the bucket, the averaged shard replaces the rank's range
 *          of the gradients, AdamW updates that range, and one all-gather per bucket (through
 *          the same buffer) brings every rank the updated parameters.
 *   zero2  + gradients sharded: each unit's full gradient exists only during its backward
 *          (MEM_GRADS, allocated at before_unit_backward, freed after it was copied into the
 *          bucket; the tied embedding's lives through the whole backward), the reduce-scatter
 *          runs every micro-step and accumulates into a persistent gradient shard of
 *          Σ⌈P_u/N⌉ elements.
 *   zero3  + parameters sharded. Shard units are FSDP's wrapping: the root (the model's root
 *          units: GPT-2's unit 0 embeddings tied to the LM head, plus unit L+1 final LayerNorm;
 *          none for the CNN) and every other unit (a GPT-2 block, a CNN layer). Each shard unit's
 *          full weights are all-gathered into MEM_COMM just in time, in forward and again in
 *          backward, and freed after use; the root stays gathered from its before_unit_forward
 *          to its after_unit_forward (and likewise in backward) because the model brackets each
 *          pass with it. The next two blocks in execution order are kept gathered or in
 *          flight (the gathered layer and the prefetched next one). Gradients are computed in
 *          place into a persistent reduce buffer (Ψ·4 bytes, one padded region per shard unit),
 *          each region is reduce-scattered (non-blocking) right after its backward, and the
 *          results accumulate into the gradient shard.
 * One rank: nothing to reduce or shard; every strategy trains the plain replica (no buffers,
 * no collectives), as the planner assumes for one GPU. */
#ifndef EXEC_STRATEGY_H
#define EXEC_STRATEGY_H

#include <stddef.h>
#include <stdint.h>

#include "exec_comm.h"
#include "exec_model.h"
#include "prof_comm.h"
#include "prof_mem.h"
#include "prof_phase.h"

typedef enum { EXEC_DDP = 0, EXEC_ZERO1, EXEC_ZERO2, EXEC_ZERO3, EXEC_STRATEGY_COUNT } ExecStrategyKind;

const char *exec_strategy_name(ExecStrategyKind k);    /* "ddp", "zero1", ... */
int exec_strategy_by_name(const char *name);            /* -1 if unknown */

/* DDP bucket sizes (torch/nn/parallel/distributed.py) and DeepSpeed's reduce_bucket_size. */
#define EXEC_DDP_FIRST_BUCKET_BYTES (1024.0 * 1024.0)
#define EXEC_DDP_BUCKET_BYTES (25.0 * 1024.0 * 1024.0)
#define EXEC_ZERO_REDUCE_BUCKET_ELEMS 5e8

typedef struct {
    ExecStrategyKind kind;
    double bucket_bytes;         /* DDP bucket cap; 0: 25 MiB */
    double first_bucket_bytes;   /* DDP first bucket; 0: 1 MiB */
    double reduce_bucket_elems;  /* ZeRO-1/2 reduce bucket; 0: 5e8 elements */
} ExecStrategyOptions;

typedef struct ExecStrategy ExecStrategy;   /* opaque */

/* Creates the strategy on comm (like torch's DDP(model), in three steps: create, the model with
 * the strategy's hooks, bind); counters are the comm's counters (used to time collectives for
 * the trace), pt the phase timer that gets "comm_wait" phases and comm-lane spans (both may be
 * NULL). Allocates nothing tracked. Returns 0, or -1 with a sentence in err. */
int exec_strategy_create(ExecStrategy **out, const ExecStrategyOptions *opt, Comm *comm, MemTracker *mt,
                         CommCounters *counters, PhaseTimer *pt, char *err, size_t errlen);
void exec_strategy_destroy(ExecStrategy *s);   /* frees its buffers; NULL is ignored */

/* The device the model's and the strategy's buffers live on (before bind; default NULL = the
 * host). On a CUDA device: buffer copies, zeroing and shard sums run on its compute stream, and
 * comm must be an NCCL communicator whose stream is the device's comm stream and whose after
 * stream is its compute stream (comm_set_stream, comm_set_after_stream), or one rank. */
typedef struct Device Device;
void exec_strategy_set_device(ExecStrategy *s, Device *dev);
/* The hooks to create the model with (ctx = s); external_params is set for ZeRO-3. */
void exec_strategy_hooks(const ExecStrategy *s, ExecHooks *hooks);
/* Wraps the created model (once): marks it wrapped (exec_model_wrapped: SyncBN conversion is
 * refused from now on), allocates the persistent buffers (buckets, shards) in mt, sets the
 * gradient divisor for accum micro-batches and N ranks, lends ZeRO-3's gradient regions, and
 * initialises the parameters the rank holds (seeded, identical for any N). 0 or -1 (out of
 * memory: the tracker holds the OOM record). */
int exec_strategy_bind(ExecStrategy *s, ExecModel *m, uint64_t seed, int accum);

/* One optimizer step: zero_grad, then for each micro-batch begin_micro(sync = last micro-step),
 * exec_model_forward, exec_model_backward, end_backward; then step. Each returns 0 or -1 (error
 * in exec_strategy_error; out of memory is also in the tracker). */
int exec_strategy_zero_grad(ExecStrategy *s);
void exec_strategy_begin_micro(ExecStrategy *s, int sync);
int exec_strategy_end_backward(ExecStrategy *s);
int exec_strategy_step(ExecStrategy *s, const ExecAdamW *opt, int t);

/* Every rank calls it: the full parameters, units 0..U-1 concatenated (Ψ floats), land in out
 * on rank 0 (others may pass NULL). ZeRO-3 gathers its shards for this, uncounted. 0 or -1. */
int exec_strategy_gather_params(ExecStrategy *s, float *out);

const char *exec_strategy_error(const ExecStrategy *s);   /* "" if none */
/* Collective buffers, for the echo line: DDP buckets, ZeRO-1/2 reduce buckets, ZeRO-3 shard
 * units; and elements per rank of the sharded state (Σ⌈P_u/N⌉; Ψ when nothing is sharded). */
int exec_strategy_buckets(const ExecStrategy *s);
size_t exec_strategy_shard_elems(const ExecStrategy *s);

#endif
