"""The one interface every search strategy shares, and the bookkeeping they all need.

A strategy chooses among a fixed, enumerated list of valid candidates (`Candidates.configs`) by index:

    strategy = make_strategy("bayes", candidates, seed=0)
    for index in strategy.ask(4):           # up to 4 indices never proposed before; [] when the space is spent
        strategy.tell(index, cost)          # cost: time, lower is better; math.inf for a failed configuration
    strategy.observe(index, cost)           # a result known beforehand (cache, warm start); never proposed again;
                                            # observing one index again keeps the better cost

Strategies are pure search: they never print, touch the cache, read the environment or the clock. All their
randomness comes from `seed`, so the same seed and the same results give the same proposals.
"""

from __future__ import annotations

import math
from typing import Protocol, runtime_checkable

from tracea_cli.space import Candidates


@runtime_checkable
class Strategy(Protocol):
    name: str

    def ask(self, n: int) -> list[int]:
        """Up to `n` indices into `candidates.configs`, none proposed or observed before; [] when exhausted."""
        ...

    def tell(self, index: int, cost: float) -> None:
        """The cost of a proposed candidate (lower is better; `math.inf` when it failed)."""
        ...

    def observe(self, index: int, cost: float) -> None:
        """A cost known without proposing it (seeding from the cache or a warm start); may precede any `ask`."""
        ...


class Bookkeeping:
    """What every strategy tracks: which candidates were proposed, and the costs it has been told."""

    name = "base"

    def __init__(self, candidates: Candidates, *, seed: int) -> None:
        if seed < 0:
            raise ValueError(f"seed must be >= 0, got {seed}")
        self.candidates = candidates
        self.seed = seed
        self.proposed: set[int] = set()  # asked or observed: never proposed again
        self.costs: dict[int, float] = {}  # index -> cost, in the order told

    @property
    def size(self) -> int:
        return len(self.candidates)

    @property
    def pending(self) -> list[int]:
        """Proposed but not yet told (in flight)."""
        return sorted(i for i in self.proposed if i not in self.costs)

    @property
    def exhausted(self) -> bool:
        return len(self.proposed) >= self.size

    def best(self) -> tuple[int, float] | None:
        """The cheapest candidate told so far, or None before any success."""
        finite = [(c, i) for i, c in self.costs.items() if math.isfinite(c)]
        if not finite:
            return None
        cost, index = min(finite)
        return index, cost

    def tell(self, index: int, cost: float) -> None:
        cost = self._check(index, cost)
        if index in self.costs:
            raise ValueError(f"candidate {index} already has a cost")
        self.proposed.add(index)
        self.costs[index] = cost

    def observe(self, index: int, cost: float) -> None:
        # A cache may hold a configuration more than once (runs on identical devices, imports): keep the best.
        cost = self._check(index, cost)
        self.proposed.add(index)
        self.costs[index] = min(cost, self.costs.get(index, math.inf))

    def _check(self, index: int, cost: float) -> float:
        if not 0 <= index < self.size:
            raise IndexError(f"candidate index {index} is outside 0..{self.size - 1}")
        cost = float(cost)
        if math.isnan(cost) or cost < 0:
            raise ValueError(f"cost must be >= 0 or inf, got {cost}")
        return cost

    @staticmethod
    def _check_n(n: int) -> int:
        if n < 0:
            raise ValueError(f"cannot ask for {n} candidates")
        return n
