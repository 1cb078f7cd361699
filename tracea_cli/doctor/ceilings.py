"""The measured ceilings a benchmark is judged against, read from the capability profile (`tracea doctor`).

The compute ceiling is the profile's best `gemm_flops` measurement for the problem's dtype on the run's device (on
the CPU, the best over the thread counts measured); the bandwidth ceiling its best `memory_bandwidth`. Where the profile has no such
figure the ceiling is None and reports say so: a percentage is never made up from a datasheet. A dtype that also runs
at its accuracy as n products of another (fp32 as 3xTF32 on tensor cores) is bounded by that one's best / n too: the
higher of the two is its ceiling.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from tracea_cli.ops.dtypes import DTYPES

FLOPS_METRIC = "gemm_flops"
BANDWIDTH_METRIC = "memory_bandwidth"
_PREFIX = {"": 1.0, "k": 1e3, "K": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "P": 1e15, "Ki": 1024.0, "Mi": 1024.0**2, "Gi": 1024.0**3, "Ti": 1024.0**4}


@dataclass(frozen=True)
class MeasuredCeiling:
    """The best measured compute and bandwidth figures for one dtype on one device; None where none was measured,
    with the source of each (the profile entry, or why there is none)."""

    flops_per_s: float | None
    bytes_per_s: float | None
    flops_source: str
    bytes_source: str


def unit_scale(unit: str, base: str) -> float | None:
    """Multiplier from `unit` to `base` per second: unit_scale("TFLOP/s", "FLOP") == 1e12; None if not that kind."""
    m = re.fullmatch(r"\s*(Ki|Mi|Gi|Ti|[kKMGTP]?)" + re.escape(base) + r"\s*/\s*s\s*", unit or "")
    return _PREFIX[m.group(1)] if m else None


def profile_device(backend: str, device_index: int | None) -> str:
    """The profile's name for the device a run uses: "cpu" or "cuda:N"."""
    return "cpu" if backend == "cpu" else f"cuda:{device_index or 0}"


def _rate(measurement: Any, base: str) -> float | None:
    if measurement is None:
        return None
    scale = unit_scale(measurement.unit, base)
    if scale is None or measurement.median is None or not measurement.median > 0:
        return None
    return float(measurement.median) * scale


def _best(profile: Any, device: str, metric: str, dtype: str | None, base: str) -> tuple[Any, float | None]:
    """The highest rate measured for (device, metric, dtype), over every thread count: the achievable ceiling."""
    found = [(m, _rate(m, base)) for m in profile.measured if m.device == device and m.metric == metric and m.dtype == dtype]
    found = [(m, r) for m, r in found if r is not None]
    return max(found, key=lambda mr: mr[1]) if found else (None, None)


def ceiling_from_profile(profile: Any, *, backend: str, dtype: str, device_index: int | None = None) -> MeasuredCeiling:
    """The best measured GEMM FLOP/s for `dtype` and the best memory bandwidth of the run's device; where the dtype
    also runs as n products of another on this backend (ops/dtypes.DType.also_as_on: fp32 as 3xTF32 on cuda), that
    dtype's best / n where it is higher (see the module's docstring)."""
    also_as = DTYPES[dtype].also_as_on(backend) if dtype in DTYPES else None
    device = profile_device(backend, device_index)
    flops_m, flops = _best(profile, device, FLOPS_METRIC, dtype, "FLOP")
    bytes_m, bw = _best(profile, device, BANDWIDTH_METRIC, None, "B")
    where = "the profile" if getattr(profile, "measured_created", None) else "the profile (no full `tracea doctor` run yet)"

    def source(m: Any, value: float | None, what: str) -> str:
        if value is None:
            return f"none: no {what} on {device} in {where}"
        n = getattr(m, "threads", None)
        threads = f", {n} thread{'s' if n != 1 else ''}" if n else ""
        return f"{m.device} {m.metric}{' ' + m.dtype if m.dtype else ''}{threads} (tracea doctor, {getattr(m, 'created', '') or 'date unknown'})"

    flops_source = source(flops_m, flops, f"{dtype} {FLOPS_METRIC}")
    if also_as is not None:
        other, n = also_as
        other_m, other_flops = _best(profile, device, FLOPS_METRIC, other, "FLOP")
        if other_flops is not None and (flops is None or other_flops / n > flops):
            own = f" (its own: {flops_source})" if flops_m is not None else ""
            flops = other_flops / n
            flops_source = f"{source(other_m, other_flops, other)} / {n}: {dtype} as {n} {other} products{own}"
    return MeasuredCeiling(
        flops_per_s=flops,
        bytes_per_s=bw,
        flops_source=flops_source,
        bytes_source=source(bytes_m, bw, BANDWIDTH_METRIC),
    )
