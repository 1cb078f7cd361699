"""The CPU GEMM's hand picks on an AVX2-only CPU: what such a target got before its own vector width (64-byte vectors,
an AVX-512 target's picks) against what it gets now (32-byte vectors, 16 registers), 2048³, alternating rounds.

Without an AVX2-only machine, numba can be told to compile for one (no AVX-512 instructions at all):

    NUMBA_CPU_NAME=haswell NUMBA_CPU_FEATURES=+64bit,+avx,+avx2,+bmi,+bmi2,+cmov,+cx16,+f16c,+fma,+fxsr,+lzcnt,+mmx,\
+movbe,+popcnt,+sse,+sse2,+sse3,+sse4.1,+sse4.2,+ssse3,+xsave .venv/bin/python benchmarks/cpu_gemm_avx2.py --dtype fp32

Every configuration is checked against the float64 reference before it is timed (`OpBackend.evaluate`). Prints one
markdown row per configuration: median of the rounds' medians (ms), GFLOP/s, each round's median.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tracea_cli.backends.op_backend import OpBackend  # noqa: E402
from tracea_cli.ops.gemm.families.numba_space import describe, hand_picked  # noqa: E402
from tracea_cli.ops.gemm.problem import GemmProblem  # noqa: E402
from tracea_cli.target import Target  # noqa: E402
from tracea_cli.timing import TimingPolicy  # noqa: E402

POLICY = TimingPolicy(warmup=2, min_samples=8, max_samples=12, target_cv=0.02, max_seconds=3.0)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dtype", choices=("fp32", "fp64"), default="fp32")
    ap.add_argument("--size", type=int, default=2048)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    problem = GemmProblem(args.size, args.size, args.size, dtype=args.dtype)
    backend = OpBackend("gemm", "cpu")
    arms = []
    for isa in ("avx512f", "avx2"):  # the picks of an AVX-512 target: what an AVX2 one had before
        target = Target(backend="cpu", device_class=f"cpu | {args.threads} threads | {isa}", threads=args.threads)
        arms += [(isa, c, backend.compile(problem, c, target), target) for c in hand_picked(problem, target)]
    times: dict[tuple[str, str], list[float]] = {}
    for rnd in range(args.rounds):
        for isa, config, artifact, target in arms:
            ev = backend.evaluate(artifact, problem, target, policy=POLICY, seed=rnd)
            if not ev.ok:
                raise SystemExit(f"{describe(config)}: {ev.status.value}: {ev.reason}")
            times.setdefault((isa, describe(config)), []).append(statistics.median(ev.samples.times_ms))
    print("| picks of | configuration | median ms | GFLOP/s | rounds (ms) |")
    print("| --- | --- | --- | --- | --- |")
    for (isa, label), ms in times.items():
        m = statistics.median(ms)
        print(f"| {isa} target | `{label}` | {m:.2f} | {2 * args.size ** 3 / m / 1e6:.0f} | "
              + " / ".join(f"{x:.2f}" for x in ms) + " |")


if __name__ == "__main__":
    main()
