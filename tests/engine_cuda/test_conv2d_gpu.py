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


def test_serial_split_k_cases_and_picks_are_right(gpu_target):
    """The emulator's serial cases in both serial modes, and every serial pick of ResNet-50's layers at batch 1, checked
    against the float64 reference (each check binds afresh: a workspace zeroed once at allocation, one launch)."""
    from test_conv2d_emulated import SERIAL_CASES

    from tracea_cli.ops.conv2d.suites import RESNET50

    jobs = [(p, {**c, "splitk_mode": mode}) for p, c in SERIAL_CASES for mode in ("serial", "serial_ordered")]
    for dtype in ("fp16", "fp32"):
        for c, k, hw, rs, stride in RESNET50:
            problem = Conv2dProblem(1, hw, hw, c, k, rs, rs, stride, stride, rs // 2, rs // 2, dtype=dtype,
                                    epilogue="bias_residual_relu")
            jobs += [(problem, cfg) for cfg in hand_picked(problem, gpu_target) if cfg.get("splitk_mode") == "serial"]
    assert len(jobs) > 2 * len(SERIAL_CASES)
    assert not _checked(jobs, gpu_target)


@pytest.mark.parametrize("mode", ["serial", "serial_ordered"])
def test_serial_split_k_repeated_calls_stay_right_and_leave_the_workspace_zero(mode, gpu_target):
    """One bound launch called 30 times on new inputs (same pointers): every output matches the reference, and the
    workspace (sums and tile counters) is all zero after every call. 16 slices per tile race for each counter. Then
    20 calls on the same inputs: serial_ordered gives the same bits every time."""
    import cupy
    import numpy as np

    from tracea_cli.backends import cuda
    from tracea_cli.ops.conv2d.families.implicit_gemm import conv2d_args
    from tracea_cli.ops.conv2d.problem import make_inputs, reference
    from tracea_cli.ops.dtypes import from_storage, to_storage
    from tracea_cli.ops.verify import check

    problem = Conv2dProblem(1, 7, 7, 512, 512, 3, 3, 1, 1, 1, 1, dtype="fp16", epilogue="bias_relu")
    config = {**next(c for c in hand_picked(problem, gpu_target) if c.get("splitk_mode") == "serial"),
              "splitk_mode": mode}
    artifact = BACKEND.compile(problem, config, gpu_target)
    rng = np.random.default_rng(5)
    first = make_inputs(problem, rng)
    device = {n: cupy.asarray(to_storage(v, problem.dtype)) for n, v in first.items()}
    device["Y"] = cupy.full(problem.out_shape, np.nan, dtype=device["X"].dtype)
    bound = cuda.bind(cuda.load(artifact), conv2d_args(problem, device))
    workspace = next(k for k in bound._keep if isinstance(k, cupy.ndarray))
    for call in range(30):
        inputs = first if call == 0 else make_inputs(problem, rng)
        for name, values in inputs.items():
            device[name][...] = cupy.asarray(to_storage(values, problem.dtype))
        device["Y"].fill(np.nan)
        bound()
        cupy.cuda.get_current_stream().synchronize()
        got = from_storage(cupy.asnumpy(device["Y"]), problem.dtype)
        verdict = check(got, reference(problem, inputs)["Y"], problem.dtype)
        assert verdict.ok, f"call {call}: {verdict.reason}"
        assert not bool(workspace.any()), f"call {call} left the workspace dirty"
    outputs = set()
    for _ in range(20):
        bound()
        outputs.add(cupy.asnumpy(device["Y"]).tobytes())
    if mode == "serial_ordered":
        assert len(outputs) == 1
