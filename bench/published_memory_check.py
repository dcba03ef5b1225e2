#!/usr/bin/env python3
"""published_memory_check.py — memplan's reserved memory against published GPU training runs.

Each row of bench/published_memory/*.json is a peak reserved figure a framework printed for a real
GPU run (its source: file, table, line and the line itself), with its exact setup. This script
plans each row with `memplan --json` and compares the published figure with what memplan says
PyTorch's caching allocator reserves: the step's need (overhead_detail.allocator.need: its own
allocation sequence replayed through the allocator model, two steps from an empty cache) plus the
cuBLAS workspace (allocated through the caching allocator on a GPU, so inside max_memory_reserved;
memplan counts it among the fixed overheads). The CUDA context and NCCL's buffers are outside
max_memory_reserved and are left out. It prints every row, err % = (published - planned) /
planned, and the median of |err| over the rows.

  python3 bench/published_memory_check.py [--memplan build/memplan] [--target 5] [--json=FILE]

Exit 0 when the median |err| is within --target (5 %), 1 otherwise, 2 on bad input. Needs only
the Python standard library.
"""
import argparse
import glob
import json
import os
import statistics
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
GIB = 2.0 ** 30


def planned(memplan, spec, r):
    args = [memplan, "--model", os.path.join(ROOT, spec["hf_config"]) if "hf_config" in spec else spec["zoo"],
            "--gpu", r["gpu"], "--gpus", str(r["gpus"]), "--gpus-per-node", str(r["gpus_per_node"]),
            "--strategy", r["strategy"], "--precision", r["precision"], "--batch", str(r["batch"]),
            "--seq", str(r["seq"]), "--grad-accum", str(r["grad_accum"]), "--act-ckpt", r["act_ckpt"],
            "--attn", r["attn"], "--json"]
    if r.get("gpu_mem"):
        args += ["--gpu-mem", r["gpu_mem"]]
    p = subprocess.run(args, capture_output=True, text=True, cwd=ROOT)
    if p.returncode:
        raise RuntimeError((p.stderr.strip().splitlines() or ["memplan failed"])[-1])
    s = json.loads(p.stdout)["strategies"][0]
    ov = s["overhead_detail"]
    al = ov.get("allocator")
    if not al:
        raise RuntimeError("memplan gave no allocator figure (--alloc-margin allocator is the default)")
    return al["need"] + ov["cublas_workspace"], al


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--memplan", default=os.path.join(ROOT, "build", "memplan"))
    ap.add_argument("--tables", default=os.path.join(HERE, "published_memory"))
    ap.add_argument("--target", type=float, default=5.0, help="median |err| to pass, %% (5)")
    ap.add_argument("--json", dest="json_path", default=None)
    a = ap.parse_args()
    if not os.access(a.memplan, os.X_OK):
        print(f"published_memory_check.py: {a.memplan} is missing: run make first", file=sys.stderr)
        return 2
    print("| row | source | published GiB | planned GiB (need + cuBLAS) | err % | fits (planned) |")
    print("|---|---|---:|---:|---:|---|")
    errs, out = [], []
    for path in sorted(glob.glob(os.path.join(a.tables, "*.json"))):
        with open(path) as f:
            doc = json.load(f)
        for r in doc["rows"]:
            where = f"{os.path.relpath(path, ROOT)}: {doc['source']['file']} line {r['line']}"
            try:
                pl, al = planned(a.memplan, doc["models"][r["model"]], r)
            except (RuntimeError, KeyError, ValueError) as e:
                print(f"| {r['id']} | {where} | {r['published_reserved_gib']} | could not plan: {e} | | |")
                return 2
            pub = r["published_reserved_gib"] * GIB
            err = 100.0 * (pub - pl) / pl
            errs.append(abs(err))
            fits = "no (runs out)" if al.get("out_of_memory") else "yes"
            print(f"| {r['id']} | {where} | {r['published_reserved_gib']:.1f} | {pl / GIB:.2f} | {err:+.2f} | {fits} |")
            out.append({"id": r["id"], "published_bytes": pub, "planned_bytes": pl, "err_pct": err})
    med = statistics.median(errs) if errs else float("nan")
    print()
    print(f"median |err| over {len(errs)} rows: {med:.2f} % (target {a.target:g} %)")
    if a.json_path:
        with open(a.json_path, "w") as f:
            json.dump({"rows": out, "median_abs_err_pct": med, "target_pct": a.target}, f, indent=1)
    return 0 if errs and med <= a.target else 1


if __name__ == "__main__":
    sys.exit(main())
