#!/usr/bin/env python3
"""transients.py — a diagnostic beside check_saved.py's reserved column: which lifetimes of the
recorded allocations decide the rows outside 3 %. Each traced row's kept trace (the judge,
bench/torch/results/traces/ROW.txt.gz) is replayed again with the allocations of one lifetime
class taken out (with their frees), and compared with the planned sequence as check_saved.py
compares it; printed per class: how many rows are then within 3 %, which come in and which go
out. The judged figure stays the whole recorded sequence's: this only says where the listing
(docs/formulas.md "The allocator in the plan") is short.

Usage: python3 bench/torch/transients.py [--memplan build/memplan] [--rows] [--small-only] [--misses]
                                         [ROW ...]
A lifetime class is the pair of phases (the harness's markers: data, forward, backward,
optimizer, zero_grad) in which an allocation is made and freed: forward-forward are the
forward's op temporaries (each op's outputs that no backward saves, freed within the forward:
an RMSNorm's pow and mean, a rotary embedding's products, the labels the loss pads); the
listing has of those only the loss's logits and their upcast. --small-only: only such
allocations of at most 1 MiB (the small pool's). --rows: list the rows that come in and go out.
--misses: each row outside 3 % with the first class that brings it in (forward, then backward,
then the optimizer step; at most 1 MiB first, then any size) or "none": docs/validation-torch.md's
table of the rows outside 3 % by mechanism.
Only the Python standard library and build/memplan.
"""
import argparse
import os
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import alloc_diff  # noqa: E402  (read, planned_file, SMALL)

CLASSES = [("forward", "forward"), ("backward", "backward"), ("optimizer", "optimizer")]


def lifetimes(lines):
    """Line index of each allocation -> (phase made, phase freed); never freed: 'never'."""
    phase, live, out = "", {}, {}
    for i, ln in enumerate(lines):
        p = ln.split()
        if len(p) >= 2 and p[0] == "m" and not p[1].startswith("step"):
            phase = p[1]
        elif len(p) >= 3 and p[0] in ("a", "x"):
            live[p[1]] = (i, phase)
        elif len(p) >= 2 and p[0] == "f" and p[1] in live:
            i0, made = live.pop(p[1])
            out[i0] = (made, phase)
    for i0, made in live.values():
        out[i0] = (made, "never")
    return out


def without(lines, life, cls, small_only):
    out, gone = [], set()
    for i, ln in enumerate(lines):
        p = ln.split()
        if len(p) >= 3 and p[0] in ("a", "x"):
            if life.get(i) == cls and (not small_only or int(p[2]) <= alloc_diff.SMALL):
                gone.add(p[1])
                continue
            gone.discard(p[1])
        elif len(p) >= 2 and p[0] == "f" and p[1] in gone:
            gone.discard(p[1])
            continue
        out.append(ln)
    return out


def reserved(memplan, paths):
    return alloc_diff.max_reserved(memplan, paths, "transients.py")


def within(rec, plan):
    return plan > 0 and abs(rec - plan) <= 0.03 * plan


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--memplan", default=os.path.join(alloc_diff.ROOT, "build", "memplan"))
    ap.add_argument("--rows", action="store_true")
    ap.add_argument("--small-only", action="store_true")
    ap.add_argument("--misses", action="store_true")
    ap.add_argument("names", nargs="*")
    a = ap.parse_args()
    traces = os.path.join(HERE, "results", "traces")
    names = alloc_diff.row_names(a.names)
    # (class, small only) in the order --misses tries them; the printed summary: a.small_only's
    tries = [(c, s) for c in CLASSES for s in (True, False)] if a.misses else [(c, a.small_only) for c in CLASSES]
    with tempfile.TemporaryDirectory() as d:
        kept, plans, variants = [], [], {t: [] for t in tries}
        for n in names:
            t = os.path.join(traces, n + ".txt.gz")
            lines = alloc_diff.read(t)
            life = lifetimes(lines)
            kept.append(t)
            plans.append(alloc_diff.planned_file(a.memplan, os.path.join(HERE, "results", n + ".json"), d))
            for t in tries:
                f = os.path.join(d, f"{n}.{t[0][0]}-{t[0][1]}.{int(t[1])}.txt")
                with open(f, "w") as o:
                    o.write("\n".join(without(lines, life, t[0], t[1])) + "\n")
                variants[t].append(f)
        rk, rp = reserved(a.memplan, kept), reserved(a.memplan, plans)
        base = [within(r, p) for r, p in zip(rk, rp)]
        print(f"{len(names)} traced rows, {sum(base)} within 3 % (the judged figure: the whole recorded sequence)")
        first = [None] * len(names)
        for t in tries:
            c = t[0]
            rv = reserved(a.memplan, variants[t])
            now = [within(r, p) for r, p in zip(rv, rp)]
            for k, (b, w) in enumerate(zip(base, now)):
                if w and not b and first[k] is None:
                    first[k] = f"{c[0]}-{c[1]}{' (at most 1 MiB)' if t[1] else ''}"
            if a.misses and t[1] != a.small_only:
                continue
            came = [n for n, b, w in zip(names, base, now) if w and not b]
            went = [n for n, b, w in zip(names, base, now) if b and not w]
            print(f"without the recorded {c[0]}-{c[1]} allocations{' of at most 1 MiB' if a.small_only else ''}: "
                  f"{sum(now)} within 3 % ({len(came)} in, {len(went)} out)")
            if a.rows:
                for n in came:
                    print(f"  in  {n}")
                for n in went:
                    print(f"  out {n}")
        if a.misses:
            print("rows outside 3 %, the first class whose recorded allocations out bring them in:")
            for n, b, r, p, f in zip(names, base, rk, rp, first):
                if not b:
                    print(f"  {n} {100.0 * (r - p) / p:+.2f} %: {f or 'none'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
