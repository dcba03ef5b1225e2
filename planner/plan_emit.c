/* plan_emit.c — what `memplan auto --emit` prints for its pick (plan_emit.h): a DeepSpeed config,
 * or a torchrun command with the wrapping snippet (each dimension adds its own lines: the
 * trainable subset, plan_dim_ft.c; the tensor-parallel mesh, plan_dim_tp.c), and memplan's
 * prediction as '#' lines. */
#include "plan_emit.h"

#include <cjson/cJSON.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "plan_dim_ft.h"
#include "plan_dim_tp.h"
#include "plan_util.h"

/* The Hugging Face transformer block class of each family (ModelSpec.family, the config's
   model_type; the zoo's by their family too). */
static const struct { const char *family, *module, *cls; } BLOCKS[] = {
    {"gpt2", "gpt2", "GPT2Block"}, {"llama", "llama", "LlamaDecoderLayer"},
    {"mistral", "mistral", "MistralDecoderLayer"}, {"qwen2", "qwen2", "Qwen2DecoderLayer"},
    {"gemma", "gemma", "GemmaDecoderLayer"}, {"gpt_neox", "gpt_neox", "GPTNeoXLayer"},
    {"opt", "opt", "OPTDecoderLayer"}, {"bert", "bert", "BertLayer"}, {"t5", "t5", "T5Block"},
    {"qwen3", "qwen3", "Qwen3DecoderLayer"}, {"gemma2", "gemma2", "Gemma2DecoderLayer"},
    {"gemma3_text", "gemma3", "Gemma3DecoderLayer"}, {"phi3", "phi3", "Phi3DecoderLayer"},
    {"olmo2", "olmo2", "Olmo2DecoderLayer"}, {"granite", "granite", "GraniteDecoderLayer"},
    {"smollm3", "smollm3", "SmolLM3DecoderLayer"}, {"starcoder2", "starcoder2", "Starcoder2DecoderLayer"},
    {"mixtral", "mixtral", "MixtralDecoderLayer"}, {"qwen2_moe", "qwen2_moe", "Qwen2MoeDecoderLayer"},
    {"qwen3_moe", "qwen3_moe", "Qwen3MoeDecoderLayer"}, {"deepseek_v3", "deepseek_v3", "DeepseekV3DecoderLayer"},
    {"gpt_oss", "gpt_oss", "GptOssDecoderLayer"}, {"llama4_text", "llama4", "Llama4TextDecoderLayer"},
};

const char *plan_emit_block_class(const char *family, const char **module) {
    if (module) *module = NULL;
    for (size_t i = 0; i < sizeof(BLOCKS) / sizeof(BLOCKS[0]); i++)
        if (strcmp(family, BLOCKS[i].family) == 0) {
            if (module) *module = BLOCKS[i].module;
            return BLOCKS[i].cls;
        }
    return "BLOCK";
}

/* DeepSpeed stage for each strategy (FSDP rows: the stage that shards the same state). */
static int ds_stage(const AutoResult *r) {
    static const int STAGE[STRAT_COUNT] = {0, 1, 2, 3, 3, 2, 3};
    return r->train.offload == OFFLOAD_PARAM ? 3 : STAGE[r->strategy];
}

char *plan_emit_deepspeed_json(const ModelSpec *m, const ClusterSpec *c, const AutoResult *r) {
    (void)m;
    if (!r->found) return NULL;
    const PrecisionSpec *p = plan_precision(r->train.precision);
    int stage = ds_stage(r);
    cJSON *j = cJSON_CreateObject();
    /* counts are whole numbers: cJSON prints them without a fraction or exponent */
    cJSON_AddNumberToObject(j, "train_batch_size", (double)(r->train.micro_batch * r->train.grad_accum * c->gpus));
    cJSON_AddNumberToObject(j, "train_micro_batch_size_per_gpu", (double)r->train.micro_batch);
    cJSON_AddNumberToObject(j, "gradient_accumulation_steps", (double)r->train.grad_accum);
    cJSON *z = cJSON_AddObjectToObject(j, "zero_optimization");
    cJSON_AddNumberToObject(z, "stage", stage);
    if (stage > 0) {
        const DsKnobs *u = &r->train.ds;   /* what the user set, beside DeepSpeed's defaults */
        DsKnobs k = plan_ds_knobs(&r->train);
        cJSON_AddNumberToObject(z, "reduce_bucket_size", (double)(int64_t)k.reduce_bucket);
        cJSON_AddBoolToObject(z, "overlap_comm", u->overlap_comm ? u->overlap_comm == 1 : stage == 3);
        cJSON_AddBoolToObject(z, "contiguous_gradients", 1);
        if (stage == 3) {
            static const struct { const char *key; size_t off; } S3[] = {
                {"stage3_prefetch_bucket_size", offsetof(DsKnobs, prefetch)},
                {"stage3_max_live_parameters", offsetof(DsKnobs, max_live)},
                {"stage3_max_reuse_distance", offsetof(DsKnobs, max_reuse)},
                {"stage3_param_persistence_threshold", offsetof(DsKnobs, persist)},
            };
            for (size_t i = 0; i < sizeof S3 / sizeof S3[0]; i++)
                if (*(const double *)((const char *)u + S3[i].off) > 0)
                    cJSON_AddNumberToObject(z, S3[i].key, (double)(int64_t) * (const double *)((const char *)&k + S3[i].off));
        }
    }
    if (r->train.offload != OFFLOAD_NONE) {   /* offload_config.py: device, pin_memory */
        cJSON *oo = cJSON_AddObjectToObject(z, "offload_optimizer");
        cJSON_AddStringToObject(oo, "device", "cpu");
        cJSON_AddBoolToObject(oo, "pin_memory", 1);
    }
    if (r->train.offload == OFFLOAD_PARAM) {
        cJSON *op = cJSON_AddObjectToObject(z, "offload_param");
        cJSON_AddStringToObject(op, "device", "cpu");
        cJSON_AddBoolToObject(op, "pin_memory", 1);
    }
    /* mixed-*: DeepSpeed's own fp16/bf16 (16-bit model, fp32 master in the optimizer); amp-*:
       DeepSpeed's torch_autocast (fp32 model, autocast compute); bf16: DeepSpeed's bf16 */
    if (p->autocast) {
        cJSON *ac = cJSON_AddObjectToObject(j, "torch_autocast");
        cJSON_AddBoolToObject(ac, "enabled", 1);
        cJSON_AddStringToObject(ac, "dtype", p->peak == PEAK_FP16 ? "torch.float16" : "torch.bfloat16");
    } else if (p->peak != PEAK_FP32) {
        cJSON *d = cJSON_AddObjectToObject(j, p->peak == PEAK_FP16 ? "fp16" : "bf16");
        cJSON_AddBoolToObject(d, "enabled", 1);
        if (p->master_bytes == 0 && p->peak == PEAK_BF16 && stage > 0) {
            /* pure bf16: no fp32 master, bf16 Adam moments (precision_config.py; ZeRO 1-3 only,
               config.py); without these keys "bf16" alone is mixed-bf16 with an fp32 master */
            cJSON_AddBoolToObject(d, "bf16_master_weights_and_grads", 1);
            cJSON_AddBoolToObject(d, "bf16_optimizer_states", 1);
        }
    }
    const OptimizerSpec *o = plan_optimizer(r->train.optimizer);
    cJSON *opt = cJSON_AddObjectToObject(j, "optimizer");
    cJSON_AddStringToObject(opt, "type", strcmp(o->name, "adamw") == 0 ? "AdamW" : strcmp(o->name, "adam") == 0 ? "Adam" : "SGD");
    cJSON *pp = cJSON_AddObjectToObject(opt, "params");
    cJSON_AddNumberToObject(pp, "lr", 1e-4);
    if (r->train.optimizer == OPT_SGD_MOMENTUM) cJSON_AddNumberToObject(pp, "momentum", 0.9);
    if (r->train.act_ckpt == CKPT_FULL) {   /* for models that use deepspeed.checkpointing */
        cJSON *ac = cJSON_AddObjectToObject(j, "activation_checkpointing");
        cJSON_AddBoolToObject(ac, "partition_activations", 0);
        cJSON_AddBoolToObject(ac, "contiguous_memory_optimization", 0);
    }
    char *txt = cJSON_Print(j);
    cJSON_Delete(j);
    return txt;
}

void plan_emit_prediction(FILE *f, const ClusterSpec *c, const AutoResult *r) {
    if (!r->found) return;
    char a1[32], a2[32], a3[32], nm[96];
    char tm[96];
    if (r->time_known) snprintf(tm, sizeof tm, "step %.1f ms, %.0f tokens/s", r->time.step_s * 1e3, r->time.tokens_per_s);
    else snprintf(tm, sizeof tm, "communication %.1f ms per step (step time not known)", r->comm_s * 1e3);
    fprintf(f, "# memplan prediction for %s: peak %s per GPU (headroom %s), host %s per node; %s on %lld x %s\n",
            plan_auto_setup_name(r->strategy, &r->train, nm, sizeof(nm)),
            plan_fmt_bytes(r->mem.peak, a1, sizeof(a1)), plan_fmt_bytes(r->mem.headroom, a2, sizeof(a2)),
            plan_fmt_bytes(r->mem.host_per_node, a3, sizeof(a3)), tm, (long long)c->gpus, c->gpu.name);
    if (!plan_strategy_is_deepspeed(r->strategy))
        fprintf(f, "# the pick is %s (PyTorch); this config is the ZeRO stage that shards the same state, "
                "and memplan's figures above are for %s (--emit torch for its snippet)\n",
                plan_strategy(r->strategy)->name, plan_strategy(r->strategy)->name);
}


/* Activation checkpointing before wrapping: a Hugging Face model's own switch for full
   checkpointing, else checkpoint_wrapper on the blocks it covers (every block, or blocks N, 2N,
   ...; plan_act_checkpointed). */
static void torch_ckpt(FILE *f, const TrainSpec *t, const char *blk, int hf) {
    if (t->act_ckpt == CKPT_NONE) return;
    if (t->act_ckpt == CKPT_SELECTIVE) {   /* the attention function transformers calls, checkpointed */
        fprintf(f, "import importlib\n"
                   "from torch.utils.checkpoint import checkpoint\n"
                   "from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS\n"
                   "def _core(orig):  # act-ckpt selective: Megatron's core-attention recompute\n"
                   "    def f(module, q, k, v, mask, **kw):\n"
                   "        return checkpoint(lambda q, k, v, mask: orig(module, q, k, v, mask, **kw)[0], q, k, v, mask,\n"
                   "                          use_reentrant=False), None\n"
                   "    return f\n"
                   "_mod = importlib.import_module(%s.__module__)\n"
                   "_mod.eager_attention_forward = _core(_mod.eager_attention_forward)\n"
                   "ALL_ATTENTION_FUNCTIONS[\"sdpa\"] = _core(ALL_ATTENTION_FUNCTIONS[\"sdpa\"])\n", blk);
        return;
    }
    if (t->act_ckpt == CKPT_OP) {   /* torchtitan's SelectiveAC policy (plan_act_proj_saved) */
        fprintf(f, "from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import (\n"
                   "    apply_activation_checkpointing, checkpoint_wrapper, CheckpointImpl)\n"
                   "from torch.utils.checkpoint import CheckpointPolicy, create_selective_checkpoint_contexts\n"
                   "from torch._functorch.partitioners import get_default_op_list\n"
                   "def _op_policy():  # torchtitan/distributed/activation_checkpoint.py SelectiveAC\n"
                   "    aten = torch.ops.aten\n"
                   "    save = {o.default for o in get_default_op_list().compute_intensive_ops} | {\n"
                   "        aten._scaled_dot_product_cudnn_attention.default, aten._scaled_dot_product_attention_math.default,\n"
                   "        aten._scaled_dot_product_fused_attention_overrideable.default, aten.max.default,\n"
                   "        aten.linear.default, aten.topk.default}\n"
                   "    mm, n = (aten.mm.default, aten.linear.default), {False: 0, True: 0}\n"
                   "    def policy(ctx, func, *args, **kwargs):  # every second mm recomputed\n"
                   "        n[ctx.is_recompute] += func in mm\n"
                   "        if func in save and not (func in mm and n[ctx.is_recompute] %% 2 == 0):\n"
                   "            return CheckpointPolicy.MUST_SAVE\n"
                   "        return CheckpointPolicy.PREFER_RECOMPUTE\n"
                   "    return policy\n"
                   "apply_activation_checkpointing(model, checkpoint_wrapper_fn=functools.partial(\n"
                   "    checkpoint_wrapper, checkpoint_impl=CheckpointImpl.NO_REENTRANT,\n"
                   "    context_fn=lambda: create_selective_checkpoint_contexts(_op_policy())),\n"
                   "    check_fn=lambda m: isinstance(m, %s))  # act-ckpt op\n", blk);
        return;
    }
    if (t->act_ckpt == CKPT_FULL && hf) {
        fprintf(f, "model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={\"use_reentrant\": False})  # act-ckpt full\n");
        return;
    }
    fprintf(f, "from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import (\n"
               "    apply_activation_checkpointing, checkpoint_wrapper, CheckpointImpl)\n");
    int every = t->act_ckpt == CKPT_EVERY && t->ckpt_every > 1;
    if (every)
        fprintf(f, "ckpt = {id(b) for i, b in enumerate(m for m in model.modules() if isinstance(m, %s)) if (i + 1) %% %d == 0}\n",
                blk, t->ckpt_every);
    fprintf(f, "apply_activation_checkpointing(model, checkpoint_wrapper_fn=functools.partial(\n"
               "    checkpoint_wrapper, checkpoint_impl=CheckpointImpl.NO_REENTRANT),\n"
               "    check_fn=lambda m: %s%s%s)  # act-ckpt %s\n",
            every ? "id(m) in ckpt" : "isinstance(m, ", every ? "" : blk, every ? "" : ")",
            every ? "every:N (blocks N, 2N, ...)" : "full");
}

/* FSDP2 (fully_shard), what memplan plans by default (--fsdp 2): each block, then the root (at
   its default reshard_after_forward, as plan_fsdp.c models it); the mesh is 2-D for
   HYBRID_SHARD (replicate across nodes, shard inside one); MixedPrecisionPolicy(param bf16/fp16,
   reduce fp32) over fp32 shards for the fp32-master regimes; CPUOffloadPolicy for param offload. */
static void torch_fsdp2(FILE *f, const ClusterSpec *c, const AutoResult *r, const char *blk, const char *dt) {
    const PrecisionSpec *p = plan_precision(r->train.precision);
    int64_t nodes = plan_cluster_nodes(c);
    fprintf(f, "from torch.distributed.fsdp import fully_shard%s%s\n"
               "from torch.distributed.device_mesh import init_device_mesh\n",
            p->master_bytes > 0 ? ", MixedPrecisionPolicy" : "", r->train.offload == OFFLOAD_PARAM ? ", CPUOffloadPolicy" : "");
    if (r->strategy == STRAT_FSDP_HYBRID && nodes > 1)
        fprintf(f, "mesh = init_device_mesh(\"cuda\", (%lld, %lld), mesh_dim_names=(\"replicate\", \"shard\"))  # HYBRID_SHARD\n",
                (long long)nodes, (long long)c->gpus_per_node);
    else if (plan_tp_degree(&r->train) > 1)   /* the dp dimension of torch_tp's 2-D mesh */
        fprintf(f, "mesh = mesh2d[\"dp\"]\n");
    else
        fprintf(f, "mesh = init_device_mesh(\"cuda\", (%lld,))\n", (long long)c->gpus);
    fprintf(f, "kw = dict(mesh=mesh");
    if (p->master_bytes > 0)   /* fp32 shards as the master weights, 16-bit gathers, fp32 reductions */
        fprintf(f, ", mp_policy=MixedPrecisionPolicy(param_dtype=%s, reduce_dtype=torch.float32)", dt);
    if (r->train.offload == OFFLOAD_PARAM) fprintf(f, ", offload_policy=CPUOffloadPolicy()");
    fprintf(f, ")\n");
    fprintf(f, "for block in [m for m in model.modules() if isinstance(m, %s)]:\n"
               "    fully_shard(block, reshard_after_forward=%s, **kw)%s\n"
               "fully_shard(model, **kw)  # the root: kept unsharded from forward to backward\n",
            blk, r->strategy == STRAT_FSDP_GRAD_OP ? "False" : "True",
            r->strategy == STRAT_FSDP_GRAD_OP ? "  # SHARD_GRAD_OP" : "");
    if (r->train.grad_accum > 1 && r->train.fsdp_grad_sync == FSDP_SYNC_LAST)
        fprintf(f, "# each micro-step: model.set_requires_gradient_sync(is_last_micro_step)  # --fsdp-grad-sync last\n");
}

/* FSDP1 (FullyShardedDataParallel, --fsdp 1): the flat-parameter wrapper with auto-wrap. */
static void torch_fsdp1(FILE *f, const AutoResult *r, const char *blk, const char *dt) {
    const PrecisionSpec *p = plan_precision(r->train.precision);
    const char *ss = r->strategy == STRAT_FSDP_FULL ? "FULL_SHARD" : r->strategy == STRAT_FSDP_GRAD_OP ? "SHARD_GRAD_OP" : "HYBRID_SHARD";
    const FsdpKnobs *k = &r->train.fsdp1;
    static const char *const BWD[] = {"BackwardPrefetch.BACKWARD_PRE", "BackwardPrefetch.BACKWARD_POST", "None"};
    fprintf(f, "from torch.distributed.fsdp import FullyShardedDataParallel as FSDP, ShardingStrategy, MixedPrecision, CPUOffload%s\n"
               "from torch.distributed.fsdp.wrap import %s\n",
            k->bwd == FSDP_BWD_POST ? ", BackwardPrefetch" : "",
            k->min_params > 0 ? "size_based_auto_wrap_policy" : "transformer_auto_wrap_policy");
    if (k->min_params > 0)
        fprintf(f, "model = FSDP(model, sharding_strategy=ShardingStrategy.%s,\n"
                   "             auto_wrap_policy=functools.partial(size_based_auto_wrap_policy, min_num_params=%.0f),\n",
                ss, k->min_params);
    else
        fprintf(f, "model = FSDP(model, sharding_strategy=ShardingStrategy.%s,\n"
                   "             auto_wrap_policy=functools.partial(transformer_auto_wrap_policy, transformer_layer_cls={%s}),\n",
                ss, blk);
    if (k->bwd != FSDP_BWD_PRE) fprintf(f, "             backward_prefetch=%s,\n", BWD[k->bwd]);
    if (k->fwd) fprintf(f, "             forward_prefetch=True,\n");
    if (p->master_bytes > 0)
        fprintf(f, "             mixed_precision=MixedPrecision(param_dtype=%s, reduce_dtype=%s, buffer_dtype=%s),\n", dt, dt, dt);
    if (r->train.offload == OFFLOAD_PARAM) fprintf(f, "             cpu_offload=CPUOffload(offload_params=True),\n");
    fprintf(f, "             device_id=local_rank, limit_all_gathers=%s, sync_module_states=True)"
               "  # load weights on rank 0 only\n", k->no_limit ? "False" : "True");
    if (r->train.grad_accum > 1 && r->train.fsdp_grad_sync == FSDP_SYNC_LAST)
        fprintf(f, "# non-final micro-steps under `with model.no_sync():`  # --fsdp-grad-sync last\n");
}

void plan_emit_deepspeed_code(FILE *f, const ModelSpec *m, const AutoResult *r) {
    const char *mod, *blk = plan_emit_block_class(m->family, &mod);
    int transformer = m->arch == ARCH_DECODER || m->arch == ARCH_ENCODER || m->arch == ARCH_ENC_DEC;
    int ck = r->train.act_ckpt != CKPT_NONE && r->train.act_ckpt != CKPT_FULL;
    if (!plan_finetune_on(&r->train.ft) && !ck) return;
    fprintf(f, "# the config cannot hold %s: in train.py, before deepspeed.initialize:\n",
            plan_finetune_on(&r->train.ft) && ck ? "the trainable subset and the checkpointing" : ck ? "the checkpointing"
            : "the trainable subset");
    fprintf(f, "import functools, torch\n");
    if (mod && transformer) fprintf(f, "from transformers.models.%s.modeling_%s import %s\n", mod, mod, blk);
    plan_ft_emit_code(f, m, &r->train, r->strategy);
    if (ck) torch_ckpt(f, &r->train, blk, 0);
}

void plan_emit_torch(FILE *f, const ModelSpec *m, const ClusterSpec *c, const AutoResult *r, const char *alloc_env) {
    if (!r->found) { fprintf(f, "# nothing fits: no launch configuration\n"); return; }
    int64_t nodes = plan_cluster_nodes(c);
    /* the allocator settings the plan replayed: the same environment for the job */
    fprintf(f, "%s%s%storchrun --nnodes %lld --nproc-per-node %lld%s train.py --micro-batch %lld --grad-accum %lld\n",
            alloc_env ? "" : "", alloc_env ? alloc_env : "", alloc_env ? " " : "", (long long)nodes, (long long)c->gpus_per_node,
            nodes > 1 ? " --rdzv-backend c10d --rdzv-endpoint $MASTER_ADDR:29500" : "",
            (long long)r->train.micro_batch, (long long)r->train.grad_accum);
    const PrecisionSpec *p = plan_precision(r->train.precision);
    const char *dt = p->peak == PEAK_BF16 ? "torch.bfloat16" : p->peak == PEAK_FP16 ? "torch.float16" : "torch.float32";
    const char *mod, *blk = plan_emit_block_class(m->family, &mod);
    int transformer = m->arch == ARCH_DECODER || m->arch == ARCH_ENCODER || m->arch == ARCH_ENC_DEC;
    int bn = plan_model_bn_layers(m, NULL) > 0 && c->gpus > 1 && r->train.micro_batch < 16;
    int fsdp = r->strategy == STRAT_FSDP_FULL || r->strategy == STRAT_FSDP_GRAD_OP || r->strategy == STRAT_FSDP_HYBRID;
    int fsdp1 = fsdp && r->train.fsdp_impl == 1;
    fprintf(f, "# in train.py, after dist.init_process_group(\"nccl\") and torch.cuda.set_device(local_rank):\n");
    fprintf(f, "import functools, torch\n");
    if (mod && transformer) fprintf(f, "from transformers.models.%s.modeling_%s import %s\n", mod, mod, blk);
    else if (!strcmp(blk, "BLOCK")) fprintf(f, "BLOCK = ...  # your model's repeated block class (the unit of sharding and checkpointing)\n");
    if (bn) fprintf(f, "model = nn.SyncBatchNorm.convert_sync_batchnorm(model)  # before wrapping\n");
    if (p->master_bytes == 0 && p->param_bytes == 2)   /* pure 16-bit: params, grads and Adam states */
        fprintf(f, "model = model.to(%s)  # --precision %s\n", dt, p->name);
    plan_ft_emit_code(f, m, &r->train, r->strategy);   /* the trainable subset, before wrapping */
    if (!fsdp1) torch_ckpt(f, &r->train, blk, mod && transformer);   /* before sharding */
    if (plan_tp_degree(&r->train) > 1) plan_tp_emit_torch(f, m, c, &r->train);
    switch (r->strategy) {
    case STRAT_DDP:
        if (plan_tp_degree(&r->train) > 1) {
            if (c->gpus > r->train.tp)
                fprintf(f, "from torch.nn.parallel import DistributedDataParallel as DDP\n"
                           "model = DDP(model, device_mesh=mesh2d[\"dp\"])  # DDP on the dp dimension (not checked on CPU ranks)\n");
            else
                fprintf(f, "# tp = GPUs: no data parallelism, no DDP wrapper\n");
            break;
        }
        fprintf(f, "from torch.nn.parallel import DistributedDataParallel as DDP\n");
        fprintf(f, "model = DDP(model.cuda(), device_ids=[local_rank], bucket_cap_mb=25%s)\n",
                r->train.grad_as_bucket_view ? ", gradient_as_bucket_view=True" : "");
        break;
    case STRAT_FSDP_FULL: case STRAT_FSDP_GRAD_OP: case STRAT_FSDP_HYBRID:
        if (fsdp1) {
            torch_fsdp1(f, r, blk, dt);
            torch_ckpt(f, &r->train, blk, 0);   /* FSDP1's recipe: on the wrapped model */
        } else {
            torch_fsdp2(f, c, r, blk, dt);
        }
        break;
    default:
        fprintf(f, "# ZeRO stage %d%s: use DeepSpeed (memplan auto ... --emit deepspeed > ds_config.json)\n"
                   "import deepspeed\n"
                   "model, optimizer, _, _ = deepspeed.initialize(model=model, model_parameters=model.parameters(), "
                   "config=\"ds_config.json\")\n", ds_stage(r),
                r->train.offload == OFFLOAD_PARAM ? " with offload_optimizer and offload_param on cpu"
                : r->train.offload == OFFLOAD_OPT ? " with offload_optimizer on cpu" : "");
    }
    if (p->autocast && (r->strategy == STRAT_DDP || fsdp))
        fprintf(f, "with torch.autocast(\"cuda\", dtype=%s): loss = model(batch)\n", dt);
}

