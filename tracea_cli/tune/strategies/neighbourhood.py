"""A variable-neighbourhood search with a cheap surrogate pre-screen, tabu and annealed acceptance (`vns`).

The kind of search recent comparisons found strongest on GPU tuning spaces (Kernel Tuner's landscapes; docs/search.md
gives the references): from a current configuration, each step gathers a small pool of candidates — a few of its
neighbours (under one of three neighbourhoods, chosen by how well each has done), a child of two of the best
configurations so far, and random ones — scores them with a k-nearest-neighbour estimate of log(time) over the
configurations already measured (distance: how many parameters differ), and evaluates the most promising one.
The move is accepted if it is better, or with a probability that falls with how much worse it is and with time
(simulated annealing); a long run without accepted moves restarts from a random configuration.

Neighbourhoods (over value positions): "step" changes one parameter to a neighbouring value; "box" changes any
parameters by at most one position each; "any" changes one parameter to any value.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from tracea_cli.space import Candidates
from tracea_cli.tune.strategies import encoding
from tracea_cli.tune.strategies.base import Bookkeeping

MOVES = ("step", "box", "any")


@dataclass(frozen=True)
class NeighbourhoodSettings:
    neighbours: int = 4  # neighbours of the current configuration in each pool
    pool: int = 8  # candidates scored per step (neighbours, one child of two elite configurations, random ones)
    k: int = 5  # neighbours of the k-NN estimate
    elite: int = 5
    temperature: float = 1.0  # initial temperature, in log(time) relative to the spread seen
    cooling: float = 0.995
    restart: int = 100  # steps without an accepted move before a restart


class NeighbourhoodSearch(Bookkeeping):
    name = "vns"

    def __init__(self, candidates: Candidates, *, seed: int, settings: NeighbourhoodSettings | None = None) -> None:
        super().__init__(candidates, seed=seed)
        self.settings = settings or NeighbourhoodSettings()
        self._rng = np.random.default_rng(seed)
        self._levels = encoding.levels(candidates.params, candidates.configs).astype(np.int64)
        self._index = {tuple(row): i for i, row in enumerate(self._levels.tolist())}
        self._ordinal = np.array([p.kind == "ordinal" for p in candidates.params] or [True])
        self._weights = {m: 1.0 for m in MOVES}
        self._current: int | None = None
        self._move: str | None = None  # the neighbourhood the pending proposal came from
        self._temperature = self.settings.temperature
        self._stale = 0

    def ask(self, n: int) -> list[int]:
        chosen: list[int] = []
        for _ in range(self._check_n(n)):
            if self.exhausted:
                break
            index = self._propose()
            self.proposed.add(index)
            chosen.append(index)
        return chosen

    def tell(self, index: int, cost: float) -> None:
        super().tell(index, cost)
        self._step(index)

    # -- proposing ----------------------------------------------------------------------------------------------

    def _free(self) -> np.ndarray:
        mask = np.ones(self.size, dtype=bool)
        mask[list(self.proposed)] = False
        return np.flatnonzero(mask)

    def _propose(self) -> int:
        free = self._free()
        if self._current is None or not any(math.isfinite(c) for c in self.costs.values()):
            self._move = None
            return int(self._rng.choice(free))
        s = self.settings
        moves = list(self._weights)
        weights = np.array([self._weights[m] for m in moves])
        self._move = moves[int(self._rng.choice(len(moves), p=weights / weights.sum()))]
        near = self._neighbours(self._current, self._move)
        near = near[~np.isin(near, list(self.proposed))]
        pool = list(self._rng.choice(near, min(len(near), s.neighbours), replace=False)) if len(near) else []
        child = self._child()
        if child is not None and child not in self.proposed:
            pool.append(child)
        while len(pool) < s.pool and len(pool) < len(free):
            pool.append(int(self._rng.choice(free)))
        pool = list(dict.fromkeys(int(i) for i in pool))
        scores = [self._estimate(i) for i in pool]
        return pool[int(np.argmin(scores))]

    def _neighbours(self, i: int, move: str) -> np.ndarray:
        diff = self._levels - self._levels[i]
        changed = diff != 0
        if move == "any":
            return np.flatnonzero(changed.sum(axis=1) == 1)
        if move == "step":
            return encoding.adjacent(self._levels, i, self._ordinal)
        return np.flatnonzero(changed.any(axis=1) & (np.abs(diff) <= 1).all(axis=1))

    def _child(self) -> int | None:
        elite = [i for _, i in sorted((c, i) for i, c in self.costs.items() if math.isfinite(c))][: self.settings.elite]
        if len(elite) < 2:
            return None
        a, b = self._rng.choice(elite, 2, replace=False)
        pick = self._rng.random(self._levels.shape[1]) < 0.5
        return self._index.get(tuple(np.where(pick, self._levels[a], self._levels[b]).tolist()))

    def _estimate(self, i: int) -> float:
        """Mean log(time) of the k measured configurations fewest parameters away (failures at the worst seen)."""
        told = np.fromiter(self.costs, dtype=np.int64, count=len(self.costs))
        costs = np.array([self.costs[j] for j in told])
        ok = np.isfinite(costs) & (costs > 0)
        logs = np.where(ok, np.log(np.where(ok, costs, 1.0)), np.log(costs[ok].max()) if ok.any() else 0.0)
        distance = (self._levels[told] != self._levels[i]).sum(axis=1)
        nearest = np.argsort(distance, kind="stable")[: self.settings.k]
        return float(logs[nearest].mean())

    # -- moving -------------------------------------------------------------------------------------------------

    def _log(self, i: int) -> float:
        c = self.costs[i]
        finite = [v for v in self.costs.values() if math.isfinite(v) and v > 0]
        return math.log(c) if math.isfinite(c) and c > 0 else (math.log(max(finite)) + 1.0 if finite else 0.0)

    def _step(self, index: int) -> None:
        if self._current is None or not math.isfinite(self.costs.get(self._current, math.inf)):
            if math.isfinite(self.costs[index]):
                self._current = index
            return
        delta = self._log(index) - self._log(self._current)
        accept = delta < 0 or self._rng.random() < math.exp(-delta / max(self._temperature, 1e-8))
        if self._move is not None:
            self._weights[self._move] *= 1.1 if accept else 0.9
        if accept:
            self._current, self._stale = index, 0
        else:
            self._stale += 1
        self._temperature *= self.settings.cooling
        if self._stale >= self.settings.restart:
            self._current, self._stale, self._temperature = None, 0, self.settings.temperature
