#!/usr/bin/env python3
"""max_batch.py — the largest micro-batch that fits a memory cap, predicted by memplan and measured
with real PyTorch / DeepSpeed on CPU ranks.

For each setup: memplan plans it as the CPU ranks run it (`--autocast cpu --fsdp 2`, fixed overheads
zeroed, the harness's HF-Trainer loop) under `--gpu-mem CAP` and reports `max_micro_batch` = B.
Then `memplan validate --against torch` runs the harness at B and B+1 (and walks further while the
measurement disagrees) and reads the measured per-rank tensor peak, the same peak `validate`
compares. The measured maximum is the largest B whose measured peak fits the cap. The harness JSON
of every run is kept under bench/torch/results/ (they are ordinary matrix rows, `_b<B>_`).

Usage:
  python3 bench/torch/max_batch.py --model gpt2-mini --strategy ddp --cap 64MiB [--precision fp32]
      [--attn eager] [--act-ckpt none] [--seq S] [--ranks 2] [--json OUT] [--memplan build/memplan]
  python3 bench/torch/max_batch.py --table            # the docs table: every preset setup below

Exit status 0 when the predicted and measured maxima agree for every setup, 1 otherwise, 2 on bad
arguments or a run that failed. Needs the venv of `make torch-env` (memplan finds it).
"""
import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
RESULTS = os.path.join(HERE, "results")
UNITS = {"": 1, "B": 1, "KiB": 1 << 10, "K": 1 << 10, "MiB": 1 << 20, "M": 1 << 20, "GiB": 1 << 30, "G": 1 << 30}

# The docs table: (model, strategy, precision, attn, act_ckpt, seq, cap). Caps are chosen so the
# maximum micro-batch is a few samples, where one sample is a few percent of the cap.
PRESETS = [
    ("gpt2-mini", "ddp", "fp32", "eager", "none", 128, "64MiB"),
    ("gpt2-mini", "ddp", "fp32", "eager", "full", 128, "64MiB"),
    ("gpt2-mini", "fsdp-full", "amp-bf16", "sdpa", "none", 128, "64MiB"),
    ("gpt2-mini", "zero2", "amp-bf16", "sdpa", "none", 128, "1984MiB"),
    ("gpt2-mini", "zero3", "fp32", "eager", "none", 128, "1984MiB"),
    (os.path.join(HERE, "configs", "llama-mini.json"), "ddp", "fp32", "eager", "none", 128, "64MiB"),
]


def parse_size(s):
    m = re.fullmatch(r"\s*([0-9]+(?:\.[0-9]+)?)\s*([A-Za-z]*)\s*", s)
    if not m or m.group(2) not in UNITS:
        raise argparse.ArgumentTypeError(f"--cap '{s}' is not a size (e.g. 64MiB, 2GiB; units {', '.join(k for k in UNITS if k)})")
    return int(float(m.group(1)) * UNITS[m.group(2)])


def plan_flags(a):
    f = ["--model", a.model, "--strategy", a.strategy, "--precision", a.precision, "--attn", a.attn,
         "--act-ckpt", a.act_ckpt, "--loop", "trainer"]
    if a.seq:
        f += ["--seq", str(a.seq)]
    return f


def predicted_max(a, cap):
    """memplan's max_micro_batch under the cap, planned as the CPU ranks run."""
    cmd = [a.memplan] + plan_flags(a) + [
        "--gpus", str(a.ranks), "--autocast", "cpu", "--fsdp", "2", "--cuda-context", "0", "--cublas-ws", "0", "--nccl-mem", "0",
        "--alloc-margin", "0", "--gpu-mem", f"{cap // 1024}KiB", "--json"]
    if a.strategy == "fsdp-hybrid":
        cmd += ["--gpus-per-node", str(max(1, a.ranks // 2))]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"max_batch.py: memplan failed: {(r.stderr.strip().splitlines() or ['?'])[-1]}")
    s = json.loads(r.stdout)["strategies"][0]
    return int(s["max_micro_batch"])


def measure(a, b, keep):
    """Runs the harness at micro-batch b through validate; returns (predicted, measured) peak bytes."""
    with tempfile.TemporaryDirectory() as d:
        out = os.path.join(d, "v.json")
        cmd = [a.memplan, "validate", "--against", "torch"] + plan_flags(a) + [
            "--batch", str(b), "--ranks", str(a.ranks), "--keep", keep, f"--json={out}"]
        print(f"# run: {' '.join(cmd[1:])}", file=sys.stderr, flush=True)
        r = subprocess.run(cmd, capture_output=True, text=True)
        if not os.path.exists(out):
            sys.exit(f"max_batch.py: the run at batch {b} failed: {(r.stderr.strip().splitlines() or ['?'])[-1]}")
        with open(out) as f:
            v = json.load(f)
    if not v.get("strategies"):
        sys.exit(f"max_batch.py: the run at batch {b} gave no comparison")
    pk = v["strategies"][0]["peak"]
    return pk["predicted_bytes"], pk["measured_bytes"]


def save_kept(keep):
    """Moves the harness results validate kept into bench/torch/results/ under the matrix naming."""
    for fn in os.listdir(keep):
        if not fn.endswith(".json"):
            continue
        with open(os.path.join(keep, fn)) as f:
            h = json.load(f)
        su = h.get("setup", {})
        if h.get("status") != "ok" or not su:
            continue
        model = os.path.basename(str(h.get("model", {}).get("name", "?")))
        model = model[:-5] if model.endswith(".json") else model
        name = (f"{model}_{su['strategy']}_{su['precision']}_{su['act_ckpt']}_{su['attn']}_r{su['ranks']}"
                f"_b{su['batch']}_s{su['seq']}.json")
        shutil.copyfile(os.path.join(keep, fn), os.path.join(RESULTS, name))


def one(a, cap):
    bp = predicted_max(a, cap)
    runs = {}
    keep = tempfile.mkdtemp(prefix="max_batch.")
    try:
        def peak(b):
            if b not in runs:
                runs[b] = measure(a, b, keep)
            return runs[b][1]
        # walk from the prediction to the measured boundary: fits(b) and not fits(b + 1)
        b = max(bp, 1)
        if peak(b) <= cap:
            while peak(b + 1) <= cap:
                b += 1
            bm = b
        else:
            while b > 1 and peak(b - 1) > cap:
                b -= 1
            bm = b - 1
        save_kept(keep)
    finally:
        shutil.rmtree(keep, ignore_errors=True)
    return {"model": a.model, "strategy": a.strategy, "precision": a.precision, "attn": a.attn,
            "act_ckpt": a.act_ckpt, "seq": a.seq, "ranks": a.ranks, "cap_bytes": cap,
            "predicted_max_batch": bp, "measured_max_batch": bm,
            "runs": {str(k): {"predicted_peak_bytes": v[0], "measured_peak_bytes": v[1]} for k, v in sorted(runs.items())}}


def row(r):
    runs = "; ".join(f"b{k}: {v['predicted_peak_bytes'] / 2**20:.2f} / {v['measured_peak_bytes'] / 2**20:.2f}"
                     for k, v in r["runs"].items())
    same = "same" if r["predicted_max_batch"] == r["measured_max_batch"] else "DIFFER"
    return (f"| {os.path.basename(r['model'])} {r['strategy']} {r['precision']} {r['attn']} ckpt={r['act_ckpt']} s{r['seq']} r{r['ranks']} "
            f"| {r['cap_bytes'] / 2**20:.0f} | {r['predicted_max_batch']} | {r['measured_max_batch']} | {same} | {runs} |")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model")
    ap.add_argument("--strategy", choices=["ddp", "zero1", "zero2", "zero3", "fsdp-full", "fsdp-grad-op", "fsdp-hybrid"])
    ap.add_argument("--cap", type=parse_size)
    ap.add_argument("--precision", default="fp32", choices=["fp32", "amp-bf16", "mixed-bf16"])
    ap.add_argument("--attn", default="eager", choices=["eager", "sdpa"])
    ap.add_argument("--act-ckpt", default="none", choices=["none", "full"])
    ap.add_argument("--seq", type=int, default=0)
    ap.add_argument("--ranks", type=int, default=2)
    ap.add_argument("--json")
    ap.add_argument("--table", action="store_true", help="every preset setup, as the docs table")
    ap.add_argument("--memplan", default=os.path.join(ROOT, "build", "memplan"))
    a = ap.parse_args()
    if not os.access(a.memplan, os.X_OK):
        print(f"max_batch.py: {a.memplan} is missing: run make first", file=sys.stderr)
        return 2
    if a.ranks < 2:
        ap.error(f"--ranks {a.ranks}: needs at least 2")
    if a.table:
        setups = [argparse.Namespace(**{**vars(a), "model": m, "strategy": s, "precision": p, "attn": at,
                                        "act_ckpt": c, "seq": q, "cap": parse_size(cap)})
                  for m, s, p, at, c, q, cap in PRESETS]
    else:
        if not a.model or not a.strategy or not a.cap:
            ap.error("--model, --strategy and --cap are needed (or --table)")
        setups = [a]
    print("| setup | cap MiB | predicted max batch | measured max batch | agree | peak MiB predicted / measured per run |")
    print("|---|---:|---:|---:|---|---|")
    out, ok = [], True
    for s in setups:
        r = one(s, s.cap)
        print(row(r), flush=True)
        out.append(r)
        ok &= r["predicted_max_batch"] == r["measured_max_batch"]
    if a.json:
        with open(a.json, "w") as f:
            json.dump(out, f, indent=1)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
