/* exec_gpt2.c — GPT-2 forward, backward and AdamW on the fp32 kernels, every buffer from the
 * tracked allocator. The planner reproduces the layout below byte for byte; change both together.
 *
 * Memory layout of one training step (all float32, 4 bytes per element; one tracked allocation
 * per tensor; B = micro-batch, T = sequence, C = d_model, NH = heads, V = vocab, L = blocks).
 *
 * MEM_PARAMS     one allocation per unit (gpt2_create), unit numels as in exec_gpt2.h.
 * MEM_GRADS      one allocation per unit, zeroed, created in backward right after the unit's
 *                before_bwd hook if the unit has none; kept until gpt2_destroy.
 * MEM_OPTIMIZER  per unit: m then v (length elements each), zeroed, at the first AdamW step.
 * MEM_ACTIVATIONS, allocated in forward in this order:
 *   encoded (B·T·C)                                             before block 1
 *   per block l = 1..L, all 16 right after before_fwd(l), in this order:
 *     ln1 (B·T·C), ln1_mean (B·T), ln1_rstd (B·T), qkv (B·T·3C), atty (B·T·C),
 *     preatt (B·NH·T·T), att (B·NH·T·T), attproj (B·T·C), residual2 (B·T·C), ln2 (B·T·C),
 *     ln2_mean (B·T), ln2_rstd (B·T), fch (B·T·4C), fch_gelu (B·T·4C), fcproj (B·T·C),
 *     residual3 (B·T·C)                     block: 4·B·T·(18C + 4) + 8·B·NH·T² bytes
 *   lnf (B·T·C), lnf_mean (B·T), lnf_rstd (B·T)                 after before_fwd(L+1)
 *   logits (B·T·V), lse (B·T), losses (B·T)                     after after_fwd(L+1)
 *     (the fused LM head + cross-entropy: no probabilities are kept, lse is each row's
 *     log-sum-exp, and backward turns the logits into their own gradient in place)
 * MEM_WORKSPACE, allocated at the start of backward, before before_bwd(0), in this order:
 *   dresidual (B·T·C, zeroed; the residual-stream gradient),
 *   dbtc (B·T·C; dlnf, then per block dln2 -> datty -> dln1), dfch_gelu (B·T·4C),
 *   dfch (B·T·4C; per block dfch, then its first B·T·3C elements are dqkv),
 *   dpreatt (B·NH·T·T), datt (B·NH·T·T)    all of it: 4·B·T·10C + 8·B·NH·T²
 * Backward, in order (frees go back to the tracker at once):
 *   1. workspace allocated (all of it); before_bwd(0); grads of unit 0 created if absent
 *   2. fused LM-head + loss backward: logits := dlogits = (softmax - onehot)·dloss (1/(B·T), or
 *      the grad scale), then dlnf and dwte from them; free logits, lse, losses, lnf
 *   3. before_bwd(L+1); grads of L+1; final-LN backward; free lnf_mean, lnf_rstd; after_bwd(L+1)
 *   4. for l = L..1: before_bwd(l); grads of l; block backward; free block l's 16 tensors
 *      (and, for l = 1, encoded); after_bwd(l)
 *   5. encoder backward; free dresidual, dbtc, dfch_gelu, dfch, dpreatt, datt; after_bwd(0)
 * So activations and workspace are gone at the end of backward. On the first step (no grads
 * yet) the peak total is the largest of params + act + ws + grads(0) at 1, and the totals right
 * after each later grads(u) creation in 3–4; gpt2_activation_layout walks exactly this sequence.
 * Once every grads(u) and the optimizer state exist, the peak is at 1: 4·params + act + ws.
 *
 * Host-side bookkeeping (the Gpt2 struct and its per-unit pointer arrays, a few hundred bytes)
 * uses plain calloc: it is not model memory and stays on the host on a GPU as well.
 *
 * On a GPU (gpt2_create_on with a CUDA device) the layout above is the same, in device memory,
 * plus the micro-batch's tokens and targets (MEM_ACTIVATIONS, B·T int32 each, copied from the
 * host at the start of forward, freed with the workspace at the end of backward: 8·B·T bytes
 * the CPU engine, which reads the caller's host arrays, does not allocate). Kernels come from
 * the device's kernel table (exec_kern.h) and run on its compute stream; zeroing is a memset on
 * that stream; the mean loss is read back to the host; initial parameters are computed on the
 * host and copied. */
#include "exec_gpt2.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "exec_device.h"
#include "exec_kern.h"

/* ---- configuration ---- */

static const Gpt2Config PRESETS[] = {
    {"gpt2-tiny",   2,  4,   64,   256,   64},
    {"gpt2-mini",   4,  4,  128,  1024,  128},
    {"gpt2",       12, 12,  768, 50257, 1024},
    {"gpt2-medium", 24, 16, 1024, 50257, 1024},
    {"gpt2-large", 36, 20, 1280, 50257, 1024},
    {"gpt2-xl",    48, 25, 1600, 50257, 1024},
};
#define N_PRESETS ((int)(sizeof PRESETS / sizeof PRESETS[0]))

int gpt2_preset_count(void) { return N_PRESETS; }
const char *gpt2_preset_name(int i) { return i >= 0 && i < N_PRESETS ? PRESETS[i].name : NULL; }

int gpt2_config_preset(Gpt2Config *cfg, const char *name)
{
    for (int i = 0; i < N_PRESETS; i++)
        if (name && strcmp(name, PRESETS[i].name) == 0) {
            *cfg = PRESETS[i];
            return 0;
        }
    return -1;
}

int gpt2_config_check(const Gpt2Config *cfg, char *msg, size_t msglen)
{
    const char *why = NULL;
    if (!cfg) why = "no configuration given";
    else if (cfg->n_layer < 1) why = "n_layer must be at least 1";
    else if (cfg->n_head < 1) why = "n_head must be at least 1";
    else if (cfg->d_model < 1 || cfg->d_model % cfg->n_head != 0)
        why = "d_model must be a positive multiple of n_head";
    else if (cfg->vocab < 2) why = "vocab must be at least 2";
    else if (cfg->max_seq < 1) why = "max_seq must be at least 1";
    if (why && msg && msglen) snprintf(msg, msglen, "invalid GPT-2 configuration: %s", why);
    return why ? -1 : 0;
}

int gpt2_cfg_units(const Gpt2Config *cfg) { return cfg->n_layer + 2; }

/* The parameter tensors of a unit, in storage order, with their initialisation. */
typedef enum { INIT_NORMAL, INIT_NORMAL_RESID, INIT_ONES, INIT_ZEROS } InitKind;
typedef struct { size_t numel; InitKind init; } TensorDesc;

enum { BP_LN1W, BP_LN1B, BP_QKVW, BP_QKVB, BP_ATTPROJW, BP_ATTPROJB, BP_LN2W, BP_LN2B,
       BP_FCW, BP_FCB, BP_FCPROJW, BP_FCPROJB, BP_COUNT };
/* block tensor numel = cc·C² + c·C */
static const struct { int cc, c; InitKind init; } BLOCK_TENSORS[BP_COUNT] = {
    [BP_LN1W] = {0, 1, INIT_ONES},     [BP_LN1B] = {0, 1, INIT_ZEROS},
    [BP_QKVW] = {3, 0, INIT_NORMAL},   [BP_QKVB] = {0, 3, INIT_ZEROS},
    [BP_ATTPROJW] = {1, 0, INIT_NORMAL_RESID}, [BP_ATTPROJB] = {0, 1, INIT_ZEROS},
    [BP_LN2W] = {0, 1, INIT_ONES},     [BP_LN2B] = {0, 1, INIT_ZEROS},
    [BP_FCW] = {4, 0, INIT_NORMAL},    [BP_FCB] = {0, 4, INIT_ZEROS},
    [BP_FCPROJW] = {4, 0, INIT_NORMAL_RESID}, [BP_FCPROJB] = {0, 1, INIT_ZEROS},
};

/* Fills out[] (room for BP_COUNT) and returns the tensor count; 0 if unit is out of range. */
static int unit_tensors(const Gpt2Config *cfg, int unit, TensorDesc *out)
{
    size_t C = (size_t)cfg->d_model;
    if (unit == 0) {
        out[0] = (TensorDesc){(size_t)cfg->vocab * C, INIT_NORMAL};     /* wte */
        out[1] = (TensorDesc){(size_t)cfg->max_seq * C, INIT_NORMAL};   /* wpe */
        return 2;
    }
    if (unit >= 1 && unit <= cfg->n_layer) {
        for (int i = 0; i < BP_COUNT; i++)
            out[i] = (TensorDesc){BLOCK_TENSORS[i].cc * C * C + BLOCK_TENSORS[i].c * C,
                                  BLOCK_TENSORS[i].init};
        return BP_COUNT;
    }
    if (unit == cfg->n_layer + 1) {
        out[0] = (TensorDesc){C, INIT_ONES};    /* lnfw */
        out[1] = (TensorDesc){C, INIT_ZEROS};   /* lnfb */
        return 2;
    }
    return 0;
}

size_t gpt2_cfg_unit_numel(const Gpt2Config *cfg, int unit)
{
    TensorDesc t[BP_COUNT];
    int n = unit_tensors(cfg, unit, t);
    size_t s = 0;
    for (int i = 0; i < n; i++) s += t[i].numel;
    return s;
}

int64_t gpt2_cfg_num_params(const Gpt2Config *cfg)
{
    int64_t s = 0;
    for (int u = 0; u < gpt2_cfg_units(cfg); u++) s += (int64_t)gpt2_cfg_unit_numel(cfg, u);
    return s;
}

/* ---- counter-based initialisation: value = f(seed, unit, index) ---- */

static uint64_t splitmix64(uint64_t x)
{
    x += 0x9E3779B97F4A7C15ull;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return x ^ (x >> 31);
}

static double unit_open01(uint64_t r) { return ((double)(r >> 11) + 0.5) / 9007199254740992.0; }

/* Standard normal (Box-Muller) from two hashes of (key, i). */
static double normal_at(uint64_t key, uint64_t i)
{
    double u1 = unit_open01(splitmix64(key ^ splitmix64(2 * i)));
    double u2 = unit_open01(splitmix64(key ^ splitmix64(2 * i + 1)));
    return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
}

int gpt2_init_unit_range(const Gpt2Config *cfg, int unit, uint64_t seed, size_t offset,
                         size_t length, float *dst)
{
    TensorDesc t[BP_COUNT];
    int n = unit_tensors(cfg, unit, t);
    if (n == 0 || offset + length > gpt2_cfg_unit_numel(cfg, unit) || (length && !dst)) return -1;
    uint64_t key = splitmix64(seed ^ splitmix64(0x5EEDull + (uint64_t)unit));
    double std = 0.02, std_resid = 0.02 / sqrt(2.0 * cfg->n_layer);
    size_t start = 0;   /* first element of tensor k within the unit */
    for (int k = 0; k < n; start += t[k].numel, k++) {
        size_t lo = offset > start ? offset : start;
        size_t hi = offset + length < start + t[k].numel ? offset + length : start + t[k].numel;
        for (size_t i = lo; i < hi; i++) {
            float v = 0.0f;
            switch (t[k].init) {
            case INIT_NORMAL: v = (float)(std * normal_at(key, i)); break;
            case INIT_NORMAL_RESID: v = (float)(std_resid * normal_at(key, i)); break;
            case INIT_ONES: v = 1.0f; break;
            case INIT_ZEROS: v = 0.0f; break;
            }
            dst[i - offset] = v;
        }
    }
    return 0;
}

/* ---- activation and workspace tables ---- */

/* Shapes of saved tensors, in elements. */
typedef enum { SH_BT, SH_BTC, SH_BT3C, SH_BT4C, SH_BNHTT, SH_BTV } Shape;

static size_t shape_numel(Shape s, const Gpt2Config *cfg, int B, int T)
{
    size_t bt = (size_t)B * T, C = (size_t)cfg->d_model;
    switch (s) {
    case SH_BT: return bt;
    case SH_BTC: return bt * C;
    case SH_BT3C: return bt * 3 * C;
    case SH_BT4C: return bt * 4 * C;
    case SH_BNHTT: return (size_t)B * cfg->n_head * T * T;
    case SH_BTV: return bt * (size_t)cfg->vocab;
    }
    return 0;
}

enum { A_LN1, A_LN1_MEAN, A_LN1_RSTD, A_QKV, A_ATTY, A_PREATT, A_ATT, A_ATTPROJ, A_RESIDUAL2,
       A_LN2, A_LN2_MEAN, A_LN2_RSTD, A_FCH, A_FCH_GELU, A_FCPROJ, A_RESIDUAL3, A_COUNT };
static const struct { const char *name; Shape shape; } BLOCK_ACTS[A_COUNT] = {
    {"ln1", SH_BTC}, {"ln1_mean", SH_BT}, {"ln1_rstd", SH_BT}, {"qkv", SH_BT3C},
    {"atty", SH_BTC}, {"preatt", SH_BNHTT}, {"att", SH_BNHTT}, {"attproj", SH_BTC},
    {"residual2", SH_BTC}, {"ln2", SH_BTC}, {"ln2_mean", SH_BT}, {"ln2_rstd", SH_BT},
    {"fch", SH_BT4C}, {"fch_gelu", SH_BT4C}, {"fcproj", SH_BTC}, {"residual3", SH_BTC},
};

enum { H_ENCODED, H_LNF, H_LNF_MEAN, H_LNF_RSTD, H_LOGITS, H_LSE, H_LOSSES, H_COUNT };
static const struct { const char *name; Shape shape; } HEAD_ACTS[H_COUNT] = {
    {"encoded", SH_BTC}, {"lnf", SH_BTC}, {"lnf_mean", SH_BT}, {"lnf_rstd", SH_BT},
    {"logits", SH_BTV}, {"lse", SH_BT}, {"losses", SH_BT},
};

/* zero: allocated zeroed (the kernel accumulates into it from the start). */
enum { W_DRESIDUAL, W_DBTC, W_DFCH_GELU, W_DFCH, W_DPREATT, W_DATT, W_COUNT };
static const struct { const char *name; Shape shape; int zero; } WORKSPACE[W_COUNT] = {
    {"dresidual", SH_BTC, 1}, {"dbtc", SH_BTC, 0},
    {"dfch_gelu", SH_BT4C, 0}, {"dfch", SH_BT4C, 0}, {"dpreatt", SH_BNHTT, 0},
    {"datt", SH_BNHTT, 0},
};

static int check_bt(const Gpt2Config *cfg, int B, int T)
{
    return B >= 1 && T >= 1 && T <= cfg->max_seq ? 0 : -1;
}

int gpt2_activation_layout(const Gpt2Config *cfg, int B, int T, Gpt2MemLayout *out)
{
    if (gpt2_config_check(cfg, NULL, 0) || check_bt(cfg, B, T) || !out) return -1;
    const size_t F = sizeof(float);
    Gpt2MemLayout l = {0};
    for (int i = 0; i < A_COUNT; i++) l.block_bytes += F * shape_numel(BLOCK_ACTS[i].shape, cfg, B, T);
    for (int i = 0; i < H_COUNT; i++) l.outside_bytes += F * shape_numel(HEAD_ACTS[i].shape, cfg, B, T);
    for (int i = 0; i < W_COUNT; i++) l.ws_bytes += F * shape_numel(WORKSPACE[i].shape, cfg, B, T);
    l.act_bytes = (size_t)cfg->n_layer * l.block_bytes + l.outside_bytes;
    l.param_bytes = F * (size_t)gpt2_cfg_num_params(cfg);

    /* Walk the documented backward sequence of a first step (see the top of this file). */
    int L = cfg->n_layer;
    size_t bt = F * shape_numel(SH_BT, cfg, B, T), btc = F * shape_numel(SH_BTC, cfg, B, T);
    size_t btv = F * shape_numel(SH_BTV, cfg, B, T);
    size_t cur = l.param_bytes + l.act_bytes + l.ws_bytes, peak;
    cur += F * gpt2_cfg_unit_numel(cfg, 0);                       /* grads of unit 0 */
    peak = cur;
    cur -= btv + 2 * bt + btc;                                    /* logits, lse, losses, lnf */
    cur += F * gpt2_cfg_unit_numel(cfg, L + 1);                   /* grads of unit L+1 */
    if (cur > peak) peak = cur;
    cur -= 2 * bt;                                                /* lnf_mean, lnf_rstd */
    for (int u = L; u >= 1; u--) {
        cur += F * gpt2_cfg_unit_numel(cfg, u);                   /* grads of block u */
        if (cur > peak) peak = cur;
        cur -= l.block_bytes + (u == 1 ? btc : 0);                /* its tensors (+ encoded) */
    }
    l.peak_first_bytes = peak;   /* cur only falls from here (scratch freed) */
    l.peak_bytes = 4 * l.param_bytes + l.act_bytes + l.ws_bytes;
    *out = l;
    return 0;
}

/* ---- the model ---- */

struct Gpt2 {
    Gpt2Config cfg;
    MemTracker *mt;
    Device *dev;                   /* NULL: host */
    int gpu;                       /* dev is a CUDA device */
    const ExecKernels *k;          /* the device's kernels */
    void *stream;                  /* their stream (NULL on the host) */
    Gpt2Hooks hooks;
    void *ctx;
    int nunits;
    size_t *numel;                 /* per unit */
    float **params, **grads;       /* per unit, current pointers (NULL = absent) */
    unsigned char *own_params, *own_grads;
    float **opt_m, **opt_v;        /* per unit AdamW state, opt_len elements each */
    size_t *opt_len;
    /* the current step */
    int B, T;
    const int *tokens, *targets;   /* what the kernels read (device copies on a GPU) */
    float *dtok, *dtgt;            /* GPU: tracked copies of tokens, targets (int32 bits) */
    float *head[H_COUNT];
    float **acts;                  /* n_layer × A_COUNT */
    float *ws[W_COUNT];
    float grad_scale;              /* 0: 1/(B·T) */
    char err[256];
};

static int fail_msg(Gpt2 *m, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(m->err, sizeof m->err, fmt, ap);
    va_end(ap);
    return -1;
}

/* Tracked allocation of n floats; on failure sets the error and returns NULL. */
static float *tracked(Gpt2 *m, MemCategory cat, size_t n, int zero, const char *what, int unit)
{
    char label[64];
    if (unit >= 0) snprintf(label, sizeof label, "%s (unit %d)", what, unit);
    else snprintf(label, sizeof label, "%s", what);
    size_t bytes = n * sizeof(float);
    float *p = zero ? prof_mem_calloc(m->mt, cat, bytes, label) : prof_mem_alloc(m->mt, cat, bytes, label);
    if (!p) fail_msg(m, "out of memory: %s, %zu bytes of %s", label, bytes, prof_mem_category_name(cat));
    return p;
}

static void release(Gpt2 *m, float **p)
{
    prof_mem_free(m->mt, *p);
    *p = NULL;
}

/* Zeroes bytes of model memory: memset on the host, a memset on the compute stream on a GPU. */
static void zero(Gpt2 *m, void *p, size_t bytes)
{
    if (m->gpu) exec_device_memset(m->dev, p, 0, bytes);
    else memset(p, 0, bytes);
}

/* A kernel of the table failed (its launcher printed why). */
static int kernel_failed(Gpt2 *m, const char *where)
{
    return fail_msg(m, "a %s kernel failed in %s (see the message above)", m->k->name, where);
}

int gpt2_create(Gpt2 **out, const Gpt2Config *cfg, MemTracker *mt, const Gpt2Hooks *hooks, void *ctx)
{
    return gpt2_create_on(out, cfg, mt, NULL, hooks, ctx);
}

int gpt2_create_on(Gpt2 **out, const Gpt2Config *cfg, MemTracker *mt, Device *dev, const Gpt2Hooks *hooks,
                   void *ctx)
{
    *out = NULL;
    if (gpt2_config_check(cfg, NULL, 0) || !mt) return -1;
    Gpt2 *m = calloc(1, sizeof *m);
    if (!m) return -1;
    m->cfg = *cfg;
    m->mt = mt;
    m->dev = dev;
    m->gpu = dev && exec_device_kind(dev) == DEVICE_CUDA;
    m->k = exec_kernels(m->gpu ? DEVICE_CUDA : DEVICE_HOST);
    m->stream = m->gpu ? exec_device_stream(dev) : NULL;
    if (hooks) m->hooks = *hooks;
    m->ctx = ctx;
    int n = m->nunits = gpt2_cfg_units(cfg);
    m->numel = calloc(n, sizeof *m->numel);
    m->params = calloc(n, sizeof *m->params);
    m->grads = calloc(n, sizeof *m->grads);
    m->own_params = calloc(n, 1);
    m->own_grads = calloc(n, 1);
    m->opt_m = calloc(n, sizeof *m->opt_m);
    m->opt_v = calloc(n, sizeof *m->opt_v);
    m->opt_len = calloc(n, sizeof *m->opt_len);
    m->acts = calloc((size_t)cfg->n_layer * A_COUNT, sizeof *m->acts);
    if (!m->numel || !m->params || !m->grads || !m->own_params || !m->own_grads || !m->opt_m ||
        !m->opt_v || !m->opt_len || !m->acts)
        goto fail;
    for (int u = 0; u < n; u++) {
        m->numel[u] = gpt2_cfg_unit_numel(cfg, u);
        if (m->hooks.external_params) continue;
        m->params[u] = tracked(m, MEM_PARAMS, m->numel[u], 0, "params", u);
        if (!m->params[u]) goto fail;
        m->own_params[u] = 1;
    }
    *out = m;
    return 0;
fail:
    gpt2_destroy(m);
    return -1;
}

void gpt2_destroy(Gpt2 *m)
{
    if (!m) return;
    gpt2_free_activations(m);
    for (int u = 0; u < m->nunits && m->numel; u++) {
        if (m->params && m->own_params[u]) release(m, &m->params[u]);
        if (m->grads && m->own_grads[u]) release(m, &m->grads[u]);
        if (m->opt_m) release(m, &m->opt_m[u]);
        if (m->opt_v) release(m, &m->opt_v[u]);
    }
    free(m->numel); free(m->params); free(m->grads); free(m->own_params); free(m->own_grads);
    free(m->opt_m); free(m->opt_v); free(m->opt_len); free(m->acts);
    free(m);
}

const Gpt2Config *gpt2_config(const Gpt2 *m) { return &m->cfg; }
const char *gpt2_error(const Gpt2 *m) { return m->err; }

static int valid_unit(const Gpt2 *m, int u) { return u >= 0 && u < m->nunits; }
size_t gpt2_unit_numel(const Gpt2 *m, int u) { return valid_unit(m, u) ? m->numel[u] : 0; }
float *gpt2_unit_params(const Gpt2 *m, int u) { return valid_unit(m, u) ? m->params[u] : NULL; }
float *gpt2_unit_grads(const Gpt2 *m, int u) { return valid_unit(m, u) ? m->grads[u] : NULL; }

static int set_unit_ptr(Gpt2 *m, float **slot, unsigned char *own, float *p)
{
    if (*own) prof_mem_free(m->mt, *slot);
    *slot = p;
    *own = 0;
    return 0;
}

int gpt2_set_unit_params(Gpt2 *m, int u, float *p)
{
    if (!valid_unit(m, u)) return fail_msg(m, "gpt2_set_unit_params: no unit %d", u);
    return set_unit_ptr(m, &m->params[u], &m->own_params[u], p);
}

int gpt2_set_unit_grads(Gpt2 *m, int u, float *g)
{
    if (!valid_unit(m, u)) return fail_msg(m, "gpt2_set_unit_grads: no unit %d", u);
    return set_unit_ptr(m, &m->grads[u], &m->own_grads[u], g);
}

int gpt2_init_params(Gpt2 *m, uint64_t seed)
{
    for (int u = 0; u < m->nunits; u++) {
        if (!m->params[u]) continue;
        if (!m->gpu) {
            if (gpt2_init_unit_range(&m->cfg, u, seed, 0, m->numel[u], m->params[u]))
                return fail_msg(m, "cannot initialise unit %d", u);
            continue;
        }
        /* on a GPU: computed on the host, copied (the copy returns when it is done) */
        float *h = malloc(m->numel[u] * sizeof *h);
        if (!h) return fail_msg(m, "out of host memory initialising unit %d", u);
        int bad = gpt2_init_unit_range(&m->cfg, u, seed, 0, m->numel[u], h);
        if (!bad) exec_device_copy(m->dev, m->params[u], h, m->numel[u] * sizeof *h);
        free(h);
        if (bad) return fail_msg(m, "cannot initialise unit %d", u);
        if (exec_device_failed(m->dev)) return fail_msg(m, "copying unit %d to the GPU failed (see the message above)", u);
    }
    return 0;
}

/* ---- hooks and per-unit views ---- */

typedef enum { BEFORE_FWD, AFTER_FWD, BEFORE_BWD, AFTER_BWD } HookKind;

static int call_hook(Gpt2 *m, HookKind k, int u)
{
    static const char *const names[] = {"before_unit_forward", "after_unit_forward",
                                        "before_unit_backward", "after_unit_backward"};
    Gpt2UnitHook h[] = {m->hooks.before_unit_forward, m->hooks.after_unit_forward,
                        m->hooks.before_unit_backward, m->hooks.after_unit_backward};
    if (h[k] && h[k](m->ctx, m, u) != 0) return fail_msg(m, "%s hook failed for unit %d", names[k], u);
    if ((k == BEFORE_FWD || k == BEFORE_BWD) && !m->params[u])
        return fail_msg(m, "unit %d has no parameters after %s (the strategy must provide them)", u, names[k]);
    return 0;
}

/* The gradient buffer of unit u for this backward, created zeroed if absent. */
static float *unit_grads(Gpt2 *m, int u)
{
    if (!m->grads[u]) {
        m->grads[u] = tracked(m, MEM_GRADS, m->numel[u], 1, "grads", u);
        m->own_grads[u] = m->grads[u] != NULL;
    }
    return m->grads[u];
}

/* Pointers to the 12 tensors of a block unit's flat array (params or grads). */
static void block_views(const Gpt2Config *cfg, float *base, float *v[BP_COUNT])
{
    TensorDesc t[BP_COUNT];
    unit_tensors(cfg, 1, t);
    for (int i = 0; i < BP_COUNT; i++) {
        v[i] = base;
        base += t[i].numel;
    }
}

static float **block_acts(Gpt2 *m, int l) { return m->acts + (size_t)l * A_COUNT; }

void gpt2_free_activations(Gpt2 *m)
{
    for (int i = 0; i < H_COUNT; i++) release(m, &m->head[i]);
    for (size_t i = 0; i < (size_t)m->cfg.n_layer * A_COUNT; i++) release(m, &m->acts[i]);
    for (int i = 0; i < W_COUNT; i++) release(m, &m->ws[i]);
    release(m, &m->dtok);
    release(m, &m->dtgt);
}

/* ---- forward ---- */

static int alloc_head(Gpt2 *m, int from, int to)
{
    for (int i = from; i <= to; i++) {
        m->head[i] = tracked(m, MEM_ACTIVATIONS, shape_numel(HEAD_ACTS[i].shape, &m->cfg, m->B, m->T),
                             0, HEAD_ACTS[i].name, -1);
        if (!m->head[i]) return -1;
    }
    return 0;
}

static int block_forward(Gpt2 *m, int l, const float *x)
{
    int B = m->B, T = m->T, C = m->cfg.d_model, NH = m->cfg.n_head;
    size_t btc = (size_t)B * T * C;
    float **a = block_acts(m, l);
    for (int i = 0; i < A_COUNT; i++) {
        a[i] = tracked(m, MEM_ACTIVATIONS, shape_numel(BLOCK_ACTS[i].shape, &m->cfg, B, T), 0,
                       BLOCK_ACTS[i].name, l + 1);
        if (!a[i]) return -1;
    }
    float *p[BP_COUNT];
    block_views(&m->cfg, m->params[l + 1], p);
    const ExecKernels *k = m->k;
    void *st = m->stream;
    int rc = 0;
    rc |= k->layernorm_forward(a[A_LN1], a[A_LN1_MEAN], a[A_LN1_RSTD], x, p[BP_LN1W], p[BP_LN1B], B, T, C, st);
    rc |= k->matmul_forward(a[A_QKV], a[A_LN1], p[BP_QKVW], p[BP_QKVB], B, T, C, 3 * C, st);
    rc |= k->attention_forward(a[A_ATTY], a[A_PREATT], a[A_ATT], a[A_QKV], B, T, C, NH, st);
    rc |= k->matmul_forward(a[A_ATTPROJ], a[A_ATTY], p[BP_ATTPROJW], p[BP_ATTPROJB], B, T, C, C, st);
    rc |= k->residual_forward(a[A_RESIDUAL2], x, a[A_ATTPROJ], btc, st);
    rc |= k->layernorm_forward(a[A_LN2], a[A_LN2_MEAN], a[A_LN2_RSTD], a[A_RESIDUAL2], p[BP_LN2W], p[BP_LN2B], B, T, C, st);
    rc |= k->matmul_forward(a[A_FCH], a[A_LN2], p[BP_FCW], p[BP_FCB], B, T, C, 4 * C, st);
    rc |= k->gelu_forward(a[A_FCH_GELU], a[A_FCH], 4 * btc, st);
    rc |= k->matmul_forward(a[A_FCPROJ], a[A_FCH_GELU], p[BP_FCPROJW], p[BP_FCPROJB], B, T, 4 * C, C, st);
    rc |= k->residual_forward(a[A_RESIDUAL3], a[A_RESIDUAL2], a[A_FCPROJ], btc, st);
    return rc ? kernel_failed(m, "a block's forward") : 0;
}

int gpt2_forward(Gpt2 *m, const int *tokens, const int *targets, int B, int T, float *mean_loss)
{
    const Gpt2Config *cfg = &m->cfg;
    int L = cfg->n_layer, C = cfg->d_model, V = cfg->vocab;
    m->err[0] = '\0';
    gpt2_free_activations(m);
    if (!tokens || !targets) return fail_msg(m, "gpt2_forward needs tokens and targets");
    if (check_bt(cfg, B, T))
        return fail_msg(m, "batch %d x sequence %d is invalid: need B >= 1 and 1 <= T <= %d (max_seq)", B, T, cfg->max_seq);
    for (size_t i = 0; i < (size_t)B * T; i++)
        if (tokens[i] < 0 || tokens[i] >= V || targets[i] < 0 || targets[i] >= V)
            return fail_msg(m, "token %zu is out of the vocabulary [0, %d)", i, V);
    m->B = B; m->T = T; m->tokens = tokens; m->targets = targets;
    const ExecKernels *k = m->k;
    void *st = m->stream;
    if (m->gpu) {   /* the kernels read device copies */
        size_t bytes = (size_t)B * T * sizeof(int);
        if (!(m->dtok = tracked(m, MEM_ACTIVATIONS, (size_t)B * T, 0, "tokens", -1)) ||
            !(m->dtgt = tracked(m, MEM_ACTIVATIONS, (size_t)B * T, 0, "targets", -1)))
            goto fail;
        exec_device_copy(m->dev, m->dtok, tokens, bytes);
        exec_device_copy(m->dev, m->dtgt, targets, bytes);
        m->tokens = (const int *)m->dtok;
        m->targets = (const int *)m->dtgt;
    }

    if (call_hook(m, BEFORE_FWD, 0) || alloc_head(m, H_ENCODED, H_ENCODED)) goto fail;
    float *wte = m->params[0], *wpe = wte + (size_t)V * C;
    if (k->encoder_forward(m->head[H_ENCODED], m->tokens, wte, wpe, B, T, C, st)) {
        kernel_failed(m, "the encoder's forward");
        goto fail;
    }
    const float *x = m->head[H_ENCODED];
    for (int l = 0; l < L; l++) {
        if (call_hook(m, BEFORE_FWD, l + 1) || block_forward(m, l, x) || call_hook(m, AFTER_FWD, l + 1))
            goto fail;
        x = block_acts(m, l)[A_RESIDUAL3];
    }
    if (call_hook(m, BEFORE_FWD, L + 1) || alloc_head(m, H_LNF, H_LNF_RSTD)) goto fail;
    const float *lnfw = m->params[L + 1];
    if (k->layernorm_forward(m->head[H_LNF], m->head[H_LNF_MEAN], m->head[H_LNF_RSTD], x, lnfw, lnfw + C, B, T, C, st)) {
        kernel_failed(m, "the final LayerNorm's forward");
        goto fail;
    }
    if (call_hook(m, AFTER_FWD, L + 1) || alloc_head(m, H_LOGITS, H_LOSSES)) goto fail;
    if (k->lmhead_ce_forward(m->head[H_LOGITS], m->head[H_LSE], m->head[H_LOSSES], m->head[H_LNF], m->params[0],
                             m->targets, B, T, C, V, st)) {
        kernel_failed(m, "the LM head's forward");
        goto fail;
    }
    if (call_hook(m, AFTER_FWD, 0)) goto fail;
    if (mean_loss) {
        const float *losses = m->head[H_LOSSES];
        float *host = NULL;
        if (m->gpu) {   /* read back (the copy waits for the forward's kernels) */
            if (!(host = malloc((size_t)B * T * sizeof *host))) {
                fail_msg(m, "out of host memory reading the losses");
                goto fail;
            }
            exec_device_copy(m->dev, host, losses, (size_t)B * T * sizeof *host);
            losses = host;
        }
        double s = 0.0;
        for (size_t i = 0; i < (size_t)B * T; i++) s += losses[i];
        *mean_loss = (float)(s / ((double)B * T));
        free(host);
    }
    if (m->gpu && exec_device_failed(m->dev)) {
        fail_msg(m, "a CUDA call failed in forward (see the message above)");
        goto fail;
    }
    return 0;
fail:
    gpt2_free_activations(m);
    return -1;
}

/* ---- backward ---- */

void gpt2_set_grad_scale(Gpt2 *m, float scale) { m->grad_scale = scale > 0.0f ? scale : 0.0f; }

void gpt2_zero_grad(Gpt2 *m)
{
    for (int u = 0; u < m->nunits; u++)
        if (m->grads[u]) zero(m, m->grads[u], m->numel[u] * sizeof(float));
}

/* Block l's backward. On entry ws[W_DRESIDUAL] = d(residual3 of block l); on exit it is
 * d(block input). The residual adds pass the gradient through unchanged, so dresidual is both
 * d(fcproj) and, after the ln2 term is added, d(residual2) = d(attproj). */
static int block_backward(Gpt2 *m, int l, float *g_base)
{
    int B = m->B, T = m->T, C = m->cfg.d_model, NH = m->cfg.n_head;
    size_t btc = (size_t)B * T * C;
    float **a = block_acts(m, l), **ws = m->ws;
    const float *x = l == 0 ? m->head[H_ENCODED] : block_acts(m, l - 1)[A_RESIDUAL3];
    float *p[BP_COUNT], *g[BP_COUNT];
    block_views(&m->cfg, m->params[l + 1], p);
    block_views(&m->cfg, g_base, g);
    float *dres = ws[W_DRESIDUAL], *dbtc = ws[W_DBTC], *dfch_gelu = ws[W_DFCH_GELU];
    float *dfch = ws[W_DFCH], *dqkv = ws[W_DFCH];
    const ExecKernels *k = m->k;
    void *st = m->stream;
    int rc = 0;

    zero(m, dfch_gelu, 4 * btc * sizeof(float));
    rc |= k->matmul_backward(dfch_gelu, g[BP_FCPROJW], g[BP_FCPROJB], dres, a[A_FCH_GELU], p[BP_FCPROJW], B, T, 4 * C, C, st);
    zero(m, dfch, 4 * btc * sizeof(float));
    rc |= k->gelu_backward(dfch, a[A_FCH], dfch_gelu, 4 * btc, st);
    zero(m, dbtc, btc * sizeof(float));                                    /* dln2 */
    rc |= k->matmul_backward(dbtc, g[BP_FCW], g[BP_FCB], dfch, a[A_LN2], p[BP_FCW], B, T, C, 4 * C, st);
    rc |= k->layernorm_backward(dres, g[BP_LN2W], g[BP_LN2B], dbtc, a[A_RESIDUAL2], p[BP_LN2W],
                                a[A_LN2_MEAN], a[A_LN2_RSTD], B, T, C, st);
    zero(m, dbtc, btc * sizeof(float));                                    /* datty */
    rc |= k->matmul_backward(dbtc, g[BP_ATTPROJW], g[BP_ATTPROJB], dres, a[A_ATTY], p[BP_ATTPROJW], B, T, C, C, st);
    zero(m, dqkv, 3 * btc * sizeof(float));
    rc |= k->attention_backward(dqkv, ws[W_DPREATT], ws[W_DATT], dbtc, a[A_QKV], a[A_ATT], B, T, C, NH, st);
    zero(m, dbtc, btc * sizeof(float));                                    /* dln1 */
    rc |= k->matmul_backward(dbtc, g[BP_QKVW], g[BP_QKVB], dqkv, a[A_LN1], p[BP_QKVW], B, T, C, 3 * C, st);
    rc |= k->layernorm_backward(dres, g[BP_LN1W], g[BP_LN1B], dbtc, x, p[BP_LN1W], a[A_LN1_MEAN], a[A_LN1_RSTD], B, T, C, st);
    return rc ? kernel_failed(m, "a block's backward") : 0;
}

int gpt2_backward(Gpt2 *m)
{
    const Gpt2Config *cfg = &m->cfg;
    int L = cfg->n_layer, C = cfg->d_model, V = cfg->vocab, B = m->B, T = m->T;
    m->err[0] = '\0';
    if (!m->head[H_LOSSES]) return fail_msg(m, "gpt2_backward needs a successful gpt2_forward first");
    for (int i = 0; i < W_COUNT; i++) {
        m->ws[i] = tracked(m, MEM_WORKSPACE, shape_numel(WORKSPACE[i].shape, cfg, B, T),
                           WORKSPACE[i].zero, WORKSPACE[i].name, -1);
        if (!m->ws[i]) goto fail;
    }
    float *g0, *gl;
    const ExecKernels *k = m->k;
    void *st = m->stream;
    if (call_hook(m, BEFORE_BWD, 0) || !(g0 = unit_grads(m, 0))) goto fail;
    float dloss = m->grad_scale > 0.0f ? m->grad_scale : 1.0f / ((float)B * T);
    float *dlnf = m->ws[W_DBTC];
    zero(m, dlnf, (size_t)B * T * C * sizeof(float));
    if (k->lmhead_ce_backward(dlnf, g0, m->head[H_LOGITS], m->head[H_LSE], m->targets, m->head[H_LNF], m->params[0],
                              dloss, B, T, C, V, st)) {
        kernel_failed(m, "the LM head's and the loss's backward");
        goto fail;
    }
    release(m, &m->head[H_LOGITS]);
    release(m, &m->head[H_LSE]);
    release(m, &m->head[H_LOSSES]);
    release(m, &m->head[H_LNF]);

    if (call_hook(m, BEFORE_BWD, L + 1) || !(gl = unit_grads(m, L + 1))) goto fail;
    if (k->layernorm_backward(m->ws[W_DRESIDUAL], gl, gl + C, dlnf, block_acts(m, L - 1)[A_RESIDUAL3],
                              m->params[L + 1], m->head[H_LNF_MEAN], m->head[H_LNF_RSTD], B, T, C, st)) {
        kernel_failed(m, "the final LayerNorm's backward");
        goto fail;
    }
    release(m, &m->head[H_LNF_MEAN]);
    release(m, &m->head[H_LNF_RSTD]);
    if (call_hook(m, AFTER_BWD, L + 1)) goto fail;

    for (int l = L - 1; l >= 0; l--) {
        float *gb;
        if (call_hook(m, BEFORE_BWD, l + 1) || !(gb = unit_grads(m, l + 1)) || block_backward(m, l, gb)) goto fail;
        for (int i = 0; i < A_COUNT; i++) release(m, &block_acts(m, l)[i]);
        if (l == 0) release(m, &m->head[H_ENCODED]);
        if (call_hook(m, AFTER_BWD, l + 1)) goto fail;
    }
    /* the embeddings' gradient: unit 0's grad pointer may have been replaced by a hook */
    if (!(g0 = m->grads[0])) { fail_msg(m, "unit 0 lost its gradient buffer during backward"); goto fail; }
    if (k->encoder_backward(g0, g0 + (size_t)V * C, m->ws[W_DRESIDUAL], m->tokens, B, T, C, st)) {
        kernel_failed(m, "the encoder's backward");
        goto fail;
    }
    for (int i = 0; i < W_COUNT; i++) release(m, &m->ws[i]);
    release(m, &m->dtok);   /* GPU: the micro-batch's device copies */
    release(m, &m->dtgt);
    if (call_hook(m, AFTER_BWD, 0)) goto fail;
    return 0;
fail:
    gpt2_free_activations(m);
    return -1;
}

/* ---- AdamW ---- */

/* The unit's m, v state of `length` elements, allocated zeroed at the first step. */
static int opt_state(Gpt2 *m, int u, size_t length)
{
    if (m->opt_m[u]) {
        if (m->opt_len[u] != length)
            return fail_msg(m, "unit %d: AdamW state holds %zu elements, this step updates %zu", u, m->opt_len[u], length);
        return 0;
    }
    m->opt_m[u] = tracked(m, MEM_OPTIMIZER, length, 1, "adamw m", u);
    if (!m->opt_m[u]) return -1;
    m->opt_v[u] = tracked(m, MEM_OPTIMIZER, length, 1, "adamw v", u);
    if (!m->opt_v[u]) {
        release(m, &m->opt_m[u]);
        return -1;
    }
    m->opt_len[u] = length;
    return 0;
}

static int check_adamw(Gpt2 *m, int u, const Gpt2AdamW *opt, int t)
{
    if (!valid_unit(m, u)) return fail_msg(m, "AdamW: no unit %d", u);
    if (!opt || t < 1) return fail_msg(m, "AdamW needs hyper-parameters and a step number t >= 1");
    return 0;
}

int gpt2_adamw_step_unit(Gpt2 *m, int u, float *params, const float *grads, size_t length,
                         const Gpt2AdamW *opt, int t)
{
    if (check_adamw(m, u, opt, t)) return -1;
    if (length == 0) return 0;
    if (!params || !grads) return fail_msg(m, "AdamW: unit %d has no parameters or gradients to update", u);
    if (opt_state(m, u, length)) return -1;
    if (m->k->adamw_update(params, grads, m->opt_m[u], m->opt_v[u], 0, length, opt->lr, opt->beta1, opt->beta2,
                           opt->eps, opt->weight_decay, t, m->stream))
        return kernel_failed(m, "AdamW");
    return 0;
}

int gpt2_adamw_step(Gpt2 *m, const Gpt2AdamW *opt, int t, const size_t *offset, const size_t *length)
{
    if (check_adamw(m, 0, opt, t)) return -1;
    for (int u = 0; u < m->nunits; u++) {
        size_t off = offset ? offset[u] : 0, len = length ? length[u] : m->numel[u];
        if (off > m->numel[u] || len > m->numel[u] - off)
            return fail_msg(m, "AdamW: unit %d range [%zu, %zu) exceeds its %zu elements", u, off, off + len, m->numel[u]);
        if (len == 0) continue;
        if (!m->params[u] || !m->grads[u])
            return fail_msg(m, "AdamW: unit %d has no parameters or gradients to update", u);
        if (gpt2_adamw_step_unit(m, u, m->params[u] + off, m->grads[u] + off, len, opt, t)) return -1;
    }
    return 0;
}

/* ---- synthetic data ---- */

int gpt2_synthetic_batch(uint64_t seed, int step, int global_batch, int rank, int nranks,
                         int T, int V, int *tokens, int *targets)
{
    if (nranks < 1 || global_batch < 1 || global_batch % nranks || rank < 0 || rank >= nranks ||
        T < 1 || V < 2 || step < 0 || !tokens || !targets)
        return -1;
    uint64_t k = splitmix64(seed ^ 0x7A5Bull);
    uint64_t a = 1 + splitmix64(k) % (uint64_t)(V - 1), b = splitmix64(k + 1) % (uint64_t)V;
    int bl = global_batch / nranks;
    for (int r = 0; r < bl; r++) {
        uint64_t g = (uint64_t)rank * bl + r;   /* global row */
        uint64_t key = splitmix64(k ^ splitmix64(((uint64_t)step << 32) ^ g));
        uint64_t tok = splitmix64(key) % (uint64_t)V;
        for (int t = 0; t <= T; t++) {
            if (t > 0) {
                uint64_t h = splitmix64(key + 1 + (uint64_t)t);
                tok = (h & 15) == 0 ? (h >> 8) % (uint64_t)V : (a * tok + b) % (uint64_t)V;
            }
            if (t < T) tokens[(size_t)r * T + t] = (int)tok;
            if (t > 0) targets[(size_t)r * T + t - 1] = (int)tok;
        }
    }
    return 0;
}
