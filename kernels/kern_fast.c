/* kern_fast.c — fast CPU paths of the GPT-2 kernels (contracts: kern_ops.h; what differs and by
 * how much: kern_fast.h). The elementwise and row loops are written so that GCC vectorizes them
 * (no calls to libm inside, partial sums for reductions, no errno from sqrtf) and are cloned per
 * vector width (target_clones, chosen once at load time by the CPU's features). Matrix products,
 * the attention ones included, go through cblas_sgemm. */
#pragma GCC optimize("O3", "no-math-errno")
#include "kern_fast.h"
#include "kern_ops.h"

#include <cblas.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#define LN_EPS 1e-5f
#define GELU_SCALE 0.7978845608028654f   /* sqrt(2 / pi) */
#define GELU_CUBE 0.044715f

/* One clone per vector width, picked by the loader (ifunc) from the CPU's features. Sanitizer
 * builds keep one plain version (ASan and ifunc resolvers do not mix well). */
#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__) && !defined(__SANITIZE_ADDRESS__)
#define VECTORIZED __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define VECTORIZED
#endif

/* ---- exp: Cody-Waite range reduction x = n·ln2 + r, |r| <= ln2/2, then Cephes' degree-6
 * polynomial for e^r (relative error ~1e-7 on the interval), scaled by 2^n built in the exponent
 * bits. Round-to-nearest of x·log2(e) through the 1.5·2^23 trick, so there is no floorf call. ---- */
static inline float fexp(float x)
{
    x = x < -87.0f ? -87.0f : x;
    x = x > 88.0f ? 88.0f : x;
    float t = x * 1.44269504088896341f + 12582912.0f;
    float n = t - 12582912.0f;
    float r = x - n * 0.693359375f;
    r = r - n * -2.12194440e-4f;
    float p = 1.9875691500e-4f;
    p = p * r + 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    p = p * r * r + r + 1.0f;
    /* unsigned shift: a NaN input makes n garbage, which must not be undefined behaviour; p is
       NaN then, so the result stays NaN (the engine's non-finite-loss check relies on it) */
    union { uint32_t u; float f; } s;
    s.u = (uint32_t)((int32_t)n + 127) << 23;
    return p * s.f;
}

float kern_fast_expf(float x) { return fexp(x); }

/* tanh(u) = 1 - 2 / (e^{2u} + 1): saturates cleanly at both ends (e^{2u} clamped to finite) */
static inline float ftanh(float u) { return 1.0f - 2.0f / (fexp(2.0f * u) + 1.0f); }

/* Σ x[0..n) over KERN_FAST_LANES partial sums (vectorizable), then the lanes in order. */
static inline float sum_lanes(const float *x, int n)
{
    float acc[KERN_FAST_LANES] = {0};
    int i = 0;
    for (; i + KERN_FAST_LANES <= n; i += KERN_FAST_LANES)
        for (int l = 0; l < KERN_FAST_LANES; l++) acc[l] += x[i + l];
    for (; i < n; i++) acc[0] += x[i];
    float s = 0.0f;
    for (int l = 0; l < KERN_FAST_LANES; l++) s += acc[l];
    return s;
}

static inline float max_lanes(const float *x, int n)
{
    float acc[KERN_FAST_LANES];
    for (int l = 0; l < KERN_FAST_LANES; l++) acc[l] = -INFINITY;
    int i = 0;
    for (; i + KERN_FAST_LANES <= n; i += KERN_FAST_LANES)
        for (int l = 0; l < KERN_FAST_LANES; l++) acc[l] = x[i + l] > acc[l] ? x[i + l] : acc[l];
    for (; i < n; i++) acc[0] = x[i] > acc[0] ? x[i] : acc[0];
    float m = acc[0];
    for (int l = 1; l < KERN_FAST_LANES; l++) m = acc[l] > m ? acc[l] : m;
    return m;
}

/* ---- LayerNorm ---- */

VECTORIZED
void kern_layernorm_forward_fast(float *out, float *mean, float *rstd, const float *inp,
                                 const float *weight, const float *bias, int B, int T, int C)
{
    size_t rows = (size_t)B * T;
    for (size_t r = 0; r < rows; r++) {
        const float *x = inp + r * C;
        float *o = out + r * C;
        float m = sum_lanes(x, C) / (float)C;
        /* variance from the centred values, as the reference (no E[x²] - m² cancellation):
         * the centred row goes through o, which is overwritten below */
        for (int c = 0; c < C; c++) {
            float d = x[c] - m;
            o[c] = d * d;
        }
        float s = 1.0f / sqrtf(sum_lanes(o, C) / (float)C + LN_EPS);
        for (int c = 0; c < C; c++) o[c] = (x[c] - m) * s * weight[c] + bias[c];
        mean[r] = m;
        rstd[r] = s;
    }
}

VECTORIZED
void kern_layernorm_backward_fast(float *dinp, float *dweight, float *dbias, const float *dout,
                                  const float *inp, const float *weight, const float *mean,
                                  const float *rstd, int B, int T, int C)
{
    size_t rows = (size_t)B * T;
    for (size_t r = 0; r < rows; r++) {
        const float *d = dout + r * C;
        const float *x = inp + r * C;
        float *dx = dinp + r * C;
        float m = mean[r], s = rstd[r];
        float a1[KERN_FAST_LANES] = {0}, a2[KERN_FAST_LANES] = {0};
        int c = 0;
        for (; c + KERN_FAST_LANES <= C; c += KERN_FAST_LANES)
            for (int l = 0; l < KERN_FAST_LANES; l++) {
                float norm = (x[c + l] - m) * s, dnorm = weight[c + l] * d[c + l];
                a1[l] += dnorm;
                a2[l] += dnorm * norm;
            }
        for (; c < C; c++) {
            float norm = (x[c] - m) * s, dnorm = weight[c] * d[c];
            a1[0] += dnorm;
            a2[0] += dnorm * norm;
        }
        float dnorm_mean = 0.0f, dnorm_norm_mean = 0.0f;
        for (int l = 0; l < KERN_FAST_LANES; l++) {
            dnorm_mean += a1[l];
            dnorm_norm_mean += a2[l];
        }
        dnorm_mean /= (float)C;
        dnorm_norm_mean /= (float)C;
        for (c = 0; c < C; c++) {
            float norm = (x[c] - m) * s;
            float dnorm = weight[c] * d[c];
            dbias[c] += d[c];
            dweight[c] += norm * d[c];
            dx[c] += (dnorm - dnorm_mean - norm * dnorm_norm_mean) * s;
        }
    }
}

/* ---- attention through GEMMs ----
 * Per (b, h) the head's q, k, v are (T, hs) matrices with row stride 3C inside inp, its output a
 * (T, hs) matrix with row stride C inside out, and preatt/att/dpreatt/datt (T, T) matrices. Query
 * rows are taken in blocks [r0, r1): they see keys 0 .. r1-1 only, so each block's products stop
 * at column r1 and the strictly-upper triangle beyond the block is never computed. */

/* causal softmax of row t (entries 0..t of pre) into a, masked entries of both zeroed */
VECTORIZED
static void softmax_causal_rows(float *pre, float *att, int r0, int r1, int T)
{
    for (int t = r0; t < r1; t++) {
        float *p = pre + (size_t)t * T, *a = att + (size_t)t * T;
        int n = t + 1;
        float maxv = max_lanes(p, n);
        for (int i = 0; i < n; i++) a[i] = fexp(p[i] - maxv);
        float inv = 1.0f / sum_lanes(a, n);
        for (int i = 0; i < n; i++) a[i] *= inv;
        for (int i = n; i < T; i++) p[i] = a[i] = 0.0f;
    }
}

void kern_attention_forward_fast(float *out, float *preatt, float *att, const float *inp,
                                 int B, int T, int C, int NH)
{
    int C3 = 3 * C, hs = C / NH;
    float scale = 1.0f / sqrtf((float)hs);
    for (int b = 0; b < B; b++) {
        for (int h = 0; h < NH; h++) {
            const float *q = inp + (size_t)b * T * C3 + (size_t)h * hs;
            const float *k = q + C, *v = q + 2 * C;
            size_t bh = ((size_t)b * NH + h) * T * T;
            float *pre = preatt + bh, *a = att + bh;
            float *o = out + (size_t)b * T * C + (size_t)h * hs;
            for (int r0 = 0; r0 < T; r0 += KERN_FAST_ATT_BLOCK) {
                int r1 = r0 + KERN_FAST_ATT_BLOCK < T ? r0 + KERN_FAST_ATT_BLOCK : T, rows = r1 - r0;
                /* pre[r0:r1, 0:r1] = scale · q[r0:r1] · k[0:r1]ᵀ */
                cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, rows, r1, hs, scale,
                            q + (size_t)r0 * C3, C3, k, C3, 0.0f, pre + (size_t)r0 * T, T);
                softmax_causal_rows(pre, a, r0, r1, T);
                /* out[r0:r1] = att[r0:r1, 0:r1] · v[0:r1] */
                cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, rows, hs, r1, 1.0f,
                            a + (size_t)r0 * T, T, v, C3, 0.0f, o + (size_t)r0 * C, C);
            }
        }
    }
}

/* softmax backward of rows r0..r1-1: dpre = att·(datt - Σ att·datt); masked entries zeroed */
VECTORIZED
static void softmax_causal_backward_rows(float *dpre, float *datt, const float *att, int r0, int r1,
                                         int T)
{
    for (int t = r0; t < r1; t++) {
        const float *a = att + (size_t)t * T;
        float *da = datt + (size_t)t * T, *dp = dpre + (size_t)t * T;
        int n = t + 1;
        float acc[KERN_FAST_LANES] = {0};
        int i = 0;
        for (; i + KERN_FAST_LANES <= n; i += KERN_FAST_LANES)
            for (int l = 0; l < KERN_FAST_LANES; l++) acc[l] += a[i + l] * da[i + l];
        for (; i < n; i++) acc[0] += a[i] * da[i];
        float dot = 0.0f;
        for (int l = 0; l < KERN_FAST_LANES; l++) dot += acc[l];
        for (i = 0; i < n; i++) dp[i] = a[i] * (da[i] - dot);
        for (i = n; i < T; i++) da[i] = dp[i] = 0.0f;
    }
}

void kern_attention_backward_fast(float *dinp, float *dpreatt, float *datt, const float *dout,
                                  const float *inp, const float *att, int B, int T, int C, int NH)
{
    int C3 = 3 * C, hs = C / NH;
    float scale = 1.0f / sqrtf((float)hs);
    for (int b = 0; b < B; b++) {
        for (int h = 0; h < NH; h++) {
            size_t qo = (size_t)b * T * C3 + (size_t)h * hs;
            const float *q = inp + qo, *k = q + C, *v = q + 2 * C;
            float *dq = dinp + qo, *dk = dq + C, *dv = dq + 2 * C;
            const float *d = dout + (size_t)b * T * C + (size_t)h * hs;
            size_t bh = ((size_t)b * NH + h) * T * T;
            const float *a = att + bh;
            float *da = datt + bh, *dp = dpreatt + bh;
            for (int r0 = 0; r0 < T; r0 += KERN_FAST_ATT_BLOCK) {
                int r1 = r0 + KERN_FAST_ATT_BLOCK < T ? r0 + KERN_FAST_ATT_BLOCK : T, rows = r1 - r0;
                /* datt[r0:r1, 0:r1] = d[r0:r1] · v[0:r1]ᵀ */
                cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, rows, r1, hs, 1.0f,
                            d + (size_t)r0 * C, C, v, C3, 0.0f, da + (size_t)r0 * T, T);
                softmax_causal_backward_rows(dp, da, a, r0, r1, T);
                /* dq[r0:r1] += scale · dpre[r0:r1, 0:r1] · k[0:r1] */
                cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, rows, hs, r1, scale,
                            dp + (size_t)r0 * T, T, k, C3, 1.0f, dq + (size_t)r0 * C3, C3);
            }
            /* key/value rows [r0, r1) are seen by queries r0 .. T-1 (lower triangle) */
            for (int r0 = 0; r0 < T; r0 += KERN_FAST_ATT_BLOCK) {
                int r1 = r0 + KERN_FAST_ATT_BLOCK < T ? r0 + KERN_FAST_ATT_BLOCK : T, rows = r1 - r0;
                /* dv[r0:r1] += att[r0:T, r0:r1]ᵀ · d[r0:T] */
                cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, rows, hs, T - r0, 1.0f,
                            a + (size_t)r0 * T + r0, T, d + (size_t)r0 * C, C, 1.0f,
                            dv + (size_t)r0 * C3, C3);
                /* dk[r0:r1] += scale · dpre[r0:T, r0:r1]ᵀ · q[r0:T] */
                cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, rows, hs, T - r0, scale,
                            dp + (size_t)r0 * T + r0, T, q + (size_t)r0 * C3, C3, 1.0f,
                            dk + (size_t)r0 * C3, C3);
            }
        }
    }
}

/* ---- linear layer: the reference's GEMMs, the bias gradient vectorized across columns ---- */

VECTORIZED
static void column_sums(float *dbias, const float *dout, int M, int OC)
{
    for (int r = 0; r < M; r++) {
        const float *d = dout + (size_t)r * OC;
        for (int o = 0; o < OC; o++) dbias[o] += d[o];
    }
}

void kern_matmul_backward_fast(float *dinp, float *dweight, float *dbias, const float *dout,
                               const float *inp, const float *weight, int B, int T, int C, int OC)
{
    kern_matmul_backward(dinp, dweight, NULL, dout, inp, weight, B, T, C, OC);
    if (dbias) column_sums(dbias, dout, B * T, OC);
}

VECTORIZED
void kern_residual_forward_fast(float *out, const float *inp1, const float *inp2, size_t N)
{
    for (size_t i = 0; i < N; i++) out[i] = inp1[i] + inp2[i];
}

/* ---- GELU (tanh form) ---- */

VECTORIZED
void kern_gelu_forward_fast(float *out, const float *inp, size_t N)
{
    for (size_t i = 0; i < N; i++) {
        float x = inp[i];
        float u = GELU_SCALE * (x + GELU_CUBE * x * x * x);
        out[i] = 0.5f * x * (1.0f + ftanh(u));
    }
}

VECTORIZED
void kern_gelu_backward_fast(float *dinp, const float *inp, const float *dout, size_t N)
{
    for (size_t i = 0; i < N; i++) {
        float x = inp[i];
        float u = GELU_SCALE * (x + GELU_CUBE * x * x * x);
        float th = ftanh(u);
        float sech2 = 1.0f - th * th;
        float grad = 0.5f * (1.0f + th) + 0.5f * x * sech2 * GELU_SCALE * (1.0f + 3.0f * GELU_CUBE * x * x);
        dinp[i] += grad * dout[i];
    }
}

/* ---- softmax + cross-entropy over the vocabulary ---- */

VECTORIZED
void kern_crossentropy_softmax_forward_fast(float *probs, float *losses, const float *logits,
                                            const int *targets, int B, int T, int V)
{
    size_t rows = (size_t)B * T;
    for (size_t r = 0; r < rows; r++) {
        const float *l = logits + r * V;
        float *p = probs + r * V;
        float maxv = max_lanes(l, V);
        for (int i = 0; i < V; i++) p[i] = fexp(l[i] - maxv);
        float sum = sum_lanes(p, V);
        float inv = 1.0f / sum;
        for (int i = 0; i < V; i++) p[i] *= inv;
        /* the loss from the log-sum-exp, exact where the probability underflows */
        losses[r] = logf(sum) - (l[targets[r]] - maxv);
    }
}

/* ---- tied LM head + cross-entropy, vocabulary chunk by chunk ---- */

/* vocabulary columns per chunk: KERN_FAST_LMHEAD_CHUNK logits over `rows` rows, a multiple of
   the lanes, at least 64 columns (narrower GEMMs lose more to packing than cache saves) */
static int lmhead_chunk(size_t rows, int V)
{
    size_t vc = KERN_FAST_LMHEAD_CHUNK / (rows ? rows : 1);
    vc -= vc % KERN_FAST_LANES;
    if (vc < 64) vc = 64;
    return vc >= (size_t)V ? V : (int)vc;
}

/* Online log-sum-exp of columns [0, n) of `rows` rows of l (row stride ld): mx[r], sm[r] hold the
   running maximum and Σ exp(x - mx) of the columns before (first: none yet). */
VECTORIZED
static void lse_chunk_rows(const float *l, size_t ld, int n, size_t rows, float *mx, float *sm, int first)
{
    for (size_t r = 0; r < rows; r++) {
        const float *x = l + r * ld;
        float cm = max_lanes(x, n);
        float m = first || cm > mx[r] ? cm : mx[r];
        float acc[KERN_FAST_LANES] = {0};
        int i = 0;
        for (; i + KERN_FAST_LANES <= n; i += KERN_FAST_LANES)
            for (int k = 0; k < KERN_FAST_LANES; k++) acc[k] += fexp(x[i + k] - m);
        for (; i < n; i++) acc[0] += fexp(x[i] - m);
        float s = 0.0f;
        for (int k = 0; k < KERN_FAST_LANES; k++) s += acc[k];
        sm[r] = first ? s : sm[r] * fexp(mx[r] - m) + s;
        mx[r] = m;
    }
}

void kern_lmhead_ce_forward_fast(float *logits, float *lse, float *losses, const float *inp,
                                 const float *weight, const int *targets, int B, int T, int C, int V)
{
    size_t rows = (size_t)B * T;
    int vc = lmhead_chunk(rows, V);
    /* lse holds the running maximum and losses the running sum until the end */
    for (int v0 = 0; v0 < V; v0 += vc) {
        int n = V - v0 < vc ? V - v0 : vc;
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)rows, n, C, 1.0f, inp, C,
                    weight + (size_t)v0 * C, C, 0.0f, logits + v0, V);
        lse_chunk_rows(logits + v0, (size_t)V, n, rows, lse, losses, v0 == 0);
    }
    for (size_t r = 0; r < rows; r++) {
        lse[r] += logf(losses[r]);
        losses[r] = lse[r] - logits[r * V + targets[r]];
    }
}

/* columns [v0, v0+n) of the logits become their gradient: exp(l - lse)·dloss, minus dloss at the
   target */
VECTORIZED
static void dlogits_chunk_rows(float *l, size_t ld, int v0, int n, size_t rows, const float *lse,
                               const int *targets, float dloss)
{
    for (size_t r = 0; r < rows; r++) {
        float *x = l + r * ld + v0, s = lse[r];
        for (int i = 0; i < n; i++) x[i] = fexp(x[i] - s) * dloss;
        int t = targets[r] - v0;
        if (t >= 0 && t < n) x[t] -= dloss;
    }
}

void kern_lmhead_ce_backward_fast(float *dinp, float *dweight, float *logits, const float *lse,
                                  const int *targets, const float *inp, const float *weight,
                                  float dloss, int B, int T, int C, int V)
{
    size_t rows = (size_t)B * T;
    int vc = lmhead_chunk(rows, V);
    for (int v0 = 0; v0 < V; v0 += vc) {
        int n = V - v0 < vc ? V - v0 : vc;
        dlogits_chunk_rows(logits, (size_t)V, v0, n, rows, lse, targets, dloss);
        if (dinp)      /* (rows,C) += (rows,n) · (n,C) */
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)rows, C, n, 1.0f, logits + v0, V,
                        weight + (size_t)v0 * C, C, 1.0f, dinp, C);
        if (dweight)   /* (n,C) += (rows,n)ᵀ · (rows,C) */
            cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, n, C, (int)rows, 1.0f, logits + v0, V, inp, C,
                        1.0f, dweight + (size_t)v0 * C, C);
    }
}

/* ---- AdamW: the reference's arithmetic, element by element, vectorized ---- */

VECTORIZED
void kern_adamw_update_fast(float *params, const float *grads, float *m, float *v, size_t offset,
                            size_t length, float lr, float beta1, float beta2, float eps,
                            float weight_decay, int t)
{
    float bc1 = 1.0f - powf(beta1, (float)t);
    float bc2 = 1.0f - powf(beta2, (float)t);
    float *p = params + offset;
    const float *g = grads + offset;
    for (size_t i = 0; i < length; i++) {
        float pi = p[i] - lr * weight_decay * p[i];
        float mi = beta1 * m[i] + (1.0f - beta1) * g[i];
        float vi = beta2 * v[i] + (1.0f - beta2) * g[i] * g[i];
        m[i] = mi;
        v[i] = vi;
        p[i] = pi - lr * (mi / bc1) / (sqrtf(vi / bc2) + eps);
    }
}
