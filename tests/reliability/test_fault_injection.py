"""Each fault a candidate can have, caused for real in a real worker process beside two good candidates, through the
real tuning driver and cache: a hang, a crash, a wrong result, a compile failure, a launch failure and a worker
killed from outside. After each one the four invariants of invariants.py hold: the trials the run acknowledged are
in the cache as reported, the file is intact, every failure has a typed record with a reason, and the good
candidate wins. Then the same through `tracea tune` on the command line, and a second run that finds the cache.

(Killed parent, full disk, damaged file, concurrent writers and read-only folders: test_signals.py,
test_disk_and_damage.py, test_concurrency.py, test_read_only.py here; hostile input: test_hostile_inputs.py.)
Only the backend is a test double (faulty_backend.OneFaultBackend); the driver, pool, workers and cache are the
shipped code."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest
from faulty_backend import FAULTS, OneFaultBackend
from invariants import assert_acknowledged_kept, assert_intact, assert_typed, stored_trials
from typer.testing import CliRunner

from tracea_cli.cli import app
from tracea_cli.config import Settings
from tracea_cli.ops.gemm.problem import GemmProblem
from tracea_cli.space import config_key
from tracea_cli.tune import setup
from tracea_cli.tune.driver import TuneRequest, tune

#: the status each fault must be recorded with
EXPECTED = {"hang": "timeout", "crash": "crashed", "wrong result": "wrong_result", "compile failure": "compile_error",
            "launch failure": "launch_error", "killed worker": "crashed"}
assert set(EXPECTED) == set(FAULTS)


@pytest.fixture
def faulty(tmp_path, monkeypatch):
    monkeypatch.setattr(setup, "OpBackend", OneFaultBackend)
    monkeypatch.setenv("TRACEA_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("TRACEA_DATA_DIR", str(tmp_path / "data"))
    settings = replace(Settings.from_env(), worker_timeout_s=3.0)
    return settings, tmp_path / "cache" / "tuning.sqlite3"


@pytest.mark.timeout(180)
@pytest.mark.parametrize("fault", sorted(FAULTS))
def test_a_faulty_candidate_is_recorded_typed_and_nothing_acknowledged_is_lost(fault, faulty, monkeypatch):
    settings, path = faulty
    monkeypatch.setenv("TRACEA_TEST_FAULT", fault)
    result = tune(TuneRequest(GemmProblem(48, 48, 48), backend="cpu", strategy="grid", budget=3, seed=0),
                  settings=settings)

    assert [(f.config["x"], f.status) for f in result.failures] == [(FAULTS[fault], EXPECTED[fault])]
    assert all(f.reason.strip() for f in result.failures)
    assert result.winner is not None and result.winner.config == {"x": 0}  # the good one, never the fault
    acknowledged = {config_key(f.config): f.status for f in result.failures}
    acknowledged.update({config_key(m.config): "ok" for m in result.ranking})
    assert_intact(path)
    assert_typed(path)
    assert_acknowledged_kept(path, acknowledged)
    assert len(stored_trials(path)) == result.trials_total == 3


@pytest.mark.timeout(240)
def test_the_command_line_reports_the_faults_and_a_second_run_finds_the_cache(faulty, monkeypatch):
    _, path = faulty
    monkeypatch.setenv("TRACEA_TEST_FAULT", "crash")
    monkeypatch.setenv("TRACEA_WORKER_TIMEOUT_S", "3")
    args = ["tune", "gemm", "--m", "40", "--backend", "cpu", "--strategy", "grid", "--budget", "3", "--json"]
    first = CliRunner().invoke(app, args)
    assert first.exit_code == 0, first.output
    said = json.loads(first.stdout)
    assert said["cache_hit"] is False
    assert [(f["config"]["x"], f["status"]) for f in said["failures"]] == [(5, "crashed")]
    assert said["winner"]["config"] == {"x": 0}
    assert_intact(path)
    assert_typed(path)

    again = CliRunner().invoke(app, args)
    assert again.exit_code == 0, again.output
    assert json.loads(again.stdout)["cache_hit"] is True
    assert len(stored_trials(path)) == 3  # a hit adds no trial
    assert_intact(path)
