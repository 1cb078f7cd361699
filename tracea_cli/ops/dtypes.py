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


DTYPES: dict[str, DType] = {
    "fp64": DType("fp64", 8, 1e-12, "fp64"),
    "fp32": DType("fp32", 4, 1e-5, "fp32"),
    "tf32": DType("tf32", 4, 2e-3, "fp32"),
    "fp16": DType("fp16", 2, 5e-3, "fp32"),
    "bf16": DType("bf16", 2, 2e-2, "fp32"),
}


def get_dtype(name: str) -> DType:
    try:
        return DTYPES[name]
    except KeyError:
        raise UsageError(f"unknown dtype {name!r}.", f"Use one of {', '.join(DTYPES)}.") from None


def round_to_bf16(x: np.ndarray) -> np.ndarray:
    """Round float32 values to the nearest bfloat16 (ties to even); returned as float32."""
    bits = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32)
    rounded = (bits + np.uint32(0x7FFF) + ((bits >> np.uint32(16)) & np.uint32(1))) & np.uint32(0xFFFF0000)
    return rounded.view(np.float32)


def bf16_bits(x: np.ndarray) -> np.ndarray:
    """bfloat16 bit patterns (uint16) of float32 values already rounded to bfloat16."""
    return (np.ascontiguousarray(x, dtype=np.float32).view(np.uint32) >> np.uint32(16)).astype(np.uint16)


def bf16_from_bits(bits: np.ndarray) -> np.ndarray:
    return (bits.astype(np.uint32) << np.uint32(16)).view(np.float32)


def to_storage(values: np.ndarray, dtype: str) -> np.ndarray:
    """Host array in the storage format a kernel reads: fp16 -> float16, bf16 -> uint16 bit patterns, tf32 -> float32."""
    if dtype == "fp64":
        return np.ascontiguousarray(values, dtype=np.float64)
    if dtype in ("fp32", "tf32"):
        return np.ascontiguousarray(values, dtype=np.float32)
    if dtype == "fp16":
        return np.ascontiguousarray(values, dtype=np.float16)
    if dtype == "bf16":
        return bf16_bits(round_to_bf16(np.asarray(values, dtype=np.float32)))
    raise UsageError(f"unknown dtype {dtype!r}.")


def from_storage(array: np.ndarray, dtype: str) -> np.ndarray:
    """float64 values of a host array in storage format."""
    if dtype == "bf16":
        return bf16_from_bits(array).astype(np.float64)
    return np.asarray(array, dtype=np.float64)


def representable(values: np.ndarray, dtype: str) -> np.ndarray:
    """float64 values rounded to what the storage format holds (the reference is computed on these)."""
    return from_storage(to_storage(values, dtype), dtype)
