"""Element types: storage sizes, host representation, rounding, and the correctness bound of each."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tracea_cli.errors import UsageError


@dataclass(frozen=True)
class DType:
    name: str  # fp32 | tf32 | fp16 | bf16 | fp64
    storage_bytes: int  # bytes per element in memory (tf32 is stored as fp32)
    bound: float  # largest relative Frobenius error that passes
    accumulate: str  # what the kernel accumulates in
    # (another dtype, n): also computed at this dtype's accuracy as n products of that one on tensor cores (fp32 as
    # 3xTF32, docs/engine.md), so its compute ceiling on a GPU is that dtype's / n where higher
    also_as: tuple[str, int] | None = None

    def also_as_on(self, backend: str) -> tuple[str, int] | None:
        """`also_as` where the backend has the tensor cores it needs (cuda), else None."""
        return self.also_as if backend == "cuda" else None


DTYPES: dict[str, DType] = {
    "fp64": DType("fp64", 8, 1e-12, "fp64"),
    "fp32": DType("fp32", 4, 1e-5, "fp32", also_as=("tf32", 3)),
    "tf32": DType("tf32", 4, 2e-3, "fp32"),
    "fp16": DType("fp16", 2, 5e-3, "fp32"),
    "bf16": DType("bf16", 2, 2e-2, "fp32"),
}


def get_dtype(name: str) -> DType:
    try:
        return DTYPES[name]
    except KeyError:
        raise UsageError(f"unknown dtype {name!r}.", f"Use one of {', '.join(DTYPES)}.") from None


def array_module(x):
    """numpy, or CuPy for a CuPy array: the conversions below work on host and device arrays alike."""
    if type(x).__module__.split(".")[0] == "cupy":
        import cupy

        return cupy
    return np


def round_to_bf16(x):
    """Round float32 values to the nearest bfloat16 (ties to even); returned as float32."""
    xp = array_module(x)
    bits = xp.ascontiguousarray(x, dtype=xp.float32).view(xp.uint32)
    rounded = (bits + np.uint32(0x7FFF) + ((bits >> np.uint32(16)) & np.uint32(1))) & np.uint32(0xFFFF0000)
    return rounded.view(xp.float32)


def bf16_bits(x):
    """bfloat16 bit patterns (uint16) of float32 values already rounded to bfloat16."""
    xp = array_module(x)
    return (xp.ascontiguousarray(x, dtype=xp.float32).view(xp.uint32) >> np.uint32(16)).astype(xp.uint16)


def bf16_from_bits(bits):
    xp = array_module(bits)
    return (bits.astype(xp.uint32) << np.uint32(16)).view(xp.float32)


def to_storage(values, dtype: str):
    """Array in the storage format a kernel reads: fp16 -> float16, bf16 -> uint16 bit patterns, tf32 -> float32.
    Host arrays stay on the host, CuPy arrays on their device."""
    xp = array_module(values)
    if dtype == "fp64":
        return xp.ascontiguousarray(values, dtype=xp.float64)
    if dtype in ("fp32", "tf32"):
        return xp.ascontiguousarray(values, dtype=xp.float32)
    if dtype == "fp16":
        return xp.ascontiguousarray(values, dtype=xp.float16)
    if dtype == "bf16":
        return bf16_bits(round_to_bf16(xp.asarray(values, dtype=xp.float32)))
    raise UsageError(f"unknown dtype {dtype!r}.")


def from_storage(array, dtype: str):
    """float64 values of an array in storage format (on the array's own device)."""
    xp = array_module(array)
    if dtype == "bf16":
        return bf16_from_bits(array).astype(xp.float64)
    return xp.asarray(array, dtype=xp.float64)


def representable(values, dtype: str):
    """float64 values rounded to what the storage format holds (the reference is computed on these)."""
    return from_storage(to_storage(values, dtype), dtype)
