"""The tuning driver: profile -> space -> cache -> warm start -> propose, compile, evaluate, record -> winner.

Contract used by `tracea tune`, `tracea bench` and the Python API. (Implementation in progress.)
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

from tracea_cli.ops.gemm.problem import GemmProblem
from tracea_cli.space import Value


@dataclass(frozen=True)
class TuneRequest:
    problem: GemmProblem
    backend: str = "auto"  # auto | cuda | cpu
    devices: str | None = None  # the --device text
    strategy: str = "bayes"
    budget: int = 40  # evaluations
    time_limit_s: float | None = None
    seed: int = 0
    force: bool = False


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
    stopped_because: str = ""  # budget | time limit | converged | space exhausted | cache hit | interrupted

    def as_dict(self) -> dict[str, Any]:
        def m(x: Measured | None) -> dict | None:
            if x is None:
                return None
            rate_key = "tflops" if x.rate_unit == "TFLOP/s" else "gflops"
            return {"config": dict(x.config), "median_ms": x.median_ms, "cv": x.cv, rate_key: x.rate, "samples_ms": list(x.samples_ms)}

        base = m(self.baseline)
        if base is not None:
            base["name"] = self.baseline_name
        return {
            "key": self.key,
            "cache_hit": self.cache_hit,
            "evaluations": self.evaluations,
            "trials_total": self.trials_total,
            "winner": m(self.winner),
            "baseline": base,
            "ranking": [m(r) for r in self.ranking],
            "failures": [{"config": dict(f.config), "status": f.status, "reason": f.reason} for f in self.failures],
            "target": dict(self.target),
            "stopped_because": self.stopped_because,
        }


ProgressFn = Callable[[int, int, str], None]  # (done, total, message)


def tune(request: TuneRequest, *, settings, progress: ProgressFn | None = None) -> TuneResult:
    raise NotImplementedError("the tuning driver is being written")
