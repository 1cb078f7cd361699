"""Per-architecture CUDA limits, for building kernels for GPUs that are not present.

Figures from the CUDA C++ Programming Guide, "Technical Specifications per Compute Capability" (shared memory per
SM and per block with opt-in, registers, threads). SM count and L2 size belong to a product, not an architecture,
so they are None here; the capability profile supplies them for a present device.
"""

from __future__ import annotations

from tracea_cli.backends.base import DeviceLimits
from tracea_cli.errors import UsageError

KIB = 1024


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
