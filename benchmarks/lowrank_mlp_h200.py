"""lowrank-mlp on a GPU (issue 15): tune through the real CLI, then re-measure the winners beside torch unfused and the
memory floor, fp16, bf16 and fp32; a correctness sweep of awkward shapes on the side. One call, about 240 s.

    python benchmarks/lowrank_mlp_h200.py [--out DIR] [--seconds 240] [--dry-run]

1. bandwidth: a device copy of 1 GiB (bytes read + written), median of 10: the memory floor of a problem is x read
   and y written once (LowrankMlpProblem.floor_bytes) at this rate.
2. tune: per problem `python -m tracea_cli tune lowrank-mlp ... --backend cuda --json` with a budget and a time limit
   (a fresh cache under OUT): every candidate compiled, checked against the float64 reference, then timed; the
   tuner's baseline is torch unfused (x@U, @V, bias, activation as separate ops). Its winner, baseline, failures and
   compile errors go into the report as the CLI printed them.
3. same run, A B A B: torch unfused, the tuned winner, the first hand-picked configuration of each CUDA family,
   torch unfused again (each checked before it is timed); ratio = torch's faster median / ours.
4. sweep: the first picks of each family on shapes no tile divides (M ragged, rank 16/48/100, d_in ≠ d_out, every
   activation, residual, both layouts, T in fp32), checked against the float64 reference (not timed).

Writes OUT/lowrank_mlp_h200.md and .json (OUT: --out, else $OUT, else /tmp/out) after every problem, so a run cut
short keeps what it measured. One failing variant never stops the rest; compile errors are printed in full.
`--dry-run` (no GPU): builds the plan and compiles step 3's candidates for sm_90a here.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from gpu_run import compile_all, describe, measure_between_baselines, num, provenance_lines, run_meta  # noqa: E402

from tracea_cli.backends.op_backend import OpBackend  # noqa: E402
from tracea_cli.ops.lowrank_mlp.problem import LowrankMlpProblem  # noqa: E402
from tracea_cli.timing import TimingPolicy  # noqa: E402

OP = "lowrank-mlp"
POLICY = TimingPolicy(warmup=5, min_samples=15, max_samples=40, target_cv=0.02, max_seconds=0.5)


def _layer(m: int, rank: int, dtype: str, **fields: Any) -> LowrankMlpProblem:
    return LowrankMlpProblem(m, 4096, rank, 4096, dtype, act="silu", **fields)


# (problem, tune budget, what the issue asks of it: (kind, value)); most important first (the deadline cuts the tail)
PROBLEMS = (
    (_layer(16384, 64, "fp16"), 10, ("floor", 0.6)),
    (_layer(16384, 256, "fp16"), 10, ("torch", 3.0)),
    (_layer(16384, 512, "fp16"), 6, ("torch", 2.0)),
    (_layer(4096, 64, "fp16"), 8, ("torch", 3.0)),
    (_layer(4096, 256, "fp16"), 8, ("torch", 3.0)),
    (_layer(16384, 64, "bf16"), 8, ("torch", 3.0)),
    (_layer(16384, 256, "bf16"), 8, ("torch", 3.0)),
    (_layer(16384, 64, "fp32"), 6, ("torch", 1.5)),
    (_layer(4096, 512, "fp16"), 6, ("torch", 2.0)),
    (_layer(16384, 64, "fp16", intermediate="fp32"), 6, ("torch", 3.0)),
)
SWEEP = tuple(LowrankMlpProblem(*shape, dtype, act=act, residual=residual, layout=layout, intermediate=middle)
              for shape, dtype, act, residual, layout, middle in (
                  ((1000, 512, 16, 768), "fp16", "silu", False, "nn", "dtype"),
                  ((777, 1024, 48, 512), "bf16", "gelu", True, "nt", "dtype"),
                  ((3000, 1000, 100, 1500), "fp16", "relu", True, "nn", "fp32"),
                  ((1000, 4096, 64, 1024), "bf16", "none", False, "nt", "fp32"),
                  ((300, 800, 256, 1000), "fp16", "silu", False, "nn", "dtype"),
                  ((1000, 1024, 300, 1024), "fp16", "gelu", False, "nt", "dtype"),
                  ((513, 640, 100, 700), "fp32", "relu", True, "nn", "dtype")))


def log(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


def bandwidth_bytes_per_s() -> float:
    """Device copy of 1 GiB, bytes read + written, median of 10 (CUDA events)."""
    import cupy

    src = cupy.ones(1 << 27, dtype=cupy.float64)
    dst = cupy.empty_like(src)
    start, stop = cupy.cuda.Event(), cupy.cuda.Event()
    times = []
    for i in range(13):
        start.record()
        cupy.copyto(dst, src)
        stop.record()
        stop.synchronize()
        if i >= 3:
            times.append(cupy.cuda.get_elapsed_time(start, stop) * 1e-3)
    times.sort()
    return 2 * src.nbytes / times[len(times) // 2]


def options(problem: LowrankMlpProblem) -> list[str]:
    p = problem
    out = ["--m", str(p.m), "--d-in", str(p.d_in), "--rank", str(p.rank), "--d-out", str(p.d_out), "--dtype", p.dtype,
           "--act", p.act, "--layout", p.layout, "--intermediate", p.intermediate]
    return out + ["--bias" if p.bias else "--no-bias", "--residual" if p.residual else "--no-residual"]


def tune(problem: LowrankMlpProblem, budget: int, seconds: float, out: Path) -> dict[str, Any]:
    """The real tune path, in its own process; its JSON result (or why there is none)."""
    env = {**os.environ, "TRACEA_CACHE_DIR": str(out / "cache"), "TRACEA_DATA_DIR": str(out / "data"), "NO_COLOR": "1"}
    command = [sys.executable, "-m", "tracea_cli", "tune", OP, *options(problem), "--backend", "cuda", "--budget",
               str(budget), "--time-limit", str(int(seconds)), "--json"]
    t0 = time.perf_counter()
    try:
        done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=seconds + 90)
    except subprocess.TimeoutExpired:
        return {"error": f"tune did not finish within {seconds + 90:.0f} s", "wall_s": time.perf_counter() - t0}
    wall = time.perf_counter() - t0
    if done.returncode != 0:
        log(done.stderr[-4000:])
        return {"error": f"tune exited {done.returncode}: {done.stderr.strip()[-1500:]}", "wall_s": wall}
    result = json.loads(done.stdout)
    result["wall_s"] = wall
    for failure in result.get("failures", []):  # compile errors and wrong results, printed in full
        log(f"  failure {failure.get('status')}: {failure.get('config')}\n{failure.get('reason', '')}")
    return result


def remeasure(backend: OpBackend, problem: LowrankMlpProblem, target: Any, winner: dict | None) -> dict[str, Any]:
    """torch unfused, the tuned winner and each family's first pick, torch again (each checked before it is timed)."""
    configs: list[dict] = [dict(winner)] if winner else []
    for family, _ in backend.spaces(problem, target):
        picks = family.suggested(problem, target)
        if picks and dict(picks[0]) not in configs:
            configs.append(dict(picks[0]))
    built = compile_all(backend, [(problem, c) for c in configs], target)
    for config, (artifact, error) in zip(configs, built):
        if artifact is None:
            log(f"  compile error for {describe(config)}:\n{error}")
    return measure_between_baselines(backend, problem, target, configs, built, policy=POLICY, log=log)


def sweep(backend: OpBackend, target: Any) -> list[dict[str, Any]]:
    rows = []
    for problem in SWEEP:
        for family, _ in backend.spaces(problem, target):
            for config in family.suggested(problem, target)[:1]:
                try:
                    ev = backend.check(backend.compile(problem, config, target), problem, target, seed=5)
                    row = {"problem": problem.label, "config": config, "status": ev.status.value,
                           "rel_error": ev.rel_error, "reason": ev.reason}
                except Exception as e:  # a compile error is a finding, not the end of the run
                    row = {"problem": problem.label, "config": config, "status": "error", "reason": str(e)}
                log(f"  sweep {problem.label} {family.name}: {row['status']} {row.get('rel_error')} "
                    f"{row['reason'][:300]}")
                rows.append(row)
    return rows


def verdict(kind: str, value: float, row: dict[str, Any]) -> str:
    if kind == "floor":
        share = row.get("floor_share")
        if share is None:
            return ""
        return f"{'yes' if share >= value else 'NO'} ({share:.0%} of the floor's speed, target {value:.0%})"
    ratio = row.get("ratio")
    return "" if ratio is None else f"{'yes' if ratio >= value else 'NO'} ({ratio:.2f}x torch, target {value}x)"


def render(results: list[dict], meta: dict) -> str:
    lines = ["# lowrank-mlp on the GPU (issue 15)", "", *provenance_lines(meta),
             f"- memory bandwidth (device copy of 1 GiB, read + written): {meta.get('bandwidth_tb_s', 0):.2f} TB/s",
             "- method: `tracea tune` (the real CLI, fresh cache: every candidate checked against the float64 "
             "reference before it is timed), then in one process torch unfused, the winner, each family's first "
             "pick, torch unfused again; ratio = torch's faster median / ours. Memory floor: x read + y written "
             "once at the measured bandwidth.", "",
             "| problem | tuned winner | ms | torch unfused ms | ratio | floor ms | % of floor speed | target met | "
             "tune: evaluations, failures, s |", "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for r in results:
        if "problem" not in r or r.get("kind") == "sweep":
            continue
        t = r.get("tune", {})
        lines.append(f"| {r['problem']} | {r.get('winner_family', '')} | {num(r.get('winner_ms'), 4)} | "
                     f"{num(r.get('torch_ms'), 4)} | {num(r.get('ratio'), 2)} | {num(r.get('floor_ms'), 4)} | "
                     f"{num(100 * r['floor_share'] if r.get('floor_share') else None, 0)} | {r.get('verdict', '')} | "
                     f"{t.get('evaluations', '')}, {len(t.get('failures', []))}, {num(t.get('wall_s'), 0)} "
                     f"{t.get('error', '')[:200]} |")
    for r in results:
        if r.get("kind") == "sweep":
            lines += ["", "## Correctness sweep (first pick per family, checked, not timed)", "",
                      "| problem | configuration | status | rel. error | reason |", "| --- | --- | --- | --- | --- |"]
            lines += [f"| {s['problem']} | {describe(s['config'])} | {s['status']} | {s.get('rel_error')} | "
                      f"{s['reason'][:200]} |" for s in r["rows"]]
    for r in results:
        if r.get("kind") == "sweep" or "measured" not in r:
            continue
        m = r["measured"]
        lines += ["", f"## {r['problem']}", "",
                  f"torch unfused: {m['baseline']} {m['baseline_ms']} ({m['baseline_status']})",
                  "", "| configuration | status | ms | TFLOP/s | rel. error | regs | spill B | smem B | reason |",
                  "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
        for row in m["rows"]:
            lines.append(f"| {describe(row['config'])} | {row['status']} | {num(row.get('median_ms'), 4)} | "
                         f"{num(row.get('tflops'), 1)} | {row.get('rel_error')} | {row.get('registers', '')} | "
                         f"{row.get('spill_bytes', '')} | {row.get('smem_bytes', '')} | "
                         f"{row.get('reason', '')[:200]} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python benchmarks/lowrank_mlp_h200.py", description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=Path(os.environ.get("OUT", "/tmp/out")))
    parser.add_argument("--seconds", type=float, default=240.0, help="the whole run's deadline")
    parser.add_argument("--dry-run", action="store_true", help="no GPU: compile step 3's candidates for sm_90a")
    args = parser.parse_args(argv)
    start = time.perf_counter()
    out: Path = args.out
    out.mkdir(parents=True, exist_ok=True)
    backend = OpBackend(OP, "cuda")
    if args.dry_run:
        from tracea_cli.target import arch_target

        target = arch_target("sm_90a")
        for problem, _, _ in PROBLEMS:
            configs = [dict(c) for f, _ in backend.spaces(problem, target) for c in f.suggested(problem, target)[:1]]
            built = compile_all(backend, [(problem, c) for c in configs], target)
            for config, (artifact, error) in zip(configs, built):
                kernels = artifact.resources["kernels"] if artifact else error
                log(f"{problem.label}: {describe(config)}: {kernels}")
        return 0

    from tracea_cli.backends.cuda import device_target

    target = device_target(0)
    meta = run_meta(target, argv)
    meta["bandwidth_tb_s"] = bandwidth_bytes_per_s() / 1e12
    log(f"bandwidth {meta['bandwidth_tb_s']:.2f} TB/s")
    results: list[dict[str, Any]] = []
    md, js = out / "lowrank_mlp_h200.md", out / "lowrank_mlp_h200.json"

    def write() -> None:
        md.write_text(render(results, meta))
        js.write_text(json.dumps({"meta": meta, "results": results}, indent=1, default=str))

    sweep_seconds = 25.0
    for i, (problem, budget, (kind, value)) in enumerate(PROBLEMS):
        left = args.seconds - (time.perf_counter() - start) - sweep_seconds
        share = left / (len(PROBLEMS) - i)
        if share < 8:
            results.append({"problem": problem.label, "tune": {"error": "not run: the run's deadline"}})
            continue
        log(f"{problem.label}: tune (budget {budget}, {share * 0.7:.0f} s)")
        floor_ms = problem.floor_bytes / (meta["bandwidth_tb_s"] * 1e12) * 1e3
        row: dict[str, Any] = {"problem": problem.label, "floor_ms": floor_ms}
        try:
            row["tune"] = tune(problem, budget, max(5.0, share * 0.7), out)
            winner = (row["tune"].get("winner") or {}).get("config")
            row["winner_family"] = (winner or {}).get("family", "")
            row["measured"] = remeasure(backend, problem, target, winner)
            # the tuned winner as re-measured beside torch (else, without a winner, the fastest first pick)
            timed = [r for r in row["measured"]["rows"] if r.get("median_ms")]
            ours = next((r for r in timed if r["config"] == winner), None) or min(timed, key=lambda r: r["median_ms"],
                                                                                   default=None)
            row["torch_ms"] = torch_ms = row["measured"].get("base")
            if ours:
                row["winner_ms"] = ours["median_ms"]
                row["ratio"] = torch_ms / ours["median_ms"] if torch_ms else None
                row["floor_share"] = row["floor_ms"] / ours["median_ms"]
            row["verdict"] = verdict(kind, value, row)
        except Exception as e:  # the next problem still runs
            row["error"] = f"{type(e).__name__}: {e}"
            log(f"  {row['error']}")
        results.append(row)
        write()
    try:
        results.append({"kind": "sweep", "rows": sweep(backend, target)})
    except Exception as e:
        results.append({"kind": "sweep", "rows": [], "error": str(e)})
    meta["wall_s"] = time.perf_counter() - start
    write()
    log(f"wrote {md} and {js} in {meta['wall_s']:.0f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
