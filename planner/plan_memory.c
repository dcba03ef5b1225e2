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
static const char *const PHASE_NAMES[PHASE_COUNT] = {"forward", "backward", "step"};

const char *plan_term_name(TermKind k) { return TERM_NAMES[k]; }
const char *plan_phase_name(PhaseKind p) { return PHASE_NAMES[p]; }

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
   and its memory model's verdict (plan_memory_step, fits only), so the answer is exactly what a
   plan at that batch says. Where to probe comes from the tensors alone: every moment's tensor
   total is affine in the micro-batch (activations, the loss and scratch scale with b, nothing
   else does), so two builds (b = 1, 2) give each moment's a + s*b and the largest b that keeps
   them under the capacity. With a flat margin that is the answer (probed at it and above it, for
   rounding); with the allocator model, whose share is never negative, it is an upper bound, and
   the answer lies at or below it: probed there, then galloping down and bisecting. The peak
   grows with b, so fits(b) falls once. */
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

typedef struct {
    const ModelSpec *m;
    const TrainSpec *t;
    const ClusterSpec *c;
    StrategyKind s;
    int64_t b[32];           /* probes made: batch, verdict */
    int fits[32], n;
} Probes;

static int probe(Probes *P, int64_t b) {
    for (int i = 0; i < P->n; i++) if (P->b[i] == b) return P->fits[i];
    TrainSpec tt = *P->t;
    tt.micro_batch = b;
    int f = plan_memory_fits(P->m, &tt, P->c, P->s);
    if (P->n < 32) { P->b[P->n] = b; P->fits[P->n++] = f; }
    return f;
}

/* The step at b's tensors per moment (no allocator share, no margin) into T; its verdict in *fits. */
static int tensor_totals(Probes *P, int64_t b, Totals *T, int *fits) {
    TrainSpec tt = *P->t;
    tt.micro_batch = b;
    Step st;
    plan_step_build(&st, P->m, &tt, P->c, P->s);
    ClusterSpec bare = *P->c;
    bare.alloc_model = 0;
    if (P->c->alloc_model) { bare.alloc_margin = 0; bare.margin_is_frac = 0; }
    MemResult r;
    int rc = plan_memory_step(&st, &bare, &r, collect, T, 0);
    if (!rc) {   /* the verdict of this build, the memory model's own */
        MemResult v;
        plan_memory_step(&st, P->c, &v, NULL, NULL, 1);
        *fits = v.fits;
        if (P->n < 32) { P->b[P->n] = b; P->fits[P->n++] = v.fits; }
    }
    plan_step_free(&st);
    return rc;
}

int64_t plan_max_micro_batch(const ModelSpec *m, const TrainSpec *t, const ClusterSpec *c,
                             StrategyKind s, int64_t max_b) {
    return plan_max_micro_batch_from(m, t, c, s, max_b, 0, 0);
}

int64_t plan_max_micro_batch_from(const ModelSpec *m, const TrainSpec *t, const ClusterSpec *c,
                                  StrategyKind s, int64_t max_b, int64_t b0, int fits0) {
    if (max_b < 1) return 0;
    Probes P = {m, t, c, s, {0}, {0}, 0};
    if (b0 >= 1) { P.b[0] = b0; P.fits[0] = fits0; P.n = 1; }
    int cap = 4 * m->n_layers + 8;   /* forward per layer; per layer in backward up to 3 (a block's MLP
                                        backward, its end, a reduce-scatter); loss, reductions, norm, step */
    double stack1[512], stack2[512];
    double *t1 = cap <= 512 ? stack1 : malloc(sizeof(double) * (size_t)cap);
    double *t2 = cap <= 512 ? stack2 : malloc(sizeof(double) * (size_t)cap);
    Totals A = {t1, 0, cap}, B = {t2, 0, cap};
    int fits1 = 0, fits2 = 0;
    int64_t ub = max_b;
    if (!t1 || !t2 || tensor_totals(&P, 1, &A, &fits1) || (fits1 && max_b > 1 && tensor_totals(&P, 2, &B, &fits2))) {
        ub = max_b;          /* out of memory for the totals: bisect over the whole range */
        fits1 = probe(&P, 1);
    } else if (fits1 && max_b > 1) {
        int n = A.n < B.n ? A.n : B.n;
        if (n > cap) n = cap;
        for (int k = 0; k < n; k++) {
            double slope = t2[k] - t1[k], base = t1[k] - slope;
            if (slope <= 0) continue;
            double bk = floor((c->gpu.mem_bytes - base) / slope);
            if (bk < (double)ub) ub = bk < 1 ? 1 : (int64_t)bk;
        }
    }
    if (t1 != stack1) free(t1);
    if (t2 != stack2) free(t2);
    if (!fits1) return 0;
    /* lo fits, hi does not (max_b + 1: beyond the search) */
    int64_t lo = 1, hi = max_b + 1;
    if (probe(&P, ub)) {
        lo = ub;
        /* above the bound only by rounding: walk up while it fits */
        while (lo < max_b && probe(&P, lo + 1)) lo++;
        return lo;
    }
    hi = ub;
    for (int64_t step = 1; hi - step > lo; step *= 2) {   /* gallop down from the bound */
        if (probe(&P, hi - step)) { lo = hi - step; break; }
        hi -= step;
    }
    while (hi - lo > 1) {
        int64_t mid = lo + (hi - lo) / 2;
        if (probe(&P, mid)) lo = mid;
        else hi = mid;
    }
    return lo;
}
