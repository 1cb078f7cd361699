"""Benchmark results: what one `tracea bench` run measured, as frozen data and as versioned JSON.

One `BenchResults` holds the environment it ran in, one `ProblemInfo` per problem (work counts, the measured
ceiling, the tuning that produced the kernel) and one `ResultRow` per problem and provider (the tuned kernel, each
baseline) with its raw samples. Every report renders from this data alone, so `--from RESULTS.json` reproduces them
without re-running. Units live in the names: `_ms`, `_per_s` (SI base units: FLOP/s, bytes/s), `pct_`.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Mapping

from tracea_cli.errors import UsageError
from tracea_cli.files import read_json
from tracea_cli.stats import Interval, summarize

SCHEMA = "tracea-bench-results"
SCHEMA_VERSION = 1

TUNED = "tuned"
BASELINE = "baseline"
OK = "ok"
SKIPPED = "skipped"  # not run: unsupported here, or no cached kernel with --no-tune


@dataclass(frozen=True)
class Environment:
    """Where the results were measured: the capability profile's identity and the versions that matter."""

    tracea_version: str
    created: str  # ISO 8601, when the run started
    command: str  # the command line, as typed
    suite: str
    backend: str  # cpu | cuda
    device: str  # human name: "NVIDIA H200", "Intel(R) Xeon(R) ..."
    device_class: str  # what makes two devices interchangeable (the cache's key)
    arch: str | None = None
    machine_id: str | None = None
    profile_schema_version: int | None = None
    profile_created: str | None = None
    host: Mapping[str, Any] = field(default_factory=dict)  # os, python, package versions
    load: "HostLoad | None" = None  # how busy the host was while it ran

    @property
    def busy(self) -> bool:
        return self.load is not None and self.load.busy


@dataclass(frozen=True)
class HostLoad:
    """The host's 1-minute load average when the run started and ended, against the CPU threads it may use.

    A load above the thread count means other processes competed for the CPU: CPU timings are unreliable then,
    and even GPU timings suffer (launch gaps, a late host thread)."""

    start: float
    end: float
    cpu_threads: int
    others_threads: float | None = None  # CPU threads other processes kept busy during the run, on average
    steal_fraction: float | None = None  # share of CPU time a hypervisor gave to others

    @property
    def busy(self) -> bool:
        from tracea_cli.host_load import competed

        if self.others_threads is not None and competed(self.others_threads, self.steal_fraction or 0.0, self.cpu_threads):
            return True
        return max(self.start, self.end) > self.cpu_threads


@dataclass(frozen=True)
class Ceiling:
    """The measured limits a kernel is judged against (from the capability profile); None where not measured."""

    flops_per_s: float | None = None
    bytes_per_s: float | None = None
    flops_source: str = ""  # "<device> <metric>" of the profile entry, or why there is none
    bytes_source: str = ""

    def roof_per_s(self, intensity: float) -> float | None:
        """The roofline at `intensity` FLOP/byte: min(compute ceiling, bandwidth × intensity), from what is known."""
        bounds = [b for b in (self.flops_per_s, None if self.bytes_per_s is None else self.bytes_per_s * intensity) if b]
        return min(bounds) if bounds else None


@dataclass(frozen=True)
class TrialPoint:
    """One tuning trial from the cache, in the order it was run."""

    index: int
    status: str
    median_ms: float | None  # None for a failed trial
    timestamp: str = ""


@dataclass(frozen=True)
class Tuning:
    """How the tuned kernel was obtained: the cache key, whether it was a hit, and the search's trials."""

    key: str
    cache_hit: bool
    evaluations: int  # in this run
    trials_total: int
    stopped_because: str = ""
    trials: tuple[TrialPoint, ...] = ()
    failures: tuple[Mapping[str, Any], ...] = ()  # {config, status, reason} of configurations that failed


@dataclass(frozen=True)
class ProblemInfo:
    problem: str  # the label that rows refer to: "gemm 1024x1024x1024 fp32 nn"
    spec: Mapping[str, Any]  # op, m, n, k, dtype, layout, epilogue
    flops: int
    bytes: int
    ceiling: Ceiling = Ceiling()
    tuning: Tuning | None = None
    notes: tuple[str, ...] = ()  # what went wrong outside any one provider (tuning failed, say)

    @property
    def intensity(self) -> float:
        """Arithmetic intensity in FLOP per byte, from the fewest bytes the problem must move."""
        return self.flops / self.bytes if self.bytes else float("inf")


@dataclass(frozen=True)
class ResultRow:
    """One provider on one problem. Statistics are derived from `samples_ms` by `make_row`."""

    problem: str
    provider: str  # "tracea", "numpy", "cublas", "torch"
    kind: str  # tuned | baseline
    status: str  # ok | skipped | a backend Status value (wrong_result, launch_error, ...)
    reason: str = ""
    config: Mapping[str, Any] | None = None
    samples_ms: tuple[float, ...] = ()
    throttled_samples: int = 0
    median_ms: float | None = None
    q1_ms: float | None = None
    q3_ms: float | None = None
    cv: float | None = None
    n: int = 0
    flops: int = 0
    bytes: int = 0
    flops_per_s: float | None = None
    bytes_per_s: float | None = None
    pct_of_ceiling: float | None = None
    rel_error: float | None = None
    speedup: Interval | None = None  # over `speedup_over`: its median time / this one's, with a 95% interval
    speedup_over: str | None = None

    @property
    def ok(self) -> bool:
        return self.status == OK

    @property
    def throttled(self) -> bool:
        return self.throttled_samples > 0


@dataclass(frozen=True)
class Change:
    """One row of `--compare`: new time / old time with its interval; above 1 is slower."""

    problem: str
    provider: str
    old_median_ms: float
    new_median_ms: float
    ratio: Interval
    significant: bool
    regression: bool
    improvement: bool


@dataclass(frozen=True)
class Comparison:
    against: str  # the old results' file
    against_created: str
    changes: tuple[Change, ...]
    unmatched: tuple[str, ...] = ()  # "problem / provider" present in only one of the two sets
    threshold: float = 0.05
    warnings: tuple[str, ...] = ()  # why the comparison may mislead (another device, say)

    @property
    def regressions(self) -> tuple[Change, ...]:
        return tuple(c for c in self.changes if c.regression)


@dataclass(frozen=True)
class BenchResults:
    environment: Environment
    problems: tuple[ProblemInfo, ...]
    results: tuple[ResultRow, ...]
    comparison: Comparison | None = None

    def rows_for(self, problem: str) -> tuple[ResultRow, ...]:
        return tuple(r for r in self.results if r.problem == problem)

    def tuned(self, problem: str) -> ResultRow | None:
        return next((r for r in self.rows_for(problem) if r.kind == TUNED), None)

    @property
    def failures(self) -> tuple[dict[str, Any], ...]:
        """Everything that did not produce a measurement: rows not ok, problem notes, failed tuning trials."""
        out: list[dict[str, Any]] = []
        for p in self.problems:
            out.extend({"problem": p.problem, "provider": "tracea", "stage": "tune", "status": "note", "reason": note, "config": None} for note in p.notes)
        for r in self.results:
            if not r.ok:
                out.append({"problem": r.problem, "provider": r.provider, "stage": "bench", "status": r.status, "reason": r.reason, "config": r.config})
        for p in self.problems:
            if p.tuning is not None:
                out.extend(
                    {"problem": p.problem, "provider": "tracea", "stage": "tune", "status": f.get("status", ""), "reason": f.get("reason", ""), "config": f.get("config")}
                    for f in p.tuning.failures
                )
        return tuple(out)

    def with_comparison(self, comparison: Comparison | None) -> "BenchResults":
        return replace(self, comparison=comparison)


def make_row(
    *,
    problem: ProblemInfo,
    provider: str,
    kind: str,
    samples_ms: tuple[float, ...],
    throttled: tuple[bool, ...] = (),
    config: Mapping[str, Any] | None = None,
    rel_error: float | None = None,
) -> ResultRow:
    """A measured row: statistics, rates and % of the ceiling derived in this one place from the raw samples."""
    s = summarize(samples_ms)
    seconds = s.median / 1e3
    flops_per_s = problem.flops / seconds if seconds > 0 else None
    bytes_per_s = problem.bytes / seconds if seconds > 0 else None
    roof = problem.ceiling.roof_per_s(problem.intensity)
    pct = 100.0 * flops_per_s / roof if roof and flops_per_s is not None else None
    return ResultRow(
        problem=problem.problem,
        provider=provider,
        kind=kind,
        status=OK,
        config=config,
        samples_ms=tuple(float(x) for x in samples_ms),
        throttled_samples=sum(1 for t in throttled if t),
        median_ms=s.median,
        q1_ms=s.q1,
        q3_ms=s.q3,
        cv=s.cv,
        n=s.n,
        flops=problem.flops,
        bytes=problem.bytes,
        flops_per_s=flops_per_s,
        bytes_per_s=bytes_per_s,
        pct_of_ceiling=pct,
        rel_error=rel_error,
    )


def failed_row(*, problem: ProblemInfo, provider: str, kind: str, status: str, reason: str, config: Mapping[str, Any] | None = None) -> ResultRow:
    return ResultRow(problem=problem.problem, provider=provider, kind=kind, status=status, reason=reason, config=config, flops=problem.flops, bytes=problem.bytes)


# ---------------------------------------------------------------------------------------------------------------
# JSON


def _num(x: float | None) -> float | None:
    """JSON has no NaN or infinity: such values are written as null."""
    if x is None or not math.isfinite(x):
        return None
    return float(x)


def _interval_dict(i: Interval | None) -> dict | None:
    if i is None:
        return None
    return {"estimate": _num(i.estimate), "low": _num(i.low), "high": _num(i.high), "confidence": i.confidence}


def _interval(d: Mapping | None) -> Interval | None:
    if d is None:
        return None
    return Interval(estimate=float(d["estimate"]), low=float(d["low"]), high=float(d["high"]), confidence=float(d.get("confidence", 0.95)))


def to_dict(results: BenchResults) -> dict[str, Any]:
    """The versioned JSON document (`schema`, `schema_version`, `environment`, `problems`, `results`, `failures`)."""
    env = results.environment
    doc: dict[str, Any] = {
        "schema": SCHEMA,
        "schema_version": SCHEMA_VERSION,
        "environment": {
            "tracea_version": env.tracea_version,
            "created": env.created,
            "command": env.command,
            "suite": env.suite,
            "backend": env.backend,
            "device": env.device,
            "device_class": env.device_class,
            "arch": env.arch,
            "machine_id": env.machine_id,
            "profile_schema_version": env.profile_schema_version,
            "profile_created": env.profile_created,
            "host": dict(env.host),
            "load": None if env.load is None else {"start": env.load.start, "end": env.load.end, "cpu_threads": env.load.cpu_threads,
                                                   "others_threads": env.load.others_threads,
                                                   "steal_fraction": env.load.steal_fraction, "busy": env.load.busy},
        },
        "problems": [
            {
                "problem": p.problem,
                "spec": dict(p.spec),
                "flops": p.flops,
                "bytes": p.bytes,
                "intensity": _num(p.intensity),
                "ceiling": {
                    "flops_per_s": _num(p.ceiling.flops_per_s),
                    "bytes_per_s": _num(p.ceiling.bytes_per_s),
                    "flops_source": p.ceiling.flops_source,
                    "bytes_source": p.ceiling.bytes_source,
                },
                "tuning": None
                if p.tuning is None
                else {
                    "key": p.tuning.key,
                    "cache_hit": p.tuning.cache_hit,
                    "evaluations": p.tuning.evaluations,
                    "trials_total": p.tuning.trials_total,
                    "stopped_because": p.tuning.stopped_because,
                    "trials": [{"index": t.index, "status": t.status, "median_ms": _num(t.median_ms), "timestamp": t.timestamp} for t in p.tuning.trials],
                    "failures": [dict(f) for f in p.tuning.failures],
                },
                "notes": list(p.notes),
            }
            for p in results.problems
        ],
        "results": [
            {
                "problem": r.problem,
                "provider": r.provider,
                "kind": r.kind,
                "status": r.status,
                "reason": r.reason,
                "config": None if r.config is None else dict(r.config),
                "median_ms": _num(r.median_ms),
                "q1_ms": _num(r.q1_ms),
                "q3_ms": _num(r.q3_ms),
                "cv": _num(r.cv),
                "n": r.n,
                "samples_ms": list(r.samples_ms),
                "throttled": r.throttled,
                "throttled_samples": r.throttled_samples,
                "flops": r.flops,
                "bytes": r.bytes,
                "flops_per_s": _num(r.flops_per_s),
                "bytes_per_s": _num(r.bytes_per_s),
                "pct_of_ceiling": _num(r.pct_of_ceiling),
                "rel_error": _num(r.rel_error),
                "speedup": _interval_dict(r.speedup),
                "speedup_over": r.speedup_over,
            }
            for r in results.results
        ],
        "failures": [dict(f) for f in results.failures],
    }
    if results.comparison is not None:
        c = results.comparison
        doc["comparison"] = {
            "against": c.against,
            "against_created": c.against_created,
            "threshold": c.threshold,
            "regressions": len(c.regressions),
            "changes": [
                {
                    "problem": ch.problem,
                    "provider": ch.provider,
                    "old_median_ms": ch.old_median_ms,
                    "new_median_ms": ch.new_median_ms,
                    "ratio": _interval_dict(ch.ratio),
                    "significant": ch.significant,
                    "regression": ch.regression,
                    "improvement": ch.improvement,
                }
                for ch in c.changes
            ],
            "unmatched": list(c.unmatched),
            "warnings": list(c.warnings),
        }
    return doc


def to_json(results: BenchResults) -> str:
    return json.dumps(to_dict(results), indent=2, allow_nan=False) + "\n"


def _opt_float(x: Any) -> float | None:
    return None if x is None else float(x)


def from_dict(doc: Mapping[str, Any]) -> BenchResults:
    """Read a results document written by `to_dict` (any compatible version). Raises KeyError/TypeError/ValueError."""
    if doc.get("schema") != SCHEMA:
        raise ValueError(f"its schema is {doc.get('schema')!r}, not {SCHEMA!r}")
    version = doc.get("schema_version")
    if not isinstance(version, int) or version > SCHEMA_VERSION:
        raise ValueError(f"its schema version {version!r} is newer than this tracea reads ({SCHEMA_VERSION})")
    e = doc["environment"]
    env = Environment(
        tracea_version=str(e["tracea_version"]),
        created=str(e["created"]),
        command=str(e.get("command", "")),
        suite=str(e.get("suite", "")),
        backend=str(e["backend"]),
        device=str(e.get("device", "")),
        device_class=str(e.get("device_class", "")),
        arch=e.get("arch"),
        machine_id=e.get("machine_id"),
        profile_schema_version=e.get("profile_schema_version"),
        profile_created=e.get("profile_created"),
        host=dict(e.get("host") or {}),
        load=None if not e.get("load") else HostLoad(start=float(e["load"]["start"]), end=float(e["load"]["end"]),
                                                     cpu_threads=int(e["load"]["cpu_threads"]),
                                                     others_threads=e["load"].get("others_threads"),
                                                     steal_fraction=e["load"].get("steal_fraction")),
    )
    problems = []
    for p in doc["problems"]:
        c = p.get("ceiling") or {}
        t = p.get("tuning")
        tuning = None
        if t is not None:
            tuning = Tuning(
                key=str(t["key"]),
                cache_hit=bool(t["cache_hit"]),
                evaluations=int(t["evaluations"]),
                trials_total=int(t["trials_total"]),
                stopped_because=str(t.get("stopped_because", "")),
                trials=tuple(TrialPoint(index=int(x["index"]), status=str(x["status"]), median_ms=_opt_float(x.get("median_ms")), timestamp=str(x.get("timestamp", ""))) for x in t.get("trials", [])),
                failures=tuple(dict(f) for f in t.get("failures", [])),
            )
        problems.append(
            ProblemInfo(
                problem=str(p["problem"]),
                spec=dict(p["spec"]),
                flops=int(p["flops"]),
                bytes=int(p["bytes"]),
                ceiling=Ceiling(
                    flops_per_s=_opt_float(c.get("flops_per_s")),
                    bytes_per_s=_opt_float(c.get("bytes_per_s")),
                    flops_source=str(c.get("flops_source", "")),
                    bytes_source=str(c.get("bytes_source", "")),
                ),
                tuning=tuning,
                notes=tuple(str(n) for n in p.get("notes", [])),
            )
        )
    rows = []
    for r in doc["results"]:
        rows.append(
            ResultRow(
                problem=str(r["problem"]),
                provider=str(r["provider"]),
                kind=str(r.get("kind", BASELINE)),
                status=str(r["status"]),
                reason=str(r.get("reason", "")),
                config=None if r.get("config") is None else dict(r["config"]),
                samples_ms=tuple(float(x) for x in r.get("samples_ms", [])),
                throttled_samples=int(r.get("throttled_samples", 0)),
                median_ms=_opt_float(r.get("median_ms")),
                q1_ms=_opt_float(r.get("q1_ms")),
                q3_ms=_opt_float(r.get("q3_ms")),
                cv=_opt_float(r.get("cv")),
                n=int(r.get("n", 0)),
                flops=int(r.get("flops", 0)),
                bytes=int(r.get("bytes", 0)),
                flops_per_s=_opt_float(r.get("flops_per_s")),
                bytes_per_s=_opt_float(r.get("bytes_per_s")),
                pct_of_ceiling=_opt_float(r.get("pct_of_ceiling")),
                rel_error=_opt_float(r.get("rel_error")),
                speedup=_interval(r.get("speedup")),
                speedup_over=r.get("speedup_over"),
            )
        )
    known = {p.problem for p in problems}
    stray = sorted({r.problem for r in rows} - known)
    if stray:
        raise ValueError(f"results refer to problems it does not describe: {', '.join(stray)}")
    return BenchResults(environment=env, problems=tuple(problems), results=tuple(rows))


def load(path: Path, *, what: str = "results file") -> BenchResults:
    """Read results written by `tracea bench --report json`; any problem with the file is a usage error (exit 2)."""
    doc = read_json(path, what, "Give a file written by `tracea bench --report json`.")
    if not isinstance(doc, dict):
        raise UsageError(f"the {what} {path} is not a tracea bench results document.", "Give a file written by `tracea bench --report json`.")
    try:
        return from_dict(doc)
    except (KeyError, TypeError, ValueError, AttributeError) as e:
        detail = f"field {e} is missing" if isinstance(e, KeyError) else str(e)
        raise UsageError(f"the {what} {path} is not usable tracea bench results: {detail}.", "Give a file written by `tracea bench --report json`.") from None


@dataclass(frozen=True)
class Overview:
    """The headline figures every report opens with, derived from the rows."""

    problems: int
    measured_rows: int
    failures: int
    baseline: str | None  # the provider(s) speed-ups are over, comma-separated (None: no baseline ran)
    speedup_geomean: float | None  # of the tuned kernel over the baseline, across problems that have both
    speedup_min: float | None
    speedup_max: float | None
    faster: int  # problems whose whole 95% interval is above 1
    slower: int  # ... below 1
    best_pct_of_ceiling: float | None
    best_pct_problem: str | None
    throttled_rows: int
    regressions: int


def overview(results: BenchResults) -> Overview:
    from tracea_cli.stats import geometric_mean

    speedups = [r.speedup for r in results.results if r.kind == TUNED and r.speedup is not None]
    estimates = [s.estimate for s in speedups]
    names = list(dict.fromkeys(r.speedup_over for r in results.results if r.speedup_over))  # cublas, cublas-tf32, ...
    over = ", ".join(names) if names else None
    pcts = [(r.pct_of_ceiling, r.problem) for r in results.results if r.kind == TUNED and r.pct_of_ceiling is not None]
    best = max(pcts, default=None)
    return Overview(
        problems=len(results.problems),
        measured_rows=sum(1 for r in results.results if r.ok),
        failures=sum(1 for r in results.results if not r.ok),
        baseline=over,
        speedup_geomean=geometric_mean(estimates) if estimates else None,
        speedup_min=min(estimates, default=None),
        speedup_max=max(estimates, default=None),
        faster=sum(1 for s in speedups if s.low > 1.0),
        slower=sum(1 for s in speedups if s.high < 1.0),
        best_pct_of_ceiling=best[0] if best else None,
        best_pct_problem=best[1] if best else None,
        throttled_rows=sum(1 for r in results.results if r.throttled),
        regressions=len(results.comparison.regressions) if results.comparison else 0,
    )
