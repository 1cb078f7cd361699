"""Search strategies behind one interface (see `base.Strategy`): `bayes`, `random`, `grid`, and `gp-ei`, the plain
baseline the benchmarks compare with.

`make_strategy(name, candidates, seed=...)` is the only way in; modules load on demand so that importing the
package costs nothing (the Bayesian one pulls in scikit-optimize only when asked to propose).
"""

from __future__ import annotations

import importlib

from tracea_cli.errors import UsageError
from tracea_cli.space import Candidates
from tracea_cli.tune.strategies.base import Strategy

# name -> (module, class)
_STRATEGIES = {
    "bayes": ("tracea_cli.tune.strategies.bayes", "BayesSearch"),
    "random": ("tracea_cli.tune.strategies.random", "RandomSearch"),
    "grid": ("tracea_cli.tune.strategies.grid", "GridSearch"),
    "gp-ei": ("tracea_cli.tune.strategies.gp_ei", "PlainGPSearch"),  # the plain baseline the benchmarks compare with
    "vns": ("tracea_cli.tune.strategies.neighbourhood", "NeighbourhoodSearch"),
}
STRATEGY_NAMES: tuple[str, ...] = tuple(_STRATEGIES)


def make_strategy(name: str, candidates: Candidates, *, seed: int) -> Strategy:
    """A fresh strategy over `candidates`, seeded. Unknown names and negative seeds are usage errors."""
    if name not in _STRATEGIES:
        raise UsageError(f"unknown search strategy {name!r}.", f"Choose one of: {', '.join(STRATEGY_NAMES)}.")
    if not isinstance(seed, int) or isinstance(seed, bool) or seed < 0:
        raise UsageError(f"the seed must be a whole number >= 0, got {seed!r}.", "Give --seed 0 or another non-negative integer.")
    module_name, class_name = _STRATEGIES[name]
    cls = getattr(importlib.import_module(module_name), class_name)
    return cls(candidates, seed=seed)


__all__ = ["Strategy", "STRATEGY_NAMES", "make_strategy"]
