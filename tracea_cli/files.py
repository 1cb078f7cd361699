"""Files a user gives us and files we write for them: whole or not at all, bounded when read, one sentence when not.

Writes go to a temporary file in the same folder and are renamed into place, so that a reader never sees half a
file and a failure leaves the old one. Reads of JSON documents are bounded in size and nesting, and every way one can
be wrong (missing, unreadable, not JSON, too large, too deep) is a `UsageError` that names the file.
"""

from __future__ import annotations

import json
import os
import re
import tempfile
from pathlib import Path
from typing import Any

from tracea_cli.errors import UsageError

MAX_JSON_BYTES = 256 << 20  # a user's JSON file larger than this is refused, not read into memory
MAX_JSON_DEPTH = 64  # objects and lists nested deeper than this are refused (no real document comes close)


def check_writable(path: Path, what: str = "output") -> Path:
    """Fail early, with exit code 2, when `path` cannot be written (before any long work)."""
    path = Path(path).expanduser()
    parent = path.parent if str(path.parent) else Path(".")
    if path.exists() and path.is_dir():
        raise UsageError(f"the {what} path {path} is a folder, not a file.", "Give a file name.")
    try:
        parent.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise UsageError(f"cannot create the folder {parent} for the {what}: {e.strerror}.", "Choose a writable path.") from None
    if not os.access(parent, os.W_OK):
        raise UsageError(f"cannot write the {what} to {path}: {parent} is not writable.", "Choose a writable path.")
    return path


def write_atomic(path: Path, data: str | bytes, what: str = "output") -> Path:
    """Write a file whole or not at all (a temporary file in the same folder, then a rename). Returns the path."""
    path = check_writable(Path(path), what)
    mode = "wb" if isinstance(data, bytes) else "w"
    tmp = None
    try:
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)  # mkstemp makes 0600; what we write for a user is an ordinary file
        with os.fdopen(fd, mode) as f:
            f.write(data)
        os.replace(tmp, path)
    except OSError as e:
        if tmp is not None and os.path.exists(tmp):
            os.unlink(tmp)
        raise UsageError(f"cannot write the {what} to {path}: {e.strerror}.", "Choose a writable path.") from None
    return path


def write_json_atomic(path: Path, data: Any, what: str = "output") -> Path:
    """`data` as indented JSON (no NaN), written whole or not at all."""
    return write_atomic(path, json.dumps(data, indent=1, allow_nan=False) + "\n", what)


def read_json(path: Path, what: str, hint: str) -> Any:
    """The JSON document at `path`. Raises UsageError naming `what` and the file (with `hint`) when it is missing,
    unreadable, larger than MAX_JSON_BYTES, nested deeper than MAX_JSON_DEPTH or not JSON."""
    path = Path(path).expanduser()
    try:
        if path.is_dir():
            raise UsageError(f"the {what} {path} is a folder, not a file.", hint)
        with open(path, "rb") as f:
            raw = f.read(MAX_JSON_BYTES + 1)
    except FileNotFoundError:
        raise UsageError(f"the {what} {path} does not exist.", hint) from None
    except OSError as e:
        raise UsageError(f"cannot read the {what} {path}: {e.strerror}.", hint) from None
    if len(raw) > MAX_JSON_BYTES:
        raise UsageError(f"the {what} {path} is larger than {MAX_JSON_BYTES >> 20} MiB, more than such a file holds.", hint)
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise UsageError(f"the {what} {path} is not text (UTF-8).", hint) from None
    if _depth(text) > MAX_JSON_DEPTH:
        raise UsageError(f"the {what} {path} nests objects or lists more than {MAX_JSON_DEPTH} deep.", hint)
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        raise UsageError(f"the {what} {path} is not valid JSON (line {e.lineno}: {e.msg}).", hint) from None


_STRING = re.compile(r'"(?:[^"\\]|\\.)*"')
_NOT_BRACKET = re.compile(r"[^\[\]{}]+")


def _depth(text: str) -> int:
    """How deeply brackets nest in JSON text, strings left out (an upper bound on the document's nesting)."""
    import numpy as np

    brackets = _NOT_BRACKET.sub("", _STRING.sub("", text)).encode()
    if not brackets:
        return 0
    steps = np.frombuffer(brackets, dtype=np.uint8)
    return int(np.cumsum(np.where((steps == ord("[")) | (steps == ord("{")), 1, -1)).max())
