/* plan_dim_pp.c — pipeline parallelism as one dimension (plan_dim_pp.h): the check and its
 * refusals, the stage views (stage 0 and the last stage, the builder keeping the most loaded), the
 * rules (send/recv, the other micro-batches' activations in flight), the header and JSON lines and
 * the degrees auto tries. docs/formulas.md "Pipeline parallel". */
#include "plan_dim_pp.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
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

static const char *const SCHED_NAMES[PP_SCHED_COUNT] = {"1f1b", "gpipe", "interleaved"};

int plan_pp_virtual(const TrainSpec *t) {
    if (plan_pp_degree(t) == 1 || t->pp_schedule != PP_INTERLEAVED) return 1;
    return t->pp_virtual > 0 ? t->pp_virtual : 2;
}

/* torchtitan's split (torchtitan/distributed/pipeline_parallel.py generate_llm_fqn_per_model_part):
   the embedding counts as w_in blocks and the final norm with the head as w_out, the
   nb + w_in + w_out "effective layers" go (nb + w_in + w_out) / S to each stage, the first
   (nb + w_in + w_out) % S stages one more, stage 0 taking w_in fewer blocks and the last w_out
   fewer. w_in = w_out = 0 with S dividing nb is the even split. */
int plan_pp_split(int nb, int S, int w_in, int w_out, int *first, int *count, char *msg, size_t len) {
    if (S == 1) {
        first[0] = 0;
        count[0] = nb;
        return 0;
    }
    int eff = nb + w_in + w_out, per = S > 0 ? eff / S : 0, extra = S > 0 ? eff % S : 0;
    if (S > eff || per == 0) {
        snprintf(msg, len, "%d pipeline stages over %d blocks (+%d for the embedding, +%d for the head): a stage "
                 "would be empty", S, nb, w_in, w_out);
        return -1;
    }
    if (w_in > per || w_out > per) {
        snprintf(msg, len, "--pp-less-first %d / --pp-less-last %d exceed the %d blocks per stage (torchtitan refuses "
                 "it)", w_in, w_out, per);
        return -1;
    }
    int cur = 0;
    for (int k = 0; k < S; k++) {
        int n = per + (k < extra) - (k == 0 ? w_in : 0) - (k == S - 1 ? w_out : 0);
        if (n > nb - cur) n = nb - cur;
        if (n < 0) n = 0;
        first[k] = cur;
        count[k] = n;
        cur += n;
    }
    return 0;
}

const char *plan_pp_schedule_name(PpSchedule k) { return k >= 0 && k < PP_SCHED_COUNT ? SCHED_NAMES[k] : "?"; }

int plan_pp_schedule_by_name(const char *s) {
    for (int k = 0; k < PP_SCHED_COUNT; k++)
        if (strcmp(s, SCHED_NAMES[k]) == 0) return k;
    return -1;
}

/* ddp and fsdp-full as torchtitan runs them; zero1 as Megatron-DeepSpeed runs ZeRO beside its
   pipeline (DeepSpeed's PipelineEngine takes stage 1 only: runtime/pipe/engine.py asserts
   zero_optimization_stage() < 2, "ZeRO-2 and ZeRO-3 are incompatible with pipeline parallelism"). */
unsigned plan_pp_strategies(void) { return 1u << STRAT_DDP | 1u << STRAT_ZERO1 | 1u << STRAT_FSDP_FULL; }

int plan_pp_check(const ModelSpec *m, const TrainSpec *t, const ClusterSpec *c, StrategyKind s,
                  char *msg, size_t len) {
    int pp = plan_pp_degree(t), tp = t->tp > 1 ? t->tp : 1, M = plan_pp_microbatches(t), V = plan_pp_virtual(t);
    if (pp == 1) return 0;
    if (!(plan_pp_strategies() & (1u << s))) {
        char ok[96];
        snprintf(msg, len, "--pp %d with --strategy %s: pipeline parallel is planned with %s on the data-parallel "
                 "ranks%s", pp, plan_strategy(s)->name, plan_strategy_list(plan_pp_strategies(), ok, sizeof ok),
                 s == STRAT_ZERO2 || s == STRAT_ZERO3 ? " (DeepSpeed: \"ZeRO-2 and ZeRO-3 are incompatible with pipeline "
                                                        "parallelism\")" : "");
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
    if (t->pp_schedule == PP_INTERLEAVED && (V < 2 || V > PLAN_PP_MAX_VIRTUAL)) {
        snprintf(msg, len, "--pp-virtual %d with --pp-schedule interleaved: 2 to %d stages per rank", V, PLAN_PP_MAX_VIRTUAL);
        return -1;
    }
    if (t->pp_less_first < 0 || t->pp_less_last < 0) {
        snprintf(msg, len, "--pp-less-first %d / --pp-less-last %d: blocks, 0 or more", t->pp_less_first, t->pp_less_last);
        return -1;
    }
    if (t->pp_less_first == 0 && t->pp_less_last == 0 && nb % (pp * V)) {
        snprintf(msg, len, "--pp %d%s must divide %s's %d blocks for stages of equal blocks; give --pp-less-first / "
                 "--pp-less-last (torchtitan's uneven split) to plan another", pp,
                 V > 1 ? " x --pp-virtual" : "", m->name, nb);
        return -1;
    }
    int *first = malloc(sizeof(int) * 2 * (size_t)pp * (size_t)V);
    if (!first) {
        snprintf(msg, len, "out of host memory planning --pp %d", pp);
        return -1;
    }
    int bad = plan_pp_split(nb, pp * V, t->pp_less_first, t->pp_less_last, first, first + pp * V, msg, len);
    free(first);
    if (bad) return -1;
    if (t->pp_schedule == PP_INTERLEAVED) {   /* ScheduleInterleaved1F1B.__init__ */
        int rounds = M / pp > 1 ? M / pp : 1;
        if (M % rounds) {
            snprintf(msg, len, "--pp-schedule interleaved with --microbatches %d: ScheduleInterleaved1F1B needs a "
                     "multiple of its %d rounds (max(1, M / pp))", M, rounds);
            return -1;
        }
    }
    if (t->pp_schedule == PP_1F1B && M < pp) {
        snprintf(msg, len, "--pp %d with --pp-schedule 1f1b needs --microbatches >= %d (got %d): Schedule1F1B "
                 "refuses fewer micro-batches than stages", pp, pp, M);
        return -1;
    }
    return 0;
}

/* Each of rank r's chunks' forwards done before its first backward. Schedule1F1B:
   warmup_chunks = min(M, pp - r), then backward first (1B1F); ScheduleGPipe: all M;
   ScheduleInterleaved1F1B (_calculate_single_rank_operations, _get_warmup_ops):
   warmup_ops = min((V - 1) mpr + 2 (pp - 1 - r), M V) forwards, mpr = M / max(1, M / pp) a round's
   micro-batches, forward op j on chunk (j / mpr) mod V, and its 1F1B phase runs a forward before
   each backward, so warmup_ops + 1 forwards are done at the first (all M V when warmup takes
   them all). Returns their sum. */
int plan_pp_chunk_in_flight(const TrainSpec *t, int r, int n[PLAN_PP_MAX_VIRTUAL]) {
    int pp = plan_pp_degree(t), M = plan_pp_microbatches(t), V = plan_pp_virtual(t);
    memset(n, 0, sizeof(int) * PLAN_PP_MAX_VIRTUAL);
    if (pp == 1) { n[0] = 1; return 1; }
    if (t->pp_schedule == PP_GPIPE) { n[0] = M; return M; }
    if (t->pp_schedule != PP_INTERLEAVED) { n[0] = pp - r < M ? pp - r : M; return n[0]; }
    int rounds = M / pp > 1 ? M / pp : 1, mpr = M / rounds;
    int warm = (V - 1) * mpr + 2 * (pp - 1 - r);
    if (warm > M * V) warm = M * V;
    int done = warm < M * V ? warm + 1 : warm;
    for (int j = 0; j < done; j++) n[(j / mpr) % V]++;
    return done;
}

int plan_pp_in_flight(const TrainSpec *t, int stage) {
    int n[PLAN_PP_MAX_VIRTUAL];
    return plan_pp_chunk_in_flight(t, stage, n);
}

int plan_pp_rank_view(const ModelSpec *m, const TrainSpec *t, int r, ModelSpec *v, int chunk_layers[PLAN_PP_MAX_VIRTUAL]) {
    int pp = plan_pp_degree(t), V = plan_pp_virtual(t), S = pp * V, nb = plan_pp_blocks(m);
    plan_model_init(v, m->name, m->arch);
    if (chunk_layers) memset(chunk_layers, 0, sizeof(int) * PLAN_PP_MAX_VIRTUAL);
    int *first = malloc(sizeof(int) * 2 * (size_t)S), *count = first ? first + S : NULL;
    char msg[320];
    if (!first || plan_pp_split(nb, S, t->pp_less_first, t->pp_less_last, first, count, msg, sizeof msg)) {
        free(first);
        return -1;
    }
    LayerSpec *keep = v->layers;
    *v = *m;
    v->layers = keep;
    v->n_layers = v->cap_layers = 0;
    v->n_layer = 0;
    int last_rank = (S - 1) % pp;
    if (r != last_rank) v->headless = 1;   /* its output is sent on, no head and no loss */
    int b = 0, unit_in = -1, unit_out = 0, rc = 0;
    for (int i = 0; i < m->n_layers && !rc; i++) {
        LayerSpec l = m->layers[i];
        int stage;   /* the virtual stage this layer is on */
        if (l.kind == LAYER_BLOCK) {
            for (stage = 0; stage < S - 1 && b >= first[stage] + count[stage]; stage++) {}
            b++;
        } else stage = b == 0 ? 0 : b == nb ? S - 1 : -1;
        if (stage < 0 || stage % pp != r) continue;
        if (l.kind == LAYER_BLOCK) {   /* the rank's units numbered 1, 2, ... in order */
            if (l.unit != unit_in) unit_out++;
            unit_in = l.unit;
            l.unit = unit_out;
            v->n_layer++;
        }
        if (l.kind == LAYER_HEAD && m->tied_embeddings && r != 0 && l.params == 0) {
            /* the tied weight lives on rank 0: the last stage holds a copy of its own (V x h) */
            l.params = l.largest_tensor = (int64_t)m->vocab * m->d_model;
            l.n_tensors = 1;
            l.tensor_elems[0] = l.params;
            l.tensor_dim0[0] = m->vocab;
        }
        if (!plan_model_add_layer(v, &l)) rc = -1;
        else if (chunk_layers) chunk_layers[stage / pp]++;
    }
    free(first);
    v->tied_embeddings = 0;   /* no stage holds both ends: each has its own weight */
    if (rc) plan_model_free(v);
    return rc;
}

int plan_pp_stage_view(const ModelSpec *m, int pp, int stage, ModelSpec *v) {
    TrainSpec t;
    plan_train_defaults(&t);
    t.pp = pp;
    return plan_pp_rank_view(m, &t, stage, v, NULL);
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
   isend/irecv per boundary; Narayanan et al. 2021 §2.2). Each of the rank's stages (chunks) but
   the first stage receives and each but the last sends: stage 0 and the last touch one boundary,
   the others two; each GPU of a stage sends its own copy (no scatter/gather over the tp ranks).
   Issued on the side (batched isend/irecv), the end of backward waits for them:
   the fill and drain they imply are the bubble (plan_sim.c). */
static void pp_send_recv(const StepCtx *x, Step *st) {
    int pp = plan_pp_degree(x->t), V = plan_pp_virtual(x->t), S = pp * V, r = x->v->stage;
    double bounds = 0;
    for (int k = 0; k < V; k++) {
        int s = r + k * pp;
        bounds += (s > 0) + (s < S - 1);
    }
    double each = (double)x->in.b * (double)x->in.s * (double)x->m->d_model * x->p->param_bytes;
    const ClusterSpec *c = x->full;
    int crosses = c->gpus > c->gpus_per_node && c->gpus / pp >= c->gpus_per_node;   /* pp outermost */
    static const struct { PointKind at; PhaseKind ph; } WAYS[2] = {{PT_FWD, PHASE_FORWARD}, {PT_BWD, PHASE_BACKWARD}};
    for (int w = 0; w < 2 && bounds > 0; w++) {
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

/* A rank keeps every micro-batch's saved tensors of each of its stages from that stage's forward
   to its backward: at its first backward, chunk k's forwards done so far (plan_pp_chunk_in_flight:
   1F1B min(M, pp - r), GPipe M, interleaved its warmup and one more; Narayanan et al. 2021 §2.2,
   PipeDream-Flush: at most pp micro-batches in flight under 1F1B). The account's own micro-batch
   holds one of each chunk; the others' saved bytes (chunk k's, rule_saved_activations' figure
   over its layers) are held beside it from the first forward to the end of backward. Where every
   forward runs before the first backward (GPipe; 1F1B with M <= pp - r; interleaved when its
   warmup takes all M V) that is the first backward, with no accumulated gradient (plan_step.c
   build_candidate); otherwise the steady state, with the earlier gradients. */
/* The last stage's outputs under torch's default schedule.step(return_outputs=True): each
   micro-batch's output (the logits, b x s x V in their dtype) is appended to stage.output_chunks
   in its forward (stage.py forward_one_chunk) and kept until the next step() clears them
   (clear_runtime_states); step() then returns torch.cat of them (schedules.py _merge_outputs).
   While a micro-batch is in flight its output is among its saved tensors (the head's logits);
   after its backward only output_chunks holds it. So beside the account's micro-batch: the
   outputs of the micro-batches already done (M less the last stage's in flight, held from the
   start of the rank's forwards), those of the other in-flight ones once backward ends, and the
   merge's M outputs for a moment at the end of backward (measured, CPU ranks: 1F1B M = 2 and 4,
   interleaved M = 4, GPipe M = 4 with return_outputs on and off: docs/formulas.md "Pipeline
   parallel"). torchtitan passes return_outputs=False (--pp-return-outputs off): none. */
static void pp_outputs(const StepCtx *x, Step *st) {
    double O = x->t->pp_drop_outputs ? 0 : plan_act_logits_bytes(x->m, x->t, &x->in);
    if (O <= 0) return;
    int M = plan_pp_microbatches(x->t), last = x->v->pp_chunk_in_flight[x->v->pp_chunks - 1];
    if (M > last)
        step_hold(st, RULE_PP_OUTPUTS, TERM_ACTIVATIONS, pt(x, PT_FWD, 0), AT_BEFORE, pt(x, PT_END, 0), AT_AFTER,
                  (M - last) * O);
    if (last > 1)
        step_hold(st, RULE_PP_OUTPUTS, TERM_ACTIVATIONS, pt(x, PT_BWD, 0), AT_AFTER, pt(x, PT_END, 0), AT_AFTER,
                  (last - 1) * O);
    step_at(st, RULE_PP_OUTPUTS, TERM_TRANSIENT, pt(x, PT_REDUCE1, 0), M * O);
}

void rule_pp(const StepCtx *x, Step *st) {
    if (x->v->stage < 0 || x->L == 0) return;
    pp_send_recv(x, st);
    pp_outputs(x, st);
    if (x->v->in_flight <= 1) return;
    /* one micro-batch's saved bytes on each chunk: what the account's saved-activations rule holds
       at the chunk's layers (read from the account, not computed again) */
    double a[PLAN_PP_MAX_VIRTUAL] = {0}, extra = 0, own = 0;
    for (int e = 0; e < st->n_mem; e++) {
        if (st->mem[e].rule != RULE_SAVED_ACTS || st->mem[e].bytes <= 0) continue;
        int layer = 0, k = 0;
        plan_step_point_kind(x->L, st->mem[e].point, &layer);
        for (int end = x->v->pp_chunk_layers[0]; k < x->v->pp_chunks - 1 && layer >= end; end += x->v->pp_chunk_layers[++k]) {}
        a[k] += st->mem[e].bytes;
    }
    for (int k = 0; k < x->v->pp_chunks; k++) {
        extra += (double)x->v->pp_chunk_in_flight[k] * a[k];
        own += a[k];
    }
    if (extra - own > 0)
        step_hold(st, RULE_PP_IN_FLIGHT, TERM_ACTIVATIONS, pt(x, PT_FWD, 0), AT_BEFORE, pt(x, PT_BWD, 0), AT_AFTER,
                  extra - own);
}

/* ---- the dimension's row ---- */

static int pp_on(const ModelSpec *m, const TrainSpec *t) { (void)m; return plan_pp_degree(t) > 1; }

/* The candidate views: rank 0 (the embedding, the most micro-batches in flight), the last rank
   (the head and the loss) and, with more than two ranks, the middle rank with the most blocks
   (an uneven split loads the middle ranks), each a model of its own on gpus / pp data-parallel
   ranks; the builder keeps the most loaded, whose memory and micro-steps the plan is (the
   simulated step's bubble is that of equal ranks: plan_sim.c). */
static int pp_view(RankView *v, RankView *out, int max) {
    int pp = plan_pp_degree(&v->t);
    if (pp == 1) return 1;
    int ranks[3] = {0, pp - 1, -1}, n = 0, nr = 2;
    if (pp > 2) {   /* the middle rank with the most blocks */
        int best = -1, r_best = 1;
        for (int r = 1; r < pp - 1; r++) {
            ModelSpec mv;
            if (plan_pp_rank_view(&v->m, &v->t, r, &mv, NULL)) return -1;
            if (mv.n_layer > best) { best = mv.n_layer; r_best = r; }
            plan_model_free(&mv);
        }
        ranks[nr++] = r_best;
    }
    for (int k = 0; k < nr && n < max; k++) {
        RankView *o = &out[n];
        *o = *v;
        if (plan_pp_rank_view(&v->m, &v->t, ranks[k], &o->m, o->pp_chunk_layers)) {
            for (int j = 0; j < n; j++) plan_model_free(&out[j].m);
            return -1;
        }
        o->own_m = 1;
        plan_pp_cluster(&v->dp, pp, &o->dp);
        o->pp = pp;
        o->stage = ranks[k];
        o->pp_chunks = plan_pp_virtual(&v->t);
        o->in_flight = plan_pp_chunk_in_flight(&v->t, ranks[k], o->pp_chunk_in_flight);
        /* every forward runs before the rank's first backward (GPipe; 1F1B with M <= pp - r;
           interleaved when the warmup takes them all): that backward is the peak's, and no
           gradient has accumulated yet. The memory is the account of a step without
           accumulation; the collectives and the compute stay those of M micro-steps (plan_step.c
           builds both) */
        o->mem_one_micro = o->in_flight == plan_pp_microbatches(&v->t) * o->pp_chunks && o->in_flight > 1;
        n++;
    }
    return n;
}

/* What a zero1 row beside the pipeline is (the header's line and the row's JSON "estimate" say
   the same); NULL for every other row, and under --tp, whose line says it for zero1 and zero2
   alike. */
static const char *pp_zero_estimate(const Step *st) {
    if (!st || st->view.pp <= 1 || st->view.tp > 1 || !plan_strategy_is_deepspeed(st->view.sk)) return NULL;
    return "zero1 beside the pipeline: the stage's share sharded over its data-parallel group, as Megatron-DeepSpeed "
           "runs it; an estimate (no CPU-rank run checks it: bench/torch/pp_probe.py runs torch's pipelining)";
}

static void pp_header(FILE *f, PlanHeaderSlot slot, const ModelSpec *m, const TrainSpec *t, const ClusterSpec *c,
                      const Step *const *rows, int n_rows) {
    if (slot != HEADER_AFTER_TRAIN || plan_pp_degree(t) == 1) return;
    int pp = plan_pp_degree(t), tp = plan_tp_degree(t), M = plan_pp_microbatches(t), V = plan_pp_virtual(t);
    long long dp = (long long)(c->gpus / tp / pp);
    char split[96] = "split evenly";
    if (t->pp_less_first || t->pp_less_last)
        snprintf(split, sizeof split, "split as torchtitan does with the embedding as %d blocks and the head as %d",
                 t->pp_less_first, t->pp_less_last);
    char sched[64];
    if (V > 1) snprintf(sched, sizeof sched, "interleaved, %d stages per rank", V);
    else snprintf(sched, sizeof sched, "%s", plan_pp_schedule_name(t->pp_schedule));
    fprintf(f, "# pipeline parallel: pp %d, schedule %s, the blocks %s over %d stages, %d micro-batches per step (the "
            "grad-accum above), the strategies on %lld data-parallel ranks (gpus / (tp x pp)), global batch %lld; memory "
            "is the most loaded rank's (rank 0: the embedding and the most micro-batches in flight; the last: the head "
            "and the loss; the middle rank with the most blocks), time that rank's with the bubble of equal ranks, (pp-1)/(%sM+pp-1) "
            "= %.1f%% of the step; memory checked on CPU ranks for gpt2-mini (bench/torch/pp_probe.py), "
            "bubble and send/recv closed forms, not measured (docs/formulas.md \"Pipeline parallel\")\n", pp, sched, split,
            pp * V, M, dp, (long long)t->micro_batch * M * dp, V > 1 ? "V " : "", 100.0 * (pp - 1) / (V * M + pp - 1));
    (void)m;
    fprintf(f, "# pipeline rank planned (the most loaded):");
    for (int i = 0; i < n_rows; i++)
        if (rows[i] && !rows[i]->failed)
            fprintf(f, " %s rank %d of %d (%d %s in flight);", plan_strategy(rows[i]->view.sk)->name,
                    rows[i]->view.stage, pp, rows[i]->view.in_flight, V > 1 ? "stage forwards" :
                    rows[i]->view.in_flight == 1 ? "micro-batch" : "micro-batches");
    fprintf(f, "\n");
    for (int i = 0; i < n_rows; i++)
        if (pp_zero_estimate(rows[i])) {
            fprintf(f, "# %s\n", pp_zero_estimate(rows[i]));
            break;
        }
}

static void pp_json(cJSON *model, cJSON *train, const ModelSpec *m, const TrainSpec *t, const ClusterSpec *c) {
    (void)model; (void)m;
    if (plan_pp_degree(t) == 1) return;   /* only then, as for tp */
    cJSON_AddNumberToObject(train, "pp", t->pp);
    cJSON_AddStringToObject(train, "pp_schedule", plan_pp_schedule_name(t->pp_schedule));
    cJSON_AddNumberToObject(train, "pp_virtual", plan_pp_virtual(t));
    cJSON_AddNumberToObject(train, "pp_less_first", t->pp_less_first);
    cJSON_AddNumberToObject(train, "pp_less_last", t->pp_less_last);
    cJSON_AddBoolToObject(train, "pp_return_outputs", !t->pp_drop_outputs);
    cJSON_AddNumberToObject(train, "microbatches", plan_pp_microbatches(t));
    cJSON_AddNumberToObject(train, "pp_data_parallel", (double)(c->gpus / plan_tp_degree(t) / t->pp));
    cJSON_AddStringToObject(train, "pp_memory_source", "closed form; checked on 2 CPU ranks for gpt2-mini (even, uneven "
                            "and interleaved splits: bench/torch/pp_check.py)");
    cJSON_AddStringToObject(train, "pp_time_source", "closed form (the most loaded rank's micro-steps, the bubble of equal ranks), not measured");
}

/* The stage a strategy's memory is of. */
static void pp_row_json(cJSON *o, const Step *st) {
    if (st->view.pp <= 1) return;
    cJSON_AddNumberToObject(o, "pp_stage", st->failed ? -1 : st->view.stage);
    cJSON_AddNumberToObject(o, "pp_in_flight", st->failed ? 0 : st->view.in_flight);
    if (pp_zero_estimate(st)) cJSON_AddStringToObject(o, "estimate", pp_zero_estimate(st));
}

static int pp_auto_on(const TrainSpec *t) { return t->pp < 0; }

/* --pp auto: pp = 1 and each divisor of the model's blocks with tp x pp dividing the GPUs, 1F1B,
   the fewest micro-batches M >= pp the global batch allows (M = pp without one), the strategies
   of plan_pp_strategies, no offload; the simpler first. */
static int pp_settings(const ModelSpec *m, const TrainSpec *t, const ClusterSpec *c, const AutoSpec *a,
                       DimSetting *out, int max) {
    const unsigned pp_ok = plan_pp_strategies();
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
