"""Search strategies: the shared interface, random and grid bookkeeping, and the Bayesian search on landscapes with
known optima, failures and invalid regions (synthetic everywhere; the recorded ones where ../shared has them)."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from tracea_cli.errors import UsageError
from tracea_cli.space import Candidates, Param
from tracea_cli.tune.landscape import Landscape, load_landscape, synthetic_landscape
from tracea_cli.tune.strategies import STRATEGY_NAMES, Strategy, make_strategy
from tracea_cli.tune.strategies.bayes import BayesSearch, BayesSettings, encode

LANDSCAPES = Path(__file__).resolve().parents[2].parent / "shared" / "landscapes"


def small_candidates(n: int = 12) -> Candidates:
    param = Param("tile", tuple(range(1, n + 1)))
    return Candidates.from_configs([param], [{"tile": t} for t in param.values])


def run(strategy: Strategy, landscape: Landscape, budget: int, batch: int = 1) -> list[int]:
    """Drive a strategy like the tuner does; returns the proposed indices in order."""
    order: list[int] = []
    while len(order) < budget:
        proposed = strategy.ask(min(batch, budget - len(order)))
        if not proposed:
            break
        for index in proposed:
            strategy.tell(index, landscape.times[index])
        order.extend(proposed)
    return order


def fraction(landscape: Landscape, order: list[int]) -> float:
    best = min(landscape.times[i] for i in order)
    return landscape.optimum / best if math.isfinite(best) else 0.0


# -- the interface ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", STRATEGY_NAMES)
def test_every_strategy_has_the_interface_and_never_repeats(name):
    landscape = synthetic_landscape(3, small=True)
    strategy = make_strategy(name, landscape.candidates, seed=1)
    assert isinstance(strategy, Strategy) and strategy.name == name
    order = run(strategy, landscape, budget=len(landscape) + 5, batch=4)
    assert sorted(order) == list(range(len(landscape)))  # every candidate once, failures included
    assert strategy.ask(3) == []


@pytest.mark.parametrize("name", STRATEGY_NAMES)
def test_observed_candidates_are_never_proposed(name):
    landscape = synthetic_landscape(1, small=True)
    strategy = make_strategy(name, landscape.candidates, seed=0)
    seeded = [0, 5, 7, len(landscape) - 1]
    strategy.observe(5, landscape.times[5])
    strategy.observe(0, math.inf)
    strategy.observe(7, landscape.times[7])
    strategy.observe(len(landscape) - 1, landscape.times[-1])
    order = run(strategy, landscape, budget=len(landscape))
    assert not set(order) & set(seeded)
    assert len(order) == len(landscape) - len(seeded)


@pytest.mark.parametrize("name", STRATEGY_NAMES)
def test_same_seed_same_proposals(name):
    landscape = synthetic_landscape(0, small=True)
    a = run(make_strategy(name, landscape.candidates, seed=4), landscape, budget=30, batch=3)
    b = run(make_strategy(name, landscape.candidates, seed=4), landscape, budget=30, batch=3)
    assert a == b


def test_unknown_strategy_and_bad_seed_are_usage_errors():
    with pytest.raises(UsageError, match="unknown search strategy 'anneal'"):
        make_strategy("anneal", small_candidates(), seed=0)
    with pytest.raises(UsageError, match="seed"):
        make_strategy("random", small_candidates(), seed=-1)


def test_a_cost_told_twice_or_out_of_range_is_refused():
    strategy = make_strategy("random", small_candidates(), seed=0)
    (index,) = strategy.ask(1)
    strategy.tell(index, 1.0)
    with pytest.raises(ValueError, match="already has a cost"):
        strategy.tell(index, 2.0)
    with pytest.raises(IndexError):
        strategy.observe(99, 1.0)
    other = (index + 1) % 12
    strategy.observe(other, math.inf)  # a cache may hold one configuration twice: the better result stands
    strategy.observe(other, 2.5)
    strategy.observe(other, 4.0)
    assert strategy.costs[other] == 2.5
    with pytest.raises(ValueError, match="cost"):
        strategy.observe(0, float("nan"))


def test_random_samples_without_replacement_and_depends_on_the_seed():
    candidates = small_candidates(50)
    a = make_strategy("random", candidates, seed=0).ask(50)
    b = make_strategy("random", candidates, seed=1).ask(50)
    assert sorted(a) == sorted(b) == list(range(50))
    assert a != b and a != list(range(50))


def test_grid_walks_the_enumeration_in_order_skipping_what_is_known():
    strategy = make_strategy("grid", small_candidates(8), seed=0)
    strategy.observe(2, 1.0)
    assert strategy.ask(3) == [0, 1, 3]
    assert strategy.ask(10) == [4, 5, 6, 7]
    assert strategy.ask(1) == []


# -- the Bayesian search ------------------------------------------------------------------------------------------


def test_encoding_ranks_ordinals_one_hots_categoricals_and_drops_constants():
    params = (
        Param("block", (1, 2, 4, 128)),
        Param("fixed", (15,)),
        Param("method", ("a", "b", "c"), kind="categorical"),
        Param("flag", ("off", "on"), kind="categorical"),
    )
    configs = [
        {"block": 1, "fixed": 15, "method": "b", "flag": "on"},
        {"block": 128, "fixed": 15, "method": "c", "flag": "off"},
        {"block": 4, "fixed": 15, "method": "a", "flag": "off"},
    ]
    X = encode(params, configs)
    expected = np.array(
        [
            [0.0, 0, 1, 0, 1],
            [1.0, 0, 0, 1, 0],
            [2 / 3, 1, 0, 0, 0],
        ]
    )
    np.testing.assert_allclose(X, expected)


def test_bayes_batches_are_distinct_and_spread_while_results_are_pending():
    landscape = synthetic_landscape(4, small=True)
    strategy = make_strategy("bayes", landscape.candidates, seed=0)
    run(strategy, landscape, budget=14)  # past the space-filling start
    batch = strategy.ask(6)
    assert len(set(batch)) == 6
    assert not set(batch) & set(strategy.costs)
    later = strategy.ask(2)  # asked again before telling: the first batch is still in flight
    assert not set(later) & set(batch)


def test_bayes_keeps_searching_when_everything_fails():
    landscape = synthetic_landscape(2, small=True)
    failing = Landscape(
        source="all-failing", kernel="", device="", unit="ms", params=landscape.params, configs=landscape.configs,
        times=(math.inf,) * len(landscape), failures=("RuntimeFailedConfig",) * len(landscape),
    )
    strategy = make_strategy("bayes", failing.candidates, seed=0)
    order = run(strategy, failing, budget=25, batch=2)
    assert len(order) == len(set(order)) == 25


def test_bayes_finds_the_optimum_of_small_synthetic_spaces():
    # Six different random spaces, budget a quarter of each space (at least 20): the model must home in.
    scores = []
    for seed in range(6):
        landscape = synthetic_landscape(seed, small=True)
        budget = max(20, len(landscape) // 4)
        scores.append(fraction(landscape, run(make_strategy("bayes", landscape.candidates, seed=seed), landscape, budget)))
    assert np.mean(scores) >= 0.97, scores


def test_bayes_beats_random_on_a_larger_synthetic_space():
    # Budget 40 (it was 30 until 2026-12-07): the defaults since then start with 10 random candidates and score the
    # global moves with a smooth second model, which on this smooth synthetic bowl is level with random search at
    # 30 (0.81 against 0.84 on these seeds; the previous defaults 0.96) and ahead from 40 on (docs/search.md).
    landscape = synthetic_landscape(1)  # ~600 configurations, 18% failing
    bayes, rand = [], []
    for seed in range(4):
        bayes.append(fraction(landscape, run(make_strategy("bayes", landscape.candidates, seed=seed), landscape, 40)))
        rand.append(fraction(landscape, run(make_strategy("random", landscape.candidates, seed=seed), landscape, 40)))
    assert np.mean(bayes) > np.mean(rand) + 0.05, (bayes, rand)
    assert np.mean(bayes) >= 0.9, bayes


def test_bayes_avoids_a_failing_region_better_than_random():
    landscape = synthetic_landscape(5)  # 21% of its configurations fail
    wasted = {"bayes": 0, "random": 0}
    for name in wasted:
        for seed in range(3):
            order = run(make_strategy(name, landscape.candidates, seed=seed), landscape, 40)
            wasted[name] += sum(1 for i in order if landscape.failures[i] is not None)
    assert wasted["bayes"] < wasted["random"], wasted


def test_bayes_subsamples_large_spaces_but_keeps_the_incumbents_neighbours():
    landscape = synthetic_landscape(0)  # ~3,200 configurations
    strategy = BayesSearch(landscape.candidates, seed=0, settings=BayesSettings(max_pool=1000, subsample=300))
    order = run(strategy, landscape, 40)
    assert len(set(order)) == 40
    pool = strategy._pool()
    best = min(strategy.costs, key=strategy.costs.get)
    neighbours = [
        i for i, c in enumerate(landscape.configs)
        if i not in strategy.proposed and sum(c[k] != landscape.configs[best][k] for k in c) == 1
    ]
    assert neighbours and set(neighbours) <= set(pool.tolist())
    assert len(pool) <= 300 + 5 * sum(len(p.values) for p in landscape.params)  # the sample plus 5 neighbourhoods


@pytest.mark.parametrize("nu", [2.5, 1.5])
def test_the_incremental_posterior_equals_a_fresh_gaussian_process(nu):
    from sklearn.gaussian_process import GaussianProcessRegressor
    from sklearn.gaussian_process.kernels import ConstantKernel, Matern, WhiteKernel

    from tracea_cli.tune.strategies.gp import Posterior

    rng = np.random.default_rng(0)
    X = rng.random((300, 4))
    y = rng.standard_normal(40)
    kernel = ConstantKernel(1.7) * Matern(length_scale=[0.3, 0.5, 1.0, 2.0], nu=nu) + WhiteKernel(0.05)
    train = [int(i) for i in rng.choice(300, 40, replace=False)]
    reference = GaussianProcessRegressor(kernel=kernel, optimizer=None, alpha=1e-8).fit(X[train], y)
    for rows in (None, np.sort(rng.choice(300, 100, replace=False))):  # every row tracked, or 100 (others afresh)
        gp = Posterior(kernel, X, rows=rows)
        gp.add(train[:25])
        mark = gp.mark()
        gp.add([i for i in range(300) if i not in train][:7])  # believed points, then taken back
        gp.restore(mark)
        gp.add(train[25:])
        at = np.arange(300)
        mu, sd = reference.predict(X[at], return_std=True)
        mean, std = gp.predict(at, y)
        np.testing.assert_allclose(mean, mu, atol=1e-9)
        np.testing.assert_allclose(std, np.sqrt(np.maximum(sd**2 - 0.05, 0)), atol=1e-7)  # without noise


# -- the recorded landscapes --------------------------------------------------------------------------------------


@pytest.mark.skipif(not LANDSCAPES.is_dir(), reason=f"recorded landscapes not present at {LANDSCAPES}")
@pytest.mark.parametrize("name", ["convolution_RTX_3090.json", "pnpoly_RTX_3090.json"])
def test_bayes_beats_random_early_on_the_recorded_landscapes(name):
    landscape = load_landscape(LANDSCAPES / name)
    bayes = [fraction(landscape, run(make_strategy("bayes", landscape.candidates, seed=s), landscape, 25)) for s in range(2)]
    rand = [fraction(landscape, run(make_strategy("random", landscape.candidates, seed=s), landscape, 25)) for s in range(2)]
    assert min(bayes) >= 0.8 and np.mean(bayes) > np.mean(rand), (bayes, rand)
