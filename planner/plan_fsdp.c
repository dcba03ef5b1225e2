/* plan_fsdp.c — see plan_fsdp.h. Sources (torch 2.15, torch/distributed/fsdp/_fully_shard/):
 * _fsdp_param.py _init_sharded_param (dim-0 chunks, padded), _fsdp_param_group.py unshard /
 * wait_for_unshard / reshard / pre_backward / post_backward, _fsdp_collectives.py
 * foreach_all_gather / foreach_reduce, _fsdp_state.py _lazy_init (root). */
#include "plan_fsdp.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* fsdp-* rows as torch runs them (FSDP1 or FSDP2; not memplan's engine) */
static int fsdp_torch_rows(const TrainSpec *t, StrategyKind sk) {
    const Strategy *s = plan_strategy(sk);
    return (s->buffers == BUF_FSDP_FULL || s->buffers == BUF_FSDP_GRAD_OP) && t->impl == IMPL_PYTORCH;
}

static int fsdp2_rows(const TrainSpec *t, StrategyKind sk) {
    const Strategy *s = plan_strategy(sk);
    return (s->buffers == BUF_FSDP_FULL || s->buffers == BUF_FSDP_GRAD_OP) && t->impl == IMPL_PYTORCH &&
           t->fsdp_impl != 1;
}

int plan_fsdp2_fp32_shards(const TrainSpec *t, StrategyKind sk) {
    return fsdp2_rows(t, sk) && plan_precision(t->precision)->master_bytes > 0;
}

int plan_fsdp2_dim0_rows(const TrainSpec *t, StrategyKind sk) { return fsdp2_rows(t, sk); }

double plan_fsdp_reduce_bytes(const TrainSpec *t, StrategyKind sk) {
    const PrecisionSpec *p = plan_precision(t->precision);
    const Strategy *s = plan_strategy(sk);
    int fsdp = s->buffers == BUF_FSDP_FULL || s->buffers == BUF_FSDP_GRAD_OP;   /* the engine's ZeRO-3: its own */
    if (fsdp && t->fsdp_reduce == FSDP_REDUCE_FP32) return 4;
    if (fsdp && t->fsdp_reduce == FSDP_REDUCE_LOW) return p->act_bytes;
    return plan_fsdp2_fp32_shards(t, sk) ? 4 : p->grad_bytes;
}

int plan_fsdp_reduce_last_only(const TrainSpec *t, StrategyKind sk) {
    const Strategy *s = plan_strategy(sk);
    return (s->buffers == BUF_FSDP_FULL || s->buffers == BUF_FSDP_GRAD_OP) && t->fsdp_grad_sync == FSDP_SYNC_LAST;
}

int plan_fsdp2_setup(Fsdp2 *f, const ModelSpec *m, const TrainSpec *t, const ClusterSpec *c,
                     StrategyKind sk, const MemSizes *z) {
    const PrecisionSpec *p = plan_precision(t->precision);
    memset(f, 0, sizeof(*f));
    f->units = plan_model_units(m);
    f->keep = plan_strategy(sk)->buffers == BUF_FSDP_GRAD_OP;
    f->n = z->n;
    f->gather = z->n > 1;
    f->pb = p->param_bytes;
    /* MixedPrecisionPolicy(reduce_dtype=fp32): foreach_reduce copies the 16-bit unsharded
       gradients into an fp32 reduce-scatter input, whose fp32 output are the sharded gradients
       of the fp32 parameters (_fsdp_param_group.py _get_reduce_dtype, _fsdp_collectives.py) */
    f->sb = plan_fsdp2_fp32_shards(t, sk) ? 4 : p->grad_bytes;
    f->rb = plan_fsdp_reduce_bytes(t, sk);
    f->root = (double)z->n * (z->root_shard + z->root_frozen_shard);
    f->rroot = (double)z->n * z->root_shard;
    f->v1 = t->fsdp_impl == 1;
    f->bwd = t->fsdp1.bwd;
    f->fwd = t->fsdp1.fwd;
    if (!(fsdp_torch_rows(t, sk) && c->gpus > 1 && (f->units > 0 || m->root_only) && m->n_layers > 0)) return 0;
    /* FSDP1 on a shard group of one rank (HYBRID_SHARD replicating across every rank) switches
       to NO_SHARD (_init_utils.py: "FSDP is switching to use `NO_SHARD` instead of ... since the
       world size is 1"): the flat parameters are whole, nothing is gathered; not this timeline */
    if (f->v1 && z->n <= 1) return 0;
    int K = f->units;
    f->ug = malloc(sizeof(double) * (size_t)(5 * K + 6) + sizeof(int) * (size_t)m->n_layers);
    if (!f->ug) return -1;
    f->pre = f->ug + K + 1;
    f->ur = f->pre + K + 2;
    f->us = f->ur + K + 1;
    double *ue = f->us + K + 1;   /* each unit's experts' shard (expert parallelism), over ne */
    f->ux = ue;                   /* ... then their gathered elements, ne x that */
    f->at = (int *)(ue + K + 1);
    memset(f->ug, 0, sizeof(double) * (size_t)(K + 1));
    memset(f->ur, 0, sizeof(double) * (size_t)(K + 1));
    memset(ue, 0, sizeof(double) * (size_t)(K + 1));
    double *uf = f->pre;   /* scratch until pre is filled: each unit's frozen elements */
    memset(uf, 0, sizeof(double) * (size_t)(K + 2));
    /* each unit's local shard: per tensor's dim 0 (z->dim0), else its flat elements padded; under
       expert parallelism the routed experts' tensors shard over ne ranks (plan_dim_ep.h) */
    double n = (double)z->n;
    int64_t ep = m->moe.ep > 1 && z->n % m->moe.ep == 0 && z->dim0 ? m->moe.ep : 1;
    f->ne = z->n / ep;
    for (int i = 0, last = 0; i < m->n_layers; i++) {
        const LayerSpec *l = &m->layers[i];
        if (l->unit > 0) last = l->unit;
        f->at[i] = last;
        if (l->unit > 0) {
            int64_t e = 0;
            if (ep > 1 && l->expert_mask) {
                f->ug[l->unit] += (double)plan_layer_shard_dim0_ep(l, z->n, f->ne, &e) - (double)e;
                ue[l->unit] += (double)e;
            } else {
                f->ug[l->unit] += z->dim0 ? (double)plan_layer_shard_dim0(l, z->n) : (double)l->params;
            }
            uf[l->unit] += z->dim0 ? (double)plan_layer_frozen_shard_dim0(l, z->n) : (double)l->frozen;
        }
    }
    f->ug[0] = f->root;
    f->ur[0] = f->rroot;
    f->us[0] = z->root_shard;
    for (int k = 1; k <= K; k++) {   /* trainable and frozen parameters: separate tensors, each padded */
        f->us[k] = (z->dim0 ? f->ug[k] : ceil(f->ug[k] / n)) + ue[k];
        f->ur[k] = n * (z->dim0 ? f->ug[k] : ceil(f->ug[k] / n)) + (double)f->ne * ue[k];
        f->ug[k] = f->ur[k] + n * (z->dim0 ? uf[k] : ceil(uf[k] / n));
        f->ux[k] = (double)f->ne * ue[k];
    }
    f->ux[0] = 0;
    f->pre[0] = f->pre[1] = 0;
    for (int k = 1; k <= K; k++) f->pre[k + 1] = f->pre[k] + f->ug[k];
    f->on = 1;
    return 0;
}

void plan_fsdp2_free(Fsdp2 *f) {
    free(f->ug);
    f->ug = f->pre = f->ur = f->us = f->ux = NULL;
    f->at = NULL;
    f->on = 0;
}

double plan_fsdp2_shard(const Fsdp2 *f, int k) { return f->us[k]; }

int plan_fsdp2_unit_starts(const ModelSpec *m, int i) {
    int k = m->layers[i].unit;
    return k > 0 && (i == 0 || m->layers[i - 1].unit != k);
}

/* Forward. The root unit is gathered first and, fully_shard's default for the root
   (reshard_after_forward=None -> False for the root, _fsdp_state.py _lazy_init), stays unsharded
   through backward. Each unit's all-gather lands in one flat output buffer that is copied out
   into per-parameter unsharded tensors (foreach_all_gather_copy_out); in forward the flat buffer
   is kept (comm_ctx.all_gather_state) until the next unit's copy-out, the last one until the
   root's post-forward, i.e. through the loss. A unit frees its unsharded parameters after its
   forward (reshard_after_forward=True) or keeps them into backward (False). With a shard group
   of 1 there is no flat buffer: wait_for_unshard copies the local shard into the unsharded
   parameters. */
double plan_fsdp2_fwd_comm(const Fsdp2 *f, const ModelSpec *m, int i) {
    int k = m->layers[i].unit, a = f->at[i];
    if (f->v1) {
        /* FSDP1 all-gathers into the padded unsharded flat parameter itself (no separate output
           buffer); with forward_prefetch the next unit in forward order is gathered as a unit's
           (or the root's) pre-forward ends (_pre_forward_unshard -> _prefetch_handle FORWARD) */
        int next = k > 0 ? k + 1 : a == 0 ? 1 : 0;
        double ahead = f->fwd && !f->keep && f->gather && next > 0 && next <= f->units ? f->ug[next] : 0;
        double kept = f->keep ? f->pre[k > 0 ? k : a + 1] : 0;
        return (f->root + kept + (k > 0 ? f->ug[k] : 0) + ahead) * f->pb;
    }
    if (k > 0) {
        double kept = f->keep ? f->pre[k] : 0;   /* the units before, kept since their forward */
        return (f->root + kept + f->ug[k] + (f->gather ? f->ug[k] : 0)) * f->pb;
    }
    double kept = f->keep ? f->pre[a + 1] : 0;
    double flat = !f->gather ? 0 : a == 0 ? f->root : f->ug[a];
    return (f->root + kept + flat) * f->pb;
}

/* Backward. A unit's pre-backward gathers it (a no-op when kept) and prefetches the unit that
   runs next in backward (_backward_prefetch: the previous one in forward order), whose flat
   all-gather output lives until its own copy-out; the root's pre-backward, first of all,
   prefetches the last unit. The reduce-scatter input of the last reduced unit is kept
   (comm_ctx.reduce_scatter_states, reduce_scatter_max_input_buffers = 1) until the next
   unit's post-backward. */
double plan_fsdp2_bwd_comm(const Fsdp2 *f, const ModelSpec *m, int i) {
    int k = m->layers[i].unit, a = f->at[i];
    /* the last unit at or before layer i, and the first after it (reduced before i's backward) */
    int prev = k > 0 ? k - 1 : a, next = k > 0 ? k + 1 : a + 1;
    double params = k > 0 ? (f->keep ? f->pre[k + 1] : f->ug[k]) : (f->keep ? f->pre[a + 1] : 0);
    /* FSDP1: BACKWARD_PRE prefetches as FSDP2 does (in the pre-backward hook); BACKWARD_POST
       only in the post-backward (after the unit's backward), None never; its reduce-scatter
       input (the unsharded flat gradient) is freed with the reduction, not kept to the next */
    int pre = !f->v1 || f->bwd == FSDP_BWD_PRE;
    /* a unit's pre-backward prefetches the group gathered before it in forward: the previous
       block's own parameters, whose nested experts (--ep) are prefetched only by that block's
       pre-backward (post-forward order experts_k-1, block_k-1, experts_k, block_k); likewise the
       last reduce-scatter input is the later block's own, its experts' freed by then */
    double prefetch = pre && f->gather && !f->keep && prev > 0 ? f->ug[prev] - f->ux[prev] : 0;
    double rs_in = !f->v1 && next <= f->units ? (f->ur[next] - f->ux[next]) * f->rb : 0;
    return (f->root + params + prefetch) * f->pb + rs_in;
}

/* After a block's routed experts ran their backward (--ep): their unit resharded (its unsharded
   parameters freed) and its reduce-scatter issued, whose input (the experts' gradients at the
   reduce dtype) is kept until the block's own post-backward. */
double plan_fsdp2_bwd_rest_comm(const Fsdp2 *f, const ModelSpec *m, int i) {
    int k = m->layers[i].unit;
    double all = plan_fsdp2_bwd_comm(f, m, i);
    if (k <= 0 || f->ux[k] <= 0 || f->v1 || f->keep) return all;
    double rs_in = k + 1 <= f->units ? (f->ur[k + 1] - f->ux[k + 1]) * f->rb : 0;
    return all - f->ux[k] * f->pb - rs_in + f->ux[k] * f->rb;
}

/* A unit's post-backward (after its first layer's backward): its unsharded parameters are
   freed (reshard after backward), the previous reduce-scatter input released, and its own
   reduce-scatter input allocated (the unsharded gradients copied in, then freed; the caller
   holds those). The prefetched next unit is still in flight. */
double plan_fsdp2_rs_comm(const Fsdp2 *f, const ModelSpec *m, int i) {
    int k = m->layers[i].unit;
    if (k <= 0) return f->root * f->pb;
    double params = f->keep ? f->pre[k] : 0;
    /* FSDP1 BACKWARD_POST: the previous unit is gathered here (_post_backward_reshard, after
       this unit's reshard, before its reduce-scatter) */
    int ahead = !f->v1 || f->bwd != FSDP_BWD_NONE;
    double prefetch = ahead && f->gather && !f->keep && k > 1 ? f->ug[k - 1] - f->ux[k - 1] : 0;
    return (f->root + params + prefetch) * f->pb + (f->ur[k] - f->ux[k]) * f->rb;
}

/* ---- FSDP1's size-based wrapping (wrap.py) ---- */

/* 1 when embedding layer l is one module that reaches min_params alone (LLaMA's embed_tokens). */
static int embed_alone(const LayerSpec *l, double min_params) {
    return l->kind == LAYER_EMBED && (l->n_tensors == 1 ? (double)l->tensor_elems[0] >= min_params
                                      : l->n_tensors == 0 && (double)l->params >= min_params);
}

int plan_fsdp_size_wrap(ModelSpec *m, double min_params, char *msg, size_t len) {
    int K = plan_model_units(m);
    if (m->arch != ARCH_DECODER || K == 0)
        return snprintf(msg, len, "--fsdp-min-params: memplan knows the module tree of decoders (embeddings, "
                        "blocks, final norm, head); %s is not one (valid: 0, one unit per block)", m->name), -1;
    double block = 0, body = 0, u = 0, wrapped = 0;
    int head = m->n_layers;   /* the head layers: those after the last non-head layer, in the root */
    while (head > 0 && m->layers[head - 1].kind == LAYER_HEAD) head--;
    for (int i = 0; i < m->n_layers; i++) {
        const LayerSpec *l = &m->layers[i];
        u = l->unit > 0 && i > 0 && m->layers[i - 1].unit == l->unit ? u + (double)l->params : (double)l->params;
        if (l->unit > 0 && u > block) block = u;
        if (i < head) body += (double)l->params;
    }
    if (min_params <= block)
        return snprintf(msg, len, "--fsdp-min-params %.0f wraps each block (or modules inside one, which memplan does "
                        "not know) of %s's %.0f parameters (valid: above %.0f, where the blocks' parent or the root "
                        "becomes the unit, or 0 for one unit per block)", min_params, m->name, block, block), -1;
    /* children first: the body's embedding modules that reach min_params alone */
    for (int i = 0; i < head; i++) {
        const LayerSpec *l = &m->layers[i];
        if (l->kind != LAYER_EMBED) continue;
        for (int t = 0; t < l->n_tensors && l->n_tensors > 1; t++)
            if ((double)l->tensor_elems[t] >= min_params)
                return snprintf(msg, len, "--fsdp-min-params %.0f wraps one embedding of %s's layer '%s' alone, a "
                                "part of a memplan layer (valid: above %.0f, or 0)", min_params, m->name, l->name,
                                (double)l->largest_tensor), -1;
        if (embed_alone(l, min_params)) wrapped += (double)l->params;
    }
    /* then the body, if what its children left reaches min_params, and the root's children after
       it (an untied head that reaches it alone; a tied one has no parameters of its own here);
       units numbered in layer order, the rest the root (0) */
    int body_wrapped = body - wrapped >= min_params, next = 0, in_body = 0;
    /* A tied head in the root reads the embedding's weight after the unit that holds it (the body,
       or the embedding alone) has resharded it:
       FSDP1 fails there (measured on gpt2-mini, torch 2.15: "size mismatch, got input (128),
       mat (128x128), vec (0)" in lm_head) */
    if ((body_wrapped || wrapped > 0) && m->tied_embeddings && head < m->n_layers)
        return snprintf(msg, len, "--fsdp-min-params %.0f wraps %s's body or embedding, which holds the weight its tied head "
                        "uses in the root after that unit is resharded: FSDP1 fails there (valid: above %.0f, "
                        "where everything stays in the root, or 0)", min_params, m->name, body), -1;
    for (int i = 0; i < m->n_layers; i++) {
        LayerSpec *l = &m->layers[i];
        if (i < head && embed_alone(l, min_params)) {
            l->unit = ++next;
            in_body = 0;
        } else if (i < head) {
            if (body_wrapped && !in_body) ++next;
            in_body = body_wrapped;
            l->unit = body_wrapped ? next : 0;
        } else {
            l->unit = (double)l->params >= min_params ? ++next : 0;
            in_body = 0;
        }
    }
    m->root_only = next == 0;
    return 0;
}

/* ---- FSDP1's original parameters per rank ---- */

/* Adds unit [layers with unit k, or each layer alone when k < 0 at layer `only`] to cnt[0..n-1]
   as a difference array: +1 at each tensor's first rank, -1 after its last. */
static void unit_ranks(const ModelSpec *m, int k, int only, int64_t n, int64_t *cnt) {
    double U = 0, off = 0;
    for (int pass = 0; pass < 2; pass++) {
        double S = ceil(U / (double)n);
        for (int i = 0; i < m->n_layers; i++) {
            const LayerSpec *l = &m->layers[i];
            if (k >= 0 ? l->unit != k : i != only) continue;
            for (int t = 0; t < l->n_tensors; t++) {
                double e = (double)l->tensor_elems[t];
                if (pass == 0) { U += e; continue; }
                if (e > 0 && S > 0) {
                    cnt[(int64_t)(off / S)]++;
                    int64_t r1 = (int64_t)((off + e - 1) / S) + 1;
                    if (r1 < n) cnt[r1]--;
                }
                off += e;
            }
        }
    }
}

int64_t plan_fsdp1_rank_tensors(const ModelSpec *m, int64_t n) {
    if (!plan_model_tensors_known(m) || n < 1 || n > (1 << 22)) return -1;
    int64_t *cnt = calloc((size_t)n, sizeof *cnt);
    if (!cnt) return -1;
    int K = plan_model_units(m);
    if (K == 0 && !m->root_only) {
        for (int i = 0; i < m->n_layers; i++) unit_ranks(m, -1, i, n, cnt);
    } else {
        for (int k = 0; k <= K; k++) unit_ranks(m, k, -1, n, cnt);
    }
    int64_t best = 0, run = 0;
    for (int64_t r = 0; r < n; r++) {
        run += cnt[r];
        if (run > best) best = run;
    }
    free(cnt);
    return best;
}
