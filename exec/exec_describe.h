/* exec_describe.h — a description of the device the engine runs on, in the terms the planner's
 * time model uses (plan_sim: a compute rate, a memory bandwidth, and per collective a latency per
 * ring step and a bus bandwidth), measured on the spot so that `memplan validate` can set the
 * planner's cluster from it and compare predicted with measured step times.
 *
 * On the CPU every rank measures at once (the ranks share the cores during the run too), and the
 * slowest rank's figure is kept:
 *   gemm_flops  cblas_sgemm at the model's MLP shape (tokens x 4C x C, forward orientation),
 *               the mean over a 0.25 s window (sustained: on a shared machine the rank's share
 *               of a core is in it, as it is in the run), FLOP/s per rank;
 *   mem_bw      a STREAM triad a[i] = b[i] + s·c[i] over 3 x 16 MiB, bytes read + written per
 *               second (12 bytes an element), mean over a 0.25 s window: the planner's optimizer
 *               step is counted the same way (bytes read + bytes written);
 *   coll_*      all-reduce, reduce-scatter and all-gather through exec_comm (the engine's path)
 *               at 64 KiB and 4 MiB, mean of 5 (small) and 3 (large): bw from the large
 *               one's bus bytes, alpha from what the small one takes beyond its bus bytes,
 *               per ring step (2(n-1) steps for an all-reduce, n-1 otherwise), as `memplan
 *               bench syncbn` fits them (plan_coll_seconds is the model).
 * A GPU run fills the same struct from CUPTI (kernel time of the GEMMs, the optimizer's kernels,
 * the NCCL kernels); kind says which. */
#ifndef EXEC_DESCRIBE_H
#define EXEC_DESCRIBE_H

#include <stddef.h>

#include "exec_comm.h"

enum { DESC_AR = 0, DESC_RS, DESC_AG, DESC_NCOLL };

typedef struct {
    char kind[8];                  /* "cpu" */
    int ranks;                     /* ranks measured together */
    double gemm_flops;             /* FLOP/s per rank */
    double mem_bw;                 /* bytes/s per rank, read + written */
    double coll_alpha_s[DESC_NCOLL];   /* seconds per ring step */
    double coll_bw[DESC_NCOLL];        /* bus bytes/s */
    double alpha_s, bw;            /* the three collectives averaged: the planner has one link */
} DeviceDesc;

/* Measures the CPU description on every rank of c (a collective call: all ranks, same
 * arguments). tokens = B·T of the run, d_model = C. 0, or -1 with a message in err. */
int exec_describe_cpu(Comm *c, int tokens, int d_model, DeviceDesc *d, char *err, size_t len);

static inline const char *exec_describe_coll_name(int k)
{
    return k == DESC_AR ? "all_reduce" : k == DESC_RS ? "reduce_scatter" : "all_gather";
}

#endif
