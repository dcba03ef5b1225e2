/* plan_pp.c — see plan_pp.h and docs/formulas.md "Pipeline parallel". */
#include "plan_pp.h"
#include "plan_lora.h"

#include <stdio.h>
#include <string.h>

int plan_pp_degree(const TrainSpec *t) { return t->pp > 1 ? t->pp : 1; }

int plan_pp_microbatches(const TrainSpec *t) { return t->grad_accum > 1 ? (int)t->grad_accum : 1; }

int plan_pp_blocks(const ModelSpec *m) {
    int n = 0;
    for (int i = 0; i < m->n_layers; i++) n += m->layers[i].kind == LAYER_BLOCK;
    return n;
}

static const char *const SCHED_NAMES[PP_SCHED_COUNT] = {"1f1b", "gpipe"};

const char *plan_pp_schedule_name(PpSchedule k) { return k >= 0 && k < PP_SCHED_COUNT ? SCHED_NAMES[k] : "?"; }

int plan_pp_schedule_by_name(const char *s) {
    for (int k = 0; k < PP_SCHED_COUNT; k++)
        if (strcmp(s, SCHED_NAMES[k]) == 0) return k;
    return -1;
}

int plan_pp_check(const ModelSpec *m, const TrainSpec *t, const ClusterSpec *c, StrategyKind s,
                  char *msg, size_t len) {
    int pp = plan_pp_degree(t), tp = t->tp > 1 ? t->tp : 1, M = plan_pp_microbatches(t);
    if (pp == 1) return 0;
    if (s != STRAT_DDP && s != STRAT_FSDP_FULL) {
        snprintf(msg, len, "--pp %d with --strategy %s: pipeline parallel is planned with ddp and fsdp-full "
                 "(FSDP2) on the data-parallel ranks", pp, plan_strategy(s)->name);
        return -1;
    }
    if (c->gpus % ((int64_t)tp * pp)) {
        snprintf(msg, len, "--pp %d x --tp %d must divide the GPUs (%lld)", pp, tp, (long long)c->gpus);
        return -1;
    }
    if (t->offload != OFFLOAD_NONE) {
        snprintf(msg, len, "--pp %d with CPU offload: not planned (pipeline stages keep their model states on the GPU)", pp);
        return -1;
    }
    if (s == STRAT_FSDP_FULL && t->fsdp_impl == 1) {
        snprintf(msg, len, "--pp %d with --fsdp 1: pipeline parallel is planned with FSDP2 (fully_shard per stage, "
                 "as torchtitan runs it); give --fsdp 2", pp);
        return -1;
    }
    if (plan_finetune_on(&t->ft)) {
        snprintf(msg, len, "--pp %d with --lora/--freeze: a pipelined partly frozen model is not planned; plan it without --pp", pp);
        return -1;
    }
    if (t->impl != IMPL_PYTORCH) {
        snprintf(msg, len, "--pp %d: pipeline parallel is PyTorch's (torch.distributed.pipelining, --impl pytorch); "
                 "memplan's engine has none", pp);
        return -1;
    }
    int nb = plan_pp_blocks(m);
    if (m->arch != ARCH_DECODER || nb == 0 || m->moe.n_experts > 0) {
        snprintf(msg, len, "--pp %d: %s is not a dense decoder with repeated blocks; pipeline stages are planned "
                 "for decoders (the blocks split over the stages)", pp, m->name);
        return -1;
    }
    if (nb % pp) {
        snprintf(msg, len, "--pp %d must divide %s's %d blocks (stages of equal blocks; uneven splits are not planned)",
                 pp, m->name, nb);
        return -1;
    }
    if (t->pp_schedule == PP_1F1B && M < pp) {
        snprintf(msg, len, "--pp %d with --pp-schedule 1f1b needs --microbatches >= %d (got %d): Schedule1F1B "
                 "refuses fewer micro-batches than stages", pp, pp, M);
        return -1;
    }
    return 0;
}

int plan_pp_in_flight(const TrainSpec *t, int stage) {
    int pp = plan_pp_degree(t), M = plan_pp_microbatches(t);
    if (pp == 1) return 1;
    if (t->pp_schedule == PP_GPIPE) return M;
    int k = pp - stage;
    return k < M ? k : M;
}

int plan_pp_stage_view(const ModelSpec *m, int pp, int stage, ModelSpec *v) {
    plan_model_init(v, m->name, m->arch);
    LayerSpec *keep = v->layers;
    *v = *m;
    v->layers = keep;
    v->n_layers = v->cap_layers = 0;
    int nb = plan_pp_blocks(m), per = nb / pp, first = stage * per, last = pp - 1;
    v->n_layer = per;
    if (stage != last) v->headless = 1;   /* its output is sent on, no head and no loss */
    int b = 0, unit0 = -1;
    for (int i = 0; i < m->n_layers; i++) {
        LayerSpec l = m->layers[i];
        int keep_it;
        if (l.kind == LAYER_BLOCK) {
            keep_it = b >= first && b < first + per;
            b++;
        } else keep_it = b == 0 ? stage == 0 : b == nb ? stage == last : 0;
        if (!keep_it) continue;
        if (l.kind == LAYER_BLOCK) {
            if (unit0 < 0) unit0 = l.unit;
            l.unit = l.unit - unit0 + 1;
        }
        if (l.kind == LAYER_HEAD && m->tied_embeddings && stage != 0 && l.params == 0) {
            /* the tied weight lives on stage 0: the last stage holds a copy of its own (V x h) */
            l.params = l.largest_tensor = (int64_t)m->vocab * m->d_model;
            l.n_tensors = 1;
            l.tensor_elems[0] = l.params;
            l.tensor_dim0[0] = m->vocab;
        }
        if (!plan_model_add_layer(v, &l)) { plan_model_free(v); return -1; }
    }
    v->tied_embeddings = 0;   /* no stage holds both ends: each has its own weight */
    return 0;
}

void plan_pp_cluster(const ClusterSpec *c, int pp, ClusterSpec *d) {
    *d = *c;
    d->gpus = c->gpus / pp;
    if (d->gpus_per_node > d->gpus) d->gpus_per_node = d->gpus > 0 ? d->gpus : 1;
}
