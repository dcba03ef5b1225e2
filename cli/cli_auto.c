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
        if (cli_bare_number(arg)) {
            snprintf(err, errlen, "--host-mem '%s' needs a unit (e.g. 1TiB; a bare number would be bytes)", arg);
            return -1;
        }
        if (plan_parse_size(arg, &d) || d < 1 * GIB || d > 1024.0 * 1024 * GIB) {
            snprintf(err, errlen, "--host-mem '%s' is not a size between 1GiB and 1PiB per node (e.g. 1TiB, 512GiB)", arg);
            return -1;
        }
        o->host_mem = d;
        o->host_mem_arg = arg;
        return 0;
    case CLI_OPT_HOST_BW:
        if (plan_parse_double(arg, 0.1, 10000, &d)) {
            snprintf(err, errlen, "--host-bw '%s' is not a bandwidth in GB/s in [0.1, 10000]", arg);
            return -1;
        }
        o->host_bw = d;
        o->host_bw_arg = arg;
        return 0;
    case CLI_OPT_MIN_HEADROOM:
        if (cli_bare_number(arg)) {
            snprintf(err, errlen, "--min-headroom '%s' needs a unit: a percentage (5%%) or a size (1GiB)", arg);
            return -1;
        }
        if (plan_parse_size_or_percent(arg, &d, &frac) || (frac && d > 0.5) || (!frac && d > 256 * GIB)) {
            snprintf(err, errlen, "--min-headroom '%s' is not a percentage up to 50%% or a size up to 256GiB (e.g. 5%%, 1GiB)", arg);
            return -1;
        }
        o->headroom = d;
        o->headroom_is_frac = frac;
        o->headroom_arg = arg;
        return 0;
    default: return 1;
    }
}

/* The divisors of n, up to a few, as "1, 2 or 4" (for messages). */
static const char *divisors(long long n, char *buf, size_t len) {
    long long d[6];
    int k = 0;
    for (long long i = 1; i <= n && k < 6; i++)
        if (n % i == 0) d[k++] = i;
    size_t o = 0;
    for (int i = 0; i < k && o < len; i++)
        o += (size_t)snprintf(buf + o, len - o, "%s%lld", i == 0 ? "" : i == k - 1 ? " or " : ", ", d[i]);
    if (k == 6 && d[5] != n && o < len) snprintf(buf + o, len - o, " (or another divisor of %lld)", n);
    return buf;
}

/* --global-batch G with a kept --batch or --grad-accum: G / GPUs = micro-batch x accumulation in
 * whole numbers, or a one-line refusal (2). */
static int check_global_batch(const CliSetup *s, const AutoSpec *a) {
    long long g = a->global_batch, n = s->cluster.gpus, b = s->train.micro_batch, k = s->train.grad_accum;
    if (g % n) return 0;   /* refused with the multiples by the caller */
    long long per = g / n;
    char dv[96];
    if (a->keep_batch && a->keep_accum && b * k != per)
        return cli_usage_error("--batch %lld x --grad-accum %lld x %lld GPUs = %lld samples per step, not --global-batch "
                               "%lld: drop one of the three", b, k, n, b * k * n, g);
    if (a->keep_batch && per % b)
        return cli_usage_error("--global-batch %lld over %lld GPUs is %lld samples per GPU, which micro-batch %lld "
                               "(--batch) does not divide: give --batch %s", g, n, per, b, divisors(per, dv, sizeof dv));
    if (a->keep_accum && per % k)
        return cli_usage_error("--global-batch %lld over %lld GPUs is %lld samples per GPU, which --grad-accum %lld "
                               "does not divide into whole micro-batches: give --grad-accum %s", g, n, per, k,
                               divisors(per, dv, sizeof dv));
    return 0;
}

int cli_auto_apply(const CliAutoOpts *o, CliSetup *s, AutoSpec *a, int auto_mode) {
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
    if (!auto_mode) return 0;
    /* what the user fixed, auto keeps: precision, micro-batch, checkpointing, accumulation */
    a->precisions = cli_setup_given(s, "precision") ? 0 : plan_auto_precisions(s->train.precision);
    const CfgSetting *ps = cli_config_searched(s->config, "precision");
    if (ps && ps->choices) {   /* the config's "auto" precision: what its launcher could make of it, on this GPU */
        char list[96];
        unsigned m = 0;
        snprintf(list, sizeof list, "%s", ps->choices);
        for (char *save = NULL, *t = strtok_r(list, "|", &save); t; t = strtok_r(NULL, "|", &save)) {
            int k = plan_precision_by_name(t);
            if (k >= 0 && s->cluster.gpu.peak_tflops[plan_precision((PrecisionKind)k)->peak] > 0) m |= 1u << k;
        }
        if (m) a->precisions = m;
    }
    a->keep_batch = cli_setup_given(s, "batch") != NULL;
    a->keep_ckpt = cli_setup_given(s, "act-ckpt") != NULL;
    a->keep_accum = cli_setup_given(s, "grad-accum") != NULL;
    return a->global_batch > 0 ? check_global_batch(s, a) : 0;
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
