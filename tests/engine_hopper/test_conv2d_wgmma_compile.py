"""conv2d's wgmma family compiles for sm_90a without a GPU: every hand-picked configuration of ResNet-50's 1x1 layers
at batch 32 (fp16, plain and with bias + residual + ReLU; every epilogue and dtype with the first picks), each cubin
clean in ptxas's report: no spills, no stack, the wgmma pipeline kept (no C7510) and setmaxnreg honoured (no C7508).
Sources that are the same text compile once."""

from __future__ import annotations

import os
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from tracea_cli.backends import cuda, nvrtc
from tracea_cli.backends.op_backend import OpBackend
from tracea_cli.ops.conv2d.families import wgmma_space as cs
from tracea_cli.ops.conv2d.problem import EPILOGUE_NAMES, Conv2dProblem

sys.path.insert(0, str(Path(__file__).parent))
from test_conv2d_wgmma_space import H200, RESNET50_1X1  # noqa: E402

pytestmark = pytest.mark.skipif(not nvrtc.available(), reason="NVRTC is not installed")
BACKEND = OpBackend("conv2d", "cuda")


def _layer(c, k, hw, dtype="fp16", epilogue="none"):
    return Conv2dProblem(32, hw, hw, c, k, 1, 1, dtype=dtype, epilogue=epilogue)


# every pick of every layer in these epilogues (the rest: each layer's first pick); with TRACEA_SLOW_TESTS=1 also with
# bias_residual_relu, whose residual loads are where a TMA-store epilogue would spill
EVERY_PICK = ("none", "bias_residual_relu") if os.environ.get("TRACEA_SLOW_TESTS") else ("none",)


def _jobs() -> dict[str, tuple[Conv2dProblem, dict]]:
    """One (problem, configuration) per distinct source text, named by what it is."""
    jobs: dict[str, tuple[Conv2dProblem, dict]] = {}
    for c, k, hw in RESNET50_1X1:
        for dtype in ("fp16", "bf16", "tf32"):
            for epilogue in EPILOGUE_NAMES:
                problem = _layer(c, k, hw, dtype, epilogue)
                every = dtype == "fp16" and epilogue in EVERY_PICK
                for config in cs.hand_picked(problem, H200)[: None if every else 1]:
                    name = f"{dtype} {epilogue} {cs.describe(config)}"
                    jobs.setdefault(name, (problem, config))
    return jobs


JOBS = _jobs()


@pytest.fixture(scope="module")
def artifacts():
    with ThreadPoolExecutor(max_workers=os.cpu_count() or 2) as pool:
        built = pool.map(lambda job: BACKEND.compile(job[0], job[1], H200), JOBS.values())
        return dict(zip(JOBS, built))


def test_the_set_covers_every_epilogue_dtype_and_pick():
    assert {p.epilogue for p, _ in JOBS.values()} == set(EPILOGUE_NAMES)
    assert {p.dtype for p, _ in JOBS.values()} == {"fp16", "bf16", "tf32"}
    fp16_picks = {cs.describe(c) for c, k, hw in RESNET50_1X1 for c in cs.hand_picked(_layer(c, k, hw), H200)}
    assert fp16_picks <= {cs.describe(c) for p, c in JOBS.values() if p.dtype == "fp16" and p.epilogue == "none"}


@pytest.mark.parametrize("name", JOBS)
def test_cubin_for_sm90a_without_spills(artifacts, name):
    art = artifacts[name]
    assert art.binary[:4] == b"\x7fELF" and nvrtc.cubin_arch(art.binary) == "sm_90"
    assert art.arch == art.plan.arch == "sm_90a" and art.family == "wgmma"
    res = art.resources
    split = art.config.get("split_k", 1) > 1  # K split: the second pass is a kernel of its own
    assert set(res["kernels"]) == ({"gemm_wgmma", "gemm_wgmma_splitk"} if split else {"gemm_wgmma"})
    assert 0 < res["registers"] <= 255
    assert res["spill_store_bytes"] == 0 and res["spill_load_bytes"] == 0 and res["stack_bytes"] == 0, res
    assert cuda.SERIALIZED_WGMMA not in res["log"] and cuda.IGNORED_SETMAXNREG not in res["log"], res["log"]
    problem, _ = JOBS[name]
    assert ("#define WG_POST_RELU 1" in art.source) == (problem.epilogue == "bias_residual_relu")
