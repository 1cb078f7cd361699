"""The Python API's Graph with attention nodes on the CPU backend: g.attention(q, k, v, causal=...) (blhd,
grouped-query heads, cross attention) and g.add_attention(...) in one plan, a pointwise node after the first (run by
itself: attention fuses no epilogue), checked against the float64 reference; and bad graphs as one sentence."""

from __future__ import annotations

import numpy as np
import pytest

import tracea
from tracea_cli.errors import UsageError
from tracea_cli.ops.attention.problem import AttentionProblem, reference

pytest.importorskip("numba")
RNG = np.random.default_rng(0)


def _u(*shape):
    return RNG.uniform(-1, 1, shape).astype(np.float32)


@pytest.fixture(scope="module")
def ctx(tmp_path_factory):
    return tracea.Context(device="cpu", cache=tmp_path_factory.mktemp("cache"), mode="default")


def test_attention_nodes_run_and_match_the_reference(ctx):
    g = tracea.Graph()
    q = g.input("q", (1, 17, 4, 64))  # blhd: B x L x H x D
    k = g.input("k", (1, 23, 2, 64))
    v = g.input("v", (1, 23, 2, 64))
    g.attention(q, k, v, causal=True, layout="blhd", name="attn").relu(name="act")
    # the same problem from its options (one kernel choice serves both): its inputs are made, a.q, a.k, a.v
    g.add_attention(batch=1, heads=4, kv_heads=2, seq=17, seq_k=23, head_dim=64, causal=True, layout="blhd", name="a")
    assert [n.shape for n in g.nodes if n.name.startswith("a.")] == [(1, 17, 4, 64), (1, 23, 2, 64), (1, 23, 2, 64)]
    plan = ctx.optimize_graph(g)
    rows = [r for r in plan.rows if r.source != "graph"]
    assert [r.op for r in rows] == ["attention", "attention"] and all(r.fused == () for r in rows)
    assert "h4/kv2 L17x23" in rows[0].shape and "causal" in rows[0].shape
    arrays = {"q": _u(1, 17, 4, 64), "k": _u(1, 23, 2, 64), "v": _u(1, 23, 2, 64)}
    arrays.update({f"a.{n}": _u(*a.shape) for n, a in arrays.items()})
    out = plan(**arrays)
    f64 = {n: a.astype(np.float64) for n, a in arrays.items()}
    p = AttentionProblem(1, 4, 17, 64, 2, 23, "fp32", causal=True, layout="blhd")
    ref = np.maximum(reference(p, {n: f64[n] for n in "qkv"})["out"], 0)
    assert out["act"].shape == (1, 17, 4, 64) and np.linalg.norm(out["act"] - ref) / np.linalg.norm(ref) < 1e-5
    ref = reference(p, {n: f64[f"a.{n}"] for n in "qkv"})["out"]
    assert np.linalg.norm(out["a"] - ref) / np.linalg.norm(ref) < 1e-5


@pytest.mark.parametrize("shapes, keywords, says", [
    (((1, 4, 8, 64), (1, 3, 8, 64), (1, 3, 8, 64)), {}, "kv_heads 3 does not divide heads 4"),
    (((1, 4, 8, 64), (1, 4, 8, 64), (1, 4, 9, 64)), {}, "k and v must have one shape"),
    (((1, 4, 8, 64), (1, 4, 8, 128), (1, 4, 8, 128)), {}, "batch and head_dim must agree"),
    (((1, 4, 8, 64), (1, 4, 8, 64), (1, 4, 8, 64)), {"lse": True}, "has one output, so lse=True cannot be"),
    (((1, 4, 8, 64), (1, 4, 8, 64), (1, 4, 8, 64)), {"mask": 1}, "attention has no keyword 'mask'"),
    (((4, 8, 64), (4, 8, 64), (4, 8, 64)), {}, "attention takes q, k and v as B x H x L x D"),
    (((1, 8, 64, 64), (1, 4, 4, 64), (1, 4, 4, 64)), {"causal": True}, "causal attention with seq 64 > seq_k 4"),
])
def test_bad_attention_nodes_are_one_sentence(shapes, keywords, says):
    g = tracea.Graph()
    q, k, v = (g.input(n, s) for n, s in zip("qkv", shapes))
    with pytest.raises(UsageError) as e:
        g.attention(q, k, v, **keywords)
    assert says in e.value.message, e.value.message
