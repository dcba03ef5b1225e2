/* cnn_check.c — multi-rank checks of SyncBatchNorm and of the CNN under a data-parallel
 * strategy, launched by tests/test_exec_cnn.c as `mpirun -np N cnn_check MODE [options]`:
 *   syncbn [--unequal]  one BN layer: SyncBN on N ranks, each with its rows of a global batch
 *                       (2 rows each, or r+1 rows on rank r with --unequal), against plain
 *                       BatchNorm2d on the whole batch in one process, over two iterations:
 *                       outputs, input gradients, weight/bias gradients (summed over ranks) and
 *                       running statistics within 1e-5 (normwise relative); exactly one
 *                       all-gather of (2C+1)·4·N bytes per forward and one all-reduce of 2C·4
 *                       bytes per backward; evaluation mode communicates nothing.
 *   refuse              converting after the model was wrapped (exec_strategy_bind) is refused
 *                       with a message (printed by rank 0 as "refused: ..."); converting
 *                       before works and converts every BN layer.
 *   train --model NAME [--image-size S] --global-batch G --steps K [--strategy S] [--syncbn] [--lr X]
 *         [--dump FILE] [--grads FILE] [--coll FILE]
 *                       K AdamW steps of the CNN, each rank its G/N rows of the seeded global
 *                       batch; rank 0 prints "step k loss L" (the global mean), dumps the full
 *                       parameters then the buffers (fp32), the last step's reduced gradients
 *                       (DDP or one rank: every unit's, before the optimizer step) and writes
 *                       the last step's collectives as "op phase count payload_bytes" lines.
 * Prints "cnn_check: rank R ok" and exits 0, or names each failure and exits 1. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "exec_bn.h"
#include "exec_cnn.h"
#include "exec_comm.h"
#include "exec_device.h"
#include "exec_strategy.h"
#include "prof_comm.h"
#include "prof_mem.h"

static int g_fail, g_rank;

#define CHECK(cond, ...)                                                          \
    do {                                                                          \
        if (!(cond)) {                                                            \
            fprintf(stderr, "rank %d: FAIL %s:%d: ", g_rank, __FILE__, __LINE__); \
            fprintf(stderr, __VA_ARGS__);                                         \
            fputc('\n', stderr);                                                  \
            g_fail++;                                                             \
        }                                                                         \
    } while (0)

static const char *arg_value(int argc, char **argv, const char *name, const char *dflt)
{
    for (int i = 2; i + 1 < argc; i++)
        if (strcmp(argv[i], name) == 0) return argv[i + 1];
    return dflt;
}

static int has_flag(int argc, char **argv, const char *name)
{
    for (int i = 2; i < argc; i++)
        if (strcmp(argv[i], name) == 0) return 1;
    return 0;
}

/* A number option; -1 if it is not one. */
static double num(const char *s)
{
    char *end;
    double v = strtod(s, &end);
    return end != s && *end == 0 ? v : -1;
}

/* A standard normal from (seed, i), deterministic on every rank. */
static double gauss(unsigned long long seed, unsigned long long i)
{
    unsigned long long x = seed * 0x9E3779B97F4A7C15ull + i * 0xBF58476D1CE4E5B9ull + 1;
    double u[2];
    for (int k = 0; k < 2; k++) {
        x ^= x >> 31;
        x *= 0x94D049BB133111EBull;
        x ^= x >> 29;
        x += 0x9E3779B97F4A7C15ull;
        u[k] = ((double)(x >> 11) + 0.5) / 9007199254740992.0;
    }
    return sqrt(-2.0 * log(u[0])) * cos(6.283185307179586 * u[1]);
}

/* Normwise relative difference ||a - b|| / ||b||. */
static double rel_diff(const float *a, const float *b, size_t n)
{
    double d2 = 0, b2 = 0;
    for (size_t i = 0; i < n; i++) {
        double d = (double)a[i] - (double)b[i];
        d2 += d * d;
        b2 += (double)b[i] * (double)b[i];
    }
    return b2 > 0 ? sqrt(d2 / b2) : sqrt(d2);
}

#define TOL 1e-5

/* ---- syncbn ---- */

static int mode_syncbn(Comm *c, MemTracker *mt, CommCounters *cc, int unequal)
{
    enum { C = 6, H = 5, W = 5, ITERS = 2 };
    const size_t HW = (size_t)H * W, S = (size_t)C * HW;   /* floats per sample */
    int N = comm_size(c), r = comm_rank(c);
    int rows = unequal ? r + 1 : 2, first = unequal ? r * (r + 1) / 2 : 2 * r;
    int G = unequal ? N * (N + 1) / 2 : 2 * N;
    float weight[C], bias[C];
    for (int k = 0; k < C; k++) {
        weight[k] = 1.0f + 0.1f * k;
        bias[k] = 0.05f * k;
    }
    float sbuf[2 * C + 1], pbuf[2 * C + 1];   /* running mean, var, count: synced and plain */
    for (int k = 0; k < 2 * C + 1; k++) sbuf[k] = pbuf[k] = k >= C && k < 2 * C ? 1.0f : 0.0f;
    ExecBnLayer sync = {C, weight, bias, sbuf, sbuf + C, sbuf + 2 * C, c, mt, NULL, NULL, NULL, NULL};
    ExecBnLayer plain = {C, weight, bias, pbuf, pbuf + C, pbuf + 2 * C, NULL, mt, NULL, NULL, NULL, NULL};
    CHECK(exec_bn_is_synced(&sync) == (N > 1), "exec_bn_is_synced on %d ranks", N);

    float *x = malloc((size_t)G * S * sizeof *x), *dy = malloc((size_t)G * S * sizeof *dy);
    float *out_p = malloc((size_t)G * S * sizeof *out_p), *dx_p = calloc((size_t)G * S, sizeof *dx_p);
    float *out_s = malloc((size_t)rows * S * sizeof *out_s), *dx_s = calloc((size_t)rows * S, sizeof *dx_s);
    float mean_p[C], inv_p[C], mean_s[C], inv_s[C], dw_p[C], db_p[C], dw_s[2 * C];
    char err[256];
    for (int it = 0; it < ITERS; it++) {
        for (size_t i = 0; i < (size_t)G * S; i++) {
            int ch = (int)(i / HW % C);
            x[i] = (float)(0.5 * ch - 1.0 + (1.0 + 0.3 * ch) * gauss(11 + it, i));
            dy[i] = (float)gauss(101 + it, i);
        }
        const float *xs = x + (size_t)first * S, *dys = dy + (size_t)first * S;
        ExecBnSaved sp = {mean_p, inv_p, 0}, ss = {mean_s, inv_s, 0};
        prof_comm_set_phase(cc, "forward");
        CHECK(exec_bn_forward(&plain, 1, out_p, &sp, x, G, H, W, err, sizeof err) == 0, "plain forward: %s", err);
        CHECK(exec_bn_forward(&sync, 1, out_s, &ss, xs, rows, H, W, err, sizeof err) == 0, "sync forward: %s", err);
        CHECK(ss.count == (double)G * HW, "total count %.0f, expected %zu", ss.count, (size_t)G * HW);
        double e = rel_diff(out_s, out_p + (size_t)first * S, (size_t)rows * S);
        CHECK(e < TOL, "iteration %d: outputs differ by %.3g", it, e);
        e = rel_diff(mean_s, mean_p, C);
        CHECK(e < TOL, "iteration %d: means differ by %.3g", it, e);
        e = rel_diff(inv_s, inv_p, C);
        CHECK(e < TOL, "iteration %d: invstd differ by %.3g", it, e);

        prof_comm_set_phase(cc, "backward");
        memset(dx_p, 0, (size_t)G * S * sizeof *dx_p);
        memset(dx_s, 0, (size_t)rows * S * sizeof *dx_s);
        memset(dw_p, 0, sizeof dw_p);
        memset(db_p, 0, sizeof db_p);
        memset(dw_s, 0, sizeof dw_s);
        CHECK(exec_bn_backward(&plain, dx_p, dw_p, db_p, dy, x, &sp, G, H, W, err, sizeof err) == 0, "plain backward: %s", err);
        CHECK(exec_bn_backward(&sync, dx_s, dw_s, dw_s + C, dys, xs, &ss, rows, H, W, err, sizeof err) == 0,
              "sync backward: %s", err);
        e = rel_diff(dx_s, dx_p + (size_t)first * S, (size_t)rows * S);
        CHECK(e < TOL, "iteration %d: input gradients differ by %.3g", it, e);
        /* each rank holds its share of dweight, dbias: DDP's all-reduce sums them (uncounted here) */
        comm_set_counters(c, NULL);
        CHECK(comm_all_reduce(c, dw_s, dw_s, 2 * C, DT_F32, NULL) == 0, "all-reduce of the shares");
        comm_set_counters(c, cc);
        e = rel_diff(dw_s, dw_p, C);
        CHECK(e < TOL, "iteration %d: weight gradients differ by %.3g", it, e);
        e = rel_diff(dw_s + C, db_p, C);
        CHECK(e < TOL, "iteration %d: bias gradients differ by %.3g", it, e);
    }
    double e = rel_diff(sbuf, pbuf, C);
    CHECK(e < TOL, "running means differ by %.3g", e);
    e = rel_diff(sbuf + C, pbuf + C, C);
    CHECK(e < TOL, "running variances differ by %.3g", e);
    CHECK(sbuf[2 * C] == ITERS && pbuf[2 * C] == ITERS, "num_batches_tracked %g and %g", sbuf[2 * C], pbuf[2 * C]);

    /* the collectives: one all-gather per forward, one all-reduce per backward, nothing else */
    CollStats ag = prof_comm_phase(cc, COLL_ALL_GATHER, "forward"), ar = prof_comm_phase(cc, COLL_ALL_REDUCE, "backward");
    int64_t want = N > 1 ? ITERS : 0;
    CHECK(ag.count == want, "%lld all-gathers in forward, expected %lld", (long long)ag.count, (long long)want);
    CHECK(ag.payload_bytes == (double)want * (2 * C + 1) * 4 * N, "all-gather payload %.0f bytes", ag.payload_bytes);
    CHECK(ar.count == want, "%lld all-reduces in backward, expected %lld", (long long)ar.count, (long long)want);
    CHECK(ar.payload_bytes == (double)want * 2 * C * 4, "all-reduce payload %.0f bytes", ar.payload_bytes);
    int64_t total = 0;
    for (int op = 0; op < COLL_COUNT; op++) total += prof_comm_total(cc, (CollKind)op).count;
    CHECK(total == 2 * want, "%lld collectives in all, expected %lld", (long long)total, (long long)(2 * want));

    /* evaluation mode: the running statistics, no collective */
    prof_comm_set_phase(cc, "eval");
    CHECK(exec_bn_forward(&sync, 0, out_s, NULL, x + (size_t)first * S, rows, H, W, err, sizeof err) == 0, "eval: %s", err);
    CHECK(exec_bn_forward(&plain, 0, out_p, NULL, x, G, H, W, err, sizeof err) == 0, "eval: %s", err);
    e = rel_diff(out_s, out_p + (size_t)first * S, (size_t)rows * S);
    CHECK(e < TOL, "evaluation outputs differ by %.3g", e);
    int64_t after = 0;
    for (int op = 0; op < COLL_COUNT; op++) after += prof_comm_total(cc, (CollKind)op).count;
    CHECK(after == total, "evaluation mode issued %lld collectives", (long long)(after - total));
    CHECK(prof_mem_current(mt, MEM_COMM) == 0, "%zu bytes of comm buffers left", prof_mem_current(mt, MEM_COMM));

    /* a communicator of one rank is plain BatchNorm: no collective */
    Comm *self = comm_create(COMM_SELF, NULL, NULL, 0, err, sizeof err);
    ExecBnLayer alone = sync;
    alone.sync = self;
    CHECK(self && !exec_bn_is_synced(&alone), "SyncBN on one rank must not communicate");
    comm_destroy(self);
    free(x); free(dy); free(out_p); free(dx_p); free(out_s); free(dx_s);
    return 0;
}

/* ---- refuse ---- */

static int wrap(Comm *c, MemTracker *mt, const CnnConfig *cfg, int convert_after, char *msg, size_t len)
{
    ExecStrategyOptions so = {EXEC_DDP, 0, 0, 0};
    ExecStrategy *s = NULL;
    Cnn *m = NULL;
    ExecHooks hooks;
    char err[256];
    int rc = -1;
    CHECK(exec_strategy_create(&s, &so, c, mt, NULL, NULL, err, sizeof err) == 0, "strategy: %s", err);
    if (!s) return -1;
    exec_strategy_hooks(s, &hooks);
    CHECK(exec_cnn_create(&m, cfg, mt, &hooks, s) == 0, "cannot create the CNN");
    if (!m) goto out;
    if (!convert_after) {
        rc = exec_cnn_convert_sync_batchnorm(m, c);
        snprintf(msg, len, "%s", rc < 0 ? exec_cnn_error(m) : "");
    }
    CHECK(exec_strategy_bind(s, exec_cnn_model(m), 1, 1) == 0, "bind: %s", exec_strategy_error(s));
    if (convert_after) {
        rc = exec_cnn_convert_sync_batchnorm(m, c);
        snprintf(msg, len, "%s", rc < 0 ? exec_cnn_error(m) : "");
        CHECK(!exec_cnn_synced(m), "a refused conversion must leave plain BatchNorm");
    }
out:
    exec_cnn_destroy(m);
    exec_strategy_destroy(s);
    return rc;
}

static int mode_refuse(Comm *c, MemTracker *mt)
{
    CnnConfig cfg;
    exec_cnn_config_preset(&cfg, "resnet-tiny");
    int nbn = exec_cnn_cfg_bn_layers(&cfg, NULL);
    char msg[512];
    int rc = wrap(c, mt, &cfg, 0, msg, sizeof msg);
    CHECK(rc == nbn, "converting before wrapping returned %d, expected %d BN layers (%s)", rc, nbn, msg);
    rc = wrap(c, mt, &cfg, 1, msg, sizeof msg);
    CHECK(rc == -1, "converting after wrapping returned %d, expected -1", rc);
    CHECK(strstr(msg, "convert first") != NULL, "the refusal does not say to convert first: '%s'", msg);
    if (g_rank == 0) printf("refused: %s\n", msg);
    return 0;
}

/* ---- train ---- */

static int mode_train(Comm *c, MemTracker *mt, CommCounters *cc, int argc, char **argv)
{
    static const char *const PH[3] = {"forward", "backward", "step"};
    int N = comm_size(c), r = comm_rank(c);
    CnnConfig cfg;
    const char *name = arg_value(argc, argv, "--model", "resnet-tiny");
    if (exec_cnn_config_preset(&cfg, name)) {
        fprintf(stderr, "cnn_check: unknown model %s\n", name);
        return -1;
    }
    if (has_flag(argc, argv, "--image-size")) cfg.image_size = (int)num(arg_value(argc, argv, "--image-size", ""));
    int G = (int)num(arg_value(argc, argv, "--global-batch", "8")), K = (int)num(arg_value(argc, argv, "--steps", "3"));
    int kind = exec_strategy_by_name(arg_value(argc, argv, "--strategy", "ddp"));
    if (G < N || G % N || K < 1 || kind < 0) {
        fprintf(stderr, "cnn_check: need a global batch divisible by %d ranks, steps >= 1, a known strategy\n", N);
        return -1;
    }
    int B = G / N, syncbn = has_flag(argc, argv, "--syncbn");
    ExecAdamW opt = {(float)num(arg_value(argc, argv, "--lr", "1e-4")), 0.9f, 0.999f, 1e-8f, 0.0f};
    ExecStrategyOptions so = {(ExecStrategyKind)kind, 0, 0, 0};
    ExecStrategy *s = NULL;
    Cnn *m = NULL;
    ExecHooks hooks;
    char err[256];
    size_t img = (size_t)cfg.in_channels * cfg.image_size * cfg.image_size;
    float *images = malloc((size_t)B * img * sizeof *images);
    int *labels = malloc((size_t)B * sizeof *labels);
    CHECK(exec_strategy_create(&s, &so, c, mt, cc, NULL, err, sizeof err) == 0, "strategy: %s", err);
    if (!s) return -1;
    exec_strategy_hooks(s, &hooks);
    CHECK(exec_cnn_create(&m, &cfg, mt, &hooks, s) == 0, "cannot create %s", name);
    if (!m) return -1;
    ExecModel *em = exec_cnn_model(m);
    if (syncbn) CHECK(exec_cnn_convert_sync_batchnorm(m, c) > 0, "convert: %s", exec_cnn_error(m));
    CHECK(exec_strategy_bind(s, em, 1337, 1) == 0, "bind: %s", exec_strategy_error(s));
    CollStats before[COLL_COUNT][3];
    for (int step = 1; step <= K && !g_fail; step++) {
        if (step == K)
            for (int op = 0; op < COLL_COUNT; op++)
                for (int ph = 0; ph < 3; ph++) before[op][ph] = prof_comm_phase(cc, (CollKind)op, PH[ph]);
        CHECK(exec_cnn_synthetic_batch(&cfg, 7, step - 1, r * B, B, images, labels) == 0, "synthetic batch");
        exec_strategy_zero_grad(s);
        exec_strategy_begin_micro(s, 1);
        float loss = 0;
        ExecBatch batch = {images, labels, B, 0};
        prof_comm_set_phase(cc, PH[0]);
        prof_mem_set_phase(mt, PH[0]);
        CHECK(exec_model_forward(em, &batch, &loss) == 0, "forward: %s", exec_model_error(em));
        prof_comm_set_phase(cc, PH[1]);
        prof_mem_set_phase(mt, PH[1]);
        CHECK(exec_model_backward(em) == 0, "backward: %s", exec_model_error(em));
        CHECK(exec_strategy_end_backward(s) == 0, "end of backward: %s", exec_strategy_error(s));
        CHECK(prof_mem_current(mt, MEM_ACTIVATIONS) == 0 && prof_mem_current(mt, MEM_WORKSPACE) == 0,
              "activations or workspace left after backward");
        const char *gpath = arg_value(argc, argv, "--grads", NULL);
        if (step == K && gpath && r == 0 && kind == EXEC_DDP) {
            FILE *f = fopen(gpath, "wb");
            for (int u = 0; f && u < exec_model_units(em); u++)
                fwrite(exec_model_unit_grads(em, u), sizeof(float), exec_model_unit_numel(em, u), f);
            CHECK(f && fclose(f) == 0, "cannot write %s", gpath);
        }
        prof_comm_set_phase(cc, PH[2]);
        prof_mem_set_phase(mt, PH[2]);
        CHECK(exec_strategy_step(s, &opt, step) == 0, "step: %s", exec_strategy_error(s));
        double mine = loss, *all = calloc((size_t)N, sizeof *all), sum = 0;
        comm_set_counters(c, NULL);
        CHECK(comm_all_gather(c, &mine, all, 1, DT_F64, NULL) == 0, "loss gather");
        comm_set_counters(c, cc);
        for (int q = 0; q < N; q++) sum += all[q];
        free(all);
        if (r == 0) printf("step %d loss %.9f\n", step, sum / N);
    }
    const char *dump = arg_value(argc, argv, "--dump", NULL), *coll = arg_value(argc, argv, "--coll", NULL);
    int64_t P = exec_model_num_params(em);
    size_t nbuf = 0;
    float *buf = exec_model_buffers(em, &nbuf);
    float *full = r == 0 ? malloc((size_t)P * sizeof *full) : NULL;
    CHECK(exec_strategy_gather_params(s, full) == 0, "gather: %s", exec_strategy_error(s));
    if (r == 0 && dump && !g_fail) {
        FILE *f = fopen(dump, "wb");
        CHECK(f && fwrite(full, sizeof *full, (size_t)P, f) == (size_t)P && fwrite(buf, sizeof *buf, nbuf, f) == nbuf,
              "cannot write %s", dump);
        if (f) fclose(f);
    }
    if (r == 0 && coll && !g_fail) {
        FILE *f = fopen(coll, "w");
        CHECK(f != NULL, "cannot write %s", coll);
        for (int op = 0; f && op < COLL_COUNT; op++)
            for (int ph = 0; ph < 3; ph++) {
                CollStats now = prof_comm_phase(cc, (CollKind)op, PH[ph]);
                long long n = (long long)(now.count - before[op][ph].count);
                if (n) fprintf(f, "%s %s %lld %.0f\n", coll_name((CollKind)op), PH[ph], n,
                               now.payload_bytes - before[op][ph].payload_bytes);
            }
        if (f) fclose(f);
    }
    free(full);
    free(images);
    free(labels);
    exec_cnn_destroy(m);
    exec_strategy_destroy(s);
    return 0;
}

int main(int argc, char **argv)
{
    char err[256];
    Comm *c = comm_create(COMM_MPI, &argc, &argv, 60, err, sizeof err);
    if (!c) {
        fprintf(stderr, "cnn_check: %s\n", err);
        return 1;
    }
    g_rank = comm_rank(c);
    Device *dev = exec_device_create(DEVICE_HOST, comm_local_rank(c), err, sizeof err);
    MemTracker *mt = dev ? exec_device_tracker_create(dev, 0) : NULL;
    CommCounters *cc = prof_comm_create(comm_size(c));
    comm_set_counters(c, cc);
    const char *mode = argc > 1 ? argv[1] : "";
    int rc = -1;
    if (!mt || !cc) fprintf(stderr, "cnn_check: setup failed\n");
    else if (strcmp(mode, "syncbn") == 0) rc = mode_syncbn(c, mt, cc, has_flag(argc, argv, "--unequal"));
    else if (strcmp(mode, "refuse") == 0) rc = mode_refuse(c, mt);
    else if (strcmp(mode, "train") == 0) rc = mode_train(c, mt, cc, argc, argv);
    else fprintf(stderr, "usage: cnn_check syncbn [--unequal] | refuse | train [options]\n");
    if (mt && rc == 0) {
        size_t left = 0;
        for (int k = 0; k < MEM_CATEGORY_COUNT; k++) left += prof_mem_current(mt, (MemCategory)k);
        CHECK(left == 0, "%zu tracked bytes were not freed", left);
    }
    if (rc) g_fail++;
    if (!g_fail) printf("cnn_check: rank %d ok\n", g_rank);
    fflush(stdout);
    comm_set_counters(c, NULL);
    prof_comm_destroy(cc);
    prof_mem_destroy(mt);
    exec_device_destroy(dev);
    comm_destroy(c);
    return g_fail ? 1 : 0;
}
