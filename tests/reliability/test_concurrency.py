"""Processes writing at once (2 x 500 and 4 x 250 trials) lose nothing and leave an intact database."""

from __future__ import annotations

import multiprocessing
import sqlite3
import time

import pytest

from tracea_cli.cache import CacheKey, Trial, TuningCache



def _key(m: int) -> CacheKey:
    sizes = {"m": m, "n": m, "k": m}
    return CacheKey(op="gemm", backend="cpu", dtype="fp32", problem={**sizes, "layout": "nn", "epilogue": "none"},
                    sizes=sizes, device_class="test", source_hash="s")


def _writer(path: str, writer: int, n_trials: int, barrier, errors) -> None:
    try:
        barrier.wait(timeout=60)  # both open the new file at the same moment...
        with TuningCache.open(path) as cache:
            barrier.wait(timeout=60)  # ...and start writing at the same moment
            shared, own = _key(1024), _key(64 * (writer + 1))
            for i in range(n_trials):
                trial = Trial({"writer": writer, "i": i}, samples_ms=(1.0 + i,), median_ms=1.0 + i, cv=0.0)
                cache.record_trial(shared, trial)
                if i % 50 == 0:
                    cache.record_trial(own, trial)
                    cache.set_winner(shared, trial)
                    cache.record_search(shared, strategy="random", budget=n_trials, evaluations=i + 1, converged=False)
    except BaseException as e:  # reported to the parent: an exception in a child is otherwise silent
        errors.put(f"writer {writer}: {type(e).__name__}: {e}")
        raise


@pytest.mark.timeout(180)
@pytest.mark.parametrize("writers, n_trials", [(2, 500), (4, 250)])
def test_processes_writing_at_once_lose_nothing(tmp_path, writers, n_trials):
    try:
        ctx = multiprocessing.get_context("fork")
    except ValueError:
        pytest.skip("needs the fork start method (POSIX)")
    path = tmp_path / "tuning.sqlite3"
    barrier, errors = ctx.Barrier(writers), ctx.Queue()
    procs = [ctx.Process(target=_writer, args=(str(path), w, n_trials, barrier, errors)) for w in range(writers)]
    began = time.monotonic()
    for p in procs:
        p.start()
    for p in procs:
        p.join(timeout=150)
    elapsed = time.monotonic() - began
    problems = []
    while not errors.empty():
        problems.append(errors.get())
    assert not problems, problems
    assert [p.exitcode for p in procs] == [0] * writers

    with TuningCache.open(path) as cache:
        assert cache.warnings == []
        trials = cache.trials(_key(1024))
        assert len(trials) == writers * n_trials  # no acknowledged trial lost
        assert {(t.config["writer"], t.config["i"]) for t in trials} == {(w, i) for w in range(writers) for i in range(n_trials)}
        assert all(len(cache.trials(_key(64 * (w + 1)))) == n_trials // 50 for w in range(writers))
        assert cache.winner(_key(1024)) is not None and cache.search_state(_key(1024)) is not None
        assert len(cache.keys()) == 1 + writers
    conn = sqlite3.connect(path)
    assert conn.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
    assert conn.execute("PRAGMA foreign_key_check").fetchall() == []
    conn.close()
    print(f"{writers} x {n_trials} trials written concurrently in {elapsed:.2f} s")


def _open_and_write(path: str, barrier, errors) -> None:
    try:
        barrier.wait(timeout=60)
        with TuningCache.open(path) as cache:
            cache.record_trial(_key(8), Trial({"pid": multiprocessing.current_process().pid}, median_ms=1.0, samples_ms=(1.0,)))
    except BaseException as e:
        errors.put(f"{type(e).__name__}: {e}")
        raise


@pytest.mark.timeout(120)
@pytest.mark.parametrize("bad", ["garbage", "foreign"])
def test_processes_finding_a_bad_file_at_once_move_it_once_and_lose_nothing(tmp_path, bad):
    try:
        ctx = multiprocessing.get_context("fork")
    except ValueError:
        pytest.skip("needs the fork start method (POSIX)")
    path = tmp_path / "tuning.sqlite3"
    if bad == "garbage":
        path.write_bytes(b"junk" * 1000)
        (tmp_path / "tuning.sqlite3-wal").write_bytes(b"junk wal" * 100)
    else:
        conn = sqlite3.connect(path)
        conn.execute("CREATE TABLE other (x)")
        conn.commit()
        conn.close()
    n = 4
    barrier, errors = ctx.Barrier(n), ctx.Queue()
    procs = [ctx.Process(target=_open_and_write, args=(str(path), barrier, errors)) for _ in range(n)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(timeout=150)
    assert errors.empty() and [p.exitcode for p in procs] == [0] * n
    moved = [p.name for p in tmp_path.iterdir() if ".corrupt-" in p.name or ".foreign-" in p.name]
    assert len([m for m in moved if not m.endswith(("-wal", "-shm"))]) == 1, moved
    with TuningCache.open(path) as cache:
        assert len(cache.trials(_key(8))) == n
