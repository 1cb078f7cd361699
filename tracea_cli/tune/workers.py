"""Fault-proof evaluation: candidates run in worker processes under a watchdog.

A job dataclass goes in, an outcome dataclass comes out. The parent owns the cache and the console; a worker only
compiles (when the job carries no artifact), checks and times. A worker that dies, hangs past its timeout, or hits a
launch error that may have poisoned its CUDA context is replaced by a fresh one before the next job. Workers ignore
SIGINT: Ctrl-C reaches the parent, which stops them.
"""

from __future__ import annotations

import contextlib
import multiprocessing as mp
import os
import signal
import sys
import threading
import time
from dataclasses import dataclass
from multiprocessing.connection import Connection, wait
from typing import Any, Callable, Iterable, Iterator, Mapping

from tracea_cli.backends.base import (
    Artifact,
    Backend,
    CompileFailed,
    Evaluation,
    Status,
)
from tracea_cli.space import Value
from tracea_cli.target import Target
from tracea_cli.timing import TimingPolicy

BackendFactory = Callable[[], Backend]
STARTUP_TIMEOUT_S = 180.0  # importing numba/CuPy on a busy 2-core machine can take a while


@dataclass(frozen=True)
class EvalJob:
    job_id: int
    problem: Any
    config: Mapping[str, Value]
    target: Target
    policy: TimingPolicy
    seed: int
    artifact: Artifact | None = None  # precompiled (CUDA); None: the worker compiles (CPU)
    kind: str = "kernel"  # "kernel" | "baseline" (a library on the same problem)
    baseline: str = "auto"  # which baseline, for kind "baseline"


@dataclass(frozen=True)
class EvalOutcome:
    job_id: int
    config: Mapping[str, Value]
    evaluation: Evaluation
    device_index: int | None
    baseline_name: str | None = None


def run_job(backend: Backend, job: EvalJob) -> Evaluation:
    """Compile if needed, then evaluate. Every failure becomes a typed Evaluation."""
    compile_s = 0.0
    artifact = job.artifact
    if artifact is None:
        t0 = time.perf_counter()
        try:
            artifact = backend.compile(job.problem, job.config, job.target)
        except CompileFailed as e:
            return Evaluation(Status.COMPILE_ERROR, reason=_trim(str(e)), compile_s=time.perf_counter() - t0)
        compile_s = time.perf_counter() - t0
    try:
        ev = backend.evaluate(artifact, job.problem, job.target, policy=job.policy, seed=job.seed)
    except Exception as e:  # a backend must not raise for kernel faults; if it does, record it
        return Evaluation(Status.LAUNCH_ERROR, reason=_trim(f"{type(e).__name__}: {e}"), compile_s=compile_s)
    if compile_s and not ev.compile_s:
        ev = Evaluation(ev.status, ev.reason, ev.samples, ev.rel_error, compile_s)
    return ev


def run_baseline(backend: Backend, job: EvalJob) -> tuple[str | None, Evaluation]:
    try:
        return backend.baseline(job.problem, job.target, policy=job.policy, seed=job.seed, name=job.baseline)
    except Exception as e:
        return None, Evaluation(Status.LAUNCH_ERROR, reason=_trim(f"baseline failed: {type(e).__name__}: {e}"))


def _trim(text: str, limit: int = 600) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _worker_main(conn: Connection, factory: BackendFactory) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    backend = factory()
    if not _send(conn, ("ready", os.getpid())):
        return
    while True:
        try:
            job = conn.recv()
        except (EOFError, OSError):
            return
        if job is None:
            return
        name = None
        if job.kind == "baseline":
            name, ev = run_baseline(backend, job)
        else:
            ev = run_job(backend, job)
        if not _send(conn, ("done", EvalOutcome(job.job_id, job.config, ev, job.target.device_index, name))):
            return  # the parent is gone (killed): nobody to report to
        if ev.status is Status.LAUNCH_ERROR:
            return  # the CUDA context may be unusable: let the parent start a fresh worker


def _send(conn: Connection, message: object) -> bool:
    """Send to the parent; False (quietly) when the parent is gone."""
    try:
        conn.send(message)
        return True
    except (BrokenPipeError, ConnectionResetError, EOFError, OSError):
        return False


_main_lock = threading.Lock()


@contextlib.contextmanager
def _main_module_hidden() -> Iterator[None]:
    """While a worker is spawned, the caller's main module is not named to it: a worker needs only Tracea's modules,
    and spawn would otherwise run the caller's script again in the worker (a Python API user's script need not have
    an `if __name__ == "__main__":` guard, and the seed's snippet has none)."""
    main = sys.modules.get("__main__")
    with _main_lock:
        saved = {name: getattr(main, name) for name in ("__file__", "__spec__") if hasattr(main, name)}
        try:
            if "__file__" in saved:
                del main.__file__
            if "__spec__" in saved:
                main.__spec__ = None
            yield
        finally:
            for name, value in saved.items():
                setattr(main, name, value)


class _Worker:
    def __init__(self, ctx, factory: BackendFactory, device_index: int | None) -> None:
        self.device_index = device_index
        self.conn, child = ctx.Pipe()
        self.proc = ctx.Process(target=_worker_main, args=(child, factory), daemon=True)
        with _main_module_hidden():
            self.proc.start()
        child.close()
        self.job: EvalJob | None = None
        self.deadline = 0.0
        self.ready = False
        self.started = time.monotonic()

    def stop(self) -> None:
        if self.proc.is_alive():
            self.proc.terminate()
            self.proc.join(2)
            if self.proc.is_alive():
                self.proc.kill()
                self.proc.join(2)
        self.conn.close()


class WorkerPool:
    """One worker per device (or one for the CPU). `run(jobs)` yields outcomes as they finish. The local executor
    (tune/executor.py)."""

    name = "local"

    def __init__(self, factory: BackendFactory, devices: Iterable[int | None], *, timeout_s: float) -> None:
        self._ctx = mp.get_context("spawn")  # never fork a process that may hold a CUDA context
        self._factory = factory
        self._devices = list(devices) or [None]
        self._timeout_s = timeout_s
        self._workers: dict[int | None, _Worker] = {}

    @property
    def capacity(self) -> int:
        return len(self._devices)

    def __enter__(self) -> "WorkerPool":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        for w in self._workers.values():
            try:
                if w.proc.is_alive() and w.job is None:
                    w.conn.send(None)
            except OSError:
                pass
            w.stop()
        self._workers.clear()

    def start(self) -> None:
        """Start every device's worker now (their imports and device set-up overlap whatever the caller does next);
        `run` otherwise starts them on its first call."""
        for device in self._devices:
            self._worker(device)

    def _worker(self, device: int | None) -> _Worker:
        w = self._workers.get(device)
        if w is None or not w.proc.is_alive():
            if w is not None:
                w.stop()
            w = self._workers[device] = _Worker(self._ctx, self._factory, device)
        return w

    def run(self, jobs: Iterable[EvalJob], *, retarget: Callable[[EvalJob, int | None], EvalJob] | None = None) -> Iterator[EvalOutcome]:
        """Run jobs on free workers, in the order `jobs` gives them; `retarget(job, device)` adapts a job to the
        device it lands on. `jobs` may be a generator that yields each job once it is ready (compiled): the next job
        is asked for only when a worker is free to start it, so measuring begins before the slowest compile ends."""
        source = iter(jobs)
        exhausted = False
        while True:
            for device in self._devices:
                w = self._worker(device)
                if w.job is not None or not w.ready or exhausted:
                    continue
                job = next(source, None)
                if job is None:
                    exhausted = True
                    continue
                if retarget is not None:
                    job = retarget(job, device)
                w.job, w.deadline = job, time.monotonic() + self._timeout_s
                w.conn.send(job)
            if exhausted and not any(w.job is not None for w in self._workers.values()):
                return
            yield from self._collect(block=True)

    def _collect(self, block: bool) -> Iterator[EvalOutcome]:
        workers = list(self._workers.values())
        now = time.monotonic()
        deadlines = [w.deadline if w.job else w.started + STARTUP_TIMEOUT_S for w in workers if w.job or not w.ready]
        timeout = max(0.0, min(deadlines) - now) if deadlines else 0.0
        ready = wait([w.conn for w in workers] + [w.proc.sentinel for w in workers], timeout=min(timeout, 1.0) if block else 0)
        for w in workers:
            if w.conn in ready or w.conn.poll():
                try:
                    kind, payload = w.conn.recv()
                except (EOFError, OSError):
                    kind, payload = "dead", None
                if kind == "ready":
                    w.ready = True
                    continue
                if kind == "done":
                    w.job = None
                    if payload.evaluation.status is Status.LAUNCH_ERROR:  # that worker exits (see _worker_main)
                        self._retire(w)
                    yield payload
                    continue
                w.proc.join(2)  # the pipe closed: the process is gone or going
                yield from self._fail(w, Status.CRASHED, f"the worker process died (exit code {w.proc.exitcode})")
                continue
            if not w.proc.is_alive() or (w.conn not in ready and w.proc.sentinel in ready):
                w.proc.join(2)  # reap it, so that its exit code is known
                yield from self._fail(w, Status.CRASHED, f"the worker process died (exit code {w.proc.exitcode})")
            elif w.job is not None and time.monotonic() > w.deadline:
                yield from self._fail(w, Status.TIMEOUT, f"no result within {self._timeout_s:g} s; the worker was killed")
            elif not w.ready and time.monotonic() > w.started + STARTUP_TIMEOUT_S:
                raise RuntimeError(f"a tuning worker did not start within {STARTUP_TIMEOUT_S:g} s")

    def _retire(self, w: _Worker) -> None:
        """Stop a worker and forget it: the next job for its device starts a fresh one."""
        w.stop()
        del self._workers[w.device_index]

    def _fail(self, w: _Worker, status: Status, reason: str) -> Iterator[EvalOutcome]:
        job = w.job
        self._retire(w)
        if job is not None:
            yield EvalOutcome(job.job_id, job.config, Evaluation(status, reason=reason), w.device_index)
        elif status is Status.CRASHED:
            raise RuntimeError(f"a tuning worker died before taking a job: {reason}")
