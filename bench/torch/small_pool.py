#!/usr/bin/env python3
"""small_pool.py — why a row's planned and recorded reserved memory are one 2 MiB segment apart:
the small pool (requests up to 1 MiB, PyTorch's kSmallSize, carved from 2 MiB segments) of each
traced row, recorded (bench/torch/results/traces/ROW.txt.gz, the judge) against planned
(`memplan validate --against torch --alloc-out`), each replayed alone through `memplan alloc`.

Usage: python3 bench/torch/small_pool.py [--memplan build/memplan] [--drop-le BYTES] [--all]
                                         [ROW ...]
Per row: the small pool's segments and its peak of live bytes (in segments: bytes / 2 MiB) for
both sequences, and the waste (segments - peak), the part of the pool no tensor fills at its
fullest. A row is put in one group:
  peak     the two peaks differ by a quarter segment or more: the plan holds other small tensors
           at the pool's fullest moment (which: alloc_diff.py ROW);
  packing  the peaks agree, the segments do not: the same bytes laid out otherwise (order and
           sizes of the small tensors around the moment the last segment is made);
  same     the same segments.
--drop-le BYTES replays the recorded sequence without its tensors of at most BYTES (and prints
how many rows' small pools change): how sensitive the segment count is to tensors too small to
matter to any peak. Rows listed: those whose small pools differ (--all: every traced row).
Only the Python standard library and build/memplan.
"""
import argparse
import os
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import alloc_diff  # noqa: E402  (read, planned_file, SMALL)

SEG = 2 << 20   # CUDACachingAllocator.cpp kSmallBuffer: a small-pool segment


def small_only(lines, drop_le=0):
    """The sequence without its large-pool tensors (and, with drop_le, without its tensors of
    at most drop_le bytes), and the small pool's peak of live bytes (gloo's x buffers left out,
    as the replay leaves them out)."""
    out, gone, size, skip = [], set(), {}, set()
    live = peak = 0
    for ln in lines:
        p = ln.split()
        if p and p[0] in ("a", "x") and len(p) >= 3:
            s = int(p[2])
            if s > alloc_diff.SMALL or s <= drop_le:
                gone.add(p[1])
                continue
            gone.discard(p[1])
            if p[0] == "x":
                skip.add(p[1])
            else:
                skip.discard(p[1])
                size[p[1]] = s
                live += s
                peak = max(peak, live)
        elif p and p[0] in ("f", "r") and p[1] in gone:
            if p[0] == "f":
                gone.discard(p[1])
            continue
        elif p and p[0] == "f":
            if p[1] in skip:
                skip.discard(p[1])
            else:
                live -= size.pop(p[1], 0)
        out.append(ln)
    return out, peak


def replay(memplan, paths):
    """max_segments of each trace file through the allocator model, in order."""
    return [b // SEG for b in alloc_diff.max_reserved(memplan, paths, "small_pool.py")]


def group(sr, pr, sp, pp):
    if sr == sp:
        return "same"
    return "peak" if abs(pp - pr) >= 0.25 else "packing"


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--memplan", default=os.path.join(alloc_diff.ROOT, "build", "memplan"))
    ap.add_argument("--drop-le", type=int, default=0, metavar="BYTES")
    ap.add_argument("--all", action="store_true")
    ap.add_argument("rows", nargs="*")
    a = ap.parse_args()
    traces = os.path.join(HERE, "results", "traces")
    names = alloc_diff.row_names(a.rows)
    rows, files = [], []
    with tempfile.TemporaryDirectory() as d:
        for n in names:
            t = os.path.join(traces, n + ".txt.gz")
            if not os.path.exists(t):
                print(f"# {n}: no recorded trace")
                continue
            rec = alloc_diff.read(t)
            plan = alloc_diff.read(alloc_diff.planned_file(a.memplan, os.path.join(HERE, "results", n + ".json"), d))
            seqs = [small_only(rec), small_only(plan)]
            if a.drop_le:
                seqs.append(small_only(rec, a.drop_le))
            for k, (seq, _) in enumerate(seqs):
                f = os.path.join(d, f"{len(rows)}.{k}.txt")
                with open(f, "w") as out:
                    out.write("\n".join(seq) + "\n")
                files.append(f)
            rows.append((n, [pk / SEG for _, pk in seqs]))
        segs = replay(a.memplan, files) if files else []
    k = 3 if a.drop_le else 2
    counts, changed = {"same": 0, "peak": 0, "packing": 0}, 0
    waste = [0.0, 0.0]
    print("| row | recorded segments | recorded peak (segments) | planned segments | planned peak (segments) "
          "| waste recorded / planned | group |" + (f" recorded without <= {a.drop_le} B |" if a.drop_le else ""))
    for i, (n, pk) in enumerate(rows):
        sr, sp = segs[k * i], segs[k * i + 1]
        g = group(sr, pk[0], sp, pk[1])
        counts[g] += 1
        waste[0] += sr - pk[0]
        waste[1] += sp - pk[1]
        extra = ""
        if a.drop_le:
            changed += segs[k * i + 2] != sr
            extra = f" {segs[k * i + 2]} |"
        if a.all or g != "same":
            print(f"| {n} | {sr} | {pk[0]:.2f} | {sp} | {pk[1]:.2f} | {sr - pk[0]:.2f} / {sp - pk[1]:.2f} | {g} |"
                  + extra)
    if rows:
        print(f"# {len(rows)} rows: small pools the same {counts['same']}, apart by the peak {counts['peak']}, "
              f"by the packing {counts['packing']}; mean waste recorded {waste[0] / len(rows):.2f}, "
              f"planned {waste[1] / len(rows):.2f} segments")
    if a.drop_le:
        print(f"# without the recorded tensors of at most {a.drop_le} B, {changed} of {len(rows)} rows' small pools "
              "change their segment count")
    return 0


if __name__ == "__main__":
    sys.exit(main())
