"""The cache file: WAL, bad files moved aside with their -wal/-shm, newer files refused, migrations, network file systems."""

from __future__ import annotations

import json
import sqlite3

import pytest

from tracea_cli.cache import TuningCache, db
from tracea_cli.errors import UsageError


def _pragma(path, name):
    conn = sqlite3.connect(path)
    try:
        return conn.execute(f"PRAGMA {name}").fetchone()[0]
    finally:
        conn.close()


def _moved(folder, kind):
    return sorted(p.name for p in folder.iterdir() if f".{kind}-" in p.name)


def test_a_new_file_is_a_tracea_cache_in_wal_mode(cache_path):
    with TuningCache.open(cache_path) as c:
        assert c.warnings == []
        assert c._conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        assert c._conn.execute("PRAGMA busy_timeout").fetchone()[0] == db.BUSY_TIMEOUT_MS
    assert _pragma(cache_path, "application_id") == db.APPLICATION_ID
    assert _pragma(cache_path, "user_version") == db.SCHEMA_VERSION


def test_an_empty_file_is_simply_started(cache_path):
    cache_path.parent.mkdir(parents=True)
    cache_path.write_bytes(b"")
    with TuningCache.open(cache_path) as c:
        assert c.warnings == []
    assert _pragma(cache_path, "application_id") == db.APPLICATION_ID


def test_a_corrupt_file_and_its_wal_are_moved_aside(cache_path, mk_key, mk_trial):
    folder = cache_path.parent
    folder.mkdir(parents=True)
    garbage = b"this is not an SQLite database, just bytes " * 100
    cache_path.write_bytes(garbage)
    (folder / "tuning.sqlite3-wal").write_bytes(b"\x00garbage wal\xff" * 50)
    (folder / "tuning.sqlite3-shm").write_bytes(b"\x01" * 64)

    with TuningCache.open(cache_path) as c:
        assert len(c.warnings) == 1 and "moved it to" in c.warnings[0] and "damaged" in c.warnings[0]
        c.record_trial(mk_key(), mk_trial())  # the new file works
        assert len(c.trials(mk_key())) == 1

    moved = _moved(folder, "corrupt")
    assert len(moved) == 3, moved
    main = next(folder / n for n in moved if not n.endswith(("-wal", "-shm")))
    assert main.read_bytes() == garbage  # kept as it was, for a post-mortem
    assert (folder / f"{main.name}-wal").read_bytes().startswith(b"\x00garbage wal")
    assert (folder / f"{main.name}-shm").exists()
    assert _pragma(cache_path, "application_id") == db.APPLICATION_ID


def test_a_database_with_a_damaged_header_is_moved_aside(cache_path, mk_key, mk_trial):
    with TuningCache.open(cache_path) as c:
        c.record_trial(mk_key(), mk_trial())
    data = bytearray(cache_path.read_bytes())
    data[16:100] = b"\xff" * 84  # page size, format numbers and counters: nonsense; the magic text intact
    cache_path.write_bytes(bytes(data))
    with TuningCache.open(cache_path) as c:
        assert len(c.warnings) == 1 and "damaged" in c.warnings[0], c.warnings
        assert c.keys() == []
    assert len([n for n in _moved(cache_path.parent, "corrupt") if not n.endswith(("-wal", "-shm"))]) == 1


def test_a_foreign_database_is_moved_aside_not_touched(cache_path):
    folder = cache_path.parent
    folder.mkdir(parents=True)
    conn = sqlite3.connect(cache_path)
    conn.execute("PRAGMA application_id = 1234")
    conn.execute("CREATE TABLE photos (id INTEGER PRIMARY KEY, name TEXT)")
    conn.execute("INSERT INTO photos (name) VALUES ('holiday.jpg')")
    conn.commit()
    conn.close()
    before = cache_path.read_bytes()

    with TuningCache.open(cache_path) as c:
        assert len(c.warnings) == 1 and "another application" in c.warnings[0]
        assert c.keys() == []

    (moved,) = _moved(folder, "foreign")
    assert (folder / moved).read_bytes() == before  # not even its journal mode was changed
    conn = sqlite3.connect(folder / moved)
    assert conn.execute("SELECT name FROM photos").fetchall() == [("holiday.jpg",)]
    conn.close()


def test_a_database_without_our_id_but_with_tables_is_foreign(cache_path):
    cache_path.parent.mkdir(parents=True)
    conn = sqlite3.connect(cache_path)
    conn.execute("CREATE TABLE t (x)")
    conn.commit()
    conn.close()
    with TuningCache.open(cache_path) as c:
        assert "another application" in c.warnings[0]
    assert len(_moved(cache_path.parent, "foreign")) == 1


def test_a_file_from_a_newer_tracea_is_refused_and_kept(cache_path):
    with TuningCache.open(cache_path):
        pass
    conn = sqlite3.connect(cache_path)
    conn.execute(f"PRAGMA user_version = {db.SCHEMA_VERSION + 1}")
    conn.commit()
    conn.close()
    with pytest.raises(UsageError, match="newer Tracea"):
        TuningCache.open(cache_path)
    assert _pragma(cache_path, "user_version") == db.SCHEMA_VERSION + 1
    assert _moved(cache_path.parent, "foreign") == [] and _moved(cache_path.parent, "corrupt") == []


# Layout 1, frozen as Tracea's first release wrote it.
LAYOUT_1 = (
    """CREATE TABLE keys (id TEXT PRIMARY KEY, op TEXT NOT NULL, backend TEXT NOT NULL, dtype TEXT NOT NULL,
        layout TEXT NOT NULL, shape TEXT NOT NULL, bucket TEXT NOT NULL, epilogue TEXT NOT NULL,
        device_class TEXT NOT NULL, source_hash TEXT NOT NULL, toolchain TEXT NOT NULL, key_schema INTEGER NOT NULL,
        created REAL NOT NULL, updated REAL NOT NULL)""",
    "CREATE INDEX keys_family ON keys (op, backend, dtype, layout, epilogue, device_class)",
    """CREATE TABLE trials (id INTEGER PRIMARY KEY, key_id TEXT NOT NULL REFERENCES keys (id) ON DELETE CASCADE,
        config_key TEXT NOT NULL, config TEXT NOT NULL, status TEXT NOT NULL, reason TEXT NOT NULL,
        samples_ms TEXT NOT NULL, median_ms REAL, cv REAL, timestamp REAL NOT NULL)""",
    "CREATE INDEX trials_key ON trials (key_id, config_key)",
    """CREATE TABLE winners (key_id TEXT PRIMARY KEY REFERENCES keys (id) ON DELETE CASCADE, config TEXT NOT NULL,
        status TEXT NOT NULL, reason TEXT NOT NULL, samples_ms TEXT NOT NULL, median_ms REAL NOT NULL, cv REAL,
        timestamp REAL NOT NULL)""",
)


def test_a_layout_1_file_is_migrated_in_place_keeping_its_data(cache_path, mk_key, mk_trial):
    key = mk_key(1024)
    cache_path.parent.mkdir(parents=True)
    conn = sqlite3.connect(cache_path)
    for statement in LAYOUT_1:
        conn.execute(statement)
    conn.execute(
        "INSERT INTO keys VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
        ("an old id", "gemm", "cpu", "fp32", "nn", json.dumps(key.sizes_dict), json.dumps(key.bucket), "none",
         key.device_class, key.source_hash, json.dumps(key.toolchain_dict), 1, 100.0, 100.0),
    )
    conn.execute(
        "INSERT INTO trials (key_id, config_key, config, status, reason, samples_ms, median_ms, cv, timestamp) "
        "VALUES (?, '{\"block\":32}', '{\"block\": 32}', 'ok', '', '[1.0, 1.1]', 1.05, 0.07, 100.0)",
        ("an old id",),
    )
    conn.execute(
        "INSERT INTO winners VALUES (?, '{\"block\": 32}', 'ok', '', '[1.0, 1.1]', 1.05, 0.07, 100.0)", ("an old id",)
    )
    conn.execute(f"PRAGMA application_id = {db.APPLICATION_ID}")
    conn.execute("PRAGMA user_version = 1")
    conn.commit()
    conn.close()

    with TuningCache.open(cache_path) as c:
        assert any("migrated from layout 1 to" in w for w in c.warnings)
        assert c.keys() == [key]  # under the id today's code gives the same key, its trials and winner with it
        (t,) = c.trials(key)
        assert (t.config, t.median_ms, t.rel_error, t.compile_s) == ({"block": 32}, 1.05, None, 0.0)
        assert c.winner(key).median_ms == 1.05
        assert c.search_state(key) is None
        c.record_search(key, strategy="bayes", budget=1, evaluations=1, converged=False)  # new table works
        c.set_baseline(key, "numpy", mk_trial(config={}, median_ms=2.0))
        c.record_trial(key, mk_trial(64, 0.9))
        assert c.is_hit(key, 1)
    assert _pragma(cache_path, "user_version") == db.SCHEMA_VERSION
    with TuningCache.open(cache_path) as c:  # opening again: nothing to migrate
        assert c.warnings == []


def test_every_older_layout_has_a_migration():
    assert sorted(db.MIGRATIONS) == list(range(1, db.SCHEMA_VERSION))


MOUNTS = """\
overlay / overlay rw,relatime 0 0
proc /proc proc rw 0 0
server:/export/home /home/team nfs4 rw,relatime,vers=4.2 0 0
//nas/share /mnt/nas cifs rw 0 0
sshfs#me@host: /mnt/ssh fuse.sshfs rw 0 0
tmpfs /home/team/local tmpfs rw 0 0
"""


@pytest.mark.parametrize(
    "path, fs, network",
    [
        ("/home/team/.cache/tracea", "nfs4", True),
        ("/home/team/local/cache", "tmpfs", False),  # the longest mount point wins
        ("/mnt/nas/x", "cifs", True),
        ("/mnt/ssh", "fuse.sshfs", True),
        ("/home/teamwork", "overlay", False),  # a prefix of a name is not a parent folder
        ("/var/cache", "overlay", False),
    ],
)
def test_network_file_systems_are_recognised(path, fs, network):
    assert db.filesystem_type(path, MOUNTS) == fs
    assert db.is_network_fs(fs) is network


def test_on_a_network_file_system_the_rollback_journal_is_used_and_said(cache_path, monkeypatch, mk_key, mk_trial):
    folder = str(cache_path.parent.parent)
    monkeypatch.setattr(db, "read_mounts", lambda: f"overlay / overlay rw 0 0\nsrv:/x {folder} nfs rw 0 0\n")
    with TuningCache.open(cache_path) as c:
        assert len(c.warnings) == 1 and "network file system (nfs)" in c.warnings[0] and "rollback journal" in c.warnings[0]
        assert c._conn.execute("PRAGMA journal_mode").fetchone()[0] == "delete"
        c.record_trial(mk_key(), mk_trial())
    assert not (cache_path.parent / "tuning.sqlite3-wal").exists()


def test_an_unwritable_folder_is_a_usage_error(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    with pytest.raises(UsageError, match="cannot create the cache folder"):
        TuningCache.open(blocker / "sub" / "tuning.sqlite3")
