/* kern_cuda_stub.c — kern_cuda.h when memplan is built without CUDA (NO_CUDA=1, or no nvcc): the
 * same symbols, so callers need no #ifdef. kern_cuda_device_count() answers 0; every launcher
 * fails with one sentence saying why. With CUDA, kern_cuda.cu defines them and this file is empty. */
#include "kern_cuda.h"

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

int kern_cuda_device_count(void) { return 0; }
int kern_cuda_init(void) { return no_cuda("kern_cuda_init"); }
void kern_cuda_shutdown(void) {}
void *kern_cuda_cublas(void) { return NULL; }

int kern_encoder_forward_cuda(float *out, const int *inp, const float *wte, const float *wpe,
                              int B, int T, int C, void *stream)
{ return no_cuda(__func__); }
int kern_encoder_backward_cuda(float *dwte, float *dwpe, const float *dout, const int *inp,
                               int B, int T, int C, void *stream)
{ return no_cuda(__func__); }
int kern_layernorm_forward_cuda(float *out, float *mean, float *rstd, const float *inp,
                                const float *weight, const float *bias, int B, int T, int C,
                                void *stream)
{ return no_cuda(__func__); }
int kern_layernorm_backward_cuda(float *dinp, float *dweight, float *dbias, const float *dout,
                                 const float *inp, const float *weight, const float *mean,
                                 const float *rstd, int B, int T, int C, void *stream)
{ return no_cuda(__func__); }
int kern_matmul_forward_cuda(float *out, const float *inp, const float *weight, const float *bias,
                             int B, int T, int C, int OC, void *stream)
{ return no_cuda(__func__); }
int kern_matmul_backward_cuda(float *dinp, float *dweight, float *dbias, const float *dout,
                              const float *inp, const float *weight, int B, int T, int C, int OC,
                              void *stream)
{ return no_cuda(__func__); }
int kern_attention_forward_cuda(float *out, float *preatt, float *att, const float *inp,
                                int B, int T, int C, int NH, void *stream)
{ return no_cuda(__func__); }
int kern_attention_backward_cuda(float *dinp, float *dpreatt, float *datt, const float *dout,
                                 const float *inp, const float *att, int B, int T, int C, int NH,
                                 void *stream)
{ return no_cuda(__func__); }
int kern_gelu_forward_cuda(float *out, const float *inp, size_t N, void *stream)
{ return no_cuda(__func__); }
int kern_gelu_backward_cuda(float *dinp, const float *inp, const float *dout, size_t N, void *stream)
{ return no_cuda(__func__); }
int kern_residual_forward_cuda(float *out, const float *inp1, const float *inp2, size_t N, void *stream)
{ return no_cuda(__func__); }
int kern_residual_backward_cuda(float *dinp1, float *dinp2, const float *dout, size_t N, void *stream)
{ return no_cuda(__func__); }
int kern_crossentropy_softmax_forward_cuda(float *probs, float *losses, const float *logits,
                                           const int *targets, int B, int T, int V, void *stream)
{ return no_cuda(__func__); }
int kern_crossentropy_softmax_backward_cuda(float *dlogits, const float *probs, const int *targets,
                                            float dloss, int B, int T, int V, void *stream)
{ return no_cuda(__func__); }
int kern_lmhead_ce_forward_cuda(float *logits, float *lse, float *losses, const float *inp,
                                const float *weight, const int *targets, int B, int T, int C, int V,
                                void *stream)
{ return no_cuda(__func__); }
int kern_lmhead_ce_backward_cuda(float *dinp, float *dweight, float *logits, const float *lse,
                                 const int *targets, const float *inp, const float *weight, float dloss,
                                 int B, int T, int C, int V, void *stream)
{ return no_cuda(__func__); }
int kern_adamw_update_cuda(float *params, const float *grads, float *m, float *v, size_t offset,
                           size_t length, float lr, float beta1, float beta2, float eps,
                           float weight_decay, int t, void *stream)
{ return no_cuda(__func__); }
#else
typedef int kern_cuda_stub_unused;   /* ISO C wants a non-empty translation unit */
#endif
