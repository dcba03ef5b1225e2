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

double plan_ds3_gathered_elems(const LayerSpec *l, int64_t n) {
    if (n <= 1) return 0;
    const int64_t *t;
    int64_t one;
    int k = layer_tensors(l, &t, &one);
    double g = 0;
    for (int j = 0; j < k; j++)
        if ((double)t[j] >= PLAN_DS3_PERSIST) g += (double)n * ceil((double)t[j] / (double)n);
    return g;
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

void plan_ds_sizes(const ModelSpec *m, int64_t n, DsSizes *z) {
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
            if (e < PLAN_DS3_PERSIST) {
                z->persist += e;
                z->persist_padded += nn * sh;
                z->persist_count += 1;
            }
        }
    }
    double align = PLAN_DS12_ALIGN * nn;
    z->part = ceil(psi / align) * align / nn;
    z->grad_part = n > 1 ? grad_part(m, n, z->part) : psi;
}

int plan_ds3_kept(double later_elems) { return 2 * later_elems < PLAN_DS3_REUSE; }

int plan_ds_norm_bytes(int stage3) { return stage3 ? 8 : 4; }

int plan_ds_overflow_bytes(int stage3, const PrecisionSpec *p) {
    if (p->master_bytes == 0) return 0;      /* DeepSpeed's fp16/bf16 off: no check */
    if (stage3) return p->peak == PEAK_FP16; /* stage3.py: only when self.dtype is fp16 */
    return 1;
}
