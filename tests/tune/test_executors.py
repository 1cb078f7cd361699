"""The executor contract on the local worker pool and on Ray (a real local Ray where it is installed): every job's
outcome comes back once, typed, whatever the job did; a dead actor's job is recorded as crashed, never re-run."""

from __future__ import annotations

import importlib.util
import sys
import threading
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parents[1] / "reliability"))  # workers (and Ray's) import faulty_backend by name

from faulty_backend import FaultyBackend  # noqa: E402

from tracea_cli.backends.base import Status  # noqa: E402
from tracea_cli.errors import UsageError  # noqa: E402
from tracea_cli.target import Target  # noqa: E402
from tracea_cli.timing import TimingPolicy  # noqa: E402
from tracea_cli.tune.executor import check_executor  # noqa: E402
from tracea_cli.tune.workers import EvalJob, WorkerPool  # noqa: E402

TARGET = Target(backend="faulty", device_class="test")
HAS_RAY = importlib.util.find_spec("ray") is not None


def _jobs(xs):
    return [EvalJob(i, None, {"x": x}, TARGET, TimingPolicy(), seed=i) for i, x in enumerate(xs)]


def _contract(executor):
    outcomes = list(executor.run(_jobs([0, 5, 6, 7, 1, 4, 2])))
    by_x = {o.config["x"]: o.evaluation.status for o in outcomes}
    assert sorted(o.job_id for o in outcomes) == list(range(7))  # each once
    assert by_x == {0: Status.OK, 5: Status.CRASHED, 6: Status.WRONG_RESULT, 7: Status.COMPILE_ERROR, 1: Status.OK,
                    4: Status.TIMEOUT, 2: Status.OK}


@pytest.mark.timeout(240)
def test_the_local_executor_keeps_the_contract():
    with WorkerPool(FaultyBackend, [None], timeout_s=4.0) as pool:
        assert pool.name == "local" and pool.capacity == 1
        _contract(pool)


@pytest.fixture(scope="module")
def ray_cluster():
    if not HAS_RAY:
        pytest.skip('Ray is not installed (pip install "tracea[ray]")')
    import ray

    began = time.monotonic()
    ray.init(num_cpus=2, num_gpus=2, include_dashboard=False, log_to_driver=False,
             runtime_env={"env_vars": {"PYTHONPATH": str(Path(__file__).parent)}})
    yield time.monotonic() - began
    ray.shutdown()


@pytest.mark.timeout(300)
def test_the_ray_executor_keeps_the_contract_and_spreads_jobs(ray_cluster):
    from tracea_cli.tune.ray_executor import RayExecutor

    with RayExecutor(FaultyBackend, backend="faulty", device_class="test", timeout_s=4.0, actors=2) as ray_exec:
        assert ray_exec.name == "ray" and ray_exec.capacity == 2
        _contract(ray_exec)


@pytest.mark.timeout(300)
def test_a_killed_actor_records_its_job_as_crashed_and_a_fresh_one_takes_the_rest(ray_cluster):
    import ray

    from tracea_cli.tune.ray_executor import RayExecutor

    with RayExecutor(FaultyBackend, backend="faulty", device_class="test", timeout_s=60.0, actors=1) as ray_exec:
        victim = ray_exec._actors[0]
        threading.Timer(5.0, lambda: ray.kill(victim)).start()  # while it waits on the hanging job
        outcomes = list(ray_exec.run(_jobs([4, 0])))
    assert outcomes[0].evaluation.status is Status.CRASHED and "Ray actor died" in outcomes[0].evaluation.reason
    assert outcomes[1].evaluation.status is Status.OK and len(outcomes) == 2


def test_executor_choices_are_checked_in_one_sentence():
    with pytest.raises(UsageError, match="unknown executor 'dask'"):
        check_executor("dask", None)
    with pytest.raises(UsageError, match="--ray-address is for --executor ray"):
        check_executor("local", "auto")


@pytest.mark.skipif(HAS_RAY, reason="Ray is installed here")
def test_without_ray_the_ray_executor_says_how_to_get_it():
    from tracea_cli.tune.ray_executor import RayExecutor

    with pytest.raises(UsageError, match=r'pip install "tracea\[ray\]"'):
        RayExecutor(FaultyBackend, backend="cpu", device_class="x", timeout_s=1.0)


def test_an_address_that_does_not_answer_is_refused_at_once():
    from tracea_cli.tune.ray_executor import _check_reachable

    began = time.monotonic()
    with pytest.raises(UsageError, match="cannot reach the Ray cluster at 127.0.0.1:1"):
        _check_reachable("127.0.0.1:1")
    assert time.monotonic() - began < 10
    _check_reachable("auto")  # Ray finds (or refuses) those itself
