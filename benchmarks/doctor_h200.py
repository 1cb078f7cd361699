#!/usr/bin/env python3
"""`tracea doctor` on the GPU machine, against plain CuPy measured in the same run.

Run from the repository root on the H200 (see ../shared/device/README.md for the environment):

    python3 benchmarks/doctor_h200.py "$OUT/doctor_h200.md"

It writes the Markdown report to the given path, the same results as JSON beside it (.json), and the doctor's
profile (.profile.json). Exit code 0 when every target holds, 1 when one does not.

The targets (issue 2):
  - the full `tracea doctor` finishes in under 30 s (wall time of the command, Python start-up included);
  - its device-memory bandwidth is at least 95% of a plain CuPy device-to-device copy of the same size;
  - its bf16 and fp16 GEMM FLOP/s are at least 95% of plain `cupy.matmul` at 8192^3.

Order A B A: plain CuPy, then the doctor (a separate process, as a user runs it), then plain CuPy again; the doctor's
figure is compared with the better of the two plain runs. Plain CuPy is timed with `cupyx.profiler.benchmark`
(CUDA events, independent of Tracea's harness); bandwidth counts bytes read + written; GEMM inputs are uniform in
[-1, 1] (never zeros).
"""

from __future__ import annotations

import json
import os
import platform
import shlex
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
N = 8192
TARGET_WALL_S = 30.0
TARGET_RATIO = 0.95


def plain_cupy(copy_bytes: int) -> dict:
    """Plain CuPy: a device-to-device copy of `copy_bytes` (two ways) and cupy.matmul at 8192^3 in bf16 and fp16."""
    import cupy as cp
    import ml_dtypes
    import numpy as np
    from cupyx.profiler import benchmark

    def median_s(fn, repeats: int) -> float:
        return float(np.median(benchmark(fn, n_repeat=repeats, n_warmup=5).gpu_times[0]))

    def copies() -> dict:
        src = cp.random.random(copy_bytes // 4, dtype=cp.float32) + 0.5
        dst = cp.empty_like(src)

        def assign() -> None:
            dst[...] = src

        return {f"copy: {name}": 2 * copy_bytes / median_s(fn, 50)
                for name, fn in (("cupy.copyto(dst, src)", lambda: cp.copyto(dst, src)), ("dst[...] = src", assign))}

    def matmul(np_dtype) -> float:
        a, b = ((cp.random.random((N, N), dtype=cp.float32) * 2 - 1).astype(np_dtype) for _ in range(2))
        return 2.0 * N**3 / median_s(lambda: cp.matmul(a, b), 30)

    out = copies()
    cp.get_default_memory_pool().free_all_blocks()
    for dtype, np_dtype in (("bf16", np.dtype(ml_dtypes.bfloat16)), ("fp16", np.dtype(np.float16))):
        out[f"matmul {dtype}"] = matmul(np_dtype)
        cp.get_default_memory_pool().free_all_blocks()
    return out


def run_doctor(profile_path: Path) -> tuple[float, dict, str]:
    work = Path(tempfile.mkdtemp(prefix="tracea-doctor-"))
    env = {**os.environ, "TRACEA_DATA_DIR": str(work / "data"), "TRACEA_CACHE_DIR": str(work / "cache"), "NO_COLOR": "1"}
    command = [sys.executable, "-m", "tracea_cli", "doctor", "--json", "--output", str(profile_path)]
    t0 = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True, env=env, cwd=ROOT, timeout=300)
    wall = time.perf_counter() - t0
    if done.returncode != 0:
        sys.stderr.write(done.stderr)
        raise SystemExit(f"tracea doctor exited with {done.returncode}")
    return wall, json.loads(done.stdout), " ".join(shlex.quote(c) for c in command[1:])


def measured(profile: dict, metric: str, dtype: str | None = None) -> dict | None:
    return next((m for m in profile["measured"] if m["device"] == "cuda:0" and m["metric"] == metric
                 and m["dtype"] == dtype), None)


def main() -> int:
    if len(sys.argv) != 2:
        print("usage: python3 benchmarks/doctor_h200.py OUT.md", file=sys.stderr)
        return 2
    md_path = Path(sys.argv[1])
    md_path.parent.mkdir(parents=True, exist_ok=True)
    json_path, profile_path = md_path.with_suffix(".json"), md_path.with_suffix(".profile.json")
    started = datetime.now(timezone.utc).replace(microsecond=0).isoformat()

    copy_bytes = 2 * 1024**3  # what the doctor copies when the memory is free; corrected below from its profile
    before = plain_cupy(copy_bytes)
    wall, profile, command = run_doctor(profile_path)
    bandwidth = measured(profile, "memory_bandwidth")
    if bandwidth and bandwidth["params"].get("bytes_per_copy") != copy_bytes:
        copy_bytes = bandwidth["params"]["bytes_per_copy"]
        before = plain_cupy(copy_bytes)
    after = plain_cupy(copy_bytes)
    plain = {k: max(before[k], after[k]) for k in before}

    rows = []

    def compare(what: str, doctor_value: float | None, plain_keys: list[str], unit: str) -> None:
        best_key = max(plain_keys, key=lambda k: plain[k])
        ratio = doctor_value / plain[best_key] if doctor_value else None
        rows.append({"what": what, "doctor": doctor_value, "plain": plain[best_key], "plain_how": best_key, "unit": unit,
                     "ratio": ratio, "target": TARGET_RATIO, "met": ratio is not None and ratio >= TARGET_RATIO})

    compare("device memory bandwidth", bandwidth and bandwidth["median"], [k for k in plain if k.startswith("copy")], "B/s")
    for dtype in ("bf16", "fp16"):
        m = measured(profile, "gemm_flops", dtype)
        compare(f"GEMM {dtype} 8192^3", m and m["median"], [f"matmul {dtype}"], "FLOP/s")
    gpu = next((g for g in profile["gpus"] if g.get("cuda_index") == 0), {})
    result = {
        "date": started,
        "device": {"name": gpu.get("name"), "device_class": gpu.get("device_class"),
                   "driver": profile["toolchain"].get("driver_version"),
                   "cuda_driver_version": profile["toolchain"].get("cuda_driver_version"),
                   "cupy": profile["toolchain"].get("cupy_version"), "host": platform.node()},
        "command": f"python3 {command}",
        "benchmark_command": f"python3 benchmarks/doctor_h200.py {md_path}",
        "doctor_wall_s": wall,
        "doctor_wall_target_s": TARGET_WALL_S,
        "doctor_wall_met": wall < TARGET_WALL_S,
        "comparisons": rows,
        "plain_cupy": {"before": before, "after": after},
        "doctor_measured": profile["measured"],
        "doctor_not_measured": profile["not_measured"],
        "doctor_checks": [{k: c[k] for k in ("id", "status", "device", "evidence")} for c in profile["checks"]],
    }
    json_path.write_text(json.dumps(result, indent=2) + "\n")
    md_path.write_text(markdown(result))
    print(md_path.read_text())
    ok = result["doctor_wall_met"] and all(r["met"] for r in rows)
    return 0 if ok else 1


def _fmt(value: float | None, unit: str) -> str:
    if value is None:
        return "not measured"
    scale, prefix = (1e12, "T") if value >= 1e12 else (1e9, "G")
    return f"{value / scale:.3g} {prefix}{unit}"


def markdown(r: dict) -> str:
    d = r["device"]
    lines = [
        "# `tracea doctor` on the GPU, against plain CuPy in the same run",
        "",
        f"- date: {r['date']}",
        f"- device: {d['name']} ({d['device_class']}), driver {d['driver']}, CuPy {d['cupy']}",
        f"- command: `{r['benchmark_command']}` (runs `{r['command']}`)",
        "",
        f"Full doctor wall time: **{r['doctor_wall_s']:.1f} s** (target under {r['doctor_wall_target_s']:.0f} s: "
        f"{'met' if r['doctor_wall_met'] else 'NOT met'}).",
        "",
        "| what | tracea doctor | plain CuPy (best of before/after) | ratio | target ≥ 95% |",
        "| --- | ---: | ---: | ---: | --- |",
    ]
    for row in r["comparisons"]:
        ratio = f"{100 * row['ratio']:.1f}%" if row["ratio"] else "–"
        lines.append(f"| {row['what']} | {_fmt(row['doctor'], row['unit'])} | {_fmt(row['plain'], row['unit'])} "
                     f"({row['plain_how']}) | {ratio} | {'met' if row['met'] else 'NOT met'} |")
    lines += ["", "Every ceiling the doctor measured:", "", "| metric | dtype | median | cv | n | % of datasheet |",
              "| --- | --- | ---: | ---: | ---: | ---: |"]
    for m in r["doctor_measured"]:
        pct = f"{m['percent_of_datasheet']:.0f}%" if m.get("percent_of_datasheet") else "–"
        value = f"{m['median']:.3g} {m['unit']}"
        lines.append(f"| {m['device']} {m['metric']}{' ' + str(m['threads']) + ' threads' if m.get('threads') else ''} "
                     f"| {m['dtype'] or ''} | {value} | {100 * m['cv']:.1f}% | {m['n']} | {pct} |")
    for m in r["doctor_not_measured"]:
        lines.append(f"| {m['device']} {m['metric']} | {m['dtype'] or ''} | not measured: {m['reason']} | | | |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(main())
