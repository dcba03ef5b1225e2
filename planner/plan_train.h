/* plan_train.h — the training setup: micro-batch, sequence, accumulation, precision regime,
 * optimizer, activation checkpointing, attention implementation, dropout. Precision regimes
 * and optimizers are tables (docs/formulas.md gives each row's bytes and source). */
#ifndef PLAN_TRAIN_H
#define PLAN_TRAIN_H

#include <stddef.h>
#include <stdint.h>

typedef enum { PREC_FP32 = 0, PREC_AMP_FP16, PREC_AMP_BF16, PREC_MIXED_FP16, PREC_MIXED_BF16,
               PREC_BF16, PREC_COUNT } PrecisionKind;
typedef enum { PEAK_FP32 = 0, PEAK_FP16, PEAK_BF16 } PeakKind;

typedef struct {
    const char *name;        /* --precision value */
    const char *what;        /* one-line description */
    int param_bytes;         /* bytes per parameter the forward reads */
    int grad_bytes;          /* bytes per gradient element (and DDP bucket element) */
    int master_bytes;        /* fp32 master copy held by the optimizer (mixed: 4) */
    int state_bytes;         /* bytes per optimizer-state element (m, v, momentum) */
    int act_bytes;           /* compute dtype of activations (X) */
    int autocast;            /* torch.autocast: fp32 softmax/pow, cached cast copies */
    int cast_copy_bytes;     /* autocast's cached low-precision weight copies per param */
    PeakKind peak;           /* which peak FLOP/s applies */
} PrecisionSpec;

typedef enum { OPT_ADAMW = 0, OPT_ADAM, OPT_SGD, OPT_SGD_MOMENTUM, OPT_COUNT } OptimizerKind;

typedef struct {
    const char *name;
    int states;              /* state tensors per parameter (Adam: m, v) */
    int foreach_temp;        /* torch foreach step() allocates one state-sized temporary */
    int step_scalar;         /* torch keeps state['step'] per parameter tensor: an fp32 scalar
                                tensor (torch/optim/adam.py; SGD keeps none) */
} OptimizerSpec;

typedef enum { ATTN_EAGER = 0, ATTN_SDPA, ATTN_COUNT } AttnKind;
/* The fused attention kernel a flash path (--attn sdpa) runs, for its speed (docs/gpus.md
   "Achieved rates"; its memory is SDPA's flash path's): fa2, FlashAttention-2 (PyTorch SDPA's
   flash backend, flash-attn 2, the default); fa3, FlashAttention-3 (flash-attn's hopper/ package,
   transformers' attn_implementation "flash_attention_3"); fa4, FlashAttention-4 (flash-attn 4's
   CuTe-DSL kernels). */
typedef enum { ATTN_KERNEL_FA2 = 0, ATTN_KERNEL_FA3, ATTN_KERNEL_FA4, ATTN_KERNEL_COUNT } AttnKernel;
/* Activation checkpointing (docs/formulas.md "Activations", "Selective checkpointing"): none;
   full, every transformer block (HF gradient_checkpointing_enable, torchtitan FullAC); every:N,
   every N-th block counted from the first (blocks N, 2N, ...: torchtitan's layer-frequency
   selective AC before 0.3, Megatron's uniform recompute with recompute_num_layers = 1 per N);
   op, torchtitan's op-level selective AC (every block under torch.utils.checkpoint with a policy:
   the outputs of matmuls and attention kernels are saved, every second mm recomputed with all
   the rest); selective, Megatron-LM's selective recompute (recompute_granularity=selective:
   only the core attention, scores, softmax, dropout and the context product, is recomputed). */
typedef enum { CKPT_NONE = 0, CKPT_FULL, CKPT_EVERY, CKPT_OP, CKPT_SELECTIVE, CKPT_COUNT } CkptKind;
/* CPU offload (docs/formulas.md "Offload"): OFFLOAD_OPT moves the optimizer state, the fp32
 * master weights and the fp32 gradient partition to host memory and runs the optimizer step on
 * the CPU (DeepSpeed offload_optimizer: cpu, ZeRO-1/2/3); OFFLOAD_PARAM also keeps the parameter
 * shards in host memory (DeepSpeed ZeRO-3 offload_param: cpu; FSDP CPUOffload(offload_params=True),
 * which always offloads gradients and the step with them). */
typedef enum { OFFLOAD_NONE = 0, OFFLOAD_OPT, OFFLOAD_PARAM, OFFLOAD_COUNT } OffloadKind;
/* FSDP under gradient accumulation (--fsdp-grad-sync; docs/formulas.md "Gradient accumulation"):
 * FSDP_SYNC_EVERY reduce-scatters every micro-step and accumulates the sharded gradients (FSDP2's
 * default, torchtitan); FSDP_SYNC_LAST skips the reduce-scatter on the non-final micro-steps
 * (set_requires_gradient_sync(False) / FSDP1's no_sync(), as HF Accelerate does): every unit keeps
 * its unsharded gradient until the last micro-step reduce-scatters it. */
typedef enum { FSDP_SYNC_EVERY = 0, FSDP_SYNC_LAST, FSDP_SYNC_COUNT } FsdpSyncKind;
/* FSDP1's knobs (--fsdp 1: FullyShardedDataParallel's arguments; docs/formulas.md "FSDP1 knobs").
 * All zero = FSDP1's defaults: the blocks as units (transformer auto-wrap), limit_all_gathers=True,
 * backward_prefetch=BACKWARD_PRE, forward_prefetch=False. */
typedef enum { FSDP_BWD_PRE = 0, FSDP_BWD_POST, FSDP_BWD_NONE, FSDP_BWD_COUNT } FsdpBwdPrefetch;
typedef struct {
    double min_params;       /* size_based_auto_wrap_policy(min_num_params); 0 = one unit per block */
    int no_limit;            /* 1: limit_all_gathers=False (planned as True: see formulas.md) */
    FsdpBwdPrefetch bwd;     /* backward_prefetch */
    int fwd;                 /* 1: forward_prefetch=True */
} FsdpKnobs;
/* The dtype fsdp-* rows reduce gradients in (--fsdp-reduce-dtype; MixedPrecision(reduce_dtype=) /
 * MixedPrecisionPolicy(reduce_dtype=); docs/formulas.md "FSDP's reduce dtype"): the default is
 * each implementation's with the precision regime (plan_fsdp_reduce_bytes), FP32 reduces in fp32,
 * LOW in the regime's 16-bit dtype (the gradients' own under mixed-*). */
typedef enum { FSDP_REDUCE_DEFAULT = 0, FSDP_REDUCE_FP32, FSDP_REDUCE_LOW } FsdpReduce;
/* Whose saved-tensor layout the activation model follows. */
typedef enum { IMPL_PYTORCH = 0, IMPL_ENGINE, IMPL_COUNT } ImplKind;
/* Pipeline schedule (--pp-schedule; planner/plan_dim_pp.h): torch.distributed.pipelining's
   Schedule1F1B (PipeDream-Flush), ScheduleGPipe, or ScheduleInterleaved1F1B (Narayanan et al.
   2021's interleaved schedule: pp_virtual stages per rank). */
typedef enum { PP_1F1B = 0, PP_GPIPE, PP_INTERLEAVED, PP_SCHED_COUNT } PpSchedule;

/* DeepSpeed's zero_optimization sizes (elements; deepspeed/runtime/zero/config.py 0.19.8
 * defaults below) as a user's config or flags set them; 0 = the default (plan_ds_knobs). */
#define PLAN_DS_REDUCE_BUCKET 5e8      /* reduce_bucket_size */
#define PLAN_DS_ALLGATHER_BUCKET 5e8   /* allgather_bucket_size */
#define PLAN_DS3_PREFETCH 5e7          /* stage3_prefetch_bucket_size */
#define PLAN_DS3_MAX_LIVE 1e9          /* stage3_max_live_parameters */
#define PLAN_DS3_REUSE 1e9             /* stage3_max_reuse_distance */
#define PLAN_DS3_PERSIST 1e5           /* stage3_param_persistence_threshold */
typedef struct {
    double reduce_bucket;    /* reduce_bucket_size (5e8) */
    double allgather_bucket; /* allgather_bucket_size (5e8) */
    double prefetch;         /* stage3_prefetch_bucket_size (5e7) */
    double max_live;         /* stage3_max_live_parameters (1e9) */
    double max_reuse;        /* stage3_max_reuse_distance (1e9) */
    double persist;          /* stage3_param_persistence_threshold (1e5; a user's 0 is kept as 1:
                                no tensor of at least one element stays whole either way) */
    int overlap_comm;        /* 0 = DeepSpeed's default (true for stage 3, else false), 1 on, 2 off */
    int param_sync;          /* ZeRO-1/2's updated shards after the step: PARAM_SYNC_ALLGATHER
                                (DeepSpeed's all_gather_dp_groups, the default) or
                                PARAM_SYNC_BROADCAST (one broadcast per rank: InternLM's
                                HybridZeroOptimizer.broadcast_params) */
    int64_t zero_group;      /* ZeRO-1/2 shard the optimizer over groups of this many ranks
                                (InternLM's zero1=N: gradients still all-reduced over every rank,
                                the step's sync within the group); 0 = every rank (DeepSpeed) */
} DsKnobs;
enum { PARAM_SYNC_ALLGATHER = 0, PARAM_SYNC_BROADCAST = 1 };

/* The trainable subset (docs/formulas.md "LoRA and frozen parameters"): what --freeze freezes
 * without LoRA: the input embeddings (a head tied to them with them), or every parameter but
 * those of the last N blocks and the layers after them. */
typedef enum { FREEZE_NONE = 0, FREEZE_EMBEDDINGS, FREEZE_ALL_BUT_LAST, FREEZE_COUNT } FreezeKind;
/* How the frozen base is stored (--quant-base; QLoRA): as the precision regime has it, bf16,
 * int8 (bitsandbytes LLM.int8 Linear8bitLt) or NF4 (Linear4bit, double-quantized constants). */
typedef enum { QUANT_NONE = 0, QUANT_BF16, QUANT_INT8, QUANT_NF4, QUANT_COUNT } QuantKind;

typedef struct {
    int rank;                /* --lora R: 0 = no LoRA */
    double alpha;            /* --lora-alpha (PEFT's default 8); scales, changes no memory */
    double dropout;          /* --lora-dropout (PEFT's default 0.0) */
    char targets[160];       /* --lora-targets, comma list of module names or "all-linear";
                                "" = PEFT's default for the model type */
    FreezeKind freeze;
    int freeze_n;            /* FREEZE_ALL_BUT_LAST: N */
    QuantKind quant;
    /* set by the fine-tuning dimension's view, not by a flag: the rank's model holds a 4-bit base
       as its packed storage (plan_dim_ft.c ft_view), priced per element at the parameter bytes */
    int packed;
} FinetuneSpec;

typedef struct {
    int64_t micro_batch;     /* per GPU */
    int64_t seq;             /* 0 = the model's context */
    int64_t grad_accum;
    PrecisionKind precision;
    OptimizerKind optimizer;
    CkptKind act_ckpt;
    int ckpt_every;          /* CKPT_EVERY: N, checkpoint blocks N, 2N, ... (1-based) */
    AttnKind attn;
    AttnKernel attn_kernel;  /* --attn-kernel: the flash kernel's speed curve (sdpa only) */
    double dropout;          /* < 0 = the model's default */
    ImplKind impl;
    int grad_as_bucket_view; /* DDP: gradients are views into the buckets (no copy) */
    int syncbn;              /* SyncBatchNorm (models with BN) */
    OffloadKind offload;     /* what lives in host memory */
    int loop_trainer;        /* 1: HF Trainer's loop drops the model's outputs before backward
                                (compute_loss returns the loss only); 0: the common loop
                                (`outputs = model(**batch); loss = outputs.loss`) holds the
                                logits through backward and the step */
    int autocast_cpu;        /* 1: torch.autocast on CPU tensors, whose fp32 op list lacks pow,
                                tanh, softmax, log_softmax and layer_norm (CUDA's has them but
                                tanh); 0: CUDA (the default) */
    int zero_grad_keep;      /* 1: zero_grad(set_to_none=False) (PyTorch < 2.0's default): gradients
                                stay allocated (zeroed) across steps; 0: set_to_none=True (>= 2.0) */
    int fsdp_impl;           /* what the fsdp-* rows mean where the two differ: 1 = flat-parameter
                                FullyShardedDataParallel, 2 = fully_shard (FSDP2, the default;
                                0 reads as 2); docs/formulas.md "Autocast's cast cache" */
    FsdpSyncKind fsdp_grad_sync; /* fsdp-* under grad_accum > 1: reduce-scatter every micro-step
                                    (default) or only the last */
    DsKnobs ds;              /* DeepSpeed's sizes beyond its defaults (zero* rows) */
    double moe_imbalance;    /* --moe-imbalance F >= 1: the busiest expert receives F times the mean
                                tokens and every expert's rows are sized for it (a capacity factor):
                                the routed experts' saved rows and their MLP backward's working set
                                per routed row are planned F times; 0 reads as 1, transformers'
                                grouped_mm, whose memory does not depend on routing (measured).
                                An estimate above 1: docs/formulas.md "Routing imbalance" */
    int tp;                  /* tensor-parallel degree (0 or 1: none): PyTorch's parallelize_module
                                plan on a tp group inside a node, the strategy on the remaining
                                data-parallel degree gpus / tp (planner/plan_dim_tp.h) */
    int sp;                  /* 1: sequence parallel (SequenceParallel norms, sequence-sharded
                                residual stream); only with tp > 1 */
    int loss_parallel;       /* 1: loss parallel (torch's loss_parallel(): the vocab-sharded logits
                                stay sharded and the cross-entropy runs on them, torchtitan's
                                default); only with tp > 1 and a vocab-sharded head */
    int pp;                  /* pipeline ranks (0 or 1: none): the repeated blocks split over pp x
                                pp_virtual stages, the strategy on gpus / (tp * pp); the micro-batches
                                of one step are grad_accum (--microbatches) (planner/plan_dim_pp.h) */
    PpSchedule pp_schedule;  /* 1F1B (default), GPipe or interleaved 1F1B */
    int pp_virtual;          /* interleaved: stages per rank (0: 2, torchtitan's default for
                                multi-stage schedules); the others: 1 */
    int pp_less_first;       /* the embedding counted as this many blocks in the split (torchtitan
                                pipeline_parallel_first_stage_less_layers; 0: an even split) */
    int pp_less_last;        /* the final norm and head counted as this many blocks
                                (pipeline_parallel_last_stage_less_layers; 0) */
    int pp_drop_outputs;     /* 1: schedule.step(return_outputs=False) (torchtitan): the last stage
                                keeps no micro-batch's output; 0: torch's default, every output
                                kept until the next step (stage.output_chunks) and merged */
    int ep;                  /* expert-parallel degree (0 or 1: none; < 0: memplan auto searches it): each
                                MoE block's routed experts split over ep ranks of the data-parallel
                                group, tokens sent to them and back by all-to-all, the experts sharded
                                over the remaining gpus / (tp x pp x ep) (planner/plan_dim_ep.h) */
    int cp;                  /* context-parallel degree (0 or 1: none): ring attention over cp ranks,
                                each holding seq / cp of every sequence (planner/plan_dim_cp.h) */
    FinetuneSpec ft;         /* LoRA / frozen parameters (applied to the ModelSpec: plan_dim_ft.h) */
    FsdpKnobs fsdp1;         /* FSDP1's wrapping and prefetch knobs (fsdp-* rows with fsdp_impl 1) */
    FsdpReduce fsdp_reduce;  /* fsdp-* rows: the reduce-scatter's dtype */
} TrainSpec;

void plan_train_defaults(TrainSpec *t);   /* amp-bf16, adamw, sdpa, batch 1, accum 1 */
/* t's DeepSpeed sizes with DeepSpeed's defaults where t leaves them 0. */
DsKnobs plan_ds_knobs(const TrainSpec *t);

const PrecisionSpec *plan_precision(PrecisionKind k);
const OptimizerSpec *plan_optimizer(OptimizerKind k);
/* Lookups by name; -1 if unknown. */
int plan_precision_by_name(const char *s);
int plan_optimizer_by_name(const char *s);
int plan_attn_by_name(const char *s);
int plan_attn_kernel_by_name(const char *s);
int plan_ckpt_by_name(const char *s);        /* none, full, op, selective; -1 otherwise (every:N:
                                                plan_ckpt_parse) */
/* "none", "full", "op", "selective" or "every:N" (N in 1..100000) into *k and *every; 0, or -1
   if not valid. */
int plan_ckpt_parse(const char *s, CkptKind *k, int *every);
/* t's checkpointing as --act-ckpt takes it ("every:2"), in buf. */
const char *plan_ckpt_label(const TrainSpec *t, char *buf, size_t len);
int plan_impl_by_name(const char *s);
int plan_offload_by_name(const char *s);      /* none, optimizer, params; -1 if unknown */
int plan_fsdp_sync_by_name(const char *s);    /* every, last; -1 if unknown */
const char *plan_fsdp_sync_name(FsdpSyncKind k);
int plan_fsdp_bwd_by_name(const char *s);     /* pre, post, none; -1 if unknown */
const char *plan_fsdp_bwd_name(FsdpBwdPrefetch k);
const char *plan_offload_name(OffloadKind o);
const char *plan_attn_name(AttnKind a);
const char *plan_attn_kernel_name(AttnKernel k);
/* The attention as the time model's published setups name it: the kernel (fa3, fa4) where it is
   not SDPA's default FlashAttention-2, else the implementation (eager, sdpa). */
const char *plan_attn_label(const TrainSpec *t);
const char *plan_ckpt_name(CkptKind c);
const char *plan_impl_name(ImplKind i);
/* "fp32, amp-fp16, ..." for messages and --help. */
const char *plan_precision_names(void);
/* --act-ckpt's valid values, for messages and --help. */
#define PLAN_CKPT_VALUES "none, full, every:N (N in 1..100000), op, selective"
const char *plan_optimizer_names(void);

#endif
