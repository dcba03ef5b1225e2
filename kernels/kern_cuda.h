/* kern_cuda.h — CUDA twins of the fp32 CPU kernels in kern_ops.h (GPT-2 forward, backward, AdamW).
 *
 * Every launcher kern_<op>_cuda has the signature of its CPU twin kern_<op> plus a trailing
 * `stream` (a cudaStream_t passed as void *, NULL for the default stream), and exactly the same
 * contract: the same shapes, forward kernels fully WRITE their outputs, backward kernels
 * ACCUMULATE (+=) into gradients (attention's dpreatt/datt scratch is fully written), AdamW
 * updates params[offset .. offset+length) with shard-sized m and v. All pointers are DEVICE
 * pointers (cudaMalloc'd); scalars are passed by value. Launches are asynchronous on `stream`.
 *
 * Determinism: no float atomics anywhere; every sum runs in a fixed order, so results are
 * reproducible run to run on the same GPU. They are not bitwise equal to the CPU twin where the
 * summation order or fused multiply-adds differ (tolerances: docs/gpu-kernels.md).
 *
 * Matrix products go through one cuBLAS handle, created by kern_cuda_init() on the current
 * device (call cudaSetDevice first) with CUBLAS_DEFAULT_MATH, which never uses TF32 for sgemm.
 * The handle is process-wide state: launchers are not meant to be called from several host
 * threads at once.
 *
 * Return values: 0 on success, -1 on failure, after printing "rank R: file:line: call failed:
 * message" to stderr (R: the launcher's rank, exec_launch.h, else 0). A failure reported by a
 * launcher is a launch or configuration error; faults inside a kernel surface at the caller's
 * next synchronization, as usual with CUDA.
 *
 * Plain C header: no CUDA types, usable from C11. When memplan is built without CUDA
 * (NO_CUDA=1), kern_cuda_stub.c provides the same symbols: kern_cuda_device_count() returns 0
 * and everything else fails with a message, so callers need no #ifdef. */
#ifndef KERN_CUDA_H
#define KERN_CUDA_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ---- set-up ---- */
/* Number of usable CUDA devices; 0 when there is no device, no driver, or the driver is too old
 * for the runtime ("CUDA driver version is insufficient"), or when built without CUDA: silently
 * for those, with one line on stderr for any other CUDA error. Clears the runtime's last error. */
int kern_cuda_device_count(void);
/* Creates the cuBLAS handle on the current device (idempotent). Needed by the matmul launchers;
 * the others work without it. Returns 0 or -1. */
int kern_cuda_init(void);
/* Destroys the cuBLAS handle (no-op if none). */
void kern_cuda_shutdown(void);
/* The cuBLAS handle kern_cuda_init created (a cublasHandle_t), or NULL: every kernel module of
 * kernels/ shares this one handle and its workspace. */
void *kern_cuda_cublas(void);

/* ---- encoder: token + position embeddings ---- */
/* out (B,T,C) = wte[inp[b,t]] (V,C) + wpe[t] (maxT,C); inp (B,T) int32 on the device. */
int kern_encoder_forward_cuda(float *out, const int *inp, const float *wte, const float *wpe,
                              int B, int T, int C, void *stream);
/* dwte (V,C) += scatter of dout rows by token; dwpe (maxT,C) rows 0..T-1 += Σ_b dout[b,t].
 * Sums run in (b,t) order as on the CPU: bitwise equal to the CPU twin. Cost O((B·T)² + B·T·C):
 * fine for training shapes (B·T up to ~64K). */
int kern_encoder_backward_cuda(float *dwte, float *dwpe, const float *dout, const int *inp,
                               int B, int T, int C, void *stream);

/* ---- LayerNorm over the last dimension, eps = 1e-5 ---- */
int kern_layernorm_forward_cuda(float *out, float *mean, float *rstd, const float *inp,
                                const float *weight, const float *bias, int B, int T, int C,
                                void *stream);
/* dinp (B,T,C) +=, dweight (C) +=, dbias (C) +=. */
int kern_layernorm_backward_cuda(float *dinp, float *dweight, float *dbias, const float *dout,
                                 const float *inp, const float *weight, const float *mean,
                                 const float *rstd, int B, int T, int C, void *stream);

/* ---- linear layer through cublasSgemm (needs kern_cuda_init) ---- */
/* out (B*T,OC) = inp (B*T,C) · weightᵀ + bias; weight (OC,C); bias (OC) or NULL. */
int kern_matmul_forward_cuda(float *out, const float *inp, const float *weight, const float *bias,
                             int B, int T, int C, int OC, void *stream);
/* dinp (B*T,C) += dout · weight; dweight (OC,C) += doutᵀ · inp; dbias (OC) += Σ_rows dout.
 * Any of dinp, dweight, dbias may be NULL to skip that gradient. */
int kern_matmul_backward_cuda(float *dinp, float *dweight, float *dbias, const float *dout,
                              const float *inp, const float *weight, int B, int T, int C, int OC,
                              void *stream);

/* ---- causal multi-head self-attention ---- */
/* inp (B,T,3C) = q, k, v; saves preatt and att (B,NH,T,T), masked entries written as 0;
 * out (B,T,C). C must be divisible by NH (else -1). */
int kern_attention_forward_cuda(float *out, float *preatt, float *att, const float *inp,
                                int B, int T, int C, int NH, void *stream);
/* dinp (B,T,3C) +=; dpreatt and datt (B,NH,T,T) are scratch, fully written. */
int kern_attention_backward_cuda(float *dinp, float *dpreatt, float *datt, const float *dout,
                                 const float *inp, const float *att, int B, int T, int C, int NH,
                                 void *stream);

/* ---- GELU, tanh approximation ---- */
int kern_gelu_forward_cuda(float *out, const float *inp, size_t N, void *stream);
int kern_gelu_backward_cuda(float *dinp, const float *inp, const float *dout, size_t N,
                            void *stream);   /* dinp += */

/* ---- residual add ---- */
int kern_residual_forward_cuda(float *out, const float *inp1, const float *inp2, size_t N,
                               void *stream);
int kern_residual_backward_cuda(float *dinp1, float *dinp2, const float *dout, size_t N,
                                void *stream);   /* dinp1 += dout; dinp2 += dout */

/* ---- fused softmax + cross-entropy ---- */
/* probs (B,T,V), losses (B,T) in nats; targets (B,T) int32 on the device. */
int kern_crossentropy_softmax_forward_cuda(float *probs, float *losses, const float *logits,
                                           const int *targets, int B, int T, int V, void *stream);
/* dlogits (B,T,V) += (probs - onehot(targets)) · dloss. */
int kern_crossentropy_softmax_backward_cuda(float *dlogits, const float *probs, const int *targets,
                                            float dloss, int B, int T, int V, void *stream);

/* ---- tied LM head + softmax cross-entropy, fused (needs kern_cuda_init) ---- */
/* logits (B*T,V) = inp · weightᵀ (cuBLAS), lse (B*T) = log Σ exp(logits row), losses (B*T) =
 * lse - logits[target]. No vocabulary chunks on the GPU (they are for the CPU's caches): the
 * same tensors, so the same memory as the CPU twin. */
int kern_lmhead_ce_forward_cuda(float *logits, float *lse, float *losses, const float *inp,
                                const float *weight, const int *targets, int B, int T, int C, int V,
                                void *stream);
/* logits become dlogits = (softmax - onehot)·dloss in place; dinp += dlogits · weight;
 * dweight += dlogitsᵀ · inp (either may be NULL). */
int kern_lmhead_ce_backward_cuda(float *dinp, float *dweight, float *logits, const float *lse,
                                 const int *targets, const float *inp, const float *weight, float dloss,
                                 int B, int T, int C, int V, void *stream);

/* ---- AdamW: params[offset .. offset+length) and grads likewise; m, v hold the shard only ---- */
int kern_adamw_update_cuda(float *params, const float *grads, float *m, float *v, size_t offset,
                           size_t length, float lr, float beta1, float beta2, float eps,
                           float weight_decay, int t, void *stream);

#ifdef __cplusplus
}
#endif

#endif
