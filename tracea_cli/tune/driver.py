"""The tuning driver: profile -> space -> cache -> warm start -> propose, evaluate, record -> re-time -> winner.

`tune(request, settings=...)` is what `tracea tune`, `tracea bench` and the Python API call. It computes and
returns data; printing belongs to cli/tune.py. Every finished trial is written to the cache at once, so Ctrl-C
(KeyboardInterrupt, raised out of here) loses nothing, and the next run resumes.
"""

from __future__ import annotations

import contextlib
import math
import time
from dataclasses import dataclass, field, replace
from typing import Any, Callable, Mapping

from tracea_cli.backends.base import Evaluation, Status
from tracea_cli.errors import UsageError
from tracea_cli.host_load import HostBusy, LoadMeter
from tracea_cli.ops.base import problem_fields
from tracea_cli.space import Value, config_key
from tracea_cli.stats import summarize
from tracea_cli.text import counted
from tracea_cli.timing import TimingPolicy

SEARCH_POLICY = TimingPolicy(warmup=2, min_samples=5, max_samples=30, target_cv=0.03, max_seconds=1.0)
RETIME_POLICY = TimingPolicy(warmup=3, min_samples=15, max_samples=100, target_cv=0.01, max_seconds=3.0)
RETIME_TOP = 3
CONVERGED_IMPROVEMENT = 0.005  # a new best must beat the old by 0.5% to count as progress


@dataclass(frozen=True)
class TuneRequest:
    problem: Any  # the op's problem (ops/base.Problem)
    backend: str = "auto"  # auto | cuda | cpu | rocm
    devices: str | None = None  # the --device text
    strategy: str = "bayes"
    budget: int = 40  # evaluations, stored trials included
    time_limit_s: float | None = None
    seed: int = 0
    force: bool = False
    executor: str = "local"  # local | ray (tune/executor.py)
    ray_address: str | None = None

    def __post_init__(self) -> None:
        from tracea_cli.tune.executor import check_executor

        check_executor(self.executor, self.ray_address)
        if self.budget < 1:
            raise UsageError(f"--budget must be at least 1, got {self.budget}.")
        if self.time_limit_s is not None and not self.time_limit_s > 0:  # NaN too
            raise UsageError(f"--time-limit must be positive, got {self.time_limit_s}.")


@dataclass(frozen=True)
class Measured:
    config: Mapping[str, Value]
    median_ms: float
    cv: float
    samples_ms: tuple[float, ...]
    rate: float  # TFLOP/s on a GPU, GFLOP/s on the CPU
    rate_unit: str  # "TFLOP/s" | "GFLOP/s"


@dataclass(frozen=True)
class Failure:
    config: Mapping[str, Value]
    status: str
    reason: str


@dataclass(frozen=True)
class TuneResult:
    key: str
    cache_hit: bool
    evaluations: int  # this run
    trials_total: int
    winner: Measured | None
    baseline_name: str | None
    baseline: Measured | None
    ranking: tuple[Measured, ...] = ()  # best few, re-timed
    failures: tuple[Failure, ...] = ()
    target: Mapping[str, Any] = field(default_factory=dict)
    stopped_because: str = ""  # budget | time limit | converged | space exhausted | cache hit
    space_size: int = 0
    problem: Mapping[str, Any] = field(default_factory=dict)
    baseline_error: str = ""  # why the vendor baseline could not be measured in this run, if it failed
    peak_flops: float | None = None  # measured ceiling for this dtype on this device (tracea doctor); None if unmeasured
    peak_source: str = ""  # where peak_flops comes from: the measurement (fp32's may be tf32's / 3), or why there is none
    per_device: Mapping[str, int] = field(default_factory=dict)  # this run's evaluations by CUDA device ("cpu" on the CPU)
    load: HostBusy | None = None  # what other processes did on the CPUs while this run measured (None: unknown)
    # wall seconds of this run's phases, in order: "setup" (profile, space, cache), "executor start", "search",
    # "re-time and baseline", "executor close"; empty for a cache hit
    phases: Mapping[str, float] = field(default_factory=dict)

    def pct_of_peak(self, m: Measured) -> float | None:
        """The share of the measured ceiling; None where there is none, or where the rate exceeds it (the ceiling
        was then measured too low, on a busy machine: a figure over 100% would only mislead)."""
        scale = 1e12 if m.rate_unit == "TFLOP/s" else 1e9
        pct = 100.0 * m.rate * scale / self.peak_flops if self.peak_flops else None
        return pct if pct is not None and pct <= 100.0 else None

    @property
    def above_peak(self) -> bool:
        """Something here ran faster than the profile's measured ceiling."""
        scale = 1e12 if self.winner and self.winner.rate_unit == "TFLOP/s" else 1e9
        rates = [m.rate for m in (self.winner, self.baseline) if m is not None]
        return bool(self.peak_flops) and any(r * scale > self.peak_flops for r in rates)

    @property
    def warnings(self) -> tuple[str, ...]:
        """What a reader must know before trusting the figures."""
        out = []
        if self.load is not None and self.load.busy:
            out.append(f"the machine was busy while this ran ({self.load.text}): times are less reliable")
            if self.ranking_within_noise:
                out.append("the best configurations measured within noise of each other on a busy machine: their "
                           "order reflects the machine, not the kernels; tune again when it is quiet")
        if self.above_peak:
            out.append("a kernel ran faster than the ceiling `tracea doctor` measured, so that ceiling was measured too "
                       "low (a busy machine?); no % of peak is shown: run `tracea doctor` again on a quiet machine")
        return tuple(out)

    @property
    def ranking_within_noise(self) -> bool:
        """The re-timed best differ by less than their own noise."""
        if len(self.ranking) < 2:
            return False
        best, runner = self.ranking[0], self.ranking[1]
        return (runner.median_ms - best.median_ms) <= max(best.cv, runner.cv) * best.median_ms

    @property
    def speedup(self) -> float | None:
        if self.winner and self.baseline:
            return self.baseline.median_ms / self.winner.median_ms
        return None

    def as_dict(self) -> dict[str, Any]:
        def m(x: Measured | None) -> dict | None:
            if x is None:
                return None
            rate_key = "tflops" if x.rate_unit == "TFLOP/s" else "gflops"
            return {"config": dict(x.config), "median_ms": x.median_ms, "cv": x.cv, rate_key: x.rate, "samples_ms": list(x.samples_ms)}

        base = m(self.baseline)
        if base is not None:
            base = {"name": self.baseline_name, **base}
        return {
            "key": self.key,
            "cache_hit": self.cache_hit,
            "evaluations": self.evaluations,
            "trials_total": self.trials_total,
            "winner": m(self.winner),
            "baseline": base,
            "speedup": self.speedup,
            "ranking": [m(r) for r in self.ranking],
            "failures": [{"config": dict(f.config), "status": f.status, "reason": f.reason} for f in self.failures],
            "problem": dict(self.problem),
            "target": dict(self.target),
            "space_size": self.space_size,
            "stopped_because": self.stopped_because,
            "baseline_error": self.baseline_error,
            "peak_flops": self.peak_flops,
            "peak_source": self.peak_source,
            "winner_pct_of_peak": self.pct_of_peak(self.winner) if self.winner else None,
            "per_device": dict(self.per_device),
            "load": None if self.load is None else self.load.as_dict(),
            "phases_s": {name: round(seconds, 3) for name, seconds in self.phases.items()},
            "warnings": list(self.warnings),
        }


ProgressFn = Callable[[int, int, str], None]  # (done, total, message)


def _measured(config: Mapping[str, Value], ev: Evaluation, problem: Any, gpu: bool) -> Measured:
    s = summarize(ev.samples.times_ms)
    scale, unit = (1e12, "TFLOP/s") if gpu else (1e9, "GFLOP/s")
    return Measured(dict(config), s.median, s.cv, tuple(ev.samples.times_ms), problem.flops / (s.median * 1e-3) / scale, unit)


def tune(request: TuneRequest, *, settings, progress: ProgressFn | None = None, pool=None) -> TuneResult:
    """Tune one problem. Raises UsageError for bad requests, KeyboardInterrupt when interrupted (trials kept).

    `pool`: a `workers.WorkerPool` for this plan's backend and devices that the caller keeps across several problems
    (bench), so that workers start once; by default the run starts its own and stops it at the end."""
    from tracea_cli.cache import TuningCache
    from tracea_cli.tune import setup

    progress = progress or (lambda done, total, msg: None)
    phases = _Phases()
    plan = setup.plan(request, settings)
    problem, target = plan.problem, plan.target
    gpu = target.backend == "cuda"
    with TuningCache.open(settings.cache_path) as cache, contextlib.ExitStack() as before_search:
        for w in cache.warnings:
            progress(0, request.budget, f"warning: {w}")
        cache.on_warning = lambda w: progress(0, request.budget, f"warning: {w}")
        key = plan.key
        if request.force:
            cache.forget(key)
        elif cache.is_hit(key, request.budget):
            return _from_cache(cache, key, plan, stopped="cache hit")
        if cache.read_only:
            raise UsageError(f"{problem.label} is not in the read-only tuning cache {cache.path}, and results could "
                             "not be stored there.", "Set TRACEA_CACHE_DIR (or --cache) to a writable folder to tune it.")
        # The executor is made from here on (Ray's in the background, while the space is enumerated and the strategy
        # made); the search takes it. Leaving early (no candidates, an error, Ctrl-C) closes it.
        starting = None if pool is not None else before_search.enter_context(
            setup.start_pool(plan, settings, request.executor, request.ray_address))
        progress(0, request.budget, "enumerating the search space")
        candidates = plan.candidates()
        if len(candidates) == 0:
            raise UsageError(f"no valid configuration exists for {problem.label} on {target.device_class}.",
                             "Try another shape or dtype; `tracea tune --help` lists them.")

        from tracea_cli.tune.strategies import make_strategy

        meter = LoadMeter()

        strategy = make_strategy(request.strategy, candidates, seed=request.seed)
        index = candidates.index_of()
        stored = cache.trials(key)
        for t in stored:
            i = index.get(config_key(t.config))
            if i is not None:
                strategy.observe(i, t.median_ms if t.status == Status.OK.value else math.inf)
        seen = {config_key(t.config) for t in stored}
        told: set[int] = set()  # indices evaluated in this run (a warm-start pick the strategy also chose runs once)
        per_device: dict[str, int] = {}
        queue = [c for c in setup.first_configs(cache, key, plan, candidates) if config_key(c) not in seen]

        remaining = request.budget - len(seen)
        evaluations = 0
        best = min((t.median_ms for t in stored if t.status == Status.OK.value), default=math.inf)
        since_improvement = 0
        patience = max(12, request.budget // 3)
        began = time.monotonic()
        stopped = "budget"
        with contextlib.ExitStack() as stack:
            phases.end("setup")
            if starting is not None:
                progress(request.budget - remaining, request.budget, "starting the workers")
                pool = stack.enter_context(starting.take())
            phases.end("executor start")
            # GPU: batches wide enough to keep NVRTC busy on every core while the executor's workers measure (one per
            # device or actor); the CPU runs one candidate at a time, so nothing (compiling, model updates) overlaps
            # a timed run.
            batch = max(8, 4 * pool.capacity) if gpu else pool.capacity
            while remaining > 0:
                if request.time_limit_s is not None and time.monotonic() - began >= request.time_limit_s:
                    stopped = "time limit"
                    break
                if since_improvement >= patience:
                    stopped = "converged"
                    break
                n = min(batch, remaining)
                picks = [i for i in (index[config_key(c)] for c in queue[:n]) if i not in told]
                queue = queue[n:]
                if n > len(picks):
                    picks += strategy.ask(n - len(picks))
                picks = list(dict.fromkeys(picks))
                if not picks:
                    stopped = "space exhausted"
                    break
                jobs = setup.jobs(plan, [candidates.configs[i] for i in picks], SEARCH_POLICY, request.seed + evaluations)
                progress(request.budget - remaining, request.budget,
                         f"compiling, checking and timing {counted(len(picks), 'candidate')}")
                for outcome in pool.run(jobs, retarget=setup.retarget):
                    ev = outcome.evaluation
                    cost = summarize(ev.samples.times_ms).median if ev.ok else math.inf
                    cache.record_trial(key, setup.trial(outcome.config, ev))
                    told.add(index[config_key(outcome.config)])
                    device = "cpu" if outcome.device_index is None else str(outcome.device_index)
                    per_device[device] = per_device.get(device, 0) + 1
                    strategy.tell(index[config_key(outcome.config)], cost)
                    evaluations += 1
                    remaining -= 1
                    if cost < best * (1 - CONVERGED_IMPROVEMENT):
                        since_improvement = 0
                    else:
                        since_improvement += 1
                    best = min(best, cost)
                    label = "ok" if ev.ok else ev.status.value
                    progress(request.budget - remaining, request.budget, f"{label} {config_key(outcome.config)}")

            phases.end("search")
            ranking = _retime_best(cache, key, plan, pool, progress)
            baseline_name, baseline_ev = _baseline(plan, pool)
            phases.end("re-time and baseline")
        phases.end("executor close")
        if ranking:
            cache.set_winner(key, setup.trial(ranking[0][0], ranking[0][1]))
        if baseline_ev is not None and baseline_ev.ok:
            cache.set_baseline(key, baseline_name, setup.trial({}, baseline_ev))
        cache.record_search(key, strategy=request.strategy, budget=request.budget,
                            evaluations=len(cache.trials(key)), converged=stopped in ("converged", "space exhausted"))
        result = _from_cache(cache, key, plan, stopped=stopped)
        baseline_error = "" if baseline_ev is None or baseline_ev.ok else f"{baseline_ev.status.value}: {baseline_ev.reason}"
        return replace(result, cache_hit=False, evaluations=evaluations, space_size=len(candidates),
                       baseline_error=baseline_error, per_device=per_device, load=meter.stop(), phases=phases.seconds,
                       ranking=tuple(_measured(c, ev, problem, gpu) for c, ev in ranking))


class _Phases:
    """Wall time of a run's phases: `end(name)` closes the phase that began where the previous one ended."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}
        self._began = time.monotonic()

    def end(self, name: str) -> None:
        now = time.monotonic()
        self.seconds[name] = now - self._began
        self._began = now


def _retime_best(cache, key, plan, pool, progress) -> list[tuple[dict, Evaluation]]:
    from tracea_cli.tune import setup

    ok = sorted((t for t in cache.trials(key) if t.status == Status.OK.value), key=lambda t: t.median_ms)
    top = [dict(t.config) for t in ok[:RETIME_TOP]]
    if not top:
        return []
    progress(0, 0, f"re-timing the best {len(top)}")
    outcomes = list(pool.run(setup.jobs(plan, top, RETIME_POLICY, seed=10_000), retarget=setup.retarget))
    good = [(dict(o.config), o.evaluation) for o in outcomes if o.evaluation.ok]
    return sorted(good, key=lambda ce: summarize(ce[1].samples.times_ms).median)


def _baseline(plan, pool) -> tuple[str | None, Evaluation | None]:
    from tracea_cli.tune import setup

    outcomes = list(pool.run([setup.baseline_job(plan, RETIME_POLICY)], retarget=setup.retarget))
    if not outcomes:
        return None, None
    return outcomes[0].baseline_name, outcomes[0].evaluation


def _from_cache(cache, key, plan, *, stopped: str) -> TuneResult:
    from tracea_cli.tune import setup

    gpu = plan.target.backend == "cuda"
    problem = plan.problem
    trials = cache.trials(key)
    winner = cache.winner(key)
    base = cache.baseline(key)

    def as_measured(t) -> Measured | None:
        if t is None:
            return None
        ev = setup.evaluation_of(t)
        return _measured(t.config, ev, problem, gpu)

    failures = tuple(Failure(dict(t.config), t.status, t.reason) for t in trials if t.status != Status.OK.value)
    return TuneResult(
        key=key.id,
        cache_hit=stopped == "cache hit",
        evaluations=0,
        trials_total=len(trials),
        winner=as_measured(winner),
        baseline_name=base[0] if base else None,
        baseline=as_measured(base[1]) if base else None,
        failures=failures,
        target=setup.describe_target(plan.target),
        stopped_because=stopped,
        problem={**problem_fields(problem), "label": problem.label},
        peak_flops=plan.peak_flops,
        peak_source=plan.peak_source,
    )
