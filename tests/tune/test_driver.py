"""The tuning driver end to end with a misbehaving backend: failures recorded, a correct winner, hit, resume, force."""

import sys
from dataclasses import replace
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parents[1] / "reliability"))  # spawned workers import faulty_backend by name

from faulty_backend import FaultyBackend  # noqa: E402

from tracea_cli.config import Settings  # noqa: E402
from tracea_cli.ops.gemm.problem import GemmProblem  # noqa: E402
from tracea_cli.tune import setup  # noqa: E402
from tracea_cli.tune.driver import TuneRequest, tune  # noqa: E402


@pytest.fixture
def settings(tmp_path, monkeypatch):
    monkeypatch.setattr(setup, "OpBackend", FaultyBackend)
    s = Settings.from_env({"TRACEA_CACHE_DIR": str(tmp_path / "cache"), "TRACEA_DATA_DIR": str(tmp_path / "data")})
    return replace(s, worker_timeout_s=3.0)


@pytest.mark.timeout(300)
def test_faults_are_recorded_and_a_correct_winner_is_chosen(settings):
    request = TuneRequest(GemmProblem(64, 64, 64), backend="cpu", strategy="random", budget=8, seed=3)
    result = tune(request, settings=settings)
    assert not result.cache_hit and result.evaluations == 8 and result.trials_total == 8
    assert result.per_device == {"cpu": 8} and result.as_dict()["per_device"] == {"cpu": 8}
    assert result.winner.config == {"x": 0} and result.winner.median_ms == 1.0
    assert result.baseline_name == "reference" and result.baseline.median_ms == 2.5
    statuses = {f.config["x"]: f.status for f in result.failures}
    assert statuses == {4: "timeout", 5: "crashed", 6: "wrong_result", 7: "compile_error"}
    assert [r.config["x"] for r in result.ranking] == [0, 1, 2]  # the best few, re-timed, in order
    phases = result.as_dict()["phases_s"]
    assert list(phases) == ["setup", "executor start", "search", "re-time and baseline", "executor close"]
    assert all(s >= 0 for s in phases.values())
    assert phases["search"] > 3.0  # the search waited out the hanging candidate's 3 s watchdog

    again = tune(request, settings=settings)
    assert again.cache_hit and again.evaluations == 0 and again.winner.config == {"x": 0}
    assert again.as_dict()["phases_s"] == {}  # a cache hit ran no phase
    assert again.as_dict()["baseline"]["name"] == "reference"


@pytest.mark.timeout(300)
def test_resume_counts_stored_trials_and_force_starts_afresh(settings):
    small = TuneRequest(GemmProblem(32, 32, 32), backend="cpu", strategy="grid", budget=2, seed=0)
    first = tune(small, settings=settings)
    assert first.evaluations == 2 and first.winner.config == {"x": 0}
    more = tune(replace(small, budget=4), settings=settings)
    assert not more.cache_hit and more.evaluations == 2 and more.trials_total == 4  # resumed: 2 stored + 2 new
    forced = tune(replace(small, budget=2, force=True), settings=settings)
    assert forced.evaluations == 2 and forced.trials_total == 2


@pytest.mark.timeout(300)
def test_a_failed_baseline_is_reported_not_hidden(settings, monkeypatch):
    from faulty_backend import BrokenBaselineBackend

    monkeypatch.setattr(setup, "OpBackend", BrokenBaselineBackend)
    result = tune(TuneRequest(GemmProblem(16, 16, 16), backend="cpu", strategy="grid", budget=1), settings=settings)
    assert result.winner.config == {"x": 0} and result.baseline is None
    assert result.as_dict()["baseline_error"] == "launch_error: the vendor library is not installed"
