/* exec_model.c — the model interface's dispatch (exec_model.h) and the parts every runtime
 * shares: parameter totals, seeded initialisation of present units, the whole-model AdamW step. */
#include "exec_model.h"

#include <string.h>

void exec_model_init(ExecModel *m, const ExecModelOps *ops, void *impl, const ExecHooks *hooks,
                     void *ctx)
{
    memset(m, 0, sizeof *m);
    m->ops = ops;
    m->impl = impl;
    if (hooks) m->hooks = *hooks;
    m->hook_ctx = ctx;
}

const char *exec_model_hook_name(ExecHookKind k)
{
    static const char *const names[] = {"before_unit_forward", "after_unit_forward",
                                        "before_unit_backward", "after_unit_backward"};
    return (unsigned)k <= EXEC_AFTER_BWD ? names[k] : "unknown hook";
}

int exec_model_call_hook(ExecModel *m, ExecHookKind k, int unit)
{
    ExecUnitHook h[] = {m->hooks.before_unit_forward, m->hooks.after_unit_forward,
                        m->hooks.before_unit_backward, m->hooks.after_unit_backward};
    if ((unsigned)k > EXEC_AFTER_BWD || !h[k]) return 0;
    return h[k](m->hook_ctx, m, unit) != 0 ? -1 : 0;
}

int exec_model_units(const ExecModel *m) { return m->ops->units(m->impl); }
size_t exec_model_unit_numel(const ExecModel *m, int u) { return m->ops->unit_numel(m->impl, u); }
float *exec_model_unit_params(const ExecModel *m, int u) { return m->ops->unit_params(m->impl, u); }
float *exec_model_unit_grads(const ExecModel *m, int u) { return m->ops->unit_grads(m->impl, u); }
int exec_model_set_unit_params(ExecModel *m, int u, float *p) { return m->ops->set_unit_params(m->impl, u, p); }
int exec_model_set_unit_grads(ExecModel *m, int u, float *g) { return m->ops->set_unit_grads(m->impl, u, g); }
int exec_model_root_units(const ExecModel *m, int out[2]) { return m->ops->root_units(m->impl, out); }
void exec_model_set_grad_divisor(ExecModel *m, double d) { m->ops->set_grad_divisor(m->impl, d); }
int exec_model_forward(ExecModel *m, const ExecBatch *b, float *loss) { return m->ops->forward(m->impl, b, loss); }
int exec_model_backward(ExecModel *m) { return m->ops->backward(m->impl); }
void exec_model_zero_grad(ExecModel *m) { m->ops->zero_grad(m->impl); }
float *exec_model_buffers(ExecModel *m, size_t *numel) { return m->ops->buffers(m->impl, numel); }
const char *exec_model_error(const ExecModel *m) { return m->ops->error(m->impl); }
int exec_model_wrapped(const ExecModel *m) { return m->wrapped; }
void exec_model_set_wrapped(ExecModel *m) { m->wrapped = 1; }

int exec_model_init_unit_range(const ExecModel *m, int unit, uint64_t seed, size_t offset,
                               size_t length, float *dst)
{
    return m->ops->init_unit_range(m->impl, unit, seed, offset, length, dst);
}

int exec_model_adamw_step_unit(ExecModel *m, int unit, float *params, const float *grads,
                               size_t length, const ExecAdamW *opt, int t)
{
    return m->ops->adamw_step_unit(m->impl, unit, params, grads, length, opt, t);
}

int64_t exec_model_num_params(const ExecModel *m)
{
    int64_t s = 0;
    for (int u = 0; u < exec_model_units(m); u++) s += (int64_t)exec_model_unit_numel(m, u);
    return s;
}

int exec_model_init_params(ExecModel *m, uint64_t seed)
{
    for (int u = 0; u < exec_model_units(m); u++) {
        float *p = exec_model_unit_params(m, u);
        if (p && exec_model_init_unit_range(m, u, seed, 0, exec_model_unit_numel(m, u), p)) return -1;
    }
    return 0;
}

int exec_model_adamw_step(ExecModel *m, const ExecAdamW *opt, int t)
{
    for (int u = 0; u < exec_model_units(m); u++)
        if (exec_model_adamw_step_unit(m, u, exec_model_unit_params(m, u), exec_model_unit_grads(m, u),
                                       exec_model_unit_numel(m, u), opt, t))
            return -1;
    return 0;
}

void exec_model_destroy(ExecModel *m)
{
    if (m) m->ops->destroy(m->impl);
}
