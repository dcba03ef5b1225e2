"""Loads memplan's emitted DeepSpeed configs with DeepSpeed's own parser (test_cli_auto.c).

usage: python ds_config_check.py CASES.json
CASES.json: [{"path": ..., "world_size": N, "expect": {"stage": 3, "offload_optimizer": "cpu",
              "offload_param": "cpu"|"none", "dtype": "bf16"|"fp16"|"autocast"|"fp32",
              "micro_batch": b, "grad_accum": k}}]
Prints one line per config and exits non-zero on the first mismatch.
"""
import json
import sys

import deepspeed.comm as dist
import deepspeed.runtime.activation_checkpointing.config as act_config
import deepspeed.runtime.constants as constants
import deepspeed.runtime.zero.config as zero_config
from deepspeed.runtime.config import DeepSpeedConfig

# Every top-level key DeepSpeed's config reads (runtime/constants.py, zero/config.py,
# activation_checkpointing/config.py); DeepSpeedConfig ignores others silently, so check here.
KNOWN = {v for v in vars(constants).values() if isinstance(v, str)}
KNOWN |= {zero_config.ZERO_OPTIMIZATION, act_config.ACT_CHKPT}


def device(offload):
    """'cpu' / 'none' from an offload config (an enum or its string)."""
    if offload is None:
        return "none"
    d = offload.device
    return str(getattr(d, "value", d))


def main():
    cases = json.load(open(sys.argv[1]))
    for case in cases:
        raw = json.load(open(case["path"]))
        unknown = sorted(k for k in raw if k not in KNOWN)
        if unknown:
            sys.exit(f"{case['path']}: unknown top-level keys {unknown}")
        for key in ("train_batch_size", "train_micro_batch_size_per_gpu", "gradient_accumulation_steps"):
            if not isinstance(raw[key], int):
                sys.exit(f"{case['path']}: {key} is not an integer: {raw[key]!r}")
        if not isinstance(raw["zero_optimization"].get("reduce_bucket_size", 0), int):
            sys.exit(f"{case['path']}: reduce_bucket_size is not an integer byte count")
        # the job's world size, as if launched on that many ranks (no process group here)
        n = case["world_size"]
        dist.get_rank = lambda *a, **k: 0
        dist.get_world_size = lambda *a, **k: n
        cfg = DeepSpeedConfig(case["path"])
        e = case["expect"]
        z = cfg.zero_config
        got = {
            "stage": int(z.stage),
            "offload_optimizer": device(z.offload_optimizer),
            "offload_param": device(z.offload_param),
            "dtype": "bf16" if cfg.bfloat16_config.enabled else "fp16" if cfg.float16_config.enabled
                     else "autocast-" + str(cfg.torch_autocast_dtype).replace("torch.", "") if cfg.torch_autocast_enabled
                     else "fp32",
            "micro_batch": cfg.train_micro_batch_size_per_gpu,
            "grad_accum": cfg.gradient_accumulation_steps,
        }
        bad = {k: (got[k], v) for k, v in e.items() if got[k] != v}
        if bad:
            sys.exit(f"{case['path']}: DeepSpeed read {bad} (got, expected)")
        print(f"ok {case['path']}: {got}")


if __name__ == "__main__":
    main()
