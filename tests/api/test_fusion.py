"""The fusion pass: anchor + single-consumer pointwise chain -> the op's epilogue; batch norm folded."""

from __future__ import annotations

import numpy as np

import tracea
from tracea_cli.api.fusion import ZERO_BIAS, fuse

F = np.float32


def _conv(g, k=16):
    x = g.input("x", (1, 8, 8, 8))
    return g.conv2d(x, g.input("w", (k, 3, 3, 8)), padding=1)


def _vec(n=16):
    return np.ones(n, F)


def test_resnet_block_conv_bn_relu_is_one_kernel_with_the_norm_folded():
    g = tracea.Graph()
    y = _conv(g).batch_norm(_vec(), _vec(), _vec(), _vec()).relu()
    (step,) = fuse(g)
    assert step.epilogue == "bias_relu" and step.output == y.index and step.fold is not None
    assert dict(step.operands)["bias"] == ZERO_BIAS and step.fold.weight == "W" and step.fold.axis == 0


def test_fork_and_join_conv_plus_the_other_branch_is_one_kernel():
    g = tracea.Graph()
    x = g.input("x", (1, 8, 8, 8))
    left = g.conv2d(x, g.input("w1", (8, 3, 3, 8)), padding=1)
    right = g.conv2d(x, g.input("w2", (8, 3, 3, 8)), padding=1)
    y = left.add(right).relu()
    steps = fuse(g)
    assert len(steps) == 2 and steps[1].output == y.index
    assert steps[1].epilogue == "bias_residual_relu" and dict(steps[1].operands)["residual"] == right.index


def test_classification_head_linear_plus_bias_is_the_gemm_epilogue():
    g = tracea.Graph()
    y = g.linear(g.input("x", (4, 32)), g.input("w", (10, 32))).bias(g.input("b", (10,)))
    (step,) = fuse(g)
    assert step.epilogue == "bias" and dict(step.operands)["bias"] == g.nodes[y.index].inputs[1]


def test_a_value_read_twice_ends_the_chain():
    g = tracea.Graph()
    c = _conv(g)
    b = c.bias(_vec())
    b.relu()
    b.silu()
    steps = fuse(g)
    assert [s.epilogue for s in steps if s.is_op] == ["bias"] and len(steps) == 3


def test_an_output_in_the_middle_is_kept():
    g = tracea.Graph()
    c = _conv(g)
    b = c.bias(_vec())
    b.relu()
    g.output(b)
    assert [s.epilogue for s in fuse(g) if s.is_op] == ["bias"]


def test_what_the_op_has_no_epilogue_for_runs_by_itself():
    g = tracea.Graph()
    _conv(g).bias(_vec()).gelu()  # conv2d has no bias_gelu; gemm has
    steps = fuse(g)
    assert [s.epilogue for s in steps if s.is_op] == ["bias"] and g.nodes[steps[-1].node].kind == "gelu"
    h = tracea.Graph()
    h.gemm(h.input("a", (4, 4)), h.input("b", (4, 4))).bias(np.ones(4, F)).gelu()
    assert [s.epilogue for s in fuse(h)] == ["bias_gelu"]


def test_two_biases_without_a_norm_fuse_one():
    g = tracea.Graph()
    _conv(g).bias(_vec()).bias(_vec())
    assert [s.epilogue for s in fuse(g) if s.is_op] == ["bias"] and len(fuse(g)) == 2
