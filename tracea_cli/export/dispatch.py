"""Which sizes a tuned variant may serve besides its own, as the exported runtime checks them: per size of the op's
problem a minimum, a maximum and a multiple.

The answer comes from the search space itself: its rules (vector widths that must divide a row, tiles no larger than
the problem, split-K slices that all get work, ...) are asked about nearby and distant values of each size while the
others stay at the tuned shape. The rules of the spaces depend on one size each, and grow or shrink monotonically
with it, which is what makes one interval per size a faithful summary; sampled sizes inside each interval are
checked again, and an interval shrinks to exclude any that fail.
"""

from __future__ import annotations

from typing import Any, Callable, Mapping

from tracea_cli.errors import TraceaError
from tracea_cli.space import Value

INT_MAX = 2**31 - 1  # "no upper bound": the runtime's sizes are C ints
SIZE_LIMIT = 1 << 20  # the largest size probed (ops refuse larger ones as typos)
MULTIPLES = (1, 2, 4, 8, 16, 32, 64, 128, 256)
SAMPLES = 8  # sizes re-checked inside each side of an interval


def valid_for(problem: Any, config: Mapping[str, Value], resized: Callable[[Any, str, int], Any],
              why_invalid_at: Callable[[Any], str | None]) -> dict[str, int]:
    """{"<size>_min", "<size>_max", "<size>_multiple", ...} for each of the problem's sizes: the values `config` is
    valid for. `resized(problem, name, value)` is the problem with one size changed (raising TraceaError where the
    op refuses it); `why_invalid_at(problem)` asks the variant's space. The tuned shape itself must be valid; it always
    lies inside the result."""
    def ok(name: str, size: int) -> bool:
        try:
            return why_invalid_at(resized(problem, name, size)) is None
        except TraceaError:
            return False

    if why_invalid_at(problem) is not None:
        raise ValueError(f"{dict(config)} is not valid for {problem.label}")
    out: dict[str, int] = {}
    for name, tuned in problem.sizes().items():
        step = next((g for g in MULTIPLES if tuned % g == 0 and all(ok(name, tuned + j * g) for j in (1, 2, 3))), tuned)
        lowest = _edge(lambda j: ok(name, j * step), 1, tuned // step)  # smallest valid multiple index
        top = SIZE_LIMIT // step
        highest = top if ok(name, top * step) else _edge(lambda j: not ok(name, j * step), tuned // step, top) - 1
        for j in _samples(lowest, tuned // step):
            if not ok(name, j * step):
                lowest = j + 1
        for j in _samples(tuned // step, highest):
            if not ok(name, j * step):
                highest = min(highest, j - 1)
        out[f"{name}_min"] = lowest * step
        out[f"{name}_max"] = INT_MAX if highest == top else highest * step
        out[f"{name}_multiple"] = step
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
