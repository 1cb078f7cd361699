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


def test_a_requirement_holds_where_the_value_is_the_product_and_appears_in_the_json_only_when_there_is_one():
    from tracea_cli.ops.launch import KernelStep, LaunchPlan, Requirement

    need = Requirement("q_sb", ("heads", "q_sh"))
    assert need.holds({"q_sb": 64 * 16, "heads": 16, "q_sh": 64})
    assert not need.holds({"q_sb": 64 * 16 + 64, "heads": 16, "q_sh": 64})  # a padded batch stride
    step = KernelStep("k", grid=(1, 1, 1), block=(32, 1, 1))
    plan = LaunchPlan(steps=(step,), params=("q",), requires=(need,))
    assert plan.as_dict()["requires"] == [{"value": "q_sb", "of": ["heads", "q_sh"]}]
    assert "requires" not in LaunchPlan(steps=(step,), params=("q",)).as_dict()
    assert plan.unmet({"q_sb": 1, "heads": 16, "q_sh": 64}) is need and plan.unmet({"q_sb": 1024, "heads": 16,
                                                                                     "q_sh": 64}) is None


def test_renaming_a_plan_renames_every_value_it_names_and_keeps_its_map_names():
    from tracea_cli.ops.launch import KernelStep, LaunchPlan, Requirement, Scratch, TensorMap

    plan = LaunchPlan(
        steps=(KernelStep("stage", grid=(1, 1, 1), block=(32, 1, 1), params=("A", "A_staged", "lda"), when="flag"),
               KernelStep("main", grid=(1, 1, 1), block=(32, 1, 1))),
        params=("map_a", "C", "M", "ldc"),
        tensor_maps={"map_a": TensorMap("A", ("K", "M"), "lda", (64, 64), "fp16", 2),
                     "map_w": TensorMap("W", ("C", "taps", "N"), "", (64, 1, 64), "fp16", 2, kind="tiled3d",
                                        strides=("C", "w_row"))},
        scratch=(Scratch("A_staged", "A", False, "M", "K", "lda_staged", 8, 2, 16),),
        requires=(Requirement("ldc", ("N",)),))
    names = {"A": "X", "C": "Y", "lda": "in_c", "flag": "x_is_nchw", "W": "filter", "N": "out_c"}
    renamed = plan.renamed(names)
    assert renamed.params == ("map_a", "Y", "M", "ldc")
    assert renamed.steps[0].params == ("X", "A_staged", "in_c") and renamed.steps[0].when == "x_is_nchw"
    a, w = renamed.tensor_maps["map_a"], renamed.tensor_maps["map_w"]
    assert (a.tensor, a.dims, a.row_stride) == ("X", ("K", "M"), "in_c")
    # every use of a name is renamed: names are per plan (conv2d's C is a tensor in one plan, a size in another)
    assert (w.tensor, w.dims, w.strides) == ("filter", ("Y", "taps", "out_c"), ("Y", "w_row"))
    assert renamed.scratch[0].source == "X" and renamed.requires == (Requirement("ldc", ("out_c",)),)
    assert plan.renamed({}) is plan
