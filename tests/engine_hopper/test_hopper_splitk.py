"""Split-K in the Hopper family (gemm_wgmma.cuh with WG_SPLIT_K > 1, gemm_wgmma_splitk.cuh), without a GPU: the
space's rules, the launch plan (zeroing, the main kernel over every tile's K slices, the second pass) and the grid it
implies, and sm_90a cubins that ptxas builds without spills. The exported C runtime's launches are checked against
the fake driver in tests/export/test_export_wgmma.py; the kernels' results on a GPU in test_hopper_gpu.py."""

from __future__ import annotations

import pytest

from tracea_cli.backends import nvrtc
from tracea_cli.backends.op_backend import OpBackend
from tracea_cli.ops.conv2d.families import wgmma as cw
from tracea_cli.ops.conv2d.problem import Conv2dProblem
from tracea_cli.ops.gemm.families import wgmma as gw
from tracea_cli.ops.gemm.families import wgmma_space as hs
from tracea_cli.ops.gemm.problem import GemmProblem
from tracea_cli.ops.launch import KernelStep, MemsetStep
from tracea_cli.target import Target, limits_for

H200 = Target(backend="cuda", device_class="NVIDIA H200", arch="sm_90a", limits=limits_for("sm_90a"))
GEMM = OpBackend("gemm", "cuda")
CONV = OpBackend("conv2d", "cuda")
BASE = {"family": "wgmma", "tile_m": 128, "tile_n": 128, "stages": 4, "consumers": 2, "schedule": "cooperative",
        "cluster_m": 1, "persistent": 1, "group_m": 8, "store": "direct"}
# few tiles and a long K: 8 x 4 tiles of 128 x 128 leave 100 of 132 SMs idle
SMALL = GemmProblem(1024, 512, 8192, "bf16", "nt", "bias_silu")
LATE_CONV = Conv2dProblem(n=32, h=7, w=7, c=512, k=512, r=3, s=3, pad_h=1, pad_w=1, dtype="fp16",
                          epilogue="bias_residual_relu")  # ResNet-50's last 3x3 layer: 13 x 8 tiles of 128 x 64


def _why(problem, config, backend=GEMM):
    return backend.why_invalid(problem, H200, config)


def test_split_k_is_a_parameter_whose_absence_means_one():
    space = hs.hopper_space(SMALL, H200)
    assert space.param("split_k").values == hs.SPLIT_K_VALUES and space.param("split_k").default == 1
    assert space.complete(BASE)["split_k"] == 1  # a configuration stored before split_k existed
    assert space.why_invalid(BASE) is None and hs.split_k_of(BASE) == 1
    assert gw.wgmma_launch(SMALL, BASE) == gw.wgmma_launch(SMALL, {**BASE, "split_k": 1})
    assert "#define WG_SPLIT_K 1\n" in gw.wgmma_source(SMALL, BASE)


def test_the_ideal_schedule_counts_rounds_of_slices():
    # 32 tiles on 132 SMs: one round, however sliced, each of 1/parts of the work
    assert [hs.split_schedule(32, parts, 132) for parts in (1, 2, 4)] == [1, 0.5, 0.25]
    # 104 tiles: 2, 3 or 4 slices still need as many rounds as slices; 5 slices fit 520 items in 4 rounds
    assert [hs.split_schedule(104, parts, 132) for parts in (1, 2, 3, 4, 5)] == [1, 1, 1, 1, 0.8]
    assert hs.split_schedule(1024, 5, 132) == 7.8  # 8 rounds unsplit: a 2.5% gain, below the rule's tenth


def test_the_rules_explain_every_refusal():
    assert _why(SMALL, {**BASE, "split_k": 4}) is None  # 32 tiles: one round of quarter tiles
    assert "store=direct only" in _why(SMALL, {**BASE, "split_k": 2, "store": "tma", "stages": 3})
    # 4096 x 4096 in 128 x 128 tiles: 1024 CTAs take 8 rounds; slicing saves at most a few percent
    big = GemmProblem(4096, 4096, 4096, "bf16", "nt")
    assert "1024 CTAs of whole tiles take 8 wave(s) of the 132 SMs" in _why(big, {**BASE, "split_k": 2})
    assert "not shorter by a tenth" in _why(big, {**BASE, "split_k": 5})
    # ResNet-50's last 3x3 layer: 104 tiles of 128 x 64; only 5, 6 or 8 slices shorten the schedule
    late = {**BASE, "tile_n": 64, "stages": 6}
    assert [_why(LATE_CONV, {**late, "split_k": s}, CONV) is None for s in hs.SPLIT_K_VALUES] == [
        True, False, False, False, True, True, True]
    # K = 128 (bf16): two K-blocks of 64 cannot make three slices; the stages rule allows 2
    short = GemmProblem(1024, 512, 128, "bf16", "nt")
    assert "leaves a slice without work" in _why(short, {**BASE, "split_k": 3, "stages": 2})
    assert _why(short, {**BASE, "split_k": 2, "stages": 2}) is None
    # clusters count their CTAs (512 clusters of 2 here), not the clusters
    assert "1024 CTAs of whole tiles" in _why(big, {**BASE, "cluster_m": 2, "group_m": 16, "split_k": 2})


def test_the_plan_zeroes_once_runs_every_slice_then_the_second_pass():
    config = {**BASE, "split_k": 4}
    plan = gw.wgmma_launch(SMALL, config)
    memset, main, second = plan.steps
    assert isinstance(memset, MemsetStep) and memset.once and memset.elem_bytes == 4
    assert isinstance(main, KernelStep) and main.name == gw.KERNEL_NAME and main.params is None
    assert plan.main_kernel is main and plan.params == gw.PARAMS and "workspace" in plan.params
    assert second == KernelStep(gw.SPLITK_NAME, grid=("mn/256", 1, 1), block=(256, 1, 1), params=gw.SPLITK_PARAMS)
    assert (plan.split_k, plan.workspace_bytes_per_mn) == (4, 4) and plan.work.endswith("* split_k")
    sizes = {"M": SMALL.m, "N": SMALL.n, "K": SMALL.k}
    assert plan.work_items(sizes) == 8 * 4 * 4 == hs.work_items(SMALL, config)
    assert plan.grid(main, sizes, resident_clusters=132) == (128, 1, 1)
    assert plan.grid(second, sizes) == (1024 * 512 // 256, 1, 1)
    assert plan.workspace_bytes(sizes) == 4 * 1024 * 512
    unsplit = gw.wgmma_launch(SMALL, BASE)
    assert [s.name for s in unsplit.steps] == [gw.KERNEL_NAME] and unsplit.split_k is None
    assert unsplit.work_items(sizes) == 32 and unsplit.workspace_bytes(sizes) == 0


def test_conv2d_im2col_plan_runs_the_second_pass_over_y():
    config = {**BASE, "tile_n": 64, "stages": 6, "split_k": 5}
    assert _why(LATE_CONV, config, CONV) is None
    plan = cw.WGMMA.launch(LATE_CONV, config)
    memset, main, second = plan.steps
    assert isinstance(memset, MemsetStep) and memset.once
    assert main.name == cw.IM2COL_KERNEL and plan.main_kernel is main and "workspace" in plan.params
    assert second.name == gw.SPLITK_NAME and second.params == ("workspace", "Y", "bias", "residual", "M", "N", "ldc")
    assert (plan.split_k, plan.workspace_bytes_per_mn) == (5, 4)
    sizes = {"M": LATE_CONV.gemm_m, "N": LATE_CONV.k, "K": 9 * 512}
    assert plan.work_items(sizes) == 13 * 8 * 5
    source = cw.WGMMA.source(LATE_CONV, config)
    assert "#define WG_SPLIT_K 5\n" in source and source.count(cw.SPLITK_AFTER_RESIDUAL + cw.SPLITK_STORE_LINE) == 1
    assert "gemm_wgmma(" not in source and 'extern "C" __global__ void __launch_bounds__(WG_SPLITK_THREADS)' in source


@pytest.mark.skipif(not nvrtc.available(), reason="NVRTC is not installed")
@pytest.mark.parametrize("problem, change, backend", [
    (SMALL, {"split_k": 4}, GEMM),
    (GemmProblem(500, 1001, 4096, "fp16", "nn", "bias_residual"),  # ragged N, B staged; pingpong
     {"split_k": 3, "schedule": "pingpong", "stages": 5, "group_m": 4}, GEMM),
    (GemmProblem(256, 1024, 8192, "tf32", "nt", "bias_relu"), {"split_k": 2, "cluster_m": 2, "group_m": 1}, GEMM),
    (LATE_CONV, {"tile_n": 64, "stages": 6, "split_k": 5}, CONV),
], ids=["bf16-nt-silu-4", "fp16-nn-ragged-pingpong-3", "tf32-nt-cluster-2", "conv2d-3x3-residual-relu-5"])
def test_split_k_cubins_build_without_spills(problem, change, backend):
    art = backend.compile(problem, {**BASE, **change}, H200)
    kernels = art.resources["kernels"]
    assert gw.SPLITK_NAME in kernels and art.plan.main_kernel.name in kernels
    for kernel in kernels.values():
        assert 0 < kernel["registers"] <= 255 and kernel["spill_store_bytes"] == kernel["stack_bytes"] == 0
    assert "C7510" not in art.resources["log"] and "C7508" not in art.resources["log"]
