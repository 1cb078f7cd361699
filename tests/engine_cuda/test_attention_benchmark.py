"""The attention benchmark's report (benchmarks/attention_h200.py), rendered from given figures (measuring needs a
GPU): provenance, the backend SDPA's default ran, every ratio, failures with their reasons; and its problem list is
the issue's."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "attention_h200.py"


def _load():
    spec = importlib.util.spec_from_file_location("attention_h200_benchmark", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up there
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


def test_the_decode_section_is_the_issues_and_sweeps_every_kv_splits():
    bench = _load()
    labels = [p.label for p in bench.DECODE_PROBLEMS]
    assert len(labels) == len(set(labels)) == 6
    assert "attention b1 h32/kv8 L1x8192 d128 bf16 bhld" in labels
    assert "attention b8 h32/kv8 L1x32768 d128 bf16 bhld" in labels and "attention b1 h32/kv8 L1x1024 d128 bf16 bhld" \
        in labels
    import sys

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from conftest import arch_target

    target = arch_target("sm_90a", sm_count=132)
    configs = bench.decode_configs(bench.DECODE_PROBLEMS[0], target)
    assert {c["kv_splits"] for c in configs} == {1, 2, 4, 8, 16, 32}
    tiles = {(c["block_m"], c["block_n"], c["warps"], c["stages"], c.get("pack_gqa", 0)) for c in configs}
    assert len(tiles) == bench.DECODE_TILES
    assert {t[-1] for t in tiles} == {0, 1}  # packed GQA (the issue's 32/8 heads) and unpacked, compared


def test_the_decode_report_shows_each_kv_splits_and_the_fastest_sdpa_backend():
    bench = _load()

    def base(label, ms):
        return {"name": label, "status": "ok", "reason": "", "median_ms": ms, "tflops": 1.0, "cv": 0.01}

    rows = [{"name": f"fa2 16x64 w1 s2 kv{k}", "config": {"kv_splits": k}, "status": "ok", "reason": "",
             "median_ms": ms, "tflops": 1.0, "cv": 0.01} for k, ms in ((1, 0.080), (8, 0.020), (32, 0.010))]
    results = [{"problem": "attention b1 h32/kv8 L1x8192 d128 bf16 bhld", "rows": rows,
                "baselines": {"sdpa": [base("torch-sdpa (default ran flash)", 0.016)],
                              "sdpa-cudnn": [base("torch-sdpa-cudnn (ran cudnn)", 0.012)],
                              "sdpa-flash": [base("torch-sdpa-flash (ran flash)", 0.016)],
                              "sdpa-efficient": [base("torch-sdpa-efficient (ran efficient)", 0.030)]},
                "default_ms": 0.016, "best": "fa2 16x64 w1 s2 kv32", "best_ms": 0.010,
                "fastest_sdpa": "sdpa-cudnn", "fastest_sdpa_ms": 0.012,
                "ratios": {"sdpa": 1.6, "sdpa-cudnn": 1.2, "sdpa-flash": 1.6, "sdpa-efficient": 3.0, "fastest": 1.2},
                "best_ms_by_kv_splits": {1: 0.080, 8: 0.020, 32: 0.010}}]
    meta = {"date": "2026-12-03 08:00 UTC", "device": "NVIDIA H200", "driver": 13000, "runtime": 13000,
            "command": "python benchmarks/attention_h200.py --section decode"}
    text = bench.render_decode(results, meta)
    row = next(line for line in text.splitlines() if line.startswith("| attention b1 h32/kv8 L1x8192"))
    per_split = "| 0.0800 |  |  | 0.0200 |  | 0.0100 |"  # kv_splits 1, 2, 4, 8, 16, 32
    assert f"| fa2 16x64 w1 s2 kv32 | 0.0100 {per_split} 0.0120 (sdpa-cudnn) | 1.20 | 1.20 | 1.60 | 3.00 |" in row
    assert "--section decode" in text and "## attention b1 h32/kv8 L1x8192" in text


def test_the_wgmma_section_times_every_fa3_pick_and_the_first_fa2_pick_and_reports_them():
    import sys

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from conftest import arch_target

    bench = _load()
    labels = [p.label for p in bench.WGMMA_PROBLEMS]
    assert labels == ["attention b4 h16 L4096 d128 bf16 bhld", "attention b4 h16 L4096 d128 bf16 bhld causal",
                      "attention b4 h32 L1024 d64 fp16 bhld", "attention b2 h16 L16384 d128 bf16 bhld causal"]
    configs = bench.section_configs("wgmma", bench.WGMMA_PROBLEMS[0], arch_target("sm_90a", sm_count=132))
    assert [c["family"] for c in configs] == ["fa3"] * (len(configs) - 1) + ["fa2"] and len(configs) >= 5
    fa3 = {"name": "fa3 128x128 s2 c2", "status": "ok", "reason": "", "median_ms": 1.0, "tflops": 500.0,
           "config": configs[0]}
    wrong = {"name": "fa3 64x64 s2 c1", "status": "wrong_result", "reason": "relative error 0.4", "config": configs[1]}
    fa2 = {"name": "fa2 128x64 w8 s2", "status": "ok", "reason": "", "median_ms": 3.0, "config": configs[-1]}
    ok = {"name": "torch-sdpa-cudnn (ran cudnn)", "status": "ok", "reason": "", "median_ms": 0.8}
    results = [{"problem": labels[0], "rows": [fa3, wrong, fa2], "default_ms": 0.8,
                "baselines": {"sdpa": [ok], "sdpa-cudnn": [ok], "sdpa-flash": [{**ok, "median_ms": 2.0}],
                              "sdpa-efficient": [{"name": "sdpa-efficient", "status": "error", "reason": "refused"}]}}]
    meta = {"date": "2026-12-03", "device": "NVIDIA H200", "driver": 13000, "runtime": 13000, "command": "x"}
    summary = next(line for line in bench.render_wgmma(results, meta).splitlines() if line.startswith(f"| {labels[0]}"))
    assert summary == (f"| {labels[0]} | fa3 128x128 s2 c2 | 1.000 | 500.0 | 3.000 | 0.800 | 0.800 | 0.80 | 0.80 | "
                       "2.00 |  | 1 of 2 |")


def test_the_wgmma_section_times_each_pingpong_pick_beside_its_twin_and_reports_the_pair():
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from conftest import arch_target

    bench = _load()
    for problem in bench.WGMMA_PROBLEMS:
        configs = bench.section_configs("wgmma", problem, arch_target("sm_90a", sm_count=132))
        fa3 = [c for c in configs if c["family"] == "fa3"]
        pingpong = [c for c in fa3 if c["pingpong"]]
        # a twin the space refuses (the overlapped 128 x 128 tile of D 128 spills without ping-pong) is not timed
        space = bench.wgmma_space.fa3_space(problem, arch_target("sm_90a", sm_count=132))
        twins = [{**c, "pingpong": 0} for c in pingpong]
        assert pingpong and all((t in fa3) == (space.why_invalid(t) is None) for t in twins), problem.label
        assert len(fa3) == len({tuple(sorted(c.items())) for c in fa3})  # each configuration timed once
    configs = bench.section_configs("wgmma", bench.WGMMA_PROBLEMS[0], arch_target("sm_90a", sm_count=132))
    assert {**configs[0], "pingpong": 0} not in configs  # D 128: the first pick is the overlapped 128 x 128 tile
    with_pp = next(c for c in configs if c.get("pingpong") and {**c, "pingpong": 0} in configs)
    without = {**with_pp, "pingpong": 0}
    other = next(c for c in configs if c.get("pingpong") and c != with_pp)
    label = bench.WGMMA_PROBLEMS[0].label
    rows = [{"name": bench.label(without), "status": "ok", "reason": "", "median_ms": 1.0, "tflops": 550.0,
             "config": without},
            {"name": bench.label(with_pp), "status": "ok", "reason": "", "median_ms": 0.8, "tflops": 687.5,
             "config": with_pp},
            {"name": bench.label(other), "status": "wrong_result", "reason": "relative error 0.4", "config": other}]
    ok = {"name": "torch-sdpa-cudnn (ran cudnn)", "status": "ok", "reason": "", "median_ms": 0.8}
    results = [{"problem": label, "rows": rows, "default_ms": 0.8, "baselines": {"sdpa": [ok], "sdpa-cudnn": [ok]}}]
    pairs = bench.pingpong_pairs(results[0])
    assert [(p.without, p.without_ms, p.with_ms) for p in pairs] == [(bench.label(without), 1.0, 0.8),
                                                                   (bench.label(other).removesuffix(" pp"), None,
                                                                    None)]
    assert pairs[0].gain == 1.0 / 0.8 and pairs[1].gain is None
    meta = {"date": "2026-12-03", "device": "NVIDIA H200", "driver": 13000, "runtime": 13000, "command": "x"}
    text = bench.render_wgmma(results, meta)
    assert f"| {label} | {bench.label(without)} | 1.000 | 0.800 | 687.5 | 1.250 |" in text.splitlines()
    assert text.index("## ping-pong") < text.index(f"## {label}")
