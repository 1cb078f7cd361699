"""The libraries a GEMM is measured against, each a `Baseline` over the problem's operands (storage format, on the
device the run uses): cuBLAS through CuPy, numpy's BLAS, torch.matmul. An epilogue runs as the separate pass a
library user would write after the product. The shared check-then-time path (backends/checked.py) poisons C, runs,
checks against the float64 reference and only then times, exactly as for a tuned kernel.

Libraries are imported when a baseline is prepared, never at import; a missing one raises `ToolchainMissing`.
"""

from __future__ import annotations

import contextlib
import functools
from typing import Any, Callable, Iterator, Mapping

import numpy as np

from tracea_cli.errors import ToolchainMissing
from tracea_cli.ops.base import Baseline, BaselineRun, find_epilogue
from tracea_cli.ops.epilogue_math import apply_epilogue_inplace, c_expression
from tracea_cli.ops.gemm.problem import EPILOGUES, GemmProblem
from tracea_cli.ops.torch_tensors import as_torch, require_torch


def _cupy():
    try:
        import cupy
    except ImportError:
        raise ToolchainMissing("CuPy is not installed, so the cuBLAS baseline cannot run here.",
                               "Install the CUDA extra (pip install 'tracea[cuda]') on a machine with an NVIDIA GPU.") from None
    return cupy


def cublas_name(problem: GemmProblem) -> str:
    name = "cublas-tf32" if problem.dtype == "tf32" else "cublas"
    return name if problem.epilogue == "none" else f"{name}+epilogue-pass"


def _cublas_view(array: Any, dtype: str) -> Any:
    """The array as cuBLAS should see it: bf16 bit patterns as ml_dtypes' bfloat16 (unchanged without ml_dtypes)."""
    if dtype != "bf16" or array is None:
        return array
    try:
        import ml_dtypes

        return array.view(np.dtype(ml_dtypes.bfloat16))
    except Exception:  # no ml_dtypes, or a CuPy without bfloat16: cupy.matmul will refuse, and torch is tried
        return array


@functools.lru_cache(maxsize=None)
def _epilogue_pass(epilogue: str):
    """An unfused epilogue pass over C (what a library user writes after cuBLAS), computed in fp32."""
    e = find_epilogue(EPILOGUES, epilogue)
    return _cupy().ElementwiseKernel(
        "T bias" + (", T r" if e.residual else ""), "T c",
        f"float v = (float)c + (float)bias; {c_expression(e)} c = (T)v;", f"tracea_epilogue_{epilogue}")


@contextlib.contextmanager
def cublas_math(problem: GemmProblem) -> Iterator[None]:
    """For a tf32 problem, cuBLAS fp32 GEMMs on TF32 tensor cores inside the block (CuPy's compute type; the previous
    one restored after). Other dtypes: nothing changes."""
    if problem.dtype != "tf32":
        yield
        return
    from cupy._core import _routines_linalg as linalg

    previous = linalg.get_compute_type(np.float32)
    linalg.set_compute_type(np.float32, linalg.COMPUTE_TYPE_TF32)
    try:
        yield
    finally:
        linalg.set_compute_type(np.float32, previous)


def prepare_cublas(problem: GemmProblem, ops: Mapping[str, Any]) -> BaselineRun:
    """C = epilogue(A·B) with cupy.matmul (cuBLAS), then the epilogue as a separate pass when there is one. bf16
    needs ml_dtypes for CuPy; without it, cuBLAS is reached through torch when that is installed."""
    cupy = _cupy()
    name = cublas_name(problem)
    math = functools.partial(cublas_math, problem)
    a, b, c = (_cublas_view(ops[t], problem.dtype) for t in ("A", "B", "C"))
    b_kn = b if problem.layout == "nn" else b.T
    if problem.epilogue == "none":
        if problem.dtype == "bf16":  # CuPy's bf16 support varies by version: try once, else go through torch
            try:
                if a.dtype.name != "bfloat16":
                    raise TypeError("no bfloat16 dtype for CuPy")
                cupy.matmul(a, b_kn, out=c)
                cupy.cuda.get_current_stream().synchronize()
            except Exception:
                return BaselineRun(f"{name} (via torch)", _torch_bf16_matmul(problem, ops))
        return BaselineRun(name, lambda: cupy.matmul(a, b_kn, out=c), math)
    if problem.dtype == "bf16" and a.dtype.name != "bfloat16":
        raise ToolchainMissing("the bf16 epilogue baseline needs CuPy with ml_dtypes' bfloat16.", "pip install ml_dtypes")
    epilogue = _epilogue_pass(problem.epilogue)
    bias = _cublas_view(ops.get("bias"), problem.dtype)
    extra = (_cublas_view(ops["residual"], problem.dtype),) if problem.has_residual else ()

    def run() -> None:
        cupy.matmul(a, b_kn, out=c)
        epilogue(bias, *extra, c)

    return BaselineRun(name, run, math)


def _torch():
    return require_torch("Install torch, or use --baseline auto.")


def _torch_bf16_matmul(problem: GemmProblem, ops: Mapping[str, Any]) -> Callable[[], None]:
    try:
        torch = _torch()
    except ToolchainMissing:
        raise ToolchainMissing("a bf16 cuBLAS baseline needs ml_dtypes (for CuPy) or torch.", "pip install ml_dtypes") from None
    a, b, c = (as_torch(torch, ops[t], "bf16") for t in ("A", "B", "C"))
    b_kn = b if problem.layout == "nn" else b.t()
    return lambda: torch.matmul(a, b_kn, out=c)


def prepare_torch(problem: GemmProblem, ops: Mapping[str, Any]) -> BaselineRun:
    """torch.matmul into C (TF32 allowed only for tf32), then the epilogue with torch's in-place operations."""
    torch = _torch()
    a, b, c = (as_torch(torch, ops[t], problem.dtype) for t in ("A", "B", "C"))
    bias = as_torch(torch, ops["bias"], problem.dtype) if problem.has_bias else None
    residual = as_torch(torch, ops["residual"], problem.dtype) if problem.has_residual else None
    b_kn = b if problem.layout == "nn" else b.t()
    e = problem.fused
    functional = torch.nn.functional

    def activate(name: str | None) -> None:
        if name == "relu":
            c.relu_()
        elif name == "silu":
            functional.silu(c, inplace=True)
        elif name == "gelu":
            c.copy_(functional.gelu(c))

    def run() -> None:
        torch.matmul(a, b_kn, out=c)
        if e.bias:
            c.add_(bias)
        activate(e.activation)
        if e.residual:
            c.add_(residual)
        activate(e.post_activation)

    @contextlib.contextmanager
    def math() -> Iterator[None]:
        prior = torch.backends.cuda.matmul.allow_tf32
        torch.backends.cuda.matmul.allow_tf32 = problem.dtype == "tf32"
        try:
            yield
        finally:
            torch.backends.cuda.matmul.allow_tf32 = prior

    stream = None if a.device.type == "cpu" else int(torch.cuda.current_stream(a.device).cuda_stream)
    return BaselineRun("torch", run, math, stream)


def prepare_numpy(problem: GemmProblem, ops: Mapping[str, Any]) -> BaselineRun:
    """numpy.matmul (its BLAS, with its own threads) into C, then the epilogue with numpy's element-wise operations."""
    a, b, out = ops["A"], ops["B"], ops["C"]
    b_kn = b if problem.layout == "nn" else b.T

    def run() -> None:
        np.matmul(a, b_kn, out=out)
        apply_epilogue_inplace(out, problem.fused, ops.get("bias"), ops.get("residual"))

    return BaselineRun("numpy", run)


BASELINES = (
    Baseline("cublas", ("cuda",), prepare_cublas, default=True, requires="cupy"),
    Baseline("numpy", ("cpu",), prepare_numpy, default=True),
    Baseline("torch", ("cuda", "cpu"), prepare_torch, requires="torch"),
)
