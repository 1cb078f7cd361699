#!/usr/bin/env python3
"""conv2d's wgmma family beyond 1x1 stride 1 on an H200: the TMA im2col kernel (kernels/cuda/conv2d_wgmma_im2col.cuh)
through the family's source, launch plan and arguments, checked against the float64 conv2d reference, then timed
against cuDNN on ResNet-50's 3x3 layers at N = 32.

    python3 benchmarks/conv2d_im2col_check.py --out FILE.md --json FILE.json

Check rows: strides, 'same' and asymmetric padding, dilation, R != S, ragged sizes, C past one k-step, every dtype
(fp16, bf16, tf32) and epilogue kind, cooperative/pingpong, clusters of 1 and 2, TMA and direct stores. A wrong
result in the asymmetric rows only (pad_h != pad_w, R != S, dilation_h != dilation_w) while the symmetric ones pass
would say that the corners or offsets are in the other order ({H, W}) than wgmma_im2col.py assumes ({W, H}).
Each row: compile for sm_90a (NVRTC) the family's source, bind its launch plan (the CUDA runtime's `encode_map`:
cuTensorMapEncodeIm2col for X, a 3-D tiled map for the filter, the GEMM family's 2-D map for Y), launch, and check
with the check-then-time path every kernel goes through (fresh inputs in [-1, 1], Y poisoned with NaN, relative
Frobenius error bound per dtype). Timed rows (only after their check passes): CUDA events, L2 flushed, medians; cuDNN
(channels_last, cudnn.benchmark) checked and timed the same way. Exit 0 when every check passed.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from gpu_run import median_ms, num, provenance_lines, run_meta  # noqa: E402

from tracea_cli.backends import cuda  # noqa: E402
from tracea_cli.backends.op_backend import OpBackend  # noqa: E402
from tracea_cli.ops.conv2d.families import wgmma as cw  # noqa: E402
from tracea_cli.ops.conv2d.problem import Conv2dProblem  # noqa: E402
from tracea_cli.ops.registry import get_op  # noqa: E402
from tracea_cli.timing import TimingPolicy  # noqa: E402

POLICY = TimingPolicy(warmup=3, min_samples=10, max_samples=40, target_cv=0.02, max_seconds=0.6)


def cfg(tm=128, tn=128, stages=4, consumers=2, schedule="cooperative", cluster=1, store="direct"):
    return {"family": "wgmma", "tile_m": tm, "tile_n": tn, "stages": stages, "consumers": consumers,
            "schedule": schedule, "cluster_m": cluster, "persistent": 1, "group_m": 8, "store": store}


def check_rows() -> list[tuple[Conv2dProblem, dict]]:
    P = Conv2dProblem
    return [
        (P(2, 9, 11, 64, 64, 3, 3, 1, 1, 1, 1, dtype="fp16"), cfg(tn=64)),
        (P(3, 13, 12, 72, 40, 3, 3, 2, 2, 1, 1, dtype="fp16", epilogue="bias_relu"), cfg(tn=64, store="tma")),
        (P(2, 10, 14, 64, 96, 3, 5, 1, 2, 2, 0, 2, 1, dtype="fp16", epilogue="bias_residual"), cfg(tn=128)),  # asym
        (P(1, 20, 17, 136, 64, 1, 3, 1, 1, 0, 1, dtype="bf16", epilogue="bias_residual_relu"), cfg(tn=64)),  # asym
        (P(2, 15, 15, 16, 64, 7, 7, 2, 2, 3, 3, dtype="bf16", epilogue="bias_silu"), cfg(64, 64, 4, consumers=1)),
        (P(4, 14, 14, 128, 256, 3, 3, 1, 1, 1, 1, dtype="bf16"), cfg(tn=256, stages=3, cluster=2)),
        (P(2, 28, 28, 64, 128, 1, 1, 2, 2, dtype="fp16", epilogue="bias"), cfg(schedule="pingpong", store="tma")),
        (P(2, 9, 9, 48, 64, 3, 3, 1, 1, 1, 1, dtype="tf32", epilogue="bias_residual_relu"), cfg(tn=64, stages=3)),
        (P(1, 12, 10, 32, 32, 3, 3, 1, 1, 2, 2, 2, 2, dtype="tf32"), cfg(64, 64, 4, consumers=1, store="tma")),
    ]


def timed_rows() -> list[tuple[Conv2dProblem, dict]]:
    out = []
    for c, hw, stride in ((64, 56, 1), (128, 56, 2), (128, 28, 1), (256, 28, 2), (256, 14, 1), (512, 14, 2),
                          (512, 7, 1)):
        p = Conv2dProblem(32, hw, hw, c, c, 3, 3, stride, stride, 1, 1, dtype="fp16")
        for config in (cfg(tn=128, store="tma"), cfg(tn=256, stages=3, store="tma"), cfg(tn=64, stages=6)):
            if config["tile_n"] <= 64 * -(-c // 64):
                out.append((p, config))
    return out


def evaluate(problem, config, policy, seed):
    """One row through the family's own plumbing: its source, launch plan (im2col, tiled3d and 2-D maps) and
    arguments, bound and checked by the CUDA runtime as `tracea tune` does."""
    family = cw.WGMMA
    artifact = cuda.compile_artifact(family.name, family.source(problem, config), family.launch(problem, config),
                                     config, "sm_90a")
    ev = cuda.evaluate(get_op("conv2d"), family, problem, artifact, cuda.device_target(0), seed=seed, policy=policy)
    return ev, artifact.resources


def describe(config: dict) -> str:
    return (f"{config['tile_m']}x{config['tile_n']} s{config['stages']} c{config['consumers']} {config['schedule']} "
            f"cl{config['cluster_m']} {config['store']}")


def render(rows: list[dict], meta: dict) -> str:
    lines = ["# conv2d TMA im2col kernel (wgmma step 2) on the GPU: check, then time against cuDNN", "",
             *provenance_lines(meta), "", "## Checks", "",
             "| problem | configuration | status | relative error | reason |", "| --- | --- | --- | --- | --- |"]
    for r in (r for r in rows if r["kind"] == "check"):
        lines.append(f"| {r['label']} | {r['config']} | {r['status']} | {r.get('rel_error')} | "
                     f"{(r.get('reason') or '')[:160]} |")
    lines += ["", "## ResNet-50 3x3 layers, N = 32, fp16", "",
              "| problem | configuration | status | ms | cuDNN ms | cuDNN / im2col |",
              "| --- | --- | --- | --- | --- | --- |"]
    for r in (r for r in rows if r["kind"] == "timed"):
        ratio = r["cudnn_ms"] / r["ms"] if r.get("ms") and r.get("cudnn_ms") else None
        lines.append(f"| {r['label']} | {r['config']} | {r['status']} | {num(r.get('ms'), 4)} | "
                     f"{num(r.get('cudnn_ms'), 4)} | {num(ratio, 2)} |")
    return "\n".join(lines) + "\n"


def jobs() -> list[tuple[str, Conv2dProblem, dict]]:
    return [("check", p, c) for p, c in check_rows()] + [("timed", p, c) for p, c in timed_rows()]


def run_row(i: int) -> dict:
    """Row `i` in this process (a child of `main`: a kernel that traps takes only its own process down)."""
    kind, problem, config = jobs()[i]
    row = {"kind": kind, "label": problem.label, "config": describe(config), "problem": problem.as_dict()}
    ev, res = evaluate(problem, config, POLICY if kind == "timed" else None, seed=i)
    row.update(status=ev.status.value, reason=ev.reason, rel_error=ev.rel_error, ms=median_ms(ev),
               registers=res.get("registers"), spills=res.get("spill_store_bytes"))
    if kind == "timed":
        _, base = OpBackend("conv2d", "cuda").baseline(problem, cuda.device_target(0), policy=POLICY, seed=i)
        row["cudnn_ms"] = median_ms(base)
    return row


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--json", required=True)
    ap.add_argument("--seconds", type=float, default=480.0, help="stop starting rows after this many seconds")
    ap.add_argument("--row", type=int, help=argparse.SUPPRESS)  # internal: run one row, print it as JSON
    args = ap.parse_args(argv)
    if args.row is not None:
        print("ROW " + json.dumps(run_row(args.row)), flush=True)
        return 0
    start = time.monotonic()
    meta = run_meta(cuda.device_target(0), argv)
    rows: list[dict] = []
    for i, (kind, problem, config) in enumerate(jobs()):
        row = {"kind": kind, "label": problem.label, "config": describe(config), "problem": problem.as_dict()}
        if time.monotonic() - start > args.seconds:
            row.update(status="not run", reason="the run's time limit")
        else:
            try:
                done = subprocess.run([sys.executable, __file__, "--row", str(i), "--out", args.out, "--json",
                                       args.json], capture_output=True, text=True, timeout=120)
                found = [line[4:] for line in done.stdout.splitlines() if line.startswith("ROW ")]
                if found:
                    row = json.loads(found[-1])
                else:
                    row.update(status="crashed", reason=f"exit {done.returncode}: {done.stderr.strip()[-400:]}")
            except subprocess.TimeoutExpired:
                row.update(status="timeout", reason="no result within 120 s")
        print(row, flush=True)
        rows.append(row)
        Path(args.out).write_text(render(rows, meta))
        Path(args.json).write_text(json.dumps({"meta": meta, "rows": rows}, indent=1))
    return 0 if all(r["status"] == "ok" for r in rows if r["kind"] == "check") else 1


if __name__ == "__main__":
    sys.exit(main())
