#!/usr/bin/env python3
"""Where the time of a short Hopper convolution goes: a fixed part per launch against a part per K block.

    python3 benchmarks/conv2d_fixed_cost.py --out FILE.md --json FILE.json [--batch 32] [--hw 7] [--k 512]

On an H100 (2026-12-08, docs/hopper-notes.md "K pairs"), ResNet-50's 3x3 512@7² at batch 32 took 0.0364 ms in
whole 128x128 tiles (72 K blocks each) and 0.0261 ms as K pairs (36 each): 0.29 µs per K block, the tensor cores'
rate per SM, and about 16 µs that are not the main loop, where cuDNN takes 21 µs in all. Two points fit any line;
this script measures the line. It holds M = N·7·7 and the output channels fixed and sweeps the input channels C
(64, 128, 256, 512: 9, 18, 36, 72 K blocks of 64 in the 3x3 im2col form; C·9 as the reduction of a 1x1 GEMM-form
convolution of the same M, N and depth, read by plain tiled TMA), for each of a few fixed configurations (whole
128x128 and 128x64 tiles, persistent and not; 128x128 K pairs) and cuDNN. Per configuration and form it fits
time = fixed + per_block · K blocks by least squares over the sweep and reports both, so the next change is aimed
at what costs: the launch and prologue, the im2col loads, or the product.

Through the code `tracea tune conv2d` runs (OpBackend("conv2d", "cuda")): every candidate is checked against the
float64 reference before it is timed; CUDA events with the stream held until the launch is queued, L2 flushed
between samples, medians. A configuration the space refuses for a point of the sweep is listed with its reason.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from gpu_run import compile_all, measure_between_baselines, num, provenance_lines, run_meta, write_report  # noqa: E402

from tracea_cli.backends.cuda import device_target  # noqa: E402
from tracea_cli.backends.op_backend import OpBackend  # noqa: E402
from tracea_cli.ops.conv2d.families import wgmma_space as ws  # noqa: E402
from tracea_cli.ops.conv2d.problem import Conv2dProblem  # noqa: E402
from tracea_cli.timing import TimingPolicy  # noqa: E402

POLICY = TimingPolicy(warmup=3, min_samples=10, max_samples=40, target_cv=0.02, max_seconds=0.6)
CHANNELS = (64, 128, 256, 512)
BASE = {"family": "wgmma", "tile_m": 128, "consumers": 2, "schedule": "cooperative", "cluster_m": 1, "group_m": 8,
        "split_k": 1, "cluster_k": 1}
CONFIGS = {
    "128x128 whole, persistent": {**BASE, "tile_n": 128, "stages": 4, "store": "direct", "persistent": 1},
    "128x128 whole, one tile per CTA": {**BASE, "tile_n": 128, "stages": 4, "store": "direct", "persistent": 0},
    "128x64 whole, persistent": {**BASE, "tile_n": 64, "stages": 6, "store": "direct", "persistent": 1},
    "128x128 K pair": {**BASE, "tile_n": 128, "stages": 5, "store": "direct", "persistent": 0, "cluster_k": 2},
}


def problems(batch: int, hw: int, k: int) -> list[tuple[str, int, Conv2dProblem]]:
    """(form, K blocks, problem) over the sweep: the 3x3 im2col form and the 1x1 GEMM form of the same depth."""
    out = []
    for c in CHANNELS:
        out.append(("3x3 im2col", 9 * c // 64, Conv2dProblem(batch, hw, hw, c, k, 3, 3, 1, 1, 1, 1, dtype="fp16")))
        out.append(("1x1 GEMM", 9 * c // 64, Conv2dProblem(batch, hw, hw, 9 * c, k, 1, 1, dtype="fp16")))
    return out


def fit(points: list[tuple[int, float]]) -> tuple[float, float] | None:
    """Least-squares (fixed ms, ms per K block) over (K blocks, ms) points; None with fewer than two."""
    if len({x for x, _ in points}) < 2:
        return None
    n = len(points)
    mx, my = sum(x for x, _ in points) / n, sum(y for _, y in points) / n
    slope = sum((x - mx) * (y - my) for x, y in points) / sum((x - mx) ** 2 for x, _ in points)
    return my - slope * mx, slope


def render(results: list[dict], meta: dict) -> str:
    lines = ["# A short Hopper convolution: fixed time per launch against time per K block", "",
             *provenance_lines(meta),
             f"- rows: M = {meta['batch']}·{meta['hw']}² output pixels, {meta['k']} output channels, fp16, input "
             f"channels {', '.join(map(str, CHANNELS))}; the 1x1 GEMM form has 9·C input channels (the same depth)",
             "- method: every candidate checked against the float64 reference before it is timed; CUDA events, L2 "
             "flushed between samples, medians; fits by least squares over the sweep", "",
             "| form | configuration | " + " | ".join(f"{9 * c // 64} blocks ms" for c in CHANNELS)
             + " | fixed µs | per block µs |", "| --- | --- | " + " | ".join("---" for _ in CHANNELS) + " | --- | --- |"]
    for form in ("3x3 im2col", "1x1 GEMM"):
        at = {r["blocks"]: r["times"] for r in results if r["form"] == form}
        for name in [*CONFIGS, "cuDNN"]:
            points = [(9 * c // 64, at.get(9 * c // 64, {}).get(name)) for c in CHANNELS]
            cells = [num(ms, 4) if ms else "–" for _, ms in points]
            line = fit([(x, y) for x, y in points if y])
            lines.append(f"| {form} | {name} | " + " | ".join(cells) + " | "
                         + (f"{line[0] * 1e3:.1f} | {line[1] * 1e3:.3f}" if line else "– | –") + " |")
    refused = [f"- {r['form']}, {r['blocks']} blocks, {name}: {why}" for r in results
               for name, why in r["refused"].items()]
    if refused:
        lines += ["", "Not measured (the space's reasons, or the check's):", "", *refused]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True, help="the Markdown report")
    ap.add_argument("--json", required=True, help="every candidate and raw sample")
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--hw", type=int, default=7, help="input height and width (3x3, pad 1: the output's too)")
    ap.add_argument("--k", type=int, default=512, help="output channels")
    args = ap.parse_args(argv)
    start = time.monotonic()
    target = device_target(0)
    backend = OpBackend("conv2d", "cuda")
    meta = {**run_meta(target, argv), "batch": args.batch, "hw": args.hw, "k": args.k}
    results = []
    for form, blocks, problem in problems(args.batch, args.hw, args.k):
        valid = {n: c for n, c in CONFIGS.items() if backend.why_invalid(problem, target, c) is None}
        refused = {n: backend.why_invalid(problem, target, c) for n, c in CONFIGS.items() if n not in valid}
        print(f"{problem.label}: {len(valid)} configurations", flush=True)
        built = compile_all(backend, [(problem, c) for c in valid.values()], target)
        run = measure_between_baselines(backend, problem, target, list(valid.values()), built, policy=POLICY,
                                        log=lambda s: print(s, flush=True))
        times = {"cuDNN": run["base"]}
        for name, row in zip(valid, run["rows"]):
            if row.get("median_ms"):
                times[name] = row["median_ms"]
            else:
                refused[name] = f"{row['status']}: {(row.get('reason') or '')[:160]}"
        results.append({"form": form, "blocks": blocks, "label": problem.label, "times": times, "refused": refused,
                        "run": run})
        write_report(results, meta, render, Path(args.out), Path(args.json))
    meta["seconds"] = round(time.monotonic() - start, 1)
    write_report(results, meta, render, Path(args.out), Path(args.json))
    print(f"done in {meta['seconds']} s: {args.out}", flush=True)
    return 0 if all(not r["refused"] for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
