#!/usr/bin/env python3
"""hf_counts.py — exact parameter counts of Hugging Face config.json files, from transformers' own
model classes built on the meta device (no weights, no memory, no network).

  python scripts/hf_counts.py [CONFIG.json ...] [-o OUT.json]

With no CONFIG, every tests/data/hf/*.json except counts.json is read. For each config the class
named in `architectures[0]` is looked up in transformers (AutoModelForCausalLM.from_config when
the name is absent or unknown) and built under `with torch.device("meta"):`. The output is JSON:

  {"transformers": VERSION, "torch": VERSION,
   "configs": {FILE: {"hub_id", "model_type", "class", "total", "tied", "buffers",
                      "groups": [{"group", "repeat", "count", "tensors": [[NAME, SHAPE], ...]}, ...]}}}

`total` is the sum over model.named_parameters(), which yields a tied tensor once (under its first
name), as model.parameters() and model.num_parameters() count it. `tied` maps each alias to the
name it is counted under ({"lm_head.weight": "model.embed_tokens.weight"}); `buffers` lists the
persistent buffers (state-dict entries that are not parameters, such as DeepSeek-V3's
e_score_correction_bias), which `total` does not include. A group is a parameter name's
prefix up to its first numeric index (`model.layers.3`) or, for parameters outside a ModuleList,
the first two components of its module path (`model.embed_tokens`, `lm_head`); groups and the
tensors in them keep registration order, and tensor names are relative to their group.

Consecutive layers of one ModuleList with the same tensors (names and shapes) are written as one
entry: `"group": "model.layers.3-60", "repeat": 58`; `count` is the parameters of ONE instance,
so total = sum(count * repeat). --per-layer writes every layer as its own entry (repeat 1).

Needs torch and transformers (the project's venv: ~/.cache/memplan/torch-venv/bin/python).
"""
import argparse
import glob
import json
import os
import sys
import warnings
from math import prod

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


def merge_runs(groups):
    """Fold runs of consecutive same-structure layers `P.i`, `P.i+1`, ... into `P.i-j`."""
    out = []
    for g in groups:
        head, _, idx = g["group"].rpartition(".")
        if out and idx.isdigit():
            last = out[-1]
            lhead, _, lidx = last["group"].rpartition(".")
            lo, _, hi = lidx.partition("-")
            hi = hi or lo
            if (lhead == head and hi.isdigit() and int(idx) == int(hi) + 1
                    and last["tensors"] == g["tensors"]):
                last["group"] = f"{head}.{lo}-{idx}"
                last["repeat"] += 1
                continue
        out.append(dict(g))
    return out


def count(path, merge=True):
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
    for g in groups:
        g["repeat"] = 1
    if merge:
        groups = merge_runs(groups)
    if sum(g["count"] * g["repeat"] for g in groups) != total:
        raise SystemExit(f"{path}: groups do not add up to {total}")
    groups = [{"group": g["group"], "repeat": g["repeat"], "count": g["count"], "tensors": g["tensors"]} for g in groups]
    # names that share a tensor counted under another name (tied embeddings), and persistent
    # buffers (in the state dict and in checkpoints, but not parameters)
    first = {}
    tied = {}
    for name, p in model.named_parameters(remove_duplicate=False):
        if id(p) in first:
            tied[name] = first[id(p)]
        else:
            first[id(p)] = name
    pnames = set(first.values()) | set(tied)
    buffers = [[n, list(t.shape)] for n, t in model.state_dict().items() if n not in pnames]
    return {
        "hub_id": raw.get("_name_or_path"),
        "model_type": getattr(config, "model_type", raw.get("model_type")),
        "class": type(model).__name__,
        "total": total,
        "tied": tied,
        "buffers": {"count": sum(prod(s) for _, s in buffers), "tensors": buffers},
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
        for key in ("hub_id", "model_type", "class", "total", "tied"):
            w(f'      "{key}": {json.dumps(c[key])},\n')
        w(f'      "buffers": {json.dumps(c["buffers"], separators=(", ", ": "))},\n')
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
    ap.add_argument("--per-layer", action="store_true", help="one entry per layer, no folded runs")
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
        result["configs"][os.path.basename(f)] = count(f, merge=not args.per_layer)
        print(f"{os.path.basename(f)}: {result['configs'][os.path.basename(f)]['total']:,}", file=sys.stderr)
    if args.output:
        with open(args.output, "w") as out:
            dump(result, out)
    else:
        dump(result, sys.stdout)


if __name__ == "__main__":
    main()
