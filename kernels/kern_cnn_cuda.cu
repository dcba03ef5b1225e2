/* kern_cnn_cuda.cu — fp32 CUDA twins of the CPU kernels in kern_cnn.c. Contracts are in kern_cnn.h
 * and kern_cnn_cuda.h; tolerances against the CPU twin in docs/gpu-cnn-kernels.md.
 *
 * Correctness first, in kern_cuda.cu's manner: one thread per output element for elementwise work,
 * im2col and pooling; one block per channel for BatchNorm's per-channel sums, in double like the
 * CPU, each thread summing a fixed stride of the channel and the block adding the partials by a
 * fixed tree; no float atomics anywhere. Scatters that the CPU does serially (col2im, maxpool's
 * backward) are turned into gathers: one thread per input element adds its contributions in the
 * CPU's order. Elementwise BatchNorm arithmetic uses explicitly rounded intrinsics (__fmul_rn,
 * __fadd_rn, ...) so that nvcc does not fuse a*b+c where the CPU rounds twice. Index arithmetic
 * is in size_t. */
#include "kern_cuda_util.cuh"
#include "kern_cnn_cuda.h"
#include "kern_cuda.h"

extern "C" {
#include "kern_cnn.h"   /* KERN_BN_EPS and the host helper kern_conv2d_out_size */
}

#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#define THREADS 256             /* block size; a multiple of 32 (block_sum_double) */
#define MAX_GRID_Y 65535u

/* Per-plane kernels (BatchNorm's elementwise parts): blockIdx.x walks the N·C planes of HW
 * elements, blockIdx.y the chunks of one plane, so per-channel constants are computed once per
 * plane and thread, not once per element. */
static dim3 plane_grid(size_t planes, size_t HW)
{
    size_t gx = planes > MAX_BLOCKS ? MAX_BLOCKS : planes;
    size_t gy = (HW + THREADS - 1) / THREADS;
    if (gy > MAX_GRID_Y) gy = MAX_GRID_Y;
    return dim3((unsigned)gx, (unsigned)gy);
}
#define PLANE_STRIDE(p, planes) for (size_t p = blockIdx.x; p < (planes); p += gridDim.x)
#define CHUNK_STRIDE(i, HW) \
    for (size_t i = (size_t)blockIdx.y * blockDim.x + threadIdx.x; i < (HW); i += (size_t)gridDim.y * blockDim.x)

/* ---- fixed-order reductions and step-by-step rounding ---- */

/* Butterfly over the warp: every lane ends with the same value (both partners of an exchange add
 * the same two numbers, and fp addition is commutative). */
__device__ static double warp_sum_double(double v)
{
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

/* Block-wide sum in double; every thread gets the result. sh holds 32 doubles; the call starts
 * and ends with a barrier, so it can be reused back to back. blockDim.x must be a multiple of 32. */
__device__ static double block_sum_double(double v, double *sh)
{
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nwarps = blockDim.x >> 5;
    v = warp_sum_double(v);
    __syncthreads();
    if (lane == 0) sh[warp] = v;
    __syncthreads();
    if (warp == 0) {
        double w = lane < nwarps ? sh[lane] : 0.0;
        w = warp_sum_double(w);
        if (lane == 0) sh[0] = w;
    }
    __syncthreads();
    return sh[0];
}

/* Element j (0 <= j < N·HW) of channel c in (N,C,H,W): run n = j / HW at n·C·HW + c·HW. */
__device__ static size_t channel_index(size_t j, int C, size_t HW, int c)
{
    size_t n = j / HW;
    return (n * C + c) * HW + (j - n * HW);
}

/* Mean and biased variance of channel c, two passes in double as on the CPU. Block-wide. */
__device__ static void channel_moments(double *mean, double *var, const float *x, int N, int C,
                                       size_t HW, int c, double *sh)
{
    size_t count = (size_t)N * HW;
    double denom = (double)N * (double)HW;
    double s = 0.0;
    for (size_t j = threadIdx.x; j < count; j += blockDim.x) s += x[channel_index(j, C, HW, c)];
    double m = block_sum_double(s, sh) / denom;
    double v = 0.0;
    for (size_t j = threadIdx.x; j < count; j += blockDim.x) {
        double d = x[channel_index(j, C, HW, c)] - m;
        v += d * d;
    }
    *mean = m;
    *var = block_sum_double(v, sh) / denom;
}

/* Σ dout and Σ dout·(x - mean) over channel c, in double. Block-wide. */
__device__ static void channel_backward_sums(double *sum_dy, double *sum_dy_xmu, const float *dout,
                                             const float *x, int N, int C, size_t HW, int c,
                                             float mean, double *sh)
{
    size_t count = (size_t)N * HW;
    double sd = 0.0, sdx = 0.0;
    for (size_t j = threadIdx.x; j < count; j += blockDim.x) {
        size_t k = channel_index(j, C, HW, c);
        sd += dout[k];
        sdx += (double)dout[k] * ((double)x[k] - (double)mean);
    }
    *sum_dy = block_sum_double(sd, sh);
    *sum_dy_xmu = block_sum_double(sdx, sh);
}

/* (x - mean)·scale + shift with the CPU's three roundings. */
__device__ static float bn_affine(float x, float mean, float scale, float shift)
{
    return __fadd_rn(__fmul_rn(__fsub_rn(x, mean), scale), shift);
}

/* (1 - momentum)·old + momentum·x with the CPU's roundings. */
__device__ static float running_update(float old, float x, float momentum)
{
    return __fadd_rn(__fmul_rn(1.0f - momentum, old), __fmul_rn(momentum, x));
}

/* dinp += (dy - mdy - (x - mean)·k)·g, rounded as on the CPU. */
__device__ static float bn_backward_elem(float dx, float dy, float x, float mean, float mdy, float k, float g)
{
    float t = __fsub_rn(__fsub_rn(dy, mdy), __fmul_rn(__fsub_rn(x, mean), k));
    return __fadd_rn(dx, __fmul_rn(t, g));
}

/* ---- set-up ---- */

/* The one cuBLAS handle of kernels/, created by kern_cuda_init() (kern_cuda.h). */
static cublasHandle_t cublas(void) { return (cublasHandle_t)kern_cuda_cublas(); }

static int cublas_ready(const char *who)
{
    if (cublas()) return 0;
    fprintf(stderr, "rank %d: %s: kern_cuda_init() was not called (no cuBLAS handle)\n", kern_log_rank(), who);
    return -1;
}

/* ---- convolution: im2col + sgemm per image ----
 * cuBLAS is column-major: a row-major (R, K) array read column-major is its transpose (K, R) with
 * leading dimension K. Per image, with P = OH·OW, CKK = C·K·K, col (CKK, P), W (OC, CKK), dy (OC, P):
 *   out (OC,P)  = W · col      ->  outᵀ (P,OC) = colᵀ (P,CKK) · Wᵀ (CKK,OC):
 *        col stored as colᵀ ld P -> op N;  W stored as Wᵀ ld CKK -> op N;  ldc P
 *   dW (OC,CKK) += dy · colᵀ   ->  dWᵀ (CKK,OC) = col (CKK,P) · dyᵀ (P,OC):
 *        colᵀ ld P -> op T;  dy stored as dyᵀ ld P -> op N;  ldc CKK
 *   dcol (CKK,P) = Wᵀ · dy     ->  dcolᵀ (P,CKK) = dyᵀ (P,OC) · W (OC,CKK):
 *        dyᵀ ld P -> op N;  Wᵀ ld CKK -> op T;  ldc P
 * A 1×1, stride-1, unpadded convolution uses the image (C, H·W) as its col directly. */

static int conv_is_pointwise(int K, int stride, int pad)
{
    return K == 1 && stride == 1 && pad == 0;
}

/* col[(c,kh,kw), (oh,ow)] = img[c, oh·stride - pad + kh, ow·stride - pad + kw], 0 in the padding. */
static __global__ void im2col_kernel(float *col, const float *img, int C, int H, int W, int K, int stride,
                                     int pad, int OH, int OW)
{
    size_t n = (size_t)C * K * K * OH * OW;
    GRID_STRIDE(i, n) {
        int ow = (int)(i % OW);
        size_t t = i / OW;
        int oh = (int)(t % OH);
        t /= OH;
        int kw = (int)(t % K);
        t /= K;
        int kh = (int)(t % K);
        size_t c = t / K;
        int ih = oh * stride - pad + kh, iw = ow * stride - pad + kw;
        col[i] = (ih >= 0 && ih < H && iw >= 0 && iw < W) ? img[(c * H + ih) * W + iw] : 0.0f;
    }
}

/* img (C,H,W) += col2im(col): one thread per pixel gathers the col entries read from it, (kh, kw)
 * ascending, which is the order in which the CPU's scatter adds them. */
static __global__ void col2im_add_kernel(float *img, const float *col, int C, int H, int W, int K, int stride,
                                         int pad, int OH, int OW)
{
    size_t n = (size_t)C * H * W;
    GRID_STRIDE(i, n) {
        int w = (int)(i % W), h = (int)((i / W) % H);
        size_t c = i / ((size_t)H * W);
        float a = img[i];
        for (int kh = 0; kh < K; kh++) {
            int th = h + pad - kh;
            if (th < 0 || th % stride != 0 || th / stride >= OH) continue;
            int oh = th / stride;
            for (int kw = 0; kw < K; kw++) {
                int tw = w + pad - kw;
                if (tw < 0 || tw % stride != 0 || tw / stride >= OW) continue;
                a += col[(((c * K + kh) * K + kw) * OH + oh) * OW + tw / stride];
            }
        }
        img[i] = a;
    }
}

extern "C" int kern_conv2d_forward_cuda(float *out, const float *inp, const float *weight, float *col_scratch,
                                        int N, int C, int H, int W, int OC, int K, int stride, int pad,
                                        void *stream)
{
    if (cublas_ready("kern_conv2d_forward_cuda")) return -1;
    int OH = kern_conv2d_out_size(H, K, stride, pad), OW = kern_conv2d_out_size(W, K, stride, pad);
    if (N <= 0 || OC <= 0 || C <= 0 || OH <= 0 || OW <= 0) return 0;
    int P = OH * OW, CKK = C * K * K;
    int pointwise = conv_is_pointwise(K, stride, pad);
    cudaStream_t st = as_stream(stream);
    float one = 1.0f, zero = 0.0f;   /* beta 0: cuBLAS does not read out */
    if (CUBLAS_CHECK(cublasSetStream(cublas(), st))) return -1;
    for (int n = 0; n < N; n++) {
        const float *img = inp + (size_t)n * C * H * W;
        const float *col = img;
        if (!pointwise) {
            im2col_kernel<<<grid_for((size_t)CKK * P, THREADS), THREADS, 0, st>>>(col_scratch, img, C, H, W, K,
                                                                                 stride, pad, OH, OW);
            if (LAUNCH_CHECK(im2col_kernel)) return -1;
            col = col_scratch;
        }
        if (CUBLAS_CHECK(cublasSgemm(cublas(), CUBLAS_OP_N, CUBLAS_OP_N, P, OC, CKK, &one, col, P, weight, CKK,
                                     &zero, out + (size_t)n * OC * P, P)))
            return -1;
    }
    return 0;
}

extern "C" int kern_conv2d_backward_cuda(float *dinp, float *dweight, float *col_scratch, const float *dout,
                                         const float *inp, const float *weight, int N, int C, int H, int W,
                                         int OC, int K, int stride, int pad, void *stream)
{
    if (cublas_ready("kern_conv2d_backward_cuda")) return -1;
    int OH = kern_conv2d_out_size(H, K, stride, pad), OW = kern_conv2d_out_size(W, K, stride, pad);
    if (N <= 0 || OC <= 0 || C <= 0 || OH <= 0 || OW <= 0 || (!dinp && !dweight)) return 0;
    int P = OH * OW, CKK = C * K * K;
    int pointwise = conv_is_pointwise(K, stride, pad);
    size_t img_len = (size_t)C * H * W;
    cudaStream_t st = as_stream(stream);
    float one = 1.0f, zero = 0.0f;
    if (CUBLAS_CHECK(cublasSetStream(cublas(), st))) return -1;
    for (int n = 0; n < N; n++) {   /* images in order, as the CPU: dweight sums them in that order */
        const float *img = inp + (size_t)n * img_len;
        const float *dy = dout + (size_t)n * OC * P;
        if (dweight) {
            const float *col = img;
            if (!pointwise) {
                im2col_kernel<<<grid_for((size_t)CKK * P, THREADS), THREADS, 0, st>>>(col_scratch, img, C, H, W,
                                                                                     K, stride, pad, OH, OW);
                if (LAUNCH_CHECK(im2col_kernel)) return -1;
                col = col_scratch;
            }
            if (CUBLAS_CHECK(cublasSgemm(cublas(), CUBLAS_OP_T, CUBLAS_OP_N, CKK, OC, P, &one, col, P, dy, P,
                                         &one, dweight, CKK)))
                return -1;
        }
        if (!dinp) continue;
        float *dimg = dinp + (size_t)n * img_len;
        if (pointwise) {   /* dcol is dinp[n] itself: accumulate with beta 1 */
            if (CUBLAS_CHECK(cublasSgemm(cublas(), CUBLAS_OP_N, CUBLAS_OP_T, P, CKK, OC, &one, dy, P, weight, CKK,
                                         &one, dimg, P)))
                return -1;
            continue;
        }
        if (CUBLAS_CHECK(cublasSgemm(cublas(), CUBLAS_OP_N, CUBLAS_OP_T, P, CKK, OC, &one, dy, P, weight, CKK,
                                     &zero, col_scratch, P)))
            return -1;
        col2im_add_kernel<<<grid_for(img_len, THREADS), THREADS, 0, st>>>(dimg, col_scratch, C, H, W, K, stride,
                                                                         pad, OH, OW);
        if (LAUNCH_CHECK(col2im_add_kernel)) return -1;
    }
    return 0;
}

/* ---- BatchNorm2d ---- */

/* One block per channel: stats = [mean | invstd | count]. */
static __global__ void bn_stats_kernel(float *stats, const float *inp, int N, int C, size_t HW)
{
    __shared__ double sh[32];
    int c = blockIdx.x;
    double m, v;
    channel_moments(&m, &v, inp, N, C, HW, c, sh);
    if (threadIdx.x == 0) {
        stats[c] = (float)m;
        stats[C + c] = (float)(1.0 / sqrt(v + KERN_BN_EPS));
        if (c == 0) stats[2 * (size_t)C] = (float)((double)N * (double)HW);
    }
}

/* One thread per channel: the CPU's Chan combination over the ranks' rows, in rank order, in double. */
static __global__ void bn_combine_stats_kernel(float *mean, float *invstd, float *var_unbiased,
                                               const float *all_stats, int R, int C)
{
    size_t len = 2 * (size_t)C + 1;
    GRID_STRIDE(c, (size_t)C) {
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

static __global__ void bn_update_running_kernel(float *running_mean, float *running_var, const float *mean,
                                                const float *var_unbiased, int C, float momentum)
{
    GRID_STRIDE(c, (size_t)C) {
        running_mean[c] = running_update(running_mean[c], mean[c], momentum);
        running_var[c] = running_update(running_var[c], var_unbiased[c], momentum);
    }
}

static __global__ void bn_forward_apply_kernel(float *out, const float *inp, const float *mean, const float *invstd,
                                               const float *weight, const float *bias, int C, size_t planes,
                                               size_t HW)
{
    PLANE_STRIDE(p, planes) {
        int c = (int)(p % C);
        float scale = __fmul_rn(invstd[c], weight ? weight[c] : 1.0f);
        float shift = bias ? bias[c] : 0.0f, m = mean[c];
        CHUNK_STRIDE(i, HW) out[p * HW + i] = bn_affine(inp[p * HW + i], m, scale, shift);
    }
}

static __global__ void bn_forward_eval_kernel(float *out, const float *inp, const float *running_mean,
                                              const float *running_var, const float *weight, const float *bias,
                                              int C, size_t planes, size_t HW)
{
    PLANE_STRIDE(p, planes) {
        int c = (int)(p % C);
        float invstd = (float)(1.0 / sqrt((double)running_var[c] + KERN_BN_EPS));
        float scale = __fmul_rn(invstd, weight ? weight[c] : 1.0f);
        float shift = bias ? bias[c] : 0.0f, m = running_mean[c];
        CHUNK_STRIDE(i, HW) out[p * HW + i] = bn_affine(inp[p * HW + i], m, scale, shift);
    }
}

/* One block per channel: the local sums, written; dweight, dbias accumulated. */
static __global__ void bn_backward_reduce_kernel(float *sum_dy, float *sum_dy_xmu, float *dweight, float *dbias,
                                                 const float *dout, const float *inp, const float *mean,
                                                 const float *invstd, int N, int C, size_t HW)
{
    __shared__ double sh[32];
    int c = blockIdx.x;
    double sd, sdx;
    channel_backward_sums(&sd, &sdx, dout, inp, N, C, HW, c, mean[c], sh);
    if (threadIdx.x == 0) {
        sum_dy[c] = (float)sd;
        sum_dy_xmu[c] = (float)sdx;
        if (dweight) dweight[c] += (float)(sdx * invstd[c]);
        if (dbias) dbias[c] += (float)sd;
    }
}

static __global__ void bn_backward_apply_kernel(float *dinp, const float *dout, const float *inp, const float *mean,
                                                const float *invstd, const float *weight, const float *sum_dy,
                                                const float *sum_dy_xmu, double total, int C, size_t planes,
                                                size_t HW)
{
    PLANE_STRIDE(p, planes) {
        int c = (int)(p % C);
        float is = invstd[c], m = mean[c];
        float k = (float)((double)is * is * (sum_dy_xmu[c] / total));
        float g = __fmul_rn(weight ? weight[c] : 1.0f, is);
        float mdy = (float)(sum_dy[c] / total);
        CHUNK_STRIDE(i, HW) {
            size_t e = p * HW + i;
            dinp[e] = bn_backward_elem(dinp[e], dout[e], inp[e], m, mdy, k, g);
        }
    }
}

/* Plain training forward, one block per channel: moments, saved mean/invstd, running statistics
 * (unbiased variance), then the channel's outputs. The block reads the whole channel before any
 * thread writes it (block_sum_double ends with a barrier), so out may be inp. */
static __global__ void batchnorm_forward_kernel(float *out, float *mean, float *invstd, float *running_mean,
                                                float *running_var, const float *inp, const float *weight,
                                                const float *bias, int N, int C, size_t HW, float momentum)
{
    __shared__ double sh[32];
    int c = blockIdx.x;
    double m, v;
    channel_moments(&m, &v, inp, N, C, HW, c, sh);
    float mf = (float)m, is = (float)(1.0 / sqrt(v + KERN_BN_EPS));
    if (threadIdx.x == 0) {
        mean[c] = mf;
        invstd[c] = is;
        if (running_mean && running_var) {
            double count = (double)N * (double)HW;
            float vu = (float)(count > 1.0 ? v * count / (count - 1.0) : v);
            running_mean[c] = running_update(running_mean[c], mf, momentum);
            running_var[c] = running_update(running_var[c], vu, momentum);
        }
    }
    float scale = __fmul_rn(is, weight ? weight[c] : 1.0f), shift = bias ? bias[c] : 0.0f;
    size_t count = (size_t)N * HW;
    for (size_t j = threadIdx.x; j < count; j += blockDim.x) {
        size_t e = channel_index(j, C, HW, c);
        out[e] = bn_affine(inp[e], mf, scale, shift);
    }
}

/* Plain backward, one block per channel: the sums in double, dweight/dbias, then dinp from the
 * double sums divided by the count (the CPU does not round them to float first). */
static __global__ void batchnorm_backward_kernel(float *dinp, float *dweight, float *dbias, const float *dout,
                                                 const float *inp, const float *mean, const float *invstd,
                                                 const float *weight, int N, int C, size_t HW)
{
    __shared__ double sh[32];
    int c = blockIdx.x;
    float m = mean[c], is = invstd[c];
    double sd, sdx;
    channel_backward_sums(&sd, &sdx, dout, inp, N, C, HW, c, m, sh);
    if (threadIdx.x == 0) {
        if (dweight) dweight[c] += (float)(sdx * is);
        if (dbias) dbias[c] += (float)sd;
    }
    if (!dinp) return;
    double count = (double)N * (double)HW;
    float k = (float)((double)is * is * (sdx / count));
    float g = __fmul_rn(weight ? weight[c] : 1.0f, is);
    float mdy = (float)(sd / count);
    size_t total = (size_t)N * HW;
    for (size_t j = threadIdx.x; j < total; j += blockDim.x) {
        size_t e = channel_index(j, C, HW, c);
        dinp[e] = bn_backward_elem(dinp[e], dout[e], inp[e], m, mdy, k, g);
    }
}

extern "C" int kern_bn_stats_cuda(float *stats, const float *inp, int N, int C, int H, int W, void *stream)
{
    if (C <= 0) return 0;
    /* An empty batch (N·H·W = 0) still writes its row, as the CPU: count 0 and mean = invstd = NaN
     * (0/0), which kern_bn_combine_stats skips. */
    int n = N > 0 && H > 0 && W > 0 ? N : 0;
    bn_stats_kernel<<<C, THREADS, 0, as_stream(stream)>>>(stats, inp, n, C, n ? (size_t)H * W : 1);
    return LAUNCH_CHECK(bn_stats_kernel);
}

extern "C" int kern_bn_combine_stats_cuda(float *mean, float *invstd, float *var_unbiased,
                                          const float *all_stats, int R, int C, void *stream)
{
    if (C <= 0) return 0;
    bn_combine_stats_kernel<<<grid_for((size_t)C, THREADS), THREADS, 0, as_stream(stream)>>>(
        mean, invstd, var_unbiased, all_stats, R, C);
    return LAUNCH_CHECK(bn_combine_stats_kernel);
}

extern "C" int kern_bn_update_running_cuda(float *running_mean, float *running_var, const float *mean,
                                           const float *var_unbiased, int C, float momentum, void *stream)
{
    if (C <= 0) return 0;
    bn_update_running_kernel<<<grid_for((size_t)C, THREADS), THREADS, 0, as_stream(stream)>>>(
        running_mean, running_var, mean, var_unbiased, C, momentum);
    return LAUNCH_CHECK(bn_update_running_kernel);
}

extern "C" int kern_bn_forward_apply_cuda(float *out, const float *inp, const float *mean, const float *invstd,
                                          const float *weight, const float *bias, int N, int C, int H, int W,
                                          void *stream)
{
    size_t planes = (size_t)N * C, HW = (size_t)H * W;
    if (N <= 0 || C <= 0 || HW == 0) return 0;
    bn_forward_apply_kernel<<<plane_grid(planes, HW), THREADS, 0, as_stream(stream)>>>(out, inp, mean, invstd,
                                                                                       weight, bias, C, planes, HW);
    return LAUNCH_CHECK(bn_forward_apply_kernel);
}

extern "C" int kern_bn_forward_eval_cuda(float *out, const float *inp, const float *running_mean,
                                         const float *running_var, const float *weight, const float *bias,
                                         int N, int C, int H, int W, void *stream)
{
    size_t planes = (size_t)N * C, HW = (size_t)H * W;
    if (N <= 0 || C <= 0 || HW == 0) return 0;
    bn_forward_eval_kernel<<<plane_grid(planes, HW), THREADS, 0, as_stream(stream)>>>(
        out, inp, running_mean, running_var, weight, bias, C, planes, HW);
    return LAUNCH_CHECK(bn_forward_eval_kernel);
}

extern "C" int kern_bn_backward_reduce_cuda(float *sum_dy, float *sum_dy_xmu, float *dweight, float *dbias,
                                            const float *dout, const float *inp, const float *mean,
                                            const float *invstd, int N, int C, int H, int W, void *stream)
{
    if (C <= 0) return 0;
    int n = N > 0 && H > 0 && W > 0 ? N : 0;   /* an empty batch: sums of nothing are written as 0 */
    bn_backward_reduce_kernel<<<C, THREADS, 0, as_stream(stream)>>>(sum_dy, sum_dy_xmu, dweight, dbias, dout, inp,
                                                                    mean, invstd, n, C, n ? (size_t)H * W : 1);
    return LAUNCH_CHECK(bn_backward_reduce_kernel);
}

extern "C" int kern_bn_backward_apply_cuda(float *dinp, const float *dout, const float *inp, const float *mean,
                                           const float *invstd, const float *weight, const float *sum_dy,
                                           const float *sum_dy_xmu, long long total_count,
                                           int N, int C, int H, int W, void *stream)
{
    size_t planes = (size_t)N * C, HW = (size_t)H * W;
    if (N <= 0 || C <= 0 || HW == 0) return 0;
    bn_backward_apply_kernel<<<plane_grid(planes, HW), THREADS, 0, as_stream(stream)>>>(
        dinp, dout, inp, mean, invstd, weight, sum_dy, sum_dy_xmu, (double)total_count, C, planes, HW);
    return LAUNCH_CHECK(bn_backward_apply_kernel);
}

extern "C" int kern_batchnorm_forward_cuda(float *out, float *mean, float *invstd, float *running_mean,
                                           float *running_var, const float *inp, const float *weight,
                                           const float *bias, int N, int C, int H, int W, float momentum,
                                           void *stream)
{
    if (N <= 0 || C <= 0 || H <= 0 || W <= 0) return 0;
    batchnorm_forward_kernel<<<C, THREADS, 0, as_stream(stream)>>>(out, mean, invstd, running_mean, running_var,
                                                                   inp, weight, bias, N, C, (size_t)H * W,
                                                                   momentum);
    return LAUNCH_CHECK(batchnorm_forward_kernel);
}

extern "C" int kern_batchnorm_backward_cuda(float *dinp, float *dweight, float *dbias, const float *dout,
                                            const float *inp, const float *mean, const float *invstd,
                                            const float *weight, int N, int C, int H, int W, void *stream)
{
    if (N <= 0 || C <= 0 || H <= 0 || W <= 0) return 0;
    batchnorm_backward_kernel<<<C, THREADS, 0, as_stream(stream)>>>(dinp, dweight, dbias, dout, inp, mean, invstd,
                                                                    weight, N, C, (size_t)H * W);
    return LAUNCH_CHECK(batchnorm_backward_kernel);
}

/* ---- ReLU and residual add ---- */

static __global__ void relu_forward_kernel(float *out, const float *inp, size_t n)
{
    GRID_STRIDE(i, n) out[i] = inp[i] > 0.0f ? inp[i] : 0.0f;
}

static __global__ void relu_backward_kernel(float *dinp, const float *out, const float *dout, size_t n)
{
    GRID_STRIDE(i, n) if (out[i] > 0.0f) dinp[i] += dout[i];
}

static __global__ void add_forward_kernel(float *out, const float *a, const float *b, size_t n)
{
    GRID_STRIDE(i, n) out[i] = a[i] + b[i];
}

static __global__ void add_backward_kernel(float *da, float *db, const float *dout, size_t n)
{
    GRID_STRIDE(i, n) {
        da[i] += dout[i];
        db[i] += dout[i];
    }
}

extern "C" int kern_relu_forward_cuda(float *out, const float *inp, size_t n, void *stream)
{
    if (n == 0) return 0;
    relu_forward_kernel<<<grid_for(n, THREADS), THREADS, 0, as_stream(stream)>>>(out, inp, n);
    return LAUNCH_CHECK(relu_forward_kernel);
}

extern "C" int kern_relu_backward_cuda(float *dinp, const float *out, const float *dout, size_t n, void *stream)
{
    if (n == 0) return 0;
    relu_backward_kernel<<<grid_for(n, THREADS), THREADS, 0, as_stream(stream)>>>(dinp, out, dout, n);
    return LAUNCH_CHECK(relu_backward_kernel);
}

extern "C" int kern_add_forward_cuda(float *out, const float *a, const float *b, size_t n, void *stream)
{
    if (n == 0) return 0;
    add_forward_kernel<<<grid_for(n, THREADS), THREADS, 0, as_stream(stream)>>>(out, a, b, n);
    return LAUNCH_CHECK(add_forward_kernel);
}

extern "C" int kern_add_backward_cuda(float *da, float *db, const float *dout, size_t n, void *stream)
{
    if (n == 0) return 0;
    add_backward_kernel<<<grid_for(n, THREADS), THREADS, 0, as_stream(stream)>>>(da, db, dout, n);
    return LAUNCH_CHECK(add_backward_kernel);
}

/* ---- pooling ---- */

/* One thread per output element: the CPU's window scan, so the same maximum and argmax (first
 * maximum in row-major window order on ties; a NaN wins, the last one). */
static __global__ void maxpool2d_forward_kernel(float *out, int *argmax, const float *inp, int H, int W, int K,
                                                int stride, int pad, int OH, int OW, size_t n)
{
    GRID_STRIDE(i, n) {
        int ow = (int)(i % OW), oh = (int)((i / OW) % OH);
        size_t p = i / ((size_t)OH * OW);
        const float *x = inp + p * H * W;
        int h0 = oh * stride - pad, w0 = ow * stride - pad;
        float best = -INFINITY;
        int besti = -1;
        for (int h = h0 < 0 ? 0 : h0; h < h0 + K && h < H; h++) {
            for (int w = w0 < 0 ? 0 : w0; w < w0 + K && w < W; w++) {
                float v = x[h * W + w];
                if (besti < 0 || v > best || isnan(v)) {
                    best = v;
                    besti = h * W + w;
                }
            }
        }
        out[i] = best;
        argmax[i] = besti;
    }
}

/* One thread per input element: walks the windows that cover it in row-major output order (the
 * CPU's order) and adds dout where the window's argmax is this element. */
static __global__ void maxpool2d_backward_kernel(float *dinp, const float *dout, const int *argmax, int H, int W,
                                                 int K, int stride, int pad, int OH, int OW, size_t n)
{
    GRID_STRIDE(i, n) {
        int pix = (int)(i % ((size_t)H * W));
        size_t p = i / ((size_t)H * W);
        int h = pix / W, w = pix % W;
        /* window oh covers h when oh·stride - pad <= h <= oh·stride - pad + K - 1 */
        int lo_h = h + pad - K + 1, lo_w = w + pad - K + 1;
        int oh0 = lo_h <= 0 ? 0 : (lo_h + stride - 1) / stride, ow0 = lo_w <= 0 ? 0 : (lo_w + stride - 1) / stride;
        int oh1 = min((h + pad) / stride, OH - 1), ow1 = min((w + pad) / stride, OW - 1);
        const float *d = dout + p * OH * OW;
        const int *a = argmax + p * OH * OW;
        float acc = dinp[i];
        for (int oh = oh0; oh <= oh1; oh++)
            for (int ow = ow0; ow <= ow1; ow++)
                if (a[oh * OW + ow] == pix) acc += d[oh * OW + ow];
        dinp[i] = acc;
    }
}

/* One thread per (n, c) plane: the CPU's serial sum in double, so the same bits. */
static __global__ void avgpool_global_forward_kernel(float *out, const float *inp, size_t planes, size_t HW)
{
    GRID_STRIDE(p, planes) {
        const float *x = inp + p * HW;
        double s = 0.0;
        for (size_t i = 0; i < HW; i++) s += x[i];
        out[p] = (float)(s / (double)HW);
    }
}

static __global__ void avgpool_global_backward_kernel(float *dinp, const float *dout, size_t HW, size_t n)
{
    GRID_STRIDE(i, n) dinp[i] += (float)(dout[i / HW] / (double)HW);
}

extern "C" int kern_maxpool2d_forward_cuda(float *out, int *argmax, const float *inp, int N, int C, int H, int W,
                                           int K, int stride, int pad, void *stream)
{
    int OH = kern_conv2d_out_size(H, K, stride, pad), OW = kern_conv2d_out_size(W, K, stride, pad);
    if (N <= 0 || C <= 0 || OH <= 0 || OW <= 0) return 0;
    size_t n = (size_t)N * C * OH * OW;
    maxpool2d_forward_kernel<<<grid_for(n, THREADS), THREADS, 0, as_stream(stream)>>>(out, argmax, inp, H, W, K,
                                                                                      stride, pad, OH, OW, n);
    return LAUNCH_CHECK(maxpool2d_forward_kernel);
}

extern "C" int kern_maxpool2d_backward_cuda(float *dinp, const float *dout, const int *argmax, int N, int C,
                                            int H, int W, int K, int stride, int pad, void *stream)
{
    int OH = kern_conv2d_out_size(H, K, stride, pad), OW = kern_conv2d_out_size(W, K, stride, pad);
    if (N <= 0 || C <= 0 || H <= 0 || W <= 0 || OH <= 0 || OW <= 0) return 0;
    size_t n = (size_t)N * C * H * W;
    maxpool2d_backward_kernel<<<grid_for(n, THREADS), THREADS, 0, as_stream(stream)>>>(dinp, dout, argmax, H, W, K,
                                                                                       stride, pad, OH, OW, n);
    return LAUNCH_CHECK(maxpool2d_backward_kernel);
}

extern "C" int kern_avgpool_global_forward_cuda(float *out, const float *inp, int N, int C, int H, int W,
                                                void *stream)
{
    size_t planes = (size_t)N * C, HW = (size_t)H * W;
    if (N <= 0 || C <= 0 || HW == 0) return 0;
    avgpool_global_forward_kernel<<<grid_for(planes, THREADS), THREADS, 0, as_stream(stream)>>>(out, inp, planes, HW);
    return LAUNCH_CHECK(avgpool_global_forward_kernel);
}

extern "C" int kern_avgpool_global_backward_cuda(float *dinp, const float *dout, int N, int C, int H, int W,
                                                 void *stream)
{
    size_t HW = (size_t)H * W, n = (size_t)N * C * HW;
    if (N <= 0 || C <= 0 || HW == 0) return 0;
    avgpool_global_backward_kernel<<<grid_for(n, THREADS), THREADS, 0, as_stream(stream)>>>(dinp, dout, HW, n);
    return LAUNCH_CHECK(avgpool_global_backward_kernel);
}
