"""A cache in a folder this process may not write is still readable: `cache ls/show/export` work, writes are refused
in one sentence, and a tune that is not a cache hit stops before it searches. As a non-root user the folder is
really made read-only (chmod); as root, whom permissions do not stop, `os.access` is made to say what it says to
others (an injected permission state; the code under test is not patched)."""

from __future__ import annotations

import json
import os
import stat

import pytest
from typer.testing import CliRunner

from tracea_cli.cache import TuningCache
from tracea_cli.cli import app
from tracea_cli.errors import UsageError


@pytest.fixture
def read_only_cache(tmp_path, mk_key, mk_trial, monkeypatch):
    folder = tmp_path / "cache"
    with TuningCache.open(folder / "tuning.sqlite3") as cache:
        key = mk_key(512)
        cache.record_trial(key, mk_trial(4, median_ms=2.0))
        cache.set_winner(key, mk_trial(4, median_ms=2.0))
    before = (folder / "tuning.sqlite3").read_bytes()
    if os.geteuid() == 0:
        real = os.access
        monkeypatch.setattr(os, "access", lambda p, mode, **kw: False if (mode & os.W_OK and os.path.abspath(p) ==
                                                                           str(folder)) else real(p, mode, **kw))
        yield folder, key, before
    else:
        folder.chmod(stat.S_IRUSR | stat.S_IXUSR)
        try:
            yield folder, key, before
        finally:
            folder.chmod(stat.S_IRWXU)


def _cli(folder, tmp_path, *args):
    env = {"TRACEA_CACHE_DIR": str(folder), "TRACEA_DATA_DIR": str(tmp_path / "data"), "NO_COLOR": "1",
           "COLUMNS": "200"}
    result = CliRunner().invoke(app, list(args), env=env)
    assert "Traceback" not in result.output, result.output
    return result


def test_reading_works(read_only_cache, tmp_path):
    folder, key, before = read_only_cache
    ls = _cli(folder, tmp_path, "cache", "ls", "--json")
    assert ls.exit_code == 0, ls.output
    show = _cli(folder, tmp_path, "cache", "show", key.id[:8])
    assert show.exit_code == 0 and "512" in show.output
    out = tmp_path / "exported.json"
    exported = _cli(folder, tmp_path, "cache", "export", str(out))
    assert exported.exit_code == 0, exported.output
    assert len(json.loads(out.read_text())["entries"]) == 1
    assert (folder / "tuning.sqlite3").read_bytes() == before


def test_writing_is_refused_in_one_sentence(read_only_cache, mk_key, mk_trial):
    folder, key, before = read_only_cache
    with TuningCache.open(folder / "tuning.sqlite3") as cache:
        assert cache.read_only and cache.winner(key) is not None
        with pytest.raises(UsageError, match="cannot write the tuning cache"):
            cache.record_trial(key, mk_trial(8))
    assert (folder / "tuning.sqlite3").read_bytes() == before


def test_a_tune_that_is_no_cache_hit_stops_before_it_searches(read_only_cache, tmp_path):
    folder, key, before = read_only_cache
    result = _cli(folder, tmp_path, "tune", "gemm", "--m", "96", "--backend", "cpu", "--budget", "2")
    assert result.exit_code == 2, result.output
    assert "read-only tuning cache" in result.output and "writable folder" in result.output
    assert (folder / "tuning.sqlite3").read_bytes() == before
