"""The plain baseline: a Gaussian process with expected improvement, as a textbook would write it.

What the search benchmarks compare the default strategy against (issue 20): parameters encoded by the position of
their value (categorical ones too), scaled to [0, 1]; a random start of `INITIAL` candidates; then at every step a
GP (scikit-optimize's regressor: constant x Matern 5/2 with one length scale per parameter + white noise,
normalised targets, hyperparameters refitted by maximum likelihood from the same start every time) on log(time),
a failure counting as 1.5 times the slowest time seen; the candidate of largest EI (xi = 0.01) among all
unproposed ones is next. No bounds on length scales, no neighbourhoods, no subsampling: it is the reference, not a
tool for large spaces.
"""

from __future__ import annotations

import math
import warnings

import numpy as np

from tracea_cli.space import Candidates
from tracea_cli.tune.strategies import encoding
from tracea_cli.tune.strategies.base import Bookkeeping
from tracea_cli.tune.strategies.gp import one_blas_thread

INITIAL = 10  # random candidates before the first model
FAILURE_FACTOR = 1.5  # a failure counts as this many times the slowest time seen
XI = 0.01


class PlainGPSearch(Bookkeeping):
    name = "gp-ei"

    def __init__(self, candidates: Candidates, *, seed: int) -> None:
        super().__init__(candidates, seed=seed)
        self._rng = np.random.default_rng(seed)
        self._X = encoding.encode(candidates.params, candidates.configs, "index")

    def ask(self, n: int) -> list[int]:
        chosen: list[int] = []
        with one_blas_thread():
            for _ in range(self._check_n(n)):
                if self.exhausted:
                    break
                index = self._next()
                self.proposed.add(index)
                chosen.append(index)
        return chosen

    def _next(self) -> int:
        free = np.flatnonzero(~np.isin(np.arange(self.size), list(self.proposed)))
        told = [i for i, c in self.costs.items()]
        costs = np.array([self.costs[i] for i in told])
        ok = np.isfinite(costs) & (costs > 0)
        if len(self.proposed) < INITIAL or ok.sum() < 2:
            return int(self._rng.choice(free))
        from skopt.acquisition import gaussian_ei
        from skopt.learning import GaussianProcessRegressor
        from skopt.learning.gaussian_process.kernels import ConstantKernel, Matern, WhiteKernel

        y = np.where(ok, np.log(np.where(ok, costs, 1.0)), math.log(FAILURE_FACTOR * costs[ok].max()))
        kernel = ConstantKernel(1.0) * Matern(length_scale=np.ones(self._X.shape[1]), nu=2.5) + WhiteKernel(1e-2)
        gp = GaussianProcessRegressor(kernel=kernel, normalize_y=True, random_state=self.seed)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # convergence chatter from L-BFGS at the bounds
            gp.fit(self._X[told], y)
        ei = gaussian_ei(self._X[free], gp, y_opt=float(y.min()), xi=XI)
        best = np.flatnonzero(ei >= ei.max() - 1e-12 * max(abs(ei.max()), 1e-300))
        return int(free[self._rng.choice(best)])
