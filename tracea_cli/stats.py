"""Statistics over raw timing samples: summaries, speed-up intervals, regression decisions.

Pure functions over sequences of floats; no clocks, no devices. Units are in the names.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

import numpy as np


@dataclass(frozen=True)
class Summary:
    median: float
    q1: float
    q3: float
    mean: float
    min: float
    cv: float  # standard deviation over mean; 0 for a single sample
    n: int


def summarize(samples: Sequence[float]) -> Summary:
    if len(samples) == 0:
        raise ValueError("no samples to summarize")
    a = np.asarray(samples, dtype=np.float64)
    mean = float(a.mean())
    cv = float(a.std(ddof=1) / mean) if a.size > 1 and mean > 0 else 0.0
    q1, med, q3 = (float(x) for x in np.percentile(a, [25, 50, 75]))
    return Summary(median=med, q1=q1, q3=q3, mean=mean, min=float(a.min()), cv=cv, n=int(a.size))


@dataclass(frozen=True)
class Interval:
    """A point estimate with a two-sided confidence interval [low, high]."""

    estimate: float
    low: float
    high: float
    confidence: float

    def contains(self, value: float) -> bool:
        return self.low <= value <= self.high


def speedup_interval(
    baseline: Sequence[float],
    candidate: Sequence[float],
    *,
    confidence: float = 0.95,
    resamples: int = 2000,
    seed: int = 0,
) -> Interval:
    """Speed-up of `candidate` over `baseline` (ratio of median times, >1 means faster), with a bootstrap interval.

    Each bootstrap round resamples both sets with replacement and takes the ratio of their medians; the interval is
    the percentile interval of those ratios. Deterministic for a given seed.
    """
    b = np.asarray(baseline, dtype=np.float64)
    c = np.asarray(candidate, dtype=np.float64)
    if b.size == 0 or c.size == 0:
        raise ValueError("both sample sets must be non-empty")
    estimate = float(np.median(b) / np.median(c))
    rng = np.random.default_rng(seed)
    rb = np.median(rng.choice(b, size=(resamples, b.size), replace=True), axis=1)
    rc = np.median(rng.choice(c, size=(resamples, c.size), replace=True), axis=1)
    ratios = rb / rc
    alpha = (1.0 - confidence) / 2.0
    low, high = (float(x) for x in np.quantile(ratios, [alpha, 1.0 - alpha]))
    return Interval(estimate=estimate, low=min(low, estimate), high=max(high, estimate), confidence=confidence)


@dataclass(frozen=True)
class Change:
    """How a new measurement compares with an old one: time ratio new/old with its interval."""

    ratio: Interval  # new time / old time: above 1 is slower
    significant: bool
    regression: bool
    improvement: bool


def compare(
    old: Sequence[float],
    new: Sequence[float],
    *,
    threshold: float = 0.05,
    confidence: float = 0.95,
    seed: int = 0,
) -> Change:
    """Decide whether `new` is a significant change from `old`.

    Significant means the whole confidence interval of the time ratio lies beyond `threshold` (5% by default) on one
    side of 1: noise that straddles 1, or a shift too small to matter, is not flagged.
    """
    s = speedup_interval(new, old, confidence=confidence, seed=seed)  # median(new)/median(old)
    ratio = Interval(estimate=s.estimate, low=s.low, high=s.high, confidence=confidence)
    regression = ratio.low > 1.0 + threshold
    improvement = ratio.high < 1.0 - threshold
    return Change(ratio=ratio, significant=regression or improvement, regression=regression, improvement=improvement)


def geometric_mean(values: Sequence[float]) -> float:
    vals = [v for v in values if v > 0 and math.isfinite(v)]
    return math.exp(sum(math.log(v) for v in vals) / len(vals)) if vals else float("nan")
