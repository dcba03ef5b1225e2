/* kern_ops.c — fp32 CPU reference kernels of the GPT-2 training step. Contracts (shapes, what is
 * written and what is accumulated) are in kern_ops.h. Loops are single-threaded and run in a
 * fixed order, so results are reproducible; matrix products go through cblas_sgemm. Index
 * arithmetic is done in size_t: B·T·V overflows int for real GPT-2 shapes. */
#include "kern_ops.h"

#include <cblas.h>
#include <math.h>
#include <string.h>

#define LN_EPS 1e-5f
#define GELU_SCALE 0.7978845608028654f   /* sqrt(2 / pi) */

void kern_encoder_forward(float *out, const int *inp, const float *wte, const float *wpe,
                          int B, int T, int C)
{
    for (int b = 0; b < B; b++) {
        for (int t = 0; t < T; t++) {
            size_t bt = (size_t)b * T + t;
            float *o = out + bt * C;
            const float *we = wte + (size_t)inp[bt] * C;
            const float *pe = wpe + (size_t)t * C;
            for (int c = 0; c < C; c++) o[c] = we[c] + pe[c];
        }
    }
}

void kern_encoder_backward(float *dwte, float *dwpe, const float *dout, const int *inp,
                           int B, int T, int C)
{
    for (int b = 0; b < B; b++) {
        for (int t = 0; t < T; t++) {
            size_t bt = (size_t)b * T + t;
            const float *d = dout + bt * C;
            float *dwe = dwte + (size_t)inp[bt] * C;
            float *dpe = dwpe + (size_t)t * C;
            for (int c = 0; c < C; c++) {
                dwe[c] += d[c];
                dpe[c] += d[c];
            }
        }
    }
}

void kern_layernorm_forward(float *out, float *mean, float *rstd, const float *inp,
                            const float *weight, const float *bias, int B, int T, int C)
{
    size_t rows = (size_t)B * T;
    for (size_t r = 0; r < rows; r++) {
        const float *x = inp + r * C;
        float *o = out + r * C;
        float m = 0.0f;
        for (int c = 0; c < C; c++) m += x[c];
        m /= (float)C;
        float var = 0.0f;
        for (int c = 0; c < C; c++) {
            float d = x[c] - m;
            var += d * d;
        }
        var /= (float)C;
        float s = 1.0f / sqrtf(var + LN_EPS);
        for (int c = 0; c < C; c++) o[c] = (x[c] - m) * s * weight[c] + bias[c];
        mean[r] = m;
        rstd[r] = s;
    }
}

void kern_layernorm_backward(float *dinp, float *dweight, float *dbias, const float *dout,
                             const float *inp, const float *weight, const float *mean,
                             const float *rstd, int B, int T, int C)
{
    size_t rows = (size_t)B * T;
    for (size_t r = 0; r < rows; r++) {
        const float *d = dout + r * C;
        const float *x = inp + r * C;
        float *dx = dinp + r * C;
        float m = mean[r], s = rstd[r];
        /* two reductions over the row: mean of dnorm and mean of dnorm·norm */
        float dnorm_mean = 0.0f, dnorm_norm_mean = 0.0f;
        for (int c = 0; c < C; c++) {
            float norm = (x[c] - m) * s;
            float dnorm = weight[c] * d[c];
            dnorm_mean += dnorm;
            dnorm_norm_mean += dnorm * norm;
        }
        dnorm_mean /= (float)C;
        dnorm_norm_mean /= (float)C;
        for (int c = 0; c < C; c++) {
            float norm = (x[c] - m) * s;
            float dnorm = weight[c] * d[c];
            dbias[c] += d[c];
            dweight[c] += norm * d[c];
            dx[c] += (dnorm - dnorm_mean - norm * dnorm_norm_mean) * s;
        }
    }
}

void kern_matmul_forward(float *out, const float *inp, const float *weight, const float *bias,
                         int B, int T, int C, int OC)
{
    int M = B * T;
    float beta = 0.0f;
    if (bias) {   /* out := bias in every row, then out += inp · weightᵀ */
        for (int r = 0; r < M; r++) memcpy(out + (size_t)r * OC, bias, (size_t)OC * sizeof(float));
        beta = 1.0f;
    }
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, M, OC, C,
                1.0f, inp, C, weight, C, beta, out, OC);
}

void kern_matmul_backward(float *dinp, float *dweight, float *dbias, const float *dout,
                          const float *inp, const float *weight, int B, int T, int C, int OC)
{
    int M = B * T;
    if (dinp)      /* (M,C) += (M,OC) · (OC,C) */
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, M, C, OC,
                    1.0f, dout, OC, weight, C, 1.0f, dinp, C);
    if (dweight)   /* (OC,C) += (M,OC)ᵀ · (M,C) */
        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, OC, C, M,
                    1.0f, dout, OC, inp, C, 1.0f, dweight, C);
    if (dbias) {
        for (int r = 0; r < M; r++) {
            const float *d = dout + (size_t)r * OC;
            for (int o = 0; o < OC; o++) dbias[o] += d[o];
        }
    }
}

void kern_attention_forward(float *out, float *preatt, float *att, const float *inp,
                            int B, int T, int C, int NH)
{
    int C3 = 3 * C, hs = C / NH;
    float scale = 1.0f / sqrtf((float)hs);
    for (int b = 0; b < B; b++) {
        for (int t = 0; t < T; t++) {
            for (int h = 0; h < NH; h++) {
                const float *q = inp + ((size_t)b * T + t) * C3 + h * hs;
                size_t row = (((size_t)b * NH + h) * T + t) * T;
                float *pre = preatt + row, *a = att + row;
                /* scores over the visible keys t2 <= t, and their maximum */
                float maxv = -INFINITY;
                for (int t2 = 0; t2 <= t; t2++) {
                    const float *k = inp + ((size_t)b * T + t2) * C3 + C + h * hs;
                    float dot = 0.0f;
                    for (int i = 0; i < hs; i++) dot += q[i] * k[i];
                    dot *= scale;
                    pre[t2] = dot;
                    if (dot > maxv) maxv = dot;
                }
                float sum = 0.0f;
                for (int t2 = 0; t2 <= t; t2++) {
                    float e = expf(pre[t2] - maxv);
                    a[t2] = e;
                    sum += e;
                }
                float inv = 1.0f / sum;
                for (int t2 = 0; t2 <= t; t2++) a[t2] *= inv;
                for (int t2 = t + 1; t2 < T; t2++) pre[t2] = a[t2] = 0.0f;
                /* out = Σ_t2 att · v */
                float *o = out + ((size_t)b * T + t) * C + h * hs;
                for (int i = 0; i < hs; i++) o[i] = 0.0f;
                for (int t2 = 0; t2 <= t; t2++) {
                    const float *v = inp + ((size_t)b * T + t2) * C3 + 2 * C + h * hs;
                    for (int i = 0; i < hs; i++) o[i] += a[t2] * v[i];
                }
            }
        }
    }
}

void kern_attention_backward(float *dinp, float *dpreatt, float *datt, const float *dout,
                             const float *inp, const float *att, int B, int T, int C, int NH)
{
    int C3 = 3 * C, hs = C / NH;
    float scale = 1.0f / sqrtf((float)hs);
    for (int b = 0; b < B; b++) {
        for (int t = 0; t < T; t++) {
            for (int h = 0; h < NH; h++) {
                size_t row = (((size_t)b * NH + h) * T + t) * T;
                const float *a = att + row;
                float *da = datt + row, *dpre = dpreatt + row;
                const float *d = dout + ((size_t)b * T + t) * C + h * hs;
                /* out = Σ att·v: datt[t2] = d·v[t2]; dv[t2] += att[t2]·d */
                for (int t2 = 0; t2 <= t; t2++) {
                    size_t kv = ((size_t)b * T + t2) * C3 + 2 * C + h * hs;
                    const float *v = inp + kv;
                    float *dv = dinp + kv;
                    float s = 0.0f;
                    for (int i = 0; i < hs; i++) {
                        s += v[i] * d[i];
                        dv[i] += a[t2] * d[i];
                    }
                    da[t2] = s;
                }
                /* softmax: dpre[t2] = att[t2]·(datt[t2] - Σ_t3 att[t3]·datt[t3]) */
                float dot = 0.0f;
                for (int t2 = 0; t2 <= t; t2++) dot += a[t2] * da[t2];
                for (int t2 = 0; t2 <= t; t2++) dpre[t2] = a[t2] * (da[t2] - dot);
                for (int t2 = t + 1; t2 < T; t2++) da[t2] = dpre[t2] = 0.0f;
                /* preatt = q·k·scale */
                size_t qo = ((size_t)b * T + t) * C3 + h * hs;
                const float *q = inp + qo;
                float *dq = dinp + qo;
                for (int t2 = 0; t2 <= t; t2++) {
                    size_t ko = ((size_t)b * T + t2) * C3 + C + h * hs;
                    const float *k = inp + ko;
                    float *dk = dinp + ko;
                    float g = dpre[t2] * scale;
                    for (int i = 0; i < hs; i++) {
                        dq[i] += k[i] * g;
                        dk[i] += q[i] * g;
                    }
                }
            }
        }
    }
}

void kern_gelu_forward(float *out, const float *inp, size_t N)
{
    for (size_t i = 0; i < N; i++) {
        float x = inp[i];
        float u = GELU_SCALE * (x + 0.044715f * x * x * x);
        out[i] = 0.5f * x * (1.0f + tanhf(u));
    }
}

void kern_gelu_backward(float *dinp, const float *inp, const float *dout, size_t N)
{
    for (size_t i = 0; i < N; i++) {
        float x = inp[i];
        float u = GELU_SCALE * (x + 0.044715f * x * x * x);
        float th = tanhf(u);
        float sech2 = 1.0f - th * th;
        float grad = 0.5f * (1.0f + th)
                   + 0.5f * x * sech2 * GELU_SCALE * (1.0f + 3.0f * 0.044715f * x * x);
        dinp[i] += grad * dout[i];
    }
}

void kern_residual_forward(float *out, const float *inp1, const float *inp2, size_t N)
{
    for (size_t i = 0; i < N; i++) out[i] = inp1[i] + inp2[i];
}

void kern_residual_backward(float *dinp1, float *dinp2, const float *dout, size_t N)
{
    for (size_t i = 0; i < N; i++) {
        dinp1[i] += dout[i];
        dinp2[i] += dout[i];
    }
}

void kern_crossentropy_softmax_forward(float *probs, float *losses, const float *logits,
                                       const int *targets, int B, int T, int V)
{
    size_t rows = (size_t)B * T;
    for (size_t r = 0; r < rows; r++) {
        const float *l = logits + r * V;
        float *p = probs + r * V;
        float maxv = -INFINITY;
        for (int i = 0; i < V; i++) if (l[i] > maxv) maxv = l[i];
        float sum = 0.0f;
        for (int i = 0; i < V; i++) {
            p[i] = expf(l[i] - maxv);
            sum += p[i];
        }
        float inv = 1.0f / sum;
        for (int i = 0; i < V; i++) p[i] *= inv;
        losses[r] = -logf(p[targets[r]]);
    }
}

void kern_crossentropy_softmax_backward(float *dlogits, const float *probs, const int *targets,
                                        float dloss, int B, int T, int V)
{
    size_t rows = (size_t)B * T;
    for (size_t r = 0; r < rows; r++) {
        float *dl = dlogits + r * V;
        const float *p = probs + r * V;
        for (int i = 0; i < V; i++) dl[i] += p[i] * dloss;
        dl[targets[r]] -= dloss;
    }
}

void kern_lmhead_ce_forward(float *logits, float *lse, float *losses, const float *inp,
                            const float *weight, const int *targets, int B, int T, int C, int V)
{
    kern_matmul_forward(logits, inp, weight, NULL, B, T, C, V);
    size_t rows = (size_t)B * T;
    for (size_t r = 0; r < rows; r++) {
        const float *l = logits + r * V;
        float maxv = -INFINITY;
        for (int i = 0; i < V; i++) if (l[i] > maxv) maxv = l[i];
        float sum = 0.0f;
        for (int i = 0; i < V; i++) sum += expf(l[i] - maxv);
        lse[r] = maxv + logf(sum);
        losses[r] = lse[r] - l[targets[r]];
    }
}

void kern_lmhead_ce_backward(float *dinp, float *dweight, float *logits, const float *lse,
                             const int *targets, const float *inp, const float *weight, float dloss,
                             int B, int T, int C, int V)
{
    size_t rows = (size_t)B * T;
    for (size_t r = 0; r < rows; r++) {
        float *l = logits + r * V;
        for (int i = 0; i < V; i++) l[i] = expf(l[i] - lse[r]) * dloss;   /* probability · dloss */
        l[targets[r]] -= dloss;
    }
    kern_matmul_backward(dinp, dweight, NULL, logits, inp, weight, B, T, C, V);
}

void kern_adamw_update(float *params, const float *grads, float *m, float *v, size_t offset,
                       size_t length, float lr, float beta1, float beta2, float eps,
                       float weight_decay, int t)
{
    float bc1 = 1.0f - powf(beta1, (float)t);
    float bc2 = 1.0f - powf(beta2, (float)t);
    float *p = params + offset;
    const float *g = grads + offset;
    for (size_t i = 0; i < length; i++) {
        p[i] -= lr * weight_decay * p[i];
        m[i] = beta1 * m[i] + (1.0f - beta1) * g[i];
        v[i] = beta2 * v[i] + (1.0f - beta2) * g[i] * g[i];
        float mhat = m[i] / bc1;
        float vhat = v[i] / bc2;
        p[i] -= lr * mhat / (sqrtf(vhat) + eps);
    }
}
