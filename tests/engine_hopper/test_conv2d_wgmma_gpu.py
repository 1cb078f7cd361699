"""conv2d's wgmma family on a Hopper GPU: every epilogue in every dtype, on ragged shapes (M, K and C no tile
divides) and ResNet-50 1x1 layers at batch 32, each configuration checked against the float64 conv2d reference (fresh
inputs, output poisoned with NaN). Marked `gpu`; skipped with the reason without CuPy, cuda.bindings or an sm_90
GPU."""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor

import pytest

from tracea_cli.backends import cuda
from tracea_cli.backends.op_backend import OpBackend
from tracea_cli.ops.conv2d.families import wgmma_space as cs
from tracea_cli.ops.conv2d.problem import EPILOGUE_NAMES, Conv2dProblem
from tracea_cli.target import Target, limits_for

pytestmark = pytest.mark.gpu
H200 = Target(backend="cuda", device_class="NVIDIA H200", arch="sm_90a", limits=limits_for("sm_90a"), device_index=0)
BACKEND = OpBackend("conv2d", "cuda")


@pytest.fixture(scope="module", autouse=True)
def hopper_gpu():
    reason = cuda.gpu_ready(0)
    if reason:
        pytest.skip(reason)
    import cupy

    cc = str(cupy.cuda.Device(0).compute_capability)
    if cc != "90":
        pytest.skip(f"this GPU is compute capability {cc[:-1]}.{cc[-1]}; the wgmma family runs on 9.0 (Hopper) only")


def _checked(jobs) -> list[str]:
    def build(job):
        try:
            return BACKEND.compile(job[0], job[1], H200), ""
        except Exception as e:
            return None, f"{type(e).__name__}: {e}"

    with ThreadPoolExecutor(max_workers=os.cpu_count() or 4) as pool:
        built = list(pool.map(build, jobs))
    failures = []
    for i, ((problem, config), (artifact, error)) in enumerate(zip(jobs, built)):
        ev = BACKEND.check(artifact, problem, H200, seed=i) if artifact else None
        if ev is None or not ev.ok:
            failures.append(f"{problem.label} {cs.describe(config)}: {error or ev.status.value + ': ' + ev.reason}")
    return failures


@pytest.mark.parametrize("dtype", ["fp16", "bf16", "tf32"])
@pytest.mark.parametrize("epilogue", EPILOGUE_NAMES)
def test_every_epilogue_and_dtype_on_ragged_shapes(dtype, epilogue):
    jobs = []
    # M = 3 * 13 * 11 = 429 rows, K = 200 columns, C = 72: no tile divides them; and a two-image 1x1 with C = 520
    for problem in (Conv2dProblem(3, 13, 11, 72, 200, 1, 1, dtype=dtype, epilogue=epilogue),
                    Conv2dProblem(2, 9, 30, 520, 88, 1, 1, dtype=dtype, epilogue=epilogue)):
        jobs += [(problem, c) for c in cs.hand_picked(problem, H200)]
    assert jobs and not _checked(jobs)


@pytest.mark.parametrize("epilogue", ["none", "bias_relu", "bias_residual_relu"])
def test_resnet50_1x1_layers_at_batch_32(epilogue):
    jobs = []
    for c, k, hw in ((256, 64, 56), (512, 128, 28), (1024, 256, 14), (2048, 512, 7), (512, 2048, 7)):
        problem = Conv2dProblem(32, hw, hw, c, k, 1, 1, dtype="fp16", epilogue=epilogue)
        jobs += [(problem, c) for c in cs.hand_picked(problem, H200)]
    assert not _checked(jobs)


# ---- the im2col form (every convolution the maps describe beyond 1x1 stride 1) -------------------------------------

#: strided, 'same' and asymmetric padding, dilation, R != S, ragged sizes (no tile divides M, K or C), C past one
#: k-step, a strided 1x1 and a 7x7 at stride 2
IM2COL_SHAPES = (
    dict(n=3, h=13, w=11, c=72, k=40, r=3, s=3, stride_h=2, stride_w=2, pad_h=1, pad_w=1),
    dict(n=2, h=10, w=14, c=136, k=96, r=3, s=5, stride_h=1, stride_w=2, pad_h=2, pad_w=0, dilation_h=2,
         dilation_w=1),
    dict(n=2, h=28, w=28, c=64, k=200, r=1, s=1, stride_h=2, stride_w=2),
    dict(n=2, h=15, w=15, c=16, k=64, r=7, s=7, stride_h=2, stride_w=2, pad_h=3, pad_w=3),
)


@pytest.mark.parametrize("dtype", ["fp16", "bf16", "tf32"])
@pytest.mark.parametrize("epilogue", EPILOGUE_NAMES)
def test_im2col_every_epilogue_and_dtype_on_strided_padded_dilated_ragged_shapes(dtype, epilogue):
    jobs = []
    for shape in IM2COL_SHAPES:
        problem = Conv2dProblem(dtype=dtype, epilogue=epilogue, **shape)
        assert not cs.is_gemm(problem)
        jobs += [(problem, c) for c in cs.hand_picked(problem, H200)]
    assert jobs and not _checked(jobs)


@pytest.mark.parametrize("epilogue", ["none", "bias_residual_relu"])
def test_im2col_resnet50_3x3_layers_at_batch_32(epilogue):
    jobs = []
    for c, hw, stride in ((64, 56, 1), (128, 56, 2), (128, 28, 1), (256, 28, 2), (256, 14, 1), (512, 14, 2),
                          (512, 7, 1)):
        problem = Conv2dProblem(32, hw, hw, c, c, 3, 3, stride, stride, 1, 1, dtype="fp16", epilogue=epilogue)
        jobs += [(problem, c) for c in cs.hand_picked(problem, H200)]
    assert not _checked(jobs)


def test_one_cubin_serves_two_geometries_each_with_its_own_tensor_maps():
    """The im2col kernel's source does not depend on stride or padding (they are arguments and tensor-map fields), so
    two problems share one cubin and one loaded module; each must still bind with its own maps (a regression: the
    module cache once handed the second problem the first one's plan, and its maps read the wrong pixels)."""
    config = cs.hand_picked(Conv2dProblem(4, 24, 24, 64, 64, 3, 3, 1, 1, 1, 1, dtype="fp16"), H200)[0]
    problems = [Conv2dProblem(4, 24, 24, 64, 64, 3, 3, stride, stride, pad, pad, dtype="fp16")
                for stride, pad in ((1, 1), (2, 1), (1, 0))]
    artifacts = [BACKEND.compile(p, config, H200) for p in problems]
    assert len({a.binary for a in artifacts}) == 1
    for seed, (problem, artifact) in enumerate(zip(problems, artifacts)):
        ev = BACKEND.check(artifact, problem, H200, seed=seed)
        assert ev.ok, (problem.label, ev.reason)
