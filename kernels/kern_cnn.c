/* kern_cnn.c — fp32 CPU reference kernels of a ResNet-style CNN step. Contracts (shapes, what is
 * written and what is accumulated) are in kern_cnn.h. Loops are single-threaded in a fixed
 * order; per-channel reductions accumulate in double (a channel of a ResNet batch holds up to
 * N·112·112 values, too many for a float sum); matrix products go through cblas_sgemm. Index
 * arithmetic is in size_t. */
#include "kern_cnn.h"

#include <cblas.h>
#include <math.h>
#include <string.h>

/* ---- convolution ---- */

int kern_conv2d_out_size(int in, int K, int stride, int pad)
{
    return (in + 2 * pad - K) / stride + 1;
}

static int conv_is_pointwise(int K, int stride, int pad)
{
    return K == 1 && stride == 1 && pad == 0;
}

size_t kern_conv2d_col_size(int C, int H, int W, int K, int stride, int pad)
{
    if (conv_is_pointwise(K, stride, pad)) return 0;
    size_t OH = (size_t)kern_conv2d_out_size(H, K, stride, pad);
    size_t OW = (size_t)kern_conv2d_out_size(W, K, stride, pad);
    return (size_t)C * K * K * OH * OW;
}

/* col (C·K·K, OH·OW): row (c, kh, kw), column (oh, ow) holds img[c, oh·stride - pad + kh,
 * ow·stride - pad + kw], or 0 where that falls in the padding. img is one image (C,H,W). */
static void im2col(float *col, const float *img, int C, int H, int W, int K, int stride, int pad,
                   int OH, int OW)
{
    float *dst = col;
    for (int c = 0; c < C; c++) {
        const float *plane = img + (size_t)c * H * W;
        for (int kh = 0; kh < K; kh++) {
            for (int kw = 0; kw < K; kw++) {
                for (int oh = 0; oh < OH; oh++) {
                    int ih = oh * stride - pad + kh;
                    if (ih < 0 || ih >= H) {
                        memset(dst, 0, (size_t)OW * sizeof(float));
                        dst += OW;
                        continue;
                    }
                    const float *row = plane + (size_t)ih * W;
                    for (int ow = 0; ow < OW; ow++) {
                        int iw = ow * stride - pad + kw;
                        *dst++ = (iw >= 0 && iw < W) ? row[iw] : 0.0f;
                    }
                }
            }
        }
    }
}

/* The adjoint of im2col: img (C,H,W) += each col entry at the pixel it was read from; entries
 * that came from the padding are dropped. */
static void col2im_add(float *img, const float *col, int C, int H, int W, int K, int stride,
                       int pad, int OH, int OW)
{
    const float *src = col;
    for (int c = 0; c < C; c++) {
        float *plane = img + (size_t)c * H * W;
        for (int kh = 0; kh < K; kh++) {
            for (int kw = 0; kw < K; kw++) {
                for (int oh = 0; oh < OH; oh++) {
                    int ih = oh * stride - pad + kh;
                    if (ih < 0 || ih >= H) {
                        src += OW;
                        continue;
                    }
                    float *row = plane + (size_t)ih * W;
                    for (int ow = 0; ow < OW; ow++, src++) {
                        int iw = ow * stride - pad + kw;
                        if (iw >= 0 && iw < W) row[iw] += *src;
                    }
                }
            }
        }
    }
}

void kern_conv2d_forward(float *out, const float *inp, const float *weight, float *col_scratch,
                         int N, int C, int H, int W, int OC, int K, int stride, int pad)
{
    int OH = kern_conv2d_out_size(H, K, stride, pad), OW = kern_conv2d_out_size(W, K, stride, pad);
    int P = OH * OW, CKK = C * K * K;
    int pointwise = conv_is_pointwise(K, stride, pad);
    for (int n = 0; n < N; n++) {
        const float *img = inp + (size_t)n * C * H * W;
        const float *col = img;   /* a 1×1, stride-1, unpadded image already is its im2col */
        if (!pointwise) {
            im2col(col_scratch, img, C, H, W, K, stride, pad, OH, OW);
            col = col_scratch;
        }
        /* (OC, P) = (OC, CKK) · (CKK, P) */
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, OC, P, CKK,
                    1.0f, weight, CKK, col, P, 0.0f, out + (size_t)n * OC * P, P);
    }
}

void kern_conv2d_backward(float *dinp, float *dweight, float *col_scratch, const float *dout,
                          const float *inp, const float *weight, int N, int C, int H, int W,
                          int OC, int K, int stride, int pad)
{
    int OH = kern_conv2d_out_size(H, K, stride, pad), OW = kern_conv2d_out_size(W, K, stride, pad);
    int P = OH * OW, CKK = C * K * K;
    int pointwise = conv_is_pointwise(K, stride, pad);
    for (int n = 0; n < N; n++) {
        const float *img = inp + (size_t)n * C * H * W;
        const float *dy = dout + (size_t)n * OC * P;
        if (pointwise) {
            if (dweight)   /* (OC, C) += (OC, P) · (C, P)ᵀ */
                cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, OC, C, P,
                            1.0f, dy, P, img, P, 1.0f, dweight, C);
            if (dinp)      /* (C, P) += (OC, C)ᵀ · (OC, P) */
                cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, C, P, OC,
                            1.0f, weight, C, dy, P, 1.0f, dinp + (size_t)n * C * H * W, P);
            continue;
        }
        if (dweight) {     /* (OC, CKK) += (OC, P) · (CKK, P)ᵀ */
            im2col(col_scratch, img, C, H, W, K, stride, pad, OH, OW);
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, OC, CKK, P,
                        1.0f, dy, P, col_scratch, P, 1.0f, dweight, CKK);
        }
        if (dinp) {        /* dcol (CKK, P) = (OC, CKK)ᵀ · (OC, P), reusing the scratch */
            cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, CKK, P, OC,
                        1.0f, weight, CKK, dy, P, 0.0f, col_scratch, P);
            col2im_add(dinp + (size_t)n * C * H * W, col_scratch, C, H, W, K, stride, pad, OH, OW);
        }
    }
}

/* ---- BatchNorm2d ---- */

/* Channel c of (N,C,H,W) is N runs of HW contiguous values, run n starting at n·C·HW + c·HW. */
static double channel_mean(const float *x, int N, int C, size_t HW, int c)
{
    double s = 0.0;
    for (int n = 0; n < N; n++) {
        const float *p = x + ((size_t)n * C + c) * HW;
        for (size_t i = 0; i < HW; i++) s += p[i];
    }
    return s / ((double)N * (double)HW);
}

/* Biased variance around a known mean, two-pass (no cancellation). */
static double channel_var(const float *x, int N, int C, size_t HW, int c, double mean)
{
    double s = 0.0;
    for (int n = 0; n < N; n++) {
        const float *p = x + ((size_t)n * C + c) * HW;
        for (size_t i = 0; i < HW; i++) {
            double d = p[i] - mean;
            s += d * d;
        }
    }
    return s / ((double)N * (double)HW);
}

/* out = (x - mean)·scale + shift over channel c, scale = invstd·weight. */
static void channel_affine(float *out, const float *x, int N, int C, size_t HW, int c,
                           float mean, float scale, float shift)
{
    for (int n = 0; n < N; n++) {
        size_t off = ((size_t)n * C + c) * HW;
        const float *p = x + off;
        float *o = out + off;
        for (size_t i = 0; i < HW; i++) o[i] = (p[i] - mean) * scale + shift;
    }
}

/* sum_dy = Σ dy and sum_dy_xmu = Σ dy·(x - mean) over channel c. */
static void channel_backward_sums(double *sum_dy, double *sum_dy_xmu, const float *dout,
                                  const float *x, int N, int C, size_t HW, int c, float mean)
{
    double sd = 0.0, sdx = 0.0;
    for (int n = 0; n < N; n++) {
        size_t off = ((size_t)n * C + c) * HW;
        const float *d = dout + off, *p = x + off;
        for (size_t i = 0; i < HW; i++) {
            sd += d[i];
            sdx += (double)d[i] * ((double)p[i] - mean);
        }
    }
    *sum_dy = sd;
    *sum_dy_xmu = sdx;
}

/* dinp += (dy - mean_dy - (x - mean)·invstd²·mean_dy_xmu)·weight·invstd over channel c. */
static void channel_backward_apply(float *dinp, const float *dout, const float *x, int N, int C,
                                   size_t HW, int c, float mean, float invstd, float weight,
                                   double mean_dy, double mean_dy_xmu)
{
    float k = (float)((double)invstd * invstd * mean_dy_xmu);
    float g = weight * invstd;
    float mdy = (float)mean_dy;
    for (int n = 0; n < N; n++) {
        size_t off = ((size_t)n * C + c) * HW;
        const float *d = dout + off, *p = x + off;
        float *dx = dinp + off;
        for (size_t i = 0; i < HW; i++) dx[i] += (d[i] - mdy - (p[i] - mean) * k) * g;
    }
}

size_t kern_bn_stats_len(int C)
{
    return 2 * (size_t)C + 1;
}

void kern_bn_stats(float *stats, const float *inp, int N, int C, int H, int W)
{
    size_t HW = (size_t)H * W;
    for (int c = 0; c < C; c++) {
        double m = channel_mean(inp, N, C, HW, c);
        double v = channel_var(inp, N, C, HW, c, m);
        stats[c] = (float)m;
        stats[C + c] = (float)(1.0 / sqrt(v + KERN_BN_EPS));
    }
    stats[2 * (size_t)C] = (float)((double)N * (double)HW);
}

void kern_bn_combine_stats(float *mean, float *invstd, float *var_unbiased,
                           const float *all_stats, int R, int C)
{
    size_t len = kern_bn_stats_len(C);
    for (int c = 0; c < C; c++) {
        /* Chan et al.: merge (n, avg, var_n = Σ(x - avg)²) with each rank's (count, m, v·count) */
        double n = 0.0, avg = 0.0, var_n = 0.0;
        for (int r = 0; r < R; r++) {
            const float *row = all_stats + (size_t)r * len;
            double count = row[2 * (size_t)C];
            if (count < 1.0) continue;   /* an empty batch carries no statistics */
            double m = row[c];
            double s = 1.0 / row[C + c];
            double v = (s * s - KERN_BN_EPS) * count;
            double factor = 1.0 / (n + count);
            var_n += v + (avg - m) * (avg - m) * n * count * factor;
            avg = n * factor * avg + count * factor * m;
            n += count;
        }
        mean[c] = (float)avg;
        invstd[c] = n > 0.0 ? (float)(1.0 / sqrt(var_n / n + KERN_BN_EPS)) : 0.0f;
        if (var_unbiased) var_unbiased[c] = (float)(n > 1.0 ? var_n / (n - 1.0) : var_n);
    }
}

void kern_bn_update_running(float *running_mean, float *running_var, const float *mean,
                            const float *var_unbiased, int C, float momentum)
{
    for (int c = 0; c < C; c++) {
        running_mean[c] = (1.0f - momentum) * running_mean[c] + momentum * mean[c];
        running_var[c] = (1.0f - momentum) * running_var[c] + momentum * var_unbiased[c];
    }
}

void kern_bn_forward_apply(float *out, const float *inp, const float *mean, const float *invstd,
                           const float *weight, const float *bias, int N, int C, int H, int W)
{
    size_t HW = (size_t)H * W;
    for (int c = 0; c < C; c++) {
        float scale = invstd[c] * (weight ? weight[c] : 1.0f);
        channel_affine(out, inp, N, C, HW, c, mean[c], scale, bias ? bias[c] : 0.0f);
    }
}

void kern_bn_forward_eval(float *out, const float *inp, const float *running_mean,
                          const float *running_var, const float *weight, const float *bias,
                          int N, int C, int H, int W)
{
    size_t HW = (size_t)H * W;
    for (int c = 0; c < C; c++) {
        float invstd = (float)(1.0 / sqrt((double)running_var[c] + KERN_BN_EPS));
        float scale = invstd * (weight ? weight[c] : 1.0f);
        channel_affine(out, inp, N, C, HW, c, running_mean[c], scale, bias ? bias[c] : 0.0f);
    }
}

void kern_bn_backward_reduce(float *sum_dy, float *sum_dy_xmu, float *dweight, float *dbias,
                             const float *dout, const float *inp, const float *mean,
                             const float *invstd, int N, int C, int H, int W)
{
    size_t HW = (size_t)H * W;
    for (int c = 0; c < C; c++) {
        double sd, sdx;
        channel_backward_sums(&sd, &sdx, dout, inp, N, C, HW, c, mean[c]);
        sum_dy[c] = (float)sd;
        sum_dy_xmu[c] = (float)sdx;
        if (dweight) dweight[c] += (float)(sdx * invstd[c]);
        if (dbias) dbias[c] += (float)sd;
    }
}

void kern_bn_backward_apply(float *dinp, const float *dout, const float *inp, const float *mean,
                            const float *invstd, const float *weight, const float *sum_dy,
                            const float *sum_dy_xmu, long long total_count,
                            int N, int C, int H, int W)
{
    size_t HW = (size_t)H * W;
    double total = (double)total_count;
    for (int c = 0; c < C; c++)
        channel_backward_apply(dinp, dout, inp, N, C, HW, c, mean[c], invstd[c],
                               weight ? weight[c] : 1.0f, sum_dy[c] / total, sum_dy_xmu[c] / total);
}

void kern_batchnorm_forward(float *out, float *mean, float *invstd, float *running_mean,
                            float *running_var, const float *inp, const float *weight,
                            const float *bias, int N, int C, int H, int W, float momentum)
{
    size_t HW = (size_t)H * W;
    double count = (double)N * (double)HW;
    for (int c = 0; c < C; c++) {
        double m = channel_mean(inp, N, C, HW, c);
        double v = channel_var(inp, N, C, HW, c, m);
        mean[c] = (float)m;
        invstd[c] = (float)(1.0 / sqrt(v + KERN_BN_EPS));
        if (running_mean && running_var) {
            float vu = (float)(count > 1.0 ? v * count / (count - 1.0) : v);
            kern_bn_update_running(running_mean + c, running_var + c, mean + c, &vu, 1, momentum);
        }
        float scale = invstd[c] * (weight ? weight[c] : 1.0f);
        channel_affine(out, inp, N, C, HW, c, mean[c], scale, bias ? bias[c] : 0.0f);
    }
}

void kern_batchnorm_backward(float *dinp, float *dweight, float *dbias, const float *dout,
                             const float *inp, const float *mean, const float *invstd,
                             const float *weight, int N, int C, int H, int W)
{
    size_t HW = (size_t)H * W;
    double count = (double)N * (double)HW;
    for (int c = 0; c < C; c++) {
        double sd, sdx;
        channel_backward_sums(&sd, &sdx, dout, inp, N, C, HW, c, mean[c]);
        if (dweight) dweight[c] += (float)(sdx * invstd[c]);
        if (dbias) dbias[c] += (float)sd;
        if (dinp)
            channel_backward_apply(dinp, dout, inp, N, C, HW, c, mean[c], invstd[c],
                                   weight ? weight[c] : 1.0f, sd / count, sdx / count);
    }
}

/* ---- ReLU and residual add ---- */

void kern_relu_forward(float *out, const float *inp, size_t n)
{
    for (size_t i = 0; i < n; i++) out[i] = inp[i] > 0.0f ? inp[i] : 0.0f;
}

void kern_relu_backward(float *dinp, const float *out, const float *dout, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (out[i] > 0.0f) dinp[i] += dout[i];
}

void kern_add_forward(float *out, const float *a, const float *b, size_t n)
{
    for (size_t i = 0; i < n; i++) out[i] = a[i] + b[i];
}

void kern_add_backward(float *da, float *db, const float *dout, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        da[i] += dout[i];
        db[i] += dout[i];
    }
}

/* ---- pooling ---- */

void kern_maxpool2d_forward(float *out, int *argmax, const float *inp, int N, int C, int H, int W,
                            int K, int stride, int pad)
{
    int OH = kern_conv2d_out_size(H, K, stride, pad), OW = kern_conv2d_out_size(W, K, stride, pad);
    size_t planes = (size_t)N * C;
    for (size_t p = 0; p < planes; p++) {
        const float *x = inp + p * H * W;
        float *o = out + p * OH * OW;
        int *a = argmax + p * OH * OW;
        for (int oh = 0; oh < OH; oh++) {
            int h0 = oh * stride - pad;
            for (int ow = 0; ow < OW; ow++) {
                int w0 = ow * stride - pad;
                float best = -INFINITY;
                int besti = -1;
                for (int h = h0 < 0 ? 0 : h0; h < h0 + K && h < H; h++) {
                    for (int w = w0 < 0 ? 0 : w0; w < w0 + K && w < W; w++) {
                        float v = x[h * W + w];
                        if (besti < 0 || v > best || isnan(v)) {   /* as PyTorch */
                            best = v;
                            besti = h * W + w;
                        }
                    }
                }
                o[oh * OW + ow] = best;
                a[oh * OW + ow] = besti;
            }
        }
    }
}

void kern_maxpool2d_backward(float *dinp, const float *dout, const int *argmax, int N, int C,
                             int H, int W, int K, int stride, int pad)
{
    size_t P = (size_t)kern_conv2d_out_size(H, K, stride, pad) * kern_conv2d_out_size(W, K, stride, pad);
    size_t planes = (size_t)N * C;
    for (size_t p = 0; p < planes; p++) {
        float *dx = dinp + p * H * W;
        const float *d = dout + p * P;
        const int *a = argmax + p * P;
        for (size_t i = 0; i < P; i++) dx[a[i]] += d[i];
    }
}

void kern_avgpool_global_forward(float *out, const float *inp, int N, int C, int H, int W)
{
    size_t HW = (size_t)H * W, planes = (size_t)N * C;
    for (size_t p = 0; p < planes; p++) {
        const float *x = inp + p * HW;
        double s = 0.0;
        for (size_t i = 0; i < HW; i++) s += x[i];
        out[p] = (float)(s / (double)HW);
    }
}

void kern_avgpool_global_backward(float *dinp, const float *dout, int N, int C, int H, int W)
{
    size_t HW = (size_t)H * W, planes = (size_t)N * C;
    for (size_t p = 0; p < planes; p++) {
        float g = (float)(dout[p] / (double)HW);
        float *dx = dinp + p * HW;
        for (size_t i = 0; i < HW; i++) dx[i] += g;
    }
}
