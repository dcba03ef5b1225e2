/* bench/cnn_device.c — the ResNet training step on a device: DDP over the ranks, SyncBatchNorm
 * when there are several (torch.nn.SyncBatchNorm.convert_sync_batchnorm before DDP), fp32, AdamW.
 * Per batch size: the median step time of the slowest rank, images/s, the wall time inside
 * SyncBN's collectives, the tracked peak memory by category and the loss; with --check, the
 * parameters after the steps against one CPU process trained on the global batch (plain
 * BatchNorm over all N·B images, which SyncBN on N ranks computes).
 *
 *   [mpirun -np N] build/bench/cnn_device [--device cuda|cpu] [--model resnet50] [--image S]
 *       [--batches 8,16] [--steps K] [--warmup W] [--check] [--no-syncbn] [--json FILE]
 *       [--timeout S] [--seed N]
 *
 * On a GPU (--device cuda) the CNN runs the CUDA kernels (kern_cnn_cuda.h, kern_cuda.h) on the
 * device's compute stream and the collectives go over NCCL (one rank per GPU, local_rank % GPUs;
 * several ranks on one GPU only as fake hosts, NCCL_HOSTID per rank: then times are not real
 * measurements, and the rows say so). On the CPU it runs the same code through the host kernel
 * table over MPI, which is what the tests check here. Rows print as they are measured; the JSON
 * file is rewritten after every row (complete: false until the last), so a run cut short keeps
 * what it measured. Exit: 0, 1 (a failure or a failed check), 2 (usage). */
#include <cjson/cJSON.h>
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "exec_cnn.h"
#include "exec_comm.h"
#include "exec_device.h"
#include "exec_model.h"
#include "exec_step.h"
#include "exec_strategy.h"
#include "plan_util.h"
#include "prof_comm.h"
#include "prof_mem.h"
#include "prof_phase.h"

#define MAX_BATCHES 8

typedef struct {
    DeviceKind device;
    char model[32];
    int image;           /* 0: the preset's */
    int batches[MAX_BATCHES], nb;
    int steps, warmup, check, syncbn, seed;
    double timeout_s;
    const char *json;
} Opts;

static int usage(const char *why)
{
    fprintf(stderr, "cnn_device: %s\n", why);
    fprintf(stderr, "usage: [mpirun -np N] cnn_device [--device cuda|cpu] [--model resnet50|resnet-mini|resnet-tiny] "
                    "[--image S] [--batches 8,16] [--steps K] [--warmup W] [--check] [--no-syncbn] [--json FILE] "
                    "[--timeout S] [--seed N]\n");
    return 2;
}

static int parse(int argc, char **argv, Opts *o)
{
    static const struct option L[] = {
        {"device", 1, 0, 'd'}, {"model", 1, 0, 'm'}, {"image", 1, 0, 'i'}, {"batches", 1, 0, 'b'},
        {"steps", 1, 0, 's'}, {"warmup", 1, 0, 'w'}, {"check", 0, 0, 'c'}, {"no-syncbn", 0, 0, 'n'},
        {"json", 1, 0, 'j'}, {"timeout", 1, 0, 't'}, {"seed", 1, 0, 'e'}, {0, 0, 0, 0},
    };
    memset(o, 0, sizeof *o);
    o->device = DEVICE_CUDA;
    snprintf(o->model, sizeof o->model, "resnet50");
    o->batches[0] = 8;
    o->nb = 1;
    o->steps = 3;
    o->warmup = 1;
    o->syncbn = 1;
    o->seed = 1234;
    o->timeout_s = 120;
    char why[200];
    int ch;
    opterr = 0;
    while ((ch = getopt_long(argc, argv, "", L, NULL)) != -1) {
        char *end = NULL;
        switch (ch) {
        case 'd':
            if (strcmp(optarg, "cuda") == 0) o->device = DEVICE_CUDA;
            else if (strcmp(optarg, "cpu") == 0) o->device = DEVICE_HOST;
            else {
                snprintf(why, sizeof why, "unknown --device '%s' (valid: cuda, cpu)", optarg);
                return usage(why);
            }
            break;
        case 'm': snprintf(o->model, sizeof o->model, "%s", optarg); break;
        case 'i':
            o->image = (int)strtol(optarg, &end, 10);
            if (*end || o->image < 16 || o->image > 4096) return usage("--image takes a side in [16, 4096]");
            break;
        case 'b':
            o->nb = 0;
            for (char *p = optarg; *p && o->nb < MAX_BATCHES;) {
                long v = strtol(p, &end, 10);
                if (end == p || v < 1 || v > 4096 || (*end && *end != ',')) return usage("--batches takes sizes 1..4096, comma-separated (e.g. 8,16)");
                o->batches[o->nb++] = (int)v;
                p = *end ? end + 1 : end;
            }
            break;
        case 's':
            o->steps = (int)strtol(optarg, &end, 10);
            if (*end || o->steps < 1 || o->steps > 1000000) return usage("--steps takes 1..1000000");
            break;
        case 'w':
            o->warmup = (int)strtol(optarg, &end, 10);
            if (*end || o->warmup < 0 || o->warmup > 10) return usage("--warmup takes 0..10");
            break;
        case 'c': o->check = 1; break;
        case 'n': o->syncbn = 0; break;
        case 'j': o->json = optarg; break;
        case 't':
            o->timeout_s = strtod(optarg, &end);
            if (*end || !(o->timeout_s > 0)) return usage("--timeout takes seconds > 0");
            break;
        case 'e': o->seed = (int)strtol(optarg, &end, 10); break;
        default:
            snprintf(why, sizeof why, "unknown option '%s'", argv[optind - 1]);
            return usage(why);
        }
    }
    if (optind < argc) {
        snprintf(why, sizeof why, "unexpected argument '%s'", argv[optind]);
        return usage(why);
    }
    return 0;
}

static const ExecAdamW OPT = {1e-4f, 0.9f, 0.999f, 1e-8f, 0.01f};

/* The reference: one CPU process, plain BatchNorm, the global batch (every rank's rows), the
 * same seed, steps and optimizer, through the same training step (the strategy on one rank
 * trains the plain replica). Its parameters (Ψ floats) in out. 0 or -1. */
static int cpu_reference(const CnnConfig *cfg, const Opts *o, int N, int B, float *out, char *err, size_t len)
{
    Device *dev = exec_device_create(DEVICE_HOST, 0, err, len);
    MemTracker *mt = dev ? exec_device_tracker_create(dev, 0) : NULL;
    Comm *self = mt ? comm_create(COMM_SELF, NULL, NULL, 0, err, len) : NULL;
    ExecStrategy *s = NULL;
    Cnn *cnn = NULL;
    int G = N * B;
    size_t img = (size_t)cfg->in_channels * cfg->image_size * cfg->image_size;
    float *images = malloc((size_t)G * img * sizeof *images);
    int *labels = malloc((size_t)G * sizeof *labels);
    ExecStrategyOptions so = {EXEC_DDP, 0, 0, 0};
    ExecHooks hooks;
    int ok = self && images && labels && exec_strategy_create(&s, &so, self, mt, NULL, NULL, err, len) == 0;
    if (ok) {
        exec_strategy_hooks(s, &hooks);
        ok = exec_cnn_create(&cnn, cfg, mt, &hooks, s) == 0 &&
             exec_strategy_bind(s, exec_cnn_model(cnn), (uint64_t)o->seed, 1) == 0;
    }
    if (!ok) snprintf(err, len, "cannot set up the CPU reference (out of memory?)");
    ExecModel *m = ok ? exec_cnn_model(cnn) : NULL;
    ExecBatch batch = {images, labels, G, 0};
    ExecStep st = {.m = m, .s = s, .opt = OPT, .accum = 1, .batch = exec_step_fixed_batch, .batch_ctx = &batch};
    for (int step = 0; ok && step < o->warmup + o->steps; step++) {
        ExecStepResult sr = {0};
        if (exec_cnn_synthetic_batch(cfg, (uint64_t)o->seed, step, 0, G, images, labels) || exec_step(&st, step + 1, &sr)) {
            snprintf(err, len, "the CPU reference failed at step %d: %s", step + 1, sr.why ? sr.why : "no synthetic batch");
            ok = 0;
        }
    }
    size_t off = 0;
    for (int u = 0; ok && u < exec_model_units(m); u++) {
        size_t n = exec_model_unit_numel(m, u);
        memcpy(out + off, exec_model_unit_params(m, u), n * sizeof *out);
        off += n;
    }
    exec_cnn_destroy(cnn);
    exec_strategy_destroy(s);
    comm_destroy(self);
    free(images);
    free(labels);
    prof_mem_destroy(mt);
    exec_device_destroy(dev);
    return ok ? 0 : -1;
}

typedef struct {
    int batch;
    double ms, ms_min, images_s, syncbn_ms, loss;
    size_t peak, peak_cat[MEM_CATEGORY_COUNT];
    int checked;
    double worst_rel;     /* max over units of ||dev - cpu|| / ||cpu|| */
    int worst_unit;
    int pass;
} Row;

/* The unit of m whose parameters got (units concatenated) differ most from want's, relative
 * (||got - want|| / ||want||), into row->worst_rel and row->worst_unit; NaN counts as worst. */
static void worst_unit(ExecModel *m, const float *got, const float *want, Row *row)
{
    size_t off = 0;
    for (int u = 0; u < exec_model_units(m); u++) {
        size_t n = exec_model_unit_numel(m, u);
        double d = 0, ref = 0;
        for (size_t i = 0; i < n; i++) {
            double e = (double)got[off + i] - want[off + i];
            d += e * e;
            ref += (double)want[off + i] * want[off + i];
        }
        double rel = ref > 0 ? sqrt(d / ref) : sqrt(d);
        if (!(rel <= row->worst_rel)) {
            row->worst_rel = isnan(rel) ? INFINITY : rel;
            row->worst_unit = u;
        }
        off += n;
    }
}

/* One batch size: set up, warm up, measure, check. Runs on every rank; rows land on rank 0.
 * Errors inside a step abort the job (peers may be inside a collective). */
static int run_batch(Comm *c, Comm *dc, Device *dev, const CnnConfig *cfg, const Opts *o, int B, Row *row, char *err,
                     size_t len)
{
    int N = comm_size(c), r = comm_rank(c), gpu = o->device == DEVICE_CUDA;
    MemTracker *mt = exec_device_tracker_create(dev, 0);
    CommCounters *cc = prof_comm_create(N);
    ExecStrategy *s = NULL;
    Cnn *cnn = NULL;
    size_t img = (size_t)cfg->in_channels * cfg->image_size * cfg->image_size;
    float *images = malloc((size_t)B * img * sizeof *images);
    int *labels = malloc((size_t)B * sizeof *labels);
    ExecStrategyOptions so = {EXEC_DDP, 25.0 * 1024 * 1024, 0, 0};
    ExecHooks hooks;
    int ok = mt && cc && images && labels && exec_strategy_create(&s, &so, dc, mt, cc, NULL, err, len) == 0;
    if (ok) {
        exec_strategy_set_device(s, dev);
        exec_strategy_hooks(s, &hooks);
        ok = exec_cnn_create_on(&cnn, cfg, mt, dev, &hooks, s) == 0;
        if (!ok) snprintf(err, len, "cannot create the CNN at batch %d (out of memory?)", B);
    }
    if (ok && o->syncbn && N > 1 && exec_cnn_convert_sync_batchnorm(cnn, dc) < 0) {
        ok = 0;
        snprintf(err, len, "%s", exec_cnn_error(cnn));
    }
    if (ok && exec_strategy_bind(s, exec_cnn_model(cnn), (uint64_t)o->seed, 1)) {
        ok = 0;
        snprintf(err, len, "%s", exec_strategy_error(s));
    }
    if (ok && gpu && (exec_device_sync_compute(dev) || exec_device_failed(dev))) {
        ok = 0;
        snprintf(err, len, "a CUDA call failed during setup (see the message above)");
    }
    double mine = ok, all = 0;   /* every rank set up, or none goes on (nothing is in flight) */
    int rc = 0;
    if (comm_all_reduce(c, &mine, &all, 1, DT_F64, NULL) || all != N) {
        if (ok) snprintf(err, len, "another rank could not set up (its message is on its stderr)");
        rc = -1;
    }
    double *ms = calloc(2 * (size_t)o->steps, sizeof *ms), *cs = ms ? ms + o->steps : NULL;
    if (rc == 0 && !ms) comm_abort(c, "cnn_device: out of host memory");
    ExecModel *m = rc == 0 ? exec_cnn_model(cnn) : NULL;
    ExecBatch batch = {images, labels, B, 0};
    ExecStep st = {.m = m, .s = s, .opt = OPT, .accum = 1, .batch = exec_step_fixed_batch, .batch_ctx = &batch, .mt = mt,
                   .dev = dev};
    for (int step = 0; rc == 0 && step < o->warmup + o->steps; step++) {
        int k = step - o->warmup;
        if (k == 0) prof_mem_reset_peaks(mt);
        if (exec_cnn_synthetic_batch(cfg, (uint64_t)o->seed, step, r * B, B, images, labels))
            comm_abort(c, "cnn_device: cannot make the synthetic batch");
        if (comm_barrier(c)) comm_abort(c, "cnn_device: the step barrier failed");
        double sb0[2], sb1[2];
        exec_cnn_syncbn_seconds(cnn, sb0);
        ExecStepResult sr;
        if (exec_step(&st, step + 1, &sr)) {
            char msg[400];
            snprintf(msg, sizeof msg, "cnn_device: step %d at batch %d failed: %s", step + 1, B, sr.why);
            comm_abort(c, msg);
        }
        exec_cnn_syncbn_seconds(cnn, sb1);
        /* the slowest rank's step; rank 0's time inside SyncBN's collectives */
        double step_ms = sr.ms[EXEC_PHASE_STEP], mx = 0, *allv = calloc((size_t)N, sizeof *allv);
        if (!allv || comm_all_gather(c, &step_ms, allv, 1, DT_F64, NULL)) comm_abort(c, "cnn_device: gathering times failed");
        for (int q = 0; q < N; q++) mx = fmax(mx, allv[q]);
        free(allv);
        if (k >= 0) {
            ms[k] = mx;
            cs[k] = (sb1[0] - sb0[0] + sb1[1] - sb0[1]) * 1e3;
            row->loss = sr.loss_sum;
        }
    }
    if (rc == 0) {
        row->batch = B;
        row->ms = plan_median(ms, o->steps);   /* sorts ms: ms[0] is the fastest step */
        row->ms_min = ms[0];
        row->images_s = row->ms > 0 ? 1e3 * N * B / row->ms : 0;
        row->syncbn_ms = plan_median(cs, o->steps);
        row->peak = prof_mem_peak_total(mt);
        prof_mem_peak_breakdown(mt, row->peak_cat);
        row->pass = 1;
    }
    if (rc == 0 && o->check) {
        size_t P = (size_t)exec_model_num_params(m);
        float *got = r == 0 ? malloc(P * sizeof *got) : NULL, *want = r == 0 ? malloc(P * sizeof *want) : NULL;
        if (r == 0 && (!got || !want)) comm_abort(c, "cnn_device: out of host memory for the check");
        if (exec_strategy_gather_params(s, got)) comm_abort(c, "cnn_device: gathering the parameters failed");
        if (r == 0) {
            if (cpu_reference(cfg, o, N, B, want, err, len)) {
                rc = -1;
            } else {
                row->checked = 1;
                worst_unit(m, got, want, row);
                /* the GPU kernels' own tolerances reach 1e-4 (docs/gpu-cnn-kernels.md); on the
                   CPU the same kernels run, only the batch is split: 1e-5 (test_exec_cnn) */
                row->pass = row->worst_rel < (gpu ? 1e-4 : 1e-5);
            }
        }
        free(got);
        free(want);
        double ok2 = rc == 0, all2 = 0;
        if (comm_all_reduce(c, &ok2, &all2, 1, DT_F64, NULL)) comm_abort(c, "cnn_device: the check's agreement failed");
        if (all2 != N) rc = -1;
    }
    free(ms);
    exec_cnn_destroy(cnn);
    exec_strategy_destroy(s);
    prof_comm_destroy(cc);
    prof_mem_destroy(mt);
    free(images);
    free(labels);
    return rc;
}

static void write_json(const char *path, const Opts *o, const CnnConfig *cfg, int N, const char *device_name,
                       const char *shared_note, const Row *rows, int nrows, int complete)
{
    cJSON *j = cJSON_CreateObject();
    cJSON_AddStringToObject(j, "bench", "cnn_device");
    cJSON_AddStringToObject(j, "model", cfg->name);
    cJSON_AddNumberToObject(j, "image", cfg->image_size);
    cJSON_AddNumberToObject(j, "ranks", N);
    cJSON_AddStringToObject(j, "device", o->device == DEVICE_CUDA ? "cuda" : "cpu");
    cJSON_AddStringToObject(j, "device_name", device_name);
    cJSON_AddBoolToObject(j, "syncbn", o->syncbn && N > 1);
    cJSON_AddNumberToObject(j, "steps", o->steps);
    if (*shared_note) cJSON_AddStringToObject(j, "not_a_real_measurement", shared_note);
    cJSON *arr = cJSON_AddArrayToObject(j, "rows");
    for (int i = 0; i < nrows; i++) {
        const Row *x = &rows[i];
        cJSON *e = cJSON_CreateObject();
        cJSON_AddNumberToObject(e, "batch_per_rank", x->batch);
        cJSON_AddNumberToObject(e, "step_ms", x->ms);
        cJSON_AddNumberToObject(e, "images_per_s", x->images_s);
        cJSON_AddNumberToObject(e, "syncbn_collectives_ms", x->syncbn_ms);
        cJSON_AddNumberToObject(e, "loss", x->loss);
        cJSON_AddNumberToObject(e, "peak_bytes", (double)x->peak);
        cJSON *pc = cJSON_AddObjectToObject(e, "peak_by_category_bytes");
        for (int k = 0; k < MEM_CATEGORY_COUNT; k++)
            cJSON_AddNumberToObject(pc, prof_mem_category_name((MemCategory)k), (double)x->peak_cat[k]);
        if (x->checked) {
            cJSON *ck = cJSON_AddObjectToObject(e, "check_against_cpu");
            cJSON_AddNumberToObject(ck, "worst_unit_rel_err", isinf(x->worst_rel) ? -1 : x->worst_rel);
            cJSON_AddNumberToObject(ck, "worst_unit", x->worst_unit);
            cJSON_AddBoolToObject(ck, "pass", x->pass);
        }
        cJSON_AddItemToArray(arr, e);
    }
    cJSON_AddBoolToObject(j, "complete", complete);
    char *txt = cJSON_Print(j), tmp[4096];
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    FILE *f = fopen(tmp, "w");
    if (!f || !txt || fprintf(f, "%s\n", txt) < 0 || fclose(f) || rename(tmp, path))
        fprintf(stderr, "cnn_device: cannot write %s\n", path);
    free(txt);
    cJSON_Delete(j);
}

int main(int argc, char **argv)
{
    Opts o;
    int prc = parse(argc, argv, &o);
    if (prc) return prc;
    CnnConfig cfg;
    if (exec_cnn_config_preset(&cfg, o.model)) {
        char names[200] = "";
        for (int i = 0; i < exec_cnn_preset_count(); i++)
            snprintf(names + strlen(names), sizeof names - strlen(names), "%s%s", i ? ", " : "", exec_cnn_preset_name(i));
        fprintf(stderr, "cnn_device: unknown --model '%s' (valid: %s)\n", o.model, names);
        return 2;
    }
    if (o.image) cfg.image_size = o.image;
    setvbuf(stdout, NULL, _IOLBF, 0);
    char err[512] = "";
    Comm *c = comm_create(COMM_MPI, &argc, &argv, o.timeout_s, err, sizeof err);
    if (!c) {
        fprintf(stderr, "cnn_device: %s\n", err);
        return 1;
    }
    int N = comm_size(c), r = comm_rank(c), gpu = o.device == DEVICE_CUDA;
    /* every rank has the device (host values over MPI), else one line and exit 1 */
    char why[256] = "";
    double have = gpu ? exec_device_cuda_count(why, sizeof why) : 1, *all = calloc((size_t)N, sizeof *all);
    if (!all || comm_all_gather(c, &have, all, 1, DT_F64, NULL)) comm_abort(c, "cnn_device: the device check failed");
    int bad = -1, ngpu = (int)have;
    for (int q = 0; q < N && bad < 0; q++)
        if (all[q] < 1) bad = q;
    free(all);
    if (bad >= 0) {
        if (r == 0 && bad == 0) fprintf(stderr, "cnn_device: %s: --device cuda needs a GPU (--device cpu runs the CPU path)\n", why);
        else if (r == 0) fprintf(stderr, "cnn_device: no CUDA device on rank %d of %d\n", bad, N);
        comm_destroy(c);
        return 1;
    }
    char shared[200] = "";
    if (gpu && N > 1 && comm_local_size(c) > ngpu)
        snprintf(shared, sizeof shared, "%d ranks share %d GPU(s) as fake hosts: NCCL over sockets, kernels time-sliced",
                 comm_local_size(c), ngpu);
    Device *dev = exec_device_create(o.device, comm_local_rank(c), err, sizeof err);
    Comm *dc = c;
    int rc = 0;
    if (!dev) {
        fprintf(stderr, "cnn_device: rank %d: %s\n", r, err);
        comm_abort(c, "cnn_device: no device");
    }
    if (gpu && N > 1) {   /* the strategy's collectives and SyncBN's over NCCL */
        if (!(dc = comm_create(COMM_NCCL, NULL, NULL, o.timeout_s, err, sizeof err))) {
            fprintf(stderr, "cnn_device: rank %d: cannot create the NCCL communicator: %s\n", r, err);
            comm_abort(c, "cnn_device: no NCCL communicator");
        }
        comm_set_stream(dc, exec_device_comm_stream(dev));
        comm_set_after_stream(dc, exec_device_stream(dev));
    }
    if (r == 0) {
        printf("# cnn_device: %s at %dx%d, %d rank%s, %s (%s), DDP%s, fp32, AdamW, %d warm-up + %d measured steps\n",
               cfg.name, cfg.image_size, cfg.image_size, N, N == 1 ? "" : "s", gpu ? "cuda" : "cpu",
               exec_device_name(dev), o.syncbn && N > 1 ? " + SyncBatchNorm" : "", o.warmup, o.steps);
        if (*shared) printf("# NOT A REAL MEASUREMENT: %s; times and memory of NCCL are not per-GPU figures\n", shared);
        printf("%8s %10s %10s %12s %12s %10s %10s  %s\n", "batch", "step_ms", "min_ms", "images/s", "syncbn_ms",
               "peak_MiB", "loss", "check");
    }
    Row rows[MAX_BATCHES];
    memset(rows, 0, sizeof rows);
    int nrows = 0;
    for (int i = 0; i < o.nb && rc == 0; i++) {
        Row *x = &rows[nrows];
        if (run_batch(c, dc, dev, &cfg, &o, o.batches[i], x, err, sizeof err)) {
            if (r == 0 || *err) fprintf(stderr, "cnn_device: rank %d: batch %d: %s\n", r, o.batches[i], err);
            rc = 1;
            break;
        }
        nrows++;
        if (r == 0) {
            char ck[96] = "-";
            if (x->checked)
                snprintf(ck, sizeof ck, "%s: worst unit %d, rel %.2e vs the CPU on the global batch",
                         x->pass ? "ok" : "FAIL", x->worst_unit, x->worst_rel);
            printf("%8d %10.2f %10.2f %12.1f %12.2f %10.1f %10.4f  %s\n", x->batch, x->ms, x->ms_min, x->images_s,
                   x->syncbn_ms, (double)x->peak / 1048576.0, x->loss, ck);
            if (o.json) write_json(o.json, &o, &cfg, N, exec_device_name(dev), shared, rows, nrows, i == o.nb - 1);
            if (!x->pass) rc = 1;
        }
        /* rank 0 judged the check: every rank stops with it (else the others wait for it in the
           next batch's barrier until the timeout) */
        double v = rc, w = 0;
        if (comm_all_reduce(c, &v, &w, 1, DT_F64, NULL) == 0) rc = w > 0;
    }
    /* every rank exits with rank 0's verdict */
    double v = rc, w = 0;
    if (comm_all_reduce(c, &v, &w, 1, DT_F64, NULL) == 0) rc = w > 0;
    if (dc != c) comm_destroy(dc);
    exec_device_destroy(dev);
    comm_destroy(c);
    return rc;
}
