/* test_kern_cnn.c — specifications of the fp32 CPU kernels of the CNN step (kernels/kern_cnn.h).
 *
 * Forward kernels are checked against direct loops in double. Backward kernels are checked
 * against central finite differences of the forward kernel: the objective is L = Σ out·w for a
 * fixed random w (so dout = w), summed in double. The forward runs in float, so a difference
 * quotient with step h carries rounding noise of about 1e-7·|L| / h; with h = 1e-3 and inputs
 * of order 1 the tolerance |fd - analytic| <= 2e-3 + 2e-2·max(|fd|, |analytic|) (as in
 * test_kern_ops.c) is loose enough for that noise and tight enough to catch any wrong term.
 *
 * The SyncBatchNorm identity (the point of splitting BatchNorm into statistics, combination and
 * application) is checked to a relative difference ‖a - b‖∞ / ‖b‖∞ < 1e-5: a batch split into 2
 * and 4 unequal parts, each part's local statistics combined, must give plain BatchNorm's
 * output, saved statistics, running statistics and gradients. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kern_cnn.h"
#include "kern_ops.h"

#define FD_H 1e-3f
#define FD_ATOL 2e-3
#define FD_RTOL 2e-2
#define SYNC_RTOL 1e-5

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
    float *p = malloc((n ? n : 1) * sizeof(float));
    cr_assert_not_null(p);
    for (size_t i = 0; i < n; i++) p[i] = urand() * scale;
    return p;
}
static float *fzeros(size_t n)
{
    float *p = calloc(n ? n : 1, sizeof(float));
    cr_assert_not_null(p);
    return p;
}
static float *fcopy(const float *a, size_t n)
{
    float *p = malloc(n * sizeof(float));
    cr_assert_not_null(p);
    memcpy(p, a, n * sizeof(float));
    return p;
}
static double dot(const float *a, const float *w, size_t n)
{
    double s = 0.0;
    for (size_t i = 0; i < n; i++) s += (double)a[i] * (double)w[i];
    return s;
}
/* ‖a - b‖∞ / ‖b‖∞ (0 when both are 0) */
static double rel_diff(const float *a, const float *b, size_t n)
{
    double num = 0.0, den = 0.0;
    for (size_t i = 0; i < n; i++) {
        num = fmax(num, fabs((double)a[i] - b[i]));
        den = fmax(den, fabs((double)b[i]));
    }
    return den > 0.0 ? num / den : num;
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

/* ---- convolution ---- */
typedef struct { int N, C, H, W, OC, K, stride, pad; } ConvShape;
static const ConvShape conv_shapes[] = {
    {2, 3, 7, 6, 4, 3, 1, 1},    /* 3×3 "same", non-square input */
    {2, 3, 7, 7, 5, 3, 2, 1},    /* 3×3 stride 2 (a stage's first block) */
    {2, 4, 5, 6, 3, 1, 1, 0},    /* 1×1 pointwise: no im2col */
    {1, 4, 6, 5, 3, 1, 2, 0},    /* 1×1 stride 2 (the downsample shortcut) */
    {1, 3, 11, 11, 2, 7, 2, 3},  /* 7×7 stride 2 pad 3 (the stem) */
    {1, 2, 5, 5, 2, 3, 1, 0},    /* no padding */
};
#define N_CONV_SHAPES (sizeof conv_shapes / sizeof conv_shapes[0])

static int conv_oh(const ConvShape *s) { return kern_conv2d_out_size(s->H, s->K, s->stride, s->pad); }
static int conv_ow(const ConvShape *s) { return kern_conv2d_out_size(s->W, s->K, s->stride, s->pad); }
static size_t conv_nin(const ConvShape *s) { return (size_t)s->N * s->C * s->H * s->W; }
static size_t conv_nw(const ConvShape *s) { return (size_t)s->OC * s->C * s->K * s->K; }
static size_t conv_nout(const ConvShape *s) { return (size_t)s->N * s->OC * conv_oh(s) * conv_ow(s); }
static float *conv_scratch(const ConvShape *s)   /* NULL where the kernel needs none */
{
    size_t n = kern_conv2d_col_size(s->C, s->H, s->W, s->K, s->stride, s->pad);
    return n ? frand(n, 100) : NULL;   /* garbage: the kernel must not read it before writing */
}

/* The definition, in double: out[n,o,y,x] = Σ_{c,i,j} w[o,c,i,j]·in[n,c,y·s-p+i,x·s-p+j];
 * also returns Σ|terms| per output in abssum, the scale of float rounding. */
static void conv_direct(double *out, double *abssum, const float *inp, const float *w, const ConvShape *s)
{
    int OH = conv_oh(s), OW = conv_ow(s);
    for (int n = 0; n < s->N; n++)
        for (int o = 0; o < s->OC; o++)
            for (int y = 0; y < OH; y++)
                for (int x = 0; x < OW; x++) {
                    double acc = 0.0, abs_acc = 0.0;
                    for (int c = 0; c < s->C; c++)
                        for (int i = 0; i < s->K; i++)
                            for (int j = 0; j < s->K; j++) {
                                int ih = y * s->stride - s->pad + i, iw = x * s->stride - s->pad + j;
                                if (ih < 0 || ih >= s->H || iw < 0 || iw >= s->W) continue;
                                double t = (double)w[((o * s->C + c) * s->K + i) * s->K + j] *
                                           inp[((n * s->C + c) * s->H + ih) * s->W + iw];
                                acc += t;
                                abs_acc += fabs(t);
                            }
                    size_t idx = (((size_t)n * s->OC + o) * OH + y) * OW + x;
                    out[idx] = acc;
                    abssum[idx] = abs_acc;
                }
}

Test(kern_cnn, conv2d_out_size_should_follow_the_pytorch_formula)
{
    cr_assert_eq(kern_conv2d_out_size(224, 7, 2, 3), 112);   /* ResNet stem */
    cr_assert_eq(kern_conv2d_out_size(112, 3, 2, 1), 56);    /* stem max pool */
    cr_assert_eq(kern_conv2d_out_size(56, 3, 1, 1), 56);
    cr_assert_eq(kern_conv2d_out_size(56, 1, 2, 0), 28);     /* downsample */
    cr_assert_eq(kern_conv2d_out_size(7, 3, 2, 1), 4);       /* odd side: floor */
    cr_assert_eq(kern_conv2d_out_size(5, 3, 1, 0), 3);
}

Test(kern_cnn, conv2d_col_size_should_be_one_image_im2col_and_zero_for_pointwise)
{
    cr_assert_eq(kern_conv2d_col_size(3, 224, 224, 7, 2, 3), (size_t)3 * 49 * 112 * 112);
    cr_assert_eq(kern_conv2d_col_size(64, 56, 56, 3, 1, 1), (size_t)64 * 9 * 56 * 56);
    cr_assert_eq(kern_conv2d_col_size(256, 56, 56, 1, 2, 0), (size_t)256 * 28 * 28);
    cr_assert_eq(kern_conv2d_col_size(256, 56, 56, 1, 1, 0), (size_t)0);
}

/* Float rounding of a sum of CKK products is at most CKK·2^-24·Σ|terms| <= 1e-5·Σ|terms| here. */
Test(kern_cnn, conv2d_forward_should_match_a_direct_convolution)
{
    for (size_t k = 0; k < N_CONV_SHAPES; k++) {
        const ConvShape *s = &conv_shapes[k];
        float *inp = frand(conv_nin(s), 1), *w = frand(conv_nw(s), 1), *col = conv_scratch(s);
        float *out = frand(conv_nout(s), 100);   /* garbage: must be overwritten */
        double *ref = malloc(conv_nout(s) * sizeof(double)), *abssum = malloc(conv_nout(s) * sizeof(double));
        kern_conv2d_forward(out, inp, w, col, s->N, s->C, s->H, s->W, s->OC, s->K, s->stride, s->pad);
        conv_direct(ref, abssum, inp, w, s);
        for (size_t i = 0; i < conv_nout(s); i++)
            cr_assert(fabs(out[i] - ref[i]) <= 1e-5 * abssum[i] + 1e-7,
                      "shape %zu, out[%zu] = %.8g, direct %.8g", k, i, out[i], ref[i]);
        free(inp); free(w); free(col); free(out); free(ref); free(abssum);
    }
}

typedef struct { const ConvShape *s; float *inp, *w, *col, *out, *dw; } ConvCase;
static double conv_loss(void *p)
{
    ConvCase *c = p;
    const ConvShape *s = c->s;
    kern_conv2d_forward(c->out, c->inp, c->w, c->col, s->N, s->C, s->H, s->W, s->OC, s->K, s->stride, s->pad);
    return dot(c->out, c->dw, conv_nout(s));
}

Test(kern_cnn, conv2d_backward_should_match_finite_differences)
{
    for (size_t k = 0; k < N_CONV_SHAPES; k++) {
        const ConvShape *s = &conv_shapes[k];
        ConvCase c = {.s = s};
        c.inp = frand(conv_nin(s), 1); c.w = frand(conv_nw(s), 1); c.col = conv_scratch(s);
        c.out = fzeros(conv_nout(s)); c.dw = frand(conv_nout(s), 1);
        float *dinp = fzeros(conv_nin(s)), *dweight = fzeros(conv_nw(s));
        kern_conv2d_backward(dinp, dweight, c.col, c.dw, c.inp, c.w, s->N, s->C, s->H, s->W, s->OC,
                             s->K, s->stride, s->pad);
        check_fd("conv dinp", c.inp, dinp, conv_nin(s), conv_loss, &c);
        check_fd("conv dweight", c.w, dweight, conv_nw(s), conv_loss, &c);
        free(c.inp); free(c.w); free(c.col); free(c.out); free(c.dw); free(dinp); free(dweight);
    }
}

Test(kern_cnn, conv2d_backward_should_accumulate_and_skip_null_gradients)
{
    for (size_t k = 0; k < N_CONV_SHAPES; k++) {
        const ConvShape *s = &conv_shapes[k];
        size_t nin = conv_nin(s), nw = conv_nw(s);
        float *inp = frand(nin, 1), *w = frand(nw, 1), *dout = frand(conv_nout(s), 1), *col = conv_scratch(s);
        float *d1 = fzeros(nin), *dw1 = fzeros(nw), *d2 = fzeros(nin), *dw2 = fzeros(nw);
        float *d_only = fzeros(nin), *dw_only = fzeros(nw);
#define CONV_BWD(di, dw) kern_conv2d_backward(di, dw, col, dout, inp, w, s->N, s->C, s->H, s->W, s->OC, \
                                              s->K, s->stride, s->pad)
        CONV_BWD(d1, dw1);
        CONV_BWD(d2, dw2);
        CONV_BWD(d2, dw2);
        CONV_BWD(d_only, NULL);
        CONV_BWD(NULL, dw_only);
#undef CONV_BWD
        for (size_t i = 0; i < nin; i++) {
            cr_assert(fabs(d2[i] - 2 * d1[i]) <= 1e-6 * fmax(1.0, fabs(d1[i])), "shape %zu dinp[%zu]", k, i);
            cr_assert_eq(d_only[i], d1[i], "shape %zu: dinp alone must equal dinp with dweight", k);
        }
        for (size_t i = 0; i < nw; i++) {
            cr_assert(fabs(dw2[i] - 2 * dw1[i]) <= 1e-6 * fmax(1.0, fabs(dw1[i])), "shape %zu dweight[%zu]", k, i);
            cr_assert_eq(dw_only[i], dw1[i], "shape %zu: dweight alone must equal dweight with dinp", k);
        }
        free(inp); free(w); free(dout); free(col); free(d1); free(dw1); free(d2); free(dw2);
        free(d_only); free(dw_only);
    }
}

Test(kern_cnn, conv2d_should_give_identical_bits_when_run_twice)
{
    ConvShape s = {4, 16, 14, 14, 32, 3, 1, 1};
    float *inp = frand(conv_nin(&s), 1), *w = frand(conv_nw(&s), 1), *col = conv_scratch(&s);
    float *o1 = fzeros(conv_nout(&s)), *o2 = fzeros(conv_nout(&s));
    kern_conv2d_forward(o1, inp, w, col, s.N, s.C, s.H, s.W, s.OC, s.K, s.stride, s.pad);
    kern_conv2d_forward(o2, inp, w, col, s.N, s.C, s.H, s.W, s.OC, s.K, s.stride, s.pad);
    cr_assert(memcmp(o1, o2, conv_nout(&s) * sizeof(float)) == 0);
    free(inp); free(w); free(col); free(o1); free(o2);
}

/* ---- BatchNorm2d ---- */
/* Double-precision per-channel mean and biased variance of (N,C,H,W). */
static void channel_moments(double *mean, double *var, const float *x, int N, int C, int H, int W)
{
    size_t HW = (size_t)H * W;
    for (int c = 0; c < C; c++) {
        double s = 0.0, ss = 0.0;
        for (int n = 0; n < N; n++)
            for (size_t i = 0; i < HW; i++) s += x[((size_t)n * C + c) * HW + i];
        double m = s / ((double)N * HW);
        for (int n = 0; n < N; n++)
            for (size_t i = 0; i < HW; i++) {
                double d = x[((size_t)n * C + c) * HW + i] - m;
                ss += d * d;
            }
        mean[c] = m;
        var[c] = ss / ((double)N * HW);
    }
}

/* An input whose channels have distinct means and scales, and whose samples drift (sample n is
 * shifted by 0.4·n), so that parts of the batch have local statistics far from the global ones. */
static float *bn_input(int N, int C, int H, int W)
{
    size_t HW = (size_t)H * W;
    float *x = frand((size_t)N * C * HW, 1);
    for (int n = 0; n < N; n++)
        for (int c = 0; c < C; c++)
            for (size_t i = 0; i < HW; i++) {
                float *v = &x[((size_t)n * C + c) * HW + i];
                *v = *v * (float)(c + 1) + 3.0f * (float)c - 1.0f + 0.4f * (float)n;
            }
    return x;
}

Test(kern_cnn, bn_forward_should_give_channels_of_zero_mean_and_unit_variance_before_affine)
{
    int N = 4, C = 3, H = 5, W = 6;
    size_t n = (size_t)N * C * H * W;
    float *inp = bn_input(N, C, H, W), *out = frand(n, 100), *mean = fzeros(C), *invstd = fzeros(C);
    double m[3], v[3], xm[3], xv[3];
    kern_batchnorm_forward(out, mean, invstd, NULL, NULL, inp, NULL, NULL, N, C, H, W, KERN_BN_MOMENTUM);
    channel_moments(m, v, out, N, C, H, W);
    channel_moments(xm, xv, inp, N, C, H, W);
    for (int c = 0; c < C; c++) {
        cr_assert(fabs(m[c]) < 1e-5, "channel %d: mean %g", c, m[c]);
        /* var/(var + eps) with var >= 0.3: 1 within 4e-5 */
        cr_assert(fabs(v[c] - 1.0) < 1e-4, "channel %d: variance %g", c, v[c]);
        cr_assert(fabs(mean[c] - xm[c]) < 1e-6 * fmax(1.0, fabs(xm[c])), "saved mean %g, expected %g", mean[c], xm[c]);
        double ref_invstd = 1.0 / sqrt(xv[c] + 1e-5);
        cr_assert(fabs(invstd[c] - ref_invstd) < 1e-6 * ref_invstd, "saved invstd %g, expected %g",
                  invstd[c], ref_invstd);
    }
    /* with affine parameters: out = weight·x̂ + bias exactly as above, channel by channel */
    float *weight = frand(C, 2), *bias = frand(C, 2), *out2 = fzeros(n);
    kern_batchnorm_forward(out2, mean, invstd, NULL, NULL, inp, weight, bias, N, C, H, W, KERN_BN_MOMENTUM);
    for (size_t i = 0; i < n; i++) {
        int c = (int)(i / ((size_t)H * W) % C);
        double ref = (double)weight[c] * out[i] + bias[c];
        cr_assert(fabs(out2[i] - ref) < 1e-5 * fmax(1.0, fabs(ref)), "out[%zu] = %g, expected %g", i, out2[i], ref);
    }
    free(inp); free(out); free(mean); free(invstd); free(weight); free(bias); free(out2);
}

Test(kern_cnn, bn_stats_should_hold_mean_invstd_and_count)
{
    int N = 3, C = 4, H = 2, W = 5;
    float *inp = bn_input(N, C, H, W), *stats = frand(kern_bn_stats_len(C), 100);
    double m[4], v[4];
    cr_assert_eq(kern_bn_stats_len(C), (size_t)(2 * C + 1));
    kern_bn_stats(stats, inp, N, C, H, W);
    channel_moments(m, v, inp, N, C, H, W);
    for (int c = 0; c < C; c++) {
        cr_assert(fabs(stats[c] - m[c]) < 1e-6 * fmax(1.0, fabs(m[c])), "mean %g, expected %g", stats[c], m[c]);
        double ref = 1.0 / sqrt(v[c] + 1e-5);
        cr_assert(fabs(stats[C + c] - ref) < 1e-6 * ref, "invstd %g, expected %g", stats[C + c], ref);
    }
    cr_assert_eq(stats[2 * C], (float)(N * H * W));
    free(inp); free(stats);
}

Test(kern_cnn, bn_running_stats_should_move_by_momentum_toward_mean_and_unbiased_variance)
{
    int N = 2, C = 3, H = 3, W = 4;
    size_t n = (size_t)N * C * H * W;
    double cnt = (double)N * H * W;
    float *inp = bn_input(N, C, H, W), *out = fzeros(n), *mean = fzeros(C), *invstd = fzeros(C);
    float *rm = frand(C, 1), *rv = fzeros(C);
    for (int c = 0; c < C; c++) rv[c] = 0.5f + (float)c;
    double m[3], v[3], rm_ref[3], rv_ref[3];
    channel_moments(m, v, inp, N, C, H, W);
    for (int c = 0; c < C; c++) { rm_ref[c] = rm[c]; rv_ref[c] = rv[c]; }
    for (int step = 0; step < 3; step++) {   /* three steps on the same batch */
        kern_batchnorm_forward(out, mean, invstd, rm, rv, inp, NULL, NULL, N, C, H, W, KERN_BN_MOMENTUM);
        for (int c = 0; c < C; c++) {
            rm_ref[c] = 0.9 * rm_ref[c] + 0.1 * m[c];
            rv_ref[c] = 0.9 * rv_ref[c] + 0.1 * v[c] * cnt / (cnt - 1.0);   /* unbiased */
            cr_assert(fabs(rm[c] - rm_ref[c]) < 1e-6 * fmax(1.0, fabs(rm_ref[c])),
                      "step %d running_mean %g, expected %g", step, rm[c], rm_ref[c]);
            cr_assert(fabs(rv[c] - rv_ref[c]) < 1e-6 * fmax(1.0, rv_ref[c]), "step %d running_var %g, expected %g",
                      step, rv[c], rv_ref[c]);
        }
    }
    /* the split path with one rank: combine, then update */
    float *stats = fzeros(kern_bn_stats_len(C)), *gm = fzeros(C), *gi = fzeros(C), *vu = fzeros(C);
    float rm2[3] = {0, 0, 0}, rv2[3] = {1, 1, 1};
    kern_bn_stats(stats, inp, N, C, H, W);
    kern_bn_combine_stats(gm, gi, vu, stats, 1, C);
    kern_bn_update_running(rm2, rv2, gm, vu, C, KERN_BN_MOMENTUM);
    for (int c = 0; c < C; c++) {
        double vref = v[c] * cnt / (cnt - 1.0);
        cr_assert(fabs(vu[c] - vref) < 1e-6 * vref, "unbiased variance %g, expected %g", vu[c], vref);
        cr_assert(fabs(rm2[c] - 0.1 * m[c]) < 1e-6 * fmax(1.0, fabs(m[c])));
        cr_assert(fabs(rv2[c] - (0.9 + 0.1 * vref)) < 1e-6 * fmax(1.0, vref));
    }
    free(inp); free(out); free(mean); free(invstd); free(rm); free(rv); free(stats); free(gm); free(gi); free(vu);
}

/* Rank 0 is empty and carries garbage that must be ignored (first, where a naive merge would
 * divide 0 by 0), rank 1 holds {1, 2, 3} (mean 2, biased var 2/3), rank 2 {10} (var 0), rank 3
 * {4, 6} (mean 5, var 1); channel 1 holds the same values times -2. The reference treats the
 * union {1, 2, 3, 10, 4, 6} (mean 13/3) as one batch, in double. */
Test(kern_cnn, bn_combine_stats_should_merge_unequal_counts_like_pytorch_and_skip_empty_ranks)
{
    const int R = 4, C = 2;
    const double vals[4][3] = {{0, 0, 0}, {1, 2, 3}, {10, 0, 0}, {4, 6, 0}};
    const int counts[4] = {0, 3, 1, 2};
    const double scale[2] = {1.0, -2.0};
    size_t len = kern_bn_stats_len(C);
    float *all = fzeros(R * len);
    double ref_mean[2], ref_ss[2];
    for (int c = 0; c < C; c++) {
        double s = 0, n = 0;
        for (int r = 0; r < R; r++)
            for (int i = 0; i < counts[r]; i++) { s += vals[r][i] * scale[c]; n++; }
        ref_mean[c] = s / n;
        ref_ss[c] = 0;
        for (int r = 0; r < R; r++)
            for (int i = 0; i < counts[r]; i++) ref_ss[c] += pow(vals[r][i] * scale[c] - ref_mean[c], 2);
        for (int r = 0; r < R; r++) {
            float *row = all + r * len;
            double m = 0, v = 0;
            for (int i = 0; i < counts[r]; i++) m += vals[r][i] * scale[c];
            m = counts[r] ? m / counts[r] : 123.0;   /* garbage for the empty rank */
            for (int i = 0; i < counts[r]; i++) v += pow(vals[r][i] * scale[c] - m, 2);
            v = counts[r] ? v / counts[r] : 7.0;
            row[c] = (float)m;
            row[C + c] = (float)(1.0 / sqrt(v + 1e-5));
            row[2 * C] = (float)counts[r];
        }
    }
    float mean[2], invstd[2], vu[2];
    kern_bn_combine_stats(mean, invstd, vu, all, R, C);
    for (int c = 0; c < C; c++) {
        double n = 6.0, var = ref_ss[c] / n;
        cr_assert(fabs(mean[c] - ref_mean[c]) < 1e-6 * fabs(ref_mean[c]), "mean %g, expected %g", mean[c], ref_mean[c]);
        cr_assert(fabs(invstd[c] - 1.0 / sqrt(var + 1e-5)) < 1e-6 / sqrt(var), "invstd %g, var %g", invstd[c], var);
        double ref_vu = ref_ss[c] / (n - 1.0);
        cr_assert(fabs(vu[c] - ref_vu) < 1e-5 * ref_vu, "unbiased var %g, expected %g", vu[c], ref_vu);
    }
    cr_assert(fabs(mean[0] - 13.0 / 3.0) < 1e-6);
    free(all);
}

Test(kern_cnn, bn_combine_stats_should_never_divide_by_zero_for_tiny_totals)
{
    const int C = 1;
    float all[6] = {5.0f, 2.0f, 0.0f,                         /* empty rank */
                    3.0f, (float)(1.0 / sqrt(1e-5)), 1.0f};   /* one value: var 0 */
    float mean, invstd, vu;
    kern_bn_combine_stats(&mean, &invstd, &vu, all, 1, C);
    cr_assert(mean == 0.0f && invstd == 0.0f && vu == 0.0f, "n = 0: %g %g %g", mean, invstd, vu);
    kern_bn_combine_stats(&mean, &invstd, &vu, all, 2, C);
    cr_assert(mean == 3.0f && isfinite(invstd) && isfinite(vu) && fabsf(vu) < 1e-6f,
              "n = 1: %g %g %g", mean, invstd, vu);
}

Test(kern_cnn, bn_forward_eval_should_normalize_with_running_statistics)
{
    int N = 2, C = 3, H = 2, W = 3;
    size_t n = (size_t)N * C * H * W;
    float *inp = frand(n, 3), *out = frand(n, 100), *rm = frand(C, 1), *rv = frand(C, 1);
    float *weight = frand(C, 1), *bias = frand(C, 1);
    for (int c = 0; c < C; c++) rv[c] = fabsf(rv[c]) + 0.1f;
    kern_bn_forward_eval(out, inp, rm, rv, weight, bias, N, C, H, W);
    for (size_t i = 0; i < n; i++) {
        int c = (int)(i / ((size_t)H * W) % C);
        double ref = ((double)inp[i] - rm[c]) / sqrt((double)rv[c] + 1e-5) * weight[c] + bias[c];
        cr_assert(fabs(out[i] - ref) < 1e-5 * fmax(1.0, fabs(ref)), "out[%zu] = %g, expected %g", i, out[i], ref);
    }
    free(inp); free(out); free(rm); free(rv); free(weight); free(bias);
}

typedef struct { int N, C, H, W; float *inp, *weight, *bias, *out, *mean, *invstd, *dw; } BnCase;
static double bn_loss(void *p)
{
    BnCase *b = p;
    kern_batchnorm_forward(b->out, b->mean, b->invstd, NULL, NULL, b->inp, b->weight, b->bias,
                           b->N, b->C, b->H, b->W, KERN_BN_MOMENTUM);
    return dot(b->out, b->dw, (size_t)b->N * b->C * b->H * b->W);
}

Test(kern_cnn, batchnorm_backward_should_match_finite_differences)
{
    BnCase b = {.N = 3, .C = 2, .H = 3, .W = 2};
    size_t n = (size_t)b.N * b.C * b.H * b.W;
    b.inp = frand(n, 1); b.weight = frand(b.C, 1); b.bias = frand(b.C, 1);
    b.out = fzeros(n); b.mean = fzeros(b.C); b.invstd = fzeros(b.C); b.dw = frand(n, 1);
    bn_loss(&b);
    float *dinp = fzeros(n), *dweight = fzeros(b.C), *dbias = fzeros(b.C);
    kern_batchnorm_backward(dinp, dweight, dbias, b.dw, b.inp, b.mean, b.invstd, b.weight, b.N, b.C, b.H, b.W);
    check_fd("bn dinp", b.inp, dinp, n, bn_loss, &b);
    check_fd("bn dweight", b.weight, dweight, b.C, bn_loss, &b);
    check_fd("bn dbias", b.bias, dbias, b.C, bn_loss, &b);
    free(b.inp); free(b.weight); free(b.bias); free(b.out); free(b.mean); free(b.invstd); free(b.dw);
    free(dinp); free(dweight); free(dbias);
}

Test(kern_cnn, batchnorm_backward_should_accumulate_into_gradients)
{
    int N = 2, C = 3, H = 2, W = 2;
    size_t n = (size_t)N * C * H * W;
    float *inp = bn_input(N, C, H, W), *weight = frand(C, 1), *bias = frand(C, 1), *out = fzeros(n);
    float *mean = fzeros(C), *invstd = fzeros(C), *dout = frand(n, 1);
    float *d1 = fzeros(n), *dw1 = fzeros(C), *db1 = fzeros(C), *d2 = fzeros(n), *dw2 = fzeros(C), *db2 = fzeros(C);
    kern_batchnorm_forward(out, mean, invstd, NULL, NULL, inp, weight, bias, N, C, H, W, KERN_BN_MOMENTUM);
    kern_batchnorm_backward(d1, dw1, db1, dout, inp, mean, invstd, weight, N, C, H, W);
    kern_batchnorm_backward(d2, dw2, db2, dout, inp, mean, invstd, weight, N, C, H, W);
    kern_batchnorm_backward(d2, dw2, db2, dout, inp, mean, invstd, weight, N, C, H, W);
    for (size_t i = 0; i < n; i++) cr_assert(fabs(d2[i] - 2 * d1[i]) <= 1e-6 * fmax(1.0, fabs(d1[i])));
    for (int c = 0; c < C; c++) {
        cr_assert(fabs(dw2[c] - 2 * dw1[c]) <= 1e-6 * fmax(1.0, fabs(dw1[c])));
        cr_assert(fabs(db2[c] - 2 * db1[c]) <= 1e-6 * fmax(1.0, fabs(db1[c])));
    }
    free(inp); free(weight); free(bias); free(out); free(mean); free(invstd); free(dout);
    free(d1); free(dw1); free(db1); free(d2); free(dw2); free(db2);
}

/* The SyncBN identity. The batch (N,C,H,W) is split along N into parts (the ranks). Each part
 * writes its statistics row; the rows, concatenated, are what the all-gather delivers; every
 * part combines them and applies the global statistics to its own slice. Backward: each part
 * reduces locally, the sums are added over the parts (the all-reduce), dweight/dbias are added
 * over the parts (DDP's gradient all-reduce), and each part applies. The results must equal plain
 * BatchNorm on the whole batch. */
static void check_sync_identity(const int *parts, int R)
{
    int C = 3, H = 4, W = 5, N = 0;
    for (int r = 0; r < R; r++) N += parts[r];
    size_t HW = (size_t)H * W, n = (size_t)N * C * HW, len = kern_bn_stats_len(C);
    float *inp = bn_input(N, C, H, W), *weight = frand(C, 1), *bias = frand(C, 1), *dout = frand(n, 1);
    for (size_t i = 0; i < n; i++) dout[i] += 0.3f;   /* a non-zero mean gradient exercises mean_dy */

    /* plain BatchNorm on the whole batch */
    float *out = fzeros(n), *mean = fzeros(C), *invstd = fzeros(C), *rm = fzeros(C), *rv = fzeros(C);
    float *dinp = fzeros(n), *dweight = fzeros(C), *dbias = fzeros(C);
    for (int c = 0; c < C; c++) { rm[c] = 0.2f * c; rv[c] = 1.0f + c; }
    float *rm_s = fcopy(rm, C), *rv_s = fcopy(rv, C);
    kern_batchnorm_forward(out, mean, invstd, rm, rv, inp, weight, bias, N, C, H, W, KERN_BN_MOMENTUM);
    kern_batchnorm_backward(dinp, dweight, dbias, dout, inp, mean, invstd, weight, N, C, H, W);

    /* the same batch as R ranks of unequal size */
    float *all = fzeros(R * len), *out_s = frand(n, 100), *dinp_s = fzeros(n);
    float *gmean = fzeros(C), *ginvstd = fzeros(C), *vu = fzeros(C);
    float *sums = fzeros(2 * C), *sums_all = fzeros(2 * C), *dweight_s = fzeros(C), *dbias_s = fzeros(C);
    long long total = 0;
    size_t off = 0;
    for (int r = 0; r < R; r++) {
        kern_bn_stats(all + r * len, inp + off, parts[r], C, H, W);
        off += (size_t)parts[r] * C * HW;
    }
    for (int r = 0; r < R; r++) total += (long long)all[r * len + 2 * C];
    cr_assert_eq(total, (long long)N * H * W);
    kern_bn_combine_stats(gmean, ginvstd, vu, all, R, C);
    kern_bn_update_running(rm_s, rv_s, gmean, vu, C, KERN_BN_MOMENTUM);
    off = 0;
    for (int r = 0; r < R; r++) {
        kern_bn_forward_apply(out_s + off, inp + off, gmean, ginvstd, weight, bias, parts[r], C, H, W);
        float *dw_r = fzeros(C), *db_r = fzeros(C);   /* each rank's own gradient buffers */
        kern_bn_backward_reduce(sums, sums + C, dw_r, db_r, dout + off, inp + off, gmean, ginvstd,
                                parts[r], C, H, W);
        for (int i = 0; i < 2 * C; i++) sums_all[i] += sums[i];
        for (int c = 0; c < C; c++) { dweight_s[c] += dw_r[c]; dbias_s[c] += db_r[c]; }
        free(dw_r); free(db_r);
        off += (size_t)parts[r] * C * HW;
    }
    off = 0;
    for (int r = 0; r < R; r++) {
        kern_bn_backward_apply(dinp_s + off, dout + off, inp + off, gmean, ginvstd, weight, sums_all,
                               sums_all + C, total, parts[r], C, H, W);
        off += (size_t)parts[r] * C * HW;
    }

    struct { const char *what; const float *got, *want; size_t n; } cmp[] = {
        {"out", out_s, out, n},          {"mean", gmean, mean, C},      {"invstd", ginvstd, invstd, C},
        {"running_mean", rm_s, rm, C},   {"running_var", rv_s, rv, C},  {"dinp", dinp_s, dinp, n},
        {"dweight", dweight_s, dweight, C}, {"dbias", dbias_s, dbias, C},
    };
    for (size_t k = 0; k < sizeof cmp / sizeof cmp[0]; k++) {
        double d = rel_diff(cmp[k].got, cmp[k].want, cmp[k].n);
        cr_assert(d < SYNC_RTOL, "%d ranks: %s differs from plain BatchNorm by %.3g (relative)", R, cmp[k].what, d);
    }
    /* the parts really disagree locally: otherwise the identity would be trivial */
    cr_assert(fabs(all[0] - all[(R - 1) * len]) > 0.5, "local means %g and %g should differ",
              all[0], all[(R - 1) * len]);

    free(inp); free(weight); free(bias); free(dout); free(out); free(mean); free(invstd); free(rm); free(rv);
    free(dinp); free(dweight); free(dbias); free(rm_s); free(rv_s); free(all); free(out_s); free(dinp_s);
    free(gmean); free(ginvstd); free(vu); free(sums); free(sums_all); free(dweight_s); free(dbias_s);
}

Test(kern_cnn, syncbn_over_2_unequal_parts_should_equal_batchnorm_on_the_whole_batch)
{
    const int parts[] = {3, 7};
    check_sync_identity(parts, 2);
}

Test(kern_cnn, syncbn_over_4_unequal_parts_should_equal_batchnorm_on_the_whole_batch)
{
    const int parts[] = {1, 2, 3, 4};
    check_sync_identity(parts, 4);
}

Test(kern_cnn, bn_forward_apply_should_work_in_place)
{
    int N = 2, C = 2, H = 3, W = 3;
    size_t n = (size_t)N * C * H * W;
    float *inp = bn_input(N, C, H, W), *out = fzeros(n), *stats = fzeros(kern_bn_stats_len(C));
    float *mean = fzeros(C), *invstd = fzeros(C), *weight = frand(C, 1), *bias = frand(C, 1);
    kern_bn_stats(stats, inp, N, C, H, W);
    kern_bn_combine_stats(mean, invstd, NULL, stats, 1, C);
    kern_bn_forward_apply(out, inp, mean, invstd, weight, bias, N, C, H, W);
    kern_bn_forward_apply(inp, inp, mean, invstd, weight, bias, N, C, H, W);
    cr_assert(memcmp(out, inp, n * sizeof(float)) == 0);
    free(inp); free(out); free(stats); free(mean); free(invstd); free(weight); free(bias);
}

/* ---- ReLU and residual add ---- */
/* Inputs kept at least 0.05 away from the kink, so that x ± h never crosses it. */
static float *away_from_zero(size_t n)
{
    float *x = frand(n, 1);
    for (size_t i = 0; i < n; i++) x[i] = x[i] >= 0.0f ? x[i] + 0.05f : x[i] - 0.05f;
    return x;
}

typedef struct { size_t n; float *inp, *out, *dw; } ReluCase;
static double relu_loss(void *p)
{
    ReluCase *r = p;
    kern_relu_forward(r->out, r->inp, r->n);
    return dot(r->out, r->dw, r->n);
}

Test(kern_cnn, relu_forward_should_zero_negatives_and_work_in_place)
{
    size_t n = 50;
    float *inp = frand(n, 1), *out = frand(n, 100), *copy = fcopy(inp, n);
    kern_relu_forward(out, inp, n);
    for (size_t i = 0; i < n; i++) cr_assert_eq(out[i], inp[i] > 0.0f ? inp[i] : 0.0f);
    kern_relu_forward(copy, copy, n);
    cr_assert(memcmp(copy, out, n * sizeof(float)) == 0);
    free(inp); free(out); free(copy);
}

Test(kern_cnn, relu_backward_from_the_output_should_match_finite_differences)
{
    ReluCase r = {.n = 40};
    r.inp = away_from_zero(r.n); r.out = fzeros(r.n); r.dw = frand(r.n, 1);
    relu_loss(&r);
    float *dinp = frand(r.n, 1), *dinp0 = fcopy(dinp, r.n);
    kern_relu_backward(dinp, r.out, r.dw, r.n);
    for (size_t i = 0; i < r.n; i++) dinp[i] -= dinp0[i];   /* what was accumulated */
    check_fd("relu dinp", r.inp, dinp, r.n, relu_loss, &r);
    free(r.inp); free(r.out); free(r.dw); free(dinp); free(dinp0);
}

Test(kern_cnn, add_should_sum_forward_and_pass_gradients_to_both_inputs)
{
    size_t n = 12;
    float *a = frand(n, 1), *b = frand(n, 1), *out = fzeros(n), *dout = frand(n, 1);
    float *da = frand(n, 1), *db = fzeros(n), *da0 = fcopy(da, n), *a0 = fcopy(a, n);
    kern_add_forward(out, a, b, n);
    kern_add_backward(da, db, dout, n);
    for (size_t i = 0; i < n; i++) {
        cr_assert_eq(out[i], a[i] + b[i]);
        cr_assert_eq(da[i], da0[i] + dout[i]);   /* accumulated */
        cr_assert_eq(db[i], dout[i]);
    }
    kern_add_forward(a, a, b, n);   /* in place, as a ResNet block adds its shortcut */
    for (size_t i = 0; i < n; i++) cr_assert_eq(a[i], a0[i] + b[i]);
    free(a); free(b); free(out); free(dout); free(da); free(db); free(da0); free(a0);
}

/* ---- pooling ---- */
Test(kern_cnn, maxpool_forward_should_take_the_window_maximum_ignoring_padding)
{
    const int sides[][2] = {{7, 7}, {8, 6}, {112, 112}};
    for (size_t k = 0; k < 3; k++) {
        int N = 2, C = 2, H = sides[k][0], W = sides[k][1], K = 3, S = 2, P = 1;
        int OH = kern_conv2d_out_size(H, K, S, P), OW = kern_conv2d_out_size(W, K, S, P);
        size_t nout = (size_t)N * C * OH * OW;
        float *inp = frand((size_t)N * C * H * W, 1), *out = frand(nout, 100);
        int *arg = malloc(nout * sizeof(int));
        for (size_t i = 0; i < (size_t)N * C * H * W; i++) inp[i] -= 2.0f;   /* all negative: padding is not 0 */
        kern_maxpool2d_forward(out, arg, inp, N, C, H, W, K, S, P);
        for (int p = 0; p < N * C; p++)
            for (int y = 0; y < OH; y++)
                for (int x = 0; x < OW; x++) {
                    float best = -INFINITY;
                    for (int i = 0; i < K; i++)
                        for (int j = 0; j < K; j++) {
                            int h = y * S - P + i, w = x * S - P + j;
                            if (h >= 0 && h < H && w >= 0 && w < W && inp[((size_t)p * H + h) * W + w] > best)
                                best = inp[((size_t)p * H + h) * W + w];
                        }
                    size_t o = ((size_t)p * OH + y) * OW + x;
                    int a = arg[o], ah = a / W, aw = a % W;
                    cr_assert_eq(out[o], best, "plane %d (%d,%d): %g, expected %g", p, y, x, out[o], best);
                    cr_assert(ah >= y * S - P && ah < y * S - P + K && aw >= x * S - P && aw < x * S - P + K,
                              "argmax (%d,%d) outside window (%d,%d)", ah, aw, y, x);
                    cr_assert_eq(inp[(size_t)p * H * W + a], best);
                }
        free(inp); free(out); free(arg);
    }
}

Test(kern_cnn, maxpool_should_pick_the_first_maximum_on_ties_and_let_nan_win)
{
    int H = 4, W = 4, K = 3, S = 2, P = 1;   /* output 2×2 */
    float inp[16], out[4];
    int arg[4];
    for (int i = 0; i < 16; i++) inp[i] = 1.0f;
    kern_maxpool2d_forward(out, arg, inp, 1, 1, H, W, K, S, P);
    /* windows start at rows/cols -1 and 1: first in-bounds element of each */
    cr_assert(arg[0] == 0 && arg[1] == 1 && arg[2] == 4 && arg[3] == 5, "%d %d %d %d", arg[0], arg[1], arg[2], arg[3]);
    inp[5] = NAN;
    inp[6] = 9.0f;
    kern_maxpool2d_forward(out, arg, inp, 1, 1, H, W, K, S, P);
    cr_assert(isnan(out[0]) && arg[0] == 5);
    cr_assert(isnan(out[3]) && arg[3] == 5, "NaN at (1,1) lies in window (1,1) too");
}

typedef struct { int N, C, H, W; float *inp, *out, *dw; int *arg; } PoolCase;
static double maxpool_loss(void *p)
{
    PoolCase *c = p;
    kern_maxpool2d_forward(c->out, c->arg, c->inp, c->N, c->C, c->H, c->W, 3, 2, 1);
    size_t nout = (size_t)c->N * c->C * kern_conv2d_out_size(c->H, 3, 2, 1) * kern_conv2d_out_size(c->W, 3, 2, 1);
    return dot(c->out, c->dw, nout);
}

Test(kern_cnn, maxpool_backward_should_match_finite_differences)
{
    PoolCase c = {.N = 2, .C = 2, .H = 7, .W = 6};
    size_t nin = (size_t)c.N * c.C * c.H * c.W;
    size_t nout = (size_t)c.N * c.C * kern_conv2d_out_size(c.H, 3, 2, 1) * kern_conv2d_out_size(c.W, 3, 2, 1);
    /* distinct values 0.01 apart in shuffled order, so a step of h = 1e-3 never changes a maximum */
    c.inp = fzeros(nin);
    for (size_t i = 0; i < nin; i++) c.inp[i] = 0.01f * (float)i;
    for (size_t i = nin - 1; i > 0; i--) {
        size_t j = (size_t)((urand() * 0.5f + 0.5f) * (float)(i + 1)) % (i + 1);
        float t = c.inp[i]; c.inp[i] = c.inp[j]; c.inp[j] = t;
    }
    c.out = fzeros(nout); c.dw = frand(nout, 1); c.arg = malloc(nout * sizeof(int));
    maxpool_loss(&c);
    float *dinp = fzeros(nin);
    kern_maxpool2d_backward(dinp, c.dw, c.arg, c.N, c.C, c.H, c.W, 3, 2, 1);
    check_fd("maxpool dinp", c.inp, dinp, nin, maxpool_loss, &c);
    free(c.inp); free(c.out); free(c.dw); free(c.arg); free(dinp);
}

static double avgpool_loss(void *p)
{
    PoolCase *c = p;
    kern_avgpool_global_forward(c->out, c->inp, c->N, c->C, c->H, c->W);
    return dot(c->out, c->dw, (size_t)c->N * c->C);
}

Test(kern_cnn, global_avgpool_should_average_each_plane_and_spread_gradients_evenly)
{
    PoolCase c = {.N = 2, .C = 3, .H = 3, .W = 5};
    size_t nin = (size_t)c.N * c.C * c.H * c.W, nout = (size_t)c.N * c.C;
    c.inp = frand(nin, 1); c.out = frand(nout, 100); c.dw = frand(nout, 1);
    avgpool_loss(&c);
    for (size_t p = 0; p < nout; p++) {
        double s = 0;
        for (int i = 0; i < c.H * c.W; i++) s += c.inp[p * c.H * c.W + i];
        double ref = s / (c.H * c.W);
        cr_assert(fabs(c.out[p] - ref) < 1e-6, "plane %zu: %g, expected %g", p, c.out[p], ref);
    }
    float *dinp = fzeros(nin);
    kern_avgpool_global_backward(dinp, c.dw, c.N, c.C, c.H, c.W);
    check_fd("avgpool dinp", c.inp, dinp, nin, avgpool_loss, &c);
    free(c.inp); free(c.out); free(c.dw); free(dinp);
}

/* ---- the pieces composed: a tiny ResNet ----
 * stem conv 3×3 (3→4) → BN → ReLU → max pool 3/2/1 → [conv 1×1 (4→4) → BN → + shortcut] →
 * ReLU → global average pool → linear (kern_matmul, B = N, T = 1) → softmax cross-entropy (mean).
 * The analytic gradients of the first convolution's weights, both BN weights and the head must
 * match finite differences of the mean loss. */
typedef struct {
    int N, C0, H, W, C1, NCLS;
    int targets[3];
    float *x, *w1, *g1, *b1, *w2, *g2, *b2, *fw, *fb;                                   /* inputs, parameters */
    float *c1, *n1, *m1, *i1, *p1, *c2, *n2, *m2, *i2, *pool, *logits, *probs, *losses; /* activations */
    float *col1;
    int *arg;
} TinyNet;

static int tn_ph(const TinyNet *t) { return kern_conv2d_out_size(t->H, 3, 2, 1); }
static int tn_pw(const TinyNet *t) { return kern_conv2d_out_size(t->W, 3, 2, 1); }

static double tiny_forward(void *p)
{
    TinyNet *t = p;
    int N = t->N, H = t->H, W = t->W, PH = tn_ph(t), PW = tn_pw(t), C1 = t->C1;
    size_t n1 = (size_t)N * C1 * H * W, n2 = (size_t)N * C1 * PH * PW;
    kern_conv2d_forward(t->c1, t->x, t->w1, t->col1, N, t->C0, H, W, C1, 3, 1, 1);
    kern_batchnorm_forward(t->n1, t->m1, t->i1, NULL, NULL, t->c1, t->g1, t->b1, N, C1, H, W, KERN_BN_MOMENTUM);
    kern_relu_forward(t->n1, t->n1, n1);                               /* in place */
    kern_maxpool2d_forward(t->p1, t->arg, t->n1, N, C1, H, W, 3, 2, 1);
    kern_conv2d_forward(t->c2, t->p1, t->w2, NULL, N, C1, PH, PW, C1, 1, 1, 0);
    kern_batchnorm_forward(t->n2, t->m2, t->i2, NULL, NULL, t->c2, t->g2, t->b2, N, C1, PH, PW, KERN_BN_MOMENTUM);
    kern_add_forward(t->n2, t->n2, t->p1, n2);                         /* + identity shortcut */
    kern_relu_forward(t->n2, t->n2, n2);
    kern_avgpool_global_forward(t->pool, t->n2, N, C1, PH, PW);
    kern_matmul_forward(t->logits, t->pool, t->fw, t->fb, N, 1, C1, t->NCLS);
    kern_crossentropy_softmax_forward(t->probs, t->losses, t->logits, t->targets, N, 1, t->NCLS);
    double s = 0;
    for (int i = 0; i < N; i++) s += t->losses[i];
    return s / N;
}

Test(kern_cnn, a_tiny_resnet_built_from_these_kernels_should_have_correct_gradients)
{
    TinyNet t = {.N = 3, .C0 = 3, .H = 6, .W = 6, .C1 = 4, .NCLS = 5, .targets = {4, 0, 2}};
    int N = t.N, H = t.H, W = t.W, C1 = t.C1, PH = tn_ph(&t), PW = tn_pw(&t);
    size_t n1 = (size_t)N * C1 * H * W, n2 = (size_t)N * C1 * PH * PW;
    t.x = frand((size_t)N * t.C0 * H * W, 1); t.w1 = frand((size_t)C1 * t.C0 * 9, 0.5f);
    t.g1 = frand(C1, 1); t.b1 = frand(C1, 0.5f); t.w2 = frand((size_t)C1 * C1, 0.5f);
    t.g2 = frand(C1, 1); t.b2 = frand(C1, 0.5f); t.fw = frand((size_t)t.NCLS * C1, 1); t.fb = frand(t.NCLS, 1);
    t.c1 = fzeros(n1); t.n1 = fzeros(n1); t.m1 = fzeros(C1); t.i1 = fzeros(C1); t.p1 = fzeros(n2);
    t.c2 = fzeros(n2); t.n2 = fzeros(n2); t.m2 = fzeros(C1); t.i2 = fzeros(C1); t.pool = fzeros((size_t)N * C1);
    t.logits = fzeros((size_t)N * t.NCLS); t.probs = fzeros((size_t)N * t.NCLS); t.losses = fzeros(N);
    t.col1 = fzeros(kern_conv2d_col_size(t.C0, H, W, 3, 1, 1)); t.arg = malloc(n2 * sizeof(int));
    tiny_forward(&t);

    /* backward, in reverse order; every gradient buffer starts at zero (kernels accumulate) */
    float *dlogits = fzeros((size_t)N * t.NCLS), *dfw = fzeros((size_t)t.NCLS * C1), *dfb = fzeros(t.NCLS);
    float *dpool = fzeros((size_t)N * C1), *dn2 = fzeros(n2), *dc2 = fzeros(n2), *dw2 = fzeros((size_t)C1 * C1);
    float *dg2 = fzeros(C1), *db2 = fzeros(C1), *dp1 = fzeros(n2), *dn1 = fzeros(n1), *dc1 = fzeros(n1);
    float *dg1 = fzeros(C1), *db1 = fzeros(C1), *dw1 = fzeros((size_t)C1 * t.C0 * 9);
    kern_crossentropy_softmax_backward(dlogits, t.probs, t.targets, 1.0f / N, N, 1, t.NCLS);
    kern_matmul_backward(dpool, dfw, dfb, dlogits, t.pool, t.fw, N, 1, C1, t.NCLS);
    float *dsum = fzeros(n2);   /* gradient at the block output, before its ReLU */
    kern_avgpool_global_backward(dn2, dpool, N, C1, PH, PW);
    kern_relu_backward(dsum, t.n2, dn2, n2);
    float *dbn2 = fzeros(n2);
    kern_add_backward(dbn2, dp1, dsum, n2);                            /* to BN2 and the shortcut */
    kern_batchnorm_backward(dc2, dg2, db2, dbn2, t.c2, t.m2, t.i2, t.g2, N, C1, PH, PW);
    kern_conv2d_backward(dp1, dw2, NULL, dc2, t.p1, t.w2, N, C1, PH, PW, C1, 1, 1, 0);
    kern_maxpool2d_backward(dn1, dp1, t.arg, N, C1, H, W, 3, 2, 1);
    float *dbn1 = fzeros(n1);
    kern_relu_backward(dbn1, t.n1, dn1, n1);
    kern_batchnorm_backward(dc1, dg1, db1, dbn1, t.c1, t.m1, t.i1, t.g1, N, C1, H, W);
    kern_conv2d_backward(NULL, dw1, t.col1, dc1, t.x, t.w1, N, t.C0, H, W, C1, 3, 1, 1);

    check_fd("stem conv dweight", t.w1, dw1, (size_t)C1 * t.C0 * 9, tiny_forward, &t);
    check_fd("bn1 dweight", t.g1, dg1, C1, tiny_forward, &t);
    check_fd("bn1 dbias", t.b1, db1, C1, tiny_forward, &t);
    check_fd("block conv dweight", t.w2, dw2, (size_t)C1 * C1, tiny_forward, &t);
    check_fd("bn2 dweight", t.g2, dg2, C1, tiny_forward, &t);
    check_fd("head dweight", t.fw, dfw, (size_t)t.NCLS * C1, tiny_forward, &t);
    check_fd("head dbias", t.fb, dfb, t.NCLS, tiny_forward, &t);

    float *bufs[] = {t.x, t.w1, t.g1, t.b1, t.w2, t.g2, t.b2, t.fw, t.fb, t.c1, t.n1, t.m1, t.i1, t.p1, t.c2,
                     t.n2, t.m2, t.i2, t.pool, t.logits, t.probs, t.losses, t.col1, dlogits, dfw, dfb, dpool,
                     dn2, dc2, dw2, dg2, db2, dp1, dn1, dc1, dg1, db1, dw1, dsum, dbn2, dbn1};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) free(bufs[i]);
    free(t.arg);
}
