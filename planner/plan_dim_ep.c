/* plan_dim_ep.c — expert parallelism as one dimension (plan_dim_ep.h): the check and its
 * refusals, one rank's share of the experts (the view), the all-to-alls of the dispatch and the
 * combine (the rules), the header and JSON lines and the degrees auto tries. docs/formulas.md
 * "Expert parallel". */
#include "plan_dim_ep.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <string.h>

#include "plan_auto.h"
#include "plan_dim_ft.h"
#include "plan_dim_moe.h"
#include "plan_step_internal.h"
#include "plan_util.h"

int plan_ep_degree(const TrainSpec *t) { return t->ep > 1 ? t->ep : 1; }

int plan_ep_check(const ModelSpec *m, const TrainSpec *t, const ClusterSpec *c, StrategyKind s, char *msg,
                  size_t len) {
    int ep = plan_ep_degree(t);
    if (ep == 1) return 0;
    if (s != STRAT_FSDP_FULL || t->fsdp_impl == 1) {
        snprintf(msg, len, "--ep %d with --strategy %s%s: expert parallel is planned with fsdp-full (FSDP2 over the "
                 "data-parallel ranks and, for the experts, over the expert data-parallel ranks, as transformers' "
                 "DistributedConfig(ep_size) and torchtitan run it)", ep, plan_strategy(s)->name,
                 s == STRAT_FSDP_FULL ? " --fsdp 1" : "");
        return -1;
    }
    if (m->moe.n_experts <= 0) {
        snprintf(msg, len, "--ep %d: %s has no mixture-of-experts blocks (valid: --ep 1)", ep, m->name);
        return -1;
    }
    if (m->moe.router == MOE_ROUTER_ALL_EXPERTS) {
        snprintf(msg, len, "--ep %d: %s's experts take every token (transformers' Llama 4 has no expert-parallel plan: "
                 "nothing is dispatched); plan it without --ep", ep, m->name);
        return -1;
    }
    if (!plan_moe_experts_known(m) || !plan_model_dim0_known(m)) {
        snprintf(msg, len, "--ep %d: %s's routed-expert tensors are not known (a model JSON without them); expert "
                 "parallel needs a Hugging Face config or the zoo's", ep, m->name);
        return -1;
    }
    if (m->moe.n_experts % ep) {
        snprintf(msg, len, "--ep %d must divide %s's %d experts (each rank holds experts / ep of them)", ep, m->name,
                 m->moe.n_experts);
        return -1;
    }
    int64_t dp = c->gpus / (t->tp > 1 ? t->tp : 1) / (t->pp > 1 ? t->pp : 1);
    if (dp % ep || c->gpus % ep) {
        snprintf(msg, len, "--ep %d must divide the %lld data-parallel GPUs (the experts' ranks are a group of the "
                 "data-parallel ones; the rest shard them)", ep, (long long)dp);
        return -1;
    }
    if (t->offload != OFFLOAD_NONE) {
        snprintf(msg, len, "--ep %d with CPU offload: not planned (the experts stay on the GPU)", ep);
        return -1;
    }
    if (plan_finetune_on(&t->ft)) {
        snprintf(msg, len, "--ep %d with --lora/--freeze: not planned; plan it without --ep", ep);
        return -1;
    }
    if (t->impl != IMPL_PYTORCH) {
        snprintf(msg, len, "--ep %d: expert parallel is PyTorch's (--impl pytorch); memplan's engine has none", ep);
        return -1;
    }
    return 0;
}

int plan_ep_view(const ModelSpec *m, int ep, ModelSpec *v) {
    plan_model_init(v, m->name, m->arch);
    LayerSpec *keep = v->layers;
    *v = *m;
    v->layers = keep;
    v->n_layers = v->cap_layers = 0;
    v->moe.ep = ep;
    for (int i = 0; i < m->n_layers; i++) {
        LayerSpec l = m->layers[i];
        if (l.expert_mask && l.expert_params > 0) {
            int64_t sum = 0, largest = 0, experts = 0;
            for (int k = 0; k < l.n_tensors; k++) {
                if (k < 32 && (l.expert_mask >> k & 1u)) {   /* Shard(0): dim 0 is the expert index */
                    l.tensor_elems[k] /= ep;
                    l.tensor_dim0[k] /= ep;
                    experts += l.tensor_elems[k];
                }
                sum += l.tensor_elems[k];
                if (l.tensor_elems[k] > largest) largest = l.tensor_elems[k];
            }
            l.params = sum;
            l.largest_tensor = largest;
            l.expert_params = experts;
        }
        if (!plan_model_add_layer(v, &l)) { plan_model_free(v); return -1; }
    }
    return 0;
}

static double imbalance(const TrainSpec *t) { return t->moe_imbalance > 1 ? t->moe_imbalance : 1; }

double plan_ep_rows_per_token(const ModelSpec *m, const TrainSpec *t) {
    double F = imbalance(t), ep = m->moe.ep > 1 ? m->moe.ep : 1;
    return (double)m->moe.top_k * (F < ep ? F : ep);
}

/* ---- the rules: the dispatch and the combine, per MoE block, as transformers' AllToAllEP issues
   them (measured on gloo CPU ranks: bench/torch/harness.py --ep, collectives exact) ---- */

static void a2a(const StepCtx *x, Step *st, int point, CollPurpose what, PhaseKind ph, double count, double each) {
    if (count <= 0 || each <= 0) return;
    StepXfer *e = step_xfer(st, RULE_EP_ALL_TO_ALL, XFER_COLL, point);
    if (!e) return;
    e->op = COLL_ALL_TO_ALL;
    e->purpose = (uint8_t)what;
    e->phase = (uint8_t)ph;
    e->sched = SCHED_SYNC_AFTER;     /* the experts (forward) or the block's input gradient wait for it */
    e->micro = MICRO_EVERY;
    e->count = count;
    e->payload = count * each;
    e->group = x->v->ep;
    /* the ep group is ep ranks of the expert mesh's inner dimension, strided by tp under tensor
       parallel (torchtitan's sparse mesh [efsdp, ep, etp], etp = tp): it spans ep x tp ranks */
    e->crosses = (int64_t)x->v->ep * x->v->tp > x->full->gpus_per_node;
}

/* Per MoE block and micro-step (transformers 5.24 distributed/expert_parallel.py
   AllToAllEP._dispatch_tokens, _combine_tokens; torchtitan ExpertParallel._token_dispatch,
   _token_combine): forward, the tokens per expert (E int64: all_to_all_single of send_counts) that
   size the exchange, then the T k routed rows to their experts' ranks (send_tokens, the rows of
   the residual stream's dtype) and the experts' outputs back (the rows this rank received);
   backward, all_to_all_single_autograd's backward sends each gradient back the way it came. A
   checkpointed block recomputes its forward, the dispatch with it. The payload is the sending
   rank's input buffer; the busiest rank under --moe-imbalance F receives F T k rows. */
static void rule_ep(const StepCtx *x, Step *st) {
    if (x->v->ep <= 1) return;
    const ModelSpec *m = x->m;
    double T = (double)x->in.b * (double)x->in.s, k = m->moe.top_k, h = (double)m->d_model;
    double R = x->p->param_bytes, rows = plan_ep_rows_per_token(m, x->t);
    double sent = T * k * h * R, back = T * rows * h * R, counts = 8.0 * m->moe.n_experts;
    for (int i = 0; i < x->L; i++) {
        if (!plan_moe_block(m, &m->layers[i])) continue;
        int again = plan_act_checkpointed(m, x->t, i);
        int f = pt(x, PT_FWD, i), b = pt(x, PT_BWD, i);
        a2a(x, st, f, PURPOSE_EP_COUNTS, PHASE_FORWARD, 1, counts);
        a2a(x, st, f, PURPOSE_EP_TOKENS, PHASE_FORWARD, 1, sent);
        a2a(x, st, f, PURPOSE_EP_TOKENS, PHASE_FORWARD, 1, back);
        if (again) {   /* op-level checkpointing saves the functional all-to-alls' outputs (torchtitan's
                          save list): only the tokens-per-expert exchange, a c10d call, runs again */
            a2a(x, st, b, PURPOSE_EP_COUNTS, PHASE_BACKWARD, 1, counts);
            if (x->t->act_ckpt != CKPT_OP) {
                a2a(x, st, b, PURPOSE_EP_TOKENS, PHASE_BACKWARD, 1, sent);
                a2a(x, st, b, PURPOSE_EP_TOKENS, PHASE_BACKWARD, 1, back);
            }
        }
        a2a(x, st, b, PURPOSE_EP_TOKENS, PHASE_BACKWARD, 1, sent);   /* the combine's input gradient */
        a2a(x, st, b, PURPOSE_EP_TOKENS, PHASE_BACKWARD, 1, back);   /* the dispatch's */
    }
}

/* ---- the dimension's row ---- */

static int ep_on(const ModelSpec *m, const TrainSpec *t) { (void)m; return plan_ep_degree(t) > 1; }

/* One rank's experts, and two communicators more: the ep group's and the expert data-parallel
   group's (when it has more than one rank). */
static int ep_view(RankView *v, RankView *out, int max) {
    (void)out; (void)max;
    int ep = plan_ep_degree(&v->t);
    if (ep == 1) return 1;
    ModelSpec share;
    if (plan_ep_view(&v->m, ep, &share)) return -1;
    if (v->own_m) plan_model_free(&v->m);
    v->m = share;
    v->own_m = 1;
    v->ep = ep;
    v->comms += 1 + (v->dp.gpus / ep > 1);
    return 1;
}

static void ep_header(FILE *f, PlanHeaderSlot slot, const ModelSpec *m, const TrainSpec *t, const ClusterSpec *c,
                      const Step *const *rows, int n_rows) {
    (void)rows; (void)n_rows;
    int ep = plan_ep_degree(t);
    if (slot != HEADER_AFTER_TRAIN || ep == 1) return;
    long long dp = (long long)(c->gpus / (t->tp > 1 ? t->tp : 1) / (t->pp > 1 ? t->pp : 1));
    double F = imbalance(t);
    char shard[96];
    if (dp / ep > 1) snprintf(shard, sizeof shard, "sharded over the %lld ranks that hold the same ones", dp / ep);
    else snprintf(shard, sizeof shard, "no other rank holding them (nothing to shard)");
    fprintf(f, "# expert parallel: ep %d (transformers' AllToAllEP, torchtitan's ExpertParallel): each rank holds %d of "
            "the %d experts of every MoE block, %s (FSDP2 on the experts), the rest of the model over all %lld "
            "data-parallel ranks; per MoE block 3 all-to-alls forward (tokens per expert, dispatch, combine) and 2 "
            "backward; the experts run on %g routed rows per token%s (docs/formulas.md \"Expert parallel\")\n", ep,
            m->moe.n_experts / ep, m->moe.n_experts, shard, dp, plan_ep_rows_per_token(m, t),
            F > 1 ? " on the busiest rank (--moe-imbalance: its capacity)" : " (top-k: the expectation, balanced routing)");
}

static void ep_json(cJSON *model, cJSON *train, const ModelSpec *m, const TrainSpec *t, const ClusterSpec *c) {
    (void)model;
    int ep = plan_ep_degree(t);
    if (ep == 1) return;   /* only then: the records of other plans stay as they were */
    long long dp = (long long)(c->gpus / (t->tp > 1 ? t->tp : 1) / (t->pp > 1 ? t->pp : 1));
    cJSON_AddNumberToObject(train, "ep", ep);
    cJSON_AddNumberToObject(train, "ep_experts_per_rank", m->moe.n_experts / ep);
    cJSON_AddNumberToObject(train, "expert_data_parallel", (double)(dp / ep));
    cJSON_AddNumberToObject(train, "ep_rows_per_token", plan_ep_rows_per_token(m, t));
}

static int ep_auto_on(const TrainSpec *t) { return t->ep < 0; }

/* --ep auto: ep 1, then each degree that divides the experts and the data-parallel GPUs, fsdp-full
   only; the simpler first. */
static int ep_settings(const ModelSpec *m, const TrainSpec *t, const ClusterSpec *c, const AutoSpec *a,
                       DimSetting *out, int max) {
    const unsigned ok = 1u << STRAT_FSDP_FULL;
    int n = 0, E = m->moe.n_experts;
    for (int ep = 1; ep <= (E > 0 ? E : 1) && n < max; ep++) {
        if (E > 0 && E % ep) continue;
        DimSetting *s = &out[n];
        memset(s, 0, sizeof *s);
        s->t = *t;
        s->t.ep = ep;
        s->strategies = a->strategies & (ep > 1 ? ok : ~0u);
        s->offloads = a->offloads & (ep > 1 ? 1u << OFFLOAD_NONE : ~0u);
        s->keep_accum = a->keep_accum;
        if (ep == 1) {
            snprintf(s->label, sizeof s->label, "ep 1 (every expert on every rank)");
            n++;
            continue;
        }
        char msg[300];
        if (!s->strategies || plan_ep_check(m, &s->t, c, STRAT_FSDP_FULL, msg, sizeof msg)) {
            if (c->gpus % ep == 0) {   /* a degree the GPUs allow: say why it is not tried */
                snprintf(s->skip, sizeof s->skip, "ep %d: %.300s", ep, s->strategies ? msg : "needs fsdp-full");
                n++;
            }
            continue;
        }
        snprintf(s->label, sizeof s->label, "ep %d (%d experts per rank)", ep, E / ep);
        n++;
    }
    return n;
}

static void ep_summary(char *buf, size_t len, int found, const TrainSpec *picked, int first_found) {
    plan_dim_summary(buf, len, "ep", "expert-parallel degree", "expert parallel", found ? plan_ep_degree(picked) : 0,
                     found, first_found);
}

const PlanDim plan_dim_ep = {
    .name = "ep",
    .not_planned = "expert parallel does not apply to this setup",
    .on = ep_on,
    .check = plan_ep_check,
    .view = ep_view,
    .rule = rule_ep,
    .header = ep_header,
    .json = ep_json,
    .auto_on = ep_auto_on,
    .settings = ep_settings,
    .search_title = "expert parallel searched (fsdp-full; a larger ep is taken only when faster by more than %.0f%%):\n",
    .describe = plan_dim_describe_strategy,
    .summary = ep_summary,
};
