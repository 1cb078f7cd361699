#!/usr/bin/env python3
"""The numba CPU GEMM against numpy.matmul, measured in the same run (issue 3, CPU target).

Run from the repository root:

    .venv/bin/python benchmarks/cpu_gemm.py                       # 2048^3 fp32 nn, writes docs/results/cpu_gemm.md
    .venv/bin/python benchmarks/cpu_gemm.py --m 1000 --dtype fp64 --output /tmp/cpu_gemm.md
    .venv/bin/python benchmarks/cpu_gemm.py --config "$(jq -c .winner.config tune.json)"   # a tune's winner

Target (issue 17): the best numba kernel reaches at least 80% of numpy.matmul's FLOP/s (2048^3 fp32 and fp64 on
the 2-core development machine). Exit code 0 when it does, 1 when it does not.

Procedure. Every hand-picked configuration (numba_space.hand_picked), or only the `--config` given (a tuning
winner), is compiled, checked against the float64
reference on fresh inputs and timed (OpBackend("gemm", "cpu").evaluate), each right after numpy.matmul on the same
problem (its `baseline`, checked and timed the same way), and ranked by its ratio to that neighbouring numpy figure.
Then the best configuration and numpy are re-measured alternately, A B A B, for a few rounds, each measurement again
checked first. The ratio is numpy's median time over the kernel's, both from the pooled samples of the alternating
rounds, with a bootstrap 95% interval (stats.speedup_interval). The machine's load average is recorded at the start
and the end: other work on a 2-core machine moves both figures, the ratio much less.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import sys
from datetime import datetime, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from cpu_run import required, software_line  # noqa: E402

from tracea_cli.backends.op_backend import OpBackend  # noqa: E402
from tracea_cli.doctor.inventory import probe_cpu  # noqa: E402
from tracea_cli.ops.gemm.families.numba_space import describe, hand_picked  # noqa: E402
from tracea_cli.ops.gemm.problem import GemmProblem  # noqa: E402
from tracea_cli.stats import speedup_interval, summarize  # noqa: E402
from tracea_cli.target import Target  # noqa: E402
from tracea_cli.timing import TimingPolicy  # noqa: E402

TARGET_RATIO = 0.80
POLICY = TimingPolicy(warmup=2, min_samples=10, max_samples=40, target_cv=0.03, max_seconds=4.0)
ROUNDS = 3


def gflops(problem: GemmProblem, median_ms: float) -> float:
    return problem.flops / (median_ms * 1e-3) / 1e9


def run(problem: GemmProblem, threads: int, seed: int, configs: list[dict] | None = None) -> dict:
    backend = OpBackend("gemm", "cpu")
    target = Target(backend="cpu", device_class="this machine", threads=threads)
    load_start = os.getloadavg()
    rows = []
    for i, config in enumerate(configs or hand_picked(problem, target)):
        artifact = backend.compile(problem, config, target)
        ev = backend.evaluate(artifact, problem, target, policy=POLICY, seed=seed + i)  # compiles first
        compile_s = ev.compile_s
        numpy_ev = required(backend.baseline(problem, target, policy=POLICY, seed=seed + i)[1], "numpy.matmul")
        if ev.ok:  # timed again, right after numpy: the pair shares the machine's state
            ev = backend.evaluate(artifact, problem, target, policy=POLICY, seed=seed + i)
        row = {"config": config, "status": ev.status.value, "reason": ev.reason, "compile_s": compile_s,
               "rel_error": ev.rel_error, "numpy_gflops": gflops(problem, summarize(numpy_ev.samples.times_ms).median)}
        if ev.ok:
            row["median_ms"] = summarize(ev.samples.times_ms).median
            row["gflops"] = gflops(problem, row["median_ms"])
            row["ratio"] = row["gflops"] / row["numpy_gflops"]
        rows.append(row)
        print(f"  {describe(config)}: {row.get('gflops', float('nan')):.1f} GFLOP/s ({ev.status.value}), "
              f"numpy {row['numpy_gflops']:.1f}", file=sys.stderr)
    ok = [r for r in rows if r["status"] == "ok"]
    if not ok:
        raise SystemExit("no configuration passed its check")
    best = max(ok, key=lambda r: r["ratio"])
    artifact = backend.compile(problem, best["config"], target)
    kernel_ms: list[float] = []
    numpy_ms: list[float] = []
    for r in range(ROUNDS):  # A B A B: the machine drifts, so both are measured in every round
        seed_r = seed + 100 + r
        numpy_ms += required(backend.baseline(problem, target, policy=POLICY, seed=seed_r)[1], "numpy.matmul").samples.times_ms
        kernel_ms += required(backend.evaluate(artifact, problem, target, policy=POLICY, seed=seed_r), "the best kernel").samples.times_ms
    interval = speedup_interval(numpy_ms, kernel_ms)  # >1: the kernel is faster than numpy
    return {
        "problem": problem, "threads": threads, "rows": rows, "best": best,
        "numpy_ms": summarize(numpy_ms), "kernel_ms": summarize(kernel_ms), "ratio": interval,
        "load": (load_start, os.getloadavg()),
    }


def render(result: dict, command: str) -> str:
    p: GemmProblem = result["problem"]
    cpu = probe_cpu()
    ratio = result["ratio"]
    kernel_gflops = gflops(p, result["kernel_ms"].median)
    numpy_gflops = gflops(p, result["numpy_ms"].median)
    held = ratio.estimate >= TARGET_RATIO
    lines = [
        "# CPU GEMM: numba kernel against numpy.matmul",
        "",
        f"- Date: {datetime.now(timezone.utc).strftime('%Y-%m-%d %H:%M UTC')}",
        f"- Device: {cpu.model} ({cpu.threads} logical CPUs, {cpu.arch}; SIMD: {', '.join(cpu.simd) or 'none seen'})",
        f"- Problem: {p.label}, {result['threads']} threads for the kernel; numpy uses its BLAS's own threads",
        software_line(),
        f"- Command: `{command}`",
        f"- Load average (1 min) at start / end: {result['load'][0][0]:.2f} / {result['load'][1][0]:.2f} "
        "(other work on the machine slows both sides)",
        "",
        "## Result",
        "",
        f"Best kernel {kernel_gflops:.1f} GFLOP/s, numpy.matmul {numpy_gflops:.1f} GFLOP/s, in {ROUNDS} alternating rounds: "
        f"**{100 * ratio.estimate:.0f}%** of numpy (95% interval {100 * ratio.low:.0f}–{100 * ratio.high:.0f}%). "
        f"Target ≥ {100 * TARGET_RATIO:.0f}%: **{'held' if held else 'missed'}**.",
        "",
        f"Best configuration: `{describe(result['best']['config'])}`. Kernel median {result['kernel_ms'].median:.2f} ms "
        f"(cv {result['kernel_ms'].cv:.3f}, n {result['kernel_ms'].n}); numpy median {result['numpy_ms'].median:.2f} ms "
        f"(cv {result['numpy_ms'].cv:.3f}, n {result['numpy_ms'].n}).",
        "",
        "## Configurations measured (first pass, each checked before timing, each beside numpy)",
        "",
        "| configuration | status | rel. error | compile s | median ms | GFLOP/s | numpy GFLOP/s just before | ratio |",
        "| --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for r in result["rows"]:
        err = f"{r['rel_error']:.2e}" if r["rel_error"] is not None else "–"
        if r["status"] == "ok":
            timing = f"{r['median_ms']:.2f} | {r['gflops']:.1f} | {r['numpy_gflops']:.1f} | {100 * r['ratio']:.0f}%"
        else:
            timing = f"– | – | {r['numpy_gflops']:.1f} | – ({r['reason']})"
        lines.append(f"| `{describe(r['config'])}` | {r['status']} | {err} | {r['compile_s']:.1f} | {timing} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--m", type=int, default=2048)
    parser.add_argument("--n", type=int)
    parser.add_argument("--k", type=int)
    parser.add_argument("--dtype", default="fp32", choices=("fp32", "fp64"))
    parser.add_argument("--layout", default="nn", choices=("nn", "nt"))
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--config", type=json.loads, help="one configuration as JSON (e.g. a tune's winner)")
    parser.add_argument("--output", type=Path, default=ROOT / "docs" / "results" / "cpu_gemm.md")
    args = parser.parse_args(argv)
    problem = GemmProblem(args.m, args.n or args.m, args.k or args.m, dtype=args.dtype, layout=args.layout)
    result = run(problem, args.threads, args.seed, [args.config] if args.config else None)
    command = " ".join(shlex.quote(a) for a in [".venv/bin/python", "benchmarks/cpu_gemm.py", *sys.argv[1:]])
    text = render(result, command)
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(text)
    print(text)
    print(f"wrote {args.output}", file=sys.stderr)
    return 0 if result["ratio"].estimate >= TARGET_RATIO else 1


if __name__ == "__main__":
    sys.exit(main())
