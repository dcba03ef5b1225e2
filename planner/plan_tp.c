/* plan_tp.c — see plan_tp.h and docs/formulas.md "Tensor and sequence parallel". */
#include "plan_tp.h"
#include "plan_lora.h"

#include <stdio.h>
#include <string.h>

int plan_tp_degree(const TrainSpec *t) { return t->tp > 1 ? t->tp : 1; }

int plan_tp_root_sharded(const ModelSpec *m) { return !m->tied_embeddings; }

int plan_tp_check(const ModelSpec *m, const TrainSpec *t, const ClusterSpec *c, StrategyKind s,
                  char *msg, size_t len) {
    int tp = plan_tp_degree(t);
    if (tp == 1) {
        if (t->sp) { snprintf(msg, len, "--sp on splits the sequence over a tensor-parallel group: it needs --tp 2 or more"); return -1; }
        return 0;
    }
    if (s != STRAT_DDP && s != STRAT_FSDP_FULL) {
        snprintf(msg, len, "--tp %d with --strategy %s: tensor parallel is planned with ddp and fsdp-full "
                 "(FSDP2 on the data-parallel dimension of a 2-D mesh)", tp, plan_strategy(s)->name);
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
       Hugging Face configs of these families); the newer families' extra norms, soft-caps and
       fused projections are not split by them yet */
    static const char *const FAMILIES[] = {"", "gpt2", "llama", "mistral", NULL};
    if (!plan_model_family_in(m, FAMILIES)) {
        snprintf(msg, len, "--tp %d: %s (model_type %s): tensor parallel is planned for GPT-2 and LLaMA/Mistral blocks "
                 "(gpt2, llama, mistral configs and the zoo's)", tp, m->name, m->family);
        return -1;
    }
    if (t->impl != IMPL_PYTORCH) {
        snprintf(msg, len, "--tp %d: tensor parallel is PyTorch's (--impl pytorch); memplan's engine has none", tp);
        return -1;
    }
    if (m->arch != ARCH_DECODER || m->n_head <= 0 || m->d_ff <= 0 || m->moe.n_experts > 0 ||
        !plan_model_tensors_known(m)) {
        snprintf(msg, len, "--tp %d: %s is not a dense decoder with known parameter tensors; tensor parallel "
                 "is planned for GPT-2- and LLaMA-style decoders", tp, m->name);
        return -1;
    }
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
    int root = plan_tp_root_sharded(m);
    for (int i = 0; i < m->n_layers; i++) {
        LayerSpec l = m->layers[i];
        int split_layer = l.kind == LAYER_BLOCK ||
                          (root && (l.kind == LAYER_EMBED || l.kind == LAYER_HEAD));
        if (split_layer && l.n_tensors > 0) {
            int64_t sum = 0, largest = 0;
            for (int k = 0; k < l.n_tensors; k++) {
                int64_t e = l.tensor_elems[k], d0 = l.tensor_dim0[k];
                int split = l.kind == LAYER_BLOCK ? !replicated(m, e, d0)
                                                  : (e % m->vocab == 0 && e / m->vocab == m->d_model);
                if (split) {
                    /* column split: Linear (out, in) Shard(0) (dim 0 / tp); row split: Shard(1) */
                    int64_t ne = e / tp;
                    int64_t nd = d0 > 0 && d0 % tp == 0 && (d0 != m->d_model || d0 == e) ? d0 / tp : d0;
                    if (nd > 0 && ne % nd) nd = 0;
                    l.tensor_elems[k] = ne;
                    l.tensor_dim0[k] = nd;
                    e = ne;
                }
                sum += e;
                if (e > largest) largest = e;
            }
            l.params = sum;
            l.largest_tensor = largest;
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
