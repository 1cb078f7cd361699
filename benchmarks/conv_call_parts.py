"""Where the host time of one conv2d call routed by patch_conv2d goes, part by part (the median of 2000 calls, each
timed alone with the GPU queue empty): the whole routed call, the module call machinery, the checks, the output
allocation, the stream lookup, the launch (pointer writes + cuLaunchKernel, through ctypes), and cuLaunchKernel through cuda.bindings'
wrapper for comparison. A diagnostic for docs/python-api.md; writes a markdown table to OUT (argument).

Then split-K's two ways of summing the slices on one small layer where split-K is picked (batch 1, 512 -> 512, 3x3,
7x7, fp16 channels_last, bias: ResNet-50's last stage): the hand-picked split configuration with splitk_mode
"reduce" (workspace memset, main kernel, reduction kernel: three launches a call), "serial" (one launch; the
workspace zeroed once when it was allocated, left zero by the kernel) and "serial_ordered" (one launch, a part of the
workspace per slice summed in slice order: deterministic), the same tiles and split otherwise. Each is
checked against the float64 reference (the project's check path) and against stock torch through the routed call
before it is timed; per mode: host µs per routed call (as above), GPU µs per routed call (50 calls queued behind a
spin kernel, so the host never starves the GPU: CUDA events around them / 50, the median of 20 repeats), the launches
a call queues, and the largest difference between two runs of the same call (reduce and serial add the slices
with atomics into one sum: results may differ in the last bits from run to run; serial_ordered should show 0).

    python3 benchmarks/conv_call_parts.py --out OUT.md      (or OUT.md as the only argument)
"""

from __future__ import annotations

import sys
from datetime import datetime, timezone
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from host_timing import host_us  # noqa: E402


def _force(patch, conv, x, config) -> None:
    """Route `conv`'s layer shape to `config` (the patch chose a kernel on the first call; this replaces it and
    drops the module's fast path, which the next call builds again on the new kernel)."""
    from tracea_cli.api.run import Kernel
    from tracea_cli.api.torch_patch import _Layer

    router = patch.router
    key, layer = next((k, v) for k, v in router.layers.items() if not isinstance(v, str))
    old = layer.kernel
    plan = old.backend.family_of(config).launch(layer.problem, config)
    router.layers[key] = _Layer(layer.problem, Kernel(old.backend, layer.problem, dict(config), old.target),
                                f"splitk_mode={config.get('splitk_mode', 'reduce')}", plan.alignment_bytes)
    router.fast.pop(conv, None)
    conv(x)
    if router.fast.get(conv) is None or router.fast[conv].launch is None:
        raise SystemExit(f"the forced configuration is not on the fast path: {patch.report()}")


def splitk_rows(sync) -> list[tuple[str, str, str, str, str, str]]:
    """(mode, configuration, launches a call, host µs, GPU µs, run-to-run max |diff|) for each splitk_mode."""
    import statistics

    import torch

    import tracea
    from tracea_cli.ops.conv2d.families.implicit_gemm_space import describe, hand_picked

    torch.manual_seed(0)
    conv = torch.nn.Conv2d(512, 512, 3, padding=1).cuda().half().to(memory_format=torch.channels_last)
    x = torch.randn(1, 512, 7, 7, device="cuda", dtype=torch.half).to(memory_format=torch.channels_last)
    rows = []
    with torch.no_grad():
        want = torch.nn.functional.conv2d(x.float(), conv.weight.float(), conv.bias.float(), padding=1)
        with tracea.patch_conv2d(conv, context=tracea.Context(device="cuda", mode="default"),
                                 only_faster=False) as patch:
            conv(x)
            layer = next(v for v in patch.router.layers.values() if not isinstance(v, str))
            problem, kernel = layer.problem, layer.kernel
            picks = hand_picked(problem, kernel.target)
            serial = next((c for c in picks if c.get("splitk_mode") == "serial"), None)
            if serial is None:
                raise SystemExit(f"no serial split-K pick for {problem.label}: {[describe(c) for c in picks]}")
            for config in ({**serial, "splitk_mode": "reduce"}, serial, {**serial, "splitk_mode": "serial_ordered"}):
                artifact = kernel.backend.compile(problem, config, kernel.target)
                ev = kernel.backend.check(artifact, problem, kernel.target, seed=1)
                if not ev.ok:
                    raise SystemExit(f"{describe(config)} failed its check: {ev.status.value}: {ev.reason}")
                _force(patch, conv, x, config)
                first, second = conv(x).float(), conv(x).float()
                err = float((first - want).abs().max())
                if not err <= 0.05 * float(want.abs().max()):
                    raise SystemExit(f"{describe(config)}: routed output differs from torch by {err}")
                host = host_us(sync, lambda: conv(x))
                gpu = []
                for _ in range(20):
                    sync()
                    torch.cuda._sleep(20_000_000)  # ~10 ms of spinning: the 50 calls below queue behind it
                    start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                    start.record()
                    for _ in range(50):
                        conv(x)
                    stop.record()
                    stop.synchronize()
                    gpu.append(start.elapsed_time(stop) * 1e3 / 50)
                run = patch.router.layers[next(iter(patch.router.layers))].kernel.bound
                queued = len(next(iter(run.values()))[0]._queued)
                rows.append((config["splitk_mode"], describe(config), str(queued), f"{host:.2f}",
                             f"{statistics.median(gpu):.2f}", f"{float((first - second).abs().max()):.3g}"))
    return rows


def declined_rows(sync, conv, x) -> list[tuple[str, float]]:
    """The same call with the layer declined (min_flops above its work): what the router adds to torch's own call."""
    import tracea

    with tracea.patch_conv2d(conv, context=tracea.Context(device="cuda", mode="default"), min_flops=10**18) as patch:
        conv(x)
        router = patch.router
        fast = router.fast.get(conv)
        if fast is None or fast.launch is not None:
            raise SystemExit(f"not on the declined fast path: {patch.report()}")
        original = type(conv).forward
        params = conv._parameters
        return [("declined call (module call)", host_us(sync, lambda: conv(x))),
                ("declined: router.forward", host_us(sync, lambda: router.forward(original, conv, x))),
                ("declined: nn.Conv2d.forward alone", host_us(sync, lambda: original(conv, x))),
                ("declined: router.fast.get (WeakKeyDictionary)", host_us(sync, lambda: router.fast.get(conv))),
                ("declined: fast.declined_again", host_us(sync, lambda: fast.declined_again(x, params))),
                ("declined: router.record", host_us(sync, lambda: router.record(fast.label, fast.outcome)))]


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
        rows += declined_rows(sync, conv, x)
    torch.cuda.synchronize()
    stamp = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    lines = [f"# Host time of a routed conv2d call, part by part ({stamp}, {torch.cuda.get_device_name()})", "",
             "Command: `python3 benchmarks/conv_call_parts.py --out OUT.md`. Layer 64 -> 64, 3x3, 14x14, batch 1, fp16 "
             "channels_last, inference. Host time per call: the median of 2000 calls, each timed alone with the GPU "
             "queue empty.", "",
             "| part | µs per call |", "| --- | ---: |"]
    lines += [f"| {name} | {us:.2f} |" for name, us in rows]
    lines += ["", "## split-K: reduce (three launches) against serial and serial_ordered (one launch)", "",
              "Layer 512 -> 512, 3x3, 7x7, batch 1, fp16 channels_last, bias; the hand-picked split configuration "
              "in each mode. Host: µs per routed call (median of 2000, each alone). GPU: µs per routed call (50 "
              "calls queued behind a spin kernel, CUDA events, median of 20).", "",
              "| splitk_mode | configuration | launches queued a call | host µs per routed call | GPU µs per call | "
              "max abs diff between two runs |", "| --- | --- | ---: | ---: | ---: | ---: |"]
    lines += [f"| {' | '.join(r)} |" for r in splitk_rows(sync)]
    open(out, "w").write("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    import argparse

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out_path", nargs="?", help="where the markdown table goes (or --out)")
    parser.add_argument("--out", help="where the markdown table goes")
    args = parser.parse_args()
    main(args.out or args.out_path or "/tmp/conv_call_parts.md")
