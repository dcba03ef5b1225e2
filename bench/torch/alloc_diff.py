#!/usr/bin/env python3
"""alloc_diff.py — a row's recorded allocation sequence (the judge: bench/torch/results/traces/
ROW.txt.gz, record_traces.py) aligned with its planned one (`memplan validate --against torch
--alloc-out`), to find where the planned listing parts from what PyTorch really did.

Usage: python3 bench/torch/alloc_diff.py [--memplan build/memplan] [--step 2] [--min BYTES]
                                         [--context N] ROW [ROW ...]
ROW: a result's name (bench/torch/results/ROW.json) or path. For the step asked (default 2, the
first steady one), both sequences are reduced to tokens "+SIZE" (an allocation) and "-SIZE" (the
free of a block of that size), gloo's in-collective buffers (x lines) and their frees left out,
tensors below --min bytes dropped (default 0: all), and aligned by difflib; printed: per pool
(small: <= 1 MiB, PyTorch's kSmallSize; large) the count and bytes allocated in the step, the
largest live bytes in each, and the first --context (default 3) places where the two differ,
with the recorded phase markers and the planned listing's rule comments around them. Only the
Python standard library.
--recorded FILE (one ROW): judge with FILE instead of the kept trace, e.g. a re-run's trace
written with `harness.py --rerun ROW.json --alloc-trace FILE --alloc-ops`, whose comments name
the ops each allocation was made under (printed in place of the phase).
"""
import argparse
import difflib
import glob
import gzip
import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
SMALL = 1 << 20   # CUDACachingAllocator.cpp kSmallSize: requests up to 1 MiB use the small pool


def max_reserved(memplan, paths, who):
    """max reserved bytes of each trace file replayed through memplan's allocator model
    (`memplan alloc --json`), in order; `who` names the calling script in the error."""
    r = subprocess.run([memplan, "alloc", "--json"] + paths, capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"{who}: memplan alloc failed: {r.stderr.strip()}")
    return [d["max_reserved_bytes"] for d in json.loads(r.stdout)]


def row_names(args):
    """Row names from the command line (a result file's name or the row's), else every row
    with a kept trace (results/traces/ROW.txt.gz)."""
    return [os.path.basename(r)[:-5] if r.endswith(".json") else r for r in args] or \
        sorted(os.path.basename(t)[:-7] for t in glob.glob(os.path.join(HERE, "results", "traces", "*.txt.gz")))


def read(path):
    op = gzip.open if path.endswith(".gz") else open
    with op(path, "rt") as f:
        return f.read().splitlines()


def step_tokens(lines, step, floor):
    """Tokens of step `step`: (token, label) with label the last marker / comment seen."""
    size, out, label, cur, skip = {}, [], "", 0, set()
    for ln in lines:
        p = ln.split()
        if not p:
            continue
        if p[0] == "#":
            label = " ".join(p[1:])
            continue
        if p[0] == "m":
            if p[1].startswith("step"):
                cur = int(p[1][4:])
            label = p[1]
            continue
        if p[0] == "x":
            skip.add(p[1])
            continue
        if p[0] == "a":
            skip.discard(p[1])
            size[p[1]] = int(p[2])
            if cur == step and int(p[2]) >= floor:
                out.append((f"+{p[2]}", label))
        elif p[0] == "f":
            if p[1] in skip:
                skip.discard(p[1])
                continue
            s = size.pop(p[1], None)
            if s is not None and cur == step and s >= floor:
                out.append((f"-{s}", label))
    return out


def pools(tokens):
    """Per pool: allocations, bytes allocated, the largest live bytes (within the step)."""
    r = {}
    for pool in ("small", "large"):
        live = top = n = b = 0
        for t, _ in tokens:
            s = int(t[1:])
            if (s <= SMALL) != (pool == "small"):
                continue
            if t[0] == "+":
                n, b, live = n + 1, b + s, live + s
            else:
                live -= s
            top = max(top, live)
        r[pool] = (n, b, top)
    return r


def planned_file(memplan, row_json, d):
    r = subprocess.run([memplan, "validate", "--against", "torch", "--measured", row_json, "--alloc-out", d],
                       capture_output=True, text=True)
    name = os.path.basename(row_json)[:-5]
    path = os.path.join(d, name + ".planned.txt")
    if not os.path.exists(path):
        sys.exit(f"alloc_diff.py: no planned listing for {name}: {r.stderr.strip()}")
    return path


def show(name, rec, plan, context):
    print(f"## {name}")
    pr, pp = pools(rec), pools(plan)
    print("pool   | recorded: allocs, MiB allocated, MiB live max | planned: allocs, MiB, MiB live max")
    for k in ("small", "large"):
        a, b = pr[k], pp[k]
        print(f"{k:6} | {a[0]:6d} {a[1] / 2**20:9.2f} {a[2] / 2**20:8.2f} | {b[0]:6d} {b[1] / 2**20:9.2f} "
              f"{b[2] / 2**20:8.2f}")
    sm = difflib.SequenceMatcher(None, [t for t, _ in rec], [t for t, _ in plan], autojunk=False)
    shown = 0
    for tag, i0, i1, j0, j1 in sm.get_opcodes():
        if tag == "equal":
            continue
        print(f"-- {tag} at recorded #{i0} ({rec[i0][1] if i0 < len(rec) else 'end'}) / planned #{j0} "
              f"({plan[j0][1] if j0 < len(plan) else 'end'})")
        print("   recorded:", " ".join(t for t, _ in rec[i0:min(i1, i0 + 12)]) + (" ..." if i1 - i0 > 12 else ""))
        print("   planned: ", " ".join(t for t, _ in plan[j0:min(j1, j0 + 12)]) + (" ..." if j1 - j0 > 12 else ""))
        shown += 1
        if shown >= context:
            break
    print(f"similarity {sm.ratio():.3f} over {len(rec)} recorded / {len(plan)} planned tokens")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--memplan", default=os.path.join(ROOT, "build", "memplan"))
    ap.add_argument("--step", type=int, default=2)
    ap.add_argument("--min", type=int, default=0)
    ap.add_argument("--context", type=int, default=3)
    ap.add_argument("--recorded", default=None, metavar="FILE")
    ap.add_argument("rows", nargs="+")
    a = ap.parse_args()
    if a.recorded and len(a.rows) != 1:
        ap.error("--recorded takes one ROW")
    with tempfile.TemporaryDirectory() as d:
        for row in a.rows:
            js = row if row.endswith(".json") else os.path.join(HERE, "results", row + ".json")
            name = os.path.basename(js)[:-5]
            trace = a.recorded or os.path.join(HERE, "results", "traces", name + ".txt.gz")
            if not os.path.exists(trace):
                print(f"## {name}: no recorded trace")
                continue
            rec = step_tokens(read(trace), a.step, a.min)
            plan = step_tokens(read(planned_file(a.memplan, js, d)), a.step, a.min)
            show(name, rec, plan, a.context)
    return 0


if __name__ == "__main__":
    sys.exit(main())
