"""The cache file: opening it safely, its table layout, and migrations from older layouts.

A Tracea cache is an SQLite file whose header carries `APPLICATION_ID` and, as `user_version`, the layout version
`SCHEMA_VERSION`. Opening never runs a full integrity check (it would read the whole file on every `tracea tune`);
it trusts SQLite to report a damaged file when it reads the header and the schema. A file that is not a database, is
another application's database, or fails to open is moved aside (with its `-wal` and `-shm`), and a new one started.
"""

from __future__ import annotations

import datetime as _dt
import json
import os
import sqlite3
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Callable, Iterator

from tracea_cli.errors import UsageError

#: 'TRCA' in ASCII: SQLite's header field that says which application a file belongs to.
APPLICATION_ID = 0x54524341

#: Version of the table layout (PRAGMA user_version). Older files are migrated with `MIGRATIONS`.
SCHEMA_VERSION = 3

#: How long a writer waits for another process's transaction before giving up (milliseconds).
BUSY_TIMEOUT_MS = 30_000

#: File-system types on which SQLite's WAL mode is unsafe (it needs shared memory between the processes that open
#: the file, which a network or FUSE file system does not give): the cache falls back to a rollback journal.
NETWORK_FS_TYPES = frozenset(
    {"nfs", "nfs4", "cifs", "smb", "smb2", "smb3", "smbfs", "fuse.sshfs", "sshfs", "9p", "lustre", "gpfs",
     "beegfs", "glusterfs", "fuse.glusterfs", "cephfs", "ceph", "afs", "ncpfs", "davfs", "fuse.s3fs",
     "fuse.gcsfuse", "fuse.rclone", "virtiofs", "vboxsf"}
)

# The current layout, used for new files. Times are Unix seconds (REAL); JSON columns hold canonical JSON text.
CURRENT_SCHEMA = (
    """CREATE TABLE keys (
        id TEXT PRIMARY KEY,            -- CacheKey.digest
        op TEXT NOT NULL,
        backend TEXT NOT NULL,
        dtype TEXT NOT NULL,
        problem TEXT NOT NULL,          -- JSON object: the op's own problem key (sizes included)
        sizes TEXT NOT NULL,            -- JSON object, sizes in the op's order
        variant TEXT NOT NULL,          -- canonical JSON of the problem's fields that are not sizes
        bucket TEXT NOT NULL,           -- JSON object, log2 of each size rounded
        device_class TEXT NOT NULL,
        arch TEXT,
        source_hash TEXT NOT NULL,
        toolchain TEXT NOT NULL,        -- JSON object of versions
        key_schema INTEGER NOT NULL,
        created REAL NOT NULL,
        updated REAL NOT NULL
    )""",
    "CREATE INDEX keys_family ON keys (op, backend, dtype, variant, device_class)",
    """CREATE TABLE trials (
        id INTEGER PRIMARY KEY,
        key_id TEXT NOT NULL REFERENCES keys (id) ON DELETE CASCADE,
        config_key TEXT NOT NULL,       -- space.config_key(config)
        config TEXT NOT NULL,           -- JSON object
        status TEXT NOT NULL,
        reason TEXT NOT NULL,
        samples_ms TEXT NOT NULL,       -- JSON list of milliseconds
        median_ms REAL,
        cv REAL,
        rel_error REAL,
        compile_s REAL NOT NULL DEFAULT 0,
        timestamp REAL NOT NULL
    )""",
    "CREATE INDEX trials_key ON trials (key_id, config_key)",
    """CREATE TABLE winners (
        key_id TEXT PRIMARY KEY REFERENCES keys (id) ON DELETE CASCADE,
        config TEXT NOT NULL,
        status TEXT NOT NULL,
        reason TEXT NOT NULL,
        samples_ms TEXT NOT NULL,
        median_ms REAL NOT NULL,
        cv REAL,
        rel_error REAL,
        compile_s REAL NOT NULL DEFAULT 0,
        timestamp REAL NOT NULL
    )""",
    """CREATE TABLE baselines (
        key_id TEXT PRIMARY KEY REFERENCES keys (id) ON DELETE CASCADE,
        name TEXT NOT NULL,             -- the vendor library timed on the same problem (cublas, numpy, ...)
        config TEXT NOT NULL,
        status TEXT NOT NULL,
        reason TEXT NOT NULL,
        samples_ms TEXT NOT NULL,
        median_ms REAL NOT NULL,
        cv REAL,
        rel_error REAL,
        compile_s REAL NOT NULL DEFAULT 0,
        timestamp REAL NOT NULL
    )""",
    """CREATE TABLE searches (
        key_id TEXT PRIMARY KEY REFERENCES keys (id) ON DELETE CASCADE,
        strategy TEXT NOT NULL,
        budget INTEGER NOT NULL,
        evaluations INTEGER NOT NULL,
        converged INTEGER NOT NULL,
        started REAL NOT NULL,
        updated REAL NOT NULL
    )""",
)

def _migrate_keys_to_problems(conn: sqlite3.Connection) -> None:
    """Layout 2 -> 3: keys carry the op's own problem key and its sizes instead of GEMM's layout/shape/epilogue
    columns (cache/legacy.py), so their ids change; every trial, winner, baseline and search follows its key."""
    from tracea_cli.cache.legacy import from_legacy

    rows = conn.execute("SELECT id, op, backend, dtype, layout, shape, epilogue, device_class, arch, source_hash, "
                        "toolchain, key_schema, created, updated FROM keys").fetchall()
    conn.execute(CURRENT_SCHEMA[0].replace("CREATE TABLE keys (", "CREATE TABLE keys_new (", 1))
    for (old_id, op, backend, dtype, layout, shape, epilogue, device_class, arch, source_hash, toolchain, key_schema,
         created, updated) in rows:
        key = from_legacy(op=op, backend=backend, dtype=dtype, layout=layout, shape=json.loads(shape),
                          epilogue=epilogue, device_class=device_class, arch=arch, source_hash=source_hash,
                          toolchain=json.loads(toolchain), schema_version=key_schema)
        conn.execute("INSERT OR IGNORE INTO keys_new VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
                     (key.digest, *key_columns(key), created, updated))
        for table in ("trials", "winners", "baselines", "searches"):
            conn.execute(f"UPDATE {table} SET key_id = ? WHERE key_id = ?", (key.digest, old_id))
    conn.execute("DROP INDEX keys_family")
    conn.execute("DROP TABLE keys")
    conn.execute("ALTER TABLE keys_new RENAME TO keys")
    conn.execute(CURRENT_SCHEMA[1])


def key_columns(key: Any) -> tuple:
    """A key's columns after its id, in table order (up to `created`)."""
    return (key.op, key.backend, key.dtype, canonical_json(key.problem_dict), json.dumps(key.sizes_dict),
            canonical_json(key.variant), json.dumps(key.bucket), key.device_class, key.arch, key.source_hash,
            json.dumps(key.toolchain_dict), key.schema_version)


def canonical_json(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"))


#: MIGRATIONS[v] turns layout v into layout v + 1: SQL statements, or functions of the connection. Layout 1 (Tracea's
#: first cache) had no `arch` column, no error or compile time per trial, no baselines and no search state; layout 2
#: keyed GEMM problems by layout, shape and epilogue columns.
MIGRATIONS: dict[int, tuple[str | Callable[[sqlite3.Connection], None], ...]] = {
    1: (
        "ALTER TABLE keys ADD COLUMN arch TEXT",
        "ALTER TABLE trials ADD COLUMN rel_error REAL",
        "ALTER TABLE trials ADD COLUMN compile_s REAL NOT NULL DEFAULT 0",
        "ALTER TABLE winners ADD COLUMN rel_error REAL",
        "ALTER TABLE winners ADD COLUMN compile_s REAL NOT NULL DEFAULT 0",
        CURRENT_SCHEMA[-2],  # the baselines table
        CURRENT_SCHEMA[-1],  # the searches table
    ),
    2: (_migrate_keys_to_problems,),
}


def error_kind(e: sqlite3.Error) -> str:
    """What an SQLite error says about the cache: "damaged" (the file's content: SQLITE_CORRUPT, SQLITE_NOTADB),
    "full" (no space left: SQLITE_FULL), "locked" (another process holds it past the busy timeout), "readonly"
    (no permission to write), "io" (the disk or file system failed), or "other". Only "damaged" is the file's fault;
    moving a file aside for any other reason would throw away good trials."""
    name = getattr(e, "sqlite_errorname", "") or ""
    text = str(e).lower()
    if name.startswith(("SQLITE_CORRUPT", "SQLITE_NOTADB")) or "malformed" in text or "not a database" in text:
        return "damaged"
    if name.startswith("SQLITE_FULL") or "disk is full" in text:
        return "full"
    if name.startswith(("SQLITE_BUSY", "SQLITE_LOCKED")) or "locked" in text:
        return "locked"
    if name.startswith(("SQLITE_READONLY", "SQLITE_PERM", "SQLITE_CANTOPEN", "SQLITE_AUTH")) or "readonly" in text:
        return "readonly"
    if name.startswith("SQLITE_IOERR") or "disk i/o error" in text:
        return "io"
    return "other"


def error_as_usage(path: Path, e: sqlite3.Error, kind: str) -> UsageError:
    """The one sentence (and hint) for an SQLite error that is not damage to the file."""
    if kind == "full":
        return UsageError(f"the disk holding the tuning cache {path} is full: the last write was not made (the cache "
                          "itself is intact).", "Free some space there, or set TRACEA_CACHE_DIR to a folder on another disk.")
    if kind == "locked":
        return UsageError(f"the tuning cache {path} stayed locked by another process for {BUSY_TIMEOUT_MS // 1000} s.",
                          "Wait for the other tracea process to finish, then run again.")
    if kind == "readonly":
        return UsageError(f"cannot write the tuning cache {path} ({e}).",
                          "Check the permissions of the file and its folder, or set TRACEA_CACHE_DIR to a writable folder.")
    if kind == "io":
        return UsageError(f"reading or writing the tuning cache {path} failed ({e}): the disk or file system reported "
                          "an error, the file itself was not found damaged.", "Check the disk, then run again.")
    return UsageError(f"cannot use the tuning cache {path}: {e}.", "Set TRACEA_CACHE_DIR (or --cache) to another folder.")


class ForeignFile(Exception):
    """The file is an SQLite database of another application (or of no known layout)."""


def read_mounts() -> str:
    """The mount table (`/proc/mounts`), or '' where there is none (macOS, Windows)."""
    try:
        return Path("/proc/mounts").read_text()
    except OSError:
        return ""


def filesystem_type(path: Path, mounts: str) -> str | None:
    """The type of the file system holding `path`, from mount-table text (longest matching mount point wins)."""
    target = os.path.realpath(path)
    best, best_type = "", None
    for line in mounts.splitlines():
        parts = line.split()
        if len(parts) < 3:
            continue
        point = parts[1].replace("\\040", " ")
        inside = target == point or target.startswith(point.rstrip("/") + "/") or point == "/"
        if inside and len(point) >= len(best):
            best, best_type = point, parts[2]
    return best_type


def is_network_fs(fs_type: str | None) -> bool:
    if fs_type is None:
        return False
    return fs_type in NETWORK_FS_TYPES or fs_type.startswith(("smb", "nfs", "fuse.sshfs"))


def connect(path: Path) -> sqlite3.Connection:
    """A connection in autocommit mode (transactions are explicit) that waits for other writers."""
    conn = sqlite3.connect(path, timeout=BUSY_TIMEOUT_MS / 1000, isolation_level=None, check_same_thread=False)
    conn.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
    conn.execute("PRAGMA foreign_keys = ON")
    return conn


def set_journal(conn: sqlite3.Connection, *, network: bool) -> str:
    """WAL on a local disk, the rollback journal (DELETE) on a network file system. Returns the mode in effect."""
    wanted = "delete" if network else "wal"
    mode = str(conn.execute(f"PRAGMA journal_mode = {wanted}").fetchone()[0]).lower()
    # WAL survives a process crash with synchronous=NORMAL; the rollback journal needs FULL.
    conn.execute("PRAGMA synchronous = NORMAL" if mode == "wal" else "PRAGMA synchronous = FULL")
    return mode


def _header(conn: sqlite3.Connection) -> tuple[int, int, int]:
    app = conn.execute("PRAGMA application_id").fetchone()[0]
    version = conn.execute("PRAGMA user_version").fetchone()[0]
    tables = conn.execute("SELECT count(*) FROM sqlite_master").fetchone()[0]
    return app, version, tables


def prepare(conn: sqlite3.Connection) -> int:
    """Make the file a current Tracea cache: create it if empty, migrate it if older. Returns the version found.

    Raises ForeignFile for another application's database, UsageError for a file from a newer Tracea, and lets
    sqlite3.DatabaseError through for a damaged one. The quick path (a current file) takes no write lock.
    """
    app, version, tables = _header(conn)
    if app == APPLICATION_ID and version == SCHEMA_VERSION:
        return version
    conn.execute("PRAGMA foreign_keys = OFF")  # a migration rebuilds tables; their references are checked below
    conn.execute("BEGIN IMMEDIATE")  # another process may be creating or migrating it right now: look again
    try:
        app, version, tables = _header(conn)
        if app == 0 and version == 0 and tables == 0:
            for statement in CURRENT_SCHEMA:
                conn.execute(statement)
        elif app != APPLICATION_ID:
            raise ForeignFile(f"application_id {app:#x}, {tables} schema objects")
        elif version > SCHEMA_VERSION:
            raise UsageError(
                f"the tuning cache {conn_path(conn)} was written by a newer Tracea (layout {version}; this one knows "
                f"up to {SCHEMA_VERSION}).",
                "Upgrade Tracea, or point TRACEA_CACHE_DIR (or --cache) at another folder.",
            )
        elif version not in MIGRATIONS and version != SCHEMA_VERSION:
            raise ForeignFile(f"unknown layout version {version}")
        else:
            for v in range(version, SCHEMA_VERSION):
                for step in MIGRATIONS[v]:
                    step(conn) if callable(step) else conn.execute(step)
            broken = conn.execute("PRAGMA foreign_key_check").fetchall()
            if broken:
                raise sqlite3.DatabaseError(f"migrating left {len(broken)} rows without their key")
        conn.execute(f"PRAGMA application_id = {APPLICATION_ID}")
        conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
        conn.execute("COMMIT")
    except BaseException:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        raise
    finally:
        conn.execute("PRAGMA foreign_keys = ON")
    return version


def conn_path(conn: sqlite3.Connection) -> str:
    row = conn.execute("PRAGMA database_list").fetchone()
    return row[2] if row else "?"


def move_aside(path: Path, why: str) -> Path:
    """Rename the file and its `-wal`/`-shm` with a timestamp suffix (`tuning.sqlite3.corrupt-20261129T184501`,
    `...-wal`, `...-shm`, so the set still opens together). Returns the new name of the main file."""
    stamp = _dt.datetime.now().strftime("%Y%m%dT%H%M%S")
    base = path.with_name(f"{path.name}.{why}-{stamp}")
    n = 1
    while base.exists() or Path(f"{base}-wal").exists():
        n += 1
        base = path.with_name(f"{path.name}.{why}-{stamp}-{n}")
    for suffix in ("", "-wal", "-shm", "-journal"):
        src = Path(f"{path}{suffix}")
        if src.exists():
            os.replace(src, f"{base}{suffix}")
    return base


@contextmanager
def opening_lock(path: Path) -> Iterator[None]:
    """An advisory lock (flock on `.<name>.lock` beside the cache) held while a process inspects, creates, migrates or
    replaces the file. Without it, one process could move a bad file aside while another still inspects it by name,
    and SQLite, which finds a database's -wal by name, would then touch the new file's WAL. Held for milliseconds;
    work on an open cache never takes it. Where flock is missing (Windows), no lock."""
    try:
        import fcntl
    except ImportError:
        yield
        return
    with open(path.with_name(f".{path.name}.lock"), "a+") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def open_database(path: Path) -> tuple[sqlite3.Connection, list[str]]:
    """Open (creating, migrating, or replacing a bad file) the cache at `path`. Returns the connection and the
    warnings the caller should print. Raises UsageError only when the folder is unusable or the file is newer."""
    warnings: list[str] = []
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise UsageError(
            f"cannot create the cache folder {path.parent}: {e.strerror}.",
            "Set TRACEA_CACHE_DIR (or --cache) to a writable folder.",
        ) from None
    if folder_is_read_only(path):
        return _open_read_only(path), [f"the cache folder {path.parent} is read-only here: reading only (tuning "
                                       "results found there are used; new ones cannot be stored)."]
    fs_type = filesystem_type(path.parent, read_mounts())
    network = is_network_fs(fs_type)
    if network:
        warnings.append(
            f"the tuning cache is on a network file system ({fs_type}), where SQLite's WAL mode is unsafe: using a "
            "rollback journal instead (slower when several processes write)."
        )
    try:
        with opening_lock(path):
            conn = _open_locked(path, network, warnings)
    except OSError as e:  # the lock file: the folder is not writable
        raise UsageError(
            f"cannot write in the cache folder {path.parent}: {e.strerror}.",
            "Set TRACEA_CACHE_DIR (or --cache) to a writable folder.",
        ) from None
    return conn, warnings


def folder_is_read_only(path: Path) -> bool:
    """True when this process may not write in the cache file's folder (so it can open the cache only to read)."""
    return path.parent.is_dir() and not os.access(path.parent, os.W_OK)


def _open_read_only(path: Path) -> sqlite3.Connection:
    """The cache in a folder this process may not write: opened read-only (no lock file, no journal change, no
    migration), for `cache ls/show/export` and tunes that are cache hits. A write raises SQLite's "readonly" error,
    which the store turns into one sentence."""
    if not path.is_file():
        raise UsageError(f"there is no tuning cache at {path}, and its folder is read-only.",
                         "Set TRACEA_CACHE_DIR (or --cache) to a writable folder.")
    last: Exception | None = None
    for options in ("mode=ro", "mode=ro&immutable=1"):  # WAL files that cannot be made: read the file as it is
        try:
            conn = sqlite3.connect(f"file:{path}?{options}", uri=True, timeout=BUSY_TIMEOUT_MS / 1000,
                                   isolation_level=None, check_same_thread=False)
            app, version, tables = _header(conn)
        except sqlite3.Error as e:
            last = e
            continue
        if app != APPLICATION_ID or version != SCHEMA_VERSION:
            conn.close()
            newer = app == APPLICATION_ID and version > SCHEMA_VERSION
            raise UsageError(f"the tuning cache {path} is read-only here and " + (
                f"was written by a newer Tracea (layout {version})." if newer else
                f"is not a current Tracea cache (layout {version}): it cannot be migrated or replaced without write "
                "access."), "Open it once where its folder is writable, or set TRACEA_CACHE_DIR to a writable folder.")
        return conn
    raise UsageError(f"cannot read the tuning cache {path} ({last}).", "Check the file's permissions.")


def _open_locked(path: Path, network: bool, warnings: list[str]) -> sqlite3.Connection:
    for attempt in (1, 2):
        if _not_sqlite(path):
            # Moved before SQLite opens it: SQLite deletes a -wal it cannot use when it closes such a file.
            moved = move_aside(path, "corrupt")
            warnings.append(
                f"the tuning cache {path} was damaged (not an SQLite database); moved it to {moved.name} "
                "with its -wal/-shm and started a new one."
            )
        conn = None
        try:
            conn = connect(path)
            app, version, tables = _header(conn)
            if not (app == APPLICATION_ID or (app == 0 and version == 0 and tables == 0)):
                # Told before the journal mode is set: another application's file is never written to.
                raise ForeignFile(f"application_id {app:#x}, {tables} schema objects")
            mode = set_journal(conn, network=network)
            found = prepare(conn)
        except (sqlite3.DatabaseError, ForeignFile) as e:
            if conn is not None:
                conn.close()
            if isinstance(e, sqlite3.DatabaseError) and error_kind(e) in ("full", "locked", "readonly", "io"):
                raise error_as_usage(path, e, error_kind(e)) from None  # the file is not at fault: keep it
            if attempt == 2:
                raise UsageError(
                    f"cannot open the tuning cache {path}: {e}.", "Set TRACEA_CACHE_DIR (or --cache) to another folder."
                ) from None
            kind = "foreign" if isinstance(e, ForeignFile) else "corrupt"
            moved = move_aside(path, kind)
            what = "another application's database" if kind == "foreign" else "damaged"
            warnings.append(f"the tuning cache {path} was {what} ({e}); moved it to {moved.name} and started a new one.")
            continue
        except sqlite3.Error as e:  # an I/O or permission problem, not the file's content
            if conn is not None:
                conn.close()
            raise UsageError(
                f"cannot open the tuning cache {path}: {e}.", "Check the folder's permissions, or set TRACEA_CACHE_DIR."
            ) from None
        except BaseException:
            if conn is not None:
                conn.close()
            raise
        if mode != ("delete" if network else "wal"):
            warnings.append(f"SQLite kept the {mode} journal for {path}; concurrent writers may wait longer.")
        if 0 < found < SCHEMA_VERSION:
            warnings.append(f"the tuning cache {path} was migrated from layout {found} to {SCHEMA_VERSION}.")
        return conn
    raise AssertionError("unreachable")


SQLITE_MAGIC = b"SQLite format 3\x00"


def _not_sqlite(path: Path) -> bool:
    """True when `path` holds bytes that do not start like an SQLite database (an empty file is a new database)."""
    try:
        with open(path, "rb") as f:
            head = f.read(len(SQLITE_MAGIC))
    except FileNotFoundError:
        return False
    except OSError:
        return False  # unreadable: let SQLite report it
    return len(head) > 0 and head != SQLITE_MAGIC
