/* plan_dim_moe.c — mixture of experts as one dimension (plan_dim_moe.h): what a MoE block saves
 * and holds in backward as transformers 5.24 runs it (the router, the routed experts through
 * grouped_mm, the shared experts; measured per family with block_probe.py), the --moe-imbalance
 * check, and the header and JSON lines. docs/formulas.md "Mixture of experts". */
#include "plan_dim_moe.h"

#include <math.h>
#include <cjson/cJSON.h>
#include <stdio.h>

#include "plan_util.h"

int plan_moe_block(const ModelSpec *m, const LayerSpec *l) {
    return l->expert_params > 0 && m->moe.n_experts > 0;
}

int plan_moe_experts_known(const ModelSpec *m) {
    for (int i = 0; i < m->n_layers; i++)
        if (m->layers[i].expert_params > 0 && !m->layers[i].expert_mask) return 0;
    return 1;
}

double plan_act_mlp_width(const ModelSpec *m, const LayerSpec *l) {
    if (!plan_moe_block(m, l)) return (double)m->d_ff;
    const MoeSpec *e = &m->moe;   /* Llama 4's experts run on every token (moe_routed_bytes) */
    double k = e->router == MOE_ROUTER_ALL_EXPERTS ? e->n_experts : e->top_k;
    return k * (double)e->d_ff_expert + (double)e->d_ff_shared;
}

/* Bytes per element of the routed experts' tensors. transformers 5.24 runs them through
   grouped_mm_experts_forward (integrations/moe.py; the default experts_implementation,
   modeling_utils.py get_correct_experts_implementation), whose torch.nn.functional.grouped_mm is
   not autocast-enabled and gets its input cast to the weights' dtype: they run in the parameter
   dtype, fp32 under autocast. Llama 4's experts are torch.bmm, which autocast casts. */
static double moe_expert_bytes(const ModelSpec *m, const PrecisionSpec *p) {
    return m->moe.router == MOE_ROUTER_ALL_EXPERTS ? p->act_bytes : p->param_bytes;
}

double plan_act_uncast_params(const ModelSpec *m, const LayerSpec *l) {
    return plan_moe_block(m, l) && m->moe.router != MOE_ROUTER_ALL_EXPERTS ? (double)l->expert_params : 0;
}

/* The routing weights' bytes per element: the top-k softmax values stay fp32 (Mixtral), else
   they are cast to the logits' dtype, the compute dtype (Qwen-MoE .to(router_logits.dtype),
   GPT-OSS and DeepSeek compute them there). */
static double moe_weight_bytes(const MoeSpec *e, double X) {
    return e->fp32_weights ? 4 : X;
}

/* What a MoE block's router saves per token (the modeling_*.py *TopKRouter / Llama4Router
   forward): the router linear's input (X·h: autocast's copy, else the norm's output, which the
   experts read without saving it), the top-k indices (int64, 8·k), and per router kind: the fp32
   softmax over E (4·E); GPT-OSS's softmax over the k logits (X·k); DeepSeek's sigmoid scores
   (X·E: its group top-k and masked_fill tensors feed only top-k nodes whose outputs are dropped,
   so they are freed with them, measured); Llama 4's fp32 sigmoid over E (4·E) and the scores as a
   (E·T, 1) column (X·E). An in-place renormalisation (router_top_value /= sum) saves a clone of
   the values and the sum (fp32 after a softmax, else X). The weights the experts multiply by are
   saved once more by that product (moe_routed_bytes). */
static double moe_router_bytes(const ModelSpec *m, const PrecisionSpec *p) {
    const MoeSpec *e = &m->moe;
    double X = p->act_bytes, h = (double)m->d_model, E = e->n_experts, k = e->top_k;
    double b = X * h + 8 * k, norm_dtype = X;
    switch (e->router) {
    case MOE_ROUTER_SOFTMAX: b += 4 * E; norm_dtype = 4; break;
    case MOE_ROUTER_TOPK_SOFTMAX: b += X * k; break;
    case MOE_ROUTER_GROUPED: b += X * E; break;
    case MOE_ROUTER_ALL_EXPERTS: b += 4 * E + X * E; break;
    default: break;
    }
    if (e->norm_topk) b += norm_dtype * (k + 1);
    return b;
}

/* What the routed experts save per token. grouped_mm_experts_forward: the sort's permutation,
   its token index (perm // k) and the inverse permutation, int64 per routed row (24·k; GPT-OSS's
   bias gathers keep the sorted expert ids, 8·k more); per routed row, in the experts' dtype E_b:
   the gathered input (h), the gate_up output (2·f_e: the activation saves the gate, the product
   the up half), act(gate) and the product (2·f_e; GPT-OSS's clamped SwiGLU: the clamped gate,
   sigmoid(alpha·gate), their product, up + 1 and the gated output, 5·f_e), the down output (h)
   and the routing weight (moe_weight_bytes) that the weighted sum multiplies it by. Llama 4
   (Llama4TextMoe) runs every expert on every token: hidden_states.repeat(E, 1) (its dtype, R·E·h)
   and the (E·T, 1) scores saved by their product, bmm's input (X·E·h), then gate_up, act(gate)
   and the product (X·E·4·f_e). */
static double moe_routed_bytes(const ModelSpec *m, const PrecisionSpec *p, double F) {
    const MoeSpec *e = &m->moe;
    double Eb = moe_expert_bytes(m, p), h = (double)m->d_model, fe = (double)e->d_ff_expert;
    double E = e->n_experts, k = e->top_k;
    /* each term noted as the tensors it is (plan_act_note), so the allocation listing makes them:
       the routed rows' gate_up output alone is T·k·2·f_e·E_b, often above 1 MiB where a dense
       MLP's tensors are not (measured, mixtral-wide b4: 8 MiB and two 4 MiB tensors a block) */
    if (e->router == MOE_ROUTER_ALL_EXPERTS)
        return plan_act_note(1, p->param_bytes * E * h) + plan_act_note(1, Eb * E * h) +
               plan_act_note(1, Eb * E * 2 * fe) + plan_act_note(2, Eb * E * fe);
    if (e->ep > 1) {
        /* expert parallel (transformers' AllToAllEP, plan_dim_ep.h): the sending rank keeps the
           argsort of its routed rows and their token index (int64 each, 16 k), the experts' outputs
           sent back in their routed order (token_outputs, the weighted sum's saved operand, k h)
           and the weights (k); the receiving rank runs its experts top-1 on F k rows per token:
           their sort, token index and inverse permutation (24), the sentinel mask (1), the
           gathered input (h), gate_up and the activation, and the unit weights its weighted sum
           saves (ones that need no gradient: the down output is not saved) */
        double rows = F * k;
        double send = plan_act_note(2, 8 * k) + plan_act_note(1, Eb * k * h) +
                      plan_act_note(1, moe_weight_bytes(e, p->act_bytes) * k);
        return send + plan_act_note(e->bias ? 4 : 3, 8 * rows) + plan_act_note(1, rows) +
               plan_act_note(1, rows * Eb * h) + plan_act_note(1, rows * Eb * 2 * fe) +
               plan_act_note(e->clamped_glu ? 5 : 2, rows * Eb * fe) + plan_act_note(1, rows * Eb);
    }
    double rows = F * k;
    return plan_act_note(e->bias ? 4 : 3, 8 * k) + plan_act_note(2, rows * Eb * h) +
           plan_act_note(1, rows * Eb * 2 * fe) + plan_act_note(e->clamped_glu ? 5 : 2, rows * Eb * fe) +
           plan_act_note(1, moe_weight_bytes(e, p->act_bytes) * k);
}

/* --moe-imbalance F (TrainSpec.moe_imbalance; 0 reads as 1): the factor on the routed experts'
   rows, an estimate for implementations that size every expert's rows for the busiest one
   (docs/formulas.md "Routing imbalance"). Llama 4 runs every expert on every token: no routed
   rows to scale (moe_routed_bytes, moe_backward). */
static double moe_rows_factor(const ModelSpec *m, const TrainSpec *t) {
    if (m->moe.router == MOE_ROUTER_ALL_EXPERTS) return 1;
    double F = t->moe_imbalance > 1 ? t->moe_imbalance : 1;
    /* expert parallel: the rows a rank's experts receive, relative to its tokens' T k (at most
       every rank's: ep) */
    if (m->moe.ep > 1 && F > m->moe.ep) F = m->moe.ep;
    return F;
}

/* The shared expert(s), a dense gated MLP of width f_s on every token (its input is the block's
   norm output, which the router already holds, or under autocast two more casts), and
   Qwen2-MoE's gate: sigmoid(shared_expert_gate(x)) * shared_output saves the gate's output (X)
   and the shared output (X·h), and its linear's input cast under autocast (X·h). */
static double moe_shared_bytes(const ModelSpec *m, const TrainSpec *t) {
    const MoeSpec *e = &m->moe;
    const PrecisionSpec *p = plan_precision(t->precision);
    double X = p->act_bytes, h = (double)m->d_model, casts = p->autocast ? X * h : 0, b = 0;
    if (e->d_ff_shared > 0) b += plan_act_mlp_bytes(m, t, (double)e->d_ff_shared, 0) + 2 * casts;
    if (e->shared_gate) b += casts + X * h + X;
    return b;
}

/* transformers 5.24's MoE blocks, per token: the router, the routed experts and the shared
   experts as they save them (measured per family, block_probe.py: docs/formulas.md "Mixture of
   experts"); with output_router_logits, the logits the output keeps (X·E) and the softmax the
   load-balancing loss saves (X·E), both counted with the block. The routed terms do not depend
   on how tokens are routed: grouped_mm holds all T·k routed rows at once (measured: every token
   sent to the same k experts peaks at the same byte); --moe-imbalance scales the routed rows for
   other implementations (moe_rows_factor). */
double plan_act_moe_delta(const ModelSpec *m, const LayerSpec *l, const TrainSpec *t) {
    if (!plan_moe_block(m, l)) return 0;
    const PrecisionSpec *p = plan_precision(t->precision);
    double mlp_in = plan_act_llama_style(m) && p->autocast ? 2 : 1;
    double moe = moe_router_bytes(m, p) + moe_routed_bytes(m, p, moe_rows_factor(m, t)) + moe_shared_bytes(m, t);
    if (m->moe.router_logits) moe += 2 * p->act_bytes * m->moe.n_experts;
    return moe - plan_act_mlp_bytes_unnoted(m, t, (double)m->d_ff, mlp_in);
}

/* A MoE block's MLP backward at its largest moment (block_probe.py, docs/formulas.md "A MoE
   block's backward"), beyond its saved activations, for bs tokens. Before the routed experts:
   a shared expert that ran after them (DeepSeek, Llama 4) has done its backward, freeing its
   saved tensors and leaving the norm output's gradient (R·h) and its three weight gradients;
   Qwen2-MoE's gate has left the shared output's gradient (X·h, measured) and its own. Then, in
   the experts' dtype E_b per routed row: (A) the weighted sum's backward (grouped_mm): the
   gradient of the unpermuted rows, of the down output and the product for the weights' gradient,
   3·h; (C) the activation's backward: down's input gradient and the gate's and up's, less the
   saved product, down output and weights now freed, 2·f_e − h (down's weight gradient exists);
   Llama 4's bmm over every expert: C = 2·X·E·f_e, and its down weights' autocast copies go with
   down's backward. The moment that holds more, counting gradients at the precision's grad bytes,
   is the one planned: *grads and *casts are the parameter elements whose gradients exist and
   whose autocast copies are freed by then. */
static double moe_backward(const ModelSpec *m, const LayerSpec *l, const TrainSpec *t, const ActInputs *in,
                           double *grads, double *casts, int *c) {
    const MoeSpec *e = &m->moe;
    const PrecisionSpec *p = plan_precision(t->precision);
    double X = p->act_bytes, R = p->param_bytes, Eb = moe_expert_bytes(m, p), h = (double)m->d_model;
    double fe = (double)e->d_ff_expert, fs = (double)e->d_ff_shared, E = e->n_experts, k = e->top_k;
    double bs = (double)in->b * (double)in->s, pre = 0, pre_g = 0;
    if (e->shared_last) {
        pre = R * h - moe_shared_bytes(m, t);
        pre_g = 3 * h * fs;
    } else if (e->shared_gate) {
        pre = X * h;
        pre_g = h;
    }
    /* the down projection's weight gradient: the rank's experts (n_experts / ep under --ep) */
    double down = E / (e->ep > 1 ? e->ep : 1) * h * fe, a_ws = 3 * Eb * k * h, c_ws;
    if (e->router == MOE_ROUTER_ALL_EXPERTS) {
        a_ws = 0;
        c_ws = 2 * X * E * fe;
    } else {
        c_ws = 2 * Eb * k * fe - Eb * k * h - moe_weight_bytes(e, X) * k;
        down += e->bias ? E / (e->ep > 1 ? e->ep : 1) * h : 0;
    }
    double F = moe_rows_factor(m, t);   /* per routed row: both moments scale with the rows */
    a_ws *= F;
    c_ws *= F;
    int at_c = bs * c_ws + down * p->grad_bytes >= bs * a_ws;
    if (grads) *grads = pre_g + (at_c ? down : 0);
    if (casts) *casts = pre_g + (at_c && e->router == MOE_ROUTER_ALL_EXPERTS ? down : 0);
    if (c) *c = at_c;
    return bs * (pre + (at_c ? c_ws : a_ws));
}

double plan_moe_backward(const ModelSpec *m, const LayerSpec *l, const TrainSpec *t, const ActInputs *in,
                         double *grads, double *casts) {
    return moe_backward(m, l, t, in, grads, casts, NULL);
}

/* The saved tensors a routed MoE block's backward frees by its MLP moment C (plan_moe_backward):
   once the weighted sum's backward has run, the down output and the routing weights it saved
   (`proj_out * sample_weights_g.unsqueeze(-1)`), and once down's grouped_mm backward has made its
   input gradient, the product act(gate)·up it saved (transformers' integrations/moe.py
   grouped_mm_experts_forward, _default_apply_gate `self.act_fn(gate) * up`); the product's mul
   backward then makes the gate's and up's gradients (recorded on mixtral-wide b4: down's input
   gradient, the product's 4 MiB freed, two 4 MiB gradients; the saved gate_up output goes only
   after the activation's backward). So at C three tensors of the product's size are live where
   the product was: the account frees these at C and the working set holds them back (the same
   bytes at every moment). Written into v (bytes each: the product, the down output, the weights;
   at most 3), their count returned; 0 unless the block is routed (not Llama 4's every expert),
   not expert parallel (its sending rank's tensors differ), not checkpointed (recomputation holds
   its own), its MLP moment is C and it saves each as a tensor of its own (plan_act_ckpt_tensors). */
int plan_moe_bwd_freed(const ModelSpec *m, int i, const TrainSpec *t, const ActInputs *in, double *v) {
    const LayerSpec *l = &m->layers[i];
    const MoeSpec *e = &m->moe;
    int at_c = 0;
    if (!plan_moe_block(m, l) || e->router == MOE_ROUTER_ALL_EXPERTS || e->ep > 1 || plan_act_checkpointed(m, t, i) ||
        plan_act_block_backward_bytes(m, i, t, in) <= 0)
        return 0;
    moe_backward(m, l, t, in, NULL, NULL, &at_c);
    if (!at_c) return 0;
    const PrecisionSpec *p = plan_precision(t->precision);
    double rows = (double)in->b * (double)in->s * moe_rows_factor(m, t) * e->top_k, Eb = moe_expert_bytes(m, p);
    double want[3] = {rows * Eb * (double)e->d_ff_expert, rows * Eb * (double)m->d_model,
                      rows * moe_weight_bytes(e, p->act_bytes)};
    double saved[PLAN_ACT_MAX_TENSORS];
    int n = plan_act_ckpt_tensors(m, i, t, in, saved, PLAN_ACT_MAX_TENSORS), found = 0;
    for (int w = 0; w < 3; w++)
        for (int k = 0; k < n; k++)
            if (fabs(saved[k] - want[w]) < 0.5) {
                saved[k] = -1;   /* each saved tensor stands for one */
                v[found++] = want[w];
                break;
            }
    return found == 3 ? 3 : 0;
}

double plan_moe_bwd_freed_bytes(const ModelSpec *m, int i, const TrainSpec *t, const ActInputs *in) {
    double v[3];
    int n = plan_moe_bwd_freed(m, i, t, in, v);
    return n ? v[0] + v[1] + v[2] : 0;
}

/* ---- the dimension's row ---- */

static int moe_on(const ModelSpec *m, const TrainSpec *t) { (void)t; return m->moe.n_experts > 0; }

static double imbalance(const TrainSpec *t) { return t->moe_imbalance > 1 ? t->moe_imbalance : 1; }   /* 0 reads as 1 */

static void moe_header(FILE *f, PlanHeaderSlot slot, const ModelSpec *m, const TrainSpec *t, const ClusterSpec *c,
                       const struct Step *const *rows, int n_rows) {
    (void)c; (void)rows; (void)n_rows;
    if (slot != HEADER_AFTER_MODEL || m->moe.n_experts <= 0) return;
    char b[32];
    int moe_blocks = 0;
    for (int i = 0; i < m->n_layers; i++) moe_blocks += m->layers[i].expert_params > 0;
    int all = m->moe.router == MOE_ROUTER_ALL_EXPERTS;
    double F = all ? 1 : imbalance(t);   /* Llama 4: no routed rows to scale */
    char routing[320];
    if (F > 1)
        snprintf(routing, sizeof routing, "the routed experts' rows planned %g times (--moe-imbalance %g, an estimate "
                 "for experts sized for the busiest one; transformers' grouped_mm holds the same rows whatever the "
                 "routing: docs/formulas.md \"Routing imbalance\")", F, F);
    else
        snprintf(routing, sizeof routing, "routing does not change the memory (%s: docs/formulas.md \"Mixture of "
                 "experts\")", all ? "every token passes every expert" : "transformers' grouped_mm holds all "
                 "routed rows at once, even when every token picks the same experts");
    if (t->ep > 1)   /* expert parallel: the rank's share and the rows it receives (plan_dim_ep.c) */
        snprintf(routing, sizeof routing, "under --ep %d each rank holds %d of the experts and runs them on the rows "
                 "the dispatch brings (expert parallel, below)", t->ep, m->moe.n_experts / t->ep);
    fprintf(f, "# mixture of experts: %s parameters active per token (top-%d of %d experts of width %lld%s, "
            "in %d of %d blocks); memory holds all of them, %s; %s\n",
            plan_fmt_count(plan_model_active_params(m), b, sizeof(b)), m->moe.top_k, m->moe.n_experts,
            (long long)m->moe.d_ff_expert, m->moe.d_ff_shared > 0 ? ", + shared experts" : "", moe_blocks,
            m->n_layer, all ? "transformers computes every expert on every token" : "compute uses the active ones",
            routing);
}

static void moe_json(cJSON *jm, cJSON *train, const ModelSpec *m, const TrainSpec *t, const ClusterSpec *c) {
    (void)c;
    if (m->moe.n_experts <= 0) return;
    cJSON *je = cJSON_AddObjectToObject(jm, "moe");
    cJSON_AddNumberToObject(je, "experts", m->moe.n_experts);
    cJSON_AddNumberToObject(je, "top_k", m->moe.top_k);
    cJSON_AddNumberToObject(je, "expert_ffn", (double)m->moe.d_ff_expert);
    cJSON_AddNumberToObject(je, "shared_ffn", (double)m->moe.d_ff_shared);
    cJSON_AddNumberToObject(train, "moe_imbalance", imbalance(t));
}

const PlanDim plan_dim_moe = {
    .name = "moe",
    .not_planned = "mixture of experts does not apply to this setup",
    .on = moe_on,
    .header = moe_header,
    .json = moe_json,
};
