"""plan, auto, models and gpus: the command line's planning commands as Python calls.

Each call builds the options document ``{"model": ..., "gpus": ..., option: value}``, which the
compiled front end (cli/memplan_api.h) turns into the command line ``memplan plan --json
--model=... --gpus=...`` and runs in this process: the same parsing, validation, one-line errors
and JSON document as the program.
"""
from __future__ import annotations

import json
import os
import tempfile
import warnings
from typing import Any, Dict, List, Optional, Tuple, Union

from . import _memplan as _ext
from ._inputs import Inputs

__version__: str = _ext.VERSION

ModelLike = Union[str, "os.PathLike[str]", Dict[str, Any], Any]   # Any: a transformers.PretrainedConfig
ConfigLike = Union[str, "os.PathLike[str]", Dict[str, Any], Any]  # Any: a transformers.TrainingArguments


class PlanError(ValueError):
    """A setup memplan refuses, or an output it could not write: the command line's one-line error
    (without its "memplan: " prefix), naming the bad value and the valid ones."""


class PlanWarning(UserWarning):
    """A line the command line writes on standard error beside its result: config keys it does not
    model, or what auto kept fixed."""


def _document(model: Any, gpus: Optional[int], config: Any, options: Dict[str, Any]) -> Dict[str, Any]:
    doc: Dict[str, Any] = {}
    if model is not None:
        doc["model"] = model
    if gpus is not None:
        doc["gpus"] = gpus
    if config is not None:
        doc["config"] = config
    doc.update(options)
    return doc


def _fetch_hub_model(options: Dict[str, Any]) -> None:
    """A hub id in neither the zoo nor the local Hugging Face cache: its config.json fetched into
    that cache with huggingface_hub (the program runs memplan-fetch for this), so that the front end
    then finds it there as it would have."""
    model, rev = options.get("model"), options.get("revision")
    if not isinstance(model, str) or (rev is not None and not isinstance(rev, str)):
        return
    missing = _ext.hub_missing(model, rev)
    if missing is None or any(os.environ.get(v, "").upper() in ("1", "ON", "YES", "TRUE")
                              for v in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")):
        return   # found, or offline: the front end says what it says
    repo, cache = missing
    try:
        from huggingface_hub import hf_hub_download
    except ImportError:
        raise PlanError(f"{repo}: not in the Hugging Face cache ({cache}): pip install huggingface_hub to fetch its "
                        f"config.json, or give model= a path, a dict or a transformers.PretrainedConfig") from None
    try:
        hf_hub_download(repo, "config.json", revision=rev, cache_dir=cache)
    except Exception as e:  # the hub's own error, named
        raise PlanError(f"{repo}: not in the Hugging Face cache ({cache}), and fetching its config.json failed: "
                        f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}") from None


def _run(command: str, options: Dict[str, Any], json_out: bool) -> str:
    """Runs one command; its standard output, after its standard error's lines became warnings.
    Raises PlanError with the one-line error when the command fails."""
    _fetch_hub_model(options)
    with Inputs(options) as inputs:
        try:
            text = json.dumps(inputs.options, allow_nan=False)
        except (TypeError, ValueError) as e:
            raise PlanError(f"the options are not plain data: {e}") from None
        rc, out, err, msg = _ext.run(command, text, json_out)
        out, err, msg = inputs.relabel(out), inputs.relabel(err), inputs.relabel(msg)
    lines = [ln for ln in err.splitlines() if ln.strip()]
    if rc != 0:
        if not msg:   # an output failure: its line is the last one written
            msg = lines.pop() if lines else f"memplan {command} failed (exit {rc})"
            msg = msg[len("memplan: "):] if msg.startswith("memplan: ") else msg
        raise PlanError(msg)
    for ln in lines:
        warnings.warn(ln[len("memplan: "):] if ln.startswith("memplan: ") else ln, PlanWarning, stacklevel=3)
    return out


class Plan(dict):
    """The document ``memplan plan --json`` (or ``auto --json``) writes, as a dict with the same keys,
    that also prints as the command line's table, converts to pandas and plots.

    ``str(plan)`` is the table ``memplan`` prints for the same setup; ``plan.argv`` the command
    line; ``plan.to_pandas()`` one row per strategy; ``plan.plot()`` the memory breakdown and the
    memory over the simulated step, as ``--plot`` draws them.
    """

    def __init__(self, doc: Dict[str, Any], command: str, options: Dict[str, Any]):
        super().__init__(doc)
        self.command = command
        self._options = dict(options)
        self._table: Optional[str] = None

    @property
    def argv(self) -> List[str]:
        """The command line this plan is the JSON of (model and config data appear as their temporary files)."""
        with Inputs(self._options) as inputs:
            args = _argv(self.command, inputs.options, False)
            return [inputs.relabel(a) for a in args]

    def table(self, explain: bool = False) -> str:
        """The table the command line prints for this setup (``explain``: with ``--explain``'s split)."""
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", PlanWarning)   # given with the plan already
            if explain and self.command == "plan":
                return _run(self.command, dict(self._options, explain=True), False)
            if self._table is None:
                self._table = _run(self.command, self._options, False)
        return self._table

    def __str__(self) -> str:
        return self.table()

    def _repr_pretty_(self, p: Any, cycle: bool) -> None:   # IPython shows the table
        p.text(self.table() if not cycle else "Plan(...)")

    def to_pandas(self) -> Any:
        """One row per strategy, indexed by its name: every field of ``strategies[]`` with nested
        objects flattened to dotted columns (``memory.peak``, ``time.step_s``); bytes, seconds."""
        try:
            import pandas as pd
        except ImportError:
            raise ImportError("Plan.to_pandas() needs pandas: pip install pandas") from None
        return pd.json_normalize(self["strategies"], sep=".").set_index("name")

    def timeline(self) -> Dict[str, List[Tuple[float, Dict[str, float]]]]:
        """The simulated step's memory per strategy, as ``--trace`` writes it: a list of (time in
        seconds, {term: bytes}) per strategy name; the terms add up to the memory in use."""
        with tempfile.TemporaryDirectory(prefix="memplan-trace-") as folder, warnings.catch_warnings():
            warnings.simplefilter("ignore", PlanWarning)   # the plan's own, given already; "# wrote the trace"
            path = os.path.join(folder, "trace.json")
            _run(self.command, dict(self._options, trace=path), True)
            with open(path, encoding="utf-8") as f:
                events = json.load(f)["traceEvents"]
        names = {e["pid"]: e["args"]["name"].split(" ")[0] for e in events
                 if e.get("ph") == "M" and e.get("name") == "process_name"}
        out: Dict[str, List[Tuple[float, Dict[str, float]]]] = {}
        for e in events:
            if e.get("ph") == "C":
                out.setdefault(names.get(e["pid"], str(e["pid"])), []).append((e["ts"] * 1e-6, dict(e["args"])))
        return out

    def plot(self, path: Optional[str] = None) -> Any:
        """The memory breakdown at each strategy's peak (stacked bars, the GPU's capacity dashed) and
        the memory over the simulated step (one line per strategy), as ``--plot`` draws them, with
        matplotlib. Returns the figure; ``path`` also saves it (.png, .svg, .pdf)."""
        try:
            import matplotlib.pyplot as plt
        except ImportError:
            raise ImportError("Plan.plot() needs matplotlib: pip install matplotlib") from None
        gib = float(1 << 30)
        terms = ["params", "grads", "comm_buffers", "optimizer", "activations", "transient", "overhead"]
        rows = self["strategies"]
        cap = self["cluster"]["gpu_mem_bytes"] / gib
        fig, (bars, curve) = plt.subplots(1, 2, figsize=(14, 5.6))
        fig.suptitle(f"{self['model']['name']} on {self['cluster']['gpus']} x {self['cluster']['gpu']} "
                     f"({cap:.1f} GiB): memory per GPU")
        names = [r["name"] for r in rows]
        bottom = [0.0] * len(rows)
        for t in terms:
            vals = [r["memory"][t] / gib for r in rows]
            bars.bar(names, vals, 0.7, bottom=bottom, label=t.replace("_", " "))
            bottom = [b + v for b, v in zip(bottom, vals)]
        bars.axhline(cap, color="red", linestyle="--", linewidth=2)
        bars.set_ylabel("GiB at the peak")
        bars.set_title("breakdown at each strategy peak (red: capacity)")
        bars.tick_params(axis="x", rotation=30)
        bars.legend(fontsize=8)
        for name, points in self.timeline().items():
            curve.step([t * 1e3 for t, _ in points], [sum(v.values()) / gib for _, v in points], where="post",
                       linewidth=2, label=name)
        curve.axhline(cap, color="red", linestyle="--", label="capacity")
        curve.set_xlabel("time in the simulated step (ms)")
        curve.set_ylabel("GiB")
        curve.set_title("memory over one step (simulated)")
        curve.legend(fontsize=8)
        fig.tight_layout()
        if path:
            fig.savefig(path)
        return fig


def _argv(command: str, options: Dict[str, Any], json_out: bool) -> List[str]:
    args, msg = _ext.argv(command, json.dumps(options), json_out)
    if args is None:
        raise PlanError(msg)
    return args


def plan(model: ModelLike = None, gpus: Optional[int] = None, *, config: ConfigLike = None, **options: Any) -> Plan:
    """Plans every strategy (DDP, ZeRO-1/2/3, FSDP) for a setup, as ``memplan plan --json`` does.

    Args:
        model: a zoo name or hub id (``"gpt2-xl"``, ``"meta-llama/Llama-2-7b-hf"``), a path to a
            config.json / params.json / memplan model JSON, a dict of one of those, or a
            ``transformers.PretrainedConfig``. None with ``params=`` for a generic model.
        gpus: total GPUs (the command line's default: 1, or what ``config`` says).
        config: a training config, as ``--config`` reads it: a path, or a dict (DeepSpeed,
            accelerate, torchtitan, TrainingArguments), or a ``transformers.TrainingArguments``.
        **options: the command line's flags, dashes as underscores: ``batch=4``, ``seq=2048``,
            ``act_ckpt="full"``, ``strategy="zero3"`` or ``["ddp", "zero3"]``, ``tp=2``,
            ``lora=16``, ``gpu="h100-80gb"``, ``gpu_mem="24GiB"``, ``syncbn=True``... A value may
            be a string, a number, a boolean (a switch; on/off for flags that take one) or a list
            (joined with commas); None leaves the flag out. ``memplan --help`` lists them all.

    Returns:
        A Plan: the JSON document (model, cluster, train, strategies, rules, recommendation), which
        prints as the command line's table.

    Raises:
        PlanError: the command line's one-line error, e.g. for an unknown option or a bad value.
    """
    doc = _document(model, gpus, config, options)
    return Plan(json.loads(_run("plan", doc, True)), "plan", doc)


def auto(model: ModelLike = None, gpus: Optional[int] = None, *, config: ConfigLike = None, **options: Any) -> Plan:
    """Picks the fastest setup that fits (strategy, offload, precision, checkpointing, micro-batch),
    as ``memplan auto --json`` does: the plan of the pick, with ``doc["auto"]`` (what was searched,
    the explanation, the runner-up) and the pick in ``doc["recommendation"]``. Arguments as
    :func:`plan`, plus auto's own flags (``global_batch=``, ``min_headroom=``, ``bn_min_batch=``)."""
    doc = _document(model, gpus, config, options)
    return Plan(json.loads(_run("auto", doc, True)), "auto", doc)


def models(family: Optional[str] = None) -> List[Dict[str, Any]]:
    """The zoo, as ``memplan models --json`` lists it: name, hub id, family, parameters, blocks,
    context, source; ``family`` keeps one family's (``memplan models`` names them)."""
    return json.loads(_run("models", {"family": family}, True))


def gpus() -> List[Dict[str, Any]]:
    """The GPU presets, as ``memplan gpus --json`` lists them: memory, bandwidths, peak FLOP/s."""
    return json.loads(_run("gpus", {}, True))
