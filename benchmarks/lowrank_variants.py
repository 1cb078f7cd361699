"""lowrank-mlp's fused kernel, variant by variant (issue 15): which of its knobs moves it towards the memory floor.
One call, about 2 minutes on an H200.

    python benchmarks/lowrank_variants.py --out F.md --json F.json [--dry-run]

For each of issue 15's layers (M = 16384 and 4096, d = 4096, fp16, bias + SiLU), a ladder of fused configurations:
a few tile shapes (rows per block, warps, chunk widths, ring depths), each with y stored directly and staged,
compiled in parallel, then torch unfused, every variant (each checked against the float64 reference before it is
timed), torch unfused again; ratio = torch's faster median / ours; % of floor = the memory floor (x read
+ y written once at the measured copy bandwidth) over our median. `--dry-run` (no GPU) compiles the ladder for
sm_90a and prints registers, spills and shared memory.
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
    resources_of,
    run_meta,
    write_report,
)
from lowrank_mlp_h200 import POLICY, bandwidth_bytes_per_s, log  # noqa: E402

from tracea_cli.backends.op_backend import OpBackend  # noqa: E402
from tracea_cli.ops.lowrank_mlp.families.fused_space import FAMILY  # noqa: E402
from tracea_cli.ops.lowrank_mlp.problem import LowrankMlpProblem  # noqa: E402

PROBLEMS = tuple(LowrankMlpProblem(m, 4096, r, 4096, "fp16", act="silu") for m, r in ((16384, 64), (16384, 256),
                                                                                        (4096, 64), (4096, 256)))
# (block_m, warps, warps_n1, block_k, block_n, warps_n2, stages, vec, min_blocks) by rank. Rank 64: the best of the
# 2026-12-03 ladder (128 rows with a 6-deep ring at M = 16384; 32 rows, two blocks per SM at M = 4096) and neighbours;
# rank 256 (V's chunks take 256 rows of shared memory each): 32 and 64 rows, 64-wide chunks; and 16 warps per block
# (more warps to hide latency where one block fills an SM).
TILES = {
    64: ((128, 8, 2, 64, 128, 4, 4, 8, 1), (128, 8, 2, 64, 128, 4, 6, 8, 1), (64, 8, 4, 64, 128, 4, 4, 8, 1),
         (64, 8, 4, 64, 128, 4, 4, 8, 2), (32, 8, 4, 64, 128, 4, 4, 8, 2), (32, 8, 4, 64, 128, 4, 6, 8, 2),
         (32, 8, 4, 32, 64, 4, 6, 8, 2), (128, 16, 2, 64, 128, 4, 4, 8, 1), (128, 16, 2, 64, 128, 4, 6, 8, 1),
         (128, 16, 2, 64, 128, 8, 4, 8, 1), (128, 16, 4, 32, 64, 4, 3, 8, 1)),
    256: ((64, 8, 4, 32, 64, 4, 2, 8, 2), (64, 8, 8, 32, 64, 4, 3, 8, 1), (64, 8, 4, 32, 64, 4, 3, 8, 1),
          (32, 8, 4, 32, 64, 4, 3, 8, 2), (32, 4, 2, 32, 64, 4, 2, 8, 2), (128, 8, 4, 32, 64, 4, 2, 8, 1),
          (128, 16, 4, 32, 64, 4, 3, 8, 1), (64, 16, 8, 32, 64, 4, 3, 8, 1)),
}
# (stage_y, split_n): staged and direct stores; d_out shared by 2 and 4 blocks where rows are few
FLAGS = ((1, 1), (0, 1), (1, 2), (1, 4))
KEYS = ("block_m", "warps", "warps_n1", "block_k", "block_n", "warps_n2", "stages", "vec", "min_blocks")


def ladder(backend: OpBackend, problem: LowrankMlpProblem, target) -> list[dict]:
    """Every tile x flag combination the space admits for `problem` (d_out split only below 256 row blocks)."""
    space = dict((f.name, s) for f, s in backend.spaces(problem, target))[FAMILY]
    out = []
    for tile in TILES[problem.rank]:
        for stage_y, split_n in FLAGS:
            if split_n > 1 and problem.m // tile[0] >= 256:
                continue
            config = {"family": FAMILY, **dict(zip(KEYS, tile)), "stage_y": stage_y, "split_n": split_n}
            why = space.why_invalid(config)
            if why is None:
                out.append(config)
            else:
                log(f"  skip {describe(config)}: {why}")
    return out


def render(results: list[dict], meta: dict) -> str:
    lines = ["# lowrank-mlp fused kernel: the variant ladder (issue 15)", "", *provenance_lines(meta),
             f"- memory bandwidth (device copy of 1 GiB, read + written): {meta.get('bandwidth_tb_s', 0):.2f} TB/s",
             "- method: torch unfused, every variant (checked against the float64 reference first), torch unfused "
             "again, one process; ratio = torch's faster median / ours; floor = x read + y written once.", ""]
    for r in results:
        m = r["measured"]
        base = m.get("base")
        lines += [f"## {r['problem']}", "", f"torch unfused {num(base, 4)} ms; floor {num(r['floor_ms'], 4)} ms", "",
                  "| configuration | status | ms | x torch | % of floor | regs | spill B | smem B |",
                  "| --- | --- | --- | --- | --- | --- | --- | --- |"]
        for row in m["rows"]:
            med = row.get("median_ms")
            lines.append(f"| {describe(row['config'])} | {row['status']} | {num(med, 4)} | "
                         f"{num(base / med if base and med else None, 2)} | "
                         f"{num(100 * r['floor_ms'] / med if med else None, 0)} | {row.get('registers', '')} | "
                         f"{row.get('spill_bytes', '')} | {row.get('smem_bytes', '')} |")
        lines.append("")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("/tmp/out/lowrank_variants.md"))
    parser.add_argument("--json", type=Path, default=None)
    parser.add_argument("--dry-run", action="store_true", help="no GPU: compile the ladder for sm_90a")
    args = parser.parse_args(argv)
    backend = OpBackend("lowrank-mlp", "cuda")
    if args.dry_run:
        from tracea_cli.target import arch_target

        target = arch_target("sm_90a")
        for problem in PROBLEMS:
            configs = ladder(backend, problem, target)
            for config, (artifact, error) in zip(configs, compile_all(backend, [(problem, c) for c in configs],
                                                                      target)):
                log(f"{problem.label} {describe(config)}: "
                    f"{resources_of(artifact) if artifact else 'compile error ' + error[:400]}")
        return 0
    from tracea_cli.backends.cuda import device_target

    target = device_target(0)
    meta = {**run_meta(target, argv), "bandwidth_tb_s": bandwidth_bytes_per_s() / 1e12}
    results = []
    for problem in PROBLEMS:
        log(problem.label)
        configs = ladder(backend, problem, target)
        built = compile_all(backend, [(problem, c) for c in configs], target)
        measured = measure_between_baselines(backend, problem, target, configs, built, policy=POLICY, log=log)
        floor_ms = problem.floor_bytes / (meta["bandwidth_tb_s"] * 1e12) * 1e3
        results.append({"problem": problem.label, "floor_ms": floor_ms, "measured": measured})
        write_report(results, meta, render, args.out, args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
