"""What the default run takes of the slow sweeps: CI runs on a 2-core machine within 15 minutes, so the longest
sweeps keep a representative subset there, and TRACEA_SLOW_TESTS=1 runs every case (before a release, on a GPU
machine)."""

from __future__ import annotations

import os
from typing import Sequence, TypeVar

import pytest

SLOW_TESTS = os.environ.get("TRACEA_SLOW_TESTS", "").strip().lower() in {"1", "true", "yes", "on"}
opt_in = pytest.mark.skipif(not SLOW_TESTS, reason="opt in: TRACEA_SLOW_TESTS=1")

Case = TypeVar("Case")


def subset(cases: Sequence[Case], quick: Sequence[int]) -> list[Case]:
    """Every case with TRACEA_SLOW_TESTS=1, else the ones at the `quick` positions."""
    return list(cases) if SLOW_TESTS else [cases[i] for i in quick]
