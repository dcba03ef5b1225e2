/* test_plan_time.c — the per-operation time model (docs/formulas.md "Time"): tile and wave
 * quantization of a GEMM, recomputation, the attention kernels, NCCL's ring and tree, the fitted
 * shares' override (--time-shares) and what backs a plan's times (the published sources). */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "plan_comm.h"
#include "plan_cost.h"
#include "plan_time.h"
#include "test_plan.h"

#define REL(a, b) (fabs((a) - (b)) / fabs(b))

static ClusterSpec a100(int64_t gpus, int64_t gpn) {
    ClusterSpec c;
    cluster(&c, gpus, gpn);
    c.gpu = *plan_gpu_by_name("a100-80gb");
    return c;
}

/* 108 tiles of 256 x 128 fill the A100's 108 SMs once; one tile more needs a second wave (or
   128 x 128 tiles: 218 in 3 waves), so the GEMM takes 1.5x as long for 1 % more work (at a GEMM
   share of 0.9, --time-shares', where the GEMM stays compute-bound whatever the shipped share) */
Test(plan_time, a_gemm_one_tile_over_a_full_wave_should_pay_the_extra_wave) {
    ClusterSpec c = a100(1, 1);
    c.shares.gemm = 0.9;
    double peak = 312e12, K = 16384;
    double full = plan_gemm_seconds(&c, peak, 256 * 108, 128, K, 1, 2);
    double over = plan_gemm_seconds(&c, peak, 256 * 109, 128, K, 1, 2);
    cr_expect(REL(full, 2 * 256 * 108 * 128 * K / (peak * c.gpu.eff->gemm_eff * 0.9)) < 1e-12);
    cr_expect(REL(over / full, (109.0 / 108) / (218.0 / 324)) < 1e-12, "%.6f", over / full);
}

/* a GEMM with a short inner dimension is bound by its operands' traffic at HBM bandwidth (the
   roofline): 8192 x 8192 outputs of 8 products each */
Test(plan_time, a_gemm_with_a_short_k_should_be_bound_by_its_traffic) {
    ClusterSpec c = a100(1, 1);
    double t = plan_gemm_seconds(&c, 312e12, 8192, 8192, 8, 1, 2);
    cr_expect(REL(t, (8192.0 * 8 + 8.0 * 8192 + 8192.0 * 8192) * 2 / (c.gpu.mem_bw * 1e9)) < 1e-12);
}

/* a llama2-7b block's forward and backward seconds on 8 A100s at seq 4096, micro-batch 2 */
static void llama_block(CkptKind ckpt, AttnKind attn, double *f, double *b) {
    ModelSpec m = zoo("llama2-7b");
    ClusterSpec c = a100(8, 8);
    TrainSpec t;
    plan_train_defaults(&t);
    t.seq = 4096;
    t.micro_batch = 2;
    t.act_ckpt = ckpt;
    t.attn = attn;
    plan_layer_seconds(&m, 3, &t, &c, f, b);
    plan_model_free(&m);
}

Test(plan_time, a_checkpointed_block_should_run_its_forward_again_in_backward) {
    double f0, b0, f1, b1;
    llama_block(CKPT_NONE, ATTN_SDPA, &f0, &b0);
    llama_block(CKPT_FULL, ATTN_SDPA, &f1, &b1);
    cr_expect(REL(f1, f0) < 1e-12);
    cr_expect(REL(b1, b0 + f0) < 1e-12);
}

/* flash attention skips the masked half and runs at its measured rate; eager attention computes
   every score as batched GEMMs and moves the scores through softmax at HBM bandwidth */
Test(plan_time, sdpa_should_be_faster_than_eager_attention_at_long_sequences) {
    double fs, bs, fe, be;
    llama_block(CKPT_NONE, ATTN_SDPA, &fs, &bs);
    llama_block(CKPT_NONE, ATTN_EAGER, &fe, &be);
    cr_expect_lt(fs, fe);
    cr_expect_lt(bs, be);
}

/* A Llama-3.1-8B block (32 heads of 128) at micro-batch 1, seq 16384 on one GPU preset, its
   flash kernel's training share set to 1 (--time-shares attn=1): forward and backward seconds. */
static void flash_block(const char *gpu, AttnKernel k, double *f, double *b) {
    ModelSpec m = zoo("llama3.1-8b");
    ClusterSpec c;
    cluster(&c, 8, 8);
    c.gpu = *plan_gpu_by_name(gpu);
    c.shares.attn = 1;
    TrainSpec t;
    plan_train_defaults(&t);
    t.precision = PREC_MIXED_BF16;
    t.seq = 16384;
    t.attn_kernel = k;
    plan_layer_seconds(&m, 3, &t, &c, f, b);
    plan_model_free(&m);
}

/* The kernel changes only the attention core: causal forward 4·b·h·s·(s/2)·d FLOPs, backward 2.5x,
   at the kernel's published TFLOP/s at 16k (FlashAttention-3 paper, H100 SXM5, head dim 128):
   FlashAttention-2 335 forward / 322 backward, FlashAttention-3 616 / 561, of the 989 the curves
   are fractions of, times the preset's 989.5 peak. */
Test(plan_time, flashattention3_should_price_the_attention_core_at_its_published_hopper_curve) {
    double f2, b2, f3, b3;
    flash_block("h100-80gb", ATTN_KERNEL_FA2, &f2, &b2);
    flash_block("h100-80gb", ATTN_KERNEL_FA3, &f3, &b3);
    double s = 16384, fl = 4.0 * 32 * s * (s / 2) * 128, peak = 989.5e12;
    double fwd_saved = fl / peak * (989.0 / 335 - 989.0 / 616);
    double bwd_saved = 2.5 * fl / peak * (989.0 / 322 - 989.0 / 561);
    cr_expect(REL(f2 - f3, fwd_saved) < 1e-9, "%.6f vs %.6f", f2 - f3, fwd_saved);
    cr_expect(REL(b2 - b3, bwd_saved) < 1e-9, "%.6f vs %.6f", b2 - b3, bwd_saved);
}

/* FlashAttention-4 on B200 is an estimate: FlashAttention-3's fractions x the two papers' headline
   utilizations, (1613 / 2250) / (740 / 989) = 0.958; against the Hopper fractions FlashAttention-2
   is assumed at there (335 forward at 16k) */
Test(plan_time, flashattention4_should_price_b200_attention_at_fa3s_fractions_scaled_by_the_headlines) {
    double f2, b2, f4, b4;
    flash_block("b200", ATTN_KERNEL_FA2, &f2, &b2);
    flash_block("b200", ATTN_KERNEL_FA4, &f4, &b4);
    double s = 16384, fl = 4.0 * 32 * s * (s / 2) * 128, peak = 2250e12, k = (1613.0 / 2250) / (740.0 / 989);
    double fwd_saved = fl / peak * (989.0 / 335 - 989.0 / (616 * k));
    double bwd_saved = 2.5 * fl / peak * (989.0 / 322 - 989.0 / (561 * k));
    cr_expect(REL(f2 - f4, fwd_saved) < 1e-9, "%.6f vs %.6f", f2 - f4, fwd_saved);
    cr_expect(REL(b2 - b4, bwd_saved) < 1e-9, "%.6f vs %.6f", b2 - b4, bwd_saved);
    const double *fw, *bw;
    cr_expect_eq(plan_attn_curve(plan_gpu_by_name("b200")->eff, ATTN_KERNEL_FA4, &fw, &bw), 0, "an estimate");
    cr_expect_eq(plan_attn_curve(plan_gpu_by_name("h200")->eff, ATTN_KERNEL_FA3, &fw, &bw), 1, "measured");
    cr_expect_eq(plan_attn_curve(plan_gpu_by_name("a100-80gb")->eff, ATTN_KERNEL_FA3, &fw, &bw), -1, "Hopper only");
}

/* --mfu: the flat model, FLOPs at the fraction of the peak + bytes at the bandwidth */
Test(plan_time, mfu_should_restore_the_flat_model) {
    ModelSpec m = zoo("gpt2");
    ClusterSpec c = a100(8, 8);
    c.mfu = 0.4;
    TrainSpec t;
    plan_train_defaults(&t);
    double f, b, fb, bb;
    plan_layer_seconds(&m, 2, &t, &c, &f, &b);
    plan_layer_mem_bytes(&m, 2, &t, &fb, &bb);
    double fl = plan_layer_fwd_flops(&m, 2, &t);
    cr_expect(REL(f, fl / (312e12 * 0.4) + fb / (c.gpu.mem_bw * 1e9)) < 1e-12);
    cr_expect(REL(b, 2 * fl / (312e12 * 0.4) + bb / (c.gpu.mem_bw * 1e9)) < 1e-12);
    plan_model_free(&m);
}

/* NCCL's model (tuning.cc): a 1 GiB all-reduce on one 8-GPU NVLink node runs the ring with the
   Simple protocol: base 8.4 us + 14 hops x 3.4 us + 2(n-1)/n x S at 235 GB/s */
Test(plan_time, a_large_all_reduce_in_a_node_should_take_nccls_ring_simple_time) {
    ClusterSpec c = a100(8, 8);
    double S = 1024.0 * 1024 * 1024;
    double t = plan_coll_seconds(&c, COLL_ALL_REDUCE, S, 8, 0);
    cr_expect(REL(t, (8.4 + 14 * 3.4) * 1e-6 + S * 2 * 7 / 8 / 235e9) < 1e-9, "%.9f", t);
}

/* across 64 nodes a tiny all-reduce takes the tree (log2 of the nodes in network hops, not
   2(nodes-1)); a large one takes the ring, whose bus bandwidth is the node's NICs */
Test(plan_time, nccl_should_take_the_tree_for_tiny_and_the_ring_for_large_all_reduces_across_nodes) {
    ClusterSpec c = a100(512, 8);
    double tiny = plan_coll_seconds(&c, COLL_ALL_REDUCE, 8, 512, 1);
    double ring_ll = (3.6 + (2 * 511 - 2 * 63) * 0.47 * 1.8 + 2 * 63 * 2.7) * 1e-6;
    cr_expect_lt(tiny, ring_ll / 2);
    double S = 4.0 * 1024 * 1024 * 1024;
    double big = plan_coll_seconds(&c, COLL_ALL_GATHER, S, 512, 1);
    double bus = fmin(300, 8 * 25) * 235.0 / 300 * 1e9;
    cr_expect(REL(big, (8.4 + (511 - 63) * 3.4 + 63 * 9.6) * 1e-6 + S * 511 / 512 / bus) < 1e-9);
}

Test(plan_time, fsdp_on_an_a100_should_be_backed_by_the_published_runs_and_ddp_an_estimate) {
    ModelSpec m = zoo("gpt2-xl");
    ClusterSpec c = a100(8, 8);
    TrainSpec t;
    plan_train_defaults(&t);
    t.precision = PREC_MIXED_BF16;
    cr_expect(plan_time_basis(&m, &t, &c, STRAT_FSDP_FULL).published);
    cr_expect(!plan_time_basis(&m, &t, &c, STRAT_DDP).published);
    c.mfu = 0.4;
    cr_expect(!plan_time_basis(&m, &t, &c, STRAT_FSDP_FULL).published, "the flat model is an estimate");
    c.mfu = 0;
    c.gpu = *plan_gpu_by_name("t4");
    t.precision = PREC_AMP_FP16;
    cr_expect(!plan_time_basis(&m, &t, &c, STRAT_FSDP_FULL).published);
    plan_model_free(&m);
}

/* --time-shares: any subset in any order, the rest left to the shipped shares (0); a key or value
   out of its range is refused with the valid ones named */
Test(plan_time, time_shares_should_parse_any_subset_and_refuse_bad_keys_or_values) {
    TimeShares s;
    char err[256];
    cr_assert_eq(plan_time_shares_parse("passes=2.5,gemm=0.8", &s, err, sizeof err), 0, "%s", err);
    cr_expect_float_eq(s.gemm, 0.8, 1e-12);
    cr_expect_float_eq(s.passes, 2.5, 1e-12);
    cr_expect_eq(s.attn, 0);
    cr_expect_eq(plan_time_shares_parse("gemm=2", &s, err, sizeof err), -1);
    cr_expect(strstr(err, "'gemm=2'") && strstr(err, PLAN_TIME_SHARES_HELP), "%s", err);
    cr_expect_eq(plan_time_shares_parse("flops=1", &s, err, sizeof err), -1);
    cr_expect_eq(plan_time_shares_parse("gemm", &s, err, sizeof err), -1);
}

/* the override reaches the time model: a larger GEMM share shortens the block (GEMM-bound at this
   size), more elementwise passes lengthen it, and a share equal to the shipped one changes
   nothing */
Test(plan_time, the_fit_override_should_move_the_block_time_the_way_each_share_says) {
    ModelSpec m = zoo("llama2-7b");
    ClusterSpec c = a100(8, 8);
    TrainSpec t;
    plan_train_defaults(&t);
    t.seq = 4096;
    double f0, b0, f, b;
    plan_layer_seconds(&m, 3, &t, &c, &f0, &b0);
    c.shares.gemm = c.gpu.eff->gemm_train;
    plan_layer_seconds(&m, 3, &t, &c, &f, &b);
    cr_expect(REL(f, f0) < 1e-12 && REL(b, b0) < 1e-12);
    c.shares.gemm = c.gpu.eff->gemm_train * 1.1;
    plan_layer_seconds(&m, 3, &t, &c, &f, &b);
    cr_expect_lt(f, f0);
    c.shares.gemm = 0;
    c.shares.passes = 8;
    plan_layer_seconds(&m, 3, &t, &c, &f, &b);
    cr_expect_gt(f, f0);
    cr_expect_gt(b, b0);
    plan_model_free(&m);
}

/* the basis names the sources whose runs cover the setup, with their held-out error (one of
   llm-foundry's runs: MPT-125M-like on 8 A100-40GB, FSDP FULL_SHARD, bf16, sdpa, seq 2048), and
   an estimate says the first way the setup differs from the closest source's runs */
Test(plan_time, a_setup_a_source_ran_should_be_backed_by_it_with_its_held_out_error) {
    ModelSpec m = zoo("gpt2");
    ClusterSpec c;
    cluster(&c, 8, 8);
    c.gpu = *plan_gpu_by_name("a100-40gb");
    TrainSpec t;
    plan_train_defaults(&t);
    t.precision = PREC_MIXED_BF16;
    t.seq = 2048;
    TimeBasis b = plan_time_basis(&m, &t, &c, STRAT_FSDP_FULL);
    cr_assert(b.published, "%s", b.why);
    int found = 0;
    for (int i = 0; i < b.n; i++) found |= strcmp(b.src[i]->name, "llm-foundry") == 0;
    cr_expect(found, "%s", b.why);
    char text[320], want[64];
    const PlanTimeSource *s = NULL;
    for (int i = 0; i < plan_time_source_count(); i++)
        if (strcmp(plan_time_source(i)->name, "llm-foundry") == 0) s = plan_time_source(i);
    cr_assert_not_null(s);
    snprintf(want, sizeof want, "llm-foundry %.1f %% (%d runs)", s->held_out_pct, s->rows);
    plan_time_basis_text(&b, text, sizeof text);
    cr_expect(strstr(text, "backed by published runs of this setup") == text && strstr(text, want), "%s", text);
    c.gpu = *plan_gpu_by_name("t4");
    t.precision = PREC_AMP_FP16;
    b = plan_time_basis(&m, &t, &c, STRAT_FSDP_FULL);
    cr_expect(!b.published);
    cr_expect_str_eq(plan_time_basis_text(&b, text, sizeof text), "an estimate (no published run on this GPU)");
    plan_model_free(&m);
}
