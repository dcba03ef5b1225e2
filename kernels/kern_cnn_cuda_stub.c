/* kern_cnn_cuda_stub.c — kern_cnn_cuda.h when memplan is built without CUDA (NO_CUDA=1, or no
 * nvcc): the same symbols, so callers need no #ifdef. Every launcher fails with one sentence saying
 * why (kern_cuda_device_count() in kern_cuda_stub.c answers 0 first). With CUDA, kern_cnn_cuda.cu
 * defines them and this file is empty. */
#include "kern_cnn_cuda.h"

#ifndef MEMPLAN_CUDA
#define MEMPLAN_CUDA 0
#endif

#if !MEMPLAN_CUDA
#include <stdio.h>

static int no_cuda(const char *who)
{
    fprintf(stderr, "%s: memplan was built without CUDA (NO_CUDA=1 or nvcc not found); "
                    "rebuild with the CUDA toolkit to run GPU kernels\n", who);
    return -1;
}

int kern_conv2d_forward_cuda(float *out, const float *inp, const float *weight, float *col_scratch,
                             int N, int C, int H, int W, int OC, int K, int stride, int pad,
                             void *stream)
{ return no_cuda(__func__); }
int kern_conv2d_backward_cuda(float *dinp, float *dweight, float *col_scratch, const float *dout,
                              const float *inp, const float *weight, int N, int C, int H, int W,
                              int OC, int K, int stride, int pad, void *stream)
{ return no_cuda(__func__); }
int kern_bn_stats_cuda(float *stats, const float *inp, int N, int C, int H, int W, void *stream)
{ return no_cuda(__func__); }
int kern_bn_combine_stats_cuda(float *mean, float *invstd, float *var_unbiased,
                               const float *all_stats, int R, int C, void *stream)
{ return no_cuda(__func__); }
int kern_bn_update_running_cuda(float *running_mean, float *running_var, const float *mean,
                                const float *var_unbiased, int C, float momentum, void *stream)
{ return no_cuda(__func__); }
int kern_bn_forward_apply_cuda(float *out, const float *inp, const float *mean, const float *invstd,
                               const float *weight, const float *bias, int N, int C, int H, int W,
                               void *stream)
{ return no_cuda(__func__); }
int kern_bn_forward_eval_cuda(float *out, const float *inp, const float *running_mean,
                              const float *running_var, const float *weight, const float *bias,
                              int N, int C, int H, int W, void *stream)
{ return no_cuda(__func__); }
int kern_bn_backward_reduce_cuda(float *sum_dy, float *sum_dy_xmu, float *dweight, float *dbias,
                                 const float *dout, const float *inp, const float *mean,
                                 const float *invstd, int N, int C, int H, int W, void *stream)
{ return no_cuda(__func__); }
int kern_bn_backward_apply_cuda(float *dinp, const float *dout, const float *inp, const float *mean,
                                const float *invstd, const float *weight, const float *sum_dy,
                                const float *sum_dy_xmu, long long total_count,
                                int N, int C, int H, int W, void *stream)
{ return no_cuda(__func__); }
int kern_batchnorm_forward_cuda(float *out, float *mean, float *invstd, float *running_mean,
                                float *running_var, const float *inp, const float *weight,
                                const float *bias, int N, int C, int H, int W, float momentum,
                                void *stream)
{ return no_cuda(__func__); }
int kern_batchnorm_backward_cuda(float *dinp, float *dweight, float *dbias, const float *dout,
                                 const float *inp, const float *mean, const float *invstd,
                                 const float *weight, int N, int C, int H, int W, void *stream)
{ return no_cuda(__func__); }
int kern_relu_forward_cuda(float *out, const float *inp, size_t n, void *stream)
{ return no_cuda(__func__); }
int kern_relu_backward_cuda(float *dinp, const float *out, const float *dout, size_t n,
                            void *stream)
{ return no_cuda(__func__); }
int kern_add_forward_cuda(float *out, const float *a, const float *b, size_t n, void *stream)
{ return no_cuda(__func__); }
int kern_add_backward_cuda(float *da, float *db, const float *dout, size_t n,
                           void *stream)
{ return no_cuda(__func__); }
int kern_maxpool2d_forward_cuda(float *out, int *argmax, const float *inp, int N, int C, int H,
                                int W, int K, int stride, int pad, void *stream)
{ return no_cuda(__func__); }
int kern_maxpool2d_backward_cuda(float *dinp, const float *dout, const int *argmax, int N, int C,
                                 int H, int W, int K, int stride, int pad, void *stream)
{ return no_cuda(__func__); }
int kern_avgpool_global_forward_cuda(float *out, const float *inp, int N, int C, int H, int W,
                                     void *stream)
{ return no_cuda(__func__); }
int kern_avgpool_global_backward_cuda(float *dinp, const float *dout, int N, int C, int H, int W,
                                      void *stream)
{ return no_cuda(__func__); }
#else
typedef int kern_cnn_cuda_stub_unused;   /* ISO C wants a non-empty translation unit */
#endif
