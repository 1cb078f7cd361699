"""What the ops' CUDA tile spaces (gemm's engine, conv2d's implicit GEMM, lowrank-mlp's fused kernel) share: the
register limits a thread block's configuration is held to, the rule that explains a block that does not fit, and the
power of two a tile is capped at ("no larger than the size needs")."""

from __future__ import annotations

from typing import Any, Mapping

from tracea_cli.target import DeviceLimits

MAX_ACCUMULATOR_REGS = 128  # 32-bit registers of accumulators per thread; beyond this the kernels spill
MAX_THREAD_REGS = 255  # what one thread can address
ASSUMED_SMS = 132  # an H200's SMs, for picks on a target that does not say how many it has


def next_pow2(x: int) -> int:
    """The smallest power of two >= x (1 for x <= 1): the largest tile a size of x needs."""
    return 1 << max(0, (x - 1).bit_length())


def block_resources(t: Any, config: Mapping[str, Any], limits: DeviceLimits) -> str | None:
    """Why a block of this tiling (`threads`, `accumulator_regs`, `estimated_regs`, `smem_bytes`) does not fit the
    device, or None."""
    if t.threads > limits.max_threads_per_block:
        return f"{t.threads} threads per block exceed the device's {limits.max_threads_per_block}"
    if t.accumulator_regs > MAX_ACCUMULATOR_REGS:
        return (f"warp tile {config['warp_m']}x{config['warp_n']} needs {t.accumulator_regs} accumulator registers per "
                f"thread; more than {MAX_ACCUMULATOR_REGS} spill")
    if t.estimated_regs > MAX_THREAD_REGS:
        return f"about {t.estimated_regs} registers per thread exceed the {MAX_THREAD_REGS} a thread can have"
    if t.estimated_regs * t.threads > limits.registers_per_block:
        return (f"about {t.estimated_regs} registers for each of {t.threads} threads exceed the "
                f"{limits.registers_per_block} registers of a block")
    if t.smem_bytes > limits.max_shared_per_block_optin:
        return f"{t.smem_bytes} bytes of shared memory exceed the device's {limits.max_shared_per_block_optin} per block"
    return None
