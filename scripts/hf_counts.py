#!/usr/bin/env python3
"""hf_counts.py — exact parameter counts of Hugging Face config.json files, from transformers' own
model classes built on the meta device (no weights, no memory, no network).

  python scripts/hf_counts.py [CONFIG.json ...] [-o OUT.json]

With no CONFIG, every tests/data/hf/*.json except counts.json is read. For each config the class
named in `architectures[0]` is looked up in transformers (AutoModelForCausalLM.from_config when
the name is absent or unknown) and built under `with torch.device("meta"):`. The output is JSON:

  {"transformers": VERSION, "torch": VERSION,
   "configs": {FILE: {"hub_id", "model_type", "class", "total",
                      "groups": [{"group", "count", "tensors": [[NAME, SHAPE], ...]}, ...]}}}

`total` is the sum over model.named_parameters(), which yields a tied tensor once (under its first
name), as model.parameters() and model.num_parameters() count it. A group is a parameter name's
prefix up to its first numeric index (`model.layers.3`) or, for parameters outside a ModuleList,
the first two components of its module path (`model.embed_tokens`, `lm_head`); groups and the
tensors in them keep registration order, and tensor names are relative to their group.

Needs torch and transformers (the project's venv: ~/.cache/memplan/torch-venv/bin/python).
"""
import argparse
import glob
import json
import os
import sys
import warnings

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
DEFAULT_DIR = os.path.join(ROOT, "tests", "data", "hf")


def group_of(name):
    """(group, rest) for a parameter name."""
    parts = name.split(".")
    for i, p in enumerate(parts[:-1]):
        if p.isdigit():
            return ".".join(parts[: i + 1]), ".".join(parts[i + 1:])
    module = parts[:-1]
    k = min(2, len(module)) if module else 0
    if k == 0:
        return "", name
    return ".".join(module[:k]), ".".join(parts[k:])


def build(path):
    import torch
    import transformers

    with open(path) as f:
        raw = json.load(f)
    config = transformers.AutoConfig.from_pretrained(path)
    arch = (raw.get("architectures") or [None])[0]
    cls = getattr(transformers, arch, None) if arch else None
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with torch.device("meta"):
            if cls is not None:
                model = cls(config)
            else:
                model = transformers.AutoModelForCausalLM.from_config(config)
    return raw, config, model


def count(path):
    raw, config, model = build(path)
    groups = []
    index = {}
    total = 0
    for name, p in model.named_parameters():
        g, rest = group_of(name)
        if g not in index:
            index[g] = len(groups)
            groups.append({"group": g, "count": 0, "tensors": []})
        entry = groups[index[g]]
        entry["tensors"].append([rest, list(p.shape)])
        entry["count"] += p.numel()
        total += p.numel()
    check = sum(p.numel() for p in model.parameters())
    if check != total:
        raise SystemExit(f"{path}: named_parameters {total} != parameters {check}")
    return {
        "hub_id": raw.get("_name_or_path"),
        "model_type": getattr(config, "model_type", raw.get("model_type")),
        "class": type(model).__name__,
        "total": total,
        "groups": groups,
    }


def dump(result, out):
    """JSON with one line per group, so that the file stays readable and diffs stay small."""
    w = out.write
    w("{\n")
    w(f'  "transformers": {json.dumps(result["transformers"])},\n')
    w(f'  "torch": {json.dumps(result["torch"])},\n')
    w('  "configs": {')
    items = list(result["configs"].items())
    for i, (fname, c) in enumerate(items):
        w("\n" if i == 0 else ",\n")
        w(f"    {json.dumps(fname)}: {{\n")
        for key in ("hub_id", "model_type", "class", "total"):
            w(f'      "{key}": {json.dumps(c[key])},\n')
        w('      "groups": [\n')
        for j, g in enumerate(c["groups"]):
            w("        " + json.dumps(g, separators=(", ", ": ")))
            w(",\n" if j + 1 < len(c["groups"]) else "\n")
        w("      ]\n    }")
    w("\n  }\n}\n")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("configs", nargs="*", help="config.json files (default: tests/data/hf/*.json)")
    ap.add_argument("-o", "--output", help="write the JSON here instead of stdout")
    args = ap.parse_args()
    files = args.configs or sorted(
        f for f in glob.glob(os.path.join(DEFAULT_DIR, "*.json")) if os.path.basename(f) != "counts.json"
    )
    if not files:
        ap.error("no config files")

    import torch
    import transformers

    result = {"transformers": transformers.__version__, "torch": torch.__version__.split("+")[0], "configs": {}}
    for f in files:
        result["configs"][os.path.basename(f)] = count(f)
        print(f"{os.path.basename(f)}: {result['configs'][os.path.basename(f)]['total']:,}", file=sys.stderr)
    if args.output:
        with open(args.output, "w") as out:
            dump(result, out)
    else:
        dump(result, sys.stdout)


if __name__ == "__main__":
    main()
