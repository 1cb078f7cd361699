"""Where kernels are built and run: a `Target` (backend, device class, architecture, limits, device), the
`DeviceLimits` kernels are built against, and the per-architecture table for building for GPUs that are not here.

Ground floor: ops read targets to build their search spaces, backends run on them, the doctor makes them from the
capability profile. Data only; nothing here touches a device.

The architecture table's figures are from the CUDA C++ Programming Guide, "Technical Specifications per Compute
Capability" (shared memory per SM and per block with opt-in, registers, threads). SM count and L2 size belong to a
product, not an architecture, so they are None there; the capability profile supplies them for a present device.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

from tracea_cli.errors import UsageError

KIB = 1024


@dataclass(frozen=True)
class DeviceLimits:
    """The limits kernels are built against (from the CUDA runtime, or the per-architecture table)."""

    arch: str  # "sm_90"
    compute_capability: tuple[int, int]
    max_threads_per_block: int
    max_threads_per_sm: int
    max_shared_per_block: int  # bytes without opting in (48 KiB)
    max_shared_per_block_optin: int  # bytes with cudaFuncAttributeMaxDynamicSharedMemorySize
    max_shared_per_sm: int
    registers_per_sm: int
    registers_per_block: int
    warp_size: int = 32
    sm_count: int | None = None  # None when building for an absent GPU
    l2_bytes: int | None = None

    def as_dict(self) -> dict[str, Any]:
        d = dict(self.__dict__)
        d["compute_capability"] = list(self.compute_capability)
        return d

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "DeviceLimits":
        d = dict(d)
        d["compute_capability"] = tuple(d["compute_capability"])
        return cls(**{k: v for k, v in d.items() if k in cls.__dataclass_fields__})


@dataclass(frozen=True)
class Target:
    """Where kernels are built and run: a backend, and for CUDA an architecture, its limits and (if present) a device."""

    backend: str  # "cuda" | "cpu" | "rocm"
    device_class: str  # what makes two devices interchangeable; part of every cache key
    arch: str | None = None  # "sm_90", "sm_90a"; None for the CPU
    limits: DeviceLimits | None = None
    device_index: int | None = None  # CUDA ordinal as this process sees it; None when building only
    threads: int | None = None  # CPU threads

    def cuda_limits(self) -> DeviceLimits:
        """The limits of a CUDA target: its own, else its architecture's from the table."""
        if self.limits is not None:
            return self.limits
        if self.arch is None:
            raise ValueError("a CUDA target needs an architecture or limits")
        return limits_for(self.arch)


def _limits(arch: str, cc: tuple[int, int], smem_sm_kib: int, smem_block_kib: int, threads_sm: int) -> DeviceLimits:
    return DeviceLimits(
        arch=arch,
        compute_capability=cc,
        max_threads_per_block=1024,
        max_threads_per_sm=threads_sm,
        max_shared_per_block=48 * KIB,
        max_shared_per_block_optin=smem_block_kib * KIB,
        max_shared_per_sm=smem_sm_kib * KIB,
        registers_per_sm=64 * KIB,
        registers_per_block=64 * KIB,
    )


ARCH_LIMITS: dict[str, DeviceLimits] = {
    "sm_75": _limits("sm_75", (7, 5), 64, 64, 1024),
    "sm_80": _limits("sm_80", (8, 0), 164, 163, 2048),
    "sm_86": _limits("sm_86", (8, 6), 100, 99, 1536),
    "sm_87": _limits("sm_87", (8, 7), 164, 163, 2048),
    "sm_89": _limits("sm_89", (8, 9), 100, 99, 1536),
    "sm_90": _limits("sm_90", (9, 0), 228, 227, 2048),
    "sm_90a": _limits("sm_90a", (9, 0), 228, 227, 2048),
    "sm_100": _limits("sm_100", (10, 0), 228, 227, 2048),
    "sm_120": _limits("sm_120", (12, 0), 100, 99, 1536),
}


def arch_of(cc: tuple[int, int]) -> str:
    return f"sm_{cc[0]}{cc[1]}"


def base_arch(arch: str) -> str:
    """"sm_90a" -> "sm_90": the family an architecture-specific target belongs to."""
    return arch[:-1] if arch.endswith("a") else arch


def limits_for(arch: str) -> DeviceLimits:
    try:
        return ARCH_LIMITS[arch]
    except KeyError:
        raise UsageError(
            f"no limits are known for architecture {arch!r}.", f"Use one of {', '.join(ARCH_LIMITS)}."
        ) from None


def arch_target(arch: str, device_class: str | None = None) -> Target:
    """A CUDA target for building for `arch` without its GPU (export, import validation): the table's limits."""
    return Target(backend="cuda", device_class=device_class or f"any {arch}", arch=arch, limits=limits_for(arch))
