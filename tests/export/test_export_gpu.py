"""On a GPU: the example program, built from an export, runs the exported GEMM on a stream and matches the float64
reference within the dtype's bound, for every dtype and both layouts (and two fused epilogues), at the tuned shapes
and at a shape only the nearest-shape dispatch serves."""

from __future__ import annotations

import json
import subprocess

import pytest
from export_helpers import build, cli, needs_nvrtc, read_manifest


def _device_arch() -> tuple[str | None, str]:
    try:
        import cupy

        if cupy.cuda.runtime.getDeviceCount() < 1:
            return None, "no CUDA device is visible"
        return f"sm_{cupy.cuda.Device(0).compute_capability}", ""  # CuPy gives "90" for 9.0
    except Exception as e:  # CuPy missing, or no driver
        return None, f"CuPy or a CUDA GPU is missing ({type(e).__name__}: {e})"


ARCH, WHY = _device_arch()
pytestmark = [pytest.mark.gpu, needs_nvrtc, pytest.mark.skipif(ARCH is None, reason=WHY), pytest.mark.timeout(900)]

CASES = [(dtype, layout, "none") for dtype in ("fp32", "tf32", "fp16", "bf16", "fp64") for layout in ("nn", "nt")]
CASES += [("fp16", "nn", "bias_silu"), ("bf16", "nt", "bias_residual")]
TUNED = "512x512x512,1000x3000x777"
CALLS = ((512, 512, 512), (1000, 3000, 777), (768, 640, 512))  # the last one is served by the nearest tuned shape


@pytest.mark.parametrize("dtype, layout, epilogue", CASES)
def test_the_exported_gemm_matches_the_reference_on_this_gpu(dtype, layout, epilogue, tmp_path, toolchain):
    result = cli(["gemm", "--shapes", TUNED, "--dtype", dtype, "--layout", layout, "--epilogue", epilogue,
                  "--arch", ARCH, "--config", "default", "--out", str(tmp_path / "out")], tmp_path)
    assert result.exit_code == 0, result.output
    folder = tmp_path / "out"
    assert read_manifest(folder)["epilogue"] == epilogue
    program = build(toolchain["cxx"], [str(folder / "example.cpp")], tmp_path / "example",
                    [str(folder), toolchain["include"]], "-std=c++17", "-O2", "-ldl", "-lpthread")
    for m, n, k in CALLS:
        done = subprocess.run([str(program), str(m), str(n), str(k)], capture_output=True, text=True, timeout=300)
        report = json.loads(done.stdout)
        assert done.returncode == 0 and report["ok"] is True, (ARCH, m, n, k, done.stdout, done.stderr)
        assert report["nonfinite"] == 0 and report["rel_error"] <= report["bound"]
