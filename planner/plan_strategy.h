/* plan_strategy.h — data-parallel strategies as data. Each row says what it shards (optimizer
 * state, gradients, parameters), over which group, and which buffers it keeps; the memory
 * model (and the communication model) read this one table. */
#ifndef PLAN_STRATEGY_H
#define PLAN_STRATEGY_H

#include <stddef.h>

#include "plan_train.h"

enum {
    SHARD_OPT = 1,      /* optimizer state (and fp32 master weights) */
    SHARD_GRAD = 2,     /* gradients */
    SHARD_PARAM = 4,    /* parameters */
};

typedef enum {
    BUF_NONE = 0,
    BUF_DDP_BUCKETS,    /* PyTorch DDP: persistent flat bucket copy of all gradients */
    BUF_DS_REDUCE,      /* DeepSpeed stage 1/2: reduce (IPG) bucket of reduce_bucket_size */
    BUF_DS_STAGE3,      /* DeepSpeed stage 3: gathered layers in flight + reduce bucket */
    BUF_FSDP_FULL,      /* FSDP FULL_SHARD: root unit + 2 units in flight + 2 RS buffers */
    BUF_FSDP_GRAD_OP,   /* FSDP SHARD_GRAD_OP: all units unsharded from fwd through bwd */
} BufferKind;

typedef struct {
    const char *name;        /* --strategy value */
    const char *label;       /* what users call it */
    unsigned shard;          /* SHARD_* bits */
    int group_node;          /* 1: shard inside a node only (HYBRID_SHARD), replicate across */
    BufferKind buffers;
    int grads_persistent;    /* 1: gradient memory lives across steps (DeepSpeed); 0: allocated
                                during backward, freed by zero_grad(set_to_none) (PyTorch) */
    int simplicity;          /* order of preference when several fit: lower = simpler */
    unsigned offload_ok;     /* bit per OffloadKind the framework offers (bit 0, none, always) */
} Strategy;

typedef enum { STRAT_DDP = 0, STRAT_ZERO1, STRAT_ZERO2, STRAT_ZERO3, STRAT_FSDP_FULL,
               STRAT_FSDP_GRAD_OP, STRAT_FSDP_HYBRID, STRAT_COUNT } StrategyKind;

const Strategy *plan_strategy(StrategyKind k);
int plan_strategy_by_name(const char *name);   /* -1 if unknown */
const char *plan_strategy_names(void);         /* "ddp, zero1, ..." */
/* The names of the strategies in mask (bit 1u << StrategyKind), table order, as prose into buf:
   "ddp, zero1, zero2 and fsdp-full". Returns buf. */
const char *plan_strategy_list(unsigned mask, char *buf, size_t len);
/* 1 when strategy k offers offload o (OffloadKind); OFFLOAD_NONE always. */
int plan_strategy_offloads(StrategyKind k, int o);
/* 1 for the DeepSpeed rows (ZeRO), 0 for PyTorch's (DDP, FSDP). */
int plan_strategy_is_deepspeed(StrategyKind k);

/* CPU offload as strategy s applies t->offload (none where it does not offer it);
   docs/formulas.md "Offload and host memory". */
/* 1 when the optimizer step runs on the CPU (no GPU optimizer transient). */
int plan_offload_cpu_step(const TrainSpec *t, StrategyKind s);
/* 1 when the parameter shards live in host memory (units come up to the GPU for compute). */
int plan_offload_params_on_host(const TrainSpec *t, StrategyKind s);
/* 1 when each rank's gradient shard leaves the GPU as soon as it is reduced. */
int plan_offload_grads_to_host(const TrainSpec *t, StrategyKind s);

#endif
