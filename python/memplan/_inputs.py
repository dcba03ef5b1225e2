"""Models and configs given as Python data, written where the front end reads them.

The planner reads a model and a config from files (``--model PATH``, ``--config PATH``), by their
content, exactly as the command line does. A dict, a ``transformers.PretrainedConfig`` or a
``TrainingArguments`` is written to a private temporary folder for the length of one call, and
the file's path in the document and in messages is replaced by a label such as ``<GPT2Config>``.
"""
from __future__ import annotations

import json
import math
import os
import re
import shutil
import tempfile
from typing import Any, Dict, List, Mapping, Optional, Tuple

from . import _memplan as _ext


def _is_pretrained_config(obj: Any) -> bool:
    """A transformers.PretrainedConfig (PreTrainedConfig since transformers 5), recognised without
    importing transformers."""
    return any(c.__name__.lower() == "pretrainedconfig" for c in type(obj).__mro__) and hasattr(obj, "to_json_string")


def _is_training_arguments(obj: Any) -> bool:
    return any(c.__name__ == "TrainingArguments" for c in type(obj).__mro__) and hasattr(obj, "to_json_string")


def _safe_name(name: str) -> str:
    name = re.sub(r"[^A-Za-z0-9._-]+", "-", name).strip("-.")
    return name[:64] or "model"


def _toml_value(v: Any, key: str) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        return "nan" if math.isnan(v) else ("inf" if v > 0 else "-inf") if math.isinf(v) else repr(v)
    if isinstance(v, str):
        return json.dumps(v)   # a TOML basic string: JSON's escapes are TOML's
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(_toml_value(e, key) for e in v) + "]"
    if isinstance(v, Mapping):
        return "{" + ", ".join(f"{json.dumps(str(k))} = {_toml_value(e, key)}" for k, e in v.items()) + "}"
    raise TypeError(f"config key {key!r}: {type(v).__name__} has no TOML form")


def _toml(doc: Mapping[str, Any]) -> str:
    """A dict as TOML text: scalars first, then each nested dict as a [table] (torchtitan's layout)."""
    lines: List[str] = []

    def table(d: Mapping[str, Any], prefix: str) -> None:
        subs = [(k, v) for k, v in d.items() if isinstance(v, Mapping)]
        if prefix:
            lines.append(f"[{prefix}]")
        for k, v in d.items():
            if not isinstance(v, Mapping) and v is not None:
                lines.append(f"{json.dumps(str(k))} = {_toml_value(v, k)}")
        for k, v in subs:
            table(v, f"{prefix}.{json.dumps(str(k))}" if prefix else json.dumps(str(k)))

    table(doc, "")
    return "\n".join(lines) + "\n"


# keys whose string value names another file, which the framework opens from the working directory
_PATH_KEYS = ("deepspeed", "deepspeed_config_file")


def _absolute_paths(doc: Any) -> Any:
    """A copy of a config dict with the files it names made absolute (the frameworks read them from
    the working directory; written elsewhere, a relative name would no longer find them)."""
    if isinstance(doc, Mapping):
        out = {}
        for k, v in doc.items():
            if k in _PATH_KEYS and isinstance(v, str) and v and not os.path.isabs(v) and os.path.exists(v):
                v = os.path.abspath(v)
            out[k] = _absolute_paths(v)
        return out
    if isinstance(doc, list):
        return [_absolute_paths(v) for v in doc]
    return doc


class Inputs:
    """The options document for one call, with data written to files; a context manager that
    removes them. ``relabel`` turns the files' paths back into labels in the output."""

    def __init__(self, options: Dict[str, Any]):
        self.options = dict(options)
        self.labels: List[Tuple[str, str]] = []
        self._dir: Optional[str] = None

    def __enter__(self) -> "Inputs":
        model = self.options.get("model")
        if model is not None:
            self.options["model"] = self._model(model)
        config = self.options.get("config")
        if config is not None:
            self.options["config"] = self._config(config)
        return self

    def __exit__(self, *exc: Any) -> None:
        if self._dir:
            shutil.rmtree(self._dir, ignore_errors=True)
            self._dir = None

    def _write(self, rel: str, text: str, label: str) -> str:
        if self._dir is None:
            self._dir = tempfile.mkdtemp(prefix="memplan-")
        path = os.path.join(self._dir, rel)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w", encoding="utf-8") as f:
            f.write(text)
        self.labels.append((path, label))
        return path

    def _model(self, model: Any) -> str:
        if isinstance(model, (str, os.PathLike)):
            return os.fspath(model)
        if _is_pretrained_config(model):
            doc = json.loads(model.to_json_string(use_diff=False))
            label = f"<{type(model).__name__}>"
        elif isinstance(model, Mapping):
            doc = dict(model)
            label = "<model dict>"
        else:
            raise TypeError(f"model: a zoo name, a hub id, a path, a dict or a transformers.PretrainedConfig "
                            f"(got {type(model).__name__})")
        # the folder of a config.json names the model when it has no _name_or_path (as a hub snapshot's does)
        name = _safe_name(str(doc.get("_name_or_path") or doc.get("name") or doc.get("model_type") or "model"))
        return self._write(os.path.join(name, "config.json"), json.dumps(doc, indent=1), label)

    def _config(self, config: Any) -> str:
        if isinstance(config, (str, os.PathLike)):
            return os.fspath(config)
        if _is_training_arguments(config):
            doc = json.loads(config.to_json_string())
            label = f"<{type(config).__name__}>"
        elif isinstance(config, Mapping):
            doc = dict(config)
            label = "<config dict>"
        else:
            raise TypeError(f"config: a path or a dict (DeepSpeed, accelerate, torchtitan, TrainingArguments), or "
                            f"transformers.TrainingArguments (got {type(config).__name__})")
        text = json.dumps(_absolute_paths(doc), indent=1)
        if _ext.config_format(text) == "toml":   # torchtitan's job config is read from TOML only
            return self._write("config.toml", _toml(doc), label)
        return self._write("config.json", text, label)

    def relabel(self, text: str) -> str:
        for path, label in self.labels:
            text = text.replace(path, label)
        return text
