#!/usr/bin/env python3
"""The numba CPU conv2d (implicit GEMM) against numpy im2col + BLAS, measured in the same run (issue 13, CPU target).

Run from the repository root:

    .venv/bin/python benchmarks/cpu_conv2d.py                 # fp32, N = 1, four ResNet-50 layers, writes
                                                              # docs/results/cpu_conv2d.md
    .venv/bin/python benchmarks/cpu_conv2d.py --layers 64@56 --output /tmp/cpu_conv2d.md

Target: on the first layer (64->64 @56x56, 3x3, pad 1, fp32, N = 1) the best kernel is at least 0.7x as fast as
numpy im2col + BLAS on the 2-core development machine. Exit code 0 when it is, 1 when it is not.

Procedure, per layer. Every hand-picked configuration (numba_space.hand_picked) is compiled, checked against the
float64 reference on fresh inputs and timed (OpBackend("conv2d", "cpu").evaluate), each right after the numpy
baseline on the same problem (checked and timed the same way), and ranked by its ratio to that neighbouring numpy
figure. Then the best configuration and numpy are re-measured alternately, A B A B, for a few rounds, each measurement
again checked first. The ratio is numpy's median time over the kernel's (above 1: the kernel is faster), both from
the pooled samples of the alternating rounds, with a bootstrap 95% interval (stats.speedup_interval). The machine's
load average is recorded at the start and the end of each layer.
"""

from __future__ import annotations

import argparse
import os
import shlex
import sys
from datetime import datetime, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from cpu_run import required, software_line  # noqa: E402

from tracea_cli.backends.base import Evaluation  # noqa: E402
from tracea_cli.backends.op_backend import OpBackend  # noqa: E402
from tracea_cli.doctor.inventory import probe_cpu  # noqa: E402
from tracea_cli.doctor.profile import cpu_device_class  # noqa: E402
from tracea_cli.ops.conv2d.families.numba_space import describe, hand_picked  # noqa: E402
from tracea_cli.ops.conv2d.problem import Conv2dProblem  # noqa: E402
from tracea_cli.stats import speedup_interval, summarize  # noqa: E402
from tracea_cli.target import Target  # noqa: E402
from tracea_cli.timing import TimingPolicy  # noqa: E402

TARGET_RATIO = 0.70
POLICY = TimingPolicy(warmup=2, min_samples=10, max_samples=40, target_cv=0.03, max_seconds=3.0)
ROUNDS = 3
# name -> (C, K, H = W, R = S, stride); 'same' padding
LAYERS = {"64@56": (64, 64, 56, 3, 1), "128@28": (128, 128, 28, 3, 1), "256@14": (256, 256, 14, 3, 1),
          "1x1 256->64@56": (256, 64, 56, 1, 1)}


def layer(name: str, dtype: str) -> Conv2dProblem:
    c, k, hw, rs, stride = LAYERS[name]
    return Conv2dProblem(1, hw, hw, c, k, rs, rs, stride, stride, rs // 2, rs // 2, dtype=dtype)


def gflops(problem: Conv2dProblem, median_ms: float) -> float:
    return problem.flops / (median_ms * 1e-3) / 1e9


def run(problem: Conv2dProblem, threads: int, seed: int) -> dict:
    backend = OpBackend("conv2d", "cpu")
    # this CPU's device class, as `tracea tune` sees it: its widest vector ISA decides whether zmm kernels are offered
    target = Target(backend="cpu", device_class=cpu_device_class(probe_cpu()), threads=threads)
    load_start = os.getloadavg()

    def numpy(seed_: int) -> Evaluation:
        return required(backend.baseline(problem, target, policy=POLICY, seed=seed_, name="numpy")[1],
                         "numpy im2col + BLAS")

    rows = []
    for i, config in enumerate(hand_picked(problem, target)):
        artifact = backend.compile(problem, config, target)
        ev = backend.evaluate(artifact, problem, target, policy=POLICY, seed=seed + i)  # compiles first
        compile_s = ev.compile_s
        numpy_ev = numpy(seed + i)
        if ev.ok:  # timed again, right after numpy: the pair shares the machine's state
            ev = backend.evaluate(artifact, problem, target, policy=POLICY, seed=seed + i)
        row = {"config": config, "status": ev.status.value, "reason": ev.reason, "compile_s": compile_s,
               "rel_error": ev.rel_error, "numpy_ms": summarize(numpy_ev.samples.times_ms).median}
        if ev.ok:
            row["median_ms"] = summarize(ev.samples.times_ms).median
            row["ratio"] = row["numpy_ms"] / row["median_ms"]
        rows.append(row)
        print(f"  {problem.label} {describe(config)}: {row.get('median_ms', float('nan')):.2f} ms ({ev.status.value}), "
              f"numpy {row['numpy_ms']:.2f} ms", file=sys.stderr)
    ok = [r for r in rows if r["status"] == "ok"]
    if not ok:
        raise SystemExit("no configuration passed its check")
    best = max(ok, key=lambda r: r["ratio"])
    artifact = backend.compile(problem, best["config"], target)
    kernel_ms: list[float] = []
    numpy_ms: list[float] = []
    for r in range(ROUNDS):  # A B A B: the machine drifts, so both are measured in every round
        seed_r = seed + 100 + r
        numpy_ms += numpy(seed_r).samples.times_ms
        kernel_ms += required(backend.evaluate(artifact, problem, target, policy=POLICY, seed=seed_r),
                               "the best kernel").samples.times_ms
    return {"problem": problem, "threads": threads, "rows": rows, "best": best,
            "numpy_ms": summarize(numpy_ms), "kernel_ms": summarize(kernel_ms),
            "ratio": speedup_interval(numpy_ms, kernel_ms), "load": (load_start, os.getloadavg())}


def render(results: list[dict], command: str) -> str:
    cpu = probe_cpu()
    first = results[0]
    held = first["ratio"].estimate >= TARGET_RATIO
    lines = [
        "# CPU conv2d: numba implicit GEMM against numpy im2col + BLAS",
        "",
        f"- Date: {datetime.now(timezone.utc).strftime('%Y-%m-%d %H:%M UTC')}",
        f"- Machine: {cpu.model} ({cpu.threads} logical CPUs, {cpu.arch}; SIMD: {', '.join(cpu.simd) or 'none seen'})",
        f"- Kernel threads: {first['threads']}; numpy uses its BLAS's own threads (the im2col copy is single-threaded)",
        software_line(),
        f"- Command: `{command}` (under `nice -n 5`: the machine is shared)",
        "",
        "## Result",
        "",
        f"Target: on {first['problem'].label}, the kernel ≥ {TARGET_RATIO:.1f}x numpy im2col + BLAS: "
        f"**{'held' if held else 'missed'}** ({first['ratio'].estimate:.2f}x).",
        "",
        "Ratio = numpy's median time / the kernel's over the pooled samples of "
        f"{ROUNDS} alternating rounds (above 1: the kernel is faster), with a bootstrap 95% interval.",
        "",
        "| layer | best configuration | kernel ms (cv, n) | kernel GFLOP/s | numpy ms (cv, n) | numpy GFLOP/s | ratio "
        "(95% interval) | load start / end |",
        "| --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for res in results:
        p, k, n, ratio = res["problem"], res["kernel_ms"], res["numpy_ms"], res["ratio"]
        lines.append(
            f"| {p.label} | `{describe(res['best']['config'])}` | {k.median:.2f} ({k.cv:.2f}, {k.n}) | "
            f"{gflops(p, k.median):.1f} | {n.median:.2f} ({n.cv:.2f}, {n.n}) | {gflops(p, n.median):.1f} | "
            f"**{ratio.estimate:.2f}x** ({ratio.low:.2f}–{ratio.high:.2f}) | "
            f"{res['load'][0][0]:.2f} / {res['load'][1][0]:.2f} |")
    lines += ["", "## Hand-picked configurations (first pass, each checked before timing, each beside numpy)", ""]
    for res in results:
        lines += [f"### {res['problem'].label}", "",
                  "| configuration | status | rel. error | compile s | median ms | numpy ms just before | ratio |",
                  "| --- | --- | --- | --- | --- | --- | --- |"]
        for r in res["rows"]:
            err = f"{r['rel_error']:.2e}" if r["rel_error"] is not None else "–"
            timing = (f"{r['median_ms']:.2f} | {r['numpy_ms']:.2f} | {r['ratio']:.2f}x" if r["status"] == "ok"
                      else f"– | {r['numpy_ms']:.2f} | – ({r['reason']})")
            lines.append(f"| `{describe(r['config'])}` | {r['status']} | {err} | {r['compile_s']:.1f} | {timing} |")
        lines.append("")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--layers", nargs="+", default=list(LAYERS), choices=list(LAYERS),
                        help="the first one is the target's")
    parser.add_argument("--dtype", default="fp32", choices=("fp32", "fp64"))
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--output", type=Path, default=ROOT / "docs" / "results" / "cpu_conv2d.md")
    args = parser.parse_args(argv)
    results = [run(layer(name, args.dtype), args.threads, args.seed) for name in args.layers]
    command = " ".join(shlex.quote(a) for a in [".venv/bin/python", "benchmarks/cpu_conv2d.py", *sys.argv[1:]])
    text = render(results, command)
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(text)
    print(text)
    print(f"wrote {args.output}", file=sys.stderr)
    return 0 if results[0]["ratio"].estimate >= TARGET_RATIO else 1


if __name__ == "__main__":
    sys.exit(main())
