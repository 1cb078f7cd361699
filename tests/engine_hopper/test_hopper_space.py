"""The wgmma family's search space: where it applies, and rules that keep invalid configurations from compiling."""

from __future__ import annotations

import dataclasses

import pytest

from tracea_cli.ops.gemm.families import wgmma_space as hs
from tracea_cli.ops.gemm.families.wgmma import WGMMA
from tracea_cli.ops.gemm.problem import GemmProblem
from tracea_cli.target import Target, limits_for

H200 = Target(backend="cuda", device_class="NVIDIA H200", arch="sm_90a", limits=limits_for("sm_90a"))
GOOD = {"family": "wgmma", "tile_m": 128, "tile_n": 256, "stages": 4, "consumers": 2, "schedule": "cooperative",
        "cluster_m": 2, "persistent": 1, "group_m": 8, "store": "direct"}


def problem(m=4096, n=4096, k=4096, dtype="bf16", layout="nn", epilogue="none") -> GemmProblem:
    return GemmProblem(m, n, k, dtype=dtype, layout=layout, epilogue=epilogue)


@pytest.mark.parametrize("target", [
    Target(backend="cuda", device_class="A100", arch="sm_80"),
    Target(backend="cuda", device_class="RTX 4090", arch="sm_89"),
    Target(backend="cpu", device_class="cpu"),
])
def test_only_sm90_targets(target):
    assert hs.hopper_space(problem(), target) is None
    assert "sm_90" in hs.qualifies(problem(), target)
    assert WGMMA.space(problem(), target) == hs.qualifies(problem(), target)  # the family's reason
    assert WGMMA.suggested(problem(), target) == []


def test_plain_sm90_target_qualifies():
    assert hs.hopper_space(problem(), Target(backend="cuda", device_class="H100", arch="sm_90")) is not None


@pytest.mark.parametrize("dtype", ["fp32", "fp64"])
def test_dtypes_without_wgmma_are_left_out(dtype):
    assert hs.hopper_space(problem(dtype=dtype), H200) is None


def test_tf32_nn_qualifies_behind_a_transpose_of_b():
    assert hs.qualifies(problem(dtype="tf32", layout="nn"), H200) is None
    assert hs.staging(problem(dtype="tf32", layout="nn")) == hs.Staging(pad_a=False, b="transpose")
    assert hs.staging(problem(dtype="tf32", layout="nt")) == hs.Staging()
    assert hs.staging(problem(k=4098, dtype="tf32", layout="nn")) == hs.Staging(pad_a=True, b="transpose")


@pytest.mark.parametrize("m,n,k,dtype,layout,staged", [
    (4096, 4096, 4100, "bf16", "nn", hs.Staging(pad_a=True)),  # K*2 bytes is not a multiple of 16: A is staged
    (1000, 3000, 777, "fp16", "nn", hs.Staging(pad_a=True)),  # nn: B's rows have N elements, B is read in place
    (1000, 3000, 777, "fp16", "nt", hs.Staging(pad_a=True, b="pad")),  # nt: B's rows have K elements too
    (127, 256, 1023, "bf16", "nt", hs.Staging(pad_a=True, b="pad")),
    (1000, 3000, 776, "fp16", "nn", hs.Staging()),  # M needs no alignment: TMA clips rows
    (4096, 4096, 4100, "tf32", "nt", hs.Staging()),  # 4 fp32 elements are 16 bytes
    (4096, 4096, 4098, "tf32", "nt", hs.Staging(pad_a=True, b="pad")),
])
def test_unaligned_k_qualifies_behind_staging(m, n, k, dtype, layout, staged):
    p = problem(m, n, k, dtype, layout)
    assert hs.qualifies(p, H200) is None and hs.hopper_space(p, H200) is not None
    assert hs.staging(p) == staged


@pytest.mark.parametrize("m,n,k,dtype,layout,staged", [
    (4096, 4100, 4096, "fp16", "nn", hs.Staging(b="pad")),  # nn: B (K x N) has N elements per row: staged
    (4096, 4100, 4096, "fp16", "nt", hs.Staging()),  # nt: B is N x K, read in place; only C is ragged
    (4095, 4097, 4091, "bf16", "nn", hs.Staging(pad_a=True, b="pad")),
    (3001, 5003, 2999, "fp16", "nt", hs.Staging(pad_a=True, b="pad")),
    (4096, 4098, 4096, "tf32", "nt", hs.Staging()),
    (4096, 4098, 4096, "tf32", "nn", hs.Staging(b="transpose")),  # the transpose serves any N
])
def test_unaligned_n_qualifies_with_c_stored_from_registers(m, n, k, dtype, layout, staged):
    """Any N: B is staged where its rows have N elements; C has no tensor map, so store=tma is refused with a
    sentence and the default configuration stores from registers."""
    p = problem(m, n, k, dtype, layout)
    space = hs.hopper_space(p, H200)
    assert hs.qualifies(p, H200) is None and space is not None and hs.ragged_n(p)
    assert hs.staging(p) == staged
    cfg = {**GOOD, "tile_n": 128, "stages": 3, "cluster_m": 1}
    why = space.why_invalid({**cfg, "store": "tma"})
    assert why is not None and "store=tma" in why and f"N={n}" in why
    assert space.why_invalid(cfg) is None
    assert hs.default_config(p, H200)["store"] == "direct"
    plan = WGMMA.launch(p, hs.default_config(p, H200))
    assert "map_c" not in plan.tensor_maps and "map_c" not in plan.params  # the kernel takes no map over C


def test_aligned_n_keeps_its_tensor_map_over_c():
    p = problem(4096, 4104, 4096, "fp16", "nn")
    assert not hs.ragged_n(p) and hs.staging(p) == hs.Staging()
    plan = WGMMA.launch(p, hs.default_config(p, H200))
    assert "map_c" in plan.tensor_maps and "map_c" in plan.params


def test_a_kernel_built_for_aligned_n_does_not_serve_a_ragged_one():
    cfg = {**GOOD, "cluster_m": 1}
    aligned, ragged = problem(4096, 4096, 4096, "fp16", "nt"), problem(4096, 4097, 4096, "fp16", "nt")
    assert "rules out" in WGMMA.serves(aligned, cfg, ragged)
    assert WGMMA.serves(ragged, cfg, aligned) is None  # element-wise stores are right for any N
    nn_aligned, nn_ragged = problem(4096, 4096, 4096, "fp16", "nn"), problem(4096, 4097, 4096, "fp16", "nn")
    assert "staging" in WGMMA.serves(nn_aligned, cfg, nn_ragged)
    assert WGMMA.serves(nn_ragged, cfg, nn_aligned) is None


def test_a_staging_covers_the_problems_it_can_compute():
    padded, plain = hs.Staging(pad_a=True, b="pad"), hs.Staging()
    assert padded.covers(plain) and padded.covers(hs.Staging(pad_a=True))
    assert not plain.covers(hs.Staging(pad_a=True)) and not plain.covers(hs.Staging(b="pad"))
    assert not hs.Staging(b="transpose").covers(hs.Staging(b="pad"))
    assert hs.Staging(b="transpose").covers(plain) and hs.Staging(pad_a=True, b="transpose").covers(
        hs.Staging(pad_a=True, b="transpose"))


def test_staged_leading_dimensions_start_rows_on_128_byte_lines():
    assert hs.staged_ld_multiple("fp16") == hs.staged_ld_multiple("bf16") == 64 and hs.staged_ld_multiple("tf32") == 32
    assert all(hs.staged_ld_multiple(d) % hs.row_elems(d) == 0 for d in hs.DTYPES)


@pytest.mark.parametrize("shape", [(4096, 4096, 4096), (4096, 2112, 7168), (16, 4096, 4096), (1000, 3000, 776),
                                   (1000, 3000, 777)])
@pytest.mark.parametrize("dtype,layout", [("bf16", "nt"), ("tf32", "nt"), ("tf32", "nn")])
def test_every_valid_config_fits_the_device(shape, dtype, layout):
    p = problem(*shape, dtype=dtype, layout=layout)
    space = hs.hopper_space(p, H200)
    valid = space.valid_configs()
    assert valid, "the space must not be empty"
    for c in valid:
        assert hs.smem_bytes(dtype, c) <= H200.limits.max_shared_per_block_optin
        rows = c["tile_m"] if c["schedule"] == "pingpong" else c["tile_m"] // c["consumers"]
        assert rows % 64 == 0 and rows * c["tile_n"] // 128 <= hs.MAX_ACCUMULATORS
        assert c["schedule"] == "cooperative" or c["consumers"] == 2
        assert c["tile_m"] <= 64 * hs.ceil_div(p.m, 64) and c["tile_n"] <= 64 * hs.ceil_div(p.n, 64)


@pytest.mark.parametrize("change,reason", [
    ({"tile_m": 64, "consumers": 2}, "whole 64-row slabs"),
    ({"tile_m": 256, "tile_n": 256, "consumers": 2}, "accumulators"),
    ({"stages": 6, "store": "tma"}, "shared memory"),
    ({"tile_n": 192, "stages": 6}, "shared memory"),
    ({"schedule": "pingpong"}, "accumulators"),  # one consumer would hold a whole 128x256 tile
    ({"schedule": "pingpong", "tile_n": 128, "consumers": 1}, "two consumer warpgroups"),
    ({"schedule": "pingpong", "tile_n": 128, "stages": 5, "store": "tma"}, None),
    ({"schedule": "pingpong", "tile_n": 128, "stages": 6, "store": "tma"}, "shared memory"),  # two staging tiles
])
def test_rejections_say_why(change, reason):
    space = hs.hopper_space(problem(), H200)
    assert space.why_invalid(GOOD) is None
    if reason is None:
        assert space.why_invalid({**GOOD, **change}) is None
    else:
        assert reason in space.why_invalid({**GOOD, **change})


def test_small_problems_reject_oversized_tiles_clusters_and_stages():
    space = hs.hopper_space(problem(m=16, n=4096, k=128), H200)
    assert "larger than M" in space.why_invalid({**GOOD, "tile_m": 128})
    small = {**GOOD, "tile_m": 64, "consumers": 1, "tile_n": 128, "cluster_m": 1, "group_m": 1, "stages": 2}
    assert space.why_invalid({**small, "consumers": 2}) is not None  # a 64-row tile cannot be split in two
    assert space.why_invalid({**small, "consumers": 2, "schedule": "pingpong"}) is None  # but can be taken in turns
    assert space.why_invalid(small) is None
    assert "two tile rows" in space.why_invalid({**small, "cluster_m": 2})
    assert "K-blocks" in space.why_invalid({**small, "stages": 3})  # K = 128 is two 64-wide blocks


def test_tile_orders_that_coincide_are_kept_once():
    # M = 1024 with 128-row tiles in clusters of 2: 4 cluster rows, so group_m 8 and 16 both mean "all rows".
    space = hs.hopper_space(problem(m=1024), H200)
    assert space.why_invalid({**GOOD, "group_m": 4}) is None
    assert space.why_invalid({**GOOD, "group_m": 8}) is not None
    assert space.why_invalid({**GOOD, "group_m": 16}) is not None


def test_the_targets_limits_are_used():
    tight = dataclasses.replace(H200.limits, max_shared_per_block_optin=100 * 1024)
    small = dataclasses.replace(H200, limits=tight)
    full = hs.hopper_space(problem(), H200).valid_configs()
    fewer = hs.hopper_space(problem(), small).valid_configs()
    assert 0 < len(fewer) < len(full)
    assert all(hs.smem_bytes("bf16", c) <= 100 * 1024 for c in fewer)


def test_space_is_deterministic():
    a = hs.hopper_space(problem(), H200).valid_configs()
    b = hs.hopper_space(problem(), H200).valid_configs()
    assert a == b


@pytest.mark.parametrize("shape", [(4096, 4096, 4096), (8192, 8192, 8192), (16, 4096, 4096), (1000, 3000, 776),
                                   (1000, 3000, 777), (64, 64, 64)])
def test_default_config_is_valid(shape):
    p = problem(*shape)
    config = hs.default_config(p, H200)
    assert config is not None
    assert hs.hopper_space(p, H200).why_invalid(config) is None


def test_default_config_follows_the_measured_winners():
    assert hs.default_config(problem(), H200) | {"group_m": 8} == {**GOOD, "cluster_m": 1, "stages": 3, "store": "tma"}
    assert hs.default_config(problem(n=2112, k=7168), H200)["tile_n"] == 192


def test_default_config_is_none_where_the_family_does_not_apply():
    assert hs.default_config(problem(dtype="fp32"), H200) is None
    assert WGMMA.suggested(problem(dtype="fp32"), H200) == []
    picks = WGMMA.suggested(problem(), H200)
    assert picks[0] == hs.default_config(problem(), H200)


def test_work_items_count_cluster_pairs():
    p = problem(m=1000, n=3000)
    # 8 tile rows of 128 in pairs -> 4 cluster rows; 12 tile columns of 256
    assert hs.work_items(p, GOOD) == 4 * 12
    assert hs.work_items(p, {**GOOD, "cluster_m": 1}) == 8 * 12


def test_default_config_keeps_its_ring_where_a_tma_store_would_cost_stages():
    # tf32's C is 4 bytes: 128x256's TMA staging (128 KiB) beside 3 stages of ring exceeds shared memory; the measured
    # tf32 winner stores from registers with 4 stages (docs/results/gemm_hopper_h200.md), not a 2-stage TMA store
    tf32 = hs.default_config(problem(dtype="tf32", layout="nt"), H200)
    assert (tf32["tile_m"], tf32["tile_n"], tf32["store"], tf32["stages"]) == (128, 256, "direct", 4)
    assert hs.default_config(problem(dtype="tf32"), H200) == tf32  # nn: B transposed by the pre-pass, same kernel
    for dtype in ("fp16", "bf16"):  # 16-bit C fits beside the whole ring: unchanged
        c = hs.default_config(problem(dtype=dtype), H200)
        assert (c["store"], c["stages"]) == ("tma", 3)
    # where no store fits a whole ring (100 KiB of shared memory), the preferred store takes the nearest ring that fits
    small = dataclasses.replace(H200, limits=dataclasses.replace(H200.limits, max_shared_per_block_optin=100 * 1024))
    c = hs.default_config(problem(), small)
    assert (c["tile_n"], c["store"], c["stages"]) == (128, "tma", 2)  # no 128x256 ring fits at all


def test_the_suggestions_are_the_default_then_its_measured_runners_up_each_valid():
    for p in (problem(), problem(dtype="tf32", layout="nt"), problem(m=1000, n=3000, k=777, dtype="fp16"),
              problem(m=64, n=64, k=64)):
        picks = hs.suggested_configs(p, H200)
        space = hs.hopper_space(p, H200)
        assert picks[0] == hs.default_config(p, H200)
        assert all(space.why_invalid(c) is None for c in picks) and len({str(c) for c in picks}) == len(picks)
    big = hs.suggested_configs(problem(), H200)
    assert [(c["tile_n"], c["cluster_m"], c["store"], c["stages"], c["schedule"]) for c in big] == [
        (256, 1, "tma", 3, "cooperative"), (256, 2, "tma", 3, "cooperative"), (256, 1, "direct", 4, "cooperative"),
        (128, 1, "tma", 5, "pingpong")]
