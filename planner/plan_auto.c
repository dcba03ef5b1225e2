/* plan_auto.c — see plan_auto.h. */
#include "plan_auto.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "plan_util.h"

void plan_auto_defaults(AutoSpec *a) {
    memset(a, 0, sizeof(*a));
    a->bn_min_batch = 16;
    a->max_micro_batch = 1024;
    a->strategies = (1u << STRAT_COUNT) - 1;
}

static void say(AutoResult *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void say(AutoResult *r, const char *fmt, ...) {
    size_t n = strlen(r->explain);
    if (n + 2 >= sizeof(r->explain)) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(r->explain + n, sizeof(r->explain) - n, fmt, ap);
    va_end(ap);
}

static int fits(const ModelSpec *m, const TrainSpec *t, const ClusterSpec *c, StrategyKind k,
                MemResult *mr) {
    MemResult tmp;
    if (!mr) mr = &tmp;
    plan_memory(m, t, c, k, mr);
    return mr->fits;
}

typedef struct {
    int ok;
    TrainSpec t;
    double tps;
} Best;

/* Searches micro-batch, accumulation and checkpointing for strategy k. */
static Best search(const ModelSpec *m, const TrainSpec *base, const ClusterSpec *c, StrategyKind k,
                   const AutoSpec *a, long *cand, long *evaluated) {
    Best best = {0};
    for (int ck = 0; ck < CKPT_COUNT; ck++) {
        TrainSpec t = *base;
        t.act_ckpt = (CkptKind)ck;
        if (ck == CKPT_FULL && m->arch == ARCH_GENERIC) continue;   /* nothing to recompute */
        int64_t maxb = plan_max_micro_batch(m, &t, c, k, a->max_micro_batch);
        SimPrep *prep = maxb > 0 ? plan_sim_prepare(m, &t, c, k) : NULL;
        if (maxb > 0 && !prep) maxb = 0;       /* out of memory: skip, counted as considered */
        for (int64_t b = 1; b <= a->max_micro_batch; b++) {
            (*cand)++;
            if (b > maxb) continue;            /* known not to fit: the peak grows with b */
            t.micro_batch = b;
            if (a->global_batch > 0) {
                int64_t per = a->global_batch / c->gpus;
                if (a->global_batch % c->gpus || per % b) continue;
                t.grad_accum = per / b;
            }
            SimResult s;
            plan_sim_run(prep, b, t.grad_accum, 0, &s);
            (*evaluated)++;
            if (!best.ok || s.tokens_per_s > best.tps * (1 + 1e-9)) {
                best.ok = 1;
                best.t = t;
                best.tps = s.tokens_per_s;
            }
        }
        plan_sim_prep_free(prep);
    }
    return best;
}

/* The cheapest change that makes strategy k fit, in order of cost to the user. */
static void cheapest_fix(const ModelSpec *m, const TrainSpec *t0, const ClusterSpec *c0,
                         StrategyKind k, char *buf, size_t len) {
    TrainSpec t = *t0;
    ClusterSpec c = *c0;
    t.micro_batch = 1;
    if (k == STRAT_DDP) {
        t.grad_as_bucket_view = 1;
        if (fits(m, &t, &c, k, NULL)) { snprintf(buf, len, "would fit with --grad-as-bucket-view"); return; }
    }
    t.act_ckpt = CKPT_FULL;
    if (m->arch != ARCH_GENERIC && fits(m, &t, &c, k, NULL)) {
        snprintf(buf, len, "would fit with --act-ckpt full%s at micro-batch 1",
                 t.grad_as_bucket_view ? " --grad-as-bucket-view" : "");
        return;
    }
    if (plan_strategy(k)->shard) {
        for (int64_t n = c.gpus * 2; n <= 65536; n *= 2) {
            c.gpus = n;
            if (c.gpus_per_node > n) c.gpus_per_node = n;
            if (fits(m, &t, &c, k, NULL)) {
                snprintf(buf, len, "would fit on %lld GPUs (with --act-ckpt full)", (long long)n);
                return;
            }
        }
    }
    /* the smallest larger preset that supports the precision and fits */
    const GpuPreset *best = NULL;
    int best_ck = 0;
    c = *c0;
    for (int i = 0; i < plan_gpu_count(); i++) {
        const GpuPreset *g = plan_gpu_preset(i);
        if (g->mem_bytes <= c0->gpu.mem_bytes || (best && g->mem_bytes >= best->mem_bytes)) continue;
        if (g->peak_tflops[plan_precision(t0->precision)->peak] <= 0) continue;   /* no bf16 etc. */
        c.gpu = *g;
        for (int ck = 0; ck < CKPT_COUNT; ck++) {
            t.act_ckpt = (CkptKind)ck;
            if (fits(m, &t, &c, k, NULL)) { best = g; best_ck = ck; break; }
        }
    }
    if (best) {
        snprintf(buf, len, "would fit with %.2f GiB per GPU (e.g. %s)%s", best->mem_bytes / GIB, best->name,
                 best_ck == CKPT_FULL ? " and --act-ckpt full" : "");
        return;
    }
    snprintf(buf, len, "does not fit even with --act-ckpt full at micro-batch 1");
}

int plan_auto(const ModelSpec *m, const TrainSpec *t, const ClusterSpec *c, const AutoSpec *a,
              AutoResult *out) {
    memset(out, 0, sizeof(*out));
    TrainSpec base = *t;
    if (a->global_batch > 0) base.grad_accum = 1;
    /* 1. which strategies fit at all (micro-batch 1, with checkpointing if needed) */
    int fit_k[STRAT_COUNT] = {0};
    for (int k = 0; k < STRAT_COUNT; k++) {
        if (!(a->strategies & (1u << k))) continue;
        TrainSpec tt = base;
        tt.micro_batch = 1;
        if (a->global_batch > 0) {
            if (a->global_batch % c->gpus) continue;
            tt.grad_accum = a->global_batch / c->gpus;
        }
        fit_k[k] = fits(m, &tt, c, (StrategyKind)k, NULL);
        if (!fit_k[k] && m->arch != ARCH_GENERIC) {
            tt.act_ckpt = CKPT_FULL;
            fit_k[k] = fits(m, &tt, c, (StrategyKind)k, NULL);
        }
        out->candidates += 2;
    }
    /* 2. DDP when it fits, else the least-sharded (simplest) strategy that fits */
    int pick = -1;
    for (int k = 0; k < STRAT_COUNT; k++)
        if (fit_k[k] && (pick < 0 || plan_strategy((StrategyKind)k)->simplicity <
                                         plan_strategy((StrategyKind)pick)->simplicity))
            pick = k;
    char a1[32], a2[32], a3[32];
    if (pick < 0) {
        out->found = 0;
        if (a->global_batch > 0 && a->global_batch % c->gpus)
            say(out, "nothing fits: --global-batch %lld is not a multiple of %lld GPUs\n",
                (long long)a->global_batch, (long long)c->gpus);
        else
            say(out, "nothing fits on %lld x %s (%s each), even sharded with checkpointing at micro-batch 1\n",
                (long long)c->gpus, c->gpu.name, plan_fmt_bytes(c->gpu.mem_bytes, a1, sizeof(a1)));
    }
    /* 3. best micro-batch / accumulation / checkpointing for every strategy that fits: the pick
       gets its best setup, the others are listed as alternatives */
    Best bests[STRAT_COUNT];
    memset(bests, 0, sizeof(bests));
    for (int k = 0; k < STRAT_COUNT; k++)
        if (fit_k[k]) bests[k] = search(m, &base, c, (StrategyKind)k, a, &out->candidates, &out->evaluated);
    if (pick >= 0 && !bests[pick].ok) {   /* e.g. no micro-batch divides the global batch */
        say(out, "nothing fits: no micro-batch up to %lld divides the per-GPU batch %lld\n",
            (long long)a->max_micro_batch, (long long)(a->global_batch / c->gpus));
        pick = -1;
    }
    if (pick >= 0) {
        out->found = 1;
        out->strategy = (StrategyKind)pick;
        out->train = bests[pick].t;
        plan_memory(m, &out->train, c, out->strategy, &out->mem);
        plan_comm(m, &out->train, c, out->strategy, &out->comm);
        plan_sim(m, &out->train, c, out->strategy, 0, &out->time);
    }
    MemResult ddp_mem;
    TrainSpec t1 = base;
    t1.micro_batch = 1;
    plan_memory(m, &t1, c, STRAT_DDP, &ddp_mem);
    if (out->found) {
        const Strategy *s = plan_strategy(out->strategy);
        if (out->strategy == STRAT_DDP)
            say(out, "picked ddp: DDP fits (peak %s of %s, headroom %s): simplest, least traffic\n",
                plan_fmt_bytes(out->mem.peak, a1, sizeof(a1)), plan_fmt_bytes(c->gpu.mem_bytes, a2, sizeof(a2)),
                plan_fmt_bytes(out->mem.headroom, a3, sizeof(a3)));
        else
            say(out, "picked %s (%s): DDP needs %s per GPU at micro-batch 1 (%s short); %s is the "
                "least-sharded strategy that fits\n", s->name, s->label,
                plan_fmt_bytes(ddp_mem.peak, a1, sizeof(a1)), plan_fmt_bytes(-ddp_mem.headroom, a2, sizeof(a2)),
                s->name);
        say(out, "setup: micro-batch %lld x grad-accum %lld x %lld GPUs = global batch %lld, act-ckpt %s; "
            "peak %s, headroom %s\n", (long long)out->train.micro_batch, (long long)out->train.grad_accum,
            (long long)c->gpus, (long long)(out->train.micro_batch * out->train.grad_accum * c->gpus),
            plan_ckpt_name(out->train.act_ckpt), plan_fmt_bytes(out->mem.peak, a1, sizeof(a1)),
            plan_fmt_bytes(out->mem.headroom, a2, sizeof(a2)));
        CommPlan dc;
        plan_comm(m, &out->train, c, STRAT_DDP, &dc);
        if (c->gpus > 1)
            say(out, "traffic: %.3f GiB per GPU per step (%.2fx DDP's %.3f GiB)\n", out->comm.wire_bytes / GIB,
                dc.wire_bytes > 0 ? out->comm.wire_bytes / dc.wire_bytes : 0, dc.wire_bytes / GIB);
        else
            say(out, "traffic: none (one GPU)\n");
        if (!plan_model_acts_known(m))   /* no FLOPs per sample without the architecture: only communication is known */
            say(out, "time: not known (no architecture: compute and tokens per step are not modelled); communication "
                "%.1f ms per step\n", out->time.comm_s * 1e3);
        else
        say(out, "time: step %.1f ms (compute %.1f ms, communication %.1f ms of which %.1f ms exposed), "
            "%.0f %s/s at %.0f%% MFU\n", out->time.step_s * 1e3, out->time.compute_s * 1e3,
            out->time.comm_s * 1e3, out->time.exposed_comm_s * 1e3, out->time.tokens_per_s,
            m->arch == ARCH_CNN ? "samples" : "tokens", c->mfu * 100);
    }
    for (int k = 0; k < STRAT_COUNT; k++) {
        if (k == pick || !bests[k].ok) continue;
        if (!plan_model_acts_known(m))
            say(out, "alternative %s: fits at micro-batch %lld, grad-accum %lld\n", plan_strategy((StrategyKind)k)->name,
                (long long)bests[k].t.micro_batch, (long long)bests[k].t.grad_accum);
        else
        say(out, "alternative %s: best %.0f %s/s at micro-batch %lld, grad-accum %lld, act-ckpt %s\n",
            plan_strategy((StrategyKind)k)->name, bests[k].tps, m->arch == ARCH_CNN ? "samples" : "tokens",
            (long long)bests[k].t.micro_batch, (long long)bests[k].t.grad_accum, plan_ckpt_name(bests[k].t.act_ckpt));
    }
    for (int k = 0; k < STRAT_COUNT; k++) {
        if (!(a->strategies & (1u << k)) || fit_k[k]) continue;
        char fix[160];
        cheapest_fix(m, &base, c, (StrategyKind)k, fix, sizeof(fix));
        say(out, "%s does not fit: %s\n", plan_strategy((StrategyKind)k)->name, fix);
    }
    int64_t sum_c = 0;
    int nbn = plan_model_bn_layers(m, &sum_c);
    if (nbn > 0) {
        int64_t b = out->found ? out->train.micro_batch : t->micro_batch;
        TrainSpec ts = out->found ? out->train : *t;
        ts.syncbn = 1;
        CommPlan sc;
        plan_comm(m, &ts, c, out->found ? out->strategy : STRAT_DDP, &sc);
        double bn_s = 0;
        for (int i = 0; i < sc.n; i++) if (sc.c[i].what[0] == 'S') bn_s += sc.c[i].seconds;
        double step = out->found ? out->time.step_s : 0;
        if (c->gpus > 1 && b < a->bn_min_batch)
            say(out, "BatchNorm: per-GPU batch %lld < %lld, statistics get noisy: SyncBN is worth it; it adds "
                "%d all-gathers + %d all-reduces per micro-step, about %.2f ms per step (%.1f%%) by the model — "
                "convert before wrapping (nn.SyncBatchNorm.convert_sync_batchnorm), not enabled by default\n",
                (long long)b, (long long)a->bn_min_batch, nbn, nbn, bn_s * 1e3,
                step > 0 ? 100 * bn_s / step : 0);
        else
            say(out, "BatchNorm: per-GPU batch %lld >= %lld (or one GPU): plain BatchNorm is fine, SyncBN not needed\n",
                (long long)b, (long long)a->bn_min_batch);
    }
    return 0;
}

static const char *ds_dtype_key(const PrecisionSpec *p) {
    return p->peak == PEAK_FP16 ? "fp16" : p->peak == PEAK_BF16 ? "bf16" : NULL;
}

char *plan_auto_deepspeed_json(const ModelSpec *m, const ClusterSpec *c, const AutoResult *r) {
    (void)m;
    if (!r->found) return NULL;
    static const int STAGE[STRAT_COUNT] = {0, 1, 2, 3, 3, 2, 3};
    const PrecisionSpec *p = plan_precision(r->train.precision);
    cJSON *j = cJSON_CreateObject();
    cJSON_AddNumberToObject(j, "train_batch_size", (double)(r->train.micro_batch * r->train.grad_accum * c->gpus));
    cJSON_AddNumberToObject(j, "train_micro_batch_size_per_gpu", (double)r->train.micro_batch);
    cJSON_AddNumberToObject(j, "gradient_accumulation_steps", (double)r->train.grad_accum);
    cJSON *z = cJSON_AddObjectToObject(j, "zero_optimization");
    cJSON_AddNumberToObject(z, "stage", STAGE[r->strategy]);
    if (STAGE[r->strategy] > 0) {
        cJSON_AddNumberToObject(z, "reduce_bucket_size", PLAN_DS_REDUCE_BUCKET);
        cJSON_AddBoolToObject(z, "overlap_comm", STAGE[r->strategy] == 3);
        cJSON_AddBoolToObject(z, "contiguous_gradients", 1);
    }
    const char *dk = ds_dtype_key(p);
    if (dk) {
        cJSON *d = cJSON_AddObjectToObject(j, dk);
        cJSON_AddBoolToObject(d, "enabled", 1);
    }
    const OptimizerSpec *o = plan_optimizer(r->train.optimizer);
    cJSON *opt = cJSON_AddObjectToObject(j, "optimizer");
    cJSON_AddStringToObject(opt, "type", strcmp(o->name, "adamw") == 0 ? "AdamW" : strcmp(o->name, "adam") == 0 ? "Adam" : "SGD");
    cJSON *pp = cJSON_AddObjectToObject(opt, "params");
    cJSON_AddNumberToObject(pp, "lr", 1e-4);
    if (r->train.optimizer == OPT_SGD_MOMENTUM) cJSON_AddNumberToObject(pp, "momentum", 0.9);
    if (r->train.act_ckpt == CKPT_FULL) {
        cJSON *ac = cJSON_AddObjectToObject(j, "activation_checkpointing");
        cJSON_AddBoolToObject(ac, "partition_activations", 0);
        cJSON_AddBoolToObject(ac, "contiguous_memory_optimization", 0);
    }
    cJSON *note = cJSON_AddObjectToObject(j, "memplan");
    cJSON_AddStringToObject(note, "strategy", plan_strategy(r->strategy)->name);
    cJSON_AddNumberToObject(note, "predicted_peak_bytes", r->mem.peak);
    cJSON_AddNumberToObject(note, "predicted_step_s", r->time.step_s);
    char *txt = cJSON_Print(j);
    cJSON_Delete(j);
    return txt;
}

void plan_auto_torch(FILE *f, const ModelSpec *m, const ClusterSpec *c, const AutoResult *r) {
    if (!r->found) { fprintf(f, "# nothing fits: no launch configuration\n"); return; }
    int64_t nodes = plan_cluster_nodes(c);
    fprintf(f, "torchrun --nnodes %lld --nproc-per-node %lld%s train.py --micro-batch %lld --grad-accum %lld\n",
            (long long)nodes, (long long)c->gpus_per_node,
            nodes > 1 ? " --rdzv-backend c10d --rdzv-endpoint $MASTER_ADDR:29500" : "",
            (long long)r->train.micro_batch, (long long)r->train.grad_accum);
    const PrecisionSpec *p = plan_precision(r->train.precision);
    const char *dt = p->peak == PEAK_BF16 ? "torch.bfloat16" : p->peak == PEAK_FP16 ? "torch.float16" : "torch.float32";
    int bn = plan_model_bn_layers(m, NULL) > 0 && c->gpus > 1 && r->train.micro_batch < 16;
    fprintf(f, "# in train.py, after dist.init_process_group(\"nccl\") and torch.cuda.set_device(local_rank):\n");
    if (bn) fprintf(f, "model = nn.SyncBatchNorm.convert_sync_batchnorm(model)  # before wrapping\n");
    switch (r->strategy) {
    case STRAT_DDP:
        fprintf(f, "model = DDP(model.cuda(), device_ids=[local_rank], bucket_cap_mb=25%s)\n",
                r->train.grad_as_bucket_view ? ", gradient_as_bucket_view=True" : "");
        break;
    case STRAT_FSDP_FULL: case STRAT_FSDP_GRAD_OP: case STRAT_FSDP_HYBRID: {
        const char *ss = r->strategy == STRAT_FSDP_FULL ? "FULL_SHARD" : r->strategy == STRAT_FSDP_GRAD_OP ? "SHARD_GRAD_OP" : "HYBRID_SHARD";
        fprintf(f, "model = FSDP(model, sharding_strategy=ShardingStrategy.%s,\n"
                   "             auto_wrap_policy=functools.partial(transformer_auto_wrap_policy, transformer_layer_cls={Block}),\n"
                   "             device_id=local_rank, limit_all_gathers=True)\n", ss);
        break;
    }
    default:
        fprintf(f, "# ZeRO stage %d: use DeepSpeed (memplan auto --emit deepspeed > ds_config.json)\n"
                   "model, optimizer, _, _ = deepspeed.initialize(model=model, config=\"ds_config.json\")\n",
                r->strategy == STRAT_ZERO1 ? 1 : r->strategy == STRAT_ZERO2 ? 2 : 3);
    }
    if (r->train.act_ckpt == CKPT_FULL)
        fprintf(f, "# activation checkpointing: wrap each block with torch.utils.checkpoint (use_reentrant=False)\n");
    if (p->autocast) fprintf(f, "with torch.autocast(\"cuda\", dtype=%s): loss = model(batch)\n", dt);
}
