/* cli_harness.h — the driver of the PyTorch ground-truth harness (bench/torch/harness.py): where
 * its venv and script are, the torchrun command line for one setup, running it on CPU ranks with
 * a timeout in a process group of its own, and reading its result file (the setup a saved result
 * was measured with, and the harness's names for phases and collectives).
 *
 * Why in cli/: its one user is `memplan validate --against torch` (cli_torch.c), in the `memplan`
 * front end, which links libc, cJSON and the planner only so that it starts in a millisecond
 * (Makefile FRONT_SRC: no MPI, BLAS or CUDA); this module is plain C over fork/exec and cJSON.
 * Not bench/: its C files are benchmark programs (each becomes one); not planner/, exec/ or
 * profiler/: libraries that start no programs. */
#ifndef CLI_HARNESS_H
#define CLI_HARNESS_H

#include <limits.h>
#include <stddef.h>

#include "cli_setup.h"
#include "plan_comm.h"
#include "plan_memory.h"
#include "plan_strategy.h"
#include "plan_train.h"

typedef struct cJSON cJSON;

/* One setup as the harness runs it (its flags). */
typedef struct {
    char model[PATH_MAX];    /* zoo name or config path, as the harness is given it */
    StrategyKind strategy;
    long long ranks, batch, seq, accum, steps, shard_group;
    PrecisionKind precision;
    CkptKind ckpt;
    int ckpt_every;          /* every:N's N (full: 1) */
    AttnKind attn;
    double dropout;
    double bucket_mb;        /* DDP bucket_cap_mb, MiB; 0: not passed (DDP's own 25 MiB, 1 MiB first) */
    int gabv;                /* gradient_as_bucket_view */
    int zero_grad_keep;      /* 1: zero_grad(set_to_none=False) ("zeros"), 0: "none" */
    int loop_trainer;        /* 1: HF Trainer's loop ("hf"), 0: the common loop ("common") */
    FsdpSyncKind fsdp_sync;  /* fsdp-* under accumulation: every | last */
    DsKnobs ds;              /* DeepSpeed's sizes (zero*: the harness's --ds-zero); 0 = its default */
    int tp, sp;              /* the harness's --tp (1: none) and --sp on (setup.tp, setup.sp) */
    int loss_parallel;       /* the harness's --loss-parallel on (setup.loss_parallel; older results: off) */
    int ep;                  /* the harness's --ep (1: none; setup.ep) */
    int moe_skewed;          /* its --moe-routing: 1 skewed (every row to the first experts: under --ep
                                the busiest rank receives ep times the rows), 0 balanced under --ep
                                (the router's own choice without it); setup.moe_routing */
    FinetuneSpec ft;         /* PEFT LoRA (the harness's --lora*, setup.lora); rank 0 = none */
    int fsdp_impl;           /* fsdp-*: 1 FullyShardedDataParallel, 2 fully_shard (0 reads as 2) */
    FsdpKnobs fsdp1;         /* --fsdp 1's knobs (the harness's --fsdp-min-params, ...) */
    char alloc_trace[PATH_MAX + 32];   /* the harness's --alloc-trace (rank 0's allocations); "" none */
} HarnessSetup;

/* The harness's --ds-zero object for k (only what k sets), as JSON text into buf; "" when k
   sets nothing. */
const char *cli_harness_ds_zero(const DsKnobs *k, char *buf, size_t len);

/* The harness's names for --loop and --zero-grad. */
const char *cli_harness_loop_name(int loop_trainer);    /* "hf", "common" */
const char *cli_harness_zero_grad_name(int keep);       /* "zeros", "none" */

/* Where the harness runs. */
typedef struct {
    char venv[PATH_MAX];       /* scripts/torch_env.sh's venv */
    char python[PATH_MAX + 16];
    char harness[PATH_MAX];
} HarnessEnv;

/* The venv scripts/torch_env.sh makes (MEMPLAN_TORCH_ENV, else $XDG_CACHE_HOME/memplan/torch-venv,
 * else ~/.cache/memplan/torch-venv) and its python (MEMPLAN_TORCH_PYTHON names another), and the
 * harness (MEMPLAN_TORCH_HARNESS, else <dir of this executable>/../bench/torch/harness.py).
 * 0, or -1 with a sentence for the user in err (what is missing and how to install it). */
int cli_harness_locate(HarnessEnv *env, char *err, size_t errlen);

/* Runs the harness for s under torchrun on s->ranks CPU ranks, its result written to out_json
 * and torchrun's output to log, for at most timeout_s seconds (SIGINT/SIGTERM stop it too).
 * Returns the result (the caller deletes it) when the run succeeded, else NULL with err set
 * and the log's last lines printed to stderr. *seconds: how long it ran. */
cJSON *cli_harness_run(const HarnessEnv *env, const HarnessSetup *s, const char *out_json, const char *log,
                       long long timeout_s, double *seconds, char *err, size_t errlen);
int cli_harness_interrupted(void);   /* 1 once SIGINT or SIGTERM stopped a run */

/* ---- reading a result ---- */

/* The JSON of a result file; NULL with the reason in err, a phrase to follow the file's name:
 * "not found", "is a directory, not a result file", "is empty", "is not JSON (at line L, column
 * C)", "cannot be read: <why>". */
cJSON *cli_harness_read(const char *path, char *err, size_t errlen);
/* 0 if result has what a harness result has (status; a finished run also model, setup.strategy
 * and per_rank; a failed one error), else -1 with "is not a harness result (<what is missing>)". */
int cli_harness_check_shape(const cJSON *result, char *err, size_t errlen);
int cli_harness_ok(const cJSON *result);   /* 1 if the run succeeded ("status": "ok") */
/* 0 if every value of a finished run's result that memplan reads is one it can use, else -1
 * with "<key> <value>: <why>" in err. The setup's values go through the parser of the flag each
 * was run with (cli_parse_setup with `flags`, the command's own options), so a file and the
 * command line take the same ranges; the measured figures (bytes, counts, ranks) must be whole
 * numbers in [0, 2^53], so that nothing printed from them can overflow. */
int cli_harness_check_values(const cJSON *result, const CliExtra *flags, char *err, size_t errlen);
/* The setup a result was measured with. 0, or -1 with err. */
int cli_harness_setup_of(const cJSON *result, HarnessSetup *s, char *err, size_t errlen);
/* A number or string field of o (o may be NULL): dflt when absent or of another type. */
double cli_harness_num(const cJSON *o, const char *key, double dflt);
const char *cli_harness_str(const cJSON *o, const char *key, const char *dflt);

/* The harness's phase names: the planner's phase of a memory peak measured there, or -1; the
 * phase of a collective counted there (a PhaseKind), or -1; and a PhaseKind's harness name. */
int cli_harness_peak_phase(const char *name);
int cli_harness_comm_phase(const char *name);
const char *cli_harness_comm_phase_name(PhaseKind p);
/* A collective named in a result: planner/plan_coll.h's coll_by_name (the same names). */

#endif
