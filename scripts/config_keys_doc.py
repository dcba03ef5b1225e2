#!/usr/bin/env python3
"""Writes the key tables of docs/configs.md from cli/cli_config_kinds.c's and cli_config_recipes.c's
tables (what memplan does with each key of a --config file) and the framework sources (where each
key's meaning is defined, file:line): the ground-truth venv's for DeepSpeed, accelerate,
transformers; git snapshots for TRL, LLaMA-Factory and axolotl (not installed there), at the
commits cli_config_recipes.c names. Run after changing a table:

    python3 scripts/config_keys_doc.py [--site-packages DIR] [--mirror DIR]

It rewrites the text between each `<!-- keys:TABLE -->` and `<!-- /keys -->` marker pair of
docs/configs.md and leaves the prose around them as it is.
"""
import argparse
import os
import re
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
VENV = os.path.expanduser("~/.cache/memplan/torch-venv/lib/python3.11/site-packages")

# What each honoured key becomes (the mapping code in cli_config_kinds.c decides; these say it).
HONOURED = {
    "DS_KEYS": {
        "train_batch_size": "checked: = micro-batch x accumulation x GPUs once the GPUs are known; with one of the two missing, DeepSpeed's derivation (config.py `_set_batch_related_parameters`) gives it",
        "train_micro_batch_size_per_gpu": "`--batch`; \"auto\": the launcher's (section \"auto\" above): the recipe's, else `--batch` or auto's search",
        "gradient_accumulation_steps": "`--grad-accum`; \"auto\": the launcher's (accelerate: 1), else `--grad-accum` or auto's search",
        "zero_optimization.stage": "`--strategy zero1|zero2|zero3`; 0 (and absent) is DeepSpeed's own data parallelism: named in the warning, planned as `ddp`; `zero_optimization: true` is stage 1 (DeepSpeed's deprecated spelling), a string or list refused",
        "zero_optimization.reduce_bucket_size": "`--ds-reduce-bucket` (stage 1-3); `\"auto\"`: hidden size squared (the HF Trainer, accelerate)",
        "zero_optimization.stage3_prefetch_bucket_size": "`--ds3-prefetch` (stage 3; elsewhere no effect); `\"auto\"`: int(0.9 h^2)",
        "zero_optimization.prefetch_bucket_size": "`--ds3-prefetch` (the field's own name)",
        "zero_optimization.stage3_max_live_parameters": "`--ds3-max-live` (stage 3)",
        "zero_optimization.max_live_parameters": "`--ds3-max-live`",
        "zero_optimization.stage3_max_reuse_distance": "`--ds3-max-reuse` (stage 3)",
        "zero_optimization.max_reuse_distance": "`--ds3-max-reuse`",
        "zero_optimization.stage3_param_persistence_threshold": "`--ds3-persist` (stage 3); `\"auto\"`: 10 h",
        "zero_optimization.param_persistence_threshold": "`--ds3-persist`",
        "zero_optimization.overlap_comm": "modelled at its default (true for stage 3, else false); the other value is not modelled",
        "zero_optimization.offload_optimizer.device": "`cpu` -> `--offload optimizer`; `none` -> `--offload none`; `nvme` not modelled",
        "zero_optimization.offload_param.device": "`cpu` with offload_optimizer `cpu` -> `--offload params` (stage 3; DeepSpeed ignores it below); alone not modelled (memplan's params offload moves the optimizer too); `nvme` not modelled",
        "zero_optimization.cpu_offload": "deprecated spelling of offload_optimizer `cpu`",
        "zero_optimization.cpu_offload_param": "deprecated spelling of offload_param `cpu`",
        "fp16.enabled": "`--precision mixed-fp16`; \"auto\": the launcher's fp16 / mixed_precision, else `--precision` (fp32, mixed-bf16, mixed-fp16) or auto's search",
        "fp16.fp16_master_weights_and_grads": "true not modelled",
        "bf16.enabled": "`--precision mixed-bf16`; \"auto\": as fp16.enabled",
        "bf16.bf16_master_weights_and_grads": "with bf16_optimizer_states: `--precision bf16` (pure); alone not modelled",
        "bf16.bf16_optimizer_states": "with bf16_master_weights_and_grads: `--precision bf16`",
        "bfloat16.enabled": "old name of bf16.enabled",
        "bfloat16.bf16_master_weights_and_grads": "as bf16.*",
        "bfloat16.bf16_optimizer_states": "as bf16.*",
        "torch_autocast.enabled": "`--precision amp-bf16|amp-fp16` by dtype",
        "torch_autocast.dtype": "bf16 spellings -> amp-bf16, fp16 ones (and none: torch.autocast's CUDA default) -> amp-fp16",
        "optimizer.type": "`--optimizer`: Adam (AdamW unless adam_w_mode false; engine.py), AdamW, SGD (sgd-momentum with momentum > 0); others not modelled",
        "optimizer.params.adam_w_mode": "Adam -> adam when false",
        "optimizer.params.momentum": "SGD -> sgd-momentum when > 0",
    },
    "FSDP_KEYS": {
        "fsdp_config.version": "`--fsdp 1|2` (absent: accelerate 1, the Trainer 2)",
        "fsdp_config.reshard_after_forward": "FSDP2: true -> `fsdp-full`, false -> `fsdp-grad-op`; FSDP1: a sharding strategy name, as sharding_strategy",
        "fsdp_config.sharding_strategy": "FSDP1: FULL_SHARD/1 -> `fsdp-full`, SHARD_GRAD_OP/2 -> `fsdp-grad-op`, HYBRID_SHARD/4 -> `fsdp-hybrid`; NO_SHARD/3 (planned as ddp) and HYBRID_SHARD_ZERO2/5 not modelled; FSDP2: no effect",
        "fsdp_config.offload_params": "`--offload params` / `none`",
        "fsdp_config.cpu_offload": "the Trainer's name: `--offload params` / `none`",
        "fsdp_config.activation_checkpointing": "true -> `--act-ckpt full`",
        "fsdp_config.auto_wrap_policy": "TRANSFORMER_BASED_WRAP is memplan's (each block a unit); FSDP1: SIZE_BASED_WRAP -> `--fsdp-min-params` from min_num_params (0 or absent: accelerate's policy is None, nothing wrapped: as NO_WRAP), NO_WRAP -> `--fsdp-min-params 1e16` (everything in the root unit); FSDP2's SIZE_BASED_WRAP / NO_WRAP not modelled",
        "fsdp_config.min_num_params": "FSDP1 with SIZE_BASED_WRAP: `--fsdp-min-params N` (modelled above a block's parameters, refused at or below in one line); otherwise no effect",
        "fsdp_config.backward_prefetch": "FSDP1: BACKWARD_PRE/1 -> `--fsdp-backward-prefetch pre`, BACKWARD_POST/2 -> `post`, NO_PREFETCH/3 and absent (accelerate's and the Trainer's default) -> `none`; FSDP2: no effect",
        "fsdp_config.forward_prefetch": "FSDP1: `--fsdp-forward-prefetch on|off`; FSDP2: no effect",
        "fsdp_config.use_orig_params": "FSDP1: true (accelerate's and the Trainer's default) modelled, false not yet; FSDP2: no effect",
        "fsdp_config.limit_all_gathers": "FSDP1: `--fsdp-limit-all-gathers on|off`; false is planned as true and named in the warning (the rate limiter only waits on GPU events: on CPU ranks it moves no memory; on GPUs the CPU thread may run ahead and hold more gathered units, which is not modelled); FSDP2: no effect",
    },
    "ACC_KEYS": {
        "distributed_type": "MULTI_GPU/NO -> `--strategy ddp`; FSDP -> fsdp_config (and `--fsdp-grad-sync last`: Accelerator.accumulate's no_sync); DEEPSPEED -> deepspeed_config; others not modelled",
        "mixed_precision": "no -> fp32; fp16/bf16: DDP `amp-*` (autocast), FSDP `mixed-*` (MixedPrecision), DeepSpeed `mixed-*` (its fp16/bf16; the JSON's own stand); fp8 not modelled",
        "num_processes": "`--gpus`",
        "num_machines": "`--gpus-per-node` = num_processes / num_machines",
        "fsdp_config": "read under FSDP (table below); no effect otherwise",
        "deepspeed_config": "read under DEEPSPEED (table below); no effect otherwise",
    },
    "ACC_DS_KEYS": {
        "deepspeed_config.deepspeed_config_file": "the DeepSpeed JSON, read as above (its keys named FILE:key); accelerate refuses zero_stage, the offload devices, gradient_accumulation_steps, gradient_clipping and the nvme paths beside it",
        "deepspeed_config.zero_stage": "`--strategy zero1|zero2|zero3` (absent: 2)",
        "deepspeed_config.offload_optimizer_device": "as zero_optimization.offload_optimizer.device",
        "deepspeed_config.offload_param_device": "as zero_optimization.offload_param.device",
        "deepspeed_config.gradient_accumulation_steps": "`--grad-accum`",
    },
    "TT_KEYS": {
        "training.local_batch_size": "`--batch` (default 8)",
        "training.batch_size": "older name of local_batch_size",
        "training.seq_len": "`--seq` (default 2048)",
        "training.global_batch_size": "`--grad-accum` = global / (local x data-parallel degree) (train.py); -1: 1",
        "training.mixed_precision_param": "bfloat16 (default): FSDP `mixed-bf16`, DDP or one GPU `amp-bf16` (utils.py maybe_enable_amp); float32: fp32",
        "training.dtype": "bfloat16 -> `--precision bf16` (pure)",
        "training.enable_cpu_offload": "`--offload params` under FSDP (CPUOffloadPolicy); else no effect",
        "parallelism.data_parallel_replicate_degree": "with shard 1: `ddp`; with shard > 1: `fsdp-hybrid` and `--gpus-per-node` = the shard degree",
        "parallelism.data_parallel_shard_degree": "> 1: FSDP2 (`--fsdp 2`, `fsdp-full`); -1 (default): the GPUs the others leave, from `--gpus`; the product of the degrees -> `--gpus`",
        "parallelism.fsdp_reshard_after_forward": "default/always -> `fsdp-full`, never -> `fsdp-grad-op` (with HSDP not modelled)",
        "parallelism.tensor_parallel_degree": "`--tp N` with `--sp on` (torchtitan's SequenceParallel norms; a `--tp` on the command line re-derives it) and `--loss-parallel` from `disable_loss_parallel`",
        "parallelism.pipeline_parallel_degree": "`--pp N`; the local batch split into micro-batches (`--batch` = pipeline_parallel_microbatch_size, `--microbatches` = local / it x accumulation steps)",
        "training.mixed_precision_reduce": "float32 (default) is memplan's `--fsdp-reduce-dtype fp32`; bfloat16 under FSDP -> `--fsdp-reduce-dtype bf16` (or fp16: the 16-bit dtype)",
        "parallelism.pipeline_parallel_schedule": "1F1B (default) -> `--pp-schedule 1f1b`, GPipe -> `gpipe`, Interleaved1F1B -> `interleaved` with `--pp-virtual 2` (pipeline_parallel.py: 2 stages per rank for a multi-stage schedule); others named",
        "parallelism.pipeline_parallel_first_stage_less_layers": "under pipeline stages: `--pp-less-first` (default 1: the embedding counted as one block in the split)",
        "parallelism.pipeline_parallel_last_stage_less_layers": "under pipeline stages: `--pp-less-last` (default 1: the norm and head counted as one block)",
        "parallelism.pipeline_parallel_microbatch_size": "under pipeline stages: `--batch` (default 1)",
        "model.name": "llama3 (absent: llama3) with a known flavor: checked against `--model`, or the model; others noted",
        "model.flavor": "a Llama 3 flavor (debugmodel, 8B, 70B, 405B, ...): its blocks and hidden size checked against `--model`; without `--model` it is the model",
        "parallelism.context_parallel_degree": "> 1 -> `--cp N` (ring attention; FSDP2 over dp x cp: torchtitan's dp_shard_cp mesh; estimates, docs/formulas.md \"Context parallel\")",
        "parallelism.expert_parallel_degree": "> 1 -> `--ep N` (the experts split over N of the dp x cp ranks, all-to-all dispatch/combine, FSDP2 on the experts over the rest: docs/formulas.md \"Expert parallel\")",
        "parallelism.expert_tensor_parallel_degree": "with ep 1: no effect (the experts split over tp: torchtitan's TensorParallel); with ep > 1: = tp plans ExpertTensorParallel (`--ep` with `--tp`), 1 under tp (ep borrowing the tp ranks) is refused, other values refused as torchtitan does",
        "activation_checkpoint.mode": "none, full -> `--act-ckpt`; selective (default) -> selective_ac_option; memory_budget not modelled",
        "activation_checkpoint.selective_ac_option": "N -> `--act-ckpt every:N` (blocks N, 2N, ...; 0: full); \"op\" -> `--act-ckpt op` (default \"2\")",
        "parallelism.disable_loss_parallel": "with tensor parallel: --loss-parallel (false, the default: on, the logits stay vocab-sharded; true: off, gathered); without it no effect",
        "optimizer.name": "AdamW -> `adamw`, Adam -> `adam`; others not modelled",
    },
    "HF_KEYS": {
        "per_device_train_batch_size": "`--batch`",
        "gradient_accumulation_steps": "`--grad-accum`",
        "bf16": "DDP `amp-bf16`, FSDP `mixed-bf16`, DeepSpeed `mixed-bf16` (fills bf16.enabled \"auto\")",
        "fp16": "as bf16, with fp16",
        "activation_checkpointing": "true -> `--act-ckpt full`",
        "gradient_checkpointing": "deprecated alias of activation_checkpointing",
        "activation_checkpointing_kwargs.every_n_layers": "N > 1 -> `--act-ckpt every:N`",
        "gradient_checkpointing_kwargs.every_n_layers": "as above",
        "optim": "adamw_torch, adamw_torch_fused -> `adamw`; sgd -> `sgd`/`sgd-momentum`; others not modelled; no effect beside a DeepSpeed optimizer section",
        "optim_args": "sgd: momentum=M; otherwise no effect",
        "deepspeed": "a DeepSpeed config (inline, keys named deepspeed.*, or a path): read as above, \"auto\" filled from these arguments",
        "fsdp": "FSDP (`--fsdp-grad-sync last`: the Trainer's no_sync); legacy words full_shard, shard_grad_op, hybrid_shard, offload, auto_wrap where fsdp_config is silent",
        "fsdp_config": "read under fsdp (FSDP table below); no effect otherwise",
        "accelerator_config.gradient_accumulation_kwargs.sync_each_batch": "true -> `--fsdp-grad-sync every`",
    },
    "TRL_KEYS": {
        "model_name_or_path": "named in a \"no model\" error (memplan reads no hub): give --model its config.json",
        "dtype": "the load dtype: bfloat16 with LoRA -> `--quant-base bf16` (the frozen base stays there), trained whole under DDP -> pure `bf16`; absent: ModelConfig's float32",
        "torch_dtype": "older name of dtype",
        "attn_implementation": "eager -> `--attn eager`; sdpa, flash_attention_2/3 -> `--attn sdpa` (no s x s scores)",
        "use_peft": "LoRA on (`--lora`, with lora_r ...); false: the lora_* keys have no effect",
        "lora_r": "`--lora` (ModelConfig's default 16)",
        "lora_alpha": "`--lora-alpha` (default 32)",
        "lora_dropout": "`--lora-dropout` (default 0.05)",
        "lora_target_modules": "`--lora-targets` (a list, or all-linear; absent: PEFT's default for the model type)",
        "load_in_4bit": "`--quant-base nf4` (with use_peft; TRL refuses it without, and beside load_in_8bit)",
        "load_in_8bit": "`--quant-base int8`",
        "bnb_4bit_quant_type": "nf4 and fp4 store the same bytes: `--quant-base nf4`",
        "use_bnb_nested_quant": "false (ModelConfig's default): named, memplan's nf4 is double-quantized (0.047 B per weight less)",
        "bnb_4bit_quant_storage": "a float dtype: what ZeRO-3 / FSDP shard; absent (uint8) under FSDP: named (accelerate's FSDP2 leaves it unsharded)",
        "max_length": "`--seq` (SFTConfig and DPOConfig default 1024: the longest a sample is padded or packed to)",
        "max_seq_length": "older name of max_length",
        "loss_type": "SFT: absent or chunked_nll (SFTConfig's default, the logits in chunks) named as not modelled; DPO: marks a DPOConfig",
        "precompute_ref_log_probs": "DPO: the reference model named either way",
        "beta": "marks a DPOConfig: `--batch` is 2 x per_device_train_batch_size (chosen and rejected in one forward), the reference model named (none with PEFT)",
        "max_prompt_length": "marks a DPOConfig",
    },
    "LF_KEYS": {
        "model_name_or_path": "named in a \"no model\" error",
        "stage": "sft and pt planned; dpo: `--batch` x 2 (concatenated_forward), the reference model named unless LoRA or orpo/simpo; rm, ppo, kto named as not modelled",
        "finetuning_type": "lora (LLaMA-Factory's default) -> `--lora`; freeze -> `--freeze all-but-last:N`; full; oft named",
        "lora_rank": "`--lora` (default 8)",
        "lora_alpha": "`--lora-alpha` (default 2 x the rank)",
        "lora_dropout": "`--lora-dropout` (default 0)",
        "lora_target": "`--lora-targets` (default all -> all-linear)",
        "quantization_bit": "4 -> `--quant-base nf4`, 8 -> `int8` (bnb; hqq / eetq named); LoRA only (LLaMA-Factory refuses a quantized full fine-tune)",
        "quantization_method": "bnb honoured; hqq, eetq named",
        "quantization_type": "nf4 / fp4: the same bytes",
        "double_quantization": "true (default) is memplan's nf4; false named",
        "cutoff_len": "`--seq` (default 2048)",
        "disable_gradient_checkpointing": "false (default): `--act-ckpt full` (LLaMA-Factory checkpoints every block)",
        "flash_attn": "disabled -> `--attn eager`; auto, sdpa, fa2, fa3 -> `--attn sdpa`",
        "pure_bf16": "trainable parameters kept in bf16: pure `bf16`",
        "freeze_trainable_layers": "`--freeze all-but-last:N` (default 2)",
        "freeze_trainable_modules": "all (default) planned; others named",
        "pref_loss": "orpo / simpo: no reference model",
        "ref_model": "named with the reference model",
    },
    "AX_KEYS": {
        "base_model": "named in a \"no model\" error",
        "load_in_8bit": "`--quant-base int8` (with adapter)",
        "load_in_4bit": "`--quant-base nf4` (with adapter; axolotl stores it in bf16: what ZeRO-3 / FSDP shard)",
        "adapter": "lora, qlora -> `--lora`; others named",
        "lora_r": "`--lora` (default 8)",
        "lora_alpha": "`--lora-alpha` (default 16)",
        "lora_dropout": "`--lora-dropout` (default 0)",
        "lora_target_modules": "`--lora-targets`",
        "lora_target_linear": "true -> `--lora-targets all-linear`",
        "sequence_len": "`--seq` (default 512)",
        "micro_batch_size": "`--batch` (default 1)",
        "bf16": "auto (default): bf16 where the --gpu has it, else fp16 (normalize_config); the model loads at that dtype",
        "fp16": "fp16 (and the load dtype)",
        "bfloat16": "bf16 without autocast: pure `bf16`",
        "float16": "fp16 without autocast",
        "gradient_checkpointing": "true -> `--act-ckpt full`; offload / offload_disk named",
        "optimizer": "as the Trainer's optim",
        "flash_attention": "`--attn sdpa`",
        "sdp_attention": "`--attn sdpa`",
        "xformers_attention": "named",
        "attn_implementation": "as TRL's",
        "fsdp_version": "the fsdp_config's version",
        "rl": "dpo, ipo, orpo, simpo: `--batch` x 2; others named",
        "bnb_config_kwargs": "bnb_4bit_use_double_quant, bnb_4bit_quant_storage read",
        "deepspeed": "a DeepSpeed JSON (path), \"auto\" filled from the recipe",
        "fsdp": "FSDP words, as the Trainer's",
        "fsdp_config": "read as the Trainer's (alone it turns FSDP on)",
        "gradient_accumulation_steps": "`--grad-accum`",
    },
}

NO_EFFECT_WHY = "no effect on memory, communication or time"


def tables(src):
    """{name: [(path, cls, ok)]} from the C tables."""
    out = {}
    for m in re.finditer(r"static const CfgKey (\w+)\[\] = \{(.*?)\{0, 0, 0\},", src, re.S):
        body = m.group(2).replace('ZO "', '"zero_optimization.')
        rows = re.findall(r'\{"([^"]+)", (H|NE|D), (0|"[^"]*")\}', body)
        out[m.group(1)] = [(p, c, ok.strip('"') if ok != "0" else None) for p, c, ok in rows]
    return out


class Finder:
    """file:line of the line defining a key in the installed sources."""

    def __init__(self, site, mirror=""):
        self.site = site
        self.mirror = mirror
        self.cache = {}
        self.snap = {}

    def lines(self, rel):
        if rel not in self.cache:
            with open(os.path.join(self.site, rel), encoding="utf-8") as f:
                self.cache[rel] = f.read().split("\n")
        return self.cache[rel]

    def find(self, rel, patterns, after=None):
        """The first line matching one of patterns (in order) at or after the line matching
        `after`; None if none does."""
        ls = self.lines(rel)
        start = 0
        if after:
            start = next((i for i, l in enumerate(ls) if re.search(after, l)), 0)
        for pat in patterns:
            for i in range(start, len(ls)):
                if re.search(pat, ls[i]):
                    return "%s:%d" % (rel, i + 1)
        return None

    def first(self, *tries):
        """The first of several (rel, patterns[, after]) tries that finds a line."""
        for t in tries:
            r = self.find(*t)
            if r:
                return r
        return None


def field(name):
    return [r"^\s+%s\s*:" % re.escape(name), r'alias="%s"' % re.escape(name), r"""['"]%s['"]""" % re.escape(name)]


def named(name):
    """A constant spelling the key: NAME = "key" (either quotes)."""
    return [r"""=\s*['"]%s['"]""" % re.escape(name)]


# where DeepSpeed defines its top-level sections and scalars besides runtime/constants.py
DS_FILES = ["deepspeed/runtime/constants.py", "deepspeed/profiling/constants.py", "deepspeed/comm/constants.py",
            "deepspeed/runtime/swap_tensor/constants.py", "deepspeed/autotuning/constants.py", "deepspeed/utils/config.py"]


def ds_source(f, path):
    seg = path.split(".")
    last = seg[-1]
    if path.startswith("zero_optimization.offload_optimizer."):
        return f.find("deepspeed/runtime/zero/offload_config.py", field(last), r"class DeepSpeedZeroOffloadOptimizerConfig")
    if path.startswith("zero_optimization.offload_param."):
        return f.find("deepspeed/runtime/zero/offload_config.py", field(last), r"class DeepSpeedZeroOffloadParamConfig")
    if seg[0] == "zero_optimization":
        return f.find("deepspeed/runtime/zero/config.py", field(last), r"class DeepSpeedZeroConfig")
    if seg[0] == "fp16":
        return f.find("deepspeed/runtime/precision_config.py", field(last), r"class DeepSpeedFP16Config")
    if seg[0] in ("bf16", "bfloat16"):
        return f.find("deepspeed/runtime/precision_config.py", field(last), r"class DeepSpeedBF16Config")
    if seg[0] == "activation_checkpointing":
        return f.find("deepspeed/runtime/activation_checkpointing/config.py", named(last))
    if seg[0] == "optimizer" and len(seg) > 1 and seg[1] == "params":
        return f.find("deepspeed/runtime/engine.py", [r"%s" % last.upper(), r"def _configure_basic_optimizer"],
                      r"def _configure_basic_optimizer")
    if seg[0] == "optimizer":
        return f.find("deepspeed/runtime/config.py", [r"def get_optimizer_name"])
    if seg[0] == "torch_autocast":
        return f.find("deepspeed/runtime/constants.py", named(last), r"TORCH_AUTOCAST")
    return f.first(*[(rel, named(path)) for rel in DS_FILES],   # then the monitors' section names
                   ("deepspeed/monitor/config.py", [r"""['"]%s['"]""" % re.escape(path)]))


def hf_source(f, path):
    seg = path.split(".")
    if seg[:2] == ["accelerator_config", "gradient_accumulation_kwargs"]:
        return f.find("accelerate/utils/dataclasses.py", field(seg[-1]), r"class GradientAccumulationPlugin")
    if seg[0] == "accelerator_config":
        return f.find("transformers/trainer_pt_utils.py", field(seg[-1]), r"class AcceleratorConfig")
    if seg[0] == "fsdp_config" and len(seg) > 1:
        return f.find("transformers/training_args.py", [r'"%s"' % seg[-1]], r"def _process_fsdp_args")
    if seg[0].endswith("checkpointing_kwargs") and seg[-1] in ("every_n_layers", "offload"):
        return f.find("transformers/training_args.py", [r"`%s`" % seg[-1]], r"activation_checkpointing_kwargs \(")
    if seg[0].endswith("checkpointing_kwargs"):
        return f.find("torch/utils/checkpoint.py", [r"^def checkpoint\("])
    return f.find("transformers/training_args.py", field(path), r"^class TrainingArguments")


def acc_source(f, path):
    seg = path.split(".")
    if seg[0] == "fsdp_config" and len(seg) > 1:   # accelerate's, else the Trainer's own (cpu_offload, ...)
        return f.first(("accelerate/commands/launch.py", [r'"--fsdp_%s"' % seg[-1]]),
                       ("transformers/training_args.py", [r'"%s"' % seg[-1]], r"def _process_fsdp_args"))
    if seg[0] == "deepspeed_config" and len(seg) > 1:
        return f.find("accelerate/commands/launch.py", [r'"--%s"' % seg[-1]])
    if seg[0] == "dynamo_config":
        return f.find("accelerate/commands/config/config_args.py", [r"dynamo_config"])
    return f.find("accelerate/commands/config/config_args.py", field(path))


TT_CLASS = {"training": "Training", "parallelism": "Parallelism", "activation_checkpoint": "ActivationCheckpoint",
            "optimizer": "Optimizer", "compile": "Compile", "fault_tolerance": "FaultTolerance", "model": "Model",
            "job": "Job", "profiling": "Profiling", "metrics": "Metrics", "lr_scheduler": "LRScheduler",
            "checkpoint": "Checkpoint", "comm": "Comm", "memory_estimation": "MemoryEstimation",
            "experimental": "Experimental", "validation": "Validation", "debug": "Debug"}


def tt_source(f, path):
    seg = path.split(".")
    cls = TT_CLASS.get(seg[0], seg[0])
    if len(seg) == 1:
        return f.find("torchtitan/config/job_config.py", [r"^class %s\b" % cls])
    return f.find("torchtitan/config/job_config.py", field(seg[1]), r"^class %s\b" % cls)


MIRROR = {"trl": ("huggingface+trl", "f2cd57710ae345ea6428ae95363267fcf38a3dc8"),
          "lf": ("hiyouga+LLaMA-Factory", "ff6d4d12eeb035d6ce06805a5733dd7b29f2ac30"),
          "ax": ("axolotl-ai-cloud+axolotl", "067b021c8b87a9e5e380b9173c704cf7340e30f5")}


def git_lines(mirror, key, rel):
    """A file of a git snapshot (MIRROR), as lines; [] when the snapshot is not here."""
    import subprocess
    repo, commit = MIRROR[key]
    try:
        t = subprocess.run(["git", "-C", os.path.join(mirror, repo, "repo"), "show", "%s:%s" % (commit, rel)],
                           capture_output=True, text=True, check=True).stdout
    except Exception:
        return []
    return t.split("\n")


def snap_find(f, key, rels, name):
    for rel in rels:
        ls = f.snap.setdefault((key, rel), git_lines(f.mirror, key, rel))
        for i, l in enumerate(ls):
            if re.match(r"^\s+%s\s*:" % re.escape(name), l):
                return "%s %s:%d" % (MIRROR[key][0].split("+")[1], rel, i + 1)
    return None


def trl_source(f, path):
    name = path.split(".")[0]
    return snap_find(f, "trl", ["trl/trainer/sft_config.py", "trl/trainer/dpo_config.py", "trl/trainer/model_config.py",
                                "trl/trainer/base_config.py", "trl/scripts/utils.py"], name) or hf_source(f, path)


def lf_source(f, path):
    name = path.split(".")[0].rstrip("*").rstrip("_")
    return snap_find(f, "lf", ["src/llamafactory/hparams/%s.py" % m for m in
                               ("model_args", "data_args", "finetuning_args", "training_args", "generating_args")], name) \
        or hf_source(f, path)


def ax_source(f, path):
    name = path.split(".")[0].rstrip("*").rstrip("_")
    return snap_find(f, "ax", ["src/axolotl/utils/schemas/%s.py" % m for m in
                               ("config", "model", "peft", "training", "trl", "integrations")], name) or hf_source(f, path)


VERSIONS = {"DS_KEYS": "DeepSpeed 0.19.8", "FSDP_KEYS": "accelerate 1.15.0", "ACC_KEYS": "accelerate 1.15.0",
            "ACC_DS_KEYS": "accelerate 1.15.0", "TT_KEYS": "torchtitan 0.2.2", "HF_KEYS": "transformers 5.24.0",
            "TRL_KEYS": "TRL f2cd577", "LF_KEYS": "LLaMA-Factory ff6d4d1", "AX_KEYS": "axolotl 067b021"}

SOURCES = {"DS_KEYS": ds_source, "FSDP_KEYS": acc_source, "ACC_KEYS": acc_source, "ACC_DS_KEYS": acc_source,
           "TT_KEYS": tt_source, "HF_KEYS": hf_source, "TRL_KEYS": trl_source, "LF_KEYS": lf_source, "AX_KEYS": ax_source}


def meaning(table, path, cls, ok):
    if cls == "H":
        return HONOURED[table].get(path, "honoured")
    if cls == "D":
        return "modelled at %s; another value is not modelled (warned)" % " or ".join("`%s`" % v for v in ok.split("|"))
    return NO_EFFECT_WHY


def render(name, rows, f, old=None):
    order = {"H": 0, "D": 1, "NE": 2}
    label = {"H": "honoured", "D": "modelled at a value", "NE": "no effect"}
    out = ["| key | class | what memplan does | defined at |", "|---|---|---|---|"]
    for path, cls, ok in sorted(rows, key=lambda r: order[r[1]]):
        try:
            src = SOURCES[name](f, path)
        except OSError:   # the framework is not installed here: keep the column as the doc had it
            src = (old or {}).get(path)
        src = src or "not in %s (an older name)" % VERSIONS[name]
        out.append("| `%s` | %s | %s | %s |" % (path, label[cls], meaning(name, path, cls, ok).replace("|", "\\|"), src))
    return "\n".join(out)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--site-packages", default=VENV)
    ap.add_argument("--mirror", default="/work/.mirror", help="git snapshots of TRL, LLaMA-Factory, axolotl (owner+name/repo)")
    ap.add_argument("--tables", default="", help="only these tables (comma list, e.g. TRL_KEYS,LF_KEYS): the others' sources "
                                                 "may not be installed at the versions the doc names")
    a = ap.parse_args()
    tabs = {}
    for src in ("cli/cli_config_kinds.c", "cli/cli_config_recipes.c"):
        with open(os.path.join(ROOT, src), encoding="utf-8") as fh:
            tabs.update(tables(fh.read()))
    doc_path = os.path.join(ROOT, "docs/configs.md")
    with open(doc_path, encoding="utf-8") as fh:
        doc = fh.read()
    f = Finder(a.site_packages, a.mirror)
    only = set(a.tables.split(",")) if a.tables else None
    for name, rows in tabs.items():
        if only and name not in only:
            continue
        pat = re.compile(r"(<!-- keys:%s -->\n).*?(<!-- /keys -->)" % name, re.S)
        if not pat.search(doc):
            sys.exit("docs/configs.md has no <!-- keys:%s --> section" % name)
        old = dict(re.findall(r"^\| `([^`]+)` \|[^\n]*\| ([^|\n]+) \|$", pat.search(doc).group(0), re.M))
        doc = pat.sub(lambda m: m.group(1) + render(name, rows, f, old) + "\n" + m.group(2), doc)
    with open(doc_path, "w", encoding="utf-8") as fh:
        fh.write(doc)
    print("docs/configs.md: %s" % ", ".join("%s %d keys" % (n, len(r)) for n, r in tabs.items()))


if __name__ == "__main__":
    main()
