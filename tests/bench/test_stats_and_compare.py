"""Speed-up intervals in bench results, and the --compare decision: a real regression is flagged, noise is not."""

import sys
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from bench_fakes import FakeEngine, samples  # noqa: E402

from tracea_cli.bench.compare import compare_results  # noqa: E402
from tracea_cli.bench.results import BenchResults, make_row  # noqa: E402
from tracea_cli.bench.runner import BenchRequest, run_bench  # noqa: E402
from tracea_cli.bench.suites import builtin_suite  # noqa: E402
from tracea_cli.stats import speedup_interval  # noqa: E402


def _run(speedup=1.25, **kw) -> BenchResults:
    return run_bench(BenchRequest(suite=builtin_suite("quick", backend="cpu", dtypes=("fp32",))), FakeEngine(speedup=speedup, **kw), created="2026-11-29T00:00:00+00:00")


def _retimed(results: BenchResults, factor: float, seed: int, noise: float = 0.01) -> BenchResults:
    """The same results with every row re-measured: times scaled by `factor`, fresh noise from `seed`."""
    probs = {p.problem: p for p in results.problems}
    rows = []
    for i, r in enumerate(results.results):
        s = samples(r.median_ms * factor, n=r.n, noise=noise, seed=seed + i)
        rows.append(make_row(problem=probs[r.problem], provider=r.provider, kind=r.kind, samples_ms=s.times_ms, config=r.config))
    return replace(results, results=tuple(rows))


def test_speedup_interval_of_each_problem_comes_from_its_samples():
    results = _run(speedup=1.25)
    for p in results.problems:
        tuned, base = results.rows_for(p.problem)
        assert tuned.provider == "tracea" and base.provider == "numpy" and tuned.speedup_over == "numpy"
        expected = speedup_interval(base.samples_ms, tuned.samples_ms, seed=0)
        assert tuned.speedup == expected
        assert tuned.speedup.low < 1.25 < tuned.speedup.high or abs(tuned.speedup.estimate - 1.25) < 0.02
        assert tuned.speedup.low > 1.0  # 25% faster with 1% noise: the whole interval is above 1
        assert base.speedup is None


def test_speedup_interval_straddles_one_when_there_is_no_difference():
    results = _run(speedup=1.0)
    for p in results.problems:
        tuned = results.tuned(p.problem)
        assert tuned.speedup.low < 1.0 < tuned.speedup.high


def test_compare_flags_a_real_regression():
    old = _run()
    new = _retimed(old, 1.20, seed=100)  # 20% slower, 1% noise
    c = compare_results(old, new, against="old.json")
    assert len(c.changes) == len(old.results)
    assert all(ch.regression and ch.significant and not ch.improvement for ch in c.changes)
    assert all(1.15 < ch.ratio.estimate < 1.25 and ch.ratio.low > 1.05 for ch in c.changes)
    assert len(c.regressions) == len(c.changes)


def test_compare_does_not_flag_noise():
    old = _run()
    new = _retimed(old, 1.0, seed=200, noise=0.03)  # same speed, more noise
    c = compare_results(old, new, against="old.json")
    assert c.changes and not any(ch.significant for ch in c.changes)
    assert c.regressions == ()


def test_compare_does_not_flag_a_certain_but_small_change():
    old = _run()
    new = _retimed(old, 1.03, seed=300, noise=0.001)  # 3% slower with almost no noise: below the 5% threshold
    c = compare_results(old, new)
    assert not any(ch.regression for ch in c.changes)


def test_compare_marks_an_improvement_not_a_regression():
    old = _run()
    new = _retimed(old, 0.7, seed=400)
    c = compare_results(old, new)
    assert all(ch.improvement and not ch.regression for ch in c.changes)


def test_compare_lists_rows_in_only_one_set_and_warns_about_another_device():
    old = _run()
    new = replace(_retimed(old, 1.0, seed=500), results=_retimed(old, 1.0, seed=500).results[:-1])
    new = replace(new, environment=replace(new.environment, device_class="other-cpu", device="Other CPU"))
    c = compare_results(old, new)
    assert c.unmatched == (f"{old.results[-1].problem} / {old.results[-1].provider}",)
    assert c.warnings and "Other CPU" in c.warnings[0]
