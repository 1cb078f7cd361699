"""A test double of `bench.runner.Engine`, and synthetic results: deterministic samples around chosen medians."""

from __future__ import annotations

import numpy as np

from tracea_cli.backends.base import Evaluation, Status
from tracea_cli.bench.results import Ceiling, Environment, HostLoad, TrialPoint, Tuning
from tracea_cli.bench.runner import TunedKernel
from tracea_cli.errors import RunFailed
from tracea_cli.timing import Samples


def samples(median_ms: float, n: int = 30, noise: float = 0.01, seed: int = 0, throttled: int = 0) -> Samples:
    rng = np.random.default_rng(seed)
    times = median_ms * (1.0 + noise * rng.standard_normal(n))
    return Samples(times_ms=tuple(float(t) for t in times), throttled=tuple(i < throttled for i in range(n)), wall_s=0.1)


class FakeEngine:
    """Times are made up from `time_ms(problem) * factor`; tracea is `speedup` times faster than the baseline."""

    def __init__(self, *, speedup: float = 1.25, dtypes=("fp32", "fp64"), cached: bool = True, failing=(), wrong=(), no_winner=(), throttled=0,
                 ceiling=Ceiling(flops_per_s=2e11, bytes_per_s=2e10, flops_source="cpu gemm_fp32", bytes_source="cpu triad"), busy_load=0.5, others_threads=None):
        self.speedup = speedup
        self._dtypes = tuple(dtypes)
        self.cached = cached
        self.failing = set(failing)  # problem labels whose tuning fails
        self.wrong = set(wrong)  # problem labels whose tuned kernel returns a wrong result
        self.no_winner = set(no_winner)  # problem labels whose search finds no correct configuration
        self.throttled = throttled
        self._ceiling = ceiling
        self.busy_load = busy_load  # the host's load average at the end of the run
        self.others_threads = others_threads  # CPU threads other processes used during the run (None: unknown)
        self.calls: list[tuple] = []

    @staticmethod
    def base_ms(problem) -> float:
        return problem.flops / 1e8  # milliseconds at 100 GFLOP/s

    def environment(self, *, suite, command, created):
        return Environment(tracea_version="0.1.0", created=created, command=command, suite=suite, backend="cpu", device="Test CPU",
                           device_class="test-cpu (2 cores)", machine_id="m-1", profile_schema_version=1, profile_created="2026-11-29T00:00:00Z",
                           host={"os": "Linux", "python": "3.11", "packages": {"numpy": "2.4"}})

    def load(self):
        self.load_calls = getattr(self, "load_calls", 0) + 1
        now = 0.5 if self.load_calls == 1 else self.busy_load  # quiet at the start; `busy_load` at the end
        return HostLoad(start=now, end=now, cpu_threads=2)

    def load_meter(self):
        from tracea_cli.host_load import HostBusy

        others = self.others_threads

        class Meter:
            def stop(self):
                return None if others is None else HostBusy(10.0, 2, others, 0.0)

        return Meter()

    def dtypes(self):
        return self._dtypes

    def unsupported(self, problem):
        return None if problem.dtype in self._dtypes else f"the test engine does not run {problem.dtype}"

    def ceiling(self, problem):
        return self._ceiling

    def tuned(self, problem, *, budget, seed, progress):
        self.calls.append(("tuned", problem.label, budget))
        if problem.label in self.failing:
            raise RunFailed(f"no configuration of {problem.label} ran correctly in 3 trials.")
        if budget is None and not self.cached:
            return None
        if problem.label in self.no_winner:
            failures = tuple({"config": {"block": b}, "status": "wrong_result", "reason": "relative error 0.2"} for b in (32, 64))
            return TunedKernel(config=None, tuning=Tuning(key="key-none", cache_hit=False, evaluations=2, trials_total=2, failures=failures))
        tuning = Tuning(key=f"key-{problem.m}", cache_hit=budget is None, evaluations=0 if budget is None else budget, trials_total=6,
                        stopped_because="budget", failures=({"config": {"block": 128}, "status": "compile_error", "reason": "too big"},))
        return TunedKernel(config={"block": 64, "order": "ikj"}, tuning=tuning)

    def trials(self, problem):
        base = self.base_ms(problem)
        medians = [None if f is None else base * f for f in (1.6, 1.1, None, 0.9, 1.3, 0.8)]
        return tuple(TrialPoint(index=i + 1, status="ok" if m else "wrong_result", median_ms=m) for i, m in enumerate(medians))

    def measure(self, problem, config, *, policy, seed):
        self.calls.append(("measure", problem.label, dict(config)))
        if problem.label in self.wrong:
            return Evaluation(Status.WRONG_RESULT, reason="relative error 0.3 exceeds the fp32 bound 1e-05", rel_error=0.3)
        return Evaluation(Status.OK, samples=samples(self.base_ms(problem) / self.speedup, seed=seed + 7, throttled=self.throttled), rel_error=1e-7)

    def baseline(self, choice, problem, *, policy, seed):
        self.calls.append(("baseline", problem.label, choice))
        name = "numpy" if choice == "auto" else choice
        return name, Evaluation(Status.OK, samples=samples(self.base_ms(problem), seed=seed + 11), rel_error=1e-7)
