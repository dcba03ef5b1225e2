/* plan_fsdp.c — see plan_fsdp.h. Sources (torch 2.15, torch/distributed/fsdp/_fully_shard/):
 * _fsdp_param_group.py unshard / wait_for_unshard / reshard / pre_backward / post_backward,
 * _fsdp_collectives.py foreach_all_gather / foreach_reduce, _fsdp_state.py _lazy_init (root). */
#include "plan_fsdp.h"

#include <math.h>
#include <string.h>


static int is_block(const ModelSpec *m, int i) { return m->layers[i].kind == LAYER_BLOCK; }

int plan_fsdp2_fp32_shards(const TrainSpec *t, StrategyKind sk) {
    const Strategy *s = plan_strategy(sk);
    return (s->buffers == BUF_FSDP_FULL || s->buffers == BUF_FSDP_GRAD_OP) && t->impl == IMPL_PYTORCH &&
           t->fsdp_impl != 1 && plan_precision(t->precision)->master_bytes > 0;
}

void plan_fsdp2_setup(Fsdp2 *f, const ModelSpec *m, const TrainSpec *t, const ClusterSpec *c,
                      StrategyKind sk, const MemSizes *z) {
    const Strategy *s = plan_strategy(sk);
    const PrecisionSpec *p = plan_precision(t->precision);
    memset(f, 0, sizeof(*f));
    int transformer = m->arch == ARCH_DECODER || m->arch == ARCH_ENCODER || m->arch == ARCH_ENC_DEC;
    int blocks = 0;
    for (int i = 0; i < m->n_layers; i++) blocks += is_block(m, i);
    f->on = (s->buffers == BUF_FSDP_FULL || s->buffers == BUF_FSDP_GRAD_OP) && t->impl == IMPL_PYTORCH &&
            t->fsdp_impl != 1 && c->gpus > 1 && transformer && blocks > 0;
    f->keep = s->buffers == BUF_FSDP_GRAD_OP;
    f->n = z->n;
    f->gather = z->n > 1;
    f->pb = p->param_bytes;
    f->gb = p->grad_bytes;
    /* MixedPrecisionPolicy(reduce_dtype=fp32): foreach_reduce copies the 16-bit unsharded
       gradients into an fp32 reduce-scatter input, whose fp32 output are the sharded gradients
       of the fp32 parameters (_fsdp_param_group.py _get_reduce_dtype, _fsdp_collectives.py) */
    f->rb = f->sb = plan_fsdp2_fp32_shards(t, sk) ? 4 : p->grad_bytes;
    f->root = (double)z->n * z->root_shard;
}

double plan_fsdp2_unit(const Fsdp2 *f, const ModelSpec *m, int i) {
    if (!is_block(m, i)) return 0;
    return (double)f->n * ceil((double)m->layers[i].params / (double)f->n);
}

/* Σ gathered elements of the blocks before layer i (forward order) */
static double blocks_before(const Fsdp2 *f, const ModelSpec *m, int i) {
    double s = 0;
    for (int j = 0; j < i; j++) s += plan_fsdp2_unit(f, m, j);
    return s;
}

/* the nearest block before layer i (forward order), or -1 */
static int block_before(const ModelSpec *m, int i) {
    for (int j = i - 1; j >= 0; j--) if (is_block(m, j)) return j;
    return -1;
}

/* the nearest block after layer i (forward order), or -1 */
static int block_after(const ModelSpec *m, int i) {
    for (int j = i + 1; j < m->n_layers; j++) if (is_block(m, j)) return j;
    return -1;
}

/* Forward. The root unit is gathered first and, fully_shard's default for the root
   (reshard_after_forward=None -> False for the root, _fsdp_state.py _lazy_init), stays unsharded
   through backward. Each unit's all-gather lands in one flat output buffer that is copied out
   into per-parameter unsharded tensors (foreach_all_gather_copy_out); in forward the flat buffer
   is kept (comm_ctx.all_gather_state) until the next unit's copy-out, the last one until the
   root's post-forward, i.e. through the loss. A block frees its unsharded parameters after its
   forward (reshard_after_forward=True) or keeps them into backward (False). With a shard group
   of 1 there is no flat buffer: wait_for_unshard copies the local shard into the unsharded
   parameters. */
double plan_fsdp2_fwd_comm(const Fsdp2 *f, const ModelSpec *m, int i) {
    double kept = f->keep ? blocks_before(f, m, i) : 0;
    double u = plan_fsdp2_unit(f, m, i);
    if (u > 0) return (f->root + kept + u + (f->gather ? u : 0)) * f->pb;
    int b = block_before(m, i);
    double flat = !f->gather ? 0 : b < 0 ? f->root : plan_fsdp2_unit(f, m, b);
    return (f->root + kept + flat) * f->pb;
}

/* Backward. A unit's pre-backward gathers it (a no-op when kept) and prefetches the unit that
   runs next in backward (_backward_prefetch: the previous one in forward order), whose flat
   all-gather output lives until its own copy-out; the root's pre-backward, first of all,
   prefetches the last block. The reduce-scatter input of the last reduced unit is kept
   (comm_ctx.reduce_scatter_states, reduce_scatter_max_input_buffers = 1) until the next
   unit's post-backward. */
double plan_fsdp2_bwd_comm(const Fsdp2 *f, const ModelSpec *m, int i) {
    double u = plan_fsdp2_unit(f, m, i);
    double params = f->keep ? blocks_before(f, m, i) + u : u;
    int prev = block_before(m, i), next = block_after(m, i);
    double prefetch = f->gather && !f->keep && prev >= 0 ? plan_fsdp2_unit(f, m, prev) : 0;
    /* the reduce-scatter input of the block after i (reduced before i's backward), or none
       while only root layers (after every block) have run */
    double rs_in = next >= 0 ? plan_fsdp2_unit(f, m, next) * f->rb : 0;
    return (f->root + params + prefetch) * f->pb + rs_in;
}

/* A block's post-backward: its unsharded parameters are freed (reshard after backward), the
   previous reduce-scatter input released, and its own reduce-scatter input allocated (the
   unsharded gradients copied in, then freed; the caller holds those). The prefetched next
   unit is still in flight. */
double plan_fsdp2_rs_comm(const Fsdp2 *f, const ModelSpec *m, int i) {
    double u = plan_fsdp2_unit(f, m, i);
    int prev = block_before(m, i);
    double params = f->keep ? blocks_before(f, m, i) : 0;
    double prefetch = f->gather && !f->keep && prev >= 0 ? plan_fsdp2_unit(f, m, prev) : 0;
    return (f->root + params + prefetch) * f->pb + u * f->rb;
}
