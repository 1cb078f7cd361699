"""Why cuBLAS's small-M time moves between runs: rounds of cuBLAS and our pick in turn, and the kernels cuBLAS launches.

    python benchmarks/cublas_small_m_variance.py OUTPUT.md

(16, 4096, 4096) fp16 nn and bf16 nt, timed the way `tracea` times (CUDA events, L2 flushed by a write before each
sample): ROUNDS rounds, each 40 samples of cuBLAS (`cupy.matmul`) then 40 of our small-M pick, so that a drift of the
machine shows in both. Then the CUDA kernels of 20 cuBLAS calls under torch's profiler (CUPTI sees every kernel of the
process, CuPy's included): their names and GPU times, which tell whether cuBLAS changes algorithm between calls.
Every result is checked against the float64 reference before it is timed. Needs a GPU.
"""

from __future__ import annotations

import argparse
import sys
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from tracea_cli.ops.gemm.problem import GemmProblem  # noqa: E402
from tracea_cli.stats import summarize  # noqa: E402
from tracea_cli.timing import TimingPolicy, measure  # noqa: E402
from gpu_run import provenance_lines, run_meta  # noqa: E402

ROUNDS = 8
POLICY = TimingPolicy(warmup=5, min_samples=40, max_samples=40, target_cv=0.0, max_seconds=5.0)
PROBLEMS = (GemmProblem(16, 4096, 4096, "fp16", "nn"), GemmProblem(16, 4096, 4096, "bf16", "nt"))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("output", type=Path)
    args = parser.parse_args(argv)

    import cupy

    from tracea_cli.backends import cuda
    from tracea_cli.backends.checked import check_outputs, poison, upload
    from tracea_cli.backends.cuda_clock import CudaEventClock
    from tracea_cli.backends.op_backend import OpBackend
    from tracea_cli.ops.gemm.baselines import prepare_cublas
    from tracea_cli.ops.gemm.families.engine_space import hand_picked
    from tracea_cli.ops.gemm.op import OP

    backend = OpBackend("gemm", "cuda")
    target = cuda.device_target(0)
    meta = run_meta(target, argv)
    flush = cuda.L2Flush()
    lines = ["# cuBLAS at small M: rounds and kernels", "", *provenance_lines(meta),
             f"- method: {ROUNDS} rounds of {POLICY.max_samples} samples each of cuBLAS then ours (CUDA events, L2 "
             "flushed by a write before every sample), medians in microseconds; then torch's profiler over 20 cuBLAS "
             "calls (kernel names and GPU times).", ""]
    for problem in PROBLEMS:
        inputs = OP.make_inputs(problem, cupy.random.RandomState(1))  # made on the GPU, as the checked path does
        ref = OP.reference(problem, inputs)
        config = hand_picked(problem, target)[0]
        artifact = backend.compile(problem, config, target)
        ops = upload(cupy, problem.tensors(), inputs, problem.dtype)
        kernel = cuda.bind(cuda.load(artifact), backend.family_of(config).args(problem, ops))
        prepared = prepare_cublas(problem, ops)
        name, cublas = prepared.label, prepared.run
        runs = {"cuBLAS": cublas, "ours": kernel}
        for who, run in runs.items():
            poison(ops["C"], problem.dtype)
            run()
            ok, _, reason = check_outputs({"C": ops["C"]}, ref, problem.dtype, {})
            if not ok:
                raise SystemExit(f"{problem.label} {who}: {reason}")
        rounds = defaultdict(list)
        for _ in range(ROUNDS):
            for who, run in runs.items():
                samples = measure(run, clock=CudaEventClock(), policy=POLICY, prepare=flush)
                rounds[who].append(summarize(samples.times_ms))
        lines += [f"## {problem.label}", "", f"cuBLAS through {name}; ours: `{config}`", "",
                  "| round | " + " | ".join(f"{who} median [q1-q3]" for who in runs) + " | cuBLAS / ours |",
                  "| --- |" + " --- |" * (len(runs) + 1)]
        for i in range(ROUNDS):
            cells = [f"{rounds[who][i].median * 1e3:.2f} [{rounds[who][i].q1 * 1e3:.1f}-{rounds[who][i].q3 * 1e3:.1f}]"
                     for who in runs]
            lines.append(f"| {i + 1} | " + " | ".join(cells) + f" | {rounds['cuBLAS'][i].median / rounds['ours'][i].median:.2f} |")
        lines += ["", *profile_kernels(cublas, flush), ""]
        print("\n".join(lines[-ROUNDS - 12:]), flush=True)
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text("\n".join(lines) + "\n")
    print(f"wrote {args.output}")
    return 0


def profile_kernels(run, flush) -> list[str]:
    """The GPU kernels of 20 calls of `run` (after flushes), by name: count and mean GPU time, from torch's profiler."""
    try:
        import torch
        from torch.profiler import ProfilerActivity, profile
    except ImportError:
        return ["(torch is not installed: no kernel list)"]
    import cupy

    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(20):
            flush()
            run()
        cupy.cuda.get_current_stream().synchronize()
        torch.cuda.synchronize()
    rows = ["| kernel | calls | mean GPU µs |", "| --- | --- | --- |"]
    for event in prof.key_averages():
        if event.device_time_total > 0 and "fill" not in event.key:
            rows.append(f"| `{event.key[:110]}` | {event.count} | {event.device_time_total / max(event.count, 1):.2f} |")
    return rows


if __name__ == "__main__":
    raise SystemExit(main())
