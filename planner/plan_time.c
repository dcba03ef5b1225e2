/* plan_time.c — see plan_time.h. */
#include "plan_time.h"

#include <string.h>

/* The presets the published runs were measured on. */
static const char *const BACKED_GPUS[] = {"a100-40gb", "a100-80gb", "h100-80gb"};

static int backed_gpu(const ClusterSpec *c) {
    for (size_t i = 0; i < sizeof BACKED_GPUS / sizeof BACKED_GPUS[0]; i++)
        if (strcmp(c->gpu.name, BACKED_GPUS[i]) == 0) return 1;
    return 0;
}

TimeBasis plan_time_basis(const ModelSpec *m, const TrainSpec *t, const ClusterSpec *c, StrategyKind k) {
    int64_t s = t->seq > 0 ? t->seq : m->max_seq;
    int ckpt_ok = t->act_ckpt == CKPT_NONE || t->act_ckpt == CKPT_FULL || t->act_ckpt == CKPT_OP ||
                  (t->act_ckpt == CKPT_EVERY && t->ckpt_every == 2);
    const char *why = NULL;
    if (plan_time_flat(c)) why = "the flat model (--mfu or a measured description)";
    else if (!backed_gpu(c)) why = "no published run on this GPU";
    else if (t->pp > 1) why = "no published run with pipeline stages (the bubble and the send/recv are closed forms)";
    else if (k != STRAT_FSDP_FULL && k != STRAT_FSDP_GRAD_OP) why = "no published run of this strategy";
    else if (m->arch != ARCH_DECODER || m->moe.n_experts > 0) why = "no published run of this kind of model";
    else if (t->precision != PREC_MIXED_BF16 && t->precision != PREC_AMP_BF16) why = "no published run in this precision";
    else if (t->attn != ATTN_SDPA || t->impl != IMPL_PYTORCH || t->offload != OFFLOAD_NONE)
        why = "no published run with this attention, layout or offload";
    else if (!ckpt_ok) why = "no published run with this checkpointing";
    else if (s < 512 || s > 65536 || c->gpus < 8 || c->gpus > 512) why = "outside the published runs' sequences or GPU counts";
    if (why) return (TimeBasis){0, why};
    return (TimeBasis){1, "published runs of this setup back the model (bench/published_check.py)"};
}

const char *plan_time_basis_name(const TimeBasis *b) { return b->published ? "published" : "estimate"; }

double plan_time_mfu(const ClusterSpec *c, const TrainSpec *t, double flops_per_step, double step_s) {
    const PrecisionSpec *p = plan_precision(t->precision);
    double peak = c->gpu.peak_tflops[p->peak] > 0 ? c->gpu.peak_tflops[p->peak] : c->gpu.peak_tflops[PEAK_FP32];
    return step_s > 0 && peak > 0 ? flops_per_step / step_s / (peak * 1e12) : 0;
}
