/* exec_kern.h — the kernel table a model runtime and the strategies call, chosen once per
 * device kind (exec_kernels): the CPU kernels of kern_ops.h and kern_cnn.h, or their CUDA twins of
 * kern_cuda.h and kern_cnn_cuda.h.
 * Entries have kern_cuda.h's signatures (the CPU twin's arguments plus a trailing stream, a
 * cudaStream_t as void *, ignored on the CPU) and return 0, or -1 after the CUDA launcher printed
 * why; the CPU entries call kern_fast.h's fast paths (same contracts as kern_ops.h, rounding
 * differences stated there) or kern_ops.h's functions, and always return 0.
 *
 * Pointers are the device's: host memory for the CPU table, device memory for the CUDA one.
 * Contracts (shapes, write vs accumulate) are kern_ops.h's and kern_cnn.h's. No vendor types here. */
#ifndef EXEC_KERN_H
#define EXEC_KERN_H

#include <stddef.h>

#include "exec_device.h"

typedef struct {
    const char *name;   /* "cpu" or "cuda" */
    int (*encoder_forward)(float *out, const int *inp, const float *wte, const float *wpe, int B, int T,
                           int C, void *stream);
    int (*encoder_backward)(float *dwte, float *dwpe, const float *dout, const int *inp, int B, int T, int C,
                            void *stream);
    int (*layernorm_forward)(float *out, float *mean, float *rstd, const float *inp, const float *weight,
                             const float *bias, int B, int T, int C, void *stream);
    int (*layernorm_backward)(float *dinp, float *dweight, float *dbias, const float *dout, const float *inp,
                              const float *weight, const float *mean, const float *rstd, int B, int T, int C,
                              void *stream);
    int (*matmul_forward)(float *out, const float *inp, const float *weight, const float *bias, int B, int T,
                          int C, int OC, void *stream);
    int (*matmul_backward)(float *dinp, float *dweight, float *dbias, const float *dout, const float *inp,
                           const float *weight, int B, int T, int C, int OC, void *stream);
    int (*attention_forward)(float *out, float *preatt, float *att, const float *inp, int B, int T, int C,
                             int NH, void *stream);
    int (*attention_backward)(float *dinp, float *dpreatt, float *datt, const float *dout, const float *inp,
                              const float *att, int B, int T, int C, int NH, void *stream);
    int (*gelu_forward)(float *out, const float *inp, size_t N, void *stream);
    int (*gelu_backward)(float *dinp, const float *inp, const float *dout, size_t N, void *stream);
    int (*residual_forward)(float *out, const float *inp1, const float *inp2, size_t N, void *stream);
    int (*crossentropy_softmax_forward)(float *probs, float *losses, const float *logits, const int *targets,
                                        int B, int T, int V, void *stream);
    int (*crossentropy_softmax_backward)(float *dlogits, const float *probs, const int *targets, float dloss,
                                         int B, int T, int V, void *stream);
    /* the tied LM head and its loss, fused (kern_lmhead_ce_*: the logits are the only vocabulary-
       sized tensor; backward turns them into their gradient in place) */
    int (*lmhead_ce_forward)(float *logits, float *lse, float *losses, const float *inp, const float *weight,
                             const int *targets, int B, int T, int C, int V, void *stream);
    int (*lmhead_ce_backward)(float *dinp, float *dweight, float *logits, const float *lse, const int *targets,
                              const float *inp, const float *weight, float dloss, int B, int T, int C, int V,
                              void *stream);
    int (*adamw_update)(float *params, const float *grads, float *m, float *v, size_t offset, size_t length,
                        float lr, float beta1, float beta2, float eps, float weight_decay, int t, void *stream);
    /* dst[i] += src[i] for i < N, in index order (the strategies' shard accumulation). */
    int (*add)(float *dst, const float *src, size_t N, void *stream);
    /* ---- the CNN's (kern_cnn.h / kern_cnn_cuda.h) ---- */
    int (*conv2d_forward)(float *out, const float *inp, const float *weight, float *col_scratch, int N, int C, int H, int W, int OC, int K, int stride, int pad, void *stream);
    int (*conv2d_backward)(float *dinp, float *dweight, float *col_scratch, const float *dout, const float *inp, const float *weight, int N, int C, int H, int W, int OC, int K, int stride, int pad, void *stream);
    int (*bn_stats)(float *stats, const float *inp, int N, int C, int H, int W, void *stream);
    int (*bn_combine_stats)(float *mean, float *invstd, float *var_unbiased, const float *all_stats, int R, int C, void *stream);
    int (*bn_update_running)(float *running_mean, float *running_var, const float *mean, const float *var_unbiased, int C, float momentum, void *stream);
    int (*bn_forward_apply)(float *out, const float *inp, const float *mean, const float *invstd, const float *weight, const float *bias, int N, int C, int H, int W, void *stream);
    int (*bn_forward_eval)(float *out, const float *inp, const float *running_mean, const float *running_var, const float *weight, const float *bias, int N, int C, int H, int W, void *stream);
    int (*bn_backward_reduce)(float *sum_dy, float *sum_dy_xmu, float *dweight, float *dbias, const float *dout, const float *inp, const float *mean, const float *invstd, int N, int C, int H, int W, void *stream);
    int (*bn_backward_apply)(float *dinp, const float *dout, const float *inp, const float *mean, const float *invstd, const float *weight, const float *sum_dy, const float *sum_dy_xmu, long long total_count, int N, int C, int H, int W, void *stream);
    int (*batchnorm_forward)(float *out, float *mean, float *invstd, float *running_mean, float *running_var, const float *inp, const float *weight, const float *bias, int N, int C, int H, int W, float momentum, void *stream);
    int (*batchnorm_backward)(float *dinp, float *dweight, float *dbias, const float *dout, const float *inp, const float *mean, const float *invstd, const float *weight, int N, int C, int H, int W, void *stream);
    int (*relu_forward)(float *out, const float *inp, size_t n, void *stream);
    int (*relu_backward)(float *dinp, const float *out, const float *dout, size_t n, void *stream);
    int (*add_forward)(float *out, const float *a, const float *b, size_t n, void *stream);
    int (*add_backward)(float *da, float *db, const float *dout, size_t n, void *stream);
    int (*maxpool2d_forward)(float *out, int *argmax, const float *inp, int N, int C, int H, int W, int K, int stride, int pad, void *stream);
    int (*maxpool2d_backward)(float *dinp, const float *dout, const int *argmax, int N, int C, int H, int W, int K, int stride, int pad, void *stream);
    int (*avgpool_global_forward)(float *out, const float *inp, int N, int C, int H, int W, void *stream);
    int (*avgpool_global_backward)(float *dinp, const float *dout, int N, int C, int H, int W, void *stream);
} ExecKernels;

/* The table for a device kind: DEVICE_HOST -> the CPU kernels, DEVICE_CUDA -> the CUDA twins
 * (which fail with a message when memplan was built without CUDA). Static storage. */
const ExecKernels *exec_kernels(DeviceKind kind);

#endif
