"""`tracea doctor`: what this machine is, what is wrong with it, and what it can do.

Modules, in the order data flows: probes (`inventory` host and CPU, `nvidia` NVML, `cuda_runtime` CuPy, `toolchain`
NVRTC, `amd`, `apple`) -> `collect` (Facts, GPUs joined) -> `checks` (findings) -> `measure` (ceilings) ->
`profile` (the versioned JSON document) -> `render` (terminal view). `datasheets` holds the vendors' figures.
`run` ties them together.

Other commands use:
    load_or_make_profile(settings) -> CapabilityProfile     (makes and saves a quick profile if none exists)
    cuda_target(profile, device_index) -> target.Target
    limits_for_device(profile, device_index) -> target.DeviceLimits
    cpu_target(profile, threads=None) -> target.Target
    find_measurement(profile, device=, metric=, dtype=, threads=) -> Measurement | None
    device_class(name, compute_capability=, sm_count=, memory_bytes=, max_sm_clock_mhz=, max_memory_clock_mhz=)
"""

from tracea_cli.doctor.profile import (
    CapabilityProfile,
    Check,
    GpuInfo,
    Measurement,
    cpu_target,
    cuda_target,
    device_class,
    find_measurement,
    limits_for_device,
    load_profile,
    save_profile,
)
from tracea_cli.doctor.run import (
    DoctorRequest,
    DoctorResult,
    load_or_make_profile,
    run_doctor,
)

__all__ = [
    "CapabilityProfile", "Check", "GpuInfo", "Measurement", "DoctorRequest", "DoctorResult", "cpu_target",
    "cuda_target", "device_class", "find_measurement", "limits_for_device", "load_or_make_profile", "load_profile",
    "run_doctor", "save_profile",
]
