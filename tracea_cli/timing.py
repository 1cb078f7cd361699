"""The timing harness: run a callable repeatedly and return raw samples. Statistics live in `stats`.

One harness for doctor, tune and bench. The clock is injected (a monotonic host clock on the CPU, device events on
the GPU, a fake in tests), so this module never imports a GPU library.

The timed sequence is `run()`: whatever a kernel needs before each launch (zeroing a split-K workspace) belongs in
it. `prepare()` runs before each sample, outside the timed region: flushing L2 or rotating inputs goes there.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass
from typing import Callable, Protocol


class Clock(Protocol):
    """Times one region. `start()` then `stop()` returns the region's elapsed milliseconds."""

    def start(self) -> None: ...

    def stop(self) -> float: ...


class ThrottleProbe(Protocol):
    """Says whether the device was throttled (clock-event reasons other than idle) since the last call."""

    def __call__(self) -> bool: ...


class HostClock:
    """Monotonic host clock for CPU work (`time.perf_counter_ns`)."""

    def __init__(self, now_ns: Callable[[], int] = time.perf_counter_ns) -> None:
        self._now_ns = now_ns
        self._t0 = 0

    def start(self) -> None:
        self._t0 = self._now_ns()

    def stop(self) -> float:
        return (self._now_ns() - self._t0) / 1e6


@dataclass(frozen=True)
class TimingPolicy:
    """How long and how often to measure.

    Sampling stops once `min_samples` are taken and the coefficient of variation of the samples is at most
    `target_cv`, or at `max_samples`, or when `max_seconds` of wall time have passed (at least `min_samples`
    are always taken unless the first sample alone exceeds `max_seconds`).
    """

    warmup: int = 3
    min_samples: int = 10
    max_samples: int = 100
    target_cv: float = 0.02
    max_seconds: float = 2.0
    inner_repeats: int = 1  # launches per sample (a CUDA graph replay of several launches, say); samples are per launch

    def __post_init__(self) -> None:
        if self.min_samples < 1 or self.max_samples < self.min_samples:
            raise ValueError("need 1 <= min_samples <= max_samples")
        if self.inner_repeats < 1 or self.warmup < 0:
            raise ValueError("inner_repeats must be >= 1 and warmup >= 0")


QUICK = TimingPolicy(warmup=2, min_samples=5, max_samples=20, target_cv=0.05, max_seconds=0.5)


@dataclass(frozen=True)
class Samples:
    """Raw measurements: milliseconds per launch, and whether each sample overlapped throttling."""

    times_ms: tuple[float, ...]
    throttled: tuple[bool, ...]
    wall_s: float

    @property
    def n(self) -> int:
        return len(self.times_ms)

    @property
    def any_throttled(self) -> bool:
        return any(self.throttled)


def _cv(values: list[float]) -> float:
    if len(values) < 2:
        return float("inf")
    mean = statistics.fmean(values)
    return statistics.stdev(values) / mean if mean > 0 else float("inf")


def measure(
    run: Callable[[], object],
    *,
    clock: Clock,
    policy: TimingPolicy = TimingPolicy(),
    prepare: Callable[[], object] | None = None,
    throttle_probe: ThrottleProbe | None = None,
    wall_clock: Callable[[], float] = time.monotonic,
) -> Samples:
    """Warm up, then time `run` until the policy says stop. Returns raw per-launch samples."""
    for _ in range(policy.warmup):
        if prepare is not None:
            prepare()
        run()
    if throttle_probe is not None:
        throttle_probe()  # reset: warm-up throttling does not count
    times: list[float] = []
    throttled: list[bool] = []
    began = wall_clock()
    while len(times) < policy.max_samples:
        if prepare is not None:
            prepare()
        clock.start()
        for _ in range(policy.inner_repeats):
            run()
        times.append(clock.stop() / policy.inner_repeats)
        throttled.append(bool(throttle_probe()) if throttle_probe is not None else False)
        elapsed = wall_clock() - began
        if len(times) >= policy.min_samples and _cv(times) <= policy.target_cv:
            break
        if elapsed >= policy.max_seconds and (len(times) >= policy.min_samples or len(times) == 1 and elapsed > 2 * policy.max_seconds):
            break
    return Samples(times_ms=tuple(times), throttled=tuple(throttled), wall_s=wall_clock() - began)
