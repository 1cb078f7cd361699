"""conv2d's wgmma family on the CPU: which problems it serves (every refusal says why, before anything compiles), the
GEMM view a 1x1 convolution is, the space (the GEMM family's over that view), the hand-picked configurations of
ResNet-50's 1x1 layers at batch 32, the launch arguments, and the source: conv2d's hook in the GEMM kernel's
epilogue without a change to the GEMM op's text or cache keys."""

from __future__ import annotations

from dataclasses import replace

import pytest

from tracea_cli.backends.op_backend import OpBackend
from tracea_cli.ops.conv2d.families import wgmma as cw
from tracea_cli.ops.conv2d.families import wgmma_space as cs
from tracea_cli.ops.conv2d.problem import Conv2dProblem
from tracea_cli.ops.gemm.families import wgmma as gw
from tracea_cli.ops.gemm.families import wgmma_space as gs
from tracea_cli.ops.gemm.problem import GemmProblem
from tracea_cli.ops.registry import get_op
from tracea_cli.resources import kernel_source
from tracea_cli.target import Target, limits_for

H200 = Target(backend="cuda", device_class="NVIDIA H200", arch="sm_90a",
              limits=replace(limits_for("sm_90a"), sm_count=132))
A100 = Target(backend="cuda", device_class="NVIDIA A100", arch="sm_80", limits=limits_for("sm_80"))
CONV = OpBackend("conv2d", "cuda")

#: ResNet-50's 1x1 stride-1 layers (C, K, H = W) at batch 32: M = 100352, 25088, 6272, 1568
RESNET50_1X1 = ((64, 64, 56), (64, 256, 56), (256, 64, 56), (256, 128, 56), (128, 512, 28), (512, 128, 28),
                (512, 256, 28), (256, 1024, 14), (1024, 256, 14), (1024, 512, 14), (512, 2048, 7), (2048, 512, 7))


def one_by_one(c=256, k=64, hw=56, n=32, dtype="fp16", epilogue="none", **geometry):
    return Conv2dProblem(n, hw, hw, c, k, geometry.pop("r", 1), geometry.pop("s", 1), dtype=dtype, epilogue=epilogue,
                         **geometry)


def test_the_family_is_registered_first_so_its_picks_lead_where_it_applies():
    op = get_op("conv2d")
    assert op.families[0] is cw.WGMMA and cw.WGMMA.name == "wgmma"
    picks = CONV.suggested(one_by_one(), H200)
    assert picks[0]["family"] == "wgmma" and any(p["family"] == "mma" for p in picks)
    assert all(p["family"] != "wgmma" for p in CONV.suggested(one_by_one(), A100))


@pytest.mark.parametrize("change, words", [
    ({"dtype": "fp32"}, "the wgmma family has no fp32 kernels"),
    ({"c": 100}, "TMA needs C to be a multiple of 8 for fp16 (C=100"),
    ({"k": 36}, "TMA needs K to be a multiple of 8 for fp16 (K=36"),
    ({"dtype": "tf32", "c": 6}, "TMA needs C to be a multiple of 4 for tf32"),
    ({"c": 100, "r": 3, "s": 3, "pad_h": 1, "pad_w": 1}, "TMA needs C to be a multiple of 8 for fp16 (C=100"),
    ({"stride_h": 9, "stride_w": 9}, "TMA traversal strides are at most 8 (stride 9x9); the wgmma family runs this "
                                     "convolution (r=1, s=1, stride 9x9, pad 0x0, dilation 1x1) only through TMA "
                                     "im2col"),
    ({"r": 3, "s": 3, "pad_h": 130, "pad_w": 1, "hw": 300, "n": 1},
     "the im2col bounding box's lower corner (W, H) = (-1, -130) is outside [-128, 127]"),
    ({"r": 3, "s": 3, "dilation_h": 80, "dilation_w": 1, "hw": 300, "n": 1},
     "the im2col bounding box's upper corner (W, H) = (-2, -160) is outside [-128, 127]"),
    ({"r": 3, "s": 3, "pad_h": 1, "pad_w": 1, "hw": 224}, "the wgmma family's GEMM view would have M = N·P·Q = "
                                                          "1605632, over the GEMM op's size limit of 1048576"),
    ({"hw": 224}, "M = N·P·Q = 1605632, over the GEMM op's size limit"),  # a 1x1 GEMM view, too
])
def test_every_problem_it_refuses_says_why(change, words):
    problem = one_by_one(**change)
    reason = cw.WGMMA.space(problem, H200)
    assert isinstance(reason, str) and words in reason
    assert cw.WGMMA.suggested(problem, H200) == [] and cw.WGMMA.template(problem) is None


def test_it_needs_an_sm90_target():
    reason = cw.WGMMA.space(one_by_one(), A100)
    assert reason == "the wgmma family needs an sm_90 target, not sm_80"
    assert cw.WGMMA.template(one_by_one()) is not None  # the text is the problem's, whatever the target


def test_a_3x3_layer_is_served_through_im2col_and_a_refused_one_says_why_through_the_op():
    problem = one_by_one(c=64, k=64, r=3, s=3, pad_h=1, pad_w=1)
    assert {f.name for f, space in CONV.spaces(problem, H200) if not isinstance(space, str)} == {"wgmma", "mma"}
    assert CONV.suggested(problem, H200)[0]["family"] == "wgmma"
    refused = one_by_one(c=64, k=64, r=3, s=3, stride_h=9, stride_w=9)
    assert "TMA traversal strides are at most 8" in CONV.why_invalid(refused, H200, {"family": "wgmma"})


@pytest.mark.parametrize("epilogue, gemm_epilogue, relu", [
    ("none", "none", 0), ("bias", "bias", 0), ("bias_relu", "bias_relu", 0), ("bias_silu", "bias_silu", 0),
    ("bias_residual", "bias_residual", 0), ("bias_residual_relu", "bias_residual", 1)])
def test_the_gemm_view_is_nt_with_m_npq_n_k_k_c(epilogue, gemm_epilogue, relu):
    problem = Conv2dProblem(32, 14, 12, 1024, 256, 1, 1, dtype="bf16", epilogue=epilogue)
    view = cs.gemm_view(problem)
    assert view == GemmProblem(32 * 14 * 12, 256, 1024, "bf16", "nt", gemm_epilogue)
    assert view.flops == problem.flops
    assert cw.defines(problem, cs.hand_picked(problem, H200)[0])["WG_POST_RELU"] == relu
    assert cw.defines(problem, cs.hand_picked(problem, H200)[0])["WG_B_KMAJOR"] == 1


def test_the_space_is_the_gemm_familys_over_the_view_with_its_reasons():
    problem = one_by_one(c=1024, k=256, hw=14)
    space = cw.WGMMA.space(problem, H200)
    gemm_space = gs.hopper_space(cs.gemm_view(problem), H200)
    assert space.params == gemm_space.params
    bad = {"family": "wgmma", "tile_m": 128, "tile_n": 256, "stages": 6, "consumers": 1, "schedule": "pingpong",
           "cluster_m": 1, "persistent": 1, "group_m": 8, "store": "tma"}
    assert space.why_invalid(bad) == gemm_space.why_invalid(bad) == \
        "pingpong alternates two consumer warpgroups (consumers=2)"
    assert "accumulators" in space.why_invalid({**bad, "schedule": "cooperative"})
    assert "shared memory" in space.why_invalid({**bad, "consumers": 2, "schedule": "cooperative"})


@pytest.mark.parametrize("c, k, hw", RESNET50_1X1)
@pytest.mark.parametrize("epilogue", ["none", "bias_residual_relu"])
def test_resnet50_1x1_layers_get_valid_picks_sized_to_the_shape(c, k, hw, epilogue):
    problem = one_by_one(c, k, hw, epilogue=epilogue)
    space = cw.WGMMA.space(problem, H200)
    picks = cs.hand_picked(problem, H200)
    assert 3 <= len(picks) <= 8 and len({cs.describe(p) for p in picks}) == len(picks)
    assert all(space.why_invalid(p) is None for p in picks)
    costs = [cs.estimated_cost(problem, p, 132) for p in picks if p["cluster_m"] == 1 and p["schedule"] ==
             "cooperative" and p.get("split_k", 1) == p.get("cluster_k", 1) == 1]
    assert costs == sorted(costs)  # ordered by the wave model (the variants, K split and K pairs among them, by rule)
    if problem.has_residual:
        assert all(p["store"] == "direct" for p in picks)
    assert cw.WGMMA.suggested(problem, H200) == picks[:3]


def test_picks_follow_the_wave_model():
    # M = 1568, N = 512: a 128 x 256 tile gives 26 work items for 132 SMs; 128 x 64 gives 104 in one wave
    small = one_by_one(2048, 512, 7)
    assert (small.gemm_m, small.k) == (1568, 512)
    first = cs.hand_picked(small, H200)[0]
    assert (first["tile_m"], first["tile_n"]) == (128, 64)
    assert cs.waves(small, first, 132) == 1
    # M = 100352, N = 256: 128 x 256 tiles fill six waves exactly
    large = one_by_one(64, 256, 56)
    first = cs.hand_picked(large, H200)[0]
    assert (first["tile_m"], first["tile_n"]) == (128, 256) and cs.waves(large, first, 132) == 6


def test_the_launch_and_arguments_are_the_gemm_familys_over_the_view():
    problem = one_by_one(256, 64, 56, epilogue="bias_residual")
    config = cs.hand_picked(problem, H200)[0]
    assert cw.WGMMA.launch(problem, config) == gw.wgmma_launch(cs.gemm_view(problem), config)
    assert cw.WGMMA.launch(problem, config).scratch == ()  # aligned operands: no staging pre-pass
    x, w, y, bias, res = object(), object(), object(), object(), object()
    args = cw.WGMMA.args(problem, {"X": x, "W": w, "Y": y, "bias": bias, "residual": res})
    assert args["A"] is x and args["B"] is w and args["C"] is y and args["bias"] is bias and args["residual"] is res
    assert (args["M"], args["N"], args["K"]) == (32 * 56 * 56, 64, 256)
    assert (args["lda"], args["ldb"], args["ldc"]) == (256, 256, 64)


def test_the_source_adds_the_hook_and_leaves_the_gemm_text_alone():
    gemm_text = kernel_source(gw.HEADER)
    assert gemm_text.count(cw.STORE_LINE) == 1 and "WG_CONV_AFTER_RESIDUAL" not in gemm_text
    assert "WG_POST_RELU" not in gw.headers_text(GemmProblem(4096, 4096, 4096, "fp16", "nt", "bias_residual"))
    problem = one_by_one(epilogue="bias_residual_relu")
    source = cw.WGMMA.source(problem, cs.hand_picked(problem, H200)[0])
    assert "#define WG_POST_RELU 1\n" in source and "#define WG_EPILOGUE 5\n" in source
    assert source.count(cw.AFTER_RESIDUAL + cw.STORE_LINE) == 1
    assert source.index("#define WG_CONV_AFTER_RESIDUAL") < source.index(cw.AFTER_RESIDUAL)
    assert source.count(cw.SPLITK_AFTER_RESIDUAL + cw.SPLITK_STORE_LINE) == 1  # and split-K's second pass
    # everything else is the GEMM kernel's text, unchanged
    assert cw.headers_text(problem).replace(cw.AFTER_RESIDUAL, "", 1).replace(cw.SPLITK_AFTER_RESIDUAL, "", 1).endswith(
        gw.headers_text(cs.gemm_view(problem)))


def test_gemm_cache_keys_do_not_change_and_conv2d_keys_change_only_where_the_family_applies():
    gemm = OpBackend("gemm", "cuda")
    p = GemmProblem(4096, 4096, 4096, "fp16", "nt", "bias_residual")
    texts = [f.template(p) for f in gemm.families]
    assert all("WG_CONV_AFTER_RESIDUAL" not in t for t in texts if t)
    from tracea_cli.backends.op_backend import digest
    refused = one_by_one(64, 64, 56, r=3, s=3, stride_h=9, stride_w=9)  # stride 9: past TMA's traversal strides
    without = [f.template(refused) for f in CONV.families if f.name != "wgmma"]
    assert CONV.source_hash(refused) == digest("".join(digest(t) for t in without if t is not None))
    # a problem the family did not serve before the im2col form now hashes the im2col text: its key changes once
    three = one_by_one(64, 64, 56, r=3, s=3, pad_h=1, pad_w=1)
    template = cw.WGMMA.template(three)
    assert template.startswith(f"generator {cw.GENERATOR_VERSION}\nim2col\n") and cw.IM2COL_KERNEL in template
    assert CONV.source_hash(three) != digest("".join(digest(f.template(three)) for f in CONV.families
                                                     if f.name != "wgmma" and f.template(three) is not None))
    # a 1x1 stride-1 problem hashes the GEMM text as before
    assert cw.WGMMA.template(one_by_one()) == f"generator {cw.GENERATOR_VERSION}\n{cw.headers_text(one_by_one())}"


def test_the_hook_is_refused_loudly_if_the_gemm_epilogue_changes(monkeypatch):
    monkeypatch.setattr(cw, "STORE_LINE", "no such line\n")
    with pytest.raises(RuntimeError, match="cannot place its after-residual hook"):
        cw.headers_text(one_by_one())
