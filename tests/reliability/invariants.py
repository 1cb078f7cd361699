"""The four invariants every fault-injection test checks after the fault, in one place:

1. no trial that was acknowledged is lost (each one the run reported is in the cache, with the status it reported);
2. no file is damaged by us (the cache passes SQLite's integrity check; a file moved aside is byte for byte the one
   that was there);
3. every failure has a typed record (a status of backends.base.Status and a reason, never a bare "error");
4. the user gets an exit code and one sentence ("error: ..." on one line, no traceback, no internal error).
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

from tracea_cli.backends.base import Status

TYPED = {s.value for s in Status}


def integrity(path: Path) -> str:
    """SQLite's own verdict on the file, read-only ("ok" for an intact database)."""
    con = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=30)
    try:
        return con.execute("PRAGMA integrity_check").fetchone()[0]
    finally:
        con.close()


def stored_trials(path: Path) -> list[tuple[str, str, str]]:
    """Every trial in the cache as (space.config_key of its configuration, status, reason), read-only."""
    con = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=30)
    try:
        return [(c, s, r or "") for c, s, r in con.execute("SELECT config_key, status, reason FROM trials")]
    finally:
        con.close()


def assert_intact(path: Path) -> None:
    assert path.exists(), f"{path} is gone"
    assert integrity(path) == "ok", f"{path} is damaged"


def assert_typed(path: Path) -> None:
    for config, status, reason in stored_trials(path):
        assert status in TYPED, f"trial {config} has an untyped status {status!r}"
        if status != Status.OK.value:
            assert reason.strip(), f"the failed trial {config} ({status}) has no reason"


def assert_acknowledged_kept(path: Path, acknowledged: dict[str, str]) -> None:
    """`acknowledged`: space.config_key(config) -> status, as the run reported them."""
    stored = {config: status for config, status, _ in stored_trials(path)}
    for config, status in acknowledged.items():
        assert config in stored, f"the acknowledged trial {config} is not in the cache"
        assert stored[config] == status, f"trial {config}: reported {status}, stored {stored[config]}"


def assert_one_sentence(exit_code: int, stderr: str, expected_code: int = 2) -> None:
    assert exit_code == expected_code, f"exit {exit_code}, expected {expected_code}: {stderr}"
    assert "Traceback" not in stderr and "internal error" not in stderr, stderr
    errors = [line for line in stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1, f"expected one 'error:' sentence, got: {stderr!r}"
