/* plan_memory.c — see plan_memory.h and docs/formulas.md. */
#include "plan_memory.h"

#include <math.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>

#include "plan_dim_offload.h"
#include "plan_step.h"

static const char *const TERM_NAMES[TERM_COUNT] = {"params", "grads", "comm_buffers",
    "optimizer", "activations", "transient", "overhead"};

const char *plan_term_name(TermKind k) { return TERM_NAMES[k]; }

int plan_memory(const ModelSpec *m, const TrainSpec *t, const ClusterSpec *c, StrategyKind sk,
                MemResult *r) {
    return plan_memory_walk(m, t, c, sk, r, NULL, NULL);
}

/* The memory model is the step account's replay (plan_step.h): the rules say what is allocated
   and freed when, the replay finds the peak; host memory is the node's (plan_dim_offload.c). */
int plan_memory_step(const Step *st, const ClusterSpec *c, MemResult *r, MemMomentFn fn, void *ctx, int fits_only) {
    memset(r, 0, sizeof(*r));
    if (st->failed) {   /* not built (out of host memory, or refused): never "fits" */
        r->peak = HUGE_VAL;
        snprintf(r->peak_where, sizeof(r->peak_where), "%s", st->fail_where ? st->fail_where : "out of host memory");
        return st->status ? st->status : PLAN_ERR_NOMEM;
    }
    if (st->built_for & PLAN_STEP_TIME) {   /* a time-only build has no memory to plan */
        r->peak = HUGE_VAL;
        snprintf(r->peak_where, sizeof(r->peak_where), "a step built for its time only");
        return PLAN_ERR_REFUSED;
    }
    if (fits_only) {
        if (plan_step_replay_fits(st, c, r, fn, ctx)) {   /* the verdict alone */
            r->gpu_fits = r->fits = !r->alloc_oom && r->peak <= c->gpu.mem_bytes && st->host_fits;
            return PLAN_OK;
        }
    } else {
        plan_step_replay(st, c, r, fn, ctx);
    }
    /* with the allocator model the step fits when its replay at the GPU's limit does not run out
       (plan_step_alloc.c: the need is then within the limit); the headroom is the limit's */
    double cap = r->alloc_model ? r->alloc_limit + (r->cuda_context + r->cublas_ws + r->nccl) : c->gpu.mem_bytes;
    r->gpu_fits = r->peak <= cap && !r->alloc_oom;
    r->headroom = cap - r->peak;
    r->host_per_node = st->host_per_node;
    r->host_capacity = st->host_capacity;
    r->host_fits = st->host_fits;
    r->fits = r->gpu_fits && r->host_fits;
    return PLAN_OK;
}

static int walk(const ModelSpec *m, const TrainSpec *t, const ClusterSpec *c, StrategyKind sk,
                MemResult *r, MemMomentFn fn, void *ctx, int fits_only) {
    Step st;
    plan_step_build(&st, m, t, c, sk);
    int rc = plan_memory_step(&st, c, r, fn, ctx, fits_only);
    plan_step_free(&st);
    return rc;
}

int plan_memory_walk(const ModelSpec *m, const TrainSpec *t, const ClusterSpec *c, StrategyKind sk,
                     MemResult *r, MemMomentFn fn, void *ctx) {
    return walk(m, t, c, sk, r, fn, ctx, 0);
}

int plan_memory_walk_fits(const ModelSpec *m, const TrainSpec *t, const ClusterSpec *c, StrategyKind sk,
                          MemResult *r, MemMomentFn fn, void *ctx) {
    return walk(m, t, c, sk, r, fn, ctx, 1);
}

int plan_memory_fits(const ModelSpec *m, const TrainSpec *t, const ClusterSpec *c, StrategyKind sk) {
    MemResult r;
    walk(m, t, c, sk, &r, NULL, NULL, 1);
    return r.fits;
}

/* The largest micro-batch that fits, by probes: each probe is a step built at that micro-batch
   (its memory only: PLAN_STEP_MEMORY) and its memory model's verdict (plan_memory_step, fits
   only), so the answer is exactly what a plan at that batch says. Where to probe comes from the
   tensors alone: every moment's tensor total is affine in the micro-batch (activations, the loss
   and scratch scale with b, nothing else does), so the steps at two batches give each moment's
   a + s*b and the largest b that keeps them under the capacity. With a flat margin that is the
   answer (probed at it and above it, for rounding and for rules that are only piecewise affine);
   with the allocator model, whose share is never negative, it is an upper bound, and the answer
   lies at or below it: probed there, then galloping down and bisecting. The peak grows with b,
   so fits(b) falls once. The plan's own row (a step at its batch, its verdict known) is the
   first of the two. */
typedef struct {
    double *tot;
    int n, cap;
} Totals;

static void collect(void *ctx, PhaseKind ph, int layer, const double term[TERM_COUNT], double total) {
    (void)ph; (void)layer; (void)term;
    Totals *T = ctx;
    if (T->n < T->cap) T->tot[T->n] = total;
    T->n++;
}

#define PROBES 64
typedef struct {
    const ModelSpec *m;
    const TrainSpec *t;
    const ClusterSpec *c;
    StrategyKind s;
    int64_t b[PROBES];       /* probes made: batch, verdict */
    int fits[PROBES], n;
    Step kept;               /* the second batch's step, built for its totals, kept for its probe */
    int64_t kept_b;          /* its batch; 0 none */
    const Step *one;         /* the first batch's step (built for its totals, or the row's); NULL none */
} Probes;

static void remember(Probes *P, int64_t b, int fits) {
    if (P->n < PROBES) { P->b[P->n] = b; P->fits[P->n++] = fits; }
}

static int probe(Probes *P, int64_t b) {
    for (int i = 0; i < P->n; i++) if (P->b[i] == b) return P->fits[i];
    MemResult r;
    if (b == P->kept_b || (b == 1 && P->one)) {
        plan_memory_step(b == 1 && P->one ? P->one : &P->kept, P->c, &r, NULL, NULL, 1);
    } else {
        TrainSpec tt = *P->t;
        tt.micro_batch = b;
        Step st;
        plan_step_build_for(&st, P->m, &tt, P->c, P->s, PLAN_STEP_MEMORY);
        plan_memory_step(&st, P->c, &r, NULL, NULL, 1);
        plan_step_free(&st);
    }
    remember(P, b, r.fits);
    return r.fits;
}

/* The tensors (no allocator share, no margin; a flat margin kept, being affine too) per moment
   of step st into T. */
static int tensor_totals(const Probes *P, const Step *st, Totals *T) {
    ClusterSpec bare = *P->c;
    bare.alloc_model = 0;
    if (P->c->alloc_model) { bare.alloc_margin = 0; bare.margin_is_frac = 0; }
    MemResult r;
    return plan_memory_step(st, &bare, &r, collect, T, 0);
}

/* The affine bound from the moments' totals at batches b1 < b2 (ta, tb): the largest b whose
   every moment stays under the capacity; max_b when none grows. */
static int64_t affine_bound(const double *ta, const double *tb, int n, int64_t b1, int64_t b2, double cap, int64_t max_b) {
    int64_t ub = max_b;
    for (int k = 0; k < n; k++) {
        double slope = (tb[k] - ta[k]) / (double)(b2 - b1), base = ta[k] - slope * (double)b1;
        if (slope <= 0) continue;
        double bk = floor((cap - base) / slope);
        if (bk < (double)ub) ub = bk < 0 ? 0 : (int64_t)bk;
    }
    return ub;
}

/* The printed max micro-batch is the boundary this search finds: a batch b that fits with b + 1
   not fitting (0 when batch 1 does not fit), found by galloping from the affine bound of the
   tensor totals and bisecting; where fits(b) is monotone in b that is the largest batch that fits,
   otherwise one such boundary (docs/formulas.md "The max micro-batch"). The probe order depends
   only on the setup, never on the row's batch, whose verdict the search reads as a kept probe. */
static int64_t search(Probes *P, const Step *row, int64_t max_b) {
    int64_t lo = 0, hi = max_b + 1;   /* lo fits (0: trivially), hi does not (beyond the search) */
    int64_t b0 = row ? row->view.t.micro_batch : 0;
    /* the totals at batches 1 and 2 (the row's step where it is one of them): the affine bound,
       needed only where the search has a range (max_b > 1) */
    int cap = 4 * P->m->n_layers + 8;   /* forward per layer; per layer in backward up to 3 (a block's MLP
                                           backward, its end, a reduce-scatter); loss, reductions, norm, step */
    double stack1[512], stack2[512];
    double *t1 = cap <= 512 ? stack1 : malloc(sizeof(double) * (size_t)cap);
    double *t2 = cap <= 512 ? stack2 : malloc(sizeof(double) * (size_t)cap);
    Totals A = {t1, 0, cap}, B = {t2, 0, cap};
    int64_t ub = max_b;
    int ok = t1 && t2;
    Step first;
    memset(&first, 0, sizeof first);
    const Step *s1 = row && b0 == 1 ? row : NULL, *s2 = row && b0 == 2 ? row : NULL;
    if (ok && !s1) {
        TrainSpec tt = *P->t;
        tt.micro_batch = 1;
        ok = plan_step_build_for(&first, P->m, &tt, P->c, P->s, PLAN_STEP_MEMORY) == PLAN_OK;
        s1 = &first;
    }
    if (ok && !s2 && max_b > 1) {
        TrainSpec tt = *P->t;
        tt.micro_batch = 2;
        ok = plan_step_build_for(&P->kept, P->m, &tt, P->c, P->s, PLAN_STEP_MEMORY) == PLAN_OK;
        if (ok) P->kept_b = 2;
        s2 = &P->kept;
    }
    if (ok && max_b > 1) ok = tensor_totals(P, s1, &A) == PLAN_OK && tensor_totals(P, s2, &B) == PLAN_OK;
    if (ok && max_b > 1) {
        int n = A.n < B.n ? A.n : B.n;
        ub = affine_bound(t1, t2, n < cap ? n : cap, 1, 2, P->c->gpu.mem_bytes, max_b);
    }
    if (t1 != stack1) free(t1);
    if (t2 != stack2) free(t2);
    if (!ok) ub = max_b;
    /* ub = 0: a moment's tensors and fixed overheads at batch 1 exceed the GPU, and the
       allocator's share is never negative: nothing fits. Not built: the whole range (ub = max_b) */
    if (ub <= 0) {
        plan_step_free(&first);
        return 0;
    }
    if (ok) P->one = s1;
    if (probe(P, ub)) {
        /* above the bound, as a rule, only by the allocator's rounding; far above it where the
           totals are not affine in the batch (rules that switch at a batch size: resnet50 at
           32 x 32 with --autocast cpu, bound 3,708, answer above 20,000): gallop up, then bisect */
        lo = ub;
        for (int64_t step = 1; lo + 1 < hi; step *= 2) {
            int64_t b = lo + step < hi ? lo + step : hi - 1;
            if (!probe(P, b)) { hi = b; break; }
            lo = b;
        }
    } else if (ub > 1 && !probe(P, 1)) {
        hi = 1;   /* batch 1 does not fit: the boundary at 0 */
    } else {
        hi = ub;
        for (int64_t step = 1; hi - step > lo; step *= 2) {   /* gallop down from the bound */
            if (probe(P, hi - step)) { lo = hi - step; break; }
            hi -= step;
        }
    }
    while (hi - lo > 1) {   /* lo fits, hi does not */
        int64_t mid = lo + (hi - lo) / 2;
        if (probe(P, mid)) lo = mid;
        else hi = mid;
    }
    P->one = NULL;
    plan_step_free(&first);
    return lo;
}

int64_t plan_max_micro_batch_step(const Step *row, const ModelSpec *m, const TrainSpec *t, const ClusterSpec *c,
                                  StrategyKind s, int64_t max_b, int row_fits) {
    if (max_b < 1) return 0;
    Probes P;
    memset(&P, 0, sizeof P);
    P.m = m; P.t = t; P.c = c; P.s = s;
    if (row && !row->failed) remember(&P, row->view.t.micro_batch, row_fits);
    else if (row) return 0;   /* not built: nothing fits */
    int64_t b = search(&P, row, max_b);
    plan_step_free(&P.kept);
    return b;
}

int64_t plan_max_micro_batch(const ModelSpec *m, const TrainSpec *t, const ClusterSpec *c,
                             StrategyKind s, int64_t max_b) {
    return plan_max_micro_batch_step(NULL, m, t, c, s, max_b, 0);
}
