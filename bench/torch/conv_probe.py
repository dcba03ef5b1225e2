#!/usr/bin/env python3
"""conv_probe.py — what a CPU convolution's backward holds beyond its outputs, per ResNet-50 conv
shape (docs/formulas.md "CPU convolution backward").

Usage (the venv's python, under the shared lock):
    flock /tmp/memplan-cpu.lock $PY bench/torch/conv_probe.py IMAGE_SIDE BATCH

For the first two bottlenecks of each stage (every distinct shape) and the stem: one thread (as
torchrun's OMP_NUM_THREADS=1 gives each rank), forward one nn.Conv2d, then its backward alone
under torch.profiler(profile_memory=True); from the allocation events, the peak live bytes during
the backward minus the bytes still live after it (the input and weight gradients) is the
transient. Prints it against the weight's bytes and the kernel path ATen took
(_slow_conv2d_backward = THNN; otherwise oneDNN inside convolution_backward).
"""
import sys

import torch
import torch.nn as nn
from torch._C._profiler import _EventType
from torch.profiler import ProfilerActivity, profile


def shapes(side):
    """(name, cin, cout, kernel, stride, input side) of torchvision resnet50's convs."""
    h = side // 2                       # stem conv, stride 2
    h = (h + 2 - 3) // 2 + 1            # max pool 3x3, stride 2
    out, cin = [("stem", 3, 64, 7, 2, side)], 64
    for s, (planes, blocks) in enumerate([(64, 3), (128, 4), (256, 6), (512, 3)]):
        for i in range(blocks):
            st = 2 if (s > 0 and i == 0) else 1
            h2 = (h + 2 - 3) // st + 1
            if i < 2:
                out.append((f"layer{s + 1}.{i}.conv1", cin, planes, 1, 1, h))
                out.append((f"layer{s + 1}.{i}.conv2", planes, planes, 3, st, h))
                out.append((f"layer{s + 1}.{i}.conv3", planes, planes * 4, 1, 1, h2))
                if st != 1 or cin != planes * 4:
                    out.append((f"layer{s + 1}.{i}.downsample", cin, planes * 4, 1, st, h))
            cin, h = planes * 4, h2
    return out


def transient(prof):
    """Peak live bytes minus the final live bytes, from the CPU allocation events."""
    evs, stack = [], list(prof.profiler.kineto_results.experimental_event_tree())
    while stack:
        e = stack.pop()
        stack.extend(e.children)
        if e.tag == _EventType.Allocation and e.extra_fields.device.type == "cpu":
            evs.append((e.start_time_ns, e.id, e.extra_fields.alloc_size))
    live = peak = 0
    for _, _, size in sorted(evs):
        live += size
        peak = max(peak, live)
    return peak - live


def main():
    side, batch = int(sys.argv[1]), int(sys.argv[2])
    torch.set_num_threads(1)
    print(f"# resnet50 convs, {side} px, batch {batch}, 1 thread, torch {torch.__version__}")
    print(f"{'conv':22s} {'weight B':>11s} {'input B':>11s} {'output B':>11s} {'transient B':>12s} {'x weight':>8s}  path")
    for name, cin, cout, k, st, h in shapes(side):
        conv = nn.Conv2d(cin, cout, k, st, k // 2, bias=False)
        x = torch.randn(batch, cin, h, h, requires_grad=name != "stem")
        y = conv(x)
        g = torch.randn_like(y)
        with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
            y.backward(g)
        extra = transient(prof)
        w = conv.weight.numel() * 4
        thnn = any(e.name == "aten::_slow_conv2d_backward" for e in prof.events())
        print(f"{name:22s} {w:>11,d} {x.numel() * 4:>11,d} {y.numel() * 4:>11,d} {extra:>12,d} {extra / w:8.2f}  "
              f"{'THNN' if thnn else 'oneDNN'}")


if __name__ == "__main__":
    main()
