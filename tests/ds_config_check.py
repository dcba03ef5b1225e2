"""Checks memplan against the installed DeepSpeed (test_cli_auto.c): loads the emitted configs
with DeepSpeed's own parser, and calls DeepSpeed's memory estimators on the setups memplan
planned.

usage: python ds_config_check.py CASES.json
CASES.json: {"configs": [{"path": ..., "world_size": N, "expect": {"stage": 3,
                          "offload_optimizer": "cpu"|"none", "offload_param": "cpu"|"none",
                          "dtype": "bf16"|"bf16-pure"|"fp16"|"autocast-bfloat16"|"fp32", "micro_batch": b,
                          "grad_accum": k}}],
             "estimates": [{"stage": 2|3, "total_params", "largest_layer_params", "gpn", "nodes",
                            "cpu_offload", "offload_params", "host_per_node", "gpu_states"}]}
Prints one "ok" line per check and exits non-zero on the first mismatch.
"""
import json
import sys

import deepspeed.comm as dist
import deepspeed.runtime.activation_checkpointing.config as act_config
import deepspeed.runtime.constants as constants
import deepspeed.runtime.zero.config as zero_config
from deepspeed.runtime.config import DeepSpeedConfig
from deepspeed.runtime.zero.stage3 import estimate_zero3_model_states_mem_needs
from deepspeed.runtime.zero.stage_1_and_2 import estimate_zero2_model_states_mem_needs

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
    everything = json.load(open(sys.argv[1]))
    for e in everything.get("estimates", []):
        if e["stage"] == 2:
            cpu, gpu = estimate_zero2_model_states_mem_needs(e["total_params"], e["gpn"], e["nodes"], e["cpu_offload"])
        else:
            cpu, gpu, largest = estimate_zero3_model_states_mem_needs(
                e["total_params"], e["largest_layer_params"], e["gpn"], e["nodes"], e["cpu_offload"],
                e["offload_params"])
            gpu -= largest   # the gathered layers: memplan counts them as communication buffers
        checks = [("host per node", e["host_per_node"], cpu)]
        if "gpu_states" in e:   # without offload DeepSpeed counts 18 B/param on the GPU (fp32 grads too)
            checks.append(("GPU model states", e["gpu_states"], gpu))
        for what, ours, theirs in checks:
            if abs(ours - theirs) > 1e-4 * max(theirs, 1):
                sys.exit(f"zero{e['stage']} offload={e['cpu_offload']},{e['offload_params']} {what}: "
                         f"memplan {ours:.0f} vs DeepSpeed {theirs:.0f}")
        print(f"ok estimator zero{e['stage']} offload={e['cpu_offload']},{e['offload_params']} "
              f"gpn={e['gpn']} nodes={e['nodes']}: host {cpu:.0f}, gpu {gpu:.0f}")
    for case in everything["configs"]:
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
        bf = cfg.bfloat16_config
        got = {
            "stage": int(z.stage),
            "offload_optimizer": device(z.offload_optimizer),
            "offload_param": device(z.offload_param),
            # pure bf16: no fp32 master, bf16 Adam moments (precision_config.py)
            "dtype": ("bf16-pure" if bf.bf16_master_weights_and_grads and bf.bf16_optimizer_states else "bf16")
                     if bf.enabled else "fp16" if cfg.float16_config.enabled
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
