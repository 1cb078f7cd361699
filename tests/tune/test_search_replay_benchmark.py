"""The replay benchmark's bookkeeping (benchmarks/replay.py): cached traces are reused only by the same code and
budget, and a baseline run to a shorter budget leaves its later columns empty instead of inventing them."""

from __future__ import annotations

import math

import numpy as np
import pytest
from benchmark_modules import loaded

from tracea_cli.tune.landscape import synthetic_landscape


@pytest.fixture(scope="module")
def bench():
    with loaded("replay", "replay_benchmark") as module:
        yield module


def test_a_cached_trace_is_reused_and_a_longer_one_serves_a_shorter_budget(bench, tmp_path, monkeypatch):
    path = tmp_path / "synthetic.json"
    monkeypatch.setitem(bench._LOADED, path, synthetic_landscape(1, small=True))
    _, _, _, _, first, _ = bench._trace((path, "random", 3, 30, 1, tmp_path / "cache"))
    saved = list((tmp_path / "cache").rglob("*.npy"))
    assert len(saved) == 1 and "random-" + bench.code_version("random") in str(saved[0])

    def refuse(*args, **kwargs):
        raise AssertionError("ran again instead of reading the cache")

    monkeypatch.setattr(bench, "search_trace", refuse)
    _, _, _, _, again, _ = bench._trace((path, "random", 3, 30, 1, tmp_path / "cache"))
    _, _, _, _, shorter, _ = bench._trace((path, "random", 3, 20, 1, tmp_path / "cache"))
    np.testing.assert_array_equal(first, again)
    np.testing.assert_array_equal(first[:20], shorter)
    with pytest.raises(AssertionError, match="instead of reading"):  # another seed is not in the cache
        bench._trace((path, "random", 4, 20, 1, tmp_path / "cache"))


def test_the_code_version_follows_the_strategy_sources(bench):
    versions = {name: bench.code_version(name) for name in ("random", "gp-ei", "bayes", "vns", "grid")}
    assert len(set(versions.values())) == len(versions)  # grid, not listed, hashes every strategy module


def test_budgets_beyond_a_shorter_run_are_empty_and_comparisons_skip_them(bench):
    short = [np.linspace(0.5, 1.0, 100)] * 2
    means = bench._means(short, (20, 60, 100, 200))
    assert means[:3] == pytest.approx([short[0][19], short[0][59], short[0][99]]) and math.isnan(means[3])
    assert bench._cell(means[3], math.nan) == "–"
    kept, other = bench._known(means, [0.1, 0.2, 0.3, 0.4])
    assert kept == means[:3] and other == [0.1, 0.2, 0.3]
