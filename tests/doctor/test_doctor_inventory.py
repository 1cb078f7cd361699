"""The host inventory on this machine, and the sysfs/dev readers against fake trees (AMD, PCI, device files)."""

from __future__ import annotations

import os
import platform
import subprocess

import pytest

from doctor_fakes import facts
from tracea_cli.doctor import amd, apple, inventory
from tracea_cli.doctor.checks import run_checks


def test_real_cpu_inventory():
    cpu = inventory.probe_cpu()
    assert cpu.model and cpu.arch == platform.machine()
    assert 1 <= cpu.usable_threads <= cpu.threads and 1 <= cpu.cores <= cpu.threads
    assert all(isinstance(v, int) and v > 0 for v in cpu.caches.values())
    if platform.system() == "Linux":
        assert cpu.memory_bytes and cpu.memory_bytes > 0 and cpu.caches
        if platform.machine() == "x86_64":
            assert "sse4_2" in cpu.simd
    assert cpu.device_class.startswith(" ".join(cpu.model.split()))


def test_real_host_inventory():
    host = inventory.probe_host({"CUDA_VISIBLE_DEVICES": "0", "HOME": "/root"})
    assert host.os == platform.system() and host.python.endswith(platform.python_version())
    assert host.packages["numpy"] and host.packages["tracea"]
    assert "torch" in host.packages  # recorded even when absent (None)
    assert host.environment == {"CUDA_VISIBLE_DEVICES": "0"}


def test_cpuinfo_parsing_from_a_fake_proc(tmp_path):
    proc, sys_root = tmp_path / "proc", tmp_path / "sys"
    proc.mkdir()
    block = ("processor\t: {n}\nvendor_id\t: AuthenticAMD\nmodel name\t: AMD EPYC 9654 96-Core Processor\n"
             "physical id\t: 0\ncore id\t\t: {c}\nflags\t\t: fpu sse4_2 avx avx2 fma avx512f avx512_bf16\n")
    (proc / "cpuinfo").write_text("\n".join(block.format(n=n, c=n // 2) for n in range(4)))
    (proc / "meminfo").write_text("MemTotal:       1000 kB\nMemAvailable:    500 kB\n")
    cache = sys_root / "devices/system/cpu/cpu0/cache/index3"
    cache.mkdir(parents=True)
    for name, value in (("level", "3"), ("type", "Unified"), ("size", "32768K")):
        (cache / name).write_text(value + "\n")
    gov = sys_root / "devices/system/cpu/cpu0/cpufreq"
    gov.mkdir(parents=True)
    (gov / "scaling_governor").write_text("powersave\n")
    if platform.system() == "Darwin":
        pytest.skip("probe_cpu reads sysctl on macOS")
    cpu = inventory.probe_cpu(proc_root=proc, sys_root=sys_root)
    assert cpu.model == "AMD EPYC 9654 96-Core Processor" and cpu.vendor == "AuthenticAMD"
    assert cpu.cores == 2 and cpu.simd == ("sse4_2", "avx", "avx2", "fma", "avx512f", "avx512_bf16")
    assert cpu.caches == {"L3": 32 << 20} and cpu.memory_bytes == 1000 * 1024 and cpu.governors == ("powersave",)
    from dataclasses import replace

    from doctor_fakes import CPU

    c = [x for x in run_checks(facts(cpu=replace(CPU, governors=cpu.governors))) if x.id == "cpu-governor"][0]
    assert c.status == "warn" and "cpupower frequency-set -g performance" in c.fix


def _pci(root, bus, vendor, device, cls):
    d = root / "bus/pci/devices" / bus
    d.mkdir(parents=True)
    for name, value in (("vendor", vendor), ("device", device), ("class", cls)):
        (d / name).write_text(value + "\n")


def test_pci_scan_finds_display_controllers_and_accelerators(tmp_path):
    _pci(tmp_path, "0000:19:00.0", "0x10de", "0x2335", "0x030200")
    _pci(tmp_path, "0000:c1:00.0", "0x1002", "0x74a1", "0x120000")
    _pci(tmp_path, "0000:00:03.0", "0x1af4", "0x1041", "0x020000")  # a network card
    found = inventory.pci_gpus(tmp_path)
    assert [(d.bus_id, d.pci_id) for d in found] == [("0000:19:00.0", "10de:2335"), ("0000:c1:00.0", "1002:74a1")]


def test_device_files_and_access(tmp_path):
    (tmp_path / "nvidia0").touch()
    (tmp_path / "nvidiactl").touch()
    files = inventory.device_files(("nvidia[0-9]*", "nvidiactl"), dev_root=tmp_path,
                                   access=lambda p, mode: not p.endswith("nvidia0") or mode == os.R_OK)
    assert [(os.path.basename(f.path), f.usable) for f in files] == [("nvidia0", False), ("nvidiactl", True)]


def test_container_detection(tmp_path):
    (tmp_path / "proc/1").mkdir(parents=True)
    (tmp_path / "proc/1/cgroup").write_text("0::/\n")
    assert not inventory.in_container(tmp_path)
    (tmp_path / "proc/1/cgroup").write_text("0::/kubepods/besteffort/pod1234\n")
    assert inventory.in_container(tmp_path)


def _amd_card(root, n, bus, device):
    pci = root / "devices/pci0000:00" / bus
    pci.mkdir(parents=True)
    for name, value in (("vendor", "0x1002"), ("device", device), ("mem_info_vram_total", str(192 << 30)),
                        ("current_link_width", "16")):
        (pci / name).write_text(value + "\n")
    card = root / "class/drm" / f"card{n}"
    card.mkdir(parents=True)
    (card / "device").symlink_to(pci)


def test_amd_gpus_from_sysfs_and_the_render_group_check(tmp_path):
    sys_root, dev_root = tmp_path / "sys", tmp_path / "dev"
    _amd_card(sys_root, 0, "0000:c1:00.0", "0x74a1")
    (dev_root / "dri").mkdir(parents=True)
    (dev_root / "kfd").touch()
    (dev_root / "dri/renderD128").touch()
    allowed = amd.probe_amd(sys_root=sys_root, dev_root=dev_root, module=None, access=lambda p, m: True)
    (g,) = allowed.gpus
    assert g.pci_id == "1002:74a1" and g.pci_bus_id == "0000:c1:00.0" and g.vram_bytes == 192 << 30
    assert g.details == {"current_link_width": "16"}
    ok = [c for c in run_checks(facts(amd=allowed)) if c.id.startswith("amd-")]
    assert [(c.id, c.status) for c in ok] == [("amd-render-group", "ok"), ("amd-tools", "ok" if allowed.pyamdgpuinfo else "warn")]
    denied = amd.probe_amd(sys_root=sys_root, dev_root=dev_root, module=None, access=lambda p, m: False)
    c = [c for c in run_checks(facts(amd=denied)) if c.id == "amd-render-group"][0]
    assert c.status == "fail" and "/dev/kfd" in c.evidence.replace(str(dev_root), "/dev")
    assert "usermod -aG render,video" in c.fix
    f = facts(amd=denied)
    (gpu,) = f.gpus
    assert gpu.vendor == "amd" and gpu.datasheet == "AMD Instinct MI300X"


def test_pyamdgpuinfo_names_join_the_sysfs_entry(tmp_path):
    import types

    _amd_card(tmp_path, 0, "0000:c1:00.0", "0x74a1")
    info = types.SimpleNamespace(name="AMD Instinct MI300X", pci_slot="0000:c1:00.0",
                                 query_max_clocks=lambda: {"sclk_max": 2100e6, "mclk_max": 1300e6})
    module = types.SimpleNamespace(detect_gpus=lambda: 1, get_gpu=lambda i: info)
    report = amd.probe_amd(sys_root=tmp_path, dev_root=tmp_path / "dev", module=module, access=lambda p, m: True)
    (g,) = report.gpus
    assert g.name == "AMD Instinct MI300X" and g.details["max_sclk_mhz"] == 2100 and report.pyamdgpuinfo


def test_apple_is_not_applicable_elsewhere_and_read_on_macos():
    other = apple.probe_apple(system="Linux")
    assert not other.applicable and "not applicable" in other.reason
    json_out = ('{"SPHardwareDataType": [{"chip_type": "Apple M2", "physical_memory": "24 GB"}],'
                ' "SPDisplaysDataType": [{"sppci_model": "Apple M2", "sppci_cores": "10"}]}')
    run = lambda *a, **k: subprocess.CompletedProcess(a, 0, stdout=json_out, stderr="")
    mac = apple.probe_apple(system="Darwin", run=run)
    assert mac.applicable and mac.chip == "Apple M2" and mac.gpu_cores == 10 and mac.memory_bytes == 24 << 30
    (gpu,) = facts(apple=mac).gpus
    assert gpu.vendor == "apple" and gpu.datasheet == "Apple M2" and gpu.limits is None
