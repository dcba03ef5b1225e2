"""Pipeline-parallel probe: gpt2-mini split in 2 stages over torch.distributed.pipelining on CPU
ranks (gloo), Schedule1F1B or ScheduleGPipe, fp32, AdamW; prints each rank's parameters and
tensor peak over steady-state steps as one JSON line per rank, for comparison with
`memplan --pp 2` (docs/formulas.md "Pipeline parallel").

    flock /tmp/memplan-cpu.lock torchrun --standalone --nproc-per-node 2 \
        bench/torch/pp_probe.py --microbatches 4 --schedule 1f1b

Measured as harness.py measures (measure.py): c10's CPU allocator reports every allocation and
free to torch.profiler with profile_memory=True and FLAGS_caffe2_report_cpu_memory_usage on, so
each memory event carries the process's exact live tensor total. Steps 1-2 warm up (optimizer
state, p2p buffers) outside the profiler; the peak is the maximum total over steps 3..K. Stage
split: stage 0 = wte, wpe, the first half of the blocks; stage 1 = the other half, ln_f and an
LM head of its own (the tied weight copied: a pipelined split cannot share it across ranks), the
loss cross entropy over the micro-batch's logits (labels = ids, unshifted: the same bytes).
"""
import argparse
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))




def main():
    p = argparse.ArgumentParser()
    p.add_argument("--model", default="gpt2-mini")
    p.add_argument("--microbatches", type=int, default=2)
    p.add_argument("--schedule", choices=["1f1b", "gpipe"], default="1f1b")
    p.add_argument("--batch", type=int, default=1, help="micro-batch size")
    p.add_argument("--seq", type=int, default=128)
    p.add_argument("--steps", type=int, default=4)
    a = p.parse_args()

    import torch
    import torch.distributed as dist
    import torch.nn as nn
    from torch.distributed.pipelining import PipelineStage, Schedule1F1B, ScheduleGPipe
    import models
    import measure
    from harness import _report_all_frees

    torch.set_num_threads(1)
    exact = _report_all_frees()
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    assert world == 2, "two stages, one per rank"
    torch.manual_seed(0)
    spec = models.build(a.model, "sdpa", 0.0)
    full = spec.model
    tr = full.transformer
    nb = len(tr.h)
    half = nb // 2

    def run_blocks(blocks, h):
        for blk in blocks:
            out = blk(h)
            h = out[0] if isinstance(out, tuple) else out
        return h

    class First(nn.Module):
        def __init__(self):
            super().__init__()
            self.wte, self.wpe = tr.wte, tr.wpe
            self.h = nn.ModuleList(tr.h[:half])

        def forward(self, ids):
            pos = torch.arange(ids.shape[1]).unsqueeze(0)
            return run_blocks(self.h, self.wte(ids) + self.wpe(pos))

    class Last(nn.Module):
        def __init__(self):
            super().__init__()
            self.h = nn.ModuleList(tr.h[half:])
            self.ln_f = tr.ln_f
            self.lm_head = nn.Linear(tr.wte.weight.shape[1], tr.wte.weight.shape[0], bias=False)
            self.lm_head.weight = nn.Parameter(tr.wte.weight.detach().clone())

        def forward(self, h):
            return self.lm_head(self.ln_f(run_blocks(self.h, h)))

    mod = First() if rank == 0 else Last()
    del full, tr, spec
    import gc
    gc.collect()
    mod.train()
    n_params = sum(q.numel() for q in mod.parameters())
    M, b, s = a.microbatches, a.batch, a.seq
    stage = PipelineStage(mod, rank, world, torch.device("cpu"))

    def loss_fn(logits, target):
        return nn.functional.cross_entropy(logits.view(-1, logits.shape[-1]), target.view(-1))

    sched_cls = Schedule1F1B if a.schedule == "1f1b" else ScheduleGPipe
    sched = sched_cls(stage, n_microbatches=M, loss_fn=loss_fn)
    opt = torch.optim.AdamW(mod.parameters(), lr=1e-4)
    g = torch.Generator().manual_seed(1)

    def step():
        ids = torch.randint(0, mod.lm_head.weight.shape[0] if rank == 1 else mod.wte.weight.shape[0],
                            (b * M, s), generator=g)
        if rank == 0:
            sched.step(ids)
        else:
            sched.step(target=ids.clone(), losses=[])
        opt.step()
        opt.zero_grad(set_to_none=True)

    for _ in range(2):   # warm-up: optimizer state, p2p buffers
        step()
    from torch.profiler import profile, ProfilerActivity
    prof = profile(activities=[ProfilerActivity.CPU], profile_memory=True)
    prof.start()
    for _ in range(a.steps - 2):
        step()
    prof.stop()
    trace = measure.Trace(prof)
    series = trace.true if exact else trace.total
    peak = max(series) if series else 0
    out = {"rank": rank, "stage": rank, "schedule": a.schedule, "microbatches": M, "batch": b, "seq": s,
           "params": n_params, "param_bytes": 4 * n_params, "peak_bytes": peak, "exact": bool(exact),
           "torch": torch.__version__}
    print(json.dumps(out), flush=True)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
