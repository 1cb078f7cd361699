"""Which shapes a tuned variant may serve besides its own, as the exported runtime checks them: per dimension a
minimum, a maximum and a multiple.

The answer comes from the search space itself: its rules (vector widths that must divide a row, tiles no larger than
the problem, split-K slices that all get work, ...) are asked about nearby and distant sizes of each dimension while
the other two stay at the tuned shape. The rules of the GEMM spaces depend on one dimension each, and grow or shrink
monotonically with it, which is what makes three intervals a faithful summary; sampled sizes inside each interval
are checked again, and an interval shrinks to exclude any that fail.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Callable, Mapping

from tracea_cli.ops.gemm.problem import SHAPE_LIMIT, GemmProblem
from tracea_cli.space import SearchSpace, Value

INT_MAX = 2**31 - 1  # "no upper bound": the runtime's sizes are C ints
MULTIPLES = (1, 2, 4, 8, 16, 32, 64, 128, 256)
SAMPLES = 8  # sizes re-checked inside each side of an interval


def valid_for(problem: GemmProblem, config: Mapping[str, Value],
              space_at: Callable[[GemmProblem], SearchSpace]) -> dict[str, int]:
    """{"m_min", "m_max", "m_multiple", ... for n and k}: sizes of each dimension `config` is valid for.

    `space_at(problem)` is the problem's search space on the variant's architecture. The tuned shape itself must be
    valid; it always lies inside the result.
    """
    def ok(dim: str, size: int) -> bool:
        return space_at(replace(problem, **{dim: size})).why_invalid(config) is None

    if space_at(problem).why_invalid(config) is not None:
        raise ValueError(f"{dict(config)} is not valid for {problem.label}")
    out: dict[str, int] = {}
    for dim in ("m", "n", "k"):
        tuned = getattr(problem, dim)
        step = next((g for g in MULTIPLES if tuned % g == 0 and all(ok(dim, tuned + j * g) for j in (1, 2, 3))), tuned)
        lowest = _edge(lambda j: ok(dim, j * step), 1, tuned // step)  # smallest valid multiple index
        top = SHAPE_LIMIT // step
        highest = top if ok(dim, top * step) else _edge(lambda j: not ok(dim, j * step), tuned // step, top) - 1
        for j in _samples(lowest, tuned // step):
            if not ok(dim, j * step):
                lowest = j + 1
        for j in _samples(tuned // step, highest):
            if not ok(dim, j * step):
                highest = min(highest, j - 1)
        out[f"{dim}_min"] = lowest * step
        out[f"{dim}_max"] = INT_MAX if highest == top else highest * step
        out[f"{dim}_multiple"] = step
    return out


def _edge(passes: Callable[[int], bool], lo: int, hi: int) -> int:
    """The smallest j in [lo, hi] with passes(j), assuming passes is monotone and passes(hi) holds."""
    while lo < hi:
        mid = (lo + hi) // 2
        if passes(mid):
            hi = mid
        else:
            lo = mid + 1
    return lo


def _samples(lo: int, hi: int) -> list[int]:
    if hi <= lo:
        return []
    return sorted({lo + (hi - lo) * i // SAMPLES for i in range(SAMPLES + 1)})
