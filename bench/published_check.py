#!/usr/bin/env python3
"""published_check.py — memplan's simulated throughput against published GPU training runs.

Each row of bench/published/*.json is a measurement printed in a framework's benchmark table or
a paper (its source: URL, table, line), with its exact setup: model, GPU, GPUs, data-parallel
strategy, micro-batch, sequence, accumulation, precision, checkpointing and the published tokens/s
per GPU. This script plans each usable row with `memplan --json` (the per-operation time model)
and prints predicted against published tokens/s per GPU, the error, and the median absolute error
over the rows used to set the time model's fitted figures ("set") and over the others
("held-out"). Rows a data-parallel planner cannot reproduce (tensor/pipeline parallel, fp8) are
listed as unusable with the reason.

  python3 bench/published_check.py [--memplan build/memplan] [--rows N] [--json=FILE] [--quiet]

Exit 0 when the held-out median error is within --target (10 %), 1 otherwise, 2 on bad input.
Needs only the Python standard library.
"""
import argparse
import concurrent.futures
import glob
import json
import os
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
USES = ("set", "held-out", "unusable")


def load_tables(folder):
    """Every table file: (its source, its models, its rows), rows tagged with the file."""
    tables = []
    for path in sorted(glob.glob(os.path.join(folder, "*.json"))):
        with open(path) as f:
            doc = json.load(f)
        for key in ("source", "models", "rows"):
            if key not in doc:
                raise ValueError(f"{path}: no '{key}'")
        for r in doc["rows"]:
            r.setdefault("use", "held-out")
            if r["use"] not in USES:
                raise ValueError(f"{path}: row {r.get('id')}: use '{r['use']}' is not one of {USES}")
            if r["use"] != "unusable" and r["model"] not in doc["models"]:
                raise ValueError(f"{path}: row {r['id']}: model '{r['model']}' is not in 'models'")
            r["file"] = os.path.relpath(path, ROOT)
        tables.append(doc)
    return tables


def model_config(spec, seq):
    """--model for the row's model: a zoo name, a Hugging Face config.json in the repository, or
    the GPT-2 layout from its dimensions (learned positions as long as the sequence) in a
    temporary config.json."""
    if "zoo" in spec:
        return spec["zoo"], False
    if "hf_config" in spec:
        return os.path.join(ROOT, spec["hf_config"]), False
    cfg = {"model_type": "gpt2", "architectures": ["GPT2LMHeadModel"], "activation_function": "gelu",
           "n_embd": spec["d_model"], "n_layer": spec["n_layers"], "n_head": spec["n_heads"],
           "vocab_size": spec["vocab"], "n_positions": seq, "n_ctx": seq, "tie_word_embeddings": True}
    fd, path = tempfile.mkstemp(suffix=".json", prefix="memplan-published-")
    with os.fdopen(fd, "w") as f:
        json.dump(cfg, f)
    return path, True


def predict(memplan, spec, r):
    cfg, temp = model_config(spec, r["seq"])
    args = [memplan, "--model", cfg, "--gpu", r["gpu"], "--gpus", str(r["gpus"]),
            "--gpus-per-node", str(r["gpus_per_node"]), "--strategy", r["strategy"],
            "--precision", r["precision"], "--batch", str(r["batch"]), "--grad-accum", str(r["grad_accum"]),
            "--seq", str(r["seq"]), "--act-ckpt", r["act_ckpt"], "--attn", r["attn"], "--json"]
    if r["strategy"].startswith("fsdp"):
        args += ["--fsdp", str(r.get("fsdp", 2))]
    try:
        p = subprocess.run(args, capture_output=True, text=True, cwd=ROOT)
    finally:
        if temp:
            os.unlink(cfg)
    if p.returncode != 0:
        return {"error": p.stderr.strip().splitlines()[-1] if p.stderr.strip() else f"exit {p.returncode}"}
    d = json.loads(p.stdout)
    row = d["strategies"][0]
    return {"tokens_per_s_per_gpu": row["time"]["tokens_per_s_per_gpu"], "basis": row["time"].get("basis"),
            "params": d["model"].get("params")}


def median(v):
    return statistics.median(v) if v else float("nan")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--memplan", default=os.path.join(ROOT, "build", "memplan"))
    ap.add_argument("--tables", default=os.path.join(HERE, "published"))
    ap.add_argument("--rows", type=int, default=0, help="only the first N usable rows (0 = all)")
    ap.add_argument("--target", type=float, default=10.0, help="held-out median error to pass, %% (10)")
    ap.add_argument("--json", dest="json_path", default=None, help="also write the results as JSON to FILE")
    ap.add_argument("--quiet", action="store_true", help="print the summary lines only")
    a = ap.parse_args()
    try:
        tables = load_tables(a.tables)
    except (ValueError, OSError, json.JSONDecodeError) as e:
        print(f"published_check: {e}", file=sys.stderr)
        return 2
    todo, unusable = [], []
    for doc in tables:
        for r in doc["rows"]:
            (unusable if r["use"] == "unusable" else todo).append((doc, r))
    if a.rows > 0:
        todo = todo[:a.rows]
    with concurrent.futures.ThreadPoolExecutor(max_workers=os.cpu_count() or 2) as ex:
        preds = list(ex.map(lambda dr: predict(a.memplan, dr[0]["models"][dr[1]["model"]], dr[1]), todo))
    out, errs = [], {"set": [], "held-out": []}
    if not a.quiet:
        print(f"{'row':<44} {'use':<8} {'published':>10} {'predicted':>10} {'error':>8}  source")
        print(f"{'-':<44} {'-':<8} {'tok/s/GPU':>10} {'tok/s/GPU':>10} {'%':>8}  -")
    for (doc, r), p in zip(todo, preds):
        pub = r["tokens_per_s_per_gpu"]
        rec = {"id": r["id"], "use": r["use"], "published": pub, "file": r["file"], "line": r.get("line"),
               "table": r.get("table")}
        if "error" in p:
            rec["failed"] = p["error"]
            line = f"{r['id']:<44} {r['use']:<8} {pub:>10.0f} {'-':>10} {'-':>8}  memplan: {p['error']}"
        else:
            e = 100.0 * (p["tokens_per_s_per_gpu"] - pub) / pub
            rec.update(predicted=p["tokens_per_s_per_gpu"], error_pct=e, basis=p["basis"])
            errs[r["use"]].append(abs(e))
            line = f"{r['id']:<44} {r['use']:<8} {pub:>10.0f} {p['tokens_per_s_per_gpu']:>10.0f} {e:>+8.1f}  {doc['source']['file']}:{r.get('line', '')}"
        if not a.quiet:
            print(line)
        out.append(rec)
    for doc, r in unusable:
        if not a.quiet:
            print(f"{r['id']:<44} {'unusable':<8} {r['tokens_per_s_per_gpu']:>10.0f} {'-':>10} {'-':>8}  {r.get('why', '')}")
        out.append({"id": r["id"], "use": "unusable", "why": r.get("why", ""), "file": r["file"]})
    failed = sum(1 for o in out if "failed" in o)
    for doc in tables:   # per source, held-out rows
        ids = {r["id"] for r in doc["rows"]}
        v = [abs(o["error_pct"]) for o in out if o["id"] in ids and o["use"] == "held-out" and "error_pct" in o]
        if v:
            print(f"# {doc['source']['title']}: {len(v)} held-out rows, median |error| {median(v):.1f} %  ({doc['source']['url']})")
    ms, mh = median(errs["set"]), median(errs["held-out"])
    print(f"# rows: {len(errs['set'])} set the fitted figures, {len(errs['held-out'])} held out, "
          f"{len(unusable)} unusable, {failed} failed")
    print(f"# median |error|: set {ms:.1f} %, held-out {mh:.1f} % (target {a.target:.0f} %)")
    if a.json_path:
        with open(a.json_path, "w") as f:
            json.dump({"rows": out, "median_abs_error_pct": {"set": ms, "held-out": mh}}, f, indent=1)
    if failed:
        return 1
    return 0 if not errs["held-out"] or mh <= a.target else 1


if __name__ == "__main__":
    sys.exit(main())
