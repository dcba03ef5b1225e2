/* exec_model.h — the one interface through which the data-parallel strategies (exec_strategy.h)
 * and the training loops drive a model runtime, whatever the model: GPT-2 (exec_gpt2.h, adapted
 * in exec_gpt2_model.c) and the ResNet-style CNN (exec_cnn.h) implement it. A runtime fills an
 * ExecModelOps table; callers use the exec_model_* functions, never the table directly.
 *
 * Units. Parameters are organised in units, each one contiguous flat fp32 array, so a strategy
 * can all-reduce, reduce-scatter or all-gather a unit as one buffer, or shard it. The model
 * numbers them in forward order; backward completes them in descending order (gradient-ready
 * order: U-1, ..., 1, 0), which is the order DDP's buckets and ZeRO's reduce buckets fill in.
 *
 * Hooks. Every callback may be NULL; a non-zero return aborts the pass with status -1.
 *   forward : before_fwd(0) is the first hook of every forward (DDP broadcasts the buffers
 *             there); then before_fwd(u) [unit u's compute] after_fwd(u) for ascending u.
 *   backward: before_bwd(u) [unit u's compute] after_bwd(u) for descending u.
 * A model may bracket a pass with its root units (exec_model_root_units: GPT-2's embeddings,
 * tied to the LM head, are used at both ends): before_fwd(root) comes first and after_fwd(root)
 * last, and likewise in backward; the root's parameters must stay present all pass long.
 * A unit's parameters must be present (exec_model_unit_params non-NULL) from its before_ hook to
 * its after_ hook. A unit's gradient buffer is taken right after its before_bwd hook: if the
 * strategy set none, the model allocates a zeroed one (MEM_GRADS) and keeps it, as PyTorch
 * creates .grad lazily. after_bwd(u) means "unit u's gradients are complete for this backward".
 * Gradients accumulate (+=) across backward calls until exec_model_zero_grad.
 *
 * Buffers. Non-trainable state that every rank must hold identically (BatchNorm running mean,
 * running variance and batch count, fp32) lives in one flat array, which DDP broadcasts from
 * rank 0 at the start of every forward (broadcast_buffers=True). */
#ifndef EXEC_MODEL_H
#define EXEC_MODEL_H

#include <stddef.h>
#include <stdint.h>

typedef struct ExecModel ExecModel;

typedef int (*ExecUnitHook)(void *ctx, ExecModel *m, int unit);
typedef struct {
    ExecUnitHook before_unit_forward, after_unit_forward;
    ExecUnitHook before_unit_backward, after_unit_backward;
    /* 1: the strategy provides every unit's parameters (exec_model_set_unit_params, e.g.
     * gathered just in time by ZeRO-3); the model then allocates none. 0: the model does. */
    int external_params;
} ExecHooks;

typedef enum { EXEC_BEFORE_FWD = 0, EXEC_AFTER_FWD, EXEC_BEFORE_BWD, EXEC_AFTER_BWD } ExecHookKind;

/* torch.optim.AdamW; weight decay applied to every parameter. */
typedef struct { float lr, beta1, beta2, eps, weight_decay; } ExecAdamW;

/* One micro-batch. The model reads it in forward and again in backward: it must stay valid
 * until exec_model_backward returns. */
typedef struct {
    const void *inputs;    /* GPT-2: tokens (B,T) int32; CNN: images (B,C,H,W) fp32 */
    const int *targets;    /* GPT-2: next tokens (B,T); CNN: class labels (B); int32 */
    int batch;             /* B on this rank */
    int seq;               /* T (GPT-2); 0 for models without a sequence */
} ExecBatch;

/* What a runtime implements. impl is the runtime's own object. Every entry is required. */
typedef struct {
    int (*units)(const void *impl);
    size_t (*unit_numel)(const void *impl, int unit);
    float *(*unit_params)(const void *impl, int unit);
    float *(*unit_grads)(const void *impl, int unit);
    /* Setting a pointer frees the model's own previous buffer (if it owned one) and borrows the
     * new one (NULL = absent now); the model never frees a pointer it did not allocate. */
    int (*set_unit_params)(void *impl, int unit, float *params);
    int (*set_unit_grads)(void *impl, int unit, float *grads);
    /* dst[0 .. length) = elements offset .. offset+length-1 of unit's seeded initial
     * parameters; each value depends only on (seed, unit, index), so a shard of a unit can be
     * initialised alone and the model is the same whatever the number of ranks. */
    int (*init_unit_range)(const void *impl, int unit, uint64_t seed, size_t offset,
                           size_t length, float *dst);
    /* The units that bracket every pass (see Hooks), at most 2, in out; their count (0: none). */
    int (*root_units)(const void *impl, int out[2]);
    /* backward computes the gradients of (mean loss of the micro-batch) / divisor; divisor =
     * accum · N makes the SUM over micro-steps and ranks the gradient of the global mean. */
    void (*set_grad_divisor)(void *impl, double divisor);
    int (*forward)(void *impl, const ExecBatch *b, float *mean_loss);
    int (*backward)(void *impl);
    void (*zero_grad)(void *impl);
    /* One unit from explicit buffers (a shard, or the whole unit): params[0 .. length),
     * grads[0 .. length); the unit's AdamW state (m, v: length elements each, MEM_OPTIMIZER)
     * is created zeroed at the first step, and a later step must use the same length. */
    int (*adamw_step_unit)(void *impl, int unit, float *params, const float *grads, size_t length,
                           const ExecAdamW *opt, int t);
    /* The flat buffer array and its length in fp32 elements (NULL, 0: none). */
    float *(*buffers)(void *impl, size_t *numel);
    const char *(*error)(const void *impl);   /* the last error, as a sentence ("" if none) */
    void (*destroy)(void *impl);              /* frees everything, including the ExecModel */
} ExecModelOps;

/* The handle a runtime embeds (transparent so that runtimes can embed it; callers treat it as
 * opaque and use the functions below). */
struct ExecModel {
    const ExecModelOps *ops;
    void *impl;
    ExecHooks hooks;
    void *hook_ctx;
    int wrapped;           /* a strategy has bound the model (exec_strategy_bind) */
};

/* For runtimes: fills m (hooks may be NULL: no strategy; *hooks is copied, ctx is passed to
 * every callback), and calls one hook: 0, or -1 if it failed (the runtime reports it). */
void exec_model_init(ExecModel *m, const ExecModelOps *ops, void *impl, const ExecHooks *hooks,
                     void *ctx);
int exec_model_call_hook(ExecModel *m, ExecHookKind k, int unit);
const char *exec_model_hook_name(ExecHookKind k);   /* "before_unit_forward", ... */

/* For callers. */
int exec_model_units(const ExecModel *m);
size_t exec_model_unit_numel(const ExecModel *m, int unit);
int64_t exec_model_num_params(const ExecModel *m);                 /* Σ units, elements */
float *exec_model_unit_params(const ExecModel *m, int unit);
float *exec_model_unit_grads(const ExecModel *m, int unit);
int exec_model_set_unit_params(ExecModel *m, int unit, float *params);
int exec_model_set_unit_grads(ExecModel *m, int unit, float *grads);
int exec_model_init_unit_range(const ExecModel *m, int unit, uint64_t seed, size_t offset,
                               size_t length, float *dst);
int exec_model_root_units(const ExecModel *m, int out[2]);
/* Initialises every unit whose parameters are present. 0 or -1. */
int exec_model_init_params(ExecModel *m, uint64_t seed);
void exec_model_set_grad_divisor(ExecModel *m, double divisor);
int exec_model_forward(ExecModel *m, const ExecBatch *b, float *mean_loss);
int exec_model_backward(ExecModel *m);
void exec_model_zero_grad(ExecModel *m);
/* Every unit from its present params and grads, whole (DDP, one rank). 0 or -1. */
int exec_model_adamw_step(ExecModel *m, const ExecAdamW *opt, int t);
int exec_model_adamw_step_unit(ExecModel *m, int unit, float *params, const float *grads,
                               size_t length, const ExecAdamW *opt, int t);
float *exec_model_buffers(ExecModel *m, size_t *numel);
const char *exec_model_error(const ExecModel *m);
/* 1 once a strategy has bound the model: changes that must precede wrapping (SyncBN
 * conversion) are refused from then on. */
int exec_model_wrapped(const ExecModel *m);
void exec_model_set_wrapped(ExecModel *m);
void exec_model_destroy(ExecModel *m);   /* NULL is ignored */

#endif
