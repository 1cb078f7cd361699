"""The GEMM engine benchmark's report, rendered from given figures (the measuring needs a GPU)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

from tracea_cli.ops.gemm.problem import GemmProblem

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "gemm_engine.py"


def _load():
    spec = importlib.util.spec_from_file_location("gemm_engine_benchmark", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_report_carries_date_device_command_and_every_figure():
    bench = _load()
    config = {"family": "mma", "block_m": 128, "block_n": 256, "block_k": 32, "warp_m": 64, "warp_n": 64, "stages": 3,
              "split_k": 1, "group_m": 8, "vec": 8}
    problem = GemmProblem(4096, 4096, 4096, dtype="fp16")
    row = {"config": config, "status": "ok", "reason": "", "rel_error": 2.1e-4, "median_ms": 0.4, "cv": 0.004, "n": 20,
           "tflops": problem.flops / 0.4e-3 / 1e12, "registers": 230, "spill_bytes": 0, "smem_bytes": 81408}
    failed = {"config": {**config, "block_k": 64}, "status": "wrong_result", "reason": "relative error 0.3 exceeds"}
    results = [{"problem": problem.as_dict(), "baseline": "cublas", "baseline_ms": [0.25, 0.26],
                "baseline_status": ["ok", "ok"], "baseline_tflops": problem.flops / 0.25e-3 / 1e12,
                "rows": [row, failed], "best": {"config": config, "median_ms": 0.4, "tflops": row["tflops"]},
                "ratio": 0.25 / 0.4, "engine_ratio": 0.25 / 0.4, "target": 0.5}]
    meta = {"date": "2026-11-29 20:00 UTC", "device": "NVIDIA H200", "driver": 13000, "runtime": 13000,
            "command": "python benchmarks/gemm_engine.py out.md", "generator": 1, "nvrtc": "13.0", "cupy": "14.2.0",
            "python": "3.12.3"}
    text = bench.render(results, meta)
    assert "2026-11-29 20:00 UTC" in text and "NVIDIA H200" in text and "`python benchmarks/gemm_engine.py out.md`" in text
    summary = next(line for line in text.splitlines() if line.startswith("| gemm 4096x4096x4096 fp16 nn"))
    assert "0.2500 / 0.2600" in summary and "| mma | 62.5% | 62.5% | 50% | yes |" in summary
    assert f"{row['tflops']:.1f}" in text and "2.10e-04" in text and "wrong_result: relative error 0.3" in text
