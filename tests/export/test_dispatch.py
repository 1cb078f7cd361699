"""Which shapes a tuned variant serves: read from the search space's rules, per dimension."""

from __future__ import annotations

from dataclasses import replace

import pytest

from tracea_cli.errors import UsageError
from tracea_cli.export.dispatch import INT_MAX, valid_for
from tracea_cli.ops.gemm.problem import GemmProblem
from tracea_cli.space import Param, SearchSpace

CONFIG = {"vec": 8, "tile": 64}


def space_at(problem: GemmProblem) -> SearchSpace:
    """Rules of the kinds the GEMM spaces have: a row alignment, a tile no larger than the problem, a bounded size."""
    def aligned(c):
        return None if problem.k % c["vec"] == 0 and problem.n % c["vec"] == 0 else "rows not aligned"

    def tile_fits(c):
        return None if problem.m > c["tile"] // 2 else "tile larger than the problem"

    def bounded(c):
        return None if problem.n <= 3000 else "too wide"

    return SearchSpace((Param("vec", (1, 8)), Param("tile", (32, 64))), (aligned, tile_fits, bounded))


def resized(problem: GemmProblem, name: str, value: int) -> GemmProblem:
    return replace(problem, **{name: value})


def why_invalid_at(problem: GemmProblem) -> str | None:
    return space_at(problem).why_invalid(CONFIG)


def test_sizes_are_read_from_the_rules():
    v = valid_for(GemmProblem(512, 512, 1024), CONFIG, resized, why_invalid_at)
    assert v == {"m_min": 33, "m_max": INT_MAX, "m_multiple": 1,
                 "n_min": 8, "n_max": 3000, "n_multiple": 8,
                 "k_min": 8, "k_max": INT_MAX, "k_multiple": 8}


def test_every_size_inside_the_intervals_is_valid_and_the_edges_are_tight():
    problem = GemmProblem(512, 512, 1024)
    v = valid_for(problem, CONFIG, resized, why_invalid_at)

    def ok(**dims):
        return why_invalid_at(GemmProblem(**{**problem.sizes(), **dims})) is None

    assert all(ok(m=m) for m in range(v["m_min"], 2000))
    assert all(ok(n=n) for n in range(v["n_min"], v["n_max"] + 1, v["n_multiple"]))
    assert not ok(m=v["m_min"] - 1) and not ok(n=v["n_max"] + v["n_multiple"]) and not ok(k=v["k_min"] + 1)


def test_a_configuration_invalid_at_its_own_shape_is_refused():
    with pytest.raises(ValueError):
        valid_for(GemmProblem(512, 500, 1024), CONFIG, resized, why_invalid_at)


def test_sizes_the_op_refuses_are_outside_the_intervals():
    # `resized` raising a TraceaError (the op refusing a size, as GemmProblem does above its limit) counts as invalid
    def refusing(problem: GemmProblem, name: str, value: int) -> GemmProblem:
        if name == "m" and value > 4096:
            raise UsageError(f"m {value} is too large.")
        return resized(problem, name, value)

    v = valid_for(GemmProblem(512, 512, 1024), CONFIG, refusing, why_invalid_at)
    assert (v["m_min"], v["m_max"], v["m_multiple"]) == (33, 4096, 1)
    assert v["k_max"] == INT_MAX  # the other sizes are asked as before
