"""fp32 GEMM at fp32 accuracy against cuBLAS SGEMM, issue 17 item 2: 2048^3, 4096^3, (1, 4096, 4096), (16, 4096, 4096).

    python benchmarks/gemm_fp32_h200.py --out OUTPUT.md [--json OUTPUT.json] [--layout nn] [--shapes 1x4096x4096 ...]
        [--families simt,mma]

For each shape: the simt family's hand-picked configurations (the tiled kernel's, and for M <= 16 the gemv kernel's
first, its K slices summed in one launch and then the same with the two-launch sum) plus a few more variants of the
same kernels (every gemv variant that splits K in both splitk_modes, compared in a table of their own); then the mma
family's fp32 kernels (3xTF32 on mma.sync: each operand split into big and small tf32 parts, three products per
step) hand-picked and, for the squares, their large warp tiles in more depths and pipelines; all compiled in
parallel; then cuBLAS SGEMM (cupy.matmul on fp32, CuPy's compute type for fp32 checked to be the default, not TF32:
CUPY_TF32 unset or 0) is timed before every configuration and once more after the last, in alternation in the same
run. Every configuration is checked against
the float64 reference (fresh random inputs, NaN-poisoned output) before it is timed; a wrong one is not timed. Each
configuration's ratio is cuBLAS's median nearest in time (the faster of the measurements before and after it) over
its own median. Timing: CUDA events, L2 flushed between samples, medians. Needs a GPU; about a minute on an H200.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from gpu_run import compile_all, describe, median_ms, num, provenance_lines, resources_of, run_meta  # noqa: E402

from tracea_cli.backends.cuda import device_target  # noqa: E402
from tracea_cli.backends.op_backend import OpBackend  # noqa: E402
from tracea_cli.ops.gemm.families.engine_space import gemm_space, hand_picked  # noqa: E402
from tracea_cli.ops.gemm.problem import GemmProblem  # noqa: E402
from tracea_cli.timing import TimingPolicy  # noqa: E402

POLICY = TimingPolicy(warmup=5, min_samples=15, max_samples=50, target_cv=0.01, max_seconds=0.8)
SHAPES = ((2048, 2048, 2048), (4096, 4096, 4096), (1, 4096, 4096), (16, 4096, 4096))
TARGETS = {"square": 0.95, "small_m": 1.0}  # issue 17: SGEMM squares >= 0.95x cuBLAS, M = 1 and 16 >= 1.0x
PICKS = 6  # hand-picked configurations per shape


def _mma_variants(problem: GemmProblem, target) -> list[dict]:
    """3xTF32 beyond the hand-picked: for the squares, its largest warp tiles (32 x 64, 64 x 32: twice the
    accumulators of a tf32 tile) over depths, pipelines and tile orders."""
    if problem.m <= 16:
        return []
    space = gemm_space(problem, target, "mma")
    raw = [{"family": "mma", "block_m": 128, "block_n": 128, "block_k": bk, "warp_m": wm, "warp_n": wn, "stages": st,
            "split_k": 1, "group_m": g, "vec": 4}
           for wm, wn in ((32, 64), (64, 32)) for bk in (16, 32) for st in (3, 4) for g in (8, 16)]
    return [space.complete(c) for c in raw if space.why_invalid(space.complete(c)) is None]


def _variants(problem: GemmProblem, target) -> list[dict]:
    """Configurations beyond the hand-picked ones: for the squares the tiled kernel's large tiles in other tile
    orders; for a few rows the gemv kernel across its block width, depth and K split. Only valid ones."""
    space = gemm_space(problem, target)
    if problem.m > 16:
        raw = [{"family": "simt", "block_m": bm, "block_n": bn, "block_k": 8, "warp_m": wm, "warp_n": wn, "stages": 2,
                "split_k": 1, "group_m": g, "vec": 4}
               for bm, bn, wm, wn in ((128, 128, 64, 64), (128, 256, 64, 64), (256, 128, 64, 64), (128, 128, 64, 32))
               for g in (4, 16)]
    else:
        rows = 1 if problem.m == 1 else 16
        raw = [{"family": "simt", "kernel": "gemv", "block_m": rows, "block_n": bn, "block_k": bk, "warp_m": 16,
                "warp_n": 32, "stages": 2, "split_k": s, "group_m": 1, "vec": 4, "splitk_mode": mode,
                "prefetch": prefetch}
               for bn, bk in ((128, 32), (128, 64), (64, 32), (256, 64)) for s in (4, 8, 16)
               for mode, prefetch in (("serial", 0), ("sum", 0), ("serial", 1))]
    return [space.complete(c) for c in raw if space.why_invalid(c) is None]


def configurations(problem: GemmProblem, target, families: tuple[str, ...] = ("simt", "mma")) -> list[dict]:
    out: list[dict] = []
    simt = [*hand_picked(problem, target, limit=PICKS), *_variants(problem, target)] if "simt" in families else []
    mma = ([*hand_picked(problem, target, limit=PICKS, family="mma"), *_mma_variants(problem, target)]
           if "mma" in families else [])
    for c in [*simt, *mma]:
        if c not in out:
            out.append(c)
    return out


def twin_pairs(rows: list[dict], name: str, first: object, second: object) -> list[tuple[dict, dict]]:
    """(row with `name` = first, row with `name` = second) of each gemv configuration measured with both values of
    the parameter and otherwise the same (a configuration without the parameter has the space's default)."""
    defaults = {"splitk_mode": "sum", "prefetch": 0}

    def value(c):
        return c.get(name, defaults[name])

    def twin_key(c):
        return tuple(sorted((k, v) for k, v in {**defaults, **c}.items() if k != name))

    gemv = [r for r in rows if r["config"].get("kernel") == "gemv"]
    seconds = {twin_key(r["config"]): r for r in gemv if value(r["config"]) == second}
    return [(r, seconds[twin_key(r["config"])]) for r in gemv
            if value(r["config"]) == first and twin_key(r["config"]) in seconds]


def twin_table(pairs: list[tuple[dict, dict]], title: str, names: tuple[str, str], mode: bool = False) -> list[str]:
    """Markdown lines comparing each pair's two times (the first's / the second's), or none where there are no
    pairs; `mode` adds a splitk_mode column."""
    if not pairs:
        return []
    lines = ["", title, "", f"| block_m x block_n x block_k | split_k | {'splitk_mode | ' if mode else ''}"
             f"{names[0]} ms | {names[1]} ms | {names[0]} / {names[1]} |",
             "| --- | --- | " + ("--- | " if mode else "") + "--- | --- | --- |"]
    for first, second in pairs:
        c = first["config"]
        both = first.get("median_ms") and second.get("median_ms")
        lines.append(f"| {c['block_m']}x{c['block_n']}x{c['block_k']} | {c['split_k']} | "
                     f"{c.get('splitk_mode', 'sum') + ' | ' if mode else ''}{num(first.get('median_ms'), 4)} | "
                     f"{num(second.get('median_ms'), 4)} | "
                     f"{num(first['median_ms'] / second['median_ms'] if both else None, 3)} |")
    return lines


def mode_pairs(rows: list[dict]) -> list[tuple[dict, dict]]:
    """(two-launch sum row, one-launch serial row) of each gemv configuration measured in both splitk_modes."""
    return twin_pairs(rows, "splitk_mode", "sum", "serial")


def _check_no_tf32() -> str:
    """CuPy's compute type for fp32 GEMMs; refuses to run when it is TF32 (the baseline would not be SGEMM)."""
    import numpy as np
    from cupy._core import _routines_linalg as linalg

    kind = linalg.get_compute_type(np.float32)
    if kind == linalg.COMPUTE_TYPE_TF32:
        raise SystemExit("CuPy's fp32 compute type is TF32 (CUPY_TF32=1?): unset it, the baseline must be SGEMM.")
    env = os.environ.get("CUPY_TF32", "unset")
    return f"compute type {kind} (COMPUTE_TYPE_TF32 is {linalg.COMPUTE_TYPE_TF32}), CUPY_TF32={env}"


def bench_shape(backend: OpBackend, problem: GemmProblem, target, families: tuple[str, ...], log) -> dict:
    configs = configurations(problem, target, families)
    built = compile_all(backend, [(problem, c) for c in configs], target)
    name, first = backend.baseline(problem, target, policy=POLICY, seed=1)
    base = [median_ms(first)]
    log(f"  {name}: {first.status.value} {base[-1]} ms, rel. error {first.rel_error} {first.reason}")
    rows = []
    for config, (artifact, error) in zip(configs, built):
        row: dict = {"config": config}
        if artifact is None:
            row.update(status="compile_error", reason=error[:300])
        else:
            ev = backend.evaluate(artifact, problem, target, policy=POLICY, seed=1)
            row.update(status=ev.status.value, reason=ev.reason, rel_error=ev.rel_error, median_ms=median_ms(ev),
                       samples_ms=list(ev.samples.times_ms) if ev.samples else [], **resources_of(artifact))
        _, after = backend.baseline(problem, target, policy=POLICY, seed=1)  # cuBLAS again, after each one
        base.append(median_ms(after))
        near = [m for m in base[-2:] if m]
        row["cublas_ms"] = min(near) if near else None
        row["ratio"] = row["cublas_ms"] / row["median_ms"] if row.get("median_ms") and row["cublas_ms"] else None
        rows.append(row)
        log(f"  {describe(config)}: {row['status']} {num(row.get('median_ms'), 4)} ms, cuBLAS "
            f"{num(row['cublas_ms'], 4)} ms, ratio {num(row['ratio'], 3)} {row.get('reason', '')[:160]}")
    return {"problem": problem.as_dict(), "baseline": name, "baseline_ms": base, "baseline_rel_error": first.rel_error,
            "rows": rows}


def render(results: list[dict], meta: dict) -> str:
    lines = ["# fp32 GEMM (SIMT, and 3xTF32 on mma.sync) against cuBLAS SGEMM (no TF32)", "", *provenance_lines(meta),
             f"- versions: generator {meta['generator']}, NVRTC {meta['nvrtc']}, CuPy {meta['cupy']}, "
             f"Python {meta['python']}; cuBLAS through cupy.matmul, {meta['tf32']}",
             "- method: every configuration checked against the float64 reference before it is timed; cuBLAS timed "
             "before the first configuration and after each one; a row's cuBLAS ms is the faster of the two "
             "measurements around it; CUDA events, L2 flushed between samples, medians "
             f"({POLICY.min_samples}-{POLICY.max_samples} samples, {POLICY.max_seconds} s at most each)", ""]
    lines += ["| problem | best configuration | ms | cuBLAS ms | ratio | rel. error (cuBLAS's) | best simt ratio "
              "| target |",
              "| --- | --- | --- | --- | --- | --- | --- | --- |"]
    for r in results:
        p = GemmProblem(**r["problem"])
        timed = [row for row in r["rows"] if row.get("ratio")]
        best = max(timed, key=lambda row: row["ratio"], default=None)
        simt = max((row["ratio"] for row in timed if row["config"]["family"] == "simt"), default=None)
        target = TARGETS["small_m" if p.m <= 16 else "square"]
        theirs = r.get("baseline_rel_error")
        errors = f"{best['rel_error']:.2e} ({'' if theirs is None else f'{theirs:.2e}'})" if best else "—"
        lines.append(f"| {p.label} | {describe(best['config']) if best else '—'} | "
                     f"{num(best and best['median_ms'], 4)} | {num(best and best['cublas_ms'], 4)} | "
                     f"{num(best and best['ratio'], 3)} | {errors} | {num(simt, 3)} | {target} |")
    for r in results:
        p = GemmProblem(**r["problem"])
        medians = ", ".join(num(m, 4) for m in r["baseline_ms"])
        lines += ["", f"## {p.label}", "", f"cuBLAS medians in order (ms): {medians}",
                  "", "| config | status | ms | cuBLAS ms | ratio | rel. error | regs | spill B | smem B |",
                  "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
        for row in r["rows"]:
            status = row["status"] + (": " + row["reason"][:120] if row.get("reason") else "")
            err = "" if row.get("rel_error") is None else f"{row['rel_error']:.2e}"
            lines.append(f"| {describe(row['config'])} | {status} | {num(row.get('median_ms'), 4)} | "
                         f"{num(row.get('cublas_ms'), 4)} | {num(row.get('ratio'), 3)} | {err} | "
                         f"{row.get('registers', '')} | {row.get('spill_bytes', '')} | {row.get('smem_bytes', '')} |")
        lines += twin_table(mode_pairs(r["rows"]), "gemv split-K: the two-launch sum against the one launch "
                            "(splitk_mode serial), same configuration otherwise; C bit for bit equal in both (checked "
                            "in the emulator tests)", ("sum", "serial"))
        lines += twin_table(twin_pairs(r["rows"], "prefetch", 0, 1), "gemv: the next step's B prefetched (prefetch 1) "
                            "or not (0), same configuration otherwise", ("prefetch 0", "prefetch 1"), mode=True)
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True, help="Markdown table to write")
    parser.add_argument("--json", type=Path, help="also the raw samples as JSON")
    parser.add_argument("--layout", default="nn", choices=("nn", "nt"))
    parser.add_argument("--shapes", nargs="+", metavar="MxNxK", help="only these shapes (default: all four)")
    parser.add_argument("--families", default="simt,mma",
                        help="comma-separated: simt (FMA), mma (3xTF32 on mma.sync); default both")
    args = parser.parse_args(argv)
    families = tuple(f.strip() for f in args.families.split(","))
    if not families or set(families) - {"simt", "mma"}:
        parser.error(f"--families takes simt and/or mma, comma-separated; got {args.families!r}")
    shapes = SHAPES
    if args.shapes:
        try:
            shapes = tuple(tuple(int(x) for x in s.split("x")) for s in args.shapes)
            assert all(len(s) == 3 and min(s) >= 1 for s in shapes)
        except (ValueError, AssertionError):
            parser.error(f"--shapes takes MxNxK triples of positive integers, e.g. 1x4096x4096; got {args.shapes}")
    import json

    tf32 = _check_no_tf32()
    target = device_target(0)
    meta = {**run_meta(target, argv), "tf32": tf32}
    backend = OpBackend("gemm", "cuda")
    results = []
    for m, n, k in shapes:
        problem = GemmProblem(m, n, k, dtype="fp32", layout=args.layout)
        print(problem.label, file=sys.stderr)
        results.append(bench_shape(backend, problem, target, families,
                                   lambda s: print(s, file=sys.stderr, flush=True)))
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(render(results, meta))  # after every shape: a run cut short keeps what it measured
        if args.json:
            args.json.write_text(json.dumps({"meta": meta, "results": results}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
