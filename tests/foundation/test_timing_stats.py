"""The timing harness with a fake clock, and the statistics layer on known inputs."""

import math

import pytest

from tracea_cli import stats
from tracea_cli.timing import HostClock, TimingPolicy, measure


class FakeClock:
    """Each start/stop pair returns the next scripted duration."""

    def __init__(self, durations_ms):
        self.durations = list(durations_ms)
        self.started = 0

    def start(self):
        self.started += 1

    def stop(self):
        return self.durations.pop(0)


class FakeWall:
    def __init__(self, step_s):
        self.t = 0.0
        self.step = step_s

    def __call__(self):
        self.t += self.step
        return self.t


def test_measure_stops_when_noise_is_low():
    clock = FakeClock([1.0] * 100)
    calls = []
    s = measure(lambda: calls.append(1), clock=clock, policy=TimingPolicy(warmup=2, min_samples=5, max_samples=50, target_cv=0.01), wall_clock=FakeWall(0.0))
    assert s.n == 5  # cv 0 after min_samples
    assert len(calls) == 2 + 5  # warm-up runs too
    assert s.times_ms == (1.0,) * 5


def test_measure_keeps_sampling_noisy_runs_until_max():
    durations = [1.0, 2.0] * 50
    s = measure(lambda: None, clock=FakeClock(durations), policy=TimingPolicy(warmup=0, min_samples=3, max_samples=20, target_cv=0.01, max_seconds=100), wall_clock=FakeWall(0.0))
    assert s.n == 20
    assert s.times_ms[:4] == (1.0, 2.0, 1.0, 2.0)  # raw samples in order


def test_measure_respects_the_time_limit():
    s = measure(lambda: None, clock=FakeClock([1.0, 3.0] * 100), policy=TimingPolicy(warmup=0, min_samples=4, max_samples=100, target_cv=0.0, max_seconds=1.0), wall_clock=FakeWall(0.3))
    assert s.n == 4  # the limit passed after the 3rd sample, but min_samples holds


def test_inner_repeats_divide_and_prepare_runs_outside_the_clock():
    order = []

    class Clock(FakeClock):
        def start(self):
            order.append("start")

        def stop(self):
            order.append("stop")
            return 10.0

    s = measure(lambda: order.append("run"), clock=Clock([]), prepare=lambda: order.append("prep"),
                policy=TimingPolicy(warmup=0, min_samples=1, max_samples=1, inner_repeats=5), wall_clock=FakeWall(0.0))
    assert s.times_ms == (2.0,)
    assert order == ["prep", "start"] + ["run"] * 5 + ["stop"]


def test_throttle_probe_flags_samples():
    flags = iter([False, False, True, False])  # first call resets after warm-up
    s = measure(lambda: None, clock=FakeClock([1.0] * 3), throttle_probe=lambda: next(flags),
                policy=TimingPolicy(warmup=1, min_samples=3, max_samples=3), wall_clock=FakeWall(0.0))
    assert s.throttled == (False, True, False) and s.any_throttled


def test_host_clock_uses_the_injected_counter():
    ticks = iter([1_000_000, 3_500_000])
    c = HostClock(now_ns=lambda: next(ticks))
    c.start()
    assert c.stop() == pytest.approx(2.5)


def test_policy_rejects_nonsense():
    with pytest.raises(ValueError):
        TimingPolicy(min_samples=5, max_samples=2)


def test_summary_of_known_samples():
    s = stats.summarize([1.0, 2.0, 3.0, 4.0, 5.0])
    assert (s.median, s.q1, s.q3, s.min, s.n) == (3.0, 2.0, 4.0, 1.0, 5)
    assert s.cv == pytest.approx(math.sqrt(2.5) / 3.0)
    assert stats.summarize([2.0]).cv == 0.0
    with pytest.raises(ValueError):
        stats.summarize([])


def test_speedup_interval_brackets_a_clear_speedup():
    base = [10.0, 10.2, 9.9, 10.1, 10.0, 10.3, 9.8, 10.0]
    cand = [5.0, 5.1, 4.9, 5.0, 5.05, 4.95, 5.0, 5.1]
    iv = stats.speedup_interval(base, cand)
    assert iv.estimate == pytest.approx(2.0, rel=0.02)
    assert 1.9 < iv.low <= iv.estimate <= iv.high < 2.1
    assert stats.speedup_interval(base, cand) == iv  # deterministic


def test_compare_flags_a_real_regression_but_not_noise():
    import numpy as np

    rng = np.random.default_rng(1)
    old = list(1.0 + 0.02 * rng.standard_normal(30))
    noise = list(1.0 + 0.02 * rng.standard_normal(30))
    slower = list(1.3 + 0.02 * rng.standard_normal(30))
    assert not stats.compare(old, noise).significant
    change = stats.compare(old, slower)
    assert change.regression and change.significant and change.ratio.estimate == pytest.approx(1.3, rel=0.05)
    assert stats.compare(slower, old).improvement


def test_geometric_mean_skips_nonpositive():
    assert stats.geometric_mean([1.0, 4.0, 0.0, float("inf")]) == pytest.approx(2.0)
