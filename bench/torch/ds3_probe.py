#!/usr/bin/env python3
"""ds3_probe.py — what DeepSpeed ZeRO-3 holds gathered after each block's forward and during its
backward, read from DeepSpeed's own bookkeeping (partitioned_param_coordinator.py), with its
fetch limits set small so a small model shows what a large one does with the defaults.

Per block (forward post-hook, backward pre-hook) on rank 0 of the last step:
  avail   the coordinator's __n_available_params (elements gathered or in flight)
  mat     elements of partitioned parameters whose data is gathered (ds_status AVAILABLE);
          inflight: INFLIGHT; data: those whose .data holds their full numel
  flat    elements of the flat all-gather buffers still referenced by the in-flight registry
          (one per coalesced group: n x its partition, alive until its last tensor is used)
  groups  how many such buffers
The gathered storage is data + flat (a single-tensor gather writes into the parameter's data
while in flight; a coalesced one into its flat buffer, copied out at its first use). memplan's
Ds3Sim (planner/plan_deepspeed.c) predicts it at the same moments (tests/test_plan_deepspeed.c
pins the figures of the run in bench/torch/results/probes/).

  torchrun --standalone --nproc-per-node 2 bench/torch/ds3_probe.py --model gpt2-mini \
      --prefetch 100000 --max-live 400000 --persist 1000 --reuse 0
Run it under the shared CPU lock like any harness row. Prints one JSON document.
"""
import argparse
import json
import os
import sys

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import models  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="gpt2-mini")
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--seq", type=int, default=64)
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--prefetch", type=float, default=5e7)
    ap.add_argument("--max-live", type=float, default=1e9)
    ap.add_argument("--persist", type=float, default=1e5)
    ap.add_argument("--reuse", type=float, default=1e9)
    a = ap.parse_args()
    torch.set_num_threads(1)
    import deepspeed
    deepspeed.init_distributed(dist_backend="gloo")
    rank = torch.distributed.get_rank()
    world = torch.distributed.get_world_size()
    spec = models.build(a.model, "eager", 0.0)
    cfg = {"train_micro_batch_size_per_gpu": a.batch, "gradient_accumulation_steps": 1,
           "optimizer": {"type": "AdamW", "params": {"lr": 1e-4, "torch_adam": True}},
           "zero_optimization": {"stage": 3, "stage3_prefetch_bucket_size": int(a.prefetch),
                                 "stage3_max_live_parameters": int(a.max_live),
                                 "stage3_param_persistence_threshold": int(a.persist),
                                 "stage3_max_reuse_distance": int(a.reuse)},
           "steps_per_print": 10 ** 9}
    engine, _, _, _ = deepspeed.initialize(model=spec.model, model_parameters=spec.model.parameters(),
                                           config=cfg)
    coord = None
    params = [p for p in engine.module.parameters() if hasattr(p, "ds_status")]
    from deepspeed.runtime.zero.partition_parameters import ZeroParamStatus

    def state():
        nonlocal coord
        if coord is None:
            from deepspeed.runtime.zero.parameter_offload import DeepSpeedZeRoOffload  # noqa: F401
            coord = engine.optimizer.parameter_offload.get_param_coordinator()
        reg = coord._PartitionedParameterCoordinator__inflight_param_registry
        handles = {}
        for h in reg.values():
            parts = getattr(h, "partitions", None)
            if parts:
                handles[id(h)] = sum(x.numel() for x in parts)
            for sub in getattr(h, "handles", []) or []:
                sp = getattr(sub, "partitions", None)
                if sp:
                    handles[id(sub)] = sum(x.numel() for x in sp)
        part = [p for p in params if not p.ds_persist]
        by = {st.name: int(sum(p.ds_numel for p in part if p.ds_status == st)) for st in ZeroParamStatus}
        data = int(sum(p.data.numel() for p in part if p.data.numel() == p.ds_numel))
        return {"avail": int(coord._PartitionedParameterCoordinator__n_available_params),
                "mat": by.get("AVAILABLE", 0), "inflight": by.get("INFLIGHT", 0), "data": data,
                "registry": len(reg), "flat": int(sum(handles.values())), "groups": len(handles)}

    rec = []
    blocks = spec.block_modules()
    names = {id(b): f"block.{i}" for i, b in enumerate(blocks)}
    for b in blocks:
        b.register_forward_hook(lambda m, i, o: rec.append({"phase": "forward", "layer": names[id(m)], **state()}))
        b.register_full_backward_pre_hook(
            lambda m, g: rec.append({"phase": "backward", "layer": names[id(m)], **state()}))
    base = models.make_batch(spec, a.batch, a.seq, 1 + rank)
    for step in range(a.steps):
        rec.clear()
        loss = models.forward(spec, engine, {k: v.clone() for k, v in base.items()}).loss
        engine.backward(loss)
        engine.step()
    if rank == 0:
        print(json.dumps({"model": a.model, "ranks": world, "prefetch": a.prefetch, "max_live": a.max_live,
                          "persist": a.persist, "reuse": a.reuse, "deepspeed": deepspeed.__version__,
                          "moments": rec}, indent=1))


if __name__ == "__main__":
    main()
