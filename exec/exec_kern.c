/* exec_kern.c — the two kernel tables of exec_kern.h. The CPU entries wrap the fast CPU paths of
 * kern_fast.h where one exists (LayerNorm, matmul backward, attention, GELU, residual, softmax +
 * cross-entropy forward, the fused LM head + cross-entropy, AdamW)
 * and kern_ops.h's / kern_cnn.h's reference kernels otherwise (same call, stream ignored, status 0);
 * the CUDA entries are kern_cuda.h's and kern_cnn_cuda.h's launchers themselves, whose signatures
 * the table copies. The only op of our own is add (dst += src):
 * on the CPU the loop the strategies always ran, on the GPU the residual kernel with out = inp1
 * (an elementwise kernel: the aliasing is safe). */
#include "exec_kern.h"

#include "kern_cnn.h"
#include "kern_cnn_cuda.h"
#include "kern_cuda.h"
#include "kern_fast.h"
#include "kern_ops.h"

/* ---- CPU: kern_ops.h behind the table's signatures ---- */

static int c_encoder_forward(float *out, const int *inp, const float *wte, const float *wpe, int B, int T, int C,
                             void *stream)
{
    (void)stream;
    kern_encoder_forward(out, inp, wte, wpe, B, T, C);
    return 0;
}

static int c_encoder_backward(float *dwte, float *dwpe, const float *dout, const int *inp, int B, int T, int C,
                              void *stream)
{
    (void)stream;
    kern_encoder_backward(dwte, dwpe, dout, inp, B, T, C);
    return 0;
}

static int c_layernorm_forward(float *out, float *mean, float *rstd, const float *inp, const float *weight,
                               const float *bias, int B, int T, int C, void *stream)
{
    (void)stream;
    kern_layernorm_forward_fast(out, mean, rstd, inp, weight, bias, B, T, C);
    return 0;
}

static int c_layernorm_backward(float *dinp, float *dweight, float *dbias, const float *dout, const float *inp,
                                const float *weight, const float *mean, const float *rstd, int B, int T, int C,
                                void *stream)
{
    (void)stream;
    kern_layernorm_backward_fast(dinp, dweight, dbias, dout, inp, weight, mean, rstd, B, T, C);
    return 0;
}

static int c_matmul_forward(float *out, const float *inp, const float *weight, const float *bias, int B, int T,
                            int C, int OC, void *stream)
{
    (void)stream;
    kern_matmul_forward(out, inp, weight, bias, B, T, C, OC);
    return 0;
}

static int c_matmul_backward(float *dinp, float *dweight, float *dbias, const float *dout, const float *inp,
                             const float *weight, int B, int T, int C, int OC, void *stream)
{
    (void)stream;
    kern_matmul_backward_fast(dinp, dweight, dbias, dout, inp, weight, B, T, C, OC);
    return 0;
}

static int c_attention_forward(float *out, float *preatt, float *att, const float *inp, int B, int T, int C,
                               int NH, void *stream)
{
    (void)stream;
    kern_attention_forward_fast(out, preatt, att, inp, B, T, C, NH);
    return 0;
}

static int c_attention_backward(float *dinp, float *dpreatt, float *datt, const float *dout, const float *inp,
                                const float *att, int B, int T, int C, int NH, void *stream)
{
    (void)stream;
    kern_attention_backward_fast(dinp, dpreatt, datt, dout, inp, att, B, T, C, NH);
    return 0;
}

static int c_gelu_forward(float *out, const float *inp, size_t N, void *stream)
{
    (void)stream;
    kern_gelu_forward_fast(out, inp, N);
    return 0;
}

static int c_gelu_backward(float *dinp, const float *inp, const float *dout, size_t N, void *stream)
{
    (void)stream;
    kern_gelu_backward_fast(dinp, inp, dout, N);
    return 0;
}

static int c_residual_forward(float *out, const float *inp1, const float *inp2, size_t N, void *stream)
{
    (void)stream;
    kern_residual_forward_fast(out, inp1, inp2, N);
    return 0;
}

static int c_ce_forward(float *probs, float *losses, const float *logits, const int *targets, int B, int T, int V,
                        void *stream)
{
    (void)stream;
    kern_crossentropy_softmax_forward_fast(probs, losses, logits, targets, B, T, V);
    return 0;
}

static int c_ce_backward(float *dlogits, const float *probs, const int *targets, float dloss, int B, int T, int V,
                         void *stream)
{
    (void)stream;
    kern_crossentropy_softmax_backward(dlogits, probs, targets, dloss, B, T, V);
    return 0;
}

static int c_lmhead_forward(float *logits, float *lse, float *losses, const float *inp, const float *weight,
                            const int *targets, int B, int T, int C, int V, void *stream)
{
    (void)stream;
    kern_lmhead_ce_forward_fast(logits, lse, losses, inp, weight, targets, B, T, C, V);
    return 0;
}

static int c_lmhead_backward(float *dinp, float *dweight, float *logits, const float *lse, const int *targets,
                             const float *inp, const float *weight, float dloss, int B, int T, int C, int V,
                             void *stream)
{
    (void)stream;
    kern_lmhead_ce_backward_fast(dinp, dweight, logits, lse, targets, inp, weight, dloss, B, T, C, V);
    return 0;
}

static int c_adamw(float *params, const float *grads, float *m, float *v, size_t offset, size_t length, float lr,
                   float beta1, float beta2, float eps, float weight_decay, int t, void *stream)
{
    (void)stream;
    kern_adamw_update_fast(params, grads, m, v, offset, length, lr, beta1, beta2, eps, weight_decay, t);
    return 0;
}

static int c_add(float *dst, const float *src, size_t N, void *stream)
{
    (void)stream;
    for (size_t i = 0; i < N; i++) dst[i] += src[i];
    return 0;
}

/* ---- CPU: kern_cnn.h behind the table's signatures ---- */

static int c_conv2d_forward(float *out, const float *inp, const float *weight, float *col_scratch, int N, int C, int H, int W, int OC, int K, int stride, int pad, void *stream)
{
    (void)stream;
    kern_conv2d_forward(out, inp, weight, col_scratch, N, C, H, W, OC, K, stride, pad);
    return 0;
}

static int c_conv2d_backward(float *dinp, float *dweight, float *col_scratch, const float *dout, const float *inp, const float *weight, int N, int C, int H, int W, int OC, int K, int stride, int pad, void *stream)
{
    (void)stream;
    kern_conv2d_backward(dinp, dweight, col_scratch, dout, inp, weight, N, C, H, W, OC, K, stride, pad);
    return 0;
}

static int c_bn_stats(float *stats, const float *inp, int N, int C, int H, int W, void *stream)
{
    (void)stream;
    kern_bn_stats(stats, inp, N, C, H, W);
    return 0;
}

static int c_bn_combine_stats(float *mean, float *invstd, float *var_unbiased, const float *all_stats, int R, int C, void *stream)
{
    (void)stream;
    kern_bn_combine_stats(mean, invstd, var_unbiased, all_stats, R, C);
    return 0;
}

static int c_bn_update_running(float *running_mean, float *running_var, const float *mean, const float *var_unbiased, int C, float momentum, void *stream)
{
    (void)stream;
    kern_bn_update_running(running_mean, running_var, mean, var_unbiased, C, momentum);
    return 0;
}

static int c_bn_forward_apply(float *out, const float *inp, const float *mean, const float *invstd, const float *weight, const float *bias, int N, int C, int H, int W, void *stream)
{
    (void)stream;
    kern_bn_forward_apply(out, inp, mean, invstd, weight, bias, N, C, H, W);
    return 0;
}

static int c_bn_forward_eval(float *out, const float *inp, const float *running_mean, const float *running_var, const float *weight, const float *bias, int N, int C, int H, int W, void *stream)
{
    (void)stream;
    kern_bn_forward_eval(out, inp, running_mean, running_var, weight, bias, N, C, H, W);
    return 0;
}

static int c_bn_backward_reduce(float *sum_dy, float *sum_dy_xmu, float *dweight, float *dbias, const float *dout, const float *inp, const float *mean, const float *invstd, int N, int C, int H, int W, void *stream)
{
    (void)stream;
    kern_bn_backward_reduce(sum_dy, sum_dy_xmu, dweight, dbias, dout, inp, mean, invstd, N, C, H, W);
    return 0;
}

static int c_bn_backward_apply(float *dinp, const float *dout, const float *inp, const float *mean, const float *invstd, const float *weight, const float *sum_dy, const float *sum_dy_xmu, long long total_count, int N, int C, int H, int W, void *stream)
{
    (void)stream;
    kern_bn_backward_apply(dinp, dout, inp, mean, invstd, weight, sum_dy, sum_dy_xmu, total_count, N, C, H, W);
    return 0;
}

static int c_batchnorm_forward(float *out, float *mean, float *invstd, float *running_mean, float *running_var, const float *inp, const float *weight, const float *bias, int N, int C, int H, int W, float momentum, void *stream)
{
    (void)stream;
    kern_batchnorm_forward(out, mean, invstd, running_mean, running_var, inp, weight, bias, N, C, H, W, momentum);
    return 0;
}

static int c_batchnorm_backward(float *dinp, float *dweight, float *dbias, const float *dout, const float *inp, const float *mean, const float *invstd, const float *weight, int N, int C, int H, int W, void *stream)
{
    (void)stream;
    kern_batchnorm_backward(dinp, dweight, dbias, dout, inp, mean, invstd, weight, N, C, H, W);
    return 0;
}

static int c_relu_forward(float *out, const float *inp, size_t n, void *stream)
{
    (void)stream;
    kern_relu_forward(out, inp, n);
    return 0;
}

static int c_relu_backward(float *dinp, const float *out, const float *dout, size_t n, void *stream)
{
    (void)stream;
    kern_relu_backward(dinp, out, dout, n);
    return 0;
}

static int c_add_forward(float *out, const float *a, const float *b, size_t n, void *stream)
{
    (void)stream;
    kern_add_forward(out, a, b, n);
    return 0;
}

static int c_add_backward(float *da, float *db, const float *dout, size_t n, void *stream)
{
    (void)stream;
    kern_add_backward(da, db, dout, n);
    return 0;
}

static int c_maxpool2d_forward(float *out, int *argmax, const float *inp, int N, int C, int H, int W, int K, int stride, int pad, void *stream)
{
    (void)stream;
    kern_maxpool2d_forward(out, argmax, inp, N, C, H, W, K, stride, pad);
    return 0;
}

static int c_maxpool2d_backward(float *dinp, const float *dout, const int *argmax, int N, int C, int H, int W, int K, int stride, int pad, void *stream)
{
    (void)stream;
    kern_maxpool2d_backward(dinp, dout, argmax, N, C, H, W, K, stride, pad);
    return 0;
}

static int c_avgpool_global_forward(float *out, const float *inp, int N, int C, int H, int W, void *stream)
{
    (void)stream;
    kern_avgpool_global_forward(out, inp, N, C, H, W);
    return 0;
}

static int c_avgpool_global_backward(float *dinp, const float *dout, int N, int C, int H, int W, void *stream)
{
    (void)stream;
    kern_avgpool_global_backward(dinp, dout, N, C, H, W);
    return 0;
}

static const ExecKernels CPU = {
    "cpu", c_encoder_forward, c_encoder_backward, c_layernorm_forward, c_layernorm_backward, c_matmul_forward,
    c_matmul_backward, c_attention_forward, c_attention_backward, c_gelu_forward, c_gelu_backward,
    c_residual_forward, c_ce_forward, c_ce_backward, c_lmhead_forward, c_lmhead_backward, c_adamw, c_add,
    c_conv2d_forward, c_conv2d_backward, c_bn_stats, c_bn_combine_stats, c_bn_update_running, c_bn_forward_apply, c_bn_forward_eval, c_bn_backward_reduce, c_bn_backward_apply, c_batchnorm_forward, c_batchnorm_backward, c_relu_forward, c_relu_backward, c_add_forward, c_add_backward, c_maxpool2d_forward, c_maxpool2d_backward, c_avgpool_global_forward, c_avgpool_global_backward,
};

/* ---- CUDA: the launchers themselves ---- */

static int g_add(float *dst, const float *src, size_t N, void *stream)
{
    return kern_residual_forward_cuda(dst, dst, src, N, stream);
}

static const ExecKernels CUDA = {
    "cuda",
    kern_encoder_forward_cuda,
    kern_encoder_backward_cuda,
    kern_layernorm_forward_cuda,
    kern_layernorm_backward_cuda,
    kern_matmul_forward_cuda,
    kern_matmul_backward_cuda,
    kern_attention_forward_cuda,
    kern_attention_backward_cuda,
    kern_gelu_forward_cuda,
    kern_gelu_backward_cuda,
    kern_residual_forward_cuda,
    kern_crossentropy_softmax_forward_cuda,
    kern_crossentropy_softmax_backward_cuda,
    kern_lmhead_ce_forward_cuda,
    kern_lmhead_ce_backward_cuda,
    kern_adamw_update_cuda,
    g_add,
    kern_conv2d_forward_cuda,
    kern_conv2d_backward_cuda,
    kern_bn_stats_cuda,
    kern_bn_combine_stats_cuda,
    kern_bn_update_running_cuda,
    kern_bn_forward_apply_cuda,
    kern_bn_forward_eval_cuda,
    kern_bn_backward_reduce_cuda,
    kern_bn_backward_apply_cuda,
    kern_batchnorm_forward_cuda,
    kern_batchnorm_backward_cuda,
    kern_relu_forward_cuda,
    kern_relu_backward_cuda,
    kern_add_forward_cuda,
    kern_add_backward_cuda,
    kern_maxpool2d_forward_cuda,
    kern_maxpool2d_backward_cuda,
    kern_avgpool_global_forward_cuda,
    kern_avgpool_global_backward_cuda,
};

const ExecKernels *exec_kernels(DeviceKind kind) { return kind == DEVICE_CUDA ? &CUDA : &CPU; }
