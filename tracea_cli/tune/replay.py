"""Replay: score a search strategy against random search on a recorded landscape, without hardware.

Rules (product.md, "tracea tune OP" / Replay): the space is the file's configurations; a recorded failure is a
failed evaluation; one distinct configuration is one evaluation, failures included, none proposed twice. Each of
R repeats runs the chosen strategy and random search with the same seed (seed, seed + 1, ...). A repeat's score
at budget b is optimum / (best time found in its first b evaluations), 0 when all of them failed.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np

from tracea_cli.errors import UsageError
from tracea_cli.tune.landscape import Landscape, load_landscape
from tracea_cli.tune.strategies import STRATEGY_NAMES, Strategy, make_strategy

CURVE_STEP = 20  # the curve's budgets: 20, 40, ... up to the budget
WITHIN = 0.95  # "reached the optimum" means a fraction of at least this


@dataclass(frozen=True)
class StrategyScore:
    """One strategy's result over the repeats. `fractions[r][b - 1]`: optimum / best found within b evaluations."""

    name: str
    fractions: tuple[tuple[float, ...], ...]
    budget: int

    @property
    def final(self) -> tuple[float, ...]:
        return tuple(f[-1] for f in self.fractions)

    @property
    def mean_fraction(self) -> float:
        return float(np.mean(self.final))

    @property
    def share_within_95(self) -> float:
        return float(np.mean([f >= WITHIN for f in self.final]))

    @property
    def curve_budgets(self) -> tuple[int, ...]:
        return tuple(range(CURVE_STEP, self.budget + 1, CURVE_STEP))

    @property
    def curve(self) -> tuple[float, ...]:
        """Mean fraction at budgets 20, 40, ... (`curve[i]` is at budget 20 * (i + 1))."""
        return tuple(self.mean_at(b) for b in self.curve_budgets)

    def mean_at(self, budget: int) -> float:
        return float(np.mean([f[budget - 1] for f in self.fractions]))

    def as_dict(self) -> dict[str, Any]:
        return {"mean_fraction": self.mean_fraction, "share_within_95": self.share_within_95, "curve": list(self.curve)}


@dataclass(frozen=True)
class ReplayResult:
    source: str
    configurations: int
    failed: int
    optimum: float
    optimum_unit: str
    budget: int
    repeats: int
    seed: int
    strategies: tuple[StrategyScore, ...]  # the chosen one first, then random (once if it is the chosen one)

    def score(self, name: str) -> StrategyScore:
        for s in self.strategies:
            if s.name == name:
                return s
        raise KeyError(name)

    def as_dict(self) -> dict[str, Any]:
        return {
            "configurations": self.configurations,
            "optimum": self.optimum,
            "optimum_unit": self.optimum_unit,
            "budget": self.budget,
            "repeats": self.repeats,
            "strategies": {s.name: s.as_dict() for s in self.strategies},
        }


def run_replay(path: Path, *, strategy: str, budget: int, repeats: int, seed: int) -> ReplayResult:
    """Load the landscape at `path` and score `strategy` and random search on it. Bad input -> UsageError."""
    _check_options(strategy=strategy, budget=budget, repeats=repeats, seed=seed)
    landscape = load_landscape(Path(path))
    return replay(landscape, strategy=strategy, budget=budget, repeats=repeats, seed=seed)


def replay(landscape: Landscape, *, strategy: str, budget: int, repeats: int, seed: int, batch: int = 1) -> ReplayResult:
    """Score `strategy` and random search on a loaded landscape; `batch` is how many are asked for at a time."""
    _check_options(strategy=strategy, budget=budget, repeats=repeats, seed=seed)
    if not math.isfinite(landscape.optimum):
        raise UsageError(
            f"every configuration in the landscape {landscape.source} failed, so there is no optimum to reach.",
            "Replay a landscape with at least one measured time.",
        )
    names = [strategy] + ([] if strategy == "random" else ["random"])
    scores = tuple(
        StrategyScore(
            name=name,
            fractions=tuple(search_trace(landscape, name, budget=budget, seed=seed + r, batch=batch) for r in range(repeats)),
            budget=budget,
        )
        for name in names
    )
    return ReplayResult(
        source=landscape.source,
        configurations=len(landscape),
        failed=landscape.failed,
        optimum=landscape.optimum,
        optimum_unit=landscape.unit,
        budget=budget,
        repeats=repeats,
        seed=seed,
        strategies=scores,
    )


def search_trace(landscape: Landscape, strategy: str | Callable[..., Strategy], *, budget: int, seed: int,
                 batch: int = 1) -> tuple[float, ...]:
    """One seeded search: optimum / best found after each of `budget` evaluations (held once the space is spent).

    `strategy` is a name for `make_strategy`, or (for benchmarks comparing settings) a callable taking the
    candidates and `seed=` that returns a strategy."""
    times = landscape.times
    if callable(strategy):
        search = strategy(landscape.candidates, seed=seed)
    else:
        search = make_strategy(strategy, landscape.candidates, seed=seed)
    best = math.inf
    trace: list[float] = []
    while len(trace) < budget:
        proposed = search.ask(min(batch, budget - len(trace)))
        if not proposed:
            break
        for index in proposed:
            search.tell(index, times[index])
            best = min(best, times[index])
            trace.append(landscape.optimum / best if math.isfinite(best) else 0.0)
    trace.extend([trace[-1] if trace else 0.0] * (budget - len(trace)))
    return tuple(trace)


def methodology_score(strategy: Sequence[float], random: Sequence[float]) -> float:
    """The comparison methodology's score, averaged over budgets: per budget (strategy - random) / (1 - random), with
    mean fractions of the optimum (1 is the optimum); 0 means no better than random search, 1 the optimum every
    time. A budget where random search already reaches the optimum every time counts 0 (nothing left to gain)."""
    per_budget = [(s - r) / (1.0 - r) if r < 1.0 else 0.0 for s, r in zip(strategy, random, strict=True)]
    return float(np.mean(per_budget)) if per_budget else 0.0


def _check_options(*, strategy: str, budget: int, repeats: int, seed: int) -> None:
    if strategy not in STRATEGY_NAMES:
        raise UsageError(f"unknown search strategy {strategy!r}.", f"Choose one of: {', '.join(STRATEGY_NAMES)}.")
    if budget < 1:
        raise UsageError(f"the budget must be at least 1 evaluation, got {budget}.", "Give --budget 60, say.")
    if repeats < 1:
        raise UsageError(f"the number of repeats must be at least 1, got {repeats}.", "Give --repeats 30, say.")
    if seed < 0:
        raise UsageError(f"the seed must be >= 0, got {seed}.", "Give --seed 0 or another non-negative integer.")


def render_replay(result: ReplayResult, console) -> None:
    """The terminal view: what was replayed, then one row per strategy with its curve."""
    from rich.table import Table

    seeds = f"seed {result.seed}" if result.repeats == 1 else f"seeds {result.seed}..{result.seed + result.repeats - 1}"
    repeats = f"{result.repeats} repeat" + ("s" if result.repeats != 1 else "")
    console.print(
        f"Replayed {result.source}: {result.configurations} configurations ({result.failed} failed), "
        f"optimum {result.optimum:.4g} {result.optimum_unit}; budget {result.budget}, {repeats}, {seeds}."
    )
    budgets = result.strategies[0].curve_budgets
    table = Table(title="Fraction of the optimum reached (mean over repeats)")
    table.add_column("strategy")
    table.add_column(f"mean @ {result.budget}", justify="right")
    table.add_column("within 95%", justify="right")
    for b in budgets:
        table.add_column(f"@{b}", justify="right")
    for s in result.strategies:
        table.add_row(s.name, f"{s.mean_fraction:.3f}", f"{s.share_within_95:.0%}", *(f"{v:.3f}" for v in s.curve))
    console.print(table)
