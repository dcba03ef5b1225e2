/* test_plan_dim_ft.c — the trainable subset (planner/plan_dim_ft.c): parameter counts against PEFT's
 * get_peft_model (tests/data/peft_counts.json, made by scripts/peft_counts.py), and the memory
 * rules that follow from frozen parameters. */
#include <criterion/criterion.h>
#include <cjson/cJSON.h>
#include <stdio.h>
#include <math.h>
#include <string.h>

#include "plan_activ.h"
#include "plan_load.h"
#include "plan_dim_ft.h"
#include "plan_memory.h"
#include "plan_comm.h"
#include "test_plan.h"

static char msg[512];

static void lora_spec(TrainSpec *t, int rank, const char *targets, const char *freeze) {
    plan_train_defaults(t);
    t->precision = PREC_FP32;
    t->ft.rank = rank;
    t->ft.alpha = 2.0 * rank;
    snprintf(t->ft.targets, sizeof t->ft.targets, "%s", targets);
    if (freeze && freeze[0]) cr_assert_eq(plan_freeze_parse(freeze, &t->ft), 0, "%s", freeze);
}

/* Every case of peft_counts.json: trainable and total exact, as PEFT's
   get_nb_trainable_parameters (print_trainable_parameters) gives them. */
Test(plan_lora, counts_should_match_peft_get_peft_model_exactly, .timeout = 60) {
    FILE *f = fopen("tests/data/peft_counts.json", "rb");
    cr_assert_not_null(f, "run from the repository root");
    static char buf[1 << 16];
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = 0;
    cJSON *root = cJSON_Parse(buf), *e;
    cr_assert_not_null(root);
    int seen = 0;
    cJSON_ArrayForEach(e, cJSON_GetObjectItem(root, "cases")) {
        const char *name = cJSON_GetObjectItem(e, "model")->valuestring;
        ModelSpec m;
        cr_assert_eq(plan_load_model(&m, name, msg, sizeof msg), 0, "%s", msg);
        TrainSpec t;
        lora_spec(&t, cJSON_GetObjectItem(e, "lora")->valueint, cJSON_GetObjectItem(e, "targets")->valuestring,
                  cJSON_GetObjectItem(e, "freeze")->valuestring);
        cr_assert_eq(plan_finetune_apply(&m, &t, msg, sizeof msg), 0, "%s: %s", name, msg);
        double tr = cJSON_GetObjectItem(e, "trainable")->valuedouble, tot = cJSON_GetObjectItem(e, "total")->valuedouble;
        cr_expect_eq((double)plan_model_params(&m), tr, "%s r=%d %s %s: trainable %lld, PEFT %.0f", name, t.ft.rank,
                     t.ft.targets, cJSON_GetObjectItem(e, "freeze")->valuestring, (long long)plan_model_params(&m), tr);
        cr_expect_eq((double)(plan_model_params(&m) + plan_model_frozen(&m)), tot, "%s r=%d %s: total %lld, PEFT %.0f",
                     name, t.ft.rank, t.ft.targets, (long long)(plan_model_params(&m) + plan_model_frozen(&m)), tot);
        cr_expect(plan_model_tensors_known(&m), "%s: trainable tensors add up to the trainable count", name);
        plan_model_free(&m);
        seen++;
    }
    cr_expect_geq(seen, 16);
    cJSON_Delete(root);
}

Test(plan_lora, an_unknown_target_should_be_refused_naming_the_valid_ones) {
    ModelSpec m = zoo("llama2-7b");
    TrainSpec t;
    lora_spec(&t, 16, "q_proj,c_attn", "");
    cr_assert_eq(plan_finetune_apply(&m, &t, msg, sizeof msg), -1);
    cr_expect(strstr(msg, "'c_attn'") && strstr(msg, "q_proj") && strstr(msg, "down_proj"), "%s", msg);
    plan_model_free(&m);
}

Test(plan_lora, freeze_beyond_the_blocks_should_be_refused) {
    ModelSpec m = zoo("gpt2-mini");
    TrainSpec t;
    lora_spec(&t, 0, "", "all-but-last:5");
    cr_assert_eq(plan_finetune_apply(&m, &t, msg, sizeof msg), -1);
    cr_expect(strstr(msg, "all-but-last:4"), "%s", msg);
    plan_model_free(&m);
}

/* DDP: the frozen base costs its storage only; gradients, the bucket copy and AdamW's state are
   the adapters' (16,384 of gpt2-mini's 957,184 at r=8 on c_attn). */
Test(plan_lora, ddp_should_hold_gradients_and_optimizer_state_of_the_adapters_only) {
    ModelSpec m = zoo("gpt2-mini");
    TrainSpec t;
    lora_spec(&t, 8, "", "");
    t.seq = 128;
    cr_assert_eq(plan_finetune_apply(&m, &t, msg, sizeof msg), 0, "%s", msg);
    ClusterSpec c;
    cluster(&c, 2, 2);
    MemResult r;
    cr_assert_eq(plan_memory(&m, &t, &c, STRAT_DDP, &r), 0);
    cr_expect_eq(r.ms_params, 957184.0 * 4);
    cr_expect_eq(r.ms_grads, 16384.0 * 4);
    cr_expect_eq(r.ms_optimizer + r.opt_host_bytes, 16384.0 * 8 + 4 * 8);   /* m, v + 8 step scalars */
    CommPlan cp;
    plan_comm(&m, &t, &c, STRAT_DDP, &cp);
    double ar = 0;
    for (int i = 0; i < cp.n; i++) if (cp.c[i].purpose == PURPOSE_GRAD_BUCKETS) ar += cp.c[i].payload_bytes;
    cr_expect_eq(ar, 16384.0 * 4, "DDP all-reduces the adapters' gradients only: %.0f", ar);
    plan_model_free(&m);
}

/* ZeRO-1/2 partition what the optimizer steps (stage_1_and_2.py: the requires_grad parameters);
   the frozen base stays whole on every rank at the parameters' dtype. */
Test(plan_lora, zero2_should_keep_the_frozen_base_whole_and_partition_the_adapters) {
    ModelSpec m = zoo("llama2-7b");
    TrainSpec t;
    lora_spec(&t, 16, "", "");
    t.precision = PREC_MIXED_BF16;
    t.seq = 512;
    cr_assert_eq(plan_finetune_apply(&m, &t, msg, sizeof msg), 0, "%s", msg);
    ClusterSpec c;
    cluster(&c, 8, 8);
    MemResult r;
    cr_assert_eq(plan_memory(&m, &t, &c, STRAT_ZERO2, &r), 0);
    double frozen = (double)plan_model_frozen(&m) * 2, tr = (double)plan_model_params(&m);
    cr_expect(r.ms_params >= frozen + tr * 2 && r.ms_params < frozen + tr * 2 + 64, "params %.0f", r.ms_params);
    cr_expect(r.ms_optimizer < tr * 12 / 8 * 1.01, "optimizer %.0f: 12 B per adapter element / 8", r.ms_optimizer);
    plan_model_free(&m);
}

/* Activations: autograd saves a matmul's input for its weight's gradient only, so a frozen
   projection without an adapter saves none; the first block's input norm runs before any
   trainable parameter and saves nothing; each adapter saves A's output (r). */
Test(plan_lora, frozen_projections_should_save_less_than_full_fine_tuning) {
    ModelSpec full = zoo("gpt2-mini"), lora = zoo("gpt2-mini");
    TrainSpec t0, t;
    lora_spec(&t0, 0, "", "");
    lora_spec(&t, 8, "", "");
    t0.seq = t.seq = 128;
    cr_assert_eq(plan_finetune_apply(&lora, &t, msg, sizeof msg), 0, "%s", msg);
    ActInputs in = {1, 128, 0};
    double h = 128;
    /* block 1: c_attn keeps its input (A reads it), attention's c_proj, c_fc and the MLP's c_proj
       do not (h + h + 4h per token), + A's output (8 per token) */
    double d = plan_act_layer_bytes(&full, 2, &t0, &in) - plan_act_layer_bytes(&lora, 2, &t, &in);
    cr_expect_eq(d, 128 * 4 * (6 * h - 8), "block.1 saves %.0f B less", d);
    /* block 0 also drops its ln_1 (input + mean + rstd) */
    double d0 = plan_act_layer_bytes(&full, 1, &t0, &in) - plan_act_layer_bytes(&lora, 1, &t, &in);
    cr_expect_eq(d0 - d, 128 * (4 * h + 8), "block.0: %.0f", d0 - d);
    cr_expect_eq(plan_act_layer_bytes(&lora, 0, &t, &in), 0, "the embeddings save nothing before the first adapter");
    plan_model_free(&full);
    plan_model_free(&lora);
}

/* QLoRA's NF4 storage: 4 bits per weight, an 8-bit absmax per 64, an fp32 constant per 256 absmax. */
Test(plan_lora, nf4_should_store_about_half_a_byte_per_frozen_projection_weight) {
    TrainSpec t;
    lora_spec(&t, 16, "", "");
    t.ft.quant = QUANT_NF4;
    cr_expect_float_eq(plan_quant_bytes_per_param(&t), 0.5 + 1.0 / 64 + 4.0 / 16384, 1e-12);
}

/* QLoRA on one GPU: the frozen projections at NF4, the embeddings, norms and head at the
   regime's parameter bytes (amp-bf16: fp32, as prepare_model_for_kbit_training leaves them),
   the adapters at fp32 with their gradients and AdamW state. */
Test(plan_lora, qlora_params_should_be_nf4_projections_plus_the_rest_whole) {
    ModelSpec m = zoo("llama2-7b");
    TrainSpec t;
    lora_spec(&t, 16, "", "");
    t.precision = PREC_AMP_BF16;
    t.ft.quant = QUANT_NF4;
    t.seq = 512;
    cr_assert_eq(plan_finetune_apply(&m, &t, msg, sizeof msg), 0, "%s", msg);
    ClusterSpec c;
    cluster(&c, 1, 1);
    MemResult r;
    cr_assert_eq(plan_memory(&m, &t, &c, STRAT_DDP, &r), 0);
    /* 32 blocks x (4 x 4096^2 + 3 x 4096 x 11008) projection weights */
    double proj = 32.0 * (4.0 * 4096 * 4096 + 3.0 * 4096 * 11008);
    double rest = (double)plan_model_frozen(&m) - proj;
    double want = proj * plan_quant_bytes_per_param(&t) + rest * 4 + (double)plan_model_params(&m) * 4;
    cr_expect(fabs(r.ms_params - want) < 1, "params %.0f, want %.0f", r.ms_params, want);
    cr_expect_eq(rest, 2.0 * 32000 * 4096 + 65.0 * 4096, "embeddings, head and 65 RMSNorm weights stay whole");
    plan_model_free(&m);
}

/* FSDP2 with mixed requires_grad: fully_shard shards and all-gathers every parameter, frozen ones
   too, and reduce-scatters only the gradients that exist: gpt2-mini r=8 on 2 ranks gathers the
   whole model (3,828,736 B in forward, as measured) and reduce-scatters 4 x the adapters of one
   block (65,536 B in all); the root (embeddings, final norm, tied head) has no trainable
   parameter and no reduce-scatter. */
Test(plan_lora, fsdp2_should_gather_frozen_parameters_and_reduce_only_the_adapters) {
    ModelSpec m = zoo("gpt2-mini");
    TrainSpec t;
    lora_spec(&t, 8, "", "");
    t.seq = 128;
    t.attn = ATTN_EAGER;
    t.autocast_cpu = 1;
    cr_assert_eq(plan_finetune_apply(&m, &t, msg, sizeof msg), 0, "%s", msg);
    ClusterSpec c;
    cluster(&c, 2, 2);
    CommPlan cp;
    plan_comm(&m, &t, &c, STRAT_FSDP_FULL, &cp);
    double ag_fwd = 0, rs = 0, rs_n = 0;
    for (int i = 0; i < cp.n; i++) {
        if (cp.c[i].op == COLL_ALL_GATHER && cp.c[i].phase == PHASE_FORWARD) ag_fwd += cp.c[i].payload_bytes;
        if (cp.c[i].op == COLL_REDUCE_SCATTER) { rs += cp.c[i].payload_bytes; rs_n += cp.c[i].count; }
    }
    cr_expect_eq(ag_fwd, 3828736.0, "all-gathers in forward %.0f", ag_fwd);
    cr_expect_eq(rs, 65536.0, "reduce-scatters %.0f", rs);
    cr_expect_eq(rs_n, 4, "one per block, none for the all-frozen root: %.0f", rs_n);
    MemResult r;
    cr_assert_eq(plan_memory(&m, &t, &c, STRAT_FSDP_FULL, &r), 0);
    cr_expect_eq(r.ms_params, 1914368.0, "every parameter's shard: %.0f", r.ms_params);
    cr_expect_eq(r.ms_grads, 32768.0, "the adapters' gradient shards: %.0f", r.ms_grads);
    plan_model_free(&m);
}

/* --freeze all-but-last:1: autograd records nothing before the first trainable parameter, so the
   embeddings and the frozen blocks save no activations; the last block saves as in full
   fine-tuning; the tied head, frozen with the embeddings, saves no input. */
Test(plan_lora, blocks_frozen_before_the_trainable_ones_should_save_nothing) {
    ModelSpec full = zoo("gpt2-mini"), fz = zoo("gpt2-mini");
    TrainSpec t0, t;
    lora_spec(&t0, 0, "", "");
    lora_spec(&t, 0, "", "all-but-last:1");
    cr_assert_eq(plan_finetune_apply(&fz, &t, msg, sizeof msg), 0, "%s", msg);
    ActInputs in = {2, 128, 0};
    for (int i = 0; i < 4; i++)   /* embeddings, blocks 0..2 */
        cr_expect_eq(plan_act_layer_bytes(&fz, i, &t, &in), 0, "layer %d", i);
    cr_expect_eq(plan_act_layer_bytes(&fz, 4, &t, &in), plan_act_layer_bytes(&full, 4, &t0, &in), "the last block");
    int head = fz.n_layers - 1;
    cr_expect_eq(plan_act_layer_bytes(&full, head, &t0, &in) - plan_act_layer_bytes(&fz, head, &t, &in), 2 * 128 * 4 * 128.0,
                 "the frozen tied head saves no input");
    cr_expect_eq((double)plan_model_params(&fz), 198528.0, "PEFT-side count (peft_counts.json)");
    plan_model_free(&full);
    plan_model_free(&fz);
}
