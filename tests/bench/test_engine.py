"""The live engine end to end on the CPU with a small real backend: the doctor's quick profile, the tuning driver
and its workers, the SQLite cache (winner, trials), re-measurement in this process, --no-tune lookups."""

import sys
from dataclasses import replace
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))  # spawned tuning workers import numpy_backend by name

from numpy_backend import NumpyBackend  # noqa: E402

from tracea_cli.bench.engine import LiveEngine  # noqa: E402
from tracea_cli.bench.runner import BenchRequest, run_bench  # noqa: E402
from tracea_cli.bench.suites import Suite  # noqa: E402
from tracea_cli.config import Settings  # noqa: E402
from tracea_cli.errors import UsageError  # noqa: E402
from tracea_cli.ops.gemm.problem import GemmProblem  # noqa: E402
from tracea_cli.timing import QUICK  # noqa: E402
from tracea_cli.tune import setup  # noqa: E402


@pytest.fixture
def settings(tmp_path, monkeypatch):
    monkeypatch.setattr(setup, "OpBackend", NumpyBackend)
    s = Settings.from_env({"TRACEA_CACHE_DIR": str(tmp_path / "cache"), "TRACEA_DATA_DIR": str(tmp_path / "data")})
    return replace(s, worker_timeout_s=60.0)


@pytest.mark.timeout(300)
def test_live_engine_tunes_measures_and_reads_the_cache(settings):
    engine = LiveEngine(settings, backend="cpu")
    assert engine.target.backend == "cpu" and engine.unsupported(GemmProblem(64, 64, 64)) is None
    assert "runs fp32, fp64" in engine.unsupported(GemmProblem(64, 64, 64, dtype="bf16"))
    problems = (GemmProblem(96, 80, 64), GemmProblem(64, 64, 64, dtype="fp64"))
    suite = Suite("engine", problems)
    first = run_bench(BenchRequest(suite=suite, tune_budget=3, policy=QUICK, command="test"), engine)
    env = first.environment
    assert env.backend == "cpu" and env.device and env.device_class == engine.target.device_class and env.machine_id
    assert "python" in env.host and "hostname" not in env.host
    for p in first.problems:
        assert p.tuning.evaluations == 3 and not p.tuning.cache_hit and p.tuning.trials_total == 3
        assert [t.index for t in p.tuning.trials] == [1, 2, 3] and all(t.status == "ok" for t in p.tuning.trials)
        tuned, base = first.rows_for(p.problem)
        assert tuned.ok and tuned.config["split"] in (1, 2, 4) and tuned.rel_error < 1e-5
        assert base.ok and base.provider == "numpy" and tuned.speedup_over == "numpy"
        assert p.ceiling.flops_per_s is None or p.ceiling.flops_per_s > 0  # a quick profile may have no measurements

    cached = run_bench(BenchRequest(suite=suite, tune=False, policy=QUICK), LiveEngine(settings, backend="cpu"))
    for p, before in zip(cached.problems, first.problems):
        assert p.tuning.cache_hit and p.tuning.evaluations == 0 and p.tuning.trials_total == 3
        assert cached.tuned(p.problem).config == first.tuned(p.problem).config
    missing = run_bench(BenchRequest(suite=Suite("new", (GemmProblem(48, 48, 48),)), tune=False, policy=QUICK), engine)
    assert missing.results[0].status == "skipped" and missing.results[1].ok
    pools = list(engine._pools.values())
    assert len(pools) == 1  # both problems were tuned by the same workers, started once
    workers = [w.proc for w in pools[0]._workers.values()]
    engine.close()
    assert workers and not any(p.is_alive() for p in workers)


def test_live_engine_refuses_devices_on_the_cpu(settings):
    with pytest.raises(UsageError) as e:
        LiveEngine(settings, backend="cpu", devices="0")
    assert "--device chooses CUDA devices" in e.value.message
