/* kern_fast.h — fast CPU paths of the GPT-2 kernels, beside their references in kern_ops.h.
 *
 * Each function has exactly the contract of the kern_ops.h function of the same name without
 * "_fast" (shapes, what is written, what is accumulated, masked entries written as 0), so the CPU
 * kernel table (exec_kern.c) can call these while kern_ops.h stays the simple reference that the
 * CUDA twins and tests/test_kern_ops.c compare against. What differs is how, and therefore the
 * rounding (tests/test_kern_ops.c states and checks the tolerances):
 *   - attention forward and backward are five cblas_sgemm per (batch, head), as PyTorch's eager
 *     attention does (q·kᵀ, att·v; backward d·vᵀ, attᵀ·d, dpre·k, dpreᵀ·q), over row blocks of
 *     KERN_FAST_ATT_BLOCK query rows so that the causal upper triangle is mostly skipped;
 *   - exponentials (softmaxes, GELU's tanh) go through kern_fast_expf, a branch-free polynomial
 *     that the compiler vectorizes: relative error <= 2e-7 over [-87, 88] (about 2 ulp);
 *     tanh(u) = 1 - 2 / (exp(2u) + 1) from it has absolute error <= 2e-7;
 *   - reductions (LayerNorm's sums, softmax sums and maxima) run over KERN_FAST_LANES partial
 *     sums, so they vectorize; the order of summation differs from the reference's;
 *   - AdamW, the residual add and the matmul's bias gradient are the reference's per-element
 *     arithmetic in loops the compiler vectorizes (same operations per element, in the same
 *     order: results equal the reference's bit for bit).
 * Deterministic: the same inputs give the same bits, run to run and whatever the sharding (every
 * element's arithmetic depends only on its row or on itself). No threads of our own. The loops are
 * built for the machine's vector width at run time (GCC target_clones: AVX-512, AVX2, SSE2). */
#ifndef KERN_FAST_H
#define KERN_FAST_H

#include <stddef.h>

#define KERN_FAST_ATT_BLOCK 64   /* query rows per attention GEMM block */
#define KERN_FAST_LANES 16       /* partial sums per reduction */
/* the fused LM head works on vocabulary chunks of about this many logits (B·T rows × a slice
   of the vocabulary: 4 MiB), so each chunk is still in cache when it is reduced, turned into its
   gradient and fed to the two gradient GEMMs */
#define KERN_FAST_LMHEAD_CHUNK (1 << 20)

/* exp(x) for x in [-87, 88] (clamped outside: exp(-87) ~ 1.6e-38, exp(88) ~ 1.65e38), relative
 * error <= 2e-7; NaN is not propagated (the clamp maps it to an end). */
float kern_fast_expf(float x);

void kern_layernorm_forward_fast(float *out, float *mean, float *rstd, const float *inp,
                                 const float *weight, const float *bias, int B, int T, int C);
void kern_layernorm_backward_fast(float *dinp, float *dweight, float *dbias, const float *dout,
                                  const float *inp, const float *weight, const float *mean,
                                  const float *rstd, int B, int T, int C);
void kern_attention_forward_fast(float *out, float *preatt, float *att, const float *inp,
                                 int B, int T, int C, int NH);
void kern_attention_backward_fast(float *dinp, float *dpreatt, float *datt, const float *dout,
                                  const float *inp, const float *att, int B, int T, int C, int NH);
/* The matmul's GEMMs as the reference's; dbias's column sums run in the reference's row order,
 * vectorized across columns (equal to the reference bit for bit). */
void kern_matmul_backward_fast(float *dinp, float *dweight, float *dbias, const float *dout,
                               const float *inp, const float *weight, int B, int T, int C, int OC);
/* out = inp1 + inp2, vectorized (equal to the reference bit for bit) */
void kern_residual_forward_fast(float *out, const float *inp1, const float *inp2, size_t N);
void kern_gelu_forward_fast(float *out, const float *inp, size_t N);
void kern_gelu_backward_fast(float *dinp, const float *inp, const float *dout, size_t N);
void kern_crossentropy_softmax_forward_fast(float *probs, float *losses, const float *logits,
                                            const int *targets, int B, int T, int V);
/* The fused LM head (kern_ops.h's kern_lmhead_ce_*), vocabulary chunk by chunk: forward, one
 * GEMM per chunk into its columns of logits, then an online log-sum-exp over the chunk (running
 * maximum and sum per row, rescaled when the maximum grows); backward, per chunk, the chunk's
 * dlogits in place, dinp += dlogits[:, chunk] · weight[chunk] and dweight[chunk] +=
 * dlogits[:, chunk]ᵀ · inp. Each gradient element is the same sum as the reference's; dinp's is
 * accumulated chunk by chunk (a different order of summation). */
void kern_lmhead_ce_forward_fast(float *logits, float *lse, float *losses, const float *inp,
                                 const float *weight, const int *targets, int B, int T, int C, int V);
void kern_lmhead_ce_backward_fast(float *dinp, float *dweight, float *logits, const float *lse,
                                  const int *targets, const float *inp, const float *weight,
                                  float dloss, int B, int T, int C, int V);
void kern_adamw_update_fast(float *params, const float *grads, float *m, float *v, size_t offset,
                            size_t length, float lr, float beta1, float beta2, float eps,
                            float weight_decay, int t);

#endif
