"""On a GPU: the CUDA conv2d families over awkward shapes (every iterator and dtype, split-K, each epilogue) and the
cuDNN baselines, each checked against the float64 reference.

Marked `gpu`; skipped with the reason where CuPy or a CUDA device is missing.
"""

from __future__ import annotations

import os
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
from test_conv2d_emulated import CASES  # noqa: E402

from tracea_cli.backends.op_backend import OpBackend  # noqa: E402
from tracea_cli.ops.conv2d.families.implicit_gemm_space import hand_picked  # noqa: E402
from tracea_cli.ops.conv2d.problem import Conv2dProblem  # noqa: E402
from tracea_cli.ops.conv2d.suites import suite  # noqa: E402

pytestmark = pytest.mark.gpu
BACKEND = OpBackend("conv2d", "cuda")


def _checked(jobs, target) -> list[str]:
    """Compile in parallel, check each (problem, config) on the GPU; the failures as text."""
    def build(job):
        try:
            return BACKEND.compile(job[0], job[1], target), ""
        except Exception as e:
            return None, f"{type(e).__name__}: {e}"

    with ThreadPoolExecutor(max_workers=os.cpu_count() or 4) as pool:
        built = list(pool.map(build, jobs))
    failures = []
    for i, ((problem, config), (artifact, error)) in enumerate(zip(jobs, built)):
        ev = BACKEND.check(artifact, problem, target, seed=i) if artifact else None
        if ev is None or not ev.ok:
            failures.append(f"{problem.label} {config}: {error or ev.status.value + ': ' + ev.reason}")
    return failures


def test_the_emulators_cases_and_the_hand_picks_of_awkward_shapes(gpu_target):
    jobs = list(CASES)
    for dtype in ("fp16", "bf16", "tf32", "fp32"):
        for problem in (Conv2dProblem(3, 27, 31, 12, 37, 3, 3, 2, 2, 1, 2, 2, 1, dtype=dtype, epilogue="bias_relu"),
                        Conv2dProblem(2, 33, 17, 3, 19, 7, 7, 2, 2, 3, 3, dtype=dtype, epilogue="bias_residual_relu"),
                        Conv2dProblem(1, 7, 7, 100, 65, 3, 3, 1, 1, 1, 1, dtype=dtype, epilogue="bias_silu")):
            jobs += [(problem, c) for c in hand_picked(problem, gpu_target)[:4]]
    assert not _checked(jobs, gpu_target)


def test_the_default_picks_of_the_gpu_suite_rows(gpu_target):
    jobs = [(p, hand_picked(p, gpu_target)[0]) for p in suite("conv2d", "cuda", ("fp16",))]
    assert not _checked(jobs, gpu_target)


@pytest.mark.parametrize("dtype, epilogue", [("fp16", "bias_relu"), ("bf16", "none"), ("tf32", "bias_residual"),
                                             ("fp32", "bias_residual_relu")])
def test_the_cudnn_baseline_is_checked_like_a_kernel(dtype, epilogue, gpu_target):
    pytest.importorskip("torch")
    problem = Conv2dProblem(2, 28, 28, 64, 64, 3, 3, 1, 1, 1, 1, dtype=dtype, epilogue=epilogue)
    name, ev = BACKEND.baseline(problem, gpu_target, policy=None, seed=3)
    assert ev.ok, ev.reason
    assert name == ("cudnn" if epilogue == "none" else "cudnn+epilogue-pass")
