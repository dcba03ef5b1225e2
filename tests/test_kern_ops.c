/* test_kern_ops.c — specifications of the fp32 CPU kernels (kernels/kern_ops.h).
 *
 * Backward kernels are checked against central finite differences of the forward kernel: the
 * objective is L = Σ out·w for a fixed random w (so dout = w), summed in double. The forward
 * runs in float, so a difference quotient with step h carries rounding noise of about
 * 1e-7·|L| / h; with h = 1e-3 and inputs of order 1 the stated tolerance
 * |fd - analytic| <= 2e-3 + 2e-2·max(|fd|, |analytic|) is loose enough for that noise and tight
 * enough to catch any wrong term (they are of order 1e-1 .. 1). */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kern_fast.h"
#include "kern_ops.h"

#define FD_H 1e-3f
#define FD_ATOL 2e-3
#define FD_RTOL 2e-2

/* ---- small deterministic helpers ---- */
static unsigned long long rng_state = 0x9E3779B97F4A7C15ull;
static float urand(void)   /* uniform in [-1, 1) */
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return (float)((rng_state >> 11) * (1.0 / 9007199254740992.0)) * 2.0f - 1.0f;
}
static float *frand(size_t n, float scale)
{
    float *p = malloc(n * sizeof(float));
    cr_assert_not_null(p);
    for (size_t i = 0; i < n; i++) p[i] = urand() * scale;
    return p;
}
static float *fzeros(size_t n)
{
    float *p = calloc(n, sizeof(float));
    cr_assert_not_null(p);
    return p;
}
static double dot(const float *a, const float *w, size_t n)
{
    double s = 0.0;
    for (size_t i = 0; i < n; i++) s += (double)a[i] * (double)w[i];
    return s;
}

/* Compares grad[j] with the central difference of loss() in x[j], for every j < n. */
typedef double (*LossFn)(void *ctx);
static void check_fd(const char *what, float *x, const float *grad, size_t n, LossFn loss, void *ctx)
{
    for (size_t j = 0; j < n; j++) {
        float keep = x[j];
        x[j] = keep + FD_H;
        double lp = loss(ctx);
        x[j] = keep - FD_H;
        double lm = loss(ctx);
        x[j] = keep;
        double fd = (lp - lm) / (2.0 * (double)FD_H);
        double an = grad[j];
        double tol = FD_ATOL + FD_RTOL * fmax(fabs(fd), fabs(an));
        cr_assert(fabs(fd - an) <= tol, "%s[%zu]: analytic %.6g, finite difference %.6g", what, j, an, fd);
    }
}

/* ---- encoder ---- */
typedef struct { int B, T, C, V; int *inp; float *wte, *wpe, *out, *w; } EncCase;
static double enc_loss(void *p)
{
    EncCase *e = p;
    kern_encoder_forward(e->out, e->inp, e->wte, e->wpe, e->B, e->T, e->C);
    return dot(e->out, e->w, (size_t)e->B * e->T * e->C);
}

Test(kern_ops, encoder_forward_should_add_token_and_position_rows)
{
    int B = 2, T = 3, C = 4, V = 5;
    int inp[] = {4, 0, 2, 2, 1, 4};
    float *wte = frand((size_t)V * C, 1), *wpe = frand((size_t)T * C, 1), *out = fzeros((size_t)B * T * C);
    kern_encoder_forward(out, inp, wte, wpe, B, T, C);
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++)
            for (int c = 0; c < C; c++)
                cr_assert_float_eq(out[(b * T + t) * C + c], wte[inp[b * T + t] * C + c] + wpe[t * C + c], 0.0f);
    free(wte); free(wpe); free(out);
}

Test(kern_ops, encoder_backward_should_match_finite_differences)
{
    EncCase e = {.B = 2, .T = 3, .C = 4, .V = 5};
    int inp[] = {4, 0, 2, 2, 1, 4};   /* token 2 and 4 appear twice: their rows accumulate */
    e.inp = inp;
    size_t n = (size_t)e.B * e.T * e.C;
    e.wte = frand((size_t)e.V * e.C, 1); e.wpe = frand((size_t)e.T * e.C, 1);
    e.out = fzeros(n); e.w = frand(n, 1);
    float *dwte = fzeros((size_t)e.V * e.C), *dwpe = fzeros((size_t)e.T * e.C);
    kern_encoder_backward(dwte, dwpe, e.w, e.inp, e.B, e.T, e.C);
    check_fd("dwte", e.wte, dwte, (size_t)e.V * e.C, enc_loss, &e);
    check_fd("dwpe", e.wpe, dwpe, (size_t)e.T * e.C, enc_loss, &e);
    free(e.wte); free(e.wpe); free(e.out); free(e.w); free(dwte); free(dwpe);
}

/* ---- layernorm ---- */
typedef struct { int B, T, C; float *inp, *weight, *bias, *out, *mean, *rstd, *w; } LnCase;
static double ln_loss(void *p)
{
    LnCase *l = p;
    kern_layernorm_forward(l->out, l->mean, l->rstd, l->inp, l->weight, l->bias, l->B, l->T, l->C);
    return dot(l->out, l->w, (size_t)l->B * l->T * l->C);
}

Test(kern_ops, layernorm_forward_should_give_rows_of_zero_mean_and_unit_variance)
{
    int B = 2, T = 3, C = 16;
    size_t n = (size_t)B * T * C;
    float *inp = frand(n, 3), *out = fzeros(n), *mean = fzeros(B * T), *rstd = fzeros(B * T);
    float *ones = fzeros(C), *zeros = fzeros(C);
    for (int c = 0; c < C; c++) ones[c] = 1.0f;
    for (int c = 0; c < C; c++) inp[c] += 5.0f;   /* an offset row */
    kern_layernorm_forward(out, mean, rstd, inp, ones, zeros, B, T, C);
    for (int r = 0; r < B * T; r++) {
        double m = 0, v = 0, xm = 0;
        for (int c = 0; c < C; c++) { m += out[r * C + c]; xm += inp[r * C + c]; }
        m /= C; xm /= C;
        for (int c = 0; c < C; c++) v += (out[r * C + c] - m) * (out[r * C + c] - m);
        v /= C;
        cr_assert(fabs(m) < 1e-5, "row %d mean %g", r, m);
        cr_assert(fabs(v - 1.0) < 1e-3, "row %d variance %g", r, v);   /* eps = 1e-5 shifts it a little */
        cr_assert(fabs(mean[r] - xm) < 1e-5, "saved mean %g, expected %g", mean[r], xm);
    }
    free(inp); free(out); free(mean); free(rstd); free(ones); free(zeros);
}

Test(kern_ops, layernorm_backward_should_match_finite_differences)
{
    LnCase l = {.B = 2, .T = 3, .C = 8};
    size_t n = (size_t)l.B * l.T * l.C;
    l.inp = frand(n, 1); l.weight = frand(l.C, 1); l.bias = frand(l.C, 1);
    l.out = fzeros(n); l.mean = fzeros(l.B * l.T); l.rstd = fzeros(l.B * l.T); l.w = frand(n, 1);
    ln_loss(&l);
    float *dinp = fzeros(n), *dweight = fzeros(l.C), *dbias = fzeros(l.C);
    kern_layernorm_backward(dinp, dweight, dbias, l.w, l.inp, l.weight, l.mean, l.rstd, l.B, l.T, l.C);
    check_fd("dinp", l.inp, dinp, n, ln_loss, &l);
    check_fd("dweight", l.weight, dweight, l.C, ln_loss, &l);
    check_fd("dbias", l.bias, dbias, l.C, ln_loss, &l);
    free(l.inp); free(l.weight); free(l.bias); free(l.out); free(l.mean); free(l.rstd); free(l.w);
    free(dinp); free(dweight); free(dbias);
}

/* ---- matmul ---- */
typedef struct { int B, T, C, OC; float *inp, *weight, *bias, *out, *w; } MmCase;
static double mm_loss(void *p)
{
    MmCase *m = p;
    kern_matmul_forward(m->out, m->inp, m->weight, m->bias, m->B, m->T, m->C, m->OC);
    return dot(m->out, m->w, (size_t)m->B * m->T * m->OC);
}

Test(kern_ops, matmul_forward_should_match_a_naive_loop)
{
    int B = 2, T = 5, C = 7, OC = 9, M = B * T;
    float *inp = frand((size_t)M * C, 1), *weight = frand((size_t)OC * C, 1), *bias = frand(OC, 1);
    float *out = frand((size_t)M * OC, 100);   /* garbage: the kernel must overwrite it */
    for (int with_bias = 0; with_bias < 2; with_bias++) {
        kern_matmul_forward(out, inp, weight, with_bias ? bias : NULL, B, T, C, OC);
        for (int r = 0; r < M; r++)
            for (int o = 0; o < OC; o++) {
                double s = with_bias ? bias[o] : 0.0;
                for (int c = 0; c < C; c++) s += (double)inp[r * C + c] * weight[o * C + c];
                cr_assert(fabs(out[r * OC + o] - s) < 1e-5, "out[%d,%d] = %g, naive %g (bias %d)",
                          r, o, out[r * OC + o], s, with_bias);
            }
    }
    free(inp); free(weight); free(bias); free(out);
}

Test(kern_ops, matmul_backward_should_match_a_naive_loop_and_finite_differences)
{
    MmCase m = {.B = 2, .T = 3, .C = 5, .OC = 4};
    int M = m.B * m.T;
    m.inp = frand((size_t)M * m.C, 1); m.weight = frand((size_t)m.OC * m.C, 1); m.bias = frand(m.OC, 1);
    m.out = fzeros((size_t)M * m.OC); m.w = frand((size_t)M * m.OC, 1);
    float *dinp = fzeros((size_t)M * m.C), *dweight = fzeros((size_t)m.OC * m.C), *dbias = fzeros(m.OC);
    kern_matmul_backward(dinp, dweight, dbias, m.w, m.inp, m.weight, m.B, m.T, m.C, m.OC);
    for (int r = 0; r < M; r++)
        for (int c = 0; c < m.C; c++) {
            double s = 0;
            for (int o = 0; o < m.OC; o++) s += (double)m.w[r * m.OC + o] * m.weight[o * m.C + c];
            cr_assert(fabs(dinp[r * m.C + c] - s) < 1e-5);
        }
    for (int o = 0; o < m.OC; o++) {
        double sb = 0;
        for (int r = 0; r < M; r++) sb += m.w[r * m.OC + o];
        cr_assert(fabs(dbias[o] - sb) < 1e-5);
        for (int c = 0; c < m.C; c++) {
            double s = 0;
            for (int r = 0; r < M; r++) s += (double)m.w[r * m.OC + o] * m.inp[r * m.C + c];
            cr_assert(fabs(dweight[o * m.C + c] - s) < 1e-5);
        }
    }
    check_fd("dinp", m.inp, dinp, (size_t)M * m.C, mm_loss, &m);
    check_fd("dweight", m.weight, dweight, (size_t)m.OC * m.C, mm_loss, &m);
    check_fd("dbias", m.bias, dbias, m.OC, mm_loss, &m);
    free(m.inp); free(m.weight); free(m.bias); free(m.out); free(m.w); free(dinp); free(dweight); free(dbias);
}

Test(kern_ops, matmul_backward_should_skip_gradients_passed_as_null)
{
    int B = 1, T = 4, C = 3, OC = 2;
    float *inp = frand(B * T * C, 1), *weight = frand(OC * C, 1), *dout = frand(B * T * OC, 1);
    float *dweight = fzeros(OC * C);
    kern_matmul_backward(NULL, dweight, NULL, dout, inp, weight, B, T, C, OC);
    double s = 0;
    for (int r = 0; r < B * T; r++) s += (double)dout[r * OC + 1] * inp[r * C + 2];
    cr_assert(fabs(dweight[1 * C + 2] - s) < 1e-5);
    free(inp); free(weight); free(dout); free(dweight);
}

Test(kern_ops, matmul_should_give_identical_bits_when_run_twice)
{
    int B = 4, T = 32, C = 64, OC = 96;
    float *inp = frand((size_t)B * T * C, 1), *weight = frand((size_t)OC * C, 1);
    float *o1 = fzeros((size_t)B * T * OC), *o2 = fzeros((size_t)B * T * OC);
    kern_matmul_forward(o1, inp, weight, NULL, B, T, C, OC);
    kern_matmul_forward(o2, inp, weight, NULL, B, T, C, OC);
    cr_assert(memcmp(o1, o2, (size_t)B * T * OC * sizeof(float)) == 0);
    free(inp); free(weight); free(o1); free(o2);
}

/* ---- attention ---- */
typedef struct { int B, T, C, NH; float *inp, *out, *preatt, *att, *w; } AttCase;
static double att_loss(void *p)
{
    AttCase *a = p;
    kern_attention_forward(a->out, a->preatt, a->att, a->inp, a->B, a->T, a->C, a->NH);
    return dot(a->out, a->w, (size_t)a->B * a->T * a->C);
}

Test(kern_ops, attention_forward_should_be_causal_with_rows_summing_to_one)
{
    int B = 2, T = 5, C = 8, NH = 2;
    size_t nin = (size_t)B * T * 3 * C, nout = (size_t)B * T * C, natt = (size_t)B * NH * T * T;
    float *inp = frand(nin, 1), *out = fzeros(nout), *out2 = fzeros(nout);
    float *preatt = frand(natt, 9), *att = frand(natt, 9);   /* garbage: must be overwritten */
    kern_attention_forward(out, preatt, att, inp, B, T, C, NH);
    for (int bh = 0; bh < B * NH; bh++)
        for (int t = 0; t < T; t++) {
            double s = 0;
            for (int t2 = 0; t2 < T; t2++) {
                float a = att[((size_t)bh * T + t) * T + t2];
                if (t2 > t) {
                    cr_assert(a == 0.0f && preatt[((size_t)bh * T + t) * T + t2] == 0.0f);
                }
                s += a;
            }
            cr_assert(fabs(s - 1.0) < 1e-5, "att row sums to %g", s);
        }
    /* changing the last token's q, k, v must leave every earlier output unchanged */
    for (int b = 0; b < B; b++)
        for (int c = 0; c < 3 * C; c++) inp[((size_t)b * T + T - 1) * 3 * C + c] += 1.0f;
    kern_attention_forward(out2, preatt, att, inp, B, T, C, NH);
    for (int b = 0; b < B; b++)
        cr_assert(memcmp(out + (size_t)b * T * C, out2 + (size_t)b * T * C, (size_t)(T - 1) * C * sizeof(float)) == 0);
    free(inp); free(out); free(out2); free(preatt); free(att);
}

Test(kern_ops, attention_forward_with_one_token_should_return_its_value)
{
    int B = 1, T = 1, C = 6, NH = 3;
    float *inp = frand(3 * C, 1), out[6], preatt[3], att[3];
    kern_attention_forward(out, preatt, att, inp, B, T, C, NH);
    for (int c = 0; c < C; c++) cr_assert_float_eq(out[c], inp[2 * C + c], 1e-6f);
    free(inp);
}

Test(kern_ops, attention_backward_should_match_finite_differences)
{
    AttCase a = {.B = 2, .T = 4, .C = 8, .NH = 2};
    size_t nin = (size_t)a.B * a.T * 3 * a.C, nout = (size_t)a.B * a.T * a.C;
    size_t natt = (size_t)a.B * a.NH * a.T * a.T;
    a.inp = frand(nin, 1); a.out = fzeros(nout); a.w = frand(nout, 1);
    a.preatt = fzeros(natt); a.att = fzeros(natt);
    att_loss(&a);
    float *dinp = fzeros(nin), *dpreatt = frand(natt, 9), *datt = frand(natt, 9);
    kern_attention_backward(dinp, dpreatt, datt, a.w, a.inp, a.att, a.B, a.T, a.C, a.NH);
    check_fd("dqkv", a.inp, dinp, nin, att_loss, &a);
    free(a.inp); free(a.out); free(a.w); free(a.preatt); free(a.att); free(dinp); free(dpreatt); free(datt);
}

/* ---- GELU ---- */
typedef struct { size_t n; float *inp, *out, *w; } GeluCase;
static double gelu_loss(void *p)
{
    GeluCase *g = p;
    kern_gelu_forward(g->out, g->inp, g->n);
    return dot(g->out, g->w, g->n);
}

Test(kern_ops, gelu_forward_should_match_the_tanh_formula_in_double)
{
    size_t n = 64;
    float *inp = frand(n, 5), *out = fzeros(n);
    kern_gelu_forward(out, inp, n);
    for (size_t i = 0; i < n; i++) {
        double x = inp[i];
        double ref = 0.5 * x * (1.0 + tanh(sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x)));
        cr_assert(fabs(out[i] - ref) < 1e-5 * fmax(1.0, fabs(ref)), "gelu(%g) = %g, expected %g", x, out[i], ref);
    }
    free(inp); free(out);
}

Test(kern_ops, gelu_backward_should_match_finite_differences)
{
    GeluCase g = {.n = 64};
    g.inp = frand(g.n, 4); g.out = fzeros(g.n); g.w = frand(g.n, 1);
    float *dinp = fzeros(g.n);
    kern_gelu_backward(dinp, g.inp, g.w, g.n);
    check_fd("dinp", g.inp, dinp, g.n, gelu_loss, &g);
    free(g.inp); free(g.out); free(g.w); free(dinp);
}

/* ---- residual ---- */
Test(kern_ops, residual_should_add_forward_and_pass_gradients_to_both_inputs)
{
    size_t n = 10;
    float *a = frand(n, 1), *b = frand(n, 1), *out = fzeros(n), *dout = frand(n, 1);
    float *da = frand(n, 1), *db = fzeros(n), *da0 = malloc(n * sizeof(float));
    memcpy(da0, da, n * sizeof(float));
    kern_residual_forward(out, a, b, n);
    kern_residual_backward(da, db, dout, n);
    for (size_t i = 0; i < n; i++) {
        cr_assert_float_eq(out[i], a[i] + b[i], 0.0f);
        cr_assert_float_eq(da[i], da0[i] + dout[i], 0.0f);   /* accumulated */
        cr_assert_float_eq(db[i], dout[i], 0.0f);
    }
    free(a); free(b); free(out); free(dout); free(da); free(db); free(da0);
}

/* ---- softmax + cross-entropy ---- */
typedef struct { int B, T, V; const int *targets; float *logits, *probs, *losses; float dloss; } CeCase;
static double ce_loss(void *p)
{
    CeCase *c = p;
    kern_crossentropy_softmax_forward(c->probs, c->losses, c->logits, c->targets, c->B, c->T, c->V);
    double s = 0;
    for (int i = 0; i < c->B * c->T; i++) s += (double)c->losses[i] * c->dloss;
    return s;
}

Test(kern_ops, crossentropy_probabilities_should_sum_to_one_and_loss_equal_minus_log_p)
{
    int B = 2, T = 3, V = 11;
    int targets[] = {0, 10, 5, 5, 3, 7};
    float *logits = frand((size_t)B * T * V, 20), *probs = fzeros((size_t)B * T * V), *losses = fzeros(B * T);
    logits[3] = 80.0f;   /* large logits must not overflow (max is subtracted) */
    kern_crossentropy_softmax_forward(probs, losses, logits, targets, B, T, V);
    for (int r = 0; r < B * T; r++) {
        double s = 0, ref = 0, maxv = -INFINITY;
        for (int i = 0; i < V; i++) { s += probs[r * V + i]; maxv = fmax(maxv, logits[r * V + i]); }
        for (int i = 0; i < V; i++) ref += exp((double)logits[r * V + i] - maxv);
        double ref_loss = -((double)logits[r * V + targets[r]] - maxv - log(ref));
        cr_assert(fabs(s - 1.0) < 1e-5, "row %d sums to %g", r, s);
        cr_assert_float_eq(losses[r], -logf(probs[r * V + targets[r]]), 1e-6f);
        cr_assert(fabs(losses[r] - ref_loss) < 1e-4 * fmax(1.0, ref_loss), "loss %g, log-sum-exp in double %g",
                  losses[r], ref_loss);
    }
    free(logits); free(probs); free(losses);
}

Test(kern_ops, crossentropy_backward_should_match_finite_differences)
{
    CeCase c = {.B = 2, .T = 2, .V = 7, .dloss = 0.25f};
    int targets[] = {6, 0, 3, 3};
    c.targets = targets;
    size_t n = (size_t)c.B * c.T * c.V;
    c.logits = frand(n, 2); c.probs = fzeros(n); c.losses = fzeros(c.B * c.T);
    ce_loss(&c);
    float *dlogits = fzeros(n);
    kern_crossentropy_softmax_backward(dlogits, c.probs, c.targets, c.dloss, c.B, c.T, c.V);
    check_fd("dlogits", c.logits, dlogits, n, ce_loss, &c);
    free(c.logits); free(c.probs); free(c.losses); free(dlogits);
}

/* ---- fused LM head + cross-entropy ---- */
typedef struct { int B, T, C, V; const int *targets; float *inp, *weight, *logits, *lse, *losses; float dloss; } HeadCase;
static double head_loss(void *p)
{
    HeadCase *h = p;
    kern_lmhead_ce_forward(h->logits, h->lse, h->losses, h->inp, h->weight, h->targets, h->B, h->T, h->C, h->V);
    double s = 0;
    for (int i = 0; i < h->B * h->T; i++) s += (double)h->losses[i] * h->dloss;
    return s;
}

Test(kern_ops, lmhead_forward_should_equal_the_matmul_then_the_crossentropy)
{
    int B = 2, T = 3, C = 5, V = 11;
    int targets[] = {0, 10, 5, 5, 3, 7};
    size_t rows = (size_t)B * T, n = rows * V;
    float *inp = frand(rows * C, 2), *w = frand((size_t)V * C, 2);
    float *logits = frand(n, 9), *lse = frand(rows, 9), *losses = frand(rows, 9);   /* written, not read */
    float *l2 = fzeros(n), *probs = fzeros(n), *loss2 = fzeros(rows);
    kern_lmhead_ce_forward(logits, lse, losses, inp, w, targets, B, T, C, V);
    kern_matmul_forward(l2, inp, w, NULL, B, T, C, V);
    kern_crossentropy_softmax_forward(probs, loss2, l2, targets, B, T, V);
    cr_assert(memcmp(logits, l2, n * sizeof(float)) == 0, "logits are the matmul's");
    for (size_t r = 0; r < rows; r++) {
        cr_assert(fabs(losses[r] - loss2[r]) <= 1e-5 + 1e-5 * fabs(loss2[r]), "row %zu: loss %g, unfused %g",
                  r, losses[r], loss2[r]);
        /* probabilities from the log-sum-exp */
        for (int i = 0; i < V; i++)
            cr_assert(fabs(expf(logits[r * V + i] - lse[r]) - probs[r * V + i]) <= 1e-6 + 1e-5 * probs[r * V + i]);
    }
    free(inp); free(w); free(logits); free(lse); free(losses); free(l2); free(probs); free(loss2);
}

Test(kern_ops, lmhead_backward_should_match_finite_differences_and_leave_dlogits_in_the_logits)
{
    HeadCase h = {.B = 2, .T = 2, .C = 5, .V = 7, .dloss = 0.25f};
    int targets[] = {6, 0, 3, 3};
    h.targets = targets;
    size_t rows = (size_t)h.B * h.T, n = rows * h.V;
    h.inp = frand(rows * h.C, 1); h.weight = frand((size_t)h.V * h.C, 1);
    h.logits = fzeros(n); h.lse = fzeros(rows); h.losses = fzeros(rows);
    head_loss(&h);
    /* the unfused gradient of the logits, from the probabilities */
    float *probs = fzeros(n), *loss2 = fzeros(rows), *dl = fzeros(n);
    kern_crossentropy_softmax_forward(probs, loss2, h.logits, targets, h.B, h.T, h.V);
    kern_crossentropy_softmax_backward(dl, probs, targets, h.dloss, h.B, h.T, h.V);
    float *dinp = fzeros(rows * h.C), *dw = fzeros((size_t)h.V * h.C);
    kern_lmhead_ce_backward(dinp, dw, h.logits, h.lse, targets, h.inp, h.weight, h.dloss, h.B, h.T, h.C, h.V);
    for (size_t i = 0; i < n; i++)
        cr_assert(fabs(h.logits[i] - dl[i]) <= 1e-7 + 1e-5 * fabs(dl[i]), "dlogits[%zu]: %g, unfused %g", i,
                  h.logits[i], dl[i]);
    check_fd("dinp", h.inp, dinp, rows * h.C, head_loss, &h);
    check_fd("dweight", h.weight, dw, (size_t)h.V * h.C, head_loss, &h);
    free(h.inp); free(h.weight); free(h.logits); free(h.lse); free(h.losses); free(probs); free(loss2); free(dl);
    free(dinp); free(dw);
}

/* ---- accumulation contract ---- */
Test(kern_ops, backward_kernels_should_accumulate_into_gradients)
{
    int B = 1, T = 3, C = 4, NH = 2, OC = 5;
    size_t n = (size_t)B * T * C;
    float *inp = frand(n, 1), *weight = frand(OC * C, 1), *dout = frand((size_t)B * T * OC, 1);
    float *d1 = fzeros(n), *d2 = fzeros(n), *dw1 = fzeros(OC * C), *dw2 = fzeros(OC * C);
    kern_matmul_backward(d1, dw1, NULL, dout, inp, weight, B, T, C, OC);
    kern_matmul_backward(d2, dw2, NULL, dout, inp, weight, B, T, C, OC);
    kern_matmul_backward(d2, dw2, NULL, dout, inp, weight, B, T, C, OC);
    for (size_t i = 0; i < n; i++) cr_assert(fabs(d2[i] - 2 * d1[i]) < 1e-5);
    for (int i = 0; i < OC * C; i++) cr_assert(fabs(dw2[i] - 2 * dw1[i]) < 1e-5);

    size_t nq = 3 * n, na = (size_t)B * NH * T * T;
    float *qkv = frand(nq, 1), *out = fzeros(n), *pre = fzeros(na), *att = fzeros(na), *dpre = fzeros(na), *datt = fzeros(na);
    float *dq1 = fzeros(nq), *dq2 = fzeros(nq);
    kern_attention_forward(out, pre, att, qkv, B, T, C, NH);
    kern_attention_backward(dq1, dpre, datt, inp, qkv, att, B, T, C, NH);
    kern_attention_backward(dq2, dpre, datt, inp, qkv, att, B, T, C, NH);
    kern_attention_backward(dq2, dpre, datt, inp, qkv, att, B, T, C, NH);
    for (size_t i = 0; i < nq; i++) cr_assert(fabs(dq2[i] - 2 * dq1[i]) < 1e-5);
    free(inp); free(weight); free(dout); free(d1); free(d2); free(dw1); free(dw2);
    free(qkv); free(out); free(pre); free(att); free(dpre); free(datt); free(dq1); free(dq2);
}

/* ---- AdamW ---- */
Test(kern_ops, adamw_should_match_a_hand_computed_step)
{
    /* lr 0.1, betas (0.9, 0.999), eps 1e-8, weight decay 0.01, one element p = 1.
     * t = 1, g = 0.5: m = 0.1·0.5 = 0.05, v = 0.001·0.25 = 2.5e-4, m̂ = 0.5, v̂ = 0.25;
     *   p = 1·(1 - 0.1·0.01) = 0.999, then p -= 0.1·0.5/(0.5 + 1e-8)  →  p = 0.899.
     * t = 2, g = -1: m = 0.9·0.05 - 0.1 = -0.055, v = 0.999·2.5e-4 + 0.001 = 1.24975e-3,
     *   m̂ = -0.055/(1 - 0.9²), v̂ = 1.24975e-3/(1 - 0.999²);
     *   p = 0.899·(1 - 0.001) - 0.1·m̂/(√v̂ + 1e-8), evaluated below in double.
     * Tolerances are float rounding of these few operations: 1 - 0.9f and 1 - 0.999f are off
     * by 2.4e-7 and 1.3e-5 relative, so m is checked to 1e-7 and v to 2e-5 relative. */
    float p = 1.0f, g = 0.5f, m = 0.0f, v = 0.0f;
    kern_adamw_update(&p, &g, &m, &v, 0, 1, 0.1f, 0.9f, 0.999f, 1e-8f, 0.01f, 1);
    cr_assert(fabs(m - 0.05) < 1e-7, "m = %.9g", m);
    cr_assert(fabs(v - 2.5e-4) < 2e-5 * 2.5e-4, "v = %.9g", v);
    cr_assert(fabs(p - 0.899) < 1e-6, "p = %.9g", p);
    g = -1.0f;
    kern_adamw_update(&p, &g, &m, &v, 0, 1, 0.1f, 0.9f, 0.999f, 1e-8f, 0.01f, 2);
    double mhat = -0.055 / (1.0 - 0.9 * 0.9), vhat = 1.24975e-3 / (1.0 - 0.999 * 0.999);
    double expect = 0.899 * (1.0 - 0.1 * 0.01) - 0.1 * mhat / (sqrt(vhat) + 1e-8);
    cr_assert(fabs(m - -0.055) < 1e-7, "m = %.9g", m);
    cr_assert(fabs(v - 1.24975e-3) < 2e-5 * 1.24975e-3, "v = %.9g", v);
    cr_assert(fabs(p - expect) < 1e-6, "p = %.9g, hand-computed %.9g", p, expect);
}

Test(kern_ops, adamw_should_update_only_its_shard_with_shard_local_state)
{
    float p[8], g[8], m[3] = {0}, v[3] = {0};
    for (int i = 0; i < 8; i++) { p[i] = 1.0f + i; g[i] = 0.1f * (i + 1); }
    float full_p[8], full_m[8] = {0}, full_v[8] = {0};
    memcpy(full_p, p, sizeof p);
    kern_adamw_update(p, g, m, v, 2, 3, 1e-2f, 0.9f, 0.95f, 1e-8f, 0.1f, 1);
    kern_adamw_update(full_p, g, full_m, full_v, 0, 8, 1e-2f, 0.9f, 0.95f, 1e-8f, 0.1f, 1);
    for (int i = 0; i < 8; i++) {
        if (i >= 2 && i < 5) {
            cr_assert_float_eq(p[i], full_p[i], 0.0f);   /* same arithmetic as the unsharded update */
            cr_assert_float_eq(m[i - 2], full_m[i], 0.0f);
            cr_assert_float_eq(v[i - 2], full_v[i], 0.0f);
        } else {
            cr_assert_float_eq(p[i], 1.0f + i, 0.0f);    /* outside the shard: untouched */
        }
    }
}

/* ---- the fast CPU paths (kern_fast.h) against these references ----
 * Each fast kernel runs on the same random inputs as its reference, onto the same non-zero
 * starting gradients (so accumulation is checked too), and must agree within
 * |fast - ref| <= FAST_ATOL + FAST_RTOL·|ref| elementwise. The differences come from summation
 * order (GEMMs, partial sums: ~1e-6 relative for these sizes) and from kern_fast_expf (2e-7
 * relative); 1e-5 + 1e-4 relative bounds them with a margin of 10 while any wrong term (order
 * 1e-2 .. 1) fails. Shapes are odd on purpose: T not a multiple of the attention block, C not a
 * multiple of the lanes. */
#define FAST_ATOL 1e-5
#define FAST_RTOL 1e-4

static void expect_close(const char *what, const float *fast, const float *ref, size_t n)
{
    for (size_t i = 0; i < n; i++)
        cr_assert(fabs((double)fast[i] - (double)ref[i]) <= FAST_ATOL + FAST_RTOL * fabs((double)ref[i]),
                  "%s[%zu]: fast %.9g, reference %.9g", what, i, fast[i], ref[i]);
}

static float *fcopy(const float *src, size_t n)
{
    float *p = malloc(n * sizeof(float));
    cr_assert_not_null(p);
    memcpy(p, src, n * sizeof(float));
    return p;
}

Test(kern_fast, expf_should_be_within_2e_7_relative_of_libm_over_its_range)
{
    double worst = 0.0;
    for (int i = 0; i <= 2000000; i++) {
        float x = -87.0f + 175.0f * (float)i / 2000000.0f;
        double ref = exp((double)x), rel = fabs((double)kern_fast_expf(x) - ref) / ref;
        if (rel > worst) worst = rel;
    }
    cr_assert(worst <= 2e-7, "worst relative error %.3g", worst);
    cr_assert(kern_fast_expf(-1000.0f) >= 0.0f && kern_fast_expf(-1000.0f) < 1e-37f, "clamped below");
    cr_assert(isfinite(kern_fast_expf(1000.0f)), "clamped above, finite");
}

Test(kern_fast, layernorm_should_match_the_reference)
{
    int B = 2, T = 5, C = 37;
    size_t n = (size_t)B * T * C;
    float *x = frand(n, 2.0f), *w = frand(C, 1.0f), *bias = frand(C, 1.0f), *d = frand(n, 1.0f);
    float *o1 = fzeros(n), *o2 = fzeros(n), *m1 = fzeros(B * T), *m2 = fzeros(B * T);
    float *s1 = fzeros(B * T), *s2 = fzeros(B * T);
    kern_layernorm_forward(o1, m1, s1, x, w, bias, B, T, C);
    kern_layernorm_forward_fast(o2, m2, s2, x, w, bias, B, T, C);
    expect_close("out", o2, o1, n);
    expect_close("mean", m2, m1, B * T);
    expect_close("rstd", s2, s1, B * T);
    float *dx1 = frand(n, 1.0f), *dx2 = fcopy(dx1, n), *dw1 = frand(C, 1.0f), *dw2 = fcopy(dw1, C);
    float *db1 = frand(C, 1.0f), *db2 = fcopy(db1, C);
    kern_layernorm_backward(dx1, dw1, db1, d, x, w, m1, s1, B, T, C);
    kern_layernorm_backward_fast(dx2, dw2, db2, d, x, w, m1, s1, B, T, C);
    expect_close("dinp", dx2, dx1, n);
    expect_close("dweight", dw2, dw1, C);
    expect_close("dbias", db2, db1, C);
    free(x), free(w), free(bias), free(d), free(o1), free(o2), free(m1), free(m2), free(s1), free(s2);
    free(dx1), free(dx2), free(dw1), free(dw2), free(db1), free(db2);
}

static void attention_fast_case(int B, int T, int C, int NH)
{
    size_t ni = (size_t)B * T * 3 * C, no = (size_t)B * T * C, na = (size_t)B * NH * T * T;
    float *inp = frand(ni, 1.5f), *dout = frand(no, 1.0f);
    float *o1 = fzeros(no), *o2 = fzeros(no), *p1 = fzeros(na), *a1 = fzeros(na);
    /* the fast path must write the masked entries itself: start its scratch with garbage */
    float *p2 = frand(na, 9.0f), *a2 = frand(na, 9.0f);
    kern_attention_forward(o1, p1, a1, inp, B, T, C, NH);
    kern_attention_forward_fast(o2, p2, a2, inp, B, T, C, NH);
    expect_close("out", o2, o1, no);
    expect_close("preatt", p2, p1, na);
    expect_close("att", a2, a1, na);
    float *d1 = frand(ni, 1.0f), *d2 = fcopy(d1, ni);
    float *dp1 = fzeros(na), *da1 = fzeros(na), *dp2 = frand(na, 9.0f), *da2 = frand(na, 9.0f);
    kern_attention_backward(d1, dp1, da1, dout, inp, a1, B, T, C, NH);
    kern_attention_backward_fast(d2, dp2, da2, dout, inp, a1, B, T, C, NH);
    expect_close("dinp", d2, d1, ni);
    expect_close("dpreatt", dp2, dp1, na);
    expect_close("datt", da2, da1, na);
    free(inp), free(dout), free(o1), free(o2), free(p1), free(a1), free(p2), free(a2);
    free(d1), free(d2), free(dp1), free(da1), free(dp2), free(da2);
}

Test(kern_fast, attention_through_gemms_should_match_the_reference)
{
    attention_fast_case(2, 7, 12, 3);      /* one partial row block */
    attention_fast_case(2, 150, 32, 4);    /* three row blocks, the last partial */
    attention_fast_case(1, 128, 64, 2);    /* exactly two blocks */
}

Test(kern_fast, gelu_should_match_the_reference_including_the_saturated_tails)
{
    size_t n = 4096;
    float *x = frand(n, 6.0f), *d = frand(n, 1.0f);
    x[0] = 0.0f, x[1] = -30.0f, x[2] = 30.0f, x[3] = 1e-6f, x[4] = -1e-6f;
    float *o1 = fzeros(n), *o2 = fzeros(n);
    kern_gelu_forward(o1, x, n);
    kern_gelu_forward_fast(o2, x, n);
    expect_close("gelu", o2, o1, n);
    float *g1 = frand(n, 1.0f), *g2 = fcopy(g1, n);
    kern_gelu_backward(g1, x, d, n);
    kern_gelu_backward_fast(g2, x, d, n);
    expect_close("dgelu", g2, g1, n);
    free(x), free(d), free(o1), free(o2), free(g1), free(g2);
}

Test(kern_fast, crossentropy_forward_should_match_the_reference)
{
    int B = 3, T = 5, V = 1031;
    size_t n = (size_t)B * T * V;
    float *l = frand(n, 8.0f), *p1 = fzeros(n), *p2 = fzeros(n), *L1 = fzeros(B * T), *L2 = fzeros(B * T);
    int tg[15];
    for (int i = 0; i < B * T; i++) tg[i] = (i * 97) % V;
    kern_crossentropy_softmax_forward(p1, L1, l, tg, B, T, V);
    kern_crossentropy_softmax_forward_fast(p2, L2, l, tg, B, T, V);
    expect_close("probs", p2, p1, n);
    expect_close("losses", L2, L1, B * T);
    free(l), free(p1), free(p2), free(L1), free(L2);
}

Test(kern_fast, matmul_backward_and_residual_should_equal_the_reference_bit_for_bit)
{
    int B = 3, T = 7, C = 13, OC = 37;   /* OC not a multiple of any vector width */
    size_t M = (size_t)B * T;
    float *inp = frand(M * C, 1.0f), *w = frand((size_t)OC * C, 1.0f), *d = frand(M * OC, 1.0f);
    float *dx1 = frand(M * C, 1.0f), *dx2 = fcopy(dx1, M * C), *dw1 = frand((size_t)OC * C, 1.0f);
    float *dw2 = fcopy(dw1, (size_t)OC * C), *db1 = frand(OC, 1.0f), *db2 = fcopy(db1, OC);
    kern_matmul_backward(dx1, dw1, db1, d, inp, w, B, T, C, OC);
    kern_matmul_backward_fast(dx2, dw2, db2, d, inp, w, B, T, C, OC);
    cr_assert(memcmp(dx1, dx2, M * C * sizeof(float)) == 0, "dinp");
    cr_assert(memcmp(dw1, dw2, (size_t)OC * C * sizeof(float)) == 0, "dweight");
    cr_assert(memcmp(db1, db2, OC * sizeof(float)) == 0, "dbias");
    kern_matmul_backward_fast(NULL, NULL, db2, d, inp, w, B, T, C, OC);   /* only the bias */
    kern_matmul_backward(NULL, NULL, db1, d, inp, w, B, T, C, OC);
    cr_assert(memcmp(db1, db2, OC * sizeof(float)) == 0, "dbias alone");
    size_t n = 1001;
    float *a = frand(n, 3.0f), *b2 = frand(n, 3.0f), *o1 = fzeros(n), *o2 = frand(n, 9.0f);
    kern_residual_forward(o1, a, b2, n);
    kern_residual_forward_fast(o2, a, b2, n);
    cr_assert(memcmp(o1, o2, n * sizeof(float)) == 0, "residual");
    free(inp), free(w), free(d), free(dx1), free(dx2), free(dw1), free(dw2), free(db1), free(db2);
    free(a), free(b2), free(o1), free(o2);
}

/* B·T rows × V columns beyond KERN_FAST_LMHEAD_CHUNK, so the vocabulary goes in several chunks
   (the last one partial), with targets on chunk edges; gradients accumulate onto non-zero
   buffers and the outputs start with garbage */
static void lmhead_fast_case(int B, int T, int C, int V, float scale)
{
    size_t rows = (size_t)B * T, n = rows * V;
    float *inp = frand(rows * C, scale), *w = frand((size_t)V * C, scale);
    int *tg = malloc(rows * sizeof *tg);
    cr_assert_not_null(tg);
    for (size_t r = 0; r < rows; r++) tg[r] = (int)((r * 1031 + (r % 3 == 0 ? V - 1 : 0)) % (size_t)V);
    tg[0] = 0, tg[1] = V - 1;
    float *l1 = fzeros(n), *s1 = fzeros(rows), *L1 = fzeros(rows);
    float *l2 = frand(n, 50.0f), *s2 = frand(rows, 50.0f), *L2 = frand(rows, 50.0f);
    kern_lmhead_ce_forward(l1, s1, L1, inp, w, tg, B, T, C, V);
    kern_lmhead_ce_forward_fast(l2, s2, L2, inp, w, tg, B, T, C, V);
    expect_close("logits", l2, l1, n);
    expect_close("lse", s2, s1, rows);
    expect_close("losses", L2, L1, rows);
    float dloss = 1.0f / (float)rows;
    float *d1 = frand(rows * C, 1.0f), *d2 = fcopy(d1, rows * C);
    float *dw1 = frand((size_t)V * C, 1.0f), *dw2 = fcopy(dw1, (size_t)V * C);
    kern_lmhead_ce_backward(d1, dw1, l1, s1, tg, inp, w, dloss, B, T, C, V);
    kern_lmhead_ce_backward_fast(d2, dw2, l2, s1, tg, inp, w, dloss, B, T, C, V);
    expect_close("dlogits", l2, l1, n);
    expect_close("dinp", d2, d1, rows * C);
    expect_close("dweight", dw2, dw1, (size_t)V * C);
    free(inp), free(w), free(tg), free(l1), free(s1), free(L1), free(l2), free(s2), free(L2);
    free(d1), free(d2), free(dw1), free(dw2);
}

Test(kern_fast, lmhead_by_vocabulary_chunks_should_match_the_reference)
{
    lmhead_fast_case(4, 150, 37, 5003, 1.0f);    /* 600 rows: chunks of 1744 columns, the last partial */
    lmhead_fast_case(4, 150, 37, 5003, 6.0f);    /* wide logits: the running maximum jumps between chunks */
    lmhead_fast_case(1, 3, 16, 11, 2.0f);        /* one chunk */
}

Test(kern_fast, adamw_should_equal_the_reference_bit_for_bit)
{
    size_t n = 1003;
    float *p1 = frand(n, 1.0f), *g = frand(n, 1.0f), *m1 = frand(n, 0.1f), *v1 = frand(n, 0.1f);
    for (size_t i = 0; i < n; i++) v1[i] = fabsf(v1[i]);
    float *p2 = fcopy(p1, n), *m2 = fcopy(m1, n), *v2 = fcopy(v1, n);
    kern_adamw_update(p1, g, m1 + 3, v1 + 3, 3, n - 3, 1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, 7);
    kern_adamw_update_fast(p2, g, m2 + 3, v2 + 3, 3, n - 3, 1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, 7);
    cr_assert(memcmp(p1, p2, n * sizeof(float)) == 0, "params");
    cr_assert(memcmp(m1, m2, n * sizeof(float)) == 0, "m");
    cr_assert(memcmp(v1, v2, n * sizeof(float)) == 0, "v");
    free(p1), free(g), free(m1), free(v1), free(p2), free(m2), free(v2);
}
