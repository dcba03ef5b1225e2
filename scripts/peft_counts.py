#!/usr/bin/env python3
"""peft_counts.py — exact (trainable, total) parameter counts of PEFT LoRA models and of frozen
subsets, from PEFT's own get_peft_model on models built on the meta device (no weights, no
network), the figures print_trainable_parameters() prints.

  python scripts/peft_counts.py [-o OUT.json]

Each case is (model, lora rank, targets, freeze): model a zoo name of bench/torch/models.py or a
config.json path; targets a comma list of PEFT module names, "all-linear", or "" for PEFT's
default for the model type (peft.utils.constants.TRANSFORMERS_MODELS_TO_LORA_TARGET_MODULES_MAPPING);
freeze "embeddings" or "all-but-last:N" without LoRA (memplan --freeze). The output is JSON
{"peft": VERSION, "transformers": VERSION, "cases": [{"model", "lora", "targets", "freeze",
"trainable", "total"}, ...]}; tests/data/peft_counts.json keeps it and tests/test_plan_dim_ft.c
compares memplan's counts with it.

Needs torch, transformers and peft (the project's venv: ~/.cache/memplan/torch-venv/bin/python).
"""
import argparse
import json
import os
import sys
import warnings

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(ROOT, "bench", "torch"))

CASES = [
    ("gpt2-mini", 8, "", ""),
    ("gpt2-mini", 8, "all-linear", ""),
    ("gpt2-mini", 4, "c_attn,c_proj", ""),
    ("bench/torch/configs/llama-mini.json", 8, "", ""),
    ("bench/torch/configs/llama-mini.json", 8, "all-linear", ""),
    ("bench/torch/configs/llama-mini.json", 16, "q_proj,k_proj,v_proj,o_proj", ""),
    ("gpt2", 16, "", ""),
    ("llama2-7b", 16, "", ""),
    ("llama2-7b", 16, "all-linear", ""),
    ("llama2-7b", 64, "q_proj,k_proj,v_proj,o_proj,gate_proj,up_proj,down_proj", ""),
    ("tests/data/hf/llama-3.1-8b.json", 16, "all-linear", ""),
    ("tests/data/hf/mistral-7b-v0.1.json", 8, "", ""),
    ("gpt2-mini", 0, "", "embeddings"),
    ("gpt2-mini", 0, "", "all-but-last:1"),
    ("bench/torch/configs/llama-mini.json", 0, "", "embeddings"),
    ("bench/torch/configs/llama-mini.json", 0, "", "all-but-last:2"),
]


def count(name, rank, targets, frz):
    import torch
    import models
    from peft import LoraConfig, get_peft_model
    with torch.device("meta"):
        spec = models.build(name, "eager", 0.0, device="meta")
    model = spec.model
    if rank:
        kw = {"r": rank, "lora_alpha": 2 * rank, "lora_dropout": 0.0}
        if targets == "all-linear":
            kw["target_modules"] = "all-linear"
        elif targets:
            kw["target_modules"] = targets.split(",")
        model = get_peft_model(model, LoraConfig(**kw))
    else:
        models.freeze(model, frz, spec.block_modules())
    if rank:   # PeftModel's own count (print_trainable_parameters)
        trainable, total = model.get_nb_trainable_parameters()
    else:      # the same sums over model.parameters() (a tied tensor once)
        total = sum(p.numel() for p in model.parameters())
        trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
    return int(trainable), int(total)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-o", "--out", default="-")
    a = ap.parse_args()
    warnings.filterwarnings("ignore")
    import peft
    import transformers
    cases = []
    for name, rank, targets, frz in CASES:
        tr, tot = count(os.path.join(ROOT, name) if name.endswith(".json") else name, rank, targets, frz)
        cases.append({"model": name, "lora": rank, "targets": targets, "freeze": frz,
                      "trainable": tr, "total": tot})
        print(f"{name:40s} r={rank:<3d} {targets or '(default)':30s} {frz or '-':16s} "
              f"trainable {tr:>13,d} of {tot:>15,d}", file=sys.stderr)
    doc = {"peft": peft.__version__, "transformers": transformers.__version__, "cases": cases}
    text = json.dumps(doc, indent=1) + "\n"
    if a.out == "-":
        sys.stdout.write(text)
    else:
        with open(a.out, "w") as f:
            f.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
