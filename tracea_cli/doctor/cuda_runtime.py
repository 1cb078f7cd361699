"""The CUDA runtime's view, through CuPy: which devices this process sees, and the limits kernels are built against.

CuPy is imported only when it is installed (`importlib.util.find_spec`), so a machine without it pays nothing.
Attributes are read one by one with `cudaDeviceGetAttribute`, which is stable across CUDA versions where the
`cudaDeviceProp` structure is not (CUDA 13 removed several of its fields).
"""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass
from typing import Any

from tracea_cli.doctor.nvidia import normalise_bus_id
from tracea_cli.target import DeviceLimits, arch_of

# cudaDeviceAttr values (driver_types.h)
ATTR_MAX_THREADS_PER_BLOCK = 1
ATTR_MAX_SHARED_PER_BLOCK = 8
ATTR_WARP_SIZE = 10
ATTR_MAX_REGISTERS_PER_BLOCK = 12
ATTR_CLOCK_RATE_KHZ = 13
ATTR_SM_COUNT = 16
ATTR_MEMORY_CLOCK_RATE_KHZ = 36
ATTR_MEMORY_BUS_WIDTH = 37
ATTR_L2_BYTES = 38
ATTR_MAX_THREADS_PER_SM = 39
ATTR_CC_MAJOR = 75
ATTR_CC_MINOR = 76
ATTR_MAX_SHARED_PER_SM = 81
ATTR_MAX_REGISTERS_PER_SM = 82
ATTR_MAX_SHARED_PER_BLOCK_OPTIN = 97

INSTALL_HINT = "pip install 'tracea[cuda]' (CuPy for CUDA 13, with NVRTC and the CUDA headers)"


@dataclass(frozen=True)
class CudaDevice:
    index: int  # CUDA ordinal as this process sees it
    name: str
    pci_bus_id: str | None
    uuid: str | None
    compute_capability: tuple[int, int]
    limits: DeviceLimits
    memory_bytes: int | None
    sm_clock_mhz: int | None  # maximum SM clock
    memory_clock_mhz: int | None
    memory_bus_width_bits: int | None


@dataclass(frozen=True)
class RuntimeReport:
    available: bool
    installed: bool = False  # CuPy is installed (it may still fail to import or to find a device)
    reason: str = ""  # why no device is usable through CuPy
    hint: str = ""
    cupy_version: str | None = None
    runtime_version: int | None = None  # 13000 = CUDA 13.0
    driver_version: int | None = None  # the CUDA version the driver supports
    devices: tuple[CudaDevice, ...] = ()


def cupy_installed() -> bool:
    return importlib.util.find_spec("cupy") is not None


def _uuid(raw: Any) -> str | None:
    if not isinstance(raw, (bytes, bytearray)) or len(raw) != 16:
        return None
    h = bytes(raw).hex()
    return f"GPU-{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"


def _device(rt: Any, index: int) -> CudaDevice:
    def attr(a: int) -> int | None:
        try:
            return int(rt.deviceGetAttribute(a, index))
        except Exception:  # an attribute this CUDA version lacks
            return None

    props = rt.getDeviceProperties(index)
    cc = (attr(ATTR_CC_MAJOR) or int(props.get("major", 0)), attr(ATTR_CC_MINOR) or int(props.get("minor", 0)))
    shared_block = attr(ATTR_MAX_SHARED_PER_BLOCK) or 48 * 1024
    limits = DeviceLimits(
        arch=arch_of(cc),
        compute_capability=cc,
        max_threads_per_block=attr(ATTR_MAX_THREADS_PER_BLOCK) or 1024,
        max_threads_per_sm=attr(ATTR_MAX_THREADS_PER_SM) or 2048,
        max_shared_per_block=shared_block,
        max_shared_per_block_optin=attr(ATTR_MAX_SHARED_PER_BLOCK_OPTIN) or shared_block,
        max_shared_per_sm=attr(ATTR_MAX_SHARED_PER_SM) or shared_block,
        registers_per_sm=attr(ATTR_MAX_REGISTERS_PER_SM) or 65536,
        registers_per_block=attr(ATTR_MAX_REGISTERS_PER_BLOCK) or 65536,
        warp_size=attr(ATTR_WARP_SIZE) or 32,
        sm_count=attr(ATTR_SM_COUNT),
        l2_bytes=attr(ATTR_L2_BYTES),
    )
    try:
        bus = normalise_bus_id(rt.deviceGetPCIBusId(index))
    except Exception:
        bus = None
    clock, mem_clock = attr(ATTR_CLOCK_RATE_KHZ), attr(ATTR_MEMORY_CLOCK_RATE_KHZ)
    name = props.get("name", b"")
    return CudaDevice(
        index=index,
        name=name.decode(errors="replace") if isinstance(name, bytes) else str(name),
        pci_bus_id=bus,
        uuid=_uuid(props.get("uuid")),
        compute_capability=cc,
        limits=limits,
        memory_bytes=int(props["totalGlobalMem"]) if "totalGlobalMem" in props else None,
        sm_clock_mhz=clock // 1000 if clock else None,
        memory_clock_mhz=mem_clock // 1000 if mem_clock else None,
        memory_bus_width_bits=attr(ATTR_MEMORY_BUS_WIDTH),
    )


def probe_cuda_runtime() -> RuntimeReport:
    """The devices CUDA shows this process, through CuPy; absent (with the reason) when CuPy or a device is."""
    if not cupy_installed():
        return RuntimeReport(available=False, reason="CuPy is not installed", hint=INSTALL_HINT)
    try:
        import cupy
    except Exception as e:  # a broken install: wrong CUDA build, missing libraries
        return RuntimeReport(available=False, installed=True,
                             reason=f"CuPy is installed but does not import ({type(e).__name__}: {e})",
                             hint=f"Reinstall it: {INSTALL_HINT}.")
    rt = cupy.cuda.runtime
    versions: dict[str, Any] = {"cupy_version": cupy.__version__, "installed": True}
    for key, fn in (("runtime_version", "runtimeGetVersion"), ("driver_version", "driverGetVersion")):
        try:
            versions[key] = int(getattr(rt, fn)())
        except Exception:
            versions[key] = None
    try:
        count = int(rt.getDeviceCount())
    except Exception as e:
        return RuntimeReport(available=False, reason=f"the CUDA runtime sees no usable device ({e})",
                             hint="Check the driver with `nvidia-smi` and CUDA_VISIBLE_DEVICES.", **versions)
    if count == 0:
        return RuntimeReport(available=False, reason="the CUDA runtime sees no device",
                             hint="Check CUDA_VISIBLE_DEVICES and `nvidia-smi`.", **versions)
    return RuntimeReport(available=True, devices=tuple(_device(rt, i) for i in range(count)), **versions)
