"""On a GPU: a kernel that writes out of bounds, one that never returns and one that is wrong are recorded with their
status, and correct kernels keep running on fresh workers afterwards (the GPU stays usable)."""

from dataclasses import replace

import pytest

pytestmark = pytest.mark.gpu


def _gpu_missing() -> str | None:
    try:
        import cupy

        return None if cupy.cuda.runtime.getDeviceCount() > 0 else "no CUDA device is visible"
    except Exception as e:  # noqa: BLE001
        return f"CuPy or a CUDA GPU is missing ({type(e).__name__}: {e})"


@pytest.mark.skipif(_gpu_missing() is not None, reason=str(_gpu_missing()))
@pytest.mark.timeout(600)
def test_gpu_faults_are_recorded_and_the_gpu_stays_usable(tmp_path, monkeypatch):
    from faulty_cuda_backend import FaultyCudaBackend

    from tracea_cli.config import Settings
    from tracea_cli.ops.gemm.problem import GemmProblem
    from tracea_cli.tune import setup
    from tracea_cli.tune.driver import TuneRequest, tune

    monkeypatch.setattr(setup, "OpBackend", FaultyCudaBackend)
    settings = replace(Settings.from_env({"TRACEA_CACHE_DIR": str(tmp_path / "c"), "TRACEA_DATA_DIR": str(tmp_path / "d")}),
                       worker_timeout_s=20.0)
    result = tune(TuneRequest(GemmProblem(64, 64, 64), backend="cuda", strategy="grid", budget=5), settings=settings)
    statuses = {f.config["x"]: f.status for f in result.failures}
    assert statuses == {2: "launch_error", 3: "timeout", 4: "wrong_result"}
    assert result.winner is not None and result.winner.config["x"] in (0, 1)
    assert len(result.ranking) == 2  # both correct kernels re-timed after the faults: the GPU was usable
