"""The executor contract on all three executors (the local worker pool, Ray — a real local Ray where it is
installed — and replay over a recorded landscape): every job's outcome comes back once, typed the same way whatever
the job did, capacity says how many run at once; a dead actor's job is recorded as crashed, never re-run."""

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
from tracea_cli.space import Param  # noqa: E402
from tracea_cli.target import Target  # noqa: E402
from tracea_cli.timing import TimingPolicy  # noqa: E402
from tracea_cli.tune.executor import check_executor  # noqa: E402
from tracea_cli.tune.landscape import Landscape  # noqa: E402
from tracea_cli.tune.replay_executor import ReplayExecutor  # noqa: E402
from tracea_cli.tune.workers import EvalJob, WorkerPool  # noqa: E402

TARGET = Target(backend="faulty", device_class="test")
HAS_RAY = importlib.util.find_spec("ray") is not None
ROOT = Path(__file__).parents[2]
# FaultyBackend's semantics recorded as a landscape: x 0..3 took 1 + x ms; 4 hung, 5 crashed, 6 was wrong, 7 failed
# to compile (Kernel Tuner's marker).
FAULTY_LANDSCAPE = Landscape(
    source="faulty.json", kernel="faulty", device="test", unit="ms", params=(Param("x", tuple(range(8))),),
    configs=tuple({"x": x} for x in range(8)),
    times=(1.0, 2.0, 3.0, 4.0) + (float("inf"),) * 4,
    failures=(None,) * 4 + ("timeout", "crashed", "wrong_result", "CompilationFailedConfig"))


def _jobs(xs):
    return [EvalJob(i, None, {"x": x}, TARGET, TimingPolicy(), seed=i) for i, x in enumerate(xs)]


def _contract(executor):
    outcomes = list(executor.run(_jobs([0, 5, 6, 7, 1, 4, 2])))
    by_x = {o.config["x"]: o.evaluation.status for o in outcomes}
    assert sorted(o.job_id for o in outcomes) == list(range(7))  # each once
    assert by_x == {0: Status.OK, 5: Status.CRASHED, 6: Status.WRONG_RESULT, 7: Status.COMPILE_ERROR, 1: Status.OK,
                    4: Status.TIMEOUT, 2: Status.OK}


@pytest.fixture(scope="module")
def ray_cluster():
    if not HAS_RAY:
        pytest.skip('Ray is not installed (pip install "tracea[ray]")')
    import ray

    began = time.monotonic()
    try:  # Ray's workers (and the worker processes they start) import this checkout's code and faulty_backend
        ray.init(num_cpus=2, num_gpus=2, include_dashboard=False, log_to_driver=False,
                 runtime_env={"env_vars": {"PYTHONPATH": f"{ROOT}:{ROOT / 'tests' / 'reliability'}"}})
    except Exception as e:  # pragma: no cover - depends on the machine
        pytest.skip(f"a local Ray did not start here: {type(e).__name__}: {e}")
    if time.monotonic() - began > 60:  # pragma: no cover
        ray.shutdown()
        pytest.skip("a local Ray took more than 60 s to start on this machine")
    yield time.monotonic() - began
    ray.shutdown()


def _local(request):
    return WorkerPool(FaultyBackend, [None], timeout_s=4.0), 1


def _ray(request):
    request.getfixturevalue("ray_cluster")
    from tracea_cli.tune.ray_executor import RayExecutor

    return RayExecutor(FaultyBackend, backend="faulty", device_class="test", timeout_s=4.0, actors=2), 2


def _replay(request):
    return ReplayExecutor(FAULTY_LANDSCAPE, workers=3, delay_s=0.05), 3


@pytest.fixture(params=["local", "ray", "replay"])
def executor(request):
    made, capacity = {"local": _local, "ray": _ray, "replay": _replay}[request.param](request)
    with made as ex:
        assert ex.name == request.param and ex.capacity == capacity
        yield ex


@pytest.mark.timeout(300)
def test_every_executor_keeps_the_contract(executor):
    """A batch in, each job's outcome streamed back once, failures typed the same way by every executor."""
    _contract(executor)
    outcomes = list(executor.run(_jobs([3, 2])))  # the same executor takes the next batch
    assert sorted(o.evaluation.samples.times_ms[0] for o in outcomes) == [3.0, 4.0]


@pytest.mark.timeout(60)
def test_the_replay_executor_runs_capacity_jobs_at_once_and_never_re_runs():
    with ReplayExecutor(FAULTY_LANDSCAPE, workers=4, delay_s=0.2) as ex:
        assert ex.device_classes == ("test",)
        began = time.monotonic()
        outcomes = list(ex.run(_jobs([0, 1, 2, 3, 0, 1, 2, 3])))
        took = time.monotonic() - began
        assert ex.answered == 8 and len(outcomes) == 8
    assert 0.35 < took < 1.5  # two rounds of four, not eight in a row (1.6 s) nor all at once (0.2 s)
    with ReplayExecutor(FAULTY_LANDSCAPE) as ex:
        (unknown,) = ex.run(_jobs([11]))
    assert unknown.evaluation.status is Status.LAUNCH_ERROR and "not in faulty.json" in unknown.evaluation.reason


def test_a_replay_executor_needs_a_worker():
    with pytest.raises(ValueError, match="at least 1 worker"):
        ReplayExecutor(FAULTY_LANDSCAPE, workers=0)


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


class _Closing:
    def __init__(self, closed: list) -> None:
        self.closed = closed

    def close(self) -> None:
        self.closed.append(self)


def test_a_background_start_hands_over_its_executor_once_made():
    from tracea_cli.tune.executor import StartingExecutor

    closed: list = []
    began, made_in = threading.Event(), []

    def make():
        made_in.append(threading.current_thread().name)
        began.set()
        return _Closing(closed)

    with StartingExecutor(make, background=True) as starting:
        assert began.wait(5)  # making starts at once, not when taken
        executor = starting.take()
    assert made_in == ["tracea-executor-start"] and isinstance(executor, _Closing) and closed == []  # taken: kept


def test_a_background_start_nobody_takes_is_closed_and_its_error_reaches_the_taker():
    from tracea_cli.tune.executor import StartingExecutor

    closed: list = []
    with StartingExecutor(lambda: _Closing(closed), background=True):
        pass  # a cache hit, an error or Ctrl-C before the search
    assert len(closed) == 1

    def unreachable():
        raise UsageError("cannot reach the Ray cluster at 10.0.0.1:6379: refused")

    with pytest.raises(UsageError, match="cannot reach the Ray cluster"):
        with StartingExecutor(unreachable, background=True) as starting:
            starting.take()


def test_the_local_pool_is_made_when_taken_in_the_callers_thread():
    from tracea_cli.tune.executor import StartingExecutor

    made_in: list = []
    starting = StartingExecutor(lambda: made_in.append(threading.current_thread().name) or _Closing([]),
                                background=False)
    assert made_in == []
    with starting:
        starting.take()
    assert made_in == [threading.current_thread().name]


class _FakeRay:
    """Just enough of Ray's API for RayExecutor's constructor and close: is this process connected, and to what."""

    def __init__(self, connected: bool) -> None:
        self.connected, self.inits, self.shutdowns = connected, [], 0

    def is_initialized(self) -> bool:
        return self.connected

    def init(self, address=None, **_) -> None:
        self.connected = True
        self.inits.append(address)

    def shutdown(self) -> None:
        self.connected = False
        self.shutdowns += 1

    def cluster_resources(self) -> dict:
        return {"CPU": 1.0}

    def remote(self, **_):
        class Handle:
            def __init__(self, *args) -> None:
                self.start = self.run = type("Method", (), {"remote": staticmethod(lambda *a: None)})()

        return lambda cls: type("Remote", (), {"remote": staticmethod(lambda *a: Handle(*a))})

    def kill(self, actor) -> None:
        pass


@pytest.mark.parametrize("connected", [False, True])
def test_the_ray_executor_disconnects_at_exit_only_from_a_connection_it_made(monkeypatch, connected):
    """Disconnecting at exit ourselves is faster than Ray's own exit path (docs/results/ray_exit_cpu_2026-12-07.md);
    a connection the caller made is left alone."""
    import atexit

    from tracea_cli.tune.ray_executor import RayExecutor

    fake = _FakeRay(connected)
    monkeypatch.setitem(sys.modules, "ray", fake)
    monkeypatch.setattr("tracea_cli.tune.ray_executor._check_reachable", lambda address: None)
    before = atexit._ncallbacks()
    try:
        with RayExecutor(FaultyBackend, backend="cpu", device_class="cpu", timeout_s=1.0, address="auto") as ex:
            assert ex.capacity == 1
        assert fake.inits == ([] if connected else ["auto"])
        assert atexit._ncallbacks() - before == (0 if connected else 1)
        assert fake.shutdowns == 0  # the connection stays for the process's next tune
    finally:
        atexit.unregister(fake.shutdown)
