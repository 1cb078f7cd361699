"""The GEMM problem: shape, dtype, layout, epilogue; its inputs, float64 reference and work counts."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from tracea_cli.errors import UsageError
from tracea_cli.ops.dtypes import array_module, get_dtype, representable

LAYOUTS = ("nn", "nt")
# bias: C += bias[n]; then an activation; residual: C += R[m, n] last.
EPILOGUES = ("none", "bias", "bias_relu", "bias_silu", "bias_gelu", "bias_residual")
SHAPE_LIMIT = 1 << 20  # a single dimension above this is almost certainly a typo


@dataclass(frozen=True)
class GemmProblem:
    m: int
    n: int
    k: int
    dtype: str = "fp32"
    layout: str = "nn"
    epilogue: str = "none"
    op: str = "gemm"

    def __post_init__(self) -> None:
        for name in ("m", "n", "k"):
            v = getattr(self, name)
            if not isinstance(v, int) or isinstance(v, bool) or v <= 0:
                raise UsageError(f"--{name} must be a positive whole number, got {v}.")
            if v > SHAPE_LIMIT:
                raise UsageError(f"--{name} {v} is larger than {SHAPE_LIMIT}; check the size.")
        get_dtype(self.dtype)
        if self.layout not in LAYOUTS:
            raise UsageError(f"unknown layout {self.layout!r}.", f"Use one of {', '.join(LAYOUTS)}.")
        if self.epilogue not in EPILOGUES:
            raise UsageError(f"unknown epilogue {self.epilogue!r}.", f"Use one of {', '.join(EPILOGUES)}.")

    @property
    def shape(self) -> dict[str, int]:
        return {"m": self.m, "n": self.n, "k": self.k}

    @property
    def label(self) -> str:
        tail = "" if self.epilogue == "none" else f" +{self.epilogue}"
        return f"gemm {self.m}x{self.n}x{self.k} {self.dtype} {self.layout}{tail}"

    @property
    def has_bias(self) -> bool:
        return self.epilogue.startswith("bias")

    @property
    def has_residual(self) -> bool:
        return self.epilogue.endswith("residual")

    @property
    def flops(self) -> int:
        """Multiply-adds count two; the epilogue's few operations per output are left out, as vendors do."""
        return 2 * self.m * self.n * self.k

    @property
    def bytes(self) -> int:
        """The fewest bytes moved: each input read once, the output written once."""
        size = get_dtype(self.dtype).storage_bytes
        elems = self.m * self.k + self.k * self.n + self.m * self.n
        if self.has_bias:
            elems += self.n
        if self.has_residual:
            elems += self.m * self.n
        return elems * size

    @property
    def shape_bucket(self) -> tuple[int, int, int]:
        """log2 of each dimension, rounded: shapes in one bucket warm-start each other."""
        return tuple(int(round(math.log2(v))) for v in (self.m, self.n, self.k))  # type: ignore[return-value]

    def as_dict(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class GemmInputs:
    """Inputs as float64 values exactly representable in the problem's dtype: numpy arrays, or CuPy arrays when made
    on a GPU (`make_inputs` with a CuPy generator).

    `b` is in the problem's layout: K×N for nn, N×K for nt. `bias` has N entries, `residual` is M×N.
    """

    a: Any
    b: Any
    bias: Any
    residual: Any


def make_inputs(problem: GemmProblem, rng) -> GemmInputs:
    """Fresh random inputs, uniform in [-1, 1] (never zeros), rounded to the dtype. `rng` is a numpy Generator, or a
    CuPy RandomState for inputs made on the current GPU."""
    def uniform(*shape: int):
        return representable(rng.uniform(-1.0, 1.0, size=shape), problem.dtype)

    b_shape = (problem.k, problem.n) if problem.layout == "nn" else (problem.n, problem.k)
    return GemmInputs(
        a=uniform(problem.m, problem.k),
        b=uniform(*b_shape),
        bias=uniform(problem.n) if problem.has_bias else None,
        residual=uniform(problem.m, problem.n) if problem.has_residual else None,
    )


def _erf(x):
    xp = array_module(x)
    if xp is np:
        from math import erf

        return np.vectorize(erf, otypes=[np.float64])(x)
    from cupyx.scipy.special import erf

    return erf(x)


def apply_epilogue(c, problem: GemmProblem, bias, residual):
    xp = array_module(c)
    if problem.has_bias:
        c = c + bias[None, :]
    if problem.epilogue == "bias_relu":
        c = xp.maximum(c, 0.0)
    elif problem.epilogue == "bias_silu":
        c = c / (1.0 + xp.exp(-c))
    elif problem.epilogue == "bias_gelu":
        c = 0.5 * c * (1.0 + _erf(c / math.sqrt(2.0)))
    if problem.has_residual:
        c = c + residual
    return c


def reference(problem: GemmProblem, inputs: GemmInputs):
    """C in float64, on the inputs' device (numpy's BLAS on the host, cuBLAS DGEMM for inputs on a GPU)."""
    xp = array_module(inputs.a)
    b = inputs.b if problem.layout == "nn" else inputs.b.T
    c = xp.matmul(xp.asarray(inputs.a, dtype=xp.float64), xp.asarray(b, dtype=xp.float64))
    return apply_epilogue(c, problem, inputs.bias, inputs.residual)
