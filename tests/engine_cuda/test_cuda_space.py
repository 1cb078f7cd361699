"""The CUDA GEMM search space: rules checked exhaustively on enumerated spaces (the very largest strided, see
`_enumerate`); no GPU, no compiler."""

from __future__ import annotations

import pytest
from slow_tests import subset
from space_walk import walk as _enumerate

from tracea_cli.backends.op_backend import OpBackend
from tracea_cli.ops.gemm.families.engine import MMA, SIMT, gemm_source
from tracea_cli.ops.gemm.families.engine_space import (
    FAMILIES,
    FAMILY,
    gemm_space,
    hand_picked,
    tiling,
    vector_widths,
)
from tracea_cli.ops.gemm.problem import GemmProblem
from tracea_cli.ops.tile_limits import MAX_ACCUMULATOR_REGS

DTYPES = ("fp32", "fp64", "tf32", "fp16", "bf16")
# (target, layout, shape): big and aligned, ragged and unaligned, tiny, deep-K; every kind of rule fires somewhere.
CASES = (("sm90", "nn", (4096, 4096, 4096)), ("sm80", "nt", (1000, 1023, 127)), ("sm90", "nt", (17, 1, 1023)),
         ("sm80", "nn", (128, 128, 8192)))


# The 16-bit spaces hold ~200k raw configurations each: fp16 and bf16 share every rule, so they split the cases. The
# default run takes every dtype and every case once (slow_tests.subset); TRACEA_SLOW_TESTS=1 all of them.
# "fp32_mma": fp32 in the mma family's space (3xTF32)
EXHAUSTIVE = subset([("fp32", c) for c in range(4)] + [("fp64", c) for c in range(4)] + [
    ("tf32", 0), ("tf32", 3), ("fp16", 1), ("fp16", 2), ("bf16", 0), ("fp32_mma", 1), ("fp32_mma", 2)],
    quick=(0, 5, 9, 10, 11, 12, 14))


@pytest.mark.parametrize("dtype,case", EXHAUSTIVE)
def test_every_rejection_has_a_reason_and_nothing_kept_breaks_a_limit(dtype, case, sm90, sm80):
    dtype, _, family = dtype.partition("_")
    arch, layout, shape = CASES[case]
    target = sm90 if arch == "sm90" else sm80
    limits = target.limits
    problem = GemmProblem(*shape, dtype=dtype, layout=layout)
    valid, rejected = _enumerate(gemm_space(problem, target, family or None))
    assert valid, f"nothing valid for {problem.label}"
    for config, reason in rejected:
        assert isinstance(reason, str) and len(reason) > 10, (config, reason)
    for config in valid:
        t = tiling(problem, config)
        assert t.threads <= limits.max_threads_per_block
        assert t.smem_bytes <= limits.max_shared_per_block_optin
        assert t.accumulator_regs <= MAX_ACCUMULATOR_REGS
        assert t.estimated_regs * t.threads <= limits.registers_per_block and t.estimated_regs <= 255
        assert config["block_m"] % config["warp_m"] == 0 and config["block_n"] % config["warp_n"] == 0
        vec = config["vec"]
        aligned = problem.k % vec == 0 and (layout == "nt" or problem.n % vec == 0)
        assert aligned != (config.get("stage", 0) == 1), config  # unaligned rows are read from padded copies
        assert config["family"] == (family or FAMILY[dtype])


def test_fp32_has_two_families_and_3xtf32_holds_two_sets_of_accumulators(sm90):
    problem = GemmProblem(4096, 4096, 4096, dtype="fp32")
    assert FAMILIES["fp32"] == ("simt", "mma") and all(FAMILIES[d] == (FAMILY[d],) for d in DTYPES if d != "fp32")
    assert SIMT.template(problem) and MMA.template(problem) and MMA.template(GemmProblem(64, 64, 64, "fp64")) is None
    assert "no fp64 kernels" in MMA.space(GemmProblem(64, 64, 64, "fp64"), sm90)
    space = gemm_space(problem, sm90, "mma")
    base = space.complete({"family": "mma", "block_m": 128, "block_n": 128, "block_k": 32, "warp_m": 64, "warp_n": 32,
                           "stages": 4, "split_k": 1, "group_m": 8, "vec": 4})
    assert space.why_invalid(base) is None and base in MMA.suggested(problem, sm90)
    tf32 = GemmProblem(4096, 4096, 4096, "tf32")
    assert tiling(problem, base).accumulator_regs == 2 * tiling(tf32, base).accumulator_regs
    assert "accumulator registers" in space.why_invalid({**base, "warp_m": 64, "warp_n": 64})
    assert gemm_source(problem, base).count("1, 1, 3>;") == 1  # PASSES = 3 after slice_k and cluster_k at 1
    assert "1, 1, 3>;" not in gemm_source(tf32, base)
    few_rows = GemmProblem(1, 4096, 4096, dtype="fp32")
    assert "kernel" in gemm_space(few_rows, sm90).names and "kernel" not in gemm_space(few_rows, sm90, "mma").names
    with pytest.raises(ValueError, match="no fp64 kernels"):
        gemm_space(GemmProblem(64, 64, 64, "fp64"), sm90, "mma")


def test_shape_rules_explain_themselves(sm90):
    space = gemm_space(GemmProblem(1000, 1000, 1001, dtype="fp16"), sm90)
    base = {"family": "mma", "block_m": 128, "block_n": 128, "block_k": 32, "warp_m": 64, "warp_n": 64, "stages": 3,
            "split_k": 1, "group_m": 1, "vec": 1}
    assert space.why_invalid(base) is None
    assert "K to be a multiple of 8" in space.why_invalid({**base, "vec": 8})
    assert "or stage=1" in space.why_invalid({**base, "vec": 8})
    assert space.why_invalid({**base, "vec": 8, "stage": 1}) is None  # A copied with its rows padded
    assert "vec=1 reads them in place" in space.why_invalid({**base, "stage": 1})
    even_k = gemm_space(GemmProblem(1000, 1000, 1002, dtype="fp16"), sm90)  # K = 1002: vec 2 reads A in place
    assert "in place already" in even_k.why_invalid({**base, "vec": 2, "stage": 1})
    assert even_k.why_invalid({**base, "vec": 8, "stage": 1}) is None
    assert "does not divide" in space.why_invalid({**base, "warp_m": 128, "block_m": 64})
    assert "shared memory" in space.why_invalid({**base, "block_n": 256, "block_k": 64, "stages": 5})
    assert "accumulator registers" in space.why_invalid({**base, "warp_m": 128, "warp_n": 128})
    wide = {**base, "vec": 8}  # aligned problems below: 16-byte copies
    assert "group_m=16" in gemm_space(GemmProblem(64, 1000, 1000, dtype="fp16"), sm90).why_invalid({**wide, "block_m": 32, "warp_m": 32, "group_m": 16, "block_n": 64, "warp_n": 64})
    tiny = gemm_space(GemmProblem(17, 17, 17, dtype="fp16"), sm90)
    assert "larger than M=17" in tiny.why_invalid(base)
    assert "slice without work" in gemm_space(GemmProblem(1024, 1024, 80, dtype="fp16"), sm90).why_invalid(
        {**wide, "block_k": 16, "split_k": 4, "stages": 2})
    assert "steps per slice" in gemm_space(GemmProblem(1024, 1024, 64, dtype="fp16"), sm90).why_invalid(
        {**wide, "stages": 4})


def test_element_wise_copies_only_where_rows_allow_nothing_wider(sm90):
    base = {"family": "mma", "block_m": 32, "block_n": 64, "block_k": 64, "warp_m": 32, "warp_n": 64, "stages": 5,
            "split_k": 1, "group_m": 1, "vec": 1}
    aligned = gemm_space(GemmProblem(4096, 4096, 4096, dtype="fp16"), sm90)
    assert "allow vec=2 (4-byte copies) or wider" in aligned.why_invalid(base)  # 15 s of ptxas for nothing
    assert aligned.why_invalid({**base, "vec": 2}) is None
    assert gemm_space(GemmProblem(4096, 4096, 777, dtype="fp16"), sm90).why_invalid(base) is None  # odd K: no choice
    assert gemm_space(GemmProblem(4096, 777, 4096, dtype="bf16"), sm90).why_invalid(base) is None  # nn, odd N
    assert "allow vec=2" in gemm_space(GemmProblem(4096, 777, 4096, dtype="bf16", layout="nt"), sm90).why_invalid(base)
    assert gemm_space(GemmProblem(4096, 4096, 4096, dtype="tf32"), sm90).why_invalid(base) is None  # 4-byte elements


def test_fp64_does_not_split_k_and_simt_double_buffers(sm90):
    space = gemm_space(GemmProblem(512, 512, 512, dtype="fp64"), sm90)
    assert space.param("split_k").values == (1,)
    assert space.param("stages").values == (2,)
    assert space.param("vec").values == (2, 1)
    assert "not one of" in space.why_invalid({**space.valid_configs()[0], "split_k": 2})


def test_vector_widths_are_16_bytes_down_to_one_element():
    assert vector_widths("fp16") == (8, 4, 2, 1)
    assert vector_widths("bf16") == (8, 4, 2, 1)
    assert vector_widths("fp32") == vector_widths("tf32") == (4, 2, 1)
    assert vector_widths("fp64") == (2, 1)


def test_mma_needs_ampere(make_target):
    space = gemm_space(GemmProblem(256, 256, 256, dtype="fp16"), make_target("sm_75"))
    assert space.valid_configs() == []
    config = next(space.all_configs())
    assert "compute capability 8.0" in space.why_invalid(config)


def test_limits_of_the_target_decide(make_target):
    """sm_86 has 99 KiB of shared memory per block, sm_90 227 KiB: a 150 KiB tile fits only the latter."""
    problem = GemmProblem(4096, 4096, 4096, dtype="fp16")
    big = {"family": "mma", "block_m": 128, "block_n": 256, "block_k": 64, "warp_m": 64, "warp_n": 64, "stages": 3,
           "split_k": 1, "group_m": 8, "vec": 8}
    assert tiling(problem, big).smem_bytes > 99 * 1024
    assert gemm_space(problem, make_target("sm_90")).why_invalid(big) is None
    assert "shared memory" in gemm_space(problem, make_target("sm_86")).why_invalid(big)


def test_the_space_is_pure(sm90):
    problem = GemmProblem(1000, 1023, 127, dtype="fp32", layout="nt")
    first = gemm_space(problem, sm90).valid_configs()
    assert first == gemm_space(problem, sm90).valid_configs()


def test_dispatch_reaches_the_cuda_space(sm90, sm80):
    from tracea_cli.ops.gemm.families.engine import MMA
    from tracea_cli.ops.gemm.families.wgmma import WGMMA

    backend = OpBackend("gemm", "cuda")
    problem = GemmProblem(64, 64, 64, dtype="tf32")
    assert backend.space(problem, sm80).names == gemm_space(problem, sm80).names  # sm_80: the engine's families only
    union = backend.space(problem, sm90)  # sm_90: the wgmma family joins them (tf32 nn through a staged B)
    assert set(gemm_space(problem, sm90).names) < set(union.names) and "tile_m" in union.names
    engine_space = gemm_space(problem, sm90)
    engine_config = next(c for c in engine_space.all_configs() if engine_space.why_invalid(c) is None)
    assert backend.family_of(engine_config) is MMA and backend.family_of({"family": "wgmma"}) is WGMMA
    assert backend.why_invalid(problem, sm90, engine_config) is None and union.why_invalid(engine_config) is None


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("layout", ("nn", "nt"))
def test_hand_picked_are_valid_for_every_awkward_shape(dtype, layout, sm90, sm80):
    dims = (1, 17, 127, 1000, 1023)
    for target in (sm90, sm80):
        for m in dims:
            for n in dims[::2]:
                for k in dims[1::2]:
                    problem = GemmProblem(m, n, k, dtype=dtype, layout=layout)
                    picks = hand_picked(problem, target)
                    assert picks, f"no hand-picked configuration for {problem.label}"
                    space = gemm_space(problem, target)
                    assert all(space.why_invalid(c) is None for c in picks)
                    assert len({tuple(sorted(c.items())) for c in picks}) == len(picks)


def test_hand_picked_for_large_squares_use_wide_copies_and_offer_split_k_for_deep_k(sm90):
    square = hand_picked(GemmProblem(4096, 4096, 4096, dtype="fp16"), sm90)
    assert square[0]["block_m"] * square[0]["block_n"] >= 128 * 128 and square[0]["vec"] == 8
    assert all(c["split_k"] == 1 for c in square)  # 512 tiles already fill 132 SMs
    deep = hand_picked(GemmProblem(128, 128, 8192, dtype="fp16"), sm90)
    assert any(c["split_k"] > 1 for c in deep)
    assert hand_picked(GemmProblem(4096, 4096, 4096, dtype="fp32"), sm90, limit=2) == \
        hand_picked(GemmProblem(4096, 4096, 4096, dtype="fp32"), sm90)[:2]


def test_simt_tiling_counts_the_lane_grid_and_the_fragment_sets():
    """Mirrors SimtGemm: 64 x 32 warp tiles use an 8 x 4 lane grid (8 x 8 per lane, as 32 x 64 tiles); two fragment
    sets (PREFETCH) unless accumulators and both sets exceed SIMT_PREFETCH_REGS."""
    from tracea_cli.ops.gemm.families.engine_space import (
        REGISTER_OVERHEAD,
        SIMT_PREFETCH_REGS,
    )

    def estimate(dtype, wm, wn):
        config = {"family": "simt", "block_m": 128, "block_n": 128, "block_k": 8, "warp_m": wm, "warp_n": wn,
                  "vec": 1, "stages": 2, "split_k": 1, "group_m": 1}
        t = tiling(GemmProblem(4096, 4096, 4096, dtype=dtype), config)
        staging = 2 * 128 * 8 // t.threads * (2 if dtype == "fp64" else 1)
        return t.estimated_regs - t.accumulator_regs - staging - REGISTER_OVERHEAD

    assert estimate("fp32", 64, 32) == estimate("fp32", 32, 64) == 2 * (8 + 8)
    assert estimate("fp32", 64, 64) == 2 * (8 + 16) and 128 + 2 * 24 <= SIMT_PREFETCH_REGS
    assert estimate("fp64", 32, 64) == (8 + 8) * 2 and 128 + 2 * 32 > SIMT_PREFETCH_REGS


def test_sliced_k_rules_explain_themselves_and_older_configurations_keep_their_meaning(sm90):
    from tracea_cli.ops.gemm.families.engine import gemm_source

    small = gemm_space(GemmProblem(16, 4096, 4096, dtype="fp16"), sm90)
    sliced = {"family": "mma", "block_m": 32, "block_n": 32, "block_k": 256, "warp_m": 32, "warp_n": 32, "stages": 4,
              "split_k": 1, "group_m": 1, "vec": 8, "slice_k": 8}
    assert small.why_invalid(sliced) is None
    assert "needs slice_k > 1" in small.why_invalid({**sliced, "slice_k": 1})
    assert "must divide the 4 instruction steps" in small.why_invalid({**sliced, "block_k": 64})
    t = tiling(GemmProblem(16, 4096, 4096, dtype="fp16"), sliced)
    assert t.threads == 8 * 32 and t.smem_bytes == 4 * (32 * 264 + 256 * 40) * 2
    # Many rows of C: the space has the size it had before sliced K.
    large = gemm_space(GemmProblem(4096, 4096, 4096, dtype="fp16"), sm90)
    assert large.param("slice_k").values == (1,) and large.param("block_k").values == (16, 32, 64)
    assert "slice_k=2 is not one of [1]" in large.why_invalid({**sliced, "block_k": 64, "slice_k": 2})
    # A configuration stored before slice_k existed is valid and names the kernel it named before.
    old = {"family": "mma", "block_m": 128, "block_n": 128, "block_k": 32, "warp_m": 64, "warp_n": 64, "stages": 3,
           "split_k": 1, "group_m": 8, "vec": 8}
    assert large.why_invalid(old) is None and large.why_invalid({**old, "slice_k": 1}) is None
    instantiation = [line for line in gemm_source(GemmProblem(4096, 4096, 4096, "fp16"), old).splitlines()
                     if line.startswith("using Gemm")]
    assert instantiation == ["using Gemm = tracea::MmaGemm<__half, tracea::Layout::NN, tracea::Epilogue::None, "
                             "128, 128, 32, 64, 64, 3, 8, 1, 8>;"]
    assert all("slice_k" in c for c in large.valid_configs()[:100])


def test_gemv_rules_explain_themselves_and_apply_only_to_a_few_fp32_rows(sm90):
    """The simt family's gemv kernel: fp32 with at most 16 rows, layout nn; every rejection says why."""
    from tracea_cli.ops.gemm.families.engine_space import GEMV_MAX_M, kernel_of

    problem = GemmProblem(5, 1000, 700, dtype="fp32")
    space = gemm_space(problem, sm90)
    base = {"family": "simt", "kernel": "gemv", "block_m": 8, "block_n": 128, "block_k": 64, "warp_m": 16,
            "warp_n": 32, "stages": 2, "split_k": 4, "group_m": 1, "vec": 4}
    assert space.why_invalid(base) is None
    reasons = (
        ({"block_m": 16}, "holds more rows than M=5 needs"),
        ({"warp_m": 32}, "gemv has no warp tiles"),
        ({"group_m": 4}, "group_m must be 1"),
        ({"block_n": 64, "block_k": 8}, "must be a multiple of its 16 K groups"),
    )
    for change, reason in reasons:
        why = space.why_invalid({**base, **change})
        assert why and reason in why, (change, why)
    nt = gemm_space(GemmProblem(5, 1000, 700, dtype="fp32", layout="nt"), sm90)
    assert "layout nn" in nt.why_invalid(base)
    # the tiled kernel keeps its own values of the shared parameters
    tiled = {**base, "kernel": "tiled", "block_m": 32, "warp_m": 16, "warp_n": 32, "block_k": 64}
    assert "tiled steps are 32 deep at most" in space.why_invalid(tiled)
    # elsewhere no `kernel` parameter: the space of before (and stored configurations mean the tiled kernel)
    for other in (GemmProblem(GEMV_MAX_M + 1, 64, 64, dtype="fp32"), GemmProblem(1, 64, 64, dtype="fp64")):
        assert "kernel" not in gemm_space(other, sm90).names
    assert kernel_of({"family": "simt"}) == "tiled"
    valid = list(space.valid_configs())
    assert any(c["kernel"] == "gemv" for c in valid) and any(c["kernel"] == "tiled" for c in valid)
