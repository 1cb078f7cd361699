"""Hand-picked configurations for a few rows of C: memory-bound, so they keep many bytes of B in flight on every SM.

The mma family leads with sliced K in one launch (no split-K workspace), then the split-K pick; SIMT splits K.
"""

from __future__ import annotations

import pytest

from tracea_cli.ops.gemm.families.engine import gemm_launch
from tracea_cli.ops.gemm.families.engine_space import SMALL_M_WAVES, gemm_space, hand_picked, tiling
from tracea_cli.ops.gemm.problem import GemmProblem
from tracea_cli.ops.launch import KernelStep


@pytest.mark.parametrize("m", (1, 16, 64))
@pytest.mark.parametrize("dtype,layout", [("fp16", "nn"), ("bf16", "nt"), ("tf32", "nn")])
def test_small_m_first_pick_is_sliced_k_in_one_launch(sm90, m, dtype, layout):
    problem = GemmProblem(m, 4096, 4096, dtype, layout)
    first = hand_picked(problem, sm90, limit=3)[0]
    assert gemm_space(problem, sm90).why_invalid(first) is None
    assert first["slice_k"] > 1 and first["split_k"] == 1
    plan = gemm_launch(problem, first)
    assert [type(s) for s in plan.steps] == [KernelStep] and plan.workspace_bytes_per_mn == 0
    blocks = -(-problem.m // first["block_m"]) * -(-problem.n // first["block_n"]) * first["cluster_k"]
    assert blocks >= sm90.limits.sm_count * 0.9  # one block per SM, nearly all of them
    stage_b = first["block_k"] * first["block_n"] * tiling(problem, first).elem_bytes
    assert (first["stages"] - 1) * stage_b >= 32 * 1024  # B bytes in flight per SM


@pytest.mark.parametrize("dtype,layout", [("fp16", "nn"), ("bf16", "nt")])
def test_the_split_k_pick_follows_the_sliced_ones(sm90, dtype, layout):
    problem = GemmProblem(16, 4096, 4096, dtype, layout)
    second = hand_picked(problem, sm90, limit=3)[2]  # after the K-cluster pick and the one-block sliced pick
    assert gemm_space(problem, sm90).why_invalid(second) is None
    blocks = -(-problem.n // second["block_n"]) * second["split_k"]
    assert second["slice_k"] == 1 and second["block_m"] == 32 and blocks >= SMALL_M_WAVES * sm90.limits.sm_count


def test_simt_small_m_picks_split_k_over_several_waves(sm90):
    """fp32, 16 rows, layout nn: the gemv kernel first (all 16 rows in one block, B read once), its slices summed in
    one launch, then the same with the two-launch sum, then the tiled kernel's split-K pick; all cover the SMs
    several times over."""
    problem = GemmProblem(16, 4096, 4096, "fp32")
    serial, first, second = hand_picked(problem, sm90, limit=3)
    for pick, waves in ((serial, 3), (first, 3), (second, SMALL_M_WAVES)):  # gemv: 128-column blocks, split_k <= 16
        assert gemm_space(problem, sm90).why_invalid(pick) is None and "slice_k" not in pick
        blocks = -(-problem.n // pick["block_n"]) * pick["split_k"]
        assert blocks >= waves * sm90.limits.sm_count
    assert first["kernel"] == "gemv" and first["block_m"] == 16 and first["splitk_mode"] == "sum"
    assert serial == {**first, "splitk_mode": "serial"}
    assert second["kernel"] == "tiled" and second["block_m"] == 32 and second["splitk_mode"] == "sum"


def test_simt_gemv_serial_pick_only_where_the_gemv_pick_splits(sm90):
    """One slice (K too short to split) has nothing to sum: no serial pick."""
    picks = hand_picked(GemmProblem(1, 4096, 64, "fp32"), sm90)
    assert picks[0]["kernel"] == "gemv" and picks[0]["split_k"] == 1
    assert all(c["splitk_mode"] == "sum" for c in picks)


def test_simt_gemv_pick_only_where_it_applies(sm90):
    """The gemv kernel is offered for fp32 with at most 16 rows in layout nn; nt and 17 rows keep the tiled picks."""
    assert hand_picked(GemmProblem(1, 4096, 4096, "fp32"), sm90)[0]["kernel"] == "gemv"
    for problem in (GemmProblem(1, 4096, 4096, "fp32", layout="nt"), GemmProblem(17, 4096, 4096, "fp32")):
        assert all(c.get("kernel", "tiled") == "tiled" for c in hand_picked(problem, sm90))


def test_large_problems_keep_their_picks(sm90):
    picks = hand_picked(GemmProblem(4096, 4096, 4096, "fp16"), sm90, limit=3)
    assert all(c["split_k"] == 1 and c["slice_k"] == 1 and c["block_m"] >= 128 for c in picks)


@pytest.mark.parametrize("m", (1, 16))
def test_up_to_sixteen_rows_the_sliced_picks_have_no_padded_block_rows(sm90, sm80, m):
    """On sm_90, 16-bit: K split across a cluster of two 16 x 64 blocks first, then one 16 x 32 block in 8 K-slices
    (the first pick where there are no clusters)."""
    cluster, sliced = hand_picked(GemmProblem(m, 4096, 4096, "fp16"), sm90, limit=2)
    assert (cluster["block_m"], cluster["block_n"], cluster["slice_k"], cluster["cluster_k"]) == (16, 64, 4, 2)
    assert sliced["block_m"] == 16 and sliced["warp_m"] == 16 and sliced["slice_k"] == 8 and sliced["cluster_k"] == 1
    assert hand_picked(GemmProblem(m, 4096, 4096, "fp16"), sm80, limit=1)[0] == {**sliced, "cluster_k": 1}
    assert hand_picked(GemmProblem(m, 4096, 4096, "tf32"), sm90, limit=1)[0]["cluster_k"] == 1  # not measured


def test_k_clusters_exist_only_where_k_is_sliced_on_sm90(sm90, sm80):
    assert gemm_space(GemmProblem(16, 4096, 4096, "fp16"), sm90).param("cluster_k").values == (1, 2, 4)
    assert gemm_space(GemmProblem(16, 4096, 4096, "fp16"), sm80).param("cluster_k").values == (1,)
    assert gemm_space(GemmProblem(4096, 4096, 4096, "fp16"), sm90).param("cluster_k").values == (1,)


def test_sixteen_row_blocks_exist_only_where_k_is_sliced(sm90):
    assert 16 in gemm_space(GemmProblem(16, 4096, 4096, "fp16"), sm90).param("block_m").values
    assert 16 not in gemm_space(GemmProblem(4096, 4096, 4096, "fp16"), sm90).param("block_m").values
    simt = gemm_space(GemmProblem(16, 4096, 4096, "fp32"), sm90)  # SIMT: 16-row blocks are the gemv kernel's only
    tiled = simt.complete({"family": "simt", "block_m": 16, "block_n": 64, "block_k": 16, "warp_m": 16, "warp_n": 32,
                           "stages": 2, "split_k": 1, "group_m": 1, "vec": 4})
    assert "tiled blocks are 32 rows at least" in simt.why_invalid(tiled)
    assert simt.why_invalid({**tiled, "kernel": "gemv"}) is None
    assert 16 not in gemm_space(GemmProblem(17, 4096, 4096, "fp32"), sm90).param("block_m").values
