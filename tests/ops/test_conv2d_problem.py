"""The conv2d problem: options (pair forms and per-axis forms), validation sentences, its cache identity, tensors,
inputs, work counts and the float64 reference against a direct loop on awkward shapes."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

from tracea_cli.errors import UsageError
from tracea_cli.ops.conv2d.problem import EPILOGUE_NAMES, Conv2dProblem, make_inputs, reference
from tracea_cli.ops.registry import get_op

sys.path.insert(0, str(Path(__file__).parent))
from conv2d_direct import AWKWARD, direct_conv2d  # noqa: E402

OP = get_op("conv2d")


def test_per_axis_options_default_to_the_pair_form_and_the_pair_form_to_its_default():
    p = OP.problem(h=56, c=64, k=64, r=3, pad=1)
    assert (p.n, p.w, p.s) == (1, 56, 3)
    assert (p.stride_h, p.stride_w, p.pad_h, p.pad_w, p.dilation_h, p.dilation_w) == (1, 1, 1, 1, 1, 1)
    q = OP.problem(h=9, w=7, c=3, k=5, r=3, s=1, stride=2, stride_w=1, pad=2, pad_h=0, dilation_w=2)
    assert (q.stride_h, q.stride_w, q.pad_h, q.pad_w, q.dilation_h, q.dilation_w) == (2, 1, 0, 2, 1, 2)
    assert (q.p, q.q) == ((9 - 3) // 2 + 1, (7 + 4 - 0 - 1) + 1)


def test_output_size_follows_torchs_formula():
    p = Conv2dProblem(1, 224, 224, 3, 64, 7, 7, 2, 2, 3, 3)
    assert (p.p, p.q) == (112, 112)
    p = Conv2dProblem(1, 9, 8, 3, 5, 3, 3, 2, 3, 1, 0, 2, 1)
    assert (p.p, p.q) == ((9 + 2 - 2 * 2 - 1) // 2 + 1, (8 - 2 - 1) // 3 + 1)


@pytest.mark.parametrize("bad, says", [
    (dict(h=0), "h must be a positive whole number"),
    (dict(c=-3), "c must be a positive whole number"),
    (dict(k=True), "k must be a positive whole number"),
    (dict(stride=0), "stride_h must be a positive whole number"),
    (dict(pad=-1), "pad_h must be a whole number, 0 or more"),
    (dict(dilation_w=0), "dilation_w must be a positive whole number"),
    (dict(groups=2), "conv2d runs groups=1 only, not groups=2"),
    (dict(dtype="fp8"), "unknown dtype"),
    (dict(epilogue="bias_gelu"), "unknown epilogue"),
    (dict(h=4, r=7), "the filter spans 7 rows (r=7, dilation_h=1) but the padded input has only 4"),
    (dict(w=5, s=3, dilation_w=3), "the filter spans 7 columns (s=3, dilation_w=3) but the padded input has only 5"),
    (dict(h=1 << 17), "is larger than"),
])
def test_bad_problems_are_one_sentence_naming_the_field_and_what_to_do(bad, says):
    with pytest.raises(UsageError) as e:
        OP.problem(**{"h": 8, "c": 4, "k": 4, "r": 3, **bad})
    assert says in e.value.message, e.value.message
    assert e.value.message.endswith(".") and e.value.message.count(". ") == 0
    if "filter spans" in says:
        assert "output would be empty" in e.value.message and e.value.hint.startswith("Make ")
    if "groups" in says:
        assert "groups=1" in e.value.hint


def test_the_filter_may_exactly_fill_the_padded_input():
    p = OP.problem(h=3, w=1, c=2, k=2, r=5, s=3, pad=1)
    assert (p.p, p.q) == (1, 1)


def test_required_options_and_unknown_ones():
    with pytest.raises(UsageError) as e:
        OP.problem(h=8, c=4, k=4)
    assert "needs r" in e.value.message
    with pytest.raises(UsageError) as e:
        OP.problem(h=8, c=4, k=4, r=3, m=3)
    assert "no option 'm'" in e.value.message


def test_the_key_round_trips_names_its_sizes_and_keeps_only_per_axis_geometry():
    p = OP.problem(n=2, h=9, w=7, c=3, k=5, r=3, s=1, stride=2, pad=1, dilation_h=2, dtype="fp64",
                   epilogue="bias_relu")
    assert p.key() == {"n": 2, "h": 9, "w": 7, "c": 3, "k": 5, "r": 3, "s": 1, "stride_h": 2, "stride_w": 2,
                       "pad_h": 1, "pad_w": 1, "dilation_h": 2, "dilation_w": 1, "epilogue": "bias_relu"}
    assert list(p.sizes()) == ["n", "h", "w", "c", "k", "r", "s"]
    assert OP.from_key("fp64", p.key()) == p
    with pytest.raises(UsageError):
        OP.from_key("fp32", {"n": 1, "h": 2})
    assert p.label == "conv2d n2 3->5 @9x7 3x1 stride 2 pad 1 dilation 2x1 fp64 +bias_relu"


def test_work_counts_and_tensors():
    p = Conv2dProblem(2, 9, 7, 3, 5, 3, 3, 2, 2, 1, 1, epilogue="bias_residual")
    assert (p.p, p.q) == (5, 4)
    names = {t.name: t for t in OP.tensors(p)}
    assert names["X"].shape == (2, 9, 7, 3) and names["W"].shape == (5, 3, 3, 3) and names["bias"].shape == (5,)
    assert names["residual"].shape == names["Y"].shape == (2, 5, 4, 5) and names["Y"].output
    assert p.flops == 2 * (2 * 5 * 4) * 5 * (3 * 3 * 3)
    assert p.bytes == 4 * (2 * 9 * 7 * 3 + 5 * 27 + 5 + 2 * 2 * 5 * 4 * 5)
    assert {t.name for t in OP.tensors(Conv2dProblem(1, 4, 4, 1, 1, 1, 1))} == {"X", "W", "Y"}


def test_inputs_are_fresh_and_never_zero():
    p = Conv2dProblem(1, 6, 6, 4, 4, 3, 3, epilogue="bias_residual_relu")
    a, b = make_inputs(p, np.random.default_rng(1)), make_inputs(p, np.random.default_rng(2))
    assert set(a) == {"X", "W", "bias", "residual"}
    for name in a:
        assert np.all(a[name] != 0) and np.all(np.abs(a[name]) <= 1) and not np.array_equal(a[name], b[name])


@pytest.mark.parametrize("shape", AWKWARD, ids=lambda s: "-".join(f"{k}{v}" for k, v in s.items()))
def test_reference_equals_a_direct_loop_on_awkward_shapes(shape):
    p = OP.problem(**shape, epilogue="bias_residual_relu")
    inputs = make_inputs(p, np.random.default_rng(3))
    got = reference(p, inputs)["Y"]
    assert got.dtype == np.float64 and got.shape == (p.n, p.p, p.q, p.k)
    np.testing.assert_allclose(got, direct_conv2d(p, inputs), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("epilogue", EPILOGUE_NAMES)
def test_reference_applies_every_epilogue(epilogue):
    p = OP.problem(n=2, h=7, w=5, c=3, k=5, r=3, pad=1, stride_w=2, epilogue=epilogue)
    inputs = make_inputs(p, np.random.default_rng(4))
    np.testing.assert_allclose(reference(p, inputs)["Y"], direct_conv2d(p, inputs), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("chunk_bytes", [1, 8 * 27 * 3, 8 * 27 * 40, 8 * 27 * 100])
def test_the_references_chunks_bound_memory_without_changing_the_result(chunk_bytes):
    """Chunks of one output row, of several rows, of one image and of several images all give the same Y."""
    p = OP.problem(n=3, h=9, w=7, c=3, k=4, r=3, pad=1, dilation=2)  # 27 taps, 5x3 = 15 pixels per image
    inputs = make_inputs(p, np.random.default_rng(5))
    whole = reference(p, inputs)["Y"]
    np.testing.assert_allclose(reference(p, inputs, chunk_bytes=chunk_bytes)["Y"], whole, rtol=1e-13, atol=1e-14)
    np.testing.assert_allclose(whole, direct_conv2d(p, inputs), rtol=1e-12, atol=1e-12)


def test_the_options_declare_per_axis_forms_and_the_dtypes_of_each_backend():
    names = [o.name for o in OP.options]
    for pair in ("stride", "pad", "dilation"):
        assert {pair, f"{pair}_h", f"{pair}_w"} <= set(names)
        assert next(o for o in OP.options if o.name == f"{pair}_w").default_from == pair
    assert OP.dtypes == {"cuda": ("fp32", "tf32", "fp16", "bf16"), "cpu": ("fp32", "fp64")}
    assert [e.name for e in OP.epilogues] == list(EPILOGUE_NAMES)
    assert len(OP.suite("default", "cuda", ("fp32", "fp16"))) == 8 and OP.suite("default", "cuda", ("fp32",)) == ()
    assert OP.suite("default", "cpu", ("fp32", "fp64")) and all(p.n == 1 for p in OP.suite("conv2d", "cpu", ("fp32", "fp64")))
