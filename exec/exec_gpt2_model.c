/* exec_gpt2_model.c — the GPT-2 adapter of the model interface (see exec_gpt2_model.h). Every
 * entry forwards to exec_gpt2.h; the only logic is the gradient scale: the interface asks for
 * the gradient of mean loss / divisor, which for GPT-2's per-token scale is 1/(B·T·divisor),
 * set before each forward because B and T arrive with the batch. */
#include "exec_gpt2_model.h"

#include <stdlib.h>

typedef struct {
    ExecModel base;          /* first: the handle callers hold */
    Gpt2 *g;
    double divisor;          /* 0: the default mean over the micro-batch */
} Gpt2Model;

static const ExecModelOps GPT2_OPS;

/* ---- Gpt2Hooks -> ExecHooks ---- */

static int tramp(void *ctx, int k, int unit)
{
    ExecModel *m = &((Gpt2Model *)ctx)->base;
    return exec_model_call_hook(m, (ExecHookKind)k, unit);
}
static int t_bf(void *ctx, Gpt2 *g, int u) { (void)g; return tramp(ctx, EXEC_BEFORE_FWD, u); }
static int t_af(void *ctx, Gpt2 *g, int u) { (void)g; return tramp(ctx, EXEC_AFTER_FWD, u); }
static int t_bb(void *ctx, Gpt2 *g, int u) { (void)g; return tramp(ctx, EXEC_BEFORE_BWD, u); }
static int t_ab(void *ctx, Gpt2 *g, int u) { (void)g; return tramp(ctx, EXEC_AFTER_BWD, u); }

/* ---- the ops ---- */

static int g_units(const void *p) { return gpt2_cfg_units(gpt2_config(((const Gpt2Model *)p)->g)); }
static size_t g_numel(const void *p, int u) { return gpt2_unit_numel(((const Gpt2Model *)p)->g, u); }
static float *g_params(const void *p, int u) { return gpt2_unit_params(((const Gpt2Model *)p)->g, u); }
static float *g_grads(const void *p, int u) { return gpt2_unit_grads(((const Gpt2Model *)p)->g, u); }
static int g_set_params(void *p, int u, float *x) { return gpt2_set_unit_params(((Gpt2Model *)p)->g, u, x); }
static int g_set_grads(void *p, int u, float *x) { return gpt2_set_unit_grads(((Gpt2Model *)p)->g, u, x); }

static int g_init_range(const void *p, int u, uint64_t seed, size_t off, size_t len, float *dst)
{
    return gpt2_init_unit_range(gpt2_config(((const Gpt2Model *)p)->g), u, seed, off, len, dst);
}

static int g_root(const void *p, int out[2])
{
    out[0] = 0;
    out[1] = gpt2_config(((const Gpt2Model *)p)->g)->n_layer + 1;
    return 2;
}

static void g_divisor(void *p, double d) { ((Gpt2Model *)p)->divisor = d > 0 ? d : 0; }

static int g_forward(void *p, const ExecBatch *b, float *loss)
{
    Gpt2Model *gm = p;
    if (gm->divisor > 0 && b->batch > 0 && b->seq > 0)
        gpt2_set_grad_scale(gm->g, (float)(1.0 / ((double)b->batch * b->seq * gm->divisor)));
    return gpt2_forward(gm->g, b->inputs, b->targets, b->batch, b->seq, loss);
}

static int g_backward(void *p) { return gpt2_backward(((Gpt2Model *)p)->g); }
static void g_zero(void *p) { gpt2_zero_grad(((Gpt2Model *)p)->g); }

static int g_adamw(void *p, int u, float *params, const float *grads, size_t len, const ExecAdamW *o, int t)
{
    Gpt2AdamW a = {o->lr, o->beta1, o->beta2, o->eps, o->weight_decay};
    return gpt2_adamw_step_unit(((Gpt2Model *)p)->g, u, params, grads, len, &a, t);
}

static float *g_buffers(void *p, size_t *n)
{
    (void)p;
    if (n) *n = 0;
    return NULL;
}

static const char *g_error(const void *p) { return gpt2_error(((const Gpt2Model *)p)->g); }

static void g_destroy(void *p)
{
    Gpt2Model *gm = p;
    gpt2_destroy(gm->g);
    free(gm);
}

static const ExecModelOps GPT2_OPS = {
    g_units, g_numel, g_params, g_grads, g_set_params, g_set_grads, g_init_range, g_root,
    g_divisor, g_forward, g_backward, g_zero, g_adamw, g_buffers, g_error, g_destroy,
};

int exec_gpt2_model_create_on(ExecModel **out, const Gpt2Config *cfg, MemTracker *mt, Device *dev,
                              const ExecHooks *hooks, void *ctx)
{
    *out = NULL;
    Gpt2Model *gm = calloc(1, sizeof *gm);
    if (!gm) return -1;
    exec_model_init(&gm->base, &GPT2_OPS, gm, hooks, ctx);
    Gpt2Hooks gh = {0};
    if (hooks) {
        gh.before_unit_forward = hooks->before_unit_forward ? t_bf : NULL;
        gh.after_unit_forward = hooks->after_unit_forward ? t_af : NULL;
        gh.before_unit_backward = hooks->before_unit_backward ? t_bb : NULL;
        gh.after_unit_backward = hooks->after_unit_backward ? t_ab : NULL;
        gh.external_params = hooks->external_params;
    }
    if (gpt2_create_on(&gm->g, cfg, mt, dev, hooks ? &gh : NULL, gm)) {
        free(gm);
        return -1;
    }
    *out = &gm->base;
    return 0;
}
