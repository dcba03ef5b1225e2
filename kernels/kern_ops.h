/* kern_ops.h — fp32 CPU kernels of the GPT-2 training step (forward, backward, AdamW).
 *
 * These are the reference contracts: the CUDA twins implement exactly the same signatures and
 * semantics, and GPU tests compare against these with a stated tolerance. Rules every kernel
 * follows (in the style of karpathy/llm.c's train_gpt2.c):
 *   - plain pointers and explicit sizes; no allocation inside a kernel;
 *   - forward kernels fully WRITE (overwrite) every output element;
 *   - backward kernels ACCUMULATE (+=) into parameter gradients and into input gradients, so the
 *     caller zeroes those buffers first (or accumulates over micro-batches on purpose). The only
 *     exception is per-op scratch that is not a gradient of anything the caller keeps
 *     (attention's dpreatt/datt), which is fully written;
 *   - deterministic: no threads of our own; matrix products go through cblas_sgemm, whose result
 *     is reproducible run to run with the same OpenBLAS thread count.
 * Shapes are given as (dim, ...) in row-major order, all tensors float32 unless said otherwise.
 * B = batch, T = sequence length, C = channels (d_model), OC = output channels, NH = heads,
 * V = vocabulary size. Tokens are int32 in [0, V). */
#ifndef KERN_OPS_H
#define KERN_OPS_H

#include <stddef.h>

/* ---- encoder: token + position embeddings ---- */
/* out (B,T,C) = wte[inp[b,t]] (V,C) + wpe[t] (maxT,C); inp (B,T) int32. */
void kern_encoder_forward(float *out, const int *inp, const float *wte, const float *wpe,
                          int B, int T, int C);
/* dwte (V,C) += scatter of dout rows by token; dwpe (maxT,C) rows 0..T-1 += Σ_b dout[b,t]. */
void kern_encoder_backward(float *dwte, float *dwpe, const float *dout, const int *inp,
                           int B, int T, int C);

/* ---- LayerNorm over the last dimension, eps = 1e-5 (as torch.nn.LayerNorm / GPT-2) ---- */
/* out (B,T,C) = (inp - mean) * rstd * weight (C) + bias (C); saves mean (B,T) and
 * rstd (B,T) = 1 / sqrt(var + eps), var the biased variance. */
void kern_layernorm_forward(float *out, float *mean, float *rstd, const float *inp,
                            const float *weight, const float *bias, int B, int T, int C);
/* dinp (B,T,C) +=, dweight (C) +=, dbias (C) += from dout (B,T,C), using the saved mean and
 * rstd (B,T) and the forward input inp (B,T,C). */
void kern_layernorm_backward(float *dinp, float *dweight, float *dbias, const float *dout,
                             const float *inp, const float *weight, const float *mean,
                             const float *rstd, int B, int T, int C);

/* ---- linear layer (torch.nn.Linear), through cblas_sgemm ---- */
/* out (B*T,OC) = inp (B*T,C) · weightᵀ + bias; weight (OC,C) as in PyTorch; bias (OC) or NULL. */
void kern_matmul_forward(float *out, const float *inp, const float *weight, const float *bias,
                         int B, int T, int C, int OC);
/* dinp (B*T,C) += dout (B*T,OC) · weight;  dweight (OC,C) += doutᵀ · inp;
 * dbias (OC) += Σ_rows dout (summed in row order). Any of dinp, dweight, dbias may be NULL to
 * skip that gradient. */
void kern_matmul_backward(float *dinp, float *dweight, float *dbias, const float *dout,
                          const float *inp, const float *weight, int B, int T, int C, int OC);

/* ---- causal multi-head self-attention (no projections: those are matmuls) ---- */
/* inp (B,T,3C) holds q, k, v for each token: q = inp[..., 0:C], k = [C:2C], v = [2C:3C]; head h
 * uses channels h*hs .. (h+1)*hs-1 of each, hs = C/NH. Saves preatt (B,NH,T,T) = q·k / sqrt(hs)
 * and att (B,NH,T,T) = softmax over t2 <= t; masked entries (t2 > t) are written as 0 in both.
 * out (B,T,C) = att · v, heads concatenated. C must be divisible by NH. */
void kern_attention_forward(float *out, float *preatt, float *att, const float *inp,
                            int B, int T, int C, int NH);
/* dinp (B,T,3C) += from dout (B,T,C), using the forward input inp and the saved att.
 * dpreatt and datt (B,NH,T,T each) are scratch, fully written (not accumulated). */
void kern_attention_backward(float *dinp, float *dpreatt, float *datt, const float *dout,
                             const float *inp, const float *att, int B, int T, int C, int NH);

/* ---- GELU, tanh approximation (GPT-2's gelu_new): 0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³))) ---- */
void kern_gelu_forward(float *out, const float *inp, size_t N);             /* (N) -> (N) */
void kern_gelu_backward(float *dinp, const float *inp, const float *dout, size_t N);  /* dinp += */

/* ---- residual add ---- */
void kern_residual_forward(float *out, const float *inp1, const float *inp2, size_t N);
/* dinp1 += dout; dinp2 += dout (N elements each). */
void kern_residual_backward(float *dinp1, float *dinp2, const float *dout, size_t N);

/* ---- fused softmax + cross-entropy ---- */
/* probs (B,T,V) = softmax(logits (B,T,V)) over V (max-subtracted); losses (B,T) =
 * -log probs[b,t,targets[b,t]], in nats; targets (B,T) int32 in [0, V). */
void kern_crossentropy_softmax_forward(float *probs, float *losses, const float *logits,
                                       const int *targets, int B, int T, int V);
/* dlogits (B,T,V) += (probs - onehot(targets)) · dloss, where dloss is the gradient of the
 * objective with respect to each token's loss (1/(B·T) for the mean loss). */
void kern_crossentropy_softmax_backward(float *dlogits, const float *probs, const int *targets,
                                        float dloss, int B, int T, int V);

/* ---- tied LM head + softmax cross-entropy, fused (GPT-2's head and loss) ----
 * The only vocabulary-sized tensor is the logits: no probabilities are kept and the logits'
 * gradient is written over the logits in backward. */
/* logits (B*T,V) = inp (B*T,C) · weightᵀ, weight (V,C) (the tied wte); lse (B*T) = log Σ_v
 * exp(logits[r,v]) (max-subtracted); losses (B*T) = lse - logits[r, targets[r]], in nats. */
void kern_lmhead_ce_forward(float *logits, float *lse, float *losses, const float *inp,
                            const float *weight, const int *targets, int B, int T, int C, int V);
/* Consumes the forward's logits: overwrites them with dlogits = (softmax - onehot(targets))·dloss
 * (dloss as in kern_crossentropy_softmax_backward), then dinp (B*T,C) += dlogits · weight and
 * dweight (V,C) += dlogitsᵀ · inp. dinp or dweight may be NULL to skip that gradient. */
void kern_lmhead_ce_backward(float *dinp, float *dweight, float *logits, const float *lse,
                             const int *targets, const float *inp, const float *weight, float dloss,
                             int B, int T, int C, int V);

/* ---- AdamW (torch.optim.AdamW semantics) ---- */
/* Updates elements offset .. offset+length-1 of the flat arrays params and grads. The state m
 * and v holds the shard only: m[i], v[i] belong to params[offset + i] (so a sharded optimizer
 * keeps length-sized state; pass offset 0 to update arrays that are themselves a shard).
 * Step t >= 1 (1-based, for bias correction). For each element:
 *   p -= lr·weight_decay·p                     (decoupled weight decay, applied first)
 *   m  = beta1·m + (1-beta1)·g;  v = beta2·v + (1-beta2)·g²
 *   p -= lr · (m / (1-beta1^t)) / (sqrt(v / (1-beta2^t)) + eps) */
void kern_adamw_update(float *params, const float *grads, float *m, float *v, size_t offset,
                       size_t length, float lr, float beta1, float beta2, float eps,
                       float weight_decay, int t);

#endif
