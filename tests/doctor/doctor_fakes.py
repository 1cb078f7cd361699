"""Test doubles for the doctor: a stand-in for the `pynvml` module (same function names, same NVMLError classes
and codes), GPU scenarios, and `Facts` built without touching the machine."""

from __future__ import annotations

import types
from dataclasses import dataclass, field, replace
from typing import Any

from tracea_cli.doctor import amd, apple, cuda_runtime, nvidia, toolchain
from tracea_cli.doctor.collect import Facts, Folder
from tracea_cli.doctor.inventory import PciDevice
from tracea_cli.doctor.profile import CpuInfo, HostInfo

NOT_SUPPORTED = object()  # a field value that makes the stand-in raise NVMLError_NotSupported

# pynvml's error codes, as the real module defines them
_ERRORS = {1: "Uninitialized", 3: "NotSupported", 4: "NoPermission", 9: "DriverNotLoaded", 12: "LibraryNotFound",
           13: "FunctionNotFound", 15: "GpuIsLost", 18: "LibRmVersionMismatch", 999: "Unknown"}


@dataclass
class FakeGpu:
    """One GPU as NVML would report it; the defaults are a healthy H200 SXM at idle."""

    name: str = "NVIDIA H200"
    uuid: str = "GPU-8f0c2a1e-1111-2222-3333-444455556666"
    bus_id: str = "00000000:19:00.0"
    pci_device_id: int = 0x233510DE
    cc: tuple[int, int] = (9, 0)
    sm_count: Any = 132
    memory_total: int = 150754820096
    bus_width: Any = 6144
    clocks: dict = field(default_factory=lambda: {0: 345, 1: 345, 2: 3201})  # graphics, sm, memory (current)
    max_clocks: dict = field(default_factory=lambda: {0: 1980, 1: 1980, 2: 3201})
    power_mw: Any = 72000
    power_limit_mw: Any = 700000
    power_default_mw: Any = 700000
    temperature: Any = 31
    thresholds: dict = field(default_factory=lambda: {0: 95, 1: 92, 2: 95, 3: 87})
    pcie_gen: Any = 5
    pcie_gen_max: Any = 5
    pcie_gen_gpu_max: Any = 5
    pcie_width: Any = 16
    pcie_width_max: Any = 16
    ecc_mode: Any = (1, 1)
    ecc_counts: dict = field(default_factory=lambda: {(0, 0): 0, (0, 1): 0, (1, 0): 0, (1, 1): 0})  # (type, counter)
    remapped_rows: Any = (0, 0, 0, 0)
    mig_mode: Any = (0, 0)
    persistence: Any = 1
    compute_mode: Any = 0
    clock_events: Any = 0x1  # gpu_idle
    lost: bool = False


@dataclass
class FakeSystem:
    gpus: list[FakeGpu] = field(default_factory=lambda: [FakeGpu()])
    driver: str = "580.159.04"
    cuda_driver: int = 13000
    init_error: int | None = None  # an NVML error code nvmlInit raises (12: library not found)


def fake_nvml(system: FakeSystem) -> types.ModuleType:
    """A module with pynvml's functions and error classes, answering from `system`."""
    m = types.ModuleType("pynvml_standin")

    class NVMLError(Exception):
        def __init__(self, value: int) -> None:
            super().__init__(value)
            self.value = value

        def __str__(self) -> str:
            return _ERRORS.get(self.value, "Unknown Error")

    m.NVMLError = NVMLError
    classes = {}
    for code, name in _ERRORS.items():
        cls = type(f"NVMLError_{name}", (NVMLError,), {"__init__": (lambda c: lambda self, *a: NVMLError.__init__(self, c))(code)})
        classes[code] = cls
        setattr(m, cls.__name__, cls)
    m.state = {"initialised": 0}

    def raise_(code: int) -> None:
        raise classes[code]()

    def value(v: Any) -> Any:
        if v is NOT_SUPPORTED:
            raise_(3)
        return v

    def init() -> None:
        if system.init_error is not None:
            raise_(system.init_error)
        m.state["initialised"] += 1

    def shutdown() -> None:
        if m.state["initialised"] == 0:
            raise_(1)
        m.state["initialised"] -= 1

    def gpu(handle: Any) -> FakeGpu:
        if m.state["initialised"] == 0:
            raise_(1)
        if handle.lost:
            raise_(15)
        return handle

    def by_index(i: int) -> FakeGpu:
        g = system.gpus[i]
        if g.lost:
            raise_(15)
        return g

    def by_bus(bus: str) -> FakeGpu:
        for g in system.gpus:
            if nvidia.normalise_bus_id(g.bus_id) == nvidia.normalise_bus_id(bus):
                return g
        raise_(6 if 6 in classes else 999)

    m.nvmlInit = init
    m.nvmlShutdown = shutdown
    m.nvmlSystemGetDriverVersion = lambda: system.driver
    m.nvmlSystemGetCudaDriverVersion_v2 = lambda: system.cuda_driver
    m.nvmlDeviceGetCount = lambda: len(system.gpus)
    m.nvmlDeviceGetHandleByIndex = by_index
    m.nvmlDeviceGetHandleByPciBusId = by_bus
    m.nvmlDeviceGetName = lambda h: gpu(h).name
    m.nvmlDeviceGetUUID = lambda h: gpu(h).uuid
    m.nvmlDeviceGetPciInfo = lambda h: types.SimpleNamespace(busId=gpu(h).bus_id.encode(), pciDeviceId=gpu(h).pci_device_id)
    m.nvmlDeviceGetCudaComputeCapability = lambda h: gpu(h).cc
    m.nvmlDeviceGetAttributes = lambda h: types.SimpleNamespace(multiprocessorCount=value(gpu(h).sm_count))
    m.nvmlDeviceGetMemoryInfo = lambda h: types.SimpleNamespace(total=gpu(h).memory_total, free=gpu(h).memory_total, used=0)
    m.nvmlDeviceGetMemoryBusWidth = lambda h: value(gpu(h).bus_width)
    m.nvmlDeviceGetClockInfo = lambda h, t: value(gpu(h).clocks[t])
    m.nvmlDeviceGetMaxClockInfo = lambda h, t: value(gpu(h).max_clocks[t])
    m.nvmlDeviceGetPowerUsage = lambda h: value(gpu(h).power_mw)
    m.nvmlDeviceGetEnforcedPowerLimit = lambda h: value(gpu(h).power_limit_mw)
    m.nvmlDeviceGetPowerManagementDefaultLimit = lambda h: value(gpu(h).power_default_mw)
    m.nvmlDeviceGetTemperature = lambda h, s: value(gpu(h).temperature)
    m.nvmlDeviceGetTemperatureThreshold = lambda h, t: value(gpu(h).thresholds[t])
    m.nvmlDeviceGetCurrPcieLinkGeneration = lambda h: value(gpu(h).pcie_gen)
    m.nvmlDeviceGetMaxPcieLinkGeneration = lambda h: value(gpu(h).pcie_gen_max)
    m.nvmlDeviceGetGpuMaxPcieLinkGeneration = lambda h: value(gpu(h).pcie_gen_gpu_max)
    m.nvmlDeviceGetCurrPcieLinkWidth = lambda h: value(gpu(h).pcie_width)
    m.nvmlDeviceGetMaxPcieLinkWidth = lambda h: value(gpu(h).pcie_width_max)
    m.nvmlDeviceGetEccMode = lambda h: list(value(gpu(h).ecc_mode))
    m.nvmlDeviceGetTotalEccErrors = lambda h, t, c: value(gpu(h).ecc_counts[(t, c)])
    m.nvmlDeviceGetRemappedRows = lambda h: value(gpu(h).remapped_rows)
    m.nvmlDeviceGetMigMode = lambda h: list(value(gpu(h).mig_mode))
    m.nvmlDeviceGetPersistenceMode = lambda h: value(gpu(h).persistence)
    m.nvmlDeviceGetComputeMode = lambda h: value(gpu(h).compute_mode)
    m.nvmlDeviceGetCurrentClocksEventReasons = lambda h: value(gpu(h).clock_events)
    return m


# ------------------------------------------------------------------------------------------------- scenarios


def scenario(name: str) -> FakeSystem:
    """The named situations the NVML tests cover."""
    g = FakeGpu()
    if name == "healthy-h200":
        pass
    elif name == "thermal":
        g = replace(g, clock_events=0x20 | 0x40, temperature=94, clocks={0: 1100, 1: 1100, 2: 3201})
    elif name == "power-cap-lowered":
        g = replace(g, clock_events=0x4, power_mw=449000, power_limit_mw=450000)
    elif name == "pcie-x8-gen4":
        g = replace(g, clock_events=0x0, pcie_gen=4, pcie_width=8)
    elif name == "pcie-idle-gen1":
        g = replace(g, clock_events=0x1, pcie_gen=1)
    elif name == "ecc-errors":
        g = replace(g, ecc_counts={(0, 0): 12, (0, 1): 40, (1, 0): 2, (1, 1): 3}, remapped_rows=(1, 2, 0, 0))
    elif name == "remap-pending":
        g = replace(g, remapped_rows=(0, 1, 1, 0))
    elif name == "ecc-off":
        g = replace(g, ecc_mode=(0, 0))
    elif name == "mig-on":
        g = replace(g, mig_mode=(1, 1))
    elif name == "persistence-off":
        g = replace(g, persistence=0)
    elif name == "old-driver":
        return FakeSystem(gpus=[g], driver="550.54.15", cuda_driver=12040)
    elif name == "nvml-absent":
        return FakeSystem(gpus=[], init_error=12)
    elif name == "unsupported-fields":
        g = replace(g, name="NVIDIA GeForce RTX 3070", pci_device_id=0x248410DE, cc=(8, 6), sm_count=NOT_SUPPORTED,
                    ecc_mode=NOT_SUPPORTED, remapped_rows=NOT_SUPPORTED, mig_mode=NOT_SUPPORTED, bus_width=NOT_SUPPORTED,
                    power_default_mw=NOT_SUPPORTED)
    else:
        raise KeyError(name)
    return FakeSystem(gpus=[g])


# ------------------------------------------------------------------------------------------------------ facts

HOST = HostInfo(os="Linux", os_release="Test Linux", kernel="6.0", machine="x86_64", hostname="test", python="CPython 3.11",
                container=False, packages={"cupy-cuda13x": "14.2.0", "ml_dtypes": "0.5.0", "tracea": "0.1.0"},
                environment={})
CPU = CpuInfo(model="Test CPU", vendor="GenuineIntel", arch="x86_64", cores=8, threads=16, usable_threads=16,
              simd=("avx2", "fma", "avx512f"), caches={"L1d": 48 * 1024, "L2": 2 << 20, "L3": 32 << 20},
              memory_bytes=64 << 30, memory_available_bytes=60 << 30, max_mhz=3500.0, governors=("performance",))
NVRTC = toolchain.NvrtcInfo(available=True, version="13.0", archs=("sm_75", "sm_80", "sm_86", "sm_89", "sm_90", "sm_120"))


def runtime_for(system: FakeSystem) -> cuda_runtime.RuntimeReport:
    """What CuPy would report for the system's GPUs (limits from the architecture table, as a stand-in)."""
    from tracea_cli.doctor.profile import with_limits
    from tracea_cli.target import arch_of, limits_for

    devices = tuple(
        cuda_runtime.CudaDevice(index=i, name=g.name, pci_bus_id=nvidia.normalise_bus_id(g.bus_id), uuid=g.uuid,
                                compute_capability=g.cc,
                                limits=with_limits(limits_for(arch_of(g.cc)), sm_count=132, l2_bytes=60 << 20),
                                memory_bytes=g.memory_total, sm_clock_mhz=1980, memory_clock_mhz=3201,
                                memory_bus_width_bits=6144)
        for i, g in enumerate(system.gpus))
    return cuda_runtime.RuntimeReport(available=bool(devices), installed=True, cupy_version="14.2.0",
                                      runtime_version=13000, driver_version=system.cuda_driver, devices=devices,
                                      reason="" if devices else "the CUDA runtime sees no device")


NO_CUPY = cuda_runtime.RuntimeReport(available=False, installed=False, reason="CuPy is not installed",
                                     hint=cuda_runtime.INSTALL_HINT)


def facts(system: FakeSystem | None = None, **overrides: Any) -> Facts:
    """Facts for a scenario: NVML from the stand-in, CuPy reaching the same GPUs, no AMD, not macOS."""
    report = nvidia.probe_nvml(fake_nvml(system)) if system is not None else nvidia.NvmlReport(available=False)
    base = dict(
        host=HOST, cpu=CPU, nvml=report,
        runtime=overrides.pop("runtime", None) or (runtime_for(system) if system is not None and system.gpus else NO_CUPY),
        nvrtc=NVRTC, amd=amd.AmdReport(), apple=apple.AppleReport(applicable=False, reason="not macOS"),
        pci=tuple(PciDevice(bus_id=nvidia.normalise_bus_id(g.bus_id), pci_id="10de:2335", pci_class=0x030200)
                  for g in (system.gpus if system else [])),
        folders=(Folder("cache", "/tmp/c", True), Folder("data", "/tmp/d", True)),
        tensor_cores=(toolchain.TensorCoreProbe("sm_90", True, "compiled mma.sync for sm_90"),) if system and system.gpus else (),
    )
    base.update(overrides)
    return Facts(**base)


# ------------------------------------------------------------------------------------------- a numpy-backed CuPy


def fake_cupy(free_bytes: int = 1 << 30) -> tuple[types.ModuleType, types.ModuleType]:
    """Just enough of CuPy, computed by numpy on the host, to run the doctor's GPU measurements end to end here:
    it checks the plumbing (calls, correctness checks, units), not a GPU. Returns (cupy, cupy._core._routines_linalg)."""
    import ctypes
    import time as _time

    import numpy as np

    class DevArray(np.ndarray):
        @property
        def data(self):  # CuPy's MemoryPointer
            return types.SimpleNamespace(ptr=self.ctypes.data)

    def dev(x):
        return np.asarray(x).view(DevArray)

    cp = types.ModuleType("cupy")
    cp.float16, cp.float32, cp.float64, cp.uint8 = np.float16, np.float32, np.float64, np.uint8
    rng = np.random.default_rng(0)
    cp.random = types.SimpleNamespace(random=lambda shape, dtype=np.float64: dev(rng.random(shape, dtype=dtype)))
    cp.empty = lambda shape, dtype=np.float64: dev(np.empty(shape, dtype))
    cp.empty_like = lambda a: dev(np.empty_like(a))
    cp.copyto = lambda dst, src: np.copyto(dst, src)
    cp.matmul = lambda a, b, out=None: np.matmul(a, b, out=out)
    cp.asnumpy = lambda a: np.asarray(a)
    pool = types.SimpleNamespace(free_all_blocks=lambda: None)
    cp.get_default_memory_pool = cp.get_default_pinned_memory_pool = lambda: pool

    class RawKernel:
        def __init__(self, source, name):
            assert f"void {name}(" in source
            self.name = name

        def __call__(self, grid, block, args, stream=None):  # the event clock's stream hold does nothing here
            if self.name == "tracea_copy":
                src, dst, n4 = args
                assert grid[0] * block[0] * 4 >= int(n4) * 1 and dst.nbytes == 16 * int(n4)
                dst[...] = src

    cp.RawKernel = RawKernel

    class Stream:
        ptr = 0

        def synchronize(self):
            pass

    class Event:
        def record(self, stream=None):
            self.t = _time.perf_counter()

        def synchronize(self):
            pass

    class Device:
        def __init__(self, index=0):  # CuPy's Device() is the current device
            self.id = index

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return False

    runtime = types.SimpleNamespace(
        memGetInfo=lambda: (free_bytes, 2 * free_bytes), memcpyHostToDevice=1, memcpyDeviceToHost=2,
        memcpyAsync=lambda dst, src, n, kind, stream: ctypes.memmove(dst, src, n), getDeviceCount=lambda: 1)
    class PinnedMemory(bytearray):
        @property
        def ptr(self):
            return ctypes.addressof((ctypes.c_char * len(self)).from_buffer(self))

    stream = Stream()
    cp.cuda = types.SimpleNamespace(
        Device=Device, Event=Event, get_current_stream=lambda: stream, runtime=runtime, ExternalStream=lambda ptr: stream,
        get_elapsed_time=lambda a, b: (b.t - a.t) * 1e3, alloc_pinned_memory=PinnedMemory)

    linalg = types.ModuleType("cupy._core._routines_linalg")
    linalg.COMPUTE_TYPE_TF32 = 7
    linalg.compute_types = {np.dtype(np.float32): 1}
    linalg.log = []
    linalg.get_compute_type = lambda dt: linalg.compute_types[np.dtype(dt)]

    def set_compute_type(dt, ct):
        linalg.compute_types[np.dtype(dt)] = ct
        linalg.log.append(ct)

    linalg.set_compute_type = set_compute_type
    return cp, linalg
