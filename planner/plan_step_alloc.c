/* plan_step_alloc.c — the step account as an allocation sequence (plan_step_alloc) and the
 * memory replay that adds the caching allocator's share to it (plan_step_replay): which bytes
 * the account's events stand for as PyTorch's allocations, in which order, and the figures the
 * allocator model (plan_alloc.c) gives for them. docs/formulas.md "The allocator in the plan". */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "plan_alloc.h"
#include "plan_step_internal.h"
#include "plan_util.h"
/* ---- the account as an allocation sequence (plan_step_alloc) ---- */

typedef struct {
    int id;
    uint64_t size;           /* asked of the allocator */
    uint64_t held;           /* of those, the account's bytes still in it (a level that steps
                                down frees in place: the block goes when held reaches 0) */
    uint16_t rule;
    uint8_t term;
    uint8_t state;           /* BLK_* */
} StepBlock;

enum { BLK_FREED = 0, BLK_LIVE, BLK_RELEASED };   /* released: freed in this slot, not yet
                                                     given back (another rule may take it over) */

/* Block indices in ascending order (a block's index is its age: the largest is the latest). */
typedef struct {
    int *v;
    int n, cap;
} BlockIdx;

typedef struct {
    PlanAlloc *a;
    StepBlock *b;            /* every block of the replay, in the order allocated; never moved */
    int n, cap;
    BlockIdx live[RULE_COUNT][TERM_COUNT];   /* the live blocks of each rule and term: a free
                                                searches its own rule's, not every live block */
    BlockIdx released;       /* blocks released in this slot */
    int failed;
    /* bytes a rule freed before it had allocated them (a rule that lowers its figure for a
       moment, e.g. the MLP moment's pending gradients): its next allocations pay them back
       first, so the replay's live bytes stay at the account's or above */
    uint64_t debt[RULE_COUNT][TERM_COUNT];
} StepAllocRun;

/* Inserts block i in order (at the end when it is the latest, the usual case). */
static void idx_insert(StepAllocRun *R, BlockIdx *x, int i) {
    if (plan_grow((void **)&x->v, &x->cap, x->n + 1, sizeof *x->v)) { R->failed = 1; return; }
    int k = x->n;
    while (k > 0 && x->v[k - 1] > i) k--;
    memmove(x->v + k + 1, x->v + k, sizeof *x->v * (size_t)(x->n - k));
    x->v[k] = i;
    x->n++;
}

static void idx_remove(BlockIdx *x, int k) {
    memmove(x->v + k, x->v + k + 1, sizeof *x->v * (size_t)(x->n - k - 1));
    x->n--;
}

static void run_malloc(StepAllocRun *R, uint16_t rule, uint8_t term, uint64_t size) {
    if (R->failed || size == 0) return;
    if (plan_grow((void **)&R->b, &R->cap, R->n + 1, sizeof *R->b)) { R->failed = 1; return; }
    int id = R->n;
    /* 1: out of memory (counted in the stats; the handle stays unallocated, its free is a no-op) */
    if (plan_alloc_malloc(R->a, id, size, 0) < 0) { R->failed = 1; return; }
    R->b[R->n++] = (StepBlock){id, size, size, rule, term, BLK_LIVE};
    idx_insert(R, &R->live[rule][term], id);
}

/* An allocation request of the slot: after the rule's debt is paid, it takes over a block of
   the same term released in this slot whose bytes are exactly its own (the account moving bytes
   from one rule to another at one point: in PyTorch the same tensors); gradients may take over
   several (backward's per-layer gradients becoming one rule's lump: DeepSpeed's gradients not yet
   moved, the step's gradients), the rest allocated. What is left is asked of the allocator once
   the slot's other frees are given back. */
typedef struct {
    uint64_t size;
    uint16_t rule;
    uint8_t term;
} StepReq;

/* The released block at position k of the slot's list becomes rule's, live again. */
static void adopt(StepAllocRun *R, int k, uint16_t rule) {
    StepBlock *b = &R->b[R->released.v[k]];
    idx_remove(&R->released, k);
    b->state = BLK_LIVE;
    b->rule = rule;
    idx_insert(R, &R->live[rule][b->term], b->id);
}

/* The live block at position k of its rule's list is released in this slot. */
static void release(StepAllocRun *R, BlockIdx *live, int k) {
    StepBlock *b = &R->b[live->v[k]];
    idx_remove(live, k);
    b->state = BLK_RELEASED;
    idx_insert(R, &R->released, b->id);
}

static int take_over(StepAllocRun *R, StepReq *q) {
    uint64_t *d = &R->debt[q->rule][q->term], pay = *d < q->size ? *d : q->size;
    *d -= pay;
    q->size -= pay;
    if (!q->size) return 1;
    BlockIdx *rel = &R->released;
    for (int k = rel->n - 1; k >= 0; k--) {
        const StepBlock *b = &R->b[rel->v[k]];
        if (b->term == q->term && b->held == q->size) {
            adopt(R, k, q->rule);
            return 1;
        }
    }
    if (q->term != TERM_GRADS) return 0;
    for (int k = rel->n - 1; k >= 0 && q->size; k--) {
        const StepBlock *b = &R->b[rel->v[k]];
        if (b->term == q->term && b->held <= q->size) {
            q->size -= b->held;
            adopt(R, k, q->rule);
        }
    }
    return q->size == 0;
}

/* A free: the latest live block of the rule and term holding exactly these bytes is released;
   else the latest ones until the bytes are covered, the last one perhaps in part (it stays,
   holding fewer bytes); bytes with no block left become the rule's debt. */
static void run_free(StepAllocRun *R, uint16_t rule, uint8_t term, uint64_t size) {
    BlockIdx *live = &R->live[rule][term];
    for (int k = live->n - 1; k >= 0; k--)
        if (R->b[live->v[k]].held == size) {
            release(R, live, k);
            return;
        }
    for (int k = live->n - 1; k >= 0 && size > 0; k--) {
        StepBlock *b = &R->b[live->v[k]];
        if (b->held > size) { b->held -= size; return; }
        size -= b->held;
        release(R, live, k);
    }
    R->debt[rule][term] += size;
}

/* The slot's released blocks go back to the allocator, oldest first. */
static void give_back(StepAllocRun *R) {
    for (int k = 0; k < R->released.n; k++) {
        StepBlock *b = &R->b[R->released.v[k]];
        b->state = BLK_FREED;
        plan_alloc_free(R->a, b->id);   /* -1 for a handle that ran out of memory */
    }
    R->released.n = 0;
}

/* The pieces an event stands for: one, or for a rule whose bytes are per-parameter tensors
   (st->split_rule) one per layer with parameters, in proportion to its parameters (of total, the
   model's; rounded up, so the pieces cover the bytes). Returns the count; pieces[] holds
   m->n_layers at most. */
static int pieces_of(const Step *st, const ModelSpec *m, double total, const StepMem *x, uint64_t *pieces) {
    double bytes = fabs(x->bytes);
    int n = 0;
    if (st->split_rule[x->rule] && total > 0)
        for (int i = 0; i < m->n_layers; i++)
            if (m->layers[i].params > 0) pieces[n++] = (uint64_t)ceil(bytes * (double)m->layers[i].params / total);
    if (n == 0) pieces[n++] = (uint64_t)ceil(bytes);
    return n;
}

static int add_req(StepReq **v, int *n, int *cap, StepReq q) {
    if (plan_grow((void **)v, cap, *n + 1, sizeof **v)) return -1;
    (*v)[(*n)++] = q;
    return 0;
}

/* The replay's input as a list: each piece freed or asked for, in step order, and the end of
   each slot. Every byte is a field (no padding), so two lists compare with memcmp. */
enum { OP_FREE, OP_ALLOC, OP_SLOT };
typedef struct {
    uint64_t size;
    uint16_t rule;
    uint8_t term, kind;
    uint32_t zero;
} StepOp;

typedef struct {
    StepOp *v;
    int n, cap;
} OpList;

static int list_ops(const Step *st, OpList *ops) {
    const ModelSpec *m = &st->view.m;
    int *idx = plan_step_order_events(st);
    uint64_t *pc = malloc(sizeof(uint64_t) * (size_t)(m && m->n_layers > 0 ? m->n_layers : 1));
    double total = m ? (double)plan_model_params(m) : 0;
    int rc = !idx || !pc ? -1 : 0;
    ops->n = 0;
    for (int e0 = 0, e1; e0 < st->n_mem && !rc; e0 = e1) {
        const StepMem *first = &st->mem[idx[e0]];
        for (e1 = e0; e1 < st->n_mem && st->mem[idx[e1]].point == first->point && st->mem[idx[e1]].when == first->when; e1++) {}
        for (int e = e0; e < e1 && !rc; e++) {
            const StepMem *x = &st->mem[idx[e]];
            if (x->term == TERM_OVERHEAD) continue;   /* fixed overheads: no tensor */
            int np = pieces_of(st, m, total, x, pc);
            if (plan_grow((void **)&ops->v, &ops->cap, ops->n + np + 1, sizeof *ops->v)) rc = -1;
            for (int k = 0; k < np && !rc; k++)
                ops->v[ops->n++] = (StepOp){pc[k], x->rule, x->term, x->bytes < 0 ? OP_FREE : OP_ALLOC, 0};
        }
        if (!rc && plan_grow((void **)&ops->v, &ops->cap, ops->n + 1, sizeof *ops->v)) rc = -1;
        if (!rc) ops->v[ops->n++] = (StepOp){0, 0, 0, OP_SLOT, 0};
    }
    free(idx);
    free(pc);
    return rc;
}

/* One slot at a time (a point, before or after its moment): its frees, then its allocations. */
static int replay_ops(const OpList *ops, const PlanAllocConfig *conf, PlanAllocStats *out) {
    StepAllocRun R;
    memset(&R, 0, sizeof(R));
    R.a = plan_alloc_new(conf);
    StepReq *req = NULL;
    int nreq = 0, capreq = 0;
    if (!R.a) R.failed = 1;
    for (int o = 0; o < ops->n && !R.failed; o++) {
        const StepOp *x = &ops->v[o];
        if (x->kind == OP_FREE) run_free(&R, x->rule, x->term, x->size);
        else if (x->kind == OP_ALLOC) {
            if (add_req(&req, &nreq, &capreq, (StepReq){x->size, x->rule, x->term})) R.failed = 1;
        } else {
            int left = 0;
            for (int k = 0; k < nreq; k++)
                if (!take_over(&R, &req[k])) req[left++] = req[k];
            give_back(&R);
            for (int k = 0; k < left; k++) run_malloc(&R, req[k].rule, req[k].term, req[k].size);
            nreq = 0;
        }
    }
    if (R.a) *out = *plan_alloc_stats(R.a);
    int failed = R.failed;
    plan_alloc_free_all(R.a);
    free(R.b);
    free(R.released.v);
    for (int r = 0; r < RULE_COUNT; r++)
        for (int k = 0; k < TERM_COUNT; k++) free(R.live[r][k].v);
    free(req);
    return failed ? -1 : 0;
}

static int conf_equal(const PlanAllocConfig *x, const PlanAllocConfig *y) {
    for (int i = 0; i < PLAN_ALLOC_INTERVALS; i++)
        if (x->roundup_divisions[i] != y->roundup_divisions[i]) return 0;
    return x->max_split_size == y->max_split_size && x->max_non_split_rounding == y->max_non_split_rounding &&
           x->large_segment_size == y->large_segment_size && x->gc_threshold == y->gc_threshold &&
           x->expandable_segments == y->expandable_segments && x->memory_fraction == y->memory_fraction &&
           x->device_total == y->device_total && x->capacity == y->capacity;
}

/* The last replays, per thread: a replay's figures are a function of its operations and the
   allocator's settings alone, and the searches repeat some (a plan's row at micro-batch 1 and
   its max-micro-batch walk at 1; strategies whose steps allocate alike). A hit compares the
   whole list, not a hash. The lists stay allocated for the thread's life (8 of a few
   thousand operations). */
#define STEP_MEMO 8
typedef struct {
    OpList ops;
    PlanAllocConfig conf;
    PlanAllocStats out;
    int used;
} StepMemo;
static _Thread_local StepMemo memo[STEP_MEMO];
static _Thread_local int memo_next;
static _Thread_local OpList memo_ops;   /* the list being looked up */

int plan_step_alloc(const Step *st, const PlanAllocConfig *conf, PlanAllocStats *out) {
    memset(out, 0, sizeof(*out));
    OpList *ops = &memo_ops;
    if (list_ops(st, ops)) return -1;
    for (int k = 0; k < STEP_MEMO; k++) {
        const StepMemo *h = &memo[k];
        if (h->used && h->ops.n == ops->n && conf_equal(&h->conf, conf) &&
            !memcmp(h->ops.v, ops->v, sizeof *ops->v * (size_t)ops->n)) {
            *out = h->out;
            return 0;
        }
    }
    if (replay_ops(ops, conf, out)) return -1;
    StepMemo *h = &memo[memo_next];
    if (!plan_grow((void **)&h->ops.v, &h->ops.cap, ops->n > 0 ? ops->n : 1, sizeof *ops->v)) {
        memcpy(h->ops.v, ops->v, sizeof *ops->v * (size_t)ops->n);
        h->ops.n = ops->n;
        h->conf = *conf;
        h->out = *out;
        h->used = 1;
        memo_next = (memo_next + 1) % STEP_MEMO;
    }
    return 0;
}

/* With the allocator model (c->alloc_model), the allocator's share of the overhead is one figure
   for the step: the replay's max reserved less the account's tensor peak, added at every moment
   as a fixed margin would be, so the peak moment and the tensors are the account's and the
   peak's total is max reserved + the fixed overheads. The replay runs against the GPU's memory
   less the fixed overheads (so free-and-retry acts as it would); if it still runs out, the
   figures are those of the least capacity with which it does not (above the GPU's memory: the
   plan does not fit, and says by how much).
   fits_only: the caller needs only whether the peak fits c->gpu.mem_bytes. The allocator's share
   is never negative (max reserved >= max allocated >= the tensors), so a step whose tensors and
   fixed overheads alone exceed the GPU does not fit, and the replay is skipped; and once the
   capacity search has seen every capacity up to the GPU's run out, its answer lies above it (a
   replay that does not run out with reserved <= the GPU's capacity would be the same replay as
   at that capacity, which ran out), so the search stops. Returns 1 when it stopped early (r
   holds only the tensor peak), else 0 with r filled as without fits_only. */
static int replay_alloc(const Step *st, const ClusterSpec *c, MemResult *r, MemMomentFn fn, void *ctx, int fits_only) {
    if (!c->alloc_model) { plan_step_replay_tensors(st, c, r, fn, ctx); return 0; }
    ClusterSpec flat = *c;
    flat.alloc_model = 0;
    flat.alloc_margin = 0;
    flat.margin_is_frac = 0;
    MemResult r0;
    memset(&r0, 0, sizeof(r0));
    plan_step_replay_tensors(st, &flat, &r0, NULL, NULL);
    double tensors = r0.peak > st->fixed ? r0.peak - st->fixed : 0;
    if (fits_only && r0.peak > c->gpu.mem_bytes) { r->peak = r0.peak; return 1; }
    PlanAllocConfig conf = c->alloc_conf;
    double cap = c->gpu.mem_bytes - st->fixed;
    conf.device_total = c->gpu.mem_bytes > 0 && c->gpu.mem_bytes < 0x1p63 ? (uint64_t)c->gpu.mem_bytes : 0;
    conf.capacity = cap >= 1 && cap < 0x1p63 ? (uint64_t)cap : 0;
    PlanAllocStats s;
    int failed = plan_step_alloc(st, &conf, &s);
    int oom = !failed && s.n_ooms > 0;
    if (oom) {
        /* what the step needs: the least capacity with which the allocator, freeing its cache
           and retrying as it does, does not run out; between the most it holds allocated and
           what it reserves with no limit (it never frees then), to 1/64 of that range or 2 MiB
           (six replays at most: a plan that does not fit is searched over often) */
        PlanAllocStats t;
        uint64_t gpu = conf.capacity;
        conf.capacity = 0;
        failed = plan_step_alloc(st, &conf, &s);
        /* the early stop needs the unlimited replay not to run out (a memory fraction can) */
        int stop = fits_only && gpu > 0 && !failed && s.n_ooms == 0;
        uint64_t lo = s.max_allocated, hi = s.max_reserved, tol = (hi - lo) / 64;
        if (tol < (2u << 20)) tol = 2u << 20;
        while (!failed && hi - lo > tol) {
            if (stop && lo >= gpu) { r->peak = r0.peak; return 1; }
            conf.capacity = lo + (hi - lo) / 2;
            failed = plan_step_alloc(st, &conf, &t);
            if (failed) break;
            if (t.n_ooms) lo = conf.capacity;
            else { hi = conf.capacity; s = t; }
        }
    }
    if (failed) {   /* out of host memory: the flat margin, said so by alloc_model = 0 */
        flat.alloc_margin = PLAN_ALLOC_MARGIN_FRAC;
        flat.margin_is_frac = 1;
        plan_step_replay_tensors(st, &flat, r, fn, ctx);
        return 0;
    }
    double over = (double)s.max_reserved - tensors;
    flat.alloc_margin = over > 0 ? over : 0;
    plan_step_replay_tensors(st, &flat, r, fn, ctx);
    r->alloc_model = 1;
    r->alloc_tensor_peak = tensors;
    r->alloc_allocated = (double)s.max_allocated;
    r->alloc_reserved = (double)s.max_reserved;
    r->alloc_segments = s.max_segments;
    r->alloc_oom = oom;
    return 0;
}

void plan_step_replay(const Step *st, const ClusterSpec *c, MemResult *r, MemMomentFn fn, void *ctx) {
    replay_alloc(st, c, r, fn, ctx, 0);
}

int plan_step_replay_fits(const Step *st, const ClusterSpec *c, MemResult *r, MemMomentFn fn, void *ctx) {
    return replay_alloc(st, c, r, fn, ctx, 1);
}
