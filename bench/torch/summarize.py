"""Write bench/torch/results/README.md: one table row per harness JSON in results/.

    python3 bench/torch/summarize.py [RESULTS_DIR]
"""
import glob
import json
import os
import sys

ABBR = {"params": "P", "grads": "G", "optimizer": "O", "activations": "A",
        "comm_buffers": "C", "temporaries": "T", "other": "X"}
OPS = {"all_reduce": "AR", "all_gather": "AG", "reduce_scatter": "RS", "broadcast": "BC", "all_to_all": "A2A"}


def mib(x):
    return f"{x / 2**20:.2f}"


def row(path):
    d = json.load(open(path))
    name = os.path.basename(path)[:-5]
    if d.get("status") != "ok":
        return f"| {name} | error: {d.get('error', '?')} | | | | |"
    r0 = d["per_rank"][0]
    peaks = "/".join(str(r["peak_bytes"]) for r in d["per_rank"])
    split = " ".join(f"{ABBR[k]}{mib(v)}" for k, v in r0["at_peak"].items() if v)
    ms = r0["model_states"]
    states = f"P{mib(ms['params'])} G{mib(ms['grads'])} O{mib(ms['optimizer'])}"
    coll = "; ".join(f"{OPS.get(c['op'], c['op'])} {c['phase'][:3]} {c['count']}x "
                     f"{c['payload_bytes']}" for c in d["collectives"])
    loss = "→".join(f"{x:.3f}" for x in (d["loss"][0], d["loss"][-1]))
    return (f"| {name} | {peaks} | {r0['peak_phase']} {r0['peak_module']} | {split} | "
            f"{states} | {coll} | {loss} | {r0['step_ms']:.0f} |")


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    res = sys.argv[1] if len(sys.argv) > 1 else os.path.join(here, "results")
    sys.path.insert(0, here)
    from check_saved import is_gpu_row   # GPU rows (results/cuda/) have no CPU split: not here
    files = [f for f in sorted(glob.glob(os.path.join(res, "*.json")))
             if not is_gpu_row(json.load(open(f)))]
    lines = [
        "# Ground truth measured by bench/torch/harness.py",
        "",
        "One JSON per setup, named `<model>_<strategy>_<precision>_<ckpt>_<attn>_r<ranks>_b<batch>"
        "_s<seq>.json` (torch 2.15.0, transformers 5.24.0, DeepSpeed 0.19.8, gloo CPU ranks,",
        "AdamW lr 1e-4, HF-Trainer-style loop, set_to_none zero_grad, 3 steps; steady state = steps",
        "2..3). How it is measured: docs/validation-torch.md. Regenerate this table with",
        "`python3 bench/torch/summarize.py`.",
        "",
        "Columns: peak = tensor peak per rank in bytes (rank 0/1/...); moment = phase and module of",
        "rank 0's peak; split = rank 0's live bytes at its peak in MiB (P params, G grads,",
        "O optimizer, A activations, C comm buffers, T temporaries, X other); states = rank 0's",
        "model states after step 2 in MiB; collectives = rank 0, last step, op phase count x total",
        "payload bytes; loss = first → last step; ms = rank 0 steady step time with the profiler on.",
        "",
        "| setup | peak bytes | moment | split at peak (MiB) | states (MiB) | collectives | loss | ms |",
        "|---|---|---|---|---|---|---|---|",
    ]
    lines += [row(f) for f in files]
    with open(os.path.join(res, "README.md"), "w") as f:
        f.write("\n".join(lines) + "\n")
    print(f"{len(files)} rows -> {os.path.join(res, 'README.md')}")
    # the same table between the markers of docs/validation-torch.md
    doc = os.path.join(here, "..", "..", "docs", "validation-torch.md")
    begin, end = "<!-- results-table -->", "<!-- /results-table -->"
    if os.path.isfile(doc):
        text = open(doc).read()
        if begin in text and end in text:
            head, rest = text.split(begin, 1)
            tail = rest.split(end, 1)[1]
            table = "\n".join(lines[-len(files) - 2:])
            with open(doc, "w") as f:
                f.write(f"{head}{begin}\n{table}\n{end}{tail}")
            print(f"{len(files)} rows -> {os.path.normpath(doc)}")


if __name__ == "__main__":
    main()
