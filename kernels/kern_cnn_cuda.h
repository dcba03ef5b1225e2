/* kern_cnn_cuda.h — CUDA twins of the fp32 CPU kernels in kern_cnn.h (a ResNet-style CNN step:
 * convolution, BatchNorm2d split for SyncBatchNorm, ReLU, residual add, max and global average
 * pooling).
 *
 * Every launcher kern_<op>_cuda has the signature of its CPU twin kern_<op> plus a trailing
 * `stream` (a cudaStream_t passed as void *, NULL for the default stream), returns int, and keeps
 * the CPU contract exactly: NCHW fp32, the same shapes, forward kernels fully WRITE every output
 * element, backward kernels ACCUMULATE (+=) into parameter and input gradients, the BatchNorm
 * statistics and sums (stats, mean, invstd, var_unbiased, sum_dy, sum_dy_xmu) and conv scratch are
 * fully written. All pointers are DEVICE pointers (cudaMalloc'd), including maxpool's int32
 * argmax and BatchNorm's gathered stats rows; scalars are passed by value. Launches are
 * asynchronous on `stream`; nothing is allocated (col_scratch is the caller's, sized by the CPU
 * helper kern_conv2d_col_size, which with kern_conv2d_out_size and kern_bn_stats_len serves both).
 *
 * Determinism: no float atomics; every sum runs in a fixed order (per-channel sums in double, as
 * on the CPU), so results are reproducible run to run on one GPU. Where the arithmetic is the
 * CPU's, step for step, the bits are the CPU's (ReLU, add, pooling, maxpool argmax); elsewhere they
 * differ by the summation order or cuBLAS (tolerances: docs/gpu-cnn-kernels.md).
 *
 * Convolutions go through cublasSgemm on the one cuBLAS handle of kernels/, created by
 * kern_cuda_init() (kern_cuda.h) on the current device with CUBLAS_DEFAULT_MATH: no TF32. The
 * handle is process-wide state: launchers are not meant to be called from several host threads
 * at once.
 *
 * Return values: 0 on success, -1 on failure, after printing "rank R: file:line: call failed:
 * message" to stderr. Faults inside a kernel surface at the caller's next synchronization.
 *
 * Plain C header: no CUDA types. Built without CUDA (NO_CUDA=1), kern_cnn_cuda_stub.c provides the
 * same symbols and every launcher fails with a message; use kern_cuda_device_count() (kern_cuda.h)
 * to find out whether there is a device at all. */
#ifndef KERN_CNN_CUDA_H
#define KERN_CNN_CUDA_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif


/* ---- 2-d convolution (needs kern_cuda_init): im2col + cublasSgemm, one image at a time ---- */
/* out (N,OC,OH,OW) = conv(inp (N,C,H,W), weight (OC,C,K,K)); col_scratch: kern_conv2d_col_size
 * floats on the device (NULL allowed when that is 0: 1×1, stride 1, pad 0). */
int kern_conv2d_forward_cuda(float *out, const float *inp, const float *weight, float *col_scratch,
                             int N, int C, int H, int W, int OC, int K, int stride, int pad,
                             void *stream);
/* dinp (N,C,H,W) +=, dweight (OC,C,K,K) += (either may be NULL); col_scratch content undefined
 * on return. */
int kern_conv2d_backward_cuda(float *dinp, float *dweight, float *col_scratch, const float *dout,
                              const float *inp, const float *weight, int N, int C, int H, int W,
                              int OC, int K, int stride, int pad, void *stream);

/* ---- BatchNorm2d, split for SyncBatchNorm (sequence and formulas in kern_cnn.h) ---- */
/* stats (2C+1) = [mean | invstd | count]: one block per channel, sums in double. */
int kern_bn_stats_cuda(float *stats, const float *inp, int N, int C, int H, int W, void *stream);
/* all_stats (R, 2C+1) on the device, e.g. as an all-gather left it; one thread per channel runs
 * the CPU's Chan combination in rank order in double. var_unbiased may be NULL. */
int kern_bn_combine_stats_cuda(float *mean, float *invstd, float *var_unbiased,
                               const float *all_stats, int R, int C, void *stream);
int kern_bn_update_running_cuda(float *running_mean, float *running_var, const float *mean,
                                const float *var_unbiased, int C, float momentum, void *stream);
/* out (N,C,H,W) = (inp - mean)·invstd·weight + bias; weight/bias NULL = 1/0; out may be inp. */
int kern_bn_forward_apply_cuda(float *out, const float *inp, const float *mean, const float *invstd,
                               const float *weight, const float *bias, int N, int C, int H, int W,
                               void *stream);
int kern_bn_forward_eval_cuda(float *out, const float *inp, const float *running_mean,
                              const float *running_var, const float *weight, const float *bias,
                              int N, int C, int H, int W, void *stream);
/* sum_dy, sum_dy_xmu (C) written; dweight, dbias (C) += (either may be NULL). */
int kern_bn_backward_reduce_cuda(float *sum_dy, float *sum_dy_xmu, float *dweight, float *dbias,
                                 const float *dout, const float *inp, const float *mean,
                                 const float *invstd, int N, int C, int H, int W, void *stream);
/* dinp (N,C,H,W) += ...; sum_dy, sum_dy_xmu summed over all ranks, total_count = Σ counts. */
int kern_bn_backward_apply_cuda(float *dinp, const float *dout, const float *inp, const float *mean,
                                const float *invstd, const float *weight, const float *sum_dy,
                                const float *sum_dy_xmu, long long total_count,
                                int N, int C, int H, int W, void *stream);
/* Plain BatchNorm2d in one launch each: one block per channel does the channel's sums and then
 * its elements, so no scratch is needed. running_mean and running_var both NULL to skip. */
int kern_batchnorm_forward_cuda(float *out, float *mean, float *invstd, float *running_mean,
                                float *running_var, const float *inp, const float *weight,
                                const float *bias, int N, int C, int H, int W, float momentum,
                                void *stream);
int kern_batchnorm_backward_cuda(float *dinp, float *dweight, float *dbias, const float *dout,
                                 const float *inp, const float *mean, const float *invstd,
                                 const float *weight, int N, int C, int H, int W, void *stream);

/* ---- ReLU and residual add (elementwise) ---- */
int kern_relu_forward_cuda(float *out, const float *inp, size_t n, void *stream);   /* out may be inp */
int kern_relu_backward_cuda(float *dinp, const float *out, const float *dout, size_t n,
                            void *stream);   /* dinp += dout where out > 0 */
int kern_add_forward_cuda(float *out, const float *a, const float *b, size_t n, void *stream);
int kern_add_backward_cuda(float *da, float *db, const float *dout, size_t n,
                           void *stream);   /* da += dout; db += dout */

/* ---- pooling ---- */
/* out (N,C,OH,OW), argmax (N,C,OH,OW) int32 on the device: as the CPU (first maximum on ties,
 * a NaN wins). */
int kern_maxpool2d_forward_cuda(float *out, int *argmax, const float *inp, int N, int C, int H,
                                int W, int K, int stride, int pad, void *stream);
/* dinp (N,C,H,W) += dout routed to argmax: one thread per input element gathers the windows that
 * cover it, in the CPU's order, so overlapping windows need no atomics. */
int kern_maxpool2d_backward_cuda(float *dinp, const float *dout, const int *argmax, int N, int C,
                                 int H, int W, int K, int stride, int pad, void *stream);
/* out (N,C) = mean over H·W in double; dinp (N,C,H,W) += dout / (H·W). */
int kern_avgpool_global_forward_cuda(float *out, const float *inp, int N, int C, int H, int W,
                                     void *stream);
int kern_avgpool_global_backward_cuda(float *dinp, const float *dout, int N, int C, int H, int W,
                                      void *stream);

#ifdef __cplusplus
}
#endif

#endif
