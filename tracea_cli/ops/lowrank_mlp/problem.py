"""The low-rank MLP problem: y = act(x·U·V + bias) (+ residual).

    x        M × d_in                       the activations, row-major
    U        d_in × rank (layout nn)        or rank × d_in (nt: as torch.nn.Linear(d_in, rank).weight stores it)
    V        rank × d_out (layout nn)       or d_out × rank (nt: as torch.nn.Linear(rank, d_out).weight stores it)
    bias     d_out                          where `bias` is on (the default)
    residual M × d_out                      where `residual` is on
    y        M × d_out, row-major

    T = x·U (M × rank, the intermediate), y = act(T·V + bias) + residual

The intermediate is kept in fp32 (`intermediate="fp32"`) or rounded to the input dtype before the second product
(`intermediate="dtype"`, what two separate library calls do). For fp32 and fp64 problems the two are the same (T is
kept in the accumulator's type) and the problem says "dtype".
Rounding T to a dtype of unit roundoff u (fp16 2^-11, bf16 2^-8; fp32 and fp64 problems: no change) moves each
element of T·V by at most u·Σ_k |T[i,k]|·|V[k,j]|; docs/lowrank-mlp.md states what that means for the check.

This module holds the problem's identity, tensors, fresh inputs, float64 reference and work counts; nothing here
imports a backend. The reference works on numpy or CuPy arrays alike.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, Mapping

from tracea_cli.errors import UsageError
from tracea_cli.ops.base import Epilogue, Tensor, epilogues, find_epilogue
from tracea_cli.ops.dtypes import array_module, get_dtype, representable
from tracea_cli.ops.epilogue_math import apply_epilogue

OP_NAME = "lowrank-mlp"
DTYPES = ("fp32", "fp16", "bf16", "fp64")
ACTS = ("none", "relu", "silu", "gelu")
LAYOUTS = ("nn", "nt")
INTERMEDIATES = ("fp32", "dtype")
SIZES = ("m", "d_in", "rank", "d_out")
SHAPE_LIMIT = 1 << 20  # a single dimension above this is almost certainly a typo


def epilogue_name(bias: bool, act: str, residual: bool) -> str:
    """The epilogue's name from its parts, in the order they run: "bias_silu", "relu_residual", "none"."""
    parts = (["bias"] if bias else []) + ([act] if act != "none" else []) + (["residual"] if residual else [])
    return "_".join(parts) or "none"


#: every combination of bias, activation and residual; codes in this order (kernels, the C ABI)
EPILOGUES: tuple[Epilogue, ...] = epilogues(*(epilogue_name(b, a, r) for b in (False, True) for a in ACTS
                                              for r in (False, True)))


def _check_size(name: str, value: Any) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
        raise UsageError(f"{name} must be a positive whole number, got {value!r}.")
    if value > SHAPE_LIMIT:
        raise UsageError(f"{name} {value} is larger than {SHAPE_LIMIT}; check the size.")


def _check_choice(name: str, value: Any, choices: tuple[str, ...]) -> None:
    if value not in choices:
        raise UsageError(f"unknown {name} {value!r}.", f"Use one of {', '.join(choices)}.")


@dataclass(frozen=True)
class LowrankMlpProblem:
    m: int
    d_in: int
    rank: int
    d_out: int
    dtype: str = "fp32"
    act: str = "none"
    bias: bool = True
    residual: bool = False
    layout: str = "nn"
    intermediate: str = "dtype"
    op: str = OP_NAME

    def __post_init__(self) -> None:
        for name in SIZES:
            _check_size(name, getattr(self, name))
        if self.rank > min(self.d_in, self.d_out):
            smaller = "d_in" if self.d_in <= self.d_out else "d_out"
            raise UsageError(f"rank {self.rank} is larger than {smaller}={getattr(self, smaller)}: a low-rank layer "
                             f"needs rank <= min(d_in, d_out) = {min(self.d_in, self.d_out)}.",
                             "Use a smaller rank, or a plain gemm for a full-rank layer.")
        _check_choice("dtype", self.dtype, DTYPES)
        _check_choice("act", self.act, ACTS)
        _check_choice("layout", self.layout, LAYOUTS)
        _check_choice("intermediate", self.intermediate, INTERMEDIATES)
        for name in ("bias", "residual"):
            if not isinstance(getattr(self, name), bool):
                raise UsageError(f"{name} must be true or false, got {getattr(self, name)!r}.")
        if self.dtype in ("fp32", "fp64"):  # T is kept in the accumulator's type either way: one problem
            object.__setattr__(self, "intermediate", "dtype")

    # ---- identity --------------------------------------------------------------------------------------------------

    def key(self) -> dict[str, Any]:
        return {"m": self.m, "d_in": self.d_in, "rank": self.rank, "d_out": self.d_out, "act": self.act,
                "bias": self.bias, "residual": self.residual, "layout": self.layout,
                "intermediate": self.intermediate}

    def sizes(self) -> dict[str, int]:
        return {name: getattr(self, name) for name in SIZES}

    @classmethod
    def from_key(cls, dtype: str, key: Mapping[str, Any]) -> "LowrankMlpProblem":
        expected = {*SIZES, "act", "bias", "residual", "layout", "intermediate"}
        if set(key) != expected:
            raise UsageError(f"a lowrank-mlp problem has {', '.join(sorted(expected))}, not {', '.join(sorted(key))}.")
        return cls(**{name: key[name] for name in expected}, dtype=dtype)

    @property
    def label(self) -> str:
        tail = "" if self.epilogue == "none" else f" +{self.epilogue}"
        middle = " T:fp32" if self.intermediate == "fp32" else ""
        return (f"lowrank-mlp {self.m}x{self.d_in}->r{self.rank}->{self.d_out} {self.dtype} {self.layout}"
                f"{middle}{tail}")

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    # ---- what it computes ------------------------------------------------------------------------------------------

    @property
    def epilogue(self) -> str:
        return epilogue_name(self.bias, self.act, self.residual)

    @property
    def fused(self) -> Epilogue:
        return find_epilogue(EPILOGUES, self.epilogue)

    @property
    def u_shape(self) -> tuple[int, int]:
        return (self.d_in, self.rank) if self.layout == "nn" else (self.rank, self.d_in)

    @property
    def v_shape(self) -> tuple[int, int]:
        return (self.rank, self.d_out) if self.layout == "nn" else (self.d_out, self.rank)

    @property
    def rounds_intermediate(self) -> bool:
        """Whether T is rounded to a narrower type than the accumulator before the second product."""
        return self.intermediate == "dtype" and self.dtype in ("fp16", "bf16")

    def tensors(self) -> tuple[Tensor, ...]:
        out = [Tensor("x", (self.m, self.d_in)), Tensor("U", self.u_shape), Tensor("V", self.v_shape)]
        if self.bias:
            out.append(Tensor("bias", (self.d_out,)))
        if self.residual:
            out.append(Tensor("residual", (self.m, self.d_out)))
        return (*out, Tensor("y", (self.m, self.d_out), output=True))

    @property
    def flops(self) -> int:
        """2·M·rank·(d_in + d_out): the two products' multiply-adds; the epilogue is left out, as vendors do."""
        return 2 * self.m * self.rank * (self.d_in + self.d_out)

    @property
    def bytes(self) -> int:
        """The fewest bytes moved: x, U, V (and bias, residual) read once, y written once; T never leaves the chip."""
        elems = sum(_count(t.shape) for t in self.tensors())
        return elems * get_dtype(self.dtype).storage_bytes

    @property
    def floor_bytes(self) -> int:
        """x read and y written once (the weights are small beside them): the memory floor's bytes."""
        return (self.m * self.d_in + self.m * self.d_out) * get_dtype(self.dtype).storage_bytes


def _count(shape: tuple[int, ...]) -> int:
    n = 1
    for s in shape:
        n *= s
    return n


def check_operands(problem: LowrankMlpProblem, operands: Mapping[str, Any]) -> None:
    """Arrays given for a problem must have its tensors' shapes: a UsageError naming the first that does not (a
    residual of the wrong shape, a missing bias)."""
    for t in problem.tensors():
        array = operands.get(t.name)
        if array is None:
            raise UsageError(f"lowrank-mlp {problem.label} needs {t.name} of shape {t.shape}, and none was given.")
        if tuple(array.shape) != t.shape:
            raise UsageError(f"{t.name} has shape {tuple(array.shape)}, but {problem.label} needs {t.shape}.",
                             f"Give {t.name} as {' x '.join(map(str, t.shape))}.")


def make_inputs(problem: LowrankMlpProblem, rng) -> dict[str, Any]:
    """Fresh random inputs by tensor name, uniform in [-1, 1] (never zeros), rounded to the dtype. `rng` is a numpy
    Generator, or a CuPy RandomState for inputs made on the current GPU."""
    return {t.name: representable(rng.uniform(-1.0, 1.0, size=t.shape), problem.dtype)
            for t in problem.tensors() if not t.output}


def reference(problem: LowrankMlpProblem, inputs: Mapping[str, Any]) -> dict[str, Any]:
    """y in float64 on the inputs' device: both products in float64 (numpy's BLAS on the host, cuBLAS DGEMM for CuPy
    inputs), T never rounded (the exact math both intermediates are judged against), then the epilogue."""
    xp = array_module(inputs["x"])
    u = xp.asarray(inputs["U"], dtype=xp.float64)
    v = xp.asarray(inputs["V"], dtype=xp.float64)
    if problem.layout == "nt":
        u, v = u.T, v.T
    t = xp.matmul(xp.asarray(inputs["x"], dtype=xp.float64), u)
    y = xp.matmul(t, v)
    return {"y": apply_epilogue(y, problem.fused, inputs.get("bias"), inputs.get("residual"))}
