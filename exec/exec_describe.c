/* exec_describe.c — measuring the CPU device description (exec_describe.h). */
#include "exec_describe.h"

#include <cblas.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "exec_kern.h"
#include "kern_blas.h"
#include "kern_fast.h"
#include "plan_util.h"

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

/* k values combined over ranks element by element: the largest (mean 0) or the mean */
static int over_ranks(Comm *c, double *v, int k, int mean)
{
    int n = comm_size(c);
    double *all = calloc((size_t)n * (size_t)k, sizeof *all);
    if (!all) return -1;
    int rc = comm_all_gather(c, v, all, (size_t)k, DT_F64, NULL);
    for (int i = 0; rc == 0 && i < k; i++) {
        double acc = mean ? 0 : v[i];
        for (int r = 0; r < n; r++) {
            double x = all[(size_t)r * (size_t)k + (size_t)i];
            acc = mean ? acc + x : (x > acc ? x : acc);
        }
        v[i] = mean ? acc / n : acc;
    }
    free(all);
    return rc;
}

/* the largest value over ranks (times: the slowest rank sets the pace) */
static int max_over(Comm *c, double *v) { return over_ranks(c, v, 1, 0); }

/* Whether the node's ranks outnumber its cores: they share the cores as one pool (a rank that
 * waits yields its share to the others). Compute seconds over ranks, k values: the slowest
 * rank's when every rank has a core of its own (the others wait for it at the next
 * collective), the mean when pooled. */
static int pooled(Comm *c)
{
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    return cores >= 1 && comm_local_size(c) > cores;
}

static int compute_over(Comm *c, double *v, int k) { return over_ranks(c, v, k, pooled(c)); }

#define REPS 5            /* small collectives */
#define STEAL_REPS 9      /* collectives among computing ranks */
#define WINDOW_S 0.1      /* the optimizer's kernel is timed for at least this long */
#define STEP_WINDOW_S 0.3 /* the step's GEMMs and elementwise kernels: at least this long */
#define GEMM_SLICE_FLOPS 4e9   /* larger products are timed on a slice */
#define MAX_ROUNDS 512

/* ---- the step's linear-layer GEMMs ---- */

/* One cblas_sgemm call of the engine (row-major), and how often a micro-step makes it. */
typedef struct {
    int ta, tb;          /* transposed A / B */
    int M, N, K, lda, ldb, ldc;
    double count;
} Gemm;

#define MAX_GEMMS 16

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

/* The GPT-2 engine's linear layers of one micro-step (exec/exec_gpt2.c). */
static int step_gemms(const DescStep *st, Gemm *g)
{
    const Gpt2Config *m = st->model;
    int C = m->d_model, M = st->B * st->T;
    double L = m->n_layer;
    int n = 0;
    n = add_linear(g, n, M, C, 3 * C, L);
    n = add_linear(g, n, M, C, C, L);
    n = add_linear(g, n, M, C, 4 * C, L);
    n = add_linear(g, n, M, 4 * C, C, L);
    return add_linear(g, n, M, C, m->vocab, 1);   /* the tied LM head */
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

/* ---- one block's tensors, for its attention products and elementwise kernels ---- */

typedef struct {
    float *x, *ln, *mean, *rstd, *qkv, *atty, *pre, *att, *res, *fch, *fg, *proj;   /* forward */
    float *dres, *dbtc, *dfg, *dfch, *dpre, *datt;                                   /* backward */
    float *w, *b, *dw, *db, *bias, *dbias;                                           /* C or 4C */
} Block;

#define BLOCK_COPIES 2   /* used in turn, so that a round finds its tensors beyond the L2 cache */

typedef struct {
    int B, T, C, NH, V, rows;   /* rows: the embedding rows the lookup uses */
    size_t h, f, S, nV;         /* elements: B·T·C, B·T·4C, B·NH·T², B·T·V */
    Block blk[BLOCK_COPIES];
    float *logits, *probs, *dlogits, *losses, *wte, *wpe, *dwte, *dwpe;
    int *tokens;
    float *arena;
} Step;

static void step_free(Step *s) { free(s->arena); free(s->tokens); }

static int step_alloc(Step *s, const DescStep *st)
{
    memset(s, 0, sizeof *s);
    const Gpt2Config *m = st->model;
    s->B = st->B, s->T = st->T, s->C = m->d_model, s->NH = m->n_head, s->V = m->vocab;
    size_t n = (size_t)s->B * s->T, C = (size_t)s->C;
    s->h = n * C, s->f = 4 * s->h, s->S = (size_t)s->B * s->NH * s->T * s->T, s->nV = n * (size_t)s->V;
    s->rows = s->V < (int)n ? s->V : (int)n;
    size_t per = 7 * s->h + 3 * s->h + 4 * s->f + 4 * s->S + 2 * n + 12 * C;   /* one Block */
    size_t total = BLOCK_COPIES * per + 3 * s->nV + n + 2 * (size_t)s->rows * C + 2 * (size_t)s->T * C;
    s->arena = calloc(total, sizeof(float));
    s->tokens = calloc(n, sizeof(int));
    if (!s->arena || !s->tokens) return -1;
    float *p = s->arena;
#define TAKE(dst, k) ((dst) = p, p += (k))
    for (int k = 0; k < BLOCK_COPIES; k++) {
        Block *b = &s->blk[k];
        TAKE(b->x, s->h); TAKE(b->ln, s->h); TAKE(b->mean, n); TAKE(b->rstd, n); TAKE(b->qkv, 3 * s->h);
        TAKE(b->atty, s->h); TAKE(b->pre, s->S); TAKE(b->att, s->S); TAKE(b->res, s->h); TAKE(b->fch, s->f);
        TAKE(b->fg, s->f); TAKE(b->proj, s->h); TAKE(b->dres, s->h); TAKE(b->dbtc, s->h); TAKE(b->dfg, s->f);
        TAKE(b->dfch, s->f); TAKE(b->dpre, s->S); TAKE(b->datt, s->S);
        TAKE(b->w, C); TAKE(b->b, C); TAKE(b->dw, C); TAKE(b->db, C); TAKE(b->bias, 4 * C); TAKE(b->dbias, 4 * C);
    }
    TAKE(s->logits, s->nV); TAKE(s->probs, s->nV); TAKE(s->dlogits, s->nV); TAKE(s->losses, n);
    TAKE(s->wte, (size_t)s->rows * C); TAKE(s->dwte, (size_t)s->rows * C);
    TAKE(s->wpe, (size_t)s->T * C); TAKE(s->dwpe, (size_t)s->T * C);
#undef TAKE
    for (size_t i = 0; i < total; i++) s->arena[i] = (float)(i % 13) * 0.01f - 0.06f;
    for (size_t i = 0; i < n; i++) s->tokens[i] = (int)(i * 7919 % (size_t)s->rows);
    for (int k = 0; k < BLOCK_COPIES; k++)   /* LayerNorm statistics as a forward leaves them */
        for (size_t i = 0; i < n; i++) s->blk[k].mean[i] = 0.0f, s->blk[k].rstd[i] = 1.0f;
    return 0;
}

/* The attention's products of one layer, forward and backward, in the order and with the
 * operand layout of kern_attention_forward_fast / kern_attention_backward_fast (per batch and
 * head, query rows in blocks of KERN_FAST_ATT_BLOCK), without their softmaxes (elementwise: in
 * step_elementwise). Returns the FLOPs. */
static double attention_gemms(const Step *s, const Block *k)
{
    int B = s->B, T = s->T, C = s->C, NH = s->NH, C3 = 3 * C, hs = C / NH;
    double flops = 0;
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++) {
            size_t qo = (size_t)b * T * C3 + (size_t)h * hs, bh = ((size_t)b * NH + h) * T * T;
            const float *q = k->qkv + qo, *kk = q + C, *v = q + 2 * C, *a = k->att + bh;
            float *pre = k->pre + bh, *o = k->atty + (size_t)b * T * C + (size_t)h * hs;
            const float *d = k->dbtc + (size_t)b * T * C + (size_t)h * hs;
            float *dq = k->dfch + qo, *dk = dq + C, *dv = dq + 2 * C, *da = k->datt + bh, *dp = k->dpre + bh;
            for (int r0 = 0; r0 < T; r0 += KERN_FAST_ATT_BLOCK) {
                int r1 = r0 + KERN_FAST_ATT_BLOCK < T ? r0 + KERN_FAST_ATT_BLOCK : T, rows = r1 - r0;
                cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, rows, r1, hs, 1.0f, q + (size_t)r0 * C3, C3, kk,
                            C3, 0.0f, pre + (size_t)r0 * T, T);
                cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, rows, hs, r1, 1.0f, a + (size_t)r0 * T, T, v,
                            C3, 0.0f, o + (size_t)r0 * C, C);
                cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, rows, r1, hs, 1.0f, d + (size_t)r0 * C, C, v,
                            C3, 0.0f, da + (size_t)r0 * T, T);
                cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, rows, hs, r1, 1.0f, dp + (size_t)r0 * T, T,
                            kk, C3, 1.0f, dq + (size_t)r0 * C3, C3);
                flops += 4.0 * 2.0 * rows * r1 * hs;
            }
            for (int r0 = 0; r0 < T; r0 += KERN_FAST_ATT_BLOCK) {
                int r1 = r0 + KERN_FAST_ATT_BLOCK < T ? r0 + KERN_FAST_ATT_BLOCK : T, rows = r1 - r0;
                cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, rows, hs, T - r0, 1.0f, a + (size_t)r0 * T + r0,
                            T, d + (size_t)r0 * C, C, 1.0f, dv + (size_t)r0 * C3, C3);
                cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, rows, hs, T - r0, 1.0f, dp + (size_t)r0 * T + r0,
                            T, q + (size_t)r0 * C3, C3, 1.0f, dk + (size_t)r0 * C3, C3);
                flops += 2.0 * 2.0 * rows * hs * (T - r0);
            }
        }
    return flops;
}

static float g_sink;

/* the attention softmax's passes (inside the attention kernels): forward reads the scores and
   writes the probabilities, backward reads both probabilities and their gradient, writes one */
static void softmax_passes(const Step *s, const Block *k)
{
    for (size_t i = 0; i < s->S; i++) k->att[i] = 1.0001f * k->pre[i];
    for (size_t i = 0; i < s->S; i++) k->dpre[i] = k->att[i] * k->datt[i];
}

/* One block's elementwise work, forward and backward, in the engine's order (exec/exec_gpt2.c
 * block_forward / block_backward, minus the GEMMs and the attention's products) with the
 * engine's own kernels; returns the bytes docs/formulas.md "Time" counts for it (planner:
 * plan_layer_mem_bytes): 27h + 2·a·s forward and 47h + 3·a·s backward per token, fp32. */
static double block_elementwise(const Step *s, const ExecKernels *kt, Block *k)
{
    int B = s->B, T = s->T, C = s->C;
    size_t n = (size_t)B * T, h = s->h, f = s->f;
    /* forward: the bias rows before each biased GEMM, the norms, softmax, GELU, residuals */
    kt->layernorm_forward(k->ln, k->mean, k->rstd, k->x, k->w, k->b, B, T, C, NULL);
    for (size_t r = 0; r < n; r++) memcpy(k->qkv + r * 3 * C, k->bias, 3 * (size_t)C * sizeof(float));
    softmax_passes(s, k);
    for (size_t r = 0; r < n; r++) memcpy(k->proj + r * C, k->bias, (size_t)C * sizeof(float));
    kt->residual_forward(k->res, k->x, k->proj, h, NULL);
    kt->layernorm_forward(k->ln, k->mean, k->rstd, k->res, k->w, k->b, B, T, C, NULL);
    for (size_t r = 0; r < n; r++) memcpy(k->fch + r * 4 * C, k->bias, 4 * (size_t)C * sizeof(float));
    kt->gelu_forward(k->fg, k->fch, f, NULL);
    for (size_t r = 0; r < n; r++) memcpy(k->proj + r * C, k->bias, (size_t)C * sizeof(float));
    kt->residual_forward(k->x, k->res, k->proj, h, NULL);
    /* backward: zeroed scratch, bias gradients (matmul_backward with no GEMM), GELU, norms */
    memset(k->dfg, 0, f * sizeof(float));
    kt->matmul_backward(NULL, NULL, k->dbias, k->dres, NULL, NULL, B, T, 4 * C, C, NULL);
    memset(k->dfch, 0, f * sizeof(float));
    kt->gelu_backward(k->dfch, k->fch, k->dfg, f, NULL);
    memset(k->dbtc, 0, h * sizeof(float));
    kt->matmul_backward(NULL, NULL, k->dbias, k->dfch, NULL, NULL, B, T, C, 4 * C, NULL);
    kt->layernorm_backward(k->dres, k->dw, k->db, k->dbtc, k->res, k->w, k->mean, k->rstd, B, T, C, NULL);
    memset(k->dbtc, 0, h * sizeof(float));
    kt->matmul_backward(NULL, NULL, k->dbias, k->dres, NULL, NULL, B, T, C, C, NULL);
    memset(k->dfch, 0, 3 * h * sizeof(float));
    softmax_passes(s, k);
    memset(k->dbtc, 0, h * sizeof(float));
    kt->matmul_backward(NULL, NULL, k->dbias, k->dfch, NULL, NULL, B, T, C, 3 * C, NULL);
    kt->layernorm_backward(k->dres, k->dw, k->db, k->dbtc, k->x, k->w, k->mean, k->rstd, B, T, C, NULL);
    g_sink += k->dres[0];
    return 4.0 * ((27.0 + 47.0) * (double)h + 5.0 * (double)s->S);
}

/* The rest of the model's elementwise work: embeddings, final norm, softmax + cross-entropy
 * over the vocabulary (and dlogits zeroed), forward and backward: 2V + 2h + 3h forward, 3V + 4h
 * + 5h backward per token. The engine's LM head is fused (its GEMMs and these passes chunk by
 * chunk, kern_lmhead_ce_*); the unfused kernels stand in for its passes over the vocabulary here
 * (the same exp per element), as a bandwidth: plan_sim counts the fused kernel's own passes
 * (plan_layer_mem_bytes). */
static double head_elementwise(Step *s, const ExecKernels *kt)
{
    int B = s->B, T = s->T, C = s->C, V = s->V;
    Block *k = &s->blk[0];
    kt->encoder_forward(k->x, s->tokens, s->wte, s->wpe, B, T, C, NULL);
    kt->layernorm_forward(k->ln, k->mean, k->rstd, k->x, k->w, k->b, B, T, C, NULL);
    kt->crossentropy_softmax_forward(s->probs, s->losses, s->logits, s->tokens, B, T, V, NULL);
    memset(s->dlogits, 0, s->nV * sizeof(float));
    kt->crossentropy_softmax_backward(s->dlogits, s->probs, s->tokens, 1e-3f, B, T, V, NULL);
    kt->layernorm_backward(k->dres, k->dw, k->db, k->dbtc, k->x, k->w, k->mean, k->rstd, B, T, C, NULL);
    kt->encoder_backward(s->dwte, s->dwpe, k->dres, s->tokens, B, T, C, NULL);
    g_sink += s->dlogits[0];
    return 4.0 * (5.0 * (double)s->nV + (2 + 3 + 4 + 5) * (double)s->h);
}

/* ---- the collectives ---- */

/* one collective of k over count floats per rank block (all-reduce: the whole buffer): the
   median of reps (at most REPS) after a warm-up call */
static double time_coll(Comm *c, int k, float *buf, float *out, size_t count, int reps)
{
    double t[REPS];
    for (int r = -1; r < reps; r++) {
        comm_barrier(c);
        double t0 = now_s();
        int rc = k == DESC_AR ? comm_all_reduce(c, buf, buf, count, DT_F32, NULL)
               : k == DESC_RS ? comm_reduce_scatter(c, buf, out, count, DT_F32, NULL)
                              : comm_all_gather(c, buf, out, count, DT_F32, NULL);
        if (rc) return -1;
        if (r >= 0) t[r] = now_s() - t0;
    }
    return plan_median(t, reps);
}

/* ---- the description ---- */

int exec_describe_cpu(Comm *c, const DescStep *st, DeviceDesc *d, char *err, size_t len)
{
    double t_start = now_s();
    memset(d, 0, sizeof *d);
    snprintf(d->kind, sizeof d->kind, "cpu");
    int n = comm_size(c);
    d->ranks = n;
    d->pooled = pooled(c);
    kern_blas_set_threads(comm_local_size(c));   /* as exec_run will run */
    const Gpt2Config *m = st->model;
    const ExecKernels *kt = exec_kernels(DEVICE_HOST);
    size_t bt = (size_t)st->B * st->T, C = (size_t)m->d_model;
    double L = m->n_layer;
    Gemm gm[MAX_GEMMS], sl[MAX_GEMMS];
    int ng = step_gemms(st, gm);
    /* GEMM operand sets to rotate through: together at least 3 x L2 (1 MiB if unknown) */
    size_t ga = 0, gb = 0, gc = 0;
    for (int i = 0; i < ng; i++) {
        if (gemm_a(&gm[i]) > ga) ga = gemm_a(&gm[i]);
        if (gemm_b(&gm[i]) > gb) gb = gemm_b(&gm[i]);
        if (gemm_c(&gm[i]) > gc) gc = gemm_c(&gm[i]);
    }
    long l2 = sysconf(_SC_LEVEL2_CACHE_SIZE);
    size_t set = ga + gb + gc, l2f = (size_t)(l2 > 0 ? l2 : 1 << 20) / sizeof(float);
    int sets = (int)((3 * l2f + set - 1) / set);
    if (sets > 16) sets = 16;
    if (sets < 1) sets = 1;
    size_t opt = st->opt_elems < ((size_t)4 << 20) ? st->opt_elems : ((size_t)4 << 20);
    if (opt < 1024) opt = 1024;
    size_t large = (size_t)1 << 20, small = 16384;   /* floats: 4 MiB and 64 KiB */
    /* the bandwidth at the step's collective size: 4 to 64 MiB (past the last-level cache the
       copies run at the memory's pace, as the step's do) */
    size_t big = st->coll_bytes / sizeof(float);
    if (big < large) big = large;
    if (big > 16 * large) big = 16 * large;
    big = (big + (size_t)n - 1) / (size_t)n * (size_t)n;   /* whole rank blocks */
    /* the compute GEMM of the collectives among computing ranks: the MLP's first product */
    Gemm mlp = {0, 1, (int)bt, 4 * (int)C, (int)C, (int)C, (int)C, 4 * (int)C, 1};
    size_t need = set * (size_t)sets;
    if (4 * opt > need) need = 4 * opt;
    if (2 * big + gemm_a(&mlp) + gemm_b(&mlp) + gemm_c(&mlp) > need) need = 2 * big + gemm_a(&mlp) + gemm_b(&mlp) + gemm_c(&mlp);
    float *mem = calloc(need, sizeof *mem);
    Step sp;
    memset(&sp, 0, sizeof sp);
    int bad = !mem || step_alloc(&sp, st) != 0;
    double lin_flops = 0, lin_s = 0, att_s = 0, blk_s = 0, head_s = 0;
    if (!bad) {
        for (size_t i = 0; i < need; i++) mem[i] = (float)(i % 13) * 0.01f;
        /* The step replayed in rounds until STEP_WINDOW_S has passed (the first round warms up
           and is not counted), so that a burst of other work on a shared machine falls on the
           whole mix: every linear-layer GEMM shape (each a call, or calls for 1 ms; successive
           calls take their operands from the next of `sets` copies, beyond the L2 cache, as a
           step's operands come), one layer's attention products, one block's and the head's
           elementwise kernels. Weighted as the step makes them: L layers, one head. */
        double scale[MAX_GEMMS], att_fl = 0, blk_by = 0, head_by = 0;
        double *lin_r = calloc(MAX_ROUNDS, sizeof(double)), *att_r = calloc(MAX_ROUNDS, sizeof(double));
        double *blk_r = calloc(MAX_ROUNDS, sizeof(double)), *head_r = calloc(MAX_ROUNDS, sizeof(double));
        int turn = 0, rounds = 0;
        bad = !lin_r || !att_r || !blk_r || !head_r;
        for (int i = 0; i < ng; i++) sl[i] = gm[i], scale[i] = slice_gemm(&sl[i]);
        for (int i = 0; i < ng; i++) {
            lin_flops += 2.0 * gm[i].M * gm[i].N * gm[i].K * gm[i].count;
            d->gemm_calls += gm[i].count;
        }
        comm_barrier(c);
        double t0 = now_s();
        for (int r = -1; !bad && r < MAX_ROUNDS && (r < 1 || now_s() - t0 < STEP_WINDOW_S); r++) {
            if (r == 0) t0 = now_s();   /* round -1 warms up */
            double lin = 0;
            for (int i = 0; i < ng; i++) {
                double t1 = now_s(), t2;
                int calls = 0;
                do {
                    float *a = mem + (size_t)(turn++ % sets) * set;
                    run_gemm(&sl[i], a, a + ga, a + ga + gb);
                    calls++;
                } while ((t2 = now_s()) - t1 < 0.001);
                lin += gm[i].count * (t2 - t1) / calls * scale[i];
            }
            Block *k = &sp.blk[(r + 2) % BLOCK_COPIES];
            double t1 = now_s();
            att_fl = attention_gemms(&sp, k);
            double t2 = now_s();
            blk_by = block_elementwise(&sp, kt, k);
            double t3 = now_s();
            head_by = head_elementwise(&sp, kt);
            double t4 = now_s();
            if (r < 0) continue;
            lin_r[r] = lin, att_r[r] = t2 - t1, blk_r[r] = t3 - t2, head_r[r] = t4 - t3;
            rounds = r + 1;
        }
        /* per step, the median round (a burst of other work hits a few): L layers of attention
           and of blocks, the head once */
        if (!bad) {
            lin_s = plan_median(lin_r, rounds), att_s = plan_median(att_r, rounds);
            blk_s = plan_median(blk_r, rounds), head_s = plan_median(head_r, rounds);
        }
        free(lin_r);
        free(att_r);
        free(blk_r);
        free(head_r);
        double secs = lin_s + L * att_s, msecs = L * blk_s + head_s;
        bad = bad || compute_over(c, &secs, 1) || compute_over(c, &msecs, 1);
        d->gemm_flops = (lin_flops + L * att_fl) / secs;
        d->mem_bw = (L * blk_by + head_by) / msecs;
        int blocks = (st->T + KERN_FAST_ATT_BLOCK - 1) / KERN_FAST_ATT_BLOCK;
        d->gemm_calls += L * st->B * m->n_head * blocks * 6.0;   /* the attention's products */
    }
    double opt_s = 0;
    int opt_calls = 0;
    if (!bad) {
        /* the optimizer's kernel on this rank's state (m, v zeroed as at the first step) */
        float *p = mem, *g = mem + opt, *mm = mem + 2 * opt, *vv = mem + 3 * opt;
        memset(mm, 0, 2 * opt * sizeof *mm);
        comm_barrier(c);
        kt->adamw_update(p, g, mm, vv, 0, opt, 1e-3f, 0.9f, 0.999f, 1e-8f, 0.0f, 1, NULL);
        double t0 = now_s(), call[MAX_ROUNDS];
        do {   /* the median call */
            double t1 = now_s();
            kt->adamw_update(p, g, mm, vv, 0, opt, 1e-3f, 0.9f, 0.999f, 1e-8f, 0.0f, 2 + opt_calls, NULL);
            call[opt_calls++] = now_s() - t1;
        } while (opt_calls < MAX_ROUNDS && (now_s() - t0 < WINDOW_S || opt_calls < 3));
        opt_s = plan_median(call, opt_calls);
        bad = compute_over(c, &opt_s, 1);
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
           all-reduce; steal: twice the all-reduce's time of compute after issuing it; issue: the
           sync loop with a small all-reduce issued before it and waited after it */
        int g_sync = (int)(24.0 * bt * C * C / (2.0 * x.M * x.N * x.K) + 0.5);
        if (g_sync * one > 0.02) g_sync = (int)(0.02 / one);
        if (g_sync < 1) g_sync = 1;
        int g_steal = (int)(2 * t_large_ar / one + 1);
        double it[STEAL_REPS], ch[STEAL_REPS], steal[STEAL_REPS], iss[STEAL_REPS];
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
            comm_barrier(c);
            double t6 = now_s();
            q = NULL;
            bad |= comm_all_reduce(c, mem, mem, small, DT_F32, &q) != 0;
            for (int i = 0; i < g_sync; i++) run_gemm(&x, a, b, o);
            bad |= comm_wait(c, q) != 0;
            double t7 = now_s();
            if (r < 0) continue;   /* warm-up */
            it[r] = t2 - t0;       /* compute + the collective, the same on every rank */
            ch[r] = t1 - t0;       /* this rank's compute */
            steal[r] = ((t5 - t4) - (t4 - t3)) / t_large_ar;
            /* beyond the same loop with the collective blocking after it (t2 - t0, which holds
               the ranks' arrival spread that sync_s already charges to every collective), the
               collective's own time given back (it ran behind the loop) */
            iss[r] = (t7 - t6) - (t2 - t0) + t_small_ar;
        }
        double mi = bad ? 0 : plan_median(it, STEAL_REPS), mc = bad ? 0 : plan_median(ch, STEAL_REPS);
        double stl = bad ? 0 : plan_median(steal, STEAL_REPS), is = 0;
        /* issue is bimodal: most issues cost next to nothing, about one in nine costs the rank
           a scheduler slice (1.5-2.2 ms on 2 ranks on 2 cores, while the woken progress thread
           has the core), so the expected cost is the mean over repetitions of the ranks' cost
           taken as compute is (the slowest rank's, or the mean when the ranks outnumber the
           cores and a slice one rank loses goes to another), where a median says nothing or a
           whole slice */
        bad |= !bad && compute_over(c, iss, STEAL_REPS) != 0;
        for (int r = 0; r < STEAL_REPS && !bad; r++) is += iss[r] / STEAL_REPS;
        if (!bad && !max_over(c, &mi) && !max_over(c, &mc) && !max_over(c, &stl)) {
            double sy = mi - mc - t_small_ar;   /* beyond the slowest rank's compute */
            d->sync_s = sy > 0 && !d->pooled ? sy : 0;   /* pooled: the compute rates hold it */
            d->steal = stl > 0 ? stl : 0;
            d->issue_s = is > 0 ? is : 0;
        } else {
            bad = 1;
        }
    }
    free(mem);
    step_free(&sp);
    if (bad) {
        snprintf(err, len, "measuring the device description failed (out of memory or a collective failed)");
        return -1;
    }
    d->alpha_s = sum_a / DESC_NCOLL;
    d->bw = sum_b / DESC_NCOLL;
    d->seconds = now_s() - t_start;
    return 0;
}

/* two measurements of a rate: the higher, or on pooled ranks their harmonic mean */
static double rate2(const DeviceDesc *a, double x, double y)
{
    if (!a->pooled) return fmax(x, y);
    return x > 0 && y > 0 ? 2.0 / (1.0 / x + 1.0 / y) : fmax(x, y);
}

void exec_describe_combine(DeviceDesc *a, const DeviceDesc *b)
{
    a->gemm_flops = rate2(a, a->gemm_flops, b->gemm_flops);
    a->mem_bw = rate2(a, a->mem_bw, b->mem_bw);
    a->opt_bw = rate2(a, a->opt_bw, b->opt_bw);
    for (int k = 0; k < DESC_NCOLL; k++) {
        a->coll_bw[k] = rate2(a, a->coll_bw[k], b->coll_bw[k]);
        a->coll_alpha_s[k] = (a->coll_alpha_s[k] + b->coll_alpha_s[k]) / 2;
    }
    a->alpha_s = (a->alpha_s + b->alpha_s) / 2;
    a->bw = rate2(a, a->bw, b->bw);
    a->sync_s = (a->sync_s + b->sync_s) / 2;
    a->steal = (a->steal + b->steal) / 2;
    a->issue_s = (a->issue_s + b->issue_s) / 2;
    a->gemm_calls = a->gemm_calls > b->gemm_calls ? a->gemm_calls : b->gemm_calls;
    a->seconds += b->seconds;
}
