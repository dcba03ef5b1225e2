/* plan_step.c — the step account (plan_step.h): its points, the builder the rules write through,
 * the rule table, and the memory replay that every memory figure comes from. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "plan_step_internal.h"
#include "plan_util.h"

/* ---- points: START, FWD x L, LOSS_FWD, LOSS_BWD, (BWD_MLP, BWD, BWD_UNIT) x L from the last
   layer, ROOT_RS, REDUCE1, REDUCE2, NORM, STEP, END ---- */

static int plan_step_n_points(int L) { return 9 + 4 * L; }

int plan_step_point(int L, PointKind k, int i) {
    switch (k) {
    case PT_START: return 0;
    case PT_FWD: return 1 + i;
    case PT_LOSS_FWD: return 1 + L;
    case PT_LOSS_BWD: return 2 + L;
    case PT_BWD_MLP: return 3 + L + 3 * (L - 1 - i);
    case PT_BWD: return 4 + L + 3 * (L - 1 - i);
    case PT_BWD_UNIT: return 5 + L + 3 * (L - 1 - i);
    case PT_ROOT_RS: return 3 + 4 * L;
    case PT_REDUCE1: return 4 + 4 * L;
    case PT_REDUCE2: return 5 + 4 * L;
    case PT_NORM: return 6 + 4 * L;
    case PT_STEP: return 7 + 4 * L;
    default: return 8 + 4 * L;
    }
}

PointKind plan_step_point_kind(int L, int p, int *layer) {
    *layer = -1;
    if (p == 0) return PT_START;
    if (p <= L) { *layer = p - 1; return PT_FWD; }
    if (p == 1 + L) { *layer = L - 1; return PT_LOSS_FWD; }
    if (p == 2 + L) { *layer = L - 1; return PT_LOSS_BWD; }
    if (p < 3 + 4 * L) {
        int q = p - (3 + L);
        *layer = L - 1 - q / 3;
        return (PointKind)(PT_BWD_MLP + q % 3);
    }
    static const PointKind TAIL[] = {PT_ROOT_RS, PT_REDUCE1, PT_REDUCE2, PT_NORM, PT_STEP, PT_END};
    PointKind k = TAIL[p - (3 + 4 * L) < 6 ? p - (3 + 4 * L) : 5];
    if (k == PT_ROOT_RS || k == PT_REDUCE1 || k == PT_REDUCE2) *layer = 0;
    return k;
}

/* What a moment at each kind of point is called (the peak_at column): its phase and label;
   with_layer: the label is followed by the layer's name. */
static const struct { PhaseKind phase; const char *label; int with_layer; } MOMENTS[PT_KIND_COUNT] = {
    [PT_START] = {PHASE_FORWARD, "start", 0},
    [PT_FWD] = {PHASE_FORWARD, "forward", 0},
    [PT_LOSS_FWD] = {PHASE_FORWARD, "loss forward", 0},
    [PT_LOSS_BWD] = {PHASE_BACKWARD, "loss backward", 0},
    [PT_BWD_MLP] = {PHASE_BACKWARD, "MLP backward of", 1},
    [PT_BWD] = {PHASE_BACKWARD, "backward of", 1},
    [PT_BWD_UNIT] = {PHASE_BACKWARD, "reduce-scatter of", 1},
    [PT_ROOT_RS] = {PHASE_BACKWARD, "reduce-scatter of the root unit", 0},
    [PT_REDUCE1] = {PHASE_BACKWARD, "gradient reduction", 0},
    [PT_REDUCE2] = {PHASE_BACKWARD, "gradient reduction", 0},
    [PT_NORM] = {PHASE_STEP, "gradient norm", 0},
    [PT_STEP] = {PHASE_STEP, "optimizer step", 0},
    [PT_END] = {PHASE_STEP, "end", 0},
};

/* ---- the builder ---- */

static void *grow(void *p, int *cap, size_t elem, Step *st) {
    int c = *cap ? 2 * *cap : 256;
    void *q = realloc(p, (size_t)c * elem);
    if (!q) { st->failed = 1; return NULL; }
    *cap = c;
    return q;
}

void step_mem(Step *st, RuleId r, TermKind term, int point, StepWhen w, double bytes) {
    if (bytes == 0 || st->failed) return;
    if (st->n_mem == st->cap_mem) {
        StepMem *q = grow(st->mem, &st->cap_mem, sizeof(*q), st);
        if (!q) return;
        st->mem = q;
    }
    st->mem[st->n_mem++] = (StepMem){point, (uint8_t)w, (uint8_t)term, (uint16_t)r, bytes};
}

void step_hold(Step *st, RuleId r, TermKind term, int p0, StepWhen w0, int p1, StepWhen w1, double bytes) {
    if (bytes == 0) return;
    step_mem(st, r, term, p0, w0, bytes);
    step_mem(st, r, term, p1, w1, -bytes);
}

void step_at(Step *st, RuleId r, TermKind term, int point, double bytes) {
    step_hold(st, r, term, point, AT_BEFORE, point, AT_AFTER, bytes);
}

void step_sample(Step *st, int point) { st->sampled[point] = 1; }

StepXfer *step_xfer(Step *st, RuleId r, XferKind kind, int point) {
    if (st->failed) return NULL;
    if (st->n_xfer == st->cap_xfer) {
        StepXfer *q = grow(st->xfer, &st->cap_xfer, sizeof(*q), st);
        if (!q) return NULL;
        st->xfer = q;
    }
    StepXfer *x = &st->xfer[st->n_xfer++];
    memset(x, 0, sizeof(*x));
    x->kind = (uint8_t)kind;
    x->rule = (uint16_t)r;
    x->point = point;
    x->wait = -1;
    x->count = 1;
    return x;
}

void step_work(Step *st, RuleId r, int point, WorkScale scale, StepMicro micro, double seconds, double flops) {
    if ((seconds <= 0 && flops <= 0) || st->failed) return;
    if (st->n_work == st->cap_work) {
        StepWork *q = grow(st->work, &st->cap_work, sizeof(*q), st);
        if (!q) return;
        st->work = q;
    }
    st->work[st->n_work++] = (StepWork){point, (uint8_t)scale, (uint8_t)micro, (uint16_t)r, seconds, flops};
}

/* The core rules in the order they run: each reads the resolved setup and writes its events;
   the dimensions' rules (plan_dim.h) run after them, in the table's order. memory_only: the rule
   writes memory events and nothing else (no work item, no collective, no field the simulated
   step or the collective table reads), so a time-only build (PLAN_STEP_TIME) leaves it out;
   test_plan_step checks that such a build's work, collectives, simulated step and collective
   table equal a whole build's over a matrix of setups. */
static const struct {
    StepRuleFn fn;
    int memory_only;
} RULES[] = {
    {rule_model_states, 0}, {rule_grads_kept, 1}, {rule_accum_grads, 1}, {rule_autograd_grads, 1},
    {rule_tied_head, 1}, {rule_engine_grad_flight, 1}, {rule_ds12_gradients, 1}, {rule_fsdp2_gradients, 1},
    {rule_mlp_pending_grads, 1}, {rule_step_grads, 1}, {rule_ddp_reducer, 0}, {rule_ds12_reducer, 0},
    {rule_ds3_coordinator, 0}, {rule_unit_static_buffers, 0}, {rule_fsdp2_buffers, 0}, {rule_unit_collectives, 0},
    {rule_engine_buckets, 0}, {rule_ds_step_collectives, 0}, {rule_ddp_broadcast, 0}, {rule_syncbn, 0},
    {rule_saved_activations, 1}, {rule_autocast_cache, 1}, {rule_backward_transients, 1}, {rule_loss, 1},
    {rule_optimizer_transients, 1}, {rule_compute, 0},
};

/* Whether core rule k runs in a build of `what`: a memory probe needs no compute, a time-only
   build no memory-only rule. */
static int rule_runs(size_t k, unsigned what) {
    if (what & PLAN_STEP_MEMORY) return RULES[k].fn != rule_compute;
    if (what & PLAN_STEP_COMPUTE) return RULES[k].fn == rule_compute;
    return !((what & PLAN_STEP_TIME) && RULES[k].memory_only);
}

static int build_failed(Step *st, int status, const char *where, const char *why) {
    plan_step_free(st);
    st->failed = 1;
    st->status = status;
    st->fail_where = where;
    snprintf(st->fail_why, sizeof st->fail_why, "%s", why ? why : where);
    return status;
}

/* The account of view v (which the step takes over): the fixed overheads, what its events stand
   for as allocations, the moments every step has, then the rules. */
static int build_view(Step *st, RankView *v, unsigned what) {
    memset(st, 0, sizeof(*st));
    st->view = *v;
    st->built_for = what;
    const RankView *w = &st->view;
    const ModelSpec *m = &w->m;
    const ClusterSpec *c = &w->dp;
    st->n_layers = m->n_layers;
    st->n_points = plan_step_n_points(m->n_layers);
    st->sampled = calloc((size_t)st->n_points, 1);
    StepCtx x;
    memset(&x, 0, sizeof x);
    if (!st->sampled || plan_step_ctx_init_for(&x, w, what)) {
        plan_step_ctx_free(&x);
        return build_failed(st, PLAN_ERR_NOMEM, "out of host memory planning it", NULL);
    }
    /* fixed overheads: CUDA context, cuBLAS workspace, NCCL communicators (docs/formulas.md
       "Fixed overheads"); HYBRID_SHARD has an intra-node and an inter-node communicator, the tp
       and pp groups one each */
    st->cuda_context = c->cuda_context;
    st->cublas_ws = c->gpu.cublas_ws_bytes;
    st->nccl_comms = c->gpus > 1 ? 1 : 0;
    if (x.s->group_node && c->gpus > x.n) st->nccl_comms = 2;
    if (w->tp > 1) st->nccl_comms++;
    if (w->pp > 1) st->nccl_comms++;
    st->nccl_comms += w->comms;   /* the other dimensions' groups (plan_dim.h RankView.comms) */
    st->nccl = st->nccl_comms * c->nccl_per_comm;
    st->fixed = st->cuda_context + st->cublas_ws + st->nccl;
    st->shard_group = x.n;
    st->acts_known = plan_model_acts_known(m);
    plan_step_alloc_layout(st, &x);   /* what its events stand for as allocations */
    /* the moments every step has: each layer's forward and backward, and the optimizer step */
    for (int i = 0; i < m->n_layers; i++) {
        step_sample(st, pt(&x, PT_FWD, i));
        step_sample(st, pt(&x, PT_BWD, i));
    }
    step_sample(st, pt(&x, PT_STEP, 0));
    for (size_t k = 0; k < sizeof(RULES) / sizeof(RULES[0]); k++)
        if (rule_runs(k, what)) RULES[k].fn(&x, st);
    for (int d = 0; d < plan_dim_count() && !(what & PLAN_STEP_COMPUTE); d++)
        if (plan_dim(d)->rule) plan_dim(d)->rule(&x, st);
    plan_step_ctx_free(&x);
    if (st->failed) return build_failed(st, PLAN_ERR_NOMEM, "out of host memory planning it", NULL);
    return PLAN_OK;
}

int plan_step_rule_fns(StepRuleFn *fns, int max) {
    int n = 0;
    for (size_t k = 0; k < sizeof(RULES) / sizeof(RULES[0]) && n < max; k++) fns[n++] = RULES[k].fn;
    for (int d = 0; d < plan_dim_count() && n < max; d++)
        if (plan_dim(d)->rule) fns[n++] = plan_dim(d)->rule;
    return n;
}

int plan_step_rule_writes(const RankView *v, StepRuleFn fn, unsigned char written[RULE_COUNT]) {
    memset(written, 0, RULE_COUNT);
    Step st;
    memset(&st, 0, sizeof st);
    st.n_layers = v->m.n_layers;
    st.n_points = plan_step_n_points(v->m.n_layers);
    st.sampled = calloc((size_t)st.n_points, 1);
    StepCtx x;
    memset(&x, 0, sizeof x);
    int rc = !st.sampled || plan_step_ctx_init(&x, v) ? -1 : 0;
    if (!rc) fn(&x, &st);
    plan_step_ctx_free(&x);
    for (int e = 0; e < st.n_mem; e++) written[st.mem[e].rule] = 1;
    for (int e = 0; e < st.n_xfer; e++) written[st.xfer[e].rule] = 1;
    for (int e = 0; e < st.n_work; e++) written[st.work[e].rule] = 1;
    if (st.failed) rc = -1;
    free(st.mem);
    free(st.xfer);
    free(st.work);
    free(st.sampled);
    return rc;
}

/* A view whose memory is the account of one micro-step (plan_dim_pp.c: every micro-batch in
   flight before the stage's first backward): the memory events of that account, the
   collectives and compute of all the micro-steps. */
static int build_candidate(Step *st, RankView *v, unsigned what) {
    int one = v->mem_one_micro;
    RankView v1 = *v;
    int rc = build_view(st, v, what);
    if (rc || !one || (what & PLAN_STEP_TIME)) return rc;   /* the micro-step's memory only */
    v1.own_m = 0;                    /* the same layers, owned by st's view */
    v1.m = st->view.m;
    v1.t.grad_accum = 1;
    Step first;
    rc = build_view(&first, &v1, PLAN_STEP_MEMORY);
    if (rc) { plan_step_free(st); return build_failed(st, rc, first.fail_where, first.fail_why); }
    StepMem *mem = st->mem;
    uint8_t *sampled = st->sampled;
    st->mem = first.mem; st->n_mem = first.n_mem; st->cap_mem = first.cap_mem;
    st->sampled = first.sampled;
    first.mem = mem; first.sampled = sampled;
    plan_step_free(&first);
    return PLAN_OK;
}

int plan_step_build(Step *st, const ModelSpec *m, const TrainSpec *t, const ClusterSpec *c, StrategyKind sk) {
    return plan_step_build_for(st, m, t, c, sk, PLAN_STEP_ALL);
}

int plan_step_build_for(Step *st, const ModelSpec *m, const TrainSpec *t, const ClusterSpec *c, StrategyKind sk,
                        unsigned what) {
    memset(st, 0, sizeof(*st));
    RankView views[PLAN_MAX_VIEWS];
    char why[320];
    const char *where;
    int n = plan_rank_views(m, t, c, sk, views, PLAN_MAX_VIEWS, why, sizeof why, &where);
    if (n < 0) return build_failed(st, n, where, why);
    if (n > 1) what &= ~(unsigned)(PLAN_STEP_TIME | PLAN_STEP_COMPUTE);   /* the candidates' memory picks the rank */
    /* host memory is the node's, for the setup as given (plan_dim_offload.h); a time-only build
       plans no memory, the host's neither */
    OffloadHost h;
    memset(&h, 0, sizeof h);
    if (!(what & PLAN_STEP_TIME)) plan_offload_host(m, t, c, sk, &h);
    /* several candidates (the pipeline's first and last stage): the most loaded is the plan's,
       by its peak replayed as the memory model replays it, the first on a tie */
    double best = 0;
    int have = 0, rc = PLAN_OK;
    for (int k = 0; k < n; k++) {
        if (rc) { plan_rank_view_free(&views[k]); continue; }
        Step cand;
        rc = build_candidate(&cand, &views[k], what);
        if (rc) {
            if (have) plan_step_free(st);
            have = 0;
            *st = cand;
            continue;
        }
        double peak = 0;
        if (n > 1) {
            MemResult r;
            memset(&r, 0, sizeof r);   /* the replay keeps the largest moment it sees in r */
            plan_step_replay(&cand, &cand.view.dp, &r, NULL, NULL);
            peak = r.peak;
        }
        if (!have || peak > best) {
            if (have) plan_step_free(st);
            *st = cand;
            best = peak;
            have = 1;
        } else plan_step_free(&cand);
    }
    if (rc) return rc;   /* st is the failed candidate, its reason kept */
    st->host_per_node = h.per_node;
    st->host_capacity = h.capacity;
    st->host_fits = h.fits;
    return PLAN_OK;
}

void plan_step_free(Step *st) {
    free(st->mem);
    free(st->xfer);
    free(st->work);
    free(st->sampled);
    plan_rank_view_free(&st->view);
    memset(st, 0, sizeof(*st));
}

/* ---- the replay ---- */

/* Events in step order (point, then before/after its moment), stable: a counting sort. Returns
   a malloc'd index array, or NULL when out of memory (the caller then walks unsorted). */
int *plan_step_order_events(const Step *st) {
    int keys = 2 * st->n_points;
    int *start = calloc((size_t)keys + 1, sizeof(int));
    int *idx = malloc(sizeof(int) * (size_t)(st->n_mem > 0 ? st->n_mem : 1));
    if (!start || !idx) { free(start); free(idx); return NULL; }
    for (int e = 0; e < st->n_mem; e++) start[2 * st->mem[e].point + st->mem[e].when + 1]++;
    for (int k = 0; k < keys; k++) start[k + 1] += start[k];
    for (int e = 0; e < st->n_mem; e++) idx[start[2 * st->mem[e].point + st->mem[e].when]++] = e;
    free(start);
    return idx;
}

/* Live bytes per term. Whole bytes (every size but a few products with fractions) add exactly in
   any order; the rules with fractional sizes (the MLP moment's pending gradients, a CNN's
   activations at a rescaled image) are summed apart, in step order, so each figure is the same
   sum whatever order the rules wrote their events in, and returns to exactly zero when none of
   their bytes are live. */
typedef struct {
    double whole[TERM_COUNT], frac[TERM_COUNT];
    int nfrac[TERM_COUNT];
    uint8_t frac_rule[RULE_COUNT];   /* the rule wrote a fractional size */
    double (*by_rule)[TERM_COUNT];   /* optional: per rule (explain) */
} Live;

static void live_init(Live *lv, const Step *st, double (*by_rule)[TERM_COUNT]) {
    memset(lv, 0, sizeof(*lv));
    lv->by_rule = by_rule;
    for (int e = 0; e < st->n_mem; e++)
        if (floor(st->mem[e].bytes) != st->mem[e].bytes) lv->frac_rule[st->mem[e].rule] = 1;
}

static void apply(Live *lv, const StepMem *e) {
    int k = e->term;
    if (!lv->frac_rule[e->rule]) lv->whole[k] += e->bytes;
    else {
        lv->frac[k] += e->bytes;
        lv->nfrac[k] += e->bytes > 0 ? 1 : -1;
        if (lv->nfrac[k] == 0) lv->frac[k] = 0;
    }
    if (lv->by_rule) lv->by_rule[e->rule][k] += e->bytes;
}

typedef struct {
    const Step *st;
    const ModelSpec *m;
    const ClusterSpec *c;
    MemResult *r;
    MemMomentFn fn;
    void *ctx;
    int peak_point;
    double (*snap)[TERM_COUNT];      /* explain: per-rule bytes at the peak */
} Replay;

/* One moment at point p: the terms, the allocator margin on the managed bytes, the total. */
static void moment(Replay *R, const Live *lv, int p) {
    int layer;
    PointKind k = plan_step_point_kind(R->st->n_layers, p, &layer);
    double t[TERM_COUNT];
    double managed = 0;
    for (int j = 0; j < TERM_COUNT; j++) {
        t[j] = lv->frac[j] != 0 ? lv->whole[j] + lv->frac[j] : lv->whole[j];
        if (j != TERM_OVERHEAD) managed += t[j];
    }
    double margin = R->c->margin_is_frac ? managed * R->c->alloc_margin : R->c->alloc_margin;
    double total = managed + R->st->fixed + margin;
    t[TERM_OVERHEAD] = R->st->fixed + margin;
    PhaseKind ph = MOMENTS[k].phase;
    if (R->fn) R->fn(R->ctx, ph, layer, t, total);
    MemResult *r = R->r;
    if (total > r->phase_peak[ph]) r->phase_peak[ph] = total;
    if (total > r->peak) {
        r->peak = total;
        r->peak_phase = ph;
        memcpy(r->term, t, sizeof(r->term));
        r->margin = margin;
        R->peak_point = p;
        if (R->snap) memcpy(R->snap, lv->by_rule, sizeof(double) * RULE_COUNT * TERM_COUNT);
    }
}

static void replay(Replay *R, Live *lv) {
    const Step *st = R->st;
    int *idx = plan_step_order_events(st);
    int e = 0;
    for (int p = 0; p < st->n_points; p++) {
        for (int w = 0; w < 2; w++) {
            if (idx) {
                while (e < st->n_mem && st->mem[idx[e]].point == p && st->mem[idx[e]].when == w) apply(lv, &st->mem[idx[e++]]);
            } else {   /* out of memory for the index: scan (same result, quadratic) */
                for (int q = 0; q < st->n_mem; q++)
                    if (st->mem[q].point == p && st->mem[q].when == w) apply(lv, &st->mem[q]);
            }
            if (w == AT_BEFORE && st->sampled[p]) moment(R, lv, p);
        }
    }
    free(idx);
}

void plan_step_replay_tensors(const Step *st, const ClusterSpec *c, MemResult *r, MemMomentFn fn, void *ctx) {
    const ModelSpec *m = &st->view.m;
    Replay R = {st, m, c, r, fn, ctx, -1, NULL};
    Live lv;
    live_init(&lv, st, NULL);
    replay(&R, &lv);
    r->cuda_context = st->cuda_context;
    r->cublas_ws = st->cublas_ws;
    r->nccl = st->nccl;
    r->nccl_comms = st->nccl_comms;
    r->shard_group = st->shard_group;
    r->acts_known = st->acts_known;
    r->ms_params = st->ms_params;
    r->ms_grads = st->ms_grads;
    r->ms_optimizer = st->ms_optimizer;
    r->model_states = r->ms_params + r->ms_grads + r->ms_optimizer;
    r->opt_host_bytes = st->opt_host_bytes;
    if (R.peak_point < 0) return;
    int layer;
    PointKind k = plan_step_point_kind(st->n_layers, R.peak_point, &layer);
    if (MOMENTS[k].with_layer && layer >= 0 && r->peak_phase == PHASE_BACKWARD)
        snprintf(r->peak_where, sizeof(r->peak_where), "%s %s", MOMENTS[k].label, m->layers[layer].name);
    else if (k == PT_FWD && layer == st->n_layers - 1)
        snprintf(r->peak_where, sizeof(r->peak_where), "end of forward");
    else
        snprintf(r->peak_where, sizeof(r->peak_where), "%s", MOMENTS[k].label);
}

void plan_step_live_at_peak(const Step *st, const ClusterSpec *c, double out[RULE_COUNT][TERM_COUNT]) {
    const ModelSpec *m = &st->view.m;
    MemResult r;
    memset(&r, 0, sizeof(r));
    double (*live)[TERM_COUNT] = calloc(RULE_COUNT, sizeof(*live));
    memset(out, 0, sizeof(double) * RULE_COUNT * TERM_COUNT);
    if (!live) return;
    Replay R = {st, m, c, &r, NULL, NULL, -1, out};
    Live lv;
    live_init(&lv, st, live);
    replay(&R, &lv);
    free(live);
}
