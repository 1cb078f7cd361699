"""Candidates as numbers: value positions, the coordinates a surrogate model sees, and neighbourhoods.

Pure functions of the candidates (no randomness, no I/O). Every candidate is first reduced to `levels`, the
position of each parameter's value among that parameter's values; everything else is derived from those:

- `encode(params, configs, style)` gives points in [0, 1]^d for a model. The styles are choices the search's
  cross-validation makes (docs/search.md):
  - "rank": an ordinal parameter by its rank among its values, scaled to [0, 1]; a categorical one by one-hot
    columns (one column when it has two values); constants dropped.
  - "rank+align": as "rank", plus, for each numeric parameter whose values are not all powers of two, one column
    for how many times 2 divides the value (0 counting as divisible by everything): GPU kernels are fast where a
    block width is a multiple of the warp (32) or wavefront (64), and a rank scale puts 64 and 80 side by side.
  - "rank+align-step": as "rank+align", only for parameters whose values step evenly by a power of two of at
    least 2 (16, 32, 48, ...: thread counts), not for counts stepping by one.
  - "index": every parameter by its value's position scaled to [0, 1], categorical ones too (the plain encoding).
- `neighbours(levels, i)`: the candidates that differ from candidate i in exactly one parameter.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from tracea_cli.space import Param

ENCODINGS = ("rank", "rank+align", "rank+align-step", "index")


def levels(params: Sequence[Param], configs) -> np.ndarray:
    """Candidates as rows of value positions, one column per parameter (int16 while values number under 32,768)."""
    columns = []
    for p in params:
        position = {v: k for k, v in enumerate(p.values)}
        columns.append(np.fromiter((position[c.get(p.name)] for c in configs), dtype=np.int64, count=len(configs)))
    if not columns:
        return np.zeros((len(configs), 1), dtype=np.int16)
    dtype = np.int16 if max(len(p.values) for p in params) < 2**15 else np.int64
    return np.column_stack(columns).astype(dtype)


def _two_adic(value) -> float | None:
    """How many times 2 divides a whole number (None for anything else; 0 divides by everything: None too)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not float(value).is_integer() or value == 0:
        return None
    n, k = abs(int(value)), 0
    while n % 2 == 0:
        n //= 2
        k += 1
    return float(k)


def _alignment(p: Param, *, stepped: bool = False) -> np.ndarray | None:
    """Per value of `p`, its 2-adic valuation scaled to [0, 1]; None where that says nothing the rank does not.

    `stepped`: only for parameters whose values step evenly by a power of two of at least 2 (16, 32, 48, ...:
    thread counts), not for counts stepping by one (unroll factors, tiles per thread)."""
    if p.kind != "ordinal" or len(p.values) < 3:
        return None
    if stepped:
        numbers = [v for v in p.values if not isinstance(v, bool) and isinstance(v, (int, float))]
        gaps = set(np.diff(np.array(numbers, dtype=float)).tolist()) if len(numbers) == len(p.values) else set()
        if len(gaps) != 1 or (step := gaps.pop()) < 2 or not float(step).is_integer() or int(step) & (int(step) - 1):
            return None
    raw = [_two_adic(v) for v in p.values]
    known = [r for r in raw if r is not None]
    if len(known) < 2 or max(known) == min(known):
        return None
    if all(v is None or (_two_adic(v) is not None and 2 ** _two_adic(v) == abs(v)) for v in p.values if v != 0):
        return None  # all powers of two: the valuation is the rank again
    top = max(known)
    return np.array([top if r is None else r for r in raw]) / top


def columns_of(params: Sequence[Param], style: str = "rank") -> list[tuple[int, np.ndarray]]:
    """The encoding as (parameter position, value -> coordinate table) per column, in column order."""
    if style not in ENCODINGS:
        raise ValueError(f"unknown encoding {style!r}; one of {ENCODINGS}")
    columns: list[tuple[int, np.ndarray]] = []
    for j, p in enumerate(params):
        k = len(p.values)
        if k < 2:
            continue
        if style == "index" or p.kind == "ordinal" or k == 2:
            columns.append((j, np.arange(k) / (k - 1)))
        else:
            columns.extend((j, (np.arange(k) == value).astype(np.float64)) for value in range(k))
        if style.startswith("rank+align"):
            align = _alignment(p, stepped=style == "rank+align-step")
            if align is not None:
                columns.append((j, align))
    return columns


def encode(params: Sequence[Param], configs, style: str = "rank", *, positions: np.ndarray | None = None) -> np.ndarray:
    """Candidates as rows in [0, 1]^d (see the module's docstring for the styles); `positions` from `levels`."""
    positions = levels(params, configs) if positions is None else positions
    columns = columns_of(params, style)
    if not columns:
        return np.zeros((len(positions), 1))
    return np.column_stack([table[positions[:, j]] for j, table in columns])


def level_steps(params: Sequence[Param], style: str = "rank") -> np.ndarray:
    """Per encoded column, the smallest distance between two of its coordinates (1 for a one-hot column)."""
    steps = []
    for _, table in columns_of(params, style):
        gaps = np.diff(np.unique(table))
        steps.append(float(gaps.min()) if len(gaps) else 1.0)
    return np.array(steps or [1.0])


def neighbours(positions: np.ndarray, i: int) -> np.ndarray:
    """Indices of the candidates that differ from candidate `i` in exactly one parameter."""
    return np.flatnonzero((positions != positions[i]).sum(axis=1) == 1)


def adjacent(positions: np.ndarray, i: int, ordinal: np.ndarray) -> np.ndarray:
    """Indices of the candidates one step from candidate `i`: one parameter changed, to a neighbouring value if it
    is ordinal (`ordinal[j]`), to any value if it is categorical."""
    diff = positions.astype(np.int64) - positions[i]
    changed = diff != 0
    one = changed.sum(axis=1) == 1
    step = np.abs(diff).max(axis=1) == 1
    categorical_change = (changed & ~ordinal[None, :]).any(axis=1)
    return np.flatnonzero(one & (step | categorical_change))


def hamming(positions: np.ndarray, i: int) -> np.ndarray:
    """Per candidate, in how many parameters it differs from candidate `i`."""
    return (positions != positions[i]).sum(axis=1)


def encoded_width(params: Sequence[Param], style: str = "rank") -> int:
    return max(1, len(columns_of(params, style)))


__all__ = ["ENCODINGS", "encode", "levels", "level_steps", "neighbours", "adjacent", "hamming", "encoded_width", "columns_of"]
