"""The libraries a conv2d is measured against, each a `Baseline` over the problem's operands (arrays in storage format,
on the device the run uses). On a GPU: cuDNN through torch on channels_last tensors, with cuDNN's own algorithm
search (`torch.backends.cudnn.benchmark`) and TF32 only for tf32 problems. On the CPU: torch's CPU convolution where
torch is installed, else numpy im2col + BLAS. An epilogue runs as the separate passes a library user would write
after the convolution (the "unfused pair"). The shared check-then-time path (backends/checked.py) poisons Y, runs,
checks against the float64 reference and only then times, exactly as for a tuned kernel.

On the CPU both are `default`: `--baseline auto` takes torch where it is installed and otherwise numpy, and then says
in the provider's name that torch was missing (ops/base.Baseline). Libraries are imported when a baseline is
prepared, never at import; a missing one raises `ToolchainMissing`.
"""

from __future__ import annotations

import contextlib
from typing import Any, Iterator, Mapping

import numpy as np

from tracea_cli.ops.base import Baseline, BaselineRun, Epilogue
from tracea_cli.ops.conv2d.problem import Conv2dProblem
from tracea_cli.ops.epilogue_math import apply_epilogue_inplace
from tracea_cli.ops.torch_tensors import as_torch, require_torch


def _views(torch: Any, problem: Conv2dProblem, ops: Mapping[str, Any]) -> dict[str, Any]:
    """The operands as torch sees a channels_last convolution: X, W, Y and the residual as N C H W (K C R S, N K P Q)
    views of the NHWC arrays (channels_last strides, no copy), the bias as 1 K 1 1."""
    nchw = {name: as_torch(torch, ops[name], problem.dtype).permute(0, 3, 1, 2)
            for name in ("X", "W", "Y", "residual") if name in ops and ops[name] is not None}
    if problem.has_bias:
        nchw["bias"] = as_torch(torch, ops["bias"], problem.dtype).view(1, -1, 1, 1)
    return nchw


def _epilogue_pass(torch: Any, out: Any, e: Epilogue, bias: Any, residual: Any) -> None:
    """The epilogue as torch's separate in-place operations on `out`."""
    def activate(name: str | None) -> None:
        if name == "relu":
            out.relu_()
        elif name == "silu":
            torch.nn.functional.silu(out, inplace=True)

    if e.bias:
        out.add_(bias)
    activate(e.activation)
    if e.residual:
        out.add_(residual)
    activate(e.post_activation)


def _conv(torch: Any, p: Conv2dProblem, x: Any, w: Any) -> Any:
    return torch.nn.functional.conv2d(x, w, None, stride=(p.stride_h, p.stride_w), padding=(p.pad_h, p.pad_w),
                                      dilation=(p.dilation_h, p.dilation_w))


def prepare_torch(problem: Conv2dProblem, ops: Mapping[str, Any]) -> BaselineRun:
    """torch.nn.functional.conv2d on the CPU, on NCHW-shaped views of the NHWC arrays (channels_last strides, no copy
    in), its result copied into Y (the one extra pass a caller that owns Y pays), then the epilogue with torch's
    in-place operations on Y."""
    torch = require_torch("Install torch, or use --baseline numpy.")
    v = _views(torch, problem, ops)

    def run() -> None:
        v["Y"].copy_(_conv(torch, problem, v["X"], v["W"]))
        _epilogue_pass(torch, v["Y"], problem.fused, v.get("bias"), v.get("residual"))

    return BaselineRun("torch" if problem.epilogue == "none" else "torch+epilogue-pass", run)


def prepare_cudnn(problem: Conv2dProblem, ops: Mapping[str, Any]) -> BaselineRun:
    """cuDNN through torch.nn.functional.conv2d on channels_last views of the GPU arrays, then the epilogue as torch's
    separate in-place passes over its output (the unfused pair).

    torch has no `out=` for a convolution: cuDNN writes a tensor of torch's (from its caching allocator, in
    channels_last), which is what a torch user holds. The first run, the one checked, copies it into Y for the check;
    the timed runs leave it where cuDNN wrote it, so that the baseline's time has no copy a torch user would not make.
    Inside the run: cuDNN's own algorithm search (`cudnn.benchmark`: the checked run pays for it, untimed) and TF32
    only for tf32 problems."""
    torch = require_torch("Install torch (with CUDA), or use --baseline none.")
    v = _views(torch, problem, ops)
    checked = []

    def run() -> None:
        out = _conv(torch, problem, v["X"], v["W"])
        _epilogue_pass(torch, out, problem.fused, v.get("bias"), v.get("residual"))
        if not checked:
            v["Y"].copy_(out)
            checked.append(True)

    @contextlib.contextmanager
    def math() -> Iterator[None]:
        cudnn = torch.backends.cudnn
        prior = cudnn.benchmark, cudnn.allow_tf32
        cudnn.benchmark, cudnn.allow_tf32 = True, problem.dtype == "tf32"
        try:
            yield
        finally:
            cudnn.benchmark, cudnn.allow_tf32 = prior

    stream = int(torch.cuda.current_stream(v["X"].device).cuda_stream)
    return BaselineRun("cudnn" if problem.epilogue == "none" else "cudnn+epilogue-pass", run, math, stream)


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
    Baseline("cudnn", ("cuda",), prepare_cudnn, default=True, requires="torch"),
    Baseline("torch", ("cpu",), prepare_torch, default=True, requires="torch"),
    Baseline("numpy", ("cpu",), prepare_numpy, default=True),
)
