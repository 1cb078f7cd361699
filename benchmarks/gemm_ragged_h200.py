"""Ragged GEMM shapes against cuBLAS, issue 17 item 1: any M, N, K on the Hopper family's fast path.

    python benchmarks/gemm_ragged_h200.py --out OUTPUT.md [--json OUTPUT.json] [--dtypes fp16 bf16] [--layout nn]

Shapes: (3001, 5003, 2999), (4095, 4097, 4091), (12345, 4096, 1000) (issue 17's targets: >= 1.0x cuBLAS in fp16 and
bf16; fp32 >= 0.95x). Per problem: the wgmma family's default configuration and a few variants of it (tile shapes,
stages, pingpong, clusters, tile order), and the mma.sync family's first hand-picks (staged copies with vector loads
since 2026-12-07); for fp32 (no wgmma) the SIMT family's first hand-picks, staged, and the same tiles reading in
place one element at a time (vec 1, what the tuner found before staging), all compiled in parallel. Where K or N
is not a multiple of 16 bytes the wgmma kernels run behind their staging pre-pass (padded copies of A and/or B in
the workspace), which is part of every timed call; where N is, C is stored element by element (no tensor map over
C). cuBLAS (cupy.matmul) is timed before the first
configuration and after the last; every configuration is checked against the float64 reference (fresh random inputs,
NaN-poisoned output) before it is timed, and a wrong one is not timed. Ratio = the faster cuBLAS median / the
configuration's median. CUDA events, L2 flushed between samples, medians. Needs an sm_90 GPU; a few minutes.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from gpu_run import (  # noqa: E402
    compile_all,
    describe,
    measure_between_baselines,
    num,
    provenance_lines,
    run_meta,
    write_report,
)

from tracea_cli.backends.cuda import device_target  # noqa: E402
from tracea_cli.backends.op_backend import OpBackend  # noqa: E402
from tracea_cli.ops.gemm.families import wgmma_space as hs  # noqa: E402
from tracea_cli.ops.gemm.families.engine_space import hand_picked, staging  # noqa: E402
from tracea_cli.ops.gemm.problem import GemmProblem  # noqa: E402
from tracea_cli.timing import TimingPolicy  # noqa: E402

POLICY = TimingPolicy(warmup=5, min_samples=15, max_samples=40, target_cv=0.01, max_seconds=0.8)
SHAPES = ((3001, 5003, 2999), (4095, 4097, 4091), (12345, 4096, 1000))
TARGETS = {"fp32": 0.95}  # issue 17: ragged fp16/bf16 >= 1.0x cuBLAS, fp32 >= 0.95x
MMA_PICKS = 2
SIMT_PICKS = 4


def wgmma_configs(problem: GemmProblem, target) -> list[dict]:
    """The family's default configuration first, then variants of it that the space admits."""
    space = hs.hopper_space(problem, target)
    default = hs.default_config(problem, target)
    if space is None or default is None:
        return []
    changes = [{}, {"tile_n": 128, "stages": 4}, {"tile_n": 128, "stages": 4, "schedule": "pingpong"},
               {"tile_n": 256, "stages": 4}, {"group_m": 16}, {"group_m": 4}, {"cluster_m": 2},
               {"tile_n": 192, "stages": 4}, {"tile_m": 256, "tile_n": 128, "stages": 4}]
    out: list[dict] = []
    for change in changes:
        config = {**default, **change}
        if space.why_invalid(config) is None and config not in out:
            out.append(config)
    return out


def configurations(problem: GemmProblem, target) -> list[dict]:
    if problem.dtype == "fp32":
        picks = hand_picked(problem, target, limit=SIMT_PICKS)
        in_place = [{**c, "vec": 1, "stage": 0} if "stage" in c else c for c in picks[:2]]
        return [*picks, *(c for c in in_place if c not in picks)]
    mma = [c for c in hand_picked(problem, target, limit=MMA_PICKS) if c.get("family") != "wgmma"]
    return [*wgmma_configs(problem, target), *mma]


def staging_of(problem: GemmProblem, config: dict | None) -> str:
    if config and config.get("family") != "wgmma":
        staged = staging(problem, config)
        parts = (["A padded"] if staged.a else []) + (["B padded"] if staged.b else [])
        if staged.any and problem.n % int(config["vec"]):
            parts.append("C element-wise")
        return ", ".join(parts) or "none"
    staged = hs.staging(problem)
    parts = (["A padded"] if staged.pad_a else []) + ([f"B {staged.b}"] if staged.b else [])
    if hs.ragged_n(problem):
        parts.append("C element-wise")
    return ", ".join(parts) or "none"


def best_row(result: dict, keep) -> dict | None:
    rows = [r for r in result["rows"] if r.get("median_ms") and keep(r["config"])]
    return min(rows, key=lambda r: r["median_ms"], default=None)


def render(results: list[dict], meta: dict) -> str:
    lines = ["# Ragged GEMM shapes against cuBLAS (issue 17, item 1)", "", *provenance_lines(meta),
             "- method: cuBLAS (cupy.matmul) timed before the first configuration and after the last; every "
             "configuration checked against the float64 reference before it is timed (a wrong one is not timed); "
             "staging pre-passes run inside every timed call; ratio = the faster cuBLAS median / the "
             f"configuration's median; CUDA events, L2 flushed between samples, medians ({POLICY.min_samples}-"
             f"{POLICY.max_samples} samples, {POLICY.max_seconds} s at most each)", "",
             "| problem | staging of the best | best | ms | TFLOP/s | best mma.sync / SIMT ms | of them, in place "
             "(vec 1) ms | cuBLAS ms | best / cuBLAS | target |",
             "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for r in results:
        p = GemmProblem(**r["problem"])
        best = best_row(r, lambda c: True)
        engine = best_row(r, lambda c: c.get("family") in ("mma", "simt"))
        in_place = best_row(r, lambda c: c.get("family") in ("mma", "simt") and int(c.get("vec", 1)) == 1)
        ratio = r["base"] / best["median_ms"] if best and r["base"] else None
        lines.append(f"| {p.label} | {staging_of(p, best and best['config'])} | "
                     f"{describe(best['config']) if best else '—'} | {num(best and best['median_ms'], 4)} | "
                     f"{num(best and best['tflops'], 1)} | {num(engine and engine['median_ms'], 4)} | "
                     f"{num(in_place and in_place['median_ms'], 4)} | {num(r['base'], 4)} | {num(ratio, 3)} | "
                     f"{TARGETS.get(p.dtype, 1.0)} |")
    for r in results:
        p = GemmProblem(**r["problem"])
        lines += ["", f"## {p.label}", "", f"{r['baseline']} medians before / after (ms): "
                  f"{num(r['baseline_ms'][0], 4)} / {num(r['baseline_ms'][1], 4)}", "",
                  "| config | status | ms | TFLOP/s | x cuBLAS | rel. error | regs | spill B |",
                  "| --- | --- | --- | --- | --- | --- | --- | --- |"]
        for row in r["rows"]:
            status = row["status"] + (": " + row["reason"][:120] if row.get("reason") else "")
            err = "" if row.get("rel_error") is None else f"{row['rel_error']:.2e}"
            x = r["base"] / row["median_ms"] if row.get("median_ms") and r["base"] else None
            lines.append(f"| {describe(row['config'])} | {status} | {num(row.get('median_ms'), 4)} | "
                         f"{num(row.get('tflops'), 1)} | {num(x, 3)} | {err} | {row.get('registers', '')} | "
                         f"{row.get('spill_bytes', '')} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True, help="Markdown report to write")
    parser.add_argument("--json", type=Path, help="also the raw samples as JSON")
    parser.add_argument("--dtypes", nargs="+", default=["fp16", "bf16"], choices=("fp16", "bf16", "tf32", "fp32"))
    parser.add_argument("--layout", default="nn", choices=("nn", "nt"))
    parser.add_argument("--dry-run", action="store_true", help="compile everything for sm_90a and stop (no GPU)")
    args = parser.parse_args(argv)
    backend = OpBackend("gemm", "cuda")
    problems = [GemmProblem(m, n, k, dtype=d, layout=args.layout) for d in args.dtypes for m, n, k in SHAPES]
    if args.dry_run:
        from tracea_cli.target import Target, limits_for

        target = Target(backend="cuda", device_class="NVIDIA H200", arch="sm_90a", limits=limits_for("sm_90a"))
        for p in problems:
            configs = configurations(p, target)
            built = compile_all(backend, [(p, c) for c in configs], target)
            failed = [e for a, e in built if a is None]
            print(f"{p.label}: {len(configs)} configurations, {len(failed)} failed to compile {failed[:1]}")
        return 0
    target = device_target(0)
    meta = run_meta(target, argv)
    results = []
    for problem in problems:
        print(problem.label, file=sys.stderr, flush=True)
        configs = configurations(problem, target)
        built = compile_all(backend, [(problem, c) for c in configs], target)
        measured = measure_between_baselines(backend, problem, target, configs, built, policy=POLICY,
                                             log=lambda s: print(s, file=sys.stderr, flush=True))
        results.append({"problem": problem.as_dict(), **measured})
        write_report(results, meta, render, args.out, args.json)  # after every problem: a cut run keeps its rows
    print(render(results, meta).split("\n## ")[0])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
