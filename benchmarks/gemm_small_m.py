"""Small-M GEMM (a few rows of C, bound by reading B): sliced-K mma.sync candidates against cuBLAS, in the same run.

    python benchmarks/gemm_small_m.py OUTPUT.md [--json OUTPUT.json] [--dry-run]

Problems: (16, 4096, 4096) fp16 nn and bf16 nt, (1, 4096, 4096) and (64, 4096, 4096) fp16 nn. Candidates per
problem: sliced-K configurations of the mma family (one launch, no workspace; some with split-K on top), the
hand-picked ones (`hand_picked`: the sliced-K pick and the older split-K pick), and the wgmma family's best-known
small-M configuration. All candidates are compiled first, in parallel (NVRTC releases the GIL). Then for each
problem: cuBLAS, every candidate (checked against the float64 reference before it is timed), cuBLAS again; the
faster cuBLAS median is the reference (ratio = cuBLAS / ours, above 1 is faster than cuBLAS). The memory floor is the
fewest bytes (A, B and C once) over the H200's measured copy rate. Writes Markdown (date, device, command, every
figure) after each problem, and optionally JSON with the raw samples. Needs a GPU, except `--dry-run`: compile
every candidate for sm_90 here and print its resources.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from gpu_run import (  # noqa: E402
    compile_all,
    describe,
    measure_between_baselines,
    num,
    provenance_lines,
    resources_of,
    run_meta,
    write_report,
)

from tracea_cli.backends.op_backend import OpBackend  # noqa: E402
from tracea_cli.ops.dtypes import get_dtype  # noqa: E402
from tracea_cli.ops.gemm.families.engine_space import gemm_space, hand_picked, vector_widths  # noqa: E402
from tracea_cli.ops.gemm.problem import GemmProblem  # noqa: E402
from tracea_cli.timing import TimingPolicy  # noqa: E402

POLICY = TimingPolicy(warmup=10, min_samples=30, max_samples=100, target_cv=0.01, max_seconds=1.0)
COPY_RATE = 4.19e12  # bytes/s, the H200's measured device copy rate (docs/hopper-notes.md)
PROBLEMS = (GemmProblem(16, 4096, 4096, "fp16", "nn"), GemmProblem(16, 4096, 4096, "bf16", "nt"),
            GemmProblem(1, 4096, 4096, "fp16", "nn"), GemmProblem(64, 4096, 4096, "fp16", "nn"))
WGMMA_SMALL_M = {"family": "wgmma", "tile_m": 64, "tile_n": 64, "stages": 6, "consumers": 1,
                 "schedule": "cooperative", "cluster_m": 1, "persistent": 0, "group_m": 1, "store": "direct"}
# Sliced-K candidates: (block_m, block_n, block_k, warp_m, warp_n, stages, slice_k, split_k[, cluster_k]), none spilling on sm_90
# (--dry-run). 16- and 32-row tiles for M <= 32; 64-row tiles, and 32-row ones (two blocks per tile column), for M = 64.
SLICED_32 = (
    # K split across a cluster of 2 or 4 blocks (the 9th field), wider tiles: B read in 128- or 256-byte row pieces
    (16, 64, 256, 16, 32, 4, 4, 1, 2),
    (16, 64, 256, 16, 32, 5, 4, 1, 2),
    (16, 64, 256, 16, 64, 4, 8, 1, 2),
    (16, 64, 128, 16, 32, 5, 4, 1, 2),
    (16, 128, 128, 16, 64, 4, 4, 1, 4),
    (16, 128, 128, 16, 32, 4, 8, 1, 4),
    (32, 64, 256, 16, 32, 4, 4, 1, 2),
    (16, 32, 256, 16, 32, 5, 8, 1),
    (16, 32, 256, 16, 32, 4, 8, 1),
    (16, 32, 256, 16, 32, 5, 4, 1),
    (16, 32, 128, 16, 32, 5, 8, 1),
    (32, 32, 256, 32, 32, 5, 8, 1),
    (32, 32, 256, 32, 32, 4, 8, 1),
    (32, 32, 256, 32, 32, 3, 8, 1),
    (32, 32, 256, 32, 32, 5, 4, 1),
    (32, 32, 256, 32, 32, 5, 4, 2),
    (32, 32, 256, 16, 32, 5, 4, 1),
    (32, 32, 128, 32, 32, 5, 8, 1),
    (32, 32, 128, 32, 32, 5, 4, 1),
    (32, 32, 64, 32, 32, 5, 4, 1),
    (32, 64, 256, 32, 32, 4, 4, 1),
    (32, 64, 256, 32, 64, 3, 8, 1),
    (32, 32, 128, 32, 32, 4, 8, 2),
    (32, 64, 128, 32, 32, 4, 4, 2),
)
SLICED_64 = (
    (64, 32, 256, 32, 32, 4, 8, 1),
    (64, 32, 256, 32, 32, 4, 4, 1),
    (64, 32, 256, 64, 32, 4, 8, 1),
    (64, 32, 256, 32, 32, 3, 8, 1),
    (64, 32, 128, 32, 32, 5, 4, 1),
    (64, 32, 128, 64, 32, 5, 8, 1),
    (64, 64, 128, 32, 32, 4, 4, 1),
    (32, 32, 256, 32, 32, 3, 8, 1),
    (32, 32, 256, 32, 32, 5, 8, 1),
    (32, 32, 128, 32, 32, 4, 8, 1),
)


def candidates(problem: GemmProblem, target) -> tuple[list[dict], list[str]]:
    """(configurations in the space, in order, without repeats; notes on the ones left out and why)."""
    space = gemm_space(problem, target)
    vec = next(v for v in vector_widths(problem.dtype) if problem.k % v == 0 and problem.n % v == 0)
    configs: list[dict] = []
    notes: list[str] = []
    for bm, bn, bk, wm, wn, stages, slice_k, split_k, *cluster in SLICED_32 if problem.m <= 32 else SLICED_64:
        config = {"family": "mma", "block_m": bm, "block_n": bn, "block_k": bk, "warp_m": wm, "warp_n": wn,
                  "stages": stages, "split_k": split_k, "group_m": 1, "vec": vec, "slice_k": slice_k,
                  **({"cluster_k": cluster[0]} if cluster else {})}
        reason = space.why_invalid(config)
        if reason:
            notes.append(f"{describe(config)}: {reason}")
        elif config not in configs:
            configs.append(config)
    for config in hand_picked(problem, target, limit=2) + [dict(WGMMA_SMALL_M)]:
        if config not in configs:
            configs.append(config)
    return configs, notes



def floor_ms(problem: GemmProblem) -> float:
    elem = get_dtype(problem.dtype).storage_bytes
    return (problem.m * problem.k + problem.k * problem.n + problem.m * problem.n) * elem / COPY_RATE * 1e3



def bench_problem(backend, problem, target, configs, built, *, log) -> dict:
    run = measure_between_baselines(backend, problem, target, configs, built, policy=POLICY, log=log)
    base = run.pop("base")
    for row in run["rows"]:
        row["ratio"] = base / row["median_ms"] if base and row.get("median_ms") else None
    best = min((r for r in run["rows"] if r.get("median_ms")), key=lambda r: r["median_ms"], default=None)
    return {"problem": problem.as_dict(), "label": problem.label, **run, "floor_ms": floor_ms(problem),
            "best": best and {"config": best["config"], "median_ms": best["median_ms"], "ratio": best["ratio"]}}


def render(results: list[dict], meta: dict) -> str:
    lines = [
        "# Small-M GEMM: sliced K against cuBLAS",
        "",
        *provenance_lines(meta),
        f"- versions: NVRTC {meta['nvrtc']}, CuPy {meta['cupy']}, Python {meta['python']}",
        "- method: every candidate is checked against the float64 reference (fresh random inputs, output poisoned "
        f"with NaN) before it is timed; CUDA events, L2 flushed between samples, {POLICY.warmup} warm-up runs, "
        f"{POLICY.min_samples}-{POLICY.max_samples} samples, medians, the whole launch sequence (split-K memset and "
        "reduction included). cuBLAS is timed before and after the candidates; the faster median counts. Ratio = "
        f"cuBLAS / ours. Floor: A, B and C moved once at {COPY_RATE / 1e12:.2f} TB/s.",
        "",
        "## Summary",
        "",
        "| problem | floor ms | cuBLAS ms (before / after) | best ms | ratio | best configuration |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for r in results:
        best = r["best"] or {}
        before, after = (num(x, 4) or "failed" for x in r["baseline_ms"])
        lines.append(f"| {r['label']} | {num(r['floor_ms'], 4)} | {before} / {after} | "
                     f"{num(best.get('median_ms'), 4)} | {num(best.get('ratio'), 2)} | "
                     f"{describe(best['config']) if best else '—'} |")
    for r in results:
        lines += ["", f"## {r['label']}", "", "cuBLAS: " + ", ".join(r["baseline_status"]), "",
                  "| configuration | status | median ms | cv | n | ratio | of floor | rel. error | threads | regs | "
                  "spill B | smem B |",
                  "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
        for row in r["rows"]:
            status = row["status"] + (": " + row["reason"][:120] if row.get("reason") else "")
            share = r["floor_ms"] / row["median_ms"] if row.get("median_ms") else None
            cells = [describe(row["config"]), status, num(row.get("median_ms"), 4), num(row.get("cv"), 3),
                     str(row.get("n", 0)), num(row.get("ratio"), 2), "" if share is None else f"{100 * share:.0f}%",
                     "" if row.get("rel_error") is None else f"{row['rel_error']:.2e}", str(row.get("threads", "")),
                     str(row.get("registers", "")), str(row.get("spill_bytes", "")), str(row.get("smem_bytes", ""))]
            lines.append("| " + " | ".join(cells) + " |")
        for note in r.get("notes", []):
            lines.append(f"\nLeft out: {note}")
    return "\n".join(lines) + "\n"


def dry_run() -> int:
    """Compile every candidate for sm_90 here (no GPU) and print its resources."""
    from dataclasses import replace

    from tracea_cli.target import Target, limits_for

    target = Target(backend="cuda", device_class="H200 (dry run)", arch="sm_90",
                    limits=replace(limits_for("sm_90"), sm_count=132))
    backend = OpBackend("gemm", "cuda")
    jobs, failures = [], 0
    for problem in PROBLEMS:
        configs, notes = candidates(problem, target)
        jobs += [(problem, c) for c in configs]
        for note in notes:
            print(f"{problem.label}: left out {note}")
    t0 = time.perf_counter()
    built = compile_all(backend, jobs, target)
    print(f"compiled {len(jobs)} candidates in {time.perf_counter() - t0:.1f} s")
    for (problem, config), (artifact, error) in zip(jobs, built):
        if artifact is None:
            failures += 1
            print(f"{problem.label} {describe(config)}: COMPILE ERROR {error[:300]}")
            continue
        r = resources_of(artifact)
        print(f"{problem.label} {describe(config)}: threads {r['threads']} regs {r['registers']} "
              f"spill {r['spill_bytes']} smem {r['smem_bytes']} steps {[s.as_dict()['kind'] for s in artifact.plan.steps]}")
    return 1 if failures else 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("output", type=Path, nargs="?", help="Markdown results file to write")
    parser.add_argument("--json", type=Path, help="also write every figure and raw sample as JSON")
    parser.add_argument("--dry-run", action="store_true", help="compile every candidate for sm_90 and stop (no GPU)")
    args = parser.parse_args(argv)
    if args.dry_run:
        return dry_run()
    if args.output is None:
        parser.error("OUTPUT.md is needed unless --dry-run")

    from tracea_cli.backends.cuda import device_target

    target = device_target(0)
    backend = OpBackend("gemm", "cuda")
    meta = run_meta(target, argv)
    plans = [(problem, *candidates(problem, target)) for problem in PROBLEMS]
    jobs = [(problem, c) for problem, configs, _ in plans for c in configs]
    t0 = time.perf_counter()
    built = iter(compile_all(backend, jobs, target))
    print(f"compiled {len(jobs)} candidates in {time.perf_counter() - t0:.1f} s", flush=True)
    results = []
    for problem, configs, notes in plans:
        print(problem.label, flush=True)
        mine = [next(built) for _ in configs]
        results.append({**bench_problem(backend, problem, target, configs, mine, log=lambda s: print(s, flush=True)),
                        "notes": notes})
        best = results[-1]["best"]
        print(f"  best: {best and round(best['median_ms'], 4)} ms, ratio {best and best['ratio'] and round(best['ratio'], 2)}",
              flush=True)
        write_report(results, meta, render, args.output, args.json)
    print(f"wrote {args.output}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
