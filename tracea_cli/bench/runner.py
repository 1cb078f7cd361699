"""Running a suite: per problem, the tuned kernel and the baseline, checked, timed, turned into `BenchResults`.

The runner only decides *what* to measure and derives the figures; everything that touches the machine (the tuner,
the cache, the backend, the profile) sits behind `Engine`, so tests drive the runner with a few-line double.
`engine.LiveEngine` is the real one.
"""

from __future__ import annotations

import datetime as _dt
from dataclasses import dataclass, field
from dataclasses import replace as _replace
from typing import Any, Callable, Mapping, Protocol

from tracea_cli.backends.base import Evaluation
from tracea_cli.bench.results import (
    BASELINE,
    SKIPPED,
    TUNED,
    BenchResults,
    Ceiling,
    Environment,
    HostLoad,
    ProblemInfo,
    ResultRow,
    TrialPoint,
    Tuning,
    failed_row,
    make_row,
)
from tracea_cli.bench.suites import Suite
from tracea_cli.errors import TraceaError
from tracea_cli.ops.base import problem_fields
from tracea_cli.space import Value
from tracea_cli.stats import speedup_interval
from tracea_cli.timing import TimingPolicy

TRACEA = "tracea"  # the provider name of the tuned kernel
# Evaluations per problem on a cache miss: modest, so the default suite takes minutes. On the CPU each new kernel
# variant costs seconds of numba compilation; on a GPU NVRTC compiles in parallel and runs take milliseconds.
DEFAULT_TUNE_BUDGET = {"cpu": 8, "cuda": 16}
BENCH_POLICY = TimingPolicy(warmup=3, min_samples=15, max_samples=100, target_cv=0.01, max_seconds=2.0)
BASELINE_CHOICES = ("auto", "cublas", "cudnn", "numpy", "torch", "none")

ProgressFn = Callable[[int, int, str], None]  # (problems done, problems in all, what is happening)


@dataclass(frozen=True)
class TunedKernel:
    """The configuration to benchmark as tracea's kernel, and how it was found. `config` is None when the search
    found no configuration that ran correctly (its failures are in `tuning`)."""

    config: Mapping[str, Value] | None
    tuning: Tuning


class Engine(Protocol):
    """What the runner needs from the machine. Methods raise TraceaError for what the user must fix."""

    def environment(self, *, suite: str, command: str, created: str) -> Environment: ...

    def load(self) -> HostLoad | None:
        """The host's load now (`start` and `end` both the current 1-minute average); None where unknown."""
        ...

    def load_meter(self) -> Any:
        """A meter started now whose `stop()` says what other processes did on the CPUs since (host_load.HostBusy),
        or None where unknown."""
        ...

    def unsupported(self, problem: Any) -> str | None:
        """Why the chosen backend cannot run `problem` here (its op's dtypes, the device's), or None."""
        ...

    def ceiling(self, problem: Any) -> Ceiling: ...

    def tuned(self, problem: Any, *, budget: int | None, seed: int, progress: ProgressFn) -> TunedKernel | None:
        """The cached winner, tuning with `budget` evaluations on a miss; `budget=None`: cache only (None on a miss)."""
        ...

    def trials(self, problem: Any) -> tuple[TrialPoint, ...]:
        """The cache's trials for the problem's key, in the order they ran."""
        ...

    def measure(self, problem: Any, config: Mapping[str, Value], *, policy: TimingPolicy, seed: int) -> Evaluation:
        """Compile `config`, check it against the float64 reference, then time it."""
        ...

    def baseline(self, choice: str, problem: Any, *, policy: TimingPolicy, seed: int) -> tuple[str, Evaluation]:
        """Check and time the baseline `choice` (auto, cublas, numpy, torch): (provider name, evaluation)."""
        ...


@dataclass(frozen=True)
class BenchRequest:
    suite: Suite
    baseline: str = "auto"  # one of BASELINE_CHOICES
    tune: bool = True  # False: --no-tune, cached winners only
    tune_budget: int | None = None  # None: DEFAULT_TUNE_BUDGET for the backend
    seed: int = 0
    policy: TimingPolicy = BENCH_POLICY
    command: str = ""
    extra: Mapping[str, Any] = field(default_factory=dict)


def now_iso() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")


def run_bench(request: BenchRequest, engine: Engine, *, progress: ProgressFn | None = None, created: str | None = None) -> BenchResults:
    """Benchmark every problem of the suite. A problem that cannot run here becomes skipped rows, never an abort."""
    progress = progress or (lambda done, total, message: None)
    created = created or now_iso()
    environment = engine.environment(suite=request.suite.name, command=request.command, created=created)
    load_at_start = engine.load()
    meter = engine.load_meter()
    if request.tune_budget is None:
        request = _replace(request, tune_budget=DEFAULT_TUNE_BUDGET.get(environment.backend, 12))
    problems: list[ProblemInfo] = []
    rows: list[ResultRow] = []
    total = len(request.suite.problems)
    for i, problem in enumerate(request.suite.problems):
        progress(i, total, problem.label)
        info = ProblemInfo(problem=problem.label, spec=problem_fields(problem), flops=problem.flops, bytes=problem.bytes,
                           ceiling=engine.ceiling(problem))
        reason = engine.unsupported(problem)
        if reason:
            problems.append(info)
            rows.append(failed_row(problem=info, provider=TRACEA, kind=TUNED, status=SKIPPED, reason=reason))
            continue
        info, problem_rows = _bench_problem(problem, info, request, engine, lambda msg: progress(i, total, f"{problem.label}: {msg}"))
        problems.append(info)
        rows.extend(problem_rows)
    progress(total, total, "done")
    load_at_end = engine.load()
    during = meter.stop()
    if load_at_start is not None and load_at_end is not None:
        environment = _replace(environment, load=HostLoad(
            start=load_at_start.start, end=load_at_end.end, cpu_threads=load_at_end.cpu_threads,
            others_threads=None if during is None else during.others_threads,
            steal_fraction=None if during is None else during.steal_fraction))
    return BenchResults(environment=environment, problems=tuple(problems), results=tuple(rows))


def _bench_problem(
    problem: Any, info: ProblemInfo, request: BenchRequest, engine: Engine, say: Callable[[str], None]
) -> tuple[ProblemInfo, list[ResultRow]]:
    rows: list[ResultRow] = []
    tuned_row, info = _tuned_row(problem, info, request, engine, say)
    base_row = None
    if request.baseline != "none":
        say(f"baseline ({request.baseline})")
        name, ev = engine.baseline(request.baseline, problem, policy=request.policy, seed=request.seed)  # the same inputs
        base_row = _row_from(info, name, BASELINE, ev, config=None)
    if tuned_row.ok and base_row is not None and base_row.ok:
        interval = speedup_interval(base_row.samples_ms, tuned_row.samples_ms, seed=request.seed)
        tuned_row = _replace(tuned_row, speedup=interval, speedup_over=base_row.provider)
    rows.append(tuned_row)
    if base_row is not None:
        rows.append(base_row)
    return info, rows


def _tuned_row(problem, info: ProblemInfo, request: BenchRequest, engine: Engine, say) -> tuple[ResultRow, ProblemInfo]:
    """The tuned kernel's row, and the problem's info with its tuning (or a note on why there is none)."""
    say("tuning" if request.tune else "looking up the cache")
    try:
        kernel = engine.tuned(problem, budget=request.tune_budget if request.tune else None, seed=request.seed,
                              progress=lambda done, total, msg: say(f"tune {done}/{total} {msg}" if total else f"tune: {msg}"))
    except TraceaError as e:  # this problem cannot be tuned here (no valid configuration, say); the others go on
        return failed_row(problem=info, provider=TRACEA, kind=TUNED, status="tune_failed", reason=e.message), info
    if kernel is None:
        reason = "no tuned kernel is cached for this problem and --no-tune was given"
        return failed_row(problem=info, provider=TRACEA, kind=TUNED, status=SKIPPED, reason=reason), info
    tuning = _replace(kernel.tuning, trials=engine.trials(problem))
    info = _replace(info, tuning=tuning)
    if kernel.config is None:
        reason = f"no configuration ran correctly in {tuning.trials_total} trials; the failures say why"
        return failed_row(problem=info, provider=TRACEA, kind=TUNED, status="tune_failed", reason=reason), info
    say("measuring the tuned kernel")
    ev = engine.measure(problem, kernel.config, policy=request.policy, seed=request.seed)
    return _row_from(info, TRACEA, TUNED, ev, config=kernel.config), info


def _row_from(info: ProblemInfo, provider: str, kind: str, ev: Evaluation, *, config) -> ResultRow:
    if not ev.ok or ev.samples is None or ev.samples.n == 0:
        reason = ev.reason or "no samples were taken"
        return failed_row(problem=info, provider=provider, kind=kind, status=ev.status.value, reason=reason, config=config)
    return make_row(problem=info, provider=provider, kind=kind, samples_ms=ev.samples.times_ms, throttled=ev.samples.throttled,
                    config=config, rel_error=ev.rel_error)


