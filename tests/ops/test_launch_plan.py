"""LaunchPlan: the main kernel of a plan, and the resources a compiled artifact reports for it."""

import pytest

from tracea_cli.ops.gemm.families.engine import MMA
from tracea_cli.ops.gemm.families.wgmma import WGMMA
from tracea_cli.ops.gemm.problem import GemmProblem
from tracea_cli.target import arch_target


def _first(family, problem, target, **want):
    """The family's first hand-picked configuration with `want` set, checked valid (cheaper than walking the whole
    space for one)."""
    space = family.space(problem, target)
    for pick in family.suggested(problem, target):
        config = {**pick, **want}
        if space.why_invalid(config) is None:
            return config
    raise AssertionError(f"no hand-picked configuration of {family.name} takes {want}")


def test_the_main_kernel_is_the_product_not_the_reduction_or_the_staging():
    sm80, sm90 = arch_target("sm_80"), arch_target("sm_90")
    split = GemmProblem(64, 256, 8192, dtype="fp16")
    plan = MMA.launch(split, _first(MMA, split, sm80, split_k=4))
    assert [k.name for k in plan.kernels] == ["gemm_main", "gemm_splitk_reduce"]
    assert plan.main_kernel.name == "gemm_main"
    staged = GemmProblem(1024, 1024, 1024, dtype="tf32")  # tf32 nn: B is transposed into scratch first
    plan = WGMMA.launch(staged, WGMMA.suggested(staged, sm90)[0])
    assert plan.kernels[0].name.startswith("gemm_stage") and plan.main_kernel.name == "gemm_wgmma"


@pytest.mark.timeout(600)
def test_a_split_k_artifact_reports_the_main_kernels_resources():
    from tracea_cli.backends.op_backend import OpBackend

    problem = GemmProblem(64, 256, 8192, dtype="fp16")
    target = arch_target("sm_80")
    artifact = OpBackend("gemm", "cuda").compile(problem, _first(MMA, problem, target, split_k=4), target)
    kernels = artifact.resources["kernels"]
    assert artifact.resources["registers"] == kernels["gemm_main"]["registers"]
    assert kernels["gemm_main"]["registers"] > kernels["gemm_splitk_reduce"]["registers"]
