/* plan_dim_pp.c — pipeline parallelism as one dimension (plan_dim_pp.h): the check and its
 * refusals, the stage views (stage 0 and the last stage, the builder keeping the most loaded), the
 * rules (send/recv, the other micro-batches' activations in flight), the header and JSON lines and
 * the degrees auto tries. docs/formulas.md "Pipeline parallel". */
#include "plan_dim_pp.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <string.h>

#include "plan_auto.h"
#include "plan_dim_ft.h"
#include "plan_dim_tp.h"
#include "plan_step_internal.h"

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

/* ---- the rules: what one stage holds beyond the account of its blocks run for one micro-batch;
   closed forms (the in-flight activations checked on CPU ranks for gpt2-mini in 2 stages; the
   send/recv not measured) ---- */

/* The stage boundaries' point-to-point traffic: per micro-batch, the residual stream (b, s, h) at
   the parameters' dtype goes to the next stage after the forward and its gradient comes back in
   backward (torch/distributed/pipelining/stage.py get_fwd_send_ops / get_bwd_send_ops: one
   isend/irecv per boundary; Narayanan et al. 2021 §2.2). Stage 0 and the last stage touch one
   boundary, a middle stage two; each GPU of a stage sends its own copy (no scatter/gather over
   the tp ranks). Issued on the side (batched isend/irecv), the end of backward waits for them:
   the fill and drain they imply are the bubble (plan_sim.c). */
static void pp_send_recv(const StepCtx *x, Step *st) {
    int pp = plan_pp_degree(x->t), last = pp - 1, s = x->v->stage;
    double bounds = (s > 0) + (s < last);
    double each = (double)x->in.b * (double)x->in.s * (double)x->m->d_model * x->p->param_bytes;
    const ClusterSpec *c = x->full;
    int crosses = c->gpus > c->gpus_per_node && c->gpus / pp >= c->gpus_per_node;   /* pp outermost */
    static const struct { PointKind at; PhaseKind ph; } WAYS[2] = {{PT_FWD, PHASE_FORWARD}, {PT_BWD, PHASE_BACKWARD}};
    for (int w = 0; w < 2; w++) {
        StepXfer *e = step_xfer(st, RULE_PP_SEND_RECV, XFER_COLL, pt(x, WAYS[w].at, w == 0 ? x->L - 1 : 0));
        if (!e) return;
        e->op = COLL_SEND_RECV;
        e->purpose = PURPOSE_PP_ACTS;
        e->phase = (uint8_t)WAYS[w].ph;
        e->sched = SCHED_ASYNC_AFTER;
        e->micro = MICRO_EVERY;
        e->count = bounds;
        e->payload = bounds * each;
        e->group = 2;
        e->crosses = crosses;
    }
}

/* A stage keeps every micro-batch's saved tensors from its forward to its backward. Under 1F1B
   stage s runs min(M, pp - s) forwards before its first backward (torch/distributed/pipelining/
   schedules.py Schedule1F1B._step_microbatches: warmup_chunks; Narayanan et al. 2021 §2.2,
   PipeDream-Flush: at most pp micro-batches in flight), under GPipe all M
   (ScheduleGPipe._step_microbatches; Huang et al. 2019). The account's own micro-batch is the
   one whose backward the peak is in; the others' saved bytes are held beside it from the first
   forward to the end of backward. Where every micro-batch is in flight before the first backward
   (GPipe; 1F1B with M <= pp - stage) that is the first backward, with no accumulated gradient
   (plan_step.c pp_build); otherwise 1F1B's steady state, with the earlier gradients. */
void rule_pp(const StepCtx *x, Step *st) {
    if (x->v->stage < 0 || x->L == 0) return;
    pp_send_recv(x, st);
    if (x->v->in_flight <= 1) return;
    /* one micro-batch's saved bytes on this stage: what the account's saved-activations rule holds
       (read from the account, not computed again) */
    double a = 0;
    for (int e = 0; e < st->n_mem; e++)
        if (st->mem[e].rule == RULE_SAVED_ACTS && st->mem[e].bytes > 0) a += st->mem[e].bytes;
    step_hold(st, RULE_PP_IN_FLIGHT, TERM_ACTIVATIONS, pt(x, PT_FWD, 0), AT_BEFORE, pt(x, PT_BWD, 0), AT_AFTER,
              (double)(x->v->in_flight - 1) * a);
}

/* ---- the dimension's row ---- */

static int pp_on(const ModelSpec *m, const TrainSpec *t) { (void)m; return plan_pp_degree(t) > 1; }

/* The candidate views: stage 0 (the embedding, the most micro-batches in flight) and the last
   stage (the head and the loss), each a model of its own on gpus / pp data-parallel ranks; the
   builder keeps the most loaded. Middle stages hold stage 0's blocks without the embedding and
   fewer micro-batches: never more. */
static int pp_view(RankView *v, RankView *out, int max) {
    int pp = plan_pp_degree(&v->t);
    if (pp == 1) return 1;
    int stages[2] = {0, pp - 1}, n = 0;
    for (int k = 0; k < 2 && n < max; k++) {
        RankView *o = &out[n];
        *o = *v;
        if (plan_pp_stage_view(&v->m, pp, stages[k], &o->m)) {
            for (int j = 0; j < n; j++) plan_model_free(&out[j].m);
            return -1;
        }
        o->own_m = 1;
        plan_pp_cluster(&v->dp, pp, &o->dp);
        o->pp = pp;
        o->stage = stages[k];
        o->in_flight = plan_pp_in_flight(&v->t, stages[k]);
        /* every micro-batch is in flight before the stage's first backward (GPipe; 1F1B with
           M <= pp - stage): that backward is the peak's, and no gradient has accumulated yet. The
           memory is the account of a step without accumulation; the collectives and the compute
           stay those of M micro-steps (plan_step.c builds both) */
        o->mem_one_micro = o->in_flight == plan_pp_microbatches(&v->t) && o->in_flight > 1;
        n++;
    }
    return n;
}

static void pp_header(FILE *f, PlanHeaderSlot slot, const ModelSpec *m, const TrainSpec *t, const ClusterSpec *c,
                      const Step *const *rows, int n_rows) {
    if (slot != HEADER_AFTER_TRAIN || plan_pp_degree(t) == 1) return;
    int pp = plan_pp_degree(t), tp = plan_tp_degree(t), M = plan_pp_microbatches(t);
    long long dp = (long long)(c->gpus / tp / pp);
    fprintf(f, "# pipeline parallel: pp %d, schedule %s, %d micro-batches per step (the grad-accum above), the "
            "strategies on %lld data-parallel ranks (gpus / (tp x pp)), global batch %lld; memory is the most "
            "loaded stage's (stage 0: the embedding and %s micro-batches' activations in flight; the last: the "
            "head and the loss), bubble (pp-1)/(M+pp-1) = %.1f%% of the step; memory checked on CPU ranks for "
            "gpt2-mini in 2 stages only, bubble and send/recv closed forms, not measured (docs/formulas.md "
            "\"Pipeline parallel\")\n", pp, plan_pp_schedule_name(t->pp_schedule), M, dp,
            (long long)t->micro_batch * M * dp, t->pp_schedule == PP_GPIPE ? "all M" : "min(M, pp)",
            100.0 * (pp - 1) / (M + pp - 1));
    (void)m;
    fprintf(f, "# pipeline stage planned (the most loaded):");
    for (int i = 0; i < n_rows; i++)
        if (rows[i] && !rows[i]->failed)
            fprintf(f, " %s stage %d of %d (%d micro-batch%s in flight);", plan_strategy(rows[i]->view.sk)->name,
                    rows[i]->view.stage, pp, rows[i]->view.in_flight, rows[i]->view.in_flight == 1 ? "" : "es");
    fprintf(f, "\n");
}

static void pp_json(cJSON *model, cJSON *train, const ModelSpec *m, const TrainSpec *t, const ClusterSpec *c) {
    (void)model; (void)m;
    if (plan_pp_degree(t) == 1) return;   /* only then, as for tp */
    cJSON_AddNumberToObject(train, "pp", t->pp);
    cJSON_AddStringToObject(train, "pp_schedule", plan_pp_schedule_name(t->pp_schedule));
    cJSON_AddNumberToObject(train, "microbatches", plan_pp_microbatches(t));
    cJSON_AddNumberToObject(train, "pp_data_parallel", (double)(c->gpus / plan_tp_degree(t) / t->pp));
    cJSON_AddStringToObject(train, "pp_memory_source", "closed form; checked on CPU ranks for gpt2-mini in 2 stages only");
    cJSON_AddStringToObject(train, "pp_time_source", "closed form, not measured");
}

/* The stage a strategy's memory is of. */
static void pp_row_json(cJSON *o, const Step *st) {
    if (st->view.pp <= 1) return;
    cJSON_AddNumberToObject(o, "pp_stage", st->failed ? -1 : st->view.stage);
    cJSON_AddNumberToObject(o, "pp_in_flight", st->failed ? 0 : st->view.in_flight);
}

static int pp_auto_on(const TrainSpec *t) { return t->pp < 0; }

/* --pp auto: pp = 1 and each divisor of the model's blocks with tp x pp dividing the GPUs, 1F1B,
   the fewest micro-batches M >= pp the global batch allows (M = pp without one), ddp or
   fsdp-full, no offload; the simpler first. */
static int pp_settings(const ModelSpec *m, const TrainSpec *t, const ClusterSpec *c, const AutoSpec *a,
                       DimSetting *out, int max) {
    const unsigned pp_ok = (1u << STRAT_DDP) | (1u << STRAT_FSDP_FULL);
    int nb = plan_pp_blocks(m), n = 0;
    int64_t tp_min = t->tp < 0 ? 1 : plan_tp_degree(t);
    for (int pp = 1; pp <= (nb > 0 ? nb : 1) && n < max; pp++) {
        if (nb > 0 && nb % pp) continue;
        if (c->gpus % (tp_min * pp)) continue;
        DimSetting *s = &out[n++];
        memset(s, 0, sizeof *s);
        s->t = *t;
        s->t.pp = pp;
        s->t.pp_schedule = PP_1F1B;
        s->strategies = a->strategies;
        s->offloads = a->offloads;
        s->keep_accum = a->keep_accum;
        if (pp == 1) { snprintf(s->label, sizeof s->label, "pp 1 (no pipeline)"); continue; }
        int64_t M = pp, dp = c->gpus / (tp_min * pp);
        if (a->global_batch > 0) {   /* the fewest micro-batches >= pp that split the replica's share */
            int64_t per = a->global_batch % dp ? 0 : a->global_batch / dp;
            if (a->keep_batch) M = per % t->micro_batch ? 0 : per / t->micro_batch;
            else for (M = pp; M <= per && per % M; M++) {}
            if (M < pp || M > per) {
                snprintf(s->skip, sizeof s->skip, "pp %d: --global-batch %lld does not split into %d or more "
                         "micro-batches per replica", pp, (long long)a->global_batch, pp);
                continue;
            }
        }
        s->t.grad_accum = M;
        s->keep_accum = 1;
        s->strategies &= pp_ok;
        s->offloads &= 1u << OFFLOAD_NONE;
        s->t.offload = OFFLOAD_NONE;
        char msg[320] = "";
        int any = 0;
        for (int k = 0; k < STRAT_COUNT; k++)
            if ((s->strategies & (1u << k)) && !plan_pp_check(m, &s->t, c, (StrategyKind)k, msg, sizeof msg)) any = 1;
        if (!any) { snprintf(s->skip, sizeof s->skip, "pp %d: %.300s", pp, msg); continue; }
        snprintf(s->label, sizeof s->label, "pp %d (1f1b, %lld micro-batches)", pp, (long long)M);
    }
    return n;
}

static void pp_describe(char *buf, size_t len, StrategyKind sk, const TrainSpec *t) {
    snprintf(buf, len, "%s tp %d", plan_strategy(sk)->name, plan_tp_degree(t));
}

static void pp_summary(char *buf, size_t len, int found, const TrainSpec *picked, int first_found) {
    plan_dim_summary(buf, len, "pp", "pipeline degree", "pipeline stages", found ? plan_pp_degree(picked) : 0, found,
                     first_found);
}

const PlanDim plan_dim_pp = {
    .name = "pp",
    .not_planned = "pipeline parallel does not apply to this setup",
    .on = pp_on,
    .check = plan_pp_check,
    .view = pp_view,
    .rule = rule_pp,
    .header = pp_header,
    .json = pp_json,
    .row_json = pp_row_json,
    .auto_on = pp_auto_on,
    .settings = pp_settings,
    .search_title = "pipeline stages searched (1F1B; a larger pp is taken only when faster by more than %.0f%%, "
                    "the bubble counted in the simulated step):\n",
    .describe = pp_describe,
    .summary = pp_summary,
};
