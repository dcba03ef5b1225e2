/* memplan.c — the command line: subcommands and output. No planning logic lives here.
 *
 * This is the planning front end: plan, auto, models, gpus and help, linked with the planner,
 * cJSON, libyaml and libm only, so that it starts in a millisecond or two. run, validate and bench need
 * MPI, BLAS and CUDA: they live in memplan-exec beside this binary (cli/memplan_exec.c), which
 * main() execv()s with the same arguments and environment (mpirun's variables included). */
#include <cjson/cJSON.h>
#include <errno.h>
#include <getopt.h>
#include <libgen.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/resource.h>
#include <unistd.h>

#include "cli_alloc.h"
#include "cli_auto.h"
#include "cli_io.h"
#include "cli_model.h"
#include "cli_output.h"
#include "cli_setup.h"
#include "cli_torch.h"
#include "memplan_front.h"
#include "plan_dim_ft.h"
#include "plan_auto.h"
#include "plan_emit.h"
#include "plan_dim_pp.h"
#include "plan_load.h"
#include "plan_plan.h"
#include "plan_report.h"
#include "plan_strategy.h"
#include "plan_dim_tp.h"
#include "plan_util.h"
#include "exec_launch.h"
#include "plan_zoo.h"

/* The text output's width: tables fit it and longer lines are wrapped (--wide: neither). */
#define TEXT_WIDTH CLI_TEXT_WIDTH
/* Lines never wrapped: a command to paste. */
static const char *const KEEP_WHOLE[] = {"recommendation: memplan ", NULL};

/* The commands, one line each (memplan help, memplan --help). */
static void usage_commands(FILE *f) {
    fprintf(f,
        "memplan %s — per-GPU memory, collectives and step time of DDP, ZeRO 1/2/3 and FSDP, before you run\n\n"
        "Usage:\n"
        "  memplan [plan] --model NAME|PATH [options]   plan every strategy (the default command)\n"
        "  memplan auto --model NAME|PATH [options]     search the setup and pick one (memplan auto --help)\n"
        "  memplan models [--family F] [--json] [--export NAME]  list the zoo / export a model as JSON\n"
        "  memplan gpus [--json]                        list the GPU presets\n"
        "  memplan alloc [--alloc-conf S] TRACE...      replay recorded allocations through PyTorch's caching\n"
        "                                               allocator (memplan alloc --help)\n"
        "  memplan validate --against torch --model NAME|config.json [--strategy all] [--ranks 2]\n"
        "                                               the plan against real PyTorch/DeepSpeed on CPU ranks\n"
        "                                               (memplan validate --against torch --help)\n"
        "  mpirun -np N memplan run|validate --model gpt2-tiny [--strategy ddp|zero1|zero2|zero3]\n"
        "                                               memplan's own engine over MPI (memplan run --help)\n"
        "  mpirun -np N memplan bench syncbn [--model resnet50]   what SyncBatchNorm costs (memplan bench syncbn --help)\n"
        "  memplan help | -h | --help                   this text;  memplan --version: the version\n\n",
        MEMPLAN_VERSION);
}

/* The examples a command's help ends its first screen with. */
static void usage_examples(FILE *f, int auto_mode) {
    if (auto_mode)
        fprintf(f,
            "Examples:\n"
            "  memplan auto --model gpt2-xl --gpus 8                      the fastest setup that fits, and why\n"
            "  memplan auto --model llama3.1-8b --gpus 8 --gpu h100-80gb --global-batch 256\n"
            "                                                             micro-batch x accumulation for 256 samples\n"
            "  memplan auto --model gpt2-xl --gpus 8 --emit deepspeed > ds_config.json\n"
            "  memplan auto --model gpt2-xl --gpus 8 --emit torch         a torchrun command and the wrapping code\n"
            "  memplan auto --model llama2-70b --gpus 64 --gpu h100-80gb --seq 4096 --tp auto --pp auto\n"
            "  memplan auto --model gpt2-xl --gpus 8 --batch 4 --act-ckpt none   keep what you fixed, search the rest\n\n");
    else
        fprintf(f,
            "Examples:\n"
            "  memplan --model gpt2-xl --gpus 8                           every strategy on 8 A100-40GB\n"
            "  memplan --model meta-llama/Llama-3.1-8B --gpus 8 --gpu h100-80gb --seq 4096 --act-ckpt full\n"
            "  memplan --model ./config.json --gpus 4 --gpu-mem 24GiB     your own model's config.json\n"
            "  memplan --model llama2-7b --gpus 1 --gpu-mem 24GiB --lora 16 --quant-base nf4   QLoRA\n"
            "  memplan --config ds_config.json --model gpt2-xl --gpus 8   a DeepSpeed / accelerate / torchtitan config\n"
            "  memplan --model gpt2-xl --gpus 8 --quiet                   the verdict line alone\n"
            "  memplan --model gpt2-xl --gpus 8 --json | jq .recommendation\n\n");
}

/* Output flags of plan and auto. */
static void usage_output(FILE *f) {
    fprintf(f,
        "Output (plan and auto):\n"
        "  --quiet                the verdict line alone (fits or not, the pick, its peak and headroom)\n"
        "  --wide                 every column and every line whole (default: tables and notes in %d columns)\n"
        "  --explain              the '#' notes in full, and each strategy's peak split by the rule behind\n"
        "                         every byte (the mechanism and its source; the JSON always has it: peak_by_rule)\n"
        "  --trace FILE           the simulated step as a Chrome trace (Perfetto, chrome://tracing)\n"
        "  --plot FILE.png|.svg   memory breakdown and memory over the step (gnuplot)\n", TEXT_WIDTH);
}

static void usage_exit(FILE *f) {
    fprintf(f, "\nExit status: 0 when planning succeeded (also when nothing fits), 1 when an output could not be\n"
               "written (one line names it) or when auto --emit has nothing that fits to emit (nothing on standard\n"
               "output), 2 on a usage error (one line names the bad value).\n"
               "Memory is in binary GiB (2^30 bytes). Formulas and sources: docs/formulas.md.\n");
}

/* The help of `cmd` ("plan", "auto" or "help"): its own flags and examples first, then the
   flags every planning command shares, grouped by task, each with its default. */
static void usage(FILE *f, const char *cmd) {
    int auto_mode = strcmp(cmd, "auto") == 0;
    if (auto_mode) {
        fprintf(f,
            "memplan auto — search the setup (strategy x CPU offload x precision x checkpointing x micro-batch,\n"
            "and with --tp/--pp/--ep auto their degrees), keep those whose peak leaves the safety margin, pick\n"
            "the fastest (the simpler within 3%%) and explain the pick, the runner-up and why simpler ones lost.\n"
            "What you give (--batch, --act-ckpt, --precision, --offload, --grad-accum) is kept, not searched.\n\n"
            "Usage: memplan auto --model NAME|ID|PATH [options]   (or memplan --strategy auto ...)\n\n");
        usage_examples(f, 1);
        fprintf(f,
            "Auto's search and output:\n"
            "  --global-batch G       samples per optimizer step over all GPUs (default: not fixed; searched as\n"
            "                         micro-batch x accumulation)\n"
            "  --emit deepspeed|torch print a DeepSpeed config (picked among zero1/2/3; the prediction as '#' lines\n"
            "                         on standard error) / a torchrun command and the wrapping snippet\n"
            "  --bn-min-batch B       per-GPU batch below which SyncBN is advised (default 16)\n");
        cli_auto_help(f);
        usage_output(f);
        fputc('\n', f);
        cli_print_setup_help(f);
        usage_exit(f);
        return;
    }
    if (strcmp(cmd, "plan") == 0)
        fprintf(f,
            "memplan plan — every strategy's per-GPU memory (term by term, at its peak moment), collectives and\n"
            "simulated step for one setup, and the one to use: auto's rule (the safety margin, the fastest among\n"
            "the simpler) over the strategies, with everything else as you fixed it.\n\n"
            "Usage: memplan [plan] --model NAME|ID|PATH [options]\n\n");
    else usage_commands(f);
    usage_examples(f, 0);
    usage_output(f);
    cli_auto_help(f);
    fputc('\n', f);
    cli_print_setup_help(f);
    usage_exit(f);
}

/* Writes JSON to --json=FILE or stdout, every write checked; a document (an object) carries the
   version of memplan that wrote it. */
static int emit_json(cJSON *j, const char *path) {
    if (cJSON_IsObject(j) && !cJSON_HasObjectItem(j, "version")) cJSON_AddStringToObject(j, "version", MEMPLAN_VERSION);
    char *txt = j ? cJSON_Print(j) : NULL;
    if (!txt) { fprintf(stderr, "memplan: out of memory writing JSON\n"); return 1; }
    int rc = cli_write_text("the --json output", path, txt);
    free(txt);
    return rc;
}

/* What `auto --emit` prints instead of the plan. */
typedef enum { EMIT_NONE = 0, EMIT_DEEPSPEED, EMIT_TORCH, EMIT_COUNT } EmitKind;
static const struct {
    const char *name;      /* the --emit value */
    const char *prints;    /* what it writes on standard output, for messages */
} EMITS[EMIT_COUNT] = {
    [EMIT_DEEPSPEED] = {"deepspeed", "DeepSpeed config"},
    [EMIT_TORCH] = {"torch", "torchrun command"},
};

/* Options of plan and auto beyond the shared ones. */
typedef struct {
    const char *trace, *plot;
    int explain;             /* --explain: each peak split by rule, the tables' legends */
    int quiet;               /* --quiet: the verdict line alone */
    int wide;                /* --wide: every column, lines unwrapped */
    EmitKind emit;
    int auto_mode;
    int bn_given;            /* --bn-min-batch was given (auto only) */
    AutoSpec auto_spec;
    CliAutoOpts offload;     /* --offload, --host-mem, --host-bw, --min-headroom */
} PlanOpts;

enum { OPT_TRACE = 2000, OPT_PLOT, OPT_EMIT, OPT_GLOBAL_BATCH, OPT_BN_MIN, OPT_EXPLAIN, OPT_QUIET, OPT_WIDE };
static const struct option PLAN_OPTIONS[] = {
    {"trace", required_argument, 0, OPT_TRACE},
    {"explain", no_argument, 0, OPT_EXPLAIN},
    {"quiet", no_argument, 0, OPT_QUIET},
    {"wide", no_argument, 0, OPT_WIDE},
    {"plot", required_argument, 0, OPT_PLOT},
    {"emit", required_argument, 0, OPT_EMIT},
    {"global-batch", required_argument, 0, OPT_GLOBAL_BATCH},
    {"bn-min-batch", required_argument, 0, OPT_BN_MIN},
    CLI_AUTO_OPTIONS,
    {0, 0, 0, 0},
};

static int safe_path(const char *p) { return p[0] && !strpbrk(p, "'\"`$\\"); }

static int plan_opt(void *ctx, int opt, const char *arg, char *err, size_t errlen) {
    PlanOpts *o = ctx;
    long long v;
    switch (opt) {
    case OPT_EXPLAIN:
        o->explain = 1;
        return 0;
    case OPT_QUIET:
        o->quiet = 1;
        return 0;
    case OPT_WIDE:
        o->wide = 1;
        return 0;
    case OPT_TRACE:
    case OPT_PLOT:
        if (!safe_path(arg)) { snprintf(err, errlen, "--%s '%s': give a file name without quotes or $", opt == OPT_TRACE ? "trace" : "plot", arg); return -1; }
        if (opt == OPT_PLOT) {
            size_t n = strlen(arg);
            if (n < 5 || (strcasecmp(arg + n - 4, ".png") && strcasecmp(arg + n - 4, ".svg"))) {
                snprintf(err, errlen, "--plot '%s' must end in .png or .svg", arg);
                return -1;
            }
            o->plot = arg;
        } else o->trace = arg;
        return 0;
    case OPT_EMIT:
        for (int k = EMIT_NONE + 1; k < EMIT_COUNT; k++)
            if (strcmp(arg, EMITS[k].name) == 0) {
                o->emit = (EmitKind)k;
                return 0;
            }
        snprintf(err, errlen, "unknown --emit '%s' (valid: deepspeed, torch)", arg);
        return -1;
    case OPT_GLOBAL_BATCH:
        if (plan_parse_int(arg, 1, 1000000000LL, &v)) { snprintf(err, errlen, "--global-batch '%s' is not an integer in [1, 1e9]", arg); return -1; }
        o->auto_spec.global_batch = v;
        return 0;
    case OPT_BN_MIN:
        if (plan_parse_int(arg, 1, 1000000, &v)) { snprintf(err, errlen, "--bn-min-batch '%s' is not an integer in [1, 1000000]", arg); return -1; }
        o->auto_spec.bn_min_batch = v;
        o->bn_given = 1;
        return 0;
    default: return cli_auto_opt(&o->offload, opt, arg, err, errlen);
    }
}

/* Before any work: every output (--json=FILE, --trace, --plot and the plot's data files) can
 * be written, none is the model file, no two share a path. 0, or 2 after one line. */
static int check_outputs(const PlanOpts *o, const CliSetup *s) {
    char err[PATH_MAX + 256], aux[3][PATH_MAX + 16];
    const char *flag[6] = {"--json", "--trace", "--plot", "--plot", "--plot", "--plot"};
    const char *out[6] = {s->json_path, o->trace, o->plot, NULL, NULL, NULL};
    if (o->plot) {   /* cli_write_plot's data and script beside the image */
        static const char *const EXT[3] = {".terms.dat", ".curve.dat", ".gp"};
        for (int i = 0; i < 3; i++) {
            snprintf(aux[i], sizeof aux[i], "%s%s", o->plot, EXT[i]);
            out[3 + i] = aux[i];
        }
    }
    for (int i = 0; i < 6; i++) {
        if (!out[i]) continue;
        if (cli_check_output(flag[i], out[i], &s->model_arg, 1, err, sizeof err)) return cli_usage_error("%s", err);
        for (int k = 0; k < i; k++)
            if (out[k] && cli_same_file(out[i], out[k]))
                return cli_usage_error("%s and %s both write '%s': give each output its own file", flag[k], flag[i], out[i]);
    }
    return 0;
}

static int write_files(const PlanOpts *o, const CliSetup *s, const Plan *p) {
    errno = 0;
    if (o->trace && cli_write_sim_trace(o->trace, &s->model, &s->train, &s->cluster, p)) {
        fprintf(stderr, "memplan: cannot write --trace file '%s': %s\n", o->trace, errno ? strerror(errno) : "a write failed");
        return 1;
    }
    if (o->plot && cli_write_plot(o->plot, &s->model, &s->train, &s->cluster, p)) {
        fprintf(stderr, "memplan: cannot write --plot file '%s' (or its data beside it)\n", o->plot);
        return 1;
    }
    if (o->trace) fprintf(stderr, "# wrote the simulated timeline to %s (open in ui.perfetto.dev or chrome://tracing)\n", o->trace);
    if (o->plot) fprintf(stderr, "# wrote the plot to %s\n", o->plot);
    return 0;
}

/* What auto searched ("strategy x offload x ...") and what it kept as given ("--batch 4, ..."). */
static void auto_dims(const CliSetup *s, const AutoSpec *a, int offload_given, char *dims, size_t dlen, char *kept,
                      size_t klen) {
    int batch_follows = a->keep_accum && a->global_batch > 0 && !a->keep_batch;
    snprintf(dims, dlen, "strategy%s%s%s%s%s", offload_given ? "" : " x offload", a->precisions ? " x precision" : "",
             a->keep_ckpt || s->model.arch == ARCH_GENERIC ? "" : " x checkpointing", a->keep_batch || batch_follows ? "" : " x micro-batch",
             a->global_batch > 0 && !a->keep_accum && !a->keep_batch ? " x accumulation for the global batch" : "");
    char ck[32], mb[24], ga[24];
    snprintf(mb, sizeof mb, "%lld", (long long)s->train.micro_batch);
    snprintf(ga, sizeof ga, "%lld", (long long)s->train.grad_accum);
    size_t n = 0;
    kept[0] = 0;
    const char *given[][2] = {
        {"offload", offload_given ? plan_offload_name(s->train.offload) : NULL},
        {"precision", a->precisions ? NULL : plan_precision(s->train.precision)->name},
        {"batch", a->keep_batch ? mb : NULL},
        {"act-ckpt", a->keep_ckpt ? plan_ckpt_label(&s->train, ck, sizeof ck) : NULL},
        {"grad-accum", a->keep_accum ? ga : NULL},
    };
    for (size_t i = 0; i < sizeof given / sizeof given[0] && n < klen; i++)
        if (given[i][1]) n += (size_t)snprintf(kept + n, klen - n, "%s--%s %s", n ? ", " : "", given[i][0], given[i][1]);
}

/* A value as a shell word: bare when it is plain, else single-quoted. */
static void shell_word(FILE *f, const char *v) {
    if (*v && strspn(v, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-+.,:/%=@") == strlen(v)) {
        fputs(v, f);
        return;
    }
    fputc('\'', f);
    for (; *v; v++) {
        if (*v == '\'') fputs("'\\''", f);
        else fputc(*v, f);
    }
    fputc('\'', f);
}

/* The allocator settings the plan replayed, as the environment the job needs ("NAME='value'"), in
   buf; NULL when torch's defaults were planned. */
static const char *alloc_env(const CliSetup *s, char *buf, size_t len) {
    const char *name = "PYTORCH_CUDA_ALLOC_CONF", *v = cli_setup_given(s, "alloc-conf");
    if (!s->cluster.alloc_model) return NULL;
    if (!v) v = cli_alloc_conf_env(&name);
    if (!v || !*v) return NULL;
    char *txt = NULL;
    size_t n = 0;
    FILE *m = open_memstream(&txt, &n);
    if (!m) return NULL;
    fprintf(m, "%s=", name);
    shell_word(m, v);
    fclose(m);
    snprintf(buf, len, "%s", txt ? txt : "");
    free(txt);
    return buf;
}

/* A flag the --config file gave (not the command line): the command to paste names the file instead. */
static int from_config(const CliSetup *s, const char *flag) {
    if (!s->config) return 0;
    for (int i = 0; i < s->config->n; i++) {
        const CfgSetting *c = &s->config->set[i];
        if (strcmp(c->flag, flag) == 0 && !c->cmdline) return 1;
    }
    return 0;
}

/* The command to paste for a pick: "memplan" and the setup's flags as given (the options table's
   order, --config's own flags as the file), less those in `drop` (the pick sets them) and the
   output flags, then `tail` (the pick's). malloc'd; NULL out of memory. */
static char *pick_command(const CliSetup *s, const PlanOpts *o, const char *const *drop, const char *tail) {
    char *txt = NULL;
    size_t n = 0;
    FILE *m = open_memstream(&txt, &n);
    if (!m) return NULL;
    fputs("memplan", m);
    const struct option *opts = cli_setup_options();
    for (int i = 0; opts[i].name && i < CLI_GIVEN_MAX; i++) {
        const char *name = opts[i].name, *v = s->given[i];
        if (!v || strcmp(name, "json") == 0 || strcmp(name, "help") == 0 || from_config(s, name)) continue;
        int skip = 0;
        for (const char *const *d = drop; *d && !skip; d++) skip = strcmp(*d, name) == 0;
        if (skip) continue;
        fprintf(m, " --%s", name);
        if (*v) { fputc(' ', m); shell_word(m, v); }
    }
    const struct { const char *name, *v; } own[] = {
        {"host-mem", o->offload.host_mem_arg}, {"host-bw", o->offload.host_bw_arg}, {"min-headroom", o->offload.headroom_arg},
        {"offload", o->offload.offload >= 0 ? plan_offload_name((OffloadKind)o->offload.offload) : NULL}};
    for (size_t i = 0; i < sizeof own / sizeof own[0]; i++) {
        int skip = !own[i].v;
        for (const char *const *d = drop; *d && !skip; d++) skip = strcmp(*d, own[i].name) == 0;
        if (!skip) { fprintf(m, " --%s ", own[i].name); shell_word(m, own[i].v); }
    }
    fputs(tail, m);
    if (fclose(m)) { free(txt); return NULL; }
    return txt;
}

/* plan's pick as a command: the setup as given with --strategy the pick's. NULL when nothing fits. */
static char *plan_pick_command(const CliSetup *s, const PlanOpts *o, const Plan *p) {
    if (p->recommended < 0) return NULL;
    static const char *const DROP[] = {"strategy", NULL};
    char tail[64];
    snprintf(tail, sizeof tail, " --strategy %s", plan_strategy(p->rows[p->recommended].kind)->name);
    return pick_command(s, o, DROP, tail);
}

/* auto's pick as a command: the setup as given, with what auto chose in place of what it searched. */
static char *auto_pick_command(const CliSetup *s, const PlanOpts *o, const AutoResult *r) {
    static const char *const DROP[] = {"strategy", "offload", "precision", "batch", "grad-accum", "act-ckpt", "tp", "sp",
                                       "loss-parallel", "pp", "pp-schedule", "microbatches", "ep", "cp", NULL};
    char tail[320], ck[32];
    int pp = plan_pp_degree(&r->train);
    size_t n = (size_t)snprintf(tail, sizeof tail, " --strategy %s --offload %s --precision %s --batch %lld --%s %lld --act-ckpt %s",
                                plan_strategy(r->strategy)->name, plan_offload_name(r->train.offload),
                                plan_precision(r->train.precision)->name, (long long)r->train.micro_batch,
                                pp > 1 ? "microbatches" : "grad-accum", (long long)r->train.grad_accum,
                                plan_ckpt_label(&r->train, ck, sizeof ck));
    if (r->train.tp > 1 && n < sizeof tail)
        n += (size_t)snprintf(tail + n, sizeof tail - n, " --tp %d --sp %s%s", r->train.tp, r->train.sp ? "on" : "off",
                              r->train.loss_parallel ? " --loss-parallel on" : "");
    if (pp > 1 && n < sizeof tail)
        n += (size_t)snprintf(tail + n, sizeof tail - n, " --pp %d --pp-schedule %s", pp, plan_pp_schedule_name(r->train.pp_schedule));
    if (r->train.ep > 1 && n < sizeof tail) n += (size_t)snprintf(tail + n, sizeof tail - n, " --ep %d", r->train.ep);
    if (r->train.cp > 1 && n < sizeof tail) snprintf(tail + n, sizeof tail - n, " --cp %d", r->train.cp);
    return pick_command(s, o, DROP, tail);
}

/* The command that reads the emitted DeepSpeed config back to the same plan: the flags the config
   cannot hold (the model, the cluster, the sequence, the trainable subset, checkpointing other
   than none and full, the overheads), as given or as resolved. */
static void emit_readback(FILE *f, const CliSetup *s, const AutoResult *r) {
    static const char *const KEEP[] = {"params", "units", "gpus", "gpus-per-node", "gpu", "gpu-mem", "cublas-ws", "cuda-context",
        "nccl-mem", "alloc-margin", "alloc-conf", "mfu", "intra-bw", "inter-bw", "nics", "latency", "attn", "attn-kernel", "dropout", "moe-imbalance",
        "loop", "zero-grad", "autocast", "lora", "lora-alpha", "lora-targets", "lora-dropout", "freeze", "quant-base", "syncbn"};
    fputs("# read back: memplan --config FILE", f);
    if (s->model_arg) { fputs(" --model ", f); shell_word(f, s->model_arg); }
    for (size_t i = 0; i < sizeof KEEP / sizeof KEEP[0]; i++) {
        const char *v = cli_setup_given(s, KEEP[i]);
        if (!v) continue;
        fprintf(f, " --%s", KEEP[i]);
        if (*v) { fputc(' ', f); shell_word(f, v); }
    }
    long long seq = s->train.seq > 0 ? s->train.seq : s->model.max_seq;
    if (seq > 0 && s->model.arch != ARCH_CNN && s->model.arch != ARCH_GENERIC) fprintf(f, " --seq %lld", seq);
    if (r->train.act_ckpt != CKPT_NONE && r->train.act_ckpt != CKPT_FULL) {
        char ck[32];
        fprintf(f, " --act-ckpt %s", plan_ckpt_label(&r->train, ck, sizeof ck));
    }
    fputc('\n', f);
}

/* Prints body (the text output after the verdict) wrapped to TEXT_WIDTH unless --wide; frees it. */
static void print_body(const PlanOpts *o, char *body) {
    if (body) cli_print_wrapped(stdout, body, o->wide ? 0 : TEXT_WIDTH, KEEP_WHOLE);
    free(body);
}

/* auto's verdict, the first line: the pick with its peak, headroom and rate, or what would fit. */
static void auto_verdict(FILE *f, const CliSetup *s, const AutoResult *r) {
    char a[32], b[32], d[32], nm[96], ck[32], deg[64] = "";
    if (!r->found) {
        fprintf(f, "does not fit with the %s safety margin in any searched setup%s%s\n", plan_fmt_bytes(r->margin, a, sizeof a),
                r->fix[0] ? "; would fit with: " : "", r->fix);
        return;
    }
    if (r->train.tp > 1 || plan_pp_degree(&r->train) > 1 || r->train.ep > 1 || r->train.cp > 1)
        snprintf(deg, sizeof deg, "%s%.0d%s%.0d%s%.0d%s%.0d", r->train.tp > 1 ? ", tp " : "", r->train.tp > 1 ? r->train.tp : 0,
                 plan_pp_degree(&r->train) > 1 ? ", pp " : "", plan_pp_degree(&r->train) > 1 ? r->train.pp : 0,
                 r->train.ep > 1 ? ", ep " : "", r->train.ep > 1 ? r->train.ep : 0, r->train.cp > 1 ? ", cp " : "",
                 r->train.cp > 1 ? r->train.cp : 0);
    fprintf(f, "fits: %s, micro-batch %lld, act-ckpt %s%s; peak %s of %s per GPU, headroom %s", plan_auto_setup_name(r->strategy,
            &r->train, nm, sizeof nm), (long long)r->train.micro_batch, plan_ckpt_label(&r->train, ck, sizeof ck), deg,
            plan_fmt_bytes(r->mem.peak, a, sizeof a), plan_fmt_bytes(s->cluster.gpu.mem_bytes, b, sizeof b),
            plan_fmt_bytes(r->mem.headroom, d, sizeof d));
    if (r->time_known) fprintf(f, ", %.0f %s/s", r->time.tokens_per_s, s->model.arch == ARCH_CNN ? "samples" : "tokens");
    fputc('\n', f);
}

/* The DeepSpeed strategies (ZeRO) of mask. */
static unsigned deepspeed_of(unsigned mask) {
    unsigned ds = 0;
    for (int k = 0; k < STRAT_COUNT; k++)
        if ((mask & (1u << k)) && plan_strategy_is_deepspeed((StrategyKind)k)) ds |= 1u << k;
    return ds;
}

static int run_auto(CliSetup *s, PlanOpts *o) {
    AutoResult r;
    o->auto_spec.strategies = s->strategies;
    if (o->emit == EMIT_DEEPSPEED && deepspeed_of(s->strategies))   /* a DeepSpeed config: pick among ZeRO stages */
        o->auto_spec.strategies = deepspeed_of(s->strategies);
    else if (o->emit == EMIT_TORCH && s->train.tp > 1 && s->strategies != deepspeed_of(s->strategies))
        o->auto_spec.strategies = s->strategies & ~deepspeed_of(s->strategies);   /* torch's tensor parallel: ddp, fsdp-full */
    o->auto_spec.sp_fixed = cli_setup_given(s, "sp") != NULL;
    plan_auto_dims(&s->model, &s->train, &s->cluster, &o->auto_spec, &r);   /* --tp auto, --pp auto: their degrees */
    int rc = 0;
    if (o->emit && !r.found) {   /* no config to launch: a failure, and nothing on stdout for a > redirect */
        fprintf(stderr, "memplan: nothing fits, so no %s:\n%s", EMITS[o->emit].prints, r.explain);
        return 1;
    }
    if (o->emit && s->config) cli_config_header(stderr, s->config);   /* stdout holds the emitted text alone */
    if (o->emit) cli_setup_notes(stderr, s);
    if (o->emit == EMIT_DEEPSPEED) {
        char *txt = plan_emit_deepspeed_json(&s->model, &s->cluster, &r);
        if (!txt) { fprintf(stderr, "memplan: out of memory writing the DeepSpeed config\n"); return 1; }
        printf("%s\n", txt);       /* stdout: the config alone, for > ds_config.json */
        fflush(stdout);            /* the config first, then the prediction on stderr */
        plan_emit_prediction(stderr, &s->cluster, &r);
        plan_emit_deepspeed_code(stderr, &s->model, &r);   /* what the config cannot hold: the model code's */
        char env[1024];
        if (alloc_env(s, env, sizeof env))
            fprintf(stderr, "# launch with %s (the allocator settings the plan replayed)\n", env);
        emit_readback(stderr, s, &r);
        free(txt);
        return 0;
    }
    if (o->emit == EMIT_TORCH && plan_pp_degree(&r.train) > 1) {   /* no pipelining code: the split, one line */
        fprintf(stderr, "memplan: --emit torch writes no pipeline code: the pick is pp %d (1f1b, %lld micro-batches, "
                "%d blocks per stage; stage 0 also the embedding, the last stage the head), tp %d, %s; plan it with "
                "'memplan plan --pp %d --microbatches %lld'\n", r.train.pp, (long long)r.train.grad_accum,
                plan_pp_blocks(&s->model) / r.train.pp, plan_tp_degree(&r.train), plan_strategy(r.strategy)->name,
                r.train.pp, (long long)r.train.grad_accum);
        return 1;
    }
    if (o->emit == EMIT_TORCH && plan_tp_degree(&r.train) > 1 && plan_strategy_is_deepspeed(r.strategy)) {
        /* ZeRO beside tensor parallel: no torch code expresses it (DeepSpeed takes no DTensors) */
        fprintf(stderr, "memplan: --emit torch writes no code for %s beside tensor parallel: the pick is tp %d with %s, "
                "as Megatron-DeepSpeed and InternLM run it; plan it with 'memplan plan --tp %d --strategy %s', or give "
                "--strategy ddp,fsdp-full for a torch script\n", plan_strategy(r.strategy)->name, r.train.tp,
                plan_strategy(r.strategy)->name, r.train.tp, plan_strategy(r.strategy)->name);
        return 1;
    }
    if (o->emit == EMIT_TORCH && (r.train.ep > 1 || r.train.cp > 1)) {   /* no EP/CP code: the pick, one line */
        fprintf(stderr, "memplan: --emit torch writes no %s code: the pick is %s %d with %s; plan it with "
                "'memplan plan --%s %d'\n", r.train.ep > 1 ? "expert-parallel" : "context-parallel",
                r.train.ep > 1 ? "ep" : "cp", r.train.ep > 1 ? r.train.ep : r.train.cp, plan_strategy(r.strategy)->name,
                r.train.ep > 1 ? "ep" : "cp", r.train.ep > 1 ? r.train.ep : r.train.cp);
        return 1;
    }
    if (o->emit == EMIT_TORCH) {
        char env[1024];
        plan_emit_torch(stdout, &s->model, &s->cluster, &r, alloc_env(s, env, sizeof env));
        return 0;
    }
    Plan p;
    if (r.found) {
        TrainSpec chosen = r.train;
        plan_run(&s->model, &chosen, &s->cluster, 1u << r.strategy, &p);
        s->train = chosen;
    } else {
        plan_run(&s->model, &s->train, &s->cluster, s->strategies, &p);
    }
    if ((rc = write_files(o, s, &p))) { plan_free(&p); return rc; }   /* first: nothing on stdout if one fails */
    if (s->json) {
        cJSON *j = plan_report_json(&s->model, &s->train, &s->cluster, &p);
        if (s->config) cJSON_AddItemToObject(j, "config", cli_config_json(s->config));
        cli_setup_notes_json(j, s);
        cJSON *a = cJSON_AddObjectToObject(j, "auto");
        cJSON_AddBoolToObject(a, "found", r.found);
        if (r.found) cJSON_AddStringToObject(a, "strategy", plan_strategy(r.strategy)->name);
        cJSON_AddNumberToObject(a, "candidates", (double)r.candidates);
        cJSON_AddNumberToObject(a, "simulated", (double)r.evaluated);
        cJSON_AddStringToObject(a, "explain", r.explain);
        cJSON_AddNumberToObject(a, "min_headroom_bytes", r.margin);
        cJSON_AddStringToObject(a, "ranked_by", r.time_known ? "tokens_per_s" : "comm_s");
        if (r.found && !r.time_known) cJSON_AddNumberToObject(a, "comm_s", r.comm_s);
        if (r.found) {
            cJSON_AddStringToObject(a, "offload", plan_offload_name(r.train.offload));
            cJSON_AddStringToObject(a, "precision", plan_precision(r.train.precision)->name);
        }
        if (r.runner_found) {
            cJSON *ru = cJSON_AddObjectToObject(a, "runner_up");
            cJSON_AddStringToObject(ru, "strategy", plan_strategy(r.runner)->name);
            cJSON_AddStringToObject(ru, "offload", plan_offload_name(r.runner_train.offload));
            cJSON_AddStringToObject(ru, "precision", plan_precision(r.runner_train.precision)->name);
            cJSON_AddNumberToObject(ru, "micro_batch", (double)r.runner_train.micro_batch);
            cJSON_AddStringToObject(ru, "act_ckpt", plan_ckpt_name(r.runner_train.act_ckpt));
            if (r.time_known) cJSON_AddNumberToObject(ru, "tokens_per_s", r.runner_tps);
            else cJSON_AddNumberToObject(ru, "comm_s", r.runner_comm_s);
        }
        if (!r.found && r.fix[0]) cJSON_AddStringToObject(a, "would_fit_with", r.fix);
        cJSON *rec = cJSON_GetObjectItem(j, "recommendation");
        if (r.found) {
            cJSON_ReplaceItemInObject(rec, "strategy", cJSON_CreateString(plan_strategy(r.strategy)->name));
            cJSON_AddNumberToObject(rec, "micro_batch", (double)r.train.micro_batch);
            cJSON_AddNumberToObject(rec, "grad_accum", (double)r.train.grad_accum);
            cJSON_AddStringToObject(rec, "act_ckpt", plan_ckpt_name(r.train.act_ckpt));
            cJSON_AddStringToObject(rec, "offload", plan_offload_name(r.train.offload));
            cJSON_AddStringToObject(rec, "precision", plan_precision(r.train.precision)->name);
        }
        rc = emit_json(j, s->json_path);
        cJSON_Delete(j);
    } else {
        auto_verdict(stdout, s, &r);   /* the answer first */
        char *body = NULL;
        size_t bn = 0;
        FILE *f = o->quiet ? NULL : open_memstream(&body, &bn);
        if (f) {
            if (s->config) cli_config_header(f, s->config);
            cli_setup_notes(f, s);
            plan_report_header(f, &s->model, &s->train, &s->cluster, &p);
            char dims[160], kept[160];
            auto_dims(s, &o->auto_spec, o->offload.offload >= 0, dims, sizeof dims, kept, sizeof kept);
            fprintf(f, "# auto: searched %ld setups (%s), simulated %ld that fit with the margin%s%s\n", r.candidates, dims,
                    r.evaluated, kept[0] ? "; kept as given: " : "", kept);
            fputs(r.explain, f);
            char *cmd = r.found ? auto_pick_command(s, o, &r) : NULL;
            if (cmd) fprintf(f, "recommendation: %s\n", cmd);
            else fprintf(f, "recommendation: change the setup: %s\n", r.fix[0] ? r.fix : "see above");
            free(cmd);
            fclose(f);
            print_body(o, body);
        } else if (!o->quiet) rc = 1, fprintf(stderr, "memplan: out of memory writing the output\n");
    }
    plan_free(&p);
    return rc;
}

static int cmd_plan(int argc, char **argv, int auto_mode) {
    CliSetup s;
    PlanOpts o;
    memset(&o, 0, sizeof(o));
    plan_auto_defaults(&o.auto_spec);
    cli_auto_opts_init(&o.offload);
    /* --strategy auto is auto mode */
    for (int i = 1; i < argc; i++) {
        if ((strcmp(argv[i], "--strategy") == 0 && i + 1 < argc && strcmp(argv[i + 1], "auto") == 0) ||
            strcmp(argv[i], "--strategy=auto") == 0) {
            auto_mode = 1;
            if (argv[i][10] == '=') argv[i] = "--strategy=all";
            else argv[i + 1] = "all";
        }
    }
    const char *cmd_name = strcmp(argv[0], "plan") == 0 ? "plan" : "help";   /* memplan --help: the overview */
    CliExtra extra = {PLAN_OPTIONS, plan_opt, &o, 1};
    int rc = cli_parse_setup(argc, argv, auto_mode ? "auto" : "plan", &s, &extra, 1);
    if (rc == 1) { usage(stdout, auto_mode ? "auto" : cmd_name); return 0; }
    if (rc) return rc;
    const char *auto_only = o.emit ? "--emit" : o.auto_spec.global_batch ? "--global-batch"
                          : o.bn_given ? "--bn-min-batch" : NULL;
    if (auto_mode && s.train.pp > 1) {   /* auto would search the accumulation, which is --microbatches here */
        cli_setup_free(&s);
        return cli_usage_error("--pp %d: 'memplan auto' does not search pipeline stages yet; plan the pipeline with "
                               "'memplan plan --pp %d' (its micro-batches with --microbatches), or search with --pp auto", s.train.pp, s.train.pp);
    }
    if (!auto_mode && s.train.pp < 0) {
        cli_setup_free(&s);
        return cli_usage_error("--pp auto belongs to 'memplan auto': plan takes a degree (--pp 4)");
    }
    if (!auto_mode && s.train.tp < 0) {
        cli_setup_free(&s);
        return cli_usage_error("--tp auto belongs to 'memplan auto': plan takes a degree (--tp 8)");
    }
    if (!auto_mode && s.train.ep < 0) {
        cli_setup_free(&s);
        return cli_usage_error("--ep auto belongs to 'memplan auto': plan takes a degree (--ep 8)");
    }
    if (o.quiet && (s.json || o.emit)) {
        cli_setup_free(&s);
        return cli_usage_error("--quiet prints the verdict line of the text output: drop it with %s", s.json ? "--json" : "--emit");
    }
    if (o.quiet && o.explain) {
        cli_setup_free(&s);
        return cli_usage_error("--quiet prints the verdict line alone, --explain everything: give one of them");
    }
    if (!auto_mode && auto_only) {
        cli_setup_free(&s);
        return cli_usage_error("%s belongs to 'memplan auto' (or --strategy auto): plan prints every strategy "
                               "and picks none", auto_only);
    }
    if ((rc = cli_auto_apply(&o.offload, &s, &o.auto_spec, auto_mode))) {
        cli_setup_free(&s);
        return rc;
    }
    char why[512];
    if (s.have_model && s.train.tp >= 0 && s.train.pp >= 0 &&
        !plan_auto_any_strategy(&s.model, &s.train, &s.cluster, s.strategies, why, sizeof why)) {
        cli_setup_free(&s);   /* every strategy left is refused by a dimension: nothing to plan, one line */
        return cli_usage_error("%s (no strategy of --strategy is left that plans this setup)", why);
    }
    if (s.train.pp > 1 && s.train.offload != OFFLOAD_NONE) {   /* --offload is applied just above */
        cli_setup_free(&s);
        return cli_usage_error("--pp %d with CPU offload: not planned (pipeline stages keep their model states on the GPU)",
                               s.train.pp);
    }
    if (o.emit == EMIT_DEEPSPEED && (s.train.tp > 1 || s.train.tp < 0 || s.train.pp > 1 || s.train.pp < 0)) {
        int tp = s.train.tp > 1 || s.train.tp < 0;
        char v[16];
        snprintf(v, sizeof v, "%d", tp ? s.train.tp : s.train.pp);
        cli_setup_free(&s);   /* a config that is not the plan is worse than none */
        return cli_usage_error("--emit deepspeed with --%s %s: a DeepSpeed config cannot express the %s memplan plans (%s); "
                               "--emit torch prints %s", tp ? "tp" : "pp", tp ? (s.train.tp < 0 ? "auto" : v) : (s.train.pp < 0 ? "auto" : v),
                               tp ? "tensor parallel" : "pipeline stages",
                               tp ? "torch's parallelize_module's split, with ddp, fsdp-full or ZeRO-1/2 on the data-parallel "
                                    "groups as Megatron-DeepSpeed runs it, not DeepSpeed's AutoTP"
                                  : "torch.distributed.pipelining's stages, not DeepSpeed's PipelineModule",
                               tp ? "the mesh and the parallelize_module plan of ddp or fsdp-full" : "the pipeline's split");
    }
    if (o.emit == EMIT_TORCH && s.train.tp > 1 && s.strategies && s.strategies == deepspeed_of(s.strategies)) {
        int tp = s.train.tp;
        cli_setup_free(&s);   /* a script that is not the plan is worse than none */
        return cli_usage_error("--emit torch with --tp %d and only ZeRO strategies: torch's parallelize_module takes ddp "
                               "or fsdp-full (valid: --strategy ddp,fsdp-full); ZeRO beside tensor parallel runs in "
                               "Megatron-DeepSpeed or InternLM: plan it with 'memplan plan --tp %d'", tp, tp);
    }
    if (o.emit && (s.train.ds.param_sync == PARAM_SYNC_BROADCAST || s.train.ds.zero_group > 0)) {
        cli_setup_free(&s);   /* a config that is not the plan is worse than none */
        return cli_usage_error("--emit with --%s: InternLM's hybrid ZeRO is not a DeepSpeed or torch setting; drop it "
                               "to emit DeepSpeed's ZeRO", s.train.ds.zero_group > 0 ? "zero-group" : "zero-param-sync broadcast");
    }
    if (o.emit && (s.json || o.trace || o.plot)) {
        cli_setup_free(&s);
        return cli_usage_error("--emit %s prints only the %s on standard output: drop %s, or run it without --emit",
                               EMITS[o.emit].name, EMITS[o.emit].prints,
                               s.json ? "--json" : o.trace ? "--trace" : "--plot");
    }
    if (o.auto_spec.global_batch && o.auto_spec.global_batch % (s.cluster.gpus / plan_tp_degree(&s.train))) {
        long long g = o.auto_spec.global_batch, n = s.cluster.gpus / plan_tp_degree(&s.train), lo = g / n * n;
        cli_setup_free(&s);
        if (lo == 0)
            return cli_usage_error("--global-batch %lld is smaller than the %lld GPUs (global batch = micro-batch x "
                                   "grad-accum x GPUs): give %lld or a multiple of it", g, n, n);
        return cli_usage_error("--global-batch %lld is not a multiple of the %lld GPUs (global batch = micro-batch x "
                               "grad-accum x GPUs): give %lld or %lld", g, n, lo, lo + n);
    }
    if ((rc = check_outputs(&o, &s))) {
        cli_setup_free(&s);
        return rc;
    }
    if (auto_mode && !plan_model_acts_known(&s.model)) {
        /* nothing to size a micro-batch from: keep the given one instead of "the largest" */
        o.auto_spec.keep_batch = 1;
        fprintf(stderr, "# auto: %s has no activation model (%s): the micro-batch is not searched "
                "(kept at --batch %lld); peaks leave activations out, step time and tokens/s are not known, and "
                "setups rank by their communication time\n",
                s.model.name, s.model.arch == ARCH_GENERIC ? "only parameter counts are known" : "activations unknown",
                (long long)s.train.micro_batch);
    }
    if (auto_mode) {
        rc = run_auto(&s, &o);
        cli_setup_free(&s);
        return rc;
    }
    Plan p;
    plan_run(&s.model, &s.train, &s.cluster, s.strategies, &p);
    if (o.offload.headroom >= 0) plan_auto_recommend(&s.model, &s.train, &s.cluster, &o.auto_spec, &p);   /* --min-headroom */
    rc = write_files(&o, &s, &p);   /* first: a file that cannot be written leaves nothing on standard output */
    if (rc) { plan_free(&p); cli_setup_free(&s); return rc; }
    if (s.json) {
        cJSON *j = plan_report_json(&s.model, &s.train, &s.cluster, &p);
        if (s.config) cJSON_AddItemToObject(j, "config", cli_config_json(s.config));
        cli_setup_notes_json(j, &s);
        rc = emit_json(j, s.json_path);
        cJSON_Delete(j);
    } else {
        plan_report_verdict(stdout, &s.model, &s.cluster, &p);   /* the answer first */
        char *body = NULL;
        size_t bn = 0;
        FILE *f = o.quiet ? NULL : open_memstream(&body, &bn);
        if (f) {
            PlanReportStyle st = {o.wide, o.explain};
            if (s.config) cli_config_header(f, s.config);
            cli_setup_notes(f, &s);
            plan_report_table(f, &s.model, &s.train, &s.cluster, &p, &st);
            if (o.explain) plan_report_explain(f, &s.model, &s.train, &s.cluster, &p);
            char *cmd = plan_pick_command(&s, &o, &p);
            if (cmd) fprintf(f, "recommendation: %s\nwhy: %s\n", cmd, p.reason);
            else fprintf(f, "recommendation: none\nwhy: %s\n", p.reason);
            free(cmd);
            fclose(f);
            print_body(&o, body);
        } else if (!o.quiet) rc = 1, fprintf(stderr, "memplan: out of memory writing the output\n");
    }
    plan_free(&p);
    cli_setup_free(&s);
    return rc;
}

/* The options of models and gpus: --json[=FILE], --export NAME and --family F (models), --help.
 * Returns 0 to go on, 1 after --help, 2 after a usage error. */
static const struct option LIST_OPTIONS[] = {
    {"json", optional_argument, 0, 'j'}, {"export", required_argument, 0, 'e'}, {"family", required_argument, 0, 'f'},
    {"help", no_argument, 0, 'h'}, {0, 0, 0, 0}};

static int list_opts(int argc, char **argv, const char *cmd, int *json, const char **json_path,
                     const char **export_name, const char **family) {
    const char *valid = export_name ? "--family F, --json[=FILE], --export NAME, --help" : "--json[=FILE], --help";
    int seen_json = 0, c;
    optind = 1;
    opterr = 0;
    while ((c = getopt_long(argc, argv, ":h", LIST_OPTIONS, NULL)) != -1) {
        const char *a = optarg;
        if (c == 'h') return 1;
        if (c == 'j' && !seen_json++) { *json = 1; *json_path = a; continue; }
        if (c == 'j') return cli_usage_error("--json given twice (see 'memplan %s --help')", cmd);
        if (c == 'e' && export_name) {
            if (a[0] == '-' && a[1] == '-') return cli_usage_error("--export needs a model name (got the option '%s')", a);
            if (*export_name) return cli_usage_error("--export given twice ('%s' and '%s')", *export_name, a);
            *export_name = a;
            continue;
        }
        if (c == 'f' && family) {
            char fams[1024];
            if (*family) return cli_usage_error("--family given twice ('%s' and '%s')", *family, a);
            if (!plan_zoo_family_known(a))
                return cli_usage_error("--family '%s': no such family (valid: %s)", a, plan_zoo_families(fams, sizeof fams));
            *family = a;
            continue;
        }
        if (c == ':') return cli_usage_error("%s needs a value (see 'memplan %s --help')", argv[optind - 1], cmd);
        return cli_usage_error("unknown argument '%s' for '%s' (valid: %s)", argv[optind - 1], cmd, valid);
    }
    if (optind < argc) {
        int bare_json = 0;
        for (int i = 1; i < optind; i++) bare_json |= strcmp(argv[i], "--json") == 0;
        return cli_usage_error("unexpected argument '%s' for '%s' (valid: %s%s)", argv[optind], cmd, valid,
                               bare_json ? "; a file is --json=FILE" : "");
    }
    char err[PATH_MAX + 256];
    if (*json_path && cli_check_output("--json", *json_path, NULL, 0, err, sizeof err)) return cli_usage_error("%s", err);
    return 0;
}

/* One zoo entry as `memplan models` shows it: the numbers come from building the model. */
static cJSON *model_json(const ZooEntry *e, const ModelSpec *m) {
    cJSON *o = cJSON_CreateObject();
    int blocks = m->n_layer + m->n_enc_layer;
    cJSON_AddStringToObject(o, "name", e->name);
    if (e->hub_id) cJSON_AddStringToObject(o, "hub_id", e->hub_id);
    else cJSON_AddNullToObject(o, "hub_id");
    cJSON_AddStringToObject(o, "family", e->family);
    if (m->family[0]) cJSON_AddStringToObject(o, "model_type", m->family);
    else cJSON_AddNullToObject(o, "model_type");
    cJSON_AddStringToObject(o, "arch", plan_arch_name(m->arch));
    cJSON_AddNumberToObject(o, "params", (double)plan_model_params(m));
    cJSON_AddNumberToObject(o, "active_params", (double)plan_model_active_params(m));
    cJSON_AddNumberToObject(o, "experts", m->moe.n_experts);
    cJSON_AddNumberToObject(o, "top_k", m->moe.top_k);
    if (blocks > 0) cJSON_AddNumberToObject(o, "blocks", blocks);
    else cJSON_AddNullToObject(o, "blocks");
    if (m->arch != ARCH_CNN && m->max_seq > 0) cJSON_AddNumberToObject(o, "context", (double)m->max_seq);
    else cJSON_AddNullToObject(o, "context");
    cJSON_AddNumberToObject(o, "layers", m->n_layers);
    if (e->config) cJSON_AddStringToObject(o, "config", e->config);
    else cJSON_AddNullToObject(o, "config");
    cJSON_AddStringToObject(o, "source", e->source);
    return o;
}

static void model_row(const ZooEntry *e, const ModelSpec *m) {
    char cnt[32], act[32], blocks[16] = "-", ctx[24] = "-";
    int nb = m->n_layer + m->n_enc_layer;
    if (nb > 0) snprintf(blocks, sizeof blocks, "%d", nb);
    if (m->arch != ARCH_CNN && m->max_seq > 0) snprintf(ctx, sizeof ctx, "%lld", (long long)m->max_seq);
    if (m->moe.n_experts > 0) plan_fmt_count(plan_model_active_params(m), act, sizeof act);
    else snprintf(act, sizeof act, "-");
    printf("%-24s %-36s %-11s %17s %17s %6s %9s\n", e->name, e->hub_id ? e->hub_id : "-", e->family,
           plan_fmt_count(plan_model_params(m), cnt, sizeof cnt), act, blocks, ctx);
}

static int cmd_models(int argc, char **argv) {
    int json = 0;
    const char *export_name = NULL, *json_path = NULL, *family = NULL;
    int rc = list_opts(argc, argv, "models", &json, &json_path, &export_name, &family);
    if (rc == 1) {
        printf("memplan models [--family F] [--json[=FILE]] [--export NAME|ID|PATH]: list the zoo, each model with its hub id,\n"
               "family, parameters (total, and active per token for mixture-of-experts models), blocks and context\n"
               "(--family: one family's; --json: as JSON, to standard output or FILE), or print a model in memplan's\n"
               "JSON model format (docs/model-formats.md). --model takes a zoo model by alias or hub id in any case;\n"
               "sources and the lookup of other hub ids: docs/models.md\n");
        return 0;
    }
    if (rc) return rc;
    if (export_name && json) return cli_usage_error("--export prints the model as JSON already: drop --json");
    if (export_name && family) return cli_usage_error("--family filters the list: drop it with --export");
    char msg[1536];
    if (export_name) {
        ModelSpec m;
        if (cli_model_load(&m, export_name, NULL, msg, sizeof(msg))) return cli_usage_error("%s", msg);
        char *txt = NULL;
        rc = plan_model_export_json(&m, &txt);
        plan_model_free(&m);
        if (rc) { fprintf(stderr, "memplan: out of memory exporting %s\n", export_name); return 1; }
        rc = cli_write_text("the exported model", NULL, txt);
        free(txt);
        return rc;
    }
    cJSON *arr = json ? cJSON_CreateArray() : NULL;
    if (!json) {
        printf("%-24s %-36s %-11s %17s %17s %6s %9s\n", "model", "hub id", "family", "params", "active", "blocks", "context");
        printf("%-24s %-36s %-11s %17s %17s %6s %9s\n", "-", "-", "-", "count", "count", "count", "tokens");
    }
    int shown = 0;
    for (int i = 0; i < plan_zoo_count(); i++) {
        const ZooEntry *e = plan_zoo_entry(i);
        if (family && strcasecmp(e->family, family) != 0) continue;
        ModelSpec m;
        if (plan_zoo_build_entry(&m, e, msg, sizeof(msg))) {
            fprintf(stderr, "memplan: %s\n", msg);
            cJSON_Delete(arr);
            return 1;
        }
        if (json) cJSON_AddItemToArray(arr, model_json(e, &m));
        else model_row(e, &m);
        shown++;
        plan_model_free(&m);
    }
    if (json) { rc = emit_json(arr, json_path); cJSON_Delete(arr); return rc; }
    printf("# %d model%s; active = parameters one token uses (mixture of experts); --model takes the alias or the hub id, "
           "in any case; other hub ids: the Hugging Face cache, else the hub (docs/models.md)\n", shown, shown == 1 ? "" : "s");
    return 0;
}

static int cmd_gpus(int argc, char **argv) {
    int json = 0;
    const char *json_path = NULL;
    int rc = list_opts(argc, argv, "gpus", &json, &json_path, NULL, NULL);
    if (rc == 1) {
        printf("memplan gpus [--json[=FILE]]: the GPU presets with their memory, bandwidths and peak FLOP/s "
               "(--json: as JSON, to standard output or FILE); sources in docs/gpus.md\n");
        return 0;
    }
    if (rc) return rc;
    cJSON *arr = json ? cJSON_CreateArray() : NULL;
    if (!json) {
        printf("%-10s %8s %9s %9s %8s %8s %8s  %s\n", "gpu", "memory", "intra_bw", "inter_bw",
               "fp32", "fp16", "bf16", "name / interconnect");
        printf("%-10s %8s %9s %9s %8s %8s %8s  %s\n", "-", "GiB", "GB/s", "GB/s", "TFLOP/s",
               "TFLOP/s", "TFLOP/s", "-");
    }
    for (int i = 0; i < plan_gpu_count(); i++) {
        const GpuPreset *g = plan_gpu_preset(i);
        if (json) {
            cJSON *o = cJSON_CreateObject();
            cJSON_AddStringToObject(o, "name", g->name);
            cJSON_AddStringToObject(o, "label", g->label);
            cJSON_AddNumberToObject(o, "mem_bytes", g->mem_bytes);
            cJSON_AddNumberToObject(o, "intra_bw_gbps", g->intra_bw);
            cJSON_AddNumberToObject(o, "inter_bw_gbps", g->inter_bw);
            cJSON_AddNumberToObject(o, "peak_tflops_fp32", g->peak_tflops[0]);
            cJSON_AddNumberToObject(o, "peak_tflops_fp16", g->peak_tflops[1]);
            cJSON_AddNumberToObject(o, "peak_tflops_bf16", g->peak_tflops[2]);
            cJSON_AddNumberToObject(o, "host_mem_per_gpu_bytes", g->host_mem_per_gpu);
            cJSON_AddNumberToObject(o, "host_bw_gbps", g->host_bw);
            cJSON_AddNumberToObject(o, "host_dram_bw_gbps", g->host_mem_bw);
            cJSON_AddStringToObject(o, "typical_node", g->node);
            if (g->eff) {   /* what the per-operation time model prices it at (docs/gpus.md "Achieved rates") */
                cJSON *e = cJSON_AddObjectToObject(o, "achieved");
                cJSON_AddStringToObject(e, "generation", g->eff->key);
                cJSON_AddNumberToObject(e, "gemm_eff", g->eff->gemm_eff);
                cJSON_AddNumberToObject(e, "gemm_share", g->eff->gemm_train);
                cJSON_AddNumberToObject(e, "attn_share", plan_attn_share(ATTN_KERNEL_FA2));
                cJSON *ks = cJSON_AddObjectToObject(e, "attn_shares");   /* per flash kernel (--attn-kernel) */
                for (int k = 0; k < ATTN_KERNEL_COUNT; k++)
                    cJSON_AddNumberToObject(ks, plan_attn_kernel_name((AttnKernel)k), plan_attn_share((AttnKernel)k));
                cJSON_AddBoolToObject(e, "measured", g->eff->measured);
            }
            cJSON_AddItemToArray(arr, o);
        } else {
            printf("%-10s %8.2f %9.1f %9.2f %8.1f %8.1f %8.1f  %s, %s\n", g->name, g->mem_bytes / GIB,
                   g->intra_bw, g->inter_bw, g->peak_tflops[0], g->peak_tflops[1], g->peak_tflops[2],
                   g->label, g->interconnect);
        }
    }
    if (json) { rc = emit_json(arr, json_path); cJSON_Delete(arr); return rc; }
    return 0;
}

const struct option *memplan_command_options(const char *cmd) {
    if (strcmp(cmd, "plan") == 0 || strcmp(cmd, "auto") == 0) return PLAN_OPTIONS;
    if (strcmp(cmd, "models") == 0 || strcmp(cmd, "gpus") == 0) return LIST_OPTIONS;
    return NULL;
}

/* run, validate and bench: memplan-exec beside this binary's resolved path, with the same
 * arguments and environment (mpirun's included: every rank execs its own). OpenBLAS starts its
 * threads when it is loaded, before main, so their number is set here: OPENBLAS_NUM_THREADS when
 * given, else this node's cores shared by its ranks. Returns only on failure. */
static int exec_backend(char **argv) {
    char self[PATH_MAX], path[PATH_MAX + 32];
    ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    if (n <= 0) {
        fprintf(stderr, "memplan: cannot find this program's own path (/proc/self/exe: %s) to start memplan-exec\n", strerror(errno));
        return 1;
    }
    self[n] = 0;
    snprintf(path, sizeof path, "%s/memplan-exec", dirname(self));
    if (access(path, X_OK)) {
        fprintf(stderr, "memplan: '%s %s' needs %s, which is %s (build it: make)\n", argv[0], argv[1], path,
                errno == ENOENT ? "missing" : "not executable");
        return 1;
    }
    if (!getenv("OPENBLAS_NUM_THREADS")) {
        long cores = sysconf(_SC_NPROCESSORS_ONLN), local = exec_launch_local_size(1);   /* this node's ranks */
        long th = local > 0 && cores / local > 1 ? cores / local : 1;
        struct rlimit rl;   /* under an address-space limit every BLAS thread's 128 MiB buffer counts */
        if (getrlimit(RLIMIT_AS, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY) th = 1;
        char v[32];
        snprintf(v, sizeof v, "%ld", th);
        setenv("OPENBLAS_NUM_THREADS", v, 1);
    }
    fflush(NULL);
    execv(path, argv);
    fprintf(stderr, "memplan: cannot start %s: %s\n", path, strerror(errno));
    return 1;
}

int memplan_front(int argc, char **argv) {
    if (argc == 2 && strcmp(argv[1], "--version") == 0) { printf("memplan %s\n", MEMPLAN_VERSION); return 0; }
    if (argc >= 2 && argv[1][0] != '-') {
        const char *cmd = argv[1];
        if (strcmp(cmd, "plan") == 0) return cmd_plan(argc - 1, argv + 1, 0);
        if (strcmp(cmd, "auto") == 0) return cmd_plan(argc - 1, argv + 1, 1);
        if (strcmp(cmd, "models") == 0) return cmd_models(argc - 1, argv + 1);
        if (strcmp(cmd, "gpus") == 0) return cmd_gpus(argc - 1, argv + 1);
        if (strcmp(cmd, "alloc") == 0) return cli_cmd_alloc(argc - 1, argv + 1);
        if (strcmp(cmd, "help") == 0) {   /* memplan help [plan|auto] */
            const char *of = argc > 2 && (strcmp(argv[2], "plan") == 0 || strcmp(argv[2], "auto") == 0) ? argv[2] : "help";
            usage(stdout, of);
            return 0;
        }
        /* `validate --against torch` plans, then runs the PyTorch harness under torchrun: it needs
           no MPI, BLAS or CUDA in this process, so the front end serves it */
        if (strcmp(cmd, "validate") == 0 && cli_wants_against(argc - 1, argv + 1))
            return cli_cmd_validate_torch(argc - 1, argv + 1);
        if (strcmp(cmd, "run") == 0 || strcmp(cmd, "validate") == 0 || strcmp(cmd, "bench") == 0)
            return exec_backend(argv);
        return cli_usage_error("unknown command '%s' (valid: plan, auto, models, gpus, alloc, run, validate, bench, help)", cmd);
    }
    if (argc < 2) { usage(stderr, "help"); return 2; }
    return cmd_plan(argc, argv, 0);
}
