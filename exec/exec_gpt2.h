/* exec_gpt2.h — the GPT-2 model runtime of the executor: parameters in units, forward, backward,
 * AdamW, on the fp32 kernels of kernels/kern_ops.h, with every buffer allocated through the
 * tracked allocator (prof_mem.h) under its category. A data-parallel strategy plugs in through
 * Gpt2Hooks and the unit accessors; the exact activation/workspace layout (which the planner
 * reproduces) is documented at the top of exec_gpt2.c and computed by gpt2_activation_layout.
 *
 * Units. Parameters are organised in n_layer + 2 units, each one contiguous flat fp32 array
 * (so a strategy can all-reduce, reduce-scatter or all-gather a unit as one buffer, or shard it):
 *   unit 0        embeddings: wte (V,C), then wpe (max_seq,C). The LM head is tied to wte.
 *   unit 1..L     block l: ln1w (C), ln1b (C), qkvw (3C,C), qkvb (3C), attprojw (C,C),
 *                 attprojb (C), ln2w (C), ln2b (C), fcw (4C,C), fcb (4C), fcprojw (C,4C), fcprojb (C)
 *   unit L+1      final LayerNorm: lnfw (C), lnfb (C)
 * Weights are (out, in) as in torch.nn.Linear. Parameter counts equal Hugging Face GPT-2.
 *
 * Hook order. Every callback may be NULL; a non-zero return aborts the pass with status -1.
 * Unit 0 brackets each pass, because wte is used at both ends (embedding and LM head):
 *   forward : before_fwd(0) [encoder] before_fwd(1) [block 1] after_fwd(1) ... before_fwd(L)
 *             [block L] after_fwd(L) before_fwd(L+1) [final LN] after_fwd(L+1) [LM head + loss]
 *             after_fwd(0)
 *   backward: before_bwd(0) [loss + LM head] before_bwd(L+1) [final LN] after_bwd(L+1)
 *             before_bwd(L) [block L] after_bwd(L) ... before_bwd(1) [block 1] after_bwd(1)
 *             [encoder] after_bwd(0)
 * A unit's parameters must be present (gpt2_unit_params non-NULL) from its before_ hook to its
 * after_ hook. In backward, a unit's gradient buffer is taken right after its before_bwd hook:
 * if the strategy set none (gpt2_set_unit_grads), the model allocates a zeroed one (MEM_GRADS)
 * and keeps it, as PyTorch creates .grad lazily. after_bwd(u) means "unit u's gradients are
 * complete for this backward" — for unit 0 that is only at the very end (LM head + embedding);
 * it is called after that unit's activations (and, for unit 0, the backward workspace) were
 * freed. Gradients accumulate (+=) across backward calls until gpt2_zero_grad. */
#ifndef EXEC_GPT2_H
#define EXEC_GPT2_H

#include <stddef.h>
#include <stdint.h>
#include "prof_mem.h"

/* ---- configuration ---- */
typedef struct {
    char name[32];
    int n_layer;     /* L, transformer blocks */
    int n_head;      /* NH */
    int d_model;     /* C; divisible by n_head */
    int vocab;       /* V */
    int max_seq;     /* maximum T; rows of wpe */
} Gpt2Config;

/* Presets: "gpt2-tiny" (2 layers, C 64, 4 heads, V 256, T 64), "gpt2-mini" (4, 128, 4, 1024,
 * 128), "gpt2" (12, 768, 12), "gpt2-medium" (24, 1024, 16), "gpt2-large" (36, 1280, 20),
 * "gpt2-xl" (48, 1600, 25); the real ones have V 50257 and T 1024. 0, or -1 for an unknown name. */
int gpt2_config_preset(Gpt2Config *cfg, const char *name);
int gpt2_preset_count(void);
const char *gpt2_preset_name(int i);            /* NULL when out of range */
/* 0 if the shapes are usable; -1 with a sentence in msg otherwise. */
int gpt2_config_check(const Gpt2Config *cfg, char *msg, size_t msglen);
int gpt2_cfg_units(const Gpt2Config *cfg);                     /* n_layer + 2 */
size_t gpt2_cfg_unit_numel(const Gpt2Config *cfg, int unit);   /* elements; 0 if out of range */
int64_t gpt2_cfg_num_params(const Gpt2Config *cfg);            /* Σ units, elements */

/* Fills dst[0 .. length) with elements offset .. offset+length-1 of unit `unit`'s initial
 * parameters: normal(0, 0.02) weights (wte, wpe, qkvw, fcw), normal(0, 0.02/sqrt(2L)) for the
 * residual projections (attprojw, fcprojw), 0 for biases, 1 for LayerNorm weights. Each value
 * depends only on (seed, unit, element index), so any shard of any unit can be initialised
 * alone and the model is the same whatever the number of ranks. -1 if the range is invalid. */
int gpt2_init_unit_range(const Gpt2Config *cfg, int unit, uint64_t seed, size_t offset,
                         size_t length, float *dst);

/* ---- memory layout (what the planner reproduces; see the top of exec_gpt2.c) ---- */
typedef struct {
    size_t block_bytes;      /* one block's 16 saved tensors: 4·B·T·(18C + 4) + 8·B·NH·T² */
    size_t outside_bytes;    /* encoded, lnf, lnf_mean, lnf_rstd, logits, lse, losses:
                                4·B·T·(2C + V + 4) */
    size_t act_bytes;        /* L·block + outside: MEM_ACTIVATIONS at the end of forward */
    size_t ws_bytes;         /* dresidual + one block's gradient scratch, the whole backward
                                (MEM_WORKSPACE; the logits' gradient reuses the logits):
                                4·B·T·10C + 8·B·NH·T² */
    size_t param_bytes;      /* 4 · gpt2_cfg_num_params: full params (= full grads = m = v) */
    size_t peak_first_bytes; /* peak total over the first forward + backward: model-owned
                                params, gradients created lazily in backward, no optimizer
                                state, no hooks allocating */
    size_t peak_bytes;       /* peak total over any later forward + backward, all gradients and
                                full AdamW m, v present: 4·param + act + ws (at backward start) */
} Gpt2MemLayout;
/* -1 if the config or B, T are invalid (T must be <= max_seq). */
int gpt2_activation_layout(const Gpt2Config *cfg, int B, int T, Gpt2MemLayout *out);

/* ---- the model ---- */
typedef struct Gpt2 Gpt2;   /* opaque */

typedef int (*Gpt2UnitHook)(void *ctx, Gpt2 *m, int unit);
typedef struct {
    Gpt2UnitHook before_unit_forward, after_unit_forward;
    Gpt2UnitHook before_unit_backward, after_unit_backward;
    /* 1: the strategy provides every unit's parameters (gpt2_set_unit_params, e.g. gathered
     * just in time by ZeRO-3); gpt2_create then allocates none. 0: the model allocates all. */
    int external_params;
} Gpt2Hooks;

/* hooks may be NULL (no strategy); *hooks is copied, ctx is passed to every callback.
 * Allocates the parameters (MEM_PARAMS, uninitialised) unless hooks->external_params.
 * Returns 0, or -1 with *out NULL: an invalid config (gpt2_config_check gives the sentence) or
 * out of memory (the tracker records the OOM; prof_mem_print_oom reports it). */
int gpt2_create(Gpt2 **out, const Gpt2Config *cfg, MemTracker *mt, const Gpt2Hooks *hooks,
                void *ctx);
/* As gpt2_create, on a device (exec_device.h): NULL or a host device is gpt2_create; a CUDA
 * device keeps every buffer in device memory (mt must be that device's tracker), runs the CUDA
 * kernels (exec_kern.h) on its compute stream, and adds the micro-batch's tokens and targets to
 * the tracked activations (see the top of exec_gpt2.c). Unit pointers (gpt2_unit_params/grads,
 * the set_ functions, AdamW's buffers) are then device pointers; tokens and targets passed to
 * gpt2_forward stay host memory on every device. */
typedef struct Device Device;
int gpt2_create_on(Gpt2 **out, const Gpt2Config *cfg, MemTracker *mt, Device *dev, const Gpt2Hooks *hooks,
                   void *ctx);
void gpt2_destroy(Gpt2 *m);   /* frees everything the model allocated; NULL is ignored */
const Gpt2Config *gpt2_config(const Gpt2 *m);
const char *gpt2_error(const Gpt2 *m);   /* the last error, as a sentence ("" if none) */

/* Units: the model never frees a pointer it did not allocate. Setting a pointer frees the
 * model's own previous buffer (if it owned one) and borrows the new one (NULL = absent now). */
size_t gpt2_unit_numel(const Gpt2 *m, int unit);
float *gpt2_unit_params(const Gpt2 *m, int unit);
float *gpt2_unit_grads(const Gpt2 *m, int unit);
int gpt2_set_unit_params(Gpt2 *m, int unit, float *params);
int gpt2_set_unit_grads(Gpt2 *m, int unit, float *grads);

/* Initialises every unit whose parameters are present (gpt2_init_unit_range over the unit). */
int gpt2_init_params(Gpt2 *m, uint64_t seed);

/* tokens, targets: (B,T) int32 in [0, V), 1 <= T <= max_seq; both must stay valid until
 * gpt2_backward returns (they are read there, not copied). Frees the activations of a previous
 * forward that had no backward. *mean_loss (may be NULL) = mean of the B·T token losses,
 * nats. Returns 0 or -1 (bad input, out of memory, a hook failed; activations are freed). */
int gpt2_forward(Gpt2 *m, const int *tokens, const int *targets, int B, int T, float *mean_loss);
/* Per-token loss gradient used by backward: scale > 0 sets it (1/(B·T·accum) for gradient
 * accumulation over accum micro-batches); 0 restores the default 1/(B·T), the mean loss. */
void gpt2_set_grad_scale(Gpt2 *m, float scale);
/* Accumulates (+=) into every unit's gradients; frees all activations and workspace.
 * Returns 0 or -1 (no forward before it, out of memory, a hook failed). */
int gpt2_backward(Gpt2 *m);
void gpt2_zero_grad(Gpt2 *m);         /* zeroes every present gradient buffer */
void gpt2_free_activations(Gpt2 *m);  /* drops a forward's activations without backward */

/* ---- AdamW (torch.optim.AdamW; weight decay applied to every parameter) ---- */
typedef struct { float lr, beta1, beta2, eps, weight_decay; } Gpt2AdamW;
/* Updates each unit u from its present params and grads, elements offset[u] ..
 * offset[u]+length[u]-1 (offset, length NULL: the whole unit). The state m and v of a unit
 * (MEM_OPTIMIZER, length[u] elements each) is allocated zeroed at the first step, as PyTorch
 * does, and a later step must use the same length. t >= 1 is the 1-based step number. */
int gpt2_adamw_step(Gpt2 *m, const Gpt2AdamW *opt, int t, const size_t *offset,
                    const size_t *length);
/* One unit from explicit buffers (a ZeRO-2/3 shard): params[0 .. length) and grads[0 .. length)
 * are the shard; the unit's m, v state is length elements, as above. */
int gpt2_adamw_step_unit(Gpt2 *m, int unit, float *params, const float *grads, size_t length,
                         const Gpt2AdamW *opt, int t);

/* ---- synthetic data ---- */
/* A seeded token stream with a learnable pattern: each sequence starts at a random token and
 * continues with next = (a·token + b) mod V, except that about 1 token in 16 is replaced by a
 * uniform random one (a, b derived from the seed). Global batch row g of step `step` is one
 * sequence of T+1 tokens, depending only on (seed, step, g); rank r of nranks gets the
 * contiguous rows r·Bl .. (r+1)·Bl-1, Bl = global_batch / nranks, as DistributedSampler does.
 * tokens, targets: (Bl, T); targets are tokens shifted by one. -1 if global_batch is not a
 * positive multiple of nranks, rank is out of range, T < 1 or V < 2. */
int gpt2_synthetic_batch(uint64_t seed, int step, int global_batch, int rank, int nranks,
                         int T, int V, int *tokens, int *targets);

#endif
