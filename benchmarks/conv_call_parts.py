"""Where the host time of one conv2d call routed by patch_conv2d goes, part by part (the median of 2000 calls, each
timed alone with the GPU queue empty): the whole routed call, the module call machinery, the checks, the output
allocation, the stream lookup, the launch (pointer writes + cuLaunchKernel, through ctypes), and cuLaunchKernel through cuda.bindings'
wrapper for comparison. A diagnostic for docs/python-api.md; writes a markdown table to OUT (argument).

    python3 benchmarks/conv_call_parts.py OUT.md
"""

from __future__ import annotations

import sys
from datetime import datetime, timezone
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from host_timing import host_us  # noqa: E402


def main(out: str) -> None:
    import torch

    import tracea

    sync = torch.cuda.synchronize  # empties the GPU queue before each timed call (benchmarks/host_timing.py)
    conv = torch.nn.Conv2d(64, 64, 3, padding=1).cuda().half().to(memory_format=torch.channels_last)
    x = torch.randn(1, 64, 14, 14, device="cuda", dtype=torch.half).to(memory_format=torch.channels_last)
    rows = []
    with torch.no_grad():
        rows.append(("stock torch conv (module call)", host_us(sync, lambda: conv(x))))
        rows.append(("torch.nn.functional.conv2d", host_us(sync,
            lambda: torch.nn.functional.conv2d(x, conv.weight, conv.bias, padding=1))))
        ident = torch.nn.Identity()
        rows.append(("nn.Module call of Identity", host_us(sync, lambda: ident(x))))
        with tracea.patch_conv2d(conv, context=tracea.Context(device="cuda", mode="default"), only_faster=False) as patch:
            conv(x)
            router = patch.router
            fast = router.fast.get(conv)
            if fast is None:
                raise SystemExit(f"not on the fast path: {patch.report()}")
            rows.append(("routed call (module call)", host_us(sync, lambda: conv(x))))
            rows.append(("router.forward", host_us(sync, lambda: router.forward(None, conv, x))))
            rows.append(("router._fast_call", host_us(sync, lambda: router._fast_call(fast, conv, x))))
            y = torch.empty_strided(fast.out_size, fast.out_stride, dtype=x.dtype, device=x.device)
            rows.append(("fast.launch (pointer writes + cuLaunchKernel)", host_us(sync,
                lambda: fast.launch((x.data_ptr(), fast.krsc_ptr, y.data_ptr(), conv.bias.data_ptr())))))
            rows.append(("torch.empty_strided", host_us(sync,
                lambda: torch.empty_strided(fast.out_size, fast.out_stride, dtype=x.dtype, device=x.device))))
            rows.append(("torch._C._cuda_getCurrentRawStream", host_us(sync,
                lambda: torch._C._cuda_getCurrentRawStream(0))))
            rows.append(("the checks (shape, stride, dtype, device, bias, weight version)", host_us(sync,
                lambda: (x.shape != fast.shape, x.stride() != fast.stride, x.dtype != fast.dtype,
                         x.get_device() != fast.device, conv.bias is not fast.bias,
                         (conv.weight.data_ptr(), conv.weight._version) != fast.weight_version))))
            rows.append(("torch.is_grad_enabled + requires_grad", host_us(sync,
                lambda: torch.is_grad_enabled() and x.requires_grad)))
            rows.append(("router.record", host_us(sync, lambda: router.record(fast.label, fast.outcome))))
            layer = next(v for v in router.layers.values() if not isinstance(v, str))
            run = layer.kernel.bound[fast.stream][0]
            rows.append((f"BoundLaunch() alone ({len(run._queued)} launches queued; kernel "
                         f"{layer.kernel.config})", host_us(sync, run)))
            # the same launch through cuda.bindings' wrapper, for comparison with the ctypes route BoundLaunch takes
            from cuda.bindings import driver as d

            raw = run._queued[-1].__defaults__[0]  # (function, grid x3, block x3, smem, stream, params, extra)
            if isinstance(raw, tuple):
                def plain(v):  # a ctypes value as the int cuda.bindings takes (a null c_void_p reads None)
                    return getattr(v, "value", v) or 0

                f, stream = d.CUfunction(plain(raw[0])), d.CUstream(plain(raw[8]))
                rest, params = [plain(v) for v in raw[1:8]], plain(raw[9])
                rows.append(("cuLaunchKernel through cuda.bindings", host_us(sync,
                    lambda: d.cuLaunchKernel(f, *rest, stream, params, 0))))
    torch.cuda.synchronize()
    stamp = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    lines = [f"# Host time of a routed conv2d call, part by part ({stamp}, {torch.cuda.get_device_name()})", "",
             "Command: `python3 benchmarks/conv_call_parts.py OUT.md`. Layer 64 -> 64, 3x3, 14x14, batch 1, fp16 "
             "channels_last, inference. Host time per call: the median of 2000 calls, each timed alone with the GPU "
             "queue empty.", "",
             "| part | µs per call |", "| --- | ---: |"]
    lines += [f"| {name} | {us:.2f} |" for name, us in rows]
    open(out, "w").write("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "/tmp/conv_call_parts.md")
