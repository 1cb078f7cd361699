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


def make_executor(name: str, plan: Any, settings: Any, *, address: str | None = None) -> Any:
    """The executor `name` for a tuning plan (tune/setup.Plan): its backend factory, devices and target."""
    check_executor(name, address)
    if name == "local":
        return WorkerPool(plan.backend_factory, plan.devices, timeout_s=settings.worker_timeout_s)
    from tracea_cli.tune.ray_executor import RayExecutor

    return RayExecutor(plan.backend_factory, backend=plan.target.backend, device_class=plan.target.device_class,
                       timeout_s=settings.worker_timeout_s, address=address)
