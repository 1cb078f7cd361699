"""The default search (`bayes`): a Gaussian process on log(time) with probability of improvement, in a portfolio with
a neighbourhood search that the same model pre-screens.

How it works (docs/search.md has the reasoning; every setting was chosen by leave-one-kernel-out cross-validation
over the recorded landscapes, benchmarks/search_cv.py, docs/results/search_cv.md):

1. Encoding (`encoding.py`). Each candidate becomes a point in [0, 1]^d.
2. Start. The candidates nearest a space-filling design (a maximin Latin hypercube, or a random sample).
3. Model. scikit-optimize's GaussianProcessRegressor fits a Matern kernel (one length scale per column, bounded
   below so that the model never becomes a lookup table) times a constant, plus white noise, to standardised
   log(time): times span orders of magnitude and matter in ratios.
4. Failures enter the model at the worst log(time) seen so far plus a margin; with `clip` < 1, log(time) above
   that quantile of the successes enters at the quantile (the model's variance then goes to the fast region).
5. Proposal: a portfolio of two moves, both scored by a model.
   - global: the acquisition (PI, EI or LCB) over every unproposed candidate, or in spaces larger than `max_pool` a
     random subset (drawn afresh at each refit) plus every neighbour of the best few. With `global_length` > 0 a
     second model scores these: a GP whose length scales are all fixed at that value (only its amplitude and noise
     are fitted), smooth over the whole space, while the fitted model keeps screening the local moves;
   - local: the unproposed neighbours (one parameter changed) of the best result, or of the next best once those
     are spent, the one most likely to beat the best (`local_acquisition="pi"`, probability of improvement: EI
     would walk first to the values the model knows least about, on a sharp landscape one by one through the slow
     values of a wide parameter); after `diverse` (12) local moves without a new best, the neighbourhood of the best
     result two parameters or more from the best (another basin) comes first. Sharp landscapes, where a few
     configurations next to each other are far faster than the rest, are found by walking neighbourhoods; smooth
     ones by the model.
   A share `local` of the model-based proposals is local, interleaved evenly; or (`portfolio="credit"`) each
   proposal's kind is drawn by Thompson sampling from how often each kind has improved the best result in this
   run. Ties are broken at random. Off by default (cross-validation did not prefer them, docs/search.md): a share
   `random` of the turns after the start taken by a uniformly random candidate (random interleaving), and
   Thompson sampling (`acquisition="ts"`: the best of one joint posterior draw over the pool) instead of EI; GP-Hedge
   (`acquisition="hedge"`: EI, PI and LCB each nominate, credited by the model's later mean at their nominees);
   random moves while the fitted model's leave-one-out predictions rank-correlate with the results below
   `predictive`; local moves by EI (`local_acquisition="same"`) or by the lowest predicted time ("mean"); global turns
   given to random candidates while the global moves beat the random start's `floor`-th best less often than a
   random candidate would (`floor`).
6. Batches. `ask(n)` picks n points one after another with the kriging believer: each pick, and every point still
   in flight, joins the model at its predicted value, so the next pick goes elsewhere.
7. Cost. Hyperparameters are refitted after every 10% more results; between refits the posterior is updated in
   O(n N) per result (`gp.Posterior`), with one BLAS thread.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from tracea_cli.space import Candidates, Param
from tracea_cli.tune.strategies import encoding
from tracea_cli.tune.strategies.base import Bookkeeping
from tracea_cli.tune.strategies.gp import (
    Posterior,
    expected_improvement,
    fit_kernel,
    lower_confidence,
    main_effects,
    one_blas_thread,
    probability_of_improvement,
)


@dataclass(frozen=True)
class BayesSettings:
    """The search's settings. The defaults are those the cross-validation chose (docs/results/search_cv.md; since
    2026-12-07 the two models and the random start of 10, then the local moves by probability of improvement with
    another basin after 12 stale ones, then probability of improvement for the global moves too, by the
    whole-strategy folds, search_cv_variants.md)."""

    encoding: str = "rank"  # how candidates become coordinates: one of encoding.ENCODINGS
    initial: int | None = 10  # space-filling points before the first model; None: 2 (d + 1) within [8, 20]
    design: str = "random"  # the start: "lhs" (maximin Latin hypercube) or "random"
    nu: float = 1.5  # the Matern kernel's smoothness: 1.5 or 2.5
    min_length: float = 0.5  # the shortest length scale, in steps between neighbouring coordinates
    max_length: float = 100.0  # the longest fitted length scale (encoded units; 1 = a parameter's whole range)
    length: float = 0.0  # > 0: one fixed length scale for every column (encoded units) instead of fitted ones
    global_length: float = 1.5  # > 0: the global moves are scored by a second model, a smooth one whose length
    # scales are all fixed at this value (encoded units), while the local moves keep the first model (`length`).
    # Two surrogates: fitted length scales resolve the incumbent's neighbourhood; on sharp landscapes they shrink
    # and the global moves they drive turn into exploring wherever the model knows nothing, while one long fixed
    # length scale keeps the global moves on the trends of the whole space
    main_effects: bool = False  # add to the kernel a fitted multiple of how many parameter values two share
    fit_max: int | None = 100  # hyperparameters are fitted on at most this many results (a random subset): cost
    failure: float = 0.0  # a failure enters the model at the worst log(time) seen plus this (log 1.5 = 0.405)
    acquisition: str = "pi"  # "ei" (expected improvement), "pi" (probability of improvement), "lcb" (lower
    # confidence bound) or "ts" (Thompson sampling: the best of one joint draw from the posterior over the pool, or
    # over `ts_pool` of it drawn at random)
    # "hedge": a portfolio of EI, PI and LCB (GP-Hedge, Hoffman et al. 2011): each acquisition nominates its best
    # candidate, one nominee is taken with probability growing with exp(gain), and each acquisition's gain grows by
    # minus the model's later mean (standardised log time) at its nominee, so the run credits the one that predicts well
    ts_pool: int = 1000  # Thompson sampling draws jointly over at most this many candidates (a Cholesky factor)
    exploration: float = 0.01  # EI's required improvement in log(time), or LCB's kappa
    local: float = 0.5  # share of the model's proposals taken from the best results' neighbourhoods
    local_moves: str = "any"  # "adjacent": one parameter one value up or down first, then any value; "any"
    radius: int = 1  # a local move changes up to this many parameters of the incumbent: variable neighbourhoods,
    # one parameter first, the ball of two once that is spent (or stale, `escalate`), and so on; the model screens
    # each. On constrained spaces the configurations better than a local optimum often differ from it in two at once
    escalate: int = 0  # > 0: after this many local moves without a new best, the next wider ball (up to `radius`)
    diverse: int = 12  # > 0: after this many local moves without a new best, the local moves walk the neighbourhood
    # of the best result that differs from the best in two parameters or more (another basin) before the best's own
    local_from: int = 1  # a local move's pool joins the neighbourhoods of this many of the best results (1: the best
    # alone, the next best once its neighbourhood is spent), so that the model, not the ranking, picks the basin
    local_acquisition: str = "pi"  # how the local moves' pool is scored: "same" (as `acquisition`), "pi"
    # (probability of improvement: the neighbour most likely to beat the best, whatever its uncertainty) or "mean"
    # (the lowest predicted time: greedy), so that on sharp landscapes the neighbourhood walk does not go first to
    # the values the model knows least about
    portfolio: str = "fixed"  # "fixed": `local` is the share of local moves; "credit": each model proposal is local
    # or global by Thompson sampling from how often each kind has improved the best result so far in this run
    # (Beta(1 + improvements, 1 + others) per kind), so the run itself decides where the model does well
    clip: float = 0.25  # < 1: log(time) above this quantile of the successes enters the model at the quantile, so
    # that the model spends its variance on the fast region rather than on how slow the slow tail is
    random: float = 0.0  # share of the model's turns given to a uniformly random unproposed candidate instead
    # (random interleaving, as SMAC does): the search keeps random search's floor where the model misleads it
    random_until: float = 0.0  # > 0: the random share applies to the first `random_until` x (the start's size)
    # proposals after the start only, then stops (0: for the whole search)
    predictive: float = 0.0  # > 0: while the fitted model's leave-one-out predictions of the results so far
    # rank-correlate (Spearman) below this with the results, its global moves (or with `unpredictive="all"` all its
    # moves) go to uniformly random candidates instead: on a landscape the model cannot yet tell apart (flat, noisy)
    # the search keeps random search's floor, and the model takes over once it predicts data it did not see
    unpredictive: str = "global"  # which model moves turn random while the model does not predict: "global" or "all"
    floor: int = 0  # > 0: the global moves must beat random search. A global move "wins" when its result beats the
    # `floor`-th best result of the random start (k candidates drawn uniformly); a uniformly random candidate does so
    # with probability exactly floor / (k + 1) (exchangeability), whatever the landscape. A global turn goes to a
    # uniformly random candidate while the global moves' win rate is more likely below that rate than above it (its
    # Beta(1 + wins, 1 + losses) posterior): where the model's exploration lands worse than chance (a flat landscape
    # whose smooth model, knowing nothing, sends the global moves to the corners of a constrained space), the search
    # keeps random search's floor, and elsewhere the model keeps its turns
    batch: int = 1  # proposals made from one state of the model (the later ones wait in a queue for `ask`)
    pool: int = 0  # > 0: the global move scores this many random unproposed candidates (plus the incumbents'
    # neighbours) instead of all of them: a cheap pre-screen that keeps the search from fixing on the model's errors
    max_pool: int = 20000  # spaces up to this size are scored whole, with the posterior kept between steps
    subsample: int = 2000  # candidates scored per proposal in larger spaces (plus the incumbents' neighbours)
    incumbents: int = 5  # whose neighbours always join a subsampled pool
    design_tries: int = 64  # Latin hypercubes drawn for the start; the most spread out one is used
    refit_growth: float = 0.1  # refit the kernel's hyperparameters after this much more data
    refit_steps: int = 15  # L-BFGS steps of a warm-started refit

    def __post_init__(self) -> None:
        choices = {"encoding": encoding.ENCODINGS, "design": ("lhs", "random"),
                   "acquisition": ("ei", "pi", "lcb", "ts", "ts-global", "hedge"), "local_moves": ("adjacent", "any"),
                   "portfolio": ("fixed", "credit"), "nu": (0.5, 1.5, 2.5), "unpredictive": ("global", "all"),
                   "local_acquisition": ("same", "pi", "mean")}
        for name, allowed in choices.items():
            if getattr(self, name) not in allowed:
                raise ValueError(f"BayesSettings.{name} must be one of {allowed}, got {getattr(self, name)!r}")
        for name, low, high in (("local", 0.0, 1.0), ("clip", 0.0, 1.0), ("random", 0.0, 1.0),
                                ("predictive", 0.0, 1.0)):
            if not low <= getattr(self, name) <= high or (name == "clip" and self.clip == 0.0):
                raise ValueError(f"BayesSettings.{name} must lie in {'(' if name == 'clip' else '['}{low}, {high}], "
                                 f"got {getattr(self, name)!r}")
        if self.batch < 1:
            raise ValueError(f"BayesSettings.batch must be at least 1, got {self.batch}")
        if self.diverse < 0:
            raise ValueError(f"BayesSettings.diverse must be at least 0, got {self.diverse}")
        if self.escalate < 0:
            raise ValueError(f"BayesSettings.escalate must be at least 0, got {self.escalate}")
        for name in ("radius", "local_from"):
            if getattr(self, name) < 1:
                raise ValueError(f"BayesSettings.{name} must be at least 1, got {getattr(self, name)}")
        if not (self.global_length >= 0 and math.isfinite(self.global_length)):
            raise ValueError(f"BayesSettings.global_length must be a finite length >= 0 (0: no second model), "
                             f"got {self.global_length!r}")
        if self.floor < 0:
            raise ValueError(f"BayesSettings.floor must be at least 0 (0: off), got {self.floor}")
        if self.floor > 0 and self.design != "random":
            raise ValueError("BayesSettings.floor needs the random start (design='random'): the random search's rate it "
                             "compares with holds for uniformly drawn candidates only")
        if self.ts_pool < 2:
            raise ValueError(f"BayesSettings.ts_pool must be at least 2, got {self.ts_pool}")


def encode(params: tuple[Param, ...], configs, style: str = "rank") -> np.ndarray:
    """Candidates as rows in [0, 1]^d (`encoding.encode`): ordinal ranks, categorical one-hot, constants dropped."""
    return encoding.encode(params, configs, style)


def latin_hypercube(columns, k: int, rng: np.random.Generator) -> np.ndarray:
    """k points in the encoding of `columns` (`encoding.columns_of`), one per stratum of each parameter.

    Every level of an ordinal parameter is covered equally, middles included (picking points far apart
    instead favours the corners, and a bowl-shaped response centred between them would look flat); categorical
    values are dealt round-robin in a random order. Extra columns of a parameter follow its first.
    """
    out: list[np.ndarray] = []
    chosen: dict[int, np.ndarray] = {}  # parameter -> the value positions of the k points
    for j, table in columns:
        if j not in chosen:
            count = len(table)
            if np.array_equal(table, np.arange(count) / (count - 1)):  # an ordinal rank column
                chosen[j] = np.floor((rng.permutation(k) + rng.random(k)) / k * count).astype(int)
            else:  # the first one-hot column of a categorical parameter: deal its values
                chosen[j] = rng.permutation(np.arange(k) % count)
        out.append(table[chosen[j]])
    if not out:
        return np.zeros((k, 1))
    return np.column_stack(out)


class BayesSearch(Bookkeeping):
    name = "bayes"

    def __init__(self, candidates: Candidates, *, seed: int, settings: BayesSettings | None = None) -> None:
        super().__init__(candidates, seed=seed)
        self.settings = s = settings or BayesSettings()
        self._rng = np.random.default_rng(seed)
        self._levels = encoding.levels(candidates.params, candidates.configs)
        self._columns = encoding.columns_of(candidates.params, s.encoding)
        self._X = encoding.encode(candidates.params, candidates.configs, s.encoding, positions=self._levels)
        self._width = self._X.shape[1]  # the coordinates; value indicators may follow (`main_effects`)
        if s.main_effects:
            indicators = main_effects(self._levels, [len(p.values) for p in candidates.params])
            if indicators.shape[1]:
                self._X = np.hstack([self._X, indicators])
        self._neighbours: dict[int, np.ndarray] = {}  # candidate -> those differing from it in one parameter
        self._steps: dict[int, np.ndarray] = {}  # candidate -> those one step from it
        self._balls: dict[int, np.ndarray] = {}  # candidate -> how many parameters each candidate differs in
        d = self._width
        self._initial = s.initial if s.initial is not None else min(20, max(8, 2 * (d + 1)))
        self._design: np.ndarray | None = None  # the space-filling start, in encoded coordinates
        self._design_next = 0
        self._fitted = _Model(length=s.length)  # scores the local moves, and the global ones without `global_length`
        self._smooth = _Model(length=s.global_length) if s.global_length > 0 else None  # the global moves' model
        self._queue: list[int] = []  # proposed by the model, not asked for yet (see `batch`)
        self._model_steps = 0  # proposals made by the model, for interleaving local and global moves
        self._turns = 0  # turns after the start (model or random), for interleaving random proposals (`random`)
        self._kind: dict[int, str] = {}  # a model proposal -> "local" or "global", until told
        self._credit = {"local": [0, 0], "global": [0, 0]}  # kind -> [improved the best, did not] ("credit")
        self._successes = 0
        self._stale = 0  # local moves since the best result last improved (`escalate`)
        self._hedge = {"local": np.zeros(3), "global": np.zeros(3)}  # kind -> gains of EI, PI, LCB ("hedge")
        self._nominees: dict[str, np.ndarray] = {}  # kind -> the acquisitions' last nominees, to credit ("hedge")
        self.unpredictive_turns = 0  # model turns given to random candidates because the model did not predict
        self._drawn: list[int] = []  # the start's uniformly drawn candidates (`floor`)
        self._floor_at: float | None = None  # the floor-th best result among them, once all are known (`floor`)
        self._floor_rng = np.random.default_rng([seed, 1])  # its own stream: the other choices stay as without it
        self._global_record = [0, 0]  # global moves that beat `_floor_at`, and those that did not (`floor`)
        self.floor_turns = 0  # global turns given to random candidates because global moves did worse than chance

    # -- proposing ------------------------------------------------------------------------------------------------

    def ask(self, n: int) -> list[int]:
        with one_blas_thread():
            return self._ask(self._check_n(n))

    def tell(self, index: int, cost: float) -> None:
        before = self.best()
        super().tell(index, cost)
        self._successes += math.isfinite(self.costs[index]) and self.costs[index] > 0
        kind = self._kind.pop(index, None)
        improved = math.isfinite(cost) and (before is None or cost < before[1])
        if kind is not None:
            self._credit[kind][0 if improved else 1] += 1
        if kind == "global" and self._floor_threshold() is not None:
            self._global_record[0 if cost < self._floor_at else 1] += 1
        self._stale = 0 if improved else self._stale + (kind == "local")

    def observe(self, index: int, cost: float) -> None:
        super().observe(index, cost)
        self._successes = sum(1 for c in self.costs.values() if math.isfinite(c) and c > 0)

    def _ask(self, n: int) -> list[int]:
        chosen: list[int] = []
        while len(chosen) < n and not self.exhausted:
            self._queue = [i for i in self._queue if i not in self.proposed]  # observed meanwhile: drop
            if not self._queue:
                if self._ready_for_model():
                    # A batch from one state of the model: each pick is believed at its predicted value before the
                    # next, so the picks spread out; the ones not asked for yet wait in the queue.
                    for _ in range(max(1, self.settings.batch, n - len(chosen))):
                        if len(self.proposed) + len(self._queue) >= self.size:
                            break
                        self._queue.append(self._propose_random() if self._random_turn() else self._propose_by_model())
                else:
                    self._queue.append(self._propose_spread())
            index = self._queue.pop(0)
            self.proposed.add(index)
            chosen.append(index)
        return chosen

    def _ready_for_model(self) -> bool:
        # The start is spent once `initial` candidates are known or in flight; the model needs two successes.
        return len(self.proposed) >= min(self._initial, self.size) and self._successes >= 2

    def _unproposed(self) -> np.ndarray:
        """Candidates neither proposed nor waiting in the queue."""
        mask = np.ones(self.size, dtype=bool)
        mask[list(self.proposed)] = False
        mask[self._queue] = False
        return np.flatnonzero(mask)

    def _propose_spread(self) -> int:
        """The candidate nearest the next point of the start design; random once the design is used up."""
        free = self._unproposed()
        if self._design is None:
            self._design = self._start_design()
        if self._design_next >= len(self._design):
            return int(self._rng.choice(free))
        target = self._design[self._design_next]
        self._design_next += 1
        if self.settings.design == "random":  # the design is a sample of candidates: take the next one not known yet
            index = int(target[0]) if int(target[0]) not in self.proposed else int(self._rng.choice(free))
            self._drawn.append(index)
            return index
        d2 = ((self._X[free, : self._width] - target) ** 2).sum(axis=1)
        nearest = np.flatnonzero(d2 <= d2.min() + 1e-12)
        return int(free[self._rng.choice(nearest)])

    def _start_design(self) -> np.ndarray:
        k = self._initial
        if self.settings.design == "random":
            return self._rng.choice(self.size, min(k, self.size), replace=False)[:, None].astype(float)
        best, best_gap = None, -1.0
        for _ in range(max(1, self.settings.design_tries)):
            design = latin_hypercube(self._columns, k, self._rng)
            d2 = ((design[:, None, :] - design[None, :, :]) ** 2).sum(axis=2)
            gap = float(d2[np.triu_indices(k, 1)].min()) if k > 1 else 0.0
            if gap > best_gap:
                best, best_gap = design, gap
        return best

    def _random_turn(self) -> bool:
        """Whether this turn after the start goes to a random candidate: a share `random` of the turns, spread
        evenly (the first turn is the model's), during the first `random_until` x (the start's size) turns."""
        share, t = self.settings.random, self._turns
        self._turns += 1
        if share <= 0 or (self.settings.random_until > 0 and t >= self.settings.random_until * self._initial):
            return False
        return math.floor((t + 1) * share) > math.floor(t * share) and t > 0

    def _propose_random(self) -> int:
        return int(self._rng.choice(self._unproposed()))

    def _propose_by_model(self) -> int:
        observed = list(self.costs)
        y = self._targets(observed)
        self._model(self._fitted, observed)
        mean, scale = float(y.mean()), float(y.std()) or 1.0
        local = self._local_pool() if self._local_turn() else None
        kind = "local" if local is not None and len(local) else "global"
        if (self.settings.predictive > 0 and (kind == "global" or self.settings.unpredictive == "all")
                and self._loo_rank_correlation((y - mean) / scale) < self.settings.predictive):
            self.unpredictive_turns += 1
            return self._propose_random()
        if kind == "global" and self._below_floor():
            self.floor_turns += 1
            return self._propose_random()
        model = self._fitted
        if kind == "global" and self._smooth is not None:
            model = self._smooth
            self._model(model, observed)
        gp = model.gp
        pool = local if kind == "local" else self._pool(gp)
        if self.settings.acquisition == "ts" or (self.settings.acquisition == "ts-global" and kind == "global"):
            if len(pool) > self.settings.ts_pool:
                pool = self._rng.choice(pool, self.settings.ts_pool, replace=False)
            mark = gp.mark()
            gp.add(self.pending + self._queue)
            draw = gp.sample(pool, (y - mean) / scale, self._rng)
            gp.restore(mark)
            index = int(pool[int(np.argmin(draw))])
            self._kind[index] = kind
            return index
        mu, _ = gp.predict(pool, (y - mean) / scale)
        mu = mu * scale + mean
        # Points in flight join the data at the model's belief (kriging believer): the mean stays as it is, the
        # uncertainty around them shrinks, so the next pick of a batch goes elsewhere.
        mark = gp.mark()
        gp.add(self.pending + self._queue)
        _, std = gp.predict(pool, None)
        gp.restore(mark)
        std = std * scale
        if self.settings.acquisition == "hedge":
            return self._hedge_pick(kind, gp, pool, mu, std, float(y.min()), mean, scale, y)
        if kind == "local" and self.settings.local_acquisition == "pi":
            score = probability_of_improvement(mu, std, float(y.min()), self.settings.exploration)
        elif kind == "local" and self.settings.local_acquisition == "mean":
            score = -mu
        elif self.settings.acquisition == "lcb":
            score = lower_confidence(mu, std, self.settings.exploration)
        elif self.settings.acquisition == "pi":
            score = probability_of_improvement(mu, std, float(y.min()), self.settings.exploration)
        else:
            score = expected_improvement(mu, std, float(y.min()), self.settings.exploration)
        top = np.flatnonzero(score >= score.max() - 1e-9 * max(abs(score.max()), 1e-300))
        index = int(pool[self._rng.choice(top)])  # ties (flat directions of the model) broken at random
        self._kind[index] = kind
        return index

    def _hedge_pick(self, kind: str, gp: Posterior, pool: np.ndarray, mu: np.ndarray, std: np.ndarray, best: float,
                    mean: float, scale: float, y: np.ndarray) -> int:
        """GP-Hedge: credit the last nominees of this kind of move by the model's present mean there (lower time is
        a larger gain), then let EI, PI and LCB (kappa 1.96) each nominate and take one nominee by softmax of the
        gains."""
        gains = self._hedge[kind]
        if kind in self._nominees:
            before, _ = gp.predict(self._nominees[kind], (y - mean) / scale)
            gains -= before
        xi = self.settings.exploration
        scores = (expected_improvement(mu, std, best, xi), probability_of_improvement(mu, std, best, xi),
                  lower_confidence(mu, std, 1.96))
        nominees = []
        for score in scores:
            top = np.flatnonzero(score >= score.max() - 1e-9 * max(abs(score.max()), 1e-300))
            nominees.append(int(pool[self._rng.choice(top)]))
        self._nominees[kind] = np.array(nominees)
        weights = np.exp(gains - gains.max())
        index = nominees[int(self._rng.choice(3, p=weights / weights.sum()))]
        self._kind[index] = kind
        return index

    def _floor_threshold(self) -> float | None:
        """The `floor`-th best result of the random start once all of it is known (inf while fewer succeeded);
        None when off, or when the start drew fewer than `floor` + 1 candidates (results from elsewhere)."""
        if self._floor_at is None and self.settings.floor > 0 and len(self._drawn) > self.settings.floor:
            if all(i in self.costs for i in self._drawn):
                self._floor_at = sorted(self.costs[i] for i in self._drawn)[self.settings.floor - 1]
        return self._floor_at

    def _below_floor(self) -> bool:
        """Whether this global turn goes to a random candidate: whether the global moves' rate of beating the
        threshold is more likely below random search's rate, floor / (k + 1) for k drawn at the start, than above it
        (its posterior Beta(1 + wins, 1 + losses)); deterministic, so that it changes nothing until it turns."""
        if self._floor_threshold() is None:
            return False
        wins, losses = self._global_record
        return self._floor_rng.beta(1 + wins, 1 + losses) < self.settings.floor / (len(self._drawn) + 1)

    def _loo_rank_correlation(self, y: np.ndarray) -> float:
        """Spearman correlation between the results (standardised targets `y`, in `self.costs` order) and the fitted
        model's leave-one-out predictions of them (closed form from the Cholesky factor: y_i - a_i / (K^-1)_ii)."""
        from scipy.linalg import cho_solve
        from scipy.stats import rankdata

        n = len(y)
        if n < 3 or np.ptp(y) == 0:
            return 0.0
        L = self._fitted.gp._L[:n, :n]  # the Cholesky factor (noise included) of the first n data: the results
        inverse = cho_solve((L, True), np.eye(n), check_finite=False)
        loo = y - inverse @ y / np.diag(inverse)
        a, b = rankdata(loo), rankdata(y)
        a, b = a - a.mean(), b - b.mean()
        denominator = math.sqrt(float(a @ a) * float(b @ b))
        return float(a @ b) / denominator if denominator > 0 else 0.0

    def _local_turn(self) -> bool:
        if self.settings.portfolio == "credit":
            draw = {k: self._rng.beta(1 + won, 1 + lost) for k, (won, lost) in self._credit.items()}
            return draw["local"] > draw["global"]
        share = self.settings.local
        t = self._model_steps
        self._model_steps += 1
        return share > 0 and math.floor((t + 1) * share) > math.floor(t * share)

    def _local_pool(self) -> np.ndarray | None:
        """The unproposed neighbours of the best result, or of the next best once those are spent (variable
        neighbourhoods: one step away first, then anything that changes one parameter, then, with `radius` > 1,
        anything that changes up to `radius` of them)."""
        proposed = list(self.proposed) + self._queue
        if self.settings.local_from > 1:
            ranked = self._ranked()[: self.settings.local_from]
            near = np.unique(np.concatenate([self._near(i) for i in ranked]))
            near = near[~np.isin(near, proposed)]
            if len(near):
                return near
        ranked = self._ranked()
        if self.settings.diverse and self._stale >= self.settings.diverse and ranked:
            # stale: walk another basin first, the best result differing from the best in two parameters or more
            far = (self._levels[ranked] != self._levels[ranked[0]]).sum(axis=1) >= 2
            ranked = [i for i, f in zip(ranked, far) if f] + [i for i, f in zip(ranked, far) if not f]
        for i in ranked[: max(1, self.settings.incumbents)]:
            shells = (self._adjacent(i), self._near(i)) if self.settings.local_moves == "adjacent" else (self._near(i),)
            if self.settings.radius > 1:  # wider balls once the narrower are spent, or (`escalate`) stale
                radius = self.settings.radius
                first = min(radius, 1 + (self._stale // self.settings.escalate if self.settings.escalate else 0))
                balls = tuple(self._ball(i, r) for r in range(first, radius + 1))
                shells = (shells[0], *balls) if first == 1 and self.settings.local_moves == "adjacent" else balls
            for near in shells:
                near = near[~np.isin(near, proposed)]
                if len(near):
                    return near
        return None

    def _adjacent(self, i: int) -> np.ndarray:
        if i not in self._steps:
            ordinal = np.array([p.kind == "ordinal" for p in self.candidates.params])
            self._steps[i] = encoding.adjacent(self._levels, i, ordinal)
        return self._steps[i]

    def _ball(self, i: int, radius: int) -> np.ndarray:
        """Those differing from candidate i in 1..radius parameters."""
        if radius == 1:
            return self._near(i)
        if i not in self._balls:
            self._balls[i] = encoding.hamming(self._levels, i).astype(np.uint8)  # small in spaces of 10^5
        distance = self._balls[i]
        return np.flatnonzero((distance >= 1) & (distance <= radius))

    def _ranked(self) -> list[int]:
        return [i for c, i in sorted((c, i) for i, c in self.costs.items() if math.isfinite(c))]

    def _near(self, i: int) -> np.ndarray:
        if i not in self._neighbours:  # the best few change rarely: remember their neighbourhoods
            self._neighbours[i] = encoding.neighbours(self._levels, i)
        return self._neighbours[i]

    def _pool(self, gp: Posterior | None = None) -> np.ndarray:
        """The candidates to score: all unproposed ones, or in a large space the subset the posterior `gp` (the
        fitted model's unless given) tracks plus the incumbents' neighbours (so that the search can always refine
        its best points)."""
        gp = self._fitted.gp if gp is None else gp
        free = self._unproposed()
        if gp.rows is None and not 0 < self.settings.pool < len(free):
            return free
        near = np.zeros(self.size, dtype=bool)
        if gp.rows is not None:
            near[gp.rows] = True
        if 0 < self.settings.pool < len(free):
            near[self._rng.choice(free, self.settings.pool, replace=False)] = True
        for i in self._ranked()[: self.settings.incumbents]:
            near[self._near(i)] = True
        near[list(self.proposed)] = False
        near[self._queue] = False
        pool = np.flatnonzero(near)
        return pool if len(pool) else free

    # -- the model ------------------------------------------------------------------------------------------------

    def _targets(self, observed: list[int]) -> np.ndarray:
        """log(time) per observed candidate; a failure counts as the worst success plus the failure margin."""
        costs = np.array([self.costs[i] for i in observed])
        finite = np.isfinite(costs) & (costs > 0)
        y = np.empty(len(costs))
        y[finite] = np.log(costs[finite])
        if self.settings.clip < 1.0 and finite.sum() > 2:
            y[finite] = np.minimum(y[finite], np.quantile(y[finite], self.settings.clip))
        y[~finite] = y[finite].max() + self.settings.failure
        return y

    def _model(self, model: _Model, observed: list[int]) -> None:
        """Condition `model`'s GP on `observed` (in that order).

        Kernel hyperparameters are refitted after every `refit_growth` more results (they settle as data grow);
        between refits the posterior is kept and each new result added in O(n N). A space larger than `max_pool`
        is tracked on a random subset, drawn afresh at each refit.
        """
        s = self.settings
        refit = model.gp is None or len(observed) >= model.fitted_at + max(1, int(model.fitted_at * s.refit_growth))
        if refit:
            fit = observed
            if s.fit_max is not None and len(observed) > s.fit_max:
                fit = [observed[k] for k in np.sort(self._rng.choice(len(observed), s.fit_max, replace=False))]
            y = self._targets(fit)
            lower = s.min_length * encoding.level_steps(self.candidates.params, s.encoding)
            model.kernel = fit_kernel(self._X[fit], (y - y.mean()) / (y.std() or 1.0), lower=lower, nu=s.nu,
                                      fixed=model.length, upper=s.max_length, overlap=self._X.shape[1] - self._width,
                                      previous=model.kernel,
                                      steps=200 if model.kernel is None else s.refit_steps, seed=self.seed)
            model.fitted_at = len(observed)
            rows = None
            if self.size > s.max_pool:
                free = self._unproposed()
                rows = np.sort(self._rng.choice(free, min(s.subsample, len(free)), replace=False))
            model.gp = Posterior(model.kernel, self._X, rows=rows)
        model.gp.add(observed[len(model.gp.train) :])


@dataclass(slots=True)
class _Model:
    """One surrogate's state: its GP posterior, its kernel as last fitted, and on how many results."""

    length: float  # > 0: one fixed length scale for every column; 0: fitted per column
    gp: Posterior | None = None
    kernel: object | None = None
    fitted_at: int = 0
