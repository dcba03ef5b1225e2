/* plan_sim.c — see plan_sim.h. Times in seconds. */
#include "plan_sim.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "plan_comm.h"
#include "plan_deepspeed.h"
#include "plan_fsdp.h"
#include "plan_offload.h"

static int is_transformer(const ModelSpec *m) {
    return m->arch == ARCH_DECODER || m->arch == ARCH_ENCODER || m->arch == ARCH_ENC_DEC;
}

double plan_attn_keys_per_query(const TrainSpec *t, double s) {
    if (t->impl != IMPL_ENGINE || s <= 0) return s;
    double sum = 0;   /* query rows [r0, r1) see keys 0 .. r1-1 */
    for (double r0 = 0; r0 < s; r0 += PLAN_ENGINE_ATT_BLOCK) {
        double r1 = fmin(r0 + PLAN_ENGINE_ATT_BLOCK, s);
        sum += (r1 - r0) * r1;
    }
    return sum / s;
}

static double seq_of(const ModelSpec *m, const TrainSpec *t) {
    return (double)(t->seq > 0 ? t->seq : (m->max_seq > 0 ? m->max_seq : 1));
}

double plan_layer_fwd_flops(const ModelSpec *m, int i, const TrainSpec *t) {
    const LayerSpec *l = &m->layers[i];
    double b = (double)t->micro_batch;
    double s = seq_of(m, t);
    if (l->fwd_flops > 0) return l->fwd_flops * b * plan_cnn_area_scale(m, t->seq);   /* CNN, per sample */
    if (!is_transformer(m)) return 2.0 * (double)l->params * b * s;
    double h = (double)m->d_model, attn = (double)m->n_head * (double)m->d_head;
    switch (l->kind) {
    /* 2 FLOPs per weight per token, + QK^T and AV: 2 x 2 x keys x d per token (PyTorch: every
       key, the mask applied after; the engine: the keys its causal blocks compute) */
    case LAYER_BLOCK: return b * s * (2.0 * (double)l->params + 4.0 * plan_attn_keys_per_query(t, s) * attn);
    case LAYER_HEAD: return b * s * 2.0 * h * (double)m->vocab + 2.0 * (double)l->params * b * s;
    case LAYER_LINEAR: return 2.0 * (double)l->params * b;
    default: return 0;                                         /* lookups, norms: memory-bound */
    }
}

/* Elements of a transformer block's weight matrices and norms; the rest of its parameters are
   the linear layers' biases, one element per output feature of a biased linear. */
static double block_bias_elems(const ModelSpec *m, const LayerSpec *l) {
    double h = (double)m->d_model, dh = (double)m->d_head, f = (double)m->d_ff;
    double q = (double)m->n_head * dh, kv = (double)(m->n_kv_head > 0 ? m->n_kv_head : m->n_head) * dh;
    double mats = h * (q + 2 * kv) + q * h + (m->mlp == MLP_SWIGLU ? 3 : 2) * h * f;
    double norms = (m->norm == NORM_RMSNORM ? 2 : 4) * h;
    double rest = (double)l->params - mats - norms;
    return rest > 0 ? rest : 0;
}

void plan_layer_mem_bytes(const ModelSpec *m, int i, const TrainSpec *t, double *fwd, double *bwd) {
    *fwd = *bwd = 0;
    const LayerSpec *l = &m->layers[i];
    if (!is_transformer(m)) return;   /* CNN and generic layers: FLOPs only */
    const PrecisionSpec *p = plan_precision(t->precision);
    int eng = t->impl == IMPL_ENGINE;
    double X = eng ? 4 : p->act_bytes;   /* the engine runs in fp32 */
    double b = (double)t->micro_batch, s = seq_of(m, t), n = b * s;   /* tokens */
    double h = (double)m->d_model, dh = (double)m->d_head, f = (double)m->d_ff, V = (double)m->vocab;
    double q = (double)m->n_head * dh, kv = (double)(m->n_kv_head > 0 ? m->n_kv_head : m->n_head) * dh;
    double fe = 0, be = 0;   /* elements per token */
    switch (l->kind) {
    case LAYER_BLOCK: {
        int gated = m->mlp == MLP_SWIGLU;
        double bias = block_bias_elems(m, l);
        double scores = t->attn == ATTN_SDPA ? 0 : b * (double)m->n_head * s * s / n;   /* per token */
        /* forward: two norms (read x, write y), softmax over the scores (read, write), the MLP
           activation (read, write; SwiGLU reads gate and up), two residual adds (read 2, write 1) */
        fe = 2 * (2 * h) + 2 * scores + (gated ? 3 : 2) * f + 2 * (3 * h);
        /* backward: norms (read dy, x; write dx), softmax (read p, dp; write ds), activation
           (read x, dy; write dx; SwiGLU: read gate, up, dy; write both), the bias gradients (read
           dy of each biased linear) */
        be = 2 * (3 * h) + 3 * scores + (gated ? 5 : 3) * f + bias;
        if (eng)   /* the engine's own passes: bias rows copied into each biased output before its GEMM,
                      gradients accumulated in place (norms, GELU: +1 read), scratch zeroed before
                      accumulation (dfch_gelu, dfch, 3 x dbtc, dqkv) */
            fe += bias, be += 2 * h + f + (2 * f + 3 * h + q + 2 * kv);
        else       /* autograd sums the two branches into the residual stream's gradient */
            be += 2 * (3 * h);
        break;
    }
    case LAYER_NORM: fe = 2 * h; be = 3 * h + (eng ? h : 0); break;
    case LAYER_EMBED:   /* gather token rows (+ positions), write; backward scatter-adds */
        fe = 3 * h; be = 5 * h; break;
    case LAYER_HEAD:
        if (m->headless) break;
        /* softmax + cross-entropy over the vocabulary. PyTorch: read logits, write the
           log-probabilities; backward: read them, write dlogits. The engine's fused LM head
           (kern_lmhead_ce_*_fast): forward reads each chunk of logits its GEMM just wrote for the
           log-sum-exp; backward rewrites the logits as their gradient in place (read, write) */
        fe = eng ? V : 2 * V; be = 2 * V;
        break;
    default: break;
    }
    *fwd = fe * n * X;
    *bwd = be * n * X;
}

typedef struct {
    SimResult *r;
    int record;
    int oom;
} Rec;

static void rec_op(Rec *rc, const char *name, const char *layer, SimLane lane, double start,
                   double dur, double bytes) {
    if (!rc->record || dur <= 0) return;
    SimResult *r = rc->r;
    if (r->n_ops == r->cap_ops) {
        int cap = r->cap_ops ? 2 * r->cap_ops : 256;
        SimOp *p = realloc(r->ops, (size_t)cap * sizeof(*p));
        if (!p) { rc->oom = 1; return; }
        r->ops = p;
        r->cap_ops = cap;
    }
    SimOp *o = &r->ops[r->n_ops++];
    snprintf(o->name, sizeof(o->name), "%s %s", name, layer);
    o->lane = lane;
    o->start = start;
    o->dur = dur;
    o->bytes = bytes;
}

/* The communication stream: FIFO, one collective at a time. With a steal factor (CPU ranks)
 * its busy intervals are kept, so that compute overlapping them can be slowed. */
typedef struct {
    double free_at, busy;
    double *iv;          /* [start, end) pairs in issue order (only when stealing) */
    int n_iv, cap_iv, first;
    int keep, oom;
} Stream;

static double comm_issue(Stream *cs, Rec *rc, double issue, double dur, const char *what,
                         const char *layer, double bytes) {
    double start = fmax(issue, cs->free_at);
    cs->free_at = start + dur;
    cs->busy += dur;
    if (cs->keep && dur > 0) {
        if (cs->n_iv == cs->cap_iv) {
            int cap = cs->cap_iv ? 2 * cs->cap_iv : 64;
            double *q = realloc(cs->iv, (size_t)cap * 2 * sizeof(*q));
            if (!q) cs->oom = 1;
            else { cs->iv = q; cs->cap_iv = cap; }
        }
        if (cs->n_iv < cs->cap_iv) {
            cs->iv[2 * cs->n_iv] = start;
            cs->iv[2 * cs->n_iv + 1] = start + dur;
            cs->n_iv++;
        }
    }
    rec_op(rc, what, layer, LANE_COMM, start, dur, bytes);
    return cs->free_at;
}

/* A compute op of dur seconds from t: its duration, stretched by steal x the collective time it
 * overlaps (compute only moves forward, so intervals that ended before t are skipped for good).
 * Without steal it is dur itself, so compute sums do not depend on where the op starts. */
static double compute_dur(Stream *cs, double steal, double t, double dur) {
    if (!cs->keep || steal <= 0) return dur;
    double end = t + dur, ov = 0;
    while (cs->first < cs->n_iv && cs->iv[2 * cs->first + 1] <= t) cs->first++;
    for (int k = cs->first; k < cs->n_iv && cs->iv[2 * k] < end; k++)
        ov += fmin(end, cs->iv[2 * k + 1]) - fmax(t, cs->iv[2 * k]);
    return dur + steal * ov;
}

/* Everything of a setup that does not depend on the micro-batch or the accumulation, per
 * layer, so a search over micro-batches re-runs only additions. Times in seconds. */
struct SimPrep {
    const ModelSpec *m;
    TrainSpec t;
    const ClusterSpec *c;
    StrategyKind kind;
    const Strategy *s;
    MemSizes z;
    double rate;
    int L;
    double *f1;          /* forward seconds per sample */
    double *b1;          /* backward seconds per sample (2 x the FLOPs, 3 x with recomputation) */
    double *ag_fwd, *ag_bwd, *rs, *ar_h;   /* per-layer collective seconds (0 = none) */
    double *bn_ag, *bn_ar;
    double *gbytes;      /* gradient bytes of the layer (bucket filling) */
    double *bx;          /* the engine's buffer passes after the layer's backward, per reducing micro-step */
    double bx_end;       /* ... once the micro-step's collectives are done */
    double zero_s;       /* ... zeroing the gradients before the step's first forward */
    double *ag_pay, *rs_pay, *arh_pay, *bnag_pay, *bnar_pay;
    double bcast_s, bcast_pay, root_ag_s, root_ag_pay, root_rs_s, root_rs_pay, root_ar_s, root_ar_pay;
    double opt_s, ds_ag_s, ds_ag_pay;
    int root_again;      /* ZeRO-3 (memplan's engine): the root unit is gathered again for backward */
    double steal;        /* compute seconds lost per second of overlapping collective (CPU ranks) */
    double issue_s;      /* compute seconds per collective issued to overlap (CPU ranks) */
    double off_d2h_s;    /* CPU offload of optimizer state: gradient copy per copy, overlapping backward */
    double off_copies;   /* gradient copies per optimizer step (K or 1) */
    int ddp, ds, reduce_every_micro;
    int rs_last_only;    /* fsdp-* with --fsdp-grad-sync last: reduce-scatters in the last micro-step only */
    int ar_buckets;      /* buckets are all-reduced: DDP, and DeepSpeed ZeRO-1/2 as it runs */
    double ddp_first, ddp_cap, ds_cap;
    double tokens_per_sample;
    double flops_per_sample;
};

/* memplan's engine moves whole gradient and parameter buffers between its steps' kernels
 * (exec/exec_strategy.c), fp32, each pass costing its bytes read + written at the elementwise
 * rate; n ranks, P_i the layer's parameters, S the padded shard (docs/formulas.md, "The
 * engine's buffer passes"):
 *   every strategy: the gradients zeroed before the step (4Ψ; where they are sharded, 4S);
 *   DDP, in a reducing micro-step: each gradient copied into its bucket (8 P_i), and the
 *     averaged buckets back to the gradients at the end of backward (8Ψ);
 *   ZeRO-1/2: each gradient copied into its rank blocks of the reduce bucket (8 P_i), the
 *     reduced block copied (ZeRO-1, 8 P_i/n) or added (ZeRO-2, 12 P_i/n) into this rank's
 *     gradients; ZeRO-2 also allocates each gradient zeroed in backward (4 P_i); the step copies
 *     the updated shard into the gather buffer (8S) and the gathered parameters out (8Ψ);
 *   ZeRO-3: each gradient region zeroed before its backward (4 P_i), the reduced shard added to
 *     the gradient shard at the end of backward (12S).
 * ZeRO-2/3 reduce in every micro-step, DDP and ZeRO-1 in the last one only (no_sync). */
static void engine_passes(SimPrep *P, double mem_bw) {
    double psi = P->z.psi, S = P->z.psi_shard, n = (double)P->z.n;
    StrategyKind k = P->kind;
    int N = P->c->gpus;
    P->zero_s = 4 * (N > 1 && (P->s->shard & SHARD_GRAD) ? S : psi) / mem_bw;
    if (N <= 1 || k > STRAT_ZERO3) return;
    for (int i = 0; i < P->L; i++) {
        double pi = (double)P->m->layers[i].params;
        double bytes = k == STRAT_DDP ? 8 * pi
                     : k == STRAT_ZERO1 ? 8 * pi + 8 * pi / n
                     : k == STRAT_ZERO2 ? 4 * pi + 8 * pi + 12 * pi / n
                     : 4 * pi;
        P->bx[i] = bytes / mem_bw;
    }
    P->bx_end = (k == STRAT_DDP ? 8 * psi : k == STRAT_ZERO3 ? 12 * S : 0) / mem_bw;
    if (k == STRAT_ZERO1 || k == STRAT_ZERO2) P->opt_s += (8 * S + 8 * psi) / mem_bw;
}

SimPrep *plan_sim_prepare(const ModelSpec *m, const TrainSpec *t, const ClusterSpec *c, StrategyKind k) {
    SimPrep *P = calloc(1, sizeof(*P));
    if (!P) return NULL;
    int L = m->n_layers;
    double *block = calloc((size_t)(15 * (L > 0 ? L : 1)), sizeof(double));
    if (!block) { free(P); return NULL; }
    P->f1 = block;
    P->b1 = block + L; P->ag_fwd = block + 2 * L; P->ag_bwd = block + 3 * L;
    P->rs = block + 4 * L; P->ar_h = block + 5 * L; P->bn_ag = block + 6 * L; P->bn_ar = block + 7 * L;
    P->gbytes = block + 8 * L; P->ag_pay = block + 9 * L; P->rs_pay = block + 10 * L;
    P->arh_pay = block + 11 * L; P->bnag_pay = block + 12 * L; P->bnar_pay = block + 13 * L;
    P->bx = block + 14 * L;
    P->m = m; P->t = *t; P->c = c; P->kind = k; P->s = plan_strategy(k); P->L = L;
    const PrecisionSpec *p = plan_precision(t->precision);
    plan_memory_sizes(m, t, c, k, &P->z);
    P->rate = c->gpu.peak_tflops[p->peak] * 1e12 * c->mfu;
    if (P->rate <= 0) P->rate = c->gpu.peak_tflops[PEAK_FP32] * 1e12 * c->mfu;
    double mem_bw = c->gpu.mem_bw > 0 ? c->gpu.mem_bw * 1e9 : INFINITY;   /* elementwise passes */
    P->steal = c->comm_steal > 0 ? c->comm_steal : 0;
    P->issue_s = c->coll_issue_s > 0 ? c->coll_issue_s : 0;
    int64_t N = c->gpus, n = P->z.n;
    int multi = plan_cluster_nodes(c) > 1, crosses = P->s->group_node ? 0 : multi;
    int sharded = N > 1 && (P->s->shard & SHARD_PARAM);
    int stage3 = P->s->buffers == BUF_DS_STAGE3;
    double pb = p->param_bytes, gb = p->grad_bytes;
    TrainSpec t1 = *t;
    t1.micro_batch = 1;
    int ds_py = plan_strategy_is_deepspeed(k) && t->impl == IMPL_PYTORCH;
    double later = P->z.psi;   /* elements after layer i */
    for (int i = 0; i < L; i++) {
        const LayerSpec *l = &m->layers[i];
        later -= (double)l->params;
        double fl = plan_layer_fwd_flops(m, i, &t1), fb, bb;
        plan_layer_mem_bytes(m, i, &t1, &fb, &bb);
        int recompute = t->act_ckpt == CKPT_FULL && l->kind == LAYER_BLOCK;
        P->f1[i] = fl / P->rate + fb / mem_bw;
        P->b1[i] = (2 + recompute) * fl / P->rate + (bb + (recompute ? fb : 0)) / mem_bw;
        P->flops_per_sample += 3 * fl;
        P->gbytes[i] = (double)l->params * gb;
        int root = P->z.root_unit > 0 && l->unit == 0;   /* in the root unit (LayerSpec.unit) */
        if (sharded && l->params > 0 && (!root || (stage3 && ds_py))) {
            P->ag_pay[i] = (double)l->params * pb;
            if (stage3 && ds_py)   /* DeepSpeed gathers the non-persistent tensors (plan_comm.c) */
                P->ag_pay[i] = plan_ds3_gathered_elems(l, n) * pb;
            if (P->ag_pay[i] > 0) P->ag_fwd[i] = plan_coll_seconds(c, PCOLL_ALL_GATHER, P->ag_pay[i], n, crosses);
            if (P->s->buffers != BUF_FSDP_GRAD_OP) P->ag_bwd[i] = P->ag_fwd[i];
            if (stage3 && ds_py && plan_ds3_kept(later)) P->ag_bwd[i] = 0;   /* still gathered */
            P->rs_pay[i] = (double)l->params * gb;
            P->rs[i] = plan_coll_seconds(c, PCOLL_REDUCE_SCATTER, P->rs_pay[i], n, crosses);
            if (P->s->group_node && N > n) {
                P->arh_pay[i] = ceil((double)l->params / n) * gb;
                P->ar_h[i] = plan_coll_seconds(c, PCOLL_ALL_REDUCE, P->arh_pay[i], (N + n - 1) / n, 1);
            }
        }
        if (t->syncbn && N > 1 && l->bn_channels > 0) {
            P->bnag_pay[i] = (2.0 * (double)l->bn_channels + 1) * 4 * (double)N;
            P->bn_ag[i] = plan_coll_seconds(c, PCOLL_ALL_GATHER, P->bnag_pay[i], N, multi);
            P->bnar_pay[i] = 2.0 * (double)l->bn_channels * 4;
            P->bn_ar[i] = plan_coll_seconds(c, PCOLL_ALL_REDUCE, P->bnar_pay[i], N, multi);
        }
    }
    P->ddp = P->s->buffers == BUF_DDP_BUCKETS && N > 1;
    P->ds = P->s->buffers == BUF_DS_REDUCE && N > 1;
    P->reduce_every_micro = P->ds && (P->s->shard & SHARD_GRAD);
    P->rs_last_only = plan_fsdp_reduce_last_only(t, k);
    P->ar_buckets = P->ddp || (P->ds && ds_py);
    P->ddp_first = PLAN_DDP_FIRST_BUCKET;
    P->ddp_cap = PLAN_DDP_BUCKET;
    P->ds_cap = PLAN_DS_REDUCE_BUCKET * gb;
    if (P->ddp && plan_model_buffers(m) > 0) {
        P->bcast_pay = t->impl == IMPL_ENGINE ? (double)plan_model_buffers(m) * 4 : plan_model_buffer_bytes(m, NULL);
        P->bcast_s = plan_coll_seconds(c, PCOLL_BROADCAST, P->bcast_pay, N, multi);
    }
    /* the root unit (layers outside blocks) as one flat unit: FSDP gathers it once and keeps it
       through backward; the engine's ZeRO-3 releases it after forward and gathers it again at the
       start of backward (exec/exec_strategy.c: the root brackets each pass) */
    if (sharded && !(stage3 && ds_py) && P->z.root_unit > 0) {
        P->root_again = stage3;
        P->root_ag_pay = P->z.root_unit * pb;
        P->root_ag_s = plan_coll_seconds(c, PCOLL_ALL_GATHER, P->root_ag_pay, n, crosses);
        P->root_rs_pay = P->z.root_unit * gb;
        P->root_rs_s = plan_coll_seconds(c, PCOLL_REDUCE_SCATTER, P->root_rs_pay, n, crosses);
        if (P->s->group_node && N > n) {
            P->root_ar_pay = ceil(P->z.root_unit / n) * gb;
            P->root_ar_s = plan_coll_seconds(c, PCOLL_ALL_REDUCE, P->root_ar_pay, (N + n - 1) / n, 1);
        }
    }
    /* optimizer step: memory-bound over the local optimizer elements */
    const OptimizerSpec *o = plan_optimizer(t->optimizer);
    double o_local = (P->s->shard & SHARD_OPT) ? P->z.psi_shard : P->z.psi;
    double bytes = o_local * (2.0 * (p->param_bytes + p->master_bytes) + p->grad_bytes +
                              2.0 * o->states * p->state_bytes);
    P->opt_s = bytes / ((c->opt_bw > 0 ? c->opt_bw : c->gpu.mem_bw) * 1e9);
    if (P->ds) {     /* ZeRO-1/2 gather the updated parameters after the step */
        P->ds_ag_pay = P->z.psi * pb;
        P->ds_ag_s = plan_coll_seconds(c, PCOLL_ALL_GATHER, P->ds_ag_pay, N, multi);
    }
    if (ds_py && N > 1) {   /* as DeepSpeed runs (plan_comm.c): the padded partitions; ZeRO-3
                               all-gathers each persistent tensor's partition, one at a time */
        DsSizes ds;
        plan_ds_sizes(m, n, &ds);
        if (P->ds) {
            P->ds_ag_pay = (double)n * ds.part * pb;
            P->ds_ag_s = plan_coll_seconds(c, PCOLL_ALL_GATHER, P->ds_ag_pay, N, multi);
        } else if (stage3 && ds.persist_count > 0) {
            P->ds_ag_pay = ds.persist_padded * pb;
            P->ds_ag_s = ds.persist_count * plan_coll_seconds(c, PCOLL_ALL_GATHER,
                                                              P->ds_ag_pay / ds.persist_count, n, crosses);
        }
    }
    /* CPU offload: the step runs on the CPU; under param offload each layer's shard comes up
       from the host before its gather and its gradient shard goes down after its reduction
       (serial on the communication stream); with the optimizer state alone, the gradient copy
       overlaps backward and the updated parameters come up after the CPU step */
    OffloadHost oh;
    plan_offload_host(m, t, c, k, &oh);
    if (oh.cpu_step_s > 0) {
        double K = (double)(t->grad_accum > 0 ? t->grad_accum : 1);
        if (t->offload == OFFLOAD_PARAM) {
            double fetches = P->s->buffers == BUF_FSDP_GRAD_OP ? 1 : 2;
            for (int i = 0; i < L && P->z.psi > 0; i++) {
                double share = (double)m->layers[i].params / P->z.psi;
                P->ag_fwd[i] += oh.h2d_s * share / (fetches * K);
                if (fetches > 1) P->ag_bwd[i] += oh.h2d_s * share / (fetches * K);
                P->rs[i] += oh.d2h_s * share / K;
            }
            P->opt_s = oh.cpu_step_s;
        } else {
            P->off_copies = oh.d2h_per_micro ? K : 1;
            P->off_d2h_s = oh.d2h_s / P->off_copies;
            P->opt_s = oh.cpu_step_s + oh.h2d_s;
        }
    }
    if (t->impl == IMPL_ENGINE) engine_passes(P, mem_bw);
    P->tokens_per_sample = is_transformer(m) ? (double)(t->seq > 0 ? t->seq : m->max_seq) : 1;
    return P;
}

void plan_sim_prep_free(SimPrep *P) {
    if (!P) return;
    free(P->f1);
    free(P);
}

typedef struct {
    const SimPrep *P;
    Rec *rc;
    double *fwd_end, *bwd_end;
} Run;

/* What one micro-step took: phase walls (compute and the waits inside) and their compute. */
typedef struct {
    double fwd, bwd;          /* wall seconds */
    double fwd_c, bwd_c;      /* compute seconds (stretched by steal) */
} Micro;

/* A collective issued to run behind compute costs the issuing rank's compute this much (CPU
 * ranks: the hand-over to the progress thread and its wake-up; 0 unless measured). */
static double issue_cost(const SimPrep *P, double t, double *acc) {
    *acc += P->issue_s;
    return t + P->issue_s;
}

/* A compute op on the compute stream from t: recorded, counted, its end returned. */
static double compute(Run *R, Stream *cs, const char *what, const char *layer, double t, double dur, double *acc) {
    double d = compute_dur(cs, R->P->steal, t, dur);
    rec_op(R->rc, what, layer, LANE_COMPUTE, t, d, 0);
    *acc += d;
    return t + d;
}

/* One micro-step from t0; sync = gradients are reduced this micro-step. Returns when all its
 * compute and communication are done (the engine waits for them at the end of backward). */
static double micro_step(Run *R, Stream *cs, double t0, double b, int sync, Micro *mo) {
    const SimPrep *P = R->P;
    const ModelSpec *m = P->m;
    Rec *rc = R->rc;
    int L = P->L;
    double t = t0;
    /* ---- forward ---- */
    if (P->bcast_s > 0) t = comm_issue(cs, rc, t, P->bcast_s, "broadcast", "buffers", P->bcast_pay);
    double root_ready = t;
    if (P->root_ag_s > 0) root_ready = comm_issue(cs, rc, t, P->root_ag_s, "all_gather", "root", P->root_ag_pay);
    double issue = t;        /* unit i's gather is issued when unit i-1's compute starts */
    for (int i = 0; i < L; i++) {
        double ready = i == 0 ? root_ready : t;
        if (P->ag_fwd[i] > 0) {
            ready = comm_issue(cs, rc, issue, P->ag_fwd[i], "all_gather", m->layers[i].name, P->ag_pay[i]);
            t = issue_cost(P, t, &mo->fwd_c);
        }
        if (ready > t) t = ready;
        if (root_ready > t) t = root_ready;
        issue = t;
        t = compute(R, cs, "fwd", m->layers[i].name, t, b * P->f1[i], &mo->fwd_c);
        if (P->bn_ag[i] > 0) t = comm_issue(cs, rc, t, P->bn_ag[i], "all_gather", "syncbn", P->bnag_pay[i]);
        if (R->fwd_end) R->fwd_end[i] = t;
    }
    mo->fwd += t - t0;
    double t_bwd = t;
    /* ---- backward ---- */
    if (P->root_again) t = comm_issue(cs, rc, t, P->root_ag_s, "all_gather", "root", P->root_ag_pay);
    int buckets = (P->ddp && sync) || (P->ds && (P->reduce_every_micro || sync));
    int reduces = sync || P->reduce_every_micro || P->kind == STRAT_ZERO3;   /* the engine's passes */
    double bucket = 0, cap = P->ddp ? P->ddp_first : P->ds_cap;
    issue = t;
    for (int i = L - 1; i >= 0; i--) {
        const char *name = m->layers[i].name;
        if (P->ag_bwd[i] > 0) {
            double ready = comm_issue(cs, rc, issue, P->ag_bwd[i], "all_gather", name, P->ag_pay[i]);
            t = issue_cost(P, t, &mo->bwd_c);
            if (ready > t) t = ready;
        }
        issue = t;
        t = compute(R, cs, "bwd", name, t, b * P->b1[i], &mo->bwd_c);
        if (P->bx[i] > 0 && reduces) t = compute(R, cs, "copy", name, t, P->bx[i], &mo->bwd_c);
        if (P->bn_ar[i] > 0) t = comm_issue(cs, rc, t, P->bn_ar[i], "all_reduce", "syncbn", P->bnar_pay[i]);
        if (R->bwd_end) R->bwd_end[i] = t;
        if (P->rs[i] > 0 && (sync || !P->rs_last_only)) {
            comm_issue(cs, rc, t, P->rs[i], "reduce_scatter", name, P->rs_pay[i]);
            if (P->ar_h[i] > 0) comm_issue(cs, rc, t, P->ar_h[i], "all_reduce", name, P->arh_pay[i]);
            t = issue_cost(P, t, &mo->bwd_c);
        }
        if (buckets && P->gbytes[i] > 0) {      /* buckets fill in gradient-ready order */
            bucket += P->gbytes[i];
            if (bucket >= cap) {
                PlanCollOp op = P->ar_buckets ? PCOLL_ALL_REDUCE : PCOLL_REDUCE_SCATTER;
                comm_issue(cs, rc, t, plan_coll_seconds(P->c, op, bucket, P->c->gpus, plan_cluster_nodes(P->c) > 1),
                           P->ar_buckets ? "all_reduce" : "reduce_scatter", "bucket", bucket);
                t = issue_cost(P, t, &mo->bwd_c);
                bucket = 0;
                if (P->ddp) cap = P->ddp_cap;
            }
        }
    }
    if (P->root_rs_s > 0 && (sync || !P->rs_last_only)) {
        comm_issue(cs, rc, t, P->root_rs_s, "reduce_scatter", "root", P->root_rs_pay);
        if (P->root_ar_s > 0) comm_issue(cs, rc, t, P->root_ar_s, "all_reduce", "root", P->root_ar_pay);
        t = issue_cost(P, t, &mo->bwd_c);
    }
    if (buckets && bucket > 0) {
        PlanCollOp op = P->ar_buckets ? PCOLL_ALL_REDUCE : PCOLL_REDUCE_SCATTER;
        comm_issue(cs, rc, t, plan_coll_seconds(P->c, op, bucket, P->c->gpus, plan_cluster_nodes(P->c) > 1),
                   P->ar_buckets ? "all_reduce" : "reduce_scatter", "bucket", bucket);
        t = issue_cost(P, t, &mo->bwd_c);
    }
    double end = t > cs->free_at ? t : cs->free_at;
    if (P->bx_end > 0 && reduces) end = compute(R, cs, "copy", "grads", end, P->bx_end, &mo->bwd_c);
    mo->bwd += end - t_bwd;
    return end;
}

typedef struct {
    Run *R;
    SimResult *r;
    Rec *rc;
} MemCtx;

static void on_moment(void *ctx, PhaseKind ph, int layer, const double term[TERM_COUNT], double total) {
    MemCtx *mc = ctx;
    SimResult *r = mc->r;
    double t = ph == PHASE_FORWARD ? mc->R->fwd_end[layer]
             : ph == PHASE_BACKWARD ? mc->R->bwd_end[layer] : r->step_s;
    if (r->n_mem == r->cap_mem) {
        int cap = r->cap_mem ? 2 * r->cap_mem : 256;
        SimMem *p = realloc(r->mem, (size_t)cap * sizeof(*p));
        if (!p) { mc->rc->oom = 1; return; }
        r->mem = p;
        r->cap_mem = cap;
    }
    SimMem *s = &r->mem[r->n_mem++];
    s->t = t;
    memcpy(s->term, term, sizeof(s->term));
    s->total = total;
    if (total > r->mem_peak) r->mem_peak = total;
}

int plan_sim_run(const SimPrep *P, int64_t micro_batch, int64_t grad_accum, int record, SimResult *out) {
    memset(out, 0, sizeof(*out));
    Rec rc = {out, record, 0};
    Run R = {P, &rc, NULL, NULL};
    if (record) {
        R.fwd_end = calloc((size_t)(P->L > 0 ? P->L : 1), sizeof(double));
        R.bwd_end = calloc((size_t)(P->L > 0 ? P->L : 1), sizeof(double));
        if (!R.fwd_end || !R.bwd_end) { free(R.fwd_end); free(R.bwd_end); return -1; }
    }
    double b = (double)micro_batch, K = (double)grad_accum;
    Stream cs = {0};
    cs.keep = P->steal > 0;
    Micro mo = {0};
    double t_end = P->zero_s;   /* the engine's gradient zeroing (0 otherwise) */
    rec_op(&rc, "zero", "grads", LANE_COMPUTE, 0, P->zero_s, 0);
    if (grad_accum > 1) {   /* micro-steps without gradient sync are identical: one, scaled */
        Rec quiet = {out, 0, 0};
        Run Q = {P, &quiet, NULL, NULL};
        Stream cs1 = {0};
        cs1.keep = cs.keep;
        Micro m1 = {0};
        double t1 = micro_step(&Q, &cs1, 0, b, 0, &m1);
        t_end += t1 * (K - 1);
        mo.fwd = m1.fwd * (K - 1); mo.bwd = m1.bwd * (K - 1);
        mo.fwd_c = m1.fwd_c * (K - 1); mo.bwd_c = m1.bwd_c * (K - 1);
        cs.busy = cs1.busy * (K - 1);
        cs.free_at = t_end;
        if (cs1.oom) rc.oom = 1;
        free(cs1.iv);
    }
    t_end = micro_step(&R, &cs, t_end, b, 1, &mo);
    if (P->off_d2h_s > 0) {   /* gradient copies to the host: what backward does not hide */
        double bwd = 0;
        for (int i = 0; i < P->L; i++) bwd += b * P->b1[i];
        double exposed = P->off_d2h_s > bwd ? P->off_d2h_s - bwd : 0;
        rec_op(&rc, "copy_d2h", "grads", LANE_COMM, t_end, exposed, 0);
        t_end += exposed * P->off_copies;
        mo.bwd += exposed * P->off_copies;
    }
    double t_opt = t_end;
    rec_op(&rc, "optimizer", "step", LANE_COMPUTE, t_end, P->opt_s, 0);
    t_end += P->opt_s;
    if (P->ds_ag_s > 0) t_end = comm_issue(&cs, &rc, t_end, P->ds_ag_s, "all_gather", "params", P->ds_ag_pay);
    out->step_s = t_end;
    out->fwd_s = mo.fwd;
    out->bwd_s = mo.bwd;
    out->opt_s = t_end - t_opt;
    out->fwd_compute_s = mo.fwd_c;
    out->bwd_compute_s = mo.bwd_c;
    out->opt_compute_s = P->opt_s;
    out->zero_s = P->zero_s;
    out->compute_s = P->zero_s + mo.fwd_c + mo.bwd_c + P->opt_s;
    out->comm_s = cs.busy;
    out->exposed_comm_s = t_end > out->compute_s ? t_end - out->compute_s : 0;
    double samples = b * K * (double)P->c->gpus;
    out->tokens_per_s = t_end > 0 ? samples * P->tokens_per_sample / t_end : 0;
    out->flops_per_step = P->flops_per_sample * b * K;
    if (cs.oom) rc.oom = 1;
    free(cs.iv);
    if (record) {
        TrainSpec t = P->t;
        t.micro_batch = micro_batch;
        t.grad_accum = grad_accum;
        MemResult mr;
        MemCtx mc = {&R, out, &rc};
        plan_memory_walk(P->m, &t, P->c, P->kind, &mr, on_moment, &mc);
    }
    free(R.fwd_end);
    free(R.bwd_end);
    return rc.oom ? -1 : 0;
}

int plan_sim(const ModelSpec *m, const TrainSpec *t, const ClusterSpec *c, StrategyKind k,
             int record, SimResult *out) {
    SimPrep *P = plan_sim_prepare(m, t, c, k);
    if (!P) { memset(out, 0, sizeof(*out)); return -1; }
    int rc = plan_sim_run(P, t->micro_batch, t->grad_accum, record, out);
    plan_sim_prep_free(P);
    return rc;
}

void plan_sim_free(SimResult *r) {
    free(r->ops);
    free(r->mem);
    r->ops = NULL;
    r->mem = NULL;
    r->n_ops = r->n_mem = r->cap_ops = r->cap_mem = 0;
}
