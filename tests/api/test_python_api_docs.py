"""docs/python-api.md: its runnable example runs (the CPU one; the seed's snippet is run by the acceptance checks and
tests/api/test_seed_snippet.py), and every public name it promises exists."""

from __future__ import annotations

import re
from pathlib import Path

import tracea

DOC = (Path(__file__).resolve().parents[2] / "docs" / "python-api.md").read_text()
BLOCKS = re.findall(r"```python\n(.*?)```", DOC, re.S)


def test_the_cpu_example_runs(tmp_path, monkeypatch):
    monkeypatch.setenv("TRACEA_CACHE_DIR", str(tmp_path))
    (example,) = [b for b in BLOCKS if 'device="cpu"' in b]
    exec(compile(example, "docs/python-api.md", "exec"), {})


def test_the_public_names_are_the_documented_ones():
    for name in tracea.__all__:
        assert name.startswith("__") or f"`{name}`" in DOC, name
