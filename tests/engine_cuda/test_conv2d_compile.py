"""The CUDA conv2d families compile with NVRTC for sm_80 and sm_90a without a GPU, within the limits, and the first
hand-picked configuration (the default a tune starts from and `--config default` exports) of each kind of layer
spills nothing (ptxas' report)."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import pytest

from tracea_cli.backends import nvrtc
from tracea_cli.backends.op_backend import OpBackend
from tracea_cli.ops.conv2d.families.implicit_gemm import (
    MAIN_KERNEL,
    REDUCE_KERNEL,
    TRANSPOSE_KERNEL,
    conv2d_launch,
    conv2d_source,
)
from tracea_cli.ops.conv2d.families.implicit_gemm_space import hand_picked, tiling
from tracea_cli.ops.conv2d.problem import Conv2dProblem
from tracea_cli.ops.conv2d.suites import suite

pytestmark = pytest.mark.skipif(not nvrtc.available(), reason="NVRTC is not installed (pip install 'tracea[test]')")
BACKEND = OpBackend("conv2d", "cuda")
SLOW = __import__("os").environ.get("TRACEA_SLOW_TESTS")


def _layer(n, c, k, hw, rs, stride=1, dtype="fp16", epilogue="none"):
    return Conv2dProblem(n, hw, hw, c, k, rs, rs, stride, stride, rs // 2, rs // 2, dtype=dtype, epilogue=epilogue)


# one of each kind: a 3x3 ResNet layer, the C = 3 stem, one image of the last stage (split-K), a 1x1, every dtype;
# the default run compiles the first four (TRACEA_SLOW_TESTS=1 all)
KINDS = (
    ("sm_90a", _layer(32, 64, 64, 56, 3, epilogue="bias_relu")),
    ("sm_80", _layer(32, 3, 64, 224, 7, 2)),
    ("sm_90a", _layer(1, 512, 512, 7, 3)),
    ("sm_80", _layer(32, 64, 64, 56, 3, dtype="fp32", epilogue="bias_silu")),
    ("sm_80", _layer(32, 256, 64, 56, 1, dtype="bf16", epilogue="bias_residual_relu")),
    ("sm_90a", _layer(32, 128, 128, 28, 3, dtype="tf32")),
    ("sm_90a", _layer(32, 3, 64, 224, 7, 2, dtype="fp32")),
)


def _compile(job):
    target, problem, config = job
    return job, BACKEND.compile(problem, config, target)


def _check(target, problem, config, artifact) -> str | None:
    res = artifact.resources
    t = tiling(problem, config)
    assert nvrtc.cubin_arch(artifact.binary) == target.arch.rstrip("a") and res["ptx_target"] == target.arch
    assert 0 < res["registers"] <= 255 and res["registers"] * t.threads <= target.limits.registers_per_block
    assert res["static_shared_bytes"] + res["dynamic_shared_bytes"] <= target.limits.max_shared_per_block_optin
    assert res["dynamic_shared_bytes"] == t.smem_bytes
    assert {MAIN_KERNEL, TRANSPOSE_KERNEL} <= set(res["kernels"])
    assert artifact.source == conv2d_source(problem, config) and artifact.plan == conv2d_launch(problem, config)
    if res["spill_store_bytes"] or res["spill_load_bytes"] or res["stack_bytes"]:
        return (f"{problem.label} {config} for {target.arch}: {res['registers']} registers, "
                f"{res['spill_store_bytes']} bytes spilled")
    return None


def test_the_default_pick_of_each_kind_of_layer_compiles_without_spills(make_target):
    jobs = []
    for arch, problem in KINDS if SLOW else KINDS[:4]:
        target = make_target(arch, 132 if arch.startswith("sm_90") else 108)
        jobs.append((target, problem, hand_picked(problem, target)[0]))
    with ThreadPoolExecutor(max_workers=2) as pool:  # NVRTC through ctypes releases the GIL
        spills = [_check(t, p, c, a) for (t, p, c), a in pool.map(_compile, jobs)]
    assert not [s for s in spills if s], spills


@pytest.mark.skipif(not SLOW, reason="opt in: TRACEA_SLOW_TESTS=1 (compiles the first three picks of every GPU row)")
def test_the_picks_of_every_gpu_suite_row_compile_without_spills(make_target):
    jobs = []
    for arch in ("sm_80", "sm_90a"):
        target = make_target(arch, 132 if arch.startswith("sm_90") else 108)
        for problem in suite("conv2d", "cuda", ("fp32", "tf32", "fp16", "bf16")):
            jobs += [(target, problem, c) for c in hand_picked(problem, target)[:3]]
    with ThreadPoolExecutor(max_workers=2) as pool:
        spills = [_check(t, p, c, a) for (t, p, c), a in pool.map(_compile, jobs)]
    assert not [s for s in spills if s], [s for s in spills if s]


# serial split-K (one launch): ResNet's last-stage layers at batch 1, where the picks split the reduction
SERIAL_KINDS = (
    ("sm_90a", _layer(1, 512, 512, 7, 3, epilogue="bias_relu")),
    ("sm_80", _layer(1, 512, 512, 7, 3, dtype="bf16", epilogue="bias_residual_relu")),
    ("sm_90a", _layer(1, 256, 256, 14, 3, dtype="fp32", epilogue="bias")),
    ("sm_80", _layer(1, 1024, 2048, 7, 1, dtype="tf32", epilogue="bias_residual")),
)


def test_serial_split_k_picks_compile_for_sm80_and_sm90a_without_spills_and_in_one_kernel(make_target):
    """Each layer's first serial pick, and the same with serial_ordered."""
    jobs = []
    for arch, problem in SERIAL_KINDS:
        target = make_target(arch, 132 if arch.startswith("sm_90") else 108)
        serial = [c for c in hand_picked(problem, target) if c.get("splitk_mode") == "serial"]
        assert serial, f"no serial split-K pick for {problem.label}"
        jobs.append((target, problem, serial[0]))
        jobs.append((target, problem, {**serial[0], "splitk_mode": "serial_ordered"}))
    with ThreadPoolExecutor(max_workers=2) as pool:
        done = list(pool.map(_compile, jobs))
    spills = [_check(t, p, c, a) for (t, p, c), a in done]
    assert not [s for s in spills if s], spills
    for (_, problem, config), artifact in done:
        assert REDUCE_KERNEL not in artifact.resources["kernels"], problem.label  # no second pass to launch
        assert [s.name for s in artifact.plan.steps if getattr(s, "when", None) is None and hasattr(s, "name")] == \
            [MAIN_KERNEL]
