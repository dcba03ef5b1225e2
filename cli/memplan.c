/* memplan.c — the command line: subcommands and output. No planning logic lives here. */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "cli_bench.h"
#include "cli_output.h"
#include "cli_run.h"
#include "cli_setup.h"
#include "kern_blas.h"
#include "plan_auto.h"
#include "plan_load.h"
#include "plan_plan.h"
#include "plan_report.h"
#include "plan_strategy.h"
#include "plan_util.h"
#include "plan_zoo.h"

static void usage(FILE *f) {
    fprintf(f,
        "memplan — per-GPU memory and communication of DDP, ZeRO 1/2/3 and FSDP, before you run\n\n"
        "Usage:\n"
        "  memplan [plan] --model NAME|PATH [options]   plan every strategy (the default command)\n"
        "  memplan auto --model NAME|PATH [options]     pick DDP or a sharded strategy and explain why\n"
        "      --global-batch G     samples per optimizer step over all GPUs (searched: micro-batch x accumulation)\n"
        "      --bn-min-batch B     per-GPU batch below which SyncBN is advised (default 16)\n"
        "      --emit deepspeed|torch   print a DeepSpeed config / a torchrun command and wrapping snippet\n"
        "  memplan models [--json] [--export NAME]       list the zoo / export a model as JSON\n"
        "  memplan gpus [--json]                         list the GPU presets\n"
        "  mpirun -np N memplan run --model gpt2-tiny --strategy ddp|zero1|zero2|zero3 [--steps K]\n"
        "                                                train for real over MPI with a profiler summary\n"
        "  mpirun -np N memplan validate --model gpt2-tiny [--strategy all]\n"
        "                                                predicted vs measured memory and collectives\n"
        "      (run/validate options: memplan run --help)\n"
        "  mpirun -np N memplan bench syncbn [--model resnet50] [--batches 2,4,8] [--json F] [--plot F.png]\n"
        "                                                what SyncBatchNorm costs, measured next to the prediction\n"
        "      (bench options: memplan bench syncbn --help)\n"
        "  memplan help                                  this text\n\n");
    cli_print_setup_help(f);
    fprintf(f, "  --trace FILE           the simulated step as a Chrome trace (Perfetto, chrome://tracing)\n"
               "  --plot FILE.png|.svg   memory breakdown and memory over the step (gnuplot)\n");
    fprintf(f, "\nExit status: 0 when planning succeeded (also when nothing fits), 2 on a usage error.\n"
               "Memory is in binary GiB (2^30 bytes). Formulas and sources: docs/formulas.md.\n");
}

/* Writes JSON to --json=FILE or stdout. */
static int emit_json(cJSON *j, const char *path) {
    char *txt = j ? cJSON_Print(j) : NULL;
    if (!txt) { fprintf(stderr, "memplan: out of memory writing JSON\n"); return 1; }
    FILE *f = path ? fopen(path, "w") : stdout;
    if (!f) { fprintf(stderr, "memplan: cannot write --json file '%s'\n", path); free(txt); return 1; }
    fprintf(f, "%s\n", txt);
    if (path) fclose(f);
    free(txt);
    return 0;
}

/* Options of plan and auto beyond the shared ones. */
typedef struct {
    const char *trace, *plot, *emit;
    int auto_mode;
    AutoSpec auto_spec;
} PlanOpts;

enum { OPT_TRACE = 2000, OPT_PLOT, OPT_EMIT, OPT_GLOBAL_BATCH, OPT_BN_MIN };
static const struct option PLAN_OPTIONS[] = {
    {"trace", required_argument, 0, OPT_TRACE},
    {"plot", required_argument, 0, OPT_PLOT},
    {"emit", required_argument, 0, OPT_EMIT},
    {"global-batch", required_argument, 0, OPT_GLOBAL_BATCH},
    {"bn-min-batch", required_argument, 0, OPT_BN_MIN},
    {0, 0, 0, 0},
};

static int safe_path(const char *p) { return p[0] && !strpbrk(p, "'\"`$\\"); }

static int plan_opt(void *ctx, int opt, const char *arg, char *err, size_t errlen) {
    PlanOpts *o = ctx;
    long long v;
    switch (opt) {
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
        if (strcmp(arg, "deepspeed") && strcmp(arg, "torch")) { snprintf(err, errlen, "unknown --emit '%s' (valid: deepspeed, torch)", arg); return -1; }
        o->emit = arg;
        return 0;
    case OPT_GLOBAL_BATCH:
        if (plan_parse_int(arg, 1, 1000000000LL, &v)) { snprintf(err, errlen, "--global-batch '%s' is not an integer in [1, 1e9]", arg); return -1; }
        o->auto_spec.global_batch = v;
        return 0;
    case OPT_BN_MIN:
        if (plan_parse_int(arg, 1, 1000000, &v)) { snprintf(err, errlen, "--bn-min-batch '%s' is not an integer in [1, 1000000]", arg); return -1; }
        o->auto_spec.bn_min_batch = v;
        return 0;
    default: return 1;
    }
}

static int write_files(const PlanOpts *o, const CliSetup *s, const Plan *p) {
    if (o->trace && cli_write_sim_trace(o->trace, &s->model, &s->train, &s->cluster, p)) {
        fprintf(stderr, "memplan: cannot write --trace file '%s'\n", o->trace);
        return 1;
    }
    if (o->plot && cli_write_plot(o->plot, &s->model, &s->train, &s->cluster, p)) {
        fprintf(stderr, "memplan: cannot write --plot file '%s'\n", o->plot);
        return 1;
    }
    if (o->trace) fprintf(stderr, "# wrote the simulated timeline to %s (open in ui.perfetto.dev or chrome://tracing)\n", o->trace);
    if (o->plot) fprintf(stderr, "# wrote the plot to %s\n", o->plot);
    return 0;
}

static int run_auto(CliSetup *s, PlanOpts *o) {
    AutoResult r;
    o->auto_spec.strategies = s->strategies;
    plan_auto(&s->model, &s->train, &s->cluster, &o->auto_spec, &r);
    int rc = 0;
    if (o->emit && strcmp(o->emit, "deepspeed") == 0) {
        char *txt = plan_auto_deepspeed_json(&s->model, &s->cluster, &r);
        if (!txt) { fprintf(stderr, "memplan: nothing fits, no DeepSpeed config:\n%s", r.explain); return 0; }
        printf("%s\n", txt);
        free(txt);
        return 0;
    }
    if (o->emit) { plan_auto_torch(stdout, &s->model, &s->cluster, &r); return 0; }
    Plan p;
    if (r.found) {
        TrainSpec chosen = r.train;
        plan_run(&s->model, &chosen, &s->cluster, 1u << r.strategy, &p);
        s->train = chosen;
    } else {
        plan_run(&s->model, &s->train, &s->cluster, s->strategies, &p);
    }
    if (s->json) {
        cJSON *j = plan_report_json(&s->model, &s->train, &s->cluster, &p);
        cJSON *a = cJSON_AddObjectToObject(j, "auto");
        cJSON_AddBoolToObject(a, "found", r.found);
        if (r.found) cJSON_AddStringToObject(a, "strategy", plan_strategy(r.strategy)->name);
        cJSON_AddNumberToObject(a, "candidates", (double)r.candidates);
        cJSON_AddNumberToObject(a, "simulated", (double)r.evaluated);
        cJSON_AddStringToObject(a, "explain", r.explain);
        cJSON *rec = cJSON_GetObjectItem(j, "recommendation");
        if (r.found) {
            cJSON_ReplaceItemInObject(rec, "strategy", cJSON_CreateString(plan_strategy(r.strategy)->name));
            cJSON_AddNumberToObject(rec, "micro_batch", (double)r.train.micro_batch);
            cJSON_AddNumberToObject(rec, "grad_accum", (double)r.train.grad_accum);
            cJSON_AddStringToObject(rec, "act_ckpt", plan_ckpt_name(r.train.act_ckpt));
        }
        rc = emit_json(j, s->json_path);
        cJSON_Delete(j);
    } else {
        plan_report_header(stdout, &s->model, &s->train, &s->cluster);
        printf("# auto: searched %ld setups (strategy x micro-batch x checkpointing%s), simulated %ld that fit\n",
               r.candidates, o->auto_spec.global_batch ? " x accumulation for the global batch" : "", r.evaluated);
        fputs(r.explain, stdout);
        if (r.found)
            printf("recommendation: %s --batch %lld --grad-accum %lld --act-ckpt %s\n", plan_strategy(r.strategy)->name,
                   (long long)r.train.micro_batch, (long long)r.train.grad_accum, plan_ckpt_name(r.train.act_ckpt));
        else
            printf("recommendation: none\n");
    }
    if (!rc) rc = write_files(o, s, &p);
    return rc;
}

static int cmd_plan(int argc, char **argv, int auto_mode) {
    CliSetup s;
    PlanOpts o;
    memset(&o, 0, sizeof(o));
    plan_auto_defaults(&o.auto_spec);
    /* --strategy auto is auto mode */
    for (int i = 1; i < argc; i++) {
        if ((strcmp(argv[i], "--strategy") == 0 && i + 1 < argc && strcmp(argv[i + 1], "auto") == 0) ||
            strcmp(argv[i], "--strategy=auto") == 0) {
            auto_mode = 1;
            if (argv[i][10] == '=') argv[i] = "--strategy=all";
            else argv[i + 1] = "all";
        }
    }
    CliExtra extra = {PLAN_OPTIONS, plan_opt, &o};
    int rc = cli_parse_setup(argc, argv, auto_mode ? "auto" : "plan", &s, &extra, 1);
    if (rc == 1) { usage(stdout); return 0; }
    if (rc) return rc;
    if (!auto_mode && (o.emit || o.auto_spec.global_batch)) {
        cli_setup_free(&s);
        return cli_usage_error("--emit and --global-batch belong to 'memplan auto' (or --strategy auto)");
    }
    if (auto_mode) {
        rc = run_auto(&s, &o);
        cli_setup_free(&s);
        return rc;
    }
    Plan p;
    plan_run(&s.model, &s.train, &s.cluster, s.strategies, &p);
    if (s.json) {
        cJSON *j = plan_report_json(&s.model, &s.train, &s.cluster, &p);
        rc = emit_json(j, s.json_path);
        cJSON_Delete(j);
    } else {
        plan_report_table(stdout, &s.model, &s.train, &s.cluster, &p);
    }
    if (!rc) rc = write_files(&o, &s, &p);
    cli_setup_free(&s);
    return rc;
}

static int cmd_models(int argc, char **argv) {
    int json = 0;
    const char *export_name = NULL;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--json") == 0) json = 1;
        else if (strcmp(argv[i], "--export") == 0 && i + 1 < argc) export_name = argv[++i];
        else if (strncmp(argv[i], "--export=", 9) == 0) export_name = argv[i] + 9;
        else if (strcmp(argv[i], "--help") == 0) {
            printf("memplan models [--json] [--export NAME|PATH]: list the zoo, or print a model in "
                   "memplan's JSON model format (docs/model-formats.md)\n");
            return 0;
        } else return cli_usage_error("unknown argument '%s' for 'models' (valid: --json, --export NAME)", argv[i]);
    }
    char msg[512];
    if (export_name) {
        ModelSpec m;
        if (plan_load_model(&m, export_name, msg, sizeof(msg))) return cli_usage_error("%s", msg);
        char *txt = NULL;
        int rc = plan_model_export_json(&m, &txt);
        plan_model_free(&m);
        if (rc) { fprintf(stderr, "memplan: out of memory exporting %s\n", export_name); return 1; }
        printf("%s\n", txt);
        free(txt);
        return 0;
    }
    cJSON *arr = json ? cJSON_CreateArray() : NULL;
    if (!json) {
        printf("%-12s %16s %7s %-16s %s\n", "model", "params", "layers", "arch", "reference");
        printf("%-12s %16s %7s %-16s %s\n", "-", "count", "count", "-", "-");
    }
    for (int i = 0; i < plan_zoo_count(); i++) {
        const ZooEntry *e = plan_zoo_entry(i);
        ModelSpec m;
        if (plan_zoo_build(&m, e->name, msg, sizeof(msg))) { fprintf(stderr, "memplan: %s\n", msg); return 1; }
        char cnt[32];
        if (json) {
            cJSON *o = cJSON_CreateObject();
            cJSON_AddStringToObject(o, "name", e->name);
            cJSON_AddNumberToObject(o, "params", (double)plan_model_params(&m));
            cJSON_AddNumberToObject(o, "layers", m.n_layers);
            cJSON_AddStringToObject(o, "arch", plan_arch_name(m.arch));
            cJSON_AddStringToObject(o, "reference", e->reference);
            cJSON_AddItemToArray(arr, o);
        } else {
            printf("%-12s %16s %7d %-16s %s\n", e->name, plan_fmt_count(plan_model_params(&m), cnt, sizeof(cnt)),
                   m.n_layers, plan_arch_name(m.arch), e->reference);
        }
        plan_model_free(&m);
    }
    if (json) { int rc = emit_json(arr, NULL); cJSON_Delete(arr); return rc; }
    return 0;
}

static int cmd_gpus(int argc, char **argv) {
    int json = argc > 1 && strcmp(argv[1], "--json") == 0;
    if (argc > 1 && !json) return cli_usage_error("unknown argument '%s' for 'gpus' (valid: --json)", argv[1]);
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
            cJSON_AddItemToArray(arr, o);
        } else {
            printf("%-10s %8.2f %9.1f %9.2f %8.1f %8.1f %8.1f  %s, %s\n", g->name, g->mem_bytes / GIB,
                   g->intra_bw, g->inter_bw, g->peak_tflops[0], g->peak_tflops[1], g->peak_tflops[2],
                   g->label, g->interconnect);
        }
    }
    if (json) { int rc = emit_json(arr, NULL); cJSON_Delete(arr); return rc; }
    return 0;
}

int main(int argc, char **argv) {
    if (argc >= 2 && argv[1][0] != '-') {
        const char *cmd = argv[1];
        /* the engine's commands: OpenBLAS's fast GEMM kernel on CPUs it does not know */
        if (strcmp(cmd, "run") == 0 || strcmp(cmd, "validate") == 0 || strcmp(cmd, "bench") == 0)
            kern_blas_select_core(argv);
        if (strcmp(cmd, "plan") == 0) return cmd_plan(argc - 1, argv + 1, 0);
        if (strcmp(cmd, "auto") == 0) return cmd_plan(argc - 1, argv + 1, 1);
        if (strcmp(cmd, "models") == 0) return cmd_models(argc - 1, argv + 1);
        if (strcmp(cmd, "gpus") == 0) return cmd_gpus(argc - 1, argv + 1);
        if (strcmp(cmd, "run") == 0) return cli_cmd_run(argc - 1, argv + 1);
        if (strcmp(cmd, "validate") == 0) return cli_cmd_validate(argc - 1, argv + 1);
        if (strcmp(cmd, "bench") == 0) return cli_cmd_bench(argc - 1, argv + 1);
        if (strcmp(cmd, "help") == 0) { usage(stdout); return 0; }
        return cli_usage_error("unknown command '%s' (valid: plan, auto, models, gpus, run, validate, bench, help)", cmd);
    }
    if (argc < 2) { usage(stderr); return 2; }
    return cmd_plan(argc, argv, 0);
}
