"""MoE tensor-parallel probe: torchtitan 0.2.2's own Llama 4 model (a small flavor) parallelised by
torchtitan's own plan (models/llama4/infra/parallelize.py apply_non_moe_tp and apply_moe_ep_tp:
TensorParallel on the grouped experts, NoParallel router, column/row shared expert, SP in and out
of the block) on CPU ranks (gloo), fp32, one forward and backward; prints rank 0's parameter
elements and every collective the step issues (op, phase, count, payload: the full buffer, an
all-gather's output, as memplan's collective table counts it) as one JSON line,
for comparison with `memplan --tp N --sp on` on tests/data/torchtitan/llama4_tiny.json
(docs/formulas.md "Tensor parallel of MoE blocks").

    PYTHONPATH=/tmp/tt:/tmp/ttdeps flock /tmp/memplan-cpu.lock torchrun --standalone \
        --nproc-per-node 4 bench/torch/moe_tp_probe.py --tp 4

torchtitan is not in the project's venv (its pins are shared): unpack the wheel
(`pip download --no-deps torchtitan==0.2.2`, unzip to /tmp/tt) and `pip install --target
/tmp/ttdeps tyro` plus `--no-deps torchdata`. The modules its package __init__ files import for
training only (tensorboard, datasets, tokenizers, wandb) are stubbed; they play no part in the
model or its parallel plan. torch.histc has no CPU kernel for int64: the router's call gets the
indices as float and returns int64, as CUDA's does (the same counts), and the experts run as torchtitan's for-loop
(use_grouped_mm=False: its grouped_mm path pads the rows with a Triton kernel, GPU only), and
under --ep its permutation takes generate_permute_indices(use_cpu=True), torchtitan's CPU twin of
that kernel; the
collectives and the parameters' shards are the same either way. Collectives are recorded at the dispatcher
(_c10d_functional ops, as DTensor issues them). The saved line:
bench/torch/results/probes/llama4-tiny_tp4.json (tests/test_plan_tp.c compares it).
"""
import argparse
import json
import os
import sys
import types
from collections import defaultdict


def stub(name):
    mod = types.ModuleType(name)
    mod.__getattr__ = lambda attr: type(attr, (), {})
    mod.__path__ = []
    mod.__file__ = "/dev/null/" + name + ".py"
    sys.modules[name] = mod


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--tp", type=int, default=4)
    p.add_argument("--ep", type=int, default=1, help="expert parallel over the data-parallel ranks, etp = tp "
                   "(ExpertTensorParallel); routing balanced (MoEArgs._debug_force_load_balance)")
    p.add_argument("--batch", type=int, default=2)
    p.add_argument("--seq", type=int, default=64)
    a = p.parse_args()

    for name in ("torch.utils.tensorboard", "datasets", "datasets.distributed", "tokenizers", "wandb"):
        stub(name)
    import torch
    import torch.distributed as dist
    import torch.nn.functional as F
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import DTensor
    from torch.utils._python_dispatch import TorchDispatchMode
    from torchtitan.models.llama4.infra.parallelize import apply_moe_ep_tp, apply_non_moe_tp
    from torchtitan.models.llama4.model.args import TransformerModelArgs
    from torchtitan.models.llama4.model.model import Transformer
    from torchtitan.models.moe.moe import MoEArgs

    import torchtitan.models.moe.utils as moe_utils
    gpi = moe_utils.generate_permute_indices   # the EP permutation: torchtitan's own CPU fill, not Triton's
    moe_utils.generate_permute_indices = lambda *args, **kw: gpi(*args, **{**kw, "use_cpu": True})
    histc = torch.histc
    torch.histc = lambda x, *args, **kw: (histc(x.float(), *args, **kw).to(x.dtype) if not x.is_floating_point()
                                           else histc(x, *args, **kw))

    dist.init_process_group("gloo")
    world, rank = dist.get_world_size(), dist.get_rank()
    mesh = init_device_mesh("cpu", (world // a.tp, a.tp), mesh_dim_names=("dp", "tp"))
    torch.manual_seed(0)
    # the tiny flavor: every block MoE (17bx16e's layout), 4 experts top-1 + 1 shared, hidden 512
    # (4*256*2/3*1.2 = 818, / (top-1 + 1 shared) = 409, rounded up to 256: 512)
    args = TransformerModelArgs(dim=256, n_layers=2, n_heads=8, n_kv_heads=4, vocab_size=1024, multiple_of=256,
                                ffn_dim_multiplier=1.2, rope_theta=500000, moe_args=MoEArgs(num_experts=4, use_grouped_mm=False,
                                                                  _debug_force_load_balance=a.ep > 1),
                                interleave_moe_layer_step=1, max_seq_len=a.seq)
    model = Transformer(args)
    with torch.no_grad():
        model.init_weights()
    tp = mesh["tp"]
    apply_non_moe_tp(model, tp, loss_parallel=False, enable_float8_tensorwise_tp=False)
    if a.ep > 1:   # the sparse mesh [efsdp, ep, etp] (parallel_dims.py) with efsdp = dp / ep, etp = tp
        sparse = init_device_mesh("cpu", (world // a.tp // a.ep, a.ep, a.tp), mesh_dim_names=("efsdp", "ep", "etp"))
        apply_moe_ep_tp(model, tp_mesh=tp, ep_mesh=sparse["ep"], etp_mesh=sparse["etp"],
                        ep_etp_mesh=sparse["ep", "etp"])
    else:
        apply_moe_ep_tp(model, tp_mesh=tp, ep_mesh=None, etp_mesh=None, ep_etp_mesh=None)

    def local(t):
        return t.to_local() if isinstance(t, DTensor) else t

    params = sum(local(q).numel() for q in model.parameters())
    shapes = {n: list(local(q).shape) for n, q in model.named_parameters() if n.startswith("layers.0.")}

    OPS = {"all_gather_into_tensor": "all_gather", "reduce_scatter_tensor": "reduce_scatter",
           "all_reduce": "all_reduce", "all_to_all_single": "all_to_all"}
    seen = defaultdict(lambda: [0, 0])
    phase = ["forward"]

    class Record(TorchDispatchMode):
        def __torch_dispatch__(self, func, types_, args_=(), kwargs=None):
            name = func._overloadpacket.__name__
            if func.namespace == "_c10d_functional" and name in OPS:
                x = args_[0]
                row = seen[(OPS[name], phase[0])]
                row[0] += 1
                # memplan's payload: the full buffer (an all-gather's output: its input x the group)
                row[1] += x.numel() * x.element_size() * (args_[1] if name == "all_gather_into_tensor" else 1)
            return func(*args_, **(kwargs or {}))

    torch.manual_seed(1 + mesh.get_coordinate()[0])   # each data-parallel rank its own tokens
    ids = torch.randint(0, 1024, (a.batch, a.seq))
    with Record():
        out = model(ids)
        loss = F.cross_entropy(out.flatten(0, 1).float(), ids.flatten())
        phase[0] = "backward"
        loss.backward()
    if rank == 0:
        print(json.dumps({"tp": a.tp, "ep": a.ep, "batch": a.batch, "seq": a.seq, "params": params, "block0": shapes,
                          "collectives": [{"op": k[0], "phase": k[1], "count": v[0], "bytes": v[1]}
                                          for k, v in sorted(seen.items())]}))
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
