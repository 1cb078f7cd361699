"""Kernel choice for a graph's op steps: a cache hit takes the stored winner; a miss does what the context's mode
says, spending tuning time on the steps that matter most first.

Each step's time is estimated from the roofline of the profile's measured ceilings (the larger of FLOPs over the
measured FLOP/s and fewest bytes over the measured bandwidth); without measured ceilings, steps are ranked by FLOPs.
In mode "tune", steps are tuned in order of their estimated share of the graph's time, each within its share of what
is left of the time limit (a step whose share is under MIN_TUNE_S gets the default pick instead). Mode "default"
evaluates the families' first pick once (checked against the reference, timed, stored as a one-evaluation search),
and mode "cached" refuses a miss.

Everything stored goes through the tuner (tune/driver.py), so what the Python API tuned is what `tracea tune` finds,
and the other way round.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Callable, Mapping

from tracea_cli.errors import UsageError
from tracea_cli.ops.registry import get_op

MODES = ("tune", "default", "cached")
MIN_TUNE_S = 3.0  # a step allotted less tuning time than this gets the default pick


@dataclass(frozen=True)
class Choice:
    """The kernel chosen for one op step: its configuration, where it came from, and its times."""

    problem: Any
    key: Any  # cache.CacheKey
    config: Mapping[str, Any]
    source: str  # "cached" | "tuned" | "default"
    measured_ms: float | None  # the winner's median, as stored by the run that measured it
    estimated_ms: float | None  # the roofline estimate from the profile's measured ceilings
    evaluations: int  # trials stored for its key
    tune_s: float = 0.0  # seconds this optimize_graph spent on it
    baseline: tuple[str, float] | None = None  # (name, median ms) of the vendor baseline its tuning measured


@dataclass(frozen=True)
class Request:
    """What the chooser needs of the context."""

    backend: str  # resolved: "cuda" | "cpu"
    devices: str | None
    mode: str
    budget: int
    time_limit_s: float | None
    strategy: str
    seed: int
    settings: Any
    target: Any
    ceiling: Callable[[str], Any]  # dtype -> doctor.ceilings.MeasuredCeiling
    executor: str = "local"
    ray_address: str | None = None


def estimate_ms(problem: Any, ceiling: Any) -> float | None:
    times = [work / rate for work, rate in ((problem.flops, ceiling.flops_per_s), (problem.bytes, ceiling.bytes_per_s))
             if rate]
    return 1e3 * max(times) if times else None


def _key(problem: Any, request: Request) -> Any:
    from tracea_cli.backends.op_backend import OpBackend
    from tracea_cli.tune.setup import cache_key

    return cache_key(problem, OpBackend(problem.op, request.backend), request.target)


def _stored(cache: Any, key: Any) -> tuple[Mapping[str, Any], float | None, int, tuple[str, float] | None] | None:
    winner = cache.winner(key)
    if winner is None:
        return None
    baseline = cache.baseline(key)
    measured = (baseline[0], baseline[1].median_ms) if baseline and baseline[1].median_ms else None
    return dict(winner.config), winner.median_ms, len(cache.trials(key)), measured


def _tune(problem: Any, request: Request, *, budget: int, time_limit_s: float | None) -> None:
    from tracea_cli.tune.driver import TuneRequest, tune

    tune(TuneRequest(problem, backend=request.backend, devices=request.devices, strategy=request.strategy,
                     budget=budget, time_limit_s=time_limit_s, seed=request.seed, executor=request.executor,
                     ray_address=request.ray_address), settings=request.settings)


def check_runs(problem: Any, backend: str, where: str) -> None:
    """UsageError naming `where` when the backend has no kernels for the problem."""
    dtypes = get_op(problem.op).dtypes.get(backend, ())
    if problem.dtype not in dtypes:
        runs = f"runs {problem.op} in {', '.join(dtypes)}" if dtypes else f"has no {problem.op} kernels"
        raise UsageError(f"{where}: the {backend} backend {runs}, not {problem.dtype}.",
                         "Use another dtype, or a Context with another backend.")


def choose(problems: Mapping[int, tuple[Any, str]], request: Request) -> dict[int, Choice]:
    """A Choice per step (by step number) for `problems`: step -> (problem, the node it is for, as errors name it)."""
    from tracea_cli.cache import TuningCache

    for problem, where in problems.values():
        check_runs(problem, request.backend, where)
    keys = {i: _key(p, request) for i, (p, _) in problems.items()}
    estimates = {i: estimate_ms(p, request.ceiling(p.dtype)) for i, (p, _) in problems.items()}
    weight = {i: estimates[i] if estimates[i] is not None else float(p.flops) for i, (p, _) in problems.items()}
    with TuningCache.open(request.settings.cache_path) as cache:
        found = {i: _stored(cache, keys[i]) for i in problems}
    misses = [i for i in problems if found[i] is None]
    if misses and request.mode == "cached":
        i = misses[0]
        raise UsageError(f"{problems[i][1]}: {problems[i][0].label} is not in the tuning cache, and the context's mode "
                         "is 'cached'.", "Tune it first (mode='tune', or `tracea tune`), or use mode='default'.")
    spent: dict[int, float] = {}
    sources: dict[int, str] = {}
    left = request.time_limit_s
    order = sorted(misses, key=lambda i: -weight[i])
    for n, i in enumerate(order):
        problem = problems[i][0]
        share = None if left is None else left * weight[i] / sum(weight[j] for j in order[n:])
        tuning = request.mode == "tune" and (share is None or share >= MIN_TUNE_S)
        began = time.monotonic()
        try:
            _tune(problem, request, budget=request.budget if tuning else 1, time_limit_s=share if tuning else None)
        except UsageError as e:
            raise UsageError(f"{problems[i][1]}: {e.message}", e.hint) from None
        spent[i] = time.monotonic() - began
        sources[i] = "tuned" if tuning else "default"
        if left is not None:
            left = max(0.0, left - spent[i])
    if misses:
        with TuningCache.open(request.settings.cache_path) as cache:
            found.update({i: _stored(cache, keys[i]) for i in misses})
    out: dict[int, Choice] = {}
    for i, (problem, where) in problems.items():
        if found[i] is None:
            raise UsageError(f"{where}: no configuration of {problem.label} ran correctly here (see `tracea cache show`).",
                             "Try another dtype or shape, or `tracea tune` it to see why.")
        config, measured, evaluations, baseline = found[i]
        out[i] = Choice(problem, keys[i], config, sources.get(i, "cached"), measured, estimates[i], evaluations,
                        spent.get(i, 0.0), baseline)
    return out
