"""What every command shares for output: data on stdout, progress and diagnostics on stderr (file writes: files.py)."""

from __future__ import annotations

import json
import os
import sys
from typing import Any


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
