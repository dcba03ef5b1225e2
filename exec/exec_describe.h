/* exec_describe.h — a description of the device the engine runs on, in the terms the planner's
 * time model uses (plan_sim: a GEMM rate, a memory bandwidth for elementwise passes, the
 * optimizer's rate, and per collective a latency per ring step and a bus bandwidth, plus what a
 * collective costs on CPU ranks when the ranks compute), measured on the spot so that
 * `memplan validate` can set the planner's cluster from it and compare predicted with measured
 * step times. docs/validation.md "Time rows in validate".
 *
 * On the CPU every rank measures at once, with the run's BLAS threads (the ranks share the cores
 * during the run too). Of the compute figures the slowest rank's is kept (a collective waits for
 * it), or the ranks' mean where they outnumber the node's cores (they share the cores as one
 * pool: a rank that waits yields its share); of the collectives the slowest rank's. The
 * compute figures come from the step itself, replayed in rounds for at least 0.3 s (the first
 * round warms up); each part's median round counts, so that a burst of other work on a shared
 * machine, which hits a few rounds, does not (the collectives, the optimizer: medians too):
 *   gemm_flops  the step's GEMMs: every linear layer's forward, input-gradient and
 *               weight-gradient product (the LM head's too) as cblas_sgemm in the engine's
 *               orientation, each timed for at least 1 ms with operands taken from the next of
 *               several copies beyond the L2 cache (a step's operands were written long
 *               before), a product above 4 GFLOP on a slice of its longest dimension, scaled;
 *               and one layer's attention products in the order and operand layout of
 *               kern_attention_forward_fast / _backward_fast (per batch and head, causal
 *               blocks of KERN_FAST_ATT_BLOCK rows). Σ FLOPs / Σ seconds, weighted as the step
 *               makes them (L layers, one head), FLOP/s per rank;
 *   mem_bw      the step's elementwise work with the engine's own kernels (the kernel table:
 *               LayerNorm, GELU, residual, softmax + cross-entropy, embeddings, bias gradients;
 *               plus the bias rows copied before each biased GEMM, the zeroed scratch and the
 *               attention softmax's passes): one block and the head on tensors of the step's
 *               sizes, two block copies used in turn. Bytes as the planner counts them
 *               (plan_layer_mem_bytes: 27h + 2as forward, 47h + 3as backward per token and
 *               block, the head 5V + 14h) per second of the kernels, so that the arithmetic of
 *               exp/tanh-heavy kernels is in it (they run at about half a plain pass's
 *               bandwidth on the development CPU);
 *   opt_bw      the optimizer's kernel (the engine's AdamW) over the rank's optimizer elements
 *               (at most 4 M), 28 bytes read + written per element per second, as the planner
 *               counts the step;
 *   coll_*      all-reduce, reduce-scatter and all-gather through exec_comm (the engine's path)
 *               at 64 KiB and at the step's collective size (4 to 64 MiB): bw from the large
 *               one's bus bytes, alpha from what the small one takes beyond its bus bytes, per
 *               ring step (2(n-1) steps for an all-reduce, n-1 otherwise), as `memplan bench
 *               syncbn` fits them (plan_coll_seconds);
 *   sync_s      what a small all-reduce costs beyond its alpha-beta time when every rank comes
 *               to it from a GEMM loop of about a block's forward (at most 20 ms): the loop and
 *               the collective together, less the slowest rank's loop (ranks that share cores
 *               arrive apart); median of 9, the slowest rank's: the planner's base latency per
 *               collective. 0 when the node's ranks outnumber its cores: their compute rates
 *               are already the pool's (a rank that computes has its share of the cores), so
 *               the spread in which early ranks wait for late ones is the same time slicing,
 *               the late ranks computing on the cores the early ones yield; charged per
 *               collective it was counted twice (docs/validation.md "Time rows");
 *   steal       how much compute a rank loses per second of an all-reduce (the step's size, at
 *               most 16 MiB) that runs, issued non-blocking on exec_comm's progress thread, while
 *               it computes a GEMM loop twice the all-reduce's time: (t(loop + collective) -
 *               t(loop)) / t(collective alone), at least 0, median of 9, the slowest rank's. On
 *               CPU ranks the copies need the cores the GEMMs use;
 *   issue_s     what issuing a small all-reduce non-blocking before that GEMM loop and waiting
 *               after it adds to the loop (the hand-over to the progress thread, its wake-up and
 *               the caches it disturbs), measured against the same loop with the collective
 *               blocking after it, less the collective's own time (so the ranks' arrival spread,
 *               which sync_s charges to every collective, is not counted twice); per repetition
 *               over ranks as compute is (the slowest rank's, the mean when the ranks outnumber
 *               the cores), then the mean of 9 repetitions, not a median, because it is bimodal
 *               (most issues cost next to nothing, about one in nine a scheduler slice): charged
 *               to compute for every collective the step issues to run behind compute.
 * A GPU run fills the same struct from CUPTI (kernel time of the GEMMs, the optimizer's kernels,
 * the NCCL kernels); kind says which. */
#ifndef EXEC_DESCRIBE_H
#define EXEC_DESCRIBE_H

#include <stddef.h>

#include "exec_comm.h"
#include "exec_gpt2.h"

enum { DESC_AR = 0, DESC_RS, DESC_AG, DESC_NCOLL };

typedef struct {
    char kind[8];                  /* "cpu" */
    int ranks;                     /* ranks measured together */
    int pooled;                    /* 1: the node's ranks outnumber its cores and share them */
    double gemm_flops;             /* FLOP/s per rank over the step's GEMM mix */
    double gemm_calls;             /* GEMM calls of one micro-step (the mix) */
    double mem_bw;                 /* bytes/s per rank, read + written, elementwise passes */
    double opt_bw;                 /* bytes/s per rank, the optimizer's kernel */
    double coll_alpha_s[DESC_NCOLL];   /* seconds per ring step */
    double coll_bw[DESC_NCOLL];        /* bus bytes/s */
    double alpha_s, bw;            /* the three collectives averaged (one link) */
    double sync_s;                 /* seconds per collective when the ranks arrive from compute */
    double steal;                  /* compute seconds lost per second of overlapping collective */
    double issue_s;                /* compute seconds per small collective issued behind compute */
    double seconds;                /* wall time the measurement took */
} DeviceDesc;

/* What the run will do: the model, the micro-batch B x T, and the optimizer elements of this
 * rank (its shard under ZeRO, every parameter under DDP). */
typedef struct {
    const Gpt2Config *model;
    int B, T;
    size_t opt_elems;
    size_t coll_bytes;   /* a typical collective's payload (DDP: a bucket; ZeRO-1/2: the reduce
                            bucket; ZeRO-3: a block): the bandwidth is measured at it (4-64 MiB) */
} DescStep;

/* Measures the CPU description on every rank of c (a collective call: all ranks, same
 * arguments). 0, or -1 with a message in err. */
int exec_describe_cpu(Comm *c, const DescStep *step, DeviceDesc *d, char *err, size_t len);

/* a := the descriptions a and b (taken before and after a run, so that together they bracket
 * it) combined. Each rate (GEMM, elementwise, optimizer, bus bandwidths): on ranks with a core
 * each the higher of the two, since a burst of other work on a shared machine only lowers a rate
 * and often lasts longer than one description's window; on pooled ranks their harmonic mean
 * (the average time), since there the two differ by the time slicing the run sees as well, and
 * the higher would pick the luckier slicing. The per-collective costs (latencies, sync, steal,
 * issue) their mean; seconds = the sum. */
void exec_describe_combine(DeviceDesc *a, const DeviceDesc *b);

static inline const char *exec_describe_coll_name(int k)
{
    return k == DESC_AR ? "all_reduce" : k == DESC_RS ? "reduce_scatter" : "all_gather";
}

#endif
