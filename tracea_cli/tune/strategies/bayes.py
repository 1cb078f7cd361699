"""Bayesian search over the enumerated candidates: a Gaussian process on log(time), expected improvement.

How it works (docs/search.md has the reasoning and the measured results):

1. Encoding. Each candidate becomes a point in [0, 1]^d: an ordinal parameter (a tile size) by its rank among
   its values scaled to [0, 1]; a categorical one by one-hot columns (one column for two values); parameters with a
   single value are dropped.
2. Start. The candidates nearest a maximin Latin hypercube of 2 (d + 1) points (8 to 20), which covers every
   level of every parameter; the model takes over once those are proposed and two have succeeded.
3. Model. scikit-optimize's GaussianProcessRegressor fits a Matern 5/2 kernel (one length scale per column, each
   at least half a level step, so that the model never becomes a lookup table) times a constant, plus white
   noise, to standardised log(time): times span orders of magnitude and matter in ratios.
4. Failures enter the model at the worst log(time) seen so far: their region looks unattractive, but no worse than
   the slowest success, so a failure does not flatten the model.
5. Proposal. skopt's `gaussian_ei` (xi = 0.01 in log(time): a 1% improvement) over every unproposed candidate, or
   in spaces larger than `max_pool` a random subset plus every neighbour of the best few; ties broken at random.
6. Batches. `ask(n)` picks n points one after another with the kriging believer: each pick, and every point still
   in flight, joins the model at its predicted value, so the next pick goes elsewhere.
7. Cost. Hyperparameters are refitted after every 10% more results; between refits the posterior over all
   candidates is updated in O(n N) per result (`_IncrementalGP`), with one BLAS thread.
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass

import numpy as np

from tracea_cli.space import Candidates, Param
from tracea_cli.tune.strategies.base import Bookkeeping


@dataclass(frozen=True)
class BayesSettings:
    """Defaults chosen from first principles (see docs/search.md), not fitted to any landscape."""

    initial: int | None = None  # space-filling points before the first model; None: 2 (d + 1) within [8, 20]
    xi: float = 0.01  # EI's required improvement, in log(time): 1%
    max_pool: int = 10000  # spaces up to this size are scored whole, with the posterior kept between steps
    subsample: int = 2000  # candidates scored per proposal in larger spaces (plus the incumbents' neighbours)
    incumbents: int = 5  # whose neighbours always join a subsampled pool
    design_tries: int = 64  # Latin hypercubes drawn for the start; the most spread out one is used
    min_length: float = 0.5  # the shortest length scale, in level steps
    refit_growth: float = 0.1  # refit the kernel's hyperparameters after this much more data
    refit_steps: int = 15  # L-BFGS steps of a warm-started refit


def level_steps(params: tuple[Param, ...]) -> np.ndarray:
    """Per encoded column, the distance between neighbouring levels (1 for binary and one-hot columns)."""
    steps: list[float] = []
    for p in params:
        if len(p.values) < 2:
            continue
        if p.kind == "ordinal" or len(p.values) == 2:
            steps.append(1.0 / (len(p.values) - 1))
        else:
            steps.extend([1.0] * len(p.values))
    return np.array(steps or [1.0])


def levels(params: tuple[Param, ...], configs) -> np.ndarray:
    """Candidates as rows of value positions, one column per parameter."""
    columns = []
    for p in params:
        position = {v: k for k, v in enumerate(p.values)}
        columns.append(np.fromiter((position[c.get(p.name)] for c in configs), dtype=np.int64, count=len(configs)))
    if not columns:
        return np.zeros((len(configs), 1), dtype=np.int16)
    return np.column_stack(columns).astype(np.int16 if max(len(p.values) for p in params) < 2**15 else np.int64)


def encode(params: tuple[Param, ...], configs) -> np.ndarray:
    """Candidates as rows in [0, 1]^d: ordinal ranks scaled to [0, 1], categorical one-hot, constants dropped."""
    positions = levels(params, configs)
    columns: list[np.ndarray] = []
    for j, p in enumerate(params):
        if len(p.values) < 2:
            continue
        if p.kind == "ordinal" or len(p.values) == 2:
            columns.append(positions[:, j] / (len(p.values) - 1))
        else:
            columns.extend((positions[:, j] == k).astype(np.float64) for k in range(len(p.values)))
    if not columns:
        return np.zeros((len(configs), 1))
    return np.column_stack(columns)


def latin_hypercube(params: tuple[Param, ...], k: int, rng: np.random.Generator) -> np.ndarray:
    """k points in the encoding of `encode`, each parameter's range cut into k strata, one point per stratum.

    Every level of an ordinal parameter is covered equally, middles included (picking points far apart
    instead favours the corners, and a bowl-shaped response centred between them would look flat); categorical
    values are dealt round-robin in a random order.
    """
    columns: list[np.ndarray] = []
    for p in params:
        if len(p.values) < 2:
            continue
        if p.kind == "ordinal" or len(p.values) == 2:
            levels = np.floor((rng.permutation(k) + rng.random(k)) / k * len(p.values))
            columns.append(levels / (len(p.values) - 1))
        else:
            labels = rng.permutation(np.arange(k) % len(p.values))
            for value in range(len(p.values)):
                columns.append((labels == value).astype(np.float64))
    if not columns:
        return np.zeros((k, 1))
    return np.column_stack(columns)


def maximin_design(params: tuple[Param, ...], k: int, rng: np.random.Generator, *, tries: int) -> np.ndarray:
    """Of `tries` Latin hypercubes, the one whose closest pair of points is farthest apart (Morris & Mitchell)."""
    best, best_gap = None, -1.0
    for _ in range(max(1, tries)):
        design = latin_hypercube(params, k, rng)
        d2 = ((design[:, None, :] - design[None, :, :]) ** 2).sum(axis=2)
        gap = float(d2[np.triu_indices(k, 1)].min()) if k > 1 else 0.0
        if gap > best_gap:
            best, best_gap = design, gap
    return best


class BayesSearch(Bookkeeping):
    name = "bayes"

    def __init__(self, candidates: Candidates, *, seed: int, settings: BayesSettings | None = None) -> None:
        super().__init__(candidates, seed=seed)
        self.settings = settings or BayesSettings()
        self._rng = np.random.default_rng(seed)
        self._X = encode(candidates.params, candidates.configs)
        self._levels = levels(candidates.params, candidates.configs)
        self._neighbours: dict[int, np.ndarray] = {}  # candidate -> those differing from it in one parameter
        d = self._X.shape[1]
        self._initial = self.settings.initial if self.settings.initial is not None else min(20, max(8, 2 * (d + 1)))
        self._design: np.ndarray | None = None  # the space-filling start, in encoded coordinates
        self._design_next = 0
        self._gp: _IncrementalGP | None = None  # the model, with the last fitted hyperparameters
        self._fitted_at = 0  # number of results the hyperparameters were fitted on

    # -- proposing ------------------------------------------------------------------------------------------------

    def ask(self, n: int) -> list[int]:
        from threadpoolctl import threadpool_limits

        # The matrices are small (hundreds of rows): one BLAS thread is faster than several contending with a
        # compiler or a timed run for two cores (measured: Cholesky of 200x200 0.2 ms against 2.7 ms).
        with threadpool_limits(limits=1, user_api="blas"):
            return self._ask(self._check_n(n))

    def _ask(self, n: int) -> list[int]:
        chosen: list[int] = []
        for _ in range(n):
            if self.exhausted:
                break
            if self._ready_for_model():
                index = self._propose_by_model()
            else:
                index = self._propose_spread()
            self.proposed.add(index)
            chosen.append(index)
        return chosen

    def _ready_for_model(self) -> bool:
        # The start is spent once `initial` candidates are known or in flight; the model needs two successes.
        successes = sum(1 for c in self.costs.values() if math.isfinite(c) and c > 0)
        return len(self.proposed) >= min(self._initial, self.size) and successes >= 2

    def _unproposed(self) -> np.ndarray:
        mask = np.ones(self.size, dtype=bool)
        mask[list(self.proposed)] = False
        return np.flatnonzero(mask)

    def _propose_spread(self) -> int:
        """The candidate nearest the next point of a Latin hypercube design; random once the design is used up."""
        free = self._unproposed()
        if self._design is None:
            self._design = maximin_design(self.candidates.params, self._initial, self._rng, tries=self.settings.design_tries)
        if self._design_next >= len(self._design):
            return int(self._rng.choice(free))
        target = self._design[self._design_next]
        self._design_next += 1
        d2 = ((self._X[free] - target) ** 2).sum(axis=1)
        nearest = np.flatnonzero(d2 <= d2.min() + 1e-12)
        return int(free[self._rng.choice(nearest)])

    def _propose_by_model(self) -> int:
        from skopt.acquisition import gaussian_ei

        observed = list(self.costs)
        y = self._targets(observed)
        pool = self._pool()
        gp = self._model(observed, pool)
        mean, scale = float(y.mean()), float(y.std()) or 1.0
        mu = gp.mean_at(pool, (y - mean) / scale) * scale + mean
        # Points in flight join the data at the model's belief (kriging believer): the mean stays as it is, the
        # uncertainty around them shrinks, so the next pick of a batch goes elsewhere.
        mark = gp.mark()
        gp.add(self.pending)
        std = gp.std_at(pool) * scale
        gp.restore(mark)
        # skopt's acquisitions call model.predict(X, return_std=True) and nothing else.
        ei = gaussian_ei(np.zeros((len(pool), 1)), _Fixed(mu, std), y_opt=float(y.min()), xi=self.settings.xi)
        best = np.flatnonzero(ei >= ei.max() * (1 - 1e-9))
        return int(pool[self._rng.choice(best)])  # ties (flat directions of the model) broken at random

    def _pool(self) -> np.ndarray:
        """The candidates to score: all unproposed ones, or in a large space a random subset plus the incumbents'
        neighbours (so that the search can always refine its best points)."""
        free = self._unproposed()
        if self.size <= self.settings.max_pool or len(free) <= self.settings.subsample:
            return free
        sample = self._rng.choice(free, self.settings.subsample, replace=False)
        return np.union1d(sample, self._neighbours_of_best())

    def _neighbours_of_best(self) -> np.ndarray:
        """Unproposed candidates that differ from one of the best few in a single parameter."""
        finite = sorted((c, i) for i, c in self.costs.items() if math.isfinite(c))
        near = np.zeros(self.size, dtype=bool)
        for _, i in finite[: self.settings.incumbents]:
            if i not in self._neighbours:  # the best few change rarely: remember their neighbourhoods
                self._neighbours[i] = np.flatnonzero((self._levels != self._levels[i]).sum(axis=1) == 1)
            near[self._neighbours[i]] = True
        near[list(self.proposed)] = False
        return np.flatnonzero(near)

    # -- the model ------------------------------------------------------------------------------------------------

    def _targets(self, observed: list[int]) -> np.ndarray:
        """log(time) per observed candidate; a failure counts as the worst success (as bad as seen, no worse)."""
        costs = np.array([self.costs[i] for i in observed])
        finite = np.isfinite(costs) & (costs > 0)
        y = np.empty(len(costs))
        y[finite] = np.log(costs[finite])
        y[~finite] = y[finite].max()
        return y

    def _model(self, observed: list[int], pool: np.ndarray) -> "_IncrementalGP":
        """The GP conditioned on `observed` (in that order), able to score `pool`.

        Kernel hyperparameters are refitted after every `refit_growth` more results (they settle as data grow);
        between refits, a space scored whole keeps its posterior and adds each new result in O(n N).
        """
        refit = self._gp is None or len(observed) >= self._fitted_at + max(1, int(self._fitted_at * self.settings.refit_growth))
        if refit:
            y = self._targets(observed)
            kernel = self._fit_kernel(self._X[observed], (y - y.mean()) / (y.std() or 1.0))
            self._fitted_at = len(observed)
        else:
            kernel = self._gp.kernel
        if self.size > self.settings.max_pool:  # a subsampled pool changes every step: start afresh on it
            self._gp = _IncrementalGP(kernel, self._X, rows=pool)
        elif refit:
            self._gp = _IncrementalGP(kernel, self._X, rows=None)
        self._gp.add(observed[len(self._gp.train) :])
        return self._gp

    def _fit_kernel(self, X: np.ndarray, y: np.ndarray):
        """Maximum-likelihood kernel hyperparameters (skopt's GP regressor), warm-started from the last fit."""
        from skopt.learning import GaussianProcessRegressor
        from skopt.learning.gaussian_process.kernels import ConstantKernel, Matern, WhiteKernel

        # A length scale below half a level step would call neighbouring levels unrelated, and the model would
        # degenerate into a lookup table that only ever explores.
        lower = self.settings.min_length * level_steps(self.candidates.params)
        bounds = np.column_stack([lower, np.full(len(lower), 1e2)])
        kernel = ConstantKernel(1.0, (1e-2, 1e2)) * Matern(
            length_scale=np.maximum(0.5, lower), length_scale_bounds=bounds, nu=2.5
        ) + WhiteKernel(1e-2, (1e-6, 1e0))
        # Warm-started from the last fit, a few L-BFGS steps suffice (each costs ~20 ms at 200 results).
        steps = 200
        if self._gp is not None:
            kernel.theta = self._gp.kernel.theta
            steps = self.settings.refit_steps
        gp = GaussianProcessRegressor(kernel=kernel, optimizer=_lbfgs(steps), normalize_y=False, random_state=self.seed)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # convergence chatter from L-BFGS at the bounds
            gp.fit(X, y)
        return gp.kernel_


class _IncrementalGP:
    """A GP posterior with fixed hyperparameters over some rows of the candidates, grown one datum at a time.

    Keeps the Cholesky factor L of the training covariance and V = L^-1 K(train, rows). Adding a point appends
    one row to each (O(n) and O(n R) for n data and R rows), so a proposal costs O(n R) instead of the O(n^2 R)
    of computing the posterior afresh. The mean at the rows is V^T L^-1 y, the variance signal - colsum(V^2).
    """

    def __init__(self, kernel, X: np.ndarray, *, rows: np.ndarray | None) -> None:
        self.kernel = kernel  # k1: signal (constant * Matern), k2: white noise
        self._signal = float(kernel.k1.k1.constant_value)
        self._noise = float(kernel.k2.noise_level)
        self._X = X
        self._rows = rows  # candidate indices scored (sorted), or None for all of them
        n_rows = len(X) if rows is None else len(rows)
        self.train: list[int] = []
        self._L = np.zeros((64, 64))
        self._V = np.zeros((64, n_rows))
        self._explained = np.zeros(n_rows)  # colsum(V^2): the variance the data explain at each row

    def add(self, indices) -> None:
        """Condition on more data: a block update of L and V (one row each for a single point)."""
        from scipy.linalg import cholesky

        new = [int(i) for i in indices]
        if not new:
            return
        n, m = len(self.train), len(new)
        if n + m > len(self._L):  # grow by doubling
            grow = max(n + m, 2 * len(self._L)) - len(self._L)
            self._L = np.pad(self._L, ((0, grow), (0, grow)))
            self._V = np.pad(self._V, ((0, grow), (0, 0)))
        X_new = self._X[new]
        rows = self._X if self._rows is None else self._X[self._rows]
        L21 = _forward(self._L[:n, :n], self.kernel.k1(self._X[self.train], X_new)).T if n else np.zeros((m, 0))
        K22 = self.kernel.k1(X_new) - L21 @ L21.T
        K22[np.diag_indices(m)] += self._noise + 1e-8
        L22 = cholesky(K22, lower=True, check_finite=False)
        self._L[n : n + m, :n], self._L[n : n + m, n : n + m] = L21, L22
        V_new = _forward(L22, self.kernel.k1(X_new, rows) - L21 @ self._V[:n])
        self._V[n : n + m] = V_new
        self._explained += np.einsum("ij,ij->j", V_new, V_new)
        self.train.extend(new)

    def mark(self) -> tuple[int, np.ndarray]:
        return len(self.train), self._explained.copy()

    def restore(self, mark: tuple[int, np.ndarray]) -> None:
        n, explained = mark
        del self.train[n:]
        self._explained = explained

    def mean_at(self, indices: np.ndarray, y: np.ndarray) -> np.ndarray:
        """Posterior mean at candidate `indices` given standardised targets `y` for the first len(y) data."""
        n = len(y)
        return self._V[:n, self._positions(indices)].T @ _forward(self._L[:n, :n], y)

    def std_at(self, indices: np.ndarray) -> np.ndarray:
        """Posterior standard deviation (of the signal, without noise) at candidate `indices`, all data counted."""
        return np.sqrt(np.maximum(self._signal - self._explained[self._positions(indices)], 1e-12))

    def _positions(self, indices: np.ndarray) -> np.ndarray:
        return indices if self._rows is None else np.searchsorted(self._rows, indices)


def _lbfgs(max_steps: int):
    """The likelihood maximiser scikit-learn's GP uses by default, with a bounded number of steps."""

    def optimizer(objective, theta, bounds):
        from scipy.optimize import minimize

        result = minimize(objective, theta, method="L-BFGS-B", jac=True, bounds=bounds, options={"maxiter": max_steps})
        return result.x, result.fun

    return optimizer


def _forward(L: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Solve L x = b for lower-triangular L."""
    from scipy.linalg import solve_triangular

    if len(b) == 0:
        return np.empty(0)
    return solve_triangular(L, b, lower=True, check_finite=False)


class _Fixed:
    """Posterior mean and deviation already computed for the pool, shown to skopt's acquisitions as a model."""

    def __init__(self, mu: np.ndarray, std: np.ndarray) -> None:
        self.mu, self.std = mu, std

    def predict(self, X, return_std: bool = False):
        return (self.mu, self.std) if return_std else self.mu
