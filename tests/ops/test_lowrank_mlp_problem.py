"""The lowrank-mlp problem: options and defaults, validation sentences, its cache identity, tensors in both layouts,
inputs, work counts, the float64 reference against a direct computation, and the operands check."""

from __future__ import annotations

import numpy as np
import pytest

from tracea_cli.errors import UsageError
from tracea_cli.ops.lowrank_mlp.problem import EPILOGUES, LowrankMlpProblem, check_operands, make_inputs, reference
from tracea_cli.ops.registry import get_op

OP = get_op("lowrank-mlp")


def test_options_default_d_out_to_d_in_bias_on_and_the_rest_off():
    p = OP.problem(m=256, d_in=128, rank=16)
    assert (p.d_out, p.dtype, p.act, p.bias, p.residual, p.layout, p.intermediate) == \
        (128, "fp32", "none", True, False, "nn", "dtype")
    assert p.epilogue == "bias" and p.label == "lowrank-mlp 256x128->r16->128 fp32 nn +bias"
    q = OP.problem(m=7, d_in=40, rank=8, d_out=24, act="gelu", bias=False, residual=True, layout="nt", dtype="fp16",
                   intermediate="fp32")
    assert q.epilogue == "gelu_residual" and q.fused.activation == "gelu" and q.fused.residual and not q.fused.bias
    assert q.label == "lowrank-mlp 7x40->r8->24 fp16 nt T:fp32 +gelu_residual"


def test_every_combination_of_bias_activation_and_residual_is_an_epilogue_with_its_own_code():
    names = [e.name for e in EPILOGUES]
    assert len(names) == len(set(names)) == 16 and names[0] == "none"
    assert {"bias_silu", "relu_residual", "bias_gelu_residual", "residual"} <= set(names)


def test_fp32_problems_have_one_intermediate():
    assert OP.problem(m=8, d_in=8, rank=2, intermediate="fp32").intermediate == "dtype"
    assert OP.problem(m=8, d_in=8, rank=2, dtype="bf16", intermediate="fp32").rounds_intermediate is False
    assert OP.problem(m=8, d_in=8, rank=2, dtype="bf16").rounds_intermediate is True


@pytest.mark.parametrize("bad, says", [
    (dict(rank=0), "rank must be a positive whole number, got 0"),
    (dict(m=0), "m must be a positive whole number, got 0"),
    (dict(d_in=-4), "d_in must be a positive whole number"),
    (dict(d_out=0), "d_out must be a positive whole number"),
    (dict(rank=200), "rank 200 is larger than d_in=128: a low-rank layer needs rank <= min(d_in, d_out) = 128"),
    (dict(rank=100, d_out=64), "rank 100 is larger than d_out=64"),
    (dict(rank=True), "rank must be a positive whole number"),
    (dict(m=1 << 21), "is larger than"),
    (dict(dtype="tf32"), "unknown dtype 'tf32'"),
    (dict(act="tanh"), "unknown act 'tanh'"),
    (dict(layout="tn"), "unknown layout 'tn'"),
    (dict(intermediate="fp16"), "unknown intermediate 'fp16'"),
    (dict(bias="yes"), "bias must be true or false"),
])
def test_bad_problems_are_one_sentence_naming_the_option(bad, says):
    with pytest.raises(UsageError) as e:
        LowrankMlpProblem(**{"m": 256, "d_in": 128, "rank": 16, "d_out": 128, **bad})
    assert says in e.value.message, e.value.message
    assert e.value.message.endswith(".") and e.value.message.count(". ") == 0


def test_the_cache_identity_round_trips_and_names_every_field():
    p = OP.problem(m=33, d_in=20, rank=5, d_out=12, act="relu", residual=True, layout="nt", dtype="bf16",
                   intermediate="fp32")
    assert OP.from_key(p.dtype, p.key()) == p
    assert p.sizes() == {"m": 33, "d_in": 20, "rank": 5, "d_out": 12}
    with pytest.raises(UsageError):
        OP.from_key("fp32", {"m": 1})


def test_tensors_follow_the_layout_and_work_counts_the_fewest_bytes():
    nn = OP.problem(m=10, d_in=6, rank=2, d_out=4, residual=True)
    assert [(t.name, t.shape, t.output) for t in nn.tensors()] == [
        ("x", (10, 6), False), ("U", (6, 2), False), ("V", (2, 4), False), ("bias", (4,), False),
        ("residual", (10, 4), False), ("y", (10, 4), True)]
    nt = OP.problem(m=10, d_in=6, rank=2, d_out=4, bias=False, layout="nt")
    assert [t.shape for t in nt.tensors()] == [(10, 6), (2, 6), (4, 2), (10, 4)]
    assert nn.flops == 2 * 10 * 2 * (6 + 4)
    assert nn.bytes == 4 * (60 + 12 + 8 + 4 + 40 + 40) and nn.floor_bytes == 4 * (60 + 40)
    big = OP.problem(m=16384, d_in=4096, rank=64, dtype="fp16")
    assert big.floor_bytes == 268_435_456  # x read + y written: the memory floor of issue 15


@pytest.mark.parametrize("layout", ["nn", "nt"])
def test_the_reference_is_act_of_x_u_v_plus_bias_plus_residual(layout):
    p = OP.problem(m=9, d_in=7, rank=3, d_out=5, act="silu", residual=True, layout=layout)
    inputs = make_inputs(p, np.random.default_rng(1))
    assert all(np.all(np.abs(a) <= 1) and np.all(a != 0) for a in inputs.values())
    u = inputs["U"] if layout == "nn" else inputs["U"].T
    v = inputs["V"] if layout == "nn" else inputs["V"].T
    z = np.einsum("ik,kr,rj->ij", inputs["x"], u, v) + inputs["bias"]
    expected = z / (1 + np.exp(-z)) + inputs["residual"]
    np.testing.assert_allclose(reference(p, inputs)["y"], expected, rtol=1e-12, atol=1e-12)


def test_operands_of_the_wrong_shape_are_one_sentence_naming_the_tensor():
    p = OP.problem(m=9, d_in=7, rank=3, d_out=5, residual=True)
    arrays = {t.name: np.zeros(t.shape) for t in p.tensors()}
    check_operands(p, arrays)
    with pytest.raises(UsageError) as e:
        check_operands(p, {**arrays, "residual": np.zeros((9, 4))})
    assert e.value.message.startswith("residual has shape (9, 4), but") and "(9, 5)" in e.value.message
    with pytest.raises(UsageError) as e:
        check_operands(p, {k: v for k, v in arrays.items() if k != "bias"})
    assert "needs bias of shape (5,)" in e.value.message


def test_the_suites_hold_issue_15s_shapes():
    gpu = OP.suite("lowrank-mlp", "cuda", ("fp32", "fp16", "bf16"))
    fp16 = {(p.m, p.d_in, p.rank) for p in gpu if p.dtype == "fp16" and p.d_out == 4096}
    assert {(m, 4096, r) for m in (4096, 16384) for r in (64, 256, 512)} <= fp16
    assert {p.dtype for p in gpu} == {"fp32", "fp16", "bf16"}
    default = OP.suite("default", "cuda", ("fp16",))
    assert {(p.m, p.rank) for p in default} == {(m, r) for m in (4096, 16384) for r in (64, 256, 512)}
    assert all(p.d_in == p.d_out == 4096 and p.epilogue == "bias_silu" for p in default)
    assert OP.suite("default", "cpu", ("fp32", "fp64"))
    assert all(p.dtype in ("fp32", "fp64") for p in OP.suite("lowrank-mlp", "cpu", ("fp32", "fp64")))
