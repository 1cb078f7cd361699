"""On a GPU: `tracea bench` of one small problem per 16-bit dtype against cuBLAS, through the CLI.

Marked `gpu`; skipped with the reason where CuPy or a CUDA device is missing.
"""

import json

import pytest
from typer.testing import CliRunner

from tracea_cli.cli import app
from tracea_cli.ops.dtypes import get_dtype

pytestmark = [pytest.mark.gpu, pytest.mark.timeout(600)]


@pytest.fixture(scope="module")
def gpu():
    try:
        import cupy
    except ImportError:
        pytest.skip("CuPy is not installed (GPU tests need the cuda extra and an NVIDIA GPU)")
    try:
        if cupy.cuda.runtime.getDeviceCount() < 1:
            pytest.skip("no CUDA device is visible")
    except Exception as e:
        pytest.skip(f"no usable CUDA device: {e}")


@pytest.mark.parametrize("dtype", ["fp16", "bf16"])
def test_bench_one_problem_on_the_gpu_against_cublas(gpu, tmp_path, dtype):
    env = {"TRACEA_CACHE_DIR": str(tmp_path / "cache"), "TRACEA_DATA_DIR": str(tmp_path / "data"), "NO_COLOR": "1"}
    result = CliRunner().invoke(app, ["bench", "gemm", "--m", "1024", "--dtype", dtype, "--tune-budget", "4", "--json"], env=env)
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    tuned, base = doc["results"]
    assert doc["environment"]["backend"] == "cuda" and base["provider"].startswith("cublas")
    for r in (tuned, base):
        assert r["status"] == "ok" and r["n"] >= 15 and r["rel_error"] <= get_dtype(dtype).bound
        assert r["flops_per_s"] == pytest.approx(2 * 1024**3 / (r["median_ms"] / 1e3))
    assert tuned["speedup"]["low"] <= tuned["speedup"]["estimate"] <= tuned["speedup"]["high"]


@pytest.mark.parametrize("dtype,layout", [("fp16", "nn"), ("bf16", "nt"), ("tf32", "nn")])
def test_torch_baseline_checks_on_the_gpu(gpu, dtype, layout):
    pytest.importorskip("torch", reason="--baseline torch needs PyTorch")
    from tracea_cli.backends.cuda import device_target
    from tracea_cli.backends.op_backend import OpBackend
    from tracea_cli.ops.gemm.problem import GemmProblem
    from tracea_cli.timing import TimingPolicy

    name, ev = OpBackend("gemm", "cuda").baseline(GemmProblem(1000, 777, 513, dtype, layout), device_target(0),
                                                  policy=TimingPolicy(warmup=1, min_samples=5, max_samples=5), seed=3,
                                                  name="torch")
    assert name == "torch" and ev.ok, ev.reason
    assert 0 < ev.rel_error <= get_dtype(dtype).bound and len(ev.samples.times_ms) == 5
