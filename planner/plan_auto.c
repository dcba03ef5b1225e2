/* plan_auto.c — see plan_auto.h. */
#include "plan_auto.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "plan_util.h"

void plan_auto_defaults(AutoSpec *a) {
    memset(a, 0, sizeof(*a));
    a->bn_min_batch = 16;
    a->max_micro_batch = 1024;
    a->strategies = (1u << STRAT_COUNT) - 1;
    a->offloads = (1u << OFFLOAD_COUNT) - 1;
    a->min_headroom_frac = PLAN_AUTO_HEADROOM_FRAC;
    a->min_headroom_floor = PLAN_AUTO_HEADROOM_FLOOR;
    a->near_frac = PLAN_AUTO_NEAR;
}

static double plan_auto_margin(const AutoSpec *a, double cap) {
    double m = a->min_headroom_frac * cap;
    return m > a->min_headroom_floor ? m : a->min_headroom_floor;
}

unsigned plan_auto_precisions(PrecisionKind p) {
    switch (p) {
    case PREC_AMP_BF16: case PREC_MIXED_BF16: return 1u << PREC_AMP_BF16 | 1u << PREC_MIXED_BF16;
    case PREC_AMP_FP16: case PREC_MIXED_FP16: return 1u << PREC_AMP_FP16 | 1u << PREC_MIXED_FP16;
    default: return 1u << p;
    }
}

static const char *plan_auto_setup_name(StrategyKind k, const TrainSpec *t, char *buf, size_t len) {
    snprintf(buf, len, "%s%s%s, %s", plan_strategy(k)->name, t->offload ? " + offload " : "",
             t->offload ? plan_offload_name(t->offload) : "", plan_precision(t->precision)->name);
    return buf;
}

static void say(AutoResult *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void say(AutoResult *r, const char *fmt, ...) {
    size_t n = strlen(r->explain);
    if (n + 2 >= sizeof(r->explain)) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(r->explain + n, sizeof(r->explain) - n, fmt, ap);
    va_end(ap);
}

static int fits(const ModelSpec *m, const TrainSpec *t, const ClusterSpec *c, StrategyKind k,
                MemResult *mr) {
    MemResult tmp;
    if (!mr) mr = &tmp;
    plan_memory(m, t, c, k, mr);
    return mr->fits;
}

typedef struct {
    int ok;
    TrainSpec t;
    double tps;
    int64_t maxb_plain;      /* the largest micro-batch that fits without checkpointing */
} Best;

/* Searches micro-batch, accumulation and checkpointing for strategy k at base's precision and
   offload. c is the cluster with the safety margin taken off the GPU's capacity. */
static Best search(const ModelSpec *m, const TrainSpec *base, const ClusterSpec *c, StrategyKind k,
                   const AutoSpec *a, long *cand, long *evaluated) {
    Best best = {0};
    for (int ck = 0; ck <= CKPT_FULL; ck++) {   /* none, full (every:N is not searched yet) */
        TrainSpec t = *base;
        t.act_ckpt = (CkptKind)ck;
        t.ckpt_every = ck == CKPT_FULL;
        if (ck == CKPT_FULL && m->arch == ARCH_GENERIC) continue;   /* nothing to recompute */
        int64_t maxb = plan_max_micro_batch(m, &t, c, k, a->max_micro_batch);
        if (ck == CKPT_NONE) best.maxb_plain = maxb;
        SimPrep *prep = maxb > 0 ? plan_sim_prepare(m, &t, c, k) : NULL;
        if (maxb > 0 && !prep) maxb = 0;       /* out of memory: skip, counted as considered */
        for (int64_t b = 1; b <= a->max_micro_batch; b++) {
            (*cand)++;
            if (b > maxb) continue;            /* known not to fit: the peak grows with b */
            t.micro_batch = b;
            if (a->global_batch > 0) {
                int64_t per = a->global_batch / c->gpus;
                if (a->global_batch % c->gpus || per % b) continue;
                t.grad_accum = per / b;
            }
            SimResult s;
            plan_sim_run(prep, b, t.grad_accum, 0, &s);
            (*evaluated)++;
            if (!best.ok || s.tokens_per_s > best.tps * (1 + 1e-9)) {
                best.ok = 1;
                best.t = t;
                best.tps = s.tokens_per_s;
            }
        }
        plan_sim_prep_free(prep);
    }
    return best;
}

/* One searched option: a strategy with an offload (its group) at one precision regime. */
typedef struct {
    StrategyKind k;
    OffloadKind off;
    PrecisionKind prec;
    Best best;
} Option;

/* Simpler first: no offload before offload, then the strategy table's simplicity. */
static int complexity(StrategyKind k, OffloadKind off) { return (int)off * 100 + plan_strategy(k)->simplicity; }

/* The precision regimes of a: the TrainSpec's own, or the searched set the GPU supports. DDP
   has no fp32-master mode (that is DeepSpeed's bf16/fp16 or FSDP's MixedPrecision). */
static int regime_ok(const AutoSpec *a, const TrainSpec *t, const ClusterSpec *c, StrategyKind k, int p) {
    unsigned set = a->precisions ? a->precisions : 1u << t->precision;
    if (!(set & (1u << p))) return 0;
    const PrecisionSpec *ps = plan_precision((PrecisionKind)p);
    if (c->gpu.peak_tflops[ps->peak] <= 0) return 0;
    if (k == STRAT_DDP && ps->master_bytes > 0 && (unsigned)(1u << t->precision) != (1u << p)) return 0;
    return 1;
}

/* Does any searched option fit (with the margin) at micro-batch 1 and full checkpointing on
   cluster c? Used to find the cheapest change when nothing fits. */
static int anything_fits(const ModelSpec *m, const TrainSpec *base, const ClusterSpec *c, const AutoSpec *a) {
    ClusterSpec cm = *c;
    cm.gpu.mem_bytes -= plan_auto_margin(a, c->gpu.mem_bytes);
    for (int k = 0; k < STRAT_COUNT; k++) {
        if (!(a->strategies & (1u << k))) continue;
        for (int o = 0; o < OFFLOAD_COUNT; o++) {
            if (!(a->offloads & (1u << o)) || !plan_strategy_offloads((StrategyKind)k, o)) continue;
            for (int p = 0; p < PREC_COUNT; p++) {
                if (!regime_ok(a, base, c, (StrategyKind)k, p)) continue;
                TrainSpec t = *base;
                t.micro_batch = 1;
                t.offload = (OffloadKind)o;
                t.precision = (PrecisionKind)p;
                t.act_ckpt = m->arch == ARCH_GENERIC ? CKPT_NONE : CKPT_FULL;
                if (fits(m, &t, &cm, (StrategyKind)k, NULL)) return 1;
            }
        }
    }
    return 0;
}

/* Nothing fits: the changes that would, cheapest first (host memory, more GPUs, a larger GPU,
   a shorter sequence). */
static void nothing_fits(const ModelSpec *m, const TrainSpec *base, const ClusterSpec *c0,
                         const AutoSpec *a, AutoResult *out) {
    char a1[32];
    size_t n = 0;
    ClusterSpec c = *c0;
    c.host_mem = 1e18;   /* host memory: does it fit with unlimited host memory? then how much */
    if (anything_fits(m, base, &c, a)) {
        double need = 1e18;
        for (int k = 0; k < STRAT_COUNT; k++)
            for (int o = 0; o < OFFLOAD_COUNT; o++) {
                if (!(a->strategies & (1u << k)) || !(a->offloads & (1u << o)) ||
                    !plan_strategy_offloads((StrategyKind)k, o)) continue;
                for (int p = 0; p < PREC_COUNT; p++) {
                    if (!regime_ok(a, base, c0, (StrategyKind)k, p)) continue;
                    TrainSpec t = *base;
                    t.micro_batch = 1;
                    t.offload = (OffloadKind)o;
                    t.precision = (PrecisionKind)p;
                    t.act_ckpt = m->arch == ARCH_GENERIC ? CKPT_NONE : CKPT_FULL;
                    ClusterSpec cm = c;
                    cm.gpu.mem_bytes -= plan_auto_margin(a, c.gpu.mem_bytes);
                    MemResult r;
                    plan_memory(m, &t, &cm, (StrategyKind)k, &r);
                    if (r.gpu_fits && r.host_per_node < need) need = r.host_per_node;
                }
            }
        n += (size_t)snprintf(out->fix + n, sizeof(out->fix) - n, "%s--host-mem %.0fGiB per node",
                              n ? "; " : "", ceil(need / GIB));
    }
    c = *c0;
    for (int64_t g = c0->gpus * 2; g <= 65536 && n < sizeof(out->fix) - 64; g *= 2) {
        c.gpus = g;
        c.gpus_per_node = c0->gpus_per_node > g ? g : c0->gpus_per_node;
        if (c0->gpus_per_node == c0->gpus && g <= 8) c.gpus_per_node = g;   /* one node grows to 8 */
        if (anything_fits(m, base, &c, a)) {
            n += (size_t)snprintf(out->fix + n, sizeof(out->fix) - n, "%s%lld GPUs (--gpus %lld)",
                                  n ? "; " : "", (long long)g, (long long)g);
            break;
        }
    }
    const GpuPreset *bigger = NULL;
    for (int i = 0; i < plan_gpu_count(); i++) {
        const GpuPreset *g = plan_gpu_preset(i);
        if (g->mem_bytes <= c0->gpu.mem_bytes || (bigger && g->mem_bytes >= bigger->mem_bytes)) continue;
        c = *c0;
        c.gpu = *g;
        if (c0->host_mem <= 0) c.host_mem = 0;
        if (anything_fits(m, base, &c, a)) bigger = g;
    }
    if (bigger && n < sizeof(out->fix) - 64)
        n += (size_t)snprintf(out->fix + n, sizeof(out->fix) - n, "%sa %s GPU (--gpu %s)", n ? "; " : "",
                              plan_fmt_bytes(bigger->mem_bytes, a1, sizeof(a1)), bigger->name);
    if (m->arch != ARCH_GENERIC && m->arch != ARCH_CNN && n < sizeof(out->fix) - 64) {
        int64_t s0 = base->seq > 0 ? base->seq : m->max_seq;
        for (int64_t s = s0 / 2; s >= 64; s /= 2) {
            TrainSpec t = *base;
            t.seq = s;
            if (anything_fits(m, &t, c0, a)) {
                n += (size_t)snprintf(out->fix + n, sizeof(out->fix) - n, "%s--seq %lld", n ? "; " : "", (long long)s);
                break;
            }
        }
    }
    if (!n) snprintf(out->fix, sizeof(out->fix), "none of more GPUs (up to 65536), a larger GPU preset or a shorter sequence");
}

/* Why group (k, off) lost: its peak at micro-batch 1 with full checkpointing (its best
   regime), or how much slower its best setup is. */
static void why_lost(const ModelSpec *m, const TrainSpec *base, const ClusterSpec *c, const AutoSpec *a,
                     const Option *opts, int n_opts, StrategyKind k, OffloadKind off, double win_tps,
                     AutoResult *out) {
    char a1[32], a2[32], nm[96];
    const Option *best = NULL;
    for (int i = 0; i < n_opts; i++)
        if (opts[i].k == k && opts[i].off == off && opts[i].best.ok && (!best || opts[i].best.tps > best->best.tps))
            best = &opts[i];
    TrainSpec t = *base;
    t.offload = off;
    snprintf(nm, sizeof(nm), "%s%s%s", plan_strategy(k)->name, off ? " + offload " : "", off ? plan_offload_name(off) : "");
    if (best) {
        say(out, "  %s is slower by %.1f%% (best %.0f tokens/s at micro-batch %lld, %s, act-ckpt %s)\n", nm,
            100 * (1 - best->best.tps / win_tps), best->best.tps, (long long)best->best.t.micro_batch,
            plan_precision(best->best.t.precision)->name, plan_ckpt_name(best->best.t.act_ckpt));
        return;
    }
    /* the smallest peak over its regimes at micro-batch 1 with full checkpointing */
    MemResult low = {0};
    int have = 0;
    for (int p = 0; p < PREC_COUNT; p++) {
        if (!regime_ok(a, base, c, k, p)) continue;
        t.precision = (PrecisionKind)p;
        t.micro_batch = 1;
        t.act_ckpt = m->arch == ARCH_GENERIC ? CKPT_NONE : CKPT_FULL;
        MemResult r;
        plan_memory(m, &t, c, k, &r);
        if (!have || (r.gpu_fits && !low.gpu_fits) || r.peak < low.peak) { low = r; have = 1; }
    }
    if (!have) { say(out, "  %s does not fit: no precision regime it supports runs on this GPU\n", nm); return; }
    if (low.gpu_fits && !low.host_fits)
        say(out, "  %s does not fit in host memory: needs %s per node, %s available\n", nm,
            plan_fmt_bytes(low.host_per_node, a1, sizeof(a1)), plan_fmt_bytes(low.host_capacity, a2, sizeof(a2)));
    else if (low.peak <= c->gpu.mem_bytes)
        say(out, "  %s fits only without the margin: peak %s at micro-batch 1, headroom %s < %s\n", nm,
            plan_fmt_bytes(low.peak, a1, sizeof(a1)), plan_fmt_bytes(low.headroom, a2, sizeof(a2)),
            plan_fmt_bytes(out->margin, (char[32]){0}, 32));
    else
        say(out, "  %s does not fit: needs %s per GPU at micro-batch 1 with act-ckpt %s (%s short)\n", nm,
            plan_fmt_bytes(low.peak, a1, sizeof(a1)), m->arch == ARCH_GENERIC ? "none" : "full",
            plan_fmt_bytes(low.peak - c->gpu.mem_bytes, a2, sizeof(a2)));
}

/* 1. Every option (strategy x offload x precision), each searched over checkpointing,
   micro-batch and accumulation on cm (the capacity less the margin). Returns how many. */
static int search_options(const ModelSpec *m, const TrainSpec *t, const TrainSpec *base, const ClusterSpec *c,
                          const ClusterSpec *cm, const AutoSpec *a, Option *opts, AutoResult *out) {
    int n_opts = 0;
    for (int k = 0; k < STRAT_COUNT; k++) {
        if (!(a->strategies & (1u << k))) continue;
        for (int o = 0; o < OFFLOAD_COUNT; o++) {
            if (!(a->offloads & (1u << o)) || !plan_strategy_offloads((StrategyKind)k, o)) continue;
            for (int p = 0; p < PREC_COUNT; p++) {
                if (!regime_ok(a, t, c, (StrategyKind)k, p)) continue;
                Option *op = &opts[n_opts++];
                op->k = (StrategyKind)k;
                op->off = (OffloadKind)o;
                op->prec = (PrecisionKind)p;
                /* offload only frees GPU memory and adds host copies and a slower CPU step:
                   when the same setup without offload already fits every micro-batch up to the
                   search bound, offload cannot be faster (pruned, counted as considered) */
                int pruned = 0;
                for (int q = 0; q < n_opts - 1 && o != OFFLOAD_NONE; q++)
                    if (opts[q].k == op->k && opts[q].prec == op->prec && opts[q].off == OFFLOAD_NONE &&
                        opts[q].best.maxb_plain >= a->max_micro_batch) pruned = 1;
                if (pruned) {
                    memset(&op->best, 0, sizeof(op->best));
                    out->candidates += (long)((CKPT_FULL + 1) * a->max_micro_batch);
                    continue;
                }
                TrainSpec tb = *base;
                tb.offload = op->off;
                tb.precision = op->prec;
                op->best = search(m, &tb, cm, op->k, a, &out->candidates, &out->evaluated);
            }
        }
    }
    return n_opts;
}

/* 2. The fastest, then the simplest within near_frac of it; -1 when nothing fits. */
static int pick(const Option *opts, int n_opts, const AutoSpec *a, double *top_out) {
    double top = 0;
    for (int i = 0; i < n_opts; i++) if (opts[i].best.ok && opts[i].best.tps > top) top = opts[i].best.tps;
    int win = -1;
    for (int i = 0; i < n_opts; i++) {
        if (!opts[i].best.ok || opts[i].best.tps < top * (1 - a->near_frac)) continue;
        if (win < 0) { win = i; continue; }
        int ci = complexity(opts[i].k, opts[i].off), cw = complexity(opts[win].k, opts[win].off);
        if (ci < cw || (ci == cw && opts[i].best.tps > opts[win].best.tps)) win = i;
    }
    *top_out = top;
    return win;
}

/* Nothing fits: why (the global batch, the micro-batches, or memory), the cheapest changes that
   would, and why each strategy fails. */
static void explain_nothing(const ModelSpec *m, const TrainSpec *base, const ClusterSpec *c, const ClusterSpec *cm,
                            const AutoSpec *a, const Option *opts, int n_opts, int divides, AutoResult *out) {
    char a1[32], a2[32], a3[32];
    out->found = 0;
    if (!divides) {
        say(out, "nothing fits: --global-batch %lld is not a multiple of %lld GPUs\n", (long long)a->global_batch,
            (long long)c->gpus);
    } else {
        int any_raw = 0;
        for (int i = 0; i < n_opts; i++) {
            TrainSpec tt = *base;
            tt.offload = opts[i].off;
            tt.precision = opts[i].prec;
            tt.micro_batch = 1;
            tt.act_ckpt = m->arch == ARCH_GENERIC ? CKPT_NONE : CKPT_FULL;
            if (a->global_batch > 0) tt.grad_accum = a->global_batch / c->gpus;
            if (fits(m, &tt, cm, opts[i].k, NULL)) any_raw = 1;
        }
        if (any_raw && a->global_batch > 0)
            say(out, "nothing fits: no micro-batch up to %lld that fits divides the per-GPU batch %lld\n",
                (long long)a->max_micro_batch, (long long)(a->global_batch / c->gpus));
        else {
            say(out, "nothing fits on %lld x %s (%s each, %s host memory per node) with a %s margin, "
                "even sharded, offloaded and checkpointed at micro-batch 1\n", (long long)c->gpus, c->gpu.name,
                plan_fmt_bytes(c->gpu.mem_bytes, a1, sizeof(a1)), plan_fmt_bytes(plan_cluster_host_mem(c), a2, sizeof(a2)),
                plan_fmt_bytes(out->margin, a3, sizeof(a3)));
            nothing_fits(m, base, c, a, out);
            say(out, "would fit with: %s\n", out->fix);
        }
    }
    say(out, "why each strategy fails:\n");
    for (int k = 0; k < STRAT_COUNT; k++)
        for (int o = 0; o < OFFLOAD_COUNT; o++)
            if ((a->strategies & (1u << k)) && (a->offloads & (1u << o)) && plan_strategy_offloads((StrategyKind)k, o))
                why_lost(m, base, c, a, opts, n_opts, (StrategyKind)k, (OffloadKind)o, 1, out);
}

/* The pick's setup, host memory and traffic lines. */
static void explain_setup(const ModelSpec *m, const TrainSpec *t, const ClusterSpec *c, AutoResult *out) {
    char a1[32], a2[32];
    say(out, "setup: micro-batch %lld x grad-accum %lld x %lld GPUs = global batch %lld, act-ckpt %s, %s; "
        "peak %s, headroom %s\n", (long long)out->train.micro_batch, (long long)out->train.grad_accum,
        (long long)c->gpus, (long long)(out->train.micro_batch * out->train.grad_accum * c->gpus),
        plan_ckpt_name(out->train.act_ckpt), plan_precision(out->train.precision)->name,
        plan_fmt_bytes(out->mem.peak, a1, sizeof(a1)), plan_fmt_bytes(out->mem.headroom, a2, sizeof(a2)));
    char traffic[96] = "";
    if (out->train.offload)   /* the host traffic inside the parenthesis */
        snprintf(traffic, sizeof(traffic), "; %.3f GiB per GPU per step over the host link, %.1f ms",
                 out->comm.host_bytes / GIB, out->comm.host_seconds * 1e3);
    say(out, "host: %s per node of %s%s%s)\n", plan_fmt_bytes(out->mem.host_per_node, a1, sizeof(a1)),
        plan_fmt_bytes(out->mem.host_capacity, a2, sizeof(a2)),
        out->train.offload == OFFLOAD_PARAM ? " (offloaded parameter shards and optimizer state"
        : out->train.offload ? " (offloaded optimizer state" : " (load-time copies", traffic);
    CommPlan dc;
    TrainSpec tddp = out->train;
    tddp.offload = OFFLOAD_NONE;
    tddp.precision = t->precision;   /* DDP runs autocast, not an fp32-master regime */
    plan_comm(m, &tddp, c, STRAT_DDP, &dc);
    if (c->gpus > 1)
        say(out, "traffic: %.3f GiB per GPU per step (%.2fx DDP's %.3f GiB)\n", out->comm.wire_bytes / GIB,
            dc.wire_bytes > 0 ? out->comm.wire_bytes / dc.wire_bytes : 0, dc.wire_bytes / GIB);
    else
        say(out, "traffic: none between GPUs (one GPU)\n");
}

/* SyncBatchNorm's advice for a model with BatchNorm: worth it below bn_min_batch per GPU. */
static void explain_batchnorm(const ModelSpec *m, const ClusterSpec *c, const AutoSpec *a, AutoResult *out) {
    int64_t sum_c = 0;
    int nbn = plan_model_bn_layers(m, &sum_c);
    if (nbn <= 0) return;
    int64_t b = out->train.micro_batch;
    TrainSpec ts = out->train;
    ts.syncbn = 1;
    CommPlan sc;
    plan_comm(m, &ts, c, out->strategy, &sc);
    double bn_s = 0;
    for (int i = 0; i < sc.n; i++) if (plan_coll_purpose_is_syncbn(sc.c[i].purpose)) bn_s += sc.c[i].seconds;
    double step = out->time.step_s;
    if (c->gpus > 1 && b < a->bn_min_batch)
        say(out, "BatchNorm: per-GPU batch %lld < %lld, statistics get noisy: SyncBN is worth it; it adds "
            "%d all-gathers + %d all-reduces per micro-step, about %.2f ms per step (%.1f%%) by the model — "
            "convert before wrapping (nn.SyncBatchNorm.convert_sync_batchnorm), not enabled by default\n",
            (long long)b, (long long)a->bn_min_batch, nbn, nbn, bn_s * 1e3, step > 0 ? 100 * bn_s / step : 0);
    else
        say(out, "BatchNorm: per-GPU batch %lld >= %lld (or one GPU): plain BatchNorm is fine, SyncBN not needed\n",
            (long long)b, (long long)a->bn_min_batch);
}

/* The pick, its time, the runner-up and why the simpler setups lost. */
static void explain_pick(const ModelSpec *m, const TrainSpec *t, const TrainSpec *base, const ClusterSpec *c,
                         const AutoSpec *a, const Option *opts, int n_opts, const Option *w, AutoResult *out) {
    char a1[32], nm[96];
    const char *unit = m->arch == ARCH_CNN ? "samples" : "tokens";
    double top = out->top_tps;
    plan_auto_setup_name(w->k, &out->train, nm, sizeof(nm));
    if (w->best.tps >= top * (1 - 1e-9))
        say(out, "picked %s (%s): the highest simulated throughput, %.0f %s/s, among setups that leave the "
            "%s safety margin\n", nm, plan_strategy(w->k)->label, w->best.tps, unit, plan_fmt_bytes(out->margin, a1, sizeof(a1)));
    else
        say(out, "picked %s (%s): %.0f %s/s, within %.0f%% of the fastest (%.0f %s/s) and simpler "
            "(DDP before ZeRO/FSDP before offload); every setup leaves the %s safety margin\n", nm, plan_strategy(w->k)->label,
            w->best.tps, unit, a->near_frac * 100, top, unit, plan_fmt_bytes(out->margin, a1, sizeof(a1)));
    explain_setup(m, t, c, out);
    if (!plan_model_acts_known(m))   /* no FLOPs per sample without the architecture: only communication is known */
        say(out, "time: not known (no architecture: compute and tokens per step are not modelled); communication "
            "%.1f ms per step\n", out->time.comm_s * 1e3);
    else
        say(out, "time (an estimate): step %.1f ms (compute %.1f ms, communication %.1f ms of which %.1f ms exposed), "
            "%.0f %s/s at %.0f%% MFU\n", out->time.step_s * 1e3, out->time.compute_s * 1e3,
            out->time.comm_s * 1e3, out->time.exposed_comm_s * 1e3, out->time.tokens_per_s, unit, c->mfu * 100);
    if (out->runner_found) {
        plan_auto_setup_name(out->runner, &out->runner_train, nm, sizeof(nm));
        say(out, "runner-up: %s, %.0f %s/s (%+.1f%%) at micro-batch %lld, grad-accum %lld, act-ckpt %s\n", nm,
            out->runner_tps, unit, 100 * (out->runner_tps / w->best.tps - 1), (long long)out->runner_train.micro_batch,
            (long long)out->runner_train.grad_accum, plan_ckpt_name(out->runner_train.act_ckpt));
    }
    int cw = complexity(w->k, w->off), header = 0;   /* why the simpler ones lost */
    for (int cx = 0; cx < cw; cx++)
        for (int k = 0; k < STRAT_COUNT; k++)
            for (int o = 0; o < OFFLOAD_COUNT; o++) {
                if (complexity((StrategyKind)k, (OffloadKind)o) != cx) continue;
                if (!(a->strategies & (1u << k)) || !(a->offloads & (1u << o)) ||
                    !plan_strategy_offloads((StrategyKind)k, o)) continue;
                if (!header++) say(out, "simpler setups:\n");
                why_lost(m, base, c, a, opts, n_opts, (StrategyKind)k, (OffloadKind)o, w->best.tps, out);
            }
    explain_batchnorm(m, c, a, out);
}

int plan_auto(const ModelSpec *m, const TrainSpec *t, const ClusterSpec *c, const AutoSpec *a,
              AutoResult *out) {
    memset(out, 0, sizeof(*out));
    TrainSpec base = *t;
    if (a->global_batch > 0) base.grad_accum = 1;
    out->margin = plan_auto_margin(a, c->gpu.mem_bytes);
    ClusterSpec cm = *c;             /* capacity less the safety margin */
    cm.gpu.mem_bytes -= out->margin;
    Option opts[STRAT_COUNT * OFFLOAD_COUNT * PREC_COUNT];
    int divides = !(a->global_batch > 0 && a->global_batch % c->gpus);
    int n_opts = divides ? search_options(m, t, &base, c, &cm, a, opts, out) : 0;
    double top;
    int win = pick(opts, n_opts, a, &top);
    if (win < 0) {
        explain_nothing(m, &base, c, &cm, a, opts, n_opts, divides, out);
        return 0;
    }
    const Option *w = &opts[win];
    out->found = 1;
    out->top_tps = top;
    out->strategy = w->k;
    out->train = w->best.t;
    plan_memory(m, &out->train, c, out->strategy, &out->mem);
    plan_comm(m, &out->train, c, out->strategy, &out->comm);
    plan_sim(m, &out->train, c, out->strategy, 0, &out->time);
    int ru = -1;   /* runner-up: the best setup of another strategy/offload group */
    for (int i = 0; i < n_opts; i++)
        if (opts[i].best.ok && (opts[i].k != w->k || opts[i].off != w->off) &&
            (ru < 0 || opts[i].best.tps > opts[ru].best.tps)) ru = i;
    if (ru >= 0) {
        out->runner_found = 1;
        out->runner = opts[ru].k;
        out->runner_train = opts[ru].best.t;
        out->runner_tps = opts[ru].best.tps;
    }
    explain_pick(m, t, &base, c, a, opts, n_opts, w, out);
    return 0;
}

/* DeepSpeed stage for each strategy (FSDP rows: the stage that shards the same state). */
static int ds_stage(const AutoResult *r) {
    static const int STAGE[STRAT_COUNT] = {0, 1, 2, 3, 3, 2, 3};
    return r->train.offload == OFFLOAD_PARAM ? 3 : STAGE[r->strategy];
}

char *plan_auto_deepspeed_json(const ModelSpec *m, const ClusterSpec *c, const AutoResult *r) {
    (void)m;
    if (!r->found) return NULL;
    const PrecisionSpec *p = plan_precision(r->train.precision);
    int stage = ds_stage(r);
    cJSON *j = cJSON_CreateObject();
    /* counts are whole numbers: cJSON prints them without a fraction or exponent */
    cJSON_AddNumberToObject(j, "train_batch_size", (double)(r->train.micro_batch * r->train.grad_accum * c->gpus));
    cJSON_AddNumberToObject(j, "train_micro_batch_size_per_gpu", (double)r->train.micro_batch);
    cJSON_AddNumberToObject(j, "gradient_accumulation_steps", (double)r->train.grad_accum);
    cJSON *z = cJSON_AddObjectToObject(j, "zero_optimization");
    cJSON_AddNumberToObject(z, "stage", stage);
    if (stage > 0) {
        cJSON_AddNumberToObject(z, "reduce_bucket_size", (double)(int64_t)PLAN_DS_REDUCE_BUCKET);
        cJSON_AddBoolToObject(z, "overlap_comm", stage == 3);
        cJSON_AddBoolToObject(z, "contiguous_gradients", 1);
    }
    if (r->train.offload != OFFLOAD_NONE) {   /* offload_config.py: device, pin_memory */
        cJSON *oo = cJSON_AddObjectToObject(z, "offload_optimizer");
        cJSON_AddStringToObject(oo, "device", "cpu");
        cJSON_AddBoolToObject(oo, "pin_memory", 1);
    }
    if (r->train.offload == OFFLOAD_PARAM) {
        cJSON *op = cJSON_AddObjectToObject(z, "offload_param");
        cJSON_AddStringToObject(op, "device", "cpu");
        cJSON_AddBoolToObject(op, "pin_memory", 1);
    }
    /* mixed-*: DeepSpeed's own fp16/bf16 (16-bit model, fp32 master in the optimizer); amp-*:
       DeepSpeed's torch_autocast (fp32 model, autocast compute); bf16: DeepSpeed's bf16 */
    if (p->autocast) {
        cJSON *ac = cJSON_AddObjectToObject(j, "torch_autocast");
        cJSON_AddBoolToObject(ac, "enabled", 1);
        cJSON_AddStringToObject(ac, "dtype", p->peak == PEAK_FP16 ? "torch.float16" : "torch.bfloat16");
    } else if (p->peak != PEAK_FP32) {
        cJSON *d = cJSON_AddObjectToObject(j, p->peak == PEAK_FP16 ? "fp16" : "bf16");
        cJSON_AddBoolToObject(d, "enabled", 1);
    }
    const OptimizerSpec *o = plan_optimizer(r->train.optimizer);
    cJSON *opt = cJSON_AddObjectToObject(j, "optimizer");
    cJSON_AddStringToObject(opt, "type", strcmp(o->name, "adamw") == 0 ? "AdamW" : strcmp(o->name, "adam") == 0 ? "Adam" : "SGD");
    cJSON *pp = cJSON_AddObjectToObject(opt, "params");
    cJSON_AddNumberToObject(pp, "lr", 1e-4);
    if (r->train.optimizer == OPT_SGD_MOMENTUM) cJSON_AddNumberToObject(pp, "momentum", 0.9);
    if (r->train.act_ckpt == CKPT_FULL) {   /* for models that use deepspeed.checkpointing */
        cJSON *ac = cJSON_AddObjectToObject(j, "activation_checkpointing");
        cJSON_AddBoolToObject(ac, "partition_activations", 0);
        cJSON_AddBoolToObject(ac, "contiguous_memory_optimization", 0);
    }
    char *txt = cJSON_Print(j);
    cJSON_Delete(j);
    return txt;
}

void plan_auto_prediction(FILE *f, const ClusterSpec *c, const AutoResult *r) {
    if (!r->found) return;
    char a1[32], a2[32], a3[32], nm[96];
    fprintf(f, "# memplan prediction for %s: peak %s per GPU (headroom %s), host %s per node; "
            "step %.1f ms, %.0f tokens/s on %lld x %s\n",
            plan_auto_setup_name(r->strategy, &r->train, nm, sizeof(nm)),
            plan_fmt_bytes(r->mem.peak, a1, sizeof(a1)), plan_fmt_bytes(r->mem.headroom, a2, sizeof(a2)),
            plan_fmt_bytes(r->mem.host_per_node, a3, sizeof(a3)), r->time.step_s * 1e3, r->time.tokens_per_s,
            (long long)c->gpus, c->gpu.name);
    if (!plan_strategy_is_deepspeed(r->strategy))
        fprintf(f, "# the pick is %s (PyTorch); this config is the ZeRO stage that shards the same state, "
                "and memplan's figures above are for %s (--emit torch for its snippet)\n",
                plan_strategy(r->strategy)->name, plan_strategy(r->strategy)->name);
}

/* The Hugging Face transformer block class of a model, by the family its name starts with. */
static const struct { const char *prefix, *module, *cls; } BLOCKS[] = {
    {"gpt2", "transformers.models.gpt2.modeling_gpt2", "GPT2Block"},
    {"llama", "transformers.models.llama.modeling_llama", "LlamaDecoderLayer"},
    {"mistral", "transformers.models.mistral.modeling_mistral", "MistralDecoderLayer"},
    {"qwen2", "transformers.models.qwen2.modeling_qwen2", "Qwen2DecoderLayer"},
    {"gemma", "transformers.models.gemma.modeling_gemma", "GemmaDecoderLayer"},
    {"gpt-neox", "transformers.models.gpt_neox.modeling_gpt_neox", "GPTNeoXLayer"},
    {"pythia", "transformers.models.gpt_neox.modeling_gpt_neox", "GPTNeoXLayer"},
    {"opt", "transformers.models.opt.modeling_opt", "OPTDecoderLayer"},
    {"bert", "transformers.models.bert.modeling_bert", "BertLayer"},
    {"t5", "transformers.models.t5.modeling_t5", "T5Block"},
};

void plan_auto_torch(FILE *f, const ModelSpec *m, const ClusterSpec *c, const AutoResult *r) {
    if (!r->found) { fprintf(f, "# nothing fits: no launch configuration\n"); return; }
    int64_t nodes = plan_cluster_nodes(c);
    fprintf(f, "torchrun --nnodes %lld --nproc-per-node %lld%s train.py --micro-batch %lld --grad-accum %lld\n",
            (long long)nodes, (long long)c->gpus_per_node,
            nodes > 1 ? " --rdzv-backend c10d --rdzv-endpoint $MASTER_ADDR:29500" : "",
            (long long)r->train.micro_batch, (long long)r->train.grad_accum);
    const PrecisionSpec *p = plan_precision(r->train.precision);
    const char *dt = p->peak == PEAK_BF16 ? "torch.bfloat16" : p->peak == PEAK_FP16 ? "torch.float16" : "torch.float32";
    const char *blk = "Block  # your transformer block class", *mod = NULL;
    for (size_t i = 0; i < sizeof(BLOCKS) / sizeof(BLOCKS[0]); i++)
        if (strncmp(m->name, BLOCKS[i].prefix, strlen(BLOCKS[i].prefix)) == 0) { blk = BLOCKS[i].cls; mod = BLOCKS[i].module; break; }
    int transformer = m->arch == ARCH_DECODER || m->arch == ARCH_ENCODER || m->arch == ARCH_ENC_DEC;
    int bn = plan_model_bn_layers(m, NULL) > 0 && c->gpus > 1 && r->train.micro_batch < 16;
    int fsdp = r->strategy == STRAT_FSDP_FULL || r->strategy == STRAT_FSDP_GRAD_OP || r->strategy == STRAT_FSDP_HYBRID;
    fprintf(f, "# in train.py, after dist.init_process_group(\"nccl\") and torch.cuda.set_device(local_rank):\n");
    fprintf(f, "import functools, torch\n");
    if (mod && transformer) fprintf(f, "from %s import %s\n", mod, blk);
    if (bn) fprintf(f, "model = nn.SyncBatchNorm.convert_sync_batchnorm(model)  # before wrapping\n");
    if (r->train.act_ckpt == CKPT_FULL && !fsdp) {
        if (transformer && mod)
            fprintf(f, "model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={\"use_reentrant\": False})  # act-ckpt full\n");
        else
            fprintf(f, "# act-ckpt full: wrap each block's forward in torch.utils.checkpoint.checkpoint(..., use_reentrant=False)\n");
    }
    switch (r->strategy) {
    case STRAT_DDP:
        fprintf(f, "from torch.nn.parallel import DistributedDataParallel as DDP\n");
        fprintf(f, "model = DDP(model.cuda(), device_ids=[local_rank], bucket_cap_mb=25%s)\n",
                r->train.grad_as_bucket_view ? ", gradient_as_bucket_view=True" : "");
        break;
    case STRAT_FSDP_FULL: case STRAT_FSDP_GRAD_OP: case STRAT_FSDP_HYBRID: {
        const char *ss = r->strategy == STRAT_FSDP_FULL ? "FULL_SHARD" : r->strategy == STRAT_FSDP_GRAD_OP ? "SHARD_GRAD_OP" : "HYBRID_SHARD";
        fprintf(f, "from torch.distributed.fsdp import FullyShardedDataParallel as FSDP, ShardingStrategy, MixedPrecision, CPUOffload\n"
                   "from torch.distributed.fsdp.wrap import transformer_auto_wrap_policy\n");
        fprintf(f, "model = FSDP(model, sharding_strategy=ShardingStrategy.%s,\n"
                   "             auto_wrap_policy=functools.partial(transformer_auto_wrap_policy, transformer_layer_cls={%s}),\n",
                ss, blk);
        if (p->master_bytes > 0)   /* fp32 shards as the master weights, 16-bit gathers and reductions */
            fprintf(f, "             mixed_precision=MixedPrecision(param_dtype=%s, reduce_dtype=%s, buffer_dtype=%s),\n", dt, dt, dt);
        if (r->train.offload == OFFLOAD_PARAM)
            fprintf(f, "             cpu_offload=CPUOffload(offload_params=True),\n");
        fprintf(f, "             device_id=local_rank, limit_all_gathers=True, sync_module_states=True)"
                   "  # load weights on rank 0 only\n");
        if (r->train.act_ckpt == CKPT_FULL) {
            fprintf(f, "from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import (\n"
                       "    apply_activation_checkpointing, checkpoint_wrapper, CheckpointImpl)\n");
            fprintf(f, "apply_activation_checkpointing(model, checkpoint_wrapper_fn=functools.partial(\n"
                       "    checkpoint_wrapper, checkpoint_impl=CheckpointImpl.NO_REENTRANT),\n"
                       "    check_fn=lambda submodule: isinstance(submodule, %s))  # act-ckpt full\n", blk);
        }
        break;
    }
    default:
        fprintf(f, "# ZeRO stage %d%s: use DeepSpeed (memplan auto ... --emit deepspeed > ds_config.json)\n"
                   "import deepspeed\n"
                   "model, optimizer, _, _ = deepspeed.initialize(model=model, model_parameters=model.parameters(), "
                   "config=\"ds_config.json\")\n", ds_stage(r),
                r->train.offload == OFFLOAD_PARAM ? " with offload_optimizer and offload_param on cpu"
                : r->train.offload == OFFLOAD_OPT ? " with offload_optimizer on cpu" : "");
    }
    if (p->autocast && (r->strategy == STRAT_DDP || fsdp))
        fprintf(f, "with torch.autocast(\"cuda\", dtype=%s): loss = model(batch)\n", dt);
}
