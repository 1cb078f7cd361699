"""Executors: what runs the tuner's evaluation jobs. The driver asks one for batches and writes every outcome to the
cache as it streams back (the driver is the only writer of the cache, wherever the jobs ran).

    local   the per-device worker pool of this machine (workers.py; the default, no dependency)
    ray     one Ray actor per GPU of a Ray cluster, each wrapping the same isolated worker (ray_executor.py;
            `pip install "tracea[ray]"`, imported only when asked for)

Both take jobs (`workers.EvalJob`, CUDA ones with their compiled artifact: compiling needs no GPU, so it happens
where the driver runs and the binary travels with the job) and yield `workers.EvalOutcome`s in completion order;
`capacity` is how many jobs they measure at once, which sizes the strategy's batches. Recorded landscapes are the
third way strategies run (tune/replay.py): there the search asks for batches of the same size and the landscape
answers.
"""

from __future__ import annotations

import threading
from typing import Any, Callable, Iterable, Iterator, Protocol

from tracea_cli.errors import UsageError
from tracea_cli.tune.workers import EvalJob, EvalOutcome, WorkerPool

EXECUTORS = ("local", "ray")


class Executor(Protocol):
    name: str

    @property
    def capacity(self) -> int:
        """Jobs measured at once."""
        ...

    def run(self, jobs: Iterable[EvalJob], *,
            retarget: Callable[[EvalJob, int | None], EvalJob] | None = None) -> Iterator[EvalOutcome]:
        """Every job's outcome, in completion order; a job whose worker or actor died has a CRASHED outcome."""
        ...

    def close(self) -> None: ...

    def __enter__(self) -> Executor: ...

    def __exit__(self, *exc: object) -> None: ...


def check_executor(name: str, address: str | None) -> None:
    if name not in EXECUTORS:
        raise UsageError(f"unknown executor {name!r}.", f"Use one of {', '.join(EXECUTORS)}.")
    if address is not None and name != "ray":
        raise UsageError("--ray-address is for --executor ray.", "Add --executor ray, or leave --ray-address out.")


class StartingExecutor:
    """An executor being made. With `background`, in a thread from the moment this is made, so that its start-up
    (Ray: importing it, connecting to the cluster, making the actors) overlaps what the driver does before its
    search; otherwise when taken (the local pool costs nothing to make). `take()` returns the executor (and
    raises what making it raised, a UsageError for an unreachable cluster say); leaving the `with` block closes an
    executor nobody took (a cache hit, an error, Ctrl-C before the search)."""

    def __init__(self, make: Callable[[], Any], *, background: bool) -> None:
        self._make = make
        self._made: Any = None
        self._error: BaseException | None = None
        self._taken = False
        self._thread: threading.Thread | None = None
        if background:
            self._thread = threading.Thread(target=self._run, name="tracea-executor-start", daemon=True)
            self._thread.start()

    def _run(self) -> None:
        try:
            self._made = self._make()
        except BaseException as e:  # handed to whoever takes it
            self._error = e

    def take(self) -> Any:
        self._taken = True
        if self._thread is None:
            return self._make()
        self._thread.join()
        if self._error is not None:
            raise self._error
        return self._made

    def __enter__(self) -> StartingExecutor:
        return self

    def __exit__(self, *exc: object) -> None:
        if self._taken or self._thread is None:
            return
        self._thread.join()
        if self._made is not None:
            self._made.close()


def start_executor(name: str, plan: Any, settings: Any, *, address: str | None = None) -> StartingExecutor:
    """`make_executor`'s executor, being made: in the background for Ray connecting to a running cluster (see
    StartingExecutor). Without an address Ray starts a local instance, whose processes die with the thread that
    started them (their parent-death signal is per thread): that one is made in the caller's thread, when taken."""
    check_executor(name, address)
    return StartingExecutor(lambda: make_executor(name, plan, settings, address=address),
                            background=name == "ray" and address is not None)


def make_executor(name: str, plan: Any, settings: Any, *, address: str | None = None) -> Any:
    """The executor `name` for a tuning plan (tune/setup.Plan): its backend factory, devices and target."""
    check_executor(name, address)
    if name == "local":
        return WorkerPool(plan.backend_factory, plan.devices, timeout_s=settings.worker_timeout_s)
    from tracea_cli.tune.ray_executor import RayExecutor

    return RayExecutor(plan.backend_factory, backend=plan.target.backend, device_class=plan.target.device_class,
                       timeout_s=settings.worker_timeout_s, address=address)
