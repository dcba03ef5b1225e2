/* plan_step_alloc.h — the step account (plan_step.h) as the allocations PyTorch makes: each
 * memory event cut into the tensors it stands for, in the order and on the stream the framework
 * makes them, over one or more steps from an empty cache, replayed through the caching allocator
 * model (plan_alloc.h) or written as an allocation trace (plan_alloc_trace.h's format) for
 * `memplan alloc`. The judge of this sequence is the one recorded from a real run of the same
 * setup (bench/torch/record_traces.py; `memplan validate --against torch` replays both).
 * docs/formulas.md "The allocator in the plan". */
#ifndef PLAN_STEP_ALLOC_H
#define PLAN_STEP_ALLOC_H

#include <stdio.h>

#include "plan_alloc.h"
#include "plan_step.h"

/* The tensors one event of a rule stands for (Step.alloc_split). */
typedef enum {
    SPLIT_ONE = 0,      /* one allocation (a flat buffer: DeepSpeed's groups, a bucket, the engine's) */
    SPLIT_TENSORS,      /* one per parameter tensor: the model's in order, or the event's layer's
                           (backward: in reverse) */
    SPLIT_STATES,       /* the optimizer's states: per parameter tensor, alloc_opt_copies of each */
    SPLIT_BUCKETS,      /* DDP's buckets: whole gradient tensors in reverse order, the first
                           closing at 1 MiB, the others at 25 MiB */
    SPLIT_CASTS,        /* autocast's copies: one per 2-D weight of the event's layer */
    SPLIT_ACTS,         /* a layer's saved tensors (plan_activ.h plan_act_layer_tensors) */
    SPLIT_LOGITS,       /* logits-sized tensors (b x s x V at 4 bytes each) */
    SPLIT_UNIT,         /* a sharded unit's gathered bytes at one of its layers' points: the first
                           unit's worth its parameters tensor by tensor (FSDP2 copies the flat
                           all-gather output out into each parameter), each further one a flat
                           buffer of the unit (the all-gather output, a prefetch, the
                           reduce-scatter input), the rest one piece */
    SPLIT_BWD_WS,       /* a block's backward working set: under checkpointing the recomputed
                           forward's saved tensors (the layer's as if unchecked), then the
                           backward's own (two d_ff-wide gradients, the rest one piece) */
    SPLIT_COPIES,       /* alloc_opt_copies equal flat tensors (DeepSpeed's states: exp_avg and
                           exp_avg_sq of its flat fp32 partition) */
    SPLIT_COUNT
} StepSplit;

/* Streams of the listing (PLAN_ALLOC_STREAMS: small integers). */
enum { STREAM_COMPUTE = 0, STREAM_COMM = 1 };

typedef struct {
    int steps;          /* optimizer steps replayed from an empty cache: 1, or 2 (the default:
                           the first makes torch.optim's states, the second is the steady one) */
    int one_stream;     /* every allocation on the compute stream (a CPU run has no streams) */
    int host_on_device; /* the host's allocations are the device's (CPU ranks): torch.optim's
                           per-parameter `step` scalars (Step.opt_host_bytes, host memory on a
                           GPU) listed at the first step(), each before its parameter's states */
} StepAllocOpts;

void plan_step_alloc_opts_default(StepAllocOpts *o);

typedef struct {
    PlanAllocStats whole;    /* from the empty cache to the end of the last step */
    PlanAllocStats steady;   /* the last step alone: peaks reset at its start
                                (torch.cuda.reset_peak_memory_stats()) */
    uint64_t step_reserved[2];  /* reserved at the end of the first and of the last step */
    int stopped;                /* the replay stopped at its first out-of-memory (a search that
                                   reads only the verdict): the figures are up to there */
} StepAllocResult;

/* The account's memory events replayed as an allocation sequence through the caching allocator
   model configured by conf (docs/formulas.md "The allocator in the plan"): what lives across
   steps allocated first (the parameters tensor by tensor, the frameworks' buffers; torch.optim's
   states at the first step()), then each step in order; within one point and side of its moment
   the frees first (so the live bytes never exceed the account's at that moment); each event cut
   into the tensors its rule stands for (Step.alloc_split), unless it takes over a block released
   at the same point (the same bytes changing rule); a free releases the latest live blocks of its
   rule and term of those sizes (a block freed in part stays, holding fewer); bytes freed before
   they were allocated are owed. Overhead events are not tensors and are left out. 0, or -1 out
   of host memory. */
int plan_step_alloc_with(const Step *st, const PlanAllocConfig *conf, const StepAllocOpts *o, StepAllocResult *out);
/* plan_step_alloc_with at the default options, out = the whole replay's figures. */
int plan_step_alloc(const Step *st, const PlanAllocConfig *conf, PlanAllocStats *out);
/* The same sequence as a trace (plan_alloc_trace.h: m, a, f lines; streams beside allocations
   off the compute stream), after header (a '#' line each, NULL-terminated; may be NULL). 0, or
   -1 out of host memory or on a write error. */
int plan_step_alloc_write(const Step *st, const StepAllocOpts *o, FILE *f, const char *const *header);
/* Forgets this thread's remembered replays, needs and resolved listing (they stay allocated), so
   that the next plan replays from nothing: a benchmark's repetitions, or a test of the memos. */
void plan_step_alloc_forget(void);

#endif
