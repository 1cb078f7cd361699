"""`--help` of every command: flags are shown without a value type (`--json`, not `--json <bool>`)."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from tracea_cli.cli import app


@pytest.mark.parametrize("command", [[], ["doctor"], ["tune"], ["tune", "gemm"], ["bench"], ["bench", "gemm"],
                                     ["export", "gemm"], ["cache", "ls"], ["cache", "prune"]])
def test_flags_show_no_type(command):
    result = CliRunner().invoke(app, [*command, "--help"], env={"COLUMNS": "200", "NO_COLOR": "1"})
    assert result.exit_code == 0, result.output
    assert "--help" in result.output and "<bool>" not in result.output
