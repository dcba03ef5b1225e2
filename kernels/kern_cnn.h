/* kern_cnn.h — fp32 CPU kernels of a ResNet-style CNN training step: 2-d convolution, BatchNorm2d
 * (split so that SyncBatchNorm can put its collectives between the pieces), ReLU, residual add,
 * max pooling and global average pooling. The head (linear + softmax cross-entropy) reuses
 * kern_matmul_* and kern_crossentropy_softmax_* from kern_ops.h with B = N, T = 1.
 *
 * These are the reference contracts: the CUDA twins implement exactly the same signatures and
 * semantics, and GPU tests compare against these with a stated tolerance. The rules are those of
 * kern_ops.h:
 *   - plain pointers and explicit sizes; no allocation inside a kernel: a kernel that needs
 *     scratch takes it from the caller, and a function says how large it must be;
 *   - forward kernels fully WRITE (overwrite) every output element;
 *   - backward kernels ACCUMULATE (+=) into parameter gradients and into input gradients, so the
 *     caller zeroes those buffers first. Per-call scratch and the BatchNorm statistics and
 *     reductions (which are not gradients of anything the caller keeps) are fully written;
 *   - deterministic: no threads of our own, fixed loop order, per-channel sums in double;
 *     matrix products go through cblas_sgemm.
 * Layout is NCHW, row-major, float32 unless said otherwise. N = batch, C = input channels,
 * H, W = input height and width, OC = output channels, K = square kernel side, OH, OW = output
 * height and width. A gradient buffer must not alias the dout it is computed from.
 *
 * BatchNorm and SyncBatchNorm (PyTorch torch/nn/modules/_functions.py SyncBatchNorm). Training:
 *   forward   kern_bn_stats           local [mean | invstd | count] per rank      (2C+1 floats)
 *             -- all-gather those rows over the ranks (SyncBN only) --
 *             kern_bn_combine_stats   global mean, invstd and unbiased variance
 *             kern_bn_update_running  running_mean / running_var, momentum 0.1
 *             kern_bn_forward_apply   out = (x - mean)·invstd·weight + bias
 *   backward  kern_bn_backward_reduce local [sum_dy | sum_dy_xmu] (2C), dweight, dbias
 *             -- all-reduce (sum) [sum_dy | sum_dy_xmu] over the ranks (SyncBN only) --
 *             kern_bn_backward_apply  dinp from the global sums and the total count
 * With one rank, the same sequence without collectives is plain BatchNorm2d; kern_batchnorm_*
 * do plain BatchNorm2d in one call each. dweight and dbias from kern_bn_backward_reduce are each
 * rank's share: summed over ranks (DDP's gradient all-reduce) they are the global gradients. */
#ifndef KERN_CNN_H
#define KERN_CNN_H

#include <stddef.h>

#define KERN_BN_EPS 1e-5f        /* torch.nn.BatchNorm2d default eps */
#define KERN_BN_MOMENTUM 0.1f    /* torch.nn.BatchNorm2d default momentum */

/* ---- 2-d convolution, no bias (as torchvision's ResNet), groups = 1, dilation = 1 ---- */
/* Output side for an input side `in`: (in + 2·pad - K) / stride + 1 (floor, as PyTorch with
 * ceil_mode = False; also the pooling formula). The caller keeps it >= 1. */
int kern_conv2d_out_size(int in, int K, int stride, int pad);
/* Floats of col_scratch that kern_conv2d_forward/backward need: one image's im2col matrix,
 * (C·K·K, OH·OW). It is 0 for a 1×1 convolution with stride 1 and pad 0, which multiplies the
 * input directly; col_scratch may then be NULL. */
size_t kern_conv2d_col_size(int C, int H, int W, int K, int stride, int pad);
/* out (N,OC,OH,OW) = conv(inp (N,C,H,W), weight (OC,C,K,K)), zero padding `pad` on every side.
 * Per image: col (C·K·K, OH·OW) = im2col(inp[n]); out[n] (OC, OH·OW) = weight (OC, C·K·K) · col. */
void kern_conv2d_forward(float *out, const float *inp, const float *weight, float *col_scratch,
                         int N, int C, int H, int W, int OC, int K, int stride, int pad);
/* dinp (N,C,H,W) += col2im(weightᵀ · dout[n]);  dweight (OC,C,K,K) += Σ_n dout[n] · col[n]ᵀ,
 * from dout (N,OC,OH,OW) and the forward input inp. dinp or dweight may be NULL to skip that
 * gradient (the first convolution needs no dinp). col_scratch as for the forward; its content
 * on return is undefined. */
void kern_conv2d_backward(float *dinp, float *dweight, float *col_scratch, const float *dout,
                          const float *inp, const float *weight, int N, int C, int H, int W,
                          int OC, int K, int stride, int pad);

/* ---- BatchNorm2d: statistics per channel over N·H·W, eps = KERN_BN_EPS ---- */
/* Length in floats of one rank's statistics row, 2C+1 (what SyncBN all-gathers per rank). */
size_t kern_bn_stats_len(int C);
/* stats (2C+1) = [mean (C) | invstd (C) | count], as torch.batch_norm_stats plus the count:
 * mean = batch mean of channel c over N·H·W, invstd = 1 / sqrt(var + eps) with var the biased
 * variance (so var = 1/invstd² - eps), count = N·H·W. The count is a float, as in PyTorch's
 * gather buffer: exact up to 2^24 values per channel per rank. */
void kern_bn_stats(float *stats, const float *inp, int N, int C, int H, int W);
/* Combines R ranks' rows all_stats (R, 2C+1), each written by kern_bn_stats, into the global
 * mean (C) and invstd (C) = 1/sqrt(global biased var + eps), and var_unbiased (C) = global
 * Σ(x - mean)² / (n - 1) for the running statistics (NULL to skip); n = Σ counts. Exactly
 * PyTorch's batch_norm_gather_stats_with_counts (Chan's parallel combination, in rank order, in
 * double); counts may differ between ranks, and a rank with count < 1 (an empty batch) is left
 * out, as SyncBatchNorm does. Training needs n >= 2 (PyTorch refuses a single value per
 * channel; the caller checks); for n <= 1 this writes invstd = 1/sqrt(eps) when n = 1,
 * mean = invstd = 0 when n = 0, and var_unbiased = the biased variance, never dividing by 0. */
void kern_bn_combine_stats(float *mean, float *invstd, float *var_unbiased,
                           const float *all_stats, int R, int C);
/* running_mean (C) = (1 - momentum)·running_mean + momentum·mean;
 * running_var (C)  = (1 - momentum)·running_var  + momentum·var_unbiased  (PyTorch). */
void kern_bn_update_running(float *running_mean, float *running_var, const float *mean,
                            const float *var_unbiased, int C, float momentum);
/* out (N,C,H,W) = (inp - mean[c])·invstd[c]·weight[c] + bias[c], for given (possibly global)
 * mean (C) and invstd (C); weight or bias NULL means 1 or 0 (affine = False). out may be inp. */
void kern_bn_forward_apply(float *out, const float *inp, const float *mean, const float *invstd,
                           const float *weight, const float *bias, int N, int C, int H, int W);
/* Evaluation mode: out = (inp - running_mean[c]) / sqrt(running_var[c] + eps)·weight + bias. */
void kern_bn_forward_eval(float *out, const float *inp, const float *running_mean,
                          const float *running_var, const float *weight, const float *bias,
                          int N, int C, int H, int W);
/* Local per-channel sums over this rank's N·H·W, as PyTorch's batch_norm_backward_reduce:
 * sum_dy (C) = Σ dout, sum_dy_xmu (C) = Σ dout·(inp - mean), both WRITTEN; and
 * dweight (C) += sum_dy_xmu·invstd, dbias (C) += sum_dy (either may be NULL). mean and invstd are
 * the ones the forward applied (global under SyncBN). */
void kern_bn_backward_reduce(float *sum_dy, float *sum_dy_xmu, float *dweight, float *dbias,
                             const float *dout, const float *inp, const float *mean,
                             const float *invstd, int N, int C, int H, int W);
/* dinp (N,C,H,W) += (dout - mean_dy - (inp - mean)·invstd²·mean_dy_xmu)·weight·invstd, with
 * mean_dy = sum_dy / total_count and mean_dy_xmu = sum_dy_xmu / total_count, as PyTorch's
 * batch_norm_backward_elemt. sum_dy, sum_dy_xmu (C) are the sums over all ranks and total_count
 * the sum of all ranks' counts (this rank's N·H·W for plain BN). weight NULL means 1. */
void kern_bn_backward_apply(float *dinp, const float *dout, const float *inp, const float *mean,
                            const float *invstd, const float *weight, const float *sum_dy,
                            const float *sum_dy_xmu, long long total_count,
                            int N, int C, int H, int W);
/* Plain BatchNorm2d training forward in one call: saves mean (C) and invstd (C) for the
 * backward, writes out (N,C,H,W), and updates running_mean/running_var (C) with `momentum` and
 * the unbiased variance (both NULL: track_running_stats = False). N·H·W >= 2. */
void kern_batchnorm_forward(float *out, float *mean, float *invstd, float *running_mean,
                            float *running_var, const float *inp, const float *weight,
                            const float *bias, int N, int C, int H, int W, float momentum);
/* Plain BatchNorm2d backward in one call: dinp +=, dweight +=, dbias += (any may be NULL). */
void kern_batchnorm_backward(float *dinp, float *dweight, float *dbias, const float *dout,
                             const float *inp, const float *mean, const float *invstd,
                             const float *weight, int N, int C, int H, int W);

/* ---- ReLU (torchvision's is in place, so the backward reads the output) ---- */
void kern_relu_forward(float *out, const float *inp, size_t n);   /* out = max(inp, 0); out may be inp */
/* dinp += dout where out > 0 (n elements); out is the forward's output. */
void kern_relu_backward(float *dinp, const float *out, const float *dout, size_t n);

/* ---- residual add (a ResNet block's identity or downsample shortcut) ---- */
void kern_add_forward(float *out, const float *a, const float *b, size_t n);   /* out may be a or b */
void kern_add_backward(float *da, float *db, const float *dout, size_t n);     /* da += dout; db += dout */

/* ---- max pooling 2-d (ResNet's stem: K = 3, stride = 2, pad = 1); padding never wins ---- */
/* out (N,C,OH,OW) = max over the K×K window; argmax (N,C,OH,OW) int32 = h·W + w of the maximum
 * within its (H,W) plane, the first one in row-major window order on ties; a NaN wins (the
 * last NaN, as PyTorch). OH, OW from kern_conv2d_out_size; pad <= K/2 so every window holds an input. */
void kern_maxpool2d_forward(float *out, int *argmax, const float *inp, int N, int C, int H, int W,
                            int K, int stride, int pad);
/* dinp (N,C,H,W) += dout (N,C,OH,OW) routed to the saved argmax; overlapping windows add up. */
void kern_maxpool2d_backward(float *dinp, const float *dout, const int *argmax, int N, int C,
                             int H, int W, int K, int stride, int pad);

/* ---- global average pooling (adaptive average pool to 1×1, then flatten) ---- */
/* out (N,C) = mean of inp (N,C,H,W) over H·W (summed in double). */
void kern_avgpool_global_forward(float *out, const float *inp, int N, int C, int H, int W);
/* dinp (N,C,H,W) += dout (N,C) / (H·W). */
void kern_avgpool_global_backward(float *dinp, const float *dout, int N, int C, int H, int W);

#endif
