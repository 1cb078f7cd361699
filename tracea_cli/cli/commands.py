"""Which modules provide which commands. Adding a command: write cli/NAME.py with `register(app)`, list it here."""

from __future__ import annotations

import importlib

from tracea_cli.cli import app

COMMAND_MODULES = ("doctor", "tune", "bench", "export", "cache")

for _name in COMMAND_MODULES:
    try:
        _module = importlib.import_module(f"tracea_cli.cli.{_name}")
    except ModuleNotFoundError as _e:  # a command still being built is simply absent
        if _e.name != f"tracea_cli.cli.{_name}":
            raise
        continue
    _module.register(app)
