"""A full disk is not a damaged cache, and a cache damaged in the middle is moved aside (kept, never deleted) with a
warning and replaced by a new one, so that commands go on. Real SQLite errors throughout: the full disk is SQLite's
own SQLITE_FULL (a page limit set on the connection, which is how SQLite reports a disk that is out of space), the
damage is garbage written into the file's middle; the code under test is not patched."""

from __future__ import annotations

import os
import sqlite3

import pytest
from invariants import assert_intact
from typer.testing import CliRunner

from tracea_cli.cache import TuningCache
from tracea_cli.cache.db import error_kind
from tracea_cli.cli import app
from tracea_cli.errors import UsageError


@pytest.fixture(autouse=True)
def _helpers(mk_key, mk_trial):
    global make_key, make_trial
    make_key, make_trial = mk_key, mk_trial


def _filled(path, keys: int = 40, trials: int = 30):
    with TuningCache.open(path) as cache:
        for i in range(keys):
            key = make_key(64 + 16 * i)
            for b in range(trials):
                cache.record_trial(key, make_trial(b + 1, median_ms=1.0 + b))
            cache.set_winner(key, make_trial(1))
    con = sqlite3.connect(path)
    con.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    con.close()
    return path


def test_a_full_disk_says_full_keeps_every_trial_and_leaves_the_file_intact(cache_path):
    with TuningCache.open(cache_path) as cache:
        key = make_key(256)
        pages = cache._conn.execute("PRAGMA page_count").fetchone()[0]
        cache._conn.execute(f"PRAGMA max_page_count = {pages + 2}")  # SQLite's SQLITE_FULL from here on
        written = 0
        with pytest.raises(UsageError) as e:
            for b in range(10_000):
                cache.record_trial(key, make_trial(b + 1, reason="x" * 2000, status="compile_error"))
                written += 1
        assert "is full" in e.value.message and "intact" in e.value.message and "damaged" not in e.value.message
        assert "space" in e.value.hint
        assert written > 0
    assert_intact(cache_path)
    assert not list(cache_path.parent.glob("*.corrupt-*"))
    with TuningCache.open(cache_path) as cache:
        assert len(cache.trials(key)) == written  # every acknowledged trial is there


def test_sqlite_errors_are_told_apart_by_what_they_say_about_the_file():
    def err(code_name: str, text: str) -> sqlite3.Error:
        e = sqlite3.OperationalError(text)
        e.sqlite_errorname = code_name
        return e

    assert error_kind(err("SQLITE_FULL", "database or disk is full")) == "full"
    assert error_kind(err("SQLITE_CORRUPT", "database disk image is malformed")) == "damaged"
    assert error_kind(err("SQLITE_NOTADB", "file is not a database")) == "damaged"
    assert error_kind(err("SQLITE_BUSY", "database is locked")) == "locked"
    assert error_kind(err("SQLITE_READONLY", "attempt to write a readonly database")) == "readonly"
    assert error_kind(err("SQLITE_IOERR_WRITE", "disk I/O error")) == "io"


def test_a_cache_damaged_in_the_middle_is_moved_aside_and_a_new_one_started(tmp_path):
    path = _filled(tmp_path / "cache" / "tuning.sqlite3")
    size = path.stat().st_size
    assert size > 200_000
    with open(path, "r+b") as f:  # 20 KB of garbage in the middle, as a failing disk or a bad copy leaves it
        f.seek(size // 2)
        f.write(os.urandom(20_000))
    damaged = path.read_bytes()
    env = {"TRACEA_CACHE_DIR": str(path.parent), "TRACEA_DATA_DIR": str(tmp_path / "data"), "NO_COLOR": "1"}

    first = CliRunner().invoke(app, ["cache", "ls"], env=env)
    assert first.exit_code == 0, first.output
    said = "".join(first.output.split())  # the console folds long lines
    assert "damaged" in said and "movedittotuning.sqlite3.corrupt-" in said
    assert "Traceback" not in first.output
    moved = list(path.parent.glob("tuning.sqlite3.corrupt-*"))
    assert len(moved) == 1 and moved[0].read_bytes() == damaged  # kept as it was: nothing deleted

    with TuningCache.open(path) as cache:  # the new one works
        cache.record_trial(make_key(64), make_trial(1))
        assert len(cache.trials(make_key(64))) == 1
    second = CliRunner().invoke(app, ["cache", "ls"], env=env)
    assert second.exit_code == 0 and "warning" not in second.output


def test_damage_found_while_a_cache_is_open_is_survived_by_the_same_object(tmp_path):
    path = _filled(tmp_path / "tuning.sqlite3")
    seen: list[str] = []
    with TuningCache.open(path) as cache:
        cache.on_warning = seen.append
        with open(path, "r+b") as f:
            f.seek(path.stat().st_size // 2)
            f.write(os.urandom(20_000))
        cache._conn.execute("PRAGMA cache_size = 0")  # read the pages again from the file
        keys = [make_key(64 + 16 * i) for i in range(40)]
        found = [cache.trials(k) for k in keys]  # some reads meet the damage: replaced, then read on the new file
        cache.record_trial(keys[0], make_trial(99))
        assert len(cache.trials(keys[0])) >= 1
    assert seen and "damaged" in seen[0] and cache.warnings[-len(seen):] == seen
    assert any(len(t) == 0 for t in found)
    assert len(list(tmp_path.glob("tuning.sqlite3.corrupt-*"))) == 1
