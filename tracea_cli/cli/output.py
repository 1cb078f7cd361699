"""What every command shares for output: data on stdout, progress and diagnostics on stderr, safe file writes."""

from __future__ import annotations

import json
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

from tracea_cli.errors import UsageError


def stderr_console(no_color: bool = False):
    """A rich console on stderr; colour off when NO_COLOR is set or stderr is not a terminal."""
    from rich.console import Console

    return Console(stderr=True, no_color=no_color or "NO_COLOR" in os.environ, highlight=False)


def stdout_console(no_color: bool = False, width: int | None = None):
    from rich.console import Console

    return Console(no_color=no_color or "NO_COLOR" in os.environ, highlight=False, width=width)


def print_json(data: Any) -> None:
    """The command's result as JSON on stdout, and nothing else."""
    sys.stdout.write(json.dumps(data, indent=2, sort_keys=False, default=str) + "\n")
    sys.stdout.flush()


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
    """Write a file whole or not at all (temporary file in the same folder, then rename)."""
    path = check_writable(Path(path), what)
    mode = "wb" if isinstance(data, bytes) else "w"
    try:
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)  # mkstemp makes 0600; a report is an ordinary file
        with os.fdopen(fd, mode) as f:
            f.write(data)
        os.replace(tmp, path)
    except OSError as e:
        raise UsageError(f"cannot write the {what} to {path}: {e.strerror}.", "Choose a writable path.") from None
    return path
