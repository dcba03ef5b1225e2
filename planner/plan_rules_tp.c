/* plan_rules_tp.c — tensor and sequence parallelism's own rules (plan_tp.h): the collectives
 * PyTorch's parallelize_module plan issues on the tp group, and the one memory effect the
 * rank's share of the model does not show (a vocab-sharded embedding's replicated gradient).
 * Counts, payloads and placements as measured on gloo CPU ranks with torch 2.15
 * (bench/torch/harness.py --tp; docs/formulas.md "Tensor and sequence parallel"). */
#include <math.h>

#include "plan_step_internal.h"

static StepXfer *tp_coll(const StepCtx *x, Step *st, int point, PlanCollOp op, CollPurpose what,
                         CommPhase ph, double count, double each) {
    if (count <= 0 || each <= 0) return NULL;
    StepXfer *e = step_xfer(st, RULE_TP_COLLECTIVES, XFER_COLL, point);
    if (!e) return NULL;
    e->op = (uint8_t)op;
    e->purpose = (uint8_t)what;
    e->phase = (uint8_t)ph;
    e->sched = SCHED_SYNC_AFTER;     /* the next op needs the result: on the critical path */
    e->micro = MICRO_EVERY;
    e->count = count;
    e->payload = count * each;
    e->group = x->tp;
    e->crosses = 0;                  /* a tp group stays inside a node */
    return e;
}

/* The SequenceParallel norms' tensors of layer l (their gradients are partial sums over the
   sequence shards): a block's two norms (LayerNorm: weight and bias; RMSNorm: weight), a final
   norm's tensors. A row-parallel bias, also replicated, is added to the reduced output inside
   RowwiseParallel and gets a whole gradient (measured: GPT-2's c_proj biases). Returns the
   tensors, each of h elements. */
static double sp_norm_tensors(const ModelSpec *m, const LayerSpec *l) {
    if (l->kind == LAYER_NORM) return l->n_tensors;
    if (l->kind != LAYER_BLOCK) return 0;
    return 2.0 * (m->norm == NORM_LAYERNORM ? 2 : 1);
}

void rule_tp(const StepCtx *x, Step *st) {
    if (x->tp <= 1) return;
    const ModelSpec *m = x->m;
    double X = x->p->act_bytes, b = (double)x->in.b, s = (double)x->in.s;
    /* one activation of the residual stream, at its dtype (the parameters': the embeddings' and
       the norms' outputs, the gradients of the column-parallel inputs), and at the compute
       dtype (a row-parallel linear's output under autocast, its gradient) */
    double bsR = b * s * (double)m->d_model * x->p->param_bytes, bsX = b * s * (double)m->d_model * X;
    int sp = x->t->sp != 0, root = plan_tp_root_sharded(m);
    int emb = -1, head = -1;
    for (int i = 0; i < x->L; i++) {
        if (m->layers[i].kind == LAYER_EMBED && emb < 0) emb = i;
        if (m->layers[i].kind == LAYER_HEAD) head = i;
    }
    /* Per block (Megatron's f and g, Shoeybi et al. 2019; Korthikanti et al. 2022 for SP): the
       attention's and the MLP's row-parallel outputs are reduced, and the gradients of their
       column-parallel inputs in backward; without SP all-reduces, with SP a reduce-scatter (the
       output back to sequence shards) and an all-gather (the input from them) each way. */
    for (int i = 0; i < x->L; i++) {
        if (m->layers[i].kind != LAYER_BLOCK) continue;
        /* a checkpointed block runs its forward again in backward, its collectives with it
           (Korthikanti et al. 2022 §4), up to the last tensor backward needs: non-reentrant
           checkpointing stops the recomputation there (torch/utils/checkpoint.py early stop), so
           the MLP output's reduction is not repeated (measured: SP + 2 all-gathers, + 1
           reduce-scatter per block) */
        int again = plan_act_checkpointed(m, x->t, i);
        if (!sp) {
            tp_coll(x, st, pt(x, PT_FWD, i), PCOLL_ALL_REDUCE, PURPOSE_TP_ACTS, CPHASE_FORWARD, 2, bsX);
            tp_coll(x, st, pt(x, PT_BWD, i), PCOLL_ALL_REDUCE, PURPOSE_TP_ACTS, CPHASE_BACKWARD, 2, bsR);
            tp_coll(x, st, pt(x, PT_BWD, i), PCOLL_ALL_REDUCE, PURPOSE_TP_ACTS, CPHASE_BACKWARD, again, bsX);
        } else {
            tp_coll(x, st, pt(x, PT_BWD, i), PCOLL_ALL_GATHER, PURPOSE_TP_ACTS, CPHASE_BACKWARD, 2 * again, bsR);
            tp_coll(x, st, pt(x, PT_BWD, i), PCOLL_REDUCE_SCATTER, PURPOSE_TP_ACTS, CPHASE_BACKWARD, again, bsX);
            /* forward: gather the norms' outputs, scatter the row-parallel outputs; backward the
               mirror: gather the outputs' gradients, scatter the inputs' */
            tp_coll(x, st, pt(x, PT_FWD, i), PCOLL_ALL_GATHER, PURPOSE_TP_ACTS, CPHASE_FORWARD, 2, bsR);
            tp_coll(x, st, pt(x, PT_FWD, i), PCOLL_REDUCE_SCATTER, PURPOSE_TP_ACTS, CPHASE_FORWARD, 2, bsX);
            tp_coll(x, st, pt(x, PT_BWD, i), PCOLL_ALL_GATHER, PURPOSE_TP_ACTS, CPHASE_BACKWARD, 2, bsX);
            tp_coll(x, st, pt(x, PT_BWD, i), PCOLL_REDUCE_SCATTER, PURPOSE_TP_ACTS, CPHASE_BACKWARD, 2, bsR);
        }
    }
    /* The root. torchtitan's plan (vocab-sharded): the embedding's partial rows are reduced
       (all-reduce; SP: reduce-scatter to sequence shards, whose backward all-gathers); the head
       takes a replicated input (SP: all-gathered, its gradient reduce-scattered; else its
       gradient all-reduced) and its vocab-sharded logits are all-gathered for the loss
       (ColwiseParallel(output_layouts=Replicate()), no loss parallel). GPT-2's replicated root
       under SP: the embeddings' output is sliced to sequence shards (backward all-gathers) and
       the final norm's output gathered for the head (backward: a slice). */
    if (root && emb >= 0) {
        tp_coll(x, st, pt(x, PT_FWD, emb), sp ? PCOLL_REDUCE_SCATTER : PCOLL_ALL_REDUCE, PURPOSE_TP_ACTS,
                CPHASE_FORWARD, 1, bsR);
        if (sp) tp_coll(x, st, pt(x, PT_BWD, emb), PCOLL_ALL_GATHER, PURPOSE_TP_ACTS, CPHASE_BACKWARD, 1, bsR);
    } else if (sp && emb >= 0) {
        tp_coll(x, st, pt(x, PT_BWD, emb), PCOLL_ALL_GATHER, PURPOSE_TP_ACTS, CPHASE_BACKWARD, 1, bsR);
    }
    if (head >= 0) {
        if (sp) tp_coll(x, st, pt(x, PT_FWD, head), PCOLL_ALL_GATHER, PURPOSE_TP_ACTS, CPHASE_FORWARD, 1, bsR);
        if (root) {
            tp_coll(x, st, pt(x, PT_FWD, head), PCOLL_ALL_GATHER, PURPOSE_TP_LOGITS, CPHASE_FORWARD, 1,
                    b * s * (double)m->vocab * X);
            tp_coll(x, st, pt(x, PT_BWD, head), sp ? PCOLL_REDUCE_SCATTER : PCOLL_ALL_REDUCE, PURPOSE_TP_ACTS,
                    CPHASE_BACKWARD, 1, bsR);
        }
    }
    /* SP: replicated parameters used on sequence shards get partial gradients (DTensor Partial).
       Under FSDP2 each is all-reduced once in backward; without it the gradient stays partial
       and torch's foreach AdamW all-reduces it at each use in step() (lerp_ and addcmul_(g, g):
       3 per tensor; measured). */
    if (sp) {
        int fsdp = x->fsdp && x->N > 1;
        for (int i = 0; i < x->L; i++) {
            double n = sp_norm_tensors(m, &m->layers[i]);
            if (n <= 0) continue;
            double each = (double)m->d_model * x->p->grad_bytes;
            if (fsdp)
                tp_coll(x, st, pt(x, PT_BWD, i), PCOLL_ALL_REDUCE, PURPOSE_TP_REPLICA_GRADS, CPHASE_BACKWARD, n, each);
            else
                tp_coll(x, st, pt(x, PT_STEP, 0), PCOLL_ALL_REDUCE, PURPOSE_TP_REPLICA_GRADS, CPHASE_STEP, 3 * n, each);
        }
    }
    /* Gathering the vocab-sharded logits (Shard(-1) -> Replicate) all-gathers the local shards
       (b·s·V/tp each) into a dim-0 buffer and concatenates it into the last dim (the gathered
       logits, which the loss rules count): the local shard is still live beside them at the
       loss's forward (measured: aten::mm's output; the gather's buffer is freed by the cat on
       the moments the runs resolve). */
    if (root && head >= 0) {
        double bsv = b * s * (double)m->vocab * X;
        step_at(st, RULE_TP_LOGITS_GATHER, TERM_TRANSIENT, pt(x, PT_LOSS_FWD, 0), bsv / x->tp);
    }
    /* torch's foreach AdamW refuses a list mixing DTensors and plain tensors, so the parameters
       parallelize_module leaves plain (the norms without SP; GPT-2's replicated embeddings) are a
       parameter group of their own (the harness, memplan auto --emit torch); foreach runs per
       group, so its state-sized temporary is the larger group's, not all of them (measured:
       gpt2-mini tp2 SP, aten::sqrt 1,593,344 B = the DTensor group). Under FSDP2 every parameter
       is a DTensor: one group. */
    if (!(x->fsdp && x->N > 1) && x->o->foreach_temp && x->p->master_bytes == 0 && x->opt_on_gpu) {
        double plain = 0, all = x->z.psi;
        for (int i = 0; i < x->L; i++) {
            const LayerSpec *l = &m->layers[i];
            if (l->kind == LAYER_BLOCK && !sp) plain += sp_norm_tensors(m, l) * (double)m->d_model;
            else if (l->kind == LAYER_NORM && !sp) plain += (double)l->params;
            else if (l->kind == LAYER_EMBED && !root) plain += (double)l->params;
        }
        if (plain > 0)
            step_at(st, RULE_FOREACH_TEMP, TERM_TRANSIENT, pt(x, PT_STEP, 0),
                    (fmax(plain, all - plain) - all) * x->p->state_bytes);
    }
    /* A RowwiseParallel embedding's weight gradient comes back Replicate: the full V x h on
       every rank (measured, torch 2.15: embedding_dense_backward over the replicated output
       gradient), where the weight is V/tp x h. Kept as the parameter's .grad without FSDP;
       FSDP2's reduce-scatter takes the shard of it. */
    if (root && emb >= 0 && !(x->fsdp && x->N > 1)) {
        double extra = (double)m->layers[emb].params * (x->tp - 1) * x->p->grad_bytes;
        step_hold(st, RULE_TP_EMBED_GRAD, TERM_GRADS, pt(x, PT_BWD, emb), AT_BEFORE, pt(x, PT_END, 0), AT_AFTER,
                  extra);
        st->ms_grads += extra;
    }
}
