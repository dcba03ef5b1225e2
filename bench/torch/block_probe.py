#!/usr/bin/env python3
"""block_probe.py — what one transformer block costs per token: the bytes its forward saves for
backward and the working set of its backward, measured on CPU with real PyTorch, for the figures
in docs/formulas.md ("Activations", "A block's backward").

    PY=$(scripts/torch_env.sh --print)
    flock /tmp/memplan-cpu.lock $PY bench/torch/block_probe.py --model gpt2-mini \
        --precision amp-bf16 --attn sdpa --dropout 0.1

How it measures (one process, one thread, no process group):

* The model is built as the harness builds it (bench/torch/models.py), trained for two
  iterations (forward, loss, backward; the gradients dropped between them) at each micro-batch
  of --batches; the second iteration is measured.
* Live bytes: every allocation and free of c10's CPU allocator, from torch.profiler with
  profile_memory=True and c10's FLAGS_caffe2_report_cpu_memory_usage (the harness's method,
  measure.py), so the figure is the allocator's own running total.
* Markers: zero-length record_function ranges from hooks.  A block's forward runs between its
  forward pre-hook and forward hook; its backward starts when the gradient of its output is
  complete (a hook on the output tensor) and ends when the gradient of its input is (a hook on
  the input tensor: the residual stream feeds ln_1 and the residual add, so it completes last).
* Saved tensors: torch.autograd.graph.saved_tensors_hooks while the block's forward runs
  (parameters and storages seen before are left out; under checkpointing the checkpoint's own
  hooks take over, and the retained bytes below are the figure).
* Per token: the slope between two micro-batches, divided by the sequence length.  Everything
  that does not grow with the batch (parameters, their gradients, autocast's weight casts) drops
  out of the slope; s² terms show up as per-token bytes at this sequence length.

Printed: the measured iteration's peak above the live bytes at its start (per token: what the
planner's activations, transients and activation gradients at its peak moment add per token),
and where it is; per block, saved (hooks) and retained (live bytes after the block's forward
minus before, minus its output) in forward; in backward the peak above the live bytes at its
start (the working set, at the larger batch's peak and the same op's same occurrence in the smaller
batch's backward), the part of it that does
not grow with the batch (weight gradients, casts), where the peak is (the autograd node and op
that allocated last), the bytes left above the start at its end, and the allocations made since
the start and live at the peak (per token).  --json writes the same figures.
"""
import argparse
import collections
import contextlib
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

_ALLOC_OPS = {"aten::empty", "aten::empty_strided", "aten::empty_like", "aten::zeros",
              "aten::zeros_like", "aten::new_empty", "aten::new_empty_strided", "aten::new_zeros",
              "aten::resize_", "aten::full", "aten::ones_like", "aten::clone", "aten::contiguous",
              "aten::_to_copy", "aten::to", "aten::copy_"}


def parse_args(argv):
    p = argparse.ArgumentParser(prog="block_probe.py", description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default="gpt2-mini", help="zoo name or config.json (as the harness)")
    p.add_argument("--precision", default="fp32", choices=("fp32", "amp-bf16", "bf16"),
                   help="bf16: the model cast to bfloat16 (pure bf16, no autocast)")
    p.add_argument("--attn", default="eager", choices=("eager", "sdpa"))
    p.add_argument("--dropout", type=float, default=0.0)
    p.add_argument("--act-ckpt", default="none", choices=("none", "full"))
    p.add_argument("--seq", type=int, default=None)
    p.add_argument("--batches", default="2,4", help="two micro-batches for the slope")
    p.add_argument("--blocks", default="all", help="block indices (comma list) or all")
    p.add_argument("--top", type=int, default=8, help="allocations listed at each backward peak")
    p.add_argument("--no-saved", action="store_true",
                   help="skip the saved-tensor hooks (fwd saved is then 0; checks they change nothing)")
    p.add_argument("--route-first", action="store_true",
                   help="MoE: every token routed to experts 0..k-1 (the routers' top-k indices replaced by "
                        "a forward hook): the most unbalanced routing, against the model's own")
    p.add_argument("--json", default=None)
    a = p.parse_args(argv)
    try:
        a.batch_list = [int(x) for x in a.batches.split(",")]
    except ValueError:
        p.error(f"--batches {a.batches}: two integers >= 1, e.g. 2,4")
    if len(a.batch_list) != 2 or min(a.batch_list) < 1 or a.batch_list[0] == a.batch_list[1]:
        p.error(f"--batches {a.batches}: two different integers >= 1, e.g. 2,4")
    if not 0.0 <= a.dropout < 1.0:
        p.error(f"--dropout {a.dropout}: must be in [0, 1)")
    if a.seq is not None and a.seq < 1:
        p.error(f"--seq {a.seq}: must be >= 1")
    return a


def _op_chain(ev):
    """What made an allocation: the autograd node running it (in backward), its first ancestor
    op that is not a plain allocation (aten::mul rather than the aten::empty it called), and
    the innermost module range (forward or recomputation)."""
    op, node, module, p = None, None, None, ev.parent
    while p is not None:
        n = p.name
        if op is None and n.startswith("aten::") and n not in _ALLOC_OPS:
            op = n
        if node is None and n.startswith("autograd::engine::evaluate_function"):
            node = n.split(": ", 1)[-1]
        if n.startswith("memplan::module::") and module is None:
            module = n[len("memplan::module::"):]
        p = p.parent
    first = ev.parent.name if ev.parent is not None else "?"
    what = op or first
    return (f"{node} / {what}" if node else what), module or ""


def _route_first(model):
    """Every MoE router (transformers 5.24's *TopKRouter: forward returns (logits, top-k weights,
    top-k indices)) made to send each token to experts 0..k-1; the weights are kept, so only the
    assignment changes.  Raises if the model has no such router."""
    import torch

    def hook(mod, args, out):
        logits, weights, idx = out
        forced = torch.arange(idx.shape[-1], dtype=idx.dtype).expand_as(idx).contiguous()
        return logits, weights, forced

    n = 0
    for mod in model.modules():
        if type(mod).__name__.endswith("TopKRouter"):
            mod.register_forward_hook(hook)
            n += 1
    if not n:
        raise SystemExit("block_probe.py: --route-first: the model has no *TopKRouter module")


def run_once(a, batch):
    import torch
    import models
    import measure
    import harness

    torch.manual_seed(1234)
    spec = models.build(a.model, a.attn, a.dropout)
    if a.precision == "bf16":
        spec.model = spec.model.to(torch.bfloat16)
    model = spec.model
    model.train()
    seq = a.seq if a.seq is not None else spec.context
    if a.act_ckpt == "full":
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    blocks = spec.block_modules()
    want = range(len(blocks)) if a.blocks == "all" else [int(x) for x in a.blocks.split(",")]
    harness.add_module_markers(model)
    if a.route_first:
        _route_first(model)
    params = {p.untyped_storage().data_ptr() for p in model.parameters()}

    state = {"iter": 0, "saved": collections.defaultdict(dict), "active": None, "out": {}}

    def marker(name):
        with harness.rf(f"memplan::probe::{state['iter']}::{name}"):
            pass

    def pack(t):
        k = state["active"]
        if k is not None and isinstance(t, torch.Tensor) and t.device.type == "cpu":
            try:
                st = t.untyped_storage()
                ptr, nb = st.data_ptr(), st.nbytes()
            except (RuntimeError, NotImplementedError):
                return t
            if ptr and ptr not in params and ptr not in state["seen"]:
                fn = t.grad_fn.name() if t.grad_fn is not None else "leaf/none"
                state["saved"][(state["iter"], k)][ptr] = (nb, str(t.dtype).replace("torch.", ""),
                                                           tuple(t.shape), fn)
        return t

    def unpack(t):
        return t

    for k, blk in enumerate(blocks):
        if k not in want:
            continue

        def pre(mod, args, kwargs, _k=k):
            x = args[0] if args else kwargs.get("hidden_states")
            marker(f"fwd_start::{_k}")
            state["active"] = _k
            state["seen"] = set()
            if isinstance(x, torch.Tensor):
                # storages alive before the block (its input) are not the block's own saves
                state["seen"].add(x.untyped_storage().data_ptr())
                if x.requires_grad:
                    x.register_hook(lambda g, _k=_k: marker(f"bwd_end::{_k}"))

        def post(mod, args, kwargs, out, _k=k):
            state["active"] = None
            y = out[0] if isinstance(out, (tuple, list)) else out
            if isinstance(y, torch.Tensor):
                state["out"][_k] = y.untyped_storage().nbytes()
                if y.requires_grad:
                    y.register_hook(lambda g, _k=_k: marker(f"bwd_start::{_k}"))
            marker(f"fwd_end::{_k}")

        blk.register_forward_pre_hook(pre, with_kwargs=True)
        blk.register_forward_hook(post, with_kwargs=True)

    base = models.make_batch(spec, batch, seq, 1235)
    headless = spec.kind != "image" and getattr(model, "get_output_embeddings", lambda: None)() is None
    if headless:
        # a base class (GPT2Model, LlamaModel): no labels, no loss; train on the sum of its last
        # hidden state (whose backward allocates nothing: an expanded scalar)
        base.pop("labels", None)
    amp = (torch.autocast("cpu", dtype=torch.bfloat16) if a.precision == "amp-bf16"
           else contextlib.nullcontext())
    from torch.profiler import profile, ProfilerActivity
    torch.set_num_threads(1)
    prof = profile(activities=[ProfilerActivity.CPU], profile_memory=True, record_shapes=False)
    exact = harness._report_all_frees()
    prof.start()
    hooks = (contextlib.nullcontext() if a.no_saved
             else torch.autograd.graph.saved_tensors_hooks(pack, unpack))
    with hooks:
        for it in (1, 2):
            state["iter"] = it
            with harness.rf(f"memplan::probe::iter{it}"):
                batch_t = {k: v.clone() for k, v in base.items()}
                with harness.rf("memplan::phase::forward"), amp:
                    out = models.forward(spec, model, batch_t)
                    loss = out[0].sum() if headless else out.loss
                out = None
                del batch_t
                with harness.rf("memplan::phase::backward"):
                    loss.backward()
                loss = None
                for p in model.parameters():
                    p.grad = None
    prof.stop()
    tr = measure.Trace(prof)
    series = tr.true if exact else tr.total
    import bisect

    def live_at(name):
        m = tr.marker(f"memplan::probe::2::{name}")
        if m is None:
            return None, None
        i = bisect.bisect_right(tr.times, m[0]) - 1
        return (series[i] if i >= 0 else 0), m[0]

    it2 = tr.marker("memplan::probe::iter2")
    i0 = bisect.bisect_left(tr.times, it2[0])
    i1 = bisect.bisect_right(tr.times, it2[1])
    # the step's peak above the live bytes at its start (the allocator's running total is
    # process-wide: a later run's total also holds what was built after an earlier run began)
    ip = max(range(i0, i1), key=series.__getitem__) if i1 > i0 else i0
    step_peak = series[ip] - (series[i0 - 1] if i0 > 0 else 0) if i1 > i0 else 0
    pa = tr.event_alloc[ip] if i1 > i0 else None
    phase = tr.context(pa.ev)[0] if pa is not None else None
    where = _op_chain(pa.ev) if pa is not None else ("a free", "")
    res = {"batch": batch, "seq": seq, "exact_total": exact, "step_peak": step_peak,
           "step_peak_at": f"{phase or '?'}: {where[0]} in {where[1] or '-'}", "blocks": {}}
    for k in want:
        f0, tf0 = live_at(f"fwd_start::{k}")
        f1, _ = live_at(f"fwd_end::{k}")
        b0, tb0 = live_at(f"bwd_start::{k}")
        b1, tb1 = live_at(f"bwd_end::{k}")
        saved = state["saved"].get((2, k), {})
        r = {"fwd_retained": (f1 - f0 - state["out"].get(k, 0)) if f0 is not None else None,
             "fwd_saved": sum(v[0] for v in saved.values()),
             "saved_list": sorted(({"bytes": v[0], "dtype": v[1], "shape": list(v[2]), "grad_fn": v[3]}
                                   for v in saved.values()), key=lambda d: -d["bytes"])}
        if b0 is not None and b1 is not None:
            j0 = bisect.bisect_right(tr.times, tb0)
            j1 = bisect.bisect_right(tr.times, tb1)
            # the backward's allocator events in order: the same op sequence at every batch, so
            # the two batches are compared at the same event (ordinal), not at their own peaks
            r.update({"bwd_start_live": b0, "bwd_end_above_start": b1 - b0,
                      "bwd_series": [series[j] - b0 for j in range(j0, j1)],
                      "bwd_window": (j0, j1)})
            r["_tr"] = tr
        res["blocks"][k] = r
    return res


def _labels(r):
    """What made each allocator event of a block's backward ('free' for frees)."""
    tr = r["_tr"]
    w0, w1 = r["bwd_window"]
    out = []
    for i in range(w0, w1):
        al = tr.event_alloc[i]
        out.append(_op_chain(al.ev)[0] if al is not None else "free")
    return out


def main(argv):
    a = parse_args(argv)
    b1, b2 = a.batch_list
    runs = [run_once(a, b) for b in (b1, b2)]
    seq = runs[0]["seq"]
    per_tok = lambda x, y: (y - x) / (b2 - b1) / seq   # noqa: E731
    print(f"# block_probe: {a.model}, {a.precision}, attn {a.attn}, dropout {a.dropout:g}, "
          f"act-ckpt {a.act_ckpt}{', every token routed to experts 0..k-1' if a.route_first else ''}, seq {seq}, slope over micro-batch {b1} and {b2}; "
          f"bytes per token (per sample / seq)")
    print(f"# allocator totals exact: {runs[0]['exact_total']}; step peak above its start {runs[0]['step_peak']:,} / "
          f"{runs[1]['step_peak']:,} B -> {per_tok(runs[0]['step_peak'], runs[1]['step_peak']):,.1f} B/token, "
          f"at {runs[1]['step_peak_at']}")
    out = {"setup": {"model": a.model, "precision": a.precision, "attn": a.attn, "dropout": a.dropout,
                     "act_ckpt": a.act_ckpt, "route_first": a.route_first, "seq": seq, "batches": [b1, b2]},
           "step_peak_per_token": per_tok(runs[0]["step_peak"], runs[1]["step_peak"]), "blocks": {}}
    print("block | fwd saved | fwd retained | bwd working set (peak above start) | at that moment, "
          "not growing with the batch | left at end | peak at")
    for k in runs[0]["blocks"]:
        r1, r2 = runs[0]["blocks"][k], runs[1]["blocks"][k]
        row = {"fwd_saved": per_tok(r1["fwd_saved"], r2["fwd_saved"])}
        if r1["fwd_retained"] is not None:
            row["fwd_retained"] = per_tok(r1["fwd_retained"], r2["fwd_retained"])
        if "bwd_series" in r1 and "bwd_series" in r2:
            s1, s2 = r1["bwd_series"], r2["bwd_series"]
            # the peak of the larger batch's backward, and the same event of the smaller one:
            # the same op (autograd node / aten op) at the same occurrence (CPU GEMMs make
            # temporaries whose count varies with the batch, so plain event indices differ)
            j = max(range(len(s2)), key=s2.__getitem__) if s2 else 0
            lab2, lab1 = _labels(r2), _labels(r1)
            want_lab = lab2[j] if lab2 else None
            occ = lab2[:j].count(want_lab)
            hits = [i for i, x in enumerate(lab1) if x == want_lab]
            if want_lab is not None and len(hits) > occ:
                j1 = hits[occ]
            else:
                print(f"# block {k}: no event in the smaller batch matches the peak ({want_lab}); "
                      "compared at its own peak", file=sys.stderr)
                j1 = max(range(len(s1)), key=s1.__getitem__) if s1 else 0
            row["bwd_working_set"] = per_tok(s1[j1] if s1 else 0, s2[j] if s2 else 0)
            row["bwd_fixed_at_peak"] = (s1[j1] if s1 else 0) - row["bwd_working_set"] * b1 * seq
            row["bwd_end_above_start"] = per_tok(r1["bwd_end_above_start"], r2["bwd_end_above_start"])
            made = []
            for r, jj in ((r1, j1), (r2, j)):
                tr = r["_tr"]
                w0, w1 = r["bwd_window"]
                idx = min(w0 + jj, w1 - 1) if w1 > w0 else w0
                tp, tb0 = tr.times[idx], tr.times[w0] if w0 < len(tr.times) else 0
                pa = tr.event_alloc[idx]
                where = _op_chain(pa.ev) if pa is not None else ("a free", "")
                c = collections.Counter()
                for al in tr.allocs:
                    if tb0 <= al.t0 <= tp and (al.t1 is None or tp < al.t1):
                        c[_op_chain(al.ev)] += al.size
                made.append((c, where))
            row["bwd_peak_at"] = f"{made[1][1][0]} in {made[1][1][1] or '?'}"
            keys = set(made[0][0]) | set(made[1][0])
            row["bwd_made_at_peak"] = sorted(
                ({"op": op, "module": mod, "per_token": per_tok(made[0][0].get((op, mod), 0),
                                                                made[1][0].get((op, mod), 0))}
                 for op, mod in keys), key=lambda e: -abs(e["per_token"]))
        row["saved_at_b2"] = r2["saved_list"]
        out["blocks"][k] = row
        print(f"{k} | {row['fwd_saved']:,.1f} | {row.get('fwd_retained', float('nan')):,.1f} | "
              f"{row.get('bwd_working_set', float('nan')):,.1f} | "
              f"{row.get('bwd_fixed_at_peak', float('nan')):,.0f} B | "
              f"{row.get('bwd_end_above_start', float('nan')):,.1f} | {row.get('bwd_peak_at', '-')}")
        for e in row.get("bwd_made_at_peak", [])[:a.top]:
            if abs(e["per_token"]) >= 0.5:
                print(f"#   block {k} backward, made since its start and live at its peak: "
                      f"{e['per_token']:,.1f} B/token  {e['op']}  ({e['module'] or '-'})")
        if k == next(iter(runs[0]["blocks"])):
            for e in row["saved_at_b2"][:a.top * 2]:
                print(f"#   block {k} forward saves (micro-batch {b2}): {e['bytes']:,} B "
                      f"{e['dtype']} {e['shape']} from {e['grad_fn']}")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(out, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
