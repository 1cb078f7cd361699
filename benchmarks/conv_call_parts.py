"""Where the host time of one conv2d call routed by patch_conv2d goes, part by part (best of 5 batches of 2000
calls each): the whole routed call, the module call machinery, the checks, the output allocation, the stream
lookup, the launch (pointer writes + cuLaunchKernel, through ctypes), and cuLaunchKernel through cuda.bindings'
wrapper for comparison. A diagnostic for docs/python-api.md; writes a markdown table to OUT (argument).

    python3 benchmarks/conv_call_parts.py OUT.md
"""

from __future__ import annotations

import sys
import time
from datetime import datetime, timezone


def per_call_us(fn, n: int = 2000) -> float:
    for _ in range(50):
        fn()
    best = float("inf")
    for _ in range(5):
        t0 = time.perf_counter()
        for _ in range(n):
            fn()
        best = min(best, (time.perf_counter() - t0) / n)
    return best * 1e6


def main(out: str) -> None:
    import torch

    import tracea

    conv = torch.nn.Conv2d(64, 64, 3, padding=1).cuda().half().to(memory_format=torch.channels_last)
    x = torch.randn(1, 64, 14, 14, device="cuda", dtype=torch.half).to(memory_format=torch.channels_last)
    rows = []
    with torch.no_grad():
        rows.append(("stock torch conv (module call)", per_call_us(lambda: conv(x))))
        rows.append(("torch.nn.functional.conv2d", per_call_us(
            lambda: torch.nn.functional.conv2d(x, conv.weight, conv.bias, padding=1))))
        ident = torch.nn.Identity()
        rows.append(("nn.Module call of Identity", per_call_us(lambda: ident(x))))
        with tracea.patch_conv2d(conv, context=tracea.Context(device="cuda", mode="default"), only_faster=False) as patch:
            conv(x)
            router = patch.router
            fast = router.fast.get(conv)
            if fast is None:
                raise SystemExit(f"not on the fast path: {patch.report()}")
            rows.append(("routed call (module call)", per_call_us(lambda: conv(x))))
            rows.append(("router.forward", per_call_us(lambda: router.forward(None, conv, x))))
            rows.append(("router._fast_call", per_call_us(lambda: router._fast_call(fast, conv, x))))
            y = torch.empty_strided(fast.out_size, fast.out_stride, dtype=x.dtype, device=x.device)
            rows.append(("fast.launch (pointer writes + cuLaunchKernel)", per_call_us(
                lambda: fast.launch((x.data_ptr(), fast.krsc_ptr, y.data_ptr(), conv.bias.data_ptr())))))
            rows.append(("torch.empty_strided", per_call_us(
                lambda: torch.empty_strided(fast.out_size, fast.out_stride, dtype=x.dtype, device=x.device))))
            rows.append(("torch._C._cuda_getCurrentRawStream", per_call_us(
                lambda: torch._C._cuda_getCurrentRawStream(0))))
            rows.append(("the checks (shape, stride, dtype, device, bias, weight version)", per_call_us(
                lambda: (x.shape != fast.shape, x.stride() != fast.stride, x.dtype != fast.dtype,
                         x.get_device() != fast.device, conv.bias is not fast.bias,
                         (conv.weight.data_ptr(), conv.weight._version) != fast.weight_version))))
            rows.append(("torch.is_grad_enabled + requires_grad", per_call_us(
                lambda: torch.is_grad_enabled() and x.requires_grad)))
            rows.append(("router.record", per_call_us(lambda: router.record(fast.label, fast.outcome))))
            layer = next(v for v in router.layers.values() if not isinstance(v, str))
            run = layer.kernel.bound[fast.stream][0]
            rows.append((f"BoundLaunch() alone ({len(run._queued)} launches queued; kernel "
                         f"{layer.kernel.config})", per_call_us(run)))
            # the same launch through cuda.bindings' wrapper, for comparison with the ctypes route BoundLaunch takes
            from cuda.bindings import driver as d

            raw = run._queued[-1].__defaults__[0]  # (function, grid x3, block x3, smem, stream, params, extra)
            if isinstance(raw, tuple):
                def plain(v):  # a ctypes value as the int cuda.bindings takes (a null c_void_p reads None)
                    return getattr(v, "value", v) or 0

                f, stream = d.CUfunction(plain(raw[0])), d.CUstream(plain(raw[8]))
                rest, params = [plain(v) for v in raw[1:8]], plain(raw[9])
                rows.append(("cuLaunchKernel through cuda.bindings", per_call_us(
                    lambda: d.cuLaunchKernel(f, *rest, stream, params, 0))))
    torch.cuda.synchronize()
    stamp = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    lines = [f"# Host time of a routed conv2d call, part by part ({stamp}, {torch.cuda.get_device_name()})", "",
             "Command: `python3 benchmarks/conv_call_parts.py OUT.md`. Layer 64 -> 64, 3x3, 14x14, batch 1, fp16 "
             "channels_last, inference. Best of 5 batches of 2000 calls, host time per call.", "",
             "| part | µs per call |", "| --- | ---: |"]
    lines += [f"| {name} | {us:.2f} |" for name, us in rows]
    open(out, "w").write("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "/tmp/conv_call_parts.md")
