/* kern_cuda.cu — fp32 CUDA twins of the CPU kernels in kern_ops.c. Contracts are in kern_ops.h
 * and kern_cuda.h; tolerances against the CPU twin in docs/gpu-kernels.md.
 *
 * Correctness first: one thread per output element for elementwise work and for the attention
 * scores, one warp per row for row reductions (LayerNorm, softmax), one block per row for the
 * long cross-entropy rows, and column sums done by a fixed tree per block. No float atomics: every
 * reduction has a fixed order, so results are reproducible run to run. Sums that the CPU does in
 * a fixed serial order over rows (encoder scatter, wpe rows, attention dinp) are done in that
 * same order here. Index arithmetic is in size_t (B·T·V overflows int). */
#include "kern_cuda_util.cuh"
#include "kern_cuda.h"

#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#define LN_EPS 1e-5f
#define GELU_SCALE 0.7978845608028654f   /* sqrt(2 / pi) */
#define THREADS 256                      /* block size of 1-D kernels; a multiple of 32 */

/* ---- reductions in a fixed order ---- */

/* Butterfly over the warp: every lane ends with the same value (fp add and max are commutative,
 * so both partners of each exchange compute the same result). */
__device__ static float warp_sum(float v)
{
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}
__device__ static float warp_max(float v)
{
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

/* Block-wide sum or max; every thread gets the result. sh holds 32 floats; the call starts and
 * ends with a barrier, so it can be reused back to back. blockDim.x must be a multiple of 32. */
__device__ static float block_reduce(float v, float *sh, bool is_max)
{
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nwarps = blockDim.x >> 5;
    v = is_max ? warp_max(v) : warp_sum(v);
    __syncthreads();
    if (lane == 0) sh[warp] = v;
    __syncthreads();
    if (warp == 0) {
        float w = lane < nwarps ? sh[lane] : (is_max ? -INFINITY : 0.0f);
        w = is_max ? warp_max(w) : warp_sum(w);
        if (lane == 0) sh[0] = w;
    }
    __syncthreads();
    return sh[0];
}

/* dst[c] += Σ_r src[r*cols + c] for c < cols: block (32, 32) per 32 columns; thread (x, y) sums
 * rows y, y+32, ... of column x in order, then thread y = 0 adds the 32 partials in order. */
#define COLS_TILE 32
static __global__ void column_sum_kernel(float *dst, const float *src, int rows, int cols)
{
    __shared__ float part[COLS_TILE][COLS_TILE + 1];
    int c = blockIdx.x * COLS_TILE + threadIdx.x;
    float s = 0.0f;
    if (c < cols)
        for (int r = threadIdx.y; r < rows; r += COLS_TILE) s += src[(size_t)r * cols + c];
    part[threadIdx.y][threadIdx.x] = s;
    __syncthreads();
    if (threadIdx.y == 0 && c < cols) {
        float total = 0.0f;
        for (int y = 0; y < COLS_TILE; y++) total += part[y][threadIdx.x];
        dst[c] += total;
    }
}

static int column_sum(float *dst, const float *src, int rows, int cols, cudaStream_t st)
{
    if (rows <= 0 || cols <= 0) return 0;
    column_sum_kernel<<<(cols + COLS_TILE - 1) / COLS_TILE, dim3(COLS_TILE, COLS_TILE), 0, st>>>(dst, src, rows, cols);
    return LAUNCH_CHECK(column_sum_kernel);
}

/* ---- set-up ---- */

static cublasHandle_t g_cublas = NULL;

extern "C" int kern_cuda_device_count(void)
{
    int n = 0;
    cudaError_t err = cudaGetDeviceCount(&n);
    if (err == cudaSuccess) return n;
    cudaGetLastError();
    /* No device, no driver or a driver older than the runtime is an answer, not an error. Say
     * anything else, so GPU tests that skip on a machine with a GPU leave a trace (an ASan
     * build, for one, makes CUDA fail to initialize unless ASAN_OPTIONS=protect_shadow_gap=0). */
    if (err != cudaErrorNoDevice && err != cudaErrorInsufficientDriver)
        fprintf(stderr, "rank %d: kern_cuda_device_count: CUDA is unusable, counting 0 devices: %s (%s)\n",
                kern_log_rank(), cudaGetErrorString(err), cudaGetErrorName(err));
    return 0;
}

extern "C" int kern_cuda_init(void)
{
    if (g_cublas) return 0;
    cublasHandle_t h = NULL;
    if (CUBLAS_CHECK(cublasCreate(&h))) return -1;
    /* CUBLAS_DEFAULT_MATH keeps at least fp32's mantissa: no TF32 in sgemm. Say so explicitly,
     * because the GPU tests hold matmul to 1e-4 against the CPU's sgemm. */
    if (CUBLAS_CHECK(cublasSetMathMode(h, CUBLAS_DEFAULT_MATH))) {
        cublasDestroy(h);
        return -1;
    }
    g_cublas = h;
    return 0;
}

extern "C" void *kern_cuda_cublas(void) { return (void *)g_cublas; }

extern "C" void kern_cuda_shutdown(void)
{
    if (!g_cublas) return;
    CUBLAS_CHECK(cublasDestroy(g_cublas));
    g_cublas = NULL;
}

/* ---- encoder ---- */

static __global__ void encoder_forward_kernel(float *out, const int *inp, const float *wte, const float *wpe,
                                       int T, int C, size_t n)
{
    GRID_STRIDE(i, n) {
        size_t bt = i / C;
        int c = (int)(i % C), t = (int)(bt % T);
        out[i] = wte[(size_t)inp[bt] * C + c] + wpe[(size_t)t * C + c];
    }
}

/* One block per position bt. Only the block of a token's FIRST occurrence does work: it walks the
 * later positions in order, collects the ones with the same token (ordered compaction through a
 * warp ballot), and adds their dout rows to the token's dwte row. That block is the row's only
 * writer, and the rows are added in (b,t) order, so the result is the CPU's, bit for bit. */
static __global__ void encoder_backward_wte_kernel(float *dwte, const float *dout, const int *inp, int BT, int C)
{
    __shared__ int list[THREADS];
    __shared__ int warp_base[THREADS / 32 + 1];
    int bt = blockIdx.x, v = inp[bt];
    int earlier = 0;
    for (int i = threadIdx.x; i < bt && !earlier; i += blockDim.x) earlier = inp[i] == v;
    if (__syncthreads_or(earlier)) return;   /* same answer in every thread: the block leaves */

    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nwarps = blockDim.x >> 5;
    float *row = dwte + (size_t)v * C;
    for (int s = bt; s < BT; s += blockDim.x) {
        int i = s + threadIdx.x;
        bool match = i < BT && inp[i] == v;
        unsigned ballot = __ballot_sync(0xffffffffu, match);
        if (lane == 0) warp_base[warp] = __popc(ballot);
        __syncthreads();
        if (threadIdx.x == 0) {   /* exclusive prefix over the warps; total at the end */
            int acc = 0;
            for (int w = 0; w < nwarps; w++) {
                int cnt = warp_base[w];
                warp_base[w] = acc;
                acc += cnt;
            }
            warp_base[nwarps] = acc;
        }
        __syncthreads();
        if (match) list[warp_base[warp] + __popc(ballot & ((1u << lane) - 1u))] = i;
        __syncthreads();
        int n = warp_base[nwarps];
        if (n > 0) {
            for (int c = threadIdx.x; c < C; c += blockDim.x) {
                float a = row[c];
                for (int j = 0; j < n; j++) a += dout[(size_t)list[j] * C + c];
                row[c] = a;
            }
        }
        __syncthreads();   /* list and warp_base are rewritten by the next chunk */
    }
}

/* dwpe[t, c] += Σ_b dout[b, t, c], b in order (the CPU's order). */
static __global__ void encoder_backward_wpe_kernel(float *dwpe, const float *dout, int B, int T, int C)
{
    size_t n = (size_t)T * C;
    GRID_STRIDE(i, n) {
        float a = dwpe[i];
        for (int b = 0; b < B; b++) a += dout[(size_t)b * n + i];
        dwpe[i] = a;
    }
}

extern "C" int kern_encoder_forward_cuda(float *out, const int *inp, const float *wte, const float *wpe,
                                         int B, int T, int C, void *stream)
{
    size_t n = (size_t)B * T * C;
    if (n == 0) return 0;
    encoder_forward_kernel<<<grid_for(n, THREADS), THREADS, 0, as_stream(stream)>>>(out, inp, wte, wpe, T, C, n);
    return LAUNCH_CHECK(encoder_forward_kernel);
}

extern "C" int kern_encoder_backward_cuda(float *dwte, float *dwpe, const float *dout, const int *inp,
                                          int B, int T, int C, void *stream)
{
    int BT = B * T;
    if (BT <= 0 || C <= 0) return 0;
    cudaStream_t st = as_stream(stream);
    encoder_backward_wte_kernel<<<BT, THREADS, 0, st>>>(dwte, dout, inp, BT, C);
    if (LAUNCH_CHECK(encoder_backward_wte_kernel)) return -1;
    encoder_backward_wpe_kernel<<<grid_for((size_t)T * C, THREADS), THREADS, 0, st>>>(dwpe, dout, B, T, C);
    return LAUNCH_CHECK(encoder_backward_wpe_kernel);
}

/* ---- LayerNorm: one warp per row ---- */

#define ROWS_PER_BLOCK (THREADS / 32)

static __global__ void layernorm_forward_kernel(float *out, float *mean, float *rstd, const float *inp,
                                         const float *weight, const float *bias, size_t rows, int C)
{
    size_t r = (size_t)blockIdx.x * ROWS_PER_BLOCK + (threadIdx.x >> 5);
    int lane = threadIdx.x & 31;
    if (r >= rows) return;
    const float *x = inp + r * C;
    float s = 0.0f;
    for (int c = lane; c < C; c += 32) s += x[c];
    float m = warp_sum(s) / (float)C;
    float var = 0.0f;
    for (int c = lane; c < C; c += 32) {
        float d = x[c] - m;
        var += d * d;
    }
    var = warp_sum(var) / (float)C;
    float rs = 1.0f / sqrtf(var + LN_EPS);
    float *o = out + r * C;
    for (int c = lane; c < C; c += 32) o[c] = (x[c] - m) * rs * weight[c] + bias[c];
    if (lane == 0) {
        mean[r] = m;
        rstd[r] = rs;
    }
}

/* dinp only; dweight and dbias are column sums (layernorm_backward_params_kernel). */
static __global__ void layernorm_backward_dinp_kernel(float *dinp, const float *dout, const float *inp,
                                               const float *weight, const float *mean, const float *rstd,
                                               size_t rows, int C)
{
    size_t r = (size_t)blockIdx.x * ROWS_PER_BLOCK + (threadIdx.x >> 5);
    int lane = threadIdx.x & 31;
    if (r >= rows) return;
    const float *d = dout + r * C, *x = inp + r * C;
    float *dx = dinp + r * C;
    float m = mean[r], s = rstd[r];
    float dnorm_mean = 0.0f, dnorm_norm_mean = 0.0f;
    for (int c = lane; c < C; c += 32) {
        float norm = (x[c] - m) * s;
        float dnorm = weight[c] * d[c];
        dnorm_mean += dnorm;
        dnorm_norm_mean += dnorm * norm;
    }
    dnorm_mean = warp_sum(dnorm_mean) / (float)C;
    dnorm_norm_mean = warp_sum(dnorm_norm_mean) / (float)C;
    for (int c = lane; c < C; c += 32) {
        float norm = (x[c] - m) * s;
        float dnorm = weight[c] * d[c];
        dx[c] += (dnorm - dnorm_mean - norm * dnorm_norm_mean) * s;
    }
}

/* dweight[c] += Σ_r norm[r,c]·dout[r,c], dbias[c] += Σ_r dout[r,c]; same tiling as column_sum_kernel. */
static __global__ void layernorm_backward_params_kernel(float *dweight, float *dbias, const float *dout,
                                                 const float *inp, const float *mean, const float *rstd,
                                                 int rows, int C)
{
    __shared__ float pw[COLS_TILE][COLS_TILE + 1], pb[COLS_TILE][COLS_TILE + 1];
    int c = blockIdx.x * COLS_TILE + threadIdx.x;
    float sw = 0.0f, sb = 0.0f;
    if (c < C) {
        for (int r = threadIdx.y; r < rows; r += COLS_TILE) {
            size_t i = (size_t)r * C + c;
            float norm = (inp[i] - mean[r]) * rstd[r];
            sw += norm * dout[i];
            sb += dout[i];
        }
    }
    pw[threadIdx.y][threadIdx.x] = sw;
    pb[threadIdx.y][threadIdx.x] = sb;
    __syncthreads();
    if (threadIdx.y == 0 && c < C) {
        float tw = 0.0f, tb = 0.0f;
        for (int y = 0; y < COLS_TILE; y++) {
            tw += pw[y][threadIdx.x];
            tb += pb[y][threadIdx.x];
        }
        dweight[c] += tw;
        dbias[c] += tb;
    }
}

extern "C" int kern_layernorm_forward_cuda(float *out, float *mean, float *rstd, const float *inp,
                                           const float *weight, const float *bias, int B, int T, int C,
                                           void *stream)
{
    size_t rows = (size_t)B * T;
    if (rows == 0 || C <= 0) return 0;
    unsigned grid = (unsigned)((rows + ROWS_PER_BLOCK - 1) / ROWS_PER_BLOCK);
    layernorm_forward_kernel<<<grid, THREADS, 0, as_stream(stream)>>>(out, mean, rstd, inp, weight, bias, rows, C);
    return LAUNCH_CHECK(layernorm_forward_kernel);
}

extern "C" int kern_layernorm_backward_cuda(float *dinp, float *dweight, float *dbias, const float *dout,
                                            const float *inp, const float *weight, const float *mean,
                                            const float *rstd, int B, int T, int C, void *stream)
{
    size_t rows = (size_t)B * T;
    if (rows == 0 || C <= 0) return 0;
    cudaStream_t st = as_stream(stream);
    unsigned grid = (unsigned)((rows + ROWS_PER_BLOCK - 1) / ROWS_PER_BLOCK);
    layernorm_backward_dinp_kernel<<<grid, THREADS, 0, st>>>(dinp, dout, inp, weight, mean, rstd, rows, C);
    if (LAUNCH_CHECK(layernorm_backward_dinp_kernel)) return -1;
    layernorm_backward_params_kernel<<<(C + COLS_TILE - 1) / COLS_TILE, dim3(COLS_TILE, COLS_TILE), 0, st>>>(
        dweight, dbias, dout, inp, mean, rstd, (int)rows, C);
    return LAUNCH_CHECK(layernorm_backward_params_kernel);
}

/* ---- matmul through cuBLAS ----
 * cuBLAS is column-major. A row-major (R, K) array read column-major is its transpose (K, R) with
 * leading dimension K, so each row-major product Y = A·B is computed as Yᵀ = Bᵀ·Aᵀ:
 *   out (M,OC) = inp (M,C) · Wᵀ      ->  outᵀ (OC,M) = W (OC,C) · inpᵀ (C,M):
 *        W stored as Wᵀ (C,OC) ld C -> op T;  inp stored as inpᵀ (C,M) ld C -> op N;  ldc OC
 *   dinp (M,C) += dout (M,OC) · W    ->  dinpᵀ (C,M) = Wᵀ (C,OC) · doutᵀ (OC,M): both op N
 *   dW (OC,C) += doutᵀ · inp (M,C)  ->  dWᵀ (C,OC) = inpᵀ (C,M) · dout (M,OC): op N, op T */

static __global__ void bias_fill_kernel(float *out, const float *bias, int OC, size_t n)
{
    GRID_STRIDE(i, n) out[i] = bias[i % OC];
}

static int cublas_ready(const char *who)
{
    if (g_cublas) return 0;
    fprintf(stderr, "rank %d: %s: kern_cuda_init() was not called (no cuBLAS handle)\n", kern_log_rank(), who);
    return -1;
}

extern "C" int kern_matmul_forward_cuda(float *out, const float *inp, const float *weight, const float *bias,
                                        int B, int T, int C, int OC, void *stream)
{
    if (cublas_ready("kern_matmul_forward_cuda")) return -1;
    int M = B * T;
    if (M <= 0 || OC <= 0) return 0;
    cudaStream_t st = as_stream(stream);
    float one = 1.0f, beta = 0.0f;   /* beta 0: cuBLAS does not read out */
    if (bias) {   /* out := bias in every row, then out += inp · Wᵀ (the CPU's order) */
        size_t n = (size_t)M * OC;
        bias_fill_kernel<<<grid_for(n, THREADS), THREADS, 0, st>>>(out, bias, OC, n);
        if (LAUNCH_CHECK(bias_fill_kernel)) return -1;
        beta = 1.0f;
    }
    if (CUBLAS_CHECK(cublasSetStream(g_cublas, st))) return -1;
    return CUBLAS_CHECK(cublasSgemm(g_cublas, CUBLAS_OP_T, CUBLAS_OP_N, OC, M, C,
                                    &one, weight, C, inp, C, &beta, out, OC));
}

extern "C" int kern_matmul_backward_cuda(float *dinp, float *dweight, float *dbias, const float *dout,
                                         const float *inp, const float *weight, int B, int T, int C, int OC,
                                         void *stream)
{
    if (cublas_ready("kern_matmul_backward_cuda")) return -1;
    int M = B * T;
    if (M <= 0 || OC <= 0 || C <= 0) return 0;
    cudaStream_t st = as_stream(stream);
    float one = 1.0f;
    if (CUBLAS_CHECK(cublasSetStream(g_cublas, st))) return -1;
    if (dinp && CUBLAS_CHECK(cublasSgemm(g_cublas, CUBLAS_OP_N, CUBLAS_OP_N, C, M, OC,
                                         &one, weight, C, dout, OC, &one, dinp, C)))
        return -1;
    if (dweight && CUBLAS_CHECK(cublasSgemm(g_cublas, CUBLAS_OP_N, CUBLAS_OP_T, C, OC, M,
                                            &one, inp, C, dout, OC, &one, dweight, C)))
        return -1;
    if (dbias) return column_sum(dbias, dout, M, OC, st);
    return 0;
}

/* ---- causal attention ----
 * Row (b,h,t) of preatt/att/dpreatt/datt starts at ((b*NH + h)*T + t)*T. q, k, v of token (b,t),
 * head h, lane i sit at inp[(b*T + t)*3C + {0, C, 2C} + h*hs + i]. */

/* preatt[b,h,t,t2] = q[t]·k[t2] / sqrt(hs) for t2 <= t, else 0. */
static __global__ void attention_preatt_kernel(float *preatt, const float *inp, int B, int T, int C, int NH, float scale)
{
    int hs = C / NH;
    size_t C3 = 3 * (size_t)C, n = (size_t)B * NH * T * T;
    GRID_STRIDE(i, n) {
        int t2 = (int)(i % T), t = (int)((i / T) % T), h = (int)((i / T / T) % NH);
        size_t b = i / ((size_t)T * T * NH);
        if (t2 > t) {
            preatt[i] = 0.0f;
            continue;
        }
        const float *q = inp + (b * T + t) * C3 + h * hs;
        const float *k = inp + (b * T + t2) * C3 + C + h * hs;
        float dot = 0.0f;
        for (int j = 0; j < hs; j++) dot += q[j] * k[j];
        preatt[i] = dot * scale;
    }
}

/* att row = softmax of preatt over t2 <= t (max-subtracted), 0 beyond; one warp per row. */
static __global__ void attention_softmax_kernel(float *att, const float *preatt, size_t rows, int T)
{
    size_t r = (size_t)blockIdx.x * ROWS_PER_BLOCK + (threadIdx.x >> 5);
    int lane = threadIdx.x & 31;
    if (r >= rows) return;
    int t = (int)(r % T);
    const float *pre = preatt + r * T;
    float *a = att + r * T;
    float maxv = -INFINITY;
    for (int t2 = lane; t2 <= t; t2 += 32) maxv = fmaxf(maxv, pre[t2]);
    maxv = warp_max(maxv);
    float sum = 0.0f;
    for (int t2 = lane; t2 <= t; t2 += 32) sum += expf(pre[t2] - maxv);
    float inv = 1.0f / warp_sum(sum);
    for (int t2 = lane; t2 < T; t2 += 32) a[t2] = t2 <= t ? expf(pre[t2] - maxv) * inv : 0.0f;
}

/* out[b,t,h*hs+j] = Σ_{t2<=t} att[b,h,t,t2]·v[t2][j], t2 in order. */
static __global__ void attention_out_kernel(float *out, const float *att, const float *inp, int B, int T, int C, int NH)
{
    int hs = C / NH;
    size_t C3 = 3 * (size_t)C, n = (size_t)B * T * C;
    GRID_STRIDE(i, n) {
        int c = (int)(i % C), h = c / hs;
        size_t bt = i / C, b = bt / T;
        int t = (int)(bt % T);
        const float *a = att + ((b * NH + h) * T + t) * T;
        const float *v = inp + b * T * C3 + 2 * (size_t)C + c;
        float o = 0.0f;
        for (int t2 = 0; t2 <= t; t2++) o += a[t2] * v[(size_t)t2 * C3];
        out[i] = o;
    }
}

/* datt[b,h,t,t2] = dout[b,t,h]·v[t2] for t2 <= t, else 0. */
static __global__ void attention_datt_kernel(float *datt, const float *dout, const float *inp, int B, int T, int C, int NH)
{
    int hs = C / NH;
    size_t C3 = 3 * (size_t)C, n = (size_t)B * NH * T * T;
    GRID_STRIDE(i, n) {
        int t2 = (int)(i % T), t = (int)((i / T) % T), h = (int)((i / T / T) % NH);
        size_t b = i / ((size_t)T * T * NH);
        if (t2 > t) {
            datt[i] = 0.0f;
            continue;
        }
        const float *d = dout + (b * T + t) * C + h * hs;
        const float *v = inp + (b * T + t2) * C3 + 2 * C + h * hs;
        float s = 0.0f;
        for (int j = 0; j < hs; j++) s += v[j] * d[j];
        datt[i] = s;
    }
}

/* dpreatt row = att·(datt - Σ att·datt) over t2 <= t, 0 beyond; one warp per row. */
static __global__ void attention_softmax_backward_kernel(float *dpreatt, const float *datt, const float *att,
                                                  size_t rows, int T)
{
    size_t r = (size_t)blockIdx.x * ROWS_PER_BLOCK + (threadIdx.x >> 5);
    int lane = threadIdx.x & 31;
    if (r >= rows) return;
    int t = (int)(r % T);
    const float *a = att + r * T, *da = datt + r * T;
    float *dp = dpreatt + r * T;
    float dot = 0.0f;
    for (int t2 = lane; t2 <= t; t2 += 32) dot += a[t2] * da[t2];
    dot = warp_sum(dot);
    for (int t2 = lane; t2 < T; t2 += 32) dp[t2] = t2 <= t ? a[t2] * (da[t2] - dot) : 0.0f;
}

/* One thread per element of dinp (B,T,3C), adding its terms in the CPU's order:
 *   dq[t]  += Σ_{t2<=t} (dpreatt[t,t2]·scale)·k[t2]
 *   dk[t2] += Σ_{t>=t2} (dpreatt[t,t2]·scale)·q[t]
 *   dv[t2] += Σ_{t>=t2} att[t,t2]·dout[t] */
static __global__ void attention_backward_dinp_kernel(float *dinp, const float *dpreatt, const float *att,
                                               const float *dout, const float *inp,
                                               int B, int T, int C, int NH, float scale)
{
    int hs = C / NH;
    size_t C3 = 3 * (size_t)C, n = (size_t)B * T * C3;
    GRID_STRIDE(i, n) {
        int c3 = (int)(i % C3), part = c3 / C, c = c3 % C, h = c / hs;
        size_t bt = i / C3, b = bt / T;
        int t = (int)(bt % T);
        size_t rows0 = (b * NH + h) * T;            /* row index of (b, h, t = 0) */
        const float *tok0 = inp + b * T * C3;       /* token (b, 0) */
        float a = dinp[i];
        if (part == 0) {
            const float *pre = dpreatt + (rows0 + t) * T;
            for (int t2 = 0; t2 <= t; t2++) a += tok0[(size_t)t2 * C3 + C + c] * (pre[t2] * scale);
        } else if (part == 1) {
            for (int tq = t; tq < T; tq++)
                a += tok0[(size_t)tq * C3 + c] * (dpreatt[(rows0 + tq) * T + t] * scale);
        } else {
            const float *d0 = dout + b * T * C + c;
            for (int tq = t; tq < T; tq++) a += att[(rows0 + tq) * T + t] * d0[(size_t)tq * C];
        }
        dinp[i] = a;
    }
}

static int attention_shape_ok(const char *who, int C, int NH)
{
    if (NH > 0 && C % NH == 0) return 1;
    fprintf(stderr, "rank %d: %s: C = %d is not divisible by NH = %d\n", kern_log_rank(), who, C, NH);
    return 0;
}

extern "C" int kern_attention_forward_cuda(float *out, float *preatt, float *att, const float *inp,
                                           int B, int T, int C, int NH, void *stream)
{
    if (!attention_shape_ok("kern_attention_forward_cuda", C, NH)) return -1;
    if (B <= 0 || T <= 0 || C <= 0) return 0;
    cudaStream_t st = as_stream(stream);
    float scale = 1.0f / sqrtf((float)(C / NH));
    size_t nscores = (size_t)B * NH * T * T, rows = (size_t)B * NH * T;
    attention_preatt_kernel<<<grid_for(nscores, THREADS), THREADS, 0, st>>>(preatt, inp, B, T, C, NH, scale);
    if (LAUNCH_CHECK(attention_preatt_kernel)) return -1;
    attention_softmax_kernel<<<(unsigned)((rows + ROWS_PER_BLOCK - 1) / ROWS_PER_BLOCK), THREADS, 0, st>>>(att, preatt, rows, T);
    if (LAUNCH_CHECK(attention_softmax_kernel)) return -1;
    size_t nout = (size_t)B * T * C;
    attention_out_kernel<<<grid_for(nout, THREADS), THREADS, 0, st>>>(out, att, inp, B, T, C, NH);
    return LAUNCH_CHECK(attention_out_kernel);
}

extern "C" int kern_attention_backward_cuda(float *dinp, float *dpreatt, float *datt, const float *dout,
                                            const float *inp, const float *att, int B, int T, int C, int NH,
                                            void *stream)
{
    if (!attention_shape_ok("kern_attention_backward_cuda", C, NH)) return -1;
    if (B <= 0 || T <= 0 || C <= 0) return 0;
    cudaStream_t st = as_stream(stream);
    float scale = 1.0f / sqrtf((float)(C / NH));
    size_t nscores = (size_t)B * NH * T * T, rows = (size_t)B * NH * T;
    attention_datt_kernel<<<grid_for(nscores, THREADS), THREADS, 0, st>>>(datt, dout, inp, B, T, C, NH);
    if (LAUNCH_CHECK(attention_datt_kernel)) return -1;
    attention_softmax_backward_kernel<<<(unsigned)((rows + ROWS_PER_BLOCK - 1) / ROWS_PER_BLOCK), THREADS, 0, st>>>(
        dpreatt, datt, att, rows, T);
    if (LAUNCH_CHECK(attention_softmax_backward_kernel)) return -1;
    size_t ninp = (size_t)B * T * 3 * C;
    attention_backward_dinp_kernel<<<grid_for(ninp, THREADS), THREADS, 0, st>>>(dinp, dpreatt, att, dout, inp,
                                                                                 B, T, C, NH, scale);
    return LAUNCH_CHECK(attention_backward_dinp_kernel);
}

/* ---- GELU (tanh approximation) ---- */

static __global__ void gelu_forward_kernel(float *out, const float *inp, size_t n)
{
    GRID_STRIDE(i, n) {
        float x = inp[i];
        float u = GELU_SCALE * (x + 0.044715f * x * x * x);
        out[i] = 0.5f * x * (1.0f + tanhf(u));
    }
}

static __global__ void gelu_backward_kernel(float *dinp, const float *inp, const float *dout, size_t n)
{
    GRID_STRIDE(i, n) {
        float x = inp[i];
        float u = GELU_SCALE * (x + 0.044715f * x * x * x);
        float th = tanhf(u);
        float sech2 = 1.0f - th * th;
        float grad = 0.5f * (1.0f + th) + 0.5f * x * sech2 * GELU_SCALE * (1.0f + 3.0f * 0.044715f * x * x);
        dinp[i] += grad * dout[i];
    }
}

extern "C" int kern_gelu_forward_cuda(float *out, const float *inp, size_t N, void *stream)
{
    if (N == 0) return 0;
    gelu_forward_kernel<<<grid_for(N, THREADS), THREADS, 0, as_stream(stream)>>>(out, inp, N);
    return LAUNCH_CHECK(gelu_forward_kernel);
}

extern "C" int kern_gelu_backward_cuda(float *dinp, const float *inp, const float *dout, size_t N, void *stream)
{
    if (N == 0) return 0;
    gelu_backward_kernel<<<grid_for(N, THREADS), THREADS, 0, as_stream(stream)>>>(dinp, inp, dout, N);
    return LAUNCH_CHECK(gelu_backward_kernel);
}

/* ---- residual ---- */

static __global__ void residual_forward_kernel(float *out, const float *inp1, const float *inp2, size_t n)
{
    GRID_STRIDE(i, n) out[i] = inp1[i] + inp2[i];
}

static __global__ void residual_backward_kernel(float *dinp1, float *dinp2, const float *dout, size_t n)
{
    GRID_STRIDE(i, n) {
        dinp1[i] += dout[i];
        dinp2[i] += dout[i];
    }
}

extern "C" int kern_residual_forward_cuda(float *out, const float *inp1, const float *inp2, size_t N, void *stream)
{
    if (N == 0) return 0;
    residual_forward_kernel<<<grid_for(N, THREADS), THREADS, 0, as_stream(stream)>>>(out, inp1, inp2, N);
    return LAUNCH_CHECK(residual_forward_kernel);
}

extern "C" int kern_residual_backward_cuda(float *dinp1, float *dinp2, const float *dout, size_t N, void *stream)
{
    if (N == 0) return 0;
    residual_backward_kernel<<<grid_for(N, THREADS), THREADS, 0, as_stream(stream)>>>(dinp1, dinp2, dout, N);
    return LAUNCH_CHECK(residual_backward_kernel);
}

/* ---- fused softmax + cross-entropy: one block per (b,t) row ---- */

static __global__ void crossentropy_softmax_forward_kernel(float *probs, float *losses, const float *logits,
                                                    const int *targets, int V)
{
    __shared__ float sh[32];
    size_t r = blockIdx.x;
    const float *l = logits + r * V;
    float *p = probs + r * V;
    float maxv = -INFINITY;
    for (int i = threadIdx.x; i < V; i += blockDim.x) maxv = fmaxf(maxv, l[i]);
    maxv = block_reduce(maxv, sh, true);
    float sum = 0.0f;
    for (int i = threadIdx.x; i < V; i += blockDim.x) {
        float e = expf(l[i] - maxv);
        p[i] = e;
        sum += e;
    }
    float inv = 1.0f / block_reduce(sum, sh, false);
    for (int i = threadIdx.x; i < V; i += blockDim.x) p[i] *= inv;
    __syncthreads();   /* p[target] was scaled by some thread of this block */
    if (threadIdx.x == 0) losses[r] = -logf(p[targets[r]]);
}

static __global__ void crossentropy_softmax_backward_kernel(float *dlogits, const float *probs, const int *targets,
                                                     float dloss, int V, size_t n)
{
    GRID_STRIDE(i, n) {
        size_t r = i / V;
        float a = dlogits[i] + probs[i] * dloss;
        if ((int)(i % V) == targets[r]) a -= dloss;
        dlogits[i] = a;
    }
}

extern "C" int kern_crossentropy_softmax_forward_cuda(float *probs, float *losses, const float *logits,
                                                      const int *targets, int B, int T, int V, void *stream)
{
    size_t rows = (size_t)B * T;
    if (rows == 0 || V <= 0) return 0;
    if (rows > 0x7fffffffu) {
        fprintf(stderr, "rank %d: kern_crossentropy_softmax_forward_cuda: B*T = %zu rows is too many\n",
                kern_log_rank(), rows);
        return -1;
    }
    crossentropy_softmax_forward_kernel<<<(unsigned)rows, THREADS, 0, as_stream(stream)>>>(probs, losses, logits,
                                                                                          targets, V);
    return LAUNCH_CHECK(crossentropy_softmax_forward_kernel);
}

extern "C" int kern_crossentropy_softmax_backward_cuda(float *dlogits, const float *probs, const int *targets,
                                                       float dloss, int B, int T, int V, void *stream)
{
    size_t n = (size_t)B * T * V;
    if (n == 0) return 0;
    crossentropy_softmax_backward_kernel<<<grid_for(n, THREADS), THREADS, 0, as_stream(stream)>>>(
        dlogits, probs, targets, dloss, V, n);
    return LAUNCH_CHECK(crossentropy_softmax_backward_kernel);
}

/* ---- tied LM head + softmax cross-entropy, fused ---- */

/* one block per row: lse = max + log Σ exp(l - max), loss = lse - l[target] */
static __global__ void lmhead_lse_kernel(float *lse, float *losses, const float *logits, const int *targets, int V)
{
    __shared__ float sh[32];
    size_t r = blockIdx.x;
    const float *l = logits + r * V;
    float maxv = -INFINITY;
    for (int i = threadIdx.x; i < V; i += blockDim.x) maxv = fmaxf(maxv, l[i]);
    maxv = block_reduce(maxv, sh, true);
    float sum = 0.0f;
    for (int i = threadIdx.x; i < V; i += blockDim.x) sum += expf(l[i] - maxv);
    sum = block_reduce(sum, sh, false);
    if (threadIdx.x == 0) {
        float s = maxv + logf(sum);
        lse[r] = s;
        losses[r] = s - l[targets[r]];
    }
}

/* logits -> dlogits in place: exp(l - lse)·dloss, minus dloss at the target */
static __global__ void lmhead_dlogits_kernel(float *logits, const float *lse, const int *targets, float dloss, int V,
                                             size_t n)
{
    GRID_STRIDE(i, n) {
        size_t r = i / V;
        float a = expf(logits[i] - lse[r]) * dloss;
        if ((int)(i % V) == targets[r]) a -= dloss;
        logits[i] = a;
    }
}

extern "C" int kern_lmhead_ce_forward_cuda(float *logits, float *lse, float *losses, const float *inp,
                                           const float *weight, const int *targets, int B, int T, int C, int V,
                                           void *stream)
{
    size_t rows = (size_t)B * T;
    if (rows == 0 || V <= 0) return 0;
    if (rows > 0x7fffffffu) {
        fprintf(stderr, "rank %d: kern_lmhead_ce_forward_cuda: B*T = %zu rows is too many\n", kern_log_rank(), rows);
        return -1;
    }
    if (kern_matmul_forward_cuda(logits, inp, weight, NULL, B, T, C, V, stream)) return -1;
    lmhead_lse_kernel<<<(unsigned)rows, THREADS, 0, as_stream(stream)>>>(lse, losses, logits, targets, V);
    return LAUNCH_CHECK(lmhead_lse_kernel);
}

extern "C" int kern_lmhead_ce_backward_cuda(float *dinp, float *dweight, float *logits, const float *lse,
                                            const int *targets, const float *inp, const float *weight, float dloss,
                                            int B, int T, int C, int V, void *stream)
{
    size_t n = (size_t)B * T * V;
    if (n == 0) return 0;
    lmhead_dlogits_kernel<<<grid_for(n, THREADS), THREADS, 0, as_stream(stream)>>>(logits, lse, targets, dloss, V, n);
    if (LAUNCH_CHECK(lmhead_dlogits_kernel)) return -1;
    return kern_matmul_backward_cuda(dinp, dweight, NULL, logits, inp, weight, B, T, C, V, stream);
}

/* ---- AdamW ---- */

static __global__ void adamw_kernel(float *p, const float *g, float *m, float *v, size_t n, float lr, float beta1,
                             float beta2, float eps, float weight_decay, float bc1, float bc2)
{
    GRID_STRIDE(i, n) {
        float pi = p[i], gi = g[i];
        pi -= lr * weight_decay * pi;
        float mi = beta1 * m[i] + (1.0f - beta1) * gi;
        float vi = beta2 * v[i] + (1.0f - beta2) * gi * gi;
        m[i] = mi;
        v[i] = vi;
        float mhat = mi / bc1, vhat = vi / bc2;
        p[i] = pi - lr * mhat / (sqrtf(vhat) + eps);
    }
}

extern "C" int kern_adamw_update_cuda(float *params, const float *grads, float *m, float *v, size_t offset,
                                      size_t length, float lr, float beta1, float beta2, float eps,
                                      float weight_decay, int t, void *stream)
{
    if (length == 0) return 0;
    /* bias corrections on the host with the CPU twin's expressions */
    float bc1 = 1.0f - powf(beta1, (float)t);
    float bc2 = 1.0f - powf(beta2, (float)t);
    adamw_kernel<<<grid_for(length, THREADS), THREADS, 0, as_stream(stream)>>>(
        params + offset, grads + offset, m, v, length, lr, beta1, beta2, eps, weight_decay, bc1, bc2);
    return LAUNCH_CHECK(adamw_kernel);
}
