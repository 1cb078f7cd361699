"""The Python API's Graph with lowrank-mlp nodes: g.lowrank_mlp(x, U, V) (nn, nt) and g.add_lowrank_mlp(...);
linear → linear with a narrow middle fused into one lowrank-mlp step with the chain after it as its epilogue (batch
norm folded into V), run on the CPU backend and checked against a float64 reference; what is not that pattern (a wide
middle, a middle read twice or asked for, a bias on the first linear, a gemm of layout nn) left as two steps; and bad
nodes as one sentence."""

from __future__ import annotations

import numpy as np
import pytest

import tracea
from tracea_cli.api.fusion import fuse
from tracea_cli.errors import UsageError
from tracea_cli.ops.registry import get_op

RNG = np.random.default_rng(0)


def _u(*shape):
    return RNG.uniform(-1, 1, shape).astype(np.float32)


def _f(a):
    return np.asarray(a, dtype=np.float64)


def _pair(g, d_in=32, rank=8, d_out=40, m=12):
    """x → linear(W1: rank x d_in) → linear(W2: d_out x rank): (its value, W1, W2, x)."""
    x = g.input("x", (m, d_in))
    w1, w2 = _u(rank, d_in), _u(d_out, rank)
    return g.linear(g.linear(x, w1, name="fc1"), w2, name="fc2"), w1, w2, x


def _op_steps(g):
    return [s for s in fuse(g) if s.is_op]


# ---- building nodes ------------------------------------------------------------------------------------------------


def test_lowrank_nodes_take_both_layouts_and_add_lowrank_mlp_makes_their_inputs():
    g = tracea.Graph()
    x = g.input("x", (12, 32))
    y = g.lowrank_mlp(x, g.input("U", (32, 8)), g.input("V", (8, 40)), name="nn")
    t = g.lowrank_mlp(x, g.input("Ut", (8, 32)), g.input("Vt", (40, 8)), layout="nt", name="nt")
    a = g.add_lowrank_mlp(m=12, d_in=32, rank=8, d_out=40, layout="nt", name="a")
    assert y.shape == t.shape == a.shape == (12, 40)
    assert dict(g.nodes[t.index].options) == {"m": 12, "d_in": 32, "rank": 8, "d_out": 40, "layout": "nt"}
    assert [n.shape for n in g.nodes if n.name.startswith("a.")] == [(12, 32), (8, 32), (40, 8)]
    assert g.nodes[a.index].roles == ("x", "U", "V")


@pytest.mark.parametrize("shapes, keywords, says", [
    (((12, 32), (30, 8), (8, 40)), {}, "x is 12 x 32, so U (d_in x r, layout nn) needs d_in = 32, but it is 30 x 8"),
    (((12, 32), (8, 32), (40, 6)), {"layout": "nt"}, "so V (d_out x r, layout nt) needs r = 8, but it is 40 x 6"),
    (((12, 32), (32, 8), (8, 40, 1)), {}, "lowrank-mlp takes x as M x d_in, U as d_in x r and V as r x d_out"),
    (((12, 4), (4, 8), (8, 40)), {}, "rank 8 is larger than d_in=4"),
    (((12, 32), (32, 8), (8, 40)), {"bias": True}, "computes x·U·V alone, so it takes no bias="),
    (((12, 32), (32, 8), (8, 40)), {"act": "silu"}, "computes x·U·V alone, so it takes no act="),
    (((12, 32), (32, 8), (8, 40)), {"rank": 8}, "lowrank-mlp has no keyword 'rank'"),
    (((12, 32), (32, 8), (8, 40)), {"layout": "tn"}, "unknown layout 'tn'"),
])
def test_bad_lowrank_nodes_are_one_sentence(shapes, keywords, says):
    g = tracea.Graph()
    tensors = [g.input(name, shape) for name, shape in zip(("x", "U", "V"), shapes)]
    with pytest.raises(UsageError) as e:
        g.lowrank_mlp(*tensors, **keywords)
    assert says in e.value.message and e.value.message.count(". ") == 0


def test_an_op_node_takes_no_epilogue_keyword():
    g = tracea.Graph()
    with pytest.raises(UsageError, match="takes no epilogue="):
        g.add_gemm(m=16, epilogue="bias")
    with pytest.raises(UsageError, match="epilogue 'none' and bias=True disagree"):
        g.add_lowrank_mlp(m=12, d_in=32, rank=8, bias=True)


def test_the_graphs_epilogue_names_are_the_ops_bias_act_and_residual():
    op = get_op("lowrank-mlp")
    p = op.problem(m=4, d_in=8, rank=2, epilogue="bias_silu_residual")
    assert (p.bias, p.act, p.residual, p.epilogue) == (True, "silu", True, "bias_silu_residual")
    assert op.problem(m=4, d_in=8, rank=2, epilogue="none").epilogue == "none"
    with pytest.raises(UsageError, match="unknown epilogue 'bias_residual_relu'"):
        op.problem(m=4, d_in=8, rank=2, epilogue="bias_residual_relu")


# ---- the fusion pattern --------------------------------------------------------------------------------------------


def test_linear_linear_bias_silu_add_is_one_lowrank_step():
    g = tracea.Graph()
    h, w1, w2, x = _pair(g)
    y = h.bias(_u(40), name="b").silu(name="act").add(g.input("r", (12, 40)), name="res")
    (step,) = _op_steps(g)
    assert step.runs(g) == ("lowrank-mlp", {"m": 12, "d_in": 32, "rank": 8, "d_out": 40, "layout": "nt"})
    assert step.epilogue == "bias_silu_residual" and step.output == y.index
    named = {n.name: n for n in g.nodes}
    fc1, fc2 = named["fc1"], named["fc2"]
    assert step.merged == (fc1.index,) and step.node == fc2.index == h.index
    assert dict(step.operands) == {"x": x.index, "U": fc1.input_for("B"), "V": fc2.input_for("B"),
                                   "bias": named["b"].input_for("bias"), "residual": named["r"].index}


def test_a_batch_norm_after_the_pair_folds_into_V():
    g = tracea.Graph()
    h, *_ = _pair(g)
    h.batch_norm(_u(40), np.abs(_u(40)) + 0.5).relu()
    (step,) = _op_steps(g)
    assert step.epilogue == "bias_relu" and (step.fold.weight, step.fold.axis) == ("V", 0)


def _two_gemm_steps(g):
    assert [s.runs(g)[0] for s in _op_steps(g)] == ["gemm", "gemm"]


def test_a_wide_middle_is_two_gemm_steps():
    g = tracea.Graph()
    _pair(g, d_in=32, rank=17, d_out=40)  # 2 * 17 > 32
    _two_gemm_steps(g)
    h = tracea.Graph()
    _pair(h, d_in=32, rank=16, d_out=40)  # 2 * 16 = 32: narrow
    assert [s.runs(h)[0] for s in _op_steps(h)] == ["lowrank-mlp"]


def test_a_middle_read_twice_or_asked_for_is_two_gemm_steps():
    g = tracea.Graph()
    x = g.input("x", (12, 32))
    t = g.linear(x, _u(8, 32))
    g.linear(t, _u(40, 8))
    t.relu()
    _two_gemm_steps(g)
    h = tracea.Graph()
    x = h.input("x", (12, 32))
    t = h.linear(x, _u(8, 32))
    h.output(t, h.linear(t, _u(40, 8)))
    _two_gemm_steps(h)


def test_a_bias_on_the_first_linear_is_two_gemm_steps():
    g = tracea.Graph()
    x = g.input("x", (12, 32))
    g.linear(g.linear(x, _u(8, 32)).bias(_u(8)), _u(40, 8)).bias(_u(40))
    steps = _op_steps(g)
    _two_gemm_steps(g)
    assert [s.epilogue for s in steps] == ["bias", "bias"]


def test_gemms_of_layout_nn_are_two_gemm_steps():
    g = tracea.Graph()
    x = g.input("x", (12, 32))
    g.gemm(g.gemm(x, _u(32, 8)), _u(8, 40))
    _two_gemm_steps(g)


# ---- end to end on the CPU -----------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def ctx(tmp_path_factory):
    pytest.importorskip("numba")
    return tracea.Context(device="cpu", cache=tmp_path_factory.mktemp("cache"), mode="default")


def test_lowrank_steps_run_and_match_the_reference(ctx):
    """Two pairs of linears over one x: + bias, SiLU and a residual; a batch norm folded into V, ReLU."""
    g = tracea.Graph()
    h, w1, w2, x = _pair(g)
    b, mean, var = _u(40), _u(40), np.abs(_u(40)) + 0.5
    h.bias(b, name="b").silu(name="act").add(g.input("r", (12, 40)), name="res")
    g.linear(g.linear(x, w1, name="fc3"), w2, name="fc4").batch_norm(mean, var, name="bn").relu(name="relu")
    plan = ctx.optimize_graph(g)
    assert [(r.op, r.epilogue, r.fused) for r in plan.rows] == [
        ("lowrank-mlp", "bias_silu_residual", ("fc1", "b", "act", "res")),
        ("lowrank-mlp", "bias_relu", ("fc3", "bn", "relu"))]
    assert "lowrank-mlp 12x32->r8->40 fp32 nt" in plan.rows[0].shape
    xa, ra = _u(12, 32), _u(12, 40)
    out = plan(x=xa, r=ra)
    t = _f(xa) @ _f(w1).T @ _f(w2).T
    expected = {"res": (t + b) / (1 + np.exp(-(t + b))) + ra,
                "relu": np.maximum((t - mean) / np.sqrt(_f(var) + 1e-5), 0)}
    for name, ref in expected.items():
        assert out[name].shape == (12, 40)
        assert np.linalg.norm(out[name] - ref) / np.linalg.norm(ref) < 1e-5, name
