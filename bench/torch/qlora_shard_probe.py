"""qlora_shard_probe.py — what ZeRO-3 and FSDP2 do with a 4-bit base on gloo CPU ranks: each rank's
share of bitsandbytes' packed weight (Params4bit stored in bnb_4bit_quant_storage = bf16, as PEFT's
QLoRA under FSDP / ZeRO-3 stores it) and a training step through it. The rule it checks
(docs/formulas.md "A quantized base under ZeRO-3 and FSDP"): the wrappers shard and gather the
packed storage, 0.5 B per weight, like any parameter; the absmax constants stay in quant_state,
whole on every rank.

bitsandbytes is not in the pinned venv: install it beside it, not into it:
  $(scripts/torch_env.sh --print) -m pip install --no-deps --target /tmp/bnb bitsandbytes==0.50.2
  PYTHONPATH=/tmp/bnb OMP_NUM_THREADS=1 torchrun --standalone --nproc_per_node 2 \
      bench/torch/qlora_shard_probe.py fsdp2|zero3
Measured 2026-12-07 (torch 2.15, bitsandbytes 0.50.2, deepspeed 0.19.8, 2 ranks, 4 blocks of a
256 x 256 NF4 projection): packed base 131,072 B whole (0.500 B per weight), 65,536 B on each rank
under both fully_shard and ZeRO-3; forward, backward and the step run (bitsandbytes' CPU fallback).
"""
import sys

import torch
import torch.distributed as dist
import bitsandbytes as bnb

H, L = 256, 4


class Block(torch.nn.Module):
    """A frozen NF4 projection with a LoRA pair beside it (PEFT's Linear4bit + lora_A/B)."""

    def __init__(self):
        super().__init__()
        self.q = bnb.nn.Linear4bit(H, H, bias=False, compute_dtype=torch.bfloat16, quant_type="nf4",
                                   quant_storage=torch.bfloat16)
        w = torch.randn(H, H, dtype=torch.bfloat16)
        self.q.weight = bnb.nn.Params4bit(w, requires_grad=False, quant_type="nf4", quant_storage=torch.bfloat16,
                                          compress_statistics=True)._quantize("cpu")
        # kept on the module: the wrappers swap the parameter object (bitsandbytes restores it from
        # here, nn/modules.py fix_4bit_weight_quant_state_from_module)
        self.q.quant_state = self.q.weight.quant_state
        self.a = torch.nn.Linear(H, 8, bias=False, dtype=torch.bfloat16)
        self.b = torch.nn.Linear(8, H, bias=False, dtype=torch.bfloat16)

    def forward(self, x):
        return self.q(x) + self.b(self.a(x))


def main(mode):
    torch.manual_seed(0)
    if mode == "zero3":
        import deepspeed
        deepspeed.init_distributed(dist_backend="gloo")
    else:
        dist.init_process_group("gloo")
    r = dist.get_rank()
    m = torch.nn.Sequential(*[Block() for _ in range(L)])
    whole = sum(b.q.weight.numel() * b.q.weight.element_size() for b in m)
    x = torch.randn(2, H, dtype=torch.bfloat16)
    if mode == "fsdp2":
        from torch.distributed.fsdp import fully_shard
        from torch.distributed.device_mesh import init_device_mesh
        mesh = init_device_mesh("cpu", (dist.get_world_size(),))
        for b in m:
            fully_shard(b, mesh=mesh)
        fully_shard(m, mesh=mesh)
        local = sum(b.q.weight.to_local().numel() * b.q.weight.to_local().element_size() for b in m)
        opt = torch.optim.AdamW([p for p in m.parameters() if p.requires_grad], lr=1e-3)
        m(x).float().sum().backward()
        opt.step()
    else:
        import deepspeed
        cfg = {"train_micro_batch_size_per_gpu": 2, "bf16": {"enabled": True},
               "zero_optimization": {"stage": 3, "stage3_param_persistence_threshold": 0},
               "optimizer": {"type": "AdamW", "params": {"lr": 1e-3, "torch_adam": True}}}
        eng, *_ = deepspeed.initialize(model=m, model_parameters=[p for p in m.parameters() if p.requires_grad],
                                       config=cfg)
        local = sum(b.q.weight.ds_tensor.numel() * b.q.weight.ds_tensor.element_size() for b in eng.module)
        eng.backward(eng(x).float().sum())
        eng.step()
    print(f"{mode} rank {r}: packed base {whole} B whole ({whole / (H * H * L):.3f} B per weight), "
          f"{local} B on this rank; a training step ran", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "fsdp2")
