"""The GEMM problem: validation, its cache identity, tensors, inputs, float64 reference and work counts."""

from __future__ import annotations

import numpy as np
import pytest

from tracea_cli.errors import UsageError
from tracea_cli.ops.gemm.problem import EPILOGUES, GemmProblem, make_inputs, reference
from tracea_cli.ops.registry import get_op

OP = get_op("gemm")


@pytest.mark.parametrize("bad", [dict(m=0), dict(m=-5), dict(dtype="fp7"), dict(layout="tn"), dict(epilogue="tanh"),
                                 dict(m=True), dict(m=1 << 21)])
def test_problem_rejects_bad_input(bad):
    with pytest.raises(UsageError):
        GemmProblem(**{"m": 4, "n": 4, "k": 4, **bad})


def test_the_op_builds_problems_from_its_options_with_n_and_k_defaulting_to_m():
    assert OP.problem(m=64) == GemmProblem(64, 64, 64)
    assert OP.problem(m=64, k=8, dtype="bf16", layout="nt") == GemmProblem(64, 64, 8, "bf16", "nt")
    with pytest.raises(UsageError) as e:
        OP.problem(n=4)
    assert "needs m" in e.value.message


def test_the_key_round_trips_and_names_its_sizes():
    p = GemmProblem(128, 256, 64, "fp16", "nt", "bias_relu")
    assert p.key() == {"m": 128, "n": 256, "k": 64, "layout": "nt", "epilogue": "bias_relu"}
    assert p.sizes() == {"m": 128, "n": 256, "k": 64}
    assert OP.from_key("fp16", p.key()) == p
    with pytest.raises(UsageError):
        OP.from_key("fp16", {"m": 1, "n": 1})


def test_problem_work_counts():
    p = GemmProblem(128, 256, 64, dtype="fp16", epilogue="bias_residual")
    assert p.flops == 2 * 128 * 256 * 64
    assert p.bytes == 2 * (128 * 64 + 64 * 256 + 128 * 256 + 256 + 128 * 256)


def test_tensors_follow_the_layout_and_the_epilogue():
    names = {t.name: t for t in GemmProblem(8, 16, 4, layout="nt", epilogue="bias_residual").tensors()}
    assert names["B"].shape == (16, 4) and names["bias"].shape == (16,) and names["residual"].shape == (8, 16)
    assert names["C"].output and not names["A"].output
    assert {t.name for t in GemmProblem(8, 16, 4).tensors()} == {"A", "B", "C"}


@pytest.mark.parametrize("layout", ["nn", "nt"])
@pytest.mark.parametrize("epilogue", [e.name for e in EPILOGUES])
def test_reference(layout, epilogue):
    p = GemmProblem(17, 33, 9, dtype="fp32", layout=layout, epilogue=epilogue)
    inputs = make_inputs(p, np.random.default_rng(0))
    assert np.all(inputs["A"] != 0) and inputs["B"].shape == ((9, 33) if layout == "nn" else (33, 9))
    c = inputs["A"] @ (inputs["B"] if layout == "nn" else inputs["B"].T)
    if p.has_bias:
        c = c + inputs["bias"]
    act = {"bias_relu": lambda x: np.maximum(x, 0), "bias_silu": lambda x: x / (1 + np.exp(-x)),
           "bias_gelu": lambda x: 0.5 * x * (1 + np.vectorize(__import__("math").erf)(x / np.sqrt(2)))}
    c = act.get(epilogue, lambda x: x)(c)
    if p.has_residual:
        c = c + inputs["residual"]
    assert np.allclose(reference(p, inputs)["C"], c)
