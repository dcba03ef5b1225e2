/* test_plan_families.c — the 2024-26 dense families' activations (ModelSpec.block, the blocks'
 * sliding windows and NoPE layers) against bench/torch/block_probe.py: the step's peak above its
 * start per token (the slope between micro-batch 2 and 4 at seq 128, one CPU process, HF loop,
 * the allocator's exact running total), which holds every block's saved tensors, the head's and
 * the loss's backward. docs/formulas.md "Activations" derives each term. Run from the repository
 * root (the configs are bench/torch/configs/<family>-mini.json). */
#include <criterion/criterion.h>
#include <string.h>

#include "plan_activ.h"
#include "plan_load.h"
#include "plan_memory.h"
#include "test_plan.h"

static char msg[1024];

static ModelSpec load(const char *what) {
    ModelSpec m;
    int rc = what[0] == '{' ? plan_load_model_from_buffer(&m, what, strlen(what), "config.json", msg, sizeof(msg))
                            : plan_load_model(&m, what, msg, sizeof(msg));
    cr_assert_eq(rc, 0, "%s", msg);
    return m;
}

/* The planned peak per token, as the probe measures it: one rank, overheads zeroed, CPU kernels,
   the HF loop, (peak at micro-batch 4 − peak at 2) / (2 · 128). */
static double peak_per_token_at(const ModelSpec *m, PrecisionKind prec, AttnKind attn, double dropout, int64_t seq,
                                MemResult *last) {
    ClusterSpec c;
    cluster(&c, 1, 1);
    c.cuda_context = c.nccl_per_comm = c.alloc_margin = 0;
    c.margin_is_frac = 0;
    double peak[2];
    for (int k = 0; k < 2; k++) {
        TrainSpec t;
        plan_train_defaults(&t);
        t.precision = prec;
        t.attn = attn;
        t.dropout = dropout;
        t.micro_batch = 2 + 2 * k;
        t.seq = seq;
        t.loop_trainer = 1;
        t.autocast_cpu = 1;
        MemResult r;
        plan_memory(m, &t, &c, STRAT_DDP, &r);
        peak[k] = r.peak;
        if (last) *last = r;
    }
    return (peak[1] - peak[0]) / (2.0 * (double)seq);
}

static double peak_per_token(const ModelSpec *m, PrecisionKind prec, AttnKind attn, double dropout) {
    return peak_per_token_at(m, prec, attn, dropout, 128, NULL);
}

#define C(f) "bench/torch/configs/" f "-mini.json"

/* llama-mini with a 64-key sliding window (Mistral: every block; Qwen2: from block 2 on) */
#define WIN_BASE "\"hidden_size\":128,\"intermediate_size\":352,\"num_hidden_layers\":4,\"num_attention_heads\":4," \
                 "\"num_key_value_heads\":2,\"head_dim\":32,\"vocab_size\":1024,\"tie_word_embeddings\":false,\"sliding_window\":64"

static const struct { const char *model; PrecisionKind prec; AttnKind attn; double dropout; double measured; } PROBED[] = {
    /* Qwen3: per-head q/k RMSNorms on the X-dtype projections, (4 + X)·(a·d + kv·d) + 4·(a + kv) */
    {C("qwen3"), PREC_FP32, ATTN_EAGER, 0, 85644}, {C("qwen3"), PREC_FP32, ATTN_SDPA, 0, 73420},
    {C("qwen3"), PREC_AMP_BF16, ATTN_EAGER, 0, 67980}, {C("qwen3"), PREC_AMP_BF16, ATTN_SDPA, 0, 53708},
    /* Gemma 2: post-norms scaled in fp32, tanh soft-caps on the scores and on the logits */
    {C("gemma2"), PREC_FP32, ATTN_EAGER, 0, 85580}, {C("gemma2"), PREC_AMP_BF16, ATTN_EAGER, 0, 68940},
    /* Gemma 3: post-norms, per-head q/k norms in fp32, SDPA masks in its three sliding blocks */
    {C("gemma3"), PREC_FP32, ATTN_EAGER, 0, 79532}, {C("gemma3"), PREC_FP32, ATTN_SDPA, 0, 72428},
    {C("gemma3"), PREC_AMP_BF16, ATTN_EAGER, 0, 69036}, {C("gemma3"), PREC_AMP_BF16, ATTN_SDPA, 0, 57324},
    {C("gemma3"), PREC_AMP_BF16, ATTN_EAGER, 0.1, 77228}, {C("gemma3"), PREC_AMP_BF16, ATTN_SDPA, 0.1, 84396},
    /* Phi-3: fused qkv and gate_up (one autocast cast each), SDPA keeping the fused output and its
       own output, residual dropouts */
    {C("phi3"), PREC_FP32, ATTN_EAGER, 0, 65068}, {C("phi3"), PREC_FP32, ATTN_SDPA, 0, 63084},
    {C("phi3"), PREC_AMP_BF16, ATTN_EAGER, 0, 51500}, {C("phi3"), PREC_AMP_BF16, ATTN_SDPA, 0, 42348},
    {C("phi3"), PREC_FP32, ATTN_EAGER, 0.1, 85548}, {C("phi3"), PREC_AMP_BF16, ATTN_EAGER, 0.1, 61740},
    {C("phi3"), PREC_AMP_BF16, ATTN_SDPA, 0.1, 68908},
    /* OLMo 2: post-norms only, full-width q/k norms scaled in fp32 */
    {C("olmo2"), PREC_FP32, ATTN_EAGER, 0, 71244}, {C("olmo2"), PREC_FP32, ATTN_SDPA, 0, 61068},
    {C("olmo2"), PREC_AMP_BF16, ATTN_EAGER, 0, 60748}, {C("olmo2"), PREC_AMP_BF16, ATTN_SDPA, 0, 47500},
    /* StarCoder2: LayerNorm and GELU with separate q, k, v and rotary attention, residual dropouts */
    {C("starcoder2"), PREC_FP32, ATTN_EAGER, 0, 54352}, {C("starcoder2"), PREC_FP32, ATTN_SDPA, 0, 44176},
    {C("starcoder2"), PREC_AMP_BF16, ATTN_EAGER, 0, 45904}, {C("starcoder2"), PREC_AMP_BF16, ATTN_SDPA, 0, 32656},
    {C("starcoder2"), PREC_FP32, ATTN_EAGER, 0.1, 75344}, {C("starcoder2"), PREC_AMP_BF16, ATTN_EAGER, 0.1, 56656},
    {C("starcoder2"), PREC_AMP_BF16, ATTN_SDPA, 0.1, 63824},
    /* Granite's multipliers and SmolLM3's NoPE block save what llama-mini saves, except the NoPE
       block's attention dropout under autocast (q stays bf16: 2 bytes of noise, not 4) */
    {C("granite"), PREC_FP32, ATTN_EAGER, 0, 65068}, {C("granite"), PREC_AMP_BF16, ATTN_SDPA, 0, 41324},
    {C("smollm3"), PREC_AMP_BF16, ATTN_EAGER, 0, 54572}, {C("smollm3"), PREC_AMP_BF16, ATTN_EAGER, 0.1, 61740},
    {C("smollm3"), PREC_AMP_BF16, ATTN_SDPA, 0.1, 69932},
    /* sliding windows shorter than the sequence under SDPA: a mask per block, k and v expanded */
    {"{\"model_type\":\"mistral\"," WIN_BASE "}", PREC_FP32, ATTN_SDPA, 0, 58988},
    {"{\"model_type\":\"mistral\"," WIN_BASE "}", PREC_AMP_BF16, ATTN_SDPA, 0, 43372},
    {"{\"model_type\":\"qwen2\",\"use_sliding_window\":true,\"max_window_layers\":2," WIN_BASE "}", PREC_FP32,
     ATTN_SDPA, 0, 56940},
    {"{\"model_type\":\"qwen2\",\"use_sliding_window\":true,\"max_window_layers\":2," WIN_BASE "}", PREC_AMP_BF16,
     ATTN_SDPA, 0, 42348},
};

Test(plan_families, each_familys_peak_should_grow_per_token_as_block_probe_measured) {
    for (size_t i = 0; i < sizeof(PROBED) / sizeof(PROBED[0]); i++) {
        ModelSpec m = load(PROBED[i].model);
        double got = peak_per_token(&m, PROBED[i].prec, PROBED[i].attn, PROBED[i].dropout);
        cr_expect_eq(got, PROBED[i].measured, "row %zu (%s %s %s dropout %g): planned %.1f, measured %.1f B/token", i,
                     m.name, plan_precision(PROBED[i].prec)->name, plan_attn_name(PROBED[i].attn), PROBED[i].dropout,
                     got, PROBED[i].measured);
        plan_model_free(&m);
    }
}

/* Qwen3's q/k norms per block per token, from modeling_qwen3.py: the fp32 view of each head's q
   and k (4 B), rsqrt per head (4 B) and the normalised tensor at the projection's dtype */
Test(plan_families, qwen3s_qk_norms_should_save_their_inputs_in_fp32_and_the_normalised_heads) {
    ModelSpec q = load(C("qwen3")), l = load(C("qwen3"));
    memset(&l.block, 0, sizeof(l.block));               /* the same block without q/k norms */
    TrainSpec t;
    plan_train_defaults(&t);
    t.autocast_cpu = 1;
    t.attn = ATTN_SDPA;
    double lq, ll, quad;
    for (int k = 0; k < 2; k++) {
        t.precision = k ? PREC_AMP_BF16 : PREC_FP32;
        double X = k ? 2 : 4;
        plan_act_block_coeffs(&q, &t, 0, 0, &lq, &quad);
        plan_act_block_coeffs(&l, &t, 0, 0, &ll, &quad);
        cr_expect_eq(lq - ll, (4 + X) * (256 + 128) + 4 * (4 + 2), "%s", plan_precision(t.precision)->name);
    }
    plan_model_free(&q);
    plan_model_free(&l);
}

/* Phi-3 eager at micro-batch 1 without GQA: the AV matmul saves a view of the fused q|k|v output
   (X·(a·d + kv·d) per token more than at larger batches, where the reshape copies) */
Test(plan_families, phi3_eager_at_batch_one_should_keep_the_fused_projection_alive) {
    ModelSpec m = load(C("phi3"));
    TrainSpec t;
    plan_train_defaults(&t);
    t.autocast_cpu = 1;
    t.attn = ATTN_EAGER;
    t.precision = PREC_FP32;
    ActInputs one = {1, 128, 0}, two = {2, 128, 0};
    double b1 = plan_act_layer_bytes(&m, 1, &t, &one), b2 = plan_act_layer_bytes(&m, 1, &t, &two);
    cr_expect_eq(b1 - b2 / 2, 128.0 * 4 * (128 + 128));
    t.attn = ATTN_SDPA;                                  /* SDPA keeps it at every batch */
    b1 = plan_act_layer_bytes(&m, 1, &t, &one), b2 = plan_act_layer_bytes(&m, 1, &t, &two);
    cr_expect_eq(b1, b2 / 2);
    plan_model_free(&m);
}

/* Under checkpointing each checkpoint keeps its block's mask: eager gets one per kind (Gemma 2:
   full and sliding, each (b, 1, s, s) at the embeddings' dtype), SDPA only a sliding window's
   boolean one when the sequence is longer (b·s² bytes) */
Test(plan_families, checkpointed_blocks_should_keep_one_mask_of_each_kind) {
    ModelSpec m = load(C("gemma2"));                     /* blocks 0, 2 sliding (64), 1, 3 full */
    TrainSpec t;
    plan_train_defaults(&t);
    t.autocast_cpu = 1;
    t.precision = PREC_FP32;
    t.act_ckpt = CKPT_FULL;
    t.attn = ATTN_EAGER;
    ActInputs in = {2, 128, 0};
    double input = 2.0 * 128 * 4 * 128, mask = 2.0 * 128 * 128 * 4;
    cr_expect_eq(plan_act_ckpt_bytes(&m, 1, &t, &in), input + mask);   /* block.0: the sliding mask */
    cr_expect_eq(plan_act_ckpt_bytes(&m, 2, &t, &in), input + mask);   /* block.1: the causal one */
    cr_expect_eq(plan_act_ckpt_bytes(&m, 3, &t, &in), input);
    t.attn = ATTN_SDPA;
    cr_expect_eq(plan_act_ckpt_bytes(&m, 1, &t, &in), input + 2.0 * 128 * 128);
    cr_expect_eq(plan_act_ckpt_bytes(&m, 2, &t, &in), input);
    in.s = 64;                                           /* within the window: is_causal, no mask */
    cr_expect_eq(plan_act_ckpt_bytes(&m, 1, &t, &in), 2.0 * 64 * 4 * 128);
    plan_model_free(&m);
}

/* The buffers DDP broadcasts every forward (fp32 bytes), as transformers 5.24 registers them:
   every rotary model an inv_freq and original_inv_freq of head_dim/2 (llama-mini: 2 x 16 x 4);
   Gemma's scaled embedding a 0-d embed_scale (gemma2-mini: 132, measured in its DDP row's
   broadcast); Gemma 3 one rotary pair per attention kind in layer_types (gemma3-mini, three
   sliding blocks and one full: 260, measured). */
Test(plan_families, ddp_should_broadcast_gemmas_embed_scale_and_a_rotary_pair_per_attention_kind) {
    static const struct { const char *model; double bytes; } CASES[] = {
        {C("llama"), 128}, {C("gemma2"), 132}, {C("gemma3"), 260},
        /* Gemma 3 without layer_types: its config class derives them from sliding_window_pattern */
        {"{\"model_type\":\"gemma3_text\",\"hidden_size\":128,\"intermediate_size\":352,\"num_hidden_layers\":4,"
         "\"num_attention_heads\":4,\"num_key_value_heads\":2,\"head_dim\":32,\"vocab_size\":1024}", 132},
        {"{\"model_type\":\"gemma3_text\",\"hidden_size\":128,\"intermediate_size\":352,\"num_hidden_layers\":4,"
         "\"num_attention_heads\":4,\"num_key_value_heads\":2,\"head_dim\":32,\"vocab_size\":1024,"
         "\"sliding_window_pattern\":2}", 260},
        {"{\"model_type\":\"gemma3_text\",\"hidden_size\":128,\"intermediate_size\":352,\"num_hidden_layers\":2,"
         "\"num_attention_heads\":4,\"num_key_value_heads\":2,\"head_dim\":32,\"vocab_size\":1024,"
         "\"layer_types\":[\"full_attention\",\"full_attention\"]}", 132},
    };
    for (size_t i = 0; i < sizeof(CASES) / sizeof(CASES[0]); i++) {
        ModelSpec m = load(CASES[i].model);
        int dtypes = 0;
        cr_expect_eq(plan_model_buffer_bytes(&m, &dtypes), CASES[i].bytes, "case %zu (%s): %.0f B", i, m.name,
                     plan_model_buffer_bytes(&m, &dtypes));
        cr_expect_eq(dtypes, 1);
        plan_model_free(&m);
    }
}

/* Eager attention's backward at long sequences: at s 512 every block's backward peaks at its
   softmax's backward (SoftmaxBackward0), not in its MLP: the probabilities' gradient and the
   softmax input's (a·s each at the softmax output's dtype) and v's, while what the block saved
   after the softmax is freed. block_probe.py --seq 512, eager, each block's working set above
   its start (the residual gradient R·h is there at the start) per token, and the part that does
   not grow with the batch: the gradients of all the block's weights but q, k, v and the input
   norm (fp32: 4 B each; llama-mini 606,720 B). */
static const struct { const char *model; PrecisionKind prec; double measured; } ATTN_BWD[] = {
    {C("llama"), PREC_FP32, 8700}, {C("llama"), PREC_AMP_BF16, 7676},
    {C("qwen3"), PREC_FP32, 8188}, {C("qwen3"), PREC_AMP_BF16, 7420},
    {C("gemma2"), PREC_FP32, 6644}, {C("gemma2"), PREC_AMP_BF16, 5620},
    {C("gemma3"), PREC_FP32, 6644},
    {C("phi3"), PREC_FP32, 8700}, {C("phi3"), PREC_AMP_BF16, 7932},
    {C("olmo2"), PREC_FP32, 7672}, {C("olmo2"), PREC_AMP_BF16, 6648},
    {C("qwen2"), PREC_FP32, 25084}, {C("qwen2"), PREC_AMP_BF16, 19964},   /* 8 heads of 16 */
    {C("starcoder2"), PREC_FP32, 10744},                 /* LayerNorm, GELU MLP, rotary */
    /* GPT-2 (no rotary: the fp32 softmax output is X in fp32; fused c_attn, LayerNorm) */
    {"{\"model_type\":\"gpt2\",\"n_embd\":128,\"n_layer\":4,\"n_head\":4,\"vocab_size\":1024,\"n_positions\":512,"
     "\"resid_pdrop\":0,\"embd_pdrop\":0,\"attn_pdrop\":0}", PREC_FP32, 4600},
    {"{\"model_type\":\"gpt2\",\"n_embd\":128,\"n_layer\":4,\"n_head\":4,\"vocab_size\":1024,\"n_positions\":512,"
     "\"resid_pdrop\":0,\"embd_pdrop\":0,\"attn_pdrop\":0}", PREC_AMP_BF16, 6136},
};

Test(plan_families, eager_attentions_backward_should_hold_the_most_at_long_sequences_as_block_probe_measured) {
    for (size_t i = 0; i < sizeof(ATTN_BWD) / sizeof(ATTN_BWD[0]); i++) {
        ModelSpec m = load(ATTN_BWD[i].model);
        TrainSpec t;
        plan_train_defaults(&t);
        t.autocast_cpu = 1;
        t.loop_trainer = 1;
        t.attn = ATTN_EAGER;
        t.precision = ATTN_BWD[i].prec;
        t.seq = 512;
        double R = plan_precision(t.precision)->param_bytes, h = (double)m.d_model;
        ActInputs two = {2, 512, 0}, four = {4, 512, 0};
        for (int l = 0; l < m.n_layers; l++) {
            if (m.layers[l].kind != LAYER_BLOCK) continue;
            double got = (plan_act_block_backward_bytes(&m, l, &t, &four) - plan_act_block_backward_bytes(&m, l, &t, &two)) /
                         (2.0 * 512) - R * h;
            cr_expect_eq(got, ATTN_BWD[i].measured, "row %zu (%s %s) layer %d: planned %.1f, measured %.1f B/token", i,
                         m.name, plan_precision(t.precision)->name, l, got, ATTN_BWD[i].measured);
        }
        plan_model_free(&m);
    }
    /* llama-mini fp32: the gradients that exist at that moment, all but q, k, v and input_layernorm */
    ModelSpec m = load(C("llama"));
    TrainSpec t;
    plan_train_defaults(&t);
    t.autocast_cpu = 1;
    t.attn = ATTN_EAGER;
    t.precision = PREC_FP32;
    ActInputs four = {4, 512, 0}, short_seq = {4, 128, 0};
    cr_expect_eq(plan_act_block_bwd_done_elems(&m, 1, &t, &four) * 4, 606720);
    ModelSpec o = load(C("olmo2"));                      /* no input norm: post-norms only */
    cr_expect_eq(plan_act_block_bwd_done_elems(&o, 1, &t, &four) * 4, 607232);
    plan_model_free(&o);
    /* at s 128 the MLP's backward holds more: only down_proj's gradient exists */
    cr_expect_eq(plan_act_block_bwd_done_elems(&m, 1, &t, &short_seq), plan_act_block_mlp_out_elems(&m, 1, &t, &short_seq));
    plan_model_free(&m);
}

/* With 8 heads at s 512 the whole step peaks in the last block's attention backward, not at the
   loss's: block_probe.py measured 134,180 B/token at SoftmaxBackward0 for qwen2-mini fp32 eager
   (the planner before put it at the loss's backward, 122,412: 8.8 % low), 147,492 under autocast
   (140,588 before); llama-mini (4 heads)
   still peaks at the loss's, 89,644 */
Test(plan_families, the_step_should_peak_in_eager_attentions_backward_when_it_outgrows_the_loss) {
    ModelSpec q = load(C("qwen2")), l = load(C("llama"));
    MemResult r;
    cr_expect_eq(peak_per_token_at(&q, PREC_FP32, ATTN_EAGER, 0, 512, &r), 134180);
    cr_expect_eq(r.peak_phase, PHASE_BACKWARD);
    cr_expect(strstr(r.peak_where, "block.3") != NULL, "%s", r.peak_where);
    cr_expect_eq(peak_per_token_at(&q, PREC_AMP_BF16, ATTN_EAGER, 0, 512, &r), 147492);   /* 140,588 before */
    cr_expect(strstr(r.peak_where, "block.3") != NULL, "%s", r.peak_where);
    cr_expect_eq(peak_per_token_at(&l, PREC_FP32, ATTN_EAGER, 0, 512, &r), 89644);
    cr_expect(strstr(r.peak_where, "loss") != NULL, "%s", r.peak_where);
    plan_model_free(&q);
    plan_model_free(&l);
}
