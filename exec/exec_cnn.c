/* exec_cnn.c — the ResNet-style CNN runtime (see exec_cnn.h for units, buffers and memory).
 *
 * The network is built once from the config as a list of ops over numbered tensors (tensor 0 is
 * the input image, borrowed from the caller). Forward runs the ops in order; backward runs them
 * in reverse, each op accumulating into the gradients of its inputs. A tensor lives from its
 * producer's forward until its producer's backward when some backward reads it (every reader
 * of a tensor comes after its producer in forward, so before it in backward), and otherwise
 * only until its last forward reader has run. Shapes are per sample (C, H, W); B is the batch
 * of the call. Element counts are fp32 unless said otherwise. */
#include "exec_cnn.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "exec_bn.h"
#include "exec_device.h"
#include "exec_kern.h"
#include "kern_cnn.h"

/* ---- configuration ---- */

static const CnnConfig PRESETS[] = {
    {"resnet50", {3, 4, 6, 3}, 64, 224, 3, 1000},
    {"resnet-tiny", {1, 1, 1, 1}, 8, 32, 3, 10},
    {"resnet-mini", {2, 2, 2, 2}, 16, 32, 3, 10},
};
#define N_PRESETS ((int)(sizeof PRESETS / sizeof PRESETS[0]))

int exec_cnn_preset_count(void) { return N_PRESETS; }
const char *exec_cnn_preset_name(int i) { return i >= 0 && i < N_PRESETS ? PRESETS[i].name : NULL; }

int exec_cnn_config_preset(CnnConfig *cfg, const char *name)
{
    for (int i = 0; i < N_PRESETS; i++)
        if (name && strcmp(name, PRESETS[i].name) == 0) {
            *cfg = PRESETS[i];
            return 0;
        }
    return -1;
}

/* 0 if the shapes are usable; -1 with a sentence in msg otherwise. */
static int exec_cnn_config_check(const CnnConfig *cfg, char *msg, size_t msglen)
{
    const char *why = NULL;
    if (!cfg) why = "no configuration given";
    else if (cfg->width < 1) why = "width must be at least 1";
    else if (cfg->in_channels < 1) why = "in_channels must be at least 1";
    else if (cfg->classes < 2) why = "classes must be at least 2";
    else if (cfg->image_size < 16 || cfg->image_size > 4096) why = "image_size must be in [16, 4096]";
    else if (cfg->width > (1 << 20) >> 3) why = "width is too large";
    for (int s = 0; !why && s < 4; s++)
        if (cfg->depths[s] < 1 || cfg->depths[s] > 64) why = "each stage needs 1 to 64 blocks";
    if (why && msg && msglen) snprintf(msg, msglen, "invalid CNN configuration: %s", why);
    return why ? -1 : 0;
}

/* ---- the graph ---- */

typedef enum { OP_CONV, OP_BN, OP_MAXPOOL, OP_ADD_RELU, OP_AVGPOOL, OP_FC } OpKind;

typedef struct {
    OpKind kind;
    int unit;              /* -1: no parameters */
    int in, in2, out;      /* tensors; in2: the shortcut of an add; out -1 for the head */
    int K, stride, pad;    /* conv, max-pool */
    int relu;              /* BN followed by an in-place ReLU */
    int bn;                /* BN layer index */
    char name[40];         /* the planner's layer name ("layer1.0.2.bn") */
} Op;

typedef struct {
    int C, H, W;           /* per sample */
    int needed;            /* read by some backward: kept until its producer's backward */
    int last_read;         /* last op (forward order) that reads it */
} Tensor;

typedef struct {
    Op *ops;
    int nops, cap_ops;
    Tensor *t;
    int nt, cap_t;
    int nunits, nbn;
    int64_t bn_sum_c;
    size_t col_max;        /* im2col floats of the largest conv */
    double fwd_flops;      /* per image */
} Graph;

static void graph_free(Graph *g)
{
    free(g->ops);
    free(g->t);
    memset(g, 0, sizeof *g);
}

static int add_tensor(Graph *g, int C, int H, int W)
{
    if (g->nt == g->cap_t) {
        int cap = g->cap_t ? 2 * g->cap_t : 64;
        Tensor *p = realloc(g->t, (size_t)cap * sizeof *p);
        if (!p) return -1;
        g->t = p;
        g->cap_t = cap;
    }
    g->t[g->nt] = (Tensor){C, H, W, 0, -1};
    return g->nt++;
}

static int add_op(Graph *g, Op op)
{
    if (g->nops == g->cap_ops) {
        int cap = g->cap_ops ? 2 * g->cap_ops : 64;
        Op *p = realloc(g->ops, (size_t)cap * sizeof *p);
        if (!p) return -1;
        g->ops = p;
        g->cap_ops = cap;
    }
    g->ops[g->nops] = op;
    return g->nops++;
}

/* conv (no bias) K×K/stride, pad K/2, then BN (+ ReLU); returns the BN's output tensor. */
static int conv_bn(Graph *g, const char *name, int x, int cout, int K, int stride, int relu)
{
    const Tensor in = g->t[x];
    int pad = K / 2;
    int oh = kern_conv2d_out_size(in.H, K, stride, pad), ow = kern_conv2d_out_size(in.W, K, stride, pad);
    int y = add_tensor(g, cout, oh, ow);
    if (y < 0) return -1;
    Op c = {OP_CONV, g->nunits++, x, -1, y, K, stride, pad, 0, -1, ""};
    snprintf(c.name, sizeof c.name, "%s.conv", name);
    if (add_op(g, c) < 0) return -1;
    size_t col = kern_conv2d_col_size(in.C, in.H, in.W, K, stride, pad);
    if (col > g->col_max) g->col_max = col;
    g->fwd_flops += 2.0 * in.C * K * K * (double)cout * oh * ow;
    int z = add_tensor(g, cout, oh, ow);
    if (z < 0) return -1;
    Op b = {OP_BN, g->nunits++, y, -1, z, 0, 0, 0, relu, g->nbn++, ""};
    snprintf(b.name, sizeof b.name, "%s.bn", name);
    g->bn_sum_c += cout;
    return add_op(g, b) < 0 ? -1 : z;
}

static int build_graph(Graph *g, const CnnConfig *cfg)
{
    memset(g, 0, sizeof *g);
    if (exec_cnn_config_check(cfg, NULL, 0)) return -1;
    int x = add_tensor(g, cfg->in_channels, cfg->image_size, cfg->image_size);   /* the images */
    if (x < 0 || (x = conv_bn(g, "stem", x, cfg->width, 7, 2, 1)) < 0) goto fail;
    {
        const Tensor in = g->t[x];
        int y = add_tensor(g, in.C, kern_conv2d_out_size(in.H, 3, 2, 1), kern_conv2d_out_size(in.W, 3, 2, 1));
        Op p = {OP_MAXPOOL, -1, x, -1, y, 3, 2, 1, 0, -1, "stem.maxpool"};
        if (y < 0 || add_op(g, p) < 0) goto fail;
        x = y;
    }
    int cin = cfg->width;
    for (int s = 0; s < 4; s++) {
        int planes = cfg->width << s, cout = 4 * planes;
        for (int i = 0; i < cfg->depths[s]; i++) {
            int stride = (s > 0 && i == 0) ? 2 : 1;
            char nm[32];
            int a, b, c, sc = x;
            snprintf(nm, sizeof nm, "layer%d.%d.1", s + 1, i);
            if ((a = conv_bn(g, nm, x, planes, 1, 1, 1)) < 0) goto fail;
            snprintf(nm, sizeof nm, "layer%d.%d.2", s + 1, i);
            if ((b = conv_bn(g, nm, a, planes, 3, stride, 1)) < 0) goto fail;
            snprintf(nm, sizeof nm, "layer%d.%d.3", s + 1, i);
            if ((c = conv_bn(g, nm, b, cout, 1, 1, 0)) < 0) goto fail;
            if (stride != 1 || cin != cout) {
                snprintf(nm, sizeof nm, "layer%d.%d.downsample", s + 1, i);
                if ((sc = conv_bn(g, nm, x, cout, 1, stride, 0)) < 0) goto fail;
            }
            int y = add_tensor(g, cout, g->t[c].H, g->t[c].W);
            Op add = {OP_ADD_RELU, -1, c, sc, y, 0, 0, 0, 1, -1, ""};
            snprintf(add.name, sizeof add.name, "layer%d.%d.add", s + 1, i);
            if (y < 0 || add_op(g, add) < 0) goto fail;
            x = y;
            cin = cout;
        }
    }
    int p = add_tensor(g, cin, 1, 1);
    Op avg = {OP_AVGPOOL, -1, x, -1, p, 0, 0, 0, 0, -1, "avgpool"};
    Op fc = {OP_FC, g->nunits++, p, -1, -1, 0, 0, 0, 0, -1, "fc"};
    if (p < 0 || add_op(g, avg) < 0 || add_op(g, fc) < 0) goto fail;
    g->fwd_flops += 2.0 * cin * cfg->classes;
    /* who reads what, in forward and in backward */
    for (int k = 0; k < g->nops; k++) {
        const Op *o = &g->ops[k];
        g->t[o->in].last_read = k;
        if (o->in2 >= 0) g->t[o->in2].last_read = k;
        if (o->kind == OP_CONV || o->kind == OP_BN || o->kind == OP_FC) g->t[o->in].needed = 1;
        if ((o->kind == OP_BN && o->relu) || o->kind == OP_ADD_RELU) g->t[o->out].needed = 1;
    }
    return 0;
fail:
    graph_free(g);
    return -1;
}

/* The op of each unit. */
static const Op *unit_op(const Graph *g, int unit)
{
    for (int k = 0; k < g->nops; k++)
        if (g->ops[k].unit == unit) return &g->ops[k];
    return NULL;
}

static size_t op_numel(const Graph *g, const Op *o, int classes)
{
    const Tensor *in = &g->t[o->in];
    switch (o->kind) {
    case OP_CONV: return (size_t)g->t[o->out].C * in->C * o->K * o->K;
    case OP_BN: return 2 * (size_t)in->C;
    case OP_FC: return (size_t)classes * in->C + (size_t)classes;
    default: return 0;
    }
}

int exec_cnn_cfg_units(const CnnConfig *cfg)
{
    Graph g;
    if (build_graph(&g, cfg)) return 0;
    int n = g.nunits;
    graph_free(&g);
    return n;
}

size_t exec_cnn_cfg_unit_numel(const CnnConfig *cfg, int unit)
{
    Graph g;
    if (build_graph(&g, cfg)) return 0;
    const Op *o = unit_op(&g, unit);
    size_t n = o ? op_numel(&g, o, cfg->classes) : 0;
    graph_free(&g);
    return n;
}

int64_t exec_cnn_cfg_num_params(const CnnConfig *cfg)
{
    Graph g;
    if (build_graph(&g, cfg)) return 0;
    int64_t s = 0;
    for (int k = 0; k < g.nops; k++) s += (int64_t)op_numel(&g, &g.ops[k], cfg->classes);
    graph_free(&g);
    return s;
}

int exec_cnn_cfg_bn_layers(const CnnConfig *cfg, int64_t *sum_channels)
{
    Graph g;
    if (build_graph(&g, cfg)) return 0;
    int n = g.nbn;
    if (sum_channels) *sum_channels = g.bn_sum_c;
    graph_free(&g);
    return n;
}

const char *exec_cnn_cfg_unit_name(const CnnConfig *cfg, int unit, char *buf, size_t len)
{
    Graph g;
    if (len) buf[0] = 0;
    if (build_graph(&g, cfg)) return buf;
    const Op *o = unit_op(&g, unit);
    if (o && len) snprintf(buf, len, "%s", o->name);
    graph_free(&g);
    return buf;
}

double exec_cnn_cfg_fwd_flops(const CnnConfig *cfg)
{
    Graph g;
    if (build_graph(&g, cfg)) return 0;
    double f = g.fwd_flops;
    graph_free(&g);
    return f;
}

/* ---- counter-based initialisation: value = f(seed, unit, index) ---- */

static uint64_t splitmix64(uint64_t x)
{
    x += 0x9E3779B97F4A7C15ull;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return x ^ (x >> 31);
}

static double open01(uint64_t r) { return ((double)(r >> 11) + 0.5) / 9007199254740992.0; }

static double normal_at(uint64_t key, uint64_t i)
{
    double u1 = open01(splitmix64(key ^ splitmix64(2 * i)));
    double u2 = open01(splitmix64(key ^ splitmix64(2 * i + 1)));
    return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
}

static int init_range(const Graph *g, const CnnConfig *cfg, int unit, uint64_t seed, size_t offset,
                      size_t length, float *dst)
{
    const Op *o = unit_op(g, unit);
    size_t n = o ? op_numel(g, o, cfg->classes) : 0;
    if (!o || offset > n || length > n - offset || (length && !dst)) return -1;
    uint64_t key = splitmix64(seed ^ splitmix64(0xC0DEull + (uint64_t)unit));
    size_t C = (size_t)g->t[o->in].C;
    for (size_t i = offset; i < offset + length; i++) {
        double v = 0;
        switch (o->kind) {
        case OP_CONV:   /* kaiming_normal_(mode="fan_out", nonlinearity="relu") */
            v = sqrt(2.0 / ((double)g->t[o->out].C * o->K * o->K)) * normal_at(key, i);
            break;
        case OP_BN: v = i < C ? 1.0 : 0.0; break;
        case OP_FC:     /* nn.Linear: weight and bias uniform(-1/sqrt(in), 1/sqrt(in)) */
            v = (2.0 * open01(splitmix64(key ^ splitmix64(i))) - 1.0) / sqrt((double)C);
            break;
        default: break;
        }
        dst[i - offset] = (float)v;
    }
    return 0;
}

/* ---- the model ---- */

struct Cnn {
    ExecModel iface;               /* what strategies and loops hold */
    CnnConfig cfg;
    Graph g;
    MemTracker *mt;
    Device *dev;                   /* NULL: host */
    int gpu;                       /* dev is a CUDA device: every buffer is device memory */
    const ExecKernels *k;          /* the device's kernels */
    void *stream;                  /* their stream (NULL on the host) */
    float *dimages;                /* GPU: tracked copies of the batch's images and labels */
    int *dlabels;
    size_t *numel;                 /* per unit */
    float **params, **grads;       /* per unit, current pointers (NULL = absent) */
    unsigned char *own_params, *own_grads;
    float **opt_m, **opt_v;        /* per unit AdamW state, opt_len elements each */
    size_t *opt_len;
    float *buffers;                /* per BN layer: running_mean, running_var, num_batches */
    size_t nbuf;
    size_t *bn_buf;                /* per BN layer: offset in buffers */
    Comm *sync;                    /* SyncBatchNorm after the conversion */
    double syncbn_s[2];            /* seconds inside SyncBN's collectives: forward, backward */
    int training;
    double divisor;                /* 0: the mean over the micro-batch */
    /* the current step */
    int B;
    const int *labels;             /* what the kernels read (the device copy on a GPU) */
    float **act, **dact;           /* per tensor; act[0] is the caller's images */
    float **bn_mean, **bn_invstd;  /* per BN layer, saved by the training forward */
    double *bn_count;
    int **argmax;                  /* per op (max-pool), int32 */
    float *logits, *probs, *losses;
    float *col;                    /* im2col scratch of the pass */
    int pending;                   /* a training forward awaits its backward */
    char err[256];
};

static const ExecModelOps CNN_OPS;

static int fail_msg(Cnn *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int fail_msg(Cnn *c, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(c->err, sizeof c->err, fmt, ap);
    va_end(ap);
    return -1;
}

static void *tracked(Cnn *c, MemCategory cat, size_t bytes, int zero, const char *what, const char *layer)
{
    char label[64];
    if (layer) snprintf(label, sizeof label, "%s (%s)", what, layer);
    else snprintf(label, sizeof label, "%s", what);
    void *p = zero ? prof_mem_calloc(c->mt, cat, bytes, label) : prof_mem_alloc(c->mt, cat, bytes, label);
    if (!p) fail_msg(c, "out of memory: %s, %zu bytes of %s", label, bytes, prof_mem_category_name(cat));
    return p;
}

static void release(Cnn *c, void *pp)
{
    void **p = pp;
    prof_mem_free(c->mt, *p);
    *p = NULL;
}

/* Zeroes bytes of model memory: memset on the host, a memset on the compute stream on a GPU. */
static void zero(Cnn *c, void *p, size_t bytes)
{
    if (c->gpu) exec_device_memset(c->dev, p, 0, bytes);
    else memset(p, 0, bytes);
}

/* A kernel of the table failed (its launcher printed why). */
static int kernel_failed(Cnn *c, const char *where)
{
    return fail_msg(c, "a %s kernel failed in %s (see the message above)", c->k->name, where);
}

static size_t tensor_numel(const Cnn *c, int t)
{
    const Tensor *x = &c->g.t[t];
    return (size_t)c->B * x->C * x->H * x->W;
}

/* Everything of the current step: activations, gradients, saved statistics, scratch. */
static void free_step(Cnn *c, int keep_logits)
{
    for (int t = 1; t < c->g.nt; t++) release(c, &c->act[t]);
    for (int t = 0; t < c->g.nt; t++) release(c, &c->dact[t]);
    c->act[0] = NULL;
    for (int i = 0; i < c->g.nbn; i++) {
        release(c, &c->bn_mean[i]);
        release(c, &c->bn_invstd[i]);
    }
    for (int k = 0; k < c->g.nops; k++) release(c, &c->argmax[k]);
    if (!keep_logits) release(c, &c->logits);
    release(c, &c->dimages);
    release(c, &c->dlabels);
    release(c, &c->probs);
    release(c, &c->losses);
    release(c, &c->col);
    c->pending = 0;
}

void exec_cnn_destroy(Cnn *c)
{
    if (!c) return;
    if (c->act) free_step(c, 0);
    for (int u = 0; u < c->g.nunits && c->numel; u++) {
        if (c->params && c->own_params[u]) release(c, &c->params[u]);
        if (c->grads && c->own_grads[u]) release(c, &c->grads[u]);
        if (c->opt_m) release(c, &c->opt_m[u]);
        if (c->opt_v) release(c, &c->opt_v[u]);
    }
    release(c, &c->buffers);
    free(c->numel); free(c->params); free(c->grads); free(c->own_params); free(c->own_grads);
    free(c->opt_m); free(c->opt_v); free(c->opt_len); free(c->bn_buf); free(c->act); free(c->dact);
    free(c->bn_mean); free(c->bn_invstd); free(c->bn_count); free(c->argmax);
    graph_free(&c->g);
    free(c);
}

int exec_cnn_create(Cnn **out, const CnnConfig *cfg, MemTracker *mt, const ExecHooks *hooks, void *ctx)
{
    return exec_cnn_create_on(out, cfg, mt, NULL, hooks, ctx);
}

int exec_cnn_create_on(Cnn **out, const CnnConfig *cfg, MemTracker *mt, Device *dev, const ExecHooks *hooks,
                       void *ctx)
{
    *out = NULL;
    if (exec_cnn_config_check(cfg, NULL, 0) || !mt) return -1;
    Cnn *c = calloc(1, sizeof *c);
    if (!c) return -1;
    exec_model_init(&c->iface, &CNN_OPS, c, hooks, ctx);
    c->cfg = *cfg;
    c->mt = mt;
    c->dev = dev;
    c->gpu = dev && exec_device_kind(dev) == DEVICE_CUDA;
    c->k = exec_kernels(c->gpu ? DEVICE_CUDA : DEVICE_HOST);
    c->stream = c->gpu ? exec_device_stream(dev) : NULL;
    c->training = 1;
    if (build_graph(&c->g, cfg)) {
        free(c);
        return -1;
    }
    int U = c->g.nunits, NB = c->g.nbn, NT = c->g.nt, NO = c->g.nops;
    c->numel = calloc((size_t)U, sizeof *c->numel);
    c->params = calloc((size_t)U, sizeof *c->params);
    c->grads = calloc((size_t)U, sizeof *c->grads);
    c->own_params = calloc((size_t)U, 1);
    c->own_grads = calloc((size_t)U, 1);
    c->opt_m = calloc((size_t)U, sizeof *c->opt_m);
    c->opt_v = calloc((size_t)U, sizeof *c->opt_v);
    c->opt_len = calloc((size_t)U, sizeof *c->opt_len);
    c->bn_buf = calloc((size_t)NB, sizeof *c->bn_buf);
    c->act = calloc((size_t)NT, sizeof *c->act);
    c->dact = calloc((size_t)NT, sizeof *c->dact);
    c->bn_mean = calloc((size_t)NB, sizeof *c->bn_mean);
    c->bn_invstd = calloc((size_t)NB, sizeof *c->bn_invstd);
    c->bn_count = calloc((size_t)NB, sizeof *c->bn_count);
    c->argmax = calloc((size_t)NO, sizeof *c->argmax);
    if (!c->numel || !c->params || !c->grads || !c->own_params || !c->own_grads || !c->opt_m || !c->opt_v ||
        !c->opt_len || !c->bn_buf || !c->act || !c->dact || !c->bn_mean || !c->bn_invstd || !c->bn_count ||
        !c->argmax)
        goto fail;
    for (int k = 0; k < NO; k++) {
        const Op *o = &c->g.ops[k];
        if (o->unit >= 0) c->numel[o->unit] = op_numel(&c->g, o, cfg->classes);
        if (o->kind == OP_BN) {
            c->bn_buf[o->bn] = c->nbuf;
            c->nbuf += 2 * (size_t)c->g.t[o->in].C + 1;
        }
    }
    for (int u = 0; u < U && !c->iface.hooks.external_params; u++) {
        char layer[48];
        snprintf(layer, sizeof layer, "unit %d", u);
        if (!(c->params[u] = tracked(c, MEM_PARAMS, c->numel[u] * sizeof(float), 0, "params", layer))) goto fail;
        c->own_params[u] = 1;
    }
    if (!(c->buffers = tracked(c, MEM_PARAMS, c->nbuf * sizeof(float), 1, "bn buffers", NULL))) goto fail;
    /* running_var starts at 1: written on the host, copied to a GPU */
    float *hb = c->gpu ? calloc(c->nbuf, sizeof *hb) : c->buffers;
    if (!hb) goto fail;
    for (int k = 0; k < NO; k++) {
        const Op *o = &c->g.ops[k];
        if (o->kind != OP_BN) continue;
        float *rv = hb + c->bn_buf[o->bn] + c->g.t[o->in].C;
        for (int i = 0; i < c->g.t[o->in].C; i++) rv[i] = 1.0f;
    }
    if (c->gpu) {
        exec_device_copy(c->dev, c->buffers, hb, c->nbuf * sizeof *hb);
        free(hb);
        if (exec_device_failed(c->dev)) goto fail;
    }
    *out = c;
    return 0;
fail:
    exec_cnn_destroy(c);
    return -1;
}

int exec_cnn_init_params(Cnn *c, uint64_t seed)
{
    for (int u = 0; u < c->g.nunits; u++) {
        if (!c->params[u]) continue;
        if (!c->gpu) {
            if (init_range(&c->g, &c->cfg, u, seed, 0, c->numel[u], c->params[u]))
                return fail_msg(c, "cannot initialise unit %d", u);
            continue;
        }
        float *h = malloc(c->numel[u] * sizeof *h);   /* computed on the host, copied */
        if (!h) return fail_msg(c, "out of host memory initialising unit %d", u);
        int bad = init_range(&c->g, &c->cfg, u, seed, 0, c->numel[u], h);
        if (!bad) exec_device_copy(c->dev, c->params[u], h, c->numel[u] * sizeof *h);
        free(h);
        if (bad) return fail_msg(c, "cannot initialise unit %d", u);
        if (exec_device_failed(c->dev)) return fail_msg(c, "copying unit %d to the GPU failed (see the message above)", u);
    }
    return 0;
}

Device *exec_cnn_device(const Cnn *c) { return c->dev; }

ExecModel *exec_cnn_model(Cnn *c) { return &c->iface; }
const char *exec_cnn_error(const Cnn *c) { return c->err; }
int exec_cnn_synced(const Cnn *c) { return c->sync != NULL; }
void exec_cnn_syncbn_seconds(const Cnn *c, double out[2]) { out[0] = c->syncbn_s[0], out[1] = c->syncbn_s[1]; }
void exec_cnn_set_training(Cnn *c, int training) { c->training = training != 0; }

const float *exec_cnn_logits(const Cnn *c, int *batch)
{
    if (batch) *batch = c->logits ? c->B : 0;
    return c->logits;
}

int exec_cnn_convert_sync_batchnorm(Cnn *c, Comm *comm)
{
    if (exec_model_wrapped(&c->iface))
        return fail_msg(c, "cannot convert BatchNorm to SyncBatchNorm: the model is already wrapped by a "
                        "data-parallel strategy; convert first, then wrap (as "
                        "torch.nn.SyncBatchNorm.convert_sync_batchnorm(model) before DistributedDataParallel)");
    if (!comm) return fail_msg(c, "cannot convert BatchNorm to SyncBatchNorm without a communicator");
    c->sync = comm;
    return c->g.nbn;
}

/* ---- the interface: units ---- */

static int valid_unit(const Cnn *c, int u) { return u >= 0 && u < c->g.nunits; }
static int m_units(const void *p) { return ((const Cnn *)p)->g.nunits; }
static size_t m_numel(const void *p, int u) { const Cnn *c = p; return valid_unit(c, u) ? c->numel[u] : 0; }
static float *m_params(const void *p, int u) { const Cnn *c = p; return valid_unit(c, u) ? c->params[u] : NULL; }
static float *m_grads(const void *p, int u) { const Cnn *c = p; return valid_unit(c, u) ? c->grads[u] : NULL; }

static int set_ptr(Cnn *c, float **slot, unsigned char *own, float *p)
{
    if (*own) prof_mem_free(c->mt, *slot);
    *slot = p;
    *own = 0;
    return 0;
}

static int m_set_params(void *p, int u, float *x)
{
    Cnn *c = p;
    if (!valid_unit(c, u)) return fail_msg(c, "set_unit_params: no unit %d", u);
    return set_ptr(c, &c->params[u], &c->own_params[u], x);
}

static int m_set_grads(void *p, int u, float *x)
{
    Cnn *c = p;
    if (!valid_unit(c, u)) return fail_msg(c, "set_unit_grads: no unit %d", u);
    return set_ptr(c, &c->grads[u], &c->own_grads[u], x);
}

static int m_init_range(const void *p, int u, uint64_t seed, size_t off, size_t len, float *dst)
{
    const Cnn *c = p;
    return init_range(&c->g, &c->cfg, u, seed, off, len, dst);
}

static int m_root(const void *p, int out[2])
{
    (void)p;
    (void)out;
    return 0;
}

static void m_divisor(void *p, double d) { ((Cnn *)p)->divisor = d > 0 ? d : 0; }

static void m_zero_grad(void *p)
{
    Cnn *c = p;
    for (int u = 0; u < c->g.nunits; u++)
        if (c->grads[u]) zero(c, c->grads[u], c->numel[u] * sizeof(float));
}

static float *m_buffers(void *p, size_t *n)
{
    Cnn *c = p;
    if (n) *n = c->nbuf;
    return c->buffers;
}

static const char *m_error(const void *p) { return ((const Cnn *)p)->err; }
static void m_destroy(void *p) { exec_cnn_destroy(p); }

/* ---- forward ---- */

static int hook(Cnn *c, ExecHookKind k, int u)
{
    if (exec_model_call_hook(&c->iface, k, u))
        return c->err[0] ? -1 : fail_msg(c, "%s hook failed for unit %d", exec_model_hook_name(k), u);
    if ((k == EXEC_BEFORE_FWD || k == EXEC_BEFORE_BWD) && !c->params[u])
        return fail_msg(c, "unit %d has no parameters after %s (the strategy must provide them)", u,
                        exec_model_hook_name(k));
    return 0;
}

static ExecBnLayer bn_layer(Cnn *c, const Op *o)
{
    int C = c->g.t[o->in].C;
    float *buf = c->buffers + c->bn_buf[o->bn];
    const float *w = c->params[o->unit];
    ExecBnLayer l = {C, w, w + C, buf, buf + C, buf + 2 * C, c->sync, c->mt, c->syncbn_s, c->k, c->stream, c->dev};
    return l;
}

static int op_forward(Cnn *c, const Op *o)
{
    int B = c->B;
    const Tensor *ti = &c->g.t[o->in];
    const float *in = c->act[o->in];
    float *out = NULL;
    if (o->out >= 0 && !(out = c->act[o->out] = tracked(c, MEM_ACTIVATIONS, tensor_numel(c, o->out) * sizeof(float),
                                                        0, "activation", o->name)))
        return -1;
    const ExecKernels *k = c->k;
    void *st = c->stream;
    switch (o->kind) {
    case OP_CONV:
        if (k->conv2d_forward(out, in, c->params[o->unit], c->col, B, ti->C, ti->H, ti->W, c->g.t[o->out].C, o->K,
                              o->stride, o->pad, st))
            return kernel_failed(c, o->name);
        return 0;
    case OP_BN: {
        ExecBnLayer l = bn_layer(c, o);
        ExecBnSaved sv = {NULL, NULL, 0};
        if (c->training) {
            size_t bytes = (size_t)ti->C * sizeof(float);
            if (!(c->bn_mean[o->bn] = tracked(c, MEM_ACTIVATIONS, bytes, 0, "bn mean", o->name)) ||
                !(c->bn_invstd[o->bn] = tracked(c, MEM_ACTIVATIONS, bytes, 0, "bn invstd", o->name)))
                return -1;
            sv.mean = c->bn_mean[o->bn];
            sv.invstd = c->bn_invstd[o->bn];
        }
        char why[200];
        if (exec_bn_forward(&l, c->training, out, &sv, in, B, ti->H, ti->W, why, sizeof why))
            return fail_msg(c, "%s: %s", o->name, why);
        c->bn_count[o->bn] = sv.count;
        if (o->relu && k->relu_forward(out, out, tensor_numel(c, o->out), st)) return kernel_failed(c, o->name);
        return 0;
    }
    case OP_MAXPOOL:
        if (!(c->argmax[o - c->g.ops] = tracked(c, MEM_ACTIVATIONS, tensor_numel(c, o->out) * sizeof(int), 0,
                                                "argmax", o->name)))
            return -1;
        if (k->maxpool2d_forward(out, c->argmax[o - c->g.ops], in, B, ti->C, ti->H, ti->W, o->K, o->stride, o->pad, st))
            return kernel_failed(c, o->name);
        return 0;
    case OP_ADD_RELU: {
        size_t n = tensor_numel(c, o->out);
        if (k->add_forward(out, in, c->act[o->in2], n, st) || k->relu_forward(out, out, n, st))
            return kernel_failed(c, o->name);
        return 0;
    }
    case OP_AVGPOOL:
        if (k->avgpool_global_forward(out, in, B, ti->C, ti->H, ti->W, st)) return kernel_failed(c, o->name);
        return 0;
    case OP_FC: {
        int K = c->cfg.classes;
        size_t bk = (size_t)B * K * sizeof(float);
        if (!(c->logits = tracked(c, MEM_ACTIVATIONS, bk, 0, "logits", NULL)) ||
            !(c->probs = tracked(c, MEM_ACTIVATIONS, bk, 0, "probs", NULL)) ||
            !(c->losses = tracked(c, MEM_ACTIVATIONS, (size_t)B * sizeof(float), 0, "losses", NULL)))
            return -1;
        const float *w = c->params[o->unit];
        if (k->matmul_forward(c->logits, in, w, w + (size_t)K * ti->C, B, 1, ti->C, K, st) ||
            k->crossentropy_softmax_forward(c->probs, c->losses, c->logits, c->labels, B, 1, K, st))
            return kernel_failed(c, "the head");
        return 0;
    }
    }
    return 0;
}

static int m_forward(void *p, const ExecBatch *b, float *mean_loss)
{
    Cnn *c = p;
    c->err[0] = '\0';
    free_step(c, 0);
    if (!b || !b->inputs || !b->targets || b->batch < 1)
        return fail_msg(c, "the CNN forward needs images, labels and a batch >= 1");
    for (int i = 0; i < b->batch; i++)
        if (b->targets[i] < 0 || b->targets[i] >= c->cfg.classes)
            return fail_msg(c, "label %d of row %d is outside [0, %d)", b->targets[i], i, c->cfg.classes);
    c->B = b->batch;
    c->labels = b->targets;
    c->act[0] = (float *)b->inputs;   /* borrowed, read-only: never written or freed */
    if (c->gpu) {   /* the kernels read device copies (activations until the end of backward) */
        size_t img = (size_t)b->batch * c->cfg.in_channels * c->cfg.image_size * c->cfg.image_size * sizeof(float);
        if (!(c->dimages = tracked(c, MEM_ACTIVATIONS, img, 0, "images", NULL)) ||
            !(c->dlabels = tracked(c, MEM_ACTIVATIONS, (size_t)b->batch * sizeof(int), 0, "labels", NULL)))
            goto fail;
        exec_device_copy(c->dev, c->dimages, b->inputs, img);
        exec_device_copy(c->dev, c->dlabels, b->targets, (size_t)b->batch * sizeof(int));
        c->act[0] = c->dimages;
        c->labels = c->dlabels;
    }
    if (c->g.col_max && !(c->col = tracked(c, MEM_WORKSPACE, c->g.col_max * sizeof(float), 0, "im2col", NULL)))
        goto fail;
    for (int k = 0; k < c->g.nops; k++) {
        const Op *o = &c->g.ops[k];
        if ((o->unit >= 0 && hook(c, EXEC_BEFORE_FWD, o->unit)) || op_forward(c, o)) goto fail;
        /* inputs no backward reads go as soon as their last reader ran */
        int ins[2] = {o->in, o->in2};
        for (int j = 0; j < 2; j++)
            if (ins[j] > 0 && !c->g.t[ins[j]].needed && c->g.t[ins[j]].last_read == k) release(c, &c->act[ins[j]]);
        if (o->unit >= 0 && hook(c, EXEC_AFTER_FWD, o->unit)) goto fail;
    }
    release(c, &c->col);
    if (mean_loss) {
        const float *losses = c->losses;
        float *host = NULL;
        if (c->gpu) {   /* read back (the copy waits for the forward's kernels) */
            if (!(host = malloc((size_t)c->B * sizeof *host))) {
                fail_msg(c, "out of host memory reading the losses");
                goto fail;
            }
            exec_device_copy(c->dev, host, losses, (size_t)c->B * sizeof *host);
            losses = host;
        }
        double s = 0;
        for (int i = 0; i < c->B; i++) s += losses[i];
        *mean_loss = (float)(s / c->B);
        free(host);
    }
    if (c->gpu && exec_device_failed(c->dev)) {
        fail_msg(c, "a CUDA call failed in the CNN forward (see the message above)");
        goto fail;
    }
    if (!c->training) free_step(c, 1);   /* evaluation keeps only the logits */
    else c->pending = 1;
    return 0;
fail:
    free_step(c, 0);
    return -1;
}

/* ---- backward ---- */

/* The gradient of tensor t, created zeroed (the kernels accumulate into it). */
static float *dtensor(Cnn *c, int t, const char *layer)
{
    if (!c->dact[t])
        c->dact[t] = tracked(c, MEM_WORKSPACE, tensor_numel(c, t) * sizeof(float), 1, "activation grad", layer);
    return c->dact[t];
}

static float *unit_grads(Cnn *c, int u)
{
    if (!c->grads[u]) {
        char layer[24];
        snprintf(layer, sizeof layer, "unit %d", u);
        c->grads[u] = tracked(c, MEM_GRADS, c->numel[u] * sizeof(float), 1, "grads", layer);
        c->own_grads[u] = c->grads[u] != NULL;
    }
    return c->grads[u];
}

static int op_backward(Cnn *c, const Op *o, float *g)
{
    int B = c->B;
    const Tensor *ti = &c->g.t[o->in];
    const float *dout = o->out >= 0 ? c->dact[o->out] : NULL;
    float *din = NULL, *tmp = NULL;
    if (o->out >= 0 && !dout) return fail_msg(c, "%s: no gradient reached its output", o->name);
    if (o->in > 0 && !(din = dtensor(c, o->in, o->name))) return -1;   /* the images need none */
    const ExecKernels *k = c->k;
    void *st = c->stream;
    int bad = 0;
    switch (o->kind) {
    case OP_FC: {
        int K = c->cfg.classes;
        float *dlogits = tracked(c, MEM_WORKSPACE, (size_t)B * K * sizeof(float), 1, "dlogits", NULL);
        if (!dlogits) return -1;
        float dloss = c->divisor > 0 ? (float)(1.0 / ((double)B * c->divisor)) : 1.0f / (float)B;
        const float *w = c->params[o->unit];
        bad = k->crossentropy_softmax_backward(dlogits, c->probs, c->labels, dloss, B, 1, K, st) ||
              k->matmul_backward(din, g, g + (size_t)K * ti->C, dlogits, c->act[o->in], w, B, 1, ti->C, K, st);
        release(c, &dlogits);
        release(c, &c->logits);
        release(c, &c->probs);
        release(c, &c->losses);
        return bad ? kernel_failed(c, "the head's backward") : 0;
    }
    case OP_AVGPOOL:
        return k->avgpool_global_backward(din, dout, B, ti->C, ti->H, ti->W, st) ? kernel_failed(c, o->name) : 0;
    case OP_ADD_RELU: {
        size_t n = tensor_numel(c, o->out);
        float *dsc = dtensor(c, o->in2, o->name);
        if (!dsc || !(tmp = tracked(c, MEM_WORKSPACE, n * sizeof(float), 1, "relu grad", o->name))) return -1;
        bad = k->relu_backward(tmp, c->act[o->out], dout, n, st) || k->add_backward(din, dsc, tmp, n, st);
        release(c, &tmp);
        return bad ? kernel_failed(c, o->name) : 0;
    }
    case OP_BN: {
        if (o->relu) {
            size_t n = tensor_numel(c, o->out);
            if (!(tmp = tracked(c, MEM_WORKSPACE, n * sizeof(float), 1, "relu grad", o->name))) return -1;
            if (k->relu_backward(tmp, c->act[o->out], dout, n, st)) {
                release(c, &tmp);
                return kernel_failed(c, o->name);
            }
            dout = tmp;
        }
        ExecBnLayer l = bn_layer(c, o);
        ExecBnSaved sv = {c->bn_mean[o->bn], c->bn_invstd[o->bn], c->bn_count[o->bn]};
        char why[200];
        int rc = exec_bn_backward(&l, din, g, g + ti->C, dout, c->act[o->in], &sv, B, ti->H, ti->W, why, sizeof why);
        release(c, &tmp);
        release(c, &c->bn_mean[o->bn]);
        release(c, &c->bn_invstd[o->bn]);
        return rc ? fail_msg(c, "%s: %s", o->name, why) : 0;
    }
    case OP_CONV:
        return k->conv2d_backward(din, g, c->col, dout, c->act[o->in], c->params[o->unit], B, ti->C, ti->H, ti->W,
                                  c->g.t[o->out].C, o->K, o->stride, o->pad, st)
                   ? kernel_failed(c, o->name)
                   : 0;
    case OP_MAXPOOL:
        bad = k->maxpool2d_backward(din, dout, c->argmax[o - c->g.ops], B, ti->C, ti->H, ti->W, o->K, o->stride, o->pad,
                                    st);
        release(c, &c->argmax[o - c->g.ops]);
        return bad ? kernel_failed(c, o->name) : 0;
    }
    return 0;
}

static int m_backward(void *p)
{
    Cnn *c = p;
    c->err[0] = '\0';
    if (!c->pending) return fail_msg(c, "the CNN backward needs a training-mode forward first");
    if (c->g.col_max && !(c->col = tracked(c, MEM_WORKSPACE, c->g.col_max * sizeof(float), 0, "im2col", NULL)))
        goto fail;
    for (int k = c->g.nops - 1; k >= 0; k--) {
        const Op *o = &c->g.ops[k];
        float *g = NULL;
        if (o->unit >= 0 && (hook(c, EXEC_BEFORE_BWD, o->unit) || !(g = unit_grads(c, o->unit)))) goto fail;
        if (op_backward(c, o, g)) goto fail;
        if (o->out >= 0) {   /* its output and that output's gradient are consumed */
            release(c, &c->act[o->out]);
            release(c, &c->dact[o->out]);
        }
        if (o->unit >= 0 && hook(c, EXEC_AFTER_BWD, o->unit)) goto fail;
    }
    if (c->gpu && exec_device_failed(c->dev)) {
        fail_msg(c, "a CUDA call failed in the CNN backward (see the message above)");
        goto fail;
    }
    free_step(c, 0);
    return 0;
fail:
    free_step(c, 0);
    return -1;
}

/* ---- AdamW ---- */

static int m_adamw(void *p, int u, float *params, const float *grads, size_t len, const ExecAdamW *o, int t)
{
    Cnn *c = p;
    if (!valid_unit(c, u)) return fail_msg(c, "AdamW: no unit %d", u);
    if (!o || t < 1) return fail_msg(c, "AdamW needs hyper-parameters and a step number t >= 1");
    if (len == 0) return 0;
    if (!params || !grads) return fail_msg(c, "AdamW: unit %d has no parameters or gradients to update", u);
    if (c->opt_m[u] && c->opt_len[u] != len)
        return fail_msg(c, "unit %d: AdamW state holds %zu elements, this step updates %zu", u, c->opt_len[u], len);
    if (!c->opt_m[u]) {
        char layer[24];
        snprintf(layer, sizeof layer, "unit %d", u);
        if (!(c->opt_m[u] = tracked(c, MEM_OPTIMIZER, len * sizeof(float), 1, "adamw m", layer))) return -1;
        if (!(c->opt_v[u] = tracked(c, MEM_OPTIMIZER, len * sizeof(float), 1, "adamw v", layer))) {
            release(c, &c->opt_m[u]);
            return -1;
        }
        c->opt_len[u] = len;
    }
    if (c->k->adamw_update(params, grads, c->opt_m[u], c->opt_v[u], 0, len, o->lr, o->beta1, o->beta2, o->eps,
                           o->weight_decay, t, c->stream))
        return kernel_failed(c, "AdamW");
    return 0;
}

static const ExecModelOps CNN_OPS = {
    m_units, m_numel, m_params, m_grads, m_set_params, m_set_grads, m_init_range, m_root,
    m_divisor, m_forward, m_backward, m_zero_grad, m_adamw, m_buffers, m_error, m_destroy,
};

/* ---- synthetic data ---- */

int exec_cnn_synthetic_batch(const CnnConfig *cfg, uint64_t seed, int step, int first_row, int rows,
                             float *images, int *labels)
{
    if (exec_cnn_config_check(cfg, NULL, 0) || step < 0 || first_row < 0 || rows < 0 ||
        (rows && (!images || !labels)))
        return -1;
    size_t n = (size_t)cfg->in_channels * cfg->image_size * cfg->image_size;
    uint64_t k = splitmix64(seed ^ 0x1A6Eull);
    for (int r = 0; r < rows; r++) {
        uint64_t g = (uint64_t)first_row + (uint64_t)r;   /* global row */
        uint64_t key = splitmix64(k ^ splitmix64(((uint64_t)step << 32) ^ g));
        int label = (int)(splitmix64(key) % (uint64_t)cfg->classes);
        uint64_t tkey = splitmix64(k + 1 + (uint64_t)label);
        labels[r] = label;
        float *img = images + (size_t)r * n;
        for (size_t i = 0; i < n; i++) img[i] = (float)(normal_at(tkey, i) + 0.5 * normal_at(key + 7, i));
    }
    return 0;
}
