"""Random search: a seeded permutation of the candidates, sampled without replacement."""

from __future__ import annotations

import numpy as np

from tracea_cli.space import Candidates
from tracea_cli.tune.strategies.base import Bookkeeping


class RandomSearch(Bookkeeping):
    name = "random"

    def __init__(self, candidates: Candidates, *, seed: int) -> None:
        super().__init__(candidates, seed=seed)
        self._order = np.random.default_rng(seed).permutation(self.size).tolist()
        self._next = 0

    def ask(self, n: int) -> list[int]:
        chosen: list[int] = []
        while len(chosen) < self._check_n(n) and self._next < len(self._order):
            index = self._order[self._next]
            self._next += 1
            if index not in self.proposed:  # skip what was observed from elsewhere
                self.proposed.add(index)
                chosen.append(index)
        return chosen
