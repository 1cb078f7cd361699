"""The libraries a low-rank MLP is measured against, each the unfused sequence a library user writes: T = x·U, then
y = T·V, then bias, activation and residual as separate element-wise passes over y. T goes through memory in the
input dtype (what `intermediate="dtype"` keeps), the output is written three or four times.

    torch   torch.matmul twice, then add_/relu_/silu/gelu/add_ (CPU and CUDA; TF32 off for fp32)
    cublas  cupy.matmul twice (cuBLAS), then one element-wise epilogue pass: where torch is not installed (CUDA)
    numpy   numpy.matmul twice (its BLAS), then numpy's in-place element-wise passes (CPU)

The shared check-then-time path (backends/checked.py) poisons y, runs, checks against the float64 reference and only
then times, exactly as for a tuned kernel. Libraries are imported when a baseline is prepared, never at import; a
missing one raises `ToolchainMissing`. The memory floor (x read and y written once at the measured bandwidth) is
no call: bench derives it from the problem's bytes and the profile's bandwidth (the roofline's % of ceiling).
"""

from __future__ import annotations

import contextlib
import functools
from typing import Any, Iterator, Mapping

import numpy as np

from tracea_cli.ops.base import Baseline, BaselineRun
from tracea_cli.ops.epilogue_math import apply_epilogue_inplace, c_expression
from tracea_cli.ops.gemm.baselines import _cublas_view, _cupy, _torch
from tracea_cli.ops.torch_tensors import as_torch
from tracea_cli.ops.lowrank_mlp.problem import EPILOGUES, LowrankMlpProblem


def prepare_torch(problem: LowrankMlpProblem, ops: Mapping[str, Any]) -> BaselineRun:
    """torch.matmul(x, U) into a preallocated T, torch.matmul(T, V) into y, then the epilogue with torch's in-place
    operations on y (each a separate pass)."""
    torch = _torch()
    p = problem
    x, u, v, y = (as_torch(torch, ops[name], p.dtype) for name in ("x", "U", "V", "y"))
    if p.layout == "nt":
        u, v = u.t(), v.t()
    t = torch.empty((p.m, p.rank), dtype=x.dtype, device=x.device)
    bias = as_torch(torch, ops["bias"], p.dtype) if p.bias else None
    residual = as_torch(torch, ops["residual"], p.dtype) if p.residual else None
    functional = torch.nn.functional

    def run() -> None:
        torch.matmul(x, u, out=t)
        torch.matmul(t, v, out=y)
        if bias is not None:
            y.add_(bias)
        if p.act == "relu":
            y.relu_()
        elif p.act == "silu":
            functional.silu(y, inplace=True)
        elif p.act == "gelu":
            y.copy_(functional.gelu(y))
        if residual is not None:
            y.add_(residual)

    @contextlib.contextmanager
    def math() -> Iterator[None]:
        prior = torch.backends.cuda.matmul.allow_tf32
        torch.backends.cuda.matmul.allow_tf32 = False  # fp32 is fp32: no TF32 products
        try:
            yield
        finally:
            torch.backends.cuda.matmul.allow_tf32 = prior

    stream = None if x.device.type == "cpu" else int(torch.cuda.current_stream(x.device).cuda_stream)
    return BaselineRun("torch-unfused", run, math, stream)


@functools.lru_cache(maxsize=None)
def _epilogue_pass(epilogue: str, has_bias: bool):
    """One element-wise pass over y in fp32: the bias, activation and residual of a library user's epilogue."""
    e = next(e for e in EPILOGUES if e.name == epilogue)
    inputs = ", ".join((["T bias"] if has_bias else []) + (["T r"] if e.residual else []))
    add = "(float)bias" if has_bias else "0.f"
    return _cupy().ElementwiseKernel(inputs, "T y", f"float v = (float)y + {add}; {c_expression(e)} y = (T)v;",
                                     f"tracea_lowrank_epilogue_{epilogue}")


def prepare_cublas(problem: LowrankMlpProblem, ops: Mapping[str, Any]) -> BaselineRun:
    """cupy.matmul(x, U) into T, cupy.matmul(T, V) into y (cuBLAS both), then one element-wise epilogue pass. bf16
    needs CuPy with ml_dtypes' bfloat16."""
    cupy = _cupy()
    p = problem
    x, u, v, y = (_cublas_view(ops[name], p.dtype) for name in ("x", "U", "V", "y"))
    if p.layout == "nt":
        u, v = u.T, v.T
    t = cupy.empty((p.m, p.rank), dtype=x.dtype)
    extra = tuple(_cublas_view(ops[name], p.dtype) for name, on in (("bias", p.bias), ("residual", p.residual)) if on)
    epilogue = _epilogue_pass(p.epilogue, p.bias) if p.epilogue != "none" else None

    def run() -> None:
        cupy.matmul(x, u, out=t)
        cupy.matmul(t, v, out=y)
        if epilogue is not None:
            epilogue(*extra, y)

    return BaselineRun("cublas-unfused", run)


def prepare_numpy(problem: LowrankMlpProblem, ops: Mapping[str, Any]) -> BaselineRun:
    """numpy.matmul(x, U) into T, numpy.matmul(T, V) into y (its BLAS, with its own threads), then the epilogue with
    numpy's in-place element-wise operations. T is allocated once, outside the timed run."""
    p = problem
    x, u, v, y = ops["x"], ops["U"], ops["V"], ops["y"]
    if p.layout == "nt":
        u, v = u.T, v.T
    t = np.empty((p.m, p.rank), dtype=x.dtype)

    def run() -> None:
        np.matmul(x, u, out=t)
        np.matmul(t, v, out=y)
        apply_epilogue_inplace(y, p.fused, ops.get("bias"), ops.get("residual"))

    return BaselineRun("numpy-unfused", run)


BASELINES = (
    Baseline("torch", ("cuda", "cpu"), prepare_torch, default=True, requires="torch"),
    Baseline("cublas", ("cuda",), prepare_cublas, default=True, requires="cupy"),
    Baseline("numpy", ("cpu",), prepare_numpy, default=True),
)
