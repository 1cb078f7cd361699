"""The math of fused epilogues (ops/base.Epilogue), once: in float64 for references (numpy or CuPy arrays alike), in
place in an array's own precision for a library baseline's separate pass on the host, and as a C expression for one
on a GPU."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from tracea_cli.ops.base import Epilogue
from tracea_cli.ops.dtypes import array_module


def _erf(x):
    xp = array_module(x)
    if xp is np:
        from scipy.special import erf  # numpy has none

        return erf(x)
    from cupyx.scipy.special import erf

    return erf(x)


def activate(x, activation: str | None):
    """relu / silu / gelu (erf form) of an array, as a new array; NaN stays NaN (a kernel fault must show)."""
    xp = array_module(x)
    if activation == "relu":
        return xp.where(x < 0, x * 0, x)
    if activation == "silu":
        return x / (1.0 + xp.exp(-x))
    if activation == "gelu":
        return 0.5 * x * (1.0 + _erf(x / math.sqrt(2.0)))
    return x


def apply_epilogue(c, epilogue: Epilogue, bias: Any = None, residual: Any = None):
    """The epilogue over the main product `c` (rows by columns): + bias per column, activation, + residual,
    activation. Returns a new array on c's device."""
    if epilogue.bias:
        c = c + bias
    c = activate(c, epilogue.activation)
    if epilogue.residual:
        c = c + residual
    return activate(c, epilogue.post_activation)


def apply_epilogue_inplace(out: np.ndarray, epilogue: Epilogue, bias: Any = None, residual: Any = None) -> None:
    """The same on a host array in its own dtype, in place: what a numpy user writes after numpy.matmul."""
    if epilogue.bias:
        out += bias
    for step, activation in ((0, epilogue.activation), (1, epilogue.post_activation)):
        if step == 1 and epilogue.residual:
            out += residual
        if activation == "relu":
            np.maximum(out, 0, out=out)
        elif activation == "silu":
            out /= 1 + np.exp(-out)
        elif activation == "gelu":
            out *= 0.5 * (1 + _erf(out * np.sqrt(0.5)))


_C_ACTIVATION = {
    None: "",
    "relu": "v = v > 0.f ? v : 0.f;",
    "silu": "v = v / (1.f + expf(-v));",
    "gelu": "v = 0.5f * v * (1.f + erff(v * 0.70710678118654752f));",
}


def c_expression(epilogue: Epilogue) -> str:
    """CUDA C statements turning `float v` (the product plus bias) into the epilogue's output, given `float r` (the
    residual) where it has one: the body of a library baseline's element-wise pass."""
    tail = " v = v + r;" if epilogue.residual else ""
    post = f" {_C_ACTIVATION[epilogue.post_activation]}" if epilogue.post_activation else ""
    return f"{_C_ACTIVATION[epilogue.activation]}{tail}{post}".strip() or "v = v;"
