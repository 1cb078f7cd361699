"""How candidates become coordinates and neighbourhoods (tracea_cli/tune/strategies/encoding.py)."""

from __future__ import annotations

import numpy as np
import pytest

from tracea_cli.space import Param
from tracea_cli.tune.strategies import encoding

BLOCK = Param("block", tuple(range(16, 129, 16)))  # 16, 32, ..., 128: thread counts
TILE = Param("tile", (1, 2, 3, 4))  # counts stepping by one
POW2 = Param("vector", (1, 2, 4, 8))
KIND = Param("kind", ("a", "b", "c"), kind="categorical")


def configs_of(params, rows):
    return [dict(zip((p.name for p in params), row)) for row in rows]


def test_rank_encoding_is_ranks_one_hots_and_no_constants():
    params = (BLOCK, Param("fixed", (7,)), KIND)
    X = encoding.encode(params, configs_of(params, [(16, 7, "b"), (128, 7, "a"), (64, 7, "c")]), "rank")
    np.testing.assert_allclose(X, [[0, 0, 1, 0], [1, 1, 0, 0], [3 / 7, 0, 0, 1]])


def test_index_encoding_treats_categorical_values_as_positions():
    X = encoding.encode((KIND,), configs_of((KIND,), [("a",), ("c",), ("b",)]), "index")
    np.testing.assert_allclose(X, [[0.0], [1.0], [0.5]])


def test_alignment_counts_factors_of_two_where_the_rank_does_not():
    params = (BLOCK, TILE, POW2)
    rows = [(48, 3, 8), (64, 4, 1), (128, 2, 2)]
    X = encoding.encode(params, configs_of(params, rows), "rank+align")
    # block: rank, then 2-adic valuation / 7 (48 = 16 x 3 -> 4, 64 -> 6, 128 -> 7); tile: rank, valuation / 2;
    # vector: powers of two only, so no second column (the valuation would be the rank again)
    np.testing.assert_allclose(X[:, 1], [4 / 7, 6 / 7, 1.0])
    np.testing.assert_allclose(X[:, 3], [0.0, 1.0, 0.5])
    assert X.shape[1] == 5
    stepped = encoding.encode(params, configs_of(params, rows), "rank+align-step")
    assert stepped.shape[1] == 4  # the tile counts step by one: no alignment column for them
    np.testing.assert_allclose(stepped[:, 1], X[:, 1])


def test_zero_counts_as_aligned_to_everything():
    unroll = Param("unroll", (0, 1, 2, 3))
    X = encoding.encode((unroll,), configs_of((unroll,), [(0,), (1,), (2,), (3,)]), "rank+align")
    np.testing.assert_allclose(X[:, 1], [1.0, 0.0, 1.0, 0.0])


def test_every_encoding_lies_in_the_unit_cube_and_steps_match():
    params = (BLOCK, TILE, POW2, KIND)
    rows = [(b, t, v, k) for b in BLOCK.values for t in TILE.values for v in POW2.values for k in KIND.values]
    for style in encoding.ENCODINGS:
        X = encoding.encode(params, configs_of(params, rows), style)
        assert X.min() >= 0 and X.max() <= 1
        steps = encoding.level_steps(params, style)
        assert len(steps) == X.shape[1] == encoding.encoded_width(params, style)
        for j in range(X.shape[1]):
            gaps = np.diff(np.unique(X[:, j]))
            assert gaps.min() == pytest.approx(steps[j])
    with pytest.raises(ValueError, match="unknown encoding"):
        encoding.encode(params, configs_of(params, rows), "onehot")


def test_neighbourhoods_change_one_parameter_adjacent_ones_by_one_step():
    params = (TILE, KIND)
    rows = [(t, k) for t in TILE.values for k in KIND.values]
    positions = encoding.levels(params, configs_of(params, rows))
    centre = rows.index((2, "a"))
    near = {rows[i] for i in encoding.neighbours(positions, centre)}
    assert near == {(1, "a"), (3, "a"), (4, "a"), (2, "b"), (2, "c")}
    ordinal = np.array([True, False])
    adjacent = {rows[i] for i in encoding.adjacent(positions, centre, ordinal)}
    assert adjacent == {(1, "a"), (3, "a"), (2, "b"), (2, "c")}  # a category may change to any other
    assert list(encoding.hamming(positions, centre)[[rows.index((4, "c")), centre]]) == [2, 0]
