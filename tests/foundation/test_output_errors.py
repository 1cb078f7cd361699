"""Output that cannot be written is the destination's fault, told in one sentence: a full device (`> /dev/full`)
exits 1 with "could not write the output", not an "internal error", and prints no traceback. A real `tracea`
process."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest


def _env(tmp_path: Path) -> dict[str, str]:
    return {**os.environ, "TRACEA_CACHE_DIR": str(tmp_path / "cache"), "TRACEA_DATA_DIR": str(tmp_path / "data"),
            "NO_COLOR": "1"}


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="needs /dev/full (Linux)")
def test_a_full_stdout_is_one_sentence_and_exit_1(tmp_path):
    with open("/dev/full", "w") as full:
        done = subprocess.run([sys.executable, "-m", "tracea_cli", "cache", "ls", "--json"], env=_env(tmp_path),
                              stdout=full, stderr=subprocess.PIPE, text=True, timeout=120)
    assert done.returncode == 1
    assert "could not write the output: No space left on device." in done.stderr
    assert "internal error" not in done.stderr and "Traceback" not in done.stderr

