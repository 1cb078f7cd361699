"""The checks: pure functions from `Facts` to findings, each with a status, the evidence and a fix the user can run.

A check that does not apply here (no GPU of that kind, a value the driver does not report) is `skipped` and says
why. Per-GPU checks give one finding per NVIDIA GPU, labelled with its CUDA ordinal.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from tracea_cli.doctor import amd as amd_probe
from tracea_cli.doctor import cuda_runtime
from tracea_cli.doctor.collect import Facts, toolchain_hint
from tracea_cli.doctor.nvidia import HARDWARE_REASONS, THERMAL_REASONS, NvmlGpu
from tracea_cli.doctor.profile import FAIL, OK, SKIPPED, WARN, Check
from tracea_cli.doctor.toolchain import MIN_DRIVER, cuda_version_text
from tracea_cli.errors import UsageError


@dataclass(frozen=True)
class CheckSpec:
    id: str
    title: str
    run: Callable[[Facts], list[Check]]
    full_only: bool = False  # needs work the quick run skips


def _skip(id: str, reason: str, device: str | None = None) -> Check:
    return Check(id=id, status=SKIPPED, evidence=reason, reason=reason, device=device)


def _version_tuple(text: str | None) -> tuple[int, int] | None:
    try:
        major, minor = (text or "").split(".")[:2]
        return int(major), int(minor)
    except ValueError:
        return None


# ------------------------------------------------------------------------------------------------ toolchain checks


def check_driver_version(f: Facts) -> list[Check]:
    id = "driver-version"
    driver_cuda = f.nvml.cuda_driver_version or f.runtime.driver_version
    if driver_cuda is None:
        why = "; ".join(filter(None, [f.nvml.summary, f.runtime.reason]))
        return [_skip(id, f"no NVIDIA driver answered ({why or 'no GPU'})")]
    tc = f.toolchain
    if driver_cuda <= 0:  # cudaDriverGetVersion's answer when libcuda is there but no driver is loaded
        return [Check(id, WARN, "no NVIDIA driver is loaded (it reports CUDA version 0)" + (
                          f"; {tc.cupy_distribution} {tc.cupy_version} is installed but cannot run" if tc.cupy_distribution else ""),
                      "Install the NVIDIA driver for this machine's GPU; without a GPU, the CPU backend needs no cuda extra "
                      "(pip install tracea).")]
    drv = (driver_cuda // 1000, (driver_cuda % 1000) // 10)
    evidence = [f"the driver {tc.driver_version or ''} supports CUDA {cuda_version_text(driver_cuda)}".replace("  ", " ")]
    if tc.cupy_cuda_major:
        evidence.append(f"{tc.cupy_distribution} {tc.cupy_version} is built for CUDA {tc.cupy_cuda_major}")
    if tc.nvrtc_version:
        evidence.append(f"NVRTC is {tc.nvrtc_version}")
    text = "; ".join(evidence)
    need = tc.cupy_cuda_major
    if need and drv[0] < need:
        return [Check(id, FAIL, text + ": CuPy cannot use this driver",
                      f"Upgrade the NVIDIA driver to {MIN_DRIVER.get(need, 'a release supporting CUDA ' + str(need))} or "
                      f"newer, or install the CuPy build for this driver: pip install cupy-cuda{drv[0]}x")]
    nv = _version_tuple(tc.nvrtc_version)
    if nv and nv[0] > drv[0]:
        return [Check(id, FAIL, text + ": kernels compiled by this NVRTC cannot be loaded by the driver",
                      f"Upgrade the driver to {MIN_DRIVER.get(nv[0], 'one supporting CUDA ' + str(nv[0]))} or newer, or "
                      f"install a matching NVRTC: pip install 'nvidia-cuda-nvrtc=={drv[0]}.{drv[1]}.*'")]
    if nv and nv > drv:
        return [Check(id, WARN, text + ": cubins load, but PTX from this newer NVRTC cannot be JIT-compiled by the driver",
                      f"pip install 'nvidia-cuda-nvrtc=={drv[0]}.{drv[1]}.*' (or upgrade the driver)")]
    return [Check(id, OK, text)]


def check_nvrtc(f: Facts) -> list[Check]:
    if f.nvrtc.available:
        archs = f.nvrtc.archs
        span = f"; targets {archs[0]}..{archs[-1]}" if archs else ""
        return [Check("nvrtc", OK, f"NVRTC {f.nvrtc.version} loads{span}")]
    status = FAIL if f.nvidia_hardware else WARN
    return [Check("nvrtc", status, f"{f.nvrtc.reason} GPU kernels can be neither tuned nor exported", toolchain_hint())]


def check_tensor_cores(f: Facts) -> list[Check]:
    id = "nvrtc-tensor-core"
    if not f.nvrtc.available:
        return [_skip(id, "NVRTC is missing (see the nvrtc check)")]
    if not f.tensor_cores:
        return [_skip(id, "no NVIDIA GPU here, so no architecture to compile for")]
    out = []
    for probe in f.tensor_cores:
        if probe.ok:
            out.append(Check(id, OK, probe.detail, device=probe.arch))
        else:
            out.append(Check(id, FAIL, probe.detail,
                             f"Install an NVRTC that supports {probe.arch} (pip install 'nvidia-cuda-nvrtc==12.9.*' for "
                             "Volta and older, a newer release for GPUs newer than this NVRTC)", device=probe.arch))
    return out


def check_nvml(f: Facts) -> list[Check]:
    if f.nvml.available:
        return [Check("nvml", OK, f"NVML (driver {f.nvml.driver_version}) lists {len(f.nvml.gpus)} NVIDIA GPU(s)")]
    if "not installed" in f.nvml.summary:
        return [Check("nvml", WARN, f"{f.nvml.reason}: GPUs, clocks and throttling cannot be inspected", f.nvml.hint)]
    if f.nvidia_hardware:
        return [Check("nvml", WARN, f"{f.nvml.reason}, yet this machine shows NVIDIA hardware", f.nvml.hint)]
    return [_skip("nvml", f"no NVIDIA GPU on this machine ({f.nvml.summary})")]


def check_cupy(f: Facts) -> list[Check]:
    rt = f.runtime
    if rt.available:
        evidence = (f"CuPy {rt.cupy_version} sees {len(rt.devices)} device(s) through the CUDA runtime "
                    f"{cuda_version_text(rt.runtime_version)}")
        if not f.host.packages.get("ml_dtypes"):
            return [Check("cupy", WARN, evidence + "; ml_dtypes is missing, so CuPy has no bf16 arrays",
                          "pip install ml_dtypes")]
        return [Check("cupy", OK, evidence)]
    if not rt.installed:
        if f.nvidia_hardware:
            return [Check("cupy", WARN, "CuPy is not installed: no GPU kernel can run or be measured here",
                          cuda_runtime.INSTALL_HINT)]
        return [_skip("cupy", f"no NVIDIA GPU here; CuPy is needed only for GPU work: {cuda_runtime.INSTALL_HINT}")]
    if f.nvml.gpus:
        return [Check("cupy", FAIL, f"NVML lists {len(f.nvml.gpus)} GPU(s) but {rt.reason}", rt.hint)]
    return [_skip("cupy", f"no NVIDIA GPU here ({rt.reason})")]


def check_gpus_visible(f: Facts) -> list[Check]:
    id = "gpus-visible"
    visible = f.env.get("CUDA_VISIBLE_DEVICES")
    on_pci = len(f.nvidia_on_pci)
    listed = len(f.nvml.gpus)
    if not f.nvidia_hardware:
        return [_skip(id, "no NVIDIA GPU on the PCI bus, no NVIDIA device files, no NVIDIA driver")]
    blocked = [d.path for d in f.nvidia_files if not d.usable]
    if blocked:
        return [Check(id, FAIL, f"this user may not read and write {', '.join(blocked)}",
                      "Add the user to the group that owns them (`ls -l /dev/nvidia*`, then `sudo usermod -aG GROUP $USER`"
                      " and log in again), or fix the udev rules")]
    if not f.nvml.available and on_pci:
        container = f.host.container
        fix = ("Start the container with GPU access: `docker run --gpus all ...` (NVIDIA Container Toolkit), or the "
               "Kubernetes resource nvidia.com/gpu" if container else
               "Install the NVIDIA driver; `nvidia-smi` should then list the GPU(s)")
        where = " inside a container" if container else ""
        return [Check(id, FAIL, f"{on_pci} NVIDIA GPU(s) on the PCI bus, but no NVIDIA driver is reachable{where} "
                                f"({f.nvml.reason})", fix)]
    if visible is not None and visible.strip() in ("", "-1", "NoDevFiles", "none"):
        return [Check(id, FAIL, f"CUDA_VISIBLE_DEVICES={visible!r} hides all {listed} GPU(s) from CUDA",
                      "unset CUDA_VISIBLE_DEVICES (or list the GPUs to use, e.g. CUDA_VISIBLE_DEVICES=0)")]
    if f.runtime.available and len(f.runtime.devices) < listed:
        seen = len(f.runtime.devices)
        if visible is not None:
            return [Check(id, WARN, f"CUDA sees {seen} of the {listed} GPUs NVML lists: CUDA_VISIBLE_DEVICES={visible!r}",
                          "unset CUDA_VISIBLE_DEVICES to use them all (fine to leave if intended)")]
        return [Check(id, WARN, f"CUDA sees {seen} of the {listed} GPUs NVML lists",
                      "Check `nvidia-smi` for GPUs in MIG mode or in an error state, and the container's GPU list")]
    if on_pci > listed and f.nvml.available:
        return [Check(id, WARN, f"{on_pci} NVIDIA GPU(s) on the PCI bus, NVML lists {listed}",
                      "Check `nvidia-smi` and `dmesg | grep -i nvrm` for a GPU the driver failed to initialise, or a "
                      "container that was given only some GPUs")]
    seen = f"CUDA sees {len(f.runtime.devices)}" if f.runtime.available else "CUDA not asked (no CuPy)"
    note = f"; CUDA_VISIBLE_DEVICES={visible!r}" if visible is not None else ""
    return [Check(id, OK, f"NVML lists {listed} GPU(s), {seen}{note}")]


# ---------------------------------------------------------------------------------------------- per-GPU checks


def _per_gpu(id: str, f: Facts, judge: Callable[[NvmlGpu, str], Check]) -> list[Check]:
    if not f.nvml.gpus:
        why = "NVML lists no NVIDIA GPU" if f.nvml.available else f"no NVIDIA GPU visible to NVML ({f.nvml.summary})"
        return [_skip(id, why)]
    labels = {g.nvml_index: g.label for g in f.gpus}
    return [judge(g, labels.get(g.index, f"nvml:{g.index}")) for g in f.nvml.gpus]


def _clocks(g: NvmlGpu, label: str) -> Check:
    id = "clocks-throttled"
    if g.clock_events is None:
        return _skip(id, "NVML does not report clock-event reasons for this GPU", label)
    t, p = g.temperature_c, g.power_w
    temps = f"temperature {t.get('gpu')} °C (slowdown at {t.get('slowdown')} °C)"
    power = f"power {p.get('draw')} W of a {p.get('limit')} W limit (default {p.get('default_limit')} W)"
    reasons = ", ".join(g.clock_events) or "none"
    serious = [r for r in g.clock_events if r in THERMAL_REASONS + HARDWARE_REASONS]
    n = g.index
    if serious:
        if "hw_power_brake_slowdown" in serious:
            fix = ("The board's power brake is engaged: check the power supply's capacity and cabling; "
                   f"`nvidia-smi -q -d PERFORMANCE -i {n}` shows the reasons while it happens")
        else:
            fix = ("Improve cooling (airflow, fans, dust, room temperature) and check the heatsink's contact; "
                   f"`nvidia-smi -q -d PERFORMANCE,TEMPERATURE -i {n}` shows the reasons while it happens")
        return Check(id, FAIL, f"clocks held down by {', '.join(serious)}; {temps}; {power}", fix, device=label)
    if "sw_power_cap" in g.clock_events:
        limit, default = p.get("limit"), p.get("default_limit")
        if limit and default and limit < default:
            fix = f"The power limit is below the default: sudo nvidia-smi -i {n} -pl {default:g}"
        else:
            fix = (f"At full load this is expected; at idle it is not: watch `nvidia-smi -q -d POWER -i {n}` and check "
                   "for another process using the GPU")
        return Check(id, WARN, f"clocks capped by the power limit; {power}; {temps}", fix, device=label)
    return Check(id, OK, f"no thermal, power or hardware slowdown (reasons: {reasons}); {temps}", device=label)


def _pcie(g: NvmlGpu, label: str) -> Check:
    id = "pcie-link"
    gen, gen_max, width, width_max = (g.pcie.get(k) for k in ("generation", "generation_max", "width", "width_max"))
    if None in (gen, gen_max, width, width_max):
        return _skip(id, "NVML does not report this GPU's PCIe link", label)
    gpu_max = g.pcie.get("generation_gpu_max")
    slot = f"; the GPU supports gen {gpu_max}, the slot and system gen {gen_max}" if gpu_max and gpu_max > gen_max else ""
    link = f"PCIe gen {gen} x{width} (maximum gen {gen_max} x{width_max}){slot}"
    if width < width_max:
        return Check(id, WARN, f"{link}: the link runs on x{width} of x{width_max} lanes",
                     "Seat the card in a full x16 slot (check the board manual for lanes shared with other slots) and "
                     "check riser cables", device=label)
    if gen < gen_max:
        if g.idle:
            return Check(id, OK, f"{link}: idle GPUs lower their link speed to save power; the full run measures "
                                 "host<->device bandwidth under load", device=label)
        return Check(id, WARN, f"{link}: the link runs below its maximum generation while the GPU is busy",
                     f"Set the slot's PCIe speed to Auto or Gen{gen_max} in the BIOS and check the slot and riser; "
                     f"`nvidia-smi -q -d PCI -i {g.index}` under load shows the link", device=label)
    return Check(id, OK, link, device=label)


def _ecc(g: NvmlGpu, label: str) -> Check:
    id = "ecc-errors"
    if g.ecc.get("enabled") is None:
        return _skip(id, "this GPU does not support ECC (or NVML does not report it)", label)
    if not g.ecc["enabled"]:
        return Check(id, WARN, "ECC is off: memory errors would go unnoticed",
                     f"sudo nvidia-smi -i {g.index} -e 1, then reboot", device=label)
    e = {k: g.ecc.get(k) or 0 for k in ("volatile_uncorrected", "volatile_corrected", "aggregate_uncorrected",
                                         "aggregate_corrected")}
    rows = g.remapped_rows or {}
    counts = (f"uncorrected {e['volatile_uncorrected']} since boot ({e['aggregate_uncorrected']} lifetime), corrected "
              f"{e['volatile_corrected']} ({e['aggregate_corrected']} lifetime)")
    if rows:
        counts += (f"; remapped rows: {rows.get('correctable', 0)} correctable, {rows.get('uncorrectable', 0)} uncorrectable"
                   f", pending {rows.get('pending', 0)}, failed {rows.get('failure', 0)}")
    if e["volatile_uncorrected"] or rows.get("failure"):
        return Check(id, FAIL, f"uncorrectable memory errors: {counts}",
                     f"Stop work on this GPU and reset it (sudo nvidia-smi -r -i {g.index}); if errors return, the memory "
                     "is failing: contact the vendor", device=label)
    if rows.get("pending"):
        return Check(id, WARN, f"a row remap is pending: {counts}",
                     f"Reset the GPU to apply it: sudo nvidia-smi -r -i {g.index}", device=label)
    if e["aggregate_uncorrected"]:
        return Check(id, WARN, f"uncorrectable errors in this GPU's history: {counts}",
                     f"Watch `nvidia-smi -q -d ECC,ROW_REMAPPER -i {g.index}`; if the count grows, contact the vendor",
                     device=label)
    return Check(id, OK, f"ECC on; {counts}", device=label)


def _persistence(g: NvmlGpu, label: str) -> Check:
    id = "persistence-mode"
    if g.persistence_mode is None:
        return _skip(id, "NVML does not report persistence mode here (Windows, or not supported)", label)
    if not g.persistence_mode:
        return Check(id, WARN, "persistence mode is off: the driver tears the GPU down when no process uses it, so "
                               "every run pays its initialisation and first measurements are noisier",
                     f"sudo nvidia-smi -i {g.index} -pm 1 (or enable the nvidia-persistenced service)", device=label)
    return Check(id, OK, "persistence mode is on", device=label)


def _mig(g: NvmlGpu, label: str) -> Check:
    id = "mig"
    enabled, pending = g.mig.get("enabled"), g.mig.get("pending")
    if enabled is None:
        return _skip(id, "this GPU does not support MIG", label)
    if enabled:
        return Check(id, WARN, "MIG is on: CUDA sees MIG instances, not the whole GPU, so ceilings and tuned kernels "
                               "describe a slice", f"sudo nvidia-smi -i {g.index} -mig 0, then reset the GPU", device=label)
    if pending:
        return Check(id, WARN, "MIG is off but turning it on is pending a GPU reset",
                     f"sudo nvidia-smi -i {g.index} -mig 0 to cancel, or reset the GPU to apply it", device=label)
    return Check(id, OK, "MIG is off", device=label)


# -------------------------------------------------------------------------------------------------- host checks


def check_numba(f: Facts) -> list[Check]:
    id = "numba-threading"
    if f.numba is None:
        return [_skip(id, "runs in the full doctor only (importing numba takes about a second)")]
    if not f.numba.available:
        return [Check(id, FAIL, f.numba.reason + ": the CPU backend cannot run", "pip install numba")]
    if f.numba.layer is None:
        return [Check(id, WARN, f"numba {f.numba.version}: {f.numba.reason}; parallel CPU kernels will fail",
                      "pip install tbb, or install an OpenMP runtime (libgomp)")]
    if f.numba.layer == "workqueue":
        return [Check(id, WARN, f"numba {f.numba.version} uses the workqueue threading layer: not thread-safe and "
                                "slower to schedule", "pip install tbb (numba then uses TBB), or install libgomp for OpenMP")]
    return [Check(id, OK, f"numba {f.numba.version} uses the {f.numba.layer} threading layer")]


def check_governor(f: Facts) -> list[Check]:
    id = "cpu-governor"
    governors = f.cpu.governors
    if not governors:
        return [_skip(id, "the kernel exposes no CPU frequency governor here (a virtual machine or container: "
                          "frequency scaling belongs to the host)")]
    if set(governors) == {"performance"}:
        return [Check(id, OK, "every CPU uses the performance governor")]
    return [Check(id, WARN, f"CPU frequency governor(s): {', '.join(governors)}: clocks ramp up and down between runs, "
                            "which adds noise to CPU timings",
                  "sudo cpupower frequency-set -g performance (for the duration of benchmarks)")]


def check_folders(f: Facts) -> list[Check]:
    bad = [x for x in f.folders if not x.writable]
    if bad:
        fixes = "; ".join(f"make {x.path} writable or export TRACEA_{x.what.upper()}_DIR=/a/writable/folder" for x in bad)
        return [Check("folders-writable", FAIL, "; ".join(f"the {x.what} folder {x.path} is unusable: {x.error}" for x in bad),
                      fixes)]
    return [Check("folders-writable", OK, "; ".join(f"{x.what} folder {x.path} is writable" for x in f.folders))]


def check_amd_access(f: Facts) -> list[Check]:
    id = "amd-render-group"
    if not f.amd.present:
        return [_skip(id, "no AMD GPU on this machine")]
    files = f.amd.device_files
    missing_kfd = not any(x.path.endswith("/kfd") for x in files)
    blocked = [x.path for x in files if not x.usable]
    if missing_kfd or blocked:
        what = "; ".join(filter(None, ["/dev/kfd is missing (the amdgpu driver's compute interface)" if missing_kfd else "",
                                       f"no read/write access to {', '.join(blocked)}" if blocked else ""]))
        return [Check(id, FAIL, what, "sudo usermod -aG render,video $USER, then log out and in again (in a container, "
                                      "pass --device=/dev/kfd --device=/dev/dri)")]
    return [Check(id, OK, f"read/write access to {', '.join(x.path for x in files)}")]


def check_amd_tools(f: Facts) -> list[Check]:
    id = "amd-tools"
    if not f.amd.present:
        return [_skip(id, "no AMD GPU on this machine")]
    if not f.amd.pyamdgpuinfo:
        return [Check(id, WARN, f"{len(f.amd.gpus)} AMD GPU(s) found through sysfs; pyamdgpuinfo is not installed, so "
                                "names and clocks are incomplete", amd_probe.INSTALL_HINT)]
    return [Check(id, OK, f"{len(f.amd.gpus)} AMD GPU(s); pyamdgpuinfo is installed")]


CHECKS: tuple[CheckSpec, ...] = (
    CheckSpec("driver-version", "the driver supports the installed CuPy and NVRTC", check_driver_version),
    CheckSpec("nvrtc", "NVRTC, the runtime CUDA compiler, is present", check_nvrtc),
    CheckSpec("nvrtc-tensor-core", "NVRTC builds a tensor-core (mma.sync) kernel for each GPU's architecture",
              check_tensor_cores),
    CheckSpec("nvml", "NVML (nvidia-ml-py and the driver's library) answers", check_nvml),
    CheckSpec("cupy", "CuPy is installed and reaches the GPUs", check_cupy),
    CheckSpec("gpus-visible", "no GPU is hidden (CUDA_VISIBLE_DEVICES, device-file permissions, containers)",
              check_gpus_visible),
    CheckSpec("clocks-throttled", "clocks are not held down by heat, power or a hardware slowdown",
              lambda f: _per_gpu("clocks-throttled", f, _clocks)),
    CheckSpec("pcie-link", "the PCIe link runs at its maximum generation and width", lambda f: _per_gpu("pcie-link", f, _pcie)),
    CheckSpec("ecc-errors", "no uncorrectable memory errors or pending row remaps", lambda f: _per_gpu("ecc-errors", f, _ecc)),
    CheckSpec("persistence-mode", "persistence mode is on", lambda f: _per_gpu("persistence-mode", f, _persistence)),
    CheckSpec("mig", "MIG is off (whole GPUs)", lambda f: _per_gpu("mig", f, _mig)),
    CheckSpec("numba-threading", "numba starts a thread-safe threading layer (full run only)", check_numba, full_only=True),
    CheckSpec("cpu-governor", "the CPU frequency governor is `performance`", check_governor),
    CheckSpec("folders-writable", "the cache and profile folders are writable", check_folders),
    CheckSpec("amd-render-group", "this user may use the AMD GPU device files (render group)", check_amd_access),
    CheckSpec("amd-tools", "pyamdgpuinfo is installed where there is an AMD GPU", check_amd_tools),
)


def check_ids() -> tuple[str, ...]:
    return tuple(c.id for c in CHECKS)


def spec(name: str) -> CheckSpec:
    """The check called `name`; UsageError (exit 2) for an unknown one."""
    for c in CHECKS:
        if c.id == name:
            return c
    raise UsageError(f"there is no check called {name!r}.", "Run `tracea doctor --list-checks` to see them.")


def run_checks(f: Facts, only: str | None = None) -> tuple[Check, ...]:
    specs = (spec(only),) if only else CHECKS
    return tuple(c for s in specs for c in s.run(f))
