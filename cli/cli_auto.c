/* cli_auto.c — see cli_auto.h. */
#include "cli_auto.h"

#include <string.h>

#include "plan_strategy.h"
#include "plan_util.h"

void cli_auto_opts_init(CliAutoOpts *o) {
    memset(o, 0, sizeof(*o));
    o->offload = -1;
    o->headroom = -1;
}

int cli_auto_opt(CliAutoOpts *o, int opt, const char *arg, char *err, size_t errlen) {
    double d;
    int frac;
    switch (opt) {
    case CLI_OPT_OFFLOAD:
        if ((o->offload = plan_offload_by_name(arg)) < 0) {
            snprintf(err, errlen, "unknown --offload '%s' (valid: none, optimizer, params)", arg);
            return -1;
        }
        return 0;
    case CLI_OPT_HOST_MEM:
        if (plan_parse_size(arg, &d) || d < 1 * GIB || d > 1024.0 * 1024 * GIB) {
            snprintf(err, errlen, "--host-mem '%s' is not a size between 1GiB and 1PiB per node (e.g. 1TiB, 512GiB)", arg);
            return -1;
        }
        o->host_mem = d;
        return 0;
    case CLI_OPT_HOST_BW:
        if (plan_parse_double(arg, 0.1, 10000, &d)) {
            snprintf(err, errlen, "--host-bw '%s' is not a bandwidth in GB/s in [0.1, 10000]", arg);
            return -1;
        }
        o->host_bw = d;
        return 0;
    case CLI_OPT_MIN_HEADROOM:
        if (plan_parse_size_or_percent(arg, &d, &frac) || (frac && d > 0.5) || (!frac && d > 256 * GIB)) {
            snprintf(err, errlen, "--min-headroom '%s' is not a percentage up to 50%% or a size up to 256GiB (e.g. 5%%, 1GiB)", arg);
            return -1;
        }
        o->headroom = d;
        o->headroom_is_frac = frac;
        return 0;
    default: return 1;
    }
}

int cli_auto_apply(const CliAutoOpts *o, CliSetup *s, AutoSpec *a, int auto_mode, int argc, char **argv) {
    if (o->host_mem > 0) s->cluster.host_mem = o->host_mem;
    if (o->host_bw > 0) s->cluster.gpu.host_bw = o->host_bw;
    if (o->headroom >= 0) {   /* the given rule replaces the default one */
        a->min_headroom_frac = o->headroom_is_frac ? o->headroom : 0;
        a->min_headroom_floor = o->headroom_is_frac ? 0 : o->headroom;
    }
    if (o->offload >= 0) {
        s->train.offload = (OffloadKind)o->offload;
        a->offloads = 1u << o->offload;
        unsigned ok = 0;
        for (int k = 0; k < STRAT_COUNT; k++)
            if ((s->strategies & (1u << k)) && plan_strategy_offloads((StrategyKind)k, o->offload)) ok |= 1u << k;
        if (!ok)
            return cli_usage_error("--offload %s: none of the chosen strategies offers it (optimizer: zero1, zero2, "
                                   "zero3; params: zero3, fsdp-full, fsdp-grad-op, fsdp-hybrid)",
                                   plan_offload_name((OffloadKind)o->offload));
        s->strategies = ok;
    }
    if (auto_mode) {
        int fixed = 0;
        for (int i = 1; i < argc; i++)
            if (strcmp(argv[i], "--precision") == 0 || strncmp(argv[i], "--precision=", 12) == 0) fixed = 1;
        a->precisions = fixed ? 0 : plan_auto_precisions(s->train.precision);
    }
    return 0;
}

void cli_auto_help(FILE *f) {
    fprintf(f,
        "CPU offload and host memory (plan and auto):\n"
        "  --offload none|optimizer|params  DeepSpeed offload_optimizer (zero1/2/3) / + offload_param (zero3),\n"
        "                         FSDP CPUOffload(offload_params=True) (params); auto searches all unless given\n"
        "  --host-mem SIZE        host memory per node (default: the GPU preset's typical node, docs/gpus.md)\n"
        "  --host-bw GBPS         host<->GPU copy bandwidth per GPU per direction (default: the preset's PCIe)\n"
        "Auto's pick:\n"
        "  --min-headroom P%%|SIZE safety margin every pick leaves free on the GPU (default: %.0f%% of GPU\n"
        "                         memory, at least %.0f MiB); among setups that leave it, the fastest wins,\n"
        "                         the simpler one when within %.0f%% (DDP, then ZeRO/FSDP, then offload);\n"
        "                         auto also searches precision (autocast and fp32-master mixed) unless --precision\n",
        PLAN_AUTO_HEADROOM_FRAC * 100, PLAN_AUTO_HEADROOM_FLOOR / MIB, PLAN_AUTO_NEAR * 100);
}
