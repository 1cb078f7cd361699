"""The worker pool survives hangs, crashes, wrong results and compile failures, and keeps going."""

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parents[1] / "reliability"))  # spawned workers import faulty_backend by name

from faulty_backend import FaultyBackend  # noqa: E402

from tracea_cli.backends.base import Status
from tracea_cli.target import Target  # noqa: E402
from tracea_cli.timing import TimingPolicy  # noqa: E402
from tracea_cli.tune.workers import EvalJob, WorkerPool  # noqa: E402

TARGET = Target(backend="faulty", device_class="test")


@pytest.mark.timeout(240)
def test_pool_records_each_fault_and_goes_on():
    jobs = [EvalJob(i, None, {"x": x}, TARGET, TimingPolicy(), seed=i) for i, x in enumerate([0, 4, 1, 5, 6, 7, 2])]
    with WorkerPool(FaultyBackend, [None], timeout_s=4.0) as pool:
        outcomes = {o.config["x"]: o.evaluation for o in pool.run(jobs)}
    assert outcomes[0].status is Status.OK and outcomes[0].samples.times_ms[0] == 1.0
    assert outcomes[4].status is Status.TIMEOUT and "killed" in outcomes[4].reason
    assert outcomes[5].status is Status.CRASHED and "exit code 3" in outcomes[5].reason
    assert outcomes[6].status is Status.WRONG_RESULT
    assert outcomes[7].status is Status.COMPILE_ERROR and "x=7" in outcomes[7].reason
    assert outcomes[1].ok and outcomes[2].ok  # fresh workers took over after the hang and the crash


@pytest.mark.timeout(240)
def test_a_launch_error_retires_its_worker_and_the_next_job_runs_on_a_fresh_one():
    jobs = [EvalJob(i, None, {"x": x}, TARGET, TimingPolicy(), seed=i) for i, x in enumerate([0, 8, 1, 8, 8, 2])]
    with WorkerPool(FaultyBackend, [None], timeout_s=30.0) as pool:
        outcomes = [(o.config["x"], o.evaluation.status) for o in pool.run(jobs)]
    assert outcomes == [(0, Status.OK), (8, Status.LAUNCH_ERROR), (1, Status.OK), (8, Status.LAUNCH_ERROR),
                        (8, Status.LAUNCH_ERROR), (2, Status.OK)]


@pytest.mark.timeout(240)
def test_jobs_given_as_they_become_ready_are_measured_while_later_ones_are_still_coming():
    import time

    produced: dict[int, float] = {}

    def ready_one_by_one():  # what setup.jobs does on a GPU: each job once its compile ends
        for i, x in enumerate([0, 1, 2]):
            if i:
                time.sleep(1.5)
            produced[i] = time.monotonic()
            yield EvalJob(i, None, {"x": x}, TARGET, TimingPolicy(), seed=i)

    received: dict[int, float] = {}
    with WorkerPool(FaultyBackend, [None], timeout_s=30.0) as pool:
        for outcome in pool.run(ready_one_by_one()):
            received[outcome.job_id] = time.monotonic()
            assert outcome.evaluation.ok
    assert sorted(received) == [0, 1, 2]
    assert received[0] < produced[1] and received[1] < produced[2]  # measured before the next one was ready


@pytest.mark.timeout(240)
def test_jobs_spread_over_every_device():
    from faulty_backend import SlowBackend

    from tracea_cli.tune.setup import retarget

    jobs = [EvalJob(i, None, {"x": i % 4}, TARGET, TimingPolicy(), seed=i) for i in range(16)]
    with WorkerPool(SlowBackend, [0, 1], timeout_s=30.0) as pool:
        outcomes = list(pool.run(jobs, retarget=retarget))
    assert sorted(o.job_id for o in outcomes) == list(range(16)) and all(o.evaluation.ok for o in outcomes)
    assert {o.device_index for o in outcomes} == {0, 1}  # each job ran on the device its worker owns
