/* exec_describe.c — measuring the CPU device description (exec_describe.h). */
#include "exec_describe.h"

#include <cblas.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "exec_kern.h"
#include "kern_fast.h"
#include "kern_blas.h"

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

/* the largest value over ranks (times: the slowest rank sets the pace) */
static int max_over(Comm *c, double *v)
{
    int n = comm_size(c);
    double *all = calloc((size_t)n, sizeof *all);
    if (!all) return -1;
    int rc = comm_all_gather(c, v, all, 1, DT_F64, NULL);
    for (int r = 0; rc == 0 && r < n; r++) *v = all[r] > *v ? all[r] : *v;
    free(all);
    return rc;
}

/* ---- the step's GEMMs ---- */

/* One cblas_sgemm call of the engine (row-major), and how often a micro-step makes it. */
typedef struct {
    int ta, tb;          /* transposed A / B */
    int M, N, K, lda, ldb, ldc;
    double count;
} Gemm;

#define MAX_GEMMS 256
#define GEMM_SLICE_FLOPS 4e9   /* larger products are timed on a slice */
#define GEMM_WINDOW_S 0.3      /* the GEMM mix is timed for at least this long */

static int add_gemm(Gemm *g, int n, int ta, int tb, int M, int N, int K, int lda, int ldb, int ldc, double count)
{
    if (n >= MAX_GEMMS || M < 1 || N < 1 || K < 1) return n;
    g[n] = (Gemm){ta, tb, M, N, K, lda, ldb, ldc, count};
    return n + 1;
}

/* A linear layer of `in` -> `out` features over M rows: the forward (kern_matmul_forward: out =
 * inp · Wᵀ), the input gradient (dout · W) and the weight gradient (doutᵀ · inp), as
 * kernels/kern_ops.c calls them. */
static int add_linear(Gemm *g, int n, int M, int in, int out, double count)
{
    n = add_gemm(g, n, 0, 1, M, out, in, in, in, out, count);
    n = add_gemm(g, n, 0, 0, M, in, out, out, in, in, count);
    return add_gemm(g, n, 1, 0, out, in, M, out, in, in, count);
}

/* The GPT-2 engine's GEMM calls of one micro-step (exec/exec_gpt2.c, kernels/kern_fast.c). */
static int step_gemms(const DescStep *st, Gemm *g)
{
    const Gpt2Config *m = st->model;
    int B = st->B, T = st->T, C = m->d_model, NH = m->n_head, hs = C / NH, M = B * T;
    double L = m->n_layer, heads = (double)B * NH * L;
    int n = 0;
    n = add_linear(g, n, M, C, 3 * C, L);
    n = add_linear(g, n, M, C, C, L);
    n = add_linear(g, n, M, C, 4 * C, L);
    n = add_linear(g, n, M, 4 * C, C, L);
    n = add_linear(g, n, M, C, m->vocab, 1);   /* the tied LM head */
    /* attention per (batch, head), query rows in blocks that stop at the block's last key */
    for (int r0 = 0; r0 < T; r0 += KERN_FAST_ATT_BLOCK) {
        int r1 = r0 + KERN_FAST_ATT_BLOCK < T ? r0 + KERN_FAST_ATT_BLOCK : T, rows = r1 - r0;
        n = add_gemm(g, n, 0, 1, rows, r1, hs, 3 * C, 3 * C, T, heads);   /* q·kᵀ */
        n = add_gemm(g, n, 0, 0, rows, hs, r1, T, 3 * C, C, heads);       /* att·v */
        n = add_gemm(g, n, 0, 1, rows, r1, hs, C, 3 * C, T, heads);       /* d·vᵀ */
        n = add_gemm(g, n, 0, 0, rows, hs, r1, T, 3 * C, 3 * C, heads);   /* dq */
        n = add_gemm(g, n, 1, 0, rows, hs, T - r0, T, C, 3 * C, heads);   /* dv */
        n = add_gemm(g, n, 1, 0, rows, hs, T - r0, T, 3 * C, 3 * C, heads);   /* dk */
    }
    return n;
}

static size_t gemm_a(const Gemm *x) { return (size_t)(x->ta ? x->K : x->M) * (size_t)x->lda; }
static size_t gemm_b(const Gemm *x) { return (size_t)(x->tb ? x->N : x->K) * (size_t)x->ldb; }
static size_t gemm_c(const Gemm *x) { return (size_t)x->M * (size_t)x->ldc; }

static void run_gemm(const Gemm *x, const float *a, const float *b, float *o)
{
    cblas_sgemm(CblasRowMajor, x->ta ? CblasTrans : CblasNoTrans, x->tb ? CblasTrans : CblasNoTrans, x->M, x->N,
                x->K, 1.0f, a, x->lda, b, x->ldb, 1.0f, o, x->ldc);
}

/* Shrinks x to at most GEMM_SLICE_FLOPS by slicing its longest dimension; returns the factor
 * its time is to be scaled by. */
static double slice_gemm(Gemm *x)
{
    double flops = 2.0 * x->M * x->N * x->K;
    if (flops <= GEMM_SLICE_FLOPS) return 1;
    int *d = x->M >= x->N && x->M >= x->K ? &x->M : x->N >= x->K ? &x->N : &x->K;
    int keep = (int)((double)*d * GEMM_SLICE_FLOPS / flops);
    if (keep < 1) keep = 1;
    double scale = (double)*d / keep;
    *d = keep;
    return scale;
}

/* ---- the elementwise passes ---- */

typedef enum { P_W, P_R, P_RW, P_RRW, P_RRU } PassKind;   /* zero; read; y=f(x); z=x+y; z+=x·y */
static const double PASS_BYTES[] = {4, 4, 8, 12, 16};      /* per element */

typedef struct {
    PassKind k;
    int size;            /* 0: B·T·C, 1: B·T·4C, 2: B·NH·T·T, 3: B·T·V */
    int mult;            /* times the size (3C-wide tensors: 3) */
} Pass;

/* One block's forward and backward passes in the engine's order, then the LM head's: the
 * access patterns plan_layer_mem_bytes counts (docs/formulas.md "Time"). */
static const Pass PASSES[] = {
    {P_RW, 0, 1}, {P_W, 0, 3}, {P_RW, 2, 1}, {P_W, 0, 1}, {P_RRW, 0, 1}, {P_RW, 0, 1}, {P_W, 1, 1},
    {P_RW, 1, 1}, {P_W, 0, 1}, {P_RRW, 0, 1},                                   /* forward */
    {P_W, 1, 1}, {P_R, 0, 1}, {P_W, 1, 1}, {P_RRU, 1, 1}, {P_W, 0, 1}, {P_R, 1, 1}, {P_RRU, 0, 1},
    {P_W, 0, 1}, {P_R, 0, 1}, {P_W, 0, 3}, {P_RRW, 2, 1}, {P_W, 0, 1}, {P_R, 0, 3}, {P_RRU, 0, 1},   /* backward */
    {P_RW, 3, 1}, {P_W, 3, 1}, {P_RW, 3, 1},                                    /* cross-entropy */
};
#define N_PASSES ((int)(sizeof PASSES / sizeof PASSES[0]))
#define POOL 4   /* buffers per size class, used in turn */

static float g_sink;

/* One pass over n elements of the buffers a, b, c (c written). */
static void run_pass(PassKind k, float *c, const float *a, const float *b, size_t n)
{
    float s = 0;
    switch (k) {
    case P_W: memset(c, 0, n * sizeof *c); break;
    case P_R: for (size_t i = 0; i < n; i++) s += a[i]; g_sink += s; break;
    case P_RW: for (size_t i = 0; i < n; i++) c[i] = 1.0001f * a[i]; break;
    case P_RRW: for (size_t i = 0; i < n; i++) c[i] = a[i] + b[i]; break;
    case P_RRU: for (size_t i = 0; i < n; i++) c[i] += a[i] * b[i]; break;
    }
}

/* ---- the collectives ---- */

#define REPS 5
#define STEAL_REPS 5

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}
#define WINDOW_S 0.1   /* memory figures are averages over at least this long */

/* one collective of k over count floats per rank block (all-reduce: the whole buffer); mean */
static double time_coll(Comm *c, int k, float *buf, float *out, size_t count, int reps)
{
    double sum = 0;
    for (int r = -1; r < reps; r++) {
        comm_barrier(c);
        double t0 = now_s();
        int rc = k == DESC_AR ? comm_all_reduce(c, buf, buf, count, DT_F32, NULL)
               : k == DESC_RS ? comm_reduce_scatter(c, buf, out, count, DT_F32, NULL)
                              : comm_all_gather(c, buf, out, count, DT_F32, NULL);
        if (rc) return -1;
        if (r >= 0) sum += now_s() - t0;   /* the mean: descheduled calls count, as in a run */
    }
    return sum / reps;
}

/* ---- the description ---- */

int exec_describe_cpu(Comm *c, const DescStep *st, DeviceDesc *d, char *err, size_t len)
{
    double t_start = now_s();
    memset(d, 0, sizeof *d);
    snprintf(d->kind, sizeof d->kind, "cpu");
    int n = comm_size(c);
    d->ranks = n;
    kern_blas_set_threads(comm_local_size(c));   /* as exec_run will run */
    const Gpt2Config *m = st->model;
    size_t bt = (size_t)st->B * st->T, C = (size_t)m->d_model;
    size_t sizes[4] = {bt * C, bt * 4 * C, (size_t)st->B * m->n_head * st->T * st->T, bt * (size_t)m->vocab};
    Gemm *gm = calloc(MAX_GEMMS, sizeof *gm);
    int ng = gm ? step_gemms(st, gm) : 0;
    /* one scratch buffer large enough for every part */
    size_t need = 0, ga = 0, gb = 0, gc = 0;
    for (int i = 0; i < ng; i++) {
        if (gemm_a(&gm[i]) > ga) ga = gemm_a(&gm[i]);
        if (gemm_b(&gm[i]) > gb) gb = gemm_b(&gm[i]);
        if (gemm_c(&gm[i]) > gc) gc = gemm_c(&gm[i]);
    }
    size_t pool = POOL * (sizes[0] * 3 + sizes[1] + sizes[2]) + 2 * sizes[3];
    size_t opt = st->opt_elems < ((size_t)4 << 20) ? st->opt_elems : ((size_t)4 << 20);
    if (opt < 1024) opt = 1024;
    size_t large = (size_t)1 << 20, small = 16384;   /* floats: 4 MiB and 64 KiB */
    /* the bandwidth at the step's collective size: 4 to 64 MiB (past the last-level cache the
       copies run at the memory's pace, as the step's do) */
    size_t big = st->coll_bytes / sizeof(float);
    if (big < large) big = large;
    if (big > 16 * large) big = 16 * large;
    big = (big + (size_t)n - 1) / (size_t)n * (size_t)n;   /* whole rank blocks */
    /* GEMM operand sets to rotate through: together at least 3 x L2 (1 MiB if unknown) */
    long l2 = sysconf(_SC_LEVEL2_CACHE_SIZE);
    size_t set = ga + gb + gc, l2f = (size_t)(l2 > 0 ? l2 : 1 << 20) / sizeof(float);
    int sets = set > 0 ? (int)((3 * l2f + set - 1) / set) : 1;
    if (sets > 16) sets = 16;
    if (sets < 1) sets = 1;
    need = set * (size_t)sets;
    if (pool > need) need = pool;
    if (4 * opt > need) need = 4 * opt;
    /* the collectives' buffers, then the compute GEMM of the collectives among computing ranks
       (the MLP's first product: B·T x 4C x C) */
    Gemm mlp = {0, 1, (int)bt, 4 * (int)C, (int)C, (int)C, (int)C, 4 * (int)C, 1};
    size_t coll_need = 2 * big + gemm_a(&mlp) + gemm_b(&mlp) + gemm_c(&mlp);   /* in, out, the GEMM */
    if (coll_need > need) need = coll_need;
    float *mem = gm ? calloc(need, sizeof *mem) : NULL;
    int bad = !mem;
    double flops = 0, secs = 0;
    if (!bad) {
        for (size_t i = 0; i < need; i++) mem[i] = (float)(i % 13) * 0.01f;
        /* GEMMs: every shape of the step, weighted by its calls. The shapes are timed in rounds
           (each a call, or calls for at least 1 ms) until GEMM_WINDOW_S has passed, so that a
           burst of other work on a shared machine falls on the mix, not on one shape; successive
           calls take their operands from the next of `sets` copies, beyond the L2 cache, as a
           step's operands come (written or read long before) */
        double *t_sh = calloc((size_t)ng, sizeof *t_sh), *scale = calloc((size_t)ng, sizeof *scale);
        int *calls = calloc((size_t)ng, sizeof *calls), turn = 0;
        Gemm *sl = calloc((size_t)ng, sizeof *sl);
        bad = !t_sh || !scale || !calls || !sl;
        for (int i = 0; i < ng && !bad; i++) sl[i] = gm[i], scale[i] = slice_gemm(&sl[i]);
        comm_barrier(c);
        double t0 = now_s();
        for (int round = 0; !bad && (round < 2 || now_s() - t0 < GEMM_WINDOW_S); round++) {
            if (round == 1) {   /* the first round warms up: start over */
                memset(t_sh, 0, (size_t)ng * sizeof *t_sh);
                memset(calls, 0, (size_t)ng * sizeof *calls);
                t0 = now_s();
            }
            for (int i = 0; i < ng; i++) {
                double t1 = now_s(), t2;
                do {
                    float *a = mem + (size_t)(turn++ % sets) * set;
                    run_gemm(&sl[i], a, a + ga, a + ga + gb);
                    calls[i]++;
                } while ((t2 = now_s()) - t1 < 0.001);
                t_sh[i] += t2 - t1;
            }
        }
        for (int i = 0; i < ng && !bad; i++) {
            secs += gm[i].count * t_sh[i] / calls[i] * scale[i];
            flops += 2.0 * gm[i].M * gm[i].N * gm[i].K * gm[i].count;
            d->gemm_calls += gm[i].count;
        }
        free(t_sh);
        free(scale);
        free(calls);
        free(sl);
        bad = bad || max_over(c, &secs);
    }
    double mem_s = 0, mem_bytes = 0;
    if (!bad) {
        /* elementwise passes: rounds of one block and the head over a rotating pool */
        float *base[4];
        base[0] = mem;
        base[1] = base[0] + POOL * 3 * sizes[0];
        base[2] = base[1] + POOL * sizes[1];
        base[3] = base[2] + POOL * sizes[2];
        int turn[4] = {0, 0, 0, 0}, rounds = 0;
        comm_barrier(c);
        double t0 = now_s();
        do {
            for (int i = 0; i < N_PASSES; i++) {
                const Pass *p = &PASSES[i];
                int cls = p->size, slots = cls == 3 ? 2 : POOL;
                size_t stride = sizes[cls] * (cls == 0 ? 3 : 1), el = sizes[cls] * (size_t)p->mult;
                float *x = base[cls] + (size_t)(turn[cls] % slots) * stride;
                float *y = base[cls] + (size_t)((turn[cls] + 1) % slots) * stride;
                float *z = base[cls] + (size_t)((turn[cls] + 2) % slots) * stride;
                if (cls == 3) z = x == base[3] ? base[3] + stride : base[3];   /* two logits-sized buffers */
                run_pass(p->k, z, x, y, el);
                turn[cls]++;
                if (rounds > 0) mem_bytes += PASS_BYTES[p->k] * (double)el;
            }
            if (rounds == 0) t0 = now_s();   /* the first round warms the pool */
            rounds++;
        } while (rounds < 3 || now_s() - t0 < WINDOW_S);
        mem_s = now_s() - t0;
        bad = max_over(c, &mem_s);
    }
    double opt_s = 0;
    int opt_calls = 0;
    if (!bad) {
        /* the optimizer's kernel on this rank's state (m, v zeroed as at the first step) */
        const ExecKernels *k = exec_kernels(DEVICE_HOST);
        float *p = mem, *g = mem + opt, *mm = mem + 2 * opt, *vv = mem + 3 * opt;
        memset(mm, 0, 2 * opt * sizeof *mm);
        comm_barrier(c);
        k->adamw_update(p, g, mm, vv, 0, opt, 1e-3f, 0.9f, 0.999f, 1e-8f, 0.0f, 1, NULL);
        double t0 = now_s();
        do {
            k->adamw_update(p, g, mm, vv, 0, opt, 1e-3f, 0.9f, 0.999f, 1e-8f, 0.0f, 2 + opt_calls, NULL);
            opt_calls++;
        } while ((opt_s = now_s() - t0) < WINDOW_S || opt_calls < 3);
        opt_s /= opt_calls;
        bad = max_over(c, &opt_s);
    }
    if (!bad) {
        d->gemm_flops = flops / secs;
        d->mem_bw = mem_bytes / mem_s;
        d->opt_bw = 28.0 * (double)opt / opt_s;
    }
    /* collectives: bus factor per collective, ring steps */
    double sum_a = 0, sum_b = 0, t_large_ar = 0, t_small_ar = 0;
    for (int k = 0; k < DESC_NCOLL && !bad; k++) {
        double fac = k == DESC_AR ? 2.0 * (n - 1) / n : (double)(n - 1) / n;
        double steps = k == DESC_AR ? 2.0 * (n - 1) : (double)(n - 1);
        size_t cl = k == DESC_AR ? big : big / (size_t)n, cs = k == DESC_AR ? small : small / (size_t)n;
        double bytes_l = 4.0 * (double)(k == DESC_AR ? cl : cl * (size_t)n);
        double bytes_s = 4.0 * (double)(k == DESC_AR ? cs : cs * (size_t)n);
        float *in = mem, *out = mem + big;   /* big: a whole buffer (all-reduce) or n rank blocks */
        double tl = time_coll(c, k, in, out, cl, 3), ts = time_coll(c, k, in, out, cs, REPS);
        if (tl < 0 || ts < 0 || max_over(c, &tl) || max_over(c, &ts)) {
            bad = 1;
            break;
        }
        d->coll_bw[k] = bytes_l * fac / tl;
        double rest = ts - bytes_s * fac / d->coll_bw[k];
        d->coll_alpha_s[k] = rest > 0 ? rest / steps : 0;
        sum_a += d->coll_alpha_s[k];
        sum_b += d->coll_bw[k];
        if (k == DESC_AR) t_small_ar = ts;
    }
    /* the all-reduce the steal is measured with: the step's size, at most 16 MiB */
    size_t sc = big < 4 * large ? big : 4 * large;
    if (!bad && n > 1) {
        t_large_ar = time_coll(c, DESC_AR, mem, mem, sc, 3);
        bad = t_large_ar < 0 || max_over(c, &t_large_ar);
    }
    /* collectives among computing ranks, a GEMM of the MLP's shape as the compute; per
       repetition the difference, then the median (a burst of other work on a shared machine
       hits one repetition), then the slowest rank's (it sets the pace) */
    if (!bad && n > 1) {
        Gemm x = mlp;
        float *a = mem + 2 * big, *b = a + gemm_a(&x), *o = b + gemm_b(&x);
        double one = 2.0 * x.M * x.N * x.K / d->gemm_flops;   /* seconds per GEMM */
        /* sync: about a block's forward GEMMs (24·B·T·C² FLOPs), at most 20 ms, then a small
           all-reduce; steal: twice the all-reduce's time of compute after issuing it */
        int g_sync = (int)(24.0 * bt * C * C / (2.0 * x.M * x.N * x.K) + 0.5);
        if (g_sync * one > 0.02) g_sync = (int)(0.02 / one);
        if (g_sync < 1) g_sync = 1;
        int g_steal = (int)(2 * t_large_ar / one + 1);
        double it[STEAL_REPS], ch[STEAL_REPS], steal[STEAL_REPS];
        for (int r = -1; r < STEAL_REPS && !bad; r++) {
            comm_barrier(c);
            double t0 = now_s();
            for (int i = 0; i < g_sync; i++) run_gemm(&x, a, b, o);
            double t1 = now_s();
            bad |= comm_all_reduce(c, mem, mem, small, DT_F32, NULL) != 0;
            double t2 = now_s();
            comm_barrier(c);
            double t3 = now_s();
            for (int i = 0; i < g_steal; i++) run_gemm(&x, a, b, o);
            double t4 = now_s();
            CommReq *q = NULL;
            bad |= comm_all_reduce(c, mem, mem, sc, DT_F32, &q) != 0;
            for (int i = 0; i < g_steal; i++) run_gemm(&x, a, b, o);
            bad |= comm_wait(c, q) != 0;
            double t5 = now_s();
            if (r < 0) continue;   /* warm-up */
            it[r] = t2 - t0;   /* compute + the collective, the same on every rank */
            ch[r] = t1 - t0;   /* this rank's compute */
            steal[r] = ((t5 - t4) - (t4 - t3)) / t_large_ar;
        }
        double mi = bad ? 0 : median(it, STEAL_REPS), mc = bad ? 0 : median(ch, STEAL_REPS);
        double stl = bad ? 0 : median(steal, STEAL_REPS);
        if (!bad && !max_over(c, &mi) && !max_over(c, &mc) && !max_over(c, &stl)) {
            double sy = mi - mc - t_small_ar;   /* beyond the slowest rank's compute */
            d->sync_s = sy > 0 ? sy : 0;
            d->steal = stl > 0 ? stl : 0;
        } else {
            bad = 1;
        }
    }
    free(mem);
    free(gm);
    if (bad) {
        snprintf(err, len, "measuring the device description failed (out of memory or a collective failed)");
        return -1;
    }
    d->alpha_s = sum_a / DESC_NCOLL;
    d->bw = sum_b / DESC_NCOLL;
    d->seconds = now_s() - t_start;
    return 0;
}

static double hmean(double a, double b) { return a > 0 && b > 0 ? 2.0 / (1.0 / a + 1.0 / b) : (a > 0 ? a : b); }

void exec_describe_mean(DeviceDesc *a, const DeviceDesc *b)
{
    a->gemm_flops = hmean(a->gemm_flops, b->gemm_flops);
    a->mem_bw = hmean(a->mem_bw, b->mem_bw);
    a->opt_bw = hmean(a->opt_bw, b->opt_bw);
    for (int k = 0; k < DESC_NCOLL; k++) {
        a->coll_bw[k] = hmean(a->coll_bw[k], b->coll_bw[k]);
        a->coll_alpha_s[k] = (a->coll_alpha_s[k] + b->coll_alpha_s[k]) / 2;
    }
    a->alpha_s = (a->alpha_s + b->alpha_s) / 2;
    a->bw = hmean(a->bw, b->bw);
    a->sync_s = (a->sync_s + b->sync_s) / 2;
    a->steal = (a->steal + b->steal) / 2;
    a->seconds += b->seconds;
}
