#!/usr/bin/env python3
"""published_memory_check.py — memplan's reserved memory against published GPU training runs.

Each row of bench/published_memory/*.json is a peak memory figure a framework printed for a real
GPU run (its source: file, table, line and the line itself), with its exact setup (the fields of
bench/published/*.json that fit_time.plan_args turns into flags, plus the memory-only ones in
MEMORY_FLAGS: --gpu-mem, --loop, LoRA). This script plans each row with `memplan --json` and
compares the published figure with what memplan says that figure holds. The source's (or the row's)
"measure" names what the figure is:

  max_memory_reserved  torch.cuda.max_memory_reserved(): what the caching allocator reserved on
                       that GPU. memplan replays the step's own allocation sequence (two steps
                       from an empty cache) through its allocator model with the GPU's capacity
                       (less the fixed overheads) as the limit: the cache grows as far as that GPU
                       lets it and is given back only when a cudaMalloc fails, as on the GPU
                       (overhead_detail.allocator.reserved_at_limit); plus the cuBLAS workspace
                       (allocated through the caching allocator on a GPU, so inside
                       max_memory_reserved; memplan counts it among the fixed overheads). The
                       CUDA context and NCCL's buffers are outside it and left out.
  nvidia-smi           the process's device memory as nvidia-smi shows it: the above plus the
                       CUDA context and NCCL's buffers (memplan's cuda_context and nccl figures).

It prints every row, err % = (published - planned) / planned, the median of |err| per source and
over all rows. Beside it, the step's need (overhead_detail.allocator.need: the least capacity with
which the two steps succeed, the same on any GPU) with the same overheads: a lower bound of what
a GPU reserves, equal to it only where the GPU is just large enough.

  python3 bench/published_memory_check.py [--memplan build/memplan] [--target 5] [--json=FILE]

Exit 0 when the median |err| over all rows is within --target (5 %), 1 otherwise, 2 on bad input
(a row that does not plan). Needs only the Python standard library.
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
sys.path.insert(0, HERE)
import fit_time  # noqa: E402

# memory-only setup fields (the rest: fit_time.plan_args, shared with the time corpus)
MEMORY_FLAGS = (("gpu_mem", "--gpu-mem"), ("loop", "--loop"), ("zero_grad", "--zero-grad"),
                ("lora", "--lora"), ("lora_alpha", "--lora-alpha"), ("lora_targets", "--lora-targets"),
                ("lora_dropout", "--lora-dropout"), ("quant_base", "--quant-base"), ("freeze", "--freeze"))
# what each published figure holds besides the step's need: overhead_detail fields
FIGURES = {"max_memory_reserved": ("cublas_workspace",),
           "nvidia-smi": ("cublas_workspace", "cuda_context", "nccl")}


def planned(memplan, spec, r, figure):
    """The row's figure as memplan plans it (bytes): from the replay at the GPU's capacity and from
    the need (its lower bound); and the allocator's JSON."""
    model, temp = fit_time.model_config(spec, r["seq"])
    args = [memplan, "--model", model] + fit_time.plan_args(r) + ["--json"]
    for key, flag in MEMORY_FLAGS:
        if key in r:
            args += [flag, str(r[key])]
    try:
        p = subprocess.run(args, capture_output=True, text=True, cwd=ROOT)
    finally:
        if temp:
            os.unlink(model)
    if p.returncode:
        raise RuntimeError((p.stderr.strip().splitlines() or ["memplan failed"])[-1])
    s = json.loads(p.stdout)["strategies"][0]
    ov = s["overhead_detail"]
    al = ov.get("allocator")
    if not al:
        raise RuntimeError("memplan gave no allocator figure (--alloc-margin allocator is the default)")
    fixed = sum(ov[k] for k in FIGURES[figure])
    return al["reserved_at_limit"] + fixed, al["need"] + fixed, al


def published_gib(r):
    return r["published_gib"] if "published_gib" in r else r["published_reserved_gib"]


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
    print("| row | source | figure | published GiB | planned GiB | err % | need GiB | err % | fits |")
    print("|---|---|---|---:|---:|---:|---:|---:|---|")
    errs, need_errs, out, per_source = [], [], [], {}
    for path in sorted(glob.glob(os.path.join(a.tables, "*.json"))):
        with open(path) as f:
            doc = json.load(f)
        name = doc["source"].get("name", os.path.splitext(os.path.basename(path))[0])
        for r in doc["rows"]:
            figure = r.get("measure", doc["source"].get("measure", "max_memory_reserved"))
            where = f"{os.path.relpath(path, ROOT)}: {r.get('file', doc['source']['file'])} line {r['line']}"
            try:
                if figure not in FIGURES:
                    raise ValueError(f"measure '{figure}' (valid: {', '.join(FIGURES)})")
                pl, need, al = planned(a.memplan, doc["models"][r["model"]], r, figure)
            except (RuntimeError, KeyError, ValueError) as e:
                print(f"| {r['id']} | {where} | {figure} | {published_gib(r)} | could not plan: {e} | | | | |")
                return 2
            pub = published_gib(r) * GIB
            err, need_err = 100.0 * (pub - pl) / pl, 100.0 * (pub - need) / need
            errs.append(abs(err))
            need_errs.append(abs(need_err))
            per_source.setdefault(name, []).append(abs(err))
            fits = "no (runs out)" if al.get("out_of_memory") else "yes"
            print(f"| {r['id']} | {where} | {figure} | {published_gib(r):.1f} | {pl / GIB:.2f} | {err:+.2f} "
                  f"| {need / GIB:.2f} | {need_err:+.2f} | {fits} |")
            out.append({"id": r["id"], "source": name, "figure": figure, "where": where, "published_bytes": pub,
                        "planned_bytes": pl, "err_pct": err, "need_bytes": need, "need_err_pct": need_err})
    med = statistics.median(errs) if errs else float("nan")
    print()
    for name, e in sorted(per_source.items()):
        print(f"{name}: median |err| over {len(e)} rows: {statistics.median(e):.2f} %")
    print(f"median |err| over {len(errs)} rows: {med:.2f} % (target {a.target:g} %)")
    if need_errs:
        print(f"(the need instead, a lower bound: median |err| {statistics.median(need_errs):.2f} %)")
    if a.json_path:
        with open(a.json_path, "w") as f:
            json.dump({"rows": out, "median_abs_err_pct": med, "target_pct": a.target,
                       "per_source_median_abs_err_pct": {n: statistics.median(e) for n, e in per_source.items()}},
                      f, indent=1)
    return 0 if errs and med <= a.target else 1


if __name__ == "__main__":
    sys.exit(main())
