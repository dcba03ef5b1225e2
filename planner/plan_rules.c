/* plan_rules.c — the rule table (name, mechanism, source) and the compute rule. Every event of a
 * step account names its rule, so any byte, collective or second of a plan can be traced to the
 * mechanism it models and where that was read or measured (docs/architecture.md). */
#include <math.h>

#include "plan_activ.h"
#include "plan_cost.h"
#include "plan_step_internal.h"

#define F "docs/formulas.md "
static const RuleInfo RULE_INFO[RULE_COUNT] = {
    [RULE_PARAMS] = {"params", "the parameters each rank keeps (full, ZeRO/FSDP shard, DeepSpeed's flat group)",
                     F "\"Strategies\"; stage_1_and_2.py flatten_dense_tensors_aligned"},
    [RULE_OPTIMIZER] = {"optimizer_state", "optimizer states (and fp32 master weights) of the local elements",
                        F "\"Bytes per element\"; torch/optim/adamw.py"},
    [RULE_DS_FP32_COPY] = {"ds_fp32_partition", "DeepSpeed's fp32 copy of the local partition of fp32 parameters",
                           F "\"Checked against PyTorch and DeepSpeed\"; stage_1_and_2.py single_partition_of_fp32_groups"},
    [RULE_GRADS_KEPT] = {"grads_kept", "gradients allocated across steps (DeepSpeed, engine, set_to_none=False, bucket views)",
                         F "\"Gradients kept across steps\"; torch/optim/optimizer.py zero_grad"},
    [RULE_DS_NORM_SCALAR] = {"ds_norm_scalar", "DeepSpeed's _global_grad_norm kept between steps",
                             F "\"DeepSpeed ZeRO-1/2 step\"; engine.py"},
    [RULE_ACCUM_GRADS] = {"accumulated_grads", "gradients the earlier micro-steps of an accumulation left",
                          F "\"Gradient accumulation\"; distributed.py no_sync, _fsdp_collectives.py foreach_reduce"},
    [RULE_AUTOGRAD_GRADS] = {"autograd_grad", "each layer's .grad made by AccumulateGrad in backward",
                             F "\"The peak over a step\"; torch/csrc/autograd/functions/accumulate_grad.h"},
    [RULE_STEP_GRADS] = {"step_grads", "the gradients the optimizer steps, at their steady size",
                         F "\"Strategies\""},
    [RULE_INPLACE_ACCUM] = {"accumulate_in_place", "a layer's new gradient tensor until AccumulateGrad adds it in place",
                            F "\"Gradient accumulation\"; accumulate_grad.h"},
    [RULE_TIED_HEAD_GRAD] = {"tied_head_grad", "a tied head's V x e gradient waiting for the embedding's",
                             F "\"Tied output head\"; torch/csrc/autograd/input_buffer.h"},
    [RULE_TIED_SUM] = {"tied_sum", "the sum of a tied weight's two gradient halves, made out of place",
                       F "\"Tied output head\"; input_buffer.cpp accumulate"},
    [RULE_MLP_PENDING_GRADS] = {"mlp_pending_grads", "a block's gradients not yet made while its MLP's backward runs",
                                F "\"A block's backward\" (bench/torch/block_probe.py)"},
    [RULE_ENGINE_GRAD_FLIGHT] = {"engine_grad_in_flight", "memplan's engine ZeRO-2: full gradients until scattered into the bucket",
                                 "exec/exec_strategy.c; docs/validation.md"},
    [RULE_DS12_PARTITION] = {"ds_grads_in_partition", "DeepSpeed ZeRO-1/2 grads_in_partition from the first reduction",
                             F "\"DeepSpeed ZeRO-2 gradients\"; stage_1_and_2.py copy_grads_in_partition"},
    [RULE_DS12_IN_FLIGHT] = {"ds_grad_in_flight", "ZeRO-2: a gradient until its hook copies it into the bucket",
                             F "\"DeepSpeed ZeRO-2 gradients\"; stage_1_and_2.py reduce_independent_p_g_buckets_and_remove_grads"},
    [RULE_DS12_NOT_MOVED] = {"ds_grads_not_moved", "ZeRO-1: .grad tensors not yet moved into the bucket at a reduction",
                             F "\"DeepSpeed ZeRO-1 gradients are ordinary .grad tensors\"; stage_1_and_2.py reduce_gradients"},
    [RULE_DS_BUCKET] = {"ds_reduce_bucket", "DeepSpeed's reduce bucket of reduce_bucket_size elements, and its reductions",
                        F "\"DeepSpeed's reduce bucket\", \"DeepSpeed collectives\"; stage_1_and_2.py setup_buckets"},
    [RULE_DS_FLATTEN] = {"ds_flattened_bucket", "the flattened copy of a bucket a DeepSpeed reduction makes",
                         F "\"DeepSpeed ZeRO-1/2 step\", \"DeepSpeed ZeRO-3\"; allreduce_bucket, reduce_scatter_coalesced"},
    [RULE_DS_STEP_GATHER] = {"ds_step_gather", "the step's all-gather of updated partitions (ZeRO-3: persistent tensors)",
                             F "\"DeepSpeed collectives\""},
    [RULE_DS_NORM_COPY] = {"ds_norm_fp64_copy", "the fp64 copy DeepSpeed's gradient norm reads",
                           F "\"DeepSpeed ZeRO-1/2 step\"; zero/utils.py get_norm_dtype"},
    [RULE_DS_FP32_STEP_GRAD] = {"ds_fp32_step_grad", "the fp32 gradient partition the mixed step converts",
                                F "\"DeepSpeed ZeRO-1/2 step\"; stage_1_and_2.py step"},
    [RULE_DS_NORM_ALLREDUCE] = {"ds_norm_allreduce", "the gradient norm and overflow flag all-reduced at the step",
                                F "\"DeepSpeed collectives\"; engine.py check_grad_overflow"},
    [RULE_DS3_GATHER] = {"ds3_fetch", "ZeRO-3's coalesced prefetched gathers and the parameters they hold",
                         F "\"DeepSpeed ZeRO-3\"; partitioned_param_coordinator.py"},
    [RULE_DS3_REDUCE_SCATTER] = {"ds3_reduce_scatter", "ZeRO-3's bucketed gradient reduce-scatters",
                                 F "\"DeepSpeed collectives\"; stage3.py __avg_scatter_grads"},
    [RULE_DDP_BUCKETS] = {"ddp_bucket", "DDP's flat bucket copy of the gradients and its all-reduces",
                          F "\"Strategies\", \"Communication per optimizer step\"; reducer.cpp"},
    [RULE_DDP_BROADCAST] = {"ddp_broadcast_buffers", "DDP's broadcast of module buffers before forward",
                            F "\"DDP buffer broadcast\"; distributed.py _sync_buffers"},
    [RULE_UNIT_GATHER] = {"unit_buffers", "FSDP1 / engine ZeRO-3 gathered units and reduce-scatter buffers",
                          F "\"Strategies\"; torch/distributed/fsdp/_flat_param.py"},
    [RULE_FSDP2_BUFFERS] = {"fsdp2_buffers", "FSDP2's unsharded parameters, gather outputs, prefetch, reduce-scatter input",
                            F "\"FSDP2 buffers\"; _fsdp_param_group.py, _fsdp_collectives.py"},
    [RULE_FSDP2_UNSHARDED_GRADS] = {"fsdp2_unsharded_grads", "a unit's unsharded gradients until its reduce-scatter",
                                    F "\"FSDP2 buffers\"; _fsdp_param_group.py post_backward"},
    [RULE_FSDP2_SHARDED_GRADS] = {"fsdp2_sharded_grads", "the reduce-scatter's output, the sharded gradient",
                                  F "\"FSDP2 buffers\"; _fsdp_collectives.py foreach_reduce"},
    [RULE_UNIT_COLLECTIVES] = {"unit_collectives", "per-unit all-gathers and reduce-scatters (HSDP: + replica all-reduce)",
                               F "\"Communication per optimizer step\""},
    [RULE_ENGINE_BUCKETS] = {"engine_zero_buckets", "memplan's engine ZeRO-1/2 bucket reduce-scatters and shard gathers",
                             "exec/exec_strategy.c; docs/validation.md"},
    [RULE_SAVED_ACTS] = {"saved_activations", "tensors a layer saves in forward for its backward",
                         F "\"Activations\""},
    [RULE_LOOP_LOGITS] = {"loop_outputs", "the training loop's outputs (logits) held between forwards",
                          F "\"Activations\" (the common loop)"},
    [RULE_AUTOCAST_CACHE] = {"autocast_cast_cache", "autocast's low-precision weight copies",
                             F "\"Autocast's cast cache\"; aten/src/ATen/autocast_mode.cpp cached_cast"},
    [RULE_RECAST] = {"recomputed_casts", "a recomputed block's weight copies while it runs",
                     F "\"Autocast's cast cache\"; torch/utils/checkpoint.py"},
    [RULE_MLP_BACKWARD] = {"mlp_backward", "a block's MLP backward working set",
                           F "\"A block's backward\""},
    [RULE_BWD_WORKSPACE] = {"backward_workspace", "what a layer's backward leaves (its input's gradient; engine scratch)",
                            F "\"Transients\""},
    [RULE_ATTN_MASK] = {"attention_mask", "the attention mask a decoder's forward makes for its blocks",
                        F "\"Activations\"; transformers masking_utils.py create_causal_mask"},
    [RULE_FWD_TEMPS] = {"forward_temporaries", "a layer's op outputs freed within its forward (the scores before the softmax, gelu_new's terms)",
                        F "\"Transients\"; transformers eager_attention_forward, activations.py NewGELUActivation"},
    [RULE_LOSS_FORWARD] = {"loss_forward", "the loss's forward: logits and their fp32 upcast",
                           F "\"Transients\"; transformers loss_utils.py ForCausalLMLoss"},
    [RULE_LOSS_BACKWARD] = {"loss_backward", "the loss's backward gradients (logits-sized, fp32)",
                            F "\"Transients\""},
    [RULE_CPU_CONV_BWD] = {"cpu_conv_backward", "oneDNN's weight-gradient buffer of a convolution (CPU ranks)",
                           F "\"CPU convolution backward\"; aten/src/ATen/native/Convolution.cpp"},
    [RULE_FOREACH_TEMP] = {"foreach_temp", "torch foreach Adam's state-sized temporary at the step",
                           F "\"Transients\"; torch/optim/adam.py _multi_tensor_adam"},
    [RULE_QUANT_DEQUANT] = {"quant_dequant", "a quantized frozen projection dequantized to the compute dtype while it runs",
                            F "\"LoRA and frozen parameters\"; bitsandbytes nn/modules.py Linear4bit, autograd/_functions.py MatMul4Bit"},
    [RULE_SYNCBN] = {"syncbn", "SyncBatchNorm's statistics all-gathers and gradient all-reduces",
                     "docs/syncbn.md; torch/nn/modules/_functions.py"},
    [RULE_HOST_COPIES] = {"offload_host_copies", "CPU offload's host<->device copies",
                          F "\"Offload and host memory\""},
    [RULE_TP_COLLECTIVES] = {"tp_collectives", "tensor parallel's per-block all-reduces (SP: all-gather + reduce-scatter pairs) on the tp group",
                             F "\"Tensor and sequence parallel\"; torch/distributed/tensor/parallel/style.py"},
    [RULE_TP_LOGITS_GATHER] = {"tp_logits_gather", "the vocab-sharded head's local logits and the all-gather's buffer beside the gathered logits",
                                F "\"Tensor and sequence parallel\"; torch/distributed/tensor/_redistribute.py (Shard(-1) -> Replicate)"},
    [RULE_TP_LOSS_PARALLEL] = {"tp_loss_parallel", "loss parallel's extra fp32 vocab shard (b x s x V/tp) at the loss's forward (shifted logits) and backward (the handler's zeroed gradient)",
                               F "\"Loss parallel\"; torch/distributed/tensor/parallel/loss.py _log_softmax, _nll_loss_and_log_softmax_backward"},
    [RULE_TP_EMBED_GRAD] = {"tp_embedding_grad", "a vocab-sharded embedding's gradient comes back replicated (V x h)",
                            F "\"Tensor and sequence parallel\" (measured, torch 2.15)"},
    [RULE_PP_IN_FLIGHT] = {"pp_in_flight", "a pipeline rank's saved activations of the other micro-batches in flight (1F1B: min(M, pp - rank) in all; GPipe: M; interleaved: each stage's warmup forwards)",
                           F "\"Pipeline parallel\" (closed form; checked on CPU ranks, gpt2-mini in 2 stages); torch/distributed/pipelining/schedules.py Schedule1F1B._step_microbatches warmup_chunks; Narayanan et al. 2021 sec. 2.2"},
    [RULE_PP_SEND_RECV] = {"pp_send_recv", "a pipeline stage's point-to-point sends and receives of (b, s, h) activations and their gradients per micro-batch and boundary",
                           F "\"Pipeline parallel\" (closed form, not measured); torch/distributed/pipelining/stage.py get_fwd_send_ops, get_bwd_send_ops"},
    [RULE_PP_OUTPUTS] = {"pp_outputs", "the last pipeline stage's outputs (logits) of the micro-batches whose backward is done, kept for step()'s return, and their merge (torch's default return_outputs=True; --pp-return-outputs off: none)",
                         F "\"Pipeline parallel\" (measured, CPU ranks); torch/distributed/pipelining/stage.py forward_one_chunk output_chunks, schedules.py step _merge_outputs"},
    [RULE_EP_ALL_TO_ALL] = {"ep_all_to_all", "expert parallel's all-to-alls per MoE block: the tokens per expert, the routed rows to their experts' ranks and the outputs back (forward), their gradients back (backward)",
                            F "\"Expert parallel\"; transformers/distributed/expert_parallel.py AllToAllEP, torchtitan distributed/expert_parallel.py ExpertParallel"},
    [RULE_CP_RING] = {"cp_ring_attention", "context parallel's ring attention per attention layer: the keys and values all-gathered (forward and backward), their fp32 gradients passed round the ring, the gathered and merged buffers, the attention over every key (an estimate: CUDA-only kernels)",
                      F "\"Context parallel\"; torch/distributed/tensor/experimental/_context_parallel/_attention.py _templated_ring_attention(_backward)"},
    [RULE_LAYER_COMPUTE] = {"layer_compute", "a layer's GEMMs, attention and elementwise passes at the GPU's measured rates (--mfu: FLOPs at a flat fraction)",
                            F "\"Time\""},
    [RULE_ENGINE_PASSES] = {"engine_buffer_passes", "memplan's engine copying and zeroing its flat buffers",
                            F "\"Time\" (the engine's buffer passes)"},
    [RULE_OPTIMIZER_STEP] = {"optimizer_step", "the optimizer step, memory-bound (offload: on the CPU)",
                             F "\"Time\", \"Offload and host memory\""},
};
#undef F

const RuleInfo *plan_rule_info(RuleId r) { return &RULE_INFO[r]; }

static int is_transformer(const ModelSpec *m) {
    return m->arch == ARCH_DECODER || m->arch == ARCH_ENCODER || m->arch == ARCH_ENC_DEC;
}

/* memplan's engine moves whole gradient and parameter buffers between its steps' kernels
   (exec/exec_strategy.c), fp32, each pass costing its bytes read + written at the elementwise
   rate; n ranks, P_i the layer's parameters, S the padded shard (docs/formulas.md, "The
   engine's buffer passes"): the gradients zeroed before the step (4 Psi; sharded: 4S); DDP
   copies each gradient into its bucket (8 P_i) and the averaged buckets back (8 Psi); ZeRO-1/2
   copy into the bucket's rank blocks (8 P_i), copy (ZeRO-1, 8 P_i/n) or add (ZeRO-2, 12 P_i/n)
   the reduced block, ZeRO-2 zeroes each new gradient (4 P_i), and the step copies the updated
   shard in (8S) and the gathered parameters out (8 Psi); ZeRO-3 zeroes each gradient region
   (4 P_i) and adds the reduced shard (12S). ZeRO-2/3 reduce every micro-step, DDP and ZeRO-1 in
   the last one only. */
static void engine_passes(const StepCtx *x, Step *st, double mem_bw) {
    double psi = x->z.psi, S = x->z.psi_shard, n = (double)x->n;
    StrategyKind k = x->sk;
    step_work(st, RULE_ENGINE_PASSES, pt(x, PT_START, 0), WORK_FIXED, MICRO_ONCE,
              4 * (x->N > 1 && (x->s->shard & SHARD_GRAD) ? S : psi) / mem_bw, 0);
    if (x->N <= 1 || k > STRAT_ZERO3) return;
    StepMicro micro = k == STRAT_ZERO2 || k == STRAT_ZERO3 ? MICRO_EVERY : MICRO_LAST;
    for (int i = 0; i < x->L; i++) {
        double pi = (double)x->m->layers[i].params;
        double bytes = k == STRAT_DDP ? 8 * pi
                     : k == STRAT_ZERO1 ? 8 * pi + 8 * pi / n
                     : k == STRAT_ZERO2 ? 4 * pi + 8 * pi + 12 * pi / n
                     : 4 * pi;
        step_work(st, RULE_ENGINE_PASSES, pt(x, PT_BWD, i), WORK_FIXED, micro, bytes / mem_bw, 0);
    }
    double end = k == STRAT_DDP ? 8 * psi : k == STRAT_ZERO3 ? 12 * S : 0;
    step_work(st, RULE_ENGINE_PASSES, pt(x, PT_REDUCE1, 0), WORK_FIXED, micro, end / mem_bw, 0);
    if (k == STRAT_ZERO1 || k == STRAT_ZERO2)
        step_work(st, RULE_ENGINE_PASSES, pt(x, PT_STEP, 0), WORK_FIXED, MICRO_ONCE, (8 * S + 8 * psi) / mem_bw, 0);
}

/* Each layer's forward and backward over the step's micro-batch, as this rank runs it (its tp
   share, its pp stage: x->m; plan_cost.c plan_layer_seconds: the flat model, or per operation,
   whose GEMM efficiency depends on the batch; backward with recomputation); the optimizer step,
   memory-bound over the local elements, or on the CPU under offload. docs/formulas.md "Time". */
void rule_compute(const StepCtx *x, Step *st) {
    const ModelSpec *m = x->m;
    const ClusterSpec *c = x->c;
    const PrecisionSpec *p = x->p;
    double mem_bw = c->gpu.mem_bw > 0 ? c->gpu.mem_bw * 1e9 : INFINITY;
    double fl = 0, fs = 0, bs = 0;
    int priced = -1, priced_rc = 0;   /* the last layer priced: a repeated block takes its figures */
    for (int i = 0; i < x->L; i++) {
        /* what plan_layer_seconds reads: the layer, the setup, and whether the layer is recomputed */
        int rc = plan_act_checkpointed(m, x->t, i) | plan_act_core_recomputed(m, x->t, i) << 1;
        if (priced < 0 || rc != priced_rc || !plan_layer_same(&m->layers[i], &m->layers[priced])) {
            fl = plan_layer_fwd_flops(m, i, x->t);
            plan_layer_seconds(m, i, x->t, c, &fs, &bs);
            priced = i;
            priced_rc = rc;
        }
        /* the FLOPs of the step count forward + backward (3x forward) once, on the forward */
        step_work(st, RULE_LAYER_COMPUTE, pt(x, PT_FWD, i), WORK_BATCH, MICRO_EVERY, fs, 3 * fl);
        step_work(st, RULE_LAYER_COMPUTE, pt(x, PT_BWD, i), WORK_BATCH, MICRO_EVERY, bs, 0);
    }
    double o_local = (x->s->shard & SHARD_OPT) ? x->z.psi_shard : x->z.psi;
    double bytes = o_local * (2.0 * (p->param_bytes + p->master_bytes) + p->grad_bytes +
                              2.0 * x->o->states * p->state_bytes);
    double opt_s = bytes / ((c->opt_bw > 0 ? c->opt_bw : c->gpu.mem_bw) * 1e9);
    if (x->host.cpu_step_s > 0) opt_s = x->host.cpu_step_s;   /* the updated parameters' copy: rule_host_copies */
    step_work(st, RULE_OPTIMIZER_STEP, pt(x, PT_STEP, 0), WORK_FIXED, MICRO_ONCE, opt_s, 0);
    if (x->engine) engine_passes(x, st, mem_bw);
    st->tokens_per_sample = is_transformer(m) ? (double)(x->t->seq > 0 ? x->t->seq : m->max_seq) : 1;
}
