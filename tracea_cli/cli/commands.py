"""Which modules provide which commands. Adding a command: write cli/NAME.py with `register(app)`, list it here."""

from __future__ import annotations

import importlib

COMMAND_MODULES = ("doctor", "tune", "bench", "export", "cache")


def register_all(app) -> None:
    """Register every command module's commands on the typer `app`."""
    for name in COMMAND_MODULES:
        importlib.import_module(f"tracea_cli.cli.{name}").register(app)
