"""Apple GPUs: reported on macOS (chip and GPU cores); elsewhere the Metal backend is not applicable.

Tracea has no Metal kernels yet: this is detection only, and untested on a Mac by its developers.
"""

from __future__ import annotations

import json
import platform
import subprocess
from dataclasses import dataclass
from typing import Callable


@dataclass(frozen=True)
class AppleReport:
    applicable: bool
    reason: str = ""  # why not applicable
    chip: str | None = None  # "Apple M2"
    gpu_cores: int | None = None
    memory_bytes: int | None = None


def probe_apple(*, system: str | None = None, run: Callable[..., subprocess.CompletedProcess] = subprocess.run) -> AppleReport:
    system = system or platform.system()
    if system != "Darwin":
        return AppleReport(applicable=False, reason=f"not macOS ({system}): the Metal backend is not applicable")
    try:
        out = run(["system_profiler", "SPDisplaysDataType", "SPHardwareDataType", "-json"],
                  capture_output=True, text=True, timeout=15).stdout
        data = json.loads(out or "{}")
    except (OSError, subprocess.SubprocessError, ValueError) as e:
        return AppleReport(applicable=True, reason=f"system_profiler failed ({e})")
    hardware = (data.get("SPHardwareDataType") or [{}])[0]
    displays = data.get("SPDisplaysDataType") or [{}]
    gpu = next((d for d in displays if "sppci_cores" in d), displays[0])
    chip = hardware.get("chip_type") or gpu.get("sppci_model")
    cores = gpu.get("sppci_cores")
    memory = str(hardware.get("physical_memory", ""))
    mem_bytes = int(float(memory.split()[0]) * 1024**3) if memory.endswith("GB") and memory.split()[0].replace(".", "").isdigit() else None
    return AppleReport(applicable=True, chip=chip, gpu_cores=int(cores) if str(cores).isdigit() else None,
                       memory_bytes=mem_bytes)
