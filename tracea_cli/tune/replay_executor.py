"""The replay executor: the Executor interface (tune/executor.py) answered from a recorded landscape instead of
hardware, so that the driver's batching and every strategy run the same way without a GPU.

A job's configuration is looked up in the landscape (tune/landscape.py): a recorded time comes back as an OK
evaluation of one sample in the landscape's unit, a recorded failure as a failed evaluation (Kernel Tuner's
"CompilationFailedConfig" as a compile error, any other marker named by a Status value as that status, the rest as a
launch error), and a configuration the landscape never recorded as a launch error saying so. `workers` jobs are
answered at once; with `delay_s` > 0 each answer takes that long (a thread per worker sleeps), so wall time per
evaluation can be measured against the number of workers. Every job is answered exactly once; nothing is re-run.
"""

from __future__ import annotations

import threading
import time
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from typing import Callable, Iterable, Iterator

from tracea_cli.backends.base import Evaluation, Status
from tracea_cli.space import config_key
from tracea_cli.timing import Samples
from tracea_cli.tune.landscape import Landscape
from tracea_cli.tune.workers import EvalJob, EvalOutcome

_STATUSES = {s.value: s for s in Status}


def recorded_evaluation(landscape: Landscape, index: int) -> Evaluation:
    """What the landscape recorded for configuration `index`, as the evaluation a worker would have returned."""
    marker = landscape.failures[index]
    if marker is None:
        t = landscape.times[index]
        return Evaluation(Status.OK, samples=Samples(times_ms=(t,), throttled=(False,), wall_s=0.0), rel_error=0.0)
    if marker == "CompilationFailedConfig":
        status = Status.COMPILE_ERROR
    else:
        status = _STATUSES.get(marker, Status.LAUNCH_ERROR)
    return Evaluation(status, reason=f"recorded in {landscape.source}: {marker}")


class ReplayExecutor:
    name = "replay"

    def __init__(self, landscape: Landscape, *, workers: int = 1, delay_s: float = 0.0) -> None:
        if workers < 1:
            raise ValueError(f"a replay executor needs at least 1 worker, got {workers}")
        if delay_s < 0:
            raise ValueError(f"the simulated delay must be >= 0 s, got {delay_s}")
        self.landscape, self.delay_s = landscape, delay_s
        self._workers = workers
        self._index = {config_key(c): i for i, c in enumerate(landscape.configs)}
        self._threads: ThreadPoolExecutor | None = None
        self._lock = threading.Lock()
        self.answered = 0  # jobs answered so far (each exactly once)

    @property
    def capacity(self) -> int:
        return self._workers

    @property
    def device_classes(self) -> tuple[str, ...]:
        return (self.landscape.device,)

    def _answer(self, job: EvalJob, slot: int) -> EvalOutcome:
        if self.delay_s:
            time.sleep(self.delay_s)
        index = self._index.get(config_key(job.config))
        if index is None:
            ev = Evaluation(Status.LAUNCH_ERROR, reason=f"{config_key(job.config)} is not in {self.landscape.source}")
        else:
            ev = recorded_evaluation(self.landscape, index)
        with self._lock:
            self.answered += 1
        return EvalOutcome(job.job_id, job.config, ev, slot)

    def run(self, jobs: Iterable[EvalJob], *,
            retarget: Callable[[EvalJob, int | None], EvalJob] | None = None) -> Iterator[EvalOutcome]:
        """Each job's recorded outcome, in completion order; at most `capacity` in flight."""
        if self.delay_s == 0:
            for job in jobs:
                yield self._answer(job, 0)
            return
        if self._threads is None:
            self._threads = ThreadPoolExecutor(self._workers, thread_name_prefix="replay")
        free = list(range(self._workers))
        in_flight: dict[Future, int] = {}
        pending = iter(jobs)
        exhausted = False
        while True:
            while free and not exhausted:
                job = next(pending, None)
                if job is None:
                    exhausted = True
                    break
                slot = free.pop()
                in_flight[self._threads.submit(self._answer, job, slot)] = slot
            if not in_flight:
                return
            done, _ = wait(list(in_flight), return_when=FIRST_COMPLETED)
            for future in done:
                free.append(in_flight.pop(future))
                yield future.result()

    def close(self) -> None:
        if self._threads is not None:
            self._threads.shutdown(wait=True)
            self._threads = None

    def __enter__(self) -> ReplayExecutor:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
