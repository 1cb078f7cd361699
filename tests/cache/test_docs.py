"""The examples in docs/cache.md run, and the guide names every `tracea cache` command and option."""

from __future__ import annotations

import re
from pathlib import Path

DOC = Path(__file__).resolve().parents[2] / "docs" / "cache.md"


def test_the_python_example_runs(capsys):
    (block,) = re.findall(r"```python\n(.*?)```", DOC.read_text(), re.S)
    exec(compile(block, str(DOC), "exec"), {})
    assert "2 trials" in capsys.readouterr().out


def test_every_command_and_option_is_documented():
    import typer.main

    from tracea_cli.cli.cache import cache_app

    text = DOC.read_text()
    group = typer.main.get_command(cache_app)
    for name, command in group.commands.items():
        assert f"tracea cache {name}" in text, name
        for param in command.params:
            for opt in param.opts:
                if opt.startswith("--") and opt != "--help":
                    assert opt in text, f"{name} {opt}"
