"""Gather every probe's report into `Facts` (what the checks judge) and join them into the profile's GPU list.

Probing is I/O; joining (`join_gpus`, `absent_components`, `toolchain_info`) is pure, so tests build `Facts` by
hand for any scenario.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any, Mapping

from tracea_cli import target as archs
from tracea_cli.config import Settings
from tracea_cli.doctor import amd as amd_probe
from tracea_cli.doctor import apple as apple_probe
from tracea_cli.doctor import cuda_runtime, inventory, nvidia, toolchain
from tracea_cli.doctor.datasheets import Datasheet, load_datasheets, match_datasheet
from tracea_cli.doctor.profile import (
    Absent,
    CpuInfo,
    GpuInfo,
    HostInfo,
    ToolchainInfo,
    device_class,
    with_limits,
)
from tracea_cli.errors import UsageError


@dataclass(frozen=True)
class NumbaInfo:
    available: bool
    version: str | None = None
    layer: str | None = None  # tbb | omp | workqueue
    reason: str = ""


@dataclass(frozen=True)
class Folder:
    what: str  # cache | data
    path: str
    writable: bool
    error: str = ""


@dataclass(frozen=True)
class Facts:
    """Everything the doctor found out before measuring."""

    host: HostInfo
    cpu: CpuInfo
    nvml: nvidia.NvmlReport
    runtime: cuda_runtime.RuntimeReport
    nvrtc: toolchain.NvrtcInfo
    amd: amd_probe.AmdReport
    apple: apple_probe.AppleReport
    pci: tuple[inventory.PciDevice, ...] = ()
    nvidia_files: tuple[inventory.DeviceFile, ...] = ()
    folders: tuple[Folder, ...] = ()
    env: Mapping[str, str] = field(default_factory=dict)
    tensor_cores: tuple[toolchain.TensorCoreProbe, ...] = ()
    numba: NumbaInfo | None = None  # None: not probed (quick run)

    @property
    def toolchain(self) -> ToolchainInfo:
        return toolchain_info(self)

    @cached_property
    def gpus(self) -> tuple[GpuInfo, ...]:
        """Every GPU, NVML joined with the CUDA runtime, with datasheets matched."""
        return join_gpus(self)

    @property
    def nvidia_on_pci(self) -> tuple[inventory.PciDevice, ...]:
        return tuple(d for d in self.pci if d.pci_id.startswith(inventory.NVIDIA_VENDOR + ":"))

    @property
    def nvidia_hardware(self) -> bool:
        """Any sign of an NVIDIA GPU: on the PCI bus, device files, NVML or the CUDA runtime."""
        return bool(self.nvidia_on_pci or self.nvidia_files or self.nvml.gpus or self.runtime.devices)


# ------------------------------------------------------------------------------------------------------- probing


def probe_numba() -> NumbaInfo:
    """numba's version and the threading layer it starts (tbb, omp or workqueue). Imports numba (~0.6 s)."""
    try:
        import numba
    except Exception as e:
        return NumbaInfo(available=False, reason=f"numba does not import ({type(e).__name__}: {e})")
    try:
        from numba.np.ufunc import parallel

        parallel._launch_threads()  # what the first parallel kernel would do; no compilation needed
        return NumbaInfo(available=True, version=numba.__version__, layer=numba.threading_layer())
    except Exception as e:
        return NumbaInfo(available=True, version=numba.__version__, reason=f"no threading layer started ({e})")


def probe_folders(settings: Settings) -> tuple[Folder, ...]:
    out = []
    for what, path in (("cache", settings.cache_dir), ("data", settings.data_dir)):
        try:
            Path(path).mkdir(parents=True, exist_ok=True)
            ok = os.access(path, os.W_OK | os.X_OK)
            out.append(Folder(what, str(path), ok, "" if ok else "not writable by this user"))
        except OSError as e:
            out.append(Folder(what, str(path), False, e.strerror or str(e)))
    return tuple(out)


def collect(settings: Settings, env: Mapping[str, str], *, numba: bool) -> Facts:
    """Run every probe. `numba=True` also imports numba to find its threading layer (full runs only)."""
    host = inventory.probe_host(env)
    nvml = nvidia.probe_nvml()
    runtime = cuda_runtime.probe_cuda_runtime()
    nvrtc_info = toolchain.probe_nvrtc()
    ccs = sorted({g.compute_capability for g in nvml.gpus if g.compute_capability}
                 | {d.compute_capability for d in runtime.devices})
    probes = tuple(toolchain.tensor_core_probe(cc, nvrtc_info.archs) for cc in ccs) if nvrtc_info.available else ()
    return Facts(
        host=host,
        cpu=inventory.probe_cpu(),
        nvml=nvml,
        runtime=runtime,
        nvrtc=nvrtc_info,
        amd=amd_probe.probe_amd(),
        apple=apple_probe.probe_apple(),
        pci=inventory.pci_gpus(),
        nvidia_files=inventory.device_files(("nvidiactl", "nvidia[0-9]*", "nvidia-uvm")),
        folders=probe_folders(settings),
        env={k: env[k] for k in inventory.ENVIRONMENT if k in env},
        tensor_cores=probes,
        numba=probe_numba() if numba else None,
    )


# ------------------------------------------------------------------------------------------------------- joining


def toolchain_info(f: Facts) -> ToolchainInfo:
    dist, version, major = toolchain.cupy_build(f.host.packages)
    return ToolchainInfo(
        nvrtc_version=f.nvrtc.version,
        nvrtc_archs=f.nvrtc.archs,
        cuda_runtime_version=f.runtime.runtime_version,
        cuda_driver_version=f.nvml.cuda_driver_version or f.runtime.driver_version,
        driver_version=f.nvml.driver_version,
        cupy_distribution=dist,
        cupy_version=f.runtime.cupy_version or version,
        cupy_cuda_major=major,
    )


def infer_cuda_indices(gpus: tuple[nvidia.NvmlGpu, ...], env: Mapping[str, str]) -> dict[int, int]:
    """NVML index -> CUDA ordinal when the CUDA runtime cannot be asked (no CuPy): CUDA_VISIBLE_DEVICES applied to
    NVML's order. An assumption: CUDA orders identical GPUs by PCI bus, as NVML does; mixed GPUs may differ."""
    visible = env.get("CUDA_VISIBLE_DEVICES")
    if visible is None:
        return {g.index: i for i, g in enumerate(gpus)}
    out: dict[int, int] = {}
    for entry in (e.strip() for e in visible.split(",")):
        match = None
        if entry.isdigit():
            match = next((g for g in gpus if g.index == int(entry)), None)
        elif entry.upper().startswith("GPU-"):
            match = next((g for g in gpus if g.uuid and g.uuid.lower().startswith(entry.lower())), None)
        if match is None or match.index in out:
            break  # CUDA stops at the first entry it cannot resolve
        out[match.index] = len(out)
    return out


def _arch_limits(cc: tuple[int, int] | None, sm_count: int | None) -> Any:
    if cc is None:
        return None
    try:
        return with_limits(archs.limits_for(archs.arch_of(cc)), sm_count=sm_count, l2_bytes=None)
    except UsageError:
        return None


def join_gpus(f: Facts, datasheets: tuple[Datasheet, ...] | None = None) -> tuple[GpuInfo, ...]:
    """One record per GPU: NVML joined to the CUDA runtime by PCI bus id (or UUID), then AMD and Apple GPUs."""
    sheets = load_datasheets() if datasheets is None else datasheets
    runtime = {d.pci_bus_id: d for d in f.runtime.devices if d.pci_bus_id}
    runtime_uuid = {d.uuid: d for d in f.runtime.devices if d.uuid}
    inferred = {} if f.runtime.available else infer_cuda_indices(f.nvml.gpus, f.env)
    used: set[int] = set()
    out: list[GpuInfo] = []
    for g in f.nvml.gpus:
        rd = runtime.get(g.pci_bus_id) or runtime_uuid.get(g.uuid)  # type: ignore[arg-type]
        if rd is not None:
            used.add(rd.index)
        sm = rd.limits.sm_count if rd else g.sm_count
        limits = rd.limits if rd else _arch_limits(g.compute_capability, g.sm_count)
        cc = g.compute_capability or (rd.compute_capability if rd else None)
        memory = g.memory_bytes or (rd.memory_bytes if rd else None)
        ds = match_datasheet(sheets, pci_id=g.pci_id, name=g.name)
        cuda_index = rd.index if rd else inferred.get(g.index)
        out.append(GpuInfo(
            vendor="nvidia", name=g.name,
            device_class=device_class(g.name, compute_capability=cc, sm_count=sm, memory_bytes=memory,
                                      max_sm_clock_mhz=g.clocks_mhz.get("sm_max") or (rd.sm_clock_mhz if rd else None),
                                      max_memory_clock_mhz=g.clocks_mhz.get("memory_max") or (rd.memory_clock_mhz if rd else None)),
            cuda_index=cuda_index, nvml_index=g.index, uuid=g.uuid, pci_bus_id=g.pci_bus_id, pci_id=g.pci_id,
            compute_capability=cc, sm_count=sm, memory_bytes=memory, limits=limits,
            limits_source="cuda-runtime" if rd else ("arch-table" if limits else "none"),
            index_source="cuda-runtime" if rd else ("inferred" if cuda_index is not None else "none"),
            datasheet=ds.name if ds else None, details=g.details(),
        ))
    for rd in f.runtime.devices:  # seen by CUDA but not by NVML (NVML absent)
        if rd.index in used:
            continue
        ds = match_datasheet(sheets, name=rd.name)
        out.append(GpuInfo(
            vendor="nvidia", name=rd.name,
            device_class=device_class(rd.name, compute_capability=rd.compute_capability, sm_count=rd.limits.sm_count,
                                      memory_bytes=rd.memory_bytes, max_sm_clock_mhz=rd.sm_clock_mhz,
                                      max_memory_clock_mhz=rd.memory_clock_mhz),
            cuda_index=rd.index, uuid=rd.uuid, pci_bus_id=rd.pci_bus_id, compute_capability=rd.compute_capability,
            sm_count=rd.limits.sm_count, memory_bytes=rd.memory_bytes, limits=rd.limits, limits_source="cuda-runtime",
            index_source="cuda-runtime", datasheet=ds.name if ds else None,
            details={"memory_bus_width_bits": rd.memory_bus_width_bits},
        ))
    for a in f.amd.gpus:
        ds = match_datasheet(sheets, pci_id=a.pci_id, name=a.name)
        out.append(GpuInfo(vendor="amd", name=a.name, device_class=f"{a.name} | {a.pci_id} | "
                           f"{round(a.vram_bytes / 1024**3) if a.vram_bytes else '?'} GiB",
                           pci_bus_id=a.pci_bus_id, pci_id=a.pci_id, memory_bytes=a.vram_bytes,
                           datasheet=ds.name if ds else None, details=dict(a.details)))
    if f.apple.applicable and f.apple.chip:
        ds = match_datasheet(sheets, name=f.apple.chip)
        out.append(GpuInfo(vendor="apple", name=f"{f.apple.chip} GPU",
                           device_class=f"{f.apple.chip} GPU | {f.apple.gpu_cores or '?'} cores",
                           sm_count=f.apple.gpu_cores, memory_bytes=f.apple.memory_bytes,
                           datasheet=ds.name if ds else None, details={"metal": "detected; Tracea has no Metal kernels yet"}))
    return tuple(out)


def absent_components(f: Facts) -> tuple[Absent, ...]:
    """What the doctor looked for and did not find, with the reason and how to get it."""
    out = []
    if not f.nvml.available:
        out.append(Absent("nvml", f.nvml.reason, f.nvml.hint))
    elif not f.nvml.gpus:
        out.append(Absent("nvidia-gpus", "NVML works but lists no NVIDIA GPU"))
    if not f.runtime.available:
        out.append(Absent("cuda-runtime", f.runtime.reason, f.runtime.hint))
    if not f.nvrtc.available:
        out.append(Absent("nvrtc", f.nvrtc.reason, toolchain_hint()))
    if not f.amd.present:
        out.append(Absent("amd", "no AMD GPU on this machine (sysfs shows none)"))
    elif not f.amd.pyamdgpuinfo:
        out.append(Absent("pyamdgpuinfo", "not installed: AMD names and clocks come from sysfs only", amd_probe.INSTALL_HINT))
    if not f.apple.applicable:
        out.append(Absent("metal", f.apple.reason))
    if f.numba is not None and not f.numba.available:
        out.append(Absent("numba", f.numba.reason, "pip install numba"))
    return tuple(out)


def toolchain_hint() -> str:
    return "pip install 'tracea[cuda]' (brings nvidia-cuda-nvrtc==13.0.* and the CUDA headers)"
