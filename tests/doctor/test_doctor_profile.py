"""The capability profile: its fields, schema version, JSON round trip, identity strings and what readers get."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from doctor_fakes import facts, scenario
from tracea_cli.doctor.checks import run_checks
from tracea_cli.doctor.profile import (
    SCHEMA_VERSION, CapabilityProfile, Measurement, NotMeasured, cpu_target, cuda_target, device_class,
    find_measurement, limits_for_device, load_profile, machine_id, merge_measured, save_profile,
)
from tracea_cli.doctor.run import make_profile
from tracea_cli.errors import UsageError

TOP_LEVEL = ("schema_version", "tracea_version", "created", "machine_id", "host", "cpu", "gpus", "checks", "measured")


def measurement(**kw) -> Measurement:
    base = dict(device="cuda:0", metric="gemm_flops", unit="FLOP/s", median=7.0e14, cv=0.01, n=12, q1=6.9e14,
                q3=7.1e14, dtype="bf16", created="2026-11-29T00:00:00+00:00")
    return Measurement(**{**base, **kw})


def h200_profile(**kw) -> CapabilityProfile:
    f = facts(scenario("healthy-h200"))
    p = make_profile(f, run_checks(f), [measurement()], [NotMeasured("cuda:0", "gemm_flops", "no library", "fp8")],
                     previous=None, kind="full")
    return replace(p, **kw)


def test_named_fields_and_schema_version():
    d = h200_profile().as_dict()
    for key in TOP_LEVEL:
        assert key in d, key
    assert d["schema_version"] == SCHEMA_VERSION
    (gpu,) = d["gpus"]
    assert gpu["device_class"] == "NVIDIA H200 | sm_90 | 132 SMs | 140 GiB | 1980/3201 MHz"
    assert gpu["limits"]["arch"] == "sm_90" and gpu["limits"]["max_shared_per_block_optin"] == 227 * 1024
    assert gpu["limits"]["sm_count"] == 132 and gpu["limits"]["l2_bytes"] == 60 << 20
    assert gpu["cuda_index"] == 0 and gpu["nvml_index"] == 0 and gpu["pci_bus_id"] == "0000:19:00.0"
    assert gpu["datasheet"] == "NVIDIA H200 SXM"
    for c in d["checks"]:
        assert {"id", "status", "evidence", "fix"} <= set(c)
    (m,) = d["measured"]
    assert {"device", "metric", "unit", "median", "cv", "n"} <= set(m)
    assert m["datasheet"] == pytest.approx(989.5e12) and m["percent_of_datasheet"] == pytest.approx(100 * 7e14 / 989.5e12)
    assert d["cpu"]["device_class"] == "Test CPU | 16 threads | avx512f"


def test_json_round_trip_is_exact(tmp_path):
    p = h200_profile()
    path = save_profile(p, tmp_path / "profile.json")
    back = load_profile(path)
    assert back == p
    assert json.loads(path.read_text()) == p.as_dict()


def test_unreadable_or_foreign_profiles_load_as_none(tmp_path):
    assert load_profile(tmp_path / "missing.json") is None
    (tmp_path / "bad.json").write_text("{not json")
    assert load_profile(tmp_path / "bad.json") is None
    d = h200_profile().as_dict()
    d["schema_version"] = SCHEMA_VERSION + 1
    (tmp_path / "future.json").write_text(json.dumps(d))
    assert load_profile(tmp_path / "future.json") is None


def test_machine_id_is_stable_and_anonymous(tmp_path):
    assert machine_id() == machine_id()
    assert len(machine_id()) == 16 and int(machine_id(), 16) >= 0
    f = tmp_path / "machine-id"
    f.write_text("3d1219c7c4c5404aaa1f6d2a48adfda4\n")
    a = machine_id(machine_id_files=(f,))
    assert a == machine_id(machine_id_files=(f,)) and "3d1219" not in a
    f.write_text("another machine")
    assert machine_id(machine_id_files=(f,)) != a


def test_device_class_is_stable_and_separates_different_gpus():
    args = dict(compute_capability=(9, 0), sm_count=132, memory_bytes=150754820096, max_sm_clock_mhz=1980,
                max_memory_clock_mhz=3201)
    assert device_class("NVIDIA H200", **args) == device_class("NVIDIA  H200", **args)
    assert device_class("NVIDIA H200", **args) != device_class("NVIDIA H200", **{**args, "sm_count": 114})
    assert device_class("NVIDIA H200", **{**args, "memory_bytes": None}).count("?") == 1
    # the profile's classes come out the same on every run of the same machine
    assert h200_profile().gpus[0].device_class == h200_profile().gpus[0].device_class


def test_quick_runs_keep_measured_entries_of_the_same_machine():
    old = h200_profile(measured_created="2026-01-01T00:00:00+00:00")
    measured, not_measured, when = merge_measured(old, [], [], machine=old.machine_id)
    assert measured == old.measured and not_measured == old.not_measured and when == old.measured_created
    fresh = measurement(median=7.5e14, created="2026-12-01T00:00:00+00:00")
    measured, _, when = merge_measured(old, [fresh], [], machine=old.machine_id)
    assert measured == (fresh,) and when != old.measured_created
    cpu = measurement(device="cpu", metric="memory_bandwidth", unit="B/s", dtype=None, threads=2, median=1e10)
    measured, _, _ = merge_measured(old, [cpu], [], machine=old.machine_id)
    assert set(m.key for m in measured) == {cpu.key, old.measured[0].key}
    measured, not_measured, when = merge_measured(old, [], [], machine="another-machine")
    assert measured == () and not_measured == () and when is None


def test_readers_for_tune_and_bench():
    p = h200_profile()
    target = cuda_target(p, 0)
    assert target.backend == "cuda" and target.arch == "sm_90" and target.device_index == 0
    assert target.device_class == p.gpus[0].device_class and target.limits == limits_for_device(p, 0)
    with pytest.raises(UsageError, match="device 1 does not exist"):
        cuda_target(p, 1)
    cpu = cpu_target(p)
    assert cpu.backend == "cpu" and cpu.threads == 16 and cpu.device_class == p.cpu.device_class
    assert find_measurement(p, device="cuda:0", metric="gemm_flops", dtype="bf16").median == 7.0e14
    assert find_measurement(p, device="cuda:0", metric="gemm_flops", dtype="fp16") is None


def test_limits_unknown_without_cupy_or_a_known_architecture():
    from doctor_fakes import NO_CUPY

    system = scenario("healthy-h200")
    system.gpus[0].cc = (7, 0)  # Volta: not in the architecture table
    f = facts(system, runtime=NO_CUPY)
    p = make_profile(f, (), [], [], previous=None, kind="quick")
    assert p.gpus[0].limits is None and p.gpus[0].index_source == "inferred"
    with pytest.raises(UsageError, match="limits of device 0"):
        limits_for_device(p, 0)


def test_limits_from_the_architecture_table_when_cupy_is_absent():
    from doctor_fakes import NO_CUPY

    p = make_profile(facts(scenario("healthy-h200"), runtime=NO_CUPY), (), [], [], previous=None, kind="quick")
    (g,) = p.gpus
    assert g.limits_source == "arch-table" and g.limits.arch == "sm_90" and g.limits.sm_count == 132
    assert g.limits.l2_bytes is None and g.cuda_index == 0


def test_cuda_visible_devices_applies_to_inferred_indices():
    from doctor_fakes import FakeGpu, FakeSystem, fake_nvml
    from tracea_cli.doctor.collect import infer_cuda_indices
    from tracea_cli.doctor.nvidia import probe_nvml

    system = FakeSystem(gpus=[FakeGpu(), FakeGpu(bus_id="00000000:2a:00.0", uuid="GPU-aaaa0000-0000-0000-0000-000000000001")])
    gpus = probe_nvml(fake_nvml(system)).gpus
    assert infer_cuda_indices(gpus, {}) == {0: 0, 1: 1}
    assert infer_cuda_indices(gpus, {"CUDA_VISIBLE_DEVICES": "1"}) == {1: 0}
    assert infer_cuda_indices(gpus, {"CUDA_VISIBLE_DEVICES": "GPU-aaaa0000,0"}) == {1: 0, 0: 1}
    assert infer_cuda_indices(gpus, {"CUDA_VISIBLE_DEVICES": "7,0"}) == {}


def test_machine_id_without_an_os_id_is_made_once_and_kept(tmp_path):
    data = tmp_path / "data"
    first = machine_id(data, machine_id_files=())
    assert (data / "machine-id").read_text().strip() and first == machine_id(data, machine_id_files=())
    assert machine_id(tmp_path / "other", machine_id_files=()) != first  # another data folder: another machine


def test_machine_id_where_nothing_can_be_kept_is_still_stable(tmp_path):
    blocked = tmp_path / "file"
    blocked.write_text("not a folder")
    assert machine_id(blocked / "data", machine_id_files=()) == machine_id(blocked / "data", machine_id_files=())


# a fresh process on a machine with no OS machine id and no MAC (uuid.getnode then invents a number per process)
_CONTAINER = """
import random, sys, uuid
import tracea_cli.doctor.profile as p
p.OS_MACHINE_ID_FILES = ()
uuid.getnode = lambda: random.getrandbits(48) | (1 << 40)
if sys.argv[1:] == ["load"]:  # what tune, bench and the Python API do first
    from tracea_cli.config import Settings
    from tracea_cli.doctor.run import load_or_make_profile
    print(load_or_make_profile(Settings.from_env()).created)
else:
    from tracea_cli.cli import main
    sys.argv = ["tracea", *sys.argv[1:]]
    main()
"""


def _in_container(tmp_path, *args):
    import os
    import subprocess
    import sys

    env = {**os.environ, "TRACEA_DATA_DIR": str(tmp_path / "data"), "TRACEA_CACHE_DIR": str(tmp_path / "cache"),
           "NO_COLOR": "1"}
    return subprocess.run([sys.executable, "-c", _CONTAINER, *args], env=env, capture_output=True, text=True,
                          timeout=120)


def test_a_profile_made_in_a_container_is_used_by_the_next_process(tmp_path):
    """Two processes started together agree on the id, and the next command uses the profile doctor saved."""
    import concurrent.futures

    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        runs = list(pool.map(lambda _: _in_container(tmp_path, "doctor", "--quick", "--json"), range(2)))
    ids = {json.loads(r.stdout)["machine_id"] for r in runs}
    assert all(r.returncode == 0 for r in runs) and len(ids) == 1, [r.stderr for r in runs]
    saved = json.loads((tmp_path / "data" / "profile.json").read_text())
    assert saved["machine_id"] == ids.pop() and (tmp_path / "data" / "machine-id").is_file()
    assert _in_container(tmp_path, "load").stdout.strip() == saved["created"]  # used, not made again


def test_a_rate_measured_while_busy_does_not_replace_a_higher_quiet_one():
    old = h200_profile()
    quiet = old.measured[0]
    busy = replace(quiet, median=quiet.median / 2, busy="other processes kept 1.7 of 2 CPU threads busy")
    measured, _, _ = merge_measured(old, [busy], [], machine=old.machine_id)
    assert measured[0] == quiet
    faster_busy = replace(busy, median=quiet.median * 1.1)
    assert merge_measured(old, [faster_busy], [], machine=old.machine_id)[0][0] == faster_busy
