"""check: the plan of the run about to start, made before its first step.

``memplan.check(trainer)`` reads the setup a training script has already built (a Hugging Face
Trainer or TrainingArguments with its DeepSpeed/FSDP settings, an accelerate Accelerator, or
explicit options), completes it from the environment the job runs in (torchrun's WORLD_SIZE and
LOCAL_WORLD_SIZE, the visible GPU's name and memory where torch can read them), plans it with
:func:`memplan.plan`, and when the peak does not fit raises (or warns) with the plan's table and
the changes ``memplan auto`` would make for the same setup.
"""
from __future__ import annotations

import os
import warnings
from typing import Any, Dict, List, Optional, Tuple

from ._api import ConfigLike, ModelLike, Plan, PlanError, PlanWarning, auto, gpus as gpu_presets, plan

GIB = float(1 << 30)


class OutOfMemoryPlanError(PlanError):
    """The planned peak of the setup does not fit the GPU. ``plan`` is its plan, ``suggestion`` auto's
    plan for the same setup (None when auto was not asked)."""

    def __init__(self, message: str, plan: Plan, suggestion: Optional[Plan]):
        super().__init__(message)
        self.plan = plan
        self.suggestion = suggestion


def _env_int(name: str) -> Optional[int]:
    v = os.environ.get(name, "")
    return int(v) if v.isdigit() and int(v) > 0 else None


def environment() -> Dict[str, Any]:
    """What the job's environment says about the setup, as plan options: ``gpus`` (torchrun's
    WORLD_SIZE), ``gpus_per_node`` (LOCAL_WORLD_SIZE), and, where torch sees a CUDA device,
    ``gpu`` (the preset whose name is the device's, if any) and ``gpu_mem`` (its memory in bytes)."""
    out: Dict[str, Any] = {}
    world, local = _env_int("WORLD_SIZE"), _env_int("LOCAL_WORLD_SIZE")
    if world:
        out["gpus"] = world
        if local and local < world:
            out["gpus_per_node"] = local
    try:
        import torch
        if torch.cuda.is_available():
            dev = torch.cuda.get_device_properties((_env_int("LOCAL_RANK") or 0) % torch.cuda.device_count())
            for g in gpu_presets():
                if g["label"] == dev.name:
                    out["gpu"] = g["name"]
            out["gpu_mem"] = f"{dev.total_memory}B"
    except ImportError:
        pass
    return out


def _peft_options(model: Any) -> Tuple[Any, Dict[str, Any]]:
    """A PEFT-wrapped model: its base model and the LoRA flags of its adapter."""
    peft = getattr(model, "peft_config", None)
    if not isinstance(peft, dict) or not peft:
        return model, {}
    cfg = next(iter(peft.values()))
    if str(getattr(cfg, "peft_type", "")).split(".")[-1] != "LORA":
        return model, {}
    targets = cfg.target_modules
    opts: Dict[str, Any] = {"lora": cfg.r, "lora_alpha": cfg.lora_alpha, "lora_dropout": cfg.lora_dropout,
                            "lora_targets": targets if isinstance(targets, str) else sorted(targets)}
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    return base, opts


def _quant_options(config: Any) -> Dict[str, Any]:
    """A bitsandbytes-quantized base (QLoRA): its storage as --quant-base."""
    q = getattr(config, "quantization_config", None)
    if q is None:
        return {}
    get = q.get if isinstance(q, dict) else lambda k, d=None: getattr(q, k, d)
    if get("load_in_4bit") and str(get("bnb_4bit_quant_type", "nf4")) == "nf4":
        return {"quant_base": "nf4"}
    if get("load_in_8bit"):
        return {"quant_base": "int8"}
    return {}


def _accelerator_config(acc: Any) -> Tuple[Optional[Dict[str, Any]], Dict[str, Any]]:
    """An accelerate Accelerator's setup: its DeepSpeed config, or an accelerate config of its
    distributed type and mixed precision; and its gradient accumulation as an option."""
    state = acc.state
    opts: Dict[str, Any] = {}
    steps = getattr(acc, "gradient_accumulation_steps", 1)
    if steps and steps > 1:
        opts["grad_accum"] = steps
    ds = getattr(state, "deepspeed_plugin", None)
    if ds is not None and getattr(ds, "deepspeed_config", None):
        return dict(ds.deepspeed_config), opts
    dtype = str(getattr(state, "distributed_type", "NO")).split(".")[-1]
    cfg: Dict[str, Any] = {"compute_environment": "LOCAL_MACHINE", "distributed_type": dtype,
                           "mixed_precision": str(getattr(state, "mixed_precision", "no")),
                           "num_processes": getattr(state, "num_processes", 1)}
    fsdp = getattr(state, "fsdp_plugin", None)
    if fsdp is not None:
        def named(v: Any) -> Any:   # an enum as accelerate's config file spells it (FULL_SHARD)
            return getattr(v, "name", v)
        cfg["fsdp_config"] = {k: v for k, v in {
            "fsdp_version": getattr(fsdp, "fsdp_version", None),
            "fsdp_sharding_strategy": named(getattr(fsdp, "sharding_strategy", None)),
            "fsdp_reshard_after_forward": named(getattr(fsdp, "reshard_after_forward", None)),
            "fsdp_activation_checkpointing": getattr(fsdp, "activation_checkpointing", None),
            "fsdp_offload_params": getattr(getattr(fsdp, "cpu_offload", None), "offload_params", None),
        }.items() if v is not None}
    return cfg, opts


def _setup(obj: Any, model: Any, config: Any) -> Tuple[Any, Any, Dict[str, Any]]:
    """(model, config, options) of a Trainer, TrainingArguments, Accelerator or None."""
    opts: Dict[str, Any] = {}
    names = {c.__name__ for c in type(obj).__mro__} if obj is not None else set()
    if hasattr(obj, "args") and hasattr(obj, "model") and any(n.endswith("Trainer") for n in names):
        if model is None:
            model = obj.model
        obj = obj.args
        names = {c.__name__ for c in type(obj).__mro__}
    if "TrainingArguments" in names:
        if config is not None:
            raise PlanError("check: give the TrainingArguments or config=, not both (the arguments hold the "
                            "DeepSpeed and FSDP settings)")
        config = obj
    elif "Accelerator" in names:
        if config is None:
            config, opts = _accelerator_config(obj)
    elif obj is not None:
        raise TypeError(f"check: a transformers Trainer or TrainingArguments, an accelerate Accelerator, or None "
                        f"with options (got {type(obj).__name__})")
    if model is not None and not isinstance(model, (str, dict, os.PathLike)) and hasattr(model, "config"):
        model, lora = _peft_options(model)   # a torch module: its config, and its adapters
        opts.update(lora)
        opts.update(_quant_options(model.config))
        model = model.config
    return model, config, opts


def _short_table(p: Plan) -> str:
    """The verdict, the table's header lines and its first table (memory per strategy)."""
    out: List[str] = []
    seen_rows = False
    for i, line in enumerate(p.table().splitlines()):
        if line.startswith("#") and seen_rows:
            break
        seen_rows |= i > 0 and not line.startswith("#")   # line 0 is the verdict
        out.append(line)
    return "\n".join(out)


_CHANGED = (("strategy", "strategy"), ("offload", "offload"), ("precision", "precision"), ("micro_batch", "batch"),
            ("grad_accum", "grad-accum"), ("act_ckpt", "act-ckpt"))


def _changes(p: Plan, row: Dict[str, Any], pick: Plan) -> str:
    """The flags auto's pick changes, with the pick's peak and throughput."""
    rec, a = pick["recommendation"], pick["auto"]
    if not a.get("found"):
        fix = a.get("would_fit_with")
        return f"auto finds no setup that fits ({fix})" if fix else "auto finds no setup that fits"
    now = dict(p["train"], strategy=row["name"])
    flags = [f"--{flag} {rec[k]}" for k, flag in _CHANGED if k in rec and str(rec[k]) != str(now.get(k))]
    chosen = next(r for r in pick["strategies"] if r["name"] == rec["strategy"])
    tps = chosen["time"]["tokens_per_s"] if chosen["activations_known"] else None
    speed = f", {tps:,.0f} tokens/s on all GPUs" if tps else ""
    return (f"the cheapest change auto finds (the fastest setup that fits): {' '.join(flags) or 'none'} "
            f"(peak {chosen['memory']['peak'] / GIB:.2f} GiB{speed})")


def check(trainer_or_args: Any = None, model: ModelLike = None, *, config: ConfigLike = None, on_fail: str = "raise",
          suggest: bool = True, **options: Any) -> Plan:
    """Plans the run about to start and stops it before the first step when its peak does not fit.

    Args:
        trainer_or_args: a ``transformers.Trainer`` (its model and arguments), a
            ``TrainingArguments`` (with its ``deepspeed`` and ``fsdp`` settings), an
            ``accelerate.Accelerator`` (its DeepSpeed plugin or distributed type, mixed precision
            and accumulation), or None with explicit options.
        model: what :func:`memplan.plan` takes, or a torch module with a ``config`` (a PEFT model:
            its LoRA adapters and quantized base too); default: the Trainer's model.
        config: a config path or dict, when ``trainer_or_args`` gives none.
        on_fail: ``"raise"`` (:class:`OutOfMemoryPlanError`) or ``"warn"`` (a :class:`PlanWarning`
            on rank 0, and the run goes on).
        suggest: also plan ``memplan auto`` for the same setup and name the changes it makes.
        **options: plan options; they win over the environment's (``gpus`` from WORLD_SIZE,
            ``gpus_per_node`` from LOCAL_WORLD_SIZE, ``gpu`` and ``gpu_mem`` from the visible
            GPU), e.g. ``seq=2048`` (the Trainer does not know the sequence length) or
            ``gpu_mem="24GiB"`` where torch sees no GPU. Without a config, ``strategy`` defaults
            to ddp (a script without DeepSpeed or FSDP).

    Returns:
        The plan, when the peak fits (or on_fail is "warn").
    """
    if on_fail not in ("raise", "warn"):
        raise ValueError(f"check: on_fail={on_fail!r} (valid: 'raise', 'warn')")
    model, config, found = _setup(trainer_or_args, model, config)
    env = environment()
    if "gpus" in options:   # the node size belongs to the environment's world size
        env.pop("gpus_per_node", None)
    opts = dict(env, **found)
    opts.update(options)
    if config is None and "strategy" not in opts:
        opts["strategy"] = "ddp"
    p = plan(model, config=config, **opts)
    bad = [r for r in p["strategies"] if not r["fits"]]
    if not bad:
        return p
    row = bad[0]
    cap = p["cluster"]["gpu_mem_bytes"]
    why = (f"the GPU ({cap / GIB:.2f} GiB)" if not row["gpu_fits"] else "host memory")
    head = (f"{row['name']} will run out of memory: its planned peak {row['memory']['peak'] / GIB:.2f} GiB per "
            f"GPU does not fit {why} ({p['model']['name']}, {p['cluster']['gpus']} x {p['cluster']['gpu']})")
    # auto may pick another strategy unless the caller fixed it (a config's own is a default here)
    pick = auto(model, config=config, **dict(opts, strategy=options.get("strategy", "all"))) if suggest else None
    text = "\n".join([head, _short_table(p)] + ([_changes(p, row, pick)] if pick is not None else []))
    if on_fail == "raise":
        raise OutOfMemoryPlanError(text, p, pick)
    if (_env_int("RANK") or 0) == 0:
        warnings.warn(text, PlanWarning, stacklevel=2)
    return p
