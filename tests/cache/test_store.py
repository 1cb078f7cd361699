"""TuningCache: trials, failures, winners, search state, hits, warm-start lookups, maintenance."""

from __future__ import annotations

import math
import time

import pytest

from tracea_cli.backends.base import Evaluation, Status
from tracea_cli.cache import CacheKey, Trial, TuningCache
from tracea_cli.errors import UsageError
from tracea_cli.timing import Samples


def test_key_id_is_stable_labelled_and_order_independent(mk_key):
    a = mk_key(256)
    b = CacheKey(op="gemm", backend="cpu", dtype="fp32", problem={"layout": "nn", "k": 256, "epilogue": "none", "n": 256,
                                                                  "m": 256},
                 sizes={"m": 256, "n": 256, "k": 256}, device_class="test-cpu | 2 threads | avx512", source_hash="src-1",
                 toolchain={"numba": "0.60.0"})
    assert a.digest == b.digest and len(a.id) == 12 and a.id == a.digest[:12]
    assert mk_key(1, n=2, k=3).shape_text == "1x2x3"  # sizes in the op's order
    assert hash(a) == hash(mk_key(256))  # hashable despite dict inputs
    # every labelled field takes part in the id
    for change in [dict(dtype="fp64"), dict(layout="nt"), dict(device_class="other"), dict(source_hash="src-2"),
                   dict(toolchain={"numba": "0.61.0"}), dict(epilogue="bias"), dict(arch="sm_90"), dict(backend="cuda"),
                   dict(schema_version=2)]:
        assert mk_key(256, **change).digest != a.digest, change
    assert mk_key(512).digest != a.digest
    assert a.bucket == {"m": 8, "n": 8, "k": 8}
    with pytest.raises(ValueError):
        mk_key(0)


def test_trials_are_kept_in_order_with_every_field(cache, mk_key, mk_trial):
    key = mk_key()
    t1 = mk_trial(32, 2.0, timestamp=1000.0)
    t2 = mk_trial(64, status="timeout", reason="ran past 60 s", timestamp=1001.0)
    t3 = mk_trial(128, 1.5, timestamp=1002.0)
    for t in (t1, t2, t3):
        cache.record_trial(key, t)
    assert cache.trials(key) == [t1, t2, t3]
    assert cache.trials(mk_key(512)) == []
    assert cache.failed_configs(key) == {t2.config_key: ("timeout", "ran past 60 s")}


def test_trial_accepts_a_status_enum_and_rejects_unknown_statuses():
    assert Trial({"a": 1}, status=Status.WRONG_RESULT).status == "wrong_result"
    with pytest.raises(ValueError):
        Trial({"a": 1}, status="exploded")


def test_trial_from_evaluation_summarises_the_raw_samples():
    ev = Evaluation(Status.OK, samples=Samples((1.0, 2.0, 3.0), (False,) * 3, 0.01), rel_error=1e-6, compile_s=0.5)
    t = Trial.from_evaluation({"block": 8}, ev, timestamp=5.0)
    assert (t.median_ms, t.samples_ms, t.rel_error, t.compile_s, t.timestamp) == (2.0, (1.0, 2.0, 3.0), 1e-6, 0.5, 5.0)
    assert t.cv == pytest.approx(0.5)
    bad = Trial.from_evaluation({"block": 8}, Evaluation(Status.CRASHED, "worker died (SIGSEGV)"))
    assert (bad.status, bad.median_ms, bad.samples_ms) == ("crashed", None, ())


def test_a_nan_error_is_stored_as_null(cache, mk_key, mk_trial):
    key = mk_key()
    cache.record_trial(key, mk_trial(8, status="wrong_result", rel_error=math.nan))
    assert cache.trials(key)[0].rel_error is None
    assert mk_trial(8, status="wrong_result", rel_error=math.nan).as_dict()["rel_error"] is None


def test_winner_and_baseline_replace_earlier_ones(cache, mk_key, mk_trial):
    key = mk_key()
    assert cache.winner(key) is None and cache.baseline(key) is None
    cache.set_winner(key, mk_trial(32, 2.0))
    cache.set_winner(key, mk_trial(64, 1.0))
    assert cache.winner(key).config == {"block": 64, "order": "ijk"}
    cache.set_baseline(key, "numpy", mk_trial(config={}, median_ms=3.0))
    name, base = cache.baseline(key)
    assert name == "numpy" and base.median_ms == 3.0
    with pytest.raises(ValueError):
        cache.set_winner(key, mk_trial(8, status="wrong_result"))


def test_hit_needs_a_winner_and_enough_search(cache, mk_key, mk_trial):
    key = mk_key()
    assert not cache.is_hit(key, 10)
    cache.record_search(key, strategy="bayes", budget=10, evaluations=10, converged=False)
    assert not cache.is_hit(key, 10)  # no winner yet
    cache.set_winner(key, mk_trial(32, 1.0))
    assert cache.is_hit(key, 10) and cache.is_hit(key, 5) and not cache.is_hit(key, 11)
    first = cache.search_state(key)
    cache.record_search(key, strategy="bayes", budget=40, evaluations=23, converged=True)
    state = cache.search_state(key)
    assert (state.budget, state.evaluations, state.converged, state.started) == (40, 23, True, first.started)
    assert cache.is_hit(key, 1000)  # converged


def test_forget_removes_everything_about_a_key(cache, mk_key, mk_trial):
    key, other = mk_key(256), mk_key(512)
    for k in (key, other):
        cache.record_trial(k, mk_trial(32, 1.0))
        cache.set_winner(k, mk_trial(32, 1.0))
        cache.record_search(k, strategy="random", budget=1, evaluations=1, converged=False)
    cache.forget(key)
    assert cache.trials(key) == [] and cache.winner(key) is None and cache.search_state(key) is None
    assert cache.keys() == [other] and len(cache.trials(other)) == 1


def test_nearest_winners_rank_by_log2_distance_within_the_family(cache, mk_key, mk_trial):
    here = mk_key(2048)
    for m, block in [(1024, 16), (4096, 64), (256, 8), (2048 * 1024, 4)]:
        cache.set_winner(mk_key(m), mk_trial(block, 1.0))
    cache.set_winner(mk_key(2048, n=2048, k=1024), mk_trial(32, 1.0))  # distance 1 in k only
    cache.set_winner(mk_key(2048), mk_trial(99, 1.0))  # the same shape: not a neighbour
    cache.set_winner(mk_key(1024, dtype="fp64"), mk_trial(77, 1.0))  # another family
    cache.set_winner(mk_key(1024, device_class="other"), mk_trial(78, 1.0))
    cache.set_winner(mk_key(4096, source_hash="src-old"), mk_trial(64, 1.0))  # same config again: listed once
    near = cache.nearest_winners(here, limit=3)
    assert [c["block"] for _, c in near] == [32, 16, 64]
    assert near[1][0] == {"m": 1024, "n": 1024, "k": 1024}
    assert len(cache.nearest_winners(here, limit=10)) == 5


def test_find_winners_matches_the_exact_problem_on_any_device_class(cache, mk_key, mk_trial):
    a = mk_key(1024, backend="cuda", device_class="H200", arch="sm_90")
    b = mk_key(1024, backend="cuda", device_class="A100", arch="sm_80")
    cache.set_winner(a, mk_trial(64, 2.0))
    cache.set_winner(b, mk_trial(32, 1.0))
    cache.set_winner(mk_key(1024, backend="cuda", device_class="L4", epilogue="bias"), mk_trial(16, 0.5))
    cache.set_winner(mk_key(2048, backend="cuda", device_class="H200"), mk_trial(128, 1.0))
    cache.record_trial(mk_key(1024, backend="cuda", device_class="no winner"), mk_trial(8, 1.0))
    problem = {"m": 1024, "n": 1024, "k": 1024, "layout": "nn", "epilogue": "none"}
    found = cache.find_winners("gemm", "cuda", "fp32", problem)
    assert [(k.device_class, t.config["block"]) for k, t in found] == [("A100", 32), ("H200", 64)]
    assert len(cache.find_winners("gemm", "cuda", "fp32", {**problem, "epilogue": "bias"})) == 1
    assert cache.find_winners("gemm", "cpu", "fp32", problem) == []


def test_resolve_accepts_unique_prefixes_only(cache, mk_key, mk_trial):
    key = mk_key()
    cache.record_trial(key, mk_trial())
    assert cache.resolve(key.id) == key and cache.resolve(key.digest[:5].upper()) == key
    for bad in ("zzzz", "12", "0" * 12 if not key.id.startswith("0") else "f" * 12):
        with pytest.raises(UsageError):
            cache.resolve(bad)


def test_summaries_count_trials_and_failures(cache, mk_key, mk_trial):
    key = mk_key()
    cache.record_trial(key, mk_trial(8, 2.0))
    cache.record_trial(key, mk_trial(16, status="compile_error"))
    cache.set_winner(key, mk_trial(8, 2.0))
    (s,) = cache.summaries()
    assert (s.key, s.trials, s.failed, s.winner_ms) == (key, 2, 1, 2.0)


def test_clear_removes_everything(cache, mk_key, mk_trial):
    for m in (64, 128):
        cache.record_trial(mk_key(m), mk_trial())
    assert cache.clear() == 2
    assert cache.keys() == [] and cache.summaries() == []


def test_prune_rules(cache, mk_key, mk_trial):
    now = time.time()
    old, fresh, stale, old_schema = mk_key(64), mk_key(128), mk_key(256, source_hash="gone"), mk_key(512, schema_version=0)
    for k in (old, fresh, stale, old_schema):
        cache.record_trial(k, mk_trial(8, 1.0, timestamp=now - 30 * 86400))
        cache.record_trial(k, mk_trial(16, status="timeout", timestamp=now - 30 * 86400))
        cache.record_trial(k, mk_trial(32, status="crashed", timestamp=now - 3600))
    # make `old` look untouched for 30 days
    cache._conn.execute("UPDATE keys SET updated = ? WHERE id = ?", (now - 30 * 86400, old.digest))

    dry = cache.prune(older_than_days=7, is_current=lambda k: k.source_hash != "gone", dry_run=True)
    assert (dry.keys_removed, dry.trials_removed, dry.dry_run) == (3, 9, True)
    assert len(cache.keys()) == 4  # nothing removed

    report = cache.prune(older_than_days=7, keep_failed=False, is_current=lambda k: k.source_hash != "gone")
    assert report.keys_removed == 3  # old schema, stale sources, untouched for 30 days
    assert cache.keys() == [fresh]
    # the 30-day-old timeout went, the 1-hour-old crash stays (younger than 7 days)
    assert [t.status for t in cache.trials(fresh)] == ["ok", "crashed"]
    assert report.trials_removed == 9 + 1
    cache.prune(keep_failed=False)  # no age: every failed trial goes
    assert [t.status for t in cache.trials(fresh)] == ["ok"]


def test_open_makes_the_folder_and_reopens(cache_path, mk_key, mk_trial):
    with TuningCache.open(cache_path) as c:
        c.record_trial(mk_key(), mk_trial())
        assert c.warnings == []
    with TuningCache.open(cache_path) as c:
        assert len(c.trials(mk_key())) == 1
