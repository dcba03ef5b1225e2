"""memplan ground-truth harness: train a few steps with real PyTorch / DeepSpeed on CPU ranks
(gloo) and report per-rank tensor memory, its split at the peak, model states, collectives,
step time and losses as one JSON document (written by rank 0).

    torchrun --standalone --nproc-per-node N bench/torch/harness.py --model gpt2-mini \
        --strategy ddp --json out.json

How it measures (details in measure.py and docs/validation-torch.md):

* Total: every allocation and free served by c10's CPU allocator, as reported to
  torch.profiler with profile_memory=True (C++ allocations included: DDP buckets, gloo
  buffers, DeepSpeed flat buffers).  The profiler runs from before the model is built, so the
  running total is the live tensor bytes of the process.  Peak = maximum of that total over
  the steady state, steps 2..K (step 1 warms up: lazy optimizer state, DDP bucket rebuild,
  FSDP lazy init).
* Split at the peak: each allocation live at the peak is classified.  Parameters, gradients
  and optimizer state are identified by storage address at snapshot moments (the harness
  records the storages of model.parameters(), their .grad and the optimizer state after each
  phase; DeepSpeed's partition buffers by attribute name); the rest by where it was allocated
  (collective / FSDP:: / wrap ranges -> comm_buffers, module forward -> activations,
  data -> other, backward / optimizer -> temporaries).
* Moment: the phase range and the innermost module forward range around the allocation that
  made the peak; in backward, the module whose forward op created the autograd node
  (autograd sequence numbers).
* Collectives: the c10d dispatcher ops (c10d::allreduce_, c10d::_allgather_base_, ...) of one
  steady-state step on rank 0, from the same trace.  DDP's reducer and gloo calls from C++ go
  through these ops too, so they are included.  Payload = the full buffer: all_gather: output,
  reduce_scatter: input, all_reduce / broadcast: the buffer.

`--measure memtracker` runs the same loop under torch.distributed._tools.mem_tracker.MemTracker
instead (Python-visible tensors only), for cross-checking the total.

`--device cuda` runs the same loop on GPUs under the machine's own torch (cuda_mode.py): one rank
per GPU over NCCL, or several ranks on one GPU (gloo on CUDA tensors, or NCCL as fake hosts:
--backend); the figures are torch.cuda's (max_memory_allocated / max_memory_reserved per phase,
memory_stats and segments, the CUDA context, cuBLAS's workspace) instead of the profiler's, and
the result says device "cuda" and keeps them under per_rank[].cuda (no "peak_bytes": a CPU
comparison cannot mistake it for one). `--device cuda --dry-cpu` runs that path on CPU tensors,
every CUDA call skipped and named.
"""
import argparse
import collections
import contextlib
import json
import os
import platform
import sys
import time
import traceback

STRATEGIES = ("ddp", "zero1", "zero2", "zero3", "fsdp-full", "fsdp-grad-op", "fsdp-hybrid",
              "torch-zero1", "none")   # none: no data parallelism (each rank alone; cross-checks)
PRECISIONS = ("fp32", "amp-bf16", "mixed-bf16", "bf16")
LR = 1e-4


class SetupError(Exception):
    """A setup the harness cannot run: exit 2."""


def setup_args(doc):
    """The harness flags that reproduce the setup of a saved result (its "model" and "setup", as
    run() writes them; keys older results lack take the flags' defaults). torchrun's
    --nproc-per-node is the caller's: setup.ranks."""
    s, m = doc["setup"], doc["model"]
    model = m.get("source") or m["name"]
    here = os.path.dirname(os.path.abspath(__file__))
    if not m.get("source"):   # older results name a config by its model name only
        for cand in (os.path.join(here, "configs", model + ".json"),):
            if os.path.isfile(cand):
                model = os.path.relpath(cand, os.path.dirname(os.path.dirname(here)))
    out = ["--model", model, "--strategy", s["strategy"], "--batch", str(s["batch"]),
           "--seq", str(s["seq"]), "--grad-accum", str(s.get("grad_accum", 1)),
           "--steps", str(s.get("steps", 3)), "--precision", s["precision"],
           "--act-ckpt", s.get("act_ckpt", "none"), "--attn", s.get("attn", "eager"),
           "--dropout", repr(float(s.get("dropout", 0.0))),
           "--grad-as-bucket-view", str(s.get("grad_as_bucket_view", 0)),
           "--zero-grad", s.get("zero_grad", "none"), "--loop", s.get("loop", "hf"),
           "--seed", str(s.get("seed", 1234)), "--fsdp-grad-sync", s.get("fsdp_grad_sync", "every"),
           "--tp", str(s.get("tp", 1)), "--sp", "on" if s.get("sp") else "off",
           "--loss-parallel", "on" if s.get("loss_parallel") else "off",
           "--freeze", s.get("freeze", "none"), "--ep", str(s.get("ep", 1)),
           "--moe-routing", s.get("moe_routing", "natural")]
    if not s.get("bucket_mb_default", True):
        out += ["--bucket-mb", repr(float(s["bucket_mb"]))]
    if s["strategy"] == "fsdp-hybrid":
        out += ["--shard-group", str(s["shard_group"])]
    if s.get("ds_zero"):
        out += ["--ds-zero", json.dumps(s["ds_zero"])]
    if s["strategy"].startswith("fsdp-") and s.get("fsdp", 2) == 1:
        out += ["--fsdp", "1", "--fsdp-min-params", str(s.get("fsdp_min_params", 0)),
                "--fsdp-limit-all-gathers", s.get("fsdp_limit_all_gathers", "on"),
                "--fsdp-backward-prefetch", s.get("fsdp_backward_prefetch", "pre"),
                "--fsdp-forward-prefetch", s.get("fsdp_forward_prefetch", "off")]
    lora = s.get("lora")
    if lora:
        out += ["--lora", str(lora["rank"]), "--lora-alpha", repr(float(lora["alpha"])),
                "--lora-dropout", repr(float(lora.get("dropout", 0.0)))]
        if lora.get("targets"):
            out += ["--lora-targets", lora["targets"]]
    return out


def parse_args(argv):
    if "--rerun" in argv:
        # the saved result's setup first; the flags given after it (--json, --alloc-trace) win
        k = argv.index("--rerun")
        if k + 1 >= len(argv):
            raise SetupError("--rerun needs a saved result (bench/torch/results/<row>.json)")
        try:
            with open(argv[k + 1]) as f:
                doc = json.load(f)
            pre = setup_args(doc)
        except (OSError, ValueError, KeyError, TypeError) as e:
            raise SetupError(f"--rerun {argv[k + 1]}: not a saved harness result ({type(e).__name__}: {e})")
        argv = pre + argv[:k] + argv[k + 2:]
    p = argparse.ArgumentParser(prog="harness.py", description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default="gpt2-mini")
    p.add_argument("--strategy", default="ddp")
    p.add_argument("--batch", type=int, default=1)
    p.add_argument("--seq", type=int, default=None)
    p.add_argument("--grad-accum", type=int, default=1)
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--precision", default="fp32")
    p.add_argument("--act-ckpt", default="none",
                   help="none, full, every:N (blocks N, 2N, ...), op (torchtitan's op-level SAC "
                        "policy), selective (Megatron's core-attention recompute)")
    p.add_argument("--attn", default="eager")
    p.add_argument("--dropout", type=float, default=0.0)
    p.add_argument("--bucket-mb", type=float, default=None,
                   help="DDP bucket_cap_mb (default: DDP's default, 25 MiB with a 1 MiB first "
                        "bucket; an explicit value sets both)")
    p.add_argument("--grad-as-bucket-view", type=int, default=0)
    p.add_argument("--zero-grad", default="none")
    p.add_argument("--loop", default="hf")
    p.add_argument("--shard-group", type=int, default=None)
    p.add_argument("--fsdp-grad-sync", default="every",
                   help="FSDP2 under --grad-accum: every (reduce-scatter every micro-step, the "
                        "gradients accumulate sharded: FSDP2's default, torchtitan) or last "
                        "(set_requires_gradient_sync(False) on the non-final micro-steps, as HF "
                        "Accelerate's no_sync: unsharded gradients accumulate, one reduce-scatter "
                        "per optimizer step)")
    p.add_argument("--fsdp", type=int, default=2,
                   help="what fsdp-* runs: 2 = fully_shard per block + root (FSDP2, the default), "
                        "1 = FullyShardedDataParallel (flat parameters, use_orig_params=True as "
                        "accelerate and the Trainer set it)")
    p.add_argument("--fsdp-min-params", type=int, default=0,
                   help="--fsdp 1: size_based_auto_wrap_policy(min_num_params=N) instead of one "
                        "unit per block (ModuleWrapPolicy of the block class); 0 = the blocks")
    p.add_argument("--fsdp-limit-all-gathers", default="on",
                   help="--fsdp 1: limit_all_gathers (the rate limiter), on (FSDP1's default) or off")
    p.add_argument("--fsdp-backward-prefetch", default="pre",
                   help="--fsdp 1: backward_prefetch BACKWARD_PRE (pre, the default), "
                        "BACKWARD_POST (post) or None (none)")
    p.add_argument("--fsdp-forward-prefetch", default="off",
                   help="--fsdp 1: forward_prefetch, off (the default) or on")
    p.add_argument("--ds-zero", default=None,
                   help="a JSON object merged into DeepSpeed's zero_optimization (its sizes and "
                        "switches: reduce_bucket_size, overlap_comm, stage3_prefetch_bucket_size, "
                        "stage3_max_live_parameters, stage3_param_persistence_threshold, ...)")
    p.add_argument("--tp", type=int, default=1,
                   help="tensor-parallel degree: a 2-D mesh (dp = ranks / tp, tp) and "
                        "parallelize_module with torchtitan's plan (llama) or its GPT-2 twin; "
                        "ddp (pure TP when dp = 1) or fsdp-full on the dp dimension")
    p.add_argument("--sp", default="off", help="sequence parallel on the norms (on, off)")
    p.add_argument("--loss-parallel", default="off",
                   help="--tp with a vocab-sharded head: on keeps the logits sharded (lm_head "
                        "ColwiseParallel(output_layouts=Shard(-1), use_local_output=False)) and runs "
                        "forward and backward inside torch's loss_parallel(), as torchtitan does "
                        "unless parallelism.disable_loss_parallel; off gathers them (on, off)")
    p.add_argument("--ep", type=int, default=1,
                   help="expert-parallel degree (fsdp-full only): transformers' expert-parallel plan "
                        "(distributed/expert_parallel.py: the experts sharded on dim 0 over ep ranks, "
                        "AllToAllEP dispatch and combine), FSDP2 on the experts over the expert "
                        "data-parallel mesh (ranks / ep) and on the blocks and root over all ranks, "
                        "as transformers' DistributedConfig(fsdp_size=ranks, ep_size=ep) lays them out")
    p.add_argument("--moe-routing", default="natural",
                   help="the experts each token goes to: natural (the router's choice), balanced (token "
                        "t's slot j to expert (t k + j) mod E: every expert, and under --ep every rank, "
                        "gets the same rows) or skewed (every token to experts 0..k-1: under --ep every "
                        "row to rank 0, the worst imbalance); the router still runs and its weights "
                        "still weigh the outputs")
    p.add_argument("--lora", type=int, default=0,
                   help="PEFT LoRA of this rank (get_peft_model; the base frozen); 0 = full fine-tuning")
    p.add_argument("--lora-alpha", type=float, default=None, help="lora_alpha (default 2 x rank)")
    p.add_argument("--lora-targets", default="",
                   help="comma list of module names or all-linear; default PEFT's for the model type")
    p.add_argument("--lora-dropout", type=float, default=0.0)
    p.add_argument("--freeze", default="none",
                   help="without --lora: none, embeddings or all-but-last:N (models.freeze)")
    p.add_argument("--seed", type=int, default=1234)
    p.add_argument("--json", default="-")
    p.add_argument("--measure", default=None,
                   help="cpu: profiler (default) or memtracker; cuda: cuda (torch.cuda's figures)")
    p.add_argument("--device", default="cpu",
                   help="cpu (gloo CPU ranks) or cuda (a GPU per rank, or ranks sharing one)")
    p.add_argument("--dry-cpu", action="store_true",
                   help="with --device cuda: run the CUDA path on CPU tensors over gloo, skipping "
                        "and naming every CUDA call (a check on a machine without a GPU)")
    p.add_argument("--backend", default="auto",
                   help="with --device cuda: nccl, gloo (on CUDA tensors) or auto (nccl when every "
                        "rank has a GPU of its own, else gloo: NCCL refuses two ranks of one "
                        "communicator on one GPU); nccl on a shared GPU runs as fake hosts "
                        "(NCCL_HOSTID per rank)")
    p.add_argument("--alloc-trace", default=None, metavar="PATH",
                   help="write rank 0's allocation sequence (alloc/free with address and size, "
                        "phase markers) to PATH for `memplan alloc` (profiler measurement only)")
    p.add_argument("--alloc-ops", action="store_true",
                   help="with --alloc-trace (CPU): precede each allocation with a comment naming "
                        "the ops it was made under (diagnosis: bench/torch/alloc_diff.py prints "
                        "them; the kept traces are written without)")
    p.add_argument("--rerun", default=None, metavar="RESULT",
                   help="take every setup flag from a saved result (its setup and model); flags "
                        "given on the command line win (run with --nproc-per-node = its ranks)")
    p.add_argument("--params-only", action="store_true",
                   help="build on the meta device and print the parameter count (no ranks)")
    a = p.parse_args(argv)

    def check(name, val, valid):
        if val not in valid:
            raise SetupError(f"--{name} {val}: valid values are {', '.join(map(str, valid))}")

    check("strategy", a.strategy, STRATEGIES)
    check("precision", a.precision, PRECISIONS)
    every = a.act_ckpt.split(":", 1)[1] if a.act_ckpt.startswith("every:") else None
    if every is not None and (not every.isdigit() or int(every) < 1):
        raise SetupError(f"--act-ckpt {a.act_ckpt}: every:N needs a whole number N >= 1")
    if every is None:
        check("act-ckpt", a.act_ckpt, ("none", "full", "every:N", "op", "selective"))
    check("attn", a.attn, ("eager", "sdpa"))
    check("zero-grad", a.zero_grad, ("none", "zeros"))
    fz = a.freeze.split(":", 1)
    if not (a.freeze in ("none", "embeddings") or (fz[0] == "all-but-last" and len(fz) == 2 and fz[1].isdigit()
                                                  and int(fz[1]) >= 1)):
        raise SetupError(f"--freeze {a.freeze}: valid values are none, embeddings, all-but-last:N (N >= 1)")
    if a.freeze != "none" and a.lora:
        raise SetupError("--freeze and --lora: a LoRA model's base is frozen already; give one of them")
    check("loop", a.loop, ("hf", "common"))
    check("fsdp-grad-sync", a.fsdp_grad_sync, ("every", "last"))
    check("grad-as-bucket-view", a.grad_as_bucket_view, (0, 1))
    check("fsdp", a.fsdp, (1, 2))
    check("fsdp-limit-all-gathers", a.fsdp_limit_all_gathers, ("on", "off"))
    check("fsdp-backward-prefetch", a.fsdp_backward_prefetch, ("pre", "post", "none"))
    check("fsdp-forward-prefetch", a.fsdp_forward_prefetch, ("on", "off"))
    fsdp1_knobs = (a.fsdp_min_params != 0 or a.fsdp_limit_all_gathers != "on"
                   or a.fsdp_backward_prefetch != "pre" or a.fsdp_forward_prefetch != "off")
    if a.fsdp_min_params < 0:
        raise SetupError(f"--fsdp-min-params {a.fsdp_min_params}: valid values are 0 (one unit per "
                         "block) or a positive parameter count")
    if fsdp1_knobs and not (a.fsdp == 1 and a.strategy.startswith("fsdp-")):
        raise SetupError("--fsdp-min-params/-limit-all-gathers/-backward-prefetch/-forward-prefetch: "
                         "FSDP1's knobs need --fsdp 1 and an fsdp-* strategy")
    if a.fsdp == 1 and a.strategy.startswith("fsdp-") and a.precision == "mixed-bf16":
        raise SetupError("--fsdp 1 --precision mixed-bf16: FSDP1's MixedPrecision is not wired in "
                         "the harness (valid with --fsdp 1: fp32, amp-bf16)")
    check("device", a.device, ("cpu", "cuda"))
    check("sp", a.sp, ("on", "off"))
    check("loss-parallel", a.loss_parallel, ("on", "off"))
    if a.loss_parallel == "on" and a.tp < 2:
        raise SetupError("--loss-parallel on: needs --tp 2 or more (the vocab-sharded LM head)")
    if a.tp < 1:
        raise SetupError(f"--tp {a.tp}: must be an integer >= 1")
    if a.tp > 1 and a.strategy not in ("ddp", "fsdp-full"):
        raise SetupError(f"--tp with --strategy {a.strategy}: tensor parallel runs with ddp "
                         "(pure TP on one data-parallel rank) or fsdp-full")
    if a.tp > 1 and (a.grad_accum > 1 or a.act_ckpt not in ("none", "full", "op", "selective")
                     or a.precision not in ("fp32", "amp-bf16")):
        raise SetupError("--tp: checked with fp32 or amp-bf16, act-ckpt none, full, op or selective, no accumulation")
    check("moe-routing", a.moe_routing, ("natural", "balanced", "skewed"))
    if a.ep < 1:
        raise SetupError(f"--ep {a.ep}: must be an integer >= 1")
    if a.ep > 1 and (a.strategy != "fsdp-full" or a.fsdp != 2 or a.tp > 1 or a.lora or a.freeze != "none"):
        raise SetupError("--ep: expert parallel runs with --strategy fsdp-full (FSDP2), without --tp, "
                         "--lora or --freeze (transformers' DistributedConfig(fsdp_size, ep_size))")
    check("backend", a.backend, ("auto", "nccl", "gloo"))
    if a.device == "cpu" and a.dry_cpu:
        raise SetupError("--dry-cpu: needs --device cuda (it runs the CUDA path on CPU tensors)")
    if a.device == "cpu" and a.backend == "nccl":
        raise SetupError("--backend nccl: needs --device cuda (CPU ranks talk over gloo)")
    if a.measure is None:
        a.measure = "cuda" if a.device == "cuda" else "profiler"
    check("measure", a.measure, ("cuda",) if a.device == "cuda" else ("profiler", "memtracker"))
    if a.alloc_ops and (a.alloc_trace is None or a.measure != "profiler"):
        raise SetupError("--alloc-ops: needs --alloc-trace on CPU ranks (--measure profiler: the "
                         "profiler's event tree names the ops)")
    if a.alloc_trace is not None and a.measure not in ("profiler", "cuda"):
        raise SetupError("--alloc-trace needs --measure profiler (CPU: the profiler's allocation "
                         "events) or --device cuda (the caching allocator's recorded history)")
    for name, val, lo in (("batch", a.batch, 1), ("grad-accum", a.grad_accum, 1),
                          ("steps", a.steps, 2)):
        if val < lo:
            raise SetupError(f"--{name} {val}: must be an integer >= {lo}")
    if a.seq is not None and a.seq < 1:
        raise SetupError(f"--seq {a.seq}: must be an integer >= 1")
    if not 0.0 <= a.dropout < 1.0:
        raise SetupError(f"--dropout {a.dropout}: must be in [0, 1)")
    if a.bucket_mb is not None and a.bucket_mb <= 0:
        raise SetupError(f"--bucket-mb {a.bucket_mb}: must be > 0")
    if a.ds_zero is not None:
        try:
            a.ds_zero = json.loads(a.ds_zero)
        except ValueError as e:
            raise SetupError(f"--ds-zero: not a JSON object ({e})")
        if not isinstance(a.ds_zero, dict) or "stage" in a.ds_zero:
            raise SetupError("--ds-zero: a JSON object of zero_optimization keys other than 'stage' "
                             "(the stage is --strategy)")
        if not a.strategy.startswith("zero"):
            raise SetupError(f"--ds-zero with --strategy {a.strategy}: DeepSpeed's settings need zero1/2/3")
    if a.precision == "mixed-bf16" and a.strategy in ("ddp", "torch-zero1", "none"):
        raise SetupError(f"--precision mixed-bf16 with --strategy {a.strategy}: DDP has no "
                         "mixed-precision parameters; valid: fp32, amp-bf16 (or mixed-bf16 "
                         "with fsdp-*, zero1, zero2, zero3)")
    return a


# ----------------------------------------------------------------------------------------
# markers


def rf(name):
    from torch.autograd.profiler import record_function
    return record_function(name)


def add_module_markers(model):
    """memplan::module::<path> around every module's forward (hooks; they fire again when a
    checkpointed block recomputes in backward)."""
    for name, m in model.named_modules():
        label = "memplan::module::" + (name or "model")

        def pre(mod, inp, _label=label):
            r = rf(_label)
            r.__enter__()
            mod.__dict__.setdefault("_memplan_rf", []).append(r)

        def post(mod, inp, out):
            st = mod.__dict__.get("_memplan_rf")
            if st:
                st.pop().__exit__(None, None, None)

        m.register_forward_pre_hook(pre)
        m.register_forward_hook(post)


def wrap_in_range(obj, attr, label):
    """Run obj.attr (a Python method) inside record_function(label)."""
    fn = getattr(obj, attr)

    def wrapped(*a, **k):
        with rf(label):
            return fn(*a, **k)

    setattr(obj, attr, wrapped)


# ----------------------------------------------------------------------------------------
# storages of model states


def torchtitan_op_policy():
    """torchtitan's op-level selective AC policy (torchtitan/distributed/activation_checkpoint.py,
    SelectiveAC._wrap_block at commit b5bcd76c66d0acb1a08b176d9639425bc55e0b2a): the outputs of
    torch._functorch.partitioners.get_default_op_list().compute_intensive_ops (mm, bmm, addmm,
    convolution, the CUDA SDPA kernels, ...), the other SDPA variants torchtitan lists (cudnn,
    math, fused_overrideable), max, linear, topk and the functional collectives it lists
    (reduce_scatter_tensor, all_to_all_single: expert parallel's token exchange) are saved, except
    every second mm/linear (counted per forward and per recompute of one block), which is
    recomputed with everything else. A fresh counter per checkpoint call, as torchtitan's
    context_fn makes one per call. torchtitan's force_recompute_mm_shapes_by_fqns
    (moe.router.gate) matches nothing here."""
    import torch
    from torch._functorch.partitioners import get_default_op_list
    from torch.utils.checkpoint import CheckpointPolicy
    aten = torch.ops.aten
    save_ops = {op.default for op in get_default_op_list().compute_intensive_ops}
    save_ops.update({aten._scaled_dot_product_cudnn_attention.default,
                     aten._scaled_dot_product_attention_math.default,
                     aten._scaled_dot_product_fused_attention_overrideable.default,
                     aten.max.default, aten.linear.default, aten.topk.default,
                     # its communication ops (expert parallel's token exchange under --ep)
                     torch.ops._c10d_functional.reduce_scatter_tensor.default,
                     torch.ops._c10d_functional.all_to_all_single.default})
    mm_ops = (aten.mm.default, aten.linear.default)
    meta = {"forward_mm_count": 0, "recompute_mm_count": 0}

    def policy(ctx, func, *args, **kwargs):
        key = ("recompute" if ctx.is_recompute else "forward") + "_mm_count"
        if func in mm_ops:
            meta[key] += 1
        if func in save_ops:
            if func in mm_ops and meta[key] % 2 == 0:
                return CheckpointPolicy.PREFER_RECOMPUTE
            return CheckpointPolicy.MUST_SAVE
        return CheckpointPolicy.PREFER_RECOMPUTE
    return policy


def op_context_fn():
    from torch.utils.checkpoint import create_selective_checkpoint_contexts
    return create_selective_checkpoint_contexts(torchtitan_op_policy())


def apply_selective_attention(model, spec):
    """--act-ckpt selective: Megatron-LM's selective recompute (recompute_granularity=selective,
    megatron/core/transformer/attention.py _checkpointed_attention_forward): only the core
    attention (scores, softmax, dropout, the context product) runs under a non-reentrant
    checkpoint; it keeps its inputs (q, k, v, the mask) and recomputes the rest in backward.
    Here the attention function transformers calls with (q, k, v, mask) is wrapped: the
    module's eager_attention_forward and ALL_ATTENTION_FUNCTIONS["sdpa"]; it returns the context
    only (Megatron's CoreAttention returns no probabilities)."""
    import importlib
    from torch.utils.checkpoint import checkpoint
    from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS

    def wrap(orig):
        def core(module, query, key, value, attention_mask, **kw):
            def run(q, k, v, m):
                return orig(module, q, k, v, m, **kw)[0]
            return checkpoint(run, query, key, value, attention_mask, use_reentrant=False), None
        return core

    mod = importlib.import_module(type(spec.model).__module__)
    if not hasattr(mod, "eager_attention_forward"):
        raise SetupError(f"--act-ckpt selective: {type(spec.model).__name__} has no "
                         "eager_attention_forward to wrap")
    mod.eager_attention_forward = wrap(mod.eager_attention_forward)
    ALL_ATTENTION_FUNCTIONS["sdpa"] = wrap(ALL_ATTENTION_FUNCTIONS["sdpa"])


def apply_checkpointing(model, spec, mode):
    """--act-ckpt full: every repeated block recomputed in backward (non-reentrant
    torch.utils.checkpoint: HF's gradient_checkpointing_enable, or checkpoint_wrapper for the
    torchvision blocks); every:N: blocks N, 2N, ... counted from 1, as torchtitan's layer
    selective AC chose them (its counter incremented before `count % ac_freq == 0`)."""
    if mode == "selective":
        if spec.kind == "image":
            raise SetupError("--act-ckpt selective: needs a transformer (it recomputes attention)")
        apply_selective_attention(model, spec)
        return
    if mode == "op":
        if spec.kind == "image":
            raise SetupError("--act-ckpt op: transformer blocks only here")
        # torchtitan wraps each block with checkpoint_wrapper(..., early_stop=False)
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={
            "use_reentrant": False, "context_fn": op_context_fn, "early_stop": False})
        return
    n = int(mode.split(":", 1)[1]) if mode.startswith("every:") else 1
    blocks = spec.block_modules()
    chosen = {id(b) for k, b in enumerate(blocks, start=1) if k % n == 0}
    if spec.kind == "image":
        from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import (
            apply_activation_checkpointing, checkpoint_wrapper, CheckpointImpl)
        import functools
        apply_activation_checkpointing(
            model, checkpoint_wrapper_fn=functools.partial(
                checkpoint_wrapper, checkpoint_impl=CheckpointImpl.NO_REENTRANT),
            check_fn=lambda m: id(m) in chosen)
        return
    model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    for b in blocks:   # transformers' GradientCheckpointingLayer checks its own flag
        if id(b) not in chosen:
            b.gradient_checkpointing = False


def _storage_ptr(t):
    try:
        return t.untyped_storage().data_ptr(), t.untyped_storage().nbytes()
    except (RuntimeError, NotImplementedError):
        return None, 0


def _local(t):
    return getattr(t, "_local_tensor", t)


def _tensors_in(obj, depth=0):
    import torch
    if isinstance(obj, torch.Tensor):
        yield obj
    elif depth < 3 and isinstance(obj, (list, tuple)):
        for x in obj:
            yield from _tensors_in(x, depth + 1)
    elif depth < 3 and isinstance(obj, dict):
        for x in obj.values():
            yield from _tensors_in(x, depth + 1)


def _fsdp2_unsharded_grads(model):
    """FSDP2's unsharded gradients: model.parameters() are the sharded DTensors, while the
    gradients of a unit's unsharded parameters (FSDPParam._unsharded_param.grad) live until its
    reduce-scatter, across micro-steps under set_requires_gradient_sync(False)."""
    for m in model.modules():
        get = getattr(m, "_get_fsdp_state", None)
        if get is None:
            continue
        try:
            groups = get()._fsdp_param_groups
        except (AttributeError, RuntimeError):
            continue
        for group in groups or []:
            for fp in group.fsdp_params:
                up = getattr(fp, "_unsharded_param", None)
                if up is not None and up.grad is not None:
                    yield up.grad


def _ds_attr_category(name):
    n = name.lower()
    if "ipg" in n or "bucket" in n or "buffer" in n and "grad" not in n:
        return "comm_buffers"
    if "grad" in n:
        return "grads"
    if "fp32" in n or "single_partition" in n or "master" in n:
        return "optimizer"
    if "bit16" in n or "fp16" in n or "bf16" in n or "lp_param" in n:
        return "params"
    return None


class States:
    """Collects the storages that hold params, grads, optimizer state (and, for DeepSpeed,
    its named communication buffers)."""

    def __init__(self, model, opt, strategy, ds_opt=None, device_type="cpu"):
        self.model, self.opt, self.strategy, self.ds_opt = model, opt, strategy, ds_opt
        self.device_type = device_type   # the run's tensors: cpu, or cuda

    def collect(self):
        import torch
        out = {"params": {}, "grads": {}, "optimizer": {}, "comm_buffers": {}}

        def add(cat, t):
            if t is None or t.device.type != self.device_type:
                return
            ptr, nb = _storage_ptr(t)
            if ptr:
                out[cat][ptr] = nb

        for g in _fsdp2_unsharded_grads(self.model):
            add("grads", _local(g))
        for p in self.model.parameters():
            if hasattr(p, "ds_tensor"):
                add("params", p.ds_tensor)
                # ZeRO-3 keeps a persistent parameter (numel below stage3_param_persistence_
                # threshold) whole besides its partition; the optimizer's groups name the
                # trainable ones' full tensors, a frozen one's is named only here
                if getattr(p, "ds_persist", False) and p.data.numel() > 0:
                    add("params", p.data)
                if p.ds_tensor.grad is not None:
                    add("grads", p.ds_tensor.grad)
            else:
                add("params", _local(p))
            if p.grad is not None:
                add("grads", _local(p.grad))
        opt = self.opt
        inner = getattr(opt, "optim", None)        # ZeroRedundancyOptimizer
        for o in (opt, inner):
            if isinstance(o, torch.optim.Optimizer) and self.ds_opt is None:
                for st in o.state.values():
                    for t in _tensors_in(st):
                        add("optimizer", _local(t))
        if self.ds_opt is not None:
            d = self.ds_opt
            for name, val in vars(d).items():
                cat = _ds_attr_category(name)
                if cat is None:
                    continue
                for t in _tensors_in(val):
                    add(cat, t)
                    if t.grad is not None:
                        add("grads", t.grad)
            base = getattr(d, "optimizer", None)
            if isinstance(base, torch.optim.Optimizer):
                for st in base.state.values():
                    for t in _tensors_in(st):
                        add("optimizer", t)
                for g in base.param_groups:
                    for p in g["params"]:
                        if p.grad is not None:
                            add("grads", p.grad)
        # a storage listed twice keeps the first category in params > grads > optimizer > comm
        seen = set()
        for cat in ("params", "grads", "optimizer", "comm_buffers"):
            for ptr in list(out[cat]):
                if ptr in seen:
                    del out[cat][ptr]
                seen.add(ptr)
        return out


# ----------------------------------------------------------------------------------------
# strategies


# ----------------------------------------------------------------------------------------
# tensor parallel (--tp): torchtitan's Llama plan (torchtitan/models/llama3/infra/parallelize.py
# apply_tp) on Hugging Face's module names, and its GPT-2 twin (blocks only)


def _gpt2_conv1d_to_linear(model, tp):
    """GPT-2's Conv1D (weight (in, out)) as nn.Linear (weight (out, in)): ColwiseParallel and
    RowwiseParallel take nn.Linear only. The fused c_attn rows are reordered so that tp rank r's
    contiguous shard holds its own heads' q, k and v, and the attention splits its local output
    into h/tp-wide q, k, v (split_size)."""
    import torch
    from transformers.pytorch_utils import Conv1D
    for blk in model.transformer.h:
        h = blk.attn.embed_dim
        for parent, name in ((blk.attn, "c_attn"), (blk.attn, "c_proj"), (blk.mlp, "c_fc"),
                             (blk.mlp, "c_proj")):
            c = getattr(parent, name)
            assert isinstance(c, Conv1D)
            lin = torch.nn.Linear(c.weight.shape[0], c.weight.shape[1], bias=c.bias is not None)
            with torch.no_grad():
                w, b = c.weight.t().contiguous(), c.bias
                if name == "c_attn" and parent is blk.attn:
                    idx = torch.arange(3 * h).view(3, tp, h // tp).transpose(0, 1).reshape(-1)
                    w, b = w[idx].contiguous(), b[idx]
                lin.weight.copy_(w)
                lin.bias.copy_(b)
            setattr(parent, name, lin)
        blk.attn.split_size = h // tp


def apply_tp(spec, mesh, sp, loss_parallel=False):
    """parallelize_module over the tp mesh. Llama (torchtitan's plan): embeddings RowwiseParallel
    (vocab-sharded), q/k/v and gate/up ColwiseParallel, o and down RowwiseParallel, the LM head
    ColwiseParallel with its logits gathered (loss_parallel: kept vocab-sharded as a DTensor,
    Shard(-1), for the loss under torch's loss_parallel(): torchtitan's default); with sp the norms are
    SequenceParallel and the residual stream is sharded on the sequence (Shard(1)), else it is
    replicated. One PrepareModuleInput per attention and MLP makes the block's input one DTensor,
    so each sublayer issues one collective each way (Megatron's f/g). GPT-2: the blocks only (the
    tied embedding and head stay replicated)."""
    from torch.distributed.tensor import Replicate, Shard
    from torch.distributed.tensor.parallel import (ColwiseParallel, PrepareModuleInput, PrepareModuleOutput,
                                                   RowwiseParallel, SequenceParallel,
                                                   parallelize_module)
    model = spec.model
    tp = mesh.size()
    stream = Shard(1) if sp else Replicate()
    if spec.cls_name.startswith("GPT2"):
        if loss_parallel:
            raise SetupError("--loss-parallel on: GPT-2's tied head stays replicated (no vocab-sharded logits)")
        _gpt2_conv1d_to_linear(model, tp)
        blocks, attn, o, mlp, cols, down, norms = (model.transformer.h, "attn", "attn.c_proj", "mlp",
                                                   ("attn.c_attn", "mlp.c_fc"), "mlp.c_proj",
                                                   ("ln_1", "ln_2"))
        attn_in = dict(input_layouts=(stream,), desired_input_layouts=(Replicate(),))
        root = {}
        if sp:
            # the replicated embeddings' output becomes the sequence shard after their dropout (a local
            # slice; backward all-gathers), ln_f's sharded output is gathered for the tied head
            root = {"transformer.drop": PrepareModuleOutput(output_layouts=Replicate(),
                                                            desired_output_layouts=Shard(1),
                                                            use_local_output=False),
                    "transformer.ln_f": SequenceParallel(),
                    "lm_head": PrepareModuleInput(input_layouts=(Shard(1),),
                                                  desired_input_layouts=(Replicate(),),
                                                  use_local_output=True)}
    else:
        blocks = model.model.layers
        attn, o, mlp, down = "self_attn", "self_attn.o_proj", "mlp", "mlp.down_proj"
        cols = ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "mlp.gate_proj",
                "mlp.up_proj")
        norms = ("input_layernorm", "post_attention_layernorm")
        attn_in = dict(input_kwarg_layouts={"hidden_states": stream},
                       desired_input_kwarg_layouts={"hidden_states": Replicate()})
        root = {"model.embed_tokens": RowwiseParallel(input_layouts=Replicate(), output_layouts=stream,
                                                      use_local_output=not sp),
                "lm_head": (ColwiseParallel(input_layouts=stream, output_layouts=Shard(-1),
                                            use_local_output=False) if loss_parallel else
                            ColwiseParallel(input_layouts=stream, output_layouts=Replicate()))}
        if sp:
            root["model.norm"] = SequenceParallel()
    if root:
        parallelize_module(model, mesh, root)
    for blk in blocks:
        plan = {attn: PrepareModuleInput(**attn_in),
                mlp: PrepareModuleInput(input_layouts=(stream,), desired_input_layouts=(Replicate(),)),
                o: RowwiseParallel(output_layouts=stream, use_local_output=not sp),
                down: RowwiseParallel(output_layouts=stream, use_local_output=not sp)}
        for c in cols:
            plan[c] = ColwiseParallel()
        if sp:
            for n in norms:
                plan[n] = SequenceParallel()
        parallelize_module(blk, mesh, plan)
    return (f"parallelize_module on a tp mesh of {tp}: "
            + ("torchtitan's Llama plan (embeddings RowwiseParallel, q/k/v gate/up ColwiseParallel, "
               "o/down RowwiseParallel, lm_head ColwiseParallel "
               + ("keeping the logits vocab-sharded, the loss under loss_parallel())" if loss_parallel
                  else "gathering the logits)")
               if not spec.cls_name.startswith("GPT2") else
               "GPT-2 blocks as Linear (c_attn, c_fc ColwiseParallel; c_proj RowwiseParallel), "
               "embeddings and tied head replicated")
            + (", SequenceParallel norms (sequence-sharded residual stream)" if sp else
               ", replicated norms (no sequence parallel)"))


def build_tp(a, spec, world, target):
    """--tp: the 2-D mesh (dp, tp); the plan on tp; ddp (dp = 1: pure TP) or fully_shard on dp."""
    import torch
    from torch.distributed.device_mesh import init_device_mesh
    dp = world // a.tp
    mesh = init_device_mesh(target.type, (dp, a.tp), mesh_dim_names=("dp", "tp"))
    impl = apply_tp(spec, mesh["tp"], a.sp == "on", a.loss_parallel == "on")
    model = spec.model
    opt_kw = dict(lr=LR, foreach=True)
    if a.strategy == "fsdp-full":
        from torch.distributed.fsdp import fully_shard
        blocks = spec.block_modules()
        for b in blocks:
            fully_shard(b, mesh=mesh["dp"], reshard_after_forward=True)
        fully_shard(model, mesh=mesh["dp"])
        impl = (f"2-D mesh (dp {dp} x tp {a.tp}); {impl}; FSDP2 fully_shard on dp per block "
                f"({len(blocks)}) + root")
    else:
        impl = f"2-D mesh (dp {dp} x tp {a.tp}); {impl}; no data parallelism (dp 1)"
    # foreach refuses a list mixing DTensors and plain tensors (the replicated norms without sp,
    # GPT-2's replicated root): one parameter group each, so each foreach call is homogeneous
    from torch.distributed.tensor import DTensor
    ps = list(model.parameters())
    groups = [g for g in ([p for p in ps if isinstance(p, DTensor)],
                          [p for p in ps if not isinstance(p, DTensor)]) if g]
    opt = torch.optim.AdamW([{"params": g} for g in groups], **opt_kw)
    return model, opt, None, (impl + ", torch.optim.AdamW(foreach=True)"
                              + (" over 2 parameter groups (DTensor, plain)" if len(groups) > 1 else ""))


def moe_experts(model):
    """The MoE blocks' experts modules (transformers 5.24: `mlp.experts`, called with
    (hidden_states, top_k_index, top_k_weights))."""
    return [(n, m) for n, m in model.named_modules() if n.endswith("mlp.experts")]


def apply_routing(model, mode):
    """--moe-routing balanced / skewed: a forward pre-hook on every experts module replaces the
    router's top-k expert indices (the shape, dtype and the weights are kept; the router runs as
    before). balanced: token t's slot j to expert (t k + j) mod E (k <= E: a token's k experts
    differ), so with T k a multiple of E every expert gets T k / E rows; skewed: every token to
    experts 0..k-1. Returns the number of experts modules hooked."""
    import torch
    cfg = model.config
    E = next((getattr(cfg, k) for k in ("num_local_experts", "num_experts", "n_routed_experts")
              if getattr(cfg, k, None)), None)
    mods = moe_experts(model)
    if not mods or not E:
        raise SetupError(f"--moe-routing {mode}: the model has no experts modules to route")

    def hook(mod, args):
        hidden, idx, w = args[0], args[1], args[2]
        T, k = idx.shape
        if mode == "balanced":
            new = torch.arange(T * k, device=idx.device, dtype=idx.dtype).view(T, k) % E
        else:
            new = torch.arange(k, device=idx.device, dtype=idx.dtype).expand(T, k).contiguous()
        return (hidden, new, w) + tuple(args[3:])

    for _, m in mods:
        m.register_forward_pre_hook(hook)
    return len(mods)


def build_ep(a, spec, world, target):
    """--ep: transformers 5.24's expert parallelism (distributed/expert_parallel.py
    apply_expert_parallelism with the model's base_model_ep_plan: grouped_gemm Shard(0) on the
    experts' tensors, ep_dispatch_experts through AllToAllEP) on the expert mesh of
    DistributedConfig(fsdp_size=ranks, ep_size=ep) (distributed/utils.py
    initialize_distributed_mesh: (efsdp, ep) with ep inner); then FSDP2 as transformers'
    apply_fully_sharded_data_parallelism does for the experts (fully_shard on each experts module
    over the efsdp mesh, reshard_after_forward=True, the gradient divide factor the data-parallel
    degree, sums forced when efsdp > 1) and as this harness does for the rest (each block, then
    the root, over all ranks)."""
    import torch
    from torch.distributed.fsdp import fully_shard, MixedPrecisionPolicy
    from transformers.distributed.configuration_utils import DistributedConfig
    from transformers.distributed.expert_parallel import apply_expert_parallelism
    from transformers.distributed.utils import initialize_distributed_mesh
    model = spec.model
    if world % a.ep:
        raise SetupError(f"--ep {a.ep} does not divide the {world} ranks")
    dc = DistributedConfig(fsdp_size=world, ep_size=a.ep)
    _, mm = initialize_distributed_mesh(dc)
    _, ep_plan, _ = model._resolve_parallel_plans(dc)
    if "ep_dispatch_experts" not in ep_plan.values():
        raise SetupError(f"--ep: {spec.cls_name} has no expert-parallel plan in transformers "
                         f"{__import__('transformers').__version__}")
    apply_expert_parallelism(model, mm.get_mesh("ep"), mm.get_mesh("tp"), ep_plan)
    kw = {"reshard_after_forward": True}
    mp = ""
    if a.precision == "mixed-bf16":
        kw["mp_policy"] = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
        mp = ", MixedPrecisionPolicy(param_dtype=bf16, reduce_dtype=fp32)"
    efsdp = world // a.ep
    experts = [model.get_submodule(n) for n, s in ep_plan.items() if s == "ep_dispatch_experts"]
    for e in experts:
        fully_shard(e, mesh=mm.get_mesh("efsdp"), **kw)
        e.set_gradient_divide_factor(float(world))
        if efsdp > 1:
            e.set_force_sum_reduction_for_comms(True)
    blocks = spec.block_modules()
    for b in blocks:
        fully_shard(b, mesh=mm.get_mesh("fsdp"), **kw)
    fully_shard(model, mesh=mm.get_mesh("fsdp"), **{k: v for k, v in kw.items() if k != "reshard_after_forward"})
    opt = torch.optim.AdamW(model.parameters(), lr=LR, foreach=True)
    impl = (f"transformers {__import__('transformers').__version__} expert parallel ep {a.ep} "
            f"(apply_expert_parallelism: grouped_gemm Shard(0), AllToAllEP dispatch/combine; "
            f"{len(experts)} experts modules), FSDP2 fully_shard on each experts module over the "
            f"expert data-parallel mesh of {efsdp} (reshard_after_forward=True, gradient divide factor "
            f"{world}{', forced sum' if efsdp > 1 else ''}), on each block ({len(blocks)}) and the root over "
            f"{world} ranks{mp}, torch.optim.AdamW(foreach=True)")
    return model, opt, None, impl


def build_strategy(a, spec, world, rank, target):
    """Wrap the model (already on target.device); returns (model_to_call, optimizer, ds_engine or
    None, implementation)."""
    import torch
    import torch.distributed as dist
    if a.tp > 1:
        return build_tp(a, spec, world, target)
    if a.ep > 1:
        return build_ep(a, spec, world, target)
    model = spec.model
    opt_kw = dict(lr=LR, foreach=True)
    if a.strategy == "none":
        opt = torch.optim.AdamW(model.parameters(), **opt_kw)
        return model, opt, None, ("plain module, no data parallelism, "
                                  "torch.optim.AdamW(foreach=True)")
    if a.strategy in ("ddp", "torch-zero1"):
        from torch.nn.parallel import DistributedDataParallel as DDP
        kw = {"gradient_as_bucket_view": bool(a.grad_as_bucket_view)}
        if target.type == "cuda":
            kw["device_ids"] = [target.index]
        if a.bucket_mb is not None:
            kw["bucket_cap_mb"] = a.bucket_mb
        ddp = DDP(model, **kw)
        wrap_in_range(ddp, "_pre_forward", "memplan::comm::ddp_pre_forward")
        bucket = (f"bucket_cap_mb={a.bucket_mb:g} (first bucket too)" if a.bucket_mb is not None
                  else "bucket_cap_mb=default 25 (first bucket 1 MiB)")
        impl = f"torch DDP ({bucket}, gradient_as_bucket_view={bool(a.grad_as_bucket_view)})"
        if a.strategy == "ddp":
            opt = torch.optim.AdamW(ddp.parameters(), **opt_kw)
            impl += ", torch.optim.AdamW(foreach=True)"
        else:
            from torch.distributed.optim import ZeroRedundancyOptimizer
            opt = ZeroRedundancyOptimizer(ddp.parameters(), optimizer_class=torch.optim.AdamW,
                                          **opt_kw)
            impl += " + ZeroRedundancyOptimizer(torch.optim.AdamW, foreach=True)"
        if a.grad_accum > 1:
            impl += ", no_sync() on the non-final micro-steps"
        return ddp, opt, None, impl
    if a.strategy.startswith("fsdp-") and a.fsdp == 1:
        return _build_fsdp1(a, spec, world, target, opt_kw)
    if a.strategy.startswith("fsdp-"):
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.fsdp import fully_shard, MixedPrecisionPolicy
        if a.strategy == "fsdp-hybrid":
            g = a.shard_group
            mesh = init_device_mesh(target.type, (world // g, g), mesh_dim_names=("replicate", "shard"))
        else:
            mesh = init_device_mesh(target.type, (world,))
        raf = a.strategy != "fsdp-grad-op"
        kw = {"mesh": mesh, "reshard_after_forward": raf}
        mp = ""
        if a.precision == "mixed-bf16":
            kw["mp_policy"] = MixedPrecisionPolicy(param_dtype=torch.bfloat16,
                                                   reduce_dtype=torch.float32)
            mp = ", MixedPrecisionPolicy(param_dtype=bf16, reduce_dtype=fp32)"
        blocks = spec.block_modules()
        for b in blocks:
            fully_shard(b, **kw)
        # the root as users write it: fully_shard(model) leaves reshard_after_forward at its
        # default (None), which _lazy_init turns into False for the root (_fsdp_state.py: "the
        # parameters would be freed and all-gathered immediately"), so the root stays unsharded
        # from its forward through backward and is not all-gathered again in backward
        fully_shard(model, **{k: v for k, v in kw.items() if k != "reshard_after_forward"})
        opt = torch.optim.AdamW(model.parameters(), **opt_kw)
        mesh_s = (f"2-D mesh (replicate {world // a.shard_group} x shard {a.shard_group})"
                  if a.strategy == "fsdp-hybrid" else f"1-D mesh of {world}")
        impl = (f"FSDP2 fully_shard per block ({len(blocks)} x {type(blocks[0]).__name__}) + "
                f"root, reshard_after_forward={raf} on every block (the root at fully_shard's default: "
                f"kept unsharded after forward), {mesh_s}{mp}, "
                "torch.optim.AdamW(foreach=True)")
        if a.grad_accum > 1:
            impl += (", gradients reduce-scattered every micro-step (accumulated sharded)"
                     if a.fsdp_grad_sync == "every" else
                     ", set_requires_gradient_sync(False) on the non-final micro-steps "
                     "(unsharded gradients accumulated, one reduce-scatter per step)")
        return model, opt, None, impl
    # DeepSpeed
    import deepspeed
    stage = int(a.strategy[-1])
    cfg = {
        "train_micro_batch_size_per_gpu": a.batch,
        "gradient_accumulation_steps": a.grad_accum,
        "optimizer": {"type": "AdamW", "params": {"lr": LR}},
        "zero_optimization": dict({"stage": stage}, **(a.ds_zero or {})),
        # mixed-bf16: DeepSpeed's bf16 (16-bit model, fp32 master and moments); bf16: pure, the
        # master and the moments in bf16 too (precision_config.py), as memplan auto emits it
        "bf16": ({"enabled": True, "bf16_master_weights_and_grads": True, "bf16_optimizer_states": True}
                 if a.precision == "bf16" else {"enabled": a.precision == "mixed-bf16"}),
        "steps_per_print": 10 ** 9,
        "wall_clock_breakdown": False,
    }
    opt_name = "DeepSpeed FusedAdam (adam_w_mode, CPU op)"
    if os.environ.get("MEMPLAN_DS_TORCH_ADAM") == "1" or not _fused_adam_available():
        cfg["optimizer"]["params"].update({"torch_adam": True, "foreach": True})
        opt_name = "torch.optim.AdamW(foreach=True) via torch_adam (FusedAdam not buildable)"
    _mark_deepspeed_comm()
    engine, opt, _, _ = deepspeed.initialize(model=model, model_parameters=model.parameters(),
                                             config=cfg)
    impl = (f"DeepSpeed {deepspeed.__version__} ZeRO stage {stage} "
            f"({'zero_optimization ' + json.dumps(a.ds_zero) if a.ds_zero else 'defaults'}; "
            f"bf16={a.precision in ('mixed-bf16', 'bf16')}{' pure' if a.precision == 'bf16' else ''}), {opt_name}, "
            f"optimizer wrapper {type(opt).__name__}")
    if a.grad_accum > 1:
        impl += f", engine.step() after each of the {a.grad_accum} micro-batches"
    return engine, opt, engine, impl


def _build_fsdp1(a, spec, world, target, opt_kw):
    """--fsdp 1: FullyShardedDataParallel with flat parameters (torch/distributed/fsdp/
    fully_sharded_data_parallel.py), units from ModuleWrapPolicy(block class) or, with
    --fsdp-min-params N, size_based_auto_wrap_policy(min_num_params=N) (wrap.py); its
    limit_all_gathers, backward_prefetch and forward_prefetch from the flags."""
    import functools
    import torch
    from torch.distributed.fsdp import (BackwardPrefetch, FullyShardedDataParallel as FSDP,
                                        ShardingStrategy)
    from torch.distributed.fsdp.wrap import ModuleWrapPolicy, size_based_auto_wrap_policy
    model = spec.model
    blocks = spec.block_modules()
    if a.fsdp_min_params:
        policy = functools.partial(size_based_auto_wrap_policy, min_num_params=a.fsdp_min_params)
        wrap = f"size_based_auto_wrap_policy(min_num_params={a.fsdp_min_params})"
    else:
        policy = ModuleWrapPolicy({type(blocks[0])})
        wrap = f"ModuleWrapPolicy({{{type(blocks[0]).__name__}}}) ({len(blocks)} blocks)"
    kw = {}
    if a.strategy == "fsdp-hybrid":
        from torch.distributed.device_mesh import init_device_mesh
        g = a.shard_group
        kw["device_mesh"] = init_device_mesh(target.type, (world // g, g),
                                             mesh_dim_names=("replicate", "shard"))
    strat = {"fsdp-full": ShardingStrategy.FULL_SHARD, "fsdp-grad-op": ShardingStrategy.SHARD_GRAD_OP,
             "fsdp-hybrid": ShardingStrategy.HYBRID_SHARD}[a.strategy]
    bp = {"pre": BackwardPrefetch.BACKWARD_PRE, "post": BackwardPrefetch.BACKWARD_POST,
          "none": None}[a.fsdp_backward_prefetch]
    fsdp = FSDP(model, auto_wrap_policy=policy, sharding_strategy=strat,
                device_id=torch.device(target.device),
                limit_all_gathers=a.fsdp_limit_all_gathers == "on", backward_prefetch=bp,
                forward_prefetch=a.fsdp_forward_prefetch == "on", use_orig_params=True, **kw)
    units = sum(1 for m in fsdp.modules() if isinstance(m, FSDP))
    opt = torch.optim.AdamW(fsdp.parameters(), **opt_kw)
    impl = (f"FSDP1 FullyShardedDataParallel({strat.name}, {wrap}: {units} FSDP instances with the "
            f"root, limit_all_gathers={a.fsdp_limit_all_gathers == 'on'}, backward_prefetch="
            f"{bp.name if bp else None}, forward_prefetch={a.fsdp_forward_prefetch == 'on'}, "
            "use_orig_params=True), torch.optim.AdamW(foreach=True)")
    if a.grad_accum > 1:
        impl += (", no_sync() on the non-final micro-steps" if a.fsdp_grad_sync == "last" else
                 ", gradients reduce-scattered every micro-step")
    return fsdp, opt, None, impl


# DeepSpeed functions whose allocations are communication buffers (gradient buckets, gathered
# parameters, flattened reduction inputs); gradients and optimizer state made inside them are
# still identified as such by the snapshots, which take precedence.
_DS_COMM = {
    "deepspeed.runtime.zero.stage_1_and_2.DeepSpeedZeroOptimizer": (
        "setup_buckets", "reduce_ipg_grads", "average_tensor", "allreduce_bucket",
        "allreduce_and_copy", "allreduce_no_retain", "gradient_reduction_w_predivide",
        "all_gather_dp_groups"),
    "deepspeed.runtime.zero.stage3.DeepSpeedZeroOptimizer_Stage3": (
        "setup_buckets", "_DeepSpeedZeroOptimizer_Stage3__reduce_and_partition_ipg_grads",
        "_DeepSpeedZeroOptimizer_Stage3__avg_scatter_grads", "allreduce_bucket"),
    "deepspeed.runtime.zero.partitioned_param_coordinator.PartitionedParameterCoordinator": (
        "fetch_sub_module", "release_sub_module"),
}


def _mark_deepspeed_comm():
    import importlib
    for path, fns in _DS_COMM.items():
        mod, cls_name = path.rsplit(".", 1)
        cls = getattr(importlib.import_module(mod), cls_name)
        for fn in fns:
            orig = cls.__dict__.get(fn)
            if orig is None or getattr(orig, "_memplan", False):
                continue

            def w(self, *x, _orig=orig, _label="memplan::comm::ds_" + fn.split("__")[-1], **k):
                with rf(_label):
                    return _orig(self, *x, **k)

            w._memplan = True
            setattr(cls, fn, w)


def _report_all_frees():
    """Turn on c10's FLAGS_caffe2_report_cpu_memory_usage (an exported bool in libc10.so).
    With it, ProfiledCPUMemoryReporter keeps its size table and running total for
    allocations and frees on every thread, so each profiler memory event carries the exact
    live total even when a block is freed on a thread the profiler does not follow.  (It also
    LOG(INFO)s each allocation; c10's default log level, WARNING, drops those.)"""
    import ctypes
    import torch
    lib = os.path.join(os.path.dirname(torch.__file__), "lib", "libc10.so")
    try:
        ctypes.c_bool.in_dll(ctypes.CDLL(lib), "FLAGS_caffe2_report_cpu_memory_usage").value = True
        return True
    except (OSError, ValueError):
        return False


def _fused_adam_available():
    try:
        from deepspeed.ops.op_builder import FusedAdamBuilder
        FusedAdamBuilder().load(verbose=False)
        return True
    except Exception:  # noqa: BLE001 - any build/load failure means "not available"
        return False


# ----------------------------------------------------------------------------------------
# run


def run(a, rank, world):
    import torch
    import torch.distributed as dist
    import models
    import measure
    import cuda_mode

    torch.set_num_threads(1)
    target = cuda_mode.Target(a, rank, world)
    meter = cuda_mode.Meter(target) if a.measure == "cuda" else None
    if meter is not None and a.alloc_trace is not None and rank == 0:
        meter.record_history()   # before the context and cuBLAS: their blocks are in it too
    prof = None
    if a.measure == "profiler":
        from torch.profiler import profile, ProfilerActivity
        prof = profile(activities=[ProfilerActivity.CPU], profile_memory=True,
                       record_shapes=True)
        exact = _report_all_frees()
        prof.start()
    is_ds = a.strategy.startswith("zero")
    if is_ds:
        if target.dry:
            os.environ.setdefault("DS_ACCELERATOR", "cpu")   # a GPU run's DeepSpeed picks cuda
        import deepspeed
        deepspeed.init_distributed(dist_backend=target.backend)
    elif not dist.is_initialized():
        dist.init_process_group(target.backend)
    # control traffic (turns, results) on CPU tensors: never through NCCL, never a CUDA context
    ctrl = dist.new_group(backend="gloo") if target.backend != "gloo" else None
    if meter is not None:
        meter.init_device(lambda: dist.barrier(group=ctrl))
        meter.probe_cublas()

    torch.manual_seed(a.seed)
    # built on the CPU from the seed, then moved: the same initial weights as the CPU rows
    spec = models.build(a.model, a.attn, a.dropout)
    model = spec.model.to(target.device)
    if a.precision == "bf16" and not a.strategy.startswith("zero"):
        model = model.to(torch.bfloat16)   # pure bf16: parameters, gradients and AdamW states
    lora = None
    if a.lora:
        # PEFT as users write it: LoraConfig + get_peft_model on the built model (every base
        # parameter frozen, bias="none"); the PeftModel is what is wrapped and called
        from peft import LoraConfig, get_peft_model
        import peft
        kw = {"r": a.lora, "lora_alpha": a.lora_alpha if a.lora_alpha is not None else 2 * a.lora,
              "lora_dropout": a.lora_dropout}
        if a.lora_targets:
            kw["target_modules"] = (a.lora_targets if a.lora_targets == "all-linear"
                                    else a.lora_targets.split(","))
        model = get_peft_model(model, LoraConfig(**kw))
        lora = {"rank": a.lora, "alpha": kw["lora_alpha"], "dropout": a.lora_dropout,
                "targets": a.lora_targets, "peft": peft.__version__,
                "target_modules": sorted(model.peft_config["default"].target_modules)}
    if a.freeze != "none":
        models.freeze(model, a.freeze, spec.block_modules())
    spec.model = model
    n_params = models.param_count(model)
    n_trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
    seq = a.seq if a.seq is not None else spec.context
    model.train()
    if a.act_ckpt != "none":
        apply_checkpointing(model, spec, a.act_ckpt)
    if a.moe_routing != "natural":
        apply_routing(model, a.moe_routing)
    add_module_markers(model)

    with rf("memplan::wrap"):
        runner, opt, engine, impl = build_strategy(a, spec, world, rank, target)
    ds_opt = opt if engine is not None else None
    states = States(model, opt, a.strategy, ds_opt, target.type)

    base = {k: v.to(target.device)
            for k, v in models.make_batch(spec, a.batch, seq, a.seed + 1 + rank).items()}
    amp = (torch.autocast(target.type, dtype=torch.bfloat16) if a.precision == "amp-bf16"
           else contextlib.nullcontext())
    snaps = []
    model_states = None
    mt = None
    if a.measure == "memtracker":
        from torch.distributed._tools.mem_tracker import MemTracker
        mt = MemTracker()
        mt.track_external(runner, opt)

    def snapshot(label):
        name = f"memplan::snap::{len(snaps)}"
        with rf(name):
            pass
        snaps.append((name, {k: set(v) for k, v in states.collect().items()}))

    def phase(name):
        """One phase: the profiler's marker, and in CUDA mode the meter's window around it."""
        marker = rf("memplan::phase::" + name)
        return meter.phase(name, marker) if meter is not None else marker

    losses, times = [], []
    out = loss = None
    mt_best = None
    if meter is not None:
        meter.start_run()
    # --loss-parallel on: forward and backward run inside torch's loss_parallel() (its custom
    # log_softmax/nll_loss handlers on the vocab-sharded logits; "the corresponding backward() call
    # also needs to happen under this context manager": torch/distributed/tensor/parallel/loss.py),
    # as torchtitan's train_context does; the optimizer step is unaffected by it
    lp_ctx = contextlib.ExitStack()
    if a.loss_parallel == "on":
        from torch.distributed.tensor.parallel import loss_parallel
        lp_ctx.enter_context(loss_parallel())
    for step in range(1, a.steps + 1):
        mctx = mt if (mt is not None and step >= 2) else contextlib.nullcontext()
        if mt is not None and step >= 2:
            mt.reset_mod_stats()    # MemTracker refuses a second iteration otherwise
        if meter is not None:
            meter.begin_step(step)
        with mctx, rf(f"memplan::step{step}"):
            t0 = time.perf_counter()
            step_loss = 0.0
            for micro in range(a.grad_accum):
                last = micro == a.grad_accum - 1
                # gradient sync on the non-final micro-steps: DDP skips its all-reduce inside
                # no_sync() (gradients accumulate in .grad, unreduced); FSDP2 reduce-scatters
                # every micro-step and accumulates the sharded gradients (fsdp_grad_sync every,
                # its default) unless set_requires_gradient_sync(False) keeps each unit's
                # unsharded gradient until the last one (last); DeepSpeed decides itself from
                # its micro-step counter (engine.step() after every micro-batch, below)
                sync = contextlib.nullcontext()
                fsdp1_every = a.fsdp == 1 and a.strategy.startswith("fsdp-") and a.fsdp_grad_sync == "every"
                if engine is None and hasattr(runner, "no_sync"):
                    if not last and not fsdp1_every:
                        sync = runner.no_sync()
                elif (engine is None and hasattr(runner, "set_requires_gradient_sync")
                      and a.fsdp_grad_sync == "last" and a.grad_accum > 1):
                    runner.set_requires_gradient_sync(last)
                with sync:
                    with phase("data"):
                        batch = {k: v.clone() for k, v in base.items()}
                    with phase("forward"), amp:
                        out = models.forward(spec, runner, batch)
                        loss = out.loss
                        if engine is None and a.grad_accum > 1:
                            loss = loss / a.grad_accum
                    if a.loop == "hf":
                        out = None
                        del batch
                    with phase("backward"):
                        if engine is not None:
                            engine.backward(loss)
                        else:
                            loss.backward()
                    step_loss += float(loss.detach()) * (a.grad_accum if engine is None
                                                         else 1) / a.grad_accum
                    if a.loop == "hf":
                        loss = None
                if not last:
                    if engine is not None:
                        # DeepSpeed counts micro-steps in engine.step() (micro_steps += 1) and
                        # steps the optimizer only at the accumulation boundary
                        # (is_gradient_accumulation_boundary: (micro_steps + 1) % K == 0), so it
                        # is called after every micro-batch; off the boundary it only counts
                        with phase("backward"):
                            engine.step()
                    snapshot("after_micro_step")   # what the micro-step leaves accumulated
            snapshot("after_backward")
            if step == 2:
                ms_bwd = {k: sum(v.values()) for k, v in states.collect().items()}
            with phase("optimizer"):
                if engine is not None:
                    engine.step()
                else:
                    opt.step()
            snapshot("after_optimizer")
            if step == 2:
                ms_opt = {k: sum(v.values()) for k, v in states.collect().items()}
                # gradients as they stand after backward (DeepSpeed frees them in its step),
                # parameters and optimizer state after the step (lazily created in step 1)
                model_states = {"params": max(ms_bwd["params"], ms_opt["params"]),
                                "grads": max(ms_bwd["grads"], ms_opt["grads"]),
                                "optimizer": max(ms_bwd["optimizer"], ms_opt["optimizer"])}
            if engine is None:
                with phase("zero_grad"):
                    opt.zero_grad(set_to_none=(a.zero_grad == "none"))
            snapshot("after_zero_grad")
            if meter is not None:
                meter.sync()   # the step's kernels have run: its time is the GPU's
            times.append((time.perf_counter() - t0) * 1e3)
            losses.append(step_loss)
        if mt is not None and step >= 2:
            # entering MemTracker resets its peak: keep the largest per-step peak
            snap = mt.get_tracker_snapshot("peak")
            dev = next(iter(snap.values())) if snap else {}
            if mt_best is None or dev.get("Total", 0) > mt_best.get("Total", 0):
                mt_best = dev
    out = loss = None
    lp_ctx.close()

    per_rank = {"rank": rank}
    if prof is not None:
        prof.stop()
        tr = measure.Trace(prof)
        measure.apply_snapshots(tr, snaps)
        s2 = tr.marker("memplan::step2")
        sk = tr.marker(f"memplan::step{a.steps}")
        i = measure.peak(tr, s2[0], sk[1], exact)
        t = tr.times[i]
        total = tr.true[i] if exact else tr.total[i]
        pa = tr.event_alloc[i]
        phase, module, comm, _, _ = tr.context(pa.ev) if pa is not None else (None, None, None,
                                                                               0, 0)
        if phase == "optimizer":
            module = "optimizer"
        elif phase == "zero_grad":
            module = "optimizer.zero_grad"
        elif phase == "data":
            module = "data"
        elif module is None:
            module = (comm or "model").replace("memplan::comm::", "")
        split, detail, backend, casts, dropped, unattributed = measure.split_at(tr, t, total)
        assert sum(split.values()) == total, (split, total)
        per_rank.update({
            "peak_bytes": total,
            "peak_bytes_rebuilt": tr.total[i],
            "exact_total": exact,
            "at_peak_unseen_freed_removed": dropped,
            "at_peak_unattributed": unattributed,
            "peak_phase": phase or "setup",
            "peak_module": module,
            "peak_step": tr.step_of(t),
            "at_peak": split,
            "at_peak_top": measure.top_rows(detail, 12),
            "at_peak_backend_internal": backend,
            "at_peak_dtype_casts": casts,
            "unseen_frees": tr.unseen_frees,
            "unseen_free_bytes": tr.unseen_free_bytes,
            "unmatched_free_bytes": tr.unmatched_free,
            "allocator_reported_total_end": tr.last_reported_total,
            "rebuilt_total_end": tr.final_live,
        })
        # the peak a GPU run would see: without gloo's in-collective buffers (NCCL allocates
        # none through PyTorch's allocator); memplan validate --against torch compares this
        j, lo, up = measure.peak_excl_backend(tr, s2[0], sk[1], exact)
        pj = tr.event_alloc[j]
        ph_j, mod_j, comm_j, _, _ = tr.context(pj.ev) if pj is not None else (None, None, None, 0, 0)
        split_j = {c: 0 for c in measure.CATS}
        tj = tr.times[j]
        detail_j = collections.Counter()
        for al in tr.allocs:
            if al.t0 <= tj and (al.t1 is None or tj < al.t1) and not measure._is_backend(tr, al):
                cj = measure.classify(tr, al, tj)
                split_j[cj] += al.size
                detail_j[measure.detail_key(tr, al, cj) +
                         ("unseen" if al.unseen or al.t1 is None else "",)] += al.size
        per_rank["peak_excl_backend"] = {
            "bytes": lo, "bytes_upper": up,
            "peak_phase": ph_j or "setup",
            "peak_module": mod_j or (comm_j or "model").replace("memplan::comm::", ""),
            "peak_step": tr.step_of(tj),
            "at_peak": split_j,
            # as at_peak_top, at this moment; "free": "unseen" marks blocks whose free the
            # profiler did not see (closed at the reuse of their address, or never)
            "at_peak_top": measure.top_rows(detail_j, 16),
        }
        coll = measure.collectives(tr, a.steps, _shard_group(a, world)
                                   if a.fsdp == 1 and a.strategy.startswith("fsdp-") else None)
        if a.alloc_trace is not None and rank == 0:
            measure.write_alloc_trace(tr, a.alloc_trace, [
                "memplan allocation trace v1 (bench/torch/harness.py --alloc-trace), rank 0",
                f"setup {a.model} {a.strategy} {a.precision} act-ckpt {a.act_ckpt} attn "
                f"{a.attn} ranks {world} batch {a.batch} seq {seq} grad-accum {a.grad_accum} "
                f"steps {a.steps}",
                f"torch {torch.__version__}",
                f"peak_bytes {total} (steps 2..{a.steps}, gloo's buffers included)",
                f"peak_excl_backend {lo} (without them)"], ops=a.alloc_ops)
    elif meter is not None:
        per_rank["device_index"] = target.index
        per_rank["cuda"] = meter.result(first_steady_step=2)
        if a.alloc_trace is not None and rank == 0:
            meter.write_history(a.alloc_trace, [
                "memplan allocation trace v1 (bench/torch/harness.py --device cuda --alloc-trace), rank 0",
                f"setup {a.model} {a.strategy} {a.precision} act-ckpt {a.act_ckpt} attn {a.attn} ranks {world} "
                f"batch {a.batch} seq {seq} grad-accum {a.grad_accum} steps {a.steps}",
                f"torch {torch.__version__}; the caching allocator's history (free_completed as f)",
                f"max_memory_reserved {per_rank['cuda'].get('max_memory_reserved')} (steps 2..{a.steps})"])
        coll = []
    else:
        dev = mt_best or {}
        per_rank.update({"peak_bytes": int(dev.get("Total", 0)),
                         "memtracker_peak": {str(k): int(v) for k, v in dev.items()}})
        coll = []
    per_rank["model_states"] = model_states
    steady = times[1:]
    per_rank["step_ms"] = round(sum(steady) / len(steady), 3)
    per_rank["step_ms_all"] = [round(x, 3) for x in times]

    gathered = [None] * world
    dist.all_gather_object(gathered, per_rank, group=ctrl)
    versions = _versions()
    versions.update(cuda_mode.versions(target))
    doc = {
        "harness": "memplan bench/torch/harness.py",
        "versions": versions,
        "implementation": impl,
        "measured_by": (
            "total: torch.profiler profile_memory=True allocation events of c10's CPU "
            "allocator (C++ allocations included), running live bytes rebuilt from alloc/free; "
            "categories: storage addresses of params/grads/optimizer state recorded at "
            "snapshots, the rest by the phase / module / comm range the allocation was made in"
            if prof is not None else
            "per_rank[].cuda: torch.cuda.max_memory_allocated / max_memory_reserved / "
            "memory_stats' requested_bytes peak per phase (peak statistics reset at each phase), "
            "steady peak over steps 2..K; memory_stats and memory_snapshot's segments at the end; "
            "context: device memory used (NVML, else nvidia-smi) before and cudaMemGetInfo after "
            "CUDA's init in this process, ranks in turn, less the allocator's reserved bytes; "
            "cuBLAS: allocated bytes the first SGEMM leaves held (its workspace)"
            if meter is not None else
            "total: torch.distributed._tools.mem_tracker.MemTracker (Python-visible tensors: "
            "dispatch-mode allocations + tracked parameters/gradients/optimizer state), peak "
            "over steps 2..K"),
        "model": {"name": spec.name, "source": a.model, "class": spec.cls_name, "params": n_params,
                  "trainable_params": n_trainable},
        "setup": {"ranks": world, "strategy": a.strategy, "batch": a.batch, "seq": seq,
                  "grad_accum": a.grad_accum, "steps": a.steps, "precision": a.precision,
                  "act_ckpt": a.act_ckpt, "attn": a.attn, "dropout": a.dropout,
                  "bucket_mb": a.bucket_mb if a.bucket_mb is not None else 25,
                  # DDP's own buckets (25 MiB, the first 1 MiB) or --bucket-mb for all of them:
                  # memplan plans the DDP bucket count from this, never from `implementation`
                  "bucket_mb_default": a.bucket_mb is None,
                  "grad_as_bucket_view": a.grad_as_bucket_view, "zero_grad": a.zero_grad,
                  "loop": a.loop, "shard_group": _shard_group(a, world), "seed": a.seed,
                  "fsdp_grad_sync": a.fsdp_grad_sync, "ds_zero": a.ds_zero or {},
                  "tp": a.tp, "sp": a.sp == "on", "loss_parallel": a.loss_parallel == "on", "ep": a.ep, "moe_routing": a.moe_routing,
                  "lora": lora, "freeze": a.freeze,
                  "fsdp": a.fsdp if a.strategy.startswith("fsdp-") else 2,
                  "fsdp_min_params": a.fsdp_min_params,
                  "fsdp_limit_all_gathers": a.fsdp_limit_all_gathers,
                  "fsdp_backward_prefetch": a.fsdp_backward_prefetch,
                  "fsdp_forward_prefetch": a.fsdp_forward_prefetch,
                  "measure": a.measure, "device": a.device, "backend": target.backend},
        "per_rank": sorted(gathered, key=lambda r: r["rank"]),
        "collectives": coll,
        "collectives_step": a.steps,
        "loss": [round(x, 6) for x in losses],
        # "cuda" rows are GPU rows: bench/torch/results/cuda/, never compared as CPU rows
        "device": a.device,
        "status": "ok",
    }
    if meter is not None:
        _cuda_fields(doc, target, meter)
        if rank == 0:
            print(cuda_mode.summary_line(doc), file=sys.stderr, flush=True)
    return doc


def _cuda_fields(doc, target, meter):
    """What a CUDA row adds at the top: the backend and why, what --dry-cpu skipped."""
    doc["dry_cpu"] = target.dry
    doc["backend"] = target.describe()
    doc["collectives_note"] = ("not recorded in CUDA mode (no torch.profiler there: its CUDA "
                               "activity would add buffers of its own); the CPU row of the same "
                               "setup has them")
    if target.dry:
        doc["cuda_skipped"] = meter.skipped
    return doc


def _shard_group(a, world):
    if a.strategy == "fsdp-hybrid":
        return a.shard_group
    if a.strategy.startswith("fsdp-") or a.strategy in ("zero1", "zero2", "zero3",
                                                        "torch-zero1"):
        return world // a.tp
    return 1


def _versions():
    import torch
    v = {"torch": torch.__version__, "python": platform.python_version()}
    try:
        import transformers
        v["transformers"] = transformers.__version__
    except ImportError:
        v["transformers"] = None
    try:
        import deepspeed
        v["deepspeed"] = deepspeed.__version__
    except ImportError:
        v["deepspeed"] = None
    try:
        import torchvision
        v["torchvision"] = torchvision.__version__
    except ImportError:
        v["torchvision"] = None
    return v


_JSON_FD = None   # the real stdout when --json -; everything else printed goes to stderr


def write_json(path, doc):
    text = json.dumps(doc, indent=1) + "\n"
    if path == "-":
        data = text.encode()
        while data:
            data = data[os.write(_JSON_FD if _JSON_FD is not None else 1, data):]
    else:
        tmp = path + ".tmp"
        with open(tmp, "w") as f:
            f.write(text)
        os.replace(tmp, path)


def main(argv):
    rank = int(os.environ.get("RANK", "0"))
    try:
        a = parse_args(argv)
    except SetupError as e:
        if rank == 0:
            print(f"harness: {e}", file=sys.stderr)
        return 2
    if a.json == "-":
        # libraries (DeepSpeed's logger, gloo) print to stdout: keep stdout for the JSON only
        global _JSON_FD
        sys.stdout.flush()
        _JSON_FD = os.dup(1)
        os.dup2(2, 1)
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import models
    if a.model not in models.ZOO_NAMES and not os.path.isfile(a.model):
        if rank == 0:
            print(f"harness: --model {a.model}: not a zoo name ({', '.join(models.ZOO_NAMES)}) "
                  "nor a config.json path", file=sys.stderr)
        return 2
    if a.params_only:
        spec = models.build(a.model, a.attn, a.dropout, device="meta")
        write_json(a.json, {"harness": "memplan bench/torch/harness.py",
                            "versions": _versions(),
                            "model": {"name": spec.name, "class": spec.cls_name,
                                      "params": models.param_count(spec.model),
                                      "context": spec.context},
                            "status": "ok"})
        return 0
    if "RANK" not in os.environ:
        os.environ.update({"RANK": "0", "WORLD_SIZE": "1", "LOCAL_RANK": "0",
                           "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29531"})
    world = int(os.environ["WORLD_SIZE"])
    if a.strategy.startswith("zero"):
        try:
            import deepspeed  # noqa: F401
        except ImportError:
            if rank == 0:
                print(f"harness: --strategy {a.strategy}: deepspeed is not installed "
                      "(make torch-env); valid without it: ddp, torch-zero1, fsdp-full, "
                      "fsdp-grad-op, fsdp-hybrid", file=sys.stderr)
            return 2
    if a.tp > 1 and (world % a.tp or (a.strategy == "ddp" and world != a.tp)
                     or (a.strategy == "fsdp-full" and world == a.tp)):
        if rank == 0:
            print(f"harness: --tp {a.tp} on {world} ranks: tp must divide the ranks (ddp: tp = ranks, "
                  "pure TP; fsdp-full: ranks / tp > 1)", file=sys.stderr)
        return 2
    if a.strategy == "fsdp-hybrid":
        if a.shard_group is None:
            a.shard_group = max(1, world // 2)
        if a.shard_group < 1 or world % a.shard_group:
            if rank == 0:
                print(f"harness: --shard-group {a.shard_group}: must divide the {world} ranks",
                      file=sys.stderr)
            return 2
    try:
        doc = run(a, rank, world)
    except Exception as e:  # noqa: BLE001 - report any failure as one line, exit non-zero
        msg = f"{type(e).__name__}: {e}".replace("\n", " ")[:500]
        print(f"harness: rank {rank}: {msg}", file=sys.stderr)
        traceback.print_exc(file=sys.stderr)
        if rank == 0:
            try:
                write_json(a.json, {"harness": "memplan bench/torch/harness.py",
                                    "versions": _versions(), "device": a.device,
                                    "status": "error", "error": msg})
            except OSError:
                pass
        return 1
    if rank == 0:
        write_json(a.json, doc)
    import torch.distributed as dist
    if dist.is_initialized():
        dist.barrier()
        dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
