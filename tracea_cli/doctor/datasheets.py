"""Datasheet profiles (`profiles/devices/*.json`): vendors' figures for known devices, each with its source.

A local device is matched by its PCI id first (exact vendor:device), then by the name its driver reports
(normalised: case, spaces and punctuation do not matter, but every word does, so "NVIDIA H200 NVL" never matches
the H200 SXM). The figures are dense peaks (no structured sparsity); where a vendor page quotes sparse figures the
file says so in the figure's note.
"""

from __future__ import annotations

import functools
import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

from tracea_cli.resources import profiles_dir

SCHEMA_VERSION = 1


@dataclass(frozen=True)
class Figure:
    value: float
    unit: str
    source: str
    note: str = ""


@dataclass(frozen=True)
class Datasheet:
    key: str  # file name without .json
    name: str
    vendor: str  # nvidia | amd | apple
    kind: str  # gpu | soc (a system on a chip: the memory figures are shared by its CPU and GPU)
    arch: str | None
    pci_ids: tuple[str, ...]  # "10de:2335"
    names: tuple[str, ...]  # names as drivers report them
    memory_bandwidth: Figure | None
    memory: Figure | None
    compute_units: Figure | None  # SMs, CUs or GPU cores
    peak_flops: Mapping[str, Figure] = field(default_factory=dict)  # dtype -> FLOP/s (OP/s for int8)
    notes: str = ""

    def figure(self, metric: str, dtype: str | None = None) -> Figure | None:
        """The datasheet figure comparable with a measured `metric` (None when the vendor gives none)."""
        if metric == "memory_bandwidth":
            return self.memory_bandwidth
        if metric == "gemm_flops" and dtype is not None:
            return self.peak_flops.get(dtype)
        return None


def normalise_name(name: str) -> str:
    return " ".join(re.sub(r"[^0-9a-z]+", " ", name.lower()).split())


def normalise_pci_id(value: str | int | None, vendor: int | None = None) -> str | None:
    """"10DE:2335", "0x2335" with vendor 0x10de, or NVML's 0x233510DE -> "10de:2335"."""
    if value is None:
        return None
    if isinstance(value, int):
        if vendor is not None:
            return f"{vendor:04x}:{value & 0xFFFF:04x}"
        return f"{value & 0xFFFF:04x}:{(value >> 16) & 0xFFFF:04x}"  # NVML packs device << 16 | vendor
    text = value.strip().lower()
    if ":" in text:
        v, d = text.split(":", 1)
        return f"{int(v, 16):04x}:{int(d, 16):04x}"
    n = int(text, 16)
    return normalise_pci_id(n, vendor)


def _figure(d: Mapping[str, Any] | None) -> Figure | None:
    if not d:
        return None
    return Figure(value=float(d["value"]), unit=str(d["unit"]), source=str(d["source"]), note=str(d.get("note", "")))


def parse_datasheet(key: str, d: Mapping[str, Any]) -> Datasheet:
    if d.get("schema_version") != SCHEMA_VERSION:
        raise ValueError(f"datasheet {key}: schema_version {d.get('schema_version')!r}, expected {SCHEMA_VERSION}")
    match = d.get("match", {})
    return Datasheet(
        key=key,
        name=d["name"],
        vendor=d["vendor"],
        kind=d.get("kind", "gpu"),
        arch=d.get("arch"),
        pci_ids=tuple(normalise_pci_id(p) for p in match.get("pci_ids", ())),  # type: ignore[misc]
        names=tuple(match.get("names", ())),
        memory_bandwidth=_figure(d.get("memory_bandwidth")),
        memory=_figure(d.get("memory")),
        compute_units=_figure(d.get("compute_units")),
        peak_flops={k: f for k, v in d.get("peak_flops", {}).items() if (f := _figure(v)) is not None},
        notes=d.get("notes", ""),
    )


@functools.lru_cache(maxsize=4)
def load_datasheets(folder: Path | None = None) -> tuple[Datasheet, ...]:
    """Every datasheet profile shipped with tracea (or in `folder`)."""
    root = Path(folder) if folder is not None else profiles_dir() / "devices"
    return tuple(parse_datasheet(p.stem, json.loads(p.read_text())) for p in sorted(root.glob("*.json")))


def match_datasheet(datasheets: tuple[Datasheet, ...], *, pci_id: str | None = None, name: str | None = None) -> Datasheet | None:
    """The datasheet of a device: by PCI id ("10de:2335") first, then by its reported name."""
    if pci_id:
        wanted = normalise_pci_id(pci_id)
        for ds in datasheets:
            if wanted in ds.pci_ids:
                return ds
    if name:
        wanted_name = normalise_name(name)
        for ds in datasheets:
            if wanted_name in {normalise_name(n) for n in ds.names}:
                return ds
    return None
