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
#include "plan_dim_cp.h"
#include "plan_dim_pp.h"
#include "plan_dim_tp.h"
#include "plan_dim_ft.h"
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

const char *plan_auto_setup_name(StrategyKind k, const TrainSpec *t, char *buf, size_t len) {
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
    /* and over the pipeline stages, and the context-parallel ranks that share a sequence */
    return c->gpus / plan_tp_degree(t) / plan_pp_degree(t) / plan_cp_degree(t);
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

/* The setup's own step at micro-batch t->micro_batch: its simulated time, or (compute unknown)
   its communication. Returns the score (higher is better). below > 0 (time known): a step whose
   tokens/s cannot reach below (plan_sim_tokens_ceiling: its compute alone) is not
   simulated, and scores 0. */
static double setup_score(const ModelSpec *m, const TrainSpec *t, const ClusterSpec *c, StrategyKind k, int known,
                          double below, double *tps, double *comm_s) {
    Step st;
    if (known && below > 0) {   /* the compute rule's work alone, a subset of the whole build's */
        plan_step_build_for(&st, m, t, c, k, PLAN_STEP_TIME | PLAN_STEP_COMPUTE);
        double ceil = plan_sim_tokens_ceiling(&st);
        plan_step_free(&st);
        if (ceil < below) {
            *tps = *comm_s = 0;
            return 0;
        }
    }
    plan_step_build_for(&st, m, t, c, k, PLAN_STEP_TIME);   /* its work and collectives alone */
    SimResult s;
    plan_sim_step(&st, 0, &s);
    double comm = 0;
    if (!known) {
        CommPlan cp;
        plan_comm_step(&st, &cp);
        comm = cp.seconds + cp.host_seconds;
    }
    plan_step_free(&st);
    *tps = s.tokens_per_s;
    *comm_s = comm;
    return known ? s.tokens_per_s : 1 / (comm > 1e-9 ? comm : 1e-9);
}

/* The accumulation micro-batch b takes under the global batch (0: b does not divide it). */
static int64_t accum_for(const ClusterSpec *c, const TrainSpec *t, const AutoSpec *a, int64_t b) {
    if (a->global_batch <= 0) return t->grad_accum;
    int64_t per = a->global_batch / replicas(c, t);
    if (a->global_batch % replicas(c, t) || per % b) return 0;
    if (a->keep_accum && per / b != t->grad_accum) return 0;
    return per / b;
}

/* An upper bound on the score of setup t (checkpointing fixed) over the micro-batches lo..hi
   that fit: the best score over those whose tensors alone fit the capacity (no allocator share,
   no flat margin; the allocator's share is never negative, so a batch that fits with it fits
   without). Stops once it exceeds stop. *tb: the largest batch whose tensors fit (0: none).
   A batch whose score's ceiling is below stop is not simulated: its score is below stop too, so
   whether the bound exceeds stop, or reaches it, is the same as over every batch's score. */
static double tensor_bound(const ModelSpec *m, const TrainSpec *t, const ClusterSpec *c, StrategyKind k,
                           const AutoSpec *a, int64_t lo, int64_t hi, int known, double stop, int64_t *tb) {
    ClusterSpec bare = *c;
    bare.alloc_model = 0;
    bare.alloc_margin = 0;
    bare.margin_is_frac = 0;
    *tb = plan_max_micro_batch(m, t, &bare, k, hi);
    double bound = 0;
    for (int64_t b = *tb; b >= lo && bound <= stop; b--) {
        TrainSpec tt = *t;
        tt.micro_batch = b;
        if (!(tt.grad_accum = accum_for(c, t, a, b))) continue;
        double tps, comm, sc = setup_score(m, &tt, c, k, known, stop, &tps, &comm);
        if (sc > bound) bound = sc;
    }
    return bound;
}

/* Searches micro-batch, accumulation and checkpointing for strategy k at base's precision and
   offload. c is the cluster with the safety margin taken off the GPU's capacity.
   A checkpointing option after the first is searched only when it could win: its best score
   over the micro-batches whose tensors alone fit (a bound: the allocator's share is never
   negative, so a batch that fits with it fits without) must beat the best so far; else the
   allocator's max-batch search is not run for it (the best found is the same: an option whose
   every fitting batch scores at most the best so far never replaces it). bar > 0: the best
   score already found in this setup's group (another precision of the same strategy and
   offload), which the first checkpointing option too must beat; need_all: the first option's
   verdict over every micro-batch is read (fits_all, which prunes offload), known without the
   search only when the tensors alone do not fit at the largest. */
static Best search(const ModelSpec *m, const TrainSpec *base, const ClusterSpec *c, StrategyKind k,
                   const AutoSpec *a, double bar, int need_all, long *cand, long *evaluated) {
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
        double beat = best.ok && best.score > bar ? best.score : bar;
        if (beat > 0 && c->alloc_model && !a->exhaustive) {
            int64_t tb;
            double bound = tensor_bound(m, &t, c, k, a, lo, hi, known, beat * (1 + 1e-9), &tb);
            if (ci == 0 && need_all && tb >= hi) bound = INFINITY;   /* fits_all needs the search */
            if (bound <= beat * (1 + 1e-9)) {
                *cand += hi - lo + 1;
                if (ci == 0) best.fits_all = 0;   /* its tensors alone do not fit at hi */
                continue;
            }
        }
        int64_t maxb = plan_max_micro_batch(m, &t, c, k, hi);
        if (ci == 0) best.fits_all = maxb >= hi;
        for (int64_t b = lo; b <= hi; b++) {
            (*cand)++;
            if (b > maxb) continue;            /* known not to fit: the peak grows with b */
            t.micro_batch = b;
            int64_t acc = accum_for(c, &t, a, b);
            if (!acc) continue;
            t.grad_accum = acc;
            double tps, comm, score = setup_score(m, &t, c, k, known, 0, &tps, &comm);
            (*evaluated)++;
            if (!best.ok || score > best.score * (1 + 1e-9)) {
                best.ok = 1;
                best.t = t;
                best.score = score;
                best.tps = tps;
                best.comm_s = comm;
            }
        }
    }
    return best;
}

/* One searched option: a strategy with an offload (its group) at one precision regime. */
typedef struct {
    StrategyKind k;
    OffloadKind off;
    PrecisionKind prec;
    Best best;
    int deferred;            /* not searched: it could neither win nor be the runner-up (defer) */
} Option;

/* An upper bound on option base's best score over every checkpointing option (tensor_bound's),
   stopping once it exceeds stop; INFINITY when need_all and the tensors alone fit the largest
   micro-batch (whether everything fits then needs the search). */
static double option_bound(const ModelSpec *m, const TrainSpec *base, const ClusterSpec *c, StrategyKind k,
                           const AutoSpec *a, double stop, int need_all) {
    CkptKind cks[AUTO_CKPTS];
    int64_t every[AUTO_CKPTS], lo, hi, tb;
    int n_ck = ckpt_options(m, base, a, cks, every);
    batch_range(base, c, a, &lo, &hi);
    double bound = 0;
    for (int ci = 0; ci < n_ck && bound <= stop; ci++) {
        TrainSpec t = *base;
        t.act_ckpt = cks[ci];
        t.ckpt_every = every[ci];
        double b = tensor_bound(m, &t, c, k, a, lo, hi, plan_model_acts_known(m), stop, &tb);
        if (ci == 0 && need_all && tb >= hi) return INFINITY;
        if (b > bound) bound = b;
    }
    return bound;
}

/* The best score found so far in the group (strategy k with offload off) among opts[0..n); 0 none. */
static double group_best(const Option *opts, int n, StrategyKind k, OffloadKind off) {
    double best = 0;
    for (int q = 0; q < n; q++)
        if (opts[q].k == k && opts[q].off == off && opts[q].best.ok && opts[q].best.score > best) best = opts[q].best.score;
    return best;
}

/* Whether option i (of opts[0..n)) can be left unsearched for now (defer): with the allocator
   model, when its bound is below both the second best group (a strategy with an offload) other
   than its own and the near_frac window under the best so far, it is neither the fastest, nor
   within the window the pick chooses the simplest from, nor the runner-up (two other groups beat
   it). Its best is searched later only if a simpler group than the pick's is shown. */
static int defer(const ModelSpec *m, const TrainSpec *tb, const ClusterSpec *c, const AutoSpec *a,
                 const Option *opts, int i) {
    if (!c->alloc_model || a->exhaustive) return 0;
    double top = 0, g1 = 0, g2 = 0;   /* the best so far; the two best other groups' bests */
    for (int q = 0; q < i; q++) {
        if (!opts[q].best.ok) continue;
        double sc = opts[q].best.score;
        if (sc > top) top = sc;
        if (opts[q].k == opts[i].k && opts[q].off == opts[i].off) continue;
        if (group_best(opts, q, opts[q].k, opts[q].off) > 0) continue;   /* the group counted at its first */
        double gb = group_best(opts, i, opts[q].k, opts[q].off);
        if (gb > g1) { g2 = g1; g1 = gb; }
        else if (gb > g2) g2 = gb;
    }
    double limit = fmin(g2 * (1 - 1e-9), top * (1 - a->near_frac) * (1 - 1e-9));
    if (limit <= 0) return 0;
    return option_bound(m, tb, c, opts[i].k, a, limit, opts[i].off == OFFLOAD_NONE) < limit;
}

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
   an NF4 base, plan_dim_ft.c) fit this cluster as it is? Then it is named with its smallest peak, as
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
    if (plan_dims_setup(&q, &tq, err, sizeof err) == 0) {
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
                    MemResult r;   /* the peak planned only where the verdict (plan_memory_fits: the same) fits */
                    if (plan_memory_fits(&q, &t, &cm, (StrategyKind)k) && plan_memory(&q, &t, &cm, (StrategyKind)k, &r) == 0 &&
                        r.fits && (best < 0 || r.peak < best))
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
    if (a->no_why) return;   /* not read (AutoSpec.no_why) */
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
                    op->deferred = 0;
                    out->candidates += search_size(m, &tb, cm, a);
                    continue;
                }
                op->deferred = 0;
                if (defer(m, &tb, cm, a, opts, n_opts - 1)) {
                    memset(&op->best, 0, sizeof(op->best));
                    op->deferred = 1;
                    out->candidates += search_size(m, &tb, cm, a);
                    continue;
                }
                double bar = group_best(opts, n_opts - 1, op->k, op->off);   /* another precision's */
                op->best = search(m, &tb, cm, op->k, a, bar, o == OFFLOAD_NONE, &out->candidates, &out->evaluated);
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
        : plan_cp_degree(&out->train) > 1 ? "data-parallel replicas (gpus / (tp x cp))"
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
    int cw = complexity(opts[win].k, opts[win].off);
    for (int i = 0; i < n_opts; i++) {   /* the deferred ones the explanation shows: simpler groups */
        if (!opts[i].deferred || complexity(opts[i].k, opts[i].off) >= cw) continue;
        TrainSpec tb = base;
        tb.offload = opts[i].off;
        tb.precision = opts[i].prec;
        long cand = 0;
        opts[i].best = search(m, &tb, &cm, opts[i].k, a, 0, 0, &cand, &out->evaluated);
        opts[i].deferred = 0;
    }
    const Option *w = &opts[win];
    out->found = 1;
    out->top_score = top;
    out->top_tps = out->time_known ? top : 0;
    out->strategy = w->k;
    out->train = w->best.t;
    Step st;   /* the pick's step, read by its memory, collectives and time */
    plan_step_build(&st, m, &out->train, c, out->strategy);
    plan_memory_step(&st, c, &out->mem, NULL, NULL, 0);
    plan_comm_step(&st, &out->comm);
    out->comm_s = out->comm.seconds + out->comm.host_seconds;
    plan_sim_step(&st, 0, &out->time);
    plan_step_free(&st);
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

int plan_auto_any_strategy(const ModelSpec *m, const TrainSpec *t, const ClusterSpec *c, unsigned strategies,
                           char *msg, size_t len) {
    char buf[320];
    if (!msg) { msg = buf; len = sizeof buf; }
    for (int k = 0; k < STRAT_COUNT; k++)
        if ((strategies & (1u << k)) && !plan_dims_check(m, t, c, (StrategyKind)k, msg, len)) return 1;
    return 0;
}

/* The setups' score: tokens/s, or 1 / communication seconds when the compute is not known. */
static double score_of(const AutoResult *r) { return r->time_known ? r->time.tokens_per_s : 1 / r->comm_s; }

/* auto below dimension `from` of the table (the dimensions searched run from the last to the
   first: pp outside tp): the next dimension whose degree is searched offers its settings, the
   simplest first; each is searched with the dimensions inside it, and a later one is taken only
   when it is faster than the pick so far by more than near_frac, or the pick so far does not
   fit. docs/formulas.md "Auto mode". */
static int auto_from(const ModelSpec *m, const TrainSpec *t, const ClusterSpec *c, const AutoSpec *a, int from,
                     AutoResult *out) {
    int d = from - 1;
    while (d >= 0 && !(plan_dim(d)->auto_on && plan_dim(d)->auto_on(t))) d--;
    if (d < 0) return plan_auto(m, t, c, a, out);
    const PlanDim *D = plan_dim(d);
    enum { MAX_SETTINGS = 64 };
    DimSetting *set = malloc(sizeof *set * MAX_SETTINGS);
    AutoResult *cur = calloc(1, sizeof *cur);
    if (!set || !cur) { free(set); free(cur); return -1; }
    int n = D->settings(m, t, c, a, set, MAX_SETTINGS);
    char lines[2048] = "", what[96];
    size_t nl = 0;
    int have = 0, first_found = 0, rc = 0;
    long cand = 0, eval = 0;
    for (int i = 0; i < n && !rc; i++) {
        if (set[i].skip[0]) {
            if (nl < sizeof lines) nl += (size_t)snprintf(lines + nl, sizeof lines - nl, "  %s\n", set[i].skip);
            continue;
        }
        AutoSpec aa = *a;
        aa.strategies = set[i].strategies;
        aa.offloads = set[i].offloads;
        aa.keep_accum = set[i].keep_accum;
        rc = auto_from(m, &set[i].t, c, &aa, d, cur);
        cand += cur->candidates;
        eval += cur->evaluated;
        if (i == 0) first_found = cur->found;
        if (!cur->found) {
            if (nl < sizeof lines) nl += (size_t)snprintf(lines + nl, sizeof lines - nl, "  %s: nothing fits\n", set[i].label);
            if (!have) *out = *cur;   /* nothing fits anywhere: the last explanation (with its fixes) */
            continue;
        }
        /* the pick's own score (plan_auto may keep a simpler setup just below its best) */
        double score = score_of(cur), held = have ? score_of(out) : 0;
        int better = !have || score > held * (1 + a->near_frac);
        D->describe(what, sizeof what, cur->strategy, &cur->train);
        if (nl < sizeof lines)
            nl += (size_t)snprintf(lines + nl, sizeof lines - nl, "  %s: %s, %.0f %s%s\n", set[i].label, what,
                                   cur->time_known ? cur->time.tokens_per_s : cur->comm_s * 1e3,
                                   cur->time_known ? "tokens/s" : "ms of communication",
                                   !have ? "" : better ? " (faster by more than the margin: taken)"
                                   : score <= held ? " (slower: the simpler stays)"
                                                   : " (faster within the margin: the simpler stays)");
        if (better) { *out = *cur; have = 1; }
    }
    if (n == 0) rc = plan_auto(m, t, c, a, out);   /* no setting to try: as given */
    out->candidates = cand;
    out->evaluated = eval;
    say(out, D->search_title, a->near_frac * 100);
    say(out, "%s", lines);
    if (D->summary) {
        char line[256];
        D->summary(line, sizeof line, have, &out->train, first_found);
        if (line[0]) say(out, "%s", line);
    }
    free(set);
    free(cur);
    return rc;
}

int plan_auto_dims(const ModelSpec *m, const TrainSpec *t, const ClusterSpec *c, const AutoSpec *a,
                   AutoResult *out) {
    return auto_from(m, t, c, a, plan_dim_count(), out);
}

/* No row leaves the margin: why, and what would change it. */
static void recommend_none(const ClusterSpec *c, const TrainSpec *t, const AutoResult *r, Plan *p) {
    char a[32], b[32], d[32];
    int fit = -1, li = 0, hi = -1;   /* the most headroom among rows that fit without the margin; the
                                        smallest GPU peak; the least host memory among GPU fits */
    for (int i = 0; i < p->n_rows; i++) {
        const MemResult *x = &p->rows[i].mem;
        if (x->fits && (fit < 0 || x->headroom > p->rows[fit].mem.headroom)) fit = i;
        if (x->peak < p->rows[li].mem.peak) li = i;
        if (x->gpu_fits && (hi < 0 || x->host_per_node < p->rows[hi].mem.host_per_node)) hi = i;
    }
    if (fit >= 0) {
        const StrategyPlan *f = &p->rows[fit];
        snprintf(p->reason, sizeof p->reason,
                 "no strategy leaves the %s safety margin: %s fits with only %s headroom (peak %s of %s), too "
                 "little for the allocator's fragmentation and the framework's extras (--min-headroom to accept "
                 "less)%s%.400s", plan_fmt_bytes(r->margin, a, sizeof a), plan_strategy(f->kind)->name,
                 plan_fmt_bytes(f->mem.headroom, b, sizeof b), plan_fmt_bytes(f->mem.peak, d, sizeof d),
                 plan_fmt_bytes(c->gpu.mem_bytes, (char[32]){0}, 32), r->fix[0] ? "; would fit with: " : "", r->fix);
    } else if (hi >= 0) {   /* the GPUs fit: host memory is the cause */
        const StrategyPlan *h = &p->rows[hi];
        snprintf(p->reason, sizeof p->reason,
                 "nothing fits in host memory: %s fits the GPU (peak %s) but needs %s per node, %s available "
                 "(%s); give --host-mem %.0fGiB or more, %s, or more GPUs to shard over",
                 plan_strategy(h->kind)->name, plan_fmt_bytes(h->mem.peak, a, sizeof a),
                 plan_fmt_bytes(h->mem.host_per_node, b, sizeof b), plan_fmt_bytes(h->mem.host_capacity, d, sizeof d),
                 t->offload ? "CPU offload keeps its state in host memory" : "the load-time copies of the model",
                 ceil(h->mem.host_per_node / GIB), t->offload ? "less offload (--offload none, if the GPU then fits)" : "a smaller model");
    } else if (p->n_rows) {
        snprintf(p->reason, sizeof p->reason,
                 "nothing fits: the smallest peak is %s (%s) against %s per GPU; %s%.400s",
                 plan_fmt_bytes(p->rows[li].mem.peak, a, sizeof a), plan_strategy(p->rows[li].kind)->name,
                 plan_fmt_bytes(c->gpu.mem_bytes, b, sizeof b), r->fix[0] ? "would fit with: " : "use more GPUs, "
                 "--act-ckpt full, CPU offload (--offload), a smaller --batch/--seq, or a larger GPU", r->fix);
    }
}

void plan_auto_recommend(const ModelSpec *m, const TrainSpec *t, const ClusterSpec *c, const AutoSpec *rule, Plan *p) {
    AutoSpec a;
    if (rule) a = *rule;
    else plan_auto_defaults(&a);
    a.strategies = 0;
    for (int i = 0; i < p->n_rows; i++) a.strategies |= 1u << p->rows[i].kind;
    a.offloads = 1u << t->offload;   /* what the setup fixes is kept: nothing but the strategy is searched */
    a.precisions = 0;
    a.global_batch = 0;
    a.keep_batch = a.keep_ckpt = a.keep_accum = 1;
    a.sp_fixed = 1;
    a.no_why = 1;   /* the reason reads the pick and the fix, not the explanation's lines */
    p->recommended = -1;
    p->reason[0] = 0;
    p->margin = plan_auto_margin(&a, c->gpu.mem_bytes);
    AutoResult *r = calloc(1, sizeof *r);
    if (!r) { snprintf(p->reason, sizeof p->reason, "out of memory choosing a strategy"); return; }
    if (t->tp < 0 || t->pp < 0 || t->ep < 0 || plan_auto_dims(m, t, c, &a, r) || !r->found) {
        recommend_none(c, t, r, p);
        free(r);
        return;
    }
    for (int i = 0; i < p->n_rows; i++) if (p->rows[i].kind == r->strategy) p->recommended = i;
    const StrategyPlan *w = p->recommended >= 0 ? &p->rows[p->recommended] : NULL;
    char a1[32], a2[32], a3[32], rate[96];
    const char *unit = m->arch == ARCH_CNN ? "samples" : "tokens";
    if (r->time_known) snprintf(rate, sizeof rate, "%.0f %s/s", r->time.tokens_per_s, unit);
    else snprintf(rate, sizeof rate, "%.1f ms of communication per step", r->comm_s * 1e3);
    double score = r->time_known ? r->time.tokens_per_s : 1 / r->comm_s;
    int fastest = score >= r->top_score * (1 - 1e-9);
    char near[64];
    snprintf(near, sizeof near, ", within %.0f%% of the fastest and simpler,", a.near_frac * 100);
    snprintf(p->reason, sizeof p->reason,
             "auto's rule over the strategies, the rest as given: %s%s%s among those that leave the %s safety "
             "margin; peak %s, headroom %s (memplan auto also searches micro-batch, checkpointing, precision and "
             "offload)", fastest ? (r->time_known ? "the fastest (" : "the least communication (") : "", rate,
             fastest ? ")" : near,
             plan_fmt_bytes(r->margin, a1, sizeof a1), plan_fmt_bytes(w ? w->mem.peak : r->mem.peak, a2, sizeof a2),
             plan_fmt_bytes(w ? w->mem.headroom : r->mem.headroom, a3, sizeof a3));
    free(r);
}
