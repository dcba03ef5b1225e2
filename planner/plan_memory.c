/* plan_memory.c — see plan_memory.h and docs/formulas.md. */
#include "plan_memory.h"

#include <math.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>

#include "plan_offload.h"
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
   and freed when, the replay finds the peak; host memory is plan_offload.c's. */
static int walk(const ModelSpec *m, const TrainSpec *t, const ClusterSpec *c, StrategyKind sk,
                MemResult *r, MemMomentFn fn, void *ctx, int fits_only) {
    memset(r, 0, sizeof(*r));
    Step st;
    if (plan_step_build(&st, m, t, c, sk)) {   /* out of host memory: never "fits" */
        r->peak = HUGE_VAL;
        snprintf(r->peak_where, sizeof(r->peak_where), "%s", st.fail_where ? st.fail_where : "out of host memory");
        plan_step_free(&st);
        return -1;
    }
    if (fits_only && plan_step_replay_fits(&st, m, c, r, fn, ctx)) {   /* known not to fit */
        plan_step_free(&st);
        return 0;
    }
    if (!fits_only) plan_step_replay(&st, m, c, r, fn, ctx);
    plan_step_free(&st);
    r->gpu_fits = r->peak <= c->gpu.mem_bytes;
    r->headroom = c->gpu.mem_bytes - r->peak;
    OffloadHost h;
    plan_offload_host(m, t, c, sk, &h);
    r->host_per_node = h.per_node;
    r->host_capacity = h.capacity;
    r->host_fits = h.fits;
    r->fits = r->gpu_fits && r->host_fits;
    return 0;
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

/* Every moment's total is affine in the micro-batch (activations, loss and scratch scale with
   b; everything else does not; the margin is a fraction or a constant). So two walks (b = 1, 2)
   give each moment's a + s*b, and the largest b that keeps every moment under the capacity
   follows directly; a final check at b and b+1 guards against rounding. */
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

static int fits_at(const ModelSpec *m, const TrainSpec *t, const ClusterSpec *c, StrategyKind s, int64_t b) {
    TrainSpec tt = *t;
    tt.micro_batch = b;
    return plan_memory_fits(m, &tt, c, s);
}

int64_t plan_max_micro_batch(const ModelSpec *m, const TrainSpec *t, const ClusterSpec *c,
                             StrategyKind s, int64_t max_b) {
    if (max_b < 1) return 0;
    int cap = 4 * m->n_layers + 8;   /* forward per layer; per layer in backward up to 3 (a block's MLP
                                        backward, its end, a reduce-scatter); loss, reductions, norm, step */
    double stack1[512], stack2[512];
    double *t1 = cap <= 512 ? stack1 : malloc(sizeof(double) * (size_t)cap);
    double *t2 = cap <= 512 ? stack2 : malloc(sizeof(double) * (size_t)cap);
    int64_t best = max_b;
    if (!t1 || !t2) {              /* out of memory: fall back to bisection */
        int64_t lo = 1, hi = max_b + 1;
        if (!fits_at(m, t, c, s, 1)) lo = hi = 0;
        while (hi - lo > 1) { int64_t mid = lo + (hi - lo) / 2; if (fits_at(m, t, c, s, mid)) lo = mid; else hi = mid; }
        best = lo;
    } else {
        /* the walk at b = 1 answers whether b = 1 fits, and the one at b = 2 whether 2 does */
        Totals A = {t1, 0, cap}, B = {t2, 0, cap};
        TrainSpec tt = *t;
        MemResult r;
        tt.micro_batch = 1;
        plan_memory_walk_fits(m, &tt, c, s, &r, collect, &A);
        if (!r.fits) best = 0;
        else {
            tt.micro_batch = 2;
            plan_memory_walk(m, &tt, c, s, &r, collect, &B);
            int fits2 = r.fits;
            int n = A.n < B.n ? A.n : B.n;
            if (n > cap) n = cap;
            for (int k = 0; k < n; k++) {
                double slope = t2[k] - t1[k], base = t1[k] - slope;
                if (slope <= 0) continue;
                double bk = floor((c->gpu.mem_bytes - base) / slope);
                if (bk < (double)best) best = bk < 1 ? 1 : (int64_t)bk;
            }
            while (best > 1 && !(best == 2 ? fits2 : fits_at(m, t, c, s, best))) best--;
            while (best < max_b && (best + 1 == 2 ? fits2 : fits_at(m, t, c, s, best + 1))) best++;
        }
    }
    if (t1 != stack1) free(t1);
    if (t2 != stack2) free(t2);
    return best;
}
