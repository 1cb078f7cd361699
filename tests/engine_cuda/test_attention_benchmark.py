"""The attention benchmark's report (benchmarks/attention_h200.py), rendered from given figures (measuring needs a
GPU): provenance, the backend SDPA's default ran, every ratio, failures with their reasons; and its problem list is
the issue's."""

from __future__ import annotations

import importlib.util
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "attention_h200.py"


def _load():
    spec = importlib.util.spec_from_file_location("attention_h200_benchmark", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_problems_are_the_issues():
    labels = [p.label for p in _load().PROBLEMS]
    assert labels[0] == "attention b4 h16 L4096 d128 bf16 bhld"
    assert "attention b4 h16 L4096 d64 fp16 bhld causal" in labels and len(labels) == len(set(labels)) == 11
    assert "attention b4 h32/kv8 L4096 d128 bf16 bhld causal" in labels
    assert "attention b4 h32/kv8 L1x8192 d128 bf16 bhld" in labels


def test_the_report_carries_provenance_the_backend_that_ran_and_every_ratio():
    bench = _load()
    ours = {"name": "fa2 128x64 w8 s2", "status": "ok", "reason": "", "rel_error": 3e-3, "median_ms": 2.0, "cv": 0.01,
            "tflops": 137.4, "registers": 178, "spill_bytes": 0}
    wrong = {"name": "fa2 64x64 w4 s2", "status": "wrong_result", "reason": "relative error 0.4 exceeds the bound"}

    def base(label, ms):
        return {"name": label, "status": "ok", "reason": "", "median_ms": ms, "tflops": 1.0, "cv": 0.01}

    results = [{"problem": "attention b4 h16 L4096 d128 bf16 bhld", "rows": [ours, wrong],
                "baselines": {"sdpa": [base("torch-sdpa (default ran cudnn)", 0.8), base("torch-sdpa", 0.9)],
                              "sdpa-cudnn": [base("torch-sdpa-cudnn (ran cudnn)", 0.8)],
                              "sdpa-flash": [base("torch-sdpa-flash (ran flash)", 1.6)],
                              "sdpa-efficient": [{"name": "sdpa-efficient", "status": "error",
                                                  "reason": "No available kernel"}]},
                "default_ms": 0.8, "best": ours["name"], "best_ms": 2.0,
                "ratios": {"sdpa": 0.4, "sdpa-cudnn": 0.4, "sdpa-flash": 0.8, "sdpa-efficient": None}},
               {"problem": "attention b4 h32/kv8 L1x8192 d128 bf16 bhld", "error": "not run: the run's deadline"}]
    meta = {"date": "2026-12-02 21:00 UTC", "device": "NVIDIA H200", "driver": 13000, "runtime": 13000,
            "command": "python benchmarks/attention_h200.py --out docs/results"}
    text = bench.render(results, meta)
    assert "2026-12-02 21:00 UTC" in text and "NVIDIA H200" in text and "--out docs/results" in text
    summary = next(line for line in text.splitlines() if line.startswith("| attention b4 h16 L4096 d128"))
    assert "| fa2 128x64 w8 s2 | 2.000 | 137.4 | 0.800 (torch-sdpa (default ran cudnn)) | 0.40 | 0.40 | 0.80 |  |" \
        in summary
    assert "wrong_result" in text and "relative error 0.4" in text and "No available kernel" in text
    assert "not run: the run's deadline" in text
