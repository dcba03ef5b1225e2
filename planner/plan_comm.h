/* plan_comm.h — the collective schedule of one optimizer step per strategy, read from the same
 * strategy table as the memory model: which collectives run in which phase, how many, the
 * payload (the full, unsharded buffer) and per-GPU wire bytes with the nccl-tests factors
 * (all-reduce 2(n-1)/n; reduce-scatter and all-gather (n-1)/n; broadcast 1), and their time
 * (alpha-beta model). docs/formulas.md "Communication". */
#ifndef PLAN_COMM_H
#define PLAN_COMM_H

#include "plan_coll.h"
#include "plan_gpu.h"
#include "plan_model.h"
#include "plan_strategy.h"
#include "plan_train.h"


/* What a collective or a host copy moves: code tests this, never the label made from it
   (plan_coll_purpose_label). */
typedef enum {
    PURPOSE_GRAD_BUCKETS = 0,   /* gradient buckets (DDP, DeepSpeed reduce buckets) */
    PURPOSE_UPDATED_PARAMS,     /* ZeRO-1/2: the updated partitions gathered after the step */
    PURPOSE_MODULE_PARAMS,      /* DeepSpeed ZeRO-3: coalesced parameter gathers */
    PURPOSE_PERSISTENT_PARAMS,  /* DeepSpeed ZeRO-3: persistent tensors' partitions at the step */
    PURPOSE_GRAD_NORM,          /* DeepSpeed: the global gradient norm */
    PURPOSE_OVERFLOW_FLAG,      /* DeepSpeed: the fp16/bf16 overflow flag */
    PURPOSE_UNIT_PARAMS,        /* FSDP / sharded units' parameters */
    PURPOSE_UNIT_GRADS,         /* FSDP / sharded units' gradients */
    PURPOSE_REPLICA_GRADS,      /* HYBRID_SHARD: gradient shards across the replicas */
    PURPOSE_BUFFERS,            /* DDP broadcast_buffers */
    PURPOSE_SYNCBN_STATS,       /* SyncBatchNorm forward statistics */
    PURPOSE_SYNCBN_GRADS,       /* SyncBatchNorm backward gradient sums */
    PURPOSE_HOST_GRADS,         /* offload: gradient shards to host memory */
    PURPOSE_HOST_PARAMS,        /* offload: parameter shards from host memory before gathers */
    PURPOSE_HOST_UPDATED,       /* offload: updated parameters from host memory after the step */
    PURPOSE_TP_ACTS,            /* tensor parallel: a block's activations (row-parallel outputs,
                                   column-parallel input gradients; SP: gathers and scatters) */
    PURPOSE_TP_LOGITS,          /* tensor parallel: the vocab-sharded logits gathered for the loss, or
                                   loss parallel's all-reduces of their rows' max, sum of exps, target */
    PURPOSE_TP_REPLICA_GRADS,   /* sequence parallel: replicated parameters' partial gradients */
    PURPOSE_PP_ACTS,            /* pipeline: a micro-batch's activations to the next stage (forward),
                                   their gradient to the previous one (backward) */
    PURPOSE_EP_TOKENS,          /* expert parallel: routed tokens to their experts' ranks and the
                                   experts' outputs back (dispatch, combine; backward the mirror) */
    PURPOSE_EP_COUNTS,          /* expert parallel: the tokens per expert each rank sends (the
                                   all-to-all that sizes the dispatch) */
    PURPOSE_EXPERT_PARAMS,      /* expert parallel under FSDP: the local experts' parameters
                                   gathered over the expert data-parallel group */
    PURPOSE_EXPERT_GRADS,       /* ... and their gradients reduce-scattered over it */
    PURPOSE_CP_KV,              /* context parallel: the keys and values of the other sequence
                                   shards (ring attention), forward and backward */
    PURPOSE_COUNT
} CollPurpose;

typedef struct {
    CollKind op;
    PhaseKind phase;
    CollPurpose purpose;
    const char *what;        /* plan_coll_purpose_label(purpose), for people */
    double count;            /* collectives per optimizer step */
    double payload_bytes;    /* Σ full buffer sizes per optimizer step */
    double wire_bytes;       /* Σ per-GPU wire bytes per optimizer step */
    int64_t group;           /* ranks in the collective */
    double seconds;          /* Σ modelled time */
} PlanColl;

/* Host <-> device copies of CPU offload (PCIe, not the GPU network): listed beside the
   collectives, counted apart from wire_bytes. */
typedef struct {
    const char *name;        /* "copy_d2h", "copy_h2d" */
    PhaseKind phase;
    CollPurpose purpose;
    const char *what;        /* plan_coll_purpose_label(purpose) */
    double bytes;            /* per GPU per optimizer step */
    double seconds;          /* at the preset's host link bandwidth */
} PlanHostCopy;

#define PLAN_MAX_COLLS 32
typedef struct {
    PlanColl c[PLAN_MAX_COLLS];
    int n;
    double wire_bytes;       /* Σ per GPU per optimizer step */
    double seconds;
    PlanHostCopy host[2];    /* CPU offload's copies (n_host = 0 without offload) */
    int n_host;
    double host_bytes, host_seconds;   /* Σ of host[] */
} CommPlan;

/* DDP's bucket sizes (torch/nn/parallel/distributed.py): first bucket 1 MiB, then 25 MiB. */
#define PLAN_DDP_FIRST_BUCKET (1024.0 * 1024.0)
#define PLAN_DDP_BUCKET (25.0 * 1024.0 * 1024.0)

/* 1 for the SyncBatchNorm collectives */
int plan_coll_purpose_is_syncbn(CollPurpose p);
/* Number of DDP buckets for Ψ gradients of grad_bytes each, bucket_bytes cap (0 = 25 MiB), as
   if gradients split freely at the caps (memplan's engine, whose buckets are flat fp32 runs). */
double plan_ddp_buckets(double psi, int grad_bytes, double bucket_bytes);
/* DDP's buckets as torch's reducer packs them after its rebuild (reducer.cpp
   compute_bucket_assignment_by_size): whole gradient tensors (a tensor never splits) in
   gradient-ready order, the reverse of model.parameters() (a tied weight is registered with
   the embedding, so it comes last, as its gradient does), one running bucket per dtype (every
   parameter shares the regime's dtype here); a bucket closes as soon as its bytes reach its cap,
   first_cap for the first, cap after. -1 when the model's tensors are unknown. */
double plan_ddp_buckets_tensors(const ModelSpec *m, int grad_bytes, double first_cap, double cap);
/* Modelled seconds of one collective: latency x ring steps + wire bytes / bandwidth, where a
 * ring that crosses nodes runs at the per-GPU NIC share. crosses_nodes: 0 within a node; 1 a
 * group of consecutive ranks (gpus_per_node of them on each node, NCCL's channels over the
 * node's NICs); PLAN_CROSSES_STRIDED a group of one rank per node (HYBRID_SHARD's replicas: the
 * node's other ranks run their own groups at once, each on its NIC share); plan_crosses_stride(s)
 * a group of every s-th rank (the data-parallel group beside a tensor-parallel group of s):
 * gpus_per_node / s of its ranks on each node (one at least), the node's other s - 1 groups
 * running theirs at once. */
#define PLAN_CROSSES_STRIDED 2
/* The crosses_nodes of a group that spans nodes with its ranks stride apart: 1 for stride 1. */
int plan_crosses_stride(int64_t stride);
double plan_coll_seconds(const ClusterSpec *c, CollKind op, double payload, int64_t group,
                         int crosses_nodes);
/* plan_coll_seconds priced again only when its arguments differ from the last call's (a model's
   repeated blocks write the same collectives layer after layer): the collective table and the
   simulation walk a step's transfers alike. Start from PLAN_COLL_PRICE_NONE. */
typedef struct { int op, crosses; double payload, s; int64_t group; } CollPrice;
#define PLAN_COLL_PRICE_NONE {-1, 0, 0, 0, 0}
double plan_coll_seconds_last(const ClusterSpec *c, CollPrice *last, CollKind op, double payload, int64_t group,
                              int crosses_nodes);
/* Compute seconds a rank loses per second a collective runs beside its compute: measured
 * (ClusterSpec.comm_steal, CPU ranks), else, on a GPU under the per-operation model, the SMs the
 * collective's NCCL kernel holds (its CTAs, one per channel: 24 inside an NVLink node, across nodes
 * plan_nccl_net_channels) over the SMs left to the compute, ctas / (sms - ctas); 0 under the flat
 * model. crosses_nodes as plan_coll_seconds. */
double plan_coll_steal(const ClusterSpec *c, int crosses_nodes);
/* The channels (CTAs) NCCL opens for a ring across c's nodes, from its NICs (plan_cluster_nics;
   docs/formulas.md "Communication beside compute"). */
int plan_nccl_net_channels(const ClusterSpec *c);
/* FSDP under gradient accumulation: with no_sync() the (K-1) non-final micro-steps skip their
 * reduce-scatters but keep full unsharded gradients. extra = the added gradient bytes per GPU,
 * saved = the reduce-scatter wire bytes per GPU and optimizer step no longer sent; of the rank's
 * view of a built step (plan_step.h). */
struct Step;
void plan_fsdp_no_sync(const struct Step *st, double *extra_bytes, double *saved_wire_bytes);
/* The collective table of a built step (plan_step.h); empty when it could not be built. */
struct Step;
void plan_comm_step(const struct Step *st, CommPlan *out);
/* plan_comm_step of the step of (m, t, c, s), built for the purpose. */
void plan_comm(const ModelSpec *m, const TrainSpec *t, const ClusterSpec *c, StrategyKind s,
               CommPlan *out);

#endif
