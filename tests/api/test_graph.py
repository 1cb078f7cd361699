"""The Graph IR: builders from the registry's ops, shapes and dtypes checked, errors naming the node."""

from __future__ import annotations

import numpy as np
import pytest

import tracea
from tracea_cli.errors import UsageError


def test_the_seeds_builder_makes_inputs_for_the_op():
    g = tracea.Graph()
    c = g.add_gemm(m=2048, n=1024, k=512)
    assert c.shape == (2048, 1024) and c.dtype == "fp32"
    inputs = [n for n in g.nodes if n.kind == "input"]
    assert [(n.name, n.shape) for n in inputs] == [("gemm0.A", (2048, 512)), ("gemm0.B", (512, 1024))]
    assert g.outputs == (c.index,)


def test_builders_come_from_the_registry_and_chains_read_like_the_model():
    g = tracea.Graph()
    x = g.input("x", (2, 9, 9, 8))
    w = g.input("w", (16, 3, 3, 8))
    r = g.input("r", (2, 5, 5, 16))
    y = g.conv2d(x, w, stride=2, padding=1).bias(np.zeros(16, np.float32)).relu().add(r)
    assert y.shape == (2, 5, 5, 16)
    assert [n.kind for n in g.nodes] == ["input", "input", "input", "op", "constant", "bias", "relu", "add"]
    assert dict(g.nodes[3].options)["stride_h"] == 2 and dict(g.nodes[3].options)["pad_w"] == 1
    assert {"conv2d", "add_conv2d", "gemm", "add_gemm", "linear"} <= set(dir(g))


def test_linear_takes_the_weight_as_torch_stores_it():
    g = tracea.Graph()
    y = g.linear(g.input("x", (8, 64)), g.input("w", (10, 64)))
    assert y.shape == (8, 10) and dict(g.nodes[2].options)["layout"] == "nt"


@pytest.mark.parametrize("build, words", [
    (lambda g: g.gemm(g.input("a", (4, 5)), g.input("b", (6, 7))), "do not fit"),
    (lambda g: g.conv2d(g.input("x", (1, 8, 8, 3)), g.input("w", (4, 3, 3, 5))), "channels"),
    (lambda g: g.add(g.input("a", (2, 3)), g.input("b", (3, 2))), "differ"),
    (lambda g: g.input("a", (2, 3)).bias(np.zeros(2, np.float32)), "one per channel"),
    (lambda g: g.gemm(g.input("a", (4, 4)), g.input("b", (4, 4), "fp16")), "mixes dtypes"),
    (lambda g: g.add(g.input("a", (2,)), tracea.Graph().input("b", (2,))), "another graph"),
    (lambda g: g.input("a", (0, 3)), "positive"),
    (lambda g: (g.input("a", (2,)), g.input("a", (2,))), "already has a node named"),
    (lambda g: g.conv2d(g.input("x", (1, 2, 2, 8)), g.input("w", (8, 5, 5, 8))), "filter spans"),
    (lambda g: g.input("x", (2, 3)).batch_norm(np.zeros(3, np.float32), np.ones(3, np.float32), eps=0), "eps"),
])
def test_bad_graphs_are_refused_with_one_sentence_naming_the_node(build, words):
    with pytest.raises(UsageError) as e:
        build(tracea.Graph())
    assert words in e.value.message and "\n" not in e.value.message


def test_an_unknown_builder_is_an_attribute_error_that_lists_the_ops():
    with pytest.raises(AttributeError, match="gemm"):
        tracea.Graph().add_nothing()


def test_nodes_never_change_once_added():
    g = tracea.Graph()
    a = g.input("a", (2, 2))
    before = g.nodes
    a.relu()
    assert g.nodes[: len(before)] == before
    with pytest.raises(Exception):
        g.nodes[0].shape = (3, 3)
