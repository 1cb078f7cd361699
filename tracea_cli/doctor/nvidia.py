"""NVIDIA GPUs through NVML (the `nvidia-ml-py` package, imported as `pynvml`, lazily).

`probe_nvml(nvml)` takes the module as an argument, so tests hand in a stand-in with the same functions and
NVMLError classes. Every field is read on its own: a field the GPU does not support (or this user may not read)
becomes None and is listed in `unsupported`, never an error. Only a failing `nvmlInit` makes NVML absent, and the
report then says why, in words, with a hint.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

# NVML's numeric constants (nvml.h); the same in every driver, so a stand-in module needs none of them.
CLOCK_GRAPHICS, CLOCK_SM, CLOCK_MEM = 0, 1, 2
TEMPERATURE_GPU = 0
THRESHOLD_SHUTDOWN, THRESHOLD_SLOWDOWN, THRESHOLD_MEM_MAX, THRESHOLD_GPU_MAX = 0, 1, 2, 3
ERROR_CORRECTED, ERROR_UNCORRECTED = 0, 1
VOLATILE_ECC, AGGREGATE_ECC = 0, 1

ERROR_UNINITIALIZED = 1
ERROR_NOT_SUPPORTED = 3
ERROR_NO_PERMISSION = 4
ERROR_DRIVER_NOT_LOADED = 9
ERROR_LIBRARY_NOT_FOUND = 12
ERROR_FUNCTION_NOT_FOUND = 13
ERROR_GPU_IS_LOST = 15
ERROR_LIB_RM_VERSION_MISMATCH = 18

#: clock-event ("throttle") reason bits, nvmlClocksEventReason*
CLOCK_EVENT_REASONS: dict[int, str] = {
    0x001: "gpu_idle",
    0x002: "applications_clocks_setting",
    0x004: "sw_power_cap",
    0x008: "hw_slowdown",
    0x010: "sync_boost",
    0x020: "sw_thermal_slowdown",
    0x040: "hw_thermal_slowdown",
    0x080: "hw_power_brake_slowdown",
    0x100: "display_clock_setting",
}
THERMAL_REASONS = ("sw_thermal_slowdown", "hw_thermal_slowdown")
HARDWARE_REASONS = ("hw_slowdown", "hw_power_brake_slowdown")
POWER_REASONS = ("sw_power_cap",)
#: reasons that mean the clocks are held below what the GPU could run at
THROTTLE_MASK = 0x004 | 0x008 | 0x020 | 0x040 | 0x080

COMPUTE_MODES = {0: "default", 1: "exclusive_thread", 2: "prohibited", 3: "exclusive_process"}


def decode_clock_events(mask: int) -> tuple[str, ...]:
    names = [name for bit, name in CLOCK_EVENT_REASONS.items() if mask & bit]
    unknown = mask & ~sum(CLOCK_EVENT_REASONS)
    if unknown:
        names.append(f"unknown_0x{unknown:x}")
    return tuple(names)


def normalise_bus_id(bus_id: str | bytes | None) -> str | None:
    """NVML writes "00000000:19:00.0", CUDA "0000:19:00.0", sysfs "0000:19:00.0": all become the last."""
    if bus_id is None:
        return None
    text = _text(bus_id).strip().lower()
    parts = text.split(":")
    if len(parts) != 3:
        return text or None
    domain, bus, rest = parts
    try:
        return f"{int(domain, 16):04x}:{int(bus, 16):02x}:{rest}"
    except ValueError:
        return text


@dataclass(frozen=True)
class NvmlGpu:
    index: int  # NVML's index (PCI bus order), not the CUDA ordinal
    name: str
    uuid: str | None = None
    pci_bus_id: str | None = None
    pci_id: str | None = None  # "10de:2335"
    compute_capability: tuple[int, int] | None = None
    sm_count: int | None = None
    memory_bytes: int | None = None
    memory_bus_width_bits: int | None = None
    clocks_mhz: Mapping[str, int | None] = field(default_factory=dict)  # sm, sm_max, memory, memory_max, graphics, graphics_max
    power_w: Mapping[str, float | None] = field(default_factory=dict)  # draw, limit, default_limit
    temperature_c: Mapping[str, int | None] = field(default_factory=dict)  # gpu, slowdown, shutdown, gpu_max
    pcie: Mapping[str, int | None] = field(default_factory=dict)  # generation, generation_max, generation_gpu_max, width, width_max
    ecc: Mapping[str, Any] = field(default_factory=dict)  # enabled, pending, volatile/aggregate corrected/uncorrected
    remapped_rows: Mapping[str, int] | None = None  # correctable, uncorrectable, pending, failure
    mig: Mapping[str, bool | None] = field(default_factory=dict)  # enabled, pending
    persistence_mode: bool | None = None
    compute_mode: str | None = None
    clock_events: tuple[str, ...] | None = None  # decoded clock-event reasons
    unsupported: tuple[str, ...] = ()  # fields NVML did not give, with its reason

    @property
    def idle(self) -> bool:
        return "gpu_idle" in (self.clock_events or ())

    def details(self) -> dict[str, Any]:
        """Everything beyond identity, for the profile."""
        return {
            "memory_bus_width_bits": self.memory_bus_width_bits,
            "clocks_mhz": dict(self.clocks_mhz),
            "power_w": dict(self.power_w),
            "temperature_c": dict(self.temperature_c),
            "pcie": dict(self.pcie),
            "ecc": dict(self.ecc),
            "remapped_rows": dict(self.remapped_rows) if self.remapped_rows is not None else None,
            "mig": dict(self.mig),
            "persistence_mode": self.persistence_mode,
            "compute_mode": self.compute_mode,
            "clock_events": list(self.clock_events) if self.clock_events is not None else None,
            "nvml_unsupported": list(self.unsupported),
        }


@dataclass(frozen=True)
class NvmlReport:
    available: bool
    summary: str = ""  # why NVML is absent, in a few words
    reason: str = ""  # why NVML is absent, in a sentence
    hint: str = ""
    error_code: int | None = None
    driver_version: str | None = None
    cuda_driver_version: int | None = None  # 13000 = the driver supports CUDA 13.0
    gpus: tuple[NvmlGpu, ...] = ()


def load_nvml() -> Any:
    """The `pynvml` module of nvidia-ml-py. Raises ModuleNotFoundError when the package is absent."""
    import pynvml

    return pynvml


def _text(value: Any) -> str:
    return value.decode(errors="replace") if isinstance(value, bytes) else str(value)


_INIT_FAILURES: dict[int, tuple[str, str, str]] = {  # code -> (summary, reason, hint)
    ERROR_LIBRARY_NOT_FOUND: (
        "NVML library not found",
        "the NVIDIA driver's NVML library (libnvidia-ml.so.1) was not found: no NVIDIA driver is installed here, "
        "or this container was started without GPU support",
        "Install the NVIDIA driver (nvidia-smi should then list the GPUs); in a container, start it with "
        "`docker run --gpus all` (NVIDIA Container Toolkit).",
    ),
    ERROR_DRIVER_NOT_LOADED: (
        "driver not loaded",
        "the NVIDIA kernel driver is not loaded",
        "Load it with `sudo modprobe nvidia` or reinstall the driver; `nvidia-smi` should then list the GPUs.",
    ),
    ERROR_NO_PERMISSION: (
        "no permission",
        "this user may not talk to the NVIDIA driver",
        "Check the permissions of /dev/nvidia* (`ls -l /dev/nvidia*`) and add the user to the owning group.",
    ),
    ERROR_LIB_RM_VERSION_MISMATCH: (
        "driver/library mismatch",
        "the NVML library and the loaded kernel driver are different versions (the driver was updated without "
        "a reboot)",
        "Reboot, or reload the nvidia kernel modules.",
    ),
}


def init_failure(code: int | None, message: str) -> tuple[str, str, str]:
    """(summary, reason, hint) for a failed nvmlInit."""
    if code in _INIT_FAILURES:
        return _INIT_FAILURES[code]  # type: ignore[index]
    return (f"NVML error: {message}", f"NVML could not start ({message})",
            "Run `nvidia-smi`: if it fails too, reinstall the NVIDIA driver.")


class _Reader:
    """Calls NVML functions one field at a time; what fails is recorded, not raised."""

    def __init__(self, nvml: Any) -> None:
        self.nvml = nvml
        self.unsupported: list[str] = []

    def get(self, what: str, *calls: tuple[str, tuple]) -> Any:
        """The first of `calls` (function name, arguments) that the module has and that succeeds."""
        last = "function not available in this driver"
        for name, args in calls:
            fn = getattr(self.nvml, name, None)
            if fn is None:
                continue
            try:
                return fn(*args)
            except self.nvml.NVMLError as e:
                last = _text(e) or f"NVML error {getattr(e, 'value', '?')}"
                if getattr(e, "value", None) == ERROR_FUNCTION_NOT_FOUND:
                    continue
                break
        self.unsupported.append(f"{what}: {last}")
        return None


def _read_gpu(nvml: Any, index: int) -> NvmlGpu:
    handle = nvml.nvmlDeviceGetHandleByIndex(index)
    r = _Reader(nvml)

    def one(what: str, fn: str, *args: Any) -> Any:
        return r.get(what, (fn, (handle, *args)))

    name = one("name", "nvmlDeviceGetName")
    uuid = one("uuid", "nvmlDeviceGetUUID")
    pci = one("pci", "nvmlDeviceGetPciInfo")
    cc = one("compute_capability", "nvmlDeviceGetCudaComputeCapability")
    attrs = one("attributes", "nvmlDeviceGetAttributes")
    mem = one("memory", "nvmlDeviceGetMemoryInfo")

    def watts(mw: Any) -> float | None:
        return None if mw is None else mw / 1000.0

    ecc_mode = one("ecc_mode", "nvmlDeviceGetEccMode")
    ecc: dict[str, Any] = {"enabled": None, "pending": None}
    if ecc_mode is not None:
        ecc = {"enabled": bool(ecc_mode[0]), "pending": bool(ecc_mode[1])}
        for kind, err in (("corrected", ERROR_CORRECTED), ("uncorrected", ERROR_UNCORRECTED)):
            for scope, counter in (("volatile", VOLATILE_ECC), ("aggregate", AGGREGATE_ECC)):
                ecc[f"{scope}_{kind}"] = one(f"ecc_{scope}_{kind}", "nvmlDeviceGetTotalEccErrors", err, counter)
    rows = one("remapped_rows", "nvmlDeviceGetRemappedRows")
    mig_mode = one("mig_mode", "nvmlDeviceGetMigMode")
    persistence = one("persistence_mode", "nvmlDeviceGetPersistenceMode")
    compute = one("compute_mode", "nvmlDeviceGetComputeMode")
    events = r.get("clock_events", ("nvmlDeviceGetCurrentClocksEventReasons", (handle,)),
                   ("nvmlDeviceGetCurrentClocksThrottleReasons", (handle,)))
    pci_id = None
    if pci is not None and getattr(pci, "pciDeviceId", None) is not None:
        dev_id = int(pci.pciDeviceId)
        pci_id = f"{dev_id & 0xFFFF:04x}:{(dev_id >> 16) & 0xFFFF:04x}"
    return NvmlGpu(
        index=index,
        name=_text(name) if name is not None else f"NVIDIA GPU {index}",
        uuid=_text(uuid) if uuid is not None else None,
        pci_bus_id=normalise_bus_id(getattr(pci, "busId", None)) if pci is not None else None,
        pci_id=pci_id,
        compute_capability=(int(cc[0]), int(cc[1])) if cc is not None else None,
        sm_count=int(attrs.multiprocessorCount) if attrs is not None and getattr(attrs, "multiprocessorCount", 0) else None,
        memory_bytes=int(mem.total) if mem is not None else None,
        memory_bus_width_bits=one("memory_bus_width", "nvmlDeviceGetMemoryBusWidth"),
        clocks_mhz={
            "sm": one("clock_sm", "nvmlDeviceGetClockInfo", CLOCK_SM),
            "sm_max": one("clock_sm_max", "nvmlDeviceGetMaxClockInfo", CLOCK_SM),
            "memory": one("clock_memory", "nvmlDeviceGetClockInfo", CLOCK_MEM),
            "memory_max": one("clock_memory_max", "nvmlDeviceGetMaxClockInfo", CLOCK_MEM),
            "graphics": one("clock_graphics", "nvmlDeviceGetClockInfo", CLOCK_GRAPHICS),
            "graphics_max": one("clock_graphics_max", "nvmlDeviceGetMaxClockInfo", CLOCK_GRAPHICS),
        },
        power_w={
            "draw": watts(one("power_draw", "nvmlDeviceGetPowerUsage")),
            "limit": watts(one("power_limit", "nvmlDeviceGetEnforcedPowerLimit")),
            "default_limit": watts(one("power_default_limit", "nvmlDeviceGetPowerManagementDefaultLimit")),
        },
        temperature_c={
            "gpu": one("temperature", "nvmlDeviceGetTemperature", TEMPERATURE_GPU),
            "slowdown": one("temperature_slowdown", "nvmlDeviceGetTemperatureThreshold", THRESHOLD_SLOWDOWN),
            "shutdown": one("temperature_shutdown", "nvmlDeviceGetTemperatureThreshold", THRESHOLD_SHUTDOWN),
            "gpu_max": one("temperature_gpu_max", "nvmlDeviceGetTemperatureThreshold", THRESHOLD_GPU_MAX),
        },
        pcie={
            "generation": one("pcie_generation", "nvmlDeviceGetCurrPcieLinkGeneration"),
            "generation_max": one("pcie_generation_max", "nvmlDeviceGetMaxPcieLinkGeneration"),
            "generation_gpu_max": one("pcie_generation_gpu_max", "nvmlDeviceGetGpuMaxPcieLinkGeneration"),
            "width": one("pcie_width", "nvmlDeviceGetCurrPcieLinkWidth"),
            "width_max": one("pcie_width_max", "nvmlDeviceGetMaxPcieLinkWidth"),
        },
        ecc=ecc,
        remapped_rows=dict(zip(("correctable", "uncorrectable", "pending", "failure"), map(int, rows))) if rows else None,
        mig={"enabled": bool(mig_mode[0]), "pending": bool(mig_mode[1])} if mig_mode is not None else {"enabled": None, "pending": None},
        persistence_mode=bool(persistence) if persistence is not None else None,
        compute_mode=COMPUTE_MODES.get(compute, str(compute)) if compute is not None else None,
        clock_events=decode_clock_events(int(events)) if events is not None else None,
        unsupported=tuple(r.unsupported),
    )


def _read_gpu_or_note(nvml: Any, index: int) -> NvmlGpu:
    try:
        return _read_gpu(nvml, index)
    except nvml.NVMLError as e:  # the handle itself failed: the GPU is lost or unusable
        return NvmlGpu(index=index, name=f"NVIDIA GPU {index}", unsupported=(f"handle: {_text(e)}",))


def probe_nvml(nvml: Any | None = None, *, loader: Callable[[], Any] | None = None) -> NvmlReport:
    """Everything NVML says about the driver and each GPU; an absent NVML is a report, not an error."""
    if nvml is None:
        try:
            nvml = (loader or load_nvml)()
        except ImportError:
            return NvmlReport(available=False, summary="nvidia-ml-py not installed",
                              reason="the nvidia-ml-py package (pynvml) is not installed", hint="pip install nvidia-ml-py")
    try:
        nvml.nvmlInit()
    except nvml.NVMLError as e:
        code = getattr(e, "value", None)
        summary, reason, hint = init_failure(code, _text(e))
        return NvmlReport(available=False, summary=summary, reason=reason, hint=hint, error_code=code)
    try:
        r = _Reader(nvml)
        driver = r.get("driver_version", ("nvmlSystemGetDriverVersion", ()))
        cuda = r.get("cuda_driver_version", ("nvmlSystemGetCudaDriverVersion_v2", ()),
                     ("nvmlSystemGetCudaDriverVersion", ()))
        count = nvml.nvmlDeviceGetCount()
        gpus = tuple(_read_gpu_or_note(nvml, i) for i in range(count))
    except nvml.NVMLError as e:
        return NvmlReport(available=False, summary=f"NVML error: {_text(e)}",
                          reason=f"NVML started but failed to list the GPUs ({_text(e)})",
                          hint="Run `nvidia-smi`; a GPU that has fallen off the bus needs a reset or a reboot.",
                          error_code=getattr(e, "value", None))
    finally:
        try:
            nvml.nvmlShutdown()
        except nvml.NVMLError:
            pass
    return NvmlReport(available=True, driver_version=_text(driver) if driver is not None else None,
                      cuda_driver_version=int(cuda) if cuda is not None else None, gpus=gpus)


class ClockEventWatcher:
    """A `timing.ThrottleProbe`: True when the GPU's clocks were held down (thermal, power, hardware slowdown)
    at the moment of the call. Keeps NVML initialised until `close()`."""

    def __init__(self, nvml: Any, pci_bus_id: str) -> None:
        self._nvml = nvml
        nvml.nvmlInit()
        try:
            self._handle = nvml.nvmlDeviceGetHandleByPciBusId(pci_bus_id)
        except nvml.NVMLError:
            nvml.nvmlShutdown()
            raise
        self._fn = getattr(nvml, "nvmlDeviceGetCurrentClocksEventReasons", None) or nvml.nvmlDeviceGetCurrentClocksThrottleReasons

    def __call__(self) -> bool:
        try:
            return bool(int(self._fn(self._handle)) & THROTTLE_MASK)
        except self._nvml.NVMLError:
            return False

    def close(self) -> None:
        try:
            self._nvml.nvmlShutdown()
        except self._nvml.NVMLError:
            pass
