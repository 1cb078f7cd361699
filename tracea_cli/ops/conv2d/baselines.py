"""The libraries a conv2d is measured against on the CPU, each a `Baseline` over the problem's operands (host arrays
in storage format): torch's CPU convolution on channels_last tensors where torch is installed, else numpy im2col +
BLAS. An epilogue runs as the separate pass a library user would write after the convolution (the "unfused pair").
The shared check-then-time path (backends/checked.py) poisons Y, runs, checks against the float64 reference and only
then times, exactly as for a tuned kernel.

Both are `default`: `--baseline auto` takes torch where it is installed and otherwise numpy, and then says in the
provider's name that torch was missing (ops/base.Baseline). Libraries are imported when a baseline is prepared,
never at import; a missing one raises `ToolchainMissing`.
"""

from __future__ import annotations

from typing import Any, Mapping

import numpy as np

from tracea_cli.errors import ToolchainMissing
from tracea_cli.ops.base import Baseline, BaselineRun
from tracea_cli.ops.conv2d.problem import Conv2dProblem
from tracea_cli.ops.epilogue_math import apply_epilogue_inplace


def _torch():
    try:
        import torch
    except ImportError:
        raise ToolchainMissing("this baseline needs PyTorch, which is not installed.",
                               "Install torch, or use --baseline numpy.") from None
    return torch


def prepare_torch(problem: Conv2dProblem, ops: Mapping[str, Any]) -> BaselineRun:
    """torch.nn.functional.conv2d on NCHW-shaped views of the NHWC arrays (channels_last strides, no copy in), its
    result copied into Y (the one extra pass a caller that owns Y pays), then the epilogue with torch's in-place
    operations on Y."""
    torch = _torch()
    p = problem
    x = torch.from_numpy(ops["X"]).permute(0, 3, 1, 2)  # N C H W view, channels_last in memory
    w = torch.from_numpy(ops["W"]).permute(0, 3, 1, 2)  # K C R S view, channels_last in memory
    y = torch.from_numpy(ops["Y"]).permute(0, 3, 1, 2)
    bias = torch.from_numpy(ops["bias"]).view(1, -1, 1, 1) if p.has_bias else None
    residual = torch.from_numpy(ops["residual"]).permute(0, 3, 1, 2) if p.has_residual else None
    e = p.fused
    functional = torch.nn.functional

    def activate(name: str | None) -> None:
        if name == "relu":
            y.relu_()
        elif name == "silu":
            functional.silu(y, inplace=True)

    def run() -> None:
        y.copy_(functional.conv2d(x, w, None, stride=(p.stride_h, p.stride_w), padding=(p.pad_h, p.pad_w),
                                  dilation=(p.dilation_h, p.dilation_w)))
        if e.bias:
            y.add_(bias)
        activate(e.activation)
        if e.residual:
            y.add_(residual)
        activate(e.post_activation)

    return BaselineRun("torch" if p.epilogue == "none" else "torch+epilogue-pass", run)


def prepare_numpy(problem: Conv2dProblem, ops: Mapping[str, Any]) -> BaselineRun:
    """What a numpy user writes: the input copied into a zero-padded buffer, unfolded into an (N·P·Q)×(R·S·C) column
    matrix (im2col, one strided copy), numpy.matmul (its BLAS, with its own threads) against the filter as K×(R·S·C)
    transposed, then the epilogue with numpy's element-wise operations. The buffers are allocated once, outside the
    timed run; both copies are inside it."""
    p = problem
    x, out = ops["X"], ops["Y"]
    filters = ops["W"].reshape(p.k, p.taps)
    padded = np.zeros((p.n, p.h + 2 * p.pad_h, p.w + 2 * p.pad_w, p.c), dtype=x.dtype)
    inner = padded[:, p.pad_h:p.pad_h + p.h, p.pad_w:p.pad_w + p.w, :]
    sn, sh, sw, sc = padded.strides
    windows = np.lib.stride_tricks.as_strided(
        padded, shape=(p.n, p.p, p.q, p.r, p.s, p.c),
        strides=(sn, sh * p.stride_h, sw * p.stride_w, sh * p.dilation_h, sw * p.dilation_w, sc), writeable=False)
    cols = np.empty((p.n, p.p, p.q, p.r, p.s, p.c), dtype=x.dtype)
    cols2d, out2d = cols.reshape(-1, p.taps), out.reshape(-1, p.k)

    def run() -> None:
        np.copyto(inner, x)
        np.copyto(cols, windows)
        np.matmul(cols2d, filters.T, out=out2d)
        apply_epilogue_inplace(out, p.fused, ops.get("bias"), ops.get("residual"))

    return BaselineRun("numpy-im2col" if p.epilogue == "none" else "numpy-im2col+epilogue-pass", run)


BASELINES = (
    Baseline("torch", ("cpu",), prepare_torch, default=True, requires="torch"),
    Baseline("numpy", ("cpu",), prepare_numpy, default=True),
)
