#!/usr/bin/env python3
"""check_saved.py — the calibration matrix: every saved harness result (bench/torch/results/*.json)
re-checked against the current planner with `memplan validate --against torch --measured`, as a
Markdown table (docs/validation-torch.md carries its output) and a closing count.

Usage: python3 bench/torch/check_saved.py [--memplan build/memplan] [RESULT.json ...]
Where a row's allocation sequence was recorded (bench/torch/results/traces/<row>.txt.gz, by
record_traces.py), the reserved memory of the planned and the recorded allocations replayed
through the caching allocator model is shown too (MiB, err % = (recorded - planned) / planned),
with a closing count of the rows within 3 %; it is not (yet) a condition of a row's pass.
Rows whose strategy has no planner row (torch-zero1, none) are listed apart, and so are GPU rows
(harness.py --device cuda: "device": "cuda", kept in results/cuda/): their figures are the CUDA
allocator's, not the CPU tensor peak these rows compare. Exit status 0 when every comparable row
passes, 1 otherwise. Needs only the Python standard library.
"""
import argparse
import glob
import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
NO_ROW = {"torch-zero1", "none"}


def is_gpu_row(h):
    """A result of harness.py --device cuda (older CPU rows carry no device: CPU)."""
    return h.get("device", "cpu") != "cpu" or h.get("setup", {}).get("device", "cpu") != "cpu"


def check(memplan, path):
    with tempfile.TemporaryDirectory() as d:
        out = os.path.join(d, "v.json")
        r = subprocess.run([memplan, "validate", "--against", "torch", "--measured", path, f"--json={out}"],
                           capture_output=True, text=True)
        if not os.path.exists(out):
            return None, (r.stderr.strip().splitlines() or ["no output"])[-1]
        with open(out) as f:
            return json.load(f), None


def row(path, v):
    s = v["strategies"][0]
    pk = s["peak"]
    pred, meas = pk["predicted_bytes"], pk["measured_bytes"]
    err = 100.0 * (meas - pred) / pred if pred else float("inf")
    ms = s["model_states"]
    states = all(round(q["predicted"]) == round(q["measured"]) for q in ms.values())
    colls = s["collectives_per_step"]
    pay = all(round(c["predicted_payload_bytes"]) == round(c["measured_payload_bytes"]) for c in colls)
    phase = "same" if pk["predicted_phase"] == {"optimizer": "step", "zero_grad": "step"}.get(
        pk["measured_phase"], pk["measured_phase"]) else f'{pk["predicted_phase"]} / {pk["measured_phase"]}'
    name = os.path.basename(path)[:-5]
    rv = s.get("reserved")
    if rv:
        rp, rr = rv["planned_bytes"], rv["recorded_bytes"]
        rerr = 100.0 * (rr - rp) / rp if rp else float("inf")
        res = f"{rp / 2**20:,.2f} | {rr / 2**20:,.2f} | {rerr:+.2f}"
    else:
        res = "- | - | -"
    return (f"| {name} | {pred:,.0f} | {meas:,.0f} | {err:+.2f} | {phase} | {'exact' if states else 'differ'} "
            f"| {'exact' if pay else 'differ'} | {'pass' if s['pass'] else 'FAIL'} | {res} |"), bool(s["pass"]), rv


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--memplan", default=os.path.join(ROOT, "build", "memplan"))
    ap.add_argument("results", nargs="*")
    a = ap.parse_args()
    files = a.results or sorted(glob.glob(os.path.join(HERE, "results", "*.json")))
    if not os.access(a.memplan, os.X_OK):
        print(f"check_saved.py: {a.memplan} is missing: run make first", file=sys.stderr)
        return 2
    print("| setup (model_strategy_precision_ckpt_attn_ranks_batch_seq) | predicted peak B | measured peak B "
          "| err % | peak phase | model states | payloads | row | reserved planned MiB | reserved recorded MiB "
          "| reserved err % |")
    print("|---|---:|---:|---:|---|---|---|---|---:|---:|---:|")
    n = ok = 0
    traced = within = 0
    skipped, broken, gpu = [], [], []
    for p in files:
        with open(p) as f:
            h = json.load(f)
        if is_gpu_row(h):
            gpu.append(os.path.basename(p))
            continue
        strat = h.get("setup", {}).get("strategy", "?")
        if strat in NO_ROW or h.get("status") != "ok":
            skipped.append(os.path.basename(p))
            continue
        v, err = check(a.memplan, p)
        if v is None:
            broken.append(f"{os.path.basename(p)}: {err}")
            n += 1
            continue
        n_before = n
        if not v.get("strategies"):
            broken.append(f"{os.path.basename(p)}: {err or 'memplan could not plan it (see its message)'}")
            continue
        line, passed, rv = row(p, v)
        print(line)
        n += 1
        ok += passed
        if rv:
            traced += 1
            within += bool(rv["within_tolerance"])
    print()
    print(f"{ok} of {n} rows pass; {len(skipped)} results have no planner row (torch-zero1, none, failed runs)"
          + (f"; {len(gpu)} GPU rows not compared (device cuda: {', '.join(gpu)})" if gpu else ""))
    print(f"reserved (planned against recorded allocations, the allocator model at torch's defaults): "
          f"{within} of {traced} rows with a recorded trace within 3 %; {n - traced} rows without one")
    for b in broken:
        print(f"- could not compare {b}")
    return 0 if ok == n else 1


if __name__ == "__main__":
    sys.exit(main())
