/* plan_activ.h — activation memory: the bytes each layer saves in forward for backward, per
 * micro-batch, following an implementation's saved-tensor layout (eager PyTorch as Hugging
 * Face models run it, or memplan's own engine). docs/formulas.md derives every term. */
#ifndef PLAN_ACTIV_H
#define PLAN_ACTIV_H

#include <stdint.h>
#include "plan_model.h"
#include "plan_train.h"

/* Resolved per-step inputs of the activation model. */
typedef struct {
    int64_t b, s;            /* micro-batch, sequence */
    double dropout;          /* resolved */
} ActInputs;

/* The recompute policy: 1 when layer i is a transformer block that --act-ckpt checkpoints (it
   keeps its input in forward and recomputes its activations in backward). Every rule that
   depends on checkpointing asks this, so a policy is one definition here. */
int plan_act_checkpointed(const ModelSpec *m, const TrainSpec *t, int i);
/* NULL when t's checkpointing applies to m, else why not (a clause): op and
   selective are modelled for dense decoders in PyTorch's layout. */
const char *plan_act_ckpt_unsupported(const ModelSpec *m, const TrainSpec *t);
/* 1 when layer i is a transformer block whose core attention alone is checkpointed (--act-ckpt
   selective). */
int plan_act_core_recomputed(const ModelSpec *m, const TrainSpec *t, int i);
/* A block's projections in forward order: in and out features per token, and whether a bias
   is added in the GEMM (aten.addmm) rather than aten.mm. Latent attention's are q (or q_a, q_b),
   kv_a, kv_b and o; a MoE block's MLP is its router and its shared experts' (the routed experts
   run grouped_mm, not a projection). */
#define PLAN_MAX_PROJ 12
typedef struct {
    double in, out;
    int addmm;
} PlanProj;
int plan_act_block_projs(const ModelSpec *m, const LayerSpec *l, PlanProj p[PLAN_MAX_PROJ]);
/* 1 when --act-ckpt op saves the output of block projection k (torchtitan's policy). */
int plan_act_proj_saved(const ModelSpec *m, const LayerSpec *l, int k);
/* 1 when --act-ckpt op saves the core attention's output (its kernel is on the save list). */
int plan_act_op_core_saved(const TrainSpec *t, double dropout);
/* Bytes layer i saves in forward (kept until its backward), for b samples of length s. */
double plan_act_layer_bytes(const ModelSpec *m, int i, const TrainSpec *t, const ActInputs *in);
/* Bytes layer i keeps from forward to backward under t's checkpointing: all it saves (none, a
   block every:N leaves alone), its input (full), its input and the saved ops' outputs (op), or
   all but the core attention's tensors, its inputs instead (selective). */
double plan_act_ckpt_bytes(const ModelSpec *m, int i, const TrainSpec *t, const ActInputs *in);
/* The tensors plan_act_ckpt_bytes counts for layer i, each one's bytes in the order forward
   makes them, into out[0..max); how many (at most PLAN_ACT_MAX_TENSORS). What it counts without
   listing (a MoE block's routed experts, LoRA's adapters and frozen inputs, a CNN layer, a
   measured layer, the causal mask a checkpointed block keeps) is the difference to
   plan_act_ckpt_bytes, for the caller to treat as one more tensor (plan_step_alloc.c). */
#define PLAN_ACT_MAX_TENSORS 128   /* saved tensors and the forward temporaries noted between them */
int plan_act_ckpt_tensors(const ModelSpec *m, int i, const TrainSpec *t, const ActInputs *in, double *out, int max);
/* The same tensors with the forward's op temporaries between them (outputs no backward saves,
   freed within the forward: gelu_new's x^3, ...): out[k] bytes, kind[k] PLAN_ACT_SAVED (a saved
   tensor made), PLAN_ACT_TEMP_MAKE (a temporary made) or PLAN_ACT_TEMP_FREE (the oldest live
   temporary freed), in op order. kind NULL: the saved tensors only (plan_act_ckpt_tensors). */
enum { PLAN_ACT_SAVED = 0, PLAN_ACT_TEMP_MAKE, PLAN_ACT_TEMP_FREE };
int plan_act_ckpt_ops(const ModelSpec *m, int i, const TrainSpec *t, const ActInputs *in, double *out, int *kind,
                      int max);
/* Layer i's forward working set: the most bytes its saved tensors made so far and its live
   temporaries hold at once, in that order, above all its saved tensors (0 where the temporaries
   are freed before the layer's later tensors outgrow them). */
double plan_act_fwd_temp_peak(const ModelSpec *m, int i, const TrainSpec *t, const ActInputs *in);
/* The attention masks a decoder's forward makes before its first block and frees when the base
   model's forward returns (transformers masking_utils.py create_causal_mask: eager attention's
   additive (b, 1, s, s) mask at the embeddings' dtype; a sliding window shorter than the
   sequence, SDPA's boolean one), one per kind, those no checkpoint keeps (those are saved
   tensors: plan_act_ckpt_bytes); bytes, *first the first block handed one (-1: none). */
double plan_act_forward_masks(const ModelSpec *m, const TrainSpec *t, const ActInputs *in, int *first);
/* Extra bytes alive at the start of backward (loss gradient buffers). */
double plan_act_loss_transient(const ModelSpec *m, const TrainSpec *t, const ActInputs *in);
/* The logits the model returns, b·s·V in the activations' dtype (0 without an LM head's loss:
   parameter counts only, a CNN, a base class, memplan's engine). */
double plan_act_logits_bytes(const ModelSpec *m, const TrainSpec *t, const ActInputs *in);
/* The logits the common loop's `outputs` keeps between forwards (0 under --loop trainer). */
double plan_act_loop_held(const ModelSpec *m, const TrainSpec *t, const ActInputs *in);
/* Bytes alive only during the loss's forward (logits, their fp32 upcast). */
double plan_act_loss_forward_transient(const ModelSpec *m, const TrainSpec *t, const ActInputs *in);
/* Of it, the fp32 upcast of the logits below fp32 (b·s·V·4; 0 at fp32): a tensor of its own. */
double plan_act_loss_upcast(const ModelSpec *m, const TrainSpec *t, const ActInputs *in);
/* Extra bytes alive at the end of layer i's backward, beyond the saved activations still held
   (activation gradients; memplan's engine: its scratch). A PyTorch block's own saved
   activations are freed by then. */
double plan_act_backward_workspace(const ModelSpec *m, int i, const TrainSpec *t, const ActInputs *in);
/* How many f-wide gradients block i's MLP backward holds at once: 2 (fc2's input gradient, the
   activation's two products, the first freed), 3 where a frozen output projection saved no input
   its gradient could replace. */
int plan_act_mlp_bwd_grads(const ModelSpec *m, int i, const TrainSpec *t);
/* Extra bytes alive at the largest moment of a PyTorch block's backward (its MLP's; Gemma's and
   OLMo 2's post-feedforward norm's; eager attention's softmax backward at long sequences),
   beyond its saved activations, all counted as still held: that part's working set (the MLP's
   two f-wide gradients, ...), the residual stream's gradient, and under checkpointing the
   recomputed activations. 0 for other layers. */
double plan_act_block_backward_bytes(const ModelSpec *m, int i, const TrainSpec *t, const ActInputs *in);
/* Elements of block i's parameters whose backward has run at the moment
   plan_act_block_backward_bytes describes (their gradients exist, their autocast casts are
   freed): the MLP's output projection (plan_act_block_mlp_out_elems; its bias's gradient too,
   not its cast) when the MLP's backward holds the most, a post-norm's weight when that norm's does, all but q, k, v and the input
   norm when eager attention's does. */
double plan_act_block_bwd_done_elems(const ModelSpec *m, int i, const TrainSpec *t, const ActInputs *in);
/* Elements of block i's MLP parameters whose gradients exist during its MLP backward: the
   output projection (fc2 / down_proj); in a MoE block, at the moment planned, the routed experts'
   down_proj (a whole 3-D tensor from grouped_mm's backward) once it has run, and the shared
   expert's three or Qwen2-MoE's gate where their backward comes first. */
double plan_act_block_mlp_out_elems(const ModelSpec *m, int i, const TrainSpec *t, const ActInputs *in);
/* Elements of block i's parameters whose autocast copies are freed by the moment
   plan_act_block_backward_bytes describes: a dense block's plan_act_block_bwd_done_elems less
   the output projection's bias (its cast is no saved tensor of that projection's backward); a MoE
   block's at moe_backward's moment (its routed experts run uncast under grouped_mm:
   plan_act_uncast_params). */
double plan_act_block_bwd_cast_elems(const ModelSpec *m, int i, const TrainSpec *t, const ActInputs *in);
/* Bytes per element a dropout keeps for backward, for an input of in_bytes per element:
   1 (CUDA's fused kernel, a bool mask) or in_bytes (CPU: a noise tensor, --autocast cpu). */
double plan_act_dropout_bytes(const TrainSpec *t, double dropout, double in_bytes);
/* 1 when SDPA runs its fp32 math kernel: CPU kernels (--autocast cpu) with dropout > 0. */
int plan_act_sdpa_math(const TrainSpec *t, double dropout);
/* Per-token block coefficients (bytes = s*lin + s*s*quad per sample) of a dense block, for
   docs and tests. */
void plan_act_block_coeffs(const ModelSpec *m, const TrainSpec *t, double dropout, int cross,
                           double *lin, double *quad);
/* 1 for a LLaMA-style decoder (RMSNorm): its blocks save what transformers' LLaMA family saves. */
int plan_act_llama_style(const ModelSpec *m);
/* Per token, a dense gated or plain MLP of width f (its first linear's input counted mlp_in times:
   2 when autocast casts it for both of LLaMA's gate and up): what it saves (the MoE dimension's
   shared experts are such MLPs, plan_dim_moe.c). */
double plan_act_mlp_bytes(const ModelSpec *m, const TrainSpec *t, double f, double mlp_in);
/* n saved tensors of `each` bytes per token, noted for the allocation listing when
   plan_act_ckpt_tensors listens (the dimensions' terms, plan_dim_moe.c); returns n * each. */
double plan_act_note(double n, double each);
/* plan_act_mlp_bytes without noting its tensors (a MoE block's dense MLP, which its experts
   replace: plan_act_moe_delta). */
double plan_act_mlp_bytes_unnoted(const ModelSpec *m, const TrainSpec *t, double f, double mlp_in);

#endif
