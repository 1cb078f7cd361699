"""The capability profile: what this machine is, what is wrong with it and what it can do, as versioned JSON.

This module is the schema. Probes produce their own reports; `doctor.collect` turns them into these records, and
`tune`, `bench` and `export` read them back through `load_profile`, `cuda_target`, `limits_for_device` and
`find_measurement`. Everything here is data and pure functions, apart from `save_profile`/`load_profile`.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import platform
import tempfile
import uuid
from dataclasses import asdict, dataclass, field, replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Iterable, Mapping

from tracea_cli.errors import UsageError
from tracea_cli.files import write_atomic
from tracea_cli.target import DeviceLimits, Target

#: Bump when a field changes meaning or is removed; readers reject other versions and make a fresh profile.
SCHEMA_VERSION = 1

OK, WARN, FAIL, SKIPPED = "ok", "warn", "fail", "skipped"
STATUSES = (OK, WARN, FAIL, SKIPPED)

GIB = 1024**3


def now_iso() -> str:
    return datetime.now(timezone.utc).replace(microsecond=0).isoformat()


# ----------------------------------------------------------------------------------------------------------- records


class _Record:
    """JSON form of a flat record: its fields as they are; unknown keys are ignored when reading."""

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)  # type: ignore[call-overload]

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Any:
        return cls(**_known(cls, d))


@dataclass(frozen=True)
class Check(_Record):
    """One finding. `fix` is a command or step the user can take (empty when nothing needs fixing); a skipped
    check says why in `reason`. `device` names the GPU a per-device check looked at ("cuda:0", "nvml:1")."""

    id: str
    status: str
    evidence: str
    fix: str = ""
    reason: str = ""
    device: str | None = None

    def __post_init__(self) -> None:
        if self.status not in STATUSES:
            raise ValueError(f"unknown check status {self.status!r}")


@dataclass(frozen=True)
class Measurement(_Record):
    """A measured ceiling: the median over repeats and its noise (coefficient of variation), in `unit`.

    Rates are in base units (B/s, FLOP/s, OP/s), latencies in microseconds. `params` holds what was measured
    (bytes per run, GEMM shape, method). `datasheet` is the vendor's figure for the same quantity, when known.
    """

    device: str  # "cpu" or "cuda:N"
    metric: str  # memory_bandwidth | gemm_flops | launch_latency | h2d_bandwidth | d2h_bandwidth
    unit: str
    median: float
    cv: float
    n: int
    q1: float
    q3: float
    dtype: str | None = None
    threads: int | None = None
    device_class: str | None = None
    params: Mapping[str, Any] = field(default_factory=dict)
    throttled_fraction: float = 0.0
    datasheet: float | None = None
    datasheet_source: str | None = None
    created: str = ""
    busy: str = ""  # what other processes did on the CPUs while this was measured, when they competed ("" quiet)

    @property
    def key(self) -> tuple[str, str, str | None, int | None]:
        return (self.device, self.metric, self.dtype, self.threads)

    @property
    def percent_of_datasheet(self) -> float | None:
        if not self.datasheet:
            return None
        if self.unit == "us":  # a latency has no datasheet ceiling
            return None
        return 100.0 * self.median / self.datasheet

    def as_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["params"] = dict(self.params)
        d["percent_of_datasheet"] = _finite(self.percent_of_datasheet)
        for k in ("median", "cv", "q1", "q3"):
            d[k] = _finite(d[k])
        return d


@dataclass(frozen=True)
class NotMeasured(_Record):
    """A ceiling the doctor did not measure, and why (no library does fp8 here, out of memory, ...)."""

    device: str
    metric: str
    reason: str
    dtype: str | None = None
    threads: int | None = None

    @property
    def key(self) -> tuple[str, str, str | None, int | None]:
        return (self.device, self.metric, self.dtype, self.threads)


@dataclass(frozen=True)
class Absent(_Record):
    """Something the doctor looked for and did not find: what, why, and how to get it."""

    component: str
    reason: str
    hint: str = ""


@dataclass(frozen=True)
class HostInfo(_Record):
    os: str  # "Linux"
    os_release: str  # "Ubuntu 24.04.1 LTS" or the kernel release
    kernel: str
    machine: str  # "x86_64"
    hostname: str
    python: str
    container: bool
    packages: Mapping[str, str | None]  # distribution -> version, None when absent
    environment: Mapping[str, str]  # the variables that change what the doctor sees (CUDA_VISIBLE_DEVICES, ...)


@dataclass(frozen=True)
class CpuInfo(_Record):
    model: str
    vendor: str
    arch: str
    cores: int  # physical cores
    threads: int  # logical CPUs in the machine
    usable_threads: int  # logical CPUs this process may run on (affinity, cgroups)
    simd: tuple[str, ...]  # sse4_2, avx2, fma, avx512f, ..., amx_tile, neon, sve
    caches: Mapping[str, int]  # "L1d" -> bytes per core, "L2", "L3" -> bytes per instance
    memory_bytes: int | None
    memory_available_bytes: int | None
    max_mhz: float | None
    governors: tuple[str, ...]  # distinct cpufreq scaling governors; empty when the kernel exposes none

    @property
    def device_class(self) -> str:
        return cpu_device_class(self)

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "simd": list(self.simd), "governors": list(self.governors),
                "caches": dict(self.caches), "device_class": self.device_class}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "CpuInfo":
        d = _known(cls, d)
        return cls(**{**d, "simd": tuple(d.get("simd", ())), "governors": tuple(d.get("governors", ()))})


@dataclass(frozen=True)
class GpuInfo(_Record):
    """One GPU. `cuda_index` is its CUDA ordinal as this process sees it (None when CUDA cannot see it);
    `limits` are what kernels are built against (from the CUDA runtime, else the per-architecture table)."""

    vendor: str  # nvidia | amd | apple
    name: str
    device_class: str
    cuda_index: int | None = None
    nvml_index: int | None = None
    uuid: str | None = None
    pci_bus_id: str | None = None
    pci_id: str | None = None  # "10de:2335"
    compute_capability: tuple[int, int] | None = None
    sm_count: int | None = None  # SMs (NVIDIA) or compute units (AMD), GPU cores (Apple)
    memory_bytes: int | None = None
    limits: DeviceLimits | None = None
    limits_source: str = "none"  # cuda-runtime | arch-table | none
    index_source: str = "none"  # how cuda_index was found: cuda-runtime | inferred | none
    datasheet: str | None = None  # name of the matched datasheet profile
    details: Mapping[str, Any] = field(default_factory=dict)  # clocks, power, temperatures, PCIe, ECC, MIG, ...

    @property
    def label(self) -> str:
        if self.cuda_index is not None:
            return f"cuda:{self.cuda_index}"
        if self.nvml_index is not None:
            return f"nvml:{self.nvml_index}"
        return f"{self.vendor}:{self.pci_bus_id or self.name}"

    def as_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["limits"] = self.limits.as_dict() if self.limits else None
        d["compute_capability"] = list(self.compute_capability) if self.compute_capability else None
        d["details"] = _jsonable(self.details)
        return d

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "GpuInfo":
        d = _known(cls, d)
        cc = d.get("compute_capability")
        lim = d.get("limits")
        return cls(**{**d, "compute_capability": tuple(cc) if cc else None,
                      "limits": DeviceLimits.from_dict(lim) if lim else None})


@dataclass(frozen=True)
class ToolchainInfo(_Record):
    nvrtc_version: str | None = None
    nvrtc_archs: tuple[str, ...] = ()
    cuda_runtime_version: int | None = None  # 13000 means 13.0
    cuda_driver_version: int | None = None  # the CUDA version the driver supports
    driver_version: str | None = None  # "580.159.04"
    cupy_distribution: str | None = None  # "cupy-cuda13x"
    cupy_version: str | None = None
    cupy_cuda_major: int | None = None  # the CUDA major the CuPy build targets

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "nvrtc_archs": list(self.nvrtc_archs)}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "ToolchainInfo":
        d = _known(cls, d)
        return cls(**{**d, "nvrtc_archs": tuple(d.get("nvrtc_archs", ()))})


@dataclass(frozen=True)
class CapabilityProfile:
    """The document `tracea doctor` writes. `kind` is how this run was made (quick | full); `measured` may come
    from an earlier full run on the same machine (`measured_created` says when)."""

    machine_id: str
    created: str
    kind: str
    host: HostInfo
    cpu: CpuInfo
    toolchain: ToolchainInfo
    gpus: tuple[GpuInfo, ...] = ()
    checks: tuple[Check, ...] = ()
    measured: tuple[Measurement, ...] = ()
    not_measured: tuple[NotMeasured, ...] = ()
    absent: tuple[Absent, ...] = ()
    measured_created: str | None = None
    schema_version: int = SCHEMA_VERSION
    tracea_version: str = ""

    def __post_init__(self) -> None:
        if not self.tracea_version:
            from tracea_cli import __version__

            object.__setattr__(self, "tracea_version", __version__)

    @property
    def cuda_gpus(self) -> tuple[GpuInfo, ...]:
        """NVIDIA GPUs CUDA can see, in CUDA ordinal order."""
        return tuple(sorted((g for g in self.gpus if g.vendor == "nvidia" and g.cuda_index is not None),
                            key=lambda g: g.cuda_index))  # type: ignore[arg-type, return-value]

    def as_dict(self) -> dict[str, Any]:
        return {
            "schema_version": self.schema_version,
            "tracea_version": self.tracea_version,
            "created": self.created,
            "kind": self.kind,
            "machine_id": self.machine_id,
            "host": self.host.as_dict(),
            "cpu": self.cpu.as_dict(),
            "toolchain": self.toolchain.as_dict(),
            "gpus": [g.as_dict() for g in self.gpus],
            "checks": [c.as_dict() for c in self.checks],
            "measured": [m.as_dict() for m in self.measured],
            "measured_created": self.measured_created,
            "not_measured": [m.as_dict() for m in self.not_measured],
            "absent": [a.as_dict() for a in self.absent],
        }

    def to_json(self) -> str:
        return json.dumps(self.as_dict(), indent=2, allow_nan=False) + "\n"

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "CapabilityProfile":
        version = d.get("schema_version")
        if version != SCHEMA_VERSION:
            raise ValueError(f"profile schema version {version!r}, this tracea reads {SCHEMA_VERSION}")
        return cls(
            schema_version=SCHEMA_VERSION,
            tracea_version=str(d.get("tracea_version", "")),
            created=d["created"],
            kind=d.get("kind", "quick"),
            machine_id=d["machine_id"],
            host=HostInfo.from_dict(d["host"]),
            cpu=CpuInfo.from_dict(d["cpu"]),
            toolchain=ToolchainInfo.from_dict(d.get("toolchain", {})),
            gpus=tuple(GpuInfo.from_dict(g) for g in d.get("gpus", ())),
            checks=tuple(Check.from_dict(c) for c in d.get("checks", ())),
            measured=tuple(Measurement.from_dict(m) for m in d.get("measured", ())),
            not_measured=tuple(NotMeasured.from_dict(m) for m in d.get("not_measured", ())),
            absent=tuple(Absent.from_dict(a) for a in d.get("absent", ())),
            measured_created=d.get("measured_created"),
        )


# ------------------------------------------------------------------------------------------------ identity strings


def device_class(
    name: str,
    *,
    compute_capability: tuple[int, int] | None,
    sm_count: int | None,
    memory_bytes: int | None,
    max_sm_clock_mhz: int | None,
    max_memory_clock_mhz: int | None,
) -> str:
    """What makes two GPUs interchangeable for tuning: name, compute capability, SM count, memory size (whole GiB)
    and maximum clocks. Stable across runs and machines; part of every cache key.

    >>> device_class("NVIDIA H200", compute_capability=(9, 0), sm_count=132, memory_bytes=150754820096,
    ...              max_sm_clock_mhz=1980, max_memory_clock_mhz=3201)
    'NVIDIA H200 | sm_90 | 132 SMs | 140 GiB | 1980/3201 MHz'
    """
    parts = [" ".join(name.split())]
    parts.append(f"sm_{compute_capability[0]}{compute_capability[1]}" if compute_capability else "sm_?")
    parts.append(f"{sm_count} SMs" if sm_count else "? SMs")
    parts.append(f"{round(memory_bytes / GIB)} GiB" if memory_bytes else "? GiB")
    sm = str(max_sm_clock_mhz) if max_sm_clock_mhz else "?"
    mem = str(max_memory_clock_mhz) if max_memory_clock_mhz else "?"
    parts.append(f"{sm}/{mem} MHz")
    return " | ".join(parts)


_SIMD_RANK = ("amx_tile", "avx512_fp16", "avx512_bf16", "avx512f", "avx2", "sse4_2", "sve2", "sve", "neon")


def cpu_device_class(cpu: CpuInfo) -> str:
    """What makes two CPUs interchangeable for tuning CPU kernels: model, usable threads and widest vector ISA."""
    isa = next((s for s in _SIMD_RANK if s in cpu.simd), "scalar")
    return f"{' '.join(cpu.model.split())} | {cpu.usable_threads} threads | {isa}"


OS_MACHINE_ID_FILES = (Path("/etc/machine-id"), Path("/var/lib/dbus/machine-id"))
KEPT_ID_FILE = "machine-id"  # in the data folder: the id made once where the OS has none


def machine_id(data_dir: Path | None = None, *, machine_id_files: Iterable[Path] | None = None) -> str:
    """A stable, anonymous identifier of this machine: a hash of the OS machine id. Where there is none (a container
    without /etc/machine-id), a random id made once and kept in `data_dir` (created atomically, so that two processes
    starting together agree); a process that can keep nothing falls back to the host name (and the MAC, when the
    machine has one: `uuid.getnode` invents a different one in each process when it finds none)."""
    source = _first_line(OS_MACHINE_ID_FILES if machine_id_files is None else machine_id_files)
    if not source and data_dir is not None:
        source = _kept_id(Path(data_dir) / KEPT_ID_FILE)
    if not source:
        node = uuid.getnode()
        invented = bool(node & (1 << 40))  # the multicast bit: set on the random numbers getnode makes up
        source = platform.node() + ("" if invented else f"|{node:012x}")
    return hashlib.sha256(f"tracea|{source}".encode()).hexdigest()[:16]


def _first_line(paths: Iterable[Path]) -> str:
    for path in paths:
        try:
            text = Path(path).read_text(errors="replace").strip()
        except OSError:
            continue
        if text:
            return text.splitlines()[0].strip()
    return ""


def _kept_id(path: Path) -> str:
    """The id kept at `path`, made there first when absent: written to a temporary file and linked into place, which
    fails when another process got there first (then its id is the one). "" when the folder cannot be written."""
    kept = _first_line((path,))
    if kept:
        return kept
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    except OSError:
        return ""
    try:
        with os.fdopen(fd, "w") as f:
            f.write(uuid.uuid4().hex + "\n")
        try:
            os.link(tmp, path)
        except FileExistsError:
            pass
        except OSError:
            return ""
    finally:
        os.unlink(tmp)
    return _first_line((path,))


# ---------------------------------------------------------------------------------------------- reading the profile


def cuda_gpu(profile: CapabilityProfile, device_index: int) -> GpuInfo:
    """The GPU with CUDA ordinal `device_index`; UsageError when there is none."""
    for gpu in profile.cuda_gpus:
        if gpu.cuda_index == device_index:
            return gpu
    seen = f"CUDA devices 0..{len(profile.cuda_gpus) - 1}" if profile.cuda_gpus else "no CUDA device"
    raise UsageError(f"device {device_index} does not exist: the profile lists {seen}.",
                     "Run `tracea doctor` to see the devices and why any are missing.")


def limits_for_device(profile: CapabilityProfile, device_index: int) -> DeviceLimits:
    """The limits kernels for CUDA device `device_index` are built against."""
    gpu = cuda_gpu(profile, device_index)
    if gpu.limits is None:
        raise UsageError(f"the limits of device {device_index} ({gpu.name}) are unknown.",
                         "Install the CUDA extra (pip install 'tracea[cuda]') and run `tracea doctor`.")
    return gpu.limits


def cuda_target(profile: CapabilityProfile, device_index: int) -> Target:
    """Where CUDA kernels for device `device_index` are built and run."""
    gpu = cuda_gpu(profile, device_index)
    limits = limits_for_device(profile, device_index)
    return Target(backend="cuda", device_class=gpu.device_class, arch=limits.arch, limits=limits,
                  device_index=device_index)


def cpu_target(profile: CapabilityProfile, threads: int | None = None) -> Target:
    """Where CPU kernels run: this CPU with `threads` threads (default: every usable thread)."""
    return Target(backend="cpu", device_class=profile.cpu.device_class, threads=threads or profile.cpu.usable_threads)


def find_measurement(
    profile: CapabilityProfile, *, device: str, metric: str, dtype: str | None = None, threads: int | None = None
) -> Measurement | None:
    """A measured ceiling, e.g. `find_measurement(p, device="cuda:0", metric="gemm_flops", dtype="bf16")`.

    For the CPU, `threads=None` picks the measurement with the most threads."""
    found = [m for m in profile.measured
             if m.device == device and m.metric == metric and m.dtype == dtype and (threads is None or m.threads == threads)]
    return max(found, key=lambda m: m.threads or 0) if found else None


def merge_measured(
    old: CapabilityProfile | None, new_measured: Iterable[Measurement], new_not_measured: Iterable[NotMeasured],
    *, machine: str,
) -> tuple[tuple[Measurement, ...], tuple[NotMeasured, ...], str | None]:
    """Measurements of this run replace earlier ones with the same key (device, metric, dtype, threads); earlier
    ones this run did not repeat are kept, so `--quick` never drops a measured profile's figures. A rate measured
    on a busy machine does not replace a higher one measured quietly (the busy figure is the machine's, not the
    hardware's). Profiles from another machine contribute nothing."""
    new_measured, new_not_measured = tuple(new_measured), tuple(new_not_measured)
    keep_old = old is not None and old.machine_id == machine
    if keep_old:
        quiet = {m.key: m for m in old.measured if not m.busy}
        new_measured = tuple(quiet[m.key] if m.busy and m.key in quiet and m.unit != "us" and quiet[m.key].median > m.median
                             else m for m in new_measured)
    fresh = {m.key for m in new_measured} | {m.key for m in new_not_measured}
    measured = list(new_measured)
    not_measured = list(new_not_measured)
    created = now_iso() if new_measured else None
    if keep_old:
        assert old is not None
        measured += [m for m in old.measured if m.key not in fresh]
        not_measured += [m for m in old.not_measured if m.key not in fresh and m.key not in {x.key for x in measured}]
        if created is None:
            created = old.measured_created
    return tuple(measured), tuple(not_measured), created


def save_profile(profile: CapabilityProfile, path: Path) -> Path:
    """Write the profile atomically; UsageError (exit 2) when `path` cannot be written."""
    return write_atomic(Path(path), profile.to_json(), what="capability profile")


def load_profile(path: Path) -> CapabilityProfile | None:
    """The profile at `path`, or None when it is missing, unreadable, of another schema version or malformed."""
    try:
        data = json.loads(Path(path).read_text())
        return CapabilityProfile.from_dict(data)
    except (OSError, ValueError, KeyError, TypeError):
        return None


# ----------------------------------------------------------------------------------------------------- helpers


def _known(cls: type, d: Mapping[str, Any]) -> dict[str, Any]:
    names = cls.__dataclass_fields__  # type: ignore[attr-defined]
    return {k: v for k, v in d.items() if k in names}


def _finite(x: float | None) -> float | None:
    return x if x is None or math.isfinite(x) else None


def _jsonable(value: Any) -> Any:
    """Mappings and sequences of plain values, as JSON can hold them (tuples become lists, NaN becomes null)."""
    if isinstance(value, Mapping):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if isinstance(value, float):
        return _finite(value)
    return value


def with_limits(limits: DeviceLimits, *, sm_count: int | None, l2_bytes: int | None) -> DeviceLimits:
    """An architecture's limits completed with a present device's SM count and L2 size."""
    return replace(limits, sm_count=sm_count if sm_count is not None else limits.sm_count,
                   l2_bytes=l2_bytes if l2_bytes is not None else limits.l2_bytes)
