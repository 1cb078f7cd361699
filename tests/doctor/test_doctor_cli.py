"""`tracea doctor` through typer's test runner: JSON on stdout, exit codes (--strict, bad input, Ctrl-C), no traceback,
and what is written where. Measurements are replaced by a quick stand-in where a test does not need real ones."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from tracea_cli.cli import app
from tracea_cli.doctor import measure
from tracea_cli.doctor.checks import check_ids
from tracea_cli.doctor.profile import Measurement, load_profile

runner = CliRunner()


def doctor(*args: str):
    return runner.invoke(app, ["doctor", *args])


def clean(result) -> bool:
    return "Traceback" not in result.stdout + result.stderr


def _fake_cpu(cpu, *, step=None, policy=None):
    yield Measurement(device="cpu", metric="memory_bandwidth", unit="B/s", median=1.0e10, cv=0.02, n=5, q1=9.9e9,
                      q3=1.01e10, threads=1, created="2026-11-29T00:00:00+00:00")


@pytest.fixture
def fast_measure(monkeypatch):
    monkeypatch.setattr(measure, "cpu_measurements", _fake_cpu)


def test_quick_json_is_the_profile_and_nothing_else(isolated):
    r = doctor("--quick", "--json")
    assert r.exit_code == 0, r.stderr
    d = json.loads(r.stdout)
    for key in ("schema_version", "tracea_version", "machine_id", "host", "cpu", "gpus", "checks", "measured"):
        assert key in d
    assert d["kind"] == "quick" and d["measured"] == []
    assert {c["id"] for c in d["checks"]} == set(check_ids())
    assert isolated.profile_path.exists() and json.loads(isolated.profile_path.read_text())["machine_id"] == d["machine_id"]
    assert "profile written to" in r.stderr


def test_full_run_measures_the_cpu(isolated):
    r = doctor("--json")
    assert r.exit_code == 0, r.stderr
    d = json.loads(r.stdout)
    cpu = [m for m in d["measured"] if m["device"] == "cpu"]
    assert {(m["metric"], m["dtype"]) for m in cpu} >= {("memory_bandwidth", None), ("gemm_flops", "fp32"), ("gemm_flops", "fp64")}
    assert all(m["median"] > 0 and m["cv"] >= 0 and m["n"] >= 3 for m in cpu)
    assert d["measured_created"] and d["kind"] == "full"
    assert [c for c in d["checks"] if c["id"] == "numba-threading"][0]["status"] in ("ok", "warn")


def test_output_file_gets_the_same_profile(isolated, tmp_path, fast_measure):
    out = tmp_path / "reports" / "profile.json"
    r = doctor("--json", "--output", str(out))
    assert r.exit_code == 0, r.stderr
    assert json.loads(out.read_text()) == json.loads(r.stdout)


def test_quick_keeps_an_earlier_runs_measurements(isolated, fast_measure):
    assert doctor("--json").exit_code == 0
    first = load_profile(isolated.profile_path)
    assert first.measured and first.measured_created
    r = doctor("--quick", "--json")
    d = json.loads(r.stdout)
    assert d["kind"] == "quick" and d["measured"] == [m.as_dict() for m in first.measured]
    assert d["measured_created"] == first.measured_created
    assert load_profile(isolated.profile_path).measured == first.measured


def test_terminal_view(isolated, fast_measure):
    r = doctor()
    assert r.exit_code == 0, r.stderr
    assert "Checks" in r.stdout and "folders-writable" in r.stdout and "✓" in r.stdout
    assert "Measured ceilings" in r.stdout and "10.0 GB/s" in r.stdout
    assert "profile written to" in r.stderr and "profile written" not in r.stdout


def test_strict_exit_codes(isolated, use_nvml):
    use_nvml("healthy-h200")
    ok = doctor("--quick", "--strict", "--json")
    assert ok.exit_code == 0, ok.stderr  # no CuPy here: a warning, not a failure
    warned = json.loads(ok.stdout)
    assert any(c["status"] == "warn" for c in warned["checks"])
    use_nvml("ecc-errors")
    failed = doctor("--quick", "--strict", "--json")
    assert failed.exit_code == 1 and clean(failed)
    assert json.loads(failed.stdout)["checks"]  # the profile is still printed
    assert "check(s) failed: ecc-errors (cuda:0)" in failed.stderr
    relaxed = doctor("--quick", "--json")
    assert relaxed.exit_code == 0


def test_a_fake_h200_in_the_profile(isolated, use_nvml):
    use_nvml("healthy-h200")
    d = json.loads(doctor("--quick", "--json").stdout)
    (gpu,) = d["gpus"]
    assert gpu["name"] == "NVIDIA H200" and gpu["cuda_index"] == 0 and gpu["index_source"] == "inferred"
    assert gpu["datasheet"] == "NVIDIA H200 SXM" and gpu["limits"]["arch"] == "sm_90" and gpu["limits_source"] == "arch-table"
    assert gpu["details"]["pcie"]["width"] == 16 and gpu["details"]["clock_events"] == ["gpu_idle"]
    assert d["toolchain"]["driver_version"] == "580.159.04"
    tensor = [c for c in d["checks"] if c["id"] == "nvrtc-tensor-core"][0]
    from tracea_cli.backends import nvrtc

    if nvrtc.available():
        assert tensor["status"] == "ok" and "sm_90" in tensor["evidence"]
    else:
        assert tensor["status"] == "skipped"


def test_check_runs_one_check(isolated):
    r = doctor("--check", "folders-writable", "--json")
    assert r.exit_code == 0
    (c,) = json.loads(r.stdout)["checks"]
    assert c["id"] == "folders-writable" and c["status"] == "ok"
    assert not isolated.profile_path.exists()  # a single check writes no profile
    text = doctor("--check", "cpu-governor")
    assert text.exit_code == 0 and "cpu-governor" in text.stdout and "folders-writable" not in text.stdout


def test_list_checks(isolated):
    r = doctor("--list-checks")
    assert r.exit_code == 0 and all(i in r.stdout for i in check_ids())
    d = json.loads(doctor("--list-checks", "--json").stdout)
    assert [c["id"] for c in d] == list(check_ids())


@pytest.mark.parametrize("args, words", [
    (("--check", "no-such-check"), "there is no check called 'no-such-check'"),
    (("--quick", "--device", "3"), "device 3 does not exist"),
    (("--quick", "--device", "first"), "--device takes N, N,M or all"),
    (("--quick", "--device", "all"), "no CUDA device is visible"),
    (("--quick", "--output", "/proc/tracea/profile.json"), "cannot"),
])
def test_bad_input_is_one_sentence_and_exit_2(isolated, args, words):
    r = doctor(*args)
    assert r.exit_code == 2 and clean(r), r.stderr
    assert words in r.stderr and r.stderr.startswith("error: ")
    assert r.stdout == ""


def test_output_that_is_a_folder_is_bad_input(isolated, tmp_path):
    r = doctor("--quick", "--output", str(tmp_path))
    assert r.exit_code == 2 and "is a folder" in r.stderr and clean(r)


def test_ctrl_c_exits_130_and_keeps_finished_measurements(isolated, monkeypatch):
    def interrupted(cpu, *, step=None, policy=None):
        yield from _fake_cpu(cpu)
        raise KeyboardInterrupt

    monkeypatch.setattr(measure, "cpu_measurements", interrupted)
    r = doctor("--json")
    assert r.exit_code == 130 and clean(r) and "interrupted" in r.stderr
    saved = load_profile(isolated.profile_path)
    assert [m.metric for m in saved.measured] == ["memory_bandwidth"]


def test_unwritable_data_folder_is_a_failed_check_not_a_crash(tmp_path, monkeypatch):
    blocker = tmp_path / "file"
    blocker.write_text("")
    monkeypatch.setenv("TRACEA_DATA_DIR", str(blocker / "data"))  # a folder below a file cannot exist
    monkeypatch.setenv("TRACEA_CACHE_DIR", str(tmp_path / "cache"))
    r = doctor("--quick", "--json", "--strict")
    assert r.exit_code == 1 and clean(r)
    d = json.loads(r.stdout)
    c = [c for c in d["checks"] if c["id"] == "folders-writable"][0]
    assert c["status"] == "fail" and "TRACEA_DATA_DIR" in c["fix"]
    assert "not saved" in r.stderr


def test_quick_imports_neither_numba_nor_an_absent_cupy(isolated):
    import subprocess
    import sys

    probe = ("import sys\nfrom tracea_cli.cli import app\ntry:\n    app(['doctor', '--quick', '--json'])\nexcept SystemExit:\n"
             "    pass\nprint([m for m in ('numba', 'cupy', 'skopt', 'matplotlib') if m in sys.modules], file=sys.stderr)")
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120)
    imported = done.stderr.strip().splitlines()[-1]
    import importlib.util

    expected = ["cupy"] if importlib.util.find_spec("cupy") else []
    assert imported == str(expected), done.stderr
    assert json.loads(done.stdout)["kind"] == "quick"
