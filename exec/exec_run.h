/* exec_run.h — the executor's run loop: K optimizer steps of GPT-2 under one data-parallel
 * strategy on a communicator, with every buffer tracked (prof_mem), every collective counted
 * (prof_comm), phases timed (prof_phase), and the measurements of all ranks gathered so rank 0
 * can report them (a table, JSON, `memplan validate`). Library code: it returns a status and
 * never exits; the caller decides (an out-of-memory failure inside a step leaves peers inside
 * collectives, so the caller then aborts the communicator: comm_abort).
 *
 * Per step: the one training step (exec_step.h: zero_grad; for each of accum micro-batches,
 * each rank its DistributedSampler shard of the step's seeded synthetic global batch of B·N·accum
 * rows, micro-batch a of rank r reading chunk a·N + r so a step sees the same rows whatever N and
 * accum are: forward, backward with the strategy's hooks, end of backward; the optimizer step);
 * then one control exchange (an all-gather, not counted as traffic: it is not part of the
 * training step) of the loss and a non-finite flag, so every rank agrees to stop on NaN/inf and
 * rank 0 can print the global mean loss. Phases are exec_step.h's (ExecPhase).
 *
 * The first step creates the lazily allocated state (gradients, AdamW m and v); peaks are then
 * reset, so the reported peaks are the steady state of steps 2..K (what the planner plans)
 * and the first step's peak is reported separately.
 *
 * On a GPU (device DEVICE_CUDA): every buffer in device memory through the same tracker (same
 * categories, same --mem-limit), the CUDA kernels on the device's compute stream, the strategy's
 * collectives on data_comm (NCCL) on the device's comm stream, each ordered after the compute
 * work queued before it; control traffic (the configuration check, the loss exchange, the
 * gathered measurements and trace) stays on c (MPI, host memory). Each step ends with the
 * compute stream synchronized, so step times are the GPU's. With cupti, a CUPTI session spans
 * setup and the steps, with phases "setup", "forward", "backward", "comm" (the end of backward:
 * waiting for the last collectives and using their results) and "optimizer", the compute stream
 * synchronized at each boundary so the GPU's work lands in the phase the host gave it. */
#ifndef EXEC_RUN_H
#define EXEC_RUN_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "exec_comm.h"
#include "exec_device.h"
#include "exec_gpt2.h"
#include "exec_step.h"
#include "exec_strategy.h"
#include "prof_comm.h"
#include "prof_cupti.h"
#include "prof_mem.h"
#include "prof_phase.h"

/* Test-only faults (--fault): a rank stalls (sleeps past every timeout) or dies (_exit) at the
 * start of a step, so the others must time out or be torn down by mpirun. */
typedef enum { EXEC_FAULT_NONE = 0, EXEC_FAULT_STALL, EXEC_FAULT_EXIT } ExecFaultKind;
typedef struct {
    ExecFaultKind kind;
    int rank, step;
} ExecFault;

typedef struct {
    Gpt2Config model;
    ExecStrategyKind strategy;
    int micro_batch;          /* B per rank */
    int seq;                  /* T */
    int grad_accum;           /* micro-batches per optimizer step */
    int steps;                /* optimizer steps */
    double bucket_bytes;      /* DDP bucket cap; 0: 25 MiB */
    size_t mem_limit;         /* bytes; 0: none */
    uint64_t seed;
    Gpt2AdamW opt;
    const char *trace_path;   /* Chrome trace written by rank 0; NULL: none */
    const char *dump_path;    /* final parameters, fp32, units 0..L+1 (rank 0 writes); NULL */
    FILE *progress;           /* rank 0's per-step lines; NULL: none */
    ExecFault fault;
    DeviceKind device;        /* DEVICE_HOST (default) or DEVICE_CUDA (GPU local_rank % GPUs) */
    /* DEVICE_CUDA on several ranks: the NCCL communicator (comm_create(COMM_NCCL)) of the same
     * ranks as c, which the caller creates once every rank has found its GPU; NULL otherwise.
     * exec_run sets its counters and streams for the run and resets them after. */
    Comm *data_comm;
    int cupti;                /* DEVICE_CUDA: trace the run with CUPTI (prof_cupti.h) */
} ExecRunConfig;

/* CUPTI memory cross-check: the tolerance its "within" flag reports (informational: CUPTI also
 * sees NCCL's and cuBLAS's own buffers, which no tracker counts). */
#define EXEC_CUPTI_MEM_TOLERANCE 0.05

/* B 4, T = max_seq, accum 1, 10 steps, DDP, 25 MiB buckets, seed 1337, AdamW lr 1e-3,
 * betas (0.9, 0.999), eps 1e-8, weight decay 0, the host (model fields zeroed: set a preset). */
void exec_run_config_defaults(ExecRunConfig *c);

typedef enum {
    EXEC_RUN_OK = 0,
    EXEC_RUN_CONFIG_MISMATCH,   /* ranks were started differently; clean on every rank */
    EXEC_RUN_OOM,               /* out of memory (the report is in report) */
    EXEC_RUN_NONFINITE,         /* NaN or inf loss at fail_step; clean on every rank */
    EXEC_RUN_ERROR,             /* anything else (message) */
} ExecRunStatus;

typedef enum { EXEC_STATE_PARAMS = 0, EXEC_STATE_GRADS, EXEC_STATE_OPTIMIZER, EXEC_STATE_COUNT } ExecStateKind;

#define EXEC_RUN_PHASES 16   /* the phase timer's phases kept in phases[] */

typedef struct {
    ExecRunStatus status;
    int fail_step;            /* 1-based step of the failure (0: setup) */
    int bad_rank;             /* CONFIG_MISMATCH: the first rank that differs from rank 0 */
    int needs_abort;          /* 1: peers may be inside a collective; abort the communicator */
    char message[512];        /* a sentence for the user */
    char *report;             /* OOM: prof_mem_print_oom's report (malloc'd), else NULL */

    int nranks, steps_done;
    double *loss;             /* per step: global mean loss, nats */
    double *step_ms;          /* per step: wall time, ms (rank 0) */
    double tokens_per_step;   /* B·T·accum·N */

    /* memory, bytes: each value is the maximum over ranks; at_peak is the category split at the
       moment of the total peak on peak_rank. Steady state = steps 2..K (step 1 when K = 1). */
    double peak_total, peak_total_first;
    double peak[MEM_CATEGORY_COUNT];
    double at_peak[MEM_CATEGORY_COUNT];
    int peak_rank;
    char peak_phase[32];      /* the tracker's name of the phase of the peak on peak_rank */
    double phase_peak[EXEC_PHASE_PARTS];   /* by ExecPhase: forward, backward, optimizer */
    double states[EXEC_STATE_COUNT];   /* params, grads, optimizer allocated at the end of the run */
    double model_states;      /* Σ states */
    size_t mem_limit;

    /* collectives, rank 0 (every rank does the same): the whole run and the last step */
    CollStats coll_total[COLL_COUNT];
    CollStats coll_step[COLL_COUNT];
    CollStats coll_step_phase[COLL_COUNT][EXEC_PHASE_PARTS];   /* last step by part (ExecPhase) */

    /* time, rank 0 (phase timer stats over the whole run, in order of first use, for tables) */
    PhaseStat phases[EXEC_RUN_PHASES];
    int nphases;
    int64_t phase_count[EXEC_PHASE_COUNT];   /* how often each ExecPhase ran (0: never) */
    double seconds;           /* all steps */
    double steady_ms;         /* mean step time over steps 2..K (step 1 when K = 1) */
    double *step_phase_s;     /* per step, each phase's seconds in that step:
                                 [(step - 1) * EXEC_PHASE_COUNT + p] for ExecPhase p */
    double steady_cpu_ms;     /* the same steps' CPU time of this process (all its threads), per
                                 step: what the step costs whatever else shares the cores */

    /* what ran */
    int buckets;              /* exec_strategy_buckets */
    size_t shard_elems;
    int64_t params;           /* Ψ */
    char device_name[96];     /* rank 0's device: "host" or the GPU's name */

    /* CUPTI (cfg->cupti on a GPU): rank 0's session over setup and every step */
    int cupti;                /* 1: a session ran and these are valid */
    char cupti_note[256];     /* why none ran (cupti asked for), else "" */
    ProfCuptiPhase cupti_phase[8];   /* in order of first use: setup, forward, backward, comm, optimizer */
    int cupti_nphases;
    ProfCuptiPhase cupti_total;
    CuptiMemSummary cupti_memory;
    CuptiMemCheck cupti_mem_check;   /* CUPTI's peak vs the tracker's (steady-state) peak */
    int64_t cupti_dropped;    /* records CUPTI lost */
    char *cupti_json;         /* prof_cupti_json (unformatted, malloc'd), NULL if none */
} ExecRunResult;

/* Runs cfg on c (every rank calls it with its own flags; the hash is checked first). c's
 * counters are replaced for the run and restored to NULL. Returns res->status (0 = OK). */
int exec_run(Comm *c, const ExecRunConfig *cfg, ExecRunResult *res);
void exec_run_result_free(ExecRunResult *r);
const char *exec_run_status_name(ExecRunStatus s);   /* "ok", "config-mismatch", ... */

#endif
