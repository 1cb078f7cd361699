"""The GEMM problem: C = epilogue(A·B) with A M×K, B K×N (layout nn) or N×K (nt, as torch.nn.Linear stores weights);
its cache identity, tensors, inputs, float64 reference and work counts."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, Mapping

from tracea_cli.errors import UsageError
from tracea_cli.ops.base import Epilogue, Tensor, epilogues, find_epilogue
from tracea_cli.ops.dtypes import array_module, get_dtype, representable
from tracea_cli.ops.epilogue_math import apply_epilogue

LAYOUTS = ("nn", "nt")
#: bias: C += bias[n]; then an activation; residual: C += R[m, n] last. Codes in this order (kernels, the C ABI).
EPILOGUES: tuple[Epilogue, ...] = epilogues("none", "bias", "bias_relu", "bias_silu", "bias_gelu", "bias_residual")
EPILOGUE_NAMES = tuple(e.name for e in EPILOGUES)
SIZES = ("m", "n", "k")
SHAPE_LIMIT = 1 << 20  # a single dimension above this is almost certainly a typo


def check_size(name: str, value: Any, limit: int = SHAPE_LIMIT) -> None:
    """A problem size must be a positive whole number below `limit` (a larger one is almost certainly a typo)."""
    if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
        raise UsageError(f"{name} must be a positive whole number, got {value!r}.")
    if value > limit:
        raise UsageError(f"{name} {value} is larger than {limit}; check the size.")


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
        for name in SIZES:
            check_size(name, getattr(self, name))
        get_dtype(self.dtype)
        if self.layout not in LAYOUTS:
            raise UsageError(f"unknown layout {self.layout!r}.", f"Use one of {', '.join(LAYOUTS)}.")
        find_epilogue(EPILOGUES, self.epilogue)

    # ---- identity --------------------------------------------------------------------------------------------------

    def key(self) -> dict[str, Any]:
        return {"m": self.m, "n": self.n, "k": self.k, "layout": self.layout, "epilogue": self.epilogue}

    def sizes(self) -> dict[str, int]:
        return {"m": self.m, "n": self.n, "k": self.k}

    @classmethod
    def from_key(cls, dtype: str, key: Mapping[str, Any]) -> "GemmProblem":
        if set(key) != {"m", "n", "k", "layout", "epilogue"}:
            raise UsageError(f"a gemm problem has m, n, k, layout and epilogue, not {', '.join(sorted(key))}.")
        return cls(key["m"], key["n"], key["k"], dtype, key["layout"], key["epilogue"])

    @property
    def label(self) -> str:
        tail = "" if self.epilogue == "none" else f" +{self.epilogue}"
        return f"gemm {self.m}x{self.n}x{self.k} {self.dtype} {self.layout}{tail}"

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    # ---- what it computes ------------------------------------------------------------------------------------------

    @property
    def fused(self) -> Epilogue:
        return find_epilogue(EPILOGUES, self.epilogue)

    @property
    def has_bias(self) -> bool:
        return self.fused.bias

    @property
    def has_residual(self) -> bool:
        return self.fused.residual

    @property
    def b_shape(self) -> tuple[int, int]:
        return (self.k, self.n) if self.layout == "nn" else (self.n, self.k)

    def tensors(self) -> tuple[Tensor, ...]:
        out = [Tensor("A", (self.m, self.k)), Tensor("B", self.b_shape)]
        if self.has_bias:
            out.append(Tensor("bias", (self.n,)))
        if self.has_residual:
            out.append(Tensor("residual", (self.m, self.n)))
        return (*out, Tensor("C", (self.m, self.n), output=True))

    @property
    def flops(self) -> int:
        """Multiply-adds count two; the epilogue's few operations per output are left out, as vendors do."""
        return 2 * self.m * self.n * self.k

    @property
    def bytes(self) -> int:
        """The fewest bytes moved: each input read once, the output written once."""
        elems = sum(_count(t.shape) for t in self.tensors())
        return elems * get_dtype(self.dtype).storage_bytes


def _count(shape: tuple[int, ...]) -> int:
    n = 1
    for s in shape:
        n *= s
    return n


def make_inputs(problem: GemmProblem, rng) -> dict[str, Any]:
    """Fresh random inputs by tensor name, uniform in [-1, 1] (never zeros), rounded to the dtype. `rng` is a numpy
    Generator, or a CuPy RandomState for inputs made on the current GPU."""
    return {t.name: representable(rng.uniform(-1.0, 1.0, size=t.shape), problem.dtype)
            for t in problem.tensors() if not t.output}


def reference(problem: GemmProblem, inputs: Mapping[str, Any]) -> dict[str, Any]:
    """C in float64, on the inputs' device (numpy's BLAS on the host, cuBLAS DGEMM for inputs on a GPU)."""
    xp = array_module(inputs["A"])
    b = inputs["B"] if problem.layout == "nn" else inputs["B"].T
    c = xp.matmul(xp.asarray(inputs["A"], dtype=xp.float64), xp.asarray(b, dtype=xp.float64))
    return {"C": apply_epilogue(c, problem.fused, inputs.get("bias"), inputs.get("residual"))}
