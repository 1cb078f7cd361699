"""The Ray executor: one actor per GPU of a Ray cluster (Ray sets each actor's CUDA_VISIBLE_DEVICES), each wrapping
Tracea's own isolated worker process (workers.WorkerPool with one device), so a kernel that crashes, hangs or
corrupts its context kills that worker, not the actor: the watchdog, timeouts and failure records are the local
ones. An actor that dies anyway (its node lost) answers its in-flight job as CRASHED, and the job is not run again
(`max_restarts=0`, `max_task_retries=0`): the driver records it like any other failure.

Ray is imported when this executor is made, never before. All actors must be GPUs of the kind being tuned (a tuning
result belongs to one device class): a cluster with other kinds is refused with the classes it has; tune each kind
from a driver on a node of that kind. On the cpu backend the cluster runs one actor (one CPU measures at a time).
"""

from __future__ import annotations

import atexit
from dataclasses import replace
from typing import Any, Callable, Iterable, Iterator

from tracea_cli.backends.base import Evaluation, Status
from tracea_cli.errors import UsageError
from tracea_cli.tune.workers import EvalJob, EvalOutcome


def _ray() -> Any:
    try:
        import ray
    except ImportError:
        raise UsageError("--executor ray needs Ray, which is not installed.", 'Install it: pip install "tracea[ray]".') from None
    return ray


def _check_reachable(address: str | None) -> None:
    """A HOST:PORT that does not answer is refused at once (Ray itself waits a minute for it)."""
    from tracea_cli.doctor.cluster import check_reachable

    check_reachable(address)


class EvalActor:
    """Inside a Ray worker process: one Tracea worker pool on this actor's device (CUDA index 0 of what Ray left
    visible). `start` starts its worker process; `run` would otherwise start it on the first job."""

    def __init__(self, factory: Callable[[], Any], timeout_s: float, backend: str) -> None:
        self.factory, self.timeout_s = factory, timeout_s
        self.backend = backend
        self.device = 0 if backend == "cuda" else None
        self.pool: Any = None

    def _pool(self) -> Any:
        from tracea_cli.tune.workers import WorkerPool

        if self.pool is None:
            self.pool = WorkerPool(self.factory, [self.device], timeout_s=self.timeout_s)
        return self.pool

    def start(self) -> str | None:
        """Start the worker process (it imports and sets up the device while the driver compiles), and say this
        actor's GPU as the capability profile names it (the quick doctor, on the actor's node); None off CUDA."""
        self._pool().start()
        if self.backend != "cuda":
            return None
        from tracea_cli.config import Settings
        from tracea_cli.doctor.profile import cuda_gpu
        from tracea_cli.doctor.run import load_or_make_profile

        return cuda_gpu(load_or_make_profile(Settings.from_env()), 0).device_class

    def run(self, job: EvalJob) -> EvalOutcome:
        if self.device is not None:
            job = replace(job, target=replace(job.target, device_index=self.device))
        return next(iter(self._pool().run([job])))


class RayExecutor:
    name = "ray"

    def __init__(self, factory: Callable[[], Any], *, backend: str, device_class: str, timeout_s: float,
                 address: str | None = None, actors: int | None = None) -> None:
        ray = self._ray = _ray()
        if not ray.is_initialized():
            _check_reachable(address)
            try:
                ray.init(address=address, log_to_driver=False, include_dashboard=False, ignore_reinit_error=True)
            except Exception as e:  # ConnectionError, a bad address, a head that is not there
                text = " ".join(str(e).split())[:200]
                raise UsageError(f"cannot reach the Ray cluster at {address or 'auto'}: {text}",
                                 "Start one (`ray start --head`) or give --ray-address HOST:PORT of its head.") from None
            # Disconnecting ourselves at exit takes about 0.3 s, where Ray's own exit path took 0.8 s
            # (docs/results/ray_exit_cpu_2026-12-07.md). The connection stays for the process: the next tune of a
            # bench reuses it. A connection the caller made is theirs to end.
            atexit.register(ray.shutdown)
        gpus = int(ray.cluster_resources().get("GPU", 0))
        if backend == "cuda":
            if gpus < 1:
                raise UsageError("the Ray cluster has no GPUs.", "Start Ray on GPU nodes (`ray start --num-gpus N`).")
            count, options = actors or gpus, {"num_gpus": 1}
        else:
            count, options = actors or 1, {"num_cpus": 1}
        self._backend, self._factory, self._timeout_s = backend, factory, timeout_s
        self._actor_class = ray.remote(max_restarts=0, max_task_retries=0, **options)(EvalActor)
        self._device_class = device_class
        # Each actor starts its worker at once; what kind of GPU it has is checked before the first job is sent, so
        # the actors' start-up overlaps the driver's own (its compiles run while the first job is awaited).
        self._started: list[Any] = []
        self._actors = [self._new_actor() for _ in range(count)]

    def _new_actor(self) -> Any:
        actor = self._actor_class.remote(self._factory, self._timeout_s, self._backend)
        self._started.append(actor.start.remote())
        return actor

    def _check_device_classes(self) -> None:
        """Every actor's GPU is of the kind being tuned (a tuning result belongs to one device class)."""
        started, self._started = self._started, []
        if self._backend != "cuda" or not started:
            return
        other = sorted({c for c in self._ray.get(started) if c != self._device_class})
        if other:
            self.close()
            raise UsageError(f"the Ray cluster's GPUs are of other kinds than {self._device_class} "
                             f"({'; '.join(other)}), and a tuning result belongs to one kind.",
                             "Tune each kind from a driver on a node of that kind, or limit Ray to one kind.")

    @property
    def capacity(self) -> int:
        return len(self._actors)

    def run(self, jobs: Iterable[EvalJob], *,
            retarget: Callable[[EvalJob, int | None], EvalJob] | None = None) -> Iterator[EvalOutcome]:
        ray = self._ray
        free = list(self._actors)
        in_flight: dict[Any, tuple[Any, EvalJob]] = {}
        pending = iter(jobs)
        exhausted = False
        while True:
            while free and not exhausted:
                job = next(pending, None)
                if job is None:
                    exhausted = True
                    break
                self._check_device_classes()  # once, after the first job is ready (compiled)
                actor = free.pop()
                in_flight[actor.run.remote(job)] = (actor, job)
            if not in_flight:
                return
            (ref,), _ = ray.wait(list(in_flight), num_returns=1)
            actor, job = in_flight.pop(ref)
            try:
                outcome = ray.get(ref)
                free.append(actor)
            except (ray.exceptions.RayActorError, ray.exceptions.WorkerCrashedError, ray.exceptions.NodeDiedError) as e:
                text = " ".join(str(e).split())[:300]
                outcome = EvalOutcome(job.job_id, job.config, Evaluation(Status.CRASHED, f"the Ray actor died: {text}"),
                                      job.target.device_index)
                self._actors[self._actors.index(actor)] = fresh = self._new_actor()  # never re-runs the job
                free.append(fresh)
            yield outcome

    def close(self) -> None:
        for actor in self._actors:
            try:
                self._ray.kill(actor)
            except Exception:
                pass
        self._actors = []

    def __enter__(self) -> RayExecutor:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
