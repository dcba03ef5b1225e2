#!/usr/bin/env python3
"""cpu_only.py — a diagnostic beside check_saved.py's reserved column: how much of a row's
recorded-against-planned gap comes from allocations a CPU rank makes that a GPU run does not
make on the device. The judged figure stays the recorded sequence's; this prints a second one,
the same recorded sequence with those allocations (and their frees) taken out, and a third
without the forward's temporaries of at most 1 MiB too (transients.py: what the listing lacks on
a GPU as well), never used for a verdict.

Usage: python3 bench/torch/cpu_only.py [--memplan build/memplan] --ops-dir DIR [ROW ...]
DIR holds ROW.ops.txt (or .txt.gz): the row re-run with its allocations' ops named
(`torchrun ... harness.py --rerun bench/torch/results/ROW.json --alloc-trace DIR/ROW.ops.txt
--alloc-ops`); without ROWs every ROW.ops.txt there. Per row (MiB of max reserved, the
allocator model at torch's defaults): the kept trace (the judge), the re-run, the re-run without
the CPU-only allocations, the plan; err % = (recorded - planned) / planned for the kept trace,
the filtered re-run and the re-run without the forward's temporaries as well; how many
allocations of each CPU-only kind a step makes, and where taking them out moves the figure,
which kind alone does. A
re-run whose reserved differs from the kept trace's is flagged (the two runs differ: the
filtered figure then says little about the kept one). Only the Python standard library and
build/memplan.

The CPU-only kinds (CPU_ONLY below, matched on the op path `measure.py op_path` writes, innermost
op first), each with why a GPU run has no such device allocation:
- wrapped scalar: a Python or C++ number an op takes as a tensor, an 8-byte 0-dim tensor (double
  or int64). ATen wraps it on the CPU whatever the other operands' device
  (aten/src/ATen/ScalarOps.h wrapped_scalar_tensor: `device = at::kCPU`; torch/csrc/utils/
  python_arg_parser.cpp the same for a number passed as a Tensor argument), so on a GPU run it is
  host memory, not the caching allocator's. Made by: torch.optim's foreach ops on CPU ranks
  (torch/utils/_foreach_utils.py: the foreach kernels are CUDA's; on CPU the per-tensor fallback
  takes each scalar as a tensor), DDP's gradient division (reducer.cpp: `mul_out(grad, 1 /
  world_size)` under AccumulateGrad), autograd formulas (PowBackward0's exponent, MeanBackward's
  count, AddmmBackward0's alpha), models' Python arithmetic (GPT-2's gelu_new: `0.5 * input`).
- scalar cast: that scalar cast to the op's dtype (2 or 4 bytes, `_to_copy` under the op). On CPU
  the TensorIterator casts it to the common dtype; a CUDA kernel takes a CPU scalar as an argument
  (aten/src/ATen/native/cuda/Loops.cuh gpu_kernel_with_scalars), so there is no cast tensor.
- cpu flash-attention backward scratch: the 4-byte requests of
  aten::_scaled_dot_product_flash_attention_for_cpu_backward (the CPU kernel's own; CUDA's SDPA
  backward is another kernel with its own buffers).
- CPU GEMM scratch: what aten::mm / addmm / bmm / baddbmm allocate and free within the op (not
  their output): the CPU BLAS's packing buffers (oneDNN / MKL). A CUDA GEMM runs in cuBLAS's
  workspace, made once per handle and stream (aten/src/ATen/cuda/CublasHandlePool.cpp
  getCUDABlasLtWorkspace), not per call.
- oneDNN: any allocation under an mkldnn op (mkldnn_convolution's weight, input and output
  reorders: CPU only).
"""
import argparse
import collections
import glob
import os
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import alloc_diff  # noqa: E402  (read, planned_file)
import transients  # noqa: E402  (lifetimes)

SCALAR_CAST = "aten::empty_strided<aten::_to_copy<aten::to<"

# (kind, test(size, frames)) in order; frames: the op path split at '<', innermost first
CPU_ONLY = [
    ("scalar cast", lambda s, f: s <= 8 and "<".join(f[:3]) + "<" == SCALAR_CAST),
    ("wrapped scalar", lambda s, f: s == 8 and not f[0].startswith(("aten::empty", "aten::resize_", "aten::sum",
                                                                   "aten::nll_loss", "aten::scalar_tensor"))),
    ("cpu flash-attention backward scratch",
     lambda s, f: s <= 8 and f[0] == "aten::_scaled_dot_product_flash_attention_for_cpu_backward"),
    ("oneDNN", lambda s, f: any("mkldnn" in x for x in f)),
]


def kind_of(size, path):
    f = path.split("<") + ["", "", ""]
    for k, test in CPU_ONLY:
        if test(size, f):
            return k
    return None


GEMM = {"aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm", "aten::addbmm", "aten::_addmm_activation"}


def within_op(lines):
    """Addresses (by line index of their allocation) freed before any allocation under another
    op path: scratch an op makes and frees itself, not its output."""
    live, out, path = {}, set(), ""
    for i, ln in enumerate(lines):
        p = ln.split()
        if len(p) >= 2 and p[0] == "#" and p[1] == "op":
            path = p[2] if len(p) > 2 else ""
            for a in [a for a, (_, q) in live.items() if q != path]:
                del live[a]   # another op allocates next: what is still live outlived its op
            continue
        if len(p) >= 3 and p[0] in ("a", "x"):
            live[p[1]] = (i, path)
        elif len(p) >= 2 and p[0] == "f" and p[1] in live:
            out.add(live.pop(p[1])[0])
    return out


def filtered(lines, step=2, only=None, forward=False):
    """The trace without its CPU-only allocations (only: of that kind alone; forward: and the
    forward's temporaries of at most 1 MiB, transients.py) and their frees; per kind,
    allocations in step `step`."""
    out, gone, per = [], set(), collections.Counter()
    path, cur = "", 0
    scratch = within_op(lines)
    life = transients.lifetimes(lines) if forward else {}
    for i, ln in enumerate(lines):
        p = ln.split()
        if len(p) >= 2 and p[0] == "#" and p[1] == "op":
            path = p[2] if len(p) > 2 else ""
            continue
        if len(p) >= 2 and p[0] == "m" and p[1].startswith("step"):
            cur = int(p[1][4:])
        if len(p) >= 3 and p[0] in ("a", "x"):
            k = kind_of(int(p[2]), path) or ("CPU GEMM scratch" if i in scratch and path.split("<")[0] in GEMM
                                               else None)
            if forward and not k and life.get(i) == ("forward", "forward") and int(p[2]) <= alloc_diff.SMALL:
                k = "forward temporary"
            if k and (only is None or k == only):
                gone.add(p[1])
                per[k] += cur == step
                continue
            gone.discard(p[1])
        elif len(p) >= 2 and p[0] in ("f", "r") and p[1] in gone:
            if p[0] == "f":
                gone.discard(p[1])
            continue
        out.append(ln)
    return out, per


def reserved(memplan, paths):
    return alloc_diff.max_reserved(memplan, paths, "cpu_only.py")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--memplan", default=os.path.join(alloc_diff.ROOT, "build", "memplan"))
    ap.add_argument("--ops-dir", required=True, metavar="DIR")
    ap.add_argument("rows", nargs="*")
    a = ap.parse_args()
    names = [os.path.basename(r)[:-5] if r.endswith(".json") else r for r in a.rows] or sorted(
        os.path.basename(t).split(".ops.txt")[0] for t in glob.glob(os.path.join(a.ops_dir, "*.ops.txt*")))
    print("| row | kept MiB | re-run MiB | re-run, CPU-only out MiB | planned MiB | err % kept | err % CPU-only out "
          "| err % CPU-only and forward temporaries out | CPU-only allocations a step |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---|")
    n = within = within_f = within_g = differ = moved = 0
    with tempfile.TemporaryDirectory() as d:
        for name in names:
            ops = next((p for p in (os.path.join(a.ops_dir, name + ".ops.txt" + z) for z in ("", ".gz"))
                        if os.path.exists(p)), None)
            kept = os.path.join(HERE, "results", "traces", name + ".txt.gz")
            js = os.path.join(HERE, "results", name + ".json")
            if not ops or not os.path.exists(kept) or not os.path.exists(js):
                print(f"| {name} | no {'re-run' if not ops else 'kept trace'} |")
                continue
            lines = alloc_diff.read(ops)
            out, per = filtered(lines)
            fpath, gpath = os.path.join(d, name + ".cpu_out.txt"), os.path.join(d, name + ".fwd_out.txt")
            with open(fpath, "w") as f:
                f.write("\n".join(out) + "\n")
            with open(gpath, "w") as f:
                f.write("\n".join(filtered(lines, forward=True)[0]) + "\n")
            plan = alloc_diff.planned_file(a.memplan, js, d)
            rk, rr, rf, rg, rp = reserved(a.memplan, [kept, ops, fpath, gpath, plan])
            ek, ef, eg = (100.0 * (x - rp) / rp for x in (rk, rf, rg))
            n += 1
            within += abs(ek) <= 3
            within_f += abs(ef) <= 3
            within_g += abs(eg) <= 3
            differ += rr != rk
            moved += rf != rr and rr == rk
            kinds = ", ".join(f"{k} {v}" for k, v in per.most_common()) or "-"
            if rf != rr:   # which kind alone moves it
                alone = []
                for k in per:
                    fk = os.path.join(d, name + ".alone.txt")
                    with open(fk, "w") as f:
                        f.write("\n".join(filtered(lines, only=k)[0]) + "\n")
                    if reserved(a.memplan, [fk])[0] != rr:
                        alone.append(k)
                kinds += f"; moved by {' or '.join(alone) if alone else 'no kind alone'}"
            M = 2 ** 20
            print(f"| {name} | {rk / M:,.2f} | {rr / M:,.2f}{'' if rr == rk else ' (differs)'} | {rf / M:,.2f} "
                  f"| {rp / M:,.2f} | {ek:+.2f} | {ef:+.2f} | {eg:+.2f} | {kinds} |")
    print()
    print(f"{n} rows: within 3 % {within} judged by the kept trace, {within_f} by the re-run without the "
          f"CPU-only allocations, {within_g} without them and the forward's temporaries of at most 1 MiB "
          f"(diagnostics, not the judged figure); {differ} re-runs reserve other than "
          f"the kept trace; of the others, {moved} move when the CPU-only allocations are taken out")
    return 0


if __name__ == "__main__":
    sys.exit(main())
