/* plan_gpu.h — GPU presets and the cluster: capacity as the driver reports it, link
 * bandwidths, latencies and peak dense FLOP/s per precision (docs/gpus.md: each figure's
 * datasheet source), and the fixed per-process overheads the memory model charges. */
#ifndef PLAN_GPU_H
#define PLAN_GPU_H

#include <stddef.h>
#include <stdint.h>

#include "plan_alloc.h"
#include "plan_train.h"

/* What a GPU generation achieves of its datasheet rates, per kind of operation (docs/gpus.md
 * "Achieved rates": each figure's published source). The time model (plan_cost.c) prices GEMMs
 * at gemm_eff x the dense peak, less tile and wave quantization over the GPU's SMs, and flash
 * attention at the measured fraction for its sequence length. */
#define PLAN_ATTN_POINTS 6   /* sequence lengths 512, 1k, 2k, 4k, 8k, 16k */
typedef struct {
    const char *name;                    /* "Hopper (H100 SXM)" */
    const char *key;                     /* "hopper": its GEMM share's name in plan_shares.h and for
                                            bench/fit_time.py (memplan gpus --json) */
    double gemm_eff;                     /* the best large bf16/fp16 GEMM's fraction of the dense peak (MAMF) */
    double attn_fwd[PLAN_ATTN_POINTS];   /* flash attention forward (causal), fraction of the dense peak */
    double attn_bwd[PLAN_ATTN_POINTS];   /* flash attention backward, fraction of the dense peak */
    /* The share of the GEMM benchmark that training runs sustain (clocks under sustained load,
       NCCL's kernels sharing the SMs, layout copies): fitted on the published runs
       (bench/fit_time.py); attention's is per flash kernel, plan_attn_share */
    double gemm_train;
    int measured;                        /* 1: these figures were measured on this generation; 0: assumed
                                            from another's (docs/gpus.md says whose) */
} GpuEff;

/* A fused attention kernel's published speed on one generation, as GpuEff's attn_fwd/attn_bwd
 * (fractions of the dense peak at 512 ... 16k, causal, head dim 128); FlashAttention-2 is every
 * generation's own curve (GpuEff), the others are listed per generation (plan_gpu.c, docs/gpus.md
 * "Achieved rates"). */
typedef struct {
    AttnKernel kernel;
    const char *gen;                     /* GpuEff.key */
    double fwd[PLAN_ATTN_POINTS], bwd[PLAN_ATTN_POINTS];
    int measured;                        /* 1: the kernel's own benchmark on this generation; 0: an estimate */
} AttnCurve;
/* Kernel k's forward and backward curves on generation e (FlashAttention-2's are e's own): 1 when
 * measured there, 0 when an estimate, -1 where none is published for e (FlashAttention-3 runs only
 * on Hopper). */
int plan_attn_curve(const GpuEff *e, AttnKernel k, const double **fwd, const double **bwd);
/* The share of kernel k's benchmark rate training runs sustain (plan_shares.h, fitted per kernel
 * by `make fit-time` as the GEMM shares are per generation). */
double plan_attn_share(AttnKernel k);
/* The GPU presets kernel k has a curve on, "h100-80gb, ..." (for the CLI's refusal). */
const char *plan_attn_kernel_gpus(AttnKernel k, char *buf, size_t len);

typedef struct {
    const char *name;        /* --gpu value */
    const char *label;       /* "NVIDIA A100-SXM4-40GB" */
    double mem_bytes;        /* total as the driver reports it (nvidia-smi MiB x 2^20) */
    double intra_bw;         /* GB/s (1e9 B/s) per direction per GPU inside a node */
    double inter_bw;         /* GB/s per GPU across nodes (its share of the NICs) */
    double intra_lat;        /* seconds per ring step (hop) inside a node */
    double inter_lat;        /* seconds per ring step (hop) across nodes */
    double peak_tflops[3];   /* dense TFLOP/s: fp32 (no TF32), fp16, bf16 (0 = unsupported) */
    double cublas_ws_bytes;  /* cuBLAS workspace per GEMM stream */
    double mem_bw;           /* GB/s, HBM/GDDR (the optimizer step is bound by it) */
    const char *interconnect;
    /* the preset's typical node (docs/gpus.md "Host side"): host memory per GPU (the node's RAM
       divided by its GPUs), the GPU's host link per direction, the node's DRAM bandwidth */
    double host_mem_per_gpu; /* bytes */
    double host_bw;          /* GB/s per GPU per direction, pinned copies over PCIe */
    double host_mem_bw;      /* GB/s, the node's DRAM (CPU Adam is bound by it) */
    const char *node;        /* "DGX A100 (1 TiB, 2 x EPYC 7742)" */
    int sms;                 /* streaming multiprocessors: one GEMM tile each per wave */
    int nvlink;              /* 1: GPUs in a node talk over NVLink (NCCL's NVLink latencies, LL128);
                                0: over PCIe */
    const GpuEff *eff;       /* what the generation achieves (plan_cost.c) */
} GpuPreset;

int plan_gpu_count(void);
const GpuPreset *plan_gpu_preset(int i);
const GpuPreset *plan_gpu_by_name(const char *name);   /* NULL if unknown */
const char *plan_gpu_names(void);                      /* "v100-16gb, ..." */
#define PLAN_DEFAULT_GPU "a100-40gb"

/* The time model's fitted shares for one plan (docs/formulas.md "Time"): 0 = the shipped figure
 * (plan_shares.h, fitted on every published source by `make fit-time`); --time-shares sets them,
 * which is how bench/fit_time.py fits them and checks them on a source it left out. */
typedef struct {
    double gemm;             /* of the generation's MAMF GEMM rate (GpuEff.gemm_train) */
    double attn;             /* of its flash-attention benchmark rate (plan_attn_share) */
    double passes;           /* elementwise traffic over one pass per op (PLAN_SHARE_PASSES) */
} TimeShares;

typedef struct {
    GpuPreset gpu;           /* a copy: flags override fields */
    int64_t gpus;            /* N, total data-parallel ranks */
    int64_t gpus_per_node;
    /* fixed overheads per process, bytes (overridable: --cuda-context, --nccl-mem) */
    double cuda_context;
    double nccl_per_comm;
    double alloc_margin;     /* fraction of allocator-managed bytes, or bytes if !margin_is_frac */
    int margin_is_frac;
    /* 1: the allocator's share of the overhead is the caching allocator model's replay of the
       step (plan_alloc.h: max reserved - the tensor peak; docs/formulas.md "The allocator in the
       plan"), and alloc_margin is not used; 0: alloc_margin. The CLI's default is 1, a
       ClusterSpec's (plan_cluster_defaults) 0. */
    int alloc_model;
    PlanAllocConfig alloc_conf;   /* its settings (--alloc-conf, PYTORCH_CUDA_ALLOC_CONF); device
                                     size and capacity are set from gpu and the fixed overheads */
    double mfu;              /* > 0: the flat time model, compute at this fraction of the peak FLOP/s
                                and collectives at the links' alpha-beta (--mfu; validate's measured
                                descriptions); 0: time from the operations (plan_cost.c, plan_comm.c) */
    double coll_base_lat;    /* seconds every collective costs before its hops (launch, sync) */
    TimeShares shares;       /* --time-shares; zeros: the shipped shares */
    double host_mem;         /* bytes of host memory per node; 0 = preset per GPU x GPUs per node */
    /* A measured device description (memplan validate on CPU ranks: exec/exec_describe.h) where
       the preset's single figures do not describe the device; 0 = the preset's. docs/formulas.md
       "Time". */
    double opt_bw;           /* GB/s the optimizer step achieves, bytes read + written */
    double coll_bw[4];       /* GB/s bus bandwidth per collective (CollKind order) */
    double coll_lat[4];      /* seconds per ring step per collective */
    double comm_steal;       /* compute seconds a rank loses per second of collective that runs
                                while it computes (CPU ranks: the cores do the copies) */
    double coll_issue_s;     /* compute seconds a rank spends per collective it issues to run
                                behind compute (CPU ranks: the hand-over to a progress thread) */
    int nics;                /* NICs per node (--nics); 0: the fewest of the preset's that carry
                                gpus_per_node x gpu.inter_bw (plan_cluster_nics) */
} ClusterSpec;

/* 1 when c prices time with the flat model (--mfu, a measured description), 0 when from the
 * operations. */
static inline int plan_time_flat(const ClusterSpec *c) { return c->mfu > 0; }

/* Defaults: PLAN_DEFAULT_GPU, 1 GPU, the documented overheads. */
void plan_cluster_defaults(ClusterSpec *c);
int64_t plan_cluster_nodes(const ClusterSpec *c);
/* NICs per node: --nics, else the fewest of the preset's NICs (one per GPU at its inter_bw) that
   carry gpus_per_node x gpu.inter_bw. */
int plan_cluster_nics(const ClusterSpec *c);
/* Host memory per node (bytes): --host-mem, or the preset's per-GPU share x GPUs per node. */
double plan_cluster_host_mem(const ClusterSpec *c);

/* Defaults, documented in docs/formulas.md ("Fixed overheads"). */
#define PLAN_CUDA_CONTEXT_BYTES (512.0 * 1024 * 1024)   /* 0.3-0.6 GiB with lazy loading */
#define PLAN_NCCL_COMM_BYTES (512.0 * 1024 * 1024)      /* 0.5-1 GiB per communicator, 8 GPUs */
#define PLAN_ALLOC_MARGIN_FRAC 0.05                     /* caching-allocator rounding/fragmentation */
#define PLAN_FLAT_MFU 0.4   /* the flat model's fraction before the per-operation model (docs/formulas.md "Time") */
#define PLAN_COLL_BASE_LAT 3.6e-6                       /* NCCL baseLat, ring/LL (tuning.cc) */

#endif
