/* plan_dim_offload.h — CPU offload as one dimension (plan_dim.h), and host memory. What leaves the GPU under DeepSpeed's
 * offload_optimizer / offload_param and FSDP's CPUOffload(offload_params=True), what a node's
 * host memory must hold (model states of its GPUs, the load-time copies, DeepSpeed's
 * additional_buffer_factor), the host<->device traffic per optimizer step and the CPU's
 * optimizer step. docs/formulas.md "Offload and host memory" gives every term's source. */
#ifndef PLAN_DIM_OFFLOAD_H
#define PLAN_DIM_OFFLOAD_H

#include "plan_dim.h"
#include "plan_gpu.h"
#include "plan_sizes.h"
#include "plan_model.h"
#include "plan_strategy.h"
#include "plan_train.h"

/* DeepSpeed's estimators (estimate_zero2/3_model_states_mem_needs) multiply host memory by
   additional_buffer_factor = 1.5 for what its offload code pins beside the states. */
#define PLAN_DS_HOST_BUFFER_FACTOR 1.5
/* Fraction of the node's theoretical DRAM bandwidth a CPU Adam step sustains (assumption,
   docs/formulas.md), and the bytes it moves per parameter: read param, grad, and each state,
   write param and each state (fp32): 12 + 8 x states. */
#define PLAN_CPU_ADAM_BW_FRAC 0.5
/* DeepSpeedCPUAdam: "between 5x to 7x speedup over torch.optim.adam(W)"
   (deepspeed/ops/adam/cpu_adam.py); FSDP's CPU step runs torch.optim on the CPU. */
#define PLAN_TORCH_CPU_ADAM_SLOWDOWN 6.0
/* DeepSpeed's CPU step beyond CPU Adam, bytes per parameter through the node's DRAM (DeepSpeed
   0.19.8 runtime/zero): unscale_and_clip_grads' mul_ over the fp32 gradient partition (read and
   write 4 B; stage3.py always, stage_1_and_2.py with gradient clipping or a loss scale), and the
   copy of the updated fp32 partition into the 16-bit one, whose dtype conversion PyTorch runs on
   the CPU before the copy up (read 4 B, write 2 B: aten/src/ATen/native/cuda/Copy.cu, a blocking
   copy converts on the CPU; stage_1_and_2.py converts into its pinned 16-bit buffer itself). */
#define PLAN_DS_CPU_STEP_EXTRA_BYTES 14.0
/* DeepSpeed sends gradients down in the fp32 of its optimizer partition, converted on the GPU
   first (stage3.py _offload_grad_partition_at_boundary, stage_1_and_2.py
   async_inplace_copy_grad_to_fp32_buffer_from_gpu: grad.to(fp32), then copy_(non_blocking)). */
#define PLAN_DS_HOST_GRAD_BYTES 4.0

typedef struct {
    double host_per_gpu;     /* bytes of steady model state one rank keeps in host memory */
    double steady_per_node;  /* host_per_gpu x GPUs per node x buffer factor */
    double init_per_node;    /* load-time copies (fp32 model per rank before it moves), per node */
    double per_node;         /* max(steady, init): what the node's host memory must hold */
    double buffer_factor;    /* 1.5 for DeepSpeed, 1 for PyTorch */
    double capacity;         /* host memory per node */
    int fits;
    double d2h_bytes, h2d_bytes;   /* per GPU per optimizer step */
    double d2h_s, h2d_s;           /* seconds at the preset's host link bandwidth */
    double d2h_per_micro;          /* 1: the gradient copy happens every micro-step (else at the end) */
    double cpu_step_s;             /* the optimizer step on the CPU, per rank (0 when on the GPU) */
} OffloadHost;

/* Bytes per parameter the CPU optimizer step moves through the node's DRAM: the Adam kernel's
   12 + 8 x states, + PLAN_DS_CPU_STEP_EXTRA_BYTES under DeepSpeed (ds 1). */
double plan_offload_cpu_bytes(const TrainSpec *t, int ds);

/* Host memory, host traffic and the CPU step for one setup. plan_offload_host_sized: the same
   with the setup's sizes given (z: plan_memory_sizes(m, t, c, s), which the step's context
   holds already). */
void plan_offload_host(const ModelSpec *m, const TrainSpec *t, const ClusterSpec *c, StrategyKind s,
                       OffloadHost *out);
void plan_offload_host_sized(const ModelSpec *m, const TrainSpec *t, const ClusterSpec *c, StrategyKind s,
                             const MemSizes *z, OffloadHost *out);

extern const PlanDim plan_dim_offload;

#endif
