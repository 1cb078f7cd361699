"""The doctor's flow: probe -> check -> measure (unless quick) -> profile -> save.

`run_doctor` is what `tracea doctor` calls; `load_or_make_profile` is what `tune`, `bench` and the Python API call to
get limits and ceilings (it makes a quick profile when none exists).
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Mapping

from tracea_cli.config import Settings
from tracea_cli.devices import parse_devices
from tracea_cli.doctor import checks as checks_mod
from tracea_cli.doctor.collect import Facts, absent_components, collect
from tracea_cli.doctor.datasheets import load_datasheets
from tracea_cli.doctor.profile import (
    CapabilityProfile, Check, Measurement, NotMeasured, load_profile, machine_id, merge_measured, now_iso, save_profile,
)
from tracea_cli.errors import UsageError

#: Wall-clock budgets (the targets: a full run under 20 s on the 2-core development machine, under 30 s on an H200).
#: The first GPU's measurements end RUN_BUDGET_S after the run began, but get at least MIN_GPU_S; every further GPU
#: gets GPU_BUDGET_S. What does not fit is listed as not measured, with that reason.
RUN_BUDGET_S = 24.0
MIN_GPU_S = 8.0
GPU_BUDGET_S = 15.0


@dataclass(frozen=True)
class DoctorRequest:
    quick: bool = False  # inventory and checks only
    devices: str | None = None  # the --device text: which GPUs to measure (default: device 0)
    check: str | None = None  # run only this check; no measurement, no profile


@dataclass(frozen=True)
class DoctorResult:
    facts: Facts
    checks: tuple[Check, ...]
    profile: CapabilityProfile | None  # None for --check
    saved_to: Path | None = None
    save_error: str = ""  # why the profile could not be written to the data folder


def run_doctor(request: DoctorRequest, settings: Settings, *, env: Mapping[str, str] | None = None,
               step: Callable[[str], None] | None = None) -> DoctorResult:
    """Everything `tracea doctor` does except printing. Raises UsageError for a bad --check or --device."""
    began = time.monotonic()
    env = dict(os.environ if env is None else env)
    say = step or (lambda _: None)
    if request.check:
        checks_mod.spec(request.check)  # an unknown name fails before any work
    say("inventory")
    facts = collect(settings, env, numba=not request.quick or request.check == "numba-threading")
    cuda_gpus = [g for g in facts.gpus if g.vendor == "nvidia" and g.cuda_index is not None]
    chosen = parse_devices(request.devices, len(cuda_gpus))
    say("checks")
    findings = checks_mod.run_checks(facts, request.check)
    if request.check:
        return DoctorResult(facts=facts, checks=findings, profile=None)

    measured: list[Measurement] = []
    not_measured: list[NotMeasured] = []
    interrupted = False
    if not request.quick:
        try:
            _measure(facts, chosen, measured, not_measured, say, began=began)
        except KeyboardInterrupt:
            interrupted = True  # keep what was measured: save it below, then let the interrupt through
    profile = make_profile(facts, findings, measured, not_measured, previous=load_profile(settings.profile_path),
                           kind="quick" if request.quick else "full", data_dir=settings.data_dir)
    saved, error = None, ""
    try:
        saved = save_profile(profile, settings.profile_path)
    except UsageError as e:
        error = e.message
    if interrupted:
        raise KeyboardInterrupt
    return DoctorResult(facts=facts, checks=findings, profile=profile, saved_to=saved, save_error=error)


def _measure(facts: Facts, chosen: tuple[int, ...], measured: list[Measurement], not_measured: list[NotMeasured],
             say: Callable[[str], None], *, began: float) -> None:
    """Append every measurement to the lists as it completes, so an interrupt keeps the finished ones."""
    from tracea_cli.doctor.measure import cpu_measurements, gpu_measurements

    def sink(item: Measurement | NotMeasured) -> None:
        (measured if isinstance(item, Measurement) else not_measured).append(item)  # type: ignore[arg-type]

    for item in cpu_measurements(facts.cpu, step=say):
        sink(item)
    gpus = {g.cuda_index: g for g in facts.gpus if g.vendor == "nvidia" and g.cuda_index is not None}
    for n, index in enumerate(chosen):
        gpu = gpus[index]
        now = time.monotonic()
        deadline = max(began + RUN_BUDGET_S, now + MIN_GPU_S) if n == 0 else now + GPU_BUDGET_S
        if not facts.runtime.available:
            sink(NotMeasured(gpu.label, "all", f"GPU ceilings need CuPy: {facts.runtime.reason}"))
            continue
        watcher = _throttle_watcher(facts, gpu.pci_bus_id)
        try:
            for item in gpu_measurements(gpu, step=say, throttle=watcher, deadline=deadline):
                sink(item)
        finally:
            if watcher is not None:
                watcher.close()


def _throttle_watcher(facts: Facts, bus_id: str | None):  # -> nvidia.ClockEventWatcher | None
    if not facts.nvml.available or not bus_id:
        return None
    from tracea_cli.doctor import nvidia

    try:
        return nvidia.ClockEventWatcher(nvidia.load_nvml(), bus_id)
    except Exception:
        return None


def make_profile(facts: Facts, findings: tuple[Check, ...], measured: list[Measurement],
                 not_measured: list[NotMeasured], *, previous: CapabilityProfile | None, kind: str,
                 data_dir: Path | None = None) -> CapabilityProfile:
    """The profile of this run; measurements of an earlier run on this machine that this run did not repeat are kept."""
    from tracea_cli.doctor.measure import with_references

    mid = machine_id(data_dir)
    fresh = with_references(measured, gpus=facts.gpus, cpu=facts.cpu, datasheets=load_datasheets())
    all_measured, all_not, when = merge_measured(previous, fresh, not_measured, machine=mid)
    return CapabilityProfile(
        machine_id=mid, created=now_iso(), kind=kind, host=facts.host, cpu=facts.cpu, toolchain=facts.toolchain,
        gpus=facts.gpus, checks=findings, measured=all_measured, not_measured=all_not,
        absent=absent_components(facts), measured_created=when,
    )


def load_or_make_profile(settings: Settings, *, env: Mapping[str, str] | None = None) -> CapabilityProfile:
    """This machine's capability profile from the data folder; made with `--quick` (and saved) when there is none,
    when it is of another schema version, or when it was written on another machine."""
    profile = load_profile(settings.profile_path)
    if profile is not None and profile.machine_id == machine_id(settings.data_dir):
        return profile
    result = run_doctor(DoctorRequest(quick=True), settings, env=env)
    assert result.profile is not None
    return result.profile
