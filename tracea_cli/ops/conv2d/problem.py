"""The conv2d problem: Y = epilogue(conv(X, W)), forward cross-correlation as torch computes it.

Layouts: X is N×H×W×C (NHWC, channels last), the filter W is K×R×S×C (KRSC), Y is N×P×Q×K (NPQK), with

    P = (H + 2·pad_h − dilation_h·(R − 1) − 1) // stride_h + 1      (Q likewise from W, S and the _w values)
    Y[n, p, q, k] = Σ_{r,s,c} X[n, p·stride_h − pad_h + r·dilation_h, q·stride_w − pad_w + s·dilation_w, c] · W[k, r, s, c]

with X zero outside its H×W. As a GEMM ("implicit GEMM"): M = N·P·Q rows (output pixels), N_gemm = K columns, a
reduction over R·S·C taps; Y is that M×K matrix row-major. The epilogue adds bias[k] per output channel, applies an
activation, adds a residual of Y's shape, and applies a second activation (bias_residual_relu).

This module holds the problem's identity, tensors, fresh inputs, float64 reference and work counts; nothing here
imports a backend. The reference works on numpy or CuPy arrays alike (im2col + a float64 matmul in bounded chunks).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, Mapping

from tracea_cli.errors import UsageError
from tracea_cli.ops.base import Epilogue, Tensor, epilogues, find_epilogue
from tracea_cli.ops.dtypes import array_module, get_dtype, representable
from tracea_cli.ops.epilogue_math import apply_epilogue

#: codes in this order (kernels, a later C ABI)
EPILOGUES: tuple[Epilogue, ...] = epilogues("none", "bias", "bias_relu", "bias_silu", "bias_residual",
                                            "bias_residual_relu")
EPILOGUE_NAMES = tuple(e.name for e in EPILOGUES)
SIZES = ("n", "h", "w", "c", "k", "r", "s")
GEOMETRY = ("stride_h", "stride_w", "pad_h", "pad_w", "dilation_h", "dilation_w")
SHAPE_LIMIT = 1 << 16  # a single dimension above this is almost certainly a typo
REFERENCE_CHUNK_BYTES = 64 << 20  # the reference's unfolded columns stay below this, whatever the problem's size


def _whole(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _check(name: str, value: Any, *, least: int, limit: int = SHAPE_LIMIT) -> None:
    if not _whole(value) or value < least:
        kind = "a positive whole number" if least == 1 else "a whole number, 0 or more"
        raise UsageError(f"{name} must be {kind}, got {value!r}.")
    if value > limit:
        raise UsageError(f"{name} {value} is larger than {limit}; check the size.")


def output_extent(size: int, pad: int, filter_size: int, dilation: int, stride: int) -> int:
    """Output positions along one axis (may be <= 0 for an impossible geometry)."""
    return (size + 2 * pad - dilation * (filter_size - 1) - 1) // stride + 1


@dataclass(frozen=True)
class Conv2dProblem:
    n: int
    h: int
    w: int
    c: int
    k: int
    r: int
    s: int
    stride_h: int = 1
    stride_w: int = 1
    pad_h: int = 0
    pad_w: int = 0
    dilation_h: int = 1
    dilation_w: int = 1
    groups: int = 1
    dtype: str = "fp32"
    epilogue: str = "none"
    op: str = "conv2d"

    def __post_init__(self) -> None:
        for name in SIZES:
            _check(name, getattr(self, name), least=1)
        for name in ("stride_h", "stride_w", "dilation_h", "dilation_w"):
            _check(name, getattr(self, name), least=1, limit=1024)
        for name in ("pad_h", "pad_w"):
            _check(name, getattr(self, name), least=0, limit=1024)
        if self.groups != 1:
            raise UsageError(f"conv2d runs groups=1 only, not groups={self.groups!r} (grouped and depthwise "
                             "convolutions are not supported yet).",
                             "Use groups=1, or run each group as its own conv2d.")
        get_dtype(self.dtype)
        find_epilogue(EPILOGUES, self.epilogue)
        for axis, size, pad, f, dil, size_name, f_name in (("h", self.h, self.pad_h, self.r, self.dilation_h, "h", "r"),
                                                            ("w", self.w, self.pad_w, self.s, self.dilation_w, "w", "s")):
            span = dil * (f - 1) + 1
            if span > size + 2 * pad:
                rows = "rows" if axis == "h" else "columns"
                raise UsageError(
                    f"the filter spans {span} {rows} ({f_name}={f}, dilation_{axis}={dil}) but the padded input has "
                    f"only {size + 2 * pad} ({size_name}={size}, pad_{axis}={pad}), so the output would be empty.",
                    f"Make {size_name} or pad_{axis} larger, or {f_name} or dilation_{axis} smaller.")

    # ---- identity --------------------------------------------------------------------------------------------------

    def key(self) -> dict[str, Any]:
        return {**{name: getattr(self, name) for name in SIZES + GEOMETRY}, "epilogue": self.epilogue}

    def sizes(self) -> dict[str, int]:
        return {name: getattr(self, name) for name in SIZES}

    @classmethod
    def from_key(cls, dtype: str, key: Mapping[str, Any]) -> "Conv2dProblem":
        expected = {*SIZES, *GEOMETRY, "epilogue"}
        if set(key) != expected:
            raise UsageError(f"a conv2d problem has {', '.join(sorted(expected))}, not {', '.join(sorted(key))}.")
        return cls(**{name: key[name] for name in expected}, dtype=dtype)

    @property
    def label(self) -> str:
        geometry = []
        if (self.stride_h, self.stride_w) != (1, 1):
            geometry.append(f"stride {_pair(self.stride_h, self.stride_w)}")
        if (self.pad_h, self.pad_w) != (0, 0):
            geometry.append(f"pad {_pair(self.pad_h, self.pad_w)}")
        if (self.dilation_h, self.dilation_w) != (1, 1):
            geometry.append(f"dilation {_pair(self.dilation_h, self.dilation_w)}")
        tail = "" if self.epilogue == "none" else f" +{self.epilogue}"
        return (f"conv2d n{self.n} {self.c}->{self.k} @{self.h}x{self.w} {self.r}x{self.s}"
                f"{''.join(' ' + g for g in geometry)} {self.dtype}{tail}")

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    # ---- what it computes ------------------------------------------------------------------------------------------

    @property
    def p(self) -> int:
        return output_extent(self.h, self.pad_h, self.r, self.dilation_h, self.stride_h)

    @property
    def q(self) -> int:
        return output_extent(self.w, self.pad_w, self.s, self.dilation_w, self.stride_w)

    @property
    def gemm_m(self) -> int:
        """Rows of the implicit GEMM: output pixels N·P·Q."""
        return self.n * self.p * self.q

    @property
    def taps(self) -> int:
        """The reduction of the implicit GEMM: R·S·C."""
        return self.r * self.s * self.c

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
    def out_shape(self) -> tuple[int, int, int, int]:
        return (self.n, self.p, self.q, self.k)

    def tensors(self) -> tuple[Tensor, ...]:
        out = [Tensor("X", (self.n, self.h, self.w, self.c)), Tensor("W", (self.k, self.r, self.s, self.c))]
        if self.has_bias:
            out.append(Tensor("bias", (self.k,)))
        if self.has_residual:
            out.append(Tensor("residual", self.out_shape))
        return (*out, Tensor("Y", self.out_shape, output=True))

    @property
    def flops(self) -> int:
        """2·N·P·Q·K·R·S·C: every tap counts, padded ones included, as vendors count; the epilogue is left out."""
        return 2 * self.gemm_m * self.k * self.taps

    @property
    def bytes(self) -> int:
        """The fewest bytes moved: X, W (and bias, residual) read once, Y written once."""
        elems = sum(_count(t.shape) for t in self.tensors())
        return elems * get_dtype(self.dtype).storage_bytes


def _pair(a: int, b: int) -> str:
    return str(a) if a == b else f"{a}x{b}"


def _count(shape: tuple[int, ...]) -> int:
    n = 1
    for s in shape:
        n *= s
    return n


def make_inputs(problem: Conv2dProblem, rng) -> dict[str, Any]:
    """Fresh random inputs by tensor name, uniform in [-1, 1] (never zeros), rounded to the dtype. `rng` is a numpy
    Generator, or a CuPy RandomState for inputs made on the current GPU."""
    return {t.name: representable(rng.uniform(-1.0, 1.0, size=t.shape), problem.dtype)
            for t in problem.tensors() if not t.output}


def reference(problem: Conv2dProblem, inputs: Mapping[str, Any], *,
              chunk_bytes: int = REFERENCE_CHUNK_BYTES) -> dict[str, Any]:
    """Y in float64 on the inputs' device: the input zero-padded once, then per chunk of output pixels its unfolded
    columns (im2col, at most `chunk_bytes`) times the filter as a (R·S·C)×K matrix (numpy's BLAS on the host, cuBLAS
    DGEMM for CuPy inputs), then the epilogue."""
    p = problem
    xp = array_module(inputs["X"])
    x = xp.asarray(inputs["X"], dtype=xp.float64)
    filters = xp.asarray(inputs["W"], dtype=xp.float64).reshape(p.k, p.taps).T  # (R·S·C) × K
    padded = xp.zeros((p.n, p.h + 2 * p.pad_h, p.w + 2 * p.pad_w, p.c), dtype=xp.float64)
    padded[:, p.pad_h:p.pad_h + p.h, p.pad_w:p.pad_w + p.w, :] = x
    y = xp.empty(p.out_shape, dtype=xp.float64)
    row_bytes = p.taps * 8
    rows = max(1, chunk_bytes // row_bytes)  # output pixels per chunk
    per_image = p.p * p.q
    # whole images per chunk when one fits, else output rows of one image
    n_step, p_step = (rows // per_image, p.p) if rows >= per_image else (1, max(1, rows // p.q))
    for n0 in range(0, p.n, n_step):
        n1 = min(p.n, n0 + n_step)
        for p0 in range(0, p.p, p_step):
            p1 = min(p.p, p0 + p_step)
            cols = xp.empty((n1 - n0, p1 - p0, p.q, p.r, p.s, p.c), dtype=xp.float64)
            for r in range(p.r):
                h0 = p0 * p.stride_h + r * p.dilation_h
                h_rows = slice(h0, h0 + (p1 - p0 - 1) * p.stride_h + 1, p.stride_h)
                for s in range(p.s):
                    w0 = s * p.dilation_w
                    w_cols = slice(w0, w0 + (p.q - 1) * p.stride_w + 1, p.stride_w)
                    cols[:, :, :, r, s, :] = padded[n0:n1, h_rows, w_cols, :]
            y[n0:n1, p0:p1] = xp.matmul(cols.reshape(-1, p.taps), filters).reshape(n1 - n0, p1 - p0, p.q, p.k)
    return {"Y": apply_epilogue(y, p.fused, inputs.get("bias"), inputs.get("residual"))}
