/* plan_dim_cp.c — context parallelism as one dimension (plan_dim_cp.h): the check and its
 * refusals, one rank's view (its seq / cp tokens of every sequence), the ring attention's
 * collectives, buffers and compute (the rules: closed forms from torch 2.15's source, estimates),
 * the header and JSON lines. docs/formulas.md "Context parallel". */
#include "plan_dim_cp.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <string.h>

#include "plan_cost.h"
#include "plan_dim_ft.h"
#include "plan_step_internal.h"

int plan_cp_degree(const TrainSpec *t) { return t->cp > 1 ? t->cp : 1; }

static int64_t full_seq(const ModelSpec *m, const TrainSpec *t) { return t->seq > 0 ? t->seq : m->max_seq; }

int plan_cp_check(const ModelSpec *m, const TrainSpec *t, const ClusterSpec *c, StrategyKind s, char *msg,
                  size_t len) {
    int cp = plan_cp_degree(t);
    if (cp == 1) return 0;
    if (s != STRAT_FSDP_FULL || t->fsdp_impl == 1) {
        snprintf(msg, len, "--cp %d with --strategy %s%s: context parallel is planned with fsdp-full (FSDP2 over the "
                 "data-parallel and context-parallel ranks together, as torchtitan's dp_shard_cp mesh)", cp,
                 plan_strategy(s)->name, s == STRAT_FSDP_FULL ? " --fsdp 1" : "");
        return -1;
    }
    if (m->arch != ARCH_DECODER || m->n_head <= 0) {
        snprintf(msg, len, "--cp %d: %s is not a decoder-only transformer; ring attention is planned for causal decoders",
                 cp, m->name);
        return -1;
    }
    if (t->attn != ATTN_SDPA) {
        snprintf(msg, len, "--cp %d with --attn %s: ring attention replaces SDPA's kernels (valid: --attn sdpa)", cp,
                 plan_attn_name(t->attn));
        return -1;
    }
    int64_t s_len = full_seq(m, t);
    if (s_len % (2 * cp)) {
        snprintf(msg, len, "--cp %d: the sequence (%lld) must divide into 2 x %d chunks (the load balancer gives each "
                 "rank two of them)", cp, (long long)s_len, cp);
        return -1;
    }
    for (int i = 0; i < m->n_layers; i++)
        if (m->layers[i].attn_window > 0 || m->block.attn_softcap > 0) {
            snprintf(msg, len, "--cp %d: %s has %s attention, which ring attention's causal kernels do not run; plan "
                     "it without --cp", cp, m->name, m->block.attn_softcap > 0 ? "soft-capped" : "sliding-window");
            return -1;
        }
    int64_t dp = c->gpus / (t->tp > 1 ? t->tp : 1) / (t->pp > 1 ? t->pp : 1);
    if (dp % cp) {
        snprintf(msg, len, "--cp %d must divide the %lld GPUs left by tp and pp (the context-parallel ranks are a group "
                 "of them)", cp, (long long)dp);
        return -1;
    }
    if (t->act_ckpt == CKPT_OP || t->act_ckpt == CKPT_SELECTIVE) {
        snprintf(msg, len, "--cp %d with --act-ckpt %s: the policy's saved ops under ring attention are not modelled "
                 "(valid: none, full, every:N)", cp, plan_ckpt_name(t->act_ckpt));
        return -1;
    }
    if (t->offload != OFFLOAD_NONE || plan_finetune_on(&t->ft) || t->impl != IMPL_PYTORCH) {
        snprintf(msg, len, "--cp %d: planned for full training on the GPU with PyTorch (not with CPU offload, --lora, "
                 "--freeze or --impl engine)", cp);
        return -1;
    }
    return 0;
}

/* ---- the rules: ring attention per attention layer (torch 2.15 _context_parallel/_attention.py,
   rotate method "allgather", load balance on, convert_to_f32), closed forms, not measured ---- */

/* Elements of one token's keys and values as SDPA gets them: torchtitan repeats the KV heads to
   the query heads before SDPA (repeat_kv), and latent attention has keys of nope + rope dims and
   values of v dims per head. */
static double kv_per_token(const ModelSpec *m) {
    double a = m->n_head;
    if (m->mla.kv_rank > 0) return a * (double)(m->mla.nope_dim + m->mla.rope_dim + m->mla.v_dim);
    return 2 * a * (double)m->d_head;
}

static void cp_coll(const StepCtx *x, Step *st, int point, CollKind op, PhaseKind ph, double count, double each) {
    if (count <= 0 || each <= 0) return;
    StepXfer *e = step_xfer(st, RULE_CP_RING, XFER_COLL, point);
    if (!e) return;
    e->op = (uint8_t)op;
    e->purpose = PURPOSE_CP_KV;
    e->phase = (uint8_t)ph;
    e->sched = SCHED_SYNC_BEFORE;    /* the attention kernels wait for the keys and values */
    e->micro = MICRO_EVERY;
    e->count = count;
    e->payload = count * each;
    e->group = x->v->cp;
    /* torchtitan's mesh order (pp, dp_replicate, dp_shard, cp, tp): a cp group spans tp x cp ranks */
    e->crosses = (int64_t)x->v->cp * x->v->tp > x->full->gpus_per_node;
}

/* Forward: _AllGatherRotater gathers cat(k, v) of every shard once (all_gather_single: the full
   sequence's keys and values), the SDPA blocks merged by _SDPAMerger into an fp32 output and
   logsumexp. Backward (_templated_ring_attention_backward): the keys and values gathered again,
   fp32 accumulators for dq, dk and dv, and the dk, dv of each step passed to the next rank
   (_AllToAllRotater, permute_tensor: a send/recv to one peer) cp times. A checkpointed block runs
   its forward again, the gather with it. Memory beside the block's saved tensors (which the view's
   seq / cp tokens give): forward, the local cat and the gathered buffer at the compute dtype and
   the fp32 merged output with one temporary of its update; backward, the same two buffers, dq, dk,
   dv in fp32 and the dk, dv in flight both ways. Compute: a rank's queries see every key, so its
   attention costs 1 / cp of the whole sequence's (the balanced causal split), not (1 / cp)^2: the
   block is priced at the full sequence over cp, the difference added. */
static void rule_cp(const StepCtx *x, Step *st) {
    int cp = x->v->cp;
    if (cp <= 1) return;
    const ModelSpec *m = x->m;
    double b = (double)x->in.b, sl = (double)x->in.s, X = x->p->act_bytes;
    double kv = kv_per_token(m), q = (double)m->n_head * (double)(m->mla.kv_rank > 0 ? m->mla.v_dim : m->d_head);
    double local = b * sl * kv, whole = local * cp;   /* elements */
    TrainSpec tf = *x->t;
    tf.seq = (int64_t)(sl * cp);
    double fs = 0, bs = 0, ff = 0, fl = 0, vs = 0, vb = 0;
    int priced = -1, priced_rc = 0;
    for (int i = 0; i < x->L; i++) {
        if (m->layers[i].kind != LAYER_BLOCK) continue;
        int again = plan_act_checkpointed(m, x->t, i);
        int f = pt(x, PT_FWD, i), bw = pt(x, PT_BWD, i);
        cp_coll(x, st, f, COLL_ALL_GATHER, PHASE_FORWARD, 1, whole * X);
        cp_coll(x, st, bw, COLL_ALL_GATHER, PHASE_BACKWARD, 1 + again, whole * X);
        cp_coll(x, st, bw, COLL_SEND_RECV, PHASE_BACKWARD, cp, local * 4);
        step_at(st, RULE_CP_RING, TERM_TRANSIENT, f, (local + whole) * X + 2 * b * sl * q * 4);
        step_at(st, RULE_CP_RING, TERM_TRANSIENT, bw, (local + whole) * X + (b * sl * q + 3 * local) * 4);
        if (st->built_for & PLAN_STEP_MEMORY) continue;   /* the max-batch search's probes: no work */
        if (priced < 0 || again != priced_rc || !plan_layer_same(&m->layers[i], &m->layers[priced])) {
            plan_layer_seconds(m, i, &tf, x->c, &fs, &bs);
            plan_layer_seconds(m, i, x->t, x->c, &vs, &vb);
            ff = plan_layer_fwd_flops(m, i, &tf);
            fl = plan_layer_fwd_flops(m, i, x->t);
            priced = i;
            priced_rc = again;
        }
        double ef = fs / cp - vs, eb = bs / cp - vb, efl = ff / cp - fl;
        step_work(st, RULE_CP_RING, f, WORK_BATCH, MICRO_EVERY, ef > 0 ? ef : 0, efl > 0 ? 3 * efl : 0);
        step_work(st, RULE_CP_RING, bw, WORK_BATCH, MICRO_EVERY, eb > 0 ? eb : 0, 0);
    }
}

/* ---- the dimension's row ---- */

static int cp_on(const ModelSpec *m, const TrainSpec *t) { (void)m; return plan_cp_degree(t) > 1; }

/* One rank's tokens: seq / cp of every sequence, on the same data-parallel cluster (FSDP2 shards
   over the dp x cp ranks together); one communicator more, the ring's. */
static int cp_view(RankView *v, RankView *out, int max) {
    (void)out; (void)max;
    int cp = plan_cp_degree(&v->t);
    if (cp == 1) return 1;
    v->t.seq = full_seq(&v->m, &v->t) / cp;
    v->cp = cp;
    v->comms += 1;
    return 1;
}

static const char *const CP_SOURCE = "estimate: closed forms from torch 2.15 torch/distributed/tensor/experimental/"
                                     "_context_parallel/_attention.py (ring attention runs CUDA kernels only; not "
                                     "measured)";

static void cp_header(FILE *f, PlanHeaderSlot slot, const ModelSpec *m, const TrainSpec *t, const ClusterSpec *c,
                      const Step *const *rows, int n_rows) {
    (void)c; (void)rows; (void)n_rows;
    int cp = plan_cp_degree(t);
    if (slot != HEADER_AFTER_TRAIN || cp == 1) return;
    long long s = (long long)full_seq(m, t);
    fprintf(f, "# context parallel: cp %d (torch's context_parallel ring attention, allgather rotation, load-balanced): "
            "each rank holds %lld of the %lld tokens of every sequence; per attention layer one all-gather of the keys "
            "and values forward, one more and %d fp32 send/recv of their gradients backward; a sequence is spread over "
            "%d GPUs, so the data-parallel replicas are gpus / (tp x pp x %d); the ring's memory, collectives and "
            "compute are ESTIMATES (closed forms from torch 2.15's source: its ring attention runs CUDA kernels only, "
            "not measured on CPU ranks; docs/formulas.md \"Context parallel\")\n", cp, s / cp, s, cp, cp, cp);
}

static void cp_json(cJSON *model, cJSON *train, const ModelSpec *m, const TrainSpec *t, const ClusterSpec *c) {
    (void)model; (void)c;
    int cp = plan_cp_degree(t);
    if (cp == 1) return;   /* only then: the records of other plans stay as they were */
    cJSON_AddNumberToObject(train, "cp", cp);
    cJSON_AddNumberToObject(train, "cp_seq_per_rank", (double)(full_seq(m, t) / cp));
    cJSON_AddStringToObject(train, "cp_source", CP_SOURCE);
}

const PlanDim plan_dim_cp = {
    .name = "cp",
    .not_planned = "context parallel does not apply to this setup",
    .on = cp_on,
    .check = plan_cp_check,
    .view = cp_view,
    .rule = rule_cp,
    .header = cp_header,
    .json = cp_json,
};
