"""Host time of one Python API call on the GPU: `plan(x=...)` of a one-kernel graph (linear + bias, fp16, tiny, so
the kernel itself is a few microseconds), on torch tensors and on CuPy arrays, against torch's own F.linear; and one
convolution routed by patch_conv2d (64 -> 64 channels, 3x3, 14x14, batch 1, fp16 channels_last, inference) against
torch's own call of the same layer. Writes a markdown table to OUT (argument).

    python3 benchmarks/api_overhead.py OUT.md
"""

from __future__ import annotations

import sys
from datetime import datetime, timezone
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from host_timing import host_us  # noqa: E402


def main(out: str) -> None:
    import cupy
    import torch

    import tracea

    sync = torch.cuda.synchronize  # empties the GPU queue before each timed call (benchmarks/host_timing.py)
    rng = np.random.default_rng(0)
    w, b = rng.uniform(-1, 1, (64, 64)).astype(np.float16), rng.uniform(-1, 1, 64).astype(np.float16)
    g = tracea.Graph("fp16")
    g.linear(g.input("x", (16, 64)), w).bias(b)
    plan = tracea.Context(device="cuda", mode="default").optimize_graph(g)
    xt = torch.rand(16, 64, device="cuda", dtype=torch.float16)
    xc = cupy.asarray(rng.uniform(-1, 1, (16, 64)).astype(np.float16))
    wt, bt = torch.from_numpy(w).cuda(), torch.from_numpy(b).cuda()
    rows = [("plan(x=torch tensor)", host_us(sync, lambda: plan(x=xt))),
            ("plan(x=CuPy array)", host_us(sync, lambda: plan(x=xc))),
            ("torch.nn.functional.linear", host_us(sync, lambda: torch.nn.functional.linear(xt, wt, bt)))]
    conv = torch.nn.Conv2d(64, 64, 3, padding=1).cuda().half().to(memory_format=torch.channels_last)
    small = torch.randn(1, 64, 14, 14, device="cuda", dtype=torch.half).to(memory_format=torch.channels_last)
    with torch.no_grad():
        rows.append(("torch conv (nn.Conv2d, cudnn)", host_us(sync, lambda: conv(small))))
        with tracea.patch_conv2d(conv, context=tracea.Context(device="cuda", mode="default"), only_faster=False) as patch:
            conv(small)
            routed = patch.report()
            if routed and routed[0].routed:
                rows.append(("conv routed by patch_conv2d", host_us(sync, lambda: conv(small))))
            else:
                rows.append((f"conv NOT routed: {routed[0].reason if routed else '?'}", float("nan")))
    torch.cuda.synchronize()
    stamp = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    lines = [f"# Python API host overhead per call ({stamp}, {torch.cuda.get_device_name()})", "",
             f"Command: `python3 benchmarks/api_overhead.py OUT.md`. One-kernel plan: {plan.rows[0].shape}, "
             f"kernel `{plan.rows[0].kernel}`. Host time per call: the median of 2000 calls, "
             "each timed alone with the GPU queue empty.", "", "| call | µs per call |", "| --- | ---: |"]
    lines += [f"| {name} | {us:.1f} |" for name, us in rows]
    open(out, "w").write("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "/tmp/api_overhead.md")
