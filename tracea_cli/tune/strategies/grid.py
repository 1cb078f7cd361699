"""Grid search: the candidates in their enumeration order (the seed is accepted and has nothing to decide)."""

from __future__ import annotations

from tracea_cli.space import Candidates
from tracea_cli.tune.strategies.base import Bookkeeping


class GridSearch(Bookkeeping):
    name = "grid"

    def __init__(self, candidates: Candidates, *, seed: int) -> None:
        super().__init__(candidates, seed=seed)
        self._next = 0

    def ask(self, n: int) -> list[int]:
        chosen: list[int] = []
        while len(chosen) < self._check_n(n) and self._next < self.size:
            index = self._next
            self._next += 1
            if index not in self.proposed:
                self.proposed.add(index)
                chosen.append(index)
        return chosen
