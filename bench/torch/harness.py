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
PRECISIONS = ("fp32", "amp-bf16", "mixed-bf16")
LR = 1e-4


class SetupError(Exception):
    """A setup the harness cannot run: exit 2."""


def parse_args(argv):
    p = argparse.ArgumentParser(prog="harness.py", description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default="gpt2-mini")
    p.add_argument("--strategy", default="ddp")
    p.add_argument("--batch", type=int, default=1)
    p.add_argument("--seq", type=int, default=None)
    p.add_argument("--grad-accum", type=int, default=1)
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--precision", default="fp32")
    p.add_argument("--act-ckpt", default="none")
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
    p.add_argument("--seed", type=int, default=1234)
    p.add_argument("--json", default="-")
    p.add_argument("--measure", default="profiler")
    p.add_argument("--alloc-trace", default=None, metavar="PATH",
                   help="write rank 0's allocation sequence (alloc/free with address and size, "
                        "phase markers) to PATH for `memplan alloc` (profiler measurement only)")
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
        check("act-ckpt", a.act_ckpt, ("none", "full", "every:N"))
    check("attn", a.attn, ("eager", "sdpa"))
    check("zero-grad", a.zero_grad, ("none", "zeros"))
    check("loop", a.loop, ("hf", "common"))
    check("fsdp-grad-sync", a.fsdp_grad_sync, ("every", "last"))
    check("grad-as-bucket-view", a.grad_as_bucket_view, (0, 1))
    check("measure", a.measure, ("profiler", "memtracker"))
    if a.alloc_trace is not None and a.measure != "profiler":
        raise SetupError("--alloc-trace needs --measure profiler (the allocation events come "
                         "from its trace)")
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


def apply_checkpointing(model, spec, mode):
    """--act-ckpt full: every repeated block recomputed in backward (non-reentrant
    torch.utils.checkpoint: HF's gradient_checkpointing_enable, or checkpoint_wrapper for the
    torchvision blocks); every:N: blocks N, 2N, ... counted from 1, as torchtitan's layer
    selective AC chose them (its counter incremented before `count % ac_freq == 0`)."""
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

    def __init__(self, model, opt, strategy, ds_opt=None):
        self.model, self.opt, self.strategy, self.ds_opt = model, opt, strategy, ds_opt

    def collect(self):
        import torch
        out = {"params": {}, "grads": {}, "optimizer": {}, "comm_buffers": {}}

        def add(cat, t):
            if t is None or t.device.type != "cpu":
                return
            ptr, nb = _storage_ptr(t)
            if ptr:
                out[cat][ptr] = nb

        for g in _fsdp2_unsharded_grads(self.model):
            add("grads", _local(g))
        for p in self.model.parameters():
            if hasattr(p, "ds_tensor"):
                add("params", p.ds_tensor)
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


def build_strategy(a, spec, world, rank):
    """Wrap the model; returns (model_to_call, optimizer, ds_engine or None, implementation)."""
    import torch
    import torch.distributed as dist
    model = spec.model
    opt_kw = dict(lr=LR, foreach=True)
    if a.strategy == "none":
        opt = torch.optim.AdamW(model.parameters(), **opt_kw)
        return model, opt, None, ("plain module, no data parallelism, "
                                  "torch.optim.AdamW(foreach=True)")
    if a.strategy in ("ddp", "torch-zero1"):
        from torch.nn.parallel import DistributedDataParallel as DDP
        kw = {"gradient_as_bucket_view": bool(a.grad_as_bucket_view)}
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
    if a.strategy.startswith("fsdp-"):
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.fsdp import fully_shard, MixedPrecisionPolicy
        if a.strategy == "fsdp-hybrid":
            g = a.shard_group
            mesh = init_device_mesh("cpu", (world // g, g), mesh_dim_names=("replicate", "shard"))
        else:
            mesh = init_device_mesh("cpu", (world,))
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
                "torch.optim.AdamW(foreach=True) (flat-parameter FSDP refuses CPU in torch 2.15)")
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
        "zero_optimization": {"stage": stage},
        "bf16": {"enabled": a.precision == "mixed-bf16"},
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
            f"(defaults; bf16={a.precision == 'mixed-bf16'}), {opt_name}, "
            f"optimizer wrapper {type(opt).__name__}")
    if a.grad_accum > 1:
        impl += f", engine.step() after each of the {a.grad_accum} micro-batches"
    return engine, opt, engine, impl


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

    torch.set_num_threads(1)
    prof = None
    if a.measure == "profiler":
        from torch.profiler import profile, ProfilerActivity
        prof = profile(activities=[ProfilerActivity.CPU], profile_memory=True,
                       record_shapes=True)
        exact = _report_all_frees()
        prof.start()
    is_ds = a.strategy.startswith("zero")
    if is_ds:
        import deepspeed
        deepspeed.init_distributed(dist_backend="gloo")
    elif not dist.is_initialized():
        dist.init_process_group("gloo")

    torch.manual_seed(a.seed)
    spec = models.build(a.model, a.attn, a.dropout)
    model = spec.model
    n_params = models.param_count(model)
    seq = a.seq if a.seq is not None else spec.context
    model.train()
    if a.act_ckpt != "none":
        apply_checkpointing(model, spec, a.act_ckpt)
    add_module_markers(model)

    with rf("memplan::wrap"):
        runner, opt, engine, impl = build_strategy(a, spec, world, rank)
    ds_opt = opt if engine is not None else None
    states = States(model, opt, a.strategy, ds_opt)

    base = models.make_batch(spec, a.batch, seq, a.seed + 1 + rank)
    amp = (torch.autocast("cpu", dtype=torch.bfloat16) if a.precision == "amp-bf16"
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

    losses, times = [], []
    out = loss = None
    mt_best = None
    for step in range(1, a.steps + 1):
        mctx = mt if (mt is not None and step >= 2) else contextlib.nullcontext()
        if mt is not None and step >= 2:
            mt.reset_mod_stats()    # MemTracker refuses a second iteration otherwise
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
                if engine is None and hasattr(runner, "no_sync"):
                    if not last:
                        sync = runner.no_sync()
                elif (engine is None and hasattr(runner, "set_requires_gradient_sync")
                      and a.fsdp_grad_sync == "last" and a.grad_accum > 1):
                    runner.set_requires_gradient_sync(last)
                with sync:
                    with rf("memplan::phase::data"):
                        batch = {k: v.clone() for k, v in base.items()}
                    with rf("memplan::phase::forward"), amp:
                        out = models.forward(spec, runner, batch)
                        loss = out.loss
                        if engine is None and a.grad_accum > 1:
                            loss = loss / a.grad_accum
                    if a.loop == "hf":
                        out = None
                        del batch
                    with rf("memplan::phase::backward"):
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
                        with rf("memplan::phase::backward"):
                            engine.step()
                    snapshot("after_micro_step")   # what the micro-step leaves accumulated
            snapshot("after_backward")
            if step == 2:
                ms_bwd = {k: sum(v.values()) for k, v in states.collect().items()}
            with rf("memplan::phase::optimizer"):
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
                with rf("memplan::phase::zero_grad"):
                    opt.zero_grad(set_to_none=(a.zero_grad == "none"))
            snapshot("after_zero_grad")
            times.append((time.perf_counter() - t0) * 1e3)
            losses.append(step_loss)
        if mt is not None and step >= 2:
            # entering MemTracker resets its peak: keep the largest per-step peak
            snap = mt.get_tracker_snapshot("peak")
            dev = next(iter(snap.values())) if snap else {}
            if mt_best is None or dev.get("Total", 0) > mt_best.get("Total", 0):
                mt_best = dev
    out = loss = None

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
        coll = measure.collectives(tr, a.steps)
        if a.alloc_trace is not None and rank == 0:
            measure.write_alloc_trace(tr, a.alloc_trace, [
                "memplan allocation trace v1 (bench/torch/harness.py --alloc-trace), rank 0",
                f"setup {a.model} {a.strategy} {a.precision} act-ckpt {a.act_ckpt} attn "
                f"{a.attn} ranks {world} batch {a.batch} seq {seq} grad-accum {a.grad_accum} "
                f"steps {a.steps}",
                f"torch {torch.__version__}",
                f"peak_bytes {total} (steps 2..{a.steps}, gloo's buffers included)",
                f"peak_excl_backend {lo} (without them)"])
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
    dist.all_gather_object(gathered, per_rank)
    versions = _versions()
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
            "total: torch.distributed._tools.mem_tracker.MemTracker (Python-visible tensors: "
            "dispatch-mode allocations + tracked parameters/gradients/optimizer state), peak "
            "over steps 2..K"),
        "model": {"name": spec.name, "source": a.model, "class": spec.cls_name, "params": n_params},
        "setup": {"ranks": world, "strategy": a.strategy, "batch": a.batch, "seq": seq,
                  "grad_accum": a.grad_accum, "steps": a.steps, "precision": a.precision,
                  "act_ckpt": a.act_ckpt, "attn": a.attn, "dropout": a.dropout,
                  "bucket_mb": a.bucket_mb if a.bucket_mb is not None else 25,
                  # DDP's own buckets (25 MiB, the first 1 MiB) or --bucket-mb for all of them:
                  # memplan plans the DDP bucket count from this, never from `implementation`
                  "bucket_mb_default": a.bucket_mb is None,
                  "grad_as_bucket_view": a.grad_as_bucket_view, "zero_grad": a.zero_grad,
                  "loop": a.loop, "shard_group": _shard_group(a, world), "seed": a.seed,
                  "fsdp_grad_sync": a.fsdp_grad_sync,
                  "measure": a.measure},
        "per_rank": sorted(gathered, key=lambda r: r["rank"]),
        "collectives": coll,
        "collectives_step": a.steps,
        "loss": [round(x, 6) for x in losses],
        "status": "ok",
    }
    return doc


def _shard_group(a, world):
    if a.strategy == "fsdp-hybrid":
        return a.shard_group
    if a.strategy.startswith("fsdp-") or a.strategy in ("zero1", "zero2", "zero3",
                                                        "torch-zero1"):
        return world
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
