/* plan_deepspeed.c — see plan_deepspeed.h and docs/formulas.md. */
#include "plan_deepspeed.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* The tensors of layer l, or the layer as one tensor where they are unknown. */
static int layer_tensors(const LayerSpec *l, const int64_t **t, int64_t *one) {
    if (l->n_tensors > 0) { *t = l->tensor_elems; return l->n_tensors; }
    *one = l->params;
    *t = one;
    return l->params > 0;
}

/* ZeRO-1/2 (stage_1_and_2.py): the rank's partition is [rP, (r+1)P) of the flattened tensors;
   params_in_partition (get_partition_info) are the tensors that overlap it, and
   copy_grads_in_partition allocates grads_in_partition for their whole numel. Two pointers
   over the tensors: each is visited once per rank it overlaps, and ranks share at most one
   tensor at each boundary, so O(tensors + n). */
static double grad_part(const ModelSpec *m, int64_t n, double P) {
    double best = 0, sum = 0, lo = 0;   /* lo: start of the first tensor of the rank */
    int li = 0, ti = 0;                 /* first tensor overlapping rank r: layer li, tensor ti */
    for (int64_t r = 0; r < n; r++) {
        double a = (double)r * P, b = a + P;
        /* skip the tensors that end at or before a */
        for (;;) {
            if (li >= m->n_layers) break;
            const int64_t *t;
            int64_t one;
            int k = layer_tensors(&m->layers[li], &t, &one);
            if (ti >= k) { li++; ti = 0; continue; }
            if (lo + (double)t[ti] > a) break;
            lo += (double)t[ti];
            ti++;
        }
        /* add every tensor that starts before b */
        sum = 0;
        double s = lo;
        int lj = li, tj = ti;
        while (lj < m->n_layers && s < b) {
            const int64_t *t;
            int64_t one;
            int k = layer_tensors(&m->layers[lj], &t, &one);
            if (tj >= k) { lj++; tj = 0; continue; }
            sum += (double)t[tj];
            s += (double)t[tj];
            tj++;
        }
        if (sum > best) best = sum;
    }
    return best;
}

void plan_ds_sizes(const ModelSpec *m, int64_t n, double persist, DsSizes *z) {
    memset(z, 0, sizeof(*z));
    if (n < 1) n = 1;
    double psi = 0, nn = (double)n;
    for (int i = 0; i < m->n_layers; i++) {
        const int64_t *t;
        int64_t one;
        int k = layer_tensors(&m->layers[i], &t, &one);
        for (int j = 0; j < k; j++) {
            double e = (double)t[j], sh = ceil(e / nn);
            psi += e;
            z->shard += sh;
            z->padded += nn * sh;
            if (e < persist) {
                z->persist += e;
                z->persist_padded += nn * sh;
                z->persist_count += 1;
            }
        }
        /* frozen parameters: partitioned and (below the threshold) kept whole like the others,
           neither stepped nor reduced */
        const LayerSpec *l = &m->layers[i];
        for (int j = 0; j < l->n_frozen; j++) {
            double e = (double)l->frozen_elems[j], sh = ceil(e / nn);
            z->frozen_shard += sh;
            if (e < persist) {
                z->frozen_persist += e;
                z->frozen_persist_padded += nn * sh;
                z->frozen_persist_count += 1;
            }
        }
    }
    double align = PLAN_DS12_ALIGN * nn;
    z->part = ceil(psi / align) * align / nn;
    z->grad_part = n > 1 ? grad_part(m, n, z->part) : psi;
}

int plan_ds_norm_bytes(int stage3) { return stage3 ? 8 : 4; }

int plan_ds_overflow_bytes(int stage3, const PrecisionSpec *p) {
    /* DeepSpeed's fp16/bf16 off (fp32, autocast): no check; on for mixed-* and pure bf16 (its
       "bf16" block with the master flags; measured: 2 all-reduces, 5 B, gpt2-mini zero1) */
    if (p->master_bytes == 0 && !(p->peak == PEAK_BF16 && !p->autocast)) return 0;
    if (stage3) return p->peak == PEAK_FP16; /* stage3.py: only when self.dtype is fp16 */
    return 1;
}

double plan_ds_reduce_buckets(const ModelSpec *m, int64_t n, double bucket, int forward, DsBucketFn fn, void *ctx) {
    double nn = (double)(n < 1 ? 1 : n), psi = 0, seen = 0, count = 0;
    for (int i = 0; i < m->n_layers; i++) {   /* the flat offsets are in layer order */
        const int64_t *t;
        int64_t one;
        for (int k = layer_tensors(&m->layers[i], &t, &one) - 1; k >= 0; k--) psi += t[k] > 0 ? (double)t[k] : 0;
    }
    DsBucket b = {0, 0, 0, -1, 0};
    double off = 0, held = 0;   /* the last tensor's flat offset; tensors in the bucket */
    for (int s = 0; s < m->n_layers; s++) {
        int i = forward ? s : m->n_layers - 1 - s;
        const int64_t *t;
        int64_t one;
        int nt = layer_tensors(&m->layers[i], &t, &one);
        double lay = 0;   /* layer i's elements walked */
        for (int j = 0; j < nt; j++) {
            double e = (double)t[forward ? j : nt - 1 - j];
            if (e <= 0) continue;
            lay += e;
            if (b.elems + e > bucket && b.elems > 0) {   /* this tensor's hook reduces the bucket */
                b.at = i;
                b.done = lay;
                b.offset = held == 1 && b.elems > bucket ? off : -1;
                if (fn) fn(ctx, &b);
                count++;
                b.elems = b.padded = held = 0;
            }
            off = forward ? seen : psi - seen - e;
            seen += e;
            held++;
            b.elems += e;
            b.padded += nn * ceil(e / nn);
        }
    }
    if (b.elems > 0) {   /* the epilogue's (independent_gradient_partition_epilogue) */
        b.at = -1;
        b.done = 0;
        b.offset = held == 1 && b.elems > bucket ? off : -1;
        if (fn) fn(ctx, &b);
        count++;
    }
    return count;
}

double plan_ds12_bucket_allreduces(const DsBucket *b, double part, double bucket, double *largest) {
    *largest = 0;
    if (b->elems <= 0) return 0;
    if (b->offset < 0 || part <= 0) {   /* the IPG buffer's slice: one all-reduce */
        *largest = b->elems;
        return 1;
    }
    /* one tensor larger than the bucket, from its own gradient: its slices per partition, a chunk
       closed by the slice that takes it past the bucket */
    double a = b->offset, end = b->offset + b->elems, sum = 0, count = 0;
    while (a < end) {
        double edge = fmin(end, (floor(a / part) + 1) * part), s = edge - a;
        if (sum == 0 && s == part) {   /* a run of whole partitions: its whole chunks at once */
            double per = floor(bucket / part) + 1, k = floor(floor((end - a) / part) / per);
            if (k > 0) {
                count += k;
                *largest = fmax(*largest, per * part);
                a += k * per * part;
                continue;
            }
        }
        sum += s;
        a = edge;
        if (sum > bucket) {
            count++;
            *largest = fmax(*largest, sum);
            sum = 0;
        }
    }
    if (sum > 0) {
        count++;
        *largest = fmax(*largest, sum);
    }
    return count;
}

double plan_ds_largest_tensor(const LayerSpec *l) {
    const int64_t *t;
    int64_t one;
    double big = 0;
    for (int k = layer_tensors(l, &t, &one) - 1; k >= 0; k--) big = fmax(big, (double)t[k]);
    return big;
}

typedef struct {
    Ds12Buckets *o;
    double part, bucket;
} Ds12Sum;

static void ds12_sum(void *ctx, const DsBucket *b) {
    Ds12Sum *d = ctx;
    Ds12Buckets *o = d->o;
    double flat;
    plan_ds12_bucket_allreduces(b, d->part, d->bucket, &flat);
    if (o->count == 0) {
        o->first_at = b->at;
        o->first_done = b->done;
    }
    if (o->count < 2) {
        o->elems[(int)o->count] = b->elems;
        o->flat[(int)o->count] = flat;
    }
    o->last_flat = flat;
    o->count++;
}

void plan_ds12_buckets(const ModelSpec *m, int64_t n, double part, double bucket, int forward, Ds12Buckets *out) {
    memset(out, 0, sizeof(*out));
    out->first_at = -1;
    Ds12Sum d = {out, part, bucket};
    plan_ds_reduce_buckets(m, n, bucket, forward, ds12_sum, &d);
}

/* ---- ZeRO-3's fetching over a step (plan_deepspeed.h) ---- */

/* ZeRO-3 partitions and gathers every parameter, frozen ones too (partition_parameters.py: Init
   and the engine's _convert_to_zero_parameters touch all module parameters): a layer's gathered
   tensors are its frozen ones, then its trainable ones. */
static double layer_elems(const ModelSpec *m, int l) { return (double)(m->layers[l].params + m->layers[l].frozen); }

static int64_t tensor_at(const ModelSpec *m, int l, int t) {
    const LayerSpec *ly = &m->layers[l];
    if (t < ly->n_frozen) return ly->frozen_elems[t];
    t -= ly->n_frozen;
    const int64_t *x;
    int64_t one;
    int k = layer_tensors(ly, &x, &one);
    return t < k ? x[t] : 0;
}

static int n_tensors(const ModelSpec *m, int l) {
    const int64_t *x;
    int64_t one;
    return m->layers[l].n_frozen + layer_tensors(&m->layers[l], &x, &one);
}

static int gathered_tensor(const Ds3Sim *z, int64_t e) { return (double)e >= z->persist; }

/* a layer with `before` elements before it stays gathered from its forward to its backward */
static int kept_at(const Ds3Sim *z, int l, double before) {
    return 2 * (z->psi - before - layer_elems(z->m, l)) < z->reuse;
}

/* The next tensor of the trace at or after the cursor (forward: layers in order; backward: the
   layers not kept, in reverse, tensors reversed); 0 at the end. The cursor's prefix sum of
   elements before its layer is recomputed per layer move: O(1) amortised per tensor. */
static int64_t cursor_peek(Ds3Sim *z) {
    const ModelSpec *m = z->m;
    for (;;) {
        if (!z->qbwd) {
            if (z->ql >= m->n_layers) {   /* into the backward part of the trace */
                z->qbwd = 1;
                z->ql = m->n_layers - 1;
                z->qt = z->ql >= 0 ? n_tensors(m, z->ql) - 1 : -1;
                z->qbefore = z->psi - (z->ql >= 0 ? layer_elems(m, z->ql) : 0);
                continue;
            }
            if (z->qt >= n_tensors(m, z->ql)) {   /* (qbefore is set when backward starts) */
                z->ql++;
                z->qt = 0;
                continue;
            }
            int64_t e = tensor_at(m, z->ql, z->qt);
            if (gathered_tensor(z, e)) return e;
            z->qt++;
        } else {
            if (z->ql < 0) return 0;
            if (z->qt < 0 || kept_at(z, z->ql, z->qbefore)) {
                z->ql--;
                if (z->ql >= 0) {
                    z->qt = n_tensors(m, z->ql) - 1;
                    z->qbefore -= layer_elems(m, z->ql);
                }
                continue;
            }
            int64_t e = tensor_at(m, z->ql, z->qt);
            if (gathered_tensor(z, e)) return e;
            z->qt--;
        }
    }
}

static void cursor_next(Ds3Sim *z) {
    if (z->qbwd) z->qt--;
    else z->qt++;
}

/* One coalesced all-gather from the cursor: tensors while the group is below `limit` (at
   least one). */
static void issue(Ds3Sim *z, double limit) {
    if (z->ng >= PLAN_DS3_MAX_GROUPS) return;
    Ds3Group *g = &z->g[z->ng];
    memset(g, 0, sizeof(*g));
    g->k0 = z->issued;
    g->at = z->cur;
    g->at_bwd = z->in_bwd;
    double nn = (double)z->n;
    int64_t e;
    while ((e = cursor_peek(z)) > 0 && (g->elems < limit || g->k0 == z->issued)) {
        g->elems += (double)e;
        g->flat += nn * ceil((double)e / nn);
        z->issued++;
        cursor_next(z);
    }
    if (z->issued == g->k0) return;
    g->k1 = z->issued;
    z->avail += g->elems;
    z->ag_count[z->in_bwd]++;
    z->ag_elems[z->in_bwd] += g->flat;
    z->ng++;
}

/* fetch_sub_module's prefetch, as often as the queue and the live limit allow */
static void fill(Ds3Sim *z) {
    while (z->avail < z->max_live && cursor_peek(z) > 0 && z->ng < PLAN_DS3_MAX_GROUPS) {
        double limit = fmin(z->max_live - z->avail, z->prefetch);
        issue(z, limit);
    }
}

/* The use of the next tensor of the trace: gathered on demand when the prefetch did not reach
   it, its group copied out at its first use, the flat buffer freed after the group's last. */
static void use(Ds3Sim *z) {
    if (z->used >= z->issued && z->ng < PLAN_DS3_MAX_GROUPS) issue(z, 0);   /* the module's own gather */
    if (z->used >= z->issued) {   /* no room to track one more group: gathered and copied at once */
        double e = (double)cursor_peek(z);
        double nn = (double)z->n;
        cursor_next(z);
        z->issued++;
        z->avail += e;
        z->mat += e;
        z->ag_count[z->in_bwd]++;
        z->ag_elems[z->in_bwd] += nn * ceil(e / nn);
        z->used++;
        if (z->on_group) {
            Ds3Group one = {0, 0, nn * ceil(e / nn), e, z->cur, z->in_bwd};
            z->on_group(z->on_group_ctx, &one, z->cur, z->in_bwd);
        }
        return;
    }
    /* uses go in trace order and a group is dropped after its last tensor, so the oldest live
       group holds this one: copied out at its first tensor, freed after its last */
    Ds3Group *g = &z->g[0];
    if (z->used == g->k0) {
        z->mat += g->elems;
        if (z->on_group) z->on_group(z->on_group_ctx, g, z->cur, z->in_bwd);
    }
    if (z->used + 1 >= g->k1) memmove(g, g + 1, sizeof(*g) * (size_t)--z->ng);
    z->used++;
    fill(z);
}

static double gathered_now(const Ds3Sim *z) {
    double flat = 0;
    for (int k = 0; k < z->ng; k++) flat += z->g[k].flat;
    return z->mat + flat;
}

static double layer_gathered(const Ds3Sim *z, const ModelSpec *m, int l) {
    double s = 0;
    for (int t = 0; t < n_tensors(m, l); t++) {
        int64_t e = tensor_at(m, l, t);
        if (gathered_tensor(z, e)) s += (double)e;
    }
    return s;
}

void plan_ds3_sim_init(Ds3Sim *z, const ModelSpec *m, int64_t n, const DsKnobs *k) {
    memset(z, 0, sizeof(*z));
    z->m = m;
    z->n = n < 1 ? 1 : n;
    z->prefetch = k->prefetch;
    z->max_live = k->max_live;
    z->persist = k->persist;
    z->reuse = k->max_reuse;
    for (int i = 0; i < m->n_layers; i++) z->psi += layer_elems(m, i);
}

void plan_ds3_sim_release(Ds3Sim *z, int i) {
    double e = layer_gathered(z, z->m, i);
    z->mat -= e;
    z->avail -= e;
}

double plan_ds3_sim_forward(Ds3Sim *z, int i) {
    if (z->n <= 1) return 0;
    z->in_bwd = 0;
    z->cur = i;
    fill(z);                                  /* the layer's (and its parents') module fetch */
    for (int t = 0; t < n_tensors(z->m, i); t++)
        if (gathered_tensor(z, tensor_at(z->m, i, t))) use(z);
    double g = gathered_now(z);
    if (!kept_at(z, i, z->seen)) plan_ds3_sim_release(z, i);
    z->seen += layer_elems(z->m, i);
    return g;
}

double plan_ds3_sim_backward(Ds3Sim *z, int i) {
    if (z->n <= 1) return 0;
    z->in_bwd = 1;
    z->cur = i;
    z->seen -= layer_elems(z->m, i);          /* elements before layer i */
    fill(z);
    if (!kept_at(z, i, z->seen))              /* released after its forward: gathered again */
        for (int t = n_tensors(z->m, i) - 1; t >= 0; t--)
            if (gathered_tensor(z, tensor_at(z->m, i, t))) use(z);
    return gathered_now(z);
}
