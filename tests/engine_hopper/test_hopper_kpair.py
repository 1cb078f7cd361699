"""K pairs in the Hopper family (gemm_wgmma.cuh with WG_CLUSTER_K = 2: the two CTAs of a cluster each multiply half
of a tile's K, one consumer warpgroup's sums crossing to the other CTA through distributed shared memory), without a
GPU: the parameter and its absence, the space's rules and their reasons, the launch plan (the pair as the grid's and
the cluster's second dimension), the picks, and sm_90a cubins that ptxas builds without spills. The kernels' results
on a GPU: test_hopper_gpu.py (GEMM) and test_conv2d_wgmma_gpu.py (the ResNet-50 3x3 picks); the export's launch:
tests/export/test_export_wgmma.py."""

from __future__ import annotations

import pytest

from tracea_cli.backends import nvrtc
from tracea_cli.backends.op_backend import OpBackend
from tracea_cli.ops.conv2d.families import wgmma as cw
from tracea_cli.ops.conv2d.families import wgmma_space as cs
from tracea_cli.ops.conv2d.problem import Conv2dProblem
from tracea_cli.ops.gemm.families import wgmma as gw
from tracea_cli.ops.gemm.families import wgmma_space as hs
from tracea_cli.ops.gemm.problem import GemmProblem
from tracea_cli.target import Target, limits_for

H200 = Target(backend="cuda", device_class="NVIDIA H200", arch="sm_90a", limits=limits_for("sm_90a"))
GEMM = OpBackend("gemm", "cuda")
CONV = OpBackend("conv2d", "cuda")
BASE = {"family": "wgmma", "tile_m": 128, "tile_n": 128, "stages": 4, "consumers": 2, "schedule": "cooperative",
        "cluster_m": 1, "persistent": 1, "group_m": 8, "store": "direct"}
PAIR = {**BASE, "persistent": 0, "cluster_k": 2}
# ResNet-50's last 3x3 layer at N = 32: M = 1568, N = 512, K = 9 x 512 (72 k-steps); 13 x 4 tiles of 128 x 128
LATE_CONV = Conv2dProblem(n=32, h=7, w=7, c=512, k=512, r=3, s=3, pad_h=1, pad_w=1, dtype="fp16")
LATE_GEMM = GemmProblem(1568, 512, 4608, "fp16", "nt", "bias_residual")


def _why(problem, config, backend=GEMM):
    return backend.why_invalid(problem, H200, config)


def test_cluster_k_is_a_parameter_whose_absence_means_one_and_leaves_the_source_as_it_was():
    space = hs.hopper_space(LATE_GEMM, H200)
    assert space.param("cluster_k").values == (1, 2) and space.param("cluster_k").default == 1
    assert space.complete(BASE)["cluster_k"] == 1 and hs.cluster_k_of(BASE) == 1
    assert gw.wgmma_launch(LATE_GEMM, BASE) == gw.wgmma_launch(LATE_GEMM, {**BASE, "cluster_k": 1})
    assert "WG_CLUSTER_K" not in gw.defines(LATE_GEMM, BASE)  # every other configuration's source stays as it was
    assert "#define WG_CLUSTER_K 2\n" in gw.wgmma_source(LATE_GEMM, PAIR)


def test_the_rules_explain_every_refusal():
    assert _why(LATE_GEMM, PAIR) is None and _why(LATE_CONV, PAIR, CONV) is None
    cases = [
        ({"schedule": "pingpong"}, "cooperative with consumers=2 only"),
        ({"tile_m": 64, "consumers": 1}, "cooperative with consumers=2 only"),
        ({"cluster_m": 2}, "cluster_m=1 and split_k=1 only"),
        ({"split_k": 2}, "cluster_m=1 and split_k=1 only"),
        ({"persistent": 1}, "persistent=0 only"),
        ({"tile_n": 256, "stages": 3}, "with store=direct spills registers above 96 accumulators per thread"),
        ({"tile_n": 192, "stages": 3, "store": "tma"}, "with store=tma spills registers above 64"),
    ]
    for change, says in cases:
        why = _why(LATE_GEMM, {**PAIR, **change})
        assert why is not None and says in why, (change, why)
    # 13 x 8 tiles of 128 x 64 already fill 104 of 132 SMs: as pairs, two rounds of half tiles
    assert ("104 CTAs of whole tiles take 1 wave(s) of the 132 SMs; as K pairs, with the exchange, 1.11: not shorter "
            "by a tenth" in _why(LATE_CONV, {**PAIR, "tile_n": 64, "stages": 6}, CONV))
    assert "K=64 has one" in _why(GemmProblem(128, 128, 64, "fp16", "nt"), {**PAIR, "stages": 2})
    assert "slower" in _why(GemmProblem(4096, 4096, 4096, "fp16", "nt"), PAIR)  # 1024 tiles: pairs cannot pay


def test_the_pair_is_the_second_dimension_of_the_grid_and_the_cluster():
    plan = gw.wgmma_launch(LATE_GEMM, PAIR)
    (main,) = plan.steps
    assert main.grid == ("work_clusters", 2, 1) and main.cluster == (1, 2, 1) and plan.cluster_m == 1
    sizes = {"M": LATE_GEMM.m, "N": LATE_GEMM.n, "K": LATE_GEMM.k}
    assert plan.grid(main, sizes) == (13 * 4, 2, 1) and plan.workspace_bytes(sizes) == 0 and plan.split_k is None
    # shared memory: the ring, the pair's buffer (one consumer's 64 x 128 fp32 sums) and one more mbarrier
    assert hs.smem_bytes("fp16", PAIR) == hs.smem_bytes("fp16", {**BASE, "persistent": 0}) + 64 * 128 * 4 + 8
    conv = cw.WGMMA.launch(LATE_CONV, PAIR)
    assert conv.main_kernel.grid == ("work_clusters", 2, 1) and conv.main_kernel.cluster == (1, 2, 1)


def test_the_picks_try_a_pair_where_whole_tiles_leave_sms_idle():
    picks = cs.hand_picked(LATE_CONV, H200)
    assert cs.describe(picks[1]) == "wgmma 128x128 s6 c2 cooperative cl1 p0 g8 direct kpair"
    assert cw.WGMMA.suggested(LATE_CONV, H200)[1] == picks[1]
    gemm_picks = hs.suggested_configs(LATE_GEMM, H200)
    assert any(hs.cluster_k_of(c) == 2 for c in gemm_picks)
    # many tiles: no pair is suggested
    assert not any(hs.cluster_k_of(c) == 2 for c in hs.suggested_configs(GemmProblem(4096, 4096, 4096, "fp16", "nt"),
                                                                          H200))
    assert hs.pair_variant(hs.hopper_space(GemmProblem(4096, 4096, 4096, "fp16", "nt"), H200),
                           GemmProblem(4096, 4096, 4096, "fp16", "nt"), BASE, 132) is None


@pytest.mark.skipif(not nvrtc.available(), reason="NVRTC is not installed")
@pytest.mark.parametrize("problem, change, backend", [
    (LATE_GEMM, {}, GEMM),
    (GemmProblem(1000, 1001, 4100, "bf16", "nn", "bias_silu"), {"tile_n": 192, "stages": 3}, GEMM),  # ragged, staged
    (GemmProblem(512, 768, 8192, "tf32", "nt", "bias_relu"), {"store": "tma", "stages": 3, "group_m": 4}, GEMM),
    (Conv2dProblem(n=32, h=14, w=14, c=512, k=512, r=3, s=3, stride_h=2, stride_w=2, pad_h=1, pad_w=1, dtype="fp16",
                   epilogue="bias_residual_relu"), {"stages": 5}, CONV),
], ids=["fp16-nt-residual", "bf16-nn-ragged-silu-192", "tf32-tma", "conv2d-3x3-stride2-residual-relu"])
def test_k_pair_cubins_build_without_spills_and_exchange_through_dsmem(problem, change, backend):
    config = {**PAIR, **change}
    assert _why(problem, config, backend) is None
    art = backend.compile(problem, config, H200)
    main = art.resources["kernels"][art.plan.main_kernel.name]
    assert 0 < main["registers"] <= 255 and main["spill_store_bytes"] == main["stack_bytes"] == 0
    assert "C7510" not in art.resources["log"] and "C7508" not in art.resources["log"]
    ptx = nvrtc.compile_source(art.source, nvrtc.CompileOptions(arch="sm_90a")).ptx
    assert "st.async.shared::cluster.mbarrier::complete_tx::bytes.v4.b32" in ptx and "mapa.shared::cluster" in ptx
