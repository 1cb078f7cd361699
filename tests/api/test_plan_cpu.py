"""optimize_graph and the plan end to end on the CPU backend (numba kernels): fused patterns checked against a
float64 reference, the table, cache hits, the modes, and bad inputs when the plan runs."""

from __future__ import annotations

import numpy as np
import pytest

import tracea
from tracea_cli.errors import UsageError
from tracea_cli.ops.conv2d.problem import Conv2dProblem, reference

RNG = np.random.default_rng(0)


def _u(*shape):
    return RNG.uniform(-1, 1, shape).astype(np.float32)


def _conv_ref(x, w, pad):
    n, h, wd, c = x.shape
    k, r, s, _ = w.shape
    p = Conv2dProblem(n, h, wd, c, k, r, s, pad_h=pad, pad_w=pad)
    return reference(p, {"X": x.astype(np.float64), "W": w.astype(np.float64)})["Y"]


@pytest.fixture(scope="module")
def ctx(tmp_path_factory):
    return tracea.Context(device="cpu", cache=tmp_path_factory.mktemp("cache"), mode="default")


def _model():
    """ResNet block (conv + BN + ReLU), fork and join (conv + the other branch, ReLU), head (linear + bias)."""
    g = tracea.Graph()
    x = g.input("x", (1, 6, 6, 8))
    w1, w2, w3 = _u(8, 3, 3, 8), _u(8, 1, 1, 8), _u(10, 288)
    mean, var, gamma, beta, b3 = _u(8), np.abs(_u(8)) + 0.5, _u(8), _u(8), _u(10)
    block = g.conv2d(x, w1, padding=1, name="conv1").batch_norm(mean, var, gamma, beta, name="bn1").relu(name="relu1")
    joined = g.conv2d(block, w2, name="conv2").add(x, name="join").relu(name="relu2")
    flat = g.fallback(lambda a: a.reshape(1, 288), joined, shape=(1, 288), name="flatten")
    g.linear(flat, w3, name="fc").bias(b3, name="fc.bias")

    def expected(xa):
        y = _conv_ref(xa, w1, 1)
        y = np.maximum((y - mean) / np.sqrt(var + 1e-5) * gamma + beta, 0)
        y = np.maximum(_conv_ref(y.astype(np.float32), w2, 0) + xa, 0)
        return y.reshape(1, 288) @ w3.T.astype(np.float64) + b3

    return g, expected


@pytest.fixture(scope="module")
def made(ctx):
    g, expected = _model()
    return g, expected, ctx.optimize_graph(g)


def test_the_fusion_patterns_run_as_three_kernels_and_match_the_reference(made):
    g, expected, plan = made
    kernels = [r for r in plan.rows if r.source != "graph"]
    assert [(r.op, r.epilogue) for r in kernels] == [("conv2d", "bias_relu"), ("conv2d", "bias_residual_relu"),
                                                      ("gemm", "bias")]
    assert kernels[0].fused == ("bn1", "relu1") and kernels[1].fused == ("join", "relu2")
    xa = _u(1, 6, 6, 8)
    out = plan(x=xa)
    ref = expected(xa)
    assert out.shape == (1, 10) and np.linalg.norm(out - ref) / np.linalg.norm(ref) < 1e-5


def test_the_plan_prints_a_table_and_says_where_each_kernel_came_from(made):
    _, _, plan = made
    text = str(plan)
    for words in ("conv1 (+bn1, relu1)", "bias_residual_relu", "default", "flatten", "measured ms"):
        assert words in text
    assert all(r.measured_ms and r.measured_ms > 0 for r in plan.rows if r.source != "graph")
    assert plan.as_dict()["steps"][0]["config"] == dict(plan.rows[0].config)


def test_the_second_time_every_kernel_is_a_cache_hit(ctx, made):
    g, _, first = made
    again = ctx.optimize_graph(g)
    assert {r.source for r in again.rows} == {"cached", "graph"}
    assert [r.config for r in again.rows] == [r.config for r in first.rows]


def test_mode_cached_refuses_a_miss_naming_the_node(ctx):
    strict = tracea.Context(device="cpu", cache=ctx.settings.cache_dir, mode="cached")
    g = tracea.Graph()
    g.add_gemm(m=24, n=40, k=8, name="never_tuned")
    with pytest.raises(UsageError, match="never_tuned.*not in the tuning cache"):
        strict.optimize_graph(g)


@pytest.mark.parametrize("arrays, words", [
    ({}, "was not given"),
    ({"x": np.zeros((1, 6, 6, 8), np.float64)}, "float64"),
    ({"x": np.zeros((1, 6, 6, 9), np.float32)}, "shape"),
    ({"x": np.zeros((1, 8, 6, 6), np.float32).transpose(0, 2, 3, 1)}, "contiguous"),
    ({"x": np.zeros((1, 6, 6, 8), np.float32), "y": 1}, "no input 'y'"),
    ({"x": [[1.0]]}, "not a numpy"),
])
def test_bad_arrays_are_refused_before_any_kernel_runs(made, arrays, words):
    _, _, plan = made
    with pytest.raises(UsageError, match=words):
        plan(**arrays)


@pytest.mark.parametrize("kwargs, words", [
    ({"mode": "fast"}, "unknown mode"), ({"budget": 0}, "budget"), ({"time_limit_s": float("nan")}, "time_limit_s"),
    ({"device": "tpu"}, "device"), ({"strategy": "magic"}, "strategy"),
])
def test_bad_context_settings_are_one_sentence(kwargs, words):
    with pytest.raises(UsageError, match=words):
        tracea.Context(**kwargs)


def test_an_op_the_backend_cannot_run_names_the_node(ctx):
    g = tracea.Graph("fp16")
    g.add_gemm(m=16, name="half")
    with pytest.raises(UsageError, match="half.*cpu backend runs gemm in fp32, fp64, not fp16"):
        ctx.optimize_graph(g)
