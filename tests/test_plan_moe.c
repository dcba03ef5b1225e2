/* test_plan_moe.c — the mixture-of-experts families as transformers 5.24 runs them: what a MoE
 * block saves for backward (router, grouped_mm's routed rows, shared experts), its MLP backward's
 * two moments, DeepSeek's latent attention, GPT-OSS's sinks and the q/k norms, each against the
 * bytes per token measured with bench/torch/block_probe.py (docs/formulas.md "Mixture of
 * experts"), and the buffers DDP broadcasts for them. */
#include <criterion/criterion.h>
#include <string.h>

#include "plan_activ.h"
#include "plan_dim_moe.h"
#include "plan_comm.h"
#include "plan_load.h"

static char msg[1024];

static ModelSpec load(const char *path) {
    ModelSpec m;
    cr_assert_eq(plan_load_model(&m, path, msg, sizeof msg), 0, "%s", msg);
    return m;
}

static TrainSpec cpu_train(const char *precision, AttnKind attn) {
    TrainSpec t;
    plan_train_defaults(&t);
    t.precision = (PrecisionKind)plan_precision_by_name(precision);
    t.attn = attn;
    t.autocast_cpu = 1;
    t.dropout = 0;
    t.micro_batch = 4;
    t.seq = 128;
    return t;
}

/* The n-th transformer block's layer index (0-based n). */
static int block(const ModelSpec *m, int n) {
    for (int i = 0, k = 0; i < m->n_layers; i++)
        if (m->layers[i].kind == LAYER_BLOCK && k++ == n) return i;
    cr_assert_fail("no block %d", n);
    return -1;
}

/* Per token, what block n saves, less its input (R·h), which block_probe.py leaves out:
   micro-batch 4 of 128 tokens. */
static double saved_per_token(const ModelSpec *m, int n, const TrainSpec *t) {
    ActInputs in = {4, 128, 0};
    double R = plan_precision(t->precision)->param_bytes;
    return plan_act_layer_bytes(m, block(m, n), t, &in) / (4.0 * 128) - R * (double)m->d_model;
}

typedef struct {
    const char *file, *precision;
    AttnKind attn;
    int block;
    double measured;   /* block_probe.py: fwd retained, B/token (micro-batch 2 and 4, seq 128) */
} Saved;

Test(plan_moe, moe_blocks_should_save_what_transformers_saves_per_family) {
    static const Saved CASES[] = {
        /* router softmax + top-k renormalised in fp32, grouped_mm rows in the weights' dtype */
        {"tests/data/hf/variants/mixtral.json", "fp32", ATTN_EAGER, 0, 8556},
        {"tests/data/hf/variants/mixtral.json", "amp-bf16", ATTN_EAGER, 0, 9068},
        {"tests/data/hf/variants/mixtral.json", "fp32", ATTN_SDPA, 1, 6268},
        {"tests/data/hf/variants/mixtral.json", "amp-bf16", ATTN_SDPA, 1, 5884},
        {"bench/torch/configs/mixtral-wide.json", "fp32", ATTN_EAGER, 0, 38252},     /* f_e = 1024 */
        {"bench/torch/configs/qwen2-moe-wide.json", "amp-bf16", ATTN_EAGER, 0, 45406},
        /* shared expert and its sigmoid gate */
        {"tests/data/hf/variants/qwen2-moe.json", "fp32", ATTN_EAGER, 0, 7524},
        {"tests/data/hf/variants/qwen2-moe.json", "amp-bf16", ATTN_EAGER, 1, 7902},
        /* q/k RMSNorm per head */
        {"tests/data/hf/variants/qwen3-moe.json", "fp32", ATTN_EAGER, 0, 7288},
        {"tests/data/hf/variants/qwen3-moe.json", "amp-bf16", ATTN_EAGER, 0, 7604},
        /* top-k softmax, biased experts, clamped SwiGLU, attention sinks */
        {"tests/data/hf/variants/gpt-oss.json", "fp32", ATTN_EAGER, 0, 10904},
        {"tests/data/hf/variants/gpt-oss.json", "amp-bf16", ATTN_EAGER, 1, 11408},
        /* a dense block, and every expert on every token; L2 q/k norms */
        {"tests/data/hf/variants/llama4-text.json", "fp32", ATTN_EAGER, 0, 6816},
        {"tests/data/hf/variants/llama4-text.json", "fp32", ATTN_EAGER, 1, 14536},
        {"tests/data/hf/variants/llama4-text.json", "amp-bf16", ATTN_EAGER, 1, 10944},
        {"tests/data/hf/variants/llama4-text.json", "fp32", ATTN_SDPA, 1, 12248},
        {"tests/data/hf/variants/llama4-text.json", "amp-bf16", ATTN_SDPA, 1, 7760},
        /* latent attention (a dense first block), sigmoid router with shared experts run last */
        {"bench/torch/configs/deepseek-v3-tiny.json", "fp32", ATTN_EAGER, 0, 6672},
        {"bench/torch/configs/deepseek-v3-tiny.json", "fp32", ATTN_EAGER, 1, 7796},
        {"bench/torch/configs/deepseek-v3-tiny.json", "amp-bf16", ATTN_EAGER, 1, 7842},
        {"bench/torch/configs/deepseek-v3-tiny.json", "fp32", ATTN_SDPA, 1, 7796},
        {"bench/torch/configs/deepseek-v3-tiny.json", "amp-bf16", ATTN_SDPA, 0, 5584},
        {"bench/torch/configs/deepseek-v3-tiny.json", "amp-bf16", ATTN_SDPA, 1, 7330},
    };
    for (size_t k = 0; k < sizeof CASES / sizeof CASES[0]; k++) {
        const Saved *c = &CASES[k];
        ModelSpec m = load(c->file);
        TrainSpec t = cpu_train(c->precision, c->attn);
        double got = saved_per_token(&m, c->block, &t);
        cr_expect(got == c->measured, "%s %s %s block %d: %.1f B/token, measured %.1f", c->file, c->precision,
                  plan_attn_name(c->attn), c->block, got, c->measured);
        plan_model_free(&m);
    }
}

/* At micro-batch 1 the AV matmul folds (1, heads) into a view of kv_b_proj's output, which it
   saves whole: + X·a·n per token (measured: the deepseek-v3-tiny rows at b1 +1.1 % without it) */
Test(plan_moe, latent_attention_at_micro_batch_one_should_keep_all_of_kv_b_projs_output) {
    ModelSpec m = load("bench/torch/configs/deepseek-v3-tiny.json");
    TrainSpec t = cpu_train("fp32", ATTN_EAGER);
    ActInputs one = {1, 128, 0}, four = {4, 128, 0};
    int i = block(&m, 0);
    double b4 = plan_act_layer_bytes(&m, i, &t, &four) / 4;
    t.micro_batch = 1;
    double b1 = plan_act_layer_bytes(&m, i, &t, &one);
    cr_expect_eq(b1 - b4, 128.0 * 4 * 4 * 16, "X·a·n per token: %.0f", b1 - b4);
    plan_model_free(&m);
}

typedef struct {
    const char *file, *precision;
    int block;
    double measured;     /* block_probe.py: backward's working set above its start, B/token */
    double grads;        /* parameter elements whose gradients exist then */
} Backward;

Test(plan_moe, the_moe_mlp_backward_should_be_the_larger_of_the_weighted_sum_and_the_activation) {
    static const Backward CASES[] = {
        {"tests/data/hf/variants/mixtral.json", "fp32", 0, 1528, 0},                 /* 3·h per row */
        {"tests/data/hf/variants/mixtral.json", "amp-bf16", 0, 1528, 0},             /* experts in fp32 */
        {"bench/torch/configs/mixtral-wide.json", "fp32", 0, 15856, 4 * 64 * 1024},  /* 2·f_e − h, down */
        {"bench/torch/configs/qwen2-moe-wide.json", "amp-bf16", 0, 15982, 4 * 64 * 1024 + 64},
        {"tests/data/hf/variants/qwen2-moe.json", "fp32", 0, 1780, 64},              /* + the gate's X·h */
        {"tests/data/hf/variants/qwen2-moe.json", "amp-bf16", 0, 1654, 64},
        {"bench/torch/configs/deepseek-v3-tiny.json", "fp32", 1, 1272, 3 * 64 * 32},   /* shared done first */
        {"tests/data/hf/variants/llama4-text.json", "fp32", 1, 1792, 4 * 64 * 96 + 3 * 64 * 96},
    };
    for (size_t k = 0; k < sizeof CASES / sizeof CASES[0]; k++) {
        const Backward *c = &CASES[k];
        ModelSpec m = load(c->file);
        TrainSpec t = cpu_train(c->precision, ATTN_EAGER);
        ActInputs in = {4, 128, 0};
        int i = block(&m, c->block);
        double R = plan_precision(t.precision)->param_bytes;
        double ws = plan_act_block_backward_bytes(&m, i, &t, &in) / (4.0 * 128) - R * (double)m.d_model;
        /* the planner rounds the probe's few frees of small saved tensors (the sums, inv_perm) up */
        cr_expect(ws >= c->measured && ws <= c->measured + 16, "%s %s: %.1f B/token, measured %.1f", c->file,
                  c->precision, ws, c->measured);
        cr_expect_eq(plan_act_block_mlp_out_elems(&m, i, &t, &in), c->grads, "%s %s: gradients at the moment",
                     c->file, c->precision);
        plan_model_free(&m);
    }
}

/* grouped_mm runs the routed experts in the weights' dtype: autocast casts none of them */
Test(plan_moe, autocast_should_not_cast_grouped_mm_experts_but_llama4s_bmm) {
    ModelSpec m = load("tests/data/hf/variants/qwen3-moe.json");
    int i = block(&m, 0);
    cr_expect_eq(plan_act_uncast_params(&m, &m.layers[i]), (double)m.layers[i].expert_params);
    plan_model_free(&m);
    m = load("tests/data/hf/variants/llama4-text.json");
    cr_expect_eq(plan_act_uncast_params(&m, &m.layers[block(&m, 1)]), 0);
    cr_expect_eq(plan_act_mlp_width(&m, &m.layers[block(&m, 1)]), 4 * 96 + 96, "every expert + the shared");
    plan_model_free(&m);
}

/* DeepSeek's routers hold e_score_correction_bias (E fp32) and its latent attention rotates
   qk_rope_head_dim dims: DDP broadcasts 16 + 2 x 16 B per forward (measured: 48 B) */
Test(plan_moe, ddp_should_broadcast_deepseeks_correction_bias_and_rope_buffers) {
    ModelSpec m = load("bench/torch/configs/deepseek-v3-tiny.json");
    int dtypes = 0;
    cr_expect_eq(plan_model_buffer_bytes(&m, &dtypes), 48);
    plan_model_free(&m);
}

/* output_router_logits keeps the logits in the output and the load-balancing loss saves a
   softmax of them: X·E each per token and MoE block (measured +16 B fp32, +8 B amp per block) */
Test(plan_moe, router_logits_should_add_the_kept_logits_and_the_aux_losss_softmax) {
    const char *cfg = "{\"model_type\": \"qwen3_moe\", \"hidden_size\": 64, \"intermediate_size\": 96, "
                      "\"num_hidden_layers\": 2, \"num_attention_heads\": 4, \"num_key_value_heads\": 2, "
                      "\"vocab_size\": 1000, \"max_position_embeddings\": 128, \"num_experts\": 4, "
                      "\"num_experts_per_tok\": 2, \"moe_intermediate_size\": 32, \"output_router_logits\": true}";
    ModelSpec m;
    cr_assert_eq(plan_load_model_from_buffer(&m, cfg, strlen(cfg), "aux", msg, sizeof msg), 0, "%s", msg);
    cr_expect(m.moe.router_logits);
    TrainSpec t = cpu_train("fp32", ATTN_EAGER);
    cr_expect_eq(saved_per_token(&m, 0, &t), 7288 + 2 * 4 * 4);
    plan_model_free(&m);
}

/* --moe-imbalance F (an estimate; docs/formulas.md "Routing imbalance"): every expert's rows sized
   for the busiest, F times the mean, so the routed rows grouped_mm would hold, E_b·k·(2h + 4f_e)
   per token, are planned F times, and so is the MLP backward's working set per routed row; the
   router, the permutation indices, the attention and Llama 4's all-expert bmm stay as measured */
Test(plan_moe, a_routing_imbalance_should_scale_only_the_routed_experts_rows) {
    ModelSpec m = load("tests/data/hf/variants/mixtral.json");
    TrainSpec t1 = cpu_train("fp32", ATTN_EAGER), t2 = t1, unset = t1;
    t1.moe_imbalance = 1;
    t2.moe_imbalance = 2;
    unset.moe_imbalance = 0;
    ActInputs in = {4, 128, 0};
    int i = block(&m, 0);
    double h = (double)m.d_model, fe = (double)m.moe.d_ff_expert, k = m.moe.top_k, bs = 4.0 * 128;
    cr_expect_eq(plan_act_layer_bytes(&m, i, &unset, &in), plan_act_layer_bytes(&m, i, &t1, &in), "0 reads as 1");
    double rows = 4 * k * (2 * h + 4 * fe);   /* fp32 rows per token: 4,096 B */
    cr_expect_eq(plan_act_layer_bytes(&m, i, &t2, &in) - plan_act_layer_bytes(&m, i, &t1, &in), bs * rows,
                 "F = 2 adds one more set of routed rows");
    /* the weighted sum's moment (3·h per row, 1,536 B/token) doubles; the residual gradient R·h stays */
    cr_expect_eq(plan_act_block_backward_bytes(&m, i, &t2, &in) - plan_act_block_backward_bytes(&m, i, &t1, &in),
                 bs * 3 * 4 * k * h);
    plan_model_free(&m);

    m = load("tests/data/hf/variants/llama4-text.json");   /* every expert on every token */
    i = block(&m, 1);
    cr_expect_eq(plan_act_layer_bytes(&m, i, &t2, &in), plan_act_layer_bytes(&m, i, &t1, &in));
    cr_expect_eq(plan_act_block_backward_bytes(&m, i, &t2, &in), plan_act_block_backward_bytes(&m, i, &t1, &in));
    plan_model_free(&m);
}

/* GPT-OSS's eager attention (modeling_gpt_oss.py eager_attention_forward) takes the softmax over
   the scores and the sink column (torch.cat([attn_weights, sinks], dim=-1)): the saved
   probabilities are one tensor of b·a·s·(s + 1) fp32, and combined_logits.max(dim=-1) saves its
   int64 indices, b·a·s. At micro-batch 4 of 128 tokens and 4 heads the probabilities are
   1,056,768 B (the recorded request), above the small pool's 1 MiB, where a·s·s alone would be
   one small request; the layer's bytes are the same either way. */
Test(plan_moe, gpt_oss_probabilities_should_be_one_tensor_over_the_sink_column) {
    ModelSpec m = load("tests/data/hf/variants/gpt-oss.json");
    TrainSpec t = cpu_train("fp32", ATTN_EAGER);
    ActInputs in = {4, 128, 0};
    double v[PLAN_ACT_MAX_TENSORS], sum = 0;
    int i = block(&m, 0), n = plan_act_ckpt_tensors(&m, i, &t, &in, v, PLAN_ACT_MAX_TENSORS);
    double a = m.n_head, probs = 4 * a * 128 * 129 * 4, idx = 4 * a * 128 * 8;
    int n_probs = 0, n_idx = 0, n_square = 0;
    for (int k = 0; k < n; k++) {
        sum += v[k];
        n_probs += v[k] == probs;
        n_idx += v[k] == idx;
        n_square += v[k] == 4 * a * 128 * 128 * 4;
    }
    cr_expect_eq(a, 4);
    cr_expect_eq(n_probs, 1, "one b·a·s·(s+1) fp32 tensor (%.0f B)", probs);
    cr_expect_eq(n_square, 0, "no b·a·s·s fp32 tensor beside it");
    cr_expect_geq(n_idx, 1, "the max's int64 indices (%.0f B)", idx);
    cr_expect_leq(sum, plan_act_layer_bytes(&m, i, &t, &in) + 0.5, "the tensors are within the layer's bytes");
    plan_model_free(&m);
}
