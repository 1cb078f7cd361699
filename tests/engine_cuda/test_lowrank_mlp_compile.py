"""The lowrank-mlp CUDA families without a GPU: their spaces (every rejection explained, the picks valid, where each
family applies), and NVRTC cubins for sm_80 and sm_90a of the configurations tune tries first, which ptxas builds
without spilling. TRACEA_SLOW_TESTS=1 compiles the first picks of every GPU suite row as well."""

from __future__ import annotations

import os

import pytest

from tracea_cli.backends import nvrtc
from tracea_cli.backends.op_backend import OpBackend
from tracea_cli.errors import UsageError
from tracea_cli.ops.lowrank_mlp.families.fused_space import fused_space, tiling
from tracea_cli.ops.lowrank_mlp.families.two_gemm_space import two_gemm_space
from tracea_cli.ops.registry import get_op

OP = get_op("lowrank-mlp")
BACKEND = OpBackend("lowrank-mlp", "cuda")
needs_nvrtc = pytest.mark.skipif(not nvrtc.available(), reason="NVRTC is not installed (pip install 'tracea[cuda]')")


@pytest.mark.parametrize("fields", [dict(m=16384, d_in=4096, rank=64), dict(m=100, d_in=136, rank=100, d_out=120,
                                                                           layout="nt", intermediate="fp32"),
                                    dict(m=4096, d_in=4096, rank=256, dtype="bf16")], ids=["r64", "r100-nt", "r256"])
def test_every_fused_rejection_is_explained_and_the_picks_are_valid(fields, sm80, sm90):
    p = OP.problem(**{"dtype": "fp16", "act": "silu", **fields})
    for target in (sm80, sm90):
        space = fused_space(p, target)
        rejected = list(space.rejections())
        assert space.valid_configs() and len(space.valid_configs()) + len(rejected) == len(list(space.all_configs()))
        for config, reason in rejected:
            assert isinstance(reason, str) and len(reason) > 20, (config, reason)
        picks = BACKEND.suggested(p, target)
        assert picks and all(BACKEND.why_invalid(p, target, c) is None for c in picks)
        for c in space.valid_configs():
            t = tiling(p, c)
            assert t.smem_bytes <= target.limits.max_shared_per_block_optin and t.r_pad >= p.rank


def test_the_fused_rules_say_what_is_wrong(sm80, sm90):
    p = OP.problem(m=16384, d_in=4096, rank=256, dtype="fp16")
    space = fused_space(p, sm90)
    base = {"family": "fused", "block_m": 64, "warps": 8, "warps_n1": 4, "block_k": 32, "block_n": 64, "warps_n2": 4,
            "stages": 2, "vec": 8, "min_blocks": 1, "stage_y": 0, "split_n": 1}
    assert space.why_invalid(base) is None
    assert "phase 1's warp tile has 8 rows" in space.why_invalid({**base, "block_m": 32, "warps_n1": 2})
    assert "phase 1 keeps 168 registers" in space.why_invalid({**base, "warps": 4, "warps_n1": 2, "block_n": 128,
                                                                "warps_n2": 2})
    assert "bytes of shared memory exceed" in fused_space(p, sm80).why_invalid(
        {**base, "block_m": 128, "block_n": 256, "warps_n2": 4, "stages": 4})
    odd = OP.problem(m=100, d_in=100, rank=48, d_out=130, dtype="fp16")
    assert "vec=8 copies need rows whose length is a multiple of 8; d_in (rows of x)=100, d_out (rows of V)=130" in \
        fused_space(odd, sm90).why_invalid({**base, "warps_n1": 1})
    assert "warps_n1=4 splits rank 48" in fused_space(odd, sm90).why_invalid({**base, "vec": 2})


def test_where_each_family_applies(sm90):
    spaces = lambda **f: {fam.name: s for fam, s in BACKEND.spaces(OP.problem(**f), sm90)}  # noqa: E731
    assert set(spaces(m=4096, d_in=4096, rank=64, dtype="fp16")) == {"fused", "two_gemm"}
    assert set(spaces(m=4096, d_in=4096, rank=512, dtype="fp16")) == {"two_gemm"}  # wider than one tile
    assert set(spaces(m=4096, d_in=4096, rank=64, dtype="fp32")) == {"fused", "two_gemm"}  # 3xTF32 or exact SIMT
    assert set(spaces(m=4096, d_in=4096, rank=64, dtype="bf16", intermediate="fp32")) == {"fused"}
    assert set(spaces(m=4096, d_in=4096, rank=64, dtype="fp16", act="silu", residual=True)) == {"fused"}
    with pytest.raises(UsageError) as e:
        BACKEND.space(OP.problem(m=4096, d_in=4096, rank=512, dtype="fp16", intermediate="fp32"), sm90)
    assert "keeps the whole rank in one tile, up to rank 256" in e.value.message
    assert "intermediate=fp32 needs the fused family" in e.value.message


def test_the_two_gemm_rules_are_the_gemm_engines_own(sm90):
    p = OP.problem(m=40, d_in=64, rank=40, d_out=72, dtype="bf16", layout="nt", residual=True)
    space = two_gemm_space(p, sm90)
    for config, reason in space.rejections():
        assert reason.startswith(f"xu_tile={config['xu_tile']}: x·U") or reason.startswith(
            f"tv_tile={config['tv_tile']}: T·V"), reason
    assert space.valid_configs()


def _compiles_without_spills(p, config, arch, make_target):
    artifact = BACKEND.compile(p, config, make_target(arch))
    for name, r in artifact.resources["kernels"].items():
        assert r["spill_store_bytes"] == r["spill_load_bytes"] == 0, (p.label, arch, config, name, r)
        assert r["registers"] <= 255
    assert artifact.resources["ptx_target"] == arch
    return artifact


@needs_nvrtc
@pytest.mark.parametrize("fields, arch", [
    (dict(m=16384, d_in=4096, rank=64, act="silu"), "sm_80"),
    (dict(m=16384, d_in=4096, rank=64, act="silu"), "sm_90a"),
    (dict(m=16384, d_in=4096, rank=256, dtype="bf16", intermediate="fp32", layout="nt"), "sm_90a"),
    (dict(m=16384, d_in=4096, rank=64, dtype="fp32", act="gelu"), "sm_90a"),
], ids=["fused-sm80", "fused-sm90a", "fused-t32-sm90a", "fused-fp32-sm90a"])
def test_the_first_pick_compiles_for_sm80_and_sm90a_without_spills(fields, arch, make_target):
    p = OP.problem(**{"dtype": "fp16", **fields})
    (config, *_) = BACKEND.suggested(p, make_target(arch))
    artifact = _compiles_without_spills(p, config, arch, make_target)
    assert {k.name for k in artifact.plan.kernels} <= set(artifact.resources["kernels"])


@needs_nvrtc
def test_the_two_gemm_familys_first_pick_compiles_without_spills(make_target):
    p = OP.problem(m=16384, d_in=4096, rank=512, dtype="fp16", act="silu")
    (config, *_) = BACKEND.suggested(p, make_target("sm_90a"))
    assert config["family"] == "two_gemm"
    artifact = _compiles_without_spills(p, config, "sm_90a", make_target)
    assert set(artifact.resources["kernels"]) == {"lowrank_xu", "lowrank_tv"}


@needs_nvrtc
@pytest.mark.skipif(not os.environ.get("TRACEA_SLOW_TESTS"), reason="opt in: TRACEA_SLOW_TESTS=1 (minutes)")
@pytest.mark.parametrize("arch", ["sm_80", "sm_90a"])
def test_the_suites_first_picks_compile_without_spills(arch, make_target):
    for p in OP.suite("lowrank-mlp", "cuda", ("fp32", "fp16", "bf16")):
        for config in BACKEND.suggested(p, make_target(arch))[:2]:
            _compiles_without_spills(p, config, arch, make_target)


def test_the_two_gemm_xu_grid_covers_row_tiles_and_the_ranks_column_blocks():
    """x·U runs a block per row tile (x) and per column block of the rank (y); an exported kernel serves a rank with
    at most as many column blocks (its grid's y is a constant of the plan), the extra blocks returning at once."""
    from tracea_cli.ops.lowrank_mlp.families.two_gemm import TWO_GEMM, XU_KERNEL

    config = {"family": "two_gemm", "xu_tile": "128x128x32/64x64/4", "tv_tile": "128x128x32/64x64/4"}
    p = OP.problem(m=4096, d_in=4096, rank=512, dtype="fp16", act="silu")
    plan = TWO_GEMM.launch(p, config)
    xu = next(s for s in plan.steps if s.name == XU_KERNEL)
    assert plan.grid(xu, {"M": 4096, "N": 4096, "K": 4096, "R": 512}) == (32, 4, 1)
    def serves(rank):
        return TWO_GEMM.serves(p, config, OP.problem(m=4096, d_in=4096, rank=rank, dtype="fp16", act="silu"))

    assert serves(512) is None and serves(448) is None and serves(384) is None  # 4, 4 and 3 column blocks
    assert serves(520) == "its x·U grid covers 4 column block(s) of the rank; rank 520 needs 5"
