/* plan_strategy.c — the strategy table (docs/formulas.md "Strategies"). */
#include "plan_strategy.h"

#include <stdio.h>
#include <string.h>

/* offload_ok: DeepSpeed offers offload_optimizer at every stage and offload_param at stage 3
   (deepspeed/runtime/zero/offload_config.py; stage3.py); FSDP's CPUOffload has one switch,
   offload_params, which moves parameters, gradients and the step together
   (torch/distributed/fsdp/api.py CPUOffload). DDP has none. */
#define OFF_OPT (1u | 1u << 1)
#define OFF_PARAM (1u | 1u << 2)
#define OFF_BOTH (1u | 1u << 1 | 1u << 2)

static const Strategy STRATEGIES[STRAT_COUNT] = {
    {"ddp", "PyTorch DDP", 0, 0, BUF_DDP_BUCKETS, 0, 0, 1u},
    {"zero1", "ZeRO stage 1 (P_os)", SHARD_OPT, 0, BUF_DS_REDUCE, 1, 1, OFF_OPT},
    {"zero2", "ZeRO stage 2 (P_os+g)", SHARD_OPT | SHARD_GRAD, 0, BUF_DS_REDUCE, 1, 2, OFF_OPT},
    {"zero3", "ZeRO stage 3 (P_os+g+p)", SHARD_OPT | SHARD_GRAD | SHARD_PARAM, 0, BUF_DS_STAGE3, 1, 5, OFF_BOTH},
    {"fsdp-full", "FSDP FULL_SHARD", SHARD_OPT | SHARD_GRAD | SHARD_PARAM, 0, BUF_FSDP_FULL, 0, 4, OFF_PARAM},
    {"fsdp-grad-op", "FSDP SHARD_GRAD_OP", SHARD_OPT | SHARD_GRAD | SHARD_PARAM, 0, BUF_FSDP_GRAD_OP, 0, 3, OFF_PARAM},
    {"fsdp-hybrid", "FSDP HYBRID_SHARD", SHARD_OPT | SHARD_GRAD | SHARD_PARAM, 1, BUF_FSDP_FULL, 0, 4, OFF_PARAM},
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

const char *plan_strategy_list(unsigned mask, char *buf, size_t len) {
    int n = 0, total = 0;
    for (int k = 0; k < STRAT_COUNT; k++) total += (mask >> k) & 1u;
    size_t at = 0;
    if (len) buf[0] = 0;
    for (int k = 0; k < STRAT_COUNT && at < len; k++) {
        if (!((mask >> k) & 1u)) continue;
        const char *sep = n == 0 ? "" : n == total - 1 ? " and " : ", ";
        int w = snprintf(buf + at, len - at, "%s%s", sep, STRATEGIES[k].name);
        if (w < 0) break;
        at += (size_t)w;
        n++;
    }
    return buf;
}

int plan_strategy_offloads(StrategyKind k, int o) {
    return o >= 0 && o < 3 && (STRATEGIES[k].offload_ok & (1u << o)) != 0;
}

int plan_strategy_is_deepspeed(StrategyKind k) {
    return STRATEGIES[k].buffers == BUF_DS_REDUCE || STRATEGIES[k].buffers == BUF_DS_STAGE3;
}

/* The offload that applies: t->offload when strategy s offers it, else none. */
static OffloadKind effective(const TrainSpec *t, StrategyKind s) {
    return plan_strategy_offloads(s, t->offload) ? t->offload : OFFLOAD_NONE;
}

int plan_offload_cpu_step(const TrainSpec *t, StrategyKind s) { return effective(t, s) != OFFLOAD_NONE; }

int plan_offload_params_on_host(const TrainSpec *t, StrategyKind s) { return effective(t, s) == OFFLOAD_PARAM; }

int plan_offload_grads_to_host(const TrainSpec *t, StrategyKind s) {
    return effective(t, s) != OFFLOAD_NONE && (STRATEGIES[s].shard & SHARD_GRAD);
}
