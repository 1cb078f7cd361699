"""The host: operating system, Python and package versions, the CPU, and what the system shows of its devices.

Reads files under /proc, /sys and /dev (their roots are parameters, so tests can hand in a fake tree) and asks
`importlib.metadata` for versions: nothing here imports a package it reports on, so this stays fast.
"""

from __future__ import annotations

import os
import platform
import re
import subprocess
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Callable, Mapping

from tracea_cli.doctor.profile import CpuInfo, HostInfo

#: distributions whose versions the profile records (None when absent)
PACKAGES = (
    "tracea", "numpy", "numba", "llvmlite", "cupy-cuda13x", "cupy-cuda12x", "cupy-cuda11x", "cupy",
    "nvidia-ml-py", "nvidia-cuda-nvrtc", "nvidia-cuda-runtime", "cuda-bindings", "cuda-pathfinder", "ml_dtypes",
    "scikit-optimize", "scikit-learn", "threadpoolctl", "torch", "pyamdgpuinfo", "typer", "rich",
)

#: variables that change which devices the doctor sees or how libraries behave
ENVIRONMENT = (
    "CUDA_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER", "NVIDIA_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES",
    "ROCR_VISIBLE_DEVICES", "CUPY_TF32", "OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS",
    "NUMBA_NUM_THREADS", "NUMBA_THREADING_LAYER",
)

#: instruction-set features worth knowing for kernels, as Linux names them in /proc/cpuinfo
SIMD_FLAGS = (
    "sse4_2", "avx", "avx2", "fma", "f16c", "avx512f", "avx512cd", "avx512bw", "avx512dq", "avx512vl",
    "avx512_vnni", "avx512_bf16", "avx512_fp16", "avx512ifma", "avx512vbmi", "amx_tile", "amx_bf16", "amx_int8",
    "asimd", "asimdhp", "sve", "sve2", "i8mm", "bf16",
)


def package_versions(names: tuple[str, ...] = PACKAGES) -> dict[str, str | None]:
    out: dict[str, str | None] = {}
    for name in names:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = None
    if out.get("tracea") is None:  # running from a source checkout
        from tracea_cli import __version__

        out["tracea"] = __version__
    return out


def in_container(root: Path = Path("/")) -> bool:
    if (root / ".dockerenv").exists() or (root / "run/.containerenv").exists():
        return True
    try:
        cgroup = (root / "proc/1/cgroup").read_text()
    except OSError:
        return False
    return bool(re.search(r"docker|kubepods|containerd|libpod|lxc", cgroup))


def _os_release(root: Path = Path("/")) -> str:
    try:
        for line in (root / "etc/os-release").read_text().splitlines():
            if line.startswith("PRETTY_NAME="):
                return line.split("=", 1)[1].strip().strip('"')
    except OSError:
        pass
    if platform.system() == "Darwin":
        return f"macOS {platform.mac_ver()[0]}"
    return f"{platform.system()} {platform.release()}"


def probe_host(env: Mapping[str, str], *, packages: Mapping[str, str | None] | None = None) -> HostInfo:
    return HostInfo(
        os=platform.system(),
        os_release=_os_release(),
        kernel=platform.release(),
        machine=platform.machine(),
        hostname=platform.node(),
        python=f"{platform.python_implementation()} {platform.python_version()}",
        container=in_container(),
        packages=dict(packages if packages is not None else package_versions()),
        environment={k: env[k] for k in ENVIRONMENT if k in env},
    )


# ------------------------------------------------------------------------------------------------------------ CPU


def _read(path: Path) -> str | None:
    try:
        return path.read_text().strip()
    except OSError:
        return None


def _size_bytes(text: str) -> int | None:
    m = re.fullmatch(r"(\d+)\s*([KMG]?)i?B?", text.strip(), re.I)
    if not m:
        return None
    return int(m[1]) * {"": 1, "K": 1024, "M": 1024**2, "G": 1024**3}[m[2].upper()]


def _linux_caches(sys_root: Path) -> dict[str, int]:
    caches: dict[str, int] = {}
    for index in sorted((sys_root / "devices/system/cpu/cpu0/cache").glob("index*")):
        level, kind, size = (_read(index / n) for n in ("level", "type", "size"))
        if not (level and kind and size):
            continue
        name = f"L{level}" + {"Data": "d", "Instruction": "i"}.get(kind, "")
        if (b := _size_bytes(size)) is not None:
            caches[name] = b
    return caches


def _meminfo(proc_root: Path) -> tuple[int | None, int | None]:
    text = _read(proc_root / "meminfo") or ""
    values = {m[1]: int(m[2]) * 1024 for m in re.finditer(r"^(\w+):\s+(\d+) kB", text, re.M)}
    return values.get("MemTotal"), values.get("MemAvailable")


def _usable_threads() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def probe_cpu(*, proc_root: Path = Path("/proc"), sys_root: Path = Path("/sys"),
              run: Callable[..., subprocess.CompletedProcess] = subprocess.run) -> CpuInfo:
    """The CPU: model, cores and threads, SIMD features, caches, memory and frequency governors."""
    if platform.system() == "Darwin":
        return _probe_cpu_macos(run)
    text = _read(proc_root / "cpuinfo") or ""
    first = text.split("\n\n", 1)[0]

    def field(name: str) -> str | None:
        m = re.search(rf"^{name}\s*:\s*(.*)$", first, re.M | re.I)
        return m[1].strip() if m else None

    flags = set((field("flags") or field("Features") or "").split())
    simd = [f for f in SIMD_FLAGS if f in flags]
    if "asimd" in flags:
        simd.append("neon")
    cores = {(m[1], m[2]) for m in re.finditer(r"physical id\s*:\s*(\d+).*?core id\s*:\s*(\d+)", text, re.S)}
    threads = os.cpu_count() or 1
    total, available = _meminfo(proc_root)
    governors = sorted({g for p in (sys_root / "devices/system/cpu").glob("cpu[0-9]*/cpufreq/scaling_governor")
                        if (g := _read(p))})
    max_khz = _read(sys_root / "devices/system/cpu/cpu0/cpufreq/cpuinfo_max_freq")
    model = field("model name") or field("Model") or field("Hardware") or platform.processor() or "unknown CPU"
    return CpuInfo(
        model=model,
        vendor=field("vendor_id") or field("CPU implementer") or "",
        arch=platform.machine(),
        cores=len(cores) or threads,
        threads=threads,
        usable_threads=_usable_threads(),
        simd=tuple(simd),
        caches=_linux_caches(sys_root),
        memory_bytes=total,
        memory_available_bytes=available,
        max_mhz=int(max_khz) / 1000 if max_khz and max_khz.isdigit() else None,
        governors=tuple(governors),
    )


def _sysctl(run: Callable[..., subprocess.CompletedProcess], *names: str) -> dict[str, str]:
    try:
        out = run(["sysctl", *names], capture_output=True, text=True, timeout=5).stdout
    except (OSError, subprocess.SubprocessError):
        return {}
    return {k.strip(): v.strip() for line in out.splitlines() if ":" in line for k, v in [line.split(":", 1)]}


def _probe_cpu_macos(run: Callable[..., subprocess.CompletedProcess]) -> CpuInfo:
    v = _sysctl(run, "machdep.cpu.brand_string", "hw.physicalcpu", "hw.logicalcpu", "hw.memsize",
                "hw.l1dcachesize", "hw.l2cachesize", "hw.optional.arm.FEAT_BF16", "hw.optional.avx2_0",
                "hw.optional.avx512f")
    simd = ["neon"] if platform.machine() == "arm64" else []
    simd += [f for f, key in (("bf16", "hw.optional.arm.FEAT_BF16"), ("avx2", "hw.optional.avx2_0"),
                              ("avx512f", "hw.optional.avx512f")) if v.get(key) == "1"]
    caches = {name: int(v[key]) for name, key in (("L1d", "hw.l1dcachesize"), ("L2", "hw.l2cachesize"))
              if v.get(key, "").isdigit()}
    threads = int(v["hw.logicalcpu"]) if v.get("hw.logicalcpu", "").isdigit() else (os.cpu_count() or 1)
    return CpuInfo(
        model=v.get("machdep.cpu.brand_string") or platform.processor() or "unknown CPU",
        vendor="Apple" if platform.machine() == "arm64" else "",
        arch=platform.machine(),
        cores=int(v["hw.physicalcpu"]) if v.get("hw.physicalcpu", "").isdigit() else threads,
        threads=threads,
        usable_threads=threads,
        simd=tuple(simd),
        caches=caches,
        memory_bytes=int(v["hw.memsize"]) if v.get("hw.memsize", "").isdigit() else None,
        memory_available_bytes=None,
        max_mhz=None,
        governors=(),
    )


# ------------------------------------------------------------------------------------------ devices the system shows


@dataclass(frozen=True)
class PciDevice:
    bus_id: str  # "0000:19:00.0"
    pci_id: str  # "10de:2335"
    pci_class: int  # 0x030200


@dataclass(frozen=True)
class DeviceFile:
    path: str
    readable: bool
    writable: bool

    @property
    def usable(self) -> bool:
        return self.readable and self.writable


NVIDIA_VENDOR, AMD_VENDOR = "10de", "1002"
_GPU_CLASSES = (0x03, 0x12)  # display controllers; processing accelerators (Instinct MI300X)


def pci_gpus(sys_root: Path = Path("/sys")) -> tuple[PciDevice, ...]:
    """Display controllers and accelerators on the PCI bus (whether or not a driver claims them)."""
    found = []
    for dev in sorted((sys_root / "bus/pci/devices").glob("*")):
        vendor, device, cls = (_read(dev / n) for n in ("vendor", "device", "class"))
        if not (vendor and device and cls):
            continue
        try:
            pci_class = int(cls, 16)
            pci_id = f"{int(vendor, 16):04x}:{int(device, 16):04x}"
        except ValueError:
            continue
        if pci_class >> 16 in _GPU_CLASSES:
            found.append(PciDevice(bus_id=dev.name.lower(), pci_id=pci_id, pci_class=pci_class))
    return tuple(found)


def device_files(patterns: tuple[str, ...], *, dev_root: Path = Path("/dev"),
                 access: Callable[[str, int], bool] = os.access) -> tuple[DeviceFile, ...]:
    """Device files matching `patterns` under /dev and whether this process may read and write them."""
    paths = sorted({p for pattern in patterns for p in dev_root.glob(pattern)})
    return tuple(DeviceFile(path=str(p), readable=access(str(p), os.R_OK), writable=access(str(p), os.W_OK))
                 for p in paths)
