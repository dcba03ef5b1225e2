/* cli_gpu.h — the GPU side of `memplan run` and `memplan validate` (--device cuda, --cupti):
 * every rank checks for its GPU (one line "memplan: no CUDA device ..." and exit 1 when one is
 * missing, never a crash), --cupti measures the fixed overheads the planner assumes (CUDA
 * context, cuBLAS, NCCL: prof_overhead.h) before anything else touches the GPU, several ranks get
 * their NCCL communicator (bootstrapped over MPI by exec_comm), and rank 0 prints what CUPTI saw
 * next to the tracker and the measured overheads next to the planner's figures. */
#ifndef CLI_GPU_H
#define CLI_GPU_H

#include <stdio.h>

#include "exec_comm.h"
#include "exec_run.h"
#include "plan_gpu.h"
#include "prof_overhead.h"

typedef struct cJSON cJSON;

typedef struct {
    int cupti;               /* --cupti */
    int ngpu;                /* CUDA devices this rank sees */
    Comm *nccl;              /* the strategies' communicator on several ranks; NULL on one */
    ProfOverhead ov;         /* this rank's measurement (--cupti) */
    int ov_context, ov_nccl; /* which steps succeeded (context + cuBLAS; NCCL) */
    char ov_note[256];       /* why a step was not measured, "" if all were */
} CliGpu;

/* Every rank calls it, before anything else uses CUDA. Returns 0, or an exit status after rank
 * 0 printed one line (1: no GPU on some rank, or the communicator could not be created). */
int cli_gpu_start(CliGpu *g, Comm *control, int cupti, double timeout_s);
void cli_gpu_finish(CliGpu *g);   /* destroys the communicator; safe on a zeroed CliGpu */

/* Rank 0's tables ('#' lines and units rows): what CUPTI measured in the run, and the fixed
 * overheads against the planner's figures for cl (its --gpu preset and overrides). */
void cli_gpu_print_cupti(FILE *f, const ExecRunResult *r);
void cli_gpu_print_overheads(FILE *f, const CliGpu *g, const ClusterSpec *cl, int nranks);
/* The same as JSON: {"json of prof_cupti_json" | {"note": ...}} and
 * {"measured": prof_overhead_json | null, "planner": {...}, "note": ...}. */
cJSON *cli_gpu_cupti_json(const ExecRunResult *r);
cJSON *cli_gpu_overheads_json(const CliGpu *g, const ClusterSpec *cl, int nranks);

#endif
