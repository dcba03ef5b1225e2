/* plan_dim_offload.c — CPU offload as one dimension (plan_dim_offload.h): host memory, the host
 * copies' rule, the header line. docs/formulas.md "Offload and host memory". */
#include "plan_dim_offload.h"

#include <stdio.h>
#include <string.h>

#include "plan_step_internal.h"
#include "plan_util.h"

double plan_offload_cpu_bytes(const TrainSpec *t, int ds) {
    return 12.0 + 8.0 * plan_optimizer(t->optimizer)->states + (ds ? PLAN_DS_CPU_STEP_EXTRA_BYTES : 0);
}

void plan_offload_host(const ModelSpec *m, const TrainSpec *t, const ClusterSpec *c, StrategyKind sk,
                       OffloadHost *h) {
    MemSizes z;
    plan_memory_sizes(m, t, c, sk, &z);
    plan_offload_host_sized(m, t, c, sk, &z, h);
}

void plan_offload_host_sized(const ModelSpec *m, const TrainSpec *t, const ClusterSpec *c, StrategyKind sk,
                             const MemSizes *zs, OffloadHost *h) {
    memset(h, 0, sizeof(*h));
    const Strategy *s = plan_strategy(sk);
    const PrecisionSpec *p = plan_precision(t->precision);
    const OptimizerSpec *o = plan_optimizer(t->optimizer);
    OffloadKind off = plan_offload_cpu_step(t, sk) ? t->offload : OFFLOAD_NONE;
    int ds = plan_strategy_is_deepspeed(sk);
    double gpn = (double)c->gpus_per_node, K = (double)t->grad_accum, local = zs->psi_shard;
    if (!(s->shard & SHARD_OPT)) local = zs->psi;
    h->buffer_factor = ds ? PLAN_DS_HOST_BUFFER_FACTOR : 1.0;

    /* steady state on the host, per rank */
    if (off != OFFLOAD_NONE && ds) {
        /* DeepSpeed: fp32 partition of the weights, the fp32 optimizer states and the fp32
           gradient partition (16 B/param for Adam), + the 16-bit parameter partition under
           offload_param (18 B): estimate_zero3_model_states_mem_needs */
        h->host_per_gpu = local * (4.0 + 4.0 * o->states + 4.0);
        if (off == OFFLOAD_PARAM) h->host_per_gpu += local * p->param_bytes;
    } else if (off != OFFLOAD_NONE) {
        /* FSDP CPUOffload: the sharded parameters in their own dtype (the fp32 shard under
           MixedPrecision), the sharded gradients in that dtype, torch's optimizer states */
        double hb = p->master_bytes ? p->master_bytes : p->param_bytes;
        h->host_per_gpu = local * (hb + hb + (double)o->states * p->state_bytes);
    }
    h->steady_per_node = h->host_per_gpu * gpn * h->buffer_factor;

    /* load time: where the model is built in fp32 on the CPU before it moves */
    double psi = zs->psi;
    if (sk == STRAT_DDP) h->init_per_node = 4.0 * psi * gpn;                 /* every rank */
    else if (ds && s->buffers == BUF_DS_REDUCE) h->init_per_node = 4.0 * psi * gpn * h->buffer_factor;
    else if (ds) h->init_per_node = 4.0 * zs->largest_any * gpn * h->buffer_factor;   /* zero.Init */
    else h->init_per_node = 4.0 * psi;      /* FSDP: rank 0 loads, sync_module_states=True */
    h->per_node = h->steady_per_node > h->init_per_node ? h->steady_per_node : h->init_per_node;
    h->capacity = plan_cluster_host_mem(c);
    h->fits = h->per_node <= h->capacity;

    /* host <-> device traffic per GPU per optimizer step */
    if (off != OFFLOAD_NONE) {
        if (ds) {
            int every_micro = (s->shard & SHARD_GRAD) != 0;   /* ZeRO-2/3 reduce every micro-step */
            h->d2h_per_micro = every_micro;
            h->d2h_bytes = local * PLAN_DS_HOST_GRAD_BYTES * (every_micro ? K : 1);
            /* offload_optimizer: the updated 16-bit partition goes up once; offload_param: each
               partition comes up before its gather in forward and in backward */
            h->h2d_bytes = off == OFFLOAD_PARAM ? local * p->param_bytes * 2 * K : local * p->param_bytes;
        } else {
            double hb = p->master_bytes ? p->master_bytes : p->param_bytes;
            double fetches = s->buffers == BUF_FSDP_GRAD_OP ? 1 : 2;   /* GRAD_OP keeps units after forward */
            h->d2h_per_micro = 1;
            h->d2h_bytes = local * hb * K;
            h->h2d_bytes = local * hb * fetches * K;
        }
        double bw = c->gpu.host_bw * 1e9;
        h->d2h_s = bw > 0 ? h->d2h_bytes / bw : 0;
        h->h2d_s = bw > 0 ? h->h2d_bytes / bw : 0;
        /* the CPU step is bound by the node's DRAM bandwidth, shared by its ranks */
        double rate = c->gpu.host_mem_bw * 1e9 * PLAN_CPU_ADAM_BW_FRAC / plan_offload_cpu_bytes(t, ds);
        h->cpu_step_s = rate > 0 ? local * gpn / rate : 0;
        if (!ds) h->cpu_step_s *= PLAN_TORCH_CPU_ADAM_SLOWDOWN;
    }
}

/* CPU offload's host traffic: under param offload each layer's shard comes up
   before its gathers and its gradient shard goes down after its reduction; under optimizer
   offload the gradient copy overlaps backward and the updated parameters come up after the CPU
   step. docs/formulas.md "Offload and host memory". */
void rule_host_copies(const StepCtx *x, Step *st) {
    const OffloadHost h = x->host;
    int param = x->t->offload == OFFLOAD_PARAM;
    double K = (double)(x->t->grad_accum > 0 ? x->t->grad_accum : 1);
    double fetches = x->s->buffers == BUF_FSDP_GRAD_OP ? 1 : 2;   /* GRAD_OP keeps units after forward */
    if (h.d2h_bytes > 0) {
        StepXfer *e = step_xfer(st, RULE_HOST_COPIES, XFER_D2H, pt(x, PT_BWD, 0));
        if (e) {
            e->purpose = PURPOSE_HOST_GRADS;
            e->phase = PHASE_BACKWARD;
            e->sched = param ? SCHED_HOST_SPREAD : SCHED_HOST_OVERLAP;
            e->payload = h.d2h_bytes;
            e->seconds = h.d2h_s;
            e->count = param ? K : h.d2h_per_micro ? K : 1;   /* pieces the time is split in */
        }
    }
    if (h.h2d_bytes > 0) {
        StepXfer *e = step_xfer(st, RULE_HOST_COPIES, XFER_H2D, pt(x, param ? PT_FWD : PT_STEP, 0));
        if (e) {
            e->purpose = param ? PURPOSE_HOST_PARAMS : PURPOSE_HOST_UPDATED;
            e->phase = param ? PHASE_FORWARD : PHASE_STEP;
            e->sched = param ? SCHED_HOST_SPREAD : SCHED_HOST_AFTER_STEP;
            e->payload = h.h2d_bytes;
            e->seconds = h.h2d_s;
            e->count = param ? fetches * K : 1;
            e->wait = (int)fetches;   /* spread: gathered before forward (1) and backward (2) */
        }
    }
}

/* ---- the dimension's row ---- */

static int offload_on(const ModelSpec *m, const TrainSpec *t) { (void)m; return t->offload != OFFLOAD_NONE; }

static void offload_header(FILE *f, PlanHeaderSlot slot, const ModelSpec *m, const TrainSpec *t, const ClusterSpec *c,
                           const struct Step *const *rows, int n_rows) {
    (void)m; (void)rows; (void)n_rows;
    if (slot != HEADER_AFTER_TRAIN || t->offload == OFFLOAD_NONE) return;
    char a[32];
    double bw = c->gpu.host_mem_bw * PLAN_CPU_ADAM_BW_FRAC;
    fprintf(f, "# offload: %s to host memory (%s per node, host link %.0f GB/s per GPU per direction, "
            "CPU Adam %.1fe9 parameters/s per node at %.0f%% of %.0f GB/s DRAM, DeepSpeed's whole CPU step "
            "%.1fe9; PyTorch's CPU step %.0fx slower)\n",
            t->offload == OFFLOAD_PARAM ? "parameters, gradients and optimizer state" : "optimizer state and master weights",
            plan_fmt_bytes(plan_cluster_host_mem(c), a, sizeof(a)), c->gpu.host_bw, bw / plan_offload_cpu_bytes(t, 0),
            PLAN_CPU_ADAM_BW_FRAC * 100, c->gpu.host_mem_bw, bw / plan_offload_cpu_bytes(t, 1),
            PLAN_TORCH_CPU_ADAM_SLOWDOWN);
}

const PlanDim plan_dim_offload = {
    .name = "offload",
    .not_planned = "CPU offload does not apply to this setup",
    .on = offload_on,
    .rule = rule_host_copies,
    .header = offload_header,
};
