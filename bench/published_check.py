#!/usr/bin/env python3
"""published_check.py — memplan's simulated throughput against published GPU training runs, each
source held out of the fit that predicts it.

Each row of bench/published/*.json is a measurement printed in a framework's benchmark table or a
paper (its source: file and line, or table), with its exact setup: model, GPU, GPUs, strategy,
TP/PP, micro-batch, sequence, accumulation, precision, checkpointing and the published tokens/s
per GPU. Rows of one source (a publisher: llm-foundry, torchtitan, ...) may span several files.
For every source, bench/fit_time.py fits the time model's shares on all the other sources and
memplan predicts this source's runs with them (leave one source out). Per source the script prints
the held-out median |error| and, from the same runs, two baselines that use the same information
(the other sources' runs):

  nearest row: the MFU of the most similar run of the other sources (same GPU preset first, then
               generation; then model size, sequence, micro-batch tokens, checkpointing, TP/PP and
               GPU count, each as |log ratio| or a mismatch), applied to this run's model FLOPs;
  GPU MFU:     the median MFU of the other sources' runs on the same GPU preset (else generation,
               else all), applied likewise.

MFU here is tokens/s/GPU x memplan's model FLOPs per token (forward + backward, no recompute) over
the preset's dense peak. Rows a planner cannot reproduce (fp8, torch.compile, context parallel,
interleaved pipelines, ...) are listed as unusable with the reason.

  python3 bench/published_check.py [--memplan build/memplan] [--json=FILE] [--quiet] [--no-cache]
                                   [--shipped] [--rows N]

--shipped predicts every run with the shipped shares instead (no fit: in-sample, seconds);
--rows N keeps the first N usable runs of each source (a quick look).

Exit 0 when every source's held-out median is within --target (10 %), 1 otherwise, 2 on bad input.
Needs only the Python standard library.
"""
import argparse
import json
import math
import os
import statistics
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import fit_time  # noqa: E402

CKPT_CLASS = {"none": 0, "op": 1, "selective": 1, "full": 2}


def mfu(r, p, pred):
    """The run's MFU: published tokens/s/GPU x model FLOPs per token / the dense peak."""
    return r["tokens_per_s_per_gpu"] * flops_per_token(p) / peak(r, pred)


def flops_per_token(p):
    return p["flops_per_gpu"] / (p["tps"] * p["step_s"])


def peak(r, pred):
    g = pred.gpus[r["gpu"]]
    key = {"fp32": "peak_tflops_fp32"}.get(r["precision"], "peak_tflops_fp16" if "fp16" in r["precision"]
                                                      else "peak_tflops_bf16")
    return g[key] * 1e12


def distance(a, b, pa, pb, pred):
    """How unlike two runs' setups are (the nearest-row baseline's metric)."""
    d = 0.0
    if a["gpu"] != b["gpu"]:
        d += 1.0 if pred.generation(a) == pred.generation(b) else 4.0
    d += abs(math.log(pa["params"] / pb["params"]))
    d += abs(math.log(a["seq"] / b["seq"]))
    d += 0.5 * abs(math.log(a["batch"] * a["seq"] / (b["batch"] * b["seq"])))
    ca = CKPT_CLASS.get(a["act_ckpt"], 1)
    cb = CKPT_CLASS.get(b["act_ckpt"], 1)
    d += 0.5 * abs(ca - cb)
    d += 0.5 * abs(math.log(a.get("tp", 1) / b.get("tp", 1))) + 0.5 * abs(math.log(a.get("pp", 1) / b.get("pp", 1)))
    d += 0.25 * abs(math.log(a["gpus"] / b["gpus"]))
    return d


def baselines(rows, preds, others, opreds, pred):
    """Per held-out row: the nearest other run's MFU and the median MFU of the other runs on its
    GPU, each as tokens/s/GPU."""
    ok = [(r, p) for r, p in zip(others, opreds) if "error" not in p]
    near, gpu = [], []
    for r, p in zip(rows, preds):
        if "error" in p:
            near.append(None)
            gpu.append(None)
            continue
        best = min(ok, key=lambda rp: (distance(r, rp[0], p, rp[1], pred), rp[0]["id"]))
        m = mfu(best[0], best[1], pred)
        near.append(m * peak(r, pred) / flops_per_token(p))
        same = [mfu(o, q, pred) for o, q in ok if o["gpu"] == r["gpu"]] or \
               [mfu(o, q, pred) for o, q in ok if pred.generation(o) == pred.generation(r)] or \
               [mfu(o, q, pred) for o, q in ok]
        gpu.append(statistics.median(same) * peak(r, pred) / flops_per_token(p))
    return near, gpu


def pct(v, r):
    return 100.0 * (v - r["tokens_per_s_per_gpu"]) / r["tokens_per_s_per_gpu"]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--memplan", default=os.path.join(fit_time.ROOT, "build", "memplan"))
    ap.add_argument("--tables", default=os.path.join(HERE, "published"))
    ap.add_argument("--target", type=float, default=10.0, help="each source's held-out median error to pass, %% (10)")
    ap.add_argument("--json", dest="json_path", default=None, help="also write the table as JSON to FILE")
    ap.add_argument("--quiet", action="store_true", help="the per-source table only")
    ap.add_argument("--no-cache", action="store_true", help="do not read or write build/fit-time-cache.json")
    ap.add_argument("--shipped", action="store_true", help="the shipped shares for every run: no fit, not held out")
    ap.add_argument("--rows", type=int, default=0, help="only the first N usable runs of each source (0 = all)")
    a = ap.parse_args()
    log = (lambda s: None) if a.quiet else print
    try:
        pred, sources, full, loso = fit_time.run_fit(a.memplan, a.tables, not a.no_cache, log, shipped=a.shipped,
                                                     rows=a.rows)
    except (ValueError, OSError, json.JSONDecodeError, subprocess.CalledProcessError) as e:
        print(f"published_check: {e}", file=sys.stderr)
        return 2
    fitted = [s for s in sources if fit_time.usable(s["rows"])]
    table, records, overall, failed = [], [], [], 0
    for s in fitted:
        res = loso[s["name"]]
        others = [r for o in fitted if o is not s for r in fit_time.usable(o["rows"])]
        opreds = pred.predict(others, res["shares"])
        near, gpu = baselines(res["rows"], res["pred"], others, opreds, pred)
        errs, ne, ge, bias, exposed = [], [], [], [], []
        for r, p, n, g in zip(res["rows"], res["pred"], near, gpu):
            rec = {"id": r["id"], "source": s["name"], "file": r["file"], "where": r["_where"],
                   "table": r.get("table"), "published": r["tokens_per_s_per_gpu"]}
            if "error" in p:
                failed += 1
                rec["failed"] = p["error"]
            else:
                e = pct(p["tps"], r)
                rec.update(predicted=p["tps"], error_pct=e, nearest_row_pct=pct(n, r), gpu_mfu_pct=pct(g, r),
                           exposed_comm_share=p["exposed_s"] / p["step_s"])
                errs.append(abs(e))
                bias.append(e)
                ne.append(abs(pct(n, r)))
                ge.append(abs(pct(g, r)))
                exposed.append(p["exposed_s"] / p["step_s"])
            records.append(rec)
        overall += errs
        table.append({"name": s["name"], "rows": len(res["rows"]), "held_out_median_pct": fit_time.median(errs),
                      "nearest_row_baseline_pct": fit_time.median(ne), "gpu_mfu_baseline_pct": fit_time.median(ge),
                      "signed_median_pct": fit_time.median(bias), "exposed_comm_median": fit_time.median(exposed),
                      "shares": res["shares"]})
    if not a.quiet:
        print(f"{'row':<52} {'published':>10} {'predicted':>10} {'error':>7} {'nearest':>8} {'gpu-mfu':>8}  source")
        print(f"{'-':<52} {'tok/s/GPU':>10} {'tok/s/GPU':>10} {'%':>7} {'%':>8} {'%':>8}  -")
        for rec in records:
            where = rec["where"]
            if "failed" in rec:
                print(f"{rec['id']:<52} {rec['published']:>10.0f} {'-':>10} {'-':>7} {'-':>8} {'-':>8}  memplan: {rec['failed']}")
            else:
                print(f"{rec['id']:<52} {rec['published']:>10.0f} {rec['predicted']:>10.0f} {rec['error_pct']:>+7.1f} "
                      f"{rec['nearest_row_pct']:>+8.1f} {rec['gpu_mfu_pct']:>+8.1f}  {where}")
        for s in sources:
            for r in s["rows"]:
                if r.get("use") == "unusable":
                    print(f"{r['id']:<52} {r['tokens_per_s_per_gpu']:>10.0f} {'unusable':>10}  {r.get('why', '')}")
    unusable = 0
    for s in sources:
        for r in s["rows"]:
            if r.get("use") == "unusable":
                unusable += 1
                records.append({"id": r["id"], "source": s["name"], "file": r["file"], "where": r["_where"],
                                "use": "unusable", "why": r.get("why", ""), "published": r["tokens_per_s_per_gpu"]})
    print("# the shipped shares for every run (--shipped: in-sample, not held out); median |error| of tokens/s per GPU, %"
          if a.shipped else "# each source held out of the fit that predicts it; median |error| of tokens/s per GPU, %")
    print(f"{'source':<14} {'runs':>5} {'in-sample' if a.shipped else 'held-out':>9} {'nearest':>8} {'gpu-mfu':>8} "
          f"{'signed':>7} {'exposed':>8}  {'shares' if a.shipped else 'shares fitted without it'}")
    print(f"{'-':<14} {'-':>5} {'%':>9} {'%':>8} {'%':>8} {'%':>7} {'of step':>8}  -")
    for t in table:
        print(f"{t['name']:<14} {t['rows']:>5} {t['held_out_median_pct']:>9.1f} {t['nearest_row_baseline_pct']:>8.1f} "
              f"{t['gpu_mfu_baseline_pct']:>8.1f} {t['signed_median_pct']:>+7.1f} {t['exposed_comm_median']:>8.2f}  "
              f"{fit_time.fmt_shares(t['shares'])}")
    om = fit_time.median(overall)
    print(f"# overall: {len(overall)} runs from {len(table)} sources, {'in-sample' if a.shipped else 'held-out'} "
          f"median |error| {om:.1f} % "
          f"(target {a.target:.0f} % per source); {unusable} unusable runs listed, {failed} failed")
    print(f"# shares {'shipped' if a.shipped else 'fitted on all sources (shipped in planner/plan_shares.h)'}: "
          f"{fit_time.fmt_shares(full)}")
    if a.json_path:
        doc = {"held_out": not a.shipped, "sources": [{k: t[k] for k in ("name", "rows", "held_out_median_pct", "nearest_row_baseline_pct",
                                               "gpu_mfu_baseline_pct")} for t in table],
               "overall_median_pct": om, "rows": records, "shares": full}
        with open(a.json_path, "w") as f:
            json.dump(doc, f, indent=1)
    if failed:
        return 1
    return 0 if all(t["held_out_median_pct"] <= a.target for t in table) else 1


if __name__ == "__main__":
    sys.exit(main())
