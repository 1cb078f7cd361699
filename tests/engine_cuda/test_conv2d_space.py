"""The CUDA conv2d search space (ops/conv2d/families/implicit_gemm_space.py) and launch plan: rules walked over whole
spaces, the shape rules' sentences, the hand-picked starting points; no GPU, no compiler."""

from __future__ import annotations

import pytest
from slow_tests import subset
from space_walk import walk

from tracea_cli.backends.op_backend import OpBackend, digest
from tracea_cli.ops.conv2d.families.implicit_gemm import (
    GENERATOR_VERSION,
    MAIN_KERNEL,
    REDUCE_KERNEL,
    TRANSPOSE_FLAG,
    TRANSPOSE_KERNEL,
    conv2d_args,
    conv2d_launch,
    conv2d_source,
    template_text,
)
from tracea_cli.ops.conv2d.families.implicit_gemm_space import (
    FAMILY,
    SERIAL_MAX_OUTPUT,
    conv2d_space,
    describe,
    hand_picked,
    tiling,
)
from tracea_cli.ops.conv2d.problem import Conv2dProblem
from tracea_cli.ops.launch import KernelStep, MemsetStep
from tracea_cli.ops.tile_limits import MAX_ACCUMULATOR_REGS


def layer(n, c, k, hw, rs, stride=1, dtype="fp16", epilogue="none"):
    return Conv2dProblem(n, hw, hw, c, k, rs, rs, stride, stride, rs // 2, rs // 2, dtype=dtype, epilogue=epilogue)


# a ResNet-50 layer, the C = 3 stem, an awkward one (odd sizes, stride 2, dilation 2, odd K), one image of the last
# stage: every kind of rule fires somewhere
CASES = (("sm90", layer(32, 64, 64, 56, 3)), ("sm80", layer(32, 3, 64, 224, 7, 2)),
         ("sm90", Conv2dProblem(1, 27, 31, 12, 37, 3, 3, 2, 2, 1, 2, 2, 1)), ("sm80", layer(1, 512, 512, 7, 3)))
# every case and dtype once by default; TRACEA_SLOW_TESTS=1 adds the second walks of cases 2 and 1
WALKS = subset([("fp16", 0), ("bf16", 1), ("fp32", 2), ("tf32", 3), ("fp16", 2), ("fp32", 1)], quick=(0, 1, 2, 3))


@pytest.mark.parametrize("dtype,case", WALKS)
def test_every_rejection_has_a_reason_and_nothing_kept_breaks_a_limit(dtype, case, sm90, sm80):
    arch, shape = CASES[case]
    target = sm90 if arch == "sm90" else sm80
    limits = target.limits
    problem = Conv2dProblem(**{**shape.as_dict(), "dtype": dtype, "op": "conv2d"})
    valid, rejected = walk(conv2d_space(problem, target))
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
        few = config["iterator"] == "few_channels"
        assert (problem.taps if few else problem.c) % config["vec"] == 0
        assert not few or problem.c < config["block_k"]
        assert config["family"] == FAMILY[dtype]


def test_shape_rules_explain_themselves(sm90):
    problem = Conv2dProblem(1, 27, 31, 12, 37, 3, 3, 2, 2, 1, 2, 2, 1, dtype="fp16")
    space = conv2d_space(problem, sm90)
    base = {"family": "mma", "block_m": 64, "block_n": 64, "block_k": 16, "warp_m": 32, "warp_n": 32, "stages": 3,
            "vec": 4, "iterator": "analytic", "split_k": 1, "group_m": 1}
    assert space.why_invalid(base) is None
    assert space.why_invalid({**base, "vec": 8}) == ("vec=8 loads need C a multiple of 8 (pixels and filter taps start "
                                                    "at multiples of C); C=12")
    assert space.why_invalid({**base, "iterator": "few_channels", "vec": 8}) == (
        "vec=8 loads of the filter need R·S·C a multiple of 8; R·S·C=108")
    assert space.why_invalid({**base, "iterator": "few_channels", "vec": 4}) is None
    assert conv2d_space(layer(1, 64, 64, 14, 3), sm90).why_invalid({**base, "iterator": "few_channels", "vec": 8}) == (
        "few_channels is for C smaller than a step: C=64 fills block_k=16, which the channel iterators load as whole "
        "vectors")
    assert space.why_invalid({**base, "vec": 1}) == ("vec=1 copies single 16-bit elements through registers; C=12 "
                                                    "allows vec=2 or wider")
    assert space.why_invalid({**base, "block_n": 128}) == "block_n=128 is larger than K=37 needs (at most 64)"
    assert space.why_invalid({**base, "group_m": 8}) == "group_m=8 needs more than 8 rows of tiles; N·P·Q=221 gives 4"
    assert "slice without work" in space.why_invalid({**base, "split_k": 16})  # 9 steps
    assert conv2d_space(layer(1, 32, 64, 14, 1), sm90).why_invalid({**base, "stages": 4, "vec": 8}) == (
        "a 4-stage pipeline needs 3 steps per slice; there are 2")  # a 1x1 filter, 32 channels: 2 steps of 16
    assert "does not divide" in space.why_invalid({**base, "warp_m": 128})
    wide = Conv2dProblem(1, 9, 9, 4, 8, 33, 1, pad_h=16, dtype="fp16")  # a 33-row filter
    assert "32-bit masks" in conv2d_space(wide, sm90).why_invalid(
        {**base, "block_n": 32, "warp_n": 32, "vec": 4, "iterator": "optimized", "block_k": 16, "block_m": 32,
         "warp_m": 32})


def test_mma_needs_compute_capability_8(make_target):
    problem = layer(1, 64, 64, 14, 3)
    config = hand_picked(problem, make_target("sm_80"))[0]
    assert conv2d_space(problem, make_target("sm_75")).why_invalid(config).startswith(
        "mma.sync with cp.async needs compute capability 8.0 or newer")


@pytest.mark.parametrize("dtype", ("fp16", "bf16", "tf32", "fp32"))
def test_hand_picked_configurations_are_valid_and_fitted_to_the_shape(dtype, sm90):
    for _, shape in CASES:
        problem = Conv2dProblem(**{**shape.as_dict(), "dtype": dtype, "op": "conv2d"})
        picks = hand_picked(problem, sm90)
        assert picks and len(picks) == len({describe(c) for c in picks})
        space = conv2d_space(problem, sm90)
        for c in picks:
            assert space.why_invalid(c) is None, (problem.label, c)
        first = picks[0]
        if problem.c == 3:
            assert first["iterator"] == "few_channels"
        elif problem.c % 8 == 0:  # 16-byte loads of the optimized iterator
            assert first["iterator"] == "optimized" and tiling(problem, first).copy_bytes == 16
    assert OpBackend("conv2d", "cuda").suggested(layer(32, 64, 64, 56, 3, dtype=dtype), sm90)


def test_too_few_output_tiles_start_with_split_k(sm90):
    """One image of ResNet's last stage: 49 output pixels x 512 channels are a handful of tiles on 132 SMs."""
    problem = layer(1, 512, 512, 7, 3)
    first = hand_picked(problem, sm90)[0]
    tiles = -(-problem.gemm_m // first["block_m"]) * -(-problem.k // first["block_n"])
    assert first["split_k"] > 1 and tiles * first["split_k"] <= 132
    assert all(c["split_k"] == 1 for c in hand_picked(layer(32, 64, 64, 56, 3), sm90))


def test_the_launch_plan_transposes_only_when_asked_then_runs_split_k_around_the_main_kernel():
    problem = layer(1, 512, 512, 7, 3, epilogue="bias_relu")
    config = {"family": "mma", "block_m": 32, "block_n": 64, "block_k": 32, "warp_m": 16, "warp_n": 32, "stages": 3,
              "vec": 8, "iterator": "optimized", "split_k": 4, "group_m": 1}
    plan = conv2d_launch(problem, config)
    transpose, filter_transpose, memset, main, reduce = plan.steps
    assert isinstance(memset, MemsetStep) and memset.elem_bytes == 4
    assert (transpose.name, main.name, reduce.name) == (TRANSPOSE_KERNEL, MAIN_KERNEL, REDUCE_KERNEL)
    assert transpose.when == TRANSPOSE_FLAG and main.when is None and plan.main_kernel == main
    assert filter_transpose.name == TRANSPOSE_KERNEL and filter_transpose.when == "filter_is_kcrs"
    args = conv2d_args(problem, {"X": None, "W": None, "Y": None, "bias": None})
    sizes = {k: v for k, v in args.items() if isinstance(v, int)}
    assert (sizes["M"], sizes["N"], sizes["K"]) == (49, 512, 4608)
    assert not transpose.runs(sizes) and transpose.runs({**sizes, TRANSPOSE_FLAG: 1})
    assert plan.grid(main, sizes) == (2 * 8, 1, 4)
    assert plan.workspace_bytes(sizes) == 49 * 512 * 4
    assert transpose.as_dict()["when"] == TRANSPOSE_FLAG and "when" not in main.as_dict()
    single = conv2d_launch(problem, {**config, "split_k": 1})
    assert [type(s) for s in single.steps] == [KernelStep] * 3 and single.workspace_bytes(sizes) == 0


def test_the_source_fixes_geometry_tiles_and_iterator_at_compile_time():
    problem = Conv2dProblem(2, 9, 11, 12, 37, 3, 3, 1, 2, 1, 0, 1, 2, dtype="bf16", epilogue="bias_residual_relu")
    config = {"family": "mma", "block_m": 64, "block_n": 32, "block_k": 16, "warp_m": 32, "warp_n": 16, "stages": 3,
              "vec": 4, "iterator": "few_channels", "split_k": 2, "group_m": 1}
    source = conv2d_source(problem, config)
    assert ("using Tile = tracea::MmaGemm<__nv_bfloat16, tracea::Layout::NT, tracea::BIAS_RESIDUAL_RELU, 64, "
            "32, 16, 32, 16, 3, 4, 2, 1>;") in source
    assert "using Geometry = tracea::ConvGeometry<1, 2, 1, 0, 1, 2>;" in source
    assert "tracea::conv2d_mma<Tile, Geometry, tracea::ConvIterator::FewChannels>" in source
    assert f"static_assert(Tile::SMEM_BYTES == {tiling(problem, config).smem_bytes}," in source
    assert f"{REDUCE_KERNEL}(TRACEA_CONV2D_PARAMS)" in source and f"{TRANSPOSE_KERNEL}(TRACEA_NCHW" in source
    simt = conv2d_source(Conv2dProblem(1, 8, 8, 4, 8, 3, 3, dtype="fp32"),
                         {**config, "family": "simt", "block_k": 8, "warp_n": 32, "stages": 2, "split_k": 1})
    assert "tracea::SimtGemm<float, tracea::Layout::NT, tracea::Epilogue::None, 64, 32, 8, 32, 32, 4, 1, 1>" in simt
    assert f"{REDUCE_KERNEL}(TRACEA_CONV2D_PARAMS)" not in simt


def test_families_serve_their_own_dtypes_and_say_why_not(sm90):
    backend = OpBackend("conv2d", "cuda")
    fp32, fp16 = layer(1, 64, 64, 14, 3, dtype="fp32"), layer(1, 64, 64, 14, 3)
    assert [f.name for f, _ in backend.spaces(fp32, sm90)] == ["simt"]
    # on sm_90 the Hopper family serves a 16-bit 3x3 layer too (through TMA im2col: docs/conv2d.md)
    assert sorted(f.name for f, _ in backend.spaces(fp16, sm90)) == ["mma", "wgmma"]
    mma = next(f for f in backend.families if f.name == "mma")
    assert mma.space(fp32, sm90) == "the mma family has no fp32 kernels" and mma.template(fp32) is None
    # sizes are run-time: the hash changes only across the bound of serial split-K's offer (its header is hashed) and
    # across what the wgmma family serves (its text is hashed where it serves the problem: not the C = 3 stem)
    assert backend.source_hash(fp16) == backend.source_hash(layer(1, 64, 64, 224, 7, 2))
    assert backend.source_hash(layer(32, 64, 64, 56, 3)) == backend.source_hash(layer(32, 64, 64, 224, 7, 2))
    assert backend.source_hash(layer(32, 64, 64, 56, 3)) != backend.source_hash(layer(32, 3, 64, 224, 7, 2))


# ---- serial split-K (splitk_mode) ------------------------------------------------------------------------------------

SPLIT4 = {"family": "mma", "block_m": 32, "block_n": 64, "block_k": 32, "warp_m": 16, "warp_n": 32, "stages": 3,
          "vec": 8, "iterator": "optimized", "split_k": 4, "group_m": 1}


def test_serial_split_k_is_rejected_with_a_reason_where_it_does_not_apply(sm90):
    small, large = layer(1, 512, 512, 7, 3), layer(32, 64, 64, 56, 3)
    assert large.gemm_m * large.k > SERIAL_MAX_OUTPUT >= small.gemm_m * small.k
    space = conv2d_space(small, sm90)
    assert space.why_invalid({**SPLIT4, "splitk_mode": "serial"}) is None
    assert space.why_invalid(SPLIT4) is None  # a configuration stored before splitk_mode: reduce
    assert space.why_invalid({**SPLIT4, "splitk_mode": "serial_ordered"}) is None
    assert "split_k=1 has none" in space.why_invalid({**SPLIT4, "split_k": 1, "splitk_mode": "serial"})
    assert "serial_ordered sums" in space.why_invalid({**SPLIT4, "split_k": 1, "splitk_mode": "serial_ordered"})
    assert "is not one of" in space.why_invalid({**SPLIT4, "splitk_mode": "atomic"})
    big = {**SPLIT4, "block_m": 128, "warp_m": 64}
    reason = conv2d_space(large, sm90).why_invalid({**big, "split_k": 2, "splitk_mode": "serial"})
    assert f"at most {SERIAL_MAX_OUTPUT} elements" in reason and str(large.gemm_m * large.k) in reason
    assert "offered" in conv2d_space(large, sm90).why_invalid({**big, "split_k": 2, "splitk_mode": "serial_ordered"})
    assert conv2d_space(large, sm90).why_invalid({**big, "split_k": 2}) is None


def test_serial_rules_walked_over_a_small_layers_space(sm90):
    """Every serial configuration the space keeps splits K; every one it drops says why."""
    space = conv2d_space(layer(1, 256, 256, 14, 3), sm90)
    kept = [c for c in space.valid_configs() if c["splitk_mode"] != "reduce"]
    assert kept and all(c["split_k"] > 1 for c in kept)
    assert all(space.why_invalid({**c, "splitk_mode": "serial", "split_k": 1}) for c in kept[:50])


def test_the_serial_plan_is_one_launch_on_a_workspace_zeroed_once():
    problem = layer(1, 512, 512, 7, 3, epilogue="bias_relu")
    plan = conv2d_launch(problem, {**SPLIT4, "splitk_mode": "serial"})
    transpose, filter_transpose, memset, main = plan.steps
    assert isinstance(memset, MemsetStep) and memset.once and not memset.per_call() and memset.elem_bytes == 8
    assert memset.as_dict()["once"] is True and "once" not in MemsetStep().as_dict()
    assert main.name == MAIN_KERNEL and transpose.when and filter_transpose.when  # the transposes only when asked
    sizes = {"M": 49, "N": 512, "K": 4608}
    assert plan.grid(main, sizes) == (2 * 8, 1, 4)
    tiles = 2 * 8
    assert plan.workspace_bytes(sizes) == 49 * 512 * 8 >= 49 * 512 * 4 + 4 * tiles  # the sums, then the counters
    ordered = conv2d_launch(problem, {**SPLIT4, "splitk_mode": "serial_ordered"})
    assert ordered.steps[2].once and ordered.steps[2].elem_bytes == 4 * 4 + 4  # a part per slice, then the counters
    assert ordered.workspace_bytes(sizes) == 49 * 512 * 20 and [s.name for s in ordered.steps[3:]] == [MAIN_KERNEL]
    reduce = conv2d_launch(problem, SPLIT4)
    kernels = [s.name for s in reduce.steps if isinstance(s, KernelStep) and s.when is None]
    assert kernels == [MAIN_KERNEL, REDUCE_KERNEL]
    assert not reduce.steps[2].once


def test_a_reduce_configuration_compiles_the_text_it_did_before_splitk_mode_existed():
    problem = layer(1, 512, 512, 7, 3, epilogue="bias_relu")
    before = conv2d_source(problem, SPLIT4)
    assert conv2d_source(problem, {**SPLIT4, "splitk_mode": "reduce"}) == before
    assert "conv2d_splitk_serial" not in before and "splitk_mode" not in before
    serial = conv2d_source(problem, {**SPLIT4, "splitk_mode": "serial"})
    assert "tracea::conv2d_mma_serial<Tile, Geometry," in serial
    assert f"{REDUCE_KERNEL}(TRACEA_CONV2D_PARAMS)" not in serial
    assert '"splitk_mode":"serial"' in serial and "FewChannels, true>" not in serial
    ordered = conv2d_source(problem, {**SPLIT4, "splitk_mode": "serial_ordered"})
    assert "tracea::conv2d_mma_serial<Tile, Geometry, tracea::ConvIterator::Optimized, true>" in ordered


def test_cache_keys_of_problems_outside_the_serial_offer_are_unchanged():
    """Those problems hash what the code before splitk_mode hashed (the generator version and conv2d_implicit.cuh's
    translation unit: d3399344a3a66882 at that commit, checked when this was written), so their cached results stay
    current; a problem inside the offer also hashes the serial header. (A 16-bit problem the wgmma family serves
    through TMA im2col hashes its text too: those keys changed once when that form came, docs/conv2d.md.)"""
    backend = OpBackend("conv2d", "cuda")
    before = digest(digest(f"generator {GENERATOR_VERSION}\n{template_text()}"))
    assert backend.source_hash(layer(32, 3, 64, 224, 7, 2, epilogue="bias_relu")) == before  # no wgmma: C = 3
    assert backend.source_hash(layer(32, 64, 64, 56, 3, epilogue="bias_relu")) != before  # wgmma's im2col text too
    assert backend.source_hash(layer(32, 128, 128, 28, 3, dtype="fp32")) == before
    assert backend.source_hash(layer(1, 512, 512, 7, 3)) != before
    assert "conv2d_splitk_serial" not in template_text() and "conv2d_splitk_serial" in template_text(serial=True)


def test_where_split_k_is_picked_the_serial_sum_comes_first(sm90):
    problem = layer(1, 512, 512, 7, 3)
    picks = hand_picked(problem, sm90)
    serial = [i for i, c in enumerate(picks) if c.get("splitk_mode") == "serial"]
    assert serial and serial[0] == 0 and "serial" in describe(picks[0])
    for i in serial:  # each right before the same configuration summed in three steps
        twin = {k: v for k, v in picks[i].items() if k != "splitk_mode"}
        assert picks[i + 1] == twin
    assert all(conv2d_space(problem, sm90).why_invalid(c) is None for c in picks)
    assert not any("splitk_mode" in c for c in hand_picked(layer(32, 64, 64, 56, 3), sm90))
