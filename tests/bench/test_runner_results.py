"""The runner against a test double: rows, derived figures, failures, JSON round trip; suites; ceilings."""

import json
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from bench_fakes import FakeEngine  # noqa: E402

from tracea_cli.bench import results as res  # noqa: E402
from tracea_cli.bench.runner import BenchRequest, run_bench  # noqa: E402
from tracea_cli.bench.suites import (  # noqa: E402
    Suite,
    builtin_suite,
    parse_suite,
    resolve_suite,
)
from tracea_cli.doctor.ceilings import ceiling_from_profile, unit_scale  # noqa: E402
from tracea_cli.doctor.profile import Measurement  # noqa: E402
from tracea_cli.errors import UsageError  # noqa: E402
from tracea_cli.ops.gemm.problem import GemmProblem  # noqa: E402


def gemm(m, dtype="fp32"):
    return GemmProblem(m, m, m, dtype=dtype)

CREATED = "2026-11-29T00:00:00+00:00"


def _suite(*problems):
    return Suite("test", tuple(problems))


def test_rows_carry_statistics_rates_and_percent_of_ceiling():
    p = GemmProblem(256, 128, 64)
    engine = FakeEngine()
    out = run_bench(BenchRequest(suite=_suite(p), command="tracea bench gemm --m 256"), engine, created=CREATED)
    assert out.environment.command == "tracea bench gemm --m 256" and out.environment.created == CREATED
    tuned, base = out.results
    assert (tuned.kind, base.kind) == ("tuned", "baseline")
    assert tuned.config == {"block": 64, "order": "ikj"}
    for r in (tuned, base):
        assert r.n == len(r.samples_ms) == 30
        assert r.q1_ms <= r.median_ms <= r.q3_ms
        assert r.flops == p.flops and r.bytes == p.bytes
        assert r.flops_per_s == pytest.approx(p.flops / (r.median_ms / 1e3))
        assert r.bytes_per_s == pytest.approx(p.bytes / (r.median_ms / 1e3))
        roof = min(2e11, 2e10 * p.flops / p.bytes)
        assert r.pct_of_ceiling == pytest.approx(100 * r.flops_per_s / roof)
    info = out.problems[0]
    assert info.tuning.key == "key-256" and info.tuning.evaluations == 8 and len(info.tuning.trials) == 6
    assert ("tuned", p.label, 8) in engine.calls  # the CPU's default budget


def test_no_tune_uses_the_cache_only_and_skips_a_miss():
    p = gemm(128)
    hit = run_bench(BenchRequest(suite=_suite(p), tune=False), FakeEngine(cached=True), created=CREATED)
    assert hit.tuned(p.label).ok and hit.problems[0].tuning.cache_hit
    engine = FakeEngine(cached=False)
    miss = run_bench(BenchRequest(suite=_suite(p), tune=False), engine, created=CREATED)
    tuned = miss.tuned(p.label)
    assert tuned.status == res.SKIPPED and "--no-tune" in tuned.reason
    assert ("tuned", p.label, None) in engine.calls
    assert [r.provider for r in miss.results] == ["tracea", "numpy"] and miss.results[1].ok  # the baseline still runs


def test_failures_become_rows_and_the_rest_of_the_suite_runs():
    bad_tune, wrong, fine, half, none = gemm(128), gemm(192), gemm(256), gemm(64, dtype="bf16"), gemm(96)
    engine = FakeEngine(failing={bad_tune.label}, wrong={wrong.label}, no_winner={none.label})
    out = run_bench(BenchRequest(suite=_suite(bad_tune, wrong, fine, half, none)), engine, created=CREATED)
    nothing = out.tuned(none.label)
    assert nothing.status == "tune_failed" and "in 2 trials" in nothing.reason and out.rows_for(none.label)[1].ok
    assert [f["config"] for f in out.failures if f["problem"] == none.label and f["stage"] == "tune"] == [{"block": 32}, {"block": 64}]
    assert not any(call[0] == "measure" and call[1] == none.label for call in engine.calls)
    assert out.tuned(bad_tune.label).status == "tune_failed" and "ran correctly" in out.tuned(bad_tune.label).reason
    assert out.tuned(wrong.label).status == "wrong_result" and out.tuned(wrong.label).median_ms is None
    assert out.tuned(fine.label).ok and out.tuned(fine.label).speedup is not None
    skipped = out.tuned(half.label)
    assert skipped.status == res.SKIPPED and "bf16" in skipped.reason and len(out.rows_for(half.label)) == 1
    statuses = {(f["problem"], f["status"]) for f in out.failures}
    assert (bad_tune.label, "tune_failed") in statuses and (wrong.label, "wrong_result") in statuses
    assert (fine.label, "compile_error") in statuses  # failed configurations from tuning are listed too
    assert not any(call[0] == "measure" and call[1] == half.label for call in engine.calls)


def test_baseline_none_and_explicit_baseline():
    p = gemm(128)
    none = run_bench(BenchRequest(suite=_suite(p), baseline="none"), FakeEngine(), created=CREATED)
    assert [r.provider for r in none.results] == ["tracea"] and none.results[0].speedup is None
    torch = run_bench(BenchRequest(suite=_suite(p), baseline="torch"), FakeEngine(), created=CREATED)
    assert [r.provider for r in torch.results] == ["tracea", "torch"] and torch.results[0].speedup_over == "torch"


def test_throttled_samples_are_counted_and_flagged():
    out = run_bench(BenchRequest(suite=_suite(gemm(128))), FakeEngine(throttled=3), created=CREATED)
    tuned = out.tuned("gemm 128x128x128 fp32 nn")
    assert tuned.throttled and tuned.throttled_samples == 3
    assert res.overview(out).throttled_rows == 1


def test_json_round_trip_keeps_everything(tmp_path):
    out = run_bench(BenchRequest(suite=builtin_suite("quick", backend="cpu", dtypes=("fp32",))), FakeEngine(failing={"gemm 128x128x128 fp32 nn"}), created=CREATED)
    doc = res.to_dict(out)
    for row in doc["results"]:
        for field in ("problem", "provider", "median_ms", "q1_ms", "q3_ms", "cv", "n", "samples_ms", "flops", "bytes"):
            assert field in row
    assert doc["schema_version"] == res.SCHEMA_VERSION and doc["environment"]["device"] == "Test CPU"
    path = tmp_path / "r.json"
    path.write_text(res.to_json(out))
    again = res.load(path)
    assert res.to_dict(again) == doc
    assert again == out


@pytest.mark.parametrize("content, says", [
    (None, "does not exist"),
    ("{not json", "not valid JSON"),
    ("[1, 2]", "not a tracea bench results document"),
    ('{"schema": "something-else"}', "schema"),
    ('{"schema": "tracea-bench-results", "schema_version": 1}', "environment"),
])
def test_loading_bad_results_is_a_usage_error(tmp_path, content, says):
    path = tmp_path / "r.json"
    if content is not None:
        path.write_text(content)
    with pytest.raises(UsageError) as e:
        res.load(path)
    assert says in e.value.message and str(path) in e.value.message


def test_built_in_suites():
    quick = builtin_suite("quick", backend="cpu", dtypes=("fp32", "fp64"))
    assert [p.label for p in quick.problems] == ["gemm 128x128x128 fp32 nn", "gemm 256x256x256 fp32 nn"]
    cpu = builtin_suite("default", backend="cpu", dtypes=("fp32", "fp64"))
    gemm_rows = [p for p in cpu.problems if p.op == "gemm"]
    assert {p.dtype for p in gemm_rows} == {"fp32", "fp64"} and all(p.m == p.n == p.k for p in gemm_rows)
    assert {p.op for p in cpu.problems} == {"gemm", "conv2d", "lowrank-mlp", "attention"}  # every op's rows
    gpu = builtin_suite("default", backend="cuda", dtypes=("fp32", "tf32", "fp16", "bf16", "fp64"))
    gpu_gemm = [p for p in gpu.problems if p.op == "gemm"]
    assert 8 <= len(gpu_gemm) <= 12 and {p.op for p in gpu.problems} == {"gemm", "conv2d", "lowrank-mlp", "attention"}
    assert {"fp32", "tf32", "fp16", "bf16"} <= {p.dtype for p in gpu_gemm}
    assert any((p.m, p.n, p.k) == (4096, 7168, 2048) for p in gpu_gemm)
    gpu_conv = [p for p in gpu.problems if p.op == "conv2d"]  # ResNet-50 layers, fp16, N = 32 and one at N = 1
    assert len(gpu_conv) == 8 and {p.dtype for p in gpu_conv} == {"fp16"} and {p.n for p in gpu_conv} == {1, 32}
    volta = builtin_suite("default", backend="cuda", dtypes=("fp32", "fp16", "fp64"))  # no bf16, no tf32: bf16 shapes fall back to fp16
    assert {p.dtype for p in volta.problems} == {"fp32", "fp16"} and len(set(volta.problems)) == len(volta.problems)


def test_suite_file_format(tmp_path):
    doc = {"name": "mine", "problems": [{"op": "gemm", "m": 64, "n": 32, "k": 16, "dtype": "fp64", "layout": "nt"},
                                        {"m": 48, "dtype": ["fp32", "fp64"]}]}
    path = tmp_path / "suite.json"
    path.write_text(json.dumps(doc))
    suite = resolve_suite(str(path), backend="cpu", dtypes=("fp32",))
    assert suite.name == "mine" and suite.source == str(path)
    assert [p.label for p in suite.problems] == ["gemm 64x32x16 fp64 nt", "gemm 48x48x48 fp32 nn", "gemm 48x48x48 fp64 nn"]


@pytest.mark.parametrize("doc, says", [
    ({"problems": []}, "lists no problems"),
    ({"cases": []}, "no \"problems\" list"),
    ({"problems": [{"n": 4}]}, "problem 1 of the suite file"),
    ({"problems": [{"m": 4, "size": 3}]}, "unknown field(s) size"),
    ({"problems": [{"m": -4}]}, "m must be a positive whole number"),
    ({"problems": [{"m": 4, "dtype": "fp8"}]}, "unknown dtype"),
    ({"problems": [{"m": 4, "op": "conv9d"}]}, "unknown operation"),
])
def test_bad_suite_files_are_usage_errors(doc, says):
    with pytest.raises(UsageError) as e:
        parse_suite(doc, source="s.json")
    assert says in str(e.value)


def test_unknown_suite_name():
    with pytest.raises(UsageError) as e:
        resolve_suite("fastest", backend="cpu", dtypes=("fp32",))
    assert "unknown suite 'fastest'" in e.value.message


def _m(device, metric, unit, median, dtype=None, threads=None):
    return Measurement(device=device, metric=metric, unit=unit, median=median, cv=0.01, n=10, q1=median, q3=median, dtype=dtype,
                       threads=threads, created="2026-11-29T00:00:00Z")


def test_ceilings_from_the_capability_profile():
    profile = SimpleNamespace(measured_created="2026-11-29T00:00:00Z", measured=(
        _m("cpu", "gemm_flops", "FLOP/s", 60e9, "fp32", 1),
        _m("cpu", "gemm_flops", "FLOP/s", 220e9, "fp32", 2),
        _m("cpu", "gemm_flops", "FLOP/s", 150e9, "fp32", 4),  # more threads, less speed: the best one is the ceiling
        _m("cpu", "memory_bandwidth", "B/s", 14.5e9),
        _m("cuda:0", "gemm_flops", "FLOP/s", 700e12, "bf16"),
        _m("cuda:0", "gemm_flops", "FLOP/s", 50e12, "fp32"),
        _m("cuda:0", "memory_bandwidth", "B/s", 4.1e12),
        _m("cuda:0", "h2d_bandwidth", "B/s", 55e9),
        _m("cuda:1", "gemm_flops", "TFLOP/s", 650.0, "bf16"),
    ))
    cpu = ceiling_from_profile(profile, backend="cpu", dtype="fp32")
    assert cpu.flops_per_s == pytest.approx(220e9) and cpu.bytes_per_s == pytest.approx(14.5e9)
    assert "cpu gemm_flops fp32, 2 threads" in cpu.flops_source
    fp64 = ceiling_from_profile(profile, backend="cpu", dtype="fp64")
    assert fp64.flops_per_s is None and "no fp64 gemm_flops on cpu" in fp64.flops_source
    gpu = ceiling_from_profile(profile, backend="cuda", dtype="bf16", device_index=0)
    assert gpu.flops_per_s == pytest.approx(700e12) and gpu.bytes_per_s == pytest.approx(4.1e12)  # not the host link
    other = ceiling_from_profile(profile, backend="cuda", dtype="bf16", device_index=1)
    assert other.flops_per_s == pytest.approx(650e12) and other.bytes_per_s is None
    # fp32 also runs as 3xTF32: a tf32 figure / 3 above fp32's own is the ceiling, and says where it comes from
    assert ceiling_from_profile(profile, backend="cuda", dtype="fp32").flops_per_s == \
        pytest.approx(50e12)  # no tf32 figure: fp32's own
    with_tf32 = SimpleNamespace(measured_created=profile.measured_created,
                                measured=profile.measured + (_m("cuda:0", "gemm_flops", "TFLOP/s", 360.0, "tf32"),))
    fp32 = ceiling_from_profile(with_tf32, backend="cuda", dtype="fp32")
    assert fp32.flops_per_s == pytest.approx(120e12)
    assert "gemm_flops tf32" in fp32.flops_source and "/ 3: fp32 as 3 tf32 products (its own: " in fp32.flops_source
    from tracea_cli.ops.dtypes import DTYPES, get_dtype  # fp32 also runs as tf32 on cuda only

    assert get_dtype("fp32").also_as_on("cuda") == ("tf32", 3) and get_dtype("fp32").also_as_on("cpu") is None
    assert all(d.also_as_on("cuda") is None for name, d in DTYPES.items() if name != "fp32")
    slow_tf32 = SimpleNamespace(measured_created=profile.measured_created,
                                measured=profile.measured + (_m("cuda:0", "gemm_flops", "TFLOP/s", 90.0, "tf32"),))
    assert ceiling_from_profile(slow_tf32, backend="cuda", dtype="fp32").flops_per_s == \
        pytest.approx(50e12)  # 30 < 50: its own stays
    assert ceiling_from_profile(with_tf32, backend="cpu", dtype="fp32").flops_per_s == pytest.approx(220e9)  # cpu: own
    assert unit_scale("GiB/s", "B") == 1024**3 and unit_scale("TFLOP/s", "B") is None
    roof = res.Ceiling(flops_per_s=100.0, bytes_per_s=10.0)
    assert roof.roof_per_s(2.0) == 20.0 and roof.roof_per_s(50.0) == 100.0
    assert res.Ceiling().roof_per_s(1.0) is None
