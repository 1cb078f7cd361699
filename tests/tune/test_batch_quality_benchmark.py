"""The batch-quality benchmark's arithmetic (benchmarks/batch_quality.py): the standard error of a difference between
the two widths is that of the seeds' paired differences, and one search through the replay executor reports a
fraction of the optimum in (0, 1] at either width."""

from __future__ import annotations

import math
import statistics

import pytest
from benchmark_modules import loaded

from tracea_cli.tune.landscape import synthetic_landscape


@pytest.fixture(scope="module")
def bench():
    with loaded("batch_quality", "batch_quality_benchmark") as module:
        yield module


def test_the_standard_error_is_that_of_the_paired_differences(bench):
    one, many = [0.6, 0.9, 1.0, 0.7], [0.7, 0.9, 0.8, 0.7]  # differences 0.1, 0, -0.2, 0
    assert bench.paired_se(one, many) == pytest.approx(statistics.stdev([0.1, 0.0, -0.2, 0.0]) / 2)
    assert bench.paired_se([0.5, 0.9], [0.5, 0.9]) == 0.0  # the same outcomes seed by seed: no doubt at all
    assert math.isnan(bench.paired_se([0.5], [0.4]))


@pytest.mark.parametrize("workers", [1, 4])
def test_a_search_reports_a_fraction_of_the_optimum(bench, workers):
    landscape = synthetic_landscape(1, small=True)
    fraction, wall_s = bench.search(landscape, workers=workers, budget=12, seed=0)
    assert 0 < fraction <= 1 and wall_s > 0
