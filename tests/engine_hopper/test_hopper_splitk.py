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
# ResNet-50's last 3x3 layer (K = 9 * 512): at N = 32, 13 x 8 tiles of 128 x 64 (LATE); at N = 1, 1 x 8 of 64 x 64
LATE_CONV = Conv2dProblem(n=32, h=7, w=7, c=512, k=512, r=3, s=3, pad_h=1, pad_w=1, dtype="fp16",
                          epilogue="bias_residual_relu")
LATE_CONV_N1 = Conv2dProblem(n=1, h=7, w=7, c=512, k=512, r=3, s=3, pad_h=1, pad_w=1, dtype="fp16",
                             epilogue="bias_residual_relu")
LATE = {**BASE, "tile_n": 64, "stages": 6}
LATE_N1 = {**BASE, "tile_m": 64, "tile_n": 64, "consumers": 1, "stages": 4, "group_m": 1}


def _why(problem, config, backend=GEMM):
    return backend.why_invalid(problem, H200, config)


def test_split_k_is_a_parameter_whose_absence_means_one():
    space = hs.hopper_space(SMALL, H200)
    assert space.param("split_k").values == hs.SPLIT_K_VALUES and space.param("split_k").default == 1
    assert space.complete(BASE)["split_k"] == 1  # a configuration stored before split_k existed
    assert space.why_invalid(BASE) is None and hs.split_k_of(BASE) == 1
    assert gw.wgmma_launch(SMALL, BASE) == gw.wgmma_launch(SMALL, {**BASE, "split_k": 1})
    assert "#define WG_SPLIT_K 1\n" in gw.wgmma_source(SMALL, BASE)


def test_the_schedule_counts_rounds_of_slices_and_their_adds():
    add = hs.SPLIT_ADD_DEPTH
    # 32 tiles of K = 8192 on 132 SMs: one round, however sliced, of a slice's product and its adds
    assert [hs.split_schedule(32, parts, 132, 8192) for parts in (1, 2, 4)] == [1, (4096 + add) / 8192,
                                                                                 (2048 + add) / 8192]
    # 104 tiles: 2, 3 or 4 slices need as many rounds as slices, each longer than 1/parts by the adds
    assert [hs.split_schedule(104, parts, 132, 4608) > 1 for parts in (2, 3, 4)] == [True] * 3
    assert hs.split_schedule(104, 5, 132, 4608) == 4 * (4608 / 5 + add) / 4608  # 520 items in 4 rounds
    # the adds cost alike however deep K is: they outweigh a short product
    assert hs.split_schedule(8, 8, 132, 1024) > 1 > hs.split_schedule(8, 8, 132, 4608)


def test_the_rules_explain_every_refusal():
    assert _why(SMALL, {**BASE, "split_k": 4}) is None  # 32 tiles: one round of quarter tiles
    assert "store=direct only" in _why(SMALL, {**BASE, "split_k": 2, "store": "tma", "stages": 3})
    # 4096 x 4096 in 128 x 128 tiles: 1024 CTAs take 8 rounds; slicing saves at most a few percent
    big = GemmProblem(4096, 4096, 4096, "bf16", "nt")
    assert "1024 CTAs of whole tiles take 8 wave(s) of the 132 SMs" in _why(big, {**BASE, "split_k": 2})
    assert "not shorter by a tenth" in _why(big, {**BASE, "split_k": 5})
    # ResNet-50's last 3x3 layer: at N = 32 (104 tiles of 128 x 64) every split is slower (measured on the H100:
    # 5 slices 0.051 ms against 0.031 unsplit); at N = 1 (8 tiles) every split is shorter (8 slices: 2.05x)
    assert [_why(LATE_CONV, {**LATE, "split_k": s}, CONV) is None for s in hs.SPLIT_K_VALUES] == [
        True, False, False, False, False, False, False]
    assert "is slower" in _why(LATE_CONV, {**LATE, "split_k": 5}, CONV)
    assert all(_why(LATE_CONV_N1, {**LATE_N1, "split_k": s}, CONV) is None for s in hs.SPLIT_K_VALUES)
    # K = 128 (bf16): two K-blocks of 64 cannot make three slices; the stages rule allows 2
    short = GemmProblem(1024, 512, 128, "bf16", "nt")
    assert "leaves a slice without work" in _why(short, {**BASE, "split_k": 3, "stages": 2})
    assert "is slower" in _why(short, {**BASE, "split_k": 2, "stages": 2})  # two slices of 64 and their adds
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
    config = {**LATE_N1, "split_k": 5}
    assert _why(LATE_CONV_N1, config, CONV) is None
    plan = cw.WGMMA.launch(LATE_CONV_N1, config)
    memset, main, second = plan.steps
    assert isinstance(memset, MemsetStep) and memset.once
    assert main.name == cw.IM2COL_KERNEL and plan.main_kernel is main and "workspace" in plan.params
    assert second.name == gw.SPLITK_NAME and second.params == ("workspace", "Y", "bias", "residual", "M", "N", "ldc")
    assert (plan.split_k, plan.workspace_bytes_per_mn) == (5, 4)
    sizes = {"M": LATE_CONV_N1.gemm_m, "N": LATE_CONV_N1.k, "K": 9 * 512}
    assert plan.work_items(sizes) == 1 * 8 * 5
    source = cw.WGMMA.source(LATE_CONV_N1, config)
    assert "#define WG_SPLIT_K 5\n" in source and source.count(cw.SPLITK_AFTER_RESIDUAL + cw.SPLITK_STORE_LINE) == 1
    assert "gemm_wgmma(" not in source and 'extern "C" __global__ void __launch_bounds__(WG_SPLITK_THREADS)' in source


@pytest.mark.skipif(not nvrtc.available(), reason="NVRTC is not installed")
@pytest.mark.parametrize("problem, change, backend", [
    (SMALL, {"split_k": 4}, GEMM),
    (GemmProblem(500, 1001, 4096, "fp16", "nn", "bias_residual"),  # ragged N, B staged; pingpong
     {"split_k": 3, "schedule": "pingpong", "stages": 5, "group_m": 4}, GEMM),
    (GemmProblem(256, 1024, 8192, "tf32", "nt", "bias_relu"), {"split_k": 2, "cluster_m": 2, "group_m": 1}, GEMM),
    (LATE_CONV_N1, {**LATE_N1, "split_k": 5}, CONV),
], ids=["bf16-nt-silu-4", "fp16-nn-ragged-pingpong-3", "tf32-nt-cluster-2", "conv2d-3x3-residual-relu-5"])
def test_split_k_cubins_build_without_spills(problem, change, backend):
    art = backend.compile(problem, {**BASE, **change}, H200)
    kernels = art.resources["kernels"]
    assert gw.SPLITK_NAME in kernels and art.plan.main_kernel.name in kernels
    for kernel in kernels.values():
        assert 0 < kernel["registers"] <= 255 and kernel["spill_store_bytes"] == kernel["stack_bytes"] == 0
    assert "C7510" not in art.resources["log"] and "C7508" not in art.resources["log"]
