"""The NVML layer and the checks that judge it, against a stand-in pynvml module (no GPU, no driver needed)."""

from __future__ import annotations

import pytest

from doctor_fakes import NO_CUPY, FakeGpu, FakeSystem, facts, fake_nvml, scenario
from tracea_cli.doctor import nvidia
from tracea_cli.doctor.checks import run_checks


def by_id(findings, id):
    found = [c for c in findings if c.id == id]
    assert found, f"no finding {id}"
    return found[0] if len(found) == 1 else found


# ------------------------------------------------------------------------------------------------- the probe


def test_healthy_h200_inventory_reads_every_field():
    report = nvidia.probe_nvml(fake_nvml(scenario("healthy-h200")))
    assert report.available and report.driver_version == "580.159.04" and report.cuda_driver_version == 13000
    (g,) = report.gpus
    assert g.name == "NVIDIA H200" and g.uuid.startswith("GPU-")
    assert g.pci_bus_id == "0000:19:00.0" and g.pci_id == "10de:2335"
    assert g.compute_capability == (9, 0) and g.sm_count == 132 and g.memory_bytes == 150754820096
    assert g.memory_bus_width_bits == 6144
    assert g.clocks_mhz == {"sm": 345, "sm_max": 1980, "memory": 3201, "memory_max": 3201, "graphics": 345, "graphics_max": 1980}
    assert g.power_w == {"draw": 72.0, "limit": 700.0, "default_limit": 700.0}
    assert g.temperature_c == {"gpu": 31, "slowdown": 92, "shutdown": 95, "gpu_max": 87}
    assert g.pcie == {"generation": 5, "generation_max": 5, "generation_gpu_max": 5, "width": 16, "width_max": 16}
    assert g.ecc["enabled"] is True and g.ecc["volatile_uncorrected"] == 0
    assert g.remapped_rows == {"correctable": 0, "uncorrectable": 0, "pending": 0, "failure": 0}
    assert g.mig == {"enabled": False, "pending": False}
    assert g.persistence_mode is True and g.compute_mode == "default"
    assert g.clock_events == ("gpu_idle",) and g.idle
    assert g.unsupported == ()


def test_nvml_is_shut_down_after_probing():
    module = fake_nvml(scenario("healthy-h200"))
    nvidia.probe_nvml(module)
    assert module.state["initialised"] == 0


def test_unsupported_fields_become_none_and_are_listed():
    report = nvidia.probe_nvml(fake_nvml(scenario("unsupported-fields")))
    (g,) = report.gpus
    assert g.sm_count is None and g.memory_bus_width_bits is None and g.remapped_rows is None
    assert g.ecc == {"enabled": None, "pending": None} and g.mig == {"enabled": None, "pending": None}
    assert g.power_w["default_limit"] is None and g.power_w["limit"] == 700.0
    listed = " ".join(g.unsupported)
    for field in ("attributes", "ecc_mode", "remapped_rows", "mig_mode", "memory_bus_width", "power_default_limit"):
        assert field in listed
    assert "Not" in listed  # the driver's reason is kept ("NotSupported")


def test_a_lost_gpu_is_reported_not_raised():
    system = FakeSystem(gpus=[FakeGpu(), FakeGpu(bus_id="00000000:2a:00.0", lost=True)])
    report = nvidia.probe_nvml(fake_nvml(system))
    assert report.available and len(report.gpus) == 2
    assert report.gpus[1].name == "NVIDIA GPU 1" and "GpuIsLost" in report.gpus[1].unsupported[0]


def test_library_absent_is_a_report_with_a_reason_and_hint():
    report = nvidia.probe_nvml(fake_nvml(scenario("nvml-absent")))
    assert not report.available and report.error_code == 12 and report.gpus == ()
    assert "libnvidia-ml.so.1" in report.reason and "--gpus all" in report.hint
    assert report.summary == "NVML library not found"


def test_package_absent_is_a_report_with_an_install_hint():
    def missing():
        raise ModuleNotFoundError("No module named 'pynvml'")

    report = nvidia.probe_nvml(loader=missing)
    assert not report.available and report.hint == "pip install nvidia-ml-py"
    assert "nvidia-ml-py" in report.reason


def test_clock_event_decoding():
    assert nvidia.decode_clock_events(0) == ()
    assert nvidia.decode_clock_events(0x1 | 0x4 | 0x40) == ("gpu_idle", "sw_power_cap", "hw_thermal_slowdown")
    assert nvidia.decode_clock_events(0x1000) == ("unknown_0x1000",)


def test_bus_id_forms_agree():
    assert nvidia.normalise_bus_id("00000000:19:00.0") == nvidia.normalise_bus_id(b"0000:19:00.0") == "0000:19:00.0"
    assert nvidia.normalise_bus_id("0000:AB:00.0") == "0000:ab:00.0"


def test_clock_event_watcher_flags_throttling_only():
    system = scenario("healthy-h200")
    module = fake_nvml(system)
    watcher = nvidia.ClockEventWatcher(module, "0000:19:00.0")
    assert watcher() is False  # idle
    system.gpus[0].clock_events = 0x4  # power cap
    assert watcher() is True
    watcher.close()
    assert module.state["initialised"] == 0


# ------------------------------------------------------------------------------------------------ the checks


def test_healthy_h200_passes_every_check():
    findings = run_checks(facts(scenario("healthy-h200")))
    bad = [c for c in findings if c.status in ("warn", "fail")]
    assert bad == [], bad
    for id in ("driver-version", "nvrtc", "nvrtc-tensor-core", "nvml", "cupy", "gpus-visible", "clocks-throttled",
               "pcie-link", "ecc-errors", "persistence-mode", "mig"):
        assert by_id(findings, id).status == "ok", id
    assert by_id(findings, "clocks-throttled").device == "cuda:0"
    assert "CUDA 13.0" in by_id(findings, "driver-version").evidence


def test_thermal_throttling_fails_with_a_cooling_fix():
    c = by_id(run_checks(facts(scenario("thermal"))), "clocks-throttled")
    assert c.status == "fail"
    assert "sw_thermal_slowdown" in c.evidence and "hw_thermal_slowdown" in c.evidence and "94 °C" in c.evidence
    assert "cooling" in c.fix.lower() and "nvidia-smi -q -d PERFORMANCE,TEMPERATURE -i 0" in c.fix


def test_power_cap_below_default_warns_with_the_command_to_restore_it():
    c = by_id(run_checks(facts(scenario("power-cap-lowered"))), "clocks-throttled")
    assert c.status == "warn" and "450.0 W limit" in c.evidence
    assert c.fix == "The power limit is below the default: sudo nvidia-smi -i 0 -pl 700"


def test_pcie_x8_gen4_warns():
    c = by_id(run_checks(facts(scenario("pcie-x8-gen4"))), "pcie-link")
    assert c.status == "warn" and "x8 of x16" in c.evidence and "gen 4 x8" in c.evidence
    assert "x16 slot" in c.fix


def test_pcie_gen_below_max_warns_under_load_and_passes_at_idle():
    system = scenario("pcie-x8-gen4")
    system.gpus[0].pcie_width = 16  # only the generation is low: gen 4 of 5, busy
    c = by_id(run_checks(facts(system)), "pcie-link")
    assert c.status == "warn" and "gen 4 x16 (maximum gen 5 x16)" in c.evidence and "BIOS" in c.fix
    idle = by_id(run_checks(facts(scenario("pcie-idle-gen1"))), "pcie-link")
    assert idle.status == "ok" and "idle" in idle.evidence


def test_pcie_slot_below_gpu_generation_is_named():
    system = scenario("healthy-h200")
    system.gpus[0].pcie_gen = system.gpus[0].pcie_gen_max = 4  # a gen-5 GPU in a gen-4 slot
    c = by_id(run_checks(facts(system)), "pcie-link")
    assert c.status == "ok" and "the GPU supports gen 5, the slot and system gen 4" in c.evidence


def test_uncorrected_ecc_errors_fail_with_a_reset_fix():
    c = by_id(run_checks(facts(scenario("ecc-errors"))), "ecc-errors")
    assert c.status == "fail" and "uncorrected 2 since boot (3 lifetime)" in c.evidence
    assert "sudo nvidia-smi -r -i 0" in c.fix and "vendor" in c.fix


def test_pending_row_remap_and_ecc_off_warn():
    c = by_id(run_checks(facts(scenario("remap-pending"))), "ecc-errors")
    assert c.status == "warn" and "pending 1" in c.evidence and c.fix == "Reset the GPU to apply it: sudo nvidia-smi -r -i 0"
    off = by_id(run_checks(facts(scenario("ecc-off"))), "ecc-errors")
    assert off.status == "warn" and off.fix == "sudo nvidia-smi -i 0 -e 1, then reboot"


def test_mig_on_warns_with_the_command_to_turn_it_off():
    c = by_id(run_checks(facts(scenario("mig-on"))), "mig")
    assert c.status == "warn" and "MIG instances" in c.evidence
    assert c.fix == "sudo nvidia-smi -i 0 -mig 0, then reset the GPU"


def test_persistence_off_warns():
    c = by_id(run_checks(facts(scenario("persistence-off"))), "persistence-mode")
    assert c.status == "warn" and c.fix.startswith("sudo nvidia-smi -i 0 -pm 1")


def test_driver_older_than_the_cupy_build_fails():
    c = by_id(run_checks(facts(scenario("old-driver"))), "driver-version")
    assert c.status == "fail"
    assert "supports CUDA 12.4" in c.evidence and "cupy-cuda13x 14.2.0 is built for CUDA 13" in c.evidence
    assert "580.65.06" in c.fix and "pip install cupy-cuda12x" in c.fix


def test_nvrtc_newer_than_the_driver_within_a_major_warns():
    from tracea_cli.doctor.toolchain import NvrtcInfo

    f = facts(scenario("healthy-h200"), nvrtc=NvrtcInfo(True, "13.1", ("sm_90",)))
    c = by_id(run_checks(f), "driver-version")
    assert c.status == "warn" and "PTX" in c.evidence and c.fix.startswith("pip install 'nvidia-cuda-nvrtc==13.0.*'")


def test_nvml_absent_skips_gpu_checks_and_says_why():
    findings = run_checks(facts(scenario("nvml-absent"), pci=(), runtime=NO_CUPY))
    for id in ("clocks-throttled", "pcie-link", "ecc-errors", "persistence-mode", "mig"):
        c = by_id(findings, id)
        assert c.status == "skipped" and "NVML library not found" in c.reason, id
    assert by_id(findings, "nvml").status == "skipped"
    assert by_id(findings, "gpus-visible").status == "skipped"
    assert by_id(findings, "driver-version").status == "skipped"
    cupy = by_id(findings, "cupy")
    assert cupy.status == "skipped" and "pip install 'tracea[cuda]'" in cupy.reason


def test_nvml_absent_with_a_gpu_on_the_bus_in_a_container_fails_with_the_docker_fix():
    from dataclasses import replace

    from doctor_fakes import HOST
    from tracea_cli.doctor.inventory import PciDevice

    f = facts(scenario("nvml-absent"), runtime=NO_CUPY, host=replace(HOST, container=True),
              pci=(PciDevice("0000:19:00.0", "10de:2335", 0x030200),))
    findings = run_checks(f)
    hidden = by_id(findings, "gpus-visible")
    assert hidden.status == "fail" and "inside a container" in hidden.evidence and "--gpus all" in hidden.fix
    assert by_id(findings, "nvml").status == "warn"
    assert by_id(findings, "cupy").status == "warn" and "tracea[cuda]" in by_id(findings, "cupy").fix


def test_cuda_visible_devices_hiding_every_gpu_fails():
    f = facts(scenario("healthy-h200"), env={"CUDA_VISIBLE_DEVICES": ""}, runtime=NO_CUPY)
    c = by_id(run_checks(f), "gpus-visible")
    assert c.status == "fail" and "hides all 1 GPU(s)" in c.evidence and "unset CUDA_VISIBLE_DEVICES" in c.fix


def test_unusable_device_files_fail():
    from tracea_cli.doctor.inventory import DeviceFile

    f = facts(scenario("healthy-h200"), nvidia_files=(DeviceFile("/dev/nvidia0", True, False),))
    c = by_id(run_checks(f), "gpus-visible")
    assert c.status == "fail" and "/dev/nvidia0" in c.evidence and "usermod" in c.fix


def test_cupy_that_cannot_reach_the_gpus_fails():
    from tracea_cli.doctor.cuda_runtime import RuntimeReport

    broken = RuntimeReport(available=False, installed=True, reason="the CUDA runtime sees no usable device (insufficient driver)",
                           hint="Check the driver with `nvidia-smi`.")
    c = by_id(run_checks(facts(scenario("old-driver"), runtime=broken)), "cupy")
    assert c.status == "fail" and "insufficient driver" in c.evidence


def test_missing_ml_dtypes_is_a_finding_with_an_install_hint():
    from dataclasses import replace

    from doctor_fakes import HOST

    host = replace(HOST, packages={**HOST.packages, "ml_dtypes": None})
    c = by_id(run_checks(facts(scenario("healthy-h200"), host=host)), "cupy")
    assert c.status == "warn" and c.fix == "pip install ml_dtypes"


@pytest.mark.parametrize("name", ["healthy-h200", "thermal", "pcie-x8-gen4", "ecc-errors", "mig-on", "old-driver", "nvml-absent"])
def test_every_finding_is_complete(name):
    for c in run_checks(facts(scenario(name))):
        assert c.evidence, c
        if c.status in ("warn", "fail"):
            assert c.fix, c
        if c.status == "skipped":
            assert c.reason, c


def test_a_driver_reporting_cuda_0_is_no_driver_not_a_cupy_build_to_install():
    from tracea_cli.doctor import cuda_runtime

    no_driver = cuda_runtime.RuntimeReport(available=False, installed=True, reason="cudaErrorInsufficientDriver",
                                           cupy_version="14.2.0", runtime_version=13000, driver_version=0)
    c = by_id(run_checks(facts(scenario("nvml-absent"), pci=(), runtime=no_driver)), "driver-version")
    assert c.status == "warn" and "no NVIDIA driver is loaded" in c.evidence and "0.0" not in c.evidence
    assert "cupy-cuda0x" not in c.fix and "Install the NVIDIA driver" in c.fix
