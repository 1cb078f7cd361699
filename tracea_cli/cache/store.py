"""`TuningCache`: every trial, the winner and the search state per key, in one SQLite file shared by processes.

Each write is one transaction begun with BEGIN IMMEDIATE (the write lock is taken up front, so two writers queue on
SQLite's busy timeout instead of failing halfway); reads see a consistent snapshot. The tuning driver owns one
`TuningCache` in the parent process; workers never touch it.
"""

from __future__ import annotations

import functools
import json
import math
import os
import sqlite3
import threading
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, Mapping

from tracea_cli.cache import db
from tracea_cli.cache.records import (
    KEY_SCHEMA_VERSION,
    CacheKey,
    ImportReport,
    KeySummary,
    PruneReport,
    SearchState,
    Trial,
)
from tracea_cli.errors import UsageError
from tracea_cli.files import write_json_atomic
from tracea_cli.space import Value

Validator = Callable[[CacheKey, Mapping[str, Value]], "str | None"]

_DAY_S = 86_400.0


def _json(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"))


_KEY_COLUMNS = "id, op, backend, dtype, problem, sizes, device_class, arch, source_hash, toolchain, key_schema"
_N_KEY = len(_KEY_COLUMNS.split(","))
_TRIAL_COLUMNS = "config, status, reason, samples_ms, median_ms, cv, rel_error, compile_s, timestamp"


def _key_from_row(row: tuple) -> CacheKey:
    _, op, backend, dtype, problem, sizes, device_class, arch, source_hash, toolchain, key_schema = row
    return CacheKey(op=op, backend=backend, dtype=dtype, problem=json.loads(problem), sizes=json.loads(sizes),
                    device_class=device_class, arch=arch, source_hash=source_hash, toolchain=json.loads(toolchain),
                    schema_version=key_schema)


def _trial_from_row(row: tuple) -> Trial:
    config, status, reason, samples, median_ms, cv, rel_error, compile_s, timestamp = row
    return Trial(
        config=json.loads(config),
        status=status,
        reason=reason,
        samples_ms=tuple(json.loads(samples)),
        median_ms=median_ms,
        cv=cv,
        rel_error=rel_error,
        compile_s=compile_s or 0.0,
        timestamp=timestamp,
    )


def _trial_values(t: Trial) -> tuple:
    return (
        _json(dict(t.config)), t.status, t.reason, _json(list(t.samples_ms)),
        t.median_ms, t.cv, t.rel_error, t.compile_s, t.timestamp,
    )


def _log2_distance(a: Mapping[str, int], b: Mapping[str, int]) -> float:
    names = set(a) & set(b)
    return math.sqrt(sum((math.log2(a[n]) - math.log2(b[n])) ** 2 for n in names)) if names else math.inf


class _Damaged(Exception):
    """Raised inside the store when SQLite reports the file's content damaged; `_recovering` handles it."""

    def __init__(self, error: sqlite3.Error) -> None:
        super().__init__(str(error))
        self.error = error


def _inode(path: Path) -> int | None:
    try:
        return os.stat(path).st_ino
    except OSError:
        return None


def _recovering(method: Callable) -> Callable:
    """Run a cache method; when the file turns out damaged, move it aside, start a new one and run the method once more
    on it (so a command goes on, with a warning, instead of stopping on every run until someone moves the file)."""

    @functools.wraps(method)
    def run(self: "TuningCache", *args: Any, **kwargs: Any) -> Any:
        try:
            return method(self, *args, **kwargs)
        except _Damaged as e:
            self._start_afresh(e.error)
        try:
            return method(self, *args, **kwargs)
        except _Damaged as e:
            raise UsageError(f"the new tuning cache {self.path} was found damaged too ({e.error}).",
                             "Check the disk, or set TRACEA_CACHE_DIR to a folder on another disk.") from None

    return run


class TuningCache:
    """The tuning cache at one path. Open with `TuningCache.open(path)`; use as a context manager or `close()`.

    `warnings` holds what the caller should print (a damaged file moved aside, a network file system, a migration).
    """

    def __init__(self, conn: sqlite3.Connection, path: Path, warnings: list[str]) -> None:
        self._conn = conn
        self._lock = threading.Lock()
        self._inode = _inode(path)
        self.path = path
        self.warnings = warnings
        #: called with each warning that arises after opening (a file found damaged mid-run and replaced)
        self.on_warning: Callable[[str], None] | None = None
        #: opened for reading only (its folder is not writable here): lookups work, writes raise UsageError
        self.read_only = False

    @classmethod
    def open(cls, path: Path) -> "TuningCache":
        """Open the cache file at `path` (`Settings.cache_path`), creating its folder and file when absent.

        WAL journal on local disks, rollback journal on network file systems (with a warning). A file that is not
        a Tracea cache or fails to open is moved aside with its -wal/-shm and replaced (with a warning). Raises
        UsageError when the folder cannot be written or the file comes from a newer Tracea.
        """
        path = Path(path).expanduser()
        conn, warnings = db.open_database(path)
        cache = cls(conn, path, warnings)
        cache.read_only = db.folder_is_read_only(path)
        return cache

    def close(self) -> None:
        self._conn.close()

    def __enter__(self) -> "TuningCache":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ---- plumbing -------------------------------------------------------------------------------------------------

    @contextmanager
    def _write(self) -> Iterator[sqlite3.Connection]:
        """One write transaction: BEGIN IMMEDIATE ... COMMIT, rolled back on any exception."""
        with self._lock, self._sqlite_errors():
            self._conn.execute("BEGIN IMMEDIATE")
            try:
                yield self._conn
            except BaseException:
                if self._conn.in_transaction:  # SQLite has already rolled back after some errors (SQLITE_FULL)
                    self._conn.execute("ROLLBACK")
                raise
            self._conn.execute("COMMIT")

    @contextmanager
    def _read(self) -> Iterator[sqlite3.Connection]:
        with self._lock, self._sqlite_errors():
            yield self._conn

    @contextmanager
    def _sqlite_errors(self) -> Iterator[None]:
        try:
            yield
        except sqlite3.DatabaseError as e:
            if isinstance(e, (sqlite3.IntegrityError, sqlite3.ProgrammingError, sqlite3.InterfaceError)):
                raise
            kind = db.error_kind(e)
            if kind == "damaged":
                raise _Damaged(e) from None
            raise db.error_as_usage(self.path, e, kind) from None

    def _start_afresh(self, error: sqlite3.Error) -> None:
        """The file was found damaged while in use: move it aside (unless another process already has) and open a
        new one in its place. Nothing is deleted: the moved file keeps whatever SQLite can still read."""
        with self._lock:
            self._conn.close()
            moved = None
            with db.opening_lock(self.path):
                if _inode(self.path) == self._inode:
                    moved = db.move_aside(self.path, "corrupt")
            self._conn, warnings = db.open_database(self.path)
            self._inode = _inode(self.path)
        where = f"moved it to {moved.name}" if moved else "another process had already moved it aside"
        for w in [f"the tuning cache {self.path} was damaged ({error}); {where} and started a new one.", *warnings]:
            self.warnings.append(w)
            if self.on_warning:
                self.on_warning(w)

    @staticmethod
    def _touch_key(conn: sqlite3.Connection, key: CacheKey, now: float) -> None:
        conn.execute(
            "INSERT INTO keys (id, op, backend, dtype, problem, sizes, variant, bucket, device_class, arch, source_hash, "
            "toolchain, key_schema, created, updated) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?) "
            "ON CONFLICT (id) DO UPDATE SET updated = excluded.updated",
            (key.digest, *db.key_columns(key), now, now),
        )

    # ---- trials ---------------------------------------------------------------------------------------------------

    @_recovering
    def record_trial(self, key: CacheKey, trial: Trial) -> None:
        """Store one trial for `key` at once (its own transaction), so that an interrupted run loses nothing."""
        with self._write() as conn:
            self._touch_key(conn, key, time.time())
            conn.execute(
                f"INSERT INTO trials (key_id, config_key, {_TRIAL_COLUMNS}) VALUES (?,?,?,?,?,?,?,?,?,?,?)",
                (key.digest, trial.config_key, *_trial_values(trial)),
            )

    @_recovering
    def trials(self, key: CacheKey) -> list[Trial]:
        """Every trial stored for `key`, oldest first (failures included)."""
        with self._read() as conn:
            rows = conn.execute(
                f"SELECT {_TRIAL_COLUMNS} FROM trials WHERE key_id = ? ORDER BY timestamp, id", (key.digest,)
            ).fetchall()
        return [_trial_from_row(r) for r in rows]

    @_recovering
    def failed_configs(self, key: CacheKey) -> dict[str, tuple[str, str]]:
        """config_key -> (status, reason) of every configuration that failed for `key` (the latest failure wins).

        The tuner never tries these again for this key.
        """
        with self._read() as conn:
            rows = conn.execute(
                "SELECT config_key, status, reason FROM trials WHERE key_id = ? AND status != 'ok' ORDER BY timestamp, id",
                (key.digest,),
            ).fetchall()
        return {ck: (status, reason) for ck, status, reason in rows}

    # ---- winner and search state ----------------------------------------------------------------------------------

    @_recovering
    def set_winner(self, key: CacheKey, winner: Trial) -> None:
        """Store `winner` (a correct, timed trial) as the best configuration for `key`, replacing any earlier one."""
        if not winner.ok or winner.median_ms is None:
            raise ValueError("a winner must be a correct, timed trial (status ok with median_ms)")
        with self._write() as conn:
            self._put_winner(conn, key, winner, time.time())

    def _put_winner(self, conn: sqlite3.Connection, key: CacheKey, winner: Trial, now: float) -> None:
        self._touch_key(conn, key, now)
        conn.execute(
            f"INSERT OR REPLACE INTO winners (key_id, {_TRIAL_COLUMNS}) VALUES (?,?,?,?,?,?,?,?,?,?)",
            (key.digest, *_trial_values(winner)),
        )

    @_recovering
    def winner(self, key: CacheKey) -> Trial | None:
        """The stored winner for `key`, or None."""
        with self._read() as conn:
            row = conn.execute(f"SELECT {_TRIAL_COLUMNS} FROM winners WHERE key_id = ?", (key.digest,)).fetchone()
        return _trial_from_row(row) if row else None

    @_recovering
    def set_baseline(self, key: CacheKey, name: str, trial: Trial) -> None:
        """Store the vendor library's timing for `key`'s problem (`name`: cublas, numpy, ...), replacing any earlier
        one, so that a cache hit can report the speed-up without measuring."""
        if not trial.ok or trial.median_ms is None:
            raise ValueError("a baseline must be a correct, timed trial (status ok with median_ms)")
        with self._write() as conn:
            self._put_baseline(conn, key, name, trial, time.time())

    def _put_baseline(self, conn: sqlite3.Connection, key: CacheKey, name: str, trial: Trial, now: float) -> None:
        self._touch_key(conn, key, now)
        conn.execute(
            f"INSERT OR REPLACE INTO baselines (key_id, name, {_TRIAL_COLUMNS}) VALUES (?,?,?,?,?,?,?,?,?,?,?)",
            (key.digest, name, *_trial_values(trial)),
        )

    @_recovering
    def baseline(self, key: CacheKey) -> tuple[str, Trial] | None:
        """(name, trial) of the stored baseline for `key`, or None."""
        with self._read() as conn:
            row = conn.execute(f"SELECT name, {_TRIAL_COLUMNS} FROM baselines WHERE key_id = ?", (key.digest,)).fetchone()
        return (row[0], _trial_from_row(row[1:])) if row else None

    @_recovering
    def record_search(self, key: CacheKey, *, strategy: str, budget: int, evaluations: int, converged: bool) -> None:
        """Store how much search `key` has had: `evaluations` is the total spent on it so far (all runs), `budget`
        the one requested by the latest run. The start time of the first record is kept."""
        now = time.time()
        with self._write() as conn:
            self._touch_key(conn, key, now)
            conn.execute(
                "INSERT INTO searches (key_id, strategy, budget, evaluations, converged, started, updated) "
                "VALUES (?,?,?,?,?,?,?) ON CONFLICT (key_id) DO UPDATE SET strategy = excluded.strategy, "
                "budget = excluded.budget, evaluations = excluded.evaluations, converged = excluded.converged, "
                "updated = excluded.updated",
                (key.digest, strategy, int(budget), int(evaluations), int(bool(converged)), now, now),
            )

    @_recovering
    def search_state(self, key: CacheKey) -> SearchState | None:
        with self._read() as conn:
            row = conn.execute(
                "SELECT strategy, budget, evaluations, converged, started, updated FROM searches WHERE key_id = ?",
                (key.digest,),
            ).fetchone()
        if row is None:
            return None
        strategy, budget, evaluations, converged, started, updated = row
        return SearchState(strategy, budget, evaluations, bool(converged), started, updated)

    def is_hit(self, key: CacheKey, budget: int) -> bool:
        """True when `key` has a winner and its stored search spent at least `budget` evaluations or converged:
        the tuner then evaluates nothing and reports the stored winner."""
        state = self.search_state(key)
        if state is None or not (state.converged or state.evaluations >= budget):
            return False
        return self.winner(key) is not None

    @_recovering
    def forget(self, key: CacheKey) -> None:
        """Remove `key` with its trials, winner and search state (`tracea tune --force` starts afresh)."""
        with self._write() as conn:
            conn.execute("DELETE FROM keys WHERE id = ?", (key.digest,))

    # ---- lookups across keys --------------------------------------------------------------------------------------

    @_recovering
    def keys(self) -> list[CacheKey]:
        """Every key in the cache, most recently updated first."""
        with self._read() as conn:
            rows = conn.execute(f"SELECT {_KEY_COLUMNS} FROM keys ORDER BY updated DESC, id").fetchall()
        return [_key_from_row(r) for r in rows]

    @_recovering
    def summaries(self) -> list[KeySummary]:
        """One summary per key (trial and failure counts, winner time), most recently updated first."""
        with self._read() as conn:
            rows = conn.execute(
                f"SELECT {', '.join('k.' + c.strip() for c in _KEY_COLUMNS.split(','))}, "
                "(SELECT count(*) FROM trials t WHERE t.key_id = k.id), "
                "(SELECT count(*) FROM trials t WHERE t.key_id = k.id AND t.status != 'ok'), "
                "(SELECT median_ms FROM winners w WHERE w.key_id = k.id), k.updated "
                "FROM keys k ORDER BY k.updated DESC, k.id"
            ).fetchall()
        return [KeySummary(_key_from_row(r[:_N_KEY]), *r[_N_KEY:]) for r in rows]

    @_recovering
    def resolve(self, text: str) -> CacheKey:
        """The key whose id starts with `text` (the short id `tracea cache ls` shows, or any unique prefix).

        Raises UsageError when no key or several keys match.
        """
        prefix = text.strip().lower()
        if len(prefix) < 4 or any(c not in "0123456789abcdef" for c in prefix):
            raise UsageError(f"{text!r} is not a cache key id.", "Use an id from `tracea cache ls` (at least 4 hex digits).")
        with self._read() as conn:
            rows = conn.execute(
                f"SELECT {_KEY_COLUMNS} FROM keys WHERE substr(id, 1, ?) = ? LIMIT 2", (len(prefix), prefix)
            ).fetchall()
        if not rows:
            raise UsageError(f"no cache key has the id {text!r} in {self.path}.", "Run `tracea cache ls` to see the ids.")
        if len(rows) > 1:
            raise UsageError(f"several cache keys start with {text!r}.", "Give more digits of the id.")
        return _key_from_row(rows[0])

    @_recovering
    def nearest_winners(self, key: CacheKey, limit: int = 3) -> list[tuple[dict[str, int], dict[str, Value]]]:
        """Winners of other keys for the same op, backend, dtype, device class and non-size fields (any sizes, source
        hash or toolchain), nearest first by Euclidean distance between log2 sizes: (sizes, config) pairs for a warm
        start. A key of the very same sizes under another source hash or toolchain counts (distance 0): its winner
        is the best guess there is. A configuration appears once, with its nearest sizes."""
        with self._read() as conn:
            rows = conn.execute(
                "SELECT k.id, k.sizes, k.source_hash, w.config, w.median_ms FROM keys k JOIN winners w ON w.key_id = k.id "
                "WHERE k.op = ? AND k.backend = ? AND k.dtype = ? AND k.variant = ? AND k.device_class = ? "
                "AND k.key_schema = ?",
                (key.op, key.backend, key.dtype, db.canonical_json(key.variant), key.device_class, key.schema_version),
            ).fetchall()
        here = key.sizes_dict
        ranked = []
        for key_id, sizes_json, source_hash, config_json, median_ms in rows:
            if key_id == key.digest:
                continue
            sizes = json.loads(sizes_json)
            # Same distance: prefer results from the current kernel sources, then the faster winner.
            ranked.append((_log2_distance(here, sizes), source_hash != key.source_hash, median_ms, sizes, config_json))
        ranked.sort(key=lambda r: r[:3])
        out: list[tuple[dict[str, int], dict[str, Value]]] = []
        seen: set[str] = set()
        for *_, sizes, config_json in ranked:
            config = json.loads(config_json)
            canonical = _json(dict(sorted(config.items())))
            if canonical in seen:
                continue
            seen.add(canonical)
            out.append((sizes, config))
            if len(out) == limit:
                break
        return out

    @_recovering
    def find_winners(self, op: str, backend: str, dtype: str, problem: Mapping[str, Any]) -> list[tuple[CacheKey, Trial]]:
        """Winners for this exact problem (the op's problem key) on any device class and architecture (export takes
        them per architecture), fastest first."""
        wanted = db.canonical_json(dict(problem))
        with self._read() as conn:
            rows = conn.execute(
                f"SELECT {', '.join('k.' + c.strip() for c in _KEY_COLUMNS.split(','))}, "
                f"{', '.join('w.' + c.strip() for c in _TRIAL_COLUMNS.split(','))} "
                "FROM keys k JOIN winners w ON w.key_id = k.id "
                "WHERE k.op = ? AND k.backend = ? AND k.dtype = ? AND k.problem = ? ORDER BY w.median_ms",
                (op, backend, dtype, wanted),
            ).fetchall()
        return [(_key_from_row(row[:_N_KEY]), _trial_from_row(row[_N_KEY:])) for row in rows]

    # ---- maintenance ----------------------------------------------------------------------------------------------

    @_recovering
    def clear(self) -> int:
        """Remove every key, trial, winner and search state. Returns how many keys there were."""
        with self._write() as conn:
            n = conn.execute("SELECT count(*) FROM keys").fetchone()[0]
            conn.execute("DELETE FROM keys")
        return n

    @_recovering
    def prune(
        self,
        *,
        older_than_days: float | None = None,
        keep_failed: bool = True,
        is_current: Callable[[CacheKey], bool] | None = None,
        dry_run: bool = False,
        now: float | None = None,
    ) -> PruneReport:
        """Remove what can no longer help, in one transaction:

        - keys of another key schema version (they are never hit again);
        - keys for which `is_current(key)` is False (the kernel sources changed: their source hash is not current);
        - with `older_than_days`, keys not updated for that many days;
        - with `keep_failed=False`, failed trials (only those older than `older_than_days`, when it is given), so
          that the tuner tries those configurations again, after a driver or compiler fix, say.

        `dry_run` counts without removing. Returns what was (or would be) removed.
        """
        now = time.time() if now is None else now
        cutoff = None if older_than_days is None else now - older_than_days * _DAY_S
        # Asked before the write lock is taken: `is_current` may hash kernel sources.
        stale: set[str] = set()
        if is_current is not None:
            with self._read() as conn:
                rows = conn.execute(f"SELECT {_KEY_COLUMNS} FROM keys").fetchall()
            stale = {row[0] for row in rows if not is_current(_key_from_row(row))}
        try:
            with self._write() as conn:
                trials_before = conn.execute("SELECT count(*) FROM trials").fetchone()[0]
                doomed: list[str] = []
                for row in conn.execute(f"SELECT {_KEY_COLUMNS}, updated FROM keys").fetchall():
                    key = _key_from_row(row[:_N_KEY])
                    if (
                        key.schema_version != KEY_SCHEMA_VERSION
                        or row[0] in stale
                        or (cutoff is not None and row[_N_KEY] < cutoff)
                    ):
                        doomed.append(row[0])
                conn.executemany("DELETE FROM keys WHERE id = ?", [(d,) for d in doomed])
                if not keep_failed:
                    conn.execute(
                        "DELETE FROM trials WHERE status != 'ok' AND timestamp < ?", (now if cutoff is None else cutoff,)
                    )
                trials_after = conn.execute("SELECT count(*) FROM trials").fetchone()[0]
                report = PruneReport(len(doomed), trials_before - trials_after, dry_run=dry_run)
                if dry_run:
                    raise _Rollback(report)
        except _Rollback as r:
            return r.value
        return report

    # ---- sharing --------------------------------------------------------------------------------------------------

    def export(self, path: Path, keys: Iterable[CacheKey] | None = None) -> int:
        """Write the keys (all when None) with their trials, winners and search state to `path` as JSON in the
        documented format (docs/cache-format.md), atomically. Configurations and measurements only, never
        binaries. Returns the number of entries written."""

        data = self.export_data(keys)
        write_json_atomic(Path(path), data, "cache export")
        return len(data["entries"])

    def export_data(self, keys: Iterable[CacheKey] | None = None) -> dict[str, Any]:
        """The export document as a dict (what `export` writes)."""
        from tracea_cli.cache import transfer

        chosen = self.keys() if keys is None else list(keys)
        entries = [
            transfer.entry(key, self.trials(key), self.winner(key), self.search_state(key), self.baseline(key))
            for key in chosen
        ]
        return transfer.document(entries)

    @_recovering
    def import_(self, path: Path, validate: Validator) -> ImportReport:
        """Merge an export file into the cache, all or nothing.

        Every entry is checked first: the format, the key's fields, and each configuration (trials and winner)
        with `validate(key, config)`, which returns None or why the configuration is not in the op's search
        space. The first problem raises UsageError naming the entry, and nothing is imported. Then, in one
        transaction: trials not already present are added; an imported winner replaces the local one only when it
        is faster (or there is none); a baseline is taken only where there is none; search state keeps the larger
        evaluation count and any convergence.
        """
        from tracea_cli.cache import transfer

        entries = transfer.read_import(Path(path), validate)
        now = time.time()
        added = merged = trials_added = trials_skipped = winners_set = 0
        with self._write() as conn:
            for e in entries:
                exists = conn.execute("SELECT 1 FROM keys WHERE id = ?", (e.key.digest,)).fetchone() is not None
                self._touch_key(conn, e.key, now)
                added, merged = (added, merged + 1) if exists else (added + 1, merged)
                # Timestamps travel as ISO text with microseconds: compare them to the millisecond.
                present = {
                    (ck, round(ts, 3), med)
                    for ck, ts, med in conn.execute(
                        "SELECT config_key, timestamp, median_ms FROM trials WHERE key_id = ?", (e.key.digest,)
                    )
                }
                for t in e.trials:
                    if (t.config_key, round(t.timestamp, 3), t.median_ms) in present:
                        trials_skipped += 1
                        continue
                    conn.execute(
                        f"INSERT INTO trials (key_id, config_key, {_TRIAL_COLUMNS}) VALUES (?,?,?,?,?,?,?,?,?,?,?)",
                        (e.key.digest, t.config_key, *_trial_values(t)),
                    )
                    present.add((t.config_key, round(t.timestamp, 3), t.median_ms))
                    trials_added += 1
                if e.winner is not None:
                    row = conn.execute("SELECT median_ms FROM winners WHERE key_id = ?", (e.key.digest,)).fetchone()
                    if row is None or e.winner.median_ms < row[0]:
                        self._put_winner(conn, e.key, e.winner, now)
                        winners_set += 1
                if e.baseline is not None:
                    if conn.execute("SELECT 1 FROM baselines WHERE key_id = ?", (e.key.digest,)).fetchone() is None:
                        self._put_baseline(conn, e.key, e.baseline[0], e.baseline[1], now)
                if e.search is not None:
                    s = e.search
                    conn.execute(
                        "INSERT INTO searches (key_id, strategy, budget, evaluations, converged, started, updated) "
                        "VALUES (?,?,?,?,?,?,?) ON CONFLICT (key_id) DO UPDATE SET "
                        "evaluations = max(evaluations, excluded.evaluations), budget = max(budget, excluded.budget), "
                        "converged = max(converged, excluded.converged), started = min(started, excluded.started), "
                        "updated = max(updated, excluded.updated)",
                        (e.key.digest, s.strategy, s.budget, s.evaluations, int(s.converged), s.started, s.updated),
                    )
        return ImportReport(len(entries), added, merged, trials_added, trials_skipped, winners_set)


class _Rollback(Exception):
    """Raised inside a write transaction to undo it and hand back a value (a dry run)."""

    def __init__(self, value: Any) -> None:
        super().__init__("rollback")
        self.value = value

