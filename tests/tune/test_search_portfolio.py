"""The default search's moves and settings (tracea_cli/tune/strategies/bayes.py) and the plain GP baseline, on small
synthetic landscapes with known optima, failures and invalid regions."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest

from tracea_cli.tune.landscape import Landscape, synthetic_landscape
from tracea_cli.tune.strategies import encoding, make_strategy
from tracea_cli.tune.strategies.bayes import BayesSearch, BayesSettings


def drive(strategy, landscape: Landscape, budget: int, batch: int = 1) -> list[int]:
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


def test_neighbourhood_moves_change_one_parameter_of_a_best_result():
    landscape = synthetic_landscape(1)
    strategy = BayesSearch(landscape.candidates, seed=0, settings=BayesSettings(local=1.0, initial=10))
    positions = encoding.levels(landscape.params, landscape.configs)
    order = drive(strategy, landscape, 10)
    for _ in range(20):
        ranked = strategy._ranked()[: strategy.settings.incumbents]
        (index,) = strategy.ask(1)
        assert any(encoding.hamming(positions, i)[index] == 1 for i in ranked)
        strategy.tell(index, landscape.times[index])
        order.append(index)
    assert len(set(order)) == len(order)


def test_a_wider_radius_is_walked_one_parameter_first_then_two_once_stale():
    landscape = synthetic_landscape(1)
    positions = encoding.levels(landscape.params, landscape.configs)
    settings = BayesSettings(local=1.0, initial=10, radius=2, escalate=3, diverse=0)  # the radius alone
    strategy = BayesSearch(landscape.candidates, seed=0, settings=settings)
    drive(strategy, landscape, 10)
    distances = []
    for _ in range(30):
        best = strategy._ranked()[0]
        stale = strategy._stale
        near = set(encoding.neighbours(positions, best).tolist()) - strategy.proposed
        (index,) = strategy.ask(1)
        distance = int(encoding.hamming(positions, best)[index])
        if near and stale < settings.escalate:  # one parameter at a time while that is fresh and not spent
            assert distance == 1
        assert distance <= 2
        distances.append(distance)
        strategy.tell(index, landscape.times[index])
    assert 2 in distances  # stale, the search reaches two parameters away


def test_without_escalation_two_parameters_wait_until_one_is_spent():
    landscape = synthetic_landscape(1)
    positions = encoding.levels(landscape.params, landscape.configs)
    strategy = BayesSearch(landscape.candidates, seed=0, settings=BayesSettings(local=1.0, initial=10, radius=2))
    drive(strategy, landscape, 10)
    for _ in range(20):
        best = strategy._ranked()[0]
        near = set(encoding.neighbours(positions, best).tolist()) - strategy.proposed
        (index,) = strategy.ask(1)
        assert int(encoding.hamming(positions, best)[index]) == (1 if near else 2)
        strategy.tell(index, landscape.times[index])


def test_a_radius_below_one_is_refused():
    with pytest.raises(ValueError, match="radius"):
        BayesSettings(radius=0)
    with pytest.raises(ValueError, match="escalate"):
        BayesSettings(escalate=-1)


def test_adjacent_moves_come_before_any_other_change_of_one_parameter():
    landscape = synthetic_landscape(4)
    settings = BayesSettings(local=1.0, local_moves="adjacent", initial=8)
    strategy = BayesSearch(landscape.candidates, seed=1, settings=settings)
    drive(strategy, landscape, 8)
    best = strategy._ranked()[0]
    ordinal = np.array([p.kind == "ordinal" for p in landscape.params])
    positions = encoding.levels(landscape.params, landscape.configs)
    adjacent = set(encoding.adjacent(positions, best, ordinal).tolist()) - strategy.proposed
    (index,) = strategy.ask(1)
    if adjacent:  # the best result's next move is one step away, as long as such a step is left
        assert index in adjacent


def test_a_batch_setting_proposes_from_one_model_state_like_asking_for_a_batch():
    landscape = synthetic_landscape(2, small=True)
    # a start of 12 ends where a batch of four does, so both see the same results when the model first proposes
    batched = BayesSettings(batch=4, initial=12)
    queued = drive(BayesSearch(landscape.candidates, seed=3, settings=batched), landscape, 36)
    asked = drive(BayesSearch(landscape.candidates, seed=3, settings=BayesSettings(initial=12)), landscape, 36, batch=4)
    assert queued == asked


def test_a_candidate_observed_while_queued_is_not_proposed_again():
    landscape = synthetic_landscape(2, small=True)
    # a start of 8, then two whole batches of 6: the queue is empty after 20 results, and full after one more ask
    strategy = BayesSearch(landscape.candidates, seed=0, settings=BayesSettings(batch=6, initial=8))
    drive(strategy, landscape, 20)
    assert not strategy._queue
    first = strategy.ask(1)
    waiting = list(strategy._queue)
    assert len(waiting) == 5
    strategy.observe(waiting[0], landscape.times[waiting[0]])  # known from elsewhere meanwhile
    later = strategy.ask(5)
    assert waiting[0] not in later and not set(first) & set(later) and len(set(later)) == 5


@pytest.mark.parametrize(
    "settings",
    [
        BayesSettings(nu=1.5, length=1.5),
        BayesSettings(acquisition="lcb", exploration=2.0),
        BayesSettings(encoding="rank+align", max_length=2.0),
        BayesSettings(design="random", initial=12),
        BayesSettings(failure=0.405, local=0.5),
        BayesSettings(global_length=1.5, design="random", initial=10),
        BayesSettings(global_length=0.75),
    ],
    ids=["fixed-length", "lcb", "align-capped", "random-start", "failure-margin-local", "two-models-random-start",
         "two-models-shorter"],
)
def test_every_setting_the_cross_validation_tries_finds_small_optima(settings):
    # a working search, not a tuned one: the cross-validation tells them apart on the recorded landscapes
    scores = []
    for seed in range(4):
        landscape = synthetic_landscape(seed, small=True)
        budget = max(20, len(landscape) // 4)
        scores.append(fraction(landscape, drive(BayesSearch(landscape.candidates, seed=seed, settings=settings),
                                                landscape, budget)))
    assert np.mean(scores) >= 0.9 and min(scores) >= 0.75, scores


def test_a_fixed_length_scale_stays_fixed_and_fitted_ones_stay_within_their_bounds():
    landscape = synthetic_landscape(1)
    fixed = BayesSearch(landscape.candidates, seed=0, settings=BayesSettings(nu=1.5, length=1.5))
    drive(fixed, landscape, 30)
    np.testing.assert_allclose(fixed._fitted.kernel.k1.k2.length_scale, 1.5)
    capped = BayesSearch(landscape.candidates, seed=0, settings=BayesSettings(max_length=2.0))
    drive(capped, landscape, 30)
    scales = np.atleast_1d(capped._fitted.kernel.k1.k2.length_scale)
    lower = 0.5 * encoding.level_steps(landscape.params, "rank")
    assert np.all(scales <= 2.0 + 1e-9) and np.all(scales >= lower - 1e-9)


def test_failures_enter_the_model_at_the_worst_time_plus_the_margin():
    landscape = synthetic_landscape(5)
    strategy = BayesSearch(landscape.candidates, seed=0, settings=BayesSettings(failure=0.405, clip=1.0))
    order = drive(strategy, landscape, 30)
    failed = [i for i in order if not math.isfinite(landscape.times[i])]
    assert failed
    y = strategy._targets(order)
    worst = max(math.log(landscape.times[i]) for i in order if math.isfinite(landscape.times[i]))
    assert all(y[order.index(i)] == pytest.approx(worst + 0.405) for i in failed)


def test_hyperparameters_are_fitted_on_a_bounded_subset(monkeypatch):
    import tracea_cli.tune.strategies.bayes as bayes

    sizes = []
    real = bayes.fit_kernel

    def recording(X, y, **kwargs):
        sizes.append(len(X))
        return real(X, y, **kwargs)

    monkeypatch.setattr(bayes, "fit_kernel", recording)
    landscape = synthetic_landscape(1)
    drive(BayesSearch(landscape.candidates, seed=0, settings=BayesSettings(fit_max=25)), landscape, 45)
    assert sizes and max(sizes) == 25 and sizes[0] < 25


def test_the_plain_gp_baseline_encodes_by_position_and_finds_small_optima():
    from tracea_cli.tune.strategies.gp_ei import INITIAL, PlainGPSearch

    landscape = synthetic_landscape(0, small=True)
    strategy = make_strategy("gp-ei", landscape.candidates, seed=0)
    assert isinstance(strategy, PlainGPSearch)
    np.testing.assert_allclose(strategy._X, encoding.encode(landscape.params, landscape.configs, "index"))
    order = drive(strategy, landscape, 40)
    assert len(set(order)) == 40 and INITIAL < 40
    assert fraction(landscape, order) >= 0.9


def test_clipped_targets_hold_the_slow_tail_at_the_quantile_and_failures_above_it():
    landscape = synthetic_landscape(5)
    strategy = BayesSearch(landscape.candidates, seed=0, settings=BayesSettings(clip=0.5, failure=0.405))
    order = drive(strategy, landscape, 30)
    y = strategy._targets(order)
    logs = np.array([math.log(landscape.times[i]) for i in order if math.isfinite(landscape.times[i])])
    cap = np.quantile(logs, 0.5)
    ok = [k for k, i in enumerate(order) if math.isfinite(landscape.times[i])]
    np.testing.assert_allclose(y[ok], np.minimum(logs, cap))
    failed = [k for k, i in enumerate(order) if not math.isfinite(landscape.times[i])]
    assert failed and np.all(y[failed] == pytest.approx(cap + 0.405))


def test_the_credit_portfolio_counts_each_model_proposal_once_by_its_kind():
    landscape = synthetic_landscape(1)
    settings = BayesSettings(portfolio="credit", initial=10)
    strategy = BayesSearch(landscape.candidates, seed=0, settings=settings)
    order = drive(strategy, landscape, 40)
    credit = strategy._credit
    assert sum(won + lost for won, lost in credit.values()) == 40 - 10  # every proposal after the start, once
    assert all(won + lost > 0 for won, lost in credit.values())  # both kinds were tried
    assert not strategy._kind  # nothing left untold
    again = drive(BayesSearch(landscape.candidates, seed=0, settings=settings), landscape, 40)
    assert order == again  # the sampling draws from the seeded generator


def test_the_credit_portfolio_turns_to_the_kind_of_move_that_improves():
    landscape = synthetic_landscape(1)
    strategy = BayesSearch(landscape.candidates, seed=0, settings=BayesSettings(portfolio="credit"))
    strategy._credit = {"local": [20, 5], "global": [0, 25]}
    turns = [strategy._local_turn() for _ in range(200)]
    assert np.mean(turns) > 0.95
    strategy._credit = {"local": [0, 25], "global": [20, 5]}
    assert np.mean([strategy._local_turn() for _ in range(200)]) < 0.05


@pytest.mark.parametrize(
    "kwargs, words",
    [
        ({"portfolio": "sometimes"}, "portfolio must be one of"),
        ({"clip": 0.0}, "clip must lie in (0.0, 1.0]"),
        ({"local": 1.5}, "local must lie in [0.0, 1.0]"),
        ({"encoding": "onehot"}, "encoding must be one of"),
        ({"batch": 0}, "batch must be at least 1"),
        ({"random": 1.5}, "random must lie in [0.0, 1.0]"),
        ({"acquisition": "ucb"}, "acquisition must be one of"),
        ({"ts_pool": 1}, "ts_pool must be at least 2"),
        ({"global_length": -1.0}, "global_length must be a finite length >= 0"),
        ({"global_length": math.nan}, "global_length must be a finite length >= 0"),
        ({"predictive": 1.5}, "predictive must lie in [0.0, 1.0]"),
        ({"diverse": -1}, "diverse must be at least 0"),
        ({"local_acquisition": "ei"}, "local_acquisition must be one of"),
        ({"predictive": -0.1}, "predictive must lie in [0.0, 1.0]"),
        ({"unpredictive": "local"}, "unpredictive must be one of"),
        ({"acquisition": "portfolio"}, "acquisition must be one of"),
        ({"floor": -1}, "floor must be at least 0"),
        ({"floor": 1, "design": "lhs"}, "floor needs the random start"),
    ],
)
def test_bad_settings_are_refused_with_one_sentence(kwargs, words):
    with pytest.raises(ValueError) as error:
        BayesSettings(**kwargs)
    assert words in str(error.value) and "\n" not in str(error.value)


def test_random_turns_take_the_set_share_after_the_start_and_stop_when_told():
    landscape = synthetic_landscape(1)
    strategy = BayesSearch(landscape.candidates, seed=0, settings=BayesSettings(random=1 / 3, initial=10))
    turns = [strategy._random_turn() for _ in range(30)]
    assert not turns[0] and sum(turns) == 10  # every third turn, the first one the model's
    limited = BayesSearch(landscape.candidates, seed=0, settings=BayesSettings(random=0.5, random_until=1.0,
                                                                              initial=10))
    turns = [limited._random_turn() for _ in range(30)]
    assert sum(turns[:10]) == 5 and not any(turns[10:])  # half of the first `initial` turns, none after


def test_random_turns_propose_unproposed_candidates_the_model_does_not_choose():
    landscape = synthetic_landscape(1)
    settings = BayesSettings(random=0.5, initial=10)
    strategy = BayesSearch(landscape.candidates, seed=0, settings=settings)
    order = drive(strategy, landscape, 40)
    assert len(set(order)) == 40
    # the model's proposals are tagged with their kind; the random ones are not
    plain = drive(BayesSearch(landscape.candidates, seed=0, settings=BayesSettings(initial=10)), landscape, 40)
    assert order[:10] == plain[:10] and order != plain  # the same start, then a different search
    assert order == drive(BayesSearch(landscape.candidates, seed=0, settings=settings), landscape, 40)


def test_a_thompson_draw_has_the_posterior_mean_and_covariance():
    from sklearn.gaussian_process import GaussianProcessRegressor
    from sklearn.gaussian_process.kernels import ConstantKernel, Matern, WhiteKernel

    from tracea_cli.tune.strategies.gp import Posterior

    rng = np.random.default_rng(1)
    X = rng.random((60, 3))
    y = rng.standard_normal(12)
    kernel = ConstantKernel(1.3) * Matern(length_scale=[0.4, 0.7, 1.0], nu=1.5) + WhiteKernel(0.05)
    train = [int(i) for i in rng.choice(60, 12, replace=False)]
    gp = Posterior(kernel, X)
    gp.add(train)
    at = np.array([i for i in range(60) if i not in train][:5])
    draws = np.array([gp.sample(at, y, rng) for _ in range(20000)])
    reference = GaussianProcessRegressor(kernel=kernel, optimizer=None, alpha=1e-8).fit(X[train], y)
    mu, cov = reference.predict(X[at], return_cov=True)
    cov -= 0.05 * np.eye(len(at))  # the signal's, without the noise
    np.testing.assert_allclose(draws.mean(axis=0), mu, atol=0.03)
    np.testing.assert_allclose(np.cov(draws.T), cov, atol=0.03)


@pytest.mark.parametrize("acquisition", ["ts", "ts-global"])
def test_thompson_sampling_finds_small_optima_and_is_seeded(acquisition):
    scores = []
    for seed in range(4):
        landscape = synthetic_landscape(seed, small=True)
        budget = max(20, len(landscape) // 4)
        settings = BayesSettings(acquisition=acquisition, ts_pool=50)
        order = drive(BayesSearch(landscape.candidates, seed=seed, settings=settings), landscape, budget)
        assert len(set(order)) == len(order)
        scores.append(fraction(landscape, order))
        if seed == 0:
            again = drive(BayesSearch(landscape.candidates, seed=seed, settings=settings), landscape, budget)
            assert order == again
    assert np.mean(scores) >= 0.9 and min(scores) >= 0.75, scores


# -- two surrogates (`global_length`) -------------------------------------------------------------------------------


def test_global_moves_are_scored_by_the_smooth_model_and_local_ones_by_the_fitted_one(monkeypatch):
    landscape = synthetic_landscape(1)
    strategy = BayesSearch(landscape.candidates, seed=0, settings=BayesSettings(global_length=1.5, local=0.5))
    scored_by = []
    real_pool = BayesSearch._pool

    def recording(self, gp=None):
        scored_by.append("smooth" if gp is self._smooth.gp else "fitted")
        return real_pool(self, gp)

    monkeypatch.setattr(BayesSearch, "_pool", recording)
    drive(strategy, landscape, 40)
    assert scored_by and set(scored_by) == {"smooth"}  # only global moves score a pool, all on the smooth model
    np.testing.assert_allclose(strategy._smooth.kernel.k1.k2.length_scale, 1.5)
    fitted = np.atleast_1d(strategy._fitted.kernel.k1.k2.length_scale)
    assert not np.allclose(fitted, 1.5)  # the local moves' model keeps its own, fitted length scales
    assert strategy._fitted.gp is not None and len(strategy._fitted.gp.train) >= 30


def test_without_a_global_length_there_is_one_model():
    landscape = synthetic_landscape(1)
    strategy = BayesSearch(landscape.candidates, seed=0, settings=BayesSettings(global_length=0.0))
    drive(strategy, landscape, 30)
    assert strategy._smooth is None and strategy._fitted.gp is not None


@pytest.mark.parametrize("batch", [1, 4])
def test_two_models_never_repeat_and_avoid_failures_in_batches(batch):
    landscape = synthetic_landscape(5)  # 21% of its configurations fail
    settings = BayesSettings(global_length=1.5, design="random", initial=10)
    wasted, found = [], []
    for seed in range(3):
        order = drive(BayesSearch(landscape.candidates, seed=seed, settings=settings), landscape, 60, batch=batch)
        assert len(order) == len(set(order)) == 60
        wasted.append(sum(1 for i in order[10:] if landscape.failures[i] is not None) / 50)
        found.append(fraction(landscape, order))
    share_failing = sum(1 for f in landscape.failures if f is not None) / len(landscape)
    assert np.mean(wasted) < share_failing and np.mean(found) >= 0.93, (wasted, found)


# -- the predictiveness switch (`predictive`) and the GP-Hedge portfolio (`acquisition="hedge"`) ---------------------


def test_the_leave_one_out_correlation_is_that_of_refits_without_each_result():
    from scipy.stats import spearmanr

    from tracea_cli.tune.strategies.gp import Posterior

    landscape = synthetic_landscape(1)
    strategy = BayesSearch(landscape.candidates, seed=0, settings=BayesSettings(predictive=0.3))
    drive(strategy, landscape, 25)
    observed = list(strategy.costs)
    strategy._model(strategy._fitted, observed)
    y = strategy._targets(observed)
    y = (y - y.mean()) / y.std()
    loo = []
    for k, i in enumerate(observed):  # the model without result i, the same hyperparameters, predicting it
        gp = Posterior(strategy._fitted.kernel, strategy._X)
        gp.add(observed[:k] + observed[k + 1 :])
        mu, _ = gp.predict(np.array([i]), np.delete(y, k))
        loo.append(mu[0])
    expected = spearmanr(loo, y).statistic
    assert strategy._loo_rank_correlation(y) == pytest.approx(expected, abs=1e-9)


def test_an_unpredictive_model_hands_its_turns_to_random_candidates():
    landscape = synthetic_landscape(1)
    order = np.random.default_rng(0).permutation(len(landscape))  # times without structure: nothing to predict
    shuffled = dataclasses.replace(landscape, times=tuple(landscape.times[i] for i in order),
                                   failures=tuple(landscape.failures[i] for i in order))
    for settings, turns in ((BayesSettings(predictive=1.0, unpredictive="all"), 30),  # never predicts well enough
                            (BayesSettings(predictive=0.0), 0)):  # off
        strategy = BayesSearch(shuffled.candidates, seed=0, settings=settings)
        order = drive(strategy, shuffled, 40)
        assert len(set(order)) == 40 and strategy.unpredictive_turns == turns
        assert not strategy._kind  # random turns are not model proposals waiting for credit
    # global moves only: the local ones stay the model's
    strategy = BayesSearch(shuffled.candidates, seed=0, settings=BayesSettings(predictive=1.0, local=0.5))
    drive(strategy, shuffled, 40)
    assert strategy.unpredictive_turns == 15


@pytest.mark.parametrize("settings", [BayesSettings(predictive=0.3), BayesSettings(predictive=0.3, unpredictive="all"),
                                      BayesSettings(acquisition="hedge"), BayesSettings(diverse=4),
                                      BayesSettings(local_acquisition="same"), BayesSettings(local_acquisition="mean"),
                                      BayesSettings(acquisition="pi"), BayesSettings(floor=1)],
                         ids=["predictive", "predictive-all", "hedge", "diverse", "local-ei", "local-mean", "pi",
                              "floor"])
def test_the_new_settings_find_small_optima_never_repeat_and_are_seeded(settings):
    scores = []
    for seed in range(4):
        landscape = synthetic_landscape(seed, small=True)
        budget = max(20, len(landscape) // 4)
        order = drive(BayesSearch(landscape.candidates, seed=seed, settings=settings), landscape, budget)
        assert len(set(order)) == len(order)
        scores.append(fraction(landscape, order))
        if seed == 0:
            assert order == drive(BayesSearch(landscape.candidates, seed=seed, settings=settings), landscape, budget)
    assert np.mean(scores) >= 0.9 and min(scores) >= 0.75, scores


def test_hedge_credits_each_acquisition_by_the_model_mean_at_its_nominee():
    landscape = synthetic_landscape(1)
    strategy = BayesSearch(landscape.candidates, seed=0, settings=BayesSettings(acquisition="hedge"))
    drive(strategy, landscape, 40)
    for kind in ("local", "global"):
        assert len(strategy._nominees[kind]) == 3 and np.all(np.isfinite(strategy._hedge[kind]))
        assert np.any(strategy._hedge[kind] != 0)


def test_stale_local_moves_walk_another_basin_first():
    landscape = synthetic_landscape(1)
    positions = encoding.levels(landscape.params, landscape.configs)
    strategy = BayesSearch(landscape.candidates, seed=0, settings=BayesSettings(local=1.0, initial=10, diverse=3))
    drive(strategy, landscape, 10)
    checked = 0
    for _ in range(40):
        ranked = strategy._ranked()
        stale = strategy._stale
        (index,) = strategy.ask(1)
        if stale >= 3:  # the move is a neighbour of a result two parameters or more from the best
            far = [i for i in ranked if encoding.hamming(positions, ranked[0])[i] >= 2]
            before = strategy.proposed - {index}
            centre = next(i for i in far if set(encoding.neighbours(positions, i).tolist()) - before)
            assert encoding.hamming(positions, centre)[index] == 1
            checked += 1
        strategy.tell(index, landscape.times[index])
    assert checked > 0


def test_a_greedy_local_acquisition_takes_the_neighbour_of_lowest_predicted_time(monkeypatch):
    landscape = synthetic_landscape(1)
    strategy = BayesSearch(landscape.candidates, seed=0, settings=BayesSettings(local=1.0, local_acquisition="mean"))
    drive(strategy, landscape, 15)
    seen = []
    real_predict = type(strategy._fitted.gp).predict

    def recording(gp, indices, y):
        mu, std = real_predict(gp, indices, y)
        if y is not None:
            seen.append((np.asarray(indices).copy(), mu.copy()))
        return mu, std

    monkeypatch.setattr(type(strategy._fitted.gp), "predict", recording)
    (index,) = strategy.ask(1)
    pool, mu = seen[-1]
    assert mu[list(pool).index(index)] == pytest.approx(mu.min())


# -- global moves against random search's floor (`floor`) -------------------------------------------------------------


def shuffled_landscape() -> Landscape:
    """synthetic_landscape(1) with its times dealt at random: nothing for a model to find."""
    landscape = synthetic_landscape(1)
    order = np.random.default_rng(0).permutation(len(landscape))
    return dataclasses.replace(landscape, times=tuple(landscape.times[i] for i in order),
                               failures=tuple(landscape.failures[i] for i in order))


def test_the_floor_threshold_is_the_random_starts_own_result_and_global_moves_are_scored_against_it():
    landscape = synthetic_landscape(1)
    strategy = BayesSearch(landscape.candidates, seed=0, settings=BayesSettings(floor=2, initial=10))
    drive(strategy, landscape, 10)
    assert len(strategy._drawn) == 10 and strategy._drawn == list(strategy.costs)[:10]
    assert strategy._floor_threshold() == sorted(landscape.times[i] for i in strategy._drawn)[1]
    told = {}
    for _ in range(20):
        (index,) = strategy.ask(1)
        told[index] = strategy._kind.get(index)
        strategy.tell(index, landscape.times[index])
    globals_ = [i for i, kind in told.items() if kind == "global"]
    wins = sum(landscape.times[i] < strategy._floor_at for i in globals_)
    assert strategy._global_record == [wins, len(globals_) - wins] and globals_


def test_global_moves_give_their_turns_to_random_candidates_while_they_lose_to_chance():
    landscape = synthetic_landscape(1)
    strategy = BayesSearch(landscape.candidates, seed=0, settings=BayesSettings(floor=1, initial=10))
    drive(strategy, landscape, 10)  # k = 10 drawn: a random candidate beats their best with probability 1/11
    strategy._global_record = [0, 60]  # Beta(1, 61) lies below 1/11 with probability 1 - (10/11)**61 = 0.997
    assert sum(strategy._below_floor() for _ in range(200)) >= 190
    strategy._global_record = [30, 0]  # Beta(31, 1) lies below 1/11 with probability (1/11)**31
    assert not any(strategy._below_floor() for _ in range(200))
    off = BayesSearch(landscape.candidates, seed=0, settings=BayesSettings(initial=10))
    drive(off, landscape, 10)
    assert not off._below_floor()


def test_the_floor_changes_nothing_until_it_hands_a_turn_to_chance(monkeypatch):
    landscape = shuffled_landscape()
    plain = drive(BayesSearch(landscape.candidates, seed=0), landscape, 40)
    floored = BayesSearch(landscape.candidates, seed=0, settings=BayesSettings(floor=1))
    order = drive(floored, landscape, 40)
    assert floored.floor_turns > 0 and order != plain and len(set(order)) == 40  # on no structure it does turn
    monkeypatch.setattr(BayesSearch, "_below_floor", lambda self: False)
    assert drive(BayesSearch(landscape.candidates, seed=0, settings=BayesSettings(floor=1)), landscape, 40) == plain
