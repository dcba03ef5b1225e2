/* plan_auto.c — see plan_auto.h. */
#include "plan_auto.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "plan_activ.h"
#include "plan_time.h"
#include "plan_pp.h"
#include "plan_tp.h"
#include "plan_lora.h"
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
    if (!mr) return plan_memory_fits(m, t, c, k);
    plan_memory(m, t, c, k, mr);
    return mr->fits;
}

typedef struct {
    int ok;
    TrainSpec t;
    double score;            /* higher is better: tokens/s, or 1 / communication seconds */
    double tps;              /* simulated tokens/s (samples/s for CNNs) */
    double comm_s;           /* communication per step (collectives + host copies; time unknown only) */
    int fits_all;            /* every micro-batch searched fits with the least recomputation */
} Best;

/* The micro-batches auto tries for base: the fixed one (kept, or the global batch over the
   GPUs and the kept accumulation), else 1 .. the search bound. */
/* Data-parallel replicas: the GPUs over the tensor-parallel degree (the tp ranks of a group
   train the same samples). */
static int64_t replicas(const ClusterSpec *c, const TrainSpec *t) {
    return c->gpus / plan_tp_degree(t) / plan_pp_degree(t);   /* and over the pipeline stages */
}

static void batch_range(const TrainSpec *base, const ClusterSpec *c, const AutoSpec *a, int64_t *lo, int64_t *hi) {
    *lo = 1;
    *hi = a->max_micro_batch;
    if (a->keep_batch) *lo = *hi = base->micro_batch;
    else if (a->keep_accum && a->global_batch > 0) {
        int64_t b = a->global_batch / replicas(c, base) / base->grad_accum;
        *lo = *hi = b > 0 ? b : 1;
    }
}

/* The checkpointing policies auto tries, from the most memory to the least: the kept one, else
   none, op (torchtitan's op-level policy, where it is modelled: dense decoders) and full.
   every:N is not searched, nor selective: with SDPA, the default attention, Megatron's core
   recompute keeps about what none keeps (its inputs for the kernel's saved q, k, v); nothing to
   recompute for a model of parameter counts alone. */
#define AUTO_CKPTS 3
static int ckpt_options(const ModelSpec *m, const TrainSpec *base, const AutoSpec *a, CkptKind ck[AUTO_CKPTS],
                        int64_t every[AUTO_CKPTS]) {
    if (a->keep_ckpt) { ck[0] = base->act_ckpt; every[0] = base->ckpt_every; return 1; }
    int n = 0;
    ck[n] = CKPT_NONE; every[n++] = 0;
    if (m->arch == ARCH_GENERIC) return n;
    TrainSpec op = *base;
    op.act_ckpt = CKPT_OP;
    if (!plan_act_ckpt_unsupported(m, &op)) { ck[n] = CKPT_OP; every[n++] = 0; }
    ck[n] = CKPT_FULL; every[n++] = 1;
    return n;
}

/* Setups one search considers (strategy, offload and precision fixed). */
static long search_size(const ModelSpec *m, const TrainSpec *base, const ClusterSpec *c, const AutoSpec *a) {
    CkptKind ck[AUTO_CKPTS];
    int64_t every[AUTO_CKPTS], lo, hi;
    batch_range(base, c, a, &lo, &hi);
    return (long)ckpt_options(m, base, a, ck, every) * (long)(hi - lo + 1);
}

/* The setup with the least memory auto may try for base: the smallest micro-batch it searches
   and full checkpointing (or what is kept). */
static TrainSpec cheapest(const ModelSpec *m, const TrainSpec *base, const ClusterSpec *c, const AutoSpec *a) {
    TrainSpec t = *base;
    CkptKind ck[AUTO_CKPTS];
    int64_t every[AUTO_CKPTS], hi;
    int n = ckpt_options(m, base, a, ck, every);
    t.act_ckpt = ck[n - 1];
    t.ckpt_every = every[n - 1];
    batch_range(base, c, a, &t.micro_batch, &hi);
    if (a->global_batch > 0 && !a->keep_accum) {
        int64_t per = a->global_batch / replicas(c, base);
        t.grad_accum = per >= t.micro_batch ? per / t.micro_batch : 1;
    }
    return t;
}

/* Without the model's compute, setups rank by what is known: communication per step. */
static double comm_seconds(const ModelSpec *m, const TrainSpec *t, const ClusterSpec *c, StrategyKind k) {
    CommPlan cp;
    plan_comm(m, t, c, k, &cp);
    return cp.seconds + cp.host_seconds;
}

/* Searches micro-batch, accumulation and checkpointing for strategy k at base's precision and
   offload. c is the cluster with the safety margin taken off the GPU's capacity. */
static Best search(const ModelSpec *m, const TrainSpec *base, const ClusterSpec *c, StrategyKind k,
                   const AutoSpec *a, long *cand, long *evaluated) {
    Best best = {0};
    CkptKind cks[AUTO_CKPTS];
    int64_t every[AUTO_CKPTS], lo, hi;
    int n_ck = ckpt_options(m, base, a, cks, every);
    batch_range(base, c, a, &lo, &hi);
    int known = plan_model_acts_known(m);
    for (int ci = 0; ci < n_ck; ci++) {
        TrainSpec t = *base;
        t.act_ckpt = cks[ci];
        t.ckpt_every = every[ci];
        int64_t maxb = plan_max_micro_batch(m, &t, c, k, hi);
        if (ci == 0) best.fits_all = maxb >= hi;
        SimPrep *prep = maxb >= lo ? plan_sim_prepare(m, &t, c, k) : NULL;
        if (maxb >= lo && !prep) maxb = 0;     /* out of memory: skip, counted as considered */
        for (int64_t b = lo; b <= hi; b++) {
            (*cand)++;
            if (b > maxb) continue;            /* known not to fit: the peak grows with b */
            t.micro_batch = b;
            if (a->global_batch > 0) {
                int64_t per = a->global_batch / replicas(c, &t);
                if (a->global_batch % replicas(c, &t) || per % b) continue;
                if (a->keep_accum && per / b != t.grad_accum) continue;
                t.grad_accum = per / b;
            }
            SimResult s;
            plan_sim_run(prep, b, t.grad_accum, 0, &s);
            (*evaluated)++;
            double comm = known ? 0 : comm_seconds(m, &t, c, k);
            double score = known ? s.tokens_per_s : 1 / (comm > 1e-9 ? comm : 1e-9);
            if (!best.ok || score > best.score * (1 + 1e-9)) {
                best.ok = 1;
                best.t = t;
                best.score = score;
                best.tps = s.tokens_per_s;
                best.comm_s = comm;
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

/* Does any searched option fit (with the margin) in its cheapest setup on cluster c? Used to find the cheapest change when nothing fits. */
static int anything_fits(const ModelSpec *m, const TrainSpec *base, const ClusterSpec *c, const AutoSpec *a) {
    ClusterSpec cm = *c;
    cm.gpu.mem_bytes -= plan_auto_margin(a, c->gpu.mem_bytes);
    for (int k = 0; k < STRAT_COUNT; k++) {
        if (!(a->strategies & (1u << k))) continue;
        for (int o = 0; o < OFFLOAD_COUNT; o++) {
            if (!(a->offloads & (1u << o)) || !plan_strategy_offloads((StrategyKind)k, o)) continue;
            for (int p = 0; p < PREC_COUNT; p++) {
                if (!regime_ok(a, base, c, (StrategyKind)k, p)) continue;
                TrainSpec t = cheapest(m, base, c, a);
                t.offload = (OffloadKind)o;
                t.precision = (PrecisionKind)p;
                if (fits(m, &t, &cm, (StrategyKind)k, NULL)) return 1;
            }
        }
    }
    return 0;
}

/* A full fine-tune that fits nowhere: would QLoRA (PEFT LoRA r=16 on PEFT's default targets over
   an NF4 base, plan_lora.c) fit this cluster as it is? Then it is named with its smallest peak, as
   a different training (the base frozen), after the changes that keep the full fine-tune. */
static void qlora_fix(const ModelSpec *m, const TrainSpec *base, const ClusterSpec *c0, const AutoSpec *a,
                      AutoResult *out, size_t *n) {
    if (plan_finetune_on(&base->ft) || *n >= sizeof(out->fix) - 96 || m->n_layers == 0) return;
    ModelSpec q = *m;
    q.layers = malloc(sizeof(LayerSpec) * (size_t)m->n_layers);
    if (!q.layers) return;
    memcpy(q.layers, m->layers, sizeof(LayerSpec) * (size_t)m->n_layers);
    q.cap_layers = m->n_layers;
    TrainSpec tq = *base;
    tq.ft.rank = 16;
    tq.ft.alpha = 16;
    tq.ft.quant = QUANT_NF4;
    char err[256];
    double best = -1;
    if (plan_finetune_apply(&q, &tq, err, sizeof err) == 0) {
        ClusterSpec cm = *c0;
        cm.gpu.mem_bytes -= plan_auto_margin(a, c0->gpu.mem_bytes);
        for (int k = 0; k < STRAT_COUNT; k++)
            for (int o = 0; o < OFFLOAD_COUNT; o++) {
                if (!(a->strategies & (1u << k)) || !(a->offloads & (1u << o)) ||
                    !plan_strategy_offloads((StrategyKind)k, o) || plan_strategy((StrategyKind)k)->shard & SHARD_PARAM)
                    continue;   /* the strategies --lora plans on every --fsdp (ddp, zero1/2) */
                for (int p = 0; p < PREC_COUNT; p++) {
                    if (!regime_ok(a, base, c0, (StrategyKind)k, p)) continue;
                    TrainSpec t = cheapest(&q, &tq, c0, a);
                    t.offload = (OffloadKind)o;
                    t.precision = (PrecisionKind)p;
                    MemResult r;
                    if (plan_memory(&q, &t, &cm, (StrategyKind)k, &r) == 0 && r.fits && (best < 0 || r.peak < best))
                        best = r.peak;
                }
            }
    }
    free(q.layers);
    if (best < 0) return;
    char b[32];
    *n += (size_t)snprintf(out->fix + *n, sizeof(out->fix) - *n, "%sQLoRA instead of a full fine-tune "
                           "(--lora 16 --quant-base nf4: peak %s)", *n ? "; " : "", plan_fmt_bytes(best, b, sizeof b));
}

/* Nothing fits: the changes that would, cheapest first (host memory, more GPUs, a larger GPU,
   a shorter sequence), then QLoRA. */
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
                    TrainSpec t = cheapest(m, base, &c, a);
                    t.offload = (OffloadKind)o;
                    t.precision = (PrecisionKind)p;
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
    qlora_fix(m, base, c0, a, out, &n);
    if (!n) snprintf(out->fix, sizeof(out->fix), "none of more GPUs (up to 65536), a larger GPU preset or a shorter sequence");
}

/* Why group (k, off) lost to the winner w: how much slower its best setup is, or its peak in
   its cheapest setup (its best regime). */
static void why_lost(const ModelSpec *m, const TrainSpec *base, const ClusterSpec *c, const AutoSpec *a,
                     const Option *opts, int n_opts, StrategyKind k, OffloadKind off, const Best *w,
                     AutoResult *out) {
    char a1[32], a2[32], nm[96], ck[32];
    const Option *best = NULL;
    for (int i = 0; i < n_opts; i++)
        if (opts[i].k == k && opts[i].off == off && opts[i].best.ok && (!best || opts[i].best.score > best->best.score))
            best = &opts[i];
    TrainSpec t = cheapest(m, base, c, a);
    t.offload = off;
    snprintf(nm, sizeof(nm), "%s%s%s", plan_strategy(k)->name, off ? " + offload " : "", off ? plan_offload_name(off) : "");
    if (best && w) {
        const Best *b = &best->best;
        if (out->time_known)
            say(out, "  %s is slower by %.1f%% (best %.0f tokens/s at micro-batch %lld, %s, act-ckpt %s)\n", nm,
                100 * (1 - b->tps / w->tps), b->tps, (long long)b->t.micro_batch,
                plan_precision(b->t.precision)->name, plan_ckpt_label(&b->t, ck, sizeof ck));
        else
            say(out, "  %s communicates %.1f%% longer (%.1f ms per step at micro-batch %lld, %s, act-ckpt %s)\n", nm,
                100 * (b->comm_s / w->comm_s - 1), b->comm_s * 1e3, (long long)b->t.micro_batch,
                plan_precision(b->t.precision)->name, plan_ckpt_label(&b->t, ck, sizeof ck));
        return;
    }
    /* the smallest peak over its regimes in its cheapest setup */
    MemResult low = {0};
    int have = 0;
    for (int p = 0; p < PREC_COUNT; p++) {
        if (!regime_ok(a, base, c, k, p)) continue;
        t.precision = (PrecisionKind)p;
        MemResult r;
        plan_memory(m, &t, c, k, &r);
        if (!have || (r.gpu_fits && !low.gpu_fits) || r.peak < low.peak) { low = r; have = 1; }
    }
    if (!have) { say(out, "  %s does not fit: no precision regime it supports runs on this GPU\n", nm); return; }
    if (low.gpu_fits && !low.host_fits)
        say(out, "  %s does not fit in host memory: needs %s per node, %s available\n", nm,
            plan_fmt_bytes(low.host_per_node, a1, sizeof(a1)), plan_fmt_bytes(low.host_capacity, a2, sizeof(a2)));
    else if (low.peak <= c->gpu.mem_bytes)
        say(out, "  %s fits only without the margin: peak %s at micro-batch %lld, headroom %s < %s\n", nm,
            plan_fmt_bytes(low.peak, a1, sizeof(a1)), (long long)t.micro_batch,
            plan_fmt_bytes(low.headroom, a2, sizeof(a2)), plan_fmt_bytes(out->margin, (char[32]){0}, 32));
    else
        say(out, "  %s does not fit: needs %s per GPU at micro-batch %lld with act-ckpt %s (%s short)\n", nm,
            plan_fmt_bytes(low.peak, a1, sizeof(a1)), (long long)t.micro_batch, plan_ckpt_label(&t, ck, sizeof ck),
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
                   when the same setup without offload already fits every micro-batch searched
                   without recomputation, offload cannot be faster (pruned, counted as considered) */
                int pruned = 0;
                for (int q = 0; q < n_opts - 1 && o != OFFLOAD_NONE; q++)
                    if (opts[q].k == op->k && opts[q].prec == op->prec && opts[q].off == OFFLOAD_NONE &&
                        opts[q].best.fits_all) pruned = 1;
                TrainSpec tb = *base;
                tb.offload = op->off;
                tb.precision = op->prec;
                if (pruned) {
                    memset(&op->best, 0, sizeof(op->best));
                    out->candidates += search_size(m, &tb, cm, a);
                    continue;
                }
                op->best = search(m, &tb, cm, op->k, a, &out->candidates, &out->evaluated);
            }
        }
    }
    return n_opts;
}

/* 2. The best score (fastest, or least communication), then the simplest within near_frac of
   it; -1 when nothing fits. */
static int pick(const Option *opts, int n_opts, const AutoSpec *a, double *top_out) {
    double top = 0;
    for (int i = 0; i < n_opts; i++) if (opts[i].best.ok && opts[i].best.score > top) top = opts[i].best.score;
    int win = -1;
    for (int i = 0; i < n_opts; i++) {
        if (!opts[i].best.ok || opts[i].best.score < top * (1 - a->near_frac)) continue;
        if (win < 0) { win = i; continue; }
        int ci = complexity(opts[i].k, opts[i].off), cw = complexity(opts[win].k, opts[win].off);
        if (ci < cw || (ci == cw && opts[i].best.score > opts[win].best.score)) win = i;
    }
    *top_out = top;
    return win;
}

/* Nothing fits: why (the global batch, the micro-batches, or memory), the cheapest changes that
   would, and why each strategy fails. */
static void explain_nothing(const ModelSpec *m, const TrainSpec *base, const ClusterSpec *c, const ClusterSpec *cm,
                            const AutoSpec *a, const Option *opts, int n_opts, int divides, AutoResult *out) {
    char a1[32], a2[32], a3[32], ck[32];
    out->found = 0;
    TrainSpec low = cheapest(m, base, c, a);
    if (!divides) {
        say(out, "nothing fits: --global-batch %lld is not a multiple of %lld data-parallel GPUs\n",
            (long long)a->global_batch, (long long)replicas(c, base));
    } else {
        int any_raw = 0;
        for (int i = 0; i < n_opts; i++) {
            TrainSpec tt = low;
            tt.offload = opts[i].off;
            tt.precision = opts[i].prec;
            if (fits(m, &tt, cm, opts[i].k, NULL)) any_raw = 1;
        }
        if (any_raw && a->global_batch > 0)
            say(out, "nothing fits: no micro-batch up to %lld that fits divides the per-GPU batch %lld\n",
                (long long)a->max_micro_batch, (long long)(a->global_batch / replicas(c, base)));
        else {
            say(out, "nothing fits on %lld x %s (%s each, %s host memory per node) with a %s margin, "
                "in every searched setup down to micro-batch %lld with act-ckpt %s\n", (long long)c->gpus, c->gpu.name,
                plan_fmt_bytes(c->gpu.mem_bytes, a1, sizeof(a1)), plan_fmt_bytes(plan_cluster_host_mem(c), a2, sizeof(a2)),
                plan_fmt_bytes(out->margin, a3, sizeof(a3)), (long long)low.micro_batch, plan_ckpt_label(&low, ck, sizeof ck));
            nothing_fits(m, base, c, a, out);
            say(out, "would fit with: %s\n", out->fix);
        }
    }
    say(out, "why each strategy fails:\n");
    for (int k = 0; k < STRAT_COUNT; k++)
        for (int o = 0; o < OFFLOAD_COUNT; o++)
            if ((a->strategies & (1u << k)) && (a->offloads & (1u << o)) && plan_strategy_offloads((StrategyKind)k, o))
                why_lost(m, base, c, a, opts, n_opts, (StrategyKind)k, (OffloadKind)o, NULL, out);
}

/* The pick's setup, host memory and traffic lines. */
/* The winner's simulated step, its achieved MFU, and what backs the time (plan_time.h). */
static void auto_time_line(const ModelSpec *m, const ClusterSpec *c, AutoResult *out, const char *unit) {
    TimeBasis b = plan_time_basis(m, &out->train, c, out->strategy);
    double mfu = plan_time_mfu(c, &out->train, out->time.flops_per_step, out->time.step_s);
    char bubble[64] = "", basis[320];
    if (out->time.pp_bubble_s > 0)
        snprintf(bubble, sizeof bubble, ", pipeline bubble %.1f ms", out->time.pp_bubble_s * 1e3);
    say(out, "time: step %.1f ms (compute %.1f ms, communication %.1f ms of which %.1f ms exposed%s), "
        "%.0f %s/s at %.0f%% MFU; %s\n", out->time.step_s * 1e3, out->time.compute_s * 1e3, out->time.comm_s * 1e3,
        out->time.exposed_comm_s * 1e3, bubble, out->time.tokens_per_s, unit, mfu * 100,
        plan_time_basis_text(&b, basis, sizeof basis));
}

static void explain_setup(const ModelSpec *m, const TrainSpec *t, const ClusterSpec *c, AutoResult *out) {
    char a1[32], a2[32];
    int pp = plan_pp_degree(&out->train);
    say(out, "setup: micro-batch %lld x %s %lld x %lld %s = global batch %lld, act-ckpt %s, %s; "
        "peak %s, headroom %s\n", (long long)out->train.micro_batch, pp > 1 ? "micro-batches" : "grad-accum",
        (long long)out->train.grad_accum, (long long)replicas(c, &out->train),
        pp > 1 ? "data-parallel replicas (gpus / (tp x pp))"
        : plan_tp_degree(&out->train) > 1 ? "data-parallel replicas (gpus / tp)" : "GPUs",
        (long long)(out->train.micro_batch * out->train.grad_accum * replicas(c, &out->train)),
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
    char a1[32], nm[96], ck[32];
    const char *unit = m->arch == ARCH_CNN ? "samples" : "tokens";
    double top = out->top_tps;
    plan_auto_setup_name(w->k, &out->train, nm, sizeof(nm));
    plan_fmt_bytes(out->margin, a1, sizeof(a1));
    if (!out->time_known) {   /* ranked by communication: the least is 1 / the top score */
        double least = 1 / out->top_score;
        if (w->best.score >= out->top_score * (1 - 1e-9))
            say(out, "picked %s (%s): the least communication per step, %.1f ms (collectives and host copies; compute "
                "time is not known, so setups rank by communication), among setups that leave the %s safety margin\n",
                nm, plan_strategy(w->k)->label, w->best.comm_s * 1e3, a1);
        else
            say(out, "picked %s (%s): %.1f ms of communication per step, within %.0f%% of the least (%.1f ms) and "
                "simpler (DDP before ZeRO/FSDP before offload); compute time is not known, so setups rank by "
                "communication; every setup leaves the %s safety margin\n", nm, plan_strategy(w->k)->label,
                w->best.comm_s * 1e3, a->near_frac * 100, least * 1e3, a1);
    } else if (w->best.tps >= top * (1 - 1e-9))
        say(out, "picked %s (%s): the highest simulated throughput, %.0f %s/s, among setups that leave the "
            "%s safety margin\n", nm, plan_strategy(w->k)->label, w->best.tps, unit, a1);
    else
        say(out, "picked %s (%s): %.0f %s/s, within %.0f%% of the fastest (%.0f %s/s) and simpler "
            "(DDP before ZeRO/FSDP before offload); every setup leaves the %s safety margin\n", nm, plan_strategy(w->k)->label,
            w->best.tps, unit, a->near_frac * 100, top, unit, a1);
    explain_setup(m, t, c, out);
    if (!out->time_known)   /* no FLOPs per sample without the architecture: only communication is known */
        say(out, "time: not known (no architecture: compute and tokens per step are not modelled); communication "
            "%.1f ms per step (collectives %.1f ms, host copies %.1f ms)\n", out->comm_s * 1e3,
            out->comm.seconds * 1e3, out->comm.host_seconds * 1e3);
    else
        auto_time_line(m, c, out, unit);
    if (out->runner_found) {
        plan_auto_setup_name(out->runner, &out->runner_train, nm, sizeof(nm));
        if (out->time_known)
            say(out, "runner-up: %s, %.0f %s/s (%+.1f%%) at micro-batch %lld, grad-accum %lld, act-ckpt %s\n", nm,
                out->runner_tps, unit, 100 * (out->runner_tps / w->best.tps - 1), (long long)out->runner_train.micro_batch,
                (long long)out->runner_train.grad_accum, plan_ckpt_label(&out->runner_train, ck, sizeof ck));
        else
            say(out, "runner-up: %s, %.1f ms of communication per step (%+.1f%%) at micro-batch %lld, grad-accum %lld, "
                "act-ckpt %s\n", nm, out->runner_comm_s * 1e3, 100 * (out->runner_comm_s / w->best.comm_s - 1),
                (long long)out->runner_train.micro_batch, (long long)out->runner_train.grad_accum,
                plan_ckpt_label(&out->runner_train, ck, sizeof ck));
    }
    int cw = complexity(w->k, w->off), header = 0;   /* why the simpler ones lost */
    for (int cx = 0; cx < cw; cx++)
        for (int k = 0; k < STRAT_COUNT; k++)
            for (int o = 0; o < OFFLOAD_COUNT; o++) {
                if (complexity((StrategyKind)k, (OffloadKind)o) != cx) continue;
                if (!(a->strategies & (1u << k)) || !(a->offloads & (1u << o)) ||
                    !plan_strategy_offloads((StrategyKind)k, o)) continue;
                if (!header++) say(out, "simpler setups:\n");
                why_lost(m, base, c, a, opts, n_opts, (StrategyKind)k, (OffloadKind)o, &w->best, out);
            }
    explain_batchnorm(m, c, a, out);
}

int plan_auto(const ModelSpec *m, const TrainSpec *t, const ClusterSpec *c, const AutoSpec *a,
              AutoResult *out) {
    memset(out, 0, sizeof(*out));
    AutoSpec a_tp;
    if (plan_tp_degree(t) > 1) {   /* tensor parallel is planned without offload (plan_tp_check) */
        a_tp = *a;
        a_tp.offloads &= 1u << OFFLOAD_NONE;
        a = &a_tp;
    }
    out->time_known = plan_model_acts_known(m);
    TrainSpec base = *t;
    if (a->global_batch > 0 && !a->keep_accum) base.grad_accum = 1;
    out->margin = plan_auto_margin(a, c->gpu.mem_bytes);
    ClusterSpec cm = *c;             /* capacity less the safety margin */
    cm.gpu.mem_bytes -= out->margin;
    Option opts[STRAT_COUNT * OFFLOAD_COUNT * PREC_COUNT];
    int divides = !(a->global_batch > 0 && a->global_batch % replicas(c, t));
    int n_opts = divides ? search_options(m, t, &base, c, &cm, a, opts, out) : 0;
    double top;
    int win = pick(opts, n_opts, a, &top);
    if (win < 0) {
        explain_nothing(m, &base, c, &cm, a, opts, n_opts, divides, out);
        return 0;
    }
    const Option *w = &opts[win];
    out->found = 1;
    out->top_score = top;
    out->top_tps = out->time_known ? top : 0;
    out->strategy = w->k;
    out->train = w->best.t;
    plan_memory(m, &out->train, c, out->strategy, &out->mem);
    plan_comm(m, &out->train, c, out->strategy, &out->comm);
    out->comm_s = out->comm.seconds + out->comm.host_seconds;
    plan_sim(m, &out->train, c, out->strategy, 0, &out->time);
    int ru = -1;   /* runner-up: the best setup of another strategy/offload group */
    for (int i = 0; i < n_opts; i++)
        if (opts[i].best.ok && (opts[i].k != w->k || opts[i].off != w->off) &&
            (ru < 0 || opts[i].best.score > opts[ru].best.score)) ru = i;
    if (ru >= 0) {
        out->runner_found = 1;
        out->runner = opts[ru].k;
        out->runner_train = opts[ru].best.t;
        out->runner_tps = opts[ru].best.tps;
        out->runner_comm_s = opts[ru].best.comm_s;
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
        const DsKnobs *u = &r->train.ds;   /* what the user set, beside DeepSpeed's defaults */
        DsKnobs k = plan_ds_knobs(&r->train);
        cJSON_AddNumberToObject(z, "reduce_bucket_size", (double)(int64_t)k.reduce_bucket);
        cJSON_AddBoolToObject(z, "overlap_comm", u->overlap_comm ? u->overlap_comm == 1 : stage == 3);
        cJSON_AddBoolToObject(z, "contiguous_gradients", 1);
        if (stage == 3) {
            static const struct { const char *key; size_t off; } S3[] = {
                {"stage3_prefetch_bucket_size", offsetof(DsKnobs, prefetch)},
                {"stage3_max_live_parameters", offsetof(DsKnobs, max_live)},
                {"stage3_max_reuse_distance", offsetof(DsKnobs, max_reuse)},
                {"stage3_param_persistence_threshold", offsetof(DsKnobs, persist)},
            };
            for (size_t i = 0; i < sizeof S3 / sizeof S3[0]; i++)
                if (*(const double *)((const char *)u + S3[i].off) > 0)
                    cJSON_AddNumberToObject(z, S3[i].key, (double)(int64_t) * (const double *)((const char *)&k + S3[i].off));
        }
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
        if (p->master_bytes == 0 && p->peak == PEAK_BF16 && stage > 0) {
            /* pure bf16: no fp32 master, bf16 Adam moments (precision_config.py; ZeRO 1-3 only,
               config.py); without these keys "bf16" alone is mixed-bf16 with an fp32 master */
            cJSON_AddBoolToObject(d, "bf16_master_weights_and_grads", 1);
            cJSON_AddBoolToObject(d, "bf16_optimizer_states", 1);
        }
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
    char tm[96];
    if (r->time_known) snprintf(tm, sizeof tm, "step %.1f ms, %.0f tokens/s", r->time.step_s * 1e3, r->time.tokens_per_s);
    else snprintf(tm, sizeof tm, "communication %.1f ms per step (step time not known)", r->comm_s * 1e3);
    fprintf(f, "# memplan prediction for %s: peak %s per GPU (headroom %s), host %s per node; %s on %lld x %s\n",
            plan_auto_setup_name(r->strategy, &r->train, nm, sizeof(nm)),
            plan_fmt_bytes(r->mem.peak, a1, sizeof(a1)), plan_fmt_bytes(r->mem.headroom, a2, sizeof(a2)),
            plan_fmt_bytes(r->mem.host_per_node, a3, sizeof(a3)), tm, (long long)c->gpus, c->gpu.name);
    if (!plan_strategy_is_deepspeed(r->strategy))
        fprintf(f, "# the pick is %s (PyTorch); this config is the ZeRO stage that shards the same state, "
                "and memplan's figures above are for %s (--emit torch for its snippet)\n",
                plan_strategy(r->strategy)->name, plan_strategy(r->strategy)->name);
}

/* The Hugging Face transformer block class of each family (ModelSpec.family, the config's
   model_type; the zoo's by their family too). */
static const struct { const char *family, *module, *cls; } BLOCKS[] = {
    {"gpt2", "gpt2", "GPT2Block"}, {"llama", "llama", "LlamaDecoderLayer"},
    {"mistral", "mistral", "MistralDecoderLayer"}, {"qwen2", "qwen2", "Qwen2DecoderLayer"},
    {"gemma", "gemma", "GemmaDecoderLayer"}, {"gpt_neox", "gpt_neox", "GPTNeoXLayer"},
    {"opt", "opt", "OPTDecoderLayer"}, {"bert", "bert", "BertLayer"}, {"t5", "t5", "T5Block"},
    {"qwen3", "qwen3", "Qwen3DecoderLayer"}, {"gemma2", "gemma2", "Gemma2DecoderLayer"},
    {"gemma3_text", "gemma3", "Gemma3DecoderLayer"}, {"phi3", "phi3", "Phi3DecoderLayer"},
    {"olmo2", "olmo2", "Olmo2DecoderLayer"}, {"granite", "granite", "GraniteDecoderLayer"},
    {"smollm3", "smollm3", "SmolLM3DecoderLayer"}, {"starcoder2", "starcoder2", "Starcoder2DecoderLayer"},
    {"mixtral", "mixtral", "MixtralDecoderLayer"}, {"qwen2_moe", "qwen2_moe", "Qwen2MoeDecoderLayer"},
    {"qwen3_moe", "qwen3_moe", "Qwen3MoeDecoderLayer"}, {"deepseek_v3", "deepseek_v3", "DeepseekV3DecoderLayer"},
    {"gpt_oss", "gpt_oss", "GptOssDecoderLayer"}, {"llama4_text", "llama4", "Llama4TextDecoderLayer"},
};

/* Activation checkpointing before wrapping: a Hugging Face model's own switch for full
   checkpointing, else checkpoint_wrapper on the blocks it covers (every block, or blocks N, 2N,
   ...; plan_act_checkpointed). */
static void torch_ckpt(FILE *f, const TrainSpec *t, const char *blk, int hf) {
    if (t->act_ckpt == CKPT_NONE) return;
    if (t->act_ckpt == CKPT_SELECTIVE) {   /* the attention function transformers calls, checkpointed */
        fprintf(f, "import importlib\n"
                   "from torch.utils.checkpoint import checkpoint\n"
                   "from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS\n"
                   "def _core(orig):  # act-ckpt selective: Megatron's core-attention recompute\n"
                   "    def f(module, q, k, v, mask, **kw):\n"
                   "        return checkpoint(lambda q, k, v, mask: orig(module, q, k, v, mask, **kw)[0], q, k, v, mask,\n"
                   "                          use_reentrant=False), None\n"
                   "    return f\n"
                   "_mod = importlib.import_module(%s.__module__)\n"
                   "_mod.eager_attention_forward = _core(_mod.eager_attention_forward)\n"
                   "ALL_ATTENTION_FUNCTIONS[\"sdpa\"] = _core(ALL_ATTENTION_FUNCTIONS[\"sdpa\"])\n", blk);
        return;
    }
    if (t->act_ckpt == CKPT_OP) {   /* torchtitan's SelectiveAC policy (plan_act_proj_saved) */
        fprintf(f, "from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import (\n"
                   "    apply_activation_checkpointing, checkpoint_wrapper, CheckpointImpl)\n"
                   "from torch.utils.checkpoint import CheckpointPolicy, create_selective_checkpoint_contexts\n"
                   "from torch._functorch.partitioners import get_default_op_list\n"
                   "def _op_policy():  # torchtitan/distributed/activation_checkpoint.py SelectiveAC\n"
                   "    aten = torch.ops.aten\n"
                   "    save = {o.default for o in get_default_op_list().compute_intensive_ops} | {\n"
                   "        aten._scaled_dot_product_cudnn_attention.default, aten._scaled_dot_product_attention_math.default,\n"
                   "        aten._scaled_dot_product_fused_attention_overrideable.default, aten.max.default,\n"
                   "        aten.linear.default, aten.topk.default}\n"
                   "    mm, n = (aten.mm.default, aten.linear.default), {False: 0, True: 0}\n"
                   "    def policy(ctx, func, *args, **kwargs):  # every second mm recomputed\n"
                   "        n[ctx.is_recompute] += func in mm\n"
                   "        if func in save and not (func in mm and n[ctx.is_recompute] %% 2 == 0):\n"
                   "            return CheckpointPolicy.MUST_SAVE\n"
                   "        return CheckpointPolicy.PREFER_RECOMPUTE\n"
                   "    return policy\n"
                   "apply_activation_checkpointing(model, checkpoint_wrapper_fn=functools.partial(\n"
                   "    checkpoint_wrapper, checkpoint_impl=CheckpointImpl.NO_REENTRANT,\n"
                   "    context_fn=lambda: create_selective_checkpoint_contexts(_op_policy())),\n"
                   "    check_fn=lambda m: isinstance(m, %s))  # act-ckpt op\n", blk);
        return;
    }
    if (t->act_ckpt == CKPT_FULL && hf) {
        fprintf(f, "model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={\"use_reentrant\": False})  # act-ckpt full\n");
        return;
    }
    fprintf(f, "from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import (\n"
               "    apply_activation_checkpointing, checkpoint_wrapper, CheckpointImpl)\n");
    int every = t->act_ckpt == CKPT_EVERY && t->ckpt_every > 1;
    if (every)
        fprintf(f, "ckpt = {id(b) for i, b in enumerate(m for m in model.modules() if isinstance(m, %s)) if (i + 1) %% %d == 0}\n",
                blk, t->ckpt_every);
    fprintf(f, "apply_activation_checkpointing(model, checkpoint_wrapper_fn=functools.partial(\n"
               "    checkpoint_wrapper, checkpoint_impl=CheckpointImpl.NO_REENTRANT),\n"
               "    check_fn=lambda m: %s%s%s)  # act-ckpt %s\n",
            every ? "id(m) in ckpt" : "isinstance(m, ", every ? "" : blk, every ? "" : ")",
            every ? "every:N (blocks N, 2N, ...)" : "full");
}

/* FSDP2 (fully_shard), what memplan plans by default (--fsdp 2): each block, then the root (at
   its default reshard_after_forward, as plan_fsdp.c models it); the mesh is 2-D for
   HYBRID_SHARD (replicate across nodes, shard inside one); MixedPrecisionPolicy(param bf16/fp16,
   reduce fp32) over fp32 shards for the fp32-master regimes; CPUOffloadPolicy for param offload. */
static void torch_fsdp2(FILE *f, const ClusterSpec *c, const AutoResult *r, const char *blk, const char *dt) {
    const PrecisionSpec *p = plan_precision(r->train.precision);
    int64_t nodes = plan_cluster_nodes(c);
    fprintf(f, "from torch.distributed.fsdp import fully_shard%s%s\n"
               "from torch.distributed.device_mesh import init_device_mesh\n",
            p->master_bytes > 0 ? ", MixedPrecisionPolicy" : "", r->train.offload == OFFLOAD_PARAM ? ", CPUOffloadPolicy" : "");
    if (r->strategy == STRAT_FSDP_HYBRID && nodes > 1)
        fprintf(f, "mesh = init_device_mesh(\"cuda\", (%lld, %lld), mesh_dim_names=(\"replicate\", \"shard\"))  # HYBRID_SHARD\n",
                (long long)nodes, (long long)c->gpus_per_node);
    else if (plan_tp_degree(&r->train) > 1)   /* the dp dimension of torch_tp's 2-D mesh */
        fprintf(f, "mesh = mesh2d[\"dp\"]\n");
    else
        fprintf(f, "mesh = init_device_mesh(\"cuda\", (%lld,))\n", (long long)c->gpus);
    fprintf(f, "kw = dict(mesh=mesh");
    if (p->master_bytes > 0)   /* fp32 shards as the master weights, 16-bit gathers, fp32 reductions */
        fprintf(f, ", mp_policy=MixedPrecisionPolicy(param_dtype=%s, reduce_dtype=torch.float32)", dt);
    if (r->train.offload == OFFLOAD_PARAM) fprintf(f, ", offload_policy=CPUOffloadPolicy()");
    fprintf(f, ")\n");
    fprintf(f, "for block in [m for m in model.modules() if isinstance(m, %s)]:\n"
               "    fully_shard(block, reshard_after_forward=%s, **kw)%s\n"
               "fully_shard(model, **kw)  # the root: kept unsharded from forward to backward\n",
            blk, r->strategy == STRAT_FSDP_GRAD_OP ? "False" : "True",
            r->strategy == STRAT_FSDP_GRAD_OP ? "  # SHARD_GRAD_OP" : "");
    if (r->train.grad_accum > 1 && r->train.fsdp_grad_sync == FSDP_SYNC_LAST)
        fprintf(f, "# each micro-step: model.set_requires_gradient_sync(is_last_micro_step)  # --fsdp-grad-sync last\n");
}

/* Tensor parallel (--tp): the 2-D mesh and the parallelize_module plan memplan plans
   (docs/formulas.md "Tensor and sequence parallel"), on Hugging Face's module names: LLaMA-style
   models (torchtitan's plan) or GPT-2 (its Conv1D as nn.Linear first). */
static void torch_tp(FILE *f, const ModelSpec *m, const ClusterSpec *c, const AutoResult *r) {
    static const char *const LLAMA_NAMES[] = {"llama", "mistral", "qwen2", "qwen3", "gemma", "granite", "smollm3"};
    int tp = plan_tp_degree(&r->train), sp = r->train.sp != 0, gpt2 = strcmp(m->family, "gpt2") == 0, llama = 0;
    for (size_t i = 0; i < sizeof LLAMA_NAMES / sizeof LLAMA_NAMES[0]; i++) llama |= strcmp(m->family, LLAMA_NAMES[i]) == 0;
    const char *stream = sp ? "Shard(1)" : "Replicate()", *local = sp ? ", use_local_output=False" : "";
    fprintf(f, "# tensor parallel %d x data parallel %lld on a 2-D mesh; sequence parallel %s\n", tp,
            (long long)(c->gpus / tp), sp ? "on" : "off");
    fprintf(f, "from torch.distributed.device_mesh import init_device_mesh\n"
               "from torch.distributed.tensor import Replicate, Shard\n"
               "from torch.distributed.tensor.parallel import (ColwiseParallel, PrepareModuleInput, PrepareModuleOutput,\n"
               "    RowwiseParallel, SequenceParallel, parallelize_module)\n");
    fprintf(f, "mesh2d = init_device_mesh(\"cuda\", (%lld, %d), mesh_dim_names=(\"dp\", \"tp\"))\n",
            (long long)(c->gpus / tp), tp);
    if (!gpt2 && !llama) {
        fprintf(f, "# %s: apply the same split to its modules (q, k, v and the MLP's first linear(s) ColwiseParallel,\n"
                   "# the attention output and the MLP's last linear RowwiseParallel%s); memplan emits module names for\n"
                   "# GPT-2 and LLaMA-style families only\n", m->family[0] ? m->family : m->name,
                sp ? ", the norms SequenceParallel" : "");
    } else if (gpt2) {
        fprintf(f, "# GPT-2: convert every block's Conv1D to nn.Linear (weight transposed), reorder c_attn's rows so each\n"
                   "# rank's shard holds its heads' q, k, v, and set attn.split_size = n_embd // %d\n"
                   "#   (bench/torch/harness.py _gpt2_conv1d_to_linear); the tied embedding and head stay replicated\n", tp);
        if (sp)
            fprintf(f, "parallelize_module(model, mesh2d[\"tp\"], {\"transformer.drop\": PrepareModuleOutput("
                       "output_layouts=Replicate(), desired_output_layouts=Shard(1), use_local_output=False),\n"
                       "    \"transformer.ln_f\": SequenceParallel(), \"lm_head\": PrepareModuleInput("
                       "input_layouts=(Shard(1),), desired_input_layouts=(Replicate(),), use_local_output=True)})\n");
        fprintf(f, "for block in model.transformer.h:\n"
                   "    parallelize_module(block, mesh2d[\"tp\"], {\n"
                   "        \"attn\": PrepareModuleInput(input_layouts=(%s,), desired_input_layouts=(Replicate(),)),\n"
                   "        \"mlp\": PrepareModuleInput(input_layouts=(%s,), desired_input_layouts=(Replicate(),)),\n"
                   "        \"attn.c_attn\": ColwiseParallel(), \"mlp.c_fc\": ColwiseParallel(),\n"
                   "        \"attn.c_proj\": RowwiseParallel(output_layouts=%s%s),\n"
                   "        \"mlp.c_proj\": RowwiseParallel(output_layouts=%s%s),%s})\n",
                stream, stream, stream, local, stream, local,
                sp ? "\n        \"ln_1\": SequenceParallel(), \"ln_2\": SequenceParallel()," : "");
    } else {
        if (plan_tp_root_sharded(m))
            fprintf(f, "parallelize_module(model, mesh2d[\"tp\"], {\n"
                       "    \"model.embed_tokens\": RowwiseParallel(input_layouts=Replicate(), output_layouts=%s%s),\n"
                       "    \"lm_head\": ColwiseParallel(input_layouts=%s, output_layouts=Replicate()),%s})\n",
                    stream, local, stream, sp ? "\n    \"model.norm\": SequenceParallel()," : "");
        else if (sp)   /* a tied embedding and head stay replicated: slice to and gather from the shards */
            fprintf(f, "parallelize_module(model, mesh2d[\"tp\"], {\"model.embed_tokens\": PrepareModuleOutput("
                       "output_layouts=Replicate(), desired_output_layouts=Shard(1), use_local_output=False),\n"
                       "    \"model.norm\": SequenceParallel(), \"lm_head\": PrepareModuleInput("
                       "input_layouts=(Shard(1),), desired_input_layouts=(Replicate(),), use_local_output=True)})\n");
        fprintf(f, "for block in model.model.layers:\n"
                   "    parallelize_module(block, mesh2d[\"tp\"], {\n"
                   "        \"self_attn\": PrepareModuleInput(input_kwarg_layouts={\"hidden_states\": %s},\n"
                   "                                        desired_input_kwarg_layouts={\"hidden_states\": Replicate()}),\n"
                   "        \"mlp\": PrepareModuleInput(input_layouts=(%s,), desired_input_layouts=(Replicate(),)),\n"
                   "        \"self_attn.q_proj\": ColwiseParallel(), \"self_attn.k_proj\": ColwiseParallel(),\n"
                   "        \"self_attn.v_proj\": ColwiseParallel(), \"mlp.gate_proj\": ColwiseParallel(),\n"
                   "        \"mlp.up_proj\": ColwiseParallel(),\n"
                   "        \"self_attn.o_proj\": RowwiseParallel(output_layouts=%s%s),\n"
                   "        \"mlp.down_proj\": RowwiseParallel(output_layouts=%s%s),%s})\n",
                stream, stream, stream, local, stream, local,
                sp ? "\n        \"input_layernorm\": SequenceParallel(), \"post_attention_layernorm\": SequenceParallel()," : "");
    }
    fprintf(f, "# torch.optim.AdamW(foreach=True) refuses lists that mix DTensors and plain tensors: give the\n"
               "# replicated plain parameters a parameter group of their own (or fully_shard them, below)\n");
}

/* FSDP1 (FullyShardedDataParallel, --fsdp 1): the flat-parameter wrapper with auto-wrap. */
static void torch_fsdp1(FILE *f, const AutoResult *r, const char *blk, const char *dt) {
    const PrecisionSpec *p = plan_precision(r->train.precision);
    const char *ss = r->strategy == STRAT_FSDP_FULL ? "FULL_SHARD" : r->strategy == STRAT_FSDP_GRAD_OP ? "SHARD_GRAD_OP" : "HYBRID_SHARD";
    const FsdpKnobs *k = &r->train.fsdp1;
    static const char *const BWD[] = {"BackwardPrefetch.BACKWARD_PRE", "BackwardPrefetch.BACKWARD_POST", "None"};
    fprintf(f, "from torch.distributed.fsdp import FullyShardedDataParallel as FSDP, ShardingStrategy, MixedPrecision, CPUOffload%s\n"
               "from torch.distributed.fsdp.wrap import %s\n",
            k->bwd == FSDP_BWD_POST ? ", BackwardPrefetch" : "",
            k->min_params > 0 ? "size_based_auto_wrap_policy" : "transformer_auto_wrap_policy");
    if (k->min_params > 0)
        fprintf(f, "model = FSDP(model, sharding_strategy=ShardingStrategy.%s,\n"
                   "             auto_wrap_policy=functools.partial(size_based_auto_wrap_policy, min_num_params=%.0f),\n",
                ss, k->min_params);
    else
        fprintf(f, "model = FSDP(model, sharding_strategy=ShardingStrategy.%s,\n"
                   "             auto_wrap_policy=functools.partial(transformer_auto_wrap_policy, transformer_layer_cls={%s}),\n",
                ss, blk);
    if (k->bwd != FSDP_BWD_PRE) fprintf(f, "             backward_prefetch=%s,\n", BWD[k->bwd]);
    if (k->fwd) fprintf(f, "             forward_prefetch=True,\n");
    if (p->master_bytes > 0)
        fprintf(f, "             mixed_precision=MixedPrecision(param_dtype=%s, reduce_dtype=%s, buffer_dtype=%s),\n", dt, dt, dt);
    if (r->train.offload == OFFLOAD_PARAM) fprintf(f, "             cpu_offload=CPUOffload(offload_params=True),\n");
    fprintf(f, "             device_id=local_rank, limit_all_gathers=%s, sync_module_states=True)"
               "  # load weights on rank 0 only\n", k->no_limit ? "False" : "True");
    if (r->train.grad_accum > 1 && r->train.fsdp_grad_sync == FSDP_SYNC_LAST)
        fprintf(f, "# non-final micro-steps under `with model.no_sync():`  # --fsdp-grad-sync last\n");
}

void plan_auto_finetune_code(FILE *f, const ModelSpec *m, const TrainSpec *t) {
    const FinetuneSpec *ft = &t->ft;
    if (ft->rank > 0) {
        char tg[160];
        plan_lora_targets(m, ft, tg, sizeof tg);
        if (ft->quant == QUANT_NF4 || ft->quant == QUANT_INT8)
            fprintf(f, "# --quant-base %s: load the base with from_pretrained(..., quantization_config=BitsAndBytesConfig(%s)) "
                    "and call peft.prepare_model_for_kbit_training(model) first\n", plan_quant_name(ft->quant),
                    ft->quant == QUANT_NF4 ? "load_in_4bit=True, bnb_4bit_quant_type=\"nf4\", bnb_4bit_use_double_quant=True, "
                                             "bnb_4bit_compute_dtype=torch.bfloat16" : "load_in_8bit=True");
        else if (ft->quant == QUANT_BF16)
            fprintf(f, "# --quant-base bf16: load the base with torch_dtype=torch.bfloat16\n");
        fprintf(f, "from peft import LoraConfig, get_peft_model\n");
        fprintf(f, "model = get_peft_model(model, LoraConfig(r=%d, lora_alpha=%g, lora_dropout=%g, target_modules=",
                ft->rank, ft->alpha, ft->dropout);
        if (strcmp(tg, "all-linear") == 0) fprintf(f, "\"all-linear\"");
        else {
            fputc('[', f);
            for (const char *p = tg; *p;) {
                const char *e = strchr(p, ',');
                int k = e ? (int)(e - p) : (int)strlen(p);
                fprintf(f, "%s\"%.*s\"", p == tg ? "" : ", ", k, p);
                p += k + (e ? 1 : 0);
            }
            fputc(']', f);
        }
        fprintf(f, "))  # --lora %d\n", ft->rank);
    } else if (ft->freeze == FREEZE_EMBEDDINGS) {
        fprintf(f, "model.get_input_embeddings().requires_grad_(False)  # --freeze embeddings\n");
    } else if (ft->freeze == FREEZE_ALL_BUT_LAST) {
        const char *blk = "BLOCK";
        for (size_t i = 0; i < sizeof(BLOCKS) / sizeof(BLOCKS[0]); i++)
            if (strcmp(m->family, BLOCKS[i].family) == 0) blk = BLOCKS[i].cls;
        fprintf(f, "# --freeze all-but-last:%d: train the last %d blocks and what follows them\n"
                   "blocks = [m for m in model.modules() if isinstance(m, %s)]\n"
                   "keep = {id(p) for b in blocks[-%d:] for p in b.parameters()}\n"
                   "last = {id(p) for p in blocks[-1].parameters()}; after = False\n"
                   "for _, p in model.named_parameters():\n"
                   "    after = after or id(p) in last\n"
                   "    if after and id(p) not in last: keep.add(id(p))\n"
                   "emb = {id(p) for p in model.get_input_embeddings().parameters()}\n"
                   "for p in model.parameters(): p.requires_grad_(id(p) in keep and id(p) not in emb)\n",
                ft->freeze_n, ft->freeze_n, blk, ft->freeze_n);
    }
}

void plan_auto_torch(FILE *f, const ModelSpec *m, const ClusterSpec *c, const AutoResult *r) {
    if (!r->found) { fprintf(f, "# nothing fits: no launch configuration\n"); return; }
    int64_t nodes = plan_cluster_nodes(c);
    fprintf(f, "torchrun --nnodes %lld --nproc-per-node %lld%s train.py --micro-batch %lld --grad-accum %lld\n",
            (long long)nodes, (long long)c->gpus_per_node,
            nodes > 1 ? " --rdzv-backend c10d --rdzv-endpoint $MASTER_ADDR:29500" : "",
            (long long)r->train.micro_batch, (long long)r->train.grad_accum);
    const PrecisionSpec *p = plan_precision(r->train.precision);
    const char *dt = p->peak == PEAK_BF16 ? "torch.bfloat16" : p->peak == PEAK_FP16 ? "torch.float16" : "torch.float32";
    const char *blk = "BLOCK", *mod = NULL;
    for (size_t i = 0; i < sizeof(BLOCKS) / sizeof(BLOCKS[0]); i++)
        if (strcmp(m->family, BLOCKS[i].family) == 0) { blk = BLOCKS[i].cls; mod = BLOCKS[i].module; break; }
    int transformer = m->arch == ARCH_DECODER || m->arch == ARCH_ENCODER || m->arch == ARCH_ENC_DEC;
    int bn = plan_model_bn_layers(m, NULL) > 0 && c->gpus > 1 && r->train.micro_batch < 16;
    int fsdp = r->strategy == STRAT_FSDP_FULL || r->strategy == STRAT_FSDP_GRAD_OP || r->strategy == STRAT_FSDP_HYBRID;
    int fsdp1 = fsdp && r->train.fsdp_impl == 1;
    fprintf(f, "# in train.py, after dist.init_process_group(\"nccl\") and torch.cuda.set_device(local_rank):\n");
    fprintf(f, "import functools, torch\n");
    if (mod && transformer) fprintf(f, "from transformers.models.%s.modeling_%s import %s\n", mod, mod, blk);
    else if (!strcmp(blk, "BLOCK")) fprintf(f, "BLOCK = ...  # your model's repeated block class (the unit of sharding and checkpointing)\n");
    if (bn) fprintf(f, "model = nn.SyncBatchNorm.convert_sync_batchnorm(model)  # before wrapping\n");
    if (p->master_bytes == 0 && p->param_bytes == 2)   /* pure 16-bit: params, grads and Adam states */
        fprintf(f, "model = model.to(%s)  # --precision %s\n", dt, p->name);
    plan_auto_finetune_code(f, m, &r->train);   /* the trainable subset, before wrapping */
    if (!fsdp1) torch_ckpt(f, &r->train, blk, mod && transformer);   /* before sharding */
    if (plan_tp_degree(&r->train) > 1) torch_tp(f, m, c, r);
    switch (r->strategy) {
    case STRAT_DDP:
        if (plan_tp_degree(&r->train) > 1) {
            if (c->gpus > r->train.tp)
                fprintf(f, "from torch.nn.parallel import DistributedDataParallel as DDP\n"
                           "model = DDP(model, device_mesh=mesh2d[\"dp\"])  # DDP on the dp dimension (not checked on CPU ranks)\n");
            else
                fprintf(f, "# tp = GPUs: no data parallelism, no DDP wrapper\n");
            break;
        }
        fprintf(f, "from torch.nn.parallel import DistributedDataParallel as DDP\n");
        fprintf(f, "model = DDP(model.cuda(), device_ids=[local_rank], bucket_cap_mb=25%s)\n",
                r->train.grad_as_bucket_view ? ", gradient_as_bucket_view=True" : "");
        break;
    case STRAT_FSDP_FULL: case STRAT_FSDP_GRAD_OP: case STRAT_FSDP_HYBRID:
        if (fsdp1) {
            torch_fsdp1(f, r, blk, dt);
            torch_ckpt(f, &r->train, blk, 0);   /* FSDP1's recipe: on the wrapped model */
        } else {
            torch_fsdp2(f, c, r, blk, dt);
        }
        break;
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

/* --tp auto: auto once per tensor-parallel candidate (1; each divisor of the GPUs per node that
   plan_tp_check takes for ddp or fsdp-full, sequence parallel off and on unless t fixes it), the
   simpler first: a larger tp (and SP over no SP) is picked only when it is faster than the pick
   so far by more than near_frac, or the pick so far does not fit. docs/formulas.md "Auto mode". */
int plan_auto_tp(const ModelSpec *m, const TrainSpec *t, const ClusterSpec *c, const AutoSpec *a,
                 int sp_fixed, AutoResult *out) {
    AutoResult *cur = malloc(sizeof *cur);
    if (!cur) return -1;
    char lines[2048] = "";
    size_t n = 0;
    int have = 0;
    long cand = 0, eval = 0;
    const unsigned tp_ok = (1u << STRAT_DDP) | (1u << STRAT_FSDP_FULL);
    for (int64_t d = 1; d <= c->gpus_per_node; d++) {
        if (c->gpus_per_node % d) continue;
        for (int sp = 0; sp <= 1; sp++) {
            if (d == 1 && sp) continue;
            if (d > 1 && sp_fixed && sp != t->sp) continue;
            TrainSpec tt = *t;
            AutoSpec aa = *a;
            tt.tp = (int)d;
            tt.sp = d > 1 ? sp : 0;
            if (d > 1) {
                aa.strategies &= tp_ok;
                char msg[320];
                int any = 0;
                for (int k = 0; k < STRAT_COUNT; k++)
                    if ((aa.strategies & (1u << k)) && !plan_tp_check(m, &tt, c, (StrategyKind)k, msg, sizeof msg) &&
                        !plan_pp_check(m, &tt, c, (StrategyKind)k, msg, sizeof msg)) any = 1;
                if (!any) continue;
            }
            plan_auto(m, &tt, c, &aa, cur);
            cand += cur->candidates;
            eval += cur->evaluated;
            char label[32];
            snprintf(label, sizeof label, d > 1 ? "tp %lld sp %s" : "tp 1 (data parallel alone)", (long long)d,
                     tt.sp ? "on" : "off");
            if (!cur->found) {
                if (n < sizeof lines) n += (size_t)snprintf(lines + n, sizeof lines - n, "  %s: nothing fits\n", label);
                continue;
            }
            /* the pick's own score (plan_auto may keep a simpler setup just below its best) */
            double score = cur->time_known ? cur->time.tokens_per_s : 1 / cur->comm_s;
            double held = !have ? 0 : out->time_known ? out->time.tokens_per_s : 1 / out->comm_s;
            int better = !have || score > held * (1 + a->near_frac);
            if (n < sizeof lines)
                n += (size_t)snprintf(lines + n, sizeof lines - n, "  %s: %s, %.0f %s%s\n", label,
                                      plan_strategy(cur->strategy)->name, cur->time_known ? cur->time.tokens_per_s : cur->comm_s * 1e3,
                                      cur->time_known ? "tokens/s" : "ms of communication",
                                      !have ? "" : better ? " (faster by more than the margin: taken)"
                                      : score <= held ? " (slower: the simpler stays)"
                                                      : " (faster within the margin: the simpler stays)");
            if (better) { *out = *cur; have = 1; }
        }
    }
    if (!have) *out = *cur;   /* nothing fits anywhere: the last explanation (with its fixes) */
    out->candidates = cand;
    out->evaluated = eval;
    say(out, "tensor parallel searched (a larger tp or SP is taken only when faster by more than %.0f%%):\n%s",
        a->near_frac * 100, lines);
    free(cur);
    return 0;
}

/* --pp auto: auto (or --tp auto's search) once per pipeline degree: pp = 1 and each divisor of
   the model's blocks with tp x pp dividing the GPUs, 1F1B, the fewest micro-batches M >= pp the
   global batch allows (M = pp without one), ddp or fsdp-full. The simpler first: a larger pp is
   taken only when faster than the pick so far by more than near_frac (the bubble is in the
   simulated step), or the pick so far does not fit. docs/formulas.md "Auto mode". */
int plan_auto_pp(const ModelSpec *m, const TrainSpec *t, const ClusterSpec *c, const AutoSpec *a,
                 int sp_fixed, AutoResult *out) {
    AutoResult *cur = malloc(sizeof *cur);
    if (!cur) return -1;
    char lines[2048] = "";
    size_t n = 0;
    int have = 0, nb = plan_pp_blocks(m), tp_auto = t->tp < 0, pp1_fits = 0;
    long cand = 0, eval = 0;
    const unsigned pp_ok = (1u << STRAT_DDP) | (1u << STRAT_FSDP_FULL);
    int64_t tp_min = tp_auto ? 1 : plan_tp_degree(t);
    for (int pp = 1; pp <= (nb > 0 ? nb : 1); pp++) {
        if (nb > 0 && nb % pp) continue;
        if (c->gpus % (tp_min * pp)) continue;
        TrainSpec tt = *t;
        AutoSpec aa = *a;
        tt.pp = pp;
        tt.pp_schedule = PP_1F1B;
        char label[64];
        if (pp > 1) {
            int64_t M = pp, dp = c->gpus / (tp_min * pp);
            if (a->global_batch > 0) {   /* the fewest micro-batches >= pp that split the replica's share */
                int64_t per = a->global_batch % dp ? 0 : a->global_batch / dp;
                if (a->keep_batch) M = per % t->micro_batch ? 0 : per / t->micro_batch;
                else for (M = pp; M <= per && per % M; M++) {}
                if (M < pp || M > per) {
                    if (n < sizeof lines)
                        n += (size_t)snprintf(lines + n, sizeof lines - n, "  pp %d: --global-batch %lld does not split "
                                              "into %d or more micro-batches per replica\n", pp, (long long)a->global_batch, pp);
                    continue;
                }
            }
            tt.grad_accum = M;
            aa.keep_accum = 1;
            aa.strategies &= pp_ok;
            aa.offloads &= 1u << OFFLOAD_NONE;
            tt.offload = OFFLOAD_NONE;
            char msg[320] = "";
            int any = 0;
            for (int k = 0; k < STRAT_COUNT; k++)
                if ((aa.strategies & (1u << k)) && !plan_pp_check(m, &tt, c, (StrategyKind)k, msg, sizeof msg)) any = 1;
            if (!any) {
                if (n < sizeof lines) n += (size_t)snprintf(lines + n, sizeof lines - n, "  pp %d: %s\n", pp, msg);
                continue;
            }
            snprintf(label, sizeof label, "pp %d (1f1b, %lld micro-batches)", pp, (long long)M);
        } else {
            snprintf(label, sizeof label, "pp 1 (no pipeline)");
        }
        if (tp_auto) plan_auto_tp(m, &tt, c, &aa, sp_fixed, cur);
        else plan_auto(m, &tt, c, &aa, cur);
        cand += cur->candidates;
        eval += cur->evaluated;
        if (pp == 1) pp1_fits = cur->found;
        if (!cur->found) {
            if (n < sizeof lines) n += (size_t)snprintf(lines + n, sizeof lines - n, "  %s: nothing fits\n", label);
            if (!have) *out = *cur;
            continue;
        }
        double score = cur->time_known ? cur->time.tokens_per_s : 1 / cur->comm_s;
        double held = !have ? 0 : out->time_known ? out->time.tokens_per_s : 1 / out->comm_s;
        int better = !have || score > held * (1 + a->near_frac);
        if (n < sizeof lines)
            n += (size_t)snprintf(lines + n, sizeof lines - n, "  %s: %s tp %d, %.0f %s%s\n", label,
                                  plan_strategy(cur->strategy)->name, plan_tp_degree(&cur->train),
                                  cur->time_known ? cur->time.tokens_per_s : cur->comm_s * 1e3,
                                  cur->time_known ? "tokens/s" : "ms of communication",
                                  !have ? "" : better ? " (faster by more than the margin: taken)"
                                  : score <= held ? " (slower: the simpler stays)"
                                                  : " (faster within the margin: the simpler stays)");
        if (better) { *out = *cur; have = 1; }
    }
    out->candidates = cand;
    out->evaluated = eval;
    int picked = have ? plan_pp_degree(&out->train) : 0;
    say(out, "pipeline stages searched (1F1B; a larger pp is taken only when faster by more than %.0f%%, "
        "the bubble counted in the simulated step):\n%s", a->near_frac * 100, lines);
    if (picked > 1)
        say(out, "pp %d picked: %s\n", picked, pp1_fits ? "faster than every smaller pipeline degree by more than the margin"
                                                        : "without pipeline stages nothing fits the safety margin");
    else if (have)
        say(out, "pp 1 kept: no pipeline degree fits and runs faster by more than the margin\n");
    free(cur);
    return 0;
}
