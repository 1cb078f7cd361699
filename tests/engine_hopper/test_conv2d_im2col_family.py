"""conv2d's wgmma family beyond 1x1 stride 1 (the TMA im2col form), on the CPU: which convolutions it serves, the
picks (what the H200 measured best on ResNet-50's 3x3 layers), the launch plan (its maps' kinds, every parameter
given by the family's arguments, the GEMM family's grid and shared memory), the manifest form of today's 2-D maps
unchanged, and every pick of ResNet-50's 3x3 and strided 1x1 layers building for sm_90a (NVRTC + ptxas) without
spills."""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace

import pytest

from tracea_cli.backends import cuda, nvrtc
from tracea_cli.ops.conv2d.families import wgmma as cw
from tracea_cli.ops.conv2d.families import wgmma_im2col as im
from tracea_cli.ops.conv2d.families import wgmma_space as cs
from tracea_cli.ops.conv2d.problem import Conv2dProblem
from tracea_cli.ops.gemm.families import wgmma as gw
from tracea_cli.ops.launch import TensorMap
from tracea_cli.target import Target, limits_for

H200 = Target(backend="cuda", device_class="NVIDIA H200", arch="sm_90a",
              limits=replace(limits_for("sm_90a"), sm_count=132))
P = Conv2dProblem
#: ResNet-50's 3x3 layers (C = K, H = W of the input, stride) at batch 32, and its strided 1x1 layers (C, K, H, s)
RESNET50_3X3 = ((64, 56, 1), (128, 56, 2), (128, 28, 1), (256, 28, 2), (256, 14, 1), (512, 14, 2), (512, 7, 1))
RESNET50_1X1_STRIDED = ((256, 512, 56), (512, 1024, 28), (1024, 2048, 14), (256, 128, 56))


def three_by_three(c, hw, stride, dtype="fp16", epilogue="none"):
    return P(32, hw, hw, c, c, 3, 3, stride, stride, 1, 1, dtype=dtype, epilogue=epilogue)


@pytest.mark.parametrize("problem", [
    three_by_three(64, 56, 1),
    P(2, 10, 14, 64, 96, 3, 5, 1, 2, 2, 0, 2, 1, dtype="fp16", epilogue="bias_residual"),  # asymmetric everything
    P(2, 28, 28, 64, 128, 1, 1, 2, 2, dtype="bf16"),  # strided 1x1
    P(2, 15, 15, 16, 64, 7, 7, 2, 2, 3, 3, dtype="bf16"),  # 7x7, stride 2
    P(1, 12, 10, 32, 32, 3, 3, 1, 1, 2, 2, 2, 2, dtype="tf32"),  # dilated
    P(1, 9, 9, 64, 64, 1, 1, 1, 1, 1, 1, dtype="fp16"),  # a padded 1x1 is not a GEMM
    P(1, 20, 20, 64, 64, 3, 3, 8, 8, 1, 1, dtype="fp16"),  # stride 8: TMA's largest traversal stride
])
def test_general_convolutions_get_a_space_and_valid_picks(problem):
    space = cw.WGMMA.space(problem, H200)
    assert not isinstance(space, str), space
    picks = cs.hand_picked(problem, H200)
    assert picks and all(space.why_invalid(c) is None for c in picks)
    assert all(c["persistent"] == 1 - (c.get("cluster_k", 1) - 1) and c["schedule"] == "cooperative"
               and c["cluster_m"] == 1 for c in picks)  # persistent but the K pairs (one tile per CTA pair)
    assert cw.WGMMA.template(problem).startswith(f"generator {cw.GENERATOR_VERSION}\nim2col\n")


def test_resnets_7x7_stem_is_refused_with_the_reason():
    stem = P(32, 224, 224, 3, 64, 7, 7, 2, 2, 3, 3, dtype="fp16")
    assert cw.WGMMA.space(stem, H200) == ("TMA needs C to be a multiple of 8 for fp16 (C=3: X, W and Y are read and "
                                          "written in place with 16-byte strides)")
    assert cs.hand_picked(stem, H200) == []


@pytest.mark.parametrize("c, hw, stride", RESNET50_3X3)
def test_resnet50_3x3_picks_are_the_measured_best_first(c, hw, stride):
    """docs/results/conv2d_im2col_h200_2026-12-03.md: 128x128 best on the layers where it fills at least half of the
    H200's 132 SMs, 128x64 on the two 512-channel layers (52 work items of 128x128) and the 64-channel one. (The first
    pick with K split or as a K pair, placed where its tiles leave SMs idle, is not part of that measurement.)"""
    problem = three_by_three(c, hw, stride)
    picks = [cs.describe(p) for p in cs.hand_picked(problem, H200)
             if p.get("split_k", 1) == p.get("cluster_k", 1) == 1]
    wide, narrow = "wgmma 128x128 s4 c2 cooperative cl1 p1 g8 tma", "wgmma 128x64 s6 c2 cooperative cl1 p1 g8 direct"
    if c == 512:
        assert picks[:2] == [narrow, wide]
    elif c >= 128:
        assert picks[:2] == [wide, narrow]
    else:  # K = 64: a 128-column tile is larger than the problem needs
        assert picks[0] == "wgmma 128x64 s6 c2 cooperative cl1 p1 g8 direct"
    assert cs.hand_picked(problem, H200, limit=1) == cs.hand_picked(problem, H200)[:1]


def test_with_a_residual_the_picks_store_directly():
    problem = three_by_three(256, 28, 2, epilogue="bias_residual_relu")
    assert {c["store"] for c in cs.hand_picked(problem, H200)} == {"direct"}


def test_the_space_counts_the_im2col_k_steps():
    # C = 72 fp16: two 64-channel blocks per tap, 9 taps: 18 k-steps; the ring may not be deeper than that
    problem = P(1, 8, 8, 72, 64, 3, 3, 1, 1, 1, 1, dtype="fp16")
    assert im.k_blocks(problem) == 18 and cs.im2col_view(problem).k == 18 * 64
    one_tap = P(1, 8, 8, 64, 64, 1, 1, 2, 2, dtype="fp16")  # one k-step: rings of 2 at most
    space = cw.WGMMA.space(one_tap, H200)
    config = {**cs.hand_picked(one_tap, H200)[0], "stages": 3}
    assert "stages=3 exceeds the 1 K-blocks of the problem" in space.why_invalid(config)


def test_the_plan_has_the_three_map_kinds_and_the_args_give_every_parameter():
    problem = P(3, 13, 12, 72, 40, 3, 3, 2, 2, 1, 1, dtype="fp16", epilogue="bias_relu")
    config = cs.hand_picked(problem, H200)[0]
    plan = cw.WGMMA.launch(problem, config)
    gemm = gw.wgmma_launch(cs.im2col_view(problem), config)
    (step,) = plan.steps
    assert step.name == cw.IM2COL_KERNEL and plan.params == cw.IM2COL_PARAMS and plan.main_kernel is step
    assert (step.grid, step.block, step.dynamic_smem_bytes, step.cluster) == (
        gemm.main_kernel.grid, gemm.main_kernel.block, gemm.main_kernel.dynamic_smem_bytes, gemm.main_kernel.cluster)
    assert {n: (m.tensor, m.kind) for n, m in plan.tensor_maps.items()} == {
        "map_x": ("X", "im2col"), "map_w": ("W", "tiled3d"), "map_c": ("Y", "tiled")}
    assert plan.arch == "sm_90a" and plan.scratch == () and plan.workspace_bytes_per_mn == 0
    values = cw.WGMMA.args(problem, {"X": 1, "W": 2, "Y": 3, "bias": 4})
    sizes = {k: v for k, v in values.items() if isinstance(v, int)}
    for name in plan.params:  # the workspace (split-K's sums; null without) comes from the runtime, as for the GEMM
        assert name in plan.tensor_maps or name in values or name == "workspace", name
    for spec in plan.tensor_maps.values():
        assert spec.tensor in values and all(d in sizes for d in spec.dims + spec.strides)
        assert not spec.row_stride or spec.row_stride in sizes
    assert values["residual"] is None and sizes["M"] == problem.gemm_m == 3 * 7 * 6 and sizes["K"] == 9 * 72
    assert plan.grid(step, sizes, resident_clusters=132) == (min(132, plan.work_items(sizes)), 1, 1)
    d = plan.as_dict()["tensor_maps"]
    assert d["map_x"]["kind"] == "im2col" and d["map_x"]["element_strides"] == [1, 2, 2, 1]
    assert d["map_x"]["lower"] == [-1, -1] and d["map_x"]["upper"] == [-1, -1] and "box" not in d["map_x"]
    assert d["map_w"] == {**d["map_w"], "kind": "tiled3d", "strides": ["C", "w_row"], "box": [64, 1, 64]}


def test_a_2d_map_keeps_its_manifest_form_key_for_key():
    spec = TensorMap("A", ("K", "M"), "lda", (64, 128), "fp16", 2)
    assert list(spec.as_dict()) == ["tensor", "dims", "row_stride", "box", "dtype", "elem_bytes", "swizzle",
                                    "interleave", "l2_promotion", "oob_fill"]


def test_a_1x1_stride_1_layer_keeps_the_gemm_path():
    problem = P(32, 56, 56, 256, 64, 1, 1, dtype="fp16")
    plan = cw.WGMMA.launch(problem, cs.hand_picked(problem, H200)[0])
    assert plan.main_kernel.name == gw.KERNEL_NAME and {m.kind for m in plan.tensor_maps.values()} == {"tiled"}
    assert "conv2d_wgmma_im2col" not in cw.WGMMA.source(problem, cs.hand_picked(problem, H200)[0])


# ---- every pick of ResNet-50's 3x3 and strided 1x1 layers builds for sm_90a ---------------------------------------

def _compile_jobs():
    jobs = {}
    for c, hw, stride in RESNET50_3X3:
        for epilogue in ("none", "bias_residual_relu"):
            problem = three_by_three(c, hw, stride, epilogue=epilogue)
            for config in cs.hand_picked(problem, H200):
                jobs.setdefault(cw.WGMMA.source(problem, config), (problem, config))
    for c, k, hw in RESNET50_1X1_STRIDED:
        problem = P(32, hw, hw, c, k, 1, 1, 2, 2, dtype="fp16", epilogue="bias_residual_relu")
        for config in cs.hand_picked(problem, H200):
            jobs.setdefault(cw.WGMMA.source(problem, config), (problem, config))
    return jobs


@pytest.mark.skipif(not nvrtc.available(), reason="NVRTC is not installed")
def test_every_resnet50_pick_builds_for_sm90a_without_spills():
    jobs = _compile_jobs()
    with ThreadPoolExecutor(max_workers=os.cpu_count() or 2) as pool:
        programs = list(pool.map(lambda source: cuda.compile_program(source, "sm_90a", (cw.IM2COL_KERNEL,)), jobs))
    bad = []
    for (problem, config), program in zip(jobs.values(), programs):
        res = program.resources[cw.IM2COL_KERNEL]
        if res.spill_store_bytes or res.spill_load_bytes or res.stack_bytes or cuda.SERIALIZED_WGMMA in program.log:
            bad.append(f"{problem.label} {cs.describe(config)}: {res}")
    assert len(jobs) >= 20 and not bad, bad
