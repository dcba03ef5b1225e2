/* plan_dim_tp.c — tensor and sequence parallelism as one dimension (plan_dim_tp.h): the check and
 * its refusals, one rank's share of the model (the view), the TP collectives and the memory
 * effects the share does not show (the rules), the header and JSON lines, the degrees auto
 * tries, and the torch snippet --emit prints. docs/formulas.md "Tensor and sequence parallel". */
#include "plan_dim_tp.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "plan_auto.h"
#include "plan_dim_ft.h"
#include "plan_dim_moe.h"
#include "plan_dim_pp.h"
#include "plan_step_internal.h"

int plan_tp_degree(const TrainSpec *t) { return t->tp > 1 ? t->tp : 1; }

int plan_tp_root_sharded(const ModelSpec *m) { return !m->tied_embeddings; }

/* ddp and fsdp-full as torchtitan runs them; zero1 and zero2 as Megatron-DeepSpeed and InternLM
   run ZeRO under tensor parallel (the optimizer states, and for zero2 the gradients, sharded over
   the data-parallel group of each tp rank); ZeRO-3 and SHARD_GRAD_OP are not planned under it. */
unsigned plan_tp_strategies(void) {
    return 1u << STRAT_DDP | 1u << STRAT_ZERO1 | 1u << STRAT_ZERO2 | 1u << STRAT_FSDP_FULL;
}

/* Tensor parallel of MoE blocks, as torchtitan plans it (models/llama4/infra/parallelize.py
   apply_moe_ep_tp): the block takes the sequence shards and returns them (PrepareModuleInputOutput
   Shard(1) -> Replicate, Partial -> Shard(1)), so sequence parallel; the routed experts split their
   hidden width over tp (distributed/expert_parallel.py TensorParallel: w1, w3 Shard(1), w2
   Shard(2); with --ep, ExpertTensorParallel on the [ep, etp] mesh, etp = tp); the shared expert
   column/row-parallel; the router replicated (NoParallel). Experts that take every token
   (transformers' Llama 4) have no such plan. */
static int moe_tp_check(const ModelSpec *m, const TrainSpec *t, int tp, char *msg, size_t len) {
    const MoeSpec *e = &m->moe;
    if (e->router == MOE_ROUTER_ALL_EXPERTS) {
        snprintf(msg, len, "--tp %d: %s's experts take every token (transformers' Llama 4, which has no tensor-parallel "
                 "plan memplan models); tensor parallel of MoE blocks is torchtitan's, whose experts take their routed "
                 "tokens: plan torchtitan's Llama 4 (tests/data/torchtitan/llama4_17bx16e.json)", tp, m->name);
        return -1;
    }
    if (!t->sp) {
        snprintf(msg, len, "--tp %d of %s's MoE blocks needs --sp on (torchtitan's MoE plan takes and returns sequence "
                 "shards: PrepareModuleInputOutput Shard(1))", tp, m->name);
        return -1;
    }
    if (!plan_moe_experts_known(m)) {
        snprintf(msg, len, "--tp %d: %s's routed-expert tensors are not known (a model JSON without "
                 "tensor_experts); tensor parallel splits them apart from the router", tp, m->name);
        return -1;
    }
    if (e->d_ff_expert % tp || e->d_ff_shared % tp) {
        snprintf(msg, len, "--tp %d must divide %s's expert width (%lld) and shared-expert width (%lld): tensor "
                 "parallel splits each expert's hidden width", tp, m->name, (long long)e->d_ff_expert,
                 (long long)e->d_ff_shared);
        return -1;
    }
    return 0;
}

int plan_tp_check(const ModelSpec *m, const TrainSpec *t, const ClusterSpec *c, StrategyKind s,
                  char *msg, size_t len) {
    int tp = plan_tp_degree(t);
    if (tp == 1) {
        if (t->sp) { snprintf(msg, len, "--sp on splits the sequence over a tensor-parallel group: it needs --tp 2 or more"); return -1; }
        if (t->loss_parallel) {
            snprintf(msg, len, "--loss-parallel on computes the loss on vocab-sharded logits: it needs --tp 2 or more");
            return -1;
        }
        return 0;
    }
    /* first: the CLI reads this sentence before a model is loaded */
    if (!(plan_tp_strategies() & (1u << s))) {
        char ok[96];
        snprintf(msg, len, "--tp %d with --strategy %s: tensor parallel is planned with %s (on the data-parallel "
                 "dimension of a 2-D mesh)", tp, plan_strategy(s)->name, plan_strategy_list(plan_tp_strategies(), ok, sizeof ok));
        return -1;
    }
    if (t->loss_parallel && !plan_tp_root_sharded(m)) {
        snprintf(msg, len, "--loss-parallel on: %s's tied embedding and head stay replicated under --tp (no "
                 "vocab-sharded logits to compute the loss on); give --loss-parallel off", m->name);
        return -1;
    }
    if (c->gpus_per_node % tp || c->gpus % tp) {
        snprintf(msg, len, "--tp %d must divide the GPUs per node (%lld) and the GPUs (%lld): a tensor-parallel "
                 "group stays inside a node", tp, (long long)c->gpus_per_node, (long long)c->gpus);
        return -1;
    }
    if (t->offload != OFFLOAD_NONE) {
        snprintf(msg, len, "--tp %d with CPU offload: not planned (tensor parallel runs with the model states on the GPU)", tp);
        return -1;
    }
    if (s == STRAT_FSDP_FULL && t->fsdp_impl == 1) {
        snprintf(msg, len, "--tp %d with --fsdp 1: tensor parallel is planned with FSDP2 (fully_shard on the 2-D "
                 "mesh's data-parallel dimension), as torchtitan runs it; give --fsdp 2", tp);
        return -1;
    }
    if (plan_finetune_on(&t->ft)) {
        snprintf(msg, len, "--tp %d with --lora/--freeze: tensor parallel of a partly frozen model (PEFT adapters on "
                 "sharded projections) is not planned; plan it without --tp", tp);
        return -1;
    }
    /* the blocks the TP rules were written and measured for: GPT-2's and LLaMA's (the zoo's, and
       Hugging Face configs of these families), and Llama 4's MoE blocks as torchtitan splits them
       (moe_tp_check); the newer families' extra norms, soft-caps and fused projections are not
       split by them yet */
    static const char *const FAMILIES[] = {"", "gpt2", "llama", "mistral", "llama4_text", NULL};
    if (!plan_model_family_in(m, FAMILIES)) {
        snprintf(msg, len, "--tp %d: %s (model_type %s): tensor parallel is planned for GPT-2 and LLaMA/Mistral blocks "
                 "(gpt2, llama, mistral configs and the zoo's) and torchtitan's Llama 4", tp, m->name, m->family);
        return -1;
    }
    if (t->impl != IMPL_PYTORCH) {
        snprintf(msg, len, "--tp %d: tensor parallel is PyTorch's (--impl pytorch); memplan's engine has none", tp);
        return -1;
    }
    if (m->arch != ARCH_DECODER || m->n_head <= 0 || m->d_ff <= 0 || !plan_model_tensors_known(m)) {
        snprintf(msg, len, "--tp %d: %s is not a decoder with known parameter tensors; tensor parallel "
                 "is planned for GPT-2- and LLaMA-style decoders", tp, m->name);
        return -1;
    }
    if (m->moe.n_experts > 0 && moe_tp_check(m, t, tp, msg, len)) return -1;
    int kv = m->n_kv_head > 0 ? m->n_kv_head : m->n_head;
    if (m->n_head % tp || kv % tp || m->d_ff % tp) {
        snprintf(msg, len, "--tp %d must divide %s's attention heads (%d), KV heads (%d) and MLP width (%lld)",
                 tp, m->name, m->n_head, kv, (long long)m->d_ff);
        return -1;
    }
    if (plan_tp_root_sharded(m) && m->vocab % tp) {
        snprintf(msg, len, "--tp %d must divide %s's vocabulary (%lld): the embedding and LM head are vocab-sharded",
                 tp, m->name, (long long)m->vocab);
        return -1;
    }
    return 0;
}

/* A block tensor stays whole on every rank when it is 1-D over h (a norm's weight or bias, a
   row-parallel linear's bias: RowwiseParallel replicates it) or over one head (q/k norms);
   every other tensor (2-D weights, column-parallel biases) is split. */
static int replicated(const ModelSpec *m, int64_t elems, int64_t dim0) {
    if (dim0 > 0 && dim0 != elems) return 0;
    return elems == m->d_model || elems == m->d_head;
}

int plan_tp_view(const ModelSpec *m, int tp, ModelSpec *v) {
    plan_model_init(v, m->name, m->arch);
    LayerSpec *keep = v->layers;
    *v = *m;
    v->layers = keep;
    v->n_layers = v->cap_layers = 0;
    v->n_head = m->n_head / tp;
    v->n_kv_head = (m->n_kv_head > 0 ? m->n_kv_head : m->n_head) / tp;
    v->d_ff = m->d_ff / tp;
    v->moe.d_ff_expert = m->moe.d_ff_expert / tp;   /* every expert's hidden width is split */
    v->moe.d_ff_shared = m->moe.d_ff_shared / tp;
    int root = plan_tp_root_sharded(m);
    for (int i = 0; i < m->n_layers; i++) {
        LayerSpec l = m->layers[i];
        int split_layer = l.kind == LAYER_BLOCK ||
                          (root && (l.kind == LAYER_EMBED || l.kind == LAYER_HEAD));
        if (split_layer && l.n_tensors > 0) {
            int64_t sum = 0, largest = 0, experts = 0;
            for (int k = 0; k < l.n_tensors; k++) {
                int64_t e = l.tensor_elems[k], d0 = l.tensor_dim0[k];
                int split = l.kind == LAYER_BLOCK ? !replicated(m, e, d0)
                                                  : (e % m->vocab == 0 && e / m->vocab == m->d_model);
                /* a MoE block: the routed experts keep dim 0, the expert index, and split their
                   hidden width (TensorParallel Shard(1)/Shard(2)); the router (E x h) is whole */
                int expert = k < 32 && (l.expert_mask >> k & 1u);
                if (l.kind == LAYER_BLOCK && l.expert_params > 0 && !expert && d0 == m->moe.n_experts &&
                    e == d0 * m->d_model)
                    split = 0;
                if (split) {
                    /* column split: Linear (out, in) Shard(0) (dim 0 / tp); row split: Shard(1) */
                    int64_t ne = e / tp;
                    int64_t nd = expert ? d0 : d0 > 0 && d0 % tp == 0 && (d0 != m->d_model || d0 == e) ? d0 / tp : d0;
                    if (nd > 0 && ne % nd) nd = 0;
                    l.tensor_elems[k] = ne;
                    l.tensor_dim0[k] = nd;
                    e = ne;
                }
                sum += e;
                experts += expert ? e : 0;
                if (e > largest) largest = e;
            }
            l.params = sum;
            l.largest_tensor = largest;
            if (l.expert_params > 0) l.expert_params = experts;
        }
        if (!plan_model_add_layer(v, &l)) { plan_model_free(v); return -1; }
    }
    return 0;
}

void plan_tp_cluster(const ClusterSpec *c, int tp, ClusterSpec *d) {
    *d = *c;
    d->gpus = c->gpus / tp;
    d->gpus_per_node = c->gpus_per_node / tp > 0 ? c->gpus_per_node / tp : 1;
}

/* ---- the rules: the collectives parallelize_module's plan issues on the tp group, and the one
   memory effect the rank's share does not show; counts, payloads and placements as measured on
   gloo CPU ranks with torch 2.15 (bench/torch/harness.py --tp) ---- */

static StepXfer *tp_coll(const StepCtx *x, Step *st, int point, CollKind op, CollPurpose what,
                         PhaseKind ph, double count, double each) {
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
    e->group = x->v->tp;
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

/* Block i's TP collectives (Megatron's f and g, Shoeybi et al. 2019; Korthikanti et al. 2022 for SP):
   the attention's and the MLP's row-parallel outputs are reduced, and the gradients of their
   column-parallel inputs in backward; without SP all-reduces, with SP a reduce-scatter (the
   output back to sequence shards) and an all-gather (the input from them) each way. bsR and bsX:
   one activation of the residual stream at the parameters' and at the compute dtype. */
static void tp_block_colls(const StepCtx *x, Step *st, int i, double bsR, double bsX) {
    const ModelSpec *m = x->m;
    int sp = x->t->sp != 0;
    /* a checkpointed block runs its forward again in backward, its collectives with it
       (Korthikanti et al. 2022 §4), up to the last tensor backward needs: non-reentrant
       checkpointing stops the recomputation there (torch/utils/checkpoint.py early stop), so
       the MLP output's reduction is not repeated (measured: SP + 2 all-gathers, + 1
       reduce-scatter per block) */
    int again = plan_act_checkpointed(m, x->t, i);
    /* op-level checkpointing runs the whole block again: torchtitan wraps it with
       checkpoint_wrapper(..., early_stop=False) (activation_checkpoint.py _apply_op_sac;
       ACConfig.early_stop defaults to False), so both reductions are repeated; under SP the
       reduce-scatters' outputs are cached instead (reduce_scatter_tensor is in its save
       list), the all-gathers run again (measured: llama-mini tp 2, +2 all-reduces per block
       without SP, +2 all-gathers and no reduce-scatter with it) */
    int whole = again && x->t->act_ckpt == CKPT_OP;
    if (!sp) {
        tp_coll(x, st, pt(x, PT_FWD, i), COLL_ALL_REDUCE, PURPOSE_TP_ACTS, PHASE_FORWARD, 2, bsX);
        tp_coll(x, st, pt(x, PT_BWD, i), COLL_ALL_REDUCE, PURPOSE_TP_ACTS, PHASE_BACKWARD, 2, bsR);
        tp_coll(x, st, pt(x, PT_BWD, i), COLL_ALL_REDUCE, PURPOSE_TP_ACTS, PHASE_BACKWARD, again + whole, bsX);
    } else {
        int moe = plan_moe_block(m, &m->layers[i]);
        tp_coll(x, st, pt(x, PT_BWD, i), COLL_ALL_GATHER, PURPOSE_TP_ACTS, PHASE_BACKWARD, 2 * again, bsR);
        tp_coll(x, st, pt(x, PT_BWD, i), COLL_REDUCE_SCATTER, PURPOSE_TP_ACTS, PHASE_BACKWARD, again - whole, bsX);
        /* forward: gather the norms' outputs, scatter the row-parallel outputs; backward the
           mirror: gather the outputs' gradients, scatter the inputs' (a MoE block's input
           gradient: below) */
        tp_coll(x, st, pt(x, PT_FWD, i), COLL_ALL_GATHER, PURPOSE_TP_ACTS, PHASE_FORWARD, 2, bsR);
        tp_coll(x, st, pt(x, PT_FWD, i), COLL_REDUCE_SCATTER, PURPOSE_TP_ACTS, PHASE_FORWARD, 2, bsX);
        tp_coll(x, st, pt(x, PT_BWD, i), COLL_ALL_GATHER, PURPOSE_TP_ACTS, PHASE_BACKWARD, 2, bsX);
        tp_coll(x, st, pt(x, PT_BWD, i), COLL_REDUCE_SCATTER, PURPOSE_TP_ACTS, PHASE_BACKWARD, moe ? 1 : 2, bsR);
        /* torchtitan's MoE block hands its gathered input on as a plain tensor (use_local_input):
           its gradient comes back whole, without a reduce-scatter, because each consumer that
           splits the work all-reduces its own input's gradient (DTensor.from_local(Replicate)
           .to_local(grad_placements=Partial)): the routed experts' T k rows (TensorParallel /
           ExpertTensorParallel._prepare_input), the shared expert's w1 and w3 (ColwiseParallel
           on a plain input); the router is replicated (NoParallel) */
        if (moe) {
            tp_coll(x, st, pt(x, PT_BWD, i), COLL_ALL_REDUCE, PURPOSE_TP_ACTS, PHASE_BACKWARD, 1,
                    bsX * m->moe.top_k);
            tp_coll(x, st, pt(x, PT_BWD, i), COLL_ALL_REDUCE, PURPOSE_TP_ACTS, PHASE_BACKWARD,
                    m->moe.d_ff_shared > 0 ? 2 : 0, bsX);
        }
    }
}

void rule_tp(const StepCtx *x, Step *st) {
    if (x->v->tp <= 1) return;
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
    for (int i = 0; i < x->L; i++)
        if (m->layers[i].kind == LAYER_BLOCK) tp_block_colls(x, st, i, bsR, bsX);
    /* The root. torchtitan's plan (vocab-sharded): the embedding's partial rows are reduced
       (all-reduce; SP: reduce-scatter to sequence shards, whose backward all-gathers); the head
       takes a replicated input (SP: all-gathered, its gradient reduce-scattered; else its
       gradient all-reduced) and its vocab-sharded logits are all-gathered for the loss
       (ColwiseParallel(output_layouts=Replicate()), no loss parallel). GPT-2's replicated root
       under SP: the embeddings' output is sliced to sequence shards (backward all-gathers) and
       the final norm's output gathered for the head (backward: a slice). */
    if (root && emb >= 0) {
        tp_coll(x, st, pt(x, PT_FWD, emb), sp ? COLL_REDUCE_SCATTER : COLL_ALL_REDUCE, PURPOSE_TP_ACTS,
                PHASE_FORWARD, 1, bsR);
        if (sp) tp_coll(x, st, pt(x, PT_BWD, emb), COLL_ALL_GATHER, PURPOSE_TP_ACTS, PHASE_BACKWARD, 1, bsR);
    } else if (sp && emb >= 0) {
        tp_coll(x, st, pt(x, PT_BWD, emb), COLL_ALL_GATHER, PURPOSE_TP_ACTS, PHASE_BACKWARD, 1, bsR);
    }
    int lp = root && x->t->loss_parallel;
    if (head >= 0) {
        if (sp) tp_coll(x, st, pt(x, PT_FWD, head), COLL_ALL_GATHER, PURPOSE_TP_ACTS, PHASE_FORWARD, 1, bsR);
        if (root) {
            /* loss parallel (torch/distributed/tensor/parallel/loss.py): the logits stay sharded;
               _log_softmax all-reduces the rows' max (MAX) and their sums of exps (SUM), and
               _nll_loss_forward the target's logit (_MaskPartial._reduce_value: SUM), one fp32
               per token each (the log-softmax runs in fp32: HF's loss and torchtitan's upcast the
               logits first); backward (_nll_loss_and_log_softmax_backward) is local. Issued with
               the head's forward, which the loss follows (the simulated step issues a layer's
               collectives, not the loss point's) */
            if (lp) tp_coll(x, st, pt(x, PT_FWD, head), COLL_ALL_REDUCE, PURPOSE_TP_LOGITS, PHASE_FORWARD, 3, b * s * 4.0);
            else tp_coll(x, st, pt(x, PT_FWD, head), COLL_ALL_GATHER, PURPOSE_TP_LOGITS, PHASE_FORWARD, 1,
                         plan_act_logits_bytes(m, x->t, &x->in));
            tp_coll(x, st, pt(x, PT_BWD, head), sp ? COLL_REDUCE_SCATTER : COLL_ALL_REDUCE, PURPOSE_TP_ACTS,
                    PHASE_BACKWARD, 1, bsR);
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
            if (fsdp) {
                tp_coll(x, st, pt(x, PT_BWD, i), COLL_ALL_REDUCE, PURPOSE_TP_REPLICA_GRADS, PHASE_BACKWARD, n, each);
            } else {
                /* in step(): once per optimizer step, not per micro-step (the simulated step ran
                   them once while the table counted them K times under accumulation) */
                StepXfer *e = tp_coll(x, st, pt(x, PT_STEP, 0), COLL_ALL_REDUCE, PURPOSE_TP_REPLICA_GRADS, PHASE_STEP,
                                      3 * n, each);
                if (e) e->micro = MICRO_ONCE;
            }
        }
    }
    /* Gathering the vocab-sharded logits (Shard(-1) -> Replicate) all-gathers the local shards
       (b·s·V/tp each) into a dim-0 buffer and concatenates it into the last dim (the gathered
       logits, which the loss rules count): the local shard is still live beside them at the
       loss's forward (measured: aten::mm's output; the gather's buffer is freed by the cat on
       the moments the runs resolve). */
    if (root && head >= 0 && !lp) {
        step_at(st, RULE_TP_LOGITS_GATHER, TERM_TRANSIENT, pt(x, PT_LOSS_FWD, 0),
                plan_act_logits_bytes(m, x->t, &x->in) / x->v->tp);
    }
    /* Loss parallel's own ops on the rank's shard (m->vocab is V/tp here: tp_view), one fp32
       shard more than aten's at each end of the loss: _log_softmax keeps `shifted` (x - max)
       while exp(shifted) and then the result are made (aten's log_softmax makes the result
       only); _nll_loss_and_log_softmax_backward keeps its zeroed grad_input while
       (grad_input + exp(x)) * grad_output makes two more (aten: nll_loss_backward's zeroed
       gradient and log_softmax_backward's) */
    if (lp && head >= 0) {
        double shard = b * s * (double)m->vocab * 4.0;
        step_at(st, RULE_TP_LOSS_PARALLEL, TERM_TRANSIENT, pt(x, PT_LOSS_FWD, 0), shard);
        step_at(st, RULE_TP_LOSS_PARALLEL, TERM_TRANSIENT, pt(x, PT_LOSS_BWD, 0), shard);
    }
    /* A RowwiseParallel embedding's weight gradient comes back Replicate: the full V x h on
       every rank (measured, torch 2.15: embedding_dense_backward over the replicated output
       gradient), where the weight is V/tp x h. Kept as the parameter's .grad where gradients
       stay whole (ddp, zero1); a strategy that shards them (FSDP2's reduce-scatter, ZeRO-2's
       reduction into the rank's partition) keeps its shard only (zero2: an estimate, no CPU-rank
       run checks it) */
    if (root && emb >= 0 && !((x->s->shard & SHARD_GRAD) && x->N > 1)) {
        double extra = (double)m->layers[emb].params * (x->v->tp - 1) * x->p->grad_bytes;
        step_hold(st, RULE_TP_EMBED_GRAD, TERM_GRADS, pt(x, PT_BWD, emb), AT_BEFORE, pt(x, PT_END, 0), AT_AFTER,
                  extra);
        st->ms_grads += extra;
    }
}

/* ---- the dimension's row ---- */

static int tp_on(const ModelSpec *m, const TrainSpec *t) { (void)m; return plan_tp_degree(t) > 1 || t->sp || t->loss_parallel; }

/* torch's foreach AdamW refuses a list mixing DTensors and plain tensors, so the parameters
   parallelize_module leaves plain (the norms without SP; GPT-2's replicated embeddings) are a
   parameter group of their own (the harness, memplan auto --emit torch); foreach runs per group,
   so its state-sized temporary is the larger group's, not all of them (measured: gpt2-mini tp2
   SP, aten::sqrt 1,593,344 B = the DTensor group). Under FSDP2 on more than one data-parallel
   rank every parameter is a DTensor: one group. Elements of the share m. */
static double plain_elems(const ModelSpec *m, const TrainSpec *t, StrategyKind sk, int64_t dp) {
    int fsdp = plan_strategy(sk)->buffers == BUF_FSDP_FULL || plan_strategy(sk)->buffers == BUF_FSDP_GRAD_OP;
    if (fsdp && dp > 1) return 0;
    int sp = t->sp != 0, root = plan_tp_root_sharded(m);
    double plain = 0;
    for (int i = 0; i < m->n_layers; i++) {
        const LayerSpec *l = &m->layers[i];
        if (l->kind == LAYER_BLOCK && !sp) plain += sp_norm_tensors(m, l) * (double)m->d_model;
        else if (l->kind == LAYER_NORM && !sp) plain += (double)l->params;
        else if (l->kind == LAYER_EMBED && !root) plain += (double)l->params;
    }
    return plain;
}

/* One rank's share of the model, on the data-parallel cluster of gpus / tp ranks, and how its
   optimizer groups the parameters. */
static int tp_view(RankView *v, RankView *out, int max) {
    (void)out; (void)max;
    int tp = plan_tp_degree(&v->t);
    if (tp == 1) return 1;
    ModelSpec share;
    if (plan_tp_view(&v->m, tp, &share)) return -1;
    if (v->own_m) plan_model_free(&v->m);
    v->m = share;
    v->own_m = 1;
    /* loss parallel: the rank's logits, their fp32 upcast, log-softmax output and gradients are
       its vocab shard's (b x s x V/tp); every rule that sizes them reads the share's vocabulary.
       The head's weight is split in plan_tp_view either way. */
    if (v->t.loss_parallel) v->m.vocab /= tp;
    /* without it the head still computes its vocab shard (ColwiseParallel), the loss then runs on
       the gathered logits: the GEMM's columns are V/tp, what the loss reads is V */
    else if (plan_tp_root_sharded(&v->m)) v->m.head_cols = v->m.vocab / tp;
    ClusterSpec dp = v->dp;
    plan_tp_cluster(&dp, tp, &v->dp);
    v->tp = tp;
    v->opt_plain_elems = plain_elems(&v->m, &v->t, v->sk, v->dp.gpus);
    return 1;
}

/* What a ZeRO row under tp is (the header's line and the row's JSON "estimate" say the same):
   1 with the sentence in buf, 0 for every other row. */
static int tp_zero_estimate(const Step *st, char *buf, size_t len) {
    if (!st || st->view.tp <= 1 || !plan_strategy_is_deepspeed(st->view.sk)) return 0;
    snprintf(buf, len, "zero1/zero2 under tp: the rank's share sharded again over its data-parallel group (ranks %d "
             "apart), as Megatron-DeepSpeed and InternLM run ZeRO; an estimate (no CPU-rank run checks it: the torch "
             "harness runs tp with ddp and fsdp-full)", st->view.tp);
    return 1;
}

static void tp_header(FILE *f, PlanHeaderSlot slot, const ModelSpec *m, const TrainSpec *t, const ClusterSpec *c,
                      const Step *const *rows, int n_rows) {
    if (slot != HEADER_AFTER_TRAIN || plan_tp_degree(t) == 1) return;
    fprintf(f, "# tensor parallel: tp %d inside each node (PyTorch parallelize_module: %s%s), sequence parallel %s, "
            "loss parallel %s; the strategies run on %lld data-parallel ranks (gpus / tp); memory, compute and "
            "collectives are one rank's (docs/formulas.md \"Tensor and sequence parallel\"%s%s)\n", t->tp,
            plan_tp_root_sharded(m) ? "torchtitan's Llama plan, vocab-sharded embedding and head"
                                    : "column/row-parallel blocks, replicated tied embedding and head",
            m->moe.n_experts > 0 ? "; MoE blocks as torchtitan splits them: each expert's hidden width over tp, "
                                   "the router whole, the shared expert column/row" : "",
            t->sp ? "on" : "off",
            t->loss_parallel ? "on (the logits stay vocab-sharded: the loss runs on b x s x V/tp, its row max, sum of "
                               "exps and target logit all-reduced)"
                             : plan_tp_root_sharded(m) ? "off (the vocab-sharded logits are all-gathered for the loss)"
                                                       : "off (the tied head's logits are whole)",
            (long long)(c->gpus / t->tp / plan_pp_degree(t)),
            m->moe.n_experts > 0 ? ", \"Tensor parallel of MoE blocks\"" : "", t->loss_parallel ? ", \"Loss parallel\"" : "");
    char zero[320];
    for (int i = 0; i < n_rows; i++)
        if (tp_zero_estimate(rows[i], zero, sizeof zero)) {
            fprintf(f, "# %s\n", zero);
            break;
        }
    if (t->act_ckpt == CKPT_OP)
        fprintf(f, "# op-level checkpointing under tp: collectives exact on CPU-rank runs, the peak an estimate "
                "(the loss's forward is under-predicted where it is the peak; the measured runs and their errors: "
                "docs/formulas.md \"Tensor and sequence parallel\")\n");
}

static void tp_json(cJSON *model, cJSON *train, const ModelSpec *m, const TrainSpec *t, const ClusterSpec *c) {
    (void)model; (void)m;
    if (plan_tp_degree(t) == 1) return;   /* only then: the records of other plans stay as they were */
    cJSON_AddNumberToObject(train, "tp", t->tp);
    cJSON_AddBoolToObject(train, "sp", t->sp != 0);
    cJSON_AddBoolToObject(train, "loss_parallel", t->loss_parallel != 0);
    cJSON_AddNumberToObject(train, "data_parallel", (double)(c->gpus / t->tp / plan_pp_degree(t)));
}

static int tp_auto_on(const TrainSpec *t) { return t->tp < 0; }

/* --tp auto: tp 1, then each divisor of the GPUs per node that some strategy of
   plan_tp_strategies plans, sequence parallel off and on unless --sp is given; the simpler first. */
static int tp_settings(const ModelSpec *m, const TrainSpec *t, const ClusterSpec *c, const AutoSpec *a,
                       DimSetting *out, int max) {
    const unsigned tp_ok = plan_tp_strategies();
    int n = 0;
    for (int64_t d = 1; d <= c->gpus_per_node && n < max; d++) {
        if (c->gpus_per_node % d) continue;
        for (int sp = 0; sp <= 1 && n < max; sp++) {
            if (d == 1 && sp) continue;
            if (d > 1 && a->sp_fixed && sp != t->sp) continue;
            DimSetting *s = &out[n];
            memset(s, 0, sizeof *s);
            s->t = *t;
            s->t.tp = (int)d;
            s->t.sp = d > 1 ? sp : 0;
            s->t.loss_parallel = d > 1 ? t->loss_parallel : 0;   /* as given: it needs tp > 1 */
            s->strategies = a->strategies & (d > 1 ? tp_ok : ~0u);
            s->offloads = a->offloads & (d > 1 ? 1u << OFFLOAD_NONE : ~0u);
            s->keep_accum = a->keep_accum;
            if (d > 1 && !plan_auto_any_strategy(m, &s->t, c, s->strategies, NULL, 0)) continue;   /* silently */
            snprintf(s->label, sizeof s->label, d > 1 ? "tp %lld sp %s" : "tp 1 (data parallel alone)", (long long)d,
                     s->t.sp ? "on" : "off");
            n++;
        }
    }
    return n;
}

/* A ZeRO row under tp carries what its header line says: an estimate, and why. */
static void tp_row_json(cJSON *o, const Step *st) {
    char zero[320];
    if (tp_zero_estimate(st, zero, sizeof zero)) cJSON_AddStringToObject(o, "estimate", zero);
}

const PlanDim plan_dim_tp = {
    .name = "tp",
    .not_planned = "tensor parallel does not apply to this setup",
    .on = tp_on,
    .check = plan_tp_check,
    .view = tp_view,
    .rule = rule_tp,
    .header = tp_header,
    .json = tp_json,
    .row_json = tp_row_json,
    .auto_on = tp_auto_on,
    .settings = tp_settings,
    .search_title = "tensor parallel searched (a larger tp or SP is taken only when faster by more than %.0f%%):\n",
    .describe = plan_dim_describe_strategy,
};

/* ---- --emit torch: the 2-D mesh and the parallelize_module plan memplan plans, on Hugging Face's
   module names: LLaMA-style models (torchtitan's plan) or GPT-2 (its Conv1D as nn.Linear first) ---- */
void plan_tp_emit_torch(FILE *f, const ModelSpec *m, const ClusterSpec *c, const TrainSpec *t) {
    static const char *const LLAMA_NAMES[] = {"llama", "mistral", "qwen2", "qwen3", "gemma", "granite", "smollm3"};
    int tp = plan_tp_degree(t), sp = t->sp != 0, gpt2 = strcmp(m->family, "gpt2") == 0, llama = 0;
    for (size_t i = 0; i < sizeof LLAMA_NAMES / sizeof LLAMA_NAMES[0]; i++) llama |= strcmp(m->family, LLAMA_NAMES[i]) == 0;
    const char *stream = sp ? "Shard(1)" : "Replicate()", *local = sp ? ", use_local_output=False" : "";
    fprintf(f, "# tensor parallel %d x data parallel %lld on a 2-D mesh; sequence parallel %s\n", tp,
            (long long)(c->gpus / tp), sp ? "on" : "off");
    fprintf(f, "from torch.distributed.device_mesh import init_device_mesh\n"
               "from torch.distributed.tensor import Replicate, Shard\n"
               "from torch.distributed.tensor.parallel import (ColwiseParallel, PrepareModuleInput, PrepareModuleOutput,\n"
               "    RowwiseParallel, SequenceParallel, parallelize_module)\n");
    fprintf(f, "mesh2d = init_device_mesh(\"cuda\", (%lld, %d), mesh_dim_names=(\"dp\", \"tp\"))\n",
            (long long)(c->gpus / tp), tp);
    if (!gpt2 && !llama) {
        fprintf(f, "# %s: apply the same split to its modules (q, k, v and the MLP's first linear(s) ColwiseParallel,\n"
                   "# the attention output and the MLP's last linear RowwiseParallel%s); memplan emits module names for\n"
                   "# GPT-2 and LLaMA-style families only\n", m->family[0] ? m->family : m->name,
                sp ? ", the norms SequenceParallel" : "");
    } else if (gpt2) {
        fprintf(f, "# GPT-2: convert every block's Conv1D to nn.Linear (weight transposed), reorder c_attn's rows so each\n"
                   "# rank's shard holds its heads' q, k, v, and set attn.split_size = n_embd // %d\n"
                   "#   (bench/torch/harness.py _gpt2_conv1d_to_linear); the tied embedding and head stay replicated\n", tp);
        if (sp)
            fprintf(f, "parallelize_module(model, mesh2d[\"tp\"], {\"transformer.drop\": PrepareModuleOutput("
                       "output_layouts=Replicate(), desired_output_layouts=Shard(1), use_local_output=False),\n"
                       "    \"transformer.ln_f\": SequenceParallel(), \"lm_head\": PrepareModuleInput("
                       "input_layouts=(Shard(1),), desired_input_layouts=(Replicate(),), use_local_output=True)})\n");
        fprintf(f, "for block in model.transformer.h:\n"
                   "    parallelize_module(block, mesh2d[\"tp\"], {\n"
                   "        \"attn\": PrepareModuleInput(input_layouts=(%s,), desired_input_layouts=(Replicate(),)),\n"
                   "        \"mlp\": PrepareModuleInput(input_layouts=(%s,), desired_input_layouts=(Replicate(),)),\n"
                   "        \"attn.c_attn\": ColwiseParallel(), \"mlp.c_fc\": ColwiseParallel(),\n"
                   "        \"attn.c_proj\": RowwiseParallel(output_layouts=%s%s),\n"
                   "        \"mlp.c_proj\": RowwiseParallel(output_layouts=%s%s),%s})\n",
                stream, stream, stream, local, stream, local,
                sp ? "\n        \"ln_1\": SequenceParallel(), \"ln_2\": SequenceParallel()," : "");
    } else {
        if (plan_tp_root_sharded(m))
            fprintf(f, "parallelize_module(model, mesh2d[\"tp\"], {\n"
                       "    \"model.embed_tokens\": RowwiseParallel(input_layouts=Replicate(), output_layouts=%s%s),\n"
                       "    \"lm_head\": ColwiseParallel(input_layouts=%s, output_layouts=%s),%s})\n%s",
                    stream, local, stream, t->loss_parallel ? "Shard(-1), use_local_output=False" : "Replicate()",
                    sp ? "\n    \"model.norm\": SequenceParallel()," : "",
                    t->loss_parallel ? "# loss parallel: run forward and backward (the loss and loss.backward()) inside\n"
                                       "#   with torch.distributed.tensor.parallel.loss_parallel():\n" : "");
        else if (sp)   /* a tied embedding and head stay replicated: slice to and gather from the shards */
            fprintf(f, "parallelize_module(model, mesh2d[\"tp\"], {\"model.embed_tokens\": PrepareModuleOutput("
                       "output_layouts=Replicate(), desired_output_layouts=Shard(1), use_local_output=False),\n"
                       "    \"model.norm\": SequenceParallel(), \"lm_head\": PrepareModuleInput("
                       "input_layouts=(Shard(1),), desired_input_layouts=(Replicate(),), use_local_output=True)})\n");
        fprintf(f, "for block in model.model.layers:\n"
                   "    parallelize_module(block, mesh2d[\"tp\"], {\n"
                   "        \"self_attn\": PrepareModuleInput(input_kwarg_layouts={\"hidden_states\": %s},\n"
                   "                                        desired_input_kwarg_layouts={\"hidden_states\": Replicate()}),\n"
                   "        \"mlp\": PrepareModuleInput(input_layouts=(%s,), desired_input_layouts=(Replicate(),)),\n"
                   "        \"self_attn.q_proj\": ColwiseParallel(), \"self_attn.k_proj\": ColwiseParallel(),\n"
                   "        \"self_attn.v_proj\": ColwiseParallel(), \"mlp.gate_proj\": ColwiseParallel(),\n"
                   "        \"mlp.up_proj\": ColwiseParallel(),\n"
                   "        \"self_attn.o_proj\": RowwiseParallel(output_layouts=%s%s),\n"
                   "        \"mlp.down_proj\": RowwiseParallel(output_layouts=%s%s),%s})\n",
                stream, stream, stream, local, stream, local,
                sp ? "\n        \"input_layernorm\": SequenceParallel(), \"post_attention_layernorm\": SequenceParallel()," : "");
    }
    fprintf(f, "# torch.optim.AdamW(foreach=True) refuses lists that mix DTensors and plain tensors: give the\n"
               "# replicated plain parameters a parameter group of their own (or fully_shard them, below)\n");
}

