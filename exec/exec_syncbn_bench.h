/* exec_syncbn_bench.h — the engine of `memplan bench syncbn`: the price of SyncBatchNorm,
 * measured and predicted (cli/cli_bench.c keeps the flags, the table, the JSON and the plot).
 *
 * For each rank count n (sub-communicators of the first n ranks of the job; the other ranks wait
 * asleep, so they leave the cores to the working ones) and each per-GPU batch b, two copies of
 * the CNN are trained under DDP on the same seeded images, one with BatchNorm and one converted
 * to SyncBatchNorm before wrapping; their steps (exec_step.h) alternate (BN, SyncBN, BN, ...) so
 * that both see the same machine. Each step is timed per phase (forward; backward with the end
 * of DDP's gradient reduction; the optimizer step) on every rank, the slowest rank counts, and
 * the median over the measured steps is reported; the overhead is the median of the paired
 * step differences SyncBN - BN (step k of one with step k of the other). The extra collectives
 * are the SyncBN run's counted collectives minus the BN run's, per step.
 *
 * The prediction: before the steps, each sub-communicator measures MPI all-reduce and
 * all-gather at SyncBN's message sizes and at 4 MiB; the planner's alpha-beta model (a latency
 * per ring step and a bandwidth: plan_coll_seconds) is fitted to them, and the planner then
 * predicts the step of the same model shape (plan_model_resnet) under DDP in fp32, with and
 * without SyncBN: plan_comm's SyncBN collective time, and plan_sim's step-time difference (the
 * compute rate set from the measured BN step, so the simulation's buckets overlap as here). */
#ifndef EXEC_SYNCBN_BENCH_H
#define EXEC_SYNCBN_BENCH_H

#include <stdint.h>
#include <stdio.h>

#include "exec_cnn.h"
#include "exec_comm.h"
#include "prof_comm.h"

typedef struct { double fwd, bwd, opt, step; } SyncbnPhases;   /* ms */

/* One rank count's link, measured and fitted. */
typedef struct {
    int ranks;
    double ar_small_b, ag_small_b, ar_large_b, ag_large_b;   /* payload bytes (the planner's) */
    double ar_small_s, ag_small_s, ar_large_s, ag_large_s;   /* median seconds, slowest rank */
    double alpha_s, bw_gbps;                                 /* fitted: per ring step; decimal GB/s */
} SyncbnLink;

/* One rank count and per-GPU batch. */
typedef struct {
    int ranks, batch;
    SyncbnPhases bn, sync;                 /* medians over the measured steps, slowest rank */
    SyncbnPhases diff;                     /* medians of the paired differences SyncBN - BN (the
                                              steps alternate, so pairs share the machine's state) */
    double diff_se;                        /* standard error of the step difference, ms */
    double coll_min_ms[2], coll_mean_ms[2];  /* SyncBN run: time inside SyncBN's collectives per
                                                step (forward, backward), the rank that waited
                                                least and the mean over ranks; medians */
    double extra_count[COLL_COUNT];     /* per step, the SyncBN run minus the BN run */
    double extra_bytes[COLL_COUNT];
    double pred_count, pred_bytes;         /* plan_comm's SyncBN collectives per step */
    double pred_comm_ms;                   /* plan_comm's SyncBN time per step */
    double pred_bn_ms, pred_sync_ms;       /* plan_sim's steps */
} SyncbnRecord;

typedef struct {
    CnnConfig cfg;             /* the model at the image size to run */
    const int *batches;        /* per-GPU batches, nb of them, in the order they run */
    int nb;
    const int *ranks;          /* rank counts, nr of them, each in [2, the job's ranks] */
    int nr;
    int steps, warmup;         /* measured steps per mode (>= 1), and steps before */
    double bucket_bytes;       /* DDP's bucket cap; 0: 25 MiB */
    uint64_t seed;             /* parameters and synthetic images */
    FILE *progress;            /* rank 0 says what it measured ("# measured ..."); NULL: nothing */
} SyncbnBench;

/* Every rank of world calls it (the MPI backend); links[nr] and records[nr · nb] (rank count
 * major) land on rank 0. 0, or -1 with a sentence in err when a rank could not set up (every
 * rank returns together); a failure inside a training step aborts the job (peers may be inside
 * a collective). */
int exec_syncbn_bench(Comm *world, const SyncbnBench *b, SyncbnLink *links, SyncbnRecord *records, char *err,
                      size_t errlen);

#endif
