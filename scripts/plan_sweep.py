#!/usr/bin/env python3
"""plan_sweep.py — the planner's regression sweep: many setups x every strategy through
`memplan --json`, `memplan auto`, `--trace` and `validate --against torch --measured` on every
saved PyTorch/DeepSpeed result, one output file per case, so that a change to the planner can be
shown to leave every figure as it was (or to list exactly what moved).

  python3 scripts/plan_sweep.py run DIR [--memplan build/memplan]   write DIR/<case>.out
  python3 scripts/plan_sweep.py diff OLD NEW                         compare two runs

`diff` prints one line per case that differs: the JSON paths whose values moved, with the
largest relative change, and a count of identical cases. Exit 0 when every case is
byte-identical, 1 otherwise. Needs only the Python standard library.
"""
import argparse
import glob
import itertools
import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)

MODELS = ["gpt2-tiny", "gpt2-mini", "gpt2", "gpt2-xl", "llama2-7b", "llama2-70b", "bert-base", "resnet50",
          "tests/data/hf/t5-base.json", "tests/data/hf/qwen2-0.5b.json", "tests/data/hf/gemma-2b.json",
          "tests/data/hf/opt-125m.json", "tests/data/hf/pythia-160m.json", "tests/data/hf/mistral-7b-v0.1.json",
          "tests/data/hf/llama-3.2-1b.json", "bench/torch/configs/llama-mini.json",
          "tests/data/params/gpt2.json", "tests/data/memplan/custom-mlp.json"]
# the dense 2024-26 families at the shapes their PyTorch rows were measured at (bench/torch/configs)
MODELS += [f"bench/torch/configs/{f}-mini.json" for f in ("qwen3", "gemma2", "gemma3", "phi3", "olmo2",
                                                           "starcoder2", "granite", "smollm3")]

# (name, flags): each setup is planned for every model (the CLI refuses what does not apply)
SETUPS = [
    ("default8", "--gpus 8"),
    ("one", "--gpus 1"),
    ("cpu-fp32-eager", "--gpus 2 --precision fp32 --attn eager --autocast cpu --batch 2 --seq 128"),
    ("cpu-amp-sdpa", "--gpus 2 --precision amp-bf16 --autocast cpu --batch 4 --seq 128"),
    ("cpu-amp-eager-b1", "--gpus 4 --precision amp-bf16 --autocast cpu --attn eager --batch 1 --seq 64"),
    ("mixed-2node", "--gpus 16 --gpus-per-node 8 --precision mixed-bf16 --batch 2"),
    ("bf16-ckpt", "--gpus 4 --precision bf16 --act-ckpt full --batch 3"),
    ("fp16-ckpt-eager", "--gpus 8 --precision amp-fp16 --act-ckpt full --attn eager --batch 2 --seq 256"),
    ("accum-every", "--gpus 4 --grad-accum 3 --batch 2 --seq 256"),
    ("accum-last", "--gpus 4 --grad-accum 3 --batch 2 --seq 256 --fsdp-grad-sync last"),
    ("accum-mixed-last", "--gpus 4 --grad-accum 2 --precision mixed-fp16 --fsdp-grad-sync last"),
    ("offload-opt", "--gpus 8 --offload optimizer"),
    ("offload-params", "--gpus 8 --offload params --precision mixed-bf16"),
    ("offload-host", "--gpus 8 --offload optimizer --host-mem 64GiB"),
    ("fsdp1", "--gpus 4 --fsdp 1 --precision fp32 --autocast cpu --batch 2 --seq 128"),
    ("fsdp1-ckpt-amp", "--gpus 4 --fsdp 1 --precision amp-bf16 --act-ckpt full"),
    ("fsdp1-accum", "--gpus 4 --fsdp 1 --grad-accum 2 --fsdp-grad-sync last"),
    ("trainer-zeros", "--gpus 2 --loop trainer --zero-grad zeros --precision fp32 --autocast cpu --seq 128"),
    ("bucket-view", "--gpus 2 --grad-as-bucket-view --seq 128"),
    ("sgd-dropout0", "--gpus 3 --optimizer sgd-momentum --dropout 0 --seq 128"),
    ("adam-fp32-3", "--gpus 3 --optimizer adam --precision fp32 --seq 512"),
    ("h100-margin", "--gpus 64 --gpu h100-80gb --seq 4096 --alloc-margin 1GiB --batch 2"),
    ("v100-big", "--gpus 8 --gpu v100-32gb --precision amp-fp16 --batch 8"),
    ("engine-fp32", "--gpus 2 --impl engine --precision fp32 --batch 2 --seq 128"),
    ("engine-fp32-4", "--gpus 4 --impl engine --precision fp32 --batch 1 --seq 64 --grad-accum 2"),
    ("engine-ckpt", "--gpus 2 --impl engine --precision fp32 --act-ckpt full --seq 256"),
    ("syncbn", "--gpus 4 --syncbn --batch 8 --seq 224"),
    ("cnn-cpu", "--gpus 2 --precision fp32 --autocast cpu --batch 2 --seq 32"),
    ("cnn-cpu-b1", "--gpus 2 --precision fp32 --autocast cpu --batch 1 --seq 64"),
    # fine-tuning (--lora, --freeze, --quant-base): models without named projections are refused
    ("lora16", "--gpus 8 --lora 16 --seq 512"),
    ("lora-all-cpu", "--gpus 2 --lora 8 --lora-targets all-linear --lora-dropout 0.1 --precision amp-bf16 --autocast cpu --seq 128"),
    ("qlora-ckpt", "--gpus 1 --gpu-mem 24GiB --lora 16 --quant-base nf4 --act-ckpt full"),
    ("freeze-last2", "--gpus 4 --freeze all-but-last:2 --precision fp32 --seq 256"),
    # tensor and pipeline parallel (--tp, --pp: GPT-2 and LLaMA-style decoders; the rest are refused)
    ("tp2", "--gpus 8 --tp 2 --strategy ddp,fsdp-full --seq 512"),
    ("tp8-sp-b4", "--gpus 16 --tp 8 --sp on --strategy ddp,fsdp-full --batch 4 --seq 1024 --act-ckpt full"),
    ("pp2-m4-b2", "--gpus 8 --pp 2 --microbatches 4 --strategy ddp,fsdp-full --batch 2 --seq 512"),
    ("pp4-gpipe", "--gpus 8 --pp 4 --pp-schedule gpipe --microbatches 8 --strategy ddp,fsdp-full --seq 256"),
    ("tp2-pp2-b2", "--gpus 8 --tp 2 --sp on --pp 2 --microbatches 2 --strategy ddp,fsdp-full --batch 2 --seq 512"),
    # the allocator's settings (PYTORCH_CUDA_ALLOC_CONF): each changes the replays the need search makes
    ("conf-expandable", "--gpus 8 --alloc-conf expandable_segments:True"),
    ("conf-split-round", "--gpus 4 --alloc-conf max_split_size_mb:128,roundup_power2_divisions:4 --batch 2"),
    # expert parallel (MoE models; dense ones are refused)
    ("ep2", "--gpus 8 --ep 2"),
    ("conf-fraction-gc", "--gpus 8 --alloc-conf per_process_memory_fraction:0.9,garbage_collection_threshold:0.6 --gpu-mem 24GiB"),
]

GENERIC = [("params", "--params 7.5e9 --gpus 64"), ("params-units", "--params 1.3e9 --units 12 --gpus 8"),
           ("params-offload", "--params 30e9 --gpus 8 --offload params --units 40")]

AUTO = [("gpt2-xl", "--gpus 8 --gpu-mem 24GiB"), ("gpt2-xl", "--gpus 8"), ("gpt2", "--gpus 8"), ("llama2-70b", "--gpus 64 --gpu h100-80gb --seq 4096"),
        ("llama2-7b", "--gpus 8 --global-batch 64"), ("resnet50", "--gpus 4"), ("llama2-70b", "--gpus 1"),
        ("gpt2-xl", "--gpus 2 --gpu-mem 24GiB --offload optimizer"), ("llama2-13b", "--gpus 16 --precision fp32"),
        ("llama2-7b", "--gpus 1 --gpu-mem 24GiB --lora 16 --quant-base nf4"),
        ("llama2-13b", "--gpus 16 --gpu h100-80gb --seq 4096 --tp auto"), ("gpt2", "--gpus 8 --pp auto"),
        ("llama2-13b", "--gpus 4 --gpu h100-80gb --seq 2048 --strategy ddp --pp auto --tp auto")]

TRACES = [("gpt2", "--gpus 8"), ("llama2-7b", "--gpus 8 --grad-accum 2"), ("gpt2", "--gpus 2 --impl engine --precision fp32 --seq 128"),
          ("resnet50", "--gpus 4 --syncbn --batch 4"), ("gpt2-xl", "--gpus 8 --offload params --precision mixed-bf16"),
          ("llama2-7b", "--gpus 8 --tp 2 --strategy ddp,fsdp-full --batch 2 --seq 1024"),
          ("gpt2-medium", "--gpus 8 --pp 2 --microbatches 4 --strategy ddp,fsdp-full --batch 4 --seq 512")]


def case_name(*parts):
    s = "_".join(parts)
    return "".join(ch if ch.isalnum() or ch in "-._" else "-" for ch in s)


def run_one(memplan, args, out):
    r = subprocess.run([memplan] + args, capture_output=True, text=True, cwd=ROOT)
    where = os.path.dirname(out)   # the output folder's name is not part of the result
    def clean(text):   # where the tree or the outputs live is not part of the result
        return text.replace(where, "DIR").replace(ROOT, "ROOT")
    with open(out, "w") as f:
        f.write(f"# exit {r.returncode}\n# stderr: {clean(r.stderr.strip())}\n{clean(r.stdout)}")
    for a in args:   # an output file memplan wrote (--json=FILE)
        if a.startswith("--json=") and os.path.exists(a[7:]):
            with open(a[7:]) as f:
                text = f.read()
            with open(a[7:], "w") as f:
                f.write(clean(text))


def run(a):
    os.makedirs(a.dir, exist_ok=True)
    n = 0
    for model, (sname, flags) in itertools.product(MODELS, SETUPS):
        # a file's name keeps its folder (tests/data/params/gpt2.json and the zoo's gpt2 would
        # otherwise write the same case)
        mname = model.replace(".json", "").replace("tests/data/", "") if model.endswith(".json") else model
        run_one(a.memplan, ["--model", model] + flags.split() + ["--json"],
                os.path.join(a.dir, case_name("plan", mname, sname) + ".out"))
        n += 1
    for sname, flags in GENERIC:
        run_one(a.memplan, flags.split() + ["--json"], os.path.join(a.dir, case_name("plan", sname) + ".out"))
        n += 1
    for model, flags in AUTO:
        run_one(a.memplan, ["auto", "--model", model] + flags.split(),
                os.path.join(a.dir, case_name("auto", model, flags) + ".out"))
        n += 1
    for model, flags in TRACES:
        tr = os.path.join(a.dir, case_name("trace", model, flags) + ".trace.json")
        run_one(a.memplan, ["--model", model] + flags.split() + ["--trace", tr],
                os.path.join(a.dir, case_name("trace", model, flags) + ".out"))
        n += 1
    for res in sorted(glob.glob(os.path.join(ROOT, "bench", "torch", "results", "*.json"))):
        out = os.path.join(a.dir, "validate_" + os.path.basename(res)[:-5] + ".out")
        js = out + ".json"
        run_one(a.memplan, ["validate", "--against", "torch", "--measured", res, f"--json={js}"], out)
        n += 1
    print(f"plan_sweep: {n} cases in {a.dir}")
    return 0


def flat(x, path=""):
    if isinstance(x, dict):
        for k, v in x.items():
            yield from flat(v, f"{path}.{k}")
    elif isinstance(x, list):
        for i, v in enumerate(x):
            yield from flat(v, f"{path}[{i}]")
    else:
        yield path, x


def load_json_tail(text):
    body = "\n".join(l for l in text.splitlines() if not l.startswith("# exit") and not l.startswith("# stderr"))
    try:
        return json.loads(body)
    except ValueError:
        return None


def describe(old, new):
    jo, jn = load_json_tail(old), load_json_tail(new)
    if jo is None or jn is None:
        lo, ln = old.splitlines(), new.splitlines()
        diffs = [(i, a, b) for i, (a, b) in enumerate(zip(lo, ln)) if a != b]
        head = diffs[0] if diffs else (min(len(lo), len(ln)), "", "")
        return f"{len(diffs)} lines differ (lengths {len(lo)}/{len(ln)}); first: line {head[0]}: {head[1][:90]!r} -> {head[2][:90]!r}"
    fo, fn = dict(flat(jo)), dict(flat(jn))
    moved, worst = [], 0.0
    for k in sorted(set(fo) | set(fn)):
        a, b = fo.get(k), fn.get(k)
        if a == b:
            continue
        rel = None
        if isinstance(a, (int, float)) and isinstance(b, (int, float)) and not isinstance(a, bool):
            rel = abs(b - a) / max(abs(a), abs(b), 1e-300)
            worst = max(worst, rel)
        moved.append((k, a, b, rel))
    show = "; ".join(f"{k}: {a} -> {b}" for k, a, b, _ in moved[:4])
    return f"{len(moved)} values moved (largest relative change {worst:.3g}): {show}"


def diff(a):
    names = sorted(set(os.listdir(a.old)) | set(os.listdir(a.new)))
    same = 0
    bad = []
    for n in names:
        po, pn = os.path.join(a.old, n), os.path.join(a.new, n)
        if not os.path.exists(po) or not os.path.exists(pn):
            bad.append(f"{n}: only in {'new' if not os.path.exists(po) else 'old'}")
            continue
        with open(po) as f:
            o = f.read()
        with open(pn) as f:
            w = f.read()
        if o == w:
            same += 1
        else:
            bad.append(f"{n}: {describe(o, w)}")
    for b in bad:
        print(b)
    print(f"plan_sweep: {same} of {len(names)} files byte-identical, {len(bad)} differ")
    return 0 if not bad else 1


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run")
    r.add_argument("dir")
    r.add_argument("--memplan", default=os.path.join(ROOT, "build", "memplan"))
    d = sub.add_parser("diff")
    d.add_argument("old")
    d.add_argument("new")
    a = ap.parse_args()
    if a.cmd == "run":
        a.memplan = os.path.abspath(a.memplan)
        return run(a)
    return diff(a)


if __name__ == "__main__":
    sys.exit(main())
