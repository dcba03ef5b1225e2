#!/usr/bin/env python3
"""gpu_alloc_check.py — a GPU row's reserved memory against the caching allocator model, in one
call (bench/gpu_check.sh runs it on a lent GPU after PyTorch's GPU rows; docs/gpu.md).

Usage: python3 bench/torch/gpu_alloc_check.py [--memplan build/memplan] ROW_cuda.json ...

For each GPU row (harness.py --device cuda --json ROW_cuda.json --alloc-trace ROW_cuda.trace.txt):
  measured   rank 0's torch.cuda.max_memory_reserved() over the steady steps (per_rank[0].cuda)
  replayed   the allocator's own history of that run (ROW_cuda.trace.txt: every allocation, free
             and stream as torch recorded them) replayed through memplan's allocator model
             (`memplan alloc --from start`): the model's rules alone, judged on a real sequence
  planned    what memplan plans for the same setup on this GPU (`memplan --json`,
             overhead_detail.allocator.need: its own allocation sequence replayed), with the
             CUDA context and NCCL zeroed (outside max_memory_reserved) and the measured cuBLAS
             workspace (inside it)
and err % = (measured - figure) / figure, as check_saved.py reports CPU rows. A row without a
trace shows '-' for the replay. Exit 0 when every row could be compared, 1 otherwise (a row the
harness did not finish, a memplan failure). Needs only the Python standard library.
"""
import argparse
import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
MIB = 2.0 ** 20


def err(meas, fig):
    return f"{100.0 * (meas - fig) / fig:+.2f}" if fig else "-"


def replayed(memplan, trace):
    r = subprocess.run([memplan, "alloc", "--json", "--from", "start", trace], capture_output=True, text=True)
    if r.returncode:
        raise RuntimeError((r.stderr.strip().splitlines() or ["memplan alloc failed"])[-1])
    return json.loads(r.stdout)[0]["max_reserved_bytes"]


def plan_args(doc):
    """memplan's flags for the row's setup on its GPU (the harness's names are memplan's)."""
    s, m = doc["setup"], doc["model"]
    r0 = doc["per_rank"][0]
    cuda = r0["cuda"]
    gpu_mem = cuda.get("device_total_bytes")
    ws = (cuda.get("cublas") or {}).get("workspace_allocated_bytes") or 0
    args = ["--model", m.get("source") or m["name"], "--gpus", str(s["ranks"]), "--gpus-per-node", str(s["ranks"]),
            "--strategy", s["strategy"], "--batch", str(s["batch"]), "--seq", str(s["seq"]),
            "--grad-accum", str(s.get("grad_accum", 1)), "--precision", s["precision"],
            "--act-ckpt", s.get("act_ckpt", "none"), "--attn", s.get("attn", "eager"),
            "--dropout", repr(float(s.get("dropout", 0.0))), "--impl", "pytorch",
            "--cuda-context", "0MiB", "--nccl-mem", "0MiB", "--cublas-ws", f"{ws}B", "--json"]
    if gpu_mem:
        args += ["--gpu-mem", f"{int(gpu_mem)}B"]
    return args


def planned(memplan, doc):
    r = subprocess.run([memplan] + plan_args(doc), capture_output=True, text=True, cwd=ROOT)
    if r.returncode:
        raise RuntimeError((r.stderr.strip().splitlines() or ["memplan failed"])[-1])
    st = json.loads(r.stdout)["strategies"][0]
    return st["overhead_detail"]["allocator"]["need"]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--memplan", default=os.path.join(ROOT, "build", "memplan"))
    ap.add_argument("rows", nargs="+")
    a = ap.parse_args()
    print("| GPU row | measured max reserved MiB | replayed (its own history) MiB | err % | planned need MiB | err % |")
    print("|---|---:|---:|---:|---:|---:|")
    bad = 0
    for path in a.rows:
        name = os.path.basename(path)[:-5]
        try:
            with open(path) as f:
                doc = json.load(f)
            if doc.get("status") != "ok" or doc.get("device") != "cuda":
                raise RuntimeError(f"not a finished GPU row (status {doc.get('status')}, device {doc.get('device')})")
            meas = doc["per_rank"][0]["cuda"]["max_memory_reserved"]
            trace = path[:-5] + ".trace.txt"
            rep = replayed(a.memplan, trace) if os.path.exists(trace) else None
            pl = planned(a.memplan, doc)
        except (OSError, ValueError, KeyError, IndexError, TypeError, RuntimeError) as e:
            print(f"| {name} | could not compare: {type(e).__name__}: {str(e)[:160]} | | | | |")
            bad += 1
            continue
        rep_s = (f"{rep / MIB:,.2f} | {err(meas, rep)}") if rep is not None else "- | -"
        print(f"| {name} | {meas / MIB:,.2f} | {rep_s} | {pl / MIB:,.2f} | {err(meas, pl)} |")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
