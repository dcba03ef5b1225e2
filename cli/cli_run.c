/* cli_run.c — `memplan run` and `memplan validate`: parse (the shared planning flags plus the
 * executor's own), start the communicator (MPI under mpirun, otherwise one rank alone), run
 * the executor (exec/exec_run.h), and print on rank 0: a progress line per step, then a
 * profiler summary (run) or predicted versus measured side by side (validate). Exit status:
 * 0 success, 1 a failed run or a failed validation, 2 a usage error.
 *
 * --device cuda runs the same step on the GPU (cli_gpu.h: the GPU check, the NCCL communicator,
 * --cupti's overheads and CUPTI tables); without a GPU it exits 1 with one line. */
#include "cli_run.h"

#include <cjson/cJSON.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli_gpu.h"
#include "cli_io.h"
#include "cli_ranks.h"
#include "cli_setup.h"
#include "cli_time.h"
#include "exec_comm.h"
#include "exec_describe.h"
#include "exec_run.h"
#include "exec_strategy.h"
#include "plan_comm.h"
#include "plan_memory.h"
#include "plan_strategy.h"
#include "plan_step.h"
#include "plan_util.h"

/* ---- the executor's flags ---- */

enum { OPT_STEPS = 2000, OPT_BUCKET_MB, OPT_MEM_LIMIT, OPT_TIMEOUT, OPT_TRACE, OPT_SEED, OPT_LR,
       OPT_WD, OPT_DUMP, OPT_FAULT, OPT_DEVICE, OPT_CUPTI };

static const struct option RUN_OPTIONS[] = {
    {"steps", required_argument, 0, OPT_STEPS},
    {"bucket-mb", required_argument, 0, OPT_BUCKET_MB},
    {"mem-limit", required_argument, 0, OPT_MEM_LIMIT},
    {"timeout", required_argument, 0, OPT_TIMEOUT},
    {"trace", required_argument, 0, OPT_TRACE},
    {"seed", required_argument, 0, OPT_SEED},
    {"lr", required_argument, 0, OPT_LR},
    {"weight-decay", required_argument, 0, OPT_WD},
    {"dump-params", required_argument, 0, OPT_DUMP},
    {"fault", required_argument, 0, OPT_FAULT},
    {"device", required_argument, 0, OPT_DEVICE},
    {"cupti", no_argument, 0, OPT_CUPTI},
    {0, 0, 0, 0},
};

typedef struct {
    long long steps;          /* 0: the subcommand's default */
    double bucket_mb;         /* 0: 25 MiB */
    double mem_limit;         /* bytes, 0: none */
    double timeout;           /* s */
    const char *trace, *dump;
    long long seed;
    double lr, wd;
    ExecFault fault;
    DeviceKind device;        /* --device: cpu (DEVICE_HOST) or cuda */
    int cupti;
} RunFlags;

static int parse_fault(const char *a, ExecFault *f)
{
    const char *at = strchr(a, '@');
    if (!at) return -1;
    size_t n = (size_t)(at - a);
    if (n == 5 && strncmp(a, "stall", 5) == 0) f->kind = EXEC_FAULT_STALL;
    else if (n == 4 && strncmp(a, "exit", 4) == 0) f->kind = EXEC_FAULT_EXIT;
    else return -1;
    char *end;
    long r = strtol(at + 1, &end, 10);
    if (end == at + 1 || *end != ':' || r < 0) return -1;
    const char *s2 = end + 1;
    long st = strtol(s2, &end, 10);
    if (end == s2 || *end || st < 1) return -1;
    f->rank = (int)r;
    f->step = (int)st;
    return 0;
}

static int run_flag(void *ctx, int opt, const char *a, char *err, size_t errlen)
{
    RunFlags *f = ctx;
    long long v;
    switch (opt) {
    case OPT_STEPS:
        if (plan_parse_int(a, 1, 1000000, &v)) { snprintf(err, errlen, "--steps '%s' is not an integer in [1, 1000000]", a); return -1; }
        f->steps = v;
        return 0;
    case OPT_BUCKET_MB:
        if (plan_parse_double(a, 1e-3, 1e6, &f->bucket_mb)) { snprintf(err, errlen, "--bucket-mb '%s' is not a number of MiB in [0.001, 1e6]", a); return -1; }
        return 0;
    case OPT_MEM_LIMIT:
        if (*a && a[strlen(a) - 1] >= '0' && a[strlen(a) - 1] <= '9') {
            snprintf(err, errlen, "--mem-limit '%s' needs a unit (e.g. 64MiB; a bare number would be bytes)", a);
            return -1;
        }
        if (plan_parse_size(a, &f->mem_limit) || f->mem_limit < 1) {
            snprintf(err, errlen, "--mem-limit '%s' is not a size (e.g. 64MiB; a bare M means MiB)", a);
            return -1;
        }
        return 0;
    case OPT_TIMEOUT:
        if (plan_parse_double(a, 0.1, 86400, &f->timeout)) { snprintf(err, errlen, "--timeout '%s' is not a number of seconds in [0.1, 86400]", a); return -1; }
        return 0;
    case OPT_TRACE: f->trace = a; return 0;
    case OPT_DUMP: f->dump = a; return 0;
    case OPT_SEED:
        if (plan_parse_int(a, 0, 9007199254740992LL, &f->seed)) { snprintf(err, errlen, "--seed '%s' is not a non-negative integer", a); return -1; }
        return 0;
    case OPT_LR:
        if (plan_parse_double(a, 0, 1e30, &f->lr)) { snprintf(err, errlen, "--lr '%s' is not a learning rate in [0, 1e30]", a); return -1; }
        return 0;
    case OPT_WD:
        if (plan_parse_double(a, 0, 10, &f->wd)) { snprintf(err, errlen, "--weight-decay '%s' is not in [0, 10]", a); return -1; }
        return 0;
    case OPT_FAULT:
        if (parse_fault(a, &f->fault)) { snprintf(err, errlen, "--fault '%s' is not stall@RANK:STEP or exit@RANK:STEP", a); return -1; }
        return 0;
    case OPT_DEVICE:
        if (strcmp(a, "cpu") == 0) f->device = DEVICE_HOST;
        else if (strcmp(a, "cuda") == 0) f->device = DEVICE_CUDA;
        else { snprintf(err, errlen, "--device '%s' is not cpu or cuda", a); return -1; }
        return 0;
    case OPT_CUPTI: f->cupti = 1; return 0;
    default: return 1;
    }
}

static void print_help(FILE *f, const char *cmd)
{
    if (strcmp(cmd, "run") == 0)
        fprintf(f, "memplan run — train GPT-2 for K steps under one data-parallel strategy on real collectives\n\n"
                   "Usage: mpirun -np N memplan run --model gpt2-tiny --strategy ddp|zero1|zero2|zero3 [options]\n"
                   "       (without mpirun: one rank)\n\n");
    else
        fprintf(f, "memplan validate — plan the setup with the engine's layout, run it, print predicted vs measured\n\n"
                   "Usage: mpirun -np N memplan validate --model gpt2-tiny [--strategy all|ddp,zero1,...] [options]\n\n"
                   "Fails (exit 1) if model-state bytes or collective bytes differ at all, or the peak by more than 5%%.\n\n");
    fprintf(f, "Executor options:\n"
               "  --model NAME           a GPT-2 preset: gpt2-tiny, gpt2-mini, gpt2, gpt2-medium, gpt2-large, gpt2-xl\n"
               "  --strategy S           ddp (run default), zero1, zero2, zero3; validate: all (default) or a list\n"
               "  --batch B              micro-batch per rank (default 1)\n"
               "  --seq T                sequence length (default: the model's context)\n"
               "  --grad-accum A         micro-batches per optimizer step (default 1)\n"
               "  --steps K              optimizer steps (default: run 10, validate 6: steps 2..K are the steady state;\n"
               "                         validate judges a step time from 5 or more steady steps of 30 ms or more)\n"
               "  --bucket-mb X          DDP bucket cap in MiB (default 25; the first bucket is 1 MiB)\n"
               "  --mem-limit SIZE       emulate a device of SIZE (binary units: 64MiB, 2G = 2 GiB); an allocation\n"
               "                         that crosses it fails the step with an out-of-memory report\n"
               "  --timeout S            seconds any collective may wait before the job aborts (default 300)\n"
               "  --trace FILE           Chrome trace of every rank (open in chrome://tracing or Perfetto)\n"
               "  --json[=FILE]          the summary as JSON (progress lines then go to stderr)\n"
               "  --seed S               data and initialisation seed (default 1337)\n"
               "  --lr X                 AdamW learning rate (default 1e-3); --weight-decay X (default 0)\n"
               "  --dump-params FILE     write the final parameters (fp32, units in order) from rank 0\n"
               "  --fault KIND@R:S       testing: rank R stalls (stall) or dies (exit) at step S\n"
               "  --device cpu|cuda      where the engine runs (default cpu); cuda: GPU local_rank %% GPUs, CUDA kernels,\n"
               "                         collectives over NCCL (bootstrapped over MPI) on a second stream\n"
               "  --cupti                with --device cuda: trace the steps with CUPTI (kernels, NCCL by collective,\n"
               "                         copies, the memory timeline vs the tracker) and measure the fixed overheads\n"
               "                         (CUDA context, cuBLAS, NCCL) next to the planner's figures (--gpu PRESET)\n"
               "Memory is printed in bytes and binary units (KiB, MiB, GiB); the engine runs in fp32 (CPU or GPU).\n");
}

typedef struct {
    CliSetup s;
    int have_setup;
    RunFlags f;
    CliGpu gpu;               /* --device cuda */
    Comm *comm;
    int rank, N;
    ExecRunConfig cfg;
    unsigned which;           /* bit per ExecStrategyKind */
} Ctx;

static void finish_ctx(Ctx *x)
{
    if (x->have_setup) cli_setup_free(&x->s);
    x->have_setup = 0;
    cli_gpu_finish(&x->gpu);   /* before the control comm: MPI outlives the NCCL comm */
    comm_destroy(x->comm);
    x->comm = NULL;
}

/* Planning flags the engine does not honour (it trains fp32 AdamW, no checkpointing, no
 * dropout, eager attention, on mpirun's ranks), with the one value each may still take (same, or
 * the job's rank count: ranks) and why, where the general sentence does not say it (why). The
 * overhead figures (--gpu, --cuda-context, --nccl-mem) are printed next to --cupti's only (cupti). */
#define NO_FSDP "the engine implements ddp and zero1-zero3, no FSDP"
#define NO_DS "DeepSpeed's settings describe DeepSpeed; the engine's ZeRO has buckets of its own"
static const struct { const char *flag, *same; int cupti, ranks; const char *why; } NOT_HONOURED[] = {
    {"params", NULL, 0, 0, NULL}, {"units", NULL, 0, 0, NULL}, {"precision", "fp32", 0, 0, NULL},
    {"optimizer", "adamw", 0, 0, NULL}, {"act-ckpt", "none", 0, 0, NULL}, {"attn", "eager", 0, 0, NULL},
    {"dropout", "0", 0, 0, NULL}, {"gpus", NULL, 0, 1, NULL}, {"gpus-per-node", NULL, 0, 0, NULL},
    {"gpu-mem", NULL, 0, 0, NULL}, {"grad-as-bucket-view", NULL, 0, 0, NULL}, {"alloc-margin", NULL, 0, 0, NULL},
    {"mfu", NULL, 0, 0, NULL}, {"intra-bw", NULL, 0, 0, NULL}, {"inter-bw", NULL, 0, 0, NULL}, {"nics", NULL, 0, 0, NULL},
    {"latency", NULL, 0, 0, NULL}, {"syncbn", NULL, 0, 0, NULL}, {"impl", "engine", 0, 0, NULL},
    {"zero-grad", NULL, 0, 0, "the engine keeps its gradient buffers and zeroes them in place before each step"},
    {"loop", NULL, 0, 0, "the engine's fused LM head turns the logits into their gradient in place: there is no "
                         "training loop to choose"},
    {"fsdp", NULL, 0, 0, NO_FSDP}, {"fsdp-grad-sync", NULL, 0, 0, NO_FSDP},
    {"autocast", NULL, 0, 0, "the engine trains in fp32, without autocast"},
    {"ds-reduce-bucket", NULL, 0, 0, NO_DS}, {"ds3-prefetch", NULL, 0, 0, NO_DS}, {"ds3-max-live", NULL, 0, 0, NO_DS},
    {"ds3-max-reuse", NULL, 0, 0, NO_DS}, {"ds3-persist", NULL, 0, 0, NO_DS}, {"ds-overlap-comm", NULL, 0, 0, NO_DS}, {"zero-param-sync", NULL, 0, 0, NO_DS}, {"zero-group", NULL, 0, 0, NO_DS},
    {"gpu", NULL, 1, 0, NULL}, {"cuda-context", NULL, 1, 0, NULL}, {"nccl-mem", NULL, 1, 0, NULL},
    {"tp", NULL, 0, 0, "the engine runs data parallelism only: tensor parallel is planned, not run (memplan --tp)"},
    {"sp", NULL, 0, 0, "the engine runs data parallelism only: sequence parallel is planned, not run (memplan --sp)"},
    {"loss-parallel", NULL, 0, 0, "the engine runs data parallelism only: loss parallel is planned, not run (memplan --loss-parallel)"},
    {"alloc-conf", NULL, 0, 0, NULL},
    {"lora", NULL, 0, 0, "the engine trains every parameter: LoRA is planned, not run (memplan --lora; validate --against torch runs PEFT)"},
    {"lora-alpha", NULL, 0, 0, "the engine trains every parameter (no LoRA)"},
    {"lora-targets", NULL, 0, 0, "the engine trains every parameter (no LoRA)"},
    {"lora-dropout", NULL, 0, 0, "the engine trains every parameter (no LoRA)"},
    {"freeze", NULL, 0, 0, "the engine trains every parameter: --freeze is planned, not run (validate --against torch runs it)"},
    {"quant-base", NULL, 0, 0, "the engine trains every parameter in fp32: a quantized base is planned, not run"},
    {"moe-imbalance", NULL, 0, 0, "the engine's GPT-2 has no experts"},
    {"fsdp-min-params", NULL, 0, 0, NO_FSDP}, {"fsdp-limit-all-gathers", NULL, 0, 0, NO_FSDP},
    {"fsdp-backward-prefetch", NULL, 0, 0, NO_FSDP}, {"fsdp-forward-prefetch", NULL, 0, 0, NO_FSDP},
};


/* 0, or 2 after naming the first flag the engine does not honour. */
static int honoured_flags_only(int argc, char **argv, const char *cmd, const Ctx *x)
{
    for (size_t i = 0; i < sizeof NOT_HONOURED / sizeof NOT_HONOURED[0]; i++) {
        const char *v = cli_setup_given(&x->s, NOT_HONOURED[i].flag);
        if (!v || (NOT_HONOURED[i].cupti && x->f.cupti)) continue;
        if (NOT_HONOURED[i].same && strcmp(v, NOT_HONOURED[i].same) == 0) continue;
        long long n;
        if (NOT_HONOURED[i].ranks && plan_parse_int(v, 1, INT_MAX, &n) == 0 && n == x->N) continue;
        if (NOT_HONOURED[i].cupti)
            return cli_usage_error("%s does not use --%s without --cupti (it sets the planner's overheads printed next "
                                   "to --cupti's measurement): drop it", cmd, NOT_HONOURED[i].flag);
        if (NOT_HONOURED[i].why)
            return cli_usage_error("%s does not honour --%s%s%s%s: %s; drop it", cmd, NOT_HONOURED[i].flag, *v ? " '" : "",
                                   v, *v ? "'" : "", NOT_HONOURED[i].why);
        return cli_usage_error("%s does not honour --%s%s%s%s: the engine trains fp32 AdamW without checkpointing or dropout "
                               "on mpirun's %d rank%s; drop it (plan it with 'memplan plan')", cmd, NOT_HONOURED[i].flag,
                               *v ? " '" : "", v, *v ? "'" : "", x->N, x->N == 1 ? "" : "s");
    }
    return 0;
}

/* Parses and checks this rank's arguments and output paths, with cli_usage_error captured.
 * Returns 0 to go on, CLI_RANKS_HELP, or an exit status (message in the capture). */
static int check_args(int argc, char **argv, const char *cmd, Ctx *x)
{
    x->f.seed = 1337;
    x->f.lr = 1e-3;
    CliExtra extra = {RUN_OPTIONS, run_flag, &x->f, 0};
    int rc = cli_parse_setup(argc, argv, cmd, &x->s, &extra, 0);
    if (rc == 1) return CLI_RANKS_HELP;
    if (rc) return rc;
    x->have_setup = 1;
    if (!x->s.have_model) return cli_usage_error("no model: give --model gpt2-tiny (or another GPT-2 preset)");
    if ((rc = honoured_flags_only(argc, argv, cmd, x))) return rc;
    ExecRunConfig *c = &x->cfg;
    exec_run_config_defaults(c);
    /* the engine builds its GPT-2 from the preset's name: a model file is not what would train */
    if (gpt2_config_preset(&c->model, x->s.model_arg))
        return cli_usage_error("the executor runs the GPT-2 presets (gpt2-tiny, gpt2-mini, gpt2, gpt2-medium, gpt2-large, "
                               "gpt2-xl) by name; '%s' is not one", x->s.model_arg);
    unsigned all = (1u << STRAT_COUNT) - 1, plan_bits = x->s.strategies;
    unsigned exec_bits = (1u << STRAT_DDP) | (1u << STRAT_ZERO1) | (1u << STRAT_ZERO2) | (1u << STRAT_ZERO3);
    if (plan_bits != all && (plan_bits & ~exec_bits))
        return cli_usage_error("the executor implements ddp, zero1, zero2 and zero3 (the fsdp-* strategies are planned only)");
    static const StrategyKind MAP[EXEC_STRATEGY_COUNT] = {STRAT_DDP, STRAT_ZERO1, STRAT_ZERO2, STRAT_ZERO3};
    for (int k = 0; k < EXEC_STRATEGY_COUNT; k++)
        if (plan_bits == all || (plan_bits & (1u << MAP[k]))) x->which |= 1u << k;
    int is_run = strcmp(cmd, "run") == 0;
    if (is_run) {
        if (plan_bits == all) x->which = 1u << EXEC_DDP;
        if (x->which & (x->which - 1))
            return cli_usage_error("run takes one --strategy (ddp, zero1, zero2 or zero3); validate compares several");
    }
    if (x->s.train.seq > c->model.max_seq)
        return cli_usage_error("--seq %lld exceeds %s's context of %d", (long long)x->s.train.seq, c->model.name, c->model.max_seq);
    if (x->s.train.micro_batch * x->N > 1000000)
        return cli_usage_error("--batch %lld is too large", (long long)x->s.train.micro_batch);
    if (!is_run && x->f.steps == 1)
        return cli_usage_error("validate --steps 1: memory is measured in the steady state (steps 2..K, after the "
                               "optimizer state exists); give --steps 2 or more");
    c->micro_batch = (int)x->s.train.micro_batch;
    c->seq = (int)(x->s.train.seq > 0 ? x->s.train.seq : c->model.max_seq);
    c->grad_accum = (int)x->s.train.grad_accum;
    /* validate: 5 steady steps (2..6), the fewest whose median judges a step time (cli_time.h) */
    c->steps = (int)(x->f.steps ? x->f.steps : is_run ? 10 : CLI_TIME_MIN_STEADY + 1);
    c->bucket_bytes = x->f.bucket_mb > 0 ? x->f.bucket_mb * MIB : 0;
    c->mem_limit = (size_t)x->f.mem_limit;
    c->seed = (uint64_t)x->f.seed;
    c->opt.lr = (float)x->f.lr;
    c->opt.weight_decay = (float)x->f.wd;
    c->trace_path = x->f.trace;
    c->dump_path = x->f.dump;
    c->fault = x->f.fault;
    if (c->fault.kind != EXEC_FAULT_NONE && (c->fault.rank >= x->N || c->fault.step > c->steps))
        return cli_usage_error("--fault at rank %d, step %d never fires: this job has ranks 0..%d and %d step%s", c->fault.rank,
                               c->fault.step, x->N - 1, c->steps, c->steps == 1 ? "" : "s");
    if (x->f.cupti && x->f.device != DEVICE_CUDA)
        return cli_usage_error("--cupti traces the GPU: give --device cuda as well");
    /* every output can be written, none is an input, no two share a path: checked before the run */
    const char *flags[3] = {"--json", "--trace", "--dump-params"}, *outs[3] = {x->s.json_path, x->f.trace, x->f.dump};
    char err[PATH_MAX + 256];
    for (int i = 0; i < 3; i++) {
        if (!outs[i]) continue;
        if (cli_check_output(flags[i], outs[i], &x->s.model_arg, 1, err, sizeof err)) return cli_usage_error("%s", err);
        for (int k = 0; k < i; k++)
            if (outs[k] && cli_same_file(outs[i], outs[k]))
                return cli_usage_error("%s and %s both write '%s': give each output its own file", flags[k], flags[i], outs[i]);
    }
    return 0;
}

/* Creates the communicator; every rank checks its arguments, then all agree (cli_ranks.h).
 * Returns -1 to go on, else the exit status every rank uses. */
static int start(int argc, char **argv, const char *cmd, Ctx *x)
{
    memset(x, 0, sizeof *x);
    char err[512];
    x->comm = comm_create(comm_launch_kind(), &argc, &argv, 300, err, sizeof err);
    if (!x->comm) {
        fprintf(stderr, "memplan: cannot start the communicator: %s\n", err);
        return 1;
    }
    x->rank = comm_rank(x->comm);
    x->N = comm_size(x->comm);
    cli_usage_capture(err, sizeof err);
    int st = check_args(argc, argv, cmd, x);
    cli_usage_capture(NULL, 0);
    st = cli_ranks_agree(x->comm, argc, argv, st, err);
    if (st == CLI_RANKS_HELP) {
        if (x->rank == 0) print_help(stdout, cmd);
        return 0;
    }
    if (st) return st;
    if (x->f.timeout > 0) comm_set_timeout(x->comm, x->f.timeout);
    ExecRunConfig *c = &x->cfg;
    c->device = x->f.device;
    c->cupti = x->f.cupti;
    if (c->device == DEVICE_CUDA) {
        int grc = cli_gpu_start(&x->gpu, x->comm, x->f.cupti, comm_timeout(x->comm));
        if (grc) return grc;
        c->data_comm = x->gpu.nccl;
    }
    return -1;
}

/* ---- formatting ---- */

static const char *fmt_b(double bytes, char *buf, size_t len) { return plan_fmt_count((long long)llround(bytes), buf, len); }
static const char *fmt_h(double bytes, char *buf, size_t len) { return plan_fmt_bytes(bytes, buf, len); }

static const char *comm_kind_name(const Ctx *x)
{
    if (x->gpu.nccl) return "NCCL, bootstrapped over MPI";
    return comm_kind(x->comm) == COMM_MPI ? "MPI" : "one process, no MPI";
}

/* Where run and validate write their text: stdout, or stderr when stdout carries the JSON; the
   commentary's '#' lines wrapped to the text width (cli_wrap_comments; the stream itself when
   that cannot be made). close_commentary flushes the wrapper and leaves the stream open. */
static FILE *open_commentary(const Ctx *x) {
    FILE *dest = x->s.json && !x->s.json_path ? stderr : stdout;
    FILE *f = cli_wrap_comments(dest, CLI_TEXT_WIDTH);
    return f ? f : dest;
}

static void close_commentary(FILE *out) {
    if (out != stdout && out != stderr) fclose(out);
}

static void echo_setup(FILE *f, const Ctx *x, const char *cmd, const char *strategies)
{
    const ExecRunConfig *c = &x->cfg;
    char p[32], tok[32], lim[32];
    fprintf(f, "# memplan %s: %s (%s parameters), %s on %d rank%s (%s), micro-batch %d x seq %d, grad-accum %d "
               "(%s tokens per step), %d step%s\n",
            cmd, c->model.name, plan_fmt_count(gpt2_cfg_num_params(&c->model), p, sizeof p), strategies, x->N,
            x->N == 1 ? "" : "s", comm_kind_name(x), c->micro_batch, c->seq, c->grad_accum,
            plan_fmt_count((long long)c->micro_batch * c->seq * c->grad_accum * x->N, tok, sizeof tok), c->steps,
            c->steps == 1 ? "" : "s");
    fprintf(f, "# fp32 on %s; DDP buckets 1 MiB then %.6g MiB; seed %llu; AdamW lr %g, weight decay %g; "
               "collective timeout %.3g s; memory limit %s\n",
            c->device == DEVICE_CUDA ? "the GPU (CUDA kernels, cuBLAS without TF32; collectives on a second stream)"
                                     : "the CPU (BLAS)",
            c->bucket_bytes > 0 ? c->bucket_bytes / MIB : 25.0, (unsigned long long)c->seed, (double)c->opt.lr,
            (double)c->opt.weight_decay, comm_timeout(x->comm), c->mem_limit ? fmt_h((double)c->mem_limit, lim, sizeof lim) : "none");
    int pinned = comm_pinned_cpus(x->comm), cpus = comm_pinned_from(x->comm), local = comm_local_size(x->comm);
    if (pinned > 0 && local > cpus)
        fprintf(f, "# placement: the launcher left this node's %d ranks unbound on %d CPUs; memplan pinned them "
                   "%d to a CPU (MEMPLAN_BIND=none leaves them)\n", local, cpus, (local + cpus - 1) / cpus);
    else if (pinned > 0)
        fprintf(f, "# placement: the launcher left this node's %d ranks unbound; memplan pinned each to %d CPU%s of "
                   "its own (MEMPLAN_BIND=none leaves them)\n", local, pinned, pinned == 1 ? "" : "s");
}

/* A failed run: the report where it happened, the sentence on rank 0 (or on the failing rank),
 * and an abort of the job when peers may still be inside a collective. Returns the exit status. */
static int report_failure(Ctx *x, ExecRunResult *r)
{
    if (r->report) fputs(r->report, stderr);
    int mine = r->status == EXEC_RUN_OOM || r->needs_abort || x->rank == 0;
    if (mine) fprintf(stderr, "memplan: %s\n", r->message);
    if (r->needs_abort) {
        fflush(stdout);
        comm_abort(x->comm, r->status == EXEC_RUN_OOM ? "out of memory; stopping every rank"
                                                      : "the run failed; stopping every rank");
    }
    return 1;
}

/* ---- run: the profiler summary ---- */

static void print_summary(FILE *f, const Ctx *x, const ExecRunResult *r)
{
    char a[32], b[32], c3[32], d[32];
    int K = x->cfg.steps;
    fprintf(f, "# memory per rank: the maximum over ranks, steady state (steps %s%d), bytes\n",
            K > 1 ? "2-" : "", K);
    fprintf(f, "%-14s %16s %16s\n", "category", "peak", "at_peak");
    fprintf(f, "%-14s %16s %16s\n", "-", "bytes", "bytes");
    double sum = 0;
    for (int k = 0; k < MEM_CATEGORY_COUNT; k++) {
        fprintf(f, "%-14s %16s %16s\n", prof_mem_category_name((MemCategory)k), fmt_b(r->peak[k], a, sizeof a),
                fmt_b(r->at_peak[k], b, sizeof b));
        sum += r->at_peak[k];
    }
    fprintf(f, "%-14s %16s %16s\n", "total", "-", fmt_b(sum, a, sizeof a));
    fprintf(f, "# peak %s in phase %s on rank %d; first step %s; model states (params + grads + optimizer) %s\n",
            fmt_h(r->peak_total, a, sizeof a), r->peak_phase, r->peak_rank, fmt_h(r->peak_total_first, b, sizeof b),
            fmt_h(r->model_states, c3, sizeof c3));
    fprintf(f, "# collectives per rank (payload = the full buffer; wire = nccl-tests bus bytes per rank)\n");
    fprintf(f, "%-16s %8s %14s %14s %8s %16s %10s\n", "collective", "count", "payload", "wire", "count", "payload", "time");
    fprintf(f, "%-16s %8s %14s %14s %8s %16s %10s\n", "-", "per_step", "bytes/step", "bytes/step", "total", "bytes_total", "s_total");
    int any = 0;
    for (int op = 0; op < COLL_COUNT; op++) {
        const CollStats *t = &r->coll_total[op], *s = &r->coll_step[op];
        if (t->count == 0) continue;
        any = 1;
        fprintf(f, "%-16s %8lld %14s %14s %8lld %16s %10.4f\n", coll_name((CollKind)op), (long long)s->count,
                fmt_b(s->payload_bytes, a, sizeof a), fmt_b(s->wire_bytes, b, sizeof b), (long long)t->count,
                fmt_b(t->payload_bytes, c3, sizeof c3), t->seconds);
    }
    if (!any) fprintf(f, "%-16s %8s %14s %14s %8s %16s %10s\n", "(none)", "0", "0", "0", "0", "0", "0");
    fprintf(f, "# time per phase, rank 0 (phases nest: comm_wait inside backward/optimizer, all inside step)\n");
    fprintf(f, "%-12s %10s %8s %10s\n", "phase", "time", "count", "mean");
    fprintf(f, "%-12s %10s %8s %10s\n", "-", "s", "-", "ms");
    for (int i = 0; i < r->nphases; i++) {
        const PhaseStat *p = &r->phases[i];
        fprintf(f, "%-12s %10.4f %8lld %10.3f\n", p->name, p->seconds, (long long)p->count,
                p->count ? p->seconds * 1e3 / (double)p->count : 0);
    }
    fprintf(f, "# steady step %.2f ms, %s tokens/s over %d rank%s\n", r->steady_ms,
            plan_fmt_count((long long)llround(r->tokens_per_step / (r->steady_ms / 1e3)), d, sizeof d), x->N,
            x->N == 1 ? "" : "s");
}

static cJSON *coll_json(const CollStats *s)
{
    cJSON *o = cJSON_CreateObject();
    cJSON_AddNumberToObject(o, "count", (double)s->count);
    cJSON_AddNumberToObject(o, "payload_bytes", s->payload_bytes);
    cJSON_AddNumberToObject(o, "wire_bytes", s->wire_bytes);
    cJSON_AddNumberToObject(o, "seconds", s->seconds);
    return o;
}

static cJSON *run_json(const Ctx *x, const ExecRunResult *r)
{
    const ExecRunConfig *c = &x->cfg;
    cJSON *j = cJSON_CreateObject();
    cJSON_AddStringToObject(j, "model", c->model.name);
    cJSON_AddNumberToObject(j, "params", (double)r->params);
    cJSON_AddStringToObject(j, "strategy", exec_strategy_name(c->strategy));
    cJSON_AddNumberToObject(j, "ranks", x->N);
    cJSON_AddNumberToObject(j, "pinned_cpus", comm_pinned_cpus(x->comm));   /* 0: placed by the launcher */
    cJSON_AddStringToObject(j, "comm", x->gpu.nccl ? "nccl" : comm_kind(x->comm) == COMM_MPI ? "mpi" : "self");
    cJSON_AddStringToObject(j, "device", c->device == DEVICE_CUDA ? "cuda" : "cpu");
    cJSON_AddStringToObject(j, "device_name", r->device_name);
    cJSON_AddNumberToObject(j, "micro_batch", c->micro_batch);
    cJSON_AddNumberToObject(j, "seq", c->seq);
    cJSON_AddNumberToObject(j, "grad_accum", c->grad_accum);
    cJSON_AddNumberToObject(j, "steps", c->steps);
    cJSON_AddNumberToObject(j, "buckets", r->buckets);
    cJSON_AddNumberToObject(j, "shard_elements", (double)r->shard_elems);
    cJSON_AddNumberToObject(j, "mem_limit_bytes", (double)c->mem_limit);
    cJSON_AddStringToObject(j, "status", exec_run_status_name(r->status));
    cJSON *steps = cJSON_AddArrayToObject(j, "steps_log");
    for (int i = 0; i < r->steps_done; i++) {
        cJSON *o = cJSON_CreateObject();
        cJSON_AddNumberToObject(o, "step", i + 1);
        cJSON_AddNumberToObject(o, "loss", r->loss[i]);
        cJSON_AddNumberToObject(o, "ms", r->step_ms[i]);
        cJSON_AddNumberToObject(o, "tokens_per_s", r->tokens_per_step / (r->step_ms[i] / 1e3));
        cJSON_AddItemToArray(steps, o);
    }
    cJSON *mem = cJSON_AddObjectToObject(j, "memory");
    cJSON_AddNumberToObject(mem, "peak_bytes", r->peak_total);
    cJSON_AddNumberToObject(mem, "first_step_peak_bytes", r->peak_total_first);
    cJSON_AddStringToObject(mem, "peak_phase", r->peak_phase);
    cJSON_AddNumberToObject(mem, "peak_rank", r->peak_rank);
    cJSON_AddNumberToObject(mem, "model_state_bytes", r->model_states);
    cJSON *cats = cJSON_AddObjectToObject(mem, "categories");
    for (int k = 0; k < MEM_CATEGORY_COUNT; k++) {
        cJSON *o = cJSON_AddObjectToObject(cats, prof_mem_category_name((MemCategory)k));
        cJSON_AddNumberToObject(o, "peak_bytes", r->peak[k]);
        cJSON_AddNumberToObject(o, "at_peak_bytes", r->at_peak[k]);
    }
    cJSON *pp = cJSON_AddObjectToObject(mem, "phase_peak_bytes");
    for (int ph = 0; ph < EXEC_PHASE_PARTS; ph++)
        cJSON_AddNumberToObject(pp, exec_phase_planner_name((ExecPhase)ph), r->phase_peak[ph]);
    cJSON *coll = cJSON_AddObjectToObject(j, "collectives");
    for (int op = 0; op < COLL_COUNT; op++) {
        if (r->coll_total[op].count == 0) continue;
        cJSON *o = coll_json(&r->coll_total[op]);
        cJSON_AddItemToObject(o, "last_step", coll_json(&r->coll_step[op]));
        cJSON_AddItemToObject(coll, coll_name((CollKind)op), o);
    }
    cJSON *ph = cJSON_AddObjectToObject(j, "phases");
    for (int i = 0; i < r->nphases; i++) {
        cJSON *o = cJSON_AddObjectToObject(ph, r->phases[i].name);
        cJSON_AddNumberToObject(o, "seconds", r->phases[i].seconds);
        cJSON_AddNumberToObject(o, "count", (double)r->phases[i].count);
    }
    cJSON_AddNumberToObject(j, "steady_ms_per_step", r->steady_ms);
    cJSON_AddNumberToObject(j, "steady_cpu_ms_per_step", r->steady_cpu_ms);   /* rank 0's process */
    cJSON_AddNumberToObject(j, "tokens_per_s", r->steady_ms > 0 ? r->tokens_per_step / (r->steady_ms / 1e3) : 0);
    if (c->cupti) {
        cJSON_AddItemToObject(j, "cupti", cli_gpu_cupti_json(r));
        cJSON_AddItemToObject(j, "overheads", cli_gpu_overheads_json(&x->gpu, &x->s.cluster, x->N));
    }
    return j;
}

static int emit(cJSON *j, const char *path)
{
    char *txt = cJSON_Print(j);
    if (!txt) {
        fprintf(stderr, "memplan: out of memory writing the JSON\n");
        return 1;
    }
    int rc = cli_write_text("the --json output", path, txt);   /* every write checked; one line if one fails */
    free(txt);
    return rc;
}

int cli_cmd_run(int argc, char **argv)
{
    Ctx x;
    setvbuf(stdout, NULL, _IOLBF, 0);   /* as validate: nothing printed is lost to a kill */
    int rc = start(argc, argv, "run", &x);
    if (rc >= 0) {
        finish_ctx(&x);
        return rc;
    }
    for (int k = 0; k < EXEC_STRATEGY_COUNT; k++)
        if (x.which & (1u << k)) x.cfg.strategy = (ExecStrategyKind)k;
    FILE *out = open_commentary(&x);
    if (x.rank == 0) echo_setup(out, &x, "run", exec_strategy_name(x.cfg.strategy));
    x.cfg.progress = x.rank == 0 ? out : NULL;
    ExecRunResult r;
    exec_run(x.comm, &x.cfg, &r);
    rc = 0;
    if (r.status != EXEC_RUN_OK) {
        rc = report_failure(&x, &r);
    } else if (x.rank == 0) {
        if (x.s.json) {
            cJSON *j = run_json(&x, &r);
            rc = emit(j, x.s.json_path);
            cJSON_Delete(j);
        }
        if (!x.s.json || x.s.json_path) {
            print_summary(out, &x, &r);
            if (x.cfg.cupti) {
                cli_gpu_print_cupti(out, &r);
                cli_gpu_print_overheads(out, &x.gpu, &x.s.cluster, x.N);
            }
        }
        if (x.cfg.trace_path) fprintf(out, "# trace of %d rank%s written to %s\n", x.N, x.N == 1 ? "" : "s", x.cfg.trace_path);
    }
    close_commentary(out);
    exec_run_result_free(&r);
    finish_ctx(&x);
    return rc;
}

/* ---- validate: predicted versus measured ---- */

typedef struct {
    double count, payload, wire;
} CollSum;

/* the planner's comm phases are the step's parts, in order (coll_step_phase's second index) */
_Static_assert((int)PHASE_COUNT == EXEC_PHASE_PARTS && (int)PHASE_FORWARD == (int)EXEC_PHASE_FORWARD &&
                   (int)PHASE_STEP == (int)EXEC_PHASE_OPTIMIZER,
               "PhaseKind and the ExecPhase parts differ");

/* The planner's inputs for the engine's run: its activation layout (--impl engine), fp32 AdamW,
 * no checkpointing or dropout, eager attention, mpirun's ranks on one node, the GPU overheads
 * zeroed (a CPU has none), memory bounded by --mem-limit only. */
static void engine_inputs(const Ctx *x, TrainSpec *t, ClusterSpec *cl)
{
    const ExecRunConfig *c = &x->cfg;
    *t = x->s.train;
    t->micro_batch = c->micro_batch;
    t->seq = c->seq;
    t->grad_accum = c->grad_accum;
    t->precision = PREC_FP32;
    t->optimizer = OPT_ADAMW;
    t->act_ckpt = CKPT_NONE;
    t->attn = ATTN_EAGER;
    t->dropout = 0;
    t->impl = IMPL_ENGINE;
    t->grad_as_bucket_view = 0;
    t->syncbn = 0;
    *cl = x->s.cluster;
    cl->gpus = x->N;
    cl->gpus_per_node = x->N;
    cl->cuda_context = 0;
    cl->nccl_per_comm = 0;
    cl->alloc_margin = 0;
    cl->alloc_model = 0;     /* tensors only: what the run measures */
    cl->margin_is_frac = 1;
    cl->gpu.cublas_ws_bytes = 0;
    cl->gpu.mem_bytes = c->mem_limit ? (double)c->mem_limit : 1e18;
}

/* One strategy: rows on f (rank 0) and a JSON record; returns 1 if it passes. */
static int compare(FILE *f, const Ctx *x, ExecStrategyKind k, const ExecRunResult *r, cJSON *arr, int *row_header,
                   const DeviceDesc *desc)
{
    static const StrategyKind MAP[EXEC_STRATEGY_COUNT] = {STRAT_DDP, STRAT_ZERO1, STRAT_ZERO2, STRAT_ZERO3};
    static const struct { TermKind term; MemCategory cat; const char *name; } CATS[] = {
        {TERM_PARAMS, MEM_PARAMS, "params"}, {TERM_GRADS, MEM_GRADS, "grads"},
        {TERM_COMM, MEM_COMM, "comm_buffers"}, {TERM_OPTIMIZER, MEM_OPTIMIZER, "optimizer"},
        {TERM_ACTIVATIONS, MEM_ACTIVATIONS, "activations"}, {TERM_TRANSIENT, MEM_WORKSPACE, "workspace"},
    };
    const ExecRunConfig *c = &x->cfg;
    TrainSpec t;
    ClusterSpec cl;
    engine_inputs(x, &t, &cl);
    MemResult mr;
    CommPlan cp;
    Step st;   /* the prediction: one step, its memory and its collectives */
    plan_step_build(&st, &x->s.model, &t, &cl, MAP[k]);
    plan_memory_step(&st, &cl, &mr, NULL, NULL, 0);
    plan_comm_step(&st, &cp);
    plan_step_free(&st);
    /* plan_comm assumes PyTorch's 25 MiB buckets; the executor's cap is whole fp32 elements */
    double bucket = c->bucket_bytes > 0 ? floor(c->bucket_bytes / 4) * 4 : 0;
    CollSum pred[COLL_COUNT][PHASE_COUNT];
    memset(pred, 0, sizeof pred);
    for (int i = 0; i < cp.n; i++) {
        const PlanColl *pc = &cp.c[i];
        CollSum *s = &pred[pc->op][pc->phase];
        double count = pc->count;
        if (k == EXEC_DDP && pc->op == COLL_ALL_REDUCE && bucket > 0)
            count = plan_ddp_buckets((double)gpt2_cfg_num_params(&c->model), 4, bucket);
        s->count += count;
        s->payload += pc->payload_bytes;
        s->wire += pc->wire_bytes;
    }

    const char *sn = exec_strategy_name(k);
    char a[32], b[32], e[32];
    int pass = 1;
    if (!*row_header) {
        fprintf(f, "%-8s %-26s %16s %16s %9s %s\n", "strategy", "quantity", "predicted", "measured", "rel_err", "check");
        fprintf(f, "%-8s %-26s %16s %16s %9s %s\n", "-", "-", "bytes", "bytes", "%", "-");
        *row_header = 1;
    }
    cJSON *o = cJSON_CreateObject(), *cats = cJSON_CreateArray(), *colls = cJSON_CreateArray();
    cJSON_AddStringToObject(o, "strategy", sn);
    for (size_t i = 0; i < sizeof CATS / sizeof CATS[0]; i++) {
        double p = mr.term[CATS[i].term], m = r->at_peak[CATS[i].cat];
        fprintf(f, "%-8s %-26s %16s %16s %9s %s\n", sn, CATS[i].name, fmt_b(p, a, sizeof a), fmt_b(m, b, sizeof b),
                plan_fmt_rel_err(plan_rel_err(p, m), e, sizeof e), "at the peak");
        cJSON *q = cJSON_CreateObject();
        cJSON_AddStringToObject(q, "category", CATS[i].name);
        cJSON_AddNumberToObject(q, "predicted_bytes", p);
        cJSON_AddNumberToObject(q, "measured_bytes", m);
        cJSON_AddItemToArray(cats, q);
    }
    double pe = plan_rel_err(mr.peak, r->peak_total);
    int peak_ok = fabs(pe) <= 0.05;
    pass &= peak_ok;
    fprintf(f, "%-8s %-26s %16s %16s %9s %s\n", sn, "peak", fmt_b(mr.peak, a, sizeof a), fmt_b(r->peak_total, b, sizeof b),
            plan_fmt_rel_err(pe, e, sizeof e), peak_ok ? "ok (within 5%)" : "FAIL (over 5%)");
    int ms_ok = mr.model_states == r->model_states;
    pass &= ms_ok;
    fprintf(f, "%-8s %-26s %16s %16s %9s %s\n", sn, "model_states", fmt_b(mr.model_states, a, sizeof a),
            fmt_b(r->model_states, b, sizeof b), plan_fmt_rel_err(plan_rel_err(mr.model_states, r->model_states), e, sizeof e),
            ms_ok ? "ok (exact)" : "FAIL (must be exact)");
    for (int op = 0; op <= COLL_BROADCAST; op++)   /* the engine has no send/recv */
        for (int ph = 0; ph < PHASE_COUNT; ph++) {
            /* PCOLL_* and COLL_* share the first four; CPHASE_* are the ExecPhase parts, in order */
            const CollStats *m = &r->coll_step_phase[op][ph];
            const CollSum *p = &pred[op][ph];
            if (p->count == 0 && m->count == 0) continue;
            char q1[48], q2[48];
            snprintf(q1, sizeof q1, "%s %s count", coll_name((CollKind)op), phase_name((PhaseKind)ph));
            snprintf(q2, sizeof q2, "%s %s bytes", coll_name((CollKind)op), phase_name((PhaseKind)ph));
            int cnt_ok = p->count == (double)m->count, bytes_ok = p->payload == m->payload_bytes;
            pass &= bytes_ok;
            fprintf(f, "%-8s %-26s %16.0f %16lld %9s %s\n", sn, q1, p->count, (long long)m->count,
                    plan_fmt_rel_err(plan_rel_err(p->count, (double)m->count), e, sizeof e), cnt_ok ? "ok" : "differs (reported)");
            fprintf(f, "%-8s %-26s %16s %16s %9s %s\n", sn, q2, fmt_b(p->payload, a, sizeof a), fmt_b(m->payload_bytes, b, sizeof b),
                    plan_fmt_rel_err(plan_rel_err(p->payload, m->payload_bytes), e, sizeof e), bytes_ok ? "ok (exact)" : "FAIL (must be exact)");
            cJSON *q = cJSON_CreateObject();
            cJSON_AddStringToObject(q, "op", coll_name((CollKind)op));
            cJSON_AddStringToObject(q, "phase", phase_name((PhaseKind)ph));
            cJSON_AddNumberToObject(q, "predicted_count", p->count);
            cJSON_AddNumberToObject(q, "measured_count", (double)m->count);
            cJSON_AddNumberToObject(q, "predicted_payload_bytes", p->payload);
            cJSON_AddNumberToObject(q, "measured_payload_bytes", m->payload_bytes);
            cJSON_AddNumberToObject(q, "predicted_wire_bytes", p->wire);
            cJSON_AddNumberToObject(q, "measured_wire_bytes", m->wire_bytes);
            cJSON_AddItemToArray(colls, q);
        }
    fprintf(f, "# %s: predicted peak at %s, measured in phase %s on rank %d; %s\n", sn, mr.peak_where, r->peak_phase,
            r->peak_rank, pass ? "pass" : "FAIL");
    cJSON_AddItemToObject(o, "memory_at_peak", cats);
    cJSON *pk = cJSON_AddObjectToObject(o, "peak");
    cJSON_AddNumberToObject(pk, "predicted_bytes", mr.peak);
    cJSON_AddNumberToObject(pk, "measured_bytes", r->peak_total);
    cJSON_AddStringToObject(pk, "predicted_at", mr.peak_where);
    cJSON_AddStringToObject(pk, "measured_phase", r->peak_phase);
    cJSON *msj = cJSON_AddObjectToObject(o, "model_states");
    cJSON_AddNumberToObject(msj, "predicted_bytes", mr.model_states);
    cJSON_AddNumberToObject(msj, "measured_bytes", r->model_states);
    cJSON_AddItemToObject(o, "collectives_per_step", colls);
    if (desc) {   /* time: plan_sim on the measured device description */
        ClusterSpec tc = cl;
        cli_time_cluster(desc, &tc);
        cJSON_AddItemToObject(o, "device_description", cli_time_desc_json(desc));
        int within = cli_time_rows(f, sn, &x->s.model, &t, &tc, MAP[k], r, c->steps, o);
        if (within == CLI_TIME_NOT_JUDGED) cJSON_AddNullToObject(o, "time_within_15pct");   /* too short to say */
        else cJSON_AddBoolToObject(o, "time_within_15pct", within);
        *row_header = 0;   /* the next strategy's memory rows get their header again */
    }
    cJSON_AddBoolToObject(o, "pass", pass);
    cJSON_AddItemToArray(arr, o);
    return pass;
}

/* validate's JSON document: the strategies compared so far (a copy of arr); complete = 0 while
 * strategies remain (or one failed: failed names it). */
static cJSON *validate_json(const Ctx *x, const cJSON *arr, int all_pass, int complete, const char *failed)
{
    cJSON *j = cJSON_CreateObject();
    cJSON_AddStringToObject(j, "model", x->cfg.model.name);
    cJSON_AddNumberToObject(j, "ranks", x->N);
    cJSON_AddNumberToObject(j, "pinned_cpus", comm_pinned_cpus(x->comm));   /* 0: placed by the launcher */
    cJSON_AddStringToObject(j, "device", x->cfg.device == DEVICE_CUDA ? "cuda" : "cpu");
    if (x->cfg.cupti) cJSON_AddItemToObject(j, "overheads", cli_gpu_overheads_json(&x->gpu, &x->s.cluster, x->N));
    cJSON_AddNumberToObject(j, "micro_batch", x->cfg.micro_batch);
    cJSON_AddNumberToObject(j, "seq", x->cfg.seq);
    cJSON_AddNumberToObject(j, "grad_accum", x->cfg.grad_accum);
    cJSON_AddNumberToObject(j, "steps", x->cfg.steps);
    cJSON_AddItemToObject(j, "strategies", cJSON_Duplicate(arr, 1));
    cJSON_AddBoolToObject(j, "complete", complete);
    if (failed) cJSON_AddStringToObject(j, "failed_strategy", failed);
    cJSON_AddBoolToObject(j, "pass", all_pass && complete);
    return j;
}

/* --json=FILE under validate: rewritten after every strategy (to FILE.tmp, then renamed), so a
 * run cut short (a timeout, a crash) leaves the strategies that finished. */
static void validate_json_progress(const Ctx *x, const cJSON *arr, int all_pass, const char *failed)
{
    if (!x->s.json || !x->s.json_path) return;
    /* only a regular file (or a new one) is rewritten this way: renaming over a device such as
       /dev/full or a FIFO would replace it with a plain file; those get the final JSON only */
    struct stat st;
    if (stat(x->s.json_path, &st) == 0 && !S_ISREG(st.st_mode)) return;
    char tmp[4096];
    snprintf(tmp, sizeof tmp, "%s.tmp", x->s.json_path);
    cJSON *j = validate_json(x, arr, all_pass, 0, failed);
    if (emit(j, tmp) == 0 && rename(tmp, x->s.json_path) != 0)
        fprintf(stderr, "memplan: cannot write --json file '%s'\n", x->s.json_path);
    cJSON_Delete(j);
}

int cli_cmd_validate(int argc, char **argv)
{
    Ctx x;
    /* Line-buffered: under mpirun stdout is a pipe (fully buffered by default), and a run that
     * is killed (a timeout) would lose every table already printed. */
    setvbuf(stdout, NULL, _IOLBF, 0);
    int rc = start(argc, argv, "validate", &x);
    if (rc >= 0) {
        finish_ctx(&x);
        return rc;
    }
    if (x.N < 2) {
        if (x.rank == 0)
            cli_usage_error("validate compares data-parallel strategies: start it on 2 or more ranks "
                            "(mpirun -np 4 memplan validate ...)");
        finish_ctx(&x);
        return 2;
    }
    FILE *out = open_commentary(&x);
    char names[64] = "";
    for (int k = 0; k < EXEC_STRATEGY_COUNT; k++)
        if (x.which & (1u << k)) snprintf(names + strlen(names), sizeof names - strlen(names), "%s%s", *names ? "," : "", exec_strategy_name((ExecStrategyKind)k));
    if (x.rank == 0) {
        echo_setup(out, &x, "validate", names);
        if (x.cfg.device == DEVICE_CUDA)
            fprintf(out, "# predicted: the planner with --impl engine (the engine's activation layout), fp32, AdamW, "
                         "overheads zeroed: the tracker counts the engine's buffers only (on the GPU also the micro-batch's "
                         "tokens and targets, 8·B·T bytes of activations the planner leaves out); the fixed overheads are "
                         "measured apart (--cupti)\n");
        else
            fprintf(out, "# predicted: the planner with --impl engine (the engine's activation layout), fp32, AdamW, "
                         "overheads zeroed (no CUDA context, cuBLAS workspace, NCCL buffers or allocator margin on a CPU)\n");
        fprintf(out, "# measured: the tracked allocator and the comm counters; memory is the steady state "
                     "(steps 2..K), the maximum over ranks; collectives are one optimizer step of rank 0\n");
    }
    /* the device description for the time rows: measured by every rank together (CPU) right
       before and right after each strategy's run (their mean), so that it sees the machine as
       that run did */
    DeviceDesc desc, first_desc;
    int have_desc = 0, have_first = 0;
    char derr[160] = "";
    cJSON *arr = cJSON_CreateArray();
    int all_pass = 1, header = 0;
    for (int k = 0; k < EXEC_STRATEGY_COUNT; k++) {
        if (!(x.which & (1u << k))) continue;
        x.cfg.strategy = (ExecStrategyKind)k;
        x.cfg.progress = NULL;
        size_t psi = (size_t)gpt2_cfg_num_params(&x.cfg.model);
        /* a typical collective: a DDP bucket, the ZeRO-1/2 reduce bucket, a ZeRO-3 block */
        size_t cap = x.cfg.bucket_bytes > 0 ? (size_t)x.cfg.bucket_bytes : (size_t)EXEC_DDP_BUCKET_BYTES;
        size_t coll = k == EXEC_DDP ? (4 * psi < cap ? 4 * psi : cap)
                    : k == EXEC_ZERO3 ? 4 * gpt2_cfg_unit_numel(&x.cfg.model, 1) : 4 * psi;
        DescStep ds = {&x.cfg.model, x.cfg.micro_batch, x.cfg.seq > 0 ? x.cfg.seq : x.cfg.model.max_seq,
                       k == EXEC_DDP ? psi : (psi + (size_t)x.N - 1) / (size_t)x.N, coll};
        if (x.cfg.device == DEVICE_HOST) have_desc = exec_describe_cpu(x.comm, &ds, &desc, derr, sizeof derr) == 0;
        ExecRunResult r;
        exec_run(x.comm, &x.cfg, &r);
        if (have_desc && r.status == EXEC_RUN_OK) {
            DeviceDesc after;
            have_desc = exec_describe_cpu(x.comm, &ds, &after, derr, sizeof derr) == 0;
            if (have_desc) exec_describe_combine(&desc, &after);
            if (have_desc && !have_first) first_desc = desc, have_first = 1;
        }
        if (x.rank == 0 && x.cfg.device == DEVICE_HOST && r.status == EXEC_RUN_OK) {
            if (have_desc) cli_time_print_desc(out, exec_strategy_name((ExecStrategyKind)k), &desc);
            else fprintf(out, "# no time rows: %s\n", derr);
        }
        if (r.status != EXEC_RUN_OK) {
            if (x.rank == 0) {
                if (r.steps_done < x.cfg.steps)   /* else it ran and an output failed: that line says so */
                    fprintf(stderr, "memplan: validate: %s did not run\n", exec_strategy_name((ExecStrategyKind)k));
                validate_json_progress(&x, arr, all_pass, exec_strategy_name((ExecStrategyKind)k));
            }
            rc = report_failure(&x, &r);
            exec_run_result_free(&r);
            cJSON_Delete(arr);
            close_commentary(out);
            finish_ctx(&x);
            return rc;
        }
        if (x.rank == 0) {
            all_pass &= compare(out, &x, (ExecStrategyKind)k, &r, arr, &header, have_desc ? &desc : NULL);
            if (x.cfg.cupti) {   /* what the GPU ran for this strategy */
                cli_gpu_print_cupti(out, &r);
                cJSON_AddItemToObject(cJSON_GetArrayItem(arr, cJSON_GetArraySize(arr) - 1), "cupti", cli_gpu_cupti_json(&r));
                header = 0;      /* the next strategy's rows get their header again */
            }
            fflush(out);
            validate_json_progress(&x, arr, all_pass, NULL);
        }
        exec_run_result_free(&r);
    }
    rc = 0;
    if (x.rank == 0) {
        if (x.cfg.cupti) cli_gpu_print_overheads(out, &x.gpu, &x.s.cluster, x.N);
        fprintf(out, "# validate: %s\n", all_pass ? "pass" : "FAIL (model states or collective bytes differ, or the peak by more than 5%)");
        if (x.s.json) {
            cJSON *j = validate_json(&x, arr, all_pass, 1, NULL);
            if (have_first) cJSON_AddItemToObject(j, "device_description", cli_time_desc_json(&first_desc));
            rc = emit(j, x.s.json_path);
            cJSON_Delete(j);
        }
        if (!all_pass) rc = 1;
    }
    close_commentary(out);
    cJSON_Delete(arr);
    /* every rank exits with rank 0's verdict */
    double v = rc, *all = calloc((size_t)x.N, sizeof *all);
    if (all && comm_all_gather(x.comm, &v, all, 1, DT_F64, NULL) == 0) rc = (int)all[0];
    free(all);
    finish_ctx(&x);
    return rc;
}
