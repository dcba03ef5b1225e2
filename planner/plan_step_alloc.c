/* plan_step_alloc.c — the step account as the allocations PyTorch makes (plan_step_alloc.h) and
 * the memory replay that adds the caching allocator's share to the account (plan_step_replay):
 * which tensors the account's events stand for, in which order and on which stream, over one or
 * more steps from an empty cache, and the figures the allocator model (plan_alloc.c) gives for
 * them. docs/formulas.md "The allocator in the plan". */
#include "plan_step_alloc.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "plan_dim_ft.h"
#include "plan_dim_moe.h"
#include "plan_step_internal.h"
#include "plan_util.h"

/* ---- what each rule's events stand for, set once per build ---- */

/* PyTorch's layouts keep one tensor per parameter (torch.optim's states per parameter, DDP a
   bucket per ~25 MiB of gradients); DeepSpeed flattens its groups into one buffer
   (stage_1_and_2.py flatten_dense_tensors_aligned; stage3.py fp32_partitioned_groups_flat) but
   ZeRO-3 partitions each parameter (ds_tensor); memplan's engine has flat buffers. */
void plan_step_alloc_layout(Step *st, const StepCtx *x) {
    memset(st->alloc_split, SPLIT_ONE, sizeof st->alloc_split);
    memset(st->alloc_stream, STREAM_COMPUTE, sizeof st->alloc_stream);
    memset(st->alloc_level, 0, sizeof st->alloc_level);
    /* FSDP2's gathered parameters, written as a level (plan_step_internal.h StepLevel) that
       holds a unit's parameters tensor by tensor and flat buffers. ZeRO-3's fetches stay as
       written: each rise is one coalesced all-gather's flat buffer (partitioned_param_coordinator
       .py __all_gather_params: one buffer per group), each fall the release of gathered
       parameters */
    st->alloc_level[RULE_FSDP2_BUFFERS] = 1;
    int torch = x->torch && !x->ds_py;
    if (torch) {
        static const RuleId PER_TENSOR[] = {RULE_PARAMS, RULE_GRADS_KEPT, RULE_STEP_GRADS, RULE_AUTOGRAD_GRADS,
                                            RULE_ACCUM_GRADS, RULE_FOREACH_TEMP};
        for (size_t k = 0; k < sizeof PER_TENSOR / sizeof PER_TENSOR[0]; k++) st->alloc_split[PER_TENSOR[k]] = SPLIT_TENSORS;
        st->alloc_split[RULE_OPTIMIZER] = SPLIT_STATES;
        st->alloc_split[RULE_DDP_BUCKETS] = SPLIT_BUCKETS;
    }
    if (x->ds3_py) st->alloc_split[RULE_PARAMS] = SPLIT_TENSORS;
    /* under DeepSpeed autograd still makes each parameter's .grad; ZeRO-2's hooks copy each
       into the reduce bucket and free it as it is made, so its in-flight gradient is one tensor
       (RULE_DS12_IN_FLIGHT stays one piece: the layer's largest) */
    if (x->ds_py) {
        st->alloc_split[RULE_AUTOGRAD_GRADS] = SPLIT_TENSORS;
        st->alloc_split[RULE_ACCUM_GRADS] = SPLIT_TENSORS;
    }
    /* FSDP's gathered parameters, unit by unit. FSDP1: each unit's are its one padded
       FlatParameter, allocated whole on the unshard stream (_flat_param.py
       _alloc_padded_unsharded_flat_param: _alloc_storage(unsharded_flat_param,
       _padded_unsharded_size), under _runtime_utils.py _unshard's stream(unshard_stream)) and
       freed whole (_free_unsharded_flat_param: _free_storage) */
    if (x->f2.on) {
        st->alloc_split[RULE_FSDP2_BUFFERS] = SPLIT_UNIT;
        st->alloc_unit_keep = (uint8_t)x->f2.keep;
        st->alloc_unit_flat = (uint8_t)x->f2.v1;
    }
    /* each parameter's gradient its own tensor until its unit's reduce-scatter: FSDP2's
       unsharded .grad per parameter, and FSDP1's too, whose forward uses views of the flat
       parameter (_flat_param.py _get_unflat_views_unaligned: torch.split(flat, numels) then
       .view(shape)), so autograd makes each view's gradient apart until the split's backward
       joins them into the flat gradient at the unit's end (a whole-model unit: 4,002,304 B on
       llama-mini, recorded after every block's gradients; the listing leaves that join out) */
    if (x->f2.on) st->alloc_split[RULE_FSDP2_UNSHARDED_GRADS] = SPLIT_TENSORS;
    /* FSDP2: per-parameter unsharded tensors and gradients around flat collective buffers
       (_fsdp_collectives.py foreach_all_gather / foreach_all_gather_copy_out / foreach_reduce) */
    if (x->f2.on && !x->f2.v1) {
        /* the reduce-scatter's output is made on the reduce-scatter stream (foreach_reduce
           allocates under torch.cuda.stream(reduce_scatter_stream)) */
        st->alloc_stream[RULE_FSDP2_SHARDED_GRADS] = STREAM_COMM + 1;
        /* the gradients the optimizer steps are those outputs (the sharded .grad are views of
           them): one request that takes their blocks over, not new per-tensor ones */
        st->alloc_split[RULE_STEP_GRADS] = SPLIT_ONE;
    }
    if (x->torch) {
        st->alloc_split[RULE_AUTOCAST_CACHE] = SPLIT_CASTS;
        st->alloc_split[RULE_RECAST] = SPLIT_CASTS;
        st->alloc_split[RULE_SAVED_ACTS] = SPLIT_ACTS;
        st->alloc_split[RULE_LOSS_BACKWARD] = SPLIT_LOGITS;
        st->alloc_split[RULE_MLP_BACKWARD] = SPLIT_BWD_WS;
    }
    /* torch.optim makes a parameter's states at its first step() (adam.py _init_group:
       state["exp_avg"] = torch.zeros_like(p, ...)); so does DeepSpeed's wrapped optimizer, over
       the flat fp32 partition (stage_1_and_2.py / stage3.py initialize_optimizer_states make
       only a zero gradient, and drop it: "other optimizers do lazy initialization of the state
       at the first call to step"; Adagrad, made at construction, is not planned) */
    st->alloc_lazy_opt = (uint8_t)(torch || x->ds_py);
    if (x->ds_py) st->alloc_split[RULE_OPTIMIZER] = SPLIT_COPIES;
    /* ZeRO-1/2's initialisation: the module's parameters are on the device tensor by tensor,
       each group is flattened into one buffer and the tensors become views of it (the
       originals freed: stage_1_and_2.py flatten_dense_tensors_aligned, _update_model_bit16_weights),
       then the fp32 partition and a zero gradient of its size, dropped at once
       (initialize_optimizer_states: group.grad = None) */
    st->alloc_ds_flatten = (uint8_t)x->ds12;
    st->alloc_opt_copies = (uint8_t)(x->o->states > 0 ? x->o->states : 1);
    /* DDP's constructor broadcasts rank 0's parameters and buffers (distributed.py
       _sync_module_states -> dist._broadcast_coalesced, broadcast_bucket_size 250 MiB), which
       flattens them into one buffer per 250 MiB of whole tensors (c10d comm.cpp
       broadcast_coalesced: compute_bucket_assignment_by_size, flatten_dense_tensors) */
    st->alloc_init_bcast = (uint8_t)(torch && x->s->buffers == BUF_DDP_BUCKETS && x->N > 1);
    /* DDP buckets nothing in its first iteration (distributed.py _ddp_init_helper: without
       find_unused_parameters, bucket_size_limits = [sys.maxsize]: one bucket of every gradient),
       and rebuilds the buckets in the second's forward (reducer.cpp rebuild_buckets ->
       initialize_buckets: the old bucket freed, the new ones allocated) */
    st->alloc_ddp_rebuild = st->alloc_init_bcast;
}

void plan_step_alloc_opts_default(StepAllocOpts *o) {
    o->steps = 2;
    o->one_stream = 0;
    o->host_on_device = 0;
}

/* ---- the account cut into tensors: the listing ---- */

/* The listing: each tensor freed or asked for, in step order, the end of each slot (a point,
   before or after its moment) and the start of each step. Every byte is a field (no padding), so
   two lists compare with memcmp. */
enum { OP_FREE, OP_ALLOC, OP_SLOT, OP_STEP, OP_FREE_OLDEST };
typedef struct {
    uint64_t size;
    uint16_t rule;
    uint8_t term, kind, stream;
    uint8_t zero[3];
} StepOp;
_Static_assert(sizeof(StepOp) == 16, "a listing operation is two words (ops_hash)");

typedef struct {
    StepOp *v;
    int n, cap;
    uint64_t hash;           /* ops_hash of v[0..n), set once the listing is made */
} OpList;

static int push_op(OpList *ops, StepOp op) {
    if (plan_grow((void **)&ops->v, &ops->cap, ops->n + 1, sizeof *ops->v)) return -1;
    ops->v[ops->n++] = op;
    return 0;
}

/* Weights of the tensors an event stands for, in the order they are made. */
typedef struct {
    double *w;
    int n, cap;
    int flat_from;       /* pieces from here on are flat collective buffers, made on flat_stream
                            (-1: none) */
    uint8_t flat_stream;
    /* the forward's op temporaries between the tensors (SPLIT_ACTS): temp[j] is made
       (PLAN_ACT_TEMP_MAKE) or the oldest live one freed (PLAN_ACT_TEMP_FREE) before tensor
       temp[j].at; not the event's bytes (plan_act_ckpt_ops) */
    struct { int at, kind; double bytes; } *temp;
    int nt, capt;
} Weights;

static int add_w(Weights *ws, double w) {
    if (w <= 0) return 0;
    if (plan_grow((void **)&ws->w, &ws->cap, ws->n + 1, sizeof *ws->w)) return -1;
    ws->w[ws->n++] = w;
    return 0;
}

/* A forward temporary (kind PLAN_ACT_TEMP_MAKE or _FREE) before the next tensor added. */
static int add_temp(Weights *ws, int kind, double bytes) {
    if (plan_grow((void **)&ws->temp, &ws->capt, ws->nt + 1, sizeof *ws->temp)) return -1;
    ws->temp[ws->nt].at = ws->n;
    ws->temp[ws->nt].kind = kind;
    ws->temp[ws->nt++].bytes = bytes;
    return 0;
}

/* The layer's parameter tensors (elements), forward order or reversed; a layer whose tensors are
   unknown counts as one of its parameters. copies: each tensor that many times in a row.
   frozen > 0: its frozen tensors too (after its trainable ones), each weighted by `frozen`
   (their bytes per element over the trainable ones'). */
static int layer_tensors_all(Weights *ws, const LayerSpec *l, int reverse, int copies, int casts_only, double frozen) {
    for (int k = 0; frozen > 0 && k < l->n_frozen; k++)
        if (reverse && add_w(ws, (double)l->frozen_elems[l->n_frozen - 1 - k] * frozen)) return -1;
    if (l->n_tensors <= 0) {
        for (int c = 0; c < copies; c++)
            if (!casts_only && add_w(ws, (double)l->params)) return -1;
    }
    for (int k0 = 0; k0 < (l->n_tensors > 0 ? l->n_tensors : 0); k0++) {
        int k = reverse ? l->n_tensors - 1 - k0 : k0;
        double e = (double)l->tensor_elems[k];
        if (casts_only && (l->tensor_dim0[k] <= 0 || l->tensor_dim0[k] >= l->tensor_elems[k])) continue;   /* 1-D */
        for (int c = 0; c < copies; c++)
            if (add_w(ws, e)) return -1;
    }
    for (int k = 0; frozen > 0 && k < l->n_frozen; k++)
        if (!reverse && add_w(ws, (double)l->frozen_elems[k] * frozen)) return -1;
    return 0;
}

static int layer_tensors(Weights *ws, const LayerSpec *l, int reverse, int copies, int casts_only) {
    return layer_tensors_all(ws, l, reverse, copies, casts_only, 0);
}

/* Bytes per frozen element over bytes per trainable one (the parameters' rule holds both). */
static double frozen_weight(const Step *st) {
    const ModelSpec *m = &st->view.m;
    double fe = (double)plan_model_frozen(m), pb = plan_precision(st->view.t.precision)->param_bytes;
    return fe > 0 && pb > 0 ? plan_model_frozen_bytes(m, &st->view.t) / fe / pb : 0;
}

/* DDP's buckets (reducer.cpp compute_bucket_assignment_by_size, after the first iteration's
   rebuild): whole gradient tensors in reverse order, the first bucket closing at 1 MiB, the
   others at 25 MiB; the bytes of each. */
static int ddp_buckets(Weights *ws, const ModelSpec *m, double gb) {
    double fill = 0, lim = PLAN_DDP_FIRST_BUCKET;
    for (int i = m->n_layers - 1; i >= 0; i--) {
        const LayerSpec *l = &m->layers[i];
        int nt = l->n_tensors > 0 ? l->n_tensors : 1;
        for (int k = nt - 1; k >= 0; k--) {
            fill += (l->n_tensors > 0 ? (double)l->tensor_elems[k] : (double)l->params) * gb;
            if (fill < lim) continue;
            if (add_w(ws, fill)) return -1;
            fill = 0;
            lim = PLAN_DDP_BUCKET;
        }
    }
    return add_w(ws, fill);
}

/* A layer's saved tensors (bytes each) as plan_activ.c counts them (plan_act_ckpt_tensors), in
   the order forward makes them; what it counts without listing them (the event's bytes beyond
   their sum: a MoE block's experts, LoRA's adapters) one more tensor. made: the event makes them
   (its forward), and the op temporaries noted between them are listed there too (ws->temp). */
static int act_weights(const Step *st, int layer, double bytes, int made, Weights *ws) {
    const TrainSpec *t = &st->view.t;
    const ModelSpec *m = &st->view.m;
    ActInputs in = {t->micro_batch, t->seq > 0 ? t->seq : m->max_seq, t->dropout >= 0 ? t->dropout : m->dropout};
    double v[PLAN_ACT_MAX_TENSORS], sum = 0, freed[3];
    int kind[PLAN_ACT_MAX_TENSORS];
    int n = plan_act_ckpt_ops(m, layer, t, &in, v, kind, PLAN_ACT_MAX_TENSORS);
    int nf = plan_moe_bwd_freed(m, layer, t, &in, freed);
    /* a MoE block's tensors freed at its MLP moment are an event of their own: that event is
       them; the layer's other event lists the rest (the latest of each size out) */
    if (nf && fabs(bytes - (freed[0] + freed[1] + freed[2])) < 1) {
        for (int k = 0; k < nf; k++)
            if (add_w(ws, freed[k])) return -1;
        return 0;
    }
    for (int f = 0; f < nf; f++)
        for (int k = n - 1; k >= 0; k--)
            if (kind[k] == PLAN_ACT_SAVED && fabs(v[k] - freed[f]) < 0.5) {
                v[k] = 0;
                break;
            }
    for (int k = 0; k < n; k++) {
        if (kind[k] != PLAN_ACT_SAVED) {   /* listed where the tensors are made, not freed */
            if (made && add_temp(ws, kind[k], v[k])) return -1;
            continue;
        }
        if (add_w(ws, v[k])) return -1;   /* add_w skips the zeros */
        sum += v[k];
    }
    return n > 0 && bytes > sum + 1 ? add_w(ws, bytes - sum) : 0;
}

/* A block's backward working set (plan_act_block_backward_bytes) at its MLP point: under
   checkpointing, the recomputed forward's tensors first (what the layer saves unchecked:
   recomputation rebuilds its graph), then the backward's own: its d_ff-wide gradients
   (plan_act_mlp_bwd_grads: two, three under a frozen output projection), the rest one piece;
   tensors the event's bytes do not hold (the checkpoint's input, which is not made again)
   shrink in proportion. */
static int bwd_ws_weights(const Step *st, int layer, double bytes, Weights *ws) {
    const ModelSpec *m = &st->view.m;
    TrainSpec t = st->view.t;
    ActInputs in = {t.micro_batch, t.seq > 0 ? t.seq : m->max_seq, t.dropout >= 0 ? t.dropout : m->dropout};
    double sum = 0;
    if (plan_act_checkpointed(m, &t, layer)) {
        double v[PLAN_ACT_MAX_TENSORS];
        t.act_ckpt = CKPT_NONE;
        int n = plan_act_ckpt_tensors(m, layer, &t, &in, v, PLAN_ACT_MAX_TENSORS);
        for (int k = 0; k < n; k++) {
            if (add_w(ws, v[k])) return -1;
            sum += v[k];
        }
    }
    /* a MoE block's working set is its experts' (plan_moe_backward: net of the saved tensors
       freed while it is made): where the saved product is freed at the moment, the three
       gradients of its size (down's input's, the gate's, up's: plan_moe_bwd_freed), else one
       piece; not a dense MLP's two gradients */
    double freed[3], prod = plan_moe_bwd_freed(m, layer, &t, &in, freed) ? freed[0] : 0;
    double f = plan_moe_block(m, &m->layers[layer]) ? prod
             : (double)in.b * (double)in.s * (double)m->d_ff * plan_precision(t.precision)->act_bytes,
           left = bytes - sum;
    int nf = prod > 0 ? 3 : plan_act_mlp_bwd_grads(m, layer, &t);
    for (int k = 0; k < nf && f > 0 && left > f; k++, left -= f)
        if (add_w(ws, f)) return -1;
    return left > 0.5 ? add_w(ws, left) : 0;
}

/* Unit u's parameters tensor by tensor, at pb bytes per trainable element, its frozen ones
   (fine-tuning's base weights: FSDP2 gathers them too) weighted by fz; its bytes into *bytes. */
static int unit_params(const ModelSpec *m, int u, double pb, double fz, Weights *ws, double *bytes) {
    *bytes = 0;
    for (int i = 0; i < m->n_layers; i++) {
        if (m->layers[i].unit != u) continue;
        Weights one = {.flat_from = -1};
        if (layer_tensors_all(&one, &m->layers[i], 0, 1, 0, fz)) { free(one.w); return -1; }
        for (int k = 0; k < one.n; k++) {
            if (add_w(ws, one.w[k] * pb)) { free(one.w); return -1; }
            *bytes += one.w[k] * pb;
        }
        free(one.w);
    }
    return 0;
}

/* Every unit's parameters as unit_params gives them, made once per listing (a listing asks for
   units at every layer's point, each of them a walk over the model): unit u's weights are
   w[from[u] .. from[u + 1]), its bytes bytes[u]. Made for step `of` within one list_ops call,
   which clears it at its start (NULL: none made; another step may later lie at that address). */
typedef struct {
    const Step *of;
    int units;                 /* the highest unit */
    double *w, *bytes;
    int *from;
    int nw, capw, capu, capf;
} UnitTable;
static _Thread_local UnitTable unit_tab;

static int unit_table(const Step *st) {
    UnitTable *T = &unit_tab;
    if (T->of == st) return 0;
    T->of = NULL;
    const ModelSpec *m = &st->view.m;
    double pb = plan_precision(st->view.t.precision)->param_bytes, fz = frozen_weight(st);
    int units = 0;
    for (int i = 0; i < m->n_layers; i++)
        if (m->layers[i].unit > units) units = m->layers[i].unit;
    if (plan_grow((void **)&T->bytes, &T->capu, units + 1, sizeof *T->bytes)) return -1;
    if (plan_grow((void **)&T->from, &T->capf, units + 2, sizeof *T->from)) return -1;
    T->nw = 0;
    for (int u = 0; u <= units; u++) {
        Weights one = {.flat_from = -1};
        double b = 0;
        int rc = unit_params(m, u, pb, fz, &one, &b) ||
                 plan_grow((void **)&T->w, &T->capw, T->nw + one.n + 1, sizeof *T->w);
        if (!rc) {
            T->from[u] = T->nw;
            if (one.n > 0) memcpy(T->w + T->nw, one.w, sizeof *one.w * (size_t)one.n);   /* a unit with no weights: w NULL */
            T->nw += one.n;
            T->bytes[u] = b;
        }
        free(one.w);
        if (rc) return -1;
    }
    T->from[units + 1] = T->nw;
    T->units = units;
    T->of = st;
    return 0;
}

/* A sharded unit level's bytes at layer `layer`'s point (SPLIT_UNIT): the unit's parameters
   tensor by tensor (FSDP1's: one flat parameter, Step.alloc_unit_flat), then the root's (FSDP2
   keeps the root unsharded), then while the level holds more, the units kept since their
   forward (SHARD_GRAD_OP: alloc_unit_keep; at the head and the loss, every block), else flat
   buffers of the unit (the all-gather output, a prefetch, the reduce-scatter input); the rest
   one piece. */
#define PLAN_FSDP2_MAX_FLAT 8
static int unit_weights(const Step *st, int layer, int backward, double bytes, Weights *ws) {
    const ModelSpec *m = &st->view.m;
    if (unit_table(st)) return -1;
    const UnitTable *T = &unit_tab;
    int u = m->layers[layer].unit, units = T->units;
    double b = 0, left = bytes, unit = 0;
    int order[2 + 2 * 4096], n = 0;
    order[n++] = u;
    if (u != 0) order[n++] = 0;
    /* FSDP1 holds no flat buffers besides the units' flat parameters: what the level holds past
       the unit's own is other units' (prefetched or kept), nearest first */
    int others = st->alloc_unit_keep || st->alloc_unit_flat, head = 0;
    for (int i = 0; i < layer; i++) head |= m->layers[i].unit > 0;   /* a root layer after the blocks */
    /* at the root's layers before the blocks (the embedding) in forward no block has been
       gathered since its last reshard (SHARD_GRAD_OP reshards each unit after its backward):
       FSDP1's forward prefetch of the first blocks at most; in backward the first blocks' buffers */
    if (u == 0 && !head && !backward && !st->alloc_unit_flat) others = 0;
    for (int d = 1; others && d <= units && n < (int)(sizeof order / sizeof order[0]); d++) {
        if (u - d >= 1) order[n++] = u - d;
        if (u + d <= units && u != 0) order[n++] = u + d;
        if (u == 0) order[n++] = head ? units + 1 - d : d;   /* the loss, the head: every block */
    }
    for (int k = 0; k < n && left > 0; k++) {
        int at = order[k], nw = at >= 0 && at <= units ? T->from[at + 1] - T->from[at] : 0;
        const double *w = nw ? T->w + T->from[at] : NULL;
        b = at >= 0 && at <= units ? T->bytes[at] : 0;
        if (k == 0) unit = b;
        if (b > 0 && b <= left + 1) {
            for (int j = 0; j < (st->alloc_unit_flat ? 1 : nw); j++)
                if (add_w(ws, st->alloc_unit_flat ? b : w[j])) return -1;
            left -= b;
        }
    }
    /* FSDP2's all-gather output and reduce-scatter input: their streams'; FSDP1's flat
       parameters all the unshard stream's */
    ws->flat_from = st->alloc_unit_flat ? 0 : ws->n;
    ws->flat_stream = STREAM_COMM;
    /* a few at most (what the account holds past the unit's own and the kept ones is its flat
       buffers: at most one each for the gather in use, its prefetch, the reduce-scatter); more
       than that is left one piece */
    for (int f = 0; unit > 0 && left >= unit && f < PLAN_FSDP2_MAX_FLAT; f++, left -= unit)
        if (add_w(ws, unit)) return -1;
    return left > 0.5 && ws->n > 0 ? add_w(ws, left) : 0;
}

/* The tensors event e stands for (weights, in the order they are made), under the step's
   layout. An event at a layer's point is that layer's; at START, the step or the reductions,
   the model's. */
static int event_weights(const Step *st, const StepMem *e, Weights *ws) {
    const ModelSpec *m = &st->view.m;
    int layer;
    PointKind k = plan_step_point_kind(st->n_layers, e->point, &layer);
    int at_layer = layer >= 0 && layer < m->n_layers && k != PT_ROOT_RS && k != PT_REDUCE1 && k != PT_REDUCE2 &&
                   k != PT_LOSS_FWD && k != PT_LOSS_BWD;
    int backward = k == PT_BWD_MLP || k == PT_BWD || k == PT_BWD_UNIT;
    ws->n = ws->nt = 0;
    ws->flat_from = -1;
    switch ((StepSplit)st->alloc_split[e->rule]) {
    case SPLIT_TENSORS:
    case SPLIT_STATES: {
        int copies = st->alloc_split[e->rule] == SPLIT_STATES ? st->alloc_opt_copies : 1;
        double fz = e->rule == RULE_PARAMS ? frozen_weight(st) : 0;
        if (at_layer) return layer_tensors_all(ws, &m->layers[layer], backward, copies, 0, fz);
        /* a free away from a layer's point: one piece, which releases the rule's latest blocks
           until its bytes are covered (a layer's gradients freed at the step: all of them go in
           that slot anyway) */
        if (e->bytes < 0) return 0;
        for (int i = 0; i < m->n_layers; i++)
            if (layer_tensors_all(ws, &m->layers[i], 0, copies, 0, fz)) return -1;
        return 0;
    }
    case SPLIT_CASTS:
        return at_layer ? layer_tensors(ws, &m->layers[layer], backward, 1, 1) : 0;
    case SPLIT_BUCKETS:
        return ddp_buckets(ws, m, plan_precision(st->view.t.precision)->grad_bytes);
    case SPLIT_ACTS:
        return at_layer ? act_weights(st, layer, fabs(e->bytes), e->bytes > 0, ws) : 0;
    case SPLIT_COPIES:
        for (int c = 0; c < st->alloc_opt_copies; c++)
            if (add_w(ws, 1)) return -1;
        return 0;
    case SPLIT_BWD_WS:
        return at_layer ? bwd_ws_weights(st, layer, fabs(e->bytes), ws) : 0;
    case SPLIT_UNIT:   /* the loss's points are the head's (the root's) */
        return layer >= 0 && layer < m->n_layers ? unit_weights(st, layer, backward, fabs(e->bytes), ws) : 0;
    case SPLIT_LOGITS: {
        double one = (double)st->view.t.micro_batch * (double)(st->view.t.seq > 0 ? st->view.t.seq : m->max_seq) *
                     (double)m->vocab * 4.0;
        double n = one > 0 ? round(fabs(e->bytes) / one) : 0;
        for (double j = 0; j < n && n <= 64; j++)
            if (add_w(ws, one)) return -1;
        return 0;
    }
    default: return 0;
    }
}

/* The temporaries listed before tensor k (from ws->temp[*j]; last: those after it too, pushed
   before it since the event's last tensor is the layer's output), each made in the order the
   forward makes it and freed oldest first: a free follows the slot whose requests made the
   tensor it frees (a slot runs its frees before its requests: resolve_until). Temporaries are
   the event's rule's, TERM_TRANSIENT; the slot boundaries split the event's slot. */
static int push_temps(OpList *ops, const StepMem *e, const Weights *ws, int k, int *j, int last, int stream) {
    for (; *j < ws->nt && (ws->temp[*j].at <= k || last); (*j)++) {
        uint64_t b = (uint64_t)llround(ws->temp[*j].bytes);
        int fr = ws->temp[*j].kind == PLAN_ACT_TEMP_FREE;
        if (fr && push_op(ops, (StepOp){0, 0, 0, OP_SLOT, 0, {0}})) return -1;
        if (push_op(ops, (StepOp){b, e->rule, TERM_TRANSIENT, (uint8_t)(fr ? OP_FREE_OLDEST : OP_ALLOC), (uint8_t)stream, {0}}))
            return -1;
    }
    return 0;
}

/* Bytes into pieces in proportion to the weights (none: one piece), rounded down but the last,
   which takes the rest: the pieces add up to the event's bytes rounded up. */
static int push_pieces(OpList *ops, const StepMem *e, const Weights *ws, int kind, int stream) {
    uint64_t bytes = (uint64_t)ceil(fabs(e->bytes)), left = bytes;
    double total = 0;
    for (int k = 0; k < ws->n; k++) total += ws->w[k];
    int n = total > 0 ? ws->n : 1;
    int flat_from = total > 0 && ws->flat_from >= 0 ? ws->flat_from : n;
    if (plan_grow((void **)&ops->v, &ops->cap, ops->n + n, sizeof *ops->v)) return -1;   /* room for every piece */
    for (int k = 0, j = 0; k < n; k++) {
        if (ws->nt && (push_temps(ops, e, ws, k, &j, k == n - 1, stream) ||
                       plan_grow((void **)&ops->v, &ops->cap, ops->n + n - k, sizeof *ops->v))) return -1;
        /* the share, floored: the quotient of whole weights that add up to the bytes can land a
           rounding error below the whole tensor (131,071.99...), which the tolerance keeps whole */
        double x = k == n - 1 ? 0 : (double)bytes * ws->w[k] / total;
        uint64_t piece = k == n - 1 ? left : (uint64_t)(x + x * 1e-12);   /* >= 0: the cast floors */
        if (piece > left) piece = left;
        left -= piece;
        int s = k >= flat_from ? ws->flat_stream : stream;
        if (piece) ops->v[ops->n++] = (StepOp){piece, e->rule, e->term, (uint8_t)kind, (uint8_t)s, {0}};
    }
    return 0;
}

/* torch.optim's `step` scalars where the host is the device (StepAllocOpts.host_on_device):
   _init_group makes each parameter's `state["step"] = torch.tensor(0.0, dtype=_get_scalar_dtype())`
   (fp32, 4 B, on the host unless capturable or fused), then its states (torch/optim/adam.py
   `_init_group`): one scalar before each parameter's states among the optimizer's pieces ops
   [from, n), as many as the account's host bytes hold (Step.opt_host_bytes / 4, rule_model_states),
   any left over after them. Measured on CPU ranks: a 4 B request before each pair of zeros_like
   (gpt2-mini AdamW, harness --alloc-ops, 2026-12-07). */
static int push_step_scalars(const Step *st, OpList *ops, int from) {
    int copies = st->alloc_split[RULE_OPTIMIZER] == SPLIT_STATES ? st->alloc_opt_copies : 0;
    int64_t scalars = (int64_t)llround(st->opt_host_bytes / 4.0), pieces = ops->n - from;
    if (scalars <= 0) return 0;
    StepOp *v = malloc(sizeof *v * (size_t)(pieces > 0 ? pieces : 1));
    if (!v || plan_grow((void **)&ops->v, &ops->cap, ops->n + (int)scalars, sizeof *ops->v)) { free(v); return -1; }
    memcpy(v, ops->v + from, sizeof *v * (size_t)pieces);
    StepOp one = {4, RULE_OPTIMIZER, TERM_OPTIMIZER, OP_ALLOC, 0, {0}};
    ops->n = from;
    for (int64_t k = 0; k < pieces; k++) {
        if (copies > 0 && k % copies == 0 && scalars > 0 && (scalars--, 1)) ops->v[ops->n++] = one;
        ops->v[ops->n++] = v[k];
    }
    for (; scalars > 0; scalars--) ops->v[ops->n++] = one;
    free(v);
    return 0;
}

/* DDP's construction broadcast (Step.alloc_init_bcast): its flat chunks after the parameters are
   allocated and before DDP's bucket, at most two in flight (comm.cpp broadcast_coalesced,
   max_in_flight = 2: the oldest finishes and its flat tensor goes before the next is made). */
#define DDP_BCAST_BUCKET (250.0 * 1024 * 1024)
static int init_broadcast(const Step *st, OpList *ops) {
    const ModelSpec *m = &st->view.m;
    double pb = plan_precision(st->view.t.precision)->param_bytes, fill = 0;
    int dtypes = 1;
    double buffers = plan_model_buffer_bytes(m, &dtypes);
    Weights ws = {.flat_from = -1};
    uint64_t flight[2];
    int n = 0, rc = 0;
    for (int i = 0; i <= m->n_layers && !rc; i++) {
        const LayerSpec *l = i < m->n_layers ? &m->layers[i] : NULL;
        ws.n = 0;
        if (l && layer_tensors_all(&ws, l, 0, 1, 0, frozen_weight(st))) { rc = -1; break; }
        int nt = !l ? 1 : ws.n;
        for (int k = 0; k < nt && !rc; k++) {
            fill += !l ? buffers : ws.w[k] * pb;
            /* compute_bucket_assignment_by_size: a tensor joins the bucket, which closes once
               it holds the limit or more */
            if (!(fill > 0 && (fill >= DDP_BCAST_BUCKET || !l))) continue;
            if (n == 2) {
                rc = push_op(ops, (StepOp){flight[0], RULE_DDP_BROADCAST, TERM_COMM, OP_FREE, 0, {0}}) ||
                     push_op(ops, (StepOp){0, 0, 0, OP_SLOT, 0, {0}});
                flight[0] = flight[1];
                n = 1;
            }
            flight[n] = (uint64_t)ceil(fill);
            rc = rc || push_op(ops, (StepOp){flight[n], RULE_DDP_BROADCAST, TERM_COMM, OP_ALLOC, 0, {0}}) ||
                 push_op(ops, (StepOp){0, 0, 0, OP_SLOT, 0, {0}});
            n++;
            fill = 0;
        }
    }
    free(ws.w);
    for (int k = 0; k < n && !rc; k++)
        rc = push_op(ops, (StepOp){flight[k], RULE_DDP_BROADCAST, TERM_COMM, OP_FREE, 0, {0}}) ||
             push_op(ops, (StepOp){0, 0, 0, OP_SLOT, 0, {0}});
    return rc;
}

/* An event that lives across steps: allocated at the start, freed at the end, the same bytes of
   the same rule and term (the model states, the frameworks' buffers). carry[e] = 1 for both. */
static void mark_carried(const Step *st, const int *idx, uint8_t *carry) {
    int s0 = plan_step_point(st->n_layers, PT_START, 0), end = plan_step_point(st->n_layers, PT_END, 0);
    for (int a = 0; a < st->n_mem; a++) {
        const StepMem *x = &st->mem[idx[a]];
        if (x->point != s0 || x->when != AT_BEFORE || x->bytes <= 0) continue;
        for (int b = st->n_mem - 1; b >= 0; b--) {
            const StepMem *y = &st->mem[idx[b]];
            if (y->point != end || y->when != AT_AFTER || carry[idx[b]]) continue;
            if (y->rule == x->rule && y->term == x->term && y->bytes == -x->bytes) {
                carry[idx[a]] = carry[idx[b]] = 1;
                break;
            }
        }
    }
}

/* The listing of o->steps steps: what lives across steps first (torch.optim's states at the
   first step's optimizer step instead), then each step's events slot by slot, cut into tensors;
   overhead events are no tensors. */
/* One event of a level rule (Step.alloc_level): the level's tensors freed, the new level's
   allocated in its own tensors (in one slot: blocks of the same size are taken over). */
static int push_level(OpList *ops, const Step *st, const StepMem *x, double *level, Weights *ws, int stream,
                      int one_stream) {
    StepMem was = *x, now = *x;
    was.bytes = -*level;
    *level += x->bytes;
    if (*level < 0.5) *level = 0;
    now.bytes = *level;
    Weights none = {.flat_from = -1};
    if (was.bytes < 0 && push_pieces(ops, &was, &none, OP_FREE, stream)) return -1;
    if (now.bytes <= 0) return 0;
    if (event_weights(st, &now, ws)) return -1;
    if (one_stream) ws->flat_from = -1;
    return push_pieces(ops, &now, ws, OP_ALLOC, stream);
}

/* ZeRO-1/2's parameters before the flattening (Step.alloc_ds_flatten): the module's tensors,
   allocated (kind OP_ALLOC, in a slot of their own before the flat buffer) or freed (OP_FREE,
   once it is made), as transients of the parameters' rule. */
static int ds_unflattened(const Step *st, const StepMem *x, Weights *ws, OpList *ops, int kind) {
    StepMem pre = *x;
    pre.term = TERM_TRANSIENT;
    ws->n = 0;
    ws->flat_from = -1;
    for (int i = 0; kind == OP_ALLOC && i < st->view.m.n_layers; i++)
        if (layer_tensors_all(ws, &st->view.m.layers[i], 0, 1, 0, frozen_weight(st))) return -1;
    return push_op(ops, (StepOp){0, 0, 0, OP_SLOT, 0, {0}}) || push_pieces(ops, &pre, ws, kind, 0) ||
           push_op(ops, (StepOp){0, 0, 0, OP_SLOT, 0, {0}});
}

/* A block's MLP moment holds only the gradients its MLP's output projection has made: autograd
   makes the others as the backward reaches their layers, after the activation's backward (a MoE
   block's gate_up weight gradient, 2 MiB on mixtral-wide b4, recorded after the working set's
   peak: torch/_tensor.py backward -> the grouped_mm node's weight gradient last). The account
   says so with RULE_MLP_PENDING_GRADS (pending bytes out before the moment, back after it). In
   the listing, the slot's latest gradient allocations (from ops[from]), up to `pending` bytes
   (the last one cut where the bytes end), leave the slot for `later`, which the next slot makes
   at its end; the pending rule's own events list nothing. */
static int defer_grads(OpList *ops, int from, uint64_t pending, OpList *later) {
    int first = ops->n;   /* the first op deferred (whole or in part) */
    uint64_t left = pending;
    for (int k = ops->n - 1; k >= from && left; k--) {
        const StepOp *x = &ops->v[k];
        if (x->kind != OP_ALLOC || x->term != TERM_GRADS) continue;
        first = k;
        left -= x->size < left ? x->size : left;
    }
    left = pending;
    int n = from;
    for (int k = from; k < ops->n; k++) {
        StepOp x = ops->v[k];
        if (k < first || x.kind != OP_ALLOC || x.term != TERM_GRADS || !left) { ops->v[n++] = x; continue; }
        uint64_t cut = 0;   /* of the first deferred op, what stays: the part past the pending bytes */
        if (k == first) {
            uint64_t later_bytes = 0;
            for (int j = k; j < ops->n; j++)
                if (ops->v[j].kind == OP_ALLOC && ops->v[j].term == TERM_GRADS) later_bytes += ops->v[j].size;
            cut = later_bytes > pending ? later_bytes - pending : 0;
        }
        if (cut) {
            StepOp keep = x;
            keep.size = cut;
            ops->v[n++] = keep;
            x.size -= cut;
        }
        left -= x.size < left ? x.size : left;
        if (push_op(later, x)) return -1;
    }
    ops->n = n;
    return 0;
}

/* A hash of the listing's words: a quick test that two listings differ (ops_same compares them
   whole when it matches). */
static uint64_t ops_hash(const OpList *ops) {
    uint64_t h = (uint64_t)ops->n;
    for (int k = 0; k < ops->n; k++) {
        uint64_t w[2];
        memcpy(w, &ops->v[k], sizeof w);
        h = (h ^ w[0]) * 0x9E3779B97F4A7C15ull;
        h = (h ^ w[1] ^ h >> 29) * 0xBF58476D1CE4E5B9ull;
    }
    return h;
}

/* An event's pieces in a later step: those it made in the first (at[0], at[1] of them), its
   weights and bytes being the same (event_weights reads only the step and the event). */
static int push_again(OpList *ops, const int *at) {
    if (plan_grow((void **)&ops->v, &ops->cap, ops->n + at[1], sizeof *ops->v)) return -1;
    memcpy(ops->v + ops->n, ops->v + at[0], sizeof *ops->v * (size_t)at[1]);
    ops->n += at[1];
    return 0;
}

static int list_ops(const Step *st, const StepAllocOpts *o, OpList *ops) {
    unit_tab.of = NULL;
    int *idx = plan_step_order_events(st);
    uint8_t *carry = calloc((size_t)(st->n_mem > 0 ? st->n_mem : 1), 1);
    int *made = malloc(sizeof *made * 2 * (size_t)(st->n_mem > 0 ? st->n_mem : 1));   /* push_again */
    double level[RULE_COUNT][TERM_COUNT];
    memset(level, 0, sizeof level);
    Weights ws = {.flat_from = -1};
    OpList later = {0};   /* gradients deferred past a block's MLP moment */
    int rc = !idx || !carry || !made ? -1 : 0;
    int step_pt = plan_step_point(st->n_layers, PT_STEP, 0), lazy_done = 0;
    ops->n = 0;
    if (!rc) mark_carried(st, idx, carry);
    /* what lives across steps, in the order the rules wrote it: the parameters, DDP's
       construction broadcast, the rest */
    for (int pass = 0; pass < 2 && !rc; pass++) {
        if (pass == 1 && st->alloc_init_bcast) rc = push_op(ops, (StepOp){0, 0, 0, OP_SLOT, 0, {0}}) ||
                                                   init_broadcast(st, ops);
    for (int e = 0; e < st->n_mem && !rc; e++) {
        const StepMem *x = &st->mem[idx[e]];
        if (!carry[idx[e]] || x->bytes <= 0 || x->term == TERM_OVERHEAD) continue;
        if ((x->rule == RULE_PARAMS) != (pass == 0)) continue;
        if (x->rule == RULE_OPTIMIZER && st->alloc_lazy_opt) continue;
        if (x->rule == RULE_PARAMS && st->alloc_ds_flatten) rc = ds_unflattened(st, x, &ws, ops, OP_ALLOC);
        if (rc) break;
        if (x->rule == RULE_DDP_BUCKETS && st->alloc_ddp_rebuild) ws.n = 0;   /* one bucket at first */
        else if (event_weights(st, x, &ws)) rc = -1;
        if (!rc) rc = push_pieces(ops, x, &ws, OP_ALLOC, o->one_stream ? 0 : st->alloc_stream[x->rule]);
        if (!rc && x->rule == RULE_PARAMS && st->alloc_ds_flatten) rc = ds_unflattened(st, x, &ws, ops, OP_FREE);
        if (!rc && x->rule == RULE_DS_FP32_COPY && st->alloc_ds_flatten) {
            StepMem z = *x;   /* the zero gradient, made and dropped */
            Weights none = {.flat_from = -1};
            z.term = TERM_TRANSIENT;
            rc = push_op(ops, (StepOp){0, 0, 0, OP_SLOT, 0, {0}}) || push_pieces(ops, &z, &none, OP_ALLOC, 0) ||
                 push_op(ops, (StepOp){0, 0, 0, OP_SLOT, 0, {0}}) || push_pieces(ops, &z, &none, OP_FREE, 0) ||
                 push_op(ops, (StepOp){0, 0, 0, OP_SLOT, 0, {0}});
        }
    }
    }
    if (!rc) rc = push_op(ops, (StepOp){0, 0, 0, OP_SLOT, 0, {0}});
    for (int step = 1; step <= o->steps && !rc; step++) {
        rc = push_op(ops, (StepOp){(uint64_t)step, 0, 0, OP_STEP, 0, {0}});
        for (int e0 = 0, e1; e0 < st->n_mem && !rc; e0 = e1) {
            const StepMem *first = &st->mem[idx[e0]];
            for (e1 = e0; e1 < st->n_mem && st->mem[idx[e1]].point == first->point &&
                          st->mem[idx[e1]].when == first->when; e1++) {}
            /* the second step's forward rebuilds DDP's buckets: the one bucket freed, the
               rebuilt ones allocated */
            if (step == 2 && st->alloc_ddp_rebuild && first->point == plan_step_point(st->n_layers, PT_FWD, 0) &&
                first->when == AT_BEFORE)
                for (int e = 0; e < st->n_mem && !rc; e++) {
                    const StepMem *x = &st->mem[idx[e]];
                    if (!carry[idx[e]] || x->bytes <= 0 || x->rule != RULE_DDP_BUCKETS) continue;
                    Weights none = {.flat_from = -1};
                    rc = push_pieces(ops, x, &none, OP_FREE, 0) || event_weights(st, x, &ws) ||
                         push_pieces(ops, x, &ws, OP_ALLOC, o->one_stream ? 0 : st->alloc_stream[x->rule]);
                }
            /* the first step() makes the optimizer's states before its update (_init_group): in
               the step point's first slot (or the first after it, where nothing happens there) */
            if (step == 1 && !lazy_done && first->point >= step_pt && st->alloc_lazy_opt && (lazy_done = 1))
                for (int e = 0; e < st->n_mem && !rc; e++) {
                    const StepMem *x = &st->mem[idx[e]];
                    if (carry[idx[e]] && x->bytes > 0 && x->rule == RULE_OPTIMIZER) {
                        int from = ops->n;
                        rc = event_weights(st, x, &ws) || push_pieces(ops, x, &ws, OP_ALLOC, 0);
                        if (!rc && o->host_on_device) rc = push_step_scalars(st, ops, from);
                    }
                }
            int slot_from = ops->n;
            double pending = 0;
            for (int e = e0; e < e1 && !rc; e++) {
                const StepMem *x = &st->mem[idx[e]];
                int stream = o->one_stream ? 0 : st->alloc_stream[x->rule];
                if (carry[idx[e]] || x->term == TERM_OVERHEAD) continue;
                if (x->rule == RULE_FWD_TEMPS) continue;   /* made between the saved tensors (act_weights) */
                if (x->rule == RULE_MLP_PENDING_GRADS) {   /* made by the deferral below */
                    pending -= x->bytes < 0 ? x->bytes : 0;
                    continue;
                }
                if (st->alloc_level[x->rule]) rc = push_level(ops, st, x, &level[x->rule][x->term], &ws, stream, o->one_stream);
                else if (step > 1 && made[2 * idx[e] + 1] >= 0) rc = push_again(ops, &made[2 * idx[e]]);
                else if (step > 1) rc = event_weights(st, x, &ws) || push_pieces(ops, x, &ws, x->bytes < 0 ? OP_FREE : OP_ALLOC, stream);
                else {
                    made[2 * idx[e]] = ops->n;
                    rc = event_weights(st, x, &ws) || push_pieces(ops, x, &ws, x->bytes < 0 ? OP_FREE : OP_ALLOC, stream);
                    made[2 * idx[e] + 1] = ops->n - made[2 * idx[e]];
                }
            }
            /* the gradients a block's MLP moment holds pending (RULE_MLP_PENDING_GRADS) are the
               block's latest listed, made after it: they move to the end of the next slot */
            if (!rc && pending > 0.5) {
                rc = defer_grads(ops, slot_from, (uint64_t)llround(pending), &later);
                for (int e = e0; e < e1 && step == 1; e++) made[2 * idx[e] + 1] = -1;   /* moved: listed again */
            } else if (!rc && later.n) {
                for (int k = 0; k < later.n && !rc; k++) rc = push_op(ops, later.v[k]);
                later.n = 0;
            }
            if (!rc) rc = push_op(ops, (StepOp){0, 0, 0, OP_SLOT, 0, {0}});
        }
    }
    free(idx);
    free(carry);
    free(made);
    free(ws.w);
    free(ws.temp);
    free(later.v);
    ops->hash = ops_hash(ops);
    return rc;
}

/* ---- the listing resolved into allocations and frees of blocks ---- */

/* What the allocator is asked, in order: handles allocated and freed, step starts. */
enum { FL_ALLOC, FL_FREE, FL_STEP };
typedef struct {
    uint8_t kind, stream;
    uint16_t rule;           /* FL_ALLOC: whose (for the written trace's comments) */
    int id;
    uint64_t size;
} FlatOp;

typedef struct {
    FlatOp *v;
    int n, cap;
} FlatList;

typedef struct {
    int id;
    uint64_t size;           /* asked of the allocator */
    uint64_t held;           /* of those, the account's bytes still in it (a level that steps
                                down frees in place: the block goes when held reaches 0) */
    uint16_t rule;
    uint8_t term;
    uint8_t state;           /* BLK_* */
} StepBlock;

enum { BLK_FREED = 0, BLK_LIVE, BLK_RELEASED };   /* released: freed in this slot, not yet
                                                     given back (another rule may take it over) */

/* Block indices, ascending once ordered (a block's index is its age: the largest is the latest).
   Added at the end; a list whose additions came out of order (a slot releasing a rule's blocks
   latest first) is sorted once, before the next walk that needs the order. */
typedef struct {
    int *v;
    int n, cap;
    int unsorted;
} BlockIdx;

/* The slot's released blocks by term and bytes: an open-addressed table of the keys, each with
   the latest position of its group in the slot's list; the group's other positions chained
   from there, later first. */
typedef struct {
    uint64_t held;
    int head;                /* the latest position that may still be free to take (-1: none) */
    uint32_t gen;            /* the build that filled it (older: empty) */
    uint8_t term;
} MatchSlot;

typedef struct {
    FlatList *out;
    StepBlock *b;            /* every block of the replay, in the order allocated; never moved */
    int n, cap;
    BlockIdx live[RULE_COUNT][TERM_COUNT];   /* the live blocks of each rule and term: a free
                                                searches its own rule's, not every live block */
    BlockIdx released;       /* blocks released in this slot (those taken over stay listed,
                                live again: give_back skips them) */
    int released_left[TERM_COUNT];   /* of those, not taken over, by term */
    MatchSlot *mtab;         /* the slot's released blocks by term and bytes: an exact
                                take-over found by hashing */
    int *mnext;              /* per position in the slot's list: the group's next older one */
    int capmtab, capmnext;
    unsigned mmask;          /* the slot's table size less one (a power of two, at most capmtab) */
    uint32_t mgen;           /* this build's mark (0: none yet) */
    int *scratch;            /* idx_order's merge room */
    int capscratch;
    int match_ready;         /* the lookup is built for this slot (at its first use) */
    int failed;
    /* bytes a rule freed before it had allocated them (a rule that lowers its figure for a
       moment, e.g. the MLP moment's pending gradients): its next allocations pay them back
       first, so the replay's live bytes stay at the account's or above */
    uint64_t debt[RULE_COUNT][TERM_COUNT];
} StepAllocRun;

static void emit(StepAllocRun *R, FlatOp op) {
    if (R->failed) return;
    if (plan_grow((void **)&R->out->v, &R->out->cap, R->out->n + 1, sizeof *R->out->v)) { R->failed = 1; return; }
    R->out->v[R->out->n++] = op;
}

/* Adds block i at the end (in order when it is the latest, the usual case). */
static void idx_insert(StepAllocRun *R, BlockIdx *x, int i) {
    if (plan_grow((void **)&x->v, &x->cap, x->n + 1, sizeof *x->v)) { R->failed = 1; return; }
    if (x->n > 0 && x->v[x->n - 1] > i) x->unsorted = 1;
    x->v[x->n++] = i;
}

static int cmp_int(const void *a, const void *b) {
    int x = *(const int *)a, y = *(const int *)b;
    return (x > y) - (x < y);
}

/* v[0..n) in ascending order by merging its runs (a descending run reversed first) pairwise
   through tmp (n entries): the usual disorder is a few runs (blocks added latest first by a slot
   releasing a rule's blocks, blocks taken over by a rule appended after its own), so this is
   about linear. Block indices are distinct. */
static void ints_merge_runs(int *v, int *tmp, int n) {
    int *start = tmp + n;   /* run starts: n + 1 more entries of tmp's second half */
    int runs = 0;
    for (int k = 0; k < n;) {
        int e = k + 1;
        if (e < n && v[e] < v[k]) {
            while (e < n && v[e] < v[e - 1]) e++;
            for (int i = k, j = e - 1; i < j; i++, j--) { int t = v[i]; v[i] = v[j]; v[j] = t; }
        } else {
            while (e < n && v[e] > v[e - 1]) e++;
        }
        start[runs++] = k;
        k = e;
    }
    start[runs] = n;
    int *a = v, *b = tmp;
    while (runs > 1) {
        int r = 0;
        for (int k = 0; k < runs; k += 2) {
            int lo = start[k], mid = start[k + 1 < runs ? k + 1 : runs], hi = start[k + 2 < runs ? k + 2 : runs];
            int i = lo, j = mid, o = lo;
            while (i < mid && j < hi) b[o++] = a[j] < a[i] ? a[j++] : a[i++];
            while (i < mid) b[o++] = a[i++];
            while (j < hi) b[o++] = a[j++];
            start[r++] = lo;
        }
        start[r] = n;
        runs = r;
        int *t = a;
        a = b;
        b = t;
    }
    if (a != v) memcpy(v, a, sizeof *v * (size_t)n);
}

/* Puts the list in ascending order before a walk that needs it (removals keep the order),
   merging through the run's scratch room. */
static void idx_order(StepAllocRun *R, BlockIdx *x) {
    if (!x->unsorted) return;
    if (!plan_grow((void **)&R->scratch, &R->capscratch, 2 * x->n + 1, sizeof *R->scratch))
        ints_merge_runs(x->v, R->scratch, x->n);
    else qsort(x->v, (size_t)x->n, sizeof *x->v, cmp_int);
    x->unsorted = 0;
}

static void idx_remove(BlockIdx *x, int k) {
    memmove(x->v + k, x->v + k + 1, sizeof *x->v * (size_t)(x->n - k - 1));
    x->n--;
}

static void run_malloc(StepAllocRun *R, uint16_t rule, uint8_t term, uint64_t size, uint8_t stream) {
    if (R->failed || size == 0) return;
    if (plan_grow((void **)&R->b, &R->cap, R->n + 1, sizeof *R->b)) { R->failed = 1; return; }
    int id = R->n;
    emit(R, (FlatOp){FL_ALLOC, stream, rule, id, size});
    R->b[R->n++] = (StepBlock){id, size, size, rule, term, BLK_LIVE};
    idx_insert(R, &R->live[rule][term], id);
}

/* An allocation request of the slot: after the rule's debt is paid, it takes over a block of
   the same term released in this slot whose bytes are exactly its own (the account moving bytes
   from one rule to another at one point: in PyTorch the same tensors); gradients may take over
   several (backward's per-layer gradients becoming one rule's lump: DeepSpeed's gradients not yet
   moved, the step's gradients), the rest allocated. What is left is asked of the allocator once
   the slot's other frees are given back. */
typedef struct {
    uint64_t size;
    uint16_t rule;
    uint8_t term, stream;
} StepReq;

/* The released block at position k of the slot's list becomes rule's, live again (it stays in
   the list; give_back skips it). */
static void adopt(StepAllocRun *R, int k, uint16_t rule) {
    StepBlock *b = &R->b[R->released.v[k]];
    b->state = BLK_LIVE;
    b->rule = rule;
    R->released_left[b->term]--;
    idx_insert(R, &R->live[rule][b->term], b->id);
}

/* The live block at position k of its rule's list is released in this slot. */
static void release(StepAllocRun *R, BlockIdx *live, int k) {
    StepBlock *b = &R->b[live->v[k]];
    idx_remove(live, k);
    b->state = BLK_RELEASED;
    R->released_left[b->term]++;
    idx_insert(R, &R->released, b->id);
}

static unsigned match_hash(uint8_t term, uint64_t held, unsigned mask) {
    uint64_t h = (held ^ (uint64_t)term << 56) * 0x9E3779B97F4A7C15ull;
    return (unsigned)(h >> 32) & mask;
}

/* The table's entry for (term, held): its slot, or the empty one where it would go. */
static MatchSlot *match_slot(StepAllocRun *R, uint8_t term, uint64_t held) {
    unsigned mask = R->mmask;
    for (unsigned h = match_hash(term, held, mask);; h = (h + 1) & mask) {
        MatchSlot *m = &R->mtab[h];
        if (m->gen != R->mgen || (m->term == term && m->held == held)) return m;
    }
}

/* Once the slot's frees are in (all of them come before its allocations): its released blocks
   in order of age, and the lookup by term and bytes. */
static void match_build(StepAllocRun *R) {
    BlockIdx *rel = &R->released;
    idx_order(R, rel);
    if (!rel->n) return;
    int want = 64;
    while (want < 2 * rel->n) want *= 2;   /* at most half full */
    if (want > R->capmtab) {
        free(R->mtab);
        R->mtab = calloc((size_t)want, sizeof *R->mtab);
        R->capmtab = R->mtab ? want : 0;
        if (!R->mtab) { R->failed = 1; return; }
    }
    if (++R->mgen == 0) {   /* the marks wrapped: every entry empty again */
        memset(R->mtab, 0, sizeof *R->mtab * (size_t)R->capmtab);
        R->mgen = 1;
    }
    if (plan_grow((void **)&R->mnext, &R->capmnext, rel->n, sizeof *R->mnext)) { R->failed = 1; return; }
    R->mmask = (unsigned)want - 1;
    for (int k = 0; k < rel->n; k++) {   /* oldest first: each group's head ends at its latest */
        const StepBlock *b = &R->b[rel->v[k]];
        MatchSlot *m = match_slot(R, b->term, b->held);
        R->mnext[k] = m->gen == R->mgen ? m->head : -1;
        *m = (MatchSlot){b->held, k, R->mgen, b->term};
    }
}

/* The latest released block not yet taken of this term holding exactly these bytes: its
   position in the slot's list, or -1. A group's entry keeps where its search stopped (taken
   blocks are not taken again within the slot). */
static int match_find(StepAllocRun *R, uint8_t term, uint64_t held) {
    MatchSlot *m = match_slot(R, term, held);
    if (m->gen != R->mgen) return -1;
    int i = m->head;
    while (i >= 0 && R->b[R->released.v[i]].state != BLK_RELEASED) i = R->mnext[i];
    m->head = i;
    return i;
}

static int take_over(StepAllocRun *R, StepReq *q) {
    uint64_t *d = &R->debt[q->rule][q->term], pay = *d < q->size ? *d : q->size;
    *d -= pay;
    q->size -= pay;
    if (!q->size) return 1;
    if (!R->released_left[q->term]) return 0;
    if (!R->match_ready) {
        match_build(R);
        R->match_ready = 1;
        if (R->failed) return 0;
    }
    int k = match_find(R, q->term, q->size);
    if (k >= 0) {
        adopt(R, k, q->rule);
        return 1;
    }
    if (q->term != TERM_GRADS) return 0;
    BlockIdx *rel = &R->released;
    for (k = rel->n - 1; k >= 0 && q->size && R->released_left[q->term]; k--) {
        const StepBlock *b = &R->b[rel->v[k]];
        if (b->state == BLK_RELEASED && b->term == q->term && b->held <= q->size) {
            q->size -= b->held;
            adopt(R, k, q->rule);
        }
    }
    return q->size == 0;
}

/* A free: the latest live block of the rule and term holding exactly these bytes is released;
   else the latest ones the bytes cover whole (an event freeing several tensors at once: a
   layer's gradients at the step), then the latest ones until the bytes are covered, the last one
   perhaps in part (it stays, holding fewer bytes: a level that steps down); bytes with no block
   left become the rule's debt. */
static void run_free(StepAllocRun *R, uint16_t rule, uint8_t term, uint64_t size) {
    BlockIdx *live = &R->live[rule][term];
    idx_order(R, live);
    for (int k = live->n - 1; k >= 0; k--)
        if (R->b[live->v[k]].held == size) {
            release(R, live, k);
            return;
        }
    for (int k = live->n - 1; k >= 0 && size > 0; k--) {
        if (k >= live->n) continue;
        StepBlock *b = &R->b[live->v[k]];
        if (b->held > size) continue;
        size -= b->held;
        release(R, live, k);
    }
    for (int k = live->n - 1; k >= 0 && size > 0; k--) {
        StepBlock *b = &R->b[live->v[k]];
        if (b->held > size) { b->held -= size; return; }
        size -= b->held;
        release(R, live, k);
    }
    R->debt[rule][term] += size;
}

/* A forward temporary's free (push_temps): the oldest live block of the rule and term holding
   exactly these bytes (ops free their inputs in the order they were made), else as run_free. */
static void run_free_oldest(StepAllocRun *R, uint16_t rule, uint8_t term, uint64_t size) {
    BlockIdx *live = &R->live[rule][term];
    idx_order(R, live);
    for (int k = 0; k < live->n; k++)
        if (R->b[live->v[k]].held == size) {
            release(R, live, k);
            return;
        }
    run_free(R, rule, term, size);
}

/* The slot's released blocks go back to the allocator, oldest first. */
static void give_back(StepAllocRun *R) {
    idx_order(R, &R->released);
    for (int k = 0; k < R->released.n; k++) {
        StepBlock *b = &R->b[R->released.v[k]];
        if (b->state != BLK_RELEASED) continue;   /* taken over */
        b->state = BLK_FREED;
        emit(R, (FlatOp){FL_FREE, 0, 0, b->id, 0});
    }
    R->released.n = 0;
    R->released.unsorted = 0;
    memset(R->released_left, 0, sizeof R->released_left);
}

static int add_req(StepReq **v, int *n, int *cap, StepReq q) {
    if (plan_grow((void **)v, cap, *n + 1, sizeof **v)) return -1;
    (*v)[(*n)++] = q;
    return 0;
}

/* resolve's buffers, their room kept for the next listing (a plan resolves dozens). */
static _Thread_local StepAllocRun resolve_room;
static _Thread_local StepReq *resolve_req;
static _Thread_local int resolve_capreq;

/* One slot at a time (a point, before or after its moment): its frees, then its allocations.
   after_slot (when given) reads what the slots so far made; nonzero stops the listing there
   (out then holds only those slots' operations). */
typedef int (*SlotFn)(void *ctx, const FlatList *out);
static int resolve_until(const OpList *ops, FlatList *out, SlotFn after_slot, void *ctx) {
    StepAllocRun R = resolve_room;
    R.out = out;
    R.n = 0;
    R.released.n = R.released.unsorted = 0;
    memset(R.released_left, 0, sizeof R.released_left);
    R.match_ready = R.failed = 0;
    for (int r = 0; r < RULE_COUNT; r++)
        for (int k = 0; k < TERM_COUNT; k++) R.live[r][k].n = R.live[r][k].unsorted = 0;
    memset(R.debt, 0, sizeof R.debt);
    out->n = 0;
    StepReq *req = resolve_req;
    int nreq = 0, capreq = resolve_capreq;
    for (int o = 0; o < ops->n && !R.failed; o++) {
        const StepOp *x = &ops->v[o];
        if (x->kind == OP_FREE) run_free(&R, x->rule, x->term, x->size);
        else if (x->kind == OP_FREE_OLDEST) run_free_oldest(&R, x->rule, x->term, x->size);
        else if (x->kind == OP_ALLOC) {
            if (add_req(&req, &nreq, &capreq, (StepReq){x->size, x->rule, x->term, x->stream})) R.failed = 1;
        } else if (x->kind == OP_STEP) {
            emit(&R, (FlatOp){FL_STEP, 0, 0, (int)x->size, 0});
        } else {
            int left = 0;
            R.match_ready = 0;
            for (int k = 0; k < nreq; k++)
                if (!take_over(&R, &req[k])) req[left++] = req[k];
            give_back(&R);
            for (int k = 0; k < left; k++) run_malloc(&R, req[k].rule, req[k].term, req[k].size, req[k].stream);
            nreq = 0;
            if (after_slot && !R.failed && after_slot(ctx, out)) break;
        }
    }
    resolve_room = R;
    resolve_req = req;
    resolve_capreq = capreq;
    return R.failed ? -1 : 0;
}

static int resolve(const OpList *ops, FlatList *out) { return resolve_until(ops, out, NULL, NULL); }

/* A replay under way: the allocator, where it is in the list, and what the loop has read. */
typedef struct {
    PlanAlloc *a;
    int at;                    /* the next operation */
    int failed, stopped;       /* out of host memory; stopped at an out-of-memory (verdict) */
    uint64_t reserved_step1;   /* reserved at the end of the first step */
    PlanAllocStats before;     /* the figures when the last step began */
} Replay;

/* Runs the list's operations from r->at up to `to`; ask (when given): after each operation, the
   most any capacity check has compared so far (plan_alloc_max_ask). */
static void replay_run(Replay *r, const FlatList *fl, int to, int steps, int verdict, uint64_t *ask) {
    for (; r->at < to && !r->failed; r->at++) {
        const FlatOp *x = &fl->v[r->at];
        if (x->kind == FL_ALLOC) {
            int rc = plan_alloc_malloc(r->a, x->id, x->size, x->stream);
            r->failed = rc < 0;
            if (rc == 1 && verdict) {   /* out of memory: the verdict is known */
                r->stopped = 1;
                break;
            }
        } else if (x->kind == FL_FREE) plan_alloc_free(r->a, x->id);   /* -1 for a handle that ran out of memory */
        else {
            if (x->id == 2) r->reserved_step1 = plan_alloc_stats(r->a)->reserved;
            if (x->id == steps) {
                r->before = *plan_alloc_stats(r->a);
                plan_alloc_reset_peaks(r->a);
            }
        }
        if (ask) ask[r->at] = plan_alloc_max_ask(r->a);
    }
}

/* The whole run's figures, and the last step's with the peaks reset at its start. */
static int replay_result(const Replay *r, int steps, StepAllocResult *out) {
    memset(out, 0, sizeof *out);
    out->stopped = r->stopped;
    out->step_reserved[0] = r->reserved_step1;
    const PlanAllocStats *s = plan_alloc_stats(r->a);
    out->step_reserved[steps > 1] = s->reserved;
    out->steady = *s;
    out->whole = *s;
    PlanAllocStats *w = &out->whole;
    const PlanAllocStats *b = &r->before;
#define KEEP_MAX(f) if (b->f > w->f) w->f = b->f
    KEEP_MAX(max_allocated);
    KEEP_MAX(max_requested);
    KEEP_MAX(max_segments);
    KEEP_MAX(max_reserved);
#undef KEEP_MAX
    if (b->max_allocated >= s->max_allocated) w->reserved_at_max_allocated = b->reserved_at_max_allocated;
    return r->failed ? -1 : 0;
}

/* The allocations through the allocator model from an empty cache (ask: as replay_run). */
static int replay_flat(const FlatList *fl, const PlanAllocConfig *conf, int steps, int verdict, StepAllocResult *out,
                       uint64_t *ask) {
    Replay r;
    memset(&r, 0, sizeof r);
    r.a = plan_alloc_new(conf);
    if (!r.a) return -1;
    replay_run(&r, fl, fl->n, steps, verdict, ask);
    int rc = replay_result(&r, steps, out);
    plan_alloc_free_all(r.a);
    return rc;
}

/* The device's total as the allocator reads it: only a memory fraction below 1 (its base) and
   expandable segments (their address reserve) read it (plan_alloc.c), so two settings that
   differ only in it otherwise replay alike (the plan's rows and auto's rule, whose GPU is the
   same less the safety margin). */
static uint64_t device_total_read(const PlanAllocConfig *c) {
    return c->memory_fraction < 1.0 || c->expandable_segments ? c->device_total : 0;
}

static int conf_equal(const PlanAllocConfig *x, const PlanAllocConfig *y) {
    for (int i = 0; i < PLAN_ALLOC_INTERVALS; i++)
        if (x->roundup_divisions[i] != y->roundup_divisions[i]) return 0;
    return x->max_split_size == y->max_split_size && x->max_non_split_rounding == y->max_non_split_rounding &&
           x->large_segment_size == y->large_segment_size && x->gc_threshold == y->gc_threshold &&
           x->expandable_segments == y->expandable_segments && x->memory_fraction == y->memory_fraction &&
           device_total_read(x) == device_total_read(y) && x->capacity == y->capacity;
}

/* The replay at conf is the replay r made at was, capacity aside, when conf's capacity lies in
   [r's max reserved, was's capacity] (0: none; none either when was's refused nothing): each
   request the capacity let through left reserved at or below that maximum, so passes at conf's
   too, and each it refused asked for more than was's, so is refused again (plan_alloc.c checks
   the capacity nowhere else). The same figures, without replaying. */
static int replay_covers(const PlanAllocConfig *was, const StepAllocResult *r, const PlanAllocConfig *conf) {
    PlanAllocConfig x = *was, y = *conf;
    x.capacity = y.capacity = 0;
    if (!conf_equal(&x, &y) || (conf->capacity && conf->capacity < r->whole.max_reserved)) return 0;
    if (!was->capacity || !r->whole.n_capacity_refusals) return 1;
    return conf->capacity && conf->capacity <= was->capacity;
}

/* Whether two listings are the same, operation by operation. */
static int ops_same(const OpList *x, const OpList *y) {
    return x->n == y->n && x->hash == y->hash && !memcmp(x->v, y->v, sizeof *x->v * (size_t)x->n);
}

/* to becomes a copy of from (its room kept); -1 out of host memory (to unchanged). */
static int ops_copy(OpList *to, const OpList *from) {
    if (plan_grow((void **)&to->v, &to->cap, from->n > 0 ? from->n : 1, sizeof *from->v)) return -1;
    memcpy(to->v, from->v, sizeof *from->v * (size_t)from->n);
    to->n = from->n;
    to->hash = from->hash;
    return 0;
}

/* The last replays, per thread: a replay's figures are a function of its listing and the
   allocator's settings alone, and the searches repeat some (a plan's row at micro-batch 1 and
   its max-micro-batch walk at 1; strategies whose steps allocate alike). A hit compares the
   whole list (the hash only passes over lists that differ). The lists stay allocated for the
   thread's life (128 of a few thousand operations, 200-300 kB each for gpt2-xl: the simulated
   steps ask each strategy's again after the rows asked every strategy's, and `auto` asks a
   listing again some 90 listings later, a precision or offload whose step allocates alike:
   49 of gpt2-xl's 296 max-batch probes; 32 kept none of them). */
#define STEP_MEMO 128
typedef struct {
    OpList ops;
    PlanAllocConfig conf;
    StepAllocResult out;
    int steps, used;
} StepMemo;
static _Thread_local StepMemo memo[STEP_MEMO];
static _Thread_local int memo_next;
static _Thread_local OpList memo_ops;   /* the list being looked up */
/* the last listing resolved and its allocations: a capacity search replays one listing at
   several capacities, resolving it once. The listing is the kept replay's copy (memo) where
   run_ops keeps one, else a copy of its own: between calls never the caller's list. */
static _Thread_local const OpList *flat_of;
static _Thread_local OpList flat_own;
static _Thread_local FlatList memo_flat;
static _Thread_local int flat_valid;
/* the replays of that listing so far (a capacity search's probes; the replay at the GPU's limit
   and the unlimited one) */
#define FLAT_RUNS 16
typedef struct {
    PlanAllocConfig conf;
    StepAllocResult out;
    int steps;
} FlatRun;
static _Thread_local FlatRun flat_runs[FLAT_RUNS];
static _Thread_local int n_flat_runs, next_flat_run;

/* The replay of the current listing without a capacity or a memory fraction, kept to resume
   its replays at a capacity from: that replay and the one at capacity C take the same path until
   the first operation whose capacity check compares more than C (plan_alloc_max_ask), so the
   one at C starts from a copy of the allocator taken before that operation, and replays only the
   rest. The copies: one at the first operation that asks more than the run's most allocated
   (below which no capacity succeeds; every capacity the need search probes lies above it), the
   others where earlier probes left the common path. */
#define RESUME_SNAPS 8
#define NEED_GRAIN ((uint64_t)2 << 20)   /* step_need's step: reserved memory comes in whole 2 MiB */
static _Thread_local struct {
    int valid, steps;
    PlanAllocConfig conf;          /* capacity 0 */
    uint64_t *ask;                 /* after each operation, the most a capacity check compared */
    int cap_ask;
    int anchor;                    /* the first operation that asks more than max allocated */
    Replay snap[RESUME_SNAPS];     /* [0]: at the anchor; the others in turn; a NULL: none */
    int next_snap;
} base;

static void base_reset(void) {
    for (int k = 0; k < RESUME_SNAPS; k++) {
        plan_alloc_free_all(base.snap[k].a);
        base.snap[k].a = NULL;
    }
    base.valid = 0;
    base.next_snap = 1;
}

static int conf_limited(const PlanAllocConfig *c) { return c->memory_fraction < 1.0 && c->device_total; }

/* The operations the replay at capacity cap shares with the unlimited one (0: none). */
static int base_shared(int n, uint64_t cap) {
    if (!cap) return n;
    int lo = 0, hi = n;   /* the first whose ask exceeds cap */
    while (lo < hi) {
        int mid = lo + (hi - lo) / 2;
        if (base.ask[mid] > cap) hi = mid;
        else lo = mid + 1;
    }
    return lo;
}

/* Runs r on to operation `to` and keeps a copy of it in slot k (out of host memory: none). */
static void base_keep(Replay *r, const FlatList *fl, int to, int k) {
    replay_run(r, fl, to, base.steps, 0, NULL);   /* no check refuses before `to` */
    if (r->failed || r->stopped) return;
    PlanAlloc *a = plan_alloc_clone(r->a);
    if (!a) return;
    plan_alloc_free_all(base.snap[k].a);
    base.snap[k] = *r;
    base.snap[k].a = a;
}

/* The replay at conf (the kept replay's settings at another capacity), resumed from the latest
   copy it shares: the same figures as replay_flat's. */
static int replay_resumed(const FlatList *fl, const PlanAllocConfig *conf, int verdict, StepAllocResult *out) {
    int d = base_shared(fl->n, conf->capacity);
    const Replay *from = NULL;
    for (int k = 0; k < RESUME_SNAPS; k++)
        if (base.snap[k].a && base.snap[k].at <= d && (!from || base.snap[k].at > from->at)) from = &base.snap[k];
    Replay r;
    memset(&r, 0, sizeof r);
    if (from) r = *from;
    r.a = from ? plan_alloc_clone(from->a) : plan_alloc_new(conf);
    if (!r.a) return -1;
    plan_alloc_set_capacity(r.a, conf->capacity);
    if (!base.snap[0].a && d >= base.anchor) base_keep(&r, fl, base.anchor, 0);
    if (d - r.at >= fl->n / 16 && d < fl->n) {   /* far enough on to be worth a copy */
        base_keep(&r, fl, d, base.next_snap);
        base.next_snap = base.next_snap + 1 < RESUME_SNAPS ? base.next_snap + 1 : 1;
    }
    replay_run(&r, fl, fl->n, base.steps, verdict, NULL);
    int rc = replay_result(&r, base.steps, out);
    plan_alloc_free_all(r.a);
    return rc;
}

/* The replay of the current listing at conf: resumed from the kept unlimited replay where it
   applies. One that refused nothing, without a memory fraction, is the unlimited one (whatever
   its capacity) and is kept. */
static int replay_listing(const FlatList *fl, const PlanAllocConfig *conf, int steps, int verdict, StepAllocResult *out) {
    PlanAllocConfig x = *conf;
    x.capacity = 0;
    if (base.valid && base.steps == steps && !conf_limited(conf) && conf_equal(&x, &base.conf))
        return replay_resumed(fl, conf, verdict, out);
    int record = !base.valid && !conf_limited(conf) && flat_valid &&
                 !plan_grow((void **)&base.ask, &base.cap_ask, fl->n > 0 ? fl->n : 1, sizeof *base.ask);
    int rc = replay_flat(fl, conf, steps, verdict, out, record ? base.ask : NULL);
    if (rc || !record || out->stopped || out->whole.n_capacity_refusals) return rc;
    base_reset();
    base.valid = 1;
    base.steps = steps;
    base.conf = x;
    base.anchor = base_shared(fl->n, out->whole.max_allocated / NEED_GRAIN * NEED_GRAIN);
    return 0;
}

/* Remembers a replay of the listing resolved (memo_flat), the oldest giving way. */
static void keep_flat_run(const PlanAllocConfig *conf, const StepAllocResult *out, int steps) {
    flat_runs[next_flat_run] = (FlatRun){*conf, *out, steps};
    next_flat_run = (next_flat_run + 1) % FLAT_RUNS;
    if (n_flat_runs < FLAT_RUNS) n_flat_runs++;
}

/* The replay of the listing resolved (memo_flat) at conf: one of its replays so far where that
   covers conf, else replayed (and remembered). */
static int replay_flat_list(const PlanAllocConfig *conf, int steps, int verdict, StepAllocResult *out) {
    for (int k = 0; k < n_flat_runs; k++)
        if (flat_runs[k].steps == steps && (verdict || !flat_runs[k].out.stopped) &&
            replay_covers(&flat_runs[k].conf, &flat_runs[k].out, conf)) {
            *out = flat_runs[k].out;
            return 0;
        }
    if (replay_listing(&memo_flat, conf, steps, verdict, out)) return -1;
    if (flat_valid) keep_flat_run(conf, out, steps);
    return 0;
}

/* A verdict replay that follows the listing as it is resolved, slot by slot: the replay runs
   each slot's operations once they are made and stops the listing at its first out-of-memory,
   so a step that does not fit is resolved only up to there. The same operations replayed in the
   same order as resolving it whole first: the same figures. */
#define VERDICT_ONCE 2   /* run_ops' verdict: see there */
typedef struct {
    Replay r;
    int steps;
} Follow;

static int follow_slot(void *ctx, const FlatList *out) {
    Follow *f = ctx;
    replay_run(&f->r, out, out->n, f->steps, 1, NULL);
    return f->r.stopped || f->r.failed;
}

/* run_ops' replay of a new listing for a caller that reads only the verdict and not the listing
   again (a max-batch probe): resolved as far as the replay goes. The listing is kept (as
   run_ops keeps it) only when it was resolved whole. */
static int verdict_following(const OpList *ops, const PlanAllocConfig *conf, int steps, StepAllocResult *out) {
    Follow f;
    memset(&f, 0, sizeof f);
    f.steps = steps;
    f.r.a = plan_alloc_new(conf);
    if (!f.r.a) return -1;
    int rc = resolve_until(ops, &memo_flat, follow_slot, &f);
    if (!rc && !f.r.stopped) follow_slot(&f, &memo_flat);   /* what the last slot left (a step's mark) */
    if (replay_result(&f.r, steps, out)) rc = -1;
    plan_alloc_free_all(f.r.a);
    if (rc || f.r.stopped) return rc;
    flat_valid = 1;   /* run_ops settles flat_of on a copy */
    flat_of = ops;
    keep_flat_run(conf, out, steps);   /* the first of this listing's (run_ops emptied them) */
    return 0;
}

/* The replay of listing ops (steps of it) at conf: a kept replay's figures, or the listing
   resolved (once for a run of capacities) and replayed; keep: remember the figures. verdict: the
   caller reads only whether it runs out where it does (a search's probe, the replay at the
   GPU's limit), so a replay may stop at its first out-of-memory (out->stopped); the replays it
   covers run out there too (replay_covers: the same up to that point), which is all such a
   result answers. VERDICT_ONCE: a verdict whose caller does not read this listing again, which
   a new listing answers by verdict_following */
static int run_ops(const OpList *ops, const PlanAllocConfig *conf, int steps, int keep, int verdict, StepAllocResult *out) {
    memset(out, 0, sizeof(*out));
    for (int k = 0; k < STEP_MEMO; k++) {
        const StepMemo *h = &memo[k];
        if (h->used && h->steps == steps && (verdict || !h->out.stopped) && replay_covers(&h->conf, &h->out, conf) &&
            ops_same(&h->ops, ops)) {
            *out = h->out;
            return 0;
        }
    }
    int same = flat_valid && ops_same(flat_of, ops);
    if (!same) {
        flat_valid = 0;
        base_reset();
        n_flat_runs = next_flat_run = 0;
    }
    int rc = 0;
    if (!same && verdict == VERDICT_ONCE) rc = verdict_following(ops, conf, steps, out);
    else if (!same && resolve(ops, &memo_flat)) rc = -1;
    else {
        if (!same) {
            flat_valid = 1;
            flat_of = ops;
        }
        rc = replay_flat_list(conf, steps, verdict, out);
    }
    if (!rc && keep) {
        StepMemo *h = &memo[memo_next];
        if (!ops_copy(&h->ops, ops)) {
            h->conf = *conf;
            h->out = *out;
            h->steps = steps;
            h->used = 1;
            memo_next = (memo_next + 1) % STEP_MEMO;
            if (flat_valid && flat_of == ops) flat_of = &h->ops;   /* the same listing, kept */
        }
    }
    if (flat_valid && flat_of == ops) {   /* not kept: a copy of its own */
        flat_valid = !ops_copy(&flat_own, ops);
        flat_of = &flat_own;
    }
    return rc;
}

int plan_step_alloc_with(const Step *st, const PlanAllocConfig *conf, const StepAllocOpts *o, StepAllocResult *out) {
    memset(out, 0, sizeof(*out));
    if (list_ops(st, o, &memo_ops)) return -1;
    return run_ops(&memo_ops, conf, o->steps, 1, 0, out);
}

int plan_step_alloc(const Step *st, const PlanAllocConfig *conf, PlanAllocStats *out) {
    StepAllocOpts o;
    StepAllocResult r;
    plan_step_alloc_opts_default(&o);
    int rc = plan_step_alloc_with(st, conf, &o, &r);
    *out = r.whole;
    return rc;
}

int plan_step_alloc_write(const Step *st, const StepAllocOpts *o, FILE *f, const char *const *header) {
    OpList ops = {0};
    FlatList fl = {0};
    int rc = list_ops(st, o, &ops) || resolve(&ops, &fl) ? -1 : 0;
    for (int k = 0; header && header[k] && !rc; k++) fprintf(f, "# %s\n", header[k]);
    int last_rule = -1;
    for (int k = 0; k < fl.n && !rc; k++) {
        const FlatOp *x = &fl.v[k];
        if (x->kind == FL_ALLOC && x->rule != last_rule) {   /* whose allocations follow */
            fprintf(f, "# %s\n", plan_rule_info((RuleId)x->rule)->name);
            last_rule = x->rule;
        }
        if (x->kind == FL_STEP) fprintf(f, "m step%d\n", x->id);
        else if (x->kind == FL_FREE) fprintf(f, "f %x\n", (unsigned)x->id);
        else if (x->stream) fprintf(f, "a %x %llu %d\n", (unsigned)x->id, (unsigned long long)x->size, x->stream);
        else fprintf(f, "a %x %llu\n", (unsigned)x->id, (unsigned long long)x->size);
    }
    if (!rc && ferror(f)) rc = -1;
    free(ops.v);
    free(fl.v);
    return rc;
}

/* What the step needs from the allocator: the least capacity with which the replay does not
   run out, PyTorch freeing its cache and retrying as it does (no memory fraction: that is a
   limit of the GPU, not a need). Between the most the unlimited replay holds allocated (below
   it nothing succeeds) and what it reserves (it never frees then, so that capacity succeeds),
   bisected on whole 2 MiB (reserved memory comes in them: segments are multiples of
   kRoundLarge, the small pool's 2 MiB, pages of 2 or 20 MiB) to NEED_TOL of the upper end: the
   answer is the smallest capacity seen to succeed, at most that much above the least one.
   Independent of the GPU, so a setup needs the same on any. *at: the replay there. 0, or -1 out
   of host memory. */
#define NEED_TOL (1.0 / 512)
static int need_search(const OpList *ops, int steps, PlanAllocConfig conf, const StepAllocResult *unlimited,
                     uint64_t *need, StepAllocResult *at) {
    conf.memory_fraction = 1.0;
    uint64_t lo = unlimited->whole.max_allocated / NEED_GRAIN * NEED_GRAIN;   /* fails (or is 0) */
    uint64_t hi = unlimited->whole.max_reserved;                              /* succeeds */
    uint64_t tol = (uint64_t)((double)hi * NEED_TOL) / NEED_GRAIN * NEED_GRAIN;
    if (tol < NEED_GRAIN) tol = NEED_GRAIN;
    *at = *unlimited;
    StepAllocResult r;
    while (hi - lo > tol) {
        conf.capacity = lo + (hi - lo) / NEED_GRAIN / 2 * NEED_GRAIN;
        if (run_ops(ops, &conf, steps, 0, 1, &r)) return -1;   /* a probe that runs out only moves lo */
        if (r.whole.n_ooms == 0) { hi = conf.capacity; *at = r; }
        else lo = conf.capacity;
    }
    *need = hi;
    return 0;
}

/* The last needs found, per thread: a need is a function of the listing, the steps and the
   allocator's settings less the capacity and memory fraction (which the search sets), and the
   plan's rows and the max-batch search ask some listings' twice. A hit compares the whole list. */
#define NEED_MEMO 16
typedef struct {
    OpList ops;
    PlanAllocConfig conf;     /* capacity 0, memory fraction 1 */
    int steps, used;
    uint64_t need;
    StepAllocResult at;
} NeedMemo;
static _Thread_local NeedMemo need_memo[NEED_MEMO];
static _Thread_local int need_next;

static int step_need(const OpList *ops, int steps, PlanAllocConfig conf, const StepAllocResult *unlimited,
                     uint64_t *need, StepAllocResult *at) {
    conf.capacity = 0;
    conf.memory_fraction = 1.0;
    for (int k = 0; k < NEED_MEMO; k++) {
        const NeedMemo *h = &need_memo[k];
        if (h->used && h->steps == steps && conf_equal(&h->conf, &conf) && ops_same(&h->ops, ops)) {
            *need = h->need;
            *at = h->at;
            return 0;
        }
    }
    if (need_search(ops, steps, conf, unlimited, need, at)) return -1;
    NeedMemo *h = &need_memo[need_next];
    if (!ops_copy(&h->ops, ops)) {
        h->conf = conf;
        h->steps = steps;
        h->need = *need;
        h->at = *at;
        h->used = 1;
        need_next = (need_next + 1) % NEED_MEMO;
    }
    return 0;
}

/* The listing replay_alloc makes, its room kept for the next one (a plan makes dozens). */
static _Thread_local OpList replay_ops;

/* With the allocator model (c->alloc_model) the allocator's share of the overhead is one figure
   for the step, what the step needs of it less the account's tensor peak, added at every moment
   as a fixed margin would be: the peak moment and the tensors are the account's, and the peak's
   total is the need plus the fixed overheads, the same on any GPU. Whether it fits is the
   replay at the GPU's limit (its memory less the fixed overheads, or the memory fraction's share
   of it), which frees its cache and retries as PyTorch does: it fits when that replay does not run
   out. The need is searched from below that limit when it fits and from above it when not, so a
   plan that fits never needs more than its limit and one that does not never less.
   fits_only: the caller needs only the verdict. The allocator's share is never negative (the
   need >= max allocated >= the tensors), so a step whose tensors and fixed overheads alone
   exceed the GPU does not fit, and no replay is made; otherwise one replay at the limit answers.
   Returns 1 when it stopped early (r holds only the tensor peak, and whether it fits in
   r->alloc_oom), else 0 with r filled as without fits_only. */
static int replay_alloc(const Step *st, const ClusterSpec *c, MemResult *r, MemMomentFn fn, void *ctx, int fits_only) {
    if (!c->alloc_model) { plan_step_replay_tensors(st, c, r, fn, ctx); return 0; }
    ClusterSpec flat = *c;
    flat.alloc_model = 0;
    flat.alloc_margin = 0;
    flat.margin_is_frac = 0;
    MemResult r0;
    memset(&r0, 0, sizeof(r0));
    plan_step_replay_tensors(st, &flat, &r0, NULL, NULL);
    double tensors = r0.peak > st->fixed ? r0.peak - st->fixed : 0;
    if (fits_only && r0.peak > c->gpu.mem_bytes) { r->peak = r0.peak; r->alloc_oom = 1; return 1; }
    PlanAllocConfig conf = c->alloc_conf;
    double cap = c->gpu.mem_bytes - st->fixed;
    conf.device_total = c->gpu.mem_bytes > 0 && c->gpu.mem_bytes < 0x1p63 ? (uint64_t)c->gpu.mem_bytes : 0;
    conf.capacity = cap >= 1 && cap < 0x1p63 ? (uint64_t)cap : 0;
    double limit = cap;
    if (conf.memory_fraction < 1.0 && conf.device_total && conf.memory_fraction * (double)conf.device_total < limit)
        limit = conf.memory_fraction * (double)conf.device_total;
    StepAllocOpts o;
    StepAllocResult at_limit, unlimited, at_need;
    OpList ops = replay_ops;   /* its room kept from the last listing */
    plan_step_alloc_opts_default(&o);
    /* read whole only where it fits; a fits-only caller reads nothing else of this listing */
    int failed = list_ops(st, &o, &ops) || run_ops(&ops, &conf, o.steps, 1, fits_only ? VERDICT_ONCE : 1, &at_limit);
    int oom = !failed && at_limit.whole.n_ooms > 0;
    replay_ops = ops;
    if (fits_only && !failed) { r->peak = r0.peak; r->alloc_oom = oom; return 1; }
    uint64_t need = 0;
    if (!failed) {
        PlanAllocConfig free_conf = conf;
        free_conf.capacity = 0;
        free_conf.memory_fraction = 1.0;
        failed = run_ops(&ops, &free_conf, o.steps, 1, 0, &unlimited);
        if (!failed) failed = step_need(&ops, o.steps, conf, &unlimited, &need, &at_need);
        /* the need must not contradict the verdict at the limit (the search's tolerance; a
           memory fraction's garbage collection, which the search leaves out): a step that fits
           there needs at most the limit, one that runs out more than it */
        uint64_t lim = limit >= 1 && limit < 0x1p63 ? (uint64_t)limit : 0;
        if (!failed && lim) {
            if (!oom && need > lim) { need = lim; at_need = at_limit; }
            if (oom && need <= lim) need = lim + 1;
        }
    }
    if (failed) {   /* out of host memory: the flat margin, said so by alloc_model = 0 */
        flat.alloc_margin = PLAN_ALLOC_MARGIN_FRAC;
        flat.margin_is_frac = 1;
        plan_step_replay_tensors(st, &flat, r, fn, ctx);
        return 0;
    }
    double over = (double)need - tensors;
    flat.alloc_margin = over > 0 ? over : 0;
    plan_step_replay_tensors(st, &flat, r, fn, ctx);
    r->alloc_model = 1;
    r->alloc_tensor_peak = tensors;
    r->alloc_allocated = (double)unlimited.whole.max_allocated;
    r->alloc_need = (double)need;
    r->alloc_reserved = (double)at_need.whole.max_reserved;
    r->alloc_limit = limit;
    r->alloc_reserved_at_limit = oom ? 0 : (double)at_limit.whole.max_reserved;
    r->alloc_step_reserved[0] = (double)unlimited.step_reserved[0];
    r->alloc_step_reserved[1] = (double)unlimited.step_reserved[1];
    r->alloc_segments = at_need.whole.max_segments;
    r->alloc_oom = oom;
    return 0;
}

void plan_step_replay(const Step *st, const ClusterSpec *c, MemResult *r, MemMomentFn fn, void *ctx) {
    replay_alloc(st, c, r, fn, ctx, 0);
}

int plan_step_replay_fits(const Step *st, const ClusterSpec *c, MemResult *r, MemMomentFn fn, void *ctx) {
    return replay_alloc(st, c, r, fn, ctx, 1);
}

void plan_step_alloc_forget(void) {
    for (int k = 0; k < STEP_MEMO; k++) memo[k].used = 0;
    for (int k = 0; k < NEED_MEMO; k++) need_memo[k].used = 0;
    flat_valid = 0;
    n_flat_runs = next_flat_run = 0;
    base_reset();
}
