#!/usr/bin/env python3
"""pp_check.py — memplan's pipeline rank against the tensor peaks bench/torch/pp_probe.py measured
on CPU ranks (bench/torch/results/pp/*.jsonl): for each saved setup, the rank memplan plans (the
most loaded: JSON pp_stage) and its tensor peak (peak - overhead, with the probe's settings)
beside that rank's measured peak and the other rank's. docs/formulas.md "Pipeline parallel".

  python3 bench/torch/pp_check.py [--memplan build/memplan] [results.jsonl ...]
"""
import argparse
import glob
import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--memplan", default=os.path.join(ROOT, "build", "memplan"))
    ap.add_argument("results", nargs="*")
    a = ap.parse_args()
    setups = {}
    for path in a.results or sorted(glob.glob(os.path.join(HERE, "results", "pp", "*.jsonl"))):
        with open(path) as f:
            for line in f:
                if line.startswith("{"):
                    r = json.loads(line)
                    key = (r["schedule"], r["microbatches"], r.get("virtual", 1), r.get("less_first", 0),
                           r.get("less_last", 0), r["batch"], r["seq"], r.get("return_outputs", True))
                    setups.setdefault(key, {})[r["rank"]] = r
    print("| schedule | M | stages/rank | less first, last | return outputs | planned rank | memplan tensor peak B | "
          "measured B | other rank B | error % |")
    print("|---|---:|---:|---|---|---:|---:|---:|---:|---:|")
    for (sched, M, V, lf, ll, b, s, ret), ranks in sorted(setups.items()):
        args = [a.memplan, "--model", "gpt2-mini", "--gpus", str(len(ranks)), "--pp", str(len(ranks)),
                "--microbatches", str(M), "--pp-schedule", sched, "--batch", str(b), "--seq", str(s),
                "--precision", "fp32", "--strategy", "ddp", "--autocast", "cpu", "--cuda-context", "0",
                "--nccl-mem", "0", "--alloc-margin", "0", "--dropout", "0", "--json"]
        if V > 1:
            args += ["--pp-virtual", str(V)]
        if lf or ll:
            args += ["--pp-less-first", str(lf), "--pp-less-last", str(ll)]
        args += ["--pp-return-outputs", "on" if ret else "off"]
        on = "on" if ret else "off"
        p = subprocess.run(args, capture_output=True, text=True)
        if p.returncode:
            print(f"| {sched} | {M} | {V} | {lf}, {ll} | {on} | memplan refused: {p.stderr.strip()} |||||")
            continue
        st = json.loads(p.stdout)["strategies"][0]
        peak = st["memory"]["peak"] - st["memory"]["overhead"]
        k = st["pp_stage"]
        meas = ranks[k]["peak_bytes"]
        other = max((r["peak_bytes"] for j, r in ranks.items() if j != k), default=0)
        print(f"| {sched} | {M} | {V} | {lf}, {ll} | {on} | {k} ({st['pp_in_flight']} in flight) | {peak:,.0f} | {meas:,} | "
              f"{other:,} | {100 * (peak - meas) / meas:+.2f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
