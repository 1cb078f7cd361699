"""torchvision ResNet-50 (weights=None, eval, fp16, channels_last, batch 32) with `tracea.patch_conv2d` against stock
torch with cudnn.benchmark = True, on the GPU, in one run; plus the host time of one routed convolution call.

    python3 benchmarks/resnet50_patch.py OUT.md [--budget 8] [--batch 32] [--rounds 8]

1. Stock: cudnn.benchmark on, warmed up, then the median of 30 timed forward passes (CUDA events).
2. Patched: `patch_conv2d(model, context=Context(mode="tune", budget=B))`; the first forward pass routes every
   layer shape once (tuning the ones the cache lacks: its time is reported apart), then the same 30 timed passes.
   Beside them, to tell the router's cost from the kernels' and from any state tuning leaves behind: the model
   patched with every layer declined (before any tuning), and stock again after unpatching; and for each, the host
   time of a whole forward pass with the GPU queue empty first (a pass longer on the host than on the GPU is
   host-bound, and its CUDA-event time is the host's).
   Then `--rounds` pairs, A B A B: stock (unpatched) then patched again from the now-filled cache, 30 timed passes
   each; the ratio of each adjacent pair, their median and range are the headline (a single pair drifts with the
   GPU's clocks and the host's load by more than the difference between the two).
3. Outputs compared: relative Frobenius error of the logits, patched against stock.
4. Host overhead: one routed 3x3 conv call (a small layer, so the GPU is not the limit) against the same call
   unpatched and the call declined by the patch: the median of 2000 calls, each timed alone with the GPU queue empty
   (benchmarks/host_timing.py).
The report says which layers were routed and why the others fell back (patch_report()).
"""

from __future__ import annotations

import argparse
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from host_timing import host_us  # noqa: E402


def timed_ms(fn, n: int = 30) -> float:
    import torch

    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(n):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    return sorted(times)[len(times) // 2]


def _host_profile(fn, sync, passes: int = 10, top: int = 25) -> str:
    """cProfile's `top` functions by own time over `passes` calls of `fn`."""
    import cProfile
    import io
    import pstats

    profiler = cProfile.Profile()
    profiler.enable()
    for _ in range(passes):
        fn()
    sync()
    profiler.disable()
    text = io.StringIO()
    pstats.Stats(profiler, stream=text).sort_stats("tottime").print_stats(top)
    return text.getvalue().strip()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("out")
    parser.add_argument("--budget", type=int, default=8)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--rounds", type=int, default=8, help="A B pairs of stock and patched after tuning")
    parser.add_argument("--profile", action="store_true", help="append cProfile's top host functions of 10 patched passes")
    args = parser.parse_args()

    import torch
    import torchvision

    import tracea

    sync = torch.cuda.synchronize
    torch.backends.cudnn.benchmark = True
    torch.manual_seed(0)
    model = torchvision.models.resnet50(weights=None).eval().half().cuda().to(memory_format=torch.channels_last)
    x = torch.randn(args.batch, 3, 224, 224, device="cuda", dtype=torch.half).to(memory_format=torch.channels_last)
    lines = [f"# ResNet-50 with patch_conv2d ({datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC, {torch.cuda.get_device_name()})",
             "", f"Command: `python3 benchmarks/resnet50_patch.py OUT.md --budget {args.budget} --batch {args.batch}`; "
             f"torch {torch.__version__}, cuDNN {torch.backends.cudnn.version()}, fp16, channels_last, batch {args.batch}.", ""]
    forward = lambda: model(x)  # noqa: E731
    with torch.no_grad():
        stock_ms = timed_ms(forward)
        stock_host_ms = host_us(sync, forward, n=100, warmup=5) / 1e3
        ref = model(x).float()
        with tracea.patch_conv2d(model, min_flops=10**18):  # every layer declined, nothing tuned: the router alone
            declined_ms = timed_ms(forward)
            declined_host_ms = host_us(sync, forward, n=100, warmup=5) / 1e3
        ctx = tracea.Context(device="cuda", mode="tune", budget=args.budget, time_limit_s=None)
        with tracea.patch_conv2d(model, context=ctx) as patch:
            began = time.monotonic()
            first = model(x)
            torch.cuda.synchronize()
            tune_s = time.monotonic() - began
            patched_ms = timed_ms(forward)
            patched_host_ms = host_us(sync, forward, n=100, warmup=5) / 1e3
            out = model(x).float()
            report = patch.report()
            profile = _host_profile(forward, sync) if args.profile else ""
        stock_after_ms = timed_ms(forward)  # unpatched again: did routing and tuning leave the process slower?
        stock_after_host_ms = host_us(sync, forward, n=100, warmup=5) / 1e3
        pairs = []  # (stock ms, patched ms), adjacent in time
        for _ in range(args.rounds):
            stock_round = timed_ms(forward)
            with tracea.patch_conv2d(model, context=ctx):  # winners from the cache: nothing is tuned again
                pairs.append((stock_round, timed_ms(forward)))
    err = (torch.linalg.norm(out - ref) / torch.linalg.norm(ref)).item()
    del first
    routed = [r for r in report if r.routed]
    lines += ["| | ms per forward pass (median of 30, CUDA events) | host ms per pass (queue drained, median of 100) |",
              "| --- | ---: | ---: |",
              f"| stock torch (cudnn.benchmark) | {stock_ms:.3f} | {stock_host_ms:.3f} |",
              f"| patched, every layer declined before tuning (the router alone) | {declined_ms:.3f} | "
              f"{declined_host_ms:.3f} |",
              f"| patched (tracea conv2d) | {patched_ms:.3f} | {patched_host_ms:.3f} |",
              f"| stock again, unpatched after the patched passes | {stock_after_ms:.3f} | {stock_after_host_ms:.3f} |",
              "",
              f"First pair's ratio stock / patched: {stock_ms / patched_ms:.3f}x. Relative error of the logits "
              f"against stock: {err:.2e}. First patched pass (routing every layer shape once, tuning those not "
              f"cached, budget {args.budget}): {tune_s:.1f} s.", ""]
    if pairs:
        ratios = sorted(s / p for s, p in pairs)
        lines += [f"## A B pairs after tuning ({len(pairs)} rounds: stock, then patched from the cache; median of 30 "
                  "passes each, ms)", "", "| round | stock | patched | stock / patched |",
                  "| ---: | ---: | ---: | ---: |"]
        lines += [f"| {i + 1} | {s:.3f} | {p:.3f} | {s / p:.3f} |" for i, (s, p) in enumerate(pairs)]
        lines += ["", f"Ratio stock / patched over the pairs: **median {ratios[len(ratios) // 2]:.3f}x** "
                  f"(range {ratios[0]:.3f}-{ratios[-1]:.3f}).", ""]
    lines += [f"Layer shapes: {len(report)} seen, {len(routed)} routed.", "",
              "| layer shape | routed | source or reason | calls | NCHW copies |", "| --- | --- | --- | ---: | ---: |"]
    lines += [f"| {r.shape} | {'yes' if r.routed else 'no'} | {r.reason} | {r.calls} | {r.copies} |" for r in report]

    conv = torch.nn.Conv2d(64, 64, 3, padding=1, bias=True).cuda().half().to(memory_format=torch.channels_last)
    small = torch.randn(1, 64, 14, 14, device="cuda", dtype=torch.half).to(memory_format=torch.channels_last)
    with torch.no_grad():
        stock_us = host_us(sync, lambda: conv(small))
        with tracea.patch_conv2d(conv, context=ctx, only_faster=False) as patch:
            routed_us = host_us(sync, lambda: conv(small))
            small_report = patch.report()
        with tracea.patch_conv2d(conv, context=ctx, min_flops=10**18):  # declined: every call goes to torch
            declined_us = host_us(sync, lambda: conv(small))
    lines += ["", "## Host time per call (small 64->64 3x3 layer at 14x14, batch 1; median of 2000 calls, each alone with "
              "the GPU queue empty)", "",
              "| call | µs per call |", "| --- | ---: |", f"| stock torch conv | {stock_us:.1f} |",
              f"| routed through tracea ({'routed' if small_report and small_report[0].routed else 'NOT routed: ' + (small_report[0].reason if small_report else '?')}) | {routed_us:.1f} |",
              f"| declined by the patch (min_flops above the layer's), torch's forward | {declined_us:.1f} |"]
    if profile:
        lines += ["", "## Host profile of 10 patched passes (cProfile, by own time)", "", "```", profile, "```"]
    text = "\n".join(lines) + "\n"
    open(args.out, "w").write(text)
    print(text)


if __name__ == "__main__":
    main()
