"""The measured ceilings a benchmark is judged against, read from the capability profile's `measured` entries.

Each entry carries `device`, `metric`, `unit` and `median` (see `tracea doctor`). A compute ceiling is the best
achievable FLOP/s measured for the problem's dtype on the device; a bandwidth ceiling the best device-memory
bandwidth (host<->device transfers excluded). Where the profile has no such figure the ceiling is None and reports
say so: a percentage is never made up from a datasheet.
"""

from __future__ import annotations

import re
from typing import Any, Iterable, Mapping

from tracea_cli.bench.results import Ceiling

_PREFIX = {"": 1.0, "k": 1e3, "K": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "P": 1e15, "Ki": 1024.0, "Mi": 1024.0**2, "Gi": 1024.0**3, "Ti": 1024.0**4}
_TRANSFER_WORDS = ("h2d", "d2h", "host", "pcie", "to_device", "to_host", "htod", "dtoh", "latency")


def _get(entry: Any, name: str) -> Any:
    return entry.get(name) if isinstance(entry, Mapping) else getattr(entry, name, None)


def unit_scale(unit: str, base: str) -> float | None:
    """Multiplier from `unit` to `base` per second: unit_scale("TFLOP/s", "FLOP") == 1e12; None if not that kind."""
    m = re.fullmatch(r"\s*(Ki|Mi|Gi|Ti|[kKMGTP]?)" + re.escape(base) + r"\s*/\s*s\s*", unit or "")
    return _PREFIX[m.group(1)] if m else None


def _on_device(device: str, backend: str, device_index: int | None) -> bool:
    d = (device or "").lower()
    if backend == "cpu":
        return "cpu" in d or d in ("host", "")
    if "cpu" in d or d == "host":
        return False
    if device_index is None:
        return True
    digits = re.findall(r"\d+", d)
    return not digits or int(digits[-1]) == device_index


def _words(metric: str) -> set[str]:
    return set(re.split(r"[^a-z0-9]+", metric.lower()))


def ceiling_from_measured(entries: Iterable[Any], *, backend: str, dtype: str, device_index: int | None = None) -> Ceiling:
    """The best measured FLOP/s for `dtype` and the best device-memory bandwidth on the run's device."""
    best_flops: tuple[float, str] | None = None
    best_bytes: tuple[float, str] | None = None
    for e in entries:
        device, metric, unit, median = (_get(e, k) for k in ("device", "metric", "unit", "median"))
        if not isinstance(median, (int, float)) or median <= 0 or not metric or not _on_device(str(device), backend, device_index):
            continue
        words = _words(str(metric))
        flop_scale = unit_scale(str(unit), "FLOP")
        if flop_scale is not None:
            if dtype in words:
                value = float(median) * flop_scale
                if best_flops is None or value > best_flops[0]:
                    best_flops = (value, f"{device} {metric}")
            continue
        byte_scale = unit_scale(str(unit), "B")
        if byte_scale is not None and not any(w in str(metric).lower() for w in _TRANSFER_WORDS):
            value = float(median) * byte_scale
            if best_bytes is None or value > best_bytes[0]:
                best_bytes = (value, f"{device} {metric}")
    return Ceiling(
        flops_per_s=best_flops[0] if best_flops else None,
        bytes_per_s=best_bytes[0] if best_bytes else None,
        flops_source=best_flops[1] if best_flops else f"no {dtype} FLOP/s measured in the profile (run `tracea doctor`)",
        bytes_source=best_bytes[1] if best_bytes else "no memory bandwidth measured in the profile (run `tracea doctor`)",
    )
