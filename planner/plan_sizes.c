/* plan_sizes.c — see plan_sizes.h. */
#include "plan_sizes.h"

#include <math.h>
#include <string.h>

#include "plan_fsdp.h"
#include "plan_dim_ft.h"

/* CPU offload (plan_strategy.h): the fp32 master weights and the optimizer state live on the
   host; so does the gradient partition where gradients are sharded (ZeRO-2/3 copy each reduced
   partition into a host buffer; ZeRO-1 keeps the full low-precision gradients until the step);
   under param offload the parameter shards too (the gathered units stay). */
static void offload_gpu_sizes(const TrainSpec *t, StrategyKind sk, MemSizes *z) {
    if (!plan_offload_cpu_step(t, sk)) return;
    z->optimizer = 0;
    if (plan_strategy(sk)->shard & SHARD_GRAD) z->grads = 0;
    if (plan_offload_params_on_host(t, sk)) z->params = 0;
}

void plan_memory_sizes(const ModelSpec *m, const TrainSpec *t, const ClusterSpec *c,
                       StrategyKind sk, MemSizes *z) {
    const Strategy *s = plan_strategy(sk);
    const PrecisionSpec *p = plan_precision(t->precision);
    const OptimizerSpec *o = plan_optimizer(t->optimizer);
    memset(z, 0, sizeof(*z));
    z->n = s->group_node ? (c->gpus_per_node < c->gpus ? c->gpus_per_node : c->gpus) : c->gpus;
    /* InternLM's hybrid ZeRO (--zero-group): ZeRO-1/2 shard within groups of that many ranks */
    if (s->buffers == BUF_DS_REDUCE && t->ds.zero_group > 0 && t->ds.zero_group < c->gpus) z->n = t->ds.zero_group;
    /* Parameter-sharding strategies wrap like FSDP: one root unit holding every layer outside
       the model's repeated blocks (LayerSpec.unit 0), one unit per block; the others, and
       models without units, shard each layer on its own. A flat unit (FSDP1, ZeRO) is padded
       to a multiple of n; FSDP2 pads each tensor's dim 0 instead (plan_fsdp2_dim0_rows), where
       every dim 0 is known. Both paddings are summed in one pass; the per-tensor one is taken
       when no layer's dim 0 turned out unknown. */
    int units = plan_model_units(m);
    int root_flat = (s->shard & SHARD_PARAM) && (units > 0 || m->root_only);
    int64_t n = z->n;
    int dim0 = plan_fsdp2_dim0_rows(t, sk);
    /* expert parallelism (planner/plan_dim_ep.h): the routed experts' tensors are sharded over the
       expert data-parallel group, n / ep ranks, each holding the view's n_experts / ep of them */
    int64_t ep = m->moe.ep > 1 && n % m->moe.ep == 0 ? m->moe.ep : 1;
    double flat = 0, d0 = 0;                     /* local shard: per unit, per tensor */
    double u_elems = 0, u_d0 = 0, root_d0 = 0;   /* the unit being summed; the root's */
    double fz_flat = 0, fz_d0 = 0, fu = 0, fu_d0 = 0, root_fz_d0 = 0;   /* the same for frozen ones */
    for (int i = 0; i < m->n_layers; i++) {
        const LayerSpec *l = &m->layers[i];
        double pu = (double)l->params, lf = ceil(pu / (double)n);
        double ld = 0, pf = (double)l->frozen, lfd = 0;
        if (dim0 && (ld = (double)(ep > 1 && l->expert_mask ? plan_layer_shard_dim0_ep(l, n, n / ep, NULL)
                                                             : plan_layer_shard_dim0(l, n))) < 0)
            dim0 = 0;   /* unknown: per unit */
        if (dim0 && pf > 0 && (lfd = (double)plan_layer_frozen_shard_dim0(l, n)) < 0) dim0 = 0;
        if (!root_flat) { fz_flat += ceil(pf / (double)n); fz_d0 += lfd; }
        if (units > 0 && l->unit == 0) { z->root_frozen += pf; root_fz_d0 += lfd; }
        else if (units > 0) {
            fu += pf;
            fu_d0 += lfd;
            if (i + 1 == m->n_layers || m->layers[i + 1].unit != l->unit) {
                if (root_flat) { fz_flat += ceil(fu / (double)n); fz_d0 += fu_d0; }
                fu = fu_d0 = 0;
            }
        }
        z->psi += pu;
        if (pu > z->largest_any) z->largest_any = pu;
        if (!root_flat) { flat += lf; d0 += ld; }   /* each layer on its own (ZeRO-1/2, no units) */
        if (units == 0 && !m->root_only) {       /* every layer its own unit */
            if (pu > z->largest_unit) z->largest_unit = pu;
            continue;
        }
        if (l->unit == 0) {                      /* the root */
            z->root_unit += pu;
            root_d0 += ld;
            continue;
        }
        u_elems += pu;
        u_d0 += ld;
        if (i + 1 == m->n_layers || m->layers[i + 1].unit != l->unit) {   /* the unit's last layer */
            if (u_elems > z->largest_unit) z->largest_unit = u_elems;
            if (root_flat) { flat += ceil(u_elems / (double)n); d0 += u_d0; }
            u_elems = u_d0 = 0;
        }
    }
    z->dim0 = dim0 && m->n_layers > 0;
    z->root_shard = z->dim0 ? root_d0 : ceil(z->root_unit / (double)n);
    z->psi_shard = (z->dim0 ? d0 : flat) + (root_flat ? z->root_shard : 0);
    z->root_frozen_shard = z->dim0 ? root_fz_d0 : ceil(z->root_frozen / (double)n);
    z->frozen_shard = (z->dim0 ? fz_d0 : fz_flat) + (root_flat ? z->root_frozen_shard : 0);
    double p_local = (s->shard & SHARD_PARAM) ? z->psi_shard : z->psi;
    double g_local = (s->shard & SHARD_GRAD) ? z->psi_shard : z->psi;
    double o_local = (s->shard & SHARD_OPT) ? z->psi_shard : z->psi;
    z->params = p_local * p->param_bytes;
    z->grads = g_local * p->grad_bytes;
    z->optimizer = o_local * (p->master_bytes + o->states * p->state_bytes);
    if (plan_fsdp2_fp32_shards(t, sk)) {   /* FSDP2 MixedPrecisionPolicy: fp32 shards, no master */
        z->params = p_local * p->master_bytes;
        z->grads = g_local * 4.0;
        z->optimizer = o_local * o->states * p->state_bytes;
    }
    /* frozen parameters: no gradient, no optimizer state, and (DDP, ZeRO-1/2, which partition
       only what the optimizer steps: stage_1_and_2.py keeps the requires_grad ones) whole */
    double fz_elems = (double)plan_model_frozen(m);
    if (!(s->shard & SHARD_PARAM)) z->frozen = plan_model_frozen_bytes(m, t);
    else if (fz_elems > 0)   /* FSDP2: every rank's shard of them, at the bytes they are stored at (fp32 shards under
                                a MixedPrecisionPolicy) */
        z->frozen = z->frozen_shard * (plan_fsdp2_fp32_shards(t, sk) && t->ft.quant == QUANT_NONE ? p->master_bytes
                                       : plan_model_frozen_bytes(m, t) / fz_elems);   /* a base stored lower: as stored */
    z->params += z->frozen;
    offload_gpu_sizes(t, sk, z);   /* CPU offload: what leaves the GPU */
}
