"""Measured ceilings: the real CPU measurements on this machine (small and quick), the rate statistics, and how
measurements are set against datasheet figures. GPU measurements are marked `gpu` and skip without CuPy and a GPU."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest

from doctor_fakes import CPU, facts, scenario
from tracea_cli.doctor import measure
from tracea_cli.doctor.datasheets import load_datasheets
from tracea_cli.doctor.inventory import probe_cpu
from tracea_cli.doctor.profile import Measurement
from tracea_cli.timing import Samples, TimingPolicy

FAST = TimingPolicy(warmup=1, min_samples=3, max_samples=5, target_cv=0.5, max_seconds=0.2)


def _assert_real(m, *, unit):
    assert isinstance(m, Measurement), m
    assert m.unit == unit and m.median > 0 and m.q1 <= m.median <= m.q3
    assert m.n >= FAST.min_samples and math.isfinite(m.cv) and m.cv >= 0
    assert m.created


def test_cpu_triad_bandwidth_on_one_and_all_threads():
    cpu = replace(probe_cpu(), caches={"L3": 1 << 20})  # small arrays (32 MiB each) keep the test quick
    threads = (1, cpu.usable_threads) if cpu.usable_threads > 1 else (1,)
    results = measure.cpu_triad(cpu, threads, policy=FAST)
    assert [m.threads for m in results] == list(threads)
    for m in results:
        _assert_real(m, unit="B/s")
        assert m.metric == "memory_bandwidth" and m.device == "cpu"
        assert 1e8 < m.median < 1e13  # between 0.1 GB/s and 10 TB/s
        assert m.params["array_bytes"] == 32 << 20


@pytest.mark.parametrize("dtype", ["fp32", "fp64"])
def test_cpu_gemm_with_one_and_all_threads(dtype):
    cpu = probe_cpu()
    threads = (1, cpu.usable_threads) if cpu.usable_threads > 1 else (1,)
    results = measure.cpu_gemm(dtype, threads, policy=FAST)
    assert [m.threads for m in results] == list(threads)
    for m in results:
        _assert_real(m, unit="FLOP/s")
        assert m.dtype == dtype and m.params["m"] >= 1024 and 1e8 < m.median < 1e14
        assert "numpy.matmul" in m.params["method"]


def test_rates_come_from_per_sample_times():
    samples = Samples(times_ms=(2.0, 1.0, 4.0, 2.0), throttled=(False, True, False, False), wall_s=0.01)
    m = measure.summarize_rates(samples, work=1e9, device="cuda:0", metric="memory_bandwidth", unit="B/s")
    assert m.median == pytest.approx(5e11)  # 1e9 bytes / 2 ms
    assert m.q1 < m.median < m.q3 and m.n == 4 and m.throttled_fraction == 0.25 and m.cv > 0


def test_a_failing_measurement_becomes_a_reason():
    def boom():
        raise MemoryError("out of memory allocating 2 GiB")

    (item,) = measure._guarded(boom, device="cuda:0", metric="gemm_flops", dtype="fp64")
    assert item.reason == "MemoryError: out of memory allocating 2 GiB" and item.dtype == "fp64"


def test_references_datasheet_and_pcie():
    f = facts(scenario("healthy-h200"))
    base = dict(unit="B/s", median=4.0e12, cv=0.01, n=10, q1=3.9e12, q3=4.1e12, created="now")
    items = [Measurement(device="cuda:0", metric="memory_bandwidth", **base),
             Measurement(device="cuda:0", metric="h2d_bandwidth", **{**base, "median": 5.0e10}),
             Measurement(device="cuda:0", metric="launch_latency", **{**base, "unit": "us", "median": 5.0}),
             Measurement(device="cpu", metric="memory_bandwidth", threads=16, **{**base, "median": 1e11})]
    bw, h2d, latency, cpu = measure.with_references(items, gpus=f.gpus, cpu=CPU, datasheets=load_datasheets())
    assert bw.datasheet == 4.8e12 and bw.percent_of_datasheet == pytest.approx(100 * 4.0 / 4.8)
    assert "nvidia.com" in bw.datasheet_source
    assert h2d.datasheet == pytest.approx(32e9 * 128 / 130 / 8 * 16) and "gen 5 x16" in h2d.datasheet_source
    assert latency.datasheet is None and latency.percent_of_datasheet is None
    assert cpu.datasheet is None  # no datasheet for this CPU
    (m2,) = measure.with_references([replace(items[3], threads=8)], gpus=(), cpu=replace(CPU, model="Apple M2"),
                                    datasheets=load_datasheets())
    assert m2.datasheet == 100e9


@pytest.mark.gpu
def test_gpu_measurements_on_a_real_gpu():
    cupy = pytest.importorskip("cupy", reason="CuPy is not installed")
    try:
        if cupy.cuda.runtime.getDeviceCount() == 0:
            pytest.skip("no CUDA device")
    except Exception as e:
        pytest.skip(f"no usable CUDA device ({e})")
    from tracea_cli.config import Settings
    from tracea_cli.doctor.collect import collect

    f = collect(Settings.from_env(), {}, numba=False)
    gpu = next(g for g in f.gpus if g.cuda_index == 0)
    items = list(measure.gpu_measurements(gpu, policy=FAST))
    got = {(m.metric, m.dtype) for m in items if isinstance(m, Measurement)}
    assert ("memory_bandwidth", None) in got and ("gemm_flops", "fp32") in got and ("launch_latency", None) in got
    for m in items:
        if isinstance(m, Measurement):
            assert m.median > 0 and m.n >= FAST.min_samples


def test_gpu_measurement_plumbing_with_a_numpy_backed_cupy(monkeypatch):
    """No GPU here: a numpy stand-in for CuPy runs every GPU measurement end to end (calls, checks, units)."""
    import sys

    from doctor_fakes import fake_cupy

    cp, linalg = fake_cupy(free_bytes=256 << 20)
    monkeypatch.setitem(sys.modules, "cupy", cp)
    monkeypatch.setitem(sys.modules, "cupy._core._routines_linalg", linalg)
    monkeypatch.setattr(measure, "GEMM_SIZES", (256,))
    monkeypatch.setattr("importlib.util.find_spec", lambda name, *a: None if name in ("torch", "ml_dtypes") else object())
    monkeypatch.setitem(sys.modules, "ml_dtypes", None)  # bf16 needs it: "not measured", with the install hint
    gpu = facts(scenario("healthy-h200")).gpus[0]
    steps = []
    items = list(measure.gpu_measurements(gpu, policy=FAST, step=steps.append))
    done = {(m.metric, m.dtype): m for m in items if isinstance(m, Measurement)}
    skipped = {(m.metric, m.dtype): m.reason for m in items if not isinstance(m, Measurement)}
    assert set(done) == {("memory_bandwidth", None), ("gemm_flops", "fp16"), ("gemm_flops", "tf32"), ("gemm_flops", "fp32"),
                         ("gemm_flops", "fp64"), ("launch_latency", None), ("h2d_bandwidth", None), ("d2h_bandwidth", None)}
    assert "pip install ml_dtypes" in skipped[("gemm_flops", "bf16")]
    assert "torch is not installed" in skipped[("gemm_flops", "int8")] and ("gemm_flops", "fp8") in skipped
    bw = done[("memory_bandwidth", None)]
    assert bw.params["bytes_per_copy"] == 64 << 20 and set(bw.params["methods"]) == {"cudaMemcpy (cupy.copyto)", "copy kernel (float4)"}
    assert bw.device == "cuda:0" and bw.device_class == gpu.device_class and bw.unit == "B/s"
    fp64 = done[("gemm_flops", "fp64")]
    assert fp64.params["m"] == 256 and fp64.params["rel_error"] < 1e-12 and fp64.unit == "FLOP/s"
    assert linalg.log == [7, 1]  # TF32 set for the tf32 GEMM only, then restored
    assert done[("launch_latency", None)].unit == "us"
    assert done[("h2d_bandwidth", None)].params["bytes_per_copy"] == 32 << 20
    assert steps[0] == "cuda:0 device memory bandwidth" and len(steps) == 9


def test_gpu_budget_spent_skips_with_the_reason(monkeypatch):
    import sys

    from doctor_fakes import fake_cupy

    cp, linalg = fake_cupy()
    monkeypatch.setitem(sys.modules, "cupy", cp)
    gpu = facts(scenario("healthy-h200")).gpus[0]
    items = list(measure.gpu_measurements(gpu, policy=FAST, deadline=0.0))
    assert len(items) == 11 and all("time budget" in m.reason for m in items)
