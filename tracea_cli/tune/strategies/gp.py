"""The Gaussian-process pieces the searches share: fitting a kernel (scikit-optimize's regressor), a posterior that
grows one result at a time, and the acquisition functions.

scikit-optimize and scikit-learn are imported inside the functions that need them (about a second), so importing
a strategy costs nothing until it first models.
"""

from __future__ import annotations

import math
import warnings

import numpy as np


_CONTROLLER = None


def one_blas_thread():
    """A context in which BLAS uses one thread. The matrices are small (hundreds of rows): one thread is faster than
    several contending with a compiler or a timed run for two cores (measured: Cholesky of 200x200 0.2 ms against
    2.7 ms). The libraries are looked up once per process: looking them up costs about 15 ms."""
    global _CONTROLLER
    if _CONTROLLER is None:
        import scipy.linalg  # noqa: F401  (scipy brings its own BLAS: load it before the libraries are looked up)
        from threadpoolctl import ThreadpoolController

        _CONTROLLER = ThreadpoolController()
    return _CONTROLLER.limit(limits=1, user_api="blas")


def fit_kernel(X: np.ndarray, y: np.ndarray, *, lower: np.ndarray, nu: float, fixed: float = 0.0, upper: float = 1e2,
               overlap: int = 0, previous=None, steps: int = 200, seed: int = 0):
    """Maximum-likelihood hyperparameters of constant x Matern(nu, one length scale per column) + white noise.

    `y` is standardised; `lower` bounds each length scale from below (in encoded units), `upper` from above (a
    parameter with a long length scale is one the model has stopped varying); `overlap` > 0: the last `overlap`
    columns of X are value indicators (see `main_effects`), and the kernel adds a fitted multiple of how many
    parameters two configurations share, a main effect per parameter value; `fixed` > 0 instead fixes
    one length scale for every column (only the constant and the noise are fitted); `previous`, a kernel this
    returned before, warm-starts the fit, which then needs only a few L-BFGS `steps`.
    """
    from skopt.learning import GaussianProcessRegressor
    from skopt.learning.gaussian_process.kernels import ConstantKernel, Matern, WhiteKernel

    if fixed > 0:
        matern = Matern(length_scale=np.full(len(lower), fixed), length_scale_bounds="fixed", nu=nu)
    else:
        upper = np.maximum(upper, lower * 1.0001)
        bounds = np.column_stack([lower, np.broadcast_to(upper, lower.shape)])
        matern = Matern(length_scale=np.clip(np.maximum(0.5, lower), lower, upper), length_scale_bounds=bounds, nu=nu)
    if overlap:
        from sklearn.gaussian_process.kernels import Product

        # Product spelled out: skopt's ConstantKernel would take a kernel it does not know for a constant
        signal = Product(ConstantKernel(1.0, (1e-2, 1e2)), WithOverlap(matern, columns=overlap))
        kernel = signal + WhiteKernel(1e-2, (1e-6, 1e0))
    else:
        kernel = ConstantKernel(1.0, (1e-2, 1e2)) * matern + WhiteKernel(1e-2, (1e-6, 1e0))
    if previous is not None:
        kernel.theta = np.clip(previous.theta, kernel.bounds[:, 0], kernel.bounds[:, 1])
    gp = GaussianProcessRegressor(kernel=kernel, optimizer=_lbfgs(steps), normalize_y=False, random_state=seed)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # convergence chatter from L-BFGS at the bounds
        gp.fit(X, y)
    return gp.kernel_


def main_effects(positions: np.ndarray, sizes) -> np.ndarray:
    """Value indicators: per parameter with two values or more, one column per value, scaled so that the dot
    product of two rows is the share of parameters on which they agree (1 for a configuration with itself)."""
    columns = [(positions[:, j] == v) for j, k in enumerate(sizes) if k > 1 for v in range(k)]
    if not columns:
        return np.zeros((len(positions), 0))
    used = sum(1 for k in sizes if k > 1)
    return np.column_stack(columns).astype(np.float64) / np.sqrt(used)


def _with_overlap_class():
    """WithOverlap, built on first use so that importing this module does not import scikit-learn."""
    from sklearn.gaussian_process.kernels import Hyperparameter, Kernel

    class WithOverlap(Kernel):
        """matern(x[:-columns], y[:-columns]) + weight * <x[-columns:], y[-columns:]> (scikit-learn kernel)."""

        def __init__(self, matern, columns=1, weight=0.5, weight_bounds=(1e-3, 1e2)):
            self.matern, self.columns, self.weight, self.weight_bounds = matern, columns, weight, weight_bounds

        def get_params(self, deep=True):
            params = dict(matern=self.matern, columns=self.columns, weight=self.weight, weight_bounds=self.weight_bounds)
            if deep:
                params.update(("matern__" + k, v) for k, v in self.matern.get_params().items())
            return params

        @property
        def hyperparameter_weight(self):
            return Hyperparameter("weight", "numeric", self.weight_bounds)

        @property
        def hyperparameters(self):
            nested = [Hyperparameter("matern__" + h.name, h.value_type, h.bounds, h.n_elements)
                      for h in self.matern.hyperparameters]
            return nested + [self.hyperparameter_weight]

        @property
        def theta(self):
            return np.append(self.matern.theta, np.log(self.weight))

        @theta.setter
        def theta(self, theta):
            self.matern.theta = theta[:-1]
            self.weight = float(np.exp(theta[-1]))

        @property
        def bounds(self):
            return np.vstack([self.matern.bounds, np.log(np.array([self.weight_bounds]))])

        def __call__(self, X, Y=None, eval_gradient=False):
            A, B = X[:, : -self.columns], X[:, -self.columns :]
            if Y is None:
                share = B @ B.T
                if eval_gradient:
                    K, dK = self.matern(A, eval_gradient=True)
                    return K + self.weight * share, np.dstack([dK, (self.weight * share)[:, :, None]])
                return self.matern(A) + self.weight * share
            if eval_gradient:
                raise ValueError("gradient only when Y is None")
            return self.matern(A, Y[:, : -self.columns]) + self.weight * (B @ Y[:, -self.columns :].T)

        def diag(self, X):
            return self.matern.diag(X[:, : -self.columns]) + self.weight * (X[:, -self.columns :] ** 2).sum(axis=1)

        def is_stationary(self):
            return False

    return WithOverlap


def WithOverlap(matern, columns):  # noqa: N802 (a kernel, named as one)
    return _with_overlap_class()(matern, columns=columns)


class Posterior:
    """A GP posterior with fixed hyperparameters, grown one datum at a time, over the rows of `X`.

    Keeps the Cholesky factor L of the training covariance and, for the tracked rows (`rows`, or all of X),
    V = L^-1 K(train, rows). Adding a point appends one row to each (O(n) and O(n R) for n data and R rows), so a
    proposal costs O(n R) instead of the O(n^2 R) of computing the posterior afresh. The mean is V^T L^-1 y, the
    variance signal - colsum(V^2). Rows that are not tracked are computed afresh when asked for (O(n^2) each).
    """

    def __init__(self, kernel, X: np.ndarray, *, rows: np.ndarray | None = None) -> None:
        self.kernel = kernel  # k1: signal (constant * Matern, or constant * WithOverlap), k2: white noise
        self._signal = float(kernel.k1.k1.constant_value)
        self._noise = float(kernel.k2.noise_level)
        inner = kernel.k1.k2
        self._overlap = None
        if hasattr(inner, "matern"):  # Matern on the coordinates plus a weighted overlap of value indicators
            self._overlap = X[:, -inner.columns :]
            self._weight = float(inner.weight)
            X, inner = X[:, : -inner.columns], inner.matern
        self._nu = float(inner.nu)
        self._X = X / np.asarray(inner.length_scale, dtype=np.float64)  # distances in length scales
        self.rows = None if rows is None else np.asarray(rows)  # tracked candidate indices, sorted
        if self.rows is not None:
            self._slot = np.full(len(X), -1, dtype=np.int64)
            self._slot[self.rows] = np.arange(len(self.rows))
        n_rows = len(X) if rows is None else len(self.rows)
        self.train: list[int] = []
        self._L = np.zeros((64, 64))
        self._V = np.zeros((64, n_rows))
        self._explained = np.zeros(n_rows)  # colsum(V^2): the variance the data explain at each tracked row

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
        tracked = slice(None) if self.rows is None else self.rows
        L21 = forward(self._L[:n, :n], self._k(self.train, new)).T if n else np.zeros((m, 0))
        K22 = self._k(new, new) - L21 @ L21.T
        K22[np.diag_indices(m)] += self._noise + 1e-8
        L22 = cholesky(K22, lower=True, check_finite=False)
        self._L[n : n + m, :n], self._L[n : n + m, n : n + m] = L21, L22
        V_new = forward(L22, self._k(new, tracked) - L21 @ self._V[:n])
        self._V[n : n + m] = V_new
        self._explained += np.einsum("ij,ij->j", V_new, V_new)
        self.train.extend(new)

    def mark(self) -> tuple[int, np.ndarray]:
        return len(self.train), self._explained.copy()

    def restore(self, mark: tuple[int, np.ndarray]) -> None:
        n, explained = mark
        del self.train[n:]
        self._explained = explained

    def predict(self, indices: np.ndarray, y: np.ndarray | None) -> tuple[np.ndarray | None, np.ndarray]:
        """Posterior mean (given standardised targets `y` for the first len(y) data; None: no mean) and standard
        deviation (of the signal, without noise, all data counted, believed points too) at candidate `indices`."""
        total = len(self.train)
        indices = np.asarray(indices)
        mean = None if y is None else np.empty(len(indices))
        alpha = None if y is None else forward(self._L[: len(y), : len(y)], y)
        explained = np.empty(len(indices))
        where = indices if self.rows is None else self._slot[indices]
        tracked = where >= 0
        if tracked.any():
            at = where[tracked]
            if y is not None:  # one product over every tracked row, then a gather: cheaper than gathering V's columns
                mean[tracked] = (alpha @ self._V[: len(y)])[at]
            explained[tracked] = self._explained[at]
        if not tracked.all():
            fresh = indices[~tracked]
            V = forward(self._L[:total, :total], self._k(self.train, fresh))
            if y is not None:
                mean[~tracked] = V[: len(y)].T @ alpha
            explained[~tracked] = np.einsum("ij,ij->j", V, V)
        prior = self._signal if self._overlap is None else self._signal * (1.0 + self._weight)
        return mean, np.sqrt(np.maximum(prior - explained, 1e-12))

    def sample(self, indices: np.ndarray, y: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        """One joint draw of the signal at candidate `indices` from the posterior (standardised units; every datum
        counted, the first len(y) with their targets, believed points at the mean): Thompson sampling."""
        from scipy.linalg import cholesky

        indices = np.asarray(indices)
        total = len(self.train)
        V = forward(self._L[:total, :total], self._k(self.train, indices))
        mean = V[: len(y)].T @ forward(self._L[: len(y), : len(y)], y)
        cov = self._k(indices, indices) - V.T @ V
        cov[np.diag_indices(len(indices))] += 1e-6 * self._signal
        try:
            root = cholesky(cov, lower=True, check_finite=False)
        except np.linalg.LinAlgError:  # numerically indefinite: independent draws at the marginal deviations
            return mean + np.sqrt(np.maximum(np.diag(cov), 0.0)) * rng.standard_normal(len(indices))
        return mean + root @ rng.standard_normal(len(indices))

    def _k(self, a, b) -> np.ndarray:
        """The signal kernel between candidates `a` and `b` (indices, or a slice): constant x Matern (x plus the
        weighted overlap of their value indicators)."""
        A, B = self._X[a], self._X[b]
        d2 = (A * A).sum(1)[:, None] + (B * B).sum(1)[None, :] - 2.0 * (A @ B.T)
        d = np.sqrt(np.maximum(d2, 0.0))
        if self._nu == 2.5:
            r = math.sqrt(5.0) * d
            K = self._signal * (1.0 + r + r * r / 3.0) * np.exp(-r)
        elif self._nu == 1.5:
            r = math.sqrt(3.0) * d
            K = self._signal * (1.0 + r) * np.exp(-r)
        elif self._nu == 0.5:
            K = self._signal * np.exp(-d)
        else:
            raise ValueError(f"Matern nu={self._nu} is not supported (0.5, 1.5 or 2.5)")
        if self._overlap is not None:
            K += self._signal * self._weight * (self._overlap[a] @ self._overlap[b].T)
        return K


def expected_improvement(mu: np.ndarray, std: np.ndarray, best: float, xi: float) -> np.ndarray:
    """EI for minimisation (skopt's `gaussian_ei`), from a posterior already computed."""
    from skopt.acquisition import gaussian_ei

    return gaussian_ei(np.zeros((len(mu), 1)), _Fixed(mu, std), y_opt=best, xi=xi)


def probability_of_improvement(mu: np.ndarray, std: np.ndarray, best: float, xi: float) -> np.ndarray:
    """PI for minimisation (skopt's `gaussian_pi`: 0 where the posterior has no spread), from a posterior already
    computed."""
    from skopt.acquisition import gaussian_pi

    return gaussian_pi(np.zeros((len(mu), 1)), _Fixed(mu, std), y_opt=best, xi=xi)


def lower_confidence(mu: np.ndarray, std: np.ndarray, kappa: float) -> np.ndarray:
    """Minus skopt's `gaussian_lcb`, so that larger is better, like EI."""
    from skopt.acquisition import gaussian_lcb

    return -gaussian_lcb(np.zeros((len(mu), 1)), _Fixed(mu, std), kappa=kappa)


def _lbfgs(max_steps: int):
    """The likelihood maximiser scikit-learn's GP uses by default, with a bounded number of steps."""

    def optimizer(objective, theta, bounds):
        from scipy.optimize import minimize

        result = minimize(objective, theta, method="L-BFGS-B", jac=True, bounds=bounds, options={"maxiter": max_steps})
        return result.x, result.fun

    return optimizer


def forward(L: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Solve L x = b for lower-triangular L."""
    from scipy.linalg import solve_triangular

    if len(b) == 0:
        return np.empty((0,) + np.shape(b)[1:])
    return solve_triangular(L, b, lower=True, check_finite=False)


class _Fixed:
    """Posterior mean and deviation already computed, shown to skopt's acquisitions as a model."""

    def __init__(self, mu: np.ndarray, std: np.ndarray) -> None:
        self.mu, self.std = mu, std

    def predict(self, X, return_std: bool = False):
        return (self.mu, self.std) if return_std else self.mu
