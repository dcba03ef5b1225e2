/* exec_strategy.c — DDP and ZeRO-1/2/3 on any model runtime behind exec_model.h; the mechanics
 * are described in exec_strategy.h. Element counts are fp32 elements unless a name says bytes.
 *
 * Collectives are timed for the trace from issue to the poll that first saw them complete: the
 * comm counters count a collective when it completes, so after every comm_progress/comm_wait
 * the newly counted ones close the oldest open span of their type (collectives of one type on
 * one communicator complete in issue order).
 *
 * Buffers live on the model's device (exec_strategy_set_device): on the host, copies are
 * memcpy, zeroing memset and shard accumulation a loop, as they always were; on a GPU the same
 * operations are stream-ordered on the device's compute stream (exec_device_copy/memset, the
 * kernel table's add), and the collectives run on the comm stream, each ordered after the
 * compute work queued before it (comm_set_after_stream), completed by host polling. A buffer
 * that a collective reads or writes is touched by compute again only after comm_wait saw that
 * collective complete, so the host program order is the order on the GPU. */
#include "exec_strategy.h"
#include "exec_device.h"
#include "exec_kern.h"
#include "exec_step.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const NAMES[EXEC_STRATEGY_COUNT] = {"ddp", "zero1", "zero2", "zero3"};

const char *exec_strategy_name(ExecStrategyKind k)
{
    return (unsigned)k < EXEC_STRATEGY_COUNT ? NAMES[k] : "unknown";
}

int exec_strategy_by_name(const char *name)
{
    for (int i = 0; name && i < EXEC_STRATEGY_COUNT; i++)
        if (strcmp(name, NAMES[i]) == 0) return i;
    return -1;
}

/* A piece of the model that is sharded as one flat array: one unit (ZeRO-1/2, ZeRO-3 blocks)
 * or the root, the model's root units concatenated (ZeRO-3; GPT-2: units 0 and L+1). */
typedef struct {
    int unit[2];
    size_t part[2];          /* elements of each unit */
    int nparts;
    size_t len;              /* Σ parts */
    size_t shard;            /* ⌈len/N⌉: every rank's shard, padded */
    size_t my_off, my_len;   /* this rank's real elements [my_off, my_off + my_len) */
    size_t soff;             /* offset of this shard unit in the rank's shard storage */
    size_t goff;             /* ZeRO-3: its region (N·shard) in the reduce buffer */
    size_t boff;             /* ZeRO-1/2: offset inside a rank block of its bucket */
    int bucket;              /* ZeRO-1/2: reduce bucket */
    float *gathered;         /* ZeRO-3: full weights (N·shard), NULL when not gathered */
    CommReq *ag, *rs;        /* ZeRO-3: gather and reduce-scatter in flight */
} ShardUnit;

/* A ZeRO-1/2 reduce bucket: shard units order[first..last] (gradient-ready order). */
typedef struct {
    int first, last;
    size_t S;                /* elements of one rank block: Σ shard of its units */
} ReduceBucket;

typedef struct {
    CollKind op;
    double t0_us;
    char label[40];
} OpenSpan;
#define MAX_OPEN_SPANS 1024

struct ExecStrategy {
    ExecStrategyKind kind;
    ExecStrategyOptions opt;
    Device *dev;             /* where the buffers live; NULL: host */
    int gpu;                 /* dev is a CUDA device */
    const ExecKernels *k;    /* its kernels (add) */
    int plain;               /* one rank: the plain replica */
    Comm *comm;
    MemTracker *mt;
    CommCounters *cc;
    PhaseTimer *pt;
    int N, rank, nunits;
    size_t *numel;           /* per unit */
    ExecModel *m;
    int nroot, root[2];      /* the model's root units (exec_model_root_units) */
    int *u2su;               /* ZeRO-3: shard unit of each model unit */
    int blk0;                /* ZeRO-3: first block shard unit (1 with a root, else 0) */
    int sync;                /* this micro-step reduces */
    char err[256];
    /* collective spans */
    OpenSpan open[MAX_OPEN_SPANS];
    int nopen;
    int64_t seen[COLL_COUNT];
    /* DDP */
    int nb;
    float **bucket;
    size_t *b_off, *b_len, *b_fill;   /* in the flat gradient-ready space */
    CommReq **b_req;
    size_t *u_flat;          /* per unit: offset in the flat space */
    /* ZeRO */
    int nsu;
    ShardUnit *su;
    int *order;              /* ZeRO-1/2: shard units in gradient-ready order */
    int *pos;                /* position of each shard unit in order */
    size_t S;                /* Σ shard: elements of the rank's shard storage */
    int nrb;
    ReduceBucket *rb;
    float *rbuf;             /* ZeRO-1/2 reduce bucket (rank-major), MEM_COMM */
    size_t rbuf_elems;
    int rb_pending;          /* bucket whose reduce-scatter is in flight, -1 if none */
    CommReq *rb_req;
    float **ugrad;           /* ZeRO-2: the unit's full gradient during its backward */
    float *gshard;           /* ZeRO-2/3: gradient shard, MEM_GRADS */
    float *pshard;           /* ZeRO-3: parameter shard, MEM_PARAMS */
    float *gbuf;             /* ZeRO-3: reduce buffer, MEM_COMM */
    size_t gbuf_elems;
};

static int fail(ExecStrategy *s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int fail(ExecStrategy *s, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(s->err, sizeof s->err, fmt, ap);
    va_end(ap);
    return -1;
}

const char *exec_strategy_error(const ExecStrategy *s) { return s->err; }

int exec_strategy_buckets(const ExecStrategy *s)
{
    if (s->plain) return 0;
    return s->kind == EXEC_DDP ? s->nb : s->kind == EXEC_ZERO3 ? s->nsu : s->nrb;
}

size_t exec_strategy_shard_elems(const ExecStrategy *s)
{
    if (s->plain || s->kind == EXEC_DDP) return s->m ? (size_t)exec_model_num_params(s->m) : 0;
    return s->S;
}

static float *talloc(ExecStrategy *s, MemCategory cat, size_t n, int zero, const char *what)
{
    size_t bytes = n * sizeof(float);
    float *p = zero ? prof_mem_calloc(s->mt, cat, bytes, what) : prof_mem_alloc(s->mt, cat, bytes, what);
    if (!p) fail(s, "out of memory: %s, %zu bytes of %s", what, bytes, prof_mem_category_name(cat));
    return p;
}

static void tfree(ExecStrategy *s, float **p)
{
    prof_mem_free(s->mt, *p);
    *p = NULL;
}

/* ---- buffer operations on the device (host: memcpy, memset, a loop) ---- */

static void s_copy(ExecStrategy *s, void *dst, const void *src, size_t bytes)
{
    if (s->gpu) exec_device_copy(s->dev, dst, src, bytes);
    else memcpy(dst, src, bytes);
}

static void s_zero(ExecStrategy *s, void *p, size_t bytes)
{
    if (s->gpu) exec_device_memset(s->dev, p, 0, bytes);
    else memset(p, 0, bytes);
}

/* dst[i] += src[i], i < n */
static int s_add(ExecStrategy *s, float *dst, const float *src, size_t n)
{
    if (s->k->add(dst, src, n, s->gpu ? exec_device_stream(s->dev) : NULL))
        return fail(s, "accumulating a gradient shard failed on rank %d (see the message above)", s->rank);
    return 0;
}

/* Fills dst (the device's memory) with elements offset .. offset+length-1 of unit u's seeded
 * initial parameters: directly on the host, through a host buffer on a GPU. */
static int init_range(ExecStrategy *s, int u, uint64_t seed, size_t offset, size_t length, float *dst)
{
    if (!s->gpu) return exec_model_init_unit_range(s->m, u, seed, offset, length, dst);
    float *h = malloc(length * sizeof *h);
    if (!h) return -1;
    int rc = exec_model_init_unit_range(s->m, u, seed, offset, length, h);
    if (!rc) s_copy(s, dst, h, length * sizeof *h);
    free(h);
    return rc || exec_device_failed(s->dev) ? -1 : 0;
}

/* ---- collectives: spans, polling, waiting ---- */

static void span_open(ExecStrategy *s, CollKind op, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void span_open(ExecStrategy *s, CollKind op, const char *fmt, ...)
{
    if (!s->pt || !s->cc || s->nopen >= MAX_OPEN_SPANS) return;
    OpenSpan *o = &s->open[s->nopen++];
    o->op = op;
    o->t0_us = prof_phase_now_us(s->pt);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(o->label, sizeof o->label, fmt, ap);
    va_end(ap);
}

/* Closes the spans of collectives the counters have seen complete since the last call. */
static void span_sync(ExecStrategy *s)
{
    if (!s->pt || !s->cc) return;
    for (int op = 0; op < COLL_COUNT; op++) {
        int64_t done = prof_comm_total(s->cc, (CollKind)op).count;
        for (; s->seen[op] < done; s->seen[op]++) {
            for (int i = 0; i < s->nopen; i++) {
                if (s->open[i].op != (CollKind)op) continue;
                double now = prof_phase_now_us(s->pt);
                prof_phase_record_span(s->pt, s->open[i].label, "comm", PHASE_LANE_COMM, s->open[i].t0_us,
                                       now - s->open[i].t0_us);
                memmove(&s->open[i], &s->open[i + 1], (size_t)(s->nopen - i - 1) * sizeof s->open[0]);
                s->nopen--;
                break;
            }
        }
    }
}

static void poll_comm(ExecStrategy *s)
{
    if (s->plain || comm_outstanding(s->comm) == 0) return;
    comm_progress(s->comm);
    span_sync(s);
}

static int wait_req(ExecStrategy *s, CommReq **r)
{
    if (!*r) return 0;
    if (s->pt) prof_phase_begin(s->pt, exec_phase_name(EXEC_PHASE_COMM_WAIT));
    int rc = comm_wait(s->comm, *r);
    *r = NULL;
    if (s->pt) prof_phase_end(s->pt, exec_phase_name(EXEC_PHASE_COMM_WAIT));
    span_sync(s);
    return rc ? fail(s, "a collective failed on rank %d (see the message above)", s->rank) : 0;
}

static int issued(ExecStrategy *s, int rc, const char *what)
{
    return rc ? fail(s, "could not start the %s on rank %d (see the message above)", what, s->rank) : 0;
}

/* ---- DDP ---- */

static int ddp_setup(ExecStrategy *s, const ExecStrategyOptions *o)
{
    size_t total = 0;
    s->u_flat = calloc((size_t)s->nunits, sizeof *s->u_flat);
    if (!s->u_flat) return fail(s, "out of host memory");
    for (int u = s->nunits - 1; u >= 0; u--) {   /* gradient-ready order: U-1, ..., 1, 0 */
        s->u_flat[u] = total;
        total += s->numel[u];
    }
    size_t first = (size_t)((o->first_bucket_bytes > 0 ? o->first_bucket_bytes : EXEC_DDP_FIRST_BUCKET_BYTES) / sizeof(float));
    size_t cap = (size_t)((o->bucket_bytes > 0 ? o->bucket_bytes : EXEC_DDP_BUCKET_BYTES) / sizeof(float));
    if (first < 1) first = 1;
    if (cap < 1) cap = 1;
    s->nb = total <= first ? 1 : 1 + (int)((total - first + cap - 1) / cap);
    s->bucket = calloc((size_t)s->nb, sizeof *s->bucket);
    s->b_off = calloc((size_t)s->nb, sizeof *s->b_off);
    s->b_len = calloc((size_t)s->nb, sizeof *s->b_len);
    s->b_fill = calloc((size_t)s->nb, sizeof *s->b_fill);
    s->b_req = calloc((size_t)s->nb, sizeof *s->b_req);
    if (!s->bucket || !s->b_off || !s->b_len || !s->b_fill || !s->b_req) return fail(s, "out of host memory");
    size_t off = 0;
    for (int b = 0; b < s->nb; b++) {
        size_t want = b == 0 ? first : cap;
        s->b_off[b] = off;
        s->b_len[b] = total - off < want ? total - off : want;
        off += s->b_len[b];
        char what[48];
        snprintf(what, sizeof what, "ddp bucket %d", b);
        if (!(s->bucket[b] = talloc(s, MEM_COMM, s->b_len[b], 0, what))) return -1;
    }
    return 0;
}

static int ddp_start_bucket(ExecStrategy *s, int b)
{
    if (issued(s, comm_all_reduce(s->comm, s->bucket[b], s->bucket[b], s->b_len[b], DT_F32, &s->b_req[b]),
               "gradient all-reduce"))
        return -1;
    span_open(s, COLL_ALL_REDUCE, "all_reduce bucket %d", b);
    return 0;
}

/* Copies unit u's gradients into the buckets; starts every bucket that became full. */
static int ddp_unit_ready(ExecStrategy *s, int u)
{
    const float *g = exec_model_unit_grads(s->m, u);
    if (!g) return fail(s, "ddp: unit %d has no gradients after its backward", u);
    size_t off = s->u_flat[u], n = s->numel[u];
    int b = 0;
    while (b < s->nb - 1 && s->b_off[b] + s->b_len[b] <= off) b++;
    while (n > 0) {
        size_t k = s->b_off[b] + s->b_len[b] - off;
        if (k > n) k = n;
        s_copy(s, s->bucket[b] + (off - s->b_off[b]), g, k * sizeof(float));
        s->b_fill[b] += k;
        if (s->b_fill[b] == s->b_len[b] && ddp_start_bucket(s, b)) return -1;
        off += k;
        g += k;
        n -= k;
        b++;
    }
    return 0;
}

static int ddp_end_backward(ExecStrategy *s)
{
    for (int b = 0; b < s->nb; b++) {
        if (s->b_fill[b] != s->b_len[b]) return fail(s, "ddp: bucket %d was not filled in backward", b);
        if (wait_req(s, &s->b_req[b])) return -1;
        s->b_fill[b] = 0;
    }
    /* the averaged gradients go back to the units (gradient_as_bucket_view=False) */
    for (int u = 0; u < s->nunits; u++) {
        float *g = exec_model_unit_grads(s->m, u);
        size_t off = s->u_flat[u], n = s->numel[u];
        int b = 0;
        while (b < s->nb - 1 && s->b_off[b] + s->b_len[b] <= off) b++;
        while (n > 0) {
            size_t k = s->b_off[b] + s->b_len[b] - off;
            if (k > n) k = n;
            s_copy(s, g, s->bucket[b] + (off - s->b_off[b]), k * sizeof(float));
            off += k;
            g += k;
            n -= k;
            b++;
        }
    }
    return 0;
}

/* ---- ZeRO: shard units ---- */

/* ZeRO-1/2: one shard unit per model unit. ZeRO-3: FSDP's wrapping, the root (the model's
 * root units together; none for a model without) and then every other unit in ascending order. */
static int shard_setup(ExecStrategy *s)
{
    int root = s->kind == EXEC_ZERO3 && s->nroot > 0;
    s->nsu = s->kind == EXEC_ZERO3 ? s->nunits - s->nroot + root : s->nunits;
    s->blk0 = root;
    s->su = calloc((size_t)s->nsu, sizeof *s->su);
    s->u2su = calloc((size_t)s->nunits, sizeof *s->u2su);
    if (!s->su || !s->u2su) return fail(s, "out of host memory");
    for (int i = 0, u = 0; i < s->nsu; i++) {
        ShardUnit *x = &s->su[i];
        if (root && i == 0) {   /* GPT-2: embeddings + final LayerNorm */
            x->nparts = s->nroot;
            for (int p = 0; p < s->nroot; p++) x->unit[p] = s->root[p];
        } else {
            while (root && (u == s->root[0] || (s->nroot > 1 && u == s->root[1]))) u++;
            x->nparts = 1;
            x->unit[0] = s->kind == EXEC_ZERO3 ? u++ : i;
        }
        for (int p = 0; p < x->nparts; p++) s->u2su[x->unit[p]] = i;
        for (int p = 0; p < x->nparts; p++) {
            x->part[p] = s->numel[x->unit[p]];
            x->len += x->part[p];
        }
        x->shard = (x->len + (size_t)s->N - 1) / (size_t)s->N;
        x->my_off = (size_t)s->rank * x->shard;
        x->my_len = x->my_off >= x->len ? 0 : (x->len - x->my_off < x->shard ? x->len - x->my_off : x->shard);
        x->soff = s->S;
        s->S += x->shard;
    }
    return 0;
}

/* Real elements of rank q's shard of x. */
static size_t shard_len(const ShardUnit *x, int q)
{
    size_t off = (size_t)q * x->shard;
    return off >= x->len ? 0 : (x->len - off < x->shard ? x->len - off : x->shard);
}

/* ---- ZeRO-1/2: rank-major reduce buckets ---- */

static int zero12_setup(ExecStrategy *s, const ExecStrategyOptions *o)
{
    double cap = o->reduce_bucket_elems > 0 ? o->reduce_bucket_elems : EXEC_ZERO_REDUCE_BUCKET_ELEMS;
    s->order = calloc((size_t)s->nsu, sizeof *s->order);
    s->pos = calloc((size_t)s->nsu, sizeof *s->pos);
    s->rb = calloc((size_t)s->nsu, sizeof *s->rb);
    if (!s->order || !s->pos || !s->rb) return fail(s, "out of host memory");
    for (int k = 0; k < s->nsu; k++) {   /* gradient-ready order: L+1, L, ..., 0 */
        s->order[k] = s->nsu - 1 - k;
        s->pos[s->order[k]] = k;
    }
    /* Whole units per bucket, up to cap elements (a larger unit gets a bucket of its own). */
    s->nrb = 0;
    for (int k = 0; k < s->nsu; k++) {
        ShardUnit *x = &s->su[s->order[k]];
        ReduceBucket *b = s->nrb ? &s->rb[s->nrb - 1] : NULL;
        if (!b || (b->S > 0 && (double)(b->S + x->shard) * s->N > cap)) {
            b = &s->rb[s->nrb++];
            b->first = k;
            b->S = 0;
        }
        x->bucket = (int)(b - s->rb);
        x->boff = b->S;
        b->S += x->shard;
        b->last = k;
    }
    for (int b = 0; b < s->nrb; b++)
        if (s->rb[b].S * (size_t)s->N > s->rbuf_elems) s->rbuf_elems = s->rb[b].S * (size_t)s->N;
    s->rb_pending = -1;
    if (!(s->rbuf = talloc(s, MEM_COMM, s->rbuf_elems, 0, "zero reduce bucket"))) return -1;
    if (s->kind == EXEC_ZERO2) {
        s->ugrad = calloc((size_t)s->nunits, sizeof *s->ugrad);
        if (!s->ugrad) return fail(s, "out of host memory");
        if (!(s->gshard = talloc(s, MEM_GRADS, s->S, 1, "grads shard"))) return -1;
    }
    return 0;
}

/* The averaged shard of bucket b (first rank block after the in-place reduce-scatter) goes to
 * this rank's gradients: ZeRO-1 replaces its range of the full gradients, ZeRO-2 accumulates
 * into the gradient shard. */
static int zero12_consume(ExecStrategy *s)
{
    int b = s->rb_pending;
    if (b < 0) return 0;
    if (wait_req(s, &s->rb_req)) return -1;
    s->rb_pending = -1;
    for (int k = s->rb[b].first; k <= s->rb[b].last; k++) {
        ShardUnit *x = &s->su[s->order[k]];
        const float *res = s->rbuf + x->boff;
        if (s->kind == EXEC_ZERO1) s_copy(s, exec_model_unit_grads(s->m, x->unit[0]) + x->my_off, res, x->my_len * sizeof(float));
        else if (s_add(s, s->gshard + x->soff, res, x->my_len)) return -1;
    }
    return 0;
}

/* Scatters unit u's full gradient into its bucket, rank block by rank block (zero padding);
 * the bucket's last unit starts its reduce-scatter. */
static int zero12_unit_ready(ExecStrategy *s, int u)
{
    ShardUnit *x = &s->su[u];
    ReduceBucket *b = &s->rb[x->bucket];
    if (s->pos[u] == b->first && zero12_consume(s)) return -1;   /* the buffer is reused */
    const float *g = s->kind == EXEC_ZERO2 ? s->ugrad[u] : exec_model_unit_grads(s->m, u);
    if (!g) return fail(s, "%s: unit %d has no gradients after its backward", NAMES[s->kind], u);
    for (int q = 0; q < s->N; q++) {
        float *dst = s->rbuf + (size_t)q * b->S + x->boff;
        size_t n = shard_len(x, q);
        s_copy(s, dst, g + (size_t)q * x->shard, n * sizeof(float));
        s_zero(s, dst + n, (x->shard - n) * sizeof(float));
    }
    if (s->kind == EXEC_ZERO2) {   /* the full gradient is gone once it is in the bucket */
        exec_model_set_unit_grads(s->m, u, NULL);
        tfree(s, &s->ugrad[u]);
    }
    if (s->pos[u] == b->last) {
        if (issued(s, comm_reduce_scatter(s->comm, s->rbuf, s->rbuf, b->S, DT_F32, &s->rb_req),
                   "gradient reduce-scatter"))
            return -1;
        span_open(s, COLL_REDUCE_SCATTER, "reduce_scatter bucket %d", x->bucket);
        s->rb_pending = x->bucket;
    }
    return 0;
}

static int zero12_step(ExecStrategy *s, const ExecAdamW *opt, int t)
{
    for (int i = 0; i < s->nsu; i++) {
        ShardUnit *x = &s->su[i];
        float *p = exec_model_unit_params(s->m, x->unit[0]) + x->my_off;
        float *g = s->kind == EXEC_ZERO2 ? s->gshard + x->soff : exec_model_unit_grads(s->m, x->unit[0]) + x->my_off;
        if (exec_model_adamw_step_unit(s->m, x->unit[0], p, g, x->my_len, opt, t))
            return fail(s, "%s", exec_model_error(s->m));
    }
    /* every rank's updated shard, one all-gather per bucket through the bucket buffer */
    for (int bi = 0; bi < s->nrb; bi++) {
        ReduceBucket *b = &s->rb[bi];
        float *mine = s->rbuf + (size_t)s->rank * b->S;
        for (int k = b->first; k <= b->last; k++) {
            ShardUnit *x = &s->su[s->order[k]];
            s_copy(s, mine + x->boff, exec_model_unit_params(s->m, x->unit[0]) + x->my_off, x->my_len * sizeof(float));
            s_zero(s, mine + x->boff + x->my_len, (x->shard - x->my_len) * sizeof(float));
        }
        CommReq *r = NULL;
        if (issued(s, comm_all_gather(s->comm, mine, s->rbuf, b->S, DT_F32, &r), "parameter all-gather"))
            return -1;
        span_open(s, COLL_ALL_GATHER, "all_gather params bucket %d", bi);
        if (wait_req(s, &r)) return -1;
        for (int k = b->first; k <= b->last; k++) {
            ShardUnit *x = &s->su[s->order[k]];
            float *p = exec_model_unit_params(s->m, x->unit[0]);
            for (int q = 0; q < s->N; q++)
                s_copy(s, p + (size_t)q * x->shard, s->rbuf + (size_t)q * b->S + x->boff, shard_len(x, q) * sizeof(float));
        }
    }
    return 0;
}

/* ---- ZeRO-3: just-in-time gathers, in-place gradient regions ---- */

static int zero3_setup(ExecStrategy *s)
{
    s->gbuf_elems = 0;
    for (int i = 0; i < s->nsu; i++) {
        s->su[i].goff = s->gbuf_elems;
        s->gbuf_elems += s->su[i].shard * (size_t)s->N;
    }
    if (!(s->pshard = talloc(s, MEM_PARAMS, s->S, 1, "params shard"))) return -1;
    if (!(s->gshard = talloc(s, MEM_GRADS, s->S, 1, "grads shard"))) return -1;
    if (!(s->gbuf = talloc(s, MEM_COMM, s->gbuf_elems, 1, "zero3 reduce buffer"))) return -1;
    return 0;
}

/* The model unit that brackets each pass (GPT-2: unit 0), -1 without a root; a root unit that
 * does not bracket (GPT-2's final LayerNorm, unit L+1) needs nothing of its own hooks. */
static int z3_bracket(const ExecStrategy *s) { return s->nroot > 0 ? s->root[0] : -1; }
static int z3_other_root(const ExecStrategy *s, int u) { return s->nroot > 1 && u == s->root[1]; }

static int z3_gather(ExecStrategy *s, int i)
{
    ShardUnit *x = &s->su[i];
    if (x->gathered) return 0;
    char what[48];
    snprintf(what, sizeof what, i == 0 ? "gathered params (root)" : "gathered params (unit %d)", i);
    if (!(x->gathered = talloc(s, MEM_COMM, x->shard * (size_t)s->N, 0, what))) return -1;
    if (issued(s, comm_all_gather(s->comm, s->pshard + x->soff, x->gathered, x->shard, DT_F32, &x->ag),
               "parameter all-gather"))
        return -1;
    span_open(s, COLL_ALL_GATHER, i == 0 ? "all_gather root" : "all_gather unit %d", i);
    return 0;
}

/* Waits for shard unit i's weights and lends them to the model. */
static int z3_present(ExecStrategy *s, int i)
{
    ShardUnit *x = &s->su[i];
    if (z3_gather(s, i) || wait_req(s, &x->ag)) return -1;
    size_t off = 0;
    for (int p = 0; p < x->nparts; off += x->part[p], p++)
        exec_model_set_unit_params(s->m, x->unit[p], x->gathered + off);
    return 0;
}

static int z3_release(ExecStrategy *s, int i)
{
    ShardUnit *x = &s->su[i];
    if (wait_req(s, &x->ag)) return -1;
    for (int p = 0; p < x->nparts; p++) exec_model_set_unit_params(s->m, x->unit[p], NULL);
    tfree(s, &x->gathered);
    return 0;
}

static int z3_reduce(ExecStrategy *s, int i)
{
    ShardUnit *x = &s->su[i];
    float *region = s->gbuf + x->goff;
    if (issued(s, comm_reduce_scatter(s->comm, region, region, x->shard, DT_F32, &x->rs), "gradient reduce-scatter"))
        return -1;
    span_open(s, COLL_REDUCE_SCATTER, i == 0 ? "reduce_scatter root" : "reduce_scatter unit %d", i);
    return 0;
}

static int z3_end_backward(ExecStrategy *s)
{
    for (int k = 0; k < s->nsu; k++) {   /* the blocks were issued last to first, the root last */
        int i = k < s->nsu - s->blk0 ? s->nsu - 1 - k : 0;
        ShardUnit *x = &s->su[i];
        if (!x->rs) return fail(s, "zero3: shard unit %d was not reduced in backward", i);
        if (wait_req(s, &x->rs)) return -1;
        if (s_add(s, s->gshard + x->soff, s->gbuf + x->goff, x->my_len)) return -1;
    }
    return 0;
}

static int zero3_bind(ExecStrategy *s, uint64_t seed)
{
    for (int u = 0; u < s->nunits; u++) {   /* gradients are computed in the reduce regions */
        ShardUnit *x = &s->su[s->u2su[u]];
        size_t off = x->goff;
        for (int p = 0; p < x->nparts && x->unit[p] != u; p++) off += x->part[p];
        if (exec_model_set_unit_grads(s->m, u, s->gbuf + off)) return fail(s, "%s", exec_model_error(s->m));
    }
    for (int i = 0; i < s->nsu; i++) {       /* this rank's shard of the seeded init */
        ShardUnit *x = &s->su[i];
        size_t base = 0;
        for (int p = 0; p < x->nparts; base += x->part[p], p++) {
            size_t lo = x->my_off > base ? x->my_off : base;
            size_t hi = x->my_off + x->my_len < base + x->part[p] ? x->my_off + x->my_len : base + x->part[p];
            if (lo < hi && init_range(s, x->unit[p], seed, lo - base, hi - lo, s->pshard + x->soff + (lo - x->my_off)))
                return fail(s, "cannot initialise unit %d", x->unit[p]);
        }
    }
    return 0;
}

/* ---- hooks ---- */

/* DDP (broadcast_buffers=True): rank 0's buffers (BN running statistics) to every rank at the
 * start of each forward, one broadcast of the flat buffer array. */
static int ddp_broadcast_buffers(ExecStrategy *s)
{
    size_t n = 0;
    float *b = exec_model_buffers(s->m, &n);
    if (!b || n == 0) return 0;
    span_open(s, COLL_BROADCAST, "broadcast buffers");
    if (comm_broadcast(s->comm, b, n, DT_F32, 0))
        return fail(s, "the buffer broadcast failed on rank %d (see the message above)", s->rank);
    span_sync(s);
    return 0;
}

/* ZeRO-3 at the start of a pass: the first two blocks of the pass (forward: ascending, backward:
 * descending) in flight, the gathered one and the prefetched next. */
static int z3_prefetch_first(ExecStrategy *s, int backward)
{
    int last = s->nsu - 1;
    for (int k = 0; k < 2; k++) {
        int i = backward ? last - k : s->blk0 + k;
        if (i >= s->blk0 && i <= last && z3_gather(s, i)) return -1;
    }
    return 0;
}

static int hook_before_fwd(void *ctx, ExecModel *m, int u)
{
    ExecStrategy *s = ctx;
    (void)m;
    poll_comm(s);
    if (s->kind == EXEC_DDP && u == 0) return ddp_broadcast_buffers(s);
    if (s->kind != EXEC_ZERO3 || z3_other_root(s, u)) return 0;
    int i = s->u2su[u];
    if (z3_present(s, i)) return -1;
    if (u == z3_bracket(s) || (z3_bracket(s) < 0 && i == s->blk0)) return z3_prefetch_first(s, 0);
    return 0;
}

static int hook_after_fwd(void *ctx, ExecModel *m, int u)
{
    ExecStrategy *s = ctx;
    (void)m;
    if (s->kind == EXEC_ZERO3) {
        int i = s->u2su[u];
        if (u == z3_bracket(s)) {
            if (z3_release(s, i)) return -1;
        } else if (!z3_other_root(s, u) && (z3_release(s, i) || (i + 2 < s->nsu && z3_gather(s, i + 2)))) {
            return -1;
        }
    }
    poll_comm(s);
    return 0;
}

static int hook_before_bwd(void *ctx, ExecModel *m, int u)
{
    ExecStrategy *s = ctx;
    poll_comm(s);
    if (s->kind == EXEC_ZERO2) {
        if (!(s->ugrad[u] = talloc(s, MEM_GRADS, s->numel[u], 1, u == 0 ? "grads (unit 0, in backward)" : "grads (unit in backward)")))
            return -1;
        return exec_model_set_unit_grads(m, u, s->ugrad[u]);
    }
    if (s->kind != EXEC_ZERO3 || z3_other_root(s, u)) return 0;
    int i = s->u2su[u];
    ShardUnit *x = &s->su[i];
    s_zero(s, s->gbuf + x->goff, x->shard * (size_t)s->N * sizeof(float));
    if (z3_present(s, i)) return -1;
    if (u == z3_bracket(s) || (z3_bracket(s) < 0 && i == s->nsu - 1)) return z3_prefetch_first(s, 1);
    return 0;
}

static int hook_after_bwd(void *ctx, ExecModel *m, int u)
{
    ExecStrategy *s = ctx;
    (void)m;
    int rc = 0;
    switch (s->kind) {
    case EXEC_DDP:
        if (s->sync) rc = ddp_unit_ready(s, u);
        break;
    case EXEC_ZERO1:
    case EXEC_ZERO2:
        if (s->sync) rc = zero12_unit_ready(s, u);
        break;
    case EXEC_ZERO3: {
        int i = s->u2su[u];
        if (u == z3_bracket(s)) rc = z3_reduce(s, i) || z3_release(s, i);
        else if (!z3_other_root(s, u))
            rc = z3_release(s, i) || z3_reduce(s, i) || (i - 2 >= s->blk0 && z3_gather(s, i - 2));
        break;
    }
    default: break;
    }
    poll_comm(s);
    return rc ? -1 : 0;
}

void exec_strategy_hooks(const ExecStrategy *s, ExecHooks *h)
{
    memset(h, 0, sizeof *h);
    if (s->plain) return;
    h->before_unit_forward = hook_before_fwd;
    h->after_unit_forward = hook_after_fwd;
    h->before_unit_backward = hook_before_bwd;
    h->after_unit_backward = hook_after_bwd;
    h->external_params = s->kind == EXEC_ZERO3;
}

/* ---- lifecycle ---- */

int exec_strategy_create(ExecStrategy **out, const ExecStrategyOptions *o, Comm *comm, MemTracker *mt,
                         CommCounters *counters, PhaseTimer *pt, char *err, size_t errlen)
{
    *out = NULL;
    ExecStrategy *s = calloc(1, sizeof *s);
    if (!s) {
        if (err && errlen) snprintf(err, errlen, "out of host memory");
        return -1;
    }
    if (!o || (unsigned)o->kind >= EXEC_STRATEGY_COUNT) {
        fail(s, "unknown strategy (valid: ddp, zero1, zero2, zero3)");
        if (err && errlen) snprintf(err, errlen, "%s", s->err);
        exec_strategy_destroy(s);
        return -1;
    }
    s->kind = o->kind;
    s->opt = *o;
    s->comm = comm;
    s->mt = mt;
    s->cc = counters;
    s->pt = pt;
    s->N = comm_size(comm);
    s->rank = comm_rank(comm);
    s->plain = s->N == 1;
    s->sync = 1;
    exec_strategy_set_device(s, NULL);
    for (int op = 0; op < COLL_COUNT && counters; op++) s->seen[op] = prof_comm_total(counters, (CollKind)op).count;
    *out = s;
    return 0;
}

void exec_strategy_destroy(ExecStrategy *s)
{
    if (!s) return;
    for (int b = 0; b < s->nb && s->bucket; b++) prof_mem_free(s->mt, s->bucket[b]);
    for (int i = 0; i < s->nsu && s->su; i++) prof_mem_free(s->mt, s->su[i].gathered);
    for (int u = 0; u < s->nunits && s->ugrad; u++) prof_mem_free(s->mt, s->ugrad[u]);
    prof_mem_free(s->mt, s->rbuf);
    prof_mem_free(s->mt, s->gshard);
    prof_mem_free(s->mt, s->pshard);
    prof_mem_free(s->mt, s->gbuf);
    free(s->bucket); free(s->b_off); free(s->b_len); free(s->b_fill); free(s->b_req); free(s->u_flat);
    free(s->su); free(s->u2su); free(s->order); free(s->pos); free(s->rb); free(s->ugrad); free(s->numel);
    free(s);
}

void exec_strategy_set_device(ExecStrategy *s, Device *dev)
{
    s->dev = dev;
    s->gpu = dev && exec_device_kind(dev) == DEVICE_CUDA;
    s->k = exec_kernels(s->gpu ? DEVICE_CUDA : DEVICE_HOST);
}

int exec_strategy_bind(ExecStrategy *s, ExecModel *m, uint64_t seed, int accum)
{
    if (s->m) return fail(s, "the strategy is already bound to a model");
    s->m = m;
    if (accum < 1) return fail(s, "gradient accumulation must be >= 1");
    s->nunits = exec_model_units(m);
    s->nroot = exec_model_root_units(m, s->root);
    if (s->nunits < 1 || s->nroot < 0 || s->nroot > 2) return fail(s, "the model has no units to train");
    s->numel = calloc((size_t)s->nunits, sizeof *s->numel);
    if (!s->numel) return fail(s, "out of host memory");
    for (int u = 0; u < s->nunits; u++) s->numel[u] = exec_model_unit_numel(m, u);
    exec_model_set_wrapped(m);
    if (!s->plain) {
        int rc = 0;
        if (s->kind == EXEC_DDP) rc = ddp_setup(s, &s->opt);
        else rc = shard_setup(s) || (s->kind == EXEC_ZERO3 ? zero3_setup(s) : zero12_setup(s, &s->opt));
        if (rc) return -1;
    }
    /* mean over the global batch: accum micro-batches, N ranks (SUM of pre-scaled gradients =
       the average, as DDP divides by the world size) */
    exec_model_set_grad_divisor(m, (double)accum * s->N);
    if (!s->plain && s->kind == EXEC_ZERO3) return zero3_bind(s, seed);
    if (exec_model_init_params(m, seed)) return fail(s, "%s", exec_model_error(m));
    return 0;
}

int exec_strategy_zero_grad(ExecStrategy *s)
{
    if (!s->plain && (s->kind == EXEC_ZERO2 || s->kind == EXEC_ZERO3)) {
        s_zero(s, s->gshard, s->S * sizeof(float));
        return 0;
    }
    exec_model_zero_grad(s->m);
    return 0;
}

void exec_strategy_begin_micro(ExecStrategy *s, int sync)
{
    /* ZeRO-2/3 hold no full gradients between micro-steps: they reduce every micro-step */
    s->sync = sync || s->kind == EXEC_ZERO2 || s->kind == EXEC_ZERO3;
}

int exec_strategy_end_backward(ExecStrategy *s)
{
    if (s->plain) return 0;
    int rc = 0;
    switch (s->kind) {
    case EXEC_DDP: rc = s->sync ? ddp_end_backward(s) : 0; break;
    case EXEC_ZERO1:
    case EXEC_ZERO2: rc = zero12_consume(s); break;
    case EXEC_ZERO3: rc = z3_end_backward(s); break;
    default: break;
    }
    return rc;
}

int exec_strategy_step(ExecStrategy *s, const ExecAdamW *opt, int t)
{
    if (s->plain || s->kind == EXEC_DDP) {
        if (exec_model_adamw_step(s->m, opt, t)) return fail(s, "%s", exec_model_error(s->m));
        return 0;
    }
    if (s->kind != EXEC_ZERO3) return zero12_step(s, opt, t);
    for (int i = 0; i < s->nsu; i++) {
        ShardUnit *x = &s->su[i];
        if (exec_model_adamw_step_unit(s->m, x->unit[0], s->pshard + x->soff, s->gshard + x->soff, x->my_len, opt, t))
            return fail(s, "%s", exec_model_error(s->m));
    }
    return 0;
}

int exec_strategy_gather_params(ExecStrategy *s, float *out)
{
    size_t *uoff = calloc((size_t)s->nunits, sizeof *uoff);
    if (!uoff) return fail(s, "out of host memory");
    for (int u = 1; u < s->nunits; u++) uoff[u] = uoff[u - 1] + s->numel[u - 1];
    int rc = 0;
    if (s->plain || s->kind != EXEC_ZERO3) {
        for (int u = 0; u < s->nunits && s->rank == 0 && out; u++)
            s_copy(s, out + uoff[u], exec_model_unit_params(s->m, u), s->numel[u] * sizeof(float));
        free(uoff);
        return s->gpu && exec_device_failed(s->dev) ? fail(s, "copying the parameters from the GPU failed") : 0;
    }
    comm_set_counters(s->comm, NULL);   /* a dump, not training traffic */
    for (int i = 0; i < s->nsu && rc == 0; i++) {
        ShardUnit *x = &s->su[i];
        /* the gather lands where the comm can write: device memory on a GPU (after the run's
           measurements, so this tracked buffer changes no reported peak) */
        float *full = s->gpu ? talloc(s, MEM_COMM, x->shard * (size_t)s->N, 0, "parameter dump")
                             : malloc(x->shard * (size_t)s->N * sizeof(float));
        if (!full) {
            rc = fail(s, "out of memory for the parameter dump");
            break;
        }
        if (comm_all_gather(s->comm, s->pshard + x->soff, full, x->shard, DT_F32, NULL)) {
            rc = fail(s, "parameter gather failed on rank %d", s->rank);
        } else if (s->rank == 0 && out) {
            size_t off = 0;
            for (int p = 0; p < x->nparts; off += x->part[p], p++)
                s_copy(s, out + uoff[x->unit[p]], full + off, x->part[p] * sizeof(float));
        }
        if (s->gpu) tfree(s, &full);
        else free(full);
    }
    if (rc == 0 && s->gpu && exec_device_failed(s->dev)) rc = fail(s, "copying the parameters from the GPU failed");
    comm_set_counters(s->comm, s->cc);
    free(uoff);
    return rc;
}
