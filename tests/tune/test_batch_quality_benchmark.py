"""The batch-quality benchmark's arithmetic (benchmarks/batch_quality.py): the standard error of a difference between
the two widths is that of the seeds' paired differences, and one search through the replay executor reports a
fraction of the optimum in (0, 1] at either width."""

from __future__ import annotations

import importlib.util
import math
import statistics
import sys
from pathlib import Path

import pytest

from tracea_cli.tune.landscape import synthetic_landscape

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def bench():
    spec = importlib.util.spec_from_file_location("batch_quality_benchmark", ROOT / "benchmarks" / "batch_quality.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["batch_quality_benchmark"] = module
    spec.loader.exec_module(module)
    yield module
    del sys.modules["batch_quality_benchmark"]


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
