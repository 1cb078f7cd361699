"""AMD GPUs through sysfs (always) and pyamdgpuinfo (when installed; the `amd` extra, GPL-3.0, imported lazily).

No AMD hardware was available to the Tracea developers: this reads what the amdgpu driver documents and is tested
against a fake sysfs tree only.
"""

from __future__ import annotations

import importlib.util
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from tracea_cli.doctor.inventory import AMD_VENDOR, DeviceFile, device_files

INSTALL_HINT = "pip install 'tracea[amd]' (pyamdgpuinfo)"


@dataclass(frozen=True)
class AmdGpu:
    card: str  # "card0"
    name: str
    pci_bus_id: str | None
    pci_id: str | None  # "1002:74a1"
    vram_bytes: int | None = None
    details: dict[str, Any] = field(default_factory=dict)  # link speed/width, max clocks


@dataclass(frozen=True)
class AmdReport:
    gpus: tuple[AmdGpu, ...] = ()
    pyamdgpuinfo: bool = False  # importable
    device_files: tuple[DeviceFile, ...] = ()  # /dev/kfd and /dev/dri/renderD*

    @property
    def present(self) -> bool:
        return bool(self.gpus)


def _read(path: Path) -> str | None:
    try:
        return path.read_text().strip()
    except OSError:
        return None


def _sysfs_gpus(sys_root: Path) -> list[AmdGpu]:
    gpus = []
    for card in sorted((sys_root / "class/drm").glob("card[0-9]*")):
        if not card.name[4:].isdigit():
            continue  # connectors such as card0-DP-1
        dev = card / "device"
        vendor, device = _read(dev / "vendor"), _read(dev / "device")
        if not vendor or f"{int(vendor, 16):04x}" != AMD_VENDOR or not device:
            continue
        pci_id = f"{AMD_VENDOR}:{int(device, 16):04x}"
        vram = _read(dev / "mem_info_vram_total")
        try:
            bus = Path(os.path.realpath(dev)).name.lower()
        except OSError:
            bus = None
        details = {k: v for k in ("current_link_speed", "current_link_width", "max_link_speed", "max_link_width")
                   if (v := _read(dev / k))}
        gpus.append(AmdGpu(card=card.name, name=_read(dev / "product_name") or f"AMD GPU {pci_id}",
                           pci_bus_id=bus if bus and bus.count(":") == 2 else None, pci_id=pci_id,
                           vram_bytes=int(vram) if vram and vram.isdigit() else None, details=details))
    return gpus


def _with_pyamdgpuinfo(gpus: list[AmdGpu], module: Any) -> list[AmdGpu]:
    """Names and maximum clocks from pyamdgpuinfo, joined to the sysfs entries by PCI slot."""
    by_bus = {g.pci_bus_id: g for g in gpus}
    try:
        count = module.detect_gpus()
    except Exception:
        return gpus
    for i in range(count):
        try:
            info = module.get_gpu(i)
            bus = str(info.pci_slot).lower()
            clocks = info.query_max_clocks()
        except Exception:
            continue
        base = by_bus.get(bus)
        extra = {"max_sclk_mhz": clocks.get("sclk_max", 0) / 1e6, "max_mclk_mhz": clocks.get("mclk_max", 0) / 1e6}
        name = getattr(info, "name", None) or (base.name if base else f"AMD GPU {i}")
        if base is not None:
            by_bus[bus] = AmdGpu(card=base.card, name=name, pci_bus_id=bus, pci_id=base.pci_id,
                                 vram_bytes=base.vram_bytes, details={**base.details, **extra})
        else:
            vram = getattr(info, "memory_info", {}).get("vram_size")
            by_bus[bus] = AmdGpu(card=f"pyamdgpuinfo{i}", name=name, pci_bus_id=bus, pci_id=None, vram_bytes=vram, details=extra)
    return list(by_bus.values())


def probe_amd(*, sys_root: Path = Path("/sys"), dev_root: Path = Path("/dev"), module: Any | None = None,
              access: Callable[[str, int], bool] = os.access) -> AmdReport:
    gpus = _sysfs_gpus(sys_root)
    available = module is not None or importlib.util.find_spec("pyamdgpuinfo") is not None
    if gpus and available:
        if module is None:
            try:
                import pyamdgpuinfo as module  # type: ignore[no-redef]
            except Exception:
                module = None
        if module is not None:
            gpus = _with_pyamdgpuinfo(gpus, module)
    files = device_files(("kfd", "dri/renderD*"), dev_root=dev_root, access=access) if gpus else ()
    return AmdReport(gpus=tuple(gpus), pyamdgpuinfo=available, device_files=files)
