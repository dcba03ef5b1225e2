/* cli_setup.c — parse -> validate -> resolve the shared planning flags. */
#include "cli_setup.h"

#include <cjson/cJSON.h>
#include <stdarg.h>
#include <stdlib.h>
#include <math.h>
#include <stddef.h>
#include <string.h>

#include "cli_model.h"
#include "plan_fsdp.h"
#include "plan_activ.h"
#include "plan_dim_cp.h"
#include "plan_dim_ep.h"
#include "plan_dim_ft.h"
#include "plan_load.h"
#include "plan_zoo.h"
#include "plan_strategy.h"
#include "plan_dim_pp.h"
#include "plan_dim_tp.h"
#include "plan_time.h"
#include "plan_util.h"

enum {
    OPT_MODEL = 1000, OPT_REVISION, OPT_PARAMS, OPT_UNITS, OPT_BATCH, OPT_SEQ, OPT_ACCUM, OPT_PRECISION,
    OPT_OPTIMIZER, OPT_CKPT, OPT_ATTN, OPT_ATTN_KERNEL, OPT_DROPOUT, OPT_GPUS, OPT_GPN, OPT_GPU, OPT_GPU_MEM,
    OPT_STRATEGY, OPT_BUCKET_VIEW, OPT_CTX, OPT_CUBLAS, OPT_NCCL, OPT_MARGIN, OPT_JSON, OPT_IMPL, OPT_FSDP, OPT_AUTOCAST, OPT_LOOP, OPT_ZERO_GRAD, OPT_HELP,
    OPT_SYNCBN, OPT_MFU, OPT_INTRA_BW, OPT_INTER_BW, OPT_NICS, OPT_LATENCY, OPT_FSDP_SYNC, OPT_MOE_IMBALANCE,
    OPT_DS_BUCKET, OPT_DS3_PREFETCH, OPT_DS3_LIVE, OPT_DS3_REUSE, OPT_DS3_PERSIST, OPT_DS_OVERLAP, OPT_ZERO_SYNC, OPT_ZERO_GROUP, OPT_ALLOC_CONF,
    OPT_CONFIG, OPT_CONFIG_KIND,
    OPT_TP, OPT_SP, OPT_LOSS_PARALLEL, OPT_PP, OPT_PP_SCHED, OPT_MICROBATCHES, OPT_PP_VIRTUAL, OPT_PP_LESS_FIRST, OPT_PP_LESS_LAST, OPT_PP_RETURN_OUTPUTS, OPT_EP, OPT_CP,
    OPT_LORA, OPT_LORA_ALPHA, OPT_LORA_TARGETS, OPT_LORA_DROPOUT, OPT_FREEZE, OPT_QUANT,
    OPT_FSDP_MIN, OPT_FSDP_LIMIT, OPT_FSDP_BWD, OPT_FSDP_FWD, OPT_FSDP_REDUCE, OPT_TIME_SHARES,
};

static const struct option BASE_OPTIONS[] = {
    {"model", required_argument, 0, OPT_MODEL},
    {"revision", required_argument, 0, OPT_REVISION},
    {"params", required_argument, 0, OPT_PARAMS},
    {"units", required_argument, 0, OPT_UNITS},
    {"batch", required_argument, 0, OPT_BATCH},
    {"seq", required_argument, 0, OPT_SEQ},
    {"grad-accum", required_argument, 0, OPT_ACCUM},
    {"precision", required_argument, 0, OPT_PRECISION},
    {"optimizer", required_argument, 0, OPT_OPTIMIZER},
    {"act-ckpt", required_argument, 0, OPT_CKPT},
    {"attn", required_argument, 0, OPT_ATTN},
    {"attn-kernel", required_argument, 0, OPT_ATTN_KERNEL},
    {"dropout", required_argument, 0, OPT_DROPOUT},
    {"moe-imbalance", required_argument, 0, OPT_MOE_IMBALANCE},
    {"gpus", required_argument, 0, OPT_GPUS},
    {"gpus-per-node", required_argument, 0, OPT_GPN},
    {"gpu", required_argument, 0, OPT_GPU},
    {"gpu-mem", required_argument, 0, OPT_GPU_MEM},
    {"strategy", required_argument, 0, OPT_STRATEGY},
    {"grad-as-bucket-view", no_argument, 0, OPT_BUCKET_VIEW},
    {"cuda-context", required_argument, 0, OPT_CTX},
    {"cublas-ws", required_argument, 0, OPT_CUBLAS},
    {"nccl-mem", required_argument, 0, OPT_NCCL},
    {"alloc-margin", required_argument, 0, OPT_MARGIN},
    {"alloc-conf", required_argument, 0, OPT_ALLOC_CONF},
    {"mfu", required_argument, 0, OPT_MFU},
    {"time-shares", required_argument, 0, OPT_TIME_SHARES},
    {"intra-bw", required_argument, 0, OPT_INTRA_BW},
    {"inter-bw", required_argument, 0, OPT_INTER_BW},
    {"nics", required_argument, 0, OPT_NICS},
    {"latency", required_argument, 0, OPT_LATENCY},
    {"syncbn", no_argument, 0, OPT_SYNCBN},
    {"json", optional_argument, 0, OPT_JSON},
    {"impl", required_argument, 0, OPT_IMPL},
    {"fsdp", required_argument, 0, OPT_FSDP},
    {"autocast", required_argument, 0, OPT_AUTOCAST},
    {"loop", required_argument, 0, OPT_LOOP},
    {"zero-grad", required_argument, 0, OPT_ZERO_GRAD},
    {"fsdp-grad-sync", required_argument, 0, OPT_FSDP_SYNC},
    {"fsdp-reduce-dtype", required_argument, 0, OPT_FSDP_REDUCE},
    {"fsdp-min-params", required_argument, 0, OPT_FSDP_MIN},
    {"fsdp-limit-all-gathers", required_argument, 0, OPT_FSDP_LIMIT},
    {"fsdp-backward-prefetch", required_argument, 0, OPT_FSDP_BWD},
    {"fsdp-forward-prefetch", required_argument, 0, OPT_FSDP_FWD},
    {"ds-reduce-bucket", required_argument, 0, OPT_DS_BUCKET},
    {"ds3-prefetch", required_argument, 0, OPT_DS3_PREFETCH},
    {"ds3-max-live", required_argument, 0, OPT_DS3_LIVE},
    {"ds3-max-reuse", required_argument, 0, OPT_DS3_REUSE},
    {"ds3-persist", required_argument, 0, OPT_DS3_PERSIST},
    {"ds-overlap-comm", required_argument, 0, OPT_DS_OVERLAP},
    {"zero-param-sync", required_argument, 0, OPT_ZERO_SYNC},
    {"zero-group", required_argument, 0, OPT_ZERO_GROUP},
    {"config", required_argument, 0, OPT_CONFIG},
    {"config-kind", required_argument, 0, OPT_CONFIG_KIND},
    {"tp", required_argument, 0, OPT_TP},
    {"sp", required_argument, 0, OPT_SP},
    {"loss-parallel", required_argument, 0, OPT_LOSS_PARALLEL},
    {"pp", required_argument, 0, OPT_PP},
    {"pp-schedule", required_argument, 0, OPT_PP_SCHED},
    {"microbatches", required_argument, 0, OPT_MICROBATCHES},
    {"pp-virtual", required_argument, 0, OPT_PP_VIRTUAL},
    {"pp-less-first", required_argument, 0, OPT_PP_LESS_FIRST},
    {"pp-less-last", required_argument, 0, OPT_PP_LESS_LAST},
    {"pp-return-outputs", required_argument, 0, OPT_PP_RETURN_OUTPUTS},
    {"ep", required_argument, 0, OPT_EP},
    {"cp", required_argument, 0, OPT_CP},
    {"lora", required_argument, 0, OPT_LORA},
    {"lora-alpha", required_argument, 0, OPT_LORA_ALPHA},
    {"lora-targets", required_argument, 0, OPT_LORA_TARGETS},
    {"lora-dropout", required_argument, 0, OPT_LORA_DROPOUT},
    {"freeze", required_argument, 0, OPT_FREEZE},
    {"quant-base", required_argument, 0, OPT_QUANT},
    {"help", no_argument, 0, OPT_HELP},
    {0, 0, 0, 0},
};
_Static_assert(sizeof BASE_OPTIONS / sizeof BASE_OPTIONS[0] - 1 <= CLI_GIVEN_MAX, "CLI_GIVEN_MAX: every shared option has a given[] slot");


const struct option *cli_setup_options(void) { return BASE_OPTIONS; }

static char *capture;
static size_t capture_len;
static const CliConfig *active_config;   /* --config while its flags are checked: errors name its keys */

void cli_usage_capture(char *buf, size_t len) {
    capture = buf;
    capture_len = len;
    if (buf && len) buf[0] = 0;
}

int cli_usage_error(const char *fmt, ...) {
    char msg[4096];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (active_config) cli_config_annotate(active_config, msg, sizeof msg);
    /* one line whatever a value held: a newline or other control character is written escaped */
    char clean[sizeof msg];
    size_t o = 0;
    for (const unsigned char *p = (const unsigned char *)msg; *p && o + 5 < sizeof clean; p++) {
        if (*p == '\n') { clean[o++] = '\\'; clean[o++] = 'n'; }
        else if (*p == '\t') { clean[o++] = '\\'; clean[o++] = 't'; }
        else if (*p < 0x20 || *p == 0x7f) o += (size_t)snprintf(clean + o, sizeof clean - o, "\\x%02x", *p);
        else clean[o++] = (char)*p;
    }
    clean[o] = 0;
    memcpy(msg, clean, o + 1);
    if (capture) {
        if (!capture[0]) snprintf(capture, capture_len, "%s", msg);
    } else {
        fprintf(stderr, "memplan: %s\n", msg);
    }
    return 2;
}

const char *cli_setup_given(const CliSetup *s, const char *name) {
    for (int i = 0; BASE_OPTIONS[i].name; i++)
        if (strcmp(BASE_OPTIONS[i].name, name) == 0) return i < CLI_GIVEN_MAX ? s->given[i] : NULL;
    return NULL;
}

int cli_bare_number(const char *a) {
    size_t n = strlen(a);
    if (!n) return 0;
    char last = a[n - 1];
    if (!((last >= '0' && last <= '9') || last == '.')) return 0;
    char *end;
    double v = strtod(a, &end);
    return !(*end == 0 && v == 0);
}

void cli_print_setup_help(FILE *f) {
    fprintf(f,
        "Model:\n"
        "  --model NAME|ID|PATH   a zoo model by alias or hub id, in any case\n"
        "                         (%s);\n"
        "                         any other hub id ORG/NAME: its config.json from the local Hugging Face\n"
        "                         cache, else fetched from the hub into it (docs/models.md); or a Hugging\n"
        "                         Face config.json / PyTorch params.json / memplan model JSON\n"
        "  --revision REV         with a hub id: the branch, tag or commit (default main)\n"
        "  --params N             a generic dense model of N parameters (e.g. 7.5e9); --units U\n"
        "                         splits it into U equal layers for FSDP/ZeRO-3 (default 32)\n"
        "Training (defaults: what a typical user runs today):\n"
        "  --batch B              micro-batch per GPU (default 1)\n"
        "  --seq S                sequence length (default: the model's context)\n"
        "  --grad-accum K         gradient accumulation steps (default 1)\n"
        "  --precision P          %s (default amp-bf16; amp-fp16 on a GPU without bf16)\n"
        "  --optimizer O          %s (default adamw)\n"
        "  --act-ckpt none|full|every:N|op|selective\n"
        "                         activation checkpointing: none (default), every block, or every N-th\n"
        "                         block (blocks N, 2N, ...); op: torchtitan's op-level selective AC\n"
        "                         (matmul and attention outputs saved, every second mm recomputed);\n"
        "                         selective: Megatron-LM's selective recompute of the core attention\n"
        "  --attn eager|sdpa      attention implementation (default sdpa)\n"
        "  --attn-kernel fa2|fa3|fa4\n"
        "                         the flash kernel --attn sdpa runs, for its speed: FlashAttention-2\n"
        "                         (SDPA's, default), -3 (flash-attn 3, Hopper) or -4 (flash-attn 4;\n"
        "                         B200: an estimate); memory as SDPA's flash path\n"
        "  --dropout P            dropout probability (default: the model's config)\n"
        "  --moe-imbalance F      MoE models: the busiest expert receives F times the mean tokens and\n"
        "                         every expert's rows are sized for it (a capacity factor), F in\n"
        "                         [1, experts/top-k]; default 1: transformers' grouped_mm, whose memory\n"
        "                         does not depend on routing (measured); above 1 an estimate\n"
        "  --loop common|trainer  common: the loop holds the logits through backward (default);\n"
        "                         trainer: HF Trainer's, which drops them before backward\n"
        "  --zero-grad none|zeros zero_grad(set_to_none=True), PyTorch >= 2.0's default (none), or\n"
        "                         set_to_none=False (zeros: gradients stay allocated across steps)\n"
        "  --autocast cuda|cpu    whose autocast op lists amp-* follows (default cuda; cpu for\n"
        "                         runs on CPU tensors, e.g. checks against PyTorch on CPU ranks)\n"
        "Fine-tuning (docs/formulas.md \"LoRA and frozen parameters\"):\n"
        "  --lora R               PEFT LoRA of rank R (1..65536): the base frozen, adapters A (R x in) and\n"
        "                         B (out x R) trainable on each target module\n"
        "  --lora-alpha A         lora_alpha (default 8; scales the adapters, no memory)\n"
        "  --lora-targets LIST    module names (q_proj,v_proj,... c_attn,c_proj,c_fc) or all-linear (every\n"
        "                         projection but the head); default PEFT's for the model type (llama:\n"
        "                         q_proj,v_proj; gpt2: c_attn)\n"
        "  --lora-dropout P       lora_dropout (default 0: A reads the module's input itself)\n"
        "  --freeze WHAT          without LoRA: embeddings (the input embeddings, a tied head with them)\n"
        "                         or all-but-last:N (all but the last N blocks and the layers after them)\n"
        "  --quant-base Q         the frozen projections' storage: nf4 (QLoRA, double-quantized), int8,\n"
        "                         bf16, none (default: the precision's); NF4 as bitsandbytes stores it,\n"
        "                         int8 and the dequantization transients are estimates\n"
        "Cluster:\n"
        "  --gpus N               total GPUs (default 1)\n"
        "  --gpus-per-node G      default min(N, 8)\n"
        "  --gpu PRESET           %s (default %s)\n"
        "  --gpu-mem SIZE         override capacity: 24GiB, 24G (= GiB), 512MiB binary; 80GB decimal (10^9)\n"
        "  --intra-bw GBPS        override bandwidth per GPU inside a node (GB/s, decimal)\n"
        "  --inter-bw GBPS        override bandwidth per GPU across nodes (GB/s)\n"
        "  --nics N               NICs per node: NCCL's channels across nodes, the SMs they take from the compute\n"
        "                         (not the bandwidth: --inter-bw). Default: one per GPU at the preset's\n"
        "                         inter-node rate, as many as carry GPUs per node x --inter-bw\n"
        "  --latency US           override the per-step collective latency (microseconds)\n"
        "  --mfu F                the flat time model: compute at F x the peak FLOP/s (default: time from the operations)\n"
        "  --time-shares K=F,...  the per-operation model's fitted shares for this plan: gemm (of the GPU's\n"
        "                         measured GEMM rate), attn (of its flash-attention rate), passes (elementwise\n"
        "                         passes); default: the shipped ones, fitted on every published source\n"
        "                         (make fit-time; docs/validation-time.md)\n"
        "Strategies:\n"
        "  --strategy S[,S...]    all (default), or %s;\n"
        "                         auto: the same as memplan auto\n"
        "  --grad-as-bucket-view  DDP gradient_as_bucket_view=True (no bucket copy)\n"
        "  --fsdp 1|2             what the fsdp-* rows mean where they differ: 1 flat-parameter\n"
        "                         FullyShardedDataParallel, 2 fully_shard (default 2)\n"
        "  --fsdp-grad-sync every|last\n"
        "                         fsdp-* under --grad-accum: every reduce-scatters each micro-step and\n"
        "                         the gradients accumulate sharded (default every: FSDP2's own, torchtitan);\n"
        "                         last skips it on the non-final micro-steps (no_sync /\n"
        "                         set_requires_gradient_sync(False), HF Accelerate): every unit's unsharded\n"
        "                         gradient accumulates, one reduce-scatter per optimizer step\n"
        "  --fsdp-reduce-dtype fp32|bf16|fp16\n"
        "                         fsdp-*: the dtype gradients are reduce-scattered in, MixedPrecision(Policy)'s\n"
        "                         reduce_dtype (default: fp32 for --fsdp 2 under mixed-*, as torchtitan;\n"
        "                         else the gradients' own, as FSDP1's MixedPrecision(reduce_dtype=param_dtype);\n"
        "                         accelerate's and the HF Trainer's FSDP reduce in the 16-bit dtype)\n"
        "Tensor parallel (PyTorch parallelize_module; with ddp, zero1, zero2 and fsdp-full on gpus / tp\n"
        "data-parallel ranks, ranks tp apart; zero1/zero2 under tp an estimate no CPU-rank run checks):\n"
        "  --tp N|auto            tensor-parallel degree inside a node (default 1; auto: memplan auto tries\n"
        "                         every degree dividing the GPUs per node, data parallel alone kept within 3%%):\n"
        "                         torchtitan's Llama plan\n"
        "                         (q/k/v, gate/up column-, o/down row-parallel; embedding and head vocab-sharded),\n"
        "                         GPT-2's c_attn/c_fc column-, c_proj row-parallel; N divides the GPUs per node,\n"
        "                         the heads and the KV heads\n"
        "  --sp on|off            sequence parallel: SequenceParallel norms, sequence-sharded residual stream\n"
        "                         (default off; needs --tp 2 or more)\n"
        "  --loss-parallel on|off loss parallel (torch's loss_parallel(), torchtitan's default): the vocab-sharded\n"
        "                         logits stay sharded and the cross-entropy all-reduces three b x s rows instead\n"
        "                         of gathering them (default off: gathered; needs --tp 2 or more and an untied head)\n"
        "Pipeline parallel (torch.distributed.pipelining; with ddp, zero1 and fsdp-full on gpus / (tp x pp) ranks;\n"
        "closed forms; memory checked on CPU ranks for gpt2-mini only: docs/formulas.md \"Pipeline parallel\"):\n"
        "  --pp N|auto            pipeline ranks (default 1; auto: memplan auto tries each degree): the blocks\n"
        "                         split over N stages (x --pp-virtual), stage 0 also holds the embedding, the\n"
        "                         last the head and the loss; the plan (memory and time) is the most loaded\n"
        "                         rank's, with the bubble of equal ranks\n"
        "  --pp-schedule 1f1b|gpipe|interleaved\n"
        "                         Schedule1F1B (default; rank r holds min(M, N - r) micro-batches'\n"
        "                         activations), ScheduleGPipe (all M) or ScheduleInterleaved1F1B\n"
        "  --pp-virtual V         interleaved: stages per rank (default 2; rank r runs stages r, r + N, ...)\n"
        "  --pp-less-first K, --pp-less-last K\n"
        "                         torchtitan's uneven split: the embedding (the norm and head) counted as K\n"
        "                         blocks, so the first (last) stage gets K fewer (default 0 and 0: an even\n"
        "                         split, N x V dividing the blocks; torchtitan's own default is 1 and 1)\n"
        "  --pp-return-outputs on|off\n"
        "                         schedule.step(return_outputs=...): on (torch's default) keeps every\n"
        "                         micro-batch's logits on the last stage until the next step and merges\n"
        "                         them; off (torchtitan's) keeps none\n"
        "  --microbatches M       micro-batches per step (default N; 1f1b needs M >= N); global batch =\n"
        "                         --batch x M x gpus / (tp x pp); replaces --grad-accum under --pp\n"
        "Expert parallel (MoE models; with fsdp-full; docs/formulas.md \"Expert parallel\"):\n"
        "  --ep N|auto            expert-parallel degree (default 1; auto: memplan auto tries each degree\n"
        "                         dividing the experts and the GPUs): each MoE block's experts split over N\n"
        "                         ranks (transformers' AllToAllEP, torchtitan's ExpertParallel), tokens sent\n"
        "                         to them and back by all-to-all, the experts sharded over gpus / N ranks;\n"
        "                         --moe-imbalance F: the busiest rank receives F times its share of rows\n"
        "Context parallel (ring attention; with fsdp-full; closed forms, estimates: docs/formulas.md\n"
        "\"Context parallel\"):\n"
        "  --cp N                 context-parallel degree (default 1): every sequence split over N ranks\n"
        "                         (torch's context_parallel, torchtitan's context_parallel_degree), keys and\n"
        "                         values all-gathered per attention layer; seq divisible by 2 N\n"
        "FSDP1's knobs (--fsdp 1: FullyShardedDataParallel's arguments; docs/formulas.md \"FSDP1 and its knobs\"):\n"
        "  --fsdp-min-params N    size_based_auto_wrap_policy(min_num_params=N) over a decoder's modules\n"
        "                         (N above a block's parameters; default: one unit per block)\n"
        "  --fsdp-backward-prefetch pre|post|none\n"
        "                         backward_prefetch BACKWARD_PRE (default), BACKWARD_POST or None\n"
        "  --fsdp-forward-prefetch on|off  forward_prefetch (default off)\n"
        "  --fsdp-limit-all-gathers on|off  limit_all_gathers (default on); off is planned as on: the\n"
        "                         rate limiter moves no memory on CPU ranks, its GPU effect is not modelled\n"
        "DeepSpeed sizes (zero* rows, elements, DeepSpeed's zero_optimization keys; a DeepSpeed --config sets them):\n"
        "  --ds-reduce-bucket N   reduce_bucket_size (default 5e8)\n"
        "  --ds3-prefetch N       stage3_prefetch_bucket_size (default 5e7)\n"
        "  --ds3-max-live N       stage3_max_live_parameters (default 1e9)\n"
        "  --ds3-max-reuse N      stage3_max_reuse_distance (default 1e9)\n"
        "  --ds3-persist N        stage3_param_persistence_threshold (default 1e5)\n"
        "  --ds-overlap-comm on|off  overlap_comm (default: on for zero3, off for zero1/2; on: zero1/2\n"
        "                         keep a second reduce bucket and reduce on their own stream beside backward,\n"
        "                         each bucket after the one before; off: on the compute stream, backward\n"
        "                         waits for each)\n"
        "  --zero-param-sync allgather|broadcast  how zero1/zero2 send the updated shards after the step:\n"
        "                         one all-gather (default: DeepSpeed's all_gather_dp_groups) or one broadcast\n"
        "                         per rank (InternLM's HybridZeroOptimizer.broadcast_params)\n"
        "  --zero-group N         zero1/zero2 shard the optimizer within groups of N ranks, gradients still\n"
        "                         all-reduced over all (InternLM's zero1=N; default: every rank, DeepSpeed's)\n"
        "Overheads (per GPU; defaults in docs/formulas.md):\n"
        "  --cuda-context SIZE    CUDA context (default 512MiB)\n"
        "  --cublas-ws SIZE       cuBLAS workspace (default: the --gpu preset's, 32MiB on Hopper, 8.125MiB before)\n"
        "  --nccl-mem SIZE        NCCL buffers per communicator (default 512MiB)\n"
        "  --alloc-margin allocator|flat|P%%|SIZE  the caching allocator's share: allocator (default) replays\n"
        "                         the step's allocations through PyTorch's caching allocator (max reserved -\n"
        "                         tensor peak); flat = 5%% of allocated bytes (the old margin); or a given\n"
        "                         percentage or size\n"
        "  --alloc-conf S         allocator settings as PYTORCH_CUDA_ALLOC_CONF takes them (default: that\n"
        "                         variable, else PYTORCH_ALLOC_CONF, else torch's defaults)\n"
        "Your own config (plan and auto; every key per kind: docs/configs.md):\n"
        "  --config FILE          a DeepSpeed JSON, an accelerate config YAML, a torchtitan TOML or HF\n"
        "                         TrainingArguments JSON (args.to_json_string()): its settings become the flags\n"
        "                         above (the command line's win; the header names each one's key); keys memplan\n"
        "                         does not model are named in one warning on standard error\n"
        "  --config-kind K        deepspeed|accelerate|torchtitan|hf-trainer (default: read from the content)\n"
        "Output:\n"
        "  --json[=FILE]          JSON instead of the table (docs/json.md): --json to standard output, --json=FILE to a file\n",
        plan_zoo_hint(), plan_precision_names(), plan_optimizer_names(), plan_gpu_names(),
        PLAN_DEFAULT_GPU, plan_strategy_names());
}

static int set_strategies(CliSetup *s, const char *arg) {
    if (strcmp(arg, "all") == 0) { s->strategies = (1u << STRAT_COUNT) - 1; return 0; }
    char tmp[256];
    if (strlen(arg) >= sizeof(tmp)) return cli_usage_error("--strategy value too long");
    snprintf(tmp, sizeof(tmp), "%s", arg);
    s->strategies = 0;
    for (char *save = NULL, *tok = strtok_r(tmp, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        if (strcmp(tok, "all") == 0)
            return cli_usage_error("--strategy '%s': 'all' stands alone; or list some of: %s", arg, plan_strategy_names());
        int k = plan_strategy_by_name(tok);
        if (k < 0)
            return cli_usage_error("unknown --strategy '%s' (valid: all, %s)", tok, plan_strategy_names());
        s->strategies |= 1u << k;
    }
    if (!s->strategies) return cli_usage_error("--strategy is empty (valid: all, %s)", plan_strategy_names());
    return 0;
}

/* 1 if the model's embedding holds a position table (GPT-2, BERT: max_seq rows) besides the
 * token table, so that a longer sequence has no positions to read; rotary and relative
 * positions (LLaMA, T5) have no such limit. */
static int learned_positions(const ModelSpec *m) {
    if (m->arch != ARCH_DECODER && m->arch != ARCH_ENCODER) return 0;
    for (int i = 0; i < m->n_layers; i++)
        if (m->layers[i].kind == LAYER_EMBED)
            return m->d_model > 0 && m->layers[i].params >= (m->vocab + m->max_seq) * m->d_model;
    return 0;
}

/* What the flags give besides the specs themselves: the model to load and the values applied
 * after it (--gpu-mem and friends override the --gpu preset whatever the order). */
typedef struct {
    const char *model_arg;     /* --model, NULL if none */
    const char *revision;      /* --revision, NULL if none */
    double params;             /* --params, 0 if none */
    long long units;           /* --units (default 32) */
    int units_given;
    long long gpn;             /* --gpus-per-node, 0: the default */
    double gpu_mem, cublas_ws; /* bytes; -1: not given */
    double intra_bw, inter_bw; /* GB/s, 0: not given */
    int nics;                  /* --nics, 0: not given */
    double latency_us;         /* < 0: not given */
    const char *alloc_conf;    /* --alloc-conf, NULL if none */
} Flags;

/* Loads the model and applies the parsed values; 0, or 2 after printing the error. */
/* The precision regime on this GPU: the default (amp-bf16) falls back to amp-fp16, then fp32, on
 * a GPU without bf16; a --precision the GPU lacks is refused with the ones it has. 0 or 2. */
static int resolve_tp(CliSetup *s, int cluster_known);
static int resolve_pp(CliSetup *s, const char *cmd);
static int resolve_dims(CliSetup *s, const char *cmd);

static int resolve_precision(CliSetup *s) {
    const GpuPreset *g = &s->cluster.gpu;
    if (!cli_setup_given(s, "precision") && g->peak_tflops[plan_precision(s->train.precision)->peak] <= 0)
        s->train.precision = g->peak_tflops[PEAK_FP16] > 0 ? PREC_AMP_FP16 : PREC_FP32;
    const PrecisionSpec *p = plan_precision(s->train.precision);
    if (g->peak_tflops[p->peak] > 0) return 0;
    char ok[128] = "";
    size_t n = 0;
    for (int k = 0; k < PREC_COUNT && n < sizeof ok; k++)
        if (g->peak_tflops[plan_precision((PrecisionKind)k)->peak] > 0)
            n += (size_t)snprintf(ok + n, sizeof ok - n, "%s%s", n ? ", " : "", plan_precision((PrecisionKind)k)->name);
    return cli_usage_error("--precision %s needs %s, which %s does not support (valid there: %s)", p->name,
                           p->peak == PEAK_BF16 ? "bf16" : "fp16", g->name, ok);
}

/* GPT-OSS's attention sinks have no SDPA path in transformers 5.24 (GptOssPreTrainedModel
 * _supports_sdpa = False): left unset, its attention falls back to eager
 * (modeling_utils.py get_correct_attn_implementation), so the default follows; an explicit
 * --attn sdpa is what transformers refuses. 0 or 2. */
static int resolve_attn(CliSetup *s) {
    if (!s->have_model || !s->model.attn_sinks || s->train.attn == ATTN_EAGER) return 0;
    if (cli_setup_given(s, "attn"))
        return cli_usage_error("--attn sdpa: %s has attention sinks, which transformers runs only in eager "
                               "attention (no SDPA path): give --attn eager", s->model.name);
    s->train.attn = ATTN_EAGER;
    return 0;
}

/* --attn-kernel: a flash kernel runs only under --attn sdpa, and is priced only on a GPU its
 * published curve covers (plan_attn_curve). 0 or 2. */
static int resolve_attn_kernel(CliSetup *s) {
    AttnKernel k = s->train.attn_kernel;
    if (k == ATTN_KERNEL_FA2) return 0;
    if (s->train.attn != ATTN_SDPA)
        return cli_usage_error("--attn-kernel %s: a flash kernel needs --attn sdpa (valid with --attn %s: fa2)",
                               plan_attn_kernel_name(k), plan_attn_name(s->train.attn));
    if (plan_attn_curve(s->cluster.gpu.eff, k, &(const double *){0}, &(const double *){0}) >= 0) return 0;
    char ok[256];
    return cli_usage_error("--attn-kernel %s: no published speed for it on %s (valid there: fa2; %s on: %s)",
                           plan_attn_kernel_name(k), s->cluster.gpu.name, plan_attn_kernel_name(k),
                           plan_attn_kernel_gpus(k, ok, sizeof ok));
}

/* --moe-imbalance F: the busiest expert receives F times the mean tokens, T·k/E; it can receive
 * at most every token once, so F <= E/k. Only MoE models have experts. 0 or 2. */
static int resolve_moe(CliSetup *s) {
    const char *given = cli_setup_given(s, "moe-imbalance");
    if (!given || !s->have_model) return 0;
    const MoeSpec *e = &s->model.moe;
    if (e->n_experts <= 0)
        return cli_usage_error("--moe-imbalance: model %s has no experts (it applies to mixture-of-experts models)",
                               s->model.name);
    double most = (double)e->n_experts / (double)e->top_k;
    if (s->train.moe_imbalance > most)
        return cli_usage_error("--moe-imbalance %s: with top-%d of %d experts the busiest expert receives at most "
                               "every token, %g times the mean (valid: 1 to %g)", given, e->top_k, e->n_experts,
                               most, most);
    return 0;
}

/* The trainable subset: the LoRA flags need --lora, --quant-base a frozen base; the strategies
 * whose frozen-parameter rules are not written yet (FSDP, ZeRO-3, memplan's engine) are left out
 * of the default set and refused when named. Applies it to the model. 0 or 2. */
static int resolve_finetune(CliSetup *s) {
    FinetuneSpec *ft = &s->train.ft;
    static const char *const LORA_FLAGS[] = {"lora-alpha", "lora-targets", "lora-dropout"};
    for (size_t i = 0; i < sizeof LORA_FLAGS / sizeof LORA_FLAGS[0]; i++)
        if (cli_setup_given(s, LORA_FLAGS[i]) && ft->rank == 0)
            return cli_usage_error("--%s sets LoRA: add --lora R (e.g. --lora 16)", LORA_FLAGS[i]);
    if (ft->quant != QUANT_NONE && ft->rank == 0)
        return cli_usage_error("--quant-base %s stores a frozen LoRA base: add --lora R (e.g. --lora 16)",
                               plan_quant_name(ft->quant));
    if (ft->alpha == 0) ft->alpha = 8;   /* LoraConfig's lora_alpha default */
    if (!plan_finetune_on(ft) || !s->have_model) return 0;
    if (s->train.impl == IMPL_ENGINE)
        return cli_usage_error("--lora / --freeze: memplan's engine trains every parameter; use --impl pytorch");
    unsigned unplanned = 0;   /* FSDP1's flat parameters with frozen parameters */
    for (int k = 0; k < STRAT_COUNT; k++)
        if ((plan_strategy((StrategyKind)k)->shard & SHARD_PARAM) && !plan_strategy_is_deepspeed((StrategyKind)k) &&
            s->train.fsdp_impl == 1)
            unplanned |= 1u << k;
    if (cli_setup_given(s, "strategy") && (s->strategies & unplanned)) {
        for (int k = 0; k < STRAT_COUNT; k++)
            if (s->strategies & unplanned & (1u << k))
                return cli_usage_error("--strategy %s with --lora/--freeze under --fsdp 1: FSDP1's flat parameters with "
                                       "frozen ones are not planned (valid: --fsdp 2, or ddp, zero1, zero2, zero3)",
                                       plan_strategy((StrategyKind)k)->name);
    }
    s->strategies &= ~unplanned;
    if (!s->strategies) return cli_usage_error("--lora/--freeze: no strategy left to plan (valid: ddp, zero1, zero2, zero3, fsdp-* with --fsdp 2)");
    char err[512];
    if (plan_dims_setup(&s->model, &s->train, err, sizeof err)) return cli_usage_error("%s", err);
    return 0;
}

/* FSDP1's knobs: only with --fsdp 1 and fsdp-* rows; --fsdp-min-params rewraps the model's units
   (plan_fsdp_size_wrap), so every row must be an fsdp-* one. 0 or 2. */
static int fsdp1_knobs(CliSetup *s) {
    static const char *const FLAGS[] = {"fsdp-min-params", "fsdp-limit-all-gathers", "fsdp-backward-prefetch",
                                        "fsdp-forward-prefetch"};
    unsigned fsdp = (1u << STRAT_FSDP_FULL) | (1u << STRAT_FSDP_GRAD_OP) | (1u << STRAT_FSDP_HYBRID);
    for (size_t i = 0; i < sizeof FLAGS / sizeof FLAGS[0]; i++) {
        if (!cli_setup_given(s, FLAGS[i])) continue;
        if (i == 0 && s->train.fsdp_impl != 1)
            return cli_usage_error("--fsdp-min-params is FSDP1's size_based_auto_wrap_policy: give --fsdp 1 (FSDP2's "
                                   "fully_shard has no size policy: the caller chooses the modules)");
        if (s->train.fsdp_impl != 1)
            return cli_usage_error("--%s is an argument of FSDP1's FullyShardedDataParallel: give --fsdp 1 (FSDP2's "
                                   "fully_shard has no such argument)", FLAGS[i]);
        if (!(s->strategies & fsdp))
            return cli_usage_error("--%s is an FSDP1 setting: add fsdp-full, fsdp-grad-op or fsdp-hybrid to --strategy",
                                   FLAGS[i]);
        if (i == 0 && (s->strategies & ~fsdp))
            return cli_usage_error("--fsdp-min-params rewraps the model's units: give only fsdp-full, fsdp-grad-op or "
                                   "fsdp-hybrid in --strategy");
    }
    char err[512];
    if (s->have_model && s->train.fsdp1.min_params > 0 &&
        plan_fsdp_size_wrap(&s->model, s->train.fsdp1.min_params, err, sizeof err))
        return cli_usage_error("%s", err);
    return 0;
}

/* --fsdp-reduce-dtype: a 16-bit reduce dtype is the precision's compute dtype (MixedPrecision casts
   the gradients from param_dtype; without fsdp-* rows it changes nothing: no_effect_notes). 0 or 2. */
static int fsdp_reduce(CliSetup *s) {
    const char *a = cli_setup_given(s, "fsdp-reduce-dtype");
    if (!a) return 0;
    const PrecisionSpec *p = plan_precision(s->train.precision);
    int bf = strcmp(a, "bf16") == 0;
    if (s->train.fsdp_reduce == FSDP_REDUCE_LOW && (p->act_bytes != 2 || (p->peak == PEAK_BF16) != bf))
        return cli_usage_error("--fsdp-reduce-dtype %s needs a precision that computes in %s (--precision %s computes "
                               "in %s; valid here: fp32%s)", a, a, p->name, p->act_bytes == 2 ?
                               (p->peak == PEAK_BF16 ? "bf16" : "fp16") : "fp32",
                               p->act_bytes == 2 ? (p->peak == PEAK_BF16 ? ", bf16" : ", fp16") : "");
    return 0;
}

/* Flags given that change nothing for this setup: one note each on standard error ("said so",
   not silently ignored); the plan is the same with or without them. */
static const char *seen_value(const char *flag, const void *ctx);

/* Flags the command line gave (not a --config's) that change nothing here: one note each. */
static void no_effect_notes(const CliSetup *s, const void *cmdline) {
    if (capture) return;   /* ranks of an MPI job: the setup is checked, not narrated, on every rank */
#define cli_setup_given(s, name) seen_value(name, cmdline)
    const char *v;
    unsigned fsdp_rows = (1u << STRAT_FSDP_FULL) | (1u << STRAT_FSDP_GRAD_OP) | (1u << STRAT_FSDP_HYBRID);
    if ((v = cli_setup_given(s, "moe-imbalance")) && s->have_model && s->model.moe.n_experts > 0 &&
        s->model.moe.router == MOE_ROUTER_ALL_EXPERTS && s->train.moe_imbalance > 1)
        fprintf(stderr, "memplan: note: --moe-imbalance %s changes nothing for %s: transformers runs every expert on every "
                "token there (Llama4TextMoe: the tokens repeated over the %d experts, weighted 0 where not routed)\n",
                v, s->model.name, s->model.moe.n_experts);
    if ((v = cli_setup_given(s, "autocast")) && !plan_precision(s->train.precision)->autocast)
        fprintf(stderr, "memplan: note: --autocast %s changes nothing with --precision %s, which does not autocast (it "
                "applies to amp-fp16 and amp-bf16)\n", v, plan_precision(s->train.precision)->name);
    if ((v = cli_setup_given(s, "fsdp")) && !(s->strategies & fsdp_rows))
        fprintf(stderr, "memplan: note: --fsdp %s changes nothing without an fsdp-* strategy\n", v);
    if ((v = cli_setup_given(s, "fsdp-grad-sync")) && (!(s->strategies & fsdp_rows) || s->train.grad_accum <= 1))
        fprintf(stderr, "memplan: note: --fsdp-grad-sync %s changes nothing %s\n", v,
                !(s->strategies & fsdp_rows) ? "without an fsdp-* strategy" : "without --grad-accum 2 or more");
    if ((v = cli_setup_given(s, "fsdp-reduce-dtype")) && !(s->strategies & fsdp_rows))
        fprintf(stderr, "memplan: note: --fsdp-reduce-dtype %s changes nothing without an fsdp-* strategy\n", v);
    if ((v = cli_setup_given(s, "attn")) && s->have_model && s->model.arch == ARCH_CNN)
        fprintf(stderr, "memplan: note: --attn %s changes nothing for %s, which has no attention\n", v, s->model.name);
#undef cli_setup_given
}

static int resolve(CliSetup *s, const Flags *f, int need_model) {
    char err[1536];
    int rc;
    const char *model_arg = f->model_arg;
    double params = f->params;
    long long units = f->units, gpn = f->gpn;
    if (model_arg && params > 0) return cli_usage_error("give either --model or --params, not both");
    if (f->revision && !model_arg)
        return cli_usage_error("--revision '%s' picks a revision of --model ORG/NAME: give the hub id too", f->revision);
    if (f->units_given && params <= 0)   /* a named model has its own layers: --units would be ignored */
        return cli_usage_error("--units applies to --params only: it splits a generic model of --params N parameters "
                               "into layers%s", model_arg ? " (a --model has its own)" : "");
    if (model_arg) {
        if (cli_model_load(&s->model, model_arg, f->revision, err, sizeof(err))) return cli_usage_error("%s", err);
        s->have_model = 1;
    } else if (params <= 0 && s->config && s->config->model_json) {   /* the model the config names (a torchtitan flavor) */
        const char *j = s->config->model_json;
        if (plan_load_model_from_buffer(&s->model, j, strlen(j), s->config->model_label, err, sizeof err))
            return cli_usage_error("%s: %s", s->config->flavor_key, err);
        snprintf(s->model.name, sizeof s->model.name, "%s", s->config->model_label);
        s->have_model = 1;
    } else if (params > 0) {
        if ((double)units > params) units = (long long)params;
        if (plan_model_generic(&s->model, "generic", (int64_t)params, (int)units, err, sizeof(err)))
            return cli_usage_error("%s", err);
        s->have_model = 1;
    } else if (need_model && s->config && s->config->model_hint[0]) {
        /* the model the recipe trains (model_name_or_path): a zoo name, or a hub id from the local
           Hugging Face cache or the hub (cli_model.c), as --model would take it */
        if (cli_model_load(&s->model, s->config->model_hint, NULL, err, sizeof(err)))
            return cli_usage_error("no model: %s trains %s: %s", s->config->path, s->config->model_hint, err);
        s->have_model = 1;
    } else if (need_model) {
        return cli_usage_error("no model: give --model NAME|PATH or --params N (zoo: %s)", plan_zoo_hint());
    }
    if (f->gpu_mem > 0) s->cluster.gpu.mem_bytes = f->gpu_mem;
    if (f->cublas_ws >= 0) s->cluster.gpu.cublas_ws_bytes = f->cublas_ws;   /* after --gpu, whatever the order */
    if (f->intra_bw > 0) s->cluster.gpu.intra_bw = f->intra_bw;
    if (f->inter_bw > 0) s->cluster.gpu.inter_bw = f->inter_bw;
    if (f->nics > 0) s->cluster.nics = f->nics;
    if (f->latency_us >= 0) s->cluster.gpu.intra_lat = s->cluster.gpu.inter_lat = f->latency_us * 1e-6;
    if (gpn > s->cluster.gpus)
        return cli_usage_error("--gpus-per-node %lld is more than the %lld GPUs (--gpus): give --gpus-per-node %lld "
                               "or less, or --gpus %lld or more", gpn, (long long)s->cluster.gpus,
                               (long long)s->cluster.gpus, gpn);
    s->cluster.gpus_per_node = gpn ? gpn : (s->cluster.gpus < 8 ? s->cluster.gpus : 8);
    if (s->cluster.gpus % s->cluster.gpus_per_node)
        return cli_usage_error("--gpus %lld does not fill nodes of %lld GPUs (%sthe planner's nodes are equal): give a "
                               "multiple of %lld, or --gpus-per-node dividing %lld", (long long)s->cluster.gpus,
                               (long long)s->cluster.gpus_per_node, gpn ? "" : "the default --gpus-per-node; ",
                               (long long)s->cluster.gpus_per_node, (long long)s->cluster.gpus);
    if (s->have_model && !cli_setup_given(s, "seq") && s->train.seq <= 0 && s->model.arch != ARCH_CNN &&
        s->model.max_seq > CLI_DEFAULT_SEQ_MAX) {   /* the default: min(context, 4096), said in the header */
        s->seq_context = s->model.max_seq;
        s->train.seq = CLI_DEFAULT_SEQ_MAX;
    }
    if (s->have_model && s->train.seq > s->model.max_seq && s->model.max_seq > 0 && learned_positions(&s->model))
        return cli_usage_error("--seq %lld exceeds %s's %lld learned positions: a longer sequence does not run "
                               "(give --seq %lld or less)", (long long)s->train.seq, s->model.name,
                               (long long)s->model.max_seq, (long long)s->model.max_seq);
    if ((rc = resolve_precision(s)) || (rc = resolve_attn(s)) || (rc = resolve_attn_kernel(s)) || (rc = resolve_moe(s))) return rc;
    if (s->have_model && s->train.impl == IMPL_ENGINE &&
        (s->model.arch != ARCH_DECODER || s->train.precision != PREC_FP32))
        return cli_usage_error("--impl engine describes memplan's fp32 GPT-2 engine: use a gpt2 model with --precision fp32");
    const char *why = s->have_model ? plan_act_ckpt_unsupported(&s->model, &s->train) : NULL;
    if (why)
        return cli_usage_error("--act-ckpt %s with model %s: %s (valid here: none, full, every:N)",
                               plan_ckpt_name(s->train.act_ckpt), s->model.name, why);
    if (s->have_model && s->model.arch == ARCH_CNN && s->train.seq > 0 && s->train.seq < 32)
        return cli_usage_error("--seq %lld: for a CNN --seq is the image side, at least 32 (default %d)",
                               (long long)s->train.seq, s->model.image_size);
    unsigned ds_rows = 0;
    for (int k = 0; k < STRAT_COUNT; k++)
        if ((s->strategies & (1u << k)) && plan_strategy_is_deepspeed((StrategyKind)k)) ds_rows = 1;
    static const char *const DS_FLAGS[] = {"ds-reduce-bucket", "ds3-prefetch", "ds3-max-live", "ds3-max-reuse",
                                           "ds3-persist", "ds-overlap-comm"};
    for (size_t i = 0; i < sizeof DS_FLAGS / sizeof DS_FLAGS[0] && !ds_rows; i++)
        if (cli_setup_given(s, DS_FLAGS[i]))
            return cli_usage_error("--%s is a DeepSpeed setting: add zero1, zero2 or zero3 to --strategy", DS_FLAGS[i]);
    unsigned zero12 = s->strategies & (1u << STRAT_ZERO1 | 1u << STRAT_ZERO2);
    if (cli_setup_given(s, "zero-param-sync") && !zero12)
        return cli_usage_error("--zero-param-sync sets how ZeRO-1/2 send the updated shards: add zero1 or zero2 to "
                               "--strategy");
    if (cli_setup_given(s, "zero-group") && !zero12)
        return cli_usage_error("--zero-group sets ZeRO-1/2's shard group: add zero1 or zero2 to --strategy");
    int64_t dp_ranks = s->cluster.gpus / (s->train.tp > 1 ? s->train.tp : 1) / (s->train.pp > 1 ? s->train.pp : 1);
    if (s->train.ds.zero_group > 0 && (s->train.ds.zero_group > dp_ranks || dp_ranks % s->train.ds.zero_group))
        return cli_usage_error("--zero-group %lld does not divide the %lld data-parallel ranks (valid: a divisor of %lld)",
                               (long long)s->train.ds.zero_group, (long long)dp_ranks, (long long)dp_ranks);
    if ((rc = fsdp1_knobs(s))) return rc;
    if ((rc = fsdp_reduce(s))) return rc;
    if (s->train.grad_as_bucket_view && !(s->strategies & (1u << STRAT_DDP)))
        return cli_usage_error("--grad-as-bucket-view is DDP's gradient_as_bucket_view: add ddp to --strategy "
                               "(ZeRO and FSDP have no such option)");
    if (s->have_model && s->train.syncbn && !plan_model_bn_layers(&s->model, NULL))
        return cli_usage_error("--syncbn: model %s has no BatchNorm layers", s->model.name);
    if (f->alloc_conf && !s->cluster.alloc_model)
        return cli_usage_error("--alloc-conf sets the caching allocator model: drop --alloc-margin %s or give "
                               "--alloc-margin allocator", cli_setup_given(s, "alloc-margin"));
    const char *from = "--alloc-conf", *conf = f->alloc_conf;
    if (!conf) conf = cli_alloc_conf_env(&from);
    if (conf && s->cluster.alloc_model && plan_alloc_config_parse(&s->cluster.alloc_conf, conf, err, sizeof err))
        return cli_usage_error("%s '%s': %s%s", from, conf, err, f->alloc_conf ? "" : " (or --alloc-margin flat)");
    char quiet[256];
    if (conf && s->cluster.alloc_model && plan_alloc_config_no_effect(conf, quiet, sizeof quiet))
        fprintf(stderr, "memplan: note: %s: %s accepted as torch accepts them; they change no device memory "
                        "(pinned host memory, locking, address reserve) and the plan leaves them out\n", from, quiet);
    return resolve_finetune(s);
}

/* The strategies narrowed to a dimension's (ok): a --strategy naming another is refused with the
 * dimension's own sentence (check's, whose strategy test needs no model or cluster). 0 or 2. */
static int narrow_strategies(CliSetup *s, unsigned ok, int (*check)(const ModelSpec *, const TrainSpec *,
                                                                     const ClusterSpec *, StrategyKind, char *, size_t)) {
    if (!(s->strategies & ~ok)) return 0;
    if (cli_setup_given(s, "strategy"))
        for (int k = 0; k < STRAT_COUNT; k++)
            if ((s->strategies & (1u << k)) && !(ok & (1u << k))) {
                char msg[320];
                check(&s->model, &s->train, &s->cluster, (StrategyKind)k, msg, sizeof msg);
                return cli_usage_error("%s", msg);
            }
    s->strategies &= ok;
    return 0;
}

/* --tp / --sp: the strategies that run with tensor parallel (all of plan_tp_strategies by
 * default; a --strategy naming another is refused), and each against the model and cluster
 * (plan_tp_check) where the cluster is known (validate's is its --ranks, checked there). 0 or 2. */
static int resolve_tp(CliSetup *s, int cluster_known) {
    if (s->train.tp < 0) return 0;   /* --tp auto: memplan auto tries each degree (plan_auto_dims) */
    if (s->train.tp <= 1 && !s->train.sp) return 0;
    if (s->train.tp > 1 && narrow_strategies(s, plan_tp_strategies(), plan_tp_check)) return 2;
    if (!s->have_model || !cluster_known) return 0;
    char msg[320];
    for (int k = 0; k < STRAT_COUNT; k++)
        if ((s->strategies & (1u << k)) && plan_tp_check(&s->model, &s->train, &s->cluster, (StrategyKind)k, msg, sizeof msg))
            return cli_usage_error("%s", msg);
    return 0;
}

/* --pp / --pp-schedule / --microbatches: the micro-batches are the step's accumulation count
 * (default pp); the strategies narrowed to plan_pp_strategies as for --tp, each checked against
 * the model and cluster (plan_pp_check) where the cluster is known. 0 or 2. */
static int resolve_pp(CliSetup *s, const char *cmd) {
    int cluster_known = strcmp(cmd, "validate") != 0;
    /* the first pipeline-shape flag given, named in the refusals below */
    static const char *const SHAPE[] = {"pp-schedule", "pp-virtual", "pp-less-first", "pp-less-last"};
    const char *mb = cli_setup_given(s, "microbatches"), *sched = NULL;
    for (size_t k = 0; k < sizeof SHAPE / sizeof SHAPE[0] && !sched; k++)
        if (cli_setup_given(s, SHAPE[k])) sched = SHAPE[k];
    if (cli_setup_given(s, "pp-virtual") && s->train.pp_schedule != PP_INTERLEAVED)
        return cli_usage_error("--pp-virtual %d needs --pp-schedule interleaved (the other schedules run one stage per rank)",
                               s->train.pp_virtual);
    if (s->train.pp < 0) {   /* --pp auto: 1F1B with the fewest micro-batches, each degree */
        if (mb || sched)
            return cli_usage_error("--%s with --pp auto: the search runs 1F1B with the fewest micro-batches >= pp and an "
                                   "even split; give a fixed --pp N to plan another", mb ? "microbatches" : sched);
        return 0;
    }
    if (s->train.pp <= 1) {
        if (!sched && cli_setup_given(s, "pp-return-outputs")) sched = "pp-return-outputs";
        if (mb || sched)
            return cli_usage_error("--%s needs --pp 2 or more%s", mb ? "microbatches" : sched,
                                   mb ? " (without pipeline stages use --grad-accum)" : "");
        return 0;
    }
    if (strcmp(cmd, "run") == 0 || strcmp(cmd, "validate") == 0)
        return cli_usage_error("--pp %d: %s runs no pipeline stages (memplan's engine and the torch harness have none; "
                               "bench/torch/pp_probe.py checks the pipeline's memory); plan one with 'memplan plan --pp %d'",
                               s->train.pp, cmd, s->train.pp);
    if (cli_setup_given(s, "grad-accum"))
        return cli_usage_error("--grad-accum with --pp %d: a pipeline's micro-batches are --microbatches M", s->train.pp);
    if (!mb) s->train.grad_accum = s->train.pp;
    if (narrow_strategies(s, plan_pp_strategies(), plan_pp_check)) return 2;
    if (!s->have_model || !cluster_known) return 0;
    char msg[320];
    for (int k = 0; k < STRAT_COUNT; k++)
        if ((s->strategies & (1u << k)) && plan_pp_check(&s->model, &s->train, &s->cluster, (StrategyKind)k, msg, sizeof msg))
            return cli_usage_error("%s", msg);
    return 0;
}

/* --ep / --cp: the strategies they are planned with (fsdp-full; a --strategy naming another is
 * refused), each checked against the model and cluster (plan_ep_check, plan_cp_check) where the
 * cluster is known. 0 or 2. */
static int resolve_dims(CliSetup *s, const char *cmd) {
    static const struct {
        const char *flag;
        size_t off;
        int (*check)(const ModelSpec *, const TrainSpec *, const ClusterSpec *, StrategyKind, char *, size_t);
        const char *what;
    } DIMS[] = {
        {"ep", offsetof(TrainSpec, ep), plan_ep_check, "expert parallel"},
        {"cp", offsetof(TrainSpec, cp), plan_cp_check, "context parallel"},
    };
    const unsigned ok = 1u << STRAT_FSDP_FULL;
    int cluster_known = strcmp(cmd, "validate") != 0;
    for (size_t d = 0; d < sizeof DIMS / sizeof DIMS[0]; d++) {
        int deg = *(const int *)((const char *)&s->train + DIMS[d].off);
        if (deg <= 1) continue;   /* none, or auto (memplan auto tries each degree) */
        if (strcmp(cmd, "run") == 0)
            return cli_usage_error("--%s %d: memplan's engine runs data parallelism only; plan it with 'memplan plan "
                                   "--%s %d'", DIMS[d].flag, deg, DIMS[d].flag, deg);
        if (s->strategies & ~ok) {
            if (cli_setup_given(s, "strategy"))
                for (int k = 0; k < STRAT_COUNT; k++)
                    if ((s->strategies & (1u << k)) && !(ok & (1u << k)))
                        return cli_usage_error("--%s %d with --strategy %s: %s is planned with fsdp-full (FSDP2)",
                                               DIMS[d].flag, deg, plan_strategy((StrategyKind)k)->name, DIMS[d].what);
            s->strategies &= ok;
        }
        if (!s->have_model || !cluster_known) continue;
        char msg[320];
        for (int k = 0; k < STRAT_COUNT; k++)
            if ((s->strategies & (1u << k)) && DIMS[d].check(&s->model, &s->train, &s->cluster, (StrategyKind)k, msg, sizeof msg))
                return cli_usage_error("%s", msg);
    }
    return 0;
}

const char *cli_alloc_conf_env(const char **name) {
    static const char *const NAMES[] = {"PYTORCH_CUDA_ALLOC_CONF", "PYTORCH_ALLOC_CONF"};   /* torch's order */
    for (size_t i = 0; i < sizeof NAMES / sizeof NAMES[0]; i++) {
        const char *v = getenv(NAMES[i]);
        if (v) { *name = NAMES[i]; return v; }
    }
    return NULL;
}

/* A DeepSpeed size flag (elements, as its JSON takes them): a whole number in DeepSpeed's pydantic
 * range (zero/config.py 0.19.8): reduce_bucket_size from 1 (gt=0: DeepSpeed refuses 0), the stage-3
 * sizes from 0 (ge=0), a 0 kept as 1, the same behaviour for tensors of at least one element (each
 * tensor its own gather). 0 or 2. */
static int ds_size_option(CliSetup *s, int c, const char *a) {
    static const struct { int opt; const char *flag; double lo; size_t off; } K[] = {
        {OPT_DS_BUCKET, "ds-reduce-bucket", 1, offsetof(DsKnobs, reduce_bucket)},
        {OPT_DS3_PREFETCH, "ds3-prefetch", 0, offsetof(DsKnobs, prefetch)},
        {OPT_DS3_LIVE, "ds3-max-live", 0, offsetof(DsKnobs, max_live)},
        {OPT_DS3_REUSE, "ds3-max-reuse", 0, offsetof(DsKnobs, max_reuse)},
        {OPT_DS3_PERSIST, "ds3-persist", 0, offsetof(DsKnobs, persist)},
    };
    for (size_t i = 0; i < sizeof K / sizeof K[0]; i++) {
        if (K[i].opt != c) continue;
        double d;
        if (plan_parse_double(a, K[i].lo, 1e13, &d) || d != floor(d))
            return cli_usage_error("--%s '%s' is not a whole number of elements in [%.0f, 1e13] (e.g. 5e8)",
                                   K[i].flag, a, K[i].lo);
        *(double *)((char *)&s->train.ds + K[i].off) = d < 1 ? 1 : d;
        return 0;
    }
    return -1;
}

/* A model or training flag: 0 if it was one (applied to s or f), -1 if not, 2 after a usage error. */
static int train_option(CliSetup *s, Flags *f, int c, const char *a) {
    long long v;
    double d;
    switch (c) {
    case OPT_MODEL: f->model_arg = a; s->model_arg = a; break;
    case OPT_REVISION: f->revision = a; break;
    case OPT_CONFIG: case OPT_CONFIG_KIND: break;   /* read from given[] after the parse */
    case OPT_PARAMS:
        if (plan_parse_double(a, 1, 1e16, &f->params) || f->params != (double)(long long)f->params)
            return cli_usage_error("--params '%s' is not a whole number of parameters in [1, 1e16]", a);
        break;
    case OPT_UNITS:
        if (plan_parse_int(a, 1, 100000, &f->units))
            return cli_usage_error("--units '%s' is not an integer in [1, 100000]", a);
        f->units_given = 1;
        break;
    case OPT_BATCH:
        if (plan_parse_int(a, 1, 1000000, &v)) return cli_usage_error("--batch '%s' is not an integer in [1, 1000000]", a);
        s->train.micro_batch = v;
        break;
    case OPT_SEQ:
        if (plan_parse_int(a, 1, 10000000, &v)) return cli_usage_error("--seq '%s' is not an integer in [1, 10000000]", a);
        s->train.seq = v;
        break;
    case OPT_ACCUM:
        if (plan_parse_int(a, 1, 1000000, &v)) return cli_usage_error("--grad-accum '%s' is not an integer in [1, 1000000]", a);
        s->train.grad_accum = v;
        break;
    case OPT_PRECISION:
        if ((v = plan_precision_by_name(a)) < 0)
            return cli_usage_error("unknown --precision '%s' (valid: %s)", a, plan_precision_names());
        s->train.precision = (PrecisionKind)v;
        break;
    case OPT_OPTIMIZER:
        if ((v = plan_optimizer_by_name(a)) < 0)
            return cli_usage_error("unknown --optimizer '%s' (valid: %s)", a, plan_optimizer_names());
        s->train.optimizer = (OptimizerKind)v;
        break;
    case OPT_CKPT:
        if (plan_ckpt_parse(a, &s->train.act_ckpt, &s->train.ckpt_every))
            return cli_usage_error("unknown --act-ckpt '%s' (valid: " PLAN_CKPT_VALUES ")", a);
        break;
    case OPT_ATTN:
        if ((v = plan_attn_by_name(a)) < 0) return cli_usage_error("unknown --attn '%s' (valid: eager, sdpa)", a);
        s->train.attn = (AttnKind)v;
        break;
    case OPT_ATTN_KERNEL:
        if ((v = plan_attn_kernel_by_name(a)) < 0)
            return cli_usage_error("unknown --attn-kernel '%s' (valid: fa2, fa3, fa4)", a);
        s->train.attn_kernel = (AttnKernel)v;
        break;
    case OPT_IMPL:
        if ((v = plan_impl_by_name(a)) < 0) return cli_usage_error("unknown --impl '%s' (valid: pytorch, engine)", a);
        s->train.impl = (ImplKind)v;
        break;
    case OPT_ZERO_GRAD:
        if (strcmp(a, "none") != 0 && strcmp(a, "zeros") != 0)
            return cli_usage_error("unknown --zero-grad '%s' (valid: none, zeros)", a);
        s->train.zero_grad_keep = strcmp(a, "zeros") == 0;
        break;
    case OPT_LOOP:
        if (strcmp(a, "common") != 0 && strcmp(a, "trainer") != 0)
            return cli_usage_error("unknown --loop '%s' (valid: common, trainer)", a);
        s->train.loop_trainer = strcmp(a, "trainer") == 0;
        break;
    case OPT_AUTOCAST:
        if (strcmp(a, "cuda") != 0 && strcmp(a, "cpu") != 0)
            return cli_usage_error("unknown --autocast '%s' (valid: cuda, cpu)", a);
        s->train.autocast_cpu = strcmp(a, "cpu") == 0;
        break;
    case OPT_TP:
        if (strcmp(a, "auto") == 0) { s->train.tp = -1; break; }   /* memplan auto searches it */
        if (plan_parse_int(a, 1, 1024, &v)) return cli_usage_error("--tp '%s' is not an integer in [1, 1024] or auto", a);
        s->train.tp = (int)v;
        break;
    case OPT_PP:
        if (strcmp(a, "auto") == 0) { s->train.pp = -1; break; }   /* memplan auto searches it (plan_auto_dims) */
        if (plan_parse_int(a, 1, 1024, &v)) return cli_usage_error("--pp '%s' is not an integer in [1, 1024] or auto", a);
        s->train.pp = (int)v;
        break;
    case OPT_EP:
        if (strcmp(a, "auto") == 0) { s->train.ep = -1; break; }   /* memplan auto searches it (plan_auto_dims) */
        if (plan_parse_int(a, 1, 65536, &v)) return cli_usage_error("--ep '%s' is not an integer in [1, 65536] or auto", a);
        s->train.ep = (int)v;
        break;
    case OPT_CP:
        if (plan_parse_int(a, 1, 1024, &v)) return cli_usage_error("--cp '%s' is not an integer in [1, 1024]", a);
        s->train.cp = (int)v;
        break;
    case OPT_PP_SCHED:
        if ((v = plan_pp_schedule_by_name(a)) < 0)
            return cli_usage_error("unknown --pp-schedule '%s' (valid: 1f1b, gpipe, interleaved)", a);
        s->train.pp_schedule = (PpSchedule)v;
        break;
    case OPT_PP_VIRTUAL:
        if (plan_parse_int(a, 2, PLAN_PP_MAX_VIRTUAL, &v))
            return cli_usage_error("--pp-virtual '%s' is not an integer in [2, %d]", a, PLAN_PP_MAX_VIRTUAL);
        s->train.pp_virtual = (int)v;
        break;
    case OPT_PP_LESS_FIRST:
    case OPT_PP_LESS_LAST:
        if (plan_parse_int(a, 0, 1024, &v))
            return cli_usage_error("--%s '%s' is not an integer in [0, 1024]", c == OPT_PP_LESS_FIRST ? "pp-less-first" :
                                   "pp-less-last", a);
        *(c == OPT_PP_LESS_FIRST ? &s->train.pp_less_first : &s->train.pp_less_last) = (int)v;
        break;
    case OPT_PP_RETURN_OUTPUTS:
        if (strcmp(a, "on") && strcmp(a, "off"))
            return cli_usage_error("unknown --pp-return-outputs '%s' (valid: on, off)", a);
        s->train.pp_drop_outputs = strcmp(a, "off") == 0;
        break;
    case OPT_MICROBATCHES:
        if (plan_parse_int(a, 1, 1000000, &v)) return cli_usage_error("--microbatches '%s' is not an integer in [1, 1000000]", a);
        s->train.grad_accum = v;
        break;
    case OPT_SP:
        if (strcmp(a, "on") != 0 && strcmp(a, "off") != 0) return cli_usage_error("unknown --sp '%s' (valid: on, off)", a);
        s->train.sp = strcmp(a, "on") == 0;
        break;
    case OPT_LOSS_PARALLEL:
        if (strcmp(a, "on") != 0 && strcmp(a, "off") != 0)
            return cli_usage_error("unknown --loss-parallel '%s' (valid: on, off)", a);
        s->train.loss_parallel = strcmp(a, "on") == 0;
        break;
    case OPT_FSDP_REDUCE:   /* the 16-bit ones are checked against --precision in fsdp_reduce */
        if (strcmp(a, "fp32") != 0 && strcmp(a, "bf16") != 0 && strcmp(a, "fp16") != 0)
            return cli_usage_error("unknown --fsdp-reduce-dtype '%s' (valid: fp32, bf16, fp16)", a);
        s->train.fsdp_reduce = a[0] == 'f' && a[2] == '3' ? FSDP_REDUCE_FP32 : FSDP_REDUCE_LOW;
        break;
    case OPT_FSDP_SYNC:
        if ((v = plan_fsdp_sync_by_name(a)) < 0)
            return cli_usage_error("unknown --fsdp-grad-sync '%s' (valid: every, last)", a);
        s->train.fsdp_grad_sync = (FsdpSyncKind)v;
        break;
    case OPT_DS_BUCKET: case OPT_DS3_PREFETCH: case OPT_DS3_LIVE: case OPT_DS3_REUSE: case OPT_DS3_PERSIST:
        return ds_size_option(s, c, a);
    case OPT_DS_OVERLAP:
        if (strcmp(a, "on") != 0 && strcmp(a, "off") != 0)
            return cli_usage_error("unknown --ds-overlap-comm '%s' (valid: on, off)", a);
        s->train.ds.overlap_comm = strcmp(a, "on") == 0 ? 1 : 2;
        break;
    case OPT_ZERO_SYNC:
        if (strcmp(a, "allgather") != 0 && strcmp(a, "broadcast") != 0)
            return cli_usage_error("unknown --zero-param-sync '%s' (valid: allgather, broadcast)", a);
        s->train.ds.param_sync = strcmp(a, "broadcast") == 0 ? PARAM_SYNC_BROADCAST : PARAM_SYNC_ALLGATHER;
        break;
    case OPT_ZERO_GROUP:
        if (plan_parse_double(a, 1, 1e9, &d) || d != floor(d))
            return cli_usage_error("--zero-group '%s' is not a whole number of ranks in [1, 1e9]", a);
        s->train.ds.zero_group = (int64_t)d;
        break;
    case OPT_FSDP_MIN:
        if (plan_parse_double(a, 1, 1e16, &d) || d != floor(d))
            return cli_usage_error("--fsdp-min-params '%s' is not a whole number of parameters in [1, 1e16] (e.g. 1e8)", a);
        s->train.fsdp1.min_params = d;
        break;
    case OPT_FSDP_LIMIT: case OPT_FSDP_FWD:
        if (strcmp(a, "on") != 0 && strcmp(a, "off") != 0)
            return cli_usage_error("unknown --fsdp-%s '%s' (valid: on, off)",
                                   c == OPT_FSDP_LIMIT ? "limit-all-gathers" : "forward-prefetch", a);
        if (c == OPT_FSDP_LIMIT) s->train.fsdp1.no_limit = strcmp(a, "off") == 0;
        else s->train.fsdp1.fwd = strcmp(a, "on") == 0;
        break;
    case OPT_FSDP_BWD:
        if ((v = plan_fsdp_bwd_by_name(a)) < 0)
            return cli_usage_error("unknown --fsdp-backward-prefetch '%s' (valid: pre, post, none)", a);
        s->train.fsdp1.bwd = (FsdpBwdPrefetch)v;
        break;
    case OPT_FSDP:
        if (strcmp(a, "1") != 0 && strcmp(a, "2") != 0)
            return cli_usage_error("unknown --fsdp '%s' (valid: 1, 2)", a);
        s->train.fsdp_impl = a[0] - '0';
        break;
    case OPT_DROPOUT:
        if (plan_parse_double(a, 0, 0.999, &d)) return cli_usage_error("--dropout '%s' is not a probability in [0, 0.999]", a);
        s->train.dropout = d;
        break;
    case OPT_MOE_IMBALANCE:   /* the model's bound, experts / top-k, is checked in resolve_moe */
        if (plan_parse_double(a, 1, 1e6, &d))
            return cli_usage_error("--moe-imbalance '%s' is not a factor in [1, experts/top-k] (1: balanced routing)", a);
        s->train.moe_imbalance = d;
        break;
    case OPT_LORA:
        if (plan_parse_int(a, 1, 65536, &v)) return cli_usage_error("--lora '%s' is not a rank in [1, 65536] (e.g. 16)", a);
        s->train.ft.rank = (int)v;
        break;
    case OPT_LORA_ALPHA:
        if (plan_parse_double(a, 1e-6, 1e6, &d)) return cli_usage_error("--lora-alpha '%s' is not a number in [1e-6, 1e6] (e.g. 32)", a);
        s->train.ft.alpha = d;
        break;
    case OPT_LORA_DROPOUT:
        if (plan_parse_double(a, 0, 0.999, &d)) return cli_usage_error("--lora-dropout '%s' is not a probability in [0, 0.999]", a);
        s->train.ft.dropout = d;
        break;
    case OPT_LORA_TARGETS:
        if (!a[0] || strlen(a) >= sizeof s->train.ft.targets || strstr(a, ",,") || a[0] == ',' || a[strlen(a) - 1] == ',')
            return cli_usage_error("--lora-targets '%s' is not a comma list of module names (e.g. q_proj,v_proj) or all-linear", a);
        snprintf(s->train.ft.targets, sizeof s->train.ft.targets, "%s", a);
        break;
    case OPT_FREEZE:
        if (plan_freeze_parse(a, &s->train.ft))
            return cli_usage_error("unknown --freeze '%s' (valid: none, embeddings, all-but-last:N with N >= 1)", a);
        break;
    case OPT_QUANT:
        if ((v = plan_quant_by_name(a)) < 0) return cli_usage_error("unknown --quant-base '%s' (valid: none, bf16, int8, nf4)", a);
        s->train.ft.quant = (QuantKind)v;
        break;
    default: return -1;
    }
    return 0;
}

/* A cluster, strategy or output flag: 0 if it was one, -1 if not, 2 after a usage error, 1 for
 * --help. */
static int cluster_option(CliSetup *s, Flags *f, int c, const char *a) {
    long long v;
    double d;
    int isfrac;
    switch (c) {
    case OPT_GPUS:
        if (plan_parse_int(a, 1, 1000000, &v)) return cli_usage_error("--gpus '%s' is not an integer in [1, 1000000]", a);
        s->cluster.gpus = v;
        break;
    case OPT_GPN:
        if (plan_parse_int(a, 1, 1024, &f->gpn)) return cli_usage_error("--gpus-per-node '%s' is not an integer in [1, 1024]", a);
        break;
    case OPT_GPU: {
        const GpuPreset *g = plan_gpu_by_name(a);
        if (!g) return cli_usage_error("unknown --gpu '%s' (valid: %s)", a, plan_gpu_names());
        s->cluster.gpu = *g;
        break;
    }
    case OPT_GPU_MEM:
        if (plan_parse_size(a, &f->gpu_mem) || f->gpu_mem < 64 * MIB || f->gpu_mem > 1024 * GIB)
            return cli_usage_error("--gpu-mem '%s' is not a size between 64MiB and 1TiB (e.g. 24GiB; G and GiB are 2^30 bytes, GB 10^9)", a);
        break;
    case OPT_STRATEGY:
        if (set_strategies(s, a)) return 2;
        break;
    case OPT_BUCKET_VIEW: s->train.grad_as_bucket_view = 1; break;
    case OPT_SYNCBN: s->train.syncbn = 1; break;
    case OPT_CTX:
        if (cli_bare_number(a)) return cli_usage_error("--cuda-context '%s' needs a unit (e.g. 512MiB; a bare number would be bytes)", a);
        if (plan_parse_size(a, &d) || d > 64 * GIB) return cli_usage_error("--cuda-context '%s' is not a size up to 64GiB (e.g. 600MiB)", a);
        s->cluster.cuda_context = d;
        break;
    case OPT_CUBLAS:
        if (cli_bare_number(a)) return cli_usage_error("--cublas-ws '%s' needs a unit (e.g. 32MiB; a bare number would be bytes)", a);
        if (plan_parse_size(a, &f->cublas_ws) || f->cublas_ws > 64 * GIB) return cli_usage_error("--cublas-ws '%s' is not a size up to 64GiB (e.g. 32MiB)", a);
        break;
    case OPT_NCCL:
        if (cli_bare_number(a)) return cli_usage_error("--nccl-mem '%s' needs a unit (e.g. 1GiB; a bare number would be bytes)", a);
        if (plan_parse_size(a, &d) || d > 64 * GIB) return cli_usage_error("--nccl-mem '%s' is not a size up to 64GiB (e.g. 1GiB)", a);
        s->cluster.nccl_per_comm = d;
        break;
    case OPT_MARGIN:
        s->cluster.alloc_model = strcmp(a, "allocator") == 0;
        if (s->cluster.alloc_model) break;
        if (strcmp(a, "flat") == 0) {
            s->cluster.alloc_margin = PLAN_ALLOC_MARGIN_FRAC;
            s->cluster.margin_is_frac = 1;
            break;
        }
        if (cli_bare_number(a)) return cli_usage_error("--alloc-margin '%s' needs a unit: a percentage (5%%) or a size (512MiB); or allocator, flat", a);
        if (plan_parse_size_or_percent(a, &d, &isfrac) || (!isfrac && d > 64 * GIB) || (isfrac && d > 0.9))
            return cli_usage_error("--alloc-margin '%s' is not allocator, flat, a percentage up to 90%% or a size up to 64GiB", a);
        s->cluster.alloc_margin = d;
        s->cluster.margin_is_frac = isfrac;
        break;
    case OPT_ALLOC_CONF: f->alloc_conf = a; break;
    case OPT_MFU:
        if (plan_parse_double(a, 0.01, 1, &d)) return cli_usage_error("--mfu '%s' is not a fraction in [0.01, 1]", a);
        s->cluster.mfu = d;
        break;
    case OPT_TIME_SHARES: {
        char err[256];
        if (plan_time_shares_parse(a, &s->cluster.shares, err, sizeof err)) return cli_usage_error("%s", err);
        break;
    }
    case OPT_INTRA_BW:
        if (plan_parse_double(a, 0.001, 100000, &d)) return cli_usage_error("--intra-bw '%s' is not a bandwidth in GB/s in [0.001, 100000]", a);
        f->intra_bw = d;
        break;
    case OPT_INTER_BW:
        if (plan_parse_double(a, 0.001, 100000, &d)) return cli_usage_error("--inter-bw '%s' is not a bandwidth in GB/s in [0.001, 100000]", a);
        f->inter_bw = d;
        break;
    case OPT_NICS:
        if (plan_parse_double(a, 1, 64, &d) || d != floor(d)) return cli_usage_error("--nics '%s' is not a whole number of NICs per node in [1, 64]", a);
        f->nics = (int)d;
        break;
    case OPT_LATENCY:
        if (plan_parse_double(a, 0, 10000, &d)) return cli_usage_error("--latency '%s' is not a latency in microseconds in [0, 10000]", a);
        f->latency_us = d;
        break;
    case OPT_JSON: s->json = 1; s->json_path = a; break;
    case OPT_HELP: case 'h': return 1;   /* --help, -h */
    default: return -1;
    }
    return 0;
}

/* The options getopt sees (the shared ones, then the command's) and which were given. */
typedef struct {
    struct option opts[128];
    const char *seen[128];    /* per option: its value ("" for a switch), NULL if not given */
} OptSet;

static void option_set(OptSet *o, const CliExtra *extra) {
    int n = 0;
    memset(o, 0, sizeof *o);
    for (const struct option *p = BASE_OPTIONS; p->name; p++) o->opts[n++] = *p;
    if (extra && extra->options)
        for (const struct option *p = extra->options; p->name && n < 127; p++) o->opts[n++] = *p;
}

/* One getopt pass over argv into s and f, from their defaults. 0, 1 (--help) or 2. */
static int parse_pass(int argc, char **argv, const char *cmd, CliSetup *s, Flags *f, const CliExtra *extra, OptSet *o) {
    memset(s, 0, sizeof(*s));
    memset(o->seen, 0, sizeof o->seen);
    plan_train_defaults(&s->train);
    plan_cluster_defaults(&s->cluster);
    s->cluster.alloc_model = 1;   /* the plan's allocator figure: the model's replay of the step */
    s->strategies = (1u << STRAT_COUNT) - 1;
    *f = (Flags){.gpu_mem = -1, .cublas_ws = -1, .latency_us = -1, .units = 32};
    char err[512];
    optind = 1;
    opterr = 0;
    int c, li;
    while ((li = -1, c = getopt_long(argc, argv, ":h", o->opts, &li)) != -1) {
        const char *a = optarg;
        if (li >= 0) {   /* a flag given twice would win silently; a value that is a flag was forgotten */
            if (o->seen[li])
                return cli_usage_error("--%s given twice ('%s' and '%s'): give it once", o->opts[li].name,
                                       *o->seen[li] ? o->seen[li] : "on", a ? a : "on");
            o->seen[li] = a ? a : "";
            if (li < CLI_GIVEN_MAX && li < (int)(sizeof BASE_OPTIONS / sizeof BASE_OPTIONS[0]) - 1) s->given[li] = o->seen[li];
            if (o->opts[li].has_arg == required_argument && a[0] == '-' && a[1] == '-')
                return cli_usage_error("--%s needs a value (got the option '%s')", o->opts[li].name, a);
        }
        int done = train_option(s, f, c, a);
        if (done < 0) done = cluster_option(s, f, c, a);
        if (done >= 0) {
            if (done) return done;
            continue;
        }
        switch (c) {
        case ':': return cli_usage_error("%s needs a value (see 'memplan %s --help')", argv[optind - 1], cmd);
        case '?':
            return cli_usage_error("unknown option '%s' (see 'memplan %s --help')", argv[optind - 1], cmd);
        default:
            if (extra && extra->handle) {
                int rc = extra->handle(extra->ctx, c, a, err, sizeof(err));
                if (rc < 0) return cli_usage_error("%s", err);
                if (rc == 0) break;
            }
            return cli_usage_error("unhandled option '%s'", argv[optind - 1]);
        }
    }
    if (optind < argc) {
        int bare_json = 0;   /* `--json out.json`: the file belongs after '=' */
        for (int i = 1; i < optind; i++) bare_json |= strcmp(argv[i], "--json") == 0;
        return cli_usage_error("unexpected argument '%s' (see 'memplan %s --help')%s", argv[optind], cmd,
                               bare_json ? ": --json writes to standard output, --json=FILE to a file" : "");
    }
    return 0;
}

/* The command line's value of option `flag` (cli_config_merge's lookup), NULL if not given. */
static const char *seen_value(const char *flag, const void *ctx) {
    const OptSet *o = ctx;
    for (int i = 0; o->opts[i].name; i++)
        if (strcmp(o->opts[i].name, flag) == 0) return o->seen[i];
    return NULL;
}

/* --config: reads the file with what the command line fixed (o: its options), then parses the
 * file's flags the command line does not give, followed by the command line. 0 or 2. */
static int config_pass(int argc, char **argv, const char *cmd, CliSetup *s, Flags *f, const CliExtra *extra, OptSet *o) {
    const char *path = cli_setup_given(s, "config"), *kind = cli_setup_given(s, "config-kind");
    int k = -1;
    if (!extra || !extra->config_ok)
        return cli_usage_error("--config is read by plan and auto: %s takes memplan's own flags (see what %s amounts "
                               "to with 'memplan plan --config %s --model ...')", cmd, path, path);
    if (kind && (k = cli_config_kind_by_name(kind)) < 0)
        return cli_usage_error("unknown --config-kind '%s' (valid: %s)", kind, cli_config_kind_names());
    CfgKnown known = {cli_setup_given(s, "gpus") ? s->cluster.gpus : 0, cli_setup_given(s, "batch") ? s->train.micro_batch : 0,
                      cli_setup_given(s, "grad-accum") ? s->train.grad_accum : 0, f->gpn,
                      cli_setup_given(s, "tp") ? s->train.tp : 0, cli_setup_given(s, "pp") ? s->train.pp : 0,
                      cli_setup_given(s, "precision"), s->model_arg, 0, 0, s->cluster.gpu.name,
                      s->cluster.gpu.peak_tflops[PEAK_BF16] > 0};
    CliConfig *c = calloc(1, sizeof *c);
    char err[1024];
    if (!c) return cli_usage_error("out of memory reading --config %s", path);
    if (cli_config_read(c, path, k, &known, err, sizeof err)) {
        cli_config_free(c);
        free(c);
        return cli_usage_error("%s", err);
    }
    if (cli_config_merge(c, seen_value, o, strcmp(cmd, "auto") == 0, err, sizeof err)) {
        cli_config_free(c);
        free(c);
        return cli_usage_error("%s", err);
    }
    cli_config_warn(stderr, c);
    char **av = malloc(((size_t)argc + (size_t)c->argc + 1) * sizeof *av);
    if (!av) { cli_config_free(c); free(c); return cli_usage_error("out of memory reading --config %s", path); }
    av[0] = argv[0];
    memcpy(av + 1, c->argv, (size_t)c->argc * sizeof *av);
    memcpy(av + 1 + c->argc, argv + 1, (size_t)(argc - 1) * sizeof *av);
    av[argc + c->argc] = NULL;
    active_config = c;
    int rc = parse_pass(argc + c->argc, av, cmd, s, f, extra, o);
    free(av);   /* the values given[] keeps point into argv's and c's strings, not into av */
    s->config = c;
    return rc;
}

int cli_parse_setup(int argc, char **argv, const char *cmd, CliSetup *s, const CliExtra *extra,
                    int need_model) {
    OptSet o;
    Flags f;
    option_set(&o, extra);
    int rc = parse_pass(argc, argv, cmd, s, &f, extra, &o);
    if (rc) return rc;
    if (cli_setup_given(s, "config-kind") && !cli_setup_given(s, "config"))
        return cli_usage_error("--config-kind %s needs --config FILE", cli_setup_given(s, "config-kind"));
    OptSet cmdline = o;   /* what the command line gave, for the messages after the file's flags join it */
    if (cli_setup_given(s, "config") && (rc = config_pass(argc, argv, cmd, s, &f, extra, &o))) {
        cli_setup_free(s);
        return rc;
    }
    rc = resolve(s, &f, need_model);
    char err[1024];
    double hs[3];
    if (!rc && s->config && s->config->hidden_auto) {   /* DeepSpeed sizes "auto": from the model's hidden size */
        if (cli_config_hidden(s->config, s->have_model ? s->model.d_model : 0, seen_value, &cmdline, hs, err, sizeof err))
            rc = cli_usage_error("%s", err);
        double *to[3] = {&s->train.ds.reduce_bucket, &s->train.ds.prefetch, &s->train.ds.persist};
        for (int i = 0; i < 3 && !rc; i++)
            if (hs[i] >= 0) *to[i] = hs[i] < 1 ? 1 : hs[i];
    }
    if (!rc && s->config && s->have_model &&
        cli_config_model_check(s->config, plan_pp_blocks(&s->model), s->model.d_model, s->model.name, err, sizeof err)) {
        active_config = NULL;
        rc = cli_usage_error("%s", err);
    }
    long long tp_pp = (long long)(s->train.tp > 1 ? s->train.tp : 1) * (s->train.pp > 1 ? s->train.pp : 1);
    if (!rc && s->config && cli_config_check(s->config, s->train.micro_batch, s->train.grad_accum,
                                             s->cluster.gpus, tp_pp, seen_value, &cmdline, err, sizeof err)) {
        active_config = NULL;   /* the message names its sources itself */
        rc = cli_usage_error("%s", err);
    }
    if (!rc) rc = resolve_tp(s, strcmp(cmd, "validate") != 0);
    if (!rc) rc = resolve_pp(s, cmd);
    if (!rc) rc = resolve_dims(s, cmd);
    if (!rc) no_effect_notes(s, &cmdline);
    if (rc) cli_setup_free(s);    /* a model loaded before a later error is not leaked */
    return rc;
}

void cli_setup_notes(FILE *f, const CliSetup *s) {
    if (s->seq_context > 0)
        fprintf(f, "# seq %lld: memplan's default, min(the model's context %lld, %d); give --seq to plan another\n",
                (long long)s->train.seq, s->seq_context, CLI_DEFAULT_SEQ_MAX);
}

void cli_setup_notes_json(cJSON *report, const CliSetup *s) {
    cJSON *t = cJSON_GetObjectItem(report, "train");
    if (s->seq_context > 0 && t) {
        cJSON_AddStringToObject(t, "seq_from", "default: min(context, 4096)");
        cJSON_AddNumberToObject(t, "model_context", (double)s->seq_context);
    }
}

void cli_setup_free(CliSetup *s) {
    if (s->have_model) plan_model_free(&s->model);
    s->have_model = 0;
    if (s->config) {
        cli_config_free(s->config);
        free(s->config);
    }
    s->config = NULL;
    active_config = NULL;
}
