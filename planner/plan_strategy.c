/* plan_strategy.c — the strategy table (docs/formulas.md "Strategies"). */
#include "plan_strategy.h"

#include <string.h>

static const Strategy STRATEGIES[STRAT_COUNT] = {
    {"ddp", "PyTorch DDP", 0, 0, BUF_DDP_BUCKETS, 0, 0},
    {"zero1", "ZeRO stage 1 (P_os)", SHARD_OPT, 0, BUF_DS_REDUCE, 1, 1},
    {"zero2", "ZeRO stage 2 (P_os+g)", SHARD_OPT | SHARD_GRAD, 0, BUF_DS_REDUCE, 1, 2},
    {"zero3", "ZeRO stage 3 (P_os+g+p)", SHARD_OPT | SHARD_GRAD | SHARD_PARAM, 0, BUF_DS_STAGE3, 1, 5},
    {"fsdp-full", "FSDP FULL_SHARD", SHARD_OPT | SHARD_GRAD | SHARD_PARAM, 0, BUF_FSDP_FULL, 0, 4},
    {"fsdp-grad-op", "FSDP SHARD_GRAD_OP", SHARD_OPT | SHARD_GRAD | SHARD_PARAM, 0, BUF_FSDP_GRAD_OP, 0, 3},
    {"fsdp-hybrid", "FSDP HYBRID_SHARD", SHARD_OPT | SHARD_GRAD | SHARD_PARAM, 1, BUF_FSDP_FULL, 0, 4},
};

const Strategy *plan_strategy(StrategyKind k) { return &STRATEGIES[k]; }

int plan_strategy_by_name(const char *name) {
    for (int i = 0; i < STRAT_COUNT; i++)
        if (strcmp(STRATEGIES[i].name, name) == 0) return i;
    return -1;
}

const char *plan_strategy_names(void) {
    return "ddp, zero1, zero2, zero3, fsdp-full, fsdp-grad-op, fsdp-hybrid";
}
