#!/usr/bin/env python3
"""fit_time.py — fits the time model's shares on the published GPU runs and checks them on runs it
did not see (leave one source out).

The per-operation time model (planner/plan_cost.c) prices GEMMs at a share of the GPU
generation's measured GEMM rate, flash attention at a share of its benchmark rate, and the
elementwise passes at a multiple of one pass per op. Those shares are fitted here on the runs of
bench/published/*.json, by running `memplan --json --time-shares ...` on every run:

  * all sources: the shipped shares, written to planner/plan_shares.h;
  * every source but one, checked on the one left out: its held-out median |error|, written with
    the setups its runs span to planner/plan_time_sources.h (what a plan's time line cites).

The fit minimises, over the sources it fits on, the mean of each source's median |error|, each
capped at 25 % (sources weigh the same, whatever their number of runs; a source the model misses
by more, through a mechanism it lacks, does not set the others' shares), by coordinate descent
from the best point of a coarse grid (COARSE_GRID: GEMM 0.7-1.0, attention 0.3-1.3, passes 1-8):
GEMM shares in steps of 0.01, attention 0.05, passes 0.25, a pass at 4x the steps first. Nothing
depends on the shipped shares, so a refit reproduces them.

  python3 bench/fit_time.py [--memplan build/memplan] [--check] [--write] [--flatness] [--score NAME:SHARES]

Without --write it prints the fitted shares next to the shipped ones and exits 1 when they differ
(`make fit-time`); --write rewrites the two headers. --flatness prints, per fold, the objective at
its own point, at the all-source point and at the --score points, with the held-out source's error
at each, and the objective one fine step either side of its own point (how flat the fit's minimum
is). Needs only the Python standard library. bench/published_check.py imports it for its table.
"""
import argparse
import concurrent.futures
import glob
import hashlib
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
SHARES_H = os.path.join(ROOT, "planner", "plan_shares.h")
SOURCES_H = os.path.join(ROOT, "planner", "plan_time_sources.h")
CACHE = os.path.join(ROOT, "build", "fit-time-cache.json")

# The shares and their grids: (low, high, fine step). GEMM shares are per GPU generation.
# The attention share is capped where the fastest flash-attention point of the measured curves
# (A100 forward: 73 % of the peak) would reach the peak: 1/0.73.
GRID = {"gemm": (0.40, 1.00, 0.01), "attn": (0.20, 1.35, 0.05), "passes": (0.50, 8.00, 0.25)}
# Every fit first scores this coarse grid (one GEMM share for all generations) and descends from
# its best point, so a refit does not depend on the last fit and a left-out source on nothing of
# its own.
COARSE_GRID = {"gemm": (0.70, 0.80, 0.90, 1.00), "attn": (0.30, 0.50, 0.75, 1.00, 1.30),
               "passes": (1.0, 2.0, 3.0, 4.0, 6.0, 8.0)}
COARSE = 4

# Row keys that become memplan flags when present (the required ones are in plan_args).
OPTIONAL_FLAGS = (("fsdp", "--fsdp"), ("fsdp_reduce_dtype", "--fsdp-reduce-dtype"), ("tp", "--tp"),
                  ("sp", "--sp"), ("loss_parallel", "--loss-parallel"), ("pp", "--pp"), ("pp_schedule", "--pp-schedule"),
                  ("microbatches", "--microbatches"), ("inter_bw", "--inter-bw"), ("nics", "--nics"), ("intra_bw", "--intra-bw"),
                  ("optimizer", "--optimizer"), ("fsdp_backward_prefetch", "--fsdp-backward-prefetch"),
                  ("fsdp_grad_sync", "--fsdp-grad-sync"), ("dropout", "--dropout"), ("offload", "--offload"),
                  ("ds_reduce_bucket", "--ds-reduce-bucket"), ("ds3_prefetch", "--ds3-prefetch"),
                  ("ds_overlap_comm", "--ds-overlap-comm"), ("attn_kernel", "--attn-kernel"),
                  ("zero_param_sync", "--zero-param-sync"), ("zero_group", "--zero-group"))


# ---- the corpus ----

def load_corpus(folder):
    """Every table file, grouped by its source's name: [{name, docs: [file docs], rows: [...]}].
    Each row gets its file and its source's name; unusable rows keep use = 'unusable'."""
    by_name = {}
    for path in sorted(glob.glob(os.path.join(folder, "*.json"))):
        with open(path) as f:
            doc = json.load(f)
        for key in ("source", "models", "rows"):
            if key not in doc:
                raise ValueError(f"{path}: no '{key}'")
        name = doc["source"].get("name")
        if not name:
            raise ValueError(f"{path}: source has no 'name'")
        src = by_name.setdefault(name, {"name": name, "docs": [], "rows": []})
        src["docs"].append(doc)
        for r in doc["rows"]:
            r["file"] = os.path.relpath(path, ROOT)
            r["source"] = name
            r["_where"] = f'{r.get("file_ref") or doc["source"]["file"]}:{r.get("line", "")}'   # the source's file and line
            use = r.get("use", "fit")
            if use not in ("fit", "unusable"):
                raise ValueError(f"{path}: row {r.get('id')}: use '{use}' is not fit or unusable")
            if use != "unusable" and r["model"] not in doc["models"]:
                raise ValueError(f"{path}: row {r['id']}: model '{r['model']}' is not in 'models'")
            r["_model"] = doc["models"].get(r["model"])
            src["rows"].append(r)
    ids = [r["id"] for s in by_name.values() for r in s["rows"]]
    dup = {i for i in ids if ids.count(i) > 1}
    if dup:
        raise ValueError(f"duplicate row ids: {sorted(dup)}")
    return [by_name[k] for k in sorted(by_name)]


def usable(rows):
    return [r for r in rows if r.get("use", "fit") != "unusable"]


def model_config(spec, seq):
    """--model for a row's model: a zoo name, a Hugging Face config.json in the repository, or the
    GPT-2 layout from its dimensions (learned positions as long as the sequence) in a temporary
    config.json."""
    if "zoo" in spec:
        return spec["zoo"], False
    if "hf_config" in spec:
        return os.path.join(ROOT, spec["hf_config"]), False
    cfg = {"model_type": "gpt2", "architectures": ["GPT2LMHeadModel"], "activation_function": "gelu",
           "n_embd": spec["d_model"], "n_layer": spec["n_layers"], "n_head": spec["n_heads"],
           "vocab_size": spec["vocab"], "n_positions": seq, "n_ctx": seq, "tie_word_embeddings": True}
    fd, path = tempfile.mkstemp(suffix=".json", prefix="memplan-published-")
    with os.fdopen(fd, "w") as f:
        json.dump(cfg, f)
    return path, True


def plan_args(r):
    """The row's setup as memplan flags (--model excluded)."""
    args = ["--gpu", r["gpu"], "--gpus", str(r["gpus"]), "--gpus-per-node", str(r["gpus_per_node"]),
            "--strategy", r["strategy"], "--precision", r["precision"], "--batch", str(r["batch"]),
            "--seq", str(r["seq"]), "--act-ckpt", r["act_ckpt"], "--attn", r["attn"]]
    if "pp" not in r:
        args += ["--grad-accum", str(r.get("grad_accum", 1))]
    for key, flag in OPTIONAL_FLAGS:
        if key in r:
            args += [flag, str(r[key])]
    return args


# ---- running memplan ----

class Predictor:
    """memplan --json on a row with given shares, memoised in memory and in build/ (keyed by the
    binary's hash, so a rebuilt planner starts afresh)."""

    def __init__(self, memplan, use_cache=True):
        self.memplan = memplan
        with open(memplan, "rb") as f:
            self.tag = hashlib.sha1(f.read()).hexdigest()[:16]
        self.memo, self.dirty = {}, False
        self.use_cache = use_cache
        if use_cache and os.path.exists(CACHE):
            try:
                with open(CACHE) as f:
                    doc = json.load(f)
                if doc.get("tag") == self.tag:
                    self.memo = doc["memo"]
            except (OSError, ValueError, KeyError):
                self.memo = {}
        self.gpus = {g["name"]: g for g in json.loads(subprocess.run(
            [memplan, "gpus", "--json"], capture_output=True, text=True, check=True).stdout)}

    def save(self):
        if self.use_cache and self.dirty:
            os.makedirs(os.path.dirname(CACHE), exist_ok=True)
            with open(CACHE, "w") as f:
                json.dump({"tag": self.tag, "memo": self.memo}, f)
            self.dirty = False

    def generation(self, r):
        """The row's GPU generation, whose GEMM share prices it; presets without measured figures
        take Ampere's share (plan_gpu.c EFF_ASSUMED)."""
        g = self.gpus[r["gpu"]]["achieved"]["generation"]
        return "ampere" if g == "assumed" else g

    def generations(self):
        return sorted({g["achieved"]["generation"] for g in self.gpus.values()} - {"assumed"})

    def kernels(self):
        """The flash kernels memplan prices (--attn-kernel), each with its own attention share."""
        return sorted(next(iter(g["achieved"]["attn_shares"] for g in self.gpus.values() if "achieved" in g)))

    def key(self, r, shares):
        g = shares["gemm"].get(self.generation(r)) if shares else None
        a = shares["attn"].get(kernel(r)) if shares else None
        p = shares["passes"] if shares else None
        return json.dumps([r["id"], r.get("model"), plan_args(r), g, a, p])   # a row's setup edited: run again

    def run(self, r, shares):
        cfg, temp = model_config(r["_model"], r["seq"])
        args = [self.memplan, "--model", cfg] + plan_args(r) + ["--alloc-margin", "flat", "--json"]
        if shares:
            args += ["--time-shares", "gemm=%.4f,attn=%.4f,passes=%.4f" % (
                shares["gemm"][self.generation(r)], shares["attn"][kernel(r)], shares["passes"])]
        try:
            p = subprocess.run(args, capture_output=True, text=True, cwd=ROOT)
        finally:
            if temp:
                os.unlink(cfg)
        if p.returncode != 0:
            err = p.stderr.strip().splitlines()
            return {"error": err[-1] if err else f"exit {p.returncode}"}
        d = json.loads(p.stdout)
        t = d["strategies"][0]["time"]
        return {"tps": t["tokens_per_s_per_gpu"], "step_s": t["step_s"], "compute_s": t["compute_s"],
                "comm_s": t["comm_s"], "exposed_s": t["exposed_comm_s"], "flops_per_gpu": t["flops_per_gpu"],
                "basis": t.get("basis"), "params": d["model"].get("params")}

    def predict(self, rows, shares):
        """Predictions for rows (dicts as run returns) with shares (None: the shipped ones)."""
        todo = [r for r in rows if self.key(r, shares) not in self.memo]
        if todo:
            with concurrent.futures.ThreadPoolExecutor(max_workers=os.cpu_count() or 2) as ex:
                for r, p in zip(todo, ex.map(lambda x: self.run(x, shares), todo)):
                    self.memo[self.key(r, shares)] = p
            self.dirty = True
        return [self.memo[self.key(r, shares)] for r in rows]


def kernel(r):
    """The flash kernel whose attention share prices the row (eager rows use none: fa2's key)."""
    return r.get("attn_kernel", "fa2") if r["attn"] == "sdpa" else "fa2"


def error_pct(pred, r):
    return 100.0 * (pred["tps"] - r["tokens_per_s_per_gpu"]) / r["tokens_per_s_per_gpu"]


def median(v):
    return statistics.median(v) if v else float("nan")


# ---- the fit ----

# A source's (and a run's) |error| counts at most this much in the fit: a source the model misses
# by more, through a mechanism it lacks, then does not set the shares of every other source.
CAP = 25.0


def score(pred, sources, shares):
    """Mean over the sources of each one's median |error|, capped at CAP (a run memplan refuses
    counts CAP), and a tie-break of 1/1000 of the mean capped |error|, which the medians' flat steps
    leave undecided."""
    meds, means = [], []
    for s in sources:
        rows = usable(s["rows"])
        errs = [min(abs(error_pct(p, r)), CAP) if "error" not in p else CAP
                for p, r in zip(pred.predict(rows, shares), rows)]
        meds.append(median(errs))
        means.append(statistics.fmean(errs))
    return statistics.fmean(meds) + 1e-3 * statistics.fmean(means)


def shipped_shares(pred):
    """The shares the planner was built with: GEMM (per generation) and attention (per flash
    kernel) from memplan gpus --json, the passes from plan_shares.h."""
    gemm = {}
    attn = None
    for g in pred.gpus.values():
        a = g.get("achieved")
        if a and a["generation"] != "assumed":
            gemm[a["generation"]] = a["gemm_share"]
            attn = dict(a["attn_shares"])
    with open(SHARES_H) as f:
        passes = float(re.search(r"#define PLAN_SHARE_PASSES ([0-9.]+)", f.read()).group(1))
    return {"gemm": gemm, "attn": attn, "passes": passes}


def snap(v, lo, hi, step):
    return round(min(hi, max(lo, round((v - lo) / step) * step + lo)), 6)


def share_get(x, n):
    """Share n = (kind, generation or kernel or None) of shares x."""
    return x[n[0]][n[1]] if n[1] else x[n[0]]


def share_put(x, n, v):
    """A copy of shares x with share n set to v."""
    y = {"gemm": dict(x["gemm"]), "attn": dict(x["attn"]), "passes": x["passes"]}
    if n[1]:
        y[n[0]][n[1]] = v
    else:
        y[n[0]] = v
    return y


def fit(pred, sources):
    """The best point of the coarse grid, then coordinate descent over the shares these sources'
    runs depend on (a generation or flash kernel none of them ran keeps the coarse share)."""
    gens = sorted({pred.generation(r) for s in sources for r in usable(s["rows"])})
    kerns = sorted({kernel(r) for s in sources for r in usable(s["rows"])})
    names = [("gemm", g) for g in gens] + [("attn", k) for k in kerns] + [("passes", None)]
    grid = [{"gemm": {g: gv for g in pred.generations()}, "attn": {k: av for k in pred.kernels()}, "passes": pv}
            for gv in COARSE_GRID["gemm"] for av in COARSE_GRID["attn"] for pv in COARSE_GRID["passes"]]
    cur = min(grid, key=lambda x: score(pred, sources, x))

    best = score(pred, sources, cur)
    for mult in (COARSE, 1):
        for n in names:   # onto this phase's grid
            lo, hi, step = GRID[n[0]]
            cur = share_put(cur, n, snap(share_get(cur, n), lo, hi, step * mult))
        best = score(pred, sources, cur)
        moved = True
        while moved:
            moved = False
            for n in names:
                lo, hi, step = GRID[n[0]]
                for direction in (1, -1):
                    while True:
                        v = snap(share_get(cur, n) + direction * step * mult, lo, hi, step * mult)
                        if v == share_get(cur, n):
                            break
                        cand = share_put(cur, n, v)
                        sc = score(pred, sources, cand)
                        if sc < best - 1e-9:
                            cur, best, moved = cand, sc, True
                        else:
                            break
    return cur, best


# The attention share of a flash kernel no fitted source ran: 1, the kernel's own published curve
# (each kernel's rate is its own micro-benchmark, docs/gpus.md). Another kernel's fitted share is no
# prior for it: FlashAttention-2's folds range 0.45-1.00 (the GEMM/passes/attention trade-off sets
# it), and ml-engineering held out at that share was 41 % off, 9.9 % at 1 (docs/validation-time.md
# "Tried"). A GPU generation only the held-out source ran keeps the others' mean GEMM share: its
# MAMF rate is measured, the share what training sustains of any generation's.
UNSEEN_KERNEL_SHARE = 1.0


def leave_one_out(pred, sources):
    """For each source: the shares fitted on all the others (the same fit from the same grid, so
    nothing of the held-out source reaches its fit) and the predictions for its runs with them."""
    out = {}
    for s in sources:
        others = [o for o in sources if o is not s and usable(o["rows"])]
        shares, _ = fit(pred, others)
        seen = {pred.generation(r) for o in others for r in usable(o["rows"])}
        prior = statistics.fmean(v for g, v in shares["gemm"].items() if g in seen)
        for g in shares["gemm"]:   # a generation only this source has: the others' mean, not its own fit
            if g not in seen:
                shares["gemm"][g] = round(prior, 6)
        seen_k = {kernel(r) for o in others for r in usable(o["rows"])}
        for k in shares["attn"]:   # a flash kernel only this source ran: its own benchmark curve as published
            if k not in seen_k:
                shares["attn"][k] = UNSEEN_KERNEL_SHARE
        rows = usable(s["rows"])
        out[s["name"]] = {"shares": shares, "pred": pred.predict(rows, shares), "rows": rows}
    return out


# ---- what the planner embeds ----

def fmt_shares(sh):
    g = ", ".join(f"gemm.{k} {v:.2f}" for k, v in sorted(sh["gemm"].items()))
    a = ", ".join(f"attn.{k} {v:.2f}" for k, v in sorted(sh["attn"].items()))
    return f"{g}, {a}, passes {sh['passes']:.2f}"


def shares_header(sh):
    lines = ["/* plan_shares.h — GENERATED by `make fit-time` (bench/fit_time.py) from every source in",
             " * bench/published: the time model's fitted shares, fitted on all sources. Do not edit by hand;",
             " * re-run `make fit-time` after changing the corpus or the time model. --time-shares overrides them",
             " * for one plan (the fit uses it). docs/formulas.md \"Time\" and docs/validation-time.md. */",
             "#ifndef PLAN_SHARES_H", "#define PLAN_SHARES_H", ""]
    for k, v in sorted(sh["gemm"].items()):
        lines.append(f"#define PLAN_SHARE_GEMM_{k.upper()} {v:.2f}   /* of the {k} GPUs' MAMF GEMM rate */")
    for k, v in sorted(sh["attn"].items()):
        lines.append(f"#define PLAN_SHARE_ATTN_{k.upper()} {v:.2f}   /* of the {k} flash-attention benchmark rate */")
    lines += [f"#define PLAN_SHARE_PASSES {sh['passes']:.2f}   /* elementwise traffic over one pass per op */",
              "", "#endif", ""]
    return "\n".join(lines)


DTYPE = {"fp32": "fp32", "amp-fp16": "fp16", "mixed-fp16": "fp16", "amp-bf16": "bf16", "mixed-bf16": "bf16",
         "bf16": "bf16"}


def attn_label(r):
    """The attention as plan_attn_label names it: the flash kernel where it is not SDPA's
    FlashAttention-2 (fa3, fa4), else the implementation (eager, sdpa)."""
    k = r.get("attn_kernel", "fa2")
    return k if r["attn"] == "sdpa" and k != "fa2" else r["attn"]


def setups(rows):
    """The setups a source's runs had, as plan_time.c matches them: (gpu, strategy, checkpointing,
    compute dtype, attention, TP, PP, optimizer offload) -> [seq min, max, GPUs min, max]."""
    out = {}
    for r in rows:
        k = (r["gpu"], r["strategy"], r["act_ckpt"], DTYPE[r["precision"]], attn_label(r), int(r.get("tp", 1)),
             int(r.get("pp", 1)), int(r.get("offload") == "optimizer"))
        v = out.setdefault(k, [r["seq"], r["seq"], r["gpus"], r["gpus"]])
        v[:] = [min(v[0], r["seq"]), max(v[1], r["seq"]), min(v[2], r["gpus"]), max(v[3], r["gpus"])]
    return sorted(out.items())


def held_out_median(res):
    errs = [abs(error_pct(p, r)) for p, r in zip(res["pred"], res["rows"]) if "error" not in p]
    return median(errs)


def sources_header(sources, loso):
    lines = ["/* plan_time_sources.h — GENERATED by `make fit-time` (bench/fit_time.py): each published source",
             " * in bench/published with its usable runs and the time model's median |error| on them with the",
             " * shares fitted on every other source (held out), and the setups its runs had (plan_time.c",
             " * matches a plan's setup against them). Do not edit by hand. docs/validation-time.md. */",
             "static const PlanTimeSource PLAN_TIME_SOURCES[] = {"]
    used = [s for s in sources if usable(s["rows"])]
    for s in used:
        lines.append(f'    {{"{s["name"]}", {len(usable(s["rows"]))}, {held_out_median(loso[s["name"]]):.1f}}},')
    lines += ["};", "static const PlanTimeSetup PLAN_TIME_SETUPS[] = {",
              "    /* source, GPU, strategy, checkpointing, compute dtype, attention, TP, PP, optimizer offload,",
              "       sequences min-max, GPUs min-max */"]
    for i, s in enumerate(used):
        for k, v in setups(usable(s["rows"])):
            lines.append(f'    {{{i}, "{k[0]}", "{k[1]}", "{k[2]}", "{k[3]}", "{k[4]}", {k[5]}, {k[6]}, {k[7]}, '
                         f'{v[0]}, {v[1]}, {v[2]}, {v[3]}}},')
    lines += ["};", ""]
    return "\n".join(lines)


def run_fit(memplan, folder, use_cache=True, log=print, shipped=False, rows=0):
    """The all-source fit and the leave-one-source-out fits: (pred, sources, full shares, loso).
    shipped: no fit, every source predicted with the shipped shares (in loso's shape); rows: the
    first N usable runs of each source only (0: all)."""
    pred = Predictor(memplan, use_cache)
    sources = load_corpus(folder)
    if rows > 0:
        for s in sources:
            keep = usable(s["rows"])[:rows]
            s["rows"] = keep + [r for r in s["rows"] if r.get("use") == "unusable"]
    fitted = [s for s in sources if usable(s["rows"])]
    if shipped:
        sh = shipped_shares(pred)
        try:
            return pred, sources, sh, {s["name"]: {"shares": sh, "rows": usable(s["rows"]),
                                                   "pred": pred.predict(usable(s["rows"]), None)} for s in fitted}
        finally:
            pred.save()
    try:
        full, sc = fit(pred, fitted)
        log(f"# all {len(fitted)} sources: {fmt_shares(full)} (objective {sc:.2f} %)")
        loso = leave_one_out(pred, fitted)
        for name, res in loso.items():
            log(f"# without {name}: {fmt_shares(res['shares'])}; {name} held out: median |error| "
                f"{held_out_median(res):.1f} %")
    finally:
        pred.save()
    return pred, sources, full, loso


def parse_shares(text):
    """Shares as fmt_shares prints them ("gemm.ampere 0.95, attn.fa2 0.60, passes 3.25") or with '='
    ("gemm.ampere=0.95,..."): {gemm: {gen: v}, attn: {kernel: v}, passes: v}."""
    sh = {"gemm": {}, "attn": {}, "passes": None}
    for part in filter(None, (p.strip() for p in text.split(","))):
        m = re.fullmatch(r"(gemm|attn)\.(\w+)[ =]+(\d+(?:\.\d*)?|\.\d+)|passes[ =]+(\d+(?:\.\d*)?|\.\d+)", part)
        if not m:
            raise ValueError(f"--score: '{part}' is not 'gemm.GEN V', 'attn.KERNEL V' or 'passes V'")
        if m.group(4):
            sh["passes"] = float(m.group(4))
        else:
            sh[m.group(1)][m.group(2)] = float(m.group(3))
    return sh


def check_points(points, pred, sources):
    """Each --score point names shares memplan prices and folds that exist: a name that is neither
    would be ignored, its point scored as the fold's own."""
    valid = {"gemm": pred.generations(), "attn": pred.kernels()}
    names = [s["name"] for s in sources]
    for name, sh in points.items():
        src = name.split("/")[0] if "/" in name else None
        if src is not None and src not in names:
            raise ValueError(f"--score {name}: no source '{src}' (valid: {', '.join(names)})")
        for kind, vals in valid.items():
            for k in sh[kind]:
                if k not in vals:
                    raise ValueError(f"--score {name}: {kind}.{k} is not a share memplan prices "
                                     f"(valid: {', '.join(f'{kind}.{v}' for v in vals)})")


def nonneg_int(text):
    """--rows: a whole number from 0."""
    try:
        n = int(text)
    except ValueError:
        n = -1
    if n < 0:
        raise argparse.ArgumentTypeError(f"'{text}' is not a whole number of runs from 0 (0 = all)")
    return n


def complete(sh, base):
    """sh with every share it does not name taken from base."""
    return {"gemm": {**base["gemm"], **sh["gemm"]}, "attn": {**base["attn"], **sh["attn"]},
            "passes": base["passes"] if sh["passes"] is None else sh["passes"]}


def step_resolution(pred, sources, x):
    """The objective's change for one fine grid step of each share these sources' runs depend on, up
    and down, at x: [(share, step, objective -step, objective +step)]."""
    gens = sorted({pred.generation(r) for s in sources for r in usable(s["rows"])})
    kerns = sorted({kernel(r) for s in sources for r in usable(s["rows"])})
    out = []
    for n in [("gemm", g) for g in gens] + [("attn", k) for k in kerns] + [("passes", None)]:
        lo, hi, step = GRID[n[0]]
        down, up = (score(pred, sources, share_put(x, n, snap(share_get(x, n) + d * step, lo, hi, step)))
                    for d in (-1, 1))
        out.append((f"{n[0]}.{n[1]}" if n[1] else n[0], step, down, up))
    return out


def flatness(pred, sources, full, loso, points, log=print):
    """Per fold (every source but one): the objective at its own fitted point, at the all-source
    point and at each of points (name -> shares), and its change one fine step either side of its
    own point, share by share (the objective's resolution there). A point named SOURCE/NAME is scored
    on the fold without SOURCE only."""
    log("# the objective (mean of the sources' capped median |error|, %) of each fold at each point")
    log("# fold: without SOURCE; 'own' is the fold's fitted point; in brackets the held-out source's median "
        "|error| there")
    for s in sources:
        others = [o for o in sources if o is not s and usable(o["rows"])]
        own = loso[s["name"]]["shares"]
        rows = usable(s["rows"])

        def cell(name, x):   # the fold's objective at x, and the held-out source's median |error| there
            res = {"rows": rows, "pred": pred.predict(rows, x)}
            return f"{name} {score(pred, others, x):.3f} ({held_out_median(res):.1f})"
        here = score(pred, others, own)
        cells = [cell("own", own), cell("all-source", complete(full, own))]
        cells += [cell(n.split("/")[-1], complete(p, own)) for n, p in points.items()
                  if "/" not in n or n.split("/")[0] == s["name"]]
        log(f"without {s['name']:<15} " + "; ".join(cells))
        steps = step_resolution(pred, others, own)
        log("    one step either side of own: " + "; ".join(
            f"{n} ±{st:g}: {lo - here:+.3f} / {hi - here:+.3f}" for n, st, lo, hi in steps))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--memplan", default=os.path.join(ROOT, "build", "memplan"))
    ap.add_argument("--tables", default=os.path.join(HERE, "published"))
    ap.add_argument("--write", action="store_true", help="rewrite planner/plan_shares.h and plan_time_sources.h")
    ap.add_argument("--no-cache", action="store_true", help=f"do not read or write {os.path.relpath(CACHE, ROOT)}")
    ap.add_argument("--rows", type=nonneg_int, default=0,
                    help="only the first N usable runs of each source (0 = all); the headers are then neither "
                         "compared nor written")
    ap.add_argument("--flatness", action="store_true",
                    help="also print each fold's objective at its own point, at the all-source point and one fine "
                         "step either side of its own point")
    ap.add_argument("--score", action="append", default=[], metavar="NAME:SHARES",
                    help="each fold's objective at these shares too (implies --flatness), as the fit prints them "
                         "(e.g. 'prev:gemm.ampere 0.97, attn.fa2 0.55, passes 3.50'; a share not named: the "
                         "fold's own; "
                         "'torchtitan/prev:...' on the fold without torchtitan only)")
    a = ap.parse_args()
    try:
        points = {}
        for i, text in enumerate(a.score):
            name, sep, rest = text.partition(":")
            points[name.strip() if sep else f"point{i + 1}"] = parse_shares(rest if sep else text)
        pred, sources, full, loso = run_fit(a.memplan, a.tables, not a.no_cache, rows=a.rows)
        if a.flatness or a.score:
            check_points(points, pred, sources)
            try:
                flatness(pred, [s for s in sources if usable(s["rows"])], full, loso, points)
            finally:
                pred.save()
    except (ValueError, OSError, json.JSONDecodeError, subprocess.CalledProcessError) as e:
        print(f"fit_time: {e}", file=sys.stderr)
        return 2
    if a.rows > 0:
        return 0
    texts = {SHARES_H: shares_header(full), SOURCES_H: sources_header(sources, loso)}
    same = True
    for path, text in texts.items():
        with open(path) as f:
            old = f.read()
        if old != text:
            same = False
            if a.write:
                with open(path, "w") as f:
                    f.write(text)
        print(f"# {os.path.relpath(path, ROOT)}: {'reproduced' if old == text else 'rewritten' if a.write else 'DIFFERS'}")
    print(f"# shipped: {fmt_shares(shipped_shares(pred))}")
    print(f"# fitted:  {fmt_shares(full)}")
    if not same and not a.write:
        print("# the fit does not reproduce the shipped shares: run `python3 bench/fit_time.py --write`, rebuild "
              "and commit", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
