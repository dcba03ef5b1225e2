/* exec_bn.h — one BatchNorm2d layer of the CNN runtime, plain or synchronized: SyncBatchNorm as
 * PyTorch implements it (torch/nn/modules/_functions.py), on the split kernels of kern_cnn.h
 * with its two collectives through the comm interface (so the profiler counts them):
 *   forward  (training) kern_bn_stats -> all-gather of every rank's [mean | invstd | count]
 *            row (2C+1 fp32 per rank; counts may differ: unequal per-rank batches) ->
 *            kern_bn_combine_stats -> running statistics from the global unbiased variance ->
 *            kern_bn_forward_apply;
 *   backward kern_bn_backward_reduce -> all-reduce (sum) of [sum_dy | sum_dy_xmu] (2C fp32) ->
 *            kern_bn_backward_apply with the total count.
 * Plain BatchNorm2d (sync NULL, or a communicator of one rank, as SyncBatchNorm falls back to
 * F.batch_norm there) uses kern_batchnorm_forward/backward; evaluation mode uses the running
 * statistics and never communicates. The gather and reduce buffers are MEM_COMM, allocated for
 * the call (as PyTorch allocates them per call). Weight and bias gradients are this rank's share
 * (DDP's gradient all-reduce sums them), as in PyTorch. */
#ifndef EXEC_BN_H
#define EXEC_BN_H

#include <stddef.h>

#include "exec_comm.h"
#include "exec_kern.h"
#include "prof_mem.h"

typedef struct {
    int C;                               /* channels */
    const float *weight, *bias;          /* (C) affine parameters; NULL: 1 and 0 */
    float *running_mean, *running_var;   /* (C) buffers, updated by the training forward */
    float *num_batches;                  /* num_batches_tracked (1 float, += 1); may be NULL */
    Comm *sync;                          /* SyncBatchNorm over these ranks; NULL: BatchNorm2d */
    MemTracker *mt;                      /* for the collective buffers */
    double *coll_s;                      /* [forward, backward]: wall seconds inside SyncBN's two
                                            collectives are added here (waits for peers included);
                                            NULL: not timed */
    /* Where the layer runs (all three NULL: the host, kern_cnn.h). On a GPU every pointer above
     * but coll_s is device memory, the kernels are the CUDA table's on the device's compute
     * stream, and the counts the forward needs on the host (Σ counts over ranks, one float per
     * rank) and num_batches (+= 1) go through small exec_device_copy calls. */
    const ExecKernels *k;                /* exec_kernels(kind); NULL: the CPU table */
    void *stream;                        /* the device's compute stream; NULL on the host */
    Device *dev;                         /* NULL: host memory */
} ExecBnLayer;

/* What the training forward keeps for the backward. */
typedef struct {
    float *mean, *invstd;   /* (C) each, the caller's storage: the statistics the forward applied
                               (global under SyncBN), invstd = 1/sqrt(biased var + eps) */
    double count;           /* Σ N·H·W over the ranks (this rank's alone for plain BN) */
} ExecBnSaved;

/* 1 when this layer communicates in training: sync set and more than one rank. */
int exec_bn_is_synced(const ExecBnLayer *l);

/* out (N,C,H,W) from inp (N,C,H,W). training = 1: batch statistics (global under SyncBN) into
 * saved, running statistics updated with momentum 0.1 and the unbiased variance; training = 0:
 * the running statistics, saved untouched. N may differ between ranks (and be 0 on a rank under
 * SyncBN); the total count must be >= 2 in training (PyTorch: "Expected more than 1 value per
 * channel when training"). 0, or -1 with a sentence in err. */
int exec_bn_forward(const ExecBnLayer *l, int training, float *out, ExecBnSaved *saved,
                    const float *inp, int N, int H, int W, char *err, size_t errlen);
/* dinp += , dweight += , dbias += (any may be NULL) from dout and the forward's inp and saved.
 * Under SyncBN every rank must call it (it all-reduces). 0, or -1 with a sentence in err. */
int exec_bn_backward(const ExecBnLayer *l, float *dinp, float *dweight, float *dbias,
                     const float *dout, const float *inp, const ExecBnSaved *saved, int N, int H,
                     int W, char *err, size_t errlen);

#endif
